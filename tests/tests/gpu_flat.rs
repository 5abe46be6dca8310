//! The flat block list (`RowSplit::Flat`, `layout::Tile::Flat`, `BsrSpmmParams::flat_ctas`): in place of the
//! narrow kernel at bs 64 and 128 (f16 in, f32 out), CTAs each multiply an equal share of A's blocks across row
//! boundaries, and a row cut by a share's boundary is summed from its pieces in piece order. Against the f64
//! oracle with poisoned outputs, on uniform and skewed rows (one row holding most blocks, its pieces spread over
//! many CTAs), with empty block rows at the start, inside and at the end, N from 1 to 16, alpha and beta, a wave
//! of CTAs and fewer; integer-valued cases bit-equal to the oracle and to whole rows; the same bits run to run
//! (which CTA finds a row's pieces in moves between launches); launches from several threads and streams; the
//! launches it does not serve (f16 C, bs 32, the mid tile) keep the narrow kernels. Without a GPU every test
//! prints a skip line.

use proptest::prelude::*;
use sparsek::check::compare_exact;
use sparsek::format::{Pattern, generate, generate_int};
use sparsek::gpu::{Decomposition, DeviceBsr, Gpu, LaunchPlan, OutputElement};
use sparsek::plan::{Policy, RowSplit};
use sparsek::{Bsr, Epilogue, f16};
use sparsek_tests::{
    ROW_MAJOR, check_planned, exact_b_c, gpu_cases, longest, own_gpu, plan_of, plan_unscheduled, same_bits,
    spmm_planned, test_policy, threads_match_one_launch,
};

/// A Gpu whose few-column launches take the narrow kernels (decode off), rows as `split` says.
fn narrow_gpu(test: &str, split: RowSplit) -> Option<Gpu> {
    own_gpu(test, |g| g.with_policy(Policy { decode: false, row_split: split, ..test_policy() }))
}

/// The CTAs per N tile of a plan's flat list, if it walks one.
fn flat_in(plan: &LaunchPlan) -> Option<u32> {
    match plan.decomposition {
        Decomposition::FlatList { ctas_per_tile } => Some(ctas_per_tile),
        _ => None,
    }
}

/// The CTAs per N tile of the flat list the launch of `a` times `n` columns into a `TC` C gets on `gpu`, if any
/// (`Gpu::plan`).
fn flat_of<TC: OutputElement>(gpu: &Gpu, a: &Bsr<f16>, n: usize) -> Option<u32> {
    flat_in(&plan_of::<TC>(gpu, a, n, Epilogue::default()))
}

/// [`flat_of`] for an uploaded A.
fn flat_of_uploaded<TC: OutputElement>(gpu: &Gpu, a: &DeviceBsr<f16>, n: usize) -> Option<u32> {
    flat_in(&gpu.plan::<f16, TC>(a, n, ROW_MAJOR, Epilogue::default()).unwrap())
}

/// `a` with `empty` empty block rows inserted before block row `at[i]` for each `i` (an index past the last row
/// appends them): the same blocks, more rows.
fn with_empty_rows(a: &Bsr<f16>, at: &[usize], empty: usize) -> Bsr<f16> {
    let bs = a.block_size();
    let mut row_ptr = vec![0u32];
    let block_rows = a.rows() / bs;
    for r in 0..=block_rows {
        for _ in 0..at.iter().filter(|&&x| x == r).count() * empty {
            row_ptr.push(*row_ptr.last().unwrap());
        }
        if r < block_rows {
            row_ptr.push(a.row_ptr()[r + 1]);
        }
    }
    let rows = (row_ptr.len() - 1) * bs;
    Bsr::try_new(rows, a.cols(), bs, row_ptr, a.col_idx().to_vec(), a.values().to_vec()).unwrap()
}

/// Random A (uniform or skewed, some with empty block rows), bs 64 and 128, 1 to 16 columns (and at bs 64 17 to
/// 32 and 33 to 64: bs 64's tiles of 32 and 64 columns, or the narrow tile over several N tiles), a wave of CTAs or
/// one per SM (fewer when A has fewer blocks): every launch walks the flat list (asserted) and matches the oracle,
/// C poisoned (beta 0) or random (beta 0.5).
#[test]
fn flat_list_matches_oracle() {
    let test = "flat_list_matches_oracle";
    let Some(gpu) = narrow_gpu(test, RowSplit::Flat(0)) else { return };
    let fewer = narrow_gpu(test, RowSplit::Flat(1)).unwrap();
    let strategy = (
        prop::sample::select(vec![64usize, 128]),
        1usize..=40,
        prop_oneof![Just(1usize), Just(8), Just(16), 1usize..=16, Just(32), 17usize..=32, Just(64), 33usize..=64],
        prop::sample::select(vec![Pattern::Uniform, Pattern::Skewed]),
        0.1f64..=1.0,
        prop::sample::select(vec![(1.0f32, 0.0f32), (-2.0, 0.5)]),
        0usize..4,
        0u32..2,
        any::<u64>(),
    );
    let sms = gpu.info().sm_count as usize;
    let config = ProptestConfig { cases: gpu_cases(60), failure_persistence: None, ..ProptestConfig::default() };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result = runner.run(&strategy, |(bs, rows, n, pattern, density, (alpha, beta), empty, per_sm, seed)| {
        // Mostly more blocks than the wave's CTAs (2-3 per SM), sometimes fewer: one CTA per block.
        let cols = ((4 * sms) as f64 / (rows as f64 * density)).ceil() as usize / (1 + (seed % 3) as usize);
        let cols = cols.clamp(8, 32768 / bs);
        let a: Bsr<f16> = generate(pattern, rows * bs, cols * bs, bs, density, seed).unwrap();
        let a = if empty > 0 { with_empty_rows(&a, &[0, rows / 2, rows], empty) } else { a };
        let ctx = format!(
            "bs{bs} {}x{}x{n} nnzb={} {pattern} alpha={alpha} beta={beta} empty rows {empty} x3 seed={seed}",
            a.rows(),
            a.cols(),
            a.nnzb(),
        );
        let gpu = if per_sm == 0 { &gpu } else { &fewer };
        let ctx = format!("{ctx} (per SM {per_sm})");
        let (_, plan) = check_planned::<f32>(gpu, &a, n, (alpha, beta), seed, &ctx).map_err(TestCaseError::fail)?;
        // Above 16 columns bs 128 has no flat kernel for its tiles of 32 and 64 columns (small grids may still take
        // the narrow tile's, over several N tiles).
        if bs == 64 || n <= 16 {
            let ctas = flat_in(&plan);
            prop_assert!(ctas.is_some_and(|g| g as usize <= a.nnzb()), "{ctx}: flat list {ctas:?}: {plan}");
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{test}: {e}");
    }
}

/// An exact case: block size, block rows, block columns, pattern, density, where empty rows go.
type ExactCase = (usize, usize, usize, Pattern, f64, &'static [usize]);

/// Integer-valued A, B and C (every sum exact in f32): the flat list, whole rows and the oracle agree bit for
/// bit, on uniform, skewed and dense A, one row holding most blocks, rows of one block, and empty block rows first,
/// inside and last; and repeated flat launches give the same bits, random values too.
#[test]
fn flat_list_is_exact_and_deterministic() {
    let test = "flat_list_is_exact_and_deterministic";
    let Some(flat) = narrow_gpu(test, RowSplit::Flat(0)) else { return };
    let whole = narrow_gpu(test, RowSplit::Off).unwrap();
    let sms = flat.info().sm_count as usize;
    let cases: [ExactCase; 8] = [
        (64, 256, 56, Pattern::Uniform, 0.25, &[]),
        (64, 64, 40, Pattern::Skewed, 0.5, &[0, 64]),
        (64, 32, 24, Pattern::Dense, 1.0, &[0, 16, 32]),
        (128, 128, 40, Pattern::Uniform, 0.22, &[]),
        (128, 24, 24, Pattern::Skewed, 0.9, &[3]),
        // Rows of about one block: each CTA's share crosses many rows.
        (64, 8 * sms, 8, Pattern::Uniform, 0.15, &[0]),
        // One row of the 256 holding nearly all blocks (the skewed pattern at low density).
        (64, 256, 512, Pattern::Skewed, 0.02, &[]),
        (128, 4, 200, Pattern::Uniform, 0.7, &[2, 4]),
    ];
    for (i, (bs, rows, cols, pattern, density, empty_at)) in cases.into_iter().enumerate() {
        for (n, beta) in [(1usize, 0.0f32), (16, 1.0), (7, -1.0), (24, 0.0), (48, 1.0)] {
            if bs == 128 && n > 16 {
                continue; // no flat kernel for bs 128's tiles of 32 and 64 columns
            }
            let seed = (i * 100 + n) as u64;
            let a: Bsr<f16> = generate_int(pattern, rows * bs, cols * bs, bs, density, seed, 4).unwrap();
            let a = with_empty_rows(&a, empty_at, 3);
            let (m, k) = (a.rows(), a.cols());
            let (b, c0) = exact_b_c((m, k, n), beta, seed);
            let ctx = format!("bs{bs} {m}x{k}x{n} {pattern} beta={beta} nnzb={} longest={}", a.nnzb(), longest(&a));
            let ep = Epilogue::new(1.0, beta);
            let expected = sparsek::cpu::reference(&a, &b, &c0, ep).unwrap();
            let (got, plan) = spmm_planned(&flat, &a, &b, &c0, ep);
            assert!(flat_in(&plan).is_some(), "{ctx}: no flat list: {plan}");
            let report = compare_exact(&got, &expected);
            assert!(report.passed(), "{ctx}: flat list: {report}");
            let (whole_got, whole_plan) = spmm_planned(&whole, &a, &b, &c0, ep);
            assert_eq!(whole_plan.decomposition, Decomposition::WholeRows, "{ctx}: RowSplit::Off: {whole_plan}");
            let report = compare_exact(&whole_got, &expected);
            assert!(report.passed(), "{ctx}: whole rows: {report}");
            for j in 0..3 {
                let (again, again_plan) = spmm_planned(&flat, &a, &b, &c0, ep);
                assert_eq!(again_plan, plan, "{ctx}: flat launch {j}");
                assert!(same_bits(&again, &got), "{ctx}: flat launch {j} differs from the first");
            }
        }
    }
    // Random values, rows cut into pieces: the same bits on every launch.
    for (bs, pattern) in [(64usize, Pattern::Uniform), (64, Pattern::Skewed), (128, Pattern::Uniform)] {
        let a: Bsr<f16> = generate(pattern, 8192, 8192, bs, 0.2, 5).unwrap();
        let ctx = format!("bs{bs} {pattern} random");
        let (first, plan) = check_planned::<f32>(&flat, &a, 8, (1.0, 0.0), 6, &ctx).unwrap();
        assert!(flat_in(&plan).is_some(), "{ctx}: no flat list: {plan}");
        for i in 0..5 {
            let (again, _) = check_planned::<f32>(&flat, &a, 8, (1.0, 0.0), 6, &ctx).unwrap();
            assert!(same_bits(&again, &first), "{ctx}: launch {i} differs from the first (race in the hand-over?)");
        }
    }
}

/// Launches the flat kernels do not serve (f16 C, bs 32, bs 128's mid tile of 32 columns) keep their whole-row
/// kernels and still match the oracle.
#[test]
fn flat_list_falls_back_where_it_does_not_apply() {
    let test = "flat_list_falls_back_where_it_does_not_apply";
    let Some(gpu) = narrow_gpu(test, RowSplit::Flat(0)) else { return };
    let a: Bsr<f16> = generate(Pattern::Uniform, 4096, 4096, 64, 0.2, 9).unwrap();
    let bs32: Bsr<f16> = generate(Pattern::Uniform, 4096, 4096, 32, 0.2, 10).unwrap();
    let bs128: Bsr<f16> = generate(Pattern::Uniform, 4096, 4096, 128, 0.2, 11).unwrap();
    let no_flat = |plan: &LaunchPlan, ctx: &str| assert!(flat_in(plan).is_none(), "{ctx}: flat list: {plan}");
    for (ab, ctx) in [((1.0, 0.0), "f16 C"), ((-2.0, 0.5), "f16 C, beta")] {
        no_flat(&check_planned::<f16>(&gpu, &a, 8, ab, 9, ctx).unwrap().1, ctx);
    }
    no_flat(&check_planned::<f32>(&gpu, &bs32, 8, (1.0, 0.0), 10, "bs 32").unwrap().1, "bs 32");
    let plan = check_planned::<f32>(&gpu, &bs128, 32, (1.0, 0.0), 11, "bs 128 mid tile").unwrap().1;
    no_flat(&plan, "bs 128, 32 columns");
}

/// Flat launches from eight threads, half on the default stream and half on streams of their own, all sharing
/// the Gpu's workspace: each result is bit-identical to the single-threaded one.
#[test]
fn flat_launches_on_many_streams_are_ordered() {
    let test = "flat_launches_on_many_streams_are_ordered";
    let Some(gpu) = narrow_gpu(test, RowSplit::Flat(0)) else { return };
    let a: Bsr<f16> = generate(Pattern::Uniform, 8192, 8192, 64, 0.1, 41).unwrap();
    assert!(flat_of::<f32>(&gpu, &a, 16).is_some(), "no flat list");
    threads_match_one_launch(&gpu, &a, 16, 42, Epilogue::new(0.5, -1.0), 8);
}

/// What a launch's plan holds of the flat list.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Flat {
    /// The flat list over two CTAs per SM per N tile (the auto setting's).
    TwoPerSm,
    /// A flat list.
    Any,
    /// No flat list.
    No,
}

/// One launch of the auto cases: A's pattern, M = K, bs, density and seed; N, an f16 C (else f32), what the plan
/// holds, why.
type AutoLaunch = (Pattern, usize, usize, f64, u64, usize, bool, Flat, &'static str);

/// `RowSplit::Auto` takes the flat list (two CTAs per SM) for one N tile, many k-tiles per CTA and rows of
/// unequal length, and keeps whole rows on rows of equal length (banded), on few k-tiles per CTA, for f16 C and
/// without the longest row; on bs 64's tiles of 32 and 64 columns where the busiest SM's whole rows exceed an
/// equal share by enough; the auto launches (with the flat list) match the oracle, each running the plan
/// `Gpu::plan` predicted.
#[test]
fn auto_takes_the_flat_list_where_it_measured_faster() {
    let test = "auto_takes_the_flat_list_where_it_measured_faster";
    let Some(gpu) = narrow_gpu(test, RowSplit::Auto) else { return };
    let two_per_sm = 2 * gpu.info().sm_count;
    use Flat::{Any, No, TwoPerSm};
    let launches: [AutoLaunch; 16] = [
        (Pattern::Uniform, 16384, 64, 0.22, 21, 8, false, TwoPerSm, "uniform"),
        (Pattern::Uniform, 16384, 64, 0.22, 21, 8, true, No, "f16 C"),
        (Pattern::Uniform, 16384, 64, 0.22, 21, 32, false, TwoPerSm, "32 columns"),
        (Pattern::Uniform, 16384, 64, 0.22, 21, 64, false, TwoPerSm, "64 columns"),
        (Pattern::Skewed, 16384, 64, 0.22, 22, 1, false, Any, "skewed rows"),
        (Pattern::Banded, 16384, 64, 0.22, 23, 8, false, No, "rows of equal length"),
        (Pattern::Banded, 16384, 64, 0.22, 23, 64, false, No, "64 columns, rows of equal length"),
        (Pattern::Banded, 16384, 64, 0.22, 23, 24, false, No, "24 columns, rows of equal length"),
        (Pattern::Uniform, 16384, 128, 0.22, 24, 8, false, TwoPerSm, "bs 128 at 22%"),
        (Pattern::Uniform, 16384, 128, 0.1, 31, 8, false, No, "bs 128 at 10%: too few k-tiles per CTA"),
        (Pattern::Uniform, 16384, 128, 0.5, 26, 1, false, TwoPerSm, "bs 128 at 50%"),
        (Pattern::Uniform, 16384, 64, 0.1, 27, 1, false, No, "bs 64 at 10%: too few k-tiles per CTA"),
        (Pattern::Uniform, 8192, 64, 0.22, 25, 8, false, No, "8192 x 8192: too few k-tiles per CTA"),
        (Pattern::Skewed, 8192, 64, 0.1, 29, 48, false, Any, "48 columns, skewed rows"),
        (Pattern::Skewed, 8192, 64, 0.1, 29, 20, false, Any, "20 columns, skewed rows"),
        (Pattern::Uniform, 8192, 64, 0.05, 30, 64, false, No, "64 columns, rows of about 6 blocks"),
    ];
    // Each matrix made and uploaded once (consecutive launches share it).
    let mut current: Option<(u64, Bsr<f16>, DeviceBsr<f16>)> = None;
    let mut launched = 0;
    for (pattern, m, bs, density, seed, n, f16_c, want, what) in launches {
        if current.as_ref().is_none_or(|(s, ..)| *s != seed) {
            let a: Bsr<f16> = generate(pattern, m, m, bs, density, seed).unwrap();
            let a_d = gpu.upload(&a).unwrap();
            current = Some((seed, a, a_d));
        }
        let (_, a, a_d) = current.as_ref().unwrap();
        let ctas = if f16_c { flat_of_uploaded::<f16>(&gpu, a_d, n) } else { flat_of_uploaded::<f32>(&gpu, a_d, n) };
        let got = match ctas {
            Some(g) if g == two_per_sm => TwoPerSm,
            Some(_) => Any,
            None => No,
        };
        assert!(got == want || (want == Any && got == TwoPerSm), "{what}: {ctas:?}, {two_per_sm} is two per SM");
        // Each flat list runs against the oracle, alpha and beta alternating.
        if want != No {
            let ab = if launched % 2 == 0 { (1.0, 0.0) } else { (-2.0, 0.5) };
            let ctx = format!("auto, {what}");
            let (_, plan) = check_planned::<f32>(&gpu, a, n, ab, seed + n as u64, &ctx).unwrap();
            assert!(flat_in(&plan).is_some(), "{ctx}: {plan}");
            launched += 1;
        }
        if (seed, n) == (21, 8) && !f16_c {
            let unknown = plan_unscheduled::<f32>(&gpu, a, 8, Epilogue::default());
            assert_eq!(flat_in(&unknown), None, "longest row unknown: {unknown}");
        }
    }
    assert_eq!(launched, 8, "the auto launches checked against the oracle");
}
