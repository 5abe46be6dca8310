//! Warp-level tensor-core MMA (PTX ISA §9.7.14.5.14 `mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}...f32`).
//!
//! D (16x8 f32) = A (16x16 f16, row) x B (16x8 f16, col) + C. With g = lane/4 and t = lane%4:
//! ```text
//! a[0] = A[g][2t..2t+2]   a[1] = A[g+8][2t..2t+2]   a[2] = A[g][2t+8..2t+10]   a[3] = A[g+8][2t+8..2t+10]
//! b[0] = B[2t..2t+2][g]   b[1] = B[2t+8..2t+10][g]
//! d[0], d[1] = D[g][2t], D[g][2t+1]                 d[2], d[3] = D[g+8][2t], D[g+8][2t+1]
//! ```
//! (low half of each register = lower index). `layout::mma_{a,b,c}_element` give the same maps; they are the same
//! for f16 and bf16 operands.

use core::arch::asm;

/// Defines one wrapper per input type: `name: "<f16|bf16>"`, `mma.sync.aligned.m16n8k16.row.col.f32.<t>.<t>.f32`.
macro_rules! mma_m16n8k16 {
    ($($(#[$doc:meta])* $name:ident: $t:literal;)*) => {$(
        $(#[$doc])*
        #[inline(always)]
        pub fn $name(d: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
            // SAFETY: register-only instruction; convergence is the caller's contract (documented above).
            unsafe {
                asm!(
                    concat!(
                        "mma.sync.aligned.m16n8k16.row.col.f32.", $t, ".", $t, ".f32 {{{0}, {1}, {2}, {3}}}, ",
                        "{{{4}, {5}, {6}, {7}}}, {{{8}, {9}}}, {{{0}, {1}, {2}, {3}}};"
                    ),
                    inout(reg32) d[0], inout(reg32) d[1], inout(reg32) d[2], inout(reg32) d[3],
                    in(reg32) a[0], in(reg32) a[1], in(reg32) a[2], in(reg32) a[3],
                    in(reg32) b[0], in(reg32) b[1],
                    options(pure, nomem, nostack)
                )
            };
        }
    )*};
}

mma_m16n8k16! {
    /// `mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`: `d += a * b` on one warp's fragments.
    /// Must be executed by all 32 lanes of the warp (warp-uniform control flow).
    mma_m16n8k16_f32_f16: "f16";
    /// `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`: `d += a * b` on one warp's bf16 fragments (same
    /// fragment maps as the f16 form). Must be executed by all 32 lanes of the warp (warp-uniform control flow).
    mma_m16n8k16_f32_bf16: "bf16";
}
