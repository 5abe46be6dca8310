//! `sparsek plan`: the plan a product would run, without running it (on the GPU: `Gpu::plan`; without one, or
//! with `--preset`: `sparsek::plan::plan` on a named GPU's estimated facts), or the planner's rules table.

use std::process::ExitCode;

use clap::ValueEnum;
use sparsek::gpu::Gpu;
use sparsek::plan::{DeviceFacts, Policy, Preset, Problem, RULES};
use sparsek::{Epilogue, Layout, f16};

use crate::run::{OutType, ProblemArgs};

#[derive(clap::Args)]
pub struct PlanArgs {
    /// The product (only A's structure matters).
    #[command(flatten)]
    problem: ProblemArgs,
    /// C = alpha * A @ B + beta * C (0: C is write-only, which lets the sm_90a kernels store it by TMA).
    #[arg(long, default_value_t = 0.0)]
    beta: f32,
    /// Plan for a named GPU without using one.
    ///
    /// The GPU's SMs and L2 and both kernel modules, with every kernel's occupancy estimated from shared memory
    /// and threads (a real GPU's driver also counts registers: decisions that depend on the wave may differ).
    /// Without a GPU, h100 is used.
    #[arg(long, value_enum)]
    preset: Option<PresetArg>,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Print the planner's rules instead: every threshold, its value, what it decides and the measurement that
    /// set it.
    #[arg(long)]
    rules: bool,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
pub enum PresetArg {
    /// An H100 SXM (132 SMs, 50 MiB of L2).
    H100,
    /// An H200 (132 SMs, 60 MiB of L2).
    H200,
}

impl From<PresetArg> for Preset {
    fn from(p: PresetArg) -> Preset {
        match p {
            PresetArg::H100 => Preset::H100,
            PresetArg::H200 => Preset::H200,
        }
    }
}

pub fn plan(args: &PlanArgs) -> Result<ExitCode, sparsek::Error> {
    if args.rules {
        println!("{:<40} {:>12}  {:<28} decides / measured", "rule", "value", "unit");
        for r in RULES {
            println!("{:<40} {:>12}  {:<28} {}", r.name, r.value, r.unit, r.decides);
            println!("{:<83} {}", "", r.measured);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut case = args.problem.case(1);
    let (a, _) = case.operands(args.problem.a.seed, usize::MAX)?;
    let (m, k, n) = (a.rows(), a.cols(), args.problem.n);
    println!(
        "A         {m}x{k} bs {} nnzb {} (density {:.4}, longest block row {} blocks), N {n}, C {}",
        a.block_size(),
        a.nnzb(),
        a.density(),
        a.max_row_length(),
        match args.problem.out {
            OutType::F32 => "f32",
            OutType::F16 => "f16",
        }
    );
    let ep = Epilogue::new(1.0, args.beta);
    let layouts = (Layout::RowMajor, Layout::RowMajor);
    let gpu = match args.preset {
        Some(_) => None,
        None => match Gpu::new(args.device) {
            Ok(g) => Some(g),
            Err(e) => {
                println!("no GPU ({e}): planning for an h100 (estimated occupancy)");
                None
            }
        },
    };
    let plan = match &gpu {
        Some(gpu) => {
            let a_d = gpu.upload(&a)?;
            let plan = match args.problem.out {
                OutType::F32 => gpu.plan::<f16, f32>(&a_d, n, layouts, ep)?,
                OutType::F16 => gpu.plan::<f16, f16>(&a_d, n, layouts, ep)?,
            };
            println!("device    {} (its kernels and occupancy)", gpu.info().name);
            plan
        }
        None => {
            let preset = args.preset.unwrap_or(PresetArg::H100);
            let device = DeviceFacts::estimated(preset.into());
            let mut lengths: Vec<u32> = a.row_lengths().map(|l| l as u32).collect();
            lengths.sort_unstable_by(|x, y| y.cmp(x));
            let problem = Problem {
                output: match args.problem.out {
                    OutType::F32 => sparsek::gpu::OutType::F32,
                    OutType::F16 => sparsek::gpu::OutType::F16,
                },
                max_row_blocks: Some(a.max_row_length()),
                row_lengths: Some(&lengths),
                row_order: true,
                beta_zero: args.beta == 0.0,
                ..Problem::new(a.block_size(), (m, k, n), a.nnzb())
            };
            println!("device    {preset:?} preset (occupancy estimated from shared memory and threads), no plan cache");
            sparsek::plan::plan(&problem, &device, &Policy::default(), None)?
        }
    };
    println!("plan      {plan}");
    Ok(ExitCode::SUCCESS)
}
