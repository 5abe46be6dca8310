//! The reach of the GPU path against the f64 oracle: borrowed device operands (raw pointers and cudarc slices),
//! 32- and 64-bit indices, f16 and bf16 inputs, f32 and 16-bit outputs, every B and C layout, the fused epilogue
//! (bias, each activation, alpha/beta), on the caller's stream; outputs poisoned before every launch; the caller's
//! buffers compared bit for bit after it (untouched outside C, never freed); the device-side structure check; a
//! stream-ordering test and a CUDA-graph capture test. Without a GPU every test prints a skip line
//! (SPARSEK_REQUIRE_GPU=1 makes that a failure). SPARSEK_GPU_CASES sets the number of random cases (default 300).

use std::sync::Arc;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUresult, CUstreamCaptureMode};
use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr};
use proptest::prelude::*;
use sparsek::check::{Expected, RowSample};
use sparsek::format::{Pattern, generate, generate_int};
use sparsek::gpu::{
    BsrArrays, BsrView, Decomposition, DenseView, DenseViewMut, DeviceElement, Gpu, InType, IndexType, InputElement,
    LaunchPlan, OutType, OutputElement, VectorView,
};
use sparsek::{Activation, Bsr, BsrError, Epilogue, Error, Layout, Matrix, Scalar, bf16, f16};
use sparsek_tests::{
    Case, Rows, addr, gpu, gpu_cases, gpu_for, hopper_enabled, htod, is_sm90, longest, own_gpu_for, plan_in, plan_of,
};

/// One random case: the product (`pad` pads B's and C's leading dimensions) and how the caller hands it over.
#[derive(Clone, Debug)]
struct ReachCase {
    product: Case,
    b_layout: Layout,
    c_layout: Layout,
    index: IndexType,
    bias: bool,
    activation: Activation,
    checked_structure: bool,
    /// The view carries its block rows' schedule (`Gpu::row_schedule`): longest rows first and the longest known,
    /// as an uploaded matrix's.
    scheduled: bool,
}

fn layout() -> impl Strategy<Value = Layout> {
    prop::sample::select(vec![Layout::RowMajor, Layout::ColMajor])
}

fn case_strategy() -> impl Strategy<Value = ReachCase> {
    (
        (prop::sample::select(vec![16usize, 32, 64, 128]), 0usize..=5, 1usize..=5),
        prop_oneof![Just(1usize), Just(7), Just(8), Just(17), Just(129), 1usize..300],
        prop::sample::select(vec![0usize, 8, 24]),
        (prop_oneof![Just(1.0f64), 0.0f64..=1.0], prop::sample::select(vec![Pattern::Uniform, Pattern::Skewed])),
        (layout(), layout(), prop::sample::select(vec![IndexType::U32, IndexType::I64])),
        (any::<bool>(), prop::sample::select(Activation::ALL.to_vec())),
        (prop::sample::select(vec![1.0f32, -0.5]), prop::sample::select(vec![0.0f32, 1.0, -0.5])),
        (any::<bool>(), any::<u64>()),
    )
        .prop_map(
            |(
                (bs, block_rows, block_cols),
                n,
                pad,
                (density, pattern),
                (b_layout, c_layout, index),
                (bias, activation),
                (alpha, beta),
                (checked_structure, seed),
            )| ReachCase {
                product: Case { bs, block_rows, block_cols, n, pad, density, pattern, alpha, beta, seed },
                b_layout,
                c_layout,
                index,
                bias,
                activation,
                checked_structure,
                scheduled: seed % 3 == 0,
            },
        )
}

/// A logical `rows x cols` matrix laid out in `layout` with leading dimension `ld`, every element outside the
/// matrix (padding) set to `pad`.
fn lay_out<T: Scalar>(m: &Matrix<T>, layout: Layout, ld: usize, extra: usize, pad: T) -> Vec<T> {
    let outer = if layout == Layout::RowMajor { m.rows() } else { m.cols() };
    let mut v = vec![pad; (outer * ld).max(1) + extra];
    for r in 0..m.rows() {
        for c in 0..m.cols() {
            let i = if layout == Layout::RowMajor { r * ld + c } else { c * ld + r };
            v[i] = m.get(r, c);
        }
    }
    v
}

fn dtoh<T: DeviceRepr + Scalar>(stream: &Arc<CudaStream>, s: &CudaSlice<T>) -> Vec<T> {
    let mut v = vec![T::from_f64(0.0); s.len()];
    stream.memcpy_dtoh(s, &mut v[..]).unwrap();
    stream.synchronize().unwrap();
    v
}

fn bits<T: Scalar>(v: &[T]) -> Vec<u64> {
    v.iter().map(|x| x.to_f64().to_bits()).collect()
}

/// The device copy of a BSR structure the way its owner would hold it: u32 or int64 indices.
struct DeviceStructure {
    row_ptr32: Option<CudaSlice<u32>>,
    col_idx32: Option<CudaSlice<u32>>,
    row_ptr64: Option<CudaSlice<i64>>,
    col_idx64: Option<CudaSlice<i64>>,
}

impl DeviceStructure {
    fn upload(stream: &Arc<CudaStream>, row_ptr: &[u32], col_idx: &[u32], index: IndexType) -> Self {
        let col = if col_idx.is_empty() { vec![0] } else { col_idx.to_vec() };
        match index {
            IndexType::U32 => DeviceStructure {
                row_ptr32: Some(htod(stream, row_ptr)),
                col_idx32: Some(htod(stream, &col)),
                row_ptr64: None,
                col_idx64: None,
            },
            IndexType::I64 => DeviceStructure {
                row_ptr32: None,
                col_idx32: None,
                row_ptr64: Some(htod(stream, &row_ptr.iter().map(|&x| x as i64).collect::<Vec<_>>())),
                col_idx64: Some(htod(stream, &col.iter().map(|&x| x as i64).collect::<Vec<_>>())),
            },
        }
    }

    fn arrays(&self, stream: &Arc<CudaStream>, values: u64) -> BsrArrays {
        match (&self.row_ptr32, &self.col_idx32, &self.row_ptr64, &self.col_idx64) {
            (Some(r), Some(c), _, _) => {
                BsrArrays { values, row_ptr: addr(stream, r), col_idx: addr(stream, c), index: IndexType::U32 }
            }
            (_, _, Some(r), Some(c)) => {
                BsrArrays { values, row_ptr: addr(stream, r), col_idx: addr(stream, c), index: IndexType::I64 }
            }
            _ => unreachable!("test setup"),
        }
    }
}

/// Runs one case through `spmm_raw` over the caller's memory and compares with the oracle; Err describes the
/// failure with everything needed to reproduce it. Returns, for an A of at least one row (a launch without rows runs
/// nothing), the plan `Gpu::plan_view` predicted for the launch and the plan `Gpu::last_plan` holds after it (the
/// launch's where no other thread launches on `gpu`).
fn run_case<TA: InputElement, TC: OutputElement>(
    gpu: &Gpu,
    case: &ReachCase,
) -> Result<Option<(LaunchPlan, Option<LaunchPlan>)>, String> {
    let p = &case.product;
    let (m, k, n) = p.dims();
    let ctx = format!("{case:?} in {} out {}", TA::NAME, TC::NAME);
    let (a, b) = (p.a::<TA>()?, p.b::<TA>());
    let bias_host: Vec<TA> = Matrix::<TA>::random(1, m.max(1), p.seed ^ 0xd).unwrap().row(0)[..m].to_vec();
    let bias = case.bias.then_some(&bias_host[..]);
    let c0 = {
        let mut c = Matrix::<TC>::filled(m, n, n.max(1), TC::from_f64(f64::NAN)).unwrap();
        if p.beta != 0.0 {
            c = Matrix::<TC>::random(m, n, p.seed ^ 0xc).unwrap();
        }
        c
    };
    let ep = Epilogue::new(p.alpha, p.beta).with_activation(case.activation);
    let expected = Expected::compute_with_bias(&a, &b, &c0, ep, bias, RowSample::All, |_, _| {})
        .map_err(|e| format!("{ctx}: oracle: {e}"))?;

    // The caller's memory: plain cudarc allocations, padded leading dimensions, NaN in every padding element and
    // in a guard region after C.
    let stream = gpu.stream();
    let align = |x: usize, t: usize| (x + p.pad).max(1).next_multiple_of(16 / t);
    let ldb = align(if case.b_layout == Layout::RowMajor { n } else { k }, std::mem::size_of::<TA>());
    let ldc = align(if case.c_layout == Layout::RowMajor { n } else { m }, std::mem::size_of::<TC>());
    let guard = 64;
    let nan_a = TA::from_f64(f64::NAN);
    let b_host = lay_out(&b, case.b_layout, ldb, 0, nan_a);
    let c_host = lay_out(&c0, case.c_layout, ldc, guard, TC::from_f64(f64::NAN));
    let values_host = if a.values().is_empty() { vec![TA::from_f64(0.0)] } else { a.values().to_vec() };
    let values_d = htod(stream, &values_host);
    let structure = DeviceStructure::upload(stream, a.row_ptr(), a.col_idx(), case.index);
    let b_d = htod(stream, &b_host);
    let bias_d = htod(stream, &bias_host.iter().copied().chain([nan_a]).collect::<Vec<_>>());
    let mut c_d = htod(stream, &c_host);

    let arrays = structure.arrays(stream, addr(stream, &values_d));
    // SAFETY: the arrays hold the sizes stated and live until the end of this function; the structure comes from
    // a validated Bsr (and is checked again on the device in half the cases).
    let a_v = unsafe {
        if case.checked_structure {
            BsrView::<TA>::from_raw_checked(gpu, arrays, m, k, p.bs, a.nnzb())
        } else {
            BsrView::<TA>::from_raw(arrays, m, k, p.bs, a.nnzb())
        }
    }
    .map_err(|e| format!("{ctx}: {e}"))?;
    let schedule =
        case.scheduled.then(|| gpu.row_schedule(a.row_ptr())).transpose().map_err(|e| format!("{ctx}: {e}"))?;
    let a_v = match &schedule {
        Some(s) => a_v.with_schedule(s).map_err(|e| format!("{ctx}: {e}"))?,
        None => a_v,
    };
    // B through a raw pointer, C through a cudarc slice, the bias through a raw pointer.
    // SAFETY: b_d holds the span (padded to ldb), lives until the end, and nothing else writes it.
    let b_v = unsafe { DenseView::<TA>::from_raw(addr(stream, &b_d), k, n, ldb, case.b_layout) }
        .map_err(|e| format!("{ctx}: {e}"))?;
    // SAFETY: bias_d holds m + 1 elements.
    let bias_v = unsafe { VectorView::<TA>::from_raw(addr(stream, &bias_d), m) }.unwrap();
    let c_len = c_host.len();
    let layouts = (case.b_layout, case.c_layout);
    let predicted = (m > 0)
        .then(|| gpu.plan_view::<TA, TC>(&a_v, n, layouts, ep))
        .transpose()
        .map_err(|e| format!("{ctx}: plan: {e}"))?;
    {
        let mut c_v = DenseViewMut::<TC>::from_cuda_slice(&mut c_d, m, n, ldc, case.c_layout)
            .map_err(|e| format!("{ctx}: {e}"))?;
        // SAFETY: the default stream is this Gpu's; every buffer is live and used by nothing else meanwhile.
        unsafe { gpu.spmm_raw(stream.cu_stream(), &a_v, &b_v, &mut c_v, case.bias.then_some(&bias_v), ep) }
            .map_err(|e| format!("{ctx}: launch: {e}"))?;
    }
    let ran = gpu.last_plan();
    let got = dtoh(stream, &c_d);
    assert_eq!(got.len(), c_len);
    let at = |r: usize, c: usize| if case.c_layout == Layout::RowMajor { r * ldc + c } else { c * ldc + r };
    let report = expected.check_with(n, |r, c| got[at(r, c)].to_f64());
    if !report.passed() {
        return Err(format!("{ctx}: {report}"));
    }
    // Outside C's elements nothing changed (padding and the guard region keep their NaN bits).
    let mut inside = vec![false; c_len];
    for r in 0..m {
        for c in 0..n {
            inside[at(r, c)] = true;
        }
    }
    if let Some(i) = (0..c_len).find(|&i| !inside[i] && got[i].to_f64().to_bits() != c_host[i].to_f64().to_bits()) {
        return Err(format!("{ctx}: C's memory outside the matrix was written at element {i}: {:?}", got[i]));
    }
    // The inputs are untouched, bit for bit.
    if bits(&dtoh(stream, &b_d)) != bits(&b_host) || bits(&dtoh(stream, &values_d)) != bits(&values_host) {
        return Err(format!("{ctx}: an input buffer changed"));
    }
    Ok(predicted.map(|p| (p, ran)))
}

fn property<TA: InputElement, TC: OutputElement>(test: &str) {
    let Some(gpu) = gpu(test) else { return };
    let config = ProptestConfig { cases: gpu_cases(300), failure_persistence: None, ..ProptestConfig::default() };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result =
        runner.run(&case_strategy(), |case| run_case::<TA, TC>(gpu, &case).map(drop).map_err(TestCaseError::fail));
    if let Err(e) = result {
        panic!("{test}: {e}");
    }
}

/// One test per input and output type, each running [`property`] with the GPU shared.
macro_rules! view_properties {
    ($($name:ident: $ta:ty => $tc:ty;)*) => {$(
        #[test]
        fn $name() {
            let _shared = sparsek_tests::gpu_shared();
            property::<$ta, $tc>(stringify!($name));
        }
    )*};
}

view_properties! {
    views_f16_in_f32_out_match_oracle: f16 => f32;
    views_f16_in_f16_out_match_oracle: f16 => f16;
    views_bf16_in_f32_out_match_oracle: bf16 => f32;
    views_bf16_in_bf16_out_match_oracle: bf16 => bf16;
}

/// Owned buffers with bf16 inputs (`Gpu::upload` of a `Bsr<bf16>`, `Gpu::spmm`), against the oracle and against
/// the CPU backend, both outputs.
#[test]
fn owned_bf16_matches_oracle_and_cpu_backend() {
    let Some((_shared, gpu)) = gpu_for("owned_bf16_matches_oracle_and_cpu_backend") else { return };
    for (bs, seed) in [(16usize, 1u64), (32, 2), (64, 3), (128, 4)] {
        let (m, k, n) = (4 * bs, 3 * bs, 77);
        let a: Bsr<bf16> = generate(Pattern::Skewed, m, k, bs, 0.5, seed).unwrap();
        let b = Matrix::<bf16>::random(k, n, seed ^ 9).unwrap();
        let c0 = Matrix::<f32>::random(m, n, seed ^ 7).unwrap();
        let ep = Epilogue::new(0.5, -1.0).with_activation(Activation::Silu);
        let expected = Expected::compute(&a, &b, &c0, ep, RowSample::All, |_, _| {}).unwrap();
        let (a_d, b_d) = (gpu.upload(&a).unwrap(), gpu.upload_matrix(&b).unwrap());
        let mut c_d = gpu.upload_matrix(&c0).unwrap();
        gpu.spmm(&a_d, &b_d, &mut c_d, ep).unwrap();
        let got = c_d.to_host().unwrap();
        let report = expected.check(&got);
        assert!(report.passed(), "bs {bs}: {report}");
        let mut cpu = c0.clone();
        sparsek::cpu::spmm(&a, &b, &mut cpu, ep).unwrap();
        assert!(expected.check(&cpu).passed(), "bs {bs}: CPU backend");
        // bf16 output, beta == 0: C poisoned, never read.
        let c0 = Matrix::<bf16>::filled(m, n, n, bf16::NAN).unwrap();
        let ep = Epilogue::new(1.0, 0.0).with_activation(Activation::GeluTanh);
        let expected = Expected::compute(&a, &b, &c0, ep, RowSample::All, |_, _| {}).unwrap();
        let mut c_d = gpu.upload_matrix(&c0).unwrap();
        gpu.spmm(&a_d, &b_d, &mut c_d, ep).unwrap();
        let report = expected.check(&c_d.to_host().unwrap());
        assert!(report.passed(), "bs {bs} bf16 out: {report}");
    }
}

/// Integer-valued operands (exact in bf16 and f16, sums exact in f32): every layout combination, both index
/// widths, a bias and ReLU give bit-identical f32 results to the oracle, and the same bits run after run.
#[test]
fn exact_integer_results_in_every_layout() {
    let Some((_shared, gpu)) = gpu_for("exact_integer_results_in_every_layout") else { return };
    let stream = gpu.stream();
    for bs in [16usize, 32, 64, 128] {
        let (m, k, n) = (3 * bs, 4 * bs, 133);
        let a: Bsr<bf16> = generate_int(Pattern::Uniform, m, k, bs, 0.6, bs as u64, 4).unwrap();
        let b_int: Matrix<bf16> =
            Matrix::from_fn(k, n, |r, c| bf16::from_f32(((r * 7 + c * 3) % 9) as f32 - 4.0)).unwrap();
        let bias: Vec<bf16> = (0..m).map(|r| bf16::from_f32((r % 5) as f32 - 2.0)).collect();
        let c0 = Matrix::<f32>::zeros(m, n).unwrap();
        let ep = Epilogue::new(1.0, 0.0).with_activation(Activation::Relu);
        let want = sparsek::cpu::reference_with_bias(&a, &b_int, &c0, ep, Some(&bias)).unwrap();
        for b_layout in [Layout::RowMajor, Layout::ColMajor] {
            for c_layout in [Layout::RowMajor, Layout::ColMajor] {
                for index in [IndexType::U32, IndexType::I64] {
                    let ldb = if b_layout == Layout::RowMajor { n.next_multiple_of(8) } else { k };
                    let ldc = if c_layout == Layout::RowMajor { n.next_multiple_of(4) } else { m };
                    let values_d = htod(stream, a.values());
                    let structure = DeviceStructure::upload(stream, a.row_ptr(), a.col_idx(), index);
                    let b_d = htod(stream, &lay_out(&b_int, b_layout, ldb, 0, bf16::NAN));
                    let bias_d = htod(stream, &bias);
                    let mut runs = Vec::new();
                    for _ in 0..2 {
                        let mut c_d = htod(stream, &lay_out(&c0, c_layout, ldc, 0, f32::NAN));
                        let arrays = structure.arrays(stream, addr(stream, &values_d));
                        // SAFETY: valid structure from a Bsr; buffers live until the end of the iteration.
                        let a_v = unsafe { BsrView::<bf16>::from_raw(arrays, m, k, bs, a.nnzb()) }.unwrap();
                        let b_v = DenseView::from_cuda_slice(&b_d, k, n, ldb, b_layout).unwrap();
                        let bias_v = VectorView::from_cuda_slice(&bias_d).unwrap();
                        let mut c_v = DenseViewMut::from_cuda_slice(&mut c_d, m, n, ldc, c_layout).unwrap();
                        // SAFETY: this Gpu's default stream; nothing else uses the buffers.
                        unsafe { gpu.spmm_raw(stream.cu_stream(), &a_v, &b_v, &mut c_v, Some(&bias_v), ep) }.unwrap();
                        runs.push(dtoh(stream, &c_d));
                    }
                    let what = format!("bs {bs} B {b_layout:?} C {c_layout:?} {index:?}");
                    assert_eq!(bits(&runs[0]), bits(&runs[1]), "{what}: results differ run to run");
                    for r in 0..m {
                        for c in 0..n {
                            let i = if c_layout == Layout::RowMajor { r * ldc + c } else { c * ldc + r };
                            assert_eq!(runs[0][i] as f64, want.get(r, c), "{what}: ({r}, {c})");
                        }
                    }
                }
            }
        }
    }
}

/// The case of the `i`-th pair of B and C layouts in the every-layout tests: C's leading dimension padded by 8 on odd
/// ones, u32 indices on even ones and i64 on odd ones, a bias but on the second, an activation cycling with `i` and N,
/// alpha 1.5, beta 0, the device structure check on the fourth, the row schedule on odd ones.
fn layout_case(
    i: usize,
    (b_layout, c_layout): (Layout, Layout),
    (bs, block_rows, block_cols, n): (usize, usize, usize, usize),
    (density, pattern): (f64, Pattern),
    seed: u64,
) -> ReachCase {
    let pad = 8 * (i % 2);
    ReachCase {
        product: Case { bs, block_rows, block_cols, n, pad, density, pattern, alpha: 1.5, beta: 0.0, seed },
        b_layout,
        c_layout,
        index: if i.is_multiple_of(2) { IndexType::U32 } else { IndexType::I64 },
        bias: i != 1,
        activation: Activation::ALL[(i + n) % Activation::ALL.len()],
        checked_structure: i == 3,
        scheduled: i % 2 == 1,
    }
}

/// Every pair of B and C layouts.
fn b_and_c_layouts() -> impl Iterator<Item = (Layout, Layout)> {
    [Layout::RowMajor, Layout::ColMajor].into_iter().flat_map(|b| [Layout::RowMajor, Layout::ColMajor].map(|c| (b, c)))
}

/// Runs `case` with each input and output type (f16 and bf16 in, f32 and the input's 16-bit type out) on `gpu`, a
/// Gpu of the test's own: each launch must run the plan `Gpu::plan_view` predicted, which is returned with its types.
fn run_every_type(gpu: &Gpu, case: &ReachCase) -> [(InType, OutType, LaunchPlan); 4] {
    fn planned<TA: InputElement, TC: OutputElement>(gpu: &Gpu, case: &ReachCase) -> (InType, OutType, LaunchPlan) {
        let planned = run_case::<TA, TC>(gpu, case).unwrap_or_else(|e| panic!("{e}"));
        let (predicted, ran) = planned.unwrap_or_else(|| panic!("{case:?}: no rows, no launch"));
        assert_eq!(ran.as_ref(), Some(&predicted), "{case:?} in {} out {}: predicted == ran", TA::NAME, TC::NAME);
        (TA::IN_TYPE, TC::OUT_TYPE, predicted)
    }
    [
        planned::<f16, f32>(gpu, case),
        planned::<f16, f16>(gpu, case),
        planned::<bf16, f32>(gpu, case),
        planned::<bf16, bf16>(gpu, case),
    ]
}

/// The bs-128 mid tile of 64 columns (`_n64`, split rows; only on many blocks: 4 per SM today) in every input and
/// output type and every B and C layout, with 64-bit indices, bias, an activation and beta, against every row of the
/// oracle through the caller's memory (`run_case`: padding poisoned and checked); every launch runs that tile, the
/// plan `Gpu::plan_view` predicted.
#[test]
fn bs128_tile_of_64_in_every_layout() {
    let Some((_shared, gpu)) = own_gpu_for("bs128_tile_of_64_in_every_layout", |g| g) else { return };
    let gpu = &gpu;
    let min_blocks = 4 * gpu.info().sm_count as usize;
    let (block_rows, density) = (6usize, 0.75);
    let block_cols = (min_blocks * 6 / 5).div_ceil(block_rows) * 4 / 3 + 1;
    let mut seed = 0x6400;
    for (i, (b_layout, c_layout)) in b_and_c_layouts().enumerate() {
        for n in [64usize, 41] {
            seed += 1;
            let pattern = if n == 64 { Pattern::Uniform } else { Pattern::Skewed };
            let mut case = ReachCase {
                bias: true,
                activation: Activation::ALL[i % Activation::ALL.len()],
                checked_structure: false,
                ..layout_case(i, (b_layout, c_layout), (128, block_rows, block_cols, n), (density, pattern), seed)
            };
            (case.product.alpha, case.product.beta) = (1.0, if n == 64 { 0.0 } else { -0.5 });
            for (input, out, plan) in run_every_type(gpu, &case) {
                assert!(plan.kernel.ends_with("_n64"), "{case:?} {input:?} -> {out:?}: {plan}");
            }
        }
    }
}

/// bs 64's tile of 64 columns cannot split rows, and its flat block list serves only f16 inputs on a row-major B
/// with an f32 C: for every other type and layout a dominating row (over 4x the mean, known from the view's
/// schedule) takes the tile of 32 (the plan's `skew_tile`), which splits it over both N tiles. 33 to 64 columns,
/// every input and output type, every B and C layout, u32 and i64 indices, bias, activations and beta, against every
/// row of the oracle through the caller's memory (`run_case`: padding poisoned and checked); every launch runs the
/// plan `Gpu::plan_view` predicted.
#[test]
fn bs64_dominating_row_takes_the_tile_of_32_in_every_layout() {
    let Some((_shared, gpu)) = own_gpu_for("bs64_dominating_row_takes_the_tile_of_32_in_every_layout", |g| g) else {
        return;
    };
    let gpu = &gpu;
    let (bs, block_rows, block_cols, density) = (64usize, 20usize, 90usize, 0.1);
    let mut seed = 0x6432;
    for (i, (b_layout, c_layout)) in b_and_c_layouts().enumerate() {
        for n in [33usize, 64] {
            seed += 1;
            let mut case = ReachCase {
                scheduled: true,
                ..layout_case(
                    i,
                    (b_layout, c_layout),
                    (bs, block_rows, block_cols, n),
                    (density, Pattern::Skewed),
                    seed,
                )
            };
            case.product.beta = if n == 33 { 0.0 } else { -0.5 };
            let (m, k) = (block_rows * bs, block_cols * bs);
            let a: Bsr<f16> = generate(Pattern::Skewed, m, k, bs, density, seed).unwrap();
            let longest = longest(&a);
            assert!(longest > 4 * a.nnzb().div_ceil(block_rows), "{case:?}: longest {longest}");
            for (input, out, plan) in run_every_type(gpu, &case) {
                let ctx = format!("{case:?} {input:?} -> {out:?}: {plan}");
                if (input, b_layout, out) == (InType::F16, Layout::RowMajor, OutType::F32) {
                    // The types of the flat list: the tile of 64 (or its flat list) is kept.
                    let flat = matches!(plan.decomposition, Decomposition::FlatList { .. });
                    assert!(!plan.skew_tile && (flat || plan.kernel.ends_with("_n64")), "{ctx}");
                } else {
                    let split = matches!(plan.decomposition, Decomposition::SplitRows { .. });
                    assert!(plan.skew_tile && plan.kernel.ends_with("_n32") && split, "{ctx}");
                }
            }
        }
    }
}

/// The bs-16 and bs-32 mid tiles (`_n32`, 17 to 64 columns, only on many block rows: 3 per SM today) in every input
/// and output type and every B and C layout, with u32 and i64 indices, bias, activations and beta, skewed rows too
/// (split: one row over 4x the mean and longer than a part of 128 KiB of A), against every row of the oracle through
/// the caller's memory, each launch running the plan `Gpu::plan_view` predicted; on fewer rows the launch takes the
/// narrow tile.
#[test]
fn small_block_mid_tiles_in_every_layout() {
    let Some((_shared, gpu)) = own_gpu_for("small_block_mid_tiles_in_every_layout", |g| g) else { return };
    let gpu = &gpu;
    let block_rows = 3 * gpu.info().sm_count as usize;
    let mut seed = 0x3200;
    for bs in [16usize, 32] {
        let few = block_rows - 1;
        let a: Bsr<f16> = generate(Pattern::Uniform, few * bs, 8 * bs, bs, 0.5, 0x31ff).unwrap();
        let narrow = plan_of::<f32>(gpu, &a, 32, Epilogue::default());
        assert!(narrow.kernel.ends_with("_n16"), "bs {bs}, {few} block rows: {narrow}");
        for (i, (b_layout, c_layout)) in b_and_c_layouts().enumerate() {
            for (n, pattern) in [(32usize, Pattern::Uniform), (17, Pattern::Skewed), (64, Pattern::Skewed)] {
                seed += 1;
                // Skewed: a long first row needs many block columns (at density 0.1, rows of 10 blocks on average).
                let (block_cols, density) = if pattern == Pattern::Skewed { (100usize, 0.1) } else { (6, 0.5) };
                let mut case = ReachCase {
                    scheduled: i == 2,
                    ..layout_case(i, (b_layout, c_layout), (bs, block_rows, block_cols, n), (density, pattern), seed)
                };
                case.product.beta = if pattern == Pattern::Uniform { 0.0 } else { -0.5 };
                let (m, k) = (block_rows * bs, block_cols * bs);
                let a: Bsr<f16> = generate(pattern, m, k, bs, density, seed).unwrap();
                let longest = longest(&a);
                // The auto split: one row over 4x the mean and longer than a part (128 KiB of A: 64 blocks at bs
                // 32, 256 at bs 16), on one N tile or up to 64 columns; the longest row known (uploaded).
                let expect = pattern == Pattern::Skewed && longest * bs * bs * 2 > 128 << 10;
                let ep = Epilogue::default();
                let uploaded = [
                    (InType::F16, plan_in::<f16, f32>(gpu, &a, Rows::Uploaded, n, ((b_layout, c_layout), ep))),
                    (InType::Bf16, plan_in::<bf16, f32>(gpu, &a, Rows::Uploaded, n, ((b_layout, c_layout), ep))),
                ];
                for (input, plan) in &uploaded {
                    let split = matches!(plan.decomposition, Decomposition::SplitRows { .. });
                    assert!(plan.kernel.ends_with("_n32"), "{case:?} {input:?}: {plan}");
                    assert_eq!(split, expect, "{case:?} {input:?}: longest {longest}: {plan}");
                }
                for (input, out, plan) in run_every_type(gpu, &case) {
                    if out != OutType::F32 {
                        continue;
                    }
                    assert!(plan.kernel.ends_with("_n32"), "{case:?} {input:?}: launched {plan}");
                    // A view with its schedule launches what the uploaded matrix does.
                    let upload = &uploaded.iter().find(|(i, _)| *i == input).expect("an uploaded plan").1;
                    if case.scheduled {
                        assert_eq!(plan.decomposition, upload.decomposition, "{case:?}: view {plan}, upload {upload}");
                    }
                }
            }
        }
    }
}

/// A row-major B whose N is a whole number of 64-column chunks: the sm_90a kernels load it through a rank-3 tensor
/// map (64 columns x K rows x N / 64 chunks, one TMA copy per stage; host/src/gpu/tma.rs), whose row stride is the
/// leading dimension and whose chunk stride is 128 bytes. N = 320 ends in a partial N tile of one chunk (the map's
/// out-of-bounds chunks must read as zero), N = 512 is two whole tiles; each with B's leading dimension N, N + 8
/// and N + 64 (NaN padding the map must step over). Integer-valued operands: the f32 results must equal the oracle
/// bit for bit, and C's own padding (poisoned with NaN) must stay as it was. On a GPU without the sm_90a module
/// (or with SPARSEK_TEST_MODULE=sm80) the same layouts run through the sm_80 kernels.
#[test]
fn row_major_b_in_64_column_chunks() {
    let Some((_shared, gpu)) = gpu_for("row_major_b_in_64_column_chunks") else { return };
    let stream = gpu.stream();
    for bs in [64usize, 128] {
        let (m, k) = (3 * bs, 5 * bs);
        let a: Bsr<f16> = generate_int(Pattern::Skewed, m, k, bs, 0.6, 0x3c ^ bs as u64, 4).unwrap();
        for n in [320usize, 512] {
            let sm90 = is_sm90(&plan_of::<f32>(gpu, &a, n, Epilogue::new(1.0, 0.0)));
            if gpu.info().compute_capability == (9, 0) && gpu.hopper_module().is_some() && hopper_enabled() {
                assert!(sm90, "bs {bs} n {n}: expected an sm_90a kernel to serve this product");
            }
            let b_int: Matrix<f16> =
                Matrix::from_fn(k, n, |r, c| f16::from_f32(((r * 5 + c * 11) % 7) as f32 - 3.0)).unwrap();
            let c0 = Matrix::<f32>::zeros(m, n).unwrap();
            let ep = Epilogue::new(1.0, 0.0);
            let want = sparsek::cpu::reference(&a, &b_int, &c0, ep).unwrap();
            let values_d = htod(stream, a.values());
            let structure = DeviceStructure::upload(stream, a.row_ptr(), a.col_idx(), IndexType::U32);
            for pad in [0usize, 8, 64] {
                let (ldb, ldc) = (n + pad, n + 4);
                let what = format!("bs {bs} n {n} ldb {ldb} (sm_90a: {sm90})");
                let b_d = htod(stream, &lay_out(&b_int, Layout::RowMajor, ldb, 0, f16::NAN));
                // C poisoned whole, with a guard region after it.
                let c_host = vec![f32::NAN; m * ldc + 16];
                let mut c_d = htod(stream, &c_host);
                let arrays = structure.arrays(stream, addr(stream, &values_d));
                // SAFETY: valid structure from a Bsr; the buffers live until the end of the iteration.
                let a_v = unsafe { BsrView::<f16>::from_raw(arrays, m, k, bs, a.nnzb()) }.unwrap();
                let b_v = DenseView::from_cuda_slice(&b_d, k, n, ldb, Layout::RowMajor).unwrap();
                {
                    let mut c_v = DenseViewMut::from_cuda_slice(&mut c_d, m, n, ldc, Layout::RowMajor).unwrap();
                    // SAFETY: this Gpu's default stream; nothing else uses the buffers.
                    unsafe { gpu.spmm_raw(stream.cu_stream(), &a_v, &b_v, &mut c_v, None, ep) }.unwrap();
                }
                let got = dtoh(stream, &c_d);
                for (i, (&g, &before)) in got.iter().zip(&c_host).enumerate() {
                    let (r, c) = (i / ldc, i % ldc);
                    if r < m && c < n {
                        assert_eq!(g as f64, want.get(r, c), "{what}: C({r}, {c})");
                    } else {
                        assert_eq!(g.to_bits(), before.to_bits(), "{what}: C's padding written at element {i}");
                    }
                }
            }
        }
    }
}

/// A column-major 16-bit C written by an sm_90a kernel (what `sparsek.linear` writes: y = x W^T) is staged
/// transposed in shared memory and stored through a tensor map (the plan's `c_tma`); an f32 one, or one read by
/// beta, from the registers. bs 64 and 128, N of whole and partial 64-column chunks and tiles (300: the last tile's
/// second chunk and piece lie past N; 320; 517), C's leading dimension padded or not, u32 and i64 indices, a bias
/// and each activation, both B layouts, every input and output type against every row of the oracle through the
/// caller's memory (`run_case`: C's padding and a guard region poisoned and checked untouched); each launch runs the
/// plan `Gpu::plan_view` predicted. On a GPU without the sm_90a module the same cases run through the sm_80 kernels.
#[test]
fn column_major_16bit_c_staged_through_a_tensor_map() {
    let Some((_shared, gpu)) = own_gpu_for("column_major_16bit_c_staged_through_a_tensor_map", |g| g) else { return };
    let gpu = &gpu;
    let hopper = gpu.info().compute_capability == (9, 0) && gpu.hopper_module().is_some() && hopper_enabled();
    let mut seed = 0xc01;
    for bs in [64usize, 128] {
        for (i, n) in [300usize, 320, 517].into_iter().enumerate() {
            for b_layout in [Layout::RowMajor, Layout::ColMajor] {
                for beta in [0.0f32, -0.5] {
                    seed += 1;
                    let pattern = if i == 1 { Pattern::Uniform } else { Pattern::Skewed };
                    let mut case = layout_case(i, (b_layout, Layout::ColMajor), (bs, 5, 6, n), (0.6, pattern), seed);
                    case.product.beta = beta;
                    for (input, out, plan) in run_every_type(gpu, &case) {
                        let what = format!("{case:?} {input:?} -> {out:?}: {plan}");
                        if hopper {
                            assert!(is_sm90(&plan), "{what}: expected an sm_90a kernel");
                        }
                        let staged = is_sm90(&plan) && beta == 0.0 && out != OutType::F32;
                        assert_eq!(plan.c_tma, staged, "{what}");
                    }
                }
            }
        }
    }
}

/// The device-side structure check accepts valid structures and names the first bad block row of invalid ones,
/// for 32- and 64-bit indices; the launch then never happens.
#[test]
fn device_structure_check_finds_bad_indices() {
    let Some((_shared, gpu)) = gpu_for("device_structure_check_finds_bad_indices") else { return };
    let stream = gpu.stream();
    let (bs, m, k) = (16usize, 64usize, 64usize);
    let values = htod(stream, &vec![f16::ONE; 5 * bs * bs]);
    let good: (Vec<i64>, Vec<i64>) = (vec![0, 2, 2, 4, 5], vec![0, 3, 1, 2, 3]);
    type Mutation = fn(&mut Vec<i64>, &mut Vec<i64>);
    type Want = Option<(u64, &'static str)>;
    let cases: [(&str, Mutation, Want); 8] = [
        ("valid", |_, _| {}, None),
        ("row_ptr[0] != 0", |r, _| r[0] = 1, Some((0, "row_ptr[0]"))),
        ("decreasing", |r, _| r[2] = 1, Some((1, "decreases"))),
        ("last != nnzb", |r, _| r[4] = 4, Some((4, "row_ptr[block_rows]"))),
        ("column out of range", |_, c| c[3] = 4, Some((2, ">= the number of block columns"))),
        ("unsorted", |_, c| c.swap(0, 1), Some((0, "strictly increasing"))),
        ("duplicate", |_, c| c[3] = 1, Some((2, "strictly increasing"))),
        ("negative", |_, c| c[4] = -1, Some((3, "negative or >= 2^32"))),
    ];
    for index in [IndexType::U32, IndexType::I64] {
        for (name, mutate, want) in cases {
            if index == IndexType::U32 && name == "negative" {
                continue; // not representable
            }
            let (mut r, mut c) = good.clone();
            mutate(&mut r, &mut c);
            let (r32, c32): (Vec<u32>, Vec<u32>) =
                (r.iter().map(|&x| x as u32).collect(), c.iter().map(|&x| x as u32).collect());
            let structure = match index {
                IndexType::U32 => DeviceStructure::upload(stream, &r32, &c32, IndexType::U32),
                IndexType::I64 => DeviceStructure {
                    row_ptr32: None,
                    col_idx32: None,
                    row_ptr64: Some(htod(stream, &r)),
                    col_idx64: Some(htod(stream, &c)),
                },
            };
            let arrays = structure.arrays(stream, addr(stream, &values));
            // SAFETY: the arrays hold block_rows + 1 and nnzb entries and 5 blocks of values.
            let got = unsafe { BsrView::<f16>::from_raw_checked(gpu, arrays, m, k, bs, 5) };
            match (got, want) {
                (Ok(_), None) => {}
                (Err(Error::InvalidBsr(BsrError::DeviceStructure { block_row, problem })), Some((row, text))) => {
                    assert_eq!(block_row, row, "{index:?} {name}: {problem}");
                    assert!(problem.contains(text), "{index:?} {name}: {problem}");
                }
                (other, want) => panic!("{index:?} {name}: got {other:?}, wanted {want:?}"),
            }
        }
    }
}

/// Everything the host can check is checked before the launch, and a rejected call changes nothing.
#[test]
fn bad_views_are_rejected_and_change_nothing() {
    let Some((_shared, gpu)) = gpu_for("bad_views_are_rejected_and_change_nothing") else { return };
    let stream = gpu.stream();
    let (bs, m, k, n) = (32usize, 64usize, 64usize, 40usize);
    let a: Bsr<f16> = generate(Pattern::Uniform, m, k, bs, 1.0, 5).unwrap();
    let a_d = gpu.upload(&a).unwrap();
    let a_v = a_d.view();
    let b_d = htod(stream, &vec![f16::ONE; k * n]);
    let bias_d = htod(stream, &vec![f16::ONE; m + 8]);
    let poison = vec![f32::NAN; m * n + 16];
    let mut c_d = htod(stream, &poison);
    let b_v = DenseView::from_cuda_slice(&b_d, k, n, n, Layout::RowMajor).unwrap();
    let cu = stream.cu_stream();
    let ep = Epilogue::default();
    let expect_err = |what: &str, r: sparsek::Result<()>| {
        let e = r.expect_err(what);
        eprintln!("{what}: {e}");
    };
    {
        // Shape mismatch: C has the wrong row count.
        let mut c_v = DenseViewMut::from_cuda_slice(&mut c_d, m - bs, n, n, Layout::RowMajor).unwrap();
        // SAFETY: valid buffers of this context.
        expect_err("shape", unsafe { gpu.spmm_raw(cu, &a_v, &b_v, &mut c_v, None, ep) });
    }
    {
        // Bias of the wrong length.
        let bias_v = VectorView::from_cuda_slice(&bias_d).unwrap();
        let mut c_v = DenseViewMut::from_cuda_slice(&mut c_d, m, n, n, Layout::RowMajor).unwrap();
        // SAFETY: valid buffers of this context.
        expect_err("bias length", unsafe { gpu.spmm_raw(cu, &a_v, &b_v, &mut c_v, Some(&bias_v), ep) });
    }
    {
        // C overlapping B: the same memory as input and output.
        let b_addr = addr(stream, &b_d);
        // SAFETY: b_d holds k * n f16 = the span of a 40 x 40 f16... described as m x n f16 output over B.
        let mut c_v = unsafe { DenseViewMut::<f16>::from_raw(b_addr, m, n, n, Layout::RowMajor) }.unwrap();
        // SAFETY: valid buffers of this context; the call must refuse before launching.
        expect_err("overlap", unsafe { gpu.spmm_raw(cu, &a_v, &b_v, &mut c_v, None, ep) });
    }
    {
        // Host memory passed as a device pointer.
        let host = vec![f16::ONE; k * n + 16];
        let host_addr = (host.as_ptr() as u64).next_multiple_of(16);
        // SAFETY: the call must refuse the pointer before launching (nothing reads it).
        let b_host = unsafe { DenseView::<f16>::from_raw(host_addr, k, n, n, Layout::RowMajor) }.unwrap();
        let mut c_v = DenseViewMut::from_cuda_slice(&mut c_d, m, n, n, Layout::RowMajor).unwrap();
        // SAFETY: as above.
        expect_err("host pointer", unsafe { gpu.spmm_raw(cu, &a_v, &b_host, &mut c_v, None, ep) });
    }
    {
        // A raw view declared memory of another device than this Gpu's (`on_device`): refused by the ordinals
        // alone, before any launch (a declaration is the caller's contract; the launch still compares it).
        let b_addr = addr(stream, &b_d);
        let elsewhere = gpu.info().ordinal + 1;
        // SAFETY: b_d's span; the false declaration is what the call must refuse before launching.
        let b_other =
            unsafe { DenseView::<f16>::from_raw(b_addr, k, n, n, Layout::RowMajor).unwrap().on_device(elsewhere) };
        let mut c_v = DenseViewMut::from_cuda_slice(&mut c_d, m, n, n, Layout::RowMajor).unwrap();
        // SAFETY: as above.
        let r = unsafe { gpu.spmm_raw(cu, &a_v, &b_other, &mut c_v, None, ep) };
        assert!(format!("{}", r.as_ref().unwrap_err()).contains("declared memory of device"), "{r:?}");
        expect_err("declared device", r);
    }
    {
        // A stream of another context: a second, non-primary context on the same device.
        // SAFETY: cuCtxCreate on device 0 with default flags; destroyed by cudarc when dropped.
        let other = unsafe {
            let mut raw = std::ptr::null_mut();
            let dev = cudarc::driver::result::device::get(0).unwrap();
            cudarc::driver::sys::cuCtxCreate_v4(&mut raw, std::ptr::null_mut(), 0, dev).result().unwrap();
            cudarc::driver::CudaContext::from_raw_context(0, dev, raw).unwrap()
        };
        let other_stream = other.new_stream().unwrap();
        gpu.context().bind_to_thread().unwrap();
        let mut c_v = DenseViewMut::from_cuda_slice(&mut c_d, m, n, n, Layout::RowMajor).unwrap();
        // SAFETY: the call must refuse the stream before launching.
        expect_err("foreign stream", unsafe { gpu.spmm_raw(other_stream.cu_stream(), &a_v, &b_v, &mut c_v, None, ep) });
        drop(other_stream);
        drop(other);
        gpu.context().bind_to_thread().unwrap();
    }
    // Wrong element type combination is a compile error (OutputElement / InputElement); unsupported layouts of
    // the description are refused by the constructors (CPU test: tests/tests/views.rs).
    let after = dtoh(stream, &c_d);
    assert_eq!(bits(&after), bits(&poison), "a rejected call wrote C");
}

/// A launch on the caller's non-blocking stream while the legacy default stream is busy: it runs (no hidden
/// synchronisation with the default stream), in order on its own stream (the upload of B before it, the download
/// after it), and gives the right answer.
#[test]
fn caller_stream_is_independent_and_ordered() {
    let _alone = sparsek_tests::gpu_alone();
    let Some(gpu) = gpu("caller_stream_is_independent_and_ordered") else { return };
    let busy_stream = gpu.stream(); // the legacy default stream (cudarc's default_stream)
    // Busy work on the default stream: repeated large products (~ hundreds of ms on an H100). The test runs
    // alone (gpu_alone): other tests' work and CPU time made the comparison below flaky.
    let (bm, bk, bn, bbs) = (4096usize, 4096usize, 4096usize, 128usize);
    let big: Bsr<f16> = generate(Pattern::Dense, bm, bk, bbs, 1.0, 1).unwrap();
    let big_d = gpu.upload(&big).unwrap();
    let big_b = gpu.upload_matrix(&Matrix::<f16>::random(bk, bn, 2).unwrap()).unwrap();
    let mut big_c = gpu.zeros::<f32>(bm, bn).unwrap();
    gpu.synchronize().unwrap();

    let caller = gpu.new_stream().unwrap(); // non-blocking
    let (bs, m, k, n) = (64usize, 256usize, 512usize, 100usize);
    let a: Bsr<f16> = generate(Pattern::Uniform, m, k, bs, 0.5, 3).unwrap();
    let b = Matrix::<f16>::random(k, n, 4).unwrap();
    let c0 = Matrix::<f32>::filled(m, n, n, f32::NAN).unwrap();
    let expected = Expected::compute(&a, &b, &c0, Epilogue::default(), RowSample::All, |_, _| {}).unwrap();
    let values_d = htod(&caller, a.values());
    let structure = DeviceStructure::upload(&caller, a.row_ptr(), a.col_idx(), IndexType::U32);
    let ldb = n.next_multiple_of(8);
    let mut b_d = caller.alloc_zeros::<f16>(k * ldb).unwrap();
    let mut c_d = htod(&caller, c0.as_slice());
    caller.synchronize().unwrap();

    for _ in 0..300 {
        gpu.spmm(&big_d, &big_b, &mut big_c, Epilogue::default()).unwrap();
    }
    // On the caller's stream: upload B, launch, download C.
    caller.memcpy_htod(b.with_ld(ldb, f16::NAN).unwrap().as_slice(), &mut b_d).unwrap();
    let arrays = structure.arrays(&caller, addr(&caller, &values_d));
    // SAFETY: valid structure; every buffer is used only on `caller` until the synchronisation below.
    let a_v = unsafe { BsrView::<f16>::from_raw(arrays, m, k, bs, a.nnzb()) }.unwrap();
    let b_v = DenseView::from_cuda_slice(&b_d, k, n, ldb, Layout::RowMajor).unwrap();
    {
        let mut c_v = DenseViewMut::from_cuda_slice(&mut c_d, m, n, n, Layout::RowMajor).unwrap();
        // SAFETY: `caller` is this Gpu's stream; the buffers are ordered on it.
        unsafe { gpu.spmm_raw(caller.cu_stream(), &a_v, &b_v, &mut c_v, None, Epilogue::default()) }.unwrap();
    }
    let got = caller.clone_dtoh(&c_d).unwrap();
    caller.synchronize().unwrap();
    // SAFETY: queries the legacy default stream (0) of the current context.
    let busy = unsafe { cudarc::driver::sys::cuStreamQuery(busy_stream.cu_stream()) };
    assert_eq!(
        busy,
        CUresult::CUDA_ERROR_NOT_READY,
        "the default stream finished before the caller's stream did: the launch waited for it (hidden \
         synchronisation), or the busy work was too short"
    );
    let report = expected.check_with(n, |r, c| got[r * n + c] as f64);
    assert!(report.passed(), "{report}");
    gpu.synchronize().unwrap();
}

/// A launch captured in a CUDA graph (global capture mode, as `torch.cuda.graph` uses) and replayed: each replay
/// computes with the current contents of B, into a poisoned C. Two launches: a small layer, and a decode launch
/// whose A (20 MB) takes the L2 access policy window marking it evict-first (`Policy::a_evict_first`), which
/// the graph's kernel node must carry.
#[test]
fn graph_capture_and_replay() {
    let _alone = sparsek_tests::gpu_alone();
    let Some(gpu) = gpu("graph_capture_and_replay") else { return };
    // (bs, m, k, n tokens, density, pattern)
    capture_and_replay(gpu, (32, 128, 256, 48), 0.4, Pattern::Skewed);
    let big = (64, 4096, 8192, 8);
    assert!(
        (big.1 as f64 * big.2 as f64 * 0.3 * 2.0) as u64 >= gpu.info().l2_bytes / 8,
        "test setup: A must be large enough for the window"
    );
    capture_and_replay(gpu, big, 0.3, Pattern::Uniform);
}

/// [`graph_capture_and_replay`] for one shape: the linear form `y = gelu(x @ A^T + bias)` of `n` tokens.
fn capture_and_replay(gpu: &Gpu, (bs, m, k, n): (usize, usize, usize, usize), density: f64, pattern: Pattern) {
    let stream = gpu.new_stream().unwrap();
    let a: Bsr<bf16> = generate(pattern, m, k, bs, density, 11).unwrap();
    let bias: Vec<bf16> = Matrix::<bf16>::random(1, m, 12).unwrap().row(0).to_vec();
    let values_d = htod(&stream, a.values());
    let structure = DeviceStructure::upload(&stream, a.row_ptr(), a.col_idx(), IndexType::I64);
    let bias_d = htod(&stream, &bias);
    let mut x_d = stream.alloc_zeros::<bf16>(n * k).unwrap(); // x: n tokens x k features, row-major
    let mut y_d = stream.alloc_zeros::<f32>(n * m).unwrap(); // y: n x m, row-major
    let ep = Epilogue::new(1.0, 0.0).with_activation(Activation::GeluTanh);
    stream.synchronize().unwrap();

    let arrays = structure.arrays(&stream, addr(&stream, &values_d));
    let (x_addr, y_addr, bias_addr) = (addr(&stream, &x_d), addr(&stream, &y_d), addr(&stream, &bias_d));
    // SAFETY: valid structure, live buffers used only on `stream`.
    let (a_v, x_v, bias_v) = unsafe {
        (
            BsrView::<bf16>::from_raw(arrays, m, k, bs, a.nnzb()).unwrap(),
            DenseView::<bf16>::from_raw(x_addr, n, k, k, Layout::RowMajor).unwrap(),
            VectorView::<bf16>::from_raw(bias_addr, m).unwrap(),
        )
    };
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL).unwrap();
    // SAFETY: as above; y is written only by this launch.
    let y_v = unsafe { DenseViewMut::<f32>::from_raw(y_addr, n, m, m, Layout::RowMajor) }.unwrap();
    // The linear form: y = gelu(x @ A^T + bias), i.e. C = y^T (column-major) = A @ x^T.
    let r = unsafe { gpu.spmm_raw(stream.cu_stream(), &a_v, &x_v.t(), &mut y_v.t(), Some(&bias_v), ep) };
    let graph = stream.end_capture(CUgraphInstantiate_flags(0));
    r.expect("launch during capture");
    let graph = graph.expect("end capture").expect("a graph");
    for seed in [21u64, 22, 23] {
        let x = Matrix::<bf16>::random(n, k, seed).unwrap();
        stream.memcpy_htod(x.as_slice(), &mut x_d).unwrap();
        stream.memcpy_htod(&vec![f32::NAN; n * m], &mut y_d).unwrap();
        graph.launch().unwrap();
        let y = stream.clone_dtoh(&y_d).unwrap();
        stream.synchronize().unwrap();
        // Oracle in the A @ B form: B = x^T (k x n), C = y^T.
        let b = Matrix::<bf16>::from_fn(k, n, |r, c| x.get(c, r)).unwrap();
        let c0 = Matrix::<f32>::zeros(m, n).unwrap();
        let rows = if m <= 1024 { RowSample::All } else { RowSample::Random { count: 256, seed } };
        let expected = Expected::compute_with_bias(&a, &b, &c0, ep, Some(&bias), rows, |_, _| {}).unwrap();
        let report = expected.check_with(n, |r, c| y[c * m + r] as f64);
        assert!(report.passed(), "bs{bs} {m}x{n}x{k}, replay with x seed {seed}: {report}");
    }
}

/// Views of sparsek's own buffers (`DeviceMatrix::view`, `DeviceBsr::view`) launch like raw ones, and the buffers
/// remain sparsek's: using and dropping a view never frees them.
#[test]
fn views_of_owned_buffers_never_free_them() {
    let Some((_shared, gpu)) = gpu_for("views_of_owned_buffers_never_free_them") else { return };
    let (bs, m, k, n) = (16usize, 64usize, 32usize, 24usize);
    let a: Bsr<f16> = generate(Pattern::Uniform, m, k, bs, 1.0, 31).unwrap();
    let b = Matrix::<f16>::random(k, n, 32).unwrap();
    let a_d = gpu.upload(&a).unwrap();
    let b_d = gpu.upload_matrix(&b).unwrap();
    let mut c_d = gpu.zeros::<f32>(m, n).unwrap();
    let c0 = Matrix::<f32>::zeros(m, n).unwrap();
    let expected = Expected::compute(&a, &b, &c0, Epilogue::default(), RowSample::All, |_, _| {}).unwrap();
    for _ in 0..3 {
        let (a_v, b_v) = (a_d.view(), b_d.view());
        let mut c_v = c_d.view_mut();
        // SAFETY: the default stream; the buffers are sparsek's and used only here.
        unsafe { gpu.spmm_raw(gpu.stream().cu_stream(), &a_v, &b_v, &mut c_v, None, Epilogue::default()) }.unwrap();
    }
    // The owned buffers are still alive and hold the result.
    assert!(expected.check(&c_d.to_host().unwrap()).passed());
    assert_eq!(b_d.to_host().unwrap().as_slice(), b.as_slice());
}

/// The element types the views are generic over are the library's device types.
#[allow(dead_code)]
fn _types_are_device_elements<T: DeviceElement>() {}

/// Empty operands at address 0, as PyTorch hands them over: no tokens (N = 0: x and y empty, nothing launched),
/// and a weight without blocks (values and col_idx null: C = act(bias) + beta * C, computed by the kernel).
#[test]
fn empty_operands_at_address_zero() {
    let Some((_shared, gpu)) = gpu_for("empty_operands_at_address_zero") else { return };
    let stream = gpu.stream();
    let (bs, m, k) = (32usize, 96usize, 64usize);
    let row_ptr = htod(stream, &[0i64; 4]);
    let arrays = BsrArrays { values: 0, row_ptr: addr(stream, &row_ptr), col_idx: 0, index: IndexType::I64 };
    // SAFETY: row_ptr holds block_rows + 1 = 4 zeros (a valid structure without blocks); values and col_idx are
    // never read without blocks.
    let w = unsafe { BsrView::<bf16>::from_raw_checked(gpu, arrays, m, k, bs, 0) }.unwrap();
    let bias: Vec<bf16> = (0..m).map(|r| bf16::from_f32(r as f32 * 0.25 - 3.0)).collect();
    let bias_d = htod(stream, &bias);
    let bias_v = VectorView::from_cuda_slice(&bias_d).unwrap();
    let ep = Epilogue::new(1.0, 0.0).with_activation(Activation::Relu);
    // No tokens: x (0 x k) and y (0 x m) at address 0.
    {
        // SAFETY: empty views are never read or written.
        let (x, y) = unsafe {
            (
                DenseView::<bf16>::from_raw(0, 0, k, k, Layout::RowMajor).unwrap(),
                DenseViewMut::<f32>::from_raw(0, 0, m, m, Layout::RowMajor).unwrap(),
            )
        };
        // SAFETY: this Gpu's stream; nothing is launched.
        unsafe { gpu.spmm_raw(stream.cu_stream(), &w, &x.t(), &mut y.t(), Some(&bias_v), ep) }.unwrap();
    }
    // Five tokens: y = relu(bias) for every token.
    let n = 5;
    let x_d = htod(stream, &vec![bf16::ONE; n * k]);
    let mut y_d = htod(stream, &vec![f32::NAN; n * m]);
    {
        let x = DenseView::from_cuda_slice(&x_d, n, k, k, Layout::RowMajor).unwrap();
        let y = DenseViewMut::from_cuda_slice(&mut y_d, n, m, m, Layout::RowMajor).unwrap();
        // SAFETY: this Gpu's stream; buffers used only here.
        unsafe { gpu.spmm_raw(stream.cu_stream(), &w, &x.t(), &mut y.t(), Some(&bias_v), ep) }.unwrap();
    }
    let y = dtoh(stream, &y_d);
    for t in 0..n {
        for r in 0..m {
            assert_eq!(y[t * m + r], bias[r].to_f32().max(0.0), "token {t} feature {r}");
        }
    }
}
