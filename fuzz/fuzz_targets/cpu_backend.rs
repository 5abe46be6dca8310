//! The CPU backend (`cpu::spmm`) and the oracle (`cpu::reference`, `cpu::reference_rows`, `check::Expected`)
//! on small products with arbitrary, possibly mismatched or empty shapes (M, K or N = 0), leading dimensions
//! with NaN-poisoned padding, element types f16/bf16/f32/f64 and arbitrary alpha/beta.
//!
//! Properties:
//! - shapes that do not fit (`A.cols != B.rows`, `C.rows != A.rows`, `C.cols != B.cols`) are
//!   `Error::ShapeMismatch` with the three shapes, from `spmm` (C bit-for-bit unchanged, padding included),
//!   `reference`, `reference_rows` and `Expected::compute`; shapes that fit are Ok;
//! - values are small integers times powers of two, so every product, sum and epilogue step is exact in f32
//!   and f64: `spmm`'s result must equal the independent f64 computation done here (dense A from the parts,
//!   B and C read through their leading dimensions) rounded once to C's type, and `reference` must equal it
//!   exactly; it must also pass the library's own tolerance path (`check::compare` with
//!   `Tolerance::for_operands`, and `Expected::compute(..).check(..)` on all or sampled rows, where a vacuous
//!   expectation, recomputed here, passes with a note);
//! - `spmm` never writes C's padding and, with beta == 0, never reads C (a NaN-poisoned C gives finite
//!   results);
//! - `reference_rows` gives the listed rows in order, duplicates allowed, and `InvalidArgument` for a row >= M.
//! - with a bias (and ReLU) everything above holds for `act(alpha * (A @ B) + bias) + beta * C`; a bias of the
//!   wrong length is `InvalidArgument` and changes nothing.
#![no_main]

use arbitrary::Arbitrary;
use sparsek::check::{Expected, RowSample, Tolerance, compare};
use sparsek::{Bsr, Epilogue, Error, Matrix, Scalar, bf16, cpu, f16};
use sparsek_fuzz::{Rng, at, generated, padded, small};

const SCALARS: [f32; 10] = [0.0, 1.0, -1.0, 0.5, 2.0, -0.75, 1.5, -2.0, 0.25, -0.0];

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Extent {
    /// What the product needs.
    Fit,
    /// Anything small (usually a mismatch).
    Other(u8),
}

impl Extent {
    fn get(self, fit: usize) -> usize {
        match self {
            Extent::Fit => fit,
            Extent::Other(k) => k as usize % 70,
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    types: u8,
    bs: u8,
    block_rows: u8,
    block_cols: u8,
    /// Some: `generate_int` (pattern, density in 1/8, seed, max_abs); None: blocks from `masks`.
    generated: Option<(u8, u8, u64, u8)>,
    masks: Vec<u8>,
    a_seed: u64,
    n: u8,
    b_rows: Extent,
    b_pad: u8,
    c_rows: Extent,
    c_cols: Extent,
    c_pad: u8,
    b_seed: u64,
    c_seed: u64,
    alpha: u8,
    beta: u8,
    /// Some: a bias per row of C from this seed (one value too many when the seed is a multiple of 7: refused).
    bias: Option<u64>,
    /// ReLU in the epilogue (exact, unlike GELU and SiLU, so the checks below stay bit-exact).
    relu: bool,
    /// Fill C with NaN when beta == 0 (it must not be read).
    poison_c: bool,
    /// Some: `RowSample::Random { count, seed }`.
    sample: Option<(u8, u64)>,
    row_list: Vec<u16>,
}

fn bits_of<T: Scalar>(m: &Matrix<T>) -> Vec<u8> {
    bytemuck::cast_slice(m.as_slice()).to_vec()
}

fn run<TA: Scalar, TB: Scalar, TC: Scalar>(t: &Input) {
    let bs = [16usize, 16, 16, 32, 32, 64][t.bs as usize % 6];
    let (br, bcn) = (t.block_rows as usize % 5, t.block_cols as usize % 5);
    let (m, k) = (br * bs, bcn * bs);
    let scale = [0.25, 0.5, 1.0][(t.a_seed % 3) as usize];

    // A, from a mask per block row or from the generator.
    let a: Bsr<TA> = match t.generated {
        Some(g) => generated(g, (m, k, bs)),
        None => {
            let mut rng = Rng::new(t.a_seed);
            let (mut row_ptr, mut col_idx) = (vec![0u32], Vec::new());
            for r in 0..br {
                let mask = t.masks.get(r).copied().unwrap_or(0);
                col_idx.extend((0..bcn as u32).filter(|&c| mask >> c & 1 == 1));
                row_ptr.push(col_idx.len() as u32);
            }
            let values = (0..col_idx.len() * bs * bs).map(|_| TA::from_f64(small(&mut rng, 4, scale))).collect();
            Bsr::try_new(m, k, bs, row_ptr, col_idx, values).expect("valid BSR")
        }
    };
    // Dense A, from the parts.
    let mut ad = vec![0.0f64; m * k];
    for i in 0..br {
        for p in a.row_ptr()[i] as usize..a.row_ptr()[i + 1] as usize {
            let c0 = a.col_idx()[p] as usize * bs;
            for (e, v) in a.values()[p * bs * bs..(p + 1) * bs * bs].iter().enumerate() {
                ad[(i * bs + e / bs) * k + c0 + e % bs] = v.to_f64();
            }
        }
    }

    let n = t.n as usize % 41;
    let kb = t.b_rows.get(k);
    let mut brng = Rng::new(t.b_seed);
    let b: Matrix<TB> = padded(kb, n, t.b_pad as usize % 4, |_, _| small(&mut brng, 4, scale));
    let (mc, nc) = (t.c_rows.get(m), t.c_cols.get(n));
    let act = if t.relu { sparsek::Activation::Relu } else { sparsek::Activation::Identity };
    let ep = Epilogue::new(SCALARS[t.alpha as usize % 10], SCALARS[t.beta as usize % 10]).with_activation(act);
    let bias_len = match t.bias {
        Some(seed) if seed % 7 == 0 => m + 1,
        _ => m,
    };
    let bias_vals: Option<Vec<TA>> = t.bias.map(|seed| {
        let mut rng = Rng::new(seed);
        (0..bias_len).map(|_| TA::from_f64(small(&mut rng, 4, scale))).collect()
    });
    let bias = bias_vals.as_deref();
    let poison = t.poison_c && ep.beta == 0.0;
    let mut crng = Rng::new(t.c_seed);
    let c0: Matrix<TC> =
        padded(mc, nc, t.c_pad as usize % 4, |_, _| if poison { f64::NAN } else { small(&mut crng, 16, 0.25) });
    let fits = k == kb && mc == m && nc == n;

    let mismatch = |what: &str, e: Error| match e {
        Error::ShapeMismatch { a: sa, b: sb, c: sc } => {
            assert_eq!((sa, sb, sc), ((m, k), (kb, n), (mc, nc)), "{what}: the shapes named");
        }
        e => panic!("{what}: {e:?}, expected ShapeMismatch"),
    };

    // spmm.
    let mut c = c0.clone();
    if fits && bias_len != m {
        let e = cpu::spmm_with_bias(&a, &b, &mut c, ep, bias).expect_err("a bias of the wrong length was accepted");
        assert!(matches!(e, Error::InvalidArgument { name: "bias", .. }), "{e:?}");
        assert!(bits_of(&c) == bits_of(&c0), "spmm_with_bias changed C on error");
        assert!(cpu::reference_with_bias(&a, &b, &c0, ep, bias).is_err(), "reference accepted a wrong bias");
        return;
    }
    let got = cpu::spmm_with_bias(&a, &b, &mut c, ep, bias);
    if !fits {
        mismatch("spmm", got.expect_err("spmm of mismatched shapes succeeded"));
        assert!(bits_of(&c) == bits_of(&c0), "spmm changed C on error");
        mismatch("reference", cpu::reference(&a, &b, &c0, ep).expect_err("reference of mismatched shapes"));
        mismatch("reference_rows", cpu::reference_rows(&a, &b, &c0, ep, &[]).expect_err("reference_rows"));
        let e = Expected::compute(&a, &b, &c0, ep, RowSample::All, |_, _| {});
        mismatch("Expected::compute", e.expect_err("Expected::compute of mismatched shapes"));
        return;
    }
    got.unwrap_or_else(|e| panic!("spmm of fitting shapes: {e}"));

    // The exact result, in f64, computed here.
    let (alpha, beta) = (f64::from(ep.alpha), f64::from(ep.beta));
    let mut exact = vec![0.0f64; m * n];
    for r in 0..m {
        for j in 0..n {
            let mut s = 0.0;
            for p in 0..k {
                s += ad[r * k + p] * at(&b, p, j);
            }
            let v = alpha * s + bias.map_or(0.0, |v| v[r].to_f64());
            let v = if t.relu && v < 0.0 { 0.0 } else { v };
            exact[r * n + j] = if beta == 0.0 { v } else { v + beta * at(&c0, r, j) };
        }
    }

    // spmm: exact before the one rounding to TC; padding untouched.
    for r in 0..m {
        for j in 0..n {
            let (g, w) = (at(&c, r, j), TC::from_f64(exact[r * n + j]).to_f64());
            assert!(g == w, "spmm C({r}, {j}) = {g}, expected {w} (exact {})", exact[r * n + j]);
        }
        let ld = c.ld();
        let end = ((r + 1) * ld).min(c.as_slice().len());
        let pad_now = &c.as_slice()[(r * ld + n).min(end)..end];
        let pad_was = &c0.as_slice()[(r * ld + n).min(end)..end];
        assert!(
            bytemuck::cast_slice::<TC, u8>(pad_now) == bytemuck::cast_slice::<TC, u8>(pad_was),
            "spmm wrote C's padding in row {r}"
        );
    }

    // reference: exact.
    let want = cpu::reference_with_bias(&a, &b, &c0, ep, bias).expect("reference of fitting shapes");
    assert_eq!((want.rows(), want.cols()), (m, n));
    for r in 0..m {
        for j in 0..n {
            assert!(
                want.get(r, j) == exact[r * n + j],
                "reference ({r}, {j}): {} vs {}",
                want.get(r, j),
                exact[r * n + j]
            );
        }
    }

    // The library's tolerance path.
    let tol = Tolerance::for_operands_with_bias(&a, &b, &c0, ep, bias);
    let report = compare(&c, &want, tol);
    assert!(report.passed() && report.checked == m * n, "compare: {report}");
    let sample = match t.sample {
        Some((count, seed)) => RowSample::Random { count: count as usize % 20, seed },
        None => RowSample::All,
    };
    let expected = Expected::compute_with_bias(&a, &b, &c0, ep, bias, sample, |_, _| {}).expect("Expected::compute");
    let rows: Vec<usize> = expected.rows().iter().map(|(r, _)| *r).collect();
    assert!(rows.windows(2).all(|w| w[0] < w[1]) && rows.iter().all(|&r| r < m), "sampled rows {rows:?}");
    // An output without columns has nothing to check: no rows are computed, and it counts as fully covered.
    if m > 0 && n > 0 {
        assert!(rows.first() == Some(&0) && rows.last() == Some(&(m - 1)), "sample misses the first or last row");
    }
    if sample == RowSample::All && n > 0 {
        assert_eq!(rows.len(), m);
    }
    if n == 0 {
        assert!(rows.is_empty(), "rows computed for an output without columns");
    }
    assert_eq!(expected.is_full(), rows.len() == m || n == 0);
    for (r, v) in expected.rows() {
        assert!(v.len() == n && v.iter().enumerate().all(|(j, &x)| x == exact[r * n + j]), "Expected row {r}");
    }
    // Vacuous: rows checked, all expecting exactly zero, and alpha 0 or no stored nonzero of A in those rows.
    let stored_nonzero = |r: usize| {
        let (br, i) = (r / bs, r % bs);
        (a.row_ptr()[br] as usize..a.row_ptr()[br + 1] as usize)
            .any(|blk| (0..bs).any(|j| a.values()[blk * bs * bs + i * bs + j].to_f64() != 0.0))
    };
    let vacuous = !rows.is_empty()
        && rows.iter().all(|&r| exact[r * n..(r + 1) * n].iter().all(|&x| x == 0.0))
        && (alpha == 0.0 || !rows.iter().any(|&r| stored_nonzero(r)));
    assert_eq!(expected.is_vacuous(), vacuous, "Expected::is_vacuous");
    let report = expected.check(&c);
    assert!(report.passed(), "Expected::check (vacuous: {vacuous}): {report}");
    assert_eq!(report.note.is_some(), vacuous, "Expected::check: note ({report})");

    // reference_rows: the listed rows, in order; a row >= M is an error.
    let list: Vec<usize> = t.row_list.iter().take(16).map(|&r| r as usize % (m + 2)).collect();
    match cpu::reference_rows_with_bias(&a, &b, &c0, ep, bias, &list) {
        Ok(out) => {
            assert!(list.iter().all(|&r| r < m), "reference_rows accepted a row >= {m}");
            assert_eq!(out.len(), list.len());
            for ((r, v), &want_r) in out.iter().zip(&list) {
                assert_eq!(*r, want_r);
                assert!(
                    v.len() == n && v.iter().enumerate().all(|(j, &x)| x == exact[want_r * n + j]),
                    "reference_rows row {r}"
                );
            }
        }
        Err(Error::InvalidArgument { .. }) => assert!(list.iter().any(|&r| r >= m)),
        Err(e) => panic!("reference_rows: {e}"),
    }
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
