//! Measuring one case: its operands and input sets, the contenders timed interleaved, the read floor, the
//! empty launch, the queued and graph-replayed times, and the checks of each output.

use super::*;
use crate::side::{Checked, NO_SET};
use cudarc::driver::{CudaStream, DevicePtrMut};

pub(super) fn is_out_of_memory(e: &DriverError) -> bool {
    e.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY
}

/// Times `cuMemcpyDtoDAsync` of [`COPY_BYTES`] (or 4x L2), halving the size while the two buffers do not fit,
/// down to 2x L2.
pub(super) fn measure_copy(gpu: &Gpu, warmup: usize, iters: usize) -> CopyBandwidth {
    let l2 = gpu.info().l2_bytes;
    let floor = (2 * l2).max(1);
    let mut bytes = COPY_BYTES.max(4 * l2);
    let mut result = CopyBandwidth::default();
    let stream = gpu.stream();
    let alloc = |bytes: u64| -> std::result::Result<(CudaSlice<u8>, CudaSlice<u8>), DriverError> {
        let len = usize::try_from(bytes).unwrap_or(usize::MAX);
        Ok((stream.alloc_zeros::<u8>(len)?, stream.alloc_zeros::<u8>(len)?))
    };
    let (mut src, mut dst) = loop {
        match alloc(bytes) {
            Ok(buffers) => break buffers,
            Err(e) if is_out_of_memory(&e) && bytes / 2 >= floor => bytes /= 2,
            Err(e) => {
                let what = "two buffers (each)".into();
                result.measured.error = Some(Error::Alloc { what, bytes, source: e }.to_string());
                return result;
            }
        }
    };
    result.bytes = bytes;
    // A non-zero source, so that nothing could profit from copying zeros.
    if let Err(e) = poison(gpu, src.as_view_mut()) {
        result.measured.error = Some(e.to_string());
        return result;
    }
    let timer = EventTimer::new(stream);
    let copy = || {
        stream.memcpy_dtod(&src, &mut dst).map_err(|source| sparsek::Error::Cuda { op: "cuMemcpyDtoDAsync", source })
    };
    match timer.time(warmup, iters, copy) {
        Ok(ms) => {
            result.measured.time = Times::from_ms(&ms);
            result.measured.set_gbps(2 * bytes);
        }
        Err(e) => result.measured.error = Some(e.to_string()),
    }
    result
}

/// Times the read floor kernel reading `bytes` (the copy's size; nothing written), each launch between its own pair
/// of events: the read bandwidth.
pub(super) fn measure_read(
    gpu: &Gpu,
    kernel: &Loaded<CudaFunction>,
    bytes: u64,
    warmup: usize,
    iters: usize,
) -> ReadFloor {
    let mut result = ReadFloor { read_bytes: bytes, ctas: floor::ctas(bytes, 0), sets: 1, ..ReadFloor::default() };
    let sets = match loaded(kernel) {
        Ok(f) if bytes > 0 => FloorSets::new(gpu, f.clone(), bytes, 0, 1),
        Ok(_) => Err(Error::Unsupported("the copy was not measured")),
        Err(e) => Err(e),
    };
    let mut sets = match sets {
        Ok(s) => s,
        Err(e) => {
            result.measured.error = Some(e.to_string());
            return result;
        }
    };
    let launch = || sets.queue(gpu, 0).map_err(|source| sparsek::Error::Cuda { op: floor::LAUNCH, source });
    match EventTimer::new(gpu.stream()).time(warmup, iters, launch) {
        Ok(ms) => {
            result.measured.time = Times::from_ms(&ms);
            result.measured.set_gbps(bytes);
        }
        Err(e) => result.measured.error = Some(e.to_string()),
    }
    result
}

/// Loads the empty kernel into the GPU's context.
pub(super) fn load_empty_kernel(gpu: &Gpu) -> Result<CudaFunction> {
    load_kernel(gpu, EMPTY_PTX, EMPTY_KERNEL)
}

/// Times launches of the empty kernel, 1 CTA of 32 threads, each between its own pair of events.
pub(super) fn measure_empty_launch(gpu: &Gpu, warmup: usize, iters: usize) -> EmptyLaunch {
    let mut result = EmptyLaunch {
        kernel: format!("{EMPTY_KERNEL}: a PTX kernel whose body is `ret`, 1 CTA of 32 threads"),
        time: None,
        error: None,
    };
    let func = match load_empty_kernel(gpu) {
        Ok(f) => f,
        Err(e) => {
            result.error = Some(e.to_string());
            return result;
        }
    };
    let launch = || launch_empty(gpu, &func).map_err(|source| sparsek::Error::Cuda { op: EMPTY_LAUNCH, source });
    match EventTimer::new(gpu.stream()).time(warmup, iters, launch) {
        Ok(ms) => result.time = Times::from_ms(&ms),
        Err(e) => result.error = Some(e.to_string()),
    }
    result
}

/// Queues one launch of the empty kernel, 1 CTA of 32 threads, on the GPU's stream.
pub(super) fn launch_empty(gpu: &Gpu, func: &CudaFunction) -> std::result::Result<(), DriverError> {
    let shape = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
    // SAFETY: the kernel takes no parameters and touches no memory; the stream is the Gpu's, in the context the
    // module was loaded into.
    unsafe { gpu.stream().launch_builder(func).launch(shape) }.map(drop)
}

/// The empty kernel as a contender of the queued measurement.
pub(super) struct EmptyKernel(CudaFunction);

impl Contender for EmptyKernel {
    fn launch(&mut self, gpu: &Gpu, _set: usize) -> Result<()> {
        launch_empty(gpu, &self.0).map_err(Error::driver(EMPTY_LAUNCH))
    }

    fn sets(&self) -> usize {
        1
    }
}

/// The empty kernel queued behind the hold ([`queued::measure`]).
pub(super) fn measure_queued_empty_launch(gpu: &Gpu, hold: &Loaded<Hold>) -> Queued {
    match loaded(hold).and_then(|hold| Ok((hold, load_empty_kernel(gpu)?))) {
        Ok((hold, func)) => queued::measure(gpu, hold, &mut EmptyKernel(func), queued::BATCH),
        Err(e) => Queued::failed(e),
    }
}

/// The host operands of one case and their oracle.
pub(super) struct Operands {
    a: Bsr<f16>,
    b: Matrix<f16>,
    /// The oracle's sampled rows of C, with the tolerance of sparsek's f32 output.
    expected: Expected,
}

/// Runs one case: operands and oracle, then each contender set up and checked, then both timed interleaved;
/// then the figures and verdicts.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_case(
    (gpu, programmatic): (&Gpu, Option<&Gpu>),
    libs: Kernels<'_>,
    hold: &Loaded<Hold>,
    cfg: &DecodeConfig,
    iters: usize,
    case: &Case,
    refs: &References,
    tag: &str,
) -> DecodeRecord {
    let mut case = case.clone();
    let seed = case.seed(cfg.seed);
    let mut rec = DecodeRecord::new(&case, seed);
    if let Err(e) = measure((gpu, programmatic), libs, hold, cfg, iters, &mut case, &mut rec, tag) {
        rec.status.error = Some(e.to_string());
    }
    rec.evaluate(&case, refs);
    rec
}

/// cuBLAS and the read floor kernel, each loaded once per run (or why it could not be).
pub(super) type Kernels<'a> = (&'a Result<Cublas>, &'a Loaded<CudaFunction>);

/// Builds the operands of `case`, sets up and checks each contender, and times them with the same-size copy and
/// the read floor; the contenders' failures are recorded in their results, the case's returned. Then sparsek is
/// timed queued ([`queued`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn measure(
    (gpu, programmatic): (&Gpu, Option<&Gpu>),
    (lib, floor_kernel): Kernels<'_>,
    hold: &Loaded<Hold>,
    cfg: &DecodeConfig,
    iters: usize,
    case: &mut Case,
    rec: &mut DecodeRecord,
    tag: &str,
) -> Result<()> {
    let ops = operands(case, cfg, rec.facts.seed, tag)?;
    let (m, n, k) = (ops.a.rows(), ops.b.cols(), ops.a.cols());
    rec.facts.nnzb = ops.a.nnzb();
    rec.bytes = BytesMoved::new(m, n, k, ops.a.block_size(), rec.facts.nnzb);

    let mut sets = Vec::with_capacity(Form::ALL.len());
    for form in Form::ALL {
        eprintln!("{tag}   {}: setting up and checking", form.name());
        let set_bytes = match form {
            Form::Sparsek => rec.bytes.total,
            Form::Cublas => (2 * m * k + 2 * k * n + 4 * m * n) as u64,
        };
        let depth = decode_depth(set_bytes, gpu.info().l2_bytes);
        let result = match (form, lib) {
            (Form::Cublas, Err(why)) => Err(Error::Unavailable { lib: "cuBLAS", reason: why.to_string() }),
            _ => setup(gpu, lib.as_ref().ok(), form, &ops, depth),
        };
        let r = rec.contenders.get_mut(form);
        match result {
            Ok((s, check)) => {
                r.check = Some(check);
                r.sets = s.len();
                r.rotated_bytes = set_bytes * s.len() as u64;
                sets.push((form, s));
            }
            Err(e) => r.error = Some(e.to_string()),
        }
    }
    // The oracle's sampled rows stay for the graph replays' checks (with cuBLAS's tolerance for cuBLAS's); A and B
    // on the host go.
    let cublas_expected = crate::side::cublas_expected(&ops.expected, &ops.a, &ops.b);
    let Operands { expected, .. } = ops;
    if sets.is_empty() {
        return Ok(());
    }
    let copy_bytes = rec.bytes.total.div_ceil(2).next_multiple_of(16).max(16);
    rec.same_size_copy.bytes = copy_bytes;
    let mut copy = match CopySets::new(gpu, copy_bytes, decode_depth(2 * copy_bytes, gpu.info().l2_bytes)) {
        Ok(c) => {
            rec.same_size_copy.sets = c.pairs.len();
            Some(c)
        }
        Err(e) => {
            rec.same_size_copy.measured.error = Some(e.to_string());
            None
        }
    };

    let (floor_read, floor_write) = (rec.bytes.total - rec.bytes.c, rec.bytes.c);
    rec.read_floor.read_bytes = floor_read.next_multiple_of(16);
    rec.read_floor.write_bytes = floor_write.next_multiple_of(16);
    rec.read_floor.ctas = floor::ctas(floor_read, floor_write);
    let depth = decode_depth(floor_read + floor_write, gpu.info().l2_bytes);
    let mut floor =
        match loaded(floor_kernel).and_then(|f| FloorSets::new(gpu, f.clone(), floor_read, floor_write, depth)) {
            Ok(f) => {
                rec.read_floor.sets = f.sets();
                Some(f)
            }
            Err(e) => {
                rec.read_floor.measured.error = Some(e.to_string());
                None
            }
        };

    eprintln!("{tag}   timing, interleaved");
    let mut timing = time_with_references(gpu, cfg.warmup, iters, &mut sets, copy.as_mut(), floor.as_mut());
    // The copy and the read floor have no output to check and must not fail the case: when one's own launch
    // failed, its error is recorded and the rest are timed again without it.
    while timing.is_err() {
        if let Some(e) = copy.as_mut().and_then(|c| c.failure.take()) {
            rec.same_size_copy.measured.error = Some(format!("timing: {e}"));
            eprintln!("{tag}   same-size copy failed ({e}); timing again without it");
            copy = None;
        } else if let Some(e) = floor.as_mut().and_then(|f| f.failure.take()) {
            rec.read_floor.measured.error = Some(format!("timing: {e}"));
            eprintln!("{tag}   read floor failed ({e}); timing again without it");
            floor = None;
        } else {
            break;
        }
        timing = time_with_references(gpu, cfg.warmup, iters, &mut sets, copy.as_mut(), floor.as_mut());
    }
    let (items, times, clock) = timing.map_err(Error::step("timing"))?;
    rec.status.sm_clock_mhz = clock;
    for (item, t) in items.into_iter().zip(&times) {
        match item {
            Item::Contender(form) => rec.contenders.get_mut(form).time = Times::from_ms(t),
            Item::SameSizeCopy => rec.same_size_copy.measured.time = Times::from_ms(t),
            Item::ReadFloor => rec.read_floor.measured.time = Times::from_ms(t),
        }
    }
    // The kernel times: each contender queued behind the hold ([`queued`]).
    let queued_on = |c: &mut dyn Contender| match loaded(hold) {
        Ok(h) => queued::measure(gpu, h, c, queued::BATCH),
        Err(e) => Queued::failed(e),
    };
    if let Some((_, s)) = sets.iter_mut().find(|(f, _)| *f == Form::Sparsek) {
        eprintln!("{tag}   timing sparsek queued ({} launches per batch)", queued::BATCH);
        rec.sparsek_queued = queued_on(s);
        if let Some(pg) = programmatic {
            eprintln!("{tag}   timing sparsek queued, programmatic launches");
            rec.sparsek_queued_programmatic = Some(match loaded(hold) {
                Ok(h) => queued_programmatic(gpu, pg, h, s),
                Err(e) => Queued::failed(e),
            });
        }
    }
    if let Some(f) = floor.as_mut() {
        eprintln!("{tag}   timing the read floor queued ({} launches per batch)", queued::BATCH);
        rec.read_floor_queued = queued_on(f);
    }
    if let Some((_, s)) = sets.iter_mut().find(|(f, _)| *f == Form::Cublas) {
        eprintln!("{tag}   timing cuBLAS queued ({} launches per batch)", queued::BATCH);
        rec.cublas_queued = queued_on(s);
    }
    // The graph times: each contender replayed from a CUDA graph of its launches over its rotated sets.
    if let Some((_, s)) = sets.iter_mut().find(|(f, _)| *f == Form::Sparsek) {
        eprintln!("{tag}   timing sparsek replayed from a CUDA graph ({} launches)", queued::BATCH);
        rec.sparsek_graph = Some(graph_replayed(gpu, gpu, s, &expected));
        if let Some(pg) = programmatic {
            eprintln!("{tag}   timing sparsek replayed from a CUDA graph, programmatic launches");
            rec.sparsek_graph_programmatic = Some(graph_replayed(gpu, pg, s, &expected));
        }
    }
    if let Some(f) = floor.as_ref() {
        eprintln!("{tag}   timing the read floor replayed from a CUDA graph ({} launches)", queued::BATCH);
        rec.read_floor_graph = Some(floor_graph(gpu, f));
    }
    if let Some((_, s)) = sets.iter_mut().find(|(f, _)| *f == Form::Cublas) {
        eprintln!("{tag}   timing cuBLAS replayed from a CUDA graph ({} launches)", queued::BATCH);
        rec.cublas_graph = Some(cublas_graph(gpu, s, &cublas_expected));
    }
    Ok(())
}

/// Input sets for one contender (or the copy, or the read floor) whose one set moves `set_bytes`: as
/// [`rotation_depth`] (together at least 2x L2), and at least [`MIN_SETS`] whatever their size (issue 43: at least 4
/// rotating copies of the weights).
pub fn decode_depth(set_bytes: u64, l2_bytes: u64) -> usize {
    rotation_depth(set_bytes, l2_bytes).max(MIN_SETS)
}

/// The graph method shared by the three contenders: on `stream` (a new stream, not the GPU's), captures
/// [`queued::BATCH`] launches in global mode (as `torch.cuda.graph` captures), `capture(i)` queuing launch `i` (on
/// the contender's input set `i` modulo its sets), instantiates the graph, replays it once untimed and then
/// [`queued::REPS`] times, each replay between its own pair of events on `stream`: per replay, its time over the
/// batch (ms per launch). The GPU's stream must be idle and every buffer the launches use ready before the call.
pub(super) fn graph_times(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    mut capture: impl FnMut(usize) -> Result<()>,
) -> Result<Vec<f32>> {
    use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
    let batch = queued::BATCH;
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
        .map_err(Error::driver("cuStreamBeginCapture"))?;
    let mut captured = Ok(());
    for i in 0..batch {
        if let Err(e) = capture(i) {
            captured = Err(Error::step("launch during capture")(e));
            break;
        }
    }
    // Ends the capture whatever happened, so that the stream leaves capture mode.
    let graph = stream.end_capture(CUgraphInstantiate_flags(0));
    captured?;
    let graph = graph.map_err(Error::driver("cuStreamEndCapture"))?.ok_or(Error::Unsupported("an empty graph"))?;
    let replay = || -> Result<Vec<f32>> {
        graph.launch().map_err(Error::driver("cuGraphLaunch"))?;
        let ctx = gpu.context();
        let mut ms = Vec::with_capacity(queued::REPS);
        for _ in 0..queued::REPS {
            let event = || ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(Error::driver("cuEventCreate"));
            let (start, end) = (event()?, event()?);
            start.record(stream).map_err(Error::driver("cuEventRecord"))?;
            graph.launch().map_err(Error::driver("cuGraphLaunch"))?;
            end.record(stream).map_err(Error::driver("cuEventRecord"))?;
            end.synchronize().map_err(Error::driver("cuEventSynchronize"))?;
            ms.push(start.elapsed_ms(&end).map_err(Error::driver("cuEventElapsedTime"))? / batch as f32);
        }
        Ok(ms)
    };
    let ms = replay();
    // Whatever happened, nothing of the graph runs past this point (the buffers may go next).
    let synced = stream.synchronize().map_err(Error::driver("cuStreamSynchronize"));
    let ms = ms?;
    synced?;
    Ok(ms)
}

/// The read floor's `floor` replayed from a CUDA graph ([`graph_times`]): [`queued::BATCH`] launches over its
/// rotated pairs in turn. It has no output to check (as per event and queued).
pub(super) fn floor_graph(gpu: &Gpu, floor: &FloorSets) -> Queued {
    let run = || -> Result<Vec<f32>> {
        let addresses = floor.addresses(gpu);
        gpu.synchronize()?;
        let stream = gpu.new_stream()?;
        let count = addresses.len();
        if count == 0 {
            return Err(NO_SET);
        }
        graph_times(gpu, &stream, |i| {
            // SAFETY: addresses of `floor`'s pairs, alive until this function returns, used by nothing else
            // meanwhile (the GPU's stream is idle); `graph_times` synchronises the stream before returning.
            unsafe { floor.queue_raw(&stream, addresses[i % count]) }.map_err(Error::driver(floor::LAUNCH))
        })
    };
    graph_result(run())
}

/// cuBLAS's `sets` replayed from a CUDA graph ([`graph_times`]): [`queued::BATCH`] `cublasGemmEx` calls over the
/// sets in turn, captured with the handle bound to the capture stream and given a workspace of its own
/// ([`cublas::GRAPH_WORKSPACE_BYTES`], so that no capture allocates), then bound back to the GPU's stream. C of
/// set 0 is poisoned first and checked against the oracle (`expected`, with cuBLAS's tolerance) after the replays.
pub(super) fn cublas_graph(gpu: &Gpu, sets: &mut Sets<'_>, expected: &Expected) -> Queued {
    let mut run = || -> Result<Vec<f32>> {
        let Sets::Cublas(own) = &mut *sets else {
            return Err(Error::Unsupported("a graph of cuBLAS's launches only"));
        };
        poison(gpu, own.output().ok_or(NO_SET)?.as_view_mut())?;
        let (lib, shape) = (own.lib(), own.shape());
        let addresses = own.addresses(gpu);
        let count = addresses.len();
        if count == 0 {
            return Err(NO_SET);
        }
        let bytes = cublas::GRAPH_WORKSPACE_BYTES;
        let mut workspace = gpu.stream().alloc_zeros::<u8>(bytes).map_err(|source| Error::Alloc {
            what: "cuBLAS's graph workspace".into(),
            bytes: bytes as u64,
            source,
        })?;
        let ws = workspace.device_ptr_mut(gpu.stream()).0;
        gpu.synchronize()?;
        let stream = gpu.new_stream()?;
        // SAFETY: the capture stream and the workspace are of this context and live until the handle is bound
        // back to the GPU's stream below, after `graph_times` has synchronised the capture stream.
        let bound = unsafe { lib.bind(stream.cu_stream(), Some((ws, bytes))) };
        let ms = bound.and_then(|()| {
            graph_times(gpu, &stream, |i| {
                let [a, b, c] = addresses[i % count];
                // SAFETY: addresses of the sets' live matrices (row-major, their leading dimensions, as uploaded
                // for this shape), used by nothing else until the replays end.
                unsafe { lib.gemm_raw(shape, a, b, c) }
            })
        });
        // Back on the GPU's stream with cuBLAS's own workspace pool, as `Cublas::new` left it, whatever happened
        // (the capture stream is idle: `graph_times` synchronised it, and a failed bind queued nothing).
        let _ = stream.synchronize();
        // SAFETY: the GPU's stream, live as long as the handle.
        let rebound = unsafe { lib.bind(gpu.stream().cu_stream(), None) };
        drop(workspace);
        let ms = ms?;
        rebound?;
        let after = own.output().ok_or(NO_SET)?.to_host()?;
        let report = expected.check(&after);
        if !report.passed() {
            return Err(Error::CheckFailed { what: "the graph's output", report: Box::new(report) });
        }
        Ok(ms)
    };
    graph_result(run())
}

/// Per-launch times of a graph (or why it failed) as a [`Queued`] result of [`queued::BATCH`] launches.
fn graph_result(ms: Result<Vec<f32>>) -> Queued {
    match ms {
        Ok(ms) => Queued { batch: queued::BATCH, time: Times::from_ms(&ms), hold_us: None, error: None },
        Err(e) => Queued::failed(e),
    }
}

/// sparsek's `sets` replayed from a CUDA graph through `launcher` (`gpu` itself, or a `Gpu` on its context with
/// programmatic launches): [`queued::BATCH`] launches (`Gpu::spmm_raw` on the sets in turn) captured once on a new
/// stream in global mode (as `torch.cuda.graph` captures), the graph replayed once untimed and then
/// [`queued::REPS`] times, each between its own pair of events: per launch, the graph's time over the batch (what
/// a decode step replayed from a graph spends per product: `torch.compile(mode="reduce-overhead")`). A captured
/// launch makes the plain launches' choices on a workspace of its own (and keeps whole rows where the device cannot
/// give it one), so its bits may differ from the plain launches': C of set 0 is poisoned first and checked against
/// the oracle's sampled rows (`expected`) after the replays.
pub(super) fn graph_replayed(gpu: &Gpu, launcher: &Gpu, sets: &mut Sets<'_>, expected: &Expected) -> Queued {
    let mut run = || -> Result<Vec<f32>> {
        poison(gpu, sets.output().ok_or(NO_SET)?.as_view_mut())?;
        gpu.synchronize()?;
        let Sets::Sparsek(own) = &mut *sets else {
            return Err(Error::Unsupported("a graph of sparsek's launches only"));
        };
        let stream = launcher.new_stream()?;
        // The views are made before the capture: each records an event on its buffer's stream.
        let mut views: Vec<_> = own.iter_mut().map(|(a, b, c)| (a.view(), b.view(), c.view_mut())).collect();
        let count = views.len().max(1);
        let ms = graph_times(gpu, &stream, |i| {
            let (a, b, c) = &mut views[i % count];
            // SAFETY: views of live buffers of this context, not used by other work while the graph runs (the
            // Gpu's stream was synchronised above, and nothing else is queued until the replays end).
            Ok(unsafe { launcher.spmm_raw(stream.cu_stream(), a, b, c, None, Epilogue::default()) }?)
        })?;
        drop(views);
        let after = sets.output().ok_or(NO_SET)?.to_host()?;
        let report = expected.check(&after);
        if !report.passed() {
            return Err(Error::CheckFailed { what: "the graph's output", report: Box::new(report) });
        }
        Ok(ms)
    };
    graph_result(run())
}

/// Whether two outputs of the same shape hold the same bits in every element (their padding aside).
pub(super) fn same_bits(x: &Matrix<f32>, y: &Matrix<f32>) -> bool {
    (0..x.rows()).all(|r| x.row(r).iter().zip(y.row(r)).all(|(p, q)| p.to_bits() == q.to_bits()))
}

/// sparsek's `sets` queued behind the hold through `programmatic`, a `Gpu` on the same context
/// (`Gpu::from_context`) whose launches are programmatic. Checked: C of set 0 (what the plain launches left,
/// deterministic) is poisoned first and must have the same bits in every element after the batches.
pub(super) fn queued_programmatic(gpu: &Gpu, programmatic: &Gpu, hold: &Hold, sets: &mut Sets<'_>) -> Queued {
    let output = |sets: &mut Sets<'_>| -> Result<Matrix<f32>> { Ok(sets.output().ok_or(NO_SET)?.to_host()?) };
    let before = match output(sets) {
        Ok(c) => c,
        Err(e) => return Queued::failed(e),
    };
    if let Err(e) = sets.output().ok_or(NO_SET).and_then(|c| poison(gpu, c.as_view_mut())) {
        return Queued::failed(e);
    }
    let q = queued::measure(programmatic, hold, sets, queued::BATCH);
    if q.error.is_some() {
        return q;
    }
    match output(sets) {
        Ok(after) if same_bits(&after, &before) => q,
        Ok(_) => Queued::failed("the programmatic launches' output differs from the plain launches'"),
        Err(e) => Queued::failed(e),
    }
}

/// One item of the interleaved loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Item {
    Contender(Form),
    SameSizeCopy,
    ReadFloor,
}

/// What [`time_with_references`] timed, in order, each one's times, and the SM clock.
pub(super) type Timed = (Vec<Item>, Vec<Vec<f32>>, Option<u32>);

/// Times the contenders' `sets` and, when given, the same-size copy and the read floor, interleaved
/// ([`time_interleaved`]). The copy goes right after sparsek: what it leaves dirty in L2 (up to half its bytes) is
/// written back during the next launch, which should be cuBLAS's long one, not sparsek's (on an H200, sparsek
/// measured 8-14% slower at 8192^2 and 16384^2 with the copy just before it than in the run before without the
/// copy). The read floor goes last, so that sparsek follows it: each then finds in L2 the other's dirty C, of
/// the same size.
pub(super) fn time_with_references(
    gpu: &Gpu,
    warmup: usize,
    iters: usize,
    sets: &mut [(Form, Sets<'_>)],
    copy: Option<&mut CopySets>,
    floor: Option<&mut FloorSets>,
) -> Result<Timed> {
    let (mut items, mut timed): (Vec<Item>, Vec<&mut dyn Contender>) =
        sets.iter_mut().map(|(f, s)| (Item::Contender(*f), s as &mut dyn Contender)).unzip();
    if let Some(c) = copy {
        let at = items.iter().position(|f| *f == Item::Contender(Form::Sparsek)).map_or(0, |i| i + 1);
        items.insert(at, Item::SameSizeCopy);
        timed.insert(at, c);
    }
    if let Some(f) = floor {
        items.push(Item::ReadFloor);
        timed.push(f);
    }
    let (times, clock) = time_interleaved(gpu, &mut timed, warmup, iters)?;
    Ok((items, times, clock))
}

/// The same-size copy's rotated (source, destination) pairs; sources hold non-zero bytes.
pub(super) struct CopySets {
    pairs: Vec<(CudaSlice<u8>, CudaSlice<u8>)>,
    /// Why its last launch failed, so that a failed timing can be told apart from the contenders' failures.
    failure: Option<String>,
}

impl CopySets {
    /// `depth` pairs of `bytes` each (at least one), or why they could not be allocated.
    fn new(gpu: &Gpu, bytes: u64, depth: usize) -> Result<CopySets> {
        let len = Error::fit::<usize>("the copy's bytes", bytes, "this host's usize")?;
        let stream = gpu.stream();
        let mut pairs = Vec::with_capacity(depth.max(1));
        for _ in 0..depth.max(1) {
            let alloc = |what: &str| {
                let what = format!("the copy's {what}");
                stream.alloc_zeros::<u8>(len).map_err(|source| Error::Alloc { what, bytes, source })
            };
            let (mut src, dst) = (alloc("source")?, alloc("destination")?);
            poison(gpu, src.as_view_mut())?;
            pairs.push((src, dst));
        }
        Ok(CopySets { pairs, failure: None })
    }
}

impl Contender for CopySets {
    /// Queues the copy of pair `set` on the GPU's stream.
    fn launch(&mut self, gpu: &Gpu, set: usize) -> Result<()> {
        let (src, dst) = &mut self.pairs[set];
        let r = gpu.stream().memcpy_dtod(src, dst).map_err(Error::driver("cuMemcpyDtoDAsync"));
        if let Err(e) = &r {
            self.failure = Some(e.to_string());
        }
        r
    }

    fn sets(&self) -> usize {
        self.pairs.len().max(1)
    }
}

/// A and B ([`Case::operands`]) and the oracle on the sampled rows of C.
pub(super) fn operands(case: &mut Case, cfg: &DecodeConfig, seed: u64, tag: &str) -> Result<Operands> {
    let (a, b, _, expected) = crate::side::generated_operands(case, cfg, seed, tag, "--decode")?;
    Ok(Operands { a, b, expected })
}

/// One contender's device operands: input sets rotated per launch (C of set 0 is the one checked).
pub(super) enum Sets<'l> {
    Sparsek(Vec<(DeviceBsr<f16>, DeviceMatrix<f16>, DeviceMatrix<f32>)>),
    Cublas(crate::side::CublasSets<'l>),
}

impl Contender for Sets<'_> {
    /// Queues one product on input set `set` on the GPU's stream.
    fn launch(&mut self, gpu: &Gpu, set: usize) -> Result<()> {
        match self {
            Sets::Sparsek(sets) => {
                let (a, b, c) = &mut sets[set];
                Ok(gpu.spmm(a, b, c, Epilogue::default())?)
            }
            Sets::Cublas(c) => c.launch(gpu, set),
        }
    }

    fn sets(&self) -> usize {
        self.len().max(1)
    }
}

impl Sets<'_> {
    fn len(&self) -> usize {
        match self {
            Sets::Sparsek(s) => s.len(),
            Sets::Cublas(c) => c.len(),
        }
    }
}

impl Checked for Sets<'_> {
    fn output(&mut self) -> Option<&mut DeviceMatrix<f32>> {
        match self {
            Sets::Sparsek(s) => s.first_mut().map(|t| &mut t.2),
            Sets::Cublas(c) => c.output(),
        }
    }
}

/// Uploads `depth` input sets of `form`, poisons C of set 0, launches on it and checks the output against the
/// oracle.
pub(super) fn setup<'l>(
    gpu: &Gpu,
    lib: Option<&'l Cublas>,
    form: Form,
    ops: &Operands,
    depth: usize,
) -> Result<(Sets<'l>, Check)> {
    let (a, b) = (&ops.a, &ops.b);
    let (m, n) = (a.rows(), b.cols());
    let mut sets = match form {
        Form::Sparsek => Sets::Sparsek(
            (0..depth)
                .map(|_| Ok((gpu.upload(a)?, gpu.upload_matrix(b)?, gpu.zeros(m, n)?)))
                .collect::<sparsek::Result<_>>()?,
        ),
        Form::Cublas => {
            let lib = lib.ok_or(Error::Unsupported("cuBLAS unavailable"))?;
            Sets::Cublas(crate::side::CublasSets::upload(gpu, lib, a, b, depth)?)
        }
    };
    let host = sets.first_output(gpu)?;
    Ok((sets, Check::from(&check_output(form, ops, &host))))
}

/// Compares `form`'s output with the oracle.
pub(super) fn check_output(form: Form, ops: &Operands, host: &Matrix<f32>) -> CheckReport {
    match form {
        Form::Sparsek => ops.expected.check(host),
        Form::Cublas => crate::side::check_cublas(&ops.expected, &ops.a, &ops.b, host),
    }
}
