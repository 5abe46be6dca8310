//! `sparsek bench --decode`: the decode and small-problem grid of issue 12, where a product does few flops per byte
//! moved and is bound by memory or by the launch, not by the tensor cores. Each case is measured with the method
//! of the main benchmark, on two contenders:
//!
//! 1. `sparsek-f16`: [`Gpu::spmm`] with f16 A (BSR) and B row-major, and an f32 C (the main benchmark's sparsek
//!    contender);
//! 2. cuBLAS dense f16 GEMM of the same M, N, K on A expanded to dense, f32 accumulation and output
//!    (`cublasGemmEx`, the main benchmark's baseline).
//!
//! Each contender's C is poisoned, computed once and compared with the f64 oracle (sampled rows, the library's
//! [`Expected`]) before it is timed; then both are timed interleaved launch by launch, each launch between its
//! own pair of CUDA events, each on the next of its rotated input sets: enough identical sets that together
//! they span at least twice the GPU's L2 ([`rotation_depth`]), so no launch finds its operands in L2. The median
//! of at least [`MIN_ITERS`] launches after the warm-up is reported.
//!
//! Two references are measured once per run, before the cases, on the same GPU and stream:
//!
//! - the device-to-device copy bandwidth: `cuMemcpyDtoDAsync` of a buffer of [`COPY_BYTES`] (or 4x L2 when that
//!   is larger; halved while the allocation runs out of memory, down to 2x L2), each copy between its own pair
//!   of events; bandwidth = bytes read + bytes written = 2 x size, over the median time;
//! - an empty kernel launch: a PTX kernel whose body is `ret`, 1 CTA of 32 threads, timed like the contenders.
//!   When a launch is shorter than the host's time to queue the next, the stream idles between the start event
//!   and the kernel, so the event time includes the host's queuing; the empty launch and the contenders are
//!   measured alike, which is what makes their ratio meaningful;
//! - the same empty launch **queued** ([`queued`]): [`queued::BATCH`] launches behind a kernel that holds the
//!   stream while the host queues them, timed between one pair of events; per launch, this is the GPU's own
//!   time, without the host's.
//!
//! - the **read bandwidth**: the read floor kernel ([`floor`]) reading a buffer as large as the copy's, writing
//!   nothing, timed like the copy.
//!
//! Per case, a third item is timed in the same interleaved loop: the **same-size copy**, `cuMemcpyDtoDAsync`
//! of half the case's bytes moved (so that read + written equals them), over its own rotated buffer pairs. A
//! launch of a few tens of MB pays a fixed ramp (measured on an H100: a copy moving 30 MB reaches 63% of the
//! 1 GiB copy's bandwidth, with about 6 µs of fixed cost per copy: docs/perf-notes.md, issue 12 step 4), so the
//! 1 GiB figure is out of reach for any small transfer; the same-size copy is the floor at the case's size. The
//! issue's targets stay on the 1 GiB copy; the fraction of the same-size copy is reported beside them. And a
//! fourth: the **read floor** ([`floor`]), a kernel reading the bytes sparsek must read (A's values and indices, B)
//! and writing those it must write (C), and nothing else, over its own rotated buffers. A copy reads half the
//! bytes and writes half; the read floor moves them as the product does, so its time is what any kernel measured
//! this way needs. Each target is also judged on the read floor's time: one that the read floor misses is out of
//! reach of any kernel under this method (`MISSED, read floor too` in the table, counted in the summary).
//!
//! Per case:
//!
//! - **bytes moved** ([`BytesMoved`]): what any implementation must move once: A's values (`nnzb * bs^2 * 2`),
//!   A's indices as sparsek uploads them (u32 `row_ptr`, `M / bs + 1` entries, and `col_idx`, `nnzb` entries), B
//!   (`K * N * 2`) read, C (`M * N * 4`) written (beta = 0: C is not read). Device padding of B's and C's rows to
//!   16 bytes and sparsek's own block-row schedule are not counted;
//! - **achieved bandwidth**: bytes moved / sparsek's median time, and its **fraction of the copy bandwidth**;
//! - **speedup over cuBLAS**: cuBLAS's median time / sparsek's;
//! - **launch ratio**: sparsek's median time / the empty launch's;
//! - **queued**: sparsek's time per launch queued behind the hold like the empty launch, and its ratio to the
//!   queued empty launch (what the GPU spends per product, without the host: for the small shapes, what bounds
//!   the launch ratio);
//! - **queued, programmatic** (where the GPU has programmatic dependent launch and the run's own launches are
//!   plain): the same through a second `Gpu` whose launches may start under the one before
//!   (`Gpu::with_programmatic_launch`), its output checked bit for bit against the plain launches';
//! - **graph**: sparsek's time per launch replayed from a CUDA graph of [`queued::BATCH`] captured launches (global
//!   mode, as `torch.cuda.graph`; what `torch.compile(mode="reduce-overhead")` replays), its output checked against
//!   the oracle; and the same through the programmatic `Gpu` where that is measured;
//! - the **targets** of issue 12 that apply to the case ([`targets`]) and whether each is met. A missed target
//!   is reported, not an error; a failed sparsek check (or sparsek not running) fails the run.
//!
//! Figures come only from times whose output passed its check. The results go to `OUT_DIR/decode.json`
//! (rewritten after the references and after every case) and `OUT_DIR/decode.md`, and the table to stdout.

use std::fmt::Write as _;

use cudarc::driver::sys::CUresult;
use cudarc::driver::{CudaFunction, CudaSlice, DriverError, LaunchConfig};
use cudarc::nvrtc::Ptx;
use half::f16;
use serde::Serialize;

use crate::cublas::{self, Cublas};
use crate::floor::{self, FloorSets, ReadFloor};
use crate::grid::{Case, Source, percent};
use crate::json::round_sig;
use crate::poison;
use crate::queued::{self, Hold, Queued};
use crate::report::{Check, Header, Timing};
use crate::runner::{Contender, time_interleaved};
use sparsek::Epilogue;
use sparsek::check::{CheckReport, Expected};
use sparsek::error::{Error, Result};
use sparsek::format::{Bsr, Pattern};
use sparsek::gpu::timing::EventTimer;
use sparsek::gpu::{DeviceBsr, DeviceMatrix, Gpu};
use sparsek::matrix::Matrix;

pub use crate::side::MIN_ITERS;

/// The size of the copy that measures the copy bandwidth, unless 4x L2 is larger.
pub const COPY_BYTES: u64 = 1 << 30;

/// The most input sets one contender rotates through. Every default case reaches 2x L2 well below it; the sets
/// of a `--case` whose launch moves less than 2x L2 / `MAX_SETS` span less (`rotated_bytes` in the JSON).
pub const MAX_SETS: usize = 1024;

/// The large shapes (M x K) of issue 12, with their block sizes, densities and N.
const LARGE_SHAPES: [(usize, usize); 2] = [(8192, 8192), (16384, 16384)];
const LARGE_BS: [usize; 2] = [64, 128];
const LARGE_DENSITIES: [f64; 2] = [0.10, 0.22];
const LARGE_N: [usize; 5] = [1, 8, 16, 32, 64];
/// The small shapes (M x K) of issue 12, with their block sizes, densities and N.
const SMALL_SHAPES: [(usize, usize); 2] = [(1536, 384), (384, 1536)];
const SMALL_BS: [usize; 2] = [32, 64];
const SMALL_DENSITIES: [f64; 2] = [0.25, 0.50];
const SMALL_N: [usize; 3] = [1, 16, 512];

/// The empty kernel's name and PTX (ISA 8.0, sm_80, as the product module: JIT-compiled for any sm_80+ GPU).
const EMPTY_KERNEL: &str = "sparsek_empty";
const EMPTY_PTX: &str =
    ".version 8.0\n.target sm_80\n.address_size 64\n\n.visible .entry sparsek_empty()\n{\n\tret;\n}\n";

/// Every combination of `shapes` (M x K), block sizes, densities and N, uniform.
fn grid(shapes: &[(usize, usize)], bss: &[usize], densities: &[f64], ns: &[usize]) -> Vec<Case> {
    let mut cases = Vec::new();
    for &(m, k) in shapes {
        for &bs in bss {
            for &density in densities {
                for &n in ns {
                    cases.push(Case::synthetic(m, n, k, bs, density, Pattern::Uniform));
                }
            }
        }
    }
    cases
}

/// The default cases (64, uniform): M x K 8192 x 8192 and 16384 x 16384 at bs 64 and 128, density 10% and
/// 22%, N 1, 8, 16, 32 and 64; then 1536 x 384 and 384 x 1536 at bs 32 and 64, density 25% and 50%, N 1, 16
/// and 512.
pub fn default_cases() -> Vec<Case> {
    let mut cases = grid(&LARGE_SHAPES, &LARGE_BS, &LARGE_DENSITIES, &LARGE_N);
    cases.extend(grid(&SMALL_SHAPES, &SMALL_BS, &SMALL_DENSITIES, &SMALL_N));
    cases
}

/// The `--quick` cases (4): 8192 x 8192 bs 64 22% and 1536 x 384 bs 64 50%, each at N 1 and 16.
pub fn quick_cases() -> Vec<Case> {
    let mut cases = grid(&[(8192, 8192)], &[64], &[0.22], &[1, 16]);
    cases.extend(grid(&[(1536, 384)], &[64], &[0.50], &[1, 16]));
    cases
}

/// Input sets to rotate through for a contender whose one set moves `set_bytes`: enough that together they span
/// at least 2x L2, at most [`MAX_SETS`]; one when a set alone is that large. ([`crate::rotation_sets`] stops at
/// 128 sets, which would leave the small shapes' sets of a few hundred KB in L2.)
pub fn rotation_depth(set_bytes: u64, l2_bytes: u64) -> usize {
    let target = 2 * u128::from(l2_bytes);
    let set = u128::from(set_bytes.max(1));
    if set >= target { 1 } else { target.div_ceil(set).min(MAX_SETS as u128) as usize }
}

/// The bytes one product must move: A read once, B read once, C written once (see the module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BytesMoved {
    /// A's values: `nnzb * bs^2 * 2` (f16).
    pub a_values: u64,
    /// A's u32 indices: `row_ptr` (`M / bs + 1` entries) and `col_idx` (`nnzb` entries), 4 bytes each.
    pub a_indices: u64,
    /// B: `K * N * 2` (f16).
    pub b: u64,
    /// C: `M * N * 4` (f32, written; beta = 0, so not read).
    pub c: u64,
    /// The sum.
    pub total: u64,
}

impl BytesMoved {
    /// The bytes of a product of an `m x k` BSR A with `nnzb` blocks of `bs x bs` by a `k x n` B.
    pub fn new(m: usize, n: usize, k: usize, bs: usize, nnzb: usize) -> BytesMoved {
        let [m, n, k, bs, nnzb] = [m, n, k, bs, nnzb].map(|v| v as u64);
        let a_values = nnzb * bs * bs * 2;
        let a_indices = (m / bs.max(1) + 1) * 4 + nnzb * 4;
        let (b, c) = (k * n * 2, m * n * 4);
        BytesMoved { a_values, a_indices, b, c, total: a_values + a_indices + b + c }
    }
}

/// The figure a target is set on; its JSON name is the record's field holding it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Figure {
    /// Achieved bandwidth / measured copy bandwidth: the target is a minimum.
    CopyFraction,
    /// cuBLAS time / sparsek time: the target is a minimum.
    SpeedupVsCublas,
    /// sparsek time / empty launch time: the target is a maximum.
    LaunchRatio,
}

impl Figure {
    /// Whether `value` meets the target `bound`.
    pub fn meets(self, value: f64, bound: f64) -> bool {
        match self {
            Figure::CopyFraction | Figure::SpeedupVsCublas => value >= bound,
            Figure::LaunchRatio => value <= bound,
        }
    }

    /// `copy ≥ 80%`, `speedup ≥ 3.64x`, `≤ 2x empty launch`.
    fn target_text(self, bound: f64) -> String {
        match self {
            Figure::CopyFraction => format!("copy ≥ {}", percent(bound)),
            Figure::SpeedupVsCublas => format!("speedup ≥ {bound:.2}x"),
            Figure::LaunchRatio => format!("≤ {bound}x empty launch"),
        }
    }

    /// `value` as the table shows it.
    fn value_text(self, value: f64) -> String {
        match self {
            Figure::CopyFraction => format!("{:.1}%", 100.0 * value),
            Figure::SpeedupVsCublas | Figure::LaunchRatio => format!("{value:.2}x"),
        }
    }
}

/// Issue 12's targets for `case`, as (figure, bound):
///
/// - M x K 8192 x 8192 or 16384 x 16384, bs 64 or 128, density 10% to 22%: copy fraction at least 0.8 for N 1,
///   8 and 16, at least 0.7 for N 32 and 64; and for those N a speedup over cuBLAS of at least 0.8 / density
///   (the requested density);
/// - M x K 1536 x 384 or 384 x 1536, bs 32 or 64, density 25% to 50%, N 1, 16 or 512: at most 2x the empty
///   launch's time.
///
/// Any other case has none (it is measured and reported without a verdict).
pub fn targets(case: &Case) -> Vec<(Figure, f64)> {
    let within = |lo: f64, hi: f64| (lo - 1e-9..=hi + 1e-9).contains(&case.density);
    let shape = (case.m, case.k);
    if LARGE_SHAPES.contains(&shape) && LARGE_BS.contains(&case.bs) && within(0.10, 0.22) {
        let fraction = match case.n {
            1 | 8 | 16 => 0.8,
            32 | 64 => 0.7,
            _ => return Vec::new(),
        };
        return vec![(Figure::CopyFraction, fraction), (Figure::SpeedupVsCublas, round_sig(0.8 / case.density, 6))];
    }
    if SMALL_SHAPES.contains(&shape) && SMALL_BS.contains(&case.bs) && within(0.25, 0.50) && SMALL_N.contains(&case.n) {
        return vec![(Figure::LaunchRatio, 2.0)];
    }
    Vec::new()
}

/// What to run and where to write it (`decode.json` and `decode.md` go into `out_dir`).
pub type DecodeConfig = crate::side::SideConfig;

/// Launch times in microseconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Times {
    /// Median.
    pub median_us: f64,
    /// Fastest launch.
    pub min_us: f64,
    /// Slowest launch.
    pub max_us: f64,
    /// Timed launches.
    pub samples: usize,
}

impl Times {
    /// The statistics of event times in milliseconds (`None` when there are none).
    pub(crate) fn from_ms(samples: &[f32]) -> Option<Times> {
        let t = Timing::from_samples(samples)?;
        let us = |ms: f64| round_sig(ms * 1e3, 6);
        Some(Times { median_us: us(t.median_ms), min_us: us(t.min_ms), max_us: us(t.max_ms), samples: t.samples })
    }
}

/// The measured device-to-device copy bandwidth.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CopyBandwidth {
    /// Bytes per copy (the source's size; the destination is as large). 0 when nothing could be allocated.
    pub bytes: u64,
    /// Times of `cuMemcpyDtoDAsync`.
    pub time: Option<Times>,
    /// `2 * bytes / median time` (read + written), in GB/s (1e9 bytes).
    pub gbps: Option<f64>,
    /// Why it was not measured.
    pub error: Option<String>,
}

/// The measured time of an empty kernel launch.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EmptyLaunch {
    /// What was launched.
    pub kernel: String,
    /// Its times.
    pub time: Option<Times>,
    /// Why it was not measured (the PTX was refused, the launch failed).
    pub error: Option<String>,
}

/// The same-size copy of one case: `cuMemcpyDtoDAsync` of half its bytes moved, timed with the contenders.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SameSizeCopy {
    /// Bytes per copy (the source's size; the destination is as large): half the case's bytes moved, rounded up
    /// to 16.
    pub bytes: u64,
    /// Buffer pairs rotated through.
    pub sets: usize,
    /// Its times.
    pub time: Option<Times>,
    /// `2 * bytes / median time` (read + written), in GB/s (1e9 bytes).
    pub gbps: Option<f64>,
    /// Why it was not measured.
    pub error: Option<String>,
}

/// The references measured once per run, before the cases.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct References {
    /// The device-to-device copy bandwidth.
    pub copy: CopyBandwidth,
    /// The empty launch.
    pub empty_launch: EmptyLaunch,
    /// The empty launch queued behind the hold ([`queued`]): the GPU's own time per launch.
    pub queued_empty_launch: Queued,
    /// The read floor kernel ([`floor`]) reading a buffer as large as the copy's, writing nothing: the read
    /// bandwidth, beside the copy's.
    pub read: ReadFloor,
}

impl References {
    /// The empty launch's median, if measured.
    fn empty_us(&self) -> Option<f64> {
        self.empty_launch.time.as_ref().map(|t| t.median_us).filter(|&t| t > 0.0)
    }
}

/// The contenders, in the order of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// `Gpu::spmm`, f16 A and B row-major, f32 C row-major.
    Sparsek,
    /// cuBLAS dense f16 GEMM, f32 C.
    Cublas,
}

impl Form {
    /// Every contender, in table order.
    pub const ALL: [Form; 2] = [Form::Sparsek, Form::Cublas];

    /// The name in the JSON and the progress lines.
    pub fn name(self) -> &'static str {
        match self {
            Form::Sparsek => "sparsek-f16",
            Form::Cublas => cublas::KIND,
        }
    }

    /// What it runs, in words.
    pub fn description(self) -> &'static str {
        match self {
            Form::Sparsek => "Gpu::spmm: f16 A (BSR), f16 B row-major, f32 C row-major",
            Form::Cublas => "cublasGemmEx: dense f16 A and B, f32 C, CUBLAS_COMPUTE_32F",
        }
    }
}

/// One contender's result in one case.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ContenderResult {
    /// [`Form::name`].
    pub name: String,
    /// [`Form::description`].
    pub description: String,
    /// The check of its output against the oracle, if it ran.
    pub check: Option<Check>,
    /// Its launch times, if timed.
    pub time: Option<Times>,
    /// Input sets rotated through (each a separate copy of every operand a launch reads).
    pub sets: usize,
    /// `sets` times the bytes one launch moves (for cuBLAS: dense A, B and C): at least 2x L2 unless capped by
    /// [`MAX_SETS`].
    pub rotated_bytes: u64,
    /// Why it did not run or was not timed.
    pub error: Option<String>,
}

impl ContenderResult {
    fn new(form: Form) -> Self {
        ContenderResult {
            name: form.name().into(),
            description: form.description().into(),
            check: None,
            time: None,
            sets: 0,
            rotated_bytes: 0,
            error: None,
        }
    }

    /// Whether it ran and its output passed its check.
    pub fn passed(&self) -> bool {
        self.error.is_none() && self.check.as_ref().is_some_and(|c| c.passed)
    }

    /// The median time, when the output passed its check (a failed check makes the time untrusted).
    pub fn trusted_us(&self) -> Option<f64> {
        self.time.as_ref().map(|t| t.median_us).filter(|&t| t > 0.0 && self.passed())
    }
}

/// One target of a case and its verdict.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Goal {
    /// The figure it is set on.
    pub figure: Figure,
    /// The bound: a minimum for `copy_fraction` and `speedup_vs_cublas`, a maximum for `launch_ratio`.
    pub bound: f64,
    /// Whether the figure meets it; `None` when the figure could not be measured.
    pub met: Option<bool>,
    /// Whether the read floor's time would meet it (the figure computed from the read floor's median instead of
    /// sparsek's): `Some(false)` marks a target out of reach of any kernel measured this way. `None` when the
    /// read floor was not measured.
    pub floor_met: Option<bool>,
}

/// One case's results.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DecodeRecord {
    /// The case (flattened into the record's JSON).
    #[serde(flatten)]
    pub facts: crate::side::CaseFacts,
    /// The bytes one product must move.
    pub bytes: BytesMoved,
    /// sparsek's result.
    pub sparsek: ContenderResult,
    /// cuBLAS's result.
    pub cublas: ContenderResult,
    /// The copy of the same bytes, timed with the contenders.
    pub same_size_copy: SameSizeCopy,
    /// `bytes.total / sparsek's median`, GB/s.
    pub achieved_gbps: Option<f64>,
    /// `achieved_gbps / copy.gbps`.
    pub copy_fraction: Option<f64>,
    /// `achieved_gbps / same_size_copy.gbps` (the copy's time over sparsek's, up to the 16-byte rounding).
    pub same_size_copy_fraction: Option<f64>,
    /// The read floor ([`floor`]): a kernel moving the case's bytes once, timed with the contenders.
    pub read_floor: ReadFloor,
    /// The read floor's median / sparsek's: how close sparsek is to moving the bytes and nothing else.
    pub read_floor_fraction: Option<f64>,
    /// The read floor queued behind the hold like [`DecodeRecord::sparsek_queued`]: the GPU's own time to move the
    /// bytes, without the host's.
    pub read_floor_queued: Queued,
    /// cuBLAS's median / sparsek's.
    pub speedup_vs_cublas: Option<f64>,
    /// sparsek's median / the empty launch's.
    pub launch_ratio: Option<f64>,
    /// sparsek queued behind the hold ([`queued`]): the GPU's own time per launch.
    pub sparsek_queued: Queued,
    /// sparsek's queued time / the queued empty launch's.
    pub queued_launch_ratio: Option<f64>,
    /// sparsek queued as [`DecodeRecord::sparsek_queued`], launched with programmatic dependent launch
    /// (`Gpu::with_programmatic_launch`): each launch may start under the one before it. Its output must have the
    /// plain launches' bits, else this is a failure. `None` when not measured (a GPU without it, or a run whose
    /// launches are all programmatic).
    pub sparsek_queued_programmatic: Option<Queued>,
    /// sparsek replayed from a CUDA graph (`graph_replayed`): [`queued::BATCH`] launches captured once, the
    /// graph's time per launch. Its output must pass the oracle's check. `None` when not measured.
    pub sparsek_graph: Option<Queued>,
    /// As [`DecodeRecord::sparsek_graph`] through the programmatic `Gpu` (measured where
    /// [`DecodeRecord::sparsek_queued_programmatic`] is).
    pub sparsek_graph_programmatic: Option<Queued>,
    /// The targets that apply ([`targets`]) and their verdicts.
    pub goals: Vec<Goal>,
    /// SM clock read by nvidia-smi right after the timed loop.
    pub sm_clock_mhz: Option<u32>,
    /// Set when the case could not be run at all (operands, oracle, timing).
    pub error: Option<String>,
}

/// `num / den` to 6 significant digits, when both are known and `den` is positive.
fn ratio(num: Option<f64>, den: Option<f64>) -> Option<f64> {
    Some(round_sig(num? / den.filter(|&d| d > 0.0)?, 6))
}

impl DecodeRecord {
    fn new(case: &Case, seed: u64) -> Self {
        DecodeRecord {
            facts: crate::side::CaseFacts::new(case, seed),
            bytes: BytesMoved::default(),
            sparsek: ContenderResult::new(Form::Sparsek),
            cublas: ContenderResult::new(Form::Cublas),
            same_size_copy: SameSizeCopy::default(),
            achieved_gbps: None,
            copy_fraction: None,
            same_size_copy_fraction: None,
            read_floor: ReadFloor::default(),
            read_floor_fraction: None,
            read_floor_queued: Queued::default(),
            speedup_vs_cublas: None,
            launch_ratio: None,
            sparsek_queued: Queued::default(),
            queued_launch_ratio: None,
            sparsek_queued_programmatic: None,
            sparsek_graph: None,
            sparsek_graph_programmatic: None,
            goals: Vec::new(),
            sm_clock_mhz: None,
            error: None,
        }
    }

    fn contender_mut(&mut self, form: Form) -> &mut ContenderResult {
        match form {
            Form::Sparsek => &mut self.sparsek,
            Form::Cublas => &mut self.cublas,
        }
    }

    /// The value of `figure`.
    pub fn figure(&self, figure: Figure) -> Option<f64> {
        match figure {
            Figure::CopyFraction => self.copy_fraction,
            Figure::SpeedupVsCublas => self.speedup_vs_cublas,
            Figure::LaunchRatio => self.launch_ratio,
        }
    }

    /// Fills in the figures from the trusted times and the references, and the verdict on each of `case`'s
    /// targets.
    fn evaluate(&mut self, case: &Case, refs: &References) {
        let sparsek = self.sparsek.trusted_us();
        self.achieved_gbps = ratio(Some(self.bytes.total as f64 / 1e3), sparsek);
        self.copy_fraction = ratio(self.achieved_gbps, refs.copy.gbps);
        let copy = &mut self.same_size_copy;
        copy.gbps = ratio(Some(2.0 * copy.bytes as f64 / 1e3), copy.time.as_ref().map(|t| t.median_us));
        self.same_size_copy_fraction = ratio(self.achieved_gbps, self.same_size_copy.gbps);
        self.speedup_vs_cublas = ratio(self.cublas.trusted_us(), sparsek);
        self.launch_ratio = ratio(sparsek, refs.empty_us());
        let queued = self.sparsek_queued.median_us().filter(|_| self.sparsek.passed());
        self.queued_launch_ratio = ratio(queued, refs.queued_empty_launch.median_us());
        let floor = self.read_floor.median_us();
        self.read_floor.gbps =
            ratio(Some((self.read_floor.read_bytes + self.read_floor.write_bytes) as f64 / 1e3), floor);
        self.read_floor_fraction = ratio(floor, sparsek);
        let floor_figure = |figure: Figure| -> Option<f64> {
            match figure {
                Figure::CopyFraction => ratio(ratio(Some(self.bytes.total as f64 / 1e3), floor), refs.copy.gbps),
                Figure::SpeedupVsCublas => ratio(self.cublas.trusted_us(), floor),
                Figure::LaunchRatio => ratio(floor, refs.empty_us()),
            }
        };
        self.goals = targets(case)
            .into_iter()
            .map(|(figure, bound)| Goal {
                figure,
                bound,
                met: self.figure(figure).map(|v| figure.meets(v, bound)),
                floor_met: floor_figure(figure).map(|v| figure.meets(v, bound)),
            })
            .collect();
    }

    /// Whether the case ran and sparsek's output passed its check.
    pub fn sparsek_passed(&self) -> bool {
        self.error.is_none() && self.sparsek.passed()
    }
}

/// What a run found.
#[derive(Debug)]
pub struct DecodeSummary {
    /// Facts about the run.
    pub header: Header,
    /// The copy bandwidth and the empty launch.
    pub references: References,
    /// One record per case.
    pub records: Vec<DecodeRecord>,
    /// Every case ran and sparsek passed every check.
    pub all_passed: bool,
}

/// Measures the references, then runs every case of `cfg` on `gpu`, printing progress on stderr and the table on
/// stdout, and writes `decode.json` and `decode.md` into `cfg.out_dir`. Errors only when an output cannot be
/// written; a case that fails is recorded with its error.
///
/// With `programmatic` (a second `Gpu` on the same context, with the same settings and programmatic launches), sparsek
/// is also timed queued through it ([`DecodeRecord::sparsek_queued_programmatic`]).
pub fn run(gpu: &Gpu, programmatic: Option<&Gpu>, cfg: &DecodeConfig) -> Result<DecodeSummary> {
    let crate::side::Opened { header, cublas: lib, iters } = crate::side::open(gpu, cfg, "decode")?;
    let json_path = cfg.out_dir.join("decode.json");

    let hold = Hold::load(gpu);
    let floor_kernel = floor::load(gpu);
    let copy = measure_copy(gpu, cfg.warmup, iters);
    let references = References {
        read: measure_read(gpu, &floor_kernel, copy.bytes, cfg.warmup, iters),
        copy,
        empty_launch: measure_empty_launch(gpu, cfg.warmup, iters),
        queued_empty_launch: measure_queued_empty_launch(gpu, &hold),
    };
    eprintln!("  copy bandwidth: {}", copy_text(&references.copy));
    eprintln!("  read bandwidth: {}", read_text(&references.read, &references.copy));
    eprintln!("  empty launch: {}", empty_text(&references.empty_launch));
    eprintln!("  empty launch, queued: {}", queued_text(&references.queued_empty_launch));
    let mut records = Vec::with_capacity(cfg.cases.len());
    crate::side::write(&json_path, to_json(&header, &references, &records, cfg.cases.is_empty())?.as_bytes())?;
    for (i, case) in cfg.cases.iter().enumerate() {
        let tag = format!("case {}/{}", i + 1, cfg.cases.len());
        let rec = run_case((gpu, programmatic), (&lib, &floor_kernel), &hold, cfg, iters, case, &references, &tag);
        eprintln!("{tag} {}", progress_line(&rec));
        records.push(rec);
        crate::side::write(&json_path, to_json(&header, &references, &records, i + 1 == cfg.cases.len())?.as_bytes())?;
    }
    drop(lib);

    let report = markdown(&header, &references, &records);
    println!("{report}");
    let md_path = cfg.out_dir.join("decode.md");
    crate::side::write(&md_path, report.as_bytes())?;
    eprintln!("wrote {}", md_path.display());
    eprintln!("wrote {}", json_path.display());
    for r in records.iter().filter(|r| !r.sparsek_passed()) {
        let why = r.error.clone().or_else(|| r.sparsek.error.clone());
        let why = why.or_else(|| r.sparsek.check.as_ref().map(|k| k.detail.clone()));
        eprintln!("FAILED {}: {}", r.facts.case, why.unwrap_or_default());
    }
    let all_passed = records.iter().all(DecodeRecord::sparsek_passed);
    Ok(DecodeSummary { header, references, records, all_passed })
}

/// The whole run as pretty-printed JSON: `{"header": ..., "references": {"copy": ..., "empty_launch": ...},
/// "complete": bool, "records": [...]}` (the header as in `latest.json`).
pub fn to_json(header: &Header, references: &References, records: &[DecodeRecord], complete: bool) -> Result<String> {
    #[derive(Serialize)]
    struct Out<'a> {
        header: &'a Header,
        references: &'a References,
        complete: bool,
        records: &'a [DecodeRecord],
    }
    let mut s = serde_json::to_string_pretty(&Out { header, references, complete, records })
        .map_err(|e| Error::Io { path: "decode.json".into(), reason: format!("serializing the results: {e}") })?;
    s.push('\n');
    Ok(s)
}

fn is_out_of_memory(e: &DriverError) -> bool {
    e.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY
}

/// Times `cuMemcpyDtoDAsync` of [`COPY_BYTES`] (or 4x L2), halving the size while the two buffers do not fit,
/// down to 2x L2.
fn measure_copy(gpu: &Gpu, warmup: usize, iters: usize) -> CopyBandwidth {
    let l2 = gpu.info().l2_bytes;
    let floor = (2 * l2).max(1);
    let mut bytes = COPY_BYTES.max(4 * l2);
    let mut result = CopyBandwidth { bytes: 0, time: None, gbps: None, error: None };
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
                result.error = Some(format!("allocating two buffers of {bytes} bytes: {e}"));
                return result;
            }
        }
    };
    result.bytes = bytes;
    // A non-zero source, so that nothing could profit from copying zeros.
    if let Err(e) = poison(gpu, src.as_view_mut()) {
        result.error = Some(e);
        return result;
    }
    let timer = EventTimer::new(stream);
    let copy = || stream.memcpy_dtod(&src, &mut dst).map_err(|source| Error::Cuda { op: "cuMemcpyDtoDAsync", source });
    match timer.time(warmup, iters, copy) {
        Ok(ms) => {
            result.time = Times::from_ms(&ms);
            let median_us = result.time.as_ref().map(|t| t.median_us);
            result.gbps = ratio(Some(2.0 * bytes as f64 / 1e3), median_us);
        }
        Err(e) => result.error = Some(e.to_string()),
    }
    result
}

/// Times the read floor kernel reading `bytes` (the copy's size; nothing written), each launch between its own pair
/// of events: the read bandwidth.
fn measure_read(
    gpu: &Gpu,
    kernel: &std::result::Result<CudaFunction, String>,
    bytes: u64,
    warmup: usize,
    iters: usize,
) -> ReadFloor {
    let mut result = ReadFloor { read_bytes: bytes, ctas: floor::ctas(bytes, 0), sets: 1, ..ReadFloor::default() };
    let sets = match kernel {
        Ok(f) if bytes > 0 => FloorSets::new(gpu, f.clone(), bytes, 0, 1),
        Ok(_) => Err("the copy was not measured".into()),
        Err(e) => Err(e.clone()),
    };
    let mut sets = match sets {
        Ok(s) => s,
        Err(e) => {
            result.error = Some(e);
            return result;
        }
    };
    let launch =
        || sets.queue(gpu, 0).map_err(|source| Error::Cuda { op: "cuLaunchKernel (sparsek_read_floor)", source });
    match EventTimer::new(gpu.stream()).time(warmup, iters, launch) {
        Ok(ms) => {
            result.time = Times::from_ms(&ms);
            result.gbps = ratio(Some(bytes as f64 / 1e3), result.median_us());
        }
        Err(e) => result.error = Some(e.to_string()),
    }
    result
}

/// Loads the empty kernel into the GPU's context.
fn load_empty_kernel(gpu: &Gpu) -> std::result::Result<CudaFunction, String> {
    let module = gpu.context().load_module(Ptx::from_src(EMPTY_PTX)).map_err(|e| format!("loading its PTX: {e}"))?;
    module.load_function(EMPTY_KERNEL).map_err(|e| format!("looking up {EMPTY_KERNEL}: {e}"))
}

/// Times launches of the empty kernel, 1 CTA of 32 threads, each between its own pair of events.
fn measure_empty_launch(gpu: &Gpu, warmup: usize, iters: usize) -> EmptyLaunch {
    let mut result = EmptyLaunch {
        kernel: format!("{EMPTY_KERNEL}: a PTX kernel whose body is `ret`, 1 CTA of 32 threads"),
        time: None,
        error: None,
    };
    let func = match load_empty_kernel(gpu) {
        Ok(f) => f,
        Err(e) => {
            result.error = Some(e);
            return result;
        }
    };
    let launch =
        || launch_empty(gpu, &func).map_err(|source| Error::Cuda { op: "cuLaunchKernel (sparsek_empty)", source });
    match EventTimer::new(gpu.stream()).time(warmup, iters, launch) {
        Ok(ms) => result.time = Times::from_ms(&ms),
        Err(e) => result.error = Some(e.to_string()),
    }
    result
}

/// Queues one launch of the empty kernel, 1 CTA of 32 threads, on the GPU's stream.
fn launch_empty(gpu: &Gpu, func: &CudaFunction) -> std::result::Result<(), DriverError> {
    let shape = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
    // SAFETY: the kernel takes no parameters and touches no memory; the stream is the Gpu's, in the context the
    // module was loaded into.
    unsafe { gpu.stream().launch_builder(func).launch(shape) }.map(drop)
}

/// The empty kernel as a contender of the queued measurement.
struct EmptyKernel(CudaFunction);

impl Contender for EmptyKernel {
    fn launch(&mut self, gpu: &Gpu, _set: usize) -> std::result::Result<(), String> {
        launch_empty(gpu, &self.0).map_err(|e| format!("cuLaunchKernel ({EMPTY_KERNEL}): {e}"))
    }

    fn sets(&self) -> usize {
        1
    }
}

/// The empty kernel queued behind the hold ([`queued::measure`]).
fn measure_queued_empty_launch(gpu: &Gpu, hold: &std::result::Result<Hold, String>) -> Queued {
    let hold = match hold {
        Ok(h) => h,
        Err(e) => return Queued::failed(e.clone()),
    };
    match load_empty_kernel(gpu) {
        Ok(func) => queued::measure(gpu, hold, &mut EmptyKernel(func), queued::BATCH),
        Err(e) => Queued::failed(e),
    }
}

/// The host operands of one case and their oracle.
struct Operands {
    a: Bsr<f16>,
    b: Matrix<f16>,
    /// The oracle's sampled rows of C, with the tolerance of sparsek's f32 output.
    expected: Expected,
}

/// Runs one case: operands and oracle, then each contender set up and checked, then both timed interleaved;
/// then the figures and verdicts.
#[allow(clippy::too_many_arguments)]
fn run_case(
    (gpu, programmatic): (&Gpu, Option<&Gpu>),
    libs: Kernels<'_>,
    hold: &std::result::Result<Hold, String>,
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
        rec.error = Some(e);
    }
    rec.evaluate(&case, refs);
    rec
}

/// cuBLAS and the read floor kernel, each loaded once per run (or why it could not be).
type Kernels<'a> = (&'a std::result::Result<Cublas, String>, &'a std::result::Result<CudaFunction, String>);

/// Builds the operands of `case`, sets up and checks each contender, and times them with the same-size copy and
/// the read floor; the contenders' failures are recorded in their results, the case's returned. Then sparsek is
/// timed queued ([`queued`]).
#[allow(clippy::too_many_arguments)]
fn measure(
    (gpu, programmatic): (&Gpu, Option<&Gpu>),
    (lib, floor_kernel): Kernels<'_>,
    hold: &std::result::Result<Hold, String>,
    cfg: &DecodeConfig,
    iters: usize,
    case: &mut Case,
    rec: &mut DecodeRecord,
    tag: &str,
) -> std::result::Result<(), String> {
    if let Source::File(p) = &case.source {
        return Err(format!("--decode measures generated cases only, not {}", p.display()));
    }
    let ops = operands(case, cfg, rec.facts.seed, tag).map_err(|e| format!("building the operands: {e}"))?;
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
        let depth = rotation_depth(set_bytes, gpu.info().l2_bytes);
        let result = match (form, lib) {
            (Form::Cublas, Err(why)) => Err(format!("cuBLAS unavailable: {why}")),
            _ => setup(gpu, lib.as_ref().ok(), form, &ops, depth),
        };
        let r = rec.contender_mut(form);
        match result {
            Ok((s, check)) => {
                r.check = Some(check);
                r.sets = s.len();
                r.rotated_bytes = set_bytes * s.len() as u64;
                sets.push((form, s));
            }
            Err(e) => r.error = Some(e),
        }
    }
    // The oracle's sampled rows stay for the graph replays' check; A and B on the host go.
    let Operands { expected, .. } = ops;
    if sets.is_empty() {
        return Ok(());
    }
    let copy_bytes = rec.bytes.total.div_ceil(2).next_multiple_of(16).max(16);
    rec.same_size_copy.bytes = copy_bytes;
    let mut copy = match CopySets::new(gpu, copy_bytes, rotation_depth(2 * copy_bytes, gpu.info().l2_bytes)) {
        Ok(c) => {
            rec.same_size_copy.sets = c.pairs.len();
            Some(c)
        }
        Err(e) => {
            rec.same_size_copy.error = Some(e);
            None
        }
    };

    let (floor_read, floor_write) = (rec.bytes.total - rec.bytes.c, rec.bytes.c);
    rec.read_floor.read_bytes = floor_read.next_multiple_of(16);
    rec.read_floor.write_bytes = floor_write.next_multiple_of(16);
    rec.read_floor.ctas = floor::ctas(floor_read, floor_write);
    let depth = rotation_depth(floor_read + floor_write, gpu.info().l2_bytes);
    let mut floor = match floor_kernel.clone().and_then(|f| FloorSets::new(gpu, f, floor_read, floor_write, depth)) {
        Ok(f) => {
            rec.read_floor.sets = f.sets();
            Some(f)
        }
        Err(e) => {
            rec.read_floor.error = Some(e);
            None
        }
    };

    eprintln!("{tag}   timing, interleaved");
    let mut timing = time_with_references(gpu, cfg.warmup, iters, &mut sets, copy.as_mut(), floor.as_mut());
    // The copy and the read floor have no output to check and must not fail the case: when one's own launch
    // failed, its error is recorded and the rest are timed again without it.
    while timing.is_err() {
        if let Some(e) = copy.as_mut().and_then(|c| c.failure.take()) {
            rec.same_size_copy.error = Some(format!("timing: {e}"));
            eprintln!("{tag}   same-size copy failed ({e}); timing again without it");
            copy = None;
        } else if let Some(e) = floor.as_mut().and_then(|f| f.failure.take()) {
            rec.read_floor.error = Some(format!("timing: {e}"));
            eprintln!("{tag}   read floor failed ({e}); timing again without it");
            floor = None;
        } else {
            break;
        }
        timing = time_with_references(gpu, cfg.warmup, iters, &mut sets, copy.as_mut(), floor.as_mut());
    }
    let (items, times, clock) = timing.map_err(|e| format!("timing: {e}"))?;
    rec.sm_clock_mhz = clock;
    for (item, t) in items.into_iter().zip(&times) {
        match item {
            Item::Contender(form) => rec.contender_mut(form).time = Times::from_ms(t),
            Item::SameSizeCopy => rec.same_size_copy.time = Times::from_ms(t),
            Item::ReadFloor => rec.read_floor.time = Times::from_ms(t),
        }
    }
    if let Some((_, s)) = sets.iter_mut().find(|(f, _)| *f == Form::Sparsek) {
        eprintln!("{tag}   timing sparsek queued ({} launches per batch)", queued::BATCH);
        rec.sparsek_queued = match hold {
            Ok(h) => queued::measure(gpu, h, s, queued::BATCH),
            Err(e) => Queued::failed(e.clone()),
        };
        if let Some(pg) = programmatic {
            eprintln!("{tag}   timing sparsek queued, programmatic launches");
            rec.sparsek_queued_programmatic = Some(match hold {
                Ok(h) => queued_programmatic(gpu, pg, h, s),
                Err(e) => Queued::failed(e.clone()),
            });
        }
        if let Some(f) = floor.as_mut() {
            eprintln!("{tag}   timing the read floor queued ({} launches per batch)", queued::BATCH);
            rec.read_floor_queued = match hold {
                Ok(h) => queued::measure(gpu, h, f, queued::BATCH),
                Err(e) => Queued::failed(e.clone()),
            };
        }
        eprintln!("{tag}   timing sparsek replayed from a CUDA graph ({} launches)", queued::BATCH);
        rec.sparsek_graph = Some(graph_replayed(gpu, gpu, s, &expected));
        if let Some(pg) = programmatic {
            eprintln!("{tag}   timing sparsek replayed from a CUDA graph, programmatic launches");
            rec.sparsek_graph_programmatic = Some(graph_replayed(gpu, pg, s, &expected));
        }
    }
    Ok(())
}

/// sparsek's `sets` replayed from a CUDA graph through `launcher` (`gpu` itself, or a `Gpu` on its context with
/// programmatic launches): [`queued::BATCH`] launches (`Gpu::spmm_raw` on the sets in turn) captured once on a new
/// stream in global mode (as `torch.cuda.graph` captures), the graph replayed once untimed and then
/// [`queued::REPS`] times, each between its own pair of events: per launch, the graph's time over the batch (what
/// a decode step replayed from a graph spends per product: `torch.compile(mode="reduce-overhead")`). A captured
/// launch balances its rows only where that pays for its workspace's graph nodes (`graph_balance_pays`), so its
/// bits may differ from the plain launches': C of set 0 is poisoned first and checked against the oracle's sampled
/// rows (`expected`) after the replays.
fn graph_replayed(gpu: &Gpu, launcher: &Gpu, sets: &mut Sets<'_>, expected: &Expected) -> Queued {
    use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
    let batch = queued::BATCH;
    let mut run = || -> std::result::Result<Vec<f32>, String> {
        poison(gpu, sets.output().ok_or("no input set")?.as_view_mut())?;
        gpu.synchronize().map_err(|e| e.to_string())?;
        let Sets::Sparsek(own) = &mut *sets else { return Err("a graph of sparsek's launches only".into()) };
        let stream = launcher.new_stream().map_err(|e| e.to_string())?;
        // The views are made before the capture: each records an event on its buffer's stream.
        let mut views: Vec<_> = own.iter_mut().map(|(a, b, c)| (a.view(), b.view(), c.view_mut())).collect();
        let count = views.len().max(1);
        stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL).map_err(|e| e.to_string())?;
        let mut captured = Ok(());
        for i in 0..batch {
            let (a, b, c) = &mut views[i % count];
            // SAFETY: views of live buffers of this context, not used by other work while the graph runs (the
            // Gpu's stream was synchronised above, and nothing else is queued until the replays end).
            let r = unsafe { launcher.spmm_raw(stream.cu_stream(), a, b, c, None, Epilogue::default()) };
            if let Err(e) = r {
                captured = Err(format!("launch during capture: {e}"));
                break;
            }
        }
        let graph = stream.end_capture(CUgraphInstantiate_flags(0));
        captured?;
        let graph = graph.map_err(|e| format!("cuStreamEndCapture: {e}"))?.ok_or("an empty graph")?;
        graph.launch().map_err(|e| format!("cuGraphLaunch: {e}"))?;
        let ctx = gpu.context();
        let mut ms = Vec::with_capacity(queued::REPS);
        for _ in 0..queued::REPS {
            let event =
                || ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(|e| format!("cuEventCreate: {e}"));
            let (start, end) = (event()?, event()?);
            start.record(&stream).map_err(|e| format!("cuEventRecord: {e}"))?;
            graph.launch().map_err(|e| format!("cuGraphLaunch: {e}"))?;
            end.record(&stream).map_err(|e| format!("cuEventRecord: {e}"))?;
            end.synchronize().map_err(|e| format!("cuEventSynchronize: {e}"))?;
            ms.push(start.elapsed_ms(&end).map_err(|e| format!("cuEventElapsedTime: {e}"))? / batch as f32);
        }
        stream.synchronize().map_err(|e| e.to_string())?;
        drop(views);
        let after = sets.output().ok_or("no input set")?.to_host().map_err(|e| e.to_string())?;
        let report = expected.check(&after);
        if !report.passed() {
            return Err(format!("the graph's output fails the oracle's check: {report}"));
        }
        Ok(ms)
    };
    match run() {
        Ok(ms) => Queued { batch, time: Times::from_ms(&ms), hold_us: None, error: None },
        Err(e) => Queued::failed(e),
    }
}

/// Whether two outputs of the same shape hold the same bits in every element (their padding aside).
fn same_bits(x: &Matrix<f32>, y: &Matrix<f32>) -> bool {
    (0..x.rows()).all(|r| x.row(r).iter().zip(y.row(r)).all(|(p, q)| p.to_bits() == q.to_bits()))
}

/// sparsek's `sets` queued behind the hold through `programmatic`, a `Gpu` on the same context
/// (`Gpu::from_context`) whose launches are programmatic. Checked: C of set 0 (what the plain launches left,
/// deterministic) is poisoned first and must have the same bits in every element after the batches.
fn queued_programmatic(gpu: &Gpu, programmatic: &Gpu, hold: &Hold, sets: &mut Sets<'_>) -> Queued {
    let output = |sets: &mut Sets<'_>| -> std::result::Result<Matrix<f32>, String> {
        sets.output().ok_or("no input set")?.to_host().map_err(|e| e.to_string())
    };
    let before = match output(sets) {
        Ok(c) => c,
        Err(e) => return Queued::failed(e),
    };
    if let Err(e) = sets.output().ok_or("no input set".to_string()).and_then(|c| poison(gpu, c.as_view_mut())) {
        return Queued::failed(e);
    }
    let q = queued::measure(programmatic, hold, sets, queued::BATCH);
    if q.error.is_some() {
        return q;
    }
    match output(sets) {
        Ok(after) if same_bits(&after, &before) => q,
        Ok(_) => Queued::failed("the programmatic launches' output differs from the plain launches'".into()),
        Err(e) => Queued::failed(e),
    }
}

/// One item of the interleaved loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Item {
    Contender(Form),
    SameSizeCopy,
    ReadFloor,
}

/// What [`time_with_references`] timed, in order, each one's times, and the SM clock.
type Timed = (Vec<Item>, Vec<Vec<f32>>, Option<u32>);

/// Times the contenders' `sets` and, when given, the same-size copy and the read floor, interleaved
/// ([`time_interleaved`]). The copy goes right after sparsek: what it leaves dirty in L2 (up to half its bytes) is
/// written back during the next launch, which should be cuBLAS's long one, not sparsek's (on an H200, sparsek
/// measured 8-14% slower at 8192^2 and 16384^2 with the copy just before it than in the run before without the
/// copy). The read floor goes last, so that sparsek follows it: each then finds in L2 the other's dirty C, of
/// the same size.
fn time_with_references(
    gpu: &Gpu,
    warmup: usize,
    iters: usize,
    sets: &mut [(Form, Sets<'_>)],
    copy: Option<&mut CopySets>,
    floor: Option<&mut FloorSets>,
) -> std::result::Result<Timed, String> {
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
struct CopySets {
    pairs: Vec<(CudaSlice<u8>, CudaSlice<u8>)>,
    /// Why its last launch failed, so that a failed timing can be told apart from the contenders' failures.
    failure: Option<String>,
}

impl CopySets {
    /// `depth` pairs of `bytes` each (at least one), or why they could not be allocated.
    fn new(gpu: &Gpu, bytes: u64, depth: usize) -> std::result::Result<CopySets, String> {
        let len = usize::try_from(bytes).map_err(|_| format!("{bytes} bytes do not fit this host's usize"))?;
        let stream = gpu.stream();
        let mut pairs = Vec::with_capacity(depth.max(1));
        for _ in 0..depth.max(1) {
            let alloc = |what: &str| {
                stream.alloc_zeros::<u8>(len).map_err(|e| format!("allocating the copy's {what} of {bytes} bytes: {e}"))
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
    fn launch(&mut self, gpu: &Gpu, set: usize) -> std::result::Result<(), String> {
        let (src, dst) = &mut self.pairs[set];
        let r = gpu.stream().memcpy_dtod(src, dst).map_err(|e| format!("cuMemcpyDtoDAsync: {e}"));
        if let Err(e) = &r {
            self.failure = Some(e.clone());
        }
        r
    }

    fn sets(&self) -> usize {
        self.pairs.len().max(1)
    }
}

/// A and B ([`Case::operands`]) and the oracle on the sampled rows of C.
fn operands(case: &mut Case, cfg: &DecodeConfig, seed: u64, tag: &str) -> Result<Operands> {
    let (a, b, _, expected) = crate::side::f16_operands(case, cfg, seed, tag)?;
    Ok(Operands { a, b, expected })
}

/// One contender's device operands: input sets rotated per launch (C of set 0 is the one checked).
enum Sets<'l> {
    Sparsek(Vec<(DeviceBsr<f16>, DeviceMatrix<f16>, DeviceMatrix<f32>)>),
    Cublas(crate::side::CublasSets<'l>),
}

impl Contender for Sets<'_> {
    /// Queues one product on input set `set` on the GPU's stream.
    fn launch(&mut self, gpu: &Gpu, set: usize) -> std::result::Result<(), String> {
        match self {
            Sets::Sparsek(sets) => {
                let (a, b, c) = &mut sets[set];
                gpu.spmm(a, b, c, Epilogue::default()).map_err(|e| e.to_string())
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

    /// C of set 0.
    fn output(&mut self) -> Option<&mut DeviceMatrix<f32>> {
        match self {
            Sets::Sparsek(s) => s.first_mut().map(|t| &mut t.2),
            Sets::Cublas(c) => c.output(),
        }
    }
}

/// Uploads `depth` input sets of `form`, poisons C of set 0, launches on it and checks the output against the
/// oracle.
fn setup<'l>(
    gpu: &Gpu,
    lib: Option<&'l Cublas>,
    form: Form,
    ops: &Operands,
    depth: usize,
) -> std::result::Result<(Sets<'l>, Check), String> {
    let s = |e: Error| e.to_string();
    let (a, b) = (&ops.a, &ops.b);
    let (m, n) = (a.rows(), b.cols());
    let mut sets = match form {
        Form::Sparsek => Sets::Sparsek(
            (0..depth)
                .map(|_| Ok((gpu.upload(a)?, gpu.upload_matrix(b)?, gpu.zeros(m, n)?)))
                .collect::<Result<_>>()
                .map_err(s)?,
        ),
        Form::Cublas => {
            let lib = lib.ok_or("cuBLAS unavailable")?;
            Sets::Cublas(crate::side::CublasSets::upload(gpu, lib, a, b, depth)?)
        }
    };
    let c = sets.output().ok_or("no input set")?;
    poison(gpu, c.as_view_mut())?;
    sets.launch(gpu, 0)?;
    let host = sets.output().ok_or("no input set")?.to_host().map_err(s)?;
    Ok((sets, Check::from(&check_output(form, ops, &host))))
}

/// Compares `form`'s output with the oracle.
fn check_output(form: Form, ops: &Operands, host: &Matrix<f32>) -> CheckReport {
    match form {
        Form::Sparsek => ops.expected.check(host),
        Form::Cublas => crate::side::check_cublas(&ops.expected, &ops.a, &ops.b, host),
    }
}

/// `2 x 1024 MiB (read + written) in 812.3 µs median of 30: 2643.9 GB/s`, or why it was not measured.
fn copy_text(c: &CopyBandwidth) -> String {
    match (&c.time, c.gbps, &c.error) {
        (Some(t), Some(g), None) => {
            let mib = c.bytes as f64 / f64::from(1 << 20);
            format!("2 x {mib:.0} MiB (read + written) in {:.1} µs median of {}: {g:.1} GB/s", t.median_us, t.samples)
        }
        (_, _, Some(e)) => format!("not measured ({e})"),
        _ => "not measured".into(),
    }
}

/// `1024 MiB read in 340.2 µs median of 30: 3156.1 GB/s, 105.1% of the copy's`, or why it was not measured.
fn read_text(r: &ReadFloor, copy: &CopyBandwidth) -> String {
    match (&r.time, r.gbps, &r.error) {
        (Some(t), Some(g), None) => {
            let mib = r.read_bytes as f64 / f64::from(1 << 20);
            let of_copy =
                ratio(Some(g), copy.gbps).map_or_else(String::new, |f| format!(", {:.1}% of the copy's", 100.0 * f));
            format!(
                "{mib:.0} MiB read in {:.1} µs median of {}: {g:.1} GB/s{of_copy} ({}: {} CTAs of {} threads, each \
                 reading {} KiB with {}-byte loads marked evict-first in L2)",
                t.median_us,
                t.samples,
                floor::KERNEL,
                r.ctas,
                floor::THREADS,
                floor::CTA_BYTES / 1024,
                16
            )
        }
        (_, _, Some(e)) => format!("not measured ({e})"),
        _ => "not measured".into(),
    }
}

/// `2.41 µs median of 30 (sparsek_empty: ...)`, or why it was not measured.
fn empty_text(e: &EmptyLaunch) -> String {
    match (&e.time, &e.error) {
        (Some(t), None) => format!("{:.2} µs median of {} ({})", t.median_us, t.samples, e.kernel),
        (_, Some(err)) => format!("not measured ({err})"),
        _ => "not measured".into(),
    }
}

/// `1.84 µs per launch, median of 5 batches of 32 (behind a 2000 µs hold)`, or why it was not measured.
fn queued_text(q: &Queued) -> String {
    match (&q.time, &q.error) {
        (Some(t), None) => format!(
            "{:.2} µs per launch, median of {} batches of {} (behind a {:.0} µs hold)",
            t.median_us,
            t.samples,
            q.batch,
            q.hold_us.unwrap_or(0.0)
        ),
        (_, Some(err)) => format!("not measured ({err})"),
        _ => "not measured".into(),
    }
}

/// Microseconds with precision that suits their size, `!` appended when the output failed its check.
fn us_cell(c: &ContenderResult) -> String {
    let Some(t) = c.time.as_ref().map(|t| t.median_us) else { return "-".into() };
    let s = if t < 100.0 { format!("{t:.2}") } else { format!("{t:.1}") };
    if c.passed() { s } else { format!("{s}!") }
}

/// sparsek's queued time per launch (`!` when its output failed its check), or `-`.
fn queued_cell(r: &DecodeRecord) -> String {
    let Some(t) = r.sparsek_queued.median_us() else { return "-".into() };
    if r.sparsek.passed() { format!("{t:.2}") } else { format!("{t:.2}!") }
}

/// sparsek's queued time per launch with programmatic launches, `failed` when it could not be measured or its
/// output differed from the plain launches', or `-` when not measured.
fn queued_programmatic_cell(r: &DecodeRecord) -> String {
    checked_cell(r, &r.sparsek_queued_programmatic)
}

/// A time per launch checked against the plain launches' output (`q`): `failed` when it could not be measured or
/// its output differed, `-` when not measured, `!` appended when the plain launches failed their own check.
fn checked_cell(r: &DecodeRecord, q: &Option<Queued>) -> String {
    match q {
        None => "-".into(),
        Some(q) => match (q.median_us(), &q.error) {
            (Some(t), None) if r.sparsek.passed() => format!("{t:.2}"),
            (Some(t), None) => format!("{t:.2}!"),
            _ => "failed".into(),
        },
    }
}

fn opt_cell(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "-".into(), f)
}

/// Megabytes (1e6 bytes).
fn mb_cell(bytes: u64) -> String {
    let mb = bytes as f64 / 1e6;
    if mb < 10.0 { format!("{mb:.3}") } else { format!("{mb:.1}") }
}

/// The targets column: each target with its verdict (`met`, `MISSED`, or `n/a` when not measured).
fn goals_cell(r: &DecodeRecord) -> String {
    if r.goals.is_empty() {
        return "-".into();
    }
    let verdict = |g: &Goal| match (g.met, g.floor_met) {
        (Some(true), _) => "met",
        (Some(false), Some(false)) => "MISSED, read floor too",
        (Some(false), _) => "MISSED",
        (None, _) => "n/a",
    };
    r.goals.iter().map(|g| format!("{} {}", g.figure.target_text(g.bound), verdict(g))).collect::<Vec<_>>().join("; ")
}

/// The checks column: "pass", or what failed or could not run.
fn checks_cell(r: &DecodeRecord) -> String {
    if let Some(e) = &r.error {
        return format!("error: {}", e.replace('|', "/"));
    }
    let mut bad = Vec::new();
    for c in [&r.sparsek, &r.cublas] {
        if c.error.is_some() {
            bad.push(format!("{} n/a", c.name));
        } else if c.check.as_ref().is_some_and(|k| !k.passed) {
            bad.push(format!("{} FAIL", c.name));
        }
    }
    if bad.is_empty() { "pass".into() } else { bad.join(", ") }
}

/// The targets met, missed and not measured over all records, and a line per missed one.
fn goals_summary(records: &[DecodeRecord]) -> String {
    let goals = || records.iter().flat_map(|r| r.goals.iter().map(move |g| (r, g)));
    let count = |met: Option<bool>| goals().filter(|(_, g)| g.met == met).count();
    let beyond = goals().filter(|(_, g)| g.met == Some(false) && g.floor_met == Some(false)).count();
    let mut s = format!(
        "Targets (issue 12): {} met, {} missed, {} not measured ({} of {} cases have targets). Missed by the read \
         floor too (out of reach of any kernel measured this way): {beyond}.\n",
        count(Some(true)),
        count(Some(false)),
        count(None),
        records.iter().filter(|r| !r.goals.is_empty()).count(),
        records.len()
    );
    for (r, g) in goals().filter(|(_, g)| g.met == Some(false)) {
        let value = r.figure(g.figure).map_or_else(|| "-".into(), |v| g.figure.value_text(v));
        let floor = match g.floor_met {
            Some(true) => "; the read floor meets it",
            Some(false) => "; the read floor misses it too",
            None => "; the read floor not measured",
        };
        let _ = writeln!(s, "- missed: {}: {} (measured {value}{floor})", r.facts.case, g.figure.target_text(g.bound));
    }
    s
}

/// The read floor's median (or `-`).
fn floor_cell(r: &DecodeRecord) -> String {
    opt_cell(r.read_floor.median_us(), |t| format!("{t:.2}"))
}

/// The Markdown report: the run's facts, the method and the references, one row per case, and the targets met
/// and missed.
pub fn markdown(header: &Header, references: &References, records: &[DecodeRecord]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}", crate::report::header_line(header));
    let _ = writeln!(
        s,
        "Median of {} launches per contender after {} warm-up, interleaved launch by launch, each on the next of \
         its rotated input sets (together at least 2x L2). sparsek: `Gpu::spmm`, f16 A (BSR) and B row-major, \
         f32 C; cuBLAS: {} (`cublasGemmEx`, dense f16 A, f32 C). MB moved: A's values and u32 indices, B read, \
         C written (1e6 bytes); GB/s: MB moved / sparsek's time; of copy: that over the copy bandwidth; of \
         same-size copy: that over the bandwidth of a copy moving the same bytes, timed in the same loop; read floor \
         µs: a kernel reading the bytes sparsek must read and writing those it must write, and nothing else \
         (`sparsek_read_floor`, timed in the same loop), and of read floor: its time over sparsek's; speedup: \
         cuBLAS time / sparsek time; × empty: sparsek time / the empty launch's; queued µs and × queued empty: \
         sparsek's time per launch with {} launches queued back to back behind a kernel holding the stream (the \
         GPU's own time, without the host's), and its ratio to the empty launch queued alike; read floor queued: the \
         read floor queued alike; queued, programmatic: \
         the same with programmatic dependent launch (`Gpu::with_programmatic_launch`: each launch may start under \
         the one before it; its output must have the plain launches' bits; `-` where the GPU has none); graph µs: \
         sparsek's time per launch replayed from a CUDA graph of {} captured launches (global mode, as \
         `torch.cuda.graph`), its output checked against the oracle; graph, programmatic: the same \
         with programmatic launches. `!` marks a time whose output failed its check; figures come only from \
         checked times.",
        header.iters,
        header.warmup,
        header.cublas,
        queued::BATCH,
        queued::BATCH
    );
    s.push('\n');
    let _ = writeln!(s, "- Copy bandwidth (`cuMemcpyDtoDAsync`): {}.", copy_text(&references.copy));
    let _ = writeln!(s, "- Read bandwidth: {}.", read_text(&references.read, &references.copy));
    let _ = writeln!(s, "- Empty launch: {}.", empty_text(&references.empty_launch));
    let _ = writeln!(s, "- Empty launch, queued: {}.", queued_text(&references.queued_empty_launch));
    s.push('\n');
    s.push_str(
        "| M×K | N | bs | density | nnzb | MB moved | sparsek µs | GB/s | of copy | of same-size copy | read floor µs \
         | of read floor | cuBLAS µs \
         | speedup | × empty | queued µs | × queued empty | read floor queued | queued, programmatic | graph µs \
         | graph, programmatic \
         | targets | SM MHz | checks |\n",
    );
    s.push_str("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|---|\n");
    for r in records {
        let _ = writeln!(
            s,
            "| {}×{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.facts.m,
            r.facts.k,
            r.facts.n,
            r.facts.bs,
            percent(r.facts.density),
            r.facts.nnzb,
            mb_cell(r.bytes.total),
            us_cell(&r.sparsek),
            opt_cell(r.achieved_gbps, |v| format!("{v:.1}")),
            opt_cell(r.copy_fraction, |v| Figure::CopyFraction.value_text(v)),
            opt_cell(r.same_size_copy_fraction, |v| Figure::CopyFraction.value_text(v)),
            floor_cell(r),
            opt_cell(r.read_floor_fraction, |v| Figure::CopyFraction.value_text(v)),
            us_cell(&r.cublas),
            opt_cell(r.speedup_vs_cublas, |v| Figure::SpeedupVsCublas.value_text(v)),
            opt_cell(r.launch_ratio, |v| Figure::LaunchRatio.value_text(v)),
            queued_cell(r),
            opt_cell(r.queued_launch_ratio, |v| Figure::LaunchRatio.value_text(v)),
            opt_cell(r.read_floor_queued.median_us(), |t| format!("{t:.2}")),
            queued_programmatic_cell(r),
            checked_cell(r, &r.sparsek_graph),
            checked_cell(r, &r.sparsek_graph_programmatic),
            goals_cell(r),
            r.sm_clock_mhz.map_or_else(|| "-".into(), |m| m.to_string()),
            checks_cell(r),
        );
    }
    s.push('\n');
    s.push_str(&goals_summary(records));
    s
}

/// `8192x16x8192 bs64 22% uniform: sparsek 12.34 µs (2650.1 GB/s, 85.2% of copy, 97.0% of a same-size copy),
/// cuBLAS 45.60 µs (3.70x), 5.12x empty launch; copy ≥ 80% met; ...; checks pass`.
fn progress_line(r: &DecodeRecord) -> String {
    let mut s = format!("{}: ", r.facts.case);
    if let Some(e) = &r.error {
        s.push_str(&format!("ERROR {e}"));
        return s;
    }
    let text = |f: Figure| opt_cell(r.figure(f), |v| f.value_text(v));
    s.push_str(&format!(
        "sparsek {} µs ({} GB/s, {} of copy, {} of a same-size copy; read floor {} µs), cuBLAS {} µs ({}), {} empty launch; \
         queued {} µs ({} the queued empty launch; programmatic {} µs; read floor {} µs); graph {} µs \
         (programmatic {} µs); \
         targets: {}; checks {}",
        us_cell(&r.sparsek),
        opt_cell(r.achieved_gbps, |v| format!("{v:.1}")),
        text(Figure::CopyFraction),
        opt_cell(r.same_size_copy_fraction, |v| Figure::CopyFraction.value_text(v)),
        floor_cell(r),
        us_cell(&r.cublas),
        text(Figure::SpeedupVsCublas),
        text(Figure::LaunchRatio),
        queued_cell(r),
        opt_cell(r.queued_launch_ratio, |v| Figure::LaunchRatio.value_text(v)),
        queued_programmatic_cell(r),
        opt_cell(r.read_floor_queued.median_us(), |t| format!("{t:.2}")),
        checked_cell(r, &r.sparsek_graph),
        checked_cell(r, &r.sparsek_graph_programmatic),
        goals_cell(r),
        checks_cell(r),
    ));
    if let Some(c) = r.sm_clock_mhz {
        s.push_str(&format!(", SM {c} MHz"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::side::tests::check;

    fn times(median_us: f64) -> Times {
        Times { median_us, min_us: median_us, max_us: median_us, samples: 30 }
    }

    fn references(copy_gbps: Option<f64>, empty_us: Option<f64>) -> References {
        References {
            copy: CopyBandwidth {
                bytes: COPY_BYTES,
                time: copy_gbps.map(|_| times(800.0)),
                gbps: copy_gbps,
                error: None,
            },
            empty_launch: EmptyLaunch { kernel: "empty".into(), time: empty_us.map(times), error: None },
            queued_empty_launch: Queued { batch: 32, time: empty_us.map(|_| times(1.5)), ..Queued::default() },
            read: ReadFloor::default(),
        }
    }

    /// A record of `case` with the given sparsek and cuBLAS medians (checks passed unless `sparsek_ok` is false),
    /// evaluated against `refs`.
    fn record(
        case: &Case,
        nnzb: usize,
        sparsek_us: f64,
        cublas_us: f64,
        sparsek_ok: bool,
        refs: &References,
    ) -> DecodeRecord {
        let mut r = DecodeRecord::new(case, 7);
        r.facts.nnzb = nnzb;
        r.bytes = BytesMoved::new(case.m, case.n, case.k, case.bs, nnzb);
        r.sparsek.check = Some(check(sparsek_ok));
        r.sparsek.time = Some(times(sparsek_us));
        r.cublas.check = Some(check(true));
        r.cublas.time = Some(times(cublas_us));
        r.evaluate(case, refs);
        r
    }

    #[test]
    fn bytes_moved_by_hand() {
        // 1536 x 384 A of 64 x 64 blocks, 72 stored, times a 384 x 16 B.
        let b = BytesMoved::new(1536, 16, 384, 64, 72);
        assert_eq!(b.a_values, 72 * 64 * 64 * 2); // 589_824
        assert_eq!(b.a_indices, (1536 / 64 + 1) * 4 + 72 * 4); // 100 + 288
        assert_eq!(b.b, 384 * 16 * 2); // 12_288
        assert_eq!(b.c, 1536 * 16 * 4); // 98_304
        assert_eq!(b.total, 589_824 + 388 + 12_288 + 98_304);
        assert_eq!(b.total, 700_804);
    }

    #[test]
    fn default_and_quick_cases() {
        let c = default_cases();
        assert_eq!(c.len(), 2 * 2 * 2 * 5 + 2 * 2 * 2 * 3);
        let large: Vec<&Case> = c.iter().filter(|c| c.m >= 8192).collect();
        assert_eq!(large.len(), 40);
        for (m, k) in [(8192, 8192), (16384, 16384)] {
            for bs in [64, 128] {
                for d in [0.10, 0.22] {
                    for n in [1, 8, 16, 32, 64] {
                        assert!(c.contains(&Case::synthetic(m, n, k, bs, d, Pattern::Uniform)));
                    }
                }
            }
        }
        for (m, k) in [(1536, 384), (384, 1536)] {
            for bs in [32, 64] {
                for d in [0.25, 0.50] {
                    for n in [1, 16, 512] {
                        assert!(c.contains(&Case::synthetic(m, n, k, bs, d, Pattern::Uniform)));
                    }
                }
            }
        }
        let q = quick_cases();
        assert_eq!(
            q,
            vec![
                Case::synthetic(8192, 1, 8192, 64, 0.22, Pattern::Uniform),
                Case::synthetic(8192, 16, 8192, 64, 0.22, Pattern::Uniform),
                Case::synthetic(1536, 1, 384, 64, 0.50, Pattern::Uniform),
                Case::synthetic(1536, 16, 384, 64, 0.50, Pattern::Uniform),
            ]
        );
        // Every case is a valid generator input and has the targets.
        for case in c.iter().chain(&q) {
            assert!(case.m % case.bs == 0 && case.k % case.bs == 0, "{case}");
            assert!(!targets(case).is_empty(), "{case}");
        }
    }

    #[test]
    fn target_rule() {
        let t = |m, n, k, bs, d| targets(&Case::synthetic(m, n, k, bs, d, Pattern::Uniform));
        for n in [1, 8, 16] {
            assert_eq!(
                t(8192, n, 8192, 64, 0.22),
                vec![(Figure::CopyFraction, 0.8), (Figure::SpeedupVsCublas, 3.63636)]
            );
        }
        for n in [32, 64] {
            assert_eq!(
                t(16384, n, 16384, 128, 0.10),
                vec![(Figure::CopyFraction, 0.7), (Figure::SpeedupVsCublas, 8.0)]
            );
        }
        assert_eq!(t(8192, 16, 8192, 64, 0.15)[1], (Figure::SpeedupVsCublas, round_sig(0.8 / 0.15, 6)));
        for (m, k) in [(1536, 384), (384, 1536)] {
            for n in [1, 16, 512] {
                assert_eq!(t(m, n, k, 32, 0.25), vec![(Figure::LaunchRatio, 2.0)]);
            }
        }
        // Outside the cases: no target.
        for (m, n, k, bs, d) in [
            (8192, 128, 8192, 64, 0.22),
            (8192, 16, 8192, 32, 0.22),
            (8192, 16, 8192, 64, 0.50),
            (4096, 16, 4096, 64, 0.22),
            (1536, 8, 384, 64, 0.50),
            (1536, 16, 384, 16, 0.50),
            (1536, 16, 384, 64, 0.10),
        ] {
            assert!(t(m, n, k, bs, d).is_empty(), "{m}x{n}x{k} bs{bs} {d}");
        }
        assert!(Figure::CopyFraction.meets(0.8, 0.8) && !Figure::CopyFraction.meets(0.79, 0.8));
        assert!(Figure::LaunchRatio.meets(2.0, 2.0) && !Figure::LaunchRatio.meets(2.01, 2.0));
    }

    #[test]
    fn rotation_spans_twice_l2() {
        let l2 = 50u64 << 20;
        assert_eq!(rotation_depth(200 << 20, l2), 1);
        assert_eq!(rotation_depth(100 << 20, l2), 1);
        assert_eq!(rotation_depth(30 << 20, l2), 4);
        assert_eq!(rotation_depth(0, l2), MAX_SETS);
        // The smallest default set (1536 x 384 bs 32 25%, N 1) needs more than the main benchmark's 128 sets.
        let small = BytesMoved::new(1536, 1, 384, 32, 144).total;
        let depth = rotation_depth(small, l2);
        assert!(depth > 128 && depth < MAX_SETS && depth as u64 * small >= 2 * l2, "{depth} sets of {small}");
    }

    #[test]
    fn figures_and_verdicts() {
        let refs = references(Some(3000.0), Some(2.5));
        // 8192 x 8192 bs 64 22%, N 16: 3604 blocks.
        let case = Case::synthetic(8192, 16, 8192, 64, 0.22, Pattern::Uniform);
        let r = record(&case, 3604, 12.0, 48.0, true, &refs);
        let bytes = BytesMoved::new(8192, 16, 8192, 64, 3604).total as f64;
        assert_eq!(r.achieved_gbps, Some(round_sig(bytes / 12.0 / 1e3, 6)));
        assert_eq!(r.copy_fraction, Some(round_sig(r.achieved_gbps.unwrap() / 3000.0, 6)));
        assert_eq!(r.speedup_vs_cublas, Some(4.0));
        assert_eq!(r.launch_ratio, Some(4.8));
        // 30.3 MB in 12 µs: 2527 GB/s, 84% of 3000, met; a speedup of 4 >= 3.64, met.
        assert_eq!(r.goals.iter().map(|g| g.met).collect::<Vec<_>>(), vec![Some(true), Some(true)]);
        assert!(r.sparsek_passed());

        let slow = record(&case, 3604, 20.0, 48.0, true, &refs);
        assert_eq!(slow.goals.iter().map(|g| g.met).collect::<Vec<_>>(), vec![Some(false), Some(false)]);
        assert!(slow.sparsek_passed(), "a missed target is not a failure");

        // A failed check: no figures, no verdicts, a failed case.
        let bad = record(&case, 3604, 12.0, 48.0, false, &refs);
        assert_eq!((bad.achieved_gbps, bad.speedup_vs_cublas, bad.launch_ratio), (None, None, None));
        assert!(bad.goals.iter().all(|g| g.met.is_none()));
        assert!(!bad.sparsek_passed());

        // Without an empty-launch time, the small shapes' ratio is not measured.
        let small = Case::synthetic(1536, 1, 384, 64, 0.5, Pattern::Uniform);
        let r = record(&small, 72, 4.0, 6.0, true, &references(Some(3000.0), None));
        assert_eq!(r.launch_ratio, None);
        assert_eq!(r.goals, vec![Goal { figure: Figure::LaunchRatio, bound: 2.0, met: None, floor_met: None }]);
        let r = record(&small, 72, 4.0, 6.0, true, &refs);
        assert_eq!(r.goals[0].met, Some(true));
    }

    #[test]
    fn same_size_copy_figures() {
        let refs = references(Some(3000.0), Some(2.5));
        let case = Case::synthetic(8192, 16, 8192, 64, 0.22, Pattern::Uniform);
        let mut r = record(&case, 3604, 16.0, 48.0, true, &refs);
        // Not timed: no figure, and the targets are unaffected.
        assert_eq!((r.same_size_copy.gbps, r.same_size_copy_fraction), (None, None));
        let goals = r.goals.clone();
        // A copy of half the bytes moved, 12 µs: sparsek's 16 µs is 75% of it.
        let bytes = r.bytes.total.div_ceil(2).next_multiple_of(16);
        r.same_size_copy = SameSizeCopy { bytes, sets: 4, time: Some(times(12.0)), gbps: None, error: None };
        r.evaluate(&case, &refs);
        assert_eq!(r.same_size_copy.gbps, Some(round_sig(2.0 * bytes as f64 / 12.0 / 1e3, 6)));
        let fraction = r.same_size_copy_fraction.unwrap();
        assert!((fraction - 0.75).abs() < 1e-5, "{fraction}");
        assert_eq!(r.goals, goals, "the issue's targets stay on the 1 GiB copy");
        // A failed sparsek check gives no fraction.
        let mut bad = record(&case, 3604, 16.0, 48.0, false, &refs);
        bad.same_size_copy = r.same_size_copy.clone();
        bad.evaluate(&case, &refs);
        assert_eq!(bad.same_size_copy_fraction, None);
        // The column, and the field in the JSON.
        let header = Header { gpu: "Test GPU".into(), iters: 30, warmup: 5, ..Default::default() };
        let t = markdown(&header, &refs, std::slice::from_ref(&r));
        let row = t.lines().find(|l| l.starts_with("| 8192")).unwrap();
        assert!(
            row.contains(&format!("| {} | 75.0% |", Figure::CopyFraction.value_text(r.copy_fraction.unwrap()))),
            "{row}"
        );
        assert!(t.contains("| of copy | of same-size copy |"), "{t}");
        let v: serde_json::Value = serde_json::from_str(&to_json(&header, &refs, &[r], true).unwrap()).unwrap();
        assert_eq!(v["records"][0]["same_size_copy"]["sets"], 4);
        assert!((v["records"][0]["same_size_copy_fraction"].as_f64().unwrap() - 0.75).abs() < 1e-5);
    }

    #[test]
    fn read_floor_figures() {
        let refs = references(Some(3000.0), Some(2.5));
        let case = Case::synthetic(8192, 16, 8192, 64, 0.22, Pattern::Uniform);
        // sparsek 16 µs: 30.3 MB at 1894 GB/s, 63% of the copy, a 3.0x speedup: both targets missed.
        let mut r = record(&case, 3604, 16.0, 48.0, true, &refs);
        assert_eq!(r.goals.iter().map(|g| (g.met, g.floor_met)).collect::<Vec<_>>(), vec![(Some(false), None); 2]);
        // A read floor of 14 µs misses both too (72% of the copy, 3.43x); one of 12 µs meets both (84%, 4x).
        r.read_floor = ReadFloor {
            read_bytes: r.bytes.total - r.bytes.c,
            write_bytes: r.bytes.c,
            ctas: 800,
            sets: 4,
            time: Some(times(14.0)),
            ..ReadFloor::default()
        };
        r.evaluate(&case, &refs);
        assert_eq!(r.read_floor_fraction, Some(0.875));
        assert_eq!(r.read_floor.gbps, Some(round_sig(r.bytes.total as f64 / 14.0 / 1e3, 6)));
        assert_eq!(
            r.goals.iter().map(|g| (g.met, g.floor_met)).collect::<Vec<_>>(),
            vec![(Some(false), Some(false)), (Some(false), Some(false))]
        );
        let header = Header { gpu: "Test GPU".into(), iters: 30, warmup: 5, ..Default::default() };
        let t = markdown(&header, &refs, std::slice::from_ref(&r));
        assert!(t.contains("| read floor µs | of read floor |"), "{t}");
        let row = t.lines().find(|l| l.starts_with("| 8192")).unwrap();
        assert!(row.contains("| 14.00 | 87.5% |"), "{row}");
        assert!(row.contains("copy ≥ 80% MISSED, read floor too; speedup ≥ 3.64x MISSED, read floor too"), "{row}");
        assert!(
            t.contains("0 met, 2 missed, 0 not measured (1 of 1 cases have targets). Missed by the read floor too")
        );
        assert!(t.contains("kernel measured this way): 2."), "{t}");
        assert!(t.contains("(measured 63.2%; the read floor misses it too)"), "{t}");

        r.read_floor.time = Some(times(12.0));
        r.evaluate(&case, &refs);
        assert_eq!(r.goals.iter().map(|g| g.floor_met).collect::<Vec<_>>(), vec![Some(true), Some(true)]);
        let t = markdown(&header, &refs, std::slice::from_ref(&r));
        assert!(t.contains("(measured 3.00x; the read floor meets it)"), "{t}");
        assert!(t.contains("kernel measured this way): 0."), "{t}");
        let v: serde_json::Value = serde_json::from_str(&to_json(&header, &refs, &[r], true).unwrap()).unwrap();
        assert_eq!(v["records"][0]["read_floor"]["time"]["median_us"], 12.0);
        assert_eq!(v["records"][0]["read_floor"]["ctas"], 800);
        assert_eq!(v["records"][0]["goals"][0]["floor_met"], true);
        assert!(v["references"]["read"]["time"].is_null());

        // A failed sparsek check: no fraction, but the floor's verdicts stand (they do not use sparsek's time).
        let mut bad = record(&case, 3604, 16.0, 48.0, false, &refs);
        bad.read_floor.time = Some(times(12.0));
        bad.evaluate(&case, &refs);
        assert_eq!(bad.read_floor_fraction, None);
        assert_eq!(bad.goals.iter().map(|g| (g.met, g.floor_met)).collect::<Vec<_>>(), vec![(None, Some(true)); 2]);
    }

    #[test]
    fn read_text_names_the_kernel() {
        let copy = CopyBandwidth { bytes: 1 << 30, time: Some(times(700.0)), gbps: Some(3000.0), error: None };
        let read = ReadFloor {
            read_bytes: 1 << 30,
            ctas: floor::ctas(1 << 30, 0),
            sets: 1,
            time: Some(times(340.0)),
            gbps: Some(3158.0),
            ..ReadFloor::default()
        };
        let t = read_text(&read, &copy);
        assert!(t.starts_with("1024 MiB read in 340.0 µs median of 30: 3158.0 GB/s, 105.3% of the copy's"), "{t}");
        assert!(t.contains("sparsek_read_floor: 32768 CTAs of 128 threads, each reading 32 KiB"), "{t}");
        let failed = ReadFloor { error: Some("no PTX".into()), ..ReadFloor::default() };
        assert_eq!(read_text(&failed, &copy), "not measured (no PTX)");
    }

    #[test]
    fn table_and_json() {
        let header = Header { gpu: "Test GPU".into(), iters: 30, warmup: 5, ..Default::default() };
        let refs = references(Some(3000.0), Some(2.5));
        let large = Case::synthetic(8192, 16, 8192, 64, 0.22, Pattern::Uniform);
        let small = Case::synthetic(1536, 1, 384, 64, 0.5, Pattern::Uniform);
        let mut missing = record(&small, 72, 6.0, 6.0, true, &refs);
        missing.cublas = ContenderResult::new(Form::Cublas);
        missing.cublas.error = Some("cuBLAS unavailable: no | library".into());
        missing.evaluate(&small, &refs);
        // Queued: 9 µs per launch against the queued empty launch's 1.5 (no figure when the check failed).
        let mut queued = record(&large, 3604, 12.0, 48.0, true, &refs);
        queued.sparsek_queued = Queued { batch: 32, time: Some(times(9.0)), hold_us: Some(2000.0), error: None };
        queued.sparsek_queued_programmatic =
            Some(Queued { batch: 32, time: Some(times(7.5)), hold_us: Some(2000.0), error: None });
        queued.sparsek_graph = Some(Queued { batch: 32, time: Some(times(9.5)), hold_us: None, error: None });
        queued.sparsek_graph_programmatic = Some(Queued::failed("the graph's output differs".into()));
        queued.read_floor_queued = Queued { batch: 32, time: Some(times(8.25)), hold_us: Some(2000.0), error: None };
        queued.evaluate(&large, &refs);
        assert_eq!(queued.queued_launch_ratio, Some(6.0));
        let mut failed = record(&large, 3604, 12.0, 48.0, false, &refs);
        failed.sparsek_queued = queued.sparsek_queued.clone();
        failed.evaluate(&large, &refs);
        assert_eq!(failed.queued_launch_ratio, None);
        let records = vec![queued, missing];

        let t = markdown(&header, &refs, &records);
        let rows: Vec<&str> = t.lines().filter(|l| l.starts_with("| 8192") || l.starts_with("| 1536")).collect();
        assert_eq!(rows.len(), 2);
        let header_cols = t.lines().find(|l| l.starts_with("| M×K")).map(|l| l.matches('|').count());
        for row in &rows {
            assert_eq!(Some(row.matches('|').count()), header_cols, "{row}");
        }
        assert!(
            rows[0].contains(
                "| 4.00x | 4.80x | 9.00 | 6.00x | 8.25 | 7.50 | 9.50 | failed | copy ≥ 80% met; speedup ≥ 3.64x met |"
            ),
            "{}",
            rows[0]
        );
        assert!(rows[1].contains("| 2.40x | - | - | - | - | - | - | ≤ 2x empty launch MISSED |"), "{}", rows[1]);
        assert!(t.contains("- Empty launch, queued: 1.50 µs per launch, median of 30 batches of 32"), "{t}");
        assert!(rows[0].ends_with("| pass |"));
        assert!(rows[1].contains("| ≤ 2x empty launch MISSED |"), "{}", rows[1]);
        assert!(rows[1].contains("cublas-gemmex-f16-f32 n/a"), "{}", rows[1]);
        assert!(t.contains("Targets (issue 12): 2 met, 1 missed, 0 not measured (2 of 2 cases have targets)."));
        assert!(
            t.contains(
                "- missed: 1536x1x384 bs64 50% uniform: ≤ 2x empty launch (measured 2.40x; the read floor not measured)"
            ),
            "{t}"
        );

        let json = to_json(&header, &refs, &records, true).unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["complete"], true);
        assert_eq!(v["header"]["gpu"], "Test GPU");
        assert_eq!(v["references"]["copy"]["gbps"], 3000.0);
        assert_eq!(v["references"]["queued_empty_launch"]["time"]["median_us"], 1.5);
        assert_eq!(v["records"][0]["sparsek_queued"]["time"]["median_us"], 9.0);
        assert_eq!(v["records"][0]["queued_launch_ratio"], 6.0);
        assert_eq!(v["records"][0]["read_floor_queued"]["time"]["median_us"], 8.25);
        assert_eq!(v["records"][0]["sparsek_queued_programmatic"]["time"]["median_us"], 7.5);
        assert!(v["records"][1]["sparsek_queued_programmatic"].is_null());
        assert_eq!(v["records"][0]["sparsek_graph"]["time"]["median_us"], 9.5);
        assert_eq!(v["records"][0]["sparsek_graph_programmatic"]["error"], "the graph's output differs");
        assert!(v["records"][1]["sparsek_graph"].is_null());
        assert_eq!(v["references"]["empty_launch"]["time"]["median_us"], 2.5);
        let r0 = &v["records"][0];
        assert_eq!(r0["case"], "8192x16x8192 bs64 22% uniform");
        assert_eq!(r0["bytes"]["total"], BytesMoved::new(8192, 16, 8192, 64, 3604).total);
        assert_eq!(r0["sparsek"]["name"], "sparsek-f16");
        assert_eq!(r0["sparsek"]["time"]["median_us"], 12.0);
        assert_eq!(r0["speedup_vs_cublas"], 4.0);
        assert_eq!(r0["goals"][0]["figure"], "copy_fraction");
        assert_eq!(r0["goals"][1]["figure"], "speedup_vs_cublas");
        assert_eq!(r0["goals"][1]["met"], true);
        // Every goal's figure names a field of its record.
        for r in v["records"].as_array().unwrap() {
            for g in r["goals"].as_array().unwrap() {
                assert!(r.get(g["figure"].as_str().unwrap()).is_some(), "{g}");
            }
        }
        let r1 = &v["records"][1];
        assert!(r1["speedup_vs_cublas"].is_null());
        assert_eq!(r1["launch_ratio"], 2.4);
        assert_eq!(r1["goals"][0]["met"], false);
    }
}
