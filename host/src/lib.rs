//! sparsek: block-sparse (BSR) x dense matrix multiplication on NVIDIA tensor cores.
#![forbid(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod check;
pub mod cpu;
pub mod error;
pub mod format;
pub mod gpu;
pub mod matrix;
pub mod rng;
pub mod scalar;

pub use error::{Error, Result};
pub use format::{Bsr, BsrError};
pub use matrix::Matrix;
pub use scalar::Scalar;

pub use half::{bf16, f16};

/// What a product does with its result: `C = alpha * (A @ B) + beta * C`, accumulated in f32 (f64 in the
/// reference). With `beta == 0` the old C is not read at all, so it may hold anything, NaN included (BLAS rule).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Epilogue {
    /// Scale of the product.
    pub alpha: f32,
    /// Scale of the old C; 0 means C is write-only.
    pub beta: f32,
}

impl Default for Epilogue {
    fn default() -> Self {
        Epilogue { alpha: 1.0, beta: 0.0 }
    }
}
