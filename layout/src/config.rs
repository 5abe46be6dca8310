//! Kernel configurations: [`KernelConfig`] (a kernel's tile shape and pipeline) with its one [`KernelConfig::check`],
//! the configuration tables of every kernel family and the N tiles ([`Tile`]).

use crate::*;

/// The tile shape of one BSR kernel (one block size).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelConfig {
    /// Block size of A.
    pub bs: u32,
    /// Output columns per CTA.
    pub bn: u32,
    /// K depth of a pipeline stage.
    pub bk: u32,
    /// Warps along M.
    pub warps_m: u32,
    /// Warps along N.
    pub warps_n: u32,
    /// Depth of the cp.async ring.
    pub stages: u32,
    /// Double-buffer the mma fragments in registers (needs BK / 16 even and 3+ stages).
    pub frag_db: bool,
    /// [`Pipeline::CpAsync`] with `frag_db` only: groups of `warps_m * warps_n` warps per CTA, each with its own
    /// ring of `stages` slots, taking one contiguous share of the CTA's blocks in step (one CTA barrier per
    /// k-tile); their accumulators are added in group order at the end (the same bits run to run). 1: one group.
    /// Two stream a long row faster: more warps issuing and twice the ring (docs/perf-notes.md, issue 12 step 33).
    pub k_groups: u32,
    /// How stages are loaded and multiplied: the portable cp.async + mma.sync template, or the sm_90a one.
    pub pipeline: Pipeline,
}

/// The kernel template a [`KernelConfig`] describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pipeline {
    /// sm_80 (kernels-gpu/src/bsr.rs): every thread issues 16-byte `cp.async` copies into a ring of `stages`
    /// slots; warps multiply with `ldmatrix` + `mma.sync.m16n8k16` on a (warps_m, warps_n) grid.
    CpAsync,
    /// sm_90a (kernels-gpu/src/sm90.rs): one producer warpgroup (128 threads, one of which issues TMA copies into
    /// an mbarrier full/empty ring of `stages` slots) and `warps_m * warps_n / 4` consumer warpgroups issuing
    /// `wgmma.m64n128k16` or `m64n256k16`. Warp `w` of the consumers is warp `w % 4` of warpgroup `w / 4`;
    /// warpgroups are laid out along M first (`warps_m / 4` of them), so each warp owns 16 rows (`mi() == 1`) and
    /// `bn / warps_n` columns, like the sm_80 warp grid. BK is 64: one 128-byte swizzle row of 16-bit elements.
    ///
    /// `pingpong`: two such sets of consumer warpgroups, each taking every other tile of the CTA (CUTLASS's
    /// "ping-pong" schedule): one set's epilogue runs while the other's wgmmas keep the tensor cores busy. The
    /// CTA then has `2 * warps_m * warps_n / 4` consumer warpgroups.
    TmaWgmma {
        /// Two sets of consumer warpgroups alternating tiles (see above); `false`: one set, every tile.
        pingpong: bool,
    },
    /// sm_80, for few columns (kernels-gpu/src/decode.rs): no shared-memory ring. A CTA owns 16 rows (a slice) of
    /// one block row and `bn` columns; its `warps_m` warps split the block row's blocks between them (warp `w`
    /// takes blocks `w`, `w + warps_m`, ...), each loading A's 16 x 32 chunks straight into `mma.sync` fragments
    /// with 16-byte evict-first loads, `stages` chunks in flight per warp; the warps' partial sums are added in
    /// shared memory in warp order (the same bits run to run). `bk` is the chunk (32), `warps_n` is 1.
    Direct,
}

/// The PTX comment the product module's kernels emit where the grid-dependency wait goes
/// (kernels-gpu/src/ptx/griddep.rs): a no-op in the sm_80 PTX, `griddepcontrol.wait;` in the module's sm_90a
/// cubin (`cargo xtask build-ptx`). Every `Pipeline::CpAsync` and `Pipeline::Direct` kernel of the product module
/// holds one before it reads B or touches C, and the build checks that it does.
pub const GRIDDEP_WAIT_MARKER: &str = "// sparsek.griddepcontrol.wait";

/// The PTX comment for `griddepcontrol.launch_dependents;`, likewise.
pub const GRIDDEP_LAUNCH_DEPENDENTS_MARKER: &str = "// sparsek.griddepcontrol.launch_dependents";

/// The widest N tile whose kernels split block rows ([`KernelConfig::splits_rows`]).
pub const SPLIT_MAX_BN: u32 = 32;

/// Warps in a warpgroup (the unit of `wgmma` and `setmaxnreg`).
pub const WARPGROUP_WARPS: u32 = 4;

/// Columns of one accumulator piece of the sm_90a kernels' consumer warpgroups (an `m64n128k16`; a warpgroup
/// of two pieces multiplies both with one `m64n256k16`).
pub const WGMMA_N: u32 = 128;

/// Bytes of one output staging buffer of the sm_90a kernels: 64 rows of 128 bytes (32 f32 or 64 16-bit columns
/// of C), the box of C's tensor map ([`HopperSpmmParams::tmap_c`]), 128-byte swizzled.
pub const OUT_STAGE_BYTES: u32 = 64 * 128;

/// The columns of a row-major C of `n` columns and `elem_bytes`-byte elements that its tensor map covers for the
/// sm_90a kernels' staged stores ([`HopperSpmmParams::tmap_c`]): `n` rounded down to whole 16 bytes (a TMA store
/// writes whole 16-byte units, so a map ending mid-unit would write the padding after each row). The host encodes
/// the map with it and the kernels store the columns past it from their registers.
pub const fn c_map_columns(n: u32, elem_bytes: u32) -> u32 {
    n & !(16 / elem_bytes - 1)
}

/// Dynamic shared memory one CTA may have on sm_90 (227 KB).
pub const SMEM_LIMIT: u32 = 227 * 1024;

/// Entries of the sm_90a kernels' tile queue: the producer thread publishes each tile it takes (from the launch's
/// tile counter or the static stride) with the ring position of its first k-tile, and the consumer warpgroups read
/// them in turn, so the producer can run up to this many tiles ahead.
pub const TILE_QUEUE: u32 = 4;

impl KernelConfig {
    /// Threads per CTA (with the producer warpgroup of [`Pipeline::TmaWgmma`]).
    pub const fn threads(&self) -> u32 {
        match self.pipeline {
            Pipeline::CpAsync => 32 * self.warps_m * self.warps_n * self.k_groups,
            Pipeline::Direct => 32 * self.warps_m * self.warps_n,
            Pipeline::TmaWgmma { pingpong } => {
                32 * (self.warps_m * self.warps_n * (1 + pingpong as u32) + WARPGROUP_WARPS)
            }
        }
    }
    /// Threads that multiply (all of them for [`Pipeline::CpAsync`], the consumer warpgroups for
    /// [`Pipeline::TmaWgmma`]).
    pub const fn mma_threads(&self) -> u32 {
        32 * self.warps_m * self.warps_n
    }
    /// Consumer warpgroups of a [`Pipeline::TmaWgmma`] CTA (both sets in ping-pong); 0 for the other pipelines.
    pub const fn consumer_warpgroups(&self) -> u32 {
        match self.pipeline {
            Pipeline::TmaWgmma { pingpong } => self.warps_m * self.warps_n * (1 + pingpong as u32) / WARPGROUP_WARPS,
            Pipeline::CpAsync | Pipeline::Direct => 0,
        }
    }
    /// Shared-memory offset of the output staging buffers of [`Pipeline::TmaWgmma`] from the 1024-byte aligned
    /// ring: right after the stages (so 1024-byte aligned, as their 128-byte swizzle needs). Each consumer
    /// warpgroup has [`KernelConfig::out_buffers`] buffers of [`OUT_STAGE_BYTES`] (64 rows of 128 bytes), from
    /// which one thread stores C through a tensor map.
    pub const fn out_stage_offset(&self) -> u32 {
        self.stages * (self.a_stage_bytes() + self.b_stage_bytes())
    }
    /// Output staging buffers per consumer warpgroup of [`Pipeline::TmaWgmma`]: two (one filled while the other is
    /// stored) where they fit in [`SMEM_LIMIT`] next to the ring, else one.
    pub const fn out_buffers(&self) -> u32 {
        let wgs = self.consumer_warpgroups();
        let without = 1024 + self.out_stage_offset() + 16 * self.stages + 32 * TILE_QUEUE + 16;
        if without + wgs * 2 * (OUT_STAGE_BYTES + 16) <= SMEM_LIMIT { 2 } else { 1 }
    }
    /// Shared-memory offset of the mbarriers of [`Pipeline::TmaWgmma`] from the 1024-byte aligned ring: after the
    /// stages and the output staging buffers (full barriers, then empty barriers, 8 bytes each).
    pub const fn barrier_offset(&self) -> u32 {
        self.out_stage_offset() + self.consumer_warpgroups() * self.out_buffers() * OUT_STAGE_BYTES
    }
    /// Shared-memory offset of the output staging buffers' mbarriers of [`Pipeline::TmaWgmma`] from the ring: after
    /// the tile queue and the turn barriers; per consumer warpgroup and buffer a `full` barrier (its 128 threads
    /// have written the buffer) and a `free` barrier (the store has read it), 8 bytes each.
    pub const fn out_barrier_offset(&self) -> u32 {
        self.tile_queue_offset() + 32 * TILE_QUEUE + 16
    }
    /// Shared-memory offset of the tile queue of [`Pipeline::TmaWgmma`] from the ring: after the mbarriers,
    /// [`TILE_QUEUE`] full barriers, then as many empty barriers (8 bytes each), then the entries (16 bytes each),
    /// then the ping-pong kernels' two turn barriers.
    pub const fn tile_queue_offset(&self) -> u32 {
        self.barrier_offset() + 16 * self.stages
    }
    /// Whether the kernel is the ping-pong form of [`Pipeline::TmaWgmma`].
    pub const fn pingpong(&self) -> bool {
        matches!(self.pipeline, Pipeline::TmaWgmma { pingpong: true })
    }
    /// m16 tiles per warp.
    pub const fn mi(&self) -> u32 {
        self.bs / self.warps_m / 16
    }
    /// n8 tiles per warp.
    pub const fn ni(&self) -> u32 {
        self.bn / self.warps_n / 8
    }
    /// Bytes of A's stage tile (BM x BK f16).
    pub const fn a_stage_bytes(&self) -> u32 {
        self.bs * self.bk * 2
    }
    /// Bytes of B's stage tile (BK x BN f16).
    pub const fn b_stage_bytes(&self) -> u32 {
        self.bk * self.bn * 2
    }
    /// Dynamic shared memory of one CTA. [`Pipeline::TmaWgmma`] adds 1024 bytes to round the ring's start up to
    /// the 1024-byte alignment of 128-byte swizzled TMA tiles, the output staging buffers, two mbarriers per stage,
    /// the tile queue ([`KernelConfig::tile_queue_offset`]) and the staging buffers' barriers; [`Pipeline::Direct`]
    /// has no ring, only every warp's f32 partial sums of the CTA's (16, bn) tile.
    pub const fn smem_bytes(&self) -> u32 {
        match self.pipeline {
            Pipeline::CpAsync => self.k_groups * self.stages * (self.a_stage_bytes() + self.b_stage_bytes()),
            Pipeline::Direct => self.warps_m * self.warps_n * 16 * self.bn * 4,
            Pipeline::TmaWgmma { .. } => {
                1024 + self.out_barrier_offset() + 16 * self.consumer_warpgroups() * self.out_buffers()
            }
        }
    }
    /// `mma.sync` instructions the kernel's PTX must hold: one k-tile's worth (MI x NI per k16 step), written
    /// once in the main loop (build-ptx counts them: an inline-asm collective that LLVM duplicated shows here).
    pub const fn expected_mma_sync(&self) -> u32 {
        match self.pipeline {
            Pipeline::CpAsync => self.mi() * self.ni() * (self.bk / 16),
            // The main loop is unrolled over the `stages` chunks in flight, each two k16 steps of NI mma.
            Pipeline::Direct => self.stages * (self.bk / 16) * (self.bn / 8),
            Pipeline::TmaWgmma { .. } => 0,
        }
    }
    /// `wgmma.mma_async` instructions the kernel's PTX must hold: one k-tile (BK / 16 k16 steps) of one wgmma per
    /// consumer warpgroup (`m64n128k16` or `m64n256k16`: its `bn / warps_n` columns).
    pub const fn expected_wgmma(&self) -> u32 {
        match self.pipeline {
            Pipeline::CpAsync | Pipeline::Direct => 0,
            Pipeline::TmaWgmma { .. } => self.bk / 16,
        }
    }
    /// `wgmma.fence`, `wgmma.commit_group` and `wgmma.wait_group` instructions the kernel's PTX must hold (each
    /// a `.sync.aligned` warpgroup collective written as inline asm, which LLVM may duplicate): one fence and one
    /// commit per k-tile of the main loop, a `wait_group 1` in it and a `wait_group 0` after it.
    pub const fn expected_wgmma_group_ops(&self) -> [u32; 3] {
        match self.pipeline {
            Pipeline::CpAsync | Pipeline::Direct => [0, 0, 0],
            Pipeline::TmaWgmma { .. } => [1, 1, 2],
        }
    }
    /// `bar.sync` / `barrier.sync` instructions the kernel's PTX must hold: the main loop's one (and the second
    /// of the fragment double-buffered schedule), plus the two of the split rows' hand-over
    /// ([`KernelConfig::splits_rows`]); the sm_90a kernel's one after the mbarriers are initialised.
    pub const fn expected_barriers(&self) -> u32 {
        let split = if self.splits_rows() { 2 } else { 0 };
        // Several k-groups: two more CTA barriers hand the groups' accumulators over.
        let groups = if self.k_groups > 1 { 2 } else { 0 };
        match self.pipeline {
            Pipeline::CpAsync if self.frag_db => 2 + split + groups,
            Pipeline::CpAsync => 1 + split + groups,
            Pipeline::TmaWgmma { .. } => 1,
            // The one barrier between the warps' partial sums and their sum.
            Pipeline::Direct => 1,
        }
    }
    /// Whether the kernel can split block rows over several CTAs ([`BsrSpmmParams::split_chunks`]): the
    /// cp.async template with a narrow N tile (at most [`SPLIT_MAX_BN`] columns), whose partial tiles are small,
    /// and the bs-128 mid tile of 64 columns ([`MID64_CONFIGS`]), whose 128 block rows of a 16384-row weight
    /// are one CTA per SM when whole. Measured on an H200 (docs/perf-notes.md, issue 12 step 19): split, that tile
    /// was 1.06-1.3x faster than whole rows at 64 columns and 2.6x on skewed rows; the bs-64 tile of 64 columns
    /// does not split, because compiling the split path in made its whole-row launches 3-4% slower and its splits
    /// were level to 10% slower.
    pub const fn splits_rows(&self) -> bool {
        matches!(self.pipeline, Pipeline::CpAsync) && (self.bn <= SPLIT_MAX_BN || (self.bs >= 128 && self.bn <= 64))
    }
    /// Bytes of one partial tile of a split row: the CTA's (bs, bn) f32 accumulators.
    pub const fn split_slot_bytes(&self) -> u32 {
        self.bs * self.bn * 4
    }
    /// Checks that the shape is one the kernel template accepts, naming the first broken rule. The kernels
    /// assert it at compile time ([`KernelConfig::assert_valid`]); the host checks it again when it loads a kernel.
    pub const fn check(&self) -> Result<(), &'static str> {
        if !matches!(self.bs, 16 | 32 | 64 | 128) {
            return Err("bs must be 16, 32, 64 or 128");
        }
        if matches!(self.pipeline, Pipeline::TmaWgmma { .. }) {
            return self.check_tma_wgmma();
        }
        if matches!(self.pipeline, Pipeline::Direct) {
            return self.check_direct();
        }
        if self.warps_m == 0 || self.warps_n == 0 {
            return Err("the warp grid must not be empty");
        }
        if !self.bs.is_multiple_of(16 * self.warps_m) {
            return Err("bs must be a multiple of 16 * warps_m (m16 tiles per warp)");
        }
        if self.bn == 0 || !self.bn.is_multiple_of(16 * self.warps_n) {
            return Err(
                "bn must be a positive multiple of 16 * warps_n (NI even: B fragments come in pairs from ldmatrix.x4.trans)",
            );
        }
        if self.bk == 0 || !self.bk.is_multiple_of(16) || !self.bs.is_multiple_of(self.bk) {
            return Err("bk must be a positive multiple of 16 that divides bs");
        }
        if self.stages < 2 {
            return Err("the cp.async ring needs at least two stages");
        }
        if self.frag_db && !((self.bk / 16).is_multiple_of(2) && self.stages >= 3) {
            return Err("frag_db needs an even number of k16 steps per stage (bk / 16) and 3+ stages");
        }
        if self.k_groups == 0 || self.k_groups > 2 || (self.k_groups > 1 && !self.frag_db) {
            return Err("k_groups must be 1, or 2 with frag_db");
        }
        if self.threads() > 1024 {
            return Err("more than 1024 threads per CTA");
        }
        if !(self.bk * self.bn / CHUNK_HALVES).is_multiple_of(self.threads() / self.k_groups) {
            return Err("the B stage tile's 16-byte chunks must divide evenly among a k-group's threads");
        }
        Ok(())
    }

    /// The rules of the sm_90a template ([`Pipeline::TmaWgmma`]).
    const fn check_tma_wgmma(&self) -> Result<(), &'static str> {
        if !matches!(self.bs, 64 | 128) {
            return Err("the sm_90a template serves bs 64 and 128 (a TMA box of bs rows, m64 wgmma tiles)");
        }
        if self.bk != 64 {
            return Err("the sm_90a template stages BK = 64 (one 128-byte swizzle row of 16-bit elements)");
        }
        if self.warps_m * 16 != self.bs || !self.warps_m.is_multiple_of(WARPGROUP_WARPS) {
            return Err("the sm_90a template needs warps_m = bs / 16 (16 rows per warp, whole warpgroups along M)");
        }
        if self.warps_n == 0 || !self.bn.is_multiple_of(self.warps_n) {
            return Err("bn must be a multiple of warps_n");
        }
        let wg_n = self.bn / self.warps_n;
        if wg_n == 0 || !wg_n.is_multiple_of(WGMMA_N) || wg_n > 2 * WGMMA_N {
            return Err("each consumer warpgroup takes 128 or 256 columns (one m64n128k16 or m64n256k16 per k16 step)");
        }
        if !self.bn.is_multiple_of(64) || self.bn > 256 {
            return Err("bn must be a multiple of 64 (one TMA box of B per 64 columns) and at most 256 (a box)");
        }
        if self.stages < 2 {
            return Err("the TMA ring needs at least two stages");
        }
        self.check_no_frag_db_threads("frag_db is an sm_80 schedule")
    }

    /// The rules of the decode template ([`Pipeline::Direct`]).
    const fn check_direct(&self) -> Result<(), &'static str> {
        if !matches!(self.bs, 32 | 64 | 128) {
            return Err("the decode template serves bs 32, 64 and 128 (whole 32-column chunks of a block)");
        }
        if self.bk != DIRECT_CHUNK {
            return Err("the decode template loads 32-column chunks (bk = 32)");
        }
        if self.warps_n != 1 || self.warps_m == 0 {
            return Err("the decode template splits blocks over warps_m >= 1 warps (warps_n = 1)");
        }
        if !matches!(self.bn, 8 | 16 | 32 | 64) {
            return Err("the decode template takes 8, 16, 32 or 64 columns per CTA");
        }
        if self.stages == 0 {
            return Err("the decode template needs at least one chunk in flight per warp");
        }
        self.check_no_frag_db_threads("frag_db is the cp.async template's schedule")
    }

    /// The last rules of the templates other than the cp.async one: no fragment double-buffering (a schedule of
    /// the cp.async main loop; `frag_db_rule` is the template's words for it), at most 1024 threads per CTA.
    const fn check_no_frag_db_threads(&self, frag_db_rule: &'static str) -> Result<(), &'static str> {
        if self.frag_db {
            return Err(frag_db_rule);
        }
        if self.threads() > 1024 {
            return Err("more than 1024 threads per CTA");
        }
        Ok(())
    }

    /// Rows of a block row that one CTA of [`Pipeline::Direct`] owns (one m16 tile): a block row is split into
    /// `bs / 16` slices.
    pub const fn slices(&self) -> u32 {
        match self.pipeline {
            Pipeline::Direct => self.bs / 16,
            Pipeline::CpAsync | Pipeline::TmaWgmma { .. } => 1,
        }
    }

    /// [`KernelConfig::check`] as a compile-time assert: `const { CFG.assert_valid() }` fails the build with the
    /// broken rule.
    pub const fn assert_valid(&self) {
        if let Err(rule) = self.check() {
            panic!("{}", rule);
        }
    }
}

/// A row of the configuration tables: `pipeline` on the tile `(bs, bn, bk)` with `(warps_m, warps_n)` warps,
/// `stages` stages and `frag_db`, one k-group (a row of two sets `k_groups` itself).
const fn row(
    pipeline: Pipeline,
    (bs, bn, bk): (u32, u32, u32),
    (warps_m, warps_n): (u32, u32),
    stages: u32,
    frag_db: bool,
) -> KernelConfig {
    KernelConfig { bs, bn, bk, warps_m, warps_n, stages, frag_db, k_groups: 1, pipeline }
}

/// Configuration of the product kernel for each block size, in the order of [`BLOCK_SIZES`]: the fastest of
/// [`TUNE_CONFIGS`] on an H100 (its entries 1, 3, 7 and 12; docs/perf-notes.md, docs/tune/).
pub const CONFIGS: [KernelConfig; 4] = [TUNE_CONFIGS[1], TUNE_CONFIGS[3], TUNE_CONFIGS[7], TUNE_CONFIGS[12]];

/// Candidate configurations compiled into the tuning module ([`Module::Tuning`], entry points
/// `sparsek_tune_<index>`, f32 output) and measured by `sparsek tune`. The winners become [`CONFIGS`];
/// docs/perf-notes.md records the measurements.
pub const TUNE_CONFIGS: [KernelConfig; 28] = [
    // bs 16 (BK = 16: one k-step per tile, so no fragment double-buffering)
    row(Pipeline::CpAsync, (16, 256, 16), (1, 4), 4, false),
    row(Pipeline::CpAsync, (16, 256, 16), (1, 4), 6, false),
    row(Pipeline::CpAsync, (16, 512, 16), (1, 8), 4, false),
    // bs 32
    row(Pipeline::CpAsync, (32, 256, 32), (1, 4), 3, false),
    row(Pipeline::CpAsync, (32, 256, 32), (1, 4), 3, true),
    row(Pipeline::CpAsync, (32, 256, 32), (1, 4), 4, true),
    // bs 64
    row(Pipeline::CpAsync, (64, 256, 32), (1, 4), 3, false),
    row(Pipeline::CpAsync, (64, 256, 32), (1, 4), 3, true),
    row(Pipeline::CpAsync, (64, 256, 32), (1, 4), 4, true),
    row(Pipeline::CpAsync, (64, 128, 64), (2, 2), 3, false),
    row(Pipeline::CpAsync, (64, 128, 64), (2, 2), 3, true),
    // bs 128
    row(Pipeline::CpAsync, (128, 128, 32), (2, 2), 4, false),
    row(Pipeline::CpAsync, (128, 128, 32), (2, 2), 4, true),
    row(Pipeline::CpAsync, (128, 128, 32), (2, 4), 4, true),
    // (bn 256, bk 64, 2x4 warps, 3 stages lost by 12% in round 3 and spills at 255 registers since the kernels
    // take one parameter struct: dropped, docs/perf-notes.md.)
    row(Pipeline::CpAsync, (128, 256, 32), (2, 4), 4, true),
    // Decode candidates (issue 12, docs/perf-notes.md "Decode"): at N <= 64 the product tiles (BN 128-256) spend
    // their MMAs on zero-filled columns and keep 12 KB of A in flight per SM. A narrow N tile, all warps along M,
    // and a deep ring of BK 64 stages instead. Appended, so the indices above keep their names.
    row(Pipeline::CpAsync, (64, 16, 64), (4, 1), 4, true),
    row(Pipeline::CpAsync, (64, 16, 64), (4, 1), 8, true),
    row(Pipeline::CpAsync, (64, 32, 64), (4, 1), 6, true),
    row(Pipeline::CpAsync, (128, 16, 64), (4, 1), 4, true),
    row(Pipeline::CpAsync, (128, 32, 64), (8, 1), 4, true),
    // Decode candidates for the small blocks: one warp per 16 rows, BN 16, the whole block's K per stage.
    row(Pipeline::CpAsync, (16, 16, 16), (1, 1), 4, false),
    row(Pipeline::CpAsync, (16, 16, 16), (1, 1), 8, false),
    row(Pipeline::CpAsync, (32, 16, 32), (2, 1), 4, true),
    row(Pipeline::CpAsync, (32, 16, 32), (2, 1), 8, true),
    // 32 to 64 columns (issue 12, N = 32 and 64): an N tile of 32 or 64, so A is multiplied once per 32 or 64
    // columns instead of once per 16 (entries 24-27).
    row(Pipeline::CpAsync, (64, 64, 64), (4, 1), 4, true),
    row(Pipeline::CpAsync, (64, 32, 64), (4, 1), 4, true),
    row(Pipeline::CpAsync, (128, 64, 64), (4, 1), 3, true),
    row(Pipeline::CpAsync, (128, 32, 64), (4, 1), 4, true),
];

/// Narrow-tile configurations of the product (issue 12), for the launches with few columns (decode): the
/// fastest of the decode candidates of [`TUNE_CONFIGS`] at N = 1, 16 and 64 on an H100 (bs 64 and 128: its
/// entries 15 and 18; bs 16 and 32: entries 21 and 22; docs/perf-notes.md "Decode", docs/tune/). bs 64 has since
/// a fifth stage: once each block's column index was loaded a k-tile ahead, its CTAs waited on the copies, and
/// five stages measured 1.5-5% faster at 8192^2 and 16384^2 on an H200, six up to 2% slower on the 8192^2 split
/// launches (docs/perf-notes.md, issue 12 step 9). Since issue 12 step 33 bs 64 has two k-groups of four stages
/// each (step 32's build streamed a lone row 1.3x faster; uniform rows stay whole on 67 block rows or more, and
/// at 1-16 columns 8192^2 and 16384^2 10% measured 1-5% faster per event on an H100, 5-6% from a CUDA graph);
/// the flat list keeps the one-group tile of five stages ([`FLAT_CONFIGS`]).
pub const NARROW_CONFIGS: [KernelConfig; 4] =
    [TUNE_CONFIGS[21], TUNE_CONFIGS[22], KernelConfig { k_groups: 2, ..TUNE_CONFIGS[15] }, TUNE_CONFIGS[18]];

/// The flat block-list kernels' configurations ([`Tile::Flat`]): the narrow tiles of bs 64 and 128, whose block
/// rows are long enough that an equal share of the blocks per CTA holds about a row (docs/perf-notes.md, issue 12
/// step 24). The bs-64 entry is that narrow tile as it was before issue 12 step 33: one k-group, five stages.
pub const FLAT_CONFIGS: [KernelConfig; 2] =
    [KernelConfig { stages: 5, k_groups: 1, ..NARROW_CONFIGS[2] }, NARROW_CONFIGS[3]];

/// The flat block list on the wide mid tile ([`Tile::Flat64`]): bs 64's [`MID64_CONFIGS`] entry, whose 64
/// columns take a whole N tile up to 64 columns (docs/perf-notes.md, issue 12 step 25).
pub const FLAT64_CONFIGS: [KernelConfig; 1] = [MID64_CONFIGS[0]];

/// The flat block list on the mid tile of 32 columns ([`Tile::Flat32`]): bs 64's [`MID_CONFIGS`] entry, whose 32
/// columns take a whole N tile from [`MID_MIN_N`] to 32 columns (docs/perf-notes.md, issue 12 step 26).
pub const FLAT32_CONFIGS: [KernelConfig; 1] = [MID_CONFIGS[2]];

/// The [`FLAT32_CONFIGS`] entry for `bs`, if it has one.
pub const fn flat32_config_for(bs: u32) -> Option<KernelConfig> {
    find_config(&FLAT32_CONFIGS, bs)
}

/// The [`FLAT64_CONFIGS`] entry for `bs`, if it has one.
pub const fn flat64_config_for(bs: u32) -> Option<KernelConfig> {
    find_config(&FLAT64_CONFIGS, bs)
}

/// The [`FLAT_CONFIGS`] entry for `bs`, if it has one.
pub const fn flat_config_for(bs: u32) -> Option<KernelConfig> {
    find_config(&FLAT_CONFIGS, bs)
}

/// Mid-tile configurations (issue 12): an N tile of 32 for launches of [`MID_MIN_N`] to [`NARROW_MAX_N`] columns
/// at every block size, where the narrow tile's 16 columns multiply each block of A once per 16 columns. bs 16's
/// and 32's (the narrow tiles' shapes with 32 columns; not tuning candidates) measured 1.06-2.05x faster than the
/// narrow tile on 16384 x 16384 at 32 to 64 columns on an H200, and slower on fewer block rows: the host takes
/// them only on many (docs/perf-notes.md, issue 12 step 21). bs 64 and 128: the fastest at N = 32 of the candidates of 16,
/// 32 and 64 columns ([`TUNE_CONFIGS`] entries 15-19 and 24-27) on an H200, 16384 x 16384 bs 64 22%: 39.9 µs
/// against 49.1 for the narrow tile (entry 25); bs 128 41.3 against 49.5 (entry 27); at N = 64 1.27-1.46x faster
/// than the narrow tile (docs/perf-notes.md "Step 5").
pub const MID_CONFIGS: [KernelConfig; 4] = [
    row(Pipeline::CpAsync, (16, 32, 16), (1, 1), 8, false),
    row(Pipeline::CpAsync, (32, 32, 32), (2, 1), 4, true),
    row(Pipeline::CpAsync, (64, 32, 64), (4, 1), 4, true),
    row(Pipeline::CpAsync, (128, 32, 64), (4, 1), 4, true),
];

/// The fewest columns a [`Tile::Mid`] kernel is chosen for (below, the narrow tile's 16 columns suffice).
pub const MID_MIN_N: usize = 17;

/// Wide mid-tile configurations (issue 12): an N tile of 64 for launches of [`MID64_MIN_N`] to [`NARROW_MAX_N`]
/// columns at bs 64 and 128, where one tile of 64 columns reads A once instead of twice. bs 64: [`TUNE_CONFIGS`]
/// entry 24, the fastest candidate at N = 64 on an H200: 16384 x 16384 bs 64 22% 45.9 µs against 53.6 for the mid
/// tile of 32 (entry 25) and 78.3 for the narrow tile; 8192 x 8192 19.3 against 22.0 (docs/perf-notes.md "Step
/// 5"); at 32 columns it was 1.16x slower than the mid tile. bs 128 (entry 26), whole rows, won only 1.04x at
/// 16384 x 16384; it splits rows ([`KernelConfig::splits_rows`]), and split it measured 1.04-1.37x faster than the
/// mid tile of 32 at 33 to 64 columns where A has at least 4 blocks per SM, 2x on skewed rows (issue 12 step 19;
/// the host takes it only there).
pub const MID64_CONFIGS: [KernelConfig; 2] =
    [row(Pipeline::CpAsync, (64, 64, 64), (4, 1), 4, true), row(Pipeline::CpAsync, (128, 64, 64), (4, 1), 4, true)];

/// The fewest columns a [`Tile::Mid64`] kernel is chosen for (up to 32, one tile of 32 columns suffices).
pub const MID64_MIN_N: usize = 33;

/// Configurations of the SDDMM kernels ([`Op::Sddmm`](crate::Op::Sddmm)), one per block size: a CTA computes one
/// stored (BS, BS) block over the whole reduced dimension, so BN = BS. bs 16: one warp, one k16 step per stage (a
/// deeper BK would not divide the block); bs 32 and 64: the mid tiles of those widths; bs 128: the product tile.
/// Chosen for correctness first; their speed is measured in docs/perf-notes.md ("Backward").
pub const SDDMM_CONFIGS: [KernelConfig; 4] =
    [row(Pipeline::CpAsync, (16, 16, 16), (1, 1), 4, false), MID_CONFIGS[1], MID64_CONFIGS[0], CONFIGS[3]];

/// The [`SDDMM_CONFIGS`] entry for `bs`, if it has one.
pub const fn sddmm_config_for(bs: u32) -> Option<KernelConfig> {
    find_config(&SDDMM_CONFIGS, bs)
}

/// Configurations of the sm_90a kernels ([`Pipeline::TmaWgmma`], [`Module::Hopper`]), one per block size they
/// serve (64 and 128; the small blocks keep the sm_80 kernels): a 256-column N tile, BK 64, two consumer
/// warpgroups and as many ring stages as fit in the 227 KB of shared memory. bs 64: ping-pong, each warpgroup a
/// whole 64 x 256 tile (one `m64n256k16` per k16 step), the two alternating tiles; bs 128: both warpgroups on
/// one tile, stacked along M (64 x 256 each).
pub const HOPPER_CONFIGS: [KernelConfig; 2] = [
    row(Pipeline::TmaWgmma { pingpong: true }, (64, 256, 64), (4, 1), 5, false),
    row(Pipeline::TmaWgmma { pingpong: false }, (128, 256, 64), (8, 1), 4, false),
];

/// Configurations of the sm_90a SDDMM kernels ([`Op::Sddmm`] in [`Module::Hopper`]): tiles of 256 columns, each a
/// group of `bn / bs` consecutive stored blocks of one block row, so X's rows are read once for the group. bs 128:
/// the forward's tile ([`HOPPER_CONFIGS`]: two blocks, both consumer warpgroups on 128 x 256); bs 64: four blocks,
/// the forward's ping-pong tile (each consumer warpgroup a whole 64 x 256 group, the two alternating), which the
/// structure's tile lists keep busy (every tile a group: docs/perf-notes.md, "Backward on sm_90a", step 6).
pub const HOPPER_SDDMM_CONFIGS: [KernelConfig; 2] = [HOPPER_CONFIGS[0], HOPPER_CONFIGS[1]];

/// The [`HOPPER_SDDMM_CONFIGS`] entry for block size `bs`.
pub const fn hopper_sddmm_config_for(bs: u32) -> Option<KernelConfig> {
    find_config(&HOPPER_SDDMM_CONFIGS, bs)
}

/// The [`HOPPER_CONFIGS`] entry for block size `bs`.
pub const fn hopper_config_for(bs: u32) -> Option<KernelConfig> {
    find_config(&HOPPER_CONFIGS, bs)
}

/// Configurations of the sm_90a kernels for short rows ([`Tile::ShortRows`]): bs 64's [`HOPPER_CONFIGS`] entry
/// with four ring stages instead of five, which leaves room for a second output staging buffer per consumer
/// warpgroup. A tile of few k-tiles spends much of its time in the epilogue, where each of its 8 f32 staging
/// chunks otherwise waits for the TMA to have read the one before. Compiled for f32 C only: a 16-bit C has half
/// the chunks, and there the second buffer measured level. Measured on an H200 (docs/perf-notes.md, Hopper steps
/// 12 and 17): faster on rows of up to [`SHORT_ROW_MAX_K_TILES`] k-tiles, slower on longer ones, where the fifth
/// stage is worth more. bs 128 has two buffers already (step 13: more cost it a stage and were slower).
pub const HOPPER_SHORT_CONFIGS: [KernelConfig; 1] = [KernelConfig { stages: 4, ..HOPPER_CONFIGS[0] }];

/// The [`HOPPER_SHORT_CONFIGS`] entry for block size `bs`.
pub const fn hopper_short_config_for(bs: u32) -> Option<KernelConfig> {
    find_config(&HOPPER_SHORT_CONFIGS, bs)
}

/// The most k-tiles (of BK columns of A) per block row, on average over the block rows, for which the built-in
/// heuristic takes a [`Tile::ShortRows`] kernel where the block size has one.
pub const SHORT_ROW_MAX_K_TILES: usize = 8;

/// Columns of A that one [`Pipeline::Direct`] load covers per row: 16 bytes per lane, four lanes per row.
pub const DIRECT_CHUNK: u32 = 32;

/// Configurations of the decode kernels ([`Pipeline::Direct`], [`Tile::Decode`]) for bs 32, 64 and 128: 16
/// columns per CTA, 32 warps per block row (bs 32: 16), four chunks in flight per warp (docs/perf-notes.md,
/// "Decode", step 3).
pub const DECODE_CONFIGS: [KernelConfig; 3] = [
    row(Pipeline::Direct, (32, 16, DIRECT_CHUNK), (8, 1), 4, false),
    row(Pipeline::Direct, (64, 16, DIRECT_CHUNK), (8, 1), 4, false),
    row(Pipeline::Direct, (128, 16, DIRECT_CHUNK), (4, 1), 4, false),
];

/// The largest N served by a [`Tile::Decode`] kernel.
pub const DECODE_MAX_N: usize = 16;

/// The [`DECODE_CONFIGS`] entry for block size `bs`.
pub const fn decode_config_for(bs: u32) -> Option<KernelConfig> {
    find_config(&DECODE_CONFIGS, bs)
}

/// The largest N served by a [`Tile::Narrow`] kernel: up to 64 columns the narrow tile measured faster than the
/// wide one (1.7-3.1x at bs 64 and 128; 2-3x slower at N = 8192).
pub const NARROW_MAX_N: usize = 64;

/// The N tile of a kernel, which the launcher chooses by the product's column count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tile {
    /// The product tile of [`CONFIGS`] (BN 128 or 256): every N.
    Wide,
    /// The narrow tile of [`NARROW_CONFIGS`] (BN 16): N up to [`NARROW_MAX_N`].
    Narrow,
    /// The decode kernels of [`DECODE_CONFIGS`]: N up to [`DECODE_MAX_N`], taken before the narrow tile where the
    /// block size has one.
    Decode,
    /// The mid tile of [`MID_CONFIGS`] (BN 32): [`MID_MIN_N`] to [`NARROW_MAX_N`] columns, where the block size has
    /// one.
    Mid,
    /// The wide mid tile of [`MID64_CONFIGS`] (BN 64): [`MID64_MIN_N`] to [`NARROW_MAX_N`] columns, where the block
    /// size has one (bs 64 and 128), instead of the mid tile.
    Mid64,
    /// The sm_90a product tile for short rows ([`HOPPER_SHORT_CONFIGS`], bs 64, f32 C): every N, taken instead of
    /// the [`Tile::Wide`] sm_90a kernel for rows of at most [`SHORT_ROW_MAX_K_TILES`] k-tiles on average.
    ShortRows,
    /// The narrow tile walking a flat block list ([`FLAT_CONFIGS`]: the [`NARROW_CONFIGS`] entries of bs 64 and
    /// 128; f16 inputs, row-major B, f32 C): up to 16 columns, one N tile, CTAs taking equal shares of A's blocks
    /// across row boundaries ([`BsrSpmmParams::flat_ctas`]). The launcher takes it in place of the narrow kernel
    /// when the plan asks for a flat list.
    Flat,
    /// The flat block list on the wide mid tile of 64 columns ([`FLAT64_CONFIGS`]: the [`MID64_CONFIGS`] entry of
    /// bs 64; f16 inputs, row-major B, f32 C): [`MID64_MIN_N`] to 64 columns, one N tile, in place of that tile.
    Flat64,
    /// The flat block list on the mid tile of 32 columns ([`FLAT32_CONFIGS`]: the [`MID_CONFIGS`] entry of bs 64;
    /// f16 inputs, row-major B, f32 C): [`MID_MIN_N`] to 32 columns, one N tile, in place of that tile.
    Flat32,
}

impl Tile {
    /// The tile a launch with `n` columns uses, where the block size has a narrow kernel.
    pub const fn for_columns(n: usize) -> Tile {
        if n <= NARROW_MAX_N { Tile::Narrow } else { Tile::Wide }
    }
}

/// Supported block sizes.
pub const BLOCK_SIZES: [u32; 4] = [16, 32, 64, 128];

/// The product configuration for block size `bs`, if supported (from [`VARIANTS`]).
pub const fn config_for(bs: u32) -> Option<KernelConfig> {
    find_config(&CONFIGS, bs)
}

/// The narrow-tile product configuration for block size `bs`, if it has one.
pub const fn narrow_config_for(bs: u32) -> Option<KernelConfig> {
    find_config(&NARROW_CONFIGS, bs)
}

/// The [`MID_CONFIGS`] entry for `bs`, if it has one.
pub const fn mid_config_for(bs: u32) -> Option<KernelConfig> {
    find_config(&MID_CONFIGS, bs)
}

/// The [`MID64_CONFIGS`] entry for `bs`, if it has one.
pub const fn mid64_config_for(bs: u32) -> Option<KernelConfig> {
    find_config(&MID64_CONFIGS, bs)
}

const fn find_config(configs: &[KernelConfig], bs: u32) -> Option<KernelConfig> {
    let mut i = 0;
    while i < configs.len() {
        if configs[i].bs == bs {
            return Some(configs[i]);
        }
        i += 1;
    }
    None
}
