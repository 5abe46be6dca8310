//! What a product that reads A once leaves of L2 to the data around it (issue 12: A's values marked evict-first,
//! `Policy::a_evict_first`).
//!
//! A resident pair of buffers X and Y (a quarter of L2 each) is copied X -> Y once, which leaves both in L2; then
//! one product runs (or nothing), and the copy X -> Y is timed between two CUDA events. The more of X and Y the
//! product pushed out of L2, the longer that copy takes. Three contenders, interleaved iteration by iteration on
//! the same device: nothing between the copies, sparsek as the library launches it (A evict-first), and sparsek
//! with `a_evict_first: false`. A is rotated over enough copies to span twice L2, so that each product reads
//! its A from DRAM. The product's own time (events around it) is reported too, and both sparsek forms' C must be
//! bit-identical.
//!
//! `cargo run --release -p sparsek-bench --example l2_keep -- [ITERS]` (default 30 timed iterations after 5).

use std::error::Error;
use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream};
use sparsek::format::{Pattern, generate};
use sparsek::gpu::timing::median;
use sparsek::gpu::{DeviceBsr, DeviceMatrix, Gpu};
use sparsek::plan::Policy;
use sparsek::{Epilogue, Matrix, f16};

/// M, N, K, block size, density.
const CASES: [(usize, usize, usize, usize, f64); 6] = [
    (16384, 1, 16384, 64, 0.22),
    (16384, 16, 16384, 64, 0.22),
    (16384, 16, 16384, 128, 0.22),
    (16384, 16, 16384, 64, 0.10),
    (8192, 16, 8192, 64, 0.22),
    (8192, 64, 8192, 64, 0.22),
];
const WARMUP: usize = 5;

/// One GPU handle's operands: rotated copies of A, B, C and the resident pair.
struct Side {
    gpu: Gpu,
    a: Vec<DeviceBsr<f16>>,
    b: DeviceMatrix<f16>,
    c: DeviceMatrix<f32>,
    x: CudaSlice<u8>,
    y: CudaSlice<u8>,
}

impl Side {
    fn new(gpu: Gpu, a: &sparsek::Bsr<f16>, b: &Matrix<f16>, depth: usize) -> Result<Side, Box<dyn Error>> {
        let probe = (gpu.info().l2_bytes / 4) as usize;
        let sets = (0..depth).map(|_| gpu.upload(a)).collect::<sparsek::Result<Vec<_>>>()?;
        let (b, c) = (gpu.upload_matrix(b)?, gpu.zeros(a.rows(), b.cols())?);
        let x = gpu.stream().clone_htod(&vec![0x3cu8; probe])?;
        let y = gpu.stream().alloc_zeros::<u8>(probe)?;
        Ok(Side { gpu, a: sets, b, c, x, y })
    }

    fn stream(&self) -> Arc<CudaStream> {
        self.gpu.stream().clone()
    }

    /// Copy X -> Y, the product on A set `set` (if `launch`), then the timed copy: (copy ms, product ms).
    fn run(&mut self, launch: bool, set: usize, ev: &[CudaEvent; 3]) -> Result<(f32, f32), Box<dyn Error>> {
        let stream = self.stream();
        stream.memcpy_dtod(&self.x, &mut self.y)?;
        ev[0].record(&stream)?;
        if launch {
            let a = &self.a[set % self.a.len()];
            self.gpu.spmm(a, &self.b, &mut self.c, Epilogue::default())?;
        }
        ev[1].record(&stream)?;
        stream.memcpy_dtod(&self.x, &mut self.y)?;
        ev[2].record(&stream)?;
        ev[2].synchronize()?;
        Ok((ev[1].elapsed_ms(&ev[2])?, ev[0].elapsed_ms(&ev[1])?))
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let iters: usize = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(30).max(1);
    let info = Gpu::new(0)?.info().clone();
    println!(
        "{} (sm_{}{}, {} SMs, {} MiB L2, largest access policy window {} MiB), driver CUDA {}",
        info.name,
        info.compute_capability.0,
        info.compute_capability.1,
        info.sm_count,
        info.l2_bytes >> 20,
        info.max_access_policy_window >> 20,
        info.driver_version_string()
    );
    println!(
        "X and Y {} MiB each; median of {iters} iterations after {WARMUP}; copy µs: the timed X -> Y after the product\n",
        (info.l2_bytes / 4) >> 20
    );
    println!(
        "| case | A MB | copy after nothing | copy after sparsek, A evict-first | copy after sparsek, plain | sparsek µs, evict-first | sparsek µs, plain | C identical |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|---|");
    for (i, &(m, n, k, bs, density)) in CASES.iter().enumerate() {
        let a = generate::<f16>(Pattern::Uniform, m, k, bs, density, 0x5eed + i as u64)?;
        let b = Matrix::<f16>::random(k, n, 0xb0b + i as u64)?;
        let a_bytes = a.nnzb() * bs * bs * 2;
        let depth = (2 * info.l2_bytes as usize).div_ceil(a_bytes).max(1);
        let plain = Gpu::new(0)?.with_policy(Policy { a_evict_first: false, ..Policy::default() });
        let mut sides = [Side::new(Gpu::new(0)?, &a, &b, depth)?, Side::new(plain, &a, &b, depth)?];
        let ev = |s: &Side| -> Result<[CudaEvent; 3], Box<dyn Error>> {
            let ctx = s.gpu.context();
            let timed = || ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT));
            Ok([timed()?, timed()?, timed()?])
        };
        let events = [ev(&sides[0])?, ev(&sides[1])?];
        // (copy, product) times of: nothing, sparsek evict-first, sparsek plain.
        let mut copy: [Vec<f32>; 3] = Default::default();
        let mut product: [Vec<f32>; 2] = Default::default();
        for it in 0..WARMUP + iters {
            let (c0, _) = sides[0].run(false, it, &events[0])?;
            let (c1, p1) = sides[0].run(true, it, &events[0])?;
            let (c2, p2) = sides[1].run(true, it, &events[1])?;
            if it >= WARMUP {
                copy[0].push(c0);
                copy[1].push(c1);
                copy[2].push(c2);
                product[0].push(p1);
                product[1].push(p2);
            }
        }
        let identical = sides[0].c.to_host()?.as_slice() == sides[1].c.to_host()?.as_slice();
        let us = |v: &[f32]| f64::from(median(v).unwrap_or(f32::NAN)) * 1e3;
        println!(
            "| {m}x{n}x{k} bs {bs} {:.0}% | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
            density * 100.0,
            a_bytes as f64 / 1e6,
            us(&copy[0]),
            us(&copy[1]),
            us(&copy[2]),
            us(&product[0]),
            us(&product[1]),
            if identical { "yes" } else { "NO" }
        );
    }
    Ok(())
}
