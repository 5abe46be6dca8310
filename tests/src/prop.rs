//! The CPU property tests' case: a generated BSR matrix and its dense partner, drawn by proptest (cpu_props.rs,
//! backward_props.rs).

use proptest::prelude::*;
use sparsek::format::Pattern;
use sparsek::{Epilogue, Matrix, Scalar};

/// One generated product: A is `br * bs` x `bc * bs` of `pattern` at `density`; `n` is the dense operand's other
/// dimension (the columns of B, or SDDMM's token count); `ld_extra` pads the dense operands' rows.
#[derive(Clone, Debug)]
pub struct PropCase {
    pub pattern: Pattern,
    pub bs: usize,
    pub br: usize,
    pub bc: usize,
    pub n: usize,
    pub density: f64,
    pub ep: Epilogue,
    pub ld_extra: usize,
    pub seed: u64,
}

/// Cases with block sizes 16, 32 and 64 (the larger ones on at most 4 and 2 block rows and columns: debug builds
/// are slow), any pattern and density, `n` from `n`, alpha from `alphas` and beta from {0, 0, 1, -0.75}, rows
/// padded by 0, 3 or 8 elements, any seed.
pub fn any_prop_case(n: impl Strategy<Value = usize>, alphas: Vec<f32>) -> impl Strategy<Value = PropCase> {
    (
        prop::sample::select(Pattern::ALL.to_vec()),
        prop::sample::select(vec![16usize, 32, 64]),
        0usize..6,
        0usize..6,
        n,
        0.0f64..=1.0,
        (prop::sample::select(alphas), prop::sample::select(vec![0.0f32, 0.0, 1.0, -0.75])),
        prop::sample::select(vec![0usize, 0, 3, 8]),
        any::<u64>(),
    )
        .prop_map(|(pattern, bs, br, bc, n, density, (alpha, beta), ld_extra, seed)| {
            let (br, bc) = match bs {
                16 => (br, bc),
                32 => (br.min(4), bc.min(4)),
                _ => (br.min(2), bc.min(2)),
            };
            PropCase { pattern, bs, br, bc, n, density, ep: Epilogue::new(alpha, beta), ld_extra, seed }
        })
}

/// A copy of `m` with leading dimension `m.cols() + extra`, the padding poisoned with NaN.
pub fn with_pad<T: Scalar>(m: &Matrix<T>, extra: usize) -> Matrix<T> {
    m.with_ld(m.cols() + extra, T::from_f64(f64::NAN)).unwrap()
}
