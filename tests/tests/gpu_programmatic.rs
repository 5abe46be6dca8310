//! Programmatic dependent launch (`Policy::programmatic`, and the default early start, `Policy::early_start`, whose
//! kernels wait before any read): products queued back to back on one stream with no host synchronisation, each
//! reading the previous one's output as its B and writing the buffer the one before it read (ping-pong). A launch
//! that got past its grid-dependency wait too early would read a B not yet written (its buffer starts poisoned) or
//! overwrite one still being read. Every chain is checked against the same chain launched plainly with a
//! synchronisation after every product (bit equality: the same kernels), and its last product against the f64
//! oracle from that product's input. The shapes cover the decode kernel, the narrow tile with split rows (the split
//! workspace and A's L2 window), the mid tiles and a wider launch (the sm_90a or the wide sm_80 kernel: a
//! programmatic launch after a plain one and before one). On a GPU without programmatic launch (only the product
//! module's sm_90a cubin has it) the chains run plainly and the test says so. A chain captured into a CUDA graph
//! (global mode, as `torch.cuda.graph` captures) must hold programmatic edges between its launches, those that
//! split rows included (their workspace's allocation and free nodes are off the chain), and replay to the
//! synchronised chain's bits. Without a GPU every test prints a skip line.

use sparsek::check::{Expected, RowSample};
use sparsek::format::{Pattern, generate};
use sparsek::gpu::{DeviceBsr, DeviceMatrix, Gpu};
use sparsek::plan::{Policy, RowSplit};
use sparsek::{Bsr, Epilogue, Matrix, f16};
use sparsek_tests::{gpu_alone, gpu_shared, graph_edges, graph_nodes, own_gpu, same_bits, test_policy};

/// Products per chain.
const LAYERS: usize = 6;

/// One chain's operands: two square matrices taking turns, the first input, and the scale that keeps the values
/// near 1 from layer to layer.
struct Chain {
    a: [Bsr<f16>; 2],
    x0: Matrix<f16>,
    alpha: f32,
}

impl Chain {
    /// `d x d` matrices of `bs` blocks at `density`, uniform rows, and `n` columns of input (leading dimension
    /// rounded up to 16 bytes, padding NaN).
    fn new((d, bs, density): (usize, usize, f64), n: usize, seed: u64) -> Chain {
        let a = [0, 1].map(|i| generate(Pattern::Uniform, d, d, bs, density, seed ^ (i + 1)).unwrap());
        let x0 = Matrix::<f16>::random(d, n, seed ^ 7).unwrap().with_ld(n.next_multiple_of(8), f16::NAN).unwrap();
        // Values in [-1, 1): a sum of `terms` products has a standard deviation near sqrt(terms) / 3.
        let terms = (density * d as f64).max(1.0);
        Chain { a, x0, alpha: (3.0 / terms.sqrt()) as f32 }
    }

    /// Runs the chain on `gpu`: X1 = alpha A0 X0, X0 = alpha A1 X1, ... with the buffer about to be written
    /// poisoned before the first launch; `sync_each` synchronises after every product. Returns the last two
    /// outputs (the last product's input, then its output).
    fn run(&self, gpu: &Gpu, sync_each: bool) -> (Matrix<f16>, Matrix<f16>) {
        let a = [gpu.upload(&self.a[0]).unwrap(), gpu.upload(&self.a[1]).unwrap()];
        let poison = Matrix::<f16>::filled(self.x0.rows(), self.x0.cols(), self.x0.ld(), f16::NAN).unwrap();
        let mut x: [DeviceMatrix<f16>; 2] = [gpu.upload_matrix(&self.x0).unwrap(), gpu.upload_matrix(&poison).unwrap()];
        gpu.synchronize().unwrap();
        let ep = Epilogue::new(self.alpha, 0.0);
        for layer in 0..LAYERS {
            let from = layer % 2;
            let [x0, x1] = &mut x;
            let (b, c): (&DeviceMatrix<f16>, &mut DeviceMatrix<f16>) = if from == 0 { (x0, x1) } else { (x1, x0) };
            let a: &DeviceBsr<f16> = &a[layer % 2];
            gpu.spmm(a, b, c, ep).unwrap_or_else(|e| panic!("layer {layer}: {e}"));
            if sync_each {
                gpu.synchronize().unwrap();
            }
        }
        let last_in = x[(LAYERS - 1) % 2].to_host().unwrap();
        let last_out = x[LAYERS % 2].to_host().unwrap();
        (last_in, last_out)
    }
}

#[test]
fn chains_of_programmatic_launches_match_synchronised_ones() {
    const TEST: &str = "chains_of_programmatic_launches_match_synchronised_ones";
    let off = Policy { programmatic: false, early_start: false, ..test_policy() };
    let Some(plain) = own_gpu(TEST, |g| g.with_policy(off)) else { return };
    let programmatic = own_gpu(TEST, |g| g.with_policy(Policy { programmatic: true, ..test_policy() })).unwrap();
    // The default: launches start early and wait before any read (Policy::early_start).
    let early =
        own_gpu(TEST, |g| g.with_policy(Policy { programmatic: false, early_start: true, ..test_policy() })).unwrap();
    let _shared = gpu_shared();
    assert!(!plain.programmatic_launch(), "programmatic: false launches plainly");
    assert_eq!(programmatic.programmatic_launch(), programmatic.programmatic_launch_available());
    if !programmatic.programmatic_launch() {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "NOTE {TEST}: this GPU has no programmatic launch ({}); the chains run plainly",
            programmatic.module_loaded_from()
        );
    }
    // (d, bs, density), N: the decode kernel; the narrow tile with split rows and A's L2 window; bs 128's mid
    // tile; bs 64's tile of 64; bs 16's narrow tile in two N tiles; a wide launch (sm_90a on an H100/H200).
    let shapes: [((usize, usize, f64), usize); 6] = [
        ((1536, 32, 0.5), 1),
        ((8192, 64, 0.22), 8),
        ((4096, 128, 0.22), 48),
        ((4096, 64, 0.1), 64),
        ((2048, 16, 0.3), 24),
        ((2048, 64, 0.22), 136),
    ];
    for (i, &(shape, n)) in shapes.iter().enumerate() {
        let chain = Chain::new(shape, n, 0x9d1 + i as u64);
        let ctx = format!("{shape:?} N = {n}");
        let (want_in, want_out) = chain.run(&plain, true);
        let finite = (0..want_out.rows()).all(|r| want_out.row(r).iter().all(|v| v.to_f32().is_finite()));
        assert!(finite, "{ctx}: the reference chain overflowed");
        // The last product against the oracle from its own input (C poisoned, beta 0).
        let c0 = Matrix::<f16>::filled(want_in.rows(), want_in.cols(), want_in.ld(), f16::NAN).unwrap();
        let ep = Epilogue::new(chain.alpha, 0.0);
        let a_last = &chain.a[(LAYERS - 1) % 2];
        let report = Expected::compute(a_last, &want_in, &c0, ep, RowSample::All, |_, _| {}).unwrap().check(&want_out);
        assert!(report.passed(), "{ctx}: the synchronised chain's last product: {report}");
        for round in 0..3 {
            for (gpu, what) in [(&programmatic, "programmatic"), (&early, "early-start")] {
                let (got_in, got_out) = chain.run(gpu, false);
                assert!(
                    same_bits(&got_in, &want_in) && same_bits(&got_out, &want_out),
                    "{ctx}, round {round}: the {what} chain differs from the synchronised one"
                );
            }
        }
    }
}

/// The number of programmatic dependencies (`CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC`) among a graph's edges.
fn programmatic_edges(graph: &cudarc::driver::CudaGraph) -> usize {
    graph_edges(graph).iter().filter(|((_, _, programmatic), _)| *programmatic).map(|(_, n)| n).sum()
}

#[test]
fn captured_programmatic_chains_replay_like_synchronised_ones() {
    const TEST: &str = "captured_programmatic_chains_replay_like_synchronised_ones";
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    // Global capture mode: other threads' synchronising calls would fail meanwhile.
    let _alone = gpu_alone();
    // A captured launch splits rows where it does outside a graph (gpu/split.rs, GraphSpace); else it runs whole
    // rows. The reference is the synchronised chain that adds in the same order: split rows add their parts in
    // another order than whole rows.
    let Some(plain) = own_gpu(TEST, |g| g.with_policy(Policy { programmatic: false, ..test_policy() })) else {
        return;
    };
    let whole =
        own_gpu(TEST, |g| g.with_policy(Policy { programmatic: false, row_split: RowSplit::Off, ..test_policy() }))
            .unwrap();
    let gpu = own_gpu(TEST, |g| g.with_policy(Policy { programmatic: true, ..test_policy() })).unwrap();
    // The decode kernel and the narrow tile (whole rows), and bs 128's tile of 32 columns on 64 block rows of 14
    // blocks (split, in the graph too).
    let mut balanced = [false; 3];
    for (i, &(shape, n)) in [((1536, 32, 0.5), 1), ((8192, 64, 0.22), 8), ((8192, 128, 0.22), 32)].iter().enumerate() {
        let chain = Chain::new(shape, n, 0x6a7 + i as u64);
        let ctx = format!("{shape:?} N = {n}");
        let stream = gpu.new_stream().unwrap();
        let a = [gpu.upload(&chain.a[0]).unwrap(), gpu.upload(&chain.a[1]).unwrap()];
        let poison = Matrix::<f16>::filled(chain.x0.rows(), chain.x0.cols(), chain.x0.ld(), f16::NAN).unwrap();
        let mut x = [gpu.upload_matrix(&chain.x0).unwrap(), gpu.upload_matrix(&poison).unwrap()];
        gpu.synchronize().unwrap();
        let ep = Epilogue::new(chain.alpha, 0.0);
        stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL).unwrap();
        let mut launched = Ok(());
        for layer in 0..LAYERS {
            let [x0, x1] = &mut x;
            let (b, c) = if layer % 2 == 0 { (&*x0, x1) } else { (&*x1, x0) };
            // SAFETY: views of live buffers of this Gpu, used only on `stream` while the graph exists.
            let r = unsafe {
                gpu.spmm_raw(stream.cu_stream(), &a[layer % 2].view(), &b.view(), &mut c.view_mut(), None, ep)
            };
            if r.is_err() {
                launched = r;
                break;
            }
        }
        let graph = stream.end_capture(CUgraphInstantiate_flags(0));
        launched.unwrap_or_else(|e| panic!("{ctx}: launch during capture: {e}"));
        let graph = graph.unwrap().expect("a graph");
        // A split launch's workspace in the graph (an allocation and a free node, no memset: its counters are kept
        // zeroed by the graph) is off the launches' chain: the kernels still depend on each other programmatically.
        let held = graph_nodes(&graph);
        let split = held.allocs;
        assert!(split == 0 || split == LAYERS, "{ctx}: every layer alike: {held:?}");
        assert_eq!((held.memsets, held.frees), (0, split), "{ctx}: {held:?}");
        balanced[i] = split > 0;
        let (want_in, want_out) = chain.run(if split > 0 { &plain } else { &whole }, true);
        if gpu.programmatic_launch() {
            let edges = programmatic_edges(&graph);
            assert_eq!(edges, LAYERS - 1, "{ctx}: products depending programmatically on the one before");
        }
        for replay in 0..3 {
            // The first input again and the other buffer poisoned, on the Gpu's stream, finished before the replay.
            x[0].copy_from_host(&chain.x0).unwrap();
            x[1].copy_from_host(&poison).unwrap();
            gpu.synchronize().unwrap();
            graph.launch().unwrap();
            stream.synchronize().unwrap();
            let got_in = x[(LAYERS - 1) % 2].to_host().unwrap();
            let got_out = x[LAYERS % 2].to_host().unwrap();
            assert!(
                same_bits(&got_in, &want_in) && same_bits(&got_out, &want_out),
                "{ctx}, replay {replay}: the captured chain differs from the synchronised one"
            );
        }
    }
    assert_eq!(balanced, [false, false, true], "which chains split their rows in the graph");
}
