//! The comparison functions of `sparsek::check` (`compare`, `compare_exact`, `compare_rows`,
//! `Expected::check`, `Expected::check_with`) on arbitrary got/expected values (NaN, infinities, signed zeros,
//! subnormals, neighbours within a few ulps, arbitrary bit patterns) and arbitrary tolerances (zero, tiny,
//! huge, infinite, NaN, negative), for outputs in f32, f16, bf16 and f64, with padded outputs and shape errors.
//!
//! The failure count is recomputed here from the documented rule: an element passes iff
//! - the expectation is finite, the value got is finite and `|got - exp| <= atol + rtol * |exp|`, or
//! - the expectation is NaN and the value got is NaN, or the expectation is infinite and the value got is the
//!   same infinity.
//!
//! Properties: `failures` and `checked` equal the recomputed counts; `passed()` is equivalent to zero failures
//! and no shape error; a shape error is reported exactly for mismatched shapes (`compare`) or bad sampled rows
//! (`compare_rows`, `Expected`); a vacuous expectation (rows computed, all exactly zero, A without stored nonzero
//! values here) is a note (`CheckReport::note`, `Expected::is_vacuous`), never a failure; a tolerance that is not finite and non-negative
//! never passes; `first_failure` is the first failing element in comparison order; `max_abs_err` is the largest
//! error when every expectation is finite; `worst` is present exactly when something was checked.
//! `Expected::compute` refuses a non-finite C (read with beta != 0) with `NonFinite`.
#![no_main]

use arbitrary::Arbitrary;
use sparsek::check::{CheckReport, Expected, RowSample, Tolerance, compare, compare_exact, compare_rows};
use sparsek::{Bsr, Epilogue, Error, Matrix, Scalar, bf16, f16};
use sparsek_fuzz::{Rng, SPECIAL_F32, SPECIAL_F64, same, span};

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Exp {
    Special(u8),
    Small(i16),
    Bits(u64),
    F32Special(u8),
}

impl Exp {
    fn get(self) -> f64 {
        match self {
            Exp::Special(i) => SPECIAL_F64[i as usize % SPECIAL_F64.len()],
            Exp::Small(v) => f64::from(v) / 64.0,
            Exp::Bits(b) => f64::from_bits(b),
            Exp::F32Special(i) => f64::from(SPECIAL_F32[i as usize % SPECIAL_F32.len()]),
        }
    }
}

/// How a value got is derived from its expectation.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Got {
    Same,
    /// `exp` moved by a few ulps of f64.
    Ulps(i8),
    /// `exp * (1 + d / 2^k)`.
    Rel(i8, u8),
    /// `exp + d * 2^-k`.
    Abs(i8, u8),
    Other(Exp),
}

impl Got {
    fn get(self, e: f64) -> f64 {
        match self {
            Got::Same => e,
            Got::Ulps(d) => f64::from_bits(e.to_bits().wrapping_add_signed(i64::from(d))),
            Got::Rel(d, k) => e * (1.0 + f64::from(d) * 2f64.powi(-i32::from(k % 40))),
            Got::Abs(d, k) => e + f64::from(d) * 2f64.powi(-i32::from(k % 60)),
            Got::Other(x) => x.get(),
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum TolPart {
    Zero,
    Pow2(u8),
    Special(u8),
    Bits(u64),
}

impl TolPart {
    fn get(self) -> f64 {
        match self {
            TolPart::Zero => 0.0,
            TolPart::Pow2(k) => 2f64.powi(-i32::from(k % 64)),
            TolPart::Special(i) => [f64::INFINITY, f64::NAN, -1.0, 5e-324, -0.0, 1e300][i as usize % 6],
            TolPart::Bits(b) => f64::from_bits(b),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Mode {
    Compare,
    Exact,
    /// Rows: (row, length change) with row taken modulo rows + 2.
    Rows(Vec<(u8, i8)>),
    /// Expected::compute on an empty or zero-block A with B = 0, so that the expectation is `C0` itself;
    /// (two block rows?, zero block?, alpha 0?, sampled rows?).
    Expected(bool, bool, bool, Option<(u8, u64)>),
}

#[derive(Arbitrary, Debug)]
struct Input {
    tc: u8,
    rows: u8,
    cols: u8,
    pad: u8,
    /// Shape of `got` differs from the expectation's.
    got_shape: Option<(u8, u8)>,
    exp: Vec<Exp>,
    got: Vec<Got>,
    atol: TolPart,
    rtol: TolPart,
    mode: Mode,
}

fn passes(g: f64, e: f64, t: Tolerance) -> bool {
    if e.is_finite() {
        g.is_finite() && (g - e).abs() <= t.atol + t.rtol * e.abs()
    } else if e.is_nan() {
        g.is_nan()
    } else {
        g == e
    }
}

fn tol_valid(t: Tolerance) -> bool {
    t.atol.is_finite() && t.rtol.is_finite() && t.atol >= 0.0 && t.rtol >= 0.0
}

/// What the report must say, recomputed from the (row, col, got, exp) list in comparison order.
struct Want {
    checked: usize,
    failures: usize,
    first: Option<(usize, usize, f64, f64)>,
    max_abs_err: Option<f64>,
}

fn want(elements: &[(usize, usize, f64, f64)], t: Tolerance) -> Want {
    let mut w = Want { checked: elements.len(), failures: 0, first: None, max_abs_err: Some(0.0) };
    for &(r, c, g, e) in elements {
        if !passes(g, e, t) {
            w.failures += 1;
            w.first.get_or_insert((r, c, g, e));
        }
        w.max_abs_err = match w.max_abs_err {
            Some(m) if e.is_finite() => Some(m.max(if g.is_finite() { (g - e).abs() } else { f64::INFINITY })),
            _ => None,
        };
    }
    w
}

fn check_report(what: &str, rep: &CheckReport, w: &Want, t: Tolerance, shape_error: bool) {
    let _ = rep.to_string();
    assert_eq!(rep.checked, w.checked, "{what}: checked ({rep})");
    assert_eq!(rep.failures, w.failures, "{what}: failures ({rep})");
    assert_eq!(rep.passed(), rep.failures == 0 && rep.shape_error.is_none(), "{what}: passed() ({rep})");
    assert_eq!(rep.shape_error.is_some(), shape_error || !tol_valid(t), "{what}: shape_error ({rep})");
    if !tol_valid(t) {
        assert!(!rep.passed(), "{what}: passed under the invalid tolerance {t:?}");
    }
    match (rep.first_failure, w.first) {
        (None, None) => {}
        (Some((r, c, g, e)), Some((wr, wc, wg, we))) => {
            assert!(
                (r, c) == (wr, wc) && same(g, wg) && same(e, we),
                "{what}: first failure {:?} vs {:?}",
                rep.first_failure,
                w.first
            )
        }
        (a, b) => panic!("{what}: first failure {a:?}, expected {b:?}"),
    }
    if let Some(m) = w.max_abs_err {
        assert!(same(rep.max_abs_err, m), "{what}: max_abs_err {} vs {m}", rep.max_abs_err);
    }
    assert_eq!(rep.worst.is_some(), w.checked > 0, "{what}: worst");
}

fn run<TC: Scalar>(t: &Input) {
    let tol = Tolerance { atol: t.atol.get(), rtol: t.rtol.get() };
    let (rows, cols) = (t.rows as usize % 7, t.cols as usize % 7);
    let exp_at = |i: usize| t.exp.get(i % t.exp.len().max(1)).map_or(0.0, |e| e.get());

    if let Mode::Expected(two, zero_block, alpha0, sample) = &t.mode {
        // C0 is the expectation: A has no nonzero, B is zero, alpha * 0 + 1 * C0.
        let m = if *two { 32 } else { 16 };
        let mut c0 = Matrix::<f64>::zeros(m, cols).expect("zeros");
        let mut i = 0;
        for r in 0..m {
            for c in 0..cols {
                c0.set(r, c, exp_at(i));
                i += 1;
            }
        }
        let a = if *zero_block {
            Bsr::try_new(m, 16, 16, if *two { vec![0, 1, 1] } else { vec![0, 1] }, vec![0], vec![0.0f64; 256])
        } else {
            Bsr::try_new(m, 16, 16, vec![0; m / 16 + 1], vec![], vec![])
        }
        .expect("A");
        let b = Matrix::<f64>::zeros(16, cols).expect("zeros");
        let ep = Epilogue::new(if *alpha0 { 0.0 } else { 1.0 }, 1.0);
        let sample = sample.map_or(RowSample::All, |(n, seed)| RowSample::Random { count: n as usize % 8, seed });
        let expected = match Expected::compute(&a, &b, &c0, ep, sample, |_, _| {}) {
            Ok(e) => e,
            Err(Error::NonFinite { index, .. }) => {
                let first =
                    (0..m).flat_map(|r| (0..cols).map(move |c| (r, c))).find(|&(r, c)| !c0.get(r, c).is_finite());
                assert_eq!(Some(index), first, "Expected::compute: NonFinite position");
                return;
            }
            Err(e) => panic!("Expected::compute: {e}"),
        };
        assert!(c0.as_slice().iter().all(|v| v.is_finite()), "Expected::compute accepted a non-finite C");
        let expected = expected.with_tolerance(tol);
        let kept = expected.tolerance();
        assert!(kept.atol.to_bits() == tol.atol.to_bits() && kept.rtol.to_bits() == tol.rtol.to_bits());
        let (gr, gc) = t.got_shape.map_or((m, cols), |(r, c)| (r as usize % 40, c as usize % 7));
        let got = padded_got::<TC>(t, gr, gc, |r, c| if r < m && c < cols { c0.get(r, c) } else { 0.0 });
        // Recompute: every expected row must be C0's row; bad rows make a shape error.
        let mut elements = Vec::new();
        let mut bad = false;
        for (r, e) in expected.rows() {
            assert!(*r < m && e.len() == cols, "Expected row {r}");
            assert!(e.iter().enumerate().all(|(c, &x)| same(x, c0.get(*r, c))), "Expected row {r} is not C0's");
            if *r >= gr || e.len() != gc {
                bad = true;
                continue;
            }
            elements.extend(e.iter().enumerate().map(|(c, &x)| (*r, c, got.get(*r, c).to_f64(), x)));
        }
        // A holds no stored nonzero value: the check is vacuous exactly when the rows expect only zeros.
        let _ = (zero_block, alpha0);
        let vacuous =
            !expected.rows().is_empty() && expected.rows().iter().all(|(_, e)| e.iter().all(|&x| x == 0.0));
        assert_eq!(expected.is_vacuous(), vacuous, "Expected::is_vacuous");
        let rep = expected.check(&got);
        assert_eq!(rep.note.is_some(), vacuous, "Expected::check: note ({rep})");
        check_report("Expected::check", &rep, &want(&elements, tol), tol, bad);
        // check_with reads through a closure: rows of the wrong length are the only shape errors there.
        let rep = expected.check_with(gc, |r, c| if r < gr && c < gc { got.get(r, c).to_f64() } else { f64::NAN });
        let mut elements = Vec::new();
        let mut bad = false;
        for (r, e) in expected.rows() {
            if e.len() != gc {
                bad = true;
                continue;
            }
            elements.extend(e.iter().enumerate().map(|(c, &x)| {
                let g = if *r < gr && c < gc { got.get(*r, c).to_f64() } else { f64::NAN };
                (*r, c, g, x)
            }));
        }
        assert_eq!(rep.note.is_some(), vacuous, "Expected::check_with: note ({rep})");
        check_report("Expected::check_with", &rep, &want(&elements, tol), tol, bad);
        return;
    }

    // The expectation (f64, ld == cols) and the values got (TC, padded, padding never compared).
    let mut expected = Matrix::<f64>::zeros(rows, cols).expect("zeros");
    for r in 0..rows {
        for c in 0..cols {
            expected.set(r, c, exp_at(r * cols + c));
        }
    }
    let (gr, gc) = t.got_shape.map_or((rows, cols), |(r, c)| (r as usize % 7, c as usize % 7));
    let got = padded_got::<TC>(t, gr, gc, |r, c| if r < rows && c < cols { expected.get(r, c) } else { 0.0 });

    match &t.mode {
        Mode::Compare | Mode::Exact => {
            let (rep, tol) = match t.mode {
                Mode::Exact => (compare_exact(&got, &expected), Tolerance::EXACT),
                _ => (compare(&got, &expected, tol), tol),
            };
            let fits = (gr, gc) == (rows, cols);
            let elements: Vec<_> = if fits {
                (0..rows)
                    .flat_map(|r| (0..cols).map(move |c| (r, c)))
                    .map(|(r, c)| (r, c, got.get(r, c).to_f64(), expected.get(r, c)))
                    .collect()
            } else {
                Vec::new()
            };
            check_report("compare", &rep, &want(&elements, tol), tol, !fits);
        }
        Mode::Rows(list) => {
            let list: Vec<(usize, Vec<f64>)> = list
                .iter()
                .take(12)
                .map(|&(r, d)| {
                    let r = r as usize % (rows + 2);
                    let len = (cols as isize + isize::from(d % 2)).max(0) as usize;
                    (r, (0..len).map(|c| exp_at(r * 7 + c)).collect())
                })
                .collect();
            let rep = compare_rows(&got, &list, tol);
            let mut elements = Vec::new();
            let mut bad = false;
            for (r, e) in &list {
                if *r >= gr || e.len() != gc {
                    bad = true;
                    continue;
                }
                elements.extend(e.iter().enumerate().map(|(c, &x)| (*r, c, got.get(*r, c).to_f64(), x)));
            }
            check_report("compare_rows", &rep, &want(&elements, tol), tol, bad);
        }
        Mode::Expected(..) => unreachable!(),
    }
}

/// `got`: `rows x cols` of TC with padding (garbage: NaN), each value derived from `base(r, c)` by `t.got`.
fn padded_got<TC: Scalar>(t: &Input, rows: usize, cols: usize, base: impl Fn(usize, usize) -> f64) -> Matrix<TC> {
    let ld = cols.max(1) + t.pad as usize % 3;
    let mut data = vec![TC::from_f64(f64::NAN); span(rows, cols, ld) as usize];
    let mut rng = Rng::new(t.got.len() as u64);
    for r in 0..rows {
        for c in 0..cols {
            let i = r * cols + c;
            let g = t.got.get(i).copied().unwrap_or(if rng.below(2) == 0 { Got::Same } else { Got::Ulps(1) });
            data[r * ld + c] = TC::from_f64(g.get(base(r, c)));
        }
    }
    Matrix::from_vec(rows, cols, ld, data).expect("got")
}

sparsek_fuzz::target!(|t: Input| {
    match t.tc % 4 {
        0 => run::<f32>(&t),
        1 => run::<f16>(&t),
        2 => run::<bf16>(&t),
        _ => run::<f64>(&t),
    }
});
