//! The classes of issue 8 in the ordinary test suite: empty shapes are valid everywhere, sizes beyond memory are
//! typed errors (never a panic or an abort), and non-finite values never give a wrong verdict.

use proptest::prelude::*;
use sparsek::check::{Expected, RowSample, Tolerance, compare, compare_rows};
use sparsek::format::{Pattern, generate};
use sparsek::{Bsr, Epilogue, Error, Matrix, Scalar, cpu, f16};

fn cases() -> ProptestConfig {
    ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() }
}

/// Everything a product touches, on shapes where any of M, K, N may be 0: constructors, conversions, the
/// oracle, the CPU backend and the checks agree, and nothing panics.
fn empty_product(m: usize, k: usize, n: usize, bs: usize, beta: f32) -> Result<(), TestCaseError> {
    let a: Bsr<f16> = generate(Pattern::Uniform, m, k, bs, 0.5, 7).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let empty = Bsr::<f16>::empty(m, k, bs).unwrap();
    prop_assert_eq!(empty.nnzb(), 0);
    let dense = a.to_dense().unwrap();
    prop_assert_eq!((dense.rows(), dense.cols()), (m, k));
    let back = Bsr::from_dense(&dense, bs, |blk| !blk.is_zero()).unwrap();
    prop_assert_eq!(back.to_dense().unwrap(), dense);
    let b = Matrix::<f16>::random(k, n, 1).unwrap();
    let c0 = Matrix::<f32>::random(m, n, 2).unwrap().with_ld(n + 3, 0.0).unwrap();
    let ep = Epilogue::new(1.5, beta);
    let expected = Expected::compute(&a, &b, &c0, ep, RowSample::All, |_, _| {}).unwrap();
    let mut c = c0.clone();
    cpu::spmm(&a, &b, &mut c, ep).unwrap();
    let report = expected.check(&c);
    prop_assert!(report.passed(), "{}", report);
    prop_assert_eq!(report.checked, m * n);
    let full = cpu::reference(&a, &b, &c0, ep).unwrap();
    prop_assert_eq!((full.rows(), full.cols()), (m, n));
    prop_assert!(compare(&c, &full, expected.tolerance()).passed());
    Ok(())
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn empty_shapes_are_valid_everywhere(
        bs in prop::sample::select(vec![16usize, 32]),
        mb in 0usize..3, kb in 0usize..3, n in prop_oneof![Just(0usize), 1usize..9],
        beta in prop::sample::select(vec![0.0f32, 1.0]),
    ) {
        // At least one of M, K, N is 0 in most cases.
        let (m, k) = (mb * bs, kb * bs);
        empty_product(m, k, n, bs, beta)?;
    }

    #[test]
    fn dense_matrices_with_zero_columns_have_empty_rows(rows in 0usize..50, ld in 1usize..9) {
        let m = Matrix::<f32>::filled(rows, 0, ld, 1.0).unwrap();
        for r in 0..rows {
            prop_assert!(m.row(r).is_empty());
        }
        let z = Matrix::<f16>::zeros(rows, 0).unwrap();
        prop_assert_eq!(z.convert::<f32>().unwrap().rows(), rows);
        prop_assert_eq!(z.with_ld(16, f16::ONE).unwrap().rows(), rows);
    }

    #[test]
    fn huge_declared_sizes_are_typed_errors(
        rows in prop_oneof![Just(usize::MAX), Just(usize::MAX / 3), Just(1usize << 40), 1usize..1000],
        cols in prop_oneof![Just(usize::MAX), Just(usize::MAX / 7), Just(1usize << 40), 0usize..1000],
    ) {
        let huge = (rows as u128) * (cols as u128) > (1u128 << 36);
        for r in [Matrix::<f32>::zeros(rows, cols), Matrix::<f32>::random(rows, cols, 1)] {
            match r {
                Ok(m) => prop_assert!(!huge && m.rows() == rows),
                Err(Error::TooLarge { .. } | Error::OutOfMemory { .. }) => prop_assert!(huge),
                Err(e) => prop_assert!(false, "unexpected error {e}"),
            }
        }
        let ld = cols.max(1);
        match Matrix::<f32>::filled(rows, cols, ld, 0.0) {
            Ok(_) => prop_assert!(!huge),
            Err(Error::TooLarge { .. } | Error::OutOfMemory { .. }) => prop_assert!(huge),
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
        // Generators and empty BSR matrices: rows beyond u32 block rows are refused, otherwise the per-block-row
        // arrays are allocated fallibly.
        let bs = 64;
        let (rr, cc) = (rows - rows % bs, cols - cols % bs);
        for r in [Bsr::<f16>::empty(rr, cc, bs).map(|_| ()), generate::<f16>(Pattern::Empty, rr, cc, bs, 0.0, 1).map(|_| ())] {
            match r {
                Ok(()) => prop_assert!(rr / bs < 1 << 30),
                Err(Error::InvalidBsr(_) | Error::TooLarge { .. } | Error::OutOfMemory { .. }) => {}
                Err(e) => prop_assert!(false, "unexpected error {e}"),
            }
        }
    }

    /// NaN or an infinity where a finite value is expected fails, whatever the tolerance; an invalid (NaN,
    /// infinite or negative) tolerance fails every comparison, naming it.
    #[test]
    fn non_finite_values_never_pass(
        bad in prop::sample::select(vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY]),
        at in 0usize..12,
        atol in prop::sample::select(vec![0.0f64, 1e-3, 1e300, f64::INFINITY, f64::NAN, -1.0]),
    ) {
        let expected = Matrix::<f64>::from_fn(3, 4, |r, c| (r * 4 + c) as f64 - 5.0).unwrap();
        let mut got = expected.convert::<f32>().unwrap();
        got.set(at / 4, at % 4, bad);
        let tol = Tolerance { atol, rtol: 0.0 };
        let report = compare(&got, &expected, tol);
        prop_assert!(!report.passed(), "{}", report);
        let rows: Vec<(usize, Vec<f64>)> = (0..3).map(|r| (r, expected.row(r).to_vec())).collect();
        prop_assert!(!compare_rows(&got, &rows, tol).passed());
        // The same values without the bad element pass exactly when the tolerance is valid.
        let clean = expected.convert::<f32>().unwrap();
        prop_assert_eq!(compare(&clean, &expected, tol).passed(), tol.is_valid());
    }
}

#[test]
fn the_oracle_refuses_non_finite_operands() {
    let a: Bsr<f16> = generate(Pattern::Dense, 32, 32, 16, 1.0, 1).unwrap();
    let mut b = Matrix::<f16>::random(32, 8, 2).unwrap();
    let c0 = Matrix::<f32>::zeros(32, 8).unwrap();
    let ep = Epilogue::default();
    b.set(3, 5, f16::INFINITY);
    match Expected::compute(&a, &b, &c0, ep, RowSample::All, |_, _| {}) {
        Err(Error::NonFinite { what: "B", index: (3, 5), .. }) => {}
        other => panic!("{other:?}"),
    }
    // A NaN in C matters only when C is read.
    let b = Matrix::<f16>::random(32, 8, 2).unwrap();
    let mut c_nan = c0.clone();
    c_nan.set(0, 0, f32::NAN);
    assert!(Expected::compute(&a, &b, &c_nan, ep, RowSample::All, |_, _| {}).is_ok());
    let ep1 = Epilogue::new(1.0, 1.0);
    assert!(matches!(Expected::compute(&a, &b, &c_nan, ep1, RowSample::All, |_, _| {}), Err(Error::NonFinite { .. })));
    let mut a_nan = a.clone();
    a_nan.values_mut()[300] = f16::NAN;
    match Expected::compute(&a_nan, &b, &c0, ep, RowSample::All, |_, _| {}) {
        Err(Error::NonFinite { index: (1, 44), .. }) => {}
        other => panic!("{other:?}"),
    }
    // Tolerances built from non-finite operands are invalid, and checks under them fail loudly.
    let tol = Tolerance::for_operands(&a_nan, &b, &c0, ep);
    assert!(!tol.is_valid());
    let r = compare(&c0, &cpu::reference(&a, &b, &c0, ep).unwrap(), tol);
    assert!(!r.passed() && r.to_string().contains("tolerance"), "{r}");
}

#[test]
fn conversions_never_overflow_silently() {
    let m = Matrix::<f32>::from_fn(2, 2, |r, c| if r == 1 && c == 1 { 7.0e4 } else { 1.0 }).unwrap();
    assert!(matches!(m.convert::<f16>(), Err(Error::NonFinite { index: (1, 1), .. })));
    let a =
        Bsr::<f32>::try_new(16, 16, 16, vec![0, 1], vec![0], (0..256).map(|i| i as f32 * 1000.0).collect()).unwrap();
    match a.convert::<f16>() {
        Err(Error::NonFinite { index: (0, i), .. }) => assert_eq!(f16::try_from_f64(i as f64 * 1000.0), None),
        other => panic!("{other:?}"),
    }
    // Values that fit convert; underflow to zero is rounding, not an error.
    assert!(Bsr::<f32>::try_new(16, 16, 16, vec![0, 1], vec![0], vec![1e-9; 256]).unwrap().convert::<f16>().is_ok());
}
