//! Matrix Market (`.mtx`) coordinate files: reading (real, integer or pattern; general, symmetric or
//! skew-symmetric) and writing, and the blockification shared with [`Bsr::from_coo`].
//!
//! # Untrusted files
//!
//! Reading and converting never panic, abort or hang, whatever the bytes; every failure is a typed [`Error`]:
//!
//! - **Streaming, bounded lines.** The input is read one line at a time; a line may hold at most
//!   [`MAX_LINE_BYTES`] (1 MiB, terminator excluded). A longer line is [`Error::Io`] naming its number, detected
//!   without buffering more than the limit. Real entry lines are a few dozen bytes; the limit only bounds what a
//!   hostile file can make the reader hold.
//! - **Short messages.** An error quotes at most 64 bytes of the offending line or token (non-printable and
//!   non-ASCII characters shown as `?`), followed by `...` and the length when cut.
//! - **Finite values.** The product's contract is finite values, so a literal that is NaN or infinite (`nan`,
//!   `inf`, `infinity`, any case and sign) or that overflows f64 (`1e400`) is [`Error::Io`] naming the line.
//!   A literal below the smallest subnormal rounds to zero (like any decimal literal, it is rounded to the
//!   nearest f64). Integer values must fit i64.
//! - **Memory proportional to the file.** The header's counts are never trusted for an allocation: the entry
//!   list grows with the entries actually read (fallibly: [`Error::OutOfMemory`]), starting from a reservation
//!   capped by what the file's size can hold. A parsed entry costs 24 bytes (twice for the mirrored half of a
//!   symmetric file).
//! - **Memory of the conversion proportional to the stored blocks.** [`MatrixMarket::to_bsr`] sorts the entries
//!   by block (16 bytes of scratch per entry), counts the distinct blocks, and sizes the result exactly
//!   (`row_ptr`: `(rows/bs + 1) * 4` bytes, `col_idx`: `nnzb * 4`, values: `nnzb * bs * bs * size_of::<T>()`)
//!   with checked arithmetic before allocating it fallibly. [`MatrixMarket::to_bsr_limited`] and
//!   [`Bsr::from_matrix_market_limited`] also bound it by a byte budget ([`Error::TooLarge`]), e.g. the
//!   machine's available memory: a sparse file touching many distinct 128x128 blocks is refused up front.
//! - **Values that fit.** An entry outside the matrix's shape is [`BsrError::EntryOutOfRange`]; a stored value
//!   that is not finite after summing duplicates and rounding to the element type (e.g. 70000 in a `Bsr<f16>`)
//!   is [`Error::NonFinite`] naming its (0-based) position. A nonzero value that rounds to zero (an underflow:
//!   `1e-9` in f16) is representable, so it is kept as zero and counted
//!   ([`MatrixMarket::to_bsr_limited_with_underflow`], [`Underflow`]) for the caller to report.
//! - **Each symmetric pair once.** A symmetric or skew-symmetric file lists each off-diagonal pair on one side of
//!   the diagonal; a pair listed on both sides (`2 1` and `1 2`) is [`Error::Io`] naming the later line and the
//!   earlier one, not summed (the reader would otherwise double it silently). 24 bytes more per off-diagonal
//!   entry are held to find such pairs.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, ErrorKind, Write};
use std::path::Path;

use super::{Bsr, BsrError};
use crate::alloc;
use crate::error::{Error, Result};
use crate::scalar::Scalar;

/// The longest line the reader accepts, in bytes (terminator excluded): 1 MiB. A longer line is an
/// [`Error::Io`] naming the line, found without buffering more than this.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// The most bytes of input an error message quotes.
const QUOTE_BYTES: usize = 64;

/// The initial reservation of the entry list when the input's size is unknown ([`MatrixMarket::parse`]); it
/// grows from there with the entries actually read.
const INITIAL_ENTRIES: usize = 4096;

/// What the byte budget of [`MatrixMarket::to_bsr_limited`] is compared with.
const BSR_BYTES: &str = "BSR memory for the file's shape and blocks (bytes: values + row_ptr + col_idx)";

/// A sparse matrix as read from a Matrix Market file, in its original shape: `entries` are 0-based
/// `(row, col, value)`, symmetric and skew-symmetric files already expanded (off-diagonal entries mirrored,
/// negated for skew-symmetric), pattern files with value 1, values in f64 (exactly as parsed, always finite
/// when read from a file). Duplicates are kept as listed; [`MatrixMarket::to_bsr`] sums them.
///
/// The fields are public, so a hand-built value may hold anything: [`MatrixMarket::to_bsr`] checks the entries
/// against the shape and the values for finiteness.
#[derive(Clone, Debug, PartialEq)]
pub struct MatrixMarket {
    /// Rows of the matrix in the file.
    pub rows: usize,
    /// Columns of the matrix in the file.
    pub cols: usize,
    /// The entries, 0-based.
    pub entries: Vec<(usize, usize, f64)>,
}

/// Stored values that are nonzero after summing duplicates in f64 but round to zero in the element type (an
/// underflow: `1e-9` in f16 or bf16), counted by [`MatrixMarket::to_bsr_limited_with_underflow`]. Unlike an
/// overflow (an error), such a value is representable (as zero), so the conversion goes on; the caller reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Underflow {
    /// How many stored values flushed to zero.
    pub count: usize,
    /// The first (in block order, then row-major in its block): 0-based `(row, col, value before rounding)`.
    pub first: Option<(usize, usize, f64)>,
}

impl std::fmt::Display for Underflow {
    /// `3 values flushed to zero in f16, the first at (0, 5): 1e-9`, or `no value flushed to zero`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.first {
            None => write!(f, "no value flushed to zero"),
            Some((r, c, v)) => write!(f, "{} values flushed to zero, the first at ({r}, {c}): {v:e}", self.count),
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Field {
    Real,
    Integer,
    Pattern,
}

#[derive(Clone, Copy, PartialEq)]
enum Symmetry {
    General,
    Symmetric,
    SkewSymmetric,
}

fn io_err(path: &str, reason: impl Into<String>) -> Error {
    Error::Io { path: path.to_string(), reason: reason.into() }
}

/// At most [`QUOTE_BYTES`] of `s`, in quotes, printable ASCII only (anything else shown as `?`), with `...` and
/// the full length when cut.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(QUOTE_BYTES + 32);
    out.push('\'');
    let mut used = 0;
    for ch in s.chars() {
        if used + ch.len_utf8() > QUOTE_BYTES {
            break;
        }
        used += ch.len_utf8();
        out.push(if ch == ' ' || ch.is_ascii_graphic() { ch } else { '?' });
    }
    out.push('\'');
    if used < s.len() {
        out.push_str(&format!("... ({} bytes)", s.len()));
    }
    out
}

/// Reads lines of at most [`MAX_LINE_BYTES`] from a `BufRead`, counting them.
struct Lines<R> {
    reader: R,
    buf: Vec<u8>,
    /// The number (1-based) of the line last returned.
    number: usize,
}

impl<R: BufRead> Lines<R> {
    /// The next line's number and text without its terminator (`\n` or `\r\n`), `None` at the end of the
    /// input. Stops with an error as soon as the line exceeds [`MAX_LINE_BYTES`].
    fn next_line(&mut self, name: &str) -> Result<Option<(usize, &[u8])>> {
        self.buf.clear();
        self.number = self.number.saturating_add(1);
        let mut any = false;
        loop {
            let chunk = match self.reader.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_err(name, format!("line {}: read error: {e}", self.number))),
            };
            if chunk.is_empty() {
                break;
            }
            any = true;
            let (take, end) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (i, true),
                None => (chunk.len(), false),
            };
            if take > MAX_LINE_BYTES - self.buf.len() {
                return Err(io_err(
                    name,
                    format!("line {}: longer than {MAX_LINE_BYTES} bytes (the limit for one line)", self.number),
                ));
            }
            self.buf.extend_from_slice(&chunk[..take]);
            self.reader.consume(take + usize::from(end));
            if end {
                break;
            }
        }
        if !any {
            return Ok(None);
        }
        if self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        Ok(Some((self.number, &self.buf)))
    }
}

/// A line as text, or an error naming it when it is not UTF-8.
fn text<'a>(bytes: &'a [u8], name: &str, line: usize) -> Result<&'a str> {
    std::str::from_utf8(bytes).map_err(|e| {
        io_err(name, format!("line {line}: not valid UTF-8 (at byte {}); Matrix Market is ASCII", e.valid_up_to()))
    })
}

/// Grows `v` by one element, fallibly (amortized: the capacity doubles when full).
fn push<E>(v: &mut Vec<E>, e: E) -> Result<()> {
    if v.len() == v.capacity() {
        alloc::reserve("Matrix Market entries", v, 1)?;
    }
    v.push(e);
    Ok(())
}

impl MatrixMarket {
    /// Reads and parses the file at `path` (see [`MatrixMarket::parse`]). Errors are [`Error::Io`] naming the
    /// file and, for parse errors, the line number. The entry list is reserved up front for the entries the
    /// size line declares, capped by what the file's length can hold (an entry line takes at least 4 bytes).
    pub fn read(path: &Path) -> Result<Self> {
        let name = path.display().to_string();
        let file = File::open(path).map_err(|e| io_err(&name, format!("cannot open: {e}")))?;
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let max_lines = usize::try_from(len / 4 + 1).unwrap_or(usize::MAX);
        Self::parse_reserving(BufReader::new(file), &name, max_lines)
    }

    /// Parses Matrix Market text from `reader`; `name` is used in error messages. Streaming: lines are read one
    /// at a time, each at most [`MAX_LINE_BYTES`]; memory grows with the entries actually present, whatever the
    /// size line declares. Errors are [`Error::Io`] naming the line (bad syntax, an index out of the declared
    /// shape, a NaN, infinite or out-of-range value, too many or too few entries, a line too long, a read
    /// error), or [`Error::OutOfMemory`] when the entries do not fit in memory. The
    /// [module documentation](self) lists the limits.
    ///
    /// ```
    /// use sparsek::{Error, format::MatrixMarket};
    /// let text = "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 2 1e400\n";
    /// let err = MatrixMarket::parse(text.as_bytes(), "a.mtx").unwrap_err();
    /// assert!(matches!(&err, Error::Io { reason, .. } if reason.starts_with("line 3:")), "{err}");
    /// ```
    pub fn parse(reader: impl BufRead, name: &str) -> Result<Self> {
        Self::parse_reserving(reader, name, INITIAL_ENTRIES)
    }

    /// [`MatrixMarket::parse`], reserving room for at most `max_lines` entry lines up front.
    fn parse_reserving(reader: impl BufRead, name: &str, max_lines: usize) -> Result<Self> {
        let mut lines = Lines { reader, buf: Vec::new(), number: 0 };
        let at = |line: usize, what: String| io_err(name, format!("line {line}: {what}"));

        // Header.
        let (field, symmetry) = match lines.next_line(name)? {
            None => return Err(io_err(name, "empty file (expected a %%MatrixMarket header)")),
            Some((_, l)) => parse_header(text(l, name, 1)?).map_err(|w| at(1, w))?,
        };

        // Size line, after comments and blank lines.
        let (rows, cols, nnz) = loop {
            let Some((n, l)) = lines.next_line(name)? else {
                return Err(io_err(name, "missing size line"));
            };
            let l = l.trim_ascii();
            if l.is_empty() || l[0] == b'%' {
                continue;
            }
            let t = text(l, name, n)?;
            let mut it = t.split_whitespace();
            let (Some(r), Some(c), Some(z), None) = (it.next(), it.next(), it.next(), it.next()) else {
                return Err(at(n, format!("size line needs 'rows cols nnz', got {}", quote(t))));
            };
            let p = |s: &str, what: &str| {
                s.parse::<usize>()
                    .map_err(|_| at(n, format!("bad {what} {} (expected an integer in 0..={})", quote(s), usize::MAX)))
            };
            break (p(r, "row count")?, p(c, "column count")?, p(z, "entry count")?);
        };
        if symmetry != Symmetry::General && rows != cols {
            return Err(io_err(
                name,
                format!("a symmetric or skew-symmetric matrix must be square, got {rows}x{cols}"),
            ));
        }

        // The declared count is a hint, never trusted beyond what the input can hold.
        let per_line = if symmetry == Symmetry::General { 1 } else { 2 };
        let initial = nnz.min(max_lines).saturating_mul(per_line);
        let mut entries = alloc::with_capacity::<(usize, usize, f64)>("Matrix Market entries", initial)?;
        // Off-diagonal entries of a symmetric or skew-symmetric file: (lower index, higher index, line, listed in
        // the upper triangle), to refuse a pair listed on both sides.
        let mut halves: Vec<(usize, usize, usize, bool)> = Vec::new();
        let mut seen = 0usize;
        while let Some((n, l)) = lines.next_line(name)? {
            let l = l.trim_ascii();
            if l.is_empty() || l[0] == b'%' {
                continue;
            }
            if seen == nnz {
                return Err(at(n, format!("more entries than the {nnz} declared")));
            }
            seen += 1;
            let t = text(l, name, n)?;
            let mut it = t.split_whitespace();
            let mut index = |what: &str, limit: usize| -> Result<usize> {
                let s = it.next().ok_or_else(|| at(n, format!("missing {what} index")))?;
                let v = s.parse::<usize>().map_err(|_| at(n, format!("bad {what} index {}", quote(s))))?;
                if v == 0 || v > limit {
                    return Err(at(n, format!("{what} index {v} out of range 1..={limit}")));
                }
                Ok(v - 1)
            };
            let r = index("row", rows)?;
            let c = index("column", cols)?;
            let (v, token) = match field {
                Field::Pattern => (1.0, "1"),
                Field::Real | Field::Integer => {
                    let s = it.next().ok_or_else(|| at(n, "missing value".to_string()))?;
                    (parse_value(s, field).map_err(|w| at(n, w))?, s)
                }
            };
            if let Some(extra) = it.next() {
                return Err(at(n, format!("unexpected trailing field {}", quote(extra))));
            }
            if r == c && symmetry == Symmetry::SkewSymmetric && v != 0.0 {
                return Err(at(n, format!("skew-symmetric matrix with nonzero diagonal entry {}", quote(token))));
            }
            push(&mut entries, (r, c, v))?;
            if r != c && symmetry != Symmetry::General {
                push(&mut halves, (r.min(c), r.max(c), n, r < c))?;
            }
            if r != c {
                match symmetry {
                    Symmetry::General => {}
                    Symmetry::Symmetric => push(&mut entries, (c, r, v))?,
                    Symmetry::SkewSymmetric => push(&mut entries, (c, r, -v))?,
                }
            }
        }
        if seen != nnz {
            return Err(io_err(name, format!("the size line declares {nnz} entries, the file has {seen}")));
        }
        if let Some((line, (r, c), first)) = both_halves(&mut halves) {
            return Err(at(
                line,
                format!(
                    "entry ({}, {}) mirrors the entry ({}, {}) of line {first}: a symmetric or skew-symmetric file \
                     lists each off-diagonal pair once (its lower or its upper triangle), and the reader does not \
                     sum a pair listed on both sides",
                    r + 1,
                    c + 1,
                    c + 1,
                    r + 1
                ),
            ));
        }
        Ok(MatrixMarket { rows, cols, entries })
    }

    /// The rows and columns rounded up to multiples of `bs` (the shape [`MatrixMarket::to_bsr`] produces;
    /// saturating at the largest multiple of `bs` when that overflows `usize`, a shape `to_bsr` rejects).
    pub fn padded_shape(&self, bs: usize) -> (usize, usize) {
        let up = |x: usize| if bs == 0 { x } else { x.div_ceil(bs).min(usize::MAX / bs) * bs };
        (up(self.rows), up(self.cols))
    }

    /// Blockifies into a BSR matrix with blocks of size `bs`, zero-padding rows and columns up to the next
    /// multiples of `bs` (see [`MatrixMarket::padded_shape`]; the original shape stays in `self`). Duplicate
    /// entries are summed in f64 and rounded once to `T`. No bound on the memory of the result but the
    /// allocator's ([`Error::OutOfMemory`]); see [`MatrixMarket::to_bsr_limited`] for one, and for the errors.
    pub fn to_bsr<T: Scalar>(&self, bs: usize) -> Result<Bsr<T>> {
        self.to_bsr_limited(bs, usize::MAX)
    }

    /// [`MatrixMarket::to_bsr`] with a budget: the result's memory, `(rows/bs + 1) * 4` bytes of `row_ptr` plus
    /// `nnzb * 4` of `col_idx` plus `nnzb * bs * bs * size_of::<T>()` of values (`rows` padded, `nnzb` the
    /// number of distinct blocks the entries touch), must not exceed `max_bytes`. It is computed exactly before
    /// anything of that size is allocated; the conversion needs besides 16 bytes of scratch per entry and one
    /// block of f64. Pass the machine's available memory to refuse, before allocating, a sparse file whose
    /// entries touch more blocks than fit.
    ///
    /// Errors, in the order checked:
    /// - `bs` not supported: [`BsrError::UnsupportedBlockSize`]; more than `u32::MAX` block columns or block rows:
    ///   [`BsrError::TooLarge`];
    /// - an entry outside `self.rows x self.cols` (the shape before padding): [`BsrError::EntryOutOfRange`]
    ///   naming the first (its index in `entries`);
    /// - more than `u32::MAX` distinct blocks: [`BsrError::TooLarge`]; more than `max_bytes`: [`Error::TooLarge`]
    ///   `{ what: "BSR memory for the file's shape and blocks (bytes: values + row_ptr + col_idx)", requested,
    ///   limit: max_bytes }`; an allocation refused: [`Error::OutOfMemory`];
    /// - a stored value NaN or infinite after summing its duplicates and rounding to `T` (a non-finite entry in a
    ///   hand-built value, 70000 or 65504 + 65504 for f16, 1e39 for f32): [`Error::NonFinite`] with the sum and
    ///   its 0-based (row, col).
    ///
    /// ```
    /// use sparsek::{Error, f16, format::MatrixMarket};
    /// // Two entries in distinct 128x128 blocks: 2 * 128 * 128 * 2 bytes of f16 values, plus 3 * 4 bytes of
    /// // row_ptr and 2 * 4 of col_idx.
    /// let m = MatrixMarket { rows: 256, cols: 256, entries: vec![(0, 0, 1.0), (200, 200, 2.0)] };
    /// let err = m.to_bsr_limited::<f16>(128, 60_000).unwrap_err();
    /// assert!(matches!(err, Error::TooLarge { requested: 65_556, limit: 60_000, .. }), "{err}");
    /// assert_eq!(m.to_bsr_limited::<f16>(128, 65_556).unwrap().nnzb(), 2);
    /// ```
    pub fn to_bsr_limited<T: Scalar>(&self, bs: usize, max_bytes: usize) -> Result<Bsr<T>> {
        Ok(self.to_bsr_limited_with_underflow(bs, max_bytes)?.0)
    }

    /// [`MatrixMarket::to_bsr_limited`], also counting the stored values that are nonzero in f64 (after summing
    /// duplicates) but round to zero in `T` ([`Underflow`]; e.g. `1e-9` in f16). Same errors.
    ///
    /// ```
    /// use sparsek::{f16, format::MatrixMarket};
    /// let m = MatrixMarket { rows: 16, cols: 16, entries: vec![(0, 0, 1.0), (3, 5, 1e-9)] };
    /// let (a, under) = m.to_bsr_limited_with_underflow::<f16>(16, usize::MAX).unwrap();
    /// assert_eq!((a.nnzb(), under.count, under.first), (1, 1, Some((3, 5, 1e-9))));
    /// ```
    pub fn to_bsr_limited_with_underflow<T: Scalar>(&self, bs: usize, max_bytes: usize) -> Result<(Bsr<T>, Underflow)> {
        if !super::SUPPORTED_BLOCK_SIZES.contains(&bs) {
            return Err(BsrError::UnsupportedBlockSize { bs }.into());
        }
        let limit = u32::MAX as usize;
        let (block_rows, block_cols) = (self.rows.div_ceil(bs), self.cols.div_ceil(bs));
        if block_cols > limit {
            return Err(BsrError::TooLarge { what: "block columns", value: block_cols, limit }.into());
        }
        if block_rows > limit {
            return Err(BsrError::TooLarge { what: "block rows", value: block_rows, limit }.into());
        }
        let rows = alloc::mul("padded rows", block_rows, bs)?;
        let cols = alloc::mul("padded columns", block_cols, bs)?;
        blockify(rows, cols, bs, (self.rows, self.cols), &self.entries, max_bytes, NonFinitePolicy::Reject)
    }
}

/// What [`blockify`] does with a stored value that is not finite after summing and rounding to the element type.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum NonFinitePolicy {
    /// Always an error ([`MatrixMarket::to_bsr`]: the values must be finite).
    Reject,
    /// An error only when no entry summed into it was NaN or infinite itself, i.e. when the sum or the rounding
    /// overflowed; non-finite input values are kept ([`Bsr::from_coo`]).
    KeepInput,
}

/// The [`Error::NonFinite`] `what` of a conversion to `T`.
fn non_finite_what<T: Scalar>(policy: NonFinitePolicy) -> &'static str {
    match (policy, T::NAME) {
        (NonFinitePolicy::Reject, "f16") => "Matrix Market value (sum of duplicates) rounded to f16",
        (NonFinitePolicy::Reject, "bf16") => "Matrix Market value (sum of duplicates) rounded to bf16",
        (NonFinitePolicy::Reject, "f32") => "Matrix Market value (sum of duplicates) rounded to f32",
        (NonFinitePolicy::Reject, _) => "Matrix Market value (sum of duplicates)",
        (NonFinitePolicy::KeepInput, "f16") => "COO entries summed and rounded to f16",
        (NonFinitePolicy::KeepInput, "bf16") => "COO entries summed and rounded to bf16",
        (NonFinitePolicy::KeepInput, "f32") => "COO entries summed and rounded to f32",
        (NonFinitePolicy::KeepInput, _) => "COO entries summed",
    }
}

/// Blockifies COO entries (0-based, any order) into a `rows x cols` BSR matrix with blocks of size `bs`: the
/// stored blocks are those holding at least one entry, duplicates summed in f64 (in input order) and rounded once
/// to `T`. The work behind [`Bsr::from_coo`] and [`MatrixMarket::to_bsr_limited`]:
///
/// - the shape is checked first (block size, multiples, block counts fitting u32), then every entry against
///   `bounds` (capped at `rows x cols`): [`BsrError::EntryOutOfRange`] names the first outside;
/// - memory is proportional to the entries (16 bytes each, to sort them by block) and to the stored blocks: the
///   distinct blocks are counted, the result's bytes computed exactly and compared with `max_bytes`
///   ([`Error::TooLarge`]), then allocated fallibly ([`Error::OutOfMemory`]); one block of f64 accumulates;
/// - a stored value that is not finite after rounding is [`Error::NonFinite`] at its (row, col), as `policy`
///   says.
pub(super) fn blockify<S: Scalar, T: Scalar>(
    rows: usize,
    cols: usize,
    bs: usize,
    bounds: (usize, usize),
    entries: &[(usize, usize, S)],
    max_bytes: usize,
    policy: NonFinitePolicy,
) -> Result<(Bsr<T>, Underflow)> {
    super::BlockShape::new(rows, cols, bs)?;
    let (max_r, max_c) = (bounds.0.min(rows), bounds.1.min(cols));
    for (index, &(row, col, _)) in entries.iter().enumerate() {
        if row >= max_r || col >= max_c {
            return Err(BsrError::EntryOutOfRange { index, row, col, rows: max_r, cols: max_c }.into());
        }
    }

    // Sort the entries by block; ties in input order, so duplicates are summed as listed. Block rows and
    // columns fit u32 (BlockShape::new), so a block's key fits u64.
    let mut keys = alloc::with_capacity::<(u64, usize)>("COO entries sorted by block", entries.len())?;
    keys.extend(entries.iter().enumerate().map(|(i, &(r, c, _))| ((((r / bs) as u64) << 32) | (c / bs) as u64, i)));
    keys.sort_unstable();
    let nnzb = keys.chunk_by(|a, b| a.0 == b.0).count();
    let limit = u32::MAX as usize;
    if nnzb > limit {
        return Err(BsrError::TooLarge { what: "nnzb", value: nnzb, limit }.into());
    }

    // The result's size, exactly, before allocating it.
    let block_rows = rows / bs;
    let block_len = bs * bs;
    let index_bytes = (block_rows as u128 + 1 + nnzb as u128) * 4;
    let value_bytes = nnzb as u128 * block_len as u128 * std::mem::size_of::<T>() as u128;
    let requested = index_bytes + value_bytes;
    if requested > max_bytes as u128 {
        return Err(Error::TooLarge { what: BSR_BYTES, requested, limit: max_bytes as u128 });
    }
    let values_len = alloc::mul("BSR values (nnzb * bs * bs)", nnzb, block_len)?;
    let mut values = alloc::with_capacity::<T>("BSR values", values_len)?;
    let mut row_ptr = alloc::with_capacity::<u32>("BSR row_ptr", block_rows + 1)?;
    let mut col_idx = alloc::with_capacity::<u32>("BSR col_idx", nnzb)?;
    let mut acc = alloc::filled("block accumulator", block_len, 0.0f64)?;
    let mut from_non_finite = alloc::filled("block accumulator", block_len, false)?;
    let mut underflow = Underflow::default();

    row_ptr.push(0u32);
    for group in keys.chunk_by(|a, b| a.0 == b.0) {
        let key = group[0].0;
        let (br, bc) = ((key >> 32) as usize, (key & u64::from(u32::MAX)) as usize);
        // Block rows before this one (and this one's start) end where the blocks so far end.
        row_ptr.resize(br + 1, col_idx.len() as u32);
        col_idx.push(bc as u32);
        acc.fill(0.0);
        from_non_finite.fill(false);
        for &(_, i) in group {
            let (r, c, v) = entries[i];
            let (pos, v) = ((r % bs) * bs + c % bs, v.to_f64());
            acc[pos] += v;
            from_non_finite[pos] |= !v.is_finite();
        }
        for (pos, (&sum, &kept)) in acc.iter().zip(&from_non_finite).enumerate() {
            let t = T::from_f64(sum);
            if !t.to_f64().is_finite() && (policy == NonFinitePolicy::Reject || !kept) {
                return Err(Error::NonFinite {
                    what: non_finite_what::<T>(policy),
                    value: format!("{sum:e}"),
                    index: (br * bs + pos / bs, bc * bs + pos % bs),
                });
            }
            if sum != 0.0 && t.to_f64() == 0.0 {
                underflow.count += 1;
                underflow.first.get_or_insert((br * bs + pos / bs, bc * bs + pos % bs, sum));
            }
            values.push(t);
        }
    }
    row_ptr.resize(block_rows + 1, col_idx.len() as u32);
    Ok((Bsr::try_new(rows, cols, bs, row_ptr, col_idx, values)?, underflow))
}

/// The off-diagonal pair of a symmetric file listed on both sides of the diagonal whose later listing comes
/// first in the file: `(its line, its 0-based (row, col), the line of the earlier, mirrored listing)`.
/// `halves` holds `(lower index, higher index, line, listed above the diagonal)`; it is sorted here.
fn both_halves(halves: &mut [(usize, usize, usize, bool)]) -> Option<(usize, (usize, usize), usize)> {
    halves.sort_unstable();
    let mut found: Option<(usize, (usize, usize), usize)> = None;
    for group in halves.chunk_by(|a, b| (a.0, a.1) == (b.0, b.1)) {
        // In line order: the first listing on the other side than the group's first.
        let (lo, hi, first, upper) = group[0];
        if let Some(&(_, _, line, up)) = group.iter().find(|h| h.3 != upper)
            && found.is_none_or(|f| line < f.0)
        {
            let rc = if up { (lo, hi) } else { (hi, lo) };
            let earlier = group.iter().rev().find(|h| h.3 == upper && h.2 < line).map_or(first, |h| h.2);
            found = Some((line, rc, earlier));
        }
    }
    found
}

/// A value token of a real or integer file: finite f64, or what is wrong with it.
fn parse_value(s: &str, field: Field) -> std::result::Result<f64, String> {
    if field == Field::Integer {
        return s.parse::<i64>().map(|v| v as f64).map_err(|_| {
            format!("bad integer value {} (expected an integer in {}..={})", quote(s), i64::MIN, i64::MAX)
        });
    }
    let v = s.parse::<f64>().map_err(|_| format!("bad value {}", quote(s)))?;
    if v.is_finite() {
        return Ok(v);
    }
    let body = s.trim_start_matches(['+', '-']);
    if ["nan", "inf", "infinity"].iter().any(|w| body.eq_ignore_ascii_case(w)) {
        Err(format!("value {} is not finite (values must be finite)", quote(s)))
    } else {
        Err(format!("value {} is out of the range of f64 (values must be finite)", quote(s)))
    }
}

/// The value `word` names in `table` (ASCII case ignored).
fn named<T: Copy>(word: &str, table: &[(&str, T)]) -> Option<T> {
    table.iter().find(|(name, _)| word.eq_ignore_ascii_case(name)).map(|&(_, v)| v)
}

fn parse_header(l: &str) -> std::result::Result<(Field, Symmetry), String> {
    let mut words = l.split_whitespace();
    let w: Vec<&str> = words.by_ref().take(5).collect();
    let is = |i: usize, want: &str| w.get(i).is_some_and(|x| x.eq_ignore_ascii_case(want));
    if w.len() != 5 || words.next().is_some() || !is(0, "%%MatrixMarket") || !is(1, "matrix") {
        return Err(format!("expected '%%MatrixMarket matrix coordinate <field> <symmetry>', got {}", quote(l.trim())));
    }
    if !is(2, "coordinate") {
        return Err(format!("only the 'coordinate' format is supported, got {}", quote(w[2])));
    }
    let fields =
        [("real", Field::Real), ("double", Field::Real), ("integer", Field::Integer), ("pattern", Field::Pattern)];
    let field = named(w[3], &fields)
        .ok_or_else(|| format!("unsupported field {} (supported: real, integer, pattern)", quote(w[3])))?;
    let symmetries = [
        ("general", Symmetry::General),
        ("symmetric", Symmetry::Symmetric),
        ("skew-symmetric", Symmetry::SkewSymmetric),
    ];
    let symmetry = named(w[4], &symmetries).ok_or_else(|| {
        format!("unsupported symmetry {} (supported: general, symmetric, skew-symmetric)", quote(w[4]))
    })?;
    Ok((field, symmetry))
}

impl<T: Scalar> Bsr<T> {
    /// Reads a Matrix Market file and blockifies it with blocks of size `bs`. Rows and columns are
    /// zero-padded up to multiples of `bs`; use [`MatrixMarket::read`] to see the original shape. The result's
    /// memory is bounded only by the allocator; [`Bsr::from_matrix_market_limited`] takes a budget.
    pub fn from_matrix_market(path: &Path, bs: usize) -> Result<Self> {
        Self::from_matrix_market_limited(path, bs, usize::MAX)
    }

    /// [`Bsr::from_matrix_market`] with the result's memory (values, `row_ptr` and `col_idx`, in bytes) bounded
    /// by `max_bytes`, e.g. the machine's available memory: beyond it, [`Error::TooLarge`] with the bytes the
    /// file's blocks need and the limit, before they are allocated (see [`MatrixMarket::to_bsr_limited`]). The
    /// block size is checked before the file is read. Reading itself costs memory proportional to the file's
    /// entries (24 bytes each, 48 for the off-diagonal entries of a symmetric file).
    pub fn from_matrix_market_limited(path: &Path, bs: usize, max_bytes: usize) -> Result<Self> {
        if !super::SUPPORTED_BLOCK_SIZES.contains(&bs) {
            return Err(BsrError::UnsupportedBlockSize { bs }.into());
        }
        MatrixMarket::read(path)?.to_bsr_limited(bs, max_bytes)
    }

    /// [`Bsr::from_matrix_market_limited`], also counting the values that flushed to zero in `T` ([`Underflow`],
    /// see [`MatrixMarket::to_bsr_limited_with_underflow`]).
    pub fn from_matrix_market_with_underflow(path: &Path, bs: usize, max_bytes: usize) -> Result<(Self, Underflow)> {
        if !super::SUPPORTED_BLOCK_SIZES.contains(&bs) {
            return Err(BsrError::UnsupportedBlockSize { bs }.into());
        }
        MatrixMarket::read(path)?.to_bsr_limited_with_underflow(bs, max_bytes)
    }

    /// Writes the matrix as `%%MatrixMarket matrix coordinate real general`, one line per element of every
    /// stored block (explicit zeros included, so reading it back gives the same blocks), values printed in
    /// the shortest form that reads back exactly. A NaN or infinite value is written as such, and the reader
    /// rejects it: finite values round-trip.
    pub fn write_matrix_market(&self, path: &Path) -> Result<()> {
        let name = path.display().to_string();
        let err = |e: std::io::Error| io_err(&name, format!("write error: {e}"));
        let file = File::create(path).map_err(|e| io_err(&name, format!("cannot create: {e}")))?;
        let mut w = BufWriter::new(file);
        let bs = self.block_size();
        writeln!(w, "%%MatrixMarket matrix coordinate real general").map_err(err)?;
        writeln!(w, "% written by sparsek: {} blocks of {bs}x{bs}", self.nnzb()).map_err(err)?;
        writeln!(w, "{} {} {}", self.rows(), self.cols(), self.values().len()).map_err(err)?;
        for br in 0..self.block_rows() {
            for i in self.block_row_range(br) {
                let c0 = self.col_idx()[i] as usize * bs;
                let blk = self.block(i).unwrap_or(&[]);
                for (k, v) in blk.iter().enumerate() {
                    let (r, c) = (br * bs + k / bs, c0 + k % bs);
                    writeln!(w, "{} {} {:e}", r + 1, c + 1, v.to_f64()).map_err(err)?;
                }
            }
        }
        w.flush().map_err(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &[u8]) -> Result<MatrixMarket> {
        MatrixMarket::parse(text, "t.mtx")
    }

    #[test]
    fn quote_is_bounded_and_printable() {
        assert_eq!(quote("abc"), "'abc'");
        assert_eq!(quote("a\tb\u{1b}"), "'a?b?'");
        let long = "x".repeat(1000);
        let q = quote(&long);
        assert!(q.len() < 90 && q.ends_with("... (1000 bytes)"), "{q}");
        let wide = "\u{20ac}".repeat(100); // 3 bytes each: cut at a character boundary
        assert!(quote(&wide).starts_with(&format!("'{}'", "?".repeat(21))));
    }

    #[test]
    fn lines_are_bounded_and_counted() {
        let mut input = b"a\r\n\nb".to_vec();
        let mut l = Lines { reader: &input[..], buf: Vec::new(), number: 0 };
        assert_eq!(l.next_line("x").unwrap(), Some((1, &b"a"[..])));
        assert_eq!(l.next_line("x").unwrap(), Some((2, &b""[..])));
        assert_eq!(l.next_line("x").unwrap(), Some((3, &b"b"[..])));
        assert_eq!(l.next_line("x").unwrap(), None);
        // Exactly at the limit is fine, one more byte is not (in a small buffer: the check spans chunks).
        input = vec![b'z'; MAX_LINE_BYTES];
        input.push(b'\n');
        input.extend(vec![b'y'; MAX_LINE_BYTES + 1]);
        let mut l = Lines { reader: std::io::BufReader::with_capacity(1000, &input[..]), buf: Vec::new(), number: 0 };
        assert_eq!(l.next_line("x").unwrap().map(|(_, l)| l.len()), Some(MAX_LINE_BYTES));
        let e = l.next_line("x").unwrap_err().to_string();
        assert!(e.contains("line 2: longer than"), "{e}");
        assert!(l.buf.len() <= MAX_LINE_BYTES);
    }

    #[test]
    fn values_must_be_finite_and_in_range() {
        let file = |v: &str| format!("%%MatrixMarket matrix coordinate real general\n1 1 1\n1 1 {v}\n");
        for bad in ["1e400", "-1e309", "nan", "-Infinity", "inf"] {
            let e = parse(file(bad).as_bytes()).unwrap_err().to_string();
            assert!(e.contains("line 3:") && e.contains(bad), "{e}");
        }
        assert_eq!(parse(file("1e-400").as_bytes()).unwrap().entries, vec![(0, 0, 0.0)]);
        let int = "%%MatrixMarket matrix coordinate integer general\n1 1 1\n1 1 99999999999999999999\n";
        assert!(parse(int.as_bytes()).unwrap_err().to_string().contains("line 3:"));
    }

    #[test]
    fn blockify_sizes_and_overflow() {
        let m = MatrixMarket { rows: 40, cols: 40, entries: vec![(0, 0, 1.0), (39, 39, 2.0), (0, 0, 0.5)] };
        let a = m.to_bsr::<f32>(32).unwrap();
        assert_eq!((a.rows(), a.row_ptr(), a.col_idx()), (64, &[0u32, 1, 2][..], &[0u32, 1][..]));
        assert_eq!(a.values()[0], 1.5);
        // 2 blocks of 32x32 f32 plus 3 + 2 indices.
        let need = 2 * 32 * 32 * 4 + 5 * 4;
        assert!(m.to_bsr_limited::<f32>(32, need).is_ok());
        let e = m.to_bsr_limited::<f32>(32, need - 1).unwrap_err();
        assert!(
            matches!(e, Error::TooLarge { requested, limit, .. } if requested == need as u128 && limit + 1 == requested)
        );
        let big = MatrixMarket { rows: 1, cols: 1, entries: vec![(0, 0, 60000.0), (0, 0, 60000.0)] };
        let e = big.to_bsr::<half::f16>(16).unwrap_err();
        assert!(matches!(e, Error::NonFinite { index: (0, 0), .. }), "{e}");
        assert!(big.to_bsr::<f32>(16).is_ok());
    }

    #[test]
    fn a_symmetric_pair_listed_on_both_sides_is_refused() {
        let head = "%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n";
        let e = parse(format!("{head}2 1 1.5\n3 3 4\n1 2 2.5\n").as_bytes()).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(&e, Error::Io { reason, .. } if reason.starts_with("line 5: entry (1, 2) mirrors the entry (2, 1) of line 3")),
            "{msg}"
        );
        // Skew-symmetric too; each side once is fine, a duplicate on one side is summed as in a general file.
        let skew = "%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 2\n1 3 1\n3 1 -1\n";
        assert!(parse(skew.as_bytes()).unwrap_err().to_string().contains("line 4: entry (3, 1) mirrors"));
        let ok = parse(format!("{head}2 1 1.5\n2 1 1\n1 3 2\n").as_bytes()).unwrap();
        assert_eq!(ok.entries.len(), 6);
        assert_eq!(ok.to_bsr::<f32>(16).unwrap().to_dense().unwrap().get(1, 0), 2.5);
        // A general file lists both halves as two entries.
        let general = "%%MatrixMarket matrix coordinate real general\n2 2 2\n1 2 1\n2 1 1\n";
        assert!(parse(general.as_bytes()).is_ok());
    }

    #[test]
    fn underflow_is_counted() {
        let m = MatrixMarket {
            rows: 40,
            cols: 40,
            entries: vec![(0, 0, 1.0), (39, 38, 1e-12), (2, 1, -1e-45), (2, 2, 1e-30), (2, 2, -1e-30)],
        };
        let (a, u) = m.to_bsr_limited_with_underflow::<half::f16>(16, usize::MAX).unwrap();
        assert_eq!((u.count, u.first), (2, Some((2, 1, -1e-45))), "{u}");
        assert_eq!(a.nnzb(), 2);
        assert!(u.to_string().starts_with("2 values flushed to zero, the first at (2, 1)"), "{u}");
        let (_, u) = m.to_bsr_limited_with_underflow::<half::bf16>(16, usize::MAX).unwrap();
        assert_eq!(u.count, 1, "1e-12 is a normal bf16, -1e-45 is not: {u}");
        let (_, u) = m.to_bsr_limited_with_underflow::<f64>(16, usize::MAX).unwrap();
        assert_eq!(u, Underflow::default());
    }
}
