//! The kernel registry: the embedded PTX modules, each loaded once per [`Gpu`](super::Gpu), and their kernels
//! looked up, checked and configured once, keyed by typed values (op, block size, output type) from
//! [`sparsek_layout::VARIANTS`]. The host never states a kernel's shape itself: threads, tile and shared memory come from
//! the variant's [`KernelConfig`].

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use sparsek_layout::{
    Arch, BSR_CHECK_KERNEL, BSR_TRANSPOSE_KERNEL, InType, KernelConfig, Layout, Module, OutType, VARIANTS, Variant,
};

use super::DeviceInfo;
use super::driver::{cuda, describe};
use crate::error::{Error, Result};

/// A PTX module embedded in the library (built by `cargo xtask build-ptx` and committed).
pub(crate) struct EmbeddedPtx {
    /// Which module of the variant table it holds.
    pub(crate) module: Module,
    /// Its target architecture.
    pub(crate) arch: Arch,
    /// Name in messages and `sparsek info`.
    pub(crate) name: &'static str,
    /// One line on what it is.
    pub(crate) description: &'static str,
    /// The PTX text, zstd-compressed ([`unpack`]).
    pub(crate) ptx: &'static [u8],
    /// The same module assembled by ptxas (`cargo xtask build-ptx`) for GPU families: (compute capability major,
    /// minor or `None` for any minor, the arch name, the cubin). A GPU of a listed family loads the cubin (no JIT);
    /// every other GPU, or a driver that refuses the cubin, JIT-compiles the PTX.
    pub(crate) cubins: &'static [Cubin],
    /// The cubins' manifest (`cargo xtask build-ptx`), whose `ptx_fnv1a64` line names the PTX build: plans are
    /// cached per build ([`EmbeddedPtx::build_hash`]). Empty for the tuning module.
    pub(crate) manifest: &'static str,
}

impl EmbeddedPtx {
    /// The FNV-1a 64 hash of the PTX, from the manifest ("unknown" without one).
    pub(crate) fn build_hash(&self) -> &'static str {
        self.manifest.lines().find_map(|l| l.strip_prefix("ptx_fnv1a64 = ")).map_or("unknown", str::trim)
    }
}

/// A prebuilt cubin of an [`EmbeddedPtx`]: SASS for compute capability `major.minor` (any minor of `major` when
/// `minor` is `None`: SASS runs on later minors of its major version).
pub(crate) struct Cubin {
    pub(crate) major: i32,
    pub(crate) minor: Option<i32>,
    pub(crate) arch: &'static str,
    /// The cubin, zstd-compressed ([`unpack`]).
    pub(crate) bytes: &'static [u8],
    /// Whether its kernels execute their `griddepcontrol` markers (kernels-gpu/src/ptx/griddep.rs; `cargo xtask
    /// build-ptx` assembled it from the PTX with the markers made instructions), so that they may be launched
    /// with programmatic serialization.
    pub(crate) programmatic: bool,
}

impl Cubin {
    /// SASS for every 8.x GPU (sm_80); its kernels keep their `griddepcontrol` markers as no-ops.
    const fn sm80(bytes: &'static [u8]) -> Cubin {
        Cubin { major: 8, minor: None, arch: "sm_80", bytes, programmatic: false }
    }

    /// SASS for compute capability 9.0 only (sm_90a: H100, H200), `programmatic` as [`Cubin::programmatic`].
    const fn sm90a(bytes: &'static [u8], programmatic: bool) -> Cubin {
        Cubin { major: 9, minor: Some(0), arch: "sm_90a", bytes, programmatic }
    }
}

/// An [`EmbeddedPtx`] static from `host/ptx/<name>.ptx.zst`, its cubins `<name>.<arch>.cubin.zst` (each given as the
/// [`Cubin`] constructor, the arch and the constructor's further arguments) and, where it has cubins, the manifest
/// `<name>.cubins.txt` that `cargo xtask build-ptx` writes beside them.
macro_rules! embedded_ptx {
    ($(#[$attr:meta])* $static:ident: $module:ident, $arch:ident, $name:literal, $description:literal,
     cubins [$($cubin:ident($cubin_arch:literal $(, $more:expr)*)),*]) => {
        $(#[$attr])*
        pub(crate) static $static: EmbeddedPtx = EmbeddedPtx {
            module: Module::$module,
            arch: Arch::$arch,
            name: $name,
            description: $description,
            ptx: include_bytes!(concat!("../../ptx/", $name, ".ptx.zst")),
            cubins: &[$(Cubin::$cubin(
                include_bytes!(concat!("../../ptx/", $name, ".", $cubin_arch, ".cubin.zst")) $(, $more)*
            )),*],
            manifest: embedded_ptx!(@manifest $name, $($cubin)*),
        };
    };
    (@manifest $name:literal,) => { "" };
    (@manifest $name:literal, $($cubin:ident)+) => { include_str!(concat!("../../ptx/", $name, ".cubins.txt")) };
}

embedded_ptx! {
    /// The product module: PTX ISA 8.0 for sm_80, JIT-compiled by the driver for any sm_80+ GPU, and prebuilt for
    /// sm_80 (any 8.x GPU) and sm_90a (H100 / H200): the JIT of the 33 kernels took 20 s on an H100 (2026-11-22).
    SM80: Product, Sm80, "sparsek_sm80", "PTX ISA 8.0, sm_80 (cp.async + ldmatrix + mma.sync)",
    cubins [sm80("sm_80"), sm90a("sm_90a", true)]
}

embedded_ptx! {
    /// The tuning module: every `layout::TUNE_CONFIGS` candidate (f32 output).
    #[cfg(feature = "tuning")]
    SM80_TUNE: Tuning, Sm80, "sparsek_sm80_tune", "the tuning candidates of layout::TUNE_CONFIGS, sm_80", cubins []
}

embedded_ptx! {
    /// The sm_90a module: TMA + wgmma kernels for bs 64 and 128 (`layout::HOPPER_CONFIGS`), prebuilt for sm_90a
    /// (an sm_90a cubin or PTX loads only on compute capability 9.0).
    SM90A: Hopper, Sm90a, "sparsek_sm90a",
    "PTX ISA 8.3, sm_90a (TMA + mbarrier + wgmma, warp-specialised; bs 64 and 128)",
    cubins [sm90a("sm_90a", false)]
}

/// The decoded images of the process ([`unpack`]), by the address of their embedded frame.
static DECODED: Mutex<Vec<(usize, Arc<[u8]>)>> = Mutex::new(Vec::new());

/// Decodes one embedded zstd frame (`cargo xtask build-ptx` compresses every module and cubin the library embeds:
/// about 2.5 MB in the binary instead of ~50 MB), once per process: later [`Gpu`](super::Gpu)s of the process reuse
/// the decoded image, found by the frame's address (the modules are `static`s, so every use sees one address; as
/// `const`s each use had its own copy and every load decoded again). Only the images a GPU loads are decoded ([`predecode`] decodes them on threads of their own).
/// Measured on an H200's host (2026-11-27): 25-47 ms for the product module's sm_90a cubin, 30 ms for the sm_90a
/// module's, against 2-5 ms for the driver to load either.
pub(crate) fn unpack(module: &'static str, packed: &'static [u8]) -> Result<Arc<[u8]>> {
    let key = packed.as_ptr() as usize;
    let cached = |d: &Vec<(usize, Arc<[u8]>)>| d.iter().find(|(k, _)| *k == key).map(|(_, v)| Arc::clone(v));
    if let Some(image) = cached(&DECODED.lock().unwrap_or_else(|e| e.into_inner())) {
        return Ok(image);
    }
    let corrupt =
        |what: String| Error::PtxLoad { module, message: format!("the embedded kernels do not decode: {what}") };
    let mut decoder = ruzstd::decoding::FrameDecoder::new();
    decoder.init(packed).map_err(|e| corrupt(e.to_string()))?;
    let size = usize::try_from(decoder.content_size()).map_err(|_| corrupt("its size exceeds memory".into()))?;
    let mut out = Vec::new();
    out.try_reserve_exact(size).map_err(|_| Error::OutOfMemory { bytes: size, what: "decoded kernels" })?;
    decoder.decode_all_to_vec(packed, &mut out).map_err(|e| corrupt(e.to_string()))?;
    if out.len() != size {
        return Err(corrupt(format!("{} bytes decoded, {size} expected", out.len())));
    }
    let image: Arc<[u8]> = out.into();
    let mut d = DECODED.lock().unwrap_or_else(|e| e.into_inner());
    Ok(cached(&d).unwrap_or_else(|| {
        d.push((key, Arc::clone(&image)));
        image
    }))
}

/// Decodes, each on a thread of its own, the images that a GPU of compute capability `major.minor` will load
/// (the product module's cubin for it, else its PTX; the sm_90a module's cubin where it loads), so that opening a
/// [`Gpu`](super::Gpu) waits for the slowest decode rather than their sum. Errors are left to the loads, which
/// decode again and report them.
pub(crate) fn predecode(major: i32, minor: i32) {
    let image = |ptx: &'static EmbeddedPtx| {
        let cubin = ptx.cubins.iter().find(|c| c.major == major && c.minor.is_none_or(|m| m == minor));
        (ptx.name, cubin.map_or(ptx.ptx, |c| c.bytes))
    };
    let decoded = |packed: &[u8]| {
        let key = packed.as_ptr() as usize;
        DECODED.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|(k, _)| *k == key)
    };
    let images: Vec<_> = product_module(major, minor)
        .into_iter()
        .chain(hopper_module(major, minor))
        .map(image)
        .filter(|(_, packed)| !decoded(packed))
        .collect();
    if images.len() < 2 {
        // One image or none: decoding it on this thread costs no spawn (a later Gpu of the process finds both).
        for (name, packed) in images {
            let _ = unpack(name, packed);
        }
        return;
    }
    std::thread::scope(|s| {
        for (name, packed) in images {
            s.spawn(move || unpack(name, packed));
        }
    });
}

/// The product module for a GPU of compute capability `major.minor`, or `None` below sm_80: the portable sm_80
/// module on every sm_80+ GPU.
pub(crate) fn product_module(major: i32, _minor: i32) -> Option<&'static EmbeddedPtx> {
    (major >= 8).then_some(&SM80)
}

/// The module loaded next to the product module, whose kernels serve the shapes they cover: the sm_90a module on
/// compute capability 9.0 (H100, H200), nothing elsewhere.
pub(crate) fn hopper_module(major: i32, minor: i32) -> Option<&'static EmbeddedPtx> {
    ((major, minor) == (9, 0)).then_some(&SM90A)
}

/// How long a module took to become usable (written into [`Registry::loaded_from`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LoadTime {
    /// Decoding the embedded zstd frame(s).
    pub(crate) decode: Duration,
    /// The driver's `cuModuleLoadData` (with its JIT compile when PTX was loaded).
    pub(crate) load: Duration,
}

/// One loaded kernel with its launch shape.
#[derive(Clone, Debug)]
pub(crate) struct Kernel {
    /// Its row of the variant table.
    pub(crate) variant: Variant,
    pub(crate) func: CudaFunction,
    /// CTAs of this kernel resident on one SM (occupancy API), for sizing the rasterization groups.
    pub(crate) ctas_per_sm: u32,
}

impl Kernel {
    pub(crate) fn config(&self) -> KernelConfig {
        self.variant.config
    }
}

/// The kernels of one loaded module.
pub(crate) struct Registry {
    /// The module's name (for messages).
    pub(crate) name: &'static str,
    pub(crate) description: &'static str,
    /// The PTX build's hash ([`EmbeddedPtx::build_hash`]).
    pub(crate) build_hash: &'static str,
    /// What was loaded: "sm_90a SASS (prebuilt)" or "PTX, JIT-compiled by the driver" (with the reason).
    pub(crate) loaded_from: String,
    /// Whether the loaded code executes the kernels' grid-dependency markers ([`Cubin::programmatic`]): the
    /// module's kernels of `Pipeline::CpAsync` and `Pipeline::Direct` may then be launched with programmatic
    /// serialization. Never for JIT-compiled PTX, where the markers are comments.
    pub(crate) programmatic: bool,
    /// Kept alive for the functions.
    _module: Arc<CudaModule>,
    kernels: Vec<Kernel>,
    /// The device-side BSR structure check (`layout::BSR_CHECK_KERNEL`), in the product module only.
    pub(crate) check: Option<CudaFunction>,
    /// The device-side transposed index (`layout::BSR_TRANSPOSE_KERNEL`), in the product module only.
    pub(crate) transpose: Option<CudaFunction>,
}

impl Registry {
    /// Loads `ptx` into `ctx` and prepares every variant of its module and arch: looks up the entry point, checks
    /// the configuration against the rules of the kernel template and the device's shared memory, raises the
    /// dynamic shared memory limit and reads the occupancy.
    pub(crate) fn load(ctx: &Arc<CudaContext>, info: &DeviceInfo, ptx: &EmbeddedPtx) -> Result<Registry> {
        let (major, minor) = info.compute_capability;
        let cubin = ptx.cubins.iter().find(|c| c.major == major && c.minor.is_none_or(|m| m == minor));
        // The cubin first (no JIT); a driver too old for ptxas's output refuses it, and the PTX serves instead.
        let mut loaded_from = "PTX, JIT-compiled by the driver (no prebuilt SASS for this GPU)".to_string();
        let mut module = None;
        let mut programmatic = false;
        let mut load_time = LoadTime::default();
        if let Some(c) = cubin {
            let t = Instant::now();
            let image = unpack(ptx.name, c.bytes)?.to_vec();
            load_time.decode += t.elapsed();
            let t = Instant::now();
            let loaded = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(image));
            load_time.load += t.elapsed();
            match loaded {
                Ok(m) => {
                    loaded_from = format!("{} SASS (prebuilt by ptxas)", c.arch);
                    module = Some(m);
                    programmatic = c.programmatic;
                }
                Err(e) => {
                    loaded_from =
                        format!("PTX, JIT-compiled by the driver (the {} cubin was refused: {})", c.arch, describe(&e))
                }
            }
        }
        let module = match module {
            Some(m) => m,
            None => {
                let t = Instant::now();
                let text = String::from_utf8(unpack(ptx.name, ptx.ptx)?.to_vec()).map_err(|_| Error::PtxLoad {
                    module: ptx.name,
                    message: "the embedded PTX is not UTF-8".into(),
                })?;
                load_time.decode += t.elapsed();
                let t = Instant::now();
                let m = ctx
                    .load_module(cudarc::nvrtc::Ptx::from_src(text))
                    .map_err(|e| Error::PtxLoad { module: ptx.name, message: describe(&e) })?;
                load_time.load += t.elapsed();
                m
            }
        };
        let t = Instant::now();
        let kernels = VARIANTS
            .iter()
            .filter(|v| v.module == ptx.module && v.arch == ptx.arch)
            .map(|v| load_kernel(&module, ptx.name, v, info))
            .collect::<Result<Vec<_>>>()?;
        loaded_from.push_str(&format!(
            "; decoded in {:.1} ms, loaded in {:.1} ms, {} kernels prepared in {:.1} ms",
            load_time.decode.as_secs_f64() * 1e3,
            load_time.load.as_secs_f64() * 1e3,
            kernels.len(),
            t.elapsed().as_secs_f64() * 1e3
        ));
        let helper = |name: &str| -> Result<Option<CudaFunction>> {
            if ptx.module != Module::Product {
                return Ok(None);
            }
            let f = module
                .load_function(name)
                .map_err(|e| Error::PtxLoad { module: ptx.name, message: format!("{name}: {}", describe(&e)) })?;
            Ok(Some(f))
        };
        let (check, transpose) = (helper(BSR_CHECK_KERNEL)?, helper(BSR_TRANSPOSE_KERNEL)?);
        Ok(Registry {
            name: ptx.name,
            description: ptx.description,
            build_hash: ptx.build_hash(),
            loaded_from,
            programmatic,
            _module: module,
            kernels,
            check,
            transpose,
        })
    }

    pub(crate) fn kernels(&self) -> &[Kernel] {
        &self.kernels
    }
}

fn load_kernel(module: &Arc<CudaModule>, module_name: &'static str, v: &Variant, info: &DeviceInfo) -> Result<Kernel> {
    let name = v.name;
    let config = v.config;
    config.check().map_err(|rule| Error::InvalidArgument {
        name: "kernel configuration",
        reason: format!("{name}: {config:?} breaks a rule of the kernel template: {rule}"),
    })?;
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
    Ok(Kernel { variant: *v, func, ctas_per_sm })
}

/// What the driver reports for one kernel (`sparsek info`).
#[derive(Clone, Debug)]
pub struct KernelReport {
    /// Entry point name in the PTX.
    pub name: &'static str,
    /// The module it comes from.
    pub module: &'static str,
    /// Block size of A the kernel handles.
    pub bs: u32,
    /// Element type of A and B.
    pub input: InType,
    /// Storage order of B it reads.
    pub b_layout: Layout,
    /// Element type of C it writes.
    pub out: OutType,
    /// Its tile configuration.
    pub config: KernelConfig,
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

impl Kernel {
    pub(crate) fn report(&self, module: &'static str) -> Result<KernelReport> {
        let attr = |a| self.func.get_attribute(a).map_err(cuda("cuFuncGetAttribute"));
        let config = self.config();
        Ok(KernelReport {
            name: self.variant.name,
            module,
            bs: self.variant.bs,
            input: self.variant.input,
            b_layout: self.variant.b_layout,
            out: self.variant.out,
            config,
            threads: config.threads(),
            registers: attr(CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
            static_smem: attr(CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?,
            local_bytes: attr(CUfunction_attribute::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?,
            dynamic_smem: config.smem_bytes(),
            ctas_per_sm: self.ctas_per_sm,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An image is decoded once per process: the frame [`predecode`] decodes is the one the load finds, however
    /// the module was reached (as `const`s, each use had its own copy of the bytes and every load decoded again,
    /// 12-18 ms per cubin on an H200's host).
    #[test]
    fn an_image_is_decoded_once_per_process() {
        predecode(9, 0);
        let hopper = hopper_module(9, 0).expect("the sm_90a module serves 9.0");
        let product = product_module(9, 0).expect("the product module serves 9.0");
        let cubin = |m: &'static EmbeddedPtx| m.cubins.iter().find(|c| c.arch == "sm_90a").expect("an sm_90a cubin");
        let again = unpack(SM90A.name, cubin(&SM90A).bytes).unwrap();
        assert!(Arc::ptr_eq(&unpack(hopper.name, cubin(hopper).bytes).unwrap(), &again));
        let first = unpack(product.name, cubin(product).bytes).unwrap();
        assert!(Arc::ptr_eq(&first, &unpack(SM80.name, cubin(&SM80).bytes).unwrap()));
        assert_eq!(&first[..4], b"\x7fELF", "a cubin is an ELF image");
    }
}
