//! `sparsek run`: one product, checked against the f64 oracle and timed.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::ValueEnum;
use sparsek::check::{Expected, RowSample};
use sparsek::format::Pattern;
use sparsek::gpu::timing::{EventTimer, median};
use sparsek::gpu::{Gpu, OutputElement};
use sparsek::{Epilogue, Matrix};
use sparsek_bench::{Case, Source};

/// A of `sparsek run` and `sparsek tune`: generated (shape, density, pattern, seed) or read from a file.
#[derive(clap::Args)]
pub struct MatrixArgs {
    /// Rows of A and C.
    #[arg(long, default_value_t = 4096)]
    pub m: usize,
    /// Columns of A, rows of B.
    #[arg(long, default_value_t = 4096)]
    pub k: usize,
    /// Fraction of nonzero blocks, in [0, 1].
    #[arg(long, default_value_t = 0.125)]
    pub density: f64,
    /// Sparsity pattern of the generated A.
    #[arg(long, value_enum, default_value_t = PatternArg::Uniform)]
    pub pattern: PatternArg,
    /// Seed of the generated A and B.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Load A from a Matrix Market file instead of generating it.
    ///
    /// The matrix is blockified with --bs and padded to multiples of --bs; --m and --k are then taken from the
    /// file (giving --m, --k, --density or --pattern with it is an error).
    #[arg(long, conflicts_with_all = ["m", "k", "density", "pattern"])]
    pub matrix: Option<PathBuf>,
}

/// The product of `sparsek run` and `sparsek plan`: A, the columns of B and C, the block size and C's type.
#[derive(clap::Args)]
pub struct ProblemArgs {
    /// A: generated or from a file.
    #[command(flatten)]
    pub a: MatrixArgs,
    /// Columns of B and C.
    #[arg(long, default_value_t = 4096)]
    pub n: usize,
    /// Block size: 16, 32, 64 or 128.
    #[arg(long, default_value_t = 64)]
    pub bs: usize,
    /// Element type of C.
    #[arg(long, value_enum, default_value_t = OutType::F32)]
    pub out: OutType,
}

impl ProblemArgs {
    /// The benchmark case of A with `n` columns of B and C (A read from its file, or its generator's settings).
    pub fn case(&self, n: usize) -> Case {
        match &self.a.matrix {
            Some(path) => Case { m: 0, n, k: 0, bs: self.bs, density: 0.0, source: Source::File(path.clone()) },
            None => Case::synthetic(self.a.m, n, self.a.k, self.bs, self.a.density, self.a.pattern.into()),
        }
    }
}

#[derive(clap::Args)]
pub struct RunArgs {
    /// The product.
    #[command(flatten)]
    pub problem: ProblemArgs,
    /// C = alpha * A @ B + beta * C.
    #[arg(long, default_value_t = 1.0)]
    alpha: f32,
    /// C = alpha * A @ B + beta * C (0: C is write-only).
    #[arg(long, default_value_t = 0.0)]
    beta: f32,
    /// Timed launches (the median is reported).
    #[arg(long, default_value_t = 20, help_heading = "Measurement")]
    iters: usize,
    /// Untimed warm-up launches.
    #[arg(long, default_value_t = 5, help_heading = "Measurement")]
    warmup: usize,
    /// Rows of C checked against the oracle when M * N exceeds 2^20.
    ///
    /// The rows are sampled at random, plus the first and the last; smaller products are checked whole.
    #[arg(long, default_value_t = 256, help_heading = "Measurement")]
    check_rows: usize,
    /// Check every row of C, whatever its size.
    ///
    /// Slow for large products: the oracle runs in f64 on the CPU.
    #[arg(long, help_heading = "Measurement")]
    full_check: bool,
    /// Run on the CPU backend even when a GPU is present.
    #[arg(long)]
    cpu: bool,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Which kernels run, and how their work is split.
    #[command(flatten)]
    kernels: crate::bench::KernelChoiceArgs,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
pub enum OutType {
    F32,
    F16,
}

/// The generators' patterns (`sparsek::format::Pattern`) as a clap value enum, so `--help` lists them.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
pub enum PatternArg {
    /// Blocks spread at random, every block row about the same length.
    Uniform,
    /// Power-law block-row lengths (same number of blocks as uniform).
    Skewed,
    /// Blocks on a band around the diagonal.
    Banded,
    /// Every block.
    Dense,
    /// No blocks.
    Empty,
}

impl From<PatternArg> for Pattern {
    fn from(p: PatternArg) -> Pattern {
        match p {
            PatternArg::Uniform => Pattern::Uniform,
            PatternArg::Skewed => Pattern::Skewed,
            PatternArg::Banded => Pattern::Banded,
            PatternArg::Dense => Pattern::Dense,
            PatternArg::Empty => Pattern::Empty,
        }
    }
}

/// The most timed or warm-up launches `--iters`/`--warmup` (and `bench`/`tune`'s) take: more would run for hours
/// (10^18 launches of even the smallest product never end), and the median does not need them.
pub const MAX_LAUNCHES: u64 = 100_000;

/// `Err` naming `name` when `value` launches exceed [`MAX_LAUNCHES`].
pub fn check_launches(name: &'static str, value: u64) -> Result<(), sparsek::Error> {
    if value > MAX_LAUNCHES {
        return Err(sparsek::Error::InvalidArgument {
            name,
            reason: format!("{value} launches is more than the {MAX_LAUNCHES} allowed"),
        });
    }
    Ok(())
}

pub fn run<TC: OutputElement>(args: &RunArgs) -> Result<ExitCode, sparsek::Error> {
    check_launches("--iters", args.iters as u64)?;
    check_launches("--warmup", args.warmup as u64)?;
    let t = Instant::now();
    let mut case = args.problem.case(args.problem.n);
    let host_limit = sparsek_bench::budget::host_available();
    if args.problem.a.matrix.is_none() {
        // A (values, indices and the generator's per-block-row scratch) before it is generated.
        let (br, bc) =
            ((args.problem.a.m / args.problem.bs.max(1)) as u128, (args.problem.a.k / args.problem.bs.max(1)) as u128);
        let nnzb = (args.problem.a.density.clamp(0.0, 1.0) * (br * bc) as f64).ceil() as u128;
        let mut est = sparsek_bench::budget::Estimate::default();
        est.add("A values", nnzb.saturating_mul((args.problem.bs * args.problem.bs) as u128), 2);
        est.add("A structure", nnzb.saturating_add(br.saturating_mul(14)), 4);
        if let Some(limit) = host_limit
            && let Err(msg) = est.check("host", limit)
        {
            eprintln!("sparsek run: {msg}");
            return Ok(ExitCode::FAILURE);
        }
    }
    // B, C and the oracle's rows: checked before anything is allocated (after A for a file, whose shape the file
    // gives; A itself is bounded by the reader).
    if args.problem.a.matrix.is_none()
        && let Err(msg) = check_dense_budget::<TC>(args, (case.m, case.k, case.n), host_limit)
    {
        eprintln!("sparsek run: {msg}");
        return Ok(ExitCode::FAILURE);
    }
    if args.problem.a.matrix.is_none() {
        eprintln!(
            "generating A: {}x{} bs {} density {} {} (seed {})",
            args.problem.a.m,
            args.problem.a.k,
            args.problem.bs,
            args.problem.a.density,
            Pattern::from(args.problem.a.pattern),
            args.problem.a.seed
        );
    }
    // A file's BSR may use at most half of the host memory available now (the rest is for B, C and the check).
    let file_budget = host_limit.map_or(usize::MAX, |b| usize::try_from(b / 2).unwrap_or(usize::MAX));
    let (a, b, underflow) = case.operands_with_underflow(args.problem.a.seed, file_budget)?;
    let (m, k, n) = (a.rows(), a.cols(), b.cols());
    if args.problem.a.matrix.is_some()
        && let Err(msg) = check_dense_budget::<TC>(args, (m, k, n), host_limit)
    {
        eprintln!("sparsek run: {msg}");
        return Ok(ExitCode::FAILURE);
    }
    let c0 = if args.beta != 0.0 {
        Matrix::<TC>::random(m, n, args.problem.a.seed ^ 0xC)?
    } else {
        Matrix::<TC>::zeros(m, n)?
    };
    // A file's values below f16's range are stored as zero: said here, as an overflow would be (an error).
    if let Some(u) = underflow.filter(|u| u.count > 0) {
        let (r, c, v) = u.first.unwrap_or_default();
        println!(
            "underflow {} values of the file are nonzero but below f16's range, stored as zero (the first at ({r}, \
             {c}): {v:e}); the check uses A as stored",
            u.count
        );
    }
    let ep = Epilogue::new(args.alpha, args.beta);
    eprintln!("inputs ready in {:.1} s", t.elapsed().as_secs_f64());
    println!(
        "A         {m}x{k} bs {} nnzb {} (density {:.4}, longest block row {} blocks)",
        a.block_size(),
        a.nnzb(),
        a.density(),
        a.max_row_length(),
    );
    println!("B, C      B {k}x{n} f16, C {m}x{n} {} (alpha {}, beta {})", TC::NAME, args.alpha, args.beta);

    let gpu = if args.cpu {
        None
    } else {
        match Gpu::new(args.device).map(|g| g.with_policy(args.kernels.policy())) {
            Ok(g) => {
                // Device buffers: A, B and C with their leading dimensions rounded up to 16 bytes.
                let ld = |cols: usize, size: usize| (cols.max(1).div_ceil(16 / size) * (16 / size)) as u128;
                let mut est = sparsek_bench::budget::Estimate::default();
                est.add("A", a.values().len() as u128 + 2 * a.nnzb() as u128 + 4 * (a.block_rows() as u128 + 1), 2);
                est.add("B", k as u128 * ld(n, 2), 2);
                est.add("C", m as u128 * ld(n, std::mem::size_of::<TC>()), std::mem::size_of::<TC>() as u128);
                if let Err(msg) = est.check("GPU", u128::from(g.info().total_mem)) {
                    eprintln!("sparsek run: {msg}");
                    return Ok(ExitCode::FAILURE);
                }
                Some(g)
            }
            Err(e) => {
                println!("no GPU ({e}): running the CPU backend");
                None
            }
        }
    };
    let iters = args.iters.max(1);
    let (got, times, backend) = match &gpu {
        Some(gpu) => {
            let a_d = gpu.upload(&a)?;
            let b_d = gpu.upload_matrix(&b)?;
            let mut c_d = gpu.upload_matrix(&c0)?;
            gpu.spmm(&a_d, &b_d, &mut c_d, ep)?;
            let got = c_d.to_host()?;
            // Timed launches reuse C; with beta != 0 they keep accumulating, which costs the same.
            let timer = EventTimer::new(gpu.stream());
            let times = timer.time(args.warmup, iters, || gpu.spmm(&a_d, &b_d, &mut c_d, ep))?;
            let (name, (major, minor)) = (&gpu.info().name, gpu.info().compute_capability);
            // The plan of the last launch: what ran (the library's one decision, not rebuilt here).
            let plan = gpu.last_plan().map_or_else(|| "none (nothing to launch)".to_string(), |p| p.to_string());
            (got, times, format!("GPU {name} (sm_{major}{minor}), kernel {plan}"))
        }
        None => {
            // Every copy of C is allocated fallibly (an error, not an abort, under a memory limit).
            let mut got = c0.try_clone()?;
            sparsek::cpu::spmm(&a, &b, &mut got, ep)?;
            let mut times = Vec::new();
            let mut c = c0.try_clone()?;
            for i in 0..iters.min(5) {
                if i > 0 {
                    c.as_mut_slice().copy_from_slice(c0.as_slice());
                }
                let t = Instant::now();
                sparsek::cpu::spmm(&a, &b, &mut c, ep)?;
                times.push(t.elapsed().as_secs_f32() * 1e3);
            }
            (got, times, format!("CPU backend ({} threads)", rayon::current_num_threads()))
        }
    };

    let sample = if args.full_check {
        RowSample::All
    } else {
        RowSample::auto(m, n, args.check_rows, args.problem.a.seed ^ 0x5EED)
    };
    let t = Instant::now();
    let mut last = Instant::now();
    let expected = Expected::compute(&a, &b, &c0, ep, sample, |done, total| {
        if last.elapsed().as_secs_f64() >= 2.0 && done < total {
            eprintln!("checking against the f64 oracle: {done}/{total} rows ({:.0} s)", t.elapsed().as_secs_f64());
            last = Instant::now();
        }
    })?;
    let report = expected.check(&got);
    let ms = median(&times).map_or(f64::NAN, f64::from);
    let min = times.iter().copied().fold(f32::INFINITY, f32::min);
    println!("backend   {backend}");
    println!("time      median {ms:.4} ms, min {min:.4} ms over {} launches", times.len());
    println!("TFLOPS    {:.2} effective (2 * nnzb * bs^2 * N / time)", a.flops(n) / (ms * 1e-3) / 1e12);
    let rows = if expected.is_full() {
        format!("all {m} rows")
    } else {
        format!("{} sampled rows of {m} (--full-check for all)", expected.rows().len())
    };
    println!(
        "check     {} against the f64 oracle on {rows}, {} elements, {:.1} s",
        verdict(report.passed()),
        report.checked,
        t.elapsed().as_secs_f64()
    );
    println!(
        "          max abs err {:.3e}; max rel err {:.3e} where |expected| > atol; tolerance atol {:.3e} + rtol {:.3e} * |expected|",
        report.max_abs_err, report.max_rel_err, report.tolerance.atol, report.tolerance.rtol
    );
    if let Some(note) = &report.note {
        println!("          note: {note}");
    }
    if !report.passed() {
        println!("          {report}");
    }
    Ok(if report.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// `Err(message)` when B, C (before, after and per timed CPU run) and the oracle's rows of an `m x k x n` run
/// will not fit in `host_limit` bytes.
fn check_dense_budget<TC: OutputElement>(
    args: &RunArgs,
    (m, k, n): (usize, usize, usize),
    host_limit: Option<u128>,
) -> Result<(), sparsek_bench::budget::OverBudget> {
    let checked_rows = if args.full_check || m.saturating_mul(n) <= RowSample::FULL_CHECK_ELEMENTS {
        m
    } else {
        args.check_rows.saturating_add(2).min(m)
    };
    let mut est = sparsek_bench::budget::Estimate::default();
    est.add("B", (k as u128).saturating_mul(n as u128), 2);
    let c_bytes = 3 * std::mem::size_of::<TC>() as u128;
    est.add("C before, after and per timed CPU run", (m as u128).saturating_mul(n as u128), c_bytes);
    est.add("oracle rows", (checked_rows as u128).saturating_mul(n as u128), 8);
    match host_limit {
        Some(limit) => est.check("host", limit),
        None => Ok(()),
    }
}

fn verdict(passed: bool) -> &'static str {
    if passed { "PASS" } else { "FAIL" }
}
