//! A run set against an earlier one, case by case (`sparsek bench --compare OLD.json`): the perf-regression
//! gate.
//!
//! The figure compared is sparsek's speed relative to cuBLAS *measured in the same run*, `ratio_vs_cublas`
//! (sparsek's effective TFLOPS over cuBLAS's, i.e. cuBLAS time / sparsek time up to the case's fixed flop
//! counts): a GPU under sustained load changes its clocks from run to run, and machines differ, but both
//! contenders of one run see the same clocks, since they are timed interleaved launch by launch. A case
//! **regresses** when its new ratio is lower than the old one by more than the threshold, relatively:
//! `new / old - 1 < -threshold`. Where either run has no trusted cuBLAS time for the case (cuBLAS missing or its check
//! failed), sparsek's own speed is compared instead (effective TFLOPS, i.e. its time for the same work), and
//! the table says so.
//!
//! The default threshold, [`DEFAULT_THRESHOLD_PCT`] = 5%, sits above the run-to-run noise of the interleaved
//! medians measured on the H100 (about 1-3% per case) so that a gate does not fail on noise, and below the
//! changes worth catching.
//!
//! A case whose new sparsek output failed its check (or that could not run) fails the comparison whatever its
//! time. Cases only in the new run are listed, not compared. A gate that compares less than it was given fails
//! too: cases of the old run missing from the new one (a new run without records misses them all; a run of
//! cases chosen by hand keeps only the common ones, [`Comparison::common_only`]), a new run without any case, a
//! malformed record in either run ([`Record::validate`]: a block size of 0, a density of 500%, a time that is
//! not finite and positive), and a change that is not finite.

use std::collections::HashMap;
use std::fmt;

use crate::grid::Source;
use crate::report::{Header, Record, Results, fmt_ms};

/// The default regression threshold, in percent (see the module documentation).
pub const DEFAULT_THRESHOLD_PCT: f64 = 5.0;

/// What a case's change was measured on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    /// sparsek's speed relative to cuBLAS measured in the same run (`ratio_vs_cublas`).
    Cublas,
    /// sparsek's own speed (effective TFLOPS: the same work over its time), because the old or the new run
    /// has no trusted cuBLAS time for the case.
    SparsekTime,
}

/// The outcome of one case.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Slower than the old run by more than the threshold.
    Regressed,
    /// Faster than the old run by more than the threshold.
    Faster,
    /// Within the threshold.
    Unchanged,
    /// The new run's sparsek output failed its check, or sparsek could not run (why).
    Failed(String),
    /// Not compared (why): the old run has no trusted sparsek time, or does not have the case.
    NotCompared(String),
}

/// One case of the new run, against the same case of the old run.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseChange {
    /// The case (`8192x8192x8192 bs64 22% uniform`).
    pub case: String,
    /// sparsek in the old run (nothing when the old run does not have the case).
    pub old: Speed,
    /// sparsek in the new run.
    pub new: Speed,
    /// The change of speed, when both runs have a speed to compare (see the module documentation).
    pub change: Option<Change>,
    /// The outcome.
    pub verdict: Verdict,
}

/// A case's change of speed between the runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Change {
    /// What it was measured on.
    pub basis: Basis,
    /// In percent: positive is faster, negative slower.
    pub pct: f64,
}

/// sparsek's speed in one run's record of a case.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Speed {
    /// sparsek's median, ms.
    pub ms: Option<f64>,
    /// sparsek's effective TFLOPS over cuBLAS's TFLOPS (trusted cuBLAS times only).
    pub ratio: Option<f64>,
}

impl Speed {
    fn of(r: &Record) -> Speed {
        Speed { ms: r.sparsek.ms(), ratio: r.ratio_vs_cublas().filter(|_| r.cublas.trusted()) }
    }
}

/// A new run against an old one ([`compare`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// The regression threshold, in percent.
    pub threshold_pct: f64,
    /// The two runs, as the comparison's heading names them.
    pub runs: Runs,
    /// The new run's cases, in its order.
    pub cases: Vec<CaseChange>,
    /// Cases of the old run that the new run does not have (each fails the comparison).
    pub missing: Vec<String>,
    /// What else makes the comparison fail, one line each: malformed records of the old run, a new run without
    /// cases.
    pub problems: Vec<String>,
}

/// What identifies a case across runs: the shape, block size, requested density and pattern.
type Key = (usize, usize, usize, usize, u64, String);

fn key(r: &Record) -> Key {
    let c = &r.case;
    // A file case: identified by its file name, whatever directory it was read from.
    let density = if matches!(c.source, Source::File(_)) { 0 } else { c.density.to_bits() };
    (c.m, c.n, c.k, c.bs, density, c.pattern_name())
}

/// The two runs of a comparison, one line each (their headers' GPU, date and commit), and whether their GPUs differ.
#[derive(Clone, Debug, PartialEq)]
pub struct Runs {
    /// The old run in one line (GPU, date, commit).
    pub old: String,
    /// The new run in one line.
    pub new: String,
    /// The runs were made on GPUs of different names.
    pub different_gpus: bool,
}

impl Runs {
    fn of(old: &Header, new: &Header) -> Runs {
        let line = |h: &Header| {
            let dirty = if h.git_dirty == Some(true) { " (uncommitted changes)" } else { "" };
            format!("{}, {}, sparsek {} at {}{dirty}", h.gpu, h.date_utc, h.sparsek_version, h.git_commit)
        };
        Runs { old: line(old), new: line(new), different_gpus: old.gpu != new.gpu }
    }
}

impl fmt::Display for Runs {
    /// `OLD: ...` and `NEW: ...`, and a note when the GPUs differ.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "OLD: {}", self.old)?;
        writeln!(f, "NEW: {}", self.new)?;
        if self.different_gpus {
            writeln!(
                f,
                "Note: different GPUs. Ratios to cuBLAS carry across machines better than times, but not exactly \
                 (memory bandwidth and clocks favour the contenders differently)."
            )?;
        }
        Ok(())
    }
}

/// Compares every case of `new` with the same case of `old` (see the module documentation for the rule);
/// `threshold_pct` in percent (5.0 for 5%).
pub fn compare(old: &Results, new: &Results, threshold_pct: f64) -> Comparison {
    let mut old_by_key: HashMap<Key, &Record> = HashMap::new();
    for r in &old.records {
        old_by_key.entry(key(r)).or_insert(r);
    }
    let new_keys: std::collections::HashSet<Key> = new.records.iter().map(key).collect();
    let cases = new.records.iter().map(|n| change(old_by_key.get(&key(n)).copied(), n, threshold_pct)).collect();
    let missing = old.records.iter().filter(|r| !new_keys.contains(&key(r))).map(|r| r.case.to_string()).collect();
    let mut problems: Vec<String> = old
        .records
        .iter()
        .filter_map(|r| r.validate().err().map(|why| format!("OLD's record {} is malformed: {why}", r.case)))
        .collect();
    if new.records.is_empty() {
        problems.push("NEW has no cases".into());
    }
    Comparison { threshold_pct, runs: Runs::of(&old.header, &new.header), cases, missing, problems }
}

/// Why sparsek's result in `r` cannot be trusted, if it cannot.
fn sparsek_failure(r: &Record) -> Option<String> {
    if let Some(e) = &r.error {
        return Some(e.clone());
    }
    match &r.sparsek.check {
        None => Some("sparsek's output was not checked".into()),
        Some(c) if !c.passed => Some(format!("sparsek's check failed: {}", c.detail)),
        Some(_) if r.sparsek.ms().is_none() => Some("sparsek was not timed".into()),
        Some(_) => None,
    }
}

fn change(old: Option<&Record>, new: &Record, threshold_pct: f64) -> CaseChange {
    let mut c = CaseChange {
        case: new.case.to_string(),
        old: old.map(Speed::of).unwrap_or_default(),
        new: Speed::of(new),
        change: None,
        verdict: Verdict::Unchanged,
    };
    let old = match old {
        Some(o) if o.validate().is_err() => {
            c.verdict = Verdict::NotCompared("OLD's record is malformed".into());
            None
        }
        Some(o) if sparsek_failure(o).is_none() => Some(o),
        Some(_) => {
            c.verdict = Verdict::NotCompared("OLD has no trusted sparsek time".into());
            None
        }
        None => {
            c.verdict = Verdict::NotCompared("not in OLD".into());
            None
        }
    };
    if let Some(o) = old {
        let speeds = match (c.old.ratio, c.new.ratio) {
            (Some(a), Some(b)) => Some((Basis::Cublas, a, b)),
            _ => {
                Some(Basis::SparsekTime).zip(o.sparsek_tflops()).zip(new.sparsek_tflops()).map(|((k, a), b)| (k, a, b))
            }
        };
        if speeds.is_some_and(|(_, a, _)| a.is_nan() || a <= 0.0) {
            c.verdict = Verdict::NotCompared("OLD's speed is 0 (an immeasurably long time)".into());
        }
        if let Some((basis, a, b)) = speeds.filter(|&(_, a, _)| a > 0.0) {
            let pct = 100.0 * (b / a - 1.0);
            c.change = Some(Change { basis, pct });
            c.verdict = if !pct.is_finite() {
                Verdict::Failed(format!("the change is not finite ({pct}%): a time of 0 or below?"))
            } else if pct < -threshold_pct {
                Verdict::Regressed
            } else if pct > threshold_pct {
                Verdict::Faster
            } else {
                Verdict::Unchanged
            };
        }
    }
    if let Some(why) = sparsek_failure(new) {
        c.verdict = Verdict::Failed(why);
    }
    if let Err(why) = new.validate() {
        c.verdict = Verdict::Failed(format!("malformed record: {why}"));
    }
    c
}

impl Comparison {
    /// The cases that regressed beyond the threshold.
    pub fn regressions(&self) -> impl Iterator<Item = &CaseChange> {
        self.cases.iter().filter(|c| c.verdict == Verdict::Regressed)
    }

    /// The cases whose new sparsek result failed its check or could not be had.
    pub fn failures(&self) -> impl Iterator<Item = &CaseChange> {
        self.cases.iter().filter(|c| matches!(c.verdict, Verdict::Failed(_)))
    }

    /// No regression beyond the threshold, no failed case, no case of OLD missing, nothing malformed.
    pub fn passed(&self) -> bool {
        self.regressions().next().is_none()
            && self.failures().next().is_none()
            && self.missing.is_empty()
            && self.problems.is_empty()
    }

    /// Keeps only the cases both runs have (for a new run of cases chosen by hand, which need not cover the
    /// old run's, nor be in it); returns how many of the old run's cases were left out.
    pub fn common_only(&mut self) -> usize {
        self.cases.retain(|c| !matches!(&c.verdict, Verdict::NotCompared(why) if why == "not in OLD"));
        std::mem::take(&mut self.missing).len()
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |r| format!("{:.1}%", 100.0 * r))
}

impl fmt::Display for Comparison {
    /// The table (one row per case, Markdown, columns aligned), then the verdict in words.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.runs)?;
        let head = [
            "case",
            "sparsek ms OLD",
            "sparsek ms NEW",
            "% of cuBLAS OLD",
            "% of cuBLAS NEW",
            "change",
            "compared on",
            "verdict",
        ];
        let rows: Vec<[String; 8]> = self
            .cases
            .iter()
            .map(|c| {
                [
                    c.case.clone(),
                    fmt_ms(c.old.ms),
                    fmt_ms(c.new.ms),
                    pct(c.old.ratio),
                    pct(c.new.ratio),
                    c.change.map_or_else(|| "-".into(), |c| format!("{:+.1}%", c.pct)),
                    match c.change.map(|c| c.basis) {
                        None => "-".into(),
                        Some(Basis::Cublas) => "ratio to cuBLAS".into(),
                        Some(Basis::SparsekTime) => "sparsek time (no cuBLAS)".into(),
                    },
                    match &c.verdict {
                        Verdict::Regressed => format!("REGRESSED (> {}%)", self.threshold_pct),
                        Verdict::Faster => "faster".into(),
                        Verdict::Unchanged => "ok".into(),
                        Verdict::Failed(_) => "FAILED".into(),
                        Verdict::NotCompared(why) => format!("not compared: {why}"),
                    },
                ]
            })
            .collect();
        let mut width = head.map(|h| h.chars().count());
        for r in &rows {
            for (w, cell) in width.iter_mut().zip(r) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |f: &mut fmt::Formatter<'_>, cells: &[String]| -> fmt::Result {
            for (i, (cell, w)) in cells.iter().zip(width).enumerate() {
                // The case and the text columns left-aligned, the numbers right-aligned.
                if i == 0 || i >= 6 { write!(f, "| {cell:<w$} ")? } else { write!(f, "| {cell:>w$} ")? }
            }
            writeln!(f, "|")
        };
        line(f, &head.map(String::from))?;
        let rule: Vec<String> = width
            .iter()
            .enumerate()
            .map(|(i, &w)| if i == 0 || i >= 6 { "-".repeat(w) } else { format!("{}:", "-".repeat(w - 1)) })
            .collect();
        line(f, &rule)?;
        for r in &rows {
            line(f, r)?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "Regression: sparsek's speed relative to cuBLAS in the same run (sparsek's own time where a run has no \
             trusted cuBLAS time) more than {}% below OLD's.",
            self.threshold_pct
        )?;
        if !self.missing.is_empty() {
            writeln!(f, "MISSING: in OLD but not in NEW ({}): {}", self.missing.len(), self.missing.join("; "))?;
        }
        for p in &self.problems {
            writeln!(f, "FAILED: {p}")?;
        }
        for c in self.failures() {
            if let Verdict::Failed(why) = &c.verdict {
                writeln!(f, "FAILED {}: {why}", c.case)?;
            }
        }
        let regressed: Vec<&str> = self.regressions().map(|c| c.case.as_str()).collect();
        if regressed.is_empty() {
            writeln!(f, "No regression beyond {}%.", self.threshold_pct)?;
        } else {
            writeln!(f, "REGRESSED beyond {}% ({}): {}", self.threshold_pct, regressed.len(), regressed.join("; "))?;
        }
        if !self.passed() {
            let (failed, missing) = (self.failures().count(), self.missing.len());
            writeln!(
                f,
                "COMPARISON FAILED: {} regressed, {failed} failed, {missing} missing from NEW, {} other problems.",
                regressed.len(),
                self.problems.len()
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Outcome;
    use crate::report::tests::{header, outcome, record};

    fn results(records: Vec<Record>) -> Results {
        Results { header: header(), complete: true, records }
    }

    fn committed() -> Results {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/bench/latest.json");
        crate::json::read_results(path).unwrap()
    }

    #[test]
    fn a_run_against_itself_passes() {
        let r = committed();
        let c = compare(&r, &r, DEFAULT_THRESHOLD_PCT);
        assert!(c.passed(), "{c}");
        assert_eq!(c.cases.len(), 21);
        assert!(c.missing.is_empty());
        for case in &c.cases {
            assert_eq!(
                (case.change, &case.verdict),
                (Some(Change { basis: Basis::Cublas, pct: 0.0 }), &Verdict::Unchanged)
            );
        }
        let text = c.to_string();
        assert!(text.contains("No regression beyond 5%."), "{text}");
        assert!(text.contains("| 8192x8192x8192 bs16 5% uniform "), "{text}");
        assert!(!text.contains("different GPUs"));
        let mut other = r.clone();
        other.header.gpu = format!("{} (another)", r.header.gpu);
        assert!(compare(&r, &other, 5.0).to_string().contains("Note: different GPUs."));
    }

    #[test]
    fn a_regression_is_detected() {
        let old = results(vec![record(64, 0.22, 1.0, Some(1.5)), record(32, 0.1, 1.0, Some(1.5))]);
        // bs64: sparsek 10% slower at the same cuBLAS time. bs32: sparsek 3% slower (noise).
        let new = results(vec![record(64, 0.22, 1.1, Some(1.5)), record(32, 0.1, 1.03, Some(1.5))]);
        let c = compare(&old, &new, 5.0);
        assert!(!c.passed());
        assert_eq!(c.cases[0].verdict, Verdict::Regressed);
        assert_eq!(c.cases[0].change.map(|c| c.basis), Some(Basis::Cublas));
        assert!((c.cases[0].change.unwrap().pct - 100.0 * (1.0 / 1.1 - 1.0)).abs() < 1e-9);
        assert_eq!(c.cases[1].verdict, Verdict::Unchanged);
        assert_eq!(c.regressions().count(), 1);
        let text = c.to_string();
        assert!(text.contains("REGRESSED beyond 5% (1): 8192x8192x8192 bs64 22% uniform"), "{text}");
        // With a looser threshold it passes.
        assert!(compare(&old, &new, 10.0).passed());
    }

    #[test]
    fn slower_clocks_are_not_a_regression() {
        // Both contenders 20% slower (a hotter GPU): the ratio to cuBLAS is unchanged.
        let old = results(vec![record(64, 0.22, 1.0, Some(1.5))]);
        let new = results(vec![record(64, 0.22, 1.2, Some(1.8))]);
        let c = compare(&old, &new, 5.0);
        assert!(c.passed(), "{c}");
        assert!(c.cases[0].change.unwrap().pct.abs() < 1e-9);
    }

    #[test]
    fn an_improvement_is_not_flagged() {
        let old = results(vec![record(64, 0.22, 1.0, Some(1.5))]);
        let new = results(vec![record(64, 0.22, 0.8, Some(1.5))]);
        let c = compare(&old, &new, 5.0);
        assert!(c.passed());
        assert_eq!(c.cases[0].verdict, Verdict::Faster);
        assert!((c.cases[0].change.unwrap().pct - 25.0).abs() < 1e-9);
    }

    #[test]
    fn missing_and_added_cases_are_reported() {
        let old = results(vec![record(64, 0.22, 1.0, Some(1.5)), record(16, 0.05, 1.0, Some(1.5))]);
        let new = results(vec![record(64, 0.22, 1.0, Some(1.5)), record(128, 0.5, 1.0, Some(1.5))]);
        let mut c = compare(&old, &new, 5.0);
        assert_eq!(c.missing, ["8192x8192x8192 bs16 5% uniform"]);
        assert_eq!(c.cases[1].verdict, Verdict::NotCompared("not in OLD".into()));
        assert!(!c.passed(), "a case of OLD missing from NEW fails the comparison");
        let text = c.to_string();
        assert!(text.contains("MISSING: in OLD but not in NEW (1): 8192x8192x8192 bs16 5% uniform"), "{text}");
        assert!(text.contains("not compared: not in OLD"), "{text}");
        assert!(text.contains("COMPARISON FAILED: 0 regressed, 0 failed, 1 missing from NEW"), "{text}");
        // A run of chosen cases: only the common ones (an added case does not fail it).
        assert_eq!(c.common_only(), 1);
        assert_eq!(c.cases.len(), 1);
        assert!(c.missing.is_empty());
        assert!(c.passed(), "{c}");
    }

    #[test]
    fn without_cublas_the_sparsek_time_is_compared() {
        // cuBLAS unavailable in the new run: sparsek's time decides.
        let old = results(vec![record(64, 0.22, 1.0, Some(1.5)), record(32, 0.22, 1.0, Some(1.5))]);
        let new = results(vec![record(64, 0.22, 1.2, None), record(32, 0.22, 1.01, None)]);
        let c = compare(&old, &new, 5.0);
        assert_eq!(c.cases[0].change.map(|c| c.basis), Some(Basis::SparsekTime));
        assert_eq!(c.cases[0].verdict, Verdict::Regressed);
        assert!((c.cases[0].change.unwrap().pct - 100.0 * (1.0 / 1.2 - 1.0)).abs() < 1e-9);
        assert!(c.cases[0].old.ratio.is_some());
        assert_eq!(c.cases[0].new.ratio, None);
        assert_eq!(c.cases[1].verdict, Verdict::Unchanged);
        assert!(c.to_string().contains("sparsek time (no cuBLAS)"));
        // An untrusted cuBLAS time (its check failed) is no basis either.
        let mut bad = record(64, 0.22, 1.0, Some(1.0));
        bad.cublas.check.as_mut().unwrap().passed = false;
        let c = compare(&old, &results(vec![bad]), 5.0);
        assert_eq!(
            (c.cases[0].change.map(|c| c.basis), &c.cases[0].verdict),
            (Some(Basis::SparsekTime), &Verdict::Unchanged)
        );
    }

    #[test]
    fn a_failed_check_fails_whatever_the_time() {
        let old = results(vec![record(64, 0.22, 1.0, Some(1.5))]);
        let mut fast_but_wrong = record(64, 0.22, 0.5, Some(1.5));
        fast_but_wrong.sparsek.check.as_mut().unwrap().passed = false;
        let mut crashed = record(32, 0.22, 0.5, Some(1.5));
        crashed.error = Some("launch failed".into());
        crashed.sparsek = outcome("sparsek", None, None);
        let c = compare(&old, &results(vec![fast_but_wrong, crashed]), 5.0);
        assert!(!c.passed());
        assert!(matches!(&c.cases[0].verdict, Verdict::Failed(why) if why.contains("check failed")));
        assert_eq!(c.cases[1].verdict, Verdict::Failed("launch failed".into()));
        assert_eq!(c.failures().count(), 2);
        assert!(c.to_string().contains("FAILED 8192x8192x8192 bs32 22% uniform: launch failed"));
        // An old run without a trusted sparsek time gives nothing to compare with.
        let mut old_bad = record(64, 0.22, 1.0, Some(1.5));
        old_bad.sparsek = Outcome::unavailable("x");
        let c = compare(&results(vec![old_bad]), &results(vec![record(64, 0.22, 9.0, Some(1.5))]), 5.0);
        assert!(c.passed());
        assert!(matches!(c.cases[0].verdict, Verdict::NotCompared(_)));
    }

    #[test]
    fn a_new_run_without_records_fails() {
        let old = results(vec![record(64, 0.22, 1.0, Some(1.5)), record(16, 0.05, 1.0, Some(1.5))]);
        let c = compare(&old, &results(vec![]), 5.0);
        assert!(!c.passed());
        assert_eq!(c.missing.len(), 2);
        let text = c.to_string();
        assert!(text.contains("COMPARISON FAILED") && text.contains("FAILED: NEW has no cases"), "{text}");
        // Nothing against nothing compares nothing: a failed gate too.
        assert!(!compare(&results(vec![]), &results(vec![]), 5.0).passed());
    }

    #[test]
    fn times_must_be_finite_and_positive() {
        let old = results(vec![record(64, 0.22, 1.0, Some(1.5))]);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            // In NEW: sparsek's time, or cuBLAS's (which makes the ratio, and the change, NaN or infinite).
            let mut sparsek_bad = record(64, 0.22, 1.0, Some(1.5));
            sparsek_bad.sparsek.timing.as_mut().unwrap().median_ms = bad;
            let mut cublas_bad = record(64, 0.22, 1.0, Some(1.5));
            cublas_bad.cublas.timing.as_mut().unwrap().median_ms = bad;
            for new in [sparsek_bad.clone(), cublas_bad] {
                let c = compare(&old, &results(vec![new]), 5.0);
                assert!(!c.passed(), "time {bad}: {c}");
                assert!(matches!(&c.cases[0].verdict, Verdict::Failed(w) if w.contains("not finite and positive")));
            }
            // In OLD: the record is malformed, the gate fails.
            let c = compare(&results(vec![sparsek_bad]), &old, 5.0);
            assert!(!c.passed() && c.problems.len() == 1, "time {bad} in OLD: {c}");
            assert!(c.to_string().contains("FAILED: OLD's record 8192x8192x8192 bs64 22% uniform is malformed"));
        }
    }

    #[test]
    fn malformed_records_are_refused_on_read() {
        let text = crate::json::to_json(&header(), &[record(64, 0.22, 1.0, Some(1.5))], true);
        assert!(crate::json::parse_results(&text).is_ok());
        for (from, to, why) in [
            ("\"bs\": 64", "\"bs\": 0", "block size 0"),
            ("\"density\": 0.22", "\"density\": 5.0", "density 5 is not in [0, 1]"),
            ("\"median_ms\": 1.0", "\"median_ms\": 0.0", "median time 0 ms"),
            ("\"median_ms\": 1.0", "\"median_ms\": -2.5", "median time -2.5 ms"),
            ("\"nnzb\": 3604", "\"nnzb\": 99999", "99999 nonzero blocks"),
        ] {
            assert!(text.contains(from), "{from} not in\n{text}");
            let bad = text.replacen(from, to, 1);
            let e = crate::json::parse_results(&bad).unwrap_err().to_string();
            assert!(e.contains("malformed record") && e.contains(why), "{to}: {e}");
        }
    }
}
