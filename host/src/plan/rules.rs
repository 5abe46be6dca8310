//! Every threshold the planner decides by, in one place: each a constant with the measurement that set it, and
//! all of them as data ([`RULES`]) so a document and `sparsek plan --rules` can print them and a test can check a
//! document against them. The rule functions that use them are in `plan/split.rs` and `plan/family.rs`.
//!
//! The layout crate keeps the column limits its kernels and variant table compile against
//! ([`sparsek_layout::NARROW_MAX_N`], [`sparsek_layout::MID_MIN_N`], [`sparsek_layout::MID64_MIN_N`],
//! [`sparsek_layout::DECODE_MAX_N`], [`sparsek_layout::SHORT_ROW_MAX_K_TILES`]); the table lists them too, with the
//! decision each makes here.

#[cfg(doc)]
use super::{RowSplit, flat_auto_serves};

/// At bs 128 and up to 64 columns, the fewest nonzero blocks per SM for which the mid family takes its tile of 64
/// columns (one N tile, rows split) rather than two tiles of 32 ([`plan`](super::plan) shows the choice). Measured
/// on an H200 (docs/perf-notes.md, issue 12 step 19): at 64 columns the tile of 64 was 1.15x faster on 16384 x
/// 16384 at 22% (27 blocks per SM), 1.12x at 10% (12) and 1.09x on 8192 x 8192 at 22% (6.8), but 1.10x slower at
/// 10% (3.1); on eight more shapes from 4.3 to 27 blocks per SM 1.04-1.37x faster.
pub const MID64_BS128_MIN_BLOCKS_PER_SM: usize = 4;

/// At bs 16 and 32, the fewest block rows per SM for which the built-in heuristic takes the mid tile (BN 32) for 17
/// to 64 columns instead of the narrow tile (BN 16), and for small grids. Measured on an H200 (docs/perf-notes.md,
/// issue 12 step 21): at bs 32 on 16384 x 16384 (512 block rows, 3.9 per SM) the mid tile was 1.10-1.78x faster at
/// 32 to 64 columns; on 8192 x 8192 (256 rows) 1.08-1.10x faster at 64 columns but 1.5% slower at 32 and 6% at 48,
/// on 4096 x 4096 3% slower at 64, and on small grids of 12 block rows at 512 columns 5-6% slower. At bs 16 on 16384
/// x 16384 (1024 rows) 1.06-2.05x faster at 32 to 64 columns; on 8192 x 8192 (512 rows) level to 1.19x faster at 32
/// and 64 columns, 6.5% slower at 48.
pub const MID_SMALL_BS_MIN_ROWS_PER_SM: usize = 3;

/// The most columns for which the small-grid rule moves a launch to the mid or narrow tile: the widest
/// shape measured (docs/perf-notes.md, issue 12 step 8), and the widest the tuner offers those tiles for.
pub const SMALL_GRID_MAX_N: usize = 512;

/// The bytes of A's values in a block row from which the built-in heuristic leaves few columns to the narrow tile's
/// split rows rather than the decode kernels (the decode rule): 256 KiB, two parts of
/// [`SPLIT_PART_BYTES`]. The decode kernels give a row to `bs / 16` CTAs, each reading the whole row's
/// slice; split rows spread a long row over parts of 128 KiB. Measured on an H100 (docs/perf-notes.md, issue 12
/// step 30), queued, decode kernels against the narrow tile: skewed rows (one row holding every block column)
/// 1.18-3.2x faster split (4096 x 4096 and 4096 x 16384 bs 64, 2048 x 16384 bs 64 10%, 8192 x 8192 and 4096 x 8192
/// bs 32; the longest rows 512 KB to 2 MB), uniform 4096 x 16384 bs 64 22% (rows of 448 KB) 1.19x; but the decode
/// kernels 1.1x faster on uniform 8192 x 8192 bs 32 (112 KB rows) and 4-35% on skewed layers (1536 x 384 bs 32 and
/// 384 x 1536 bs 64 at 50%, longest rows 24 and 192 KB).
pub const DECODE_MAX_ROW_BYTES: usize = 256 << 10;

/// Bytes of partial tiles a `Gpu` allocates for split rows: enough for 8192 x 8192 at bs 64 and 64 columns
/// (four N tiles) with parts of 8 blocks (9.4 MB), or 16384 x 16384 at 16 columns (8.4 MB); a launch that needs
/// more gets longer parts.
pub const SPLIT_PARTIALS_BYTES: usize = 16 << 20;

/// Counters a `Gpu` allocates for split rows: one per (block row, N tile) of a launch.
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

/// The sm_90a kernels' split parts hold at least this many k-tiles: a shorter part's hand-over (its f32 tile stored,
/// counted in and, for the last, every part's read back) costs more than its main loop saves (H100, 2026-11-26:
/// parts of 16 k-tiles made 8192 x 256 x 8192 bs 128 22% skewed 6-14% slower; docs/perf-notes.md, "Hopper" step 19).
pub const HOPPER_SPLIT_MIN_PART_K_TILES: usize = 32;

/// The CTAs per SM of a flat block-list launch that [`RowSplit::Auto`] takes (`flat_auto_serves`): 264 on an
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
/// [`RowSplit::Auto`] to take the flat block list on bs 64's tiles of 32 and 64 columns (`flat_auto_serves`):
/// what the list itself costs (its start, the cut rows' hand-over, twice the CTAs). Measured on an H200
/// (docs/perf-notes.md, issue 12 steps 25 and 26), the list against whole rows at 40-64 columns: 8192 x 8192 at 10%
/// (the busiest SM's row about 22 k-tiles, an equal share 12.4) 5% slower, at 22% (42 against 27) 8% faster; 4096 x
/// 4096 at 10% (13 against 3.1) 33% slower, at 22% (23 against 6.8) 5% faster; at 17-32 columns 8192 x 8192 at 10%
/// 2% slower, at 22% 17% faster.
pub const FLAT_MID_AUTO_MARGIN_K_TILES: usize = 12;

/// The fewest k-tiles per CTA (of [`FLAT_AUTO_CTAS_PER_SM`] per SM) for which [`RowSplit::Auto`] takes the flat
/// block list on bs 64's tiles of 32 and 64 columns (`flat_auto_serves`): below, every row is cut into pieces
/// of about one block and the hand-overs cost more than the balance gains (1024 x 64 x 4096 bs 64 25%, one block a
/// CTA: 11% slower queued).
pub const FLAT_MID_AUTO_MIN_K_TILES_PER_CTA: usize = 3;

/// A small grid ([`SMALL_GRID_MAX_N`]) has at most this many tiles of the kernel that would serve it otherwise for
/// every four SMs. Measured on an H200 (docs/perf-notes.md, issue 12 step 8): at 6 to 96 such tiles (132 SMs) the
/// narrow or mid tile was 1.12-1.75x faster in 19 of 20 cases; at 128 tiles the sm_90a kernel was 1.3-1.6x faster.
pub const SMALL_GRID_MAX_TILES_PER_4_SMS: usize = 3;

/// A small grid takes the mid tile where its grid has at least one CTA for every this many SMs (else the narrow
/// tile): half the SMs, the tuner's pick between the two on the 31 shapes of docs/perf-notes.md, issue 12 step 8
/// (H200).
pub const MID_SMALL_GRID_SMS_PER_CTA: usize = 2;

/// The most block rows per two SMs for which the built-in heuristic takes the decode kernels at bs 32 (2x the SMs).
/// Measured on an H100 (docs/perf-notes.md "Tuned plans"): the decode kernels won 1.04-1.5x from 12 to 256 block
/// rows.
pub const DECODE_BS32_MAX_ROWS_PER_2_SMS: usize = 4;

/// The most block rows per two SMs for which the built-in heuristic takes the decode kernels at bs 64 (half the
/// SMs). Measured on an H100 (docs/perf-notes.md "Tuned plans"): 1.07-1.19x from 24 to 64 block rows, level at 96
/// and 128. At bs 128 (four warps per CTA) the narrow tile was 1.0-1.22x faster from 4 block rows up: never there.
pub const DECODE_BS64_MAX_ROWS_PER_2_SMS: usize = 1;

/// The most columns for which the tuner measures the decode kernels: beyond, their N tiles of 16 re-read A too
/// often to win (the tuner's candidates since docs/perf-notes.md "Tuned plans").
pub const TUNE_DECODE_MAX_N: usize = 64;

/// A block row dominates when it holds more than this many times the mean row ([`rows_skewed`]). The rule's form,
/// not measured at other factors; the skewed layers it was set with exceed it: docs/perf-notes.md "Step 5" (split
/// 2.35x faster at 8192 x 8192, 16 columns, H200), issue 12 steps 28 (the tile of 32) and 29 (graphs, H100).
///
/// [`rows_skewed`]: super::split::rows_skewed
pub const ROW_SKEW_FACTOR: usize = 4;

/// Split rows launch at most this many times the parts the average row needs as CTAs per row, so a skewed A does
/// not launch mostly idle CTAs (set with split rows, docs/perf-notes.md "Step 5"; not measured on its own).
pub const SPLIT_MAX_CHUNKS_OVER_AVERAGE: usize = 8;

/// The sm_90a kernels split a row when its tile holds more than this many equal shares of the launch's blocks
/// (docs/perf-notes.md "Hopper" step 19, H100, 2026-11-26; the rule's form, not measured at other factors).
pub const HOPPER_SPLIT_MIN_SHARES: usize = 2;

/// The flat block list on the narrow tiles needs a longest row at least this percent of the mean (15% over it):
/// on rows of equal length, where every row is cut in two, it measured 4-6% slower than whole rows (H200,
/// docs/perf-notes.md, issue 12 step 24).
pub const FLAT_AUTO_MIN_LONGEST_PERCENT_OF_MEAN: usize = 115;

/// Rasterization groups only from this block size: grouping measured +5% (bs 128) and +13% (bs 64, skewed rows)
/// but -2% (bs 32) and up to -11% (bs 16) on an H100 (docs/perf-notes.md, step 3).
pub const RASTER_MIN_BS: usize = 64;

/// The plain row order is kept where A and a wave's B strips fit in one part in this many of L2 (half of it: the
/// working-set model's margin, not measured at other fractions; the groups themselves: docs/perf-notes.md, step 3).
pub const RASTER_PLAIN_L2_FRACTION: u64 = 2;

/// A's values are marked evict-first only from one part in this many of L2 (an eighth). Measured on an H200
/// (docs/perf-notes.md, issue 12 step 13): the decode launches' own time 5-12% shorter from 13.5 MB of A on; on
/// layers of under 1 MB, 0.1-0.2 us longer (the window's cost per launch).
pub const A_WINDOW_MIN_L2_FRACTION: u64 = 8;

/// One threshold of the planner: its name (the constant's), value and unit, what it decides, and the measurement
/// that set it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The constant's name.
    pub name: &'static str,
    /// Its value.
    pub value: u64,
    /// The unit of `value`.
    pub unit: &'static str,
    /// What it decides.
    pub decides: &'static str,
    /// The device and the docs/perf-notes.md section of the measurement that set it.
    pub measured: &'static str,
}

const fn rule(
    name: &'static str,
    value: usize,
    unit: &'static str,
    decides: &'static str,
    measured: &'static str,
) -> Rule {
    Rule { name, value: value as u64, unit, decides, measured }
}

/// Every threshold of the planner, in the order a launch meets them: the kernel family, then the work
/// decomposition, then the launch's order and attributes.
pub static RULES: &[Rule] = &[
    rule(
        "DECODE_MAX_N",
        sparsek_layout::DECODE_MAX_N,
        "columns",
        "the most columns the decode kernels serve (layout: the kernels' own limit)",
        "layout/src/config.rs",
    ),
    rule(
        "DECODE_BS32_MAX_ROWS_PER_2_SMS",
        DECODE_BS32_MAX_ROWS_PER_2_SMS,
        "block rows per 2 SMs",
        "the most block rows for the decode kernels at bs 32",
        "H100, docs/perf-notes.md \"Tuned plans\"",
    ),
    rule(
        "DECODE_BS64_MAX_ROWS_PER_2_SMS",
        DECODE_BS64_MAX_ROWS_PER_2_SMS,
        "block rows per 2 SMs",
        "the most block rows for the decode kernels at bs 64 (bs 128: none)",
        "H100, docs/perf-notes.md \"Tuned plans\"",
    ),
    rule(
        "DECODE_MAX_ROW_BYTES",
        DECODE_MAX_ROW_BYTES,
        "bytes",
        "a row this long goes to the narrow tile's split rows instead of the decode kernels",
        "H100, docs/perf-notes.md issue 12 step 30",
    ),
    rule(
        "NARROW_MAX_N",
        sparsek_layout::NARROW_MAX_N,
        "columns",
        "the most columns of the narrow and mid tiles (decode launches); above, sm_90a or the wide tile",
        "layout/src/config.rs: narrow tile 1.7-3.1x faster than wide up to 64 columns",
    ),
    rule(
        "MID_MIN_N",
        sparsek_layout::MID_MIN_N,
        "columns",
        "the fewest columns for the mid tile (BN 32)",
        "layout/src/config.rs: below, the narrow tile's 16 columns suffice",
    ),
    rule(
        "MID64_MIN_N",
        sparsek_layout::MID64_MIN_N,
        "columns",
        "the fewest columns for the mid tile of 64",
        "layout/src/config.rs: up to 32, one tile of 32 suffices",
    ),
    rule(
        "MID64_BS128_MIN_BLOCKS_PER_SM",
        MID64_BS128_MIN_BLOCKS_PER_SM,
        "blocks per SM",
        "bs 128 at up to 64 columns: the mid tile of 64 rather than two tiles of 32",
        "H200, docs/perf-notes.md issue 12 step 19",
    ),
    rule(
        "MID_SMALL_BS_MIN_ROWS_PER_SM",
        MID_SMALL_BS_MIN_ROWS_PER_SM,
        "block rows per SM",
        "bs 16 and 32: the mid tile rather than the narrow tile",
        "H200, docs/perf-notes.md issue 12 step 21",
    ),
    rule(
        "SMALL_GRID_MAX_N",
        SMALL_GRID_MAX_N,
        "columns",
        "the most columns for which a small grid takes the mid or narrow tile (and the tuner measures them)",
        "H200, docs/perf-notes.md issue 12 step 8",
    ),
    rule(
        "SMALL_GRID_MAX_TILES_PER_4_SMS",
        SMALL_GRID_MAX_TILES_PER_4_SMS,
        "tiles per 4 SMs",
        "a small grid: at most this many sm_90a or wide tiles",
        "H200, docs/perf-notes.md issue 12 step 8",
    ),
    rule(
        "MID_SMALL_GRID_SMS_PER_CTA",
        MID_SMALL_GRID_SMS_PER_CTA,
        "SMs per CTA",
        "a small grid takes the mid tile where it has a CTA per this many SMs, else the narrow tile",
        "H200, docs/perf-notes.md issue 12 step 8",
    ),
    rule(
        "SHORT_ROW_MAX_K_TILES",
        sparsek_layout::SHORT_ROW_MAX_K_TILES,
        "k-tiles per block row",
        "the sm_90a short-row kernel for rows this short on average",
        "H200, docs/perf-notes.md \"Hopper\" steps 12 and 17 (layout/src/config.rs)",
    ),
    rule(
        "TUNE_DECODE_MAX_N",
        TUNE_DECODE_MAX_N,
        "columns",
        "the most columns the tuner measures the decode kernels at",
        "docs/perf-notes.md \"Tuned plans\"",
    ),
    rule(
        "ROW_SKEW_FACTOR",
        ROW_SKEW_FACTOR,
        "x the mean row",
        "a row dominates (split rows on several N tiles, bs 64's tile of 32, graph balance)",
        "the rule's form; the skewed layers of docs/perf-notes.md \"Step 5\", issue 12 steps 28-29 exceed it",
    ),
    rule(
        "SPLIT_PARTIALS_BYTES",
        SPLIT_PARTIALS_BYTES,
        "bytes",
        "the workspace's partial tiles (bounds every split)",
        "sized for 8192 x 8192 bs 64 at 64 columns, parts of 8 blocks",
    ),
    rule(
        "SPLIT_COUNTERS",
        SPLIT_COUNTERS,
        "counters",
        "the workspace's counters (bounds every split)",
        "one per (block row, N tile)",
    ),
    rule(
        "SPLIT_PART_BYTES",
        SPLIT_PART_BYTES,
        "bytes",
        "the bytes of A a split-row part holds",
        "H200, docs/perf-notes.md \"Step 4\"",
    ),
    rule(
        "SPLIT_PART_SHORT_K_TILES",
        SPLIT_PART_SHORT_K_TILES as usize,
        "k-tiles",
        "a part shorter than this grows toward one part per SM",
        "H200, docs/perf-notes.md issue 12 step 10",
    ),
    rule(
        "SPLIT_PART_MAX_GROWN_K_TILES",
        SPLIT_PART_MAX_GROWN_K_TILES as usize,
        "k-tiles",
        "the most a grown part holds",
        "H200, docs/perf-notes.md issue 12 step 10",
    ),
    rule(
        "SPLIT_MAX_CHUNKS_OVER_AVERAGE",
        SPLIT_MAX_CHUNKS_OVER_AVERAGE,
        "x the average row's parts",
        "the most CTAs per row of split rows",
        "docs/perf-notes.md \"Step 5\" (not measured on its own)",
    ),
    rule(
        "HOPPER_SPLIT_MIN_PART_K_TILES",
        HOPPER_SPLIT_MIN_PART_K_TILES,
        "k-tiles",
        "the shortest sm_90a split part",
        "H100, docs/perf-notes.md \"Hopper\" step 19",
    ),
    rule(
        "HOPPER_SPLIT_MIN_SHARES",
        HOPPER_SPLIT_MIN_SHARES,
        "equal shares",
        "an sm_90a row is split when longer than this many equal shares",
        "H100, docs/perf-notes.md \"Hopper\" step 19 (the rule's form)",
    ),
    rule(
        "FLAT_AUTO_CTAS_PER_SM",
        FLAT_AUTO_CTAS_PER_SM as usize,
        "CTAs per SM",
        "the flat block list's grid",
        "H200, docs/perf-notes.md issue 12 step 24",
    ),
    rule(
        "FLAT_AUTO_MIN_K_TILES_PER_CTA",
        FLAT_AUTO_MIN_K_TILES_PER_CTA,
        "k-tiles of 64 rows per CTA",
        "the flat block list on the narrow tiles",
        "H200, docs/perf-notes.md issue 12 steps 24 and 27",
    ),
    rule(
        "FLAT_AUTO_MIN_LONGEST_PERCENT_OF_MEAN",
        FLAT_AUTO_MIN_LONGEST_PERCENT_OF_MEAN,
        "% of the mean row",
        "the flat block list on the narrow tiles needs rows of unequal length",
        "H200, docs/perf-notes.md issue 12 step 24",
    ),
    rule(
        "FLAT_MID_AUTO_MARGIN_K_TILES",
        FLAT_MID_AUTO_MARGIN_K_TILES,
        "k-tiles",
        "the flat block list on bs 64's tiles of 32 and 64: the busiest SM's excess over an equal share",
        "H200, docs/perf-notes.md issue 12 steps 25 and 26",
    ),
    rule(
        "FLAT_MID_AUTO_MIN_K_TILES_PER_CTA",
        FLAT_MID_AUTO_MIN_K_TILES_PER_CTA,
        "k-tiles per CTA",
        "the flat block list on bs 64's tiles of 32 and 64",
        "1024 x 64 x 4096 bs 64 25%: 11% slower queued",
    ),
    rule(
        "RASTER_MIN_BS",
        RASTER_MIN_BS,
        "block size",
        "rasterization groups from this block size",
        "H100, docs/perf-notes.md step 3",
    ),
    rule(
        "RASTER_PLAIN_L2_FRACTION",
        RASTER_PLAIN_L2_FRACTION as usize,
        "1/x of L2",
        "plain row order where A and a wave's B strips fit in this part of L2",
        "the working-set model's margin (not measured at other fractions)",
    ),
    rule(
        "A_WINDOW_MIN_L2_FRACTION",
        A_WINDOW_MIN_L2_FRACTION as usize,
        "1/x of L2",
        "A evict-first in L2 from this part of L2",
        "H200, docs/perf-notes.md issue 12 step 13",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_is_named_once_cites_a_source_and_says_what_it_decides() {
        let mut names: Vec<_> = RULES.iter().map(|r| r.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "a rule is listed twice");
        for r in RULES {
            assert!(!r.decides.is_empty() && !r.measured.is_empty() && !r.unit.is_empty(), "{r:?}");
        }
        // The table holds the constants' own values (a spot check of each kind).
        let value = |name| RULES.iter().find(|r| r.name == name).map(|r| r.value);
        assert_eq!(value("SPLIT_PART_BYTES"), Some(128 << 10));
        assert_eq!(value("NARROW_MAX_N"), Some(sparsek_layout::NARROW_MAX_N as u64));
        assert_eq!(value("FLAT_AUTO_CTAS_PER_SM"), Some(u64::from(FLAT_AUTO_CTAS_PER_SM)));
    }

    /// No threshold constant of the planner is missing from the table: every `pub const` of this file is a row.
    #[test]
    fn every_constant_of_this_file_is_in_the_table() {
        let source = include_str!("rules.rs");
        for line in source.lines() {
            let Some(rest) = line.strip_prefix("pub const ") else { continue };
            let name = rest.split(':').next().unwrap_or_default();
            assert!(RULES.iter().any(|r| r.name == name), "{name} is not in RULES");
        }
    }
}
