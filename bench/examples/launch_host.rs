//! The host's time per launch of `Gpu::spmm` (issue 43: in eager PyTorch the call, not the kernel, sets the time),
//! by plan: 2000 launches queued back to back without a sync, the time until the last returned, per launch, median
//! of 7 rounds; each shape as the library launches it and with `a_evict_first: false` (whose launches carry no
//! L2 access-policy window attribute), interleaved round by round. Also the kernel each ran.
//!
//! Then the raw-view path (`Gpu::spmm_raw`, as the Python package launches) on a layer small enough that the GPU
//! keeps up with the host (1024 x 1024, bs 64, 25%, one column; B and C column-major, as `x.t()` and `y.t()`): the
//! same launch with the views' addresses checked by the driver (`cuPointerGetAttributes`, one call per address),
//! declared on the device (`on_device`: no call), and declared with `early_start: false` (a plain `cuLaunchKernel`
//! instead of `cuLaunchKernelEx` with programmatic serialization), interleaved round by round. The first part
//! likewise compares `early_start: false`.
//!
//! `cargo run --release -p sparsek-bench --example launch_host [-- raw]` (`raw`: the raw-view launches only)

use std::error::Error;
use std::time::Instant;

use cudarc::driver::DevicePtr;
use sparsek::format::{Pattern, generate};
use sparsek::gpu::timing::median;
use sparsek::gpu::{BsrView, DenseView, DenseViewMut, DeviceBsr, DeviceMatrix, Gpu};
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
        let Side { gpu, a, b, c } = self;
        host_us(gpu.stream(), || Ok(gpu.spmm(a, b, c, Epilogue::default())?))
    }
}

/// Microseconds of host time per launch over `LAUNCHES` calls of `launch`, queued on `stream` back to back (the
/// stream synchronised before and after, outside the time).
fn host_us(
    stream: &cudarc::driver::CudaStream,
    mut launch: impl FnMut() -> Result<(), Box<dyn Error>>,
) -> Result<f32, Box<dyn Error>> {
    stream.synchronize()?;
    let t = Instant::now();
    for _ in 0..LAUNCHES {
        launch()?;
    }
    let us = (t.elapsed().as_secs_f64() * 1e6 / LAUNCHES as f64) as f32;
    stream.synchronize()?;
    Ok(us)
}

fn main() -> Result<(), Box<dyn Error>> {
    if std::env::args().nth(1).as_deref() == Some("raw") {
        return raw_views();
    }
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
        for (evict, early) in [(true, true), (false, true), (true, false)] {
            let policy = Policy { a_evict_first: evict, early_start: early, ..Policy::default() };
            let gpu = Gpu::new(0)?.with_policy(policy);
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
                ["as launched", "a_evict_first off", "early_start off"][i],
                median(&times[i]).unwrap_or(f32::NAN)
            );
        }
    }
    raw_views()
}

/// The raw-view launches (module docs): host microseconds per launch, checked by the driver and declared.
fn raw_views() -> Result<(), Box<dyn Error>> {
    let (m, k, n) = (1024, 1024, 1);
    let gpu = Gpu::new(0)?;
    let plain = Gpu::new(0)?.with_policy(Policy { early_start: false, ..Policy::default() });
    let host = generate::<f16>(Pattern::Uniform, m, k, 64, 0.25, 43)?;
    let stream = gpu.stream().clone();
    let values = stream.clone_htod(host.values())?;
    let row_ptr = stream.clone_htod(host.row_ptr())?;
    let col_idx = stream.clone_htod(host.col_idx())?;
    let b = stream.clone_htod(Matrix::<f16>::random(k, n, 7)?.as_slice())?;
    let c = stream.alloc_zeros::<f32>(m * n)?;
    let arrays = sparsek::gpu::BsrArrays {
        values: values.device_ptr(&stream).0,
        row_ptr: row_ptr.device_ptr(&stream).0,
        col_idx: col_idx.device_ptr(&stream).0,
        index: sparsek::gpu::IndexType::U32,
    };
    let (b_ptr, c_ptr) = (b.device_ptr(&stream).0, c.device_ptr(&stream).0);
    let dev = gpu.info().ordinal;
    let run = |gpu: &Gpu, declared: bool| -> Result<f32, Box<dyn Error>> {
        // SAFETY: the addresses of the live buffers above (this Gpu's device), their sizes; nothing else touches
        // them while the launches run (the stream is synchronised before and after).
        let (av, bv, mut cv) = unsafe {
            let av = BsrView::<f16>::from_raw(arrays, m, k, 64, host.nnzb())?;
            let bv = DenseView::<f16>::from_raw(b_ptr, k, n, k, sparsek::Layout::ColMajor)?;
            let cv = DenseViewMut::<f32>::from_raw(c_ptr, m, n, m, sparsek::Layout::ColMajor)?;
            if declared { (av.on_device(dev), bv.on_device(dev), cv.on_device(dev)) } else { (av, bv, cv) }
        };
        host_us(&stream, || {
            // SAFETY: as above.
            Ok(unsafe { gpu.spmm_raw(stream.cu_stream(), &av, &bv, &mut cv, None, Epilogue::default()) }?)
        })
    };
    let mut times = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..ROUNDS {
        times[0].push(run(&gpu, false)?);
        times[1].push(run(&gpu, true)?);
        times[2].push(run(&plain, true)?);
    }
    let whats = [
        "raw views, addresses checked by the driver",
        "raw views declared on the device",
        "raw views declared, early_start off",
    ];
    for (i, what) in whats.iter().enumerate() {
        let plan = if i < 2 { &gpu } else { &plain }.last_plan().map(|p| p.to_string()).unwrap_or_default();
        println!("tiny {m}x{k} N {n}, {what}: {:.2} us/launch; {plan}", median(&times[i]).unwrap_or(f32::NAN));
    }
    Ok(())
}
