//! The block-sparse row (BSR) matrix type, its validation, and conversions from and to dense, COO, CSR,
//! Matrix Market files and (feature `sprs`) `sprs::CsMat`; the transposed index of a structure ([`BsrTranspose`]).
//!
//! Layout (the same as PyTorch's BSR tensors): a `rows x cols` matrix cut into square `bs x bs` blocks, `bs` in
//! [`SUPPORTED_BLOCK_SIZES`], `rows` and `cols` multiples of `bs` (0 allowed).
//! - `row_ptr: [u32; rows/bs + 1]`, nondecreasing from 0 to `nnzb` (the number of stored blocks);
//! - `col_idx: [u32; nnzb]`, block-column indices, strictly increasing within a block row, each `< cols/bs`;
//! - `values: [T; nnzb * bs * bs]`, block after block, each block row-major.
//!
//! Every constructor validates; a [`Bsr`] that exists is valid, so consumers (the CPU backend, the GPU
//! launchers) may rely on these invariants without checking again.

use std::fmt;
use std::ops::Range;

pub use crate::error::BsrError;
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::scalar::Scalar;

pub mod mtx;
#[cfg(feature = "sprs")]
mod sprs_interop;
/// Generated (synthetic) matrices for tests, the CLI and benchmarks; the main items are re-exported here:
/// [`Pattern`], [`generate`], [`generate_int`] and [`structure`].
pub mod synth;
mod transpose;

pub use mtx::{MatrixMarket, Underflow};
pub use synth::{Pattern, generate, generate_int, structure};
pub use transpose::BsrTranspose;

/// The block sizes the kernels are built for.
pub const SUPPORTED_BLOCK_SIZES: [usize; 4] = [16, 32, 64, 128];

/// A block matrix's checked shape: `rows x cols` in `bs x bs` blocks of a supported size, block rows and columns
/// below 2^32 ([`BlockShape::new`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BlockShape {
    rows: usize,
    cols: usize,
    bs: usize,
}

impl BlockShape {
    /// Checks the block size, that `rows` and `cols` are multiples of it, and that block rows and columns fit
    /// u32.
    pub(crate) fn new(rows: usize, cols: usize, bs: usize) -> Result<BlockShape, BsrError> {
        if !SUPPORTED_BLOCK_SIZES.contains(&bs) {
            return Err(BsrError::UnsupportedBlockSize { bs });
        }
        if !rows.is_multiple_of(bs) {
            return Err(BsrError::NotMultiple { dim: "rows", value: rows, bs });
        }
        if !cols.is_multiple_of(bs) {
            return Err(BsrError::NotMultiple { dim: "cols", value: cols, bs });
        }
        // Block-column indices are u32; block rows are limited alike (the GPU grid counts them in u32).
        let limit = u32::MAX as usize;
        if cols / bs > limit {
            return Err(BsrError::TooLarge { what: "block columns", value: cols / bs, limit });
        }
        if rows / bs > limit {
            return Err(BsrError::TooLarge { what: "block rows", value: rows / bs, limit });
        }
        Ok(BlockShape { rows, cols, bs })
    }
}

/// A validated block-sparse row matrix; see the [module documentation](self) for the layout.
#[derive(Clone, PartialEq)]
pub struct Bsr<T> {
    shape: BlockShape,
    row_ptr: Vec<u32>,
    col_idx: Vec<u32>,
    values: Vec<T>,
}

impl<T> fmt::Debug for Bsr<T> {
    /// A summary: shape, block size and nnzb, plus the index arrays when they are short. The values are never
    /// printed (a benchmark matrix holds millions of them).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Bsr");
        d.field("rows", &self.shape.rows).field("cols", &self.shape.cols).field("bs", &self.shape.bs);
        d.field("nnzb", &self.col_idx.len());
        if self.row_ptr.len() <= 65 && self.col_idx.len() <= 64 {
            d.field("row_ptr", &self.row_ptr).field("col_idx", &self.col_idx);
        }
        d.finish_non_exhaustive()
    }
}

/// A read-only view of one `bs x bs` block of a dense matrix, handed to the `keep` closure of
/// [`Bsr::from_dense`].
#[derive(Clone, Copy, Debug)]
pub struct BlockView<'a, T> {
    m: &'a Matrix<T>,
    block_row: usize,
    block_col: usize,
    bs: usize,
}

impl<'a, T: Scalar> BlockView<'a, T> {
    /// The block row of this block.
    pub fn block_row(&self) -> usize {
        self.block_row
    }
    /// The block column of this block.
    pub fn block_col(&self) -> usize {
        self.block_col
    }
    /// The block size.
    pub fn size(&self) -> usize {
        self.bs
    }
    /// Row `r` of the block (`bs` elements), `None` when `r >= bs`.
    pub fn row(&self, r: usize) -> Option<&'a [T]> {
        (r < self.bs).then(|| {
            let c0 = self.block_col * self.bs;
            &self.m.row(self.block_row * self.bs + r)[c0..c0 + self.bs]
        })
    }
    /// The rows of the block, top to bottom.
    pub fn rows(&self) -> impl Iterator<Item = &'a [T]> + 'a {
        let v = *self;
        (0..self.bs).filter_map(move |r| v.row(r))
    }
    /// Element (r, c) of the block, `None` when out of the block.
    pub fn get(&self, r: usize, c: usize) -> Option<T> {
        self.row(r).and_then(|row| row.get(c).copied())
    }
    /// The largest magnitude in the block (NaN if the block holds a NaN).
    pub fn max_abs(&self) -> f64 {
        let mut m = 0.0f64;
        for v in self.rows().flatten() {
            let a = v.to_f64().abs();
            if a.is_nan() {
                return f64::NAN;
            }
            m = m.max(a);
        }
        m
    }
    /// Whether every element is zero (either sign).
    pub fn is_zero(&self) -> bool {
        self.rows().flatten().all(|v| v.to_f64() == 0.0)
    }
    /// The block's values, row-major.
    pub fn to_vec(&self) -> Vec<T> {
        self.rows().flatten().copied().collect()
    }
}

impl<T> Bsr<T> {
    /// Floating-point operations of `A @ B` with `n` columns counted as a dense product of the stored blocks:
    /// `2 * nnzb * bs^2 * n` (the "effective" count used for TFLOPS everywhere in sparsek).
    pub fn flops(&self, n: usize) -> f64 {
        2.0 * self.nnzb() as f64 * (self.shape.bs * self.shape.bs) as f64 * n as f64
    }

    shape_getters!(shape: rows, cols, block_size, block_rows, block_cols);
    /// Number of stored blocks.
    pub fn nnzb(&self) -> usize {
        self.col_idx.len()
    }
    /// Block-row pointers: block row `br` holds blocks `row_ptr[br]..row_ptr[br + 1]`.
    pub fn row_ptr(&self) -> &[u32] {
        &self.row_ptr
    }
    /// Block-column index of each stored block.
    pub fn col_idx(&self) -> &[u32] {
        &self.col_idx
    }
    /// All stored values, block after block, each block row-major.
    pub fn values(&self) -> &[T] {
        &self.values
    }
    /// All stored values, mutable (the structure cannot change through this).
    pub fn values_mut(&mut self) -> &mut [T] {
        &mut self.values
    }
    /// The index arrays and the values at once, the values mutable: `(row_ptr, col_idx, values)` (for products
    /// that write A's values in place, such as [`crate::cpu::sddmm`]).
    pub(crate) fn index_and_values_mut(&mut self) -> (&[u32], &[u32], &mut [T]) {
        (&self.row_ptr, &self.col_idx, &mut self.values)
    }
    /// The values of stored block `i` (`bs * bs`, row-major), `None` when `i >= nnzb`.
    pub fn block(&self, i: usize) -> Option<&[T]> {
        let len = self.shape.bs * self.shape.bs;
        self.values.get(i.checked_mul(len)?..(i + 1).checked_mul(len)?)
    }
    /// The positions (in `col_idx` and in blocks) of block row `br`'s blocks; empty when `br` is out of range.
    pub fn block_row_range(&self, br: usize) -> Range<usize> {
        match (self.row_ptr.get(br), self.row_ptr.get(br.wrapping_add(1))) {
            (Some(&s), Some(&e)) => s as usize..e as usize,
            _ => 0..0,
        }
    }
    /// The block-column indices of block row `br`; empty when `br` is out of range.
    pub fn block_row_cols(&self, br: usize) -> &[u32] {
        &self.col_idx[self.block_row_range(br)]
    }
    /// The number of blocks in each block row.
    pub fn row_lengths(&self) -> impl ExactSizeIterator<Item = usize> + '_ {
        self.row_ptr.windows(2).map(|w| (w[1] - w[0]) as usize)
    }
    /// The largest number of blocks in one block row (0 for an empty matrix).
    pub fn max_row_length(&self) -> usize {
        self.row_lengths().max().unwrap_or(0)
    }
    /// Fraction of blocks stored: `nnzb / (block_rows * block_cols)`, 0 for an empty shape.
    pub fn density(&self) -> f64 {
        let total = self.block_rows() as f64 * self.block_cols() as f64;
        if total == 0.0 { 0.0 } else { self.nnzb() as f64 / total }
    }
    /// The parts: `(rows, cols, bs, row_ptr, col_idx, values)`, as [`Bsr::try_new`] takes them.
    pub fn into_parts(self) -> (usize, usize, usize, Vec<u32>, Vec<u32>, Vec<T>) {
        (self.shape.rows, self.shape.cols, self.shape.bs, self.row_ptr, self.col_idx, self.values)
    }
}

impl<T: Scalar> Bsr<T> {
    /// Builds a BSR matrix from its parts after validating everything; the error names the first problem,
    /// checked in this order: block size, `rows`/`cols` multiples of `bs`, counts fitting u32, `row_ptr`
    /// length, `row_ptr[0] == 0`, `row_ptr` nondecreasing, `row_ptr` ending at `col_idx.len()`, column
    /// indices in range, column indices strictly increasing within each block row, `values` length.
    ///
    /// ```
    /// use sparsek::{Bsr, BsrError};
    /// // 32x48 with 16x16 blocks: 2 block rows, 3 block columns, blocks (0,1) and (1,0).
    /// let a = Bsr::try_new(32, 48, 16, vec![0, 1, 2], vec![1, 0], vec![1.0f32; 2 * 256]).unwrap();
    /// assert_eq!(a.nnzb(), 2);
    /// let err = Bsr::try_new(32, 48, 16, vec![0, 1, 2], vec![3, 0], vec![1.0f32; 2 * 256]).unwrap_err();
    /// assert!(matches!(err, BsrError::ColIdxOutOfRange { block_row: 0, pos: 0, col: 3, block_cols: 3 }));
    /// ```
    pub fn try_new(
        rows: usize,
        cols: usize,
        bs: usize,
        row_ptr: Vec<u32>,
        col_idx: Vec<u32>,
        values: Vec<T>,
    ) -> Result<Self, BsrError> {
        let shape = BlockShape::new(rows, cols, bs)?;
        let block_rows = rows / bs;
        let block_cols = cols / bs;
        let nnzb = col_idx.len();
        let limit = u32::MAX as usize;
        if nnzb > limit {
            return Err(BsrError::TooLarge { what: "nnzb", value: nnzb, limit });
        }
        let expected_values = nnzb.checked_mul(bs * bs).ok_or(BsrError::TooLarge {
            what: "values",
            value: nnzb,
            limit: usize::MAX / (bs * bs),
        })?;
        check_structure(block_rows, block_cols, &row_ptr, &col_idx)?;
        if values.len() != expected_values {
            return Err(BsrError::ValuesLength { expected: expected_values, got: values.len() });
        }
        Ok(Bsr { shape, row_ptr, col_idx, values })
    }

    /// An all-zero matrix (no stored blocks). It still holds `rows / bs + 1` row pointers: a failed allocation
    /// of those is [`Error::OutOfMemory`].
    pub fn empty(rows: usize, cols: usize, bs: usize) -> Result<Self> {
        BlockShape::new(rows, cols, bs)?;
        let row_ptr = crate::alloc::filled("BSR row_ptr", rows / bs + 1, 0u32)?;
        Ok(Self::try_new(rows, cols, bs, row_ptr, Vec::new(), Vec::new())?)
    }

    /// The largest magnitude among the stored values (0 when there are none, NaN if one is NaN).
    pub fn max_abs(&self) -> f64 {
        let mut m = 0.0f64;
        for v in &self.values {
            let a = v.to_f64().abs();
            if a.is_nan() {
                return f64::NAN;
            }
            m = m.max(a);
        }
        m
    }
    /// The same structure with every value converted (through f64, round to nearest even). A finite value that
    /// does not fit `U` (e.g. 1e5 into f16) is [`Error::NonFinite`] naming the block and the position in it
    /// (`index` = (block, row-major offset)), never a silent infinity.
    pub fn convert<U: Scalar>(&self) -> Result<Bsr<U>> {
        let mut values = crate::alloc::with_capacity("BSR values", self.values.len())?;
        for (i, v) in self.values.iter().enumerate() {
            let v = v.to_f64();
            let Some(u) = U::try_from_f64(v) else {
                let blk = self.shape.bs * self.shape.bs;
                return Err(Error::NonFinite { what: U::NAME, value: format!("{v:e}"), index: (i / blk, i % blk) });
            };
            values.push(u);
        }
        Ok(Bsr { shape: self.shape, row_ptr: self.row_ptr.clone(), col_idx: self.col_idx.clone(), values })
    }

    /// Cuts a dense matrix into `bs x bs` blocks and stores those for which `keep` returns true. The dense
    /// dimensions must be multiples of `bs` ([`BsrError::NotMultiple`] otherwise).
    ///
    /// ```
    /// use sparsek::{Bsr, Matrix};
    /// let d = Matrix::<f32>::from_fn(32, 32, |r, c| if r < 16 && c >= 16 { 1.0 } else { 0.0 }).unwrap();
    /// let a = Bsr::from_dense(&d, 16, |blk| !blk.is_zero()).unwrap();
    /// assert_eq!((a.nnzb(), a.col_idx()), (1, &[1u32][..]));
    /// ```
    pub fn from_dense(m: &Matrix<T>, bs: usize, mut keep: impl FnMut(&BlockView<'_, T>) -> bool) -> Result<Self> {
        BlockShape::new(m.rows(), m.cols(), bs)?;
        let (block_rows, block_cols) = (m.rows() / bs, m.cols() / bs);
        let mut row_ptr = Vec::with_capacity(block_rows + 1);
        row_ptr.push(0u32);
        let mut col_idx = Vec::new();
        let mut values = Vec::new();
        for br in 0..block_rows {
            for bc in 0..block_cols {
                let view = BlockView { m, block_row: br, block_col: bc, bs };
                if keep(&view) {
                    if col_idx.len() >= u32::MAX as usize {
                        return Err(BsrError::TooLarge {
                            what: "nnzb",
                            value: col_idx.len() + 1,
                            limit: u32::MAX as usize,
                        }
                        .into());
                    }
                    col_idx.push(bc as u32);
                    values.extend(view.rows().flatten().copied());
                }
            }
            row_ptr.push(col_idx.len() as u32);
        }
        Ok(Self::try_new(m.rows(), m.cols(), bs, row_ptr, col_idx, values)?)
    }

    /// [`Bsr::from_dense`] keeping the blocks whose largest magnitude exceeds `threshold` (and blocks holding a
    /// NaN). Threshold 0 keeps every block with a nonzero. `threshold` must be a number >= 0
    /// ([`Error::InvalidArgument`] otherwise).
    pub fn from_dense_threshold(m: &Matrix<T>, bs: usize, threshold: f64) -> Result<Self> {
        if threshold.is_nan() || threshold < 0.0 {
            return Err(Error::InvalidArgument {
                name: "threshold",
                reason: format!("must be a number >= 0, got {threshold}"),
            });
        }
        Self::from_dense(m, bs, |blk| {
            let max = blk.max_abs();
            max.is_nan() || max > threshold
        })
    }

    /// The dense `rows x cols` matrix (`ld == cols`), zeros outside the stored blocks. It allocates
    /// `rows * cols` elements: meant for small matrices (tests, debugging); [`Error::TooLarge`] or
    /// [`Error::OutOfMemory`] when that does not fit.
    pub fn to_dense(&self) -> Result<Matrix<T>> {
        let mut out = Matrix::zeros(self.shape.rows, self.shape.cols)?;
        let bs = self.shape.bs;
        for br in 0..self.block_rows() {
            for i in self.block_row_range(br) {
                let c0 = self.col_idx[i] as usize * bs;
                let blk = &self.values[i * bs * bs..(i + 1) * bs * bs];
                for (r, src) in blk.chunks_exact(bs).enumerate() {
                    out.row_mut(br * bs + r)[c0..c0 + bs].copy_from_slice(src);
                }
            }
        }
        Ok(out)
    }

    /// Blockifies a list of `(row, col, value)` entries (COO, 0-based, any order): the stored blocks are those
    /// holding at least one entry (an explicit zero still creates its block); duplicate entries are summed
    /// in f64 and rounded once to `T`. An entry outside `rows x cols` gives [`BsrError::EntryOutOfRange`].
    ///
    /// Memory is proportional to the entries (16 bytes each, to sort them by block) and to the stored blocks
    /// (the result is sized exactly, with checked arithmetic, and allocated fallibly: [`Error::TooLarge`] or
    /// [`Error::OutOfMemory`]), never to `rows` or `cols` beyond `row_ptr`. NaN and infinite input values are kept
    /// as they are; a stored value that becomes infinite only because finite duplicates summed past the range
    /// of `T` (e.g. 65504 + 65504 in f16) is [`Error::NonFinite`] at its (row, col).
    pub fn from_coo(rows: usize, cols: usize, bs: usize, entries: &[(usize, usize, T)]) -> Result<Self> {
        Ok(mtx::blockify(rows, cols, bs, (rows, cols), entries, usize::MAX, mtx::NonFinitePolicy::KeepInput)?.0)
    }

    /// Blockifies a CSR matrix (`indptr` of `rows + 1` offsets, `indices` the column of each entry, `data` its
    /// value), validated first (CSR variants of [`BsrError`]). Columns need not be sorted; duplicates are
    /// summed, as in [`Bsr::from_coo`].
    pub fn from_csr(
        rows: usize,
        cols: usize,
        bs: usize,
        indptr: &[usize],
        indices: &[usize],
        data: &[T],
    ) -> Result<Self> {
        BlockShape::new(rows, cols, bs)?;
        if indptr.len() != rows + 1 {
            return Err(BsrError::CsrIndptrLength { expected: rows + 1, got: indptr.len() }.into());
        }
        if indptr[0] != 0 {
            return Err(BsrError::CsrIndptrStart { got: indptr[0] }.into());
        }
        for (row, w) in indptr.windows(2).enumerate() {
            if w[1] < w[0] {
                return Err(BsrError::CsrIndptrDecreasing { row, prev: w[0], next: w[1] }.into());
            }
        }
        if indptr[rows] != indices.len() {
            return Err(BsrError::CsrIndptrEnd { expected: indices.len(), got: indptr[rows] }.into());
        }
        if data.len() != indices.len() {
            return Err(BsrError::CsrDataLength { expected: indices.len(), got: data.len() }.into());
        }
        let mut entries = Vec::with_capacity(indices.len());
        for (row, w) in indptr.windows(2).enumerate() {
            for i in w[0]..w[1] {
                entries.push((row, indices[i], data[i]));
            }
        }
        // Report a bad column with its CSR position (the COO list has the same order).
        Self::from_coo(rows, cols, bs, &entries)
    }
}

/// The checks of [`Bsr::try_new`] on the index arrays alone, in its order (from `row_ptr`'s length on): `row_ptr`
/// of `block_rows + 1` entries, from 0, nondecreasing, ending at `col_idx.len()` (at most `u32::MAX`); column
/// indices below `block_cols`, strictly increasing within each block row. Shared with
/// [`BsrTranspose::from_structure`].
pub(crate) fn check_structure(
    block_rows: usize,
    block_cols: usize,
    row_ptr: &[u32],
    col_idx: &[u32],
) -> Result<(), BsrError> {
    let nnzb = col_idx.len();
    let limit = u32::MAX as usize;
    if nnzb > limit {
        return Err(BsrError::TooLarge { what: "nnzb", value: nnzb, limit });
    }
    if row_ptr.len() != block_rows + 1 {
        return Err(BsrError::RowPtrLength { expected: block_rows + 1, got: row_ptr.len() });
    }
    if row_ptr[0] != 0 {
        return Err(BsrError::RowPtrStart { got: row_ptr[0] });
    }
    for (br, w) in row_ptr.windows(2).enumerate() {
        if w[1] < w[0] {
            return Err(BsrError::RowPtrDecreasing { block_row: br, prev: w[0], next: w[1] });
        }
    }
    let end = row_ptr[block_rows];
    if end as usize != nnzb {
        return Err(BsrError::RowPtrEnd { expected: nnzb, got: end });
    }
    // row_ptr is now nondecreasing from 0 to nnzb, so every row range below is in bounds.
    for (br, w) in row_ptr.windows(2).enumerate() {
        let start = w[0] as usize;
        for (pos, &col) in col_idx[start..w[1] as usize].iter().enumerate().map(|(i, c)| (start + i, c)) {
            if col as usize >= block_cols {
                return Err(BsrError::ColIdxOutOfRange { block_row: br, pos, col, block_cols });
            }
        }
    }
    for (br, w) in row_ptr.windows(2).enumerate() {
        for pos in w[0] as usize + 1..w[1] as usize {
            let (prev, col) = (col_idx[pos - 1], col_idx[pos]);
            if col == prev {
                return Err(BsrError::ColIdxDuplicate { block_row: br, pos, col });
            }
            if col < prev {
                return Err(BsrError::ColIdxUnsorted { block_row: br, pos, prev, col });
            }
        }
    }
    Ok(())
}
