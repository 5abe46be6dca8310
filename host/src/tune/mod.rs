//! Plans: which kernel serves a product and how it is launched, chosen by a built-in heuristic or by measuring
//! every applicable kernel on the caller's matrix ([`Gpu::tune`](crate::gpu::Gpu::tune)) and remembered in a
//! [`PlanCache`] file.
//!
//! A [`Plan`] names a [`KernelFamily`] (the decode kernels, the narrow or the wide N tile of the portable module,
//! or the sm_90a kernels) and the rasterization group of its launch; the family fixes the tile shape and the
//! pipeline depth (its `KernelConfig`; [`Gpu::plan`](crate::gpu::Gpu::plan) shows the kernel a launch runs). Plans
//! are keyed by a [`PlanKey`]: the element types and layouts, the block size, M, K, and buckets of N, of the
//! nonzero block count and of the longest-row / mean-row ratio. The cache file holds them per device, driver and
//! PTX module build ([`DeviceKey`]), so a plan measured on one GPU or build never serves another.
//!
//! Looking a plan up is a hash-map read under a read lock (no allocation, no system call): it runs on every
//! launch, [`Gpu::spmm_raw`](crate::gpu::Gpu::spmm_raw) included.

mod cache;

use std::fmt;

use crate::plan::{RowSplit, TileSchedule};

pub use cache::{CacheContents, CachedPlan, PlanCache, PlanEntry};
pub use sparsek_layout::{InType, Layout, OutType};

/// A family of kernels: one entry point per block size and type combination, all with the same tile scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KernelFamily {
    /// The decode kernels (bs 32, 64, 128): a CTA per 16-row slice of a block row, its warps splitting the row's
    /// blocks, A loaded straight into registers. Made for few columns on few block rows; any N works.
    Decode,
    /// The portable module's narrow N tile (BN 16, cp.async pipeline). Made for N up to 64; any N works.
    Narrow,
    /// The portable module's mid N tiles (cp.async pipeline; bs 64 and 128): BN 32, and at bs 64 BN 64 from 33
    /// columns. Made for 17 to 64 columns; any N works.
    Mid,
    /// The portable module's wide N tile (cp.async pipeline, BN 64 or 128).
    Wide,
    /// The sm_90a module's TMA + wgmma kernels (bs 64 and 128 on H100 / H200, at least one block).
    Hopper,
    /// The sm_90a module's kernel for short rows (bs 64, f32 C): the [`KernelFamily::Hopper`] kernel with one ring
    /// stage fewer and two output staging buffers per consumer warpgroup. Made for rows of few k-tiles
    /// ([`sparsek_layout::SHORT_ROW_MAX_K_TILES`] on average); any shape works.
    HopperShort,
}

impl KernelFamily {
    /// Every family, in the order the tuner measures them.
    pub const ALL: [KernelFamily; 6] = [
        KernelFamily::Decode,
        KernelFamily::Narrow,
        KernelFamily::Mid,
        KernelFamily::Wide,
        KernelFamily::Hopper,
        KernelFamily::HopperShort,
    ];

    /// "decode", "narrow", "mid", "wide", "sm90a" or "sm90a-short" (the cache file's spelling).
    pub const fn name(self) -> &'static str {
        match self {
            KernelFamily::Decode => "decode",
            KernelFamily::Narrow => "narrow",
            KernelFamily::Mid => "mid",
            KernelFamily::Wide => "wide",
            KernelFamily::Hopper => "sm90a",
            KernelFamily::HopperShort => "sm90a-short",
        }
    }

    /// The family named `s` ([`KernelFamily::name`]).
    pub fn parse(s: &str) -> Option<KernelFamily> {
        KernelFamily::ALL.into_iter().find(|f| f.name() == s)
    }
}

impl fmt::Display for KernelFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How one product is launched: the kernel family, the rasterization group, and the work decomposition the tuner
/// measured (else the planner's rules).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Plan {
    /// Which kernels.
    pub family: KernelFamily,
    /// Block rows per rasterization group (the CTAs of a group walk its block rows before the next N tile, so a
    /// wave's A rows and B strips stay in L2): `None` lets the launcher size it from L2 and occupancy, `Some(r)`
    /// fixes it (`r >= 1`; `r` at or above the block-row count is plain row-fastest order). The decode kernels
    /// have no groups and ignore it.
    pub group_rows: Option<u32>,
    /// How rows are split: [`RowSplit::Auto`] the planner's rules; [`RowSplit::Off`] whole rows,
    /// [`RowSplit::Blocks`] split rows, [`RowSplit::Flat`] the flat block list, where the kernel can (elsewhere the
    /// rules'). A `Gpu` whose policy fixes the row split keeps its own.
    pub row_split: RowSplit,
    /// How the sm_90a kernels take their tiles: [`TileSchedule::Auto`] the planner's rules (the tile counter where
    /// the stream can have it), [`TileSchedule::PerTile`] one tile per consumer set. A `Gpu` whose policy fixes the
    /// schedule keeps its own.
    pub tile_schedule: TileSchedule,
}

impl Plan {
    /// `family` with the launcher's rasterization groups and decomposition.
    pub const fn new(family: KernelFamily) -> Plan {
        Plan { family, group_rows: None, row_split: RowSplit::Auto, tile_schedule: TileSchedule::Auto }
    }

    /// The same plan with the work decomposition `row_split` and `tile_schedule`.
    pub const fn with_decomposition(self, row_split: RowSplit, tile_schedule: TileSchedule) -> Plan {
        Plan { row_split, tile_schedule, ..self }
    }

    /// The row split written as in the cache file: "auto", "whole", "rows-B" (parts of B blocks) or "flat-C" (C
    /// CTAs per SM).
    pub fn row_split_name(&self) -> String {
        match self.row_split {
            RowSplit::Auto => "auto".into(),
            RowSplit::Off => "whole".into(),
            RowSplit::Blocks(b) => format!("rows-{b}"),
            RowSplit::Flat(c) => format!("flat-{c}"),
        }
    }

    /// The tile schedule written as in the cache file: "auto", "per-tile" or "static".
    pub fn tile_schedule_name(&self) -> &'static str {
        match self.tile_schedule {
            TileSchedule::Auto => "auto",
            TileSchedule::PerTile => "per-tile",
            TileSchedule::Static => "static",
        }
    }

    /// [`Plan::row_split_name`]'s inverse.
    pub fn parse_row_split(s: &str) -> Option<RowSplit> {
        let number = |p: &str| s.strip_prefix(p).and_then(|n| n.parse::<u32>().ok());
        match s {
            "auto" => Some(RowSplit::Auto),
            "whole" => Some(RowSplit::Off),
            _ => {
                number("rows-").filter(|&b| b > 0).map(RowSplit::Blocks).or_else(|| number("flat-").map(RowSplit::Flat))
            }
        }
    }

    /// [`Plan::tile_schedule_name`]'s inverse.
    pub fn parse_tile_schedule(s: &str) -> Option<TileSchedule> {
        [TileSchedule::Auto, TileSchedule::PerTile, TileSchedule::Static]
            .into_iter()
            .find(|&t| Plan { tile_schedule: t, ..Plan::new(KernelFamily::Wide) }.tile_schedule_name() == s)
    }

    /// The same plan with `group_rows` block rows per rasterization group (`None`: the launcher's choice).
    pub const fn with_group_rows(self, group_rows: Option<u32>) -> Plan {
        Plan { group_rows, ..self }
    }

    /// The group written as in the cache file: "auto" or the number of block rows.
    pub fn group_name(&self) -> String {
        match self.group_rows {
            None => "auto".into(),
            Some(r) => r.to_string(),
        }
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.family, self.group_rows) {
            (KernelFamily::Decode, _) | (_, None) => write!(f, "{}", self.family),
            (family, Some(r)) => write!(f, "{family} (groups of {r} block rows)"),
        }?;
        match self.row_split {
            RowSplit::Auto => {}
            RowSplit::Off => write!(f, ", whole rows")?,
            RowSplit::Blocks(b) => write!(f, ", split rows of {b} blocks")?,
            RowSplit::Flat(c) => write!(f, ", flat list of {c} CTAs per SM")?,
        }
        match self.tile_schedule {
            TileSchedule::Auto => Ok(()),
            TileSchedule::PerTile => write!(f, ", a tile per CTA"),
            TileSchedule::Static => write!(f, ", static tiles"),
        }
    }
}

/// Where a launch's plan came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanSource {
    /// The built-in heuristic (nothing cached for the key, or the cache is off).
    Heuristic,
    /// A tuned plan from the cache (or tuned in this process).
    Tuned,
}

/// The problem a plan is for, as far as it changes which kernel is fastest. Exact in the element types, layouts,
/// block size, M and K; bucketed in N (the next power of two), in the nonzero block count (quarter octaves) and in
/// the longest-row / mean-row ratio (half octaves; 0 when unknown, as for [`BsrView`](crate::gpu::BsrView)s,
/// whose row lengths live on the device).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PlanKey {
    /// A's and B's element type.
    pub input: InType,
    /// B's storage order.
    pub b_layout: Layout,
    /// C's element type.
    pub out: OutType,
    /// C's storage order.
    pub c_layout: Layout,
    /// Block size.
    pub bs: u32,
    /// Rows of A and C.
    pub m: u64,
    /// Columns of A, rows of B.
    pub k: u64,
    /// [`PlanKey::n_bucket`] of N.
    pub n_bucket: u64,
    /// [`PlanKey::nnzb_bucket`] of the nonzero block count.
    pub nnzb_bucket: u32,
    /// [`PlanKey::skew_bucket`] of the row lengths.
    pub skew_bucket: u32,
}

impl PlanKey {
    /// The fields in order, for sorting (the cache file and `sparsek tune --show` list keys sorted).
    fn ordered(&self) -> (u8, u8, u8, u8, u32, u64, u64, u64, u32, u32) {
        (
            self.input as u8,
            self.b_layout as u8,
            self.out as u8,
            self.c_layout as u8,
            self.bs,
            self.m,
            self.k,
            self.n_bucket,
            self.nnzb_bucket,
            self.skew_bucket,
        )
    }
}

impl PartialOrd for PlanKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for PlanKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.ordered().cmp(&other.ordered())
    }
}

/// The element types and layouts of a product: (inputs, B's order, output, C's order).
pub type ProductTypes = (InType, Layout, OutType, Layout);

impl PlanKey {
    /// The key of a product of an `m x k` A with blocks of `bs`, `nnzb` of them, the longest block row holding
    /// `max_row_blocks` (`None` when unknown), times a `k x n` B.
    pub fn new(
        (input, b_layout, out, c_layout): ProductTypes,
        bs: usize,
        (m, k, n): (usize, usize, usize),
        nnzb: usize,
        max_row_blocks: Option<usize>,
    ) -> PlanKey {
        let block_rows = m.checked_div(bs).unwrap_or(0);
        PlanKey {
            input,
            b_layout,
            out,
            c_layout,
            bs: bs.min(u32::MAX as usize) as u32,
            m: m as u64,
            k: k as u64,
            n_bucket: Self::n_bucket(n),
            nnzb_bucket: Self::nnzb_bucket(nnzb),
            skew_bucket: max_row_blocks.map_or(0, |max| Self::skew_bucket(max, nnzb, block_rows)),
        }
    }

    /// N rounded up to a power of two (0 stays 0): 1, 2, 4, ..., 16, 32, 64, ...
    pub fn n_bucket(n: usize) -> u64 {
        if n == 0 { 0 } else { (n as u64).checked_next_power_of_two().unwrap_or(u64::MAX) }
    }

    /// 0 for no blocks, else `1 + floor(4 * log2(nnzb))`: buckets a quarter octave wide (about 19%).
    pub fn nnzb_bucket(nnzb: usize) -> u32 {
        if nnzb == 0 { 0 } else { 1 + (4.0 * (nnzb as f64).log2()).floor() as u32 }
    }

    /// 1 + floor(2 * log2(longest row / mean row)), at most 40: 1 for even rows, 2 from a ratio of 1.41, 3 from
    /// 2, ... (0 is kept for "unknown").
    pub fn skew_bucket(max_row_blocks: usize, nnzb: usize, block_rows: usize) -> u32 {
        if nnzb == 0 || block_rows == 0 {
            return 1;
        }
        let ratio = (max_row_blocks as f64) * (block_rows as f64) / (nnzb as f64);
        1 + (2.0 * ratio.max(1.0).log2()).floor().min(39.0) as u32
    }

    /// The names of A's element type, B's layout, C's type and C's layout, in that order (the key's display and the
    /// cache file's line both show them so).
    pub(crate) fn type_names(&self) -> [&'static str; 4] {
        [self.input.name(), self.b_layout.name(), self.out.name(), self.c_layout.name()]
    }
}

impl fmt::Display for PlanKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [input, b_layout, out, c_layout] = self.type_names();
        write!(
            f,
            "{}x{} bs{} N<={} {input} B {b_layout} {out} C {c_layout} nnzb~2^{:.2} skew {}",
            self.m,
            self.k,
            self.bs,
            self.n_bucket,
            f64::from(self.nnzb_bucket.saturating_sub(1)) / 4.0,
            if self.skew_bucket == 0 { "unknown".to_string() } else { self.skew_bucket.to_string() }
        )
    }
}

/// The GPU and build a plan was measured with: the cache file keeps plans per device name, compute capability,
/// driver version and hash of the PTX modules in use, and a [`Gpu`](crate::gpu::Gpu) reads only its own.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceKey {
    /// Device name, e.g. "NVIDIA H100 80GB HBM3" (tabs and line breaks replaced by spaces).
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Driver version, e.g. 13000.
    pub driver_version: i32,
    /// The loaded PTX modules and their FNV-1a 64 hashes, e.g. "sm80:c803521177bb51ad+sm90a:9d45bd550b941dbc".
    pub modules: String,
}

impl DeviceKey {
    /// A key with `name` and `modules` made safe for the tab-separated file: tabs and line breaks become spaces,
    /// leading `#`s (a comment to the reader) and surrounding spaces are dropped. (The fields are public: a key
    /// built otherwise is checked when saved, [`PlanCache::save`](crate::tune::PlanCache::save).)
    pub fn new(name: &str, compute_capability: (i32, i32), driver_version: i32, modules: &str) -> DeviceKey {
        let clean = |s: &str| s.replace(['\t', '\n', '\r'], " ").trim().trim_start_matches('#').trim().to_string();
        DeviceKey { name: clean(name), compute_capability, driver_version, modules: clean(modules) }
    }
}

impl fmt::Display for DeviceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (major, minor) = self.compute_capability;
        write!(f, "{} (sm_{major}{minor}, driver {}, {})", self.name, self.driver_version, self.modules)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets() {
        assert_eq!([0, 1, 2, 3, 16, 17, 64, 65].map(PlanKey::n_bucket), [0, 1, 2, 4, 16, 32, 64, 128]);
        assert_eq!(PlanKey::nnzb_bucket(0), 0);
        assert_eq!(PlanKey::nnzb_bucket(1), 1);
        assert_eq!(PlanKey::nnzb_bucket(1024), 41);
        // A quarter octave: 1024 * 2^0.25 = 1217.7.
        assert_eq!(PlanKey::nnzb_bucket(1217), 41);
        assert_eq!(PlanKey::nnzb_bucket(1218), 42);
        // Even rows, twice the mean, far beyond.
        assert_eq!(PlanKey::skew_bucket(10, 1000, 100), 1);
        assert_eq!(PlanKey::skew_bucket(20, 1000, 100), 3);
        assert_eq!(PlanKey::skew_bucket(usize::MAX, 1, 100), 40);
        assert_eq!(PlanKey::skew_bucket(0, 0, 0), 1);
    }

    #[test]
    fn key_of_a_product() {
        let types = (InType::F16, Layout::ColMajor, OutType::F16, Layout::ColMajor);
        let k = PlanKey::new(types, 64, (8192, 4096, 12), 3000, Some(60));
        assert_eq!((k.bs, k.m, k.k, k.n_bucket), (64, 8192, 4096, 16));
        assert_eq!(k.skew_bucket, 1 + (2.0f64 * (60.0 * 128.0 / 3000.0f64).log2()).floor() as u32);
        assert_eq!(PlanKey::new(types, 64, (8192, 4096, 12), 3000, None).skew_bucket, 0);
        // No panic on degenerate shapes.
        let _ = PlanKey::new(types, 0, (0, 0, 0), 0, Some(0));
    }

    #[test]
    fn family_names_round_trip() {
        for f in KernelFamily::ALL {
            assert_eq!(KernelFamily::parse(f.name()), Some(f));
        }
        assert_eq!(KernelFamily::parse("fast"), None);
        assert_eq!(Plan::new(KernelFamily::Wide).with_group_rows(Some(8)).to_string(), "wide (groups of 8 block rows)");
    }
}
