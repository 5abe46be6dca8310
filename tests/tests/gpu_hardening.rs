//! The launch path's memory safety on the GPU (issue 42, part 1): no safe API lets a kernel touch memory outside
//! the operands' allocations, C overlapping any input (the indices included) is refused, and a buffer behind a view
//! made by a safe constructor outlives the launch that reads it even when dropped right after the call.
//!
//! `inflated_slice_length_is_refused` is the out-of-bounds case: run it under `compute-sanitizer --tool memcheck`
//! (clean = no kernel touched memory outside an allocation; before the fix the safe `Gpu::spmm` launched over a
//! 2 MiB allocation as if it held 32 MiB). Without a GPU every test prints a skip line (SPARSEK_REQUIRE_GPU=1 makes
//! that a failure).

use std::sync::Arc;

use cudarc::driver::sys::CUresult;
use cudarc::driver::{CudaSlice, CudaStream};
use sparsek::format::{Pattern, generate_int};
use sparsek::gpu::{BsrArrays, BsrView, DenseView, DenseViewMut, DeviceMatrix, IndexType, VectorView};
use sparsek::{Bsr, Epilogue, Error, Layout, Matrix, f16};
use sparsek_tests::{addr, gpu, gpu_for, htod};

fn bits_f32(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Elements of f16 the inflated slices really hold: 2 MiB.
const REAL: usize = 1 << 20;

/// A slice that claims 2^63 + 2^20 f16 elements over an allocation of 2^20 (2 MiB). In a build without overflow
/// checks (release) cudarc's own safe `alloc_zeros` makes exactly this: it multiplies the length by the element
/// size unchecked, and (2^63 + 2^20) * 2 wraps to 2^21 bytes. With overflow checks on (the test profile) that
/// multiplication panics inside cudarc, so the same slice is made over a real 2 MiB allocation explicitly.
fn inflated(stream: &Arc<CudaStream>) -> CudaSlice<f16> {
    let claimed = (1usize << 63) + REAL;
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let safe = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| stream.alloc_zeros::<f16>(claimed)));
    std::panic::set_hook(prev);
    match safe {
        Ok(slice) => slice.expect("cudarc's alloc_zeros of a wrapped length"),
        Err(_) => {
            let real = stream.alloc_zeros::<f16>(REAL).unwrap();
            let ptr = real.leak();
            // SAFETY: `ptr` is a live allocation of REAL f16 of this stream's context, owned (and freed) by the new
            // slice from here on. Its claimed length is the lie under test: what safe cudarc code makes in release.
            unsafe { stream.upgrade_device_ptr(ptr, claimed) }
        }
    }
}

fn is_outside(r: Result<impl Sized, Error>) -> bool {
    matches!(r, Err(Error::OutsideAllocation { .. }))
}

/// The out-of-bounds case of issue 42: a slice whose length claims far more than its allocation is refused by
/// every safe constructor (typed errors naming the numbers), with no launch; a description that fits the real
/// allocation exactly (the kernel reads its last byte) is accepted and gives the exact product, through the
/// owned path and the view path. Poisoned C buffers stay untouched by the refusals. For compute-sanitizer memcheck.
#[test]
fn inflated_slice_length_is_refused() {
    let Some((_shared, gpu)) = gpu_for("inflated_slice_length_is_refused") else { return };
    let stream = gpu.stream();
    let mut fake = inflated(stream);
    assert!(fake.len() > 1 << 62, "the slice claims {} elements", fake.len());

    // 4096 x 4096 f16 = 32 MiB claimed over 2 MiB: the owned matrix and every view are refused.
    let e = DeviceMatrix::<f16>::from_slice(inflated(stream), 4096, 4096, 4096).err().expect("from_slice accepted");
    eprintln!("from_slice: {e}");
    assert!(matches!(e, Error::OutsideAllocation { what: "device matrix", bytes: 33_554_432, .. }), "{e}");
    // The allocation's size is the driver's, not the slice's claim: the 2 MiB really allocated.
    assert!(matches!(e, Error::OutsideAllocation { alloc_bytes: 2_097_152, .. }), "the driver's range: {e}");
    assert!(is_outside(DenseView::from_cuda_slice(&fake, 4096, 4096, 4096, Layout::RowMajor)));
    assert!(is_outside(DenseView::from_cuda_slice(&fake, 1024, 4096, 1024, Layout::ColMajor)));
    assert!(is_outside(DenseViewMut::from_cuda_slice(&mut fake, 2048, 1024, 1024, Layout::RowMajor)));
    // The bias: the whole claimed length's bytes overflow.
    assert!(matches!(VectorView::from_cuda_slice(&fake), Err(Error::TooLarge { .. })));
    // A cudarc view of the slice's last 16 bytes, described as 16 x 8: 256 bytes from 16 before the end.
    let tail = fake.slice(REAL - 8..);
    let e = DenseView::from_cuda_view(&tail, 16, 8, 8, Layout::RowMajor).expect_err("a view past the end");
    assert!(matches!(e, Error::OutsideAllocation { bytes: 256, alloc_bytes: 2_097_152, .. }), "{e}");

    // What fits is accepted: 1024 x 1024 f16 is the whole allocation. B = integers, A integer blocks: exact.
    let (bs, m, k, n) = (64usize, 128usize, 1024usize, 1024usize);
    let a: Bsr<f16> = generate_int(Pattern::Uniform, m, k, bs, 0.5, 42, 4).unwrap();
    let b = Matrix::<f16>::from_fn(k, n, |r, c| f16::from_f32(((r * 5 + c * 3) % 7) as f32 - 3.0)).unwrap();
    stream.memcpy_htod(b.as_slice(), &mut fake.slice_mut(..REAL)).unwrap();
    let want = sparsek::cpu::reference(&a, &b, &Matrix::<f32>::zeros(m, n).unwrap(), Epilogue::default()).unwrap();
    let a_d = gpu.upload(&a).unwrap();
    let check = |c: &[f32], ldc: usize, what: &str| {
        for r in 0..m {
            for j in 0..n {
                assert_eq!(c[r * ldc + j] as f64, want.get(r, j), "{what}: ({r}, {j})");
            }
        }
    };
    {
        let b_v = DenseView::from_cuda_slice(&fake, k, n, n, Layout::RowMajor).expect("the exact fit");
        let mut c_d = htod(stream, &vec![f32::NAN; m * n]);
        let mut c_v = DenseViewMut::from_cuda_slice(&mut c_d, m, n, n, Layout::RowMajor).unwrap();
        // SAFETY: this Gpu's stream; every buffer is live and used by nothing else.
        unsafe { gpu.spmm_raw(stream.cu_stream(), &a_d.view(), &b_v, &mut c_v, None, Epilogue::default()) }.unwrap();
        check(&stream.clone_dtoh(&c_d).unwrap(), n, "view over the exact fit");
    }
    let b_owned = DeviceMatrix::from_slice(fake, k, n, n).expect("the exact fit as an owned matrix");
    let mut c = gpu.zeros::<f32>(m, n).unwrap();
    gpu.spmm(&a_d, &b_owned, &mut c, Epilogue::default()).unwrap();
    let c_host = c.to_host().unwrap();
    check(c_host.as_slice(), c.ld(), "owned matrix over the exact fit");

    // The owned path's launch of the issue (B claiming 32 MiB): refused before any launch, C untouched.
    let c_big = gpu.upload_matrix(&Matrix::<f32>::from_fn(m, 4096, |_, _| f32::NAN).unwrap()).unwrap();
    let before = c_big.to_host().unwrap();
    assert!(DeviceMatrix::<f16>::from_slice(inflated(stream), k, 4096, 4096).is_err());
    let after = c_big.to_host().unwrap();
    assert_eq!(bits_f32(before.as_slice()), bits_f32(after.as_slice()));
}

/// C over A's `row_ptr` or `col_idx` (a float view of the index memory, as `out=` over an index tensor from
/// Python would be): refused with a typed error naming the index array, for 32- and 64-bit indices, and nothing is
/// written (the indices keep their bits).
#[test]
fn c_over_the_indices_is_refused() {
    let Some((_shared, gpu)) = gpu_for("c_over_the_indices_is_refused") else { return };
    let stream = gpu.stream();
    let (bs, m, k, n) = (32usize, 64usize, 64usize, 16usize);
    let a: Bsr<f16> = generate_int(Pattern::Uniform, m, k, bs, 1.0, 3, 7).unwrap();
    let values = htod(stream, a.values());
    let b = htod(stream, &vec![f16::ONE; k * n]);
    let b_v = DenseView::from_cuda_slice(&b, k, n, n, Layout::RowMajor).unwrap();
    for index in [IndexType::U32, IndexType::I64] {
        for target in ["A's row_ptr", "A's col_idx"] {
            // Each index array at the start of a buffer big enough to hold C (m x n f32): C over it is live memory.
            let room = m * n * 4 / index.bytes();
            let fill = |v: &[u32]| -> Vec<u64> {
                let mut out: Vec<u64> = v.iter().map(|&x| u64::from(x)).collect();
                out.resize(room, 0xdead);
                out
            };
            let (rp, ci) = (fill(a.row_ptr()), fill(a.col_idx()));
            let (row_ptr, col_idx): (CudaSlice<u8>, CudaSlice<u8>) = match index {
                IndexType::U32 => {
                    let narrow = |v: Vec<u64>| v.iter().flat_map(|&x| (x as u32).to_le_bytes()).collect::<Vec<u8>>();
                    (htod(stream, &narrow(rp)), htod(stream, &narrow(ci)))
                }
                IndexType::I64 => {
                    let wide = |v: Vec<u64>| v.iter().flat_map(|&x| x.to_le_bytes()).collect::<Vec<u8>>();
                    (htod(stream, &wide(rp)), htod(stream, &wide(ci)))
                }
            };
            let arrays = BsrArrays {
                values: addr(stream, &values),
                row_ptr: addr(stream, &row_ptr),
                col_idx: addr(stream, &col_idx),
                index,
            };
            // SAFETY: a valid structure of live buffers of this context.
            let a_v = unsafe { BsrView::<f16>::from_raw(arrays, m, k, bs, a.nnzb()) }.unwrap();
            let over = if target == "A's row_ptr" { arrays.row_ptr } else { arrays.col_idx };
            // SAFETY: m x n f32 of live memory (the index buffer holds that many bytes); the launch must refuse.
            let mut c_v = unsafe { DenseViewMut::<f32>::from_raw(over, m, n, n, Layout::RowMajor) }.unwrap();
            let before = (stream.clone_dtoh(&row_ptr).unwrap(), stream.clone_dtoh(&col_idx).unwrap());
            // SAFETY: this Gpu's stream; the call must refuse before launching.
            let r = unsafe { gpu.spmm_raw(stream.cu_stream(), &a_v, &b_v, &mut c_v, None, Epilogue::default()) };
            match r {
                Err(Error::InvalidArgument { name: "C", reason }) => {
                    assert!(reason.contains(&format!("overlaps {target}")), "{index:?} {target}: {reason}")
                }
                other => panic!("{index:?} {target}: {other:?}"),
            }
            let after = (stream.clone_dtoh(&row_ptr).unwrap(), stream.clone_dtoh(&col_idx).unwrap());
            assert_eq!(before, after, "{index:?} {target}: a refused launch wrote the indices");
        }
    }
}

/// A buffer behind a view made by a safe constructor, owned by another stream than the launch's, dropped right
/// after `spmm_raw` returns while the launch's stream is still busy: its memory is freed only after the kernel
/// (the launch makes the buffer's stream wait for it). The freed memory is immediately reallocated on that stream
/// and filled with NaN; the product must still be exact. Before the fix the view had recorded its event when it
/// was made, so the buffer's stream freed (and handed out again) memory the queued kernel had yet to read.
#[test]
fn dropping_a_safe_view_buffer_after_the_launch_is_safe() {
    let _alone = sparsek_tests::gpu_alone();
    let Some(gpu) = gpu("dropping_a_safe_view_buffer_after_the_launch_is_safe") else { return };
    let (launch, owner) = (gpu.new_stream().unwrap(), gpu.new_stream().unwrap());
    // Work that keeps the launch's stream busy for a while: 8192^2 at 30%, N 1024, several times.
    let big: Bsr<f16> = sparsek::format::generate(Pattern::Uniform, 8192, 8192, 64, 0.3, 1).unwrap();
    let big_d = gpu.upload(&big).unwrap();
    let big_b = gpu.upload_matrix(&Matrix::<f16>::random(8192, 1024, 2).unwrap()).unwrap();
    let mut big_c = gpu.zeros::<f32>(8192, 1024).unwrap();
    gpu.stream().synchronize().unwrap();

    let (bs, m, k, n) = (64usize, 256usize, 512usize, 64usize);
    let a: Bsr<f16> = generate_int(Pattern::Uniform, m, k, bs, 0.6, 4, 3).unwrap();
    let a_d = gpu.upload(&a).unwrap();
    let b = Matrix::<f16>::from_fn(k, n, |r, c| f16::from_f32(((r + 2 * c) % 5) as f32 - 2.0)).unwrap();
    let want = sparsek::cpu::reference(&a, &b, &Matrix::<f32>::zeros(m, n).unwrap(), Epilogue::default()).unwrap();
    let mut c_d = htod(&launch, &vec![f32::NAN; m * n]);
    gpu.stream().synchronize().unwrap();
    let mut exercised = 0;
    let poison = vec![f32::NAN; m * n];
    for round in 0..4 {
        launch.memcpy_htod(&poison, &mut c_d).unwrap();
        let b_d = htod(&owner, b.as_slice());
        owner.synchronize().unwrap();
        let b_addr = addr(&owner, &b_d);
        for _ in 0..8 {
            gpu.spmm_on(&launch, &big_d, &big_b, &mut big_c, Epilogue::default()).unwrap();
        }
        {
            let b_v = DenseView::from_cuda_slice(&b_d, k, n, n, Layout::RowMajor).unwrap();
            let mut c_v = DenseViewMut::from_cuda_slice(&mut c_d, m, n, n, Layout::RowMajor).unwrap();
            // SAFETY: `launch` is a live stream of this context; B was written (and synchronised) before, and
            // nothing else touches C.
            unsafe { gpu.spmm_raw(launch.cu_stream(), &a_d.view(), &b_v, &mut c_v, None, Epilogue::default()) }
                .unwrap();
        }
        drop(b_d);
        let junk = htod(&owner, &vec![f16::NAN; k * n]);
        // SAFETY: a query of a live stream.
        let busy = unsafe { cudarc::driver::sys::cuStreamQuery(launch.cu_stream()) } == CUresult::CUDA_ERROR_NOT_READY;
        let reused = addr(&owner, &junk) == b_addr;
        if busy && reused {
            exercised += 1;
        }
        eprintln!("round {round}: launch stream busy at the drop: {busy}, B's memory handed out again: {reused}");
        launch.synchronize().unwrap();
        owner.synchronize().unwrap();
        let c = launch.clone_dtoh(&c_d).unwrap();
        for r in 0..m {
            for j in 0..n {
                assert_eq!(c[r * n + j] as f64, want.get(r, j), "round {round}: ({r}, {j})");
            }
        }
        drop(junk);
    }
    // The hazard was really set up (the launch still queued when its B was freed and reallocated) at least once,
    // on a device with stream-ordered allocation (without it cudarc frees synchronously: nothing to test).
    let pools =
        gpu.context().attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
    if pools.is_ok_and(|v| v != 0) {
        assert!(exercised > 0, "no round freed B while the launch was queued: give the launch stream more work");
    }
}

/// `Gpu::checked_copy` (the Python layer's structure check): the launch reads the checked private copy, so
/// indices overwritten afterwards with wild values (columns of 2^30, a row pointer past nnzb) never reach the
/// kernel: the product is the checked structure's, exactly (under compute-sanitizer memcheck: no read outside B or
/// A's values). A bad structure is refused with the block row; 32- and 64-bit indices.
#[test]
fn launches_read_the_checked_copy_of_the_indices() {
    let Some((_shared, gpu)) = gpu_for("launches_read_the_checked_copy_of_the_indices") else { return };
    let stream = gpu.stream();
    let (bs, m, k, n) = (32usize, 128usize, 256usize, 24usize);
    let a: Bsr<f16> = generate_int(Pattern::Skewed, m, k, bs, 0.4, 11, 4).unwrap();
    let b = Matrix::<f16>::from_fn(k, n, |r, c| f16::from_f32(((3 * r + c) % 7) as f32 - 3.0)).unwrap();
    let want = sparsek::cpu::reference(&a, &b, &Matrix::<f32>::zeros(m, n).unwrap(), Epilogue::default()).unwrap();
    let values = htod(stream, a.values());
    let b_d = htod(stream, b.as_slice());
    for index in [IndexType::U32, IndexType::I64] {
        let bytes = |v: &[u32]| -> Vec<u8> {
            match index {
                IndexType::U32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                IndexType::I64 => v.iter().flat_map(|&x| u64::from(x).to_le_bytes()).collect(),
            }
        };
        let mut row_ptr = htod(stream, &bytes(a.row_ptr()));
        let mut col_idx = htod(stream, &bytes(a.col_idx()));
        let arrays = BsrArrays {
            values: addr(stream, &values),
            row_ptr: addr(stream, &row_ptr),
            col_idx: addr(stream, &col_idx),
            index,
        };
        // SAFETY: live index buffers of the stated sizes on this GPU, not written during the call.
        let checked = unsafe { gpu.checked_copy::<f16>(arrays, m, k, bs, a.nnzb()) }.unwrap();
        // The caller's indices overwritten with wild values after the check.
        let wild: Vec<u32> = vec![1 << 30; a.col_idx().len()];
        stream.memcpy_htod(&bytes(&wild), &mut col_idx).unwrap();
        let mut wild_rp = vec![1u32 << 30; a.row_ptr().len()];
        wild_rp[0] = 0;
        stream.memcpy_htod(&bytes(&wild_rp), &mut row_ptr).unwrap();
        // SAFETY: the copy is a checked structure of live memory owned by `checked`; the values are live.
        let a_v = unsafe { BsrView::<f16>::from_raw(checked.arrays(arrays.values), m, k, bs, a.nnzb()) }.unwrap();
        let b_v = DenseView::from_cuda_slice(&b_d, k, n, n, Layout::RowMajor).unwrap();
        let mut c_d = htod(stream, &vec![f32::NAN; m * n]);
        let mut c_v = DenseViewMut::from_cuda_slice(&mut c_d, m, n, n, Layout::RowMajor).unwrap();
        // SAFETY: this Gpu's stream; every buffer is live and used by nothing else.
        unsafe { gpu.spmm_raw(stream.cu_stream(), &a_v, &b_v, &mut c_v, None, Epilogue::default()) }.unwrap();
        let c = stream.clone_dtoh(&c_d).unwrap();
        for r in 0..m {
            for j in 0..n {
                assert_eq!(c[r * n + j] as f64, want.get(r, j), "{index:?}: ({r}, {j})");
            }
        }
        // The wild indices themselves: refused by a new check, naming a block row.
        // SAFETY: as above.
        match unsafe { gpu.checked_copy::<f16>(arrays, m, k, bs, a.nnzb()) } {
            Err(Error::InvalidBsr(e)) => eprintln!("{index:?}: {e}"),
            other => panic!("{index:?}: wild indices accepted: {other:?}"),
        }
    }
}
