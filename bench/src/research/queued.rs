//! Device time per launch without the host: a batch of launches queued behind a kernel that holds the stream,
//! timed between one pair of CUDA events around the whole batch.
//!
//! The per-launch event times of the interleaved loop (`runner::time_interleaved`) include the host's time to
//! queue a launch whenever that is longer than the launch itself (a few microseconds for a small product: the
//! stream idles between the start event and the kernel). Here the stream first runs a *hold* kernel that spins on
//! `%globaltimer` for a set time; the host queues the start event, `batch` launches and the end event while the
//! hold runs, so the GPU finds them all queued and runs them back to back. The time between the events over
//! `batch` is what the GPU spends per launch, its own launch overhead included. A batch whose queuing took the
//! host more than half the hold (the GPU might have caught up) is discarded and the hold doubled, up to
//! [`HOLD_MAX_NS`]; the hold is never waited on by the host, so nothing can deadlock.

use std::time::Instant;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use serde::Serialize;

use crate::cuda::load_kernel;
use crate::error::{Error, Result};
use crate::measure::Times;
use crate::runner::Contender;
use sparsek::gpu::Gpu;

/// Launches per timed batch.
pub const BATCH: usize = 32;
/// Timed batches; their per-launch times give the median. One more, untimed, goes first.
pub const REPS: usize = 5;
/// The first hold: 2 ms, far more than the host needs to queue [`BATCH`] launches of sparsek (~10 µs each).
pub const HOLD_START_NS: u64 = 2_000_000;
/// The longest hold tried before giving up.
pub const HOLD_MAX_NS: u64 = 64_000_000;

const HOLD_KERNEL: &str = "sparsek_hold";
/// One thread sleeping in steps of 1 µs until `%globaltimer` has advanced by the parameter (ns). PTX ISA 8.0 for
/// sm_80, as the product module: JIT-compiled for any sm_80+ GPU.
const HOLD_PTX: &str = "\
.version 8.0
.target sm_80
.address_size 64

.visible .entry sparsek_hold(.param .u64 ns)
{
\t.reg .pred %p;
\t.reg .b64 %rd<5>;
\tld.param.u64 %rd1, [ns];
\tmov.u64 %rd2, %globaltimer;
$L_spin:
\tnanosleep.u32 1000;
\tmov.u64 %rd3, %globaltimer;
\tsub.u64 %rd4, %rd3, %rd2;
\tsetp.lt.u64 %p, %rd4, %rd1;
\t@%p bra $L_spin;
\tret;
}
";

/// The queued time per launch of one contender, or why it was not measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Queued {
    /// Launches per batch.
    pub batch: usize,
    /// Per launch: the statistics over the timed batches of (batch time / `batch`).
    pub time: Option<Times>,
    /// The hold the last batch ran behind, in microseconds.
    pub hold_us: Option<f64>,
    /// Why it was not measured.
    pub error: Option<String>,
}

impl Queued {
    /// Not measured, because of `error`.
    pub fn failed(error: impl std::fmt::Display) -> Queued {
        Queued { batch: BATCH, error: Some(error.to_string()), ..Queued::default() }
    }

    /// The median per-launch time in microseconds, if measured.
    pub fn median_us(&self) -> Option<f64> {
        self.time.as_ref().map(|t| t.median_us).filter(|&t| t > 0.0)
    }
}

/// The hold kernel, loaded into the GPU's context.
pub(crate) struct Hold {
    func: CudaFunction,
}

impl Hold {
    /// Loads the hold kernel into `gpu`'s context.
    pub(crate) fn load(gpu: &Gpu) -> Result<Hold> {
        Ok(Hold { func: load_kernel(gpu, HOLD_PTX, HOLD_KERNEL)? })
    }

    /// Queues the hold for `ns` nanoseconds on the GPU's stream.
    fn launch(&self, gpu: &Gpu, ns: u64) -> Result<()> {
        let shape = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
        let mut builder = gpu.stream().launch_builder(&self.func);
        builder.arg(&ns);
        // SAFETY: the kernel takes one u64 (passed) and touches no memory; the stream is the Gpu's, in the context
        // the module was loaded into.
        unsafe { builder.launch(shape) }.map(drop).map_err(Error::driver(format!("cuLaunchKernel ({HOLD_KERNEL})")))
    }
}

/// Measures `contender`'s queued time per launch: one untimed batch, then [`REPS`] timed batches of `batch`
/// launches, each on the next of its input sets. A failed launch or event is recorded in the result.
pub(crate) fn measure(gpu: &Gpu, hold: &Hold, contender: &mut dyn Contender, batch: usize) -> Queued {
    let mut result = Queued { batch, ..Queued::default() };
    match per_launch_ms(gpu, hold, contender, batch) {
        Ok((ms, hold_ns)) => {
            result.time = Times::from_ms(&ms);
            result.hold_us = Some(hold_ns as f64 / 1e3);
        }
        Err(e) => result.error = Some(e.to_string()),
    }
    result
}

/// The per-launch times (ms) of the timed batches and the last hold (ns).
fn per_launch_ms(gpu: &Gpu, hold: &Hold, contender: &mut dyn Contender, batch: usize) -> Result<(Vec<f32>, u64)> {
    let (stream, ctx) = (gpu.stream(), gpu.context());
    let batch = batch.max(1);
    let sets = contender.sets().max(1);
    let mut hold_ns = HOLD_START_NS;
    let mut next_set = 0;
    let mut times = Vec::with_capacity(REPS);
    // The first batch is untimed (warm-up).
    let mut warm = false;
    while times.len() < REPS {
        let event = || ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(Error::driver("cuEventCreate"));
        let (start, end) = (event()?, event()?);
        let t0 = Instant::now();
        hold.launch(gpu, hold_ns)?;
        start.record(stream).map_err(Error::driver("cuEventRecord"))?;
        for _ in 0..batch {
            contender.launch(gpu, next_set % sets)?;
            next_set += 1;
        }
        end.record(stream).map_err(Error::driver("cuEventRecord"))?;
        let queued_ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        end.synchronize().map_err(Error::driver("cuEventSynchronize"))?;
        if queued_ns > hold_ns / 2 {
            if hold_ns >= HOLD_MAX_NS {
                return Err(Error::HoldTooShort { queued_ns, batch, hold_max_ns: HOLD_MAX_NS });
            }
            hold_ns *= 2;
            continue;
        }
        let ms = start.elapsed_ms(&end).map_err(Error::driver("cuEventElapsedTime"))?;
        if warm {
            times.push(ms / batch as f32);
        }
        warm = true;
    }
    Ok((times, hold_ns))
}
