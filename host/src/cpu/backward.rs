//! The backward products of `C = A @ B` on the CPU: `A^T @ B` (the gradient of the dense operand) and SDDMM
//! (the gradient of A's stored values), each as an f64 oracle and an f32 backend.

use rayon::prelude::*;

use super::{BlockList, Scratch, TILE_ELEMS, as_f32, convert, out_of_bounds, sgemm, tiled, with_scratch};
use crate::error::{Error, Result};
use crate::format::{Bsr, BsrTranspose};
use crate::matrix::Matrix;
use crate::scalar::Scalar;
use crate::{Activation, Epilogue};

/// `Ok` for an epilogue the backward products take: alpha and beta, no activation (an activation's backward
/// is its own step, applied to the gradient before these products).
fn check_epilogue(ep: Epilogue) -> Result<()> {
    if ep.activation != Activation::Identity {
        return Err(Error::InvalidArgument {
            name: "ep",
            reason: format!(
                "the backward products take alpha and beta only; got the activation {:?} (apply an activation's \
                 backward to the gradient first)",
                ep.activation
            ),
        });
    }
    Ok(())
}

/// `Ok` when `A^T (K x M) @ B (M x N)` fits `C (K x N)`, A being `M x K`. The error's `a` is A^T's shape
/// (`(K, M)`), so that its message (A.cols == B.rows, C = A.rows x B.cols) reads right for the product done.
fn check_shapes_t<TA, TB: Scalar, TC: Scalar>(a: &Bsr<TA>, b: &Matrix<TB>, c: &Matrix<TC>) -> Result<()> {
    if a.rows() != b.rows() || c.rows() != a.cols() || c.cols() != b.cols() {
        return Err(Error::ShapeMismatch { a: (a.cols(), a.rows()), b: (b.rows(), b.cols()), c: (c.rows(), c.cols()) });
    }
    Ok(())
}

/// `Ok` when `X (M x K) @ Y^T (K x N)` fits the `M x N` structure of `out`. The error's `a` is X's shape, `b`
/// is Y^T's (`(K, N)`) and `c` is `out`'s, so that its message reads right for `X @ Y^T`.
fn check_shapes_sddmm<TX: Scalar, TY: Scalar, TV>(x: &Matrix<TX>, y: &Matrix<TY>, out: &Bsr<TV>) -> Result<()> {
    if x.rows() != out.rows() || y.rows() != out.cols() || x.cols() != y.cols() {
        return Err(Error::ShapeMismatch {
            a: (x.rows(), x.cols()),
            b: (y.cols(), y.rows()),
            c: (out.rows(), out.cols()),
        });
    }
    Ok(())
}

/// The oracle of `A^T @ B`: `alpha * (A^T @ B) + beta * C` for a [`Bsr`] A (`M x K`), a dense B (`M x N`) and a
/// dense C (`K x N`), every operation in f64 (`alpha`, `beta` widened from f32), returned unrounded (`K x N`,
/// not converted to `TC`) like [`reference`](fn@super::reference). With `beta == 0` C is not read (it may hold
/// NaN); block columns of A without blocks give `beta * C`. It does not use the transposed index (an
/// independent computation to check [`spmm_t`] against): each output block row scans A's blocks for its block
/// column, in parallel over output block rows.
///
/// Errors: [`Error::ShapeMismatch`] (with A^T's shape as `a`) when `B.rows != M`, `C.rows != K` or
/// `C.cols != B.cols`; [`Error::InvalidArgument`] for an epilogue with an activation.
pub fn reference_t<TA: Scalar, TB: Scalar, TC: Scalar>(
    a: &Bsr<TA>,
    b: &Matrix<TB>,
    c: &Matrix<TC>,
    ep: Epilogue,
) -> Result<Matrix<f64>> {
    check_shapes_t(a, b, c)?;
    check_epilogue(ep)?;
    let (k, n, bs) = (a.cols(), b.cols(), a.block_size());
    let mut out = Matrix::<f64>::zeros(k, n)?;
    if k == 0 || n == 0 {
        return Ok(out);
    }
    let (alpha, beta) = (f64::from(ep.alpha), f64::from(ep.beta));
    out.as_mut_slice().par_chunks_mut(bs * n).enumerate().for_each(|(bc, rows)| {
        for br in 0..a.block_rows() {
            for i in a.block_row_range(br) {
                if a.col_idx()[i] as usize != bc {
                    continue;
                }
                let Some(blk) = a.block(i) else { continue };
                // Row rr of the block meets row br * bs + rr of B; its column cc is output row bc * bs + cc.
                for rr in 0..bs {
                    let b_row = b.row(br * bs + rr);
                    for (cc, o_row) in rows.chunks_exact_mut(n).enumerate() {
                        let av = blk[rr * bs + cc].to_f64();
                        for (o, bv) in o_row.iter_mut().zip(b_row) {
                            *o += av * bv.to_f64();
                        }
                    }
                }
            }
        }
        for (cc, o_row) in rows.chunks_exact_mut(n).enumerate() {
            o_row.iter_mut().for_each(|o| *o *= alpha);
            if beta != 0.0 {
                for (o, cv) in o_row.iter_mut().zip(c.row(bc * bs + cc)) {
                    *o += beta * cv.to_f64();
                }
            }
        }
    });
    Ok(out)
}

/// The CPU backend of `A^T @ B` (the gradient of B in `C = A @ B`): `C = alpha * (A^T @ B) + beta * C` for a
/// [`Bsr`] A (`M x K`), a dense B (`M x N`) and a dense C (`K x N`), any leading dimensions, with f32 products
/// and f32 accumulation (f16 and bf16 widen exactly), one rounding to `TC` at the end: the contract of
/// [`spmm`](super::spmm) for A^T (no bias, no activation).
///
/// `at` is A's transposed index ([`BsrTranspose::new`], built once per structure and reused while only the
/// values change); it must be A's ([`BsrTranspose::check_matches`], `O(nnzb)`, else
/// [`Error::InvalidArgument`] named `at`). Output block row `bc` (block column `bc` of A) sums, for each entry
/// `j` of the index's block column, A's stored block `perm[j]` transposed times block row `row_idx[j]` of B:
/// the blocks are read from A's values through `perm` and transposed as they are widened to f32 (no transposed
/// copy of the values), then the work runs as the forward's does (column tiles of C, output block rows in
/// parallel with rayon, `matrixmultiply::sgemm` per block, the same per-thread buffers). With `beta == 0` the
/// old C is never read (NaN in it stays harmless); block columns of A without blocks give `beta * C`.
///
/// Errors, all before anything is written: [`Error::ShapeMismatch`] (with A^T's shape as `a`) when
/// `B.rows != M`, `C.rows != K` or `C.cols != B.cols`; [`Error::InvalidArgument`] for an index of another
/// structure or an epilogue with an activation.
///
/// ```
/// use sparsek::{Bsr, Epilogue, Matrix, cpu, format::BsrTranspose};
/// // A: 32x48 with one 16x16 block at block (1, 2): A^T has it, transposed, at block (2, 1).
/// let a = Bsr::try_new(32, 48, 16, vec![0, 0, 1], vec![2], (0..256).map(|i| i as f32).collect()).unwrap();
/// let at = BsrTranspose::new(&a).unwrap();
/// let b = Matrix::<f32>::from_fn(32, 2, |r, c| if r == 16 && c == 0 { 1.0 } else { 0.0 }).unwrap();
/// let mut c = Matrix::<f32>::filled(48, 2, 2, f32::NAN).unwrap(); // beta == 0: never read
/// cpu::spmm_t(&a, &at, &b, &mut c, Epilogue::default()).unwrap();
/// // Column 0 of C = A^T's column 16 = A's row 16: the block's first row, at C's rows 32..48.
/// assert_eq!((c.get(0, 0), c.get(32, 0), c.get(47, 0), c.get(40, 1)), (0.0, 0.0, 15.0, 0.0));
/// ```
pub fn spmm_t<TA: Scalar, TB: Scalar, TC: Scalar>(
    a: &Bsr<TA>,
    at: &BsrTranspose,
    b: &Matrix<TB>,
    c: &mut Matrix<TC>,
    ep: Epilogue,
) -> Result<()> {
    check_shapes_t(a, b, c)?;
    check_epilogue(ep)?;
    at.check_matches(a, "at")?;
    let (perm, row_idx) = (at.perm(), at.row_idx());
    tiled(a, b, c, ep, None, |bc| BlockList {
        blocks: at.block_col_range(bc).map(|j| {
            let i = perm.get(j).map_or(usize::MAX, |&p| p as usize);
            (i, row_idx.get(j).map_or(usize::MAX, |&r| r as usize))
        }),
        transposed: true,
    })
}

/// The block row of stored block `i` in a structure with these row pointers (`i < nnzb`): the last `br` with
/// `row_ptr[br] <= i`.
fn block_row_of(row_ptr: &[u32], i: usize) -> usize {
    row_ptr.partition_point(|&p| p as usize <= i).saturating_sub(1)
}

/// The oracle of SDDMM: `alpha * (X @ Y^T) + beta * values` at the stored blocks of `out` (`M x N`), X dense
/// `M x K`, Y dense `N x K`, every operation in f64 (`alpha`, `beta` widened from f32); returned unrounded as a
/// [`Bsr`] of f64 with `out`'s structure (block `i` at `(br, bc)` holds rows `br * bs..` of X times rows
/// `bc * bs..` of Y, row-major like `out`'s values). With `beta == 0` `out`'s values are not read (they may hold
/// NaN); `K == 0` gives `beta * values`. Blocks in parallel.
///
/// Errors: [`Error::ShapeMismatch`] (`a` = X, `b` = Y^T, `c` = `out`) when `X.rows != M`, `Y.rows != N` or
/// `X.cols != Y.cols`; [`Error::InvalidArgument`] for an epilogue with an activation; [`Error::OutOfMemory`].
pub fn reference_sddmm<TX: Scalar, TY: Scalar, TV: Scalar>(
    x: &Matrix<TX>,
    y: &Matrix<TY>,
    out: &Bsr<TV>,
    ep: Epilogue,
) -> Result<Bsr<f64>> {
    check_shapes_sddmm(x, y, out)?;
    check_epilogue(ep)?;
    let bs = out.block_size();
    let blk_len = bs * bs;
    let mut values = crate::alloc::filled("SDDMM oracle values", out.values().len(), 0.0f64)?;
    let (alpha, beta) = (f64::from(ep.alpha), f64::from(ep.beta));
    values.par_chunks_mut(blk_len).enumerate().for_each(|(i, blk)| {
        let br = block_row_of(out.row_ptr(), i);
        let bc = out.col_idx()[i] as usize;
        let old = out.block(i).unwrap_or_default();
        for (e, o) in blk.iter_mut().enumerate() {
            let (r, c) = (e / bs, e % bs);
            let (xr, yr) = (x.row(br * bs + r), y.row(bc * bs + c));
            let dot: f64 = xr.iter().zip(yr).map(|(a, b)| a.to_f64() * b.to_f64()).sum();
            *o = alpha * dot;
            if beta != 0.0 {
                *o += beta * old.get(e).map_or(f64::NAN, |v| v.to_f64());
            }
        }
    });
    let mut row_ptr = crate::alloc::with_capacity("SDDMM oracle row_ptr", out.row_ptr().len())?;
    row_ptr.extend_from_slice(out.row_ptr());
    let mut col_idx = crate::alloc::with_capacity("SDDMM oracle col_idx", out.nnzb())?;
    col_idx.extend_from_slice(out.col_idx());
    Ok(Bsr::try_new(out.rows(), out.cols(), bs, row_ptr, col_idx, values)?)
}

/// The CPU backend of SDDMM (the gradient of A's stored values in `C = A @ B`, with X the gradient of C and Y
/// = B^T): `values = alpha * (X @ Y^T) + beta * values` at the stored blocks of `out` (`M x N`), X dense `M x K`,
/// Y dense `N x K` (K is the token count: long), written in `out`'s value layout (block after block, each
/// row-major); `out`'s structure is the pattern and is not changed. f32 products and f32 accumulation (f16 and
/// bf16 widen exactly), `alpha * acc + beta * old` in f32, one rounding to `TV` at the end: an f32 `out` with
/// `beta == 1` accumulates gradients in f32 across calls. With `beta == 0` the old values are never read (NaN
/// in them stays harmless).
///
/// Blocks run in parallel (rayon); block `(br, bc)` is `X[br rows] @ Y[bc rows]^T`, a `bs x K` by `K x bs`
/// sgemm taken in slices of `TILE_ELEMS / bs` (512 for bs 128) of K into a `bs x bs` f32 accumulator. The
/// slice of X is read in place when X is f32 (through its leading dimension), else widened into a per-thread
/// buffer; the slice of Y is widened and transposed into a per-thread buffer (`bs` elements of X and Y
/// converted per `2 bs^2` flops). The per-thread buffers (at most 256 KiB each) are kept between calls.
///
/// Errors, all before anything is written: [`Error::ShapeMismatch`] (`a` = X, `b` = Y^T, `c` = `out`) when
/// `X.rows != M`, `Y.rows != N` or `X.cols != Y.cols`; [`Error::InvalidArgument`] for an epilogue with an
/// activation.
///
/// ```
/// use sparsek::{Bsr, Epilogue, Matrix, cpu};
/// // The pattern: 32x32 with one 16x16 block at (1, 0); its values are overwritten (beta == 0).
/// let mut g = Bsr::try_new(32, 32, 16, vec![0, 0, 1], vec![0], vec![f32::NAN; 256]).unwrap();
/// let x = Matrix::<f32>::from_fn(32, 3, |r, k| (r + k) as f32).unwrap(); // 32 x K, K = 3
/// let y = Matrix::<f32>::from_fn(32, 3, |r, k| if k == 0 { r as f32 } else { 0.0 }).unwrap();
/// cpu::sddmm(&x, &y, &mut g, Epilogue::default()).unwrap();
/// // Element (r, c) of the block = row 16 + r of X . row c of Y = (16 + r) * c.
/// assert_eq!(g.block(0).unwrap()[2 * 16 + 5], 18.0 * 5.0);
/// ```
pub fn sddmm<TX: Scalar, TY: Scalar, TV: Scalar>(
    x: &Matrix<TX>,
    y: &Matrix<TY>,
    out: &mut Bsr<TV>,
    ep: Epilogue,
) -> Result<()> {
    check_shapes_sddmm(x, y, out)?;
    check_epilogue(ep)?;
    let bs = out.block_size();
    let (row_ptr, col_idx, values) = out.index_and_values_mut();
    values.par_chunks_mut(bs * bs).enumerate().try_for_each(|(i, blk)| {
        let br = block_row_of(row_ptr, i);
        let bc = col_idx.get(i).map_or(usize::MAX, |&c| c as usize);
        with_scratch(|s| sddmm_block(x, y, (br, bc), bs, ep, blk, s))
    })
}

/// One block of [`sddmm`]: `blk = alpha * (X[br * bs..][..bs] @ Y[bc * bs..][..bs]^T) + beta * blk`.
fn sddmm_block<TX: Scalar, TY: Scalar, TV: Scalar>(
    x: &Matrix<TX>,
    y: &Matrix<TY>,
    (br, bc): (usize, usize),
    bs: usize,
    ep: Epilogue,
    blk: &mut [TV],
    s: &mut Scratch,
) -> Result<()> {
    let k = x.cols();
    let kt = (TILE_ELEMS / bs).min(k).max(1);
    let (x0, y0) = (br * bs, bc * bs);
    let oob = || out_of_bounds("sddmm", format!("block ({br}, {bc})"));
    if x0 + bs > x.rows() || y0 + bs > y.rows() {
        return Err(oob());
    }
    let Scratch { acc, a: x_buf, c: y_buf } = s;
    acc.resize(bs * bs, 0.0);
    if k == 0 {
        acc.fill(0.0);
    }
    let x32 = as_f32(x.as_slice());
    for k0 in (0..k).step_by(kt) {
        let w = kt.min(k - k0);
        // X's rows x0..x0 + bs, columns k0..k0 + w: in place when f32, else widened (bs x w, rows w apart).
        let (xs, ldx): (&[f32], usize) = match x32 {
            Some(v) => (v.get(x0 * x.ld() + k0..).ok_or_else(oob)?, x.ld()),
            None => {
                x_buf.resize(bs * w, 0.0);
                for (r, dst) in x_buf.chunks_exact_mut(w).enumerate() {
                    convert(&x.row(x0 + r)[k0..k0 + w], dst);
                }
                (x_buf, w)
            }
        };
        // Y's rows y0..y0 + bs, columns k0..k0 + w, transposed: w x bs, rows bs apart.
        y_buf.resize(w * bs, 0.0);
        for j in 0..bs {
            for (p, v) in y.row(y0 + j)[k0..k0 + w].iter().enumerate() {
                y_buf[p * bs + j] = v.to_f32();
            }
        }
        let acc_beta = if k0 == 0 { 0.0 } else { 1.0 };
        sgemm((bs, w, bs), xs, ldx, y_buf, bs, acc_beta, acc, bs).ok_or_else(oob)?;
    }
    let (alpha, beta) = (ep.alpha, ep.beta);
    for (o, &a) in blk.iter_mut().zip(acc.iter()) {
        let v = if beta == 0.0 { alpha * a } else { alpha * a + beta * o.to_f32() };
        *o = TV::from_f32(v);
    }
    Ok(())
}
