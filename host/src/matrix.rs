//! Dense row-major host matrices with a leading dimension (the stride between rows, in elements).

use crate::alloc;
use crate::error::{Error, Result};
use crate::rng::Rng;
use crate::scalar::Scalar;

/// A dense `rows x cols` row-major matrix whose row `r` starts at `data[r * ld]`; `ld >= cols`. Elements
/// between `cols` and `ld` in each row are padding: never read by products, never written.
///
/// Empty shapes are valid (0 rows, 0 columns, or both). Every constructor checks its sizes and allocates
/// fallibly: an overflowing shape is [`Error::TooLarge`], a failed allocation [`Error::OutOfMemory`].
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
        check_ld(cols, ld)?;
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
        check_ld(cols, ld)?; // before anything is allocated
        let len = Self::needed_len(rows, cols, ld.max(1)).ok_or(Error::TooLarge {
            what: "dense matrix elements ((rows - 1) * ld + cols)",
            requested: (rows as u128).saturating_mul(ld as u128),
            limit: usize::MAX as u128,
        })?;
        Self::from_vec(rows, cols, ld, alloc::filled("dense matrix", len, v)?)
    }

    /// A copy, allocated fallibly ([`Error::OutOfMemory`] instead of the abort of `clone` when memory runs out).
    pub fn try_clone(&self) -> Result<Self> {
        let mut data = alloc::with_capacity("dense matrix (copy)", self.data.len())?;
        data.extend_from_slice(&self.data);
        Ok(Matrix { rows: self.rows, cols: self.cols, ld: self.ld, data })
    }

    /// A matrix of zeros with `ld == max(cols, 1)`.
    pub fn zeros(rows: usize, cols: usize) -> Result<Self> {
        Self::filled(rows, cols, cols.max(1), T::from_f64(0.0))
    }

    /// `f(row, col)` for every element, `ld == max(cols, 1)`.
    pub fn from_fn(rows: usize, cols: usize, mut f: impl FnMut(usize, usize) -> T) -> Result<Self> {
        let len = alloc::mul("dense matrix elements (rows * cols)", rows, cols)?;
        let mut data = alloc::with_capacity("dense matrix", len)?;
        // (No walk over the rows of an empty matrix: `rows` may be huge when `cols == 0`.)
        for r in 0..if cols == 0 { 0 } else { rows } {
            for c in 0..cols {
                data.push(f(r, c));
            }
        }
        Ok(Matrix { rows, cols, ld: cols.max(1), data })
    }

    /// Uniform random values in [-1, 1), rounded to `T`, from `seed`.
    pub fn random(rows: usize, cols: usize, seed: u64) -> Result<Self> {
        let mut rng = Rng::new(seed);
        Self::from_fn(rows, cols, |_, _| T::from_f64(rng.range_f64(-1.0, 1.0)))
    }

    /// Random small integers in [-lo_hi, lo_hi]: products and sums of these are exact in f16 x f16 -> f32 for
    /// moderate K, so GPU results can be compared bit for bit. `lo_hi` must be in `0..=2048` (every integer of
    /// that range is exact in f16 and f32; in bf16 up to 256), else [`Error::InvalidArgument`].
    pub fn random_int(rows: usize, cols: usize, lo_hi: i64, seed: u64) -> Result<Self> {
        if !(0..=2048).contains(&lo_hi) {
            return Err(Error::InvalidArgument { name: "lo_hi", reason: format!("must be in 0..=2048, got {lo_hi}") });
        }
        let mut rng = Rng::new(seed);
        Self::from_fn(rows, cols, |_, _| T::from_f64(rng.int_in(-lo_hi, lo_hi) as f64))
    }

    /// A copy with a larger leading dimension (`ld >= cols`); the padding is filled with `pad`.
    pub fn with_ld(&self, ld: usize, pad: T) -> Result<Self> {
        let mut out = Self::filled(self.rows, self.cols, ld, pad)?;
        for r in 0..if self.cols == 0 { 0 } else { self.rows } {
            out.row_mut(r).copy_from_slice(self.row(r));
        }
        Ok(out)
    }

    shape_getters!(rows, cols, ld);
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
    /// Row `r` (its `cols` elements, no padding; empty when `cols == 0`). Panics if `r >= rows`, like slice
    /// indexing.
    pub fn row(&self, r: usize) -> &[T] {
        assert!(r < self.rows, "row {r} out of range for {} rows", self.rows);
        if self.cols == 0 {
            return &[];
        }
        &self.data[r * self.ld..r * self.ld + self.cols]
    }
    /// Row `r`, mutable. Panics if `r >= rows`.
    pub fn row_mut(&mut self, r: usize) -> &mut [T] {
        assert!(r < self.rows, "row {r} out of range for {} rows", self.rows);
        if self.cols == 0 {
            return &mut [];
        }
        let (ld, cols) = (self.ld, self.cols);
        &mut self.data[r * ld..r * ld + cols]
    }
    /// Element (r, c). Panics when out of range, like slice indexing.
    pub fn get(&self, r: usize, c: usize) -> T {
        assert!(c < self.cols, "column {c} out of range for {} columns", self.cols);
        self.row(r)[c]
    }
    /// Sets element (r, c). Panics when out of range, like slice indexing.
    pub fn set(&mut self, r: usize, c: usize, v: T) {
        assert!(c < self.cols, "column {c} out of range for {} columns", self.cols);
        self.row_mut(r)[c] = v;
    }
    /// Converts every element (through f64), keeping the shape and dropping the padding. A finite value that
    /// does not fit `U` (e.g. 1e5 into f16) is [`Error::NonFinite`] naming its position, never a silent infinity.
    pub fn convert<U: Scalar>(&self) -> Result<Matrix<U>> {
        let mut bad = None;
        let out = Matrix::from_fn(self.rows, self.cols, |r, c| {
            let v = self.get(r, c).to_f64();
            U::try_from_f64(v).unwrap_or_else(|| {
                bad.get_or_insert((r, c, v));
                U::from_f64(0.0)
            })
        })?;
        match bad {
            None => Ok(out),
            Some((r, c, v)) => Err(Error::NonFinite { what: U::NAME, value: format!("{v:e}"), index: (r, c) }),
        }
    }

    /// The position and value of the first non-finite element (NaN or infinite), if any, in row-major order.
    pub fn first_non_finite(&self) -> Option<(usize, usize, f64)> {
        (0..if self.cols == 0 { 0 } else { self.rows }).find_map(|r| {
            self.row(r).iter().enumerate().find_map(|(c, v)| {
                let v = v.to_f64();
                (!v.is_finite()).then_some((r, c, v))
            })
        })
    }
}

/// `ld >= max(cols, 1)`, else [`Error::InvalidMatrix`].
fn check_ld(cols: usize, ld: usize) -> Result<()> {
    if ld < cols.max(1) {
        return Err(Error::InvalidMatrix {
            what: "ld",
            reason: format!("leading dimension {ld} is smaller than the column count {cols} (and must be >= 1)"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    #[test]
    fn empty_shapes_are_valid_everywhere() {
        for (rows, cols) in [(0, 0), (0, 5), (3, 0), (1, 0)] {
            let m = Matrix::<f32>::zeros(rows, cols).unwrap();
            for r in 0..rows {
                assert!(m.row(r).is_empty() || cols > 0);
            }
            let w = m.with_ld(8, 1.0).unwrap();
            assert_eq!((w.rows(), w.cols(), w.ld()), (rows, cols, 8));
            assert_eq!(Matrix::<f16>::random(rows, cols, 1).unwrap().rows(), rows);
            assert_eq!(m.convert::<f16>().unwrap().cols(), cols);
            assert_eq!(m.first_non_finite(), None);
        }
    }

    #[test]
    fn overflowing_shapes_are_errors_not_panics() {
        let huge = usize::MAX / 2;
        assert!(matches!(Matrix::<f32>::zeros(huge, 4), Err(Error::TooLarge { .. })));
        assert!(matches!(Matrix::<f32>::random(huge, huge, 1), Err(Error::TooLarge { .. })));
        assert!(matches!(Matrix::<f32>::filled(3, 2, huge, 0.0), Err(Error::TooLarge { .. })));
        // Representable but far beyond any memory: the allocation fails cleanly.
        assert!(matches!(Matrix::<f32>::zeros(1 << 30, 1 << 28), Err(Error::OutOfMemory { .. })));
        assert!(Matrix::<f32>::random_int(2, 2, 1 << 40, 1).is_err());
        // Empty matrices with absurd row counts are valid and cost nothing to walk (found by the fuzz suite: a
        // 2^57 x 0 matrix hung first_non_finite).
        let empty = Matrix::<f32>::from_vec(1 << 57, 0, 1, Vec::new()).unwrap();
        assert_eq!(empty.first_non_finite(), None);
        assert_eq!(empty.convert::<f16>().unwrap().rows(), 1 << 57);
        assert_eq!(empty.with_ld(8, 0.0).unwrap().rows(), 1 << 57);
        assert_eq!(crate::check::max_abs(&empty), 0.0);
        assert!(
            crate::check::compare(
                &empty,
                &Matrix::<f64>::from_vec(1 << 57, 0, 1, Vec::new()).unwrap(),
                crate::check::Tolerance::EXACT
            )
            .passed()
        );
        // An invalid ld is refused before anything is sized or allocated (found by the fuzz suite: 16 GiB first).
        assert!(matches!(Matrix::<f32>::filled(1 << 32, 35, 0, 0.0), Err(Error::InvalidMatrix { what: "ld", .. })));
        assert!(matches!(Matrix::<f32>::filled(255, 335_544_320, 0, 0.0), Err(Error::InvalidMatrix { .. })));
    }

    #[test]
    fn conversion_overflow_is_an_error() {
        let m = Matrix::<f32>::from_fn(2, 3, |r, c| if (r, c) == (1, 2) { 1e5 } else { 1.0 }).unwrap();
        match m.convert::<f16>() {
            Err(Error::NonFinite { index: (1, 2), .. }) => {}
            other => panic!("{other:?}"),
        }
        let mut n = Matrix::<f32>::zeros(2, 2).unwrap();
        n.set(1, 0, f32::NAN);
        assert_eq!(n.first_non_finite().map(|(r, c, _)| (r, c)), Some((1, 0)));
    }
}
