//! The backward products on the GPU (issue 44) against the f64 oracles of the same low-precision inputs:
//! `C = alpha * (A^T @ B) + beta * C` ([`Gpu::spmm_t`], [`Gpu::spmm_t_raw`]) and the block SDDMM
//! `values = alpha * (X @ Y^T) + beta * values` ([`Gpu::sddmm`], [`Gpu::sddmm_raw`]): every block size, f16 and
//! bf16 inputs, f32 and 16-bit outputs, every operand order, 32- and 64-bit pattern indices, skewed patterns with
//! empty rows and columns, K tails. Outputs are poisoned (NaN where beta is 0, so a value left unwritten or read
//! fails), operand padding is NaN (a kernel reading past a row fails), integer cases compare bit for bit. Without a
//! GPU every test prints a skip line (SPARSEK_REQUIRE_GPU=1 makes that a failure). For compute-sanitizer memcheck
//! and racecheck: `backward_products_match_the_oracle` launches every kernel of the two ops.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr};
use sparsek::check::{Tolerance, compare, compare_values};
use sparsek::format::{BsrTranspose, Pattern, generate, generate_int};
use sparsek::gpu::{BsrView, DenseView, DenseViewMut, Gpu, InputElement, OutputElement, TransposeView};
use sparsek::plan::{BackwardProblem, SddmmTileCounts};
use sparsek::{Bsr, Epilogue, Error, Layout, Matrix, Op, Scalar, bf16, cpu, f16};
use sparsek_tests::{RawBsr, addr, gpu, htod, own_gpu};

/// `m` stored in `layout` in a fresh device buffer, its leading dimension the inner extent rounded up to 16 bytes
/// plus 16 bytes more, the padding NaN: `(buffer, ld)`.
fn stored<T: Scalar + DeviceRepr>(stream: &Arc<CudaStream>, m: &Matrix<T>, layout: Layout) -> (CudaSlice<T>, usize) {
    let (outer, inner) = match layout {
        Layout::RowMajor => (m.rows(), m.cols()),
        Layout::ColMajor => (m.cols(), m.rows()),
    };
    let per16 = 16 / std::mem::size_of::<T>();
    let ld = inner.next_multiple_of(per16) + per16;
    let mut v = vec![T::from_f64(f64::NAN); (outer * ld).max(1)];
    for o in 0..outer {
        for i in 0..inner {
            v[o * ld + i] = match layout {
                Layout::RowMajor => m.get(o, i),
                Layout::ColMajor => m.get(i, o),
            };
        }
    }
    (htod(stream, &v), ld)
}

/// The `rows x cols` matrix stored in `layout` with leading dimension `ld` in `buf`.
fn fetched<T: Scalar + DeviceRepr>(
    stream: &Arc<CudaStream>,
    buf: &CudaSlice<T>,
    (rows, cols, ld): (usize, usize, usize),
    layout: Layout,
) -> Matrix<T> {
    let v = stream.clone_dtoh(buf).unwrap();
    Matrix::from_fn(rows, cols, |r, c| match layout {
        Layout::RowMajor => v[r * ld + c],
        Layout::ColMajor => v[c * ld + r],
    })
    .unwrap()
}

/// The patterns of the random cases: `(pattern, block rows, block columns, density)`; the skewed one leaves block
/// rows and columns empty.
const SHAPES: [(Pattern, usize, usize, f64); 3] =
    [(Pattern::Skewed, 7, 5, 0.3), (Pattern::Uniform, 3, 9, 0.5), (Pattern::Dense, 2, 3, 1.0)];

/// `A^T @ B` for one type combination over every shape, B and C order, and two epilogues, through the raw path
/// (and the owned path for row-major operands), against [`cpu::reference_t`].
fn check_t<TA: InputElement, TC: OutputElement>(gpu: &Gpu, bs: usize, seed: u64) {
    let stream = gpu.stream();
    for (s, &(pattern, br, bc, density)) in SHAPES.iter().enumerate() {
        let (m, k) = (br * bs, bc * bs);
        let a = generate::<TA>(pattern, m, k, bs, density, seed + s as u64).unwrap();
        let at = BsrTranspose::new(&a).unwrap();
        let raw = RawBsr::upload(stream, &a);
        let (col_ptr, row_idx, perm) =
            (htod(stream, at.col_ptr()), htod(stream, at.row_idx()), htod(stream, at.perm()));
        let ptrs = (addr(stream, &col_ptr), addr(stream, &row_idx), addr(stream, &perm));
        // SAFETY: the arrays hold A's transposed index, alive for the whole test.
        let atv = unsafe { TransposeView::from_raw(ptrs, k, bs, a.nnzb()) }.unwrap();
        for (n, ep) in
            [(17usize, Epilogue::default()), (128, Epilogue::new(0.5, 0.0)), (300, Epilogue::new(-0.75, 1.5))]
        {
            let b = Matrix::<TA>::random(m, n, seed ^ 0xb ^ n as u64).unwrap();
            let c0 = if ep.beta == 0.0 {
                Matrix::<TC>::filled(k, n, n, TC::from_f64(f64::NAN)).unwrap()
            } else {
                Matrix::<TC>::random(k, n, seed ^ 0xc).unwrap()
            };
            let want = cpu::reference_t(&a, &b, &c0, ep).unwrap();
            let tol = Tolerance::for_operands_t(&a, &b, &c0, ep);
            for (b_layout, c_layout) in [
                (Layout::RowMajor, Layout::RowMajor),
                (Layout::ColMajor, Layout::ColMajor),
                (Layout::RowMajor, Layout::ColMajor),
                (Layout::ColMajor, Layout::RowMajor),
            ] {
                let (b_buf, ldb) = stored(stream, &b, b_layout);
                let (mut c_buf, ldc) = stored(stream, &c0, c_layout);
                let bv = DenseView::from_cuda_slice(&b_buf, m, n, ldb, b_layout).unwrap();
                let mut cv = DenseViewMut::from_cuda_slice(&mut c_buf, k, n, ldc, c_layout).unwrap();
                // SAFETY: every view's memory is alive and unshared until the stream is synchronised below.
                unsafe { gpu.spmm_t_raw(stream.cu_stream(), &raw.view(stream), &atv, &bv, &mut cv, ep) }.unwrap();
                let got = fetched(stream, &c_buf, (k, n, ldc), c_layout);
                let rep = compare(&got, &want, tol);
                let what = (TA::NAME, TC::NAME, bs, pattern, n, b_layout, c_layout);
                assert!(rep.passed() && rep.checked == k * n, "A^T @ B {what:?}: {rep}");
                let problem = BackwardProblem {
                    op: Op::BsrSpmmT,
                    bs,
                    input: TA::IN_TYPE,
                    b_layout,
                    x_layout: Layout::RowMajor,
                    output: TC::OUT_TYPE,
                    shape: (m, k),
                    nnzb: a.nnzb(),
                    n,
                    c_layout,
                    beta_zero: ep.beta == 0.0,
                    sddmm_tiles: None,
                };
                assert_eq!(gpu.last_plan(), Some(gpu.plan_backward(&problem).unwrap()), "{what:?}");
            }
            // The owned path: row-major B and C, the index made on the device's copy.
            let a_d = gpu.upload(&a).unwrap();
            let at_d = gpu.transpose_index(&a_d).unwrap();
            let b_d = gpu.upload_matrix(&b).unwrap();
            let mut c_d = gpu.upload_matrix(&c0).unwrap();
            gpu.spmm_t(&a_d, &at_d, &b_d, &mut c_d, ep).unwrap();
            let rep = compare(&c_d.to_host().unwrap(), &want, tol);
            assert!(rep.passed(), "owned A^T @ B {:?}: {rep}", (TA::NAME, TC::NAME, bs, pattern, n));
        }
    }
}

/// The SDDMM through the owned path ([`Gpu::sddmm`]: row-major X and Y, the pattern uploaded, so the sm_90a kernels
/// take the upload's tile lists): `old` with its values replaced by the result.
fn owned_sddmm<TX: InputElement, TV: OutputElement>(
    gpu: &Gpu,
    (x, y): (&Matrix<TX>, &Matrix<TX>),
    pattern: &Bsr<TX>,
    old: &Bsr<TV>,
    ep: Epilogue,
) -> Bsr<TV> {
    let bs = old.block_size();
    let values = Matrix::from_fn(old.nnzb() * bs, bs, |r, c| old.values()[r * bs + c]).unwrap();
    let mut v_d = gpu.upload_matrix(&values).unwrap();
    let (x_d, y_d) = (gpu.upload_matrix(x).unwrap(), gpu.upload_matrix(y).unwrap());
    gpu.sddmm(&x_d, &y_d, &gpu.upload(pattern).unwrap(), &mut v_d, ep).unwrap();
    let host = v_d.to_host().unwrap();
    let mut got = old.clone();
    got.values_mut().iter_mut().enumerate().for_each(|(e, v)| *v = host.get(e / bs, e % bs));
    got
}

/// The block SDDMM for one type combination over every shape, X and Y order, two K (one with a tail in every
/// k-tile width) and two epilogues, with 32- (owned) and 64-bit (raw) pattern indices, against
/// [`cpu::reference_sddmm`].
fn check_sddmm<TX: InputElement, TV: OutputElement>(gpu: &Gpu, bs: usize, seed: u64) {
    let stream = gpu.stream();
    for (s, &(pattern, br, bc, density)) in SHAPES.iter().enumerate() {
        let (m, n) = (br * bs, bc * bs);
        let shape = generate::<TX>(pattern, m, n, bs, density, seed + s as u64).unwrap();
        let raw = RawBsr::upload(stream, &shape);
        // The raw view's schedules: the structure's own (the sm_90a kernels take their tiles from its lists), and
        // one made of other row lengths of the same shape (the rows' lengths reversed: rows longer than their
        // lists say are taken on by their last tile, shorter ones leave tiles empty; the product is the same).
        let lengths: Vec<u32> = shape.row_ptr().windows(2).map(|w| w[1] - w[0]).collect();
        let mut other = vec![0u32];
        lengths.iter().rev().for_each(|l| other.push(other[other.len() - 1] + l));
        let schedules =
            [None, Some(gpu.row_schedule(shape.row_ptr()).unwrap()), Some(gpu.row_schedule(&other).unwrap())];
        let reversed: Vec<u32> = lengths.iter().rev().copied().collect();
        let counts = [None, Some(SddmmTileCounts::of(&lengths)), Some(SddmmTileCounts::of(&reversed))];
        for (k, ep) in [(77usize, Epilogue::default()), (300, Epilogue::new(1.25, -0.5))] {
            let mut old = generate::<TV>(pattern, m, n, bs, density, seed + s as u64).unwrap();
            if ep.beta == 0.0 {
                old.values_mut().iter_mut().for_each(|v| *v = TV::from_f64(f64::NAN));
            }
            let x = Matrix::<TX>::random(m, k, seed ^ 0x1 ^ k as u64).unwrap();
            let y = Matrix::<TX>::random(n, k, seed ^ 0x2 ^ k as u64).unwrap();
            let want = cpu::reference_sddmm(&x, &y, &old, ep).unwrap();
            let tol = Tolerance::for_sddmm(&x, &y, &old, ep);
            let len = old.values().len();
            for ((x_layout, y_layout), sched) in [
                (Layout::RowMajor, Layout::RowMajor),
                (Layout::ColMajor, Layout::ColMajor),
                (Layout::RowMajor, Layout::ColMajor),
                (Layout::ColMajor, Layout::RowMajor),
            ]
            .into_iter()
            .zip([0, 1, 2, 1])
            {
                let (x_buf, ldx) = stored(stream, &x, x_layout);
                let (y_buf, ldy) = stored(stream, &y, y_layout);
                let zero = [TV::from_f64(0.0)];
                let mut v_buf = htod(stream, if len == 0 { &zero[..] } else { old.values() });
                let xv = DenseView::from_cuda_slice(&x_buf, m, k, ldx, x_layout).unwrap();
                let yv = DenseView::from_cuda_slice(&y_buf, n, k, ldy, y_layout).unwrap();
                let rows = shape.nnzb() * bs;
                let mut vv = DenseViewMut::from_cuda_slice(&mut v_buf, rows, bs, bs, Layout::RowMajor).unwrap();
                let pv: BsrView<'_, TX> = raw.view(stream);
                let pv = match &schedules[sched] {
                    Some(schedule) => pv.with_schedule(schedule).unwrap(),
                    None => pv,
                };
                // SAFETY: every view's memory is alive and unshared until the stream is synchronised below.
                unsafe { gpu.sddmm_raw(stream.cu_stream(), &xv, &yv, &pv, &mut vv, ep) }.unwrap();
                let mut got = old.clone();
                got.values_mut().copy_from_slice(&stream.clone_dtoh(&v_buf).unwrap()[..len]);
                let rep = compare_values(&got, &want, tol);
                let what = (TX::NAME, TV::NAME, bs, pattern, k, x_layout, y_layout, ["none", "own", "other"][sched]);
                assert!(rep.passed() && rep.checked == len, "SDDMM {what:?}: {rep}");
                let problem = BackwardProblem {
                    op: Op::Sddmm,
                    bs,
                    input: TX::IN_TYPE,
                    b_layout: y_layout,
                    x_layout,
                    output: TV::OUT_TYPE,
                    shape: (m, n),
                    nnzb: shape.nnzb(),
                    n: k,
                    c_layout: Layout::RowMajor,
                    beta_zero: ep.beta == 0.0,
                    sddmm_tiles: counts[sched],
                };
                if shape.nnzb() > 0 {
                    assert_eq!(gpu.last_plan(), Some(gpu.plan_backward(&problem).unwrap()), "{what:?}");
                }
            }
            // The owned path: row-major X and Y, u32 indices, the values in a matrix of nnzb * bs rows.
            let got = owned_sddmm(gpu, (&x, &y), &shape, &old, ep);
            let rep = compare_values(&got, &want, tol);
            assert!(rep.passed(), "owned SDDMM {:?}: {rep}", (TX::NAME, TV::NAME, bs, pattern, k));
        }
    }
}

/// Every kernel of the two ops against the oracle (for compute-sanitizer memcheck and racecheck). A Gpu of the
/// test's own: each launch's recorded plan (`Gpu::last_plan`) is checked, which another test's launches on the
/// shared Gpu would overwrite (seen once on an H200: an SDDMM plan of another test in place of A^T's).
#[test]
fn backward_products_match_the_oracle() {
    let Some(owned) = own_gpu("backward_products_match_the_oracle", |g| g) else { return };
    let gpu = &owned;
    for bs in [16usize, 32, 64, 128] {
        let seed = 44 + bs as u64;
        check_t::<f16, f32>(gpu, bs, seed);
        check_t::<f16, f16>(gpu, bs, seed);
        check_t::<bf16, f32>(gpu, bs, seed);
        check_t::<bf16, bf16>(gpu, bs, seed);
        check_sddmm::<f16, f32>(gpu, bs, seed);
        check_sddmm::<f16, f16>(gpu, bs, seed);
        check_sddmm::<bf16, f32>(gpu, bs, seed);
        check_sddmm::<bf16, bf16>(gpu, bs, seed);
    }
}

/// Integer-valued operands (|A|, |B|, |X|, |Y| <= 8, |C| <= 64, K up to 300): every product and partial sum is
/// exact in f32, so both products equal the dense computation bit for bit, at every block size.
#[test]
fn integer_operands_give_exact_gradients() {
    let Some(gpu) = gpu("integer_operands_give_exact_gradients") else { return };
    for bs in [16usize, 32, 64, 128] {
        let (m, k, n) = (6 * bs, 4 * bs, 300);
        let ep = Epilogue::new(-2.0, 1.0);
        let a = generate_int::<f16>(Pattern::Skewed, m, k, bs, 0.4, bs as u64, 8).unwrap();
        let b = Matrix::<f16>::random_int(m, n, 8, 3).unwrap();
        let c0 = Matrix::<f32>::random_int(k, n, 64, 4).unwrap();
        let (a_d, b_d) = (gpu.upload(&a).unwrap(), gpu.upload_matrix(&b).unwrap());
        let mut c_d = gpu.upload_matrix(&c0).unwrap();
        gpu.spmm_t(&a_d, &gpu.transpose_index(&a_d).unwrap(), &b_d, &mut c_d, ep).unwrap();
        let rep = compare(&c_d.to_host().unwrap(), &cpu::reference_t(&a, &b, &c0, ep).unwrap(), Tolerance::EXACT);
        assert!(rep.passed(), "A^T @ B bs {bs}: {rep}");

        let x = Matrix::<bf16>::random_int(m, n, 8, 5).unwrap();
        let y = Matrix::<bf16>::random_int(k, n, 8, 6).unwrap();
        let old = generate_int::<f32>(Pattern::Skewed, m, k, bs, 0.4, bs as u64, 64).unwrap();
        let got = owned_sddmm(gpu, (&x, &y), &convert::<bf16>(&old), &old, ep);
        let rep = compare_values(&got, &cpu::reference_sddmm(&x, &y, &old, ep).unwrap(), Tolerance::EXACT);
        assert!(rep.passed(), "SDDMM bs {bs}: {rep}");
    }
}

/// The sm_90a SDDMM's tile lists: block rows of 13, 0, 1, 9 and 6 blocks (groups of 4 at bs 64, 2 at bs 128,
/// with tails), run through the structure's own schedule (one tile per group), another's of the same shape (rows
/// longer than their lists say taken on by their last tile, shorter ones leaving tiles empty), none, and the owned
/// path, on integer operands: every result is the dense computation bit for bit, and every block is written (NaN
/// poison where beta is 0).
#[test]
fn sddmm_tile_lists_cover_every_block_whatever_the_schedule() {
    // A Gpu of the test's own: its launches' plans are read back (`Gpu::last_plan`).
    let Some(owned) = own_gpu("sddmm_tile_lists_cover_every_block_whatever_the_schedule", |g| g) else { return };
    let gpu = &owned;
    let stream = gpu.stream();
    let lengths = [13u32, 0, 1, 9, 6];
    for bs in [64usize, 128] {
        let (m, n, k) = (lengths.len() * bs, 16 * bs, 200);
        let mut row_ptr = vec![0u32];
        let mut col_idx = Vec::new();
        for (r, &len) in lengths.iter().enumerate() {
            // Steps of 5 columns from a row-dependent start, wrapping (5 is prime to 16: distinct), sorted.
            let mut cols: Vec<u32> = (0..len).map(|i| (r as u32 * 3 + 5 * i) % 16).collect();
            cols.sort_unstable();
            cols.dedup();
            assert_eq!(cols.len(), len as usize);
            col_idx.extend(cols);
            row_ptr.push(col_idx.len() as u32);
        }
        let nnzb = col_idx.len();
        let poison = vec![f32::NAN; nnzb * bs * bs];
        let old = Bsr::try_new(m, n, bs, row_ptr.clone(), col_idx.clone(), poison).unwrap();
        let pattern = convert::<bf16>(&old);
        let x = Matrix::<bf16>::random_int(m, k, 8, 7).unwrap();
        let y = Matrix::<bf16>::random_int(n, k, 8, 8).unwrap();
        let ep = Epilogue::new(-2.0, 0.0);
        let want = cpu::reference_sddmm(&x, &y, &old, ep).unwrap();
        let raw = RawBsr::upload(stream, &pattern);
        let mut other = vec![0u32];
        [6u32, 1, 13, 0, 9].iter().for_each(|l| other.push(other[other.len() - 1] + l));
        let schedules = [Some(gpu.row_schedule(&row_ptr).unwrap()), Some(gpu.row_schedule(&other).unwrap()), None];
        let (x_buf, ldx) = stored(stream, &x, Layout::ColMajor);
        let (y_buf, ldy) = stored(stream, &y, Layout::RowMajor);
        let xv = DenseView::from_cuda_slice(&x_buf, m, k, ldx, Layout::ColMajor).unwrap();
        let yv = DenseView::from_cuda_slice(&y_buf, n, k, ldy, Layout::RowMajor).unwrap();
        for (which, schedule) in ["own", "other", "none"].into_iter().zip(&schedules) {
            let mut v_buf = htod(stream, old.values());
            let mut vv = DenseViewMut::from_cuda_slice(&mut v_buf, nnzb * bs, bs, bs, Layout::RowMajor).unwrap();
            let pv: BsrView<'_, bf16> = raw.view(stream);
            let pv = match schedule {
                Some(s) => pv.with_schedule(s).unwrap(),
                None => pv,
            };
            // SAFETY: every view's memory is alive and unshared until the stream is synchronised below.
            unsafe { gpu.sddmm_raw(stream.cu_stream(), &xv, &yv, &pv, &mut vv, ep) }.unwrap();
            let mut got = old.clone();
            got.values_mut().copy_from_slice(&stream.clone_dtoh(&v_buf).unwrap());
            let rep = compare_values(&got, &want, Tolerance::EXACT);
            let plan = gpu.last_plan().map(|p| p.to_string()).unwrap_or_default();
            assert!(rep.passed() && rep.checked == nnzb * bs * bs, "bs {bs}, schedule {which}: {rep}; {plan}");
        }
        // The owned path (the upload's own lists).
        let got = owned_sddmm(gpu, (&x, &y), &pattern, &old, ep);
        let rep = compare_values(&got, &want, Tolerance::EXACT);
        assert!(rep.passed(), "owned, bs {bs}: {rep}");
    }
}

/// Empty products scale the output by beta and read nothing else, at every block size (on Hopper the sm_90a
/// kernels' block sizes take the sm_80 kernel here: a TMA map cannot describe an empty operand): A^T @ B with a
/// matrix of no blocks, and the SDDMM with K = 0 (X and Y of no columns). beta 0.5 is exact.
#[test]
fn empty_products_scale_the_output_by_beta() {
    let Some(gpu) = gpu("empty_products_scale_the_output_by_beta") else { return };
    let stream = gpu.stream();
    let ep = Epilogue::new(1.0, 0.5);
    for bs in [16usize, 32, 64, 128] {
        let (m, k, n) = (3 * bs, 2 * bs, 40);
        let none = Bsr::<f16>::try_new(m, k, bs, vec![0; 4], Vec::new(), Vec::new()).unwrap();
        let (a_d, b_d) =
            (gpu.upload(&none).unwrap(), gpu.upload_matrix(&Matrix::<f16>::random(m, n, 1).unwrap()).unwrap());
        let c0 = Matrix::<f32>::random(k, n, 2).unwrap();
        let mut c_d = gpu.upload_matrix(&c0).unwrap();
        gpu.spmm_t(&a_d, &gpu.transpose_index(&a_d).unwrap(), &b_d, &mut c_d, ep).unwrap();
        let want: Vec<f32> = c0.as_slice().iter().map(|v| v * 0.5).collect();
        assert_eq!(c_d.to_host().unwrap().as_slice(), &want[..], "A^T @ B of no blocks, bs {bs}");

        let pattern = generate::<f16>(Pattern::Uniform, m, k, bs, 0.5, 3).unwrap();
        let old = generate::<f32>(Pattern::Uniform, m, k, bs, 0.5, 3).unwrap();
        let raw = RawBsr::upload(stream, &pattern);
        let (x_buf, y_buf) =
            (htod(stream, &vec![f16::from_f32(f32::NAN); m * 8]), htod(stream, &vec![f16::from_f32(f32::NAN); k * 8]));
        let xv = DenseView::from_cuda_slice(&x_buf, m, 0, 8, Layout::RowMajor).unwrap();
        let yv = DenseView::from_cuda_slice(&y_buf, k, 0, 8, Layout::RowMajor).unwrap();
        let mut v_buf = htod(stream, old.values());
        let rows = pattern.nnzb() * bs;
        let mut vv = DenseViewMut::from_cuda_slice(&mut v_buf, rows, bs, bs, Layout::RowMajor).unwrap();
        // SAFETY: every view's memory is alive and unshared until the stream is synchronised below.
        unsafe { gpu.sddmm_raw(stream.cu_stream(), &xv, &yv, &raw.view(stream), &mut vv, ep) }.unwrap();
        let want: Vec<f32> = old.values().iter().map(|v| v * 0.5).collect();
        assert_eq!(stream.clone_dtoh(&v_buf).unwrap(), want, "SDDMM with K = 0, bs {bs}");
    }
}

/// `a`'s structure with its values converted to `T`.
fn convert<T: Scalar>(a: &Bsr<f32>) -> Bsr<T> {
    let values = a.values().iter().map(|&v| T::from_f64(f64::from(v))).collect();
    Bsr::try_new(a.rows(), a.cols(), a.block_size(), a.row_ptr().to_vec(), a.col_idx().to_vec(), values).unwrap()
}

/// Bad input gets a typed error and changes nothing: an index made from another matrix, an activation, mismatched
/// shapes, a values buffer of the wrong shape or one that overlaps an input.
#[test]
fn bad_backward_input_is_refused() {
    let Some(gpu) = gpu("bad_backward_input_is_refused") else { return };
    let stream = gpu.stream();
    let bs = 32;
    let a = generate::<f16>(Pattern::Uniform, 4 * bs, 2 * bs, bs, 0.5, 1).unwrap();
    let (a_d, other) = (gpu.upload(&a).unwrap(), gpu.upload(&a).unwrap());
    let b_d = gpu.upload_matrix(&Matrix::<f16>::random(4 * bs, 8, 2).unwrap()).unwrap();
    let poison = Matrix::<f32>::filled(2 * bs, 8, 8, 7.0).unwrap();
    let mut c_d = gpu.upload_matrix(&poison).unwrap();
    let at_other = gpu.transpose_index(&other).unwrap();
    let e = gpu.spmm_t(&a_d, &at_other, &b_d, &mut c_d, Epilogue::default()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "at", .. }), "{e}");
    let at = gpu.transpose_index(&a_d).unwrap();
    let relu = Epilogue { activation: sparsek::Activation::Relu, ..Epilogue::default() };
    let e = gpu.spmm_t(&a_d, &at, &b_d, &mut c_d, relu).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "epilogue", .. }), "{e}");
    let mut wrong = gpu.upload_matrix(&Matrix::<f32>::filled(bs, 8, 8, 7.0).unwrap()).unwrap();
    assert!(matches!(gpu.spmm_t(&a_d, &at, &b_d, &mut wrong, Epilogue::default()), Err(Error::ShapeMismatch { .. })));
    gpu.synchronize().unwrap();
    assert_eq!(c_d.to_host().unwrap().as_slice(), poison.as_slice(), "a refused launch wrote C");

    // SDDMM: values of the wrong shape, and values aliasing X.
    let x = gpu.upload_matrix(&Matrix::<f16>::random(4 * bs, 40, 3).unwrap()).unwrap();
    let y = gpu.upload_matrix(&Matrix::<f16>::random(2 * bs, 40, 4).unwrap()).unwrap();
    let mut short = gpu.upload_matrix(&Matrix::<f32>::filled(a.nnzb() * bs - 1, bs, bs, 7.0).unwrap()).unwrap();
    let e = gpu.sddmm(&x, &y, &a_d, &mut short, Epilogue::default()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "values", .. }), "{e}");
    // Values over X's own memory: one buffer holds X (its first 4 bs x 40) and is described as the values too.
    let rows = a.nnzb() * bs;
    let big = htod(stream, &vec![f16::from_f32(1.0); (rows * bs).max(4 * bs * 40)]);
    let xv = DenseView::from_cuda_slice(&big, 4 * bs, 40, 40, Layout::RowMajor).unwrap();
    let yv = DenseView::from_cuda_slice(y.as_slice(), 2 * bs, 40, y.ld(), Layout::RowMajor).unwrap();
    let raw = RawBsr::upload(stream, &a);
    // SAFETY: `big` holds rows x bs f16 and lives to the end; the launch is refused before anything runs.
    let mut vv = unsafe { DenseViewMut::<f16>::from_raw(addr(stream, &big), rows, bs, bs, Layout::RowMajor) }.unwrap();
    // SAFETY: as above; nothing is launched.
    let e = unsafe { gpu.sddmm_raw(stream.cu_stream(), &xv, &yv, &raw.view(stream), &mut vv, Epilogue::default()) };
    assert!(matches!(e, Err(Error::InvalidArgument { name: "the values", .. })), "{e:?}");
    let host = stream.clone_dtoh(&big).unwrap();
    assert!(host.iter().all(|&v| v == f16::from_f32(1.0)), "a refused launch wrote the values");
}

/// The transposed index built on the device equals the host's ([`BsrTranspose`]) entry for entry: uploaded
/// matrices (u32) and views of 64-bit arrays, skewed patterns with empty rows and columns, more block rows than a
/// warp's 32 and more block columns than the scan's threads (several per thread), no blocks at all.
#[test]
fn the_device_transposed_index_is_the_hosts() {
    let Some(gpu) = gpu("the_device_transposed_index_is_the_hosts") else { return };
    let stream = gpu.stream();
    for (pattern, rows, cols, bs, density) in [
        (Pattern::Skewed, 7, 5, 16, 0.3),
        (Pattern::Uniform, 70, 33, 16, 0.2),
        (Pattern::Skewed, 40, 600, 16, 0.05),
        (Pattern::Banded, 128, 128, 64, 0.1),
        (Pattern::Dense, 3, 2, 128, 1.0),
        (Pattern::Empty, 4, 4, 32, 0.0),
    ] {
        let a = generate::<f16>(pattern, rows * bs, cols * bs, bs, density, rows as u64).unwrap();
        let want = BsrTranspose::new(&a).unwrap();
        let a_d = gpu.upload(&a).unwrap();
        let raw = RawBsr::upload(stream, &a);
        for at in [gpu.transpose_index(&a_d).unwrap(), gpu.transpose_view(&raw.view(stream)).unwrap()] {
            let (col_ptr, row_idx, perm) = at.to_host().unwrap();
            let what = (pattern, rows, cols, bs);
            assert_eq!(col_ptr, want.col_ptr(), "col_ptr {what:?}");
            assert_eq!(row_idx, want.row_idx(), "row_idx {what:?}");
            assert_eq!(perm, want.perm(), "perm {what:?}");
        }
    }
}
