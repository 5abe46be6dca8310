//! The typed, validated launcher of the BSR SpMM kernels ([`Op::BsrSpmm`]): owned buffers ([`Gpu::spmm`],
//! [`Gpu::spmm_on`]) and borrowed views on the caller's stream ([`Gpu::spmm_raw`]) go through one validation
//! function and one launch.

use std::sync::Arc;

use cudarc::driver::sys::{CUdeviceptr, CUresult, CUstream};
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};
use sparsek_layout::{BsrSpmmParams, HopperSpmmParams, Layout, Pipeline};

use crate::Epilogue;
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::gpu::buffers::{DeviceBsr, DeviceMatrix, InputElement, OutputElement};
use crate::gpu::driver::cuda;
use crate::gpu::registry::Kernel;
use crate::gpu::split::{self, GraphSpace, capturing};
use crate::gpu::tma;
use crate::gpu::views::{Alloc, BsrShape, BsrView, DenseView, DenseViewMut, IndexType, VectorView, bytes_of};
use crate::plan::{self, Choice, Chosen, Decomposition, LaunchPlan, Problem};
use crate::tune::Plan;

/// Largest N the kernels take: column indices of a CTA's tile (`n0 + BN`) stay below 2^32.
const MAX_N: usize = u32::MAX as usize - 1024;

impl Gpu {
    /// `C = act(alpha * (A @ B)) + beta * C` on the GPU's default stream: A and B in f16 or bf16 (the same type),
    /// f32 accumulation, C in f32 or the inputs' 16-bit type, all row-major (borrowed operands, other layouts and
    /// a bias: [`Gpu::spmm_raw`]). With `beta == 0` C is not read. Asynchronous: the call returns once the kernel
    /// is queued.
    ///
    /// Everything is checked before the launch, and a rejected call changes nothing: shapes
    /// ([`Error::ShapeMismatch`]), the type combination, buffers from another GPU context, sizes beyond the
    /// kernel's 32-bit indexing ([`Error::InvalidArgument`]). A launch the driver refuses returns
    /// [`Error::Cuda`]; C's contents are then unspecified.
    pub fn spmm<TA: InputElement, TC: OutputElement>(
        &self,
        a: &DeviceBsr<TA>,
        b: &DeviceMatrix<TA>,
        c: &mut DeviceMatrix<TC>,
        ep: Epilogue,
    ) -> Result<()> {
        self.spmm_on(self.stream(), a, b, c, ep)
    }

    /// [`Gpu::spmm`] on a stream of the caller's choice (from [`Gpu::new_stream`]). Buffers used on other
    /// streams are synchronised by cudarc's event tracking.
    pub fn spmm_on<TA: InputElement, TC: OutputElement>(
        &self,
        stream: &Arc<CudaStream>,
        a: &DeviceBsr<TA>,
        b: &DeviceMatrix<TA>,
        c: &mut DeviceMatrix<TC>,
        ep: Epilogue,
    ) -> Result<()> {
        self.spmm_owned(stream, Choice::Resolve, a, (b, c), ep)
    }

    /// A product of owned buffers (row-major B and C) on `stream`, its plan as `choice` says.
    fn spmm_owned<TA: InputElement, TC: OutputElement>(
        &self,
        stream: &Arc<CudaStream>,
        choice: Choice,
        a: &DeviceBsr<TA>,
        (b, c): (&DeviceMatrix<TA>, &mut DeviceMatrix<TC>),
        ep: Epilogue,
    ) -> Result<()> {
        let layouts = (Layout::RowMajor, Layout::RowMajor);
        let chosen = self.choose::<TA, TC>(a.shape, layouts, b.cols(), Some(a.max_row_blocks()), choice)?;
        self.launch_owned(stream, (&chosen, None), a, (b, c), layouts, ep)
    }

    /// [`Gpu::spmm`] with the kernels and rasterization of `plan` instead of the cached or heuristic choice (for
    /// tests of every plan a tuner may pick, and for callers who fix their plan). [`Error::InvalidArgument`] when
    /// the plan's family has no kernel for this product on this GPU (an sm_90a plan on another GPU, the decode
    /// family for bs 16 or with [`Policy::decode`](crate::plan::Policy::decode) off, the sm_90a family without
    /// blocks), or its group is 0.
    pub fn spmm_with_plan<TA: InputElement, TC: OutputElement>(
        &self,
        plan: &Plan,
        a: &DeviceBsr<TA>,
        b: &DeviceMatrix<TA>,
        c: &mut DeviceMatrix<TC>,
        ep: Epilogue,
    ) -> Result<()> {
        self.spmm_owned(self.stream(), Choice::Fixed(*plan), a, (b, c), ep)
    }

    /// `C = act(alpha * (A @ B) + bias) + beta * C` over borrowed device memory, queued on the caller's raw CUDA
    /// stream (`0` is the legacy default stream; PyTorch's `torch.cuda.current_stream().cuda_stream`, cudarc's
    /// [`CudaStream::cu_stream`] and candle's stream all work). B and C may each be row- or column-major: the
    /// linear layer `y = act(x @ W^T + b)` with a BSR weight `W` (out x in) is
    /// `spmm_raw(stream, W, x.t(), y.t(), Some(b), ep)` — `x.t()` and `y.t()` are column-major views of the
    /// row-major `x` and `y`, no transpose is made. The bias has one value per row of C (per output feature).
    ///
    /// No synchronisation, no allocation, no host round trip: safe to capture in a CUDA graph. Captured, a launch makes
    /// the choices it makes outside the graph; one that balances its rows (split rows, the flat block list, the sm_90a
    /// tile counter) takes a workspace of its own that the graph holds: counters zeroed once and kept until the graph
    /// and its instantiations are destroyed (a few hundred bytes each), and its partial tiles between an allocation
    /// node and a free node kept off the stream's chain, so that a programmatic launch keeps its edge to the kernel
    /// before it (a graph holding allocation nodes may have one instantiation at a time, CUDA's rule, which keeps two
    /// replays from sharing the counters); a replay then gives the bits of the same launch outside the graph. (On a
    /// device without stream-ordered allocation or a driver older than CUDA 12.3, captured launches run whole rows,
    /// one tile per CTA.) Checked before the launch (a rejected call changes nothing): the stream belongs to this
    /// `Gpu`'s context, every raw pointer is device memory of this GPU (asked of the driver, or for a view declared
    /// with [`DenseView::on_device`] and its kin, the declared device compared with this one), shapes, the type
    /// combination, the bias length, 32-bit limits, that every byte the kernel will touch of a view made by a safe
    /// constructor lies inside its device allocation ([`Error::OutsideAllocation`]), and that C overlaps no input:
    /// A's values, `row_ptr`, `col_idx` and row order, B, the bias, and this `Gpu`'s split workspace
    /// ([`Error::InvalidArgument`] naming it).
    ///
    /// Lifetimes: a buffer behind a view made by a safe constructor ([`DenseView::from_cuda_slice`],
    /// [`DenseView::from_cuda_view`], [`DenseViewMut::from_cuda_slice`], [`VectorView::from_cuda_slice`],
    /// [`DeviceMatrix::view`], [`DeviceBsr::view`]) outlives the launch's work even when it is dropped right after
    /// the call: its own stream is made to wait (on the device, `cuStreamWaitEvent`) for an event recorded after
    /// the launch on `stream`, and cudarc frees a buffer in its stream's order (a
    /// [`RowSchedule`](crate::gpu::RowSchedule) attached with [`BsrView::with_schedule`] waits for the device's
    /// work when it is dropped). Not on a stream being captured into a CUDA graph: the kernel runs when the graph
    /// is replayed, and the caller keeps every operand alive while the graph may be replayed, as for any graph.
    ///
    /// # Safety
    /// `stream` is a live stream (or 0), and the views' contracts hold until the kernel has finished on
    /// `stream`: the memory of every view made by an `unsafe` constructor (`from_raw`, `from_raw_checked`) stays
    /// allocated and is not written (C: not read or written) by anything else until then, and no work that may run
    /// concurrently with the kernel (on another stream) writes A, B or the bias, or touches C. Dropping it or
    /// freeing it right after this call is the caller's to order (e.g. by synchronising `stream` first).
    pub unsafe fn spmm_raw<TA: InputElement, TC: OutputElement>(
        &self,
        stream: CUstream,
        a: &BsrView<'_, TA>,
        b: &DenseView<'_, TA>,
        c: &mut DenseViewMut<'_, TC>,
        bias: Option<&VectorView<'_, TA>>,
        ep: Epilogue,
    ) -> Result<()> {
        let layouts = (b.shape.layout, c.view.shape.layout);
        let chosen = self.choose::<TA, TC>(a.shape, layouts, b.shape.cols, a.max_row_blocks, Choice::Resolve)?;
        self.ctx_current()?;
        self.check_stream(stream)?;
        if let Some(ordinal) = a.schedule_ordinal
            && ordinal != self.info().ordinal
        {
            return Err(Error::InvalidArgument {
                name: "A's row schedule",
                reason: format!("was made on device {ordinal}; this Gpu is device {}", self.info().ordinal),
            });
        }
        // Raw pointers are checked where they will be used (an empty operand's address never is).
        let has_blocks = a.shape.nnzb > 0;
        for (what, check, ptr, device) in [
            ("A's values", a.raw && has_blocks, a.values, a.device),
            ("A's row_ptr", a.raw, a.row_ptr, a.device),
            ("A's col_idx", a.raw && has_blocks, a.col_idx, a.device),
            ("B", b.raw && !b.is_empty_span(), b.ptr, b.device),
            ("C", c.view.raw && !c.view.is_empty_span(), c.view.ptr, c.view.device),
            (
                "the bias",
                bias.is_some_and(|v| v.raw && v.len > 0),
                bias.map_or(0, |v| v.ptr),
                bias.and_then(|v| v.device),
            ),
        ] {
            if check {
                self.check_raw_pointer(what, ptr, device)?;
            }
        }
        self.launch(stream, (&chosen, None), a, b, &c.view, bias, ep)?;
        let allocs = [
            a.allocs.values,
            a.allocs.row_ptr,
            a.allocs.col_idx,
            a.allocs.row_order,
            b.alloc,
            c.view.alloc,
            bias.and_then(|v| v.alloc),
        ];
        self.join_owners(stream, &allocs)
    }

    /// Makes the stream of each safe view's buffer (other than `stream`) wait, on the device, for an event recorded
    /// on `stream` after the launch just queued, so a buffer dropped right after the call (cudarc frees it in its
    /// stream's order) outlives the kernel. Nothing to do when every buffer's stream is `stream`, or on a stream
    /// being captured (the kernel runs at replay; see [`Gpu::spmm_raw`]). Where a buffer's stream is being captured
    /// (it cannot wait on an uncaptured stream's event), or the event fails, `stream` is synchronised instead.
    pub(super) fn join_owners(&self, stream: CUstream, allocs: &[Option<Alloc<'_>>; 7]) -> Result<()> {
        // At most one owner per view array, in a fixed array: the launch path allocates nothing.
        let mut owners: [Option<&Arc<CudaStream>>; 7] = [None; 7];
        let mut count = 0;
        for s in allocs.iter().flatten().filter_map(|a| a.stream) {
            let known = owners[..count].iter().flatten().any(|o| o.cu_stream() == s.cu_stream());
            if s.cu_stream() != stream && !known {
                owners[count] = Some(s);
                count += 1;
            }
        }
        if count == 0 || capturing(stream) {
            return Ok(());
        }
        // An owner's stream being captured into a graph must not wait on an event of an uncaptured stream (that
        // would break its capture): the host waits for the launch instead.
        let owner_captured = owners.iter().flatten().any(|s| capturing(s.cu_stream()));
        let joined = || -> std::result::Result<(), cudarc::driver::DriverError> {
            use cudarc::driver::sys::CUevent_flags;
            let done = self.context().new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))?;
            // SAFETY: `stream` is a live stream of this context (checked before the launch) and the event is ours.
            unsafe { cudarc::driver::result::event::record(done.cu_event(), stream) }?;
            owners.iter().flatten().try_for_each(|s| s.wait(&done))
        };
        if owner_captured || joined().is_err() {
            // SAFETY: as above; waits for the launch, after which the buffers may be freed.
            unsafe { cudarc::driver::result::stream::synchronize(stream) }.map_err(cuda("cuStreamSynchronize"))?;
        }
        Ok(())
    }

    /// The plan a launch of `C = epilogue(A @ B)` with `n` columns, B and C stored `layouts`, would run on this
    /// `Gpu` ([`Gpu::spmm`], [`Gpu::spmm_on`]): the kernel the cached plan or the built-in heuristic resolves, then
    /// every decision the launch makes ([`LaunchPlan`]; `ep` matters only for storing C through a tensor map,
    /// beta 0). It assumes a stream that may take the sm_90a tile counter (the default stream, or any stream
    /// while no other holds it) and no CUDA graph capture. The errors of a launch's kernel choice:
    /// [`Error::InvalidBsr`] for a block size no kernel serves, [`Error::InvalidArgument`] for a type combination.
    pub fn plan<TA: InputElement, TC: OutputElement>(
        &self,
        a: &DeviceBsr<TA>,
        n: usize,
        layouts: (Layout, Layout),
        ep: Epilogue,
    ) -> Result<LaunchPlan> {
        self.plan_view::<TA, TC>(&a.view(), n, layouts, ep)
    }

    /// [`Gpu::plan`] for a launch of [`Gpu::spmm_raw`] over a view: what the view knows of its rows (a
    /// [`RowSchedule`](crate::gpu::RowSchedule) attached with [`BsrView::with_schedule`], or nothing) decides as
    /// it does for the launch. `layouts` are B's and C's as the launch will see them (for the linear layer
    /// `y^T = W @ x^T`, both column-major).
    pub fn plan_view<TA: InputElement, TC: OutputElement>(
        &self,
        a: &BsrView<'_, TA>,
        n: usize,
        layouts: (Layout, Layout),
        ep: Epilogue,
    ) -> Result<LaunchPlan> {
        let chosen = self.choose::<TA, TC>(a.shape, layouts, n, a.max_row_blocks, Choice::Resolve)?;
        let problem = Problem {
            row_lengths: a.row_lengths,
            row_order: a.row_order != 0,
            beta_zero: ep.beta == 0.0,
            ..self.problem::<TA, TC>(a.shape, layouts, n, a.max_row_blocks, Choice::Resolve)
        };
        Ok(plan::decide(self.room(), &chosen, &problem)?.plan)
    }

    /// The plan of the last launch queued through this `Gpu` (from any thread), if any: what ran, as
    /// [`Gpu::plan`] predicts it (`sparsek run` prints it; tests compare the two).
    pub fn last_plan(&self) -> Option<LaunchPlan> {
        self.last_plan.lock().ok().and_then(|p| p.clone())
    }

    /// [`Gpu::spmm`] with a kernel of the tuning module ([`Gpu::tuning_variants`]) on the default stream. The
    /// variant must be built for A's block size and for `TC`. `group_rows` overrides the rasterization group
    /// (block rows per group; `Some(u32::MAX)` is plain row-fastest order); `None` lets the launcher choose, as
    /// [`Gpu::spmm`] does.
    #[cfg(feature = "tuning")]
    #[doc(hidden)]
    pub fn spmm_variant<TA: InputElement, TC: OutputElement>(
        &self,
        variant: &crate::gpu::KernelVariant,
        a: &DeviceBsr<TA>,
        b: &DeviceMatrix<TA>,
        c: &mut DeviceMatrix<TC>,
        ep: Epilogue,
        group_rows: Option<u32>,
    ) -> Result<()> {
        let k = &variant.0;
        let v = k.variant;
        if v.bs as usize != a.shape.bs || v.out != TC::OUT_TYPE || v.input != TA::IN_TYPE {
            return Err(Error::InvalidArgument {
                name: "variant",
                reason: format!(
                    "{} is for bs {}, {} inputs and {} output; A has bs {}, the inputs are {}, C is {}",
                    v.name,
                    v.bs,
                    v.input.name(),
                    v.out.name(),
                    a.shape.bs,
                    TA::IN_TYPE.name(),
                    TC::OUT_TYPE.name()
                ),
            });
        }
        let stream = self.stream().clone();
        let loaded = plan::Loaded { variant: v, ctas_per_sm: k.ctas_per_sm };
        let layouts = (Layout::RowMajor, Layout::RowMajor);
        let chosen = self.choose::<TA, TC>(a.shape, layouts, b.cols(), None, Choice::Kernel(loaded, group_rows))?;
        self.launch_owned(&stream, (&chosen, Some(k)), a, (b, c), layouts, ep)
    }

    /// The planner's problem for a product of `a` (its shape, blocks and longest row when known) with `n` columns
    /// in `layouts` (B's, C's), as far as the kernel choice needs it (the launch fills in the rest).
    fn problem<TA: InputElement, TC: OutputElement>(
        &self,
        a: BsrShape,
        (b_layout, c_layout): (Layout, Layout),
        n: usize,
        max_row_blocks: Option<usize>,
        choice: Choice,
    ) -> Problem<'static> {
        Problem {
            input: TA::IN_TYPE,
            output: TC::OUT_TYPE,
            b_layout,
            c_layout,
            max_row_blocks,
            choice,
            ..Problem::new(a.bs, (a.rows, a.cols, n), a.nnzb)
        }
    }

    /// The kernel of a product of `a` with `n` columns in `layouts` (B's, C's): `choice`'s, or for
    /// [`Choice::Resolve`] the cached plan for the problem's key when there is one, else the built-in heuristic's
    /// (the planner's first decision).
    pub(crate) fn choose<TA: InputElement, TC: OutputElement>(
        &self,
        a: BsrShape,
        layouts: (Layout, Layout),
        n: usize,
        max_row_blocks: Option<usize>,
        choice: Choice,
    ) -> Result<Chosen> {
        let problem = self.problem::<TA, TC>(a, layouts, n, max_row_blocks, choice);
        let cached = match choice {
            Choice::Resolve => self.cached_plan(&problem.plan_key()),
            _ => None,
        };
        plan::choose(self.room(), &problem, cached.as_ref())
    }

    /// The owned-buffer path: context checks, then the device addresses taken on `stream` (cudarc's event
    /// tracking orders the launch after other streams' work on these buffers and records it for later work),
    /// then the one validated launch. A buffer in `ColMajor` holds the transpose of the operand (B as N x K,
    /// C as N x M, row-major): the tuner measures the linear layer's layouts on owned buffers so.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch_owned<TA: InputElement, TC: OutputElement>(
        &self,
        stream: &Arc<CudaStream>,
        chosen: (&Chosen, Option<&Kernel>),
        a: &DeviceBsr<TA>,
        (b, c): (&DeviceMatrix<TA>, &mut DeviceMatrix<TC>),
        (b_layout, c_layout): (Layout, Layout),
        ep: Epilogue,
    ) -> Result<()> {
        let same_ctx = |ctx: &Arc<cudarc::driver::CudaContext>| Arc::ptr_eq(ctx, self.context());
        if !same_ctx(stream.context())
            || !same_ctx(a.values.context())
            || !same_ctx(b.as_slice().context())
            || !same_ctx(c.as_slice().context())
        {
            return Err(Error::InvalidArgument {
                name: "buffers",
                reason: "A, B, C and the stream must all belong to this Gpu's context".into(),
            });
        }
        self.ctx_current()?;
        // The guards record the launch on each buffer's event when dropped (after the launch).
        let (values, _g0) = a.values.device_ptr(stream);
        let (row_ptr, _g1) = a.row_ptr.device_ptr(stream);
        let (col_idx, _g2) = a.col_idx.device_ptr(stream);
        let (row_order, _g3) = a.row_order.device_ptr(stream);
        let (b_ptr, _g4) = b.as_slice().device_ptr(stream);
        let (c_rows, c_cols, c_ld) = (c.rows(), c.cols(), c.ld());
        // C's allocation with the launch's stream as its owner: the guards order the owned buffers' lives.
        let c_alloc = c.alloc().map(|a| Alloc { stream: Some(stream), ..a });
        let (c_ptr, _g5) = c.as_mut_slice().device_ptr_mut(stream);
        let av = BsrView::<TA>::trusted((values, row_ptr, col_idx, row_order), a);
        let bv = DenseView::<TA>::trusted(b_ptr, (b.rows(), b.cols(), b.ld()), b.alloc()).stored(b_layout);
        let cv = DenseView::<TC>::trusted(c_ptr, (c_rows, c_cols, c_ld), c_alloc).stored(c_layout);
        self.launch(stream.cu_stream(), chosen, &av, &bv, &cv, None, ep)
    }

    /// Makes this `Gpu`'s context current on the calling thread (the raw launch and the driver queries use it).
    pub(super) fn ctx_current(&self) -> Result<()> {
        self.context().bind_to_thread().map_err(cuda("cuCtxSetCurrent"))
    }

    /// `Ok` when `stream` (0: the legacy default stream) belongs to this `Gpu`'s context.
    pub(super) fn check_stream(&self, stream: CUstream) -> Result<()> {
        let mut ctx = std::ptr::null_mut();
        // SAFETY: writes one handle through a valid pointer; the stream's validity is the caller's contract.
        unsafe { cudarc::driver::sys::cuStreamGetCtx(stream, &mut ctx) }.result().map_err(cuda("cuStreamGetCtx"))?;
        if ctx != self.context().cu_ctx() {
            return Err(Error::InvalidArgument {
                name: "stream",
                reason: "the stream belongs to another CUDA context than this Gpu's (build the Gpu with Gpu::new \
                         for the device's primary context, or Gpu::from_context)"
                    .into(),
            });
        }
        Ok(())
    }

    /// `Ok` for a raw view's address `ptr`: where the view declares its device ([`DenseView::on_device`] and its
    /// kin), when that is this GPU (no driver call); else when the driver says so ([`Gpu::check_pointer_of`]).
    pub(crate) fn check_raw_pointer(&self, what: &'static str, ptr: CUdeviceptr, device: Option<usize>) -> Result<()> {
        match device {
            Some(d) if d == self.info().ordinal => Ok(()),
            Some(d) => Err(Error::InvalidArgument {
                name: what,
                reason: format!("is declared memory of device {d}; this Gpu is device {}", self.info().ordinal),
            }),
            None => self.check_pointer_of(what, ptr),
        }
    }

    /// `Ok` when `ptr` is device memory of this GPU: one `cuPointerGetAttributes` call for the memory type and
    /// the device ordinal (half the driver calls of two `cuPointerGetAttribute`: this runs for every raw
    /// pointer of every launch, and a framework's per-call overhead is counted in microseconds).
    pub(crate) fn check_pointer_of(&self, what: &'static str, ptr: CUdeviceptr) -> Result<()> {
        use cudarc::driver::sys::{CUmemorytype, CUpointer_attribute, cuPointerGetAttributes};
        let not_device = |reason: String| Err(Error::InvalidArgument { name: what, reason });
        let mut mem_type: u32 = 0;
        let mut ordinal: i32 = -1;
        let mut attributes = [
            CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        ];
        let mut data = [(&mut mem_type as *mut u32).cast::<std::ffi::c_void>(), (&mut ordinal as *mut i32).cast()];
        // SAFETY: two attributes, each written through its pointer: MEMORY_TYPE a CUmemorytype (a u32),
        // DEVICE_ORDINAL an int. For an address the driver does not know, it writes zeros and returns success.
        unsafe { cuPointerGetAttributes(2, attributes.as_mut_ptr(), data.as_mut_ptr(), ptr) }
            .result()
            .map_err(cuda("cuPointerGetAttributes"))?;
        if mem_type == CUmemorytype::CU_MEMORYTYPE_HOST as u32 {
            return not_device(format!("address {ptr:#x} is host memory, not device memory"));
        }
        if mem_type != CUmemorytype::CU_MEMORYTYPE_DEVICE as u32
            && mem_type != CUmemorytype::CU_MEMORYTYPE_UNIFIED as u32
        {
            return not_device(format!("address {ptr:#x} is not memory the CUDA driver knows"));
        }
        if ordinal != self.info().ordinal as i32 && !self.mapped_read_write(ptr) {
            return not_device(format!(
                "address {ptr:#x} is memory of device {ordinal}, not mapped for this Gpu's device {} (another \
                 GPU's memory is taken where it is mapped read-write for this one, as torch's symmetric memory maps \
                 its peers' buffers)",
                self.info().ordinal
            ));
        }
        Ok(())
    }

    /// Whether `ptr` lies in a virtual-memory mapping (`cuMemMap`) that this GPU may read and write: another GPU's
    /// memory reached over NVLink or PCIe, as torch's symmetric memory and NCCL's user buffers map their peers'
    /// allocations. Any other address (an ordinary allocation of another device) answers `false`.
    fn mapped_read_write(&self, ptr: CUdeviceptr) -> bool {
        use cudarc::driver::sys::{CUmemAccess_flags, CUmemLocation, CUmemLocationType, cuMemGetAccess};
        let location =
            CUmemLocation { type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: self.info().ordinal as i32 };
        let mut flags: std::ffi::c_ulonglong = 0;
        // SAFETY: `flags` and `location` are valid for the call; for an address outside any cuMemMap mapping the
        // driver returns an error and writes nothing.
        let status = unsafe { cuMemGetAccess(&mut flags, &location, ptr) };
        status.result().is_ok() && flags == CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE as u64
    }

    /// Validates everything the kernel relies on that the host can know (shapes, layouts, sizes against the
    /// kernel's 32-bit indexing, the bias, overlaps), takes the plan of the `chosen` kernel (the given one for a
    /// tuning candidate) for this launch and executes it on `stream`: every entry point comes through here.
    #[allow(clippy::too_many_arguments)]
    fn launch<TA: InputElement, TC: OutputElement>(
        &self,
        stream: CUstream,
        (chosen, given): (&Chosen, Option<&Kernel>),
        a: &BsrView<'_, TA>,
        b: &DenseView<'_, TA>,
        c: &DenseView<'_, TC>,
        bias: Option<&VectorView<'_, TA>>,
        ep: Epilogue,
    ) -> Result<()> {
        let (m, k, n) = (a.shape.rows, a.shape.cols, b.shape.cols);
        let max_row_blocks = a.max_row_blocks;
        if b.shape.rows != k || c.shape.rows != m || c.shape.cols != n {
            return Err(Error::ShapeMismatch { a: (m, k), b: (b.shape.rows, n), c: (c.shape.rows, c.shape.cols) });
        }
        if let Some(v) = bias
            && v.len != m
        {
            return Err(Error::InvalidArgument {
                name: "bias",
                reason: format!("has {} values; C has {m} rows (one bias value per row of C)", v.len),
            });
        }
        let limit = |name: &'static str, v: usize, max: usize| -> Result<u32> {
            if v > max {
                Err(Error::InvalidArgument { name, reason: format!("{v} exceeds the kernel's limit of {max}") })
            } else {
                Ok(v as u32)
            }
        };
        let n32 = limit("N", n, MAX_N)?;
        let ldb = limit("ldb", b.shape.ld, u32::MAX as usize)?;
        let ldc = limit("ldc", c.shape.ld, u32::MAX as usize)?;
        limit("M", m, u32::MAX as usize)?;
        limit("K", k, u32::MAX as usize)?;
        limit("nnzb", a.shape.nnzb, u32::MAX as usize)?;
        self.check_extents(a, b, c, bias)?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        let captured = capturing(stream);
        // Whether a captured launch follows kernel nodes only: asked of the driver only where the launch could be
        // programmatic at all.
        let may_be_programmatic = self.policy.programmatic && self.facts.programmatic_available;
        let follows_kernels =
            captured && may_be_programmatic && split::follows_kernels(stream, self.info().driver_version);
        let mut problem = Problem {
            row_lengths: a.row_lengths,
            row_order: a.row_order != 0,
            beta_zero: ep.beta == 0.0,
            captured,
            follows_kernels,
            ..self.problem::<TA, TC>(a.shape, (b.shape.layout, c.shape.layout), n, max_row_blocks, Choice::Resolve)
        };
        let room = self.room();
        let mut d = plan::decide(room, chosen, &problem)?;
        // The plan takes the Gpu's tile counter: claimed for this stream, or (held by another stream) planned again
        // without it. A captured launch has its own.
        let mut claim = None;
        if d.plan.tile_counter && !captured {
            claim = self.split.as_ref().and_then(|ws| ws.claim_scheduler(stream));
            if claim.is_none() {
                problem.tile_counter_free = false;
                d = plan::decide(room, chosen, &problem)?;
            }
        }
        let plan::Decision { kernel, need, ref plan } = d;
        let kernel = match (kernel, given) {
            (plan::KernelRef::Given, Some(k)) => k,
            (r, _) => self.kernel_at(r).ok_or_else(|| Error::InvalidArgument {
                name: "plan",
                reason: format!("the planned kernel {} is not loaded on this Gpu", plan.kernel),
            })?,
        };
        let cfg = kernel.config();
        // Read only for what the plan takes of it (`need`: nothing where the launch may not use it).
        let workspace = self.split.as_ref();
        let block_rows = (m / a.shape.bs) as u32;
        let row_order = if plan.longest_rows_first { a.row_order } else { 0 };
        let (ctas, group_rows) = (plan.ctas, plan.group_rows);
        // The decomposition's parameters, as the plan records them: the flat list's CTAs per N tile, the sm_90a
        // kernels' split rows, the most parts per split row and the blocks a part holds.
        let (flat_ctas, split_rows, split_chunks, split_blocks) = match plan.decomposition {
            Decomposition::WholeRows | Decomposition::StoredBlocks | Decomposition::BlockGroups { .. } => (0, 0, 1, 1),
            Decomposition::FlatList { ctas_per_tile } => (ctas_per_tile, 0, 1, 1),
            Decomposition::SplitRows { chunks, blocks } => (0, 0, chunks, blocks),
            Decomposition::HopperSplitRows { split_rows, chunks, blocks } => (0, split_rows, chunks, blocks),
        };
        let mut params = BsrSpmmParams {
            a_values: a.values,
            row_ptr: a.row_ptr,
            col_idx: a.col_idx,
            row_order,
            b: b.ptr,
            c: c.ptr,
            bias: bias.map_or(0, |v| v.ptr),
            ldb,
            ldc,
            n: n32,
            block_rows,
            group_rows,
            alpha: ep.alpha,
            beta: ep.beta,
            index64: u32::from(a.index == IndexType::I64),
            c_col_major: u32::from(c.shape.layout == Layout::ColMajor),
            activation: ep.activation as u32,
            split_chunks,
            split_blocks,
            flat_ctas,
            nnzb: a.shape.nnzb as u32,
            flags: if plan.waits_first { sparsek_layout::SPMM_WAIT_FIRST } else { 0 },
            // The workspace's addresses are set below where the plan takes it.
            ..BsrSpmmParams::NONE
        };
        // The sm_90a kernels take tensor maps of A's values and B, then the same parameters, then the tile
        // scheduler: the workspace's counters for a persistent grid, or none (CTA c walks tiles c, c + grid, ...)
        // for one tile per consumer set (gpu/split.rs). A persistent grid with that static stride instead of
        // the counter leaves SMs idle behind long rows (docs/perf-notes.md, "Hopper"). The maps are encoded before
        // a captured launch's workspace is allocated, so an error leaves nothing in the graph.
        let tmaps = match cfg.pipeline {
            Pipeline::TmaWgmma { .. } => {
                // A C written without reading it (beta 0; row-major, or column-major of 16-bit elements) is stored
                // through a tensor map from shared memory, whole 128-byte lines at a time: stored from the registers,
                // each warp's store wrote 8 rows of 32 bytes and took 17-48% of the time at 5-22% density
                // (docs/perf-notes.md, Hopper step 11); a column-major C, 16 bytes per column and store.
                let c_at = (TC::OUT_TYPE, c.ptr, c.shape.layout);
                let tmap_c = tma::staged_c_map(plan.c_tma, c_at, (c.shape.rows, n32, c.shape.ld))?;
                let tmap_a = tma::a_values_map(TA::IN_TYPE, a.values, a.shape.nnzb, &cfg)?;
                let tmap_b = tma::b_map(TA::IN_TYPE, (b.ptr, b.shape.layout, b.shape.ld), (k, n), &cfg)?;
                Some((tmap_a, tmap_b, tmap_c))
            }
            Pipeline::CpAsync | Pipeline::Direct => None,
        };
        // The workspace's addresses: the Gpu's, or a captured launch's own (allocated here, freed after the launch).
        let pool = workspace.and_then(|ws| ws.graph_counters.as_ref());
        let graph_space = match (plan.graph_workspace, pool) {
            // SAFETY: the caller's live stream of this context (checked by the caller), being captured (the plan's
            // graph workspace is only planned for a captured launch); a programmatic plan's kernel is one of the
            // product module's, which wait for the grids before them (below).
            (true, Some(pool)) => Some((unsafe { GraphSpace::allocate(stream, need, pool, plan.programmatic) }?, pool)),
            (true, None) => {
                return Err(Error::InvalidArgument {
                    name: "plan",
                    reason: "it takes a graph-owned workspace, which this Gpu cannot provide".into(),
                });
            }
            (false, _) => None,
        };
        let (partials, counters, scheduler) = match (&graph_space, workspace) {
            (Some((g, _)), _) => (g.partials, g.counters, g.scheduler),
            (None, Some(ws)) => (ws.partials, ws.counters, ws.scheduler),
            (None, None) => (0, 0, 0),
        };
        if need.partials_bytes > 0 || need.counters > 0 {
            params.split_partials = partials;
            params.split_counters = counters;
        }
        let mut hopper = tmaps.map(|(tmap_a, tmap_b, tmap_c)| HopperSpmmParams {
            tmap_a,
            tmap_b,
            tmap_c: tmap_c.unwrap_or(sparsek_layout::TensorMap([0; 16])),
            spmm: params,
            tile_counter: if need.scheduler { scheduler } else { 0 },
            c_tma: u32::from(tmap_c.is_some()),
            split_rows,
        });
        let arg = match hopper.as_mut() {
            Some(hp) => (hp as *mut HopperSpmmParams).cast::<std::ffi::c_void>(),
            None => (&mut params as *mut BsrSpmmParams).cast::<std::ffi::c_void>(),
        };
        let mut args = [arg];
        // A captured launch on a workspace of its own has its programmatic edges set already (GraphSpace::allocate).
        let attributes = LaunchAttributes {
            window: plan.evict_first_bytes.map(|bytes| (a.values, bytes)),
            programmatic: plan.programmatic && graph_space.is_none(),
        };
        // With split rows, the workspace's partial tiles (split_slots of them, checked by split_choice against its
        // size) and zeroed counters (block_rows * n_tiles of them, likewise) are this launch's alone: the Gpu's
        // workspace by `ordered`, which makes it wait for every earlier split launch; a captured launch's own
        // workspace by being allocated for it.
        let mut launch = || {
            // SAFETY: the kernel takes one BsrSpmmParams by value (kernels-gpu/src/bsr.rs, decode.rs), or for an sm_90a variant
            // one HopperSpmmParams (kernels-gpu/src/sm90.rs), and its preconditions hold: A's structure is valid
            // (Bsr::try_new for uploads; the unsafe view constructors' contract or the device check for views) with
            // row_ptr of block_rows + 1 entries of the index width, col_idx below K / bs, nnzb * bs^2 values and
            // row_order 0 or a permutation of the block rows; B spans K x N and C M x N in their layouts, with
            // leading dimensions covering a row (column), multiples of 16 bytes, and 16-byte aligned starts
            // (DeviceMatrix / the view constructors), every byte of a safe view's extent inside its allocation
            // (check_extents, from the driver's range), C overlapping no input: values, row_ptr, col_idx, row order,
            // B, bias, the Gpu's workspace (check_extents); the bias holds M elements; every pointer is memory of
            // this context (owned: checked by the caller; raw: cuPointerGetAttribute) and the stream is this
            // context's (owned: checked; raw: cuStreamGetCtx); grid,
            // block and shared memory follow the variant's KernelConfig, checked and given its dynamic shared memory
            // limit when the module was loaded. The sm_90a tensor maps describe exactly A's nnzb * bs^2 values,
            // B's K x N span in its layout and (c_tma) C's M x N span in its layout (a nonempty A: Gpu::kernel picks
            // those kernels only with blocks), so every TMA box lies in memory the views cover, reads as zero or is
            // not written.
            // `args` and the parameters it points to outlive the call, which copies them. With split rows, the
            // workspace holds the launch's partial tiles and counters (split_choice; the sizes of `need`), and no
            // other launch uses them meanwhile (SplitWorkspace::ordered, or a GraphSpace allocated for this launch,
            // its counters zeroed in stream order before it); a persistent sm_90a launch holds the two scheduler
            // counters, zero before it (the kernel's last CTA resets them, or GraphSpace zeroed them), the Gpu's
            // claimed for this stream only when free or last used on it (SplitWorkspace::claim_scheduler).
            // The window only names A's values (an address range; nothing is read through it). A programmatic
            // launch is one of the product module's sm_90a kernels, which wait for the grid before them ahead of
            // every read of B, the bias or C and every use of the split workspace (plan::decide); either the
            // caller promised that A is not written by that grid (Policy::programmatic), or the kernel waits
            // before it reads anything (waits_first: SPMM_WAIT_FIRST in its flags).
            unsafe {
                launch_with(
                    kernel.func.cu_function(),
                    (ctas, plan.threads, plan.smem_bytes),
                    stream,
                    &mut args,
                    attributes,
                )
            }
            .map(drop)
        };
        // Recorded before either path launches, a captured launch with a workspace of its own included.
        if let Ok(mut last) = self.last_plan.lock() {
            *last = Some(plan.clone());
        }
        if let Some((space, pool)) = graph_space {
            let launched = launch();
            // SAFETY: allocated on this stream above, in this capture; freed after the launch, launched or not.
            let freed = unsafe { space.free(stream, pool) };
            return launched.and(freed);
        }
        let shared = workspace.filter(|_| need.partials_bytes > 0 || need.counters > 0);
        match shared {
            Some(ws) => ws.ordered(stream, launch)?,
            None => launch()?,
        }
        if let Some(claim) = claim {
            claim.launched();
        }
        Ok(())
    }

    /// Checks every byte the launch will touch, each extent computed from the launch's shapes with checked
    /// (128-bit) arithmetic: the extents of views made by safe constructors lie inside their device allocations
    /// ([`Error::OutsideAllocation`]; raw views' extents are their `unsafe` constructors' contract), and C
    /// overlaps no input ([`Error::InvalidArgument`]): A's values, `row_ptr`, `col_idx` and row order, B, the
    /// bias, and this `Gpu`'s split workspace. The kernel reads all of those while other CTAs write C.
    fn check_extents<TA: InputElement, TC: OutputElement>(
        &self,
        a: &BsrView<'_, TA>,
        b: &DenseView<'_, TA>,
        c: &DenseView<'_, TC>,
        bias: Option<&VectorView<'_, TA>>,
    ) -> Result<()> {
        let inputs = launch_inputs(a, b, bias);
        let c_bytes = bytes_of(c.shape.span(), std::mem::size_of::<TC>());
        for &(what, start, bytes, alloc) in inputs.iter().chain([&("C", c.ptr, c_bytes, c.alloc)]) {
            if let Some(alloc) = alloc {
                alloc.holds(what, start, bytes)?;
            }
        }
        // A fixed array: the launch path allocates nothing. The workspace's entries stay empty without one.
        let mut ranges = [("", 0u64, 0u128); 8];
        for (slot, &(what, start, bytes, _)) in ranges.iter_mut().zip(inputs.iter()) {
            *slot = (what, start, bytes);
        }
        if let Some(ws) = self.split.as_ref() {
            for (slot, (start, bytes)) in ranges[inputs.len()..].iter_mut().zip(ws.ranges()) {
                *slot = ("the Gpu's split workspace", start, bytes);
            }
        }
        match first_overlap((c.ptr, c_bytes), &ranges) {
            Some(what) => Err(Error::InvalidArgument {
                name: "C",
                reason: format!("C's memory overlaps {what}: the output must not alias anything the kernel reads"),
            }),
            None => Ok(()),
        }
    }
}

/// Every input a launch reads, with its first byte, its bytes (from the launch's shapes, 128-bit, saturating: see
/// [`bytes_of`]) and its allocation where a safe constructor recorded it: A's values (`nnzb * bs^2`), `row_ptr`
/// (`block rows + 1` entries of the index width), `col_idx` (`nnzb` entries), the row order (`block rows` u32, when
/// there is one), B's span in its layout and the bias (one value per row of C).
type Input<'a> = (&'static str, u64, u128, Option<Alloc<'a>>);
fn launch_inputs<'a, TA: InputElement>(
    a: &BsrView<'a, TA>,
    b: &DenseView<'a, TA>,
    bias: Option<&VectorView<'a, TA>>,
) -> [Input<'a>; 6] {
    let ta = std::mem::size_of::<TA>();
    let w = a.index.bytes();
    let block_rows = a.shape.rows / a.shape.bs.max(1);
    let order_bytes = if a.row_order == 0 { 0 } else { bytes_of(Some(block_rows), 4) };
    [
        ("A's values", a.values, bytes_of(a.shape.nnzb.checked_mul(a.shape.bs * a.shape.bs), ta), a.allocs.values),
        ("A's row_ptr", a.row_ptr, bytes_of(block_rows.checked_add(1), w), a.allocs.row_ptr),
        ("A's col_idx", a.col_idx, bytes_of(Some(a.shape.nnzb), w), a.allocs.col_idx),
        ("A's row order", a.row_order, order_bytes, a.allocs.row_order),
        ("B", b.ptr, bytes_of(b.shape.span(), ta), b.alloc),
        (
            "the bias",
            bias.map_or(0, |v| v.ptr),
            bias.map_or(0, |v| bytes_of(Some(v.len), ta)),
            bias.and_then(|v| v.alloc),
        ),
    ]
}

/// The first of `inputs` (name, first byte, bytes) that shares a byte with `c` (first byte, bytes), in 128-bit
/// arithmetic; empty ranges overlap nothing.
pub(crate) fn first_overlap(c: (u64, u128), inputs: &[(&'static str, u64, u128)]) -> Option<&'static str> {
    let (c_start, c_end) = (u128::from(c.0), u128::from(c.0).saturating_add(c.1));
    inputs.iter().find_map(|&(what, start, bytes)| {
        let (start, end) = (u128::from(start), u128::from(start).saturating_add(bytes));
        let disjoint = c.1 == 0 || bytes == 0 || c_end <= start || end <= c_start;
        (!disjoint).then_some(what)
    })
}

/// What a launch carries beyond grid, block and shared memory ([`launch_with`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct LaunchAttributes {
    /// An L2 access policy window over `.1` bytes from `.0` whose hits and misses are streaming (evict-first): the
    /// lines the kernel brings into L2 from there are the first to go (the plan's `evict_first_bytes`).
    pub(crate) window: Option<(CUdeviceptr, usize)>,
    /// Programmatic stream serialization: the kernel may start before the grid ahead of it on the stream has
    /// finished, and waits for it (`griddepcontrol.wait`) before it reads B or touches C
    /// ([`Policy::programmatic`](crate::plan::Policy::programmatic)).
    pub(crate) programmatic: bool,
}

/// Which launch call [`launch_with`] made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LaunchPath {
    /// `cuLaunchKernel`: no attributes.
    Plain,
    /// `cuLaunchKernelEx` with the attributes.
    WithAttributes,
    /// `cuLaunchKernel` after the driver refused the attributes.
    Fallback,
}

/// Launches `f` with `ctas` CTAs of `threads` threads and `smem` bytes of dynamic shared memory on `stream`: a
/// plain `cuLaunchKernel` without attributes, else `cuLaunchKernelEx` with them. A driver that refuses the
/// attributes (`CUDA_ERROR_INVALID_VALUE` or `NOT_SUPPORTED`: nothing was launched) gets a plain `cuLaunchKernel`
/// instead: the same results, since the window only steers L2 and `griddepcontrol.wait` returns at once in a grid
/// launched without programmatic serialization. An error names the call that failed ([`PLAIN_LAUNCH`],
/// [`EX_LAUNCH`] or [`FALLBACK_LAUNCH`]).
///
/// # Safety
/// As `cuLaunchKernel`: `f` is a loaded kernel whose parameters `args` point to, valid for its grid, block and
/// shared memory, on a stream of its context. The window is an address range only; it need not be readable. With
/// `programmatic`, `f` executes `griddepcontrol.wait` before it reads anything the preceding grid may write.
pub(crate) unsafe fn launch_with(
    f: cudarc::driver::sys::CUfunction,
    (ctas, threads, smem): (u32, u32, u32),
    stream: CUstream,
    args: &mut [*mut std::ffi::c_void],
    attributes: LaunchAttributes,
) -> Result<LaunchPath> {
    use cudarc::driver::sys::{
        CUaccessPolicyWindow, CUaccessProperty, CUlaunchAttribute, CUlaunchAttributeID, CUlaunchAttributeValue,
        CUlaunchConfig,
    };
    let plain = |args: &mut [*mut std::ffi::c_void]| {
        // SAFETY: the caller guarantees the launch.
        unsafe { cudarc::driver::result::launch_kernel(f, (ctas, 1, 1), (threads, 1, 1), smem, stream, args) }
    };
    // At most two attributes, in a fixed array: the launch path allocates nothing.
    // SAFETY: all-zero plain C data (an attribute id of 0 is CU_LAUNCH_ATTRIBUTE_IGNORE); the used ones are set next.
    let mut attrs: [CUlaunchAttribute; 2] = unsafe { std::mem::zeroed() };
    let mut count = 0;
    if let Some((base, bytes)) = attributes.window {
        // SAFETY: an all-zero union of plain C data is a valid value; its window member is set next.
        let mut value: CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
        value.accessPolicyWindow = CUaccessPolicyWindow {
            base_ptr: base as *mut std::ffi::c_void,
            num_bytes: bytes,
            hitRatio: 1.0,
            hitProp: CUaccessProperty::CU_ACCESS_PROPERTY_STREAMING,
            missProp: CUaccessProperty::CU_ACCESS_PROPERTY_STREAMING,
        };
        attrs[count] =
            CUlaunchAttribute { id: CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, pad: [0; 4], value };
        count += 1;
    }
    if attributes.programmatic {
        // SAFETY: as above; the flag member is set next.
        let mut value: CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
        value.programmaticStreamSerializationAllowed = 1;
        attrs[count] = CUlaunchAttribute {
            id: CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            pad: [0; 4],
            value,
        };
        count += 1;
    }
    if count == 0 {
        return plain(args).map(|_| LaunchPath::Plain).map_err(cuda(PLAIN_LAUNCH));
    }
    let config = CUlaunchConfig {
        gridDimX: ctas,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: threads,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: smem,
        hStream: stream,
        attrs: attrs.as_mut_ptr(),
        numAttrs: count as u32,
    };
    // SAFETY: `config` and `attrs` outlive the call, which copies them; the caller guarantees the rest.
    let ex = unsafe { cudarc::driver::sys::cuLaunchKernelEx(&config, f, args.as_mut_ptr(), std::ptr::null_mut()) };
    match ex.result() {
        Err(e) if matches!(e.0, CUresult::CUDA_ERROR_INVALID_VALUE | CUresult::CUDA_ERROR_NOT_SUPPORTED) => {
            plain(args).map(|_| LaunchPath::Fallback).map_err(cuda(FALLBACK_LAUNCH))
        }
        r => r.map(|_| LaunchPath::WithAttributes).map_err(cuda(EX_LAUNCH)),
    }
}

/// The operation an error of [`launch_with`] names when a launch without attributes fails.
const PLAIN_LAUNCH: &str = "cuLaunchKernel (sparsek_bsr)";

/// The operation an error of [`launch_with`] names when `cuLaunchKernelEx` with attributes fails.
const EX_LAUNCH: &str = "cuLaunchKernelEx (sparsek_bsr, with A's L2 window or programmatic serialization)";

/// The operation an error of [`launch_with`] names when the driver refused the attributes and the plain
/// `cuLaunchKernel` that replaced it failed.
const FALLBACK_LAUNCH: &str = "cuLaunchKernel (sparsek_bsr, after the driver refused the launch attributes)";

#[cfg(test)]
mod tests {
    use super::{LaunchAttributes, LaunchPath, launch_with};
    use crate::gpu::Gpu;
    use cudarc::driver::{DevicePtr, DevicePtrMut};
    use sparsek_layout::{BSR_CHECK_THREADS, BsrCheckParams, check_code};

    /// [`launch_with`] on a GPU, through the structure check kernel on a structure with a known flaw (row 0's
    /// columns decrease): the kernel ran exactly when the result names it. Plain, with a valid window, with
    /// programmatic serialization where the GPU has it, and with a window the driver must refuse (longer than
    /// the device allows), which has to fall back to a plain launch. The check kernel has no grid-dependency wait
    /// and follows a copy, not a kernel, so the programmatic case tests the launch call only (the kernels' waits:
    /// tests/gpu_programmatic.rs). Skips without a GPU (fails with SPARSEK_REQUIRE_GPU=1).
    #[test]
    fn launches_with_and_without_attributes_and_the_fallback() {
        let gpu = match Gpu::new(0) {
            Ok(g) => g,
            Err(e) if std::env::var("SPARSEK_REQUIRE_GPU").is_ok_and(|v| v == "1") => panic!("no GPU: {e}"),
            Err(e) => {
                use std::io::Write;
                let _ = writeln!(std::io::stderr(), "SKIP launches_with_and_without_attributes_and_the_fallback: {e}");
                return;
            }
        };
        let (stream, func) = (gpu.stream().clone(), gpu.check_kernel().expect("the check kernel").clone());
        let row_ptr = stream.clone_htod(&[0u32, 2, 2]).unwrap();
        let col_idx = stream.clone_htod(&[1u32, 0]).unwrap();
        let max_window = gpu.info().max_access_policy_window;
        let mut cases = vec![
            (LaunchAttributes::default(), LaunchPath::Plain),
            (LaunchAttributes { window: None, programmatic: true }, LaunchPath::WithAttributes),
            (LaunchAttributes { window: Some((0, usize::MAX / 2)), programmatic: false }, LaunchPath::Fallback),
        ];
        if max_window > 0 {
            cases.push((LaunchAttributes { window: Some((0, 4096)), programmatic: false }, LaunchPath::WithAttributes));
        }
        for (mut attributes, want) in cases {
            if attributes.programmatic && !gpu.programmatic_launch_available() {
                continue;
            }
            let mut result = stream.clone_htod(&[u64::MAX]).unwrap();
            let (rp, _r1) = row_ptr.device_ptr(&stream);
            let (ci, _r2) = col_idx.device_ptr(&stream);
            if let Some((base, _)) = attributes.window.as_mut() {
                *base = ci;
            }
            let path = {
                let (res, _r3) = result.device_ptr_mut(&stream);
                let mut params = BsrCheckParams {
                    row_ptr: rp,
                    col_idx: ci,
                    result: res,
                    nnzb: 2,
                    block_rows: 2,
                    block_cols: 2,
                    index64: 0,
                    _pad: 0,
                };
                let mut args = [(&mut params as *mut BsrCheckParams).cast::<std::ffi::c_void>()];
                // SAFETY: the check kernel takes one BsrCheckParams; 3 row pointers and 2 column indices, one u64
                // result, all of this context; one CTA of BSR_CHECK_THREADS covers the 2 block rows.
                unsafe {
                    launch_with(
                        func.cu_function(),
                        (1, BSR_CHECK_THREADS, 0),
                        stream.cu_stream(),
                        &mut args,
                        attributes,
                    )
                }
                .unwrap_or_else(|e| panic!("{attributes:?}: {e}"))
            };
            let found = stream.clone_dtoh(&result).unwrap();
            stream.synchronize().unwrap();
            assert_eq!(path, want, "{attributes:?}");
            assert_eq!(found[0], check_code::COL_NOT_INCREASING, "{attributes:?}: the kernel did not run");
        }
    }

    /// C overlapping any input is found, indices included: the launch's input list names A's values, row_ptr,
    /// col_idx and row order, B and the bias, each with the bytes the kernel reads (from the shapes, in 128-bit
    /// arithmetic), and `first_overlap` finds the one C shares a byte with.
    #[test]
    fn c_over_any_input_is_found_indices_included() {
        use super::{first_overlap, launch_inputs};
        use crate::gpu::{BsrArrays, BsrView, DenseView, IndexType, VectorView};
        use half::f16;
        use sparsek_layout::Layout;
        // A: 128 x 64 in 32-blocks (4 block rows), 3 blocks, 64-bit indices; B 64 x 16 row-major (ld 16); bias 128.
        let arrays = BsrArrays { values: 0x10_0000, row_ptr: 0x20_0000, col_idx: 0x30_0000, index: IndexType::I64 };
        // SAFETY: never launched: only the description is used.
        let a = unsafe { BsrView::<f16>::from_raw(arrays, 128, 64, 32, 3) }.unwrap();
        // SAFETY: as above.
        let b = unsafe { DenseView::<f16>::from_raw(0x40_0000, 64, 16, 16, Layout::RowMajor) }.unwrap();
        // SAFETY: as above.
        let bias = unsafe { VectorView::<f16>::from_raw(0x50_0000, 128) }.unwrap();
        let inputs = launch_inputs(&a, &b, Some(&bias));
        let extents: Vec<(&str, u64, u128)> = inputs.iter().map(|&(w, s, b, _)| (w, s, b)).collect();
        assert_eq!(
            extents,
            vec![
                ("A's values", 0x10_0000, 3 * 32 * 32 * 2),
                ("A's row_ptr", 0x20_0000, 5 * 8),
                ("A's col_idx", 0x30_0000, 3 * 8),
                ("A's row order", 0, 0),
                ("B", 0x40_0000, 64 * 16 * 2),
                ("the bias", 0x50_0000, 128 * 2),
            ]
        );
        // C (128 x 16 f32 = 8192 bytes) starting at, inside, or just before each input overlaps it; just after, not.
        let c_bytes = 128 * 16 * 4;
        for &(what, start, bytes) in extents.iter().filter(|e| e.2 > 0) {
            assert_eq!(first_overlap((start, c_bytes), &extents), Some(what), "C at {what}");
            assert_eq!(first_overlap((start + bytes as u64 - 1, c_bytes), &extents), Some(what), "C in {what}");
            assert_eq!(first_overlap((start - c_bytes as u64 + 1, c_bytes), &extents), Some(what), "C before {what}");
            assert_eq!(first_overlap((start + bytes as u64, 1), &extents), None, "C after {what}");
            assert_eq!(first_overlap((start - c_bytes as u64, c_bytes), &extents), None, "C ending at {what}");
        }
        // 32-bit indices: half the bytes. An empty C, or an empty input, overlaps nothing.
        let arrays32 = BsrArrays { index: IndexType::U32, ..arrays };
        // SAFETY: as above.
        let a32 = unsafe { BsrView::<f16>::from_raw(arrays32, 128, 64, 32, 3) }.unwrap();
        assert_eq!(launch_inputs(&a32, &b, None)[1].2, 5 * 4);
        assert_eq!(launch_inputs(&a32, &b, None)[5].2, 0);
        assert_eq!(first_overlap((0x20_0000, 0), &extents), None);
        // An extent whose element count overflowed (saturated) overlaps everything after its start.
        assert_eq!(first_overlap((u64::MAX - 8, 4), &[("huge", 0x1000, u128::MAX)]), Some("huge"));
    }
}
