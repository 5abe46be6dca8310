//! Warp-collective 8x8 b16 matrix loads from shared memory (PTX ISA §9.7.14.5.15
//! `ldmatrix.sync.aligned.m8n8{.x1,.x2,.x4}{.trans}.shared.b16`).
//!
//! Each 8x8 b16 matrix is addressed by 8 lanes, one 16-byte row each: matrix j's rows come from lanes 8j..8j+7
//! (.x1 uses lanes 0-7, .x2 lanes 0-15; the other lanes' addresses are ignored but must be valid).
//! Result register j of lane l holds, of matrix j:
//! - without .trans: elements (row l/4, cols 2*(l%4), 2*(l%4)+1)   (low half first)
//! - with .trans:    elements (rows 2*(l%4), 2*(l%4)+1, col l/4)
//!
//! All 32 lanes of the warp must execute it, in warp-uniform control flow (see the module docs of [`super`]).

use core::arch::asm;

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
