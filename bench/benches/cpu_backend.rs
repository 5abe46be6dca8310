//! The CPU backend against the per-block GEMM it is built from, and against dense GEMM scaled by density.
//!
//! Run: `cargo bench -p sparsek-bench --bench cpu_backend` (release; the run itself takes about 15 s on 2 cores).
//!
//! For each case (M x N x K, block size, uniform pattern at 12.5%; A from `format::generate::<f16>`, B from
//! `Matrix::<f16>::random`, C f32, alpha 1, beta 0) it times with `std::time::Instant`, interleaved (one
//! warm-up call of each, then [`RUNS`] rounds that call each once, so a change in machine load hits all alike),
//! the median of each:
//! - `library`: `sparsek::cpu::spmm` on the f16 operands, everything included (widening A and B to f32, the
//!   epilogue);
//! - `per-block`: the baseline the backend is held to: on operands already in f32 (conversion not timed),
//!   block rows in parallel with rayon, one `matrixmultiply::sgemm` per stored block (`bs x bs` times the
//!   `bs x N` rows of B it meets) accumulating into the block row of C;
//! - `dense x density`: dense `matrixmultiply::sgemm` of the same product (A expanded to M x K f32), run on
//!   row panels of C in parallel with rayon (one panel per rayon thread: matrixmultiply is built without its
//!   `threading` feature, so one call uses one core), its time multiplied by the density of A: the time the
//!   sparse product would take at dense GEMM efficiency.
//!
//! GFLOPS are effective: `2 * nnzb * bs^2 * N / time` for every row (for the dense row that equals the dense
//! rate). `ratio` is time / per-block time. Before timing, the library's output and the dense output are
//! compared with the per-block output; a difference beyond 1e-3 stops the benchmark with an error, so it cannot
//! report a comparison of wrong code.

use std::time::{Duration, Instant};

use rayon::prelude::*;
use sparsek::format::{Pattern, generate};
use sparsek::{Bsr, Epilogue, Matrix, cpu, f16};

/// Timed runs per contender (after one warm-up).
const RUNS: usize = 7;
/// Largest allowed |library - per-block| and |dense - per-block|: the outputs are sums of K * density products
/// of values in [-1, 1), |C| of a few units, f32 rounding differences ~1e-6.
const MAX_DIFF: f32 = 1e-3;
/// Why the library's checked `matrixmultiply::sgemm` wrapper ([`cpu::sgemm`]) cannot refuse the baselines' calls.
const FITS: &str = "the slices hold their shapes";

struct Case {
    m: usize,
    n: usize,
    k: usize,
    bs: usize,
    density: f64,
}

const CASES: [Case; 3] = [
    Case { m: 2048, n: 512, k: 2048, bs: 64, density: 0.125 },
    Case { m: 2048, n: 512, k: 2048, bs: 16, density: 0.125 },
    Case { m: 4096, n: 4096, k: 4096, bs: 64, density: 0.125 },
];

/// The baseline: C (m x n, ld n) = A @ B with one sgemm per stored block, block rows in parallel.
fn per_block(a: &Bsr<f16>, a32: &[f32], b32: &[f32], n: usize, c: &mut [f32]) {
    let bs = a.block_size();
    c.par_chunks_mut(bs * n).enumerate().for_each(|(br, rows)| {
        let range = a.block_row_range(br);
        if range.is_empty() {
            rows.fill(0.0);
        }
        for (pos, i) in range.enumerate() {
            let col = a.col_idx()[i] as usize;
            let blk = &a32[i * bs * bs..(i + 1) * bs * bs];
            let beta = if pos == 0 { 0.0 } else { 1.0 };
            cpu::sgemm((bs, bs, n), blk, bs, &b32[col * bs * n..], n, beta, rows, n).expect(FITS);
        }
    });
}

/// Dense C (m x n) = A (m x k) @ B (k x n), one sgemm per row panel, one panel per rayon thread.
fn dense(a: &[f32], b: &[f32], m: usize, k: usize, n: usize, c: &mut [f32]) {
    let panel = m.div_ceil(rayon::current_num_threads()).max(1);
    c.par_chunks_mut(panel * n).zip(a.par_chunks(panel * k)).for_each(|(c_p, a_p)| {
        cpu::sgemm((c_p.len() / n, k, n), a_p, k, b, n, 0.0, c_p, n).expect(FITS);
    });
}

/// Times the contenders interleaved (one untimed call of each, then `RUNS` rounds calling each once), so that a
/// change in machine load hits all of them alike; returns each one's median.
fn median_times(contenders: &mut [&mut dyn FnMut()]) -> Vec<Duration> {
    contenders.iter_mut().for_each(|f| f());
    let mut t = vec![Vec::with_capacity(RUNS); contenders.len()];
    for _ in 0..RUNS {
        for (f, t) in contenders.iter_mut().zip(&mut t) {
            let s = Instant::now();
            f();
            t.push(s.elapsed());
        }
    }
    t.into_iter()
        .map(|mut t| {
            t.sort();
            t[RUNS / 2]
        })
        .collect()
}

fn max_abs_diff(x: &[f32], y: &[f32]) -> f32 {
    assert_eq!(x.len(), y.len());
    x.iter().zip(y).map(|(p, q)| (p - q).abs()).fold(0.0, |m: f32, d| if d.is_nan() { f32::INFINITY } else { m.max(d) })
}

fn main() {
    let threads = rayon::current_num_threads();
    println!("# sparsek CPU backend: library vs per-block matrixmultiply::sgemm vs dense sgemm x density");
    println!(
        "# rayon threads: {threads}, available parallelism: {}; interleaved, median of {RUNS} rounds after 1 warm-up",
        std::thread::available_parallelism().map_or(0, |p| p.get())
    );
    println!("| case | contender | median ms | GFLOPS (effective) | ratio vs per-block | max abs diff vs per-block |");
    println!("|---|---|---:|---:|---:|---:|");
    let mut worst_ratio = 0.0f64;
    for (ci, case) in CASES.iter().enumerate() {
        let Case { m, n, k, bs, density } = *case;
        let seed = 0x5eed + ci as u64;
        let a = generate::<f16>(Pattern::Uniform, m, k, bs, density, seed).expect("generate A");
        let b = Matrix::<f16>::random(k, n, seed ^ 0xb).unwrap();
        let a32: Vec<f32> = a.values().iter().map(|v| v.to_f32()).collect();
        let b32: Vec<f32> = b.as_slice().iter().map(|v| v.to_f32()).collect();
        let flops = a.flops(n);
        let label = format!("{m}x{n}x{k} bs{bs} {:.1}%", 100.0 * a.density());

        // Outputs first, compared before anything is timed.
        let mut c_base = vec![f32::NAN; m * n];
        per_block(&a, &a32, &b32, n, &mut c_base);
        let mut c_lib = Matrix::<f32>::filled(m, n, n, f32::NAN).expect("C");
        cpu::spmm(&a, &b, &mut c_lib, Epilogue::default()).expect("cpu::spmm");
        let d_lib = max_abs_diff(c_lib.as_slice(), &c_base);
        let a_dense: Vec<f32> = a.to_dense().unwrap().as_slice().iter().map(|v| v.to_f32()).collect();
        let mut c_dense = vec![f32::NAN; m * n];
        dense(&a_dense, &b32, m, k, n, &mut c_dense);
        let d_dense = max_abs_diff(&c_dense, &c_base);
        assert!(
            d_lib <= MAX_DIFF && d_dense <= MAX_DIFF,
            "{label}: outputs disagree: max |library - per-block| = {d_lib}, max |dense - per-block| = {d_dense}"
        );

        let t = median_times(&mut [
            &mut || cpu::spmm(&a, &b, &mut c_lib, Epilogue::default()).expect("cpu::spmm"),
            &mut || per_block(&a, &a32, &b32, n, &mut c_base),
            &mut || dense(&a_dense, &b32, m, k, n, &mut c_dense),
        ]);
        let (t_lib, t_base, t_dense) = (t[0], t[1], t[2].mul_f64(a.density()));
        let row = |name: &str, t: Duration, diff: f32| {
            let s = t.as_secs_f64();
            println!(
                "| {label} | {name} | {:.2} | {:.1} | {:.2} | {diff:.1e} |",
                s * 1e3,
                flops / s / 1e9,
                s / t_base.as_secs_f64()
            );
        };
        row("library (cpu::spmm, f16 in)", t_lib, d_lib);
        row("per-block sgemm (f32 in)", t_base, 0.0);
        row("dense sgemm x density", t_dense, d_dense);
        worst_ratio = worst_ratio.max(t_lib.as_secs_f64() / t_base.as_secs_f64());
    }
    println!("# worst library / per-block ratio: {worst_ratio:.2} (target <= 1.3)");
}
