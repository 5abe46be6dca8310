//! The one error type of the crate. Every variant carries the numbers needed to act on it.

use crate::format::BsrError;

/// Everything that can go wrong in sparsek. Library code never panics on bad input: it returns one of these,
/// and an operation that fails leaves its output untouched unless the variant says otherwise.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The BSR structure (row_ptr, col_idx, values, dimensions, block size) is invalid.
    #[error("invalid BSR matrix: {0}")]
    InvalidBsr(#[from] BsrError),

    /// The operands of a product do not fit together: A is `a` (rows x cols), B is `b`, C is `c`.
    #[error(
        "shape mismatch: A is {}x{}, B is {}x{}, C is {}x{} (need A.cols == B.rows, C = A.rows x B.cols)",
        a.0, a.1, b.0, b.1, c.0, c.1
    )]
    ShapeMismatch {
        /// A's (rows, cols).
        a: (usize, usize),
        /// B's (rows, cols).
        b: (usize, usize),
        /// C's (rows, cols).
        c: (usize, usize),
    },

    /// A dense matrix description is inconsistent: leading dimension below the column count, data too short,
    /// or a leading dimension that breaks the 16-byte alignment the GPU kernel needs.
    #[error("invalid dense matrix {what}: {reason}")]
    InvalidMatrix {
        /// Which part is wrong ("ld", "data", ...).
        what: &'static str,
        /// What is wrong, with the numbers.
        reason: String,
    },

    /// A parameter outside its documented range (density, sizes of generated matrices, ...).
    #[error("invalid argument {name}: {reason}")]
    InvalidArgument {
        /// The argument's name.
        name: &'static str,
        /// What is wrong, with the numbers.
        reason: String,
    },

    /// Reading or parsing an input file failed.
    #[error("{path}: {reason}")]
    Io {
        /// The file.
        path: String,
        /// What failed (with the line number for parse errors).
        reason: String,
    },

    /// No CUDA driver (`libcuda.so`) could be loaded on this machine.
    #[error("no CUDA driver: {0}")]
    NoCudaDriver(String),

    /// The driver is there but there is no GPU with this ordinal.
    #[error("no CUDA device with ordinal {ordinal} (this machine has {count})")]
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// Devices present.
        count: usize,
    },

    /// The GPU is older than sm_80 (Ampere), which the tensor-core kernels need.
    #[error("GPU '{name}' has compute capability {major}.{minor}; sparsek's kernels need 8.0 (Ampere) or newer")]
    UnsupportedArch {
        /// The GPU's name.
        name: String,
        /// Compute capability major.
        major: i32,
        /// Compute capability minor.
        minor: i32,
    },

    /// The driver refused an embedded PTX module; `message` is the driver's own.
    #[error("the CUDA driver could not load PTX module '{module}': {message}")]
    PtxLoad {
        /// The module's name.
        module: &'static str,
        /// The driver's message.
        message: String,
    },

    /// A device allocation failed for lack of memory.
    #[error("out of GPU memory allocating {bytes} bytes for {what}")]
    OutOfMemory {
        /// What was being allocated.
        what: &'static str,
        /// Bytes asked for.
        bytes: usize,
    },

    /// Any other CUDA driver error, with the operation that failed.
    #[error("CUDA error during {op}: {source}")]
    Cuda {
        /// The driver call that failed.
        op: &'static str,
        /// The driver's error.
        #[source]
        source: cudarc::driver::DriverError,
    },
}

/// `Result` with sparsek's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
