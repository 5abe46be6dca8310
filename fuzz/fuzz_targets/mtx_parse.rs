//! Matrix Market parser and blockification, on arbitrary bytes.
//!
//! Properties:
//! - `MatrixMarket::parse` returns Ok or a typed Err, never panics; the result does not depend on how the
//!   reader chunks the input (a 1-byte `BufReader` gives the same answer);
//! - on Ok: the header (re-parsed here) is a valid coordinate header; every entry lies inside the declared
//!   shape; pattern files give 1.0, integer files integers; symmetric files are symmetric as a multiset of
//!   entries (skew-symmetric: mirrored entries negated, zero diagonal); `padded_shape` rounds up to `bs`;
//!   every value is finite (the reader rejects NaN, infinities and overflowing literals); a symmetric or
//!   skew-symmetric file lists no off-diagonal pair on both sides of the diagonal (the listed entries, recovered
//!   from the documented order: each listed entry followed by its mirror, hold no (i, j) with (j, i));
//! - `to_bsr` with an unsupported block size is `UnsupportedBlockSize`; more than u32::MAX block rows or
//!   columns is `BsrError::TooLarge`; `to_bsr_limited(bs, budget)` (budgets of 8 MiB, 4 KiB and 0) is
//!   `Error::TooLarge` with the exact bytes of row_ptr + col_idx + values exactly when those exceed the budget,
//!   else `NonFinite` exactly when a sum of duplicates is not finite in the element type (f64, f32), else Ok;
//!   the result matches an independent accumulation of the entries (f64 sums in file order, rounded once),
//!   block set and values; `to_bsr` gives the same; the dense form matches the same oracle element by element;
//! - f16: `to_bsr_limited_with_underflow` is `NonFinite` exactly when a sum overflows f16, else counts exactly
//!   the sums that are nonzero but round to zero in f16 (and names the first in block order).
#![no_main]

use std::collections::BTreeMap;
use std::io::{BufReader, Cursor};

use sparsek::format::MatrixMarket;
use sparsek::{Bsr, BsrError, Error};
use sparsek_fuzz::{round_up, same};

/// The byte budget of the blockification (`to_bsr_limited`): the result's row_ptr, col_idx and values.
const BUDGET: usize = 8 << 20;
/// Largest padded `rows * cols` for which the dense form is built and compared.
const MAX_DENSE: u128 = 1 << 18;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Field {
    Real,
    Integer,
    Pattern,
}
#[derive(Clone, Copy, PartialEq, Debug)]
enum Sym {
    General,
    Symmetric,
    Skew,
}

/// The header as the Matrix Market format defines it (first line, five words, case-insensitive).
fn header(data: &[u8]) -> Option<(Field, Sym)> {
    let line = data.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let w: Vec<String> = line.split_whitespace().map(|s| s.to_ascii_lowercase()).collect();
    if w.len() != 5 || w[0] != "%%matrixmarket" || w[1] != "matrix" || w[2] != "coordinate" {
        return None;
    }
    let field = match w[3].as_str() {
        "real" | "double" => Field::Real,
        "integer" => Field::Integer,
        "pattern" => Field::Pattern,
        _ => return None,
    };
    let sym = match w[4].as_str() {
        "general" => Sym::General,
        "symmetric" => Sym::Symmetric,
        "skew-symmetric" => Sym::Skew,
        _ => return None,
    };
    Some((field, sym))
}

fn same_parse(a: &MatrixMarket, b: &MatrixMarket) -> bool {
    a.rows == b.rows
        && a.cols == b.cols
        && a.entries.len() == b.entries.len()
        && a.entries.iter().zip(&b.entries).all(|(x, y)| x.0 == y.0 && x.1 == y.1 && x.2.to_bits() == y.2.to_bits())
}

sparsek_fuzz::target!(|data: &[u8]| {
    let parsed = MatrixMarket::parse(Cursor::new(data), "fuzz");
    let chunked = MatrixMarket::parse(BufReader::with_capacity(1, Cursor::new(data)), "fuzz");
    match (&parsed, &chunked) {
        (Ok(a), Ok(b)) => assert!(same_parse(a, b), "the result depends on the reader's buffering"),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "the error depends on the reader's buffering"),
        _ => panic!("Ok/Err depends on the reader's buffering: {parsed:?} vs {chunked:?}"),
    }
    let Ok(mm) = parsed else { return };

    // The header.
    let (field, sym) = header(data).expect("accepted a file whose first line is not a valid coordinate header");
    if sym != Sym::General {
        assert_eq!(mm.rows, mm.cols, "a symmetric matrix must be square");
    }

    // The entries.
    for &(r, c, v) in &mm.entries {
        assert!(r < mm.rows && c < mm.cols, "entry ({r}, {c}) outside the declared {}x{}", mm.rows, mm.cols);
        assert!(v.is_finite(), "entry ({r}, {c}) has the non-finite value {v}");
        match field {
            Field::Pattern => assert_eq!(v, 1.0, "pattern entry with value {v}"),
            Field::Integer => assert!(v.is_finite() && v.fract() == 0.0, "integer entry with value {v}"),
            Field::Real => {}
        }
        if sym == Sym::Skew && r == c {
            assert!(v == 0.0, "skew-symmetric diagonal entry {v}");
        }
    }
    if sym != Sym::General {
        // Off-diagonal entries, and their mirror images: the same multiset.
        let key = |r: usize, c: usize, v: f64| (r, c, v.to_bits());
        let neg = if sym == Sym::Skew { -1.0 } else { 1.0 };
        let mut off: Vec<_> = mm.entries.iter().filter(|e| e.0 != e.1).map(|&(r, c, v)| key(r, c, v)).collect();
        let mut mirrored: Vec<_> =
            mm.entries.iter().filter(|e| e.0 != e.1).map(|&(r, c, v)| key(c, r, neg * v)).collect();
        off.sort_unstable();
        mirrored.sort_unstable();
        assert!(off == mirrored, "a symmetric file's entries are not symmetric");
        // The listed entries: a diagonal entry takes one place, an off-diagonal one two (it, then its mirror).
        let mut listed = std::collections::BTreeSet::new();
        let mut p = 0;
        while p < mm.entries.len() {
            let (r, c, _) = mm.entries[p];
            if r != c {
                listed.insert((r, c));
                p += 1;
            }
            p += 1;
        }
        for &(r, c) in &listed {
            assert!(!listed.contains(&(c, r)), "the pair ({r}, {c}) / ({c}, {r}) is listed on both sides");
        }
    }

    // Unsupported block sizes are refused before anything else.
    let bad_bs = [0usize, 1, 8, 17, 48, 96, 256][data.len() % 7];
    match mm.to_bsr::<f32>(bad_bs) {
        Err(Error::InvalidBsr(BsrError::UnsupportedBlockSize { bs })) => assert_eq!(bs, bad_bs),
        other => panic!("to_bsr with block size {bad_bs}: {other:?}"),
    }

    let bs = [16usize, 32, 64, 128][(data.len() / 7) % 4];
    let (pr, pc) = (round_up(mm.rows, bs), round_up(mm.cols, bs));
    let representable = pr / bs as u128 <= u32::MAX as u128 && pc / bs as u128 <= u32::MAX as u128;
    if !representable {
        // Refused before anything is allocated, whatever the budget.
        match mm.to_bsr::<f64>(bs) {
            Err(Error::InvalidBsr(BsrError::TooLarge { .. })) => {}
            other => panic!("to_bsr({bs}) of a {}x{} matrix: {other:?}", mm.rows, mm.cols),
        }
        return;
    }
    assert_eq!(mm.padded_shape(bs), (pr as usize, pc as usize));
    let (pr, pc) = (pr as usize, pc as usize);

    // The oracle: f64 sums in file order, and the blocks holding at least one entry.
    let mut sums: BTreeMap<(usize, usize), f64> = BTreeMap::new();
    for &(r, c, v) in &mm.entries {
        *sums.entry((r, c)).or_insert(0.0) += v;
    }
    let mut blocks: BTreeMap<(usize, usize), ()> = BTreeMap::new();
    for &(r, c) in sums.keys() {
        blocks.insert((r / bs, c / bs), ());
    }
    let expect = |r: usize, c: usize| sums.get(&(r, c)).copied().unwrap_or(0.0);
    // The result's memory: row_ptr, col_idx, values.
    let nnzb = blocks.len() as u128;
    let bytes = |size: u128| (pr as u128 / bs as u128 + 1 + nnzb) * 4 + nnzb * (bs * bs) as u128 * size;
    let budget = [BUDGET, BUDGET, 4096, 0][(data.len() / 3) % 4];

    // f64: within the budget, Ok exactly when every sum is finite; beyond it, TooLarge with the exact bytes.
    let non_finite = sums.values().any(|s| !s.is_finite());
    let a64: Bsr<f64> = match mm.to_bsr_limited::<f64>(bs, budget) {
        Err(Error::TooLarge { requested, limit, .. }) if bytes(8) > budget as u128 => {
            assert_eq!((requested, limit), (bytes(8), budget as u128));
            return;
        }
        Err(Error::NonFinite { .. }) if non_finite && bytes(8) <= budget as u128 => return,
        Err(e) => panic!("to_bsr_limited::<f64>({bs}, {budget}) failed: {e} ({} bytes needed)", bytes(8)),
        Ok(a) => {
            assert!(bytes(8) <= budget as u128 && !non_finite, "to_bsr_limited::<f64>({bs}, {budget}) succeeded");
            a
        }
    };
    assert_eq!((a64.rows(), a64.cols(), a64.block_size()), (pr, pc, bs));
    let stored: Vec<(usize, usize)> =
        (0..a64.block_rows()).flat_map(|br| a64.block_row_cols(br).iter().map(move |&bc| (br, bc as usize))).collect();
    assert!(stored.iter().copied().eq(blocks.keys().copied()), "stored blocks differ from the entries' blocks");
    for (i, &(br, bc)) in stored.iter().enumerate() {
        let blk = a64.block(i).expect("block");
        for (k, &v) in blk.iter().enumerate() {
            let (r, c) = (br * bs + k / bs, bc * bs + k % bs);
            assert!(same(v, expect(r, c)), "f64 value at ({r}, {c}): got {v}, expected {}", expect(r, c));
        }
    }
    // The unlimited conversion gives the same.
    assert!(mm.to_bsr::<f64>(bs).is_ok_and(|b| b == a64), "to_bsr differs from to_bsr_limited");

    // f32: refused exactly when a sum overflows f32, else every value rounded once.
    let overflow = sums.values().any(|&s| (s as f32).is_infinite());
    match mm.to_bsr_limited::<f32>(bs, budget) {
        Err(Error::NonFinite { .. }) if overflow => {}
        Err(e) => panic!("to_bsr::<f32> failed: {e}"),
        Ok(a32) => {
            assert!(!overflow, "to_bsr::<f32> turned a finite value into an infinity");
            assert_eq!(a32.row_ptr(), a64.row_ptr());
            assert_eq!(a32.col_idx(), a64.col_idx());
            for (x, y) in a32.values().iter().zip(a64.values()) {
                assert!(same(f64::from(*x), f64::from(*y as f32)), "f32 value {x} for {y}");
            }
        }
    }

    // f16: an overflowing sum is refused; the underflowing ones (nonzero, zero in f16) counted, the first named.
    let f16_of = |s: f64| sparsek::f16::from_f64(s).to_f64();
    let overflow16 = sums.values().any(|&s| f16_of(s).is_infinite());
    match mm.to_bsr_limited_with_underflow::<sparsek::f16>(bs, budget) {
        Err(Error::NonFinite { .. }) if overflow16 => {}
        Err(e) => panic!("to_bsr::<f16> failed: {e}"),
        Ok((a16, under)) => {
            assert!(!overflow16, "to_bsr::<f16> turned a finite value into an infinity");
            assert_eq!(a16.col_idx(), a64.col_idx());
            // In block order, row-major inside a block.
            let mut flushed: Vec<(usize, usize, usize, usize, f64)> = sums
                .iter()
                .filter(|&(_, &s)| s != 0.0 && f16_of(s) == 0.0)
                .map(|(&(r, c), &s)| (r / bs, c / bs, r, c, s))
                .collect();
            flushed.sort_by(|x, y| (x.0, x.1, x.2, x.3).cmp(&(y.0, y.1, y.2, y.3)));
            assert_eq!(under.count, flushed.len(), "underflow count ({under})");
            let first = flushed.first().map(|f| (f.2, f.3, f.4));
            assert!(
                match (under.first, first) {
                    (None, None) => true,
                    (Some((r, c, v)), Some((wr, wc, wv))) => (r, c) == (wr, wc) && same(v, wv),
                    _ => false,
                },
                "first underflow {:?} vs {first:?}",
                under.first
            );
        }
    }

    // The dense form.
    if pr as u128 * pc as u128 <= MAX_DENSE {
        let d = a64.to_dense().expect("to_dense of a small matrix");
        assert_eq!((d.rows(), d.cols()), (pr, pc));
        for r in 0..pr {
            for c in 0..pc {
                assert!(same(d.get(r, c), expect(r, c)), "dense ({r}, {c}): {} vs {}", d.get(r, c), expect(r, c));
            }
        }
    }
});
