//! Device timing with CUDA events: one interleaved timer and one median, used by `sparsek run`, the benchmark
//! and the tuner. Not product API (`#[doc(hidden)]`).

use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaEvent, CudaStream};

use super::driver::cuda;
use crate::error::Result;

/// Times launches of several contenders interleaved launch by launch on one stream, each launch between its own
/// pair of CUDA events; the events are read only after the last launch (no host synchronisation inside the timed
/// loop). Interleaving makes clock and power changes under sustained load hit every contender alike.
pub struct EventTimer {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
}

impl EventTimer {
    /// A timer recording on `stream`.
    pub fn new(stream: &Arc<CudaStream>) -> Self {
        EventTimer { ctx: stream.context().clone(), stream: stream.clone() }
    }

    /// Runs each of `contenders` contenders (`launch(i)` queues contender `i` on the timer's stream) `warmup`
    /// times untimed, round-robin, then `iters` rounds in which each contender launches once between two
    /// events. Returns, per contender, its `iters` times in milliseconds. A failing launch stops the whole
    /// measurement with its error.
    pub fn time_interleaved(
        &self,
        warmup: usize,
        iters: usize,
        contenders: usize,
        mut launch: impl FnMut(usize) -> Result<()>,
    ) -> Result<Vec<Vec<f32>>> {
        for _ in 0..warmup {
            for i in 0..contenders {
                launch(i)?;
            }
        }
        let events = self.event_pairs(contenders, iters)?;
        for it in 0..iters {
            for (i, ev) in events.iter().enumerate() {
                let (start, end) = &ev[it];
                start.record(&self.stream).map_err(cuda("cuEventRecord"))?;
                launch(i)?;
                end.record(&self.stream).map_err(cuda("cuEventRecord"))?;
            }
        }
        elapsed_ms(&events)
    }

    /// Times each of `contenders` contenders in blocks: `blocks` times over the contenders in turn, each contender
    /// launches `warm` times untimed and then `block` times between their own events, back to back. Returns, per
    /// contender, its `blocks * block` times in milliseconds.
    ///
    /// Every timed launch follows `warm` launches of the same contender (with `warm` at least the input sets a
    /// caller rotates through, each timed launch's operands were last read by the same contender), so it finds
    /// the L2 as that contender leaves it, not as the launches of others before it do: contenders that leave L2
    /// in different states (one reading its operands through L2 normally, another marking them evict-first)
    /// cannot hand each other lines. Interleaved launch by launch, one of several identical launches found part
    /// of its operands left by the contender that had read the same input set a few launches before, round after
    /// round, and measured up to 1.4x faster (the tuner, docs/perf-notes.md "Tuned plans"). The blocks still
    /// alternate, so clock and power drift reach every contender alike.
    pub fn time_in_blocks(
        &self,
        blocks: usize,
        (warm, block): (usize, usize),
        contenders: usize,
        mut launch: impl FnMut(usize) -> Result<()>,
    ) -> Result<Vec<Vec<f32>>> {
        let iters = blocks * block;
        let events = self.event_pairs(contenders, iters)?;
        for b in 0..blocks {
            for (i, ev) in events.iter().enumerate() {
                for _ in 0..warm {
                    launch(i)?;
                }
                for (start, end) in &ev[b * block..(b + 1) * block] {
                    start.record(&self.stream).map_err(cuda("cuEventRecord"))?;
                    launch(i)?;
                    end.record(&self.stream).map_err(cuda("cuEventRecord"))?;
                }
            }
        }
        elapsed_ms(&events)
    }

    /// One contender: `warmup` untimed launches, then `iters` timed ones (milliseconds each).
    pub fn time(&self, warmup: usize, iters: usize, mut launch: impl FnMut() -> Result<()>) -> Result<Vec<f32>> {
        let mut times = self.time_interleaved(warmup, iters, 1, |_| launch())?;
        Ok(times.pop().unwrap_or_default())
    }

    /// `iters` pairs of (start, end) events per contender. Every event is created before a timed loop: creating
    /// one costs host time between launches.
    fn event_pairs(&self, contenders: usize, iters: usize) -> Result<Vec<Vec<(CudaEvent, CudaEvent)>>> {
        (0..contenders).map(|_| (0..iters).map(|_| Ok((self.event()?, self.event()?))).collect()).collect()
    }

    fn event(&self) -> Result<CudaEvent> {
        self.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(cuda("cuEventCreate"))
    }
}

/// Per contender, the milliseconds between each of its (start, end) event pairs (after the last was recorded).
fn elapsed_ms(events: &[Vec<(CudaEvent, CudaEvent)>]) -> Result<Vec<Vec<f32>>> {
    events
        .iter()
        .map(|ev| ev.iter().map(|(s, e)| s.elapsed_ms(e).map_err(cuda("cuEventElapsedTime"))).collect())
        .collect()
}

/// The median of a list of timings; `None` for an empty list. NaNs sort last (`total_cmp`).
pub fn median(v: &[f32]) -> Option<f32> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f32::total_cmp);
    let mid = s.len() / 2;
    Some(if s.len() % 2 == 1 { s[mid] } else { 0.5 * (s[mid - 1] + s[mid]) })
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}
