//! The tile scheduler of the sm_90a kernels ([`Gpu::with_tile_schedule`]). A kernel launched with one CTA per
//! output tile lets the hardware hand each SM its next tile, but every CTA starts with an empty ring and ends
//! with its epilogue while the tensor cores idle. A persistent grid (one CTA per SM, as many as fit) keeps the
//! ring running across tiles: each CTA's producer takes the next tile from a counter in device memory with an
//! atomic add, so SMs that finish early take more tiles, and in the ping-pong kernels one consumer warpgroup's
//! epilogue overlaps the other's main loop.
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

use sparsek_layout::{KernelConfig, Pipeline};

use crate::gpu::Gpu;

/// How the sm_90a kernels' CTAs take their tiles ([`Gpu::with_tile_schedule`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TileSchedule {
    /// A persistent grid taking tiles from a counter wherever it can have one (the Gpu's when its workspace exists
    /// and no other stream holds it; a launch being captured into a CUDA graph its own where
    /// [`graph_balance_pays`](crate::gpu::graph_balance_pays)), else
    /// [`TileSchedule::PerTile`].
    #[default]
    Auto,
    /// One tile per consumer set, CTAs handed out by the hardware as SMs free up: one CTA per tile, or per two
    /// tiles for the ping-pong kernels (bs 64), whose two sets take one each.
    PerTile,
    /// A persistent grid, CTA `c` taking tiles `c, c + grid, ...` (for comparisons and tests of that path).
    Static,
}

/// The grid of an sm_90a launch ([`Gpu::tile_grid`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileGrid {
    /// CTAs launched.
    pub ctas: u32,
    /// Whether they take tiles from the workspace's counter (else with a static stride).
    pub counter: bool,
}

impl Gpu {
    /// How the sm_90a kernels take their tiles (default [`TileSchedule::Auto`]: a persistent grid whose CTAs
    /// take the next tile from a counter).
    pub fn with_tile_schedule(mut self, schedule: TileSchedule) -> Self {
        self.tile_schedule = schedule;
        self
    }

    /// The tile-schedule setting ([`Gpu::with_tile_schedule`]).
    pub fn tile_schedule(&self) -> TileSchedule {
        self.tile_schedule
    }

    /// The grid a launch of `cfg` (of which `ctas_per_sm` fit on an SM) over `tiles` output tiles gets where it can
    /// have a tile counter (a stream that finds the Gpu's free, or one being captured into a CUDA graph): `None`
    /// for the sm_80 kernels, whose grid is their tiles.
    pub fn tile_grid(&self, cfg: &KernelConfig, ctas_per_sm: u32, tiles: usize) -> Option<TileGrid> {
        self.tile_grid_on(cfg, ctas_per_sm, tiles, self.split.is_some())
    }

    /// [`Gpu::tile_grid`] for a launch that has (`counter`) or has not got the tile counter (the launcher claims
    /// it only for [`TileSchedule::Auto`]).
    pub(crate) fn tile_grid_on(
        &self,
        cfg: &KernelConfig,
        ctas_per_sm: u32,
        tiles: usize,
        counter: bool,
    ) -> Option<TileGrid> {
        if !matches!(cfg.pipeline, Pipeline::TmaWgmma { .. }) {
            return None;
        }
        let wave = ctas_per_sm.max(1) as usize * self.info().sm_count.max(1) as usize;
        let persistent = |counter: bool| TileGrid { ctas: tiles.clamp(1, wave) as u32, counter };
        let sets = if cfg.pingpong() { 2 } else { 1 };
        let per_tile = TileGrid { ctas: tiles.div_ceil(sets).clamp(1, u32::MAX as usize) as u32, counter: false };
        Some(match self.tile_schedule {
            TileSchedule::PerTile => per_tile,
            TileSchedule::Static => persistent(false),
            TileSchedule::Auto if counter => persistent(true),
            TileSchedule::Auto => per_tile,
        })
    }
}
