//! Thread, block and lane indices (PTX ISA §10 "Special Registers": `%tid`, `%ctaid`, `%nctaid`, `%ntid`,
//! `%laneid`).

use core::arch::asm;

/// Defines one wrapper per special register that `core::arch::nvptx` reads: `name: intrinsic`.
macro_rules! special_register {
    ($($(#[$doc:meta])* $name:ident: $intrinsic:ident;)*) => {$(
        $(#[$doc])*
        #[inline(always)]
        pub fn $name() -> u32 {
            // SAFETY: reading a special register has no preconditions.
            unsafe { core::arch::nvptx::$intrinsic() }
        }
    )*};
}

special_register! {
    /// `%tid.x`: this thread's index in its CTA.
    thread_idx_x: _thread_idx_x;
    /// `%ctaid.x`: this CTA's index in the grid.
    block_idx_x: _block_idx_x;
    /// `%ctaid.y`.
    block_idx_y: _block_idx_y;
    /// `%nctaid.x`: CTAs in the grid along x.
    grid_dim_x: _grid_dim_x;
    /// `%ntid.x`: threads per CTA along x.
    block_dim_x: _block_dim_x;
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

/// `shfl.sync.idx.b32 d, v, src, 0x1f, 0xffffffff` (PTX ISA §9.7.9.6): lane `src`'s `v`, for every lane of the
/// warp. Every lane of the warp must execute a `shfl.sync` with the full mask (warp-uniform control flow; the
/// instruction is not `.aligned`, so a copy LLVM might make in another branch arm still meets its peers).
#[inline(always)]
pub fn shfl_idx(v: u32, src: u32) -> u32 {
    let d: u32;
    // SAFETY: a register-only warp exchange; convergence is the caller's contract (documented above).
    unsafe {
        asm!("shfl.sync.idx.b32 {0}, {1}, {2}, 0x1f, 0xffffffff;", out(reg32) d, in(reg32) v, in(reg32) src,
             options(nomem, nostack))
    };
    d
}

/// `vote.sync.ballot.b32 d, p, 0xffffffff` (PTX ISA §9.7.12.2): bit `i` set when lane `i`'s `pred` holds, for
/// every lane of the warp. Every lane must execute it with the full mask (warp-uniform control flow; not
/// `.aligned`, like [`shfl_idx`]).
#[inline(always)]
pub fn ballot(pred: bool) -> u32 {
    let d: u32;
    // SAFETY: a register-only warp vote; convergence is the caller's contract (documented above).
    unsafe {
        asm!("{{ .reg .pred p; setp.ne.u32 p, {1}, 0; vote.sync.ballot.b32 {0}, p, 0xffffffff; }}", out(reg32) d,
             in(reg32) pred as u32, options(nomem, nostack))
    };
    d
}
