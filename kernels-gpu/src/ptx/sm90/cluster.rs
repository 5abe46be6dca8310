//! Thread-block clusters (PTX ISA §10 `%cluster_ctarank`, `%clusterid`; §9.7.9.23 `mapa`; §9.7.13.2
//! `barrier.cluster`; the `.shared::cluster` forms of `st` and `mbarrier.arrive`): a launch with a cluster
//! dimension runs its CTAs in groups that are resident at once on neighbouring SMs and can reach each other's
//! shared memory. A launch without one is a grid of one-CTA clusters (rank 0 of 1).
//!
//! Addresses: `mapa` turns a `u32` offset in this CTA's `.shared` window into the `.shared::cluster` address of
//! the same offset in another CTA of the cluster; the remote forms below take such addresses.

use core::arch::asm;

/// Reads one 32-bit special register.
macro_rules! sreg {
    ($name:literal) => {{
        let v: u32;
        // SAFETY: reading a special register has no preconditions.
        unsafe { asm!(concat!("mov.u32 {0}, ", $name, ";"), out(reg32) v, options(pure, nomem, nostack)) };
        v
    }};
}

/// `%cluster_ctarank`: this CTA's rank in its cluster.
#[inline(always)]
pub fn cluster_ctarank() -> u32 {
    sreg!("%cluster_ctarank")
}

/// `%cluster_nctarank`: CTAs per cluster (1 for a launch without a cluster dimension).
#[inline(always)]
pub fn cluster_nctarank() -> u32 {
    sreg!("%cluster_nctarank")
}

/// `%clusterid.x`: this CTA's cluster in the grid, along x.
#[inline(always)]
pub fn cluster_id_x() -> u32 {
    sreg!("%clusterid.x")
}

/// `%nclusterid.x`: clusters in the grid along x.
#[inline(always)]
pub fn cluster_count_x() -> u32 {
    sreg!("%nclusterid.x")
}

/// `mapa.shared::cluster.u32`: the `.shared::cluster` address of shared offset `addr` in the CTA of rank
/// `rank` of this cluster.
#[inline(always)]
pub fn mapa_shared(addr: u32, rank: u32) -> u32 {
    let out: u32;
    // SAFETY: an address computation; no memory access.
    unsafe {
        asm!(
            "mapa.shared::cluster.u32 {o}, {a}, {r};",
            o = out(reg32) out,
            a = in(reg32) addr,
            r = in(reg32) rank,
            options(pure, nomem, nostack)
        )
    };
    out
}

/// `barrier.cluster.arrive.release` then `barrier.cluster.wait.acquire`: waits until every non-exited thread
/// of the cluster has arrived, ordering their earlier memory accesses (the `mbarrier.init`s with
/// [`fence_mbarrier_init`](super::mbarrier::fence_mbarrier_init)) before everything after it.
///
/// The non-`.aligned` forms: each thread arrives for itself, so a copy of the asm in two arms of a branch (which
/// LLVM may make: asm is not `convergent`) still counts every thread once.
#[inline(always)]
pub fn cluster_sync() {
    // SAFETY: a barrier has no memory-safety preconditions; every thread of the cluster calls it once.
    unsafe { asm!("barrier.cluster.arrive.release;", "barrier.cluster.wait.acquire;", options(nostack)) };
}

/// `st.shared::cluster.u32 [addr], v`: stores `v` at a `.shared::cluster` address (see [`mapa_shared`]).
///
/// # Safety
/// `addr` is a 4-byte aligned `.shared::cluster` address of a CTA of this cluster that has not exited.
#[inline(always)]
pub unsafe fn st_shared_cluster_u32(addr: u32, v: u32) {
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("st.shared::cluster.u32 [{a}], {v};", a = in(reg32) addr, v = in(reg32) v, options(nostack)) };
}

/// `mbarrier.arrive.release.cluster.shared::cluster.b64 _, [addr]`: arrives on a barrier of another CTA of the
/// cluster (its `.shared::cluster` address, see [`mapa_shared`]); release at cluster scope, so this thread's
/// earlier memory accesses (and the wgmma reads it waited for) happen before the phase completes.
///
/// # Safety
/// `addr` is the `.shared::cluster` address of an initialised barrier of a CTA of this cluster that has not
/// exited.
#[inline(always)]
pub unsafe fn mbarrier_arrive_cluster(addr: u32) {
    // SAFETY: the caller guarantees the barrier.
    unsafe {
        asm!("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [{a}];", a = in(reg32) addr, options(nostack))
    };
}

/// `mbarrier.arrive.shared::cluster.b64 _, [addr]`: arrives on a barrier of another CTA of the cluster with the
/// default semantics (release at CTA scope): a signal that orders nothing across CTAs, for a barrier that only
/// says "this slot has been read" (the reads were waited for before), as CUTLASS's cluster pipelines release
/// their slots. Cheaper than [`mbarrier_arrive_cluster`], which must publish this thread's earlier writes.
///
/// # Safety
/// As [`mbarrier_arrive_cluster`].
#[inline(always)]
pub unsafe fn mbarrier_arrive_remote(addr: u32) {
    // SAFETY: the caller guarantees the barrier.
    unsafe { asm!("mbarrier.arrive.shared::cluster.b64 _, [{a}];", a = in(reg32) addr, options(nostack)) };
}

/// Waits until the phase of parity `parity` of `bar` (this CTA's) has completed, with acquire semantics at
/// cluster scope: writes another CTA made before its release-arrive ([`mbarrier_arrive_cluster`]) are visible
/// after it.
///
/// # Safety
/// `bar` is an initialised barrier in this CTA's shared memory; the phase must eventually complete.
#[inline(always)]
pub unsafe fn mbarrier_wait_cluster(bar: u32, parity: u32) {
    loop {
        let done: u32;
        // SAFETY: the caller guarantees the barrier. No labels in the asm (LLVM may duplicate it).
        unsafe {
            asm!(
                "{{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [{b}], {ph}; selp.u32 {d}, 1, 0, p; }}",
                b = in(reg32) bar,
                ph = in(reg32) parity,
                d = out(reg32) done,
                options(nostack)
            )
        };
        if done != 0 {
            return;
        }
    }
}
