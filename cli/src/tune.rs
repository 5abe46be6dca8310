//! `sparsek tune`: tunes the plan of one product (`Gpu::tune`: every kernel family, decomposition and group on
//! the matrix, checked, timed, the fastest remembered in the plan cache), lists the cache (`--show`), or runs the
//! kernel-configuration sweep that chose `layout::CONFIGS` (`--configs`, `sparsek_bench::tune`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use sparsek::format::Pattern;
use sparsek::gpu::{Gpu, OutType, TuneOptions, TuneProblem};
use sparsek::tune::PlanCache;
use sparsek_bench::{Case, Source};

#[derive(clap::Args)]
pub struct TuneArgs {
    /// List the plans in the cache (every GPU's) and exit; needs no GPU.
    #[arg(long, conflicts_with = "configs", help_heading = "Plan cache")]
    show: bool,
    /// Delete the plan cache file and exit; needs no GPU.
    #[arg(long, conflicts_with_all = ["configs", "show"], help_heading = "Plan cache")]
    clear: bool,
    /// A: generated or from a file.
    #[command(flatten)]
    a: crate::run::MatrixArgs,
    /// Columns of B and C; repeat for several.
    ///
    /// One plan is saved per power-of-two bucket of N: 1, 2, 4, ..., 16, 32, ...
    #[arg(long = "n", default_values_t = [16usize])]
    n: Vec<usize>,
    /// Block size: 16, 32, 64 or 128 (default 64).
    ///
    /// With --configs: only these block sizes' candidates (repeatable; default there: all).
    #[arg(long)]
    bs: Vec<usize>,
    /// The linear layer's layouts (`y = x @ W^T`: B = x^T and C = y^T, both column-major) instead of row-major.
    #[arg(long)]
    linear: bool,
    /// Element type of C.
    #[arg(long, value_enum, default_value_t = crate::run::OutType::F32)]
    out: crate::run::OutType,
    /// Tuning time per N, in milliseconds.
    ///
    /// Checks included; every candidate gets at least 5 timed launches.
    #[arg(long, default_value_t = 2000)]
    budget_ms: u64,
    /// The plan cache directory.
    ///
    /// Default: SPARSEK_PLAN_CACHE, else the user's cache directory, e.g. ~/.cache/sparsek.
    #[arg(long, help_heading = "Plan cache")]
    cache: Option<PathBuf>,
    /// Measure and print, but do not save the plans.
    #[arg(long, help_heading = "Plan cache")]
    dry_run: bool,
    /// Instead of a plan: check and time every tuning candidate configuration of the kernels.
    ///
    /// Every candidate of layout::TUNE_CONFIGS runs on the benchmark shapes, interleaved, as used to choose the
    /// built-in configurations (layout::CONFIGS).
    #[arg(long, help_heading = "Configuration sweep (instead of a plan)")]
    configs: bool,
    /// With --configs: timed launches per candidate and rasterization order (the median is reported).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(5..), help_heading = "Configuration sweep (instead of a plan)")]
    iters: u64,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
}

pub fn tune(args: &TuneArgs) -> Result<ExitCode, sparsek::Error> {
    crate::run::check_launches("--iters", args.iters)?;
    let cache = args.cache.as_ref().map_or_else(PlanCache::from_env, PlanCache::in_dir);
    if args.show {
        return Ok(show(&cache));
    }
    if args.clear {
        match cache.clear()? {
            true => println!("deleted {}", cache.describe()),
            false => println!("no plan cache file to delete ({})", cache.describe()),
        }
        return Ok(ExitCode::SUCCESS);
    }
    let gpu = match Gpu::new(args.device) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("sparsek tune: no usable GPU ({e}); tuning needs an NVIDIA GPU (sm_80 or newer)");
            return Ok(ExitCode::FAILURE);
        }
    };
    if args.configs {
        let summary = sparsek_bench::tune::run(&gpu, args.iters as usize, &args.bs)?;
        println!("{}", summary.table);
        return Ok(if summary.all_correct { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }
    if cache.is_off() && !args.dry_run {
        eprintln!("sparsek tune: plans are off (SPARSEK_PLAN_CACHE=off): measuring only, nothing is kept");
    }
    let gpu = gpu.with_plan_cache(cache);
    let bs = match args.bs[..] {
        [] => 64,
        [bs] => bs,
        _ => {
            eprintln!("sparsek tune: one --bs per plan (several only with --configs)");
            return Ok(ExitCode::FAILURE);
        }
    };
    let n_max = args.n.iter().copied().max().unwrap_or(1);
    let mut case = match &args.a.matrix {
        Some(path) => Case { m: 0, n: n_max, k: 0, bs, density: 0.0, source: Source::File(path.clone()) },
        None => Case::synthetic(args.a.m, n_max, args.a.k, bs, args.a.density, Pattern::from(args.a.pattern)),
    };
    let budget =
        sparsek_bench::budget::host_available().map_or(usize::MAX, |b| usize::try_from(b / 2).unwrap_or(usize::MAX));
    let (a, _) = case.operands(args.a.seed, budget)?;
    eprintln!(
        "A: {}x{} bs {} nnzb {} (density {:.4}, longest block row {} blocks)",
        a.rows(),
        a.cols(),
        a.block_size(),
        a.nnzb(),
        a.density(),
        a.max_row_length()
    );
    let a_d = gpu.upload(&a)?;
    let out = match args.out {
        crate::run::OutType::F32 => OutType::F32,
        crate::run::OutType::F16 => OutType::F16,
    };
    let opts = TuneOptions {
        budget: Duration::from_millis(args.budget_ms),
        progress: true,
        save: !args.dry_run,
        seed: args.a.seed,
    };
    for &n in &args.n {
        let problem = if args.linear { TuneProblem::linear(n, out) } else { TuneProblem::new(n).with_output(out) };
        let report = gpu.tune(&a_d, &problem, &opts)?;
        println!("{report}");
        match &report.saved {
            Some(Ok(p)) => println!("saved to {}", p.display()),
            Some(Err(e)) => println!("not saved: {e}"),
            None if args.dry_run => println!("not saved (--dry-run)"),
            None => println!("not saved: plans are kept {}", gpu.plan_cache().describe()),
        }
        // What a launch pays for the plan: the key and the cached lookup, measured here.
        let types = problem_types(&problem);
        let reps = 100_000u32;
        let t = std::time::Instant::now();
        for _ in 0..reps {
            std::hint::black_box(gpu.plan_kernel(
                std::hint::black_box(a.block_size()),
                types,
                (a.rows(), a.cols(), n),
                a.nnzb(),
                Some(a.max_row_length()),
            ));
        }
        println!(
            "plan lookup per launch: {:.0} ns (mean of {reps})",
            t.elapsed().as_secs_f64() * 1e9 / f64::from(reps)
        );
        println!();
    }
    Ok(ExitCode::SUCCESS)
}

/// The types and layouts of a tuned problem with f16 inputs.
fn problem_types(problem: &TuneProblem) -> sparsek::tune::ProductTypes {
    (sparsek::gpu::InType::F16, problem.b_layout, problem.out, problem.c_layout)
}

/// `sparsek tune --show`: every plan in the cache file, grouped by GPU and build.
fn show(cache: &PlanCache) -> ExitCode {
    println!("plan cache: {}", cache.describe());
    let contents = cache.read();
    // A file ignored, or lines skipped: said, and the exit status says it too; the plans read are listed.
    let code = if let Some(w) = &contents.warning {
        println!("warning: {w}");
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    };
    if contents.entries.is_empty() {
        println!("no plans (tune one with `sparsek tune --m M --k K --n N --bs BS --density D`)");
        return code;
    }
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut device = None;
    for e in &contents.entries {
        if device != Some(&e.device) {
            println!("\n{}", e.device);
            println!(
                "  {:<64} {:<34} {:>10} {:>10} {:>8} {:>9}",
                "problem", "plan", "tuned us", "heur. us", "speedup", "age"
            );
            device = Some(&e.device);
        }
        let c = &e.cached;
        let age_h = now.saturating_sub(c.unix_time) as f64 / 3600.0;
        println!(
            "  {:<64} {:<34} {:>10.2} {:>10.2} {:>7.3}x {:>8.1}h",
            e.key.to_string(),
            c.plan.to_string(),
            c.tuned_us,
            c.heuristic_us,
            c.heuristic_us / c.tuned_us,
            age_h
        );
    }
    code
}
