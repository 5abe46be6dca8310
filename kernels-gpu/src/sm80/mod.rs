//! The sm_80 kernels: cp.async rings, ldmatrix and mma.sync (they run on every GPU from sm_80 on). [`bsr`]: the
//! BSR SpMM template (whole rows, split rows, k-groups; the product and tuning modules); [`flat`]: the flat block
//! list; [`decode`]: the decode kernels (`Pipeline::Direct`: no shared memory).

pub(crate) mod bsr;
#[cfg(not(feature = "tune-kernels"))]
mod decode;
#[cfg(not(feature = "tune-kernels"))]
mod flat;
