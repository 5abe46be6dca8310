//! One thin wrapper per PTX instruction the kernels use. Each says which PTX ISA section it implements and, for
//! warp-collective instructions, which lane owns which element (the same maps are plain functions in
//! [`crate::layout`], checked by the host tests).
//!
//! Shared-memory addresses are `u32` offsets in the `.shared` window (no generic addressing). Warp-collective
//! wrappers (`ldmatrix`, `mma`) must be called by all 32 lanes of a warp in warp-uniform control flow: rustc does
//! not mark inline asm `convergent`, so keep them out of divergent branches.
//!
//! Every `asm!` that touches memory or orders it keeps Rust's default (volatile, may read and write memory);
//! `ldmatrix` is `readonly`; register-only instructions (`mma`, `cvt`) are `pure, nomem`.

use core::arch::asm;

// ---------------------------------------------------------------------------------------------------------------
// Thread and block indices (PTX ISA §10 "Special Registers": %tid, %ctaid, %ntid, %laneid)
// ---------------------------------------------------------------------------------------------------------------

/// `%tid.x`: this thread's index in its CTA.
#[inline(always)]
pub fn thread_idx_x() -> u32 {
    // SAFETY: reading a special register has no preconditions.
    unsafe { core::arch::nvptx::_thread_idx_x() }
}

/// `%ctaid.x`: this CTA's index in the grid.
#[inline(always)]
pub fn block_idx_x() -> u32 {
    // SAFETY: as above.
    unsafe { core::arch::nvptx::_block_idx_x() }
}

/// `%ctaid.y`.
#[inline(always)]
pub fn block_idx_y() -> u32 {
    // SAFETY: as above.
    unsafe { core::arch::nvptx::_block_idx_y() }
}

/// `%ntid.x`: threads per CTA along x.
#[inline(always)]
pub fn block_dim_x() -> u32 {
    // SAFETY: as above.
    unsafe { core::arch::nvptx::_block_dim_x() }
}

/// `%laneid`: this thread's lane in its warp (0..32).
#[inline(always)]
pub fn lane_id() -> u32 {
    let lane: u32;
    // SAFETY: reads a special register.
    unsafe { asm!("mov.u32 {0}, %laneid;", out(reg32) lane, options(pure, nomem, nostack)) };
    lane
}

/// This thread's warp within its CTA (for 1-D CTAs): `%tid.x / 32`.
#[inline(always)]
pub fn warp_idx() -> u32 {
    thread_idx_x() / 32
}

// ---------------------------------------------------------------------------------------------------------------
// Barriers (PTX ISA §9.7.13.1 bar.sync)
// ---------------------------------------------------------------------------------------------------------------

/// `bar.sync 0`: waits for every thread of the CTA and orders their shared and global memory accesses.
/// All threads of the CTA must reach it.
#[inline(always)]
pub fn bar_sync() {
    // SAFETY: a barrier has no memory-safety preconditions; the caller keeps it in CTA-uniform control flow.
    unsafe { asm!("bar.sync 0;", options(nostack)) };
}

// ---------------------------------------------------------------------------------------------------------------
// Shared memory: static and dynamic
// ---------------------------------------------------------------------------------------------------------------

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
            g = in(reg64) generic,
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

// ---------------------------------------------------------------------------------------------------------------
// 16-byte vector loads and stores (PTX ISA §9.7.9.8 ld, §9.7.9.10 st, .v4.u32)
// ---------------------------------------------------------------------------------------------------------------

/// `ld.global.v4.u32`: 16 bytes from global memory.
///
/// # Safety
/// `ptr` is a 16-byte aligned global address of 16 readable bytes.
#[inline(always)]
pub unsafe fn ld_global_v4(ptr: *const u32) -> [u32; 4] {
    let v: [u32; 4];
    // SAFETY: the caller guarantees `ptr` is valid and aligned.
    unsafe {
        let (a, b, c, d): (u32, u32, u32, u32);
        asm!("ld.global.v4.u32 {{{0}, {1}, {2}, {3}}}, [{4}];", out(reg32) a, out(reg32) b, out(reg32) c,
             out(reg32) d, in(reg64) ptr, options(readonly, nostack));
        v = [a, b, c, d];
    }
    v
}

/// `st.global.v4.u32`: 16 bytes to global memory.
///
/// # Safety
/// `ptr` is a 16-byte aligned global address of 16 writable bytes.
#[inline(always)]
pub unsafe fn st_global_v4(ptr: *mut u32, v: [u32; 4]) {
    // SAFETY: the caller guarantees `ptr` is valid and aligned.
    unsafe {
        asm!("st.global.v4.u32 [{0}], {{{1}, {2}, {3}, {4}}};", in(reg64) ptr, in(reg32) v[0], in(reg32) v[1],
             in(reg32) v[2], in(reg32) v[3], options(nostack))
    };
}

/// `ld.shared.v4.u32`: 16 bytes from shared memory.
///
/// # Safety
/// `addr` is a 16-byte aligned shared address inside the CTA's shared memory.
#[inline(always)]
pub unsafe fn ld_shared_v4(addr: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: the caller guarantees `addr` is valid and aligned.
    unsafe {
        asm!("ld.shared.v4.u32 {{{0}, {1}, {2}, {3}}}, [{4}];", out(reg32) a, out(reg32) b, out(reg32) c,
             out(reg32) d, in(reg32) addr, options(readonly, nostack))
    };
    [a, b, c, d]
}

/// `st.shared.v4.u32`: 16 bytes to shared memory.
///
/// # Safety
/// `addr` is a 16-byte aligned shared address inside the CTA's shared memory.
#[inline(always)]
pub unsafe fn st_shared_v4(addr: u32, v: [u32; 4]) {
    // SAFETY: the caller guarantees `addr` is valid and aligned.
    unsafe {
        asm!("st.shared.v4.u32 [{0}], {{{1}, {2}, {3}, {4}}};", in(reg32) addr, in(reg32) v[0], in(reg32) v[1],
             in(reg32) v[2], in(reg32) v[3], options(nostack))
    };
}

/// `st.global.v2.f32`: 8 bytes (two f32) to global memory.
///
/// # Safety
/// `ptr` is an 8-byte aligned global address of 8 writable bytes.
#[inline(always)]
pub unsafe fn st_global_v2_f32(ptr: *mut f32, v0: f32, v1: f32) {
    // SAFETY: the caller guarantees `ptr` is valid and aligned.
    unsafe {
        asm!("st.global.v2.f32 [{0}], {{{1}, {2}}};", in(reg64) ptr, in(reg32) v0, in(reg32) v1, options(nostack))
    };
}

// ---------------------------------------------------------------------------------------------------------------
// cp.async (PTX ISA §9.7.9.25: cp.async, cp.async.commit_group, cp.async.wait_group)
// ---------------------------------------------------------------------------------------------------------------

/// `cp.async.cg.shared.global [dst], [src], 16, src_bytes`: asynchronously copies `src_bytes` (0..=16) bytes
/// from global `src` to shared `dst` and zero-fills the rest of the 16 bytes. Bypasses L1 (`.cg`). The copy is
/// part of the thread's current group; it is complete only after a `cp_async_wait` that covers its group, and
/// visible to other threads only after a barrier that follows that wait.
///
/// # Safety
/// `dst` is a 16-byte aligned shared address; `src` is a 16-byte aligned global address whose first `src_bytes`
/// bytes are readable (with `src_bytes == 0` nothing is read, but `src` must still be a valid global address).
#[inline(always)]
pub unsafe fn cp_async_cg_16(dst: u32, src: *const u8, src_bytes: u32) {
    // SAFETY: the caller guarantees the addresses.
    unsafe {
        asm!(
            "{{ .reg .u64 g; cvta.to.global.u64 g, {src}; cp.async.cg.shared.global [{dst}], [g], 16, {n}; }}",
            dst = in(reg32) dst,
            src = in(reg64) src,
            n = in(reg32) src_bytes,
            options(nostack)
        )
    };
}

/// `cp.async.commit_group`: closes the current group of this thread's cp.async copies.
#[inline(always)]
pub fn cp_async_commit() {
    // SAFETY: no preconditions.
    unsafe { asm!("cp.async.commit_group;", options(nostack)) };
}

/// `cp.async.wait_group N`: waits until at most `N` of this thread's most recent groups are still pending.
#[inline(always)]
pub fn cp_async_wait<const N: u32>() {
    // SAFETY: no preconditions; the asm may be seen as writing memory (the copies land), which it does.
    unsafe { asm!("cp.async.wait_group {n};", n = const N, options(nostack)) };
}

// ---------------------------------------------------------------------------------------------------------------
// ldmatrix (PTX ISA §9.7.14.5.15 ldmatrix.sync.aligned.m8n8{.x1,.x2,.x4}{.trans}.shared.b16)
//
// Each 8x8 b16 matrix is addressed by 8 lanes, one 16-byte row each: matrix j's rows come from lanes 8j..8j+7
// (.x1 uses lanes 0-7, .x2 lanes 0-15; the other lanes' addresses are ignored but must be valid).
// Result register j of lane l holds, of matrix j:
//   without .trans: elements (row l/4, cols 2*(l%4), 2*(l%4)+1)   (low half first)
//   with .trans:    elements (rows 2*(l%4), 2*(l%4)+1, col l/4)
// ---------------------------------------------------------------------------------------------------------------

/// `ldmatrix.sync.aligned.m8n8.x1.shared.b16`.
///
/// # Safety
/// Called by all 32 lanes; lanes 0-7 pass 16-byte aligned shared addresses of 16 readable bytes.
#[inline(always)]
pub unsafe fn ldmatrix_x1(addr: u32) -> u32 {
    let r: u32;
    // SAFETY: the caller guarantees the addresses and warp convergence.
    unsafe {
        asm!("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {{{0}}}, [{1}];", out(reg32) r, in(reg32) addr, options(readonly, nostack))
    };
    r
}

/// `ldmatrix.sync.aligned.m8n8.x2.shared.b16`.
///
/// # Safety
/// As [`ldmatrix_x1`], lanes 0-15 passing addresses.
#[inline(always)]
pub unsafe fn ldmatrix_x2(addr: u32) -> [u32; 2] {
    let (a, b): (u32, u32);
    // SAFETY: as above.
    unsafe {
        asm!("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {{{0}, {1}}}, [{2}];", out(reg32) a, out(reg32) b, in(reg32) addr, options(readonly, nostack))
    };
    [a, b]
}

/// `ldmatrix.sync.aligned.m8n8.x4.shared.b16`.
///
/// # Safety
/// As [`ldmatrix_x1`], all 32 lanes passing addresses.
#[inline(always)]
pub unsafe fn ldmatrix_x4(addr: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: as above.
    unsafe {
        asm!("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{0}, {1}, {2}, {3}}}, [{4}];", out(reg32) a, out(reg32) b,
             out(reg32) c, out(reg32) d, in(reg32) addr, options(readonly, nostack))
    };
    [a, b, c, d]
}

/// `ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16`.
///
/// # Safety
/// As [`ldmatrix_x1`].
#[inline(always)]
pub unsafe fn ldmatrix_x1_trans(addr: u32) -> u32 {
    let r: u32;
    // SAFETY: as above.
    unsafe {
        asm!("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {{{0}}}, [{1}];", out(reg32) r, in(reg32) addr, options(readonly, nostack))
    };
    r
}

/// `ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16`.
///
/// # Safety
/// As [`ldmatrix_x2`].
#[inline(always)]
pub unsafe fn ldmatrix_x2_trans(addr: u32) -> [u32; 2] {
    let (a, b): (u32, u32);
    // SAFETY: as above.
    unsafe {
        asm!("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {{{0}, {1}}}, [{2}];", out(reg32) a, out(reg32) b, in(reg32) addr, options(readonly, nostack))
    };
    [a, b]
}

/// `ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16`.
///
/// # Safety
/// As [`ldmatrix_x4`].
#[inline(always)]
pub unsafe fn ldmatrix_x4_trans(addr: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: as above.
    unsafe {
        asm!("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{{0}, {1}, {2}, {3}}}, [{4}];", out(reg32) a,
             out(reg32) b, out(reg32) c, out(reg32) d, in(reg32) addr, options(readonly, nostack))
    };
    [a, b, c, d]
}

// ---------------------------------------------------------------------------------------------------------------
// mma (PTX ISA §9.7.14.5.14 mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32)
//
// D (16x8 f32) = A (16x16 f16, row) x B (16x8 f16, col) + C. With g = lane/4 and t = lane%4:
//   a[0] = A[g][2t..2t+2]   a[1] = A[g+8][2t..2t+2]   a[2] = A[g][2t+8..2t+10]   a[3] = A[g+8][2t+8..2t+10]
//   b[0] = B[2t..2t+2][g]   b[1] = B[2t+8..2t+10][g]
//   d[0], d[1] = D[g][2t], D[g][2t+1]                 d[2], d[3] = D[g+8][2t], D[g+8][2t+1]
// (low half of each register = lower index). layout::mma_{a,b,c}_element give the same maps.
// ---------------------------------------------------------------------------------------------------------------

/// `mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`: `d += a * b` on one warp's fragments.
/// Must be executed by all 32 lanes of the warp (warp-uniform control flow).
#[inline(always)]
pub fn mma_m16n8k16_f32_f16(d: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
    // SAFETY: register-only instruction; convergence is the caller's contract (documented above).
    unsafe {
        asm!(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{{0}, {1}, {2}, {3}}}, {{{4}, {5}, {6}, {7}}}, {{{8}, {9}}}, {{{0}, {1}, {2}, {3}}};",
            inout(reg32) d[0], inout(reg32) d[1], inout(reg32) d[2], inout(reg32) d[3],
            in(reg32) a[0], in(reg32) a[1], in(reg32) a[2], in(reg32) a[3],
            in(reg32) b[0], in(reg32) b[1],
            options(pure, nomem, nostack)
        )
    };
}

// ---------------------------------------------------------------------------------------------------------------
// Conversions (PTX ISA §9.7.9.21 cvt)
// ---------------------------------------------------------------------------------------------------------------

/// `cvt.rn.f16x2.f32`: packs two f32 into two f16 (round to nearest even); `lo` goes to the low half.
#[inline(always)]
pub fn cvt_f16x2_f32(lo: f32, hi: f32) -> u32 {
    let r: u32;
    // SAFETY: register-only.
    unsafe {
        asm!("cvt.rn.f16x2.f32 {0}, {1}, {2};", out(reg32) r, in(reg32) hi, in(reg32) lo, options(pure, nomem, nostack))
    };
    r
}

/// `cvt.f32.f16`: widens the f16 in the low 16 bits of `h` (exact).
#[inline(always)]
pub fn cvt_f32_f16(h: u16) -> f32 {
    let r: f32;
    // SAFETY: register-only.
    unsafe { asm!("cvt.f32.f16 {0}, {1};", out(reg32) r, in(reg16) h, options(pure, nomem, nostack)) };
    r
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
