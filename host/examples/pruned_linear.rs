//! A block-pruned linear layer `y = gelu_tanh(x @ W^T + b)` on the GPU, with every buffer owned by the caller
//! as a framework would own it, and sparsek only describing and launching on it; on the CPU backend where there is
//! no GPU.
//!
//! 1. A dense weight `W` (out_features x in_features, f32) is pruned to BSR with 64 x 64 blocks, keeping the 25% of
//!    blocks with the largest Frobenius norm, and converted to bf16.
//! 2. On a GPU: the BSR arrays, `x` (tokens x in_features, bf16, row-major), the bias and `y` (tokens x
//!    out_features, bf16) are plain cudarc `CudaSlice`s on the context's stream.
//! 3. They are described as views ([`BsrView::from_raw_checked`] over the arrays' device addresses, checked on
//!    the device; [`DenseView::from_cuda_slice`], [`DenseViewMut::from_cuda_slice`],
//!    [`VectorView::from_cuda_slice`]) and the layer is one [`Gpu::spmm_raw`] launch on the stream: `x.t()` and
//!    `y.t()` are the column-major `x^T` and `y^T` over the same memory, so `y^T = W @ x^T` needs no transpose.
//!    Without a GPU the same layer runs on the multi-threaded CPU backend ([`sparsek::cpu::spmm_with_bias`]).
//! 4. The same layer on the unpruned weight (every block, through the same path) gives the speedup of pruning
//!    and how much pruning changed the output; `y` is compared with the layer computed on the CPU in f64 from the
//!    same bf16 values.
//!
//! It prints the shapes, the density, both times and the speedup, the output change and the check's errors, then
//! PASS or FAIL. Run it with `cargo run -p sparsek --example pruned_linear --release` (stable Rust is enough).
//!
//! # From a framework
//!
//! **candle** (its `cuda` feature; candle's `cudarc` version must match sparsek's, 0.19, for the types below to
//! be the same):
//! - the stream: `let stream = device.cuda_stream();` on candle's `CudaDevice`, and `stream.cu_stream()` is the
//!   raw handle `spmm_raw` takes;
//! - the `Gpu`: `Gpu::from_context(stream.context().clone())`, so that sparsek loads its kernels into candle's
//!   context (once, at start-up; keep the `Gpu`);
//! - a tensor's memory: `tensor.storage_and_layout()` gives candle's `Storage`; its `Storage::Cuda` variant holds a
//!   `CudaStorage`, whose `as_cuda_slice::<bf16>()` is the `CudaSlice` to describe with
//!   `DenseView::from_cuda_slice` (or `DenseView::from_cuda_view` over `slice.slice(offset..)` for a tensor that
//!   starts at an offset in its storage; make non-contiguous tensors contiguous first). Write the output into a
//!   tensor you allocated, through `DenseViewMut`.
//!
//! **burn**: its CUDA backend runs on CubeCL, which owns the allocations and streams; this example does not name a
//! burn API (it changes between versions). What sparsek needs is a tensor buffer's device address and the CUDA
//! stream its work is queued on, from whatever the burn version you use exposes: describe the memory with the
//! `unsafe from_raw` constructors ([`DenseView::from_raw`], [`DenseViewMut::from_raw`], [`VectorView::from_raw`],
//! [`BsrView::from_raw_checked`]) and launch with `spmm_raw` on that stream. The stream must belong to the `Gpu`'s
//! context (checked at launch): [`Gpu::new`] uses the device's primary context; for another context use
//! [`Gpu::from_context`], whose cudarc version must match sparsek's.

use std::process::ExitCode;
use std::time::Instant;

use cudarc::driver::{CudaSlice, DevicePtr};
use sparsek::gpu::{BsrArrays, BsrView, DenseView, DenseViewMut, Gpu, IndexType, VectorView};
use sparsek::{Activation, Bsr, Epilogue, Layout, Matrix, bf16};

const OUT_FEATURES: usize = 1024;
const IN_FEATURES: usize = 2048;
const TOKENS: usize = 96;
const BS: usize = 64;
/// Fraction of the weight's blocks kept.
const KEEP: f64 = 0.25;
/// An element passes when `|got - expected| <= REL_TOL * max(|expected|, 1% of max |expected|)`: relative, with a
/// floor for the elements near zero (where GELU squashes negative inputs).
const REL_TOL: f64 = 1e-2;
/// Timed launches of each layer on the GPU (after one untimed launch); the time reported is their mean.
const ITERS: usize = 10;
/// Timed runs of each layer on the CPU backend (after one untimed run).
const CPU_ITERS: usize = 3;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("pruned_linear: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Prunes `w` to the `keep` fraction of its `bs x bs` blocks with the largest Frobenius norm (ties: the first
/// blocks in row-major block order).
fn prune(w: &Matrix<f32>, bs: usize, keep: f64) -> sparsek::Result<Bsr<f32>> {
    let (block_rows, block_cols) = (w.rows() / bs, w.cols() / bs);
    let mut norms: Vec<(f64, usize)> = (0..block_rows * block_cols)
        .map(|i| {
            let (br, bc) = (i / block_cols, i % block_cols);
            let sq: f64 = (0..bs)
                .flat_map(|r| w.row(br * bs + r)[bc * bs..(bc + 1) * bs].iter())
                .map(|&v| f64::from(v) * f64::from(v))
                .sum();
            (sq.sqrt(), i)
        })
        .collect();
    norms.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let k = ((norms.len() as f64) * keep).round() as usize;
    let mut kept = vec![false; norms.len()];
    for &(_, i) in norms.iter().take(k) {
        kept[i] = true;
    }
    Bsr::from_dense(w, bs, |blk| kept[blk.block_row() * block_cols + blk.block_col()])
}

/// `gelu(v)` with the tanh approximation (PyTorch's `gelu(approximate="tanh")`), in f64.
fn gelu_tanh(v: f64) -> f64 {
    0.5 * v * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v)).tanh())
}

/// The layer on the GPU, `y^T = gelu(w @ x^T + b)` into `y_d`, on caller-owned cudarc buffers: one untimed
/// launch, then [`ITERS`] timed ones. Returns the mean time per launch in milliseconds (wall clock around the
/// launches and a synchronize: what a caller waiting for the result sees).
fn gpu_layer(
    gpu: &Gpu,
    w: &Bsr<bf16>,
    x_d: &CudaSlice<bf16>,
    bias_d: &CudaSlice<bf16>,
    y_d: &mut CudaSlice<bf16>,
) -> AnyResult<f64> {
    let stream = gpu.stream().clone();
    // Device memory as a framework would own it: plain cudarc buffers on the context's stream. (`x` is dense
    // row-major with ld == IN_FEATURES: `Matrix::random` stores no padding.)
    let values = stream.clone_htod(w.values())?;
    let row_ptr = stream.clone_htod(w.row_ptr())?;
    let col_idx = stream.clone_htod(w.col_idx())?;
    // The BSR weight from the arrays' device addresses (32-bit indices), checked on the device.
    let (values_ptr, _g0) = values.device_ptr(&stream);
    let (row_ptr_ptr, _g1) = row_ptr.device_ptr(&stream);
    let (col_idx_ptr, _g2) = col_idx.device_ptr(&stream);
    let arrays = BsrArrays { values: values_ptr, row_ptr: row_ptr_ptr, col_idx: col_idx_ptr, index: IndexType::U32 };
    // SAFETY: the three buffers hold nnzb * BS^2 values, OUT_FEATURES / BS + 1 row pointers and nnzb column indices
    // (copied from `w` above), are allocated in the Gpu's context, live until the end of this function and are not
    // written again; the structure itself is checked on the device by this constructor.
    let w_view = unsafe { BsrView::<bf16>::from_raw_checked(gpu, arrays, OUT_FEATURES, IN_FEATURES, BS, w.nnzb())? };
    let x_view = DenseView::from_cuda_slice(x_d, TOKENS, IN_FEATURES, IN_FEATURES, Layout::RowMajor)?;
    let y_view = DenseViewMut::from_cuda_slice(y_d, TOKENS, OUT_FEATURES, OUT_FEATURES, Layout::RowMajor)?;
    let b_view = VectorView::from_cuda_slice(bias_d)?;
    let ep = Epilogue::new(1.0, 0.0).with_activation(Activation::GeluTanh);
    // y^T (out x tokens) = gelu(W (out x in) @ x^T (in x tokens) + b): x.t() and y.t() are column-major views of
    // the row-major x and y.
    let mut y_t = y_view.t();
    let x_t = x_view.t();
    let mut launch = || -> sparsek::Result<()> {
        // SAFETY: the stream is the Gpu's own (live as long as `gpu`); every buffer is live for the whole function
        // and only used on this stream, so nothing else touches them while the kernel runs.
        unsafe { gpu.spmm_raw(stream.cu_stream(), &w_view, &x_t, &mut y_t, Some(&b_view), ep) }
    };
    launch()?;
    stream.synchronize()?;
    let t = Instant::now();
    for _ in 0..ITERS {
        launch()?;
    }
    stream.synchronize()?;
    Ok(t.elapsed().as_secs_f64() * 1e3 / ITERS as f64)
}

/// The layer on the CPU backend: `y^T = gelu(w @ x^T + b)`, one untimed run and [`CPU_ITERS`] timed ones. Returns
/// `y` (tokens x out_features, row-major) and the mean time per run in milliseconds.
fn cpu_layer(w: &Bsr<bf16>, x_t: &Matrix<bf16>, bias: &[bf16]) -> AnyResult<(Vec<bf16>, f64)> {
    let ep = Epilogue::new(1.0, 0.0).with_activation(Activation::GeluTanh);
    let mut y_t = Matrix::<bf16>::zeros(OUT_FEATURES, TOKENS)?;
    sparsek::cpu::spmm_with_bias(w, x_t, &mut y_t, ep, Some(bias))?;
    let t = Instant::now();
    for _ in 0..CPU_ITERS {
        sparsek::cpu::spmm_with_bias(w, x_t, &mut y_t, ep, Some(bias))?;
    }
    let ms = t.elapsed().as_secs_f64() * 1e3 / CPU_ITERS as f64;
    let y = (0..TOKENS * OUT_FEATURES).map(|i| y_t.get(i % OUT_FEATURES, i / OUT_FEATURES)).collect();
    Ok((y, ms))
}

fn run() -> AnyResult<ExitCode> {
    // The layer's parameters and input, on the host.
    let scale = 1.0 / (IN_FEATURES as f64).sqrt();
    let w = Matrix::<f32>::random(OUT_FEATURES, IN_FEATURES, 1)?;
    let w = Matrix::from_fn(OUT_FEATURES, IN_FEATURES, |r, c| (f64::from(w.get(r, c)) * scale) as f32)?;
    let wp: Bsr<bf16> = prune(&w, BS, KEEP)?.convert()?;
    // The unpruned weight as BSR with every block: the dense layer, through the same kernels.
    let w_full: Bsr<bf16> = Bsr::from_dense(&w, BS, |_| true)?.convert()?;
    let bias: Vec<bf16> = Matrix::<bf16>::random(1, OUT_FEATURES, 2)?.row(0).to_vec();
    let x = Matrix::<bf16>::random(TOKENS, IN_FEATURES, 3)?;
    println!(
        "W: {OUT_FEATURES} x {IN_FEATURES} pruned to {} of {} blocks of {BS} x {BS} (density {:.1}%, bf16); x: \
         {TOKENS} x {IN_FEATURES} bf16; y = gelu(x @ W^T + b): {TOKENS} x {OUT_FEATURES} bf16",
        wp.nnzb(),
        w_full.nnzb(),
        100.0 * wp.density()
    );

    let (backend, iters, y, y_full, ms, ms_full) = match Gpu::new(0) {
        Ok(gpu) => {
            let stream = gpu.stream().clone();
            let x_d = stream.clone_htod(x.as_slice())?;
            let bias_d = stream.clone_htod(&bias)?;
            let mut y_d = stream.alloc_zeros::<bf16>(TOKENS * OUT_FEATURES)?;
            let ms_full = gpu_layer(&gpu, &w_full, &x_d, &bias_d, &mut y_d)?;
            let y_full = stream.clone_dtoh(&y_d)?;
            let ms = gpu_layer(&gpu, &wp, &x_d, &bias_d, &mut y_d)?;
            let y = stream.clone_dtoh(&y_d)?;
            stream.synchronize()?;
            (format!("GPU {}", gpu.info().name), ITERS, y, y_full, ms, ms_full)
        }
        Err(e) => {
            println!("no GPU ({e}): the CPU backend runs the layer");
            let x_t = Matrix::from_fn(IN_FEATURES, TOKENS, |r, c| x.get(c, r))?;
            let (y_full, ms_full) = cpu_layer(&w_full, &x_t, &bias)?;
            let (y, ms) = cpu_layer(&wp, &x_t, &bias)?;
            ("CPU backend".to_string(), CPU_ITERS, y, y_full, ms, ms_full)
        }
    };
    println!(
        "{backend}: pruned {ms:.3} ms, unpruned (every block) {ms_full:.3} ms per layer (mean of {iters}): \
         speedup {:.2}x",
        ms_full / ms
    );
    // How much pruning changed the layer's output (relative Frobenius norm). W here is random, with no block
    // structure for pruning to keep, so this is large; a trained weight pruned by block norm loses far less.
    let (mut diff2, mut norm2) = (0.0f64, 0.0f64);
    for (p, f) in y.iter().zip(&y_full) {
        diff2 += (p.to_f64() - f.to_f64()).powi(2);
        norm2 += f.to_f64().powi(2);
    }
    println!(
        "output change from pruning: {:.3} of the unpruned output's norm (random W: nothing for pruning to keep)",
        (diff2 / norm2).sqrt()
    );
    // The same layer on the CPU, in f64, from the dense pruned weight's bf16 values.
    let wd = wp.to_dense()?;
    let w64: Vec<f64> = wd.as_slice().iter().map(|v| v.to_f64()).collect();
    let x64: Vec<f64> = x.as_slice().iter().map(|v| v.to_f64()).collect();
    let mut expected = vec![0.0f64; TOKENS * OUT_FEATURES];
    for t in 0..TOKENS {
        let xr = &x64[t * IN_FEATURES..(t + 1) * IN_FEATURES];
        for o in 0..OUT_FEATURES {
            let wr = &w64[o * IN_FEATURES..(o + 1) * IN_FEATURES];
            let dot: f64 = wr.iter().zip(xr).map(|(a, b)| a * b).sum();
            expected[t * OUT_FEATURES + o] = gelu_tanh(dot + bias[o].to_f64());
        }
    }

    let max_expected = expected.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let floor = 1e-2 * max_expected;
    let (mut max_abs, mut max_rel, mut failures) = (0.0f64, 0.0f64, 0usize);
    for (got, exp) in y.iter().zip(&expected) {
        let err = (got.to_f64() - exp).abs();
        let rel = err / exp.abs().max(floor);
        max_abs = max_abs.max(err);
        // A NaN (a non-finite output) fails and counts as an infinite error.
        let rel = if rel.is_nan() { f64::INFINITY } else { rel };
        max_rel = max_rel.max(rel);
        if rel > REL_TOL {
            failures += 1;
        }
    }
    println!(
        "y: {TOKENS} x {OUT_FEATURES} bf16; max |y| {max_expected:.4}; max abs error {max_abs:.3e}; max relative \
         error {max_rel:.3e} (tolerance {REL_TOL:e}, floor {floor:.3e})"
    );
    if failures == 0 {
        println!("PASS");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("FAIL: {failures} of {} elements outside the tolerance", y.len());
        Ok(ExitCode::FAILURE)
    }
}
