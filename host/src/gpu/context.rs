//! The middle layer: a CUDA context on one device, its facts ([`DeviceInfo`]), its default stream, and the
//! product module chosen by compute capability and loaded once ([`Gpu`]).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, CudaStream};
use sparsek_layout::{InType, Layout, Op, OutType};

use super::driver::{cuda, device_count, driver_version, guard};
use super::registry::{self, Kernel, KernelReport, Registry};
use super::split::SplitWorkspace;
use crate::error::{Error, Result};
use crate::plan::{DeviceFacts, KernelRef, Loaded, Policy, Room};
use crate::tune::{CachedPlan, DeviceKey, Plan, PlanCache, PlanKey, PlanSource};

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
    /// The largest L2 access policy window a launch may carry, in bytes (0: none); see
    /// [`Policy::a_evict_first`].
    pub max_access_policy_window: usize,
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
            max_access_policy_window: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE)?
                .max(0) as usize,
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
    pub(crate) product: Registry,
    /// The sm_90a module on H100/H200 (bs 64 and 128 at N above `layout::NARROW_MAX_N`).
    hopper: Option<Registry>,
    /// The settings launches are planned with ([`Gpu::with_policy`]).
    pub(crate) policy: Policy,
    /// What the planner knows of this device and its loaded kernels (in the registries' order).
    pub(crate) facts: DeviceFacts,
    info: DeviceInfo,
    plans: Plans,
    /// The split-row workspace, allocated when the GPU opened (`None` if the memory could not be spared).
    pub(crate) split: Option<SplitWorkspace>,
    /// The plan of the last launch queued through this `Gpu` ([`Gpu::last_plan`]).
    pub(crate) last_plan: std::sync::Mutex<Option<crate::gpu::LaunchPlan>>,
}

/// The tuned plans of one [`Gpu`]: where they are kept, and those for this device and build, by key.
pub(crate) struct Plans {
    pub(crate) cache: PlanCache,
    pub(crate) device: DeviceKey,
    pub(crate) map: RwLock<HashMap<PlanKey, CachedPlan>>,
    /// Why the cache file was ignored, when it was.
    pub(crate) warning: Option<String>,
}

impl Plans {
    /// The plans `cache` holds for `device` (a warning on stderr when the file is ignored).
    fn load(cache: PlanCache, device: DeviceKey) -> Plans {
        let contents = cache.read();
        if let Some(w) = &contents.warning {
            eprintln!("sparsek: warning: {w}");
        }
        let map = if cache.is_off() {
            HashMap::new()
        } else {
            contents.entries.into_iter().filter(|e| e.device == device).map(|e| (e.key, e.cached)).collect()
        };
        Plans { cache, device, map: RwLock::new(map), warning: contents.warning }
    }

    /// The cached plan for `key`: a read lock and a hash-map lookup (no allocation).
    fn get(&self, key: &PlanKey) -> Option<CachedPlan> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        if map.is_empty() { None } else { map.get(key).copied() }
    }
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
        registry::predecode(major, minor);
        let ptx = registry::product_module(major, minor).ok_or_else(|| Error::UnsupportedArch {
            name: info.name.clone(),
            major,
            minor,
        })?;
        let product = Registry::load(&ctx, &info, ptx)?;
        let hopper = registry::hopper_module(major, minor).map(|m| Registry::load(&ctx, &info, m)).transpose()?;
        let stream = ctx.default_stream();
        let mut modules = format!("sm80:{}", product.build_hash);
        if let Some(h) = &hopper {
            modules.push_str(&format!("+sm90a:{}", h.build_hash));
        }
        let device = DeviceKey::new(&info.name, info.compute_capability, info.driver_version, &modules);
        let plans = Plans::load(PlanCache::from_env(), device);
        let split = SplitWorkspace::new(&ctx, &stream, info.driver_version);
        let catalog = |r: &Registry| -> Vec<Loaded> {
            r.kernels().iter().map(|k| Loaded { variant: k.variant, ctas_per_sm: k.ctas_per_sm }).collect()
        };
        let facts = DeviceFacts {
            sm_count: info.sm_count,
            l2_bytes: info.l2_bytes,
            max_access_policy_window: info.max_access_policy_window,
            compute_capability: info.compute_capability,
            programmatic_available: product.programmatic,
            graph_memory: split.as_ref().is_some_and(|ws| ws.graph_counters.is_some()),
            workspace: split.is_some(),
            product: catalog(&product),
            hopper: hopper.as_ref().map(catalog).unwrap_or_default(),
        };
        Ok(Gpu {
            ctx,
            stream,
            product,
            hopper,
            policy: Policy::default(),
            facts,
            info,
            plans,
            split,
            last_plan: std::sync::Mutex::new(None),
        })
    }

    /// Where tuned plans come from and go to (default: [`PlanCache::from_env`], the file under the user's cache
    /// directory). [`PlanCache::off`] gives fixed behaviour: the built-in heuristic serves every launch, and
    /// [`Gpu::tune`] only measures. The plans for this GPU are read from the new cache now (a corrupt file is
    /// ignored with a warning on stderr and [`Gpu::plan_cache_warning`]).
    pub fn with_plan_cache(mut self, cache: PlanCache) -> Self {
        self.plans = Plans::load(cache, self.plans.device.clone());
        self
    }

    /// Where this GPU's plans are kept.
    pub fn plan_cache(&self) -> &PlanCache {
        &self.plans.cache
    }

    /// Why the plan cache file was ignored when it was read, if it was (corrupt, unreadable, another version).
    pub fn plan_cache_warning(&self) -> Option<&str> {
        self.plans.warning.as_deref()
    }

    /// This GPU and build as the plan cache keys them.
    pub fn device_key(&self) -> &DeviceKey {
        &self.plans.device
    }

    /// The plans this GPU uses (from the cache file and tuned in this process), sorted by key.
    pub fn cached_plans(&self) -> Vec<(PlanKey, CachedPlan)> {
        let map = self.plans.map.read().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<_> = map.iter().map(|(k, c)| (*k, *c)).collect();
        v.sort_by_key(|e| e.0);
        v
    }

    /// Makes `plan` serve `key` in this process (unless plans are off); the tuner's last step.
    pub(crate) fn remember_plan(&self, key: PlanKey, cached: CachedPlan) {
        if !self.plans.cache.is_off() {
            self.plans.map.write().unwrap_or_else(|e| e.into_inner()).insert(key, cached);
        }
    }

    /// Whether product-module launches carry programmatic serialization reading A before their wait: enabled
    /// ([`Policy::programmatic`]) and possible on this GPU (the product module was loaded from its sm_90a
    /// cubin, whose kernels wait for the grid before them). The default early start
    /// ([`Policy::early_start`]), which waits before any read, does not count here.
    pub fn programmatic_launch(&self) -> bool {
        self.policy.programmatic && self.product.programmatic
    }

    /// Whether this GPU can launch the product module's kernels with programmatic serialization (whether or not
    /// [`Policy::programmatic`] enabled it): the module was loaded from its sm_90a cubin.
    pub fn programmatic_launch_available(&self) -> bool {
        self.product.programmatic
    }

    /// The sm_90a module's name and description, when it is loaded and enabled ([`Policy::hopper`]).
    pub fn hopper_module(&self) -> Option<(&'static str, &'static str)> {
        self.active_hopper().map(|r| (r.name, r.description))
    }

    /// How the sm_90a module was loaded, when it is loaded and enabled.
    pub fn hopper_loaded_from(&self) -> Option<&str> {
        self.active_hopper().map(|r| r.loaded_from.as_str())
    }

    /// The sm_90a module when it is loaded and launches may use it.
    fn active_hopper(&self) -> Option<&Registry> {
        self.hopper.as_ref().filter(|_| self.policy.hopper)
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

    /// The settings launches are planned with (default [`Policy::default`]): which kernels they may use, how rows
    /// are split, how the sm_90a kernels take their tiles, and the launch attributes. Every launch's decisions are
    /// [`crate::plan::plan`]'s for this policy ([`Gpu::plan`] shows them).
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// The policy launches are planned with ([`Gpu::with_policy`]).
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// What the planner knows of this device: its SMs, L2, and the loaded kernels with their occupancy
    /// ([`crate::plan::plan`] takes it).
    pub fn device_facts(&self) -> &DeviceFacts {
        &self.facts
    }

    /// The planner's view of this Gpu: its facts under its policy.
    pub(crate) fn room(&self) -> Room<'_> {
        Room { device: &self.facts, policy: &self.policy }
    }

    /// The loaded kernel a plan names.
    pub(crate) fn kernel_at(&self, r: KernelRef) -> Option<&Kernel> {
        match r {
            KernelRef::Product(i) => self.product.kernels().get(i),
            KernelRef::Hopper(i) => self.hopper.as_ref().and_then(|h| h.kernels().get(i)),
            KernelRef::Given => None,
        }
    }

    /// The cached plan for `key`, if any.
    pub(crate) fn cached_plan(&self, key: &PlanKey) -> Option<CachedPlan> {
        self.plans.get(key)
    }

    /// Which kernel and plan serve a product of an `m x k` A with blocks of `bs` (`nnzb` of them, the longest
    /// block row holding `max_row_blocks` when known) and a `k x n` B of `types`: a tuned plan from the cache or
    /// the built-in heuristic's. `None` for a block size or type combination no kernel serves. Prefer
    /// [`Gpu::plan`], which shows every decision of the launch.
    #[doc(hidden)]
    pub fn plan_kernel(
        &self,
        bs: usize,
        (input, b_layout, out, c_layout): crate::tune::ProductTypes,
        (m, k, n): (usize, usize, usize),
        nnzb: usize,
        max_row_blocks: Option<usize>,
    ) -> Option<PlanChoice> {
        let problem = crate::plan::Problem {
            input,
            output: out,
            b_layout,
            c_layout,
            max_row_blocks,
            ..crate::plan::Problem::new(bs, (m, k, n), nnzb)
        };
        let cached = self.cached_plan(&problem.plan_key());
        let chosen = crate::plan::choose(self.room(), &problem, cached.as_ref()).ok()?;
        let (family, source) = chosen.choice?;
        let kernel = self.kernel_at(chosen.kernel)?;
        Some(PlanChoice {
            plan: Plan {
                family,
                group_rows: chosen.group_rows,
                row_split: chosen.row_split,
                tile_schedule: chosen.tile_schedule,
            },
            source,
            kernel: kernel.variant.name,
            config: kernel.config(),
            ctas_per_sm: kernel.ctas_per_sm,
        })
    }

    /// The most block rows for which the built-in heuristic takes the decode kernels at few columns (the planner's
    /// rule, [`crate::plan::RULES`]).
    #[doc(hidden)]
    pub fn decode_row_limit(&self, bs: u32) -> usize {
        self.room().decode_row_limit(bs)
    }

    /// The entry point that serves a product of blocks of `bs` with `types` (inputs, B's order, output) at `n`
    /// columns over an A of `block_rows` block rows holding `nnzb` blocks (at least one) by the built-in heuristic
    /// (`sparsek info`, benchmark records; a tuned plan may choose another), and whether it is an sm_90a kernel.
    #[doc(hidden)]
    pub fn serving_kernel(
        &self,
        bs: u32,
        types: (InType, Layout, OutType),
        n: usize,
        (block_rows, nnzb): (usize, usize),
    ) -> Option<(&'static str, bool)> {
        let (_, (r, _)) = self.room().heuristic_plan(Op::BsrSpmm, bs, types, n, nnzb.max(1), (block_rows, None))?;
        self.kernel_at(r).map(|k| (k.variant.name, k.variant.arch == sparsek_layout::Arch::Sm90a))
    }

    pub(crate) fn check_kernel(&self) -> Option<&cudarc::driver::CudaFunction> {
        self.product.check.as_ref()
    }

    pub(crate) fn transpose_kernel(&self) -> Option<&cudarc::driver::CudaFunction> {
        self.product.transpose.as_ref()
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

/// The kernel and plan that serve a product ([`Gpu::plan_kernel`]).
#[derive(Clone, Copy, Debug)]
pub struct PlanChoice {
    /// The plan.
    pub plan: Plan,
    /// Tuned (from the cache) or the built-in heuristic's.
    pub source: PlanSource,
    /// The entry point.
    pub kernel: &'static str,
    /// Its tile shape and pipeline.
    pub config: sparsek_layout::KernelConfig,
    /// CTAs of it that fit on one SM (the driver's occupancy answer).
    pub ctas_per_sm: u32,
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

#[cfg(test)]
mod tests {
    use super::Plans;
    use crate::tune::{
        CachedPlan, DeviceKey, InType, KernelFamily, Layout, OutType, Plan, PlanCache, PlanEntry, PlanKey,
    };

    /// What a `Gpu` serves from a cache file: its own device's and build's plans only, the same map on every
    /// read of the same file, nothing with plans off.
    #[test]
    fn plans_for_this_device_and_build_only_and_deterministic() {
        let dir = std::env::temp_dir().join(format!("sparsek-plans-load-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let here = DeviceKey::new("NVIDIA H100 80GB HBM3", (9, 0), 13000, "sm80:aa+sm90a:bb");
        let others = [
            DeviceKey::new("NVIDIA A100-SXM4-80GB", (8, 0), 13000, "sm80:aa"),
            DeviceKey { driver_version: 12080, ..here.clone() },
            DeviceKey { modules: "sm80:cc+sm90a:bb".into(), ..here.clone() },
        ];
        let types = (InType::F16, Layout::RowMajor, OutType::F32, Layout::RowMajor);
        let key = |n: usize| PlanKey::new(types, 64, (8192, 8192, n), 3604, Some(60));
        let cached = |family| CachedPlan { plan: Plan::new(family), tuned_us: 1.0, heuristic_us: 2.0, unix_time: 0 };
        let mut entries = vec![
            PlanEntry { device: here.clone(), key: key(1), cached: cached(KernelFamily::Decode) },
            PlanEntry { device: here.clone(), key: key(16), cached: cached(KernelFamily::Narrow) },
        ];
        for d in &others {
            entries.push(PlanEntry { device: d.clone(), key: key(1), cached: cached(KernelFamily::Wide) });
        }
        let cache = PlanCache::in_dir(&dir);
        cache.save(&entries).unwrap();
        let a = Plans::load(cache.clone(), here.clone());
        let b = Plans::load(cache.clone(), here.clone());
        assert!(a.warning.is_none());
        assert_eq!(*a.map.read().unwrap(), *b.map.read().unwrap());
        assert_eq!(a.map.read().unwrap().len(), 2, "another GPU's, driver's or build's plans never serve");
        assert_eq!(a.get(&key(1)).map(|c| c.plan.family), Some(KernelFamily::Decode));
        assert_eq!(a.get(&key(16)).map(|c| c.plan.family), Some(KernelFamily::Narrow));
        // N = 9..16 share N = 16's bucket; 17 does not; unknown row lengths are another key.
        assert_eq!(a.get(&key(9)).map(|c| c.plan.family), Some(KernelFamily::Narrow));
        assert!(a.get(&key(17)).is_none());
        assert!(a.get(&PlanKey { skew_bucket: 0, ..key(1) }).is_none());
        // Plans off: nothing, whatever the file holds; another device: only its own.
        assert!(Plans::load(PlanCache::off(), here.clone()).get(&key(1)).is_none());
        let a100 = Plans::load(cache, others[0].clone());
        assert_eq!(a100.get(&key(1)).map(|c| c.plan.family), Some(KernelFamily::Wide));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
