//! `sparsek info`: the GPU and every kernel.

use std::process::ExitCode;

use sparsek::gpu::Gpu;

pub fn info(device: usize) -> Result<ExitCode, sparsek::Error> {
    let opening = std::time::Instant::now();
    let gpu = match Gpu::new(device) {
        Ok(g) => g,
        Err(e) => {
            println!("sparsek: no usable GPU: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let opened = opening.elapsed();
    let i = gpu.info();
    println!("GPU {}: {}", i.ordinal, i.name);
    println!("  compute capability   {}.{}", i.compute_capability.0, i.compute_capability.1);
    println!("  driver (CUDA)        {}", i.driver_version_string());
    println!("  SMs                  {}", i.sm_count);
    println!("  SM clock (max)       {} MHz", i.sm_clock_khz / 1000);
    println!("  L2 cache             {:.1} MiB", i.l2_bytes as f64 / (1 << 20) as f64);
    match i.max_access_policy_window {
        0 => println!("  L2 policy windows    none (decode launches do not mark A evict-first)"),
        w => println!(
            "  L2 policy windows    up to {:.0} MiB (decode launches mark up to that much of A evict-first)",
            w as f64 / (1 << 20) as f64
        ),
    }
    println!("  shared mem / block   {} KiB (opt-in)", i.smem_per_block_optin / 1024);
    println!("  shared mem / SM      {} KiB", i.smem_per_sm / 1024);
    println!("  memory               {:.1} GiB", i.total_mem as f64 / (1u64 << 30) as f64);
    println!(
        "  opened in            {:.1} ms (context, modules, kernels, workspace and plan cache: Gpu::new)",
        opened.as_secs_f64() * 1e3
    );
    let (module, description) = gpu.module();
    println!("  kernel module        {module} ({description})");
    println!("  loaded as            {}", gpu.module_loaded_from());
    println!(
        "  programmatic launch  {}",
        if gpu.programmatic_launch_available() {
            "available: products start under the kernel ahead of them, waiting for it first (Policy::early_start, \
             on by default), or reading A meanwhile (Policy::programmatic, off by default)"
        } else {
            "not on this GPU (needs the product module's sm_90a cubin: H100, H200)"
        }
    );
    match (gpu.hopper_module(), gpu.hopper_loaded_from()) {
        (Some((name, description)), Some(from)) => {
            println!("  sm_90a module        {name} ({description})");
            println!("  loaded as            {from}");
        }
        _ => println!("  sm_90a module        none (needs compute capability 9.0)"),
    }
    let plans = gpu.cached_plans();
    println!(
        "  plan cache           {} ({} tuned plans for this GPU and build)",
        gpu.plan_cache().describe(),
        plans.len()
    );
    if let Some(w) = gpu.plan_cache_warning() {
        println!("                       warning: {w}");
    }
    if gpu.has_split_workspace() {
        println!(
            "  split rows           launches of one N tile (narrow/mid kernels) on at most {} block rows or with one \
             row over 4x the mean: parts of ~{} KiB of A (parts under {} k-tiles grow toward one per SM, up \
             to {}); workspace {} MiB + {} counters",
            gpu.info().sm_count,
            sparsek::gpu::SPLIT_PART_BYTES >> 10,
            sparsek::gpu::SPLIT_PART_SHORT_K_TILES,
            sparsek::gpu::SPLIT_PART_MAX_GROWN_K_TILES,
            sparsek::gpu::SPLIT_PARTIALS_BYTES >> 20,
            sparsek::gpu::SPLIT_COUNTERS
        );
        println!(
            "  flat block list      instead of whole rows for launches of one N tile (bs 64 and 128 narrow tiles; \
             f16 in, row-major B, f32 C) with at least {} k-tiles of 64 rows per CTA of {} per SM and the longest \
             row 15% over the mean; on bs 64's tiles of 32 and 64 columns where the busiest SM's whole rows exceed \
             an equal share by {} k-tiles, with at least {} k-tiles per CTA (--split flat[:K] asks for it)",
            sparsek::gpu::FLAT_AUTO_MIN_K_TILES_PER_CTA,
            sparsek::gpu::FLAT_AUTO_CTAS_PER_SM,
            sparsek::gpu::FLAT_MID_AUTO_MARGIN_K_TILES,
            sparsek::gpu::FLAT_MID_AUTO_MIN_K_TILES_PER_CTA
        );
    } else {
        println!("  split rows           off: the workspace could not be allocated");
    }
    println!();
    println!(
        "the plans the built-in heuristic makes (tuned plans override it for their problems: `sparsek tune --show`;"
    );
    println!(
        "`sparsek plan` for any other problem; f16 inputs, row-major B and C, f32 C, beta 0, rows of equal length):"
    );
    print_plans(&gpu, i.sm_count as usize)?;
    println!();
    println!(
        "{:<36} {:>4} {:>4} {:<22} {:>7} {:>5} {:>11} {:>12} {:>6} {:>8}",
        "kernel",
        "bs",
        "C",
        "tile (BN BK warps st)",
        "threads",
        "regs",
        "static smem",
        "dynamic smem",
        "local",
        "CTAs/SM"
    );
    let mut reports = gpu.kernel_reports()?;
    reports.sort_by_key(|k| (k.bs, k.input.name(), k.b_layout.name(), k.out.name()));
    for k in reports {
        let c = k.config;
        let schedule = match c.pipeline {
            sparsek::gpu::Pipeline::TmaWgmma { pingpong: true } => " tma ping-pong",
            sparsek::gpu::Pipeline::TmaWgmma { pingpong: false } => " tma",
            sparsek::gpu::Pipeline::CpAsync if c.frag_db => " db",
            sparsek::gpu::Pipeline::CpAsync => "",
            sparsek::gpu::Pipeline::Direct => " direct",
        };
        // Several k-groups: the warp grid per group, times the groups (each with its own ring of `stages`).
        let groups = if c.k_groups > 1 { format!("x{}", c.k_groups) } else { String::new() };
        let tile = format!("{} {} {}x{}{groups} {}{schedule}", c.bn, c.bk, c.warps_m, c.warps_n, c.stages);
        println!(
            "{:<36} {:>4} {:>4} {:<22} {:>7} {:>5} {:>11} {:>12} {:>6} {:>8}",
            k.name,
            k.bs,
            k.out.name(),
            tile,
            k.threads,
            k.registers,
            k.static_smem,
            k.dynamic_smem,
            k.local_bytes,
            k.ctas_per_sm
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// One line per block size and kind of problem: the plan the planner makes for it on this `Gpu` (its kernels,
/// occupancy and policy; no plan cache): few columns on few block rows (the decode kernels' limit) and on many,
/// 32, 64, 512 and 4096 columns on many block rows (four per SM) of 32 blocks, and 4096 columns on rows of
/// [`sparsek::gpu::SHORT_ROW_MAX_K_TILES`] k-tiles of 64 columns. The same value `sparsek run` prints for the plan
/// that ran.
fn print_plans(gpu: &sparsek::gpu::Gpu, sms: usize) -> Result<(), sparsek::Error> {
    let (facts, policy) = (gpu.device_facts(), gpu.policy());
    let short = sparsek::gpu::SHORT_ROW_MAX_K_TILES;
    for bs in [16usize, 32, 64, 128] {
        let few = gpu.decode_row_limit(bs as u32).max(1);
        let short_blocks = (short * 64 / bs).max(1);
        let cases = [(1, few, 32), (16, 4 * sms, 32), (32, 4 * sms, 32), (64, 4 * sms, 32), (512, 4 * sms, 32)]
            .into_iter()
            .chain([(4096, 4 * sms, 32), (4096, 4 * sms, short_blocks)]);
        for (n, rows, row_blocks) in cases {
            let lengths = vec![row_blocks as u32; rows];
            let (m, k) = (rows * bs, 4 * row_blocks * bs);
            let problem = crate::plan::uploaded_problem(bs, (m, k, n), &lengths);
            let plan = match sparsek::plan::plan(&problem, facts, &policy, None) {
                Ok(plan) => plan.to_string(),
                Err(e) => format!("no plan: {e}"),
            };
            println!("  bs {bs:>3} N {n:>4}, {rows:>4} block rows of {row_blocks:>2} blocks: {plan}");
        }
    }
    Ok(())
}
