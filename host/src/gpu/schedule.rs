//! The tile scheduler of the sm_90a kernels ([`Gpu::with_tile_schedule`]). A kernel launched with one CTA per
//! output tile lets the hardware hand each SM its next tile, but every CTA starts with an empty ring and ends
//! with its epilogue while the tensor cores idle. A persistent grid (one CTA per SM, as many as fit) keeps the
//! ring running across tiles: each CTA's producer takes the next tile from a counter in device memory with an
//! atomic add, so SMs that finish early take more tiles, and in the ping-pong kernels one consumer warpgroup's
//! epilogue overlaps the other's main loop.
//!
//! The two counters live in the split-row workspace (gpu/split.rs), which every [`Gpu`] allocates once: they
//! are zero before a launch and the launch's last CTA sets them back to zero. Launches that use them are
//! ordered one after the other across streams like split-row launches. A stream being captured into a CUDA
//! graph gets a grid that touches no counter: the kernel then walks tiles with a static stride, over a
//! persistent grid (the ping-pong kernels, whose second consumer set would idle with one tile per CTA) or one
//! CTA per tile.

use sparsek_layout::{KernelConfig, Pipeline};

use crate::gpu::Gpu;

/// How the sm_90a kernels' CTAs take their tiles ([`Gpu::with_tile_schedule`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TileSchedule {
    /// A persistent grid taking tiles from the counter wherever it can be used (the stream is not being
    /// captured and the workspace exists); elsewhere the ping-pong kernels (bs 64) get a persistent grid with a
    /// static stride and the others one CTA per tile (each measured the faster of the two for its kernel).
    #[default]
    Auto,
    /// One CTA per output tile, handed out by the hardware (for comparisons and tests of that path).
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

    /// The grid a launch of `cfg` (of which `ctas_per_sm` fit on an SM) over `tiles` output tiles gets on a
    /// stream that is not being captured: `None` for the sm_80 kernels, whose grid is their tiles.
    pub fn tile_grid(&self, cfg: &KernelConfig, ctas_per_sm: u32, tiles: usize) -> Option<TileGrid> {
        self.tile_grid_on(cfg, ctas_per_sm, tiles, false)
    }

    /// [`Gpu::tile_grid`] on a stream that is (`capturing`) or is not being captured into a CUDA graph.
    pub(crate) fn tile_grid_on(
        &self,
        cfg: &KernelConfig,
        ctas_per_sm: u32,
        tiles: usize,
        capturing: bool,
    ) -> Option<TileGrid> {
        if !matches!(cfg.pipeline, Pipeline::TmaWgmma { .. }) {
            return None;
        }
        let wave = ctas_per_sm.max(1) as usize * self.info().sm_count.max(1) as usize;
        let persistent = |counter: bool| TileGrid { ctas: tiles.clamp(1, wave) as u32, counter };
        let per_tile = TileGrid { ctas: tiles.clamp(1, u32::MAX as usize) as u32, counter: false };
        Some(match self.tile_schedule {
            TileSchedule::PerTile => per_tile,
            TileSchedule::Static => persistent(false),
            TileSchedule::Auto if self.split.is_some() && !capturing => persistent(true),
            TileSchedule::Auto if cfg.pingpong() => persistent(false),
            TileSchedule::Auto => per_tile,
        })
    }
}
