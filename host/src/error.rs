//! The one error type of the crate. Every variant carries the numbers needed to act on it.

// use crate::format::BsrError;

/// Everything that can go wrong in sparsek. Library code never panics on bad input: it returns one of these,
/// and an operation that fails leaves its output untouched unless the variant says otherwise.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The BSR structure (row_ptr, col_idx, values, dimensions, block size) is invalid.
    #[error("invalid BSR matrix: {0}")]
    InvalidBsr(String),

    /// The operands of a product do not fit together: A is `a` (rows x cols), B is `b`, C is `c`.
    #[error(
        "shape mismatch: A is {}x{}, B is {}x{}, C is {}x{} (need A.cols == B.rows, C = A.rows x B.cols)",
        a.0, a.1, b.0, b.1, c.0, c.1
    )]
    ShapeMismatch { a: (usize, usize), b: (usize, usize), c: (usize, usize) },

    /// A dense matrix description is inconsistent: leading dimension below the column count, data too short,
    /// or a leading dimension that breaks the 16-byte alignment the GPU kernel needs.
    #[error("invalid dense matrix {what}: {reason}")]
    InvalidMatrix { what: &'static str, reason: String },

    /// A parameter outside its documented range (density, sizes of generated matrices, ...).
    #[error("invalid argument {name}: {reason}")]
    InvalidArgument { name: &'static str, reason: String },

    /// Reading or parsing an input file failed.
    #[error("{path}: {reason}")]
    Io { path: String, reason: String },

    /// No CUDA driver (`libcuda.so`) could be loaded on this machine.
    #[error("no CUDA driver: {0}")]
    NoCudaDriver(String),

    /// The driver is there but there is no GPU with this ordinal.
    #[error("no CUDA device with ordinal {ordinal} (this machine has {count})")]
    NoDevice { ordinal: usize, count: usize },

    /// The GPU is older than sm_80 (Ampere), which the tensor-core kernels need.
    #[error("GPU '{name}' has compute capability {major}.{minor}; sparsek's kernels need 8.0 (Ampere) or newer")]
    UnsupportedArch { name: String, major: i32, minor: i32 },

    /// The driver refused an embedded PTX module; `message` is the driver's own.
    #[error("the CUDA driver could not load PTX module '{module}': {message}")]
    PtxLoad { module: &'static str, message: String },

    /// A device allocation failed for lack of memory.
    #[error("out of GPU memory allocating {bytes} bytes for {what}")]
    OutOfMemory { what: &'static str, bytes: usize },

    /// Any other CUDA driver error, with the operation that failed.
    #[error("CUDA error during {op}: {source}")]
    Cuda {
        op: &'static str,
        #[source]
        source: cudarc::driver::DriverError,
    },
}

/// `Result` with sparsek's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
