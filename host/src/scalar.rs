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

impl Scalar for f16 {
    const NAME: &'static str = "f16";
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
    fn to_f32(self) -> f32 {
        self.to_f32()
    }
}

impl Scalar for bf16 {
    const NAME: &'static str = "bf16";
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        bf16::from_f64(v)
    }
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
    fn to_f32(self) -> f32 {
        self.to_f32()
    }
}

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
}
