//! The first decision of a launch: which kernel family serves it, from a tuned plan when one is cached and its
//! family can serve, else by the built-in heuristic ([`Room::heuristic_plan`]). Pure: the loaded kernels are the
//! [`DeviceFacts`] catalog, the settings a [`Policy`].

use sparsek_layout::{InType, Layout, Op, OutType, Tile};

use super::rules::*;
use super::{DeviceFacts, KernelRef, Loaded, Policy, RowSplit, SplitLimits};
use crate::tune::{KernelFamily, Plan};

/// A kernel of the catalog: where it is, and what was loaded.
pub(crate) type Found<'a> = (KernelRef, &'a Loaded);

/// The planner's view of one device under one policy.
#[derive(Clone, Copy)]
pub(crate) struct Room<'a> {
    pub(crate) device: &'a DeviceFacts,
    pub(crate) policy: &'a Policy,
}

/// The first kernel of `list` for `op` on blocks of `bs` with `types` (inputs, B's order, output) and N tile `tile`.
pub(crate) fn find(
    list: &[Loaded],
    op: Op,
    bs: u32,
    (input, b_layout, out): (InType, Layout, OutType),
    tile: Tile,
) -> Option<(usize, &Loaded)> {
    list.iter().enumerate().find(|(_, k)| {
        let v = &k.variant;
        v.op == op && v.bs == bs && v.input == input && v.b_layout == b_layout && v.out == out && v.tile == tile
    })
}

impl<'a> Room<'a> {
    /// The SMs launches are planned for: the device's, or fewer under the policy's limit ([`Policy::sm_limit`]).
    pub(crate) fn sms(&self) -> u32 {
        self.policy.sm_limit.map_or(self.device.sm_count, |l| l.get().min(self.device.sm_count))
    }

    /// The split-row workspace's limits on [`Room::sms`] SMs.
    pub(crate) fn limits(&self) -> SplitLimits {
        SplitLimits::with_sms(self.sms() as usize)
    }

    /// The product module's kernel of `tile`.
    pub(crate) fn product(&self, op: Op, bs: u32, types: (InType, Layout, OutType), tile: Tile) -> Option<Found<'a>> {
        find(&self.device.product, op, bs, types, tile).map(|(i, k)| (KernelRef::Product(i), k))
    }

    /// The sm_90a module's kernel of `tile`, when that module is loaded and the policy lets launches use it.
    fn hopper(&self, op: Op, bs: u32, types: (InType, Layout, OutType), tile: Tile) -> Option<Found<'a>> {
        if !self.policy.hopper {
            return None;
        }
        find(&self.device.hopper, op, bs, types, tile).map(|(i, k)| (KernelRef::Hopper(i), k))
    }

    /// The kernel of `family` for blocks of `bs` with `types` (inputs, B's order, output), when this GPU has it
    /// and may use it on `nnzb` blocks and `n` columns: the decode kernels unless the policy turned them off; the
    /// mid family's tile of 64 columns from [`sparsek_layout::MID64_MIN_N`] columns where the block size has one
    /// (at bs 128 and up to [`sparsek_layout::NARROW_MAX_N`] columns only with at least
    /// [`MID64_BS128_MIN_BLOCKS_PER_SM`] blocks per SM), else its tile of 32; the sm_90a ones where that module is
    /// loaded and enabled (the short-row ones unless the policy turned them off), with at least one block (a tensor
    /// map cannot describe none) and `nnzb * bs` below 2^32 (their row coordinates are 32-bit).
    pub(crate) fn family_kernel(
        &self,
        family: KernelFamily,
        op: Op,
        bs: u32,
        types: (InType, Layout, OutType),
        (nnzb, n): (usize, usize),
    ) -> Option<Found<'a>> {
        match family {
            KernelFamily::Decode => self.product(op, bs, types, Tile::Decode).filter(|_| self.policy.decode),
            KernelFamily::Narrow => self.product(op, bs, types, Tile::Narrow),
            KernelFamily::Mid => (n >= sparsek_layout::MID64_MIN_N && self.mid64_serves(bs, n, nnzb))
                .then(|| self.product(op, bs, types, Tile::Mid64))
                .flatten()
                .or_else(|| self.product(op, bs, types, Tile::Mid)),
            KernelFamily::Wide => self.product(op, bs, types, Tile::Wide),
            KernelFamily::Hopper | KernelFamily::HopperShort => {
                let fits = (nnzb as u64).saturating_mul(u64::from(bs)) <= u64::from(u32::MAX);
                let (tile, allowed) = match family {
                    KernelFamily::Hopper => (Tile::Wide, true),
                    _ => (Tile::ShortRows, self.policy.short_rows),
                };
                if !(allowed && nnzb > 0 && fits) {
                    return None;
                }
                self.hopper(op, bs, types, tile)
            }
        }
    }

    fn sm_count(&self) -> usize {
        self.sms() as usize
    }

    /// Whether the mid family may take its tile of 64 columns for `n` columns over `nnzb` blocks of `bs`: always
    /// at bs 64, and at bs 128 above [`sparsek_layout::NARROW_MAX_N`] columns or with at least
    /// [`MID64_BS128_MIN_BLOCKS_PER_SM`] blocks per SM.
    fn mid64_serves(&self, bs: u32, n: usize, nnzb: usize) -> bool {
        bs != 128
            || n > sparsek_layout::NARROW_MAX_N
            || nnzb >= MID64_BS128_MIN_BLOCKS_PER_SM.saturating_mul(self.sm_count())
    }

    /// Whether `block_rows` block rows of `bs` are enough for the built-in heuristic to take the mid tile: always,
    /// except at bs 16 and 32, where it needs at least [`MID_SMALL_BS_MIN_ROWS_PER_SM`] block rows per SM.
    fn mid_rows_suffice(&self, bs: u32, block_rows: usize) -> bool {
        bs > 32 || block_rows >= MID_SMALL_BS_MIN_ROWS_PER_SM.saturating_mul(self.sm_count())
    }

    /// The built-in heuristic (the longest block row holding `max_row_blocks`, when known): the decode kernels where
    /// [`Room::decode_serves`] says so; for a small grid ([`Room::small_grid_serves`]) the mid tile where its grid
    /// has at least one CTA per [`MID_SMALL_GRID_SMS_PER_CTA`] SMs, else the narrow tile (at bs 16 and 32, in both
    /// places, the mid tile only on [`MID_SMALL_BS_MIN_ROWS_PER_SM`] block rows per SM); else the sm_90a ones above
    /// [`sparsek_layout::NARROW_MAX_N`] columns where [`Room::family_kernel`] has them (the short-row kernel where
    /// the block size has one and the rows hold at most [`sparsek_layout::SHORT_ROW_MAX_K_TILES`] k-tiles on
    /// average: `nnzb` over `block_rows`); else the mid tile from [`sparsek_layout::MID_MIN_N`] to `NARROW_MAX_N`
    /// columns and the narrow tile up to `NARROW_MAX_N`, where the block size has one; else the wide tile.
    /// Rasterization groups: the launcher's.
    pub(crate) fn heuristic_plan(
        &self,
        op: Op,
        bs: u32,
        types: (InType, Layout, OutType),
        n: usize,
        nnzb: usize,
        (block_rows, max_row_blocks): (usize, Option<usize>),
    ) -> Option<(Plan, Found<'a>)> {
        let narrow = n <= sparsek_layout::NARROW_MAX_N;
        let small = self.small_grid_serves(bs, types, n, block_rows);
        let min_ctas = self.sm_count().div_ceil(MID_SMALL_GRID_SMS_PER_CTA);
        let mid_rows = self.mid_rows_suffice(bs, block_rows);
        let mid_fills = small
            && mid_rows
            && self
                .family_kernel(KernelFamily::Mid, op, bs, types, (nnzb, n))
                .is_some_and(|(_, k)| block_rows.saturating_mul(n.div_ceil(k.variant.config.bn as usize)) >= min_ctas);
        // Looked up only above NARROW_MAX_N columns, where it can serve (the decode launches skip it). A loaded
        // kernel's BK divides its bs (KernelConfig::check).
        let short_rows = !narrow
            && self.family_kernel(KernelFamily::HopperShort, op, bs, types, (nnzb, n)).is_some_and(|(_, k)| {
                let k_tiles_per_block = (bs / k.variant.config.bk.max(1)) as usize;
                nnzb.saturating_mul(k_tiles_per_block)
                    <= sparsek_layout::SHORT_ROW_MAX_K_TILES.saturating_mul(block_rows)
            });
        let order = [
            (KernelFamily::Decode, self.decode_serves(bs, n, block_rows, max_row_blocks)),
            (KernelFamily::Mid, mid_fills),
            (KernelFamily::Narrow, small),
            (KernelFamily::HopperShort, short_rows),
            (KernelFamily::Hopper, !narrow),
            (KernelFamily::Mid, narrow && n >= sparsek_layout::MID_MIN_N && mid_rows),
            (KernelFamily::Narrow, narrow),
            (KernelFamily::Wide, true),
        ];
        order
            .into_iter()
            .filter(|&(_, wanted)| wanted)
            .find_map(|(f, _)| self.family_kernel(f, op, bs, types, (nnzb, n)).map(|k| (Plan::new(f), k)))
    }

    /// The families a tuner measures for a product of `n` columns over `nnzb` blocks of `bs` with `types`, each
    /// with the kernel that would serve it: every family this GPU has for it, the decode kernels up to
    /// [`TUNE_DECODE_MAX_N`] columns and the narrow and mid tiles up to [`SMALL_GRID_MAX_N`] (beyond, their N tiles
    /// re-read A too often to win).
    pub(crate) fn tune_families(
        &self,
        bs: u32,
        types: (InType, Layout, OutType),
        n: usize,
        nnzb: usize,
    ) -> Vec<(KernelFamily, Found<'a>)> {
        KernelFamily::ALL
            .into_iter()
            .filter(|f| match f {
                KernelFamily::Decode => n <= TUNE_DECODE_MAX_N,
                KernelFamily::Narrow | KernelFamily::Mid => n <= SMALL_GRID_MAX_N,
                KernelFamily::Wide | KernelFamily::Hopper | KernelFamily::HopperShort => true,
            })
            .filter_map(|f| self.family_kernel(f, Op::BsrSpmm, bs, types, (nnzb, n)).map(|k| (f, k)))
            .collect()
    }

    /// Whether the built-in heuristic gives a launch of `n` columns over `block_rows` block rows of `bs` the mid or
    /// narrow tile although it has more than [`sparsek_layout::NARROW_MAX_N`] columns (unless the policy turned
    /// small grids off): at most [`SMALL_GRID_MAX_N`] columns, and at most [`SMALL_GRID_MAX_TILES_PER_4_SMS`] tiles
    /// of the kernel that would serve it otherwise (sm_90a, else the wide tile) for every four SMs. Such a grid
    /// leaves SMs idle while each CTA walks its whole block row; the narrow and mid tiles cut every row into more
    /// CTAs of fewer columns (docs/perf-notes.md, issue 12 step 8).
    pub(crate) fn small_grid_serves(
        &self,
        bs: u32,
        types: (InType, Layout, OutType),
        n: usize,
        block_rows: usize,
    ) -> bool {
        if !self.policy.small_grids || n <= sparsek_layout::NARROW_MAX_N || n > SMALL_GRID_MAX_N {
            return false;
        }
        let op = Op::BsrSpmm;
        let serving = self
            .family_kernel(KernelFamily::Hopper, op, bs, types, (1, n))
            .or_else(|| self.family_kernel(KernelFamily::Wide, op, bs, types, (1, n)));
        serving.is_some_and(|(_, k)| {
            let tiles = block_rows.saturating_mul(n.div_ceil(k.variant.config.bn as usize));
            tiles.saturating_mul(4) <= SMALL_GRID_MAX_TILES_PER_4_SMS * self.sm_count()
        })
    }

    /// Whether the built-in heuristic gives a launch of `n` columns over `block_rows` block rows of `bs` (the
    /// longest holding `max_row_blocks`, when known) the decode kernels (unless the policy turned them off): at
    /// most [`sparsek_layout::DECODE_MAX_N`] columns, at most [`Room::decode_row_limit`] block rows, and no row of
    /// [`DECODE_MAX_ROW_BYTES`] or more where the narrow tile can split it (the workspace exists and the row split
    /// is not [`RowSplit::Off`]).
    pub(crate) fn decode_serves(&self, bs: u32, n: usize, block_rows: usize, max_row_blocks: Option<usize>) -> bool {
        let block_bytes = (bs as usize).pow(2) * 2;
        let long_row = max_row_blocks.is_some_and(|l| l.saturating_mul(block_bytes) >= DECODE_MAX_ROW_BYTES)
            && self.device.workspace
            && self.policy.row_split != RowSplit::Off;
        self.policy.decode && n <= sparsek_layout::DECODE_MAX_N && block_rows <= self.decode_row_limit(bs) && !long_row
    }

    /// The most block rows for which the built-in heuristic takes the decode kernels at few columns
    /// ([`DECODE_BS32_MAX_ROWS_PER_2_SMS`], [`DECODE_BS64_MAX_ROWS_PER_2_SMS`]; at bs 128 none): where the narrow
    /// tile's one CTA per block row leaves SMs idle and the decode kernels' 16-row slices fill them.
    pub(crate) fn decode_row_limit(&self, bs: u32) -> usize {
        let per_2_sms = match bs {
            32 => DECODE_BS32_MAX_ROWS_PER_2_SMS,
            64 => DECODE_BS64_MAX_ROWS_PER_2_SMS,
            _ => 0,
        };
        per_2_sms * self.sm_count() / 2
    }
}
