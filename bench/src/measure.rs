//! What a timed case moved and took, shared by the decode grid, the plan comparison and the research tools: launch
//! times ([`Times`]), the bytes a product must move ([`BytesMoved`]) and how many input sets keep it out of L2
//! ([`rotation_depth`]).

use serde::Serialize;

use crate::num::round_sig;
use crate::report::Timing;

/// The most input sets one contender rotates through. Every default case reaches 2x L2 well below it; the sets
/// of a `--case` whose launch moves less than 2x L2 / `MAX_SETS` span less (`rotated_bytes` in the JSON).
pub const MAX_SETS: usize = 1024;

/// Input sets to rotate through for a contender whose one set moves `set_bytes`: enough that together they span
/// at least 2x L2, at most [`MAX_SETS`]; one when a set alone is that large. ([`rotation_sets`] stops at
/// 128 sets, which would leave the small shapes' sets of a few hundred KB in L2.)
pub fn rotation_depth(set_bytes: u64, l2_bytes: u64) -> usize {
    sets_spanning(set_bytes as u128, l2_bytes, MAX_SETS)
}

/// Input sets to rotate through for a contender whose one set (every operand a launch reads) takes
/// `set_bytes`: enough that together they span at least 2x L2 (so no launch finds its operands in L2 from
/// its previous use), at most 128; one when a set alone is that large.
pub fn rotation_sets(set_bytes: usize, l2_bytes: u64) -> usize {
    sets_spanning(set_bytes as u128, l2_bytes, 128)
}

/// Sets of `set_bytes` (at least one byte) that together span 2x L2, between 1 and `most`.
fn sets_spanning(set_bytes: u128, l2_bytes: u64, most: usize) -> usize {
    let target = 2 * u128::from(l2_bytes);
    target.div_ceil(set_bytes.max(1)).clamp(1, most as u128) as usize
}

/// The bytes one product must move: A read once, B read once, C written once (see the module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BytesMoved {
    /// A's values: `nnzb * bs^2 * 2` (f16).
    pub a_values: u64,
    /// A's u32 indices: `row_ptr` (`M / bs + 1` entries) and `col_idx` (`nnzb` entries), 4 bytes each.
    pub a_indices: u64,
    /// B: `K * N * 2` (f16).
    pub b: u64,
    /// C: `M * N * 4` (f32, written; beta = 0, so not read).
    pub c: u64,
    /// The sum.
    pub total: u64,
}

impl BytesMoved {
    /// The bytes of a product of an `m x k` BSR A with `nnzb` blocks of `bs x bs` by a `k x n` B.
    pub fn new(m: usize, n: usize, k: usize, bs: usize, nnzb: usize) -> BytesMoved {
        let [m, n, k, bs, nnzb] = [m, n, k, bs, nnzb].map(|v| v as u64);
        let a_values = nnzb * bs * bs * 2;
        let a_indices = (m / bs.max(1) + 1) * 4 + nnzb * 4;
        let (b, c) = (k * n * 2, m * n * 4);
        BytesMoved { a_values, a_indices, b, c, total: a_values + a_indices + b + c }
    }
}

/// A timed transfer of bytes (a copy, the read floor): its times, its bandwidth, why it was not measured. In its
/// owner's JSON object, after the owner's own keys.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Measured {
    /// Its times.
    pub time: Option<Times>,
    /// The bytes moved per launch over the median time, in GB/s (1e9 bytes).
    pub gbps: Option<f64>,
    /// Why it was not measured.
    pub error: Option<String>,
}

impl Measured {
    /// The median, when measured (and positive).
    pub fn median_us(&self) -> Option<f64> {
        self.time.as_ref().map(|t| t.median_us).filter(|&t| t > 0.0)
    }

    /// Sets the bandwidth of `bytes` moved per launch (none without a median).
    pub(crate) fn set_gbps(&mut self, bytes: u64) {
        self.gbps = self.median_us().map(|us| round_sig(bytes as f64 / 1e3 / us, 6));
    }
}

/// Launch times in microseconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Times {
    /// Median.
    pub median_us: f64,
    /// Fastest launch.
    pub min_us: f64,
    /// Slowest launch.
    pub max_us: f64,
    /// Timed launches.
    pub samples: usize,
}

impl Times {
    /// The statistics of event times in milliseconds (`None` when there are none).
    pub(crate) fn from_ms(samples: &[f32]) -> Option<Times> {
        let t = Timing::from_samples(samples)?;
        let us = |ms: f64| round_sig(ms * 1e3, 6);
        Some(Times { median_us: us(t.median_ms), min_us: us(t.min_ms), max_us: us(t.max_ms), samples: t.samples })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_covers_twice_l2() {
        let l2 = 50u64 << 20;
        for (most, sets) in
            [(128, rotation_sets as fn(usize, u64) -> usize), (MAX_SETS, |b, l2| rotation_depth(b as u64, l2))]
        {
            assert_eq!(sets(512 << 20, l2), 1);
            assert_eq!(sets(100 << 20, l2), 1);
            assert_eq!(sets(30 << 20, l2), 4);
            assert_eq!(sets(1, l2), most);
            assert_eq!(sets(0, l2), most);
            for bytes in [1usize << 20, 7 << 20, 33 << 20, 99 << 20] {
                let r = sets(bytes, l2);
                assert!(r as u64 * bytes as u64 >= 2 * l2, "{r} sets of {bytes} bytes");
            }
        }
        // The smallest decode set (1536 x 384 bs 32 25%, N 1) needs more than the main benchmark's 128 sets.
        let small = BytesMoved::new(1536, 1, 384, 32, 144).total;
        let depth = rotation_depth(small, l2);
        assert!(depth > 128 && depth < MAX_SETS && depth as u64 * small >= 2 * l2, "{depth} sets of {small}");
    }
}
