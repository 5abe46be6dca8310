//! Asynchronous global -> shared copies (PTX ISA §9.7.9.25: `cp.async`, `cp.async.commit_group`,
//! `cp.async.wait_group`).

use core::arch::asm;

address_asm! {
    /// `cp.async.cg.shared.global [dst], [src], 16, src_bytes`: asynchronously copies `src_bytes` (0..=16) bytes
    /// from global `src` to shared `dst` and zero-fills the rest of the 16 bytes. Bypasses L1 (`.cg`). The copy is
    /// part of the thread's current group; it is complete only after a `cp_async_wait` that covers its group, and
    /// visible to other threads only after a barrier that follows that wait.
    ///
    /// # Safety
    /// `dst` is a 16-byte aligned shared address; `src` is a 16-byte aligned global address whose first `src_bytes`
    /// bytes are readable (with `src_bytes == 0` nothing is read, but `src` must still be a valid global address).
    cp_async_cg_16(dst: u32 = reg32, src: *const u8 = reg64, src_bytes: u32 = reg32):
        "{{ .reg .u64 g; cvta.to.global.u64 g, {src}; cp.async.cg.shared.global [{dst}], [g], 16, {src_bytes}; }}",
        [nostack];
}

ordering_asm! {
    /// `cp.async.commit_group`: closes the current group of this thread's cp.async copies.
    cp_async_commit: "cp.async.commit_group;";
    /// `cp.async.wait_group N`: waits until at most `N` of this thread's most recent groups are still pending (the
    /// asm may be seen as writing memory: the copies land).
    cp_async_wait<N>: "cp.async.wait_group {N};";
}

/// [`cp_async_wait`] with a count that is a constant expression of const generics (which cannot be a const
/// argument without `generic_const_exprs`): the `match` folds away when `n` is a compile-time constant.
/// Counts above 7 wait for everything.
#[inline(always)]
pub fn cp_async_wait_n(n: u32) {
    match n {
        0 => cp_async_wait::<0>(),
        1 => cp_async_wait::<1>(),
        2 => cp_async_wait::<2>(),
        3 => cp_async_wait::<3>(),
        4 => cp_async_wait::<4>(),
        5 => cp_async_wait::<5>(),
        6 => cp_async_wait::<6>(),
        7 => cp_async_wait::<7>(),
        _ => cp_async_wait::<0>(),
    }
}
