//! The flat block list (issue 12): the narrow tile of bs 64 and 128, and bs 64's tiles of 32 and 64 columns, with every
//! CTA multiplying an equal share of A's nonzero blocks, whatever the rows' lengths. For decode products (16384 x
//! 16384 at 1 to 64 columns) whose block rows hold binomial numbers of blocks, one CTA per row waits on the
//! longest rows; equal rows measured 1.1-1.5 µs (3-4%) faster at 8 columns and 5.6 µs (13%) at 64, and skewed
//! rows 2-3x faster at 32 and 64 (docs/perf-notes.md, issue 12 steps 18 and 24-26).
//!
//! CTA `c` of `G = flat_ctas` (N tile `blockIdx.x / G`) multiplies blocks `[c * nnzb / G, (c + 1) * nnzb / G)`
//! (`layout::flat_range`) with one cp.async ring that runs across row boundaries: the copies need only block
//! indices, so the prefetch and main loop are the narrow tile's ([`super::bsr`]'s stages and its one fragment
//! double-buffered main loop, `mainloop_frag_db`, with the segments' work as its hooks, [`SegmentEnds`]; whole
//! rows pass no hooks, so none of it is compiled into them: run-time hooks in `bsr_spmm` made the whole-row
//! kernels 3-12% slower, docs/perf-notes.md issue 12 step 23). The rows the range
//! touches are found while the prefetch's copies are in flight: a window of 32 `row_ptr` entries at the row where
//! `b0` would fall with rows of equal length, loaded before the prefetch and read by shuffles, and a 32-way search
//! of `row_ptr` per warp only when the answer lies outside it. In the order of the blocks a CTA meets:
//! - a **head** piece: the end of a row that an earlier CTA began (or, when the range lies inside one row, a
//!   middle piece). Its partial tile is stored to the CTA's head slot as it ends and counted in on the row's
//!   counter by one thread after the next main-loop barrier, early, so that the row's first CTA usually finds it
//!   in;
//! - **whole rows** (empty ones included: `beta * C`), each written to C by the epilogue as it ends;
//! - a **tail** piece: the start of a row that later CTAs finish. Every thread looks at the row's counter once
//!   all the CTA's copies are issued (a relaxed load, read a k-tile later) and, once every other piece is in,
//!   reads their sum under the ring's last k-tiles (bs 64's narrow tile; the other tiles, short of registers for
//!   a second tile, look at the end); at the end the CTA writes the row as `acc + rest` without
//!   storing its own piece. If the pieces are not all in by the end, the CTA stores its piece and counts in, and
//!   the row's last piece to count in sums the row. No CTA ever waits on another.
//!
//! Every cut row is summed as `piece 0 + (piece 1 + piece 2 + ...)`, in that order whichever CTA sums it and
//! whenever the later pieces were read: the same bits run to run.
//!
//! Parameters and preconditions: `layout::BsrSpmmParams` (`flat_ctas`, `nnzb`, the split workspace), checked by
//! the host launcher. f16 inputs, row-major B and f32 C only (`layout::Tile::Flat`: the narrow tiles of bs 64
//! and 128; `layout::Tile::Flat32`, `layout::Tile::Flat64`: bs 64's tiles of 32 and 64 columns).

use super::bsr::src::FORWARD;
use super::bsr::{CtaOperands, MAX_STAGES, MainLoopHooks, load_a_slice, load_b_strip, mainloop_frag_db};
use crate::epilogue::{Epilogue, F16In, WarpCoord, load_index, store_epilogue};
use crate::layout::{BsrSpmmParams, CHUNK_HALVES, KernelConfig, flat_counter, flat_cta_of, flat_range, flat_slot};
use crate::ptx;
use crate::reduce::{self, SlotLane, add_tile};
use crate::tile::{AccTile, SmemRing};

/// A row cut by the CTAs' ranges: its pieces are held by CTAs `first ..= first + parts - 1`.
#[derive(Clone, Copy)]
struct CutRow {
    row: u32,
    first: u32,
    parts: u32,
}

/// This thread's view of the split workspace for one N tile: the partial-tile slots ([`crate::reduce`]'s layout)
/// and the counters.
#[derive(Clone, Copy)]
struct Workspace {
    partials: u64,
    counters: u64,
    slot_bytes: u64,
    n_tile: u32,
    n_tiles: u32,
    tid: u32,
    /// The slots' lane from this thread's first u32 ([`Workspace::piece`]): thread 0's of `threads`.
    lane: SlotLane,
}

impl Workspace {
    /// This thread's first u32 of piece `i` of `cut`: piece 0 in the tail slot of the row's first CTA, piece `i`
    /// in the head slot of CTA `first + i`.
    #[inline(always)]
    fn piece(&self, cut: CutRow, i: u32) -> *mut u32 {
        let slot = flat_slot(cut.first + i, i == 0, self.n_tile, self.n_tiles);
        ((self.partials + slot * self.slot_bytes) as *mut u32).wrapping_add(self.tid as usize * 4)
    }

    /// The row's counter.
    #[inline(always)]
    fn counter(&self, cut: CutRow) -> *mut u32 {
        (self.counters as *mut u32).wrapping_add(flat_counter(cut.first, self.n_tile, self.n_tiles) as usize)
    }

    /// Stores this thread's fragments of `acc` at `base` (a [`Workspace::piece`]).
    ///
    /// # Safety
    /// The launch's workspace holds the slot (host: `flat_ctas`).
    #[inline(always)]
    unsafe fn store<const MI: usize, const NI: usize>(&self, base: *mut u32, acc: &AccTile<MI, NI>) {
        // SAFETY: the caller's contract.
        unsafe { reduce::store_tile(base, self.lane, acc) }
    }

    /// This thread's fragments of the tile at `base` (from L2: other CTAs wrote them).
    ///
    /// # Safety
    /// As [`Workspace::store`], and the piece was published to this thread (an acquire, by this thread or by
    /// thread 0 before a barrier).
    #[inline(always)]
    unsafe fn load<const MI: usize, const NI: usize>(&self, base: *mut u32) -> AccTile<MI, NI> {
        // SAFETY: the caller's contract.
        unsafe { reduce::load_tile(base, self.lane) }
    }

    /// `piece 1 + piece 2 + ... + piece (parts - 1)` of `cut`, added in that order, several pieces' loads in
    /// flight at a time (a row over many CTAs would otherwise take an L2 round trip per piece): four for tiles of
    /// up to 16 accumulators a thread; one for larger ones (the tile of 64 columns, 32 accumulators: with its
    /// pieces read under the last k-tiles, two in flight took the kernel to 255 registers and a spill; read at the
    /// end one at a time, it holds 238-240). Zero for one part.
    ///
    /// # Safety
    /// As [`Workspace::load`], for every piece but piece 0.
    #[inline(always)]
    unsafe fn rest<const MI: usize, const NI: usize>(&self, cut: CutRow) -> AccTile<MI, NI> {
        let mut sum: AccTile<MI, NI> = [[[0.0; 4]; NI]; MI];
        let mut i = 1;
        if MI * NI <= 4 {
            while i + 4 <= cut.parts {
                let t: [AccTile<MI, NI>; 4] = unsafe {
                    [
                        self.load(self.piece(cut, i)),
                        self.load(self.piece(cut, i + 1)),
                        self.load(self.piece(cut, i + 2)),
                        self.load(self.piece(cut, i + 3)),
                    ]
                };
                for (j, tj) in t.iter().enumerate() {
                    add_tile(&mut sum, tj, i == 1 && j == 0);
                }
                i += 4;
            }
        }
        while i < cut.parts {
            let t = unsafe { self.load(self.piece(cut, i)) };
            add_tile(&mut sum, &t, i == 1);
            i += 1;
        }
        sum
    }

    /// Counts one piece of `cut` in and returns whether it was the row's last ([`reduce::count_in`]). One thread,
    /// after a barrier behind the CTA's stores of the piece.
    ///
    /// # Safety
    /// The counter lies in the launch's workspace.
    #[inline(always)]
    unsafe fn count_in(&self, cut: CutRow) -> bool {
        let counter = self.counter(cut);
        // SAFETY: the caller's contract.
        unsafe { reduce::count_in(|| counter, cut.parts) }
    }
}

/// What the CTA accumulates now ([`FlatWalk::kind`]).
const ROW: u32 = 0; // a whole row (or an empty one), written to C at k-tile `end`
const HEAD: u32 = 1; // the end of a row begun by earlier CTAs (or a middle piece), stored at k-tile `end`
const TAIL: u32 = 2; // the start of a row that later CTAs finish: the CTA's last segment, summed at the end
const DONE: u32 = 3; // nothing left

/// A CTA's walk over the block rows its range `[b0, b1)` touches. CTA-uniform: every warp keeps the same copy,
/// `row_ptr` entries in a window of 32 held one per lane and read by shuffles.
struct FlatWalk {
    row_ptr: u64,
    index_shift: u32,
    block_rows: u32,
    last_cta: bool,
    b0: u32,
    b1: u32,
    k_tiles_per_block: u32,
    lane: u32,
    /// `row_ptr[win_base + lane]` (clamped to `block_rows`).
    win_base: u32,
    win: u32,
    /// The current segment: its kind, its row, the row's blocks `start..stop` and the k-tile it ends at
    /// (`u32::MAX` for a tail or nothing left).
    kind: u32,
    row: u32,
    start: u32,
    stop: u32,
    end: u32,
}

impl FlatWalk {
    /// `row_ptr[j]` for `win_base <= j <= block_rows`. Warp-collective (every lane, warp-uniform `j`).
    ///
    /// # Safety
    /// `row_ptr` holds `block_rows + 1` entries of the index width.
    #[inline(always)]
    unsafe fn rp(&mut self, j: u32) -> u32 {
        if j >= self.win_base + 32 {
            unsafe { self.load_window(j) };
        }
        ptx::shfl_idx(self.win, j - self.win_base)
    }

    /// Loads the window of 32 entries from `base`.
    ///
    /// # Safety
    /// As [`FlatWalk::rp`].
    #[inline(always)]
    unsafe fn load_window(&mut self, base: u32) {
        self.win_base = base;
        self.win = unsafe { load_index(self.row_ptr, (base + self.lane).min(self.block_rows), self.index_shift) };
    }

    /// The rows that start before block `x`: a 32-way search, one `row_ptr` entry per lane and round (2 rounds
    /// for 1024 block rows, 3 for 32768). Warp-collective.
    ///
    /// # Safety
    /// As [`FlatWalk::rp`].
    #[inline(always)]
    unsafe fn rows_before(&self, x: u32) -> u32 {
        // The answer s lies in [lo, hi]: row_ptr[r] < x exactly for r < s (row_ptr is non-decreasing).
        let (mut lo, mut hi) = (0, self.block_rows);
        while lo < hi {
            let stride = (hi - lo).div_ceil(32);
            let pos = lo + self.lane * stride;
            let below = pos < hi && unsafe { load_index(self.row_ptr, pos, self.index_shift) } < x;
            let count = ptx::ballot(below).count_ones();
            if count == 0 {
                hi = lo;
            } else {
                let last_below = lo + (count - 1) * stride;
                hi = hi.min(last_below + stride);
                lo = last_below + 1;
            }
        }
        lo
    }

    /// Loads the window at a guess of where the rows that start before block `b0` end, from rows of equal length
    /// (`b0 * block_rows / nnzb`, 16 rows before it): issued before the prefetch, so that for rows of about equal
    /// length the walk's start costs that one round trip under the copies.
    ///
    /// # Safety
    /// As [`FlatWalk::rp`], and `nnzb > 0`.
    #[inline(always)]
    unsafe fn load_guess(&mut self, nnzb: u32) {
        let guess = (self.b0 as u64 * self.block_rows as u64 / nnzb as u64) as u32;
        unsafe { self.load_window(guess.saturating_sub(16)) };
    }

    /// The rows that start before block `b0` (`s`), from the window when it holds rows `s - 1` and `s` (or `s`
    /// is 0), else by [`FlatWalk::rows_before`] with the window reloaded at `s - 1`. Warp-collective.
    ///
    /// # Safety
    /// As [`FlatWalk::rp`].
    #[inline(always)]
    unsafe fn first_row(&mut self) -> u32 {
        let base = self.win_base;
        let below = base + self.lane < self.block_rows && self.win < self.b0;
        let ballot = ptx::ballot(below);
        // Every row before the window starts before b0 (lane 0 is below, or the window starts at row 0), and one
        // lane of it is not below (the window reaches row s).
        let count = ballot.count_ones();
        if (base == 0 || ballot & 1 != 0) && count < 32 {
            return base + count;
        }
        let s = unsafe { self.rows_before(self.b0) };
        unsafe { self.load_window(s.saturating_sub(1)) };
        s
    }

    /// The k-tile (of the CTA's range) at which block `blk` begins.
    #[inline(always)]
    fn k_tile_of(&self, blk: u32) -> u32 {
        (blk - self.b0) * self.k_tiles_per_block
    }

    /// Moves to row `r`, which starts at or after `b0`: a whole row the CTA owns (it starts in `[b0, b1)`, or
    /// anywhere from `b0` on for the last CTA, whose rows past `nnzb` are empty), the tail piece of one that
    /// continues past `b1`, or nothing left. Empty rows are whole rows that end where they begin.
    ///
    /// # Safety
    /// As [`FlatWalk::rp`].
    #[inline(always)]
    unsafe fn enter(&mut self, r: u32) {
        self.row = r;
        let owned = r < self.block_rows && (self.last_cta || unsafe { self.rp(r) } < self.b1);
        if !owned {
            (self.kind, self.end) = (DONE, u32::MAX);
            return;
        }
        let (start, stop) = unsafe { (self.rp(r), self.rp(r + 1)) };
        (self.start, self.stop) = (start, stop);
        if stop > self.b1 {
            (self.kind, self.end) = (TAIL, u32::MAX);
        } else {
            (self.kind, self.end) = (ROW, self.k_tile_of(stop));
        }
    }

    /// The current segment's row as a cut row of `ctas` CTAs over `nnzb` blocks.
    #[inline(always)]
    fn cut(&self, ctas: u32, nnzb: u32) -> CutRow {
        let first = flat_cta_of(self.start, ctas, nnzb);
        CutRow { row: self.row, first, parts: flat_cta_of(self.stop - 1, ctas, nnzb) - first + 1 }
    }
}

/// The flat list's work in the shared main loop ([`MainLoopHooks`]): a head piece counted in after the barrier
/// that follows its stores, the tail row's counter polled once every copy is issued (and the other pieces' sum
/// read once they are all in), and the segments that end with each k-tile (a head piece stored, whole rows
/// written).
struct SegmentEnds<'a, const BS: u32, const MI: usize, const NI: usize> {
    walk: &'a mut FlatWalk,
    ws: &'a Workspace,
    epi: &'a Epilogue<f32>,
    head: CutRow,
    /// 1 once the head piece is stored, 2 once counted in; `head_last` (thread 0's) whether it was the row's last.
    head_state: &'a mut u32,
    head_last: &'a mut bool,
    /// The tail's poll: the counter as last read, whether read, whether every other piece is in, their sum.
    tail_rest: (&'a mut u32, &'a mut bool, &'a mut bool, &'a mut AccTile<MI, NI>),
    early_rest: bool,
    /// This CTA, the CTAs, the blocks, the CTA's k-tiles.
    grid: (u32, u32, u32, u32),
    /// This thread, the N tile's first column, the warp.
    at: (u32, u32, WarpCoord),
}

impl<const BS: u32, const MI: usize, const NI: usize> MainLoopHooks<MI, NI> for SegmentEnds<'_, BS, MI, NI> {
    const NEVER_EMPTY: bool = true;

    #[inline(always)]
    fn at_barrier(&mut self) {
        if *self.head_state == 1 {
            // Every thread's stores of the head piece precede the barrier: one thread counts it in.
            if self.at.0 == 0 {
                // SAFETY: the head row's counter, in the launch's workspace.
                *self.head_last = unsafe { self.ws.count_in(self.head) };
            }
            *self.head_state = 2;
        }
    }

    #[inline(always)]
    fn issued(&mut self, k_tile_next: u32) {
        let (_, ctas, nnzb, num_k_tiles) = self.grid;
        let (poll, polled, ready, rest) =
            (&mut *self.tail_rest.0, &mut *self.tail_rest.1, &mut *self.tail_rest.2, &mut *self.tail_rest.3);
        if self.early_rest && self.walk.kind == TAIL && !*ready && k_tile_next >= num_k_tiles {
            // Every copy is issued: the tail row's counter, read a k-tile later (the load's round trip under a
            // k-tile of work). Once the other pieces are all in, their sum under the last k-tiles.
            let cut = self.walk.cut(ctas, nnzb);
            if *polled && *poll == cut.parts - 1 {
                ptx::fence_acq_rel_gpu();
                // SAFETY: every other piece is in (the counter, then the fence).
                *rest = unsafe { self.ws.rest(cut) };
                *ready = true;
            } else {
                // SAFETY: the tail row's counter, in the launch's workspace.
                *poll = unsafe { ptx::ld_relaxed_gpu_u32(self.ws.counter(cut)) };
                *polled = true;
            }
        }
    }

    #[inline(always)]
    fn k_tile_done(&mut self, k_tile: u32, acc: &mut AccTile<MI, NI>) {
        let (cta, _, _, _) = self.grid;
        let (_, n0, warp) = self.at;
        // The segments that end with this k-tile (empty rows end where they begin).
        while self.walk.end <= k_tile {
            if self.walk.kind == HEAD {
                // SAFETY: this CTA's head slot, in the launch's workspace.
                unsafe { self.ws.store(self.ws.piece(self.head, cta - self.head.first), acc) };
                *self.head_state = 1;
                *acc = [[[0.0; 4]; NI]; MI];
                // SAFETY: the walk's row_ptr reads stay inside row_ptr.
                unsafe { self.walk.enter(self.head.row + 1) };
            } else {
                // A whole row; an empty one holds zeros (and leaves `acc`, which may hold the next row's first
                // k-tiles).
                let empty = self.walk.start == self.walk.stop;
                let mut out = if empty { [[[0.0; 4]; NI]; MI] } else { *acc };
                // SAFETY: the row's tile of C (columns >= n skipped).
                unsafe { store_epilogue::<MI, NI, f32, F16In>(self.epi, &mut out, self.walk.row * BS, n0, warp) };
                if !empty {
                    *acc = [[[0.0; 4]; NI]; MI];
                }
                let next = self.walk.row + 1;
                // SAFETY: as above.
                unsafe { self.walk.enter(next) };
            }
        }
    }
}

/// The flat block-list kernel body for one configuration (f16 inputs, row-major B, f32 C). See the module docs.
///
/// # Safety
/// The host launcher guarantees `BsrSpmmParams`' preconditions for a flat launch.
#[inline(always)]
unsafe fn bsr_spmm_flat<
    const BS: u32,
    const BN: u32,
    const BK: u32,
    const WARPS_M: u32,
    const WARPS_N: u32,
    const MI: usize,
    const NI: usize,
    const STAGES: u32,
>(
    p: &BsrSpmmParams,
) {
    const {
        assert!(BS == WARPS_M * MI as u32 * 16, "BS must equal WARPS_M * MI * 16");
        assert!(BN == WARPS_N * NI as u32 * 8, "BN must equal WARPS_N * NI * 8");
        assert!(BN <= 64, "the flat list loads each block's column index a k-tile ahead (narrow tiles)");
        assert!(BK.is_multiple_of(16) && BS.is_multiple_of(BK), "BK must be a multiple of 16 that divides BS");
        assert!((BK / 16).is_multiple_of(2) && STAGES >= 3, "the fragment double-buffered main loop");
        assert!(STAGES <= MAX_STAGES, "the prefetch's index array holds MAX_STAGES entries");
        assert!(
            (BK * BN / CHUNK_HALVES).is_multiple_of(32 * WARPS_M * WARPS_N),
            "the B stage tile's 16-byte chunks must divide evenly among the CTA's threads"
        );
    }
    // The tail row's other pieces are read under the last k-tiles (into a second tile of accumulators held through
    // them) only by bs 64's narrow tile (8 accumulators a thread); the others read them at the end, where that
    // second tile is not live beside the main loop's: read early, the tile of 32 took 254 registers and the tile
    // of 64 over 255 (at the end 164 and 238), and bs 128's narrow tile 224 (at the end 156, and 1-4% faster:
    // docs/perf-notes.md, issue 12 steps 25-27).
    let early_rest = MI * NI <= 2;
    let index_shift = if p.index64 != 0 { 3 } else { 2 };
    let threads: u32 = 32 * WARPS_M * WARPS_N;
    let k_tiles_per_block = BS / BK;

    let tid = ptx::thread_idx_x();
    let (warp_id, lane) = (tid / 32, tid % 32);
    let warp = WarpCoord { warp_m: warp_id / WARPS_N, warp_n: warp_id % WARPS_N, lane };

    // SAFETY (whole body): the host launcher guarantees the preconditions; every global address below stays
    // inside A's values, row_ptr, col_idx, B's K x n window, C, the bias and the split workspace.
    // (At least 1 by the preconditions; the max keeps a division by zero, and its panic path, out of the PTX.)
    let (ctas, nnzb) = (p.flat_ctas.max(1), p.nnzb.max(1));
    let bid = ptx::block_idx_x();
    let (cta, n_tile) = (bid % ctas, bid / ctas);
    let n_tiles = p.n.div_ceil(BN);
    let n0 = n_tile * BN;
    let (b0, b1) = flat_range(cta, ctas, nnzb);
    let num_k_tiles = (b1 - b0) * k_tiles_per_block;
    let g = CtaOperands {
        a_values: p.a_values as *const u16,
        col_idx: p.col_idx,
        index_shift,
        blk_begin: b0,
        b: p.b as *const u16,
        ldb: p.ldb,
        n: p.n,
        n0,
        perm: core::ptr::null(),
        k_len: 0,
        lda: 0,
        m0: 0,
    };
    let ws = Workspace {
        partials: p.split_partials,
        counters: p.split_counters,
        slot_bytes: (threads as usize * MI * NI * 16) as u64,
        n_tile,
        n_tiles,
        tid,
        lane: SlotLane { tid: 0, threads },
    };
    let epi = Epilogue::<f32>::from_params(p);

    // THE WALK's first load, ahead of the prefetch: the window where the rows before b0 likely end.
    let mut walk = FlatWalk {
        row_ptr: p.row_ptr,
        index_shift,
        block_rows: p.block_rows,
        last_cta: cta + 1 == ctas,
        b0,
        b1,
        k_tiles_per_block,
        lane,
        win_base: 0,
        win: 0,
        kind: DONE,
        row: 0,
        start: 0,
        stop: 0,
        end: u32::MAX,
    };
    unsafe { walk.load_guess(nnzb) };

    let smem = ptx::dynamic_smem_base();
    let s_a = SmemRing::<BS, BK, STAGES>::at(smem);
    let s_b = SmemRing::<BK, BN, STAGES>::at(smem + SmemRing::<BS, BK, STAGES>::BYTES);
    let mut acc: AccTile<MI, NI> = [[[0.0; 4]; NI]; MI];

    // PREFETCH (the narrow tile's, over the CTA's range): the column indices of the first STAGES k-tiles, A's
    // slice of k-tile 0 before the grid-dependency wait (A and its indices are the weights), then the rest.
    // SAFETY: t < num_k_tiles, so the block lies in the CTA's range.
    let col_of = |t: u32| unsafe { load_index(g.col_idx, g.blk_begin + t / k_tiles_per_block, g.index_shift) };
    let mut cols = [0u32; MAX_STAGES as usize];
    let mut s = 0;
    while s < STAGES {
        if s < num_k_tiles {
            cols[s as usize] = col_of(s);
        }
        s += 1;
    }
    unsafe { load_a_slice::<BS, BK, FORWARD>(&g, 0, s_a.stage(0), tid, threads) };
    ptx::griddep_wait();
    let mut s = 0;
    while s < STAGES - 1 {
        if s < num_k_tiles {
            if s > 0 {
                unsafe { load_a_slice::<BS, BK, FORWARD>(&g, s, s_a.stage(s), tid, threads) };
            }
            unsafe { load_b_strip::<BS, BN, BK, false, FORWARD>(&g, s, cols[s as usize], s_b.stage(s), tid, threads) };
        }
        ptx::cp_async_commit();
        s += 1;
    }
    let col_next = cols[(STAGES - 1) as usize];

    // THE WALK, found while the prefetch's copies are in flight: a head piece first when the row holding b0
    // began before it, then the rows that start in the range.
    let first_row = unsafe { walk.first_row() };
    let head_stop = if first_row > 0 { unsafe { walk.rp(first_row) } } else { 0 };
    if head_stop > b0 {
        // Row first_row - 1 holds b0 and began before it (head_stop is nnzb when it is the last row).
        walk.row = first_row - 1;
        (walk.start, walk.stop) = (unsafe { walk.rp(first_row - 1) }, head_stop);
        walk.kind = HEAD;
        walk.end = walk.k_tile_of(head_stop.min(b1));
    } else {
        unsafe { walk.enter(first_row) };
    }
    // The head piece: 1 once stored (counted in after the next barrier, or at the end), 2 once counted in;
    // `head_last` (thread 0's) whether it was the row's last piece.
    let head = if walk.kind == HEAD { walk.cut(ctas, nnzb) } else { CutRow { row: 0, first: 0, parts: 1 } };
    let mut head_state = 0u32;
    let mut head_last = false;
    // The tail piece's other pieces: polled by every thread once every copy is issued; `rest` holds their sum
    // once `ready`.
    let mut poll = 0u32;
    let mut polled = false;
    let mut ready = false;
    let mut rest: AccTile<MI, NI> = [[[0.0; 4]; NI]; MI];

    // MAIN LOOP: the narrow tile's (fragments double-buffered in registers), plus the segments' ends.
    let mut ends = SegmentEnds::<BS, MI, NI> {
        walk: &mut walk,
        ws: &ws,
        epi: &epi,
        head,
        head_state: &mut head_state,
        head_last: &mut head_last,
        tail_rest: (&mut poll, &mut polled, &mut ready, &mut rest),
        early_rest,
        grid: (cta, ctas, nnzb, num_k_tiles),
        at: (tid, n0, warp),
    };
    let rings = (s_a, s_b);
    unsafe {
        mainloop_frag_db::<BS, BN, BK, MI, NI, STAGES, 1, false, FORWARD, F16In, _>(
            rings,
            &g,
            (warp, tid, threads),
            (num_k_tiles, num_k_tiles),
            (col_next, col_of),
            &mut acc,
            &mut ends,
        )
    };
    // Every copy of A is issued: the next grid on the stream may start its own (ptx/griddep.rs).
    ptx::griddep_launch_dependents();
    ptx::cp_async_wait::<0>();

    // THE HAND-OVERS AT THE END. A tail whose thread has not seen the other pieces in stores its own piece (it
    // may be needed); after the barrier (every store and every read of the ring done) one thread counts in a
    // head piece still being published, and decides the tail: fast when every other piece is in (the CTA sums
    // the row without counting in), else it counts the tail in. Its words in the idle ring tell the CTA.
    let tail = walk.kind == TAIL;
    let tail_cut = if tail { walk.cut(ctas, nnzb) } else { CutRow { row: 0, first: 0, parts: 1 } };
    if tail && !ready {
        unsafe { ws.store(ws.piece(tail_cut, 0), &acc) };
    }
    ptx::bar_sync();
    if tid == 0 {
        if head_state == 1 {
            head_last = unsafe { ws.count_in(head) };
        }
        let mut fin = 0;
        if tail {
            // Every other piece in (seen by this thread in the main loop, which fenced then, or now): no other CTA
            // touches the counter again in this launch. Else this piece counts in.
            let counter = ws.counter(tail_cut);
            let all_in = ready || unsafe { ptx::ld_relaxed_gpu_u32(counter) } == tail_cut.parts - 1;
            if all_in {
                if !ready {
                    ptx::fence_acq_rel_gpu();
                }
                unsafe { ptx::st_global_u32(counter, 0) };
                fin = 1;
            } else if unsafe { ws.count_in(tail_cut) } {
                fin = 2;
            }
        }
        unsafe { ptx::st_shared_v4(smem, [head_last as u32, fin, 0, 0]) };
    }
    ptx::bar_sync();
    let words = unsafe { ptx::ld_shared_v4(smem) };
    if words[0] != 0 {
        // The head piece was its row's last: the row from the slots (this CTA's piece too).
        let mut total = unsafe { ws.load::<MI, NI>(ws.piece(head, 0)) };
        let later = unsafe { ws.rest::<MI, NI>(head) };
        add_tile(&mut total, &later, false);
        unsafe { store_epilogue::<MI, NI, f32, F16In>(&epi, &mut total, head.row * BS, n0, warp) };
    }
    if words[1] != 0 {
        // The tail row: this CTA's piece (piece 0, in registers) plus the others' sum.
        if !ready {
            rest = unsafe { ws.rest(tail_cut) };
        }
        add_tile(&mut acc, &rest, false);
        unsafe { store_epilogue::<MI, NI, f32, F16In>(&epi, &mut acc, tail_cut.row * BS, n0, warp) };
    }
}

/// Defines the flat block-list entry point `$name` from its `layout::VARIANTS` entry
/// (`layout::Decomposition::FlatList`; its types are the template's one combination, which `variant_config!`
/// checks).
macro_rules! flat_kernel {
    ($name:ident, $($types:tt)*) => {
        /// BSR SpMM over a flat block list; see the module docs.
        ///
        /// # Safety
        /// Launched by the host's typed launcher, which checks the preconditions of [`BsrSpmmParams`].
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(params: BsrSpmmParams) {
            const CFG: KernelConfig = variant_config!(
                $name,
                crate::layout::Pipeline::CpAsync,
                crate::layout::InType::F16,
                crate::layout::Layout::RowMajor,
                crate::layout::OutType::F32
            );
            const { assert!(CFG.frag_db, "the flat list runs the fragment double-buffered main loop") };
            // A launch that made no promise about A waits for the grid before it ahead of every read.
            if params.flags & crate::layout::SPMM_WAIT_FIRST != 0 {
                ptx::griddep_wait();
            }
            // SAFETY: forwarded preconditions.
            unsafe { with_tile!(bsr_spmm_flat::<CFG>(&params)) }
        }
    };
}

// The flat entry points, one per `layout::VARIANTS` row of `Tile::Flat`, `Flat32` and `Flat64`, generated by
// build.rs from the table.
include!(concat!(env!("OUT_DIR"), "/flat_entries.rs"));
