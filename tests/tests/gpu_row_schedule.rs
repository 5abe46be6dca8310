//! The block-row schedule of a BSR matrix in the caller's memory (`Gpu::row_schedule`, `BsrView::with_schedule`):
//! with it, `Gpu::spmm_raw` on a raw view must launch exactly what `Gpu::spmm` launches on the same matrix uploaded
//! (longest rows first, the same split rows or flat block list), so the two outputs are equal bit for bit on random
//! values; without it, the raw view's result is still right (checked against the f64 oracle). Skewed and uniform
//! rows, bs 32 to 128, N from 8 to 200 (the narrow, mid and sm_90a kernels), C poisoned with NaN or random with
//! beta; schedules of another structure are refused. Without a GPU every test prints a skip line
//! (SPARSEK_REQUIRE_GPU=1 makes that a failure).

use sparsek::check::{Expected, RowSample};
use sparsek::format::{Pattern, generate};
use sparsek::gpu::{BsrView, Decomposition, Gpu, RowSchedule};
use sparsek::plan::RowSplit;
use sparsek::{Bsr, BsrError, Epilogue, Error, Layout, Matrix, f16};
use sparsek_tests::{RawBsr, gpu_for, same_bits};

/// `C = A @ B + beta * C0` through `spmm_raw` on `a_v`, row-major B and C on the Gpu's stream; C downloaded.
fn raw_product(gpu: &Gpu, a_v: &BsrView<'_, f16>, b: &Matrix<f16>, c0: &Matrix<f32>, ep: Epilogue) -> Matrix<f32> {
    let stream = gpu.stream();
    let b_d = gpu.upload_matrix(b).unwrap();
    let mut c_d = gpu.upload_matrix(c0).unwrap();
    {
        let b_v = b_d.view();
        let mut c_v = c_d.view_mut();
        // SAFETY: every view is of live memory of this Gpu, synchronised below before any of it is freed.
        unsafe { gpu.spmm_raw(stream.cu_stream(), a_v, &b_v, &mut c_v, None, ep) }.unwrap();
    }
    c_d.to_host().unwrap()
}

/// Each case: (bs, block rows, block columns, density, pattern, N, beta).
const CASES: [(usize, usize, usize, f64, Pattern, usize, f32); 7] = [
    // Many block rows, one much longer than the mean: split only when the launcher knows the longest row.
    (32, 320, 64, 0.1, Pattern::Skewed, 8, 0.0),
    (64, 256, 32, 0.2, Pattern::Skewed, 8, 0.5),
    (64, 256, 32, 0.2, Pattern::Skewed, 32, 0.0),
    (64, 192, 64, 0.22, Pattern::Skewed, 48, 0.0),
    // The sm_90a kernels (on an H100/H200): longest rows first on the persistent grid.
    (64, 32, 32, 0.3, Pattern::Skewed, 200, 0.0),
    (128, 16, 32, 0.3, Pattern::Uniform, 130, -1.0),
    (128, 160, 16, 0.25, Pattern::Skewed, 16, 0.0),
];

/// With its schedule a raw view launches what the uploaded matrix does: the same bits; without one the result still
/// matches the oracle. At least one case must be split only with the schedule, so the test sees the launcher use it.
#[test]
fn raw_views_with_a_schedule_launch_what_the_uploaded_matrix_does() {
    let Some((_shared, gpu)) = gpu_for("raw_views_with_a_schedule_launch_what_the_uploaded_matrix_does") else {
        return;
    };
    let stream = gpu.stream();
    let mut split_only_with_schedule = 0;
    for (i, &(bs, block_rows, block_cols, density, pattern, n, beta)) in CASES.iter().enumerate() {
        let seed = 0x5c4e_d000 + i as u64;
        let (m, k) = (block_rows * bs, block_cols * bs);
        let a: Bsr<f16> = generate(pattern, m, k, bs, density, seed).unwrap();
        let ctx = format!("case {i}: {m}x{n}x{k} bs {bs} {pattern:?} {density}, nnzb {}", a.nnzb());
        let b = Matrix::<f16>::random(k, n, seed ^ 0xb).unwrap();
        let c0 = if beta == 0.0 {
            Matrix::<f32>::filled(m, n, n.next_multiple_of(4), f32::NAN).unwrap()
        } else {
            Matrix::<f32>::random(m, n, seed ^ 0xc).unwrap().with_ld(n.next_multiple_of(4), f32::NAN).unwrap()
        };
        let ep = Epilogue::new(1.0, beta);
        let expected = Expected::compute(&a, &b, &c0, ep, RowSample::All, |_, _| {}).unwrap();

        let longest = a.row_ptr().windows(2).map(|w| (w[1] - w[0]) as usize).max().unwrap_or(0);
        let owned = {
            let (a_d, b_d) = (gpu.upload(&a).unwrap(), gpu.upload_matrix(&b).unwrap());
            let mut c_d = gpu.upload_matrix(&c0).unwrap();
            gpu.spmm(&a_d, &b_d, &mut c_d, ep).unwrap();
            c_d.to_host().unwrap()
        };
        let report = expected.check(&owned);
        assert!(report.passed(), "{ctx}: uploaded: {report}");

        let caller = RawBsr::upload(stream, &a);
        let schedule = gpu.row_schedule(a.row_ptr()).unwrap();
        assert_eq!(
            (schedule.block_rows(), schedule.nnzb(), schedule.max_row_blocks()),
            (block_rows, a.nnzb(), longest)
        );
        // What the launcher decides with the schedule and without it: the plans of the two raw launches (split
        // rows, the flat list or the sm_90a split rows only where the view knows its rows).
        let plan = |v: &BsrView<'_, f16>| gpu.plan_view::<f16, f32>(v, n, (Layout::RowMajor, Layout::RowMajor), ep);
        let with = plan(&caller.view(stream).with_schedule(&schedule).unwrap()).unwrap();
        let without = plan(&caller.view(stream)).unwrap();
        if with.decomposition != Decomposition::WholeRows && without.decomposition == Decomposition::WholeRows {
            split_only_with_schedule += 1;
        }
        let scheduled = raw_product(gpu, &caller.view(stream).with_schedule(&schedule).unwrap(), &b, &c0, ep);
        assert!(same_bits(&scheduled, &owned), "{ctx}: raw view with its schedule differs from the uploaded matrix");

        let plain = raw_product(gpu, &caller.view(stream), &b, &c0, ep);
        let report = expected.check(&plain);
        assert!(report.passed(), "{ctx}: raw view without a schedule: {report}");
    }
    // The split rows of the narrow and mid kernels are what the schedule changes (with the split workspace on).
    if gpu.policy().row_split != RowSplit::Off {
        assert!(split_only_with_schedule > 0, "no case was split only with the schedule: the test sees no difference");
    }
}

/// A schedule made for another structure (one block row more, or another number of blocks) is refused, and so
/// is a `row_ptr` that is not one.
#[test]
fn bad_schedules_are_refused() {
    let Some((_shared, gpu)) = gpu_for("bad_schedules_are_refused") else { return };
    let stream = gpu.stream();
    let (bs, m, k) = (64, 512, 512);
    let a: Bsr<f16> = generate(Pattern::Skewed, m, k, bs, 0.3, 7).unwrap();
    let caller = RawBsr::upload(stream, &a);
    let rows = m / bs;

    let mut longer = a.row_ptr().to_vec();
    longer.push(*longer.last().unwrap());
    let other: RowSchedule = gpu.row_schedule(&longer).unwrap();
    let got = caller.view(stream).with_schedule(&other).map(|_| ());
    assert!(
        matches!(got, Err(Error::InvalidBsr(BsrError::RowPtrLength { expected, got })) if expected == rows + 1 && got == rows + 2),
        "{got:?}"
    );
    let mut fewer = a.row_ptr().to_vec();
    *fewer.last_mut().unwrap() -= 1;
    let other = gpu.row_schedule(&fewer).unwrap();
    let got = caller.view(stream).with_schedule(&other).map(|_| ());
    assert!(matches!(got, Err(Error::InvalidBsr(BsrError::RowPtrEnd { .. }))), "{got:?}");
    assert!(matches!(gpu.row_schedule(&[1u32, 2]), Err(Error::InvalidBsr(BsrError::RowPtrStart { got: 1 }))));
    assert!(matches!(gpu.row_schedule(&[0i64, 3, 2]), Err(Error::InvalidBsr(BsrError::RowPtrDecreasing { .. }))));
    assert!(matches!(gpu.row_schedule::<i64>(&[]), Err(Error::InvalidArgument { name: "row_ptr", .. })));
    // A schedule of the same shape made from other lengths is accepted: only the speed depends on them.
    let mut flat = vec![0u32; rows + 1];
    for (i, e) in flat.iter_mut().enumerate() {
        *e = (i * a.nnzb() / rows) as u32;
    }
    let stale = gpu.row_schedule(&flat).unwrap();
    let b = Matrix::<f16>::random(k, 8, 11).unwrap();
    let c0 = Matrix::<f32>::filled(m, 8, 8, f32::NAN).unwrap();
    let ep = Epilogue::new(1.0, 0.0);
    let got = raw_product(gpu, &caller.view(stream).with_schedule(&stale).unwrap(), &b, &c0, ep);
    let report = Expected::compute(&a, &b, &c0, ep, RowSample::All, |_, _| {}).unwrap().check(&got);
    assert!(report.passed(), "a schedule of other row lengths: {report}");
}
