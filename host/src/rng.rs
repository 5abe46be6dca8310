//! A small deterministic generator (SplitMix64) for test data and generated matrices: the same seed gives the
//! same matrix on every machine, with no dependency on an external crate's stream stability.

/// SplitMix64 (Steele, Lea, Flood 2014). Not cryptographic; statistically fine for test data.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose stream is fully determined by `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5851_f42d_4c95_7f2d)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [lo, hi).
    pub fn range_f64(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.f64()
    }

    /// Uniform integer in [0, n); `n` must be > 0 (returns 0 for n == 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        // Lemire's multiply-shift; the bias is below 2^-64 * n, irrelevant for test data.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform integer in [lo, hi] (inclusive), as i64, for any `lo <= hi` (the full i64 range included: the
    /// span is computed without overflow); `lo` when `hi <= lo`. The same stream as `lo + below(hi - lo + 1)`.
    pub fn int_in(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        let span = hi.abs_diff(lo); // hi - lo, exact in u64
        let offset = if span == u64::MAX { self.next_u64() } else { self.below(span + 1) };
        // lo + offset <= hi fits i64; the wrapping add of the two's-complement bits is that sum.
        lo.wrapping_add(offset as i64)
    }

    /// True with probability `p`.
    pub fn bernoulli(&mut self, p: f64) -> bool {
        self.f64() < p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_in_covers_any_range_without_overflow() {
        let mut r = Rng::new(7);
        for (lo, hi) in [(i64::MIN, i64::MAX), (i64::MIN, 0), (-1, i64::MAX), (i64::MAX - 1, i64::MAX), (-3, 3)] {
            for _ in 0..1000 {
                let v = r.int_in(lo, hi);
                assert!((lo..=hi).contains(&v), "{v} outside [{lo}, {hi}]");
            }
        }
        assert_eq!(r.int_in(5, 5), 5);
        assert_eq!(r.int_in(5, -5), 5);
        assert_eq!(r.int_in(i64::MAX, i64::MAX), i64::MAX);
        // Both ends reached on a small range, and the stream is the one of lo + below(hi - lo + 1).
        let (mut a, mut b) = (Rng::new(1), Rng::new(1));
        let got: Vec<i64> = (0..200).map(|_| a.int_in(-2, 2)).collect();
        assert!(got.contains(&-2) && got.contains(&2));
        assert!(got.iter().all(|&v| v == -2 + b.below(5) as i64));
        // Negative values in the full range.
        assert!((0..64).map(|_| r.int_in(i64::MIN, i64::MAX)).any(|v| v < 0));
    }
}
