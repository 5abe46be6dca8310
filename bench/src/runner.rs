//! The main benchmark's run ([`run`]: every case of a [`Config`], then the outputs), and one case on the GPU
//! ([`run_case`]): build the operands ([`Case::operands`]) and the oracle's sampled rows
//! ([`Expected`]), set up every contender with its rotated input sets, check each contender's output (C
//! poisoned first) with the library's verification path, then time them interleaved launch by launch
//! ([`EventTimer`]).

use std::path::PathBuf;

use half::f16;

use crate::cublas::{self, Cublas};
use crate::cuda::poison;
use crate::cusparse::{self, Cusparse, HostC, HostOperands, Kind as CusparseKind};
use crate::error::{self, Error, Result};
use crate::grid::Case;
use crate::measure::rotation_sets;
use crate::report::{Check, Header, Outcome, Record, Timing};
use crate::{env, json, report};
use sparsek::Epilogue;
use sparsek::check::{Expected, RowSample, Tolerance, max_abs};
use sparsek::format::Bsr;
use sparsek::gpu::timing::EventTimer;
use sparsek::gpu::{DeviceBsr, DeviceMatrix, Gpu};
use sparsek::matrix::Matrix;

/// Which cuSPARSE entry point to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CusparseChoice {
    /// The first of [`CusparseKind::AUTO`] the library accepts.
    Auto,
    /// Only this one (reported unavailable if refused).
    Only(CusparseKind),
    /// No cuSPARSE baseline.
    Off,
}

impl std::str::FromStr for CusparseChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(CusparseChoice::Auto),
            "off" => Ok(CusparseChoice::Off),
            _ => CusparseKind::parse(s).map(CusparseChoice::Only).ok_or_else(|| {
                let kinds = CusparseKind::AUTO.map(CusparseKind::name).join(", ");
                let reason = format!("'{s}' is none of auto, off, {kinds}");
                sparsek::Error::InvalidArgument { name: "--cusparse", reason }.into()
            }),
        }
    }
}

/// What the main benchmark runs and where it writes: a run's configuration and the cuSPARSE entry point.
#[derive(Clone, Debug)]
pub struct Config {
    /// The cases, launches, checks, seed and outputs.
    pub run: RunConfig,
    /// The cuSPARSE entry point.
    pub cusparse: CusparseChoice,
}

/// What a run runs and where it writes: a side mode's whole configuration, the main benchmark's with its
/// cuSPARSE choice ([`Config`]).
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The cases, in order (a side mode reports a matrix file as an error).
    pub cases: Vec<Case>,
    /// Untimed launches per contender (and per reference) before the timed ones.
    pub warmup: usize,
    /// Timed launches per contender, the median reported (a side mode raises fewer than
    /// [`MIN_ITERS`](crate::side::MIN_ITERS) to it).
    pub iters: usize,
    /// Random rows of C compared with the oracle per contender, plus the first and the last (a side mode checks
    /// every row when C has at most [`RowSample::FULL_CHECK_ELEMENTS`] elements).
    pub check_rows: usize,
    /// Seed mixed into every case's A and B (a side mode's matrices are the main benchmark's).
    pub seed: u64,
    /// Where the outputs go: `latest.json`, `speedup.png` (and `bench.md` when `../BENCHMARKS.md` has no
    /// markers), or a side mode's `.json` and `.md`.
    pub out_dir: PathBuf,
    /// The command line, recorded in the header.
    pub command: String,
}

/// What a run found.
#[derive(Debug)]
pub struct Summary {
    /// Facts about the run (as written in `latest.json`).
    pub header: Header,
    /// One record per case.
    pub records: Vec<Record>,
    /// Every case ran and sparsek's output passed every check.
    pub all_sparsek_passed: bool,
}

/// Runs every case of `cfg` on `gpu`, printing progress on stderr, and writes the results (see the module
/// documentation). Returns the records; errors only when an output cannot be written.
pub fn run(gpu: &Gpu, cfg: &Config) -> Result<Summary> {
    let info = gpu.info();
    let libs = Libs { cublas: cublas::Cublas::new(gpu), cusparse: cusparse::Cusparse::new(gpu) };
    let header = Header {
        cublas: match &libs.cublas {
            Ok(l) => format!("libcublas {}", l.version()),
            Err(e) => format!("unavailable: {e}"),
        },
        cusparse: match (&libs.cusparse, cfg.cusparse) {
            (Err(e), _) => format!("unavailable: {e}"),
            (Ok(_), CusparseChoice::Off) => "off".into(),
            (Ok(l), CusparseChoice::Only(k)) => format!("libcusparse {}, {} only", l.version(), k.name()),
            (Ok(l), CusparseChoice::Auto) => format!(
                "libcusparse {}, first accepted of {}",
                l.version(),
                CusparseKind::AUTO.map(CusparseKind::name).join(", ")
            ),
        },
        warmup: cfg.run.warmup,
        iters: cfg.run.iters,
        check_rows: cfg.run.check_rows,
        seed: cfg.run.seed,
        command: cfg.run.command.clone(),
        ..Header::for_gpu(gpu)
    };
    eprintln!(
        "sparsek bench on {} (sm_{}{}, driver CUDA {}), {} cases, median of {} launches after {} warm-up",
        header.gpu,
        info.compute_capability.0,
        info.compute_capability.1,
        header.driver,
        cfg.run.cases.len(),
        cfg.run.iters,
        cfg.run.warmup
    );
    eprintln!("  cuBLAS: {}", header.cublas);
    eprintln!("  cuSPARSE: {}", header.cusparse);
    error::create_dir(&cfg.run.out_dir)?;
    let json_path = cfg.run.out_dir.join("latest.json");

    let mut records = Vec::with_capacity(cfg.run.cases.len());
    for (i, case) in cfg.run.cases.iter().enumerate() {
        let rec = run_case(gpu, &libs, cfg, case);
        eprintln!("[{}/{}] {}", i + 1, cfg.run.cases.len(), progress_line(&rec));
        records.push(rec);
        // Written after every case, so an interrupted run leaves its results behind ("complete": false).
        error::write(&json_path, json::to_json(&header, &records, i + 1 == cfg.run.cases.len()).as_bytes())?;
    }
    if cfg.run.cases.is_empty() {
        error::write(&json_path, json::to_json(&header, &records, true).as_bytes())?;
    }
    drop(libs);

    let table = report::markdown(&header, &records);
    println!("{table}");
    let doc_path = cfg.run.out_dir.parent().map(|p| p.join("BENCHMARKS.md"));
    let spliced =
        doc_path.as_ref().and_then(|p| std::fs::read_to_string(p).ok().map(|doc| (p, report::splice(&doc, &table))));
    match spliced {
        Some((p, Some(doc))) => {
            error::write(p, doc.as_bytes())?;
            eprintln!("wrote {} (between {} and {})", p.display(), report::BEGIN_MARKER, report::END_MARKER);
        }
        other => {
            if let Some((p, None)) = other {
                eprintln!(
                    "{} has no {} / {} markers; leaving it alone",
                    p.display(),
                    report::BEGIN_MARKER,
                    report::END_MARKER
                );
            }
            let p = cfg.run.out_dir.join("bench.md");
            error::write(&p, table.as_bytes())?;
            eprintln!("wrote {}", p.display());
        }
    }
    eprintln!("wrote {}", json_path.display());
    match report::speedup_plot(&header, &records) {
        Some(canvas) => {
            let p = cfg.run.out_dir.join("speedup.png");
            error::write(&p, &canvas.to_png())?;
            eprintln!("wrote {}", p.display());
        }
        None => eprintln!("no speedup plot: no uniform case with a trusted cuBLAS time"),
    }
    let all_sparsek_passed = records.iter().all(Record::sparsek_passed);
    if !all_sparsek_passed {
        for r in records.iter().filter(|r| !r.sparsek_passed()) {
            let why = r.error.clone().or_else(|| r.sparsek.check.as_ref().map(|c| c.detail.clone()));
            eprintln!("FAILED {}: {}", r.case, why.unwrap_or_default());
        }
    }
    Ok(Summary { header, records, all_sparsek_passed })
}

/// `8192x8192x8192 bs64 22% uniform: sparsek 1.234 ms (412.3 TFLOPS), cuBLAS 1.500 ms (sparsek 1.22x), ...`
fn progress_line(r: &Record) -> String {
    let mut s = format!("{}: ", r.case);
    if let Some(e) = &r.error {
        s.push_str(&format!("ERROR {e}"));
        return s;
    }
    let ms = |o: &report::Outcome| o.ms().map_or_else(|| "-".to_string(), |t| format!("{t:.3} ms"));
    s.push_str(&format!("sparsek {}", ms(&r.sparsek)));
    if let Some(t) = r.sparsek_tflops() {
        s.push_str(&format!(" ({t:.1} TFLOPS)"));
    }
    match r.cublas.ms() {
        Some(_) => {
            s.push_str(&format!(", cuBLAS {}", ms(&r.cublas)));
            if let Some(x) = r.speedup_vs_cublas() {
                s.push_str(&format!(" (sparsek {x:.2}x)"));
            }
        }
        None => s.push_str(&format!(", cuBLAS n/a ({})", short(&r.cublas.kind))),
    }
    match r.cusparse.ms() {
        Some(_) => {
            s.push_str(&format!(", cuSPARSE {} {}", r.cusparse.kind, ms(&r.cusparse)));
            if let Some(x) = r.speedup_vs_cusparse() {
                s.push_str(&format!(" (sparsek {x:.2}x)"));
            }
        }
        None => s.push_str(&format!(", cuSPARSE n/a ({})", short(&r.cusparse.kind))),
    }
    if let Some(c) = r.sm_clock_mhz {
        s.push_str(&format!(", SM {c} MHz"));
    }
    let fails: Vec<&str> = [("sparsek", &r.sparsek), ("cuBLAS", &r.cublas), ("cuSPARSE", &r.cusparse)]
        .iter()
        .filter(|(_, o)| o.check.as_ref().is_some_and(|c| !c.passed))
        .map(|(n, _)| *n)
        .collect();
    s.push_str(
        if fails.is_empty() { ", checks pass".into() } else { format!(", CHECK FAILED: {}", fails.join(", ")) }
            .as_str(),
    );
    s
}

/// At most 160 characters of `s`, without its "unavailable: " prefix.
fn short(s: &str) -> String {
    let s = s.strip_prefix("unavailable: ").unwrap_or(s);
    if s.chars().count() > 160 { format!("{}...", s.chars().take(157).collect::<String>()) } else { s.to_string() }
}

/// The baseline libraries, loaded once per run (or why they could not be).
pub struct Libs {
    /// cuBLAS, or why it is unavailable.
    pub cublas: Result<Cublas>,
    /// cuSPARSE, or why it is unavailable.
    pub cusparse: Result<Cusparse>,
}

/// Something the timed loop can launch: one product on input set `set` (`0..sets()`), queued on the GPU's
/// stream without waiting.
pub(crate) trait Contender {
    fn launch(&mut self, gpu: &Gpu, set: usize) -> Result<()>;
    fn sets(&self) -> usize;
}

struct SparsekSets {
    sets: Vec<(DeviceBsr, DeviceMatrix<f16>, DeviceMatrix<f32>)>,
}

impl Contender for SparsekSets {
    fn launch(&mut self, gpu: &Gpu, set: usize) -> Result<()> {
        let (a, b, c) = &mut self.sets[set];
        Ok(gpu.spmm(a, b, c, Epilogue::default())?)
    }
    fn sets(&self) -> usize {
        self.sets.len()
    }
}

struct CublasSets<'l> {
    lib: &'l Cublas,
    shape: (usize, usize, usize),
    sets: Vec<(DeviceMatrix<f16>, DeviceMatrix<f16>, DeviceMatrix<f32>)>,
}

impl Contender for CublasSets<'_> {
    fn launch(&mut self, gpu: &Gpu, set: usize) -> Result<()> {
        let (a, b, c) = &mut self.sets[set];
        let (lda, ldb, ldc) = (a.ld(), b.ld(), c.ld());
        self.lib.gemm(gpu, self.shape, a.as_slice(), lda, b.as_slice(), ldb, &mut c.as_view_mut(), ldc)
    }
    fn sets(&self) -> usize {
        self.sets.len()
    }
}

struct CusparseSets<'l> {
    lib: &'l Cusparse,
    sets: Vec<cusparse::DeviceSet>,
}

impl Contender for CusparseSets<'_> {
    fn launch(&mut self, gpu: &Gpu, set: usize) -> Result<()> {
        self.lib.launch(gpu, &mut self.sets[set])
    }
    fn sets(&self) -> usize {
        self.sets.len()
    }
}

/// The operands and the oracle of one case.
struct Inputs {
    a: Bsr<f16>,
    b: Matrix<f16>,
    /// The oracle's sampled rows of C, with the tolerance of sparsek's f32 output.
    expected: Expected,
    /// `max |B|`, for the tolerances of the other outputs.
    max_b: f64,
}

impl Inputs {
    /// The expectation under the tolerance of an f32-accumulated product over dot products of `k_eff` terms
    /// whose output is f16 (`out_is_f16`) or f32.
    fn expected_with(&self, k_eff: usize, out_is_f16: bool) -> Expected {
        let tol = Tolerance::for_spmm(k_eff, self.a.max_abs(), self.max_b, Epilogue::default(), 0.0, out_is_f16);
        self.expected.clone().with_tolerance(tol)
    }
}

/// Runs one case; failures of sparsek (set-up, launch) end up in `Record::error`, failures of a baseline in
/// its outcome.
pub fn run_case(gpu: &Gpu, libs: &Libs, cfg: &Config, case: &Case) -> Record {
    let mut case = case.clone();
    let seed = case.seed(cfg.run.seed);
    let mut rec = Record {
        case: case.clone(),
        nnzb: 0,
        seed,
        sparsek: Outcome::default(),
        cublas: Outcome::default(),
        cusparse: Outcome::default(),
        sm_clock_mhz: None,
        error: None,
    };
    let inputs = match inputs(&mut case, cfg, seed) {
        Ok(i) => i,
        Err(e) => {
            rec.case = case;
            rec.error = Some(Error::step::<sparsek::Error>("building the operands")(e).to_string());
            return rec;
        }
    };
    rec.case = case;
    rec.nnzb = inputs.a.nnzb();
    if let Err(e) = measure(gpu, libs, cfg, &inputs, &mut rec) {
        rec.error = Some(e.to_string());
    }
    rec
}

/// A and B ([`Case::operands`], which fills in a file's shape and density) and the oracle on `check_rows`
/// random rows of C plus the first and the last ([`Expected::compute`]).
fn inputs(case: &mut Case, cfg: &Config, seed: u64) -> sparsek::Result<Inputs> {
    // A file's BSR may use at most half of the host memory available now.
    let budget = crate::budget::host_available().map_or(usize::MAX, |b| usize::try_from(b / 2).unwrap_or(usize::MAX));
    let (a, b) = case.operands(seed, budget)?;
    // The oracle reads only C's shape (beta == 0), and the tolerance its type (f32, as sparsek's output).
    // `zeros` of f32 is a zeroed allocation whose pages are never touched.
    let c0 = Matrix::<f32>::zeros(case.m, case.n)?;
    let sample = RowSample::Random { count: cfg.run.check_rows, seed: seed ^ 0x5EED };
    let expected = Expected::compute(&a, &b, &c0, Epilogue::default(), sample, |_, _| {})?;
    let max_b = max_abs(&b);
    Ok(Inputs { a, b, expected, max_b })
}

fn set_count(gpu: &Gpu, bytes: usize) -> usize {
    rotation_sets(bytes, gpu.info().l2_bytes)
}

fn measure(gpu: &Gpu, libs: &Libs, cfg: &Config, inputs: &Inputs, rec: &mut Record) -> Result<()> {
    let (a, b) = (&inputs.a, &inputs.b);
    let (m, n, k) = (a.rows(), b.cols(), a.cols());
    let k_eff = a.max_row_length() * a.block_size();

    // sparsek.
    let sparse_bytes = 2 * a.values().len() + 4 * (a.row_ptr().len() + 2 * a.col_idx().len()) + 2 * k * n + 4 * m * n;
    let mut sparsek = SparsekSets { sets: Vec::new() };
    for _ in 0..set_count(gpu, sparse_bytes) {
        sparsek.sets.push((gpu.upload(a)?, gpu.upload_matrix(b)?, gpu.zeros(m, n)?));
    }
    {
        let c = &mut sparsek.sets[0].2;
        poison(gpu, c.as_view_mut())?;
    }
    sparsek.launch(gpu, 0)?;
    let host = sparsek.sets[0].2.to_host()?;
    rec.sparsek = Outcome {
        kind: "sparsek".into(),
        check: Some(Check::from(&inputs.expected.check(&host))),
        timing: None,
        sets: sparsek.sets(),
    };
    drop(host);

    // cuBLAS.
    let mut cublas_sets = match &libs.cublas {
        Err(why) => {
            rec.cublas = Outcome::unavailable(why);
            None
        }
        Ok(lib) => match setup_cublas(gpu, lib, inputs) {
            Ok((sets, check)) => {
                rec.cublas = Outcome { kind: cublas::KIND.into(), check: Some(check), timing: None, sets: sets.sets() };
                Some(sets)
            }
            Err(e) => {
                rec.cublas = Outcome::unavailable(e);
                None
            }
        },
    };

    // cuSPARSE.
    let mut cusparse_sets = match &libs.cusparse {
        Err(why) => {
            rec.cusparse = Outcome::unavailable(why);
            None
        }
        Ok(_) if cfg.cusparse == CusparseChoice::Off => {
            rec.cusparse = Outcome::unavailable("disabled (--cusparse off)");
            None
        }
        Ok(lib) => match setup_cusparse(gpu, lib, cfg, inputs, k_eff) {
            Ok((sets, check)) => {
                let kind = sets.sets[0].kind().name();
                rec.cusparse = Outcome { kind: kind.into(), check: Some(check), timing: None, sets: sets.sets() };
                Some(sets)
            }
            Err(e) => {
                rec.cusparse = Outcome::unavailable(e);
                None
            }
        },
    };

    // Timed, interleaved.
    let mut contenders: Vec<&mut dyn Contender> = vec![&mut sparsek];
    if let Some(c) = cublas_sets.as_mut() {
        contenders.push(c);
    }
    if let Some(c) = cusparse_sets.as_mut() {
        contenders.push(c);
    }
    let (times, clock) = time_interleaved(gpu, &mut contenders, cfg.run.warmup, cfg.run.iters)?;
    rec.sm_clock_mhz = clock;
    let mut it = times.into_iter();
    rec.sparsek.timing = it.next().and_then(|t| Timing::from_samples(&t));
    if cublas_sets.is_some() {
        rec.cublas.timing = it.next().and_then(|t| Timing::from_samples(&t));
    }
    if cusparse_sets.is_some() {
        rec.cusparse.timing = it.next().and_then(|t| Timing::from_samples(&t));
    }
    Ok(())
}

fn setup_cublas<'l>(gpu: &Gpu, lib: &'l Cublas, inputs: &Inputs) -> Result<(CublasSets<'l>, Check)> {
    let (a, b) = (&inputs.a, &inputs.b);
    let (m, n, k) = (a.rows(), b.cols(), a.cols());
    let dense = a.to_dense()?;
    let mut sets = CublasSets { lib, shape: (m, n, k), sets: Vec::new() };
    for _ in 0..set_count(gpu, 2 * m * k + 2 * k * n + 4 * m * n) {
        sets.sets.push((gpu.upload_matrix(&dense)?, gpu.upload_matrix(b)?, gpu.zeros(m, n)?));
    }
    drop(dense);
    poison(gpu, sets.sets[0].2.as_view_mut())?;
    sets.launch(gpu, 0)?;
    let host = sets.sets[0].2.to_host()?;
    // A dense GEMM sums all K products (the zeros of A included) and may split K: bound the error with K terms.
    let check = Check::from(&inputs.expected_with(k, false).check(&host));
    Ok((sets, check))
}

fn setup_cusparse<'l>(
    gpu: &Gpu,
    lib: &'l Cusparse,
    cfg: &Config,
    inputs: &Inputs,
    k_eff: usize,
) -> Result<(CusparseSets<'l>, Check)> {
    let kinds: Vec<cusparse::Kind> = match cfg.cusparse {
        CusparseChoice::Only(k) => vec![k],
        _ => cusparse::Kind::AUTO.to_vec(),
    };
    let mut why = Vec::new();
    for kind in kinds {
        let attempt = || -> Result<(CusparseSets<'l>, Check)> {
            lib.missing_symbol(kind)?;
            let host = HostOperands::new(kind, &inputs.a, &inputs.b)?;
            let mut sets = CusparseSets { lib, sets: vec![lib.upload(gpu, &host)?] };
            // One trial launch: the library refuses unsupported combinations here.
            sets.launch(gpu, 0)?;
            gpu.synchronize()?;
            for _ in 1..set_count(gpu, host.set_bytes()) {
                sets.sets.push(lib.upload(gpu, &host)?);
            }
            drop(host);
            sets.sets[0].poison_c(gpu)?;
            sets.launch(gpu, 0)?;
            let report = match sets.sets[0].output()? {
                // `bsrmm` writes C column-major: the host matrix holds C^T.
                HostC::F32 { m, transposed: true } => {
                    inputs.expected.check_with(inputs.b.cols(), |r, c| f64::from(m.get(c, r)))
                }
                HostC::F32 { m, transposed: false } => inputs.expected.check(&m),
                HostC::F16(m) => inputs.expected_with(k_eff, true).check(&m),
            };
            let check = Check::from(&report);
            Ok((sets, check))
        };
        match attempt() {
            Ok(r) => return Ok(r),
            Err(e) => why.push((kind.name(), e)),
        }
    }
    Err(Error::NoneAccepted(why))
}

/// Warm-up, then `iters` rounds of one launch per contender, each between its own pair of events
/// ([`EventTimer::time_interleaved`]: events read after the loop, no host synchronisation inside it). Input sets
/// rotate per launch (a launch counter per contender). The SM clock query starts right after the last launch
/// is queued, so nvidia-smi reads the clock while the last launches still run. Returns the times per
/// contender and the clock.
pub(crate) fn time_interleaved(
    gpu: &Gpu,
    contenders: &mut [&mut dyn Contender],
    warmup: usize,
    iters: usize,
) -> Result<(Vec<Vec<f32>>, Option<u32>)> {
    let total = (warmup + iters) * contenders.len();
    let mut launched = vec![0usize; contenders.len()];
    let mut queued = 0;
    let mut smi = None;
    // The launch error as the contender gave it (the timer wants a sparsek::Error).
    let mut failure = None;
    let timer = EventTimer::new(gpu.stream());
    let times = timer.time_interleaved(warmup, iters, contenders.len(), |i| {
        let c = &mut contenders[i];
        let set = launched[i] % c.sets();
        launched[i] += 1;
        c.launch(gpu, set).map_err(|e| {
            let reason = e.to_string();
            failure = Some(e);
            sparsek::Error::InvalidArgument { name: "launch", reason }
        })?;
        queued += 1;
        if queued == total {
            smi = env::spawn_clock_query();
        }
        Ok(())
    });
    // The events have been read, so the stream is idle.
    let clock = env::finish_clock_query(smi, pci_address(gpu));
    match times {
        Ok(t) => Ok((t, clock)),
        Err(e) => Err(failure.unwrap_or(Error::Sparsek(e))),
    }
}

/// The GPU's PCI (domain, bus, device), to pick its line out of nvidia-smi's output.
pub(crate) fn pci_address(gpu: &Gpu) -> Option<env::PciAddress> {
    use cudarc::driver::sys::CUdevice_attribute as A;
    let get = |a| gpu.context().attribute(a).ok().map(|v| v as u32);
    Some((
        get(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
        get(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
        get(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cusparse_choice_parses() {
        assert_eq!("auto".parse::<CusparseChoice>().unwrap(), CusparseChoice::Auto);
        assert_eq!("off".parse::<CusparseChoice>().unwrap(), CusparseChoice::Off);
        assert_eq!("bsrmm-f32".parse::<CusparseChoice>().unwrap(), CusparseChoice::Only(CusparseKind::Bsrmm));
        assert!("cusparse".parse::<CusparseChoice>().is_err());
    }
}
