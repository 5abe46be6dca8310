//! The library's deterministic generator (`sparsek::rng::Rng`), on arbitrary seeds and bounds.
//!
//! Properties (debug assertions on: any overflow panics):
//! - `int_in(lo, hi)` never overflows, for any `lo` and `hi` (the full i64 range included); it lies in
//!   `[lo, hi]` when `lo <= hi` and is `lo` otherwise, consuming no value then;
//! - its stream is the documented one: `lo + below(hi - lo + 1)` (the span computed here in i128), `lo` plus the
//!   raw 64 bits for the full range (what `below(2^64)` would be); a clone of the generator drawing the same way stays in step;
//! - `below(n)` is `< n` (0 for n == 0), `f64()` in `[0, 1)`, `range_f64(lo, hi)` finite for finite bounds
//!   (in `[lo, hi]` up to one rounding).
#![no_main]

use arbitrary::Arbitrary;
use sparsek::rng::Rng;

#[derive(Arbitrary, Debug)]
struct Input {
    seed: u64,
    draws: Vec<(i64, i64, u64)>,
}

sparsek_fuzz::target!(|t: Input| {
    let mut rng = Rng::new(t.seed);
    let mut twin = rng.clone();
    for &(lo, hi, n) in t.draws.iter().take(64) {
        let v = rng.int_in(lo, hi);
        if hi <= lo {
            assert_eq!(v, lo, "int_in({lo}, {hi}) with hi <= lo");
        } else {
            assert!((lo..=hi).contains(&v), "int_in({lo}, {hi}) = {v}");
            let span = i128::from(hi) - i128::from(lo) + 1;
            // below(2^64) would be the raw 64 bits.
            let want = if span == 1i128 << 64 {
                (i128::from(lo) + i128::from(twin.next_u64())) as i64
            } else {
                (i128::from(lo) + i128::from(twin.below(span as u64))) as i64
            };
            assert_eq!(v, want, "int_in({lo}, {hi}) is not lo + below(hi - lo + 1)");
        }
        let b = rng.below(n);
        assert_eq!(b, twin.below(n));
        assert!(if n == 0 { b == 0 } else { b < n }, "below({n}) = {b}");
        let x = rng.f64();
        assert_eq!(x.to_bits(), twin.f64().to_bits());
        assert!((0.0..1.0).contains(&x), "f64() = {x}");
        let (a, z) = (lo as f64, hi as f64);
        let r = rng.range_f64(a, z);
        assert_eq!(r.to_bits(), twin.range_f64(a, z).to_bits());
        assert!(r.is_finite(), "range_f64({a}, {z}) = {r}");
    }
});
