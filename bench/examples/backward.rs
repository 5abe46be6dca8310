//! The backward products against the dense cuBLAS products they replace (issue 44): `A^T @ B` (the input
//! gradient) and the block SDDMM (the weight gradient), and a block-sparse linear layer's forward + backward
//! against the three dense GEMMs of `nn.Linear`, interleaved launch by launch in one process, CUDA events around each
//! launch (every launch here runs for well over 50 us), medians of 20 after 3 warm-up rounds.
//!
//! On a Hopper GPU the library's launches take the sm_90a kernels where it has them (bs 64 and 128; the SDDMM on the
//! uploaded structure's tile lists, and timed without them too: the plan column's last figure); the sm_80 template's
//! kernels (`Policy::hopper` off, the same launches through a second `Gpu` on the same stream) are timed in the
//! same interleaving, column "sm_80 ms".
//!
//! Each product is checked against the f64 oracle on a sample before it is timed. Operands: f16, f32 accumulation
//! and f32 outputs (cuBLAS: `cublasGemmEx` f16 x f16 -> f32). The layer's operands are stored as the layer holds
//! them: `x (tokens x in)`, `dy (tokens x out)` row-major, so dX = dy @ W is `W^T @ dy^T` with column-major views and
//! dW = dy^T @ x is the SDDMM of `X = dy^T`, `Y = x^T` (column-major views), no transpose made.
//!
//! `cargo run --release -p sparsek-bench --example backward`

use std::error::Error;

use cudarc::driver::{CudaSlice, DevicePtr};
use sparsek::format::{BsrTranspose, Pattern, generate};
use sparsek::gpu::timing::{EventTimer, median};
use sparsek::gpu::{BsrArrays, BsrView, DenseView, DenseViewMut, DeviceMatrix, Gpu, IndexType};
use sparsek::plan::Policy;
use sparsek::{Bsr, Epilogue, Layout, Matrix, f16};
use sparsek_bench::Cublas;

/// `(M, K, N, bs, density)` of the square products: A is `M x K`.
const PRODUCTS: [(usize, usize, usize, usize, f64); 4] = [
    (8192, 8192, 8192, 128, 0.22),
    (8192, 8192, 8192, 128, 0.10),
    (8192, 8192, 8192, 64, 0.22),
    (8192, 8192, 8192, 64, 0.10),
];
/// `(out, in, tokens, bs, density)` of the linear layers.
const LAYERS: [(usize, usize, usize, usize, f64); 3] =
    [(11008, 4096, 4096, 64, 0.25), (11008, 4096, 512, 64, 0.25), (4096, 11008, 4096, 64, 0.25)];
const WARMUP: usize = 3;
const ITERS: usize = 20;

fn random(gpu: &Gpu, rows: usize, cols: usize, seed: u64) -> Result<DeviceMatrix<f16>, Box<dyn Error>> {
    Ok(gpu.upload_matrix(&Matrix::<f16>::random(rows, cols, seed)?)?)
}

/// Column-major view of the row-major buffer `m` (its transpose, no copy).
fn t_view(m: &DeviceMatrix<f16>) -> DenseView<'_, f16> {
    DenseView::from_cuda_slice(m.as_slice(), m.cols(), m.rows(), m.ld(), Layout::ColMajor).expect("a valid view")
}

/// A sample of an SDDMM's values against f64 dot products: rows 0, bs/2 and bs - 1 of 8 stored blocks spread
/// over the structure, every column (`x` is `M x K`, `y` is `N x K`, both row-major on the host).
fn check_sddmm(a: &Bsr<f16>, (x, y): (&Matrix<f16>, &Matrix<f16>), got: &[f32]) -> Result<(), Box<dyn Error>> {
    let (bs, k) = (a.block_size(), x.cols());
    for blk in (0..a.nnzb()).step_by((a.nnzb() / 8).max(1)) {
        let br = a.row_ptr().partition_point(|&p| p as usize <= blk) - 1;
        let bc = a.col_idx()[blk] as usize;
        for r in [0, bs / 2, bs - 1] {
            for c in 0..bs {
                let want: f64 = (0..k).map(|t| x.get(br * bs + r, t).to_f64() * y.get(bc * bs + c, t).to_f64()).sum();
                let g = f64::from(got[blk * bs * bs + r * bs + c]);
                if (g - want).abs() > 1e-2 * (1.0 + want.abs()) {
                    return Err(format!("SDDMM block {blk} ({r}, {c}) = {g}, f64 {want}").into());
                }
            }
        }
    }
    Ok(())
}

/// A sample of `C = A^T @ B` against f64 dot products: 8 rows of C, every 97th column.
fn check_t(a: &Bsr<f16>, b: &Matrix<f16>, got: &Matrix<f32>) -> Result<(), Box<dyn Error>> {
    let at = BsrTranspose::new(a)?;
    let bs = a.block_size();
    for r in (0..a.cols()).step_by((a.cols() / 8).max(1)) {
        let (bc, c) = (r / bs, r % bs);
        for j in (0..b.cols()).step_by(97) {
            let want: f64 = at
                .block_col_range(bc)
                .flat_map(|e| {
                    let (blk, br) = (at.perm()[e] as usize, at.row_idx()[e] as usize);
                    (0..bs).map(move |i| (blk, br * bs + i, i))
                })
                .map(|(blk, row, i)| a.values()[blk * bs * bs + i * bs + c].to_f64() * b.get(row, j).to_f64())
                .sum();
            let g = f64::from(got.get(r, j));
            if (g - want).abs() > 1e-2 * (1.0 + want.abs()) {
                return Err(format!("A^T @ B C[{r}, {j}] = {g}, f64 {want}").into());
            }
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let gpu = Gpu::new(0)?;
    // The sm_80 template's kernels on every GPU: the same launches through a Gpu without the sm_90a module.
    let gpu80 = Gpu::new(0)?.with_policy(Policy { hopper: false, ..gpu.policy() });
    let cublas = Cublas::new(&gpu)?;
    let stream = gpu.stream().clone();
    let timer = EventTimer::new(&stream);
    let ep = Epilogue::default();
    println!("device: {}", gpu.info().name);
    println!(
        "| product | bs | density | sparsek ms | sm_80 ms | cuBLAS ms | speedup | sparsek TFLOPS (stored) | plan |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for &(m, k, n, bs, density) in &PRODUCTS {
        let a = generate::<f16>(Pattern::Uniform, m, k, bs, density, 7)?;
        let a_d = gpu.upload(&a)?;
        let at = gpu.transpose_index(&a_d)?;
        let flops = 2.0 * a.nnzb() as f64 * (bs * bs) as f64 * n as f64;
        // A^T @ B: B is M x N, C is K x N; cuBLAS: the dense (K x M) @ (M x N).
        let b = random(&gpu, m, n, 1)?;
        let mut c = gpu.zeros::<f32>(k, n)?;
        let dense_a = random(&gpu, k, m, 2)?;
        let mut dense_c: CudaSlice<f32> = stream.alloc_zeros(k * n)?;
        // Checked first: a sample of C's rows against the oracle.
        gpu.spmm_t(&a_d, &at, &b, &mut c, ep)?;
        let plan_t = gpu.last_plan().map(|p| p.kernel).unwrap_or("?");
        check_t(&a, &b.to_host()?, &c.to_host()?)?;
        let (av, atv) = (a_d.view(), at.view());
        let bv = DenseView::from_cuda_slice(b.as_slice(), m, n, b.ld(), Layout::RowMajor)?;
        let mut c80: CudaSlice<f32> = stream.alloc_zeros(k * n)?;
        let t80 = |c80: &mut CudaSlice<f32>| {
            let mut cv = DenseViewMut::from_cuda_slice(c80, k, n, n, Layout::RowMajor)?;
            // SAFETY: every buffer is owned here and alive until the stream is synchronised at the end.
            unsafe { gpu80.spmm_t_raw(stream.cu_stream(), &av, &atv, &bv, &mut cv, ep) }
        };
        t80(&mut c80)?;
        let plan_80 = gpu80.last_plan().map(|p| p.kernel).unwrap_or("?");
        let host80 = stream.clone_dtoh(&c80)?;
        check_t(&a, &b.to_host()?, &Matrix::from_fn(k, n, |r, j| host80[r * n + j])?)?;
        let times = timer.time_interleaved(WARMUP, ITERS, 3, |i| match i {
            0 => gpu.spmm_t(&a_d, &at, &b, &mut c, ep),
            1 => t80(&mut c80),
            _ => cublas
                .gemm(
                    &gpu,
                    (k, n, m),
                    dense_a.as_slice(),
                    dense_a.ld(),
                    b.as_slice(),
                    b.ld(),
                    &mut dense_c.as_view_mut(),
                    n,
                )
                .map_err(|e| sparsek::Error::InvalidArgument { name: "cublas", reason: e.to_string() }),
        })?;
        let [ts, t8, td] = [0, 1, 2].map(|i| median(&times[i]).unwrap_or(f32::NAN));
        println!(
            "| A^T @ B {m}x{k}x{n} | {bs} | {density} | {ts:.3} | {t8:.3} | {td:.3} | {:.2} | {:.0} | {plan_t} ({plan_80}) |",
            td / ts,
            flops / (f64::from(ts) * 1e9)
        );

        // SDDMM as the layer's weight gradient: X = dy^T (M x T), Y = x^T (K x T), T = n tokens.
        let dy = random(&gpu, n, m, 3)?;
        let x = random(&gpu, n, k, 4)?;
        let mut values: CudaSlice<f32> = stream.alloc_zeros(a.values().len().max(1))?;
        let dense_x = random(&gpu, m, n, 5)?;
        let dense_y = random(&gpu, n, k, 6)?;
        let mut dense_w: CudaSlice<f32> = stream.alloc_zeros(m * k)?;
        let av: BsrView<'_, f16> = a_d.view();
        let sddmm = |values: &mut CudaSlice<f32>| {
            let mut vv = DenseViewMut::from_cuda_slice(values, a.nnzb() * bs, bs, bs, Layout::RowMajor)?;
            // SAFETY: every buffer is owned here and alive until the stream is synchronised at the end.
            unsafe { gpu.sddmm_raw(stream.cu_stream(), &t_view(&dy), &t_view(&x), &av, &mut vv, ep) }
        };
        let sddmm80 = |values: &mut CudaSlice<f32>| {
            let mut vv = DenseViewMut::from_cuda_slice(values, a.nnzb() * bs, bs, bs, Layout::RowMajor)?;
            // SAFETY: as above.
            unsafe { gpu80.sddmm_raw(stream.cu_stream(), &t_view(&dy), &t_view(&x), &av, &mut vv, ep) }
        };
        // The same kernels without the structure's tile list: a raw view of the uploaded arrays (a tile per
        // stored block, most of them empty), as a view without its RowSchedule runs.
        let (row_ptr_d, col_idx_d) = (stream.clone_htod(a.row_ptr())?, stream.clone_htod(a.col_idx())?);
        let values_d = stream.clone_htod(a.values())?;
        let arrays = BsrArrays {
            values: values_d.device_ptr(&stream).0,
            row_ptr: row_ptr_d.device_ptr(&stream).0,
            col_idx: col_idx_d.device_ptr(&stream).0,
            index: IndexType::U32,
        };
        // SAFETY: the arrays hold `a` (its valid structure; the SDDMM does not read its values), alive until the end
        // of this iteration, after the stream's last use of them.
        let unlisted: BsrView<'_, f16> = unsafe { BsrView::from_raw(arrays, m, k, bs, a.nnzb())? };
        let mut values_nl: CudaSlice<f32> = stream.alloc_zeros(a.values().len().max(1))?;
        let sddmm_nl = |values: &mut CudaSlice<f32>| {
            let mut vv = DenseViewMut::from_cuda_slice(values, a.nnzb() * bs, bs, bs, Layout::RowMajor)?;
            // SAFETY: as above.
            unsafe { gpu.sddmm_raw(stream.cu_stream(), &t_view(&dy), &t_view(&x), &unlisted, &mut vv, ep) }
        };
        let mut values80: CudaSlice<f32> = stream.alloc_zeros(a.values().len().max(1))?;
        sddmm_nl(&mut values_nl)?;
        sddmm80(&mut values80)?;
        let plan_s80 = gpu80.last_plan().map(|p| p.kernel).unwrap_or("?");
        sddmm(&mut values)?;
        let plan_s = gpu.last_plan().map(|p| p.kernel).unwrap_or("?");
        let (hx, hy) = (dy.to_host()?, x.to_host()?);
        let xt = Matrix::from_fn(m, n, |r, c| hx.get(c, r))?;
        let yt = Matrix::from_fn(k, n, |r, c| hy.get(c, r))?;
        check_sddmm(&a, (&xt, &yt), &stream.clone_dtoh(&values)?)?;
        check_sddmm(&a, (&xt, &yt), &stream.clone_dtoh(&values80)?)?;
        check_sddmm(&a, (&xt, &yt), &stream.clone_dtoh(&values_nl)?)?;
        let times = timer.time_interleaved(WARMUP, ITERS, 4, |i| match i {
            0 => sddmm(&mut values),
            1 => sddmm80(&mut values80),
            3 => sddmm_nl(&mut values_nl),
            _ => cublas
                .gemm(
                    &gpu,
                    (m, k, n),
                    dense_x.as_slice(),
                    dense_x.ld(),
                    dense_y.as_slice(),
                    dense_y.ld(),
                    &mut dense_w.as_view_mut(),
                    k,
                )
                .map_err(|e| sparsek::Error::InvalidArgument { name: "cublas", reason: e.to_string() }),
        })?;
        let [ts, t8, td, tn] = [0, 1, 2, 3].map(|i| median(&times[i]).unwrap_or(f32::NAN));
        println!(
            "| SDDMM {m}x{k}, K = {n} | {bs} | {density} | {ts:.3} | {t8:.3} | {td:.3} | {:.2} | {:.0} | {plan_s} ({plan_s80}; without the tile list {tn:.3} ms) |",
            td / ts,
            flops / (f64::from(ts) * 1e9)
        );
    }

    println!();
    println!(
        "| layer out x in, tokens | bs | density | fwd ms | dX ms | dW ms | sparsek total | cuBLAS 3 GEMMs | speedup |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for &(out, inp, tokens, bs, density) in &LAYERS {
        let w = generate::<f16>(Pattern::Uniform, out, inp, bs, density, 9)?;
        let w_d = gpu.upload(&w)?;
        let at = gpu.transpose_index(&w_d)?;
        let (x, dy) = (random(&gpu, tokens, inp, 1)?, random(&gpu, tokens, out, 2)?);
        let mut y: CudaSlice<f32> = stream.alloc_zeros(tokens * out)?;
        let mut dx: CudaSlice<f32> = stream.alloc_zeros(tokens * inp)?;
        let mut dw: CudaSlice<f32> = stream.alloc_zeros(w.values().len().max(1))?;
        let dense_w = random(&gpu, inp, out, 3)?;
        let dense_wt = random(&gpu, out, inp, 4)?;
        let dyt = random(&gpu, out, tokens, 5)?;
        let mut d_y: CudaSlice<f32> = stream.alloc_zeros(tokens * out)?;
        let mut d_x: CudaSlice<f32> = stream.alloc_zeros(tokens * inp)?;
        let mut d_w: CudaSlice<f32> = stream.alloc_zeros(out * inp)?;
        let wv: BsrView<'_, f16> = w_d.view();
        let atv = at.view();
        let mut run = |i: usize| -> sparsek::Result<()> {
            let s = stream.cu_stream();
            let bad =
                |e: sparsek_bench::Error| sparsek::Error::InvalidArgument { name: "cublas", reason: e.to_string() };
            // SAFETY (the raw launches): every buffer is owned here and alive until the stream is synchronised.
            match i {
                0 => {
                    let mut yv = DenseViewMut::from_cuda_slice(&mut y, out, tokens, out, Layout::ColMajor)?;
                    unsafe { gpu.spmm_raw(s, &wv, &t_view(&x), &mut yv, None, ep) }
                }
                1 => {
                    let mut dxv = DenseViewMut::from_cuda_slice(&mut dx, inp, tokens, inp, Layout::ColMajor)?;
                    unsafe { gpu.spmm_t_raw(s, &wv, &atv, &t_view(&dy), &mut dxv, ep) }
                }
                2 => {
                    let mut dwv = DenseViewMut::from_cuda_slice(&mut dw, w.nnzb() * bs, bs, bs, Layout::RowMajor)?;
                    unsafe { gpu.sddmm_raw(s, &t_view(&dy), &t_view(&x), &wv, &mut dwv, ep) }
                }
                3 => cublas
                    .gemm(
                        &gpu,
                        (tokens, out, inp),
                        x.as_slice(),
                        x.ld(),
                        dense_w.as_slice(),
                        out,
                        &mut d_y.as_view_mut(),
                        out,
                    )
                    .map_err(bad),
                4 => cublas
                    .gemm(
                        &gpu,
                        (tokens, inp, out),
                        dy.as_slice(),
                        dy.ld(),
                        dense_wt.as_slice(),
                        inp,
                        &mut d_x.as_view_mut(),
                        inp,
                    )
                    .map_err(bad),
                // dW (out x in) = dy^T @ x, dy^T held row-major (the dense layer's GEMM reads it transposed).
                _ => cublas
                    .gemm(
                        &gpu,
                        (out, inp, tokens),
                        dyt.as_slice(),
                        dyt.ld(),
                        x.as_slice(),
                        x.ld(),
                        &mut d_w.as_view_mut(),
                        inp,
                    )
                    .map_err(bad),
            }
        };
        let times = timer.time_interleaved(WARMUP, ITERS, 6, &mut run)?;
        let med: Vec<f32> = times.iter().map(|t| median(t).unwrap_or(f32::NAN)).collect();
        let (sparse, dense) = (med[0] + med[1] + med[2], med[3] + med[4] + med[5]);
        println!(
            "| {out}x{inp}, {tokens} | {bs} | {density} | {:.3} | {:.3} | {:.3} | {sparse:.3} | {dense:.3} | {:.2} |",
            med[0],
            med[1],
            med[2],
            dense / sparse
        );
    }
    stream.synchronize()?;
    Ok(())
}
