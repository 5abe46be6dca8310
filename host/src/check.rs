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

    /// Whether both parts are finite and non-negative. A tolerance built from non-finite operands (a NaN or an
    /// infinity in A, B or C) is not: every comparison under it fails, naming the tolerance, instead of passing
    /// anything (an infinite bound) or failing exact results (a NaN bound) silently.
    pub fn is_valid(&self) -> bool {
        self.atol.is_finite() && self.rtol.is_finite() && self.atol >= 0.0 && self.rtol >= 0.0
    }

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
        Tolerance { atol, rtol }.through(ep.activation)
    }

    /// The tolerance after an activation: ReLU passes errors through unchanged; GELU and SiLU have slopes up to
    /// about 1.13 and 1.10 (so the error before them grows by at most 1.25x), and the GPU evaluates them with
    /// `ex2.approx` and `div.full` (a few 2^-22 relative), covered by an extra `2^-20` of `rtol`.
    pub fn through(self, act: crate::Activation) -> Tolerance {
        match act {
            crate::Activation::Identity | crate::Activation::Relu => self,
            _ => Tolerance { atol: 1.25 * self.atol, rtol: 1.25 * self.rtol + 2f64.powi(-20) },
        }
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
        Tolerance::for_spmm(k_eff, a.max_abs(), max_b, ep, max_c, TC::NAME == "f16").for_output::<TC>()
    }

    /// [`Tolerance::for_spmm`] for `C = alpha * (A^T @ B) + beta * C` ([`crate::cpu::spmm_t`]): `k_eff` is the
    /// most blocks in one block column of A times `bs` (A^T's longest dot product), the maxima measured on A, B
    /// and (when `beta != 0`) C, the output kind taken from `TC` (bf16 as in [`Tolerance::for_operands`]).
    pub fn for_operands_t<TA: Scalar, TB: Scalar, TC: Scalar>(
        a: &Bsr<TA>,
        b: &Matrix<TB>,
        c: &Matrix<TC>,
        ep: Epilogue,
    ) -> Tolerance {
        let mut per_col = vec![0usize; a.block_cols()];
        a.col_idx().iter().for_each(|&bc| per_col[bc as usize] += 1);
        let k_eff = per_col.into_iter().max().unwrap_or(0) * a.block_size();
        let max_c = if ep.beta == 0.0 { 0.0 } else { max_abs(c) };
        Tolerance::for_spmm(k_eff, a.max_abs(), max_abs(b), ep, max_c, TC::NAME == "f16").for_output::<TC>()
    }

    /// [`Tolerance::for_spmm`] for SDDMM, `values = alpha * (X @ Y^T) + beta * values` at a structure's blocks
    /// ([`crate::cpu::sddmm`]): every dot product has `K = X.cols` terms; the maxima measured on X, Y and (when
    /// `beta != 0`) the old values, the output kind taken from `TV` (bf16 as in [`Tolerance::for_operands`]).
    pub fn for_sddmm<TX: Scalar, TY: Scalar, TV: Scalar>(
        x: &Matrix<TX>,
        y: &Matrix<TY>,
        values: &Bsr<TV>,
        ep: Epilogue,
    ) -> Tolerance {
        let max_v = if ep.beta == 0.0 { 0.0 } else { values.max_abs() };
        Tolerance::for_spmm(x.cols(), max_abs(x), max_abs(y), ep, max_v, TV::NAME == "f16").for_output::<TV>()
    }

    /// A bf16 output's rounding (`rtol` `2^-7`, absolute floor `2^-126`), which [`Tolerance::for_spmm`] does not
    /// cover; other types unchanged.
    fn for_output<T: Scalar>(mut self) -> Tolerance {
        if T::NAME == "bf16" {
            self.rtol = 2f64.powi(-7);
            self.atol += 2f64.powi(-126);
        }
        self
    }

    /// [`Tolerance::for_operands`] for a product with a bias (one rounding of `alpha * acc + bias` in f32:
    /// `max|bias| * 2^-23` more of `atol`).
    pub fn for_operands_with_bias<TA: Scalar, TB: Scalar, TC: Scalar>(
        a: &Bsr<TA>,
        b: &Matrix<TB>,
        c: &Matrix<TC>,
        ep: Epilogue,
        bias: Option<&[TA]>,
    ) -> Tolerance {
        let mut t = Tolerance::for_operands(a, b, c, ep);
        let max_bias = bias.map_or(0.0, |v| v.iter().map(|x| x.to_f64().abs()).fold(0.0, f64::max));
        t.atol += max_bias * 2f64.powi(-23);
        t
    }
}

/// The largest magnitude of a matrix's `rows x cols` elements (NaN if one is NaN).
pub fn max_abs<T: Scalar>(m: &Matrix<T>) -> f64 {
    let mut best = 0.0f64;
    for r in 0..if m.cols() == 0 { 0 } else { m.rows() } {
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
    /// Largest `|got - expected| / |expected|` over the elements whose expected magnitude exceeds `atol` (where a
    /// relative error means something); 0 when there is none.
    pub max_rel_err: f64,
    /// The first failing element in row-major order (in the order given for [`compare_rows`]).
    pub first_failure: Option<(usize, usize, f64, f64)>,
    /// The element with the largest error relative to its bound.
    pub worst: Option<(usize, usize, f64, f64)>,
    /// The tolerance used.
    pub tolerance: Tolerance,
    /// Set when the shapes did not match (the comparison then failed without checking those elements).
    pub shape_error: Option<String>,
    /// Something worth saying that does not fail the comparison: a vacuous check ([`Expected::is_vacuous`]).
    pub note: Option<String>,
}

impl CheckReport {
    fn new(tolerance: Tolerance) -> Self {
        let shape_error = (!tolerance.is_valid()).then(|| {
            format!(
                "the tolerance (atol {:e}, rtol {:e}) is not finite and non-negative: non-finite operands?",
                tolerance.atol, tolerance.rtol
            )
        });
        CheckReport {
            checked: 0,
            failures: 0,
            max_abs_err: 0.0,
            max_rel_err: 0.0,
            first_failure: None,
            worst: None,
            tolerance,
            shape_error,
            note: None,
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
            // NaN or Inf where a finite value is expected fails whatever the bound (even an infinite one).
            let err = if got.is_finite() { (got - exp).abs() } else { f64::INFINITY };
            (got.is_finite() && err <= bound, err)
        } else {
            // A non-finite expectation must be met exactly (NaN by NaN, Inf by the same Inf).
            let same = got == exp || (got.is_nan() && exp.is_nan());
            (same, if same { 0.0 } else { f64::INFINITY })
        };
        self.max_abs_err = self.max_abs_err.max(err);
        if exp.is_finite() && exp.abs() > t.atol {
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
            "{verdict}: {} checked, {} failed, max abs err {:.3e}, max rel err {:.3e} where |expected| > atol \
             (atol {:.3e}, rtol {:.3e})",
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
        if let Some(n) = &self.note {
            write!(f, "; note: {n}")?;
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
    for r in 0..if got.cols() == 0 { 0 } else { got.rows() } {
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

/// Compares the stored values of `got` with `expected` (an SDDMM's, [`crate::cpu::reference_sddmm`]) under
/// `tol`: the values seen as a matrix of `nnzb * bs` rows and `bs` columns, so a reported `(row, col)` is element
/// `(row % bs, col)` of stored block `row / bs`. Different structures (shape, block size, `row_ptr`, `col_idx`)
/// fail the comparison (`shape_error`) without comparing values.
pub fn compare_values<TV: Scalar>(got: &Bsr<TV>, expected: &Bsr<f64>, tol: Tolerance) -> CheckReport {
    let mut rep = CheckReport::new(tol);
    let same = (got.rows(), got.cols(), got.block_size()) == (expected.rows(), expected.cols(), expected.block_size())
        && got.row_ptr() == expected.row_ptr()
        && got.col_idx() == expected.col_idx();
    if !same {
        rep.shape_error = Some(format!("got is {got:?}, expected is {expected:?}: not the same structure"));
        return rep;
    }
    let bs = got.block_size();
    let mut worst = 0.0;
    for (e, (g, &x)) in got.values().iter().zip(expected.values()).enumerate() {
        rep.add(e / bs, e % bs, g.to_f64(), x, &mut worst);
    }
    rep
}

/// Bit equality: every `got` element, widened to f64, must equal `expected` exactly (holds for
/// integer-valued inputs whose products and sums are exact in f32).
pub fn compare_exact<TC: Scalar>(got: &Matrix<TC>, expected: &Matrix<f64>) -> CheckReport {
    compare(got, expected, Tolerance::EXACT)
}

/// Which rows of C a check compares with the oracle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowSample {
    /// Every row.
    All,
    /// `count` rows drawn at random from `seed` (duplicates removed), plus the first and the last row.
    Random {
        /// Rows drawn.
        count: usize,
        /// Seed of the draw.
        seed: u64,
    },
}

impl RowSample {
    /// Outputs up to this many elements are checked whole by [`RowSample::auto`].
    pub const FULL_CHECK_ELEMENTS: usize = 1 << 20;

    /// Every row when the output has at most [`RowSample::FULL_CHECK_ELEMENTS`] elements, else `count` random
    /// rows (plus the first and the last): the oracle costs `2 * nnzb * bs^2 / block_rows` f64 operations per
    /// row and column, so a 4096 x 4096 output checked whole takes tens of seconds on a few cores.
    pub fn auto(m: usize, n: usize, count: usize, seed: u64) -> RowSample {
        if m.saturating_mul(n) <= Self::FULL_CHECK_ELEMENTS {
            RowSample::All
        } else {
            RowSample::Random { count, seed }
        }
    }

    /// The row indices (sorted, unique) for an output of `m` rows.
    pub fn rows(&self, m: usize) -> Vec<usize> {
        match *self {
            RowSample::All => (0..m).collect(),
            RowSample::Random { .. } => self.try_rows(m).unwrap_or_default(),
        }
    }

    /// [`RowSample::rows`], allocated fallibly ([`Error::OutOfMemory`](crate::Error) for a list that does not
    /// fit, instead of an abort).
    pub fn try_rows(&self, m: usize) -> crate::Result<Vec<usize>> {
        match *self {
            RowSample::All => {
                let mut rows = crate::alloc::with_capacity("sampled rows", m)?;
                rows.extend(0..m);
                Ok(rows)
            }
            RowSample::Random { count, seed } => {
                if m == 0 {
                    return Ok(Vec::new());
                }
                let mut rng = crate::rng::Rng::new(seed);
                let mut rows = crate::alloc::with_capacity("sampled rows", count.min(m).saturating_add(2))?;
                rows.extend((0..count.min(m)).map(|_| rng.below(m as u64) as usize));
                rows.extend([0, m - 1]);
                rows.sort_unstable();
                rows.dedup();
                Ok(rows)
            }
        }
    }
}

/// The f64 oracle's answer on some rows of C, with the tolerance of the output type: computed once, compared with
/// any number of outputs ([`Expected::check`]). The one verification path of the CLI, the benchmark, the tuner
/// and the tests.
#[derive(Clone, Debug)]
pub struct Expected {
    rows: Vec<(usize, Vec<f64>)>,
    tolerance: Tolerance,
    m: usize,
    vacuous: bool,
}

impl Expected {
    /// Computes the oracle (`alpha * (A @ B) + beta * C0` in f64) on the rows `sample` picks, in chunks, calling
    /// `progress(rows done, rows in all)` after each chunk (for progress lines on long checks). The tolerance is
    /// [`Tolerance::for_operands`] for an output of type `TC`. Errors: [`Error::ShapeMismatch`](crate::Error)
    /// when the operands do not fit; [`Error::NonFinite`](crate::Error) naming the first NaN or infinity in A, B
    /// or (when `beta != 0`) C, and [`Error::InvalidArgument`](crate::Error) for a non-finite alpha or beta: a
    /// product of non-finite operands has no tolerance to check against.
    pub fn compute<TA: Scalar, TB: Scalar, TC: Scalar>(
        a: &Bsr<TA>,
        b: &Matrix<TB>,
        c0: &Matrix<TC>,
        ep: Epilogue,
        sample: RowSample,
        progress: impl FnMut(usize, usize),
    ) -> crate::Result<Expected> {
        Expected::compute_with_bias(a, b, c0, ep, None, sample, progress)
    }

    /// [`Expected::compute`] for `act(alpha * (A @ B) + bias) + beta * C0` (the tolerance from
    /// [`Tolerance::for_operands_with_bias`]); a non-finite bias value is [`Error::NonFinite`](crate::Error).
    pub fn compute_with_bias<TA: Scalar, TB: Scalar, TC: Scalar>(
        a: &Bsr<TA>,
        b: &Matrix<TB>,
        c0: &Matrix<TC>,
        ep: Epilogue,
        bias: Option<&[TA]>,
        sample: RowSample,
        mut progress: impl FnMut(usize, usize),
    ) -> crate::Result<Expected> {
        if let Some(i) = bias.and_then(|v| v.iter().position(|x| !x.to_f64().is_finite())) {
            let value = format!("{:e}", bias.map_or(0.0, |v| v[i].to_f64()));
            return Err(crate::Error::NonFinite { what: "bias", value, index: (i, 0) });
        }
        // The oracle of non-finite operands is not a product to check against: refuse it with the position.
        if let Some(i) = a.values().iter().position(|v| !v.to_f64().is_finite()) {
            let blk = (a.block_size() * a.block_size()).max(1);
            let value = format!("{:e}", a.values()[i].to_f64());
            return Err(crate::Error::NonFinite { what: "A (block, offset)", value, index: (i / blk, i % blk) });
        }
        if let Some((r, c, v)) = b.first_non_finite() {
            return Err(crate::Error::NonFinite { what: "B", value: format!("{v:e}"), index: (r, c) });
        }
        if ep.beta != 0.0
            && let Some((r, c, v)) = c0.first_non_finite()
        {
            return Err(crate::Error::NonFinite {
                what: "C (read: beta != 0)",
                value: format!("{v:e}"),
                index: (r, c),
            });
        }
        if !ep.alpha.is_finite() || !ep.beta.is_finite() {
            return Err(crate::Error::InvalidArgument {
                name: "epilogue",
                reason: format!("alpha {} and beta {} must be finite", ep.alpha, ep.beta),
            });
        }
        // With N == 0 there is nothing to check (and the row list of a huge empty output is not built).
        let rows = if b.cols() == 0 { Vec::new() } else { sample.try_rows(a.rows())? };
        // Chunks of about 2^22 oracle multiply-adds, at least one row.
        let per_row = (a.nnzb() * a.block_size() * a.block_size()).div_ceil(a.rows().max(1)).max(1) * b.cols().max(1);
        let chunk = ((1usize << 22) / per_row).max(1);
        let mut out = crate::alloc::with_capacity("oracle rows", rows.len())?;
        if rows.is_empty() {
            crate::cpu::reference_rows_with_bias(a, b, c0, ep, bias, &[])?; // shape check
        }
        for part in rows.chunks(chunk) {
            out.extend(crate::cpu::reference_rows_with_bias(a, b, c0, ep, bias, part)?);
            progress(out.len(), rows.len());
        }
        // A check is vacuous when its expectation is all zero and nothing in the checked rows could have made it
        // otherwise: alpha is zero or the rows hold no stored nonzero value of A (empty rows, explicit zeros, values
        // that flushed to zero on conversion). It is still a check (the output must be zero), but says little.
        let bs = a.block_size().max(1);
        let blk = bs * bs;
        let stored_nonzero = |r: usize| {
            let (br, i) = (r / bs, r % bs);
            a.block_row_range(br)
                .any(|b| a.values()[b * blk + i * bs..b * blk + (i + 1) * bs].iter().any(|v| v.to_f64() != 0.0))
        };
        let vacuous = !out.is_empty()
            && out.iter().all(|(_, v)| v.iter().all(|&x| x == 0.0))
            && (ep.alpha == 0.0 || !out.iter().any(|(r, _)| stored_nonzero(*r)));
        let m = if b.cols() == 0 { 0 } else { a.rows() };
        let tolerance = Tolerance::for_operands_with_bias(a, b, c0, ep, bias);
        Ok(Expected { rows: out, tolerance, m, vacuous })
    }

    /// The same expectation under another tolerance (for an output of another precision).
    pub fn with_tolerance(mut self, tolerance: Tolerance) -> Expected {
        self.tolerance = tolerance;
        self
    }

    /// The tolerance used.
    pub fn tolerance(&self) -> Tolerance {
        self.tolerance
    }

    /// Rows the oracle computed.
    pub fn rows(&self) -> &[(usize, Vec<f64>)] {
        &self.rows
    }

    /// Whether every row of C is covered (always, for an output without columns).
    pub fn is_full(&self) -> bool {
        self.rows.len() == self.m
    }

    /// Whether the check is vacuous: the expected rows are all exactly zero, and alpha is zero or the checked
    /// rows hold no stored nonzero value of A (so any product of A and B is zero there). Such a check still
    /// compares (zero must be got: exactly, up to the tolerance's `atol`), and passes when the output is zero;
    /// [`Expected::check`] adds a [`CheckReport::note`] saying it is vacuous, which does not fail it.
    pub fn is_vacuous(&self) -> bool {
        self.vacuous
    }

    /// Compares `got` with the expected rows; see [`CheckReport`]. A vacuous expectation
    /// ([`Expected::is_vacuous`]) is noted in [`CheckReport::note`], not failed.
    pub fn check<TC: Scalar>(&self, got: &Matrix<TC>) -> CheckReport {
        let mut report = compare_rows(got, &self.rows, self.tolerance);
        self.flag_vacuous(&mut report);
        report
    }

    /// [`Expected::check`] on an output read through `get(row, col)` (for outputs held transposed or in another
    /// layout); `cols` is the output's column count.
    pub fn check_with(&self, cols: usize, get: impl Fn(usize, usize) -> f64) -> CheckReport {
        let mut report = CheckReport::new(self.tolerance);
        let mut worst = 0.0;
        for (r, exp) in &self.rows {
            if exp.len() != cols {
                report.shape_error.get_or_insert_with(|| {
                    format!("row {r} has {} expected values, the output has {cols} columns", exp.len())
                });
                continue;
            }
            for (c, &e) in exp.iter().enumerate() {
                report.add(*r, c, get(*r, c), e, &mut worst);
            }
        }
        self.flag_vacuous(&mut report);
        report
    }

    fn flag_vacuous(&self, report: &mut CheckReport) {
        if self.vacuous {
            report.note = Some(format!(
                "vacuous check: the {} checked rows expect only zeros (alpha 0, or no stored nonzero value of A in \
                 them)",
                self.rows.len()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 64 x 32 matrix, bs 16: block row 0 holds one block at block column 1 whose values are `f(i, j)`.
    fn one_block(f: impl Fn(usize, usize) -> f32) -> Bsr<f32> {
        let values: Vec<f32> = (0..256).map(|p| f(p / 16, p % 16)).collect();
        Bsr::try_new(64, 32, 16, vec![0, 1, 1, 1, 1], vec![1], values).unwrap()
    }

    fn zeros_got() -> Matrix<f32> {
        Matrix::zeros(64, 8).unwrap()
    }

    #[test]
    fn an_all_zero_expectation_passes_a_zero_output_with_a_note() {
        let b = Matrix::<f32>::random(32, 8, 3).unwrap();
        let c0 = zeros_got();
        // Explicit stored zeros; and a block whose only nonzero values underflowed (here: are zero) in rows 1..
        let a = one_block(|_, _| 0.0);
        let e = Expected::compute(&a, &b, &c0, Epilogue::default(), RowSample::All, |_, _| {}).unwrap();
        assert!(e.is_vacuous());
        let rep = e.check(&zeros_got());
        assert!(rep.passed(), "{rep}");
        assert_eq!(rep.checked, 64 * 8);
        assert!(rep.note.as_deref().is_some_and(|n| n.contains("vacuous")), "{rep}");
        assert!(rep.to_string().starts_with("PASS") && rep.to_string().contains("note: vacuous"), "{rep}");
        // Zero is still checked: a nonzero output fails.
        let mut bad = zeros_got();
        bad.set(5, 3, 1.0);
        let rep = e.check(&bad);
        assert!(!rep.passed() && rep.first_failure == Some((5, 3, 1.0, 0.0)), "{rep}");
        // alpha 0 with beta 0: vacuous too, whatever A holds.
        let a = one_block(|i, j| (i + j + 1) as f32);
        let ep = Epilogue::new(0.0, 0.0);
        let e = Expected::compute(&a, &b, &c0, ep, RowSample::All, |_, _| {}).unwrap();
        assert!(e.is_vacuous() && e.check(&zeros_got()).passed());
    }

    #[test]
    fn vacuous_only_when_the_checked_rows_hold_no_stored_nonzero() {
        let b = Matrix::<f32>::random(32, 8, 4).unwrap();
        let c0 = zeros_got();
        // Only row 0 of the block holds values: the other rows expect zeros, but row 0 does not.
        let a = one_block(|i, j| if i == 0 { (j + 1) as f32 } else { 0.0 });
        let e = Expected::compute(&a, &b, &c0, Epilogue::default(), RowSample::All, |_, _| {}).unwrap();
        assert!(!e.is_vacuous());
        let got = crate::cpu::reference(&a, &b, &c0, Epilogue::default()).unwrap();
        let mut got32 = zeros_got();
        for r in 0..64 {
            for c in 0..8 {
                got32.set(r, c, got.get(r, c) as f32);
            }
        }
        let rep = e.check(&got32);
        assert!(rep.passed() && rep.note.is_none(), "{rep}");
        // Sampled rows that miss row 0: the first and the last row (and nothing drawn) hold no stored nonzero.
        let a = Bsr::try_new(64, 32, 16, vec![0, 0, 1, 1, 1], vec![0], vec![1.0f32; 256]).unwrap();
        let sample = RowSample::Random { count: 0, seed: 1 };
        let e = Expected::compute(&a, &b, &c0, Epilogue::default(), sample, |_, _| {}).unwrap();
        assert_eq!(e.rows().iter().map(|(r, _)| *r).collect::<Vec<_>>(), [0, 63]);
        assert!(e.is_vacuous());
        let rep = e.check(&zeros_got());
        assert!(rep.passed() && rep.note.is_some(), "{rep}");
        // The same rows with a bias: the expectation is not zero, so not vacuous.
        let bias = vec![0.5f32; 64];
        let e = Expected::compute_with_bias(&a, &b, &c0, Epilogue::default(), Some(&bias), sample, |_, _| {}).unwrap();
        assert!(!e.is_vacuous());
    }

    #[test]
    fn row_lists_are_allocated_fallibly() {
        assert!(RowSample::All.try_rows(1 << 58).is_err(), "2^61 bytes of row indices");
        assert_eq!(RowSample::All.try_rows(3).unwrap(), [0, 1, 2]);
        let r = RowSample::Random { count: 5, seed: 9 };
        assert_eq!(r.try_rows(1000).unwrap(), r.rows(1000));
        let all = RowSample::Random { count: usize::MAX, seed: 1 }.try_rows(4).unwrap();
        assert!(all.first() == Some(&0) && all.last() == Some(&3) && all.windows(2).all(|w| w[0] < w[1]), "{all:?}");
    }
}
