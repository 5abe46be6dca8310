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
use sparsek::gpu::{Gpu, InType, OutType, RowSplit};
use sparsek::{Bsr, Epilogue, Layout, Matrix, f16};
use sparsek_tests::{check_case, exact_b_c, gpu_cases, own_gpu, spmm_once, threads_match_one_launch};

/// A Gpu whose few-column launches take the narrow kernels (decode off), rows as `split` says.
fn narrow_gpu(test: &str, split: RowSplit) -> Option<Gpu> {
    own_gpu(test, |g| g.with_decode(false).with_row_split(split))
}

/// The CTAs per N tile of the flat list the launch of `a` times `n` columns into C of `out` gets on `gpu`, if any.
fn flat_of(gpu: &Gpu, a: &Bsr<f16>, n: usize, out: OutType) -> Option<u32> {
    let types = (InType::F16, Layout::RowMajor, out, Layout::RowMajor);
    let longest = a.row_ptr().windows(2).map(|w| (w[1] - w[0]) as usize).max();
    let choice = gpu.plan_kernel(a.block_size(), types, (a.rows(), a.cols(), n), a.nnzb(), longest)?;
    gpu.flat_for(choice.kernel, (a.nnzb(), a.rows() / a.block_size(), n), longest).map(|(_, g)| g)
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
        let ctas = flat_of(gpu, &a, n, OutType::F32);
        // Above 16 columns bs 128 has no flat kernel for its tiles of 32 and 64 columns (small grids may still take
        // the narrow tile's, over several N tiles).
        if bs == 64 || n <= 16 {
            prop_assert!(ctas.is_some_and(|g| g as usize <= a.nnzb()), "{ctx}: flat list {ctas:?}");
        }
        let ctx = format!("{ctx} ctas={ctas:?} (per SM {per_sm})");
        check_case::<f32>(gpu, &a, n, (alpha, beta), seed, &ctx).map_err(TestCaseError::fail)?;
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
            let longest = a.row_ptr().windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
            let ctx = format!("bs{bs} {m}x{k}x{n} {pattern} beta={beta} nnzb={} longest={longest}", a.nnzb());
            assert!(flat_of(&flat, &a, n, OutType::F32).is_some(), "{ctx}: no flat list");
            let ep = Epilogue::new(1.0, beta);
            let expected = sparsek::cpu::reference(&a, &b, &c0, ep).unwrap();
            let got = spmm_once(&flat, &a, &b, &c0, ep);
            let report = compare_exact(&got, &expected);
            assert!(report.passed(), "{ctx}: flat list: {report}");
            let report = compare_exact(&spmm_once(&whole, &a, &b, &c0, ep), &expected);
            assert!(report.passed(), "{ctx}: whole rows: {report}");
            for j in 0..3 {
                let again = spmm_once(&flat, &a, &b, &c0, ep);
                let same = again.as_slice().iter().zip(got.as_slice()).all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "{ctx}: flat launch {j} differs from the first");
            }
        }
    }
    // Random values, rows cut into pieces: the same bits on every launch.
    for (bs, pattern) in [(64usize, Pattern::Uniform), (64, Pattern::Skewed), (128, Pattern::Uniform)] {
        let a: Bsr<f16> = generate(pattern, 8192, 8192, bs, 0.2, 5).unwrap();
        let ctx = format!("bs{bs} {pattern} random");
        assert!(flat_of(&flat, &a, 8, OutType::F32).is_some(), "{ctx}: no flat list");
        let first = check_case::<f32>(&flat, &a, 8, (1.0, 0.0), 6, &ctx).unwrap();
        for i in 0..5 {
            let again = check_case::<f32>(&flat, &a, 8, (1.0, 0.0), 6, &ctx).unwrap();
            let same = again.as_slice().iter().zip(first.as_slice()).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "{ctx}: launch {i} differs from the first (race in the hand-over?)");
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
    assert!(flat_of(&gpu, &a, 8, OutType::F16).is_none(), "f16 C: flat list");
    check_case::<f16>(&gpu, &a, 8, (1.0, 0.0), 9, "f16 C").unwrap();
    check_case::<f16>(&gpu, &a, 8, (-2.0, 0.5), 9, "f16 C, beta").unwrap();
    let bs32: Bsr<f16> = generate(Pattern::Uniform, 4096, 4096, 32, 0.2, 10).unwrap();
    assert!(flat_of(&gpu, &bs32, 8, OutType::F32).is_none(), "bs 32: flat list");
    check_case::<f32>(&gpu, &bs32, 8, (1.0, 0.0), 10, "bs 32").unwrap();
    let bs128: Bsr<f16> = generate(Pattern::Uniform, 4096, 4096, 128, 0.2, 11).unwrap();
    assert!(flat_of(&gpu, &bs128, 32, OutType::F32).is_none(), "bs 128, 32 columns: flat list");
    check_case::<f32>(&gpu, &bs128, 32, (1.0, 0.0), 11, "bs 128 mid tile").unwrap();
}

/// Flat launches from eight threads, half on the default stream and half on streams of their own, all sharing
/// the Gpu's workspace: each result is bit-identical to the single-threaded one.
#[test]
fn flat_launches_on_many_streams_are_ordered() {
    let test = "flat_launches_on_many_streams_are_ordered";
    let Some(gpu) = narrow_gpu(test, RowSplit::Flat(0)) else { return };
    let (m, k, n) = (8192, 8192, 16);
    let a: Bsr<f16> = generate(Pattern::Uniform, m, k, 64, 0.1, 41).unwrap();
    assert!(flat_of(&gpu, &a, n, OutType::F32).is_some(), "no flat list");
    let b = Matrix::<f16>::random(k, n, 42).unwrap();
    let c0 = Matrix::<f32>::random(m, n, 43).unwrap();
    threads_match_one_launch(&gpu, &a, &b, &c0, Epilogue::new(0.5, -1.0), 8);
}

/// `RowSplit::Auto` takes the flat list (two CTAs per SM) for one N tile, many k-tiles per CTA and rows of
/// unequal length, and keeps whole rows on rows of equal length (banded), on few k-tiles per CTA, for f16 C and
/// without the longest row; on bs 64's tiles of 32 and 64 columns where the busiest SM's whole rows exceed an
/// equal share by enough; the auto launches match the oracle.
#[test]
fn auto_takes_the_flat_list_where_it_measured_faster() {
    let test = "auto_takes_the_flat_list_where_it_measured_faster";
    let Some(gpu) = narrow_gpu(test, RowSplit::Auto) else { return };
    let sms = gpu.info().sm_count;
    let uniform: Bsr<f16> = generate(Pattern::Uniform, 16384, 16384, 64, 0.22, 21).unwrap();
    assert_eq!(flat_of(&gpu, &uniform, 8, OutType::F32), Some(sparsek::gpu::FLAT_AUTO_CTAS_PER_SM * sms));
    assert_eq!(flat_of(&gpu, &uniform, 8, OutType::F16), None, "f16 C");
    assert_eq!(flat_of(&gpu, &uniform, 32, OutType::F32), Some(sparsek::gpu::FLAT_AUTO_CTAS_PER_SM * sms), "32");
    assert_eq!(flat_of(&gpu, &uniform, 64, OutType::F32), Some(sparsek::gpu::FLAT_AUTO_CTAS_PER_SM * sms), "64");
    let skewed: Bsr<f16> = generate(Pattern::Skewed, 16384, 16384, 64, 0.22, 22).unwrap();
    assert!(flat_of(&gpu, &skewed, 1, OutType::F32).is_some(), "skewed rows");
    let banded: Bsr<f16> = generate(Pattern::Banded, 16384, 16384, 64, 0.22, 23).unwrap();
    assert_eq!(flat_of(&gpu, &banded, 8, OutType::F32), None, "rows of equal length");
    let bs128: Bsr<f16> = generate(Pattern::Uniform, 16384, 16384, 128, 0.22, 24).unwrap();
    assert_eq!(
        flat_of(&gpu, &bs128, 8, OutType::F32),
        Some(sparsek::gpu::FLAT_AUTO_CTAS_PER_SM * sms),
        "bs 128 at 22%"
    );
    let bs128_sparse: Bsr<f16> = generate(Pattern::Uniform, 16384, 16384, 128, 0.1, 31).unwrap();
    assert_eq!(flat_of(&gpu, &bs128_sparse, 8, OutType::F32), None, "bs 128 at 10%: too few k-tiles per CTA");
    let bs128_dense: Bsr<f16> = generate(Pattern::Uniform, 16384, 16384, 128, 0.5, 26).unwrap();
    assert_eq!(flat_of(&gpu, &bs128_dense, 1, OutType::F32), Some(sparsek::gpu::FLAT_AUTO_CTAS_PER_SM * sms), "bs 128");
    let sparser: Bsr<f16> = generate(Pattern::Uniform, 16384, 16384, 64, 0.1, 27).unwrap();
    assert_eq!(flat_of(&gpu, &sparser, 1, OutType::F32), None, "bs 64 at 10%: too few k-tiles per CTA");
    let small: Bsr<f16> = generate(Pattern::Uniform, 8192, 8192, 64, 0.22, 25).unwrap();
    assert_eq!(flat_of(&gpu, &small, 8, OutType::F32), None, "8192 x 8192: too few k-tiles per CTA");
    // bs 64's tile of 64 columns: where the busiest SM's whole rows exceed an equal share by enough.
    assert_eq!(flat_of(&gpu, &banded, 64, OutType::F32), None, "64 columns, rows of equal length");
    assert_eq!(flat_of(&gpu, &banded, 24, OutType::F32), None, "24 columns, rows of equal length");
    let skewed_small: Bsr<f16> = generate(Pattern::Skewed, 8192, 8192, 64, 0.1, 29).unwrap();
    assert!(flat_of(&gpu, &skewed_small, 48, OutType::F32).is_some(), "48 columns, skewed rows");
    assert!(flat_of(&gpu, &skewed_small, 20, OutType::F32).is_some(), "20 columns, skewed rows");
    let sparsest: Bsr<f16> = generate(Pattern::Uniform, 8192, 8192, 64, 0.05, 30).unwrap();
    assert_eq!(flat_of(&gpu, &sparsest, 64, OutType::F32), None, "64 columns, rows of about 6 blocks");
    let narrow = uniform_narrow_kernel(&gpu, &uniform);
    let dims = (uniform.nnzb(), uniform.rows() / 64, 8);
    assert_eq!(gpu.flat_for(narrow, dims, None), None, "longest row unknown");
    check_case::<f32>(&gpu, &uniform, 8, (1.0, 0.0), 21, "auto, uniform").unwrap();
    check_case::<f32>(&gpu, &skewed, 1, (-2.0, 0.5), 22, "auto, skewed").unwrap();
    check_case::<f32>(&gpu, &bs128_dense, 16, (1.0, 0.0), 26, "auto, bs 128").unwrap();
    check_case::<f32>(&gpu, &uniform, 64, (1.0, 0.0), 28, "auto, 64 columns").unwrap();
    check_case::<f32>(&gpu, &skewed_small, 48, (-2.0, 0.5), 29, "auto, 48 columns, skewed").unwrap();
    check_case::<f32>(&gpu, &skewed_small, 20, (1.0, 0.0), 30, "auto, 20 columns, skewed").unwrap();
}

/// The narrow kernel the launch of `a` (bs 64) times 8 columns into f32 C takes on `gpu`.
fn uniform_narrow_kernel(gpu: &Gpu, a: &Bsr<f16>) -> &'static str {
    let types = (InType::F16, Layout::RowMajor, OutType::F32, Layout::RowMajor);
    gpu.plan_kernel(64, types, (a.rows(), a.cols(), 8), a.nnzb(), None).unwrap().kernel
}
