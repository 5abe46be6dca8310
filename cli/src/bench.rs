//! `sparsek bench`: sparsek against cuBLAS and cuSPARSE over a grid of cases (the runner and the reports are in
//! the `sparsek-bench` crate), and `--compare`, the perf-regression gate: a run (or a results file) against an
//! earlier results file.

use std::path::PathBuf;
use std::process::ExitCode;

use sparsek::gpu::Gpu;
use sparsek::plan::{Policy, RowSplit, TileSchedule};
use sparsek_bench::compare::DEFAULT_THRESHOLD_PCT;
use sparsek_bench::side::{MIN_ITERS, RunConfig};
use sparsek_bench::{Case, CusparseChoice, CusparseKind, Results, Source};

/// `--cusparse`: which cuSPARSE entry point to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CusparseArg {
    /// The first of bsr-spmm-f16, bsr-spmm-f16-out16, bsrmm-f32, csr-spmm-f16, csr-spmm-f16-out16 that the
    /// installed library accepts.
    Auto,
    /// No cuSPARSE baseline.
    Off,
    /// Generic cusparseSpMM on BSR (CUSPARSE_SPMM_BSR_ALG1), f16 in, f32 out.
    #[value(name = "bsr-spmm-f16")]
    BsrSpmmF16,
    /// Generic cusparseSpMM on BSR, f16 in, f16 out.
    #[value(name = "bsr-spmm-f16-out16")]
    BsrSpmmF16Out16,
    /// Legacy cusparseSbsrmm, all f32.
    #[value(name = "bsrmm-f32")]
    BsrmmF32,
    /// Generic cusparseSpMM on A as CSR (every element of every stored block), f16 in, f32 out.
    #[value(name = "csr-spmm-f16")]
    CsrSpmmF16,
    /// Generic cusparseSpMM on A as CSR, f16 in, f16 out.
    #[value(name = "csr-spmm-f16-out16")]
    CsrSpmmF16Out16,
}

impl From<CusparseArg> for CusparseChoice {
    fn from(a: CusparseArg) -> Self {
        match a {
            CusparseArg::Auto => CusparseChoice::Auto,
            CusparseArg::Off => CusparseChoice::Off,
            CusparseArg::BsrSpmmF16 => CusparseChoice::Only(CusparseKind::BsrSpmm { out16: false }),
            CusparseArg::BsrSpmmF16Out16 => CusparseChoice::Only(CusparseKind::BsrSpmm { out16: true }),
            CusparseArg::BsrmmF32 => CusparseChoice::Only(CusparseKind::Bsrmm),
            CusparseArg::CsrSpmmF16 => CusparseChoice::Only(CusparseKind::CsrSpmm { out16: false }),
            CusparseArg::CsrSpmmF16Out16 => CusparseChoice::Only(CusparseKind::CsrSpmm { out16: true }),
        }
    }
}

/// Parses `--split`: `auto`, `off`, `flat`, `flat:K` (K CTAs per SM) or a positive number of blocks per part.
pub fn parse_split(s: &str) -> Result<RowSplit, sparsek::Error> {
    let bad = || sparsek::Error::InvalidArgument {
        name: "--split",
        reason: format!(
            "expected auto, off, flat, flat:K (K >= 1 CTAs per SM) or a positive number of blocks per part, got {s:?}"
        ),
    };
    match s {
        "auto" => Ok(RowSplit::Auto),
        "off" => Ok(RowSplit::Off),
        "flat" => Ok(RowSplit::Flat(0)),
        _ => match s.strip_prefix("flat:") {
            Some(k) => match k.parse::<u32>() {
                Ok(k) if k > 0 => Ok(RowSplit::Flat(k)),
                _ => Err(bad()),
            },
            None => match s.parse::<u32>() {
                Ok(b) if b > 0 => Ok(RowSplit::Blocks(b)),
                _ => Err(bad()),
            },
        },
    }
}

/// How the sm_90a kernels take their tiles (`--schedule`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ScheduleArg {
    /// The library's choice: a persistent grid taking tiles from a counter.
    Auto,
    /// One CTA per output tile.
    PerTile,
    /// A persistent grid walking the tiles with a static stride.
    Static,
}

impl From<ScheduleArg> for TileSchedule {
    fn from(s: ScheduleArg) -> TileSchedule {
        match s {
            ScheduleArg::Auto => TileSchedule::Auto,
            ScheduleArg::PerTile => TileSchedule::PerTile,
            ScheduleArg::Static => TileSchedule::Static,
        }
    }
}

/// The kernels a run may launch (`--module`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModuleChoice {
    /// The library's choice.
    Auto,
    /// The portable sm_80 module only.
    Sm80,
    /// The library's choice without the decode kernels: N <= 16 takes the narrow tile (for comparisons).
    NoDecode,
    /// The library's choice without the sm_90a short-row kernels: bs 64 rows of every length take the
    /// five-stage sm_90a kernel (for comparisons).
    NoShortRows,
    /// The library's choice without marking A evict-first in L2 when a launch reads it once (for comparisons).
    NoEvictFirst,
    /// The library's choice, with programmatic dependent launch where the GPU has it (H100, H200): a product
    /// may start before the kernel ahead of it ends, reading A meanwhile (`Policy::programmatic`; the
    /// benchmarks' kernels never write A).
    Programmatic,
    /// The library's choice without early starts: product launches wait for the kernel ahead of them to end
    /// before their CTAs are placed (`Policy::early_start` off; for comparisons).
    NoEarlyStart,
}

impl ModuleChoice {
    /// Whether launches may use the sm_90a kernels (`Policy::hopper`).
    pub fn hopper(self) -> bool {
        self != ModuleChoice::Sm80
    }

    /// Whether launches of few columns may use the decode kernels (`Policy::decode`).
    pub fn decode(self) -> bool {
        self != ModuleChoice::NoDecode
    }

    /// Whether short bs-64 rows may use the sm_90a short-row kernels (`Policy::short_rows`).
    pub fn short_rows(self) -> bool {
        self != ModuleChoice::NoShortRows
    }

    /// Whether launches that read A once mark it evict-first in L2 (`Policy::a_evict_first`).
    pub fn a_evict_first(self) -> bool {
        self != ModuleChoice::NoEvictFirst
    }

    /// Whether product launches may start before the kernel ahead of them ends (`Policy::programmatic`).
    pub fn programmatic(self) -> bool {
        self == ModuleChoice::Programmatic
    }

    /// Whether the other product launches start early, waiting first (`Policy::early_start`).
    pub fn early_start(self) -> bool {
        self != ModuleChoice::NoEarlyStart
    }
}

/// Which kernels a run launches and how their work is split (`--module`, `--split`, `--schedule`): the library's
/// choice, or it with one kind of kernel turned off or one decomposition fixed, for comparisons (`sparsek bench`
/// and `sparsek run`).
#[derive(clap::Args)]
pub struct KernelChoiceArgs {
    /// Which kernels sparsek launches: the library's choice, or it with one kind of kernel turned off.
    ///
    /// `auto` is the library's choice: the sm_90a kernels for bs 64 and 128 on an H100/H200, the decode kernels at
    /// N <= 16. With `programmatic`, the queued times show what programmatic dependent launch is worth back to
    /// back.
    #[arg(long, value_enum, default_value_t = ModuleChoice::Auto, help_heading = "Kernel choice (for comparisons)")]
    pub module: ModuleChoice,
    /// How long block rows split over several CTAs.
    ///
    /// For the narrow kernels (N <= 64) and the sm_90a ones: `auto` (the library's choice: parts of about 128 KiB
    /// of A, more at bs 128, for launches of one N tile where whole rows leave the GPU short of CTAs; on the
    /// sm_90a kernels at bs 128, rows over twice an equal share of the work), `off` (one CTA per block row),
    /// `flat` or `flat:K` (bs 64 and 128 up to 16 columns, bs 64 up to 64; f16 in, f32 out: the flat block-list
    /// kernel, CTAs each taking an equal share of A's blocks across row boundaries, a wave of them or K per SM) or
    /// a number of blocks per part.
    #[arg(
        long,
        value_name = "auto|off|flat[:K]|BLOCKS",
        default_value = "auto",
        value_parser = parse_split,
        help_heading = "Kernel choice (for comparisons)"
    )]
    pub split: RowSplit,
    /// How the sm_90a kernels (bs 64 and 128 on an H100/H200) take their tiles.
    #[arg(long, value_enum, default_value_t = ScheduleArg::Auto, help_heading = "Kernel choice (for comparisons)")]
    pub schedule: ScheduleArg,
    /// Plan launches for at most this many SMs (`Policy::sm_limit`): the sm_90a kernels' persistent grid fills at
    /// most that many SMs; the other kernels size their work split for them.
    #[arg(long, value_name = "SMS", help_heading = "Kernel choice (for comparisons)")]
    pub sm_limit: Option<std::num::NonZeroU32>,
}

impl KernelChoiceArgs {
    /// The policy of the kernels this choice allows, rows split as `--split` says and the sm_90a tiles scheduled
    /// as `--schedule` says.
    pub fn policy(&self) -> Policy {
        let module = self.module;
        Policy {
            hopper: module.hopper(),
            decode: module.decode(),
            short_rows: module.short_rows(),
            a_evict_first: module.a_evict_first(),
            programmatic: module.programmatic(),
            early_start: module.early_start(),
            row_split: self.split,
            tile_schedule: self.schedule.into(),
            sm_limit: self.sm_limit,
            ..Policy::default()
        }
    }

    /// Opens GPU `device` with [`KernelChoiceArgs::policy`], or says why there is none (the line starts with
    /// `what`, the command) and returns `None`.
    pub fn open(&self, device: usize, what: &str) -> Option<Gpu> {
        match Gpu::new(device) {
            Ok(g) => Some(g.with_policy(self.policy())),
            Err(e) => {
                eprintln!("{what}: no usable GPU ({e}); it needs an NVIDIA GPU (sm_80 or newer)");
                None
            }
        }
    }
}

#[derive(clap::Args)]
pub struct BenchArgs {
    /// A small grid for smoke tests (2048^3 and a decode shape, seconds) instead of the default 21 cases.
    ///
    /// With --decode, 4 of its cases.
    #[arg(long, conflicts_with_all = ["cases", "matrix", "against"], help_heading = "Cases")]
    quick: bool,
    /// Run only this case (repeatable).
    ///
    /// `m,n,k,bs,density[,pattern]`: density as 0.22 or 22%, pattern uniform (default), skewed, banded, dense or
    /// empty.
    #[arg(
        long = "case",
        value_name = "M,N,K,BS,DENSITY[,PATTERN]",
        conflicts_with_all = ["matrix", "against"],
        help_heading = "Cases"
    )]
    cases: Vec<String>,
    /// Benchmark A read from a Matrix Market file, times a random B with --n columns.
    ///
    /// The matrix is blockified with --bs and padded to multiples of it.
    #[arg(long, requires_all = ["bs", "n"], conflicts_with = "against", help_heading = "Cases")]
    matrix: Option<PathBuf>,
    /// Block size for --matrix.
    #[arg(long, requires = "matrix", help_heading = "Cases")]
    bs: Option<usize>,
    /// Columns of B for --matrix.
    #[arg(long, requires = "matrix", help_heading = "Cases")]
    n: Option<usize>,
    /// Timed launches per contender (at least 20; the median is reported).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(20..), help_heading = "Measurement")]
    iters: u64,
    /// Untimed warm-up launches per contender.
    #[arg(long, default_value_t = 5, help_heading = "Measurement")]
    warmup: usize,
    /// Rows of C checked against the oracle per contender (random, plus the first and the last).
    #[arg(long, default_value_t = 64, help_heading = "Measurement")]
    check_rows: usize,
    /// Seed mixed into every case's A and B [default: 1; with --compare, OLD's].
    ///
    /// With --compare the default is OLD's seed, so that the same matrices are measured.
    #[arg(long, help_heading = "Cases")]
    seed: Option<u64>,
    /// The cuSPARSE entry point.
    #[arg(long, value_enum, default_value_t = CusparseArg::Auto, help_heading = "Kernel choice (for comparisons)")]
    cusparse: CusparseArg,
    /// Output directory [default: docs/bench; with --compare, target/bench-compare].
    ///
    /// With --compare the default is target/bench-compare, so that the committed results are not overwritten.
    #[arg(long)]
    out_dir: Option<PathBuf>,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Which kernels sparsek launches, and how their work is split.
    #[command(flatten)]
    kernels: KernelChoiceArgs,
    /// Compare with an earlier run's results (e.g. docs/bench/latest.json).
    ///
    /// Runs the same cases (or those of --quick / --case / --matrix, comparing the cases both have), then prints
    /// per case the old and new sparsek times and ratios to cuBLAS and the change. Exits non-zero when a case
    /// regressed beyond --threshold or a sparsek check failed.
    #[arg(long, value_name = "OLD.json", help_heading = "Comparing runs")]
    compare: Option<PathBuf>,
    /// With --compare: compare OLD with this results file instead of running anything (no GPU needed).
    #[arg(long, value_name = "NEW.json", requires = "compare", help_heading = "Comparing runs")]
    against: Option<PathBuf>,
    /// With --compare: the regression threshold in percent.
    ///
    /// A case regresses when sparsek's speed relative to cuBLAS, measured in the same run (comparable across runs and machines, unlike absolute times under
    /// changing clocks), is lower than OLD's by more than this; where a run has no trusted cuBLAS time,
    /// sparsek's own time is compared. The default 5% is above the run-to-run noise of the interleaved
    /// medians measured on an H100 (about 1-3%).
    #[arg(long, value_name = "PCT", requires = "compare", default_value_t = DEFAULT_THRESHOLD_PCT, help_heading = "Comparing runs")]
    threshold: f64,
    /// Run only the reach comparison (bf16, the linear-layer form and cuBLAS against the f16 product).
    ///
    /// Sparsek's f16 product (row-major, f32 C) against the same values in bf16, the same f16 product in the linear-layer form (column-major B and C views through Gpu::spmm_raw) and
    /// cuBLAS dense f16, each checked against the oracle, then timed interleaved (at least 30 launches, median).
    /// Cases: 8192^3 at bs 64 and 128, density 10% and 22%, and 4096^3 bs 64 12.5%, or those of --case. Writes
    /// OUT_DIR/reach.md and OUT_DIR/reach.json [OUT_DIR default: target/bench-reach] and the table to stdout.
    /// Exits non-zero without a GPU or if a sparsek check fails.
    #[arg(long, conflicts_with_all = ["quick", "matrix", "compare", "against", "cusparse"], help_heading = "Other runs (instead of the grid)")]
    reach: bool,
    /// Run only the decode grid (few columns, layer-sized weights; issue 43's method and targets).
    ///
    /// Sparsek's f16 product (row-major, f32 C), cuBLAS dense f16 at the same N and a read floor (a kernel moving
    /// the case's bytes and nothing else), each checked against the oracle, each over at least 4 rotated copies of
    /// its operands spanning twice L2, each timed three ways per launch: in a CUDA graph of 32 captured launches
    /// (the targets' time), queued behind a kernel holding the stream (the kernel's own time) and per event on an
    /// idle stream (a labelled column). Also the copy bandwidth and an empty launch, measured first. Reports the
    /// stored blocks' rate, its fraction of the read floor's, the speedup over cuBLAS (graph times) and issue 43's
    /// targets: for N <= 16 and at least 8 MB of stored blocks, at least 90% of the read floor's rate and a speedup
    /// of at least 0.8 / density. Cases (64): 8192 x 8192 and 16384 x 16384 at bs 64 and 128, density 10% and 22%,
    /// N 1, 8, 16, 32 and 64; 1536 x 384 and 384 x 1536 at bs 32 and 64, density 25% and 50%, N 1, 16 and 512;
    /// with --quick 4 of them; or those of --case.
    /// Writes OUT_DIR/decode.md and OUT_DIR/decode.json [OUT_DIR default: target/bench-decode] and the table to stdout.
    /// Exits non-zero without a GPU or if a sparsek check fails (a missed target does not fail it).
    #[arg(long, conflicts_with_all = ["reach", "matrix", "compare", "against", "cusparse"], help_heading = "Other runs (instead of the grid)")]
    decode: bool,
    /// Run only the plan comparison (issue 13: the built-in plan against the tuned one).
    ///
    /// Each case's A is tuned (`Gpu::tune`: every kernel family and
    /// rasterization group, checked and timed within --tune-ms), then the built-in heuristic's plan and the
    /// tuned plan are checked against the oracle and re-measured interleaved (at least 30 launches, median,
    /// inputs rotated beyond L2). Cases (20): 8192^3 at bs 64 and 128, 10% and 22%, skewed and banded at bs 64,
    /// 4096^3 bs 64 12.5%, the decode shapes (8192^2 and 16384^2 at N 1 and 16, skewed at N 16, 1536 x 384 and
    /// 384 x 1536 at bs 32 and 64); with --quick 3 of them; or those of --case. The user's plan cache is neither
    /// read nor written. Writes OUT_DIR/tuned.md and OUT_DIR/tuned.json [OUT_DIR default: target/bench-tuned] and
    /// the table to stdout. Exits non-zero without a GPU or if a check fails.
    #[arg(
        long,
        conflicts_with_all = ["reach", "decode", "matrix", "compare", "against", "cusparse"],
        help_heading = "Other runs (instead of the grid)"
    )]
    tuned: bool,
    /// With --tuned: the tuning budget per case, in milliseconds.
    #[arg(long, default_value_t = 1500, requires = "tuned", help_heading = "Other runs (instead of the grid)")]
    tune_ms: u64,
}

/// A side mode of `sparsek bench`: its flag, its output directory unless `--out-dir` names another (the committed
/// results in docs/bench are left alone), its default cases and those of `--quick`.
struct Side {
    mode: &'static str,
    out_dir: &'static str,
    default_cases: fn() -> Vec<Case>,
    quick_cases: fn() -> Vec<Case>,
}

/// `sparsek bench --reach` (see [`BenchArgs::reach`]).
const REACH: Side = Side {
    mode: "--reach",
    out_dir: "target/bench-reach",
    default_cases: sparsek_bench::reach::default_cases,
    quick_cases: sparsek_bench::reach::default_cases,
};

/// `sparsek bench --decode` (see [`BenchArgs::decode`]).
const DECODE: Side = Side {
    mode: "--decode",
    out_dir: "target/bench-decode",
    default_cases: sparsek_bench::decode::default_cases,
    quick_cases: sparsek_bench::decode::quick_cases,
};

/// `sparsek bench --tuned` (see [`BenchArgs::tuned`]).
const TUNED: Side = Side {
    mode: "--tuned",
    out_dir: "target/bench-tuned",
    default_cases: sparsek_bench::plans::default_cases,
    quick_cases: sparsek_bench::plans::quick_cases,
};

/// The configuration of a side run from the command line (its cases: those of `--case`, else its `--quick` or
/// its default cases; at least `side::MIN_ITERS` timed launches, saying so when `--iters` asked for fewer) and
/// the GPU it runs on; `None` without a GPU (said on stderr).
fn side_setup(args: &BenchArgs, side: &Side) -> Result<Option<(RunConfig, Gpu)>, sparsek::Error> {
    let cases = if !args.cases.is_empty() {
        args.cases.iter().map(|c| sparsek_bench::parse_case(c)).collect::<Result<_, _>>()?
    } else if args.quick {
        (side.quick_cases)()
    } else {
        (side.default_cases)()
    };
    let iters = usize::try_from(args.iters).unwrap_or(usize::MAX);
    if iters < MIN_ITERS {
        eprintln!("sparsek bench {}: --iters {iters} raised to {MIN_ITERS}", side.mode);
    }
    let cfg = RunConfig {
        cases,
        warmup: args.warmup,
        iters: iters.max(MIN_ITERS),
        check_rows: args.check_rows,
        seed: args.seed.unwrap_or(1),
        out_dir: args.out_dir.clone().unwrap_or_else(|| PathBuf::from(side.out_dir)),
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    let what = format!("sparsek bench {}", side.mode);
    Ok(args.kernels.open(args.device, &what).map(|gpu| (cfg, gpu)))
}

/// Success when every check passed.
fn verdict(all_passed: bool) -> ExitCode {
    if all_passed { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

fn reach(args: &BenchArgs) -> Result<ExitCode, sparsek_bench::Error> {
    let Some((cfg, gpu)) = side_setup(args, &REACH)? else { return Ok(ExitCode::FAILURE) };
    Ok(verdict(sparsek_bench::reach::run(&gpu, &cfg)?.all_passed))
}

fn decode(args: &BenchArgs) -> Result<ExitCode, sparsek_bench::Error> {
    let Some((cfg, gpu)) = side_setup(args, &DECODE)? else { return Ok(ExitCode::FAILURE) };
    // A second Gpu on the same context (the buffers are the first one's) and settings, with programmatic launches,
    // for the queued column of that name, when the GPU has it and the run's own launches are not programmatic.
    let programmatic = if args.kernels.module.programmatic() || !gpu.programmatic_launch_available() {
        None
    } else {
        match Gpu::from_context(gpu.context().clone()) {
            Ok(g) => Some(g.with_policy(Policy { programmatic: true, ..args.kernels.policy() })),
            Err(e) => {
                eprintln!("sparsek bench --decode: no second Gpu for the programmatic column ({e})");
                None
            }
        }
    };
    Ok(verdict(sparsek_bench::decode::run(&gpu, programmatic.as_ref(), &cfg)?.all_passed))
}

fn tuned(args: &BenchArgs) -> Result<ExitCode, sparsek_bench::Error> {
    let Some((cfg, gpu)) = side_setup(args, &TUNED)? else { return Ok(ExitCode::FAILURE) };
    // Plans tuned here serve nothing else, and the user's cache must not decide the heuristic's side.
    let gpu = gpu.with_plan_cache(sparsek::tune::PlanCache::memory());
    Ok(verdict(sparsek_bench::plans::run(&gpu, &cfg, std::time::Duration::from_millis(args.tune_ms))?.all_passed))
}

pub fn bench(args: BenchArgs) -> Result<ExitCode, sparsek_bench::Error> {
    crate::run::check_launches("--iters", args.iters)?;
    crate::run::check_launches("--warmup", args.warmup as u64)?;
    if args.tuned {
        return tuned(&args);
    }
    if args.reach {
        return reach(&args);
    }
    if args.decode {
        return decode(&args);
    }
    if !(args.threshold.is_finite() && args.threshold >= 0.0) {
        return Err(sparsek::Error::InvalidArgument {
            name: "--threshold",
            reason: format!("{} is not a percentage >= 0", args.threshold),
        }
        .into());
    }
    let read = |path: &PathBuf| -> Result<Results, sparsek_bench::Error> {
        let r = sparsek_bench::read_results(path)?;
        if !r.complete {
            eprintln!("sparsek bench: {} is from an interrupted run (\"complete\": false)", path.display());
        }
        Ok(r)
    };
    let old = args.compare.as_ref().map(read).transpose()?;
    if let (Some(old), Some(new_path)) = (&old, &args.against) {
        let new = read(new_path)?;
        let comparison = sparsek_bench::compare(old, &new, args.threshold);
        print!("{comparison}");
        return Ok(verdict(comparison.passed()));
    }

    let chosen = args.matrix.is_some() || !args.cases.is_empty() || args.quick;
    let cases = if let Some(path) = &args.matrix {
        let (bs, n) = (args.bs.unwrap_or(0), args.n.unwrap_or(0));
        vec![Case { m: 0, n, k: 0, bs, density: 0.0, source: Source::File(path.clone()) }]
    } else if !args.cases.is_empty() {
        args.cases.iter().map(|c| sparsek_bench::parse_case(c)).collect::<Result<_, _>>()?
    } else if args.quick {
        sparsek_bench::quick_grid()
    } else if let Some(old) = &old {
        if old.records.is_empty() {
            return Err(sparsek::Error::InvalidArgument {
                name: "--compare",
                reason: "the results file has no cases to run again".into(),
            }
            .into());
        }
        old.cases()
    } else {
        sparsek_bench::default_grid()
    };
    let seed = args.seed.or(old.as_ref().map(|o| o.header.seed)).unwrap_or(1);
    let out_dir = args
        .out_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(if old.is_some() { "target/bench-compare" } else { "docs/bench" }));
    let run = RunConfig {
        cases,
        warmup: args.warmup,
        iters: args.iters as usize,
        check_rows: args.check_rows,
        seed,
        out_dir,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    let cfg = sparsek_bench::Config { run, cusparse: args.cusparse.into() };
    let Some(gpu) = args.kernels.open(args.device, "sparsek bench") else {
        if old.is_some() {
            eprintln!("sparsek bench: to compare two results files without a GPU, add --against NEW.json");
        }
        return Ok(ExitCode::FAILURE);
    };
    let summary = sparsek_bench::run(&gpu, &cfg)?;
    let mut ok = summary.all_sparsek_passed;
    if let Some(old) = &old {
        let new = Results { header: summary.header, complete: true, records: summary.records };
        let mut comparison = sparsek_bench::compare(old, &new, args.threshold);
        println!();
        if chosen {
            let left_out = comparison.common_only();
            if left_out > 0 {
                println!("{left_out} cases of OLD were not run; comparing the cases both runs have.");
            }
        }
        print!("{comparison}");
        ok &= comparison.passed();
    }
    Ok(verdict(ok))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn cusparse_values_keep_the_kind_names() {
        for v in CusparseArg::value_variants() {
            let name = v.to_possible_value().unwrap().get_name().to_string();
            assert_eq!(name.parse::<CusparseChoice>().unwrap(), CusparseChoice::from(*v), "{name}");
        }
        let kinds: Vec<&str> = CusparseKind::AUTO.iter().map(|k| k.name()).collect();
        let values: Vec<String> =
            CusparseArg::value_variants().iter().map(|v| v.to_possible_value().unwrap().get_name().into()).collect();
        assert_eq!(values[2..], kinds[..], "one value per cuSPARSE kind, in the same order");
    }

    #[derive(clap::Parser)]
    struct Cmd {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
        use clap::Parser;
        Cmd::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn reach_flag_parses_and_conflicts() {
        let a = parse(&["--reach"]).unwrap();
        assert!(a.reach && a.cases.is_empty() && a.out_dir.is_none());
        let a = parse(&["--reach", "--case", "2048,2048,2048,64,10%", "--out-dir", "x", "--iters", "40"]).unwrap();
        assert!(a.reach);
        assert_eq!(a.cases.len(), 1);
        assert_eq!(a.iters, 40);
        for bad in [
            &["--reach", "--quick"][..],
            &["--reach", "--compare", "old.json"],
            &["--reach", "--cusparse", "off"],
            &["--reach", "--matrix", "a.mtx", "--bs", "64", "--n", "8"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(!parse(&[]).unwrap().reach);
    }

    #[test]
    fn decode_flag_parses_and_conflicts() {
        let a = parse(&["--decode"]).unwrap();
        assert!(a.decode && !a.quick && a.cases.is_empty() && a.out_dir.is_none());
        let a = parse(&["--decode", "--quick", "--out-dir", "x", "--iters", "40", "--warmup", "3"]).unwrap();
        assert!(a.decode && a.quick);
        assert_eq!((a.iters, a.warmup), (40, 3));
        assert!(parse(&["--decode", "--case", "8192,1,8192,64,22%"]).unwrap().cases.len() == 1);
        for bad in [
            &["--decode", "--reach"][..],
            &["--decode", "--compare", "old.json"],
            &["--decode", "--cusparse", "off"],
            &["--decode", "--matrix", "a.mtx", "--bs", "64", "--n", "8"],
            &["--decode", "--quick", "--case", "8192,1,8192,64,22%"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(!parse(&[]).unwrap().decode);
    }
}
