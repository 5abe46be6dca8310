//! Generated BSR matrices for tests, the CLI and the benchmarks: a sparsity [`Pattern`], a density (the
//! fraction of stored blocks) and a seed determine the matrix, on every machine.
//!
//! ```
//! use sparsek::format::synth::{Pattern, generate}; // also re-exported as sparsek::format::{Pattern, generate}
//! let a = generate::<f32>(Pattern::Skewed, 1024, 512, 32, 0.25, 7).unwrap();
//! assert_eq!(a.nnzb(), 128); // round(0.25 * 32 * 16)
//! ```

use std::fmt;
use std::str::FromStr;

use rayon::prelude::*;

use super::{BlockShape, Bsr, BsrError};
use crate::alloc;
use crate::error::{Error, Result};
use crate::rng::Rng;
use crate::scalar::Scalar;

/// How the stored blocks are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pattern {
    /// `round(density * block_rows * block_cols)` blocks spread at random: each block row gets a random
    /// share (about `density * block_cols`), columns chosen without replacement.
    Uniform,
    /// The same number of blocks as `Uniform`, but block-row lengths follow a power law (row `i` of the
    /// sorted order gets a share proportional to `1 / (i + 1)`, capped at `block_cols`, the excess going to
    /// the other rows), rows shuffled. Models pruned weights whose rows differ a lot in length.
    Skewed,
    /// A band around the (scaled, for non-square shapes) diagonal; each block row holds `nnzb / block_rows`
    /// or one more consecutive blocks, so nnzb is the same as `Uniform`. Does not depend on the seed.
    Banded,
    /// Every block stored (density is ignored).
    Dense,
    /// No block stored (density is ignored).
    Empty,
}

impl Pattern {
    /// Every pattern, in the order of the enum.
    pub const ALL: [Pattern; 5] = [Pattern::Uniform, Pattern::Skewed, Pattern::Banded, Pattern::Dense, Pattern::Empty];

    /// The lowercase name ("uniform", ...), as `FromStr` reads it.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Uniform => "uniform",
            Pattern::Skewed => "skewed",
            Pattern::Banded => "banded",
            Pattern::Dense => "dense",
            Pattern::Empty => "empty",
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Pattern {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Pattern::ALL.into_iter().find(|p| p.name().eq_ignore_ascii_case(s.trim())).ok_or_else(|| {
            Error::InvalidArgument {
                name: "pattern",
                reason: format!("unknown pattern '{s}' (valid: uniform, skewed, banded, dense, empty)"),
            }
        })
    }
}

/// The SplitMix64 finalizer: a bijective 64-bit mix.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// An independent stream for (`seed`, `salt`, `id`), so rows and blocks can be generated in parallel.
fn stream(seed: u64, salt: u64, id: u64) -> Rng {
    Rng::new(mix(seed ^ mix(salt.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ mix(id.wrapping_add(0x2545_f491_4f6c_dd1d)))))
}

const SALT_ROWS: u64 = 1;
const SALT_COLS: u64 = 2;
const SALT_VALUES: u64 = 3;

/// Validates the arguments and returns (block_rows, block_cols, total blocks).
fn plan(rows: usize, cols: usize, bs: usize, density: f64) -> Result<(usize, usize, usize)> {
    BlockShape::new(rows, cols, bs)?;
    if !(0.0..=1.0).contains(&density) {
        return Err(Error::InvalidArgument { name: "density", reason: format!("must be in [0, 1], got {density}") });
    }
    let (br, bc) = (rows / bs, cols / bs);
    let cells = br as u128 * bc as u128;
    let total = ((density * cells as f64).round() as u128).min(cells);
    let limit = u32::MAX as usize;
    if total > limit as u128 {
        return Err(
            BsrError::TooLarge { what: "nnzb", value: usize::try_from(total).unwrap_or(usize::MAX), limit }.into()
        );
    }
    Ok((br, bc, total as usize))
}

/// Row lengths for `Uniform`: `total` blocks thrown into rows at random, each row capped at `bc`.
fn uniform_lengths(br: usize, bc: usize, total: usize, seed: u64) -> Result<Vec<usize>> {
    let cells = br.saturating_mul(bc);
    // Throw the smaller of blocks and holes, so at most half the capacity is used and a throw into a full row
    // (which is retried) happens with probability <= 1/2.
    let complement = total > cells / 2;
    let m = if complement { cells - total } else { total };
    let mut len = alloc::filled("generator block-row lengths", br, 0usize)?;
    let mut rng = stream(seed, SALT_ROWS, 0);
    let mut placed = 0;
    while placed < m {
        let r = rng.below(br as u64) as usize;
        if len[r] < bc {
            len[r] += 1;
            placed += 1;
        }
    }
    if complement {
        len.iter_mut().for_each(|l| *l = bc - *l);
    }
    Ok(len)
}

/// Row lengths for `Skewed`: shares proportional to `1 / (i + 1)`, water-filled under the cap `bc`, rounded
/// to an exact total, then shuffled.
fn skewed_lengths(br: usize, bc: usize, total: usize, seed: u64) -> Result<Vec<usize>> {
    if br == 0 {
        return Ok(Vec::new());
    }
    let mut w: Vec<f64> = alloc::with_capacity("generator row weights", br)?;
    w.extend((0..br).map(|i| 1.0 / (i + 1) as f64));
    let mut suffix = alloc::filled("generator row weights", br + 1, 0.0f64)?;
    for i in (0..br).rev() {
        suffix[i] = suffix[i + 1] + w[i];
    }
    // The capped rows form a prefix (weights decrease).
    let mut p = 0;
    while p < br {
        let remaining = total.saturating_sub(p * bc) as f64;
        if remaining * w[p] / suffix[p] > bc as f64 {
            p += 1;
        } else {
            break;
        }
    }
    let mut len = alloc::filled("generator block-row lengths", br, 0usize)?;
    len[..p].iter_mut().for_each(|l| *l = bc);
    let remaining = total.saturating_sub(p * bc);
    let mut rem: Vec<(f64, usize)> = alloc::with_capacity("generator row remainders", br - p)?;
    for i in p..br {
        let x = (remaining as f64 * w[i] / suffix[p]).min(bc as f64);
        len[i] = x.floor() as usize;
        rem.push((x - x.floor(), i));
    }
    // Largest remainders first, then fix any floating-point slack so the total is exact.
    rem.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut sum: usize = len.iter().sum();
    let mut order: Vec<usize> = alloc::with_capacity("generator row order", br)?;
    order.extend(rem.iter().map(|&(_, i)| i).chain(0..p));
    while sum < total {
        let before = sum;
        for &i in &order {
            if sum == total {
                break;
            }
            if len[i] < bc {
                len[i] += 1;
                sum += 1;
            }
        }
        if sum == before {
            break; // cannot happen: total <= br * bc
        }
    }
    while sum > total {
        let before = sum;
        for &i in order.iter().rev() {
            if sum == total {
                break;
            }
            if len[i] > 0 {
                len[i] -= 1;
                sum -= 1;
            }
        }
        if sum == before {
            break;
        }
    }
    let mut rng = stream(seed, SALT_ROWS, 1);
    for i in (1..br).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        len.swap(i, j);
    }
    Ok(len)
}

/// Row lengths for `Banded`: `total / br` per row, one more for `total % br` rows spread evenly.
fn banded_lengths(br: usize, total: usize) -> Result<Vec<usize>> {
    if br == 0 {
        return Ok(Vec::new());
    }
    let (base, extra) = (total / br, (total % br) as u128);
    let b = br as u128;
    let mut len = alloc::with_capacity("generator block-row lengths", br)?;
    len.extend((0..br as u128).map(|i| base + ((i + 1) * extra / b - i * extra / b) as usize));
    Ok(len)
}

/// `k` distinct values of `0..n`, sorted, into `out` (`k <= n`). `seen` is scratch.
fn choose_sorted(rng: &mut Rng, n: usize, k: usize, out: &mut [u32], seen: &mut Vec<bool>) {
    if k == 0 {
        return;
    }
    if k == n {
        out.iter_mut().enumerate().for_each(|(i, o)| *o = i as u32);
        return;
    }
    if 2 * k > n {
        // Choose the n - k holes, then list the rest.
        let mut holes = vec![0u32; n - k];
        choose_sorted(rng, n, n - k, &mut holes, seen);
        let mut h = holes.iter().peekable();
        let mut o = 0;
        for c in 0..n as u32 {
            if h.peek() == Some(&&c) {
                h.next();
            } else {
                out[o] = c;
                o += 1;
            }
        }
        return;
    }
    if n <= 32 * k {
        // Dense enough for a bitmap: rejection (k <= n/2, so <= 2 draws per value on average), then a scan.
        seen.clear();
        seen.resize(n, false);
        let mut got = 0;
        while got < k {
            let c = rng.below(n as u64) as usize;
            if !seen[c] {
                seen[c] = true;
                got += 1;
            }
        }
        let chosen = seen.iter().enumerate().filter(|(_, s)| **s).map(|(c, _)| c as u32);
        out.iter_mut().zip(chosen).for_each(|(o, c)| *o = c);
    } else {
        // Very sparse row: draw, sort, deduplicate, draw again what collisions removed.
        let mut v: Vec<u32> = Vec::with_capacity(k);
        while v.len() < k {
            while v.len() < k {
                v.push(rng.below(n as u64) as u32);
            }
            v.sort_unstable();
            v.dedup();
        }
        out.copy_from_slice(&v);
    }
}

/// The structure `(row_ptr, col_idx)` of a `rows x cols` matrix with blocks of `bs` in `pattern` at
/// `density` (fraction of stored blocks, in [0, 1]); see [`Pattern`]. Deterministic for a given seed.
/// Errors: [`Error::InvalidBsr`] for a bad shape or block size, [`Error::InvalidArgument`] for a density that
/// is NaN or outside [0, 1].
pub fn structure(
    pattern: Pattern,
    rows: usize,
    cols: usize,
    bs: usize,
    density: f64,
    seed: u64,
) -> Result<(Vec<u32>, Vec<u32>)> {
    let (br, bc, total) = plan(rows, cols, bs, density)?;
    let len = match pattern {
        Pattern::Uniform => uniform_lengths(br, bc, total, seed)?,
        Pattern::Skewed => skewed_lengths(br, bc, total, seed)?,
        Pattern::Banded => banded_lengths(br, total)?,
        Pattern::Dense => {
            // plan() checked total <= u32::MAX, and total == br * bc at density 1; check it at any density.
            let limit = u32::MAX as usize;
            let all = br.checked_mul(bc).filter(|&n| n <= limit);
            if all.is_none() {
                return Err(BsrError::TooLarge { what: "nnzb", value: br.saturating_mul(bc), limit }.into());
            }
            alloc::filled("generator block-row lengths", br, bc)?
        }
        Pattern::Empty => alloc::filled("generator block-row lengths", br, 0)?,
    };
    let mut row_ptr = alloc::with_capacity("BSR row_ptr", br + 1)?;
    row_ptr.push(0u32);
    let mut acc = 0usize;
    for &l in &len {
        acc += l;
        row_ptr.push(acc as u32);
    }
    let mut col_idx = alloc::filled("BSR col_idx", acc, 0u32)?;
    // One mutable slice per block row, filled in parallel.
    let mut slices = alloc::with_capacity("generator row slices", br)?;
    let mut rest: &mut [u32] = &mut col_idx;
    for &l in &len {
        let (head, tail) = rest.split_at_mut(l);
        slices.push(head);
        rest = tail;
    }
    slices.into_par_iter().enumerate().for_each_init(Vec::new, |seen, (i, out)| {
        let k = out.len();
        match pattern {
            Pattern::Uniform | Pattern::Skewed => {
                let mut rng = stream(seed, SALT_COLS, i as u64);
                choose_sorted(&mut rng, bc, k, out, seen);
            }
            Pattern::Banded => {
                // Centre of the (scaled) diagonal in block-column units, window clamped inside the matrix.
                let centre = (i as f64 + 0.5) * bc as f64 / br as f64 - 0.5;
                let start = (centre - (k as f64 - 1.0) / 2.0).round().max(0.0) as usize;
                let start = start.min(bc - k);
                out.iter_mut().enumerate().for_each(|(j, o)| *o = (start + j) as u32);
            }
            Pattern::Dense => out.iter_mut().enumerate().for_each(|(j, o)| *o = j as u32),
            Pattern::Empty => {}
        }
    });
    Ok((row_ptr, col_idx))
}

fn build<T: Scalar>(
    pattern: Pattern,
    rows: usize,
    cols: usize,
    bs: usize,
    density: f64,
    seed: u64,
    value: impl Fn(&mut Rng) -> T + Sync,
) -> Result<Bsr<T>> {
    let (row_ptr, col_idx) = structure(pattern, rows, cols, bs, density, seed)?;
    let nnzb = col_idx.len();
    let n = nnzb.checked_mul(bs * bs).filter(|&n| n <= isize::MAX as usize / std::mem::size_of::<T>()).ok_or(
        BsrError::TooLarge {
            what: "values",
            value: nnzb,
            limit: isize::MAX as usize / std::mem::size_of::<T>() / (bs * bs),
        },
    )?;
    let mut values = alloc::filled("BSR values", n, T::from_f64(0.0))?;
    values.par_chunks_mut(bs * bs).enumerate().for_each(|(i, blk)| {
        let mut rng = stream(seed, SALT_VALUES, i as u64);
        blk.iter_mut().for_each(|v| *v = value(&mut rng));
    });
    Ok(Bsr::try_new(rows, cols, bs, row_ptr, col_idx, values)?)
}

/// A generated matrix ([`structure`]) with values uniform in [-1, 1), rounded to `T`.
pub fn generate<T: Scalar>(
    pattern: Pattern,
    rows: usize,
    cols: usize,
    bs: usize,
    density: f64,
    seed: u64,
) -> Result<Bsr<T>> {
    build(pattern, rows, cols, bs, density, seed, |rng| T::from_f64(rng.range_f64(-1.0, 1.0)))
}

/// A generated matrix ([`structure`]) with integer values uniform in `[-max_abs, max_abs]`: with small
/// `max_abs` (e.g. 8) every product and sum of a GPU product is exact, so results can be compared bit for bit.
/// `max_abs` must be in `0..=2^24` ([`Error::InvalidArgument`] otherwise).
pub fn generate_int<T: Scalar>(
    pattern: Pattern,
    rows: usize,
    cols: usize,
    bs: usize,
    density: f64,
    seed: u64,
    max_abs: i64,
) -> Result<Bsr<T>> {
    if !(0..=1 << 24).contains(&max_abs) {
        return Err(Error::InvalidArgument { name: "max_abs", reason: format!("must be in 0..=2^24, got {max_abs}") });
    }
    build(pattern, rows, cols, bs, density, seed, |rng| T::from_f64(rng.int_in(-max_abs, max_abs) as f64))
}
