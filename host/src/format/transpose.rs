//! The transposed index of a BSR structure ([`BsrTranspose`]): A's stored blocks seen by block column, for the
//! products that read A transposed (`A^T @ B`, the input gradient of a linear layer).

use std::ops::Range;

use super::{BlockShape, Bsr, check_structure};
use crate::error::{Error, Result};

/// The block columns' view of a BSR structure `A` (`rows x cols`, blocks `bs x bs`): for each block column, the
/// block rows of its stored blocks and where those blocks are in A's values. Built once per structure (the
/// values may change freely: the index holds none of them), it is the block-sparse row structure of `A^T`
/// together with a permutation into A's storage:
/// - `col_ptr: [u32; cols/bs + 1]`: block column `bc` holds entries `col_ptr[bc]..col_ptr[bc + 1]`;
/// - `row_idx: [u32; nnzb]`: the block row of each entry, strictly increasing within a block column;
/// - `perm: [u32; nnzb]`: the index of each entry's block among A's stored blocks (its values are
///   `A.values()[perm[j] * bs^2..][..bs^2]`, row-major as A stores them).
///
/// Entry `j` of block column `bc` is A's block `(row_idx[j], bc)`; the block of `A^T` at `(bc, row_idx[j])` is
/// that block transposed. No values are copied: [`crate::cpu::spmm_t`] (and the GPU kernels to come) read A's
/// stored blocks through `perm` and transpose each one as they load it (on the GPU, `ldmatrix.trans` or wgmma's
/// transposed operand), so one copy of the values serves both `A @ B` and `A^T @ B`.
///
/// Every constructor validates; a `BsrTranspose` that exists is a correct transposition of a valid structure.
///
/// ```
/// use sparsek::{Bsr, format::BsrTranspose};
/// // 32x48 in 16x16 blocks: blocks (0, 1), (0, 2) and (1, 1).
/// let a = Bsr::try_new(32, 48, 16, vec![0, 2, 3], vec![1, 2, 1], vec![0.0f32; 3 * 256]).unwrap();
/// let t = BsrTranspose::new(&a).unwrap();
/// assert_eq!(t.col_ptr(), &[0, 0, 2, 3]); // block column 0 is empty
/// assert_eq!(t.row_idx(), &[0, 1, 0]); // column 1: rows 0 and 1; column 2: row 0
/// assert_eq!(t.perm(), &[0, 2, 1]); // A's blocks 0, 2 and 1
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct BsrTranspose {
    shape: BlockShape,
    col_ptr: Vec<u32>,
    row_idx: Vec<u32>,
    perm: Vec<u32>,
}

impl std::fmt::Debug for BsrTranspose {
    /// A summary: shape, block size and nnzb, plus the arrays when they are short.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("BsrTranspose");
        d.field("rows", &self.shape.rows).field("cols", &self.shape.cols).field("bs", &self.shape.bs);
        d.field("nnzb", &self.row_idx.len());
        if self.col_ptr.len() <= 65 && self.row_idx.len() <= 64 {
            d.field("col_ptr", &self.col_ptr).field("row_idx", &self.row_idx).field("perm", &self.perm);
        }
        d.finish_non_exhaustive()
    }
}

impl BsrTranspose {
    /// The transposed index of `a`'s structure (its values are not read). `a` is valid, so the only possible
    /// errors are allocation failures ([`Error::OutOfMemory`]). `O(nnzb + cols/bs)` time.
    pub fn new<T>(a: &Bsr<T>) -> Result<BsrTranspose> {
        Self::build(a.shape, a.row_ptr(), a.col_idx())
    }

    /// The transposed index of the structure `(rows, cols, bs, row_ptr, col_idx)` of a BSR matrix, validated
    /// first exactly as [`Bsr::try_new`] validates it (without values): [`Error::InvalidBsr`] names the first
    /// problem. For a structure held apart from its values (a device view's index arrays copied to the host, a
    /// plan built before the values exist).
    pub fn from_structure(
        rows: usize,
        cols: usize,
        bs: usize,
        row_ptr: &[u32],
        col_idx: &[u32],
    ) -> Result<BsrTranspose> {
        let shape = BlockShape::new(rows, cols, bs)?;
        check_structure(rows / bs, cols / bs, row_ptr, col_idx)?;
        Self::build(shape, row_ptr, col_idx)
    }

    /// A counting sort of the blocks by column; block rows are visited in order, so rows come out ascending
    /// within each column. `row_ptr` and `col_idx` are a valid structure of `shape`.
    fn build(shape: BlockShape, row_ptr: &[u32], col_idx: &[u32]) -> Result<BsrTranspose> {
        let block_cols = shape.cols / shape.bs;
        let nnzb = col_idx.len();
        let mut col_ptr = crate::alloc::filled("transposed index col_ptr", block_cols + 1, 0u32)?;
        let mut row_idx = crate::alloc::filled("transposed index row_idx", nnzb, 0u32)?;
        let mut perm = crate::alloc::filled("transposed index perm", nnzb, 0u32)?;
        let bad = || Error::InvalidArgument {
            name: "col_idx",
            reason: "a block column index outside the matrix reached the transposition (a bug in sparsek)".into(),
        };
        // Counts per column into col_ptr[c + 1], then prefix sums: col_ptr[c] is the start of column c. nnzb
        // fits u32 (validated), so no count or sum overflows.
        for &c in col_idx {
            *col_ptr.get_mut(c as usize + 1).ok_or_else(bad)? += 1;
        }
        for c in 0..block_cols {
            col_ptr[c + 1] += col_ptr[c];
        }
        // next[c]: the next free entry of column c (a copy of the starts).
        let mut next = crate::alloc::with_capacity::<u32>("transposed index cursor", block_cols)?;
        next.extend_from_slice(&col_ptr[..block_cols]);
        for (br, w) in row_ptr.windows(2).enumerate() {
            for i in w[0]..w[1] {
                let c = *col_idx.get(i as usize).ok_or_else(bad)? as usize;
                let slot = next.get_mut(c).ok_or_else(bad)?;
                let j = *slot as usize;
                *slot += 1;
                // br < rows / bs <= u32::MAX (BlockShape).
                *row_idx.get_mut(j).ok_or_else(bad)? = br as u32;
                *perm.get_mut(j).ok_or_else(bad)? = i;
            }
        }
        Ok(BsrTranspose { shape, col_ptr, row_idx, perm })
    }

    /// `Ok` when this is the transposed index of `a`'s structure: the same shape and block size, the same
    /// number of blocks, and every entry `j` of block column `bc` names a stored block of `a` in block row
    /// `row_idx[j]` and block column `bc`. Entries are distinct `(row, column)` pairs (validated on
    /// construction) and a block is identified by its pair, so this proves that `perm` enumerates every stored
    /// block of `a` once. `O(nnzb)`, no allocation; [`Error::InvalidArgument`] (named `name`) describes the
    /// first difference.
    pub fn check_matches<T>(&self, a: &Bsr<T>, name: &'static str) -> Result<()> {
        let err = |reason: String| Err(Error::InvalidArgument { name, reason });
        let (r, c, bs) = (self.shape.rows, self.shape.cols, self.shape.bs);
        if (r, c, bs, self.nnzb()) != (a.rows(), a.cols(), a.block_size(), a.nnzb()) {
            return err(format!(
                "is the transposed index of a {r}x{c} structure in {bs}x{bs} blocks with {} blocks; the matrix is \
                 {}x{} in {}x{} blocks with {} blocks",
                self.nnzb(),
                a.rows(),
                a.cols(),
                a.block_size(),
                a.block_size(),
                a.nnzb()
            ));
        }
        for bc in 0..self.block_cols() {
            for j in self.block_col_range(bc) {
                let (row, p) = (self.row_idx[j], self.perm[j]);
                let range = a.block_row_range(row as usize);
                if !range.contains(&(p as usize)) || a.col_idx().get(p as usize) != Some(&(bc as u32)) {
                    return err(format!(
                        "entry {j} (block row {row}, block column {bc}) points at stored block {p}, which is not \
                         the matrix's block ({row}, {bc}): the index belongs to another structure"
                    ));
                }
            }
        }
        Ok(())
    }

    // A's shape (its block columns are `col_ptr().len() - 1`).
    shape_getters!(shape: rows, cols, block_size, block_rows, block_cols);
    /// Number of stored blocks (A's nnzb).
    pub fn nnzb(&self) -> usize {
        self.row_idx.len()
    }
    /// Block-column pointers: block column `bc` holds entries `col_ptr[bc]..col_ptr[bc + 1]`.
    pub fn col_ptr(&self) -> &[u32] {
        &self.col_ptr
    }
    /// The block row of each entry (ascending within a block column).
    pub fn row_idx(&self) -> &[u32] {
        &self.row_idx
    }
    /// The index among A's stored blocks of each entry's block.
    pub fn perm(&self) -> &[u32] {
        &self.perm
    }
    /// The entries of block column `bc`; empty when `bc` is out of range.
    pub fn block_col_range(&self, bc: usize) -> Range<usize> {
        match (self.col_ptr.get(bc), self.col_ptr.get(bc.wrapping_add(1))) {
            (Some(&s), Some(&e)) => s as usize..e as usize,
            _ => 0..0,
        }
    }
    /// The largest number of blocks in one block column (0 for an empty matrix): the longest dot product of
    /// `A^T @ B` is this times `bs`.
    pub fn max_col_length(&self) -> usize {
        self.col_ptr.windows(2).map(|w| (w[1] - w[0]) as usize).max().unwrap_or(0)
    }
    /// The parts: `(rows, cols, bs, col_ptr, row_idx, perm)`, with `rows x cols` A's shape.
    pub fn into_parts(self) -> (usize, usize, usize, Vec<u32>, Vec<u32>, Vec<u32>) {
        (self.shape.rows, self.shape.cols, self.shape.bs, self.col_ptr, self.row_idx, self.perm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Pattern, structure};

    fn of(rows: usize, cols: usize, bs: usize, row_ptr: &[u32], col_idx: &[u32]) -> BsrTranspose {
        BsrTranspose::from_structure(rows, cols, bs, row_ptr, col_idx).unwrap()
    }

    #[test]
    fn hand_made_cases() {
        // 3 block rows x 4 block columns:
        //   row 0: cols 0, 3     row 1: (empty)     row 2: cols 0, 1, 3
        let t = of(48, 64, 16, &[0, 2, 2, 5], &[0, 3, 0, 1, 3]);
        assert_eq!(t.col_ptr(), &[0, 2, 3, 3, 5]); // column 2 empty
        assert_eq!(t.row_idx(), &[0, 2, 2, 0, 2]);
        assert_eq!(t.perm(), &[0, 2, 3, 1, 4]);
        assert_eq!((t.block_rows(), t.block_cols(), t.nnzb(), t.max_col_length()), (3, 4, 5, 2));
        assert_eq!(t.block_col_range(2), 3..3);
        assert_eq!(t.block_col_range(4), 0..0);
        // A diagonal: the identity permutation.
        let t = of(64, 64, 32, &[0, 1, 2], &[0, 1]);
        assert_eq!((t.col_ptr(), t.row_idx(), t.perm()), (&[0u32, 1, 2][..], &[0u32, 1][..], &[0u32, 1][..]));
        // One full block row: every column holds one entry of row 0.
        let t = of(32, 48, 16, &[0, 3, 3], &[0, 1, 2]);
        assert_eq!((t.col_ptr(), t.row_idx(), t.perm()), (&[0u32, 1, 2, 3][..], &[0u32, 0, 0][..], &[0u32, 1, 2][..]));
        // One full block column.
        let t = of(48, 32, 16, &[0, 1, 2, 3], &[1, 1, 1]);
        assert_eq!((t.col_ptr(), t.row_idx(), t.perm()), (&[0u32, 0, 3][..], &[0u32, 1, 2][..], &[0u32, 1, 2][..]));
    }

    #[test]
    fn empty_structures() {
        // No blocks at all.
        let t = of(64, 32, 16, &[0, 0, 0, 0, 0], &[]);
        assert_eq!((t.col_ptr(), t.nnzb(), t.max_col_length()), (&[0u32, 0, 0][..], 0, 0));
        // A 0 x 0 matrix, a 0 x n and an n x 0 one.
        let t = of(0, 0, 64, &[0], &[]);
        assert_eq!((t.col_ptr(), t.block_cols(), t.max_col_length()), (&[0u32][..], 0, 0));
        let t = of(0, 128, 64, &[0], &[]);
        assert_eq!(t.col_ptr(), &[0, 0, 0]);
        let t = of(128, 0, 64, &[0, 0, 0], &[]);
        assert_eq!(t.col_ptr(), &[0]);
        // From an empty Bsr.
        let a = Bsr::<f32>::empty(32, 96, 32).unwrap();
        assert_eq!(BsrTranspose::new(&a).unwrap().col_ptr(), &[0, 0, 0, 0]);
    }

    #[test]
    fn bad_structures_give_the_bsr_errors() {
        use crate::BsrError as E;
        let bad = |rows, cols, bs, rp: &[u32], ci: &[u32]| match BsrTranspose::from_structure(rows, cols, bs, rp, ci) {
            Err(Error::InvalidBsr(e)) => e,
            other => panic!("expected InvalidBsr, got {other:?}"),
        };
        assert!(matches!(bad(32, 32, 24, &[0, 0], &[]), E::UnsupportedBlockSize { bs: 24 }));
        assert!(matches!(bad(40, 32, 16, &[0, 0, 0], &[]), E::NotMultiple { dim: "rows", .. }));
        assert!(matches!(bad(32, 32, 16, &[0, 0], &[]), E::RowPtrLength { expected: 3, got: 2 }));
        assert!(matches!(bad(32, 32, 16, &[1, 1, 1], &[0]), E::RowPtrStart { got: 1 }));
        assert!(matches!(bad(32, 32, 16, &[0, 2, 1], &[0]), E::RowPtrDecreasing { block_row: 1, .. }));
        assert!(matches!(bad(32, 32, 16, &[0, 1, 1], &[0, 1]), E::RowPtrEnd { expected: 2, got: 1 }));
        assert!(matches!(bad(32, 32, 16, &[0, 1, 1], &[2]), E::ColIdxOutOfRange { col: 2, block_cols: 2, .. }));
        assert!(matches!(bad(32, 32, 16, &[0, 2, 2], &[1, 0]), E::ColIdxUnsorted { block_row: 0, pos: 1, .. }));
        assert!(matches!(bad(32, 32, 16, &[0, 2, 2], &[1, 1]), E::ColIdxDuplicate { block_row: 0, pos: 1, col: 1 }));
    }

    #[test]
    fn check_matches_rejects_another_structure() {
        let a = Bsr::try_new(48, 64, 16, vec![0, 2, 2, 5], vec![0, 3, 0, 1, 3], vec![0.0f32; 5 * 256]).unwrap();
        let t = BsrTranspose::new(&a).unwrap();
        t.check_matches(&a, "at").unwrap();
        // Same shape and nnzb, one block moved (row 2's column 1 -> column 2).
        let b = Bsr::try_new(48, 64, 16, vec![0, 2, 2, 5], vec![0, 3, 0, 2, 3], vec![0.0f32; 5 * 256]).unwrap();
        assert!(matches!(t.check_matches(&b, "at"), Err(Error::InvalidArgument { name: "at", .. })));
        // Same blocks, another block size / shape.
        let c = Bsr::try_new(96, 128, 32, vec![0, 2, 2, 5], vec![0, 3, 0, 1, 3], vec![0.0f32; 5 * 1024]).unwrap();
        assert!(t.check_matches(&c, "at").is_err());
        // Blocks moved between rows, same columns: (0,0),(0,3),(2,0),(2,1),(2,3) vs (0,0),(0,1),(0,3),(2,0),(2,3).
        let d = Bsr::try_new(48, 64, 16, vec![0, 3, 3, 5], vec![0, 1, 3, 0, 3], vec![0.0f32; 5 * 256]).unwrap();
        assert!(t.check_matches(&d, "at").is_err());
        BsrTranspose::new(&d).unwrap().check_matches(&d, "at").unwrap();
    }

    /// Every generator pattern: twice transposed gives the structure back (and the inverse permutation), and
    /// `(column, row, perm)` enumerates every stored block exactly once.
    #[test]
    fn generated_structures_round_trip() {
        for (i, pattern) in Pattern::ALL.iter().enumerate() {
            for (rows, cols, bs, density) in [(256, 384, 32, 0.3), (512, 128, 64, 0.9), (128, 1024, 16, 0.05)] {
                let (rp, ci) = structure(*pattern, rows, cols, bs, density, i as u64).unwrap();
                let t = of(rows, cols, bs, &rp, &ci);
                let tt = of(cols, rows, bs, t.col_ptr(), t.row_idx());
                assert_eq!((tt.col_ptr(), tt.row_idx()), (&rp[..], &ci[..]), "{pattern:?}");
                for (i, &j) in tt.perm().iter().enumerate() {
                    assert_eq!(t.perm()[j as usize] as usize, i);
                }
            }
        }
    }
}
