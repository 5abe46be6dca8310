//! The **read floor** of the decode grid: a kernel that does nothing but move a case's bytes, once. It reads as
//! many bytes as a product must read (A's values and indices, B) and writes as many as it must write (C), with
//! loads marked evict-first in L2 (as sparsek's A is: an access policy window), so that its time, measured like
//! the contenders', is what moving those bytes takes on this GPU with this method: launch and events included.
//! A target that the read floor itself misses is out of reach of any kernel measured that way; the decode grid
//! marks such targets.
//!
//! The kernel is PTX written here (ISA 8.0, sm_80, JIT-compiled for any sm_80+ GPU, like the empty kernel) and
//! shaped as the fastest plain read measured on these GPUs (docs/perf-notes.md, issue 12 step 14): CTAs of 4 warps,
//! each reading [`CTA_BYTES`] at once (every thread issues its [`LOADS`] 16-byte loads before using any), as many
//! CTAs as the bytes need, so the hardware deals them to the SMs as they free up. Each thread folds what it read
//! into one word (xor) and stores that word into its share of the output, so no load can be dropped.

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, DevicePtr, DriverError, LaunchConfig, PushKernelArg};
use serde::Serialize;

use crate::cuda::{load_kernel, poison};
use crate::error::{Error, Result};
use crate::measure::Measured;
use crate::runner::Contender;
use sparsek::gpu::Gpu;

/// The kernel's name.
pub const KERNEL: &str = "sparsek_read_floor";

/// The call a failed launch names.
pub const LAUNCH: &str = "cuLaunchKernel (sparsek_read_floor)";

/// Threads per CTA.
pub const THREADS: u32 = 128;

/// 16-byte loads (and stores) per thread, all issued before the first is used.
pub const LOADS: u32 = 16;

/// Bytes one CTA reads (and at most writes): 32 KiB.
pub const CTA_BYTES: u64 = (THREADS * LOADS * 16) as u64;

/// The kernel's PTX: `sparsek_read_floor(src, chunks, dst, out_chunks)` reads the `chunks` 16-byte chunks at `src`
/// (evict-first in L2, not allocated in L1) and writes the first `out_chunks` 16-byte chunks at `dst`. CTA `c`,
/// thread `t` handles chunks `c * THREADS * LOADS + t + THREADS * j` for `j < LOADS` of each: a warp's loads cover
/// 512 contiguous bytes.
pub fn ptx() -> String {
    use std::fmt::Write as _;
    let per_cta = THREADS * LOADS;
    let mut s = String::new();
    s.push_str(".version 8.0\n.target sm_80\n.address_size 64\n\n");
    let _ = writeln!(
        s,
        ".visible .entry {KERNEL}(\n\t.param .u64 src,\n\t.param .u64 chunks,\n\t.param .u64 dst,\n\t\
         .param .u64 out_chunks\n)\n.maxntid {THREADS}, 1, 1\n{{"
    );
    let _ = writeln!(s, "\t.reg .pred %p;\n\t.reg .b32 %t, %c, %acc, %v<{}>;", 4 * LOADS);
    s.push_str("\t.reg .b64 %src, %n, %dst, %nout, %pol, %base, %idx, %addr;\n\n");
    s.push_str(
        "\tld.param.u64 %src, [src];\n\tld.param.u64 %n, [chunks];\n\tld.param.u64 %dst, [dst];\n\t\
         ld.param.u64 %nout, [out_chunks];\n\tcvta.to.global.u64 %src, %src;\n\tcvta.to.global.u64 %dst, %dst;\n\t\
         createpolicy.fractional.L2::evict_first.b64 %pol, 1.0;\n\tmov.u32 %t, %tid.x;\n\tmov.u32 %c, %ctaid.x;\n",
    );
    let _ = writeln!(s, "\tmul.wide.u32 %base, %c, {per_cta};\n\tcvt.u64.u32 %idx, %t;\n\tadd.u64 %base, %base, %idx;");
    for j in 0..LOADS {
        let v = 4 * j;
        let _ = writeln!(
            s,
            "\tmov.b32 %v{v}, 0;\n\tmov.b32 %v{}, 0;\n\tmov.b32 %v{}, 0;\n\tmov.b32 %v{}, 0;\n\t\
             add.u64 %idx, %base, {};\n\tsetp.lt.u64 %p, %idx, %n;\n\tmad.lo.u64 %addr, %idx, 16, %src;\n\t\
             @%p ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {{%v{v}, %v{}, %v{}, %v{}}}, [%addr], %pol;",
            v + 1,
            v + 2,
            v + 3,
            THREADS * j,
            v + 1,
            v + 2,
            v + 3
        );
    }
    s.push_str("\tmov.b32 %acc, %v0;\n");
    for v in 1..4 * LOADS {
        let _ = writeln!(s, "\txor.b32 %acc, %acc, %v{v};");
    }
    for j in 0..LOADS {
        let _ = writeln!(
            s,
            "\tadd.u64 %idx, %base, {};\n\tsetp.lt.u64 %p, %idx, %nout;\n\tmad.lo.u64 %addr, %idx, 16, %dst;\n\t\
             @%p st.global.v4.u32 [%addr], {{%acc, %acc, %acc, %acc}};",
            THREADS * j
        );
    }
    s.push_str("\tret;\n}\n");
    s
}

/// Loads the kernel into the GPU's context.
pub fn load(gpu: &Gpu) -> Result<CudaFunction> {
    load_kernel(gpu, &ptx(), KERNEL)
}

/// CTAs for `read` bytes read and `write` bytes written.
pub fn ctas(read: u64, write: u64) -> u64 {
    read.max(write).div_ceil(CTA_BYTES).max(1)
}

/// One measurement of the read floor.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ReadFloor {
    /// Bytes read per launch (rounded up to 16).
    pub read_bytes: u64,
    /// Bytes written per launch (rounded up to 16).
    pub write_bytes: u64,
    /// CTAs per launch.
    pub ctas: u64,
    /// Buffer pairs rotated through.
    pub sets: usize,
    /// Its times and `(read_bytes + write_bytes) / median time`, or why it was not measured.
    #[serde(flatten)]
    pub measured: Measured,
}

impl ReadFloor {
    /// Its median, when measured.
    pub fn median_us(&self) -> Option<f64> {
        self.measured.median_us()
    }
}

/// The read floor's rotated (source, destination) pairs; sources hold non-zero bytes.
pub struct FloorSets {
    func: CudaFunction,
    pairs: Vec<(CudaSlice<u8>, CudaSlice<u8>)>,
    chunks: u64,
    out_chunks: u64,
    /// Why its last launch failed, so that a failed timing can be told apart from the contenders' failures.
    pub failure: Option<String>,
}

impl FloorSets {
    /// `depth` pairs (at least one) of a source of `read` bytes and a destination of `write` bytes, each rounded
    /// up to 16, or why they could not be allocated.
    pub fn new(gpu: &Gpu, func: CudaFunction, read: u64, write: u64, depth: usize) -> Result<FloorSets> {
        let (read, write) = (read.next_multiple_of(16), write.next_multiple_of(16));
        let len = |bytes: u64| Error::fit::<usize>("the read floor's bytes", bytes.max(16), "this host's usize");
        let (src_len, dst_len) = (len(read)?, len(write)?);
        let stream = gpu.stream();
        let mut pairs = Vec::with_capacity(depth.max(1));
        for _ in 0..depth.max(1) {
            let alloc = |what: &str, n: usize| {
                let what = format!("the read floor's {what}");
                stream.alloc_zeros::<u8>(n).map_err(|source| Error::Alloc { what, bytes: n as u64, source })
            };
            let (mut src, dst) = (alloc("source", src_len)?, alloc("destination", dst_len)?);
            poison(gpu, src.as_view_mut())?;
            pairs.push((src, dst));
        }
        Ok(FloorSets { func, pairs, chunks: read / 16, out_chunks: write / 16, failure: None })
    }

    /// CTAs per launch.
    pub fn ctas(&self) -> u64 {
        ctas(16 * self.chunks, 16 * self.out_chunks)
    }

    /// The launch's shape: [`FloorSets::ctas`] CTAs of [`THREADS`] threads.
    fn shape(&self) -> LaunchConfig {
        let grid = u32::try_from(self.ctas()).unwrap_or(u32::MAX);
        LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 }
    }

    /// Every pair's (source, destination) device addresses, for [`FloorSets::queue_raw`]. Each buffer's pending
    /// work on the GPU's stream is ordered before what that stream runs next, as for any use of it there.
    pub fn addresses(&self, gpu: &Gpu) -> Vec<(CUdeviceptr, CUdeviceptr)> {
        let stream = gpu.stream();
        self.pairs.iter().map(|(src, dst)| (src.device_ptr(stream).0, dst.device_ptr(stream).0)).collect()
    }

    /// Queues one launch reading at `src` and writing at `dst` (a pair of [`FloorSets::addresses`]) on `stream`,
    /// with no buffer event recorded or waited on: a launch that a graph capture can take.
    ///
    /// # Safety
    /// `src` and `dst` must be a pair of [`FloorSets::addresses`] of `self`, alive (not dropped) and not used by
    /// other work until the launch (or a graph that captured it) has run; `stream` must be of the GPU's context.
    pub unsafe fn queue_raw(
        &self,
        stream: &CudaStream,
        (src, dst): (CUdeviceptr, CUdeviceptr),
    ) -> std::result::Result<(), DriverError> {
        let mut b = stream.launch_builder(&self.func);
        b.arg(&src).arg(&self.chunks).arg(&dst).arg(&self.out_chunks);
        // SAFETY: the caller's contract: `src` holds `chunks` 16-byte chunks and `dst` `out_chunks` (the pair's
        // allocations); the grid covers both counts.
        unsafe { b.launch(self.shape()) }.map(drop)
    }

    /// Queues one launch on pair `set` on the GPU's stream.
    pub fn queue(&mut self, gpu: &Gpu, set: usize) -> std::result::Result<(), DriverError> {
        let shape = self.shape();
        let (src, dst) = &mut self.pairs[set];
        let stream = gpu.stream();
        let mut b = stream.launch_builder(&self.func);
        b.arg(&*src).arg(&self.chunks).arg(dst).arg(&self.out_chunks);
        // SAFETY: the kernel reads `chunks` 16-byte chunks of `src` and writes `out_chunks` of `dst`, both
        // allocations of at least that many bytes on this stream; the grid covers both counts.
        unsafe { b.launch(shape) }.map(drop)
    }
}

impl Contender for FloorSets {
    /// Queues one launch on pair `set` on the GPU's stream.
    fn launch(&mut self, gpu: &Gpu, set: usize) -> Result<()> {
        let r = self.queue(gpu, set).map_err(Error::driver(LAUNCH));
        if let Err(e) = &r {
            self.failure = Some(e.to_string());
        }
        r
    }

    fn sets(&self) -> usize {
        self.pairs.len().max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_covers_the_larger_side() {
        assert_eq!(CTA_BYTES, 32 * 1024);
        assert_eq!(ctas(0, 0), 1);
        assert_eq!(ctas(1, 0), 1);
        assert_eq!(ctas(CTA_BYTES, 16), 1);
        assert_eq!(ctas(CTA_BYTES + 16, 16), 2);
        assert_eq!(ctas(16, 3 * CTA_BYTES), 3);
    }

    /// Where ptxas is, as xtask finds it: $SPARSEK_PTXAS, then the workspace's .tools/, then PATH.
    fn ptxas() -> Option<std::path::PathBuf> {
        if let Some(p) = std::env::var_os("SPARSEK_PTXAS") {
            return Some(p.into());
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent()?;
        let local = root.join(".tools/ptxas/nvidia/cu13/bin/ptxas");
        if local.is_file() {
            return Some(local);
        }
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path).map(|d| d.join("ptxas")).find(|p| p.is_file())
    }

    /// The PTX assembles for sm_80 and sm_90 without spills, and every load and store is there.
    #[test]
    fn ptx_assembles() {
        let text = ptx();
        assert_eq!(text.matches("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32").count(), LOADS as usize);
        assert_eq!(text.matches("st.global.v4.u32").count(), LOADS as usize);
        let Some(ptxas) = ptxas() else {
            eprintln!("skipping the ptxas check: no ptxas ($SPARSEK_PTXAS, .tools/ or PATH)");
            return;
        };
        let dir = std::env::temp_dir().join(format!("sparsek-read-floor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("floor.ptx");
        std::fs::write(&src, &text).unwrap();
        for arch in ["sm_80", "sm_90"] {
            let out = std::process::Command::new(&ptxas)
                .args(["-v", "-arch", arch, "-o"])
                .arg(dir.join(format!("floor.{arch}.cubin")))
                .arg(&src)
                .output()
                .unwrap();
            let log = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "ptxas {arch} failed:\n{log}");
            assert!(log.contains("0 bytes spill stores"), "ptxas {arch}:\n{log}");
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
