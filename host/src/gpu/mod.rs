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
//! - `launch`: one typed, validated launcher per op ([`Gpu::spmm`]): it builds the planner's problem from the
//!   launch, takes [`crate::plan`]'s plan and executes it, deciding nothing; each launch has a `// SAFETY:`
//!   comment saying which checks make it sound;
//! - `tune`: [`Gpu::tune`], measuring every kernel family that can serve a product on the caller's matrix and
//!   remembering the fastest as a plan ([`crate::tune`]);
//! - `split`: the split-row workspace (partial tiles and counters of split rows and the flat list, ordered across
//!   streams) and a captured launch's own workspace; which decomposition a launch takes is [`crate::plan`]'s;
//! - [`timing`]: CUDA-event timing for the CLI, the benchmark and the tuner (not product API).

mod buffers;
mod context;
mod driver;
mod launch;
mod registry;
mod split;
#[doc(hidden)]
pub mod timing;
mod tma;
mod tune;
mod views;

pub use crate::plan::{Decomposition, LaunchPlan, Policy};
pub use buffers::{DeviceBsr, DeviceElement, DeviceMatrix, InputElement, OutputElement, RowSchedule};
#[cfg(feature = "tuning")]
#[doc(hidden)]
pub use context::KernelVariant;
pub use context::{DeviceInfo, Gpu, PlanChoice};
pub use cudarc::driver::sys::{CUdeviceptr, CUstream};
pub use driver::{device_count, driver_present};
pub use launch::{CheckedIndices, DeviceBsrTranspose, TransposeView};
pub use registry::KernelReport;

/// Whether `stream` is being captured into a CUDA graph (a failed query, e.g. a stream of no live context, counts
/// as captured). For callers that launch on a stream they do not own (the Python package's native operators, which
/// must not start work a capture forbids); the launcher asks the same itself.
pub fn stream_capturing(stream: CUstream) -> bool {
    split::capturing(stream)
}
pub use sparsek_layout::{InType, KernelConfig, OutType, Pipeline};
// The planner's rules and thresholds, for the tests and `sparsek info` that still read them directly (the plan
// itself: Gpu::plan; the table: crate::plan::RULES).
#[doc(hidden)]
pub use crate::plan::flat_ctas;
#[doc(hidden)]
pub use crate::plan::rules::{
    DECODE_MAX_ROW_BYTES, FLAT_AUTO_CTAS_PER_SM, FLAT_AUTO_MIN_K_TILES_PER_CTA, FLAT_MID_AUTO_MARGIN_K_TILES,
    FLAT_MID_AUTO_MIN_K_TILES_PER_CTA, HOPPER_SPLIT_MIN_PART_K_TILES, MID_SMALL_BS_MIN_ROWS_PER_SM,
    MID64_BS128_MIN_BLOCKS_PER_SM, SPLIT_COUNTERS, SPLIT_PART_BYTES, SPLIT_PART_MAX_GROWN_K_TILES,
    SPLIT_PART_SHORT_K_TILES, SPLIT_PARTIALS_BYTES,
};
#[doc(hidden)]
pub use sparsek_layout::SHORT_ROW_MAX_K_TILES;
pub use tune::{Candidate, TuneOptions, TuneProblem, TuneReport};
pub use views::{BsrArrays, BsrView, DenseView, DenseViewMut, IndexType, VectorView};
