//! A block-pruned linear layer `y = gelu_tanh(x @ W^T + b)` on the GPU, with every buffer owned by the caller
//! as a framework would own it, and sparsek only describing and launching on it.
//!
//! 1. A dense weight `W` (out_features x in_features, f32) is pruned to BSR with 64 x 64 blocks, keeping the 25% of
//!    blocks with the largest Frobenius norm, and converted to bf16.
//! 2. The BSR arrays, `x` (tokens x in_features, bf16, row-major), the bias and `y` (tokens x out_features, bf16)
//!    are plain cudarc `CudaSlice`s on the context's stream.
//! 3. They are described as views ([`BsrView::from_raw_checked`] over the arrays' device addresses, checked on
//!    the device; [`DenseView::from_cuda_slice`], [`DenseViewMut::from_cuda_slice`],
//!    [`VectorView::from_cuda_slice`]) and the layer is one [`Gpu::spmm_raw`] launch on the stream: `x.t()` and
//!    `y.t()` are the column-major `x^T` and `y^T` over the same memory, so `y^T = W @ x^T` needs no transpose.
//! 4. `y` is compared with the same layer computed on the CPU in f64 from the same bf16 values.
//!
//! Run it with `cargo run -p sparsek --example pruned_linear --release`. Without a GPU it says so and exits 0.
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

use cudarc::driver::DevicePtr;
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

fn run() -> AnyResult<ExitCode> {
    // The layer's parameters and input, on the host.
    let scale = 1.0 / (IN_FEATURES as f64).sqrt();
    let w = Matrix::<f32>::random(OUT_FEATURES, IN_FEATURES, 1)?;
    let w = Matrix::from_fn(OUT_FEATURES, IN_FEATURES, |r, c| (f64::from(w.get(r, c)) * scale) as f32)?;
    let wp: Bsr<bf16> = prune(&w, BS, KEEP)?.convert()?;
    let bias: Vec<bf16> = Matrix::<bf16>::random(1, OUT_FEATURES, 2)?.row(0).to_vec();
    let x = Matrix::<bf16>::random(TOKENS, IN_FEATURES, 3)?;
    println!(
        "W: {OUT_FEATURES} x {IN_FEATURES} pruned to {} of {} blocks of {BS} x {BS} (bf16); x: {TOKENS} x \
         {IN_FEATURES}",
        wp.nnzb(),
        (OUT_FEATURES / BS) * (IN_FEATURES / BS)
    );

    let gpu = match Gpu::new(0) {
        Ok(g) => g,
        Err(e) => {
            println!("no GPU ({e}): this example needs one");
            return Ok(ExitCode::SUCCESS);
        }
    };
    let stream = gpu.stream().clone();

    // Device memory as a framework would own it: plain cudarc buffers on the context's stream. (`x` is dense
    // row-major with ld == IN_FEATURES: `Matrix::random` stores no padding.)
    let values = stream.clone_htod(wp.values())?;
    let row_ptr = stream.clone_htod(wp.row_ptr())?;
    let col_idx = stream.clone_htod(wp.col_idx())?;
    let x_d = stream.clone_htod(x.as_slice())?;
    let bias_d = stream.clone_htod(&bias)?;
    let mut y_d = stream.alloc_zeros::<bf16>(TOKENS * OUT_FEATURES)?;

    {
        // The BSR weight from the arrays' device addresses (32-bit indices), checked on the device.
        let (values_ptr, _g0) = values.device_ptr(&stream);
        let (row_ptr_ptr, _g1) = row_ptr.device_ptr(&stream);
        let (col_idx_ptr, _g2) = col_idx.device_ptr(&stream);
        let arrays =
            BsrArrays { values: values_ptr, row_ptr: row_ptr_ptr, col_idx: col_idx_ptr, index: IndexType::U32 };
        // SAFETY: the three buffers hold nnzb * BS^2 values, OUT_FEATURES / BS + 1 row pointers and nnzb column
        // indices (copied from `wp` above), are allocated in the Gpu's context, live until the end of `run`
        // and are not written again; the structure itself is checked on the device by this constructor.
        let w_view =
            unsafe { BsrView::<bf16>::from_raw_checked(&gpu, arrays, OUT_FEATURES, IN_FEATURES, BS, wp.nnzb())? };
        let x_view = DenseView::from_cuda_slice(&x_d, TOKENS, IN_FEATURES, IN_FEATURES, Layout::RowMajor)?;
        let y_view = DenseViewMut::from_cuda_slice(&mut y_d, TOKENS, OUT_FEATURES, OUT_FEATURES, Layout::RowMajor)?;
        let b_view = VectorView::from_cuda_slice(&bias_d)?;
        let ep = Epilogue::new(1.0, 0.0).with_activation(Activation::GeluTanh);
        // y^T (out x tokens) = gelu(W (out x in) @ x^T (in x tokens) + b): x.t() and y.t() are column-major
        // views of the row-major x and y.
        // SAFETY: the stream is the Gpu's own (live as long as `gpu`); every buffer is live for the whole block
        // and only used on this stream, so nothing else touches them while the kernel runs.
        unsafe { gpu.spmm_raw(stream.cu_stream(), &w_view, &x_view.t(), &mut y_view.t(), Some(&b_view), ep)? };
    }
    let y = stream.clone_dtoh(&y_d)?;
    stream.synchronize()?;

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
