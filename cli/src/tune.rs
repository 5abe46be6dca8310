//! `sparsek tune`: every tuning candidate on the benchmark shapes (the tuner is `sparsek_bench::tune`).

use std::process::ExitCode;

use sparsek::gpu::Gpu;

#[derive(clap::Args)]
pub struct TuneArgs {
    /// Timed launches per candidate and rasterization order (the median is reported).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(5..))]
    iters: u64,
    /// Only these block sizes (repeatable; default: all).
    #[arg(long = "bs", value_parser = ["16", "32", "64", "128"])]
    block_sizes: Vec<String>,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
}

pub fn tune(args: &TuneArgs) -> Result<ExitCode, sparsek::Error> {
    let gpu = match Gpu::new(args.device) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("sparsek tune: no usable GPU ({e}); tuning needs an NVIDIA GPU (sm_80 or newer)");
            return Ok(ExitCode::FAILURE);
        }
    };
    let block_sizes: Vec<usize> = args.block_sizes.iter().filter_map(|s| s.parse().ok()).collect();
    let summary = sparsek_bench::tune::run(&gpu, args.iters as usize, &block_sizes)?;
    println!("{}", summary.table);
    Ok(if summary.all_correct { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
