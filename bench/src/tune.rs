//! The kernel tuner: every candidate configuration of the tuning module (`layout::TUNE_CONFIGS`, loaded with
//! [`Gpu::tuning_variants`]) on the benchmark shapes, to choose `layout::CONFIGS`. Each candidate's output is
//! first checked against the f64 oracle (sampled rows, [`Expected`]); then the candidates of one block size are
//! timed interleaved, launch by launch, each in grouped and in plain rasterization order (CUDA events, median),
//! so clock changes under load hit them alike. Progress goes to stderr.

use sparsek::check::{Expected, RowSample};
use sparsek::format::{Pattern, generate};
use sparsek::gpu::timing::{EventTimer, median};
use sparsek::gpu::{Gpu, KernelVariant};
use sparsek::{Bsr, Epilogue, Matrix, Result, f16};

/// What a tuning run found.
#[derive(Debug)]
pub struct Summary {
    /// One line per (candidate, order, shape), aligned.
    pub table: String,
    /// Every candidate passed every check.
    pub all_correct: bool,
}

/// (m, n, k, density, pattern) per block size: the shapes the product configurations are chosen on, and the
/// decode shapes (N = 1, 16, 64, and 32 and 64 at 16384^2 for bs 64 and 128) the narrow candidates are measured
/// on (issue 12).
fn shapes(bs: usize) -> Vec<(usize, usize, usize, f64, Pattern)> {
    let mut v = vec![(8192, 8192, 8192, 0.10, Pattern::Uniform), (8192, 8192, 8192, 0.22, Pattern::Uniform)];
    if bs == 64 {
        v.push((4096, 4096, 4096, 0.125, Pattern::Uniform));
        v.push((8192, 8192, 8192, 0.22, Pattern::Skewed));
    }
    v.extend([1, 16, 64].map(|n| (8192, n, 8192, 0.22, Pattern::Uniform)));
    // 32 and 64 columns beyond L2 (the narrow candidates of 32 and 64 columns, issue 12).
    if bs >= 64 {
        v.extend([32, 64].map(|n| (16384, n, 16384, 0.22, Pattern::Uniform)));
    }
    v
}

/// Tunes the candidates of `block_sizes` (all four when empty) with `iters` timed launches each.
pub fn run(gpu: &Gpu, iters: usize, block_sizes: &[usize]) -> Result<Summary> {
    let variants = gpu.tuning_variants()?;
    eprintln!(
        "sparsek tune on {} (driver {}): {} candidates, median of {iters} interleaved launches",
        gpu.info().name,
        gpu.info().driver_version_string(),
        variants.len()
    );
    let timer = EventTimer::new(gpu.stream());
    let ep = Epilogue::default();
    let mut table = Vec::new();
    let mut all_correct = true;
    for bs in [16usize, 32, 64, 128] {
        if !block_sizes.is_empty() && !block_sizes.contains(&bs) {
            continue;
        }
        let vs: Vec<&KernelVariant> = variants.iter().filter(|v| v.config().bs as usize == bs).collect();
        for (m, n, k, density, pattern) in shapes(bs) {
            let a: Bsr<f16> = generate(pattern, m, k, bs, density, 7)?;
            let b = Matrix::<f16>::random(k, n, 8)?;
            let c0 = Matrix::<f32>::zeros(m, n)?;
            let expected = Expected::compute(&a, &b, &c0, ep, RowSample::Random { count: 24, seed: 9 }, |_, _| {})?;
            let (a_d, b_d) = (gpu.upload(&a)?, gpu.upload_matrix(&b)?);
            let mut c_d = gpu.zeros::<f32>(m, n)?;
            let mut ok = Vec::with_capacity(vs.len());
            for v in &vs {
                gpu.spmm_variant(v, &a_d, &b_d, &mut c_d, ep, None)?;
                let report = expected.check(&c_d.to_host()?);
                if !report.passed() {
                    eprintln!("{}: WRONG on {m}x{n}x{k} bs{bs} {density} {pattern}: {report}", v.name());
                }
                all_correct &= report.passed();
                ok.push(report.passed());
            }
            // Each candidate twice: with the launcher's rasterization groups (None) and in plain row order.
            let orders = [None, Some(u32::MAX)];
            let times = timer.time_interleaved(3, iters, vs.len() * orders.len(), |i| {
                gpu.spmm_variant(vs[i / orders.len()], &a_d, &b_d, &mut c_d, ep, orders[i % orders.len()])
            })?;
            for (ti, t) in times.iter().enumerate() {
                let (v, order) = (vs[ti / orders.len()], if ti % orders.len() == 0 { "grouped" } else { "plain  " });
                let ms = f64::from(median(t).unwrap_or(f32::NAN));
                let tf = a.flops(n) / (ms * 1e-3) / 1e12;
                let c = v.config();
                let rep = v.report()?;
                table.push(format!(
                    "{:<16} bs{:<3} bn{:<3} bk{:<2} w{}x{} s{} db{} regs{:>4} ctas/sm {:>2} {order} | {m}x{n}x{k} \
                     {:>5.3} {:<7} | {:>8.4} ms {:>7.1} TFLOPS {}",
                    v.name(),
                    c.bs,
                    c.bn,
                    c.bk,
                    c.warps_m,
                    c.warps_n,
                    c.stages,
                    u8::from(c.frag_db),
                    rep.registers,
                    rep.ctas_per_sm,
                    density,
                    pattern.to_string(),
                    ms,
                    tf,
                    if ok[ti / orders.len()] { "" } else { "WRONG" }
                ));
            }
            eprintln!("done bs{bs} {m}x{n}x{k} {density} {pattern}");
        }
    }
    Ok(Summary { table: table.join("\n"), all_correct })
}
