//! Measures every kernel configuration of the tuning module (tests/ptx/tune_sm80.ptx, built from
//! `layout::TUNE_CONFIGS`) on the benchmark shapes, to choose `layout::CONFIGS`. Each variant's output is first
//! checked against the f64 oracle (sampled rows); then the variants of one block size are timed interleaved,
//! launch by launch (CUDA events, median), so clock changes under load hit them alike.
//!
//!   tune [--iters N]       (packaged by `cargo xtask gpu-dist` as dist/bin/tune)

use sparsek::check::{Tolerance, compare_rows};
use sparsek::format::{Pattern, generate};
use sparsek::gpu::layout::TUNE_CONFIGS;
use sparsek::gpu::{Gpu, KernelVariant, median};
use sparsek::{Bsr, Epilogue, Matrix, f16};

const PTX: &str = include_str!("../../ptx/tune_sm80.ptx");

fn main() {
    let iters: usize =
        std::env::args().skip_while(|a| a != "--iters").nth(1).and_then(|v| v.parse().ok()).unwrap_or(15);
    let gpu = match Gpu::new(0) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("tune: no GPU: {e}");
            std::process::exit(1);
        }
    };
    let entries: Vec<_> =
        TUNE_CONFIGS.iter().enumerate().map(|(i, c)| (format!("sparsek_tune_{i}"), *c, "f32")).collect();
    // SAFETY: tune_sm80.ptx is built from TUNE_CONFIGS, entry point i with configuration i and f32 output.
    let variants = unsafe { gpu.load_variants(PTX, "tune_sm80", &entries) }.expect("load the tuning module");
    println!(
        "GPU {} (driver {}), {} variants, median of {iters} interleaved launches",
        gpu.info().name,
        gpu.info().driver_version_string(),
        variants.len()
    );

    // (m, n, k, density, pattern) per block size.
    let shapes = |bs: usize| {
        let mut v = vec![(8192, 8192, 8192, 0.10, Pattern::Uniform), (8192, 8192, 8192, 0.22, Pattern::Uniform)];
        if bs == 64 {
            v.push((4096, 4096, 4096, 0.125, Pattern::Uniform));
            v.push((8192, 8192, 8192, 0.22, Pattern::Skewed));
        }
        v
    };
    let mut table = Vec::new();
    for bs in [16usize, 32, 64, 128] {
        let vs: Vec<&KernelVariant> = variants.iter().filter(|v| v.config().bs as usize == bs).collect();
        for (m, n, k, density, pattern) in shapes(bs) {
            let a: Bsr<f16> = generate(pattern, m, k, bs, density, 7).unwrap();
            let b = Matrix::<f16>::random(k, n, 8);
            let (a_d, b_d) = (gpu.upload(&a).unwrap(), gpu.upload_matrix(&b).unwrap());
            let mut c_d = gpu.zeros::<f32>(m, n).unwrap();
            let rows: Vec<usize> = (0..24).map(|i| (i * 7919) % m).chain([m - 1]).collect();
            let c0 = Matrix::<f32>::zeros(m, n);
            let expected = sparsek::cpu::reference_rows(&a, &b, &c0, Epilogue::default(), &rows).unwrap();
            let tol = Tolerance::for_operands(&a, &b, &c0, Epilogue::default());
            let mut ok = Vec::new();
            for v in &vs {
                gpu.spmm_variant(v, &a_d, &b_d, &mut c_d, Epilogue::default(), None).unwrap();
                let got = c_d.to_host().unwrap();
                let report = compare_rows(&got, &expected, tol);
                if !report.passed() {
                    println!("{}: WRONG on {m}x{n}x{k} bs{bs} {density} {pattern}: {report}", v.name());
                }
                ok.push(report.passed());
            }
            // Each variant twice: with the launcher's rasterization groups (None) and in plain row-fastest order.
            let orders = [None, Some(u32::MAX)];
            let mut times = vec![Vec::new(); vs.len() * orders.len()];
            for it in 0..iters + 3 {
                for (vi, v) in vs.iter().enumerate() {
                    for (oi, order) in orders.iter().enumerate() {
                        let t = gpu
                            .time_launches(0, 1, || {
                                gpu.spmm_variant(v, &a_d, &b_d, &mut c_d, Epilogue::default(), *order)
                            })
                            .unwrap();
                        if it >= 3 {
                            times[vi * orders.len() + oi].extend(t);
                        }
                    }
                }
            }
            for (ti, t) in times.iter().enumerate() {
                let (vi, order) = (ti / orders.len(), if ti % orders.len() == 0 { "grouped" } else { "plain  " });
                let v = vs[vi];
                let ms = median(t) as f64;
                let tf = 2.0 * a.nnzb() as f64 * (bs * bs) as f64 * n as f64 / (ms * 1e-3) / 1e12;
                let c = v.config();
                table.push(format!(
                    "{:<16} bs{:<3} bn{:<3} bk{:<2} w{}x{} s{} db{} regs{:>4} ctas/sm {:>2} {order} | {m}x{n}x{k} {:>5.3} {:<7} | {:>8.4} ms {:>7.1} TFLOPS {}",
                    v.name(),
                    c.bs,
                    c.bn,
                    c.bk,
                    c.warps_m,
                    c.warps_n,
                    c.stages,
                    u8::from(c.frag_db),
                    v.registers().unwrap_or(-1),
                    v.ctas_per_sm(),
                    density,
                    pattern.to_string(),
                    ms,
                    tf,
                    if ok[vi] { "" } else { "WRONG" }
                ));
            }
            eprintln!("done bs{bs} {m}x{n}x{k} {density} {pattern}");
        }
    }
    println!();
    for row in table {
        println!("{row}");
    }
}
