//! The device-side BSR structure check (`layout::BSR_CHECK_KERNEL`): [`BsrView::from_raw_checked`].

use cudarc::driver::DevicePtrMut;
use sparsek_layout::{BSR_CHECK_THREADS, BsrCheckParams, check_code};

use crate::error::{BsrError, Error, Result};
use crate::gpu::Gpu;
use crate::gpu::buffers::DeviceElement;
use crate::gpu::driver::{alloc_err, cuda};
use crate::gpu::views::{BsrArrays, BsrView, IndexType};

impl<'a, T: DeviceElement> BsrView<'a, T> {
    /// [`BsrView::from_raw`] for callers who cannot vouch for the structure (a tensor from elsewhere): checks it on
    /// the device in one launch (one thread per block row: `row_ptr` starts at 0, never decreases, stays within
    /// and ends at `nnzb`; each row's `col_idx` entries strictly increase and stay below `cols / bs`; every value
    /// is below 2^32) and returns [`Error::InvalidBsr`] naming the first bad block row, or the view. Runs on
    /// `gpu`'s default stream and waits for it (8 bytes are allocated for the answer): order it after the work
    /// that wrote the indices. Also checks that every pointer is device memory of `gpu`.
    ///
    /// # Safety
    /// [`BsrView::from_raw`]'s contract except the structure's validity: the arrays have the stated sizes and
    /// stay live and unwritten for `'a`.
    pub unsafe fn from_raw_checked(
        gpu: &Gpu,
        arrays: BsrArrays,
        rows: usize,
        cols: usize,
        bs: usize,
        nnzb: usize,
    ) -> Result<BsrView<'a, T>> {
        // SAFETY: the sizes and lifetimes are the caller's contract; the structure is checked below before the
        // view can reach a launch.
        let view = unsafe { BsrView::from_raw(arrays, rows, cols, bs, nnzb)? };
        gpu.check_structure(&view)?;
        Ok(view)
    }
}

impl Gpu {
    /// Checks a view's structure on the device (see [`BsrView::from_raw_checked`]).
    pub(crate) fn check_structure<T: DeviceElement>(&self, a: &BsrView<'_, T>) -> Result<()> {
        self.check_pointer_of("A's row_ptr", a.row_ptr)?;
        if a.nnzb > 0 {
            self.check_pointer_of("A's values", a.values)?;
            self.check_pointer_of("A's col_idx", a.col_idx)?;
        }
        let block_rows = a.rows / a.bs;
        if block_rows == 0 {
            // row_ptr is the single entry 0 = nnzb, which only the count can contradict.
            return if a.nnzb == 0 {
                Ok(())
            } else {
                Err(Error::InvalidBsr(BsrError::DeviceStructure {
                    block_row: 0,
                    problem: "a matrix without block rows has no blocks, but nnzb > 0",
                }))
            };
        }
        let func = self.check_kernel().ok_or_else(|| Error::PtxLoad {
            module: self.module().0,
            message: "the structure check kernel is missing".into(),
        })?;
        let stream = self.stream();
        let mut result = stream.clone_htod(&[u64::MAX]).map_err(alloc_err("structure check result", 8))?;
        {
            let (result_ptr, _record) = result.device_ptr_mut(stream);
            let mut params = BsrCheckParams {
                row_ptr: a.row_ptr,
                col_idx: a.col_idx,
                result: result_ptr,
                nnzb: a.nnzb as u64,
                block_rows: block_rows as u32,
                block_cols: (a.cols / a.bs) as u32,
                index64: u32::from(a.index == IndexType::I64),
                _pad: 0,
            };
            let mut args = [(&mut params as *mut BsrCheckParams).cast::<std::ffi::c_void>()];
            let ctas = (block_rows as u32).div_ceil(BSR_CHECK_THREADS);
            self.context().bind_to_thread().map_err(cuda("cuCtxSetCurrent"))?;
            // SAFETY: the kernel takes one BsrCheckParams by value (kernels-gpu/src/check.rs); row_ptr holds
            // block_rows + 1 entries and col_idx nnzb entries of the index width (the view's contract), the kernel
            // reads col_idx only below row_ptr values it has checked to be <= nnzb, and result is one u64 of this
            // context's memory; one thread per block row, BSR_CHECK_THREADS per CTA.
            unsafe {
                cudarc::driver::result::launch_kernel(
                    func.cu_function(),
                    (ctas, 1, 1),
                    (BSR_CHECK_THREADS, 1, 1),
                    0,
                    stream.cu_stream(),
                    &mut args,
                )
            }
            .map_err(cuda("cuLaunchKernel (sparsek_bsr_check)"))?;
        }
        let found = stream.clone_dtoh(&result).map_err(cuda("cuMemcpyDtoH"))?;
        stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
        let v = found.first().copied().unwrap_or(u64::MAX);
        if v == u64::MAX {
            return Ok(());
        }
        let (block_row, code) = (v >> 3, v & 7);
        let problem = match code {
            check_code::FIRST_NOT_ZERO => "row_ptr[0] is not 0",
            check_code::DECREASING => "row_ptr decreases (row_ptr[r + 1] < row_ptr[r])",
            check_code::BEYOND_NNZB => "row_ptr[r + 1] exceeds nnzb",
            check_code::LAST_NOT_NNZB => "row_ptr[block_rows] is not nnzb",
            check_code::COL_OUT_OF_RANGE => "a col_idx entry is >= the number of block columns",
            check_code::COL_NOT_INCREASING => "col_idx is not strictly increasing (unsorted or duplicate blocks)",
            _ => "an index value is negative or >= 2^32",
        };
        Err(Error::InvalidBsr(BsrError::DeviceStructure { block_row, problem }))
    }
}
