//! Conversions between f32 and f16 (PTX ISA §9.7.9.21 `cvt`).

use core::arch::asm;

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
