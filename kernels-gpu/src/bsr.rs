//! BSR x dense SpMM on tensor cores (the portable mma.sync path): `C = alpha * (A @ B) + beta * C`.
//!
//! A CTA owns one output tile: the BM = BS rows of one block row of A and BN columns of C. It walks the nonzero
//! blocks of its block row in BK-deep k-tiles; each k-tile stages A's (BS, BK) slice and B's (BK, BN) strip in
//! swizzled shared memory through a STAGES-deep ring of 16-byte `cp.async` copies, and each warp multiplies its
//! (16*MI, 8*NI) sub-tile with `ldmatrix` (`.trans` for B) and `mma.sync.m16n8k16` into f32 accumulators.
//!
//! Grid: 1-D, `block_rows * ceil(n / BN)` CTAs, mapped to (position in `row_order`, N tile) by
//! `layout::raster` in groups of `group_rows` row positions (the host sizes the group so a wave's A rows and B
//! strips fit in L2). `row_order` lists block rows longest first, so long rows start early.
//!
//! Preconditions (checked by the host launcher before every launch): `row_ptr`/`col_idx` valid BSR, `b` and `c`
//! 16-byte aligned, `ldb % 8 == 0`, `ldc` a multiple of 16 bytes, `n >= 1`, a 1-D grid of
//! `block_rows * ceil(n / BN)` CTAs,
//! block = `KernelConfig::threads()`, dynamic shared memory = `KernelConfig::smem_bytes()`.

use crate::layout::{CHUNK_BYTES, CHUNK_HALVES, KernelConfig, ldsm_a_role, ldsm_b_role, raster, swizzle};
use crate::ptx;

/// An element type the epilogue can write.
trait Output: Copy {
    /// Reads columns (col, col + 1) at `p`; only `col` when `!two`.
    ///
    /// # Safety
    /// `p` (and `p + 1` when `two`) are readable elements of C.
    unsafe fn load_pair(p: *const Self, two: bool) -> (f32, f32);
    /// Writes columns (col, col + 1) at `p`; only `col` when `!two`.
    ///
    /// # Safety
    /// `p` (and `p + 1` when `two`) are writable elements of C; `p` is aligned to two elements when `two`.
    unsafe fn store_pair(p: *mut Self, v0: f32, v1: f32, two: bool);
}

impl Output for f32 {
    #[inline(always)]
    unsafe fn load_pair(p: *const f32, two: bool) -> (f32, f32) {
        // SAFETY: the caller guarantees the elements are readable.
        unsafe { (*p, if two { *p.add(1) } else { 0.0 }) }
    }
    #[inline(always)]
    unsafe fn store_pair(p: *mut f32, v0: f32, v1: f32, two: bool) {
        // SAFETY: the caller guarantees the elements are writable and, for pairs, 8-byte aligned.
        unsafe {
            if two {
                ptx::st_global_v2_f32(p, v0, v1);
            } else {
                *p = v0;
            }
        }
    }
}

/// f16 output, as raw bits.
impl Output for u16 {
    #[inline(always)]
    unsafe fn load_pair(p: *const u16, two: bool) -> (f32, f32) {
        // SAFETY: the caller guarantees the elements are readable.
        unsafe { (ptx::cvt_f32_f16(*p), if two { ptx::cvt_f32_f16(*p.add(1)) } else { 0.0 }) }
    }
    #[inline(always)]
    unsafe fn store_pair(p: *mut u16, v0: f32, v1: f32, two: bool) {
        let packed = ptx::cvt_f16x2_f32(v0, v1);
        // SAFETY: the caller guarantees the elements are writable and, for pairs, 4-byte aligned.
        unsafe {
            if two {
                *(p as *mut u32) = packed;
            } else {
                *p = packed as u16;
            }
        }
    }
}

/// The kernel body for one configuration. See the module docs for the algorithm and the preconditions.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn bsr_spmm<
    const BS: u32,
    const BN: u32,
    const BK: u32,
    const WARPS_M: u32,
    const WARPS_N: u32,
    const MI: usize,
    const NI: usize,
    const STAGES: u32,
    const FRAG_DB: bool,
    O: Output,
>(
    a_values: *const u16,
    row_ptr: *const u32,
    col_idx: *const u32,
    row_order: *const u32,
    b: *const u16,
    ldb: u32,
    c: *mut O,
    ldc: u32,
    n: u32,
    block_rows: u32,
    group_rows: u32,
    alpha: f32,
    beta: f32,
) {
    const {
        assert!(BS == WARPS_M * MI as u32 * 16, "BS must equal WARPS_M * MI * 16");
        assert!(BN == WARPS_N * NI as u32 * 8, "BN must equal WARPS_N * NI * 8");
        assert!(NI % 2 == 0, "NI must be even: B fragments come in pairs from ldmatrix.x4.trans");
        assert!(BK % 16 == 0 && BS % BK == 0, "BK must be a multiple of 16 that divides BS");
        assert!(STAGES >= 2, "the ring needs at least two stages");
        assert!(!FRAG_DB || (BK / 16 % 2 == 0 && STAGES >= 3), "FRAG_DB needs an even number of k-steps and 3+ stages");
    }
    let threads: u32 = 32 * WARPS_M * WARPS_N;
    let a_cpr = BK / CHUNK_HALVES; // chunks per row of the A stage tile
    let b_cpr = BN / CHUNK_HALVES; // chunks per row of the B stage tile
    let a_chunks = BS * a_cpr;
    let b_chunks = BK * b_cpr;
    let k_tiles_per_block = BS / BK;
    let a_stage_bytes = BS * BK * 2;
    let b_stage_bytes = BK * BN * 2;
    let (wm_rows, wn_cols) = (MI as u32 * 16, NI as u32 * 8);

    let tid = ptx::thread_idx_x();
    let (warp, lane) = (tid / 32, tid % 32);
    let (wm, wn) = (warp / WARPS_N, warp % WARPS_N);

    // SAFETY (whole body): the host launcher guarantees the preconditions in the module docs; every global
    // address below stays inside A's values, row_ptr, col_idx, row_order, B's K x n window and C's tile.
    let (row_pos, n_tile) = raster(ptx::block_idx_x(), block_rows, n.div_ceil(BN), group_rows);
    let block_row = unsafe { *row_order.add(row_pos as usize) };
    let n0 = n_tile * BN;
    let blk_begin = unsafe { *row_ptr.add(block_row as usize) };
    let blk_end = unsafe { *row_ptr.add(block_row as usize + 1) };
    let num_k_tiles = (blk_end - blk_begin) * k_tiles_per_block;

    let smem = ptx::dynamic_smem_base();
    let s_a = |stage: u32| smem + stage * a_stage_bytes; // (BS, BK) f16, swizzled
    let s_b = |stage: u32| smem + STAGES * a_stage_bytes + stage * b_stage_bytes; // (BK, BN) f16, swizzled

    // Issues the cp.async copies of k-tile `k_tile` into ring slot `stage`.
    let load_k_tile = |k_tile: u32, stage: u32| {
        let blk = blk_begin + k_tile / k_tiles_per_block;
        let kk = (k_tile % k_tiles_per_block) * BK;
        // A: (BS, BK) slice of block `blk`, which is BS x BS row-major.
        let g_a = unsafe { a_values.add(blk as usize * (BS * BS) as usize + kk as usize) };
        let mut i = 0;
        while i < a_chunks.div_ceil(threads) {
            let idx = tid + i * threads;
            if a_chunks % threads == 0 || idx < a_chunks {
                let (r, ch) = (idx / a_cpr, idx % a_cpr);
                let src = unsafe { g_a.add((r * BS + ch * CHUNK_HALVES) as usize) };
                unsafe { ptx::cp_async_cg_16(s_a(stage) + swizzle(r, ch, a_cpr) * CHUNK_BYTES, src as *const u8, 16) };
            }
            i += 1;
        }
        // B: rows [col_idx[blk] * BS + kk, + BK), columns [n0, n0 + BN); columns >= n are zero-filled.
        let k_row0 = unsafe { *col_idx.add(blk as usize) } * BS + kk;
        let mut i = 0;
        while i < b_chunks / threads {
            let idx = tid + i * threads;
            let (r, ch) = (idx / b_cpr, idx % b_cpr);
            let col = n0 + ch * CHUNK_HALVES;
            let valid = if col < n { (n - col).min(CHUNK_HALVES) } else { 0 };
            let src = if valid > 0 { unsafe { b.add((k_row0 + r) as usize * ldb as usize + col as usize) } } else { b };
            unsafe {
                ptx::cp_async_cg_16(s_b(stage) + swizzle(r, ch, b_cpr) * CHUNK_BYTES, src as *const u8, valid * 2)
            };
            i += 1;
        }
    };

    let mut acc = [[[0.0f32; 4]; NI]; MI]; // (MI, NI, 4): the warp's (16*MI, 8*NI) f32 tile

    // PREFETCH: the first STAGES - 1 k-tiles, one commit group each (empty groups keep the count uniform).
    let mut s = 0;
    while s < STAGES - 1 {
        if s < num_k_tiles {
            load_k_tile(s, s);
        }
        ptx::cp_async_commit();
        s += 1;
    }

    // Loads the A and B fragments of k-step `ks` of ring slot `stage` (ldmatrix; .trans for B).
    let load_frags = |stage: u32, ks: u32, a_frag: &mut [[u32; 4]; MI], b_frag: &mut [[u32; 2]; NI]| {
        let (s_a_read, s_b_read) = (s_a(stage), s_b(stage));
        for (mi, frag) in a_frag.iter_mut().enumerate() {
            let (r, ch) = ldsm_a_role(lane);
            let row = wm * wm_rows + mi as u32 * 16 + r;
            *frag = unsafe { ptx::ldmatrix_x4(s_a_read + swizzle(row, ks * 2 + ch, a_cpr) * CHUNK_BYTES) };
        }
        for nj in 0..NI / 2 {
            let (r, ch) = ldsm_b_role(lane);
            let chunk = (wn * wn_cols + nj as u32 * 16) / CHUNK_HALVES + ch;
            let v = unsafe { ptx::ldmatrix_x4_trans(s_b_read + swizzle(ks * 16 + r, chunk, b_cpr) * CHUNK_BYTES) };
            b_frag[2 * nj] = [v[0], v[1]];
            b_frag[2 * nj + 1] = [v[2], v[3]];
        }
    };
    let mma_all = |acc: &mut [[[f32; 4]; NI]; MI], a_frag: &[[u32; 4]; MI], b_frag: &[[u32; 2]; NI]| {
        for (acc_m, a) in acc.iter_mut().zip(a_frag.iter()) {
            for (acc_mn, b) in acc_m.iter_mut().zip(b_frag.iter()) {
                ptx::mma_m16n8k16_f32_f16(acc_mn, *a, *b);
            }
        }
    };
    let next_slot = |slot: u32| if slot + 1 == STAGES { 0 } else { slot + 1 };
    let k_steps = BK / 16;

    if FRAG_DB {
        // MAIN LOOP, fragments double-buffered in registers (the CUTLASS sm80 multistage order): the fragments of
        // k-step ks + 1 load while the mma of ks run, the copies of the next k-tile are issued at ks == 0, and
        // the wait + barrier that hand over the next slot come before the last k-step's mma, which hide them.
        ptx::cp_async_wait_n(STAGES - 2);
        ptx::bar_sync();
        let mut smem_pipe_read = 0;
        let mut smem_pipe_write = STAGES - 1;
        let mut k_tile_next = STAGES - 1;
        let mut a_frag = [[[0u32; 4]; MI]; 2]; // (2, MI, 4): two k-steps of A fragments
        let mut b_frag = [[[0u32; 2]; NI]; 2]; // (2, NI, 2)
        if num_k_tiles > 0 {
            load_frags(smem_pipe_read, 0, &mut a_frag[0], &mut b_frag[0]);
        }
        let mut k_tile = 0;
        while k_tile < num_k_tiles {
            for ks in 0..k_steps {
                if ks == k_steps - 1 {
                    // Tile k_tile + 1 has landed for this thread; after the barrier for everyone. Every read of
                    // slot k_tile (its last fragments were loaded at the previous k-step) is done.
                    ptx::cp_async_wait_n(STAGES - 2);
                    ptx::bar_sync();
                    smem_pipe_read = next_slot(smem_pipe_read);
                }
                let (cur, nxt) = ((ks % 2) as usize, ((ks + 1) % 2) as usize);
                if ks + 1 < k_steps || k_tile + 1 < num_k_tiles {
                    let ks_next = if ks + 1 == k_steps { 0 } else { ks + 1 };
                    let (a_next, b_next) = (&mut a_frag[nxt], &mut b_frag[nxt]);
                    load_frags(smem_pipe_read, ks_next, a_next, b_next);
                }
                if ks == 0 {
                    // Slot smem_pipe_write held tile k_tile - 1, whose reads all finished before the last barrier.
                    if k_tile_next < num_k_tiles {
                        load_k_tile(k_tile_next, smem_pipe_write);
                    }
                    ptx::cp_async_commit();
                    smem_pipe_write = next_slot(smem_pipe_write);
                    k_tile_next += 1;
                }
                mma_all(&mut acc, &a_frag[cur], &b_frag[cur]);
            }
            k_tile += 1;
        }
    } else {
        // MAIN LOOP, one barrier per k-tile before its fragments are loaded.
        let mut k_tile = 0;
        while k_tile < num_k_tiles {
            // Tile k_tile has landed (at most STAGES - 2 newer groups pending) for this thread; the barrier makes
            // it visible to all, and tells every thread that slot (k_tile - 1) % STAGES has been read by everyone.
            ptx::cp_async_wait_n(STAGES - 2);
            ptx::bar_sync();
            let k_tile_next = k_tile + STAGES - 1;
            if k_tile_next < num_k_tiles {
                load_k_tile(k_tile_next, k_tile_next % STAGES);
            }
            ptx::cp_async_commit();
            let smem_pipe_read = k_tile % STAGES;
            for ks in 0..k_steps {
                let mut a_frag = [[0u32; 4]; MI];
                let mut b_frag = [[0u32; 2]; NI];
                load_frags(smem_pipe_read, ks, &mut a_frag, &mut b_frag);
                mma_all(&mut acc, &a_frag, &b_frag);
            }
            k_tile += 1;
        }
    }
    ptx::cp_async_wait::<0>();

    // EPILOGUE: C = alpha * acc + beta * C (C not read when beta == 0), columns >= n skipped.
    let row_base = block_row * BS + wm * wm_rows;
    let col_base = n0 + wn * wn_cols + 2 * (lane % 4);
    for (mi, acc_m) in acc.iter().enumerate() {
        for (ni, acc_mn) in acc_m.iter().enumerate() {
            let col = col_base + ni as u32 * 8;
            if col < n {
                let two = col + 1 < n;
                for half in 0..2 {
                    let row = row_base + mi as u32 * 16 + lane / 4 + 8 * half as u32;
                    let p = unsafe { c.add(row as usize * ldc as usize + col as usize) };
                    let mut v0 = alpha * acc_mn[2 * half];
                    let mut v1 = alpha * acc_mn[2 * half + 1];
                    if beta != 0.0 {
                        let (o0, o1) = unsafe { O::load_pair(p, two) };
                        v0 += beta * o0;
                        v1 += beta * o1;
                    }
                    unsafe { O::store_pair(p, v0, v1, two) };
                }
            }
        }
    }
}

/// Defines the `extern "ptx-kernel"` entry point for one configuration and output type.
macro_rules! bsr_kernel {
    ($name:ident, $cfg:expr, $out:ty) => {
        /// BSR SpMM entry point; see the module docs.
        ///
        /// # Safety
        /// Launched by the host's typed launcher, which checks the module's preconditions.
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "ptx-kernel" fn $name(
            a_values: *const u16,
            row_ptr: *const u32,
            col_idx: *const u32,
            row_order: *const u32,
            b: *const u16,
            ldb: u32,
            c: *mut $out,
            ldc: u32,
            n: u32,
            block_rows: u32,
            group_rows: u32,
            alpha: f32,
            beta: f32,
        ) {
            const CFG: KernelConfig = $cfg;
            // SAFETY: forwarded preconditions.
            unsafe {
                bsr_spmm::<
                    { CFG.bs },
                    { CFG.bn },
                    { CFG.bk },
                    { CFG.warps_m },
                    { CFG.warps_n },
                    { CFG.mi() as usize },
                    { CFG.ni() as usize },
                    { CFG.stages },
                    { CFG.frag_db },
                    $out,
                >(a_values, row_ptr, col_idx, row_order, b, ldb, c, ldc, n, block_rows, group_rows, alpha, beta)
            }
        }
    };
}

/// The product kernels: one per block size (the configuration `layout::CONFIGS` gives it) and output type.
#[cfg(not(feature = "tune-kernels"))]
mod product {
    use super::*;
    use crate::layout::config_for;

    /// The configuration for `bs`; a missing one is a compile-time error.
    const fn cfg(bs: u32) -> KernelConfig {
        match config_for(bs) {
            Some(c) => c,
            None => panic!("no kernel configuration for this block size"),
        }
    }

    bsr_kernel!(sparsek_bsr_bs16_f32, cfg(16), f32);
    bsr_kernel!(sparsek_bsr_bs32_f32, cfg(32), f32);
    bsr_kernel!(sparsek_bsr_bs64_f32, cfg(64), f32);
    bsr_kernel!(sparsek_bsr_bs128_f32, cfg(128), f32);
    bsr_kernel!(sparsek_bsr_bs16_f16, cfg(16), u16);
    bsr_kernel!(sparsek_bsr_bs32_f16, cfg(32), u16);
    bsr_kernel!(sparsek_bsr_bs64_f16, cfg(64), u16);
    bsr_kernel!(sparsek_bsr_bs128_f16, cfg(128), u16);
}

/// The tuning module: `sparsek_tune_<i>` runs `layout::TUNE_CONFIGS[i]` with f32 output.
#[cfg(feature = "tune-kernels")]
mod tune {
    use super::*;
    use crate::layout::TUNE_CONFIGS;

    macro_rules! tune_kernels {
        ($($name:ident = $i:literal),* $(,)?) => {
            $(bsr_kernel!($name, TUNE_CONFIGS[$i], f32);)*
            const _: () = assert!(TUNE_CONFIGS.len() == [$($i),*].len(), "one entry point per TUNE_CONFIGS entry");
        };
    }

    tune_kernels!(
        sparsek_tune_0 = 0,
        sparsek_tune_1 = 1,
        sparsek_tune_2 = 2,
        sparsek_tune_3 = 3,
        sparsek_tune_4 = 4,
        sparsek_tune_5 = 5,
        sparsek_tune_6 = 6,
        sparsek_tune_7 = 7,
        sparsek_tune_8 = 8,
        sparsek_tune_9 = 9,
        sparsek_tune_10 = 10,
        sparsek_tune_11 = 11,
        sparsek_tune_12 = 12,
        sparsek_tune_13 = 13,
        sparsek_tune_14 = 14,
        sparsek_tune_15 = 15,
    );
}
