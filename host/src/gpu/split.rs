//! The split-row workspace (which decompositions a launch takes is the planner's: crate::plan). Split rows: the
//! narrow kernels ([`KernelConfig::splits_rows`](sparsek_layout::KernelConfig::splits_rows)) can spread one block
//! row over several CTAs, each multiplying an equal range of the row's blocks; the row's last CTA adds the parts'
//! partial tiles in part order (the same bits run to run) and writes C. Few, long block rows (a weight of 128 block
//! rows on 132 SMs, or one row holding most blocks) then fill the GPU instead of leaving it waiting on the longest
//! row.
//!
//! The partial tiles and the per-row counters live in a workspace each [`Gpu`] allocates once, when it opens
//! ([`SPLIT_PARTIALS_BYTES`], [`SPLIT_COUNTERS`]); a launch never allocates. The counters start at zero and each
//! row's last CTA sets its counter back to zero, so no launch has to clear them. Launches on different streams
//! would share the workspace: a split launch on another stream than the previous split launch first waits (on
//! the device, `cuStreamWaitEvent`) for the event recorded after that launch, so split launches never overlap.
//!
//! A launch on a stream being captured into a CUDA graph cannot use that workspace (an event recorded outside the
//! capture cannot be waited on inside it, and a replayed graph would reuse the workspace unordered with the
//! launches around it). Where the balance pays for three more graph nodes
//! ([`graph_balance_pays`](crate::plan::graph_balance_pays): a dominating row, or long whole rows filling at most
//! half the SMs) it makes the same choices and takes a workspace of its own in the graph ([`GraphSpace`]: an
//! allocation node of the bytes it needs, a memset node zeroing its counters, the kernel, a free node), so a replay
//! gives the bits of the same launch outside the graph. Elsewhere, and on a
//! device without stream-ordered allocation, a captured launch keeps whole rows.
//!
//! The workspace also holds the sm_90a kernels' two tile-scheduler counters. Those are never waited for across
//! streams: a launch takes them only when they are free or its stream used them last
//! ([`SplitWorkspace::claim_scheduler`]).
//!
//! The tile scheduler ([`TileSchedule`](crate::plan::TileSchedule), chosen by the planner: crate::plan). A kernel
//! launched with one CTA per output tile lets the hardware hand each SM its next tile, but every CTA starts with an
//! empty ring and ends with its epilogue while the tensor cores idle. A persistent grid (one CTA per SM, as many as
//! fit) keeps the ring running across tiles: each CTA's producer takes the next tile from a counter in device
//! memory with an atomic add, so SMs that finish early take more tiles, and in the ping-pong kernels one consumer
//! warpgroup's epilogue overlaps the other's main loop. The counters are zero before a launch and the launch's
//! last CTA sets them back to zero. A launch on another stream while they are busy gets a grid that touches no
//! counter: one tile per consumer set (one CTA per tile, or per two tiles for the ping-pong kernels). A persistent
//! grid walking its tiles with a static stride instead was measured 7-10% faster on uniform rows but 36% slower on
//! skewed ones (docs/perf-notes.md). A launch on a stream being captured into a CUDA graph takes two counters of
//! its own workspace in the graph ([`GraphSpace`]), zeroed before it, and so the persistent grid, where its balance
//! pays for the graph's three more nodes; else one tile per consumer set.

use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{CUevent_flags, CUevent_wait_flags, CUstream, CUstreamCaptureStatus};
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr};

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::gpu::driver::cuda;
use crate::plan::SpaceNeed;
use crate::plan::rules::{SPLIT_COUNTERS, SPLIT_PARTIALS_BYTES};

/// The split-row workspace of one [`Gpu`] (see the module docs).
pub(crate) struct SplitWorkspace {
    /// Device addresses of the partial tiles and the counters (owned by `_partials` and `_counters`).
    pub(crate) partials: u64,
    pub(crate) counters: u64,
    /// The sm_90a kernels' two tile-scheduler counters (the tile scheduler, above), past the split counters.
    pub(crate) scheduler: u64,
    /// Whether the device has stream-ordered allocation, which a captured launch's own workspace needs
    /// ([`GraphSpace`]).
    pub(crate) graph_memory: bool,
    state: Mutex<Order>,
    scheduler_owner: Mutex<Owner>,
    _partials: CudaSlice<u8>,
    _counters: CudaSlice<u32>,
}

/// Which stream may use the tile-scheduler counters ([`SplitWorkspace::claim_scheduler`]).
struct Owner {
    /// The stream of the last launch that used them, if any.
    stream: Option<usize>,
    /// Recorded after that launch.
    done: CudaEvent,
    /// Whether `done` was recorded after that launch (a failed record leaves the counters to its stream).
    recorded: bool,
}

/// The tile-scheduler counters claimed for one launch on `stream`: [`SchedulerClaim::launched`] after the launch
/// hands them to that stream. Holds the lock until then, so claims from several threads are ordered.
pub(crate) struct SchedulerClaim<'a> {
    owner: std::sync::MutexGuard<'a, Owner>,
    stream: CUstream,
}

impl SchedulerClaim<'_> {
    /// The launch is queued: the counters belong to its stream until the event recorded now completes.
    pub(crate) fn launched(mut self) {
        self.owner.stream = Some(self.stream as usize);
        // SAFETY: `stream` is a live stream of this context (checked by the caller) and the event is ours.
        self.owner.recorded =
            unsafe { cudarc::driver::result::event::record(self.owner.done.cu_event(), self.stream) }.is_ok();
    }
}

/// What orders split launches on different streams.
struct Order {
    /// Recorded after every split launch.
    done: CudaEvent,
    /// The stream of the last split launch, if any.
    last: Option<usize>,
}

impl SplitWorkspace {
    /// Allocates the partial tiles and the zeroed counters on `stream` and waits for the zeroing (so a launch on
    /// any stream finds zeros). `None` when the GPU cannot spare the memory: launches then keep whole rows.
    pub(crate) fn new(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>) -> Option<SplitWorkspace> {
        let partials = stream.alloc_zeros::<u8>(SPLIT_PARTIALS_BYTES).ok()?;
        let counters = stream.alloc_zeros::<u32>(SPLIT_COUNTERS + 2).ok()?;
        stream.synchronize().ok()?;
        let done = ctx.new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING)).ok()?;
        let scheduler_done = ctx.new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING)).ok()?;
        let pools = ctx.attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
        let (p, c) = {
            let (p, _g) = partials.device_ptr(stream);
            let (c, _h) = counters.device_ptr(stream);
            (p, c)
        };
        Some(SplitWorkspace {
            partials: p,
            counters: c,
            scheduler: c + 4 * SPLIT_COUNTERS as u64,
            graph_memory: pools.is_ok_and(|v| v != 0),
            state: Mutex::new(Order { done, last: None }),
            scheduler_owner: Mutex::new(Owner { stream: None, done: scheduler_done, recorded: true }),
            _partials: partials,
            _counters: counters,
        })
    }

    /// The workspace's two allocations (first byte, bytes): the partial tiles, and the split and scheduler
    /// counters. A launch's C must not overlap them.
    pub(crate) fn ranges(&self) -> [(u64, u128); 2] {
        [(self.partials, SPLIT_PARTIALS_BYTES as u128), (self.counters, 4 * (SPLIT_COUNTERS as u128 + 2))]
    }

    /// Runs `launch` (a split launch on `stream`) ordered after every earlier split launch: a device-side wait
    /// on the previous launch's event when it was on another stream, and this launch's event recorded after it.
    /// The lock is held throughout, so launches from several threads are ordered too.
    pub(crate) fn ordered(&self, stream: CUstream, launch: impl FnOnce() -> Result<()>) -> Result<()> {
        let mut order = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let key = stream as usize;
        if order.last.is_some_and(|s| s != key) {
            // SAFETY: `stream` is a live stream of this context (checked by the caller) and the event is ours.
            unsafe {
                cudarc::driver::result::stream::wait_event(
                    stream,
                    order.done.cu_event(),
                    CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                )
            }
            .map_err(cuda("cuStreamWaitEvent (split-row workspace)"))?;
        }
        launch()?;
        order.last = Some(key);
        // SAFETY: as above.
        unsafe { cudarc::driver::result::event::record(order.done.cu_event(), stream) }
            .map_err(cuda("cuEventRecord (split-row workspace)"))
    }

    /// The tile-scheduler counters for a launch on `stream`, if it can have them without waiting for another
    /// stream: they are free (never used, or the last launch that used them has finished) or `stream` used
    /// them last. `None` otherwise (the launch then takes no counter), so independent streams stay independent.
    /// A launch on the owning stream still waits (on the device) for the event recorded after the last one, a
    /// no-op on the same stream that orders it correctly should a new stream have been given a destroyed
    /// stream's handle. Any failed driver call (e.g. another thread capturing a graph in global mode) means no
    /// counter.
    pub(crate) fn claim_scheduler(&self, stream: CUstream) -> Option<SchedulerClaim<'_>> {
        let owner = self.scheduler_owner.lock().unwrap_or_else(|e| e.into_inner());
        match owner.stream {
            Some(s) if s == stream as usize => {
                // SAFETY: `stream` is a live stream of this context (checked by the caller) and the event ours.
                unsafe {
                    cudarc::driver::result::stream::wait_event(
                        stream,
                        owner.done.cu_event(),
                        CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                    )
                }
                .ok()?;
            }
            Some(_) if !owner.recorded || owner.done.try_is_complete() != Ok(true) => return None,
            Some(_) | None => {}
        }
        Some(SchedulerClaim { owner, stream })
    }
}

impl Drop for SplitWorkspace {
    fn drop(&mut self) {
        // The last split launch may still be running on a caller's stream: its memory is freed after it.
        let order = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if order.last.is_some() {
            let _ = order.done.synchronize();
        }
        let owner = self.scheduler_owner.get_mut().unwrap_or_else(|e| e.into_inner());
        if owner.stream.is_some() {
            let _ = owner.done.synchronize();
        }
    }
}

/// A captured launch's own workspace, in the CUDA graph its stream is being captured into: one stream-ordered
/// allocation (the graph's allocation node), its counters zeroed (a memset node), the launch, then the
/// allocation freed ([`GraphSpace::free`], a free node). The graph owns the memory: every replay of it has its own
/// zeroed counters and partial tiles, ordered with that replay alone, and CUDA may reuse the physical memory
/// wherever lifetimes do not overlap (the launches of one graph in sequence, graphs replayed on one stream). The
/// Gpu's own workspace cannot serve a graph: a replay is not ordered with the launches around it.
pub(crate) struct GraphSpace {
    base: u64,
    /// The partial tiles (16-byte aligned).
    pub(crate) partials: u64,
    /// The split-row or flat-list counters, zeroed.
    pub(crate) counters: u64,
    /// The tile scheduler's two counters (after the others), zeroed when asked for.
    pub(crate) scheduler: u64,
}

impl GraphSpace {
    /// Allocates `need` on `stream` in stream order and zeroes its counters there.
    ///
    /// # Safety
    /// `stream` is a live stream of the current context. (On a stream that is not being captured this is a plain
    /// stream-ordered allocation, as correct, and slower.)
    pub(crate) unsafe fn allocate(stream: CUstream, need: SpaceNeed) -> Result<GraphSpace> {
        const ALIGN: u64 = 256;
        let counters_at = need.partials_bytes.div_ceil(ALIGN) * ALIGN;
        let words = need.counters + if need.scheduler { 2 } else { 0 };
        let bytes = usize::try_from(counters_at + 4 * words.max(1)).map_err(|_| Error::InvalidArgument {
            name: "workspace",
            reason: format!("{counters_at} bytes of partial tiles do not fit this host"),
        })?;
        let failed = |source: cudarc::driver::DriverError| match source.0 {
            cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                Error::OutOfMemory { what: "the workspace of a launch captured into a CUDA graph", bytes }
            }
            _ => Error::Cuda { op: "cuMemAllocAsync (graph workspace)", source },
        };
        // SAFETY: the caller's stream; the allocation is used only by this launch, on this stream, and freed after it.
        let base = unsafe { cudarc::driver::result::malloc_async(stream, bytes) }.map_err(failed)?;
        let counters = base + counters_at;
        // SAFETY: `words` u32 of the allocation just made, in stream order after it.
        let zeroed = unsafe { cudarc::driver::sys::cuMemsetD32Async(counters, 0, words as usize, stream) }.result();
        if let Err(e) = zeroed {
            // SAFETY: allocated above on this stream, not used.
            let _ = unsafe { cudarc::driver::result::free_async(base, stream) };
            return Err(cuda("cuMemsetD32Async (graph workspace)")(e));
        }
        Ok(GraphSpace { base, partials: base, counters, scheduler: counters + 4 * need.counters })
    }

    /// Frees the allocation on `stream`, in stream order after the launch that used it.
    ///
    /// # Safety
    /// `stream` is the stream it was allocated on.
    pub(crate) unsafe fn free(self, stream: CUstream) -> Result<()> {
        // SAFETY: allocated on this stream by `allocate` and freed once (self is consumed).
        unsafe { cudarc::driver::result::free_async(self.base, stream) }
            .map_err(cuda("cuMemFreeAsync (graph workspace)"))
    }
}

/// Whether `stream` is being captured into a CUDA graph (a failed query counts as captured: the launch then makes
/// a captured launch's choices, which are correct on any stream).
pub(crate) fn capturing(stream: CUstream) -> bool {
    // SAFETY: a query of a live stream of this context (checked by the caller).
    match unsafe { cudarc::driver::result::stream::is_capturing(stream) } {
        Ok(status) => status != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE,
        Err(_) => true,
    }
}

/// Whether every node the next launch captured on `stream` will depend on is a kernel node (none counts: the first
/// node of a capture). False when the query fails, and on drivers older than CUDA 12.3 (`driver_version`), which
/// lack `cuStreamGetCaptureInfo_v3`, the only form the bindings offer.
pub(crate) fn follows_kernels(stream: CUstream, driver_version: i32) -> bool {
    use cudarc::driver::sys::{CUgraphNode, CUgraphNodeType};
    if driver_version < 12030 {
        return false;
    }
    let mut status = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut deps: *const CUgraphNode = std::ptr::null();
    let mut count = 0usize;
    // SAFETY: a query of a live stream of this context (checked by the caller); the outputs are valid pointers or
    // null (not wanted), and the dependency array the driver returns stays valid until the next call on the stream.
    let queried = unsafe {
        cudarc::driver::sys::cuStreamGetCaptureInfo_v3(
            stream,
            &mut status,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut deps,
            std::ptr::null_mut(),
            &mut count,
        )
    };
    if queried.result().is_err() || status != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE {
        return false;
    }
    (0..count).all(|i| {
        let mut kind = CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
        // SAFETY: `i` is below the driver's count of the array it returned.
        let node = unsafe { *deps.add(i) };
        // SAFETY: a node of the graph being captured, and a valid output pointer.
        let typed = unsafe { cudarc::driver::sys::cuGraphNodeGetType(node, &mut kind) }.result();
        typed.is_ok() && kind == CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL
    })
}

impl Gpu {
    /// Whether this GPU has its split-row workspace (it has unless the memory could not be allocated when it
    /// opened).
    pub fn has_split_workspace(&self) -> bool {
        self.split.is_some()
    }
}
