//! sparsek's kernel ABI and index math, shared by the GPU kernels (built for nvptx64 inside kernels-gpu) and the
//! host (the `sparsek` library and its tests): one description, compiled twice, never copied.
//!
//! - index math as plain `const fn`s with no GPU code: the swizzle, `ldmatrix` address roles, `mma` fragment
//!   maps, grouped rasterization ([`raster`]); the host tests check the same functions the kernels use;
//! - [`KernelConfig`]: a kernel's tile shape, with one [`KernelConfig::check`] used by the kernels' compile-time
//!   asserts and by the host when it loads a kernel;
//! - [`BsrSpmmParams`]: the kernel parameter struct (`#[repr(C)]`), pushed by the host as one argument;
//! - [`VARIANTS`]: every compiled kernel (entry point name, arch, op, block size, output type, configuration).
//!
//! `#![no_std]` and dependency-free, so it builds for the host and for `nvptx64-nvidia-cuda` alike.
//!
//! Vocabulary (one line each; the same names everywhere):
//! - `BS`: BSR block size (A's blocks are BS x BS).        - `BM`: output rows per CTA (= BS: one block row).
//! - `BN`: output columns per CTA.                         - `BK`: K depth of one pipeline stage (divides BS).
//! - `WARPS_M x WARPS_N`: the CTA's warp grid.             - `MI x NI`: m16 x n8 mma tiles per warp (WM = 16*MI,
//!   WN = 8*NI).                                           - `STAGES`: depth of the cp.async shared-memory ring.
#![no_std]
#![warn(missing_docs)]

/// Bytes of one 16-byte shared-memory chunk (one cp.async, one ldmatrix row).
pub const CHUNK_BYTES: u32 = 16;
/// f16 elements per chunk.
pub const CHUNK_HALVES: u32 = 8;

/// Position (in 16-byte chunks from the tile start) of chunk `chunk` of row `row` in a swizzled shared tile whose
/// rows are `chunks_per_row` chunks long (a power of two).
///
/// The XOR swizzle makes both access patterns conflict-free: eight lanes of an `ldmatrix` read the same logical
/// chunk of eight consecutive rows, and these land in eight distinct 16-byte bank groups of the 128-byte bank line.
/// For rows of >= 8 chunks the chunk index is XORed with `row % 8`; shorter rows pack `8 / chunks_per_row` rows
/// into one 128-byte line, and the XOR uses the line index instead.
#[inline(always)]
pub const fn swizzle(row: u32, chunk: u32, chunks_per_row: u32) -> u32 {
    let x = if chunks_per_row >= 8 { row % 8 } else { (row / (8 / chunks_per_row)) % chunks_per_row };
    row * chunks_per_row + (chunk ^ x)
}

/// The 128-byte-line bank group (0..8) that a swizzled chunk lands in.
pub const fn bank_group(row: u32, chunk: u32, chunks_per_row: u32) -> u32 {
    swizzle(row, chunk, chunks_per_row) % 8
}

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
        if self.frag_db {
            return Err("frag_db is an sm_80 schedule");
        }
        if self.threads() > 1024 {
            return Err("more than 1024 threads per CTA");
        }
        Ok(())
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
        if self.frag_db {
            return Err("frag_db is the cp.async template's schedule");
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

/// Configuration of the product kernel for each block size, in the order of [`BLOCK_SIZES`]: the fastest of
/// [`TUNE_CONFIGS`] on an H100 (docs/perf-notes.md, docs/tune/).
pub const CONFIGS: [KernelConfig; 4] = [
    KernelConfig {
        bs: 16,
        bn: 256,
        bk: 16,
        warps_m: 1,
        warps_n: 4,
        stages: 6,
        frag_db: false,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 32,
        bn: 256,
        bk: 32,
        warps_m: 1,
        warps_n: 4,
        stages: 3,
        frag_db: false,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 64,
        bn: 256,
        bk: 32,
        warps_m: 1,
        warps_n: 4,
        stages: 3,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 128,
        bn: 128,
        bk: 32,
        warps_m: 2,
        warps_n: 2,
        stages: 4,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
];

/// Candidate configurations compiled into the tuning module ([`Module::Tuning`], entry points
/// `sparsek_tune_<index>`, f32 output) and measured by `sparsek tune`. The winners become [`CONFIGS`];
/// docs/perf-notes.md records the measurements.
pub const TUNE_CONFIGS: [KernelConfig; 28] = [
    // bs 16 (BK = 16: one k-step per tile, so no fragment double-buffering)
    KernelConfig {
        bs: 16,
        bn: 256,
        bk: 16,
        warps_m: 1,
        warps_n: 4,
        stages: 4,
        frag_db: false,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 16,
        bn: 256,
        bk: 16,
        warps_m: 1,
        warps_n: 4,
        stages: 6,
        frag_db: false,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 16,
        bn: 512,
        bk: 16,
        warps_m: 1,
        warps_n: 8,
        stages: 4,
        frag_db: false,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    // bs 32
    KernelConfig {
        bs: 32,
        bn: 256,
        bk: 32,
        warps_m: 1,
        warps_n: 4,
        stages: 3,
        frag_db: false,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 32,
        bn: 256,
        bk: 32,
        warps_m: 1,
        warps_n: 4,
        stages: 3,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 32,
        bn: 256,
        bk: 32,
        warps_m: 1,
        warps_n: 4,
        stages: 4,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    // bs 64
    KernelConfig {
        bs: 64,
        bn: 256,
        bk: 32,
        warps_m: 1,
        warps_n: 4,
        stages: 3,
        frag_db: false,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 64,
        bn: 256,
        bk: 32,
        warps_m: 1,
        warps_n: 4,
        stages: 3,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 64,
        bn: 256,
        bk: 32,
        warps_m: 1,
        warps_n: 4,
        stages: 4,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 64,
        bn: 128,
        bk: 64,
        warps_m: 2,
        warps_n: 2,
        stages: 3,
        frag_db: false,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 64,
        bn: 128,
        bk: 64,
        warps_m: 2,
        warps_n: 2,
        stages: 3,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    // bs 128
    KernelConfig {
        bs: 128,
        bn: 128,
        bk: 32,
        warps_m: 2,
        warps_n: 2,
        stages: 4,
        frag_db: false,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 128,
        bn: 128,
        bk: 32,
        warps_m: 2,
        warps_n: 2,
        stages: 4,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 128,
        bn: 128,
        bk: 32,
        warps_m: 2,
        warps_n: 4,
        stages: 4,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    // (bn 256, bk 64, 2x4 warps, 3 stages lost by 12% in round 3 and spills at 255 registers since the kernels
    // take one parameter struct: dropped, docs/perf-notes.md.)
    KernelConfig {
        bs: 128,
        bn: 256,
        bk: 32,
        warps_m: 2,
        warps_n: 4,
        stages: 4,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    // Decode candidates (issue 12, docs/perf-notes.md "Decode"): at N <= 64 the product tiles (BN 128-256) spend
    // their MMAs on zero-filled columns and keep 12 KB of A in flight per SM. A narrow N tile, all warps along M,
    // and a deep ring of BK 64 stages instead. Appended, so the indices above keep their names.
    KernelConfig {
        bs: 64,
        bn: 16,
        bk: 64,
        warps_m: 4,
        warps_n: 1,
        stages: 4,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 64,
        bn: 16,
        bk: 64,
        warps_m: 4,
        warps_n: 1,
        stages: 8,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 64,
        bn: 32,
        bk: 64,
        warps_m: 4,
        warps_n: 1,
        stages: 6,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 128,
        bn: 16,
        bk: 64,
        warps_m: 4,
        warps_n: 1,
        stages: 4,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 128,
        bn: 32,
        bk: 64,
        warps_m: 8,
        warps_n: 1,
        stages: 4,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    // Decode candidates for the small blocks: one warp per 16 rows, BN 16, the whole block's K per stage.
    KernelConfig {
        bs: 16,
        bn: 16,
        bk: 16,
        warps_m: 1,
        warps_n: 1,
        stages: 4,
        frag_db: false,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 16,
        bn: 16,
        bk: 16,
        warps_m: 1,
        warps_n: 1,
        stages: 8,
        frag_db: false,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 32,
        bn: 16,
        bk: 32,
        warps_m: 2,
        warps_n: 1,
        stages: 4,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 32,
        bn: 16,
        bk: 32,
        warps_m: 2,
        warps_n: 1,
        stages: 8,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    // 32 to 64 columns (issue 12, N = 32 and 64): an N tile of 32 or 64, so A is multiplied once per 32 or 64
    // columns instead of once per 16 (entries 24-27).
    KernelConfig {
        bs: 64,
        bn: 64,
        bk: 64,
        warps_m: 4,
        warps_n: 1,
        stages: 4,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 64,
        bn: 32,
        bk: 64,
        warps_m: 4,
        warps_n: 1,
        stages: 4,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 128,
        bn: 64,
        bk: 64,
        warps_m: 4,
        warps_n: 1,
        stages: 3,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 128,
        bn: 32,
        bk: 64,
        warps_m: 4,
        warps_n: 1,
        stages: 4,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
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
pub const NARROW_CONFIGS: [KernelConfig; 4] = [
    KernelConfig {
        bs: 16,
        bn: 16,
        bk: 16,
        warps_m: 1,
        warps_n: 1,
        stages: 8,
        frag_db: false,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 32,
        bn: 16,
        bk: 32,
        warps_m: 2,
        warps_n: 1,
        stages: 4,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 64,
        bn: 16,
        bk: 64,
        warps_m: 4,
        warps_n: 1,
        stages: 4,
        frag_db: true,
        k_groups: 2,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 128,
        bn: 16,
        bk: 64,
        warps_m: 4,
        warps_n: 1,
        stages: 4,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
];

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
    KernelConfig {
        bs: 16,
        bn: 32,
        bk: 16,
        warps_m: 1,
        warps_n: 1,
        stages: 8,
        frag_db: false,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 32,
        bn: 32,
        bk: 32,
        warps_m: 2,
        warps_n: 1,
        stages: 4,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 64,
        bn: 32,
        bk: 64,
        warps_m: 4,
        warps_n: 1,
        stages: 4,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 128,
        bn: 32,
        bk: 64,
        warps_m: 4,
        warps_n: 1,
        stages: 4,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
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
pub const MID64_CONFIGS: [KernelConfig; 2] = [
    KernelConfig {
        bs: 64,
        bn: 64,
        bk: 64,
        warps_m: 4,
        warps_n: 1,
        stages: 4,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
    KernelConfig {
        bs: 128,
        bn: 64,
        bk: 64,
        warps_m: 4,
        warps_n: 1,
        stages: 4,
        frag_db: true,
        k_groups: 1,
        pipeline: Pipeline::CpAsync,
    },
];

/// The fewest columns a [`Tile::Mid64`] kernel is chosen for (up to 32, one tile of 32 columns suffices).
pub const MID64_MIN_N: usize = 33;

/// Configurations of the sm_90a kernels ([`Pipeline::TmaWgmma`], [`Module::Hopper`]), one per block size they
/// serve (64 and 128; the small blocks keep the sm_80 kernels): a 256-column N tile, BK 64, two consumer
/// warpgroups and as many ring stages as fit in the 227 KB of shared memory. bs 64: ping-pong, each warpgroup a
/// whole 64 x 256 tile (one `m64n256k16` per k16 step), the two alternating tiles; bs 128: both warpgroups on
/// one tile, stacked along M (64 x 256 each).
pub const HOPPER_CONFIGS: [KernelConfig; 2] = [
    KernelConfig {
        bs: 64,
        bn: 256,
        bk: 64,
        warps_m: 4,
        warps_n: 1,
        stages: 5,
        frag_db: false,
        k_groups: 1,
        pipeline: Pipeline::TmaWgmma { pingpong: true },
    },
    KernelConfig {
        bs: 128,
        bn: 256,
        bk: 64,
        warps_m: 8,
        warps_n: 1,
        stages: 4,
        frag_db: false,
        k_groups: 1,
        pipeline: Pipeline::TmaWgmma { pingpong: false },
    },
];

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
    KernelConfig {
        bs: 32,
        bn: 16,
        bk: DIRECT_CHUNK,
        warps_m: 8,
        warps_n: 1,
        stages: 4,
        frag_db: false,
        k_groups: 1,
        pipeline: Pipeline::Direct,
    },
    KernelConfig {
        bs: 64,
        bn: 16,
        bk: DIRECT_CHUNK,
        warps_m: 8,
        warps_n: 1,
        stages: 4,
        frag_db: false,
        k_groups: 1,
        pipeline: Pipeline::Direct,
    },
    KernelConfig {
        bs: 128,
        bn: 16,
        bk: DIRECT_CHUNK,
        warps_m: 4,
        warps_n: 1,
        stages: 4,
        frag_db: false,
        k_groups: 1,
        pipeline: Pipeline::Direct,
    },
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

// ---------------------------------------------------------------------------------------------------------------
// The kernel ABI: parameter structs and the variant table
// ---------------------------------------------------------------------------------------------------------------

/// Element type of C that a kernel writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OutType {
    /// f32.
    F32,
    /// f16 (IEEE binary16).
    F16,
    /// bf16 (bfloat16).
    Bf16,
}

impl OutType {
    /// "f32", "f16" or "bf16": the suffix of the entry point names.
    pub const fn name(self) -> &'static str {
        match self {
            OutType::F32 => "f32",
            OutType::F16 => "f16",
            OutType::Bf16 => "bf16",
        }
    }
}

/// Element type of A and B (and of the bias), multiplied on the tensor cores with f32 accumulation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InType {
    /// f16: `mma.sync.m16n8k16.f32.f16.f16.f32`.
    F16,
    /// bf16: `mma.sync.m16n8k16.f32.bf16.bf16.f32`.
    Bf16,
}

impl InType {
    /// "f16" or "bf16".
    pub const fn name(self) -> &'static str {
        match self {
            InType::F16 => "f16",
            InType::Bf16 => "bf16",
        }
    }
}

/// Storage order of a dense operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Layout {
    /// Element (r, c) at `r * ld + c`: rows contiguous, `ld >= cols`.
    #[default]
    RowMajor,
    /// Element (r, c) at `c * ld + r`: columns contiguous, `ld >= rows` (the transpose of a row-major matrix).
    ColMajor,
}

impl Layout {
    /// "row" or "col".
    pub const fn name(self) -> &'static str {
        match self {
            Layout::RowMajor => "row",
            Layout::ColMajor => "col",
        }
    }
    /// The other order (the layout of the transpose).
    pub const fn transposed(self) -> Layout {
        match self {
            Layout::RowMajor => Layout::ColMajor,
            Layout::ColMajor => Layout::RowMajor,
        }
    }
}

/// The activation of the fused epilogue, applied per element after the bias (the value is the kernels'
/// [`BsrSpmmParams::activation`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(u32)]
pub enum Activation {
    /// None: `f(x) = x`.
    #[default]
    Identity = 0,
    /// `max(x, 0)` (NaN stays NaN).
    Relu = 1,
    /// GELU, tanh approximation: `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))` (PyTorch's
    /// `gelu(approximate="tanh")`).
    GeluTanh = 2,
    /// SiLU (swish): `x / (1 + exp(-x))`.
    Silu = 3,
}

impl Activation {
    /// Every activation, in the order of their codes.
    pub const ALL: [Activation; 4] = [Activation::Identity, Activation::Relu, Activation::GeluTanh, Activation::Silu];
    /// "identity", "relu", "gelu_tanh" or "silu".
    pub const fn name(self) -> &'static str {
        match self {
            Activation::Identity => "identity",
            Activation::Relu => "relu",
            Activation::GeluTanh => "gelu_tanh",
            Activation::Silu => "silu",
        }
    }
}

/// The GPU architecture a PTX module targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// PTX ISA 8.0 for sm_80: cp.async + ldmatrix + mma.sync; JIT-compiled for any sm_80+ GPU.
    Sm80,
    /// PTX ISA 8.3 for sm_90a: TMA + mbarrier + wgmma + setmaxnreg; loads only on compute capability 9.0
    /// (H100 / H200).
    Sm90a,
}

/// The operation a kernel computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `C = act(alpha * (A @ B) + bias) + beta * C`, A in BSR, B and C dense; parameters [`BsrSpmmParams`].
    BsrSpmm,
}

/// Which PTX module a kernel is compiled into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Module {
    /// The product module (`sparsek_sm80.ptx`): one kernel per block size and output type.
    Product,
    /// The tuning module (`sparsek_sm80_tune.ptx`): every candidate of [`TUNE_CONFIGS`], f32 output.
    Tuning,
    /// The Hopper module (`sparsek_sm90a.ptx`): the [`HOPPER_CONFIGS`] kernels for bs 64 and 128, loaded next to
    /// the product module on sm_90a GPUs.
    Hopper,
}

/// One compiled kernel: its entry point and everything the host needs to launch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    /// Entry point name in the PTX (the kernels assert at compile time that they define exactly this name).
    pub name: &'static str,
    /// Target architecture.
    pub arch: Arch,
    /// Module it is compiled into.
    pub module: Module,
    /// Operation.
    pub op: Op,
    /// Block size of A.
    pub bs: u32,
    /// Element type of A and B.
    pub input: InType,
    /// Storage order of B the kernel reads (it decides the shared-memory tile and the `ldmatrix` form; C's order
    /// is a launch parameter).
    pub b_layout: Layout,
    /// Element type of C.
    pub out: OutType,
    /// Tile configuration (the launch's threads and dynamic shared memory derive from it).
    pub config: KernelConfig,
    /// Which N tile it is ([`Tile::Narrow`] kernels serve launches of at most [`NARROW_MAX_N`] columns,
    /// [`Tile::Decode`] kernels at most [`DECODE_MAX_N`]).
    pub tile: Tile,
}

impl Variant {
    /// `bar.sync` / `barrier.sync` instructions the kernel's PTX must hold: its configuration's
    /// ([`KernelConfig::expected_barriers`]), except the flat block-list kernels ([`Tile::Flat`], [`Tile::Flat32`],
    /// [`Tile::Flat64`]): the fragment double-buffered main loop's two and the two of the end's hand-over.
    pub const fn expected_barriers(&self) -> u32 {
        match self.tile {
            Tile::Flat | Tile::Flat64 | Tile::Flat32 => 4,
            _ => self.config.expected_barriers(),
        }
    }
}

const fn spmm(
    name: &'static str,
    module: Module,
    (input, b_layout, out): (InType, Layout, OutType),
    (config, tile): (KernelConfig, Tile),
) -> Variant {
    let arch = match config.pipeline {
        Pipeline::CpAsync | Pipeline::Direct => Arch::Sm80,
        Pipeline::TmaWgmma { .. } => Arch::Sm90a,
    };
    Variant { name, arch, module, op: Op::BsrSpmm, bs: config.bs, input, b_layout, out, config, tile }
}
const fn hopper(name: &'static str, input: InType, b_layout: Layout, out: OutType, bs: u32) -> Variant {
    match hopper_config_for(bs) {
        Some(config) => spmm(name, Module::Hopper, (input, b_layout, out), (config, Tile::Wide)),
        None => panic!("no sm_90a configuration for this block size"),
    }
}
const fn hopper_short(name: &'static str, input: InType, b_layout: Layout, out: OutType, bs: u32) -> Variant {
    match hopper_short_config_for(bs) {
        Some(config) => spmm(name, Module::Hopper, (input, b_layout, out), (config, Tile::ShortRows)),
        None => panic!("no sm_90a short-row configuration for this block size"),
    }
}
const fn product(name: &'static str, input: InType, b_layout: Layout, out: OutType, bs: u32) -> Variant {
    match config_for(bs) {
        Some(config) => spmm(name, Module::Product, (input, b_layout, out), (config, Tile::Wide)),
        None => panic!("no product configuration for this block size"),
    }
}
const fn narrow(name: &'static str, input: InType, b_layout: Layout, out: OutType, bs: u32) -> Variant {
    match narrow_config_for(bs) {
        Some(config) => spmm(name, Module::Product, (input, b_layout, out), (config, Tile::Narrow)),
        None => panic!("no narrow product configuration for this block size"),
    }
}
const fn mid(name: &'static str, input: InType, b_layout: Layout, out: OutType, bs: u32) -> Variant {
    match mid_config_for(bs) {
        Some(config) => spmm(name, Module::Product, (input, b_layout, out), (config, Tile::Mid)),
        None => panic!("no mid product configuration for this block size"),
    }
}
const fn mid64(name: &'static str, input: InType, b_layout: Layout, out: OutType, bs: u32) -> Variant {
    match mid64_config_for(bs) {
        Some(config) => spmm(name, Module::Product, (input, b_layout, out), (config, Tile::Mid64)),
        None => panic!("no wide mid product configuration for this block size"),
    }
}
/// A flat block-list kernel ([`Tile::Flat`], [`Tile::Flat32`] or [`Tile::Flat64`]): f16 inputs, row-major B, f32
/// C.
const fn flat(name: &'static str, bs: u32, tile: Tile) -> Variant {
    let config = match tile {
        Tile::Flat => flat_config_for(bs),
        Tile::Flat32 => flat32_config_for(bs),
        Tile::Flat64 => flat64_config_for(bs),
        _ => None,
    };
    match config {
        Some(config) => spmm(name, Module::Product, (InType::F16, Layout::RowMajor, OutType::F32), (config, tile)),
        None => panic!("no flat block-list configuration of this tile for this block size"),
    }
}
const fn decode(name: &'static str, input: InType, b_layout: Layout, out: OutType, bs: u32) -> Variant {
    match decode_config_for(bs) {
        Some(config) => spmm(name, Module::Product, (input, b_layout, out), (config, Tile::Decode)),
        None => panic!("no decode configuration for this block size"),
    }
}
const fn tuning(name: &'static str, i: usize) -> Variant {
    // A tuning candidate is measured at every N; its tile is recorded by width for the tuner's report.
    let tile = if TUNE_CONFIGS[i].bn <= 32 { Tile::Narrow } else { Tile::Wide };
    spmm(name, Module::Tuning, (InType::F16, Layout::RowMajor, OutType::F32), (TUNE_CONFIGS[i], tile))
}

/// Every kernel the build compiles, product and tuning modules alike. The kernels define their entry points from
/// this table (and fail to build if a name differs); the host loads and launches them from it. Product entry
/// points are named `sparsek_bsr_bs<bs>_<input>_b<row|col>_<out>`: one per block size, input type, B order and
/// output type (f32, or the input's own 16-bit type); the narrow-tile kernels (block sizes with a
/// [`NARROW_CONFIGS`] entry) add the suffix `_n16`, the mid-tile kernels ([`MID_CONFIGS`]) `_n32`, the wide
/// mid-tile ones ([`MID64_CONFIGS`]) `_n64`, the decode kernels ([`DECODE_CONFIGS`]) `_dec`. The sm_90a kernels
/// are named `sparsek_sm90_bs<bs>_...` the same way, those for short rows ([`HOPPER_SHORT_CONFIGS`], f32 C) with
/// the suffix `_short`.
pub const VARIANTS: [Variant; 188] = [
    product("sparsek_bsr_bs16_f16_brow_f32", InType::F16, Layout::RowMajor, OutType::F32, 16),
    product("sparsek_bsr_bs32_f16_brow_f32", InType::F16, Layout::RowMajor, OutType::F32, 32),
    product("sparsek_bsr_bs64_f16_brow_f32", InType::F16, Layout::RowMajor, OutType::F32, 64),
    product("sparsek_bsr_bs128_f16_brow_f32", InType::F16, Layout::RowMajor, OutType::F32, 128),
    product("sparsek_bsr_bs16_f16_brow_f16", InType::F16, Layout::RowMajor, OutType::F16, 16),
    product("sparsek_bsr_bs32_f16_brow_f16", InType::F16, Layout::RowMajor, OutType::F16, 32),
    product("sparsek_bsr_bs64_f16_brow_f16", InType::F16, Layout::RowMajor, OutType::F16, 64),
    product("sparsek_bsr_bs128_f16_brow_f16", InType::F16, Layout::RowMajor, OutType::F16, 128),
    product("sparsek_bsr_bs16_f16_bcol_f32", InType::F16, Layout::ColMajor, OutType::F32, 16),
    product("sparsek_bsr_bs32_f16_bcol_f32", InType::F16, Layout::ColMajor, OutType::F32, 32),
    product("sparsek_bsr_bs64_f16_bcol_f32", InType::F16, Layout::ColMajor, OutType::F32, 64),
    product("sparsek_bsr_bs128_f16_bcol_f32", InType::F16, Layout::ColMajor, OutType::F32, 128),
    product("sparsek_bsr_bs16_f16_bcol_f16", InType::F16, Layout::ColMajor, OutType::F16, 16),
    product("sparsek_bsr_bs32_f16_bcol_f16", InType::F16, Layout::ColMajor, OutType::F16, 32),
    product("sparsek_bsr_bs64_f16_bcol_f16", InType::F16, Layout::ColMajor, OutType::F16, 64),
    product("sparsek_bsr_bs128_f16_bcol_f16", InType::F16, Layout::ColMajor, OutType::F16, 128),
    product("sparsek_bsr_bs16_bf16_brow_f32", InType::Bf16, Layout::RowMajor, OutType::F32, 16),
    product("sparsek_bsr_bs32_bf16_brow_f32", InType::Bf16, Layout::RowMajor, OutType::F32, 32),
    product("sparsek_bsr_bs64_bf16_brow_f32", InType::Bf16, Layout::RowMajor, OutType::F32, 64),
    product("sparsek_bsr_bs128_bf16_brow_f32", InType::Bf16, Layout::RowMajor, OutType::F32, 128),
    product("sparsek_bsr_bs16_bf16_brow_bf16", InType::Bf16, Layout::RowMajor, OutType::Bf16, 16),
    product("sparsek_bsr_bs32_bf16_brow_bf16", InType::Bf16, Layout::RowMajor, OutType::Bf16, 32),
    product("sparsek_bsr_bs64_bf16_brow_bf16", InType::Bf16, Layout::RowMajor, OutType::Bf16, 64),
    product("sparsek_bsr_bs128_bf16_brow_bf16", InType::Bf16, Layout::RowMajor, OutType::Bf16, 128),
    product("sparsek_bsr_bs16_bf16_bcol_f32", InType::Bf16, Layout::ColMajor, OutType::F32, 16),
    product("sparsek_bsr_bs32_bf16_bcol_f32", InType::Bf16, Layout::ColMajor, OutType::F32, 32),
    product("sparsek_bsr_bs64_bf16_bcol_f32", InType::Bf16, Layout::ColMajor, OutType::F32, 64),
    product("sparsek_bsr_bs128_bf16_bcol_f32", InType::Bf16, Layout::ColMajor, OutType::F32, 128),
    product("sparsek_bsr_bs16_bf16_bcol_bf16", InType::Bf16, Layout::ColMajor, OutType::Bf16, 16),
    product("sparsek_bsr_bs32_bf16_bcol_bf16", InType::Bf16, Layout::ColMajor, OutType::Bf16, 32),
    product("sparsek_bsr_bs64_bf16_bcol_bf16", InType::Bf16, Layout::ColMajor, OutType::Bf16, 64),
    product("sparsek_bsr_bs128_bf16_bcol_bf16", InType::Bf16, Layout::ColMajor, OutType::Bf16, 128),
    narrow("sparsek_bsr_bs16_f16_brow_f32_n16", InType::F16, Layout::RowMajor, OutType::F32, 16),
    narrow("sparsek_bsr_bs32_f16_brow_f32_n16", InType::F16, Layout::RowMajor, OutType::F32, 32),
    narrow("sparsek_bsr_bs64_f16_brow_f32_n16", InType::F16, Layout::RowMajor, OutType::F32, 64),
    narrow("sparsek_bsr_bs128_f16_brow_f32_n16", InType::F16, Layout::RowMajor, OutType::F32, 128),
    narrow("sparsek_bsr_bs16_f16_brow_f16_n16", InType::F16, Layout::RowMajor, OutType::F16, 16),
    narrow("sparsek_bsr_bs32_f16_brow_f16_n16", InType::F16, Layout::RowMajor, OutType::F16, 32),
    narrow("sparsek_bsr_bs64_f16_brow_f16_n16", InType::F16, Layout::RowMajor, OutType::F16, 64),
    narrow("sparsek_bsr_bs128_f16_brow_f16_n16", InType::F16, Layout::RowMajor, OutType::F16, 128),
    narrow("sparsek_bsr_bs16_f16_bcol_f32_n16", InType::F16, Layout::ColMajor, OutType::F32, 16),
    narrow("sparsek_bsr_bs32_f16_bcol_f32_n16", InType::F16, Layout::ColMajor, OutType::F32, 32),
    narrow("sparsek_bsr_bs64_f16_bcol_f32_n16", InType::F16, Layout::ColMajor, OutType::F32, 64),
    narrow("sparsek_bsr_bs128_f16_bcol_f32_n16", InType::F16, Layout::ColMajor, OutType::F32, 128),
    narrow("sparsek_bsr_bs16_f16_bcol_f16_n16", InType::F16, Layout::ColMajor, OutType::F16, 16),
    narrow("sparsek_bsr_bs32_f16_bcol_f16_n16", InType::F16, Layout::ColMajor, OutType::F16, 32),
    narrow("sparsek_bsr_bs64_f16_bcol_f16_n16", InType::F16, Layout::ColMajor, OutType::F16, 64),
    narrow("sparsek_bsr_bs128_f16_bcol_f16_n16", InType::F16, Layout::ColMajor, OutType::F16, 128),
    narrow("sparsek_bsr_bs16_bf16_brow_f32_n16", InType::Bf16, Layout::RowMajor, OutType::F32, 16),
    narrow("sparsek_bsr_bs32_bf16_brow_f32_n16", InType::Bf16, Layout::RowMajor, OutType::F32, 32),
    narrow("sparsek_bsr_bs64_bf16_brow_f32_n16", InType::Bf16, Layout::RowMajor, OutType::F32, 64),
    narrow("sparsek_bsr_bs128_bf16_brow_f32_n16", InType::Bf16, Layout::RowMajor, OutType::F32, 128),
    narrow("sparsek_bsr_bs16_bf16_brow_bf16_n16", InType::Bf16, Layout::RowMajor, OutType::Bf16, 16),
    narrow("sparsek_bsr_bs32_bf16_brow_bf16_n16", InType::Bf16, Layout::RowMajor, OutType::Bf16, 32),
    narrow("sparsek_bsr_bs64_bf16_brow_bf16_n16", InType::Bf16, Layout::RowMajor, OutType::Bf16, 64),
    narrow("sparsek_bsr_bs128_bf16_brow_bf16_n16", InType::Bf16, Layout::RowMajor, OutType::Bf16, 128),
    narrow("sparsek_bsr_bs16_bf16_bcol_f32_n16", InType::Bf16, Layout::ColMajor, OutType::F32, 16),
    narrow("sparsek_bsr_bs32_bf16_bcol_f32_n16", InType::Bf16, Layout::ColMajor, OutType::F32, 32),
    narrow("sparsek_bsr_bs64_bf16_bcol_f32_n16", InType::Bf16, Layout::ColMajor, OutType::F32, 64),
    narrow("sparsek_bsr_bs128_bf16_bcol_f32_n16", InType::Bf16, Layout::ColMajor, OutType::F32, 128),
    narrow("sparsek_bsr_bs16_bf16_bcol_bf16_n16", InType::Bf16, Layout::ColMajor, OutType::Bf16, 16),
    narrow("sparsek_bsr_bs32_bf16_bcol_bf16_n16", InType::Bf16, Layout::ColMajor, OutType::Bf16, 32),
    narrow("sparsek_bsr_bs64_bf16_bcol_bf16_n16", InType::Bf16, Layout::ColMajor, OutType::Bf16, 64),
    narrow("sparsek_bsr_bs128_bf16_bcol_bf16_n16", InType::Bf16, Layout::ColMajor, OutType::Bf16, 128),
    mid("sparsek_bsr_bs16_f16_brow_f32_n32", InType::F16, Layout::RowMajor, OutType::F32, 16),
    mid("sparsek_bsr_bs16_f16_brow_f16_n32", InType::F16, Layout::RowMajor, OutType::F16, 16),
    mid("sparsek_bsr_bs16_f16_bcol_f32_n32", InType::F16, Layout::ColMajor, OutType::F32, 16),
    mid("sparsek_bsr_bs16_f16_bcol_f16_n32", InType::F16, Layout::ColMajor, OutType::F16, 16),
    mid("sparsek_bsr_bs16_bf16_brow_f32_n32", InType::Bf16, Layout::RowMajor, OutType::F32, 16),
    mid("sparsek_bsr_bs16_bf16_brow_bf16_n32", InType::Bf16, Layout::RowMajor, OutType::Bf16, 16),
    mid("sparsek_bsr_bs16_bf16_bcol_f32_n32", InType::Bf16, Layout::ColMajor, OutType::F32, 16),
    mid("sparsek_bsr_bs16_bf16_bcol_bf16_n32", InType::Bf16, Layout::ColMajor, OutType::Bf16, 16),
    mid("sparsek_bsr_bs32_f16_brow_f32_n32", InType::F16, Layout::RowMajor, OutType::F32, 32),
    mid("sparsek_bsr_bs32_f16_brow_f16_n32", InType::F16, Layout::RowMajor, OutType::F16, 32),
    mid("sparsek_bsr_bs32_f16_bcol_f32_n32", InType::F16, Layout::ColMajor, OutType::F32, 32),
    mid("sparsek_bsr_bs32_f16_bcol_f16_n32", InType::F16, Layout::ColMajor, OutType::F16, 32),
    mid("sparsek_bsr_bs32_bf16_brow_f32_n32", InType::Bf16, Layout::RowMajor, OutType::F32, 32),
    mid("sparsek_bsr_bs32_bf16_brow_bf16_n32", InType::Bf16, Layout::RowMajor, OutType::Bf16, 32),
    mid("sparsek_bsr_bs32_bf16_bcol_f32_n32", InType::Bf16, Layout::ColMajor, OutType::F32, 32),
    mid("sparsek_bsr_bs32_bf16_bcol_bf16_n32", InType::Bf16, Layout::ColMajor, OutType::Bf16, 32),
    mid("sparsek_bsr_bs64_f16_brow_f32_n32", InType::F16, Layout::RowMajor, OutType::F32, 64),
    mid("sparsek_bsr_bs128_f16_brow_f32_n32", InType::F16, Layout::RowMajor, OutType::F32, 128),
    mid("sparsek_bsr_bs64_f16_brow_f16_n32", InType::F16, Layout::RowMajor, OutType::F16, 64),
    mid("sparsek_bsr_bs128_f16_brow_f16_n32", InType::F16, Layout::RowMajor, OutType::F16, 128),
    mid("sparsek_bsr_bs64_f16_bcol_f32_n32", InType::F16, Layout::ColMajor, OutType::F32, 64),
    mid("sparsek_bsr_bs128_f16_bcol_f32_n32", InType::F16, Layout::ColMajor, OutType::F32, 128),
    mid("sparsek_bsr_bs64_f16_bcol_f16_n32", InType::F16, Layout::ColMajor, OutType::F16, 64),
    mid("sparsek_bsr_bs128_f16_bcol_f16_n32", InType::F16, Layout::ColMajor, OutType::F16, 128),
    mid("sparsek_bsr_bs64_bf16_brow_f32_n32", InType::Bf16, Layout::RowMajor, OutType::F32, 64),
    mid("sparsek_bsr_bs128_bf16_brow_f32_n32", InType::Bf16, Layout::RowMajor, OutType::F32, 128),
    mid("sparsek_bsr_bs64_bf16_brow_bf16_n32", InType::Bf16, Layout::RowMajor, OutType::Bf16, 64),
    mid("sparsek_bsr_bs128_bf16_brow_bf16_n32", InType::Bf16, Layout::RowMajor, OutType::Bf16, 128),
    mid("sparsek_bsr_bs64_bf16_bcol_f32_n32", InType::Bf16, Layout::ColMajor, OutType::F32, 64),
    mid("sparsek_bsr_bs128_bf16_bcol_f32_n32", InType::Bf16, Layout::ColMajor, OutType::F32, 128),
    mid("sparsek_bsr_bs64_bf16_bcol_bf16_n32", InType::Bf16, Layout::ColMajor, OutType::Bf16, 64),
    mid("sparsek_bsr_bs128_bf16_bcol_bf16_n32", InType::Bf16, Layout::ColMajor, OutType::Bf16, 128),
    mid64("sparsek_bsr_bs64_f16_brow_f32_n64", InType::F16, Layout::RowMajor, OutType::F32, 64),
    mid64("sparsek_bsr_bs64_f16_brow_f16_n64", InType::F16, Layout::RowMajor, OutType::F16, 64),
    mid64("sparsek_bsr_bs64_f16_bcol_f32_n64", InType::F16, Layout::ColMajor, OutType::F32, 64),
    mid64("sparsek_bsr_bs64_f16_bcol_f16_n64", InType::F16, Layout::ColMajor, OutType::F16, 64),
    mid64("sparsek_bsr_bs64_bf16_brow_f32_n64", InType::Bf16, Layout::RowMajor, OutType::F32, 64),
    mid64("sparsek_bsr_bs64_bf16_brow_bf16_n64", InType::Bf16, Layout::RowMajor, OutType::Bf16, 64),
    mid64("sparsek_bsr_bs64_bf16_bcol_f32_n64", InType::Bf16, Layout::ColMajor, OutType::F32, 64),
    mid64("sparsek_bsr_bs64_bf16_bcol_bf16_n64", InType::Bf16, Layout::ColMajor, OutType::Bf16, 64),
    mid64("sparsek_bsr_bs128_f16_brow_f32_n64", InType::F16, Layout::RowMajor, OutType::F32, 128),
    mid64("sparsek_bsr_bs128_f16_brow_f16_n64", InType::F16, Layout::RowMajor, OutType::F16, 128),
    mid64("sparsek_bsr_bs128_f16_bcol_f32_n64", InType::F16, Layout::ColMajor, OutType::F32, 128),
    mid64("sparsek_bsr_bs128_f16_bcol_f16_n64", InType::F16, Layout::ColMajor, OutType::F16, 128),
    mid64("sparsek_bsr_bs128_bf16_brow_f32_n64", InType::Bf16, Layout::RowMajor, OutType::F32, 128),
    mid64("sparsek_bsr_bs128_bf16_brow_bf16_n64", InType::Bf16, Layout::RowMajor, OutType::Bf16, 128),
    mid64("sparsek_bsr_bs128_bf16_bcol_f32_n64", InType::Bf16, Layout::ColMajor, OutType::F32, 128),
    mid64("sparsek_bsr_bs128_bf16_bcol_bf16_n64", InType::Bf16, Layout::ColMajor, OutType::Bf16, 128),
    tuning("sparsek_tune_0", 0),
    tuning("sparsek_tune_1", 1),
    tuning("sparsek_tune_2", 2),
    tuning("sparsek_tune_3", 3),
    tuning("sparsek_tune_4", 4),
    tuning("sparsek_tune_5", 5),
    tuning("sparsek_tune_6", 6),
    tuning("sparsek_tune_7", 7),
    tuning("sparsek_tune_8", 8),
    tuning("sparsek_tune_9", 9),
    tuning("sparsek_tune_10", 10),
    tuning("sparsek_tune_11", 11),
    tuning("sparsek_tune_12", 12),
    tuning("sparsek_tune_13", 13),
    tuning("sparsek_tune_14", 14),
    tuning("sparsek_tune_15", 15),
    tuning("sparsek_tune_16", 16),
    tuning("sparsek_tune_17", 17),
    tuning("sparsek_tune_18", 18),
    tuning("sparsek_tune_19", 19),
    tuning("sparsek_tune_20", 20),
    tuning("sparsek_tune_21", 21),
    tuning("sparsek_tune_22", 22),
    tuning("sparsek_tune_23", 23),
    tuning("sparsek_tune_24", 24),
    tuning("sparsek_tune_25", 25),
    tuning("sparsek_tune_26", 26),
    tuning("sparsek_tune_27", 27),
    decode("sparsek_bsr_bs32_f16_brow_f32_dec", InType::F16, Layout::RowMajor, OutType::F32, 32),
    decode("sparsek_bsr_bs64_f16_brow_f32_dec", InType::F16, Layout::RowMajor, OutType::F32, 64),
    decode("sparsek_bsr_bs128_f16_brow_f32_dec", InType::F16, Layout::RowMajor, OutType::F32, 128),
    decode("sparsek_bsr_bs32_f16_brow_f16_dec", InType::F16, Layout::RowMajor, OutType::F16, 32),
    decode("sparsek_bsr_bs64_f16_brow_f16_dec", InType::F16, Layout::RowMajor, OutType::F16, 64),
    decode("sparsek_bsr_bs128_f16_brow_f16_dec", InType::F16, Layout::RowMajor, OutType::F16, 128),
    decode("sparsek_bsr_bs32_f16_bcol_f32_dec", InType::F16, Layout::ColMajor, OutType::F32, 32),
    decode("sparsek_bsr_bs64_f16_bcol_f32_dec", InType::F16, Layout::ColMajor, OutType::F32, 64),
    decode("sparsek_bsr_bs128_f16_bcol_f32_dec", InType::F16, Layout::ColMajor, OutType::F32, 128),
    decode("sparsek_bsr_bs32_f16_bcol_f16_dec", InType::F16, Layout::ColMajor, OutType::F16, 32),
    decode("sparsek_bsr_bs64_f16_bcol_f16_dec", InType::F16, Layout::ColMajor, OutType::F16, 64),
    decode("sparsek_bsr_bs128_f16_bcol_f16_dec", InType::F16, Layout::ColMajor, OutType::F16, 128),
    decode("sparsek_bsr_bs32_bf16_brow_f32_dec", InType::Bf16, Layout::RowMajor, OutType::F32, 32),
    decode("sparsek_bsr_bs64_bf16_brow_f32_dec", InType::Bf16, Layout::RowMajor, OutType::F32, 64),
    decode("sparsek_bsr_bs128_bf16_brow_f32_dec", InType::Bf16, Layout::RowMajor, OutType::F32, 128),
    decode("sparsek_bsr_bs32_bf16_brow_bf16_dec", InType::Bf16, Layout::RowMajor, OutType::Bf16, 32),
    decode("sparsek_bsr_bs64_bf16_brow_bf16_dec", InType::Bf16, Layout::RowMajor, OutType::Bf16, 64),
    decode("sparsek_bsr_bs128_bf16_brow_bf16_dec", InType::Bf16, Layout::RowMajor, OutType::Bf16, 128),
    decode("sparsek_bsr_bs32_bf16_bcol_f32_dec", InType::Bf16, Layout::ColMajor, OutType::F32, 32),
    decode("sparsek_bsr_bs64_bf16_bcol_f32_dec", InType::Bf16, Layout::ColMajor, OutType::F32, 64),
    decode("sparsek_bsr_bs128_bf16_bcol_f32_dec", InType::Bf16, Layout::ColMajor, OutType::F32, 128),
    decode("sparsek_bsr_bs32_bf16_bcol_bf16_dec", InType::Bf16, Layout::ColMajor, OutType::Bf16, 32),
    decode("sparsek_bsr_bs64_bf16_bcol_bf16_dec", InType::Bf16, Layout::ColMajor, OutType::Bf16, 64),
    decode("sparsek_bsr_bs128_bf16_bcol_bf16_dec", InType::Bf16, Layout::ColMajor, OutType::Bf16, 128),
    flat("sparsek_bsr_bs64_f16_brow_f32_flat", 64, Tile::Flat),
    flat("sparsek_bsr_bs128_f16_brow_f32_flat", 128, Tile::Flat),
    flat("sparsek_bsr_bs64_f16_brow_f32_flat64", 64, Tile::Flat64),
    flat("sparsek_bsr_bs64_f16_brow_f32_flat32", 64, Tile::Flat32),
    hopper("sparsek_sm90_bs64_f16_brow_f32", InType::F16, Layout::RowMajor, OutType::F32, 64),
    hopper("sparsek_sm90_bs128_f16_brow_f32", InType::F16, Layout::RowMajor, OutType::F32, 128),
    hopper("sparsek_sm90_bs64_f16_brow_f16", InType::F16, Layout::RowMajor, OutType::F16, 64),
    hopper("sparsek_sm90_bs128_f16_brow_f16", InType::F16, Layout::RowMajor, OutType::F16, 128),
    hopper("sparsek_sm90_bs64_f16_bcol_f32", InType::F16, Layout::ColMajor, OutType::F32, 64),
    hopper("sparsek_sm90_bs128_f16_bcol_f32", InType::F16, Layout::ColMajor, OutType::F32, 128),
    hopper("sparsek_sm90_bs64_f16_bcol_f16", InType::F16, Layout::ColMajor, OutType::F16, 64),
    hopper("sparsek_sm90_bs128_f16_bcol_f16", InType::F16, Layout::ColMajor, OutType::F16, 128),
    hopper("sparsek_sm90_bs64_bf16_brow_f32", InType::Bf16, Layout::RowMajor, OutType::F32, 64),
    hopper("sparsek_sm90_bs128_bf16_brow_f32", InType::Bf16, Layout::RowMajor, OutType::F32, 128),
    hopper("sparsek_sm90_bs64_bf16_brow_bf16", InType::Bf16, Layout::RowMajor, OutType::Bf16, 64),
    hopper("sparsek_sm90_bs128_bf16_brow_bf16", InType::Bf16, Layout::RowMajor, OutType::Bf16, 128),
    hopper("sparsek_sm90_bs64_bf16_bcol_f32", InType::Bf16, Layout::ColMajor, OutType::F32, 64),
    hopper("sparsek_sm90_bs128_bf16_bcol_f32", InType::Bf16, Layout::ColMajor, OutType::F32, 128),
    hopper("sparsek_sm90_bs64_bf16_bcol_bf16", InType::Bf16, Layout::ColMajor, OutType::Bf16, 64),
    hopper("sparsek_sm90_bs128_bf16_bcol_bf16", InType::Bf16, Layout::ColMajor, OutType::Bf16, 128),
    hopper_short("sparsek_sm90_bs64_f16_brow_f32_short", InType::F16, Layout::RowMajor, OutType::F32, 64),
    hopper_short("sparsek_sm90_bs64_f16_bcol_f32_short", InType::F16, Layout::ColMajor, OutType::F32, 64),
    hopper_short("sparsek_sm90_bs64_bf16_brow_f32_short", InType::Bf16, Layout::RowMajor, OutType::F32, 64),
    hopper_short("sparsek_sm90_bs64_bf16_bcol_f32_short", InType::Bf16, Layout::ColMajor, OutType::F32, 64),
];

/// The variant named `name` (a compile-time lookup for the kernels' entry points).
pub const fn variant(name: &str) -> Variant {
    let mut i = 0;
    while i < VARIANTS.len() {
        if str_eq(VARIANTS[i].name, name) {
            return VARIANTS[i];
        }
        i += 1;
    }
    panic!("no variant of this name in layout::VARIANTS")
}

/// `a == b` in a `const fn`.
pub const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The parameters of every [`Op::BsrSpmm`] kernel, passed by value as the kernel's one argument (a `.param`
/// struct). Pointers are device addresses (`CUdeviceptr`); the kernel casts them to its element types.
///
/// The kernel computes `C = act(alpha * (A @ B) + bias) + beta * C` (bias per row of C, i.e. per row of A; C not
/// read when `beta == 0`), accumulating in f32.
///
/// Preconditions (the host launcher checks what it can before every launch; the rest is the contract of the
/// caller's structure): `row_ptr`/`col_idx` hold a valid BSR structure of `block_rows` block rows (32- or 64-bit
/// entries per `index64`, every value below 2^32); `row_order` is 0 or a permutation of the block rows (u32);
/// `b` and `c` are 16-byte aligned with leading dimensions that are multiples of 16 bytes, B holding `K` rows of
/// `ldb >= n` elements (row-major kernels) or `n` rows of `ldb >= K` elements (column-major kernels), C holding
/// `M` rows of `ldc >= n` (`c_col_major == 0`) or `n` rows of `ldc >= M` elements; `bias` is 0 or `M` elements of
/// the input type; `n >= 1`; the grid is 1-D with `block_rows * ceil(n / BN)` CTAs of
/// [`KernelConfig::threads`] threads and [`KernelConfig::smem_bytes`] of dynamic shared memory.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BsrSpmmParams {
    /// A's values: `nnzb` blocks of `bs * bs` elements of the input type, each row-major.
    pub a_values: u64,
    /// A's block-row pointers: `block_rows + 1` u32 or u64 (`index64`).
    pub row_ptr: u64,
    /// A's block-column indices: `nnzb` u32 or u64 (`index64`).
    pub col_idx: u64,
    /// Block rows in the order the CTAs take them (longest first): `block_rows` u32; 0 = natural order.
    pub row_order: u64,
    /// B: `K x n` of the input type, row-major or column-major (the kernel's [`Variant::b_layout`]).
    pub b: u64,
    /// C: `M x n` f32, f16 or bf16 (the kernel's [`OutType`]), row- or column-major (`c_col_major`).
    pub c: u64,
    /// The bias: `M` elements of the input type, added per row of C; 0 = no bias.
    pub bias: u64,
    /// B's leading dimension in elements.
    pub ldb: u32,
    /// C's leading dimension in elements.
    pub ldc: u32,
    /// Columns of B and C.
    pub n: u32,
    /// Block rows of A (`M / bs`).
    pub block_rows: u32,
    /// Rasterization group, in block rows (see [`raster`]).
    pub group_rows: u32,
    /// Scale of the product.
    pub alpha: f32,
    /// Scale of the old C (0: C is not read).
    pub beta: f32,
    /// 1: `row_ptr` and `col_idx` hold 64-bit entries (PyTorch's int64); 0: 32-bit.
    pub index64: u32,
    /// 1: C is column-major; 0: row-major.
    pub c_col_major: u32,
    /// The epilogue's [`Activation`], as its code.
    pub activation: u32,
    /// Split rows ([`KernelConfig::splits_rows`] kernels only; 1 everywhere else): the most CTAs a block row is
    /// split into. The grid has `block_rows * split_chunks * n_tiles` CTAs; row `r` of `len` blocks is split into
    /// [`split_parts`]`(len, split_blocks, split_chunks)` equal ranges of consecutive blocks, one CTA each, and the
    /// CTAs beyond that exit at once. A row of one part is computed as without a split.
    pub split_chunks: u32,
    /// Split rows: the blocks a part should hold (at least 1).
    pub split_blocks: u32,
    /// Split rows: the partial tiles, f32, [`split_slot`] by [`KernelConfig::split_slot_bytes`] bytes each, for
    /// `n_tiles` N tiles; 0 when `split_chunks` is 1.
    pub split_partials: u64,
    /// Split rows: one u32 counter per (block row, N tile), `block_rows * n_tiles`, zero before the launch; the
    /// CTA that finishes a row's tile last adds the parts in order, writes C and sets the counter back to zero.
    pub split_counters: u64,
    /// The flat block list ([`Tile::Flat`] kernels only; 0 everywhere else): `G`, the CTAs per N tile. The grid
    /// has `G * n_tiles` CTAs; CTA `c` of N tile `t` (`blockIdx.x = t * G + c`) multiplies the blocks
    /// [`flat_range`]`(c)` of A's flat block list, across row boundaries, with one ring. A row cut by a range
    /// boundary is summed from its pieces through the split workspace (`split_partials`: two
    /// [`KernelConfig::split_slot_bytes`] slots per CTA and N tile, [`flat_slot`]; `split_counters`: one per CTA and
    /// N tile, [`flat_counter`], zero before the launch). Needs `1 <= G <= nnzb`, so every CTA holds a block.
    pub flat_ctas: u32,
    /// A's nonzero blocks, `row_ptr[block_rows]` (the flat block list cuts it without a load).
    pub nnzb: u32,
}

/// The flat block list: the blocks `[c * nnzb / ctas, (c + 1) * nnzb / ctas)` of CTA `c` of `ctas`.
#[inline(always)]
pub const fn flat_range(c: u32, ctas: u32, nnzb: u32) -> (u32, u32) {
    let (nnzb, ctas) = (nnzb as u64, ctas as u64);
    ((c as u64 * nnzb / ctas) as u32, ((c as u64 + 1) * nnzb / ctas) as u32)
}

/// The flat block list: the CTA of `ctas` whose [`flat_range`] holds block `blk` (< `nnzb`, `1 <= ctas <=
/// nnzb`): the largest `c` with `c * nnzb / ctas <= blk`, which is `ceil((blk + 1) * ctas / nnzb) - 1`.
#[inline(always)]
pub const fn flat_cta_of(blk: u32, ctas: u32, nnzb: u32) -> u32 {
    ((blk as u64 + 1) * ctas as u64).div_ceil(nnzb as u64) as u32 - 1
}

/// The flat block list: the partial-tile slot of CTA `cta`'s piece of a cut row in N tile `n_tile` of `n_tiles`:
/// `tail` for the piece that starts a row (piece 0, in the row's first CTA), else the piece that continues a row
/// begun by an earlier CTA (every CTA has at most one of each). Below `2 * ctas * n_tiles`.
#[inline(always)]
pub const fn flat_slot(cta: u32, tail: bool, n_tile: u32, n_tiles: u32) -> u64 {
    (cta as u64 * 2 + tail as u64) * n_tiles as u64 + n_tile as u64
}

/// The flat block list: the counter of the cut row whose first piece CTA `cta` holds (each CTA starts at most
/// one cut row), in N tile `n_tile` of `n_tiles`. Below `ctas * n_tiles`.
#[inline(always)]
pub const fn flat_counter(cta: u32, n_tile: u32, n_tiles: u32) -> u64 {
    cta as u64 * n_tiles as u64 + n_tile as u64
}

/// Split rows on the sm_90a kernels: the rows of tiles a launch walks, `block_rows` plus `split_chunks - 1` more for
/// each of the first `split_rows` positions of the row order ([`HopperSpmmParams::split_rows`]).
#[inline(always)]
pub const fn hopper_virtual_rows(block_rows: u32, split_rows: u32, split_chunks: u32) -> u32 {
    block_rows + split_rows * split_chunks.saturating_sub(1)
}

/// Split rows on the sm_90a kernels: virtual row `vpos` (of [`hopper_virtual_rows`]) as (position in the row order,
/// part, split?): the first `split_rows * split_chunks` are `split_chunks` consecutive parts of each of the first
/// `split_rows` positions, the rest the other positions whole.
#[inline(always)]
pub const fn hopper_virtual_row(vpos: u32, split_rows: u32, split_chunks: u32) -> (u32, u32, bool) {
    let prefix = split_rows * split_chunks;
    if vpos < prefix {
        match (vpos.checked_div(split_chunks), vpos.checked_rem(split_chunks)) {
            (Some(pos), Some(part)) => (pos, part, true),
            _ => (vpos, 0, false),
        }
    } else {
        (vpos - prefix + split_rows, 0, false)
    }
}

/// Split rows on the sm_90a kernels: the counter of consumer warp `warp` (of `tile_warps`) of position `pos`'s
/// N tile `n_tile` (of `n_tiles`), below `split_rows * n_tiles * tile_warps`.
#[inline(always)]
pub const fn hopper_split_counter(pos: u32, n_tile: u32, n_tiles: u32, warp: u32, tile_warps: u32) -> u64 {
    (pos as u64 * n_tiles as u64 + n_tile as u64) * tile_warps as u64 + warp as u64
}

/// Split rows on the sm_90a kernels: the partial-tile slot of part `part` (of `split_chunks`) of position `pos` (of
/// the `split_rows` split ones) in N tile `n_tile` (of `n_tiles`), below `split_rows * split_chunks * n_tiles`.
#[inline(always)]
pub const fn hopper_split_slot(pos: u32, part: u32, split_chunks: u32, n_tile: u32, n_tiles: u32) -> u64 {
    (pos as u64 * split_chunks as u64 + part as u64) * n_tiles as u64 + n_tile as u64
}

/// Split rows: the parts of a block row of `len` blocks, `ceil(len / split_blocks)` clamped to
/// `1..=split_chunks`.
#[inline(always)]
pub const fn split_parts(len: u32, split_blocks: u32, split_chunks: u32) -> u32 {
    let parts = match len.checked_div(split_blocks) {
        Some(q) => q + !len.is_multiple_of(split_blocks) as u32,
        None => 1,
    };
    if parts < 1 {
        1
    } else if parts > split_chunks {
        split_chunks
    } else {
        parts
    }
}

/// Split rows: the partial-tile slot of part `part` of block row `block_row`, whose first block is `row_begin`,
/// in N tile `n_tile` of `n_tiles`: `(row_begin / split_blocks + block_row + part) * n_tiles + n_tile`. Distinct
/// for every (row, part, tile), and below [`split_slots`]`(nnzb, block_rows, split_blocks, n_tiles)`: a row of
/// `len` blocks has at most `ceil(len / split_blocks)` parts, and `floor((b + len) / c) - floor(b / c) + 1 >=
/// ceil(len / c)`.
#[inline(always)]
pub const fn split_slot(
    row_begin: u32,
    block_row: u32,
    part: u32,
    split_blocks: u32,
    n_tile: u32,
    n_tiles: u32,
) -> u64 {
    let base = match row_begin.checked_div(split_blocks) {
        Some(q) => q as u64,
        None => 0,
    };
    (base + block_row as u64 + part as u64) * n_tiles as u64 + n_tile as u64
}

/// Split rows: the partial-tile slots a launch needs, `(nnzb / split_blocks + block_rows) * n_tiles`.
pub const fn split_slots(nnzb: u64, block_rows: u64, split_blocks: u64, n_tiles: u64) -> u64 {
    let per_tile = match nnzb.checked_div(split_blocks) {
        Some(q) => q,
        None => 0,
    };
    (per_tile + block_rows) * n_tiles
}

/// A CUDA tensor map (`CUtensorMap`, 128 opaque bytes encoded by `cuTensorMapEncodeTiled`) passed by value in a
/// kernel's parameters. Rust cannot pass a 64-byte aligned struct by value to a kernel (rustc rejects alignments
/// above 16 there), so it is 16-byte aligned here and the PTX linker raises the alignment of the parameter that
/// holds it to 64 in the PTX, which TMA requires (../shared/HOPPER.md).
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorMap(pub [u64; 16]);

/// The parameters of the sm_90a kernels ([`Module::Hopper`]), passed by value as the kernel's one argument:
/// three tensor maps first (at offsets 0, 128 and 256 of a 64-byte aligned parameter), then the parameters every
/// BSR SpMM kernel takes, with the same preconditions, then the tile scheduler. Any number of CTAs from 1 to the
/// `block_rows * ceil(n / BN)` output tiles: with `tile_counter` 0 each walks the tiles `blockIdx.x, blockIdx.x +
/// gridDim.x, ...`; with counters, they share the tiles in the order they ask for them.
///
/// - `tmap_a`: A's values viewed as a row-major `(nnzb * bs) x bs` matrix of the input type, box `bs x 64`
///   (rows x columns), 128-byte swizzle.
/// - `tmap_b`: B as stored: row-major B is `K x n` with row stride `ldb`, box `64 x 64`; column-major B is
///   `n x K` with row stride `ldb`, box `BN x 64`; 128-byte swizzle, out-of-bounds elements read as zero.
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HopperSpmmParams {
    /// The tensor map of A's values.
    pub tmap_a: TensorMap,
    /// The tensor map of B: row-major with `n` a multiple of 64, rank 3 (64 columns x K rows x `n / 64` chunks,
    /// boxes of 64 x 64 x BN / 64: a stage's B in one copy); other row-major B rank 2 (boxes of 64 x 64);
    /// column-major B rank 2 (boxes of 64 k x BN).
    pub tmap_b: TensorMap,
    /// The tensor map of C when `c_tma` is 1: row-major C's first `n` columns rounded down to whole 16 bytes (a
    /// TMA store writes whole 16-byte units, so a map ending mid-unit would write the padding after each row; the
    /// kernel stores the few columns past it from its registers) as an `m x` that matrix of the output type with
    /// row stride `ldc`, rank 4 (columns, row bit 2, row bits 0-1, row / 8: a box's rows lie in shared memory as
    /// rows 0, 4, 1, 5, 2, 6, 3, 7 of each group of 8), boxes of 64 rows x 128 bytes (32 f32 or 64 16-bit
    /// columns), 128-byte swizzle; elements outside the map are not written. Unused (any bytes) when `c_tma` is 0.
    pub tmap_c: TensorMap,
    /// Everything else, as for the sm_80 kernels.
    pub spmm: BsrSpmmParams,
    /// The tile scheduler: 0 for the static stride (CTA `c` takes tiles `c, c + gridDim.x, ...`), or the device
    /// address of two u32 counters, zero before the launch and only this launch's while it runs: the next tile,
    /// which each CTA's producer takes with an atomic add until it passes the last tile (a persistent grid whose
    /// CTAs take the next tile as they free up), and the CTAs done with that; the last CTA sets both back to zero.
    pub tile_counter: u64,
    /// 1: the consumers stage each tile of C in shared memory and store it through `tmap_c` (row-major C, beta
    /// 0, at least 16 bytes in a row); 0: they store C from their registers (column-major C, beta != 0, which
    /// reads C, or fewer than 16 bytes in a row).
    pub c_tma: u32,
    /// Split rows: the first `split_rows` positions of the row order (`BsrSpmmParams::row_order`, longest rows
    /// first) are split into up to `spmm.split_chunks` parts of `spmm.split_blocks` blocks each
    /// ([`hopper_virtual_row`]); 0: no row is split. Each part's consumer warps hand their f32 partial
    /// accumulators over through the split workspace (one slot per part, [`split_slot`]; one counter per warp of
    /// the tile, [`hopper_split_counter`]) and the last warp to count in adds the parts in part order.
    pub split_rows: u32,
}

/// The device-side structure check (`sparsek_bsr_check`): one thread per block row checks that `row_ptr` starts
/// at 0, never decreases and ends at `nnzb`, and that the row's `col_idx` entries are strictly increasing and below
/// `block_cols`, every value below 2^32. The smallest `(block_row << 3) | code` of a violation is folded into
/// `*result` with an atomic min (so the answer does not depend on scheduling); the host sets it to `u64::MAX`
/// first, and `u64::MAX` afterwards means valid.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BsrCheckParams {
    /// `block_rows + 1` u32 or u64.
    pub row_ptr: u64,
    /// `nnzb` u32 or u64.
    pub col_idx: u64,
    /// One u64 in device memory.
    pub result: u64,
    /// Nonzero blocks the caller declared.
    pub nnzb: u64,
    /// Block rows.
    pub block_rows: u32,
    /// Block columns (`K / bs`).
    pub block_cols: u32,
    /// 1: 64-bit entries.
    pub index64: u32,
    /// Explicit tail padding (always 0).
    pub _pad: u32,
}

/// Entry point of the structure check kernel (in every product module).
pub const BSR_CHECK_KERNEL: &str = "sparsek_bsr_check";
/// Threads per CTA of the structure check kernel.
pub const BSR_CHECK_THREADS: u32 = 256;

/// What a structure check found, decoded from [`BsrCheckParams::result`]'s low three bits.
pub mod check_code {
    /// `row_ptr[0] != 0`.
    pub const FIRST_NOT_ZERO: u64 = 0;
    /// `row_ptr[r + 1] < row_ptr[r]`.
    pub const DECREASING: u64 = 1;
    /// `row_ptr[r + 1] > nnzb`.
    pub const BEYOND_NNZB: u64 = 2;
    /// `row_ptr[block_rows] != nnzb` (reported at row `block_rows`).
    pub const LAST_NOT_NNZB: u64 = 3;
    /// A `col_idx` entry `>= block_cols`.
    pub const COL_OUT_OF_RANGE: u64 = 4;
    /// `col_idx` not strictly increasing within a row (unsorted or duplicate).
    pub const COL_NOT_INCREASING: u64 = 5;
    /// An index value of 2^32 or more (or a negative int64).
    pub const TOO_LARGE: u64 = 6;
}

/// Grouped rasterization: maps the linear CTA index `cta` of a 1-D grid of `block_rows * n_tiles` CTAs to
/// (position in the row order, N tile). CTAs go through groups of `group_rows` consecutive row positions; within
/// a group the row position varies fastest, then the N tile. A wave of concurrent CTAs therefore touches
/// `group_rows` block rows of A and about `wave / group_rows` column strips of B, a working set the host sizes to
/// fit in L2 (instead of all of A per wave, which is what row-major order over the whole grid does).
/// `group_rows >= block_rows` gives plain row-fastest order.
#[inline(always)]
pub const fn raster(cta: u32, block_rows: u32, n_tiles: u32, group_rows: u32) -> (u32, u32) {
    // Divisions by run-time values use checked_* so no panic path reaches the PTX; a zero divisor only arises for
    // an empty grid, where no CTA runs.
    let group_rows = if group_rows == 0 || group_rows > block_rows { block_rows } else { group_rows };
    let group_size = group_rows * n_tiles;
    let group = match cta.checked_div(group_size) {
        Some(g) => g,
        None => 0,
    };
    let first_row = group * group_rows;
    let left = block_rows.saturating_sub(first_row);
    let rows_here = if left < group_rows { left } else { group_rows };
    let within = cta - group * group_size;
    match (within.checked_rem(rows_here), within.checked_div(rows_here)) {
        (Some(r), Some(t)) => (first_row + r, t),
        _ => (0, 0),
    }
}

/// `ldmatrix` address role of lane `lane` when loading an m16 x k16 A fragment with `.x4`: (row, chunk) within
/// the 16x16 sub-tile. Lanes 0-15 address rows 0-15 of k-chunk 0, lanes 16-31 rows 0-15 of k-chunk 1, so the four
/// result registers are the mma A operands a0 (rows 0-7, k 0-7), a1 (rows 8-15, k 0-7), a2 (rows 0-7, k 8-15),
/// a3 (rows 8-15, k 8-15).
pub const fn ldsm_a_role(lane: u32) -> (u32, u32) {
    (lane % 16, lane / 16)
}

/// `ldmatrix.trans` address role of lane `lane` when loading two k16 x n8 B fragments with `.x4.trans` from a
/// row-major `[k][n]` tile: (k row, n chunk) within the 16x16 sub-tile. Registers 0 and 1 are b0, b1 of n-tile 0,
/// registers 2 and 3 are b0, b1 of n-tile 1.
pub const fn ldsm_b_role(lane: u32) -> (u32, u32) {
    ((lane % 8) + 8 * ((lane / 8) % 2), lane / 16)
}

/// `ldmatrix` (not `.trans`) address role of lane `lane` when loading two k16 x n8 B fragments with `.x4` from a
/// column-major B staged as an `[n][k]` tile (rows are columns of B, chunks run along k): (n row, k chunk) within
/// the 16x16 sub-tile. Registers 0 and 1 are b0 (k 0-7), b1 (k 8-15) of n-tile 0 (n rows 0-7), registers 2 and 3
/// the same of n-tile 1 (n rows 8-15): the same fragments as [`ldsm_b_role`] gives from a row-major tile.
pub const fn ldsm_bt_role(lane: u32) -> (u32, u32) {
    ((lane % 8) + 8 * (lane / 16), (lane / 8) % 2)
}

/// Element (row, col) of the m16 x n8 f32 accumulator that register `i` (0..4) of lane `lane` holds.
pub const fn mma_c_element(lane: u32, i: u32) -> (u32, u32) {
    (lane / 4 + 8 * (i / 2), 2 * (lane % 4) + i % 2)
}

/// Element (row, k) of the m16 x k16 A operand that half `h` (0..8; register h/2, low half first) of lane `lane`
/// holds.
pub const fn mma_a_element(lane: u32, h: u32) -> (u32, u32) {
    let reg = h / 2;
    (lane / 4 + 8 * (reg % 2), 2 * (lane % 4) + h % 2 + 8 * (reg / 2))
}

/// Element (k, col) of the k16 x n8 B operand that half `h` (0..4; register h/2, low half first) of lane `lane`
/// holds.
pub const fn mma_b_element(lane: u32, h: u32) -> (u32, u32) {
    (2 * (lane % 4) + h % 2 + 8 * (h / 2), lane / 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hopper_virtual_rows_cover_each_part_once() {
        for (block_rows, split_rows, chunks) in [(10u32, 3u32, 4u32), (5, 0, 1), (7, 7, 2), (1, 1, 9), (6, 2, 1)] {
            let vrows = hopper_virtual_rows(block_rows, split_rows, chunks);
            let mut seen = [[0u32; 16]; 16];
            for v in 0..vrows {
                let (pos, part, split) = hopper_virtual_row(v, split_rows, chunks);
                assert!(pos < block_rows && split == (pos < split_rows), "{v}: {pos} {part} {split}");
                seen[pos as usize][part as usize] += 1;
            }
            for pos in 0..block_rows {
                let parts = if pos < split_rows { chunks } else { 1 };
                for part in 0..16 {
                    assert_eq!(seen[pos as usize][part as usize], u32::from(part < parts), "{pos} {part}");
                }
            }
        }
        // Slots and counters: distinct and below their bounds.
        let (split_rows, chunks, n_tiles, warps) = (3u32, 4u32, 5u32, 8u32);
        let mut slots = [false; 60];
        let mut counters = [false; 120];
        for pos in 0..split_rows {
            for n_tile in 0..n_tiles {
                for part in 0..chunks {
                    let s = hopper_split_slot(pos, part, chunks, n_tile, n_tiles) as usize;
                    assert!(!slots[s]);
                    slots[s] = true;
                }
                for w in 0..warps {
                    let c = hopper_split_counter(pos, n_tile, n_tiles, w, warps) as usize;
                    assert!(!counters[c]);
                    counters[c] = true;
                }
            }
        }
        assert!(slots.iter().all(|&s| s) && counters.iter().all(|&c| c));
    }

    #[test]
    fn every_configuration_is_valid() {
        for v in VARIANTS {
            assert_eq!(v.config.check(), Ok(()), "{}", v.name);
            assert_eq!(v.bs, v.config.bs, "{}", v.name);
        }
    }

    #[test]
    fn check_names_the_broken_rule() {
        let good = CONFIGS[2];
        assert_eq!(
            KernelConfig { bn: 120, ..good }.check(),
            Err(
                "bn must be a positive multiple of 16 * warps_n (NI even: B fragments come in pairs from ldmatrix.x4.trans)"
            )
        );
        assert!(KernelConfig { bk: 16, frag_db: true, ..good }.check().unwrap_err().contains("frag_db"));
        assert!(KernelConfig { bs: 48, ..good }.check().unwrap_err().contains("bs must be"));
        assert!(KernelConfig { stages: 1, ..good }.check().unwrap_err().contains("two stages"));
        assert!(KernelConfig { warps_m: 0, ..good }.check().is_err());
        let few_b_chunks = KernelConfig {
            bs: 64,
            bn: 16,
            bk: 16,
            warps_m: 4,
            warps_n: 1,
            stages: 2,
            frag_db: false,
            k_groups: 1,
            pipeline: Pipeline::CpAsync,
        };
        assert!(few_b_chunks.check().unwrap_err().contains("B stage tile"));
    }

    #[test]
    fn k_groups_double_the_threads_and_rings() {
        let two = narrow_config_for(64).unwrap();
        let one = KernelConfig { k_groups: 1, ..two };
        assert_eq!((two.k_groups, two.check()), (2, Ok(())));
        assert_eq!((two.threads(), one.threads()), (256, 128));
        assert_eq!(two.mma_threads(), one.mma_threads());
        assert_eq!(two.smem_bytes(), 2 * one.smem_bytes());
        // The groups' hand-over adds two CTA barriers; a split part's slot is the CTA's tile, as with one group.
        assert_eq!(two.expected_barriers(), one.expected_barriers() + 2);
        assert_eq!(two.split_slot_bytes(), one.split_slot_bytes());
        for bad in [KernelConfig { k_groups: 0, ..two }, KernelConfig { k_groups: 3, ..two }] {
            assert!(bad.check().unwrap_err().contains("k_groups"), "{bad:?}");
        }
        assert!(KernelConfig { frag_db: false, ..two }.check().unwrap_err().contains("k_groups"));
        // The flat list keeps the one-group tile of five stages; the other narrow tiles have one group.
        let flat = flat_config_for(64).unwrap();
        assert_eq!((flat.k_groups, flat.stages, flat.check()), (1, 5, Ok(())));
        for bs in [16, 32, 128] {
            assert_eq!(narrow_config_for(bs).unwrap().k_groups, 1, "bs {bs}");
        }
    }

    #[test]
    fn the_narrow_tile_serves_up_to_its_threshold() {
        for n in [0, 1, 16, NARROW_MAX_N] {
            assert_eq!(Tile::for_columns(n), Tile::Narrow, "n = {n}");
        }
        for n in [NARROW_MAX_N + 1, 128, usize::MAX] {
            assert_eq!(Tile::for_columns(n), Tile::Wide, "n = {n}");
        }
        for c in NARROW_CONFIGS {
            assert!(c.check().is_ok(), "{c:?}");
            assert!(
                c.bn <= 32 && config_for(c.bs).is_some_and(|w| w.bn > c.bn),
                "{c:?} is narrower than its wide tile"
            );
        }
    }

    #[test]
    fn decode_configs_follow_their_template() {
        for c in DECODE_CONFIGS {
            assert_eq!(c.check(), Ok(()), "{c:?}");
            assert_eq!(c.pipeline, Pipeline::Direct);
            // Every warp's partial sums fit, and the expected counts follow the unrolled main loop.
            assert_eq!(c.smem_bytes(), c.warps_m * 16 * c.bn * 4);
            assert_eq!(c.expected_mma_sync(), c.stages * 2 * c.bn / 8);
            assert_eq!(c.slices(), c.bs / 16);
            assert!(c.bn as usize >= DECODE_MAX_N, "{c:?} must cover DECODE_MAX_N columns in one tile");
        }
        let good = DECODE_CONFIGS[1];
        assert!(KernelConfig { bs: 16, ..good }.check().unwrap_err().contains("bs 32, 64 and 128"));
        assert!(KernelConfig { bk: 64, ..good }.check().unwrap_err().contains("bk = 32"));
        assert!(KernelConfig { warps_n: 2, ..good }.check().unwrap_err().contains("warps_n = 1"));
        assert!(KernelConfig { bn: 24, ..good }.check().unwrap_err().contains("columns per CTA"));
        assert!(KernelConfig { stages: 0, ..good }.check().unwrap_err().contains("in flight"));
        assert!(KernelConfig { warps_m: 33, ..good }.check().unwrap_err().contains("1024 threads"));
        assert_eq!(CONFIGS[2].slices(), 1);
    }

    #[test]
    fn variant_names_are_unique_and_found() {
        for (i, v) in VARIANTS.iter().enumerate() {
            assert!(VARIANTS[..i].iter().all(|w| w.name != v.name), "duplicate {}", v.name);
            assert_eq!(variant(v.name), *v);
        }
        let products = VARIANTS.iter().filter(|v| v.module == Module::Product);
        assert_eq!(
            products.count(),
            8 * (BLOCK_SIZES.len()
                + NARROW_CONFIGS.len()
                + MID_CONFIGS.len()
                + MID64_CONFIGS.len()
                + DECODE_CONFIGS.len())
                + FLAT_CONFIGS.len()
                + FLAT64_CONFIGS.len()
                + FLAT32_CONFIGS.len()
        );
        let hopper = VARIANTS.iter().filter(|v| v.module == Module::Hopper);
        // The short-row kernels: f32 C only.
        assert_eq!(hopper.count(), 8 * HOPPER_CONFIGS.len() + 4 * HOPPER_SHORT_CONFIGS.len());
        assert!(VARIANTS.iter().all(|v| v.tile != Tile::ShortRows || v.out == OutType::F32));
        // The flat block-list kernels: f16 inputs, row-major B, f32 C only.
        let flat_types = (InType::F16, Layout::RowMajor, OutType::F32);
        let flat = VARIANTS.iter().filter(|v| matches!(v.tile, Tile::Flat | Tile::Flat64 | Tile::Flat32));
        assert!(flat.clone().all(|v| (v.input, v.b_layout, v.out) == flat_types));
        assert_eq!(flat.count(), FLAT_CONFIGS.len() + FLAT32_CONFIGS.len() + FLAT64_CONFIGS.len());
        for v in VARIANTS.iter().filter(|v| v.module != Module::Tuning) {
            // Each product and sm_90a kernel runs its tile's configuration for its block size.
            let config = match (v.module, v.tile) {
                (Module::Hopper, Tile::Wide) => hopper_config_for(v.bs),
                (Module::Hopper, Tile::ShortRows) => hopper_short_config_for(v.bs),
                (Module::Hopper, _) | (_, Tile::ShortRows) => None,
                (_, Tile::Wide) => config_for(v.bs),
                (_, Tile::Narrow) => narrow_config_for(v.bs),
                (_, Tile::Mid) => mid_config_for(v.bs),
                (_, Tile::Mid64) => mid64_config_for(v.bs),
                (_, Tile::Decode) => decode_config_for(v.bs),
                (_, Tile::Flat) => flat_config_for(v.bs),
                (_, Tile::Flat64) => flat64_config_for(v.bs),
                (_, Tile::Flat32) => flat32_config_for(v.bs),
            };
            assert_eq!(Some(v.config), config, "{} runs another configuration than its tile's", v.name);
            // The 16-bit output is the input's own type.
            assert!(matches!(
                (v.input, v.out),
                (_, OutType::F32) | (InType::F16, OutType::F16) | (InType::Bf16, OutType::Bf16)
            ));
            let suffix = match v.tile {
                Tile::Wide => "",
                Tile::Narrow => "_n16",
                Tile::Mid => "_n32",
                Tile::Mid64 => "_n64",
                Tile::Decode => "_dec",
                Tile::ShortRows => "_short",
                Tile::Flat => "_flat",
                Tile::Flat64 => "_flat64",
                Tile::Flat32 => "_flat32",
            };
            let name = [v.input.name(), "_b", v.b_layout.name(), "_", v.out.name(), suffix];
            let mut tail = [0u8; 32];
            let mut len = 0;
            for part in name {
                tail[len..len + part.len()].copy_from_slice(part.as_bytes());
                len += part.len();
            }
            assert!(v.name.as_bytes().ends_with(&tail[..len]), "{} is not named after its types", v.name);
        }
        let tuning = VARIANTS.iter().filter(|v| v.module == Module::Tuning).count();
        assert_eq!(tuning, TUNE_CONFIGS.len());
    }

    #[test]
    fn flat_ranges_cover_the_blocks_and_find_their_cta() {
        for nnzb in [1u32, 2, 3, 7, 64, 100, 1000, 14418] {
            for ctas in [1u32, 2, 3, 5, 132, 264, 396, 528].into_iter().filter(|&g| g <= nnzb) {
                let mut next = 0;
                for c in 0..ctas {
                    let (b0, b1) = flat_range(c, ctas, nnzb);
                    assert_eq!(b0, next, "nnzb {nnzb}, ctas {ctas}: ranges are contiguous");
                    assert!(b1 > b0, "nnzb {nnzb}, ctas {ctas}: CTA {c} holds a block");
                    for blk in b0..b1 {
                        assert_eq!(flat_cta_of(blk, ctas, nnzb), c, "nnzb {nnzb}, ctas {ctas}, block {blk}");
                    }
                    assert!(flat_slot(c, true, 0, 1) < 2 * ctas as u64 && flat_counter(c, 0, 1) < ctas as u64);
                    next = b1;
                }
                assert_eq!(next, nnzb);
            }
        }
    }

    #[test]
    fn params_have_no_implicit_padding() {
        assert_eq!(core::mem::size_of::<BsrSpmmParams>(), 9 * 8 + 14 * 4);
        assert_eq!(core::mem::align_of::<BsrSpmmParams>(), 8);
        assert_eq!(core::mem::size_of::<BsrCheckParams>(), 4 * 8 + 4 * 4);
        // Three tensor maps, the 128 bytes of BsrSpmmParams, the tile counter's address and two u32.
        assert_eq!(core::mem::size_of::<HopperSpmmParams>(), 3 * 128 + 128 + 8 + 8);
        assert_eq!(core::mem::offset_of!(HopperSpmmParams, tmap_c), 2 * 128);
        assert_eq!(core::mem::offset_of!(HopperSpmmParams, tile_counter), 3 * 128 + 128);
    }

    #[test]
    fn hopper_shared_memory_fits() {
        for c in HOPPER_CONFIGS.into_iter().chain(HOPPER_SHORT_CONFIGS) {
            assert!(c.smem_bytes() <= SMEM_LIMIT, "{c:?}: {} bytes", c.smem_bytes());
            // The queue's entries are 16-byte aligned (st.shared.v4) and its barriers 8-byte aligned; the staging
            // buffers 1024-byte aligned (128-byte swizzle).
            assert_eq!(c.tile_queue_offset() % 16, 0);
            assert_eq!(c.out_barrier_offset() % 8, 0);
            assert_eq!(c.out_stage_offset() % 1024, 0);
            assert_eq!(c.consumer_warpgroups(), 2);
        }
        // bs 128 (4 stages of 48 KB) has room for two staging buffers per warpgroup, bs 64 (5 of 40 KB) for one.
        assert_eq!((HOPPER_CONFIGS[0].out_buffers(), HOPPER_CONFIGS[1].out_buffers()), (1, 2));
        // The short-row bs 64 kernel gives a stage for the second buffer.
        assert_eq!((HOPPER_SHORT_CONFIGS[0].bs, HOPPER_SHORT_CONFIGS[0].stages), (64, 4));
        assert_eq!(HOPPER_SHORT_CONFIGS[0].out_buffers(), 2);
        // C's map ends at whole 16 bytes: 4 f32 or 8 16-bit columns.
        assert_eq!(
            (c_map_columns(65, 4), c_map_columns(3, 4), c_map_columns(129, 2), c_map_columns(8, 2)),
            (64, 0, 128, 8)
        );
        assert!(HOPPER_CONFIGS[0].pingpong() && HOPPER_CONFIGS[0].threads() == 384);
        assert!(!HOPPER_CONFIGS[1].pingpong() && HOPPER_CONFIGS[1].threads() == 384);
    }
}
