//! Shared memory: the CTA's dynamic shared-memory window and static shared arrays, as `u32` addresses in the
//! `.shared` window.

use core::arch::asm;

/// 128-byte alignment for the dynamic shared-memory window (swizzled tiles assume 128-byte lines).
#[repr(C, align(128))]
pub struct Align128([u8; 128]);

/// Shared-memory address (offset in the `.shared` window) of the CTA's dynamic shared memory, whose size the
/// host sets at launch. Emits `.extern .shared .align 128 .b8 ...[]`.
#[inline(always)]
pub fn dynamic_smem_base() -> u32 {
    let generic = core::intrinsics::gpu::gpu_launch_sized_workgroup_mem::<Align128>();
    let addr: u32;
    // SAFETY: converts the generic address of the shared window to a shared-space offset; no memory access.
    unsafe {
        asm!(
            "{{ .reg .u64 t; cvta.to.shared.u64 t, {g}; cvt.u32.u64 {a}, t; }}",
            g = in(reg64) generic.addr(),
            a = out(reg32) addr,
            options(pure, nomem, nostack)
        )
    };
    addr
}

/// Declares a static shared-memory array `$name` of `$bytes` bytes (a literal), 128-byte aligned, and evaluates
/// to its `u32` shared address. (`#[link_section = ".shared"]` statics land in `.global`; this is what works.)
#[macro_export]
macro_rules! static_smem {
    ($name:ident, $bytes:literal) => {{
        core::arch::global_asm!(concat!(".shared .align 128 .b8 ", stringify!($name), "[", stringify!($bytes), "];"));
        let addr: u32;
        // SAFETY: takes the address of a shared array declared just above; no memory access.
        #[allow(unused_unsafe)]
        unsafe {
            core::arch::asm!(concat!("mov.u32 {0}, ", stringify!($name), ";"), out(reg32) addr, options(pure, nomem, nostack))
        };
        addr
    }};
}
