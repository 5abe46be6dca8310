//! The device-side BSR structure check (`layout::BSR_CHECK_KERNEL`): [`BsrView::from_raw_checked`], and
//! [`Gpu::checked_copy`], which checks a private copy of the indices that later writes to the caller's memory
//! cannot reach.

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
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

/// A BSR structure's indices copied into this GPU's memory (owned here, outside any framework's allocator) and
/// checked there on the device: made by [`Gpu::checked_copy`]. A launch over [`CheckedIndices::arrays`] reads
/// only the copy, so no later write to the caller's index memory (by any path: a framework's in-place op, an
/// alias the framework does not track, another library) can make a kernel read an unchecked structure. The
/// copy is what was checked; a caller whose indices change makes a new one.
pub struct CheckedIndices {
    row_ptr: CudaSlice<u8>,
    col_idx: CudaSlice<u8>,
    /// The copies' device addresses, taken once: they are written only before the check, which waits for the
    /// copies, and read-only after it, so a launch needs no event of theirs (and pays no driver call for them).
    addrs: (CUdeviceptr, CUdeviceptr),
    index: IndexType,
    shape: (usize, usize, usize, usize),
}

impl CheckedIndices {
    /// The copy's arrays with the caller's `values` (the values are not copied: any bits are valid values).
    pub fn arrays(&self, values: CUdeviceptr) -> BsrArrays {
        BsrArrays { values, row_ptr: self.addrs.0, col_idx: self.addrs.1, index: self.index }
    }
    /// `(rows, cols, block size, nnzb)` of the structure checked.
    pub fn shape(&self) -> (usize, usize, usize, usize) {
        self.shape
    }
    /// Device bytes the copy holds.
    pub fn device_bytes(&self) -> usize {
        self.row_ptr.len() + self.col_idx.len()
    }
}

/// Waits for the device's queued work before the copy is freed (a launch on any stream may still read it), as a
/// [`RowSchedule`](crate::gpu::RowSchedule) does: dropped rarely, so nothing per launch. Not while a stream of the
/// device is being captured into a CUDA graph.
impl Drop for CheckedIndices {
    fn drop(&mut self) {
        let _ = self.row_ptr.context().synchronize();
    }
}

impl std::fmt::Debug for CheckedIndices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckedIndices").field("shape", &self.shape).field("index", &self.index).finish()
    }
}

impl Gpu {
    /// Copies a BSR structure's `row_ptr` (`rows / bs + 1` entries) and `col_idx` (`nnzb` entries) from the
    /// caller's device memory into memory of this GPU owned by the result, then checks the copy on the device as
    /// [`BsrView::from_raw_checked`] does ([`Error::InvalidBsr`] naming the first bad block row). Runs on this
    /// `Gpu`'s default stream and waits for it: order it after the work that wrote the indices. The description is
    /// checked as [`BsrView::from_raw`] checks it, the pointers as device memory of this GPU, every byte count
    /// with checked arithmetic.
    ///
    /// # Safety
    /// `arrays.row_ptr` and (with blocks) `arrays.col_idx` hold the stated entries in live device memory of this
    /// GPU, not written while the call runs. Nothing is required of them afterwards: launches over the result's
    /// [`arrays`](CheckedIndices::arrays) read the copy (the values stay the caller's, under
    /// [`BsrView::from_raw`]'s contract).
    pub unsafe fn checked_copy<T: DeviceElement>(
        &self,
        arrays: BsrArrays,
        rows: usize,
        cols: usize,
        bs: usize,
        nnzb: usize,
    ) -> Result<CheckedIndices> {
        // SAFETY: only the description is checked here (nothing is read through it).
        unsafe { BsrView::<T>::from_raw(arrays, rows, cols, bs, nnzb) }?;
        self.check_pointer_of("A's row_ptr", arrays.row_ptr)?;
        if nnzb > 0 {
            self.check_pointer_of("A's col_idx", arrays.col_idx)?;
        }
        let w = arrays.index.bytes();
        let too_large = |what, entries: usize| Error::TooLarge {
            what,
            requested: entries as u128 * w as u128,
            limit: isize::MAX as u128,
        };
        let rp_bytes = (rows / bs + 1).checked_mul(w).ok_or_else(|| too_large("row_ptr (bytes)", rows / bs + 1))?;
        let ci_bytes = nnzb.checked_mul(w).ok_or_else(|| too_large("col_idx (bytes)", nnzb))?;
        let stream = self.stream();
        self.context().bind_to_thread().map_err(cuda("cuCtxSetCurrent"))?;
        let copy = |what: &'static str, src: CUdeviceptr, bytes: usize| -> Result<CudaSlice<u8>> {
            // Never a zero-length buffer: col_idx without blocks keeps one (unused) entry.
            let mut dst = stream.alloc_zeros::<u8>(bytes.max(w)).map_err(alloc_err(what, bytes.max(w)))?;
            if bytes > 0 {
                let (d, _record) = dst.device_ptr_mut(stream);
                // SAFETY: `bytes` bytes from `src` are live device memory of this GPU (the caller's contract) and
                // `dst` holds at least that many, allocated above on this stream; the copy is ordered after it.
                unsafe { cudarc::driver::result::memcpy_dtod_async(d, src, bytes, stream.cu_stream()) }
                    .map_err(cuda("cuMemcpyDtoDAsync"))?;
            }
            Ok(dst)
        };
        let row_ptr = copy("device copy of row_ptr", arrays.row_ptr, rp_bytes)?;
        let col_idx = copy("device copy of col_idx", arrays.col_idx, ci_bytes)?;
        let addrs = {
            let (r, _r0) = row_ptr.device_ptr(stream);
            let (c, _r1) = col_idx.device_ptr(stream);
            (r, c)
        };
        let checked = CheckedIndices { row_ptr, col_idx, addrs, index: arrays.index, shape: (rows, cols, bs, nnzb) };
        // SAFETY: the copies hold the stated entries (made above, in this stream's order before the check).
        let view = unsafe { BsrView::<T>::from_raw(checked.arrays(arrays.values), rows, cols, bs, nnzb) }?;
        self.check_structure(&view)?;
        Ok(checked)
    }

    /// Checks a view's structure on the device (see [`BsrView::from_raw_checked`]).
    pub(crate) fn check_structure<T: DeviceElement>(&self, a: &BsrView<'_, T>) -> Result<()> {
        self.check_pointer_of("A's row_ptr", a.row_ptr)?;
        if a.shape.nnzb > 0 {
            self.check_pointer_of("A's values", a.values)?;
            self.check_pointer_of("A's col_idx", a.col_idx)?;
        }
        let block_rows = a.shape.rows / a.shape.bs;
        if block_rows == 0 {
            // row_ptr is the single entry 0 = nnzb, which only the count can contradict.
            return if a.shape.nnzb == 0 {
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
                nnzb: a.shape.nnzb as u64,
                block_rows: block_rows as u32,
                block_cols: (a.shape.cols / a.shape.bs) as u32,
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
