//! The kernel ABI's vocabulary (element types, layouts, activations, architectures, ops, modules) and the one
//! variant table, [`VARIANTS`]: every compiled entry point with its configuration.

use crate::*;

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
    /// `C = alpha * (A^T @ B) + beta * C`, A in BSR read through its transposed index (block columns, block rows,
    /// the permutation into the stored blocks: [`BsrSpmmParams::perm`]), each stored block read transposed
    /// (`ldmatrix.trans`), B and C dense: the input gradient of a linear layer. Parameters [`BsrSpmmParams`] with
    /// A^T's structure in `row_ptr`/`col_idx`.
    BsrSpmmT,
    /// SDDMM: `values = alpha * (X @ Y^T) + beta * values` at the stored blocks of a BSR structure, X dense `M x K`,
    /// Y dense `N x K`, values in the structure's layout (the weight gradient, K the token count). Parameters
    /// [`BsrSpmmParams`]: `a_values` is X (`lda`, [`Variant::a_layout`]), `b` is Y seen as the `K x N` operand
    /// Y^T ([`Variant::b_layout`] is Y^T's order), `c` the values, `k` the reduced length.
    Sddmm,
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
    /// is a launch parameter). For [`Op::Sddmm`] the order of the `K x N` operand Y^T (a row-major Y is a
    /// column-major Y^T).
    pub b_layout: Layout,
    /// [`Op::Sddmm`]: X's storage order (a column-major X is staged k-rows first and read with `ldmatrix.trans`);
    /// row-major for the other ops.
    pub a_layout: Layout,
    /// Element type of C.
    pub out: OutType,
    /// Tile configuration (the launch's threads and dynamic shared memory derive from it).
    pub config: KernelConfig,
    /// Which N tile it is ([`Tile::Narrow`] kernels serve launches of at most [`NARROW_MAX_N`] columns,
    /// [`Tile::Decode`] kernels at most [`DECODE_MAX_N`]).
    pub tile: Tile,
    /// How the kernel divides the product among its CTAs: which template implements it (kernels-gpu's build.rs
    /// generates the entry point from it).
    pub decomposition: Decomposition,
}

/// How a kernel divides the product among its CTAs (or warps): the work its template implements. The variant table
/// says it per kernel; kernels-gpu's build.rs generates each entry point from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Decomposition {
    /// One CTA per block row and N tile (the sm_80 template, `sm80/bsr.rs`).
    WholeRows,
    /// Whole rows, and long block rows split over up to `split_chunks` CTAs that hand their partial tiles over
    /// (the same template; [`KernelConfig::splits_rows`]).
    SplitRows,
    /// CTAs taking equal shares of A's blocks across row boundaries, cut rows summed through the split workspace
    /// (the flat block list, `sm80/flat.rs`: [`Tile::Flat`], [`Tile::Flat32`], [`Tile::Flat64`]).
    FlatList,
    /// A CTA per 16-row slice of a block row, its warps splitting the row's blocks (the decode kernels,
    /// `sm80/decode.rs`: [`Pipeline::Direct`]).
    DecodeSlices,
    /// The sm_90a kernels' tiles taken by a persistent grid from a counter (or by a stride), split rows handed over
    /// per warp (`sm90/`: [`Pipeline::TmaWgmma`]).
    HopperTiles,
    /// The stored blocks of the output structure, its K loop over the reduced dimension ([`Op::Sddmm`]): one CTA
    /// per block, the tile one (BS, BS) block (`sm80/sddmm.rs`, BN = BS); or on sm_90a (`sm90/`,
    /// [`HOPPER_SDDMM_CONFIGS`]) a tile per group of `BN / BS` consecutive blocks of a block row (tile `t` is entry
    /// `t` of the structure's tile list, [`sddmm_tile_list`](crate::sddmm_tile_list); without one the group
    /// starting at block `t`, empty unless `t` is a multiple of the group from its row's start).
    StoredBlocks,
}

impl Decomposition {
    /// The sm_80 template's rows for `config`: split rows where its tile can split them
    /// ([`KernelConfig::splits_rows`]), else whole rows.
    pub const fn rows(config: &KernelConfig) -> Decomposition {
        if config.splits_rows() { Decomposition::SplitRows } else { Decomposition::WholeRows }
    }
    /// Whether a kernel of `config` on `tile` can implement it: the template's pipeline, split rows exactly where
    /// the configuration splits them, and the flat tiles ([`Tile::Flat`], [`Tile::Flat32`], [`Tile::Flat64`])
    /// exactly for the flat block list. Every row of [`VARIANTS`] passes (checked at compile time).
    pub const fn fits(self, config: &KernelConfig, tile: Tile) -> bool {
        let flat_tile = matches!(tile, Tile::Flat | Tile::Flat32 | Tile::Flat64);
        match (self, config.pipeline) {
            (Decomposition::WholeRows, Pipeline::CpAsync) => !flat_tile && !config.splits_rows(),
            (Decomposition::SplitRows, Pipeline::CpAsync) => !flat_tile && config.splits_rows(),
            (Decomposition::FlatList, Pipeline::CpAsync) => flat_tile,
            (Decomposition::DecodeSlices, Pipeline::Direct)
            | (Decomposition::HopperTiles, Pipeline::TmaWgmma { .. }) => !flat_tile,
            (Decomposition::StoredBlocks, Pipeline::CpAsync) => !flat_tile && config.bn == config.bs,
            // The sm_90a tile: a group of bn / bs stored blocks of one block row.
            (Decomposition::StoredBlocks, Pipeline::TmaWgmma { .. }) => {
                !flat_tile && config.bn.is_multiple_of(config.bs)
            }
            _ => false,
        }
    }
}

impl Variant {
    /// `bar.sync` / `barrier.sync` instructions the kernel's PTX must hold: its configuration's
    /// ([`KernelConfig::expected_barriers`]), except the flat block-list kernels ([`Decomposition::FlatList`]): the
    /// fragment double-buffered main loop's two and the two of the end's hand-over; and the SDDMM kernels
    /// ([`Decomposition::StoredBlocks`]): the main loop's one or two.
    pub const fn expected_barriers(&self) -> u32 {
        match self.decomposition {
            Decomposition::FlatList => 4,
            // One block per CTA: the main loop's barriers only (no split rows or k-groups to hand over); the sm_90a
            // template's, its configuration's.
            Decomposition::StoredBlocks if matches!(self.arch, Arch::Sm90a) => self.config.expected_barriers(),
            Decomposition::StoredBlocks if self.config.frag_db => 2,
            Decomposition::StoredBlocks => 1,
            _ => self.config.expected_barriers(),
        }
    }
}

/// A BSR SpMM row of the table: `config` (`None`: the family has no configuration for the block size, a build
/// error) on `tile`, implementing `decomposition` (`None`: the sm_80 template's whole or split rows, as `config`
/// has them, [`Decomposition::rows`]).
const fn spmm(
    name: &'static str,
    module: Module,
    (input, b_layout, out): (InType, Layout, OutType),
    (config, tile, decomposition): (Option<KernelConfig>, Tile, Option<Decomposition>),
) -> Variant {
    let Some(config) = config else { panic!("no configuration of this kernel family for this block size") };
    let decomposition = match decomposition {
        Some(d) => d,
        None => Decomposition::rows(&config),
    };
    let arch = match config.pipeline {
        Pipeline::CpAsync | Pipeline::Direct => Arch::Sm80,
        Pipeline::TmaWgmma { .. } => Arch::Sm90a,
    };
    assert!(decomposition.fits(&config, tile), "a variant's decomposition does not fit its configuration and tile");
    let (op, a_layout) = (Op::BsrSpmm, Layout::RowMajor);
    Variant { name, arch, module, op, bs: config.bs, input, b_layout, a_layout, out, config, tile, decomposition }
}

/// An [`Op::BsrSpmmT`] row: the product module's wide tile ([`CONFIGS`]) for `bs`, its whole or split rows being
/// the block columns of A (the rows of A^T).
const fn spmm_t(name: &'static str, input: InType, b_layout: Layout, out: OutType, bs: u32) -> Variant {
    Variant { op: Op::BsrSpmmT, ..product(name, input, b_layout, out, bs) }
}

/// An [`Op::Sddmm`] row: the [`SDDMM_CONFIGS`] tile for `bs`, one CTA per stored block; X stored `x`, Y stored `y`
/// (the kernel's B operand is Y^T, stored the other way).
const fn sddmm(name: &'static str, input: InType, (x, y): (Layout, Layout), out: OutType, bs: u32) -> Variant {
    let Some(config) = sddmm_config_for(bs) else { panic!("no SDDMM configuration for this block size") };
    let (tile, decomposition) = (Tile::Wide, Decomposition::StoredBlocks);
    assert!(decomposition.fits(&config, tile), "an SDDMM tile is one block");
    Variant {
        name,
        arch: Arch::Sm80,
        module: Module::Product,
        op: Op::Sddmm,
        bs,
        input,
        b_layout: y.transposed(),
        a_layout: x,
        out,
        config,
        tile,
        decomposition,
    }
}

/// An [`Op::BsrSpmmT`] row of the Hopper module: the [`HOPPER_CONFIGS`] tile over the block columns of A, each
/// stored block staged as it is and read transposed (wgmma's MN-major A).
const fn hopper_t(name: &'static str, input: InType, b_layout: Layout, out: OutType, bs: u32) -> Variant {
    Variant { op: Op::BsrSpmmT, ..hopper(name, input, b_layout, out, bs) }
}

/// An [`Op::Sddmm`] row of the Hopper module: the [`HOPPER_SDDMM_CONFIGS`] tile for `bs`, a group of `bn / bs`
/// stored blocks of a block row per tile; X stored `x`, Y stored `y`.
const fn hopper_sddmm(name: &'static str, input: InType, xy: (Layout, Layout), out: OutType, bs: u32) -> Variant {
    let Some(config) = hopper_sddmm_config_for(bs) else { panic!("no sm_90a SDDMM configuration for this block size") };
    let fits = Decomposition::StoredBlocks.fits(&config, Tile::Wide);
    assert!(fits, "an sm_90a SDDMM tile is a group of whole blocks");
    Variant { arch: Arch::Sm90a, module: Module::Hopper, config, ..sddmm(name, input, xy, out, bs) }
}

/// The table's constructors of one kernel family each, `family(name, input, B's layout, output, bs)`: its module,
/// its configuration table's lookup, its tile and its decomposition (`None`: the sm_80 template's rows).
macro_rules! families {
    ($($family:ident: $module:ident, $lookup:ident, $tile:ident, $decomposition:expr;)*) => {$(
        const fn $family(name: &'static str, input: InType, b_layout: Layout, out: OutType, bs: u32) -> Variant {
            spmm(name, Module::$module, (input, b_layout, out), ($lookup(bs), Tile::$tile, $decomposition))
        }
    )*};
}

families! {
    hopper: Hopper, hopper_config_for, Wide, Some(Decomposition::HopperTiles);
    hopper_short: Hopper, hopper_short_config_for, ShortRows, Some(Decomposition::HopperTiles);
    product: Product, config_for, Wide, None;
    narrow: Product, narrow_config_for, Narrow, None;
    mid: Product, mid_config_for, Mid, None;
    mid64: Product, mid64_config_for, Mid64, None;
    decode: Product, decode_config_for, Decode, Some(Decomposition::DecodeSlices);
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
    let types = (InType::F16, Layout::RowMajor, OutType::F32);
    spmm(name, Module::Product, types, (config, tile, Some(Decomposition::FlatList)))
}
const fn tuning(name: &'static str, i: usize) -> Variant {
    // A tuning candidate is measured at every N; its tile is recorded by width for the tuner's report.
    let tile = if TUNE_CONFIGS[i].bn <= 32 { Tile::Narrow } else { Tile::Wide };
    spmm(name, Module::Tuning, (InType::F16, Layout::RowMajor, OutType::F32), (Some(TUNE_CONFIGS[i]), tile, None))
}

/// Every kernel the build compiles, product and tuning modules alike. The kernels define their entry points from
/// this table (and fail to build if a name differs); the host loads and launches them from it. Product entry
/// points are named `sparsek_bsr_bs<bs>_<input>_b<row|col>_<out>`: one per block size, input type, B order and
/// output type (f32, or the input's own 16-bit type); the narrow-tile kernels (block sizes with a
/// [`NARROW_CONFIGS`] entry) add the suffix `_n16`, the mid-tile kernels ([`MID_CONFIGS`]) `_n32`, the wide
/// mid-tile ones ([`MID64_CONFIGS`]) `_n64`, the decode kernels ([`DECODE_CONFIGS`]) `_dec`. The sm_90a kernels
/// are named `sparsek_sm90_bs<bs>_...` the same way, those for short rows ([`HOPPER_SHORT_CONFIGS`], f32 C) with
/// the suffix `_short`. The backward products: `sparsek_bsrt_bs<bs>_<input>_b<row|col>_<out>` ([`Op::BsrSpmmT`],
/// A^T @ B on the wide tile) and `sparsek_sddmm_bs<bs>_<input>_x<row|col>_y<row|col>_<out>` ([`Op::Sddmm`], X's and
/// Y's storage orders, the values written in f32 or the input type); on Hopper `sparsek_sm90t_bs<bs>_...` (A^T @ B,
/// bs 64 and 128) and `sparsek_sm90_sddmm_bs<bs>_...` (bs 64 and 128) the same way.
// A `const`, not a `static`: the kernels look their rows up at compile time ([`variant`], a `const fn`).
#[allow(clippy::large_const_arrays)]
pub const VARIANTS: [Variant; 332] = [
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
    spmm_t("sparsek_bsrt_bs16_f16_brow_f32", InType::F16, Layout::RowMajor, OutType::F32, 16),
    spmm_t("sparsek_bsrt_bs32_f16_brow_f32", InType::F16, Layout::RowMajor, OutType::F32, 32),
    spmm_t("sparsek_bsrt_bs64_f16_brow_f32", InType::F16, Layout::RowMajor, OutType::F32, 64),
    spmm_t("sparsek_bsrt_bs128_f16_brow_f32", InType::F16, Layout::RowMajor, OutType::F32, 128),
    spmm_t("sparsek_bsrt_bs16_f16_brow_f16", InType::F16, Layout::RowMajor, OutType::F16, 16),
    spmm_t("sparsek_bsrt_bs32_f16_brow_f16", InType::F16, Layout::RowMajor, OutType::F16, 32),
    spmm_t("sparsek_bsrt_bs64_f16_brow_f16", InType::F16, Layout::RowMajor, OutType::F16, 64),
    spmm_t("sparsek_bsrt_bs128_f16_brow_f16", InType::F16, Layout::RowMajor, OutType::F16, 128),
    spmm_t("sparsek_bsrt_bs16_f16_bcol_f32", InType::F16, Layout::ColMajor, OutType::F32, 16),
    spmm_t("sparsek_bsrt_bs32_f16_bcol_f32", InType::F16, Layout::ColMajor, OutType::F32, 32),
    spmm_t("sparsek_bsrt_bs64_f16_bcol_f32", InType::F16, Layout::ColMajor, OutType::F32, 64),
    spmm_t("sparsek_bsrt_bs128_f16_bcol_f32", InType::F16, Layout::ColMajor, OutType::F32, 128),
    spmm_t("sparsek_bsrt_bs16_f16_bcol_f16", InType::F16, Layout::ColMajor, OutType::F16, 16),
    spmm_t("sparsek_bsrt_bs32_f16_bcol_f16", InType::F16, Layout::ColMajor, OutType::F16, 32),
    spmm_t("sparsek_bsrt_bs64_f16_bcol_f16", InType::F16, Layout::ColMajor, OutType::F16, 64),
    spmm_t("sparsek_bsrt_bs128_f16_bcol_f16", InType::F16, Layout::ColMajor, OutType::F16, 128),
    spmm_t("sparsek_bsrt_bs16_bf16_brow_f32", InType::Bf16, Layout::RowMajor, OutType::F32, 16),
    spmm_t("sparsek_bsrt_bs32_bf16_brow_f32", InType::Bf16, Layout::RowMajor, OutType::F32, 32),
    spmm_t("sparsek_bsrt_bs64_bf16_brow_f32", InType::Bf16, Layout::RowMajor, OutType::F32, 64),
    spmm_t("sparsek_bsrt_bs128_bf16_brow_f32", InType::Bf16, Layout::RowMajor, OutType::F32, 128),
    spmm_t("sparsek_bsrt_bs16_bf16_brow_bf16", InType::Bf16, Layout::RowMajor, OutType::Bf16, 16),
    spmm_t("sparsek_bsrt_bs32_bf16_brow_bf16", InType::Bf16, Layout::RowMajor, OutType::Bf16, 32),
    spmm_t("sparsek_bsrt_bs64_bf16_brow_bf16", InType::Bf16, Layout::RowMajor, OutType::Bf16, 64),
    spmm_t("sparsek_bsrt_bs128_bf16_brow_bf16", InType::Bf16, Layout::RowMajor, OutType::Bf16, 128),
    spmm_t("sparsek_bsrt_bs16_bf16_bcol_f32", InType::Bf16, Layout::ColMajor, OutType::F32, 16),
    spmm_t("sparsek_bsrt_bs32_bf16_bcol_f32", InType::Bf16, Layout::ColMajor, OutType::F32, 32),
    spmm_t("sparsek_bsrt_bs64_bf16_bcol_f32", InType::Bf16, Layout::ColMajor, OutType::F32, 64),
    spmm_t("sparsek_bsrt_bs128_bf16_bcol_f32", InType::Bf16, Layout::ColMajor, OutType::F32, 128),
    spmm_t("sparsek_bsrt_bs16_bf16_bcol_bf16", InType::Bf16, Layout::ColMajor, OutType::Bf16, 16),
    spmm_t("sparsek_bsrt_bs32_bf16_bcol_bf16", InType::Bf16, Layout::ColMajor, OutType::Bf16, 32),
    spmm_t("sparsek_bsrt_bs64_bf16_bcol_bf16", InType::Bf16, Layout::ColMajor, OutType::Bf16, 64),
    spmm_t("sparsek_bsrt_bs128_bf16_bcol_bf16", InType::Bf16, Layout::ColMajor, OutType::Bf16, 128),
    sddmm("sparsek_sddmm_bs16_f16_xrow_yrow_f32", InType::F16, (Layout::RowMajor, Layout::RowMajor), OutType::F32, 16),
    sddmm("sparsek_sddmm_bs32_f16_xrow_yrow_f32", InType::F16, (Layout::RowMajor, Layout::RowMajor), OutType::F32, 32),
    sddmm("sparsek_sddmm_bs64_f16_xrow_yrow_f32", InType::F16, (Layout::RowMajor, Layout::RowMajor), OutType::F32, 64),
    sddmm(
        "sparsek_sddmm_bs128_f16_xrow_yrow_f32",
        InType::F16,
        (Layout::RowMajor, Layout::RowMajor),
        OutType::F32,
        128,
    ),
    sddmm("sparsek_sddmm_bs16_f16_xrow_yrow_f16", InType::F16, (Layout::RowMajor, Layout::RowMajor), OutType::F16, 16),
    sddmm("sparsek_sddmm_bs32_f16_xrow_yrow_f16", InType::F16, (Layout::RowMajor, Layout::RowMajor), OutType::F16, 32),
    sddmm("sparsek_sddmm_bs64_f16_xrow_yrow_f16", InType::F16, (Layout::RowMajor, Layout::RowMajor), OutType::F16, 64),
    sddmm(
        "sparsek_sddmm_bs128_f16_xrow_yrow_f16",
        InType::F16,
        (Layout::RowMajor, Layout::RowMajor),
        OutType::F16,
        128,
    ),
    sddmm("sparsek_sddmm_bs16_f16_xrow_ycol_f32", InType::F16, (Layout::RowMajor, Layout::ColMajor), OutType::F32, 16),
    sddmm("sparsek_sddmm_bs32_f16_xrow_ycol_f32", InType::F16, (Layout::RowMajor, Layout::ColMajor), OutType::F32, 32),
    sddmm("sparsek_sddmm_bs64_f16_xrow_ycol_f32", InType::F16, (Layout::RowMajor, Layout::ColMajor), OutType::F32, 64),
    sddmm(
        "sparsek_sddmm_bs128_f16_xrow_ycol_f32",
        InType::F16,
        (Layout::RowMajor, Layout::ColMajor),
        OutType::F32,
        128,
    ),
    sddmm("sparsek_sddmm_bs16_f16_xrow_ycol_f16", InType::F16, (Layout::RowMajor, Layout::ColMajor), OutType::F16, 16),
    sddmm("sparsek_sddmm_bs32_f16_xrow_ycol_f16", InType::F16, (Layout::RowMajor, Layout::ColMajor), OutType::F16, 32),
    sddmm("sparsek_sddmm_bs64_f16_xrow_ycol_f16", InType::F16, (Layout::RowMajor, Layout::ColMajor), OutType::F16, 64),
    sddmm(
        "sparsek_sddmm_bs128_f16_xrow_ycol_f16",
        InType::F16,
        (Layout::RowMajor, Layout::ColMajor),
        OutType::F16,
        128,
    ),
    sddmm("sparsek_sddmm_bs16_f16_xcol_yrow_f32", InType::F16, (Layout::ColMajor, Layout::RowMajor), OutType::F32, 16),
    sddmm("sparsek_sddmm_bs32_f16_xcol_yrow_f32", InType::F16, (Layout::ColMajor, Layout::RowMajor), OutType::F32, 32),
    sddmm("sparsek_sddmm_bs64_f16_xcol_yrow_f32", InType::F16, (Layout::ColMajor, Layout::RowMajor), OutType::F32, 64),
    sddmm(
        "sparsek_sddmm_bs128_f16_xcol_yrow_f32",
        InType::F16,
        (Layout::ColMajor, Layout::RowMajor),
        OutType::F32,
        128,
    ),
    sddmm("sparsek_sddmm_bs16_f16_xcol_yrow_f16", InType::F16, (Layout::ColMajor, Layout::RowMajor), OutType::F16, 16),
    sddmm("sparsek_sddmm_bs32_f16_xcol_yrow_f16", InType::F16, (Layout::ColMajor, Layout::RowMajor), OutType::F16, 32),
    sddmm("sparsek_sddmm_bs64_f16_xcol_yrow_f16", InType::F16, (Layout::ColMajor, Layout::RowMajor), OutType::F16, 64),
    sddmm(
        "sparsek_sddmm_bs128_f16_xcol_yrow_f16",
        InType::F16,
        (Layout::ColMajor, Layout::RowMajor),
        OutType::F16,
        128,
    ),
    sddmm("sparsek_sddmm_bs16_f16_xcol_ycol_f32", InType::F16, (Layout::ColMajor, Layout::ColMajor), OutType::F32, 16),
    sddmm("sparsek_sddmm_bs32_f16_xcol_ycol_f32", InType::F16, (Layout::ColMajor, Layout::ColMajor), OutType::F32, 32),
    sddmm("sparsek_sddmm_bs64_f16_xcol_ycol_f32", InType::F16, (Layout::ColMajor, Layout::ColMajor), OutType::F32, 64),
    sddmm(
        "sparsek_sddmm_bs128_f16_xcol_ycol_f32",
        InType::F16,
        (Layout::ColMajor, Layout::ColMajor),
        OutType::F32,
        128,
    ),
    sddmm("sparsek_sddmm_bs16_f16_xcol_ycol_f16", InType::F16, (Layout::ColMajor, Layout::ColMajor), OutType::F16, 16),
    sddmm("sparsek_sddmm_bs32_f16_xcol_ycol_f16", InType::F16, (Layout::ColMajor, Layout::ColMajor), OutType::F16, 32),
    sddmm("sparsek_sddmm_bs64_f16_xcol_ycol_f16", InType::F16, (Layout::ColMajor, Layout::ColMajor), OutType::F16, 64),
    sddmm(
        "sparsek_sddmm_bs128_f16_xcol_ycol_f16",
        InType::F16,
        (Layout::ColMajor, Layout::ColMajor),
        OutType::F16,
        128,
    ),
    sddmm(
        "sparsek_sddmm_bs16_bf16_xrow_yrow_f32",
        InType::Bf16,
        (Layout::RowMajor, Layout::RowMajor),
        OutType::F32,
        16,
    ),
    sddmm(
        "sparsek_sddmm_bs32_bf16_xrow_yrow_f32",
        InType::Bf16,
        (Layout::RowMajor, Layout::RowMajor),
        OutType::F32,
        32,
    ),
    sddmm(
        "sparsek_sddmm_bs64_bf16_xrow_yrow_f32",
        InType::Bf16,
        (Layout::RowMajor, Layout::RowMajor),
        OutType::F32,
        64,
    ),
    sddmm(
        "sparsek_sddmm_bs128_bf16_xrow_yrow_f32",
        InType::Bf16,
        (Layout::RowMajor, Layout::RowMajor),
        OutType::F32,
        128,
    ),
    sddmm(
        "sparsek_sddmm_bs16_bf16_xrow_yrow_bf16",
        InType::Bf16,
        (Layout::RowMajor, Layout::RowMajor),
        OutType::Bf16,
        16,
    ),
    sddmm(
        "sparsek_sddmm_bs32_bf16_xrow_yrow_bf16",
        InType::Bf16,
        (Layout::RowMajor, Layout::RowMajor),
        OutType::Bf16,
        32,
    ),
    sddmm(
        "sparsek_sddmm_bs64_bf16_xrow_yrow_bf16",
        InType::Bf16,
        (Layout::RowMajor, Layout::RowMajor),
        OutType::Bf16,
        64,
    ),
    sddmm(
        "sparsek_sddmm_bs128_bf16_xrow_yrow_bf16",
        InType::Bf16,
        (Layout::RowMajor, Layout::RowMajor),
        OutType::Bf16,
        128,
    ),
    sddmm(
        "sparsek_sddmm_bs16_bf16_xrow_ycol_f32",
        InType::Bf16,
        (Layout::RowMajor, Layout::ColMajor),
        OutType::F32,
        16,
    ),
    sddmm(
        "sparsek_sddmm_bs32_bf16_xrow_ycol_f32",
        InType::Bf16,
        (Layout::RowMajor, Layout::ColMajor),
        OutType::F32,
        32,
    ),
    sddmm(
        "sparsek_sddmm_bs64_bf16_xrow_ycol_f32",
        InType::Bf16,
        (Layout::RowMajor, Layout::ColMajor),
        OutType::F32,
        64,
    ),
    sddmm(
        "sparsek_sddmm_bs128_bf16_xrow_ycol_f32",
        InType::Bf16,
        (Layout::RowMajor, Layout::ColMajor),
        OutType::F32,
        128,
    ),
    sddmm(
        "sparsek_sddmm_bs16_bf16_xrow_ycol_bf16",
        InType::Bf16,
        (Layout::RowMajor, Layout::ColMajor),
        OutType::Bf16,
        16,
    ),
    sddmm(
        "sparsek_sddmm_bs32_bf16_xrow_ycol_bf16",
        InType::Bf16,
        (Layout::RowMajor, Layout::ColMajor),
        OutType::Bf16,
        32,
    ),
    sddmm(
        "sparsek_sddmm_bs64_bf16_xrow_ycol_bf16",
        InType::Bf16,
        (Layout::RowMajor, Layout::ColMajor),
        OutType::Bf16,
        64,
    ),
    sddmm(
        "sparsek_sddmm_bs128_bf16_xrow_ycol_bf16",
        InType::Bf16,
        (Layout::RowMajor, Layout::ColMajor),
        OutType::Bf16,
        128,
    ),
    sddmm(
        "sparsek_sddmm_bs16_bf16_xcol_yrow_f32",
        InType::Bf16,
        (Layout::ColMajor, Layout::RowMajor),
        OutType::F32,
        16,
    ),
    sddmm(
        "sparsek_sddmm_bs32_bf16_xcol_yrow_f32",
        InType::Bf16,
        (Layout::ColMajor, Layout::RowMajor),
        OutType::F32,
        32,
    ),
    sddmm(
        "sparsek_sddmm_bs64_bf16_xcol_yrow_f32",
        InType::Bf16,
        (Layout::ColMajor, Layout::RowMajor),
        OutType::F32,
        64,
    ),
    sddmm(
        "sparsek_sddmm_bs128_bf16_xcol_yrow_f32",
        InType::Bf16,
        (Layout::ColMajor, Layout::RowMajor),
        OutType::F32,
        128,
    ),
    sddmm(
        "sparsek_sddmm_bs16_bf16_xcol_yrow_bf16",
        InType::Bf16,
        (Layout::ColMajor, Layout::RowMajor),
        OutType::Bf16,
        16,
    ),
    sddmm(
        "sparsek_sddmm_bs32_bf16_xcol_yrow_bf16",
        InType::Bf16,
        (Layout::ColMajor, Layout::RowMajor),
        OutType::Bf16,
        32,
    ),
    sddmm(
        "sparsek_sddmm_bs64_bf16_xcol_yrow_bf16",
        InType::Bf16,
        (Layout::ColMajor, Layout::RowMajor),
        OutType::Bf16,
        64,
    ),
    sddmm(
        "sparsek_sddmm_bs128_bf16_xcol_yrow_bf16",
        InType::Bf16,
        (Layout::ColMajor, Layout::RowMajor),
        OutType::Bf16,
        128,
    ),
    sddmm(
        "sparsek_sddmm_bs16_bf16_xcol_ycol_f32",
        InType::Bf16,
        (Layout::ColMajor, Layout::ColMajor),
        OutType::F32,
        16,
    ),
    sddmm(
        "sparsek_sddmm_bs32_bf16_xcol_ycol_f32",
        InType::Bf16,
        (Layout::ColMajor, Layout::ColMajor),
        OutType::F32,
        32,
    ),
    sddmm(
        "sparsek_sddmm_bs64_bf16_xcol_ycol_f32",
        InType::Bf16,
        (Layout::ColMajor, Layout::ColMajor),
        OutType::F32,
        64,
    ),
    sddmm(
        "sparsek_sddmm_bs128_bf16_xcol_ycol_f32",
        InType::Bf16,
        (Layout::ColMajor, Layout::ColMajor),
        OutType::F32,
        128,
    ),
    sddmm(
        "sparsek_sddmm_bs16_bf16_xcol_ycol_bf16",
        InType::Bf16,
        (Layout::ColMajor, Layout::ColMajor),
        OutType::Bf16,
        16,
    ),
    sddmm(
        "sparsek_sddmm_bs32_bf16_xcol_ycol_bf16",
        InType::Bf16,
        (Layout::ColMajor, Layout::ColMajor),
        OutType::Bf16,
        32,
    ),
    sddmm(
        "sparsek_sddmm_bs64_bf16_xcol_ycol_bf16",
        InType::Bf16,
        (Layout::ColMajor, Layout::ColMajor),
        OutType::Bf16,
        64,
    ),
    sddmm(
        "sparsek_sddmm_bs128_bf16_xcol_ycol_bf16",
        InType::Bf16,
        (Layout::ColMajor, Layout::ColMajor),
        OutType::Bf16,
        128,
    ),
    hopper_t("sparsek_sm90t_bs64_f16_brow_f32", InType::F16, Layout::RowMajor, OutType::F32, 64),
    hopper_t("sparsek_sm90t_bs128_f16_brow_f32", InType::F16, Layout::RowMajor, OutType::F32, 128),
    hopper_t("sparsek_sm90t_bs64_f16_brow_f16", InType::F16, Layout::RowMajor, OutType::F16, 64),
    hopper_t("sparsek_sm90t_bs128_f16_brow_f16", InType::F16, Layout::RowMajor, OutType::F16, 128),
    hopper_t("sparsek_sm90t_bs64_f16_bcol_f32", InType::F16, Layout::ColMajor, OutType::F32, 64),
    hopper_t("sparsek_sm90t_bs128_f16_bcol_f32", InType::F16, Layout::ColMajor, OutType::F32, 128),
    hopper_t("sparsek_sm90t_bs64_f16_bcol_f16", InType::F16, Layout::ColMajor, OutType::F16, 64),
    hopper_t("sparsek_sm90t_bs128_f16_bcol_f16", InType::F16, Layout::ColMajor, OutType::F16, 128),
    hopper_t("sparsek_sm90t_bs64_bf16_brow_f32", InType::Bf16, Layout::RowMajor, OutType::F32, 64),
    hopper_t("sparsek_sm90t_bs128_bf16_brow_f32", InType::Bf16, Layout::RowMajor, OutType::F32, 128),
    hopper_t("sparsek_sm90t_bs64_bf16_brow_bf16", InType::Bf16, Layout::RowMajor, OutType::Bf16, 64),
    hopper_t("sparsek_sm90t_bs128_bf16_brow_bf16", InType::Bf16, Layout::RowMajor, OutType::Bf16, 128),
    hopper_t("sparsek_sm90t_bs64_bf16_bcol_f32", InType::Bf16, Layout::ColMajor, OutType::F32, 64),
    hopper_t("sparsek_sm90t_bs128_bf16_bcol_f32", InType::Bf16, Layout::ColMajor, OutType::F32, 128),
    hopper_t("sparsek_sm90t_bs64_bf16_bcol_bf16", InType::Bf16, Layout::ColMajor, OutType::Bf16, 64),
    hopper_t("sparsek_sm90t_bs128_bf16_bcol_bf16", InType::Bf16, Layout::ColMajor, OutType::Bf16, 128),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs128_f16_xrow_yrow_f32",
        InType::F16,
        (Layout::RowMajor, Layout::RowMajor),
        OutType::F32,
        128,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs128_f16_xrow_yrow_f16",
        InType::F16,
        (Layout::RowMajor, Layout::RowMajor),
        OutType::F16,
        128,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs128_f16_xrow_ycol_f32",
        InType::F16,
        (Layout::RowMajor, Layout::ColMajor),
        OutType::F32,
        128,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs128_f16_xrow_ycol_f16",
        InType::F16,
        (Layout::RowMajor, Layout::ColMajor),
        OutType::F16,
        128,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs128_f16_xcol_yrow_f32",
        InType::F16,
        (Layout::ColMajor, Layout::RowMajor),
        OutType::F32,
        128,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs128_f16_xcol_yrow_f16",
        InType::F16,
        (Layout::ColMajor, Layout::RowMajor),
        OutType::F16,
        128,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs128_f16_xcol_ycol_f32",
        InType::F16,
        (Layout::ColMajor, Layout::ColMajor),
        OutType::F32,
        128,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs128_f16_xcol_ycol_f16",
        InType::F16,
        (Layout::ColMajor, Layout::ColMajor),
        OutType::F16,
        128,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs128_bf16_xrow_yrow_f32",
        InType::Bf16,
        (Layout::RowMajor, Layout::RowMajor),
        OutType::F32,
        128,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs128_bf16_xrow_yrow_bf16",
        InType::Bf16,
        (Layout::RowMajor, Layout::RowMajor),
        OutType::Bf16,
        128,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs128_bf16_xrow_ycol_f32",
        InType::Bf16,
        (Layout::RowMajor, Layout::ColMajor),
        OutType::F32,
        128,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs128_bf16_xrow_ycol_bf16",
        InType::Bf16,
        (Layout::RowMajor, Layout::ColMajor),
        OutType::Bf16,
        128,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs128_bf16_xcol_yrow_f32",
        InType::Bf16,
        (Layout::ColMajor, Layout::RowMajor),
        OutType::F32,
        128,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs128_bf16_xcol_yrow_bf16",
        InType::Bf16,
        (Layout::ColMajor, Layout::RowMajor),
        OutType::Bf16,
        128,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs128_bf16_xcol_ycol_f32",
        InType::Bf16,
        (Layout::ColMajor, Layout::ColMajor),
        OutType::F32,
        128,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs128_bf16_xcol_ycol_bf16",
        InType::Bf16,
        (Layout::ColMajor, Layout::ColMajor),
        OutType::Bf16,
        128,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs64_f16_xrow_yrow_f32",
        InType::F16,
        (Layout::RowMajor, Layout::RowMajor),
        OutType::F32,
        64,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs64_f16_xrow_yrow_f16",
        InType::F16,
        (Layout::RowMajor, Layout::RowMajor),
        OutType::F16,
        64,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs64_f16_xrow_ycol_f32",
        InType::F16,
        (Layout::RowMajor, Layout::ColMajor),
        OutType::F32,
        64,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs64_f16_xrow_ycol_f16",
        InType::F16,
        (Layout::RowMajor, Layout::ColMajor),
        OutType::F16,
        64,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs64_f16_xcol_yrow_f32",
        InType::F16,
        (Layout::ColMajor, Layout::RowMajor),
        OutType::F32,
        64,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs64_f16_xcol_yrow_f16",
        InType::F16,
        (Layout::ColMajor, Layout::RowMajor),
        OutType::F16,
        64,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs64_f16_xcol_ycol_f32",
        InType::F16,
        (Layout::ColMajor, Layout::ColMajor),
        OutType::F32,
        64,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs64_f16_xcol_ycol_f16",
        InType::F16,
        (Layout::ColMajor, Layout::ColMajor),
        OutType::F16,
        64,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs64_bf16_xrow_yrow_f32",
        InType::Bf16,
        (Layout::RowMajor, Layout::RowMajor),
        OutType::F32,
        64,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs64_bf16_xrow_yrow_bf16",
        InType::Bf16,
        (Layout::RowMajor, Layout::RowMajor),
        OutType::Bf16,
        64,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs64_bf16_xrow_ycol_f32",
        InType::Bf16,
        (Layout::RowMajor, Layout::ColMajor),
        OutType::F32,
        64,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs64_bf16_xrow_ycol_bf16",
        InType::Bf16,
        (Layout::RowMajor, Layout::ColMajor),
        OutType::Bf16,
        64,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs64_bf16_xcol_yrow_f32",
        InType::Bf16,
        (Layout::ColMajor, Layout::RowMajor),
        OutType::F32,
        64,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs64_bf16_xcol_yrow_bf16",
        InType::Bf16,
        (Layout::ColMajor, Layout::RowMajor),
        OutType::Bf16,
        64,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs64_bf16_xcol_ycol_f32",
        InType::Bf16,
        (Layout::ColMajor, Layout::ColMajor),
        OutType::F32,
        64,
    ),
    hopper_sddmm(
        "sparsek_sm90_sddmm_bs64_bf16_xcol_ycol_bf16",
        InType::Bf16,
        (Layout::ColMajor, Layout::ColMajor),
        OutType::Bf16,
        64,
    ),
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
