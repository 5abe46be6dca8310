//! The host's time per launch of `Gpu::spmm` (issue 43: in eager PyTorch the call, not the kernel, sets the time),
//! by plan: 2000 launches queued back to back without a sync, the time until the last returned, per launch, median
//! of 7 rounds; each shape as the library launches it and with `a_evict_first: false` (whose launches carry no
//! L2 access-policy window attribute), interleaved round by round. Also the kernel each ran.
//!
//! `cargo run --release -p sparsek-bench --example launch_host`

use std::error::Error;
use std::time::Instant;

use sparsek::format::{Pattern, generate};
use sparsek::gpu::timing::median;
use sparsek::gpu::{DeviceBsr, DeviceMatrix, Gpu};
use sparsek::plan::Policy;
use sparsek::{Epilogue, Matrix, f16};

/// Name, M, K, N (bs 64, 25% of blocks).
const CASES: [(&str, usize, usize, usize); 6] = [
    ("up", 11008, 4096, 1),
    ("up", 11008, 4096, 16),
    ("down", 4096, 11008, 1),
    ("down", 4096, 11008, 16),
    ("square", 4096, 4096, 1),
    ("square", 4096, 4096, 16),
];
const LAUNCHES: usize = 2000;
const ROUNDS: usize = 7;

struct Side {
    gpu: Gpu,
    a: DeviceBsr<f16>,
    b: DeviceMatrix<f16>,
    c: DeviceMatrix<f32>,
}

impl Side {
    /// Microseconds of host time per launch over `LAUNCHES` queued launches.
    fn host_us(&mut self) -> Result<f32, Box<dyn Error>> {
        self.gpu.stream().synchronize()?;
        let t = Instant::now();
        for _ in 0..LAUNCHES {
            self.gpu.spmm(&self.a, &self.b, &mut self.c, Epilogue::default())?;
        }
        let us = (t.elapsed().as_secs_f64() * 1e6 / LAUNCHES as f64) as f32;
        self.gpu.stream().synchronize()?;
        Ok(us)
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let info = Gpu::new(0)?.info().clone();
    println!(
        "{} (driver {}), {LAUNCHES} launches per round, median of {ROUNDS} rounds",
        info.name,
        info.driver_version_string()
    );
    for (name, m, k, n) in CASES {
        let a = generate::<f16>(Pattern::Uniform, m, k, 64, 0.25, 43)?;
        let b = Matrix::<f16>::random(k, n, 7)?;
        let mut sides = Vec::new();
        for evict in [true, false] {
            let gpu = Gpu::new(0)?.with_policy(Policy { a_evict_first: evict, ..Policy::default() });
            let (a, b, c) = (gpu.upload(&a)?, gpu.upload_matrix(&b)?, gpu.zeros(m, n)?);
            sides.push(Side { gpu, a, b, c });
        }
        let mut times = vec![Vec::new(); sides.len()];
        for _ in 0..ROUNDS {
            for (i, s) in sides.iter_mut().enumerate() {
                times[i].push(s.host_us()?);
            }
        }
        for (i, s) in sides.iter().enumerate() {
            let plan = s.gpu.last_plan().map(|p| p.to_string()).unwrap_or_default();
            println!(
                "{name} {m}x{k} N {n}, {}: {:.2} us/launch; {plan}",
                if i == 0 { "as launched" } else { "a_evict_first off" },
                median(&times[i]).unwrap_or(f32::NAN)
            );
        }
    }
    Ok(())
}
