//! The sm_90a kernels' producer: one thread takes the CTA's tiles ([`TileSource`]), publishes each in the tile queue
//! and issues the TMA copies of its k-tiles into the ring (see the module docs of [`super`]).

use super::scheduler::{TileSource, tile_at};
use super::{BK, Launch, Smem};
use crate::epilogue::load_index;
use crate::layout::{BsrSpmmParams, TILE_QUEUE};
use crate::ptx;

/// The producer thread's whole work: every tile of the CTA, then an end entry for each consumer set, then the
/// tile counter's count-out.
///
/// # Safety
/// One thread of the CTA (the producer warpgroup's first), after the barriers' initialisation; `p`, the tensor
/// maps (`tmap_a`, `tmap_b`) and `tile_counter` as the kernel's (`hopper_spmm`).
#[inline(always)]
pub(super) unsafe fn produce<const BS: u32, const BN: u32, const STAGES: u32, const OUT_BUFS: u32>(
    p: &BsrSpmmParams,
    smem: Smem<STAGES, OUT_BUFS>,
    launch: Launch,
    (tmap_a, tmap_b): (u64, u64),
    (b_col, b_chunked): (bool, bool),
    tile_counter: u64,
) {
    let Launch { tiles, shape, index_shift, sets, .. } = launch;
    let mut source = TileSource::new(tile_counter, ptx::grid_dim_x());
    // Entry j of the queue: tile `t` (>= tiles: no more) whose first k-tile is ring position `it`.
    let publish = |j: u32, t: u32, it: u32| {
        let q = j % TILE_QUEUE;
        // SAFETY: initialised barriers and an entry of the queue; the entry's last reader released it.
        unsafe {
            ptx::mbarrier_wait(smem.q_empty(q), ((j / TILE_QUEUE) & 1) ^ 1);
            ptx::st_shared_v4(smem.q_entry(q), [t, it, 0, 0]);
            ptx::mbarrier_arrive(smem.q_full(q));
        }
    };
    let mut it = 0u32;
    let mut j = 0u32;
    // From tile `t` on, the first with work (or the end): the tile and its N tile and blocks. Parts past a split
    // row's own parts are taken and passed over.
    let locate = |mut t: u32, source: &mut TileSource| loop {
        if t >= tiles {
            return (t, (0, 0, 0));
        }
        // SAFETY: t is a tile of the launch.
        if let Some(at) = unsafe { tile_at(p, t, shape, index_shift) } {
            return (t, (at.n_tile, at.begin, at.end));
        }
        // SAFETY: the caller's contract (the launch's counter).
        t = unsafe { source.take() };
    };
    // The next tile is taken before the last block of this one is issued, and its row read after: the counter's
    // atomic and the index loads then run while the ring holds STAGES k-tiles, not between tiles; each block's
    // column index is loaded while the block before it is issued.
    // SAFETY (takes): the caller's contract.
    let first = unsafe { source.take() };
    let (mut t, mut here) = locate(first, &mut source);
    loop {
        publish(j, t, it);
        j += 1;
        if t >= tiles {
            break;
        }
        let (n_tile, begin, end) = here;
        let n0 = n_tile * BN;
        let mut t_next = if begin == end { unsafe { source.take() } } else { tiles };
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
                t_next = unsafe { source.take() };
            }
            for kk in 0..BS / BK {
                let s = it % STAGES;
                let (full, a_slot, b_slot) = (smem.full(s), smem.a_slot(s), smem.b_slot(s));
                unsafe {
                    ptx::mbarrier_wait(smem.empty(s), ((it / STAGES) & 1) ^ 1);
                    ptx::mbarrier_arrive_expect_tx(full, smem.stage_bytes);
                    ptx::tma_load_2d(a_slot, tmap_a, (kk * BK, blk * BS), full);
                    if b_col {
                        ptx::tma_load_2d(b_slot, tmap_b, (k_row0 + kk * BK, n0), full);
                    } else if b_chunked {
                        ptx::tma_load_3d(b_slot, tmap_b, (0, k_row0 + kk * BK, n0 / 64), full);
                    } else {
                        for jb in 0..BN / 64 {
                            ptx::tma_load_2d(b_slot + jb * 64 * BK * 2, tmap_b, (n0 + 64 * jb, k_row0 + kk * BK), full);
                        }
                    }
                }
                it += 1;
            }
        }
        (t, here) = locate(t_next, &mut source);
    }
    // In ping-pong the other set reads the next entry: it gets the end too.
    for _ in 1..sets {
        publish(j, tiles, it);
        j += 1;
    }
    // SAFETY: the caller's contract.
    unsafe { source.finish() };
}
