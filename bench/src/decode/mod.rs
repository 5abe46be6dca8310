//! `sparsek bench --decode`: the decode and small-problem grid (issues 12 and 43), where a product does few flops
//! per byte moved and is bound by memory or by the launch, not by the tensor cores. Each case is measured on three
//! contenders, each over its own input sets: enough identical copies of every operand a launch reads that together
//! they span at least twice the GPU's L2, and never fewer than [`MIN_SETS`] (4), so that no launch finds its
//! operands in L2 ([`decode_depth`]):
//!
//! 1. `sparsek-f16`: [`Gpu::spmm`] with f16 A (BSR) and B row-major, and an f32 C (the main benchmark's sparsek
//!    contender);
//! 2. the **read floor** ([`floor`]): a kernel reading the bytes sparsek must read (A's values and indices, B) and
//!    writing those it must write (C), and nothing else: what any kernel needs to move the case's bytes;
//! 3. cuBLAS dense f16 GEMM of the same M, N, K on A expanded to dense, f32 accumulation and output
//!    (`cublasGemmEx`, the main benchmark's baseline).
//!
//! sparsek's and cuBLAS's C is poisoned, computed once and compared with the f64 oracle (sampled rows, the
//! library's [`Expected`]) before anything is timed. Each contender is then timed three ways, every time per launch:
//!
//! - **graph** (the targets' time; [`DecodeRecord::sparsek_graph`], [`DecodeRecord::read_floor_graph`],
//!   [`DecodeRecord::cublas_graph`]): [`queued::BATCH`] launches captured once into a CUDA graph on a new stream in
//!   global mode (as `torch.cuda.graph`; what `torch.compile(mode="reduce-overhead")` replays), launch `i` on input
//!   set `i` modulo the sets, the graph replayed once untimed and then [`queued::REPS`] times, each replay between
//!   its own pair of events: the median replay over the batch. cuBLAS is captured with the handle bound to the
//!   capture stream and a workspace of its own (32 MiB, `cublasSetWorkspace`), so that no capture allocates.
//!   sparsek's and cuBLAS's C of set 0 is poisoned before the capture and checked against the oracle after the
//!   replays (a failed check makes the time `failed`); the read floor has no output to check;
//! - **kernel** (the queued times: [`DecodeRecord::sparsek_queued`], [`DecodeRecord::read_floor_queued`],
//!   [`DecodeRecord::cublas_queued`]): [`queued::BATCH`] launches queued back to back behind a kernel that holds the
//!   stream while the host queues them ([`queued`]), the batch between one pair of events, the median of
//!   [`queued::REPS`] batches over the batch: the GPU's own time per launch, its launch overhead included, without
//!   host gaps;
//! - **per event, idle stream** (each contender's `time`, the read floor's `read_floor.time`): the contenders
//!   interleaved launch by launch, each launch between its own pair of CUDA events on the otherwise idle stream,
//!   each on the next of its sets, the median of at least [`MIN_ITERS`] launches after the warm-up. When a launch
//!   is shorter than the host's time to queue the next, the stream idles between the start event and the kernel,
//!   so this includes the host's queuing. Kept as a labelled column; no target uses it.
//!
//! Two references are measured once per run, before the cases, on the same GPU and stream:
//!
//! - the device-to-device copy bandwidth: `cuMemcpyDtoDAsync` of a buffer of [`COPY_BYTES`] (or 4x L2 when that
//!   is larger; halved while the allocation runs out of memory, down to 2x L2), each copy between its own pair
//!   of events; bandwidth = bytes read + bytes written = 2 x size, over the median time;
//! - an empty kernel launch: a PTX kernel whose body is `ret`, 1 CTA of 32 threads, timed per event like the
//!   contenders, and the same empty launch **queued** ([`queued`]);
//! - the **read bandwidth**: the read floor kernel reading a buffer as large as the copy's, writing nothing, timed
//!   like the copy.
//!
//! Per case, a fourth item is timed per event in the same interleaved loop: the **same-size copy**,
//! `cuMemcpyDtoDAsync` of half the case's bytes moved (so that read + written equals them), over its own rotated
//! buffer pairs (a launch of a few tens of MB pays a fixed ramp: docs/perf-notes.md, issue 12 step 4).
//!
//! Per case:
//!
//! - **bytes moved** ([`BytesMoved`]): what any implementation must move once: A's values (`nnzb * bs^2 * 2`, the
//!   **stored bytes**, [`stored_bytes`]), A's indices as sparsek uploads them (u32 `row_ptr`, `M / bs + 1` entries,
//!   and `col_idx`, `nnzb` entries), B (`K * N * 2`) read, C (`M * N * 4`) written (beta = 0: C is not read).
//!   Device padding of B's and C's rows to 16 bytes and sparsek's own block-row schedule are not counted;
//! - in graph mode, the targets' figures: **of read floor** ([`Figure::GraphFloorFraction`]: the read floor's graph
//!   time / sparsek's, i.e. sparsek's rate on the stored bytes over the read floor's rate on the same bytes),
//!   **speedup over cuBLAS** ([`Figure::GraphSpeedupVsCublas`]: cuBLAS's graph time / sparsek's), and sparsek's
//!   rate on the stored bytes (stored bytes / its graph time);
//! - per event (reported, no target): achieved bandwidth (bytes moved / sparsek's median), its fraction of the copy
//!   bandwidth and of the same-size copy's, the read floor's time over sparsek's, the speedup over cuBLAS, and
//!   sparsek's time over the empty launch's; the kernel time's ratio to the queued empty launch's;
//! - **programmatic** (where the GPU has programmatic dependent launch and the run's own launches are plain):
//!   sparsek's kernel and graph times through a second `Gpu` whose launches may start under the one before
//!   (`Policy::programmatic`), its kernel output checked bit for bit against the plain launches', its graph output
//!   against the oracle;
//! - the **targets** of issue 43 that apply to the case ([`targets`]: N <= 16 and at least 8 MB of stored blocks;
//!   of read floor at least 90% and a speedup of at least 0.8 / density, both in graph mode) and whether each is
//!   met, and whether the read floor's own graph time would meet it (`MISSED, read floor too` in the table when it
//!   would not: out of reach of any kernel measured this way). They replace issue 12's targets (on the per-event
//!   times: 80%/70% of the copy bandwidth, the same speedup, and at most 2x the empty launch on the small layers);
//!   the records before keep their own. A missed target is reported, not an error; a failed sparsek check (or
//!   sparsek not running) fails the run.
//!
//! Figures come only from times whose output passed its check. The results go to `OUT_DIR/decode.json`
//! (rewritten after the references and after every case) and `OUT_DIR/decode.md`, and the table to stdout.

use std::fmt::Write as _;
use std::sync::Arc;

use cudarc::driver::sys::CUresult;
use cudarc::driver::{CudaFunction, CudaSlice, DriverError, LaunchConfig};
use half::f16;
use serde::Serialize;

use crate::cublas::{self, Cublas};
use crate::cuda::{load_kernel, poison};
use crate::error::{self, Error, Loaded, Result, loaded};
use crate::grid::{Case, percent};
use crate::num::round_sig;
use crate::report::{Check, Header};
use crate::research::floor::{self, FloorSets, ReadFloor};
use crate::research::queued::{self, Hold, Queued};
use crate::runner::{Contender, time_interleaved};
use sparsek::Epilogue;
use sparsek::check::{CheckReport, Expected};
use sparsek::format::{Bsr, Pattern};
use sparsek::gpu::timing::EventTimer;
use sparsek::gpu::{DeviceBsr, DeviceMatrix, Gpu};
use sparsek::matrix::Matrix;

pub use crate::measure::{BytesMoved, MAX_SETS, Measured, Times, rotation_depth};
pub use crate::side::MIN_ITERS;

/// The size of the copy that measures the copy bandwidth, unless 4x L2 is larger.
pub const COPY_BYTES: u64 = 1 << 30;

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
const EMPTY_LAUNCH: &str = "cuLaunchKernel (sparsek_empty)";
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

/// The most columns (N) a case may have for the targets to apply.
pub const TARGET_MAX_N: usize = 16;
/// The least stored bytes (`nnzb * bs^2 * 2`, 1 MB = 1e6 bytes) a case must hold for the targets to apply: 8 MB.
pub const TARGET_MIN_STORED_BYTES: u64 = 8_000_000;
/// The least [`Figure::GraphFloorFraction`] the targets ask for.
pub const FLOOR_FRACTION_MIN: f64 = 0.9;
/// The least speedup over cuBLAS the targets ask for, times the density: the bound is `0.8 / density`.
pub const SPEEDUP_TIMES_DENSITY: f64 = 0.8;
/// The least input sets (rotated copies of every operand) any contender, the copy and the read floor rotate
/// through, however large a set is (issue 43: at least 4 rotating weight copies).
pub const MIN_SETS: usize = 4;

/// The bytes of A's stored blocks: `nnzb * bs^2 * 2` (f16 values; indices not counted).
pub fn stored_bytes(bs: usize, nnzb: usize) -> u64 {
    (nnzb as u64) * (bs as u64) * (bs as u64) * 2
}

/// The figure a target is set on (both from the graph times, [`DecodeRecord::sparsek_graph`] and its peers); its
/// JSON name is the record's field holding it. Both targets are minimums.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Figure {
    /// The read floor's graph time per launch / sparsek's: sparsek's rate on its stored bytes (stored bytes /
    /// sparsek's graph time) as a fraction of the read floor's rate on the same bytes (stored bytes / the read
    /// floor's graph time, the floor moving the case's bytes once); the bytes cancel.
    GraphFloorFraction,
    /// cuBLAS's graph time per launch / sparsek's.
    GraphSpeedupVsCublas,
}

impl Figure {
    /// Whether `value` meets the target `bound` (a minimum).
    pub fn meets(self, value: f64, bound: f64) -> bool {
        value >= bound
    }

    /// `of read floor ≥ 90%`, `speedup ≥ 3.64x`.
    fn target_text(self, bound: f64) -> String {
        match self {
            Figure::GraphFloorFraction => format!("of read floor ≥ {}", percent(bound)),
            Figure::GraphSpeedupVsCublas => format!("speedup ≥ {bound:.2}x"),
        }
    }

    /// `value` as the table shows it.
    fn value_text(self, value: f64) -> String {
        match self {
            Figure::GraphFloorFraction => format!("{:.1}%", 100.0 * value),
            Figure::GraphSpeedupVsCublas => format!("{value:.2}x"),
        }
    }
}

/// Issue 43's targets for `case` holding `nnzb` stored blocks, as (figure, bound), both on the graph times: when
/// `N <= 16` ([`TARGET_MAX_N`]) and the stored blocks take at least 8 MB ([`TARGET_MIN_STORED_BYTES`],
/// [`stored_bytes`]), [`Figure::GraphFloorFraction`] at least 0.9 and [`Figure::GraphSpeedupVsCublas`] at least
/// `0.8 / density` (the case's requested density, to 6 significant digits). Any other case has none (it is
/// measured and reported without a verdict). They replace issue 12's (copy fraction, speedup per event, and at
/// most 2x the empty launch for the small layers); the records before keep their own.
pub fn targets(case: &Case, nnzb: usize) -> Vec<(Figure, f64)> {
    if case.n > TARGET_MAX_N || stored_bytes(case.bs, nnzb) < TARGET_MIN_STORED_BYTES || case.density <= 0.0 {
        return Vec::new();
    }
    vec![
        (Figure::GraphFloorFraction, FLOOR_FRACTION_MIN),
        (Figure::GraphSpeedupVsCublas, round_sig(SPEEDUP_TIMES_DENSITY / case.density, 6)),
    ]
}

/// The stored blocks `case` asks for (its requested density of all blocks, rounded): the targets' count when the
/// case failed before its A was generated.
fn nominal_nnzb(case: &Case) -> usize {
    if case.bs == 0 {
        return 0;
    }
    let blocks = (case.m / case.bs) as f64 * (case.k / case.bs) as f64;
    (blocks * case.density).round() as usize
}

/// What to run and where to write it (`decode.json` and `decode.md` go into `out_dir`).
pub type DecodeConfig = crate::side::RunConfig;

/// The measured device-to-device copy bandwidth.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CopyBandwidth {
    /// Bytes per copy (the source's size; the destination is as large). 0 when nothing could be allocated.
    pub bytes: u64,
    /// Times of `cuMemcpyDtoDAsync` and `2 * bytes / median time` (read + written), or why it was not measured.
    #[serde(flatten)]
    pub measured: Measured,
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
    /// Its times and `2 * bytes / median time` (read + written), or why it was not measured.
    #[serde(flatten)]
    pub measured: Measured,
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
pub type ContenderResult = crate::side::ContenderResult<Figures>;

/// A decode contender's figures (in its JSON object, after the check).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Figures {
    /// Its launch times per event on an idle stream (each launch between its own pair of events), if timed.
    pub time: Option<Times>,
    /// Input sets rotated through (each a separate copy of every operand a launch reads): at least [`MIN_SETS`];
    /// the same sets serve the per-event, kernel and graph times.
    pub sets: usize,
    /// `sets` times the bytes one launch moves (for cuBLAS: dense A, B and C): at least 2x L2 unless capped by
    /// [`MAX_SETS`].
    pub rotated_bytes: u64,
}

impl ContenderResult {
    fn of(form: Form) -> Self {
        ContenderResult::new(form.name(), form.description())
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
    /// The bound, a minimum.
    pub bound: f64,
    /// Whether the figure meets it; `None` when the figure could not be measured.
    pub met: Option<bool>,
    /// Whether the read floor's time would meet it (the figure computed from the read floor's graph time instead of
    /// sparsek's): `Some(false)` marks a target out of reach of any kernel measured this way. `None` when the
    /// read floor was not measured.
    pub floor_met: Option<bool>,
}

/// The contenders' results in one case, one per [`Form`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Contenders {
    /// sparsek's result.
    pub sparsek: ContenderResult,
    /// cuBLAS's result.
    pub cublas: ContenderResult,
}

impl Contenders {
    /// Every contender, not yet run.
    fn new() -> Self {
        Contenders { sparsek: ContenderResult::of(Form::Sparsek), cublas: ContenderResult::of(Form::Cublas) }
    }

    /// The result of contender `form`.
    fn get_mut(&mut self, form: Form) -> &mut ContenderResult {
        match form {
            Form::Sparsek => &mut self.sparsek,
            Form::Cublas => &mut self.cublas,
        }
    }

    /// Every result, in [`Form::ALL`] order.
    pub fn all(&self) -> [&ContenderResult; 2] {
        [&self.sparsek, &self.cublas]
    }
}

/// One case's results.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DecodeRecord {
    /// The case (flattened into the record's JSON).
    #[serde(flatten)]
    pub facts: crate::side::CaseFacts,
    /// The bytes one product must move.
    pub bytes: BytesMoved,
    /// The contenders' results (flattened into the record's JSON).
    #[serde(flatten)]
    pub contenders: Contenders,
    /// The copy of the same bytes, timed with the contenders.
    pub same_size_copy: SameSizeCopy,
    /// `bytes.total / sparsek's median` per event (idle stream), GB/s.
    pub achieved_gbps: Option<f64>,
    /// `achieved_gbps / copy.gbps`.
    pub copy_fraction: Option<f64>,
    /// `achieved_gbps / same_size_copy.gbps` (the copy's time over sparsek's, up to the 16-byte rounding).
    pub same_size_copy_fraction: Option<f64>,
    /// The read floor ([`floor`]): a kernel moving the case's bytes once, timed per event (idle stream) with the
    /// contenders; its rotated sets also serve its kernel and graph times.
    pub read_floor: ReadFloor,
    /// The read floor's median / sparsek's, per event: how close sparsek is to moving the bytes and nothing else.
    pub read_floor_fraction: Option<f64>,
    /// The read floor queued behind the hold like [`DecodeRecord::sparsek_queued`]: the GPU's own time to move the
    /// bytes, without the host's: its kernel time (the table's "read floor kernel µs").
    pub read_floor_queued: Queued,
    /// cuBLAS's median / sparsek's, per event.
    pub speedup_vs_cublas: Option<f64>,
    /// sparsek's median / the empty launch's, per event.
    pub launch_ratio: Option<f64>,
    /// sparsek queued behind the hold ([`queued`]): the GPU's own time per launch, without host gaps: its kernel
    /// time (the table's "sparsek kernel µs").
    pub sparsek_queued: Queued,
    /// sparsek's queued time / the queued empty launch's.
    pub queued_launch_ratio: Option<f64>,
    /// sparsek queued as [`DecodeRecord::sparsek_queued`], launched with programmatic dependent launch
    /// (`Policy::programmatic`): each launch may start under the one before it. Its output must have the
    /// plain launches' bits, else this is a failure. `None` when not measured (a GPU without it, or a run whose
    /// launches are all programmatic).
    pub sparsek_queued_programmatic: Option<Queued>,
    /// sparsek replayed from a CUDA graph: [`queued::BATCH`] launches over its rotated sets captured once, the
    /// median replay's time per launch (the targets' time; the table's "sparsek graph µs"). Its output must pass the
    /// oracle's check. `None` when not measured.
    pub sparsek_graph: Option<Queued>,
    /// As [`DecodeRecord::sparsek_graph`] through the programmatic `Gpu` (measured where
    /// [`DecodeRecord::sparsek_queued_programmatic`] is).
    pub sparsek_graph_programmatic: Option<Queued>,
    /// cuBLAS queued behind the hold like [`DecodeRecord::sparsek_queued`]: its kernel time (the table's "cuBLAS
    /// kernel µs").
    pub cublas_queued: Queued,
    /// The read floor replayed from a CUDA graph like [`DecodeRecord::sparsek_graph`] (no output to check).
    /// `None` when not measured.
    pub read_floor_graph: Option<Queued>,
    /// cuBLAS replayed from a CUDA graph like [`DecodeRecord::sparsek_graph`] (`cublasGemmEx` captured with a
    /// workspace of its own), its output checked against the oracle. `None` when not measured.
    pub cublas_graph: Option<Queued>,
    /// A's stored bytes (`bytes.a_values`) / sparsek's graph time, GB/s: its rate on the stored bytes.
    pub graph_stored_gbps: Option<f64>,
    /// [`Figure::GraphFloorFraction`]: the read floor's graph time / sparsek's.
    pub graph_floor_fraction: Option<f64>,
    /// [`Figure::GraphSpeedupVsCublas`]: cuBLAS's graph time / sparsek's.
    pub graph_speedup_vs_cublas: Option<f64>,
    /// The targets that apply ([`targets`]) and their verdicts.
    pub goals: Vec<Goal>,
    /// The SM clock and why the case could not run (flattened into the record's JSON).
    #[serde(flatten)]
    pub status: crate::side::CaseStatus,
}

/// A graph's time per launch, when it was measured and its output (if any) passed its check.
fn graph_us(q: &Option<Queued>) -> Option<f64> {
    q.as_ref().filter(|q| q.error.is_none()).and_then(Queued::median_us)
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
            contenders: Contenders::new(),
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
            cublas_queued: Queued::default(),
            read_floor_graph: None,
            cublas_graph: None,
            graph_stored_gbps: None,
            graph_floor_fraction: None,
            graph_speedup_vs_cublas: None,
            goals: Vec::new(),
            status: crate::side::CaseStatus::default(),
        }
    }

    /// The value of `figure`.
    pub fn figure(&self, figure: Figure) -> Option<f64> {
        match figure {
            Figure::GraphFloorFraction => self.graph_floor_fraction,
            Figure::GraphSpeedupVsCublas => self.graph_speedup_vs_cublas,
        }
    }

    /// sparsek's graph time per launch, when its graph output and its plain output passed their checks.
    pub fn sparsek_graph_us(&self) -> Option<f64> {
        graph_us(&self.sparsek_graph).filter(|_| self.contenders.sparsek.passed())
    }

    /// cuBLAS's graph time per launch, when its graph output and its plain output passed their checks.
    pub fn cublas_graph_us(&self) -> Option<f64> {
        graph_us(&self.cublas_graph).filter(|_| self.contenders.cublas.passed())
    }

    /// The read floor's graph time per launch, when measured.
    pub fn read_floor_graph_us(&self) -> Option<f64> {
        graph_us(&self.read_floor_graph)
    }

    /// Fills in the figures from the trusted times and the references, and the verdict on each of `case`'s
    /// targets.
    fn evaluate(&mut self, case: &Case, refs: &References) {
        // Per event, idle stream (reported, no target).
        let sparsek = self.contenders.sparsek.trusted_us();
        self.achieved_gbps = ratio(Some(self.bytes.total as f64 / 1e3), sparsek);
        self.copy_fraction = ratio(self.achieved_gbps, refs.copy.measured.gbps);
        self.same_size_copy.measured.set_gbps(2 * self.same_size_copy.bytes);
        self.same_size_copy_fraction = ratio(self.achieved_gbps, self.same_size_copy.measured.gbps);
        self.speedup_vs_cublas = ratio(self.contenders.cublas.trusted_us(), sparsek);
        self.launch_ratio = ratio(sparsek, refs.empty_us());
        let floor = self.read_floor.median_us();
        self.read_floor.measured.set_gbps(self.read_floor.read_bytes + self.read_floor.write_bytes);
        self.read_floor_fraction = ratio(floor, sparsek);
        // Kernel (queued).
        let queued = self.sparsek_queued.median_us().filter(|_| self.contenders.sparsek.passed());
        self.queued_launch_ratio = ratio(queued, refs.queued_empty_launch.median_us());
        // Graph: the targets' figures.
        let (sparsek, cublas, floor) = (self.sparsek_graph_us(), self.cublas_graph_us(), self.read_floor_graph_us());
        self.graph_stored_gbps = ratio(Some(self.bytes.a_values as f64 / 1e3), sparsek);
        self.graph_floor_fraction = ratio(floor, sparsek);
        self.graph_speedup_vs_cublas = ratio(cublas, sparsek);
        // The same figures with the read floor's graph time in place of sparsek's.
        let floor_figure = |figure: Figure| match figure {
            Figure::GraphFloorFraction => ratio(floor, floor),
            Figure::GraphSpeedupVsCublas => ratio(cublas, floor),
        };
        let nnzb = if self.facts.nnzb > 0 { self.facts.nnzb } else { nominal_nnzb(case) };
        self.goals = targets(case, nnzb)
            .into_iter()
            .map(|(figure, bound)| Goal {
                figure,
                bound,
                met: self.figure(figure).map(|v| figure.meets(v, bound)),
                floor_met: floor_figure(figure).map(|v| figure.meets(v, bound)),
            })
            .collect();
    }

    /// The graphs that were attempted and failed (capture, replay or their output's check), as (contender, why):
    /// their times are not reported and their targets not measured.
    pub fn graph_failures(&self) -> Vec<(&'static str, &str)> {
        [
            ("sparsek", &self.sparsek_graph),
            ("sparsek programmatic", &self.sparsek_graph_programmatic),
            ("read floor", &self.read_floor_graph),
            ("cuBLAS", &self.cublas_graph),
        ]
        .into_iter()
        .filter_map(|(name, q)| Some((name, q.as_ref()?.error.as_deref()?)))
        .collect()
    }

    /// Whether the case ran and sparsek's output passed its check.
    pub fn sparsek_passed(&self) -> bool {
        self.status.error.is_none() && self.contenders.sparsek.passed()
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

    let hold = Hold::load(gpu).map_err(Arc::new);
    let floor_kernel = floor::load(gpu).map_err(Arc::new);
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
    error::write(&json_path, to_json(&header, &references, &records, cfg.cases.is_empty())?.as_bytes())?;
    for (i, case) in cfg.cases.iter().enumerate() {
        let tag = format!("case {}/{}", i + 1, cfg.cases.len());
        let rec = run_case((gpu, programmatic), (&lib, &floor_kernel), &hold, cfg, iters, case, &references, &tag);
        eprintln!("{tag} {}", progress_line(&rec));
        records.push(rec);
        error::write(&json_path, to_json(&header, &references, &records, i + 1 == cfg.cases.len())?.as_bytes())?;
    }
    drop(lib);

    crate::side::publish(cfg, "decode.md", &markdown(&header, &references, &records), &json_path)?;
    for r in records.iter().filter(|r| !r.sparsek_passed()) {
        let why = r.status.error.clone().or_else(|| r.contenders.sparsek.error.clone());
        let why = why.or_else(|| r.contenders.sparsek.check.as_ref().map(|k| k.detail.clone()));
        eprintln!("FAILED {}: {}", r.facts.case, why.unwrap_or_default());
    }
    for r in &records {
        for (name, why) in r.graph_failures() {
            eprintln!("GRAPH FAILED {} ({name}): {why}", r.facts.case);
        }
    }
    let all_passed = records.iter().all(DecodeRecord::sparsek_passed);
    Ok(DecodeSummary { header, references, records, all_passed })
}

/// The whole run as pretty-printed JSON: `{"header": ..., "references": {"copy": ..., "empty_launch": ...},
/// "complete": bool, "records": [...]}` (the header as in `latest.json`).
pub fn to_json(header: &Header, references: &References, records: &[DecodeRecord], complete: bool) -> Result<String> {
    #[derive(Serialize)]
    struct Extra<'a> {
        references: &'a References,
    }
    crate::side::to_json("decode.json", header, Extra { references }, records, complete)
}

mod markdown;
mod measure;
#[cfg(test)]
mod tests;

pub use markdown::markdown;
use markdown::*;
pub use measure::decode_depth;
use measure::*;
