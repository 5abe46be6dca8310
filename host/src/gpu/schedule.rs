//! The tile scheduler of the sm_90a kernels ([`TileSchedule`], chosen by the planner: crate::plan). A kernel
//! launched with one CTA per output tile lets the hardware hand each SM its next tile, but every CTA starts with an
//! empty ring and ends with its epilogue while the tensor cores idle. A persistent grid (one CTA per SM, as many as
//! fit) keeps the ring running across tiles: each CTA's producer takes the next tile from a counter in device
//! memory with an atomic add, so SMs that finish early take more tiles, and in the ping-pong kernels one consumer
//! warpgroup's epilogue overlaps the other's main loop.
//!
//! The two counters live in the split-row workspace (gpu/split.rs), which every [`Gpu`] allocates once: they
//! are zero before a launch and the launch's last CTA sets them back to zero. A launch takes them only when
//! they are free or its own stream used them last, so no stream ever waits for another: a launch on another
//! stream while they are busy gets a grid that touches no counter: one tile per consumer set (one CTA per tile,
//! or per two tiles for the ping-pong kernels). A persistent grid walking its tiles with a static stride instead
//! was measured 7-10% faster on uniform rows but 36% slower on skewed ones (docs/perf-notes.md). A launch on a
//! stream being captured into a CUDA graph takes two counters of its own workspace in the graph (gpu/split.rs,
//! `GraphSpace`), zeroed before it, and so the persistent grid, where its balance pays for the graph's three more
//! nodes (`graph_balance_pays`: a dominating row, or long whole rows filling at most half the SMs); else one
//! tile per consumer set.

use sparsek_layout::KernelConfig;

use crate::gpu::Gpu;
use crate::plan::{TileGrid, TileSchedule};

impl Gpu {
    /// How the sm_90a kernels take their tiles (default [`TileSchedule::Auto`]); the policy's
    /// [`tile_schedule`](crate::plan::Policy::tile_schedule) ([`Gpu::with_policy`]).
    #[doc(hidden)]
    pub fn with_tile_schedule(mut self, schedule: TileSchedule) -> Self {
        self.policy.tile_schedule = schedule;
        self
    }

    /// The tile-schedule setting ([`Gpu::with_tile_schedule`]).
    #[doc(hidden)]
    pub fn tile_schedule(&self) -> TileSchedule {
        self.policy.tile_schedule
    }

    /// The grid a launch of `cfg` (of which `ctas_per_sm` fit on an SM) over `tiles` output tiles gets where it can
    /// have a tile counter (a stream that finds the Gpu's free, or one being captured into a CUDA graph): `None`
    /// for the sm_80 kernels, whose grid is their tiles. Prefer [`Gpu::plan`].
    #[doc(hidden)]
    pub fn tile_grid(&self, cfg: &KernelConfig, ctas_per_sm: u32, tiles: usize) -> Option<TileGrid> {
        let sms = self.info().sm_count;
        crate::plan::tile_grid(self.policy.tile_schedule, cfg, (ctas_per_sm, sms), tiles, self.split.is_some())
    }
}
