//! Split rows (`Gpu::with_row_split`, host/src/gpu/split.rs): the narrow kernels spread a long block row over
//! several CTAs and the row's last CTA adds the parts' partial tiles in part order. Against the f64 oracle with
//! poisoned outputs, on uniform and skewed rows (one row holding most blocks), every block size, N from 1 to 64
//! with tails, f32 and f16 C, alpha and beta; exact integer-valued cases bit-equal to the oracle and to whole
//! rows; the same bits run to run; and split launches from several threads on several streams, which share the
//! Gpu's workspace, each giving the single-threaded result. Without a GPU every test prints a skip line.

use proptest::prelude::*;
use sparsek::check::compare_exact;
use sparsek::format::{Pattern, generate, generate_int};
use sparsek::gpu::{Gpu, InType, OutType, OutputElement, RowSplit};
use sparsek::{Bsr, Epilogue, Layout, Matrix, f16};
use sparsek_tests::{check_case, exact_operands, gpu_cases, own_gpu, spmm_once, threads_match_one_launch};

/// A Gpu whose few-column launches take the narrow kernels (decode off), rows split as `split` says.
fn narrow_gpu(test: &str, split: RowSplit) -> Option<Gpu> {
    own_gpu(test, |g| g.with_decode(false).with_row_split(split))
}

/// The longest block row of `a`, in blocks.
fn longest(a: &Bsr<f16>) -> usize {
    a.row_ptr().windows(2).map(|w| (w[1] - w[0]) as usize).max().unwrap_or(0)
}

/// Whether the kernel `gpu` launches for a product of `a` with `n` columns can split rows (the narrow and mid
/// tiles of up to 32 columns and bs 128's of 64), and the split it gives (None: whole rows).
fn split_of(gpu: &Gpu, a: &Bsr<f16>, n: usize) -> (bool, Option<sparsek::gpu::SplitChoice>) {
    let types = (InType::F16, Layout::RowMajor, OutType::F32, Layout::RowMajor);
    let shape = (a.rows(), a.cols(), n);
    let Some(choice) = gpu.plan_kernel(a.block_size(), types, shape, a.nnzb(), Some(longest(a))) else {
        return (false, None);
    };
    let split = gpu.split_for(&choice.config, (a.nnzb(), a.rows() / a.block_size(), n), Some(longest(a)));
    (choice.config.splits_rows(), split)
}

/// Integer-valued operands (every sum exact in f32, rounded once to C's type by both sides): the launch on `split`
/// and on `whole` (whole rows) both equal the oracle bit for bit, and three more launches on `split` give the first
/// one's bits.
fn assert_exact_and_repeatable<TC: OutputElement>(
    (split, whole): (&Gpu, &Gpu),
    (a, b, c0): (&Bsr<f16>, &Matrix<f16>, &Matrix<TC>),
    ep: Epilogue,
    ctx: &str,
) {
    let expected = sparsek::cpu::reference(a, b, c0, ep).unwrap();
    let run = |gpu: &Gpu| spmm_once(gpu, a, b, c0, ep);
    let got = run(split);
    let report = compare_exact(&got, &expected);
    assert!(report.passed(), "{ctx}: split rows: {report}");
    let report = compare_exact(&run(whole), &expected);
    assert!(report.passed(), "{ctx}: whole rows: {report}");
    for i in 0..3 {
        let again = run(split);
        let same =
            again.as_slice().iter().zip(got.as_slice()).all(|(x, y)| x.to_f64().to_bits() == y.to_f64().to_bits());
        assert!(same, "{ctx}: split launch {i} differs from the first");
    }
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
        let (capable, split) = split_of(gpu, &a, n);
        let long_enough = *blocks > 0 && longest(&a) > *blocks as usize;
        prop_assert!(!(capable && long_enough) || split.is_some(), "{ctx}: expected a split, got none");
        check_case::<f32>(gpu, &a, n, (alpha, beta), seed, &ctx).map_err(TestCaseError::fail)?;
        check_case::<f16>(gpu, &a, n, (alpha, beta), seed, &ctx).map_err(TestCaseError::fail)?;
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
            assert!(split_of(&split, &a, n).1.is_some(), "{ctx}: not split");
            assert_exact_and_repeatable((&split, &whole), (&a, &b, &c0), Epilogue::new(1.0, beta), &ctx);
        }
    }
    // Random values: the same bits on every launch (the parts are added in part order, whichever CTA is last).
    let a: Bsr<f16> = generate(Pattern::Skewed, 512, 8192, 64, 0.4, 3).unwrap();
    let first = check_case::<f32>(&split, &a, 16, (1.0, 0.0), 4, "skewed random").unwrap();
    for i in 0..5 {
        let again = check_case::<f32>(&split, &a, 16, (1.0, 0.0), 4, "skewed random").unwrap();
        let same = again.as_slice().iter().zip(first.as_slice()).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(same, "skewed random: launch {i} differs from the first (race in the hand-over?)");
    }
}

/// The bs-128 mid tile of 64 columns (`_n64`, 33 to 64 columns, at least `MID64_BS128_MIN_BLOCKS_PER_SM` blocks
/// per SM) splits rows: random uniform and skewed A against every row of the oracle (f32 C poisoned, f16 C with
/// beta), integer-valued ones bit-equal to the oracle and to whole rows, and the same bits on every launch. Below
/// the blocks per SM the launch takes the tile of 32.
#[test]
fn bs128_tile_of_64_splits_rows() {
    let test = "bs128_tile_of_64_splits_rows";
    let Some(gpu) = narrow_gpu(test, RowSplit::Auto) else { return };
    let whole = narrow_gpu(test, RowSplit::Off).unwrap();
    let sms = gpu.info().sm_count as usize;
    let min_blocks = sparsek::gpu::MID64_BS128_MIN_BLOCKS_PER_SM * sms;
    let types = (InType::F16, Layout::RowMajor, OutType::F32, Layout::RowMajor);
    // Few blocks: the tile of 32.
    let few = gpu.plan_kernel(128, types, (1024, 4096, 64), min_blocks - 1, Some(40)).unwrap();
    assert!(few.kernel.ends_with("_n32"), "{} blocks: got {}", min_blocks - 1, few.kernel);
    // Eight block rows, enough block columns for 1.5x the blocks the tile of 64 needs at density 0.7.
    let (bs, rows, density) = (128usize, 8usize, 0.7);
    let cols = (3 * min_blocks).div_ceil(2 * rows).max(8) * 10 / 7 + 1;
    let (m, k) = (rows * bs, cols * bs);
    for (i, n) in [33usize, 48, 64].into_iter().enumerate() {
        for (j, pattern) in [Pattern::Uniform, Pattern::Skewed].into_iter().enumerate() {
            let seed = 7000 + (i * 2 + j) as u64;
            let a: Bsr<f16> = generate(pattern, m, k, bs, density, seed).unwrap();
            let ctx = format!("bs{bs} {m}x{k}x{n} {pattern} nnzb={}", a.nnzb());
            assert!(a.nnzb() >= min_blocks, "{ctx}: fewer than {min_blocks} blocks");
            let choice = gpu.plan_kernel(bs, types, (m, k, n), a.nnzb(), Some(longest(&a))).unwrap();
            assert!(choice.kernel.ends_with("_n64"), "{ctx}: got {}", choice.kernel);
            assert!(split_of(&gpu, &a, n).1.is_some(), "{ctx}: not split");
            check_case::<f32>(&gpu, &a, n, (1.25, 0.0), seed, &ctx).unwrap();
            check_case::<f16>(&gpu, &a, n, (0.75, -0.5), seed, &ctx).unwrap();
            // Integer-valued: split, whole rows and the oracle bit for bit, and every split launch alike.
            let (a, b, c0) = exact_operands(pattern, (m, k, n), bs, density, 1.0, seed);
            assert_exact_and_repeatable((&gpu, &whole), (&a, &b, &c0), Epilogue::new(1.0, 1.0), &ctx);
        }
    }
}

/// bs 64's tile of 64 columns (`_n64`, 33 to 64 columns) cannot split rows, and its flat block list serves only an
/// f32 C: with an f16 C and one row over four times the mean, `RowSplit::Auto` takes the tile of 32 in its place
/// (`Gpu::skew_tile_for`), which splits that row over both N tiles. At 33, 48 and 64 columns: integer-valued
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
    let types = |out| (InType::F16, Layout::RowMajor, out, Layout::RowMajor);
    for (i, n) in [33usize, 48, 64].into_iter().enumerate() {
        let seed = 8100 + i as u64;
        let a: Bsr<f16> = generate_int(Pattern::Skewed, m, k, bs, density, seed, 4).unwrap();
        let (long, dims) = (longest(&a), (a.nnzb(), rows, n));
        let ctx = format!("bs{bs} {m}x{k}x{n} skewed nnzb={} longest={long}", a.nnzb());
        assert!(long > 4 * a.nnzb().div_ceil(rows), "{ctx}: no row over 4x the mean");
        let choice = gpu.plan_kernel(bs, types(OutType::F16), (m, k, n), a.nnzb(), Some(long)).unwrap();
        assert!(choice.kernel.ends_with("_n64"), "{ctx}: planned {}", choice.kernel);
        let (tile, config) = gpu.skew_tile_for(choice.kernel, dims, Some(long)).expect("no tile of 32");
        assert!(tile.ends_with("_n32") && tile.contains("_f16_brow_f16"), "{ctx}: took {tile}");
        assert!(gpu.split_for(&config, dims, Some(long)).is_some(), "{ctx}: the tile of 32 does not split");
        assert!(whole.skew_tile_for(choice.kernel, dims, Some(long)).is_none(), "{ctx}: RowSplit::Off");
        assert!(gpu.skew_tile_for(choice.kernel, dims, None).is_none(), "{ctx}: longest row unknown");
        let f32_c = gpu.plan_kernel(bs, types(OutType::F32), (m, k, n), a.nnzb(), Some(long)).unwrap();
        assert!(gpu.skew_tile_for(f32_c.kernel, dims, Some(long)).is_none(), "{ctx}: f32 C has its flat list");
        // Integer-valued (every sum exact in f32, rounded once to f16 by both sides).
        let b = Matrix::<f16>::random_int(k, n, 4, seed ^ 1).unwrap();
        let c0 = Matrix::<f16>::random_int(m, n, 4, seed ^ 2).unwrap();
        assert_exact_and_repeatable((&gpu, &whole), (&a, &b, &c0), Epilogue::new(1.0, 1.0), &ctx);
        // Random values.
        let a: Bsr<f16> = generate(Pattern::Skewed, m, k, bs, density, seed).unwrap();
        check_case::<f16>(&gpu, &a, n, (1.0, 0.0), seed, &ctx).unwrap();
        check_case::<f16>(&gpu, &a, n, (-2.0, 0.5), seed, &ctx).unwrap();
    }
    let uniform: Bsr<f16> = generate(Pattern::Uniform, m, k, bs, 0.3, 8200).unwrap();
    let (long, dims) = (longest(&uniform), (uniform.nnzb(), rows, 64));
    let choice = gpu.plan_kernel(bs, types(OutType::F16), (m, k, 64), uniform.nnzb(), Some(long)).unwrap();
    assert!(gpu.skew_tile_for(choice.kernel, dims, Some(long)).is_none(), "uniform rows: longest {long}");
}

/// Split launches from six threads, half on the default stream and half on streams of their own, all sharing
/// the Gpu's workspace: each result is bit-identical to the single-threaded one (unordered launches would mix
/// their partial tiles and counters).
#[test]
fn split_launches_on_many_streams_are_ordered() {
    let test = "split_launches_on_many_streams_are_ordered";
    let Some(gpu) = narrow_gpu(test, RowSplit::Blocks(2)) else { return };
    let (m, k, n) = (512, 8192, 16);
    let a: Bsr<f16> = generate(Pattern::Uniform, m, k, 64, 0.3, 31).unwrap();
    assert!(split_of(&gpu, &a, n).1.is_some(), "not split");
    let b = Matrix::<f16>::random(k, n, 32).unwrap();
    let c0 = Matrix::<f32>::random(m, n, 33).unwrap();
    let ep = Epilogue::new(0.5, -1.0);
    threads_match_one_launch(&gpu, &a, &b, &c0, ep, 8);
}

/// A long row at few columns goes to the narrow tile's split rows instead of the decode kernels
/// (`Gpu::decode_serves`, `DECODE_MAX_ROW_BYTES`): 64 block rows of bs 64 (within the decode kernels' row limit)
/// whose first row holds all 256 block columns (2 MB) take the narrow tile, split, and match every row of the
/// oracle; with `RowSplit::Off` (no split to give the row), the longest row unknown, or rows of 112 KB they keep the
/// decode kernels.
#[test]
fn long_rows_leave_the_decode_kernels_for_split_rows() {
    use sparsek::tune::KernelFamily;
    let test = "long_rows_leave_the_decode_kernels_for_split_rows";
    let Some(gpu) = own_gpu(test, |g| g) else { return };
    let off = own_gpu(test, |g| g.with_row_split(RowSplit::Off)).unwrap();
    let types = (InType::F16, Layout::RowMajor, OutType::F32, Layout::RowMajor);
    let long: Bsr<f16> = generate(Pattern::Skewed, 4096, 16384, 64, 0.22, 0x71).unwrap();
    let short: Bsr<f16> = generate(Pattern::Uniform, 4096, 4096, 64, 0.22, 0x72).unwrap();
    assert_eq!(longest(&long), 256, "test setup: the first row is full");
    assert!(longest(&short) * 64 * 64 * 2 < sparsek::gpu::DECODE_MAX_ROW_BYTES, "test setup: short rows");
    for n in [1usize, 9, 16] {
        let family = |g: &Gpu, a: &Bsr<f16>, max_row: Option<usize>| {
            g.plan_kernel(64, types, (a.rows(), a.cols(), n), a.nnzb(), max_row).unwrap().plan.family
        };
        assert_eq!(family(&gpu, &long, Some(longest(&long))), KernelFamily::Narrow, "N = {n}: the long row");
        let (splits, split) = split_of(&gpu, &long, n);
        assert!(splits && split.is_some(), "N = {n}: the narrow tile splits the long row ({split:?})");
        assert_eq!(family(&off, &long, Some(longest(&long))), KernelFamily::Decode, "N = {n}: RowSplit::Off");
        assert_eq!(family(&gpu, &long, None), KernelFamily::Decode, "N = {n}: the longest row unknown");
        assert_eq!(family(&gpu, &short, Some(longest(&short))), KernelFamily::Decode, "N = {n}: short rows");
        check_case::<f32>(&gpu, &long, n, (1.0, 0.0), 0x73 + n as u64, &format!("long row, N = {n}"))
            .unwrap_or_else(|e| panic!("{e}"));
        check_case::<f16>(&gpu, &long, n, (0.5, -1.0), 0x83 + n as u64, &format!("long row, N = {n}"))
            .unwrap_or_else(|e| panic!("{e}"));
    }
}
