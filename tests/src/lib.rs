//! Shared helpers for the integration tests: GPU-or-skip, case counts, failure descriptions.

pub mod prop;

use std::sync::{OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use sparsek::check::{Expected, RowSample};
use sparsek::format::{Pattern, generate};
use sparsek::gpu::{BsrArrays, BsrView, DeviceBsr, Gpu, IndexType, InputElement, LaunchPlan, OutputElement};
use sparsek::plan::Policy;
use sparsek::tune::{KernelFamily, PlanCache};
use sparsek::{Bsr, Epilogue, Layout, Matrix, Scalar, f16};

/// `SPARSEK_REQUIRE_GPU=1` turns a missing GPU into a test failure instead of a skip.
pub fn gpu_required() -> bool {
    std::env::var("SPARSEK_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// `SPARSEK_TEST_MODULE=sm80` runs the GPU tests on the portable sm_80 module even on a GPU that has the sm_90a
/// one (`Policy::hopper` off); unset or `auto`, launches take the kernels the library chooses.
pub fn hopper_enabled() -> bool {
    match std::env::var("SPARSEK_TEST_MODULE").as_deref() {
        Ok("sm80") => false,
        Ok("auto") | Err(_) => true,
        Ok(other) => panic!("SPARSEK_TEST_MODULE={other}: expected sm80 or auto"),
    }
}

/// The process-wide GPU for tests, opened once; `None` (after printing a skip line) when there is none and
/// SPARSEK_REQUIRE_GPU is not 1. Panics when a GPU is required but cannot be opened. Which modules it launches
/// follows `SPARSEK_TEST_MODULE` ([`hopper_enabled`]); plans are off (the built-in heuristic's kernels).
pub fn gpu(test: &str) -> Option<&'static Gpu> {
    static GPU: OnceLock<Result<Gpu, String>> = OnceLock::new();
    // Plans off: the tests launch exactly the kernels the built-in heuristic picks, whatever a tuned plan cache
    // on the machine says (the plan tests open their own Gpu with their own cache). Small grids stay on the wide
    // and sm_90a kernels (`Policy::small_grids` off): most test shapes are small, and those kernels are what they
    // test; `small_grids_take_the_narrow_and_mid_tiles` tests the rule.
    let open = || Gpu::new(0).map(test_settings);
    match GPU.get_or_init(|| open().map_err(|e| e.to_string())) {
        Ok(g) => Some(g),
        Err(reason) => {
            if gpu_required() {
                panic!("{test}: SPARSEK_REQUIRE_GPU=1 but no usable GPU: {reason}");
            }
            // Written to the raw stderr handle: libtest captures println!/eprintln! of passing tests, and a skip
            // must be visible in the test log.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIP {test}: no GPU ({reason}); set SPARSEK_REQUIRE_GPU=1 to make this a failure"
            );
            None
        }
    }
}

/// A GPU of the test's own, configured by `configure` (after [`gpu`]'s settings: the module choice, plans off, small
/// grids on the wide and sm_90a kernels), for tests that need other settings than the shared one; `None` (after the
/// skip line) as for [`gpu`].
pub fn own_gpu(test: &str, configure: impl FnOnce(Gpu) -> Gpu) -> Option<Gpu> {
    gpu(test)?;
    let g = Gpu::new(0).unwrap_or_else(|e| panic!("{test}: opening a second Gpu: {e}"));
    Some(configure(test_settings(g)))
}

/// The policy of every test's Gpu ([`gpu`], [`own_gpu`]): the module choice ([`hopper_enabled`]), small grids on
/// the wide and sm_90a kernels. A test that needs other settings starts from it:
/// `g.with_policy(Policy { decode: false, ..test_policy() })`.
pub fn test_policy() -> Policy {
    Policy { hopper: hopper_enabled(), small_grids: false, ..Policy::default() }
}

/// The settings of every test's Gpu ([`gpu`], [`own_gpu`]): [`test_policy`], plans off.
fn test_settings(g: Gpu) -> Gpu {
    g.with_policy(test_policy()).with_plan_cache(PlanCache::off())
}

/// Number of proptest cases for GPU property tests: `SPARSEK_GPU_CASES` or `default`.
pub fn gpu_cases(default: u32) -> u32 {
    std::env::var("SPARSEK_GPU_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// One random product of the GPU suites (gpu_spmm's case, and the product of gpu_reach's): A of `block_rows x
/// block_cols` blocks of `bs` (`pattern`, `density`), `n` columns, the leading dimensions padded by `pad` elements
/// (C's; in gpu_reach B's too), `C = alpha * A @ B + beta * C`, every operand drawn from `seed`.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub bs: usize,
    pub block_rows: usize,
    pub block_cols: usize,
    pub n: usize,
    pub pad: usize,
    pub density: f64,
    pub pattern: Pattern,
    pub alpha: f32,
    pub beta: f32,
    pub seed: u64,
}

/// The fields of a [`Case`] in declaration order, as the suites' strategies draw them.
pub type CaseTuple = (usize, usize, usize, usize, usize, f64, Pattern, f32, f32, u64);

impl Case {
    /// The case of its fields in declaration order.
    pub fn from_tuple((bs, block_rows, block_cols, n, pad, density, pattern, alpha, beta, seed): CaseTuple) -> Case {
        Case { bs, block_rows, block_cols, n, pad, density, pattern, alpha, beta, seed }
    }

    /// M, K and N.
    pub fn dims(&self) -> (usize, usize, usize) {
        (self.block_rows * self.bs, self.block_cols * self.bs, self.n)
    }

    /// The case's A: `generate` of its pattern and density from its seed (`Err`: the generator's error).
    pub fn a<T: Scalar>(&self) -> Result<Bsr<T>, String> {
        let (m, k, _) = self.dims();
        generate(self.pattern, m, k, self.bs, self.density, self.seed).map_err(|e| e.to_string())
    }

    /// The case's B: `K x N`, random from its seed.
    pub fn b<T: Scalar>(&self) -> Matrix<T> {
        let (_, k, n) = self.dims();
        Matrix::<T>::random(k, n, self.seed ^ 0xb).unwrap()
    }
}

/// Row-major B and C, the layouts of most tests' launches.
pub const ROW_MAJOR: (Layout, Layout) = (Layout::RowMajor, Layout::RowMajor);

/// One product on `gpu`'s default stream from host operands: A, B and C (starting as `c0`) uploaded, `Gpu::spmm`
/// with epilogue `ep`, and C downloaded, with the plan the launch ran, after asserting that it is the plan
/// `Gpu::plan` predicted (predicted == ran; panics on any error). `gpu` must be the test's own ([`own_gpu`]):
/// `Gpu::last_plan` is the last launch's from any thread.
pub fn spmm_planned<TC: OutputElement>(
    gpu: &Gpu,
    a: &Bsr<f16>,
    b: &Matrix<f16>,
    c0: &Matrix<TC>,
    ep: Epilogue,
) -> (Matrix<TC>, LaunchPlan) {
    let (a_d, b_d) = (gpu.upload(a).unwrap(), gpu.upload_matrix(b).unwrap());
    let mut c_d = gpu.upload_matrix(c0).unwrap();
    let plan = planned_spmm(gpu, &a_d, &b_d, &mut c_d, ep).unwrap_or_else(|e| panic!("{e}"));
    (c_d.to_host().unwrap(), plan)
}

/// `Gpu::spmm` of uploaded operands (row-major B and C), returning the plan it ran after checking that it is the
/// plan `Gpu::plan` predicted (`Err` describes a mismatch or a failed launch). `gpu` must be the test's own
/// ([`own_gpu`]), as for [`spmm_planned`].
pub fn planned_spmm<TA: InputElement, TC: OutputElement>(
    gpu: &Gpu,
    a: &DeviceBsr<TA>,
    b: &sparsek::gpu::DeviceMatrix<TA>,
    c: &mut sparsek::gpu::DeviceMatrix<TC>,
    ep: Epilogue,
) -> Result<LaunchPlan, String> {
    let predicted = gpu.plan::<TA, TC>(a, b.cols(), ROW_MAJOR, ep).map_err(|e| format!("Gpu::plan: {e}"))?;
    gpu.spmm(a, b, c, ep).map_err(|e| format!("launch of {predicted}: {e}"))?;
    match gpu.last_plan() {
        Some(ran) if ran == predicted => Ok(ran),
        ran => Err(format!("predicted {predicted}, ran {ran:?}")),
    }
}

/// The plan `gpu` gives a launch of `a` (uploaded: its row lengths known) with `n` columns, row-major B and C and
/// epilogue `ep` into a `TC` C (panics on an error).
pub fn plan_of<TC: OutputElement>(gpu: &Gpu, a: &Bsr<f16>, n: usize, ep: Epilogue) -> LaunchPlan {
    plan_in::<f16, TC>(gpu, a, Rows::Uploaded, n, (ROW_MAJOR, ep))
}

/// The plan `gpu` gives a launch over a raw view of `a` that knows nothing of its rows (no `RowSchedule`: the
/// longest row and the row order unknown), `n` columns, row-major B and C, into a `TC` C.
pub fn plan_unscheduled<TC: OutputElement>(gpu: &Gpu, a: &Bsr<f16>, n: usize, ep: Epilogue) -> LaunchPlan {
    plan_in::<f16, TC>(gpu, a, Rows::Unknown, n, (ROW_MAJOR, ep))
}

/// What a launch knows of A's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rows {
    /// An uploaded matrix (`Gpu::upload`): the row lengths and the longest-first order known.
    Uploaded,
    /// A raw view without a `RowSchedule`: nothing known of the rows.
    Unknown,
}

/// [`plan_of`] and [`plan_unscheduled`] for any input type (A's values converted to `TA`) and B and C in `layouts`:
/// `Gpu::plan` of the uploaded matrix, or `Gpu::plan_view` of a raw view (panics on an error).
pub fn plan_in<TA: InputElement, TC: OutputElement>(
    gpu: &Gpu,
    a: &Bsr<f16>,
    rows: Rows,
    n: usize,
    (layouts, ep): ((Layout, Layout), Epilogue),
) -> LaunchPlan {
    let a = convert::<TA>(a);
    let plan = match rows {
        Rows::Uploaded => gpu.upload(&a).and_then(|a_d| gpu.plan::<TA, TC>(&a_d, n, layouts, ep)),
        Rows::Unknown => {
            let stream = gpu.stream();
            let raw = RawBsr::upload(stream, &a);
            gpu.plan_view::<TA, TC>(&raw.view(stream), n, layouts, ep)
        }
    };
    plan.unwrap_or_else(|e| panic!("plan of {}x{}x{n} bs {} ({rows:?}): {e}", a.rows(), a.cols(), a.block_size()))
}

/// `a` with its values converted to `T` (the same structure).
pub fn convert<T: Scalar>(a: &Bsr<f16>) -> Bsr<T> {
    let values = a.values().iter().map(|v| T::from_f64(v.to_f64())).collect();
    Bsr::try_new(a.rows(), a.cols(), a.block_size(), a.row_ptr().to_vec(), a.col_idx().to_vec(), values).unwrap()
}

/// The kernel family a plan's kernel was chosen from (panics on a plan that does not know it: a launch of a given
/// kernel).
pub fn family(plan: &LaunchPlan) -> KernelFamily {
    plan.choice.unwrap_or_else(|| panic!("{plan}: no kernel family")).0
}

/// Whether the plan runs an sm_90a kernel (TMA + wgmma).
pub fn is_sm90(plan: &LaunchPlan) -> bool {
    matches!(family(plan), KernelFamily::Hopper | KernelFamily::HopperShort)
}

/// The longest block row of `a`, in blocks.
pub fn longest(a: &Bsr<f16>) -> usize {
    a.row_ptr().windows(2).map(|w| (w[1] - w[0]) as usize).max().unwrap_or(0)
}

/// Whether two matrices hold the same bits in every element (padding included).
pub fn same_bits<T: Scalar>(x: &Matrix<T>, y: &Matrix<T>) -> bool {
    x.as_slice().iter().zip(y.as_slice()).all(|(p, q)| p.to_f64().to_bits() == q.to_f64().to_bits())
}

/// The device address of a cudarc slice on `stream` (the caller's memory, as a framework would hand it over).
pub fn addr<T>(stream: &Arc<CudaStream>, s: &CudaSlice<T>) -> u64 {
    let (p, _record) = s.device_ptr(stream);
    p
}

/// `v` copied to a new device buffer on `stream` (the caller's memory; panics on an error).
pub fn htod<T: cudarc::driver::DeviceRepr>(stream: &Arc<CudaStream>, v: &[T]) -> CudaSlice<T> {
    stream.clone_htod(v).unwrap()
}

/// A's arrays as a framework would hold them (64-bit indices, as PyTorch's), uploaded on a stream, for raw views
/// (`BsrView::from_raw`) that know nothing of their rows unless given a `RowSchedule`.
pub struct RawBsr<T: InputElement = f16> {
    values: CudaSlice<T>,
    row_ptr: CudaSlice<i64>,
    col_idx: CudaSlice<i64>,
    shape: (usize, usize, usize, usize),
}

impl<T: InputElement> RawBsr<T> {
    /// `a`'s values and structure (indices widened to i64) uploaded on `stream`.
    pub fn upload(stream: &Arc<CudaStream>, a: &Bsr<T>) -> RawBsr<T> {
        let wide = |v: &[u32]| v.iter().map(|&x| i64::from(x)).collect::<Vec<_>>();
        let col = if a.col_idx().is_empty() { vec![0] } else { wide(a.col_idx()) };
        let values = if a.values().is_empty() { vec![T::from_f64(0.0)] } else { a.values().to_vec() };
        RawBsr {
            values: stream.clone_htod(&values).unwrap(),
            row_ptr: stream.clone_htod(&wide(a.row_ptr())).unwrap(),
            col_idx: stream.clone_htod(&col).unwrap(),
            shape: (a.rows(), a.cols(), a.block_size(), a.nnzb()),
        }
    }

    /// A raw view of the arrays (no schedule).
    pub fn view<'a>(&'a self, stream: &Arc<CudaStream>) -> BsrView<'a, T> {
        let arrays = BsrArrays {
            values: addr(stream, &self.values),
            row_ptr: addr(stream, &self.row_ptr),
            col_idx: addr(stream, &self.col_idx),
            index: IndexType::I64,
        };
        let (rows, cols, bs, nnzb) = self.shape;
        // SAFETY: the arrays hold a validated Bsr's structure and values, alive for the view's lifetime.
        unsafe { BsrView::from_raw(arrays, rows, cols, bs, nnzb) }.unwrap()
    }
}

/// A product of `a` and a random B of `n` columns (C starting random, epilogue `ep`; both drawn from `seed`)
/// launched once on `gpu`'s default stream and checked against every row of the oracle; then six threads launch it
/// `rounds` times each, the odd ones on streams of their own and the even ones on the default stream, each into its
/// own C, and every result must equal the single launch's bit for bit (panics naming the thread and launch
/// otherwise).
pub fn threads_match_one_launch(gpu: &Gpu, a: &Bsr<f16>, n: usize, seed: u64, ep: Epilogue, rounds: usize) {
    let b = &Matrix::<f16>::random(a.cols(), n, seed).unwrap();
    let c0 = &Matrix::<f32>::random(a.rows(), n, seed ^ 0xc).unwrap();
    let (a_d, b_d) = (gpu.upload(a).unwrap(), gpu.upload_matrix(b).unwrap());
    let mut c_d = gpu.upload_matrix(c0).unwrap();
    gpu.spmm(&a_d, &b_d, &mut c_d, ep).unwrap();
    let want = c_d.to_host().unwrap();
    let report = Expected::compute(a, b, c0, ep, RowSample::All, |_, _| {}).unwrap().check(&want);
    assert!(report.passed(), "single-threaded reference: {report}");
    let (a_d, b_d, want) = (&a_d, &b_d, &want);
    std::thread::scope(|scope| {
        for t in 0..6 {
            scope.spawn(move || {
                let own = (t % 2 == 1).then(|| gpu.new_stream().unwrap());
                for i in 0..rounds {
                    let mut c = gpu.upload_matrix(c0).unwrap();
                    match &own {
                        Some(stream) => gpu.spmm_on(stream, a_d, b_d, &mut c, ep).unwrap(),
                        None => gpu.spmm(a_d, b_d, &mut c, ep).unwrap(),
                    }
                    let got = c.to_host().unwrap();
                    let same = got.as_slice().iter().zip(want.as_slice()).all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(same, "thread {t} launch {i} (own stream: {}) differs", own.is_some());
                }
            });
        }
    });
}

/// One product on `gpu` of `a` and a random B of `n` columns against every row of the f64 oracle, with
/// `C = alpha * A @ B + beta * C`: C poisoned with NaN (beta = 0: it must not be read) or random (its padding
/// NaN). Returns C and the plan the launch ran, after checking that it is the plan `Gpu::plan` predicted
/// (predicted == ran), or the failure with `ctx`. `gpu` must be the test's own ([`own_gpu`]).
pub fn check_planned<TC: OutputElement>(
    gpu: &Gpu,
    a: &Bsr<f16>,
    n: usize,
    (alpha, beta): (f32, f32),
    seed: u64,
    ctx: &str,
) -> Result<(Matrix<TC>, LaunchPlan), String> {
    let (m, k) = (a.rows(), a.cols());
    let b = Matrix::<f16>::random(k, n, seed ^ 0xb).unwrap();
    let ld = n.next_multiple_of(16 / std::mem::size_of::<TC>());
    let c0 = if beta == 0.0 {
        Matrix::<TC>::filled(m, n, ld, TC::from_f64(f64::NAN)).unwrap()
    } else {
        Matrix::<TC>::random(m, n, seed ^ 0xc).unwrap().with_ld(ld, TC::from_f64(f64::NAN)).unwrap()
    };
    let ep = Epilogue::new(alpha, beta);
    let expected = Expected::compute(a, &b, &c0, ep, RowSample::All, |_, _| {}).map_err(|e| e.to_string())?;
    let (a_d, b_d) = (gpu.upload(a).unwrap(), gpu.upload_matrix(&b).unwrap());
    let mut c_d = gpu.upload_matrix(&c0).unwrap();
    let plan = planned_spmm(gpu, &a_d, &b_d, &mut c_d, ep).map_err(|e| format!("{ctx}: {e}"))?;
    let got = c_d.to_host().unwrap();
    let report = expected.check(&got);
    if !report.passed() {
        return Err(format!("{ctx} {} out: {report}\nplan: {plan}", TC::NAME));
    }
    Ok((got, plan))
}

/// An exact-integer case's operands (every product and sum exact in f32): A of `pattern` with blocks of `bs` and
/// values in -4..=4, B (`k x n`) likewise, and C: NaN when `beta == 0` (it must not be read, and every element
/// must be written), else integers in -4..=4; C's leading dimension is rounded up to 16 bytes, its padding NaN.
pub fn exact_operands(
    pattern: Pattern,
    (m, k, n): (usize, usize, usize),
    bs: usize,
    density: f64,
    beta: f32,
    seed: u64,
) -> (Bsr<f16>, Matrix<f16>, Matrix<f32>) {
    let a: Bsr<f16> = sparsek::format::generate_int(pattern, m, k, bs, density, seed, 4).unwrap();
    let (b, c0) = exact_b_c((m, k, n), beta, seed);
    (a, b, c0)
}

/// The B and C of [`exact_operands`] for an A of `m x k` (one built otherwise): B (`k x n`) integers in -4..=4,
/// C NaN when `beta == 0`, else integers in -4..=4, its leading dimension rounded up to 16 bytes, padding NaN.
pub fn exact_b_c((m, k, n): (usize, usize, usize), beta: f32, seed: u64) -> (Matrix<f16>, Matrix<f32>) {
    let b = Matrix::<f16>::random_int(k, n, 4, seed ^ 1).unwrap();
    let ld = n.next_multiple_of(4);
    let c0 = if beta == 0.0 {
        Matrix::<f32>::filled(m, n, ld, f32::NAN).unwrap()
    } else {
        Matrix::<f32>::random_int(m, n, 4, seed ^ 2).unwrap().with_ld(ld, f32::NAN).unwrap()
    };
    (b, c0)
}

// Tests of one binary that use the GPU concurrently hold this lock shared; a test that must run alone holds it
// exclusively (see gpu_alone).
static GPU_USE: RwLock<()> = RwLock::new(());

/// The process-wide GPU ([`gpu`]) for a test that uses it alongside the binary's other tests, with its
/// [`gpu_shared`] guard; `None` (after the skip line) without a GPU.
pub fn gpu_for(test: &str) -> Option<(RwLockReadGuard<'static, ()>, &'static Gpu)> {
    let shared = gpu_shared();
    Some((shared, gpu(test)?))
}

/// A GPU of the test's own ([`own_gpu`]) for a test that runs alongside the binary's other tests, with its
/// [`gpu_shared`] guard; `None` (after the skip line) without a GPU.
pub fn own_gpu_for(test: &str, configure: impl FnOnce(Gpu) -> Gpu) -> Option<(RwLockReadGuard<'static, ()>, Gpu)> {
    let shared = gpu_shared();
    Some((shared, own_gpu(test, configure)?))
}

/// Shared use of the GPU by a test: other tests holding it run alongside, none holding [`gpu_alone`] does. A test
/// that panicked while holding the lock does not poison it.
pub fn gpu_shared() -> RwLockReadGuard<'static, ()> {
    GPU_USE.read().unwrap_or_else(|e| e.into_inner())
}

/// Exclusive use of the GPU by a test: no other test of the binary that holds [`gpu_shared`] runs meanwhile. For
/// a CUDA-graph capture in global mode (while it lasts, other threads' allocations, frees, synchronisations and
/// legacy-stream launches fail with "operation not permitted when stream is capturing", which crashed
/// gpu_reach's parallel runs), and for a test timing one stream against the default stream (other tests' work on
/// the default stream and the CPU time their oracles take made it flaky).
pub fn gpu_alone() -> RwLockWriteGuard<'static, ()> {
    GPU_USE.write().unwrap_or_else(|e| e.into_inner())
}

/// What a captured graph holds: its kernel nodes (function name, grid) and its memory nodes.
#[derive(Debug, Default)]
pub struct GraphNodes {
    /// Kernel nodes: the function's name and the grid's CTAs.
    pub kernels: Vec<(String, u32)>,
    /// Allocation, memset and free nodes, and any other.
    pub allocs: usize,
    pub memsets: usize,
    pub frees: usize,
    pub others: usize,
}

/// The nodes of a captured `graph`, read through the driver (panics on a failed call).
pub fn graph_nodes(graph: &cudarc::driver::CudaGraph) -> GraphNodes {
    let graph = graph.cu_graph();
    let mut count = 0usize;
    // SAFETY: a live graph; a null array asks for the count.
    unsafe { cudarc::driver::sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut count) }.result().unwrap();
    let mut all: Vec<cudarc::driver::sys::CUgraphNode> = vec![std::ptr::null_mut(); count];
    // SAFETY: room for `count` nodes.
    unsafe { cudarc::driver::sys::cuGraphGetNodes(graph, all.as_mut_ptr(), &mut count) }.result().unwrap();
    let mut out = GraphNodes::default();
    for &node in &all[..count] {
        use cudarc::driver::sys::{CUDA_KERNEL_NODE_PARAMS, CUgraphNodeType};
        let mut kind = CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
        // SAFETY: a node of the live graph.
        unsafe { cudarc::driver::sys::cuGraphNodeGetType(node, &mut kind) }.result().unwrap();
        match kind {
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL => {
                // SAFETY: plain C data, filled by the driver for a kernel node.
                let mut params: CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
                unsafe { cudarc::driver::sys::cuGraphKernelNodeGetParams_v2(node, &mut params) }.result().unwrap();
                let mut name: *const std::ffi::c_char = std::ptr::null();
                // SAFETY: the node's function; the driver returns a NUL-terminated name it owns.
                unsafe { cudarc::driver::sys::cuFuncGetName(&mut name, params.func) }.result().unwrap();
                let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned();
                out.kernels.push((name, params.gridDimX));
            }
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_ALLOC => out.allocs += 1,
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMSET => out.memsets += 1,
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_FREE => out.frees += 1,
            _ => out.others += 1,
        }
    }
    out
}

/// The edges of a captured `graph` by the kinds of node they join, counted: (from, to, programmatic) ->
/// edges, each kind a short name (`kernel`, `alloc`, `free`, `memset`, `other`), read through the driver (panics
/// on a failed call).
pub fn graph_edges(
    graph: &cudarc::driver::CudaGraph,
) -> std::collections::BTreeMap<(&'static str, &'static str, bool), usize> {
    use cudarc::driver::sys::{
        CUgraphDependencyType, CUgraphEdgeData, CUgraphNode, CUgraphNodeType, cuGraphGetEdges_v2,
    };
    let graph = graph.cu_graph();
    let kind = |node: CUgraphNode| {
        let mut kind = CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
        // SAFETY: a node of the live graph.
        unsafe { cudarc::driver::sys::cuGraphNodeGetType(node, &mut kind) }.result().unwrap();
        match kind {
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL => "kernel",
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_ALLOC => "alloc",
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_FREE => "free",
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMSET => "memset",
            _ => "other",
        }
    };
    let mut count = 0usize;
    // SAFETY: a live graph; first the count, then arrays of that many entries.
    unsafe { cuGraphGetEdges_v2(graph, std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), &mut count) }
        .result()
        .unwrap();
    let mut from = vec![std::ptr::null_mut(); count];
    let mut to = vec![std::ptr::null_mut(); count];
    // SAFETY: plain C data; the driver fills `count` entries.
    let mut data: Vec<CUgraphEdgeData> = vec![unsafe { std::mem::zeroed() }; count];
    // SAFETY: as above.
    unsafe { cuGraphGetEdges_v2(graph, from.as_mut_ptr(), to.as_mut_ptr(), data.as_mut_ptr(), &mut count) }
        .result()
        .unwrap();
    let mut out = std::collections::BTreeMap::new();
    for i in 0..count {
        let programmatic = data[i].type_ == CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8;
        *out.entry((kind(from[i]), kind(to[i]), programmatic)).or_insert(0) += 1;
    }
    out
}

/// The memory CUDA associates with graphs on `gpu`'s device now (`CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT`, bytes;
/// panics on a failed call).
pub fn graph_memory_used(gpu: &sparsek::gpu::Gpu) -> u64 {
    use cudarc::driver::sys::CUgraphMem_attribute;
    let mut used = 0u64;
    let device = gpu.context().cu_device();
    // SAFETY: a valid device and an output of the attribute's type (a 64-bit integer).
    unsafe {
        cudarc::driver::sys::cuDeviceGetGraphMemAttribute(
            device,
            CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT,
            (&mut used as *mut u64).cast(),
        )
    }
    .result()
    .unwrap();
    used
}
