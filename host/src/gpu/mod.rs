//! The GPU backend: a context with the embedded PTX loaded once, device buffers, and one typed, validated
//! launcher per kernel.
//!
//! Layers: cudarc's driver calls return `Result`s that are mapped to [`Error`] here; the typed API
//! ([`Gpu::upload`], [`Gpu::spmm`], ...) validates everything on the host first; `unsafe` appears only inside the
//! launchers, each with a `// SAFETY:` comment saying which checks make the launch sound.

mod buffers;
mod spmm;

use std::sync::Arc;

use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute, CUresult};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream, DriverError};

pub use buffers::{DeviceBsr, DeviceElement, DeviceMatrix, OutputElement};

use crate::error::{Error, Result};

/// Index math and kernel configurations shared with the kernels (a generated copy of kernels-gpu/src/layout.rs).
#[path = "../../ptx/layout.rs"]
#[allow(missing_docs, dead_code)]
pub mod layout;

/// The portable PTX module (sm_80 PTX, JIT-compiled by the driver for any sm_80+ GPU), built by
/// `cargo xtask build-ptx` and committed.
pub const PTX_SM80: &str = include_str!("../../ptx/sparsek_sm80.ptx");
const PTX_SM80_NAME: &str = "sparsek_sm80";

/// Static facts about the GPU, read once when the [`Gpu`] is created.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// CUDA device ordinal.
    pub ordinal: usize,
    /// Marketing name, e.g. "NVIDIA H100 80GB HBM3".
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Driver's CUDA version, e.g. 13000 for 13.0.
    pub driver_version: i32,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// L2 cache size in bytes.
    pub l2_bytes: u64,
    /// Shared memory a block may opt in to, in bytes.
    pub smem_per_block_optin: u32,
    /// Shared memory per SM, in bytes.
    pub smem_per_sm: u32,
    /// Global memory, in bytes.
    pub total_mem: u64,
    /// Peak SM clock in kHz as the driver reports it.
    pub sm_clock_khz: u32,
}

impl DeviceInfo {
    /// "13.0" style driver version.
    pub fn driver_version_string(&self) -> String {
        format!("{}.{}", self.driver_version / 1000, (self.driver_version % 1000) / 10)
    }
}

/// One loaded kernel with its launch shape.
#[derive(Clone, Debug)]
pub(crate) struct Kernel {
    pub(crate) name: String,
    pub(crate) func: CudaFunction,
    pub(crate) config: layout::KernelConfig,
    /// Element type of C the kernel writes ("f32" or "f16").
    pub(crate) out: &'static str,
    /// CTAs of this kernel resident on one SM (occupancy API), for sizing the rasterization groups.
    pub(crate) ctas_per_sm: u32,
}

/// A kernel from an extra PTX module ([`Gpu::load_variants`]), launched with [`Gpu::spmm_variant`].
#[derive(Clone, Debug)]
pub struct KernelVariant(pub(crate) Kernel);

impl KernelVariant {
    /// Entry point name.
    pub fn name(&self) -> &str {
        &self.0.name
    }
    /// Its tile configuration.
    pub fn config(&self) -> layout::KernelConfig {
        self.0.config
    }
    /// Registers per thread, as the driver reports them.
    pub fn registers(&self) -> Result<i32> {
        self.0.func.num_regs().map_err(cuda("cuFuncGetAttribute"))
    }
    /// CTAs of this kernel that fit on one SM.
    pub fn ctas_per_sm(&self) -> u32 {
        self.0.ctas_per_sm
    }
}

/// What the driver reports for one kernel (`sparsek info`).
#[derive(Clone, Debug)]
pub struct KernelReport {
    /// Entry point name in the PTX.
    pub name: String,
    /// Block size of A the kernel handles.
    pub bs: u32,
    /// Threads per CTA.
    pub threads: u32,
    /// Registers per thread (driver's figure, after its JIT compile).
    pub registers: i32,
    /// Static shared memory per CTA in bytes.
    pub static_smem: i32,
    /// Dynamic shared memory per CTA in bytes (the launch's).
    pub dynamic_smem: u32,
    /// Local memory per thread in bytes (0 for a good kernel).
    pub local_bytes: i32,
    /// CTAs that fit on one SM at once.
    pub ctas_per_sm: u32,
}

/// A GPU ready to run sparsek's kernels: a CUDA context, a default stream, and the PTX module loaded once with
/// every kernel function looked up and configured.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    _module: Arc<CudaModule>,
    kernels: Vec<Kernel>,
    info: DeviceInfo,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu").field("info", &self.info).finish_non_exhaustive()
    }
}

/// Maps a driver error of operation `op` to [`Error`].
pub(crate) fn cuda(op: &'static str) -> impl FnOnce(DriverError) -> Error {
    move |source| Error::Cuda { op, source }
}

/// Maps an allocation failure to [`Error::OutOfMemory`], anything else to [`Error::Cuda`].
pub(crate) fn alloc_err(what: &'static str, bytes: usize) -> impl FnOnce(DriverError) -> Error {
    move |source| {
        if source.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            Error::OutOfMemory { what, bytes }
        } else {
            Error::Cuda { op: "cuMemAlloc", source }
        }
    }
}

/// Whether a CUDA driver library can be loaded on this machine (no GPU needed to answer).
pub fn driver_present() -> bool {
    // SAFETY: only tries to open the shared library by name.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Number of CUDA devices, or the reason there are none.
pub fn device_count() -> Result<usize> {
    if !driver_present() {
        return Err(Error::NoCudaDriver("libcuda.so could not be loaded (is the NVIDIA driver installed?)".into()));
    }
    guard(|| {
        cudarc::driver::result::init().map_err(cuda("cuInit"))?;
        CudaContext::device_count().map(|n| n as usize).map_err(cuda("cuDeviceGetCount"))
    })
}

/// Runs `f`, turning a panic inside cudarc (it panics when a driver symbol is missing, e.g. a driver too old for
/// the CUDA version it was built for) into [`Error::NoCudaDriver`].
fn guard<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic in the CUDA bindings".into());
            Err(Error::NoCudaDriver(format!("the CUDA driver is unusable: {msg}")))
        }
    }
}

impl Gpu {
    /// Opens GPU `ordinal`: creates the context, checks the compute capability (8.0 or newer), loads the PTX
    /// module once and looks up every kernel.
    ///
    /// Errors: [`Error::NoCudaDriver`] without a usable driver, [`Error::NoDevice`] for a missing ordinal,
    /// [`Error::UnsupportedArch`] below sm_80, [`Error::PtxLoad`] with the driver's message if the module is
    /// refused (for example by a driver older than the PTX ISA 8.0 the module uses: CUDA 12.0 or newer is needed).
    pub fn new(ordinal: usize) -> Result<Self> {
        let count = device_count()?;
        if ordinal >= count {
            return Err(Error::NoDevice { ordinal, count });
        }
        guard(|| Self::open(ordinal))
    }

    fn open(ordinal: usize) -> Result<Self> {
        let ctx = CudaContext::new(ordinal).map_err(cuda("cuDevicePrimaryCtxRetain"))?;
        let info = read_info(&ctx, ordinal)?;
        let (major, minor) = info.compute_capability;
        if major < 8 {
            return Err(Error::UnsupportedArch { name: info.name.clone(), major, minor });
        }
        let module = ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(PTX_SM80))
            .map_err(|e| Error::PtxLoad { module: PTX_SM80_NAME, message: describe(&e) })?;
        let entries: Vec<(String, layout::KernelConfig, &'static str)> = layout::CONFIGS
            .iter()
            .flat_map(|&config| ["f32", "f16"].map(|out| (kernel_name(config.bs, out), config, out)))
            .collect();
        let kernels = load_kernels(&module, PTX_SM80_NAME, &entries, &info)?;
        let stream = ctx.default_stream();
        Ok(Gpu { ctx, stream, _module: module, kernels, info })
    }

    /// Facts about the device.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The CUDA context (for interop with other cudarc code).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The stream that [`Gpu::spmm`], uploads and downloads use by default.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// A new stream on this GPU, for [`Gpu::spmm_on`].
    pub fn new_stream(&self) -> Result<Arc<CudaStream>> {
        self.ctx.new_stream().map_err(cuda("cuStreamCreate"))
    }

    /// Waits until all work on the default stream is done.
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().map_err(cuda("cuStreamSynchronize"))
    }

    pub(crate) fn kernel(&self, bs: u32, out: &str) -> Option<&Kernel> {
        self.kernels.iter().find(|k| k.config.bs == bs && k.out == out)
    }

    /// Registers, shared memory and occupancy of every kernel, as the driver reports them.
    pub fn kernel_reports(&self) -> Result<Vec<KernelReport>> {
        self.kernels
            .iter()
            .map(|k| {
                let attr = |a| k.func.get_attribute(a).map_err(cuda("cuFuncGetAttribute"));
                let threads = k.config.threads();
                let dynamic_smem = k.config.smem_bytes();
                Ok(KernelReport {
                    name: k.name.clone(),
                    bs: k.config.bs,
                    threads,
                    registers: attr(CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
                    static_smem: attr(CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?,
                    local_bytes: attr(CUfunction_attribute::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?,
                    dynamic_smem,
                    ctas_per_sm: k.ctas_per_sm,
                })
            })
            .collect()
    }
}

/// Looks up each entry point of `module` and raises its dynamic shared memory limit to its configuration's.
fn load_kernels(
    module: &Arc<CudaModule>,
    module_name: &'static str,
    entries: &[(String, layout::KernelConfig, &'static str)],
    info: &DeviceInfo,
) -> Result<Vec<Kernel>> {
    entries
        .iter()
        .map(|(name, config, out)| {
            let func = module
                .load_function(name)
                .map_err(|e| Error::PtxLoad { module: module_name, message: format!("{name}: {}", describe(&e)) })?;
            let smem = config.smem_bytes();
            if smem > info.smem_per_block_optin {
                return Err(Error::InvalidArgument {
                    name: "kernel configuration",
                    reason: format!(
                        "{name} needs {smem} bytes of shared memory per block; {} allows {}",
                        info.name, info.smem_per_block_optin
                    ),
                });
            }
            func.set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)
                .map_err(cuda("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)"))?;
            let ctas_per_sm = func
                .occupancy_max_active_blocks_per_multiprocessor(config.threads(), smem as usize, None)
                .map_err(cuda("cuOccupancyMaxActiveBlocksPerMultiprocessor"))?;
            Ok(Kernel { name: name.clone(), func, config: *config, out, ctas_per_sm })
        })
        .collect()
}

impl Gpu {
    /// Loads an extra PTX module of SpMM kernel variants (same signature as the product kernels) and returns one
    /// handle per `(entry point, configuration, output type "f32" | "f16")`; used by the tuner.
    ///
    /// # Safety
    /// Each entry point must have the product kernels' signature and have been compiled for exactly the given
    /// configuration and output type (as `tests/ptx/tune_sm80.ptx` is for `layout::TUNE_CONFIGS`, f32): the
    /// launcher derives the grid, block, shared memory and the accepted C type from them, and a mismatch makes
    /// the kernel read and write out of bounds.
    pub unsafe fn load_variants(
        &self,
        ptx: &str,
        module_name: &'static str,
        entries: &[(String, layout::KernelConfig, &'static str)],
    ) -> Result<Vec<KernelVariant>> {
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
            .map_err(|e| Error::PtxLoad { module: module_name, message: describe(&e) })?;
        Ok(load_kernels(&module, module_name, entries, &self.info)?.into_iter().map(KernelVariant).collect())
    }
}

/// The PTX entry point for block size `bs` and output type `out` ("f32" or "f16").
pub(crate) fn kernel_name(bs: u32, out: &str) -> String {
    format!("sparsek_bsr_bs{bs}_{out}")
}

fn describe(e: &DriverError) -> String {
    // DriverError's Display includes the driver's error name and string.
    e.to_string()
}

fn read_info(ctx: &Arc<CudaContext>, ordinal: usize) -> Result<DeviceInfo> {
    let attr = |a: CUdevice_attribute| ctx.attribute(a).map_err(cuda("cuDeviceGetAttribute"));
    let mut driver_version = 0;
    // SAFETY: writes one int through a valid pointer.
    unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver_version) }
        .result()
        .map_err(cuda("cuDriverGetVersion"))?;
    Ok(DeviceInfo {
        ordinal,
        name: ctx.name().map_err(cuda("cuDeviceGetName"))?,
        compute_capability: ctx.compute_capability().map_err(cuda("cuDeviceGetAttribute"))?,
        driver_version,
        sm_count: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
        l2_bytes: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64,
        smem_per_block_optin: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as u32,
        smem_per_sm: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)? as u32,
        total_mem: ctx.total_mem().map_err(cuda("cuDeviceTotalMem"))? as u64,
        sm_clock_khz: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)? as u32,
    })
}

/// Timing with CUDA events (used by `sparsek run` and `sparsek bench`).
impl Gpu {
    /// Runs `launch` `warmup` times untimed, then `iters` times, each between two events recorded on the
    /// default stream; returns each launch's device time in milliseconds (no host synchronisation inside the
    /// timed loop: the events are read after the last launch).
    pub fn time_launches(
        &self,
        warmup: usize,
        iters: usize,
        mut launch: impl FnMut() -> Result<()>,
    ) -> Result<Vec<f32>> {
        for _ in 0..warmup {
            launch()?;
        }
        let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let mut events = Vec::with_capacity(iters);
        for _ in 0..iters {
            let start = self.ctx.new_event(flags).map_err(cuda("cuEventCreate"))?;
            let end = self.ctx.new_event(flags).map_err(cuda("cuEventCreate"))?;
            start.record(&self.stream).map_err(cuda("cuEventRecord"))?;
            launch()?;
            end.record(&self.stream).map_err(cuda("cuEventRecord"))?;
            events.push((start, end));
        }
        events.iter().map(|(s, e)| s.elapsed_ms(e).map_err(cuda("cuEventElapsedTime"))).collect()
    }
}

/// The median of a list of timings (NaN for an empty list).
pub fn median(v: &[f32]) -> f32 {
    if v.is_empty() {
        return f32::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f32::total_cmp);
    let mid = s.len() / 2;
    if s.len() % 2 == 1 { s[mid] } else { 0.5 * (s[mid - 1] + s[mid]) }
}
