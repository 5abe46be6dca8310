//! The sm_90a kernels' C store: a consumer warpgroup's tile through the shared epilogue straight from the
//! registers, or (beta 0; a row-major C, or a column-major C of 16-bit elements) staged in swizzled shared memory
//! and stored through C's tensor map.

use crate::epilogue::{Epilogue, Input, Output, WarpCoord, scale_bias_activate, store_epilogue};
use crate::layout::{OUT_STAGE_BYTES, WARPGROUP_WARPS, WGMMA_N, c_map_columns};
use crate::ptx;
use crate::ptx::WgmmaAcc;

/// Writes a consumer warp's accumulators (its 16 rows of each 128-column piece, the first at `col0`) through the
/// shared epilogue, straight from the registers.
///
/// # Safety
/// The rows exist in C and the bias; columns >= n are skipped.
#[inline(always)]
pub(super) unsafe fn store_pieces<const PIECES: usize, O: Output, I: Input>(
    epi: &Epilogue<O>,
    acc: &mut [WgmmaAcc; PIECES],
    (row0, col0): (u32, u32),
    warp: WarpCoord,
) {
    // SAFETY: the caller's contract.
    unsafe {
        store_epilogue::<1, 16, O, I>(epi, core::array::from_mut(&mut acc[0]), row0, col0, warp);
        if PIECES == 2 {
            store_epilogue::<1, 16, O, I>(epi, core::array::from_mut(&mut acc[PIECES - 1]), row0, col0 + WGMMA_N, warp);
        }
    }
}

/// Stages a consumer warpgroup's 64 x (PIECES x 128) tile of C (accumulators `acc`; the CTA tile's first row
/// `row0`, the warpgroup's first column `col0`, its 64 rows the `wg_m`-th of the tile) in its staging buffers and
/// stores them through C's tensor map, 64 rows x 128 bytes at a time ([`stage_chunk`]): `act(alpha * acc + bias)`
/// in registers (beta is 0), each thread's pairs of columns written to the 128-byte swizzled buffer (the first at
/// `buffers.0`, then `OUT_BUFS - 1` more of `OUT_STAGE_BYTES` each, their `full` and `free` barriers at
/// `buffers.1 + 16 b` and `buffers.2 + 16 b`), and the warpgroup's `issuer` thread issuing the store once all
/// 128 threads have arrived on `full`, then releasing the buffer of the store before (two buffers) or of this one
/// (one buffer) on `free` once the TMA has read it. `staged` counts the buffers this warpgroup filled before
/// (phases of the barriers); returns the new count.
///
/// # Safety
/// As the kernel's: the rows exist in C and the bias, `tmap_c` is C's map, the buffers and barriers are this
/// warpgroup's (initialised: `full` for 128 arrivals, `free` for one), and every thread of the warpgroup calls
/// this with the same tile and count.
#[inline(always)]
pub(super) unsafe fn store_staged<const PIECES: usize, const OUT_BUFS: u32, O: Output, I: Input>(
    epi: &Epilogue<O>,
    acc: &mut [WgmmaAcc; PIECES],
    (row0, col0): (u32, u32),
    (warp, wg_m): (WarpCoord, u32),
    tmap_c: u64,
    (buf0, full0, free0): (u32, u32, u32),
    (issuer, mut staged): (bool, u32),
) -> u32 {
    let lane = warp.lane;
    if epi.alpha != 1.0 || !epi.bias.is_null() || epi.activation != 0 {
        let row_base = row0 + warp.warp_m * 16;
        let (alpha, bias, activation) = (epi.alpha, epi.bias, epi.activation);
        // SAFETY: the bias holds the tile's rows.
        unsafe {
            scale_bias_activate::<1, 16, I>(
                core::array::from_mut(&mut acc[0]),
                alpha,
                bias,
                activation,
                row_base,
                lane,
            );
            if PIECES == 2 {
                let last = core::array::from_mut(&mut acc[PIECES - 1]);
                scale_bias_activate::<1, 16, I>(last, alpha, bias, activation, row_base, lane);
            }
        }
    }
    // The pieces and their chunks written out (4 of 32 f32 columns, or 2 of 64 16-bit columns), so that every
    // accumulator index is a constant: a loop that LLVM leaves rolled would put the accumulators in local memory.
    let warp_row = (warp.warp_m % WARPGROUP_WARPS) * 16;
    let ctx = StageCtx { c: epi.c, ldc: epi.ldc, n: epi.n, row: row0 + wg_m * 64, lane, warp_row };
    let bufs = (tmap_c, buf0, full0, free0, issuer);
    // SAFETY: forwarded.
    unsafe {
        if O::BYTES == 2 && epi.c_col_major {
            // A column-major C: each 64-column half of a piece transposed into a buffer ([`stage_chunk_t`]).
            staged = stage_chunk_t::<0, OUT_BUFS, O>(&acc[0], col0, &ctx, bufs, staged);
            staged = stage_chunk_t::<1, OUT_BUFS, O>(&acc[0], col0, &ctx, bufs, staged);
            if PIECES == 2 {
                let last = &acc[PIECES - 1];
                staged = stage_chunk_t::<0, OUT_BUFS, O>(last, col0 + WGMMA_N, &ctx, bufs, staged);
                staged = stage_chunk_t::<1, OUT_BUFS, O>(last, col0 + WGMMA_N, &ctx, bufs, staged);
            }
            return staged;
        }
        staged = stage_piece::<OUT_BUFS, O>(&acc[0], col0, &ctx, bufs, staged);
        if PIECES == 2 {
            staged = stage_piece::<OUT_BUFS, O>(&acc[PIECES - 1], col0 + WGMMA_N, &ctx, bufs, staged);
        }
    }
    staged
}

/// Stages and stores one 128-column piece (first column `col`) chunk by chunk ([`stage_chunk`]).
///
/// # Safety
/// As [`stage_chunk`].
#[inline(always)]
unsafe fn stage_piece<const OUT_BUFS: u32, O: Output>(
    piece: &WgmmaAcc,
    col: u32,
    ctx: &StageCtx<O>,
    bufs: (u64, u32, u32, u32, bool),
    mut staged: u32,
) -> u32 {
    // SAFETY: forwarded.
    unsafe {
        staged = stage_chunk::<0, OUT_BUFS, O>(piece, col, ctx, bufs, staged);
        staged = stage_chunk::<1, OUT_BUFS, O>(piece, col, ctx, bufs, staged);
        if O::BYTES == 4 {
            staged = stage_chunk::<2, OUT_BUFS, O>(piece, col, ctx, bufs, staged);
            staged = stage_chunk::<3, OUT_BUFS, O>(piece, col, ctx, bufs, staged);
        }
    }
    staged
}

/// What [`stage_chunk`] needs of the warpgroup's tile: C (for the columns past C's map), its columns, the tile's
/// first row in C, the thread's lane and its warp's first row in the warpgroup's 64.
struct StageCtx<O> {
    c: *mut O,
    ldc: u32,
    n: u32,
    row: u32,
    lane: u32,
    warp_row: u32,
}

/// The staging buffer for the `staged`-th chunk (`staged % OUT_BUFS` of the warpgroup's, from `buf0`) and its
/// `full` and `free` barriers (from `full0`, `free0`), once the `free` wait says the store that last read it has read
/// it (a fresh barrier counts as released).
///
/// # Safety
/// The buffers and barriers are this warpgroup's (as [`store_staged`] sets them up).
#[inline(always)]
unsafe fn claim_buffer<const OUT_BUFS: u32>((buf0, full0, free0): (u32, u32, u32), staged: u32) -> (u32, u32, u32) {
    let b = staged % OUT_BUFS;
    let (buf, full, free) = (buf0 + b * OUT_STAGE_BYTES, full0 + 16 * b, free0 + 16 * b);
    // SAFETY: the caller's.
    unsafe { ptx::mbarrier_wait(free, ((staged / OUT_BUFS) & 1) ^ 1) };
    (buf, full, free)
}

/// Stages chunk `CI` (128 bytes of each of the warpgroup's 64 rows: columns `CI * 128 / O::BYTES ..` of `piece`,
/// whose first column is C's `col`) in the next staging buffer and has the issuer store it (see
/// [`store_staged`]); nothing when the chunk lies wholly past C's last column. Returns the new count of filled
/// buffers.
///
/// # Safety
/// As [`store_staged`]; `bufs` is (C's map, the first buffer, its `full` and `free` barriers, whether this thread
/// issues the stores).
#[inline(always)]
unsafe fn stage_chunk<const CI: u32, const OUT_BUFS: u32, O: Output>(
    piece: &WgmmaAcc,
    col: u32,
    ctx: &StageCtx<O>,
    (tmap_c, buf0, full0, free0, issuer): (u64, u32, u32, u32, bool),
    staged: u32,
) -> u32 {
    // A buffer row is 128 bytes: `cols` columns of C, `tiles` n8 accumulator tiles; each thread holds two rows of
    // every n8 tile (g and g + 8 of its warp's 16) and two adjacent columns (2t, 2t + 1) of it.
    let cols = 128 / O::BYTES;
    let tiles = cols / 8;
    let col = col + CI * cols;
    let (g, t) = (ctx.lane / 4, ctx.lane % 4);
    // C's map ends at the last whole 16 bytes of a row (a TMA store writes whole 16-byte units: one ending past C's
    // last column would write the padding after it); the columns past that, fewer than 16 bytes, are stored from
    // the registers. (The same for the whole warpgroup.)
    let n_map = c_map_columns(ctx.n, O::BYTES);
    if col + cols > n_map {
        for i in 0..tiles {
            let d = &piece[(CI * tiles + i) as usize];
            for half in 0..2 {
                let row = ctx.row + ctx.warp_row + g + 8 * half;
                for j in 0..2 {
                    let c = col + i * 8 + 2 * t + j;
                    if c >= n_map && c < ctx.n {
                        // SAFETY: (row, c) is an element of C.
                        unsafe {
                            O::store(
                                ctx.c.add(row as usize * ctx.ldc as usize + c as usize),
                                d[2 * half as usize + j as usize],
                            )
                        };
                    }
                }
            }
        }
        if col >= n_map {
            // Nothing of this chunk is in C's map.
            return staged;
        }
    }
    // SAFETY (whole chunk): this warpgroup's buffer and barriers.
    let (buf, full, free) = unsafe { claim_buffer::<OUT_BUFS>((buf0, full0, free0), staged) };
    for i in 0..tiles {
        let d = &piece[(CI * tiles + i) as usize];
        for half in 0..2 {
            let r = ctx.warp_row + g + 8 * half;
            // C's map lays each group of 8 rows out as rows 0, 4, 1, 5, 2, 6, 3, 7 (host/src/gpu/tma.rs `c_map`):
            // row r is line (r & !7) | 2 (r & 3) | (r & 7) >> 2, so the rows 0-3 (or 4-7) of a half-warp's 64-bit
            // stores get swizzle patterns 0, 2, 4, 6 (1, 3, 5, 7) and reach all eight 16-byte units of a line.
            let line = (r & !7) | ((r & 3) << 1) | ((r & 7) >> 2);
            let x = (i * 8 + 2 * t) * O::BYTES;
            // 128-byte swizzle: the 16-byte unit of a line is XORed with the line's index mod 8.
            let addr = buf + line * 128 + ((x / 16) ^ (line % 8)) * 16 + x % 16;
            unsafe { O::stage_pair(addr, d[2 * half as usize], d[2 * half as usize + 1]) };
        }
    }
    // SAFETY: C's map, and this warpgroup's buffer holding the whole box (issue_store's barrier).
    let store = || unsafe { ptx::tma_store_4d(tmap_c, (col, 0, 0, ctx.row / 8), buf) };
    // SAFETY: the barriers are this warpgroup's; every thread wrote its part of the buffer.
    unsafe { issue_store::<OUT_BUFS>((full, free0, free), (issuer, staged), store) }
}

/// The end of a chunk's staging ([`stage_chunk`], [`stage_chunk_t`]): every thread's writes to the buffer made
/// visible to the async proxy and counted on `full`; the issuer waits for all 128, issues `store` (the TMA store
/// of the buffer), and releases the buffer of the store before (two buffers) or of this one (one buffer) on its
/// `free` barrier once the TMA has read it. Returns the new count of filled buffers.
///
/// # Safety
/// As [`stage_chunk`]: this warpgroup's barriers (`full`, the first buffer's `free` barrier `free0`, this buffer's
/// `free`), every thread of the warpgroup calling this once per chunk after writing its part of the buffer;
/// `store` issues one TMA store of the whole buffer.
#[inline(always)]
unsafe fn issue_store<const OUT_BUFS: u32>(
    (full, free0, free): (u32, u32, u32),
    (issuer, staged): (bool, u32),
    store: impl FnOnce(),
) -> u32 {
    ptx::fence_proxy_async_shared();
    unsafe { ptx::mbarrier_arrive(full) };
    if issuer {
        unsafe { ptx::mbarrier_wait(full, (staged / OUT_BUFS) & 1) };
        store();
        ptx::bulk_commit_group();
        if OUT_BUFS == 2 {
            // The store before this one has read its buffer: the other buffer is free.
            ptx::bulk_wait_group_read::<1>();
            if staged > 0 {
                unsafe { ptx::mbarrier_arrive(free0 + 16 * ((staged - 1) % 2)) };
            }
        } else {
            ptx::bulk_wait_group_read::<0>();
            unsafe { ptx::mbarrier_arrive(free) };
        }
    }
    staged + 1
}

/// Stages chunk `CI` of a column-major C of 16-bit elements (columns `col + 64 CI..` of `piece`, 8 n8 tiles, for
/// the warpgroup's 64 rows) transposed in the next staging buffer and has the issuer store it through C's map
/// (host/src/gpu/tma.rs `c_map_col_major`: C^T's rows, i.e. C's columns, of 64 elements (128 bytes) each, boxes of
/// 64 columns); nothing when the chunk lies wholly past C's last column (the map clips the columns past it).
/// Buffer line `c` is column `col + 64 CI + c`, its 16-byte unit `u` rows `8 u..8 u + 8` of the warpgroup's 64,
/// 128-byte swizzled (unit `u ^ (c % 8)`). Each `stmatrix.x4.trans` writes two n8 tiles' 16 rows of this warp: its
/// matrix `j` is tile `2 i + j / 2`'s rows `8 (j % 2)..` (the accumulator pairs `2 (j % 2)`, `+ 1`), stored row `r`
/// of it (column `8 (2 i + j / 2) + r`) at the address lane `8 j + r` gives. Every 8 lanes write 8 lines' distinct
/// units: no bank conflict.
///
/// # Safety
/// As [`stage_chunk`], for a column-major C whose map is `tmap_c`; all 32 lanes of each warp call it (stmatrix).
#[inline(always)]
unsafe fn stage_chunk_t<const CI: u32, const OUT_BUFS: u32, O: Output>(
    piece: &WgmmaAcc,
    col: u32,
    ctx: &StageCtx<O>,
    (tmap_c, buf0, full0, free0, issuer): (u64, u32, u32, u32, bool),
    staged: u32,
) -> u32 {
    let col = col + CI * 64;
    if col >= ctx.n {
        // Nothing of this chunk is in C (the same for the whole warpgroup).
        return staged;
    }
    // SAFETY (whole chunk): this warpgroup's buffer and barriers, as in stage_chunk.
    let (buf, full, free) = unsafe { claim_buffer::<OUT_BUFS>((buf0, full0, free0), staged) };
    // Lane 8 j + r addresses line (2 i + j / 2) * 8 + r, unit (warp_row / 8 + j % 2) ^ r: 2048 i bytes plus an
    // offset of its own, the same for every i and chunk (one register, where a per-store address would be
    // computed ahead of the tile loop and held through it).
    let (j, r) = (ctx.lane / 8, ctx.lane % 8);
    let lane_off = ((j / 2) * 8 + r) * 128 + (((ctx.warp_row / 8 + j % 2) ^ r) * 16);
    for i in 0..4 {
        let (t0, t1) = (&piece[(CI * 8 + 2 * i) as usize], &piece[(CI * 8 + 2 * i + 1) as usize]);
        let regs = [O::pack(t0[0], t0[1]), O::pack(t0[2], t0[3]), O::pack(t1[0], t1[1]), O::pack(t1[2], t1[3])];
        unsafe { ptx::stmatrix_x4_trans(buf + i * 2048 + lane_off, regs) };
    }
    // SAFETY: C's map (its columns past n are not written), and this warpgroup's buffer holding the whole box
    // (issue_store's barrier).
    let store = || unsafe { ptx::tma_store_2d(tmap_c, (ctx.row, col), buf) };
    // SAFETY: as in stage_chunk.
    unsafe { issue_store::<OUT_BUFS>((full, free0, free), (issuer, staged), store) }
}

/// An SDDMM tile's stores: block `g < count` of the group from stored block `t` is the tile's columns `g * BS..`,
/// written (alpha, beta: the epilogue's) to its values, rows `(t + g) * BS..` of the `(nnzb * BS) x BS` output
/// (`epi.n` is BS). This warpgroup's pieces start at the tile's block `first`. bs 128: a piece per block, staged
/// through C's map where `staging` is given (the map, this warpgroup's staging buffers and barriers, whether this
/// thread issues its stores), else from the registers; bs 64: two blocks per piece, each half of its n8 tiles from
/// the registers. Returns the staging count.
///
/// # Safety
/// As [`store_pieces`] (and [`store_staged`] with `staging`), for the blocks `t..t + count`, stored blocks of the
/// launch's structure.
#[inline(always)]
pub(super) unsafe fn store_blocks<const BS: u32, const PIECES: usize, const OUT_BUFS: u32, O: Output, I: Input>(
    epi: &Epilogue<O>,
    acc: &mut [WgmmaAcc; PIECES],
    (t, count, first): (u32, u32, u32),
    (warp, wg_m): (WarpCoord, u32),
    staging: Option<(u64, (u32, u32, u32), bool)>,
    mut staged: u32,
) -> u32 {
    const { assert!(BS == WGMMA_N || BS * 2 == WGMMA_N, "an SDDMM block is a piece or half of one") };
    let row = |g: u32| (t + first + g) * BS;
    // Every accumulator index below is a constant (helpers inlined, pieces written out): the accumulators stay in
    // registers.
    // SAFETY (whole body): the caller's contract.
    unsafe {
        if BS == WGMMA_N {
            if first < count {
                staged = store_block_piece::<OUT_BUFS, O, I>(epi, &mut acc[0], row(0), (warp, wg_m), staging, staged);
            }
            if PIECES == 2 && first + 1 < count {
                let last = &mut acc[PIECES - 1];
                staged = store_block_piece::<OUT_BUFS, O, I>(epi, last, row(1), (warp, wg_m), staging, staged);
            }
        } else {
            // Block first + 2p + h is half h (n8 tiles 8h..8h + 8) of piece p.
            if first < count {
                store_block_half::<0, O, I>(epi, &acc[0], row(0), warp);
            }
            if first + 1 < count {
                store_block_half::<1, O, I>(epi, &acc[0], row(1), warp);
            }
            if PIECES == 2 && first + 2 < count {
                store_block_half::<0, O, I>(epi, &acc[PIECES - 1], row(2), warp);
            }
            if PIECES == 2 && first + 3 < count {
                store_block_half::<1, O, I>(epi, &acc[PIECES - 1], row(3), warp);
            }
        }
    }
    staged
}

/// One 128-column piece to the values at `row0`, column 0: staged (see [`store_blocks`]) or from the registers.
///
/// # Safety
/// As [`store_blocks`].
#[inline(always)]
unsafe fn store_block_piece<const OUT_BUFS: u32, O: Output, I: Input>(
    epi: &Epilogue<O>,
    acc: &mut WgmmaAcc,
    row0: u32,
    (warp, wg_m): (WarpCoord, u32),
    staging: Option<(u64, (u32, u32, u32), bool)>,
    staged: u32,
) -> u32 {
    let one = core::array::from_mut(acc);
    // SAFETY: the caller's contract.
    unsafe {
        match staging {
            Some((tmap_c, bufs, issuer)) => {
                store_staged::<1, OUT_BUFS, O, I>(epi, one, (row0, 0), (warp, wg_m), tmap_c, bufs, (issuer, staged))
            }
            None => {
                store_epilogue::<1, 16, O, I>(epi, one, row0, 0, warp);
                staged
            }
        }
    }
}

/// Half `H` of a piece (its n8 tiles `8 H..8 H + 8`, a 64-column block) to the values at `row0`, column 0, from
/// the registers.
///
/// # Safety
/// As [`store_blocks`].
#[inline(always)]
unsafe fn store_block_half<const H: usize, O: Output, I: Input>(
    epi: &Epilogue<O>,
    acc: &WgmmaAcc,
    row0: u32,
    warp: WarpCoord,
) {
    let mut half: [[[f32; 4]; 8]; 1] = [[
        acc[8 * H],
        acc[8 * H + 1],
        acc[8 * H + 2],
        acc[8 * H + 3],
        acc[8 * H + 4],
        acc[8 * H + 5],
        acc[8 * H + 6],
        acc[8 * H + 7],
    ]];
    // SAFETY: the caller's contract.
    unsafe { store_epilogue::<1, 8, O, I>(epi, &mut half, row0, 0, warp) };
}
