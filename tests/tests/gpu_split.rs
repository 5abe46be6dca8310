//! Split rows (`Policy::row_split`, host/src/gpu/split.rs): the narrow kernels spread a long block row over
//! several CTAs and the row's last CTA adds the parts' partial tiles in part order. Against the f64 oracle with
//! poisoned outputs, on uniform and skewed rows (one row holding most blocks), every block size, N from 1 to 64
//! with tails, f32 and f16 C, alpha and beta; exact integer-valued cases bit-equal to the oracle and to whole
//! rows; the same bits run to run; and split launches from several threads on several streams, which share the
//! Gpu's workspace, each giving the single-threaded result. Without a GPU every test prints a skip line.

use proptest::prelude::*;
use sparsek::check::compare_exact;
use sparsek::format::{Pattern, generate, generate_int};
use sparsek::gpu::{Decomposition, Gpu, LaunchPlan, OutputElement};
use sparsek::plan::{Policy, RowSplit};
use sparsek::tune::KernelFamily;
use sparsek::{Bsr, Epilogue, Matrix, f16};
use sparsek_tests::{
    check_planned, exact_operands, family, gpu_cases, longest, own_gpu, plan_of, plan_unscheduled, same_bits,
    spmm_planned, test_policy, threads_match_one_launch,
};

/// A Gpu whose few-column launches take the narrow kernels (decode off), rows split as `split` says.
fn narrow_gpu(test: &str, split: RowSplit) -> Option<Gpu> {
    own_gpu(test, |g| g.with_policy(Policy { decode: false, row_split: split, ..test_policy() }))
}

/// Whether a plan splits rows (the narrow and mid tiles' split rows).
fn splits(plan: &LaunchPlan) -> bool {
    matches!(plan.decomposition, Decomposition::SplitRows { .. })
}

/// Whether a plan spreads long rows over several CTAs: split rows or the flat block list.
fn balances(plan: &LaunchPlan) -> bool {
    splits(plan) || matches!(plan.decomposition, Decomposition::FlatList { .. })
}

/// Whether the plan's kernel is one that can split rows: the narrow and mid tiles, but not bs 64's tile of 64
/// columns (`_n64`; bs 128's can).
fn can_split(plan: &LaunchPlan, bs: usize) -> bool {
    matches!(family(plan), KernelFamily::Narrow | KernelFamily::Mid) && !(bs == 64 && plan.kernel.ends_with("_n64"))
}

/// Integer-valued operands (every sum exact in f32, rounded once to C's type by both sides): the launch on `split`
/// (asserted to split rows) and on `whole` (asserted to run whole rows) both equal the oracle bit for bit, and three
/// more launches on `split` give the first one's bits; each launch ran the plan `Gpu::plan` predicted. Returns the
/// split launch's plan.
fn assert_exact_and_repeatable<TC: OutputElement>(
    (split, whole): (&Gpu, &Gpu),
    (a, b, c0): (&Bsr<f16>, &Matrix<f16>, &Matrix<TC>),
    ep: Epilogue,
    ctx: &str,
) -> LaunchPlan {
    let expected = sparsek::cpu::reference(a, b, c0, ep).unwrap();
    let (got, plan) = spmm_planned(split, a, b, c0, ep);
    assert!(splits(&plan), "{ctx}: not split: {plan}");
    let report = compare_exact(&got, &expected);
    assert!(report.passed(), "{ctx}: split rows: {report}");
    let (whole_got, whole_plan) = spmm_planned(whole, a, b, c0, ep);
    assert_eq!(whole_plan.decomposition, Decomposition::WholeRows, "{ctx}: RowSplit::Off: {whole_plan}");
    let report = compare_exact(&whole_got, &expected);
    assert!(report.passed(), "{ctx}: whole rows: {report}");
    for i in 0..3 {
        let (again, again_plan) = spmm_planned(split, a, b, c0, ep);
        assert_eq!(again_plan, plan, "{ctx}: split launch {i}");
        assert!(same_bits(&again, &got), "{ctx}: split launch {i} differs from the first");
    }
    plan
}

/// Random long-row cases (16-200 block columns, few block rows, uniform or skewed) with parts of 1-9 blocks,
/// every one split (asserted), against the oracle.
#[test]
fn split_rows_match_oracle() {
    let test = "split_rows_match_oracle";
    let Some(base) = narrow_gpu(test, RowSplit::Auto) else { return };
    let gpus: Vec<(u32, Gpu)> =
        (1..=9).map(|b| (b, narrow_gpu(test, RowSplit::Blocks(b)).unwrap())).chain([(0, base)]).collect();
    let strategy = (
        prop::sample::select(vec![16usize, 32, 64, 128]),
        1usize..=12,
        16usize..=200,
        prop_oneof![Just(1usize), Just(9), Just(16), Just(17), Just(64), 1usize..=64],
        prop::sample::select(vec![Pattern::Uniform, Pattern::Skewed]),
        0.2f64..=1.0,
        prop::sample::select(vec![(1.0f32, 0.0f32), (-2.0, 0.5)]),
        0usize..10,
        any::<u64>(),
    );
    let config = ProptestConfig { cases: gpu_cases(120), failure_persistence: None, ..ProptestConfig::default() };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result = runner.run(&strategy, |(bs, rows, cols, n, pattern, density, (alpha, beta), g, seed)| {
        let (blocks, gpu) = &gpus[g];
        let a: Bsr<f16> = generate(pattern, rows * bs, cols.min(8192 / bs) * bs, bs, density, seed).unwrap();
        let ctx = format!(
            "bs{bs} {}x{}x{n} nnzb={} longest={} {pattern} alpha={alpha} beta={beta} parts of {blocks} (0: auto) seed={seed}",
            a.rows(),
            a.cols(),
            a.nnzb(),
            longest(&a)
        );
        // An explicit part size splits every row longer than a part, where the kernel can split (not the BN 64
        // tile at bs 64 from 33 columns; bs 128 takes its BN 64 tile only on many blocks).
        let long_enough = *blocks > 0 && longest(&a) > *blocks as usize;
        let (_, plan) = check_planned::<f32>(gpu, &a, n, (alpha, beta), seed, &ctx).map_err(TestCaseError::fail)?;
        prop_assert!(!(can_split(&plan, bs) && long_enough) || splits(&plan), "{ctx}: expected a split: {plan}");
        let (_, plan) = check_planned::<f16>(gpu, &a, n, (alpha, beta), seed, &ctx).map_err(TestCaseError::fail)?;
        prop_assert!(!(can_split(&plan, bs) && long_enough) || splits(&plan), "{ctx}: expected a split: {plan}");
        Ok(())
    });
    if let Err(e) = result {
        panic!("{test}: {e}");
    }
}

/// Integer-valued A, B and C (every sum exact in f32): split rows, whole rows and the oracle agree bit for bit,
/// and repeated split launches give the same bits.
#[test]
fn split_rows_are_exact_and_deterministic() {
    let test = "split_rows_are_exact_and_deterministic";
    let Some(split) = narrow_gpu(test, RowSplit::Blocks(3)) else { return };
    let whole = narrow_gpu(test, RowSplit::Off).unwrap();
    for (bs, rows, cols, n) in
        [(16usize, 6usize, 300usize, 16usize), (32, 5, 120, 1), (64, 4, 64, 24), (128, 3, 48, 64)]
    {
        for (pattern, beta) in [(Pattern::Uniform, 0.0f32), (Pattern::Skewed, 1.0), (Pattern::Dense, -1.0)] {
            let (m, k) = (rows * bs, cols * bs);
            let seed = (bs * 1000 + n) as u64;
            let (a, b, c0) = exact_operands(pattern, (m, k, n), bs, 0.6, beta, seed);
            let ctx = format!("bs{bs} {m}x{k}x{n} {pattern} beta={beta} nnzb={}", a.nnzb());
            assert_exact_and_repeatable((&split, &whole), (&a, &b, &c0), Epilogue::new(1.0, beta), &ctx);
        }
    }
    // Random values: the same bits on every launch (the parts are added in part order, whichever CTA is last).
    let a: Bsr<f16> = generate(Pattern::Skewed, 512, 8192, 64, 0.4, 3).unwrap();
    let (first, plan) = check_planned::<f32>(&split, &a, 16, (1.0, 0.0), 4, "skewed random").unwrap();
    assert!(splits(&plan), "skewed random: not split: {plan}");
    for i in 0..5 {
        let (again, _) = check_planned::<f32>(&split, &a, 16, (1.0, 0.0), 4, "skewed random").unwrap();
        assert!(same_bits(&again, &first), "skewed random: launch {i} differs from the first (race in the hand-over?)");
    }
}

/// The bs-128 mid tile of 64 columns (`_n64`, 33 to 64 columns, on many blocks: at least 4 per SM today) splits
/// rows: random uniform and skewed A against every row of the oracle (f32 C poisoned, f16 C with beta),
/// integer-valued ones bit-equal to the oracle and to whole rows, and the same bits on every launch; every launch's
/// plan (the tile of 64, split) is the one `Gpu::plan` predicted. On few blocks the launch takes the tile of 32.
#[test]
fn bs128_tile_of_64_splits_rows() {
    let test = "bs128_tile_of_64_splits_rows";
    let Some(gpu) = narrow_gpu(test, RowSplit::Auto) else { return };
    let whole = narrow_gpu(test, RowSplit::Off).unwrap();
    let sms = gpu.info().sm_count as usize;
    // Few blocks (at most 256, under one per SM on a GPU of 100 SMs or more): the tile of 32.
    let few: Bsr<f16> = generate(Pattern::Uniform, 1024, 4096, 128, 0.7, 6999).unwrap();
    let plan = plan_of::<f32>(&gpu, &few, 64, Epilogue::default());
    assert!(plan.kernel.ends_with("_n32"), "{} blocks on {sms} SMs: {plan}", few.nnzb());
    // Eight block rows, enough block columns for 6 blocks per SM at density 0.7 (the tile of 64 asks for 4).
    let (bs, rows, density) = (128usize, 8usize, 0.7);
    let cols = (6 * sms).div_ceil(rows) * 10 / 7 + 1;
    let (m, k) = (rows * bs, cols * bs);
    for (i, n) in [33usize, 48, 64].into_iter().enumerate() {
        for (j, pattern) in [Pattern::Uniform, Pattern::Skewed].into_iter().enumerate() {
            let seed = 7000 + (i * 2 + j) as u64;
            let a: Bsr<f16> = generate(pattern, m, k, bs, density, seed).unwrap();
            let ctx = format!("bs{bs} {m}x{k}x{n} {pattern} nnzb={} on {sms} SMs", a.nnzb());
            let (_, plan) = check_planned::<f32>(&gpu, &a, n, (1.25, 0.0), seed, &ctx).unwrap();
            assert!(plan.kernel.ends_with("_n64") && splits(&plan), "{ctx}: {plan}");
            let (_, plan) = check_planned::<f16>(&gpu, &a, n, (0.75, -0.5), seed, &ctx).unwrap();
            assert!(plan.kernel.ends_with("_n64") && splits(&plan), "{ctx}: f16 C: {plan}");
            // Integer-valued: split, whole rows and the oracle bit for bit, and every split launch alike.
            let (a, b, c0) = exact_operands(pattern, (m, k, n), bs, density, 1.0, seed);
            let plan = assert_exact_and_repeatable((&gpu, &whole), (&a, &b, &c0), Epilogue::new(1.0, 1.0), &ctx);
            assert!(plan.kernel.ends_with("_n64"), "{ctx}: integer-valued: {plan}");
        }
    }
}

/// bs 64's tile of 64 columns (`_n64`, 33 to 64 columns) cannot split rows, and its flat block list serves only an
/// f32 C: with an f16 C and one row over four times the mean, `RowSplit::Auto` takes the tile of 32 in its place
/// (the plan's `skew_tile`), which splits that row over both N tiles. At 33, 48 and 64 columns: integer-valued
/// operands give the oracle's bits and whole rows' (the tile of 64, `RowSplit::Off`), on every launch; random
/// values match every row of the oracle (C poisoned, and with beta). An f32 C, uniform rows and `RowSplit::Off`
/// keep the tile of 64 (or its flat list).
#[test]
fn bs64_dominating_row_takes_the_tile_of_32() {
    let test = "bs64_dominating_row_takes_the_tile_of_32";
    let Some(gpu) = narrow_gpu(test, RowSplit::Auto) else { return };
    let whole = narrow_gpu(test, RowSplit::Off).unwrap();
    let (bs, rows, cols, density) = (64usize, 24usize, 100usize, 0.1);
    let (m, k) = (rows * bs, cols * bs);
    let ep = Epilogue::default();
    for (i, n) in [33usize, 48, 64].into_iter().enumerate() {
        let seed = 8100 + i as u64;
        let a: Bsr<f16> = generate_int(Pattern::Skewed, m, k, bs, density, seed, 4).unwrap();
        let long = longest(&a);
        let ctx = format!("bs{bs} {m}x{k}x{n} skewed nnzb={} longest={long}", a.nnzb());
        assert!(long > 4 * a.nnzb().div_ceil(rows), "{ctx}: no row over 4x the mean");
        let tile_of_32 = |plan: &LaunchPlan| {
            plan.skew_tile && plan.kernel.ends_with("_n32") && plan.kernel.contains("_f16_brow_f16") && splits(plan)
        };
        let plan = plan_of::<f16>(&gpu, &a, n, ep);
        assert!(tile_of_32(&plan) && family(&plan) == KernelFamily::Mid, "{ctx}: {plan}");
        let kept = plan_of::<f16>(&whole, &a, n, ep);
        assert!(!kept.skew_tile && kept.kernel.ends_with("_n64"), "{ctx}: RowSplit::Off: {kept}");
        let unknown = plan_unscheduled::<f16>(&gpu, &a, n, ep);
        assert!(!unknown.skew_tile && unknown.kernel.ends_with("_n64"), "{ctx}: longest row unknown: {unknown}");
        let f32_c = plan_of::<f32>(&gpu, &a, n, ep);
        let flat_or_64 =
            matches!(f32_c.decomposition, Decomposition::FlatList { .. }) || f32_c.kernel.ends_with("_n64");
        assert!(!f32_c.skew_tile && flat_or_64, "{ctx}: f32 C has its flat list: {f32_c}");
        // Integer-valued (every sum exact in f32, rounded once to f16 by both sides).
        let b = Matrix::<f16>::random_int(k, n, 4, seed ^ 1).unwrap();
        let c0 = Matrix::<f16>::random_int(m, n, 4, seed ^ 2).unwrap();
        let plan = assert_exact_and_repeatable((&gpu, &whole), (&a, &b, &c0), Epilogue::new(1.0, 1.0), &ctx);
        assert!(tile_of_32(&plan), "{ctx}: integer-valued: {plan}");
        // Random values.
        let a: Bsr<f16> = generate(Pattern::Skewed, m, k, bs, density, seed).unwrap();
        for ab in [(1.0, 0.0), (-2.0, 0.5)] {
            let (_, plan) = check_planned::<f16>(&gpu, &a, n, ab, seed, &ctx).unwrap();
            assert!(tile_of_32(&plan), "{ctx}: random values: {plan}");
        }
    }
    let uniform: Bsr<f16> = generate(Pattern::Uniform, m, k, bs, 0.3, 8200).unwrap();
    let plan = plan_of::<f16>(&gpu, &uniform, 64, ep);
    assert!(!plan.skew_tile && plan.kernel.ends_with("_n64"), "uniform rows: longest {}: {plan}", longest(&uniform));
}

/// Split launches from six threads, half on the default stream and half on streams of their own, all sharing
/// the Gpu's workspace: each result is bit-identical to the single-threaded one (unordered launches would mix
/// their partial tiles and counters).
#[test]
fn split_launches_on_many_streams_are_ordered() {
    let test = "split_launches_on_many_streams_are_ordered";
    let Some(gpu) = narrow_gpu(test, RowSplit::Blocks(2)) else { return };
    let a: Bsr<f16> = generate(Pattern::Uniform, 512, 8192, 64, 0.3, 31).unwrap();
    let ep = Epilogue::new(0.5, -1.0);
    let plan = plan_of::<f32>(&gpu, &a, 16, ep);
    assert!(splits(&plan), "not split: {plan}");
    threads_match_one_launch(&gpu, &a, 16, 32, ep, 8);
}

/// A long row at few columns goes to the narrow tile's split rows instead of the decode kernels (rows of 256 KiB or
/// more): 64 block rows of bs 64 (within the decode kernels' row limit) whose first row holds all 256 block columns
/// (2 MB) take the narrow tile, split (or on its flat block list), and match every row of the oracle; with
/// `RowSplit::Off` (no split to give the row), the longest row unknown, or rows of 112 KB they keep the decode
/// kernels.
#[test]
fn long_rows_leave_the_decode_kernels_for_split_rows() {
    let test = "long_rows_leave_the_decode_kernels_for_split_rows";
    let Some(gpu) = own_gpu(test, |g| g) else { return };
    let off = own_gpu(test, |g| g.with_policy(Policy { row_split: RowSplit::Off, ..test_policy() })).unwrap();
    let long: Bsr<f16> = generate(Pattern::Skewed, 4096, 16384, 64, 0.22, 0x71).unwrap();
    let short: Bsr<f16> = generate(Pattern::Uniform, 4096, 4096, 64, 0.22, 0x72).unwrap();
    assert_eq!(longest(&long), 256, "test setup: the first row is full");
    let ep = Epilogue::default();
    for n in [1usize, 9, 16] {
        let plan = plan_of::<f32>(&gpu, &long, n, ep);
        assert!(family(&plan) == KernelFamily::Narrow && balances(&plan), "N = {n}: the long row: {plan}");
        let plan = plan_of::<f32>(&off, &long, n, ep);
        assert_eq!(family(&plan), KernelFamily::Decode, "N = {n}: RowSplit::Off: {plan}");
        let plan = plan_unscheduled::<f32>(&gpu, &long, n, ep);
        assert_eq!(family(&plan), KernelFamily::Decode, "N = {n}: the longest row unknown: {plan}");
        let plan = plan_of::<f32>(&gpu, &short, n, ep);
        assert_eq!(family(&plan), KernelFamily::Decode, "N = {n}: short rows ({} blocks): {plan}", longest(&short));
        let ctx = format!("long row, N = {n}");
        let (_, plan) = check_planned::<f32>(&gpu, &long, n, (1.0, 0.0), 0x73 + n as u64, &ctx).unwrap();
        assert!(family(&plan) == KernelFamily::Narrow && balances(&plan), "{ctx}: {plan}");
        let (_, plan) = check_planned::<f16>(&gpu, &long, n, (0.5, -1.0), 0x83 + n as u64, &ctx).unwrap();
        assert!(family(&plan) == KernelFamily::Narrow && balances(&plan), "{ctx}, f16 C: {plan}");
    }
}
