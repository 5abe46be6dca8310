//! The backward products on the CPU (issue 44) against dense f64 computations of the same low-precision inputs,
//! and the transposed index's properties: proptest.

use proptest::prelude::*;
use sparsek::check::{Tolerance, compare, compare_values};
use sparsek::format::{BsrTranspose, generate, generate_int, structure};
use sparsek::{Bsr, Epilogue, Matrix, Scalar, bf16, cpu, f16};
use sparsek_tests::prop::{PropCase as Case, any_prop_case, with_pad};

fn any_case() -> impl Strategy<Value = Case> {
    // N of `A^T @ B`, K (the token count) of SDDMM.
    any_prop_case(prop_oneof![Just(1usize), Just(17), Just(64), 1usize..300], vec![1.0f32, -0.5, 2.5])
}

/// `alpha * (A^T @ B) + beta * C` by a triple loop over A's dense form, in f64.
fn dense_t<TA: Scalar, TB: Scalar, TC: Scalar>(
    a: &Bsr<TA>,
    b: &Matrix<TB>,
    c: &Matrix<TC>,
    ep: Epilogue,
) -> Matrix<f64> {
    let d = a.to_dense().unwrap();
    let (alpha, beta) = (f64::from(ep.alpha), f64::from(ep.beta));
    Matrix::from_fn(a.cols(), b.cols(), |i, j| {
        let s: f64 = (0..a.rows()).map(|p| d.get(p, i).to_f64() * b.get(p, j).to_f64()).sum();
        if beta == 0.0 { alpha * s } else { alpha * s + beta * c.get(i, j).to_f64() }
    })
    .unwrap()
}

/// `alpha * (X @ Y^T) + beta * values` densely in f64, then masked to `out`'s blocks (its value layout).
fn dense_sddmm<TX: Scalar, TV: Scalar>(x: &Matrix<TX>, y: &Matrix<TX>, out: &Bsr<TV>, ep: Epilogue) -> Bsr<f64> {
    let (alpha, beta) = (f64::from(ep.alpha), f64::from(ep.beta));
    let old = out.to_dense().unwrap();
    let full = Matrix::from_fn(out.rows(), out.cols(), |r, c| {
        let s: f64 = (0..x.cols()).map(|k| x.get(r, k).to_f64() * y.get(c, k).to_f64()).sum();
        if beta == 0.0 { alpha * s } else { alpha * s + beta * old.get(r, c).to_f64() }
    })
    .unwrap();
    // Mask: keep exactly out's blocks (a block of full is kept iff out stores it).
    let stored: std::collections::HashSet<(usize, usize)> =
        (0..out.block_rows()).flat_map(|br| out.block_row_cols(br).iter().map(move |&bc| (br, bc as usize))).collect();
    Bsr::from_dense(&full, out.block_size(), |blk| stored.contains(&(blk.block_row(), blk.block_col()))).unwrap()
}

fn spmm_t_matches_dense<TA: Scalar, TB: Scalar, TC: Scalar>(case: &Case) -> Result<(), TestCaseError> {
    let Case { pattern, bs, br, bc, n, density, ep, ld_extra, seed } = *case;
    let (m, k) = (br * bs, bc * bs);
    let a = generate::<TA>(pattern, m, k, bs, density, seed).unwrap();
    let at = BsrTranspose::new(&a).unwrap();
    let b = with_pad(&Matrix::<TB>::random(m, n, seed ^ 0xb).unwrap(), ld_extra);
    let c0 = if ep.beta == 0.0 {
        Matrix::<TC>::filled(k, n, n + ld_extra, TC::from_f64(f64::NAN)).unwrap() // never read: all poison
    } else {
        with_pad(&Matrix::<TC>::random(k, n, seed ^ 0xc).unwrap(), ld_extra)
    };
    let want = dense_t(&a, &b, &c0, ep);
    if a.nnzb() > 0 || ep.beta != 0.0 {
        prop_assert!(want.as_slice().iter().any(|&v| v != 0.0) || k == 0, "vacuous case {:?}", case);
    }
    let oracle = cpu::reference_t(&a, &b, &c0, ep).unwrap();
    let rep = compare(&oracle, &want, Tolerance { atol: 1e-9, rtol: 1e-12 });
    prop_assert!(rep.passed(), "oracle vs dense {:?}: {}", case, rep);
    let mut c = c0.clone();
    cpu::spmm_t(&a, &at, &b, &mut c, ep).unwrap();
    let rep = compare(&c, &want, Tolerance::for_operands_t(&a, &b, &c0, ep));
    let types = (TA::NAME, TB::NAME, TC::NAME);
    prop_assert!(rep.passed() && rep.checked == k * n, "{:?} {:?}: {}", types, case, rep);
    for r in 0..k {
        prop_assert!(c.row(r).iter().all(|v| v.to_f64().is_finite()), "row {} not finite", r);
        for p in n..c.ld().min(c.as_slice().len() - r * c.ld()) {
            let (now, was) = (c.as_slice()[r * c.ld() + p].to_f64(), c0.as_slice()[r * c.ld() + p].to_f64());
            prop_assert!(now.to_bits() == was.to_bits(), "padding ({}, {}) written", r, p);
        }
    }
    Ok(())
}

fn sddmm_matches_dense<TX: Scalar, TV: Scalar>(case: &Case) -> Result<(), TestCaseError> {
    let Case { pattern, bs, br, bc, n: k, density, ep, ld_extra, seed } = *case;
    let (m, n) = (br * bs, bc * bs);
    let mut out = generate::<TV>(pattern, m, n, bs, density, seed).unwrap();
    if ep.beta == 0.0 {
        out.values_mut().iter_mut().for_each(|v| *v = TV::from_f64(f64::NAN)); // never read: all poison
    }
    let x = with_pad(&Matrix::<TX>::random(m, k, seed ^ 0x1).unwrap(), ld_extra);
    let y = with_pad(&Matrix::<TX>::random(n, k, seed ^ 0x2).unwrap(), ld_extra);
    let want = dense_sddmm(&x, &y, &out, ep);
    prop_assert_eq!(want.col_idx(), out.col_idx());
    if out.nnzb() > 0 {
        prop_assert!(want.values().iter().any(|&v| v != 0.0), "vacuous case {:?}", case);
    }
    let oracle = cpu::reference_sddmm(&x, &y, &out, ep).unwrap();
    let rep = compare_values(&oracle, &want, Tolerance { atol: 1e-9, rtol: 1e-12 });
    prop_assert!(rep.passed(), "oracle vs dense {:?}: {}", case, rep);
    let tol = Tolerance::for_sddmm(&x, &y, &out, ep);
    cpu::sddmm(&x, &y, &mut out, ep).unwrap();
    let rep = compare_values(&out, &want, tol);
    prop_assert!(rep.passed() && rep.checked == out.values().len(), "{}/{} {:?}: {}", TX::NAME, TV::NAME, case, rep);
    prop_assert!(out.values().iter().all(|v| v.to_f64().is_finite()));
    Ok(())
}

/// Integer-valued inputs (|A|, |B|, |X|, |Y| <= 8, |C| <= 64): every product and partial sum is exact in f32, so
/// both backends equal the dense f64 computation bit for bit.
fn exact_integers(case: &Case) -> Result<(), TestCaseError> {
    let Case { pattern, bs, br, bc, n, density, ld_extra, seed, .. } = *case;
    let ep = Epilogue::new(if case.ep.alpha == 1.0 { 1.0 } else { -2.0 }, if case.ep.beta == 0.0 { 0.0 } else { 1.0 });
    let (m, k) = (br * bs, bc * bs);
    let a = generate_int::<f16>(pattern, m, k, bs, density, seed, 8).unwrap();
    let b = with_pad(&Matrix::<f16>::random_int(m, n, 8, seed ^ 3).unwrap(), ld_extra);
    let c0 = with_pad(&Matrix::<f32>::random_int(k, n, 64, seed ^ 4).unwrap(), ld_extra);
    let mut c = c0.clone();
    cpu::spmm_t(&a, &BsrTranspose::new(&a).unwrap(), &b, &mut c, ep).unwrap();
    let rep = compare(&c, &dense_t(&a, &b, &c0, ep), Tolerance::EXACT);
    prop_assert!(rep.passed(), "spmm_t {:?}: {}", case, rep);
    // SDDMM on A's pattern: X is m x n, Y is k x n (n plays the token count).
    let x = with_pad(&Matrix::<bf16>::random_int(m, n, 8, seed ^ 5).unwrap(), ld_extra);
    let y = with_pad(&Matrix::<bf16>::random_int(k, n, 8, seed ^ 6).unwrap(), ld_extra);
    let mut out = generate_int::<f32>(pattern, m, k, bs, density, seed, 64).unwrap();
    let want = dense_sddmm(&x, &y, &out, ep);
    cpu::sddmm(&x, &y, &mut out, ep).unwrap();
    let rep = compare_values(&out, &want, Tolerance::EXACT);
    prop_assert!(rep.passed(), "sddmm {:?}: {}", case, rep);
    Ok(())
}

/// Transposing twice gives the structure back (with the inverse permutation); `(column, row, perm)` enumerates
/// every stored block of A exactly once, each at its own place; the index matches its matrix.
fn transpose_properties(case: &Case) -> Result<(), TestCaseError> {
    let Case { pattern, bs, density, seed, .. } = *case;
    let (rows, cols) = (case.br * bs, case.bc * bs);
    let (rp, ci) = structure(pattern, rows, cols, bs, density, seed).unwrap();
    let t = BsrTranspose::from_structure(rows, cols, bs, &rp, &ci).unwrap();
    let a = Bsr::try_new(rows, cols, bs, rp.clone(), ci.clone(), vec![0.0f32; ci.len() * bs * bs]).unwrap();
    prop_assert!(t == BsrTranspose::new(&a).unwrap());
    t.check_matches(&a, "at").unwrap();
    prop_assert_eq!(t.col_ptr().len(), cols / bs + 1);
    let mut seen = vec![false; ci.len()];
    for bc in 0..t.block_cols() {
        let range = t.block_col_range(bc);
        prop_assert!(t.row_idx()[range.clone()].windows(2).all(|w| w[0] < w[1]), "rows not ascending in {}", bc);
        for j in range {
            let (row, p) = (t.row_idx()[j] as usize, t.perm()[j] as usize);
            prop_assert!(a.block_row_range(row).contains(&p) && ci[p] as usize == bc, "entry {} misplaced", j);
            prop_assert!(!std::mem::replace(&mut seen[p], true), "block {} twice", p);
        }
    }
    prop_assert!(seen.iter().all(|&s| s), "a block missed");
    let tt = BsrTranspose::from_structure(cols, rows, bs, t.col_ptr(), t.row_idx()).unwrap();
    prop_assert_eq!(tt.col_ptr(), &rp[..]);
    prop_assert_eq!(tt.row_idx(), &ci[..]);
    for (i, &j) in tt.perm().iter().enumerate() {
        prop_assert_eq!(t.perm()[j as usize] as usize, i);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn transposed_index(case in any_case()) {
        transpose_properties(&case)?;
    }

    #[test]
    fn exact_integer_cases(case in any_case()) {
        exact_integers(&case)?;
    }

    #[test]
    fn spmm_t_f16_in_f32_out(case in any_case()) {
        spmm_t_matches_dense::<f16, f16, f32>(&case)?;
    }

    #[test]
    fn spmm_t_f16_in_f16_out(case in any_case()) {
        spmm_t_matches_dense::<f16, f16, f16>(&case)?;
    }

    #[test]
    fn spmm_t_bf16_in_bf16_out(case in any_case()) {
        spmm_t_matches_dense::<bf16, bf16, bf16>(&case)?;
    }

    #[test]
    fn spmm_t_f32(case in any_case()) {
        spmm_t_matches_dense::<f32, f32, f32>(&case)?;
    }

    #[test]
    fn sddmm_f16_in_f32_values(case in any_case()) {
        sddmm_matches_dense::<f16, f32>(&case)?;
    }

    #[test]
    fn sddmm_f16_in_f16_values(case in any_case()) {
        sddmm_matches_dense::<f16, f16>(&case)?;
    }

    #[test]
    fn sddmm_bf16_in_bf16_values(case in any_case()) {
        sddmm_matches_dense::<bf16, bf16>(&case)?;
    }

    #[test]
    fn sddmm_f32(case in any_case()) {
        sddmm_matches_dense::<f32, f32>(&case)?;
    }
}
