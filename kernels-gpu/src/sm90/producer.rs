//! The sm_90a kernels' producer: one thread takes the CTA's tiles ([`TileSource`]), publishes each in the tile queue
//! and issues the TMA copies of its k-tiles into the ring (see the module docs of [`super`]).

use super::scheduler::{TileSource, tile_at};
use super::{BK, Launch, SDDMM_END, Smem, src};
use crate::epilogue::{block_row_of, load_index};
use crate::layout::{BsrSpmmParams, SDDMM_LAST_GROUP, TILE_QUEUE};
use crate::ptx;

/// An SDDMM tile's group: `count` stored blocks from `start` of block row `row` (which ends at block `end`), and
/// whether the row's groups go on past it in the same tile (`more`: a tile list's last entry of a row with blocks
/// left).
#[derive(Clone, Copy)]
struct Group {
    start: u32,
    count: u32,
    row: u32,
    end: u32,
    more: bool,
}

impl Group {
    /// No group (past the last tile).
    const NONE: Group = Group { start: 0, count: 0, row: 0, end: 0, more: false };

    /// The group from block `start` (< `end`) of block row `row` in groups of `group` blocks; `last`: the tile
    /// list's last entry of the row, which takes the row's groups past it.
    #[inline(always)]
    fn at(start: u32, row: u32, end: u32, group: u32, last: bool) -> Group {
        let left = end - start;
        Group { start, count: left.min(group), row, end, more: last && left > group }
    }
}

/// The producer thread's whole work: every tile of the CTA, then an end entry for each consumer set, then the
/// tile counter's count-out.
///
/// `SRC` ([`src`]) says where A's boxes come from: a stored block (the forward: K-major, `BS x 64` at the block's
/// rows; A^T @ B: block `perm[blk]`'s 64 rows of the k-tile as `BS / 64` MN-major boxes of 64 x 64) or X's rows of
/// the stored block's block row (SDDMM: K-major `BS x 64`, or a column-major X's `BS / 64` MN-major boxes). B's
/// boxes are the forward's at the tile's k rows and N columns (SDDMM: Y^T's k-tile, the block's BS columns).
///
/// # Safety
/// One thread of the CTA (the producer warpgroup's first), after the barriers' initialisation; `p`, the tensor
/// maps (`tmap_a`, `tmap_b`) and `tile_counter` as the kernel's (`hopper_spmm`).
#[inline(always)]
pub(super) unsafe fn produce<const BS: u32, const BN: u32, const STAGES: u32, const OUT_BUFS: u32, const SRC: u32>(
    p: &BsrSpmmParams,
    smem: Smem<STAGES, OUT_BUFS>,
    launch: Launch,
    (tmap_a, tmap_b): (u64, u64),
    (b_col, b_chunked): (bool, bool),
    tile_counter: u64,
) {
    let Launch { tiles, shape, index_shift, sets, .. } = launch;
    let mut source = TileSource::new(tile_counter, ptx::grid_dim_x());
    // Entry j of the queue: tile `t` (>= tiles: no more) whose first k-tile is ring position `it`, and `extra`
    // (an SDDMM tile's block count).
    let publish = |j: u32, t: u32, it: u32, extra: u32| {
        let q = j % TILE_QUEUE;
        // SAFETY: initialised barriers and an entry of the queue; the entry's last reader released it.
        unsafe {
            ptx::mbarrier_wait(smem.q_empty(q), ((j / TILE_QUEUE) & 1) ^ 1);
            ptx::st_shared_v4(smem.q_entry(q), [t, it, extra, 0]);
            ptx::mbarrier_arrive(smem.q_full(q));
        }
    };
    // Ring position `it`'s slot, once its last readers released it, announced for `bytes` of TMA copies: (full
    // barrier, A's part, B's part).
    let acquire = |it: u32, bytes: u32| {
        let s = it % STAGES;
        // SAFETY: initialised barriers of the ring; the producer is their only arriving thread for `full`.
        unsafe {
            ptx::mbarrier_wait(smem.empty(s), ((it / STAGES) & 1) ^ 1);
            ptx::mbarrier_arrive_expect_tx(smem.full(s), bytes);
        }
        (smem.full(s), smem.a_slot(s), smem.b_slot(s))
    };
    // A's box(es) of a k-tile at `a_at` (column, row of A's map; MN-major: the first box's, the next ones 64
    // columns on).
    // SAFETY (the copies here and below): every slot lies in the ring and every TMA box in the tensor maps the
    // host encoded for these operands (out-of-bounds rows and columns read as zero).
    let load_a = |a_slot: u32, a_at: (u32, u32), full: u32| unsafe {
        if src::a_mn_major(SRC) {
            for jb in 0..BS / 64 {
                ptx::tma_load_2d(a_slot + jb * 64 * BK * 2, tmap_a, (a_at.0 + 64 * jb, a_at.1), full);
            }
        } else {
            ptx::tma_load_2d(a_slot, tmap_a, a_at, full);
        }
    };
    // One k-tile of the forward or A^T @ B into ring position `it`: A's box(es) at `a_at` and B's 64 rows from k row
    // `b_k`, BN columns from `n0`.
    let issue = |it: u32, a_at: (u32, u32), b_k: u32, n0: u32| {
        let (full, a_slot, b_slot) = acquire(it, smem.stage_bytes);
        load_a(a_slot, a_at, full);
        // SAFETY: as above.
        unsafe {
            if b_col {
                ptx::tma_load_2d(b_slot, tmap_b, (b_k, n0), full);
            } else if b_chunked {
                ptx::tma_load_3d(b_slot, tmap_b, (0, b_k, n0 / 64), full);
            } else {
                for jb in 0..BN / 64 {
                    ptx::tma_load_2d(b_slot + jb * 64 * BK * 2, tmap_b, (n0 + 64 * jb, b_k), full);
                }
            }
        }
    };
    let mut it = 0u32;
    let mut j = 0u32;
    if src::sddmm(SRC) {
        // A tile is a group of up to G = BN / BS consecutive stored blocks of one block row: X's rows of the block
        // row (read once) and Y's rows of each block's column over ceil(K / 64) k-tiles (past K the TMA reads
        // zeros). With the structure's tile list (`sddmm_list`), tile t is its entry t: group g of a block row,
        // where a row's last entry also takes the row's groups past it (none for a list of this structure);
        // without one, tile t is the group from stored block t, which has work only where t is G blocks on from
        // its row's start (the others are passed over).
        const { assert!(BN / BS <= super::SDDMM_GROUP_MAX) };
        let group = BN / BS;
        let k_tiles = p.k.div_ceil(BK);
        let a_bytes = smem.stage_bytes - BK * BN * 2;
        let list = p.sddmm_list as *const u32;
        // From tile `t` on, the first with work (or the end): the tile and its group.
        let locate = |mut t: u32, source: &mut TileSource| loop {
            if t >= tiles {
                return (t, Group::NONE);
            }
            if !list.is_null() {
                // SAFETY: t < sddmm_tiles, the list's entries; its rows are block rows of the structure.
                let (row, g, begin, end) = unsafe {
                    let row = ptx::ld_global_u32(list.add(2 * t as usize));
                    let g = ptx::ld_global_u32(list.add(2 * t as usize + 1));
                    (row, g, load_index(p.row_ptr, row, index_shift), load_index(p.row_ptr, row + 1, index_shift))
                };
                let start = begin as u64 + (g & !SDDMM_LAST_GROUP) as u64 * group as u64;
                if start < end as u64 {
                    return (t, Group::at(start as u32, row, end, group, g & SDDMM_LAST_GROUP != 0));
                }
            } else {
                // SAFETY: t is a stored block of the valid structure (t < nnzb).
                let (row, begin, end) = unsafe {
                    let row = block_row_of(p.row_ptr, p.block_rows, t, index_shift);
                    (row, load_index(p.row_ptr, row, index_shift), load_index(p.row_ptr, row + 1, index_shift))
                };
                if (t - begin).is_multiple_of(group) {
                    return (t, Group::at(t, row, end, group, false));
                }
            }
            // SAFETY: the caller's contract.
            t = unsafe { source.take() };
        };
        // SAFETY (takes): the caller's contract.
        let first = unsafe { source.take() };
        let (mut t, mut grp) = locate(first, &mut source);
        loop {
            if t >= tiles {
                publish(j, SDDMM_END, it, 0);
                j += 1;
                break;
            }
            publish(j, grp.start, it, grp.count);
            j += 1;
            // The next tile is found while this one's k-tiles stream (its loads then run under them); a row's last
            // entry with groups past it goes on in its row.
            // SAFETY: the caller's contract.
            let t_next = if grp.more { t } else { unsafe { source.take() } };
            let (start, count) = (grp.start, grp.count);
            // The group's block columns (count <= G of them; the rest of the slot's B is not loaded), one by one so
            // they stay in registers.
            // SAFETY: start + g < the row's end for g < count.
            let col = |g: u32| {
                if g < count && g < group { unsafe { load_index(p.col_idx, start + g, index_shift) } } else { 0 }
            };
            let cols = (col(0), col(1), col(2), col(3));
            let block_bytes = BK * BS * 2;
            // Block g's k-tile from k row k0 into the slot's B at `b_slot` (column c of the structure).
            let load_b = |b_slot: u32, full: u32, k0: u32, g: u32, c: u32| {
                if g < count && g < group {
                    // SAFETY: as above (Y's map has BS-row boxes for a column-major Y^T, 64 x 64 for a row-major one).
                    unsafe {
                        if b_col {
                            // (BN, 64) K-major tile: block g's BS rows of 128 bytes.
                            ptx::tma_load_2d(b_slot + g * block_bytes, tmap_b, (k0, c * BS), full);
                        } else {
                            // 64 x 64 boxes: block g's BS / 64 of them.
                            for jb in 0..BS / 64 {
                                let dst = b_slot + (g * BS / 64 + jb) * 64 * BK * 2;
                                ptx::tma_load_2d(dst, tmap_b, (c * BS + 64 * jb, k0), full);
                            }
                        }
                    }
                }
            };
            for kt in 0..k_tiles {
                let k0 = kt * BK;
                let (full, a_slot, b_slot) = acquire(it, a_bytes + count * block_bytes);
                let a_row0 = grp.row * BS;
                load_a(a_slot, if src::a_mn_major(SRC) { (a_row0, k0) } else { (k0, a_row0) }, full);
                load_b(b_slot, full, k0, 0, cols.0);
                load_b(b_slot, full, k0, 1, cols.1);
                load_b(b_slot, full, k0, 2, cols.2);
                load_b(b_slot, full, k0, 3, cols.3);
                it += 1;
            }
            if grp.more {
                grp = Group::at(start + group, grp.row, grp.end, group, true);
            } else {
                (t, grp) = locate(t_next, &mut source);
            }
        }
    } else {
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
        // The stored block of entry `blk`: itself, or A^T's `perm[blk]` (u32).
        let stored = |blk: u32| {
            if SRC == src::TRANSPOSED {
                // SAFETY: blk is an entry of the transposed index, which holds nnzb u32 permutation entries.
                unsafe { ptx::ld_global_u32((p.perm as *const u32).add(blk as usize)) }
            } else {
                blk
            }
        };
        // The next tile is taken before the last block of this one is issued, and its row read after: the counter's
        // atomic and the index loads then run while the ring holds STAGES k-tiles, not between tiles; each block's
        // column index (and stored block) is loaded while the block before it is issued.
        // SAFETY (takes): the caller's contract.
        let first = unsafe { source.take() };
        let (mut t, mut here) = locate(first, &mut source);
        loop {
            publish(j, t, it, 0);
            j += 1;
            if t >= tiles {
                break;
            }
            let (n_tile, begin, end) = here;
            let n0 = n_tile * BN;
            let mut t_next = if begin == end { unsafe { source.take() } } else { tiles };
            // SAFETY (whole tile): blocks begin..end of a valid structure (or transposed index).
            let (mut col, mut at_blk) = if begin < end {
                (unsafe { load_index(p.col_idx, begin, index_shift) }, stored(begin))
            } else {
                (0, 0)
            };
            for blk in begin..end {
                let (k_row0, a_row0) = (col * BS, at_blk * BS);
                if blk + 1 < end {
                    // SAFETY: blk + 1 is a block of the row.
                    col = unsafe { load_index(p.col_idx, blk + 1, index_shift) };
                    at_blk = stored(blk + 1);
                } else {
                    t_next = unsafe { source.take() };
                }
                for kk in 0..BS / BK {
                    // A^T @ B: the stored block's rows kk * 64.. are the k rows; the forward reads its columns.
                    let a_at = if src::a_mn_major(SRC) { (0, a_row0 + kk * BK) } else { (kk * BK, a_row0) };
                    issue(it, a_at, k_row0 + kk * BK, n0);
                    it += 1;
                }
            }
            (t, here) = locate(t_next, &mut source);
        }
    }
    // In ping-pong the other set reads the next entry: it gets the end too.
    let end = if src::sddmm(SRC) { SDDMM_END } else { tiles };
    for _ in 1..sets {
        publish(j, end, it, 0);
        j += 1;
    }
    // SAFETY: the caller's contract.
    unsafe { source.finish() };
}
