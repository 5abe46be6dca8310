//! Dense row-major host matrices with a leading dimension (the stride between rows, in elements).

use crate::error::{Error, Result};
use crate::rng::Rng;
use crate::scalar::Scalar;

/// A dense `rows x cols` row-major matrix whose row `r` starts at `data[r * ld]`; `ld >= cols`. Elements
/// between `cols` and `ld` in each row are padding: never read by products, never written.
#[derive(Clone, Debug, PartialEq)]
pub struct Matrix<T> {
    rows: usize,
    cols: usize,
    ld: usize,
    data: Vec<T>,
}

impl<T: Scalar> Matrix<T> {
    /// Wraps `data` as a `rows x cols` matrix with leading dimension `ld`. Needs `ld >= cols` and
    /// `data.len() >= (rows - 1) * ld + cols` (an empty matrix needs nothing).
    pub fn from_vec(rows: usize, cols: usize, ld: usize, data: Vec<T>) -> Result<Self> {
        if ld < cols.max(1) {
            return Err(Error::InvalidMatrix {
                what: "ld",
                reason: format!("leading dimension {ld} is smaller than the column count {cols} (and must be >= 1)"),
            });
        }
        let need = Self::needed_len(rows, cols, ld).ok_or_else(|| Error::InvalidMatrix {
            what: "shape",
            reason: format!("{rows}x{cols} with ld {ld} overflows usize"),
        })?;
        if data.len() < need {
            return Err(Error::InvalidMatrix {
                what: "data",
                reason: format!("{rows}x{cols} with ld {ld} needs {need} elements, got {}", data.len()),
            });
        }
        Ok(Matrix { rows, cols, ld, data })
    }

    /// The number of elements a `rows x cols` matrix with leading dimension `ld` spans.
    pub fn needed_len(rows: usize, cols: usize, ld: usize) -> Option<usize> {
        if rows == 0 || cols == 0 {
            return Some(0);
        }
        (rows - 1).checked_mul(ld)?.checked_add(cols)
    }

    /// A matrix with every element (padding included) set to `v`.
    pub fn filled(rows: usize, cols: usize, ld: usize, v: T) -> Result<Self> {
        let len = Self::needed_len(rows, cols, ld.max(1)).unwrap_or(usize::MAX);
        if len == usize::MAX {
            return Err(Error::InvalidMatrix { what: "shape", reason: format!("{rows}x{cols} overflows usize") });
        }
        Self::from_vec(rows, cols, ld, vec![v; len])
    }

    /// A matrix of zeros with `ld == cols`.
    pub fn zeros(rows: usize, cols: usize) -> Self {
        let z = T::from_f64(0.0);
        Matrix { rows, cols, ld: cols.max(1), data: vec![z; rows * cols] }
    }

    /// `f(row, col)` for every element, `ld == cols`.
    pub fn from_fn(rows: usize, cols: usize, mut f: impl FnMut(usize, usize) -> T) -> Self {
        let mut data = Vec::with_capacity(rows * cols);
        for r in 0..rows {
            for c in 0..cols {
                data.push(f(r, c));
            }
        }
        Matrix { rows, cols, ld: cols.max(1), data }
    }

    /// Uniform random values in [-1, 1), rounded to `T`, from `seed`.
    pub fn random(rows: usize, cols: usize, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        Self::from_fn(rows, cols, |_, _| T::from_f64(rng.range_f64(-1.0, 1.0)))
    }

    /// Random small integers in [-lo_hi, lo_hi]: products and sums of these are exact in f16 x f16 -> f32 for
    /// moderate K, so GPU results can be compared bit for bit.
    pub fn random_int(rows: usize, cols: usize, lo_hi: i64, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        Self::from_fn(rows, cols, |_, _| T::from_f64(rng.int_in(-lo_hi, lo_hi) as f64))
    }

    /// A copy with a larger leading dimension (`ld >= cols`); the padding is filled with `pad`.
    pub fn with_ld(&self, ld: usize, pad: T) -> Result<Self> {
        let mut out = Self::filled(self.rows, self.cols, ld, pad)?;
        for r in 0..self.rows {
            out.row_mut(r).copy_from_slice(self.row(r));
        }
        Ok(out)
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Number of columns.
    pub fn cols(&self) -> usize {
        self.cols
    }
    /// Leading dimension (elements between the starts of consecutive rows).
    pub fn ld(&self) -> usize {
        self.ld
    }
    /// The backing storage, padding included.
    pub fn as_slice(&self) -> &[T] {
        &self.data
    }
    /// The backing storage, padding included.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.data
    }
    /// Consumes the matrix, returning its storage.
    pub fn into_vec(self) -> Vec<T> {
        self.data
    }
    /// Row `r` (its `cols` elements, no padding). Panics if `r >= rows`, like slice indexing.
    pub fn row(&self, r: usize) -> &[T] {
        &self.data[r * self.ld..r * self.ld + self.cols]
    }
    /// Row `r`, mutable. Panics if `r >= rows`.
    pub fn row_mut(&mut self, r: usize) -> &mut [T] {
        let ld = self.ld;
        let cols = self.cols;
        &mut self.data[r * ld..r * ld + cols]
    }
    /// Element (r, c). Panics when out of range.
    pub fn get(&self, r: usize, c: usize) -> T {
        assert!(c < self.cols, "column {c} out of range for {} columns", self.cols);
        self.data[r * self.ld + c]
    }
    /// Sets element (r, c). Panics when out of range.
    pub fn set(&mut self, r: usize, c: usize, v: T) {
        assert!(c < self.cols, "column {c} out of range for {} columns", self.cols);
        self.data[r * self.ld + c] = v;
    }
    /// Converts every element (through f64), keeping the shape and dropping the padding.
    pub fn convert<U: Scalar>(&self) -> Matrix<U> {
        Matrix::from_fn(self.rows, self.cols, |r, c| U::from_f64(self.get(r, c).to_f64()))
    }
}
