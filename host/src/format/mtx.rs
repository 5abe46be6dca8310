//! Matrix Market (`.mtx`) coordinate files: reading (real, integer or pattern; general, symmetric or
//! skew-symmetric) and writing.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;

use super::Bsr;
use crate::error::{Error, Result};
use crate::scalar::Scalar;

/// A sparse matrix as read from a Matrix Market file, in its original shape: `entries` are 0-based
/// `(row, col, value)`, symmetric and skew-symmetric files already expanded (off-diagonal entries mirrored,
/// negated for skew-symmetric), pattern files with value 1, values in f64 (exactly as parsed). Duplicates are
/// kept as listed; [`MatrixMarket::to_bsr`] sums them.
#[derive(Clone, Debug, PartialEq)]
pub struct MatrixMarket {
    /// Rows of the matrix in the file.
    pub rows: usize,
    /// Columns of the matrix in the file.
    pub cols: usize,
    /// The entries, 0-based.
    pub entries: Vec<(usize, usize, f64)>,
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

impl MatrixMarket {
    /// Reads and parses the file at `path`. Errors are [`Error::Io`] naming the file and, for parse
    /// errors, the line number.
    pub fn read(path: &Path) -> Result<Self> {
        let name = path.display().to_string();
        let file = File::open(path).map_err(|e| io_err(&name, format!("cannot open: {e}")))?;
        Self::parse(BufReader::new(file), &name)
    }

    /// Parses Matrix Market text from `reader`; `name` is used in error messages.
    pub fn parse(reader: impl BufRead, name: &str) -> Result<Self> {
        let mut lines = reader.lines().enumerate().map(|(i, l)| (i + 1, l));
        let at = |line: usize, what: String| io_err(name, format!("line {line}: {what}"));

        // Header.
        let (field, symmetry) = match lines.next() {
            None => return Err(io_err(name, "empty file (expected a %%MatrixMarket header)")),
            Some((n, l)) => {
                let l = l.map_err(|e| at(n, format!("read error: {e}")))?;
                parse_header(&l).map_err(|w| at(n, w))?
            }
        };

        // Size line, after comments and blank lines.
        let (rows, cols, nnz) = loop {
            let Some((n, l)) = lines.next() else {
                return Err(io_err(name, "missing size line"));
            };
            let l = l.map_err(|e| at(n, format!("read error: {e}")))?;
            let t = l.trim();
            if t.is_empty() || t.starts_with('%') {
                continue;
            }
            let nums: Vec<&str> = t.split_whitespace().collect();
            if nums.len() != 3 {
                return Err(at(n, format!("size line needs 'rows cols nnz', got '{t}'")));
            }
            let p = |s: &str, what: &str| s.parse::<usize>().map_err(|_| at(n, format!("bad {what} '{s}'")));
            break (p(nums[0], "row count")?, p(nums[1], "column count")?, p(nums[2], "entry count")?);
        };
        if symmetry != Symmetry::General && rows != cols {
            return Err(io_err(
                name,
                format!("a symmetric or skew-symmetric matrix must be square, got {rows}x{cols}"),
            ));
        }

        let mut entries = Vec::with_capacity(nnz.min(1 << 20));
        let mut seen = 0usize;
        for (n, l) in lines {
            let l = l.map_err(|e| at(n, format!("read error: {e}")))?;
            let t = l.trim();
            if t.is_empty() || t.starts_with('%') {
                continue;
            }
            if seen == nnz {
                return Err(at(n, format!("more entries than the {nnz} declared")));
            }
            seen += 1;
            let mut it = t.split_whitespace();
            let mut index = |what: &str, limit: usize| -> Result<usize> {
                let s = it.next().ok_or_else(|| at(n, format!("missing {what} index")))?;
                let v = s.parse::<usize>().map_err(|_| at(n, format!("bad {what} index '{s}'")))?;
                if v == 0 || v > limit {
                    return Err(at(n, format!("{what} index {v} out of range 1..={limit}")));
                }
                Ok(v - 1)
            };
            let r = index("row", rows)?;
            let c = index("column", cols)?;
            let v = match field {
                Field::Pattern => 1.0,
                Field::Real | Field::Integer => {
                    let s = it.next().ok_or_else(|| at(n, "missing value".to_string()))?;
                    let v = if field == Field::Integer {
                        s.parse::<i64>().map(|v| v as f64).ok()
                    } else {
                        s.parse::<f64>().ok()
                    };
                    v.ok_or_else(|| at(n, format!("bad value '{s}'")))?
                }
            };
            if let Some(extra) = it.next() {
                return Err(at(n, format!("unexpected trailing field '{extra}'")));
            }
            entries.push((r, c, v));
            if r != c {
                match symmetry {
                    Symmetry::General => {}
                    Symmetry::Symmetric => entries.push((c, r, v)),
                    Symmetry::SkewSymmetric => entries.push((c, r, -v)),
                }
            } else if symmetry == Symmetry::SkewSymmetric && v != 0.0 {
                return Err(at(n, format!("skew-symmetric matrix with nonzero diagonal entry {v}")));
            }
        }
        if seen != nnz {
            return Err(io_err(name, format!("the size line declares {nnz} entries, the file has {seen}")));
        }
        Ok(MatrixMarket { rows, cols, entries })
    }

    /// The rows and columns rounded up to multiples of `bs` (the shape [`MatrixMarket::to_bsr`] produces).
    pub fn padded_shape(&self, bs: usize) -> (usize, usize) {
        let up = |x: usize| if bs == 0 { x } else { x.div_ceil(bs).saturating_mul(bs) };
        (up(self.rows), up(self.cols))
    }

    /// Blockifies into a BSR matrix with blocks of size `bs`, zero-padding rows and columns up to the next
    /// multiples of `bs` (see [`MatrixMarket::padded_shape`]; the original shape stays in `self`). Duplicate
    /// entries are summed in f64 and rounded once to `T`.
    pub fn to_bsr<T: Scalar>(&self, bs: usize) -> Result<Bsr<T>> {
        if !super::SUPPORTED_BLOCK_SIZES.contains(&bs) {
            return Err(super::BsrError::UnsupportedBlockSize { bs }.into());
        }
        let (rows, cols) = self.padded_shape(bs);
        Ok(Bsr::<f64>::from_coo(rows, cols, bs, &self.entries)?.convert())
    }
}

fn parse_header(l: &str) -> std::result::Result<(Field, Symmetry), String> {
    let words: Vec<String> = l.split_whitespace().map(|w| w.to_ascii_lowercase()).collect();
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    if w.len() != 5 || w[0] != "%%matrixmarket" || w[1] != "matrix" {
        return Err(format!("expected '%%MatrixMarket matrix coordinate <field> <symmetry>', got '{}'", l.trim()));
    }
    if w[2] != "coordinate" {
        return Err(format!("only the 'coordinate' format is supported, got '{}'", w[2]));
    }
    let field = match w[3] {
        "real" | "double" => Field::Real,
        "integer" => Field::Integer,
        "pattern" => Field::Pattern,
        f => return Err(format!("unsupported field '{f}' (supported: real, integer, pattern)")),
    };
    let symmetry = match w[4] {
        "general" => Symmetry::General,
        "symmetric" => Symmetry::Symmetric,
        "skew-symmetric" => Symmetry::SkewSymmetric,
        s => return Err(format!("unsupported symmetry '{s}' (supported: general, symmetric, skew-symmetric)")),
    };
    Ok((field, symmetry))
}

impl<T: Scalar> Bsr<T> {
    /// Reads a Matrix Market file and blockifies it with blocks of size `bs`. Rows and columns are
    /// zero-padded up to multiples of `bs`; use [`MatrixMarket::read`] to see the original shape.
    pub fn from_matrix_market(path: &Path, bs: usize) -> Result<Self> {
        MatrixMarket::read(path)?.to_bsr(bs)
    }

    /// Writes the matrix as `%%MatrixMarket matrix coordinate real general`, one line per element of every
    /// stored block (explicit zeros included, so reading it back gives the same blocks), values printed in
    /// the shortest form that reads back exactly.
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
