//! The sm_90a kernels' tile scheduler (`Policy::tile_schedule`, host/src/gpu/schedule.rs): a persistent grid whose
//! CTAs take tiles from a counter in the Gpu's workspace (the last CTA resets it), and at bs 64 the ping-pong kernel,
//! whose two consumer warpgroups alternate tiles. Exact integer-valued cases bit-equal to the oracle, to a persistent
//! grid with a static stride and to one tile per consumer set, over few and many tiles per CTA, N tails, skewed and
//! empty rows, beta and f16 C; random values giving the same bits on every launch; persistent launches from several
//! threads on several streams, which share the counter, each giving the single-threaded result; and graph-captured
//! launches (on counters of their own that the graph holds) replayed. The tests need the sm_90a module (a Hopper
//! GPU,
//! `SPARSEK_TEST_MODULE` unset or `auto`); elsewhere they print a skip line.

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaSlice, DevicePtr};
use sparsek::check::compare_exact;
use sparsek::format::{Pattern, generate};
use sparsek::gpu::{BsrArrays, BsrView, Decomposition, DenseView, DenseViewMut, Gpu, IndexType, LaunchPlan};
use sparsek::plan::{Policy, RowSplit, TileSchedule};
use sparsek::{Bsr, Epilogue, Layout, Matrix, f16};
use sparsek_tests::{
    check_planned, exact_operands, gpu_required, graph_nodes, hopper_enabled, is_sm90, own_gpu, plan_of,
    plan_unscheduled, same_bits, spmm_planned, test_policy, threads_match_one_launch,
};

/// A Gpu with the given schedule, or `None` (after a skip line) without a GPU or without the sm_90a module (a
/// launch of 256 columns over 64 block rows of bs 64 does not take an sm_90a kernel).
fn hopper_gpu(test: &str, schedule: TileSchedule) -> Option<Gpu> {
    let gpu = own_gpu(test, |g| g.with_policy(Policy { tile_schedule: schedule, ..test_policy() }))?;
    let probe: Bsr<f16> = generate(Pattern::Uniform, 64 * 64, 8 * 64, 64, 0.5, 1).unwrap();
    let hopper = hopper_enabled() && is_sm90(&plan_of::<f32>(&gpu, &probe, 256, Epilogue::default()));
    if !hopper {
        use std::io::Write;
        let why = if hopper_enabled() { "the GPU has no sm_90a module" } else { "SPARSEK_TEST_MODULE=sm80" };
        if gpu_required() && hopper_enabled() && gpu.info().compute_capability == (9, 0) {
            panic!("{test}: a compute capability 9.0 GPU without the sm_90a module");
        }
        let _ = writeln!(std::io::stderr(), "SKIP {test}: {why}");
        return None;
    }
    Some(gpu)
}

/// A Gpu of each schedule (`hopper_gpu`), or `None` (after a skip line).
fn hopper_gpus<const N: usize>(test: &str, schedules: [TileSchedule; N]) -> Option<[Gpu; N]> {
    let mut gpus = vec![hopper_gpu(test, schedules[0])?];
    gpus.extend(schedules[1..].iter().map(|&s| hopper_gpu(test, s).expect("a second Gpu with the sm_90a module")));
    gpus.try_into().ok()
}

/// The plan of a launch of `a` (uploaded) with `n` columns into an f32 C on `gpu`, after checking that an sm_90a
/// kernel serves it.
fn sm90_plan(gpu: &Gpu, a: &Bsr<f16>, n: usize, ctx: &str) -> LaunchPlan {
    let plan = plan_of::<f32>(gpu, a, n, Epilogue::default());
    assert!(is_sm90(&plan), "{ctx}: not sm_90a: {plan}");
    plan
}

/// The rows of tiles a plan walks per N tile: A's block rows, and for the sm_90a split rows `chunks - 1` more for
/// each split row.
fn tile_rows(plan: &LaunchPlan, block_rows: usize) -> usize {
    match plan.decomposition {
        Decomposition::HopperSplitRows { split_rows, chunks, .. } => {
            block_rows + split_rows as usize * (chunks as usize - 1)
        }
        _ => block_rows,
    }
}

/// Integer-valued A, B and C (every sum exact in f32): the persistent grid with the counter, with the static
/// stride, one tile per consumer set and the oracle agree bit for bit, from one tile to many tiles per CTA, with
/// N tails, skewed rows, empty rows (and an A without blocks, which the sm_80 kernels serve) and beta.
#[test]
fn persistent_grid_is_exact() {
    let _shared = sparsek_tests::gpu_shared();
    let test = "persistent_grid_is_exact";
    let schedules = [TileSchedule::Auto, TileSchedule::PerTile, TileSchedule::Static];
    let Some([counter, per_tile, stride]) = hopper_gpus(test, schedules) else { return };
    let sms = counter.info().sm_count as usize;
    // (bs, block rows, block columns, N): one tile; fewer tiles than SMs; several tiles per CTA (N tiles of
    // 256 and a tail); many short rows.
    let shapes = [(64usize, 1usize, 3usize, 100usize), (128, 5, 7, 300), (64, 2 * sms, 20, 520), (128, sms, 9, 777)];
    for (bs, rows, cols, n) in shapes {
        for (pattern, density, beta) in
            [(Pattern::Uniform, 0.5, 0.0f32), (Pattern::Skewed, 0.4, 1.0), (Pattern::Uniform, 0.05, -1.0)]
        {
            let (m, k) = (rows * bs, cols * bs);
            let seed = (bs * 7919 + rows * 31 + n) as u64;
            let (a, b, c0) = exact_operands(pattern, (m, k, n), bs, density, beta, seed);
            let ep = Epilogue::new(1.0, beta);
            let ctx = format!("bs{bs} {m}x{k}x{n} {pattern} {density} beta={beta} nnzb={}", a.nnzb());
            if a.nnzb() > 0 {
                let p = sm90_plan(&counter, &a, n, &ctx);
                assert!(p.tile_counter && p.ctas as usize <= sms, "{ctx}: {p}");
                let p = sm90_plan(&stride, &a, n, &ctx);
                assert!(!p.tile_counter && p.ctas as usize <= sms, "{ctx}: {p}");
                // One tile per consumer set: the ping-pong kernels (bs 64) take two per CTA.
                let p = sm90_plan(&per_tile, &a, n, &ctx);
                let tiles = tile_rows(&p, rows) * n.div_ceil(256);
                let ctas = if bs == 64 { tiles.div_ceil(2) } else { tiles } as u32;
                assert!(!p.tile_counter && p.ctas == ctas, "{ctx}: {ctas} CTAs expected: {p}");
            }
            let expected = sparsek::cpu::reference(&a, &b, &c0, ep).unwrap();
            for (what, gpu) in [("counter", &counter), ("static stride", &stride), ("one tile per set", &per_tile)] {
                let report = compare_exact(&spmm_planned(gpu, &a, &b, &c0, ep).0, &expected);
                assert!(report.passed(), "{ctx}: {what}: {report}");
            }
        }
    }
}

/// Random values: the persistent grid gives the bits of the per-tile grid on every launch (each tile is summed in
/// the same order whichever CTA and warpgroup takes it), with f32 and f16 C, across launches that reuse the
/// counter (a counter left non-zero would skip tiles, which the poisoned C shows).
#[test]
fn persistent_grid_is_deterministic() {
    let _shared = sparsek_tests::gpu_shared();
    let test = "persistent_grid_is_deterministic";
    let Some([persistent, per_tile]) = hopper_gpus(test, [TileSchedule::Auto, TileSchedule::PerTile]) else { return };
    for (bs, m, k, n, density) in [(64usize, 4096usize, 4096usize, 1000usize, 0.12), (128, 2048, 8192, 600, 0.22)] {
        for pattern in [Pattern::Uniform, Pattern::Skewed] {
            let a: Bsr<f16> = generate(pattern, m, k, bs, density, (bs + n) as u64).unwrap();
            let ctx = format!("bs{bs} {m}x{k}x{n} {pattern} {density}");
            let plan = sm90_plan(&persistent, &a, n, &ctx);
            assert!(plan.tile_counter, "{ctx}: no counter: {plan}");
            let b = Matrix::<f16>::random(k, n, 5).unwrap();
            let poisoned = Matrix::<f32>::filled(m, n, n.next_multiple_of(4), f32::NAN).unwrap();
            let ep = Epilogue::new(1.0, 0.0);
            let run = |gpu: &Gpu| spmm_planned(gpu, &a, &b, &poisoned, ep).0;
            let want = run(&per_tile);
            let expected = sparsek::check::Expected::compute(
                &a,
                &b,
                &poisoned,
                ep,
                sparsek::check::RowSample::Random { count: 64, seed: 7 },
                |_, _| {},
            )
            .unwrap();
            let report = expected.check(&want);
            assert!(report.passed(), "{ctx}: the per-tile grid against the oracle: {report}");
            for i in 0..4 {
                let got = run(&persistent);
                assert!(same_bits(&got, &want), "{ctx}: persistent launch {i} differs from the per-tile grid");
            }
            // f16 C, beta = 1: the same check through the 16-bit epilogue.
            let c16 = Matrix::<f16>::random(m, n, 9).unwrap();
            let run16 = |gpu: &Gpu| spmm_planned(gpu, &a, &b, &c16, Epilogue::new(0.5, 1.0)).0;
            let (x, y) = (run16(&per_tile), run16(&persistent));
            let same = x.as_slice().iter().zip(y.as_slice()).all(|(p, q)| p.to_bits() == q.to_bits());
            assert!(same, "{ctx}: f16 C differs between the schedules");
        }
    }
}

/// Persistent launches from six threads, half on the default stream and half on streams of their own, all
/// sharing the Gpu's tile counter: a launch takes it only when it is free or its stream used it last (else it
/// gets one tile per consumer set), so each result is bit-identical to the single-threaded one (launches sharing
/// the counter unordered would take each other's tiles).
#[test]
fn persistent_launches_on_many_streams_are_ordered() {
    let _shared = sparsek_tests::gpu_shared();
    let test = "persistent_launches_on_many_streams_are_ordered";
    let Some(gpu) = hopper_gpu(test, TileSchedule::Auto) else { return };
    let (m, k, n) = (4096, 4096, 768);
    let a: Bsr<f16> = generate(Pattern::Skewed, m, k, 64, 0.15, 41).unwrap();
    let plan = sm90_plan(&gpu, &a, n, "many streams");
    assert!(plan.tile_counter, "no counter: {plan}");
    threads_match_one_launch(&gpu, &a, n, 42, Epilogue::new(0.5, -1.0), 6);
}

/// Launches captured into a CUDA graph never touch the Gpu's counters (a replayed graph is not ordered with other
/// launches): they make the choice they make outside a graph (the persistent grid on the tile counter, here bs 64's
/// 64 block rows and bs 128's 16 long ones on few N tiles) on two counters of their own that the graph holds (an
/// allocation and a free node, no memset: the counters stay zeroed in the graph's keeping), the kernel and grid of
/// the plan of a raw view outside a graph. Captured on a stream of the test's own, over views of memory uploaded on
/// it (as PyTorch's graphs launch): each replay gives the bits of the per-tile launch outside the capture (each tile
/// is one CTA's either way), the first into a poisoned C.
#[test]
fn captured_launches_replay_exactly() {
    let _alone = sparsek_tests::gpu_alone();
    let test = "captured_launches_replay_exactly";
    let Some([gpu, per_tile]) = hopper_gpus(test, [TileSchedule::Auto, TileSchedule::PerTile]) else { return };
    // Whole rows, as the captured launches of raw views (no row schedule, so no split rows) run: an upload has its
    // schedule, and the skewed bs-128 weight would have its longest rows split outside the graph.
    let policy = Policy { row_split: RowSplit::Off, ..per_tile.policy() };
    let per_tile = per_tile.with_policy(policy);
    let stream = gpu.new_stream().unwrap();
    let addr = |s: &CudaSlice<u16>| s.device_ptr(&stream).0;
    for (bs, m, k, n) in [(64usize, 4096usize, 2048usize, 600usize), (128, 2048, 8192, 296)] {
        let ctx = format!("bs{bs} {m}x{k}x{n}");
        let a: Bsr<f16> = generate(Pattern::Skewed, m, k, bs, 0.2, 61).unwrap();
        let b = Matrix::<f16>::random(k, n, 62).unwrap();
        let ep = Epilogue::new(1.0, 0.0);
        let want = spmm_planned(&per_tile, &a, &b, &Matrix::<f32>::filled(m, n, n, f32::NAN).unwrap(), ep).0;
        let bits = |v: &[f16]| v.iter().map(|x| x.to_bits()).collect::<Vec<u16>>();
        let values = stream.clone_htod(&bits(a.values())).unwrap();
        let row_ptr = stream.clone_htod(a.row_ptr()).unwrap();
        let col_idx = stream.clone_htod(a.col_idx()).unwrap();
        let b_dev = stream.clone_htod(&bits(b.as_slice())).unwrap();
        let c_dev = stream.clone_htod(&vec![f32::NAN; m * n]).unwrap();
        stream.synchronize().unwrap();
        let arrays = BsrArrays {
            values: addr(&values),
            row_ptr: row_ptr.device_ptr(&stream).0,
            col_idx: col_idx.device_ptr(&stream).0,
            index: IndexType::U32,
        };
        let c_addr = c_dev.device_ptr(&stream).0;
        // SAFETY: a valid structure and live buffers of these shapes, used only on `stream`.
        let (a_v, b_v) = unsafe {
            (
                BsrView::<f16>::from_raw(arrays, m, k, bs, a.nnzb()).unwrap(),
                DenseView::<f16>::from_raw(addr(&b_dev), k, n, n, Layout::RowMajor).unwrap(),
            )
        };
        stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL).unwrap();
        {
            // SAFETY: as above; C is written only by this launch.
            let mut c_v = unsafe { DenseViewMut::<f32>::from_raw(c_addr, m, n, n, Layout::RowMajor) }.unwrap();
            let r = unsafe { gpu.spmm_raw(stream.cu_stream(), &a_v, &b_v, &mut c_v, None, ep) };
            let graph = stream.end_capture(CUgraphInstantiate_flags(0));
            r.unwrap_or_else(|e| panic!("{ctx}: launch during capture: {e}"));
            let graph = graph.expect("end capture").expect("a graph");
            let held = graph_nodes(&graph);
            assert_eq!((held.allocs, held.memsets, held.frees, held.others), (1, 0, 1, 0), "{ctx}: {held:?}");
            // What a raw view (no schedule) launches outside a graph: the persistent grid on the tile counter.
            let plan = plan_unscheduled::<f32>(&gpu, &a, n, ep);
            assert!(is_sm90(&plan) && plan.tile_counter, "{ctx}: {plan}");
            assert_eq!(held.kernels, vec![(plan.kernel.to_string(), plan.ctas)], "{ctx}: the kernel of {plan}");
            let captured = gpu.last_plan().expect("the captured launch's plan");
            let same = (captured.kernel, captured.ctas, captured.decomposition, captured.tile_counter)
                == (plan.kernel, plan.ctas, plan.decomposition, true);
            assert!(same && captured.graph_workspace, "{ctx}: captured {captured}, expected {plan}");
            for i in 0..3 {
                graph.launch().unwrap();
                let got = stream.clone_dtoh(&c_dev).unwrap();
                stream.synchronize().unwrap();
                let same = got.iter().zip(want.as_slice()).all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "{ctx}: replay {i} differs from the per-tile launch");
            }
        }
    }
}

/// A weight of `block_rows x block_cols` blocks of `bs` whose first `dense` block rows hold every block column and
/// whose other rows hold the blocks of a fixed pattern (about one in `period`): rows far longer than the others, as
/// block-sparse attention's global tokens give. Integer values in -4..=4 (`int`), else random ones.
fn dense_rows(
    bs: usize,
    (block_rows, block_cols): (usize, usize),
    (dense, period): (usize, usize),
    seed: u64,
    int: bool,
) -> Bsr<f16> {
    let (m, k) = (block_rows * bs, block_cols * bs);
    let values = if int { Matrix::<f16>::random_int(m, k, 4, seed) } else { Matrix::<f16>::random(m, k, seed) };
    Bsr::from_dense(&values.unwrap(), bs, |blk| {
        let (r, c) = (blk.block_row(), blk.block_col());
        r < dense || (r * 7 + c * 13 + seed as usize).is_multiple_of(period)
    })
    .unwrap()
}

/// The sm_90a split rows of a plan (the split rows and the most parts per row), if it has them.
fn hopper_split_in(plan: &LaunchPlan) -> Option<(u32, u32)> {
    match plan.decomposition {
        Decomposition::HopperSplitRows { split_rows, chunks, .. } => Some((split_rows, chunks)),
        _ => None,
    }
}

/// Long rows split over several CTAs of the sm_90a kernels (`Decomposition::HopperSplitRows`; parts of 16 blocks
/// asked for with `RowSplit::Blocks`, so bs 64's ping-pong kernel, which Auto leaves whole, splits too):
/// integer-valued operands give the oracle's bits and whole rows' (`RowSplit::Off`), f32 and f16 C, beta 0 (C
/// through the tensor map elsewhere) and beta != 0, N tails; three more launches give the same bits; every launch
/// runs the plan `Gpu::plan` predicted.
#[test]
fn long_rows_split_on_the_sm90_kernels_are_exact() {
    let _shared = sparsek_tests::gpu_shared();
    let Some(gpu) = hopper_gpu("long_rows_split_on_the_sm90_kernels_are_exact", TileSchedule::Auto) else { return };
    let policy = Policy { row_split: RowSplit::Blocks(16), ..gpu.policy() };
    let gpu = gpu.with_policy(policy);
    let whole = own_gpu("long_rows_split_on_the_sm90_kernels_are_exact", |g| {
        g.with_policy(Policy { row_split: RowSplit::Off, ..test_policy() })
    })
    .unwrap();
    let cases = [
        (64, (48, 64), (2, 8), 512, 0.0),
        (64, (48, 64), (1, 8), 300, 0.5),
        (128, (24, 64), (1, 8), 256, 0.0),
        (128, (24, 48), (3, 8), 640, -1.0),
    ];
    for (i, &(bs, shape, rows, n, beta)) in cases.iter().enumerate() {
        let seed = 0x5b11_7000 + i as u64;
        let a = dense_rows(bs, shape, rows, seed, true);
        let ctx = format!("case {i}: {}x{n}x{} bs {bs}, {} dense rows, nnzb {}", a.rows(), a.cols(), rows.0, a.nnzb());
        let (b, c0) = sparsek_tests::exact_b_c((a.rows(), a.cols(), n), beta, seed);
        let ep = Epilogue::new(1.0, beta);
        let expected = sparsek::cpu::reference(&a, &b, &c0, ep).unwrap();
        let (got, plan) = spmm_planned(&gpu, &a, &b, &c0, ep);
        let split = hopper_split_in(&plan);
        let long_rows_split = split.is_some_and(|(split_rows, chunks)| split_rows as usize >= rows.0 && chunks >= 2);
        assert!(is_sm90(&plan) && long_rows_split, "{ctx}: {plan}");
        let report = compare_exact(&got, &expected);
        assert!(report.passed(), "{ctx}: split rows: {report}");
        let (whole_got, whole_plan) = spmm_planned(&whole, &a, &b, &c0, ep);
        assert!(hopper_split_in(&whole_plan).is_none(), "{ctx}: RowSplit::Off: {whole_plan}");
        let report = compare_exact(&whole_got, &expected);
        assert!(report.passed(), "{ctx}: whole rows: {report}");
        for k in 0..3 {
            let (again, _) = spmm_planned(&gpu, &a, &b, &c0, ep);
            assert!(same_bits(&again, &got), "{ctx}: launch {k} differs from the first");
        }
        // A 16-bit C (its own tensor map and epilogue): the oracle's exact sums rounded once to f16 (sums past 2048
        // are not all f16 values).
        if beta == 0.0 {
            let c16 = Matrix::<f16>::filled(a.rows(), n, n.next_multiple_of(8), f16::from_f32(f32::NAN)).unwrap();
            let exact = sparsek::cpu::reference(&a, &b, &c16, ep).unwrap();
            let want = Matrix::<f64>::from_fn(a.rows(), n, |r, c| f16::from_f64(exact.row(r)[c]).to_f64()).unwrap();
            let (got, plan) = spmm_planned(&gpu, &a, &b, &c16, ep);
            assert!(is_sm90(&plan) && hopper_split_in(&plan).is_some(), "{ctx}: f16 C: {plan}");
            let report = compare_exact(&got, &want);
            assert!(report.passed(), "{ctx}: f16 C: {report}");
        }
    }
}

/// Random values over long rows split on the sm_90a kernels: every row of the f64 oracle, C poisoned, and the same
/// bits on every launch (the parts are added in part order whichever finishes last).
#[test]
fn long_rows_split_on_the_sm90_kernels_match_the_oracle() {
    let _shared = sparsek_tests::gpu_shared();
    let Some(gpu) = hopper_gpu("long_rows_split_on_the_sm90_kernels_match_the_oracle", TileSchedule::Auto) else {
        return;
    };
    let policy = Policy { row_split: RowSplit::Blocks(16), ..gpu.policy() };
    let gpu = gpu.with_policy(policy);
    for (i, &(bs, shape, rows, n)) in
        [(64, (40, 96), (1, 6), 384), (128, (20, 64), (2, 6), 520), (128, (32, 32), (4, 5), 130)].iter().enumerate()
    {
        let seed = 0x5b11_8000 + i as u64;
        let a = dense_rows(bs, shape, rows, seed, false);
        let ctx = format!("case {i}: {}x{n}x{} bs {bs}, {} dense rows", a.rows(), a.cols(), rows.0);
        let (got, plan) = check_planned::<f32>(&gpu, &a, n, (1.0, 0.0), seed, &ctx).unwrap_or_else(|e| panic!("{e}"));
        assert!(is_sm90(&plan) && hopper_split_in(&plan).is_some(), "{ctx}: not split: {plan}");
        for k in 0..3 {
            let (again, _) = check_planned::<f32>(&gpu, &a, n, (1.0, 0.0), seed, &ctx).unwrap();
            assert!(same_bits(&again, &got), "{ctx}: launch {k} differs from the first");
        }
    }
}

/// `Policy::sm_limit`: the persistent grid holds at most the limit's CTAs (one per SM), with the counter and, when
/// another decomposition is asked for, with a static stride instead of a CTA per tile; every result is exact
/// (integer-valued cases against the oracle) and random values give the bits of the launches without a limit.
#[test]
fn an_sm_limit_holds_the_persistent_grid() {
    let _shared = sparsek_tests::gpu_shared();
    let test = "an_sm_limit_holds_the_persistent_grid";
    let Some([free]) = hopper_gpus(test, [TileSchedule::Auto]) else { return };
    let sms = free.info().sm_count as usize;
    let limit = (sms / 3).max(1);
    let limited = |schedule: TileSchedule| {
        own_gpu(test, |g| {
            g.with_policy(Policy {
                tile_schedule: schedule,
                sm_limit: std::num::NonZeroU32::new(limit as u32),
                ..test_policy()
            })
        })
        .expect("a second Gpu")
    };
    let (held, held_per_tile) = (limited(TileSchedule::Auto), limited(TileSchedule::PerTile));
    for (bs, rows, cols, n) in [(64usize, 2 * sms, 20usize, 520usize), (128, sms, 9, 777), (64, 3, 40, 300)] {
        for (pattern, density, beta) in [(Pattern::Uniform, 0.5, 0.0f32), (Pattern::Skewed, 0.4, 1.0)] {
            let (m, k) = (rows * bs, cols * bs);
            let (a, b, c0) = exact_operands(pattern, (m, k, n), bs, density, beta, (bs * 31 + rows + n) as u64);
            let ep = Epilogue::new(1.0, beta);
            let ctx = format!("bs{bs} {m}x{k}x{n} {pattern} {density} beta={beta} limit {limit} of {sms}");
            let p = sm90_plan(&held, &a, n, &ctx);
            assert!(p.tile_counter && p.ctas as usize <= limit && p.sm_limit == Some(limit as u32), "{ctx}: {p}");
            let p = sm90_plan(&held_per_tile, &a, n, &ctx);
            assert!(!p.tile_counter && p.ctas as usize <= limit, "{ctx}: a limit outranks a CTA per tile: {p}");
            let expected = sparsek::cpu::reference(&a, &b, &c0, ep).unwrap();
            for (what, gpu) in [("counter", &held), ("static stride", &held_per_tile)] {
                let report = compare_exact(&spmm_planned(gpu, &a, &b, &c0, ep).0, &expected);
                assert!(report.passed(), "{ctx}: {what}: {report}");
            }
        }
    }
    let a: Bsr<f16> = generate(Pattern::Uniform, 4096, 4096, 64, 0.12, 77).unwrap();
    let b = Matrix::<f16>::random(4096, 1000, 5).unwrap();
    let poisoned = Matrix::<f32>::filled(4096, 1000, 1000, f32::NAN).unwrap();
    let ep = Epilogue::new(1.0, 0.0);
    let want = spmm_planned(&free, &a, &b, &poisoned, ep).0;
    for i in 0..3 {
        let got = spmm_planned(&held, &a, &b, &poisoned, ep).0;
        assert!(same_bits(&got, &want), "launch {i} under the limit differs from the launch without one");
    }
}
