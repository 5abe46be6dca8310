//! The sm_90a-only instruction families, compiled only into the sm_90a module (feature `sm90`, built with
//! `-C target-cpu=sm_90a -C target-feature=+ptx83`):
//! - [`mbarrier`] — `mbarrier.init`, `arrive`, `arrive.expect_tx`, `try_wait.parity`, `fence.mbarrier_init`;
//! - [`tma`] — `cp.async.bulk.tensor.2d` (global -> shared through a tensor map, completing on an mbarrier) and
//!   the generic address of a tensor map held in the kernel's parameters;
//! - [`wgmma`] — `wgmma.fence`, `wgmma.mma_async.m64n{128,256}k16` (f16 / bf16, B K-major or MN-major),
//!   `commit_group`, `wait_group`, and the shared-memory matrix descriptor;
//! - [`setmaxnreg`] — `setmaxnreg.inc` / `.dec` (registers moved between warpgroups);
//! - [`stmatrix`] — `stmatrix.x4.trans` (a warp's 16-bit C fragments into shared memory, transposed).
//!
//! `wgmma` and `setmaxnreg` are `.sync.aligned` warpgroup collectives, called only in warpgroup-uniform control
//! flow. `setmaxnreg` and wgmma's fence, commit and wait go through LLVM's NVVM intrinsics, which LLVM declares
//! `convergent` (it does not copy them into the arms of a branch); `wgmma.mma_async` (its 64-128 accumulator
//! operands) stays inline asm, which rustc does not mark `convergent`. build-ptx counts all of them per kernel
//! against the variant table (`KernelConfig::expected_wgmma`, `expected_wgmma_group_ops`), so a copy LLVM made
//! fails the build.

pub mod mbarrier;
pub mod setmaxnreg;
pub mod stmatrix;
pub mod tma;
pub mod wgmma;
