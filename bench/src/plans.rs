//! `sparsek bench --tuned`: the built-in heuristic's plan against the tuned plan (issue 13), per case.
//!
//! Each case's A is tuned with `Gpu::tune` (every kernel family and rasterization group, checked, timed within a
//! budget, the fastest kept when it beats the heuristic by more than 3%); then the heuristic's plan and the tuned
//! plan are each checked again against the f64 oracle (C poisoned first) and re-measured in a separate
//! interleaved timing, each launch on the next of its own rotated input sets spanning twice the L2
//! ([`crate::measure::rotation_depth`]), so the tuner's choice is judged by a measurement it did not make. The
//! tuned plan is flagged "slower" when it differs from the heuristic's and its re-measured median is more than 3%
//! above the heuristic's; where the heuristic's plan was kept, the two sides run the same kernel, and their ratio
//! is the noise floor of the measurement (reported in the summary).

use std::time::Duration;

use serde::Serialize;

use crate::error::{self, Error, Result};
use crate::grid::Case;
use crate::measure::{BytesMoved, Times, rotation_depth};
use crate::report::{Check, Header};
use crate::runner::{Contender, time_interleaved};
use crate::side::{CaseFacts, RunConfig};
use sparsek::Epilogue;
use sparsek::f16;
use sparsek::format::Pattern;
use sparsek::gpu::{DeviceBsr, DeviceMatrix, Gpu, TuneOptions, TuneProblem, TuneReport};
use sparsek::tune::Plan;

/// Re-measured tuned times more than this fraction above the heuristic's are flagged "slower".
const NOISE: f64 = 0.03;

/// The default cases: the main grid's flavour (8192^3 at bs 64 and 128, 10% and 22%, uniform; bs 64 22% skewed
/// and banded; 4096^3 bs 64 12.5%), the decode grid's (8192^2 bs 64 22% at N 1 and 16, skewed at N 16; 16384^2
/// bs 128 10% at N 16; 1536 x 384 and 384 x 1536 at bs 32 and 64, 50%, N 1 and 16; 1536 x 384 bs 64 50% N 512).
pub fn default_cases() -> Vec<Case> {
    let mut cases = crate::grid::uniform_cubes(8192, &[64, 128], &[0.10, 0.22]);
    cases.push(Case::synthetic(8192, 8192, 8192, 64, 0.22, Pattern::Skewed));
    cases.push(Case::synthetic(8192, 8192, 8192, 64, 0.22, Pattern::Banded));
    cases.push(Case::synthetic(4096, 4096, 4096, 64, 0.125, Pattern::Uniform));
    for n in [1, 16] {
        cases.push(Case::synthetic(8192, n, 8192, 64, 0.22, Pattern::Uniform));
    }
    cases.push(Case::synthetic(8192, 16, 8192, 64, 0.22, Pattern::Skewed));
    cases.push(Case::synthetic(16384, 16, 16384, 128, 0.10, Pattern::Uniform));
    for (m, k) in [(1536, 384), (384, 1536)] {
        for bs in [32, 64] {
            for n in [1, 16] {
                cases.push(Case::synthetic(m, n, k, bs, 0.5, Pattern::Uniform));
            }
        }
    }
    cases.push(Case::synthetic(1536, 512, 384, 64, 0.5, Pattern::Uniform));
    cases
}

/// The `--quick` cases (3): 4096^3 bs 64 12.5%, 8192^2 bs 64 22% skewed at N 16, 1536 x 384 bs 64 50% at N 16.
pub fn quick_cases() -> Vec<Case> {
    vec![
        Case::synthetic(4096, 4096, 4096, 64, 0.125, Pattern::Uniform),
        Case::synthetic(8192, 16, 8192, 64, 0.22, Pattern::Skewed),
        Case::synthetic(1536, 16, 384, 64, 0.5, Pattern::Uniform),
    ]
}

/// One plan as measured: its description, entry point, check and re-measured times.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PlanResult {
    /// The plan (`Plan`'s Display: family and rasterization group).
    pub plan: String,
    /// Its entry point.
    pub kernel: String,
    /// The tuner's median for it, in microseconds.
    pub tuner_us: f64,
    /// Its output against the oracle (before timing).
    pub check: Option<Check>,
    /// Re-measured launch times (rotated inputs, interleaved with the other plan).
    pub time: Option<Times>,
    /// Input sets rotated through.
    pub sets: usize,
}

impl PlanResult {
    fn passed(&self) -> bool {
        self.check.as_ref().is_some_and(|c| c.passed)
    }
}

/// The tuner's search of one case, from its report.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Tuning {
    /// Candidates the tuner measured.
    pub candidates: usize,
    /// Wall time of the tuning, in seconds.
    pub tune_s: f64,
    /// Whether the tuner chose another plan than the heuristic's.
    pub changed: bool,
}

impl Tuning {
    fn of(report: &TuneReport) -> Tuning {
        Tuning {
            candidates: report.candidates.len(),
            tune_s: report.elapsed.as_secs_f64(),
            changed: report.plan != report.heuristic,
        }
    }
}

/// One case: the heuristic's plan and the tuned plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TunedRecord {
    /// The case.
    #[serde(flatten)]
    pub facts: CaseFacts,
    /// What the tuner's search came to (flattened into the record's JSON).
    #[serde(flatten)]
    pub tuning: Tuning,
    /// The built-in heuristic's plan.
    pub heuristic: PlanResult,
    /// The tuned plan.
    pub tuned: PlanResult,
    /// Re-measured heuristic median / tuned median (above 1: tuning made it faster).
    pub speedup: Option<f64>,
    /// Why the case did not complete.
    pub error: Option<String>,
}

impl TunedRecord {
    fn new(case: &Case, seed: u64) -> TunedRecord {
        TunedRecord {
            facts: CaseFacts::new(case, seed),
            tuning: Tuning::default(),
            heuristic: PlanResult::default(),
            tuned: PlanResult::default(),
            speedup: None,
            error: None,
        }
    }

    /// Both plans computed the right result and the case completed.
    pub fn passed(&self) -> bool {
        self.error.is_none() && self.heuristic.passed() && self.tuned.passed()
    }

    /// The tuner chose another plan, and it re-measured more than 3% slower than the heuristic's. (Where the
    /// heuristic's plan was kept, both sides run the same kernel and their ratio shows the measurement's noise.)
    pub fn slower(&self) -> bool {
        self.tuning.changed && self.speedup.is_some_and(|s| s < 1.0 / (1.0 + NOISE))
    }
}

/// What a `--tuned` run produced.
#[derive(Debug)]
pub struct TunedSummary {
    /// Facts about the run.
    pub header: Header,
    /// One record per case.
    pub records: Vec<TunedRecord>,
    /// Every check passed and every case completed.
    pub all_passed: bool,
}

/// Runs every case of `cfg` with a tuning budget of `budget` per case, printing progress on stderr, and writes
/// OUT_DIR/tuned.json (after each case) and OUT_DIR/tuned.md. Errors only when an output cannot be written.
pub fn run(gpu: &Gpu, cfg: &RunConfig, budget: Duration) -> Result<TunedSummary> {
    let crate::side::Opened { mut header, cublas, iters } = crate::side::open(gpu, cfg, "tuned")?;
    drop(cublas);
    header.cublas = "not measured (--tuned)".into();
    let json_path = cfg.out_dir.join("tuned.json");
    let mut records = Vec::with_capacity(cfg.cases.len());
    for (i, case) in cfg.cases.iter().enumerate() {
        let tag = format!("case {}/{}", i + 1, cfg.cases.len());
        let mut case = case.clone();
        let mut rec = TunedRecord::new(&case, case.seed(cfg.seed));
        if let Err(e) = measure(gpu, cfg, iters, budget, &mut case, &mut rec, &tag) {
            rec.error = Some(e.to_string());
        }
        eprintln!("{tag} {}", progress_line(&rec));
        records.push(rec);
        error::write(&json_path, to_json(&header, &records, i + 1 == cfg.cases.len())?.as_bytes())?;
    }
    crate::side::publish(cfg, "tuned.md", &markdown(&header, &records, budget), &json_path)?;
    let all_passed = records.iter().all(TunedRecord::passed);
    Ok(TunedSummary { header, records, all_passed })
}

/// A plan's rotated input sets.
struct PlanSets {
    plan: Plan,
    sets: Vec<(DeviceBsr<f16>, DeviceMatrix<f16>, DeviceMatrix<f32>)>,
}

impl Contender for PlanSets {
    fn launch(&mut self, gpu: &Gpu, set: usize) -> Result<()> {
        let (a, b, c) = &mut self.sets[set];
        Ok(gpu.spmm_with_plan(&self.plan, a, b, c, Epilogue::default())?)
    }

    fn sets(&self) -> usize {
        self.sets.len().max(1)
    }
}

/// Tunes the case, then checks and re-measures the heuristic's and the tuned plan.
fn measure(
    gpu: &Gpu,
    cfg: &RunConfig,
    iters: usize,
    budget: Duration,
    case: &mut Case,
    rec: &mut TunedRecord,
    tag: &str,
) -> Result<()> {
    let (a, b, _, expected) = crate::side::generated_operands(case, cfg, rec.facts.seed, tag, "--tuned")?;
    let (m, n, k) = (a.rows(), b.cols(), a.cols());
    rec.facts.nnzb = a.nnzb();
    let a_d = gpu.upload(&a)?;
    eprintln!("{tag}   tuning ({} ms budget)", budget.as_millis());
    let opts = TuneOptions { budget, progress: true, save: false, seed: rec.facts.seed };
    let report = gpu.tune(&a_d, &TuneProblem::new(n), &opts).map_err(Error::step("tuning"))?;
    drop(a_d);
    rec.tuning = Tuning::of(&report);
    let kernel_of = |plan: &Plan| {
        report.candidates.iter().find(|c| c.plan == *plan).map_or(String::new(), |c| c.kernel.to_string())
    };
    for (slot, plan, tuner_us) in
        [(&mut rec.heuristic, report.heuristic, report.heuristic_us), (&mut rec.tuned, report.plan, report.tuned_us)]
    {
        *slot = PlanResult { plan: plan.to_string(), kernel: kernel_of(&plan), tuner_us, ..PlanResult::default() };
    }

    let depth = rotation_depth(BytesMoved::new(m, n, k, a.block_size(), a.nnzb()).total, gpu.info().l2_bytes);
    let mut contenders = Vec::with_capacity(2);
    for (plan, slot) in [(report.heuristic, &mut rec.heuristic), (report.plan, &mut rec.tuned)] {
        eprintln!("{tag}   {plan}: {depth} input sets, checking");
        let sets = (0..depth)
            .map(|_| Ok((gpu.upload(&a)?, gpu.upload_matrix(&b)?, gpu.zeros::<f32>(m, n)?)))
            .collect::<sparsek::Result<Vec<_>>>()
            .map_err(Error::step("uploading the input sets"))?;
        let mut s = PlanSets { plan, sets };
        let (_, _, c) = &mut s.sets[0];
        crate::cuda::poison(gpu, c.as_view_mut())?;
        s.launch(gpu, 0)?;
        let host = s.sets[0].2.to_host()?;
        slot.check = Some(Check::from(&expected.check(&host)));
        slot.sets = s.sets.len();
        contenders.push(s);
    }
    if !(rec.heuristic.passed() && rec.tuned.passed()) {
        return Ok(());
    }
    eprintln!("{tag}   timing, interleaved");
    let mut timed: Vec<&mut dyn Contender> = contenders.iter_mut().map(|c| c as &mut dyn Contender).collect();
    let (times, _) = time_interleaved(gpu, &mut timed, cfg.warmup, iters).map_err(Error::step("timing"))?;
    rec.heuristic.time = Times::from_ms(&times[0]);
    rec.tuned.time = Times::from_ms(&times[1]);
    rec.speedup = match (&rec.heuristic.time, &rec.tuned.time) {
        (Some(h), Some(t)) if t.median_us > 0.0 => Some(h.median_us / t.median_us),
        _ => None,
    };
    Ok(())
}

/// The whole run as pretty-printed JSON: `{"header": ..., "complete": bool, "records": [...]}`.
pub fn to_json(header: &Header, records: &[TunedRecord], complete: bool) -> Result<String> {
    crate::side::to_json("tuned.json", header, (), records, complete)
}

fn us(t: &Option<Times>) -> String {
    t.as_ref().map_or("-".into(), |t| format!("{:.1}", t.median_us))
}

fn verdict(r: &TunedRecord) -> String {
    if let Some(e) = &r.error {
        return format!("ERROR: {e}");
    }
    let check = |p: &PlanResult| match &p.check {
        Some(c) if c.passed => "PASS".to_string(),
        Some(c) => format!("FAIL ({})", c.detail),
        None => "-".into(),
    };
    let slower = if r.slower() { ", slower" } else { "" };
    format!("{} / {}{slower}", check(&r.heuristic), check(&r.tuned))
}

fn progress_line(r: &TunedRecord) -> String {
    format!(
        "{}: heuristic {} {} us, tuned {} {} us ({}), {}",
        r.facts.case,
        r.heuristic.plan,
        us(&r.heuristic.time),
        r.tuned.plan,
        us(&r.tuned.time),
        r.speedup.map_or("-".into(), |s| format!("{s:.3}x")),
        verdict(r)
    )
}

/// The Markdown report: one row per case, then the summary (plans changed, geometric mean and worst speedup).
pub fn markdown(header: &Header, records: &[TunedRecord], budget: Duration) -> String {
    let mut s = format!(
        "## Tuned plans against the built-in heuristic\n\n{} (sm_{}{}, driver CUDA {}), {}, commit {}; f16 inputs, \
         row-major B and C, f32 C; tuning budget {} ms per case; re-measured: median of {} interleaved launches \
         after {} warm-up, inputs rotated over 2x L2.\n\n",
        header.gpu,
        header.compute_capability.0,
        header.compute_capability.1,
        header.driver,
        header.date_utc,
        header.git_commit,
        budget.as_millis(),
        header.iters,
        header.warmup,
    );
    s.push_str(
        "| case (M x N x K) | nnzb | heuristic plan | tuned plan | cand. | tune s | tuner: heur. / tuned us | \
         heuristic us | tuned us | speedup | checks |\n|---|---:|---|---|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for r in records {
        let plan =
            |p: &PlanResult| if p.kernel.is_empty() { p.plan.clone() } else { format!("{} (`{}`)", p.plan, p.kernel) };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {:.2} | {:.1} / {:.1} | {} | {} | {} | {} |\n",
            r.facts.case,
            r.facts.nnzb,
            plan(&r.heuristic),
            if r.tuning.changed { plan(&r.tuned) } else { "(heuristic kept)".into() },
            r.tuning.candidates,
            r.tuning.tune_s,
            r.heuristic.tuner_us,
            r.tuned.tuner_us,
            us(&r.heuristic.time),
            us(&r.tuned.time),
            r.speedup.map_or("-".into(), |x| format!("{x:.3}x")),
            verdict(r)
        ));
    }
    s.push('\n');
    s.push_str(&summary(records));
    s
}

/// One paragraph: cases measured, plans changed, geometric mean and worst re-measured speedup, slower cases.
fn summary(records: &[TunedRecord]) -> String {
    let speedups: Vec<f64> = records.iter().filter_map(|r| r.speedup).collect();
    let changed: Vec<f64> = records.iter().filter(|r| r.tuning.changed).filter_map(|r| r.speedup).collect();
    let geomean = |v: &[f64]| (!v.is_empty()).then(|| (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp());
    let fmt = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.3}x"));
    let worst = speedups.iter().copied().fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))));
    let best = speedups.iter().copied().fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
    let slower: Vec<&str> = records.iter().filter(|r| r.slower()).map(|r| r.facts.case.as_str()).collect();
    // The same plan measured twice: how far apart two identical contenders land.
    let noise = records
        .iter()
        .filter(|r| !r.tuning.changed)
        .filter_map(|r| r.speedup)
        .map(|x| (x - 1.0).abs())
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
    format!(
        "{} cases measured; the tuner changed the plan in {} (geometric-mean speedup there {}); over all cases \
         geometric mean {}, best {}, worst {}; a changed plan re-measured more than 3% slower than the \
         heuristic's: {}. Where the heuristic's plan was kept both sides run the same kernel: they differed by up \
         to {} (the noise of this measurement).\n",
        speedups.len(),
        records.iter().filter(|r| r.tuning.changed).count(),
        fmt(geomean(&changed)),
        fmt(geomean(&speedups)),
        fmt(best),
        fmt(worst),
        if slower.is_empty() { "none".to_string() } else { slower.join(", ") },
        noise.map_or("-".into(), |x| format!("{:.1}%", 100.0 * x))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::side::tests::check;

    fn record(case: &Case, heuristic_us: f64, tuned_us: f64, changed: bool) -> TunedRecord {
        let mut r = TunedRecord::new(case, 1);
        let times = |us: f64| Some(Times { median_us: us, min_us: us, max_us: us, samples: 30 });
        r.heuristic = PlanResult {
            plan: "narrow".into(),
            kernel: "sparsek_bsr_bs64_n16".into(),
            tuner_us: heuristic_us,
            check: Some(check(true)),
            time: times(heuristic_us),
            sets: 4,
        };
        r.tuned = PlanResult {
            plan: if changed { "decode".into() } else { "narrow".into() },
            time: times(tuned_us),
            ..r.heuristic.clone()
        };
        r.tuning.changed = changed;
        r.tuning.candidates = 12;
        r.speedup = Some(heuristic_us / tuned_us);
        r
    }

    #[test]
    fn cases() {
        let d = default_cases();
        assert_eq!(d.len(), 20);
        assert!(d.iter().any(|c| c.pattern_name() == "skewed" && c.n == 16));
        assert!(d.iter().any(|c| c.pattern_name() == "banded"));
        assert!(d.iter().any(|c| (c.m, c.k, c.n) == (1536, 384, 512)));
        assert_eq!(quick_cases().len(), 3);
    }

    #[test]
    fn slower_flag_and_summary() {
        let c = Case::synthetic(8192, 16, 8192, 64, 0.22, Pattern::Skewed);
        let win = record(&c, 40.0, 30.0, true);
        let same = record(&c, 20.0, 20.4, false);
        let lost = record(&c, 20.0, 21.0, true);
        // The same plan twice is noise, never "slower".
        let same_noisy = record(&c, 20.0, 21.0, false);
        assert!(!win.slower() && !same.slower() && lost.slower() && !same_noisy.slower());
        assert!(win.passed());
        let text = summary(&[win.clone(), same.clone(), lost.clone()]);
        assert!(text.contains("3 cases measured; the tuner changed the plan in 2"), "{text}");
        assert!(text.contains("best 1.333x"), "{text}");
        assert!(text.contains(&c.to_string()), "{text}");
        assert!(text.contains("differed by up to 2.0%"), "{text}");
        let mut failed = win.clone();
        failed.tuned.check = Some(check(false));
        assert!(!failed.passed() && verdict(&failed).contains("FAIL"));
    }

    #[test]
    fn table_and_json() {
        let c = Case::synthetic(1536, 16, 384, 64, 0.5, Pattern::Uniform);
        let records = [record(&c, 10.0, 8.0, true), record(&c, 10.0, 10.1, false)];
        let header = Header { gpu: "Test GPU".into(), iters: 30, warmup: 5, ..Default::default() };
        let md = markdown(&header, &records, Duration::from_millis(1500));
        assert!(md.contains("| decode (`sparsek_bsr_bs64_n16`) |") && md.contains("(heuristic kept)"), "{md}");
        assert!(md.contains("1.250x") && md.contains("1500 ms"), "{md}");
        let json = to_json(&header, &records, true).unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["records"][0]["speedup"], 1.25);
        assert_eq!(v["records"][0]["changed"], true);
        assert_eq!(v["records"][1]["tuned"]["plan"], "narrow");
        assert_eq!(v["complete"], true);
        // The layout of the committed files (docs/bench/*-tuned.json): a record's keys after its case facts.
        let tuning = ["candidates", "tune_s", "changed"];
        let own = [&tuning[..], &["heuristic", "tuned", "speedup", "error"]].concat();
        assert_eq!(crate::side::tests::record_keys(&json), own);
    }
}
