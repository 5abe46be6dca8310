//! Shared-memory barriers with transaction counts (PTX ISA §9.7.13.15 `mbarrier`). A barrier is 8 bytes of
//! shared memory, 8-byte aligned, addressed by its `u32` offset in the `.shared` window. Each phase completes when
//! the expected arrivals have arrived and the expected transaction bytes (TMA copies) have landed; waiters name
//! the phase by its parity.

use core::arch::asm;

address_asm! {
    /// `mbarrier.init.shared::cta.b64 [bar], count`: a fresh barrier expecting `count` arrivals per phase, in
    /// phase 0. One thread initialises; `fence_mbarrier_init` and a CTA barrier make it visible before anyone uses
    /// it.
    ///
    /// # Safety
    /// `bar` is an 8-byte aligned shared address no one else uses until the CTA barrier that follows.
    mbarrier_init(bar: u32 = reg32, count: u32 = reg32): "mbarrier.init.shared::cta.b64 [{bar}], {count};", [nostack];
}

ordering_asm! {
    /// `fence.mbarrier_init.release.cluster`: orders this thread's `mbarrier.init`s before later arrivals and TMA
    /// completions (by any thread or the async proxy).
    fence_mbarrier_init: "fence.mbarrier_init.release.cluster;";
}

address_asm! {
    /// `mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], bytes`: this thread arrives on `bar` and adds `bytes`
    /// to the transaction bytes its current phase waits for (the TMA copies that complete on it).
    ///
    /// # Safety
    /// `bar` is an initialised barrier in this CTA's shared memory.
    mbarrier_arrive_expect_tx(bar: u32 = reg32, bytes: u32 = reg32):
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [{bar}], {bytes};", [nostack];
    /// `mbarrier.arrive.shared::cta.b64 _, [bar]`: this thread arrives on `bar` (release: its earlier shared-memory
    /// reads, including the wgmma reads it waited for, happen before the phase completes).
    ///
    /// # Safety
    /// `bar` is an initialised barrier in this CTA's shared memory.
    mbarrier_arrive(bar: u32 = reg32): "mbarrier.arrive.shared::cta.b64 _, [{bar}];", [nostack];
    /// `mbarrier.try_wait.parity.shared::cta.b64`: 1 if the phase of parity `parity` of `bar` has completed, else 0
    /// (the instruction waits a bounded, system-dependent time before answering 0); acquire: reads after a
    /// successful wait see the phase's writes. No labels in the asm: LLVM may duplicate an asm block, and a
    /// duplicated label fails ptxas.
    ///
    /// # Safety
    /// `bar` is an initialised barrier in this CTA's shared memory.
    mbarrier_try_wait_parity(bar: u32 = reg32, parity: u32 = reg32) -> done: u32 = reg32:
        "{{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [{bar}], {parity}; selp.u32 {done}, 1, 0, p; }}",
        [nostack];
}

/// Waits until the phase of parity `parity` of `bar` has completed.
///
/// # Safety
/// As [`mbarrier_try_wait_parity`]; the phase must eventually complete (or the thread waits forever).
#[inline(always)]
pub unsafe fn mbarrier_wait(bar: u32, parity: u32) {
    // SAFETY: forwarded.
    while unsafe { mbarrier_try_wait_parity(bar, parity) } == 0 {}
}
