//! Tensor copies through a tensor map (PTX ISA §9.7.9.27 `cp.async.bulk.tensor`), issued by one thread.

use core::arch::asm;

/// `cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [tmap, {x, y}], [bar]`:
/// copies the box of the tensor map at `tmap` whose first element is at column `x`, row `y` (elements, innermost
/// first) into shared memory at `dst`, laid out and swizzled as the map says; elements outside the tensor read as
/// zero. The copy's bytes count against `bar`'s current phase (the whole box, in bounds or not).
///
/// # Safety
/// `tmap` is the generic address of a valid 64-byte aligned tensor map in the parameter, constant or global
/// space; `dst` is a shared address aligned as the map's swizzle needs (1024 bytes for 128-byte swizzle) with
/// room for the box; `bar` is an initialised barrier of this CTA that expects these bytes.
#[inline(always)]
pub unsafe fn tma_load_2d(dst: u32, tmap: u64, x: u32, y: u32, bar: u32) {
    // SAFETY: the caller guarantees the addresses.
    unsafe {
        asm!(
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [{m}, {{{x}, {y}}}], [{b}];",
            d = in(reg32) dst,
            m = in(reg64) tmap,
            x = in(reg32) x,
            y = in(reg32) y,
            b = in(reg32) bar,
            options(nostack)
        )
    };
}

/// The rank-3 form of [`tma_load_2d`]: the box whose first element is at coordinates `(x, y, z)`, innermost first.
///
/// # Safety
/// As [`tma_load_2d`], for a rank-3 tensor map.
#[inline(always)]
pub unsafe fn tma_load_3d(dst: u32, tmap: u64, (x, y, z): (u32, u32, u32), bar: u32) {
    // SAFETY: the caller guarantees the addresses.
    unsafe {
        asm!(
            "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [{m}, {{{x}, {y}, {z}}}], [{b}];",
            d = in(reg32) dst,
            m = in(reg64) tmap,
            x = in(reg32) x,
            y = in(reg32) y,
            z = in(reg32) z,
            b = in(reg32) bar,
            options(nostack)
        )
    };
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
