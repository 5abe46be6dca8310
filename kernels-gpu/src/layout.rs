//! Index math and kernel configurations: plain `const fn`s with no GPU code, so the host's tests can include
//! this file (`#[path]`) and check the same functions the kernels use.
//!
//! Vocabulary (one line each; the same names everywhere):
//! - `BS`: BSR block size (A's blocks are BS x BS).        - `BM`: output rows per CTA (= BS: one block row).
//! - `BN`: output columns per CTA.                         - `BK`: K depth of one pipeline stage (divides BS).
//! - `WARPS_M x WARPS_N`: the CTA's warp grid.             - `MI x NI`: m16 x n8 mma tiles per warp (WM = 16*MI,
//!   WN = 8*NI).                                           - `STAGES`: depth of the cp.async shared-memory ring.

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
}

impl KernelConfig {
    /// Threads per CTA.
    pub const fn threads(&self) -> u32 {
        32 * self.warps_m * self.warps_n
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
    /// Dynamic shared memory of one CTA.
    pub const fn smem_bytes(&self) -> u32 {
        self.stages * (self.a_stage_bytes() + self.b_stage_bytes())
    }
    /// Whether the shape is one the kernel template accepts (the kernel asserts the same at compile time).
    pub const fn is_valid(&self) -> bool {
        self.bs.is_multiple_of(16 * self.warps_m)
            && self.bn.is_multiple_of(16 * self.warps_n) // NI even: B fragments come in pairs from ldmatrix.x4.trans
            && self.bk.is_multiple_of(16)
            && self.bs.is_multiple_of(self.bk)
            && self.stages >= 2
            && (!self.frag_db || ((self.bk / 16).is_multiple_of(2) && self.stages >= 3))
    }
}

/// Configuration of the kernel for each block size, in the order of `BLOCK_SIZES`: the fastest of
/// `TUNE_CONFIGS` on an H100 (docs/perf-notes.md, docs/tune/).
pub const CONFIGS: [KernelConfig; 4] = [
    KernelConfig { bs: 16, bn: 256, bk: 16, warps_m: 1, warps_n: 4, stages: 6, frag_db: false },
    KernelConfig { bs: 32, bn: 256, bk: 32, warps_m: 1, warps_n: 4, stages: 3, frag_db: false },
    KernelConfig { bs: 64, bn: 256, bk: 32, warps_m: 1, warps_n: 4, stages: 3, frag_db: true },
    KernelConfig { bs: 128, bn: 128, bk: 32, warps_m: 2, warps_n: 2, stages: 4, frag_db: true },
];

/// Candidate configurations compiled into the tuning module (tests/ptx/tune_sm80.ptx, entry points
/// `sparsek_tune_<index>`, f32 output) and measured by the `tune` binary of the tests crate. The winners become
/// `CONFIGS`; docs/perf-notes.md records the measurements.
pub const TUNE_CONFIGS: [KernelConfig; 16] = [
    // bs 16 (BK = 16: one k-step per tile, so no fragment double-buffering)
    KernelConfig { bs: 16, bn: 256, bk: 16, warps_m: 1, warps_n: 4, stages: 4, frag_db: false },
    KernelConfig { bs: 16, bn: 256, bk: 16, warps_m: 1, warps_n: 4, stages: 6, frag_db: false },
    KernelConfig { bs: 16, bn: 512, bk: 16, warps_m: 1, warps_n: 8, stages: 4, frag_db: false },
    // bs 32
    KernelConfig { bs: 32, bn: 256, bk: 32, warps_m: 1, warps_n: 4, stages: 3, frag_db: false },
    KernelConfig { bs: 32, bn: 256, bk: 32, warps_m: 1, warps_n: 4, stages: 3, frag_db: true },
    KernelConfig { bs: 32, bn: 256, bk: 32, warps_m: 1, warps_n: 4, stages: 4, frag_db: true },
    // bs 64
    KernelConfig { bs: 64, bn: 256, bk: 32, warps_m: 1, warps_n: 4, stages: 3, frag_db: false },
    KernelConfig { bs: 64, bn: 256, bk: 32, warps_m: 1, warps_n: 4, stages: 3, frag_db: true },
    KernelConfig { bs: 64, bn: 256, bk: 32, warps_m: 1, warps_n: 4, stages: 4, frag_db: true },
    KernelConfig { bs: 64, bn: 128, bk: 64, warps_m: 2, warps_n: 2, stages: 3, frag_db: false },
    KernelConfig { bs: 64, bn: 128, bk: 64, warps_m: 2, warps_n: 2, stages: 3, frag_db: true },
    // bs 128
    KernelConfig { bs: 128, bn: 128, bk: 32, warps_m: 2, warps_n: 2, stages: 4, frag_db: false },
    KernelConfig { bs: 128, bn: 128, bk: 32, warps_m: 2, warps_n: 2, stages: 4, frag_db: true },
    KernelConfig { bs: 128, bn: 128, bk: 32, warps_m: 2, warps_n: 4, stages: 4, frag_db: true },
    KernelConfig { bs: 128, bn: 256, bk: 64, warps_m: 2, warps_n: 4, stages: 3, frag_db: true },
    KernelConfig { bs: 128, bn: 256, bk: 32, warps_m: 2, warps_n: 4, stages: 4, frag_db: true },
];

/// Supported block sizes.
pub const BLOCK_SIZES: [u32; 4] = [16, 32, 64, 128];

/// The configuration for block size `bs`, if supported.
pub const fn config_for(bs: u32) -> Option<KernelConfig> {
    let mut i = 0;
    while i < CONFIGS.len() {
        if CONFIGS[i].bs == bs {
            return Some(CONFIGS[i]);
        }
        i += 1;
    }
    None
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
/// row-major [k][n] tile: (k row, n chunk) within the 16x16 sub-tile. Registers 0 and 1 are b0, b1 of n-tile 0,
/// registers 2 and 3 are b0, b1 of n-tile 1.
pub const fn ldsm_b_role(lane: u32) -> (u32, u32) {
    ((lane % 8) + 8 * ((lane / 8) % 2), lane / 16)
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
