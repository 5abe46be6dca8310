//! The sm_90a kernels' tile scheduler: which tiles a CTA takes (the launch's tile counter or a static stride), and
//! where a tile's blocks are (its block row in the row order, its N tile, and of a split row its part).

use crate::epilogue::load_index;
use crate::layout::{BsrSpmmParams, hopper_virtual_row, raster, split_parts};
use crate::ptx;

/// The block row at position `pos` of the CTAs' row order, and its nonzero blocks `(begin, end)`.
///
/// # Safety
/// `p` satisfies the kernel's preconditions and `pos < p.block_rows`.
#[inline(always)]
unsafe fn row_at(p: &BsrSpmmParams, pos: u32, index_shift: u32) -> (u32, u32, u32) {
    let row_order = p.row_order as *const u32;
    // SAFETY: row_order is null or a permutation of the block rows; row_ptr has block_rows + 1 entries.
    unsafe {
        let row = if row_order.is_null() { pos } else { ptx::ld_global_u32(row_order.add(pos as usize)) };
        (row, load_index(p.row_ptr, row, index_shift), load_index(p.row_ptr, row + 1, index_shift))
    }
}

/// One tile of a launch: N tile `n_tile` of block row `row`, at position `pos` of the row order, and of it part
/// `part` of `parts` (blocks `begin..end`; one part unless the row is split).
#[derive(Clone, Copy)]
pub(super) struct TileAt {
    pub(super) pos: u32,
    pub(super) row: u32,
    pub(super) n_tile: u32,
    pub(super) part: u32,
    pub(super) parts: u32,
    pub(super) begin: u32,
    pub(super) end: u32,
}

/// Tile `t` (< `vrows * n_tiles`, [`hopper_virtual_rows`](crate::layout::hopper_virtual_rows)) of the launch, or
/// `None` for a part past its row's parts (a split row shorter than `split_chunks` parts: nothing to do).
///
/// # Safety
/// `p` satisfies the kernel's preconditions and `t` is below the launch's tiles.
#[inline(always)]
pub(super) unsafe fn tile_at(
    p: &BsrSpmmParams,
    t: u32,
    (vrows, n_tiles, split_rows): (u32, u32, u32),
    shift: u32,
) -> Option<TileAt> {
    let (vpos, n_tile) = raster(t, vrows, n_tiles, p.group_rows);
    let (pos, part, split) = hopper_virtual_row(vpos, split_rows, p.split_chunks);
    // SAFETY: pos < block_rows (the caller's t is a tile of the launch).
    let (row, row_begin, row_end) = unsafe { row_at(p, pos, shift) };
    let len = row_end - row_begin;
    let parts = if split { split_parts(len, p.split_blocks, p.split_chunks) } else { 1 };
    if part >= parts {
        return None;
    }
    if parts == 1 {
        // A whole row (every tile of a launch without split rows): no division on the way to its first copy.
        return Some(TileAt { pos, row, n_tile, part, parts, begin: row_begin, end: row_end });
    }
    let start = |i: u32| row_begin + (i as u64 * len as u64 / parts as u64) as u32;
    Some(TileAt { pos, row, n_tile, part, parts, begin: start(part), end: start(part + 1) })
}

/// Where a CTA's producer takes its tiles from: the launch's tile counter (`HopperSpmmParams::tile_counter`, a
/// persistent grid: each take an atomic add), or, without one, tiles `c, c + grid, ...` for CTA `c`.
pub(super) struct TileSource {
    counter: *mut u32,
    next: u32,
    grid: u32,
}

impl TileSource {
    /// The source of this CTA (`tile_counter`: the parameter's, 0 for none).
    #[inline(always)]
    pub(super) fn new(tile_counter: u64, grid: u32) -> Self {
        TileSource { counter: tile_counter as *mut u32, next: ptx::block_idx_x(), grid }
    }

    /// The next tile this CTA takes (past the launch's tiles once they are all taken).
    ///
    /// # Safety
    /// The counter, when there is one, is the launch's own (zeroed before it).
    #[inline(always)]
    pub(super) unsafe fn take(&mut self) -> u32 {
        if self.counter.is_null() {
            self.next += self.grid;
            self.next - self.grid
        } else {
            // SAFETY: the launch's own zeroed counter (HopperSpmmParams::tile_counter).
            unsafe { ptx::atom_global_add_u32(self.counter, 1) }
        }
    }

    /// Counts this CTA out after its last take (fenced: the take happens before); the last CTA out sets the
    /// counters back to zero for the next launch (fenced: every CTA's takes happen before). Nothing without a
    /// counter.
    ///
    /// # Safety
    /// As [`TileSource::take`]: the launch's two counters.
    #[inline(always)]
    pub(super) unsafe fn finish(self) {
        if !self.counter.is_null() {
            ptx::fence_acq_rel_gpu();
            // SAFETY: the counters of the launch (two u32).
            unsafe {
                if ptx::atom_global_add_u32(self.counter.add(1), 1) == self.grid - 1 {
                    ptx::fence_acq_rel_gpu();
                    ptx::st_global_u32(self.counter, 0);
                    ptx::st_global_u32(self.counter.add(1), 0);
                }
            }
        }
    }
}
