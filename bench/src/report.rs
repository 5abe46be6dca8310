//! What a benchmark run produced, and its renderings: JSON (`latest.json`, through serde: see [`crate::json`]),
//! a Markdown table, and the speedup plot. Nothing here touches the GPU, so all of it is unit-tested.

use std::fmt::Write;

use serde::{Deserialize, Serialize};

use crate::grid::{Case, Source, percent};
use crate::plot::{self, Labels, Series};
use sparsek::check::CheckReport;

/// The comparison of one contender's output with the oracle (sampled rows). In the JSON as is, numbers to 6
/// significant digits, a non-finite error as `null`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// Every compared element was within the tolerance.
    pub passed: bool,
    /// Elements compared.
    pub checked: usize,
    /// Elements outside the tolerance.
    pub failures: usize,
    /// Largest absolute error (infinite when a non-finite value was got for a finite expectation).
    #[serde(serialize_with = "crate::num::sig6", deserialize_with = "crate::num::f64_or_inf")]
    pub max_abs_err: f64,
    /// Largest relative error (elements whose expected magnitude exceeds `atol`).
    #[serde(serialize_with = "crate::num::sig6", deserialize_with = "crate::num::f64_or_inf")]
    pub max_rel_err: f64,
    /// Absolute part of the tolerance.
    #[serde(serialize_with = "crate::num::sig6", deserialize_with = "crate::num::f64_or_inf")]
    pub atol: f64,
    /// Relative part of the tolerance.
    #[serde(serialize_with = "crate::num::sig6", deserialize_with = "crate::num::f64_or_inf")]
    pub rtol: f64,
    /// The report's one-line summary (first failure, worst element).
    pub detail: String,
}

impl From<&CheckReport> for Check {
    fn from(r: &CheckReport) -> Self {
        Check {
            passed: r.passed(),
            checked: r.checked,
            failures: r.failures,
            max_abs_err: r.max_abs_err,
            max_rel_err: r.max_rel_err,
            atol: r.tolerance.atol,
            rtol: r.tolerance.rtol,
            detail: r.to_string(),
        }
    }
}

/// Launch times of one contender, in milliseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// Median.
    pub median_ms: f64,
    /// Fastest launch.
    pub min_ms: f64,
    /// Slowest launch.
    pub max_ms: f64,
    /// Timed launches.
    pub samples: usize,
}

impl Timing {
    /// The statistics of `samples` (`None` when empty).
    pub fn from_samples(samples: &[f32]) -> Option<Timing> {
        if samples.is_empty() {
            return None;
        }
        Some(Timing {
            median_ms: f64::from(sparsek::gpu::timing::median(samples).unwrap_or(f32::NAN)),
            min_ms: f64::from(samples.iter().copied().fold(f32::INFINITY, f32::min)),
            max_ms: f64::from(samples.iter().copied().fold(f32::NEG_INFINITY, f32::max)),
            samples: samples.len(),
        })
    }
}

/// A contender's [`Timing`] as the results files write it, flat in the contender's JSON object (`latest.json`'s
/// `contenders.<name>`, `reach.json`'s contenders): the times to 6 significant digits, `null` and 0 samples when
/// not timed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimingFields {
    /// Median launch time in ms, if timed.
    #[serde(default, serialize_with = "crate::num::opt_sig6")]
    pub median_ms: Option<f64>,
    /// Fastest launch in ms.
    #[serde(default, serialize_with = "crate::num::opt_sig6")]
    pub min_ms: Option<f64>,
    /// Slowest launch in ms.
    #[serde(default, serialize_with = "crate::num::opt_sig6")]
    pub max_ms: Option<f64>,
    /// Timed launches.
    #[serde(default)]
    pub samples: usize,
}

impl From<Option<&Timing>> for TimingFields {
    fn from(t: Option<&Timing>) -> Self {
        TimingFields {
            median_ms: t.map(|t| t.median_ms),
            min_ms: t.map(|t| t.min_ms),
            max_ms: t.map(|t| t.max_ms),
            samples: t.map_or(0, |t| t.samples),
        }
    }
}

impl TimingFields {
    /// The timing written: none when its median is (a median that could not be computed is written as null);
    /// a missing minimum or maximum reads as the median.
    pub fn timing(&self) -> Option<Timing> {
        self.median_ms.map(|median_ms| Timing {
            median_ms,
            min_ms: self.min_ms.unwrap_or(median_ms),
            max_ms: self.max_ms.unwrap_or(median_ms),
            samples: self.samples,
        })
    }
}

/// One contender's outcome in one case (in the JSON: `contenders.<name>`, the timing flattened).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// What ran ("sparsek", "cublas-gemmex-f16-f32", "bsr-spmm-f16", ...) or `"unavailable: <reason>"`.
    pub kind: String,
    /// Its check, if it ran.
    pub check: Option<Check>,
    /// Its times, if it was timed.
    pub timing: Option<Timing>,
    /// Input sets rotated through (each a separate copy of every operand it reads).
    pub sets: usize,
}

impl Outcome {
    /// A contender that could not run.
    pub fn unavailable(reason: impl std::fmt::Display) -> Self {
        Outcome { kind: format!("unavailable: {reason}"), ..Default::default() }
    }

    /// A made-up outcome for tests and fuzz targets: `kind`, `timing`, and when `passed` is given a check of 10
    /// elements that passed or had one failure.
    #[doc(hidden)]
    pub fn synthetic(kind: &str, timing: Option<Timing>, passed: Option<bool>) -> Outcome {
        Outcome {
            kind: kind.into(),
            check: passed.map(|p| Check {
                passed: p,
                checked: 10,
                failures: usize::from(!p),
                max_abs_err: 1e-6,
                max_rel_err: 1e-7,
                atol: 1e-5,
                rtol: 1e-6,
                detail: if p { "PASS" } else { "FAIL" }.into(),
            }),
            timing,
            sets: 1,
        }
    }

    /// The median time, if timed.
    pub fn ms(&self) -> Option<f64> {
        self.timing.as_ref().map(|t| t.median_ms)
    }

    /// Whether the time can be trusted: the output passed its check.
    pub fn trusted(&self) -> bool {
        self.check.as_ref().is_some_and(|c| c.passed)
    }
}

/// One case's results (in the JSON: the flat keys of DESIGN.md, then `contenders`; see [`crate::json`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// The case as requested (for a file: M and K after padding, the density measured).
    pub case: Case,
    /// Nonzero blocks of A.
    pub nnzb: usize,
    /// Seed of A and B.
    pub seed: u64,
    /// sparsek's outcome.
    pub sparsek: Outcome,
    /// cuBLAS dense GEMM's outcome.
    pub cublas: Outcome,
    /// cuSPARSE's outcome (its `kind` names the API and precision used).
    pub cusparse: Outcome,
    /// SM clock read by nvidia-smi right after the timed loop.
    pub sm_clock_mhz: Option<u32>,
    /// Set when the case could not be run (sparsek failed to set up or launch).
    pub error: Option<String>,
}

/// 2 * flops / time, in TFLOPS.
fn tflops(flops: f64, ms: Option<f64>) -> Option<f64> {
    ms.filter(|&t| t > 0.0).map(|t| flops / (t * 1e-3) / 1e12)
}

impl Record {
    /// Whether the record describes a case that could have run, with times that could have been measured: the
    /// rules of a valid case ([`crate::parse_case`] and the BSR shape rules: a supported block size, a density in
    /// [0, 1], N > 0, M and K multiples of the block size, positive for a generated A, at most `(M/bs) * (K/bs)`
    /// nonzero blocks) and, for every contender timed, a median, minimum and maximum that are finite and
    /// positive. `Err` names the first broken rule. Applied when a results file is read
    /// ([`crate::read_results`]) and by [`crate::compare()`].
    pub fn validate(&self) -> Result<(), Malformed> {
        let c = &self.case;
        let (m, k, bs) = (c.m, c.k, c.bs);
        if !sparsek::format::SUPPORTED_BLOCK_SIZES.contains(&bs) {
            return Err(Malformed::BlockSize(bs));
        }
        if !(c.density.is_finite() && (0.0..=1.0).contains(&c.density)) {
            return Err(Malformed::Density(c.density));
        }
        if c.n == 0 {
            return Err(Malformed::EmptyN);
        }
        if matches!(c.source, Source::Synthetic(_)) && (m == 0 || k == 0) {
            return Err(Malformed::EmptyA { m, k });
        }
        if !m.is_multiple_of(bs) || !k.is_multiple_of(bs) {
            return Err(Malformed::NotMultiple { m, k, bs });
        }
        let cells = (m / bs) as u128 * (k / bs) as u128;
        if self.nnzb as u128 > cells {
            return Err(Malformed::TooManyBlocks { nnzb: self.nnzb, cells });
        }
        for (contender, o) in [("sparsek", &self.sparsek), ("cuBLAS", &self.cublas), ("cuSPARSE", &self.cusparse)] {
            if let Some(t) = &o.timing {
                for (which, ms) in [("median", t.median_ms), ("min", t.min_ms), ("max", t.max_ms)] {
                    if !(ms.is_finite() && ms > 0.0) {
                        return Err(Malformed::Time { contender, which, ms });
                    }
                }
            }
        }
        Ok(())
    }

    /// Useful flops of the sparse product: 2 * nnzb * bs^2 * N, the count of [`sparsek::Bsr::flops`] (a record
    /// read back from JSON has its `nnzb`, not the matrix; `sparse_flops_is_bsr_flops` pins the two together).
    pub fn sparse_flops(&self) -> f64 {
        2.0 * self.nnzb as f64 * (self.case.bs * self.case.bs) as f64 * self.case.n as f64
    }
    /// Flops of the dense product: 2 * M * N * K.
    pub fn dense_flops(&self) -> f64 {
        2.0 * self.case.m as f64 * self.case.n as f64 * self.case.k as f64
    }
    /// Stored blocks over all blocks (the requested density, rounded to whole blocks).
    pub fn actual_density(&self) -> Option<f64> {
        let c = &self.case;
        let cells = (c.m / c.bs.max(1)) as f64 * (c.k / c.bs.max(1)) as f64;
        (cells > 0.0).then(|| self.nnzb as f64 / cells)
    }
    /// sparsek's effective TFLOPS (2 * nnzb * bs^2 * N / time).
    pub fn sparsek_tflops(&self) -> Option<f64> {
        tflops(self.sparse_flops(), self.sparsek.ms())
    }
    /// cuBLAS's TFLOPS (2 * M * N * K / time).
    pub fn cublas_tflops(&self) -> Option<f64> {
        tflops(self.dense_flops(), self.cublas.ms())
    }
    /// cuSPARSE's effective TFLOPS (same flop count as sparsek's).
    pub fn cusparse_tflops(&self) -> Option<f64> {
        tflops(self.sparse_flops(), self.cusparse.ms())
    }
    /// sparsek's effective TFLOPS as a fraction of cuBLAS's TFLOPS.
    pub fn ratio_vs_cublas(&self) -> Option<f64> {
        Some(self.sparsek_tflops()? / self.cublas_tflops()?)
    }
    /// cuBLAS time / sparsek time.
    pub fn speedup_vs_cublas(&self) -> Option<f64> {
        Some(self.cublas.ms()? / self.sparsek.ms().filter(|&t| t > 0.0)?)
    }
    /// cuSPARSE time / sparsek time.
    pub fn speedup_vs_cusparse(&self) -> Option<f64> {
        Some(self.cusparse.ms()? / self.sparsek.ms().filter(|&t| t > 0.0)?)
    }
    /// Whether sparsek ran and its check passed.
    pub fn sparsek_passed(&self) -> bool {
        self.error.is_none() && self.sparsek.trusted()
    }
}

/// The first rule of a valid case that a record breaks ([`Record::validate`]).
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Malformed {
    /// A block size the library does not support.
    #[error("block size {0} is not one of {supported:?}", supported = SUPPORTED)]
    BlockSize(usize),
    /// A density outside [0, 1] (or not a number).
    #[error("density {0} is not in [0, 1]")]
    Density(f64),
    /// N = 0.
    #[error("N is 0")]
    EmptyN,
    /// A generated A with no rows or no columns.
    #[error("M {m} and K {k} of a generated A must be positive")]
    EmptyA {
        /// Rows of A.
        m: usize,
        /// Columns of A.
        k: usize,
    },
    /// M or K not a multiple of the block size.
    #[error("M {m} and K {k} must be multiples of the block size {bs}")]
    NotMultiple {
        /// Rows of A.
        m: usize,
        /// Columns of A.
        k: usize,
        /// The block size.
        bs: usize,
    },
    /// More nonzero blocks than A has.
    #[error("{nnzb} nonzero blocks is more than the {cells} blocks of A")]
    TooManyBlocks {
        /// The record's nonzero blocks.
        nnzb: usize,
        /// A's blocks.
        cells: u128,
    },
    /// A time that is not finite and positive.
    #[error("{contender}'s {which} time {ms} ms is not finite and positive")]
    Time {
        /// "sparsek", "cuBLAS", "cuSPARSE".
        contender: &'static str,
        /// "median", "min", "max".
        which: &'static str,
        /// The time.
        ms: f64,
    },
}

const SUPPORTED: [usize; 4] = sparsek::format::SUPPORTED_BLOCK_SIZES;

/// Facts about the run, written once at the top (in the JSON: `header`, the run's parameters under `method`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Header {
    /// GPU name.
    pub gpu: String,
    /// Compute capability.
    pub compute_capability: (i32, i32),
    /// Driver's CUDA version ("13.0").
    pub driver: String,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// L2 cache in bytes.
    pub l2_bytes: u64,
    /// Peak SM clock the driver reports, in MHz.
    pub sm_clock_max_mhz: u32,
    /// UTC date and time of the run.
    pub date_utc: String,
    /// Commit measured.
    pub git_commit: String,
    /// Whether the working tree had uncommitted changes (unknown: `None`).
    pub git_dirty: Option<bool>,
    /// sparsek's version.
    pub sparsek_version: String,
    /// cuBLAS library version (e.g. 130001) or why cuBLAS is unavailable.
    pub cublas: String,
    /// cuSPARSE library version or why it is unavailable.
    pub cusparse: String,
    /// Untimed launches per contender.
    pub warmup: usize,
    /// Timed launches per contender.
    pub iters: usize,
    /// Rows of C compared with the oracle per contender.
    pub check_rows: usize,
    /// The user's seed.
    pub seed: u64,
    /// The command line.
    pub command: String,
}

/// A whole results file: the header, whether every case ran, and one record per case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Results {
    /// Facts about the run.
    pub header: Header,
    /// False while the run was still going (the file is rewritten after every case).
    pub complete: bool,
    /// One record per case, in the order run.
    pub records: Vec<Record>,
}

impl Results {
    /// The cases of the records, as they were run (to run them again).
    pub fn cases(&self) -> Vec<Case> {
        self.records.iter().map(|r| r.case.clone()).collect()
    }
}

/// Milliseconds with precision that suits their size ("-" for none), as the tables and the comparison write them.
pub(crate) fn fmt_ms(ms: Option<f64>) -> String {
    match ms {
        None => "-".into(),
        Some(t) if t < 0.1 => format!("{t:.4}"),
        Some(t) if t < 100.0 => format!("{t:.3}"),
        Some(t) => format!("{t:.1}"),
    }
}

fn fmt_opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "-".into(), f)
}

/// A baseline's kind for the table: the name, or "n/a" with the reason shortened.
fn short_kind(kind: &str) -> String {
    match kind.strip_prefix("unavailable: ") {
        Some(_) => "n/a".into(),
        None => kind.into(),
    }
}

/// The checks column: "pass" or what failed.
fn checks_cell(r: &Record) -> String {
    if let Some(e) = &r.error {
        return format!("error: {}", e.replace('|', "/"));
    }
    let mut bad = Vec::new();
    for (name, o) in [("sparsek", &r.sparsek), ("cuBLAS", &r.cublas), ("cuSPARSE", &r.cusparse)] {
        if o.check.as_ref().is_some_and(|c| !c.passed) {
            bad.push(if name == "sparsek" { format!("{name} FAIL") } else { format!("{name} FAIL (time untrusted)") });
        }
    }
    if bad.is_empty() { "pass".into() } else { bad.join(", ") }
}

/// A baseline's time, marked when untrusted.
fn baseline_ms(o: &Outcome) -> String {
    let t = fmt_ms(o.ms());
    if o.ms().is_some() && !o.trusted() { format!("{t}!") } else { t }
}

impl Header {
    /// The facts of `gpu` and of this build (name, compute capability, driver, SMs, L2, clock, date, commit,
    /// version); the run's libraries and parameters are left empty for the caller to fill in.
    pub fn for_gpu(gpu: &sparsek::gpu::Gpu) -> Header {
        let info = gpu.info();
        let (git_commit, git_dirty) = crate::env::git_commit();
        Header {
            gpu: info.name.clone(),
            compute_capability: info.compute_capability,
            driver: info.driver_version_string(),
            sm_count: info.sm_count,
            l2_bytes: info.l2_bytes,
            sm_clock_max_mhz: info.sm_clock_khz / 1000,
            date_utc: crate::env::now_utc(),
            git_commit,
            git_dirty,
            sparsek_version: env!("CARGO_PKG_VERSION").to_string(),
            ..Header::default()
        }
    }
}

/// The first line of a Markdown report: the GPU, driver, date and commit of the run.
pub fn header_line(header: &Header) -> String {
    format!(
        "{} (sm_{}{}, {} SMs, {:.0} MiB L2, max SM clock {} MHz), driver CUDA {}; {} UTC; sparsek {} at {}{}.",
        header.gpu,
        header.compute_capability.0,
        header.compute_capability.1,
        header.sm_count,
        header.l2_bytes as f64 / f64::from(1 << 20),
        header.sm_clock_max_mhz,
        header.driver,
        header.date_utc.replace('T', " ").trim_end_matches('Z'),
        header.sparsek_version,
        header.git_commit,
        if header.git_dirty == Some(true) { " (uncommitted changes)" } else { "" },
    )
}

/// The Markdown table of a run: a header line, then one row per case.
pub fn markdown(header: &Header, records: &[Record]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}", header_line(header));
    let _ = writeln!(
        s,
        "Median of {} launches per contender after {} warm-up, interleaved launch by launch; cuBLAS: {}; \
         cuSPARSE: {}. `!` marks a baseline whose output failed its check.",
        header.iters, header.warmup, header.cublas, header.cusparse
    );
    s.push('\n');
    s.push_str(
        "| M×N×K | bs | density | pattern | nnzb | sparsek ms | sparsek TFLOPS | cuBLAS ms | cuBLAS TFLOPS \
         | % of cuBLAS | speedup vs cuBLAS | cuSPARSE ms | cuSPARSE kind | speedup vs cuSPARSE | SM MHz | checks |\n",
    );
    s.push_str("|---|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|---|\n");
    for r in records {
        let c = &r.case;
        let _ = writeln!(
            s,
            "| {}×{}×{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            c.m,
            c.n,
            c.k,
            c.bs,
            percent(c.density),
            c.pattern_name(),
            r.nnzb,
            fmt_ms(r.sparsek.ms()),
            fmt_opt(r.sparsek_tflops(), |v| format!("{v:.1}")),
            baseline_ms(&r.cublas),
            fmt_opt(r.cublas_tflops(), |v| format!("{v:.1}")),
            fmt_opt(r.ratio_vs_cublas(), |v| format!("{:.1}%", 100.0 * v)),
            fmt_opt(r.speedup_vs_cublas(), |v| format!("{v:.2}x")),
            baseline_ms(&r.cusparse),
            short_kind(&r.cusparse.kind),
            fmt_opt(r.speedup_vs_cusparse(), |v| format!("{v:.2}x")),
            r.sm_clock_mhz.map_or_else(|| "-".into(), |m| m.to_string()),
            checks_cell(r),
        );
    }
    s
}

/// Marker lines between which `docs/BENCHMARKS.md` holds the generated table.
pub const BEGIN_MARKER: &str = "<!-- bench:begin -->";
/// See [`BEGIN_MARKER`].
pub const END_MARKER: &str = "<!-- bench:end -->";

/// `doc` with everything between the markers replaced by `table`; `None` if the markers are missing or out of
/// order.
pub fn splice(doc: &str, table: &str) -> Option<String> {
    let b = doc.find(BEGIN_MARKER)?;
    let after_begin = b + BEGIN_MARKER.len();
    let e = after_begin + doc[after_begin..].find(END_MARKER)?;
    let mut out = String::with_capacity(doc.len() + table.len());
    out.push_str(&doc[..after_begin]);
    out.push('\n');
    out.push_str(table.trim_end());
    out.push('\n');
    out.push_str(&doc[e..]);
    Some(out)
}

/// The speedup-over-cuBLAS plot: y = cuBLAS time / sparsek time, x = density, one line per block size, for
/// the uniform cases of the largest M x N x K that has any (8192^3 in the default grid). Cases whose cuBLAS or
/// sparsek check failed are left out. `None` when nothing can be plotted.
pub fn speedup_plot(header: &Header, records: &[Record]) -> Option<plot::Canvas> {
    let usable = |r: &&Record| {
        r.case.pattern_name() == "uniform"
            && r.sparsek_passed()
            && r.cublas.trusted()
            && r.speedup_vs_cublas().is_some()
    };
    let shape = records
        .iter()
        .filter(usable)
        .map(|r| (r.case.m, r.case.n, r.case.k))
        .max_by_key(|&(m, n, k)| (m as u128 * n as u128 * k as u128, m, n, k))?;
    let mut bss: Vec<usize> = records.iter().filter(usable).map(|r| r.case.bs).collect();
    bss.sort_unstable();
    bss.dedup();
    let series: Vec<Series> = bss
        .iter()
        .map(|&bs| Series {
            label: format!("BS {bs}"),
            points: records
                .iter()
                .filter(usable)
                .filter(|r| (r.case.m, r.case.n, r.case.k) == shape && r.case.bs == bs)
                .filter_map(|r| Some((r.case.density, r.speedup_vs_cublas()?)))
                .collect(),
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    if series.is_empty() {
        return None;
    }
    let title = format!("SPARSEK SPEEDUP OVER CUBLAS DENSE FP16, {}x{}x{} UNIFORM", shape.0, shape.1, shape.2);
    let subtitle = format!("{}, CUDA {}, {}, COMMIT {}", header.gpu, header.driver, header.date_utc, header.git_commit);
    let labels = Labels {
        title: &title,
        subtitle: &subtitle,
        x_label: "DENSITY (FRACTION OF NONZERO BLOCKS)",
        y_label: "SPEEDUP = CUBLAS TIME / SPARSEK TIME (x)",
    };
    Some(plot::line_plot(&series, &labels, true, Some(1.0)))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use sparsek::format::Pattern;

    pub(crate) fn outcome(kind: &str, ms: Option<f64>, passed: Option<bool>) -> Outcome {
        Outcome::synthetic(kind, ms.map(|t| Timing { median_ms: t, min_ms: t, max_ms: t, samples: 30 }), passed)
    }

    pub(crate) fn record(bs: usize, density: f64, sparsek: f64, cublas: Option<f64>) -> Record {
        let nnzb = (density * (8192 / bs * 8192 / bs) as f64).round() as usize;
        Record {
            case: Case::synthetic(8192, 8192, 8192, bs, density, Pattern::Uniform),
            nnzb,
            seed: 1,
            sparsek: outcome("sparsek", Some(sparsek), Some(true)),
            cublas: cublas.map_or_else(
                || Outcome::unavailable("libcublas not found"),
                |t| outcome("cublas-gemmex-f16-f32", Some(t), Some(true)),
            ),
            cusparse: outcome("bsr-spmm-f16", Some(10.0 * sparsek), Some(false)),
            sm_clock_mhz: Some(1755),
            error: None,
        }
    }

    pub(crate) fn header() -> Header {
        Header {
            gpu: "NVIDIA H100 80GB HBM3".into(),
            compute_capability: (9, 0),
            driver: "13.0".into(),
            sm_count: 132,
            l2_bytes: 50 << 20,
            sm_clock_max_mhz: 1980,
            date_utc: "2026-11-20T10:00:00Z".into(),
            git_commit: "abc1234".into(),
            sparsek_version: "0.1.0".into(),
            cublas: "130001".into(),
            cusparse: "13000".into(),
            iters: 30,
            warmup: 5,
            ..Default::default()
        }
    }

    #[test]
    fn derived_metrics() {
        let r = record(64, 0.5, 1.0, Some(1.5));
        // Half the blocks: 2 * 8192^3 / 2 flops in 1 ms.
        let sparse = 8192f64.powi(3) / 1e-3 / 1e12;
        assert!((r.sparsek_tflops().unwrap() - sparse).abs() < 1e-9);
        assert!((r.cublas_tflops().unwrap() - 2.0 * 8192f64.powi(3) / 1.5e-3 / 1e12).abs() < 1e-9);
        assert!((r.speedup_vs_cublas().unwrap() - 1.5).abs() < 1e-12);
        // ratio = effective / dense TFLOPS = (0.5 / 1.0) / (1 / 1.5) = 0.75.
        assert!((r.ratio_vs_cublas().unwrap() - 0.75).abs() < 1e-12);
        assert!((r.speedup_vs_cusparse().unwrap() - 10.0).abs() < 1e-12);
        let none = record(64, 0.5, 1.0, None);
        assert_eq!(none.ratio_vs_cublas(), None);
        assert_eq!(none.speedup_vs_cublas(), None);
    }

    #[test]
    fn sparse_flops_is_bsr_flops() {
        for (bs, d, n) in [(16, 0.05, 8), (64, 0.22, 128), (128, 0.5, 1)] {
            let a: sparsek::Bsr<sparsek::f16> =
                sparsek::format::generate(Pattern::Uniform, 512, 1024, bs, d, 3).unwrap();
            let mut r = record(bs, d, 1.0, None);
            (r.case.m, r.case.n, r.case.k, r.nnzb) = (512, n, 1024, a.nnzb());
            assert_eq!(r.sparse_flops(), a.flops(n));
        }
    }

    #[test]
    fn markdown_table_rows() {
        let recs = vec![record(64, 0.22, 1.0, Some(1.5)), record(16, 0.05, 0.5, None)];
        let md = markdown(&header(), &recs);
        let rows: Vec<&str> = md.lines().filter(|l| l.starts_with("| 8192")).collect();
        assert_eq!(rows.len(), 2);
        let cells = |row: &str| row.split('|').count();
        let head = md.lines().find(|l| l.starts_with("| M×N×K")).unwrap();
        assert_eq!(cells(rows[0]), cells(head));
        assert!(rows[0].contains("| 22% |") && rows[0].contains("1.50x") && rows[0].contains("33.0%"));
        assert!(rows[0].contains("10.000!"), "untrusted cuSPARSE time is marked: {}", rows[0]);
        assert!(rows[0].contains("cuSPARSE FAIL (time untrusted)"));
        assert!(rows[1].contains("| - |"), "no cuBLAS time: {}", rows[1]);
    }

    #[test]
    fn splice_between_markers() {
        let doc = "# B\n\nintro\n<!-- bench:begin -->\nold\nrows\n<!-- bench:end -->\ntail\n";
        let out = splice(doc, "| new |\n").unwrap();
        assert_eq!(out, "# B\n\nintro\n<!-- bench:begin -->\n| new |\n<!-- bench:end -->\ntail\n");
        // Idempotent.
        assert_eq!(splice(&out, "| new |\n").unwrap(), out);
        assert_eq!(splice("no markers", "x"), None);
        assert_eq!(splice("<!-- bench:end --> <!-- bench:begin -->", "x"), None);
    }

    #[test]
    fn plot_uses_the_uniform_cases_with_cublas() {
        let mut recs = Vec::new();
        for bs in [16, 32, 64, 128] {
            for d in [0.05, 0.1, 0.22, 0.5] {
                recs.push(record(bs, d, d * 4.0, Some(1.6)));
            }
        }
        assert!(speedup_plot(&header(), &recs).is_some());
        let no_cublas: Vec<Record> =
            recs.iter().map(|r| Record { cublas: Outcome::unavailable("x"), ..r.clone() }).collect();
        assert!(speedup_plot(&header(), &no_cublas).is_none());
    }
}
