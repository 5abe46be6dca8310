//! BSR x dense SpMM on tensor cores (the portable mma.sync path): `C = act(alpha * (A @ B) + bias) + beta * C`,
//! f16 or bf16 inputs, f32 accumulation, B row- or column-major (one kernel each), C row- or column-major and
//! f32 or the input's 16-bit type, 32- or 64-bit BSR indices (launch parameters).
//!
//! A CTA owns one output tile: the BM = BS rows of one block row of A and BN columns of C. It walks the nonzero
//! blocks of its block row in BK-deep k-tiles; each k-tile stages A's (BS, BK) slice and B's (BK, BN) strip in
//! swizzled shared memory through a STAGES-deep ring of 16-byte `cp.async` copies, and each warp multiplies its
//! (WM, WN) = (16*MI, 8*NI) warp tile with `ldmatrix` and `mma.sync.m16n8k16` into f32 accumulators. A row-major
//! B is staged as a (BK, BN) tile and read with `ldmatrix.trans`; a column-major B (the linear layer's `x` in
//! `x @ W^T`) as a (BN, BK) tile, k contiguous like A, read with plain `ldmatrix`: the same fragments either way.
//!
//! Grid: 1-D, `block_rows * ceil(n / BN)` CTAs, mapped to (position in `row_order`, N tile) by
//! `layout::raster` in groups of `group_rows` row positions (the host sizes the group so a wave's A rows and B
//! strips fit in L2). `row_order` lists block rows longest first, so long rows start early (the host passes none,
//! the natural order, when the grid fits in one wave and every CTA starts at once).
//!
//! The kernel reads as its pipeline stages (CuTe `sgemm_sm80`, ThunderKittens), one function each:
//! - [`load_k_tile`] (global -> shared, the producer): the cp.async copies of one k-tile, A's (BS, BK) slice and
//!   B's (BK, BN) strip, into one ring slot, zero-filling B past column n;
//! - [`load_fragments`] (shared -> registers): the warp's A fragments (`ldmatrix.x4`) and B fragments
//!   (`ldmatrix.x4.trans`, or `ldmatrix.x4` for a column-major B) of one k16 step;
//! - [`mma_warp_tile`]: the warp's MI x NI `mma.sync.m16n8k16` (f16 or bf16) of one k16 step;
//! - [`store_epilogue`] (registers -> global): `C = act(alpha * acc + bias) + beta * C`, f32, f16 or bf16 C,
//!   row- or column-major.
//!
//! [`bsr_spmm`] strings them together: PREFETCH, MAIN LOOP (one of two schedules, per `KernelConfig::frag_db`),
//! EPILOGUE. The shared tiles ([`SmemTile`], in a [`SmemRing`] of STAGES slots) own their swizzle.
//!
//! Programmatic dependent launch (ptx/griddep.rs): the prefetch issues A's slice of the first k-tile (and, in the
//! narrow and mid tiles, the first column indices), then waits for the grid ahead of it on the stream before any
//! copy of B, any use of the split workspace and the epilogue; after the main loop's last copies it lets the next
//! grid start.
//!
//! Parameters and preconditions: `layout::BsrSpmmParams` (checked by the host launcher before every launch).

use crate::epilogue::{Epilogue, Input, Output, WarpCoord, load_index, store_epilogue};
use crate::layout::{
    BsrSpmmParams, CHUNK_HALVES, KernelConfig, ldsm_a_role, ldsm_b_role, ldsm_bt_role, raster, split_parts, split_slot,
};
use crate::ptx;
use crate::reduce::{self, SlotLane};
use crate::tile::{AccTile, FragA, FragB, SmemRing, SmemTile, WarpTile};

/// Where a k-tile's operands come from: the const `SRC` of the main loop's functions.
pub(crate) mod src {
    /// The forward product: A's (BS, BK) slice of a stored block of the CTA's block row, B's rows at the block's
    /// column.
    pub(crate) const FORWARD: u32 = 0;
    /// A^T @ B: the CTA's "row" is a block column of A (its structure in `row_ptr`/`col_idx`: A^T's); block `blk`
    /// of it is A's stored block `perm[blk]`, read transposed: its (BK, BS) row slice staged as is (k rows, m
    /// chunks) and read with `ldmatrix.trans`; B's rows at the block's row of A (`col_idx` holds A's block rows).
    pub(crate) const TRANSPOSED: u32 = 1;
    /// SDDMM with a row-major X: A is X's (BS, BK) slice at rows `m0..`, columns `k_tile * BK..` (dense, zero past
    /// K); B is Y^T's rows `k_tile * BK..` at columns `n0..` (the stored block's column).
    pub(crate) const SDDMM_X_ROW: u32 = 2;
    /// SDDMM with a column-major X: X's (BK, BS) slice staged k rows first (read with `ldmatrix.trans`).
    pub(crate) const SDDMM_X_COL: u32 = 3;

    /// Whether A's k-tile is staged as a (BK, BS) tile, k rows first (read with `ldmatrix.trans`).
    pub(crate) const fn a_k_rows(src: u32) -> bool {
        src == TRANSPOSED || src == SDDMM_X_COL
    }

    /// Whether the k-tiles run along a dense reduced dimension (SDDMM) instead of a row's stored blocks.
    pub(crate) const fn dense_k(src: u32) -> bool {
        src == SDDMM_X_ROW || src == SDDMM_X_COL
    }
}

/// The global operands of one CTA's k-tiles: its block row of A and the columns of B of its N tile.
#[derive(Clone, Copy)]
pub(crate) struct CtaOperands {
    /// A's values: `nnzb` blocks of (BS, BS) 16-bit elements, each row-major.
    pub(crate) a_values: *const u16,
    /// A's block-column indices (device address of u32 or u64 entries).
    pub(crate) col_idx: u64,
    /// log2 of the index entries' bytes (2: u32, 3: u64).
    pub(crate) index_shift: u32,
    /// The CTA's first nonzero block, `row_ptr[block_row]`.
    pub(crate) blk_begin: u32,
    /// B: (K, ldb) row-major or (n, ldb) column-major, 16-bit elements.
    pub(crate) b: *const u16,
    /// B's leading dimension in elements.
    pub(crate) ldb: u32,
    /// Columns of B: chunks at or past column n are zero-filled.
    pub(crate) n: u32,
    /// First column of the CTA's N tile.
    pub(crate) n0: u32,
    /// [`src::TRANSPOSED`]: the transposed index's permutation into A's stored blocks (u32); else null.
    pub(crate) perm: *const u32,
    /// SDDMM ([`src::dense_k`]): the reduced length K; chunks at or past it are zero-filled. Else 0.
    pub(crate) k_len: u32,
    /// SDDMM: X's leading dimension in elements (`a_values` is X); else 0.
    pub(crate) lda: u32,
    /// SDDMM: X's first row of the CTA's block (`block_row * BS`); else 0.
    pub(crate) m0: u32,
}

impl CtaOperands {
    /// Where k-tile `k_tile` of the CTA's blocks lies: its block `blk = blk_begin + k_tile / kb` and its first
    /// column `kk = (k_tile % kb) * BK` inside the block, with `kb = BS / BK` k-tiles per block.
    #[inline(always)]
    fn k_tile_at<const BS: u32, const BK: u32>(&self, k_tile: u32) -> (u32, u32) {
        let k_tiles_per_block = BS / BK;
        (self.blk_begin + k_tile / k_tiles_per_block, (k_tile % k_tiles_per_block) * BK)
    }
}

/// PRODUCER (global -> shared): issues this thread's cp.async copies of k-tile `k_tile` of the CTA's block row
/// into one ring slot (`s_a`, `s_b`), as part of the thread's current commit group: A's slice
/// ([`load_a_slice`]), then B's strip ([`load_b_strip`]).
///
/// # Safety
/// As [`load_a_slice`] and [`load_b_strip`].
#[inline(always)]
pub(crate) unsafe fn load_k_tile<const BS: u32, const BN: u32, const BK: u32, const B_COL: bool, const SRC: u32>(
    g: &CtaOperands,
    k_tile: u32,
    col: u32,
    s_a: SmemTile<BS, BK>,
    s_b: SmemTile<BK, BN>,
    tid: u32,
    threads: u32,
) {
    unsafe {
        load_a_slice::<BS, BK, SRC>(g, k_tile, s_a, tid, threads);
        load_b_strip::<BS, BN, BK, B_COL, SRC>(g, k_tile, col, s_b, tid, threads);
    }
}

/// PRODUCER, A's half: this thread's cp.async copies of A's (BS, BK) slice of k-tile `k_tile` into `s_a`: the
/// slice at column `kk` of block `blk` ([`CtaOperands::k_tile_at`]). It reads only A's values: the weights, which
/// a kernel may read before [`ptx::griddep_wait`].
///
/// # Safety
/// `g` and `k_tile` satisfy the kernel's preconditions (`k_tile` < the CTA's k-tiles); `s_a` lies in the CTA's
/// shared memory.
#[inline(always)]
pub(crate) unsafe fn load_a_slice<const BS: u32, const BK: u32, const SRC: u32>(
    g: &CtaOperands,
    k_tile: u32,
    s_a: SmemTile<BS, BK>,
    tid: u32,
    threads: u32,
) {
    if src::dense_k(SRC) {
        return unsafe { load_x_slice::<BS, BK, SRC>(g, k_tile, s_a, tid, threads) };
    }
    let (blk, kk) = g.k_tile_at::<BS, BK>(k_tile);
    if SRC == src::TRANSPOSED {
        // Rows kk..kk + BK of A's stored block perm[blk] (BS, BS) row-major: BK * BS contiguous elements, staged
        // as the (BK, BS) tile they are (k rows, m chunks) and read transposed by `load_fragments`.
        let s_at = s_a.reshaped::<BK, BS>();
        let stored = unsafe { ptx::ld_global_u32(g.perm.add(blk as usize)) };
        let (chunks, cpr) = (SmemTile::<BK, BS>::CHUNKS, SmemTile::<BK, BS>::CHUNKS_PER_ROW);
        let g_a = unsafe { g.a_values.add(stored as usize * (BS * BS) as usize + (kk * BS) as usize) };
        let mut i = 0;
        while i < chunks.div_ceil(threads) {
            let idx = tid + i * threads;
            if chunks.is_multiple_of(threads) || idx < chunks {
                let src = unsafe { g_a.add((idx * CHUNK_HALVES) as usize) };
                unsafe { ptx::cp_async_cg_16(s_at.chunk_addr(idx / cpr, idx % cpr), src as *const u8, 16) };
            }
            i += 1;
        }
        return;
    }
    // A: (BS, BK) slice of block `blk`, which is (BS, BS) row-major. A's chunks may not divide evenly among the
    // threads (bs 16: 32 chunks for 128 threads); B's do (asserted in bsr_spmm).
    let (a_chunks, a_cpr) = (SmemTile::<BS, BK>::CHUNKS, SmemTile::<BS, BK>::CHUNKS_PER_ROW);
    let g_a = unsafe { g.a_values.add(blk as usize * (BS * BS) as usize + kk as usize) };
    let mut i = 0;
    while i < a_chunks.div_ceil(threads) {
        let idx = tid + i * threads;
        if a_chunks.is_multiple_of(threads) || idx < a_chunks {
            let (row, chunk) = (idx / a_cpr, idx % a_cpr);
            let src = unsafe { g_a.add((row * BS + chunk * CHUNK_HALVES) as usize) };
            unsafe { ptx::cp_async_cg_16(s_a.chunk_addr(row, chunk), src as *const u8, 16) };
        }
        i += 1;
    }
}

/// PRODUCER, A's half for SDDMM ([`src::dense_k`]): this thread's cp.async copies of X's slice of k-tile
/// `k_tile` (columns `k_tile * BK..` of rows `m0..m0 + BS`), zero past K: a row-major X as the (BS, BK) tile of
/// the forward's A (chunks along k, a chunk cut by K copies its valid elements), a column-major X as the (BK, BS)
/// tile of its k rows (m chunks, rows at or past K zero).
///
/// # Safety
/// X holds rows `m0..m0 + BS` and columns `0..K` with leading dimension `lda` (16-byte aligned rows); `s_a` lies in
/// the CTA's shared memory.
#[inline(always)]
unsafe fn load_x_slice<const BS: u32, const BK: u32, const SRC: u32>(
    g: &CtaOperands,
    k_tile: u32,
    s_a: SmemTile<BS, BK>,
    tid: u32,
    threads: u32,
) {
    let k0 = k_tile * BK;
    let (lda, m0) = (g.lda as usize, g.m0 as usize);
    if SRC == src::SDDMM_X_COL {
        // Element (m, k) at k * lda + m: row r of the tile is X's k = k0 + r, its BS elements from m0 contiguous.
        let s_at = s_a.reshaped::<BK, BS>();
        let (chunks, cpr) = (SmemTile::<BK, BS>::CHUNKS, SmemTile::<BK, BS>::CHUNKS_PER_ROW);
        let mut i = 0;
        while i < chunks.div_ceil(threads) {
            let idx = tid + i * threads;
            if chunks.is_multiple_of(threads) || idx < chunks {
                let (row, chunk) = (idx / cpr, idx % cpr);
                let k = k0 + row;
                let offset = k as usize * lda + m0 + (chunk * CHUNK_HALVES) as usize;
                let (from, bytes) = if k < g.k_len { (unsafe { g.a_values.add(offset) }, 16) } else { (g.a_values, 0) };
                unsafe { ptx::cp_async_cg_16(s_at.chunk_addr(row, chunk), from as *const u8, bytes) };
            }
            i += 1;
        }
        return;
    }
    // Row-major: element (m, k) at m * lda + k; chunk c of row r holds k0 + 8c.. of row m0 + r.
    let (chunks, cpr) = (SmemTile::<BS, BK>::CHUNKS, SmemTile::<BS, BK>::CHUNKS_PER_ROW);
    let mut i = 0;
    while i < chunks.div_ceil(threads) {
        let idx = tid + i * threads;
        if chunks.is_multiple_of(threads) || idx < chunks {
            let (row, chunk) = (idx / cpr, idx % cpr);
            let k = k0 + chunk * CHUNK_HALVES;
            let valid = if k < g.k_len { (g.k_len - k).min(CHUNK_HALVES) } else { 0 };
            let offset = (m0 + row as usize) * lda + k as usize;
            let from = if valid > 0 { unsafe { g.a_values.add(offset) } } else { g.a_values };
            unsafe { ptx::cp_async_cg_16(s_a.chunk_addr(row, chunk), from as *const u8, valid * 2) };
        }
        i += 1;
    }
}

/// PRODUCER, B's half for SDDMM ([`src::dense_k`]): this thread's cp.async copies of Y^T's rows `k_tile * BK..`
/// (zero past K) at the CTA's columns `n0..n0 + BN` (one stored block's: all inside N). A row-major Y^T (Y stored
/// column-major) as the forward's (BK, BN) tile, a column-major one (Y row-major, k contiguous) as its (BN, BK) tile,
/// a chunk cut by K copying its valid elements.
///
/// # Safety
/// Y^T holds rows `0..K` and columns `n0..n0 + BN` with leading dimension `ldb` (16-byte aligned); `s_b` lies in the
/// CTA's shared memory; after [`ptx::griddep_wait`].
#[inline(always)]
unsafe fn load_yt_strip<const BN: u32, const BK: u32, const B_COL: bool>(
    g: &CtaOperands,
    k_tile: u32,
    s_b: SmemTile<BK, BN>,
    tid: u32,
    threads: u32,
) {
    let k0 = k_tile * BK;
    let (ldb, n0) = (g.ldb as usize, g.n0 as usize);
    if B_COL {
        // Element (k, n) at n * ldb + k: row j of the (BN, BK) tile is column n0 + j, chunks along k.
        let s_bt = s_b.reshaped::<BN, BK>();
        let (chunks, cpr) = (SmemTile::<BN, BK>::CHUNKS, SmemTile::<BN, BK>::CHUNKS_PER_ROW);
        let mut i = 0;
        while i < chunks / threads {
            let idx = tid + i * threads;
            let (row, chunk) = (idx / cpr, idx % cpr);
            let k = k0 + chunk * CHUNK_HALVES;
            let valid = if k < g.k_len { (g.k_len - k).min(CHUNK_HALVES) } else { 0 };
            let offset = (n0 + row as usize) * ldb + k as usize;
            let from = if valid > 0 { unsafe { g.b.add(offset) } } else { g.b };
            unsafe { ptx::cp_async_cg_16(s_bt.chunk_addr(row, chunk), from as *const u8, valid * 2) };
            i += 1;
        }
        return;
    }
    // Element (k, n) at k * ldb + n: row r of the tile is k0 + r.
    let (chunks, cpr) = (SmemTile::<BK, BN>::CHUNKS, SmemTile::<BK, BN>::CHUNKS_PER_ROW);
    let mut i = 0;
    while i < chunks / threads {
        let idx = tid + i * threads;
        let (row, chunk) = (idx / cpr, idx % cpr);
        let k = k0 + row;
        let offset = k as usize * ldb + n0 + (chunk * CHUNK_HALVES) as usize;
        let (from, bytes) = if k < g.k_len { (unsafe { g.b.add(offset) }, 16) } else { (g.b, 0) };
        unsafe { ptx::cp_async_cg_16(s_b.chunk_addr(row, chunk), from as *const u8, bytes) };
        i += 1;
    }
}

/// PRODUCER, B's half: this thread's cp.async copies of the (BK, BN) strip of B at rows `col * BS + kk`,
/// columns `n0 .. n0 + BN` for k-tile `k_tile` into `s_b` (`col = col_idx[blk]`: the narrow and mid tiles pass
/// it, loaded a k-tile ahead by [`bsr_spmm`]; the wide tiles load it here and ignore `col`); B's chunks at or past
/// column n are zero-filled (cp.async src-size). A column-major B is staged as the (BN, BK) tile of its columns
/// `n0 .. n0 + BN` (`B_COL`: rows of the tile are columns of B, 16-byte chunks run along k), whole rows past
/// column n zero-filled. The CTA's `threads` threads (a constant) share the chunks; this is thread `tid`.
///
/// # Safety
/// As [`load_a_slice`], and `col` is `col_idx[blk]` when `loads_index_ahead(BN)`; `s_b` lies in the CTA's shared
/// memory; after [`ptx::griddep_wait`].
#[inline(always)]
pub(crate) unsafe fn load_b_strip<const BS: u32, const BN: u32, const BK: u32, const B_COL: bool, const SRC: u32>(
    g: &CtaOperands,
    k_tile: u32,
    col: u32,
    s_b: SmemTile<BK, BN>,
    tid: u32,
    threads: u32,
) {
    if src::dense_k(SRC) {
        return unsafe { load_yt_strip::<BN, BK, B_COL>(g, k_tile, s_b, tid, threads) };
    }
    let (blk, kk) = g.k_tile_at::<BS, BK>(k_tile);
    // B: rows [col * BS + kk, + BK), columns [n0, n0 + BN); columns >= n are zero-filled. The wide tiles load the
    // index here, after A's copies are issued.
    let col = if loads_index_ahead(BN) { col } else { unsafe { load_index(g.col_idx, blk, g.index_shift) } };
    let k_row0 = col * BS + kk;
    if B_COL {
        // (BN, BK) tile: row j is column n0 + j of B, its BK elements from k_row0 contiguous in global memory.
        // This thread copies chunk `tid % cpr` of rows `tid / cpr + i * rows_per_pass`: one source pointer stepped
        // by `rows_per_pass` columns of B (the 64-bit address of every row, hoisted out of the k loop by LLVM,
        // spilled the bs 64 kernels on sm_90a).
        let s_bt = s_b.reshaped::<BN, BK>();
        let (b_chunks, b_cpr) = (SmemTile::<BN, BK>::CHUNKS, SmemTile::<BN, BK>::CHUNKS_PER_ROW);
        let rows_per_pass = threads / b_cpr;
        let (row0, chunk) = (tid / b_cpr, tid % b_cpr);
        let mut col = g.n0 + row0;
        let k0 = (k_row0 + chunk * CHUNK_HALVES) as usize;
        let mut src = unsafe { g.b.add(k0).add(col as usize * g.ldb as usize) };
        let step = rows_per_pass as usize * g.ldb as usize;
        let mut i = 0;
        while i < b_chunks / threads {
            let (from, bytes) = if col < g.n { (src, 16) } else { (g.b, 0) };
            let row = row0 + i * rows_per_pass;
            unsafe { ptx::cp_async_cg_16(s_bt.chunk_addr(row, chunk), from as *const u8, bytes) };
            src = src.wrapping_add(step);
            col += rows_per_pass;
            i += 1;
        }
        return;
    }
    let (b_chunks, b_cpr) = (SmemTile::<BK, BN>::CHUNKS, SmemTile::<BK, BN>::CHUNKS_PER_ROW);
    let mut i = 0;
    while i < b_chunks / threads {
        let idx = tid + i * threads;
        let (row, chunk) = (idx / b_cpr, idx % b_cpr);
        let col = g.n0 + chunk * CHUNK_HALVES;
        let valid = if col < g.n { (g.n - col).min(CHUNK_HALVES) } else { 0 };
        let src =
            if valid > 0 { unsafe { g.b.add((k_row0 + row) as usize * g.ldb as usize + col as usize) } } else { g.b };
        unsafe { ptx::cp_async_cg_16(s_b.chunk_addr(row, chunk), src as *const u8, valid * 2) };
        i += 1;
    }
}

/// SHARED -> REGISTERS: loads the warp's fragments of k16 step `ks` of one ring slot: MI `ldmatrix.x4` of its
/// (16, 16) A sub-tiles and NI / 2 `ldmatrix.x4.trans` of its (16, 16) B sub-tiles (two n8 fragments each), or
/// NI / 2 plain `ldmatrix.x4` of the (BN, BK) tile of a column-major B (`B_COL`).
///
/// # Safety
/// Warp-collective: all 32 lanes of the warp call it, in warp-uniform control flow; `s_a` and `s_b` lie in the
/// CTA's shared memory and hold a landed k-tile.
#[inline(always)]
pub(crate) unsafe fn load_fragments<
    const BS: u32,
    const BN: u32,
    const BK: u32,
    const MI: usize,
    const NI: usize,
    const B_COL: bool,
    const SRC: u32,
>(
    s_a: SmemTile<BS, BK>,
    s_b: SmemTile<BK, BN>,
    ks: u32,
    warp: WarpCoord,
    a_frag: &mut FragA<MI>,
    b_frag: &mut FragB<NI>,
) {
    if src::a_k_rows(SRC) {
        // A (BK, BS) tile, k rows: `ldmatrix.x4.trans` with B's roles gives the four 8x8 matrices in the order
        // (k 0-7, m 0-7), (k 8-15, m 0-7), (k 0-7, m 8-15), (k 8-15, m 8-15), which are a0, a2, a1, a3.
        let s_at = s_a.reshaped::<BK, BS>();
        for (mi, frag) in a_frag.iter_mut().enumerate() {
            let (r, ch) = ldsm_b_role(warp.lane);
            let chunk = (warp.warp_m * WarpTile::<MI, NI>::WM + mi as u32 * 16) / CHUNK_HALVES + ch;
            let v = unsafe { ptx::ldmatrix_x4_trans(s_at.chunk_addr(ks * 16 + r, chunk)) };
            *frag = [v[0], v[2], v[1], v[3]];
        }
    } else {
        for (mi, frag) in a_frag.iter_mut().enumerate() {
            let (r, ch) = ldsm_a_role(warp.lane);
            let row = warp.warp_m * WarpTile::<MI, NI>::WM + mi as u32 * 16 + r;
            *frag = unsafe { ptx::ldmatrix_x4(s_a.chunk_addr(row, ks * 2 + ch)) };
        }
    }
    if B_COL {
        let s_bt = s_b.reshaped::<BN, BK>();
        for nj in 0..NI / 2 {
            let (r, ch) = ldsm_bt_role(warp.lane);
            let row = warp.warp_n * WarpTile::<MI, NI>::WN + nj as u32 * 16 + r;
            let v = unsafe { ptx::ldmatrix_x4(s_bt.chunk_addr(row, ks * 2 + ch)) };
            b_frag[2 * nj] = [v[0], v[1]];
            b_frag[2 * nj + 1] = [v[2], v[3]];
        }
        return;
    }
    for nj in 0..NI / 2 {
        let (r, ch) = ldsm_b_role(warp.lane);
        let chunk = (warp.warp_n * WarpTile::<MI, NI>::WN + nj as u32 * 16) / CHUNK_HALVES + ch;
        let v = unsafe { ptx::ldmatrix_x4_trans(s_b.chunk_addr(ks * 16 + r, chunk)) };
        b_frag[2 * nj] = [v[0], v[1]];
        b_frag[2 * nj + 1] = [v[2], v[3]];
    }
}

/// MMA: the warp's MI x NI `mma.sync.m16n8k16` (of the input type `I`) of one k16 step, `acc += a_frag x
/// b_frag`. Warp-collective: all 32 lanes of the warp call it, in warp-uniform control flow.
#[inline(always)]
pub(crate) fn mma_warp_tile<const MI: usize, const NI: usize, I: Input>(
    acc: &mut AccTile<MI, NI>,
    a_frag: &FragA<MI>,
    b_frag: &FragB<NI>,
) {
    for (acc_m, a) in acc.iter_mut().zip(a_frag.iter()) {
        for (acc_mn, b) in acc_m.iter_mut().zip(b_frag.iter()) {
            I::mma(acc_mn, *a, *b);
        }
    }
}

/// The deepest ring of any configuration (the prefetch's array of column indices).
pub(crate) const MAX_STAGES: u32 = 8;

/// Whether a tile of `bn` columns loads each block's column index a k-tile ahead of its copies ([`bsr_spmm`]),
/// passing it to [`load_k_tile`]: the narrow and mid tiles (BN 16 to 64), not the wide ones (BN 128 and 256),
/// which load it in [`load_k_tile`].
const fn loads_index_ahead(bn: u32) -> bool {
    bn <= 64
}

/// The next slot of a STAGES-deep ring.
#[inline(always)]
pub(crate) fn next_stage<const STAGES: u32>(stage: u32) -> u32 {
    if stage + 1 == STAGES { 0 } else { stage + 1 }
}

/// What a caller adds to [`mainloop_frag_db`] at its three points: nothing for whole and split rows
/// ([`NoHooks`]); the flat block list's segment ends (`sm80::flat`).
pub(crate) trait MainLoopHooks<const MI: usize, const NI: usize> {
    /// Whether the caller always has k-tiles (the flat list: every CTA's range holds blocks), so that the first
    /// fragments load without a check.
    const NEVER_EMPTY: bool = false;
    /// After the barrier of each k-tile's last k-step (every thread's stores before it are visible to the CTA).
    #[inline(always)]
    fn at_barrier(&mut self) {}
    /// After the copies of a k-tile are issued and committed; `k_tile_next` is the next k-tile to issue.
    #[inline(always)]
    fn issued(&mut self, _k_tile_next: u32) {}
    /// After the mma of k-tiles `0..k_tile`: `acc` may be stored and reset.
    #[inline(always)]
    fn k_tile_done(&mut self, _k_tile: u32, _acc: &mut AccTile<MI, NI>) {}
}

/// The main loop of whole and split rows: no hooks.
pub(crate) struct NoHooks;

impl<const MI: usize, const NI: usize> MainLoopHooks<MI, NI> for NoHooks {}

/// The sm_80 main loop with fragments double-buffered in registers (the CUTLASS sm80 multistage order), over the
/// `num_k_tiles` k-tiles of `g`'s blocks after the prefetch of the first STAGES - 1: the fragments of k-step
/// ks + 1 load while the mma of ks run, the copies of the next k-tile are issued at ks == 0 (with the look-ahead,
/// `col_next` is its column index, and each issue loads the next one with `col_of`), and the wait + barrier that
/// hand over the next slot come before the last k-step's mma, which hide them. With several k-groups the loop
/// runs `loop_k_tiles` (the largest group's) and a group whose share is done keeps the CTA's barriers and ring
/// counts only. `hooks` runs the caller's work at the loop's points ([`MainLoopHooks`]).
///
/// # Safety
/// CTA-collective (every thread, CTA-uniform control flow) after the prefetch; `g` and the rings as
/// [`load_k_tile`]'s.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn mainloop_frag_db<
    const BS: u32,
    const BN: u32,
    const BK: u32,
    const MI: usize,
    const NI: usize,
    const STAGES: u32,
    const K_GROUPS: u32,
    const B_COL: bool,
    const SRC: u32,
    I: Input,
    H: MainLoopHooks<MI, NI>,
>(
    (s_a, s_b): (SmemRing<BS, BK, STAGES>, SmemRing<BK, BN, STAGES>),
    g: &CtaOperands,
    (warp, tid, threads): (WarpCoord, u32, u32),
    (num_k_tiles, loop_k_tiles): (u32, u32),
    (mut col_next, col_of): (u32, impl Fn(u32) -> u32),
    acc: &mut AccTile<MI, NI>,
    hooks: &mut H,
) {
    let ahead = loads_index_ahead(BN);
    let k_steps = BK / 16; // k16 mma steps per k-tile
    ptx::cp_async_wait_n(STAGES - 2);
    ptx::bar_sync();
    let mut smem_pipe_read = 0;
    let mut smem_pipe_write = STAGES - 1;
    let mut k_tile_next = STAGES - 1;
    let mut a_frag: [FragA<MI>; 2] = [[[0; 4]; MI]; 2]; // (2, MI, 4): two k-steps of A fragments
    let mut b_frag: [FragB<NI>; 2] = [[[0; 2]; NI]; 2]; // (2, NI, 2)
    if H::NEVER_EMPTY || num_k_tiles > 0 {
        let (s_a_read, s_b_read) = (s_a.stage(smem_pipe_read), s_b.stage(smem_pipe_read));
        unsafe {
            load_fragments::<BS, BN, BK, MI, NI, B_COL, SRC>(
                s_a_read,
                s_b_read,
                0,
                warp,
                &mut a_frag[0],
                &mut b_frag[0],
            )
        };
    }
    let mut k_tile = 0;
    while k_tile < loop_k_tiles {
        // With several groups, a group whose share is done keeps the CTA's barriers and ring counts only.
        let live = K_GROUPS == 1 || k_tile < num_k_tiles;
        for ks in 0..k_steps {
            if ks == k_steps - 1 {
                // Tile k_tile + 1 has landed for this thread; after the barrier for everyone. Every read of
                // slot k_tile (its last fragments were loaded at the previous k-step) is done.
                ptx::cp_async_wait_n(STAGES - 2);
                ptx::bar_sync();
                smem_pipe_read = next_stage::<STAGES>(smem_pipe_read);
                hooks.at_barrier();
            }
            let (cur, nxt) = ((ks % 2) as usize, ((ks + 1) % 2) as usize);
            if live && (ks + 1 < k_steps || k_tile + 1 < num_k_tiles) {
                let ks_next = if ks + 1 == k_steps { 0 } else { ks + 1 };
                let (s_a_read, s_b_read) = (s_a.stage(smem_pipe_read), s_b.stage(smem_pipe_read));
                let (a_next, b_next) = (&mut a_frag[nxt], &mut b_frag[nxt]);
                unsafe {
                    load_fragments::<BS, BN, BK, MI, NI, B_COL, SRC>(s_a_read, s_b_read, ks_next, warp, a_next, b_next)
                };
            }
            if ks == 0 {
                // Slot smem_pipe_write held tile k_tile - 1, whose reads all finished before the last barrier.
                if k_tile_next < num_k_tiles {
                    let (s_a_write, s_b_write) = (s_a.stage(smem_pipe_write), s_b.stage(smem_pipe_write));
                    unsafe {
                        load_k_tile::<BS, BN, BK, B_COL, SRC>(
                            g,
                            k_tile_next,
                            col_next,
                            s_a_write,
                            s_b_write,
                            tid,
                            threads,
                        )
                    };
                    if ahead && k_tile_next + 1 < num_k_tiles {
                        col_next = col_of(k_tile_next + 1);
                    }
                }
                ptx::cp_async_commit();
                smem_pipe_write = next_stage::<STAGES>(smem_pipe_write);
                k_tile_next += 1;
                hooks.issued(k_tile_next);
            }
            if live {
                mma_warp_tile::<MI, NI, I>(acc, &a_frag[cur], &b_frag[cur]);
            }
        }
        k_tile += 1;
        hooks.k_tile_done(k_tile, acc);
    }
}

/// The sm_80 main loop without fragment double-buffering (bs 16's one k16 step per tile): one barrier per
/// k-tile before its fragments are loaded, the copies of k-tile `k_tile + STAGES - 1` issued after it, over the
/// `num_k_tiles` k-tiles of `g`'s operands after the prefetch of the first STAGES - 1 (`col_next` and `col_of` as
/// [`mainloop_frag_db`]'s).
///
/// # Safety
/// As [`mainloop_frag_db`].
#[inline(always)]
pub(crate) unsafe fn mainloop_simple<
    const BS: u32,
    const BN: u32,
    const BK: u32,
    const MI: usize,
    const NI: usize,
    const STAGES: u32,
    const B_COL: bool,
    const SRC: u32,
    I: Input,
>(
    (s_a, s_b): (SmemRing<BS, BK, STAGES>, SmemRing<BK, BN, STAGES>),
    g: &CtaOperands,
    (warp, tid, threads): (WarpCoord, u32, u32),
    num_k_tiles: u32,
    (mut col_next, col_of): (u32, impl Fn(u32) -> u32),
    acc: &mut AccTile<MI, NI>,
) {
    let ahead = loads_index_ahead(BN);
    let k_steps = BK / 16;
    // MAIN LOOP, one barrier per k-tile before its fragments are loaded.
    let mut k_tile = 0;
    while k_tile < num_k_tiles {
        // Tile k_tile has landed (at most STAGES - 2 newer groups pending) for this thread; the barrier makes
        // it visible to all, and tells every thread that slot (k_tile - 1) % STAGES has been read by everyone.
        ptx::cp_async_wait_n(STAGES - 2);
        ptx::bar_sync();
        let k_tile_next = k_tile + STAGES - 1;
        if k_tile_next < num_k_tiles {
            let smem_pipe_write = k_tile_next % STAGES;
            let (s_a_write, s_b_write) = (s_a.stage(smem_pipe_write), s_b.stage(smem_pipe_write));
            unsafe {
                load_k_tile::<BS, BN, BK, B_COL, SRC>(g, k_tile_next, col_next, s_a_write, s_b_write, tid, threads)
            };
            if ahead && k_tile_next + 1 < num_k_tiles {
                col_next = col_of(k_tile_next + 1);
            }
        }
        ptx::cp_async_commit();
        let smem_pipe_read = k_tile % STAGES;
        let (s_a_read, s_b_read) = (s_a.stage(smem_pipe_read), s_b.stage(smem_pipe_read));
        for ks in 0..k_steps {
            let mut a_frag: FragA<MI> = [[0; 4]; MI]; // (MI, 4)
            let mut b_frag: FragB<NI> = [[0; 2]; NI]; // (NI, 2)
            unsafe {
                load_fragments::<BS, BN, BK, MI, NI, B_COL, SRC>(s_a_read, s_b_read, ks, warp, &mut a_frag, &mut b_frag)
            };
            mma_warp_tile::<MI, NI, I>(acc, &a_frag, &b_frag);
        }
        k_tile += 1;
    }
}

/// A split row's hand-over: where this CTA's partial tile goes and how the row's CTAs count themselves in.
struct SplitHandOver<'a> {
    p: &'a BsrSpmmParams,
    /// The slot of part 0 of this row and N tile; part `i` is `first_slot + i * n_tiles`.
    first_slot: u64,
    n_tiles: u32,
    /// The index of the row's (and N tile's) counter.
    counter: u64,
    /// This CTA's part, and the row's parts.
    part: u32,
    parts: u32,
    /// Shared memory for the one flag word (the ring, idle once the main loop is done).
    smem: u32,
}

impl SplitHandOver<'_> {
    /// Stores this CTA's partial tile, counts the CTA in, and returns whether it is the row's last: then `acc`
    /// holds the sum of every part's tile, added in part order (the same bits whichever CTA finishes last), and
    /// the counter is zero again. The other CTAs return `false` and must leave without touching C.
    ///
    /// The slots, the count and the sum are [`crate::reduce`]'s (a slot thread-major per 16 bytes).
    ///
    /// `threads` threads hold the tile (`tid` is this one's index among them); with several k-groups only the
    /// `active` group's threads do (`false`: another group's thread, which only takes part in the barriers and
    /// gets `false`).
    ///
    /// # Safety
    /// CTA-collective (every thread, CTA-uniform control flow, after the main loop and `cp.async.wait_all`); the
    /// launch's partials and counters cover this row's slots and counter (host: `layout::split_slots`).
    #[inline(always)]
    unsafe fn combine<const MI: usize, const NI: usize>(
        &self,
        acc: &mut AccTile<MI, NI>,
        tid: u32,
        threads: u32,
        active: bool,
    ) -> bool {
        let slot_bytes = (threads as usize) * MI * NI * 16;
        let slot_ptr = |i: u32| {
            let slot = self.first_slot + i as u64 * self.n_tiles as u64;
            (self.p.split_partials + slot * slot_bytes as u64) as *mut u32
        };
        let lane = SlotLane { tid, threads };
        if active {
            unsafe { reduce::store_tile(slot_ptr(self.part), lane, acc) };
        }
        // Every thread's stores are done; one thread publishes them at GPU scope and counts the CTA in.
        ptx::bar_sync();
        if active && tid == 0 {
            let counter = || (self.p.split_counters as *mut u32).wrapping_add(self.counter as usize);
            let last = unsafe { reduce::count_in(counter, self.parts) };
            unsafe { ptx::st_shared_v4(self.smem, [last as u32, 0, 0, 0]) };
        }
        ptx::bar_sync();
        if unsafe { ptx::ld_shared_v4(self.smem) }[0] == 0 || !active {
            return false;
        }
        // The last CTA: the parts' tiles in order (its own from registers, bit-identical to what it stored).
        unsafe { reduce::sum_parts(acc, (self.parts, Some(self.part)), slot_ptr, lane) };
        true
    }
}

/// The kernel body for one configuration. See the module docs for the algorithm and the preconditions.
#[inline(always)]
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
    const K_GROUPS: u32,
    const B_COL: bool,
    const SPLIT: bool,
    const SRC: u32,
    I: Input,
    O: Output,
>(
    p: &BsrSpmmParams,
) {
    const {
        assert!(BS == WARPS_M * MI as u32 * 16, "BS must equal WARPS_M * MI * 16");
        assert!(BN == WARPS_N * NI as u32 * 8, "BN must equal WARPS_N * NI * 8");
        assert!(NI.is_multiple_of(2), "NI must be even: B fragments come in pairs from ldmatrix.x4.trans");
        assert!(BK.is_multiple_of(16) && BS.is_multiple_of(BK), "BK must be a multiple of 16 that divides BS");
        assert!(STAGES >= 2, "the ring needs at least two stages");
        assert!(
            (BK * BN / CHUNK_HALVES).is_multiple_of(32 * WARPS_M * WARPS_N),
            "the B stage tile's 16-byte chunks must divide evenly among the CTA's threads"
        );
        assert!(
            !FRAG_DB || ((BK / 16).is_multiple_of(2) && STAGES >= 3),
            "FRAG_DB needs an even number of k-steps and 3+ stages"
        );
        assert!(K_GROUPS == 1 || K_GROUPS == 2, "one or two k-groups");
        assert!(K_GROUPS == 1 || FRAG_DB, "k-groups run the fragment double-buffered main loop");
    }
    let BsrSpmmParams { ldb, n, block_rows, group_rows, split_chunks, split_blocks, .. } = *p;
    // Split rows (narrow tiles only): `chunks` CTAs per block row and N tile, each taking one part of the row.
    let chunks = if SPLIT && split_chunks > 1 { split_chunks } else { 1 };
    let index_shift = if p.index64 != 0 { 3 } else { 2 };
    let row_order = p.row_order as *const u32;
    // K-GROUPS: `K_GROUPS` groups of `threads` threads, each with its own ring, taking one contiguous share of the
    // CTA's blocks; `tid` is the thread's index in its group.
    let threads: u32 = 32 * WARPS_M * WARPS_N;
    let k_tiles_per_block = BS / BK;

    let (group, tid) = if K_GROUPS == 1 {
        (0, ptx::thread_idx_x())
    } else {
        (ptx::thread_idx_x() / threads, ptx::thread_idx_x() % threads)
    };
    let (warp_id, lane) = (tid / 32, tid % 32);
    let warp = WarpCoord { warp_m: warp_id / WARPS_N, warp_n: warp_id % WARPS_N, lane };

    // SAFETY (whole body): the host launcher guarantees the preconditions in the module docs; every global
    // address below stays inside A's values, row_ptr, col_idx, row_order, B's K x n window and C's tile.
    // A split row's CTAs are adjacent "virtual rows" of the raster: (row position, part) = divmod by `chunks`.
    let n_tiles = n.div_ceil(BN);
    let (virtual_row, n_tile) =
        raster(ptx::block_idx_x(), block_rows * chunks, n_tiles, group_rows.saturating_mul(chunks));
    let (row_pos, part) = (virtual_row / chunks, virtual_row % chunks);
    let block_row =
        if row_order.is_null() { row_pos } else { unsafe { ptx::ld_global_u32(row_order.add(row_pos as usize)) } };
    let n0 = n_tile * BN;
    let row_begin = unsafe { load_index(p.row_ptr, block_row, index_shift) };
    let row_end = unsafe { load_index(p.row_ptr, block_row + 1, index_shift) };
    // This CTA's blocks: part `part` of `parts` equal ranges of the row (the whole row without a split). A CTA
    // past its row's parts has nothing to do (CTA-uniform: before any barrier).
    let len = row_end - row_begin;
    let parts = if chunks > 1 { split_parts(len, split_blocks, chunks) } else { 1 };
    if part >= parts {
        return;
    }
    let part_start = |i: u32| row_begin + (i as u64 * len as u64 / parts as u64) as u32;
    let (blk_begin, blk_end) = (part_start(part), part_start(part + 1));
    // This group's share of the part: blocks [group * n / K_GROUPS, (group + 1) * n / K_GROUPS) of its n. The
    // groups run their main loops in step (the CTA's barrier), over the largest share's k-tiles.
    let part_blocks = blk_end - blk_begin;
    let group_start = |i: u32| blk_begin + (i as u64 * part_blocks as u64 / K_GROUPS as u64) as u32;
    let (blk_begin, blk_end) = (group_start(group), group_start(group + 1));
    let num_k_tiles = (blk_end - blk_begin) * k_tiles_per_block;
    let loop_k_tiles = part_blocks.div_ceil(K_GROUPS) * k_tiles_per_block;
    let g = CtaOperands {
        a_values: p.a_values as *const u16,
        col_idx: p.col_idx,
        index_shift,
        blk_begin,
        b: p.b as *const u16,
        ldb,
        n,
        n0,
        perm: if SRC == src::TRANSPOSED { p.perm as *const u32 } else { core::ptr::null() },
        k_len: 0,
        lda: 0,
        m0: 0,
    };

    let cta_smem = ptx::dynamic_smem_base();
    let ring_bytes = SmemRing::<BS, BK, STAGES>::BYTES + SmemRing::<BK, BN, STAGES>::BYTES;
    let smem = cta_smem + group * ring_bytes; // this group's ring (the main loop's barrier is the CTA's)
    let s_a = SmemRing::<BS, BK, STAGES>::at(smem); // (BS, BK, STAGES) f16, swizzled
    let s_b = SmemRing::<BK, BN, STAGES>::at(smem + SmemRing::<BS, BK, STAGES>::BYTES); // (BK, BN, STAGES)

    let mut acc: AccTile<MI, NI> = [[[0.0; 4]; NI]; MI]; // (MI, NI, 4): the warp's (WM, WN) f32 tile

    // The block-column index of k-tile `t` (< num_k_tiles): B's rows for it start at `col * BS`.
    // SAFETY: t < num_k_tiles, so the block lies in this CTA's part of the row.
    let col_of = |t: u32| unsafe { load_index(g.col_idx, g.blk_begin + t / k_tiles_per_block, g.index_shift) };
    // The narrow and mid tiles load it a k-tile before the copies that need it, so that its global round trip runs
    // under a k-tile of work instead of stalling every thread between the barrier and the copies (Nsight Compute,
    // 16384^2 bs 64 N = 8: 18% of the warps' time). A wide tile's k-tile of mma already hides it, and there the
    // look-ahead made the kernels 2-5% slower: they load it in load_k_tile, after A's copies (docs/perf-notes.md,
    // issue 12 step 9).
    let ahead = loads_index_ahead(BN);

    // PREFETCH: the first STAGES - 1 k-tiles, one commit group each (empty groups keep the count uniform). With the
    // look-ahead their column indices are all requested before the first copy waits on one.
    const { assert!(STAGES <= MAX_STAGES, "the prefetch's index array holds MAX_STAGES entries") };
    let mut cols = [0u32; MAX_STAGES as usize];
    let mut s = 0;
    while ahead && s < STAGES {
        if s < num_k_tiles {
            cols[s as usize] = col_of(s);
        }
        s += 1;
    }
    // A's slice of k-tile 0 first: A, its indices and `row_order` are the weights, which the grid before this one
    // on the stream does not write, so a launch with programmatic serialization reads them while that grid
    // finishes; B, C, the bias and the split-row workspace only after `griddep_wait` (ptx/griddep.rs). Empty rows
    // wait too: they write C.
    if num_k_tiles > 0 {
        unsafe { load_a_slice::<BS, BK, SRC>(&g, 0, s_a.stage(0), tid, threads) };
    }
    ptx::griddep_wait();
    let mut s = 0;
    while s < STAGES - 1 {
        if s < num_k_tiles {
            let col = cols[s as usize]; // 0 (unused) without the look-ahead
            if s > 0 {
                unsafe { load_a_slice::<BS, BK, SRC>(&g, s, s_a.stage(s), tid, threads) };
            }
            unsafe { load_b_strip::<BS, BN, BK, B_COL, SRC>(&g, s, col, s_b.stage(s), tid, threads) };
        }
        ptx::cp_async_commit();
        s += 1;
    }
    // With the look-ahead, the column index of the next k-tile the main loop issues (STAGES - 1), requested above
    // (without it 0, and load_k_tile loads each index itself).
    let col_next = cols[(STAGES - 1) as usize];

    if FRAG_DB {
        // MAIN LOOP, fragments double-buffered in registers.
        let rings = (s_a, s_b);
        let (threads_of, k_tiles) = ((warp, tid, threads), (num_k_tiles, loop_k_tiles));
        unsafe {
            mainloop_frag_db::<BS, BN, BK, MI, NI, STAGES, K_GROUPS, B_COL, SRC, I, NoHooks>(
                rings,
                &g,
                threads_of,
                k_tiles,
                (col_next, col_of),
                &mut acc,
                &mut NoHooks,
            )
        };
    } else {
        // MAIN LOOP, one barrier per k-tile before its fragments are loaded.
        let rings = (s_a, s_b);
        unsafe {
            mainloop_simple::<BS, BN, BK, MI, NI, STAGES, B_COL, SRC, I>(
                rings,
                &g,
                (warp, tid, threads),
                num_k_tiles,
                (col_next, col_of),
                &mut acc,
            )
        };
    }
    // Every copy of A is issued: the next grid on the stream may start its own (ptx/griddep.rs), under this one's
    // last k-tiles, hand-over and epilogue.
    ptx::griddep_launch_dependents();
    ptx::cp_async_wait::<0>();

    // K-GROUPS: group 0 adds the other group's tile (group order: the same bits run to run) through the idle rings.
    if K_GROUPS > 1 {
        ptx::bar_sync(); // every group's main loop is done
        let slot = |j: usize| cta_smem + (j as u32 * threads + tid) * 16;
        if group == 1 {
            for (mi, acc_m) in acc.iter().enumerate() {
                for (ni, v) in acc_m.iter().enumerate() {
                    let bits = [v[0].to_bits(), v[1].to_bits(), v[2].to_bits(), v[3].to_bits()];
                    unsafe { ptx::st_shared_v4(slot(mi * NI + ni), bits) };
                }
            }
        }
        ptx::bar_sync();
        if group == 0 {
            for (mi, acc_m) in acc.iter_mut().enumerate() {
                for (ni, v) in acc_m.iter_mut().enumerate() {
                    let t = unsafe { ptx::ld_shared_v4(slot(mi * NI + ni)) };
                    for e in 0..4 {
                        v[e] += f32::from_bits(t[e]);
                    }
                }
            }
        }
    }

    // SPLIT ROWS: the row's last CTA to finish adds the parts' tiles in part order; the others leave. Every
    // group takes part in the hand-over's barriers; group 0 holds the CTA's tile.
    if parts > 1 {
        let slot = split_slot(row_begin, block_row, 0, split_blocks, n_tile, n_tiles);
        let counter = block_row as u64 * n_tiles as u64 + n_tile as u64;
        let hand_over = SplitHandOver { p, first_slot: slot, n_tiles, counter, part, parts, smem: cta_smem };
        if !unsafe { hand_over.combine::<MI, NI>(&mut acc, tid, threads, group == 0) } {
            return;
        }
    }
    if group != 0 {
        return;
    }

    // EPILOGUE: C = act(alpha * acc + bias) + beta * C (C not read when beta == 0), columns >= n skipped.
    let epi = Epilogue::<O>::from_params(p);
    unsafe { store_epilogue::<MI, NI, O, I>(&epi, &mut acc, block_row * BS, n0, warp) };
}

/// Defines the `extern "ptx-kernel"` entry point `$name` from its `layout::VARIANTS` entry (which must exist and
/// have the input type, B order and output type given here): the configuration comes from the table, never from
/// here; `$split` from the row's decomposition (`layout::Decomposition::SplitRows`) and `$src` from its op
/// ([`src::FORWARD`] for `layout::Op::BsrSpmm`, [`src::TRANSPOSED`] for `layout::Op::BsrSpmmT`), through `kernel!`.
macro_rules! bsr_kernel {
    ($split:expr, $src:expr, $name:ident, $input:ty, $in_type:pat, $b_layout:pat, $b_col:expr, $out:ty, $out_type:pat) => {
        /// BSR SpMM entry point; see the module docs.
        ///
        /// # Safety
        /// Launched by the host's typed launcher, which checks the preconditions of [`BsrSpmmParams`].
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(params: BsrSpmmParams) {
            const CFG: KernelConfig =
                variant_config!($name, crate::layout::Pipeline::CpAsync, $in_type, $b_layout, $out_type);
            // A launch that made no promise about A waits for the grid before it ahead of every read.
            if params.flags & crate::layout::SPMM_WAIT_FIRST != 0 {
                ptx::griddep_wait();
            }
            // SAFETY: forwarded preconditions.
            unsafe {
                with_tile!(bsr_spmm::<CFG, { CFG.frag_db }, { CFG.k_groups }, $b_col, $split, { $src }, $input, $out>(
                    &params
                ))
            }
        }
    };
}

/// The entry points of this template, one per `layout::VARIANTS` row of the module being built (the product
/// module's wide, narrow (`_n16`) and mid (`_n32`, `_n64`) tiles; with feature `tune-kernels` the tuning module's
/// `sparsek_tune_<i>`), generated by build.rs from the table.
mod entry {
    use super::*;

    include!(concat!(env!("OUT_DIR"), "/bsr_entries.rs"));
}
