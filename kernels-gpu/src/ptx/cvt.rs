//! Conversions between f32 and f16 / bf16 (PTX ISA §9.7.9.21 `cvt`), and `ex2.approx` (§9.7.3.x) for the
//! epilogue's activations.

use core::arch::asm;

/// Defines the packing conversions: `name: "<f16x2|bf16x2>"`, `cvt.rn.<t>.f32` packing two f32 (round to
/// nearest even), `lo` to the low half.
macro_rules! cvt_x2 {
    ($($(#[$doc:meta])* $name:ident: $t:literal;)*) => {$(
        $(#[$doc])*
        #[inline(always)]
        pub fn $name(lo: f32, hi: f32) -> u32 {
            let r: u32;
            // SAFETY: register-only.
            unsafe {
                asm!(concat!("cvt.rn.", $t, ".f32 {0}, {1}, {2};"), out(reg32) r, in(reg32) hi, in(reg32) lo,
                     options(pure, nomem, nostack))
            };
            r
        }
    )*};
}

cvt_x2! {
    /// `cvt.rn.f16x2.f32`: packs two f32 into two f16 (round to nearest even); `lo` goes to the low half.
    cvt_f16x2_f32: "f16x2";
    /// `cvt.rn.bf16x2.f32`: packs two f32 into two bf16 (round to nearest even); `lo` goes to the low half.
    cvt_bf16x2_f32: "bf16x2";
}

/// `cvt.f32.f16`: widens the f16 in the low 16 bits of `h` (exact).
#[inline(always)]
pub fn cvt_f32_f16(h: u16) -> f32 {
    let r: f32;
    // SAFETY: register-only.
    unsafe { asm!("cvt.f32.f16 {0}, {1};", out(reg32) r, in(reg16) h, options(pure, nomem, nostack)) };
    r
}

/// bf16 bits to f32: bf16 is the top half of an f32, so the widening is a shift (exact, NaN payloads kept).
#[inline(always)]
pub fn bf16_bits_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// `ex2.approx.ftz.f32`: `2^x` (maximum relative error 2^-22 over the whole range; +inf for large x, +0 for very
/// negative x, subnormal results flushed to zero).
#[inline(always)]
pub fn ex2_approx(x: f32) -> f32 {
    let r: f32;
    // SAFETY: register-only.
    unsafe { asm!("ex2.approx.ftz.f32 {0}, {1};", out(reg32) r, in(reg32) x, options(pure, nomem, nostack)) };
    r
}

/// `div.full.f32`: `a / b` to within 2 ulp over the full range (no slow-path subroutine, unlike `div.rn.f32`).
#[inline(always)]
pub fn div_full(a: f32, b: f32) -> f32 {
    let r: f32;
    // SAFETY: register-only.
    unsafe {
        asm!("div.full.f32 {0}, {1}, {2};", out(reg32) r, in(reg32) a, in(reg32) b, options(pure, nomem, nostack))
    };
    r
}
