//! sparsek's GPU kernels, written in Rust and compiled to PTX (see ARCHITECTURE.md).
//!
//! Invariants: nothing here allocates or panics (no slice indexing with run-time indices, no `core::fmt`);
//! every PTX instruction is used through one wrapper in [`ptx`]; shared-memory tiles own their swizzle ([`tile`]);
//! index math, configurations, the parameter structs and the variant table live in the shared `sparsek-layout`
//! crate ([`layout`]), which the host uses too.
#![no_std]
#![feature(
    abi_ptx,
    stdarch_nvptx,
    asm_experimental_arch,
    core_intrinsics,
    gpu_intrinsics,
    gpu_launch_sized_workgroup_mem
)]
// The sm_90a collectives (ptx::sm90) call NVVM intrinsics by their LLVM names.
#![cfg_attr(feature = "sm90", feature(link_llvm_intrinsics))]
#![allow(internal_features)]
#![deny(unsafe_op_in_unsafe_fn)]

pub use sparsek_layout as layout;
pub mod ptx;
pub mod tile;

/// The configuration of entry point `$name`: its `layout::VARIANTS` row's, with compile-time checks that the row
/// exists and has the template (`layout::Pipeline`), input type, B order and output type the entry point is
/// written for. The configuration comes from the table, never from the entry point.
#[cfg(not(feature = "test-kernels"))]
macro_rules! variant_config {
    ($name:ident, $pipeline:pat, $in_type:pat, $b_layout:pat, $out_type:pat) => {{
        const VARIANT: crate::layout::Variant = crate::layout::variant(stringify!($name));
        const {
            VARIANT.config.assert_valid();
            assert!(
                matches!(VARIANT.config.pipeline, $pipeline),
                "the entry point's template differs from its variant's"
            );
            assert!(matches!(VARIANT.out, $out_type), "the entry point's output type differs from its variant's");
            assert!(matches!(VARIANT.input, $in_type), "the entry point's input type differs from its variant's");
            assert!(matches!(VARIANT.b_layout, $b_layout), "the entry point's B order differs from its variant's");
        }
        VARIANT.config
    }};
}

/// Defines the entry point of one `layout::VARIANTS` row (build.rs writes one line per row of the module being
/// built): dispatches on the row's `layout::Decomposition` to the entry-point macro of the template that implements
/// it (`bsr_kernel!` with whole or split rows, forward or transposed (`layout::Op::BsrSpmmT`), `flat_kernel!`,
/// `decode_kernel!`, `hopper_kernel!`, `sddmm_kernel!`), which the file including the line defines.
#[cfg(not(feature = "test-kernels"))]
macro_rules! kernel {
    (WholeRows, $($row:tt)*) => { bsr_kernel!(false, crate::sm80::bsr::src::FORWARD, $($row)*); };
    (SplitRows, $($row:tt)*) => { bsr_kernel!(true, crate::sm80::bsr::src::FORWARD, $($row)*); };
    (TransposedWholeRows, $($row:tt)*) => { bsr_kernel!(false, crate::sm80::bsr::src::TRANSPOSED, $($row)*); };
    (TransposedSplitRows, $($row:tt)*) => { bsr_kernel!(true, crate::sm80::bsr::src::TRANSPOSED, $($row)*); };
    (StoredBlocks, $($row:tt)*) => { sddmm_kernel!($($row)*); };
    (FlatList, $($row:tt)*) => { flat_kernel!($($row)*); };
    (DecodeSlices, $($row:tt)*) => { decode_kernel!($($row)*); };
    (HopperTiles, $($row:tt)*) => { hopper_kernel!(crate::sm90::src::FORWARD, $($row)*); };
    (TransposedHopperTiles, $($row:tt)*) => { hopper_kernel!(crate::sm90::src::TRANSPOSED, $($row)*); };
    (HopperSddmmXRow, $($row:tt)*) => { hopper_kernel!(crate::sm90::src::SDDMM_X_ROW, $($row)*); };
    (HopperSddmmXCol, $($row:tt)*) => { hopper_kernel!(crate::sm90::src::SDDMM_X_COL, $($row)*); };
}

#[cfg(not(any(feature = "test-kernels", feature = "tune-kernels", feature = "sm90")))]
mod check;
#[cfg(not(feature = "test-kernels"))]
mod epilogue;
#[cfg(not(feature = "test-kernels"))]
mod reduce;
#[cfg(not(any(feature = "test-kernels", feature = "sm90")))]
mod sm80;
#[cfg(feature = "sm90")]
mod sm90;
#[cfg(feature = "test-kernels")]
mod test_kernels;
#[cfg(not(any(feature = "test-kernels", feature = "tune-kernels", feature = "sm90")))]
mod transpose;

/// A panic can only come from a bug (the code has no run-time checked indexing); it traps the kernel, which the
/// host sees as a launch failure. build-ptx's checks make sure no `trap` is reachable in the committed PTX.
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: trap aborts the kernel; nothing runs after it.
    unsafe { core::arch::nvptx::trap() }
}
