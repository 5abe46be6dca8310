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

/// Defines one wrapper per `ldmatrix` shape: `name: "<x1|x2|x4>[.trans]", {registers} -> result`, the result the
/// destination registers in order (a lone `u32` for .x1).
macro_rules! ldmatrix {
    ($($(#[$doc:meta])* $name:ident: $shape:literal, $regs:literal, [$($r:ident),+] -> $ret:ty = $out:expr;)*) => {$(
        $(#[$doc])*
        #[inline(always)]
        pub unsafe fn $name(addr: u32) -> $ret {
            $(let $r: u32;)+
            // SAFETY: the caller guarantees the addresses and warp convergence.
            unsafe {
                asm!(
                    concat!("ldmatrix.sync.aligned.m8n8.", $shape, ".shared.b16 {{", $regs, "}}, [{addr}];"),
                    $($r = out(reg32) $r,)+
                    addr = in(reg32) addr,
                    options(readonly, nostack)
                )
            };
            $out
        }
    )*};
}

ldmatrix! {
    /// `ldmatrix.sync.aligned.m8n8.x1.shared.b16`.
    ///
    /// # Safety
    /// Called by all 32 lanes; lanes 0-7 pass 16-byte aligned shared addresses of 16 readable bytes.
    ldmatrix_x1: "x1", "{a}", [a] -> u32 = a;
    /// `ldmatrix.sync.aligned.m8n8.x2.shared.b16`.
    ///
    /// # Safety
    /// As [`ldmatrix_x1`], lanes 0-15 passing addresses.
    ldmatrix_x2: "x2", "{a}, {b}", [a, b] -> [u32; 2] = [a, b];
    /// `ldmatrix.sync.aligned.m8n8.x4.shared.b16`.
    ///
    /// # Safety
    /// As [`ldmatrix_x1`], all 32 lanes passing addresses.
    ldmatrix_x4: "x4", "{a}, {b}, {c}, {d}", [a, b, c, d] -> [u32; 4] = [a, b, c, d];
    /// `ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16`.
    ///
    /// # Safety
    /// As [`ldmatrix_x1`].
    ldmatrix_x1_trans: "x1.trans", "{a}", [a] -> u32 = a;
    /// `ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16`.
    ///
    /// # Safety
    /// As [`ldmatrix_x2`].
    ldmatrix_x2_trans: "x2.trans", "{a}, {b}", [a, b] -> [u32; 2] = [a, b];
    /// `ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16`.
    ///
    /// # Safety
    /// As [`ldmatrix_x4`].
    ldmatrix_x4_trans: "x4.trans", "{a}, {b}, {c}, {d}", [a, b, c, d] -> [u32; 4] = [a, b, c, d];
}
