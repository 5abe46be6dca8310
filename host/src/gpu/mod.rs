//! The GPU backend, layer by layer (in cudarc's spirit):
//!
//! - `driver`: loading the driver, mapping its errors to [`Error`](crate::Error), guarding against panics in
//!   the bindings ([`driver_present`], [`device_count`]);
//! - `context`: the device's primary context, its facts ([`DeviceInfo`]) and the [`Gpu`] handle;
//! - `registry`: the embedded PTX modules, chosen by compute capability and loaded once, and their kernels keyed
//!   by (op, block size, output type) from the shared variant table (`sparsek_layout::VARIANTS`);
//! - [`DeviceMatrix`] / [`DeviceBsr`]: device buffers whose shape cannot drift from their allocation;
//!   [`RowSchedule`]: a BSR matrix's block rows longest first, for a view of the caller's memory;
//! - `views`: [`DenseView`], [`DenseViewMut`], [`BsrView`], [`VectorView`]: the caller's device memory (any
//!   layout, 32- or 64-bit indices), launched with [`Gpu::spmm_raw`] on the caller's stream;
//! - `tma`: the tensor maps of the sm_90a kernels, encoded per launch;
//! - `launch`: one typed, validated launcher per op ([`Gpu::spmm`]); `unsafe` appears only there, each launch
//!   with a `// SAFETY:` comment saying which checks make it sound;
//! - `tune`: [`Gpu::tune`], measuring every kernel family that can serve a product on the caller's matrix and
//!   remembering the fastest as a plan ([`crate::tune`]);
//! - `split`: the split-row workspace and choice ([`Gpu::with_row_split`]): long block rows spread over several
//!   CTAs of the narrow kernels, their partial tiles added in order by the row's last CTA;
//! - `schedule`: the sm_90a kernels' tile scheduler ([`Gpu::with_tile_schedule`]): a persistent grid taking
//!   tiles from a counter in the same workspace;
//! - [`timing`]: CUDA-event timing for the CLI, the benchmark and the tuner (not product API).

mod buffers;
mod context;
mod driver;
mod launch;
mod registry;
mod schedule;
mod split;
#[doc(hidden)]
pub mod timing;
mod tma;
mod tune;
mod views;

pub use buffers::{DeviceBsr, DeviceElement, DeviceMatrix, InputElement, OutputElement, RowSchedule};
#[cfg(feature = "tuning")]
#[doc(hidden)]
pub use context::KernelVariant;
pub use context::{
    DECODE_MAX_ROW_BYTES, DeviceInfo, Gpu, MID_SMALL_BS_MIN_ROWS_PER_SM, MID64_BS128_MIN_BLOCKS_PER_SM, PlanChoice,
    SMALL_GRID_MAX_N,
};
pub use cudarc::driver::sys::{CUdeviceptr, CUstream};
pub use driver::{device_count, driver_present};
pub use launch::{CheckedIndices, Decomposition, LaunchPlan};
pub use registry::KernelReport;
pub use schedule::{TileGrid, TileSchedule};
pub use sparsek_layout::{InType, KernelConfig, OutType, Pipeline, SHORT_ROW_MAX_K_TILES};
pub use split::{
    FLAT_AUTO_CTAS_PER_SM, FLAT_AUTO_MIN_K_TILES_PER_CTA, FLAT_MID_AUTO_MARGIN_K_TILES,
    FLAT_MID_AUTO_MIN_K_TILES_PER_CTA, GRAPH_BALANCE_MIN_ROW_BYTES, HOPPER_SPLIT_MIN_PART_K_TILES, HopperSplit,
    RowSplit, SPLIT_COUNTERS, SPLIT_PART_BYTES, SPLIT_PART_MAX_GROWN_K_TILES, SPLIT_PART_SHORT_K_TILES,
    SPLIT_PARTIALS_BYTES, SplitChoice, SplitLimits, flat_auto_serves, flat_ctas, graph_balance_pays,
    hopper_split_choice, rows_skewed, split_choice,
};
pub use tune::{Candidate, TuneOptions, TuneProblem, TuneReport};
pub use views::{BsrArrays, BsrView, DenseView, DenseViewMut, IndexType, VectorView};
