//! BSR x dense SpMM on Hopper (sm_90a): TMA + mbarrier ring + wgmma, warp-specialised. Same
//! contract as the sm_80 kernels (kernels-gpu/src/sm80/bsr.rs): `C = act(alpha * (A @ B) + bias) + beta * C`, f16 or
//! bf16 inputs, f32 accumulation, B row- or column-major (one kernel each), C row- or column-major and f32 or the
//! input's 16-bit type, 32- or 64-bit indices; parameters `layout::HopperSpmmParams` (two tensor maps, then
//! `layout::BsrSpmmParams`).
//!
//! Output tiles are the sm_80 kernels' (one block row of A by BN columns of C), ordered the same way (grouped
//! rasterization over `row_order`, longest rows first). The kernel takes any grid. With `tile_counter` set, the
//! host launches a persistent grid (one CTA per SM) and each CTA's producer takes the next tile with an atomic
//! add, so CTAs that finish early take more (the last CTA out resets the counters); without it, CTA `c` takes
//! tiles `c, c + grid, ...` and the host launches one tile per consumer set (one CTA per tile, or per two in
//! ping-pong). Either way one CTA's tiles share one
//! continuous ring. A CTA is one producer warpgroup and `warps_m * warps_n / 4` consumer warpgroups per set, one
//! set or two (`layout::Pipeline::TmaWgmma { pingpong }`):
//! - PRODUCER (one thread; its warpgroup gives its registers back with `setmaxnreg.dec`): takes a tile, publishes
//!   it with the ring position of its first k-tile in the tile queue (`layout::TILE_QUEUE` entries, each with a
//!   full and an empty mbarrier), then for every k-tile waits for the ring slot to be empty, announces the slot's
//!   bytes on the slot's full barrier and issues the TMA copies: A's (BS, 64) slice of block `blk` (rows
//!   `blk * BS ..` of the `(nnzb * BS) x BS` map, column `kk`) and B's 64 rows `col_idx[blk] * BS + kk ..` for
//!   the tile's BN columns (row-major B: BN / 64 boxes of 64 x 64; column-major B: one box of BN x 64). TMA
//!   zero-fills columns past n, so the N tail needs no code. It runs ahead into the next tile while the consumers
//!   finish the last one. Past the last tile it publishes an end entry for each set.
//! - CONSUMERS (`setmaxnreg.inc`): a set reads the queue's entries in turn (in ping-pong, set `w` reads entries
//!   `w, w + 2, ...`); for every k-tile, wait for the slot to be full, issue 4 k16 steps of one wgmma over the
//!   columns they own (`m64n128k16`, or `m64n256k16` for two pieces: A read once), commit, wait until only this
//!   group is in flight (`wait_group 1`) and release the previous k-tile's slot, so one wgmma group is always in
//!   flight. After the tile's last k-tile: `wait_group 0`, release, and the epilogue. A row-major C with beta 0
//!   (`HopperSpmmParams::c_tma`) goes through shared memory: each warpgroup writes 128 bytes of each of its 64
//!   rows at a time into a 128-byte swizzled staging buffer, and one of its threads stores the buffer through C's
//!   tensor map (`cp.async.bulk.tensor`, whole 128-byte rows; a warp's register stores write 8 rows of 32 bytes
//!   each, which cost up to half the time at short rows: docs/perf-notes.md, "Hopper", step 11). The columns past
//!   C's last whole 16 bytes are stored from the registers too (`stage_chunk`), and every other C goes through the
//!   shared epilogue (kernels-gpu/src/epilogue.rs) straight from the accumulators, whose per-warp layout is the
//!   `mma.sync` C fragment's. In ping-pong, a set starts a main loop only after the
//!   other set has passed every full barrier of its previous tile (a turn barrier per set), so one set's epilogue
//!   runs under the other's wgmmas.
//!
//! Ring: STAGES slots of (A: BS x 64, B: 64 x BN) 16-bit elements, 1024-byte aligned (128-byte swizzle atoms),
//! followed by `OUT_BUFS` staging buffers of 64 x 128 bytes per consumer warpgroup (each with a `full` barrier,
//! 128 arrivals, and a `free` barrier, one arrival by the issuing thread once the TMA has read it);
//! slot `s` has a full barrier (1 arrival + the TMA bytes) and an empty barrier (one arrival per thread of a set).
//! Both sides count k-tiles with one running counter `it`: slot `it % STAGES`, phase parity `(it / STAGES) % 2`;
//! the producer waits for the empty barrier's previous phase (parity ^ 1: a fresh barrier counts as released). A
//! parity names the phase meant only if the slot's previous phase has completed: the set's own previous k-tile,
//! or, at a tile's start, the other set's, which the turn barrier guarantees.
//!
//! bs 64 with f32 C has two kernels per type: five stages and one staging buffer per warpgroup, and for short rows
//! (`_short`, `layout::HOPPER_SHORT_CONFIGS`) four stages and two buffers; the template is the same.
//!
//! The files, by job: [`scheduler`] (where a tile's blocks are), [`split`] (a split row's hand-over), [`store`]
//! (C's store); here the kernel body.

mod scheduler;
mod split;
mod store;

use scheduler::{TileAt, tile_at};
use split::hand_over;
use store::{store_pieces, store_staged};

use crate::epilogue::{Bf16In, Epilogue, F16In, Input, Output, WarpCoord, load_index};
use crate::layout::{
    BsrSpmmParams, HopperSpmmParams, KernelConfig, OUT_STAGE_BYTES, TILE_QUEUE, WARPGROUP_WARPS, WGMMA_N,
    hopper_split_counter, hopper_virtual_rows,
};
use crate::ptx;
use crate::ptx::WgmmaAcc;

/// K depth of a stage: one 128-byte swizzle row of 16-bit elements.
const BK: u32 = 64;
/// Threads of a warpgroup.
const WG_THREADS: u32 = 32 * WARPGROUP_WARPS;
/// Registers per thread the producer warpgroup keeps (it holds a few indices and addresses).
const PRODUCER_REGS: u32 = 40;
/// Registers per thread a consumer warpgroup may use (up to 128 accumulators of an m64n256 tile). With two
/// consumer warpgroups: 128 * 40 + 256 * 232 = 64512 of the SM's 65536.
const CONSUMER_REGS: u32 = 232;

/// An input type the wgmma of one k16 step multiplies.
trait WgmmaInput: Input {
    /// `d += a x b` for one k16 step of an m64n128 piece (`TRANS_B`: B's major order, see
    /// `ptx::wgmma_m64n128k16`).
    ///
    /// # Safety
    /// As `ptx::wgmma_m64n128k16`.
    unsafe fn wgmma<const TRANS_B: u32>(d: &mut WgmmaAcc, a: u64, b: u64);
    /// The same over two adjacent pieces (256 columns) in one instruction.
    ///
    /// # Safety
    /// As `ptx::wgmma_m64n256k16`.
    unsafe fn wgmma2<const TRANS_B: u32>(d: &mut [WgmmaAcc; 2], a: u64, b: u64);
}

impl WgmmaInput for F16In {
    #[inline(always)]
    unsafe fn wgmma<const TRANS_B: u32>(d: &mut WgmmaAcc, a: u64, b: u64) {
        // SAFETY: forwarded.
        unsafe { ptx::wgmma_m64n128k16::<false, TRANS_B>(d, a, b, 1) }
    }
    #[inline(always)]
    unsafe fn wgmma2<const TRANS_B: u32>(d: &mut [WgmmaAcc; 2], a: u64, b: u64) {
        // SAFETY: forwarded.
        unsafe { ptx::wgmma_m64n256k16::<false, TRANS_B>(d, a, b, 1) }
    }
}

impl WgmmaInput for Bf16In {
    #[inline(always)]
    unsafe fn wgmma<const TRANS_B: u32>(d: &mut WgmmaAcc, a: u64, b: u64) {
        // SAFETY: forwarded.
        unsafe { ptx::wgmma_m64n128k16::<true, TRANS_B>(d, a, b, 1) }
    }
    #[inline(always)]
    unsafe fn wgmma2<const TRANS_B: u32>(d: &mut [WgmmaAcc; 2], a: u64, b: u64) {
        // SAFETY: forwarded.
        unsafe { ptx::wgmma_m64n256k16::<true, TRANS_B>(d, a, b, 1) }
    }
}

/// The kernel body for one configuration (see the module docs).
///
/// # Safety
/// `p` satisfies `layout::HopperSpmmParams`'s preconditions, `tmaps` is the generic address of the kernel's
/// parameter (tensor map of A at +0, of B at +128, of C at +256), `tile_counter` and `c_tma` are the parameter's
/// (`c_tma`: C's map is valid, C row-major, beta 0), and the launch has `CFG.threads()` threads and
/// `CFG.smem_bytes()` bytes of dynamic shared memory, where `OUT_BUFS` is `CFG.out_buffers()`.
#[inline(always)]
unsafe fn hopper_spmm<
    const BS: u32,
    const BN: u32,
    const WARPS_M: u32,
    const WARPS_N: u32,
    const STAGES: u32,
    const PIECES: usize,
    const TRANS_B: u32,
    const PINGPONG: bool,
    const OUT_BUFS: u32,
    I: WgmmaInput,
    O: Output,
>(
    p: &BsrSpmmParams,
    tmaps: u64,
    tile_counter: u64,
    c_tma: bool,
    split_rows: u32,
) {
    // B's order: TRANS_B = 0 for a column-major B (staged N x K, K-major), 1 for a row-major B (K x N).
    let b_col = TRANS_B == 0;
    // A row-major B whose columns are a whole number of 64-column chunks has a rank-3 tensor map (64 columns x K x
    // chunks; layout::HopperSpmmParams): one copy loads a stage's BN / 64 chunks.
    let b_chunked = !b_col && p.n.is_multiple_of(64);
    const {
        assert!(PIECES as u32 * WGMMA_N * WARPS_N == BN, "each consumer warpgroup owns PIECES x 128 columns");
        assert!(PIECES == 1 || PIECES == 2, "one or two m64n128 pieces per consumer warpgroup");
        assert!(WARPS_M * 16 == BS && WARPS_M.is_multiple_of(WARPGROUP_WARPS), "16 rows per warp, whole warpgroups");
        assert!(OUT_BUFS == 1 || OUT_BUFS == 2, "one or two output staging buffers per consumer warpgroup");
    }
    let a_bytes = BS * BK * 2;
    let b_bytes = BK * BN * 2;
    let stage_bytes = a_bytes + b_bytes;
    // Consumer threads of one tile, and the sets of them that take turns (two in ping-pong).
    let tile_threads = WG_THREADS * (WARPS_M / WARPGROUP_WARPS) * WARPS_N;
    let sets = if PINGPONG { 2 } else { 1 };
    let consumer_wgs = tile_threads * sets / WG_THREADS;
    // The ring starts at the first 1024-byte boundary of the window (the host adds 1024 bytes for it).
    let ring = (ptx::dynamic_smem_base() + 1023) & !1023;
    let a_slot = |s: u32| ring + s * stage_bytes;
    let b_slot = |s: u32| ring + s * stage_bytes + a_bytes;
    // After the ring, each consumer warpgroup's output staging buffers (layout::KernelConfig::out_stage_offset), then
    // the ring's barriers (barrier_offset).
    let out_stage = |cw: u32, b: u32| ring + STAGES * stage_bytes + (cw * OUT_BUFS + b) * OUT_STAGE_BYTES;
    let bars = ring + STAGES * stage_bytes + consumer_wgs * OUT_BUFS * OUT_STAGE_BYTES;
    let full = |s: u32| bars + 8 * s;
    let empty = |s: u32| bars + 8 * (STAGES + s);
    // The tile queue (layout::KernelConfig::tile_queue_offset): entry j of the CTA's tiles sits in slot j % TILE_QUEUE.
    let queue = bars + 16 * STAGES;
    let q_full = |q: u32| queue + 8 * q;
    let q_empty = |q: u32| queue + 8 * (TILE_QUEUE + q);
    let q_entry = |q: u32| queue + 16 * TILE_QUEUE + 16 * q;
    // Ping-pong: set `w` may start a tile's main loop once the other set has passed the full barriers of every
    // k-tile of its previous tile (it arrives on `turn(w)` then): the ring's earlier phases have all completed,
    // so each full-barrier parity names the phase meant, and the two main loops take the tensor cores in turn.
    let turn = |w: u32| queue + 32 * TILE_QUEUE + 8 * w;
    // A staging buffer's `full` barrier (its warpgroup's 128 threads have written it) and `free` barrier (the TMA
    // store has read it), after the turn barriers (out_barrier_offset).
    let out_full = |cw: u32, b: u32| queue + 32 * TILE_QUEUE + 16 + 16 * (cw * OUT_BUFS + b);
    let out_free = |cw: u32, b: u32| out_full(cw, b) + 8;

    let tid = ptx::thread_idx_x();
    if tid == 0 {
        // SAFETY (whole block): the barriers lie past the ring, inside the dynamic shared memory; nobody uses them
        // before the CTA barrier below.
        for s in 0..STAGES {
            unsafe {
                ptx::mbarrier_init(full(s), 1);
                ptx::mbarrier_init(empty(s), tile_threads);
            }
        }
        for q in 0..TILE_QUEUE {
            unsafe {
                ptx::mbarrier_init(q_full(q), 1);
                ptx::mbarrier_init(q_empty(q), tile_threads);
            }
        }
        if PINGPONG {
            for w in 0..2 {
                unsafe { ptx::mbarrier_init(turn(w), tile_threads) };
            }
        }
        for cw in 0..consumer_wgs {
            for b in 0..OUT_BUFS {
                unsafe {
                    ptx::mbarrier_init(out_full(cw, b), WG_THREADS);
                    ptx::mbarrier_init(out_free(cw, b), 1);
                }
            }
        }
        ptx::fence_mbarrier_init();
    }
    ptx::bar_sync();

    let n = p.n;
    let n_tiles = n.div_ceil(BN);
    // Split rows: the first split_rows positions of the row order walk split_chunks virtual rows each.
    let vrows = hopper_virtual_rows(p.block_rows, split_rows, p.split_chunks);
    let tiles = vrows * n_tiles;
    let shape = (vrows, n_tiles, split_rows);
    let index_shift = if p.index64 != 0 { 3 } else { 2 };
    let grid = ptx::grid_dim_x();
    let (tmap_a, tmap_b, tmap_c) = (tmaps, tmaps + 128, tmaps + 256);

    if tid < WG_THREADS {
        // PRODUCER warpgroup: one thread takes the tiles and issues every copy; the others only return their
        // registers.
        ptx::setmaxnreg_dec::<PRODUCER_REGS>();
        if tid != 0 {
            return;
        }
        let counter = tile_counter as *mut u32;
        // Entry j of the queue: tile `t` (>= tiles: no more) whose first k-tile is ring position `it`.
        let publish = |j: u32, t: u32, it: u32| {
            let q = j % TILE_QUEUE;
            // SAFETY: initialised barriers and an entry of the queue; the entry's last reader released it.
            unsafe {
                ptx::mbarrier_wait(q_empty(q), ((j / TILE_QUEUE) & 1) ^ 1);
                ptx::st_shared_v4(q_entry(q), [t, it, 0, 0]);
                ptx::mbarrier_arrive(q_full(q));
            }
        };
        let mut it = 0u32;
        let mut j = 0u32;
        let mut next = ptx::block_idx_x();
        let take = |next: &mut u32| {
            if counter.is_null() {
                *next += grid;
                *next - grid
            } else {
                // SAFETY: the launch's own zeroed counter (HopperSpmmParams::tile_counter).
                unsafe { ptx::atom_global_add_u32(counter, 1) }
            }
        };
        // From tile `t` on, the first with work (or the end): the tile and its N tile and blocks. Parts past a
        // split row's own parts are taken and passed over.
        let locate = |mut t: u32, next: &mut u32| loop {
            if t >= tiles {
                return (t, (0, 0, 0));
            }
            // SAFETY: t is a tile of the launch.
            if let Some(at) = unsafe { tile_at(p, t, shape, index_shift) } {
                return (t, (at.n_tile, at.begin, at.end));
            }
            t = take(next);
        };
        // The next tile is taken before the last block of this one is issued, and its row read after: the
        // counter's atomic and the index loads then run while the ring holds STAGES k-tiles, not between tiles;
        // each block's column index is loaded while the block before it is issued.
        let (mut t, mut here) = locate(take(&mut next), &mut next);
        loop {
            publish(j, t, it);
            j += 1;
            if t >= tiles {
                break;
            }
            let (n_tile, begin, end) = here;
            let n0 = n_tile * BN;
            let mut t_next = if begin == end { take(&mut next) } else { tiles };
            // SAFETY (whole tile): blocks begin..end of a valid structure; every TMA box lies in the tensor maps the
            // host encoded for these operands (out-of-bounds columns of B read as zero), and every slot and barrier
            // lies in the ring.
            let mut col = if begin < end { unsafe { load_index(p.col_idx, begin, index_shift) } } else { 0 };
            for blk in begin..end {
                let k_row0 = col * BS;
                if blk + 1 < end {
                    // SAFETY: blk + 1 is a block of the row.
                    col = unsafe { load_index(p.col_idx, blk + 1, index_shift) };
                } else {
                    t_next = take(&mut next);
                }
                for kk in 0..BS / BK {
                    let s = it % STAGES;
                    unsafe {
                        ptx::mbarrier_wait(empty(s), ((it / STAGES) & 1) ^ 1);
                        ptx::mbarrier_arrive_expect_tx(full(s), stage_bytes);
                        ptx::tma_load_2d(a_slot(s), tmap_a, kk * BK, blk * BS, full(s));
                        if b_col {
                            ptx::tma_load_2d(b_slot(s), tmap_b, k_row0 + kk * BK, n0, full(s));
                        } else if b_chunked {
                            ptx::tma_load_3d(b_slot(s), tmap_b, (0, k_row0 + kk * BK, n0 / 64), full(s));
                        } else {
                            for jb in 0..BN / 64 {
                                ptx::tma_load_2d(
                                    b_slot(s) + jb * 64 * BK * 2,
                                    tmap_b,
                                    n0 + 64 * jb,
                                    k_row0 + kk * BK,
                                    full(s),
                                );
                            }
                        }
                    }
                    it += 1;
                }
            }
            (t, here) = locate(t_next, &mut next);
        }
        // In ping-pong the other set reads the next entry: it gets the end too.
        for _ in 1..sets {
            publish(j, tiles, it);
            j += 1;
        }
        if !counter.is_null() {
            // Count this CTA out after its last take (fenced: the take happens before); the last CTA out sets the
            // counters back to zero for the next launch (fenced: every CTA's takes happen before).
            ptx::fence_acq_rel_gpu();
            // SAFETY: the counters of the launch (two u32).
            unsafe {
                if ptx::atom_global_add_u32(counter.add(1), 1) == grid - 1 {
                    ptx::fence_acq_rel_gpu();
                    ptx::st_global_u32(counter, 0);
                    ptx::st_global_u32(counter.add(1), 0);
                }
            }
        }
        return;
    }

    // CONSUMER warpgroups: set `set` takes entries set, set + sets, ... of the queue.
    ptx::setmaxnreg_inc::<CONSUMER_REGS>();
    let ct = tid - WG_THREADS;
    let set = ct / tile_threads;
    let wg = (ct % tile_threads) / WG_THREADS;
    let wgs_m = WARPS_M / WARPGROUP_WARPS;
    let (wg_m, wg_n) = (wg % wgs_m, wg / wgs_m);
    // The epilogue places each 128-column piece itself (warp_n 0, its own first column).
    let warp = WarpCoord { warp_m: wg_m * WARPGROUP_WARPS + (ct / 32) % WARPGROUP_WARPS, warp_n: 0, lane: ct % 32 };
    // This warpgroup's rows of the A slot (64 rows of 128 bytes) and its first 128-column piece of the B slot.
    let a_off = wg_m * 64 * BK * 2;
    let piece0 = wg_n * PIECES as u32;
    let epi = Epilogue::<O>::from_params(p);
    // This warpgroup's staging buffers, its thread that issues their stores, and the buffers it has filled so far.
    let cw = ct / WG_THREADS;
    let issuer = ct.is_multiple_of(WG_THREADS);
    let mut staged = 0u32;
    let mut j = set;
    loop {
        let q = j % TILE_QUEUE;
        // SAFETY: initialised barriers and an entry of the queue, published by the producer before its phase
        // completes; this set is the entry's only reader until it releases it.
        let [t, it0, _, _] = unsafe {
            ptx::mbarrier_wait(q_full(q), (j / TILE_QUEUE) & 1);
            let entry = ptx::ld_shared_v4(q_entry(q));
            ptx::mbarrier_arrive(q_empty(q));
            entry
        };
        if t >= tiles {
            break;
        }
        if PINGPONG && j > 0 {
            // The m-th tile of set 1 (j = 2m + 1) follows the other set's m-th, that of set 0 (j = 2m) its
            // (m - 1)-th: phase ceil(j / 2) - 1 of turn(set). Strict alternation keeps the phases from aliasing.
            // SAFETY: an initialised barrier; the other set arrives on it after each of its main loops.
            unsafe { ptx::mbarrier_wait(turn(set), (j.div_ceil(2) - 1) & 1) };
        }
        j += sets;
        // SAFETY: t is a tile of the launch, one the producer found work in (so never None).
        let at = unsafe { tile_at(p, t, shape, index_shift) }.unwrap_or(TileAt {
            pos: 0,
            row: 0,
            n_tile: 0,
            part: 0,
            parts: 1,
            begin: 0,
            end: 0,
        });
        let (row, n_tile) = (at.row, at.n_tile);
        let k_tiles = (at.end - at.begin) * (BS / BK);
        let mut acc: [WgmmaAcc; PIECES] = [[[0.0; 4]; 16]; PIECES];
        let mut prev = 0u32;
        for it in it0..it0 + k_tiles {
            let s = it % STAGES;
            // SAFETY (whole k-tile): the slot's full barrier completes when its TMA bytes have landed; the
            // descriptors address this warpgroup's rows of A and its columns of B in that slot.
            unsafe { ptx::mbarrier_wait(full(s), (it / STAGES) & 1) };
            ptx::wgmma_fence();
            for ks in 0..BK / 16 {
                let a_desc = ptx::smem_desc_128b(a_slot(s) + a_off + 32 * ks, 16, 1024);
                let b_desc = |pc: u32| {
                    let piece = piece0 + pc;
                    if b_col {
                        // (BN, 64) K-major tile: 128 rows of 128 bytes per piece.
                        ptx::smem_desc_128b(b_slot(s) + piece * WGMMA_N * BK * 2 + 32 * ks, 16, 1024)
                    } else {
                        // 64 x 64 boxes, two per piece (LBO: the next box), 16 k rows per k16 step.
                        ptx::smem_desc_128b(b_slot(s) + piece * 2 * 64 * BK * 2 + 2048 * ks, 64 * BK * 2, 1024)
                    }
                };
                // The pieces written out (PIECES is 1 or 2), so every accumulator index is a constant: a loop
                // that LLVM leaves rolled would put the accumulators in local memory.
                if PIECES == 2 {
                    // One m64n256: A read once for both pieces (the descriptors of piece 0 reach piece 1 through
                    // LBO / SBO).
                    let both: &mut [WgmmaAcc; 2] = acc.first_chunk_mut::<2>().unwrap_or_else(|| unreachable!());
                    unsafe { I::wgmma2::<TRANS_B>(both, a_desc, b_desc(0)) };
                } else {
                    unsafe { I::wgmma::<TRANS_B>(&mut acc[0], a_desc, b_desc(0)) };
                }
            }
            ptx::wgmma_commit_group();
            // Keep this k-tile's group in flight; the previous one is done, so its slot can be refilled.
            ptx::wgmma_wait_group::<1>();
            if it > it0 {
                // SAFETY: an initialised barrier of the ring.
                unsafe { ptx::mbarrier_arrive(empty(prev)) };
            }
            prev = s;
        }
        if PINGPONG {
            // This set has passed every full barrier of its tile: the other set's next main loop may start.
            // SAFETY: an initialised barrier.
            unsafe { ptx::mbarrier_arrive(turn(1 - set)) };
        }
        ptx::wgmma_wait_group::<0>();
        ptx::wgmma_fence_operand(&mut acc[0]);
        if PIECES == 2 {
            ptx::wgmma_fence_operand(&mut acc[PIECES - 1]);
        }
        if k_tiles > 0 {
            // SAFETY: as above.
            unsafe { ptx::mbarrier_arrive(empty(prev)) };
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
        } else if c_tma {
            // SAFETY: the tile's rows exist in C and the bias; the staging buffers and their barriers are this
            // warpgroup's; C's map covers C (columns >= n are not written).
            unsafe {
                staged = store_staged::<PIECES, OUT_BUFS, O, I>(
                    &epi,
                    &mut acc,
                    (row0, col0 + piece0 * WGMMA_N),
                    (warp, wg_m),
                    tmap_c,
                    (out_stage(cw, 0), out_full(cw, 0), out_free(cw, 0)),
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

/// Defines the sm_90a entry point `$name` from its `layout::VARIANTS` entry (which must exist, be a
/// `Pipeline::TmaWgmma` variant and have the input type, B order and output type given here).
macro_rules! hopper_kernel {
    ($name:ident, $input:ty, $in_type:pat, $b_layout:pat, $b_col:expr, $out:ty, $out_type:pat) => {
        /// sm_90a BSR SpMM entry point; see the module docs.
        ///
        /// # Safety
        /// Launched by the host's typed launcher, which checks the preconditions of [`HopperSpmmParams`].
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(params: HopperSpmmParams) {
            const CFG: KernelConfig =
                variant_config!($name, crate::layout::Pipeline::TmaWgmma { .. }, $in_type, $b_layout, $out_type);
            let tmaps = crate::param0_address!($name);
            // SAFETY: forwarded preconditions; the tensor maps are the parameter's first 256 bytes.
            unsafe {
                hopper_spmm::<
                    { CFG.bs },
                    { CFG.bn },
                    { CFG.warps_m },
                    { CFG.warps_n },
                    { CFG.stages },
                    { (CFG.bn / CFG.warps_n / WGMMA_N) as usize },
                    { if $b_col { 0 } else { 1 } },
                    { CFG.pingpong() },
                    { CFG.out_buffers() },
                    $input,
                    $out,
                >(&params.spmm, tmaps, params.tile_counter, params.c_tma != 0, params.split_rows)
            }
        }
    };
}

/// The sm_90a entry points, one per `layout::VARIANTS` row of the Hopper module, generated by build.rs from the
/// table.
mod product {
    use super::*;

    include!(concat!(env!("OUT_DIR"), "/hopper_entries.rs"));
}
