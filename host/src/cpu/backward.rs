//! The backward products of `C = A @ B` on the CPU: `A^T @ B` (the gradient of the dense operand) and SDDMM
//! (the gradient of A's stored values), each as an f64 oracle and an f32 backend.

use rayon::prelude::*;

use super::{BlockList, Scratch, Strided, as_f32, convert, out_of_bounds, sgemm_strided, tiled, with_scratch};
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

/// Output columns of one [`sddmm`] work item: up to `SDDMM_GROUP_COLS / bs` consecutive blocks of one block row
/// are computed together, `X[br rows] @ [Y[bc_1 rows]; Y[bc_2 rows]; ...]^T`, one sgemm with `bs` rows and up to
/// 512 columns per slice of K. Measured on 2048 x 2048 at 25% (bs 64, f16 inputs, f32 values, K 512, 2 threads,
/// release): one sgemm per block (64 columns) took 14 ms, grouped 9 ms, the forward `spmm` of the same flops
/// 6.6-7 ms; a slice of K of 512 instead of 256 changed nothing measurable.
const SDDMM_GROUP_COLS: usize = 512;

/// The slice of K of one [`sddmm`] sgemm: the widened, transposed slice of Y (`SDDMM_K_SLICE x 512` f32, 512 KiB)
/// and the accumulator (`bs x 512`) stay in a core's L2.
const SDDMM_K_SLICE: usize = 256;

/// The CPU backend of SDDMM (the gradient of A's stored values in `C = A @ B`: X is the gradient of C, `M x N`,
/// and Y is B itself, `K x N`): `values = alpha * (X @ Y^T) + beta * values` at the stored blocks of `out`
/// (`M x N` here), X dense `M x K`, Y dense `N x K` (K is the token count: long), written in `out`'s value layout
/// (block after block, each row-major); `out`'s structure is the pattern and is not changed. f32 products and
/// f32 accumulation (f16 and bf16 widen exactly), `alpha * acc + beta * old` in f32, one rounding to `TV` at the
/// end: an f32 `out` with `beta == 1` accumulates gradients in f32 across calls. With `beta == 0` the old values
/// are never read (NaN in them stays harmless).
///
/// Work items run in parallel (rayon): up to `512 / bs` consecutive blocks of one block row, computed as one
/// `bs x K` by `K x (g bs)` product, `X[br rows] @ [Y rows of each block's column]^T`, through
/// `matrixmultiply::sgemm` in slices of 256 of K into an f32 accumulator. The slice of X is read in place when
/// X is f32 (through its leading dimension), else widened into a per-thread buffer; the slices of Y are widened
/// into a per-thread buffer (at most `2 / bs` conversions per flop), which sgemm reads transposed as it packs it. The per-thread buffers (under
/// 1 MiB) are kept between calls; the list of work items (`nnzb * bs / 512` or more) is allocated per call.
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
    let blk_len = bs * bs;
    let per_item = (SDDMM_GROUP_COLS / bs).max(1);
    let (row_ptr, col_idx, mut values) = out.index_and_values_mut();
    // The work items: (block row, first block, its values), in storage order, cut from the values.
    let items_max = row_ptr.windows(2).map(|w| ((w[1] - w[0]) as usize).div_ceil(per_item)).sum();
    let mut items = crate::alloc::with_capacity::<(usize, usize, &mut [TV])>("SDDMM work items", items_max)?;
    for (br, w) in row_ptr.windows(2).enumerate() {
        for i0 in (w[0] as usize..w[1] as usize).step_by(per_item) {
            let g = per_item.min(w[1] as usize - i0);
            let (head, tail) = std::mem::take(&mut values).split_at_mut(g * blk_len);
            values = tail;
            items.push((br, i0, head));
        }
    }
    items.into_par_iter().try_for_each(|(br, i0, vals)| {
        let cols = col_idx.get(i0..i0 + vals.len() / blk_len).ok_or_else(|| out_of_bounds("sddmm", format!("{i0}")))?;
        with_scratch(|s| sddmm_item(x, y, br, cols, bs, ep, vals, s))
    })
}

/// One work item of [`sddmm`]: the blocks of block row `br` in block columns `cols` (consecutive stored blocks,
/// their values `vals`), `vals = alpha * (X[br * bs..][..bs] @ [Y[c * bs..][..bs] for c in cols]^T) + beta * vals`.
#[allow(clippy::too_many_arguments)]
fn sddmm_item<TX: Scalar, TY: Scalar, TV: Scalar>(
    x: &Matrix<TX>,
    y: &Matrix<TY>,
    br: usize,
    cols: &[u32],
    bs: usize,
    ep: Epilogue,
    vals: &mut [TV],
    s: &mut Scratch,
) -> Result<()> {
    let k = x.cols();
    let n = cols.len() * bs; // columns of the item's product
    let x0 = br * bs;
    let oob = || out_of_bounds("sddmm", format!("block row {br}, block columns {cols:?}"));
    if x0 + bs > x.rows() || cols.iter().any(|&c| (c as usize + 1) * bs > y.rows()) || vals.len() != bs * n {
        return Err(oob());
    }
    let Scratch { acc, a: x_buf, c: y_buf } = s;
    acc.resize(bs * n, 0.0);
    if k == 0 {
        acc.fill(0.0);
    }
    let x32 = as_f32(x.as_slice());
    for k0 in (0..k).step_by(SDDMM_K_SLICE) {
        let w = SDDMM_K_SLICE.min(k - k0);
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
        // The Y rows of every block, columns k0..k0 + w, widened: n x w, rows w apart (Y's row c * bs + j is row
        // b * bs + j for the item's b-th block); sgemm reads it transposed (strides 1 and w) as it packs it.
        y_buf.resize(n * w, 0.0);
        for (b, &c) in cols.iter().enumerate() {
            for (j, dst) in y_buf[b * bs * w..(b + 1) * bs * w].chunks_exact_mut(w).enumerate() {
                convert(&y.row(c as usize * bs + j)[k0..k0 + w], dst);
            }
        }
        let acc_beta = if k0 == 0 { 0.0 } else { 1.0 };
        let (xs, ys) = (Strided { data: xs, rs: ldx, cs: 1 }, Strided { data: y_buf, rs: 1, cs: w });
        sgemm_strided((bs, w, n), xs, ys, acc_beta, acc, n).ok_or_else(oob)?;
    }
    // EPILOGUE: block b's element (r, c) is acc[r * n + b * bs + c].
    let (alpha, beta) = (ep.alpha, ep.beta);
    for (b, blk) in vals.chunks_exact_mut(bs * bs).enumerate() {
        for (r, out_row) in blk.chunks_exact_mut(bs).enumerate() {
            let acc_row = &acc[r * n + b * bs..r * n + b * bs + bs];
            for (o, &a) in out_row.iter_mut().zip(acc_row) {
                let v = if beta == 0.0 { alpha * a } else { alpha * a + beta * o.to_f32() };
                *o = TV::from_f32(v);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use half::{bf16, f16};

    use super::*;
    use crate::check::{Tolerance, compare, compare_exact, compare_values};
    use crate::format::{Pattern, generate, generate_int};

    /// The bytes of a matrix's whole storage (padding included), to prove that nothing was written.
    fn bytes<T: Scalar>(m: &Matrix<T>) -> Vec<u8> {
        bytemuck::cast_slice(m.as_slice()).to_vec()
    }

    /// `A^T @ B` densely in f64 from A's dense form: an oracle for the oracle.
    fn dense_t<TA: Scalar, TB: Scalar>(a: &Bsr<TA>, b: &Matrix<TB>, alpha: f64) -> Matrix<f64> {
        let d = a.to_dense().unwrap();
        Matrix::from_fn(a.cols(), b.cols(), |k, j| {
            alpha * (0..a.rows()).map(|m| d.get(m, k).to_f64() * b.get(m, j).to_f64()).sum::<f64>()
        })
        .unwrap()
    }

    /// `spmm_t` against `reference_t` (and that against a dense computation) with B and C padded with NaN and,
    /// when beta == 0, C all NaN; padding must stay as it was.
    fn check_t<TA: Scalar, TB: Scalar, TC: Scalar>(bs: usize, (m, k, n): (usize, usize, usize), ep: Epilogue) {
        let pad = 3;
        let a = generate::<TA>(Pattern::Skewed, m, k, bs, 0.4, 21).unwrap();
        let at = BsrTranspose::new(&a).unwrap();
        let b = Matrix::<TB>::random(m, n, 22).unwrap().with_ld(n + pad, TB::from_f64(f64::NAN)).unwrap();
        let nan = TC::from_f64(f64::NAN);
        let c0 = if ep.beta == 0.0 {
            Matrix::<TC>::filled(k, n, n + pad, nan).unwrap()
        } else {
            Matrix::<TC>::random(k, n, 23).unwrap().with_ld(n + pad, nan).unwrap()
        };
        let want = reference_t(&a, &b, &c0, ep).unwrap();
        let what = format!("{}/{}/{} bs {bs} {m}x{k}x{n} {ep:?}", TA::NAME, TB::NAME, TC::NAME);
        if ep.beta == 0.0 {
            let dense = dense_t(&a, &b, f64::from(ep.alpha));
            let rep = compare(&want, &dense, Tolerance { atol: 1e-9, rtol: 1e-12 });
            assert!(rep.passed(), "{what}: oracle vs dense: {rep}");
        }
        let mut c = c0.clone();
        spmm_t(&a, &at, &b, &mut c, ep).unwrap();
        let rep = compare(&c, &want, Tolerance::for_operands_t(&a, &b, &c0, ep));
        assert!(rep.passed() && rep.checked == k * n, "{what}: {rep}");
        for r in 0..k {
            let row = &c.as_slice()[r * c.ld()..];
            assert!(row[n..c.ld().min(row.len())].iter().all(|v| v.to_f64().is_nan()), "{what}: padding written");
        }
    }

    #[test]
    fn spmm_t_matches_the_oracle_every_path() {
        // Several column tiles (TILE_ELEMS / bs columns each), f16 B through the f32 panel, f32 C in place.
        check_t::<f16, f16, f32>(64, (192, 256, 1024 + 37), Epilogue::default());
        check_t::<f16, f16, f16>(64, (128, 192, 1024 + 37), Epilogue::new(-0.5, 0.75));
        // f32 A: blocks still transposed into the buffer (never read in place).
        check_t::<f32, f32, f32>(128, (256, 384, 77), Epilogue::new(2.0, 0.0));
        check_t::<bf16, bf16, f32>(16, (96, 64, 4096 + 5), Epilogue::new(1.0, 1.0));
        check_t::<bf16, bf16, bf16>(32, (96, 160, 40), Epilogue::new(1.5, -1.0));
        check_t::<f64, f64, f64>(32, (64, 96, 33), Epilogue::new(1.0, -2.0));
        check_t::<f16, f32, bf16>(32, (64, 64, 100), Epilogue::default());
    }

    #[test]
    fn spmm_t_exact_on_integers() {
        for bs in [16, 32, 64, 128] {
            let (m, k, n) = (3 * bs, 2 * bs, 24);
            let a = generate_int::<f16>(Pattern::Uniform, m, k, bs, 0.7, bs as u64, 8).unwrap();
            let at = BsrTranspose::new(&a).unwrap();
            let b = Matrix::<f16>::random_int(m, n, 8, 5).unwrap();
            let c0 = Matrix::<f32>::random_int(k, n, 100, 6).unwrap();
            for ep in [Epilogue::default(), Epilogue::new(2.0, -1.0)] {
                let want = reference_t(&a, &b, &c0, ep).unwrap();
                let mut c = c0.clone();
                spmm_t(&a, &at, &b, &mut c, ep).unwrap();
                let rep = compare_exact(&c, &want);
                assert!(rep.passed(), "bs {bs} {ep:?}: {rep}");
                // And A^T B by the forward on A's transpose, built densely: the same integers.
                let d = a.to_dense().unwrap();
                let dt = Matrix::from_fn(k, m, |r, c| d.get(c, r)).unwrap();
                let a_t = Bsr::from_dense(&dt, bs, |blk| !blk.is_zero()).unwrap();
                let mut c_fwd = c0.clone();
                crate::cpu::spmm(&a_t, &b, &mut c_fwd, ep).unwrap();
                assert_eq!(bytes(&c), bytes(&c_fwd), "bs {bs} {ep:?}: A^T @ B differs from the forward on A^T");
            }
        }
    }

    #[test]
    fn spmm_t_empty_columns_and_shapes() {
        // Block column 1 of A is empty: C's rows 16..32 are beta * C (0 with beta 0, even from NaN).
        let a = Bsr::try_new(32, 48, 16, vec![0, 1, 2], vec![0, 2], vec![1.0f32; 512]).unwrap();
        let at = BsrTranspose::new(&a).unwrap();
        let b = Matrix::<f32>::random(32, 5, 1).unwrap();
        let mut c = Matrix::<f32>::filled(48, 5, 5, f32::NAN).unwrap();
        spmm_t(&a, &at, &b, &mut c, Epilogue::default()).unwrap();
        assert!((16..32).all(|r| c.row(r).iter().all(|&v| v == 0.0)));
        assert!(c.as_slice().iter().all(|v| v.is_finite()));
        let mut c = Matrix::<f32>::filled(48, 5, 5, 2.0).unwrap();
        spmm_t(&a, &at, &b, &mut c, Epilogue::new(1.0, 0.5)).unwrap();
        assert!((16..32).all(|r| c.row(r).iter().all(|&v| v == 1.0)));
        // No blocks at all, N == 0, K == 0, M == 0.
        let e = Bsr::<f16>::empty(64, 32, 32).unwrap();
        let et = BsrTranspose::new(&e).unwrap();
        let mut c = Matrix::<f16>::filled(32, 3, 3, f16::NAN).unwrap();
        spmm_t(&e, &et, &Matrix::<f16>::random(64, 3, 2).unwrap(), &mut c, Epilogue::default()).unwrap();
        assert!(c.as_slice().iter().all(|v| v.to_f64() == 0.0));
        let mut c = Matrix::<f16>::zeros(32, 0).unwrap();
        spmm_t(&e, &et, &Matrix::<f16>::zeros(64, 0).unwrap(), &mut c, Epilogue::default()).unwrap();
        let z = Bsr::<f16>::empty(64, 0, 32).unwrap();
        let mut c = Matrix::<f16>::zeros(0, 3).unwrap();
        spmm_t(&z, &BsrTranspose::new(&z).unwrap(), &Matrix::<f16>::zeros(64, 3).unwrap(), &mut c, Epilogue::default())
            .unwrap();
        let z = Bsr::<f16>::empty(0, 64, 32).unwrap();
        let mut c = Matrix::<f32>::filled(64, 3, 3, f32::NAN).unwrap();
        let ep = Epilogue::default();
        spmm_t(&z, &BsrTranspose::new(&z).unwrap(), &Matrix::<f16>::zeros(0, 3).unwrap(), &mut c, ep).unwrap();
        assert!(c.as_slice().iter().all(|&v| v == 0.0));
        assert_eq!(reference_t(&z, &Matrix::<f16>::zeros(0, 3).unwrap(), &c, ep).unwrap().as_slice(), &[0.0; 192]);
    }

    #[test]
    fn spmm_t_bad_input_is_a_typed_error_and_writes_nothing() {
        let a = generate::<f16>(Pattern::Uniform, 64, 96, 32, 0.5, 3).unwrap();
        let at = BsrTranspose::new(&a).unwrap();
        let b = Matrix::<f16>::random(64, 8, 4).unwrap();
        let c0 = Matrix::<f32>::filled(96, 8, 9, f32::NAN).unwrap();
        let run = |b: &Matrix<f16>, c0: &Matrix<f32>, at: &BsrTranspose, ep: Epilogue| {
            let mut c = c0.clone();
            let r = spmm_t(&a, at, b, &mut c, ep);
            assert_eq!(bytes(&c), bytes(c0), "C written on error {r:?}");
            r
        };
        let ep = Epilogue::default();
        // B with the wrong rows (A's columns instead of its rows), C with the wrong rows or columns.
        let err = run(&Matrix::<f16>::random(96, 8, 4).unwrap(), &c0, &at, ep).unwrap_err();
        assert!(matches!(err, Error::ShapeMismatch { a: (96, 64), b: (96, 8), c: (96, 8) }), "{err}");
        assert!(matches!(run(&b, &Matrix::filled(64, 8, 8, 0.0).unwrap(), &at, ep), Err(Error::ShapeMismatch { .. })));
        assert!(matches!(run(&b, &Matrix::filled(96, 7, 8, 0.0).unwrap(), &at, ep), Err(Error::ShapeMismatch { .. })));
        // Another structure's index (same shape), and an activation.
        let other = BsrTranspose::new(&generate::<f16>(Pattern::Uniform, 64, 96, 32, 0.5, 99).unwrap()).unwrap();
        assert_ne!(other, at);
        assert!(matches!(run(&b, &c0, &other, ep), Err(Error::InvalidArgument { name: "at", .. })));
        let relu = ep.with_activation(Activation::Relu);
        assert!(matches!(run(&b, &c0, &at, relu), Err(Error::InvalidArgument { name: "ep", .. })));
        assert!(matches!(reference_t(&a, &b, &c0, relu), Err(Error::InvalidArgument { name: "ep", .. })));
        assert!(matches!(
            reference_t(&a, &Matrix::<f16>::random(96, 8, 4).unwrap(), &c0, ep),
            Err(Error::ShapeMismatch { .. })
        ));
    }

    /// (X @ Y^T) at `out`'s blocks densely in f64.
    fn dense_sddmm<TX: Scalar, TY: Scalar, TV>(x: &Matrix<TX>, y: &Matrix<TY>, out: &Bsr<TV>, ep: Epilogue) -> Vec<f64>
    where
        TV: Scalar,
    {
        let bs = out.block_size();
        let mut v = Vec::new();
        for br in 0..out.block_rows() {
            for i in out.block_row_range(br) {
                let bc = out.col_idx()[i] as usize;
                for e in 0..bs * bs {
                    let (r, c) = (br * bs + e / bs, bc * bs + e % bs);
                    let dot: f64 = (0..x.cols()).map(|k| x.get(r, k).to_f64() * y.get(c, k).to_f64()).sum();
                    let old = if ep.beta == 0.0 { 0.0 } else { f64::from(ep.beta) * out.block(i).unwrap()[e].to_f64() };
                    v.push(f64::from(ep.alpha) * dot + old);
                }
            }
        }
        v
    }

    /// `sddmm` against `reference_sddmm` (and that against a dense computation), X and Y padded with NaN, the
    /// values all NaN when beta == 0.
    fn check_sddmm<TX: Scalar, TV: Scalar>(bs: usize, (m, n, k): (usize, usize, usize), ep: Epilogue) {
        let pad = 5;
        let mut out = generate::<TV>(Pattern::Banded, m, n, bs, 0.4, 31).unwrap();
        if ep.beta == 0.0 {
            out.values_mut().iter_mut().for_each(|v| *v = TV::from_f64(f64::NAN));
        }
        let x = Matrix::<TX>::random(m, k, 32).unwrap().with_ld(k + pad, TX::from_f64(f64::NAN)).unwrap();
        let y = Matrix::<TX>::random(n, k, 33).unwrap().with_ld(k + pad, TX::from_f64(f64::NAN)).unwrap();
        let what = format!("{}/{} bs {bs} {m}x{n}, K {k} {ep:?}", TX::NAME, TV::NAME);
        let want = reference_sddmm(&x, &y, &out, ep).unwrap();
        let dense = dense_sddmm(&x, &y, &out, ep);
        assert_eq!(want.values().len(), dense.len());
        for (i, (w, d)) in want.values().iter().zip(&dense).enumerate() {
            assert!((w - d).abs() <= 1e-9 + 1e-12 * d.abs(), "{what}: oracle vs dense at {i}: {w} vs {d}");
        }
        let tol = Tolerance::for_sddmm(&x, &y, &out, ep);
        sddmm(&x, &y, &mut out, ep).unwrap();
        let rep = compare_values(&out, &want, tol);
        assert!(rep.passed() && rep.checked == out.values().len(), "{what}: {rep}");
    }

    #[test]
    fn sddmm_matches_the_oracle_every_path() {
        // Several slices of K (TILE_ELEMS / bs each): f16 X widened, f32 X read in place.
        check_sddmm::<f16, f32>(128, (256, 384, 1300), Epilogue::default());
        check_sddmm::<f32, f32>(64, (192, 128, 2100), Epilogue::new(0.5, 1.0));
        check_sddmm::<bf16, bf16>(32, (96, 160, 77), Epilogue::new(-1.0, 0.0));
        check_sddmm::<f16, f16>(16, (64, 64, 4096 + 3), Epilogue::new(1.0, -0.5));
        check_sddmm::<f64, f64>(32, (64, 96, 40), Epilogue::new(2.0, 1.0));
        check_sddmm::<bf16, f32>(16, (48, 32, 1), Epilogue::default());
        // Block rows with more blocks than one work item takes (512 / bs): several items per row.
        check_sddmm::<f32, f16>(128, (256, 1280, 300), Epilogue::new(1.0, 0.5));
        check_sddmm::<f16, f32>(64, (128, 1344, 257), Epilogue::default());
    }

    #[test]
    fn sddmm_exact_on_integers() {
        for bs in [16, 32, 64, 128] {
            let (m, n, k) = (2 * bs, 3 * bs, 700);
            let pattern = generate_int::<f32>(Pattern::Uniform, m, n, bs, 0.6, bs as u64, 100).unwrap();
            let x = Matrix::<bf16>::random_int(m, k, 4, 7).unwrap();
            let y = Matrix::<bf16>::random_int(n, k, 4, 8).unwrap();
            for ep in [Epilogue::default(), Epilogue::new(-2.0, 1.0)] {
                let mut out = pattern.clone();
                let want = reference_sddmm(&x, &y, &out, ep).unwrap();
                sddmm(&x, &y, &mut out, ep).unwrap();
                let rep = compare_values(&out, &want, Tolerance::EXACT);
                assert!(rep.passed(), "bs {bs} {ep:?}: {rep}");
            }
        }
    }

    #[test]
    fn sddmm_empty_k_and_structures() {
        // K == 0: the product is 0, values become beta * values (0 from NaN with beta 0).
        let x = Matrix::<f16>::zeros(32, 0).unwrap();
        let y = Matrix::<f16>::zeros(48, 0).unwrap();
        let mut out = Bsr::try_new(32, 48, 16, vec![0, 1, 2], vec![2, 0], vec![f32::NAN; 512]).unwrap();
        sddmm(&x, &y, &mut out, Epilogue::default()).unwrap();
        assert!(out.values().iter().all(|&v| v == 0.0));
        out.values_mut().iter_mut().for_each(|v| *v = 3.0);
        sddmm(&x, &y, &mut out, Epilogue::new(1.0, 2.0)).unwrap();
        assert!(out.values().iter().all(|&v| v == 6.0));
        // No stored blocks, and 0-sized shapes.
        let mut e = Bsr::<f16>::empty(64, 32, 32).unwrap();
        let (x, y) = (Matrix::<f16>::random(64, 9, 1).unwrap(), Matrix::<f16>::random(32, 9, 2).unwrap());
        sddmm(&x, &y, &mut e, Epilogue::default()).unwrap();
        assert_eq!(reference_sddmm(&x, &y, &e, Epilogue::default()).unwrap().nnzb(), 0);
        let mut z = Bsr::<f16>::empty(0, 0, 16).unwrap();
        sddmm(&Matrix::<f16>::zeros(0, 4).unwrap(), &Matrix::<f16>::zeros(0, 4).unwrap(), &mut z, Epilogue::default())
            .unwrap();
    }

    #[test]
    fn sddmm_bad_input_is_a_typed_error_and_writes_nothing() {
        let out0 = generate::<f32>(Pattern::Uniform, 64, 96, 32, 0.5, 3).unwrap();
        let x = Matrix::<f16>::random(64, 10, 4).unwrap();
        let y = Matrix::<f16>::random(96, 10, 5).unwrap();
        let run = |x: &Matrix<f16>, y: &Matrix<f16>, ep: Epilogue| {
            let mut out = out0.clone();
            let r = sddmm(x, y, &mut out, ep);
            assert!(out == out0, "values written on error {r:?}");
            r
        };
        let ep = Epilogue::new(1.0, 1.0);
        let err = run(&x, &Matrix::<f16>::random(96, 11, 5).unwrap(), ep).unwrap_err();
        assert!(matches!(err, Error::ShapeMismatch { a: (64, 10), b: (11, 96), c: (64, 96) }), "{err}");
        assert!(matches!(run(&y, &y, ep), Err(Error::ShapeMismatch { .. })));
        assert!(matches!(run(&x, &x, ep), Err(Error::ShapeMismatch { .. })));
        let silu = ep.with_activation(Activation::Silu);
        assert!(matches!(run(&x, &y, silu), Err(Error::InvalidArgument { name: "ep", .. })));
        assert!(matches!(reference_sddmm(&x, &y, &out0, silu), Err(Error::InvalidArgument { name: "ep", .. })));
        assert!(matches!(reference_sddmm(&y, &x, &out0, ep), Err(Error::ShapeMismatch { .. })));
    }

    #[test]
    fn compare_values_fails_nan_and_other_structures() {
        let out = generate::<f32>(Pattern::Uniform, 64, 64, 16, 0.5, 3).unwrap();
        let exp = out.convert::<f64>().unwrap();
        assert!(compare_values(&out, &exp, Tolerance::EXACT).passed());
        let mut bad = out.clone();
        bad.values_mut()[300] = f32::NAN;
        let rep = compare_values(&bad, &exp, Tolerance { atol: 1.0, rtol: 1.0 });
        assert_eq!((rep.failures, rep.first_failure.map(|f| (f.0, f.1))), (1, Some((18, 12))));
        let other = generate::<f32>(Pattern::Uniform, 64, 64, 16, 0.5, 4).unwrap();
        assert!(compare_values(&other, &exp, Tolerance { atol: 1e9, rtol: 1.0 }).shape_error.is_some());
    }
}
