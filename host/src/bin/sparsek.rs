//! The `sparsek` command line: `info` (the GPU and the kernels), `run` (one product, checked and timed),
//! `bench` (sparsek against cuBLAS and cuSPARSE over a grid of cases; see `sparsek::bench`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand, ValueEnum};
use sparsek::check::{Tolerance, compare, compare_rows};
use sparsek::format::{Pattern, generate};
use sparsek::gpu::{Gpu, OutputElement, median};
use sparsek::rng::Rng;
use sparsek::{Bsr, Epilogue, Matrix, f16};

#[derive(Parser)]
#[command(name = "sparsek", version, about = "Block-sparse (BSR) x dense matrix multiplication on NVIDIA tensor cores")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The GPU (name, compute capability, driver, SMs, L2, shared memory) and every kernel's registers,
    /// shared memory and occupancy as the driver reports them. Exits non-zero without a usable GPU.
    Info {
        /// CUDA device ordinal.
        #[arg(long, default_value_t = 0)]
        device: usize,
    },
    /// Builds or loads a BSR matrix A, multiplies it with a random dense B on the GPU (or the CPU backend when
    /// there is no GPU), checks the result against the f64 CPU oracle, and prints time and effective TFLOPS.
    Run(RunArgs),
    /// Benchmarks sparsek against cuBLAS dense GEMM (f16 in, f32 accumulate) and cuSPARSE on one GPU: checks
    /// every output against the CPU oracle, times the contenders interleaved with CUDA events (median), and
    /// writes OUT_DIR/latest.json, OUT_DIR/speedup.png and the Markdown table (stdout, and between the markers
    /// of OUT_DIR/../BENCHMARKS.md, else OUT_DIR/bench.md). Exits non-zero without a GPU or if a sparsek check
    /// fails.
    Bench(BenchArgs),
}

#[derive(clap::Args)]
struct BenchArgs {
    /// A small grid for smoke tests (2048^3 and a decode shape, seconds) instead of the default 21 cases.
    #[arg(long, conflicts_with_all = ["cases", "matrix"])]
    quick: bool,
    /// Run only this case (repeatable): m,n,k,bs,density[,pattern], density as 0.22 or 22%, pattern uniform
    /// (default), skewed, banded, dense or empty.
    #[arg(long = "case", value_name = "M,N,K,BS,DENSITY[,PATTERN]", conflicts_with = "matrix")]
    cases: Vec<String>,
    /// Benchmark A read from a Matrix Market file (blockified with --bs, padded), times a random B with --n
    /// columns.
    #[arg(long, requires_all = ["bs", "n"])]
    matrix: Option<PathBuf>,
    /// Block size for --matrix.
    #[arg(long, requires = "matrix")]
    bs: Option<usize>,
    /// Columns of B for --matrix.
    #[arg(long, requires = "matrix")]
    n: Option<usize>,
    /// Timed launches per contender (at least 20; the median is reported).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(20..))]
    iters: u64,
    /// Untimed warm-up launches per contender.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Rows of C checked against the oracle per contender (random, plus the first and the last).
    #[arg(long, default_value_t = 64)]
    check_rows: usize,
    /// Seed mixed into every case's A and B.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// cuSPARSE entry point: auto (the first the library accepts of bsr-spmm-f16, bsr-spmm-f16-out16,
    /// bsrmm-f32, csr-spmm-f16, csr-spmm-f16-out16), one of those, or off.
    #[arg(long, default_value = "auto")]
    cusparse: String,
    /// Output directory.
    #[arg(long, default_value = "docs/bench")]
    out_dir: PathBuf,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
}

#[derive(clap::Args)]
struct RunArgs {
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
    #[arg(long, default_value = "uniform")]
    pattern: Pattern,
    /// Seed of the generated A and B.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Load A from a Matrix Market file (blockified with --bs, padded to multiples of --bs) instead of
    /// generating it; --m and --k are then taken from the file.
    #[arg(long)]
    matrix: Option<PathBuf>,
    /// Element type of C.
    #[arg(long, value_enum, default_value_t = OutType::F32)]
    out: OutType,
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
    /// Rows checked against the oracle when M * N exceeds 2^24 (sampled at random, plus the first and last);
    /// smaller products are checked whole.
    #[arg(long, default_value_t = 256)]
    check_rows: usize,
    /// Run on the CPU backend even when a GPU is present.
    #[arg(long)]
    cpu: bool,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum OutType {
    F32,
    F16,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info { device } => info(device),
        Command::Bench(args) => bench(args),
        Command::Run(args) => match args.out {
            OutType::F32 => run::<f32>(&args),
            OutType::F16 => run::<f16>(&args),
        },
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sparsek: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn info(device: usize) -> Result<ExitCode, sparsek::Error> {
    let gpu = match Gpu::new(device) {
        Ok(g) => g,
        Err(e) => {
            println!("sparsek: no usable GPU: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let i = gpu.info();
    println!("GPU {}: {}", i.ordinal, i.name);
    println!("  compute capability   {}.{}", i.compute_capability.0, i.compute_capability.1);
    println!("  driver (CUDA)        {}", i.driver_version_string());
    println!("  SMs                  {}", i.sm_count);
    println!("  SM clock (max)       {} MHz", i.sm_clock_khz / 1000);
    println!("  L2 cache             {:.1} MiB", i.l2_bytes as f64 / (1 << 20) as f64);
    println!("  shared mem / block   {} KiB (opt-in)", i.smem_per_block_optin / 1024);
    println!("  shared mem / SM      {} KiB", i.smem_per_sm / 1024);
    println!("  memory               {:.1} GiB", i.total_mem as f64 / (1u64 << 30) as f64);
    println!("  PTX module           sparsek_sm80 (PTX ISA 8.0, sm_80; JIT-compiled by the driver), loaded");
    println!();
    println!(
        "{:<24} {:>4} {:>7} {:>5} {:>11} {:>12} {:>6} {:>8}",
        "kernel", "bs", "threads", "regs", "static smem", "dynamic smem", "local", "CTAs/SM"
    );
    for k in gpu.kernel_reports()? {
        println!(
            "{:<24} {:>4} {:>7} {:>5} {:>11} {:>12} {:>6} {:>8}",
            k.name, k.bs, k.threads, k.registers, k.static_smem, k.dynamic_smem, k.local_bytes, k.ctas_per_sm
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn bench(args: BenchArgs) -> Result<ExitCode, sparsek::Error> {
    use sparsek::bench::{self, Case, Source};
    let cases = if let Some(path) = &args.matrix {
        let (bs, n) = (args.bs.unwrap_or(0), args.n.unwrap_or(0));
        vec![Case { m: 0, n, k: 0, bs, density: 0.0, source: Source::File(path.clone()) }]
    } else if !args.cases.is_empty() {
        args.cases.iter().map(|c| bench::parse_case(c)).collect::<Result<_, _>>()?
    } else if args.quick {
        bench::quick_grid()
    } else {
        bench::default_grid()
    };
    let cfg = bench::Config {
        cases,
        warmup: args.warmup,
        iters: args.iters as usize,
        check_rows: args.check_rows,
        seed: args.seed,
        out_dir: args.out_dir,
        cusparse: args.cusparse.parse()?,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    let gpu = match Gpu::new(args.device) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("sparsek bench: no usable GPU ({e}); the benchmark needs an NVIDIA GPU (sm_80 or newer)");
            return Ok(ExitCode::FAILURE);
        }
    };
    let summary = bench::run(&gpu, &cfg)?;
    Ok(if summary.all_sparsek_passed { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Effective TFLOPS of a BSR product: 2 * nnzb * bs^2 * N flops in `ms` milliseconds.
fn tflops(nnzb: usize, bs: usize, n: usize, ms: f64) -> f64 {
    2.0 * nnzb as f64 * (bs * bs) as f64 * n as f64 / (ms * 1e-3) / 1e12
}

fn run<TC: OutputElement>(args: &RunArgs) -> Result<ExitCode, sparsek::Error> {
    let t = Instant::now();
    let a: Bsr<f16> = match &args.matrix {
        Some(path) => {
            eprintln!("loading {} (block size {})", path.display(), args.bs);
            Bsr::from_matrix_market(path, args.bs)?
        }
        None => {
            eprintln!(
                "generating A: {}x{} bs {} density {} {} (seed {})",
                args.m, args.k, args.bs, args.density, args.pattern, args.seed
            );
            generate(args.pattern, args.m, args.k, args.bs, args.density, args.seed)?
        }
    };
    let (m, k, n) = (a.rows(), a.cols(), args.n);
    let b = Matrix::<f16>::random(k, n, args.seed ^ 0xB);
    let c0 = if args.beta != 0.0 { Matrix::<TC>::random(m, n, args.seed ^ 0xC) } else { Matrix::<TC>::zeros(m, n) };
    let ep = Epilogue { alpha: args.alpha, beta: args.beta };
    eprintln!("inputs ready in {:.1} s", t.elapsed().as_secs_f64());
    println!(
        "A {m}x{k} bs {} nnzb {} (density {:.4}, longest block row {} blocks), B {k}x{n} f16, C {} (alpha {}, beta {})",
        a.block_size(),
        a.nnzb(),
        a.density(),
        a.max_row_length(),
        TC::NAME,
        args.alpha,
        args.beta
    );

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
    let (got, times, backend) = match &gpu {
        Some(gpu) => {
            let a_d = gpu.upload(&a)?;
            let b_d = gpu.upload_matrix(&b)?;
            let mut c_d = gpu.upload_matrix(&c0)?;
            gpu.spmm(&a_d, &b_d, &mut c_d, ep)?;
            let got = c_d.to_host()?;
            // Timed launches reuse C; with beta != 0 they keep accumulating, which costs the same.
            let times = gpu.time_launches(args.warmup, args.iters.max(1), || gpu.spmm(&a_d, &b_d, &mut c_d, ep))?;
            (
                got,
                times,
                format!(
                    "GPU {} (sm_{}{})",
                    gpu.info().name,
                    gpu.info().compute_capability.0,
                    gpu.info().compute_capability.1
                ),
            )
        }
        None => {
            let mut got = c0.clone();
            sparsek::cpu::spmm(&a, &b, &mut got, ep)?;
            let mut times = Vec::new();
            for _ in 0..args.iters.clamp(1, 5) {
                let mut c = c0.clone();
                let t = Instant::now();
                sparsek::cpu::spmm(&a, &b, &mut c, ep)?;
                times.push(t.elapsed().as_secs_f32() * 1e3);
            }
            (got, times, format!("CPU backend ({} threads)", rayon::current_num_threads()))
        }
    };

    eprintln!("checking against the f64 oracle");
    let tol = Tolerance::for_operands(&a, &b, &c0, ep);
    let report = if m * n <= 1 << 24 {
        compare(&got, &sparsek::cpu::reference(&a, &b, &c0, ep)?, tol)
    } else {
        let mut rng = Rng::new(args.seed ^ 0x5EED);
        let mut rows: Vec<usize> = (0..args.check_rows).map(|_| rng.below(m as u64) as usize).collect();
        rows.extend([0, m - 1]);
        compare_rows(&got, &sparsek::cpu::reference_rows(&a, &b, &c0, ep, &rows)?, tol)
    };
    let med = median(&times) as f64;
    let min = times.iter().copied().fold(f32::INFINITY, f32::min) as f64;
    println!("backend   {backend}");
    println!("time      median {med:.4} ms, min {min:.4} ms over {} launches", times.len());
    println!("TFLOPS    {:.2} effective (2 * nnzb * bs^2 * N / time)", tflops(a.nnzb(), a.block_size(), n, med));
    println!("check     {} ({} elements): {report}", if report.passed() { "PASS" } else { "FAIL" }, report.checked);
    Ok(if report.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
