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
//! launches around it). It makes the same choices and takes a workspace of its own that the graph holds
//! ([`GraphSpace`]: counters zeroed once and kept by the graph, [`GraphCounters`]; partial tiles between an
//! allocation node and a free node that stay off the stream's chain of nodes, so a programmatic launch keeps its
//! edge to the kernel before it), so a replay gives the bits of the same launch outside the graph. On a
//! device without stream-ordered allocation or a driver older than CUDA 12.3, a captured launch keeps whole rows.
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
//! its own workspace in the graph ([`GraphSpace`]), and so the persistent grid; where the device cannot give it
//! one, one tile per consumer set.

use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{CUevent_flags, CUevent_wait_flags, CUgraph, CUstream, CUstreamCaptureStatus};
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
    /// The counters of captured launches ([`GraphSpace`]), where the device and driver can serve them.
    pub(crate) graph_counters: Option<GraphCounters>,
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
    pub(crate) fn new(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>, driver_version: i32) -> Option<SplitWorkspace> {
        let partials = stream.alloc_zeros::<u8>(SPLIT_PARTIALS_BYTES).ok()?;
        let counters = stream.alloc_zeros::<u32>(SPLIT_COUNTERS + 2).ok()?;
        stream.synchronize().ok()?;
        let done = ctx.new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING)).ok()?;
        let scheduler_done = ctx.new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING)).ok()?;
        let (p, c) = {
            let (p, _g) = partials.device_ptr(stream);
            let (c, _h) = counters.device_ptr(stream);
            (p, c)
        };
        Some(SplitWorkspace {
            partials: p,
            counters: c,
            scheduler: c + 4 * SPLIT_COUNTERS as u64,
            graph_counters: GraphCounters::new(ctx, driver_version),
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
        // The graphs' counters go with the workspace where no graph holds a range of them any more.
        if let Some(pool) = self.graph_counters.as_mut() {
            pool.release();
        }
    }
}

/// A captured launch's own workspace, in the CUDA graph its stream is being captured into. Its counters are a range
/// of [`GraphCounters`], zeroed once and kept by the graph until the graph and every instantiation of it are gone
/// (no memset node: each launch's last CTAs leave the counters at zero for the next replay). Its partial tiles are
/// a graph allocation: an allocation node the kernel depends on and a free node that depends on the kernel
/// ([`GraphSpace::allocate`], [`GraphSpace::free`]). Neither sits on the stream's chain: the allocation node
/// depends on the free node of the launch before the last one captured on the same stream (so CUDA backs the
/// partial tiles of a graph's launches with two buffers' memory, alternating, however many it holds), and the free
/// node is a leaf. So the kernel follows the node before it on the stream directly, and where the plan is
/// programmatic (`Policy::programmatic`) depends on the kernel before it through a programmatic edge: a
/// captured split launch can start before the kernel ahead of it ends, as it does outside a graph, and so can the
/// launch after it. A launch without partial tiles allocates 256 bytes all the same, so the graph holds allocation
/// nodes and CUDA allows it one instantiation at a time: two replays running at once would share the counters.
/// Measured on an H200 (docs/perf-notes.md, "Issue 43 part 3: the graph workspace without its memset node"),
/// around a 8.6 us decode launch in a graph: the memset node cost 1.9-2.0 us, the allocation and free nodes
/// 0.04-0.2 us. The Gpu's own workspace cannot serve a graph: a replay is not ordered with the launches around it.
pub(crate) struct GraphSpace {
    base: u64,
    /// The graph being captured and the capture's id (which [`GraphCounters`] keys the free nodes by).
    graph: CUgraph,
    capture: u64,
    /// The partial tiles (16-byte aligned).
    pub(crate) partials: u64,
    /// The split-row or flat-list counters, zero.
    pub(crate) counters: u64,
    /// The tile scheduler's two counters (after the others), zero.
    pub(crate) scheduler: u64,
}

impl GraphSpace {
    /// Takes `need`'s counters from `pool`, held by the graph `stream` is being captured into, and adds the
    /// allocation node of its partial tiles to that graph, made a dependency of the next node captured on
    /// `stream`. With `programmatic`, the next node's dependencies on kernel nodes become programmatic edges (the
    /// launch that follows is captured without the launch attribute: the edges say it).
    ///
    /// # Safety
    /// `stream` is a live stream of the current context, being captured; with `programmatic`, the next node
    /// captured on it is a kernel that waits for the grids before it (`griddepcontrol.wait`) ahead of every read of
    /// what they may write.
    pub(crate) unsafe fn allocate(
        stream: CUstream,
        need: SpaceNeed,
        pool: &GraphCounters,
        programmatic: bool,
    ) -> Result<GraphSpace> {
        use cudarc::driver::sys::{
            CUDA_MEM_ALLOC_NODE_PARAMS, CUgraphNode, CUmemAllocationHandleType, CUmemAllocationType, CUmemLocation,
            CUmemLocationType, CUstreamUpdateCaptureDependencies_flags,
        };
        let words = need.counters + if need.scheduler { 2 } else { 0 };
        // SAFETY: the caller's live stream of the current context.
        let capture = unsafe { Capture::of(stream) }?;
        // SAFETY: the graph being captured on `stream`, of the current context.
        let counters = unsafe { pool.hold(capture.graph, words.max(1)) }?;
        let bytes = usize::try_from(need.partials_bytes.max(256)).map_err(|_| Error::InvalidArgument {
            name: "workspace",
            reason: format!("{} bytes of partial tiles do not fit this host", need.partials_bytes),
        })?;
        // SAFETY: all-zero plain C data (no pointer is read: win32SecurityAttributes stays null); the fields that
        // matter are set next.
        let mut params: CUDA_MEM_ALLOC_NODE_PARAMS = unsafe { std::mem::zeroed() };
        params.poolProps.allocType = CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        params.poolProps.handleTypes = CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
        params.poolProps.location =
            CUmemLocation { type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: pool.ctx.ordinal() as i32 };
        params.bytesize = bytes;
        let after = pool.reusable(capture.id, stream);
        let mut alloc: CUgraphNode = std::ptr::null_mut();
        // SAFETY: the graph being captured; `after` is a node of it (the free node of an earlier launch of this
        // capture, on this stream) or none; `params` is valid and receives the address.
        let added = unsafe {
            cudarc::driver::sys::cuGraphAddMemAllocNode(
                &mut alloc,
                capture.graph,
                after.as_slice().as_ptr(),
                after.as_slice().len(),
                &mut params,
            )
        };
        added.result().map_err(|source| match source.0 {
            cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                Error::OutOfMemory { what: "the workspace of a launch captured into a CUDA graph", bytes }
            }
            _ => Error::Cuda { op: "cuGraphAddMemAllocNode (graph workspace)", source },
        })?;
        // The next node's dependencies: the stream's, each kernel node's edge made programmatic where asked, and
        // the allocation.
        let (mut nodes, mut edges) = (capture.deps, capture.edges);
        if programmatic {
            for (node, edge) in nodes.iter().zip(edges.iter_mut()) {
                if is_kernel(*node) && edge.type_ == 0 && edge.from_port == 0 {
                    edge.type_ =
                        cudarc::driver::sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8;
                    edge.from_port = cudarc::driver::sys::CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC as u8;
                }
            }
        }
        nodes.push(alloc);
        edges.push(DEFAULT_EDGE);
        let set = CUstreamUpdateCaptureDependencies_flags::CU_STREAM_SET_CAPTURE_DEPENDENCIES as u32;
        // SAFETY: the caller's capturing stream; `nodes` are nodes of its graph with `edges` of equal length.
        let updated = unsafe {
            cudarc::driver::sys::cuStreamUpdateCaptureDependencies_v2(
                stream,
                nodes.as_mut_ptr(),
                edges.as_ptr(),
                nodes.len(),
                set,
            )
        };
        let base = params.dptr;
        if let Err(e) = updated.result() {
            // The allocation is freed in the graph all the same (after nothing but itself), so that a graph the
            // caller keeps holds no allocation left to it.
            let mut free: CUgraphNode = std::ptr::null_mut();
            // SAFETY: the graph and the allocation node just added; its address, freed once.
            let _ = unsafe { cudarc::driver::sys::cuGraphAddMemFreeNode(&mut free, capture.graph, &alloc, 1, base) };
            return Err(cuda("cuStreamUpdateCaptureDependencies (graph workspace)")(e));
        }
        Ok(GraphSpace {
            base,
            graph: capture.graph,
            capture: capture.id,
            partials: base,
            counters,
            scheduler: counters + 4 * need.counters,
        })
    }

    /// Adds the free node of the partial tiles to the graph, after whatever the next node captured on `stream`
    /// would depend on (the launch's kernel), as a leaf: the stream's dependencies stay as they are. `pool`
    /// remembers it for the allocation two launches on.
    ///
    /// # Safety
    /// `stream` is the stream the space was allocated on, still being captured into the same graph.
    pub(crate) unsafe fn free(self, stream: CUstream, pool: &GraphCounters) -> Result<()> {
        use cudarc::driver::sys::CUgraphNode;
        // SAFETY: the caller's live capturing stream.
        let capture = unsafe { Capture::of(stream) }?;
        let mut node: CUgraphNode = std::ptr::null_mut();
        // SAFETY: the graph this space was allocated in (the same capture, asserted below by its id); the
        // dependencies are nodes of it; the address is its allocation node's, freed once (self is consumed).
        let added = if capture.id == self.capture && capture.graph == self.graph {
            unsafe {
                cudarc::driver::sys::cuGraphAddMemFreeNode(
                    &mut node,
                    self.graph,
                    capture.deps.as_ptr(),
                    capture.deps.len(),
                    self.base,
                )
            }
            .result()
            .map_err(cuda("cuGraphAddMemFreeNode (graph workspace)"))
        } else {
            Err(Error::InvalidArgument {
                name: "stream",
                reason: "its capture changed between a launch's workspace allocation and its free".into(),
            })
        };
        added?;
        pool.freed(self.capture, stream, node);
        Ok(())
    }
}

/// An edge's data for a plain, full dependency.
const DEFAULT_EDGE: cudarc::driver::sys::CUgraphEdgeData =
    cudarc::driver::sys::CUgraphEdgeData { from_port: 0, to_port: 0, type_: 0, reserved: [0; 5] };

/// Whether `node` is a kernel node (false when the query fails).
fn is_kernel(node: cudarc::driver::sys::CUgraphNode) -> bool {
    use cudarc::driver::sys::CUgraphNodeType;
    let mut kind = CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
    // SAFETY: a node of a live graph, and a valid output pointer.
    let typed = unsafe { cudarc::driver::sys::cuGraphNodeGetType(node, &mut kind) }.result();
    typed.is_ok() && kind == CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL
}

/// What `cuStreamGetCaptureInfo_v3` says of a stream being captured: its graph, the capture's id, and the nodes
/// (with their edges' data) the next node captured on it would depend on, copied.
struct Capture {
    graph: CUgraph,
    id: u64,
    deps: Vec<cudarc::driver::sys::CUgraphNode>,
    edges: Vec<cudarc::driver::sys::CUgraphEdgeData>,
}

impl Capture {
    /// # Safety
    /// `stream` is a live stream of the current context.
    unsafe fn of(stream: CUstream) -> Result<Capture> {
        use cudarc::driver::sys::{CUgraphEdgeData, CUgraphNode};
        let mut status = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let mut graph: CUgraph = std::ptr::null_mut();
        let mut id = 0u64;
        let mut deps: *const CUgraphNode = std::ptr::null();
        let mut edges: *const CUgraphEdgeData = std::ptr::null();
        let mut count = 0usize;
        // SAFETY: a query of the caller's live stream; every output is a valid pointer. The arrays the driver
        // returns stay valid until the next call on the stream, and are copied before it.
        unsafe {
            cudarc::driver::sys::cuStreamGetCaptureInfo_v3(
                stream,
                &mut status,
                &mut id,
                &mut graph,
                &mut deps,
                &mut edges,
                &mut count,
            )
        }
        .result()
        .map_err(cuda("cuStreamGetCaptureInfo (graph workspace)"))?;
        if status != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE || graph.is_null() {
            return Err(Error::InvalidArgument {
                name: "stream",
                reason: format!(
                    "its capture into a CUDA graph ended or was invalidated while the launch was being planned \
                     ({status:?})"
                ),
            });
        }
        let deps = if count == 0 || deps.is_null() {
            Vec::new()
        } else {
            // SAFETY: the driver's array of `count` nodes, valid until the next call on the stream.
            unsafe { std::slice::from_raw_parts(deps, count) }.to_vec()
        };
        // No edge data means every edge is a plain one.
        let edges = if edges.is_null() {
            vec![DEFAULT_EDGE; deps.len()]
        } else {
            // SAFETY: as above, `count` entries.
            unsafe { std::slice::from_raw_parts(edges, count) }.to_vec()
        };
        Ok(Capture { graph, id, deps, edges })
    }
}

/// The counters of launches captured into CUDA graphs ([`GraphSpace`]): ranges of zeroed 32-bit words carved from
/// slabs of device memory, each range held by the graph it was captured into through a CUDA user object and given
/// back when the graph and every instantiation of it are destroyed (after their last replay has finished, CUDA's
/// rule). The user object's destructor may make no CUDA call: it only puts the range on a free list. A range comes
/// back zero, as every launch leaves its counters (a range whose graph was never replayed is still as it was
/// zeroed). The slabs are zeroed when they are made, on a private stream: the first with the [`Gpu`], later ones
/// while a capture may be running, in the relaxed capture mode (`cuThreadExchangeStreamCaptureMode`) so that a
/// global-mode capture on another stream is not invalidated. They are freed with the Gpu's workspace when no graph
/// holds a range any more; a graph that outlives its Gpu (it cannot be replayed then: the Gpu's kernels are gone)
/// keeps the slabs until the CUDA context goes. What a destructor holds, the free lists, is host memory only: the
/// last reference to anything that makes a CUDA call when dropped stays with the Gpu.
pub(crate) struct GraphCounters {
    ctx: Arc<CudaContext>,
    /// Where slabs are zeroed (non-blocking, never captured).
    zeroing: Arc<CudaStream>,
    slabs: Arc<Mutex<Slabs>>,
    /// The free nodes of the last two captured launches with partial tiles per capture and stream, newest last
    /// (node addresses, 0 for none), for at most [`RECENT_CAPTURES`] pairs of capture and stream: an allocation
    /// node depends on the older one ([`GraphSpace`]). A pair pushed out only costs its next launches the reuse.
    recent: Mutex<Vec<Recent>>,
}

/// The free nodes [`GraphCounters`] remembers for one capture and stream.
struct Recent {
    capture: u64,
    stream: usize,
    frees: [usize; 2],
}

/// How many pairs of capture and stream [`GraphCounters`] remembers free nodes for.
const RECENT_CAPTURES: usize = 64;

/// [`GraphCounters`]' memory.
struct Slabs {
    /// Every slab's first byte (`cuMemAlloc`).
    owned: Vec<u64>,
    /// The newest slab's unused words: `next..end` (byte addresses).
    next: u64,
    end: u64,
    /// Ranges given back, by size class: `free[c]` holds ranges of `2^c` words.
    free: Vec<Vec<u64>>,
}

/// A range held by a graph: what its user object's destructor gives back.
struct Held {
    slabs: Arc<Mutex<Slabs>>,
    at: u64,
    class: usize,
}

/// The words of a new slab, at least: 64 KiB.
const SLAB_WORDS: u64 = 1 << 14;

/// The smallest range: 64 words (256 bytes, so every range stays 256-byte aligned).
const MIN_CLASS: usize = 6;

/// The largest range: 2^32 words (one captured launch never asks for more: `SpaceNeed`'s counters are bounded far
/// below). One free list per size class up to it.
const MAX_CLASS: usize = 32;

/// The user object's destructor: gives the range back (no CUDA call, no blocking but the free list's lock).
unsafe extern "C" fn release_held(data: *mut std::ffi::c_void) {
    // SAFETY: `data` is the Box<Held> leaked by GraphCounters::hold for this user object, destroyed once.
    let held = unsafe { Box::from_raw(data.cast::<Held>()) };
    let mut slabs = held.slabs.lock().unwrap_or_else(|e| e.into_inner());
    slabs.free[held.class].push(held.at);
}

impl GraphCounters {
    /// A pool with its first slab, zeroed; `None` where the device cannot serve it: no stream-ordered allocation
    /// (the partial tiles' allocation nodes), a driver older than CUDA 12.3 (the capture's graph is asked of
    /// `cuStreamGetCaptureInfo_v3`), or no memory to spare. Launches captured there keep whole rows.
    pub(crate) fn new(ctx: &Arc<CudaContext>, driver_version: i32) -> Option<GraphCounters> {
        let pools = ctx.attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
        if !pools.is_ok_and(|v| v != 0) || driver_version < 12030 {
            return None;
        }
        let pool = GraphCounters {
            ctx: ctx.clone(),
            zeroing: ctx.new_stream().ok()?,
            slabs: Arc::new(Mutex::new(Slabs {
                owned: Vec::new(),
                next: 0,
                end: 0,
                free: vec![Vec::new(); MAX_CLASS + 1],
            })),
            recent: Mutex::new(Vec::new()),
        };
        pool.grow(&mut pool.slabs.lock().unwrap_or_else(|e| e.into_inner()), SLAB_WORDS).ok()?;
        Some(pool)
    }

    /// Adds a zeroed slab of at least `words` words and makes it the one ranges are carved from.
    fn grow(&self, slabs: &mut Slabs, words: u64) -> Result<()> {
        use cudarc::driver::sys::CUstreamCaptureMode;
        let words = words.max(SLAB_WORDS);
        let bytes = usize::try_from(4 * words).map_err(|_| Error::InvalidArgument {
            name: "workspace",
            reason: format!("{words} counters do not fit this host"),
        })?;
        // A capture in the global mode on another stream forbids the allocation and the wait below to this
        // thread: relaxed until they are done, then the thread's mode as it was.
        let mut mode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: exchanges this thread's capture mode through a valid pointer.
        unsafe { cudarc::driver::sys::cuThreadExchangeStreamCaptureMode(&mut mode) }
            .result()
            .map_err(cuda("cuThreadExchangeStreamCaptureMode"))?;
        let made = (|| {
            self.ctx.bind_to_thread().map_err(cuda("cuCtxSetCurrent"))?;
            // SAFETY: a plain device allocation of this context, owned by the pool from here.
            let base = unsafe { cudarc::driver::result::malloc_sync(bytes) }.map_err(|source| match source.0 {
                cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                    Error::OutOfMemory { what: "the counters of launches captured into CUDA graphs", bytes }
                }
                _ => Error::Cuda { op: "cuMemAlloc (graph counters)", source },
            })?;
            let zeroed = (|| {
                let stream = self.zeroing.cu_stream();
                // SAFETY: the `bytes` just allocated, zeroed on the pool's own stream, which is then waited for.
                unsafe { cudarc::driver::result::memset_d8_async(base, 0, bytes, stream) }
                    .map_err(cuda("cuMemsetD8Async (graph counters)"))?;
                // SAFETY: the pool's own live stream.
                unsafe { cudarc::driver::result::stream::synchronize(stream) }
                    .map_err(cuda("cuStreamSynchronize (graph counters)"))
            })();
            if let Err(e) = zeroed {
                // SAFETY: allocated above, never handed out.
                let _ = unsafe { cudarc::driver::result::free_sync(base) };
                return Err(e);
            }
            Ok(base)
        })();
        // SAFETY: as above; restores the mode the thread had.
        let restored = unsafe { cudarc::driver::sys::cuThreadExchangeStreamCaptureMode(&mut mode) }.result();
        let base = made?;
        slabs.owned.push(base);
        (slabs.next, slabs.end) = (base, base + 4 * words);
        restored.map_err(cuda("cuThreadExchangeStreamCaptureMode"))
    }

    /// A zeroed range of at least `words` words, held from now on by `graph` (a CUDA user object the graph owns):
    /// given back when the graph and its instantiations are destroyed.
    ///
    /// # Safety
    /// `graph` is a live graph (the one being captured) of the pool's context, current on this thread.
    unsafe fn hold(&self, graph: cudarc::driver::sys::CUgraph, words: u64) -> Result<u64> {
        use cudarc::driver::sys::{CUuserObject, CUuserObject_flags, CUuserObjectRetain_flags};
        if words > 1 << MAX_CLASS {
            return Err(Error::InvalidArgument {
                name: "workspace",
                reason: format!("{words} counters for one captured launch (at most 2^32)"),
            });
        }
        let class = (words.next_power_of_two().trailing_zeros() as usize).max(MIN_CLASS);
        let size = 4u64 << class;
        let at = {
            let mut slabs = self.slabs.lock().unwrap_or_else(|e| e.into_inner());
            match slabs.free.get_mut(class).and_then(Vec::pop) {
                Some(at) => at,
                None => {
                    if slabs.end - slabs.next < size {
                        self.grow(&mut slabs, size / 4)?;
                    }
                    let at = slabs.next;
                    slabs.next += size;
                    at
                }
            }
        };
        let held = Box::into_raw(Box::new(Held { slabs: self.slabs.clone(), at, class }));
        let mut object: CUuserObject = std::ptr::null_mut();
        let flags = CUuserObject_flags::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC as u32;
        // SAFETY: `held` is handed to the user object, whose destructor takes it back once.
        let created =
            unsafe { cudarc::driver::sys::cuUserObjectCreate(&mut object, held.cast(), Some(release_held), 1, flags) };
        if let Err(e) = created.result() {
            // SAFETY: the user object was not made: `held` is still ours, and gives the range back.
            unsafe { release_held(held.cast()) };
            return Err(cuda("cuUserObjectCreate (graph counters)")(e));
        }
        let moved = CUuserObjectRetain_flags::CU_GRAPH_USER_OBJECT_MOVE as u32;
        // SAFETY: the caller's live graph; the reference the user object was made with moves to it.
        let retained = unsafe { cudarc::driver::sys::cuGraphRetainUserObject(graph, object, 1, moved) };
        if let Err(e) = retained.result() {
            // SAFETY: our reference, released once: the destructor gives the range back.
            let _ = unsafe { cudarc::driver::sys::cuUserObjectRelease(object, 1) };
            return Err(cuda("cuGraphRetainUserObject (graph counters)")(e));
        }
        Ok(at)
    }

    /// The free node an allocation node of capture `capture` on `stream` may follow: the one of the launch before
    /// the last on that stream, if known. Following it lets CUDA back both allocations with the same memory, and
    /// costs the launch nothing (that launch had finished before the one ahead of it started).
    fn reusable(&self, capture: u64, stream: CUstream) -> Option<cudarc::driver::sys::CUgraphNode> {
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        let found = recent.iter().find(|r| r.capture == capture && r.stream == stream as usize)?;
        (found.frees[0] != 0).then_some(found.frees[0] as cudarc::driver::sys::CUgraphNode)
    }

    /// Remembers `node`, the free node of a launch captured in `capture` on `stream`.
    fn freed(&self, capture: u64, stream: CUstream, node: cudarc::driver::sys::CUgraphNode) {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        match recent.iter_mut().find(|r| r.capture == capture && r.stream == stream as usize) {
            Some(r) => r.frees = [r.frees[1], node as usize],
            None => {
                if recent.len() == RECENT_CAPTURES {
                    recent.remove(0);
                }
                recent.push(Recent { capture, stream: stream as usize, frees: [0, node as usize] });
            }
        }
    }

    /// Frees the slabs where no graph holds a range of them (no user object's destructor is left to run: none
    /// holds the free lists); else leaves them to the CUDA context.
    fn release(&mut self) {
        let Some(slabs) = Arc::get_mut(&mut self.slabs) else { return };
        let slabs = slabs.get_mut().unwrap_or_else(|e| e.into_inner());
        if self.ctx.bind_to_thread().is_ok() {
            for base in slabs.owned.drain(..) {
                // SAFETY: allocated by `grow`; no graph holds a range of it (the caller's promise).
                let _ = unsafe { cudarc::driver::result::free_sync(base) };
            }
        }
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
    use cudarc::driver::sys::CUgraphNode;
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
    // SAFETY: `i` is below the driver's count of the array it returned.
    (0..count).all(|i| is_kernel(unsafe { *deps.add(i) }))
}

impl Gpu {
    /// Whether this GPU has its split-row workspace (it has unless the memory could not be allocated when it
    /// opened).
    pub fn has_split_workspace(&self) -> bool {
        self.split.is_some()
    }

    /// The counters of launches captured into CUDA graphs: the slabs made so far and the ranges given back by
    /// destroyed graphs and not yet taken again; `None` where captured launches get no workspace (for the tests).
    #[doc(hidden)]
    pub fn graph_counter_stats(&self) -> Option<(usize, usize)> {
        let pool = self.split.as_ref()?.graph_counters.as_ref()?;
        let slabs = pool.slabs.lock().unwrap_or_else(|e| e.into_inner());
        Some((slabs.owned.len(), slabs.free.iter().map(Vec::len).sum()))
    }
}
