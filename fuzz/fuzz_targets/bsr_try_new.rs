//! `Bsr::try_new` and every conversion of the format module, against oracles written here.
//!
//! Four kinds of input (`Op`):
//! - `TryNew`: a BSR description (block size, shape, row_ptr, col_idx, values) built valid and then mutated.
//!   An independent validity oracle implementing the documented check order (block size, multiples, counts
//!   fitting u32, row_ptr length, start, nondecreasing, end, column range, column order, values length) must
//!   give exactly the same `BsrError` (variant and numbers), or Ok when the library accepts. `Bsr::empty` is Ok
//!   exactly when the shape is. On Ok, every accessor agrees with the parts, and every conversion round-trips
//!   against a dense oracle built here: `to_dense`; `from_dense` (the stored blocks kept, through a padded,
//!   NaN-poisoned copy: the padding is never read) and its `BlockView`s; `from_dense_threshold`; `from_coo`
//!   (shuffled entries plus explicit zeros, which add blocks); `from_csr` (rows shuffled); `convert` to f64
//!   (exact), f16 and bf16 (`NonFinite` exactly when a finite value overflows, naming it; else rounded once);
//!   `into_parts`; the Matrix Market writer and reader (finite values); `sprs` CSR and CSC.
//! - `Coo`: `from_coo` with arbitrary entries (some outside the shape, duplicates, NaN/Inf, values whose sum
//!   overflows f32): the shape errors, then `EntryOutOfRange` naming the first bad entry, then `NonFinite`
//!   exactly when a sum of finite entries overflows; else blocks and f64 sums (in input order) as the oracle.
//! - `Csr`: `from_csr` with arbitrary indptr/indices/data: the CSR errors in their documented order, then as
//!   `Coo` (the entry index being the CSR position).
//! - `Dense`: `from_dense_threshold` and `from_dense` on arbitrary small dense shapes, multiples of `bs` or not.
//!
//! Sizes are bounded so that no Ok case allocates more than a few MB; shapes that must be refused are passed
//! whatever their size (they must be refused before anything is allocated).
#![no_main]

use std::collections::BTreeMap;

use arbitrary::Arbitrary;
use sparsek::format::{BlockView, MatrixMarket};
use sparsek::{Bsr, BsrError, Error, Matrix, bf16, f16};
use sparsek_fuzz::{Rng, SPECIAL_F32, same, same_bits_f32};

/// `$a.convert::<$t>()` (f16 or bf16) of a matrix holding `$values` (f32, blocks of `$bs`): each value rounded once to
/// nearest even (`$t::from_f32` is exact-to-nearest from an f32), or `NonFinite` at the first finite value that
/// overflows.
macro_rules! check_narrowed {
    ($t:ident, $a:expr, $values:expr, $bs:expr) => {{
        let (name, bs) = (stringify!($t), $bs);
        let bad = $values.iter().position(|v| v.is_finite() && $t::from_f32(*v).is_infinite());
        match ($a.convert::<$t>(), bad) {
            (Ok(h), None) => {
                for (x, y) in h.values().iter().zip($values) {
                    let w = $t::from_f32(*y);
                    assert!(
                        x.to_bits() == w.to_bits() || (x.is_nan() && w.is_nan()),
                        "convert::<{name}>: {y:e} ({:#010x}) became {x:e} ({:#06x}), round-to-nearest-even gives {w:e} ({:#06x})",
                        y.to_bits(),
                        x.to_bits(),
                        w.to_bits()
                    );
                }
            }
            (Err(Error::NonFinite { index, .. }), Some(i)) => assert_eq!(index, (i / (bs * bs), i % (bs * bs))),
            (got, want) => panic!("convert::<{name}>: {:?}, first overflow at {want:?}", got.err()),
        }
    }};
}

/// Largest `rows * cols` for which dense forms are built.
const MAX_DENSE: usize = 1 << 16;
/// Largest number of stored values generated for `TryNew`.
const MAX_VALUES: usize = 1 << 16;
/// Largest number of block rows for which a conversion that allocates `row_ptr` is run.
const MAX_BLOCK_ROWS: usize = 1 << 16;
const SUPPORTED: [usize; 4] = [16, 32, 64, 128];

#[derive(Arbitrary, Debug, Clone, Copy)]
enum BsSel {
    B16,
    B32,
    B64,
    B128,
    Other(u16),
}

impl BsSel {
    fn get(self) -> usize {
        match self {
            BsSel::B16 => 16,
            BsSel::B32 => 32,
            BsSel::B64 => 64,
            BsSel::B128 => 128,
            BsSel::Other(n) => n as usize,
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Dim {
    /// `bs * (k % 7)`.
    Blocks(u8),
    /// Anything below 300.
    Small(u16),
    /// Around the u32 limits of block counts, and usize::MAX.
    Edge(u8),
    Any(u64),
}

impl Dim {
    fn get(self, bs: usize) -> usize {
        let u = u32::MAX as usize;
        match self {
            Dim::Blocks(k) => bs.saturating_mul(k as usize % 7),
            Dim::Small(n) => n as usize % 300,
            Dim::Edge(i) => [
                bs.saturating_mul(u),
                bs.saturating_mul(u + 1),
                usize::MAX,
                usize::MAX / bs.max(1) * bs,
                bs.saturating_mul(MAX_BLOCK_ROWS + 1),
                u + 1,
            ][i as usize % 6],
            Dim::Any(x) => x as usize,
        }
    }
}

/// How stored values are drawn.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Values {
    /// Small integers times powers of two: sums are exact.
    SmallInts(u64),
    /// Any f32 bit pattern.
    Bits(u64),
    /// Mostly from `SPECIAL_F32`.
    Special(u64),
}

impl Values {
    fn draw(self, n: usize) -> Vec<f32> {
        let (mode, seed) = match self {
            Values::SmallInts(s) => (0, s),
            Values::Bits(s) => (1, s),
            Values::Special(s) => (2, s),
        };
        let mut rng = Rng::new(seed);
        (0..n)
            .map(|_| match mode {
                0 => rng.int(8) as f32 * [0.25f32, 1.0, 4.0][rng.below(3)],
                1 => f32::from_bits(rng.next_u64() as u32),
                _ => {
                    if rng.below(4) == 0 {
                        rng.int(4) as f32
                    } else {
                        SPECIAL_F32[rng.below(SPECIAL_F32.len())]
                    }
                }
            })
            .collect()
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Mutation {
    RowPtrSet(u8, u32),
    RowPtrAdd(u8, i8),
    RowPtrPush(u32),
    RowPtrPop,
    ColSet(u8, u32),
    ColSwap(u8),
    ColPush(u32),
    ColPop,
    ValuesGrow(u8),
    ValuesShrink(u8),
}

#[derive(Arbitrary, Debug)]
struct TryNew {
    bs: BsSel,
    rows: Dim,
    cols: Dim,
    /// Block-column bitmask of each block row.
    masks: Vec<u64>,
    mutations: Vec<Mutation>,
    values: Values,
    threshold: u8,
    /// Explicit zero entries added to the COO list (may create blocks).
    extra_zeros: Vec<(u16, u16)>,
    seed: u64,
    pad: u8,
}

#[derive(Arbitrary, Debug)]
struct Coo {
    bs: BsSel,
    rows: Dim,
    cols: Dim,
    /// (row, col, value code): see `coo_value`.
    entries: Vec<(u16, u16, i8)>,
}

#[derive(Arbitrary, Debug)]
struct Csr {
    bs: BsSel,
    rows: Dim,
    cols: Dim,
    /// Entries per row (a valid indptr), unless `indptr` is given.
    lens: Vec<u8>,
    indptr: Option<Vec<u16>>,
    indices: Vec<u16>,
    data_delta: i8,
    values: Values,
}

#[derive(Arbitrary, Debug)]
struct Dense {
    rows: u8,
    cols: u8,
    bs: BsSel,
    threshold: u8,
    keep: u64,
    values: Values,
    pad: u8,
}

#[derive(Arbitrary, Debug)]
enum Op {
    TryNew(TryNew),
    Coo(Coo),
    Csr(Csr),
    Dense(Dense),
}

/// The shape checks shared by every constructor, in their documented order.
fn shape_oracle(rows: usize, cols: usize, bs: usize) -> Result<(), BsrError> {
    if !SUPPORTED.contains(&bs) {
        return Err(BsrError::UnsupportedBlockSize { bs });
    }
    if rows % bs != 0 {
        return Err(BsrError::NotMultiple { dim: "rows", value: rows, bs });
    }
    if cols % bs != 0 {
        return Err(BsrError::NotMultiple { dim: "cols", value: cols, bs });
    }
    let limit = u32::MAX as usize;
    if cols / bs > limit {
        return Err(BsrError::TooLarge { what: "block columns", value: cols / bs, limit });
    }
    if rows / bs > limit {
        return Err(BsrError::TooLarge { what: "block rows", value: rows / bs, limit });
    }
    Ok(())
}

/// Which offsets array [`offsets_oracle`] checks: a BSR `row_ptr` (u32 entries) or a CSR `indptr`.
#[derive(Clone, Copy)]
enum Offsets {
    RowPtr,
    CsrIndptr,
}

/// The checks of an offsets array of `rows` rows over `total` entries, in their documented order (`rows + 1`
/// entries, starting at 0, nondecreasing, ending at `total`), with the errors `kind` names.
fn offsets_oracle(kind: Offsets, ptr: &[usize], rows: usize, total: usize) -> Result<(), BsrError> {
    // `ptr` holds a row_ptr's u32 entries widened: narrowing them back is exact.
    let row_ptr = matches!(kind, Offsets::RowPtr);
    if ptr.len() != rows + 1 {
        let (expected, got) = (rows + 1, ptr.len());
        return Err(if row_ptr {
            BsrError::RowPtrLength { expected, got }
        } else {
            BsrError::CsrIndptrLength { expected, got }
        });
    }
    if ptr[0] != 0 {
        return Err(if row_ptr {
            BsrError::RowPtrStart { got: ptr[0] as u32 }
        } else {
            BsrError::CsrIndptrStart { got: ptr[0] }
        });
    }
    for row in 0..rows {
        let (prev, next) = (ptr[row], ptr[row + 1]);
        if next < prev {
            return Err(if row_ptr {
                BsrError::RowPtrDecreasing { block_row: row, prev: prev as u32, next: next as u32 }
            } else {
                BsrError::CsrIndptrDecreasing { row, prev, next }
            });
        }
    }
    if ptr[rows] != total {
        let got = ptr[rows];
        return Err(if row_ptr {
            BsrError::RowPtrEnd { expected: total, got: got as u32 }
        } else {
            BsrError::CsrIndptrEnd { expected: total, got }
        });
    }
    Ok(())
}

/// `Bsr::try_new`'s validity, written from its documentation.
fn try_new_oracle(
    rows: usize,
    cols: usize,
    bs: usize,
    row_ptr: &[u32],
    col_idx: &[u32],
    values_len: usize,
) -> Result<(), BsrError> {
    shape_oracle(rows, cols, bs)?;
    let (block_rows, block_cols, nnzb) = (rows / bs, cols / bs, col_idx.len());
    let offsets: Vec<usize> = row_ptr.iter().map(|&x| x as usize).collect();
    offsets_oracle(Offsets::RowPtr, &offsets, block_rows, nnzb)?;
    for br in 0..block_rows {
        for pos in row_ptr[br] as usize..row_ptr[br + 1] as usize {
            if col_idx[pos] as usize >= block_cols {
                return Err(BsrError::ColIdxOutOfRange { block_row: br, pos, col: col_idx[pos], block_cols });
            }
        }
    }
    for br in 0..block_rows {
        for pos in row_ptr[br] as usize + 1..row_ptr[br + 1] as usize {
            let (prev, col) = (col_idx[pos - 1], col_idx[pos]);
            if col == prev {
                return Err(BsrError::ColIdxDuplicate { block_row: br, pos, col });
            }
            if col < prev {
                return Err(BsrError::ColIdxUnsorted { block_row: br, pos, prev, col });
            }
        }
    }
    if values_len != nnzb * bs * bs {
        return Err(BsrError::ValuesLength { expected: nnzb * bs * bs, got: values_len });
    }
    Ok(())
}

/// What a conversion must return.
#[derive(Debug)]
enum Expect {
    Ok,
    Bsr(BsrError),
    NonFinite,
}

fn check_expect<T>(what: &str, got: &sparsek::Result<T>, want: &Expect) {
    let ok = match (got, want) {
        (Ok(_), Expect::Ok) => true,
        (Err(Error::InvalidBsr(e)), Expect::Bsr(w)) => e == w,
        (Err(Error::NonFinite { .. }), Expect::NonFinite) => true,
        _ => false,
    };
    assert!(ok, "{what}: got {:?}, expected {want:?}", got.as_ref().err());
}

/// The stored blocks as `(block_row, block_col) -> values`.
fn blocks_of(a: &Bsr<f32>) -> Vec<((usize, usize), &[f32])> {
    let mut out = Vec::new();
    for br in 0..a.block_rows() {
        for i in a.block_row_range(br) {
            out.push(((br, a.col_idx()[i] as usize), a.block(i).expect("block in range")));
        }
    }
    out
}

/// Same structure, values equal as numbers (NaN = NaN, +0 = -0) or bit for bit.
fn same_bsr(a: &Bsr<f32>, b: &Bsr<f32>, bits: bool) -> bool {
    (a.rows(), a.cols(), a.block_size()) == (b.rows(), b.cols(), b.block_size())
        && a.row_ptr() == b.row_ptr()
        && a.col_idx() == b.col_idx()
        && a.values().len() == b.values().len()
        && a.values()
            .iter()
            .zip(b.values())
            .all(|(&x, &y)| if bits { same_bits_f32(x, y) } else { same(f64::from(x), f64::from(y)) })
}

/// Checks a conversion's result against blocks given as a map `(br, bc) -> dense block (bs*bs, row-major)`.
fn check_blocks(
    what: &str,
    a: &Bsr<f32>,
    rows: usize,
    cols: usize,
    bs: usize,
    want: &BTreeMap<(usize, usize), Vec<f32>>,
) {
    assert_eq!((a.rows(), a.cols(), a.block_size()), (rows, cols, bs), "{what}: shape");
    let got = blocks_of(a);
    assert!(got.iter().map(|g| g.0).eq(want.keys().copied()), "{what}: stored blocks {:?} differ", a);
    for ((pos, g), w) in got.iter().zip(want.values()) {
        for (k, (&x, &y)) in g.iter().zip(w).enumerate() {
            assert!(same(f64::from(x), f64::from(y)), "{what}: block {pos:?} element {k}: {x} vs {y}");
        }
    }
}

fn try_new(t: TryNew) {
    let bs = t.bs.get();
    let (rows, cols) = (t.rows.get(bs), t.cols.get(bs));
    let supported = SUPPORTED.contains(&bs);
    let mut rng = Rng::new(t.seed);

    // A valid structure when the shape is small, then mutations.
    let small = supported && rows % bs == 0 && cols % bs == 0 && rows / bs <= 64 && cols / bs <= 64;
    let (n_rows, bc) = if small { (rows / bs, cols / bs) } else { (t.masks.len().min(64), 64) };
    let col_mask = if bc >= 64 { u64::MAX } else { (1u64 << bc) - 1 };
    let bb = if supported { bs * bs } else { 1 };
    let mut row_ptr = vec![0u32];
    let mut col_idx = Vec::new();
    for r in 0..n_rows {
        let m = t.masks.get(r).copied().unwrap_or(0) & col_mask;
        for c in 0..64 {
            if m >> c & 1 == 1 && (col_idx.len() + 1) * bb <= MAX_VALUES {
                col_idx.push(c as u32);
            }
        }
        row_ptr.push(col_idx.len() as u32);
    }
    let mut n_values = col_idx.len() * bb;
    for m in t.mutations.iter().take(8) {
        match *m {
            Mutation::RowPtrSet(i, v) => {
                let n = row_ptr.len();
                if n > 0 {
                    row_ptr[i as usize % n] = v;
                }
            }
            Mutation::RowPtrAdd(i, d) => {
                let n = row_ptr.len();
                if n > 0 {
                    let x = &mut row_ptr[i as usize % n];
                    *x = x.wrapping_add_signed(i32::from(d));
                }
            }
            Mutation::RowPtrPush(v) => row_ptr.push(v),
            Mutation::RowPtrPop => {
                row_ptr.pop();
            }
            Mutation::ColSet(i, v) => {
                let n = col_idx.len();
                if n > 0 {
                    col_idx[i as usize % n] = v;
                }
            }
            Mutation::ColSwap(i) => {
                let n = col_idx.len();
                if n > 1 {
                    let i = i as usize % (n - 1);
                    col_idx.swap(i, i + 1);
                }
            }
            Mutation::ColPush(v) => col_idx.push(v),
            Mutation::ColPop => {
                col_idx.pop();
            }
            Mutation::ValuesGrow(d) => n_values += d as usize,
            Mutation::ValuesShrink(d) => n_values = n_values.saturating_sub(d as usize),
        }
    }
    let values = t.values.draw(n_values.min(MAX_VALUES + 255));

    // Bsr::empty: Ok exactly when the shape is (run when its row_ptr is small).
    let shape = shape_oracle(rows, cols, bs);
    if shape.is_err() || rows / bs < MAX_BLOCK_ROWS {
        let e = Bsr::<f32>::empty(rows, cols, bs);
        match (&e, &shape) {
            (Ok(e), Ok(())) => {
                assert_eq!((e.nnzb(), e.row_ptr().len()), (0, rows / bs + 1));
                assert!(e.row_ptr().iter().all(|&p| p == 0) && e.values().is_empty());
            }
            (Err(Error::InvalidBsr(got)), Err(want)) => assert_eq!(got, want, "Bsr::empty"),
            _ => panic!("Bsr::empty({rows}, {cols}, {bs}): {e:?}, expected {shape:?}"),
        }
    }

    let want = try_new_oracle(rows, cols, bs, &row_ptr, &col_idx, values.len());
    let got = Bsr::try_new(rows, cols, bs, row_ptr.clone(), col_idx.clone(), values.clone());
    let a = match (got, want) {
        (Err(g), Err(w)) => {
            assert_eq!(g, w, "try_new({rows}, {cols}, {bs}, {row_ptr:?}, {col_idx:?}, {} values)", values.len());
            return;
        }
        (Ok(a), Ok(())) => a,
        (got, want) => panic!(
            "try_new({rows}, {cols}, {bs}, {row_ptr:?}, {col_idx:?}, {} values): {:?}, oracle {want:?}",
            values.len(),
            got.err()
        ),
    };
    let _ = format!("{a:?}");

    // Accessors.
    let (block_rows, block_cols, nnzb) = (rows / bs, cols / bs, col_idx.len());
    assert_eq!((a.rows(), a.cols(), a.block_size()), (rows, cols, bs));
    assert_eq!((a.block_rows(), a.block_cols(), a.nnzb()), (block_rows, block_cols, nnzb));
    assert_eq!((a.row_ptr(), a.col_idx()), (&row_ptr[..], &col_idx[..]));
    assert!(a.values().iter().zip(&values).all(|(x, y)| x.to_bits() == y.to_bits()));
    for i in 0..nnzb {
        assert!(
            a.block(i).is_some_and(|b| b.iter().zip(&values[i * bs * bs..]).all(|(x, y)| x.to_bits() == y.to_bits()))
        );
    }
    assert!(a.block(nnzb).is_none() && a.block(usize::MAX).is_none());
    for br in 0..block_rows {
        assert_eq!(a.block_row_range(br), row_ptr[br] as usize..row_ptr[br + 1] as usize);
        assert_eq!(a.block_row_cols(br), &col_idx[row_ptr[br] as usize..row_ptr[br + 1] as usize]);
    }
    assert!(a.block_row_range(block_rows).is_empty() && a.block_row_range(usize::MAX).is_empty());
    let lens: Vec<usize> = row_ptr.windows(2).map(|w| (w[1] - w[0]) as usize).collect();
    assert!(a.row_lengths().eq(lens.iter().copied()));
    assert_eq!(a.max_row_length(), lens.iter().copied().max().unwrap_or(0));
    let max_abs = values
        .iter()
        .map(|v| f64::from(v.abs()))
        .fold(0.0f64, |m, v| if m.is_nan() || v.is_nan() { f64::NAN } else { m.max(v) });
    assert!(same(a.max_abs(), max_abs), "max_abs {} vs {max_abs}", a.max_abs());

    // convert: f64 exactly; f16 and bf16 rounded once, or NonFinite at the first finite value that overflows.
    let a64 = a.convert::<f64>().expect("convert to f64");
    assert!(a64.values().iter().zip(&values).all(|(&x, &y)| same(x, f64::from(y))));
    assert_eq!((a64.row_ptr(), a64.col_idx()), (&row_ptr[..], &col_idx[..]));
    check_narrowed!(f16, a, &values, bs);
    check_narrowed!(bf16, a, &values, bs);

    // sprs CSR and CSC (sprs allocates per row and per column).
    if values.len() <= 1 << 16 && rows <= MAX_DENSE && cols <= MAX_DENSE {
        let m = a.to_csmat();
        assert_eq!((m.rows(), m.cols(), m.nnz()), (rows, cols, values.len()));
        let back = Bsr::from_csmat(&m, bs).expect("from_csmat(to_csmat)");
        assert!(same_bsr(&back, &a, false), "sprs CSR round trip");
        let back = Bsr::from_csmat(&m.to_csc(), bs).expect("from_csmat(to_csc)");
        assert!(same_bsr(&back, &a, false), "sprs CSC round trip");
    }

    // Matrix Market: finite values round-trip through a file.
    if values.len() <= 1 << 12 && values.iter().all(|v| v.is_finite()) {
        let path = std::env::temp_dir().join(format!("sparsek-fuzz-{}.mtx", std::process::id()));
        a.write_matrix_market(&path).expect("write_matrix_market");
        let mm = MatrixMarket::read(&path).expect("read back");
        assert_eq!((mm.rows, mm.cols, mm.entries.len()), (rows, cols, values.len()));
        let back: Bsr<f32> = mm.to_bsr(bs).expect("to_bsr of a written matrix");
        assert!(same_bsr(&back, &a, false), "Matrix Market round trip");
        let _ = std::fs::remove_file(&path);
    }

    let parts = a.clone().into_parts();
    assert!(parts.0 == rows && parts.1 == cols && parts.2 == bs && parts.3 == row_ptr && parts.4 == col_idx);
    assert!(parts.5.iter().zip(&values).all(|(x, y)| x.to_bits() == y.to_bits()) && parts.5.len() == values.len());

    if rows.saturating_mul(cols) > MAX_DENSE || rows == 0 && cols > MAX_DENSE {
        return;
    }

    // The dense oracle.
    let mut dense = vec![0.0f32; rows * cols];
    let mut stored: BTreeMap<(usize, usize), Vec<f32>> = BTreeMap::new();
    for br in 0..block_rows {
        for i in row_ptr[br] as usize..row_ptr[br + 1] as usize {
            let bc = col_idx[i] as usize;
            let blk = values[i * bs * bs..(i + 1) * bs * bs].to_vec();
            for (k, &v) in blk.iter().enumerate() {
                dense[(br * bs + k / bs) * cols + bc * bs + k % bs] = v;
            }
            stored.insert((br, bc), blk);
        }
    }

    let d = a.to_dense().expect("to_dense");
    assert_eq!((d.rows(), d.cols()), (rows, cols));
    for r in 0..rows {
        for c in 0..cols {
            assert!(d.get(r, c).to_bits() == dense[r * cols + c].to_bits(), "to_dense ({r}, {c})");
        }
    }

    // from_dense on a copy with NaN padding: the padding is never read.
    let pad = t.pad as usize % 4;
    let padded = if pad > 0 { d.with_ld(cols + pad, f32::NAN).expect("with_ld") } else { d.clone() };
    let mut views = 0;
    let kept = Bsr::from_dense(&padded, bs, |v: &BlockView<'_, f32>| {
        views += 1;
        let (br, bc) = (v.block_row(), v.block_col());
        assert_eq!(v.size(), bs);
        let at = |r: usize, c: usize| dense[(br * bs + r) * cols + bc * bs + c];
        let (rr, cc) = ((t.seed as usize) % bs, (t.seed as usize >> 8) % bs);
        assert!(v.get(rr, cc).is_some_and(|x| x.to_bits() == at(rr, cc).to_bits()), "BlockView::get");
        assert!(v.get(bs, 0).is_none() && v.get(0, bs).is_none() && v.row(bs).is_none());
        let all: Vec<f32> = (0..bs * bs).map(|k| at(k / bs, k % bs)).collect();
        assert!(v.to_vec().iter().zip(&all).all(|(x, y)| x.to_bits() == y.to_bits()) && v.to_vec().len() == bs * bs);
        assert_eq!(v.is_zero(), all.iter().all(|&x| x == 0.0), "BlockView::is_zero");
        let m = all
            .iter()
            .map(|x| f64::from(x.abs()))
            .fold(0.0f64, |m, v| if m.is_nan() || v.is_nan() { f64::NAN } else { m.max(v) });
        assert!(same(v.max_abs(), m), "BlockView::max_abs");
        stored.contains_key(&(br, bc))
    })
    .expect("from_dense");
    assert_eq!(views, block_rows * block_cols, "from_dense visits every block once");
    assert!(same_bsr(&kept, &a, true), "from_dense(to_dense) keeping the stored blocks");

    // from_dense_threshold.
    let threshold = [0.0, 0.5, 1.0, 4.0, f64::INFINITY, -1.0, f64::NAN, 1e30][t.threshold as usize % 8];
    let got = Bsr::from_dense_threshold(&padded, bs, threshold);
    if threshold.is_nan() || threshold < 0.0 {
        assert!(matches!(got, Err(Error::InvalidArgument { .. })), "threshold {threshold}: {got:?}");
    } else {
        let want: BTreeMap<_, _> = stored
            .iter()
            .filter(|(_, b)| b.iter().any(|x| x.is_nan() || f64::from(x.abs()) > threshold))
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        check_blocks("from_dense_threshold", &got.expect("from_dense_threshold"), rows, cols, bs, &want);
    }

    // from_coo: every element of every stored block, shuffled, plus explicit zeros.
    let mut entries: Vec<(usize, usize, f32)> = Vec::new();
    for (&(br, bc), blk) in &stored {
        for (k, &v) in blk.iter().enumerate() {
            entries.push((br * bs + k / bs, bc * bs + k % bs, v));
        }
    }
    rng.shuffle(&mut entries);
    // from_csr: the same entries, row by row, columns in the shuffled order.
    let mut by_row: Vec<Vec<(usize, f32)>> = vec![Vec::new(); rows];
    for &(r, c, v) in &entries {
        by_row[r].push((c, v));
    }
    let mut indptr = vec![0usize];
    let (mut indices, mut data) = (Vec::new(), Vec::new());
    for row in &by_row {
        for &(c, v) in row {
            indices.push(c);
            data.push(v);
        }
        indptr.push(indices.len());
    }
    let csr = Bsr::from_csr(rows, cols, bs, &indptr, &indices, &data).expect("from_csr");
    assert!(same_bsr(&csr, &a, false), "from_csr of the stored elements");

    let mut want = stored.clone();
    if rows > 0 && cols > 0 {
        for &(r, c) in t.extra_zeros.iter().take(16) {
            let (r, c) = (r as usize % rows, c as usize % cols);
            let at = rng.below(entries.len() + 1);
            entries.insert(at, (r, c, 0.0));
            want.entry((r / bs, c / bs)).or_insert_with(|| vec![0.0; bs * bs]);
        }
    }
    let coo = Bsr::from_coo(rows, cols, bs, &entries).expect("from_coo");
    check_blocks("from_coo", &coo, rows, cols, bs, &want);
}

/// Value code of a `Coo` entry: NaN, infinities, f32::MAX (two of them overflow), else `v / 4`.
fn coo_value(v: i8) -> f32 {
    match v {
        -128 => f32::NAN,
        127 => f32::INFINITY,
        126 => f32::NEG_INFINITY,
        125 => f32::MAX,
        -127 => f32::MIN,
        v => f32::from(v) / 4.0,
    }
}

/// The oracle of `from_coo` once the shape and the entries are known to be valid: f64 sums in input order.
fn coo_sums(bs: usize, entries: &[(usize, usize, f32)]) -> (Expect, BTreeMap<(usize, usize), Vec<f32>>) {
    let mut sums: BTreeMap<(usize, usize), (f64, bool)> = BTreeMap::new();
    for &(r, c, v) in entries {
        let s = sums.entry((r, c)).or_insert((0.0, false));
        s.0 += f64::from(v);
        s.1 |= !v.is_finite();
    }
    let mut blocks: BTreeMap<(usize, usize), Vec<f32>> = BTreeMap::new();
    let mut expect = Expect::Ok;
    for (&(r, c), &(s, from_non_finite)) in &sums {
        let v = s as f32;
        if !v.is_finite() && !from_non_finite {
            expect = Expect::NonFinite;
        }
        blocks.entry((r / bs, c / bs)).or_insert_with(|| vec![0.0; bs * bs])[(r % bs) * bs + c % bs] = v;
    }
    (expect, blocks)
}

fn coo(t: Coo) {
    let bs = t.bs.get();
    let (rows, cols) = (t.rows.get(bs), t.cols.get(bs));
    let entries: Vec<(usize, usize, f32)> = t
        .entries
        .iter()
        .take(256)
        .map(|&(r, c, v)| {
            (r as usize % rows.saturating_add(2).max(1), c as usize % cols.saturating_add(2).max(1), coo_value(v))
        })
        .collect();
    let mut want = shape_oracle(rows, cols, bs).map_err(Expect::Bsr).err();
    if want.is_none() {
        if let Some((index, &(row, col, _))) = entries.iter().enumerate().find(|(_, e)| e.0 >= rows || e.1 >= cols) {
            want = Some(Expect::Bsr(BsrError::EntryOutOfRange { index, row, col, rows, cols }));
        }
    }
    match want {
        Some(w) => check_expect("from_coo", &Bsr::from_coo(rows, cols, bs, &entries), &w),
        None if rows / bs <= MAX_BLOCK_ROWS => {
            let (w, blocks) = coo_sums(bs, &entries);
            let got = Bsr::from_coo(rows, cols, bs, &entries);
            check_expect("from_coo", &got, &w);
            if let Ok(a) = got {
                check_blocks("from_coo", &a, rows, cols, bs, &blocks);
            }
        }
        None => {}
    }
}

fn csr(t: Csr) {
    let bs = t.bs.get();
    let (rows, cols) = (t.rows.get(bs), t.cols.get(bs));
    let indptr: Vec<usize> = match &t.indptr {
        Some(p) => p.iter().map(|&x| x as usize).collect(),
        None => {
            let n = if rows <= 512 { rows } else { t.lens.len() };
            let mut p = vec![0usize];
            for i in 0..n {
                p.push(p[i] + t.lens.get(i).copied().unwrap_or(0) as usize % 8);
            }
            p
        }
    };
    let total = indptr.last().copied().unwrap_or(0).min(4096);
    let indices: Vec<usize> = (0..total)
        .map(|i| t.indices.get(i).map_or(i % cols.max(1), |&c| c as usize % cols.saturating_add(2).max(1)))
        .collect();
    let n_data = (indices.len() as isize + isize::from(t.data_delta % 3)).max(0) as usize;
    let data = t.values.draw(n_data);

    let want = (|| -> Result<Vec<(usize, usize, f32)>, BsrError> {
        shape_oracle(rows, cols, bs)?;
        offsets_oracle(Offsets::CsrIndptr, &indptr, rows, indices.len())?;
        if data.len() != indices.len() {
            return Err(BsrError::CsrDataLength { expected: indices.len(), got: data.len() });
        }
        let mut entries = Vec::new();
        for row in 0..rows {
            for i in indptr[row]..indptr[row + 1] {
                if indices[i] >= cols {
                    return Err(BsrError::EntryOutOfRange { index: i, row, col: indices[i], rows, cols });
                }
                entries.push((row, indices[i], data[i]));
            }
        }
        Ok(entries)
    })();
    match want {
        Err(w) => check_expect("from_csr", &Bsr::from_csr(rows, cols, bs, &indptr, &indices, &data), &Expect::Bsr(w)),
        Ok(entries) => {
            let (w, blocks) = coo_sums(bs, &entries);
            let got = Bsr::from_csr(rows, cols, bs, &indptr, &indices, &data);
            check_expect("from_csr", &got, &w);
            if let Ok(a) = got {
                check_blocks("from_csr", &a, rows, cols, bs, &blocks);
            }
        }
    }
}

fn dense(t: Dense) {
    let bs = t.bs.get();
    let (rows, cols) = (t.rows as usize, t.cols as usize);
    let vals = t.values.draw(rows * cols);
    let m = Matrix::from_vec(rows, cols, cols.max(1), vals.clone()).expect("from_vec");
    let pad = t.pad as usize % 3;
    let m = if pad > 0 { m.with_ld(cols + pad, f32::NAN).expect("with_ld") } else { m };
    let threshold = [0.0, 0.5, 2.0, f64::INFINITY, -0.5, f64::NAN][t.threshold as usize % 6];
    let got = Bsr::from_dense_threshold(&m, bs, threshold);
    if threshold.is_nan() || threshold < 0.0 {
        assert!(matches!(got, Err(Error::InvalidArgument { .. })), "threshold {threshold}: {got:?}");
    } else if let Err(w) = shape_oracle(rows, cols, bs) {
        check_expect("from_dense_threshold", &got, &Expect::Bsr(w));
    } else {
        let mut want = BTreeMap::new();
        for br in 0..rows / bs {
            for bc in 0..cols / bs {
                let blk: Vec<f32> = (0..bs * bs).map(|k| vals[(br * bs + k / bs) * cols + bc * bs + k % bs]).collect();
                if blk.iter().any(|x| x.is_nan() || f64::from(x.abs()) > threshold) {
                    want.insert((br, bc), blk);
                }
            }
        }
        check_blocks("from_dense_threshold", &got.expect("from_dense_threshold"), rows, cols, bs, &want);
    }
    // from_dense with an arbitrary choice of blocks.
    let got = Bsr::from_dense(&m, bs, |v| t.keep >> ((v.block_row() * 7 + v.block_col()) % 64) & 1 == 1);
    match shape_oracle(rows, cols, bs) {
        Err(w) => check_expect("from_dense", &got, &Expect::Bsr(w)),
        Ok(()) => {
            let a = got.expect("from_dense");
            let mut want = BTreeMap::new();
            for br in 0..rows / bs {
                for bc in 0..cols / bs {
                    if t.keep >> ((br * 7 + bc) % 64) & 1 == 1 {
                        let blk: Vec<f32> =
                            (0..bs * bs).map(|k| vals[(br * bs + k / bs) * cols + bc * bs + k % bs]).collect();
                        want.insert((br, bc), blk);
                    }
                }
            }
            check_blocks("from_dense", &a, rows, cols, bs, &want);
        }
    }
}

sparsek_fuzz::target!(|op: Op| {
    match op {
        Op::TryNew(t) => try_new(t),
        Op::Coo(t) => coo(t),
        Op::Csr(t) => csr(t),
        Op::Dense(t) => dense(t),
    }
});
