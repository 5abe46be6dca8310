//! The GPU kernels against the f64 CPU oracle: random shapes, block sizes, densities, patterns, alpha/beta,
//! f32 and f16 outputs, N tails, padded leading dimensions; outputs poisoned with NaN before every launch; exact
//! integer-valued cases asserting bit equality; run-to-run determinism (a race shows as a moving result).
//! Without a GPU every test prints a skip line (SPARSEK_REQUIRE_GPU=1 makes that a failure).
//! SPARSEK_GPU_CASES sets the number of random cases per property (default 300).

use proptest::prelude::*;
use sparsek::check::{Expected, RowSample, compare_exact};
use sparsek::format::{Pattern, generate};
use sparsek::gpu::{
    Decomposition, DeviceBsr, DeviceMatrix, Gpu, LaunchPlan, OutType, OutputElement, TuneOptions, TuneProblem,
};
use sparsek::plan::Policy;
use sparsek::tune::{KernelFamily, Plan, PlanCache, PlanSource};
use sparsek::{Bsr, Epilogue, Error, Layout, Matrix, Scalar, f16};
use sparsek_tests::{
    Case, ROW_MAJOR, Rows, exact_operands, family, gpu, gpu_cases, own_gpu, plan_in, plan_of, spmm_planned,
    test_policy, threads_match_one_launch,
};

fn case_strategy() -> impl Strategy<Value = Case> {
    (
        prop::sample::select(vec![16usize, 32, 64, 128]),
        0usize..=6,
        1usize..=6,
        prop_oneof![Just(1usize), Just(7), Just(8), Just(17), Just(127), Just(128), Just(129), Just(200), 1usize..300],
        prop::sample::select(vec![0usize, 1, 8, 24]),
        prop_oneof![Just(0.0f64), Just(1.0), 0.0f64..=1.0],
        prop::sample::select(vec![Pattern::Uniform, Pattern::Skewed, Pattern::Banded, Pattern::Dense, Pattern::Empty]),
        prop::sample::select(vec![1.0f32, 0.5, -2.0]),
        prop::sample::select(vec![0.0f32, 1.0, -0.5]),
        any::<u64>(),
    )
        .prop_map(Case::from_tuple)
}

/// C before the product: random when beta != 0 (it is read), NaN when beta == 0 (it must not be read, and every
/// element must be written); the padding columns hold NaN and must stay NaN.
fn initial_c<TC: Scalar>(m: usize, n: usize, ld: usize, beta: f32, seed: u64) -> Matrix<TC> {
    let mut c = Matrix::<TC>::filled(m, n, ld, TC::from_f64(f64::NAN)).unwrap();
    if beta != 0.0 {
        let r = Matrix::<TC>::random(m, n, seed).unwrap();
        for i in 0..m {
            c.row_mut(i).copy_from_slice(r.row(i));
        }
    }
    c
}

fn padding_untouched<TC: Scalar>(got: &Matrix<TC>, before: &Matrix<TC>) -> Result<(), String> {
    let (g, b) = (got.as_slice(), before.as_slice());
    for r in 0..got.rows() {
        for c in got.cols()..got.ld() {
            let i = r * got.ld() + c;
            if i < g.len() && i < b.len() && g[i].to_f64().to_bits() != b[i].to_f64().to_bits() {
                return Err(format!("padding element ({r}, {c}) was written: {:?}", g[i]));
            }
        }
    }
    Ok(())
}

/// Runs one case on the GPU with the product kernels and compares with the oracle; Err describes the failure
/// with everything needed to reproduce it.
/// Where the built-in heuristic takes the sm_90a short-row kernel, the five-stage sm_90a kernel runs the same case
/// too: the random shapes have short rows, and both kernels must stay tested on them.
/// The plan `Gpu::plan` predicted for a launch and the plan `Gpu::last_plan` held right after it.
type Planned = (LaunchPlan, Option<LaunchPlan>);

/// A case launched through `Gpu::spmm` (then, where that ran the sm_90a short-row kernel, again on the five-stage
/// one); returns, for an A of at least one row (a launch without rows runs nothing), the plan `Gpu::plan` predicted
/// for the launch and the plan `Gpu::last_plan` held right after it (the launch's, where no other thread launches
/// on `gpu`: [`run_planned`]).
fn run_case<TC: OutputElement>(gpu: &Gpu, case: &Case) -> Result<Option<Planned>, String> {
    let plans = std::cell::RefCell::new(None);
    run_case_with::<TC>(gpu, case, |a, b, c, ep| {
        let predicted = if a.rows() == 0 { None } else { Some(gpu.plan::<f16, TC>(a, b.cols(), ROW_MAJOR, ep)?) };
        gpu.spmm(a, b, c, ep)?;
        *plans.borrow_mut() = predicted.map(|p| (p, gpu.last_plan()));
        Ok(())
    })?;
    let planned = plans.into_inner();
    if planned.as_ref().is_some_and(|(p, _)| family(p) == KernelFamily::HopperShort) {
        run_plan::<TC>(gpu, case, &Plan::new(KernelFamily::Hopper)).map_err(|e| format!("five-stage sm_90a: {e}"))?;
    }
    Ok(planned)
}

/// Whether `gpu` launches `a` times `n` columns (row-major B and C, an f32 C, epilogue `ep`) on the sm_90a short-row
/// kernel (`Gpu::plan`).
fn takes_short_rows(gpu: &Gpu, a: &DeviceBsr, n: usize, ep: Epilogue) -> bool {
    family(&gpu.plan::<f16, f32>(a, n, ROW_MAJOR, ep).unwrap()) == KernelFamily::HopperShort
}

/// [`run_case`] on a Gpu of the test's own: the launch must run the plan `Gpu::plan` predicted, which is returned.
fn run_planned<TC: OutputElement>(gpu: &Gpu, case: &Case) -> LaunchPlan {
    let planned = run_case::<TC>(gpu, case).unwrap_or_else(|e| panic!("{e}"));
    let (predicted, ran) = planned.unwrap_or_else(|| panic!("{case:?}: no rows, no launch"));
    assert_eq!(ran.as_ref(), Some(&predicted), "{case:?} {} out: predicted == ran", TC::NAME);
    predicted
}

/// [`run_case`] with any launch (a tuning variant, for instance).
fn run_case_with<TC: OutputElement>(
    gpu: &Gpu,
    case: &Case,
    launch: impl Fn(&DeviceBsr, &DeviceMatrix<f16>, &mut DeviceMatrix<TC>, Epilogue) -> sparsek::Result<()>,
) -> Result<(), String> {
    let (m, k, n) = case.dims();
    let (a, b) = (case.a::<f16>()?, case.b::<f16>());
    let ld = (n + case.pad).next_multiple_of(16 / std::mem::size_of::<TC>());
    let c0 = initial_c::<TC>(m, n, ld, case.beta, case.seed ^ 0xc);
    let ep = Epilogue::new(case.alpha, case.beta);
    // The one verification path: every row of the oracle, the tolerance of TC. A generated A with blocks and
    // alpha != 0 gives a product to check: a vacuous expectation there is a broken generator or oracle.
    let expected = Expected::compute(&a, &b, &c0, ep, RowSample::All, |_, _| {}).map_err(|e| e.to_string())?;
    if expected.is_vacuous() && a.nnzb() > 0 && case.alpha != 0.0 {
        return Err(format!("vacuous expectation: nnzb {}, alpha {}", a.nnzb(), case.alpha));
    }
    let (a_d, b_d) = (gpu.upload(&a).unwrap(), gpu.upload_matrix(&b).unwrap());
    let mut c_d = gpu.upload_matrix(&c0).unwrap();
    assert_eq!(c_d.ld(), ld, "test setup: the device ld must equal the host ld");
    launch(&a_d, &b_d, &mut c_d, ep).map_err(|e| e.to_string())?;
    let got = c_d.to_host().map_err(|e| e.to_string())?;
    let report = expected.check(&got);
    let ctx = format!(
        "{} out: m={m} n={n} k={k} bs={} nnzb={} density={:.3} pattern={} alpha={} beta={} ld={ld} seed={}",
        TC::NAME,
        case.bs,
        a.nnzb(),
        case.density,
        case.pattern,
        case.alpha,
        case.beta,
        case.seed
    );
    if !report.passed() {
        return Err(format!("{ctx}: {report}"));
    }
    padding_untouched(&got, &c0).map_err(|e| format!("{ctx}: {e}"))
}

/// Runs `cases` random cases through `run_case::<TC>`; proptest shrinks a failure to a minimal case.
fn property<TC: OutputElement>(test: &str) {
    let Some(gpu) = gpu(test) else { return };
    let config = ProptestConfig { cases: gpu_cases(300), failure_persistence: None, ..ProptestConfig::default() };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result = runner.run(&case_strategy(), |case| run_case::<TC>(gpu, &case).map(drop).map_err(TestCaseError::fail));
    if let Err(e) = result {
        panic!("{test}: {e}");
    }
}

#[test]
fn spmm_f32_out_matches_oracle() {
    property::<f32>("spmm_f32_out_matches_oracle");
}

#[test]
fn spmm_f16_out_matches_oracle() {
    property::<f16>("spmm_f16_out_matches_oracle");
}

/// Every configuration of the tuning module (host/ptx/sparsek_sm80_tune.ptx) against the oracle on random cases of its
/// block size: a configuration is only promoted to the product kernels after passing this.
/// Around the narrow tile's threshold (64 columns today): the launcher takes the narrow kernel (or the decode
/// kernels) up to 64 columns, the mid tiles from 17 to 64 columns at bs 64 and 128 (`_n32`; at bs 64 from 33 columns
/// `_n64`, and at bs 128 only on many more blocks than these: gpu_split.rs tests it), and the wide or sm_90a one
/// beyond; both sides, every block size, with N tails, skewed rows, alpha/beta, f32 and f16 C, against every row of
/// the oracle, each launch running the plan `Gpu::plan` predicted.
#[test]
fn narrow_and_wide_tiles_around_the_threshold() {
    let Some(gpu) = own_gpu("narrow_and_wide_tiles_around_the_threshold", |g| g) else { return };
    let mut seed = 0x5eed_u64;
    for bs in [16usize, 32, 64, 128] {
        for n in [1usize, 2, 7, 15, 16, 17, 32, 33, 63, 64, 65, 80] {
            let mid64 = bs == 64 && (33..=64).contains(&n);
            let mid = matches!(bs, 64 | 128) && (17..=64).contains(&n) && !mid64;
            for (pattern, beta) in [(Pattern::Uniform, 0.0f32), (Pattern::Skewed, -0.5)] {
                seed += 1;
                let case =
                    Case { bs, block_rows: 5, block_cols: 4, n, pad: 8, density: 0.5, pattern, alpha: 1.5, beta, seed };
                let plan = run_planned::<f32>(&gpu, &case);
                let ctx = format!("bs {bs} n {n} {pattern}: {plan}");
                assert_eq!(plan.kernel.ends_with("_n32"), mid, "{ctx}");
                assert_eq!(plan.kernel.ends_with("_n64"), mid64, "{ctx}");
                let wide =
                    matches!(family(&plan), KernelFamily::Wide | KernelFamily::Hopper | KernelFamily::HopperShort);
                assert_eq!(wide, n > 64, "{ctx}");
                run_planned::<f16>(&gpu, &case);
            }
        }
    }
}

/// Few columns (decode: N = 1..=64, the decode kernels up to 16 columns, the narrow tile beyond)
/// on long block rows (up to 40 blocks, so every warp of a decode CTA walks several) with every pattern,
/// skewed rows (one row holding most blocks) included, f32 and f16 C, alpha/beta, padded C.
fn few_columns_strategy() -> impl Strategy<Value = Case> {
    (
        prop::sample::select(vec![16usize, 32, 64, 128]),
        1usize..=8,
        1usize..=40,
        prop_oneof![Just(1usize), Just(8), Just(16), Just(17), Just(64), 1usize..=64],
        prop::sample::select(vec![0usize, 1, 8]),
        prop_oneof![Just(1.0f64), 0.0f64..=1.0],
        prop::sample::select(vec![Pattern::Uniform, Pattern::Skewed, Pattern::Banded, Pattern::Empty]),
        prop::sample::select(vec![1.0f32, -2.0]),
        prop::sample::select(vec![0.0f32, -0.5]),
        any::<u64>(),
    )
        .prop_map(Case::from_tuple)
}

#[test]
fn few_columns_match_oracle() {
    let test = "few_columns_match_oracle";
    let Some(gpu) = gpu(test) else { return };
    let config = ProptestConfig { cases: gpu_cases(300), failure_persistence: None, ..ProptestConfig::default() };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result = runner.run(&few_columns_strategy(), |case| {
        run_case::<f32>(gpu, &case).and_then(|_| run_case::<f16>(gpu, &case)).map(drop).map_err(TestCaseError::fail)
    });
    if let Err(e) = result {
        panic!("{test}: {e}");
    }
}

/// Few columns over many block rows (the narrow tile) and over few (the decode kernels; at bs 64 a row of 256 KiB or
/// more takes the narrow tile's split rows instead), skewed and uniform rows, N tails, long rows (40 blocks),
/// against every row of the oracle, each launch running the plan `Gpu::plan` predicted.
#[test]
fn few_columns_on_few_and_many_block_rows() {
    let Some(gpu) = own_gpu("few_columns_on_few_and_many_block_rows", |g| g) else { return };
    let mut seed = 0xdec0_u64;
    // (bs, block rows, block columns, the decode kernels serve): many block rows for the narrow tile (over two per
    // SM at bs 32, half as many as SMs at bs 64, any at bs 128), few for the decode kernels.
    for (bs, block_rows, block_cols, decode) in [
        (32usize, 512usize, 16usize, false),
        (64, 256, 8, false),
        (128, 128, 4, false),
        (64, 12, 40, true),
        (32, 24, 40, true),
    ] {
        for n in [1usize, 9, 16] {
            for (pattern, beta) in [(Pattern::Uniform, 0.0f32), (Pattern::Skewed, -0.5)] {
                seed += 1;
                let case =
                    Case { bs, block_rows, block_cols, n, pad: 8, density: 0.5, pattern, alpha: 1.5, beta, seed };
                for plan in [run_planned::<f32>(&gpu, &case), run_planned::<f16>(&gpu, &case)] {
                    let ctx = format!("few columns: {case:?}: {plan}");
                    match family(&plan) {
                        KernelFamily::Decode => assert!(decode, "{ctx}"),
                        // A bs-64 row of 40 blocks holds 320 KiB: the narrow tile balances it.
                        KernelFamily::Narrow if decode => assert!(
                            bs == 64
                                && matches!(
                                    plan.decomposition,
                                    Decomposition::SplitRows { .. } | Decomposition::FlatList { .. }
                                ),
                            "{ctx}"
                        ),
                        KernelFamily::Narrow => {}
                        _ => panic!("{ctx}: neither the decode kernels nor the narrow tile"),
                    }
                }
            }
        }
    }
}

/// [`run_case`] launched with a fixed plan (`Gpu::spmm_with_plan`).
fn run_plan<TC: OutputElement>(gpu: &Gpu, case: &Case, plan: &Plan) -> Result<(), String> {
    run_case_with::<TC>(gpu, case, |a, b, c, ep| gpu.spmm_with_plan(plan, a, b, c, ep))
}

/// Every plan the tuner may pick for a case (each kernel family that can serve it, with each rasterization group
/// it measures: `Gpu::tune_candidates`) on random shapes, N from 1 to 300, all patterns, f32 and f16 outputs,
/// against every row of the oracle with poisoned outputs: a plan from the cache launches a kernel outside the
/// shapes the heuristic sends it (the decode kernels above 16 columns or on many block rows, the sm_90a ones at
/// few columns), so each must be right everywhere.
#[test]
fn every_tuner_candidate_matches_oracle() {
    let test = "every_tuner_candidate_matches_oracle";
    let Some(gpu) = gpu(test) else { return };
    let cases = (gpu_cases(300) / 10).max(10);
    let config = ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let families = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let launches = std::cell::Cell::new(0usize);
    let strategy = prop_oneof![case_strategy(), few_columns_strategy()];
    let check = |case: &Case| -> Result<(), TestCaseError> {
        let a_d = gpu.upload(&case.a::<f16>().unwrap()).unwrap();
        let f32_out = case.seed.is_multiple_of(2);
        let plans = if f32_out {
            gpu.tune_candidates::<f16, f32>(&a_d, case.n, Layout::RowMajor)
        } else {
            gpu.tune_candidates::<f16, f16>(&a_d, case.n, Layout::RowMajor)
        };
        prop_assert!(!plans.is_empty(), "no candidate for {case:?}");
        for plan in plans {
            families.borrow_mut().insert(plan.family);
            launches.set(launches.get() + 1);
            let r = if f32_out { run_plan::<f32>(gpu, case, &plan) } else { run_plan::<f16>(gpu, case, &plan) };
            r.map_err(|e| TestCaseError::fail(format!("plan {plan}: {e}")))?;
        }
        Ok(())
    };
    if let Err(e) = runner.run(&strategy, |case| check(&case)) {
        panic!("{test}: {e}");
    }
    // And fixed cases: one per block size with blocks, so every family is reached whatever the random draw, and
    // many block rows (the decode kernels up to the heuristic's limits and beyond, one CTA per 16-row slice).
    let fixed = [
        (16usize, 5usize, 40usize, 2u64),
        (32, 5, 9, 3),
        (64, 5, 16, 4),
        (128, 5, 130, 6),
        (32, 200, 16, 7),
        (64, 70, 5, 8),
    ];
    for (bs, block_rows, n, seed) in fixed {
        let case = Case {
            bs,
            block_rows,
            block_cols: 4,
            n,
            pad: 8,
            density: 0.6,
            pattern: Pattern::Skewed,
            alpha: 1.0,
            beta: -0.5,
            seed,
        };
        check(&case).unwrap_or_else(|e| panic!("{test}: {e}"));
    }
    // Every family this GPU has was measured (decode: bs 32-128; mid: bs 64 and 128; sm90a and sm90a-short: on an
    // H100/H200 with the module on).
    let all = sparsek::tune::KernelFamily::ALL.len();
    let expected = if gpu.hopper_module().is_some() { all } else { all - 2 };
    let families = families.into_inner();
    assert_eq!(families.len(), expected, "{test}: families measured: {families:?}");
    // On the raw stderr handle (libtest captures eprintln! of passing tests): what the test covered.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "{test}: {} random + {} fixed cases, {} plan launches checked, families {families:?}",
        cases,
        fixed.len(),
        launches.get()
    );
}

/// `Gpu::tune` on a decode-sized and a wide product and on the linear layer's layouts: every candidate checked,
/// the chosen plan no slower than the heuristic's, remembered for later launches (which stay correct), saved to
/// the cache file and read back by a new `Gpu`; with plans off the heuristic serves.
#[test]
fn tune_chooses_a_checked_plan_and_remembers_it() {
    let test = "tune_chooses_a_checked_plan_and_remembers_it";
    if gpu(test).is_none() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("sparsek-tune-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let policy = Policy { hopper: sparsek_tests::hopper_enabled(), ..Policy::default() };
    let open = |cache: PlanCache| Gpu::new(0).unwrap().with_policy(policy).with_plan_cache(cache);
    let tuned = open(PlanCache::in_dir(&dir));
    let opts = TuneOptions::with_budget(std::time::Duration::from_millis(300));
    for (bs, block_rows, block_cols, n, problem) in [
        (64usize, 12usize, 40usize, 8usize, TuneProblem::new(8)),
        (128, 24, 16, 256, TuneProblem::new(256)),
        (32, 16, 48, 16, TuneProblem::linear(16, OutType::F16)),
    ] {
        let (m, k) = (block_rows * bs, block_cols * bs);
        let a: Bsr<f16> = generate(Pattern::Skewed, m, k, bs, 0.3, 0x7u64 + bs as u64).unwrap();
        let a_d = tuned.upload(&a).unwrap();
        let report = tuned.tune(&a_d, &problem, &opts).unwrap_or_else(|e| panic!("{test}: tune: {e}"));
        let ctx = format!("{test}: {m}x{k} bs{bs} N={n}:\n{report}");
        assert!(report.candidates.len() >= 2, "{ctx}");
        assert!(report.candidates.iter().all(|c| c.passed && c.median_us > 0.0), "{ctx}");
        assert_eq!(report.candidates[0].plan, report.heuristic, "{ctx}");
        assert!(report.candidates.iter().any(|c| c.plan == report.plan), "{ctx}");
        assert!(report.tuned_us <= report.heuristic_us, "{ctx}");
        assert!(matches!(&report.saved, Some(Ok(p)) if p.exists()), "{ctx}: {:?}", report.saved);
        // The launch plans of the problem (its layouts and C type; uploaded: row lengths known, or a raw view:
        // unknown) on a Gpu: the family and the source of the choice, and the rasterization group the tuned plan
        // fixed (where it fixed one).
        let layouts = (problem.b_layout, problem.c_layout);
        let ep = Epilogue::default();
        let launch_plan = |g: &Gpu, rows: Rows| match problem.out {
            OutType::F16 => plan_in::<f16, f16>(g, &a, rows, n, (layouts, ep)),
            _ => plan_in::<f16, f32>(g, &a, rows, n, (layouts, ep)),
        };
        let takes_tuned = |g: &Gpu, rows: Rows, what: &str| {
            let plan = launch_plan(g, rows);
            assert_eq!(plan.choice, Some((report.plan.family, PlanSource::Tuned)), "{ctx}: {what}: {plan}");
            let groups = report.plan.group_rows.is_none_or(|r| r == plan.group_rows);
            assert!(groups || family(&plan) == KernelFamily::Decode, "{ctx}: {what}: groups of {plan}");
        };
        takes_tuned(&tuned, Rows::Uploaded, "tuned");
        // Read back from the file by a new Gpu; ignored with plans off.
        let reread = open(PlanCache::in_dir(&dir));
        assert!(reread.plan_cache_warning().is_none());
        takes_tuned(&reread, Rows::Uploaded, "read back");
        let off = launch_plan(&open(PlanCache::off()), Rows::Uploaded);
        assert_eq!(off.choice.map(|c| c.1), Some(PlanSource::Heuristic), "{ctx}: plans off: {off}");
        // Views (row lengths unknown) of the same shape and block count take the plan too.
        takes_tuned(&tuned, Rows::Unknown, "a view");
        // The tuned launch is still right (row-major problems through Gpu::spmm, which consults the plan).
        if problem.b_layout == Layout::RowMajor {
            let case = Case {
                bs,
                block_rows,
                block_cols,
                n,
                pad: 8,
                density: 0.3,
                pattern: Pattern::Skewed,
                alpha: 1.0,
                beta: 0.0,
                seed: 0x7u64 + bs as u64,
            };
            run_case::<f32>(&tuned, &case).unwrap_or_else(|e| panic!("{ctx}: after tuning: {e}"));
        }
    }
    // Each plan under its key and under the key of views (row lengths unknown).
    assert_eq!(tuned.cached_plans().len(), 6);
    assert_eq!(PlanCache::in_dir(&dir).read().entries.len(), 6);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The tuner times every candidate on operands that come from memory, whatever the candidates before it leave in
/// L2: plans that differ only in a rasterization group that a launch of one N tile does not use are one launch,
/// and measure alike. Timed launch by launch, one of them found part of its A left in L2 by an earlier candidate,
/// round after round, and measured 1.4x faster than the others on this shape (H100, docs/perf-notes.md "Tuned
/// plans"); the tolerance is a tenth, three times what identical launches differ by now.
#[test]
fn tuner_times_identical_launches_alike() {
    let test = "tuner_times_identical_launches_alike";
    if gpu(test).is_none() {
        return;
    }
    let policy = Policy { hopper: sparsek_tests::hopper_enabled(), ..Policy::default() };
    let g = Gpu::new(0).unwrap().with_policy(policy).with_plan_cache(PlanCache::off());
    let (m, k, bs, n) = (8192, 8192, 64, 16);
    let a: Bsr<f16> = generate(Pattern::Uniform, m, k, bs, 0.22, 0x1d3).unwrap();
    let a_d = g.upload(&a).unwrap();
    let opts = TuneOptions { save: false, ..TuneOptions::with_budget(std::time::Duration::from_millis(1500)) };
    let report = g.tune(&a_d, &TuneProblem::new(n), &opts).unwrap_or_else(|e| panic!("{test}: tune: {e}"));
    // The narrow tile has one N tile of 16 columns here: its plans on the planner's decomposition (whole rows on
    // this uniform A) differ only in the group. (The tuner also measures split rows and the flat list: other launches.)
    let narrow: Vec<f64> = report
        .candidates
        .iter()
        .filter(|c| c.plan.family == KernelFamily::Narrow && c.plan.row_split == sparsek::plan::RowSplit::Auto)
        .map(|c| c.median_us)
        .collect();
    assert!(narrow.len() >= 2, "{test}: fewer than two narrow plans:\n{report}");
    let lo = narrow.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = narrow.iter().copied().fold(0.0, f64::max);
    assert!(hi <= 1.1 * lo, "{test}: one launch measured {lo:.2} to {hi:.2} us:\n{report}");
}

#[test]
fn tuning_variants_match_oracle() {
    let Some(gpu) = gpu("tuning_variants_match_oracle") else { return };
    let variants = gpu.tuning_variants().expect("load the tuning module");
    assert_eq!(variants.len(), sparsek_layout::TUNE_CONFIGS.len());
    let cases = (gpu_cases(300) / 10).max(4);
    for v in &variants {
        let config = ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() };
        let mut runner = proptest::test_runner::TestRunner::new(config);
        let bs = v.config().bs as usize;
        let strategy = case_strategy().prop_map(move |c| Case { bs, ..c });
        let result = runner.run(&strategy, |case| {
            run_case_with::<f32>(gpu, &case, |a, b, c, ep| gpu.spmm_variant(v, a, b, c, ep, None))
                .map_err(TestCaseError::fail)
        });
        if let Err(e) = result {
            panic!("{} ({:?}): {e}", v.name(), v.config());
        }
    }
}

/// Integer-valued A, B, C in [-4, 4]: every product and partial sum is an integer below 2^24, exact in f32 in
/// any order, so the GPU must match the oracle bit for bit.
fn exact_case(gpu: &Gpu, bs: usize, block_rows: usize, block_cols: usize, n: usize, density: f64, seed: u64) {
    let (m, k) = (block_rows * bs, block_cols * bs);
    for (pattern, beta) in [(Pattern::Uniform, 0.0f32), (Pattern::Skewed, 1.0), (Pattern::Dense, -1.0)] {
        let (a, b, c0) = exact_operands(pattern, (m, k, n), bs, density, beta, seed);
        let ep = Epilogue::new(1.0, beta);
        let expected = sparsek::cpu::reference(&a, &b, &c0, ep).unwrap();
        assert!(a.nnzb() == 0 || expected.as_slice().iter().any(|v| *v != 0.0), "vacuous exact case");
        let (a_d, b_d) = (gpu.upload(&a).unwrap(), gpu.upload_matrix(&b).unwrap());
        // The heuristic's kernel, and the five-stage sm_90a one where the heuristic takes the short-row kernel.
        let mut plans = vec![None];
        if takes_short_rows(gpu, &a_d, n, ep) {
            plans.push(Some(Plan::new(KernelFamily::Hopper)));
        }
        for plan in plans {
            let mut c_d = gpu.upload_matrix(&c0).unwrap();
            match &plan {
                None => gpu.spmm(&a_d, &b_d, &mut c_d, ep).unwrap(),
                Some(p) => gpu.spmm_with_plan(p, &a_d, &b_d, &mut c_d, ep).unwrap(),
            }
            let got = c_d.to_host().unwrap();
            let report = compare_exact(&got, &expected);
            assert!(
                report.passed(),
                "exact bs{bs}::m{m}_n{n}_k{k} pattern={pattern} beta={beta} density={density} seed={seed} \
                 plan={plan:?}: {report}"
            );
        }
    }
}

macro_rules! exact_tests {
    ($($name:ident: $bs:expr, $br:expr, $bc:expr, $n:expr, $density:expr;)*) => {$(
        #[test]
        fn $name() {
            let Some(gpu) = gpu(stringify!($name)) else { return };
            for seed in 0..3 {
                exact_case(gpu, $bs, $br, $bc, $n, $density, 1000 + seed);
            }
        }
    )*};
}

exact_tests! {
    exact_bs16_m256_n129_k512: 16, 16, 32, 129, 0.3;
    exact_bs32_m256_n256_k512: 32, 8, 16, 256, 0.5;
    exact_bs64_m512_n200_k1024: 64, 8, 16, 200, 0.25;
    exact_bs128_m512_n384_k1024: 128, 4, 8, 384, 0.6;
    exact_bs64_m128_n1_k512: 64, 2, 8, 1, 1.0;
    exact_bs64_m512_n40_k1024: 64, 8, 16, 40, 0.5;
    exact_bs64_m512_n24_k1024: 64, 8, 16, 24, 0.5;
    exact_bs128_m512_n33_k1024: 128, 4, 8, 33, 0.6;
}

/// The small-grid rule (on by default; the other tests turn it off to keep testing the wide and sm_90a kernels on
/// small shapes): a launch of 65 to 512 columns whose wide or sm_90a grid has at most three tiles for every four SMs
/// takes the mid tile where its grid has at least half as many CTAs as SMs, else the narrow tile; any other launch
/// keeps its kernel. With the rule off every case runs the wide or sm_90a kernels; with it on each either keeps that
/// kernel or runs the narrow or mid tile, and the cases (made for a GPU of 100 to 144 SMs) see all three: a mid tile,
/// the narrow tile, and a kernel kept (past 512 columns, and on many tiles). Every case bit-exact against the oracle
/// with the rule on and off (integer-valued operands, skewed rows), each launch running the plan `Gpu::plan`
/// predicted.
#[test]
fn small_grids_take_the_narrow_and_mid_tiles() {
    let test = "small_grids_take_the_narrow_and_mid_tiles";
    let Some(rule) = own_gpu(test, |g| g.with_policy(Policy { small_grids: true, ..test_policy() })) else { return };
    let off = own_gpu(test, |g| g).unwrap();
    // (bs, block rows, block columns, N, what the rule does on 100 to 144 SMs: 'm' the mid tile, 'n' the narrow
    // tile, 'k' the kernel kept).
    let cases = [
        (16usize, 24usize, 24usize, 512usize, 'n'),
        (32, 12, 48, 512, 'n'),
        (32, 48, 12, 65, 'n'),
        (64, 6, 24, 512, 'n'),
        (64, 24, 6, 128, 'n'),
        (64, 32, 32, 512, 'm'),
        (64, 24, 8, 513, 'k'),
        (64, 60, 8, 512, 'k'),
        (128, 3, 12, 512, 'n'),
        (128, 8, 8, 300, 'n'),
        (128, 160, 2, 256, 'k'),
    ];
    let sms = rule.info().sm_count;
    let expected_holds = (100..=144).contains(&sms);
    let mut seen = std::collections::BTreeSet::new();
    for (i, &(bs, block_rows, block_cols, n, expect)) in cases.iter().enumerate() {
        let (m, k) = (block_rows * bs, block_cols * bs);
        let (a, b, c0) = exact_operands(Pattern::Skewed, (m, k, n), bs, 0.5, 0.0, 900 + i as u64);
        let ctx = format!("bs{bs} {m}x{k}x{n} ({block_rows} block rows, {sms} SMs)");
        let ep = Epilogue::new(1.0, 0.0);
        let expected = sparsek::cpu::reference(&a, &b, &c0, ep).unwrap();
        let (got, without) = spmm_planned(&off, &a, &b, &c0, ep);
        assert!(compare_exact(&got, &expected).passed(), "{ctx} on {without}");
        let wide =
            |p: &LaunchPlan| matches!(family(p), KernelFamily::Wide | KernelFamily::Hopper | KernelFamily::HopperShort);
        assert!(wide(&without), "{ctx}: the rule is off: {without}");
        let (got, with) = spmm_planned(&rule, &a, &b, &c0, ep);
        assert!(compare_exact(&got, &expected).passed(), "{ctx} on {with}");
        let did = match family(&with) {
            KernelFamily::Mid => 'm',
            KernelFamily::Narrow => 'n',
            _ if with.kernel == without.kernel => 'k',
            _ => panic!("{ctx}: {with}, the rule off {without}"),
        };
        assert!(did == 'k' || (65..=512).contains(&n), "{ctx}: {with}");
        if expected_holds {
            assert_eq!(did, expect, "{ctx}: {with}, the rule off {without}");
        }
        seen.insert(did);
    }
    if expected_holds {
        assert_eq!(seen.len(), 3, "the cases must see a mid tile, the narrow tile and a kernel kept: {seen:?}");
    }
}

/// The short-row rule: on an H100/H200 with the sm_90a module, a bs-64 launch of more than 64 columns whose rows hold
/// at most 8 k-tiles (blocks) on average and an f32 C takes the `_short` kernel (family sm90a-short), any other
/// launch keeps its kernel, and `Policy::short_rows` off gives the five-stage one. Every case bit-exact against
/// the oracle on both, each launch running the plan `Gpu::plan` predicted.
#[test]
fn short_rows_take_the_short_row_kernel() {
    let test = "short_rows_take_the_short_row_kernel";
    let Some(off) = own_gpu(test, |g| g.with_policy(Policy { short_rows: false, ..test_policy() })) else { return };
    let on = own_gpu(test, |g| g).unwrap();
    let hopper = on.hopper_module().is_some();
    // (bs, block rows, block columns, n, pattern, density, short rows): dense rows of exactly `block columns`
    // blocks, and skewed rows whose mean is below the limit although one row is long.
    let cases = [
        (64usize, 16usize, 8usize, 256usize, Pattern::Dense, 1.0f64, true),
        (64, 16, 9, 256, Pattern::Dense, 1.0, false),
        (64, 16, 8, 65, Pattern::Dense, 1.0, true),
        (64, 16, 8, 64, Pattern::Dense, 1.0, false),
        (64, 40, 16, 300, Pattern::Skewed, 0.3, true),
        (64, 3, 2, 1000, Pattern::Uniform, 0.7, true),
        (128, 8, 4, 256, Pattern::Dense, 1.0, false),
    ];
    for (i, &(bs, block_rows, block_cols, n, pattern, density, short)) in cases.iter().enumerate() {
        let short = short && hopper;
        let (m, k) = (block_rows * bs, block_cols * bs);
        let (a, b, c0) = exact_operands(pattern, (m, k, n), bs, density, 0.0, 700 + i as u64);
        let ctx = format!("bs{bs} {m}x{k}x{n} {pattern}: {} blocks in {block_rows} block rows", a.nnzb());
        let ep = Epilogue::new(1.0, 0.0);
        let expected = sparsek::cpu::reference(&a, &b, &c0, ep).unwrap();
        let (got, with) = spmm_planned(&on, &a, &b, &c0, ep);
        assert!(compare_exact(&got, &expected).passed(), "{ctx} on {with}");
        let (got, without) = spmm_planned(&off, &a, &b, &c0, ep);
        assert!(compare_exact(&got, &expected).passed(), "{ctx} on {without}");
        assert_eq!(family(&with) == KernelFamily::HopperShort, short, "{ctx}: {with}");
        assert_eq!(with.kernel.ends_with("_short"), short, "{ctx}: {with}");
        assert_ne!(family(&without), KernelFamily::HopperShort, "{ctx}: short rows are off: {without}");
        // A 16-bit C keeps the five-stage kernel (the short-row kernels are f32 C only).
        let f16_out = plan_of::<f16>(&on, &a, n, ep);
        assert_ne!(family(&f16_out), KernelFamily::HopperShort, "{ctx}: f16 C: {f16_out}");
        if short {
            assert_eq!(family(&without), KernelFamily::Hopper, "{ctx}: {without}");
            assert_ne!(with.kernel, without.kernel, "{ctx}");
        } else {
            assert_eq!(with.kernel, without.kernel, "{ctx}");
        }
    }
}

/// A grid of more than one wave (asserted): bs 16 (the wide tile), 1024 block rows and two N tiles, so
/// the launcher keeps the longest-rows-first order (one-wave grids take the natural order), bit-exact against the
/// oracle on skewed and uniform rows.
#[test]
fn many_wave_grids_are_exact() {
    let Some(gpu) = own_gpu("many_wave_grids_are_exact", |g| g) else { return };
    let (bs, m, k, n) = (16, 16384, 512, 512);
    for (pattern, beta) in [(Pattern::Skewed, 1.0f32), (Pattern::Uniform, 0.0)] {
        let (a, b, c0) = exact_operands(pattern, (m, k, n), bs, 0.3, beta, 4242);
        let ep = Epilogue::new(1.0, beta);
        let expected = sparsek::cpu::reference(&a, &b, &c0, ep).unwrap();
        let (got, plan) = spmm_planned(&gpu, &a, &b, &c0, ep);
        // The grid must need more than one wave (so the rows run longest first), or this tests the one-wave path
        // again.
        assert!(plan.longest_rows_first && plan.ctas as usize > m / bs, "not a grid of several waves: {plan}");
        let report = compare_exact(&got, &expected);
        assert!(report.passed(), "bs{bs} {m}x{k}x{n} {pattern} beta={beta}: {report}");
    }
}

/// Larger shapes with long, skewed rows (deep pipelines, many CTAs, row reordering), f32 and f16 out.
#[test]
fn larger_shapes_match_oracle() {
    let Some(gpu) = gpu("larger_shapes_match_oracle") else { return };
    for (i, &(bs, m, k, n)) in
        [(16, 1024, 2048, 300), (32, 1024, 2048, 256), (64, 1024, 2048, 257), (128, 1024, 2048, 512)].iter().enumerate()
    {
        for pattern in [Pattern::Skewed, Pattern::Uniform] {
            let case = Case {
                bs,
                block_rows: m / bs,
                block_cols: k / bs,
                n,
                pad: 8,
                density: 0.2,
                pattern,
                alpha: 1.0,
                beta: 0.5,
                seed: 77 + i as u64,
            };
            run_case::<f32>(gpu, &case).unwrap();
            run_case::<f16>(gpu, &Case { beta: 0.0, ..case }).unwrap();
        }
    }
}

/// Stress: many launches of random shapes queued back to back on one stream (no synchronisation between them,
/// so a persistent kernel's tail overlaps the next launch's start), every result checked afterwards against the
/// oracle. A hang, a race between launches or a stale barrier phase shows up here. SPARSEK_GPU_CASES scales it.
#[test]
fn back_to_back_random_launches_all_match() {
    let Some(gpu) = gpu("back_to_back_random_launches_all_match") else { return };
    let launches = (gpu_cases(300) as usize).clamp(8, 200);
    let mut rng = sparsek::rng::Rng::new(0x5eed_ba5e);
    let mut queued = Vec::new();
    for i in 0..launches {
        // Mostly the block sizes with sm_90a kernels, N on both sides of the narrow-tile threshold.
        let bs = [64usize, 128, 64, 128, 32, 16][rng.next_u64() as usize % 6];
        let (block_rows, block_cols) = (1 + rng.next_u64() as usize % 12, 1 + rng.next_u64() as usize % 12);
        let n = [1usize, 65, 129, 200, 256, 257, 500][rng.next_u64() as usize % 7];
        let pattern = [Pattern::Uniform, Pattern::Skewed, Pattern::Banded][rng.next_u64() as usize % 3];
        let density = (rng.next_u64() % 1000) as f64 / 1000.0;
        let beta = [0.0f32, 1.0, -0.5][i % 3];
        let (m, k) = (block_rows * bs, block_cols * bs);
        let seed = rng.next_u64();
        let a: Bsr<f16> = generate(pattern, m, k, bs, density, seed).unwrap();
        let b = Matrix::<f16>::random(k, n, seed ^ 0xb).unwrap();
        let c0 = initial_c::<f32>(m, n, n.next_multiple_of(4), beta, seed ^ 0xc);
        let ep = Epilogue::new(1.0, beta);
        let expected = Expected::compute(&a, &b, &c0, ep, RowSample::All, |_, _| {}).unwrap();
        let (a_d, b_d) = (gpu.upload(&a).unwrap(), gpu.upload_matrix(&b).unwrap());
        let mut c_d = gpu.upload_matrix(&c0).unwrap();
        // Every other launch the heuristic gives the sm_90a short-row kernel takes the five-stage one instead.
        let five_stage = i % 2 == 1 && takes_short_rows(gpu, &a_d, n, ep);
        if five_stage {
            gpu.spmm_with_plan(&Plan::new(KernelFamily::Hopper), &a_d, &b_d, &mut c_d, ep).unwrap();
        } else {
            gpu.spmm(&a_d, &b_d, &mut c_d, ep).unwrap();
        }
        let ctx = format!(
            "launch {i}: m={m} k={k} n={n} bs={bs} nnzb={} {pattern} beta={beta} seed={seed} five-stage={five_stage}",
            a.nnzb()
        );
        queued.push((a_d, b_d, c_d, expected, ctx));
    }
    for (_, _, c_d, expected, ctx) in &queued {
        let report = expected.check(&c_d.to_host().unwrap());
        assert!(report.passed(), "{ctx}: {report}");
    }
}

/// The same inputs twice give bit-identical outputs (a race would make them differ).
#[test]
fn repeated_launches_are_bit_identical() {
    let Some(gpu) = gpu("repeated_launches_are_bit_identical") else { return };
    // N = 263 takes the wide (or sm_90a) kernels, 40 the narrow tile, 1 and 16 the decode kernels (whose warps'
    // partial sums are added in a fixed order).
    for (bs, n) in [16, 32, 64, 128].into_iter().flat_map(|bs| [(bs, 263), (bs, 40), (bs, 16), (bs, 1)]) {
        let (m, k) = (512, 2048);
        let a: Bsr<f16> = generate(Pattern::Skewed, m, k, bs, 0.3, bs as u64).unwrap();
        let b = Matrix::<f16>::random(k, n, 5).unwrap();
        let (a_d, b_d) = (gpu.upload(&a).unwrap(), gpu.upload_matrix(&b).unwrap());
        let mut outs = Vec::new();
        for _ in 0..3 {
            let mut c_d =
                gpu.upload_matrix(&Matrix::<f32>::filled(m, n, n.next_multiple_of(4), f32::NAN).unwrap()).unwrap();
            gpu.spmm(&a_d, &b_d, &mut c_d, Epilogue::default()).unwrap();
            outs.push(c_d.to_host().unwrap());
        }
        for o in &outs[1..] {
            let same = o.as_slice().iter().zip(outs[0].as_slice()).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "bs{bs} n={n}: two launches on the same inputs differ (race?)");
        }
    }
}

/// A decode launch that reads A once (at most 64 columns in one N tile: the narrow, mid and decode kernels) with
/// at least an eighth of L2 in A carries an L2 access policy window marking A's values evict-first
/// (`Policy::a_evict_first`); launches of several N tiles and wide ones go without it. Every result passes the
/// oracle (256 random rows, the first and the last) and equals a plain launch's bit for bit: the window decides
/// which lines L2 evicts first, never a value.
#[test]
fn a_evict_first_launches_match_plain_launches() {
    let test = "a_evict_first_launches_match_plain_launches";
    let Some(gpu) = gpu(test) else { return };
    let Some(plain) = own_gpu(test, |g| g.with_policy(Policy { a_evict_first: false, ..test_policy() })) else {
        return;
    };
    let (m, k) = (4096, 8192);
    for bs in [16, 32, 64, 128] {
        let a: Bsr<f16> = generate(Pattern::Uniform, m, k, bs, 0.3, 40 + bs as u64).unwrap();
        let a_bytes = (a.nnzb() * bs * bs * 2) as u64;
        assert!(
            a_bytes >= gpu.info().l2_bytes / 8,
            "test setup: A ({a_bytes} bytes) must be large enough for the window"
        );
        let (a_d, a_plain) = (gpu.upload(&a).unwrap(), plain.upload(&a).unwrap());
        for n in [1, 16, 40, 64, 300] {
            let b = Matrix::<f16>::random(k, n, 41 + n as u64).unwrap();
            let c0 = Matrix::<f32>::filled(m, n, n.next_multiple_of(4), f32::NAN).unwrap();
            let ep = Epilogue::default();
            let rows = RowSample::Random { count: 256, seed: n as u64 };
            let expected = Expected::compute(&a, &b, &c0, ep, rows, |_, _| {}).unwrap();
            let run = |g: &Gpu, a: &DeviceBsr| {
                let (b_d, mut c_d) = (g.upload_matrix(&b).unwrap(), g.upload_matrix(&c0).unwrap());
                g.spmm(a, &b_d, &mut c_d, ep).unwrap();
                c_d.to_host().unwrap()
            };
            let marked = run(gpu, &a_d);
            let report = expected.check(&marked);
            assert!(report.passed(), "bs{bs} n={n}, A evict-first: {report}");
            let unmarked = run(&plain, &a_plain);
            let same = marked.as_slice().iter().zip(unmarked.as_slice()).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "bs{bs} n={n}: A evict-first and plain launches differ");
        }
    }
}

/// `Gpu`, `DeviceBsr` and `DeviceMatrix` are `Send + Sync`: several threads launch on one `Gpu`, half of them on
/// the default stream and half on streams of their own, each into its own C, and every result is bit-identical to
/// a single-threaded launch (which passes the oracle). cudarc's event tracking orders each download after the
/// launch that wrote the buffer, whichever stream that was.
#[test]
fn threads_and_streams_give_identical_results() {
    let Some(gpu) = gpu("threads_and_streams_give_identical_results") else { return };
    let (m, k, n) = (512, 1024, 200);
    let a: Bsr<f16> = generate(Pattern::Skewed, m, k, 64, 0.3, 21).unwrap();
    threads_match_one_launch(gpu, &a, n, 22, Epilogue::new(0.5, -1.0), 5);
}

/// Empty is valid on the GPU too: 0 rows, 0 columns of A (K = 0), N = 0, no blocks; uploads, the launch (or no
/// launch) and downloads work, and C becomes beta * C.
#[test]
fn empty_shapes_on_the_gpu() {
    let Some(gpu) = gpu("empty_shapes_on_the_gpu") else { return };
    for (m, k, n) in [(0, 0, 0), (0, 64, 8), (128, 0, 8), (128, 64, 0), (0, 0, 5), (64, 64, 1)] {
        for density in [0.0, 1.0] {
            let a: Bsr<f16> = generate(Pattern::Uniform, m, k, 64, density, 3).unwrap();
            let b = Matrix::<f16>::random(k, n, 4).unwrap();
            let c0 = Matrix::<f32>::random(m, n, 5).unwrap();
            let ep = Epilogue::new(1.0, 0.5);
            let (a_d, b_d) = (gpu.upload(&a).unwrap(), gpu.upload_matrix(&b).unwrap());
            let mut c_d = gpu.upload_matrix(&c0).unwrap();
            gpu.spmm(&a_d, &b_d, &mut c_d, ep).unwrap();
            let got = c_d.to_host().unwrap();
            assert_eq!((got.rows(), got.cols()), (m, n));
            let report = Expected::compute(&a, &b, &c0, ep, RowSample::All, |_, _| {}).unwrap().check(&got);
            assert!(report.passed(), "{m}x{k}x{n} density {density}: {report}");
            let mut c16 = gpu.zeros::<f16>(m, n).unwrap();
            gpu.spmm(&a_d, &b_d, &mut c16, Epilogue::default()).unwrap();
            assert_eq!(c16.to_host().unwrap().rows(), m);
        }
    }
}

/// Rejected calls return typed errors and leave C untouched.
#[test]
fn bad_calls_are_rejected_and_change_nothing() {
    let Some(gpu) = gpu("bad_calls_are_rejected_and_change_nothing") else { return };
    let a: Bsr<f16> = generate(Pattern::Uniform, 128, 256, 64, 0.5, 1).unwrap();
    let a_d = gpu.upload(&a).unwrap();
    let b_wrong = gpu.upload_matrix(&Matrix::<f16>::random(128, 32, 2).unwrap()).unwrap(); // K should be 256
    let c0 = Matrix::<f32>::random(128, 32, 3).unwrap().with_ld(32, 0.0).unwrap();
    let mut c_d = gpu.upload_matrix(&c0).unwrap();
    let err = gpu.spmm(&a_d, &b_wrong, &mut c_d, Epilogue::default()).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { a: (128, 256), b: (128, 32), c: (128, 32) }), "{err:?}");
    let b = gpu.upload_matrix(&Matrix::<f16>::random(256, 32, 2).unwrap()).unwrap();
    let mut c_wrong = gpu.upload_matrix(&Matrix::<f32>::random(64, 32, 4).unwrap()).unwrap();
    assert!(matches!(gpu.spmm(&a_d, &b, &mut c_wrong, Epilogue::default()), Err(Error::ShapeMismatch { .. })));
    assert_eq!(c_d.to_host().unwrap(), c0, "a rejected call wrote C");
}

/// Empty shapes: M = 0 or a matrix without blocks (beta * C, or 0 with beta = 0 even over NaN).
#[test]
fn empty_rows_give_beta_c() {
    let Some(gpu) = gpu("empty_rows_give_beta_c") else { return };
    let a: Bsr<f16> = generate(Pattern::Empty, 256, 512, 32, 0.0, 1).unwrap();
    let a_d = gpu.upload(&a).unwrap();
    let b_d = gpu.upload_matrix(&Matrix::<f16>::random(512, 40, 1).unwrap()).unwrap();
    let c0 = Matrix::<f32>::random(256, 40, 9).unwrap();
    let mut c_d = gpu.upload_matrix(&c0).unwrap();
    gpu.spmm(&a_d, &b_d, &mut c_d, Epilogue::new(1.0, 2.0)).unwrap();
    let got = c_d.to_host().unwrap();
    for r in 0..256 {
        for c in 0..40 {
            assert_eq!(got.get(r, c), 2.0 * c0.get(r, c), "({r}, {c})");
        }
    }
    let mut c_nan = gpu.upload_matrix(&Matrix::<f32>::filled(256, 40, 40, f32::NAN).unwrap()).unwrap();
    gpu.spmm(&a_d, &b_d, &mut c_nan, Epilogue::default()).unwrap();
    assert!(c_nan.to_host().unwrap().as_slice().iter().all(|v| *v == 0.0));
    let a0: Bsr<f16> = Bsr::try_new(0, 512, 32, vec![0], vec![], vec![]).unwrap();
    let a0_d = gpu.upload(&a0).unwrap();
    let mut c0_d = gpu.zeros::<f32>(0, 40).unwrap();
    gpu.spmm(&a0_d, &b_d, &mut c0_d, Epilogue::default()).unwrap();
}
