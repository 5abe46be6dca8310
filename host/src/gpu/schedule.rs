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
//! stream while they are busy gets the grid of a captured stream. A stream being captured into a CUDA
//! graph gets a grid that touches no counter: one tile per consumer set (one CTA per tile, or per two tiles for
//! the ping-pong kernels), the kernel walking its tiles with a static stride. A persistent grid with that
//! stride was measured 7-10% faster on uniform rows but 36% slower on skewed ones (docs/perf-notes.md).
//!
//! Clusters ([`Gpu::with_multicast`]): where a block row has at least two N tiles, the kernels run in 2-CTA
//! clusters that take N tiles `2u` and `2u + 1` of one block row together. The two CTAs multiply the same A
//! blocks, so each loads half of every A slice and multicasts it to both: A's reads from L2 halve. The grid is
//! then counted in clusters (the driver's count of resident 2-CTA clusters for a persistent grid), and the
//! counter hands out pairs.

use cudarc::driver::CudaFunction;
use cudarc::driver::sys::{
    self, CUlaunchAttribute, CUlaunchAttributeID, CUlaunchAttributeValue, CUlaunchAttributeValue_union__bindgen_ty_1,
    CUlaunchConfig, CUstream,
};
use sparsek_layout::{KernelConfig, Pipeline};

use crate::gpu::Gpu;
use crate::gpu::context::PlanChoice;

/// How the sm_90a kernels' CTAs take their tiles ([`Gpu::with_tile_schedule`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TileSchedule {
    /// A persistent grid taking tiles from the counter wherever it can be used (the stream is not being
    /// captured and the workspace exists), else [`TileSchedule::PerTile`].
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
    /// CTAs launched (a multiple of `cluster`).
    pub ctas: u32,
    /// Whether they take tiles from the workspace's counter (else with a static stride).
    pub counter: bool,
    /// CTAs per cluster: 2 when pairs of N tiles of a block row share their A loads (multicast), else 1.
    pub cluster: u32,
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

    /// Whether the sm_90a kernels may run in 2-CTA clusters that multicast A to two N tiles of a block row
    /// (default `true`; the kernels give the same bits either way). Off, every CTA loads its own A.
    pub fn with_multicast(mut self, on: bool) -> Self {
        self.multicast = on;
        self
    }

    /// The multicast setting ([`Gpu::with_multicast`]).
    pub fn multicast(&self) -> bool {
        self.multicast
    }

    /// The grid a launch of `choice`'s kernel over `block_rows` block rows and `n` columns gets on a stream
    /// that is not being captured and finds the counter free: `None` for the sm_80 kernels, whose grid is
    /// their tiles.
    pub fn tile_grid(&self, choice: &PlanChoice, block_rows: usize, n: usize) -> Option<TileGrid> {
        let n_tiles = n.div_ceil(choice.config.bn.max(1) as usize);
        let occupancy = (choice.ctas_per_sm, choice.pair_clusters);
        self.tile_grid_on(&choice.config, occupancy, (block_rows, n_tiles), self.split.is_some())
    }

    /// [`Gpu::tile_grid`] for a launch of `cfg` with `occupancy` (CTAs per SM, resident 2-CTA clusters) over
    /// `(block_rows, n_tiles)` output tiles that has (`counter`) or has not got the tile counter (the launcher
    /// claims it only for [`TileSchedule::Auto`]).
    pub(crate) fn tile_grid_on(
        &self,
        cfg: &KernelConfig,
        (ctas_per_sm, pair_clusters): (u32, u32),
        (block_rows, n_tiles): (usize, usize),
        counter: bool,
    ) -> Option<TileGrid> {
        if !matches!(cfg.pipeline, Pipeline::TmaWgmma { .. }) {
            return None;
        }
        // Pairs where a block row has two N tiles or more; an odd count leaves the last pair's second CTA
        // multiplying zeros, so only from 8 tiles on (a ninth of the work at most).
        let cluster = if self.multicast && pair_clusters > 0 && n_tiles >= 2 && (n_tiles % 2 == 0 || n_tiles >= 8) {
            2
        } else {
            1
        };
        let units = block_rows * n_tiles.div_ceil(cluster);
        let wave = if cluster == 2 {
            pair_clusters as usize
        } else {
            ctas_per_sm.max(1) as usize * self.info().sm_count.max(1) as usize
        };
        let max_clusters = (u32::MAX / 2) as usize;
        let grid = |clusters: usize, counter: bool| TileGrid {
            ctas: clusters.clamp(1, max_clusters) as u32 * cluster as u32,
            counter,
            cluster: cluster as u32,
        };
        let sets = if cfg.pingpong() { 2 } else { 1 };
        Some(match self.tile_schedule {
            TileSchedule::PerTile => grid(units.div_ceil(sets), false),
            TileSchedule::Static => grid(units.min(wave), false),
            TileSchedule::Auto if counter => grid(units.min(wave), true),
            TileSchedule::Auto => grid(units.div_ceil(sets), false),
        })
    }
}

/// The attribute that launches in clusters of `cluster` CTAs along x.
fn cluster_attribute(cluster: u32) -> CUlaunchAttribute {
    // SAFETY: an all-zero launch attribute value is valid plain data (a union of integer structs).
    let mut value: CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
    value.clusterDim = CUlaunchAttributeValue_union__bindgen_ty_1 { x: cluster, y: 1, z: 1 };
    CUlaunchAttribute { id: CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, pad: [0; 4], value }
}

/// How many 2-CTA clusters of `func` (configuration `cfg`) the GPU holds at once (the driver's occupancy
/// answer; 0 when it has none or the query fails, and the launcher then uses no clusters).
pub(crate) fn max_pair_clusters(func: &CudaFunction, cfg: &KernelConfig) -> u32 {
    let mut attr = cluster_attribute(2);
    let config = CUlaunchConfig {
        gridDimX: 2,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: cfg.threads(),
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: cfg.smem_bytes(),
        hStream: std::ptr::null_mut(),
        attrs: &mut attr,
        numAttrs: 1,
    };
    let mut clusters = 0;
    // SAFETY: a valid function of the current context and a launch configuration that outlives the call.
    let r = unsafe { sys::cuOccupancyMaxActiveClusters(&mut clusters, func.cu_function(), &config) };
    if r == sys::CUresult::CUDA_SUCCESS { clusters.max(0) as u32 } else { 0 }
}

/// `cuLaunchKernelEx` of `func` in clusters of `cluster` CTAs along x.
///
/// # Safety
/// As `cuLaunchKernel`: `args` match the kernel's parameters, the launch shape is the kernel's, and `grid.0` is
/// a multiple of `cluster`.
pub(crate) unsafe fn launch_in_clusters(
    func: &CudaFunction,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    smem: u32,
    stream: CUstream,
    cluster: u32,
    args: &mut [*mut std::ffi::c_void],
) -> Result<(), cudarc::driver::DriverError> {
    let mut attr = cluster_attribute(cluster);
    let config = CUlaunchConfig {
        gridDimX: grid.0,
        gridDimY: grid.1,
        gridDimZ: grid.2,
        blockDimX: block.0,
        blockDimY: block.1,
        blockDimZ: block.2,
        sharedMemBytes: smem,
        hStream: stream,
        attrs: &mut attr,
        numAttrs: 1,
    };
    // SAFETY: forwarded; the configuration and the argument array outlive the call, which copies them.
    unsafe { sys::cuLaunchKernelEx(&config, func.cu_function(), args.as_mut_ptr(), std::ptr::null_mut()) }.result()
}
