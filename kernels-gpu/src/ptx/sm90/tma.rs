//! Tensor copies through a tensor map (PTX ISA §9.7.9.27 `cp.async.bulk.tensor`), issued by one thread.

use core::arch::asm;

/// A TMA copy wrapper: `load` (into shared `dst`, its bytes counted on the barrier `bar`) or `store` (from shared
/// `src`), through the tensor map at `tmap`, at the coordinates `$c` (innermost first), with the asm `$template`.
macro_rules! tma_copy {
    ($(#[$doc:meta])* load $name:ident(($($c:ident),+): $coords:ty), $template:literal) => {
        $(#[$doc])*
        #[inline(always)]
        pub unsafe fn $name(dst: u32, tmap: u64, ($($c),+): $coords, bar: u32) {
            // SAFETY: the caller guarantees the addresses.
            unsafe {
                asm!(
                    $template,
                    d = in(reg32) dst,
                    m = in(reg64) tmap,
                    $($c = in(reg32) $c,)+
                    b = in(reg32) bar,
                    options(nostack)
                )
            };
        }
    };
    ($(#[$doc:meta])* store $name:ident(($($c:ident),+): $coords:ty), $template:literal) => {
        $(#[$doc])*
        #[inline(always)]
        pub unsafe fn $name(tmap: u64, ($($c),+): $coords, src: u32) {
            // SAFETY: the caller guarantees the addresses and the visibility of the box.
            unsafe { asm!($template, m = in(reg64) tmap, $($c = in(reg32) $c,)+ s = in(reg32) src, options(nostack)) };
        }
    };
}

tma_copy! {
    /// `cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [tmap, {x, y}], [bar]`:
    /// copies the box of the tensor map at `tmap` whose first element is at column `x`, row `y` (elements,
    /// innermost first) into shared memory at `dst`, laid out and swizzled as the map says; elements outside the
    /// tensor read as zero. The copy's bytes count against `bar`'s current phase (the whole box, in bounds or not).
    ///
    /// # Safety
    /// `tmap` is the generic address of a valid 64-byte aligned tensor map in the parameter, constant or global
    /// space; `dst` is a shared address aligned as the map's swizzle needs (1024 bytes for 128-byte swizzle) with
    /// room for the box; `bar` is an initialised barrier of this CTA that expects these bytes.
    load tma_load_2d((x, y): (u32, u32)),
    "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [{m}, {{{x}, {y}}}], [{b}];"
}

tma_copy! {
    /// The rank-3 form of [`tma_load_2d`]: the box whose first element is at coordinates `(x, y, z)`, innermost
    /// first.
    ///
    /// # Safety
    /// As [`tma_load_2d`], for a rank-3 tensor map.
    load tma_load_3d((x, y, z): (u32, u32, u32)),
    "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [{m}, {{{x}, {y}, {z}}}], [{b}];"
}

tma_copy! {
    /// `cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [tmap, {x, y, z, w}], [src]`: stores the box at `src`
    /// (laid out and swizzled as the map says) to the tensor of the rank-4 map at `tmap`, its first element at
    /// coordinates `(x, y, z, w)`, innermost first; elements outside the tensor are not written (a row's last
    /// 16-byte unit is written whole: see host/src/gpu/tma.rs). Asynchronous: it joins this thread's current bulk
    /// async-group ([`bulk_commit_group`]); [`bulk_wait_group_read`] says when `src` may be written again.
    ///
    /// # Safety
    /// `tmap` is the generic address of a valid 64-byte aligned rank-4 tensor map in the parameter, constant or
    /// global space over memory this kernel may write; `src` is a shared address aligned as the map's swizzle
    /// needs (1024 bytes for 128-byte swizzle) holding a whole box, whose writes by other threads were made
    /// visible to the async proxy ([`fence_proxy_async_shared`] by each writer, then a barrier).
    store tma_store_4d((x, y, z, w): (u32, u32, u32, u32)),
    "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [{m}, {{{x}, {y}, {z}, {w}}}], [{s}];"
}

tma_copy! {
    /// The rank-2 form of [`tma_store_4d`]: stores the box at `src` with its first element at coordinates
    /// `(x, y)`, innermost first (a column-major C's rows, then its columns: host/src/gpu/tma.rs `c_map_col_major`).
    ///
    /// # Safety
    /// As [`tma_store_4d`], for a rank-2 tensor map.
    store tma_store_2d((x, y): (u32, u32)),
    "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [{m}, {{{x}, {y}}}], [{s}];"
}

ordering_asm! {
    /// `cp.async.bulk.commit_group`: closes this thread's current bulk async-group (the stores issued since the
    /// last commit).
    bulk_commit_group: "cp.async.bulk.commit_group;";
    /// `cp.async.bulk.wait_group.read N`: waits until at most `N` of this thread's committed bulk async-groups are
    /// still reading their shared-memory sources (their global writes may still be under way).
    bulk_wait_group_read<N>: "cp.async.bulk.wait_group.read {N};";
    /// `cp.async.bulk.wait_group N`: waits until at most `N` of this thread's committed bulk async-groups are
    /// incomplete (for 0: every store issued is done, its writes performed).
    bulk_wait_group<N>: "cp.async.bulk.wait_group {N};";
    /// `fence.proxy.async.shared::cta`: orders this thread's earlier shared-memory accesses (generic proxy) before
    /// later accesses of the async proxy (a TMA store reading them).
    fence_proxy_async_shared: "fence.proxy.async.shared::cta;";
}

/// The generic address of the kernel's first parameter (`<kernel>_param_0`, as LLVM names it), where the sm_90a
/// kernels keep their tensor maps. Taking `&param` in Rust would copy the parameter to local memory, which TMA
/// cannot read (../shared/HOPPER.md); `cvta.param` gives the address of the parameter itself.
#[macro_export]
macro_rules! param0_address {
    ($kernel:ident) => {{
        let addr: u64;
        // SAFETY: takes the address of this kernel's first parameter; no memory access.
        #[allow(unused_unsafe)]
        unsafe {
            core::arch::asm!(
                concat!("mov.b64 {0}, ", stringify!($kernel), "_param_0; cvta.param.u64 {0}, {0};"),
                out(reg64) addr,
                options(pure, nomem, nostack)
            )
        };
        addr
    }};
}
