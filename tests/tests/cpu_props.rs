//! The CPU backend against the f64 oracle, the oracle against a naive dense product, and the checks.

use proptest::prelude::*;
use sparsek::check::{Tolerance, compare, compare_exact, compare_rows};
use sparsek::format::{Pattern, generate, generate_int};
use sparsek::{Bsr, Epilogue, Error, Matrix, Scalar, bf16, cpu, f16};
use sparsek_tests::prop::{PropCase as Case, any_prop_case, with_pad};

fn any_pattern() -> impl Strategy<Value = Pattern> {
    prop::sample::select(Pattern::ALL.to_vec())
}

/// N values that cover 1, small tails and a few multiples of 8.
fn any_n() -> impl Strategy<Value = usize> {
    prop_oneof![Just(1usize), Just(17), Just(8), 1usize..40]
}

fn any_case() -> impl Strategy<Value = Case> {
    any_prop_case(any_n(), vec![1.0f32, -0.5, 2.5, 0.75])
}

/// Runs one case of the backend against the oracle with the given element types.
fn backend_matches_oracle<TA: Scalar, TB: Scalar, TC: Scalar>(case: &Case) -> Result<(), TestCaseError> {
    let Case { pattern, bs, br, bc, n, density, ep, ld_extra, seed } = *case;
    let (m, k) = (br * bs, bc * bs);
    let a = generate::<TA>(pattern, m, k, bs, density, seed).unwrap();
    let b = with_pad(&Matrix::<TB>::random(k, n, seed ^ 0xb).unwrap(), ld_extra);
    let c0 = if ep.beta == 0.0 {
        // Never read: poison everything.
        Matrix::<TC>::filled(m, n, n + ld_extra, TC::from_f64(f64::NAN)).unwrap()
    } else {
        with_pad(&Matrix::<TC>::random(m, n, seed ^ 0xc).unwrap(), ld_extra)
    };
    let expected = cpu::reference(&a, &b, &c0, ep).unwrap();
    if a.nnzb() > 0 || ep.beta != 0.0 {
        let nonzero = (0..m).any(|r| expected.row(r).iter().any(|&v| v != 0.0));
        prop_assert!(nonzero || m == 0, "vacuous reference for {:?}", case);
    }
    let mut c = c0.clone();
    cpu::spmm(&a, &b, &mut c, ep).unwrap();
    let tol = Tolerance::for_operands(&a, &b, &c0, ep);
    let rep = compare(&c, &expected, tol);
    prop_assert!(
        rep.passed(),
        "{} {}x{}x{} ({}/{}/{}) {:?}: {}",
        pattern,
        m,
        k,
        n,
        TA::NAME,
        TB::NAME,
        TC::NAME,
        case,
        rep
    );
    prop_assert_eq!(rep.checked, m * n);
    // Every output element finite (the NaN poison is gone) and the padding never written.
    for r in 0..m {
        prop_assert!(c.row(r).iter().all(|v| v.to_f64().is_finite()));
        for p in n..c.ld().min(c.as_slice().len() - r * c.ld()) {
            let (now, was) = (c.as_slice()[r * c.ld() + p].to_f64(), c0.as_slice()[r * c.ld() + p].to_f64());
            prop_assert!(now.to_bits() == was.to_bits(), "padding ({}, {}) written", r, p);
        }
    }
    Ok(())
}

/// Naive triple loop over the dense form of A, in f64.
fn naive<TA: Scalar, TB: Scalar, TC: Scalar>(a: &Bsr<TA>, b: &Matrix<TB>, c: &Matrix<TC>, ep: Epilogue) -> Matrix<f64> {
    let d = a.to_dense().unwrap();
    let (alpha, beta) = (f64::from(ep.alpha), f64::from(ep.beta));
    Matrix::from_fn(a.rows(), b.cols(), |i, j| {
        let mut s = 0.0;
        for p in 0..a.cols() {
            s += d.get(i, p).to_f64() * b.get(p, j).to_f64();
        }
        if beta == 0.0 { alpha * s } else { alpha * s + beta * c.get(i, j).to_f64() }
    })
    .unwrap()
}

/// One property per type combination (A's, B's, C's): the CPU backend against the oracle.
macro_rules! backend_properties {
    ($($name:ident: $ta:ty, $tb:ty => $tc:ty;)*) => {
        proptest! {
            #![proptest_config(ProptestConfig::with_cases(96))]
            $(
                #[test]
                fn $name(case in any_case()) {
                    backend_matches_oracle::<$ta, $tb, $tc>(&case)?;
                }
            )*
        }
    };
}

backend_properties! {
    backend_f16_in_f32_out: f16, f16 => f32;
    backend_f16_in_f16_out: f16, f16 => f16;
    backend_f32: f32, f32 => f32;
    backend_bf16_in_f32_out: bf16, bf16 => f32;
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn oracle_matches_naive_dense(case in any_case()) {
        let Case { pattern, bs, br, bc, n, density, ep, ld_extra, seed } = case;
        let (m, k) = (br * bs, bc * bs);
        let a = generate::<f16>(pattern, m, k, bs, density, seed).unwrap();
        let b = with_pad(&Matrix::<f32>::random(k, n, seed ^ 0xb).unwrap(), ld_extra);
        let c = Matrix::<f16>::random(m, n, seed ^ 0xc).unwrap();
        let got = cpu::reference(&a, &b, &c, ep).unwrap();
        let want = naive(&a, &b, &c, ep);
        // Same products, summed in a different order in f64: agreement to ~1e-13 relative.
        let rep = compare(&got, &want, Tolerance { atol: 1e-12, rtol: 1e-12 });
        prop_assert!(rep.passed(), "{:?}: {}", case, rep);
    }

    #[test]
    fn reference_rows_match_reference(case in any_case(), picks in prop::collection::vec(any::<prop::sample::Index>(), 0..6)) {
        let Case { pattern, bs, br, bc, n, density, ep, seed, .. } = case;
        let (m, k) = (br * bs, bc * bs);
        let a = generate::<f16>(pattern, m, k, bs, density, seed).unwrap();
        let b = Matrix::<f16>::random(k, n, seed ^ 0xb).unwrap();
        let c = Matrix::<f32>::random(m, n, seed ^ 0xc).unwrap();
        let full = cpu::reference(&a, &b, &c, ep).unwrap();
        let rows: Vec<usize> = if m == 0 { vec![] } else { picks.iter().map(|i| i.index(m)).collect() };
        let sampled = cpu::reference_rows(&a, &b, &c, ep, &rows).unwrap();
        prop_assert_eq!(sampled.len(), rows.len());
        for ((r, vals), &want_r) in sampled.iter().zip(&rows) {
            prop_assert_eq!(*r, want_r);
            prop_assert_eq!(vals.as_slice(), full.row(*r));
        }
        // And compare_rows of the full result against the sample passes exactly.
        let mut out = c.clone();
        cpu::spmm(&a, &b, &mut out, ep).unwrap();
        let rep = compare_rows(&out, &sampled, Tolerance::for_operands(&a, &b, &c, ep));
        prop_assert!(rep.passed(), "{}", rep);
        prop_assert_eq!(rep.checked, rows.len() * n);
    }

    #[test]
    fn integer_cases_are_bit_exact(pattern in any_pattern(), bs in prop::sample::select(vec![16usize, 32]),
                                   br in 0usize..4, bc in 1usize..4, n in any_n(), density in 0.0f64..=1.0,
                                   alpha in prop::sample::select(vec![1.0f32, -1.0, 2.0]),
                                   beta in prop::sample::select(vec![0.0f32, 1.0, -2.0]), seed in any::<u64>()) {
        let (m, k) = (br * bs, bc * bs);
        let ep = Epilogue::new(alpha, beta);
        // |A|, |B| <= 8 and K <= 96: every partial sum is an integer below 2^24, exact in f32.
        let a = generate_int::<f16>(pattern, m, k, bs, density, seed, 8).unwrap();
        let b = Matrix::<f16>::random_int(k, n, 8, seed ^ 0xb).unwrap();
        let c0 = Matrix::<f32>::random_int(m, n, 100, seed ^ 0xc).unwrap();
        let expected = cpu::reference(&a, &b, &c0, ep).unwrap();
        let mut c = c0.clone();
        cpu::spmm(&a, &b, &mut c, ep).unwrap();
        let rep = compare_exact(&c, &expected);
        prop_assert!(rep.passed(), "{} {}x{}x{}: {}", pattern, m, k, n, rep);
        // f16 output: |A|, |B| <= 2 keeps |alpha * sum| <= 2 * 4 * 96 = 768 < 2048, exact in f16.
        let a2 = generate_int::<f16>(pattern, m, k, bs, density, seed, 2).unwrap();
        let b2 = Matrix::<f16>::random_int(k, n, 2, seed ^ 0xd).unwrap();
        let ep0 = Epilogue::new(alpha, 0.0);
        let expected = cpu::reference(&a2, &b2, &c0, ep0).unwrap();
        let mut h = Matrix::<f16>::filled(m, n, n, f16::NAN).unwrap();
        cpu::spmm(&a2, &b2, &mut h, ep0).unwrap();
        let rep = compare_exact(&h, &expected);
        prop_assert!(rep.passed(), "f16 out {} {}x{}x{}: {}", pattern, m, k, n, rep);
    }

    #[test]
    fn shape_mismatch_leaves_c_untouched(br in 1usize..3, bc in 1usize..3, n in 1usize..9, which in 0usize..3, seed in any::<u64>()) {
        let (m, k) = (br * 16, bc * 16);
        let a = generate::<f16>(Pattern::Dense, m, k, 16, 1.0, seed).unwrap();
        let (b_shape, c_shape) = match which {
            0 => ((k + 1, n), (m, n)),
            1 => ((k, n), (m + 16, n)),
            _ => ((k, n), (m, n + 1)),
        };
        let b = Matrix::<f16>::random(b_shape.0, b_shape.1, seed).unwrap();
        let c0 = Matrix::<f32>::random(c_shape.0, c_shape.1, seed ^ 1).unwrap();
        let mut c = c0.clone();
        let e = cpu::spmm(&a, &b, &mut c, Epilogue::new(1.0, 0.5)).unwrap_err();
        prop_assert!(matches!(e, Error::ShapeMismatch { a: sa, b: sb, c: sc } if sa == (m, k) && sb == b_shape && sc == c_shape), "{}", e);
        prop_assert_eq!(&c, &c0);
        let e = cpu::reference(&a, &b, &c0, Epilogue::default()).unwrap_err();
        prop_assert!(matches!(e, Error::ShapeMismatch { .. }), "{}", e);
        let e = cpu::reference_rows(&a, &b, &c0, Epilogue::default(), &[0]).unwrap_err();
        prop_assert!(matches!(e, Error::ShapeMismatch { .. }), "{}", e);
    }
}

#[test]
fn empty_and_zero_nnz_give_beta_c() {
    let ep = Epilogue::new(3.0, -0.5);
    for (m, k) in [(0usize, 32usize), (32, 0), (64, 32), (0, 0)] {
        let a = Bsr::<f16>::empty(m, k, 16).unwrap();
        let b = Matrix::<f16>::random(k, 5, 1).unwrap();
        let c0 = Matrix::<f32>::random(m, 5, 2).unwrap();
        let mut c = c0.clone();
        cpu::spmm(&a, &b, &mut c, ep).unwrap();
        let r = cpu::reference(&a, &b, &c0, ep).unwrap();
        for i in 0..m {
            for j in 0..5 {
                let want = -0.5 * c0.get(i, j);
                assert_eq!(c.get(i, j), want);
                assert_eq!(r.get(i, j), f64::from(want));
            }
        }
        // beta == 0: zeros, whatever C held.
        let mut c = Matrix::<f32>::filled(m, 5, 5, f32::NAN).unwrap();
        cpu::spmm(&a, &b, &mut c, Epilogue::default()).unwrap();
        assert!((0..m).all(|i| c.row(i).iter().all(|&v| v == 0.0)));
    }
    // Empty block rows inside a nonempty matrix: row 1 of blocks holds nothing.
    let a = Bsr::try_new(48, 16, 16, vec![0, 1, 1, 2], vec![0, 0], vec![f16::ONE; 512]).unwrap();
    let b = Matrix::<f16>::random(16, 3, 9).unwrap();
    let c0 = Matrix::<f32>::random(48, 3, 10).unwrap();
    let mut c = c0.clone();
    cpu::spmm(&a, &b, &mut c, Epilogue::new(1.0, 2.0)).unwrap();
    for i in 16..32 {
        for j in 0..3 {
            assert_eq!(c.get(i, j), 2.0 * c0.get(i, j));
        }
    }
}

#[test]
fn reference_rows_out_of_range() {
    let a = generate::<f16>(Pattern::Uniform, 32, 32, 16, 0.5, 1).unwrap();
    let b = Matrix::<f16>::random(32, 4, 1).unwrap();
    let c = Matrix::<f32>::zeros(32, 4).unwrap();
    let e = cpu::reference_rows(&a, &b, &c, Epilogue::default(), &[3, 32]).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "rows", .. }), "{e}");
}

#[test]
fn checks_catch_bad_outputs() {
    let exp = Matrix::<f64>::from_fn(3, 4, |r, c| (r * 4 + c) as f64).unwrap();
    let tol = Tolerance { atol: 1e-6, rtol: 1e-6 };
    let good = exp.convert::<f32>().unwrap();
    let rep = compare(&good, &exp, tol);
    assert!(rep.passed() && rep.checked == 12 && rep.failures == 0, "{rep}");
    assert!(rep.to_string().starts_with("PASS"));
    assert!(compare_exact(&good, &exp).passed());

    let mut bad = good.clone();
    bad.set(1, 2, f32::NAN);
    bad.set(2, 3, 11.5);
    bad.set(0, 1, 1.0 + 1e-7); // within tolerance
    let rep = compare(&bad, &exp, tol);
    assert!(!rep.passed());
    assert_eq!(rep.failures, 2);
    assert_eq!(rep.first_failure.map(|f| (f.0, f.1)), Some((1, 2)));
    assert_eq!(rep.worst.map(|w| (w.0, w.1)), Some((1, 2)));
    assert!(rep.max_abs_err.is_infinite());
    assert!(rep.to_string().starts_with("FAIL"), "{rep}");
    assert!(!compare_exact(&bad, &exp).passed());

    // Inf where a finite value is expected fails; a matching Inf passes.
    let mut e2 = exp.clone();
    e2.set(0, 0, f64::INFINITY);
    let mut g2 = good.clone();
    g2.set(0, 0, f32::INFINITY);
    assert!(compare(&g2, &e2, tol).passed());
    assert!(!compare(&g2, &exp, tol).passed());

    // Shapes.
    let rep = compare(&Matrix::<f32>::zeros(3, 3).unwrap(), &exp, tol);
    assert!(!rep.passed() && rep.shape_error.is_some());
    let rep = compare_rows(&good, &[(3, vec![0.0; 4])], tol);
    assert!(!rep.passed() && rep.shape_error.is_some());

    // The tolerance model.
    let ep = Epilogue::new(2.0, 0.5);
    let t = Tolerance::for_spmm(64, 1.0, 2.0, ep, 4.0, true);
    let want = 2.0 * 2.0 * 64.0 * 2f64.powi(-21) + 0.5 * 4.0 * 2f64.powi(-22) + 2f64.powi(-24);
    assert!((t.atol - want).abs() < 1e-18 && t.rtol == 2f64.powi(-10));
    assert_eq!(Tolerance::for_spmm(64, 1.0, 2.0, ep, 4.0, false).rtol, 2f64.powi(-20));
}
