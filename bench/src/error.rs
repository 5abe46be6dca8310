//! The bench's one error type: what failed, with the figures, paths and calls that say where. Every message is
//! the line `sparsek bench` prints or records (a record's `error`, a contender's `"unavailable: ..."`), so each
//! variant's text keeps the wording the bench had when these were strings.

use std::path::PathBuf;

use cudarc::cublas::result::CublasError;
use cudarc::cusparse::result::CusparseError;
use cudarc::driver::DriverError;

use sparsek::check::CheckReport;

/// The bench's `Result`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a run, a case or a contender failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The library refused or failed (an argument, a launch, a transfer, a file): its message as is.
    #[error(transparent)]
    Sparsek(#[from] sparsek::Error),
    /// A CUDA driver call of the bench's own (events, graphs, modules, copies, launches of its kernels).
    #[error("{call}: {source}")]
    Driver {
        /// The call, or what the bench was doing ("cuEventRecord", "uploading A values").
        call: String,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// A device allocation of the bench's own.
    #[error("allocating {what} of {bytes} bytes: {source}")]
    Alloc {
        /// The buffer ("the copy's source").
        what: String,
        /// Its size.
        bytes: u64,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// A cuBLAS call returned an error status.
    #[error("{call}: {source}")]
    Cublas {
        /// The entry point.
        call: &'static str,
        /// The status.
        #[source]
        source: CublasError,
    },
    /// A cuSPARSE call returned an error status.
    #[error("{call}: {:?}", .status.0)]
    Cusparse {
        /// The entry point.
        call: &'static str,
        /// The status.
        status: CusparseError,
    },
    /// A baseline library is not where the dynamic loader looks.
    #[error(
        "{lib} ({names}) was not found by the dynamic loader; add CUDA's lib64 or pip's nvidia/cu13/lib directory \
         to LD_LIBRARY_PATH"
    )]
    LibraryNotFound {
        /// "libcublas".
        lib: &'static str,
        /// The file names tried ("CUDA 13: libcublas.so.13").
        names: &'static str,
    },
    /// A baseline library lacks an entry point the bench calls.
    #[error("{lib} has no symbol {symbol}")]
    MissingSymbol {
        /// "libcusparse".
        lib: &'static str,
        /// The symbol.
        symbol: &'static str,
    },
    /// The CUDA library bindings panicked (cudarc panics when a library or symbol is missing): the panic's
    /// message.
    #[error("{0}")]
    Panic(String),
    /// A baseline that could not be set up for the run, asked for by a case.
    #[error("{lib} unavailable: {reason}")]
    Unavailable {
        /// "cuBLAS".
        lib: &'static str,
        /// Why it could not be set up.
        reason: String,
    },
    /// A size or index beyond what an API's integers (or this host's `usize`) hold.
    #[error("{what} = {value} exceeds {limit}")]
    TooLarge {
        /// The quantity ("lda", "A's elements").
        what: &'static str,
        /// Its value.
        value: u64,
        /// The integer it must fit ("cuBLAS's int").
        limit: &'static str,
    },
    /// cuBLAS leading dimensions smaller than the rows they step over.
    #[error("leading dimensions lda {lda}, ldb {ldb}, ldc {ldc} too small for k {k}, n {n}")]
    LeadingDimensions {
        /// A's.
        lda: usize,
        /// B's.
        ldb: usize,
        /// C's.
        ldc: usize,
        /// Columns of A.
        k: usize,
        /// Columns of B and C.
        n: usize,
    },
    /// A device buffer too short for the matrix it should hold.
    #[error("{what}: a buffer of {len} elements cannot hold {rows}x{cols} with ld {ld}")]
    BufferTooSmall {
        /// The operand.
        what: &'static str,
        /// The buffer's elements.
        len: usize,
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
        /// Leading dimension.
        ld: usize,
    },
    /// A mode that measures generated cases only met a matrix file.
    #[error("{mode} measures generated cases only, not {}", .path.display())]
    FileCase {
        /// "--decode", "--tuned".
        mode: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// What the bench cannot do here (a kind of operand, a missing piece of set-up).
    #[error("{0}")]
    Unsupported(&'static str),
    /// An output failed the oracle's check.
    #[error("{what} fails the oracle's check: {report}")]
    CheckFailed {
        /// Whose output ("the graph's output").
        what: &'static str,
        /// The comparison: elements checked, the worst error and its bound.
        report: Box<CheckReport>,
    },
    /// The queued measurement's host could not queue a batch within half the longest hold.
    #[error(
        "the host took {:.1} ms to queue {batch} launches, more than half the longest hold ({} ms)",
        *.queued_ns as f64 / 1e6,
        .hold_max_ns / 1_000_000
    )]
    HoldTooShort {
        /// How long the host took to queue the batch.
        queued_ns: u64,
        /// Launches in the batch.
        batch: usize,
        /// The longest hold.
        hold_max_ns: u64,
    },
    /// No cuSPARSE entry point accepted the case: each one tried, with its refusal.
    #[error("{}", .0.iter().map(|(kind, e)| format!("{kind}: {e}")).collect::<Vec<_>>().join("; "))]
    NoneAccepted(Vec<(&'static str, Error)>),
    /// An error met once (loading a kernel for the run) and reported again by each case that needed it.
    #[error(transparent)]
    Shared(std::sync::Arc<Error>),
    /// A step of a measurement failed: the step, then why.
    #[error("{step}: {source}")]
    Step {
        /// "timing", "building the operands".
        step: &'static str,
        /// Why.
        #[source]
        source: Box<Error>,
    },
    /// Reading or writing a file.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A results file that does not parse (or holds a malformed record).
    #[error("{file}: not a sparsek bench results file: {source}")]
    Parse {
        /// The file (`<results>` for text without one).
        file: String,
        /// Where: line (1-based; 0 when unknown).
        line: usize,
        /// And column.
        column: usize,
        /// serde's error (its message ends with the line and column).
        #[source]
        source: serde_json::Error,
    },
    /// Serializing a run's results.
    #[error("{file}: serializing the results: {source}")]
    Serialize {
        /// The file the text is for.
        file: &'static str,
        /// serde's error.
        #[source]
        source: serde_json::Error,
    },
    /// A record of a results file that breaks the rules of a valid case.
    #[error("malformed record ({m}x{n}x{k} bs{bs}): {why}")]
    MalformedRecord {
        /// Its M.
        m: usize,
        /// Its N.
        n: usize,
        /// Its K.
        k: usize,
        /// Its block size.
        bs: usize,
        /// The first rule it breaks.
        why: crate::report::Malformed,
    },
    /// A field of a results file with a value of the wrong form.
    #[error("{field} '{value}' is not {expected}")]
    Field {
        /// The key.
        field: &'static str,
        /// Its value.
        value: String,
        /// The form it should have ("MAJOR.MINOR").
        expected: &'static str,
    },
}

impl Error {
    /// `source` as the failure of `step`.
    pub fn step<E: Into<Error>>(step: &'static str) -> impl FnOnce(E) -> Error {
        move |source| Error::Step { step, source: Box::new(source.into()) }
    }

    /// A driver error of `call`.
    pub fn driver(call: impl Into<String>) -> impl FnOnce(DriverError) -> Error {
        move |source| Error::Driver { call: call.into(), source }
    }

    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        move |source| Error::Io { path: path.into(), source }
    }

    /// `value` as a `T`, or [`Error::TooLarge`] naming `what` and `limit`.
    pub fn fit<T: TryFrom<u64>>(what: &'static str, value: u64, limit: &'static str) -> Result<T> {
        T::try_from(value).map_err(|_| Error::TooLarge { what, value, limit })
    }
}

/// What was loaded once per run, or why it could not be (shared by the cases that need it).
pub type Loaded<T> = std::result::Result<T, std::sync::Arc<Error>>;

/// `loaded`'s value, or its error again.
pub(crate) fn loaded<T>(loaded: &Loaded<T>) -> Result<&T> {
    loaded.as_ref().map_err(|e| Error::Shared(e.clone()))
}

/// Writes `bytes` to `path`.
pub(crate) fn write(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(Error::io(path))
}

/// Creates `dir` and its parents.
pub(crate) fn create_dir(dir: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(Error::io(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The messages the bench printed and recorded when these were strings, word for word.
    #[test]
    fn messages_keep_their_wording() {
        let cases: [(Error, &str); 7] = [
            (
                Error::LibraryNotFound { lib: "libcublas", names: "CUDA 13: libcublas.so.13" },
                "libcublas (CUDA 13: libcublas.so.13) was not found by the dynamic loader; add CUDA's lib64 or pip's \
                 nvidia/cu13/lib directory to LD_LIBRARY_PATH",
            ),
            (
                Error::MissingSymbol { lib: "libcusparse", symbol: "cusparseSpMM" },
                "libcusparse has no symbol cusparseSpMM",
            ),
            (
                Error::LeadingDimensions { lda: 1, ldb: 2, ldc: 3, k: 4, n: 5 },
                "leading dimensions lda 1, ldb 2, ldc 3 too small for k 4, n 5",
            ),
            (
                Error::BufferTooSmall { what: "B", len: 10, rows: 4, cols: 3, ld: 3 },
                "B: a buffer of 10 elements cannot hold 4x3 with ld 3",
            ),
            (
                Error::FileCase { mode: "--decode", path: "/m/web.mtx".into() },
                "--decode measures generated cases only, not /m/web.mtx",
            ),
            (Error::Unavailable { lib: "cuBLAS", reason: "no library".into() }, "cuBLAS unavailable: no library"),
            (
                Error::HoldTooShort { queued_ns: 12_345_678, batch: 100, hold_max_ns: 4_000_000 },
                "the host took 12.3 ms to queue 100 launches, more than half the longest hold (4 ms)",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want);
        }
    }

    #[test]
    fn errors_carry_their_figures() {
        let e = Error::fit::<i32>("lda", 1 << 40, "cuBLAS's int").unwrap_err();
        assert!(matches!(e, Error::TooLarge { what: "lda", value: 1_099_511_627_776, limit: "cuBLAS's int" }));
        assert_eq!(e.to_string(), "lda = 1099511627776 exceeds cuBLAS's int");
        assert_eq!(Error::fit::<i32>("lda", 7, "cuBLAS's int").unwrap(), 7);
        // A step names what failed, then why; a refusal per cuSPARSE kind, joined.
        let inner = Error::Unsupported("no input set");
        assert_eq!(Error::step("timing")(inner).to_string(), "timing: no input set");
        let refused = Error::NoneAccepted(vec![
            ("bsr-spmm-f16", Error::Unsupported("A has no stored block")),
            ("csr-spmm-f16", Error::TooLarge { what: "A's elements", value: 1 << 31, limit: "CSR's 32-bit indices" }),
        ]);
        assert_eq!(
            refused.to_string(),
            "bsr-spmm-f16: A has no stored block; csr-spmm-f16: A's elements = 2147483648 exceeds CSR's 32-bit indices"
        );
        // The library's errors read as the library wrote them; an I/O error names its file.
        let lib = sparsek::Error::InvalidArgument { name: "--cusparse", reason: "'x' is none".into() };
        assert_eq!(Error::from(lib).to_string(), "invalid argument --cusparse: 'x' is none");
        let io = Error::io("/no/such/dir/latest.json")(std::io::Error::from(std::io::ErrorKind::NotFound));
        assert!(io.to_string().starts_with("/no/such/dir/latest.json: "), "{io}");
        let shared = Error::Shared(std::sync::Arc::new(Error::Unsupported("the copy was not measured")));
        assert_eq!(shared.to_string(), "the copy was not measured");
    }
}
