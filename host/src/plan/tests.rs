//! The planner without a GPU: a fake H100-like device (132 SMs, 50 MB of L2, the sm_90a module loaded, occupancy
//! from shared memory and threads) and problems that take each branch; each test asserts on the whole plan.

use sparsek_layout::{InType, OutType, VARIANTS};

use super::*;

/// 132 SMs, 50 MiB of L2, windows up to 128 MiB, the sm_90a module loaded, the workspace allocated, occupancy
/// from shared memory and threads ([`DeviceFacts::estimated`]).
fn h100() -> DeviceFacts {
    DeviceFacts::estimated(Preset::H100)
}

fn planned(p: &Problem<'_>, policy: &Policy) -> LaunchPlan {
    plan(p, &h100(), policy, None).unwrap()
}

fn shown(p: &Problem<'_>, policy: &Policy) -> String {
    planned(p, policy).to_string()
}

/// 16384 x 16384, bs 64, 7168 blocks (28 a row, the longest 40).
fn layer(n: usize) -> Problem<'static> {
    Problem { max_row_blocks: Some(40), ..Problem::new(64, (16384, 16384, n), 7168) }
}

/// 8192 x 8192, bs 128 at 22%: 901 blocks (14 a row, the longest 20).
fn layer128(n: usize) -> Problem<'static> {
    Problem { max_row_blocks: Some(20), ..Problem::new(128, (8192, 8192, n), 901) }
}

#[test]
fn few_columns_on_few_rows_take_the_decode_kernels_and_mark_a_evict_first() {
    // 64 block rows (at most half the SMs at bs 64), rows of 128 KiB: the decode kernels, 4 slices a row.
    let p = Problem { max_row_blocks: Some(16), ..Problem::new(64, (4096, 4096, 8), 832) };
    assert_eq!(
        shown(&p, &Policy::default()),
        "sparsek_bsr_bs64_f16_brow_f32_dec (decode, heuristic); whole rows; 256 CTAs of 256 threads, 8 KiB shared; \
         rows in order, groups of 64 rows; A evict-first (6.8 MB); programmatic launch (waits first)"
    );
    // A row of 256 KiB goes to the narrow tile's split rows; without the decode kernels, to the narrow tile too.
    let long = Problem { max_row_blocks: Some(32), ..p };
    assert!(planned(&long, &Policy::default()).kernel.ends_with("_n16"));
    assert!(planned(&p, &Policy { decode: false, ..Policy::default() }).kernel.ends_with("_n16"));
    // Below an eighth of L2 in A, or switched off: no window.
    let small = Problem { m: 2048, nnzb: 416, ..p };
    assert_eq!(planned(&small, &Policy::default()).evict_first_bytes, None);
    assert_eq!(planned(&p, &Policy { a_evict_first: false, ..Policy::default() }).evict_first_bytes, None);
}

#[test]
fn narrow_mid_and_mid64_tiles_by_columns() {
    let d = Policy::default();
    // 256 block rows of bs 64 (k-groups of two: whole rows from 66 rows on), 27 k-tiles a CTA (under 40): whole rows.
    assert_eq!(
        shown(&layer(16), &d),
        "sparsek_bsr_bs64_f16_brow_f32_n16 (narrow, heuristic); whole rows; 256 CTAs of 256 threads, 80 KiB shared; \
         rows in order, groups of 25 rows; A evict-first (58.7 MB); programmatic launch (waits first)"
    );
    // 17-32 columns: the mid tile, here as its flat list (the busiest SM's rows exceed an equal share by 12 k-tiles).
    assert_eq!(
        shown(&layer(32), &d),
        "sparsek_bsr_bs64_f16_brow_f32_flat32 (mid, heuristic); a flat block list over 264 CTAs per N tile; 264 CTAs \
         of 128 threads, 48 KiB shared; rows in order, groups of 49 rows; A evict-first (58.7 MB); \
         programmatic launch (waits first)"
    );
    assert_eq!(
        shown(&layer(48), &d),
        "sparsek_bsr_bs64_f16_brow_f32_flat64 (mid, heuristic); a flat block list over 264 CTAs per N tile; 264 CTAs \
         of 128 threads, 64 KiB shared; rows in order, groups of 60 rows; A evict-first (58.7 MB); \
         programmatic launch (waits first)"
    );
    // Without the flat list: the mid tiles themselves, whole rows.
    let off = Policy { row_split: RowSplit::Off, ..d };
    assert_eq!(planned(&layer(32), &off).kernel, "sparsek_bsr_bs64_f16_brow_f32_n32");
    assert_eq!(planned(&layer(48), &off).kernel, "sparsek_bsr_bs64_f16_brow_f32_n64");
    assert_eq!(planned(&layer(48), &off).decomposition, Decomposition::WholeRows);
}

#[test]
fn many_columns_take_the_sm90a_kernels_or_the_wide_tile() {
    let d = Policy::default();
    // 8192^3 bs 128 22%: the sm_90a kernel, persistent on the tile counter, C stored by TMA (beta 0, row-major).
    let p = layer128(8192);
    assert_eq!(
        shown(&p, &d),
        "sparsek_sm90_bs128_f16_brow_f32 (sm90a, heuristic); whole rows; 132 CTAs of 384 threads, 226 KiB shared, \
         taking tiles from a counter; rows in order, groups of 35 rows; C stored by TMA"
    );
    // C read (beta not 0), or column-major f32: stored from the registers; a column-major 16-bit C is staged
    // transposed.
    assert!(!planned(&Problem { beta_zero: false, ..p }, &d).c_tma);
    assert!(!planned(&Problem { c_layout: Layout::ColMajor, ..p }, &d).c_tma);
    for (input, output) in [(InType::F16, OutType::F16), (InType::Bf16, OutType::Bf16)] {
        let col_major = Problem { c_layout: Layout::ColMajor, input, output, ..p };
        assert!(planned(&col_major, &d).c_tma, "{output:?}");
        assert!(!planned(&Problem { beta_zero: false, ..col_major }, &d).c_tma, "{output:?}");
        // Any column count: the map clips the last box's columns (a row-major map needs 16 bytes of a row).
        assert!(c_tma_possible(&Problem { n: 3, ..col_major }), "{output:?}");
        assert!(!c_tma_possible(&Problem { n: 3, input, output, ..p }), "{output:?}");
    }
    // Another stream holds the counter: one tile per CTA (8192 / 256 x 64 rows).
    let busy = planned(&Problem { tile_counter_free: false, ..p }, &d);
    assert!(!busy.tile_counter);
    assert_eq!(busy.ctas, 64 * 8192u32.div_ceil(planned(&p, &d).kernel_bn_hint()));
    // Without the sm_90a module (policy or device): the wide tile.
    let portable = planned(&p, &Policy { hopper: false, ..d });
    assert_eq!(portable.kernel, "sparsek_bsr_bs128_f16_brow_f32");
    let a100 = DeviceFacts { hopper: Vec::new(), compute_capability: (8, 0), ..h100() };
    assert_eq!(plan(&p, &a100, &d, None).unwrap().kernel, "sparsek_bsr_bs128_f16_brow_f32");
    // bs 32 has no sm_90a kernel: the wide tile.
    let wide = Problem { max_row_blocks: Some(40), ..Problem::new(32, (8192, 8192, 1024), 14000) };
    assert_eq!(
        shown(&wide, &d),
        "sparsek_bsr_bs32_f16_brow_f32 (wide, heuristic); whole rows; 1024 CTAs of 128 threads, 54 KiB shared; rows \
         in order, groups of 256 rows; programmatic launch (waits first)"
    );
    // Short rows (4 k-tiles a row on average, at most 8): the short-row kernel, unless the policy turns it off.
    let short = Problem { max_row_blocks: Some(6), ..Problem::new(64, (8192, 8192, 1024), 512) };
    assert_eq!(
        shown(&short, &d),
        "sparsek_sm90_bs64_f16_brow_f32_short (sm90a-short, heuristic); whole rows; 132 CTAs of 384 threads, 194 KiB \
         shared, taking tiles from a counter; rows in order, groups of 128 rows; C stored by TMA"
    );
    assert_eq!(planned(&short, &Policy { short_rows: false, ..d }).kernel, "sparsek_sm90_bs64_f16_brow_f32");
    // A small grid (32 rows x 256 columns: under three sm_90a tiles per four SMs): the mid tile of 64.
    let grid = Problem { max_row_blocks: Some(20), ..Problem::new(64, (2048, 8192, 256), 400) };
    assert_eq!(
        shown(&grid, &d),
        "sparsek_bsr_bs64_f16_brow_f32_n64 (mid, heuristic); whole rows; 128 CTAs of 128 threads, 64 KiB shared; rows \
         in order, groups of 32 rows; programmatic launch (waits first)"
    );
    assert!(planned(&grid, &Policy { small_grids: false, ..d }).kernel.starts_with("sparsek_sm90_bs64"));
}

trait BnHint {
    fn kernel_bn_hint(&self) -> u32;
}

impl BnHint for LaunchPlan {
    /// The N tile of the plan's kernel, from the variant table.
    fn kernel_bn_hint(&self) -> u32 {
        VARIANTS.iter().find(|v| v.name == self.kernel).map_or(1, |v| v.config.bn)
    }
}

#[test]
fn long_unequal_rows_take_the_flat_list_and_few_long_rows_split() {
    let d = Policy::default();
    // 16384^2 bs 64 22%: 55 k-tiles a CTA at 2 CTAs per SM, the longest row 2.7x the mean.
    let flat = Problem { max_row_blocks: Some(75), ..Problem::new(64, (16384, 16384, 16), 14418) };
    assert_eq!(
        shown(&flat, &d),
        "sparsek_bsr_bs64_f16_brow_f32_flat (narrow, heuristic); a flat block list over 264 CTAs per N tile; 264 CTAs \
         of 128 threads, 50 KiB shared; rows in order, groups of 24 rows; A evict-first (118.1 MB); \
         programmatic launch (waits first)"
    );
    // RowSplit::Flat(1): one CTA per SM.
    let one = planned(&flat, &Policy { row_split: RowSplit::Flat(1), ..d });
    assert_eq!(one.decomposition, Decomposition::FlatList { ctas_per_tile: 132 });
    // 8192^2 bs 128 22%: 64 block rows on 132 SMs: rows split into parts of 6 blocks (4 k-tile parts grown).
    let split = layer128(16);
    assert_eq!(
        shown(&split, &d),
        "sparsek_bsr_bs128_f16_brow_f32_n16 (narrow, heuristic); rows split into up to 4 parts of ~6 blocks; 256 CTAs \
         of 128 threads, 72 KiB shared; rows in order, groups of 15 rows; A evict-first (29.5 MB); \
         programmatic launch (waits first)"
    );
    assert_eq!(planned(&split, &Policy { row_split: RowSplit::Off, ..d }).ctas, 64);
    assert_eq!(
        planned(&split, &Policy { row_split: RowSplit::Blocks(5), ..d }).decomposition,
        Decomposition::SplitRows { chunks: 4, blocks: 5 }
    );
}

#[test]
fn a_dominating_row_on_the_tile_of_64_takes_the_tile_of_32() {
    // f16 C: no flat list of 64 columns; one row of 128 blocks against a mean of 28.
    let p = Problem { max_row_blocks: Some(128), output: OutType::F16, ..Problem::new(64, (8192, 8192, 48), 3604) };
    assert_eq!(
        shown(&p, &Policy::default()),
        "sparsek_bsr_bs64_f16_brow_f16_n32 (mid, heuristic), the tile of 32 for a dominating row; rows split into up \
         to 8 parts of ~16 blocks; 2048 CTAs of 128 threads, 48 KiB shared; rows in order, groups of 35 rows; \
         programmatic launch (waits first)"
    );
    // Equal rows keep the tile of 64.
    let even = planned(&Problem { max_row_blocks: Some(40), ..p }, &Policy::default());
    assert_eq!((even.kernel, even.skew_tile), ("sparsek_bsr_bs64_f16_brow_f16_n64", false));
}

#[test]
fn the_sm90a_kernels_split_the_rows_that_outlast_an_equal_share() {
    let mut lengths = vec![64u32, 64];
    lengths.extend([12u32; 62]);
    let p = Problem {
        max_row_blocks: Some(64),
        row_lengths: Some(&lengths),
        row_order: true,
        ..Problem::new(128, (8192, 8192, 1024), 872)
    };
    assert_eq!(
        shown(&p, &Policy::default()),
        "sparsek_sm90_bs128_f16_brow_f32 (sm90a, heuristic); the 2 longest rows split into up to 3 parts of ~27 \
         blocks; 132 CTAs of 384 threads, 226 KiB shared, taking tiles from a counter; rows longest first, groups of \
         35 rows; C stored by TMA"
    );
    // Without the counter: a tile per CTA over the virtual rows (62 whole + 2 x 3 parts, 4 N tiles).
    let busy = planned(&Problem { tile_counter_free: false, ..p }, &Policy::default());
    assert_eq!((busy.tile_counter, busy.ctas), (false, 68 * 4));
    // Without the row order's lengths: whole rows.
    let unknown = planned(&Problem { row_lengths: None, ..p }, &Policy::default());
    assert_eq!(unknown.decomposition, Decomposition::WholeRows);
    // Static schedule: a persistent grid without the counter.
    let fixed = planned(&p, &Policy { tile_schedule: TileSchedule::Static, ..Policy::default() });
    assert_eq!((fixed.tile_counter, fixed.ctas), (false, 132));
}

#[test]
fn a_captured_launch_makes_the_choices_it_makes_outside_a_graph() {
    let d = Policy::default();
    // A dominating row: the split it takes outside the graph, on a graph-owned workspace.
    let p = Problem { max_row_blocks: Some(128), captured: true, ..Problem::new(128, (8192, 8192, 16), 901) };
    assert_eq!(
        shown(&p, &d),
        "sparsek_bsr_bs128_f16_brow_f32_n16 (narrow, heuristic); rows split into up to 22 parts of ~6 blocks; 1408 \
         CTAs of 128 threads, 72 KiB shared; rows in order, groups of 15 rows; A evict-first (29.5 MB); a graph-owned \
         workspace"
    );
    // Short rows (10%), the flat list, an sm_90a launch of many waves of tiles and one of two waves (the tile
    // counter), whole rows: every decision as outside the graph, a graph-owned workspace exactly where the launch
    // takes some workspace. Captured after kernel nodes, so that the early start holds as outside.
    let short = Problem { max_row_blocks: Some(12), ..Problem::new(128, (8192, 8192, 16), 410) };
    let flat = Problem { max_row_blocks: Some(75), ..Problem::new(64, (16384, 16384, 16), 14418) };
    let whole = Problem { max_row_blocks: Some(30), ..Problem::new(64, (8192, 8192, 1), 3604) };
    for q in [p, short, flat, layer128(4096), layer128(512), whole] {
        let outside = planned(&Problem { captured: false, ..q }, &d);
        let inside = planned(&Problem { captured: true, follows_kernels: true, ..q }, &d);
        assert!(!outside.graph_workspace, "{outside}");
        let balanced = outside.tile_counter || outside.decomposition != Decomposition::WholeRows;
        assert_eq!(inside.graph_workspace, balanced, "{inside}");
        assert_eq!(LaunchPlan { graph_workspace: false, ..inside }, outside, "captured {inside}, outside {outside}");
    }
    assert!(matches!(planned(&short, &d).decomposition, Decomposition::SplitRows { .. }));
    assert!(matches!(planned(&flat, &d).decomposition, Decomposition::FlatList { .. }));
    assert!(planned(&layer128(4096), &d).tile_counter && planned(&layer128(512), &d).tile_counter);
    // Where the device cannot give a captured launch a workspace: whole rows whatever the balance.
    let no_pools = DeviceFacts { graph_memory: false, ..h100() };
    let plain = plan(&p, &no_pools, &d, None).unwrap();
    assert_eq!((plain.decomposition, plain.graph_workspace), (Decomposition::WholeRows, false));
    let sm90 = layer128(8192);
    let captured = plan(&Problem { captured: true, ..sm90 }, &no_pools, &d, None).unwrap();
    assert!(!captured.tile_counter && !captured.graph_workspace, "{captured}");
    // No workspace at all: whole rows and no tile counter, captured or not.
    let none = DeviceFacts { workspace: false, ..h100() };
    assert!(!plan(&sm90, &none, &d, None).unwrap().tile_counter);
    assert_eq!(plan(&Problem { captured: false, ..p }, &none, &d, None).unwrap().ctas, 64);
    // What the launcher takes of a workspace: some for the split, the flat list and the tile counter, nothing where
    // it may have none (it reads the Gpu's workspace by that alone).
    let need = |p: &Problem<'_>, device: &DeviceFacts| {
        let room = Room { device, policy: &d };
        decide(room, &choose(room, p, None).unwrap(), p).unwrap().need
    };
    for q in [p, Problem { captured: false, ..p }, sm90, flat] {
        assert!(need(&q, &h100()).any(), "{q:?}");
        assert_eq!(need(&q, &none), SpaceNeed::default(), "{q:?}");
    }
    assert_eq!(need(&p, &no_pools), SpaceNeed::default());
}

#[test]
fn programmatic_launch_only_where_asked_possible_and_after_kernels() {
    let on = Policy { programmatic: true, ..Policy::default() };
    let full = planned(&layer(16), &on);
    assert!(full.programmatic && !full.waits_first, "{full}");
    // By default an early start that waits first; neither without it.
    let early = planned(&layer(16), &Policy::default());
    assert!(early.programmatic && early.waits_first, "{early}");
    let off = Policy { early_start: false, ..Policy::default() };
    let plain = planned(&layer(16), &off);
    assert!(!plain.programmatic && !plain.waits_first, "{plain}");
    // Captured: only after kernel nodes.
    assert!(!planned(&Problem { captured: true, ..layer(16) }, &on).programmatic);
    assert!(planned(&Problem { captured: true, follows_kernels: true, ..layer(16) }, &on).programmatic);
    // A captured launch that splits rows on a graph-owned workspace stays programmatic: its workspace's nodes are
    // off the stream's chain.
    let split = Problem { max_row_blocks: Some(12), captured: true, ..Problem::new(128, (8192, 8192, 16), 410) };
    let split_plan = planned(&Problem { follows_kernels: true, ..split }, &on);
    assert!(split_plan.programmatic && split_plan.graph_workspace, "{split_plan}");
    assert!(!planned(&split, &on).programmatic);
    // The product module from PTX (no sm_90a cubin), or an sm_90a kernel: plain.
    let jit = DeviceFacts { programmatic_available: false, ..h100() };
    assert!(!plan(&layer(16), &jit, &on, None).unwrap().programmatic);
    assert!(!plan(&layer(16), &jit, &Policy::default(), None).unwrap().programmatic);
    assert!(!planned(&layer(1024), &on).programmatic);
    assert!(!planned(&layer(1024), &Policy::default()).programmatic);
    assert!(!planned(&Problem { captured: true, ..layer(16) }, &Policy::default()).programmatic);
}

#[test]
fn the_row_order_is_kept_only_beyond_one_wave() {
    // 32 decode rows of 4 slices: 128 CTAs, one wave: natural order.
    let p = Problem { max_row_blocks: Some(20), row_order: true, ..Problem::new(64, (2048, 8192, 16), 400) };
    assert!(!planned(&p, &Policy::default()).longest_rows_first);
    // 256 rows of the narrow tile at 2 CTAs per SM... more than a wave: longest first.
    let long = Problem { row_order: true, ..layer(16) };
    let plan = planned(&long, &Policy::default());
    let wave = 132 * h100().product.iter().find(|k| k.variant.name == plan.kernel).unwrap().ctas_per_sm;
    assert_eq!(plan.longest_rows_first, plan.ctas > wave, "{plan}");
}

#[test]
fn a_cached_plan_serves_where_its_family_can_and_fixed_plans_and_bad_input_are_errors() {
    let d = Policy::default();
    let cached = |family| CachedPlan {
        plan: Plan { group_rows: Some(8), ..Plan::new(family) },
        tuned_us: 1.0,
        heuristic_us: 2.0,
        unix_time: 0,
    };
    let tuned = plan(&layer(16), &h100(), &d, Some(&cached(KernelFamily::Mid))).unwrap();
    assert_eq!(tuned.choice, Some((KernelFamily::Mid, PlanSource::Tuned)));
    assert_eq!(tuned.group_rows, 8);
    // A cached sm_90a plan on a GPU without that module: the heuristic.
    let a100 = DeviceFacts { hopper: Vec::new(), ..h100() };
    let fallback = plan(&layer(16), &a100, &d, Some(&cached(KernelFamily::Hopper))).unwrap();
    assert_eq!(fallback.choice, Some((KernelFamily::Narrow, PlanSource::Heuristic)));
    // A fixed plan: its family or an error; never a choice.
    let fixed = Problem { choice: Choice::Fixed(Plan::new(KernelFamily::Wide)), ..layer(16) };
    let wide = plan(&fixed, &h100(), &d, None).unwrap();
    assert_eq!((wide.kernel, wide.choice), ("sparsek_bsr_bs64_f16_brow_f32", None));
    let no_decode = Problem { choice: Choice::Fixed(Plan::new(KernelFamily::Decode)), bs: 16, m: 1024, ..layer(16) };
    assert!(matches!(plan(&no_decode, &h100(), &d, None), Err(Error::InvalidArgument { name: "plan", .. })));
    let zero = Problem { choice: Choice::Fixed(Plan::new(KernelFamily::Wide).with_group_rows(Some(0))), ..layer(16) };
    assert!(matches!(plan(&zero, &h100(), &d, None), Err(Error::InvalidArgument { name: "plan", .. })));
    // A block size without kernels; an output type without kernels.
    let bs48 = Problem { bs: 48, m: 4800, ..layer(16) };
    assert!(matches!(plan(&bs48, &h100(), &d, None), Err(Error::InvalidBsr(_))));
    let bf16_f16 = Problem { input: InType::Bf16, output: OutType::F16, ..layer(16) };
    assert!(matches!(plan(&bf16_f16, &h100(), &d, None), Err(Error::InvalidArgument { name: "element types", .. })));
}

/// The planner is pure: no driver binding and no part of the GPU backend in its sources.
#[test]
fn the_planning_room_imports_no_driver_and_no_gpu_module() {
    let sources = [
        ("mod.rs", include_str!("mod.rs")),
        ("family.rs", include_str!("family.rs")),
        ("split.rs", include_str!("split.rs")),
        ("rules.rs", include_str!("rules.rs")),
        ("launch_plan.rs", include_str!("launch_plan.rs")),
        ("backward.rs", include_str!("backward.rs")),
    ];
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/plan");
    let on_disk = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| e.as_ref().is_ok_and(|e| e.path().extension().is_some_and(|x| x == "rs")))
        .count();
    assert_eq!(on_disk, sources.len() + 1, "a new file in src/plan: add it here (tests.rs is the one left out)");
    for (name, text) in sources {
        for banned in [concat!("cud", "arc"), concat!("crate::", "gpu")] {
            let code: Vec<_> = text.lines().filter(|l| !l.trim_start().starts_with("//")).collect();
            assert!(!code.iter().any(|l| l.contains(banned)), "src/plan/{name} uses {banned}");
        }
    }
}
#[test]
fn group_rows_balance_a_and_b() {
    // 8192^3, bs 128, 22%: 64 block rows of ~14 blocks (460 KB of A each), B strips of 2 MiB, wave 264, 50 MB L2.
    let r = raster_group_rows(64, 64, 14 * 128 * 128 * 2, 8192 * 128 * 2, 264, 50 << 20);
    assert!((30..=40).contains(&r), "{r}");
    // Small problems keep the plain order.
    assert_eq!(raster_group_rows(16, 4, 64 * 1024, 1 << 20, 264, 50 << 20), 16);
    // No blocks at all: plain order.
    assert_eq!(raster_group_rows(64, 64, 0, 1 << 21, 264, 50 << 20), 64);
}

#[test]
fn a_is_marked_evict_first_only_when_read_once() {
    // An H200: 60 MiB of L2, windows up to 128 MiB.
    const L2: (u64, usize) = (60 << 20, 128 << 20);
    let a = 29_523_968; // 8192^2 bs 64 22%
    // A decode launch of one N tile: the whole of A, up to the window's limit.
    assert_eq!(a_window(true, (1, 1), a, L2), Some(a));
    assert_eq!(a_window(true, (64, 1), a, L2), Some(a));
    assert_eq!(a_window(true, (16, 1), 200 << 20, L2), Some(128 << 20));
    // From an eighth of L2 on.
    assert_eq!(a_window(true, (16, 1), (60 << 20) / 8, L2), Some((60 << 20) / 8));
    assert_eq!(a_window(true, (16, 1), (60 << 20) / 8 - 1, L2), None);
    // Read again by another N tile, a wide launch, switched off, no values, or a GPU without windows: plain.
    assert_eq!(a_window(true, (40, 2), a, L2), None);
    assert_eq!(a_window(true, (65, 1), a, L2), None);
    assert_eq!(a_window(true, (256, 1), a, L2), None);
    assert_eq!(a_window(false, (8, 1), a, L2), None);
    assert_eq!(a_window(true, (8, 1), 0, (0, 128 << 20)), None);
    assert_eq!(a_window(true, (8, 1), a, (60 << 20, 0)), None);
}

/// A cached whole plan: its decomposition replaces the rules' where the policy leaves it to them, and gives what
/// its setting gives where it cannot apply.
#[test]
fn a_cached_whole_plan_fixes_the_decomposition() {
    let d = Policy::default();
    let cached = |plan: Plan| CachedPlan { plan, tuned_us: 1.0, heuristic_us: 2.0, unix_time: 0 };
    // 8192^2 bs 128 at 16 columns: the rules split rows; a tuned plan of whole rows keeps them whole.
    let split = layer128(16);
    let whole = cached(Plan::new(KernelFamily::Narrow).with_decomposition(RowSplit::Off, TileSchedule::Auto));
    let tuned = plan(&split, &h100(), &d, Some(&whole)).unwrap();
    assert_eq!((tuned.decomposition, tuned.ctas), (Decomposition::WholeRows, 64));
    assert_eq!(tuned.choice, Some((KernelFamily::Narrow, PlanSource::Tuned)));
    // The flat list, one CTA per SM.
    let flat = cached(Plan::new(KernelFamily::Narrow).with_decomposition(RowSplit::Flat(1), TileSchedule::Auto));
    let tuned = plan(&split, &h100(), &d, Some(&flat)).unwrap();
    assert_eq!(tuned.decomposition, Decomposition::FlatList { ctas_per_tile: 132 });
    assert_eq!(tuned.kernel, "sparsek_bsr_bs128_f16_brow_f32_flat");
    // A policy that fixes the split keeps its own.
    let off = Policy { row_split: RowSplit::Blocks(3), ..d };
    assert_eq!(
        plan(&split, &h100(), &off, Some(&flat)).unwrap().decomposition,
        Decomposition::SplitRows { chunks: 7, blocks: 3 }
    );
    // The sm_90a kernels: one tile per CTA instead of the counter.
    let sm90 = layer128(8192);
    let per_tile = cached(Plan::new(KernelFamily::Hopper).with_decomposition(RowSplit::Auto, TileSchedule::PerTile));
    let tuned = plan(&sm90, &h100(), &d, Some(&per_tile)).unwrap();
    assert_eq!((tuned.tile_counter, tuned.ctas), (false, 64 * 32));
    // The flat list on the decode family (no flat kernel, no split): whole rows, as the rules give.
    let decode = Problem { max_row_blocks: Some(16), ..Problem::new(64, (4096, 4096, 8), 832) };
    let flat_decode = cached(Plan::new(KernelFamily::Decode).with_decomposition(RowSplit::Flat(2), TileSchedule::Auto));
    let tuned = plan(&decode, &h100(), &d, Some(&flat_decode)).unwrap();
    assert_eq!((tuned.kernel, tuned.decomposition), ("sparsek_bsr_bs64_f16_brow_f32_dec", Decomposition::WholeRows));
}

/// The tuner measures every decomposition that changes a launch, once.
#[test]
fn the_tuner_measures_each_distinct_decomposition_once() {
    let d = Policy::default();
    let device = h100();
    let room = Room { device: &device, policy: &d };
    let names = |plans: &[Plan]| plans.iter().map(|p| p.to_string()).collect::<Vec<_>>();
    // The narrow tile on 64 long rows: the rules' split (parts of 6 blocks), whole rows, parts of 4 blocks (128 KiB),
    // the flat list.
    let split = layer128(16);
    let plans = tune_decompositions(room, &split, Plan::new(KernelFamily::Narrow));
    assert_eq!(
        names(&plans),
        ["narrow", "narrow, whole rows", "narrow, split rows of 4 blocks", "narrow, flat list of 2 CTAs per SM"]
    );
    // The decode kernels cannot split or list: measured once.
    let decode = Problem { max_row_blocks: Some(16), ..Problem::new(64, (4096, 4096, 8), 832) };
    assert_eq!(names(&tune_decompositions(room, &decode, Plan::new(KernelFamily::Decode))), ["decode"]);
    // The sm_90a kernel without row lengths: the counter or one tile per CTA.
    let sm90 = layer128(8192);
    assert_eq!(
        names(&tune_decompositions(room, &sm90, Plan::new(KernelFamily::Hopper))),
        ["sm90a", "sm90a, a tile per CTA"]
    );
}

#[test]
fn an_sm_limit_holds_the_sm90a_grid_and_sizes_every_decision() {
    let limit = |n: u32| Policy { sm_limit: std::num::NonZeroU32::new(n), ..Policy::default() };
    // The MLP's up layer at 1024 tokens (5504 x 4096 bs 64 25%): a persistent grid of one CTA per SM.
    let up = Problem { max_row_blocks: Some(25), ..Problem::new(64, (5504, 4096, 1024), 1376) };
    let all = planned(&up, &Policy::default());
    assert_eq!((all.ctas, all.tile_counter, all.sm_limit), (132, true, None), "{all}");
    let held = planned(&up, &limit(108));
    assert_eq!((held.kernel, held.ctas, held.tile_counter, held.sm_limit), (all.kernel, 108, true, Some(108)));
    assert!(held.to_string().ends_with("; planned for 108 SMs (limit)"), "{held}");
    // Another stream holds the counter: still persistent, with a static stride, instead of a CTA per tile.
    let busy = planned(&Problem { tile_counter_free: false, ..up }, &limit(108));
    assert_eq!((busy.ctas, busy.tile_counter), (108, false), "{busy}");
    let fixed = planned(
        &Problem { tile_counter_free: false, ..up },
        &Policy { tile_schedule: TileSchedule::PerTile, ..limit(108) },
    );
    assert_eq!((fixed.ctas, fixed.tile_counter), (108, false), "a limit outranks a CTA per tile: {fixed}");
    // Without a limit and without the counter: a CTA per tile, as before.
    assert!(planned(&Problem { tile_counter_free: false, ..up }, &Policy::default()).ctas > 132);
    // A limit at or above the device's SMs is no limit.
    for n in [132, 133, 100_000] {
        assert_eq!(planned(&up, &limit(n)), all, "limit {n}");
    }
    // The product module's decisions are made for the limit: 8192^2 bs 128 22% at 16 columns splits its 64 rows
    // into parts for 132 SMs, for fewer parts on 33.
    let split = layer128(16);
    let parts = |p: &LaunchPlan| match p.decomposition {
        Decomposition::SplitRows { chunks, .. } => chunks,
        _ => 1,
    };
    let (wide, narrow) = (planned(&split, &Policy::default()), planned(&split, &limit(33)));
    assert!(parts(&narrow) < parts(&wide), "{wide} / {narrow}");
    assert_eq!(narrow.sm_limit, Some(33));
}
