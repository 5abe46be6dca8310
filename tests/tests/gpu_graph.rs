//! Balanced launches captured into a CUDA graph (host/src/gpu/split.rs, `GraphSpace`): a launch on a stream being
//! captured makes the choices it makes outside the graph (split rows, the flat block list, bs 64's tile of 32 for a
//! dominating row, the sm_90a tile counter) on a workspace of its own that the graph holds (counters zeroed once and
//! kept by the graph, partial tiles between an allocation node and a free node; no memset node). The graph's nodes
//! are read back (their kinds, the kernel's name and grid), each replay into a poisoned C must give the bits of the
//! same launch outside the graph (random values: any other split would add in another order), graphs replayed while
//! eager split launches run on other streams must each keep their bits (a workspace shared with them would race),
//! graphs destroyed and captured again reuse the counters they gave back, and a capture of more launches than the
//! first slab of counters serves grows it without breaking the capture. Capture in global mode, as
//! `torch.cuda.graph` does. Without a GPU every test prints a skip line.

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaGraph, CudaStream};
use sparsek::check::{Expected, RowSample};
use sparsek::format::{Pattern, generate};
use sparsek::gpu::{Decomposition, DeviceBsr, DeviceMatrix, Gpu, LaunchPlan, OutputElement};
use sparsek::plan::{Policy, RowSplit};
use sparsek::{Bsr, Epilogue, Matrix, f16};
use sparsek_tests::{
    gpu_alone, graph_edges, graph_memory_used, graph_nodes as nodes, own_gpu, plan_of, planned_spmm, test_policy,
};

/// The GPU alone ([`gpu_alone`]: capture in global mode) and a Gpu of the test's own whose few-column launches take
/// the narrow and mid tiles (decode off), rows as `split` says; `None` (after the skip line) without a GPU.
fn narrow_alone(test: &str, split: RowSplit) -> Option<(std::sync::RwLockWriteGuard<'static, ()>, Gpu)> {
    let alone = gpu_alone();
    Some((alone, own_gpu(test, |g| g.with_policy(Policy { decode: false, row_split: split, ..test_policy() }))?))
}

/// Another Gpu as [`narrow_alone`]'s, for a test that holds the GPU alone already.
fn narrow(test: &str, split: RowSplit) -> Gpu {
    own_gpu(test, |g| g.with_policy(Policy { decode: false, row_split: split, ..test_policy() })).expect("a second Gpu")
}

/// Whether a plan balances its rows (a flat list or split rows).
fn balances(plan: &LaunchPlan) -> bool {
    matches!(plan.decomposition, Decomposition::FlatList { .. } | Decomposition::SplitRows { .. })
}

/// Random operands of a case: A of `pattern` (`m x k`, blocks of `bs`, `density`), B (`k x n`) and a poisoned C.
fn operands<TC: OutputElement>(
    pattern: Pattern,
    (m, k, n): (usize, usize, usize),
    bs: usize,
    seed: u64,
) -> (Bsr<f16>, Matrix<f16>, Matrix<TC>) {
    let a: Bsr<f16> = generate(pattern, m, k, bs, 0.22, seed).unwrap();
    let b = Matrix::<f16>::random(k, n, seed ^ 0xb).unwrap();
    let ld = n.next_multiple_of(16 / std::mem::size_of::<TC>());
    let c = Matrix::<TC>::filled(m, n, ld, TC::from_f64(f64::NAN)).unwrap();
    (a, b, c)
}

/// One launch of `a_d @ b_d` into `c_d` captured on `stream` (global mode) through views (A's carry its row
/// schedule, as an uploaded weight's do), returned as a graph ready to replay.
fn capture<TC: OutputElement>(
    gpu: &Gpu,
    stream: &std::sync::Arc<CudaStream>,
    (a_d, b_d, c_d): (&DeviceBsr<f16>, &DeviceMatrix<f16>, &mut DeviceMatrix<TC>),
    ctx: &str,
) -> CudaGraph {
    let (a_v, b_v, mut c_v) = (a_d.view(), b_d.view(), c_d.view_mut());
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL).unwrap();
    // SAFETY: views of live buffers of this Gpu; nothing else uses them while the graph exists and runs.
    let r = unsafe { gpu.spmm_raw(stream.cu_stream(), &a_v, &b_v, &mut c_v, None, Epilogue::default()) };
    let graph = stream.end_capture(CUgraphInstantiate_flags(0));
    r.unwrap_or_else(|e| panic!("{ctx}: launch during capture: {e}"));
    graph.unwrap_or_else(|e| panic!("{ctx}: end capture: {e}")).expect("a graph")
}

/// The bits of every element (padding aside) of `x`, for comparisons.
fn bits<TC: OutputElement>(x: &Matrix<TC>) -> Vec<u64> {
    (0..x.rows()).flat_map(|r| x.row(r).iter().map(|v| v.to_f64().to_bits()).collect::<Vec<_>>()).collect()
}

/// A case through `gpu`: the launch outside a graph (its plan balances and is the one `Gpu::plan` predicted; C
/// checked against every row of the oracle), then the same launch captured on a workspace the graph holds: the graph
/// holds one allocation, the plan's kernel with the plan's grid, and one free; three replays into a poisoned C give
/// the first launch's bits. The captured launch records its plan (`Gpu::last_plan`): the eager
/// plan's decisions on a graph-owned workspace.
fn captured_matches_eager<TC: OutputElement>(gpu: &Gpu, (a, b, c0): (&Bsr<f16>, &Matrix<f16>, &Matrix<TC>), ctx: &str) {
    let ep = Epilogue::default();
    let (a_d, b_d) = (gpu.upload(a).unwrap(), gpu.upload_matrix(b).unwrap());
    let mut c_d = gpu.upload_matrix(c0).unwrap();
    let eager = planned_spmm(gpu, &a_d, &b_d, &mut c_d, ep).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert!(balances(&eager), "{ctx}: the case must balance its rows outside a graph: {eager}");
    let want = c_d.to_host().unwrap();
    let report = Expected::compute(a, b, c0, ep, RowSample::All, |_, _| {}).unwrap().check(&want);
    assert!(report.passed(), "{ctx}: outside a graph: {report}");
    let stream = gpu.new_stream().unwrap();
    let graph = capture(gpu, &stream, (&a_d, &b_d, &mut c_d), ctx);
    let captured = gpu.last_plan().unwrap_or_else(|| panic!("{ctx}: the captured launch recorded no plan"));
    let same =
        (captured.kernel, captured.decomposition, captured.ctas) == (eager.kernel, eager.decomposition, eager.ctas);
    assert!(same && captured.graph_workspace, "{ctx}: captured {captured}, eager {eager}");
    assert_graph_holds(&graph, &eager, 1, ctx);
    for replay in 0..3 {
        let got = replay_into(gpu, (&graph, &stream), &mut c_d, c0);
        assert!(bits(&got) == bits(&want), "{ctx}: replay {replay} differs from the launch outside the graph");
    }
}

/// The graph holds `launches` kernel nodes, each `plan`'s kernel on `plan`'s grid, an allocation and a free node
/// for each, and nothing else (no memset: the counters stay zeroed in the graph's keeping); the workspace's nodes
/// are off the launches' chain: each kernel depends on the one before it and on its allocation, each free node
/// on its kernel only, and each allocation from the third on the free node of the launch two before it (so two
/// buffers serve them all); no kernel waits for a free node.
fn assert_graph_holds(graph: &CudaGraph, plan: &LaunchPlan, launches: usize, ctx: &str) {
    let held = nodes(graph);
    let kernel = (plan.kernel.to_string(), plan.ctas);
    assert_eq!(held.kernels, vec![kernel; launches], "{ctx}: the kernel of {plan} ({held:?})");
    assert_eq!((held.allocs, held.memsets, held.frees, held.others), (launches, 0, launches, 0), "{ctx}: {held:?}");
    let mut want = std::collections::BTreeMap::new();
    want.insert(("alloc", "kernel", false), launches);
    want.insert(("kernel", "free", false), launches);
    if launches > 1 {
        want.insert(("kernel", "kernel", false), launches - 1);
    }
    if launches > 2 {
        want.insert(("free", "alloc", false), launches - 2);
    }
    assert_eq!(graph_edges(graph), want, "{ctx}: the graph's edges");
}

/// C reset to `c0`, then one replay of the graph captured on `stream`; C downloaded.
fn replay_into<TC: OutputElement>(
    gpu: &Gpu,
    (graph, stream): (&CudaGraph, &CudaStream),
    c_d: &mut DeviceMatrix<TC>,
    c0: &Matrix<TC>,
) -> Matrix<TC> {
    c_d.copy_from_host(c0).unwrap();
    gpu.synchronize().unwrap();
    graph.launch().unwrap();
    stream.synchronize().unwrap();
    c_d.to_host().unwrap()
}

#[test]
fn captured_launches_balance_as_outside_a_graph() {
    const TEST: &str = "captured_launches_balance_as_outside_a_graph";
    // The narrow and mid tiles (decode off), rows split where the launcher splits them.
    let Some((_alone, auto)) = narrow_alone(TEST, RowSplit::Auto) else { return };
    // Skewed rows at 16 columns: split rows on the narrow tile.
    let (a, b, c) = operands::<f32>(Pattern::Skewed, (4096, 4096, 16), 64, 0x91);
    captured_matches_eager(&auto, (&a, &b, &c), "4096x16x4096 bs64 skewed, f32 C");
    // Skewed rows at 48 columns into an f16 C: bs 64's tile of 32 over two N tiles, split.
    let (a, b, c) = operands::<f16>(Pattern::Skewed, (4096, 4096, 48), 64, 0x92);
    captured_matches_eager(&auto, (&a, &b, &c), "4096x48x4096 bs64 skewed, f16 C");
    // bs 128, one column: 32 block rows on the narrow tile, split.
    let (a, b, c) = operands::<f32>(Pattern::Uniform, (4096, 8192, 1), 128, 0x93);
    captured_matches_eager(&auto, (&a, &b, &c), "4096x1x8192 bs128 uniform, f32 C");
    // The flat block list, asked for.
    let flat = narrow(TEST, RowSplit::Flat(2));
    let (a, b, c) = operands::<f32>(Pattern::Skewed, (4096, 4096, 16), 64, 0x94);
    captured_matches_eager(&flat, (&a, &b, &c), "4096x16x4096 bs64 skewed, flat list, f32 C");
    // Uniform rows of about 225 KiB on one CTA per two SMs (64 block rows at bs 64, the longest 43 blocks): split
    // outside a graph and inside one (until the graph's counters were kept zeroed, a memset node per launch made
    // whole rows the better choice there).
    let (a, b, c) = operands::<f32>(Pattern::Uniform, (4096, 8192, 16), 64, 0x97);
    captured_matches_eager(&auto, (&a, &b, &c), "4096x16x8192 bs64 uniform, f32 C");
}

/// An sm_90a launch of many waves of tiles (8192 x 2048 x 1024 bs 64: 1024 tiles and more), captured: the
/// persistent grid on the tile counter it runs on outside the graph, its counter in a workspace the graph holds (one
/// allocation and one free node, 256 bytes: they keep the graph to one instantiation, so two replays never share the
/// counter), and each replay the bits of the launch outside the graph (any tile order gives them: a tile is one CTA's). Without the sm_90a module (or with
/// `SPARSEK_TEST_MODULE=sm80`) the launch has no tile counter: a skip line.
#[test]
fn a_captured_sm90_launch_of_many_waves_keeps_its_tile_counter() {
    const TEST: &str = "a_captured_sm90_launch_of_many_waves_keeps_its_tile_counter";
    let alone = gpu_alone();
    let Some(gpu) = own_gpu(TEST, |g| g) else { return };
    let ep = Epilogue::default();
    let (a, b, c0) = operands::<f32>(Pattern::Uniform, (8192, 1024, 2048), 64, 0x9a);
    let (a_d, b_d) = (gpu.upload(&a).unwrap(), gpu.upload_matrix(&b).unwrap());
    let mut c_d = gpu.upload_matrix(&c0).unwrap();
    let eager = planned_spmm(&gpu, &a_d, &b_d, &mut c_d, ep).unwrap_or_else(|e| panic!("{TEST}: {e}"));
    if !eager.tile_counter {
        println!("SKIP {TEST}: the launch runs no tile counter here (no sm_90a kernel): {eager}");
        return;
    }
    let want = c_d.to_host().unwrap();
    let sample = RowSample::Random { count: 256, seed: 0x9a };
    let report = Expected::compute(&a, &b, &c0, ep, sample, |_, _| {}).unwrap().check(&want);
    assert!(report.passed(), "{TEST}: outside a graph: {report}");
    let stream = gpu.new_stream().unwrap();
    let graph = capture(&gpu, &stream, (&a_d, &b_d, &mut c_d), TEST);
    let captured = gpu.last_plan().unwrap_or_else(|| panic!("{TEST}: the captured launch recorded no plan"));
    let same = (captured.kernel, captured.ctas, captured.tile_counter) == (eager.kernel, eager.ctas, true);
    assert!(same && captured.graph_workspace, "{TEST}: captured {captured}, eager {eager}");
    assert_graph_holds(&graph, &eager, 1, TEST);
    for replay in 0..3 {
        let got = replay_into(&gpu, (&graph, &stream), &mut c_d, &c0);
        assert!(bits(&got) == bits(&want), "{TEST}: replay {replay} differs from the launch outside the graph");
    }
    drop(alone);
}

/// Two graphs of split launches (each over its own B and C) replayed while split launches outside any graph run on
/// two more streams, all queued before any is waited for, five rounds: every output keeps the bits of its launch
/// alone. A graph that used the Gpu's workspace would run unordered with those launches and mix their parts.
#[test]
fn graphs_and_eager_split_launches_run_at_once() {
    let Some((_alone, gpu)) = narrow_alone("graphs_and_eager_split_launches_run_at_once", RowSplit::Auto) else {
        return;
    };
    let (a, _, c0) = operands::<f32>(Pattern::Skewed, (4096, 4096, 16), 64, 0x95);
    let plan = plan_of::<f32>(&gpu, &a, 16, Epilogue::default());
    assert!(matches!(plan.decomposition, Decomposition::SplitRows { .. }), "the case must split its rows: {plan}");
    let a_d = gpu.upload(&a).unwrap();
    let bs: Vec<Matrix<f16>> = (0..4).map(|i| Matrix::<f16>::random(4096, 16, 0x960 + i).unwrap()).collect();
    let b_d: Vec<DeviceMatrix<f16>> = bs.iter().map(|b| gpu.upload_matrix(b).unwrap()).collect();
    let mut c_d: Vec<DeviceMatrix<f32>> = (0..4).map(|_| gpu.upload_matrix(&c0).unwrap()).collect();
    // Each product alone first: the bits every later run must give.
    let mut want = Vec::new();
    for (b, c) in b_d.iter().zip(c_d.iter_mut()) {
        gpu.spmm(&a_d, b, c, Epilogue::default()).unwrap();
        want.push(bits(&c.to_host().unwrap()));
    }
    let streams: Vec<_> = (0..4).map(|_| gpu.new_stream().unwrap()).collect();
    let (c01, c23) = c_d.split_at_mut(2);
    let (c0_d, c1_d) = c01.split_at_mut(1);
    let g0 = capture(&gpu, &streams[0], (&a_d, &b_d[0], &mut c0_d[0]), "graph 0");
    let g1 = capture(&gpu, &streams[1], (&a_d, &b_d[1], &mut c1_d[0]), "graph 1");
    for (i, g) in [&g0, &g1].into_iter().enumerate() {
        assert_graph_holds(g, &plan, 1, &format!("graph {i}"));
    }
    for round in 0..5 {
        for c in c01.iter_mut().chain(c23.iter_mut()) {
            c.copy_from_host(&c0).unwrap();
        }
        gpu.synchronize().unwrap();
        g0.launch().unwrap();
        g1.launch().unwrap();
        for (i, c) in c23.iter_mut().enumerate() {
            gpu.spmm_on(&streams[2 + i], &a_d, &b_d[2 + i], c, Epilogue::default()).unwrap();
        }
        for s in &streams {
            s.synchronize().unwrap();
        }
        for (i, c) in c01.iter().chain(c23.iter()).enumerate() {
            let got = c.to_host().unwrap();
            assert!(
                bits(&got) == want[i],
                "round {round}: product {i} (graph: {}) differs from its launch alone",
                i < 2
            );
        }
    }
}

/// Waits up to two seconds for `done` (a graph's user objects are released on a CUDA thread of its own, after the
/// graph is destroyed).
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..200 {
        if done() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    done()
}

/// Graphs of a split launch captured, replayed and destroyed four times over, with a second graph alive beside the
/// first in two of the rounds: every replay gives the bits of the launch outside a graph, each destroyed graph gives
/// its counters back (they are taken again by the next capture, which finds them zeroed: its replays are right), and
/// no slab is added for it.
/// The graph-counter tests' case: the GPU alone and a Gpu of the test's own whose captured launches get a workspace
/// (else a skip line and `None`), with its slabs so far; a skewed 4096 x 16 x 4096 bs-64 product that splits its
/// rows, uploaded, launched once outside a graph: its plan, C's poisoned start and the launch's bits.
struct SplitCase {
    _alone: std::sync::RwLockWriteGuard<'static, ()>,
    gpu: Gpu,
    slabs: usize,
    a_d: DeviceBsr<f16>,
    b_d: DeviceMatrix<f16>,
    c0: Matrix<f32>,
    eager: LaunchPlan,
    want: Vec<u64>,
}

fn split_case(test: &str, seed: u64) -> Option<SplitCase> {
    let (_alone, gpu) = narrow_alone(test, RowSplit::Auto)?;
    let Some((slabs, _)) = gpu.graph_counter_stats() else {
        println!("SKIP {test}: captured launches get no workspace on this device or driver");
        return None;
    };
    let (a, b, c0) = operands::<f32>(Pattern::Skewed, (4096, 4096, 16), 64, seed);
    let (a_d, b_d) = (gpu.upload(&a).unwrap(), gpu.upload_matrix(&b).unwrap());
    let mut c_d = gpu.upload_matrix(&c0).unwrap();
    let eager = planned_spmm(&gpu, &a_d, &b_d, &mut c_d, Epilogue::default()).unwrap();
    assert!(balances(&eager), "{test}: the case must balance its rows: {eager}");
    let want = bits(&c_d.to_host().unwrap());
    Some(SplitCase { _alone, gpu, slabs, a_d, b_d, c0, eager, want })
}

#[test]
fn destroyed_graphs_give_their_counters_back_zeroed() {
    const TEST: &str = "destroyed_graphs_give_their_counters_back_zeroed";
    let Some(SplitCase { _alone: _held, gpu, slabs, a_d, b_d, c0, want, .. }) = split_case(TEST, 0x98) else {
        return;
    };
    let mut c_d = gpu.upload_matrix(&c0).unwrap();
    let mut c_e = gpu.upload_matrix(&c0).unwrap();
    let stream = gpu.new_stream().unwrap();
    for round in 0..4 {
        let graph = capture(&gpu, &stream, (&a_d, &b_d, &mut c_d), TEST);
        let other = (round % 2 == 1).then(|| capture(&gpu, &stream, (&a_d, &b_d, &mut c_e), TEST));
        for replay in 0..2 {
            let got = replay_into(&gpu, (&graph, &stream), &mut c_d, &c0);
            assert!(bits(&got) == want, "{TEST}: round {round}, replay {replay} differs from the launch outside");
            if let Some(o) = &other {
                let got = replay_into(&gpu, (o, &stream), &mut c_e, &c0);
                assert!(bits(&got) == want, "{TEST}: round {round}, the second graph's replay {replay} differs");
            }
        }
        let alive = 1 + usize::from(other.is_some());
        drop((graph, other));
        let back = eventually(|| gpu.graph_counter_stats().is_some_and(|(_, free)| free >= alive));
        assert!(back, "{TEST}: round {round}: {:?} after destroying {alive} graphs", gpu.graph_counter_stats());
    }
    assert_eq!(gpu.graph_counter_stats().map(|s| s.0), Some(slabs), "{TEST}: no slab added");
}

/// 300 split launches captured into one graph (global mode), more than the first slab of counters serves (64 words
/// each, 256 to a slab): the pool grows during the capture without breaking it, the graph holds 300 kernels and
/// 300 allocation and free nodes, its replay gives the bits of the launch outside a graph and takes at most twice
/// the graph memory of a graph of one launch (the partial tiles of all 300 in two buffers), and destroying it gives
/// all 300 ranges back.
#[test]
fn a_capture_of_many_launches_grows_the_counters() {
    const TEST: &str = "a_capture_of_many_launches_grows_the_counters";
    const LAUNCHES: usize = 300;
    let Some(SplitCase { _alone: _held, gpu, slabs, a_d, b_d, c0, eager, want }) = split_case(TEST, 0x99) else {
        return;
    };
    let mut c_d = gpu.upload_matrix(&c0).unwrap();
    let stream = gpu.new_stream().unwrap();
    // The graph memory of one launch's graph, replayed.
    gpu.synchronize().unwrap();
    let before = graph_memory_used(&gpu);
    let one = capture(&gpu, &stream, (&a_d, &b_d, &mut c_d), TEST);
    let got = replay_into(&gpu, (&one, &stream), &mut c_d, &c0);
    assert!(bits(&got) == want, "{TEST}: the one-launch graph's replay differs from the launch outside a graph");
    let one_launch = graph_memory_used(&gpu).saturating_sub(before);
    if one_launch == 0 {
        // compute-sanitizer serves graph allocations itself: the driver then reports none.
        eprintln!(
            "NOTE {TEST}: the driver reports no graph memory for a split launch's graph; the bound is not checked"
        );
    }
    drop(one);
    gpu.synchronize().unwrap();
    let before = graph_memory_used(&gpu);
    let (a_v, b_v, mut c_v) = (a_d.view(), b_d.view(), c_d.view_mut());
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL).unwrap();
    let mut launched = Ok(());
    for _ in 0..LAUNCHES {
        // SAFETY: views of live buffers of this Gpu; nothing else uses them while the graph exists and runs.
        launched = unsafe { gpu.spmm_raw(stream.cu_stream(), &a_v, &b_v, &mut c_v, None, Epilogue::default()) };
        if launched.is_err() {
            break;
        }
    }
    let graph = stream.end_capture(CUgraphInstantiate_flags(0));
    launched.unwrap_or_else(|e| panic!("{TEST}: launch during capture: {e}"));
    let graph = graph.unwrap_or_else(|e| panic!("{TEST}: end capture: {e}")).expect("a graph");
    let grown = gpu.graph_counter_stats().unwrap().0;
    assert!(grown > slabs, "{TEST}: {LAUNCHES} captured launches made no new slab ({grown})");
    assert_graph_holds(&graph, &eager, LAUNCHES, TEST);
    let got = replay_into(&gpu, (&graph, &stream), &mut c_d, &c0);
    assert!(bits(&got) == want, "{TEST}: the replay differs from the launch outside a graph");
    let many = graph_memory_used(&gpu).saturating_sub(before);
    let bounded = one_launch == 0 || many <= 2 * one_launch;
    assert!(bounded, "{TEST}: {LAUNCHES} launches took {many} bytes of graph memory, one {one_launch}");
    drop(graph);
    let back = eventually(|| gpu.graph_counter_stats().is_some_and(|(_, free)| free >= LAUNCHES));
    assert!(back, "{TEST}: {:?} after destroying the graph", gpu.graph_counter_stats());
}
