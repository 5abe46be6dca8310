//! Conversions between [`Bsr`] and `sprs::CsMat` (feature `sprs`). They are generic over every
//! [`Scalar`], f16 and bf16 included: sprs asks nothing of the element type to build or walk a matrix.

use sprs::CsMat;

use super::Bsr;
use crate::error::Result;
use crate::scalar::Scalar;

#[cfg_attr(docsrs, doc(cfg(feature = "sprs")))]
impl<T: Scalar> Bsr<T> {
    /// Blockifies a CSR or CSC `CsMat` with blocks of size `bs` (dimensions must be multiples of `bs`): the
    /// stored blocks are those holding at least one stored entry, explicit zeros included.
    pub fn from_csmat(m: &CsMat<T>, bs: usize) -> Result<Self> {
        if m.is_csr() {
            let indptr = m.indptr();
            Self::from_csr(m.rows(), m.cols(), bs, &indptr.to_proper(), m.indices(), m.data())
        } else {
            let entries: Vec<(usize, usize, T)> = m.iter().map(|(&v, (r, c))| (r, c, v)).collect();
            Self::from_coo(m.rows(), m.cols(), bs, &entries)
        }
    }

    /// A CSR `CsMat` storing every element of every stored block (explicit zeros included), so
    /// [`Bsr::from_csmat`] of the result gives back `self`.
    pub fn to_csmat(&self) -> CsMat<T> {
        let bs = self.block_size();
        let mut indptr = Vec::with_capacity(self.rows() + 1);
        let mut indices = Vec::with_capacity(self.values().len());
        let mut data = Vec::with_capacity(self.values().len());
        indptr.push(0usize);
        for br in 0..self.block_rows() {
            let range = self.block_row_range(br);
            for r in 0..bs {
                for i in range.clone() {
                    let c0 = self.col_idx()[i] as usize * bs;
                    let row = &self.values()[(i * bs + r) * bs..(i * bs + r + 1) * bs];
                    indices.extend(c0..c0 + bs);
                    data.extend_from_slice(row);
                }
                indptr.push(indices.len());
            }
        }
        // The structure is valid by construction (sorted columns, in range), so this cannot fail; fall back to
        // an empty matrix of the same shape rather than panic.
        CsMat::try_new((self.rows(), self.cols()), indptr, indices, data)
            .unwrap_or_else(|_| CsMat::zero((self.rows(), self.cols())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::synth::{Pattern, generate};
    use half::f16;

    #[test]
    fn csmat_round_trip() {
        for p in Pattern::ALL {
            let a = generate::<f16>(p, 64, 96, 32, 0.4, 5).unwrap();
            let m = a.to_csmat();
            assert_eq!((m.rows(), m.cols(), m.nnz()), (64, 96, a.values().len()));
            assert_eq!(Bsr::from_csmat(&m, 32).unwrap(), a);
            assert_eq!(Bsr::from_csmat(&m.to_csc(), 32).unwrap(), a);
        }
        assert!(Bsr::from_csmat(&CsMat::<f32>::zero((10, 16)), 16).is_err());
    }
}
