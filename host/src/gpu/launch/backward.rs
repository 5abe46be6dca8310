//! The backward products on the GPU (the gradients of a block-sparse layer), validated and launched like the
//! forward: `C = alpha * (A^T @ B) + beta * C` through A's transposed index ([`Gpu::spmm_t`],
//! [`Gpu::spmm_t_raw`]) and the block SDDMM `values = alpha * (X @ Y^T) + beta * values` at a BSR structure's
//! stored blocks ([`Gpu::sddmm`], [`Gpu::sddmm_raw`]). The plan room chooses their kernels
//! ([`crate::plan::BackwardProblem`]); [`Gpu::plan_backward`] returns the plan a launch would run.

use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::sys::{CUdeviceptr, CUstream};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use sparsek_layout::{BsrSpmmParams, HopperSpmmParams, KernelConfig, Layout, Op, Pipeline, TensorMap};

use super::spmm::{LaunchAttributes, first_overlap, launch_with};
use crate::Epilogue;
use crate::error::{Error, Result};
use crate::format::BsrTranspose;
use crate::gpu::Gpu;
use crate::gpu::buffers::{DeviceBsr, DeviceMatrix, InputElement, OutputElement, SddmmTiles};
use crate::gpu::driver::{alloc_err, cuda};
use crate::gpu::tma;
use crate::gpu::views::{Alloc, BsrView, DenseView, DenseViewMut, IndexType, bytes_of};
use crate::plan::{self, BackwardProblem, Decomposition, LaunchPlan};

/// Source of [`DeviceBsrTranspose::structure`] and [`DeviceBsr`]'s structure identity.
static NEXT_STRUCTURE: AtomicU64 = AtomicU64::new(1);

/// A fresh structure identity (never 0).
pub(crate) fn new_structure_id() -> u64 {
    NEXT_STRUCTURE.fetch_add(1, Ordering::Relaxed)
}

/// A BSR structure's transposed index in device memory: block-column pointers (`cols / bs + 1`), the block row of
/// each entry (ascending within a block column) and the permutation into the stored blocks, all u32
/// ([`BsrTranspose`]'s arrays). Made once per structure and reused while only the values change (a training
/// step): by [`Gpu::transpose_index`] for an uploaded [`DeviceBsr`] (it then belongs to that matrix, which
/// [`Gpu::spmm_t`] checks), by [`Gpu::transpose_view`] for a view of the caller's arrays, both built on the device,
/// or by [`Gpu::upload_transpose`] from a host [`BsrTranspose`]; [`DeviceBsrTranspose::view`] for
/// [`Gpu::spmm_t_raw`].
pub struct DeviceBsrTranspose {
    /// A's `rows x cols`, block size and stored blocks.
    shape: (usize, usize, usize, usize),
    structure: u64,
    col_ptr: CudaSlice<u32>,
    row_idx: CudaSlice<u32>,
    perm: CudaSlice<u32>,
}

impl std::fmt::Debug for DeviceBsrTranspose {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (rows, cols, bs, nnzb) = self.shape;
        f.debug_struct("DeviceBsrTranspose")
            .field("rows", &rows)
            .field("cols", &cols)
            .field("bs", &bs)
            .field("nnzb", &nnzb)
            .finish_non_exhaustive()
    }
}

impl DeviceBsrTranspose {
    /// The three arrays copied to the host (`col_ptr`, `row_idx`, `perm`), after the work queued on their stream.
    pub fn to_host(&self) -> Result<(Vec<u32>, Vec<u32>, Vec<u32>)> {
        let (_, cols, bs, nnzb) = self.shape;
        let stream = self.perm.stream();
        let copy = |s: &CudaSlice<u32>, len: usize| -> Result<Vec<u32>> {
            let mut v = stream.clone_dtoh(s).map_err(cuda("cuMemcpyDtoH (transposed index)"))?;
            v.truncate(len);
            Ok(v)
        };
        Ok((copy(&self.col_ptr, cols / bs.max(1) + 1)?, copy(&self.row_idx, nnzb)?, copy(&self.perm, nnzb)?))
    }

    /// A view of the index for [`Gpu::spmm_t_raw`] (its arrays' allocations recorded, as a safe view's are).
    pub fn view(&self) -> TransposeView<'_> {
        let (_, cols, bs, nnzb) = self.shape;
        let stream = self.perm.stream();
        let ptr = |s: &CudaSlice<u32>| s.device_ptr(stream).0;
        let own = |p, s: &CudaSlice<u32>| Alloc::own(p, s.len(), 4, Some(stream));
        let (col_ptr, row_idx, perm) = (ptr(&self.col_ptr), ptr(&self.row_idx), ptr(&self.perm));
        TransposeView {
            col_ptr,
            row_idx,
            perm,
            block_cols: cols / bs.max(1),
            nnzb,
            raw: false,
            allocs: [own(col_ptr, &self.col_ptr), own(row_idx, &self.row_idx), own(perm, &self.perm)],
            _borrow: PhantomData,
        }
    }
}

/// A BSR matrix's transposed index over device memory: `col_ptr` (`cols / bs + 1` u32, from 0, nondecreasing, ending
/// at `nnzb`), `row_idx` (`nnzb` u32, each below `rows / bs`) and `perm` (`nnzb` u32, a permutation of the stored
/// blocks), as [`BsrTranspose`] defines them. `Copy`: a description, not an owner.
#[derive(Clone, Copy, Debug)]
pub struct TransposeView<'a> {
    col_ptr: CUdeviceptr,
    row_idx: CUdeviceptr,
    perm: CUdeviceptr,
    block_cols: usize,
    nnzb: usize,
    raw: bool,
    allocs: [Option<Alloc<'a>>; 3],
    _borrow: PhantomData<&'a [u32]>,
}

impl<'a> TransposeView<'a> {
    /// Describes a transposed index over device arrays of u32 (built on the device, e.g. from PyTorch tensors:
    /// a stable sort of the blocks by block column gives `perm`, `row_idx = block_row[perm]`, `col_ptr` a
    /// bincount's cumulative sum), for a BSR matrix of `cols` columns in blocks of `bs` with `nnzb` stored blocks.
    /// Checked here: non-null, 4-byte aligned pointers (where there is anything to read), `bs` divides `cols`;
    /// at launch: device memory of the launch's GPU.
    ///
    /// # Safety
    /// For all of `'a`: the arrays hold the entries above in live device memory of the GPU it will be launched on,
    /// not written while a launch that reads them may run, and they are the transposed index of the structure of
    /// the matrix they are launched with: `row_idx` entries below its block rows and `perm` a permutation of
    /// `0..nnzb` (the kernel reads the blocks and B's rows they point to).
    pub unsafe fn from_raw(
        (col_ptr, row_idx, perm): (CUdeviceptr, CUdeviceptr, CUdeviceptr),
        cols: usize,
        bs: usize,
        nnzb: usize,
    ) -> Result<TransposeView<'a>> {
        if bs == 0 || !cols.is_multiple_of(bs) {
            return Err(Error::InvalidArgument {
                name: "transposed index",
                reason: format!("{cols} columns are not a whole number of blocks of {bs}"),
            });
        }
        for (what, ptr, used) in [("col_ptr", col_ptr, true), ("row_idx", row_idx, nnzb > 0), ("perm", perm, nnzb > 0)]
        {
            if used && (ptr == 0 || !ptr.is_multiple_of(4)) {
                return Err(Error::InvalidArgument {
                    name: "transposed index",
                    reason: format!("{what} at {ptr:#x} must be non-null and 4-byte aligned"),
                });
            }
        }
        let block_cols = cols / bs;
        Ok(TransposeView {
            col_ptr,
            row_idx,
            perm,
            block_cols,
            nnzb,
            raw: true,
            allocs: [None; 3],
            _borrow: PhantomData,
        })
    }
}

impl Gpu {
    /// The transposed index of `a`'s structure, built on this GPU (no host round trip: [`Gpu::transpose_view`]
    /// over the uploaded arrays), on this `Gpu`'s stream; asynchronous. Made once per structure; [`Gpu::spmm_t`]
    /// takes it with the matrix it was made from.
    pub fn transpose_index<T: InputElement>(&self, a: &DeviceBsr<T>) -> Result<DeviceBsrTranspose> {
        let stream = self.stream().clone();
        let (row_ptr, _g0) = a.row_ptr.device_ptr(&stream);
        let (col_idx, _g1) = a.col_idx.device_ptr(&stream);
        let (rows, cols, bs, nnzb) = (a.shape.rows, a.shape.cols, a.shape.bs, a.shape.nnzb);
        self.build_transpose(&stream, (row_ptr, col_idx, IndexType::U32), (rows, cols, bs, nnzb), a.structure)
    }

    /// The transposed index of a view's structure (32- or 64-bit indices; its values are not read), built on this
    /// GPU by three launches of one kernel on this `Gpu`'s stream (`layout::BsrTransposeParams`: a count per
    /// block column, their running sum, the fill; deterministic, equal to [`BsrTranspose`]'s): no host round trip,
    /// no synchronisation. The result is owned (freed when dropped) and usable with [`Gpu::spmm_t_raw`] for any
    /// view of this structure. Checked: the view's index pointers are memory of this GPU. The structure must be
    /// valid, as the view's constructor requires ([`BsrView::from_raw_checked`] checks it on the device).
    pub fn transpose_view<T: InputElement>(&self, a: &BsrView<'_, T>) -> Result<DeviceBsrTranspose> {
        self.ctx_current()?;
        if a.raw {
            self.check_pointer_of("A's row_ptr", a.row_ptr)?;
            if a.shape.nnzb > 0 {
                self.check_pointer_of("A's col_idx", a.col_idx)?;
            }
        }
        let stream = self.stream().clone();
        let shape = (a.shape.rows, a.shape.cols, a.shape.bs, a.shape.nnzb);
        // A view carries no structure identity: the index it gives is for the raw path only.
        self.build_transpose(&stream, (a.row_ptr, a.col_idx, a.index), shape, 0)
    }

    /// Allocates the index's arrays and runs the three phases of the transposed-index kernel on `stream`.
    fn build_transpose(
        &self,
        stream: &Arc<CudaStream>,
        (row_ptr, col_idx, index): (CUdeviceptr, CUdeviceptr, IndexType),
        (rows, cols, bs, nnzb): (usize, usize, usize, usize),
        structure: u64,
    ) -> Result<DeviceBsrTranspose> {
        use sparsek_layout::{BSR_TRANSPOSE_THREADS, BsrTransposeParams, transpose_phase};
        let (block_rows, block_cols) = (rows / bs.max(1), cols / bs.max(1));
        let (br32, bc32) = (limit("block rows", block_rows)?, limit("block columns", block_cols)?);
        limit("nnzb", nnzb)?;
        self.ctx_current()?;
        let zeros = |len: usize, what: &'static str| {
            stream.alloc_zeros::<u32>(len.max(1)).map_err(alloc_err(what, len.max(1) * 4))
        };
        let mut col_ptr = zeros(block_cols + 1, "transposed index col_ptr")?;
        let mut row_idx = zeros(nnzb, "transposed index row_idx")?;
        let mut perm = zeros(nnzb, "transposed index perm")?;
        if block_cols > 0 && block_rows > 0 && nnzb > 0 {
            let func = self.transpose_kernel().ok_or_else(|| Error::PtxLoad {
                module: self.module().0,
                message: "the transposed-index kernel is missing".into(),
            })?;
            let (cp, _g0) = col_ptr.device_ptr_mut(stream);
            let (ri, _g1) = row_idx.device_ptr_mut(stream);
            let (pm, _g2) = perm.device_ptr_mut(stream);
            let warps_per_cta = BSR_TRANSPOSE_THREADS / 32;
            for (phase, ctas, smem) in [
                (transpose_phase::COUNT, bc32.div_ceil(warps_per_cta), 0),
                (transpose_phase::SCAN, 1, 16 * BSR_TRANSPOSE_THREADS),
                (transpose_phase::FILL, bc32.div_ceil(warps_per_cta), 0),
            ] {
                let mut params = BsrTransposeParams {
                    row_ptr,
                    col_idx,
                    col_ptr: cp,
                    row_idx: ri,
                    perm: pm,
                    block_rows: br32,
                    block_cols: bc32,
                    index64: u32::from(index == IndexType::I64),
                    phase,
                };
                let mut args = [(&mut params as *mut BsrTransposeParams).cast::<std::ffi::c_void>()];
                // SAFETY: the kernel takes one BsrTransposeParams by value (kernels-gpu/src/transpose.rs); the
                // structure is valid with block_rows + 1 and nnzb entries of its width (the owned upload's
                // validation, or the view's contract), col_ptr holds block_cols + 1 zeroed u32 and row_idx, perm
                // nnzb u32 each (allocated above on this stream, in its order before the launches); phase 1 runs
                // one CTA with its 16 bytes of shared memory per thread; one warp per block column otherwise.
                unsafe {
                    cudarc::driver::result::launch_kernel(
                        func.cu_function(),
                        (ctas, 1, 1),
                        (BSR_TRANSPOSE_THREADS, 1, 1),
                        smem,
                        stream.cu_stream(),
                        &mut args,
                    )
                }
                .map_err(cuda("cuLaunchKernel (sparsek_bsr_transpose)"))?;
            }
        }
        Ok(DeviceBsrTranspose { shape: (rows, cols, bs, nnzb), structure, col_ptr, row_idx, perm })
    }

    /// Copies a host transposed index ([`BsrTranspose`], made from a structure on the host) to this GPU, on this
    /// `Gpu`'s stream: for [`Gpu::spmm_t_raw`] with a view of that structure.
    pub fn upload_transpose(&self, at: &BsrTranspose) -> Result<DeviceBsrTranspose> {
        let structure = 0; // no DeviceBsr of its own: the raw path only
        let stream = self.stream();
        // Zero-length device buffers are avoided (one unused entry for a matrix without blocks).
        let nonempty = |v: &[u32]| if v.is_empty() { vec![0u32] } else { v.to_vec() };
        let htod = |v: &[u32], what: &'static str| {
            stream.clone_htod(&nonempty(v)).map_err(alloc_err(what, std::mem::size_of_val(v).max(4)))
        };
        Ok(DeviceBsrTranspose {
            shape: (at.rows(), at.cols(), at.block_size(), at.nnzb()),
            structure,
            col_ptr: htod(at.col_ptr(), "transposed index col_ptr")?,
            row_idx: htod(at.row_idx(), "transposed index row_idx")?,
            perm: htod(at.perm(), "transposed index perm")?,
        })
    }

    /// `C = alpha * (A^T @ B) + beta * C` on the GPU's default stream: A (`M x K`, f16 or bf16) read through its
    /// transposed index `at` (from [`Gpu::transpose_index`] of this `a`), B `M x N` and C `K x N` row-major, f32
    /// accumulation, C in f32 or the inputs' type. The input gradient of a linear layer `y = x @ W^T` is
    /// `dx = dy @ W`, i.e. `dx^T = W^T @ dy^T`: [`Gpu::spmm_t_raw`] with column-major views of `dy` and `dx`.
    /// With `beta == 0` C is not read; block columns of A without blocks give `beta * C`. `ep` carries alpha and
    /// beta only (an activation or bias is refused). Asynchronous.
    ///
    /// Errors before anything is queued: [`Error::ShapeMismatch`] (`a` is A^T's shape), [`Error::InvalidArgument`]
    /// for an index made from another matrix, buffers of another context, a type combination or an epilogue the
    /// kernels do not serve.
    pub fn spmm_t<TA: InputElement, TC: OutputElement>(
        &self,
        a: &DeviceBsr<TA>,
        at: &DeviceBsrTranspose,
        b: &DeviceMatrix<TA>,
        c: &mut DeviceMatrix<TC>,
        ep: Epilogue,
    ) -> Result<()> {
        if at.structure != a.structure {
            return Err(Error::InvalidArgument {
                name: "at",
                reason: "is the transposed index of another matrix (make it with Gpu::transpose_index(a))".into(),
            });
        }
        let stream = self.stream().clone();
        self.check_owned(&stream, &[a.values.context(), b.as_slice().context(), c.as_slice().context()])?;
        let (values, _g0) = a.values.device_ptr(&stream);
        let (b_ptr, _g1) = b.as_slice().device_ptr(&stream);
        let (c_rows, c_cols, c_ld) = (c.rows(), c.cols(), c.ld());
        let c_alloc = c.alloc().map(|a| Alloc { stream: Some(&stream), ..a });
        let (c_ptr, _g2) = c.as_mut_slice().device_ptr_mut(&stream);
        let av = BsrView::<TA>::trusted((values, 0, 0, 0), a);
        let bv = DenseView::<TA>::trusted(b_ptr, (b.rows(), b.cols(), b.ld()), b.alloc());
        let cv = DenseView::<TC>::trusted(c_ptr, (c_rows, c_cols, c_ld), c_alloc);
        self.launch_t(stream.cu_stream(), &av, &at.view(), &bv, &cv, ep)
    }

    /// [`Gpu::spmm_t`] over borrowed device memory on the caller's raw CUDA stream: A a [`BsrView`] (its values are
    /// read through `at`; its own index arrays are not read, so their index type does not matter), `at` its
    /// transposed index, B (`M x N`) and C (`K x N`) each row- or column-major. For `y = x @ W^T` (W `out x in`),
    /// `dx = dy @ W` is `spmm_t_raw(stream, W, W's index, dy.t(), dx.t(), ep)`: column-major views of the
    /// row-major `dy` and `dx`, no transpose made. No synchronisation, no allocation: safe to capture in a CUDA
    /// graph. Checked as [`Gpu::spmm_raw`] checks: shapes, the stream's and every raw pointer's context, extents of
    /// safe views, and that C overlaps nothing the kernel reads (A's values, the index, B).
    ///
    /// # Safety
    /// As [`Gpu::spmm_raw`]'s, for A's values, the index arrays, B and C.
    pub unsafe fn spmm_t_raw<TA: InputElement, TC: OutputElement>(
        &self,
        stream: CUstream,
        a: &BsrView<'_, TA>,
        at: &TransposeView<'_>,
        b: &DenseView<'_, TA>,
        c: &mut DenseViewMut<'_, TC>,
        ep: Epilogue,
    ) -> Result<()> {
        self.ctx_current()?;
        self.check_stream(stream)?;
        let has_blocks = a.shape.nnzb > 0;
        for (what, check, ptr, device) in [
            ("A's values", a.raw && has_blocks, a.values, a.device),
            ("the index's col_ptr", at.raw, at.col_ptr, None),
            ("the index's row_idx", at.raw && has_blocks, at.row_idx, None),
            ("the index's perm", at.raw && has_blocks, at.perm, None),
            ("B", b.raw && !b.is_empty_span(), b.ptr, b.device),
            ("C", c.view.raw && !c.view.is_empty_span(), c.view.ptr, c.view.device),
        ] {
            if check {
                self.check_raw_pointer(what, ptr, device)?;
            }
        }
        self.launch_t(stream, a, at, b, &c.view, ep)?;
        let [i0, i1, i2] = at.allocs;
        self.join_owners(stream, &[a.allocs.values, i0, i1, i2, b.alloc, c.view.alloc, None])
    }

    /// The block SDDMM on the GPU's default stream: `values = alpha * (X @ Y^T) + beta * values` at the stored blocks
    /// of `pattern` (`M x N`; its values are not read), X `M x K` and Y `N x K` row-major of the pattern's type,
    /// `values` the gradient's `nnzb * bs x bs` row-major buffer (ld `bs`: block after block, each row-major, the
    /// layout of a BSR matrix's values) in f32 or the inputs' type, f32 accumulation. The weight gradient of
    /// `y = x @ W^T` is `dW = dy^T @ x` at W's blocks: [`Gpu::sddmm_raw`] with X = `dy^T`, Y = `x^T` (column-major
    /// views of the row-major `dy` and `x`). With `beta == 0` the old values are not read; `beta == 1` with f32
    /// values accumulates gradients across calls. `ep` carries alpha and beta only. Asynchronous.
    pub fn sddmm<TA: InputElement, TV: OutputElement>(
        &self,
        x: &DeviceMatrix<TA>,
        y: &DeviceMatrix<TA>,
        pattern: &DeviceBsr<TA>,
        values: &mut DeviceMatrix<TV>,
        ep: Epilogue,
    ) -> Result<()> {
        let stream = self.stream().clone();
        let contexts = [pattern.values.context(), x.as_slice().context(), y.as_slice().context()];
        self.check_owned(&stream, &contexts)?;
        self.check_owned(&stream, &[values.as_slice().context()])?;
        let (row_ptr, _g0) = pattern.row_ptr.device_ptr(&stream);
        let (col_idx, _g1) = pattern.col_idx.device_ptr(&stream);
        let (x_ptr, _g2) = x.as_slice().device_ptr(&stream);
        let (y_ptr, _g3) = y.as_slice().device_ptr(&stream);
        let (v_rows, v_cols, v_ld) = (values.rows(), values.cols(), values.ld());
        let v_alloc = values.alloc().map(|a| Alloc { stream: Some(&stream), ..a });
        let (v_ptr, _g4) = values.as_mut_slice().device_ptr_mut(&stream);
        let pv = BsrView::<TA>::trusted((0, row_ptr, col_idx, 0), pattern);
        let xv = DenseView::<TA>::trusted(x_ptr, (x.rows(), x.cols(), x.ld()), x.alloc());
        let yv = DenseView::<TA>::trusted(y_ptr, (y.rows(), y.cols(), y.ld()), y.alloc());
        let vv = DenseView::<TV>::trusted(v_ptr, (v_rows, v_cols, v_ld), v_alloc);
        self.launch_sddmm(stream.cu_stream(), &xv, &yv, &pv, &vv, ep)
    }

    /// [`Gpu::sddmm`] over borrowed device memory on the caller's raw CUDA stream: X (`M x K`) and Y (`N x K`) each
    /// row- or column-major, `pattern` a [`BsrView`] whose `row_ptr` and `col_idx` are read (not its values, so the
    /// output may be the pattern's own values array), `values` an `nnzb * bs x bs` row-major view with leading
    /// dimension `bs`. No synchronisation, no allocation: safe to capture in a CUDA graph. Checked as
    /// [`Gpu::spmm_raw`] checks; `values` must overlap none of X, Y, `row_ptr`, `col_idx`. A `pattern` with its
    /// [`RowSchedule`](crate::gpu::RowSchedule) ([`BsrView::with_schedule`]) runs the sm_90a kernels on its tile
    /// lists: one tile per group of a block row's blocks, none empty (without one, a tile per stored block, most
    /// of them empty: slower at bs 64).
    ///
    /// # Safety
    /// As [`Gpu::spmm_raw`]'s, for X, Y, the pattern's index arrays and `values`.
    pub unsafe fn sddmm_raw<TA: InputElement, TV: OutputElement>(
        &self,
        stream: CUstream,
        x: &DenseView<'_, TA>,
        y: &DenseView<'_, TA>,
        pattern: &BsrView<'_, TA>,
        values: &mut DenseViewMut<'_, TV>,
        ep: Epilogue,
    ) -> Result<()> {
        self.ctx_current()?;
        self.check_stream(stream)?;
        let has_blocks = pattern.shape.nnzb > 0;
        for (what, check, ptr, device) in [
            ("X", x.raw && !x.is_empty_span(), x.ptr, x.device),
            ("Y", y.raw && !y.is_empty_span(), y.ptr, y.device),
            ("the pattern's row_ptr", pattern.raw, pattern.row_ptr, pattern.device),
            ("the pattern's col_idx", pattern.raw && has_blocks, pattern.col_idx, pattern.device),
            ("the values", values.view.raw && !values.view.is_empty_span(), values.view.ptr, values.view.device),
        ] {
            if check {
                self.check_raw_pointer(what, ptr, device)?;
            }
        }
        self.launch_sddmm(stream, x, y, pattern, &values.view, ep)?;
        let allocs = [x.alloc, y.alloc, pattern.allocs.row_ptr, pattern.allocs.col_idx, values.view.alloc, None, None];
        self.join_owners(stream, &allocs)
    }

    /// The plan a backward launch of `problem` would run on this `Gpu` (what [`Gpu::spmm_t`] and [`Gpu::sddmm`]
    /// execute; [`Gpu::last_plan`] returns it after the launch).
    pub fn plan_backward(&self, problem: &BackwardProblem) -> Result<LaunchPlan> {
        plan::plan_backward(self.room(), problem).map(|(plan, _)| plan)
    }

    /// `Ok` when the stream and every buffer belong to this `Gpu`'s context (then made current on this thread).
    fn check_owned(&self, stream: &Arc<CudaStream>, contexts: &[&Arc<cudarc::driver::CudaContext>]) -> Result<()> {
        let same = |ctx: &Arc<cudarc::driver::CudaContext>| Arc::ptr_eq(ctx, self.context());
        if !same(stream.context()) || !contexts.iter().all(|c| same(c)) {
            return Err(Error::InvalidArgument {
                name: "buffers",
                reason: "every buffer and the stream must belong to this Gpu's context".into(),
            });
        }
        self.ctx_current()
    }

    /// Validates and launches `C = alpha * (A^T @ B) + beta * C`.
    fn launch_t<TA: InputElement, TC: OutputElement>(
        &self,
        stream: CUstream,
        a: &BsrView<'_, TA>,
        at: &TransposeView<'_>,
        b: &DenseView<'_, TA>,
        c: &DenseView<'_, TC>,
        ep: Epilogue,
    ) -> Result<()> {
        check_backward_epilogue(ep)?;
        let (m, k, n, bs) = (a.shape.rows, a.shape.cols, b.shape.cols, a.shape.bs);
        if b.shape.rows != m || c.shape.rows != k || c.shape.cols != n {
            return Err(Error::ShapeMismatch { a: (k, m), b: (b.shape.rows, n), c: (c.shape.rows, c.shape.cols) });
        }
        if at.block_cols != k / bs || at.nnzb != a.shape.nnzb {
            return Err(Error::InvalidArgument {
                name: "at",
                reason: format!(
                    "indexes {} block columns and {} blocks; A has {} and {}",
                    at.block_cols,
                    at.nnzb,
                    k / bs,
                    a.shape.nnzb
                ),
            });
        }
        let (n32, ldb, ldc) = (limit("N", n)?, limit("ldb", b.shape.ld)?, limit("ldc", c.shape.ld)?);
        limit("M", m)?;
        limit("K", k)?;
        limit("nnzb", a.shape.nnzb)?;
        let ta = std::mem::size_of::<TA>();
        let values = a.shape.nnzb.checked_mul(bs * bs);
        let inputs = [
            ("A's values", a.values, bytes_of(values, ta), a.allocs.values),
            ("the index's col_ptr", at.col_ptr, bytes_of(Some(at.block_cols + 1), 4), at.allocs[0]),
            ("the index's row_idx", at.row_idx, bytes_of(Some(at.nnzb), 4), at.allocs[1]),
            ("the index's perm", at.perm, bytes_of(Some(at.nnzb), 4), at.allocs[2]),
            ("B", b.ptr, bytes_of(b.shape.span(), ta), b.alloc),
        ];
        check_output("C", (c.ptr, bytes_of(c.shape.span(), std::mem::size_of::<TC>()), c.alloc), &inputs)?;
        if k == 0 || n == 0 {
            return Ok(());
        }
        let problem = BackwardProblem {
            op: Op::BsrSpmmT,
            bs,
            input: TA::IN_TYPE,
            b_layout: b.shape.layout,
            x_layout: Layout::RowMajor,
            output: TC::OUT_TYPE,
            shape: (m, k),
            nnzb: a.shape.nnzb,
            n,
            c_layout: c.shape.layout,
            beta_zero: ep.beta == 0.0,
            sddmm_tiles: None,
        };
        // (group_rows is the plan's: launch_backward.)
        let params = BsrSpmmParams {
            a_values: a.values,
            row_ptr: at.col_ptr,
            col_idx: at.row_idx,
            b: b.ptr,
            c: c.ptr,
            ldb,
            ldc,
            n: n32,
            block_rows: (k / bs) as u32,
            alpha: ep.alpha,
            beta: ep.beta,
            c_col_major: u32::from(c.shape.layout == Layout::ColMajor),
            nnzb: a.shape.nnzb as u32,
            perm: at.perm,
            ..BsrSpmmParams::NONE
        };
        // The sm_90a kernels' maps: A's blocks in 64-row boxes, B as the forward's (M x N), C (K x N).
        let maps = |cfg: &KernelConfig, c_tma: bool| -> Result<Maps> {
            let tmap_a = tma::a_values_t_map(TA::IN_TYPE, a.values, a.shape.nnzb, bs)?;
            let tmap_b = tma::b_map(TA::IN_TYPE, (b.ptr, b.shape.layout, b.shape.ld), (m, n), cfg)?;
            let tmap_c = tma::staged_c_map(c_tma, (TC::OUT_TYPE, c.ptr, c.shape.layout), (k, n32, c.shape.ld))?;
            Ok((tmap_a, tmap_b, tmap_c))
        };
        self.launch_backward(stream, &problem, params, maps, None)
    }

    /// Validates and launches `values = alpha * (X @ Y^T) + beta * values` at `pattern`'s blocks.
    fn launch_sddmm<TA: InputElement, TV: OutputElement>(
        &self,
        stream: CUstream,
        x: &DenseView<'_, TA>,
        y: &DenseView<'_, TA>,
        pattern: &BsrView<'_, TA>,
        values: &DenseView<'_, TV>,
        ep: Epilogue,
    ) -> Result<()> {
        check_backward_epilogue(ep)?;
        let (m, n, bs, nnzb) = (pattern.shape.rows, pattern.shape.cols, pattern.shape.bs, pattern.shape.nnzb);
        let k = x.shape.cols;
        if x.shape.rows != m || y.shape.rows != n || y.shape.cols != k {
            return Err(Error::ShapeMismatch { a: (x.shape.rows, k), b: (y.shape.cols, y.shape.rows), c: (m, n) });
        }
        let whole = nnzb.checked_mul(bs);
        if Some(values.shape.rows) != whole || values.shape.cols != bs || values.shape.layout != Layout::RowMajor {
            return Err(Error::InvalidArgument {
                name: "values",
                reason: format!(
                    "must be the {} x {bs} row-major values of {nnzb} blocks of {bs} x {bs}; got {} x {} ({:?})",
                    whole.map_or("?".into(), |w| w.to_string()),
                    values.shape.rows,
                    values.shape.cols,
                    values.shape.layout
                ),
            });
        }
        if values.shape.ld != bs {
            return Err(Error::InvalidArgument {
                name: "values",
                reason: format!("leading dimension {} must be the block size {bs} (blocks stored back to back)", {
                    values.shape.ld
                }),
            });
        }
        let (k32, lda, ldb) = (limit("K", k)?, limit("ldx", x.shape.ld)?, limit("ldy", y.shape.ld)?);
        limit("M", m)?;
        limit("N", n)?;
        limit("nnzb", nnzb)?;
        let (ta, w) = (std::mem::size_of::<TA>(), pattern.index.bytes());
        let inputs = [
            ("X", x.ptr, bytes_of(x.shape.span(), ta), x.alloc),
            ("Y", y.ptr, bytes_of(y.shape.span(), ta), y.alloc),
            ("the pattern's row_ptr", pattern.row_ptr, bytes_of(Some(m / bs + 1), w), pattern.allocs.row_ptr),
            ("the pattern's col_idx", pattern.col_idx, bytes_of(Some(nnzb), w), pattern.allocs.col_idx),
        ];
        let out = (values.ptr, bytes_of(values.shape.span(), std::mem::size_of::<TV>()), values.alloc);
        check_output("the values", out, &inputs)?;
        if nnzb == 0 {
            return Ok(());
        }
        let problem = BackwardProblem {
            op: Op::Sddmm,
            bs,
            input: TA::IN_TYPE,
            b_layout: y.shape.layout,
            x_layout: x.shape.layout,
            output: TV::OUT_TYPE,
            shape: (m, n),
            nnzb,
            n: k,
            c_layout: Layout::RowMajor,
            beta_zero: ep.beta == 0.0,
            sddmm_tiles: pattern.sddmm_tiles.map(|t| t.counts),
        };
        // (group_rows, and the tile list where the plan takes it, are set by launch_backward.)
        let params = BsrSpmmParams {
            a_values: x.ptr,
            row_ptr: pattern.row_ptr,
            col_idx: pattern.col_idx,
            b: y.ptr,
            c: values.ptr,
            ldb,
            ldc: bs as u32,
            n: n as u32,
            block_rows: (m / bs) as u32,
            alpha: ep.alpha,
            beta: ep.beta,
            index64: u32::from(pattern.index == IndexType::I64),
            nnzb: nnzb as u32,
            k: k32,
            lda,
            ..BsrSpmmParams::NONE
        };
        // The sm_90a kernels' maps: X (M x K) and Y (N x K) a block's rows at a time (Y^T's K x N columns: a
        // row-major Y is a K-major B), the values as a row-major (nnzb * bs) x bs C.
        let maps = |cfg: &KernelConfig, c_tma: bool| -> Result<Maps> {
            let tmap_a = tma::dense_k_map("X", TA::IN_TYPE, (x.ptr, x.shape.layout, x.shape.ld), (m, k), cfg.bs)?;
            let tmap_b = tma::dense_k_map("Y", TA::IN_TYPE, (y.ptr, y.shape.layout, y.shape.ld), (n, k), cfg.bs)?;
            let rows = nnzb * bs;
            let tmap_c = tma::staged_c_map(c_tma, (TV::OUT_TYPE, values.ptr, Layout::RowMajor), (rows, bs as u32, bs))?;
            Ok((tmap_a, tmap_b, tmap_c))
        };
        self.launch_backward(stream, &problem, params, maps, pattern.sddmm_tiles)
    }

    /// Plans `problem` and launches its kernel with `params` (their plan-dependent fields filled in here); an
    /// sm_90a kernel takes the tensor maps `maps` makes for its configuration (C's only where the plan stores C by
    /// TMA) ahead of the parameters (`layout::HopperSpmmParams`). `sddmm_tiles`: the structure's SDDMM tile lists
    /// (`problem.sddmm_tiles` counts their entries), passed where the plan takes one.
    fn launch_backward(
        &self,
        stream: CUstream,
        problem: &BackwardProblem,
        mut params: BsrSpmmParams,
        maps: impl FnOnce(&KernelConfig, bool) -> Result<Maps>,
        sddmm_tiles: Option<&SddmmTiles>,
    ) -> Result<()> {
        let (plan, kernel) = plan::plan_backward(self.room(), problem)?;
        let kernel = self.kernel_at(kernel).ok_or_else(|| Error::InvalidArgument {
            name: "plan",
            reason: format!("the planned kernel {} is not loaded on this Gpu", plan.kernel),
        })?;
        params.group_rows = plan.group_rows;
        if let Decomposition::BlockGroups { blocks, listed: true } = plan.decomposition {
            let found = sddmm_tiles.and_then(|t| Some((t, t.counts.offset(blocks)?, t.counts.tiles(blocks)?)));
            let Some((t, offset, tiles)) = found else {
                return Err(Error::InvalidArgument {
                    name: "plan",
                    reason: format!("takes a tile list of groups of {blocks} blocks the structure does not have"),
                });
            };
            // (The lists are never written after they are made: no stream to order against.)
            let (list, _read) = t.list.device_ptr(t.list.stream());
            params.sddmm_list = list + 8 * offset as u64;
            params.sddmm_tiles = limit("SDDMM tiles", tiles)?;
        }
        let cfg = kernel.config();
        // Encoded before anything is launched: an error leaves nothing queued.
        let mut hopper = match cfg.pipeline {
            Pipeline::TmaWgmma { .. } => {
                let (tmap_a, tmap_b, tmap_c) = maps(&cfg, plan.c_tma)?;
                Some(HopperSpmmParams {
                    tmap_a,
                    tmap_b,
                    tmap_c: tmap_c.unwrap_or(TensorMap([0; 16])),
                    spmm: params,
                    tile_counter: 0,
                    c_tma: u32::from(tmap_c.is_some()),
                    split_rows: 0,
                })
            }
            Pipeline::CpAsync | Pipeline::Direct => None,
        };
        let arg = match hopper.as_mut() {
            Some(hp) => (hp as *mut HopperSpmmParams).cast::<std::ffi::c_void>(),
            None => (&mut params as *mut BsrSpmmParams).cast::<std::ffi::c_void>(),
        };
        let mut args = [arg];
        if let Ok(mut last) = self.last_plan.lock() {
            *last = Some(plan.clone());
        }
        // SAFETY: the kernel takes one BsrSpmmParams by value (kernels-gpu/src/sm80/bsr.rs for A^T @ B,
        // sm80/sddmm.rs for SDDMM), or for an sm_90a variant one HopperSpmmParams (kernels-gpu/src/sm90/), and its
        // preconditions hold: A^T @ B reads A's nnzb * bs^2 values through a transposed index of nnzb entries
        // (owned: made from this matrix, checked by structure identity; a view: its constructor's contract) whose
        // rows are below M / bs, B's M x N span and C's K x N span in their layouts; SDDMM reads the pattern's
        // valid structure (owned: validated at upload; a view: its contract), X's rows of each block row over K,
        // Y's rows of each block column over K, and writes the nnzb * bs x bs values. Every dense view has a
        // leading dimension covering a row (column), a multiple of 16 bytes, and a 16-byte aligned start; every
        // safe view's extent lies in its allocation and the output overlaps no input (checked above); pointers and
        // the stream belong to this context. The sm_90a tensor maps describe exactly A's values (or X), B (or
        // Y^T) and, with c_tma (beta 0, row-major), the output's span, so every TMA box lies in memory the views
        // cover, reads as zero or is not written; no tile counter (one CTA per tile, or per two), no split
        // rows. An SDDMM's tile list (where set) is the structure's (an uploaded matrix's, or the view's
        // RowSchedule's, checked for the same block rows and blocks), `sddmm_tiles` entries whose rows are block
        // rows of the structure, alive as long as the borrowed view. Grid, block and shared memory follow the
        // variant's configuration, checked when the module was loaded; `args` and the parameters it points to
        // outlive the call.
        unsafe {
            launch_with(
                kernel.func.cu_function(),
                (plan.ctas, plan.threads, plan.smem_bytes),
                stream,
                &mut args,
                LaunchAttributes::default(),
            )
        }
        .map(drop)
    }
}

/// The tensor maps of an sm_90a backward launch: A's (or X's), B's (or Y^T's) and C's where C is stored by TMA.
type Maps = (TensorMap, TensorMap, Option<TensorMap>);

/// `Ok` for an epilogue of alpha and beta only (the backward kernels add no bias and apply no activation).
fn check_backward_epilogue(ep: Epilogue) -> Result<()> {
    if ep.activation != crate::Activation::Identity {
        return Err(Error::InvalidArgument {
            name: "epilogue",
            reason: format!(
                "the backward products take alpha and beta only, not the activation {}",
                ep.activation.name()
            ),
        });
    }
    Ok(())
}

/// `v` as u32, or [`Error::InvalidArgument`] naming it.
fn limit(name: &'static str, v: usize) -> Result<u32> {
    u32::try_from(v).ok().filter(|&v| v < u32::MAX - 1024).ok_or_else(|| Error::InvalidArgument {
        name,
        reason: format!("{v} exceeds the kernel's limit of {}", u32::MAX - 1024),
    })
}

/// Checks the extents of the inputs and of the output `out` (first byte, bytes, allocation) against their
/// allocations where known, and that the output overlaps no input.
fn check_output(
    what: &'static str,
    (ptr, bytes, alloc): (u64, u128, Option<Alloc<'_>>),
    inputs: &[(&'static str, u64, u128, Option<Alloc<'_>>)],
) -> Result<()> {
    for &(name, start, len, a) in inputs.iter().chain([&(what, ptr, bytes, alloc)]) {
        if let Some(a) = a {
            a.holds(name, start, len)?;
        }
    }
    let mut ranges = [("", 0u64, 0u128); 5];
    for (slot, &(name, start, len, _)) in ranges.iter_mut().zip(inputs) {
        *slot = (name, start, len);
    }
    match first_overlap((ptr, bytes), &ranges) {
        Some(other) => Err(Error::InvalidArgument {
            name: what,
            reason: format!("overlaps {other}: the output must not alias anything the kernel reads"),
        }),
        None => Ok(()),
    }
}
