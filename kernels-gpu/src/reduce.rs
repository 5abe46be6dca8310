//! The one deterministic cross-CTA reduction: partial accumulator tiles stored to slots of the split workspace,
//! published (fence) and counted in on a counter, and added in part order by whoever counts in last (or, in the
//! flat block list, by the row's first CTA once every other piece is in), so that a sum has the same bits
//! whichever CTA finishes last. Its users differ only in who holds a tile and where its slot is: the split rows
//! of the sm_80 template (`sm80::bsr`, a CTA per part), the flat block list's cut rows (`sm80::flat`, a CTA per
//! piece) and the sm_90a split rows (`sm90::split`, a warp per part).
//!
//! A slot holds a tile's f32 accumulators thread-major per 16 bytes ([`SlotLane`]): quadruple `q` of thread `tid`
//! (of `threads` holding the tile) at byte `(q * threads + tid) * 16`, so each store and load instruction of the
//! holders covers contiguous memory, and each thread reads back only what the same thread of another part wrote.
//! A tile is any `[[[f32; 4]; NI]; MI]`: an mma.sync accumulator tile (`tile::AccTile`) or a consumer warp's
//! wgmma accumulators (`[WgmmaAcc; PIECES]`).
// (The tuning and sm_90a modules use only some of these.)
#![cfg_attr(any(feature = "tune-kernels", feature = "sm90"), allow(dead_code))]

use crate::ptx;

/// A tile of f32 accumulators, as quadruples: `MI x NI` of them.
pub(crate) type Quads<const MI: usize, const NI: usize> = [[[f32; 4]; NI]; MI];

/// This thread's place in every slot: thread `tid` of the `threads` that hold a tile.
#[derive(Clone, Copy)]
pub(crate) struct SlotLane {
    pub(crate) tid: u32,
    pub(crate) threads: u32,
}

impl SlotLane {
    /// This thread's quadruple `q` in the slot at `base`.
    #[inline(always)]
    pub(crate) fn at(self, base: *mut u32, q: usize) -> *mut u32 {
        base.wrapping_add((q * self.threads as usize + self.tid as usize) * 4)
    }
}

/// Stores this thread's quadruples of `tile` to the slot at `base`.
///
/// # Safety
/// The slot lies in the launch's workspace.
#[inline(always)]
pub(crate) unsafe fn store_tile<const MI: usize, const NI: usize>(
    base: *mut u32,
    lane: SlotLane,
    tile: &Quads<MI, NI>,
) {
    for (mi, tile_m) in tile.iter().enumerate() {
        for (ni, v) in tile_m.iter().enumerate() {
            let bits = [v[0].to_bits(), v[1].to_bits(), v[2].to_bits(), v[3].to_bits()];
            // SAFETY: the caller's contract.
            unsafe { ptx::st_global_v4(lane.at(base, mi * NI + ni), bits) };
        }
    }
}

/// This thread's quadruple `q` of the slot at `base` (from L2: another part wrote it).
///
/// # Safety
/// As [`store_tile`], and the slot was published to this thread (its writer's fence before its count, then an
/// acquire: this thread's fence after the count, or thread 0's before a barrier).
#[inline(always)]
pub(crate) unsafe fn load_quad(base: *mut u32, lane: SlotLane, q: usize) -> [f32; 4] {
    // SAFETY: the caller's contract.
    unsafe { ptx::ld_global_cg_v4(lane.at(base, q)) }.map(f32::from_bits)
}

/// This thread's quadruples of the tile in the slot at `base`.
///
/// # Safety
/// As [`load_quad`].
#[inline(always)]
pub(crate) unsafe fn load_tile<const MI: usize, const NI: usize>(base: *mut u32, lane: SlotLane) -> Quads<MI, NI> {
    let mut t: Quads<MI, NI> = [[[0.0; 4]; NI]; MI];
    for (mi, t_m) in t.iter_mut().enumerate() {
        for (ni, v) in t_m.iter_mut().enumerate() {
            // SAFETY: the caller's contract.
            *v = unsafe { load_quad(base, lane, mi * NI + ni) };
        }
    }
    t
}

/// `sum += t` element-wise, or `sum = t` (`first`: the first part of a sum).
#[inline(always)]
pub(crate) fn add_quad(sum: &mut [f32; 4], t: [f32; 4], first: bool) {
    for e in 0..4 {
        sum[e] = if first { t[e] } else { sum[e] + t[e] };
    }
}

/// [`add_quad`] over a tile.
#[inline(always)]
pub(crate) fn add_tile<const MI: usize, const NI: usize>(sum: &mut Quads<MI, NI>, t: &Quads<MI, NI>, first: bool) {
    for (sum_m, t_m) in sum.iter_mut().zip(t.iter()) {
        for (v, w) in sum_m.iter_mut().zip(t_m.iter()) {
            add_quad(v, *w, first);
        }
    }
}

/// Publishes this thread's stores at GPU scope and adds one count to the counter at `counter()` (its address is
/// taken after the fence); the counter, and whether this was the last of `total` counts.
///
/// # Safety
/// The counter lies in the launch's workspace.
#[inline(always)]
unsafe fn count(counter: impl FnOnce() -> *mut u32, total: u32) -> (*mut u32, bool) {
    ptx::fence_acq_rel_gpu();
    let counter = counter();
    // SAFETY: the caller's contract.
    (counter, unsafe { ptx::atom_global_add_u32(counter, 1) } == total - 1)
}

/// [`count`]'s verdict alone: whether this thread made the last of `total` counts on the counter at `counter()`.
///
/// # Safety
/// As [`count`].
#[cfg_attr(not(feature = "sm90"), allow(dead_code))] // (the sm_90a split rows' count)
#[inline(always)]
pub(crate) unsafe fn arrive(counter: impl FnOnce() -> *mut u32, total: u32) -> bool {
    // SAFETY: the caller's contract.
    unsafe { count(counter, total) }.1
}

/// Counts one of `parts` parts in on the counter at `counter()` ([`count`]) and returns whether it was the last:
/// then every part's slot is readable (by this thread, and by its CTA after a barrier) and the counter is zero
/// again for the next launch. One thread per part, after a barrier behind the part's stores.
///
/// # Safety
/// As [`count`].
#[inline(always)]
pub(crate) unsafe fn count_in(counter: impl FnOnce() -> *mut u32, parts: u32) -> bool {
    // SAFETY: the caller's contract.
    let (counter, last) = unsafe { count(counter, parts) };
    if last {
        // Every part has counted in: the next launch finds the counter at zero.
        // SAFETY: as above.
        unsafe { ptx::st_global_u32(counter, 0) };
        ptx::fence_acq_rel_gpu();
    }
    last
}

/// `acc = part 0 + part 1 + ... + part (parts - 1)`, added in part order, one quadruple at a time: part `i` from
/// the slot at `slot(i)`, except part `own` (this thread's, if any), which `acc` holds (bit-identical to what it
/// stored).
///
/// # Safety
/// As [`load_quad`], for every part but `own`.
#[inline(always)]
pub(crate) unsafe fn sum_parts<const MI: usize, const NI: usize>(
    acc: &mut Quads<MI, NI>,
    (parts, own): (u32, Option<u32>),
    slot: impl Fn(u32) -> *mut u32,
    lane: SlotLane,
) {
    let mine = *acc;
    let mut i = 0;
    while i < parts {
        let base = slot(i);
        for (mi, acc_m) in acc.iter_mut().enumerate() {
            for (ni, v) in acc_m.iter_mut().enumerate() {
                // SAFETY: the caller's contract.
                let t = if own == Some(i) { mine[mi][ni] } else { unsafe { load_quad(base, lane, mi * NI + ni) } };
                add_quad(v, t, i == 0);
            }
        }
        i += 1;
    }
}
