//! The one error type of the crate. Every variant carries the numbers needed to act on it.

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

    /// An allocation failed for lack of memory: on the host (`what` names the buffer, e.g. "dense matrix") or on
    /// the GPU (`what` says "device ..."). Nothing was changed.
    #[error("out of memory allocating {bytes} bytes for {what}")]
    OutOfMemory {
        /// What was being allocated.
        what: &'static str,
        /// Bytes asked for.
        bytes: usize,
    },

    /// A size derived from the inputs (an element count, a byte count, a line length) overflows or exceeds the
    /// limit of what it is used for. Checked before anything is allocated; nothing was changed.
    #[error("{what} = {requested} exceeds the limit {limit}")]
    TooLarge {
        /// What was being sized, e.g. "dense matrix elements (rows * ld)".
        what: &'static str,
        /// The size asked for (saturated at u128::MAX when the product overflows even that).
        requested: u128,
        /// The largest size allowed.
        limit: u128,
    },

    /// A device operand's bytes reach outside the device allocation its address lies in: `bytes` bytes from `start`
    /// (computed with checked arithmetic from the operand's shape, not from a length the caller or a dependency
    /// reported) against the allocation of `alloc_bytes` bytes from `alloc_start` that the CUDA driver reports
    /// (`cuMemGetAddressRange`). Checked when a view or device matrix is made and again at launch; nothing was
    /// launched or changed.
    #[error(
        "{what}: {bytes} bytes from {start:#x} reach outside its device allocation ({alloc_bytes} bytes from \
         {alloc_start:#x})"
    )]
    OutsideAllocation {
        /// Which operand, e.g. "B" or "A's col_idx".
        what: &'static str,
        /// The operand's first byte.
        start: u64,
        /// The bytes it spans (u128: the product of its dimensions may overflow 64 bits).
        bytes: u128,
        /// The allocation's first byte.
        alloc_start: u64,
        /// The allocation's size in bytes.
        alloc_bytes: u64,
    },

    /// A value that is not finite (NaN or infinite) where the operation's contract needs finite values, or a
    /// value that does not fit the target element type (`value` as text, `index` its position).
    #[error("{what}: non-finite or out-of-range value {value} at ({}, {})", index.0, index.1)]
    NonFinite {
        /// Which operand or conversion, e.g. "B" or "f16 conversion".
        what: &'static str,
        /// The offending value, as text.
        value: String,
        /// Its position (row, col) or flat index.
        index: (usize, usize),
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

/// Why a BSR description (or the input of a conversion) was rejected. Each variant names the first offending
/// index and carries the numbers. [`Bsr::try_new`](crate::Bsr::try_new) checks in the order of the variants below, up to
/// `ValuesLength`; the remaining variants come from the conversions (COO, CSR).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BsrError {
    /// The block size is not one of [`SUPPORTED_BLOCK_SIZES`](crate::format::SUPPORTED_BLOCK_SIZES).
    #[error("block size {bs} is not supported (supported: 16, 32, 64, 128)")]
    UnsupportedBlockSize {
        /// The rejected block size.
        bs: usize,
    },

    /// A dimension is not a multiple of the block size.
    #[error("{dim} = {value} is not a multiple of the block size {bs}")]
    NotMultiple {
        /// "rows" or "cols".
        dim: &'static str,
        /// The dimension.
        value: usize,
        /// The block size.
        bs: usize,
    },

    /// A count or an index does not fit the 32-bit index arrays (or the values would overflow memory sizes).
    #[error("{what} = {value} exceeds the limit {limit}")]
    TooLarge {
        /// "nnzb", "block rows", "block columns" or "values".
        what: &'static str,
        /// The offending count.
        value: usize,
        /// The largest allowed count.
        limit: usize,
    },

    /// `row_ptr` does not have `rows / bs + 1` entries.
    #[error("row_ptr has {got} entries, expected block_rows + 1 = {expected}")]
    RowPtrLength {
        /// `rows / bs + 1`.
        expected: usize,
        /// `row_ptr.len()`.
        got: usize,
    },

    /// `row_ptr[0]` is not 0.
    #[error("row_ptr[0] = {got}, expected 0")]
    RowPtrStart {
        /// `row_ptr[0]`.
        got: u32,
    },

    /// `row_ptr[block_row + 1] < row_ptr[block_row]`.
    #[error(
        "row_ptr decreases at block row {block_row}: row_ptr[{block_row}] = {prev} > row_ptr[{block_row}+1] = {next}"
    )]
    RowPtrDecreasing {
        /// The block row whose end lies before its start.
        block_row: usize,
        /// `row_ptr[block_row]`.
        prev: u32,
        /// `row_ptr[block_row + 1]`.
        next: u32,
    },

    /// The last `row_ptr` entry is not `col_idx.len()` (nnzb).
    #[error("row_ptr ends at {got}, but col_idx has {expected} entries")]
    RowPtrEnd {
        /// `col_idx.len()`.
        expected: usize,
        /// The last entry of `row_ptr`.
        got: u32,
    },

    /// A block-column index is `>= cols / bs`.
    #[error(
        "col_idx[{pos}] = {col} (block row {block_row}) is out of range: the matrix has {block_cols} block columns"
    )]
    ColIdxOutOfRange {
        /// The block row holding the index.
        block_row: usize,
        /// Position in `col_idx`.
        pos: usize,
        /// The offending block-column index.
        col: u32,
        /// `cols / bs`.
        block_cols: usize,
    },

    /// Block-column indices decrease within a block row.
    #[error("col_idx is not sorted in block row {block_row}: col_idx[{pos}] = {col} follows {prev}")]
    ColIdxUnsorted {
        /// The block row.
        block_row: usize,
        /// Position in `col_idx` of the index smaller than its predecessor.
        pos: usize,
        /// `col_idx[pos - 1]`.
        prev: u32,
        /// `col_idx[pos]`.
        col: u32,
    },

    /// A block-column index appears twice within a block row.
    #[error("duplicate block in block row {block_row}: col_idx[{pos}] = {col} repeats the previous index")]
    ColIdxDuplicate {
        /// The block row.
        block_row: usize,
        /// Position in `col_idx` of the repeated index.
        pos: usize,
        /// The repeated block-column index.
        col: u32,
    },

    /// The device-side structure check found a problem in `block_row` (see `BsrView::from_raw_checked`).
    #[error("device-side structure check: block row {block_row}: {problem}")]
    DeviceStructure {
        /// The first block row with a problem (`block_rows` for the end of `row_ptr`).
        block_row: u64,
        /// What is wrong.
        problem: &'static str,
    },

    /// `values` does not hold `nnzb * bs * bs` elements.
    #[error("values has {got} elements, expected nnzb * bs * bs = {expected}")]
    ValuesLength {
        /// `nnzb * bs * bs`.
        expected: usize,
        /// `values.len()`.
        got: usize,
    },

    /// A COO or CSR entry lies outside the matrix.
    #[error("entry {index} at ({row}, {col}) lies outside the {rows}x{cols} matrix")]
    EntryOutOfRange {
        /// Position of the entry in the input (COO list or CSR data).
        index: usize,
        /// Its row.
        row: usize,
        /// Its column.
        col: usize,
        /// The matrix rows.
        rows: usize,
        /// The matrix columns.
        cols: usize,
    },

    /// A CSR `indptr` does not have `rows + 1` entries.
    #[error("CSR indptr has {got} entries, expected rows + 1 = {expected}")]
    CsrIndptrLength {
        /// `rows + 1`.
        expected: usize,
        /// `indptr.len()`.
        got: usize,
    },

    /// A CSR `indptr` does not start at 0.
    #[error("CSR indptr[0] = {got}, expected 0")]
    CsrIndptrStart {
        /// `indptr[0]`.
        got: usize,
    },

    /// A CSR `indptr` decreases.
    #[error("CSR indptr decreases at row {row}: indptr[{row}] = {prev} > indptr[{row}+1] = {next}")]
    CsrIndptrDecreasing {
        /// The row whose end lies before its start.
        row: usize,
        /// `indptr[row]`.
        prev: usize,
        /// `indptr[row + 1]`.
        next: usize,
    },

    /// The last CSR `indptr` entry is not the number of stored entries.
    #[error("CSR indptr ends at {got}, but indices has {expected} entries")]
    CsrIndptrEnd {
        /// `indices.len()`.
        expected: usize,
        /// The last entry of `indptr`.
        got: usize,
    },

    /// CSR `data` and `indices` differ in length.
    #[error("CSR data has {got} entries, but indices has {expected}")]
    CsrDataLength {
        /// `indices.len()`.
        expected: usize,
        /// `data.len()`.
        got: usize,
    },
}
