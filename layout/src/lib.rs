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
    /// Checks that the shape is one the kernel template accepts, naming the first broken rule. The kernels
    /// assert it at compile time ([`KernelConfig::assert_valid`]); the host checks it again when it loads a kernel.
    pub const fn check(&self) -> Result<(), &'static str> {
        if !matches!(self.bs, 16 | 32 | 64 | 128) {
            return Err("bs must be 16, 32, 64 or 128");
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
        if self.threads() > 1024 {
            return Err("more than 1024 threads per CTA");
        }
        if !(self.bk * self.bn / CHUNK_HALVES).is_multiple_of(self.threads()) {
            return Err("the B stage tile's 16-byte chunks must divide evenly among the CTA's threads");
        }
        Ok(())
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
    KernelConfig { bs: 16, bn: 256, bk: 16, warps_m: 1, warps_n: 4, stages: 6, frag_db: false },
    KernelConfig { bs: 32, bn: 256, bk: 32, warps_m: 1, warps_n: 4, stages: 3, frag_db: false },
    KernelConfig { bs: 64, bn: 256, bk: 32, warps_m: 1, warps_n: 4, stages: 3, frag_db: true },
    KernelConfig { bs: 128, bn: 128, bk: 32, warps_m: 2, warps_n: 2, stages: 4, frag_db: true },
];

/// Candidate configurations compiled into the tuning module ([`Module::Tuning`], entry points
/// `sparsek_tune_<index>`, f32 output) and measured by `sparsek tune`. The winners become [`CONFIGS`];
/// docs/perf-notes.md records the measurements.
pub const TUNE_CONFIGS: [KernelConfig; 15] = [
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
    // (bn 256, bk 64, 2x4 warps, 3 stages lost by 12% in round 3 and spills at 255 registers since the kernels
    // take one parameter struct: dropped, docs/perf-notes.md.)
    KernelConfig { bs: 128, bn: 256, bk: 32, warps_m: 2, warps_n: 4, stages: 4, frag_db: true },
];

/// Supported block sizes.
pub const BLOCK_SIZES: [u32; 4] = [16, 32, 64, 128];

/// The product configuration for block size `bs`, if supported (from [`VARIANTS`]).
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
}

impl OutType {
    /// "f32" or "f16": the suffix of the entry point names.
    pub const fn name(self) -> &'static str {
        match self {
            OutType::F32 => "f32",
            OutType::F16 => "f16",
        }
    }
}

/// The GPU architecture a PTX module targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// PTX ISA 8.0 for sm_80: cp.async + ldmatrix + mma.sync; JIT-compiled for any sm_80+ GPU.
    Sm80,
}

/// The operation a kernel computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `C = alpha * (A @ B) + beta * C`, A in BSR, B and C dense row-major; parameters [`BsrSpmmParams`].
    BsrSpmm,
}

/// Which PTX module a kernel is compiled into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Module {
    /// The product module (`sparsek_sm80.ptx`): one kernel per block size and output type.
    Product,
    /// The tuning module (`sparsek_sm80_tune.ptx`): every candidate of [`TUNE_CONFIGS`], f32 output.
    Tuning,
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
    /// Element type of C.
    pub out: OutType,
    /// Tile configuration (the launch's threads and dynamic shared memory derive from it).
    pub config: KernelConfig,
}

const fn spmm(name: &'static str, module: Module, out: OutType, config: KernelConfig) -> Variant {
    Variant { name, arch: Arch::Sm80, module, op: Op::BsrSpmm, bs: config.bs, out, config }
}
const fn product(name: &'static str, out: OutType, bs: u32) -> Variant {
    match config_for(bs) {
        Some(config) => spmm(name, Module::Product, out, config),
        None => panic!("no product configuration for this block size"),
    }
}
const fn tuning(name: &'static str, i: usize) -> Variant {
    spmm(name, Module::Tuning, OutType::F32, TUNE_CONFIGS[i])
}

/// Every kernel the build compiles, product and tuning modules alike. The kernels define their entry points from
/// this table (and fail to build if a name differs); the host loads and launches them from it.
pub const VARIANTS: [Variant; 23] = [
    product("sparsek_bsr_bs16_f32", OutType::F32, 16),
    product("sparsek_bsr_bs32_f32", OutType::F32, 32),
    product("sparsek_bsr_bs64_f32", OutType::F32, 64),
    product("sparsek_bsr_bs128_f32", OutType::F32, 128),
    product("sparsek_bsr_bs16_f16", OutType::F16, 16),
    product("sparsek_bsr_bs32_f16", OutType::F16, 32),
    product("sparsek_bsr_bs64_f16", OutType::F16, 64),
    product("sparsek_bsr_bs128_f16", OutType::F16, 128),
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
/// Preconditions (the host launcher checks them before every launch): `row_ptr`/`col_idx` hold a valid BSR
/// structure of `block_rows` block rows; `row_order` is a permutation of the block rows; `b` and `c` are 16-byte
/// aligned with `ldb % 8 == 0` and `ldc` a multiple of 16 bytes, each holding every row padded to its leading
/// dimension; `n >= 1`; the grid is 1-D with `block_rows * ceil(n / BN)` CTAs of [`KernelConfig::threads`]
/// threads and [`KernelConfig::smem_bytes`] of dynamic shared memory.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BsrSpmmParams {
    /// A's values: `nnzb` blocks of `bs * bs` f16, each row-major.
    pub a_values: u64,
    /// A's block-row pointers: `block_rows + 1` u32.
    pub row_ptr: u64,
    /// A's block-column indices: `nnzb` u32.
    pub col_idx: u64,
    /// Block rows in the order the CTAs take them (longest first): `block_rows` u32.
    pub row_order: u64,
    /// B: `K x ldb` f16, row-major.
    pub b: u64,
    /// C: `M x ldc` f32 or f16 (the kernel's [`OutType`]), row-major.
    pub c: u64,
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
    /// Explicit tail padding (keeps the struct free of implicit padding bytes; always 0).
    pub _pad: u32,
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
        let few_b_chunks = KernelConfig { bs: 64, bn: 16, bk: 16, warps_m: 4, warps_n: 1, stages: 2, frag_db: false };
        assert!(few_b_chunks.check().unwrap_err().contains("B stage tile"));
    }

    #[test]
    fn variant_names_are_unique_and_found() {
        for (i, v) in VARIANTS.iter().enumerate() {
            assert!(VARIANTS[..i].iter().all(|w| w.name != v.name), "duplicate {}", v.name);
            assert_eq!(variant(v.name), *v);
        }
        let products = VARIANTS.iter().filter(|v| v.module == Module::Product);
        assert_eq!(products.count(), 2 * BLOCK_SIZES.len());
        let tuning = VARIANTS.iter().filter(|v| v.module == Module::Tuning).count();
        assert_eq!(tuning, TUNE_CONFIGS.len());
    }

    #[test]
    fn params_have_no_implicit_padding() {
        assert_eq!(core::mem::size_of::<BsrSpmmParams>(), 6 * 8 + 8 * 4);
        assert_eq!(core::mem::align_of::<BsrSpmmParams>(), 8);
    }
}
