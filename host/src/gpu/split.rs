//! Split rows: the narrow kernels ([`KernelConfig::splits_rows`]) can spread one block row over several CTAs,
//! each multiplying an equal range of the row's blocks; the row's last CTA adds the parts' partial tiles in part
//! order (the same bits run to run) and writes C. Few, long block rows (a weight of 128 block rows on 132 SMs,
//! or one row holding most blocks) then fill the GPU instead of leaving it waiting on the longest row.
//!
//! The partial tiles and the per-row counters live in a workspace each [`Gpu`] allocates once, when it opens
//! ([`SPLIT_PARTIALS_BYTES`], [`SPLIT_COUNTERS`]); a launch never allocates. The counters start at zero and each
//! row's last CTA sets its counter back to zero, so no launch has to clear them. Launches on different streams
//! would share the workspace: a split launch on another stream than the previous split launch first waits (on
//! the device, `cuStreamWaitEvent`) for the event recorded after that launch, so split launches never overlap.
//!
//! A launch on a stream being captured into a CUDA graph cannot use that workspace (an event recorded outside the
//! capture cannot be waited on inside it, and a replayed graph would reuse the workspace unordered with the
//! launches around it). Where the balance pays for three more graph nodes ([`graph_balance_pays`]: a dominating
//! row, or long whole rows filling at most half the SMs) it makes the same choices and takes a workspace of its
//! own in the graph ([`GraphSpace`]: an allocation node of the bytes it needs, a memset node zeroing its counters,
//! the kernel, a free node), so a replay gives the bits of the same launch outside the graph. Elsewhere, and on a
//! device without stream-ordered allocation, a captured launch keeps whole rows.
//!
//! The workspace also holds the sm_90a kernels' two tile-scheduler counters (gpu/schedule.rs). Those are
//! never waited for across streams: a launch takes them only when they are free or its stream used them last
//! ([`SplitWorkspace::claim_scheduler`]).

use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{CUevent_flags, CUevent_wait_flags, CUstream, CUstreamCaptureStatus};
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr};
use sparsek_layout::{KernelConfig, Pipeline, hopper_virtual_rows, split_slots};

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::gpu::driver::cuda;
use crate::gpu::registry::Kernel;

/// Bytes of partial tiles a [`Gpu`] allocates for split rows: enough for 8192 x 8192 at bs 64 and 64 columns
/// (four N tiles) with parts of 8 blocks (9.4 MB), or 16384 x 16384 at 16 columns (8.4 MB); a launch that needs
/// more gets longer parts.
pub const SPLIT_PARTIALS_BYTES: usize = 16 << 20;

/// Counters a [`Gpu`] allocates for split rows: one per (block row, N tile) of a launch.
pub const SPLIT_COUNTERS: usize = 1 << 16;

/// The bytes of A's values a part should hold when the launcher chooses ([`RowSplit::Auto`]): 128 KiB, 16 blocks
/// of bs 64 or 4 of bs 128. Measured on an H200 (docs/perf-notes.md, "Step 4"): parts of 128 KiB were the
/// fastest of 32, 64 and 128 KiB at bs 64 and of 64, 128 and 512 KiB at bs 128 at N = 16, and level with whole
/// rows at 16384 x 16384, where whole rows already fill the GPU.
pub const SPLIT_PART_BYTES: usize = 128 << 10;

/// A part of [`RowSplit::Auto`] whose [`SPLIT_PART_BYTES`] hold fewer k-tiles than this (bs 128: 4 blocks of 2
/// k-tiles) grows toward one part per SM, up to [`SPLIT_PART_MAX_GROWN_K_TILES`]: short parts pay the ring's
/// prologue and the split hand-over every few k-tiles. bs 64 parts (16 blocks of 1 k-tile) do not grow: there
/// 27-block parts measured mixed (8192^2 22%: N = 1 -1.2%, the mid tile at N = 32 +1.8%, skewed +8%).
pub const SPLIT_PART_SHORT_K_TILES: u32 = 16;

/// The most k-tiles a grown part holds ([`SPLIT_PART_SHORT_K_TILES`]): 24 blocks at bs 128. Measured on an H200
/// (docs/perf-notes.md, issue 12 step 10) at bs 128: 8192 x 8192 22% 3-4% faster with parts of 6 blocks than of 4,
/// 16384 x 16384 22% 5% with 24 rather than 8 (which had been level to -2% against 4), 16384 x 16384 10% 2-9% with
/// 8 and -2.5% to +2% with 12; 4096 x 4096 (225 blocks, fewer than two per SM) 3% slower with 8.
pub const SPLIT_PART_MAX_GROWN_K_TILES: u32 = 48;

/// How launches of the narrow kernels split block rows ([`Gpu::with_row_split`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RowSplit {
    /// The flat block list where [`flat_auto_serves`] (the bs 64 and 128 narrow tiles: one N tile, at least
    /// [`FLAT_AUTO_MIN_K_TILES_PER_CTA`] k-tiles per CTA, rows of unequal length; bs 64's tiles of 32 and 64
    /// columns: the busiest SM's whole rows exceed an equal share by enough), else parts of about
    /// [`SPLIT_PART_BYTES`] of A's values (more for short parts on many blocks:
    /// [`SPLIT_PART_SHORT_K_TILES`]) where whole rows would leave the GPU short of CTAs or a row dominates
    /// ([`split_choice`]), and the workspace holds them.
    #[default]
    Auto,
    /// Never: one CTA per block row and N tile (the sm_90a kernels too: whole rows).
    Off,
    /// Parts of about this many blocks (at least 1), where the workspace holds them: for measurements (on the
    /// sm_90a kernels, of every block size, the rows of at least two such parts).
    Blocks(u32),
    /// The flat block list ([`sparsek_layout::Tile::Flat`]: bs 64 and 128, f16 inputs, row-major B, f32 C; and
    /// [`sparsek_layout::Tile::Flat32`], [`sparsek_layout::Tile::Flat64`] for bs 64's tiles of 32 and 64 columns)
    /// in place of the narrow kernel (or those tiles), where [`flat_ctas`] allows it: `G` CTAs per N tile, `G`
    /// this many per SM (0, or more than fit: the kernel's whole wave), CTA `c` taking the `c`-th of `G` equal
    /// ranges of A's blocks across row boundaries; a row cut by a range boundary is summed from its pieces in piece
    /// order (the same bits run to run). Elsewhere as [`RowSplit::Auto`].
    Flat(u32),
}

/// A launch's split rows on the sm_90a kernels ([`hopper_split_choice`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HopperSplit {
    /// The leading positions of the row order (longest rows first) that are split.
    pub split_rows: u32,
    /// The most parts per split row.
    pub chunks: u32,
    /// Blocks a part should hold.
    pub blocks: u32,
}

/// The sm_90a kernels' split parts hold at least this many k-tiles: a shorter part's hand-over (its f32 tile stored,
/// counted in and, for the last, every part's read back) costs more than its main loop saves (H100, 2026-11-26:
/// parts of 16 k-tiles made 8192 x 256 x 8192 bs 128 22% skewed 6-14% slower; docs/perf-notes.md, "Hopper" step 19).
pub const HOPPER_SPLIT_MIN_PART_K_TILES: usize = 32;

/// Split rows on the sm_90a kernels: a launch of `cfg` over block rows of `lengths` blocks (in the row order's
/// order: longest first; `nnzb` in all), `n_tiles` N tiles, and `workers` consumer sets running at once (the persistent grid's
/// CTAs times the sets per CTA). Under [`RowSplit::Auto`] (and `Flat`, which does not apply there), on the kernels
/// without ping-pong (bs 128), a row is split when its tile holds more than twice an equal share of the launch's
/// blocks (`nnzb * n_tiles / workers`, at least
/// [`HOPPER_SPLIT_MIN_PART_K_TILES`]): otherwise the longest rows, which the row order starts first, end with the
/// others. Parts of an equal share; the rows of at least two parts (a prefix of the order) are split, each into up to
/// `ceil(longest / blocks)` parts, fewer when the workspace's partial tiles (`split_rows * chunks * n_tiles` of
/// `bs x bn` f32) or counters (one per consumer warp of each split row's tile) would not hold them. `None`: whole
/// rows.
pub fn hopper_split_choice(
    cfg: &KernelConfig,
    setting: RowSplit,
    lengths: &[u32],
    (nnzb, n_tiles, workers): (usize, usize, usize),
    limits: SplitLimits,
) -> Option<HopperSplit> {
    if !matches!(cfg.pipeline, Pipeline::TmaWgmma { .. }) || n_tiles == 0 || workers == 0 {
        return None;
    }
    let longest = *lengths.first()? as usize;
    let k_tiles_per_block = (cfg.bs / cfg.bk).max(1) as usize;
    let min_blocks = HOPPER_SPLIT_MIN_PART_K_TILES.div_ceil(k_tiles_per_block);
    let blocks = match setting {
        RowSplit::Off => return None,
        RowSplit::Blocks(b) => (b as usize).max(1),
        // bs 64's ping-pong kernel measured slower with its long rows split (H100, 2026-11-26: 8192 x {512, 1024} x
        // 8192 22% skewed 2.6-4.4%): there the input bound of docs/perf-notes.md ("Hopper", step 10), not the
        // longest row, sets the time.
        RowSplit::Auto | RowSplit::Flat(_) if cfg.pingpong() => return None,
        RowSplit::Auto | RowSplit::Flat(_) => {
            let share = nnzb.checked_mul(n_tiles)?.div_ceil(workers).max(min_blocks);
            if longest <= 2 * share {
                return None;
            }
            share
        }
    };
    // Rows of at least two parts: a row just over one part stays whole (at most twice the share).
    let split_rows = lengths.partition_point(|&l| l as usize >= 2 * blocks);
    let slot_bytes = cfg.split_slot_bytes() as usize;
    let slots = (limits.partials_bytes / slot_bytes.max(1)) / split_rows.checked_mul(n_tiles)?.max(1);
    let chunks = longest.div_ceil(blocks).min(slots);
    let tile_warps = (cfg.warps_m * cfg.warps_n) as usize;
    let counters = split_rows.checked_mul(n_tiles)?.checked_mul(tile_warps)?;
    if split_rows == 0 || chunks < 2 || counters > limits.counters {
        return None;
    }
    let (split_rows, chunks, blocks) = (u32::try_from(split_rows).ok()?, chunks as u32, u32::try_from(blocks).ok()?);
    let vrows = hopper_virtual_rows(u32::try_from(lengths.len()).ok()?, split_rows, chunks) as usize;
    if vrows.checked_mul(n_tiles)? > i32::MAX as usize {
        return None;
    }
    Some(HopperSplit { split_rows, chunks, blocks })
}

/// What bounds a launch's split: the workspace ([`SPLIT_PARTIALS_BYTES`] of partial tiles, [`SPLIT_COUNTERS`]
/// counters) and the GPU's SMs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitLimits {
    /// Bytes of partial tiles.
    pub partials_bytes: usize,
    /// Counters.
    pub counters: usize,
    /// The GPU's SMs.
    pub sm_count: usize,
}

impl SplitLimits {
    /// The workspace every [`Gpu`] allocates, on a GPU of `sm_count` SMs.
    pub const fn with_sms(sm_count: usize) -> SplitLimits {
        SplitLimits { partials_bytes: SPLIT_PARTIALS_BYTES, counters: SPLIT_COUNTERS, sm_count }
    }
}

/// A launch's split: the most parts per row (the grid's CTAs per row) and the blocks a part should hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitChoice {
    /// CTAs per block row and N tile in the grid.
    pub chunks: u32,
    /// Blocks a part should hold.
    pub blocks: u32,
}

/// The split of a launch of `cfg` over `nnzb` blocks in `block_rows` block rows (the longest holding
/// `max_row_blocks` when known) and `n_tiles` N tiles, or `None` for one CTA per row: the kernel cannot split,
/// the setting is off, no row is long enough, the workspace cannot hold it, or (with [`RowSplit::Auto`]) whole
/// rows already fill the GPU.
///
/// [`RowSplit::Auto`] splits launches of one N tile when one CTA per row gives at most one CTA per SM (one per two
/// SMs on a tile of two k-groups, [`KernelConfig::k_groups`], whose CTA streams a whole row faster: bs 64's narrow
/// tile, measured on an H100 against split rows on one group, docs/perf-notes.md, issue 12 step 33) or the
/// longest row holds more than four times the mean ([`rows_skewed`]), and launches of several N tiles over at most
/// [`sparsek_layout::NARROW_MAX_N`] columns only in the second case (docs/perf-notes.md, issue 12 step 28: skewed
/// rows at 48 and 64 columns on the tile of 32 columns). Measured (docs/perf-notes.md "Step 4" and "Step 5"): with one
/// N tile, 8192 x 8192 at 1-16 columns (64 or 128 block rows) 1.1-1.25x faster on an H200 and 1.09-1.15x on an
/// H100, at 32 columns on the mid tile 1.2-1.27x (H200), 16384 x 16384 bs 128 (128 block rows) 0.97-1.09x (H100),
/// skewed 8192 x 8192 at 16 columns 2.35x (H200); but 16384 x 16384 bs 64 (256 block rows) 0.96-1.04x on the H100
/// (level on the H200); with two or more N tiles mixed to worse (the narrow tile at 32 columns 0.91-1.22x, the mid
/// tile at 48 and 64 columns 0.86-0.93x, the narrow tile at 64 columns 0.79-1.08x).
///
/// Parts hold [`SPLIT_PART_BYTES`] of A's values per k-group, or where that is fewer than [`SPLIT_PART_SHORT_K_TILES`]
/// k-tiles (bs 128), about `nnzb / SMs` blocks, from 128 KiB up to [`SPLIT_PART_MAX_GROWN_K_TILES`].
///
/// Rows of up to `blocks` blocks stay whole; a longer row gets `ceil(len / blocks)` parts, at most `chunks`. The
/// grid has `block_rows * chunks * n_tiles` CTAs, those beyond a row's parts exiting at once; `chunks` is sized
/// from the longest row (when unknown, twice the mean plus a part) and capped at 8x the parts the average row
/// needs, so a skewed A does not launch mostly idle CTAs.
pub fn split_choice(
    cfg: &KernelConfig,
    setting: RowSplit,
    (nnzb, block_rows, n_tiles): (usize, usize, usize),
    max_row_blocks: Option<usize>,
    limits: SplitLimits,
) -> Option<SplitChoice> {
    if !cfg.splits_rows() || block_rows == 0 || n_tiles == 0 {
        return None;
    }
    let block_bytes = (cfg.bs * cfg.bs * 2) as usize;
    let mean = nnzb.div_ceil(block_rows);
    let skewed = rows_skewed((nnzb, block_rows), max_row_blocks);
    // Rows that are not skewed stay whole from this many: one CTA per SM, or with several k-groups per CTA (whose
    // CTAs stream a row faster) one per two SMs.
    let whole_rows_up_to = limits.sm_count / cfg.k_groups.max(1) as usize;
    // Several N tiles re-read each row's A once per tile; only a dominating row pays that back, and only on the
    // few-column tiles measured.
    let few_tiles = n_tiles == 1 || (skewed && n_tiles * cfg.bn as usize <= sparsek_layout::NARROW_MAX_N);
    let mut blocks = match setting {
        RowSplit::Off => return None,
        RowSplit::Blocks(b) => (b as usize).max(1),
        RowSplit::Auto | RowSplit::Flat(_) if !few_tiles || (block_rows > whole_rows_up_to && !skewed) => return None,
        RowSplit::Auto | RowSplit::Flat(_) => {
            // A CTA of several k-groups streams a part of that many times the bytes in the time of one.
            let base = (SPLIT_PART_BYTES * cfg.k_groups.max(1) as usize / block_bytes).max(1);
            // A short part grows toward one part per SM, up to SPLIT_PART_MAX_GROWN_K_TILES.
            let k_tiles_per_block = (cfg.bs / cfg.bk).max(1) as usize;
            if base * k_tiles_per_block >= SPLIT_PART_SHORT_K_TILES as usize {
                base
            } else {
                let grown_max = (SPLIT_PART_MAX_GROWN_K_TILES as usize).div_ceil(k_tiles_per_block);
                base.max((nnzb / limits.sm_count.max(1)).min(grown_max))
            }
        }
    };
    let SplitLimits { partials_bytes, counters, .. } = limits;
    // The workspace: one counter per (row, N tile); partial slots shrink as parts grow.
    if block_rows.checked_mul(n_tiles)? > counters {
        return None;
    }
    let slot_bytes = cfg.split_slot_bytes() as usize;
    let fits = |b: usize| {
        let slots = split_slots(nnzb as u64, block_rows as u64, b as u64, n_tiles as u64);
        slots.checked_mul(slot_bytes as u64).is_some_and(|bytes| bytes <= partials_bytes as u64)
    };
    while !fits(blocks) {
        if blocks >= nnzb.max(1) {
            return None;
        }
        blocks *= 2;
    }
    let longest = max_row_blocks.unwrap_or(2 * mean + blocks);
    let working = nnzb / blocks + block_rows; // CTAs with a part, at most
    let cap = (8 * working).div_ceil(block_rows);
    let chunks = longest.div_ceil(blocks).min(cap);
    if chunks <= 1 || block_rows.checked_mul(chunks)?.checked_mul(n_tiles)? > i32::MAX as usize {
        return None;
    }
    Some(SplitChoice { chunks: u32::try_from(chunks).ok()?, blocks: u32::try_from(blocks).ok()? })
}

/// Whether the longest of `block_rows` block rows holding `nnzb` blocks (`max_row_blocks`, when known) holds more
/// than four times the mean: a row that sets a launch's time whatever the rest do ([`split_choice`],
/// [`Gpu::skew_tile_for`]).
pub fn rows_skewed((nnzb, block_rows): (usize, usize), max_row_blocks: Option<usize>) -> bool {
    let mean = nnzb.div_ceil(block_rows.max(1));
    max_row_blocks.is_some_and(|l| l > mean.saturating_mul(4))
}

/// The bytes of A's values a block row must hold on average for a launch being captured into a CUDA graph to balance
/// a grid of whole rows that fills at most half the SMs ([`graph_balance_pays`]): 320 KiB. Measured on an H100
/// (docs/perf-notes.md, issue 12 step 29), graphs of 32 launches, 8192^2 at bs 128 (64 block rows) and 1 to 64
/// columns: at 22% density (rows of about 460 KB) balanced 5-9% faster than whole rows, at 10% (about 205 KB)
/// 2-9% slower: a short row gains less from its split than the graph's three more nodes cost.
pub const GRAPH_BALANCE_MIN_ROW_BYTES: usize = 320 << 10;

/// Whether a launch on a stream being captured into a CUDA graph takes the balance the launcher would give it
/// outside the graph (split rows, the flat block list, bs 64's tile of 32, the sm_90a tile counter and split rows),
/// on a workspace of its own in the graph (an allocation, a memset and a free node around the kernel), rather than
/// whole rows and one tile per CTA: where one of `block_rows` block rows holding `nnzb` blocks of `block_bytes`
/// dominates ([`rows_skewed`]; `max_row_blocks` unknown: no), or where whole rows give at most one CTA per two SMs
/// (`whole_ctas`: block rows x slices x N tiles, against `sm_count`) and hold [`GRAPH_BALANCE_MIN_ROW_BYTES`] on
/// average. Elsewhere the three nodes cost more than the balance gains. Measured on an H100 (docs/perf-notes.md,
/// issue 12 step 29), time per launch of a graph of 32 against whole rows in the graph: skewed rows 1.49-2.68x
/// faster (8192^2 and 16384^2 bs 64 at 16 and 48 columns, 8192 x 512 x 8192 bs 128), 8192^2 bs 128 22% at 1 to 64
/// columns 5-9% faster; but balanced, 8192^2 bs 64 22% at 1 and 16 columns (128 block rows) took 5-10% longer,
/// 16384^2 bs 64 22% at 16 columns (the flat list) 3.5%, 8192 x 512 x 8192 bs 128 22% (the tile counter) 3% and
/// 8192^2 bs 128 10% 2-9%.
pub fn graph_balance_pays(
    (nnzb, block_rows, block_bytes): (usize, usize, usize),
    max_row_blocks: Option<usize>,
    whole_ctas: usize,
    sm_count: usize,
) -> bool {
    let long_rows = nnzb.saturating_mul(block_bytes) >= GRAPH_BALANCE_MIN_ROW_BYTES.saturating_mul(block_rows);
    rows_skewed((nnzb, block_rows), max_row_blocks) || (whole_ctas.saturating_mul(2) <= sm_count && long_rows)
}

/// The CTAs per SM of a flat block-list launch that [`RowSplit::Auto`] takes ([`flat_auto_serves`]): 264 on an
/// H200, about one block row of 16384 x 16384 at bs 64 each. Measured on an H200 (docs/perf-notes.md, issue 12
/// step 24): 16384 x 8 x 16384 bs 64 22% 35.4 µs with 2 per SM, 36.0-36.3 with the kernel's wave of 3, 40.6-41.1
/// with 1.
pub const FLAT_AUTO_CTAS_PER_SM: u32 = 2;

/// The fewest k-tiles per CTA (blocks times `bs / bk`) for which [`RowSplit::Auto`] takes the flat block list on
/// the narrow tiles, counted in k-tiles of 64 rows of A: a bs-128 k-tile, twice the tensor work and bytes of a
/// bs-64 one, counts two. Measured on an H200 against whole or split rows, two CTAs per SM, alternated: 16384 x
/// 16384 bs 64 22% (55 k-tiles a CTA) 2-7% faster at 1 to 16 columns; below 40 the gains are small or mixed: bs
/// 64 10% (25) 4-6% faster at 8 columns but 1-3% slower at 1, 8192 x 8192 bs 64 22% (14) 4% slower than its split
/// rows (docs/perf-notes.md, issue 12 step 24); bs 128 22% (27 k-tiles, 54 counted) 1.6-4.5% faster, bs 128 10%
/// (12, 24 counted) level to 1% slower (step 27, with the other pieces read at the end).
pub const FLAT_AUTO_MIN_K_TILES_PER_CTA: usize = 40;

/// The k-tiles by which the busiest SM's whole rows must exceed its equal share of A's blocks for
/// [`RowSplit::Auto`] to take the flat block list on bs 64's tiles of 32 and 64 columns ([`flat_auto_serves`]):
/// what the list itself costs (its start, the cut rows' hand-over, twice the CTAs). Measured on an H200
/// (docs/perf-notes.md, issue 12 steps 25 and 26), the list against whole rows at 40-64 columns: 8192 x 8192 at 10%
/// (the busiest SM's row about 22 k-tiles, an equal share 12.4) 5% slower, at 22% (42 against 27) 8% faster; 4096 x
/// 4096 at 10% (13 against 3.1) 33% slower, at 22% (23 against 6.8) 5% faster; at 17-32 columns 8192 x 8192 at 10%
/// 2% slower, at 22% 17% faster.
pub const FLAT_MID_AUTO_MARGIN_K_TILES: usize = 12;

/// The fewest k-tiles per CTA (of [`FLAT_AUTO_CTAS_PER_SM`] per SM) for which [`RowSplit::Auto`] takes the flat
/// block list on bs 64's tiles of 32 and 64 columns ([`flat_auto_serves`]): below, every row is cut into pieces
/// of about one block and the hand-overs cost more than the balance gains (1024 x 64 x 4096 bs 64 25%, one block a
/// CTA: 11% slower queued).
pub const FLAT_MID_AUTO_MIN_K_TILES_PER_CTA: usize = 3;

/// Whether [`RowSplit::Auto`] takes the flat block list for a launch of the flat kernel `cfg` over `nnzb` blocks
/// in `block_rows` block rows (the longest holding `max_row_blocks`) and `n_tiles` N tiles on `sm_count` SMs, at
/// [`FLAT_AUTO_CTAS_PER_SM`] CTAs per SM. Never for several N tiles or an unknown longest row (a caller's raw
/// view). Else:
/// - the narrow tiles ([`sparsek_layout::Tile::Flat`]): at least [`FLAT_AUTO_MIN_K_TILES_PER_CTA`] k-tiles of 64
///   rows per CTA and rows of unequal length (the longest at least 15% over the mean: on rows of equal length,
///   where every row is cut in two, the flat list measured 4-6% slower than whole rows);
/// - bs 64's tiles of 32 and 64 columns ([`sparsek_layout::Tile::Flat32`], [`sparsek_layout::Tile::Flat64`]): at
///   least [`FLAT_MID_AUTO_MIN_K_TILES_PER_CTA`] k-tiles per CTA, and whole rows that would keep the busiest SM
///   longer than an equal share by [`FLAT_MID_AUTO_MARGIN_K_TILES`]. With whole rows the busiest SM runs the
///   longest row and, where there are more rows than SMs, rows of mean length beside it (`ceil(block_rows /
///   sm_count) - 1` of them); the list gives every SM `nnzb / sm_count` blocks.
pub fn flat_auto_serves(
    cfg: &KernelConfig,
    (nnzb, block_rows, n_tiles): (usize, usize, usize),
    max_row_blocks: Option<usize>,
    sm_count: usize,
) -> bool {
    let Some(longest) = max_row_blocks else { return false };
    if n_tiles != 1 || block_rows == 0 || sm_count == 0 {
        return false;
    }
    let k_tiles_per_block = (cfg.bs / cfg.bk.max(1)) as usize;
    let ctas = FLAT_AUTO_CTAS_PER_SM as usize * sm_count;
    let k_tiles = nnzb.saturating_mul(k_tiles_per_block);
    if cfg.bn <= FLAT_NARROW_MAX_BN {
        // In k-tiles of 64 rows (FLAT_AUTO_MIN_K_TILES_PER_CTA).
        let rows_64 = (cfg.bs / 64).max(1) as usize;
        return k_tiles.saturating_mul(rows_64) >= FLAT_AUTO_MIN_K_TILES_PER_CTA.saturating_mul(ctas)
            && longest.saturating_mul(20 * block_rows) >= nnzb.saturating_mul(23);
    }
    // K-tiles the busiest SM runs with whole rows, against an equal share plus the margin; both sides times
    // block_rows * sm_count, in integers.
    let beside = block_rows.div_ceil(sm_count) - 1;
    let whole = longest.saturating_mul(block_rows).saturating_add(beside.saturating_mul(nnzb));
    let whole = whole.saturating_mul(k_tiles_per_block).saturating_mul(sm_count);
    let flat = k_tiles
        .saturating_mul(block_rows)
        .saturating_add(FLAT_MID_AUTO_MARGIN_K_TILES.saturating_mul(block_rows).saturating_mul(sm_count));
    k_tiles >= FLAT_MID_AUTO_MIN_K_TILES_PER_CTA.saturating_mul(ctas) && whole >= flat
}

/// The N tile of the narrow flat kernels ([`sparsek_layout::FLAT_CONFIGS`], all of one width: a unit test checks);
/// [`flat_auto_serves`] applies the mid tiles' rule to wider ones.
const FLAT_NARROW_MAX_BN: u32 = sparsek_layout::FLAT_CONFIGS[0].bn;

/// The CTAs per N tile of a flat block-list launch ([`RowSplit::Flat`]) over `nnzb` blocks in `n_tiles` N tiles
/// of a kernel of `cfg`, `ctas` CTAs wanted (a number of waves' worth): at most `nnzb` (every CTA holds a block),
/// or `None` where the workspace cannot hold the launch's two partial tiles per CTA and N tile and its counter per
/// CTA and N tile, or the grid does not fit.
pub fn flat_ctas(cfg: &KernelConfig, (nnzb, n_tiles): (usize, usize), ctas: usize, limits: SplitLimits) -> Option<u32> {
    let g = ctas.min(nnzb);
    if g == 0 || n_tiles == 0 || nnzb > u32::MAX as usize {
        return None;
    }
    let slots = g.checked_mul(2)?.checked_mul(n_tiles)?;
    let fits = slots.checked_mul(cfg.split_slot_bytes() as usize)? <= limits.partials_bytes
        && g.checked_mul(n_tiles)? <= limits.counters
        && g.checked_mul(n_tiles)? <= i32::MAX as usize;
    fits.then_some(u32::try_from(g).ok()?)
}

/// The split-row workspace of one [`Gpu`] (see the module docs).
pub(crate) struct SplitWorkspace {
    /// Device addresses of the partial tiles and the counters (owned by `_partials` and `_counters`).
    pub(crate) partials: u64,
    pub(crate) counters: u64,
    /// The sm_90a kernels' two tile-scheduler counters (gpu/schedule.rs), past the split counters.
    pub(crate) scheduler: u64,
    /// Whether the device has stream-ordered allocation, which a captured launch's own workspace needs
    /// ([`GraphSpace`]).
    pub(crate) graph_memory: bool,
    state: Mutex<Order>,
    scheduler_owner: Mutex<Owner>,
    _partials: CudaSlice<u8>,
    _counters: CudaSlice<u32>,
}

/// Which stream may use the tile-scheduler counters ([`SplitWorkspace::claim_scheduler`]).
struct Owner {
    /// The stream of the last launch that used them, if any.
    stream: Option<usize>,
    /// Recorded after that launch.
    done: CudaEvent,
    /// Whether `done` was recorded after that launch (a failed record leaves the counters to its stream).
    recorded: bool,
}

/// The tile-scheduler counters claimed for one launch on `stream`: [`SchedulerClaim::launched`] after the launch
/// hands them to that stream. Holds the lock until then, so claims from several threads are ordered.
pub(crate) struct SchedulerClaim<'a> {
    owner: std::sync::MutexGuard<'a, Owner>,
    stream: CUstream,
}

impl SchedulerClaim<'_> {
    /// The launch is queued: the counters belong to its stream until the event recorded now completes.
    pub(crate) fn launched(mut self) {
        self.owner.stream = Some(self.stream as usize);
        // SAFETY: `stream` is a live stream of this context (checked by the caller) and the event is ours.
        self.owner.recorded =
            unsafe { cudarc::driver::result::event::record(self.owner.done.cu_event(), self.stream) }.is_ok();
    }
}

/// What orders split launches on different streams.
struct Order {
    /// Recorded after every split launch.
    done: CudaEvent,
    /// The stream of the last split launch, if any.
    last: Option<usize>,
}

impl SplitWorkspace {
    /// Allocates the partial tiles and the zeroed counters on `stream` and waits for the zeroing (so a launch on
    /// any stream finds zeros). `None` when the GPU cannot spare the memory: launches then keep whole rows.
    pub(crate) fn new(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>) -> Option<SplitWorkspace> {
        let partials = stream.alloc_zeros::<u8>(SPLIT_PARTIALS_BYTES).ok()?;
        let counters = stream.alloc_zeros::<u32>(SPLIT_COUNTERS + 2).ok()?;
        stream.synchronize().ok()?;
        let done = ctx.new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING)).ok()?;
        let scheduler_done = ctx.new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING)).ok()?;
        let pools = ctx.attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
        let (p, c) = {
            let (p, _g) = partials.device_ptr(stream);
            let (c, _h) = counters.device_ptr(stream);
            (p, c)
        };
        Some(SplitWorkspace {
            partials: p,
            counters: c,
            scheduler: c + 4 * SPLIT_COUNTERS as u64,
            graph_memory: pools.is_ok_and(|v| v != 0),
            state: Mutex::new(Order { done, last: None }),
            scheduler_owner: Mutex::new(Owner { stream: None, done: scheduler_done, recorded: true }),
            _partials: partials,
            _counters: counters,
        })
    }

    /// The workspace's two allocations (first byte, bytes): the partial tiles, and the split and scheduler
    /// counters. A launch's C must not overlap them.
    pub(crate) fn ranges(&self) -> [(u64, u128); 2] {
        [(self.partials, SPLIT_PARTIALS_BYTES as u128), (self.counters, 4 * (SPLIT_COUNTERS as u128 + 2))]
    }

    /// Runs `launch` (a split launch on `stream`) ordered after every earlier split launch: a device-side wait
    /// on the previous launch's event when it was on another stream, and this launch's event recorded after it.
    /// The lock is held throughout, so launches from several threads are ordered too.
    pub(crate) fn ordered(&self, stream: CUstream, launch: impl FnOnce() -> Result<()>) -> Result<()> {
        let mut order = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let key = stream as usize;
        if order.last.is_some_and(|s| s != key) {
            // SAFETY: `stream` is a live stream of this context (checked by the caller) and the event is ours.
            unsafe {
                cudarc::driver::result::stream::wait_event(
                    stream,
                    order.done.cu_event(),
                    CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                )
            }
            .map_err(cuda("cuStreamWaitEvent (split-row workspace)"))?;
        }
        launch()?;
        order.last = Some(key);
        // SAFETY: as above.
        unsafe { cudarc::driver::result::event::record(order.done.cu_event(), stream) }
            .map_err(cuda("cuEventRecord (split-row workspace)"))
    }

    /// The tile-scheduler counters for a launch on `stream`, if it can have them without waiting for another
    /// stream: they are free (never used, or the last launch that used them has finished) or `stream` used
    /// them last. `None` otherwise (the launch then takes no counter), so independent streams stay independent.
    /// A launch on the owning stream still waits (on the device) for the event recorded after the last one, a
    /// no-op on the same stream that orders it correctly should a new stream have been given a destroyed
    /// stream's handle. Any failed driver call (e.g. another thread capturing a graph in global mode) means no
    /// counter.
    pub(crate) fn claim_scheduler(&self, stream: CUstream) -> Option<SchedulerClaim<'_>> {
        let owner = self.scheduler_owner.lock().unwrap_or_else(|e| e.into_inner());
        match owner.stream {
            Some(s) if s == stream as usize => {
                // SAFETY: `stream` is a live stream of this context (checked by the caller) and the event ours.
                unsafe {
                    cudarc::driver::result::stream::wait_event(
                        stream,
                        owner.done.cu_event(),
                        CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                    )
                }
                .ok()?;
            }
            Some(_) if !owner.recorded || owner.done.try_is_complete() != Ok(true) => return None,
            Some(_) | None => {}
        }
        Some(SchedulerClaim { owner, stream })
    }
}

impl Drop for SplitWorkspace {
    fn drop(&mut self) {
        // The last split launch may still be running on a caller's stream: its memory is freed after it.
        let order = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if order.last.is_some() {
            let _ = order.done.synchronize();
        }
        let owner = self.scheduler_owner.get_mut().unwrap_or_else(|e| e.into_inner());
        if owner.stream.is_some() {
            let _ = owner.done.synchronize();
        }
    }
}

/// What a launch takes of a workspace: bytes of partial tiles, counters, and whether the sm_90a tile scheduler's
/// two counters ([`GraphSpace`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SpaceNeed {
    /// Bytes of partial tiles (16-byte aligned at the start).
    pub(crate) partials_bytes: u64,
    /// Split-row or flat-list counters (u32), zero before the launch.
    pub(crate) counters: u64,
    /// Whether the launch takes the tile scheduler's two counters, zero before it.
    pub(crate) scheduler: bool,
}

impl SpaceNeed {
    /// Whether the launch needs a workspace at all.
    pub(crate) fn any(&self) -> bool {
        self.partials_bytes > 0 || self.counters > 0 || self.scheduler
    }
}

/// The partial-tile bytes and counters of a split-row launch of `cfg` (`choice`) over `nnzb` blocks in
/// `block_rows` block rows and `n_tiles` N tiles: [`split_slots`] slots, one counter per (row, N tile) (the
/// bounds [`split_choice`] checks against the workspace).
pub(crate) fn split_need(
    cfg: &KernelConfig,
    choice: SplitChoice,
    (nnzb, block_rows, n_tiles): (usize, usize, usize),
) -> SpaceNeed {
    let slots = split_slots(nnzb as u64, block_rows as u64, choice.blocks as u64, n_tiles as u64);
    SpaceNeed {
        partials_bytes: slots * cfg.split_slot_bytes() as u64,
        counters: (block_rows * n_tiles) as u64,
        scheduler: false,
    }
}

/// The partial-tile bytes and counters of a flat block-list launch of `cfg` with `g` CTAs per N tile over `n_tiles`
/// N tiles: two slots and one counter per CTA and N tile ([`flat_ctas`]'s bounds).
pub(crate) fn flat_need(cfg: &KernelConfig, g: u32, n_tiles: usize) -> SpaceNeed {
    let per = g as u64 * n_tiles as u64;
    SpaceNeed { partials_bytes: 2 * per * cfg.split_slot_bytes() as u64, counters: per, scheduler: false }
}

/// The partial-tile bytes and counters of an sm_90a launch of `cfg` with split rows `choice` over `n_tiles` N
/// tiles: `split_rows * chunks * n_tiles` slots, `split_rows * n_tiles * tile warps` counters
/// ([`hopper_split_choice`]'s bounds).
pub(crate) fn hopper_need(cfg: &KernelConfig, choice: HopperSplit, n_tiles: usize) -> SpaceNeed {
    let tiles = choice.split_rows as u64 * n_tiles as u64;
    SpaceNeed {
        partials_bytes: tiles * choice.chunks as u64 * cfg.split_slot_bytes() as u64,
        counters: tiles * (cfg.warps_m * cfg.warps_n) as u64,
        scheduler: false,
    }
}

/// A captured launch's own workspace, in the CUDA graph its stream is being captured into: one stream-ordered
/// allocation (the graph's allocation node), its counters zeroed (a memset node), the launch, then the
/// allocation freed ([`GraphSpace::free`], a free node). The graph owns the memory: every replay of it has its own
/// zeroed counters and partial tiles, ordered with that replay alone, and CUDA may reuse the physical memory
/// wherever lifetimes do not overlap (the launches of one graph in sequence, graphs replayed on one stream). The
/// Gpu's own workspace cannot serve a graph: a replay is not ordered with the launches around it.
pub(crate) struct GraphSpace {
    base: u64,
    /// The partial tiles (16-byte aligned).
    pub(crate) partials: u64,
    /// The split-row or flat-list counters, zeroed.
    pub(crate) counters: u64,
    /// The tile scheduler's two counters (after the others), zeroed when asked for.
    pub(crate) scheduler: u64,
}

impl GraphSpace {
    /// Allocates `need` on `stream` in stream order and zeroes its counters there.
    ///
    /// # Safety
    /// `stream` is a live stream of the current context. (On a stream that is not being captured this is a plain
    /// stream-ordered allocation, as correct, and slower.)
    pub(crate) unsafe fn allocate(stream: CUstream, need: SpaceNeed) -> Result<GraphSpace> {
        const ALIGN: u64 = 256;
        let counters_at = need.partials_bytes.div_ceil(ALIGN) * ALIGN;
        let words = need.counters + if need.scheduler { 2 } else { 0 };
        let bytes = usize::try_from(counters_at + 4 * words.max(1)).map_err(|_| Error::InvalidArgument {
            name: "workspace",
            reason: format!("{counters_at} bytes of partial tiles do not fit this host"),
        })?;
        let failed = |source: cudarc::driver::DriverError| match source.0 {
            cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                Error::OutOfMemory { what: "the workspace of a launch captured into a CUDA graph", bytes }
            }
            _ => Error::Cuda { op: "cuMemAllocAsync (graph workspace)", source },
        };
        // SAFETY: the caller's stream; the allocation is used only by this launch, on this stream, and freed after it.
        let base = unsafe { cudarc::driver::result::malloc_async(stream, bytes) }.map_err(failed)?;
        let counters = base + counters_at;
        // SAFETY: `words` u32 of the allocation just made, in stream order after it.
        let zeroed = unsafe { cudarc::driver::sys::cuMemsetD32Async(counters, 0, words as usize, stream) }.result();
        if let Err(e) = zeroed {
            // SAFETY: allocated above on this stream, not used.
            let _ = unsafe { cudarc::driver::result::free_async(base, stream) };
            return Err(cuda("cuMemsetD32Async (graph workspace)")(e));
        }
        Ok(GraphSpace { base, partials: base, counters, scheduler: counters + 4 * need.counters })
    }

    /// Frees the allocation on `stream`, in stream order after the launch that used it.
    ///
    /// # Safety
    /// `stream` is the stream it was allocated on.
    pub(crate) unsafe fn free(self, stream: CUstream) -> Result<()> {
        // SAFETY: allocated on this stream by `allocate` and freed once (self is consumed).
        unsafe { cudarc::driver::result::free_async(self.base, stream) }
            .map_err(cuda("cuMemFreeAsync (graph workspace)"))
    }
}

/// Whether `stream` is being captured into a CUDA graph (a failed query counts as captured: the launch then makes
/// a captured launch's choices, which are correct on any stream).
pub(crate) fn capturing(stream: CUstream) -> bool {
    // SAFETY: a query of a live stream of this context (checked by the caller).
    match unsafe { cudarc::driver::result::stream::is_capturing(stream) } {
        Ok(status) => status != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE,
        Err(_) => true,
    }
}

/// Whether every node the next launch captured on `stream` will depend on is a kernel node (none counts: the first
/// node of a capture). False when the query fails, and on drivers older than CUDA 12.3 (`driver_version`), which
/// lack `cuStreamGetCaptureInfo_v3`, the only form the bindings offer.
pub(crate) fn follows_kernels(stream: CUstream, driver_version: i32) -> bool {
    use cudarc::driver::sys::{CUgraphNode, CUgraphNodeType};
    if driver_version < 12030 {
        return false;
    }
    let mut status = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut deps: *const CUgraphNode = std::ptr::null();
    let mut count = 0usize;
    // SAFETY: a query of a live stream of this context (checked by the caller); the outputs are valid pointers or
    // null (not wanted), and the dependency array the driver returns stays valid until the next call on the stream.
    let queried = unsafe {
        cudarc::driver::sys::cuStreamGetCaptureInfo_v3(
            stream,
            &mut status,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut deps,
            std::ptr::null_mut(),
            &mut count,
        )
    };
    if queried.result().is_err() || status != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE {
        return false;
    }
    (0..count).all(|i| {
        let mut kind = CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
        // SAFETY: `i` is below the driver's count of the array it returned.
        let node = unsafe { *deps.add(i) };
        // SAFETY: a node of the graph being captured, and a valid output pointer.
        let typed = unsafe { cudarc::driver::sys::cuGraphNodeGetType(node, &mut kind) }.result();
        typed.is_ok() && kind == CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL
    })
}

impl Gpu {
    /// How launches of the narrow kernels (N up to [`sparsek_layout::NARROW_MAX_N`]) and of the sm_90a kernels
    /// ([`hopper_split_choice`]) split long block rows over several CTAs (default [`RowSplit::Auto`]).
    /// [`RowSplit::Off`] keeps one CTA per block row: for comparisons and tests of that path.
    pub fn with_row_split(mut self, setting: RowSplit) -> Self {
        self.row_split = setting;
        self
    }

    /// The row-split setting ([`Gpu::with_row_split`]).
    pub fn row_split(&self) -> RowSplit {
        self.row_split
    }

    /// The split rows a launch of the sm_90a kernel of `cfg` (`ctas_per_sm` of it on an SM) over block rows of
    /// `lengths` blocks (longest first; `nnzb` in all) and `n` columns gets on any stream, captured or not
    /// ([`hopper_split_choice`] for this GPU's persistent grid); `None` without the workspace or for other kernels.
    pub fn hopper_split_for(
        &self,
        cfg: &KernelConfig,
        ctas_per_sm: u32,
        (lengths, nnzb): (&[u32], usize),
        n: usize,
    ) -> Option<HopperSplit> {
        self.split.as_ref()?;
        let sm_count = self.info().sm_count as usize;
        let workers = ctas_per_sm as usize * sm_count * if cfg.pingpong() { 2 } else { 1 };
        let n_tiles = n.div_ceil(cfg.bn.max(1) as usize);
        let limits = SplitLimits::with_sms(sm_count);
        hopper_split_choice(cfg, self.row_split, lengths, (nnzb, n_tiles, workers), limits)
    }

    /// Whether this GPU has its split-row workspace (it has unless the memory could not be allocated when it
    /// opened).
    pub fn has_split_workspace(&self) -> bool {
        self.split.is_some()
    }

    /// The flat block-list kernel and its CTAs per N tile that a launch of `kernel` over `nnzb` blocks in
    /// `block_rows` block rows (the longest holding `max_row_blocks`, when known) and `n` columns gets (on any
    /// stream, captured or not), or `None`: only in place of a narrow kernel ([`sparsek_layout::Tile::Narrow`])
    /// or a mid tile ([`sparsek_layout::Tile::Mid`], [`sparsek_layout::Tile::Mid64`]) whose block size and
    /// types have a flat one ([`sparsek_layout::Tile::Flat`], [`sparsek_layout::Tile::Flat32`],
    /// [`sparsek_layout::Tile::Flat64`]), as [`RowSplit::Flat`] asks or, under [`RowSplit::Auto`], where
    /// [`flat_auto_serves`] says so; and where [`flat_ctas`] allows it. The launcher's
    /// decision, which `sparsek run` prints and the tests assert on.
    pub(crate) fn flat_for_kernel(
        &self,
        kernel: &Kernel,
        (nnzb, block_rows, n): (usize, usize, usize),
        max_row_blocks: Option<usize>,
    ) -> Option<(&Kernel, u32)> {
        self.split.as_ref()?;
        let v = &kernel.variant;
        let tile = match v.tile {
            sparsek_layout::Tile::Narrow => sparsek_layout::Tile::Flat,
            sparsek_layout::Tile::Mid64 => sparsek_layout::Tile::Flat64,
            sparsek_layout::Tile::Mid => sparsek_layout::Tile::Flat32,
            _ => return None,
        };
        // A flat kernel runs its whole-row kernel's configuration (layout::FLAT_CONFIGS, FLAT32_CONFIGS and
        // FLAT64_CONFIGS), so the rule is decided before the kernel table is searched: a launch that Auto keeps on
        // whole rows pays no lookup.
        let cfg = kernel.config();
        let sm_count = self.info().sm_count as usize;
        let n_tiles = n.div_ceil(cfg.bn.max(1) as usize);
        let wanted = match self.row_split {
            RowSplit::Flat(k) => k,
            RowSplit::Auto if flat_auto_serves(&cfg, (nnzb, block_rows, n_tiles), max_row_blocks, sm_count) => {
                FLAT_AUTO_CTAS_PER_SM
            }
            _ => return None,
        };
        let flat = self.product.find(v.op, v.bs, (v.input, v.b_layout, v.out), tile)?;
        let per_sm = if wanted == 0 { flat.ctas_per_sm } else { wanted.min(flat.ctas_per_sm) };
        let g = flat_ctas(&cfg, (nnzb, n_tiles), per_sm as usize * sm_count, SplitLimits::with_sms(sm_count))?;
        Some((flat, g))
    }

    /// The flat block-list kernel's name and CTAs per N tile for a launch of the narrow kernel `narrow_name` over
    /// `nnzb` blocks in `block_rows` block rows (the longest holding `max_row_blocks`, when known) and `n`
    /// columns, or `None` where it would not take one ([`Gpu::with_row_split`]).
    pub fn flat_for(
        &self,
        narrow_name: &str,
        (nnzb, block_rows, n): (usize, usize, usize),
        max_row_blocks: Option<usize>,
    ) -> Option<(&'static str, u32)> {
        let kernel = self.product.kernels().iter().find(|k| k.variant.name == narrow_name)?;
        self.flat_for_kernel(kernel, (nnzb, block_rows, n), max_row_blocks).map(|(k, g)| (k.variant.name, g))
    }

    /// [`Gpu::skew_tile_for`]'s rule for a loaded kernel: the launcher's call, once per launch.
    pub(crate) fn skew_tile_for_kernel(
        &self,
        kernel: &Kernel,
        (nnzb, block_rows, n): (usize, usize, usize),
        max_row_blocks: Option<usize>,
    ) -> Option<&Kernel> {
        self.split.as_ref()?;
        let v = &kernel.variant;
        let applies = v.tile == sparsek_layout::Tile::Mid64
            && !kernel.config().splits_rows()
            && matches!(self.row_split, RowSplit::Auto | RowSplit::Flat(_))
            && n <= sparsek_layout::NARROW_MAX_N
            && rows_skewed((nnzb, block_rows), max_row_blocks);
        if !applies {
            return None;
        }
        let types = (v.input, v.b_layout, v.out);
        if self.product.find(v.op, v.bs, types, sparsek_layout::Tile::Flat64).is_some() {
            return None;
        }
        self.product.find(v.op, v.bs, types, sparsek_layout::Tile::Mid).filter(|k| k.config().splits_rows())
    }

    /// The name and configuration of the kernel a launch of the kernel `name` over `nnzb` blocks in `block_rows`
    /// block rows (the longest holding `max_row_blocks`, when known) and `n` columns takes in its place to split a
    /// dominating row, or `None`: bs 64's tile of 32 columns for its tile of 64 (`_n64`, which cannot split rows),
    /// where no flat block list serves the types ([`sparsek_layout::Tile::Flat64`]: f16 C, bf16, a column-major B),
    /// the setting is [`RowSplit::Auto`] or [`RowSplit::Flat`], `n` is at most [`sparsek_layout::NARROW_MAX_N`] and
    /// one row holds more than four times the mean ([`rows_skewed`]). The tile of 32 then splits that row over its
    /// two N tiles ([`split_choice`]) where whole rows on the tile of 64 would leave the GPU waiting on it
    /// (docs/perf-notes.md, issue 12 step 28). The launcher's decision, which `sparsek run` prints and the tests
    /// assert on.
    pub fn skew_tile_for(
        &self,
        name: &str,
        (nnzb, block_rows, n): (usize, usize, usize),
        max_row_blocks: Option<usize>,
    ) -> Option<(&'static str, KernelConfig)> {
        let kernel = self.product.kernels().iter().find(|k| k.variant.name == name)?;
        self.skew_tile_for_kernel(kernel, (nnzb, block_rows, n), max_row_blocks).map(|k| (k.variant.name, k.config()))
    }

    /// The split a launch of `cfg` gets (on any stream, captured or not): the launcher's one decision, which
    /// `sparsek run` prints and the tests assert on.
    pub fn split_for(
        &self,
        cfg: &KernelConfig,
        (nnzb, block_rows, n): (usize, usize, usize),
        max_row_blocks: Option<usize>,
    ) -> Option<SplitChoice> {
        self.split.as_ref()?;
        let n_tiles = n.div_ceil(cfg.bn.max(1) as usize);
        split_choice(
            cfg,
            self.row_split,
            (nnzb, block_rows, n_tiles),
            max_row_blocks,
            SplitLimits::with_sms(self.info().sm_count as usize),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hopper_split_takes_rows_that_outlast_an_equal_share() {
        let bs64 = sparsek_layout::hopper_config_for(64).unwrap();
        let bs128 = sparsek_layout::hopper_config_for(128).unwrap();
        let limits = SplitLimits::with_sms(132);
        let auto = |cfg: &KernelConfig, lengths: &[u32], n_tiles: usize, workers: usize| {
            let nnzb = lengths.iter().map(|&l| l as usize).sum();
            hopper_split_choice(cfg, RowSplit::Auto, lengths, (nnzb, n_tiles, workers), limits)
        };
        // Two full rows of 64 blocks among 46 of 8, two N tiles, 132 consumer sets: a share of 8 blocks, raised to
        // 16 (32 k-tiles at bs 128); the two long rows in 4 parts each.
        let mut lengths = vec![64u32, 64];
        lengths.extend([8u32; 46]);
        assert_eq!(auto(&bs128, &lengths, 2, 132), Some(HopperSplit { split_rows: 2, chunks: 4, blocks: 16 }));
        // bs 64's ping-pong kernel: whole rows under Auto.
        assert_eq!(auto(&bs64, &lengths, 2, 264), None);
        // Equal rows, or a longest row within twice the share: whole rows.
        assert_eq!(auto(&bs128, &[30u32; 128], 32, 132), None);
        // Four rows over 32 N tiles are 128 tiles for 132 consumer sets: the share is 52 blocks; the long row splits
        // in three, the rows of 28 (under two parts) stay whole.
        let few = auto(&bs128, &[128, 28, 28, 28], 32, 132);
        assert_eq!(few, Some(HopperSplit { split_rows: 1, chunks: 3, blocks: 52 }));
        // Many N tiles spread the work already: the share grows past the longest row's half.
        let mut skewed = vec![128u32];
        skewed.extend([28u32; 127]);
        assert_eq!(auto(&bs128, &skewed, 32, 132), None);
        // Off, other kernels, no rows: none.
        let nnzb = lengths.iter().map(|&l| l as usize).sum();
        assert_eq!(hopper_split_choice(&bs64, RowSplit::Off, &lengths, (nnzb, 2, 264), limits), None);
        let narrow = sparsek_layout::narrow_config_for(64).unwrap();
        assert_eq!(hopper_split_choice(&narrow, RowSplit::Auto, &lengths, (nnzb, 2, 264), limits), None);
        assert_eq!(auto(&bs64, &[], 2, 264), None);
        // Blocks(b): rows longer than b, whatever the share.
        let fixed = hopper_split_choice(&bs64, RowSplit::Blocks(10), &lengths, (nnzb, 2, 264), limits);
        assert_eq!(fixed, Some(HopperSplit { split_rows: 2, chunks: 7, blocks: 10 }));
        // The workspace: 16 MiB holds 128 bs-128 tiles of 256 f32 columns; 2 rows x 16 N tiles leave 4 parts each.
        let wide = hopper_split_choice(&bs128, RowSplit::Blocks(8), &lengths, (nnzb, 16, 132), limits);
        assert_eq!(wide, Some(HopperSplit { split_rows: 2, chunks: 4, blocks: 8 }));
        let tight = SplitLimits { partials_bytes: 256 << 10, ..limits };
        assert_eq!(hopper_split_choice(&bs128, RowSplit::Blocks(8), &lengths, (nnzb, 2, 132), tight), None);
    }
    use sparsek_layout::{config_for, narrow_config_for, split_parts, split_slot};

    fn narrow(bs: u32) -> KernelConfig {
        narrow_config_for(bs).unwrap()
    }

    #[test]
    fn graph_balance_pays_for_dominating_rows_and_half_empty_grids() {
        let (bs64, bs128) = (64 * 64 * 2, 128 * 128 * 2);
        // 8192^2 bs 64 22% at one N tile: 128 block rows of about 28 blocks fill 128 of 132 SMs.
        assert!(!graph_balance_pays((3604, 128, bs64), Some(40), 128, 132));
        // The same with one row of all 128 block columns (more than four times the mean).
        assert!(graph_balance_pays((3604, 128, bs64), Some(128), 128, 132));
        // A longest row unknown (a raw view without its schedule) is not taken as dominating.
        assert!(!graph_balance_pays((3604, 128, bs64), None, 128, 132));
        // 8192^2 bs 128 22%: 64 block rows of 14 blocks (460 KB) on 132 SMs, at most half of them; 67 are more.
        assert!(graph_balance_pays((901, 64, bs128), Some(20), 64, 132));
        assert!(!graph_balance_pays((943, 67, bs128), Some(20), 67, 132));
        // At 10% the rows hold about 6.4 blocks (205 KB): too short to pay.
        assert!(!graph_balance_pays((410, 64, bs128), Some(12), 64, 132));
        // Whole rows over several N tiles count every tile.
        assert!(!graph_balance_pays((901, 64, bs128), Some(20), 128, 132));
    }

    #[test]
    fn flat_auto_rule_takes_long_unequal_rows() {
        let cfg = |bs| sparsek_layout::flat_config_for(bs).unwrap();
        // 16384 x 16384 bs 64 22%: 14418 blocks in 256 rows, the longest of binomial rows ~75, of banded ones 57.
        assert!(flat_auto_serves(&cfg(64), (14418, 256, 1), Some(75), 132));
        assert!(!flat_auto_serves(&cfg(64), (14418, 256, 1), Some(57), 132), "equal rows");
        assert!(!flat_auto_serves(&cfg(64), (14418, 256, 1), None, 132), "longest unknown");
        assert!(!flat_auto_serves(&cfg(64), (14418, 256, 2), Some(75), 132), "two N tiles");
        // 16384 x 16384 bs 64 10%: 6554 blocks (25 k-tiles per CTA), bs 128 10%: 1638 blocks of 2 k-tiles (12,
        // counted 24 in k-tiles of 64 rows) and 8192 x 8192 bs 64 22%: 3604 blocks (14): below 40 per CTA.
        assert!(!flat_auto_serves(&cfg(64), (6554, 256, 1), Some(39), 132), "25 k-tiles per CTA");
        assert!(!flat_auto_serves(&cfg(128), (1638, 128, 1), Some(22), 132), "12 k-tiles per CTA");
        assert!(!flat_auto_serves(&cfg(64), (3604, 128, 1), Some(40), 132), "14 k-tiles per CTA");
        // bs 128 22%: 3604 blocks (27 k-tiles per CTA, 54 counted): in, on unequal rows.
        assert!(flat_auto_serves(&cfg(128), (3604, 128, 1), Some(40), 132), "27 bs-128 k-tiles per CTA");
        assert!(!flat_auto_serves(&cfg(128), (3604, 128, 1), Some(29), 132), "bs 128, equal rows");
        assert!(flat_auto_serves(&cfg(128), (7208, 128, 1), Some(75), 132));
    }

    #[test]
    fn the_narrow_flat_tiles_share_one_width_and_the_mid_ones_are_wider() {
        assert!(sparsek_layout::FLAT_CONFIGS.iter().all(|c| c.bn == FLAT_NARROW_MAX_BN));
        assert!(sparsek_layout::FLAT32_CONFIGS.iter().all(|c| c.bn > FLAT_NARROW_MAX_BN));
        assert!(sparsek_layout::FLAT64_CONFIGS.iter().all(|c| c.bn > FLAT_NARROW_MAX_BN));
    }

    #[test]
    fn flat_mid_auto_rule_weighs_the_busiest_sm_against_an_equal_share() {
        let cfg = sparsek_layout::flat64_config_for(64).unwrap();
        let cfg32 = sparsek_layout::flat32_config_for(64).unwrap();
        // The rule reads bs, bk and whether bn is wider than the narrow tiles': one test serves both tiles.
        let wide = |c: KernelConfig| c.bn > FLAT_NARROW_MAX_BN;
        assert_eq!((cfg.bs, cfg.bk, wide(cfg)), (cfg32.bs, cfg32.bk, wide(cfg32)));
        let serves = |nnzb, rows, longest| flat_auto_serves(&cfg, (nnzb, rows, 1), Some(longest), 132);
        // Measured faster (issue 12 step 25): 16384^2 at 22% and 10%, 8192^2 at 22% and 30%, skewed rows, few
        // rows of many blocks.
        assert!(serves(14418, 256, 75));
        assert!(serves(6554, 256, 40));
        assert!(serves(3604, 128, 42));
        assert!(serves(4915, 128, 54));
        assert!(serves(1638, 128, 128), "skewed");
        assert!(serves(901, 32, 39), "32 rows of 28 blocks");
        // Measured slower: rows of equal length, short rows, a block or less per CTA.
        assert!(!serves(14418, 256, 57), "banded");
        assert!(!serves(6554, 256, 26), "banded 10%");
        assert!(!serves(3604, 128, 29), "banded 8192^2");
        assert!(!serves(1638, 128, 22), "8192^2 10%");
        assert!(!serves(819, 128, 14), "8192^2 5%");
        assert!(!serves(410, 64, 13), "4096^2 10%");
        assert!(!serves(256, 16, 24), "one block a CTA");
        assert!(!serves(72, 6, 12), "a layer of 6 block rows");
        // Neither without the longest row or with two N tiles.
        assert!(!flat_auto_serves(&cfg, (14418, 256, 1), None, 132));
        assert!(!flat_auto_serves(&cfg, (14418, 256, 2), Some(75), 132));
        assert!(!flat_auto_serves(&cfg, (14418, 0, 1), Some(75), 132));
    }

    #[test]
    fn flat_ctas_fit_the_workspace_and_the_blocks() {
        let cfg = sparsek_layout::flat_config_for(64).unwrap();
        assert_eq!(flat_ctas(&cfg, (14418, 1), 264, WS), Some(264));
        assert_eq!(flat_ctas(&cfg, (100, 1), 264, WS), Some(100), "one block per CTA at most");
        assert_eq!(flat_ctas(&cfg, (0, 1), 264, WS), None, "no blocks");
        // Two 4 KiB slots per CTA and N tile: 16 MiB hold 2048 CTA-tiles.
        assert_eq!(flat_ctas(&cfg, (1 << 20, 4), 512, WS), Some(512));
        assert_eq!(flat_ctas(&cfg, (1 << 20, 5), 512, WS), None, "the partials do not fit");
    }

    /// An H100's or H200's 132 SMs.
    const WS: SplitLimits = SplitLimits::with_sms(132);

    #[test]
    fn parts_of_128_kib_a_group_and_whole_uniform_rows() {
        // A bs-64 tile of one k-group (the flat list's configuration): 128 block rows of ~28 blocks (3584), the
        // longest 40, split into parts of 16 blocks.
        let one = sparsek_layout::flat_config_for(64).unwrap();
        assert_eq!(one.k_groups, 1);
        let c = split_choice(&one, RowSplit::Auto, (3584, 128, 1), Some(40), WS).unwrap();
        assert_eq!(c, SplitChoice { chunks: 3, blocks: 16 });
        // Unknown longest row: twice the mean plus a part.
        let c = split_choice(&one, RowSplit::Auto, (3584, 128, 1), None, WS).unwrap();
        assert_eq!(c, SplitChoice { chunks: 5, blocks: 16 });
        // The narrow tile's two k-groups: uniform rows stay whole from 67 block rows (one CTA per two SMs), and
        // parts hold 32 blocks (256 KiB) where they split: 64 rows, or a dominating row.
        assert_eq!(narrow(64).k_groups, 2);
        assert_eq!(split_choice(&narrow(64), RowSplit::Auto, (3584, 128, 1), Some(40), WS), None);
        assert_eq!(split_choice(&narrow(64), RowSplit::Auto, (3584, 67, 1), Some(80), WS), None);
        let c = split_choice(&narrow(64), RowSplit::Auto, (3584, 66, 1), Some(80), WS).unwrap();
        assert_eq!(c, SplitChoice { chunks: 3, blocks: 32 });
        let c = split_choice(&narrow(64), RowSplit::Auto, (3584, 128, 1), Some(400), WS).unwrap();
        assert_eq!(c.blocks, 32);
        // bs 128: parts of 4 blocks (128 KiB, 8 k-tiles) grown toward one per SM: 896 / 132 -> 6 blocks.
        let c = split_choice(&narrow(128), RowSplit::Auto, (896, 64, 1), Some(20), WS).unwrap();
        assert_eq!(c, SplitChoice { chunks: 4, blocks: 6 });
        // Two N tiles: whole rows, unless parts are asked for ...
        assert_eq!(split_choice(&narrow(64), RowSplit::Auto, (3584, 128, 2), Some(40), WS), None);
        assert!(split_choice(&narrow(64), RowSplit::Blocks(16), (3584, 128, 2), Some(40), WS).is_some());
        // ... or a row holds more than four times the mean, on up to 64 columns (4 N tiles of 16), not beyond.
        let c = split_choice(&narrow(64), RowSplit::Auto, (3584, 128, 4), Some(128), WS).unwrap();
        assert_eq!(c, SplitChoice { chunks: 4, blocks: 32 });
        assert_eq!(split_choice(&narrow(64), RowSplit::Auto, (3584, 128, 5), Some(128), WS), None);
        assert_eq!(split_choice(&narrow(64), RowSplit::Auto, (3584, 128, 4), Some(112), WS), None);
        // 128 rows: at most one CTA per SM, split; 256 fill the GPU, whole rows ...
        assert!(split_choice(&narrow(128), RowSplit::Auto, (3584, 128, 1), Some(40), WS).is_some());
        assert_eq!(split_choice(&narrow(64), RowSplit::Auto, (14336, 256, 1), Some(80), WS), None);
        // ... unless a row holds more than four times the mean.
        assert!(split_choice(&narrow(64), RowSplit::Auto, (14336, 256, 1), Some(400), WS).is_some());
    }

    #[test]
    fn short_parts_grow_toward_one_per_sm() {
        let blocks = |bs, nnzb, rows, longest| {
            split_choice(&narrow(bs), RowSplit::Auto, (nnzb, rows, 1), Some(longest), WS).map(|c| c.blocks)
        };
        // bs 128, 2 k-tiles a block: 16384 x 16384 22% grows to 48 k-tiles (24 blocks), not to 3604 / 132 = 27,
        // 10% to 1638 / 132 = 12 blocks ...
        assert_eq!(blocks(128, 3604, 128, 40), Some(24));
        assert_eq!(blocks(128, 1638, 128, 20), Some(12));
        // ... 8192 x 8192 10% (410 / 132 = 3) and 4096 x 4096 22% (225 / 132 = 1) keep 128 KiB.
        assert_eq!(blocks(128, 410, 64, 12), Some(4));
        assert_eq!(blocks(128, 225, 32, 12), Some(4));
        // bs 64's parts (32 blocks with two k-groups) are 32 k-tiles already: unchanged however many blocks.
        assert_eq!(blocks(64, 3604, 64, 80), Some(32));
        assert_eq!(blocks(64, 6000, 64, 120), Some(32));
        // An explicit part size is not grown.
        let c = split_choice(&narrow(128), RowSplit::Blocks(4), (3604, 128, 1), Some(40), WS).unwrap();
        assert_eq!(c.blocks, 4);
    }

    #[test]
    fn no_split_when_off_short_or_wide() {
        assert_eq!(split_choice(&narrow(64), RowSplit::Off, (3584, 128, 1), Some(40), WS), None);
        // Every row fits one part.
        assert_eq!(split_choice(&narrow(64), RowSplit::Auto, (1024, 512, 1), Some(16), WS), None);
        // The wide tile does not split.
        let wide = config_for(64).unwrap();
        assert_eq!(split_choice(&wide, RowSplit::Auto, (3584, 128, 1), Some(40), WS), None);
        // No rows.
        assert_eq!(split_choice(&narrow(64), RowSplit::Auto, (0, 0, 1), None, WS), None);
    }

    #[test]
    fn skewed_rows_are_capped() {
        // One row of 3000 blocks, 127 of ~5: the cap keeps the grid within 8x the working CTAs.
        let c = split_choice(&narrow(64), RowSplit::Blocks(8), (3635, 128, 1), Some(3000), WS).unwrap();
        let working: usize = 3635 / 8 + 128;
        assert_eq!(c.chunks as usize, (8 * working).div_ceil(128));
        assert!(c.chunks < 3000 / 8);
    }

    #[test]
    fn parts_grow_until_the_workspace_holds_them() {
        // 16384 x 16384 bs 64 22% at 64 columns: 14336 blocks, 256 rows, 4 N tiles of 4 KiB slots:
        // (1792 + 256) * 4 * 4 KiB = 33.5 MB at 8 blocks, 18.9 MB at 16, 11.5 MB at 32.
        let c = split_choice(&narrow(64), RowSplit::Blocks(8), (14336, 256, 4), Some(80), WS).unwrap();
        assert_eq!(c.blocks, 32);
        let slots = split_slots(14336, 256, 32, 4);
        assert!(slots * narrow(64).split_slot_bytes() as u64 <= SPLIT_PARTIALS_BYTES as u64);
        // Too many counters: no split.
        assert_eq!(split_choice(&narrow(16), RowSplit::Auto, (1 << 20, 1 << 17, 1), Some(64), WS), None);
        // An explicit part size is honoured when it fits.
        let c = split_choice(&narrow(64), RowSplit::Blocks(3), (3584, 128, 1), Some(40), WS).unwrap();
        assert_eq!(c, SplitChoice { chunks: 14, blocks: 3 });
    }

    #[test]
    fn slots_are_distinct_and_in_bounds() {
        // Every (row, part, tile) of random row lengths gets its own slot below split_slots.
        let mut rng = crate::rng::Rng::new(7);
        for _ in 0..200 {
            let rows = 1 + rng.below(40) as u32;
            let blocks = 1 + rng.below(9) as u32;
            let chunks = 1 + rng.below(12) as u32;
            let n_tiles = 1 + rng.below(4) as u32;
            let mut begin = 0u32;
            let mut seen = std::collections::HashSet::new();
            let mut lens = Vec::new();
            for _ in 0..rows {
                lens.push(rng.below(60) as u32);
            }
            let nnzb: u32 = lens.iter().sum();
            let bound = split_slots(nnzb as u64, rows as u64, blocks as u64, n_tiles as u64);
            for (r, &len) in lens.iter().enumerate() {
                let parts = split_parts(len, blocks, chunks);
                assert!(parts >= 1 && parts <= chunks && (len == 0 || parts <= len.div_ceil(blocks)));
                for part in 0..parts {
                    for t in 0..n_tiles {
                        let s = split_slot(begin, r as u32, part, blocks, t, n_tiles);
                        assert!(s < bound, "slot {s} of bound {bound}");
                        assert!(seen.insert(s), "slot {s} twice");
                    }
                }
                begin += len;
            }
        }
    }
}
