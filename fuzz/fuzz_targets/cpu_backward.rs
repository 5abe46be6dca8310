//! The backward products on the CPU, `A^T @ B` (`cpu::spmm_t` and its oracle `cpu::reference_t`:
//! `C = alpha * (A^T @ B) + beta * C`) and SDDMM (`cpu::sddmm` and its oracle `cpu::reference_sddmm`:
//! `values = alpha * (X @ Y^T) + beta * values` at A's stored blocks), and the transposed index
//! (`format::BsrTranspose`), on small structures with arbitrary, possibly mismatched or empty shapes (M, K, N
//! from 0; N across `spmm_t`'s column tiles; block rows longer than one SDDMM work item; K across SDDMM's slices
//! of 256), leading dimensions with NaN-poisoned padding, block sizes 16 to 128, element types f16/bf16/f32/f64
//! and arbitrary alpha/beta.
//!
//! Properties:
//! - shapes that do not fit are `Error::ShapeMismatch` naming the documented shapes: for `A^T @ B`
//!   (`B.rows != M`, `C.rows != K`, `C.cols != B.cols`) A^T's shape `(K, M)`, B's and C's, from `spmm_t` and
//!   `reference_t`; for SDDMM (`X.rows != M`, `Y.rows != N`, `X.cols != Y.cols`, the pattern `M x N`) X's shape,
//!   Y^T's `(Y.cols, Y.rows)` and the pattern's, from `sddmm` and `reference_sddmm`; an epilogue with an
//!   activation is `Error::InvalidArgument` named `ep` from all four; a transposed index of another structure
//!   (another block set of the same shape, an extra block row or column, another block size, A^T's own index,
//!   a block moved to the next block row: the same `col_idx` with another `row_ptr`)
//!   is `InvalidArgument` named `at` from `spmm_t`, and an index is accepted exactly when its structure (shape,
//!   block size, `row_ptr`, `col_idx`) is A's; where several of these apply, the error is one of them. On any
//!   error the output is bit-for-bit unchanged (C's padding included; SDDMM's values, and its structure);
//! - values are small integers times powers of two, so every product, sum and epilogue step is exact in f32
//!   and f64: `spmm_t`'s C and `sddmm`'s values must equal the independent f64 computation done here (A's
//!   elements from its parts, each stored block's block row found from `row_ptr` here, B, C, X and Y read
//!   through their leading dimensions) rounded once to the output type, and `reference_t` / `reference_sddmm`
//!   must equal it exactly (the latter with the pattern's structure); both also pass the library's tolerance path
//!   (`compare` with `Tolerance::for_operands_t`, `compare_values` with `Tolerance::for_sddmm`);
//! - with beta == 0 neither the backends nor the oracles read the output (a NaN-poisoned C or values give the
//!   finite results above); `spmm_t` never writes C's padding; `sddmm` leaves the structure as it was;
//! - `BsrTranspose::new` (of A and of the other structures): `col_ptr` has `block_cols + 1` entries, starts at 0,
//!   never decreases and ends at nnzb; `perm` is a permutation of `0..nnzb`; `row_idx` is strictly increasing
//!   within each block column; entry `e` of block column `bc` is exactly stored block `perm[e]` of A, whose block
//!   row (from `row_ptr`) is `row_idx[e]` and block column is `bc`; the accessors (`nnzb`, the shape,
//!   `block_col_range` in and out of range, `max_col_length`, `into_parts`) agree; `from_structure` of A's parts
//!   gives the same index; the index of the index (`from_structure` of `(cols, rows, bs, col_ptr, row_idx)`)
//!   gives A's `row_ptr` and `col_idx` back with the inverse permutation, and A^T built as a `Bsr` from the index
//!   (A's blocks through `perm`, transposed) is valid, is A's dense transpose bit for bit, and its own index is
//!   the index of the index;
//! - `BsrTranspose::from_structure` of a changed, often invalid structure (a pointer or column index changed,
//!   one added or removed, another block size, another shape) is refused (`Error::InvalidBsr`) exactly when
//!   `Bsr::try_new` refuses the same structure with values of the right length, with the same `BsrError`;
//!   accepted, it satisfies the properties above and equals `BsrTranspose::new` of that `Bsr`.
#![no_main]

use arbitrary::Arbitrary;
use sparsek::check::{Tolerance, compare, compare_values};
use sparsek::format::BsrTranspose;
use sparsek::{Activation, Bsr, Epilogue, Error, Matrix, Scalar, bf16, cpu, f16};
use sparsek_fuzz::{Rng, at, generated, padded, small};

const SCALARS: [f32; 10] = [0.0, 1.0, -1.0, 0.5, 2.0, -0.75, 1.5, -2.0, 0.25, -0.0];

/// Largest product (multiply-adds of the f64 oracles) a run does, so that the fuzzer stays fast.
const WORK: usize = 1 << 20;

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Extent {
    /// What the product needs.
    Fit,
    /// What it needs plus (or minus) a little, at least 0.
    Near(i8),
    /// Anything small (usually a mismatch).
    Other(u8),
}

impl Extent {
    fn get(self, fit: usize) -> usize {
        match self {
            Extent::Fit => fit,
            Extent::Near(d) => (fit as i64 + i64::from(d % 17)).max(0) as usize,
            Extent::Other(k) => k as usize % 70,
        }
    }
}

/// The transposed index handed to `spmm_t`.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Index {
    /// `BsrTranspose::new(&A)`.
    Own,
    /// `BsrTranspose::from_structure` of A's parts.
    FromStructure,
    /// Another structure of A's shape: density in 1/8 and a seed (sometimes A's structure again).
    Other(u8, u64),
    /// A's structure changed: an extra block row, an extra block column, A^T's index, another block size, a
    /// block moved to the next block row (same `col_idx`, another `row_ptr`).
    Reshaped(u8),
}

#[derive(Arbitrary, Debug)]
struct Input {
    types: u8,
    bs: u8,
    block_rows: u8,
    block_cols: u8,
    /// The shapes, by `mode % 32` (the large ones are rare, the fuzzer's speed being mostly theirs): 28 and 29,
    /// more block columns than one SDDMM work item holds (`512 / bs`), few block rows; 30, SDDMM's K from 255 to
    /// 600 (across its slices of 256); 31, A one block and N around the width of `spmm_t`'s column tiles
    /// (`65536 / bs`); else small shapes.
    mode: u8,
    /// Some: `generate_int` (pattern, density in 1/8, seed, max_abs); None: blocks from `masks`, then `density`.
    generated: Option<(u8, u8, u64, u8)>,
    masks: Vec<u8>,
    density: u8,
    a_seed: u64,
    /// Some: A's structure changed (what, where, value), often invalid, for `BsrTranspose::from_structure`.
    corrupt: Option<(u8, u16, u32)>,
    alpha: u8,
    beta: u8,
    /// Activation (mostly none): anything but the identity is refused.
    act: u8,
    /// Fill the output with NaN when beta == 0 (it must not be read).
    poison: bool,
    // A^T @ B: B is M x N, C is K x N.
    n: u8,
    b_rows: Extent,
    b_pad: u8,
    c_rows: Extent,
    c_cols: Extent,
    c_pad: u8,
    b_seed: u64,
    c_seed: u64,
    index: Index,
    // SDDMM: X is M x K', Y is N' x K' with the pattern M x N' (N' = A's K).
    k: u8,
    x_rows: Extent,
    x_cols: Extent,
    y_rows: Extent,
    x_pad: u8,
    y_pad: u8,
    x_seed: u64,
    y_seed: u64,
    v_seed: u64,
}

fn bits<T: Scalar>(v: &[T]) -> Vec<u8> {
    bytemuck::cast_slice(v).to_vec()
}

/// The dense form (row-major, `rows * cols`) of a BSR matrix, from its parts (no conversion: compared bit for
/// bit).
fn dense_of<T: Scalar>(a: &Bsr<T>) -> Vec<T> {
    let (cols, bs) = (a.cols(), a.block_size());
    let mut d = vec![T::from_f64(0.0); a.rows() * cols];
    for br in 0..a.row_ptr().len().saturating_sub(1) {
        for p in a.row_ptr()[br] as usize..a.row_ptr()[br + 1] as usize {
            let c0 = a.col_idx()[p] as usize * bs;
            for (e, v) in a.values()[p * bs * bs..(p + 1) * bs * bs].iter().enumerate() {
                d[(br * bs + e / bs) * cols + c0 + e % bs] = *v;
            }
        }
    }
    d
}

/// The block row of each stored block, walking `row_ptr`.
fn block_rows_of(row_ptr: &[u32]) -> Vec<usize> {
    let mut out = Vec::new();
    for (br, w) in row_ptr.windows(2).enumerate() {
        out.extend(std::iter::repeat_n(br, (w[1] - w[0]) as usize));
    }
    out
}

/// A structure of `br x bcn` blocks: row r from `masks[r]` when present (and `bcn <= 8`), else each block with
/// probability `density / 8`.
fn draw_structure(br: usize, bcn: usize, masks: &[u8], density: u8, rng: &mut Rng) -> (Vec<u32>, Vec<u32>) {
    let (mut row_ptr, mut col_idx) = (vec![0u32], Vec::new());
    for r in 0..br {
        match masks.get(r) {
            Some(&mask) if bcn <= 8 => col_idx.extend((0..bcn as u32).filter(|&c| mask >> c & 1 == 1)),
            _ => col_idx.extend((0..bcn as u32).filter(|_| rng.below(8) < (density % 9) as usize)),
        }
        row_ptr.push(col_idx.len() as u32);
    }
    (row_ptr, col_idx)
}

/// The structural properties of the transposed index `t` of the structure `(rows, cols, bs, row_ptr, col_idx)`.
fn check_transpose(rows: usize, cols: usize, bs: usize, row_ptr: &[u32], col_idx: &[u32], t: &BsrTranspose) {
    let (bcn, nnzb) = (cols / bs, col_idx.len());
    assert_eq!((t.rows(), t.cols(), t.block_size(), t.block_rows(), t.block_cols()), (rows, cols, bs, rows / bs, bcn));
    assert_eq!(t.nnzb(), nnzb);
    let (cp, ri, perm) = (t.col_ptr(), t.row_idx(), t.perm());
    assert_eq!((cp.len(), ri.len(), perm.len()), (bcn + 1, nnzb, nnzb), "index lengths");
    assert!(cp[0] == 0 && cp[bcn] as usize == nnzb, "col_ptr {cp:?} does not run from 0 to {nnzb}");
    assert!(cp.windows(2).all(|w| w[0] <= w[1]), "col_ptr decreases: {cp:?}");
    let mut seen = vec![false; nnzb];
    for &p in perm {
        assert!((p as usize) < nnzb && !seen[p as usize], "perm {perm:?} is not a permutation of 0..{nnzb}");
        seen[p as usize] = true;
    }
    let brow = block_rows_of(row_ptr);
    let mut longest = 0;
    for bc in 0..bcn {
        let range = cp[bc] as usize..cp[bc + 1] as usize;
        assert_eq!(t.block_col_range(bc), range, "block_col_range({bc})");
        longest = longest.max(range.len());
        assert!(ri[range.clone()].windows(2).all(|w| w[0] < w[1]), "row_idx not increasing in block column {bc}");
        for e in range {
            let p = perm[e] as usize;
            assert_eq!((ri[e] as usize, bc), (brow[p], col_idx[p] as usize), "entry {e} is not stored block {p}");
        }
    }
    assert_eq!(t.block_col_range(bcn), 0..0);
    assert_eq!(t.block_col_range(usize::MAX), 0..0);
    assert_eq!(t.max_col_length(), longest);
    let _ = format!("{t:?}");
    let parts = t.clone().into_parts();
    assert!(parts == (rows, cols, bs, cp.to_vec(), ri.to_vec(), perm.to_vec()), "into_parts");
    // The index of the index: A's structure back, with the inverse permutation.
    let tt = BsrTranspose::from_structure(cols, rows, bs, cp, ri).expect("the index is a valid structure of A^T");
    assert!(tt.col_ptr() == row_ptr && tt.row_idx() == col_idx, "the index of the index is not A's structure");
    assert!(tt.perm().iter().enumerate().all(|(i, &j)| perm[j as usize] as usize == i), "perm not inverted");
}

/// What an error may be.
#[derive(Debug, PartialEq)]
enum Fault {
    Shape((usize, usize), (usize, usize), (usize, usize)),
    Ep,
    At,
}

fn expect_fault(what: &str, e: Error, faults: &[Fault]) {
    let got = match &e {
        Error::ShapeMismatch { a, b, c } => Fault::Shape(*a, *b, *c),
        Error::InvalidArgument { name: "ep", .. } => Fault::Ep,
        Error::InvalidArgument { name: "at", .. } => Fault::At,
        _ => panic!("{what}: {e:?}, expected one of {faults:?}"),
    };
    assert!(faults.contains(&got), "{what}: {e:?}, expected one of {faults:?}");
}

fn run<T1: Scalar, T2: Scalar, T3: Scalar>(t: &Input) {
    let bs = [16usize, 16, 32, 32, 64, 128][t.bs as usize % 6];
    let max_blocks = match bs {
        16 => 5,
        32 => 4,
        64 => 3,
        _ => 2,
    };
    let (wide, long_k, tiles) = (matches!(t.mode % 32, 28 | 29), t.mode % 32 == 30, t.mode % 32 == 31);
    let (br, bcn) = if wide {
        (t.block_rows as usize % 3, 512 / bs + 1 + t.block_cols as usize % 3)
    } else if tiles {
        (1, 1)
    } else {
        (t.block_rows as usize % (max_blocks + 1), t.block_cols as usize % (max_blocks + 1))
    };
    let (m, k) = (br * bs, bcn * bs);
    let scale = [0.25, 0.5, 1.0][(t.a_seed % 3) as usize];

    // A, from masks or the generator.
    let a: Bsr<T1> = match t.generated {
        Some(g) => generated(g, (m, k, bs)),
        None => {
            let mut rng = Rng::new(t.a_seed);
            let (row_ptr, col_idx) = draw_structure(br, bcn, &t.masks, t.density, &mut rng);
            let values = (0..col_idx.len() * bs * bs).map(|_| T1::from_f64(small(&mut rng, 4, scale))).collect();
            Bsr::try_new(m, k, bs, row_ptr, col_idx, values).expect("valid BSR")
        }
    };
    let nnzb = a.nnzb();
    let ad = dense_of(&a);

    // The transposed index of A.
    let own = BsrTranspose::new(&a).expect("BsrTranspose::new of a valid Bsr");
    check_transpose(m, k, bs, a.row_ptr(), a.col_idx(), &own);
    let from_parts = BsrTranspose::from_structure(m, k, bs, a.row_ptr(), a.col_idx()).expect("from_structure of A");
    assert!(from_parts == own, "from_structure of A's parts differs from new(A)");
    // A^T as a Bsr, from the index: A's blocks through perm, transposed.
    let bsq = bs * bs;
    let mut vt = Vec::with_capacity(nnzb * bsq);
    for &p in own.perm() {
        let blk = &a.values()[p as usize * bsq..(p as usize + 1) * bsq];
        vt.extend((0..bsq).map(|e| blk[(e % bs) * bs + e / bs]));
    }
    let a_t = Bsr::try_new(k, m, bs, own.col_ptr().to_vec(), own.row_idx().to_vec(), vt).expect("A^T is valid");
    let dt = dense_of(&a_t);
    for r in 0..m {
        for c in 0..k {
            let same = bytemuck::bytes_of(&dt[c * m + r]) == bytemuck::bytes_of(&ad[r * k + c]);
            assert!(same, "A^T({c}, {r}) != A({r}, {c})");
        }
    }
    let tt = BsrTranspose::new(&a_t).expect("index of A^T");
    let tt2 = BsrTranspose::from_structure(k, m, bs, own.col_ptr(), own.row_idx()).expect("index of the index");
    assert!(tt == tt2, "the index of A^T differs from the index of the index");

    // from_structure of a changed (often invalid) structure: refused exactly when Bsr::try_new refuses it (values
    // of the right length), with the same BsrError; accepted, it is the index of that Bsr.
    if let Some((what, at_, v)) = t.corrupt {
        let (mut rows, mut cols, mut cbs) = (m, k, bs);
        let (mut rp, mut ci) = (a.row_ptr().to_vec(), a.col_idx().to_vec());
        let v = v as usize;
        match what % 6 {
            0 => {
                let i = at_ as usize % rp.len();
                rp[i] = (v % (nnzb + 3)) as u32;
            }
            1 if !ci.is_empty() => {
                let i = at_ as usize % ci.len();
                ci[i] = (v % (bcn + 2)) as u32;
            }
            2 if v % 2 == 0 => drop(rp.pop()),
            2 => rp.push((v / 2 % (nnzb + 2)) as u32),
            3 => ci.insert(at_ as usize % (ci.len() + 1), (v % (bcn + 1)) as u32),
            4 => cbs = [0, 8, 24, 48, 16, 32, 64, 128][v % 8],
            _ => {
                rows += v % 3 * 8;
                cols += v / 3 % 3 * 8;
            }
        }
        let got = BsrTranspose::from_structure(rows, cols, cbs, &rp, &ci);
        let len = ci.len() * cbs * cbs;
        if len <= 1 << 18 {
            let want = Bsr::<T1>::try_new(rows, cols, cbs, rp.clone(), ci.clone(), vec![T1::from_f64(0.0); len]);
            match (got, want) {
                (Ok(ix), Ok(b)) => {
                    check_transpose(rows, cols, cbs, &rp, &ci, &ix);
                    assert!(ix == BsrTranspose::new(&b).expect("index"), "from_structure differs from new");
                }
                (Err(Error::InvalidBsr(e)), Err(w)) => assert_eq!(e, w, "from_structure's error"),
                (got, want) => panic!("from_structure: {got:?}, Bsr::try_new: {want:?}"),
            }
        }
    }

    let (alpha, beta) = (SCALARS[t.alpha as usize % 10], SCALARS[t.beta as usize % 10]);
    let act = match t.act % 8 {
        5 => Activation::Relu,
        6 => Activation::GeluTanh,
        7 => Activation::Silu,
        _ => Activation::Identity,
    };
    let ep = Epilogue::new(alpha, beta).with_activation(act);
    let (alpha, beta) = (f64::from(alpha), f64::from(beta));
    let poison = t.poison && beta == 0.0;

    // ---- A^T @ B.
    // N from 0 to 40, or around the width of spmm_t's column tiles (65536 / bs), from 2 columns short of one tile
    // to 3 past it (A is one block: at most 128 * 128 * 515 multiply-adds).
    let (n, work) = if tiles { (65536 / bs - 2 + t.n as usize % 6, 9 * WORK) } else { (t.n as usize % 41, WORK) };
    let mb = t.b_rows.get(m);
    let (kc, nc) = (t.c_rows.get(k), t.c_cols.get(n));
    if mb * n + kc * nc + m * k * n <= work {
        // The index handed over: A's, or another structure's (Some((rows, cols, bs, row_ptr, col_idx))).
        let other: Option<(usize, usize, usize, Vec<u32>, Vec<u32>)> = match t.index {
            Index::Own | Index::FromStructure => None,
            Index::Other(d, seed) => {
                let (rp, ci) = draw_structure(br, bcn, &[], d, &mut Rng::new(seed));
                Some((m, k, bs, rp, ci))
            }
            Index::Reshaped(r) => {
                let (mut rp, mut ci) = (a.row_ptr().to_vec(), a.col_idx().to_vec());
                Some(match r % 5 {
                    0 => {
                        rp.push(nnzb as u32);
                        (m + bs, k, bs, rp, ci)
                    }
                    1 => (m, k + bs, bs, rp, ci),
                    4 => {
                        // The same col_idx, one block moved from the end of a block row to the start of the next
                        // (where that keeps the structure valid): only row_ptr differs.
                        let movable = |b: usize| {
                            b + 1 < br
                                && rp[b] < rp[b + 1]
                                && (rp[b + 1] == rp[b + 2] || ci[rp[b + 1] as usize - 1] < ci[rp[b + 1] as usize])
                        };
                        if let Some(b) = (0..br).map(|i| (i + r as usize / 5) % br.max(1)).find(|&b| movable(b)) {
                            rp[b + 1] -= 1;
                        }
                        (m, k, bs, rp, ci)
                    }
                    2 => (k, m, bs, own.col_ptr().to_vec(), own.row_idx().to_vec()),
                    _ => {
                        // Another block size: bs / 2 where it exists, each block the top-left one of its 2x2.
                        if bs > 16 {
                            let mut rp2 = vec![0u32];
                            for w in rp.windows(2) {
                                rp2.push(rp2[rp2.len() - 1] + (w[1] - w[0]));
                                rp2.push(rp2[rp2.len() - 1]);
                            }
                            ci.iter_mut().for_each(|c| *c *= 2);
                            (m, k, bs / 2, rp2, ci)
                        } else {
                            (m, k, 32, vec![0; m / 32 + 1], vec![])
                        }
                    }
                })
            }
        };
        let (index, index_is_a) = match (&other, t.index) {
            (None, Index::Own) => (own.clone(), true),
            (None, _) => (from_parts.clone(), true),
            (Some((rows, cols, obs, rp, ci)), _) => {
                // An invalid reshaping (32 does not divide the shape) is refused like Bsr::try_new: use A's.
                match BsrTranspose::from_structure(*rows, *cols, *obs, rp, ci) {
                    Ok(ix) => {
                        check_transpose(*rows, *cols, *obs, rp, ci, &ix);
                        let same = (*rows, *cols, *obs) == (m, k, bs) && rp == a.row_ptr() && ci == a.col_idx();
                        (ix, same)
                    }
                    Err(Error::InvalidBsr(_)) if *obs == 32 && bs == 16 => (own.clone(), true),
                    Err(e) => panic!("from_structure of a valid structure {other:?}: {e}"),
                }
            }
        };

        let mut brng = Rng::new(t.b_seed);
        let b: Matrix<T2> = padded(mb, n, t.b_pad as usize % 4, |_, _| small(&mut brng, 4, scale));
        let mut crng = Rng::new(t.c_seed);
        let c0: Matrix<T3> =
            padded(kc, nc, t.c_pad as usize % 4, |_, _| if poison { f64::NAN } else { small(&mut crng, 16, 0.25) });
        let mut faults = Vec::new();
        if mb != m || kc != k || nc != n {
            faults.push(Fault::Shape((k, m), (mb, n), (kc, nc)));
        }
        if act != Activation::Identity {
            faults.push(Fault::Ep);
        }
        let oracle_faults = faults.len();
        if !index_is_a {
            faults.push(Fault::At);
        }

        let mut c = c0.clone();
        let got = cpu::spmm_t(&a, &index, &b, &mut c, ep);
        let want = cpu::reference_t(&a, &b, &c0, ep);
        if !faults.is_empty() {
            expect_fault("spmm_t", got.expect_err("spmm_t accepted a bad argument"), &faults);
            assert!(bits(c.as_slice()) == bits(c0.as_slice()), "spmm_t changed C on error");
        } else {
            got.unwrap_or_else(|e| panic!("spmm_t of good arguments: {e}"));
        }
        if oracle_faults > 0 {
            let e = want.expect_err("reference_t accepted a bad argument");
            expect_fault("reference_t", e, &faults[..oracle_faults]);
        } else {
            let want = want.unwrap_or_else(|e| panic!("reference_t of good arguments: {e}"));
            assert_eq!((want.rows(), want.cols()), (k, n));
            // Each nonzero A(r, kk) of the stored blocks (block rows from row_ptr) times row r of B, added to row
            // kk of A^T @ B (every sum is exact, so the order does not matter).
            let bd: Vec<f64> = (0..m * n).map(|i| at(&b, i / n, i % n)).collect();
            let mut exact = vec![0.0f64; k * n];
            for (p, &bri) in block_rows_of(a.row_ptr()).iter().enumerate() {
                let c0 = a.col_idx()[p] as usize * bs;
                for (e, v) in a.values()[p * bsq..(p + 1) * bsq].iter().enumerate() {
                    let (av, r, kk) = (v.to_f64(), bri * bs + e / bs, c0 + e % bs);
                    if av != 0.0 {
                        let b_row = &bd[r * n..(r + 1) * n];
                        exact[kk * n..(kk + 1) * n].iter_mut().zip(b_row).for_each(|(x, bv)| *x += av * bv);
                    }
                }
            }
            for kk in 0..k {
                for j in 0..n {
                    let v = alpha * exact[kk * n + j];
                    exact[kk * n + j] = if beta == 0.0 { v } else { v + beta * at(&c0, kk, j) };
                    let e = exact[kk * n + j];
                    assert!(want.get(kk, j) == e, "reference_t ({kk}, {j}) = {}, exact {e}", want.get(kk, j));
                }
            }
            if faults.is_empty() {
                for kk in 0..k {
                    for j in 0..n {
                        let (g, w) = (at(&c, kk, j), T3::from_f64(exact[kk * n + j]).to_f64());
                        assert!(g == w, "spmm_t C({kk}, {j}) = {g}, expected {w} (exact {})", exact[kk * n + j]);
                    }
                }
                let ld = c.ld();
                for (i, (now, was)) in c.as_slice().iter().zip(c0.as_slice()).enumerate() {
                    let same = bytemuck::bytes_of(now) == bytemuck::bytes_of(was);
                    assert!(i % ld < n || same, "spmm_t wrote C's padding at {i}");
                }
                let rep = compare(&c, &want, Tolerance::for_operands_t(&a, &b, &c0, ep));
                assert!(rep.passed() && rep.checked == k * n, "compare (A^T @ B): {rep}");
            }
        }
    }

    // ---- SDDMM into A's pattern (M x K here): X is M x K2, Y is K x K2.
    let k2 = if long_k { [255, 256, 257, 300, 511, 512, 513, 600][t.k as usize % 8] } else { t.k as usize % 41 };
    let k2 = if nnzb * bsq * k2 > 2 * WORK { t.k as usize % 41 } else { k2 };
    let (xr, xc, yr) = (t.x_rows.get(m), t.x_cols.get(k2), t.y_rows.get(k));
    if xr * xc + yr * k2 > WORK {
        return;
    }
    let mut xrng = Rng::new(t.x_seed);
    let x: Matrix<T2> = padded(xr, xc, t.x_pad as usize % 4, |_, _| small(&mut xrng, 4, scale));
    let mut yrng = Rng::new(t.y_seed);
    let y: Matrix<T1> = padded(yr, k2, t.y_pad as usize % 4, |_, _| small(&mut yrng, 4, scale));
    let mut vrng = Rng::new(t.v_seed);
    let v0: Vec<T3> =
        (0..nnzb * bsq).map(|_| T3::from_f64(if poison { f64::NAN } else { small(&mut vrng, 16, 0.25) })).collect();
    let out0 = Bsr::try_new(m, k, bs, a.row_ptr().to_vec(), a.col_idx().to_vec(), v0).expect("the pattern");
    let mut faults = Vec::new();
    if xr != m || yr != k || xc != k2 {
        faults.push(Fault::Shape((xr, xc), (k2, yr), (m, k)));
    }
    if act != Activation::Identity {
        faults.push(Fault::Ep);
    }
    let mut out = out0.clone();
    let got = cpu::sddmm(&x, &y, &mut out, ep);
    assert!(
        out.row_ptr() == out0.row_ptr() && out.col_idx() == out0.col_idx() && (out.rows(), out.cols()) == (m, k),
        "sddmm changed the structure"
    );
    let want = cpu::reference_sddmm(&x, &y, &out0, ep);
    if !faults.is_empty() {
        expect_fault("sddmm", got.expect_err("sddmm accepted a bad argument"), &faults);
        assert!(bits(out.values()) == bits(out0.values()), "sddmm changed the values on error");
        expect_fault("reference_sddmm", want.expect_err("reference_sddmm accepted a bad argument"), &faults);
        return;
    }
    got.unwrap_or_else(|e| panic!("sddmm of good arguments: {e}"));
    let want = want.unwrap_or_else(|e| panic!("reference_sddmm of good arguments: {e}"));
    assert!(
        (want.rows(), want.cols(), want.block_size()) == (m, k, bs)
            && want.row_ptr() == a.row_ptr()
            && want.col_idx() == a.col_idx(),
        "reference_sddmm: not the pattern's structure"
    );
    // X and Y in f64, each converted once.
    let xd: Vec<f64> = (0..m * k2).map(|i| at(&x, i / k2, i % k2)).collect();
    let yd: Vec<f64> = (0..k * k2).map(|i| at(&y, i / k2, i % k2)).collect();
    let brow = block_rows_of(a.row_ptr());
    for (i, &bri) in brow.iter().enumerate() {
        let bc = a.col_idx()[i] as usize;
        for e in 0..bsq {
            let (r, c) = (bri * bs + e / bs, bc * bs + e % bs);
            let s: f64 = xd[r * k2..(r + 1) * k2].iter().zip(&yd[c * k2..(c + 1) * k2]).map(|(a, b)| a * b).sum();
            let v = alpha * s;
            let exact = if beta == 0.0 { v } else { v + beta * out0.values()[i * bsq + e].to_f64() };
            let w = want.values()[i * bsq + e];
            assert!(w == exact, "reference_sddmm block {i} element {e} = {w}, exact {exact}");
            let (g, w) = (out.values()[i * bsq + e].to_f64(), T3::from_f64(exact).to_f64());
            assert!(g == w, "sddmm block {i} ({bri}, {bc}) element {e} = {g}, expected {w} (exact {exact})");
        }
    }
    let rep = compare_values(&out, &want, Tolerance::for_sddmm(&x, &y, &out0, ep));
    assert!(rep.passed() && rep.checked == nnzb * bsq, "compare_values (SDDMM): {rep}");
}

sparsek_fuzz::target!(|t: Input| {
    match t.types % 8 {
        0 => run::<f16, f16, f32>(&t),
        1 => run::<f16, f16, f16>(&t),
        2 => run::<bf16, bf16, f32>(&t),
        3 => run::<bf16, bf16, bf16>(&t),
        4 => run::<f32, f32, f32>(&t),
        5 => run::<f64, f64, f64>(&t),
        6 => run::<f16, f32, bf16>(&t),
        _ => run::<f32, f16, f64>(&t),
    }
});
