//! The planning room: one pure function ([`plan`]) maps a problem ([`Problem`]: types, layouts, shapes, block
//! size, row lengths, epilogue, capture state), the device's facts ([`DeviceFacts`]: SMs, L2, the loaded kernels
//! and their occupancy) and one [`Policy`] to one [`LaunchPlan`]: the kernel variant, the work decomposition (whole
//! rows, split rows, the flat block list, the sm_90a split rows and tile counter), the grid, the row order and
//! rasterization, and the launch attributes (evict-first window, TMA store of C, programmatic launch). It is the
//! only place any of these are decided; every threshold is a row of one table ([`RULES`]).
//!
//! No driver, no device: this module imports neither `cudarc` nor the `gpu` module (a unit test checks), so every
//! rule runs in tests without a GPU. The launcher (`gpu/launch/spmm.rs`) builds the problem from a launch, calls
//! the planner, and executes the plan.

mod backward;
mod family;
mod launch_plan;
pub(crate) mod rules;
mod split;
#[cfg(test)]
mod tests;

use std::num::NonZeroU32;

use sparsek_layout::{InType, KernelConfig, Layout, Module, Op, OutType, Pipeline, Tile, Variant};

pub(crate) use backward::plan_backward;
pub use backward::{BackwardProblem, SddmmTileCounts};
pub use launch_plan::{Decomposition, LaunchPlan};
pub use rules::{RULES, Rule};
pub use split::RowSplit;
// What the launcher and the older rule-level API (doc-hidden wrappers on Gpu) take of the decomposition rules.
pub(crate) use split::{HopperSplit, SpaceNeed, SplitLimits};
// Read by the tests and the decode benchmark.
#[doc(hidden)]
pub use split::flat_ctas;
pub(crate) use split::{
    flat_auto_serves, flat_need, hopper_need, hopper_split_choice, rows_skewed, split_choice, split_need,
};

pub(crate) use family::Room;

use crate::error::{BsrError, Error, Result};
use crate::tune::{CachedPlan, KernelFamily, Plan, PlanKey, PlanSource};
use rules::*;

/// How the sm_90a kernels' CTAs take their tiles ([`Policy::tile_schedule`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TileSchedule {
    /// A persistent grid taking tiles from a counter wherever it can have one (the Gpu's when its workspace exists
    /// and no other stream holds it; a launch being captured into a CUDA graph its own, where the device can give
    /// it one: [`DeviceFacts::graph_memory`]), else [`TileSchedule::PerTile`].
    #[default]
    Auto,
    /// One tile per consumer set, CTAs handed out by the hardware as SMs free up: one CTA per tile, or per two
    /// tiles for the ping-pong kernels (bs 64), whose two sets take one each.
    PerTile,
    /// A persistent grid, CTA `c` taking tiles `c, c + grid, ...` (for comparisons and tests of that path).
    Static,
}

/// The grid of an sm_90a launch ([`tile_grid`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TileGrid {
    /// CTAs launched.
    pub ctas: u32,
    /// Whether they take tiles from the workspace's counter (else with a static stride).
    pub counter: bool,
}

/// The settings a `Gpu` plans its launches with (`Gpu::with_policy`). `Default` is the library's: every kernel and
/// decomposition the rules may choose, without programmatic launch (which needs the caller's promise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Launches may use the sm_90a kernels where the GPU has them. `false` keeps every launch on the portable
    /// module: for comparisons, or the same kernels on every GPU.
    pub hopper: bool,
    /// Launches of at most [`sparsek_layout::DECODE_MAX_N`] columns may use the decode kernels.
    pub decode: bool,
    /// Launches whose wide or sm_90a grid would leave SMs idle take the mid or narrow tile instead.
    pub small_grids: bool,
    /// Launches may use the sm_90a short-row kernels.
    pub short_rows: bool,
    /// A decode launch that reads each block of A once marks A's values evict-first in L2 (default: yes): at most
    /// [`sparsek_layout::NARROW_MAX_N`] columns in one N tile of its kernel, with at least an eighth of L2 in A
    /// (`A_WINDOW_MIN_L2_FRACTION` in [`RULES`]). Streaming a weight through L2 then pushes out neither what the
    /// launch itself reads again (B, the indices) nor what the next kernels read. It is an L2 access policy window
    /// on the launch (streaming hits and misses) over A's values, up to the device's largest window; a GPU without
    /// windows launches without it. The results are the same either way. On an H200 it made the decode launches' own time
    /// 5-12% shorter (docs/perf-notes.md, issue 12 step 13). `false`: plain launches, for comparisons.
    pub a_evict_first: bool,
    /// The product module's launches (the decode, narrow and mid tiles, and the portable wide tile) may start
    /// before the kernel ahead of them on the stream has finished (programmatic dependent launch; default: no).
    /// Such a launch reads A's values and structure while that kernel still runs, then waits for it before it
    /// reads B or the bias or touches C, hiding its own launch and the first round trips of A.
    ///
    /// **Enable it only when the kernel before each product does not write A** (its values or indices): weights
    /// in inference do not change between layers; an optimizer step that updates them in place, right before the
    /// product on the same stream, does. B, the bias and C may be produced and consumed by neighbouring kernels as
    /// usual. Only where the product module loads from its sm_90a cubin (H100, H200:
    /// `Gpu::programmatic_launch_available`); elsewhere, and for the sm_90a module's kernels, launches stay plain.
    /// The results are the same either way.
    pub programmatic: bool,
    /// The product module's launches that are not [`Policy::programmatic`] start early too, where the GPU can
    /// (default: yes): launched with programmatic serialization, each waits for the kernel ahead of it before it
    /// reads anything at all ([`sparsek_layout::SPMM_WAIT_FIRST`]), so it needs no promise about A. Its CTAs are
    /// placed on the SMs as the kernel ahead of it ends rather than after, which hides the launch itself but not
    /// A's first round trips. Under capture into a CUDA graph only after kernel nodes, as for `programmatic`.
    /// `false`: plain launches, for comparisons.
    pub early_start: bool,
    /// How long block rows are split over several CTAs.
    pub row_split: RowSplit,
    /// How the sm_90a kernels take their tiles.
    pub tile_schedule: TileSchedule,
    /// Plan launches for at most this many SMs (default `None`: all of them; a limit above the device's SMs is
    /// the device's), so that work on other streams keeps the rest: a second model, or a collective overlapping a
    /// product (measured for tensor parallelism on two H200s, where it did not pay: docs/perf-notes.md, "Issue 45:
    /// the SM-limited overlap"). Every decision that depends on the SMs (the kernel family's small-grid rules,
    /// split rows, the flat list's CTAs, the waves and rasterization groups) is made for the limit, and the grid of
    /// the forward product's sm_90a kernels is held to it: a persistent grid of at most `limit` x their CTAs per SM
    /// (one per SM for every sm_90a kernel on an H100 and H200, whose shared memory takes a whole SM), taking tiles
    /// from the counter where the stream can have it, else with a static stride ([`TileSchedule::Static`]) rather
    /// than a CTA per tile. The product module's kernels (the decode, narrow, mid and portable wide tiles; every
    /// launch on a GPU without the sm_90a module) and the backward products run a CTA per tile or part, which the
    /// hardware spreads over every SM: their grids are not held to it. The results are the same bits with or
    /// without a limit wherever the decomposition is the same ([`LaunchPlan::sm_limit`] shows the limit).
    pub sm_limit: Option<NonZeroU32>,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            hopper: true,
            decode: true,
            small_grids: true,
            short_rows: true,
            a_evict_first: true,
            programmatic: false,
            early_start: true,
            row_split: RowSplit::Auto,
            tile_schedule: TileSchedule::Auto,
            sm_limit: None,
        }
    }
}

/// One loaded kernel: its variant and how many of its CTAs fit on an SM (the driver's occupancy answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loaded {
    /// The variant.
    pub variant: Variant,
    /// CTAs per SM.
    pub ctas_per_sm: u32,
}

/// What the planner knows of a device, read once when the `Gpu` opens.
#[derive(Clone, Debug, Default)]
pub struct DeviceFacts {
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// L2 cache bytes.
    pub l2_bytes: u64,
    /// The largest L2 access policy window a launch may carry, in bytes (0: none).
    pub max_access_policy_window: usize,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// The product module was loaded from its sm_90a cubin: its kernels may be launched programmatically.
    pub programmatic_available: bool,
    /// A launch captured into a CUDA graph can have a workspace of its own there: the device has stream-ordered
    /// allocation, the driver is CUDA 12.3 or later, and the `Gpu` made the counters graphs hold (gpu/split.rs,
    /// `GraphSpace`). Without it a captured launch keeps whole rows and one tile per CTA.
    pub graph_memory: bool,
    /// The split-row workspace exists (every `Gpu` allocates [`SPLIT_PARTIALS_BYTES`] and [`SPLIT_COUNTERS`]).
    pub workspace: bool,
    /// The product module's kernels, in the order the `Gpu` loaded them.
    pub product: Vec<Loaded>,
    /// The sm_90a module's kernels (empty where it is not loaded).
    pub hopper: Vec<Loaded>,
}

/// A GPU to plan for without one ([`DeviceFacts::estimated`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    /// An H100 SXM: 132 SMs, 50 MiB of L2.
    H100,
    /// An H200: 132 SMs, 60 MiB of L2.
    H200,
}

impl DeviceFacts {
    /// The facts of a `preset` GPU as far as they are known without it: its SMs and L2, an access-policy window of
    /// 128 MiB, the workspace and stream-ordered allocation, both modules loaded from their cubins (the sm_90a one
    /// and the product module's programmatic launch), and every kernel's occupancy **estimated** from shared memory
    /// (228 KiB per SM, 1 KiB reserved per CTA) and threads (2048 per SM) alone. The driver also counts registers,
    /// so a real GPU may fit fewer CTAs: decisions that depend on the wave (the persistent grid, the flat list's
    /// CTAs, the row order, raster groups) may differ from the GPU's own ([`Gpu::plan`](crate::gpu::Gpu::plan)).
    pub fn estimated(preset: Preset) -> DeviceFacts {
        let occupancy = |v: &Variant| {
            let cfg = v.config;
            let by_smem = (228 * 1024) / (cfg.smem_bytes() + 1024);
            let by_threads = 2048 / cfg.threads().max(1);
            by_smem.min(by_threads).clamp(1, 32)
        };
        let catalog = |module: Module, arch: sparsek_layout::Arch| -> Vec<Loaded> {
            sparsek_layout::VARIANTS
                .iter()
                .filter(|v| v.module == module && v.arch == arch)
                .map(|v| Loaded { variant: *v, ctas_per_sm: occupancy(v) })
                .collect()
        };
        DeviceFacts {
            sm_count: 132,
            l2_bytes: match preset {
                Preset::H100 => 50 << 20,
                Preset::H200 => 60 << 20,
            },
            max_access_policy_window: 128 << 20,
            compute_capability: (9, 0),
            programmatic_available: true,
            graph_memory: true,
            workspace: true,
            product: catalog(Module::Product, sparsek_layout::Arch::Sm80),
            hopper: catalog(Module::Hopper, sparsek_layout::Arch::Sm90a),
        }
    }

    /// Whether the sm_90a module is loaded.
    pub fn sm90a_loaded(&self) -> bool {
        !self.hopper.is_empty()
    }
}

/// Which kernel a launch runs: its family by the cached plan or the heuristic, a family fixed by the caller, or a
/// given kernel (the tuner's candidates).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Choice {
    /// The cached plan for the problem when its family serves, else the built-in heuristic's.
    #[default]
    Resolve,
    /// The kernel of this plan's family, and its rasterization group.
    Fixed(Plan),
    /// This kernel (from outside the catalog), with this rasterization group (`None`: the planner's).
    Kernel(Loaded, Option<u32>),
}

/// One launch as the planner sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Problem<'a> {
    /// The operation.
    pub op: Op,
    /// A's block size.
    pub bs: usize,
    /// Element type of A and B.
    pub input: InType,
    /// Element type of C.
    pub output: OutType,
    /// B's storage order.
    pub b_layout: Layout,
    /// C's storage order.
    pub c_layout: Layout,
    /// Rows of A and C.
    pub m: usize,
    /// Columns of A, rows of B.
    pub k: usize,
    /// Columns of B and C.
    pub n: usize,
    /// A's nonzero blocks.
    pub nnzb: usize,
    /// The longest block row's blocks, when known.
    pub max_row_blocks: Option<usize>,
    /// Every block row's length in the row order (longest first), when known.
    pub row_lengths: Option<&'a [u32]>,
    /// A has a row order (longest rows first) on the device.
    pub row_order: bool,
    /// C is not read (beta 0): with a row-major C that a tensor map can cover, an sm_90a kernel may store it so.
    pub beta_zero: bool,
    /// The stream is being captured into a CUDA graph.
    pub captured: bool,
    /// Captured after kernel nodes only (a programmatic edge needs a kernel node before it).
    pub follows_kernels: bool,
    /// The stream can have the Gpu's tile counter now (no other stream holds it). A captured launch has its own.
    pub tile_counter_free: bool,
    /// Which kernel.
    pub choice: Choice,
}

impl Problem<'_> {
    /// A product of an `m x k` A with blocks of `bs` (`nnzb` of them) and a `k x n` B, row-major, f16 inputs, f32
    /// output, beta 0, on a stream that may take the tile counter, not captured; rows unknown.
    pub fn new(bs: usize, (m, k, n): (usize, usize, usize), nnzb: usize) -> Problem<'static> {
        Problem {
            op: Op::BsrSpmm,
            bs,
            input: InType::F16,
            output: OutType::F32,
            b_layout: Layout::RowMajor,
            c_layout: Layout::RowMajor,
            m,
            k,
            n,
            nnzb,
            max_row_blocks: None,
            row_lengths: None,
            row_order: false,
            beta_zero: true,
            captured: false,
            follows_kernels: false,
            tile_counter_free: true,
            choice: Choice::Resolve,
        }
    }

    /// The key of the tuned plan that would serve this problem.
    pub fn plan_key(&self) -> PlanKey {
        let types = (self.input, self.b_layout, self.output, self.c_layout);
        PlanKey::new(types, self.bs, (self.m, self.k, self.n), self.nnzb, self.max_row_blocks)
    }

    fn types(&self) -> (InType, Layout, OutType) {
        (self.input, self.b_layout, self.output)
    }

    fn block_rows(&self) -> usize {
        self.m.checked_div(self.bs).unwrap_or(0)
    }

    /// Bytes of one block of A (both input types are 16-bit).
    fn block_bytes(&self) -> usize {
        self.bs * self.bs * 2
    }
}

/// Where the kernel of a plan is: the product module's `i`-th, the sm_90a module's `i`-th, or the one the problem
/// gave ([`Choice::Kernel`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KernelRef {
    Product(usize),
    Hopper(usize),
    Given,
}

/// The first decision: the kernel, its rasterization group when fixed, and where the choice came from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Chosen {
    pub(crate) kernel: KernelRef,
    pub(crate) loaded: Loaded,
    pub(crate) group_rows: Option<u32>,
    /// The decomposition a tuned or fixed plan measured ([`Plan::row_split`], [`Plan::tile_schedule`]); `Auto`:
    /// the rules'.
    pub(crate) row_split: RowSplit,
    pub(crate) tile_schedule: TileSchedule,
    pub(crate) choice: Option<(KernelFamily, PlanSource)>,
}

/// Every decision of a launch: the [`LaunchPlan`] (the kernel's name, the decomposition and its parameters, the
/// grid, the attributes), and what executing it needs that the public plan does not carry: where the kernel is
/// loaded (its configuration is that kernel's), and what it takes of a workspace.
#[derive(Clone, Debug)]
pub(crate) struct Decision {
    pub(crate) plan: LaunchPlan,
    /// The kernel that runs (the flat list's or the tile of 32 in place of the chosen one).
    pub(crate) kernel: KernelRef,
    /// What the launch takes of the workspace (the Gpu's, or with [`LaunchPlan::graph_workspace`] its own):
    /// nothing where it may not use one.
    pub(crate) need: SpaceNeed,
}

/// The plan a launch of `problem` runs on `device` under `policy`, `cached` the tuned plan for its key
/// ([`Problem::plan_key`]) if any. Errors: [`Error::InvalidBsr`] for a block size no kernel serves,
/// [`Error::InvalidArgument`] for a type combination without kernels, a fixed plan whose family cannot serve, or
/// a grid beyond the kernels' limit.
pub fn plan(
    problem: &Problem<'_>,
    device: &DeviceFacts,
    policy: &Policy,
    cached: Option<&CachedPlan>,
) -> Result<LaunchPlan> {
    let room = Room { device, policy };
    let chosen = choose(room, problem, cached)?;
    decide(room, &chosen, problem).map(|d| d.plan)
}

/// The kernel of a launch: [`Choice::Resolve`] the cached plan's family when it serves, else the heuristic's;
/// [`Choice::Fixed`] that plan's family; [`Choice::Kernel`] that kernel.
pub(crate) fn choose(room: Room<'_>, p: &Problem<'_>, cached: Option<&CachedPlan>) -> Result<Chosen> {
    let bs = p.bs;
    let types = p.types();
    match p.choice {
        Choice::Kernel(loaded, group_rows) => {
            let (row_split, tile_schedule) = (RowSplit::Auto, TileSchedule::Auto);
            return Ok(Chosen { kernel: KernelRef::Given, loaded, group_rows, row_split, tile_schedule, choice: None });
        }
        Choice::Fixed(plan) => {
            if plan.group_rows == Some(0) {
                return Err(Error::InvalidArgument { name: "plan", reason: "group_rows is 0 (at least 1)".into() });
            }
            let found =
                u32::try_from(bs).ok().and_then(|bs| room.family_kernel(plan.family, p.op, bs, types, (p.nnzb, p.n)));
            return match found {
                Some((kernel, loaded)) => Ok(Chosen {
                    kernel,
                    loaded: *loaded,
                    group_rows: plan.group_rows,
                    row_split: plan.row_split,
                    tile_schedule: plan.tile_schedule,
                    choice: None,
                }),
                None => Err(Error::InvalidArgument {
                    name: "plan",
                    reason: format!(
                        "no {} kernel for bs {bs}, {} inputs, B {}-major, {} output, {} blocks on this GPU",
                        plan.family,
                        p.input.name(),
                        p.b_layout.name(),
                        p.output.name(),
                        p.nnzb
                    ),
                }),
            };
        }
        Choice::Resolve => {}
    }
    if !matches!(bs, 16 | 32 | 64 | 128) {
        return Err(Error::InvalidBsr(BsrError::UnsupportedBlockSize { bs }));
    }
    let bs32 = bs as u32;
    let tuned = cached.and_then(|c| {
        room.family_kernel(c.plan.family, p.op, bs32, types, (p.nnzb, p.n)).map(|k| (c.plan, k, PlanSource::Tuned))
    });
    let resolved = tuned.or_else(|| {
        room.heuristic_plan(p.op, bs32, types, p.n, p.nnzb, (p.block_rows(), p.max_row_blocks))
            .map(|(plan, k)| (plan, k, PlanSource::Heuristic))
    });
    match resolved {
        Some((plan, (kernel, loaded), source)) => Ok(Chosen {
            kernel,
            loaded: *loaded,
            group_rows: plan.group_rows,
            row_split: plan.row_split,
            tile_schedule: plan.tile_schedule,
            choice: Some((plan.family, source)),
        }),
        None => Err(Error::InvalidArgument {
            name: "element types",
            reason: format!(
                "{} inputs with a {} output are not supported: C is f32 or the inputs' own type",
                p.input.name(),
                p.output.name()
            ),
        }),
    }
}

/// Every decision of a launch of `chosen` on `p`, in one place: the workspace it may use (the Gpu's, or on a
/// stream being captured into a CUDA graph a graph-owned one where the balance pays), the flat block list or bs
/// 64's tile of 32 in its place, split rows (narrow and mid tiles, or the sm_90a kernels'), the sm_90a grid
/// (persistent on the tile counter where the stream can have it), the CTAs, the row order, the rasterization
/// groups, A's evict-first window, a TMA store of C and programmatic serialization. A tuned or fixed plan's
/// decomposition ([`Plan::row_split`], [`Plan::tile_schedule`]) stands in for the rules' where the policy leaves
/// them to the rules (`Auto`); where it cannot apply (a split on a kernel that cannot split, a flat list without a
/// flat kernel, a workspace that cannot hold it) the launch gets what that setting gives there (whole rows, or the
/// rules').
pub(crate) fn decide(room: Room<'_>, chosen: &Chosen, p: &Problem<'_>) -> Result<Decision> {
    let policy = &Policy {
        row_split: match room.policy.row_split {
            RowSplit::Auto => chosen.row_split,
            fixed => fixed,
        },
        tile_schedule: match room.policy.tile_schedule {
            TileSchedule::Auto => chosen.tile_schedule,
            fixed => fixed,
        },
        ..*room.policy
    };
    let device = room.device;
    let room = Room { device, policy };
    let (bs, nnzb, n, k, captured) = (p.bs, p.nnzb, p.n, p.k, p.captured);
    let rows = p.block_rows();
    let block_rows = u32::try_from(rows).unwrap_or(u32::MAX);
    let max_row_blocks = p.max_row_blocks;
    let sm_count = room.sms() as usize;
    let limits = room.limits();
    // Split rows, the flat list and the sm_90a tile counter need a workspace: the Gpu's own, or on a stream being
    // captured into a CUDA graph one the graph holds for this launch alone (its counters kept zeroed between replays,
    // its partial tiles in the graph's memory: gpu/split.rs, `GraphSpace`), where the device can give one; there the
    // launch makes the choices it makes outside a graph, with the same bits. Those nodes cost 0.04-0.2 us a launch,
    // and the eager choices measured level or 13-18% faster than whole rows in a graph on every decode case tried
    // (H200, docs/perf-notes.md "Issue 43 part 3: the graph workspace without its memset node").
    let workspace = device.workspace && (!captured || device.graph_memory);
    // The flat block list (RowSplit::Flat, or Auto where it serves): its kernel in place of the narrow one, one
    // share of A's blocks per CTA.
    let flat = if workspace { flat_for(room, &chosen.loaded, (nnzb, rows, n), max_row_blocks) } else { None };
    // Else bs 64's tile of 32 columns in place of its tile of 64 where one row dominates and no flat list serves
    // the types: the tile of 32 can split that row.
    let skew = match (workspace, flat) {
        (true, None) => skew_tile_for(room, &chosen.loaded, (nnzb, rows, n), max_row_blocks),
        _ => None,
    };
    let (kernel, loaded) = match (flat, skew) {
        (Some((r, l, _)), _) => (r, l),
        (None, Some((r, l))) => (r, l),
        (None, None) => (chosen.kernel, chosen.loaded),
    };
    let flat = flat.map(|(_, _, g)| g);
    let cfg = loaded.variant.config;
    let hopper_kernel = matches!(cfg.pipeline, Pipeline::TmaWgmma { .. });
    let n_tiles = n.div_ceil(cfg.bn.max(1) as usize);
    // Split rows (the narrow kernels): long block rows spread over several CTAs.
    let split = match (workspace, flat) {
        (true, None) => split_choice(&cfg, policy.row_split, (nnzb, rows, n_tiles), max_row_blocks, limits),
        _ => None,
    };
    let chunks = split.map_or(1, |c| c.chunks as usize);
    // Split rows on the sm_90a kernels: where the longest rows' tiles would outlast an equal share of the work,
    // those rows' tiles are split into parts that other CTAs take; only where the row order and its lengths are
    // known.
    let hopper_split = match (workspace, p.row_lengths) {
        (true, Some(lengths)) if hopper_kernel && p.row_order => {
            hopper_split_for(room, &cfg, loaded.ctas_per_sm, (lengths, nnzb), n)
        }
        _ => None,
    };
    let virtual_rows = hopper_split
        .map_or(block_rows, |c| sparsek_layout::hopper_virtual_rows(block_rows, c.split_rows, c.chunks))
        as usize;
    // The sm_90a kernels' grid: persistent on a tile counter when the schedule wants it and the stream can have
    // the Gpu's counter without waiting for another stream (a captured launch has its own); else without it.
    let counter =
        hopper_kernel && workspace && policy.tile_schedule == TileSchedule::Auto && (captured || p.tile_counter_free);
    // Under an SM limit a grid of a CTA per tile would spread over every SM: without the counter the grid stays
    // persistent, with a static stride.
    let limited = sm_limited(room);
    let schedule = match policy.tile_schedule {
        TileSchedule::Auto | TileSchedule::PerTile if limited && !counter => TileSchedule::Static,
        s => s,
    };
    let grid = tile_grid(schedule, &cfg, (loaded.ctas_per_sm, room.sms()), virtual_rows * n_tiles, counter);
    // How the work is split (at most one of the three: the flat kernel and the split-row tiles run the CpAsync
    // pipeline, the sm_90a ones TmaWgmma), and what the launch takes of the workspace for it.
    let (decomposition, need) = match (flat, split, hopper_split) {
        (Some(g), _, _) => (Decomposition::FlatList { ctas_per_tile: g }, flat_need(&cfg, g, n_tiles)),
        (None, Some(c), _) => {
            let need = split_need(&cfg, c, (nnzb, rows, n_tiles));
            (Decomposition::SplitRows { chunks: c.chunks, blocks: c.blocks }, need)
        }
        (None, None, Some(c)) => {
            let HopperSplit { split_rows, chunks, blocks } = c;
            (Decomposition::HopperSplitRows { split_rows, chunks, blocks }, hopper_need(&cfg, c, n_tiles))
        }
        (None, None, None) => (Decomposition::WholeRows, SpaceNeed::default()),
    };
    let need = SpaceNeed { scheduler: counter, ..need };
    // The decode kernels split each block row into bs / 16 slices of one CTA each (`KernelConfig::slices`).
    let ctas = rows * cfg.slices() as usize * chunks * n_tiles;
    if ctas > i32::MAX as usize {
        return Err(Error::InvalidArgument {
            name: "CTAs (M / bs * slices * split parts * N / BN)",
            reason: format!("{ctas} exceeds the kernel's limit of {}", i32::MAX),
        });
    }
    let ctas = grid.map_or(ctas as u32, |g| g.ctas);
    let ctas = flat.map_or(ctas, |g| g * n_tiles as u32);
    let wave = loaded.ctas_per_sm as usize * sm_count;
    // Longest rows first matters only when CTAs wait for a free SM. A grid of one CTA per tile that fits in one
    // wave starts every CTA at once, so it takes the rows in their natural order and saves each CTA its first
    // dependent load (row_order, then row_ptr, then col_idx: a DRAM round trip each on a cold matrix;
    // docs/perf-notes.md, issue 12 step 7). The sm_90a kernels walk their tiles in that order: they keep it.
    let longest_rows_first =
        p.row_order && !matches!(cfg.pipeline, Pipeline::CpAsync | Pipeline::Direct if ctas as usize <= wave);
    let group_rows = chosen.group_rows.unwrap_or_else(|| {
        // Grouping pays from RASTER_MIN_BS on (docs/perf-notes.md, step 3): small blocks keep the plain order.
        if bs < RASTER_MIN_BS {
            return block_rows;
        }
        // The sm_90a ping-pong kernels (bs 64) walk their tiles from a counter in plain order: every row of one N
        // tile before the next, so the wave shares one B strip, read once (H100, docs/perf-notes.md "Hopper", step
        // 20: 3-9% faster than the groups at 8192^3 15-50% and more shapes; at bs 128 the groups stay).
        if cfg.pingpong() {
            return block_rows;
        }
        let wave = (loaded.ctas_per_sm.max(1) * room.sms()) as usize;
        let a_row_bytes = nnzb * bs * bs * 2 / rows.max(1);
        let b_tile_bytes = k * cfg.bn as usize * 2;
        raster_group_rows(rows, n_tiles, a_row_bytes, b_tile_bytes, wave, device.l2_bytes)
    });
    // A decode launch of one N tile reads each block of A once: its values are marked evict-first in L2.
    let a_bytes = nnzb.saturating_mul(p.block_bytes());
    let evict_first_bytes =
        a_window(policy.a_evict_first, (n, n_tiles), a_bytes, (device.l2_bytes, device.max_access_policy_window));
    let graph_workspace = workspace && captured && need.any();
    // A C written without reading it (beta 0) is stored through a tensor map from shared memory, whole 128-byte
    // lines at a time: stored from the registers, each warp's store wrote 8 rows of 32 bytes and took 17-48% of the
    // time at 5-22% density (docs/perf-notes.md, Hopper step 11); a column-major C of 16-bit elements 8-14% at 4096
    // tokens (perf-notes, "Issue 43: the bias epilogue"). A row-major map covers whole 16 bytes of a row only.
    let c_tma = hopper_kernel && c_tma_possible(p);
    // Programmatic serialization: the product module's kernels (every one holds the wait), where the policy asks
    // and the module came from its sm_90a cubin; under capture only after kernels (a graph's programmatic edge runs
    // from a kernel node). A graph-owned workspace keeps it: its allocation and free nodes are off the stream's
    // chain (gpu/split.rs, `GraphSpace`), so the kernel still follows the kernel before it.
    let v = &loaded.variant;
    let programmatic_kernel = (policy.programmatic || policy.early_start)
        && device.programmatic_available
        && v.module == Module::Product
        && matches!(v.config.pipeline, Pipeline::CpAsync | Pipeline::Direct);
    let programmatic = programmatic_kernel && (!captured || p.follows_kernels);
    // Without the caller's promise about A (`Policy::programmatic`), the kernel waits before it reads anything.
    let waits_first = programmatic && !policy.programmatic;
    let plan = LaunchPlan {
        kernel: v.name,
        choice: chosen.choice,
        skew_tile: skew.is_some(),
        decomposition,
        tile_counter: need.scheduler,
        ctas,
        threads: cfg.threads(),
        smem_bytes: cfg.smem_bytes(),
        longest_rows_first,
        group_rows,
        evict_first_bytes,
        c_tma,
        programmatic,
        waits_first,
        graph_workspace,
        sm_limit: limited.then(|| room.sms()),
    };
    Ok(Decision { plan, kernel, need })
}

/// The plans the tuner measures for `plan` on `p`: the plan as given (its decomposition by the rules, or the one
/// it names), whole rows, split rows in parts of [`SPLIT_PART_BYTES`], the flat list at [`FLAT_AUTO_CTAS_PER_SM`]
/// CTAs per SM, and for the sm_90a kernels one tile per CTA instead of the tile counter; each only where it gives
/// the launch another kernel, decomposition or grid than those before it (so a kernel that cannot split rows is
/// measured once).
pub(crate) fn tune_decompositions(room: Room<'_>, p: &Problem<'_>, plan: Plan) -> Vec<Plan> {
    let part = u32::try_from((SPLIT_PART_BYTES / p.block_bytes().max(1)).max(1)).unwrap_or(u32::MAX);
    let alternatives = [
        (plan.row_split, plan.tile_schedule),
        (RowSplit::Off, TileSchedule::Auto),
        (RowSplit::Blocks(part), TileSchedule::Auto),
        (RowSplit::Flat(FLAT_AUTO_CTAS_PER_SM), TileSchedule::Auto),
        (RowSplit::Auto, TileSchedule::PerTile),
    ];
    let mut seen = Vec::with_capacity(alternatives.len());
    let mut plans = Vec::with_capacity(alternatives.len());
    for (row_split, tile_schedule) in alternatives {
        let candidate = plan.with_decomposition(row_split, tile_schedule);
        let fixed = Problem { choice: Choice::Fixed(candidate), ..*p };
        let Ok(decision) = choose(room, &fixed, None).and_then(|chosen| decide(room, &chosen, &fixed)) else {
            continue;
        };
        let d = &decision.plan;
        let shape = (d.kernel, d.decomposition, d.tile_counter, d.ctas);
        if !seen.contains(&shape) {
            seen.push(shape);
            plans.push(candidate);
        }
    }
    plans
}

/// Whether an sm_90a kernel would store C through a tensor map ([`c_stageable`]).
fn c_tma_possible(p: &Problem<'_>) -> bool {
    c_stageable(p.beta_zero, p.c_layout, p.output, p.n)
}

/// Whether an sm_90a kernel can stage a C of `n` columns in `layout` and store it through a tensor map (the
/// forward's and A^T @ B's rule): C not read (beta 0), and row-major with at least one whole 16 bytes of a row for
/// the map to cover, or column-major of 16-bit elements (a column of the warpgroup's 64 rows is one 128-byte line
/// of the staging buffer; an f32 one would be two).
pub(crate) fn c_stageable(beta_zero: bool, layout: Layout, output: OutType, n: usize) -> bool {
    let bytes = match output {
        OutType::F32 => 4,
        OutType::F16 | OutType::Bf16 => 2,
    };
    let Ok(n) = u32::try_from(n) else { return false };
    beta_zero
        && match layout {
            Layout::RowMajor => sparsek_layout::c_map_columns(n, bytes) > 0,
            Layout::ColMajor => bytes == 2 && n > 0,
        }
}

/// The flat block-list kernel and its CTAs per N tile that a launch of `kernel` over `nnzb` blocks in
/// `block_rows` block rows (the longest holding `max_row_blocks`, when known) and `n` columns gets, or `None`:
/// only in place of a narrow kernel ([`Tile::Narrow`]) or a mid tile ([`Tile::Mid`], [`Tile::Mid64`]) whose block
/// size and types have a flat one ([`Tile::Flat`], [`Tile::Flat32`], [`Tile::Flat64`]), as [`RowSplit::Flat`] asks
/// or, under [`RowSplit::Auto`], where [`flat_auto_serves`] says so; and where [`flat_ctas`] allows it. Assumes
/// the workspace.
pub(crate) fn flat_for(
    room: Room<'_>,
    kernel: &Loaded,
    (nnzb, block_rows, n): (usize, usize, usize),
    max_row_blocks: Option<usize>,
) -> Option<(KernelRef, Loaded, u32)> {
    let v = &kernel.variant;
    let tile = match v.tile {
        Tile::Narrow => Tile::Flat,
        Tile::Mid64 => Tile::Flat64,
        Tile::Mid => Tile::Flat32,
        _ => return None,
    };
    // A flat kernel runs its whole-row kernel's configuration (layout::FLAT_CONFIGS, FLAT32_CONFIGS and
    // FLAT64_CONFIGS), so the rule is decided before the kernel table is searched: a launch that Auto keeps on
    // whole rows pays no lookup.
    let cfg = v.config;
    let sm_count = room.sms() as usize;
    let n_tiles = n.div_ceil(cfg.bn.max(1) as usize);
    let wanted = match room.policy.row_split {
        RowSplit::Flat(k) => k,
        RowSplit::Auto if flat_auto_serves(&cfg, (nnzb, block_rows, n_tiles), max_row_blocks, sm_count) => {
            FLAT_AUTO_CTAS_PER_SM
        }
        _ => return None,
    };
    let (r, flat) = room.product(v.op, v.bs, (v.input, v.b_layout, v.out), tile)?;
    let per_sm = if wanted == 0 { flat.ctas_per_sm } else { wanted.min(flat.ctas_per_sm) };
    let g = flat_ctas(&cfg, (nnzb, n_tiles), per_sm as usize * sm_count, room.limits())?;
    Some((r, *flat, g))
}

/// The kernel a launch of `kernel` takes in its place to split a dominating row, or `None`: bs 64's tile of 32
/// columns for its tile of 64 (which cannot split rows), where no flat block list serves the types
/// ([`Tile::Flat64`]), the setting is [`RowSplit::Auto`] or [`RowSplit::Flat`], `n` is at most
/// [`sparsek_layout::NARROW_MAX_N`] and one row holds more than [`ROW_SKEW_FACTOR`] times the mean
/// ([`rows_skewed`]). The tile of 32 then splits that row over its two N tiles ([`split_choice`];
/// docs/perf-notes.md, issue 12 step 28). Assumes the workspace.
pub(crate) fn skew_tile_for(
    room: Room<'_>,
    kernel: &Loaded,
    (nnzb, block_rows, n): (usize, usize, usize),
    max_row_blocks: Option<usize>,
) -> Option<(KernelRef, Loaded)> {
    let v = &kernel.variant;
    let applies = v.tile == Tile::Mid64
        && !v.config.splits_rows()
        && matches!(room.policy.row_split, RowSplit::Auto | RowSplit::Flat(_))
        && n <= sparsek_layout::NARROW_MAX_N
        && rows_skewed((nnzb, block_rows), max_row_blocks);
    if !applies {
        return None;
    }
    let types = (v.input, v.b_layout, v.out);
    if room.product(v.op, v.bs, types, Tile::Flat64).is_some() {
        return None;
    }
    room.product(v.op, v.bs, types, Tile::Mid).filter(|(_, k)| k.variant.config.splits_rows()).map(|(r, k)| (r, *k))
}

/// The split rows a launch of the sm_90a kernel of `cfg` (`ctas_per_sm` of it on an SM) over block rows of
/// `lengths` blocks (longest first; `nnzb` in all) and `n` columns gets ([`hopper_split_choice`] for the device's
/// persistent grid: its CTAs times the consumer sets per CTA). Assumes the workspace.
pub(crate) fn hopper_split_for(
    room: Room<'_>,
    cfg: &KernelConfig,
    ctas_per_sm: u32,
    (lengths, nnzb): (&[u32], usize),
    n: usize,
) -> Option<HopperSplit> {
    let sm_count = room.sms() as usize;
    let workers = ctas_per_sm as usize * sm_count * if cfg.pingpong() { 2 } else { 1 };
    let n_tiles = n.div_ceil(cfg.bn.max(1) as usize);
    hopper_split_choice(cfg, room.policy.row_split, lengths, (nnzb, n_tiles, workers), room.limits())
}

/// Whether the policy's SM limit holds the room below the device's SMs ([`Policy::sm_limit`]).
pub(crate) fn sm_limited(room: Room<'_>) -> bool {
    room.sms() < room.device.sm_count
}

/// The grid of an sm_90a launch of `cfg` (`ctas_per_sm` of it on each of `sm_count` SMs) over `tiles` output tiles
/// under `schedule`, `counter` whether it has a tile counter; `None` for the sm_80 kernels, whose grid is their
/// tiles.
pub(crate) fn tile_grid(
    schedule: TileSchedule,
    cfg: &KernelConfig,
    (ctas_per_sm, sm_count): (u32, u32),
    tiles: usize,
    counter: bool,
) -> Option<TileGrid> {
    if !matches!(cfg.pipeline, Pipeline::TmaWgmma { .. }) {
        return None;
    }
    let wave = ctas_per_sm.max(1) as usize * sm_count.max(1) as usize;
    let persistent = |counter: bool| TileGrid { ctas: tiles.clamp(1, wave) as u32, counter };
    let sets = if cfg.pingpong() { 2 } else { 1 };
    let per_tile = TileGrid { ctas: tiles.div_ceil(sets).clamp(1, u32::MAX as usize) as u32, counter: false };
    Some(match schedule {
        TileSchedule::PerTile => per_tile,
        TileSchedule::Static => persistent(false),
        TileSchedule::Auto if counter => persistent(true),
        TileSchedule::Auto => per_tile,
    })
}

/// Block rows per rasterization group (see `layout::raster`). A wave of `wave` concurrent CTAs covers `R` block
/// rows and about `wave / R` N tiles, so its working set is `R * a_row_bytes + (wave / R) * b_tile_bytes`,
/// smallest at `R = sqrt(wave * b_tile_bytes / a_row_bytes)`. When the whole of A plus the B strips of a wave in
/// plain row-fastest order fit in one [`RASTER_PLAIN_L2_FRACTION`]-th of L2, the plain order (one group) is kept.
pub(crate) fn raster_group_rows(
    block_rows: usize,
    n_tiles: usize,
    a_row_bytes: usize,
    b_tile_bytes: usize,
    wave: usize,
    l2_bytes: u64,
) -> u32 {
    let block_rows = block_rows.max(1);
    let plain_tiles = wave.div_ceil(block_rows).min(n_tiles.max(1));
    let plain_set = block_rows * a_row_bytes + plain_tiles * b_tile_bytes;
    if (plain_set as u64) <= l2_bytes / RASTER_PLAIN_L2_FRACTION || a_row_bytes == 0 {
        return block_rows.min(u32::MAX as usize) as u32;
    }
    let r = ((wave as f64) * (b_tile_bytes as f64) / (a_row_bytes as f64)).sqrt().round() as usize;
    r.clamp(1, block_rows).min(u32::MAX as usize) as u32
}

/// The bytes of A's values that a launch of `n` columns in `n_tiles` N tiles marks evict-first in L2 (an access
/// policy window from A's first value), or `None` for a plain launch. Only when `enabled`, for the decode
/// launches (at most [`sparsek_layout::NARROW_MAX_N`] columns: the narrow, mid and decode kernels) of one N tile
/// (each block of A is read once: by one CTA, or one part of a split row), with at least one
/// [`A_WINDOW_MIN_L2_FRACTION`]-th of L2 (`l2_bytes`) in A, on a GPU that takes windows (`max_window` bytes at most:
/// a longer A is marked up to that). Measured on an H200 (docs/perf-notes.md, issue 12 step 13): the decode
/// launches' own time 5-12% shorter from 13.5 MB of A on; on layers of under 1 MB, 0.1-0.2 us longer; wide
/// launches of one N tile level or 1.3% slower.
pub(crate) fn a_window(
    enabled: bool,
    (n, n_tiles): (usize, usize),
    a_bytes: usize,
    (l2_bytes, max_window): (u64, usize),
) -> Option<usize> {
    let read_once = n <= sparsek_layout::NARROW_MAX_N && n_tiles == 1;
    let large = a_bytes as u64 >= l2_bytes / A_WINDOW_MIN_L2_FRACTION && a_bytes > 0;
    (enabled && read_once && large && max_window > 0).then(|| a_bytes.min(max_window))
}
