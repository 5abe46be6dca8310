//! The middle layer: a CUDA context on one device, its facts ([`DeviceInfo`]), its default stream, and the
//! product module chosen by compute capability and loaded once ([`Gpu`]).

use std::sync::Arc;

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, CudaStream};
use sparsek_layout::{InType, Layout, Op, OutType, Tile};

use super::driver::{cuda, device_count, driver_version, guard};
use super::registry::{self, Kernel, KernelReport, Registry};
use crate::error::{Error, Result};

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

    fn read(ctx: &Arc<CudaContext>, ordinal: usize) -> Result<DeviceInfo> {
        let attr = |a: CUdevice_attribute| ctx.attribute(a).map_err(cuda("cuDeviceGetAttribute"));
        Ok(DeviceInfo {
            ordinal,
            name: ctx.name().map_err(cuda("cuDeviceGetName"))?,
            compute_capability: ctx.compute_capability().map_err(cuda("cuDeviceGetAttribute"))?,
            driver_version: driver_version()?,
            sm_count: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            l2_bytes: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64,
            smem_per_block_optin: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?
                as u32,
            smem_per_sm: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)? as u32,
            total_mem: ctx.total_mem().map_err(cuda("cuDeviceTotalMem"))? as u64,
            sm_clock_khz: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)? as u32,
        })
    }
}

/// A GPU ready to run sparsek's kernels: a CUDA context (the device's primary context), a default stream, and
/// the product PTX module for its architecture, loaded once with every kernel looked up and configured.
///
/// `Gpu` is `Send + Sync`: launches from several threads are safe (each is queued on the stream it names).
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    product: Registry,
    /// The sm_90a module on H100/H200 (bs 64 and 128 at N above `layout::NARROW_MAX_N`).
    hopper: Option<Registry>,
    /// Whether launches may use `hopper` ([`Gpu::with_hopper`]).
    use_hopper: bool,
    /// Whether launches of few columns may use the decode kernels ([`Gpu::with_decode`]).
    use_decode: bool,
    info: DeviceInfo,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("info", &self.info)
            .field("module", &self.product.name)
            .field("hopper", &self.hopper_module().map(|m| m.0))
            .finish_non_exhaustive()
    }
}

/// The decode kernels serve launches of at most `sm_count / DECODE_ROWS_PER_SM_INV` block rows
/// ([`Gpu::decode_serves`]).
const DECODE_ROWS_PER_SM_INV: usize = 8;

impl Gpu {
    /// Opens GPU `ordinal`: retains the device's primary context, checks the compute capability (8.0 or newer),
    /// loads the product PTX module for it once and looks up every kernel.
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

    /// A `Gpu` on a CUDA context the caller already holds (candle's `CudaDevice::cuda_stream().context()`, or
    /// any cudarc context; cudarc's version must be sparsek's). [`Gpu::new`] retains the device's primary
    /// context, which is the one PyTorch and the CUDA runtime use, so device memory from those is valid in it;
    /// this constructor is for callers with a context of their own. The product module is loaded into `ctx`.
    pub fn from_context(ctx: Arc<CudaContext>) -> Result<Self> {
        guard(|| {
            let ordinal = ctx.ordinal();
            Self::open_in(ctx, ordinal)
        })
    }

    fn open(ordinal: usize) -> Result<Self> {
        let ctx = CudaContext::new(ordinal).map_err(cuda("cuDevicePrimaryCtxRetain"))?;
        Self::open_in(ctx, ordinal)
    }

    fn open_in(ctx: Arc<CudaContext>, ordinal: usize) -> Result<Self> {
        let info = DeviceInfo::read(&ctx, ordinal)?;
        let (major, minor) = info.compute_capability;
        let ptx = registry::product_module(major, minor).ok_or_else(|| Error::UnsupportedArch {
            name: info.name.clone(),
            major,
            minor,
        })?;
        let product = Registry::load(&ctx, &info, ptx)?;
        let hopper = registry::hopper_module(major, minor).map(|m| Registry::load(&ctx, &info, m)).transpose()?;
        let stream = ctx.default_stream();
        Ok(Gpu { ctx, stream, product, hopper, use_hopper: true, use_decode: true, info })
    }

    /// Whether launches may use the sm_90a kernels where this GPU has them (the default: yes). `false` keeps
    /// every launch on the portable sm_80 module: for comparisons, tests of that module on a Hopper GPU, or
    /// callers who want the same kernels on every GPU.
    pub fn with_hopper(mut self, enabled: bool) -> Self {
        self.use_hopper = enabled;
        self
    }

    /// Whether launches of at most [`sparsek_layout::DECODE_MAX_N`] columns may use the decode kernels (bs 32, 64
    /// and 128; the default: yes). `false` gives them the narrow-tile kernels instead: for comparisons and tests
    /// of those.
    pub fn with_decode(mut self, enabled: bool) -> Self {
        self.use_decode = enabled;
        self
    }

    /// The sm_90a module's name and description, when it is loaded and enabled ([`Gpu::with_hopper`]).
    pub fn hopper_module(&self) -> Option<(&'static str, &'static str)> {
        self.active_hopper().map(|r| (r.name, r.description))
    }

    /// How the sm_90a module was loaded, when it is loaded and enabled.
    pub fn hopper_loaded_from(&self) -> Option<&str> {
        self.active_hopper().map(|r| r.loaded_from.as_str())
    }

    /// The sm_90a module when it is loaded and launches may use it.
    fn active_hopper(&self) -> Option<&Registry> {
        self.hopper.as_ref().filter(|_| self.use_hopper)
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

    /// The product module's name and a one-line description of it (`sparsek info`).
    pub fn module(&self) -> (&'static str, &'static str) {
        (self.product.name, self.product.description)
    }

    /// How the product module was loaded on this GPU: prebuilt SASS for its architecture, or the PTX
    /// JIT-compiled by the driver (and why).
    pub fn module_loaded_from(&self) -> &str {
        &self.product.loaded_from
    }

    /// The kernel for a launch of `n` columns over `nnzb` blocks in `block_rows` block rows: the decode kernel
    /// where [`Gpu::decode_serves`] says so; else the sm_90a one where it is loaded, enabled and has the shape
    /// (bs 64 and 128, `n` above [`sparsek_layout::NARROW_MAX_N`], at least one block: a tensor map cannot
    /// describe no blocks, and `nnzb * bs` below 2^32: its row coordinates are 32-bit); else the product module's
    /// narrow-tile one where the block size has it and `n` is at most `NARROW_MAX_N`, else its wide one.
    pub(crate) fn kernel(
        &self,
        op: Op,
        bs: u32,
        types: (InType, Layout, OutType),
        n: usize,
        nnzb: usize,
        block_rows: usize,
    ) -> Option<&Kernel> {
        if self.decode_serves(n, block_rows)
            && let Some(k) = self.product.find(op, bs, types, Tile::Decode)
        {
            return Some(k);
        }
        let tile = Tile::for_columns(n);
        // The sm_90a kernels address A's values as rows `blk * bs` of a tensor map: 32-bit coordinates.
        let fits = (nnzb as u64).saturating_mul(u64::from(bs)) <= u64::from(u32::MAX);
        if let Some(hopper) = self.active_hopper().filter(|_| nnzb > 0 && fits)
            && let Some(k) = hopper.find(op, bs, types, tile)
        {
            return Some(k);
        }
        self.product.find(op, bs, types, tile).or_else(|| self.product.find(op, bs, types, Tile::Wide))
    }

    /// Whether a launch of `n` columns over `block_rows` block rows takes the decode kernels (bs 32, 64 and 128;
    /// unless [`Gpu::with_decode`] turned them off): at most [`sparsek_layout::DECODE_MAX_N`] columns, and at most
    /// an eighth as many block rows as the GPU has SMs, where the narrow tile's one CTA per block row leaves most
    /// SMs idle and the decode kernels' 16-row slices with their split blocks fill them. On an H100 (132 SMs: up
    /// to 16 block rows) they measured 1.1-1.5x faster on layers of 6 and 12 block rows, level at 24, and 5-20%
    /// slower from 64 block rows up (docs/perf-notes.md "Decode", step 3).
    pub fn decode_serves(&self, n: usize, block_rows: usize) -> bool {
        self.use_decode
            && n <= sparsek_layout::DECODE_MAX_N
            && block_rows.saturating_mul(DECODE_ROWS_PER_SM_INV) <= self.info.sm_count as usize
    }

    /// The entry point that serves a product of blocks of `bs` with `types` (inputs, B's order, output) at `n`
    /// columns over a nonempty A of `block_rows` block rows (`sparsek info`, benchmark records), and whether it is
    /// an sm_90a kernel.
    pub fn serving_kernel(
        &self,
        bs: u32,
        types: (InType, Layout, OutType),
        n: usize,
        block_rows: usize,
    ) -> Option<(&'static str, bool)> {
        self.kernel(Op::BsrSpmm, bs, types, n, 1, block_rows)
            .map(|k| (k.variant.name, k.variant.arch == sparsek_layout::Arch::Sm90a))
    }

    pub(crate) fn check_kernel(&self) -> Option<&cudarc::driver::CudaFunction> {
        self.product.check.as_ref()
    }

    /// Registers, shared memory and occupancy of every kernel of the product module and of the sm_90a module
    /// (when loaded and enabled), as the driver reports them.
    pub fn kernel_reports(&self) -> Result<Vec<KernelReport>> {
        std::iter::once(&self.product)
            .chain(self.active_hopper())
            .flat_map(|r| r.kernels().iter().map(move |k| k.report(r.name)))
            .collect()
    }
}

/// A kernel of the tuning module ([`Gpu::tuning_variants`]), launched with [`Gpu::spmm_variant`].
#[cfg(feature = "tuning")]
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct KernelVariant(pub(crate) Kernel);

#[cfg(feature = "tuning")]
impl KernelVariant {
    /// Entry point name.
    pub fn name(&self) -> &'static str {
        self.0.variant.name
    }
    /// Its tile configuration.
    pub fn config(&self) -> sparsek_layout::KernelConfig {
        self.0.config()
    }
    /// Registers, shared memory and occupancy, as the driver reports them.
    pub fn report(&self) -> Result<KernelReport> {
        self.0.report(registry::SM80_TUNE.name)
    }
}

#[cfg(feature = "tuning")]
impl Gpu {
    /// Loads the embedded tuning module (every `layout::TUNE_CONFIGS` candidate, f32 output) and returns one
    /// handle per kernel. Safe: the module and its variant table are built from the same `layout` crate, and
    /// `cargo xtask build-ptx --check` keeps the committed PTX equal to a fresh build.
    #[doc(hidden)]
    pub fn tuning_variants(&self) -> Result<Vec<KernelVariant>> {
        let reg = Registry::load(&self.ctx, &self.info, &registry::SM80_TUNE)?;
        Ok(reg.kernels().iter().cloned().map(KernelVariant).collect())
    }
}

// What the docs promise: a Gpu (and the device buffers) can be shared between threads.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Gpu>();
    send_sync::<crate::gpu::DeviceBsr>();
    send_sync::<crate::gpu::DeviceMatrix<f32>>();
};
