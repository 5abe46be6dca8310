//! Comparing a computed product with the f64 oracle ([`crate::cpu::reference`]): the tolerance model and a
//! report that names the first and the worst bad element. Used by the tests, the CLI and the benchmark.

use std::fmt;

use crate::Epilogue;
use crate::format::Bsr;
use crate::matrix::Matrix;
use crate::scalar::Scalar;

/// An element passes iff `|got - expected| <= atol + rtol * |expected|`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Absolute part.
    pub atol: f64,
    /// Relative part.
    pub rtol: f64,
}

impl Tolerance {
    /// Bit equality (as f64): `|got - expected| <= 0`.
    pub const EXACT: Tolerance = Tolerance { atol: 0.0, rtol: 0.0 };

    /// The tolerance for `C = alpha * (A @ B) + beta * C` computed with f32 accumulation:
    /// - f16 x f16 products are exact in f32; each f32 addition rounds, so the accumulation error grows with
    ///   the length of the dot product: `|alpha| * max|A| * max|B| * k_eff * 2^-21`, where `k_eff` is the
    ///   number of terms of the longest dot product (the most blocks in one block row times `bs`, not K);
    /// - `beta * C` adds `|beta| * max|C| * 2^-22`;
    /// - the output rounds once: relative `2^-10` for f16 (`rtol`, with an absolute `2^-24` for f16
    ///   subnormals), `2^-20` for f32 (which also absorbs the f32 rounding of f32 x f32 products).
    ///
    /// `max_abs_c` is only used when `beta != 0`.
    pub fn for_spmm(
        k_eff: usize,
        max_abs_a: f64,
        max_abs_b: f64,
        ep: Epilogue,
        max_abs_c: f64,
        out_is_f16: bool,
    ) -> Tolerance {
        let alpha = f64::from(ep.alpha).abs();
        let beta = f64::from(ep.beta).abs();
        let c_term = if beta == 0.0 { 0.0 } else { beta * max_abs_c * 2f64.powi(-22) };
        let atol = alpha * max_abs_a * max_abs_b * k_eff as f64 * 2f64.powi(-21)
            + c_term
            + if out_is_f16 { 2f64.powi(-24) } else { 1e-30 };
        let rtol = if out_is_f16 { 2f64.powi(-10) } else { 2f64.powi(-20) };
        Tolerance { atol, rtol }
    }

    /// [`Tolerance::for_spmm`] with `k_eff` and the maxima measured on the operands (C over its `M x N`
    /// elements, only when `beta != 0`), the output kind taken from `TC`. For a bf16 output, which
    /// [`Tolerance::for_spmm`] does not cover, `rtol` is `2^-7` and the absolute floor `2^-126`.
    pub fn for_operands<TA: Scalar, TB: Scalar, TC: Scalar>(
        a: &Bsr<TA>,
        b: &Matrix<TB>,
        c: &Matrix<TC>,
        ep: Epilogue,
    ) -> Tolerance {
        let k_eff = a.max_row_length() * a.block_size();
        let max_b = max_abs(b);
        let max_c = if ep.beta == 0.0 { 0.0 } else { max_abs(c) };
        let mut t = Tolerance::for_spmm(k_eff, a.max_abs(), max_b, ep, max_c, TC::NAME == "f16");
        if TC::NAME == "bf16" {
            t.rtol = 2f64.powi(-7);
            t.atol += 2f64.powi(-126);
        }
        t
    }
}

/// The largest magnitude of a matrix's `rows x cols` elements (NaN if one is NaN).
pub fn max_abs<T: Scalar>(m: &Matrix<T>) -> f64 {
    let mut best = 0.0f64;
    for r in 0..m.rows() {
        for v in m.row(r) {
            let a = v.to_f64().abs();
            if a.is_nan() {
                return f64::NAN;
            }
            best = best.max(a);
        }
    }
    best
}

/// What a comparison found. `first_failure` and `worst` are `(row, col, got, expected)`; `worst` is the
/// element furthest past (or closest to) its bound, i.e. the largest `|got - expected| / bound`.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckReport {
    /// Elements compared.
    pub checked: usize,
    /// Elements outside the tolerance (NaN or Inf where a finite value was expected included).
    pub failures: usize,
    /// Largest `|got - expected|` (Inf when a non-finite value was got for a finite expectation).
    pub max_abs_err: f64,
    /// Largest `|got - expected| / |expected|` over the elements whose expected value is nonzero.
    pub max_rel_err: f64,
    /// The first failing element in row-major order (in the order given for [`compare_rows`]).
    pub first_failure: Option<(usize, usize, f64, f64)>,
    /// The element with the largest error relative to its bound.
    pub worst: Option<(usize, usize, f64, f64)>,
    /// The tolerance used.
    pub tolerance: Tolerance,
    /// Set when the shapes did not match (the comparison then failed without checking those elements).
    pub shape_error: Option<String>,
}

impl CheckReport {
    fn new(tolerance: Tolerance) -> Self {
        CheckReport {
            checked: 0,
            failures: 0,
            max_abs_err: 0.0,
            max_rel_err: 0.0,
            first_failure: None,
            worst: None,
            tolerance,
            shape_error: None,
        }
    }

    /// True iff the shapes matched and every element passed.
    pub fn passed(&self) -> bool {
        self.failures == 0 && self.shape_error.is_none()
    }

    /// Records one element; `worst_score` is the running maximum of `err / bound`.
    fn add(&mut self, r: usize, c: usize, got: f64, exp: f64, worst_score: &mut f64) {
        self.checked += 1;
        let t = self.tolerance;
        let bound = if exp.is_finite() { t.atol + t.rtol * exp.abs() } else { 0.0 };
        let (ok, err) = if exp.is_finite() {
            let err = if got.is_finite() { (got - exp).abs() } else { f64::INFINITY };
            (err <= bound, err)
        } else {
            // A non-finite expectation must be met exactly (NaN by NaN, Inf by the same Inf).
            let same = got == exp || (got.is_nan() && exp.is_nan());
            (same, if same { 0.0 } else { f64::INFINITY })
        };
        self.max_abs_err = self.max_abs_err.max(err);
        if exp.is_finite() && exp != 0.0 {
            self.max_rel_err = self.max_rel_err.max(err / exp.abs());
        }
        // With a zero bound (exact comparison) the worst element is the one with the largest error.
        let score = if bound > 0.0 { err / bound } else { err };
        if self.worst.is_none() || score > *worst_score {
            *worst_score = score;
            self.worst = Some((r, c, got, exp));
        }
        if !ok {
            self.failures += 1;
            if self.first_failure.is_none() {
                self.first_failure = Some((r, c, got, exp));
            }
        }
    }
}

impl fmt::Display for CheckReport {
    /// One line: PASS or FAIL, counts, errors, the tolerance, and the first failure and worst element.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = if self.passed() { "PASS" } else { "FAIL" };
        write!(
            f,
            "{verdict}: {} checked, {} failed, max abs err {:.3e}, max rel err {:.3e} (atol {:.3e}, rtol {:.3e})",
            self.checked, self.failures, self.max_abs_err, self.max_rel_err, self.tolerance.atol, self.tolerance.rtol
        )?;
        if let Some(s) = &self.shape_error {
            write!(f, "; shape error: {s}")?;
        }
        if let Some((r, c, g, e)) = self.first_failure {
            write!(f, "; first failure at ({r}, {c}): got {g:e}, expected {e:e}")?;
        }
        if let Some((r, c, g, e)) = self.worst {
            write!(f, "; worst at ({r}, {c}): got {g:e}, expected {e:e}")?;
        }
        Ok(())
    }
}

/// Compares every element of `got` with `expected` under `tol`; see [`CheckReport`]. A shape difference
/// fails the comparison (`shape_error`) without comparing elements.
pub fn compare<TC: Scalar>(got: &Matrix<TC>, expected: &Matrix<f64>, tol: Tolerance) -> CheckReport {
    let mut rep = CheckReport::new(tol);
    if (got.rows(), got.cols()) != (expected.rows(), expected.cols()) {
        rep.shape_error =
            Some(format!("got is {}x{}, expected is {}x{}", got.rows(), got.cols(), expected.rows(), expected.cols()));
        return rep;
    }
    let mut worst = 0.0;
    for r in 0..got.rows() {
        for (c, (g, &e)) in got.row(r).iter().zip(expected.row(r)).enumerate() {
            rep.add(r, c, g.to_f64(), e, &mut worst);
        }
    }
    rep
}

/// Compares sampled rows (as [`crate::cpu::reference_rows`] returns them) with the same rows of `got`. A row
/// index outside `got` or a row of the wrong length fails the comparison (`shape_error`, first one named)
/// and is skipped.
pub fn compare_rows<TC: Scalar>(got: &Matrix<TC>, rows: &[(usize, Vec<f64>)], tol: Tolerance) -> CheckReport {
    let mut rep = CheckReport::new(tol);
    let mut worst = 0.0;
    for (r, exp) in rows {
        let r = *r;
        if r >= got.rows() || exp.len() != got.cols() {
            if rep.shape_error.is_none() {
                rep.shape_error = Some(format!(
                    "sampled row {r} with {} values does not fit got ({}x{})",
                    exp.len(),
                    got.rows(),
                    got.cols()
                ));
            }
            continue;
        }
        for (c, (g, &e)) in got.row(r).iter().zip(exp).enumerate() {
            rep.add(r, c, g.to_f64(), e, &mut worst);
        }
    }
    rep
}

/// Bit equality: every `got` element, widened to f64, must equal `expected` exactly (holds for
/// integer-valued inputs whose products and sums are exact in f32).
pub fn compare_exact<TC: Scalar>(got: &Matrix<TC>, expected: &Matrix<f64>) -> CheckReport {
    compare(got, expected, Tolerance::EXACT)
}
