//! The host-side checks of borrowed device operands (no GPU needed): the view constructors refuse what the
//! kernels could not handle, with a typed error naming the problem.

use sparsek::gpu::{BsrArrays, BsrView, DenseView, DenseViewMut, IndexType, VectorView};
use sparsek::{BsrError, Error, Layout, bf16, f16};

const ADDR: u64 = 0x7f00_0000_0000; // a plausible device address; never dereferenced by these tests

#[test]
fn dense_views_check_ld_and_alignment() {
    // SAFETY (every from_raw below): the views are never launched; only the constructors' checks run.
    unsafe {
        assert!(DenseView::<f16>::from_raw(ADDR, 10, 24, 24, Layout::RowMajor).is_ok());
        // Column-major: ld covers the rows.
        assert!(DenseView::<f16>::from_raw(ADDR, 24, 10, 24, Layout::ColMajor).is_ok());
        for (rows, cols, ld, layout, what) in [
            (10, 24, 16, Layout::RowMajor, "ld below the row length"),
            (24, 10, 16, Layout::ColMajor, "ld below the column length"),
            (10, 24, 28, Layout::RowMajor, "ld not a multiple of 16 bytes"),
            (10, 24, 1 << 33, Layout::RowMajor, "ld beyond 2^32"),
        ] {
            let e = DenseView::<f16>::from_raw(ADDR, rows, cols, ld, layout).expect_err(what);
            assert!(matches!(e, Error::InvalidMatrix { .. }), "{what}: {e}");
            assert!(e.to_string().contains("leading dimension"), "{what}: {e}");
        }
        let e = DenseView::<f16>::from_raw(ADDR + 8, 10, 24, 24, Layout::RowMajor).unwrap_err();
        assert!(e.to_string().contains("16-byte aligned"), "{e}");
        assert!(DenseView::<f16>::from_raw(0, 10, 24, 24, Layout::RowMajor).is_err());
        assert!(DenseViewMut::<f32>::from_raw(ADDR, 3, 5, 6, Layout::RowMajor).is_err(), "6 f32 is not 16 bytes");
        assert!(DenseViewMut::<f32>::from_raw(ADDR, 3, 5, 8, Layout::RowMajor).is_ok());
        // A span past the end of the address space.
        assert!(DenseView::<f16>::from_raw(u64::MAX - 15, 10, 24, 24, Layout::RowMajor).is_err());
        // Empty views are valid, at any address (PyTorch gives empty tensors address 0).
        assert!(DenseView::<bf16>::from_raw(ADDR, 0, 0, 8, Layout::RowMajor).is_ok());
        assert!(DenseView::<bf16>::from_raw(0, 0, 24, 24, Layout::RowMajor).is_ok());
        assert!(DenseViewMut::<f32>::from_raw(0, 7, 0, 8, Layout::ColMajor).is_ok());
        assert!(VectorView::<f16>::from_raw(0, 0).is_ok());
        assert!(VectorView::<f16>::from_raw(0, 1).is_err());
    }
}

#[test]
fn transpose_swaps_shape_and_layout() {
    // SAFETY: never launched.
    let x = unsafe { DenseView::<bf16>::from_raw(ADDR, 96, 2048, 2048, Layout::RowMajor) }.unwrap();
    let xt = x.t();
    assert_eq!((xt.rows(), xt.cols(), xt.ld(), xt.layout()), (2048, 96, 2048, Layout::ColMajor));
    assert_eq!(xt.device_ptr(), ADDR);
    let back = xt.t();
    assert_eq!((back.rows(), back.cols(), back.layout()), (96, 2048, Layout::RowMajor));
}

#[test]
fn bsr_views_check_the_description() {
    let arrays = BsrArrays { values: ADDR, row_ptr: ADDR + 4096, col_idx: ADDR + 8192, index: IndexType::I64 };
    // SAFETY (every from_raw below): never launched.
    unsafe {
        assert!(BsrView::<f16>::from_raw(arrays, 128, 256, 64, 3).is_ok());
        let e = BsrView::<f16>::from_raw(arrays, 128, 256, 48, 3).unwrap_err();
        assert!(matches!(e, Error::InvalidBsr(BsrError::UnsupportedBlockSize { bs: 48 })), "{e}");
        let e = BsrView::<f16>::from_raw(arrays, 100, 256, 64, 3).unwrap_err();
        assert!(matches!(e, Error::InvalidBsr(BsrError::NotMultiple { .. })), "{e}");
        let e = BsrView::<f16>::from_raw(arrays, 128, 256, 64, 1 << 33).unwrap_err();
        assert!(matches!(e, Error::TooLarge { what: "nnzb", .. }), "{e}");
        let misaligned = BsrArrays { col_idx: ADDR + 8196, ..arrays };
        let e = BsrView::<f16>::from_raw(misaligned, 128, 256, 64, 3).unwrap_err();
        assert!(e.to_string().contains("col_idx"), "{e}");
        // 4-byte alignment is enough for 32-bit indices.
        let narrow = BsrArrays { index: IndexType::U32, ..misaligned };
        assert!(BsrView::<f16>::from_raw(narrow, 128, 256, 64, 3).is_ok());
        let e = BsrView::<f16>::from_raw(BsrArrays { values: ADDR + 2, ..arrays }, 128, 256, 64, 3).unwrap_err();
        assert!(e.to_string().contains("values"), "{e}");
        let v = BsrView::<bf16>::from_raw(arrays, 128, 256, 64, 3).unwrap();
        assert_eq!((v.rows(), v.cols(), v.block_size(), v.nnzb(), v.index_type()), (128, 256, 64, 3, IndexType::I64));
        assert!(VectorView::<f16>::from_raw(ADDR + 1, 10).is_err());
        // Without blocks, values and col_idx may be null (never read); row_ptr may not.
        let empty = BsrArrays { values: 0, col_idx: 0, ..arrays };
        assert!(BsrView::<f16>::from_raw(empty, 128, 256, 64, 0).is_ok());
        assert!(BsrView::<f16>::from_raw(empty, 128, 256, 64, 1).is_err());
        assert!(BsrView::<f16>::from_raw(BsrArrays { row_ptr: 0, ..empty }, 128, 256, 64, 0).is_err());
        assert_eq!(VectorView::<f16>::from_raw(ADDR + 2, 10).unwrap().len(), 10);
    }
}
