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

#[derive(clap::Args)]
pub struct RunArgs {
    /// Rows of A and C.
    #[arg(long, default_value_t = 4096)]
    m: usize,
    /// Columns of B and C.
    #[arg(long, default_value_t = 4096)]
    n: usize,
    /// Columns of A, rows of B.
    #[arg(long, default_value_t = 4096)]
    k: usize,
    /// Block size: 16, 32, 64 or 128.
    #[arg(long, default_value_t = 64)]
    bs: usize,
    /// Fraction of nonzero blocks, in [0, 1].
    #[arg(long, default_value_t = 0.125)]
    density: f64,
    /// Sparsity pattern of the generated A.
    #[arg(long, value_enum, default_value_t = PatternArg::Uniform)]
    pattern: PatternArg,
    /// Seed of the generated A and B.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Load A from a Matrix Market file (blockified with --bs, padded to multiples of --bs) instead of
    /// generating it; --m and --k are then taken from the file.
    #[arg(long)]
    matrix: Option<PathBuf>,
    /// Element type of C.
    #[arg(long, value_enum, default_value_t = OutType::F32)]
    pub out: OutType,
    /// C = alpha * A @ B + beta * C.
    #[arg(long, default_value_t = 1.0)]
    alpha: f32,
    /// C = alpha * A @ B + beta * C (0: C is write-only).
    #[arg(long, default_value_t = 0.0)]
    beta: f32,
    /// Timed launches (the median is reported).
    #[arg(long, default_value_t = 20)]
    iters: usize,
    /// Untimed warm-up launches.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Rows checked against the oracle when M * N exceeds 2^20 (sampled at random, plus the first and last);
    /// smaller products are checked whole.
    #[arg(long, default_value_t = 256)]
    check_rows: usize,
    /// Check every row of C, whatever its size (slow for large products: the oracle runs in f64 on the CPU).
    #[arg(long)]
    full_check: bool,
    /// Run on the CPU backend even when a GPU is present.
    #[arg(long)]
    cpu: bool,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
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

pub fn run<TC: OutputElement>(args: &RunArgs) -> Result<ExitCode, sparsek::Error> {
    let t = Instant::now();
    let mut case = match &args.matrix {
        Some(path) => Case { m: 0, n: args.n, k: 0, bs: args.bs, density: 0.0, source: Source::File(path.clone()) },
        None => Case::synthetic(args.m, args.n, args.k, args.bs, args.density, args.pattern.into()),
    };
    if args.matrix.is_none() {
        eprintln!(
            "generating A: {}x{} bs {} density {} {} (seed {})",
            args.m,
            args.k,
            args.bs,
            args.density,
            Pattern::from(args.pattern),
            args.seed
        );
    }
    let (a, b) = case.operands(args.seed)?;
    let (m, k, n) = (a.rows(), a.cols(), b.cols());
    let c0 = if args.beta != 0.0 { Matrix::<TC>::random(m, n, args.seed ^ 0xC) } else { Matrix::<TC>::zeros(m, n) };
    let ep = Epilogue { alpha: args.alpha, beta: args.beta };
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
        match Gpu::new(args.device) {
            Ok(g) => Some(g),
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
            (got, times, format!("GPU {name} (sm_{major}{minor}), module {}", gpu.module().0))
        }
        None => {
            let mut got = c0.clone();
            sparsek::cpu::spmm(&a, &b, &mut got, ep)?;
            let mut times = Vec::new();
            for _ in 0..iters.min(5) {
                let mut c = c0.clone();
                let t = Instant::now();
                sparsek::cpu::spmm(&a, &b, &mut c, ep)?;
                times.push(t.elapsed().as_secs_f32() * 1e3);
            }
            (got, times, format!("CPU backend ({} threads)", rayon::current_num_threads()))
        }
    };

    let sample =
        if args.full_check { RowSample::All } else { RowSample::auto(m, n, args.check_rows, args.seed ^ 0x5EED) };
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
    if !report.passed() {
        println!("          {report}");
    }
    Ok(if report.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn verdict(passed: bool) -> &'static str {
    if passed { "PASS" } else { "FAIL" }
}
