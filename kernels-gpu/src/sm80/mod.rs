//! The sm_80 kernels: cp.async rings, ldmatrix and mma.sync (they run on every GPU from sm_80 on). [`bsr`]: the
//! BSR SpMM template (whole rows, split rows, k-groups; the product and tuning modules); [`flat`]: the flat block
//! list; [`decode`]: the decode kernels (`Pipeline::Direct`: no shared memory).

/// Calls an sm_80 tile body (`bsr_spmm`, `bsr_spmm_flat`) on the tile of `$cfg` (a `KernelConfig` constant):
/// `with_tile!(body::<CFG, rest...>(args))` passes the tile's `BS, BN, BK, WARPS_M, WARPS_N, MI, NI, STAGES`, the
/// const generics both bodies declare first, then `rest`.
macro_rules! with_tile {
    ($body:ident::<$cfg:ident $(, $rest:tt)*>($($arg:expr),*)) => {
        $body::<
            { $cfg.bs },
            { $cfg.bn },
            { $cfg.bk },
            { $cfg.warps_m },
            { $cfg.warps_n },
            { $cfg.mi() as usize },
            { $cfg.ni() as usize },
            { $cfg.stages }
            $(, $rest)*
        >($($arg),*)
    };
}

pub(crate) mod bsr;
#[cfg(not(feature = "tune-kernels"))]
mod decode;
#[cfg(not(feature = "tune-kernels"))]
mod flat;
#[cfg(not(feature = "tune-kernels"))]
mod sddmm;
