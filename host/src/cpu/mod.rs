//! The CPU side of every product: the f64 oracle ([`reference`](fn@reference), [`reference_rows`]) that tests
//! and the CLI check against, and a multi-threaded f32 backend ([`spmm`]) for machines without a GPU; and the
//! same pair for each backward product (training): `A^T @ B` ([`reference_t`], [`spmm_t`], through A's
//! transposed index [`crate::format::BsrTranspose`]) and SDDMM, `alpha * (X @ Y^T) + beta * values` at A's
//! stored blocks ([`reference_sddmm`], [`sddmm`]). For `C = A @ B` and the gradient `G` of C, the gradient of B
//! is `A^T @ G` (`spmm_t(A, .., G, ..)`) and the gradient of A's values is `G @ B^T` at A's blocks
//! (`sddmm(G, B, ..)`: Y is B itself, `K x N`).
//!
//! The forward products share one contract (the backward ones, documented with them, take alpha and beta
//! only): `C = act(alpha * (A @ B) + bias) + beta * C` where A is a [`Bsr`] (`M x K`), B a dense [`Matrix`]
//! `K x N` and C a dense `M x N` [`Matrix`] (any leading dimensions, any `N`), `act` the [`Epilogue`]'s
//! [`Activation`] and `bias` (the `_with_bias` forms) one value per row of C. With `beta == 0` the old C is never
//! read (it may hold NaN); block rows without blocks give `beta * C` (0 when `beta == 0`). Shapes are checked
//! before anything is written ([`Error::ShapeMismatch`]). The product is computed as IEEE arithmetic dictates:
//! zeros of A are multiplied like any value, so an Inf or NaN in B reaches every row whose blocks cover it.

use std::any::TypeId;
use std::cell::RefCell;

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::format::Bsr;
use crate::matrix::Matrix;
use crate::scalar::Scalar;
use crate::{Activation, Epilogue};

mod backward;
pub use backward::{reference_sddmm, reference_t, sddmm, spmm_t};

/// `Ok` when `A (M x K) @ B (K x N)` fits `C (M x N)`.
fn check_shapes<TA, TB: Scalar, TC: Scalar>(a: &Bsr<TA>, b: &Matrix<TB>, c: &Matrix<TC>) -> Result<()> {
    if a.cols() != b.rows() || c.rows() != a.rows() || c.cols() != b.cols() {
        return Err(Error::ShapeMismatch { a: (a.rows(), a.cols()), b: (b.rows(), b.cols()), c: (c.rows(), c.cols()) });
    }
    Ok(())
}

/// `Ok` when `bias` (if any) has one value per row of A.
fn check_bias<TA>(a: &Bsr<TA>, bias: Option<&[TA]>) -> Result<()> {
    match bias {
        Some(v) if v.len() != a.rows() => Err(Error::InvalidArgument {
            name: "bias",
            reason: format!("has {} values; the product has {} rows (one bias value per row of C)", v.len(), a.rows()),
        }),
        _ => Ok(()),
    }
}

/// The activation `act` of `x` in f64, exactly as defined (GELU through `tanh`): the oracle's, and the rule the
/// GPU's approximations are checked against. ReLU keeps NaN.
pub fn activation_f64(act: Activation, x: f64) -> f64 {
    match act {
        Activation::Identity => x,
        Activation::Relu => {
            if x < 0.0 {
                0.0
            } else {
                x
            }
        }
        Activation::GeluTanh => {
            0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
        }
        Activation::Silu => x / (1.0 + (-x).exp()),
    }
}

/// The activation in f32 (the CPU backend's epilogue): through f64, rounded once (exact for the identity and
/// ReLU).
fn activation_f32(act: Activation, x: f32) -> f32 {
    if act == Activation::Identity { x } else { activation_f64(act, f64::from(x)) as f32 }
}

/// One row `r` of the oracle into `out` (`N` elements).
#[allow(clippy::too_many_arguments)]
fn reference_row<TA: Scalar, TB: Scalar, TC: Scalar>(
    a: &Bsr<TA>,
    b: &Matrix<TB>,
    c: &Matrix<TC>,
    ep: Epilogue,
    bias: Option<&[TA]>,
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
    let bias = bias.and_then(|v| v.get(r)).map_or(0.0, |v| v.to_f64());
    out.iter_mut().for_each(|o| *o = activation_f64(ep.activation, alpha * *o + bias));
    if beta != 0.0 {
        for (o, cv) in out.iter_mut().zip(c.row(r)) {
            *o += beta * cv.to_f64();
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
    reference_with_bias(a, b, c, ep, None)
}

/// [`reference`](fn@reference) with a bias: `act(alpha * (A @ B) + bias[row]) + beta * C`. A bias whose length
/// is not M gives [`Error::InvalidArgument`].
pub fn reference_with_bias<TA: Scalar, TB: Scalar, TC: Scalar>(
    a: &Bsr<TA>,
    b: &Matrix<TB>,
    c: &Matrix<TC>,
    ep: Epilogue,
    bias: Option<&[TA]>,
) -> Result<Matrix<f64>> {
    check_shapes(a, b, c)?;
    check_bias(a, bias)?;
    let (m, n) = (a.rows(), b.cols());
    let mut out = Matrix::<f64>::zeros(m, n)?;
    if m > 0 && n > 0 {
        out.as_mut_slice().par_chunks_mut(n).enumerate().for_each(|(r, row)| reference_row(a, b, c, ep, bias, r, row));
    }
    Ok(out)
}

/// The oracle ([`reference`](fn@reference)) for the listed rows only, to check big products by sampling: returns
/// `(row, values)` in the order of `rows` (duplicates allowed). A row `>= M` gives
/// [`Error::InvalidArgument`].
pub fn reference_rows<TA: Scalar, TB: Scalar, TC: Scalar>(
    a: &Bsr<TA>,
    b: &Matrix<TB>,
    c: &Matrix<TC>,
    ep: Epilogue,
    rows: &[usize],
) -> Result<Vec<(usize, Vec<f64>)>> {
    reference_rows_with_bias(a, b, c, ep, None, rows)
}

/// [`reference_rows`] with a bias (see [`reference_with_bias`]).
pub fn reference_rows_with_bias<TA: Scalar, TB: Scalar, TC: Scalar>(
    a: &Bsr<TA>,
    b: &Matrix<TB>,
    c: &Matrix<TC>,
    ep: Epilogue,
    bias: Option<&[TA]>,
    rows: &[usize],
) -> Result<Vec<(usize, Vec<f64>)>> {
    check_shapes(a, b, c)?;
    check_bias(a, bias)?;
    if let Some((i, &r)) = rows.iter().enumerate().find(|&(_, &r)| r >= a.rows()) {
        return Err(Error::InvalidArgument {
            name: "rows",
            reason: format!("rows[{i}] = {r} is out of range for a product with {} rows", a.rows()),
        });
    }
    let n = b.cols();
    // The rows themselves (`rows.len() * N` f64) are allocated fallibly: an error, not an abort.
    crate::alloc::bytes_of::<f64>("oracle rows (elements)", crate::alloc::mul("oracle rows", rows.len(), n)?)?;
    rows.par_iter()
        .map(|&r| {
            let mut row = crate::alloc::filled("oracle row", n, 0.0)?;
            reference_row(a, b, c, ep, bias, r, &mut row);
            Ok((r, row))
        })
        .collect()
}

/// `T`'s elements as f32 without a copy when `T` is f32.
fn as_f32<T: Scalar>(s: &[T]) -> Option<&[f32]> {
    if TypeId::of::<T>() == TypeId::of::<f32>() { bytemuck::try_cast_slice(s).ok() } else { None }
}

/// `src` and `dst` as slices of `S2` and `D2` when `S` is `S2` and `D` is `D2` (the same types: the casts cannot
/// fail), else `None`.
fn typed<'s, 'd, S: Scalar, D: Scalar, S2: Scalar, D2: Scalar>(
    src: &'s [S],
    dst: &'d mut [D],
) -> Option<(&'s [S2], &'d mut [D2])> {
    if TypeId::of::<S>() != TypeId::of::<S2>() || TypeId::of::<D>() != TypeId::of::<D2>() {
        return None;
    }
    Some((bytemuck::try_cast_slice(src).ok()?, bytemuck::try_cast_slice_mut(dst).ok()?))
}

/// `dst[i] = src[i]` through f32: exact from f16 and bf16 (and f32) to f32, rounded to nearest even from f32 to
/// f16 or bf16 (the CPU backend widens A, B and C and narrows its results so). Vectorised from f16 to f32 and
/// back (F16C where the CPU has it), from bf16 to f32 (a shift) and between equal types (a copy); element by
/// element for other types. Converts the common prefix when lengths differ.
fn convert<S: Scalar, D: Scalar>(src: &[S], dst: &mut [D]) {
    let len = src.len().min(dst.len());
    let (src, dst) = (&src[..len], &mut dst[..len]);
    if let Some((s, d)) = typed::<S, D, f16, f32>(src, dst) {
        s.convert_to_f32_slice(d);
    } else if let Some((s, d)) = typed::<S, D, bf16, f32>(src, dst) {
        // bf16 is the top half of an f32: widening is exact, NaN payloads included (what bf16::to_f32 does).
        d.iter_mut().zip(s).for_each(|(d, s)| *d = f32::from_bits(u32::from(s.to_bits()) << 16));
    } else if let Some((s, d)) = typed::<S, D, f32, f16>(src, dst) {
        d.convert_from_f32_slice(s);
    } else if let Some((s, d)) = typed::<S, D, S, S>(src, dst) {
        d.copy_from_slice(s);
    } else {
        dst.iter_mut().zip(src).for_each(|(d, s)| *d = D::from_f32(s.to_f32()));
    }
}

/// Columns of C per pass: `TILE_ELEMS / bs` (capped at N), so that a block row's `bs x tile` f32 accumulator
/// (256 KiB) stays in a core's L2 while every block of the row is added to it, and so that the f32 copy of an
/// f16 or bf16 B is made `K x tile` at a time, in one buffer reused across tiles (measured on 4096^3 with 2
/// threads: a whole `K x N` copy lost ~17% of the time to page faults of fresh memory, while the tiling costs
/// nothing there: sgemm gains from the accumulator staying in L2).
const TILE_ELEMS: usize = 65536;

/// Per-thread buffers of the backend, kept between calls so that repeated products do not pay for fresh
/// memory (page faults) each time: the accumulator (`TILE_ELEMS` f32, 256 KiB), one block of A (`bs^2`, at most
/// 64 KiB) and one row of C (`tile`, at most 16 KiB); [`sddmm`] uses `acc` for its `bs x 512` accumulator (at
/// most 256 KiB), `a` and `c` for its slices of X and Y (`bs x 256` and `512 x 256` f32: at most 128 and 512
/// KiB): under 1 MiB per rayon thread.
#[derive(Default)]
pub(crate) struct Scratch {
    acc: Vec<f32>,
    a: Vec<f32>,
    c: Vec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Runs `f` (once) with this thread's [`Scratch`], or with fresh buffers when those are not available (already
/// borrowed, or the thread is exiting).
fn with_scratch<R>(mut f: impl FnMut(&mut Scratch) -> R) -> R {
    match SCRATCH.try_with(|cell| cell.try_borrow_mut().ok().map(|mut s| f(&mut s))) {
        Ok(Some(r)) => r,
        _ => f(&mut Scratch::default()),
    }
}

/// `c = a @ b + beta * c` in f32 through `matrixmultiply::sgemm`, all three row-major with unit column stride:
/// `a` is `m x k` with rows `lda` apart, `b` `k x n` with rows `ldb` apart, `c` `m x n` with rows `ldc` apart.
/// With `beta == 0` the old `c` is not read (sgemm's contract). Returns `None`, having touched nothing, when a
/// slice is too short for its shape and stride, when `lda < k`, `ldb < n` or `ldc < n` (rows of `c` would
/// overlap) or when a stride does not fit `isize`. Public but hidden for the CPU backend benchmark
/// (`bench/benches/cpu_backend.rs`), whose per-block and dense baselines call the same safe wrapper.
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    (m, k, n): (usize, usize, usize),
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    beta: f32,
    c: &mut [f32],
    ldc: usize,
) -> Option<()> {
    if m == 0 || n == 0 {
        return Some(());
    }
    if lda < k || ldb < n {
        return None;
    }
    sgemm_strided((m, k, n), Strided { data: a, rs: lda, cs: 1 }, Strided { data: b, rs: ldb, cs: 1 }, beta, c, ldc)
}

/// A read-only f32 operand of [`sgemm_strided`]: element `(i, j)` is `data[i * rs + j * cs]` (any strides: a
/// transposed operand is `rs == 1`).
#[derive(Clone, Copy)]
pub(crate) struct Strided<'a> {
    pub(crate) data: &'a [f32],
    pub(crate) rs: usize,
    pub(crate) cs: usize,
}

/// `c = a @ b + beta * c` in f32 through `matrixmultiply::sgemm`: `a` is `m x k`, `b` `k x n`, both with any
/// strides ([`Strided`]; sgemm packs them, so a transposed operand costs nothing more), `c` `m x n` row-major with
/// rows `ldc` apart. With `beta == 0` the old `c` is not read. Returns `None`, having touched nothing, when an
/// operand's slice is too short for its shape and strides, when `ldc < n` or when a stride does not fit `isize`.
pub(crate) fn sgemm_strided(
    (m, k, n): (usize, usize, usize),
    a: Strided<'_>,
    b: Strided<'_>,
    beta: f32,
    c: &mut [f32],
    ldc: usize,
) -> Option<()> {
    if m == 0 || n == 0 {
        return Some(());
    }
    // The largest offset of a rows x cols operand, below its length (nothing is read when rows or cols is 0).
    let fits = |s: Strided<'_>, rows: usize, cols: usize| {
        rows == 0
            || cols == 0
            || (rows - 1).checked_mul(s.rs).and_then(|o| o.checked_add((cols - 1).checked_mul(s.cs)?))
                < Some(s.data.len())
    };
    if ldc < n || !fits(a, m, k) || !fits(b, k, n) {
        return None;
    }
    if !Matrix::<f32>::needed_len(m, n, ldc).is_some_and(|need| need <= c.len()) {
        return None;
    }
    let isz = |v: usize| isize::try_from(v).ok();
    let (rsa, csa, rsb, csb, ldc) = (isz(a.rs)?, isz(a.cs)?, isz(b.rs)?, isz(b.cs)?, isz(ldc)?);
    // SAFETY: sgemm reads a[i * rsa + p * csa] for i < m, p < k: the largest offset is (m - 1) * rsa + (k - 1) *
    // csa, below a.data.len() as checked above (k == 0 reads nothing); likewise b[p * rsb + j * csb] for p < k,
    // j < n, below b.data.len(). It reads (unless beta == 0) and writes c[i * ldc + j] for i < m, j < n, below
    // c.len(); ldc >= n and unit column stride make those elements distinct, as sgemm requires. The strides fit
    // isize and every offset stays inside its slice, so the pointer arithmetic does not overflow. `c` is
    // borrowed mutably, so nothing else reads or writes it during the call; a and b are shared borrows, not
    // written.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.data.as_ptr(),
            rsa,
            csa,
            b.data.as_ptr(),
            rsb,
            csb,
            beta,
            c.as_mut_ptr(),
            ldc,
            1,
        );
    }
    Some(())
}

/// The error for an operand slice that falls outside its buffer: unreachable for a valid [`Bsr`] and
/// [`Matrix`] after [`check_shapes`] (both types validate on construction); reported rather than panicking.
fn out_of_bounds(name: &'static str, what: String) -> Error {
    Error::InvalidArgument { name, reason: format!("{what} falls outside the operands (a bug in sparsek)") }
}

/// Transposes the `n x n` row-major matrix `m` in place (nothing when `m` is shorter than `n^2`).
fn transpose_square(m: &mut [f32], n: usize) {
    if m.len() < n * n {
        return;
    }
    for r in 0..n {
        for c in r + 1..n {
            m.swap(r * n + c, c * n + r);
        }
    }
}

/// B (`K x N`) or one column tile of it, in f32: row `r` of the tile starts at `data[r * ld + col0]`.
#[derive(Clone, Copy)]
pub(crate) struct F32Rows<'a> {
    pub(crate) data: &'a [f32],
    pub(crate) ld: usize,
    pub(crate) col0: usize,
}

/// The blocks one block row of an output sums: `(i, k)` pairs, A's stored block `i` (transposed when
/// `transposed`) times block row `k` of B. The forward's block row `br` is `(i, col_idx[i])` over its range;
/// `A^T`'s block row `bc` is `(perm[j], row_idx[j])` over block column `bc` of the transposed index.
#[derive(Clone)]
pub(crate) struct BlockList<I> {
    pub(crate) blocks: I,
    pub(crate) transposed: bool,
}

/// Columns `j0..j0 + w` of block row `br` of the product into `c_rows` (C from row `br * bs` on, rows `ldc`
/// apart): every listed block's `bs x bs` product (transposed for `A^T`) with its `bs x w` panel of `b` (the
/// same columns) is accumulated in f32 by sgemm, then the epilogue writes `alpha * acc + beta * C`, rounded to
/// `TC`, to C's columns `j0..j0 + w`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn block_row_tile<TA: Scalar, TC: Scalar, I: ExactSizeIterator<Item = (usize, usize)>>(
    a: &Bsr<TA>,
    list: BlockList<I>,
    b: F32Rows<'_>,
    ep: Epilogue,
    bias: Option<&[TA]>,
    (j0, w): (usize, usize),
    br: usize,
    c_rows: &mut [TC],
    ldc: usize,
    s: &mut Scratch,
) -> Result<()> {
    let bs = a.block_size();
    let blk_len = bs * bs; // bs <= 128
    let BlockList { blocks, transposed } = list;
    let Scratch { acc, a: a_buf, c: c_buf } = s;
    // With an f32 C and the default epilogue (alpha 1, beta 0) the epilogue is a copy: accumulate in C itself
    // (same values, no copy); else in the scratch accumulator.
    let direct = ep.alpha == 1.0
        && ep.beta == 0.0
        && ep.activation == Activation::Identity
        && bias.is_none()
        && TypeId::of::<TC>() == TypeId::of::<f32>();
    let (out, ldo): (&mut [f32], usize) = if direct {
        let c32 = bytemuck::try_cast_slice_mut::<TC, f32>(c_rows).ok().and_then(|c| c.get_mut(j0..));
        (c32.ok_or_else(|| out_of_bounds("c", format!("block row {br}, columns from {j0}")))?, ldc)
    } else {
        acc.resize(bs * w, 0.0);
        (acc, w)
    };
    // The first block overwrites the accumulator (sgemm's beta 0: its old contents are not read), later ones add
    // to it; a block row without blocks gives zeros.
    if blocks.len() == 0 {
        out.chunks_mut(ldo).take(bs).for_each(|row| row.iter_mut().take(w).for_each(|v| *v = 0.0));
    }
    for (pos, (i, k)) in blocks.enumerate() {
        let oob = || out_of_bounds("a", format!("block {i} (output block row {br}, block row {k} of B)"));
        // The block in f32: in place when A is f32 and not transposed, else widened (and transposed) here, once
        // per column tile (bs^2 conversions against 2 bs^2 w flops, and no nnzb * bs^2 buffer of fresh memory).
        let blk: &[f32] = match as_f32(a.values()) {
            Some(v) if !transposed => {
                i.checked_mul(blk_len).and_then(|s| v.get(s..s.checked_add(blk_len)?)).ok_or_else(oob)?
            }
            _ => {
                a_buf.resize(blk_len, 0.0);
                convert(a.block(i).ok_or_else(oob)?, a_buf);
                if transposed {
                    transpose_square(a_buf, bs);
                }
                a_buf
            }
        };
        // B's rows k * bs .. k * bs + bs, from column col0.
        let start = k.checked_mul(bs).and_then(|r| r.checked_mul(b.ld)?.checked_add(b.col0));
        let panel = start.and_then(|s| b.data.get(s..)).ok_or_else(oob)?;
        let acc_beta = if pos == 0 { 0.0 } else { 1.0 };
        sgemm((bs, bs, w), blk, bs, panel, b.ld, acc_beta, out, ldo).ok_or_else(oob)?;
    }
    if direct {
        return Ok(());
    }
    // EPILOGUE: act(alpha * acc + bias) (+ beta * C), in f32, then one rounding to TC.
    let (alpha, beta, act) = (ep.alpha, ep.beta, ep.activation);
    for (r, t_row) in acc.chunks_exact_mut(w).enumerate() {
        let start = r * ldc + j0;
        let Some(c_row) = c_rows.get_mut(start..start + w) else { continue };
        let b = bias.and_then(|v| v.get(br * bs + r)).map_or(0.0, |v| v.to_f32());
        if alpha != 1.0 || b != 0.0 || act != Activation::Identity {
            t_row.iter_mut().for_each(|t| *t = activation_f32(act, alpha * *t + b));
        }
        if beta != 0.0 {
            c_buf.resize(w, 0.0);
            convert(c_row, c_buf);
            t_row.iter_mut().zip(c_buf.iter()).for_each(|(t, &cv)| *t += beta * cv);
        }
        convert(t_row, c_row);
    }
    Ok(())
}

/// The CPU backend: `C = alpha * (A @ B) + beta * C` with f32 products and f32 accumulation (like the GPU
/// kernels; f16 and bf16 inputs widen exactly), the epilogue in f32, one rounding to `TC` at the end.
///
/// C is computed in column tiles of `min(N, 65536 / bs)` columns; within a tile, block rows run in parallel
/// (rayon), and each stored block adds its `bs x bs` product with the `bs` rows of B it meets to the block row's
/// f32 accumulator through `matrixmultiply::sgemm` (one core per call). f32 operands are read in place (B through
/// its leading dimension). A B of another type is converted to f32 once (exactly for f16 and bf16), a `K x tile`
/// panel at a time, into a buffer of `4 * K * tile` bytes allocated per call; blocks of an A of another type are
/// converted as they are used, once per column tile. The accumulator is C itself when C is f32 and the epilogue is
/// the default (`alpha == 1`, `beta == 0`), else a per-thread buffer; the per-thread buffers are kept between calls
/// (about 1/3 MiB per rayon thread at most). The summation order within a block is sgemm's, so results differ from
/// the f64 oracle by f32 rounding only (see [`crate::check::Tolerance`]); integer-valued products whose partial
/// sums are exact in f32 come out exact. Shapes are checked first: on [`Error::ShapeMismatch`] C is untouched. With
/// `beta == 0` the old C is never read. See the [module documentation](self) for the whole contract.
///
/// ```
/// use sparsek::{Bsr, Epilogue, Matrix, cpu};
/// // A: 32x32 with one 16x16 block of ones at block (1, 0).
/// let a = Bsr::try_new(32, 32, 16, vec![0, 0, 1], vec![0], vec![1.0f32; 256]).unwrap();
/// let b = Matrix::<f32>::from_fn(32, 3, |r, c| (r * 3 + c) as f32).unwrap();
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
    spmm_with_bias(a, b, c, ep, None)
}

/// [`spmm`] with a bias per row of C: `C = act(alpha * (A @ B) + bias) + beta * C` (a linear layer's epilogue).
/// A bias whose length is not M gives [`Error::InvalidArgument`] and leaves C untouched.
pub fn spmm_with_bias<TA: Scalar, TB: Scalar, TC: Scalar>(
    a: &Bsr<TA>,
    b: &Matrix<TB>,
    c: &mut Matrix<TC>,
    ep: Epilogue,
    bias: Option<&[TA]>,
) -> Result<()> {
    check_shapes(a, b, c)?;
    check_bias(a, bias)?;
    tiled(a, b, c, ep, bias, |br| BlockList {
        blocks: a.block_row_range(br).map(|i| (i, a.col_idx().get(i).map_or(usize::MAX, |&c| c as usize))),
        transposed: false,
    })
}

/// The backend's loop, shared by `A @ B` ([`spmm_with_bias`]) and `A^T @ B` ([`spmm_t`]): C's block row `br`
/// sums the blocks `blocks_of(br)` lists (with B's block rows). B is `K x N`, C has `bs` rows per output block
/// row; shapes are checked by the caller. Column tiles of `min(N, TILE_ELEMS / bs)` columns, block rows in
/// parallel within a tile; see [`spmm`] for the buffers.
fn tiled<TA: Scalar, TB: Scalar, TC: Scalar, I, F>(
    a: &Bsr<TA>,
    b: &Matrix<TB>,
    c: &mut Matrix<TC>,
    ep: Epilogue,
    bias: Option<&[TA]>,
    blocks_of: F,
) -> Result<()>
where
    I: ExactSizeIterator<Item = (usize, usize)>,
    F: Fn(usize) -> BlockList<I> + Sync,
{
    let (m, n) = (c.rows(), b.cols());
    if m == 0 || n == 0 {
        return Ok(());
    }
    let bs = a.block_size();
    let k = b.rows();
    let tile = (TILE_ELEMS / bs).min(n);
    let ldc = c.ld();
    // C has m >= bs rows, so bs * ldc <= (m - 1) * ldc + n fits unless m == bs, where saturating still gives
    // one chunk for the one block row. Chunks past the last block row (storage beyond the matrix) are skipped.
    let chunk_len = bs.saturating_mul(ldc);
    let b32 = as_f32(b.as_slice());
    // B not f32: one K x tile f32 buffer, refilled for each column tile (k * tile <= k * n <= B's storage).
    let mut b_tile = match b32 {
        Some(_) => Vec::new(),
        None => {
            crate::alloc::filled("f32 panel of B", crate::alloc::mul("f32 panel of B (K * tile)", k, tile)?, 0.0f32)?
        }
    };
    for j0 in (0..n).step_by(tile) {
        let w = tile.min(n - j0);
        let rows = match b32 {
            Some(data) => F32Rows { data, ld: b.ld(), col0: j0 },
            None => {
                let buf = b_tile.get_mut(..k * w).unwrap_or_default();
                buf.par_chunks_mut(w).enumerate().for_each(|(r, dst)| {
                    if let Some(src) = b.row(r).get(j0..j0 + w) {
                        convert(src, dst);
                    }
                });
                F32Rows { data: buf, ld: w, col0: 0 }
            }
        };
        c.as_mut_slice().par_chunks_mut(chunk_len).take(m / bs).enumerate().try_for_each(|(br, c_rows)| {
            with_scratch(|s| block_row_tile(a, blocks_of(br), rows, ep, bias, (j0, w), br, c_rows, ldc, s))
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{Tolerance, compare};
    use crate::format::{Pattern, generate};

    /// `spmm` against the oracle on a product with more columns than one tile (`TILE_ELEMS / bs`), B and C with
    /// NaN-poisoned padding (and a NaN-poisoned C when beta == 0); the padding must stay as it was.
    fn check_wide<TA: Scalar, TB: Scalar, TC: Scalar>(bs: usize, n: usize, ep: Epilogue) {
        let (m, k, pad) = (3 * bs, 2 * bs, 3);
        let a = generate::<TA>(Pattern::Uniform, m, k, bs, 0.5, 7).unwrap();
        let nan_tb = TB::from_f64(f64::NAN);
        let b = Matrix::<TB>::random(k, n, 8).unwrap().with_ld(n + pad, nan_tb).unwrap();
        let nan_tc = TC::from_f64(f64::NAN);
        let c0 = if ep.beta == 0.0 {
            Matrix::<TC>::filled(m, n, n + pad, nan_tc).unwrap()
        } else {
            Matrix::<TC>::random(m, n, 9).unwrap().with_ld(n + pad, nan_tc).unwrap()
        };
        let want = reference(&a, &b, &c0, ep).unwrap();
        let mut c = c0.clone();
        spmm(&a, &b, &mut c, ep).unwrap();
        let rep = compare(&c, &want, Tolerance::for_operands(&a, &b, &c0, ep));
        let what = format!("{}/{}/{} bs {bs} n {n} {ep:?}", TA::NAME, TB::NAME, TC::NAME);
        assert!(rep.passed() && rep.checked == m * n, "{what}: {rep}");
        for r in 0..m {
            let row = &c.as_slice()[r * c.ld()..];
            assert!(row[n..c.ld().min(row.len())].iter().all(|v| v.to_f64().is_nan()), "{what}: padding written");
        }
    }

    #[test]
    fn several_column_tiles_every_path() {
        // f16 B through the K x tile buffer, f32 C accumulated in place (default epilogue).
        check_wide::<f16, f16, f32>(64, 1024 + 37, Epilogue::default());
        // f16 C through the scratch accumulator and the full epilogue.
        check_wide::<f16, f16, f16>(64, 1024 + 37, Epilogue::new(-0.5, 0.75));
        // f32 A and B read in place (B through its leading dimension), alpha only.
        check_wide::<f32, f32, f32>(128, 512 + 88, Epilogue::new(2.0, 0.0));
        check_wide::<bf16, bf16, f32>(16, 4096 + 5, Epilogue::new(1.0, 1.0));
        check_wide::<f64, f64, f64>(32, 2048 + 1, Epilogue::new(1.0, -2.0));
        check_wide::<f16, f32, bf16>(32, 100, Epilogue::default());
    }

    /// `convert` against the element-wise conversion through f32, bit for bit (infinities, signed zeros,
    /// subnormals and values that round; NaN to NaN), on the common prefix of slices of unequal lengths.
    fn check_convert<S: Scalar, D: Scalar>(bits: impl Fn(u32) -> S) {
        let mut rng = crate::rng::Rng::new(11);
        let specials = [0x7fc0_1234u32, 0xffc0_0001, 0x7f80_0000, 0xff80_0000, 0x8000_0000, 0x0000_0001, 0x3f80_0001];
        let src: Vec<S> = specials.into_iter().chain((0..997).map(|_| rng.below(1 << 32) as u32)).map(&bits).collect();
        for dst_len in [src.len() - 3, src.len() + 5] {
            let poison = D::from_f64(7.0);
            let mut dst = vec![poison; dst_len];
            convert(&src, &mut dst);
            let what = format!("{} -> {}, {dst_len} out", S::NAME, D::NAME);
            for (i, (d, s)) in dst.iter().zip(&src).enumerate() {
                let want = D::from_f32(s.to_f32());
                // A NaN stays a NaN (the vector paths may keep a signalling NaN's payload that to_f32 quiets).
                if s.to_f64().is_nan() {
                    assert!(d.to_f64().is_nan(), "{what}: element {i}: {s:?} gave {d:?}");
                } else {
                    assert_eq!(bytemuck::bytes_of(d), bytemuck::bytes_of(&want), "{what}: element {i}: {s:?}");
                }
            }
            assert!(dst[src.len().min(dst_len)..].iter().all(|d| *d == poison), "{what}: past the prefix");
        }
    }

    #[test]
    fn conversions_match_the_element_wise_ones_bit_for_bit() {
        let f16_of = |b: u32| f16::from_bits(b as u16);
        let bf16_of = |b: u32| bf16::from_bits((b >> 16) as u16);
        check_convert::<f16, f32>(f16_of);
        check_convert::<bf16, f32>(bf16_of);
        check_convert::<f32, f32>(f32::from_bits);
        check_convert::<f32, f16>(f32::from_bits);
        check_convert::<f32, bf16>(f32::from_bits);
        check_convert::<f16, f16>(f16_of);
        check_convert::<f64, f32>(|b| f64::from(f32::from_bits(b)) * (1.0 + 1e-12));
        check_convert::<f32, f64>(f32::from_bits);
        // bf16 widens by a shift: a signalling NaN keeps its payload.
        let mut out = [0.0f32];
        convert(&[bf16::from_bits(0xff88)], &mut out);
        assert_eq!(out[0].to_bits(), 0xff88_0000);
    }

    /// `sgemm_strided` with a transposed operand against the same product with the operand copied transposed,
    /// and `None` (nothing written) for every slice one element too short or a `ldc` below `n`.
    #[test]
    fn strided_sgemm_reads_transposed_operands_and_checks_extents() {
        let (m, k, n) = (5, 7, 3);
        let a: Vec<f32> = (0..m * k).map(|i| (i % 11) as f32 - 4.0).collect();
        let bt: Vec<f32> = (0..n * k).map(|i| (i % 7) as f32 - 2.0).collect(); // B^T, n x k
        let b: Vec<f32> = (0..k * n).map(|i| bt[(i % n) * k + i / n]).collect(); // B, k x n
        let mut want = vec![0.0f32; m * n];
        sgemm((m, k, n), &a, k, &b, n, 0.0, &mut want, n).unwrap();
        let mut got = vec![f32::NAN; m * n];
        let (sa, sb) = (Strided { data: &a, rs: k, cs: 1 }, Strided { data: &bt, rs: 1, cs: k });
        sgemm_strided((m, k, n), sa, sb, 0.0, &mut got, n).unwrap();
        assert_eq!(got, want);
        let short_a = Strided { data: &a[..m * k - 1], ..sa };
        let short_b = Strided { data: &bt[..n * k - 1], ..sb };
        let mut c = vec![7.0f32; m * n];
        assert!(sgemm_strided((m, k, n), short_a, sb, 0.0, &mut c, n).is_none());
        assert!(sgemm_strided((m, k, n), sa, short_b, 0.0, &mut c, n).is_none());
        assert!(sgemm_strided((m, k, n), sa, sb, 0.0, &mut c[..m * n - 1], n).is_none());
        assert!(sgemm_strided((m, k, n), sa, sb, 0.0, &mut c, n - 1).is_none());
        assert!(sgemm_strided((m, k, n), sa, Strided { rs: usize::MAX, ..sb }, 0.0, &mut c, n).is_none());
        assert!(c.iter().all(|&v| v == 7.0));
    }

    #[test]
    fn zeros_of_a_propagate_inf_and_nan_of_b() {
        // One all-zero 16x16 block at (1, 0); B has an Inf at (5, 1) and a NaN at (9, 2).
        let a = Bsr::try_new(32, 16, 16, vec![0, 0, 1], vec![0], vec![f16::ZERO; 256]).unwrap();
        let mut b = Matrix::<f16>::zeros(16, 4).unwrap();
        b.set(5, 1, f16::INFINITY);
        b.set(9, 2, f16::NAN);
        for ep in [Epilogue::default(), Epilogue::new(2.0, 1.0)] {
            let mut c = Matrix::<f32>::zeros(32, 4).unwrap();
            spmm(&a, &b, &mut c, ep).unwrap();
            for r in 0..32 {
                let covered = r >= 16;
                assert_eq!(c.get(r, 0), 0.0);
                assert_eq!(c.get(r, 1).is_nan(), covered, "row {r} {ep:?}");
                assert_eq!(c.get(r, 2).is_nan(), covered, "row {r} {ep:?}");
                assert_eq!(c.get(r, 3), 0.0);
            }
        }
    }
}
