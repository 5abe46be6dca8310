//! SDDMM on tensor cores (the weight gradient of a block-sparse layer): `values = alpha * (X @ Y^T) + beta *
//! values` at the stored blocks of a BSR structure, X dense `M x K`, Y dense `N x K` (each row- or column-major),
//! f16 or bf16 inputs, f32 accumulation, the values written in f32 or the input type, in the structure's value
//! layout (block after block, each row-major). K (the token count) is any length; chunks past it are zero-filled.
//!
//! A CTA computes one stored block (`layout::Decomposition::StoredBlocks`: the grid is `nnzb` CTAs, BN = BS): its
//! block row by a binary search of `row_ptr`, its column from `col_idx`, then the sm_80 main loop of the forward
//! product (`sm80/bsr.rs`) over `ceil(K / BK)` k-tiles of X's rows `block_row * BS..` ([`src::SDDMM_X_ROW`]: staged
//! like the forward's A; [`src::SDDMM_X_COL`]: staged k rows first and read with `ldmatrix.trans`) and Y^T's columns
//! `col * BS..` (the forward's B tile: a row-major Y is a column-major Y^T), and the shared epilogue on the block's
//! values (`ldc = BS`, row-major).
//!
//! X and Y are activations and gradients that the grid ahead of this one on the stream may write: every copy waits
//! for it ([`ptx::griddep_wait`]) first.
//!
//! Parameters and preconditions: `layout::BsrSpmmParams` as `layout::Op::Sddmm` describes it (checked by the host
//! launcher before every launch).

use super::bsr::{CtaOperands, NoHooks, load_k_tile, mainloop_frag_db, mainloop_simple, src};
use crate::epilogue::{Epilogue, Input, Output, WarpCoord, block_row_of, load_index, store_epilogue};
use crate::layout::{BsrSpmmParams, KernelConfig};
use crate::ptx;
use crate::tile::{AccTile, SmemRing};

/// The kernel body for one configuration. See the module docs for the algorithm and the preconditions.
#[inline(always)]
unsafe fn sddmm<
    const BS: u32,
    const BN: u32,
    const BK: u32,
    const WARPS_M: u32,
    const WARPS_N: u32,
    const MI: usize,
    const NI: usize,
    const STAGES: u32,
    const FRAG_DB: bool,
    const B_COL: bool,
    const SRC: u32,
    I: Input,
    O: Output,
>(
    p: &BsrSpmmParams,
) {
    const {
        assert!(BN == BS, "an SDDMM tile is one stored block");
        assert!(BS == WARPS_M * MI as u32 * 16, "BS must equal WARPS_M * MI * 16");
        assert!(BN == WARPS_N * NI as u32 * 8, "BN must equal WARPS_N * NI * 8");
        assert!(!FRAG_DB || ((BK / 16).is_multiple_of(2) && STAGES >= 3), "FRAG_DB needs even k-steps, 3+ stages");
        assert!(src::dense_k(SRC), "an SDDMM kernel reads dense operands along K");
    }
    let threads: u32 = 32 * WARPS_M * WARPS_N;
    let tid = ptx::thread_idx_x();
    let (warp_id, lane) = (tid / 32, tid % 32);
    let warp = WarpCoord { warp_m: warp_id / WARPS_N, warp_n: warp_id % WARPS_N, lane };
    let index_shift = if p.index64 != 0 { 3 } else { 2 };

    // SAFETY (whole body): the host launcher guarantees the preconditions; the grid has `nnzb` CTAs, so `blk` is a
    // stored block, and every address below stays inside X's rows of its block row, Y's rows of its block column,
    // the structure and the block's values.
    let blk = ptx::block_idx_x();
    let block_row = unsafe { block_row_of(p.row_ptr, p.block_rows, blk, index_shift) };
    let col = unsafe { load_index(p.col_idx, blk, index_shift) };
    let g = CtaOperands {
        a_values: p.a_values as *const u16,
        col_idx: p.col_idx,
        index_shift,
        blk_begin: blk,
        b: p.b as *const u16,
        ldb: p.ldb,
        n: p.n,
        n0: col * BS,
        perm: core::ptr::null(),
        k_len: p.k,
        lda: p.lda,
        m0: block_row * BS,
    };
    let num_k_tiles = p.k.div_ceil(BK);

    let smem = ptx::dynamic_smem_base();
    let s_a = SmemRing::<BS, BK, STAGES>::at(smem);
    let s_b = SmemRing::<BK, BN, STAGES>::at(smem + SmemRing::<BS, BK, STAGES>::BYTES);
    let mut acc: AccTile<MI, NI> = [[[0.0; 4]; NI]; MI];

    // PREFETCH: the first STAGES - 1 k-tiles, one commit group each (empty groups keep the count uniform), after the
    // grid ahead (X and Y are its outputs).
    ptx::griddep_wait();
    let mut s = 0;
    while s < STAGES - 1 {
        if s < num_k_tiles {
            unsafe { load_k_tile::<BS, BN, BK, B_COL, SRC>(&g, s, 0, s_a.stage(s), s_b.stage(s), tid, threads) };
        }
        ptx::cp_async_commit();
        s += 1;
    }

    // MAIN LOOP: the forward's, over the dense k-tiles (no column indices: `col_of` is never needed).
    let (rings, threads_of, no_index) = ((s_a, s_b), (warp, tid, threads), (0, |_: u32| 0));
    if FRAG_DB {
        let k_tiles = (num_k_tiles, num_k_tiles);
        unsafe {
            mainloop_frag_db::<BS, BN, BK, MI, NI, STAGES, 1, B_COL, SRC, I, NoHooks>(
                rings,
                &g,
                threads_of,
                k_tiles,
                no_index,
                &mut acc,
                &mut NoHooks,
            )
        };
    } else {
        unsafe {
            mainloop_simple::<BS, BN, BK, MI, NI, STAGES, B_COL, SRC, I>(
                rings,
                &g,
                threads_of,
                num_k_tiles,
                no_index,
                &mut acc,
            )
        };
    }
    ptx::griddep_launch_dependents();
    ptx::cp_async_wait::<0>();

    // EPILOGUE: the block's values, (BS, BS) row-major at `blk * BS * BS`: alpha * acc + beta * values.
    let epi = Epilogue::<O> {
        c: (p.c as *mut O).wrapping_add(blk as usize * (BS * BS) as usize),
        ldc: BS,
        c_col_major: false,
        n: BS,
        alpha: p.alpha,
        beta: p.beta,
        bias: core::ptr::null(),
        activation: 0,
    };
    unsafe { store_epilogue::<MI, NI, O, I>(&epi, &mut acc, 0, 0, warp) };
}

/// Defines the SDDMM entry point `$name` from its `layout::VARIANTS` entry (which must exist and have the input
/// type, B order and output type given here; `$src` is its X order, [`src::SDDMM_X_ROW`] or [`src::SDDMM_X_COL`]):
/// the configuration comes from the table.
macro_rules! sddmm_kernel {
    (
        $name:ident,
        $input:ty,
        $in_type:pat,
        $b_layout:pat,
        $b_col:expr,
        $out:ty,
        $out_type:pat,
        $src:expr
    ) => {
        /// SDDMM entry point; see the module docs.
        ///
        /// # Safety
        /// Launched by the host's typed launcher, which checks the preconditions of [`BsrSpmmParams`].
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(params: BsrSpmmParams) {
            const CFG: KernelConfig =
                variant_config!($name, crate::layout::Pipeline::CpAsync, $in_type, $b_layout, $out_type);
            // SAFETY: forwarded preconditions.
            unsafe { with_tile!(sddmm::<CFG, { CFG.frag_db }, $b_col, { $src }, $input, $out>(&params)) }
        }
    };
}

/// The SDDMM entry points, one per `layout::VARIANTS` row of `layout::Op::Sddmm`, generated by build.rs.
mod entry {
    use super::*;

    include!(concat!(env!("OUT_DIR"), "/sddmm_entries.rs"));
}
