//! The sm_90a kernels' split rows: a split row's parts hand their accumulators over, one consumer warp at a time,
//! and the last part's warps write C.

use super::scheduler::TileAt;
use crate::layout::{BsrSpmmParams, hopper_split_slot};
use crate::ptx;
use crate::ptx::WgmmaAcc;
use crate::reduce::{self, SlotLane};

/// A split row's hand-over, one consumer warp at a time: the warp stores its f32 accumulators (its 16 rows of the
/// tile) to this part's slot of the workspace, each lane fences and counts itself in on the warp's counter
/// ([`hopper_split_counter`](crate::layout::hopper_split_counter)), and the warp holding the last count adds the
/// parts' accumulators in part order (the same bits whichever part finishes last), resets the counter and returns
/// `true`; the others return `false` and write nothing. No warp waits for another part: the last one only reads
/// what every part stored before counting.
///
/// The slots, the counts and the sum are [`crate::reduce`]'s: a slot holds the tile's accumulators thread-major per
/// 16 bytes, quadruple `q` (of `PIECES * 16`) of the tile's consumer thread `thread` (of `tile_threads`) at byte
/// `(q * tile_threads + thread) * 16`.
///
/// # Safety
/// Warp-collective (every lane, warp-uniform control flow); the launch's split partials and counters cover the
/// split rows' slots and counters (host: `split_rows * split_chunks * n_tiles` slots of the tile's f32 accumulators,
/// `split_rows * n_tiles * tile warps` counters), which are zero before the launch.
#[inline(always)]
pub(super) unsafe fn hand_over<const PIECES: usize>(
    acc: &mut [WgmmaAcc; PIECES],
    p: &BsrSpmmParams,
    at: &TileAt,
    (n_tiles, counter): (u32, u64),
    (thread, tile_threads): (u32, u32),
) -> bool {
    let slot_bytes = tile_threads as u64 * PIECES as u64 * 16 * 16;
    let slot = |i: u32| {
        let s = hopper_split_slot(at.pos, i, p.split_chunks, at.n_tile, n_tiles);
        (p.split_partials + s * slot_bytes) as *mut u32
    };
    let lane = SlotLane { tid: thread, threads: tile_threads };
    // SAFETY: this part's slot, inside the workspace (the caller's contract).
    unsafe { reduce::store_tile(slot(at.part), lane, acc) };
    // Each lane publishes its own stores at GPU scope, then counts itself in: 32 counts per part.
    let count = (p.split_counters as *mut u32).wrapping_add(counter as usize);
    let full = 32 * at.parts;
    // SAFETY: the tile's counter (the caller's contract).
    if ptx::ballot(unsafe { reduce::arrive(|| count, full) }) == 0 {
        return false;
    }
    // This warp made the last count. Every lane reads the full count itself (it is there: the last atomic has
    // returned) and fences, so that every part's stores, each released before its lane's count, are visible to it.
    // SAFETY: as above.
    while unsafe { ptx::ld_relaxed_gpu_u32(count) } != full {}
    ptx::fence_acq_rel_gpu();
    if ptx::ballot(true) != 0 && thread % 32 == 0 {
        // Every lane has read the full count: the next launch finds the counter at zero.
        // SAFETY: as above.
        unsafe { ptx::st_global_u32(count, 0) };
    }
    // SAFETY: every part's slot, written and published before its count (above).
    unsafe { reduce::sum_parts(acc, (at.parts, None), slot, lane) };
    true
}
