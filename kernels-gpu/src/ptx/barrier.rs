//! CTA barriers (PTX ISA §9.7.13.1 `bar.sync` / `barrier.sync`).
//!
//! Barriers never go through inline asm: rustc does not mark `asm!` `convergent`, so LLVM may clone an asm barrier
//! into both arms of a branch, splitting the CTA across two barrier instances (undefined behaviour for an
//! `.aligned` barrier; it hung every Hopper kernel of the sm_90a prototype). It happened here too: with an asm
//! `bar.sync`, the bs-128 kernels with 4 stages and double-buffered fragments (`sparsek_bsr_bs128_*`,
//! `sparsek_tune_12..=14`) had 3 `bar.sync` for the 2 in the source: the prefetch's last commit and the wait and
//! barrier after it were tail-duplicated into both arms of the `num_k_tiles == 0` branch (CTA-uniform there, so
//! latent). LLVM's NVVM barrier intrinsics are declared `convergent`, which forbids that duplication.

/// `bar.sync 0`: waits for every thread of the CTA and orders their shared and global memory accesses.
/// All threads of the CTA must reach it, in CTA-uniform control flow.
///
/// Emitted through `core::arch::nvptx::_syncthreads` (`llvm.nvvm.barrier0`, which LLVM auto-upgrades to
/// `llvm.nvvm.barrier.cta.sync.aligned.all(0)`, printed `bar.sync 0`): a convergent intrinsic, so LLVM keeps
/// exactly the barriers the source has.
#[inline(always)]
pub fn bar_sync() {
    // SAFETY: a barrier has no memory-safety preconditions; the caller keeps it in CTA-uniform control flow.
    unsafe { core::arch::nvptx::_syncthreads() };
}
