//! The sm_90a kernels' consumer warpgroups: each set reads its entries of the tile queue, runs the wgmma main loop
//! over the tile's k-tiles as the ring fills, and hands the accumulators to a split row's hand-over
//! ([`super::split`]) or to C's store ([`super::store`]) (see the module docs of [`super`]).

use super::scheduler::{TileAt, tile_at};
use super::split::hand_over;
use super::store::{store_blocks, store_pieces, store_staged};
use super::{BK, Launch, SDDMM_END, Smem, WG_THREADS, WgmmaInput, src};
use crate::epilogue::{Epilogue, Output, WarpCoord};
use crate::layout::{BsrSpmmParams, TILE_QUEUE, WARPGROUP_WARPS, WGMMA_N, hopper_split_counter};
use crate::ptx;
use crate::ptx::WgmmaAcc;

/// A consumer thread's whole work (`ct`: its index among the consumer threads): its set's tiles, each main loop,
/// hand-over and store. `SRC` ([`src`]) names the product: the forward's and A^T @ B's tiles are the scheduler's
/// (N tile of a block row), an SDDMM's queue entry names its group's first stored block `t` and block count,
/// ceil(K / 64) k-tiles, written to the blocks' values (rows `t * BS..` of the `(nnzb * BS) x BS` output, `BS`
/// columns each). `TRANS_A` is 1 where A is staged MN-major
/// (`src::a_mn_major`).
///
/// # Safety
/// Every consumer thread of the CTA, after the barriers' initialisation; `p`, `tmap_c` and `c_tma` as the
/// kernel's (`hopper_spmm`).
#[inline(always)]
pub(super) unsafe fn consume<
    const BS: u32,
    const BN: u32,
    const WARPS_M: u32,
    const STAGES: u32,
    const PIECES: usize,
    const TRANS_B: u32,
    const PINGPONG: bool,
    const OUT_BUFS: u32,
    const SRC: u32,
    const TRANS_A: u32,
    I: WgmmaInput,
    O: Output,
>(
    p: &BsrSpmmParams,
    smem: Smem<STAGES, OUT_BUFS>,
    launch: Launch,
    ct: u32,
    (tmap_c, c_tma): (u64, bool),
) {
    let Launch { tiles, shape, index_shift, sets, tile_threads, n_tiles } = launch;
    let b_col = TRANS_B == 0;
    let set = ct / tile_threads;
    let wg = (ct % tile_threads) / WG_THREADS;
    let wgs_m = WARPS_M / WARPGROUP_WARPS;
    let (wg_m, wg_n) = (wg % wgs_m, wg / wgs_m);
    // The epilogue places each 128-column piece itself (warp_n 0, its own first column).
    let warp = WarpCoord { warp_m: wg_m * WARPGROUP_WARPS + (ct / 32) % WARPGROUP_WARPS, warp_n: 0, lane: ct % 32 };
    // This warpgroup's rows of the A slot (64 rows of 128 bytes) and its first 128-column piece of the B slot.
    let a_off = wg_m * 64 * BK * 2;
    let piece0 = wg_n * PIECES as u32;
    let mut epi = Epilogue::<O>::from_params(p);
    if src::sddmm(SRC) {
        // The values: BS columns (p.n is the structure's), ldc BS.
        epi.n = BS;
    }
    // This warpgroup's staging buffers, its thread that issues their stores, and the buffers it has filled so far.
    let cw = ct / WG_THREADS;
    let issuer = ct.is_multiple_of(WG_THREADS);
    let mut staged = 0u32;
    let mut j = set;
    loop {
        let q = j % TILE_QUEUE;
        // SAFETY: initialised barriers and an entry of the queue, published by the producer before its phase
        // completes; this set is the entry's only reader until it releases it.
        // (extra: an SDDMM tile's block count.)
        let [t, it0, extra, _] = unsafe {
            ptx::mbarrier_wait(smem.q_full(q), (j / TILE_QUEUE) & 1);
            let entry = ptx::ld_shared_v4(smem.q_entry(q));
            ptx::mbarrier_arrive(smem.q_empty(q));
            entry
        };
        // (An SDDMM's entries name a group's first stored block: its end is SDDMM_END.)
        if if src::sddmm(SRC) { t == SDDMM_END } else { t >= tiles } {
            break;
        }
        if PINGPONG && j > 0 {
            // The m-th tile of set 1 (j = 2m + 1) follows the other set's m-th, that of set 0 (j = 2m) its
            // (m - 1)-th: phase ceil(j / 2) - 1 of smem.turn(set). Strict alternation keeps the phases from aliasing.
            // SAFETY: an initialised barrier; the other set arrives on it after each of its main loops.
            unsafe { ptx::mbarrier_wait(smem.turn(set), (j.div_ceil(2) - 1) & 1) };
        }
        j += sets;
        let none = TileAt { pos: 0, row: 0, n_tile: 0, part: 0, parts: 1, begin: 0, end: 0 };
        let at = if src::sddmm(SRC) {
            // The group from stored block t: one whole tile.
            TileAt { row: t, ..none }
        } else {
            // SAFETY: t is a tile of the launch, one the producer found work in (so never None).
            unsafe { tile_at(p, t, shape, index_shift) }.unwrap_or(none)
        };
        let (row, n_tile) = (at.row, at.n_tile);
        let k_tiles = if src::sddmm(SRC) { p.k.div_ceil(BK) } else { (at.end - at.begin) * (BS / BK) };
        let mut acc: [WgmmaAcc; PIECES] = [[[0.0; 4]; 16]; PIECES];
        let mut prev = 0u32;
        for it in it0..it0 + k_tiles {
            let s = it % STAGES;
            // SAFETY (whole k-tile): the slot's full barrier completes when its TMA bytes have landed; the
            // descriptors address this warpgroup's rows of A and its columns of B in that slot.
            unsafe { ptx::mbarrier_wait(smem.full(s), (it / STAGES) & 1) };
            ptx::wgmma_fence();
            for ks in 0..BK / 16 {
                let a_desc = if TRANS_A == 1 {
                    // MN-major: the warpgroup's box of 64 k rows x 64 rows of A, 16 k rows per k16 step.
                    ptx::smem_desc_128b(smem.a_slot(s) + a_off + 2048 * ks, 64 * BK * 2, 1024)
                } else {
                    ptx::smem_desc_128b(smem.a_slot(s) + a_off + 32 * ks, 16, 1024)
                };
                let b_desc = |pc: u32| {
                    let piece = piece0 + pc;
                    if b_col {
                        // (BN, 64) K-major tile: 128 rows of 128 bytes per piece.
                        ptx::smem_desc_128b(smem.b_slot(s) + piece * WGMMA_N * BK * 2 + 32 * ks, 16, 1024)
                    } else {
                        // 64 x 64 boxes, two per piece (LBO: the next box), 16 k rows per k16 step.
                        ptx::smem_desc_128b(smem.b_slot(s) + piece * 2 * 64 * BK * 2 + 2048 * ks, 64 * BK * 2, 1024)
                    }
                };
                // The pieces written out (PIECES is 1 or 2), so every accumulator index is a constant: a loop
                // that LLVM leaves rolled would put the accumulators in local memory.
                if PIECES == 2 {
                    // One m64n256: A read once for both pieces (the descriptors of piece 0 reach piece 1 through
                    // LBO / SBO).
                    let both: &mut [WgmmaAcc; 2] = acc.first_chunk_mut::<2>().unwrap_or_else(|| unreachable!());
                    unsafe { I::wgmma2::<TRANS_A, TRANS_B>(both, a_desc, b_desc(0)) };
                } else {
                    unsafe { I::wgmma::<TRANS_A, TRANS_B>(&mut acc[0], a_desc, b_desc(0)) };
                }
            }
            ptx::wgmma_commit_group();
            // Keep this k-tile's group in flight; the previous one is done, so its slot can be refilled.
            ptx::wgmma_wait_group::<1>();
            if it > it0 {
                // SAFETY: an initialised barrier of the ring.
                unsafe { ptx::mbarrier_arrive(smem.empty(prev)) };
            }
            prev = s;
        }
        if PINGPONG {
            // This set has passed every full barrier of its tile: the other set's next main loop may start.
            // SAFETY: an initialised barrier.
            unsafe { ptx::mbarrier_arrive(smem.turn(1 - set)) };
        }
        ptx::wgmma_wait_group::<0>();
        ptx::wgmma_fence_operand(&mut acc[0]);
        if PIECES == 2 {
            ptx::wgmma_fence_operand(&mut acc[PIECES - 1]);
        }
        if k_tiles > 0 {
            // SAFETY: as above.
            unsafe { ptx::mbarrier_arrive(smem.empty(prev)) };
        }
        if src::sddmm(SRC) {
            // The group's blocks to their values; bs 128 staged through C's map where the plan says so.
            let bufs = (smem.out_stage(cw, 0), smem.out_full(cw, 0), smem.out_free(cw, 0));
            let staging = (c_tma && BS == WGMMA_N).then_some((tmap_c, bufs, issuer));
            // SAFETY: blocks t..t + extra are stored blocks of the structure (the producer's group); the staging
            // buffers and their barriers are this warpgroup's; C's map covers the values.
            staged = unsafe {
                store_blocks::<BS, PIECES, OUT_BUFS, O, I>(
                    &epi,
                    &mut acc,
                    (t, extra, piece0 * (WGMMA_N / BS)),
                    (warp, wg_m),
                    staging,
                    staged,
                )
            };
            continue;
        }
        let (row0, col0) = (row * BS, n_tile * BN);
        if at.parts > 1 {
            // A split row's part: its warps hand their accumulators over; the last part's write C.
            let thread = ct % tile_threads;
            let counter = hopper_split_counter(at.pos, n_tile, n_tiles, thread / 32, tile_threads / 32);
            // SAFETY: every lane of the warp (tile-uniform control flow); the host sized the workspace for the
            // launch's split rows.
            // (The last one writes C through the register epilogue below: one copy of it in the kernel.)
            if !unsafe { hand_over::<PIECES>(&mut acc, p, &at, (n_tiles, counter), (thread, tile_threads)) } {
                continue;
            }
        } else if c_tma && (O::BYTES == 2 || !epi.c_col_major) {
            // (A column-major C is staged for 16-bit elements only: an f32 kernel stores it from the registers.)
            // SAFETY: the tile's rows exist in C and the bias; the staging buffers and their barriers are this
            // warpgroup's; C's map covers C (columns >= n are not written).
            unsafe {
                staged = store_staged::<PIECES, OUT_BUFS, O, I>(
                    &epi,
                    &mut acc,
                    (row0, col0 + piece0 * WGMMA_N),
                    (warp, wg_m),
                    tmap_c,
                    (smem.out_stage(cw, 0), smem.out_full(cw, 0), smem.out_free(cw, 0)),
                    (issuer, staged),
                );
            }
            continue;
        }
        // SAFETY: the tile's rows exist in C and the bias; columns >= n are skipped.
        unsafe { store_pieces::<PIECES, O, I>(&epi, &mut acc, (row0, col0 + piece0 * WGMMA_N), warp) };
    }
    if c_tma && issuer {
        // Every store of this warpgroup done before the CTA (and its shared memory) goes.
        ptx::bulk_wait_group::<0>();
    }
}
