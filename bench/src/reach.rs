//! `sparsek bench --reach`: what the library's wider API costs against its core path, measured on the same
//! problem in one process, with the method of the main benchmark (checked against the f64 oracle first, then
//! timed interleaved launch by launch with CUDA events, median):
//!
//! 1. `sparsek-f16`: [`Gpu::spmm`] with f16 A and B, row-major, and an f32 C (the main benchmark's sparsek
//!    contender);
//! 2. `sparsek-bf16`: the same, with bf16 copies of the same A and B (rounded to bf16, so checked against their
//!    own oracle);
//! 3. `sparsek-f16-linear`: the f16 product in the form of a linear layer `y = x @ W^T`, launched with
//!    [`Gpu::spmm_raw`] over views: B is a column-major `K x N` view of a row-major `N x K` buffer (`x`), C a
//!    column-major `M x N` view of a row-major `N x M` f32 buffer (`y`), via
//!    [`DenseView::t`](sparsek::gpu::DenseView::t) and [`DenseViewMut::t`](sparsek::gpu::DenseViewMut::t);
//! 4. cuBLAS dense f16 GEMM of the same M, N, K, f32 accumulation and output (`cublasGemmEx`, the main
//!    benchmark's baseline).
//!
//! Every sparsek contender writes an f32 C, as the main benchmark's does, so the only difference between
//! contenders 1 and 2 is the input type, and between 1 and 3 the operand layouts. The results go to
//! `OUT_DIR/reach.json` (rewritten after every case) and `OUT_DIR/reach.md`, and the table to stdout.

use std::fmt::Write as _;

use half::{bf16, f16};
use serde::Serialize;

use crate::cublas::{self, Cublas};
use crate::error::{self, Error, Result};
use crate::grid::{Case, percent};
use crate::measure::rotation_sets;
use crate::num::round_sig;
use crate::report::{Check, Header, Timing, TimingFields};
use crate::side::Checked;
use sparsek::Epilogue;
use sparsek::check::{CheckReport, Expected};
use sparsek::format::{Bsr, Pattern};
use sparsek::gpu::{DeviceBsr, DeviceMatrix, Gpu};
use sparsek::matrix::Matrix;

pub use crate::side::MIN_ITERS;

/// The default cases: 8192^3 at bs 64 and 128, densities 10% and 22%, and 4096^3 bs 64 at 12.5%, all uniform.
pub fn default_cases() -> Vec<Case> {
    let mut cases = crate::grid::uniform_cubes(8192, &[64, 128], &[0.10, 0.22]);
    cases.push(Case::synthetic(4096, 4096, 4096, 64, 0.125, Pattern::Uniform));
    cases
}

/// What to run and where to write it (`reach.json` and `reach.md` go into `out_dir`).
pub type ReachConfig = crate::side::RunConfig;

/// The contenders, in the order of the table and of the JSON's `contenders` list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// `Gpu::spmm`, f16 A and B row-major, f32 C row-major.
    F16,
    /// `Gpu::spmm`, bf16 A and B row-major, f32 C row-major.
    Bf16,
    /// `Gpu::spmm_raw`, f16 A, column-major B and C views (the linear-layer form).
    F16Linear,
    /// cuBLAS dense f16 GEMM, f32 C.
    Cublas,
}

impl Form {
    /// Every contender, in table order.
    pub const ALL: [Form; 4] = [Form::F16, Form::Bf16, Form::F16Linear, Form::Cublas];

    /// The name in the JSON and the progress lines.
    pub fn name(self) -> &'static str {
        match self {
            Form::F16 => "sparsek-f16",
            Form::Bf16 => "sparsek-bf16",
            Form::F16Linear => "sparsek-f16-linear",
            Form::Cublas => cublas::KIND,
        }
    }

    /// What it runs, in words.
    pub fn description(self) -> &'static str {
        match self {
            Form::F16 => "Gpu::spmm: f16 A (BSR), f16 B row-major, f32 C row-major",
            Form::Bf16 => "Gpu::spmm: bf16 A (BSR), bf16 B row-major, f32 C row-major (bf16 copies of the f16 values)",
            Form::F16Linear => {
                "Gpu::spmm_raw on the Gpu's stream: f16 A (BSR), B a column-major K x N view of a row-major N x K \
                 buffer (ld K), C a column-major M x N f32 view of a row-major N x M buffer (ld M)"
            }
            Form::Cublas => "cublasGemmEx: dense f16 A and B, f32 C, CUBLAS_COMPUTE_32F",
        }
    }

    /// Whether it is one of sparsek's (whose failure fails the run).
    pub fn is_sparsek(self) -> bool {
        self != Form::Cublas
    }
}

/// One contender's result in one case.
pub type ContenderResult = crate::side::ContenderResult<Figures>;

/// A reach contender's figures (in its JSON object, after the check).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Figures {
    /// Its launch times, if timed (flattened: as `latest.json`'s contenders write them).
    #[serde(flatten)]
    pub timing: TimingFields,
    /// TFLOPS at the median: effective (`2 * nnzb * bs^2 * N / time`) for sparsek, dense (`2 * M * N * K /
    /// time`) for cuBLAS.
    pub tflops: Option<f64>,
    /// Input sets rotated through (each a separate copy of every operand a launch reads).
    pub sets: usize,
}

impl ContenderResult {
    fn of(form: Form) -> Self {
        ContenderResult::new(form.name(), form.description())
    }

    /// The median time, when the output passed its check (a failed check makes the time untrusted).
    pub fn trusted_ms(&self) -> Option<f64> {
        self.timing.median_ms.filter(|&t| t > 0.0 && self.passed())
    }

    fn set_timing(&mut self, samples: &[f32], flops: f64) {
        if let Some(t) = Timing::from_samples(samples) {
            let sig6 = |ms: f64| round_sig(ms, 6);
            let rounded = Timing { median_ms: sig6(t.median_ms), min_ms: sig6(t.min_ms), max_ms: sig6(t.max_ms), ..t };
            self.timing = Some(&rounded).into();
            self.tflops = (t.median_ms > 0.0).then(|| round_sig(flops / (t.median_ms * 1e-3) / 1e12, 6));
        }
    }
}

/// Time ratios of one case, each `None` unless both contenders ran and passed their checks.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Ratios {
    /// bf16 time / f16 time (above 1: bf16 is slower).
    pub bf16_over_f16: Option<f64>,
    /// Linear-form time / row-major f16 time (above 1: the linear form is slower).
    pub linear_over_row_major: Option<f64>,
    /// cuBLAS time / f16 time (speedup over cuBLAS).
    pub f16_speedup_vs_cublas: Option<f64>,
    /// cuBLAS time / bf16 time.
    pub bf16_speedup_vs_cublas: Option<f64>,
    /// cuBLAS time / linear-form time.
    pub linear_speedup_vs_cublas: Option<f64>,
}

impl Ratios {
    /// The ratios of `contenders` (in [`Form::ALL`] order).
    pub fn of(contenders: &[ContenderResult]) -> Ratios {
        let ms = |f: Form| contenders.get(f as usize).and_then(ContenderResult::trusted_ms);
        let ratio = |num: Form, den: Form| Some(round_sig(ms(num)? / ms(den)?, 6));
        Ratios {
            bf16_over_f16: ratio(Form::Bf16, Form::F16),
            linear_over_row_major: ratio(Form::F16Linear, Form::F16),
            f16_speedup_vs_cublas: ratio(Form::Cublas, Form::F16),
            bf16_speedup_vs_cublas: ratio(Form::Cublas, Form::Bf16),
            linear_speedup_vs_cublas: ratio(Form::Cublas, Form::F16Linear),
        }
    }
}

/// One case's results.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReachRecord {
    /// The case (flattened into the record's JSON).
    #[serde(flatten)]
    pub facts: crate::side::CaseFacts,
    /// One result per contender, in [`Form::ALL`] order.
    pub contenders: Vec<ContenderResult>,
    /// The time ratios.
    pub ratios: Ratios,
    /// The SM clock and why the case could not run (flattened into the record's JSON).
    #[serde(flatten)]
    pub status: crate::side::CaseStatus,
}

impl ReachRecord {
    fn new(case: &Case, seed: u64) -> Self {
        ReachRecord {
            facts: crate::side::CaseFacts::new(case, seed),
            contenders: Form::ALL.iter().map(|&f| ContenderResult::of(f)).collect(),
            ratios: Ratios::default(),
            status: crate::side::CaseStatus::default(),
        }
    }

    /// The result of contender `form`.
    pub fn contender(&self, form: Form) -> Option<&ContenderResult> {
        self.contenders.get(form as usize)
    }

    /// Whether the case ran and every sparsek contender passed its check.
    pub fn sparsek_passed(&self) -> bool {
        self.status.error.is_none()
            && Form::ALL
                .iter()
                .filter(|f| f.is_sparsek())
                .all(|&f| self.contender(f).is_some_and(ContenderResult::passed))
    }
}

/// What a run found.
#[derive(Debug)]
pub struct ReachSummary {
    /// Facts about the run.
    pub header: Header,
    /// One record per case.
    pub records: Vec<ReachRecord>,
    /// Every case ran and every sparsek contender passed every check.
    pub all_passed: bool,
}

/// Runs every case of `cfg` on `gpu`, printing progress on stderr and the table on stdout, and writes
/// `reach.json` and `reach.md` into `cfg.out_dir`. Errors only when an output cannot be written; a case that
/// fails is recorded with its error.
pub fn run(gpu: &Gpu, cfg: &ReachConfig) -> Result<ReachSummary> {
    let crate::side::Opened { header, cublas: lib, iters } = crate::side::open(gpu, cfg, "reach")?;
    let json_path = cfg.out_dir.join("reach.json");

    let mut records = Vec::with_capacity(cfg.cases.len());
    for (i, case) in cfg.cases.iter().enumerate() {
        let tag = format!("[{}/{}]", i + 1, cfg.cases.len());
        let rec = run_case(gpu, &lib, cfg, iters, case, &tag);
        eprintln!("{tag} {}", progress_line(&rec));
        records.push(rec);
        error::write(&json_path, to_json(&header, &records, i + 1 == cfg.cases.len())?.as_bytes())?;
    }
    if cfg.cases.is_empty() {
        error::write(&json_path, to_json(&header, &records, true)?.as_bytes())?;
    }
    drop(lib);

    crate::side::publish(cfg, "reach.md", &markdown(&header, &records), &json_path)?;
    let all_passed = records.iter().all(ReachRecord::sparsek_passed);
    for r in records.iter().filter(|r| !r.sparsek_passed()) {
        let why = r.status.error.clone().unwrap_or_else(|| {
            r.contenders
                .iter()
                .filter(|c| c.name != cublas::KIND && !c.passed())
                .map(|c| {
                    let detail = c.error.clone().or_else(|| c.check.as_ref().map(|k| k.detail.clone()));
                    format!("{}: {}", c.name, detail.unwrap_or_default())
                })
                .collect::<Vec<_>>()
                .join("; ")
        });
        eprintln!("FAILED {}: {why}", r.facts.case);
    }
    Ok(ReachSummary { header, records, all_passed })
}

/// The whole run as pretty-printed JSON: `{"header": ..., "complete": bool, "records": [...]}` (the header as
/// in `latest.json`).
pub fn to_json(header: &Header, records: &[ReachRecord], complete: bool) -> Result<String> {
    crate::side::to_json("reach.json", header, (), records, complete)
}

/// The host operands of one case and their oracles.
struct Operands {
    a: Bsr<f16>,
    b: Matrix<f16>,
    a_bf16: Bsr<bf16>,
    b_bf16: Matrix<bf16>,
    /// B^T (N x K row-major): the memory of the column-major B of the linear form.
    b_t: Matrix<f16>,
    /// The oracle of the f16 operands (tolerance of an f32 output).
    expected: Expected,
    /// The oracle of the bf16 copies.
    expected_bf16: Expected,
}

/// Runs one case: operands and oracles, then each contender set up and checked, then all timed interleaved.
fn run_case(gpu: &Gpu, lib: &Result<Cublas>, cfg: &ReachConfig, iters: usize, case: &Case, tag: &str) -> ReachRecord {
    let mut case = case.clone();
    let seed = case.seed(cfg.seed);
    let mut rec = ReachRecord::new(&case, seed);
    let ops = match operands(&mut case, cfg, seed, tag) {
        Ok(o) => o,
        Err(e) => {
            rec.status.error = Some(e.to_string());
            return rec;
        }
    };
    rec.facts.nnzb = ops.a.nnzb();

    let mut sets: Vec<Option<Sets<'_>>> = Vec::with_capacity(Form::ALL.len());
    for (i, form) in Form::ALL.into_iter().enumerate() {
        eprintln!("{tag}   {}: setting up and checking", form.name());
        let result = match (form, lib) {
            (Form::Cublas, Err(why)) => Err(Error::Unavailable { lib: "cuBLAS", reason: why.to_string() }),
            _ => setup(gpu, lib.as_ref().ok(), form, &ops),
        };
        match result {
            Ok((s, check)) => {
                rec.contenders[i].check = Some(check);
                rec.contenders[i].sets = s.len();
                sets.push(Some(s));
            }
            Err(e) => {
                rec.contenders[i].error = Some(e.to_string());
                sets.push(None);
            }
        }
    }
    let (m, n, k) = (ops.a.rows(), ops.b.cols(), ops.a.cols());
    let sparse_flops = ops.a.flops(n);
    let dense_flops = 2.0 * m as f64 * n as f64 * k as f64;
    drop(ops);

    eprintln!("{tag}   timing, interleaved");
    let (which, mut timed): (Vec<usize>, Vec<&mut dyn crate::runner::Contender>) = sets
        .iter_mut()
        .enumerate()
        .filter_map(|(i, s)| s.as_mut().map(|s| (i, s as &mut dyn crate::runner::Contender)))
        .unzip();
    match crate::runner::time_interleaved(gpu, &mut timed, cfg.warmup, iters) {
        Ok((times, clock)) => {
            rec.status.sm_clock_mhz = clock;
            for (i, t) in which.iter().zip(&times) {
                let flops = if Form::ALL[*i] == Form::Cublas { dense_flops } else { sparse_flops };
                rec.contenders[*i].set_timing(t, flops);
            }
        }
        Err(e) => rec.status.error = Some(Error::step("timing")(e).to_string()),
    }
    rec.ratios = Ratios::of(&rec.contenders);
    rec
}

/// A and B ([`Case::operands`]), their bf16 copies, B^T, and the oracle of each on the same sampled rows.
fn operands(case: &mut Case, cfg: &ReachConfig, seed: u64, tag: &str) -> Result<Operands> {
    let (a, b, sample, expected) = crate::side::generated_operands(case, cfg, seed, tag, "--reach")?;
    let (m, n, k) = (a.rows(), b.cols(), a.cols());
    let copies = || -> sparsek::Result<_> {
        let a_bf16 = a.convert::<bf16>()?;
        let b_bf16 = b.convert::<bf16>()?;
        let b_t = Matrix::from_fn(n, k, |r, c| b.row(c)[r])?;
        let c0 = Matrix::<f32>::zeros(m, n)?;
        eprintln!("{tag}   oracle of the bf16 copies");
        let expected_bf16 = Expected::compute(&a_bf16, &b_bf16, &c0, Epilogue::default(), sample, |_, _| {})?;
        Ok((a_bf16, b_bf16, b_t, expected_bf16))
    };
    let (a_bf16, b_bf16, b_t, expected_bf16) = copies().map_err(Error::step(crate::side::OPERANDS))?;
    Ok(Operands { a, b, a_bf16, b_bf16, b_t, expected, expected_bf16 })
}

/// One contender's device operands: input sets rotated per launch (C of set 0 is the one checked).
enum Sets<'l> {
    F16(Vec<(DeviceBsr<f16>, DeviceMatrix<f16>, DeviceMatrix<f32>)>),
    Bf16(Vec<(DeviceBsr<bf16>, DeviceMatrix<bf16>, DeviceMatrix<f32>)>),
    /// A, B^T (N x K) and C^T (N x M), all row-major buffers; B and C are launched as their column-major
    /// transposes.
    Linear(Vec<(DeviceBsr<f16>, DeviceMatrix<f16>, DeviceMatrix<f32>)>),
    Cublas(crate::side::CublasSets<'l>),
}

impl crate::runner::Contender for Sets<'_> {
    fn launch(&mut self, gpu: &Gpu, set: usize) -> Result<()> {
        Sets::launch(self, gpu, set)
    }
    fn sets(&self) -> usize {
        self.len().max(1)
    }
}

impl Sets<'_> {
    fn len(&self) -> usize {
        match self {
            Sets::F16(s) | Sets::Linear(s) => s.len(),
            Sets::Bf16(s) => s.len(),
            Sets::Cublas(c) => c.len(),
        }
    }

    /// Queues one product on input set `set` on the GPU's stream.
    fn launch(&mut self, gpu: &Gpu, set: usize) -> Result<()> {
        let ep = Epilogue::default();
        match self {
            Sets::F16(sets) => {
                let (a, b, c) = &mut sets[set];
                Ok(gpu.spmm(a, b, c, ep)?)
            }
            Sets::Bf16(sets) => {
                let (a, b, c) = &mut sets[set];
                Ok(gpu.spmm(a, b, c, ep)?)
            }
            Sets::Linear(sets) => {
                let (a, b_t, c_t) = &mut sets[set];
                let (a, b) = (a.view(), b_t.view().t());
                let mut c = c_t.view_mut().t();
                // SAFETY: the stream is the Gpu's own, alive as long as `gpu`; the views describe buffers this
                // contender owns and borrows for the call, and every use of those buffers is queued on that
                // same stream, so nothing writes A or B or touches C while the kernel runs.
                Ok(unsafe { gpu.spmm_raw(gpu.stream().cu_stream(), &a, &b, &mut c, None, ep) }?)
            }
            Sets::Cublas(c) => c.launch(gpu, set),
        }
    }
}

impl Checked for Sets<'_> {
    fn output(&mut self) -> Option<&mut DeviceMatrix<f32>> {
        match self {
            Sets::F16(s) | Sets::Linear(s) => s.first_mut().map(|t| &mut t.2),
            Sets::Bf16(s) => s.first_mut().map(|t| &mut t.2),
            Sets::Cublas(c) => c.output(),
        }
    }
}

/// Uploads `form`'s input sets (as many as [`rotation_sets`] asks for), poisons C of set 0, launches on it and
/// checks the output against the oracle.
fn setup<'l>(gpu: &Gpu, lib: Option<&'l Cublas>, form: Form, ops: &Operands) -> Result<(Sets<'l>, Check)> {
    let (a, b) = (&ops.a, &ops.b);
    let (m, n, k) = (a.rows(), b.cols(), a.cols());
    // Bytes one launch reads and writes: A (values, row_ptr, col_idx twice over: indices and schedule), B, C.
    let sparse_bytes = 2 * a.values().len() + 4 * (a.row_ptr().len() + 2 * a.col_idx().len()) + 2 * k * n + 4 * m * n;
    let count = |bytes: usize| rotation_sets(bytes, gpu.info().l2_bytes);
    let mut sets = match form {
        Form::F16 => Sets::F16(
            (0..count(sparse_bytes))
                .map(|_| Ok((gpu.upload(a)?, gpu.upload_matrix(b)?, gpu.zeros(m, n)?)))
                .collect::<sparsek::Result<_>>()?,
        ),
        Form::Bf16 => Sets::Bf16(
            (0..count(sparse_bytes))
                .map(|_| Ok((gpu.upload(&ops.a_bf16)?, gpu.upload_matrix(&ops.b_bf16)?, gpu.zeros(m, n)?)))
                .collect::<sparsek::Result<_>>()?,
        ),
        Form::F16Linear => Sets::Linear(
            (0..count(sparse_bytes))
                .map(|_| Ok((gpu.upload(a)?, gpu.upload_matrix(&ops.b_t)?, gpu.zeros(n, m)?)))
                .collect::<sparsek::Result<_>>()?,
        ),
        Form::Cublas => {
            let lib = lib.ok_or(Error::Unsupported("cuBLAS unavailable"))?;
            let depth = count(2 * m * k + 2 * k * n + 4 * m * n);
            Sets::Cublas(crate::side::CublasSets::upload(gpu, lib, a, b, depth)?)
        }
    };
    let host = sets.first_output(gpu)?;
    Ok((sets, Check::from(&check_output(form, ops, &host))))
}

/// Compares `form`'s output, downloaded (`C`, or for the linear form the `N x M` buffer holding `C^T`), with
/// the oracle of its operands.
fn check_output(form: Form, ops: &Operands, host: &Matrix<f32>) -> CheckReport {
    let (a, b) = (&ops.a, &ops.b);
    match form {
        Form::F16 => ops.expected.check(host),
        Form::Bf16 => ops.expected_bf16.check(host),
        // C^T (N x M row-major) read back as the M x N C; a buffer of another shape fails the check.
        Form::F16Linear => {
            if (host.rows(), host.cols()) != (b.cols(), a.rows()) {
                let mut r = ops.expected.check_with(b.cols(), |_, _| f64::NAN);
                r.shape_error =
                    Some(format!("C^T is {}x{}, expected {}x{}", host.rows(), host.cols(), b.cols(), a.rows()));
                return r;
            }
            ops.expected.check_with(b.cols(), |r, c| f64::from(host.get(c, r)))
        }
        Form::Cublas => crate::side::check_cublas(&ops.expected, a, b, host),
    }
}

/// Milliseconds with precision that suits their size, `!` appended when the output failed its check.
fn ms_cell(c: Option<&ContenderResult>) -> String {
    let Some(c) = c else { return "-".into() };
    let Some(t) = c.timing.median_ms else { return "-".into() };
    let s = if t < 0.1 {
        format!("{t:.4}")
    } else if t < 100.0 {
        format!("{t:.3}")
    } else {
        format!("{t:.1}")
    };
    if c.passed() { s } else { format!("{s}!") }
}

fn tflops_cell(c: Option<&ContenderResult>) -> String {
    c.and_then(|c| c.tflops).map_or_else(|| "-".into(), |v| format!("{v:.1}"))
}

fn ratio_cell(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.3}"))
}

fn speedup_cell(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.2}x"))
}

/// The checks column: "pass", or what failed or could not run.
fn checks_cell(r: &ReachRecord) -> String {
    r.status.checks_cell(&r.contenders)
}

/// The Markdown table of a run: two lines of facts and method, then one row per case.
pub fn markdown(header: &Header, records: &[ReachRecord]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}", crate::report::header_line(header));
    let _ = writeln!(
        s,
        "Median of {} launches per contender after {} warm-up, interleaved launch by launch. Every contender \
         accumulates in f32 and writes an f32 C. f16 and bf16: `Gpu::spmm`, A (BSR), B and C row-major (bf16: \
         bf16 copies of the same values); linear: the f16 product through `Gpu::spmm_raw` with B a column-major \
         K×N view of an N×K buffer and C a column-major M×N view of an N×M buffer (`y = x @ W^T`); cuBLAS: {} \
         (`cublasGemmEx`, dense f16). TFLOPS: effective (2·nnzb·bs²·N / time) for sparsek, dense (2·M·N·K / \
         time) for cuBLAS. bf16/f16 and linear/row are time ratios (above 1: slower than the row-major f16 \
         product); \"vs cuBLAS\" is cuBLAS time / contender time. `!` marks a time whose output failed its \
         check; ratios are given only between checked contenders.",
        header.iters, header.warmup, header.cublas
    );
    s.push('\n');
    s.push_str(
        "| M×N×K | bs | density | pattern | nnzb | f16 ms | f16 TFLOPS | bf16 ms | bf16 TFLOPS | linear ms \
         | linear TFLOPS | cuBLAS ms | cuBLAS TFLOPS | bf16/f16 | linear/row | f16 vs cuBLAS | bf16 vs cuBLAS \
         | linear vs cuBLAS | SM MHz | checks |\n",
    );
    s.push_str("|---|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n");
    for r in records {
        let c = |f: Form| r.contender(f);
        let q = &r.ratios;
        let _ = writeln!(
            s,
            "| {}×{}×{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} \
             | {} |",
            r.facts.m,
            r.facts.n,
            r.facts.k,
            r.facts.bs,
            percent(r.facts.density),
            r.facts.pattern,
            r.facts.nnzb,
            ms_cell(c(Form::F16)),
            tflops_cell(c(Form::F16)),
            ms_cell(c(Form::Bf16)),
            tflops_cell(c(Form::Bf16)),
            ms_cell(c(Form::F16Linear)),
            tflops_cell(c(Form::F16Linear)),
            ms_cell(c(Form::Cublas)),
            tflops_cell(c(Form::Cublas)),
            ratio_cell(q.bf16_over_f16),
            ratio_cell(q.linear_over_row_major),
            speedup_cell(q.f16_speedup_vs_cublas),
            speedup_cell(q.bf16_speedup_vs_cublas),
            speedup_cell(q.linear_speedup_vs_cublas),
            r.status.clock_cell(),
            checks_cell(r),
        );
    }
    s
}

/// `8192x8192x8192 bs64 22% uniform: f16 1.234 ms (412.3 TFLOPS), bf16 1.250 ms (1.013x), ...`
fn progress_line(r: &ReachRecord) -> String {
    let mut s = format!("{}: ", r.facts.case);
    if let Some(e) = &r.status.error {
        s.push_str(&format!("ERROR {e}"));
        return s;
    }
    let ms = |f: Form| {
        r.contender(f).and_then(|c| c.timing.median_ms).map_or_else(|| "n/a".into(), |t| format!("{t:.3} ms"))
    };
    let tf = |f: Form| r.contender(f).and_then(|c| c.tflops).map_or_else(String::new, |t| format!(" {t:.1} TFLOPS"));
    let q = &r.ratios;
    let x = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{v:.3}x"));
    s.push_str(&format!(
        "f16 {}{}, bf16 {}{} ({} f16), linear {}{} ({} row-major), cuBLAS {}{}",
        ms(Form::F16),
        tf(Form::F16),
        ms(Form::Bf16),
        tf(Form::Bf16),
        x(q.bf16_over_f16),
        ms(Form::F16Linear),
        tf(Form::F16Linear),
        x(q.linear_over_row_major),
        ms(Form::Cublas),
        tf(Form::Cublas),
    ));
    s.push_str(&format!("{}, checks {}", r.status.clock_note(), checks_cell(r)));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::side::tests::check;

    fn record(times: [Option<f64>; 4], passed: [bool; 4]) -> ReachRecord {
        let case = Case::synthetic(8192, 8192, 8192, 64, 0.22, Pattern::Uniform);
        let mut r = ReachRecord::new(&case, 7);
        r.facts.nnzb = 292_556;
        for (i, c) in r.contenders.iter_mut().enumerate() {
            c.check = Some(check(passed[i]));
            c.timing.median_ms = times[i];
            c.tflops = times[i].map(|t| 1.0 / t);
        }
        r.ratios = Ratios::of(&r.contenders);
        r
    }

    #[test]
    fn default_cases_are_the_requested_ones() {
        let c = default_cases();
        assert_eq!(c.len(), 5);
        for bs in [64, 128] {
            for d in [0.10, 0.22] {
                assert!(c.contains(&Case::synthetic(8192, 8192, 8192, bs, d, Pattern::Uniform)));
            }
        }
        assert!(c.contains(&Case::synthetic(4096, 4096, 4096, 64, 0.125, Pattern::Uniform)));
        assert!(c.iter().all(|c| c.m % c.bs == 0 && c.k % c.bs == 0));
    }

    #[test]
    fn forms_index_the_contenders() {
        for (i, f) in Form::ALL.iter().enumerate() {
            assert_eq!(*f as usize, i);
        }
        assert_eq!(Form::ALL.iter().filter(|f| f.is_sparsek()).count(), 3);
    }

    #[test]
    fn ratios_are_time_ratios_between_checked_contenders() {
        let r = record([Some(1.0), Some(1.1), Some(1.05), Some(2.0)], [true; 4]);
        assert_eq!(r.ratios.bf16_over_f16, Some(1.1));
        assert_eq!(r.ratios.linear_over_row_major, Some(1.05));
        assert_eq!(r.ratios.f16_speedup_vs_cublas, Some(2.0));
        assert_eq!(r.ratios.bf16_speedup_vs_cublas, Some(round_sig(2.0 / 1.1, 6)));
        assert!(r.sparsek_passed());

        // A failed check makes that contender's ratios unavailable and fails the case.
        let r = record([Some(1.0), Some(1.1), Some(1.05), Some(2.0)], [true, false, true, true]);
        assert_eq!(r.ratios.bf16_over_f16, None);
        assert_eq!(r.ratios.bf16_speedup_vs_cublas, None);
        assert_eq!(r.ratios.linear_over_row_major, Some(1.05));
        assert!(!r.sparsek_passed());

        // cuBLAS failing its check does not fail the case, but gives no speedups.
        let r = record([Some(1.0), Some(1.1), Some(1.05), Some(2.0)], [true, true, true, false]);
        assert!(r.sparsek_passed());
        assert_eq!(r.ratios.f16_speedup_vs_cublas, None);
    }

    #[test]
    fn outputs_are_checked_in_their_layouts() {
        let cfg = ReachConfig {
            cases: Vec::new(),
            warmup: 0,
            iters: MIN_ITERS,
            check_rows: 8,
            seed: 1,
            out_dir: std::path::PathBuf::new(),
            command: String::new(),
        };
        // 128 x 96 output: every row checked (RowSample::auto).
        let mut case = Case::synthetic(128, 96, 256, 32, 0.3, Pattern::Uniform);
        let ops = operands(&mut case, &cfg, 5, "[test]").unwrap();
        let (m, n, k) = (ops.a.rows(), ops.b.cols(), ops.a.cols());
        assert_eq!((m, n, k), (128, 96, 256));
        assert!(ops.expected.is_full());
        assert_eq!((ops.b_t.rows(), ops.b_t.cols()), (n, k));
        assert!((0..k).all(|r| (0..n).all(|c| ops.b_t.get(c, r) == ops.b.get(r, c))));

        let cpu = |bf16: bool| {
            let mut c = Matrix::<f32>::zeros(m, n).unwrap();
            if bf16 {
                sparsek::cpu::spmm(&ops.a_bf16, &ops.b_bf16, &mut c, Epilogue::default()).unwrap();
            } else {
                sparsek::cpu::spmm(&ops.a, &ops.b, &mut c, Epilogue::default()).unwrap();
            }
            c
        };
        let (c16, cbf) = (cpu(false), cpu(true));
        let c_t = Matrix::from_fn(n, m, |r, c| c16.get(c, r)).unwrap();
        for (form, host) in [(Form::F16, &c16), (Form::Bf16, &cbf), (Form::F16Linear, &c_t), (Form::Cublas, &c16)] {
            let r = check_output(form, &ops, host);
            assert!(r.passed(), "{form:?}: {r}");
            assert_eq!(r.checked, m * n, "{form:?}");
        }
        // The wrong output for a form fails: row-major C as the linear form's C^T, f16 results as bf16's (the
        // bf16 copies are other values), a transposed C of a square product read as row-major.
        assert!(!check_output(Form::F16Linear, &ops, &c16).passed());
        assert!(!check_output(Form::Bf16, &ops, &c16).passed());
        let mut wrong = c_t.clone();
        wrong.set(3, 5, wrong.get(3, 5) + 1.0);
        let r = check_output(Form::F16Linear, &ops, &wrong);
        assert_eq!((r.failures, r.first_failure.map(|f| (f.0, f.1))), (1, Some((5, 3))));
    }

    #[test]
    fn table_and_json() {
        let header = Header { gpu: "Test GPU".into(), iters: 30, warmup: 5, ..Default::default() };
        let mut missing = record([Some(1.0), None, Some(1.05), None], [true; 4]);
        missing.contenders[3].check = None;
        missing.contenders[3].error = Some("cuBLAS unavailable: no | library".into());
        let records = vec![record([Some(1.0), Some(1.1), Some(1.05), Some(2.0)], [true; 4]), missing];
        let t = markdown(&header, &records);
        let rows: Vec<&str> = t.lines().filter(|l| l.starts_with("| 8192")).collect();
        assert_eq!(rows.len(), 2);
        let header_cols = t.lines().find(|l| l.starts_with("| M×N×K")).map(|l| l.matches('|').count());
        for row in &rows {
            assert_eq!(Some(row.matches('|').count()), header_cols, "{row}");
        }
        assert!(rows[0].contains("| 1.100 | 1.050 | 2.00x | 1.82x | 1.90x |"), "{}", rows[0]);
        assert!(rows[0].ends_with("| pass |"));
        assert!(rows[1].contains("cublas-gemmex-f16-f32 n/a"), "{}", rows[1]);

        let json = to_json(&header, &records, true).unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["complete"], true);
        assert_eq!(v["header"]["gpu"], "Test GPU");
        assert_eq!(v["records"][0]["contenders"][2]["name"], "sparsek-f16-linear");
        assert_eq!(v["records"][0]["ratios"]["linear_over_row_major"], 1.05);
        assert!(v["records"][1]["ratios"]["f16_speedup_vs_cublas"].is_null());
        // The layout of the committed files (docs/bench/*-reach.json): the top-level keys, and each contender's
        // keys with its figures in place.
        use crate::side::tests::{STATUS, keys_from, record_keys};
        assert_eq!(keys_from(&json, "header"), ["header", "complete", "records"]);
        assert_eq!(record_keys(&json), [&["contenders", "ratios"][..], &STATUS].concat());
        let figures = ["median_ms", "min_ms", "max_ms", "samples", "tflops", "sets"];
        let contender = [&["name", "description", "check"][..], &figures, &["error"]].concat();
        assert_eq!(keys_from(&json, "name"), contender);
    }
}
