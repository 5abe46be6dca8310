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
    /// Plan for at most this many SMs (`Policy::sm_limit`), leaving the rest to other work.
    #[arg(long, value_name = "SMS")]
    sm_limit: Option<std::num::NonZeroU32>,
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
    let policy = Policy { sm_limit: args.sm_limit, ..Policy::default() };
    let layouts = (Layout::RowMajor, Layout::RowMajor);
    let gpu = match args.preset {
        Some(_) => None,
        None => match Gpu::new(args.device) {
            Ok(g) => Some(g.with_policy(policy)),
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
                beta_zero: args.beta == 0.0,
                ..uploaded_problem(a.block_size(), (m, k, n), &lengths)
            };
            println!("device    {preset:?} preset (occupancy estimated from shared memory and threads), no plan cache");
            sparsek::plan::plan(&problem, &device, &policy, None)?
        }
    };
    println!("plan      {plan}");
    Ok(ExitCode::SUCCESS)
}

/// The planner's problem of an uploaded A (`Gpu::upload`: its rows known, longest first on the device) with blocks
/// of `bs`, M x K x N and block rows of `lengths` blocks, longest first (nnzb and the longest row from them); the
/// rest as `Problem::new`. `sparsek plan` without a GPU and `sparsek info`'s plans describe their products so.
pub fn uploaded_problem(bs: usize, (m, k, n): (usize, usize, usize), lengths: &[u32]) -> Problem<'_> {
    let nnzb = lengths.iter().map(|&l| l as usize).sum();
    Problem {
        max_row_blocks: Some(lengths.iter().max().map_or(0, |&l| l as usize)),
        row_lengths: Some(lengths),
        row_order: true,
        ..Problem::new(bs, (m, k, n), nnzb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows' facts of an uploaded A (nnzb and the longest row from the lengths, the row order); the rest as
    /// `Problem::new`.
    #[test]
    fn uploaded_problem_states_the_rows() {
        let (lengths, dims) = ([7u32, 3, 3, 0], (128, 256, 64));
        let p = uploaded_problem(32, dims, &lengths);
        assert_eq!((p.nnzb, p.max_row_blocks, p.row_lengths, p.row_order), (13, Some(7), Some(&lengths[..]), true));
        assert_eq!(
            Problem { max_row_blocks: None, row_lengths: None, row_order: false, ..p },
            Problem::new(32, dims, 13)
        );
        let empty = uploaded_problem(16, (0, 16, 8), &[]);
        assert_eq!((empty.nnzb, empty.max_row_blocks, empty.row_lengths), (0, Some(0), Some(&[][..])));
    }
}
