//! Warp-collective 8x8 b16 matrix stores to shared memory (PTX ISA §9.7.14.5.16
//! `stmatrix.sync.aligned.m8n8.x4.trans.shared.b16`, sm_90).
//!
//! Register j of lane l holds two b16 elements of matrix j, in the `mma` C fragment's layout: (row l/4, cols
//! 2*(l%4), 2*(l%4)+1), the low half the first. With `.trans` the matrix is stored transposed: row r of what is
//! stored (matrix j's elements (0..8, r)) goes to the 16 bytes at the address that lane 8j + r passes.
//!
//! All 32 lanes of the warp must execute it, in warp-uniform control flow (see the module docs of [`crate::ptx`]).

use core::arch::asm;

/// `stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [addr], {r0, r1, r2, r3}`: stores the four 8x8 matrices whose
/// fragments are `regs`, each transposed, lane `8 j + r` giving the address of row `r` of stored matrix `j`.
///
/// # Safety
/// Called by all 32 lanes in warp-uniform control flow; every lane passes a 16-byte aligned shared address of 16
/// writable bytes of this CTA, which no other thread reads or writes until a barrier orders them.
#[inline(always)]
pub unsafe fn stmatrix_x4_trans(addr: u32, regs: [u32; 4]) {
    // SAFETY: the caller guarantees the addresses and warp convergence.
    unsafe {
        asm!(
            "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [{addr}], {{{a}, {b}, {c}, {d}}};",
            addr = in(reg32) addr,
            a = in(reg32) regs[0],
            b = in(reg32) regs[1],
            c = in(reg32) regs[2],
            d = in(reg32) regs[3],
            options(nostack)
        )
    };
}
