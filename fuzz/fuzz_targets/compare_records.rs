//! The perf-regression gate (`sparsek_bench::compare`) and the results reader's record validation, on
//! arbitrary runs: records with arbitrary shapes, block sizes, densities, nonzero-block counts and times (0,
//! negative, NaN, infinite, subnormal), checks passed or not, cuBLAS present or not, OLD and NEW overlapping
//! or not.
//!
//! Properties, from the documented rules (recomputed here, no library code in the oracle):
//! - `Record::validate` is Ok exactly when the record is valid: block size 16, 32, 64 or 128; density finite in
//!   [0, 1]; N > 0; M and K positive (a generated A) and multiples of the block size; nnzb at most
//!   `(M/bs) * (K/bs)`; every timed contender's median, min and max finite and positive;
//! - the gate never passes when: a case of OLD (by M, N, K, bs, density, pattern) is missing from NEW, NEW has
//!   no record, a record of either run is invalid, NEW's sparsek result is untrusted (an error, no check, a failed
//!   check, no time), a change is not finite; when it passes, every case is ok, faster or not compared;
//! - a compared case's change is finite, and `Regressed` exactly when it is below `-threshold`;
//! - the text never panics and ends with `COMPARISON FAILED` exactly when the gate fails;
//! - a results file written by `to_json` and read back by `parse_results` holds only valid records.
#![no_main]

use arbitrary::Arbitrary;
use sparsek::format::Pattern;
use sparsek_bench::compare::Verdict;
use sparsek_bench::report::{Outcome, Timing};
use sparsek_bench::{Case, Header, Record, Results, compare};

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Time {
    Good(u16),
    Special(u8),
    Bits(u64),
}

const SPECIAL: [f64; 8] = [0.0, -0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 5e-324, 1e308];

impl Time {
    fn get(self) -> f64 {
        match self {
            Time::Good(v) => 0.001 + f64::from(v) / 100.0,
            Time::Special(i) => SPECIAL[i as usize % SPECIAL.len()],
            Time::Bits(b) => f64::from_bits(b),
        }
    }
}

#[derive(Arbitrary, Debug, Clone)]
struct Rec {
    shape: u8,
    bs: u8,
    density: Time,
    density_small: Option<u8>,
    nnzb: u32,
    sparsek: Option<(Time, Time, Time)>,
    sparsek_check: Option<bool>,
    cublas: Option<(Time, bool)>,
    error: bool,
}

#[derive(Arbitrary, Debug)]
struct Input {
    old: Vec<Rec>,
    new: Vec<Rec>,
    threshold: u8,
}

fn outcome(kind: &str, t: Option<(f64, f64, f64)>, passed: Option<bool>) -> Outcome {
    Outcome::synthetic(
        kind,
        t.map(|(median_ms, min_ms, max_ms)| Timing { median_ms, min_ms, max_ms, samples: 3 }),
        passed,
    )
}

fn record(r: &Rec) -> Record {
    let dims = [(256, 256, 256), (512, 8, 1024), (0, 16, 64), (64, 0, 64), (100, 16, 64), (64, 16, 96)];
    let (m, n, k) = dims[r.shape as usize % dims.len()];
    let bs = [16usize, 32, 64, 128, 0, 48][r.bs as usize % 6];
    let density = r.density_small.map_or(r.density.density(), |d| f64::from(d % 5) / 4.0);
    let pattern = [Pattern::Uniform, Pattern::Skewed][r.shape as usize / 7 % 2];
    let sparsek = r.sparsek.map(|(a, b, c)| (a.get(), b.get(), c.get()));
    Record {
        case: Case::synthetic(m, n, k, bs, density, pattern),
        nnzb: (r.nnzb % 300) as usize,
        seed: 1,
        sparsek: outcome("sparsek", sparsek, r.sparsek_check),
        cublas: match r.cublas {
            Some((t, passed)) => outcome("cublas", Some((t.get(), t.get(), t.get())), Some(passed)),
            None => Outcome::unavailable("none"),
        },
        cusparse: Outcome::unavailable("none"),
        sm_clock_mhz: None,
        error: r.error.then(|| "launch failed".to_string()),
    }
}

impl Time {
    fn density(self) -> f64 {
        match self {
            Time::Good(v) => f64::from(v) / 60000.0,
            t => t.get(),
        }
    }
}

/// The validity rules, written out.
fn valid(r: &Record) -> bool {
    let c = &r.case;
    let pos = |t: &Option<Timing>| {
        t.as_ref().is_none_or(|t| [t.median_ms, t.min_ms, t.max_ms].iter().all(|v| v.is_finite() && *v > 0.0))
    };
    [16, 32, 64, 128].contains(&c.bs)
        && c.density.is_finite()
        && (0.0..=1.0).contains(&c.density)
        && c.n > 0
        && c.m > 0
        && c.k > 0
        && c.m % c.bs == 0
        && c.k % c.bs == 0
        && r.nnzb <= (c.m / c.bs) * (c.k / c.bs)
        && pos(&r.sparsek.timing)
        && pos(&r.cublas.timing)
        && pos(&r.cusparse.timing)
}

fn key(r: &Record) -> (usize, usize, usize, usize, u64, String) {
    let c = &r.case;
    (c.m, c.n, c.k, c.bs, c.density.to_bits(), c.pattern_name())
}

fn trusted_sparsek(r: &Record) -> bool {
    r.error.is_none() && r.sparsek.check.as_ref().is_some_and(|c| c.passed) && r.sparsek.timing.is_some()
}

sparsek_fuzz::target!(|t: Input| {
    let old: Vec<Record> = t.old.iter().take(8).map(record).collect();
    let new: Vec<Record> = t.new.iter().take(8).map(record).collect();
    for r in old.iter().chain(&new) {
        assert_eq!(r.validate().is_ok(), valid(r), "validate of {r:?}: {:?}", r.validate());
    }
    let results = |records: Vec<Record>| Results { header: Header::default(), complete: true, records };
    let (old_r, new_r) = (results(old.clone()), results(new.clone()));
    let threshold = f64::from(t.threshold % 50);
    let c = compare(&old_r, &new_r, threshold);

    let missing = old.iter().any(|o| !new.iter().any(|n| key(n) == key(o)));
    let must_fail = missing
        || new.is_empty()
        || old.iter().chain(&new).any(|r| !valid(r))
        || new.iter().any(|r| !trusted_sparsek(r));
    if must_fail {
        assert!(!c.passed(), "the gate passed: missing {missing}, NEW {} records\n{c}", new.len());
    }
    if c.passed() {
        for case in &c.cases {
            assert!(matches!(case.verdict, Verdict::Unchanged | Verdict::Faster | Verdict::NotCompared(_)), "{case:?}");
        }
    }
    for case in &c.cases {
        if let Some(p) = case.change.map(|c| c.pct) {
            if case.verdict == Verdict::Regressed {
                assert!(p.is_finite() && p < -threshold, "{case:?}");
            }
            if !p.is_finite() {
                assert!(matches!(case.verdict, Verdict::Failed(_)), "a non-finite change not failed: {case:?}");
            }
        }
    }
    let text = c.to_string();
    assert_eq!(text.contains("COMPARISON FAILED"), !c.passed(), "{text}");

    // Written and read back: only valid records are accepted.
    let json = sparsek_bench::json::to_json(&Header::default(), &new, true);
    if let Ok(back) = sparsek_bench::json::parse_results(&json) {
        for r in &back.records {
            assert!(valid(r), "read back an invalid record: {r:?}");
        }
    }
});
