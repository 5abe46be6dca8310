//! The work decompositions a launch may take and the rules that choose them: split rows on the narrow and mid
//! tiles ([`split_choice`]), on the sm_90a kernels ([`hopper_split_choice`]), the flat block list
//! ([`flat_auto_serves`], [`flat_ctas`]), and what each takes of a workspace ([`SpaceNeed`]). Pure: no device, no
//! driver.

use sparsek_layout::{KernelConfig, Pipeline, hopper_virtual_rows, split_slots};

use super::rules::*;

/// How launches split block rows ([`Policy::row_split`](super::Policy::row_split)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RowSplit {
    /// The flat block list where `flat_auto_serves` (the bs 64 and 128 narrow tiles: one N tile, at least
    /// [`FLAT_AUTO_MIN_K_TILES_PER_CTA`] k-tiles per CTA, rows of unequal length; bs 64's tiles of 32 and 64
    /// columns: the busiest SM's whole rows exceed an equal share by enough), else parts of about
    /// [`SPLIT_PART_BYTES`] of A's values (more for short parts on many blocks:
    /// [`SPLIT_PART_SHORT_K_TILES`]) where whole rows would leave the GPU short of CTAs or a row dominates
    /// (`split_choice`), and the workspace holds them.
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

/// Split rows on the sm_90a kernels: a launch of `cfg` over block rows of `lengths` blocks (in the row order's
/// order: longest first; `nnzb` in all), `n_tiles` N tiles, and `workers` consumer sets running at once (the
/// persistent grid's CTAs times the sets per CTA). Under [`RowSplit::Auto`] (and `Flat`, which does not apply there), on the kernels
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
            if longest <= HOPPER_SPLIT_MIN_SHARES * share {
                return None;
            }
            share
        }
    };
    // Rows of at least two parts: a row just over one part stays whole (at most twice the share).
    let split_rows = lengths.partition_point(|&l| l as usize >= HOPPER_SPLIT_MIN_SHARES * blocks);
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
    /// The workspace every `Gpu` allocates, on a GPU of `sm_count` SMs.
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
    let cap = (SPLIT_MAX_CHUNKS_OVER_AVERAGE * working).div_ceil(block_rows);
    let chunks = longest.div_ceil(blocks).min(cap);
    if chunks <= 1 || block_rows.checked_mul(chunks)?.checked_mul(n_tiles)? > i32::MAX as usize {
        return None;
    }
    Some(SplitChoice { chunks: u32::try_from(chunks).ok()?, blocks: u32::try_from(blocks).ok()? })
}

/// Whether the longest of `block_rows` block rows holding `nnzb` blocks (`max_row_blocks`, when known) holds more
/// than four times the mean: a row that sets a launch's time whatever the rest do ([`split_choice`],
/// bs 64's tile of 32).
pub fn rows_skewed((nnzb, block_rows): (usize, usize), max_row_blocks: Option<usize>) -> bool {
    let mean = nnzb.div_ceil(block_rows.max(1));
    max_row_blocks.is_some_and(|l| l > mean.saturating_mul(ROW_SKEW_FACTOR))
}

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
            && longest.saturating_mul(100 * block_rows) >= nnzb.saturating_mul(FLAT_AUTO_MIN_LONGEST_PERCENT_OF_MEAN);
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

/// What a launch takes of a workspace: bytes of partial tiles, counters, and whether the sm_90a tile scheduler's
/// two counters (a captured launch's own workspace: `GraphSpace`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpaceNeed {
    /// Bytes of partial tiles (16-byte aligned at the start).
    pub partials_bytes: u64,
    /// Split-row or flat-list counters (u32), zero before the launch.
    pub counters: u64,
    /// Whether the launch takes the tile scheduler's two counters, zero before it.
    pub scheduler: bool,
}

impl SpaceNeed {
    /// Whether the launch needs a workspace at all.
    pub fn any(&self) -> bool {
        self.partials_bytes > 0 || self.counters > 0 || self.scheduler
    }
}

/// The partial-tile bytes and counters of a split-row launch of `cfg` (`choice`) over `nnzb` blocks in
/// `block_rows` block rows and `n_tiles` N tiles: [`split_slots`] slots, one counter per (row, N tile) (the
/// bounds [`split_choice`] checks against the workspace).
pub fn split_need(
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
pub fn flat_need(cfg: &KernelConfig, g: u32, n_tiles: usize) -> SpaceNeed {
    let per = g as u64 * n_tiles as u64;
    SpaceNeed { partials_bytes: 2 * per * cfg.split_slot_bytes() as u64, counters: per, scheduler: false }
}

/// The partial-tile bytes and counters of an sm_90a launch of `cfg` with split rows `choice` over `n_tiles` N
/// tiles: `split_rows * chunks * n_tiles` slots, `split_rows * n_tiles * tile warps` counters
/// ([`hopper_split_choice`]'s bounds).
pub fn hopper_need(cfg: &KernelConfig, choice: HopperSplit, n_tiles: usize) -> SpaceNeed {
    let tiles = choice.split_rows as u64 * n_tiles as u64;
    SpaceNeed {
        partials_bytes: tiles * choice.chunks as u64 * cfg.split_slot_bytes() as u64,
        counters: tiles * (cfg.warps_m * cfg.warps_n) as u64,
        scheduler: false,
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
