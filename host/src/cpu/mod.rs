//! The CPU side of every product: the f64 oracle ([`reference`], [`reference_rows`]) that tests and the CLI
//! check against, and a multi-threaded f32 backend ([`spmm`]) for machines without a GPU.
//!
//! All three share one contract: `C = alpha * (A @ B) + beta * C` where A is a [`Bsr`] (`M x K`), B a dense
//! [`Matrix`] `K x N` and C a dense `M x N` [`Matrix`] (any leading dimensions, any `N`). With `beta == 0`
//! the old C is never read (it may hold NaN); block rows without blocks give `beta * C` (0 when
//! `beta == 0`). Shapes are checked before anything is written ([`Error::ShapeMismatch`]). The product is
//! computed as IEEE arithmetic dictates: zeros of A are multiplied like any value, so an Inf or NaN in B
//! reaches every row whose blocks cover it.

use std::any::TypeId;
use std::borrow::Cow;

use rayon::prelude::*;

use crate::Epilogue;
use crate::error::{Error, Result};
use crate::format::Bsr;
use crate::matrix::Matrix;
use crate::scalar::Scalar;

/// `Ok` when `A (M x K) @ B (K x N)` fits `C (M x N)`.
fn check_shapes<TA, TB: Scalar, TC: Scalar>(a: &Bsr<TA>, b: &Matrix<TB>, c: &Matrix<TC>) -> Result<()> {
    if a.cols() != b.rows() || c.rows() != a.rows() || c.cols() != b.cols() {
        return Err(Error::ShapeMismatch { a: (a.rows(), a.cols()), b: (b.rows(), b.cols()), c: (c.rows(), c.cols()) });
    }
    Ok(())
}

/// One row `r` of the oracle into `out` (`N` elements).
fn reference_row<TA: Scalar, TB: Scalar, TC: Scalar>(
    a: &Bsr<TA>,
    b: &Matrix<TB>,
    c: &Matrix<TC>,
    ep: Epilogue,
    r: usize,
    out: &mut [f64],
) {
    let bs = a.block_size();
    let (br, rr) = (r / bs, r % bs);
    out.fill(0.0);
    for i in a.block_row_range(br) {
        let Some(blk) = a.block(i) else { continue };
        let c0 = a.col_idx()[i] as usize * bs;
        for (kk, av) in blk[rr * bs..(rr + 1) * bs].iter().enumerate() {
            let av = av.to_f64();
            for (o, bv) in out.iter_mut().zip(b.row(c0 + kk)) {
                *o += av * bv.to_f64();
            }
        }
    }
    let (alpha, beta) = (f64::from(ep.alpha), f64::from(ep.beta));
    if beta == 0.0 {
        out.iter_mut().for_each(|o| *o *= alpha);
    } else {
        for (o, cv) in out.iter_mut().zip(c.row(r)) {
            *o = alpha * *o + beta * cv.to_f64();
        }
    }
}

/// The oracle: `alpha * (A @ B) + beta * C` with every operation in f64 (products of f16, bf16 and f32 values
/// are exact in f64), `alpha` and `beta` widened from f32. Returns the `M x N` result unrounded (not
/// converted to `TC`), so a check can measure the error of a rounded output. See the
/// [module documentation](self) for the contract; rows are computed in parallel.
pub fn reference<TA: Scalar, TB: Scalar, TC: Scalar>(
    a: &Bsr<TA>,
    b: &Matrix<TB>,
    c: &Matrix<TC>,
    ep: Epilogue,
) -> Result<Matrix<f64>> {
    check_shapes(a, b, c)?;
    let (m, n) = (a.rows(), b.cols());
    let mut out = Matrix::<f64>::zeros(m, n);
    if m > 0 && n > 0 {
        out.as_mut_slice().par_chunks_mut(n).enumerate().for_each(|(r, row)| reference_row(a, b, c, ep, r, row));
    }
    Ok(out)
}

/// The oracle ([`reference`]) for the listed rows only, to check big products by sampling: returns
/// `(row, values)` in the order of `rows` (duplicates allowed). A row `>= M` gives
/// [`Error::InvalidArgument`].
pub fn reference_rows<TA: Scalar, TB: Scalar, TC: Scalar>(
    a: &Bsr<TA>,
    b: &Matrix<TB>,
    c: &Matrix<TC>,
    ep: Epilogue,
    rows: &[usize],
) -> Result<Vec<(usize, Vec<f64>)>> {
    check_shapes(a, b, c)?;
    if let Some((i, &r)) = rows.iter().enumerate().find(|&(_, &r)| r >= a.rows()) {
        return Err(Error::InvalidArgument {
            name: "rows",
            reason: format!("rows[{i}] = {r} is out of range for a product with {} rows", a.rows()),
        });
    }
    let n = b.cols();
    Ok(rows
        .par_iter()
        .map(|&r| {
            let mut out = vec![0.0; n];
            reference_row(a, b, c, ep, r, &mut out);
            (r, out)
        })
        .collect())
}

/// `T`'s elements as f32 without a copy when `T` is f32.
fn as_f32<T: Scalar>(s: &[T]) -> Option<&[f32]> {
    if TypeId::of::<T>() == TypeId::of::<f32>() { bytemuck::try_cast_slice(s).ok() } else { None }
}

/// The CPU backend: `C = alpha * (A @ B) + beta * C` with f32 products and f32 accumulation (like the GPU
/// kernels; f16 and bf16 inputs widen exactly), the epilogue in f32, one rounding to `TC` at the end.
/// Block rows run in parallel (rayon); B is converted to f32 once. Shapes are checked first: on
/// [`Error::ShapeMismatch`] C is untouched. With `beta == 0` the old C is never read.
///
/// ```
/// use sparsek::{Bsr, Epilogue, Matrix, cpu};
/// // A: 32x32 with one 16x16 block of ones at block (1, 0).
/// let a = Bsr::try_new(32, 32, 16, vec![0, 0, 1], vec![0], vec![1.0f32; 256]).unwrap();
/// let b = Matrix::<f32>::from_fn(32, 3, |r, c| (r * 3 + c) as f32);
/// let mut c = Matrix::<f32>::filled(32, 3, 3, f32::NAN).unwrap(); // beta == 0: never read
/// cpu::spmm(&a, &b, &mut c, Epilogue::default()).unwrap();
/// assert_eq!(c.get(0, 0), 0.0); // empty block row
/// let col0: f32 = (0..16).map(|k| (k * 3) as f32).sum();
/// assert_eq!(c.get(16, 0), col0);
/// ```
pub fn spmm<TA: Scalar, TB: Scalar, TC: Scalar>(
    a: &Bsr<TA>,
    b: &Matrix<TB>,
    c: &mut Matrix<TC>,
    ep: Epilogue,
) -> Result<()> {
    check_shapes(a, b, c)?;
    let (m, k, n) = (a.rows(), a.cols(), b.cols());
    if m == 0 || n == 0 {
        return Ok(());
    }
    let bs = a.block_size();
    // B in f32, row r at b32[r * ldb..][..n].
    let (b32, ldb): (Cow<'_, [f32]>, usize) = match as_f32(b.as_slice()) {
        Some(s) => (Cow::Borrowed(s), b.ld()),
        None => {
            let mut v = vec![0.0f32; k * n];
            v.par_chunks_mut(n).enumerate().for_each(|(r, dst)| {
                dst.iter_mut().zip(b.row(r)).for_each(|(d, s)| *d = s.to_f32());
            });
            (Cow::Owned(v), n)
        }
    };
    let a32 = as_f32(a.values());
    // Column tile: a bs x NT f32 accumulator of 64 KiB, and B strips of bs x NT, stay in L1/L2.
    let nt = (16384 / bs).min(n);
    let ldc = c.ld();
    let block_rows = a.block_rows();
    let (alpha, beta) = (ep.alpha, ep.beta);
    c.as_mut_slice().par_chunks_mut(bs * ldc).enumerate().for_each_init(
        || (Vec::<f32>::new(), Vec::<f32>::new()),
        |(tile, a_row), (br, chunk)| {
            if br >= block_rows {
                return; // storage past the last row
            }
            let range = a.block_row_range(br);
            let vals = range.start * bs * bs..range.end * bs * bs;
            let a_vals: &[f32] = match a32 {
                Some(s) => &s[vals],
                None => {
                    a_row.clear();
                    a_row.extend(a.values()[vals].iter().map(|v| v.to_f32()));
                    a_row
                }
            };
            for j0 in (0..n).step_by(nt) {
                let w = nt.min(n - j0);
                tile.clear();
                tile.resize(bs * w, 0.0);
                for (blk, &col) in a_vals.chunks_exact(bs * bs).zip(&a.col_idx()[range.clone()]) {
                    let k0 = col as usize * bs;
                    // Two rows of the tile by four rows of B per pass (bs is a multiple of 16): each loaded
                    // B element feeds two rows, each tile element is loaded and stored once per four terms.
                    for (t_rows, a_rows) in tile.chunks_exact_mut(2 * w).zip(blk.chunks_exact(2 * bs)) {
                        let (t0, t1) = t_rows.split_at_mut(w);
                        let (a0, a1) = a_rows.split_at(bs);
                        for kk in (0..bs).step_by(4) {
                            let b_at = |q: usize| {
                                let start = (k0 + kk + q) * ldb + j0;
                                &b32[start..start + w]
                            };
                            let (b0, b1, b2, b3) = (b_at(0), b_at(1), b_at(2), b_at(3));
                            let (x0, x1) = (&a0[kk..kk + 4], &a1[kk..kk + 4]);
                            for j in 0..w {
                                let (v0, v1, v2, v3) = (b0[j], b1[j], b2[j], b3[j]);
                                t0[j] += x0[0] * v0 + x0[1] * v1 + x0[2] * v2 + x0[3] * v3;
                                t1[j] += x1[0] * v0 + x1[1] * v1 + x1[2] * v2 + x1[3] * v3;
                            }
                        }
                    }
                }
                // EPILOGUE
                for (r, t_row) in tile.chunks_exact(w).enumerate() {
                    let start = r * ldc + j0;
                    let Some(c_row) = chunk.get_mut(start..start + w) else { continue };
                    if beta == 0.0 {
                        c_row.iter_mut().zip(t_row).for_each(|(cv, &t)| *cv = TC::from_f32(alpha * t));
                    } else {
                        c_row
                            .iter_mut()
                            .zip(t_row)
                            .for_each(|(cv, &t)| *cv = TC::from_f32(alpha * t + beta * cv.to_f32()));
                    }
                }
            }
        },
    );
    Ok(())
}
