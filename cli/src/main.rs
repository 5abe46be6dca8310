//! The `sparsek` command line: `info` (the GPU and the kernels), `run` (one product, checked and timed),
//! `bench` (sparsek against cuBLAS and cuSPARSE over a grid of cases) and `tune` (the plan of a product, measured
//! and cached; or every tuning candidate configuration of the kernels on the benchmark shapes), `plan` (the plan a
//! product would run, or the planner's rules table). The library is
//! `sparsek`; the benchmark runner, baselines, reports and the tuner are in `sparsek-bench`.
//!
//! Help: each doc comment's first paragraph is an option's `-h` line, the whole comment its `--help` text; options
//! for comparisons and measurement are grouped under their own headings; `--help` wraps to the terminal (at most
//! 100 columns). `cli/tests/help.rs` holds those properties.

mod bench;
mod info;
mod plan;
mod run;
mod tune;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sparsek::f16;

#[derive(Parser)]
#[command(
    name = "sparsek",
    version,
    about = "Block-sparse (BSR) x dense matrix multiplication on NVIDIA tensor cores",
    long_about = "Block-sparse (BSR) x dense matrix multiplication on NVIDIA tensor cores.\n\n\
                  `sparsek run` is the main job: one product, checked against an f64 oracle and timed (on the CPU \
                  backend when there is no GPU). `-h` gives a summary of each command, `--help` the details.",
    max_term_width = 100
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Describes the GPU and every kernel's registers, shared memory and occupancy.
    ///
    /// The GPU (name, compute capability, driver, SMs, L2, shared memory), the PTX module chosen for it, and every
    /// kernel's registers, shared memory and occupancy as the driver reports them. Exits non-zero without a
    /// usable GPU.
    Info {
        /// CUDA device ordinal.
        #[arg(long, default_value_t = 0)]
        device: usize,
    },
    /// Multiplies a BSR matrix by a random dense one, checks the result and times it.
    ///
    /// Builds or loads a BSR matrix A, multiplies it with a random dense B on the GPU (or the CPU backend when
    /// there is no GPU), checks the result against the f64 CPU oracle, and prints time and effective TFLOPS.
    Run(run::RunArgs),
    /// Benchmarks sparsek against cuBLAS and cuSPARSE over a grid of cases (GPU only).
    ///
    /// Benchmarks sparsek against cuBLAS dense GEMM (f16 in, f32 accumulate) and cuSPARSE on one GPU: checks
    /// every output against the CPU oracle, times the contenders interleaved with CUDA events (median), and
    /// writes OUT_DIR/latest.json, OUT_DIR/speedup.png and the Markdown table (stdout, and between the markers
    /// of OUT_DIR/../BENCHMARKS.md, else OUT_DIR/bench.md). Exits non-zero without a GPU or if a sparsek check
    /// fails.
    Bench(bench::BenchArgs),
    /// Measures which kernels serve a product fastest and saves the plan to the cache (GPU only).
    ///
    /// Tunes the plan of a product: every kernel family and rasterization group that can serve it, and each work
    /// decomposition that changes its launch (whole rows, split rows, the flat list, one tile per CTA), runs on the
    /// matrix (generated, or --matrix), is checked against the f64 oracle and timed in alternating blocks; the
    /// fastest, when it beats the built-in heuristic by more than 3%, is saved to the plan cache, which later
    /// launches of the same problem on this GPU use. `--show` lists the cache; `--configs` instead times every
    /// tuning candidate configuration of the kernels (layout::TUNE_CONFIGS) on the benchmark shapes. Exits non-zero
    /// without a GPU (except --show) or if a check fails.
    Tune(tune::TuneArgs),
    /// Prints the plan a product would run, without running it, or the planner's rules.
    ///
    /// The kernel, the work decomposition, the grid, the row order and the launch attributes the library would
    /// choose for a product of A (generated, or --matrix) with N columns: on the GPU as it would launch it (its
    /// kernels, occupancy and plan cache), or without one (or with --preset) for a named GPU whose kernels'
    /// occupancy is estimated. `--rules` prints every threshold the planner decides by, with the measurement that
    /// set it.
    Plan(plan::PlanArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Each command has its crate's error type (the bench's wraps the library's); all print the same way.
    let result: Result<ExitCode, Box<dyn std::error::Error>> = match cli.command {
        Command::Info { device } => info::info(device).map_err(Into::into),
        Command::Bench(args) => bench::bench(args).map_err(Into::into),
        Command::Run(args) => match args.problem.out {
            run::OutType::F32 => run::run::<f32>(&args),
            run::OutType::F16 => run::run::<f16>(&args),
        }
        .map_err(Into::into),
        Command::Tune(args) => tune::tune(&args).map_err(Into::into),
        Command::Plan(args) => plan::plan(&args).map_err(Into::into),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sparsek: error: {e}");
            ExitCode::FAILURE
        }
    }
}
