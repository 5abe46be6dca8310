//! One thin wrapper per PTX instruction the kernels use, one file per instruction family. Each wrapper says which
//! PTX ISA section it implements and, for warp-collective instructions, which lane owns which element (the same
//! maps are plain functions in [`crate::layout`], checked by the host tests). Call sites use the flat paths
//! re-exported here (`ptx::ldmatrix_x4`, `ptx::mma_m16n8k16_f32_f16`, ...).
//!
//! Conventions:
//! - Shared-memory addresses are `u32` offsets in the `.shared` window (no generic addressing).
//! - Warp-collective wrappers (`ldmatrix`, `mma`) must be called by all 32 lanes of a warp in warp-uniform
//!   control flow: rustc does not mark inline asm `convergent`, so keep them out of divergent branches.
//! - CTA barriers are never inline asm: they use LLVM's convergent NVVM intrinsics ([`barrier`]), which LLVM does
//!   not duplicate into the arms of a branch. An asm barrier can be duplicated, and was: see [`barrier`].
//! - Every `asm!` that touches memory or orders it keeps Rust's default (volatile, may read and write memory);
//!   `ld` and `ldmatrix` are `readonly`; register-only instructions (`mma`, `cvt`, special registers, address
//!   conversions) are `pure, nomem`.
//!
//! Families (sm_80, PTX ISA 8.0; everything here also runs on sm_90a), one module each:
//! - [`special`] — `%tid`, `%ctaid`, `%ntid`, `%laneid` (special registers);
//! - [`barrier`] — `bar.sync` (through a convergent intrinsic);
//! - [`smem`] — the dynamic shared-memory window, static shared arrays ([`static_smem!`](crate::static_smem));
//! - [`memory`] — 16-byte `ld`/`st` global and shared, `st.global.v2.f32`, scalar global loads and stores,
//!   `atom.global.min.u64`;
//! - [`cp_async`] — 16-byte `cp.async.cg` with zero-fill, `commit_group`, `wait_group`;
//! - [`ldmatrix`] — `ldmatrix` x1/x2/x4, with and without `.trans`;
//! - [`mma`] — `mma.sync.m16n8k16` f32 += f16 x f16 and f32 += bf16 x bf16;
//! - [`cvt`] — f32 <-> f16 / bf16, `ex2.approx` (the epilogue's activations);
//! - [`griddep`] — `griddepcontrol.wait` / `.launch_dependents` (programmatic dependent launch), as markers that
//!   only the product module's sm_90a cubin turns into instructions.
//!
//! The sm_90a-only families (mbarrier, TMA `cp.async.bulk.tensor`, `wgmma`, `setmaxnreg`) are in [`sm90`],
//! compiled only into the sm_90a module (feature `sm90`).

/// Wrappers of instructions without register operands that order or complete memory operations (fences,
/// async-group commits and waits): `name: "asm";`, or `name<N>: "asm {N};"` with a constant count. Safe: no
/// memory-safety preconditions; not `nomem`, so the compiler keeps memory accesses on their side.
macro_rules! ordering_asm {
    ($($(#[$doc:meta])* $name:ident $(<$n:ident>)?: $template:literal;)*) => {$(
        $(#[$doc])*
        #[inline(always)]
        pub fn $name$(<const $n: u32>)?() {
            // SAFETY: no register operands, no memory-safety preconditions (see the macro).
            unsafe { asm!($template, $($n = const $n,)? options(nostack)) };
        }
    )*};
}

/// Wrappers of one asm block with named register operands that reaches memory through addresses the caller vouches
/// for (each wrapper's `# Safety` says which): `name(arg: type = class, ...) [-> out: type = class]: "asm",
/// [options];`, the asm naming each operand as its argument (`{arg}`) and the output (`{out}`, returned), passed
/// in that order. Unsafe: the addresses are the caller's to guarantee.
macro_rules! address_asm {
    ($($(#[$doc:meta])* $name:ident($($arg:ident: $t:ty = $class:ident),*) $(-> $out:ident: $rt:ty = $oclass:ident)?:
        $template:literal, [$($opt:ident),*];)*) => {$(
        $(#[$doc])*
        #[inline(always)]
        pub unsafe fn $name($($arg: $t),*) $(-> $rt)? {
            $(let $out: $rt;)?
            // SAFETY: the caller guarantees the addresses (the wrapper's `# Safety`).
            unsafe { asm!($template, $($arg = in($class) $arg,)* $($out = out($oclass) $out,)? options($($opt),*)) };
            $($out)?
        }
    )*};
}

pub mod barrier;
pub mod cp_async;
pub mod cvt;
pub mod griddep;
pub mod ldmatrix;
pub mod memory;
pub mod mma;
#[cfg(feature = "sm90")]
pub mod sm90;
pub mod smem;
pub mod special;

pub use barrier::bar_sync;
pub use cp_async::{cp_async_cg_16, cp_async_commit, cp_async_wait, cp_async_wait_n};
pub use cvt::{bf16_bits_to_f32, cvt_bf16x2_f32, cvt_f16x2_f32, cvt_f32_f16, div_full, ex2_approx};
pub use griddep::{griddep_launch_dependents, griddep_wait};
pub use ldmatrix::{ldmatrix_x1, ldmatrix_x1_trans, ldmatrix_x2, ldmatrix_x2_trans, ldmatrix_x4, ldmatrix_x4_trans};
pub use memory::{
    atom_global_add_u32, atom_global_min_u64, fence_acq_rel_gpu, l2_evict_first_policy, ld_global_cg_v4, ld_global_f32,
    ld_global_nc_u16, ld_global_nc_v4, ld_global_stream_v4, ld_global_u16, ld_global_u32, ld_global_u64, ld_global_v4,
    ld_relaxed_gpu_u32, ld_shared_v4, st_global_f32, st_global_u16, st_global_u32, st_global_v2_f32, st_global_v4,
    st_shared_u32, st_shared_v2, st_shared_v4,
};
pub use mma::{mma_m16n8k16_f32_bf16, mma_m16n8k16_f32_f16};
#[cfg(feature = "sm90")]
pub use sm90::{
    mbarrier::{fence_mbarrier_init, mbarrier_arrive, mbarrier_arrive_expect_tx, mbarrier_init, mbarrier_wait},
    setmaxnreg::{setmaxnreg_dec, setmaxnreg_inc},
    stmatrix::stmatrix_x4_trans,
    tma::{
        bulk_commit_group, bulk_wait_group, bulk_wait_group_read, fence_proxy_async_shared, tma_load_2d, tma_load_3d,
        tma_store_2d, tma_store_4d,
    },
    wgmma::{
        WgmmaAcc, smem_desc_128b, wgmma_commit_group, wgmma_fence, wgmma_fence_operand, wgmma_m64n128k16,
        wgmma_m64n256k16, wgmma_wait_group,
    },
};
pub use smem::{Align128, dynamic_smem_base};
pub use special::{
    ballot, block_dim_x, block_idx_x, block_idx_y, grid_dim_x, lane_id, shfl_idx, thread_idx_x, warp_idx,
};
