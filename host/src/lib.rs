//! sparsek: block-sparse (BSR) x dense matrix multiplication on NVIDIA tensor cores, with the GPU kernels
//! written in Rust (compiled to PTX and embedded in this crate: no CUDA toolkit is needed to build it, only an
//! NVIDIA driver to run on a GPU).
//!
//! `C = act(alpha * (A @ B) + bias) + beta * C` with A a [`Bsr`] matrix of f16 or bf16 blocks (16, 32, 64 or 128
//! square, PyTorch's BSR layout), B dense f16 or bf16, C f32 or the inputs' type, f32 accumulation, and a fused
//! epilogue ([`Epilogue`]: alpha, beta, [`Activation`]; a bias per row of C). Every input is validated: bad
//! structure or shapes give a typed [`Error`], never a panic or garbage.
//!
//! On the GPU the operands may be sparsek's own buffers ([`gpu::Gpu::spmm`]) or memory the caller owns, in
//! either layout, with 32- or 64-bit indices, launched on the caller's stream without a copy
//! ([`gpu::Gpu::spmm_raw`] over [`gpu::BsrView`], [`gpu::DenseView`], [`gpu::DenseViewMut`]): the linear layer
//! `y = act(x @ W^T + b)` of a block-pruned weight is one launch, `spmm_raw(stream, w, x.t(), y.t(), bias, ep)`.
//!
//! - [`format`](mod@format): the validated [`Bsr`] type and its conversions (dense, COO, CSR, Matrix Market, `sprs`),
//!   and the transposed index of a structure ([`format::BsrTranspose`]);
//! - [`cpu`]: the f64 oracle and a multi-threaded CPU backend with the GPU's contract, and the same pair for the
//!   backward products of training: `A^T @ B` ([`cpu::spmm_t`]) and SDDMM ([`cpu::sddmm`]);
//! - [`gpu`]: the GPU context ([`gpu::Gpu`]), device buffers and the typed, validated launchers;
//! - [`plan`]: the planning room, pure: which kernel a launch runs and how its work is split ([`plan::plan`] ->
//!   [`plan::LaunchPlan`]), every threshold in one table ([`plan::RULES`]), the settings as one [`plan::Policy`];
//! - [`check`]: the tolerance model and the one verification path ([`check::Expected`]);
//! - [`tune`]: plans (which kernels serve a product), the plan cache file, and [`gpu::Gpu::tune`], which
//!   measures every kernel that can serve a product on the caller's matrix and remembers the fastest.
//!
//! The CLI (`sparsek info | run | bench | tune | plan`) and the benchmarks against cuBLAS and cuSPARSE live in separate
//! crates of the repository; this crate carries only what an embedder needs.
//!
//! ```
//! use sparsek::{Epilogue, Matrix, f16, format::{Pattern, generate}, gpu::Gpu};
//!
//! # fn main() -> sparsek::Result<()> {
//! // A: 512 x 1024 with 64 x 64 blocks, a quarter of them nonzero; B: 1024 x 96.
//! let a = generate::<f16>(Pattern::Uniform, 512, 1024, 64, 0.25, 1)?;
//! let b = Matrix::<f16>::random(1024, 96, 2)?;
//! let c: Matrix<f32> = match Gpu::new(0) {
//!     Ok(gpu) => {
//!         let (a_d, b_d) = (gpu.upload(&a)?, gpu.upload_matrix(&b)?);
//!         let mut c_d = gpu.zeros::<f32>(512, 96)?;
//!         gpu.spmm(&a_d, &b_d, &mut c_d, Epilogue::default())?;
//!         c_d.to_host()?
//!     }
//!     Err(e) => {
//!         // No GPU here: the multi-threaded CPU backend has the same contract.
//!         eprintln!("no GPU ({e}), using the CPU backend");
//!         let mut c = Matrix::<f32>::zeros(512, 96)?;
//!         sparsek::cpu::spmm(&a, &b, &mut c, Epilogue::default())?;
//!         c
//!     }
//! };
//! // Check against the f64 oracle (every row here; large outputs are checked on sampled rows).
//! use sparsek::check::{Expected, RowSample};
//! let c0 = Matrix::<f32>::zeros(512, 96)?; // C before the product (not read: beta = 0)
//! let expected = Expected::compute(&a, &b, &c0, Epilogue::default(), RowSample::All, |_, _| {})?;
//! let report = expected.check(&c);
//! assert!(report.passed(), "{report}");
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_op_in_unsafe_fn)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

/// The plain getters of a matrix type's shape fields, inside its `impl` block: `shape_getters!(rows, cols, ld)` for
/// fields of the same names (`bs` for `block_size`), `shape_getters!(shape: rows, cols)` for those of a field
/// `shape`, `shape_getters!(view.shape: rows, cols)` for those of a field of a field.
macro_rules! shape_getters {
    ($outer:ident . $inner:ident: $($name:ident),+ $(,)?) => {
        $(shape_getters!(@get $name [$outer $inner]);)+
    };
    ($inner:ident: $($name:ident),+ $(,)?) => {
        $(shape_getters!(@get $name [$inner]);)+
    };
    ($($name:ident),+ $(,)?) => {
        $(shape_getters!(@get $name []);)+
    };
    (@get block_size [$($inner:ident)*]) => {
        #[doc = "The block size `bs` (blocks are `bs x bs`)."]
        pub fn block_size(&self) -> usize {
            self$(.$inner)*.bs
        }
    };
    (@get block_rows [$($inner:ident)*]) => {
        #[doc = "`rows / bs`: the number of block rows."]
        pub fn block_rows(&self) -> usize {
            self$(.$inner)*.rows / self$(.$inner)*.bs
        }
    };
    (@get block_cols [$($inner:ident)*]) => {
        #[doc = "`cols / bs`: the number of block columns."]
        pub fn block_cols(&self) -> usize {
            self$(.$inner)*.cols / self$(.$inner)*.bs
        }
    };
    (@get $name:ident [$($inner:ident)*]) => {
        #[doc = shape_getters!(@doc $name)]
        pub fn $name(&self) -> usize {
            self$(.$inner)*.$name
        }
    };
    (@doc rows) => { "Rows." };
    (@doc cols) => { "Columns." };
    (@doc ld) => { "Leading dimension: elements between the starts of consecutive rows (columns, column-major)." };
    (@doc nnzb) => { "Nonzero (stored) blocks." };
}

mod alloc;
pub mod check;
pub mod cpu;
pub mod error;
pub mod format;
pub mod gpu;
pub mod matrix;
pub mod plan;
#[doc(hidden)]
pub mod rng;
pub mod scalar;
pub mod tune;

pub use error::{BsrError, Error, Result};
pub use format::Bsr;
pub use matrix::Matrix;
pub use scalar::Scalar;

pub use half::{bf16, f16};
pub use sparsek_layout::{Activation, Layout, Op};

/// What a product does with its result: `C = act(alpha * (A @ B) + bias) + beta * C`, accumulated in f32 (f64
/// in the reference), with `act` the [`Activation`] (identity by default) and the bias, where a launch takes one,
/// added per row of C (per output feature of a linear layer). With `beta == 0` the old C is not read at all, so it
/// may hold anything, NaN included (BLAS rule). `beta * C` is added after the activation, so that a residual can
/// be accumulated into C.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Epilogue {
    /// Scale of the product.
    pub alpha: f32,
    /// Scale of the old C; 0 means C is write-only.
    pub beta: f32,
    /// Applied to `alpha * (A @ B) + bias`, before `beta * C` is added.
    pub activation: Activation,
}

impl Epilogue {
    /// `alpha * (A @ B) + beta * C`, no activation.
    pub const fn new(alpha: f32, beta: f32) -> Epilogue {
        Epilogue { alpha, beta, activation: Activation::Identity }
    }

    /// The same epilogue with activation `activation`.
    pub const fn with_activation(self, activation: Activation) -> Epilogue {
        Epilogue { activation, ..self }
    }
}

impl Default for Epilogue {
    fn default() -> Self {
        Epilogue::new(1.0, 0.0)
    }
}
