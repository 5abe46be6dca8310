//! Element types: what a matrix may hold, and the conversions the reference and the checks need.

use half::{bf16, f16};

/// An element type of a host matrix: f16, bf16, f32 or f64. Conversions go through f64 so the CPU oracle
/// sees exactly the values the GPU sees.
pub trait Scalar: Copy + Send + Sync + PartialEq + bytemuck::Pod + std::fmt::Debug + 'static {
    /// Short name used in messages and kernel names ("f16", "f32", ...).
    const NAME: &'static str;
    /// Converts exactly (every supported type widens to f64 without rounding).
    fn to_f64(self) -> f64;
    /// Converts with round-to-nearest-even.
    fn from_f64(v: f64) -> Self;
    /// Converts with round-to-nearest-even.
    fn from_f32(v: f32) -> Self;
    /// Converts exactly for f16 and bf16; rounds for f64.
    fn to_f32(self) -> f32;
    /// [`Scalar::from_f64`], or `None` when a finite `v` does not fit: it would round to an infinity (beyond
    /// 65504 for f16, about 3.4e38 for bf16 and f32). Non-finite values convert to themselves.
    fn try_from_f64(v: f64) -> Option<Self> {
        let r = Self::from_f64(v);
        if v.is_finite() && !r.to_f64().is_finite() { None } else { Some(r) }
    }
}

/// `v` rounded to f32 with round-to-odd: truncated toward zero, with the last mantissa bit set when inexact. An
/// f32 has more than twice the significand bits of f16 and bf16 plus two, so rounding this to either with
/// round-to-nearest-even gives exactly the correctly rounded f64 -> f16/bf16 result (no double rounding). `half`'s
/// own f64 conversions drop the low mantissa bits before rounding and round some values just above a tie the
/// wrong way (found by the fuzz suite: bf16 of 0x3e3e8006 as f64 gave 0x3e3e instead of 0x3e3f).
fn f64_to_f32_round_to_odd(v: f64) -> f32 {
    let t = v as f32; // round to nearest even (saturates to an infinity past f32::MAX)
    if !v.is_finite() || f64::from(t) == v {
        return t;
    }
    let mut bits = t.to_bits();
    if t.is_infinite() || f64::from(t).abs() > v.abs() {
        bits -= 1; // rounded away from zero: one step back toward zero, same sign
    }
    f32::from_bits(bits | 1)
}

/// `Scalar` for the 16-bit types: exact in f32 and f64; from f64 through f32 rounded to odd (one rounding in all).
macro_rules! half_scalar {
    ($($t:ident),*) => {$(
        impl Scalar for $t {
            const NAME: &'static str = stringify!($t);
            fn to_f64(self) -> f64 {
                self.to_f64()
            }
            fn from_f64(v: f64) -> Self {
                $t::from_f32(f64_to_f32_round_to_odd(v))
            }
            fn from_f32(v: f32) -> Self {
                $t::from_f32(v)
            }
            fn to_f32(self) -> f32 {
                self.to_f32()
            }
        }
    )*};
}
half_scalar!(f16, bf16);

impl Scalar for f32 {
    const NAME: &'static str = "f32";
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn from_f32(v: f32) -> Self {
        v
    }
    fn to_f32(self) -> f32 {
        self
    }
}

impl Scalar for f64 {
    const NAME: &'static str = "f64";
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
    fn from_f32(v: f32) -> Self {
        f64::from(v)
    }
    fn to_f32(self) -> f32 {
        self as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_on_conversion_is_detected() {
        assert_eq!(f16::try_from_f64(65504.0), Some(f16::MAX));
        assert_eq!(f16::try_from_f64(65520.0), None); // rounds to inf
        assert_eq!(f16::try_from_f64(-1e6), None);
        assert!(f16::try_from_f64(f64::NAN).is_some_and(|v| v.is_nan()));
        assert_eq!(f32::try_from_f64(1e39), None);
        assert_eq!(bf16::try_from_f64(1e39), None);
        assert_eq!(f64::try_from_f64(1e300), Some(1e300));
        assert_eq!(f16::try_from_f64(1e-9), Some(f16::ZERO)); // underflow rounds to zero: not an error
    }

    /// Correct rounding of f64 to bf16 and f16 (the fuzz suite's case, and random values near ties).
    #[test]
    fn f64_rounds_to_nearest_even() {
        assert_eq!(<bf16 as Scalar>::from_f64(f64::from(f32::from_bits(0x3e3e_8006))).to_bits(), 0x3e3f);
        // Reference: the nearer of the two neighbours in the target type (ties to even), distances exact in f64.
        fn check<T: Scalar + PartialOrd>(
            v: f64,
            step_up: impl Fn(T) -> T,
            step_down: impl Fn(T) -> T,
            even: impl Fn(T) -> bool,
        ) {
            let r = T::from_f64(v);
            let rv = r.to_f64();
            if !rv.is_finite() {
                return;
            }
            let other = if rv < v { step_up(r) } else { step_down(r) };
            let (d, d_other) = ((rv - v).abs(), (other.to_f64() - v).abs());
            assert!(
                d < d_other || (d == d_other && even(r)) || !other.to_f64().is_finite(),
                "{v:e} -> {rv:e}, {:e} is nearer",
                other.to_f64()
            );
        }
        let mut rng = crate::rng::Rng::new(42);
        for _ in 0..200_000 {
            // Values near bf16/f16 ties: a random pattern of the target type plus a tiny perturbation.
            let base = rng.range_f64(-100.0, 100.0);
            let v = base + base * (rng.range_f64(-1.0, 1.0) * 1e-9);
            check::<bf16>(
                v,
                |x| bf16::from_bits(if x.to_f64() >= 0.0 { x.to_bits() + 1 } else { x.to_bits() - 1 }),
                |x| bf16::from_bits(if x.to_f64() > 0.0 { x.to_bits() - 1 } else { x.to_bits() + 1 }),
                |x| x.to_bits() % 2 == 0,
            );
            check::<f16>(
                v,
                |x| f16::from_bits(if x.to_f64() >= 0.0 { x.to_bits() + 1 } else { x.to_bits() - 1 }),
                |x| f16::from_bits(if x.to_f64() > 0.0 { x.to_bits() - 1 } else { x.to_bits() + 1 }),
                |x| x.to_bits() % 2 == 0,
            );
            // Exact midpoints plus or minus one f64 ulp.
            let h = <bf16 as Scalar>::from_f64(base);
            let mid = (h.to_f64() + bf16::from_bits(h.to_bits() + 1).to_f64()) / 2.0;
            for w in [mid, f64::from_bits(mid.to_bits() + 1), f64::from_bits(mid.to_bits() - 1)] {
                check::<bf16>(
                    w,
                    |x| bf16::from_bits(if x.to_f64() >= 0.0 { x.to_bits() + 1 } else { x.to_bits() - 1 }),
                    |x| bf16::from_bits(if x.to_f64() > 0.0 { x.to_bits() - 1 } else { x.to_bits() + 1 }),
                    |x| x.to_bits() % 2 == 0,
                );
            }
        }
    }
}
