//! Helpers shared by the fuzz targets: the harness ([`target!`]), value pools, a tiny deterministic generator and
//! NaN-aware comparisons. No sparsek code is used here to compute an oracle (the generator that draws inputs is the
//! library's).

/// A fuzz target's harness, invoked once in each target file as `libfuzzer_sys::fuzz_target!` is (same
/// arguments): that target with [`asan_options!`] defined beside it, which every target needs.
#[macro_export]
macro_rules! target {
    ($($target:tt)*) => {
        $crate::asan_options!();
        ::libfuzzer_sys::fuzz_target!($($target)*);
    };
}

/// Defines `__asan_default_options` in the target binary: under AddressSanitizer a failed allocation then
/// returns null (so Rust's fallible allocation APIs see the failure and the library can report
/// `Error::OutOfMemory`) instead of aborting the process. Must be expanded in each target file (as [`target!`]
/// does): a weak symbol defined in a library would not be pulled in by the linker.
#[macro_export]
macro_rules! asan_options {
    () => {
        #[unsafe(no_mangle)]
        pub extern "C" fn __asan_default_options() -> *const ::std::os::raw::c_char {
            c"allocator_may_return_null=1".as_ptr()
        }
    };
}

/// The library's SplitMix64 ([`sparsek::rng::Rng`]): the values of a fuzz input are drawn from a seed the input
/// carries, so that inputs stay small. (The generator only draws inputs; the `rng` target checks it.)
#[derive(Clone, Debug)]
pub struct Rng(sparsek::rng::Rng);

impl Rng {
    /// A generator for `seed`: the stream the committed corpus was chosen with (state `seed ^ 0x0123_4567_89ab_cdef`;
    /// the library's `new` xors its own constant in, undone here).
    pub fn new(seed: u64) -> Self {
        Rng(sparsek::rng::Rng::new(seed ^ 0x0123_4567_89ab_cdef ^ 0x5851_f42d_4c95_7f2d))
    }
    /// 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// Uniform in `0..n` (0 when n == 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.0.below(n as u64) as usize
    }
    /// An integer in `-m..=m`.
    pub fn int(&mut self, m: i64) -> i64 {
        self.below((2 * m + 1) as usize) as i64 - m
    }
    /// Fisher-Yates shuffle.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

/// f32 values that stress comparisons and conversions: signed zeros, subnormals, extremes, non-finite values.
pub const SPECIAL_F32: [f32; 16] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    f32::MIN_POSITIVE,
    1e-45, // smallest subnormal
    -1e-45,
    f32::MAX,
    f32::MIN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
    65504.0, // f16::MAX
    65520.0, // rounds to infinity in f16
    6e-8,    // an f16 subnormal
    0.333_333_34,
];

/// f64 values that stress comparisons: the f32 ones plus f64 subnormals, extremes and near-ties.
pub const SPECIAL_F64: [f64; 12] = [
    0.0,
    -0.0,
    f64::MIN_POSITIVE,
    5e-324,
    -5e-324,
    f64::MAX,
    f64::MIN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::NAN,
    1.0 + f64::EPSILON,
    1e-300,
];

/// Equal as numbers, with every NaN equal to every NaN (and +0 equal to -0).
pub fn same(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

/// Bit-identical, except that any NaN equals any NaN (conversions may quiet a signalling NaN).
pub fn same_bits_f32(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// `ceil(x / bs) * bs` in u128 (no overflow for usize inputs).
pub fn round_up(x: usize, bs: usize) -> u128 {
    (x as u128).div_ceil(bs as u128) * bs as u128
}

/// The elements a `rows x cols` row-major matrix with leading dimension `ld` spans: `(rows - 1) * ld + cols`,
/// 0 for an empty shape; in u128 so that it never overflows.
pub fn span(rows: usize, cols: usize, ld: usize) -> u128 {
    if rows == 0 || cols == 0 { 0 } else { (rows as u128 - 1) * ld as u128 + cols as u128 }
}

/// A matrix from the library's integer generator as the targets describe one: `(pattern index, density in 1/8,
/// seed, max_abs)` (each taken modulo its range) for an `m x k` matrix of `bs` blocks.
pub fn generated<T: sparsek::Scalar>(
    (p, d, seed, max_abs): (u8, u8, u64, u8),
    (m, k, bs): (usize, usize, usize),
) -> sparsek::Bsr<T> {
    let pattern = sparsek::format::Pattern::ALL[p as usize % sparsek::format::Pattern::ALL.len()];
    sparsek::format::generate_int(pattern, m, k, bs, f64::from(d % 9) / 8.0, seed, i64::from(max_abs % 5))
        .expect("generate_int of a valid shape")
}

/// Small integers times a power of two (exact in every element type).
pub fn small(rng: &mut Rng, max: i64, scale: f64) -> f64 {
    rng.int(max) as f64 * scale
}

/// A dense matrix with leading dimension `cols + pad` (at least 1), padding NaN; `f` gives the elements.
pub fn padded<T: sparsek::Scalar>(
    rows: usize,
    cols: usize,
    pad: usize,
    mut f: impl FnMut(usize, usize) -> f64,
) -> sparsek::Matrix<T> {
    let ld = cols.max(1) + pad;
    let len = span(rows, cols, ld) as usize;
    let mut data = vec![T::from_f64(f64::NAN); len];
    for r in 0..rows {
        for c in 0..cols {
            data[r * ld + c] = T::from_f64(f(r, c));
        }
    }
    sparsek::Matrix::from_vec(rows, cols, ld, data).expect("valid dense matrix")
}

/// Element (r, c) read through the leading dimension, as the layout documents it.
pub fn at<T: sparsek::Scalar>(m: &sparsek::Matrix<T>, r: usize, c: usize) -> f64 {
    m.as_slice()[r * m.ld() + c].to_f64()
}
