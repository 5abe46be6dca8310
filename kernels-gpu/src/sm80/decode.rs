//! The decode kernels (`layout::Pipeline::Direct`, `_dec` entry points): BSR x dense for few columns (N up to
//! `layout::DECODE_MAX_N`), where the work is reading each weight byte once at memory speed.
//!
//! A CTA owns one slice of 16 rows of one block row and BN columns of C, so a block row of BS rows is spread over
//! BS / 16 CTAs, each reading only its 16 rows of every block. The CTA's W warps split the block row's blocks
//! between them (warp `w` takes blocks `w`, `w + W`, ...), so a block row is read by `BS / 16 * W` warps at once
//! (32 at bs 64 and 128): the layer-sized products with few block rows, which leave most SMs idle under the
//! narrow tile's one CTA per block row, fill the GPU (the launcher takes these kernels only for those:
//! `Gpu::kernel`, docs/perf-notes.md "Decode", step 3). A warp walks its blocks in 32-column chunks: per
//! chunk, each lane loads 16 bytes of A's row `g` and 16 bytes of row `g + 8` (g = lane / 4, t = lane % 4,
//! columns `8t .. 8t + 8` of the chunk) straight into registers, with `ld.global.nc.L1::no_allocate` marked
//! evict-first in L2: no shared-memory staging, and STAGES chunks in flight per warp (a register ring, the loop
//! unrolled over it).
//!
//! The k order inside a chunk is permuted so those 16 bytes are exactly the lane's `mma.m16n8k16` A fragments of
//! the chunk's two k16 steps: the lane's fragment slots `2t, 2t + 1, 2t + 8, 2t + 9` of step 0 hold the chunk's
//! columns `8t .. 8t + 4`, those of step 1 the columns `8t + 4 .. 8t + 8`. A dot product does not depend on
//! the order of its terms, so B's fragments follow the same permutation: the lane's B values of column `g` of an
//! n8 tile are B's rows `k0 + 8t .. k0 + 8t + 8`, one 16-byte load for a column-major B (the linear layer's `x`),
//! eight 2-byte loads for a row-major one (both read-only, through L1: every warp of every CTA reads the same
//! few columns).
//!
//! The warps' f32 partial sums meet in shared memory and warp 0 adds them in warp order, so the result has the
//! same bits run to run (no atomics), then applies the shared epilogue (`C = act(alpha * acc + bias) + beta * C`,
//! f32 or 16-bit C, either layout; an empty block row gives `act(bias) + beta * C`).
//!
//! Programmatic dependent launch (ptx/griddep.rs): a CTA reads its block row's extent (`row_ptr`), then waits for
//! the grid ahead of it on the stream before any load of A's values, B or C, and lets the next grid start once its
//! last loads of A are issued. Loading the first chunks of A before the wait (all A, then all B) was measured
//! faster under programmatic launch and 0.4-1.1 us slower on every plain one (docs/perf-notes.md, issue 12 step
//! 22).
//!
//! Grid: 1-D, `block_rows * (BS / 16) * ceil(n / BN)` CTAs, N tile fastest (the CTAs re-reading a slice of A for
//! another N tile run side by side and find it in L2), then slice, then block row. Parameters and
//! preconditions: `layout::BsrSpmmParams` (`row_order` and `group_rows` are not used).

use crate::epilogue::{Epilogue, Input, Output, WarpCoord, load_index, store_epilogue};
use crate::layout::{BsrSpmmParams, DIRECT_CHUNK, KernelConfig};
use crate::ptx;
use crate::tile::AccTile;

/// A's part of one 32-column chunk of a block in one lane's registers: rows `g` and `g + 8`, columns
/// `8t .. 8t + 8` of the chunk.
#[derive(Clone, Copy)]
struct AChunk {
    lo: [u32; 4],
    hi: [u32; 4],
}

/// B's part of one chunk: per n8 tile, B's rows `8t .. 8t + 8` of the chunk at the lane's column `g`, as pairs
/// of 16-bit elements (one 16-byte load from a column-major B; eight 2-byte loads from a row-major one).
#[derive(Clone, Copy)]
struct BChunk<const NI: usize> {
    pairs: [[u32; 4]; NI],
}

impl<const NI: usize> BChunk<NI> {
    const ZERO: Self = BChunk { pairs: [[0; 4]; NI] };
}

/// What a warp needs to load its chunks.
#[derive(Clone, Copy)]
struct WarpOperands {
    /// A's values: `nnzb` blocks of (BS, BS) 16-bit elements, each row-major.
    a_values: *const u16,
    /// A's block-column indices (device address of u32 or u64 entries).
    col_idx: u64,
    /// log2 of the index entries' bytes (2: u32, 3: u64).
    index_shift: u32,
    /// The warp's first block, and the distance between its blocks (W).
    blk0: u32,
    blk_stride: u32,
    /// The lane's row `g` inside a block (`16 * slice + lane / 4`; row `g + 8` is the second one).
    row: u32,
    /// The lane's column offset inside a chunk (`8 * (lane % 4)`).
    k_lane: u32,
    /// B: (K, ldb) row-major or (n, ldb) column-major, 16-bit elements.
    b: *const u16,
    /// B's leading dimension in elements.
    ldb: u32,
    /// Columns of B; the lane's column of n8 tile `j` is `n_lane + 8 * j` (zero past n).
    n: u32,
    n_lane: u32,
    /// The L2 evict-first policy of A's loads.
    policy: u64,
}

/// The block-column indices of a warp's blocks, 32 at a time: lane `l` holds the index of the warp's block
/// `base + l`, and a block's index comes from its lane by a shuffle. So the B loads of a chunk wait for no index
/// load of their own: one coalesced index load per 32 blocks, by the whole warp at once.
struct ColWindow {
    /// This lane's index (of block `base + lane`; 0 past the warp's last block).
    held: u32,
    /// The first block of the window.
    base: u32,
    /// The first block past the window: the next load.
    end: u32,
}

impl ColWindow {
    /// The block-column index of the warp's block `j`. Called for j = 0, 1, 2, ... in order (any number of times
    /// each), by the whole warp with the same `j`.
    ///
    /// # Safety
    /// `j` is below `blocks`, the warp's block count, and the kernel's preconditions hold.
    #[inline(always)]
    unsafe fn col(&mut self, w: &WarpOperands, j: u32, blocks: u32, lane: u32) -> u32 {
        if j == self.end {
            let mine = j + lane;
            // SAFETY: the warp's block `mine` exists (mine < blocks), so its index entry does.
            self.held = if mine < blocks {
                unsafe { load_index(w.col_idx, w.blk0 + mine * w.blk_stride, w.index_shift) }
            } else {
                0
            };
            self.base = j;
            self.end = j + 32;
        }
        ptx::shfl_idx(self.held, j - self.base)
    }
}

/// Loads A's part of chunk `c` of the warp's block `j` (streamed: L1 bypassed, evict-first in L2).
///
/// # Safety
/// `j` is below the warp's block count, and the kernel's preconditions hold.
#[inline(always)]
unsafe fn load_a<const BS: u32>(w: &WarpOperands, j: u32, c: u32) -> AChunk {
    let blk = w.blk0 + j * w.blk_stride;
    let kk = c * DIRECT_CHUNK + w.k_lane;
    // SAFETY: blk < nnzb, so both 16-byte rows lie in A's values (16-byte aligned: BS * 2 bytes per row, kk a
    // multiple of 8).
    unsafe {
        let row = w.a_values.add((blk as usize) * (BS * BS) as usize + (w.row * BS + kk) as usize);
        AChunk {
            lo: ptx::ld_global_stream_v4(row as *const u32, w.policy),
            hi: ptx::ld_global_stream_v4(row.add(8 * BS as usize) as *const u32, w.policy),
        }
    }
}

/// Loads B's part of chunk `c` of a block whose block-column index is `col`.
///
/// # Safety
/// `col` is the index of one of the warp's blocks, and the kernel's preconditions hold.
#[inline(always)]
unsafe fn load_b<const BS: u32, const NI: usize, const B_COL: bool>(w: &WarpOperands, c: u32, col: u32) -> BChunk<NI> {
    let k0 = col * BS + c * DIRECT_CHUNK + w.k_lane;
    let mut b = BChunk::<NI>::ZERO;
    for jn in 0..NI {
        let n_col = w.n_lane + 8 * jn as u32;
        // SAFETY: col < K / BS, so B's rows k0 .. k0 + 8 exist; columns past n are not read.
        if n_col < w.n {
            if B_COL {
                let p = unsafe { w.b.add(n_col as usize * w.ldb as usize + k0 as usize) };
                b.pairs[jn] = unsafe { ptx::ld_global_nc_v4(p as *const u32) };
            } else {
                let p = unsafe { w.b.add(k0 as usize * w.ldb as usize + n_col as usize) };
                for q in 0..4 {
                    let lo = unsafe { ptx::ld_global_nc_u16(p.add(2 * q * w.ldb as usize)) };
                    let hi = unsafe { ptx::ld_global_nc_u16(p.add((2 * q + 1) * w.ldb as usize)) };
                    b.pairs[jn][q] = lo as u32 | (hi as u32) << 16;
                }
            }
        }
    }
    b
}

/// The warp's two k16 steps of one chunk: NI `mma.sync.m16n8k16` each, in the permuted k order (module docs).
#[inline(always)]
fn mma_chunk<const NI: usize, I: Input>(acc: &mut AccTile<1, NI>, a: &AChunk, b: &BChunk<NI>) {
    let (lo, hi) = (a.lo, a.hi);
    for (d, f) in acc[0].iter_mut().zip(b.pairs.iter()) {
        I::mma(d, [lo[0], hi[0], lo[1], hi[1]], [f[0], f[1]]);
        I::mma(d, [lo[2], hi[2], lo[3], hi[3]], [f[2], f[3]]);
    }
}

/// The kernel body for one configuration. See the module docs for the algorithm and the preconditions.
#[inline(always)]
unsafe fn bsr_decode<
    const BS: u32,
    const BN: u32,
    const WARPS: u32,
    const NI: usize,
    const STAGES: usize,
    const B_COL: bool,
    I: Input,
    O: Output,
>(
    p: &BsrSpmmParams,
) {
    const {
        assert!(BN == 8 * NI as u32, "BN must equal 8 * NI");
        assert!(BS.is_multiple_of(DIRECT_CHUNK), "BS must be a multiple of the 32-column chunk");
        assert!(STAGES >= 1, "at least one chunk in flight");
    }
    let index_shift = if p.index64 != 0 { 3 } else { 2 };
    let slices = BS / 16;
    // At least one N tile: the host never launches with n == 0, and a division by zero would be a panic path.
    let n_tiles = p.n.div_ceil(BN).max(1);
    let cta = ptx::block_idx_x();
    let n0 = (cta % n_tiles) * BN;
    let slice = (cta / n_tiles) % slices;
    let block_row = cta / n_tiles / slices;

    let tid = ptx::thread_idx_x();
    let (warp, lane) = (tid / 32, tid % 32);
    // SAFETY (whole body): the host launcher guarantees the preconditions in the module docs.
    let blk_begin = unsafe { load_index(p.row_ptr, block_row, index_shift) };
    let blk_end = unsafe { load_index(p.row_ptr, block_row + 1, index_shift) };
    let len = blk_end - blk_begin;
    let my_blocks = if len > warp { (len - warp).div_ceil(WARPS) } else { 0 };
    let items = my_blocks * (BS / DIRECT_CHUNK);
    let w = WarpOperands {
        a_values: p.a_values as *const u16,
        col_idx: p.col_idx,
        index_shift,
        blk0: blk_begin + warp,
        blk_stride: WARPS,
        row: 16 * slice + lane / 4,
        k_lane: 8 * (lane % 4),
        b: p.b as *const u16,
        ldb: p.ldb,
        n: p.n,
        n_lane: n0 + lane / 4,
        policy: ptx::l2_evict_first_policy(),
    };

    // B and C only after the grid before this one on the stream is done (ptx/griddep.rs); the block row's
    // extent (A's structure) is read before.
    ptx::griddep_wait();
    let chunks = BS / DIRECT_CHUNK;
    let mut cols = ColWindow { held: 0, base: 0, end: 0 };
    // Chunk `item` of the warp's walk: chunk `item % chunks` of the warp's block `item / chunks`, A's and B's
    // parts.
    let mut load = |item: u32| {
        let (j, c) = (item / chunks, item % chunks);
        // SAFETY: item < items, so block j is one of the warp's.
        unsafe {
            let col = cols.col(&w, j, my_blocks, lane);
            (load_a::<BS>(&w, j, c), load_b::<BS, NI, B_COL>(&w, c, col))
        }
    };

    let mut acc: AccTile<1, NI> = [[[0.0; 4]; NI]; 1];
    // PREFETCH: the first STAGES chunks into the register ring.
    let mut ring = [(AChunk { lo: [0; 4], hi: [0; 4] }, BChunk::<NI>::ZERO); STAGES];
    for (q, slot) in ring.iter_mut().enumerate() {
        if (q as u32) < items {
            *slot = load(q as u32);
        }
    }
    // MAIN LOOP, unrolled over the ring: each chunk's slot is refilled with the chunk STAGES later before the
    // chunk is multiplied, so STAGES chunks stay in flight.
    let mut i = 0;
    while i < items {
        for (q, slot) in ring.iter_mut().enumerate() {
            let item = i + q as u32;
            if item < items {
                let (a, b) = *slot;
                if item + (STAGES as u32) < items {
                    *slot = load(item + STAGES as u32);
                }
                mma_chunk::<NI, I>(&mut acc, &a, &b);
            }
        }
        i += STAGES as u32;
    }
    // Every load of A is issued: the next grid on the stream may start its own (ptx/griddep.rs).
    ptx::griddep_launch_dependents();

    // REDUCE: every warp's partial sums to shared memory (lane-major, 16 bytes per lane and n8 tile), then warp 0
    // adds them in warp order.
    let smem = ptx::dynamic_smem_base();
    let slot = |w: u32, j: usize| smem + ((w * NI as u32 + j as u32) * 32 + lane) * 16;
    for (j, d) in acc[0].iter().enumerate() {
        // SAFETY: the CTA's dynamic shared memory holds WARPS * NI * 32 16-byte slots (KernelConfig::smem_bytes).
        let bits = [d[0].to_bits(), d[1].to_bits(), d[2].to_bits(), d[3].to_bits()];
        unsafe { ptx::st_shared_v4(slot(warp, j), bits) };
    }
    ptx::bar_sync();
    if warp != 0 {
        return;
    }
    let mut sum: AccTile<1, NI> = [[[0.0; 4]; NI]; 1];
    for from in 0..WARPS {
        for (j, s) in sum[0].iter_mut().enumerate() {
            // SAFETY: written by warp `from` before the barrier.
            let v = unsafe { ptx::ld_shared_v4(slot(from, j)) };
            for e in 0..4 {
                s[e] += f32::from_bits(v[e]);
            }
        }
    }

    // EPILOGUE: C = act(alpha * acc + bias) + beta * C (C not read when beta == 0), columns >= n skipped.
    let epi = Epilogue::<O>::from_params(p);
    let coord = WarpCoord { warp_m: 0, warp_n: 0, lane };
    unsafe { store_epilogue::<1, NI, O, I>(&epi, &mut sum, block_row * BS + 16 * slice, n0, coord) };
}

/// Defines the `extern "ptx-kernel"` entry point `$name` from its `layout::VARIANTS` entry (which must exist, be a
/// decode variant and have the input type, B order and output type given here).
macro_rules! decode_kernel {
    ($name:ident, $input:ty, $in_type:pat, $b_layout:pat, $b_col:expr, $out:ty, $out_type:pat) => {
        /// BSR SpMM decode entry point; see the module docs.
        ///
        /// # Safety
        /// Launched by the host's typed launcher, which checks the preconditions of [`BsrSpmmParams`].
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(params: BsrSpmmParams) {
            const CFG: KernelConfig =
                variant_config!($name, crate::layout::Pipeline::Direct, $in_type, $b_layout, $out_type);
            // A launch that made no promise about A waits for the grid before it ahead of every read.
            if params.flags & crate::layout::SPMM_WAIT_FIRST != 0 {
                ptx::griddep_wait();
            }
            // SAFETY: forwarded preconditions.
            unsafe {
                bsr_decode::<
                    { CFG.bs },
                    { CFG.bn },
                    { CFG.warps_m },
                    { (CFG.bn / 8) as usize },
                    { CFG.stages as usize },
                    $b_col,
                    $input,
                    $out,
                >(&params)
            }
        }
    };
}

/// The decode entry points, one per `layout::VARIANTS` decode row (bs 32, 64 and 128, every type combination),
/// generated by build.rs from the table.
mod entry {
    use super::*;

    include!(concat!(env!("OUT_DIR"), "/decode_entries.rs"));
}
