//! What the side runs of `sparsek bench` (`--reach`, `--decode`) share: their configuration, their opening
//! (header, cuBLAS, the first progress lines, the output directory), their host operands with the oracle, and
//! writing their files. Each mode keeps its own contenders, records and tables.

use std::path::Path;

use cudarc::driver::DevicePtr;
use cudarc::driver::sys::CUdeviceptr;
use serde::Serialize;

use crate::cublas::Cublas;
use crate::cuda::poison;
use crate::error::{Error, Result};
use crate::grid::{Case, Source};
use crate::report::{Check, Header};
use crate::runner::Contender;
use sparsek::Epilogue;
use sparsek::check::{CheckReport, Expected, RowSample, Tolerance, max_abs};
use sparsek::format::Bsr;
use sparsek::gpu::{DeviceMatrix, Gpu};
use sparsek::{Matrix, f16};

/// The fewest timed launches per contender of a side run: fewer requested are raised to this.
pub const MIN_ITERS: usize = 30;

pub use crate::runner::RunConfig;

/// Which case a side run's record is about (flattened into each record's JSON).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CaseFacts {
    /// The case as text, e.g. `8192x16x8192 bs64 22% uniform` (M x N x K).
    pub case: String,
    /// Rows of A and C.
    pub m: usize,
    /// Columns of B and C.
    pub n: usize,
    /// Columns of A, rows of B.
    pub k: usize,
    /// Block size.
    pub bs: usize,
    /// Requested fraction of nonzero blocks.
    pub density: f64,
    /// The generator's pattern.
    pub pattern: String,
    /// Nonzero blocks of A (0 until the operands are built).
    pub nnzb: usize,
    /// Seed of A and B.
    pub seed: u64,
}

impl CaseFacts {
    /// The facts of `case` with seed `seed`, before its operands are built.
    pub fn new(case: &Case, seed: u64) -> Self {
        CaseFacts {
            case: case.to_string(),
            m: case.m,
            n: case.n,
            k: case.k,
            bs: case.bs,
            density: case.density,
            pattern: case.pattern_name(),
            nnzb: 0,
            seed,
        }
    }
}

/// How a side run's case went as a whole (flattened into each record's JSON, after the mode's own figures).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CaseStatus {
    /// SM clock read by nvidia-smi right after the timed loop.
    pub sm_clock_mhz: Option<u32>,
    /// Set when the case could not be run at all (operands, oracle, timing).
    pub error: Option<String>,
}

impl CaseStatus {
    /// The table's clock column: the SM clock in MHz, or "-".
    pub(crate) fn clock_cell(&self) -> String {
        self.sm_clock_mhz.map_or_else(|| "-".into(), |m| m.to_string())
    }

    /// The end of a progress line: `, SM 1755 MHz`, or nothing without a clock.
    pub(crate) fn clock_note(&self) -> String {
        self.sm_clock_mhz.map_or_else(String::new, |c| format!(", SM {c} MHz"))
    }

    /// The table's checks column: "pass", or the case's error, or which of `contenders` did not run or failed
    /// its check.
    pub(crate) fn checks_cell<'a, F: 'a>(
        &self,
        contenders: impl IntoIterator<Item = &'a ContenderResult<F>>,
    ) -> String {
        if let Some(e) = &self.error {
            return format!("error: {}", e.replace('|', "/"));
        }
        let mut bad = Vec::new();
        for c in contenders {
            if c.error.is_some() {
                bad.push(format!("{} n/a", c.name));
            } else if c.check.as_ref().is_some_and(|k| !k.passed) {
                bad.push(format!("{} FAIL", c.name));
            }
        }
        if bad.is_empty() { "pass".into() } else { bad.join(", ") }
    }
}

/// A side run once opened: its header, cuBLAS (or why it is unavailable) and the timed launches per contender.
pub(crate) struct Opened {
    pub header: Header,
    pub cublas: Result<Cublas>,
    pub iters: usize,
}

/// Opens the side run `mode` ("reach", "decode"): loads cuBLAS, fills the header, prints the opening lines on
/// stderr and creates the output directory.
pub(crate) fn open(gpu: &Gpu, cfg: &RunConfig, mode: &str) -> Result<Opened> {
    let iters = cfg.iters.max(MIN_ITERS);
    let info = gpu.info();
    let cublas = Cublas::new(gpu);
    let header = Header {
        cublas: match &cublas {
            Ok(l) => format!("libcublas {}", l.version()),
            Err(e) => format!("unavailable: {e}"),
        },
        cusparse: format!("not measured (--{mode})"),
        warmup: cfg.warmup,
        iters,
        check_rows: cfg.check_rows,
        seed: cfg.seed,
        command: cfg.command.clone(),
        ..Header::for_gpu(gpu)
    };
    eprintln!(
        "sparsek bench --{mode} on {} (sm_{}{}, driver CUDA {}), {} cases, median of {} launches after {} warm-up",
        header.gpu,
        info.compute_capability.0,
        info.compute_capability.1,
        header.driver,
        cfg.cases.len(),
        iters,
        cfg.warmup
    );
    eprintln!("  cuBLAS: {}", header.cublas);
    crate::error::create_dir(&cfg.out_dir)?;
    Ok(Opened { header, cublas, iters })
}

/// Ends a side run's output: prints its Markdown `report` on stdout, writes it to `md_file` in `cfg.out_dir`,
/// and says on stderr where it and the JSON file `json_path` (written case by case) went.
pub(crate) fn publish(cfg: &RunConfig, md_file: &str, report: &str, json_path: &Path) -> Result<()> {
    println!("{report}");
    let md_path = cfg.out_dir.join(md_file);
    crate::error::write(&md_path, report.as_bytes())?;
    eprintln!("wrote {}", md_path.display());
    eprintln!("wrote {}", json_path.display());
    Ok(())
}

/// A generated case's f16 A and B ([`Case::operands`], within half the host memory available), the sampled rows
/// of C, and the oracle of those rows for an f32 C with `beta == 0`. A matrix file is refused (side mode `mode`,
/// "--decode", measures generated cases only).
pub(crate) fn generated_operands(
    case: &mut Case,
    cfg: &RunConfig,
    seed: u64,
    tag: &str,
    mode: &'static str,
) -> Result<(Bsr<f16>, Matrix<f16>, RowSample, Expected)> {
    if let Source::File(path) = &case.source {
        return Err(Error::FileCase { mode, path: path.clone() });
    }
    let build = |case: &mut Case| -> sparsek::Result<_> {
        let budget =
            crate::budget::host_available().map_or(usize::MAX, |b| usize::try_from(b / 2).unwrap_or(usize::MAX));
        eprintln!("{tag} {case}: building A and B");
        let (a, b) = case.operands(seed, budget)?;
        let (m, n) = (a.rows(), b.cols());
        let sample = RowSample::auto(m, n, cfg.check_rows, seed ^ 0x5EED);
        // The oracle reads only C's shape (beta == 0), and the tolerance its type (f32, every sparsek output here).
        let c0 = Matrix::<f32>::zeros(m, n)?;
        eprintln!("{tag}   oracle ({} rows)", sample.rows(m).len());
        let expected = Expected::compute(&a, &b, &c0, Epilogue::default(), sample, |_, _| {})?;
        Ok((a, b, sample, expected))
    };
    build(case).map_err(Error::step(OPERANDS))
}

/// The step that builds a case's operands, as its errors name it.
pub(crate) const OPERANDS: &str = "building the operands";

/// A side mode's contender whose output, C of its input set 0, is checked before it is timed.
pub(crate) trait Checked: Contender {
    /// C of set 0 (`None` without input sets).
    fn output(&mut self) -> Option<&mut DeviceMatrix<f32>>;

    /// Poisons C of set 0, launches on set 0 and downloads C.
    fn first_output(&mut self, gpu: &Gpu) -> Result<Matrix<f32>> {
        poison(gpu, self.output().ok_or(NO_SET)?.as_view_mut())?;
        self.launch(gpu, 0)?;
        Ok(self.output().ok_or(NO_SET)?.to_host()?)
    }
}

/// What a missing input set reports (none was uploaded).
pub(crate) const NO_SET: Error = Error::Unsupported("no input set");

/// cuBLAS's rotated input sets of a side run: A expanded to dense f16, B, and an f32 C, every set identical.
pub(crate) struct CublasSets<'l> {
    lib: &'l Cublas,
    shape: (usize, usize, usize),
    sets: Vec<(DeviceMatrix<f16>, DeviceMatrix<f16>, DeviceMatrix<f32>)>,
}

impl<'l> CublasSets<'l> {
    /// Uploads `depth` sets of dense A, B and a zeroed C.
    pub fn upload(gpu: &Gpu, lib: &'l Cublas, a: &Bsr<f16>, b: &Matrix<f16>, depth: usize) -> Result<Self> {
        let (m, n, k) = (a.rows(), b.cols(), a.cols());
        let dense = a.to_dense()?;
        let sets = (0..depth)
            .map(|_| Ok((gpu.upload_matrix(&dense)?, gpu.upload_matrix(b)?, gpu.zeros(m, n)?)))
            .collect::<Result<_>>()?;
        Ok(CublasSets { lib, shape: (m, n, k), sets })
    }

    /// Queues one GEMM on input set `set` on the GPU's stream.
    pub fn launch(&mut self, gpu: &Gpu, set: usize) -> Result<()> {
        let (a, b, c) = &mut self.sets[set];
        let (lda, ldb, ldc) = (a.ld(), b.ld(), c.ld());
        self.lib.gemm(gpu, self.shape, a.as_slice(), lda, b.as_slice(), ldb, &mut c.as_view_mut(), ldc)
    }

    /// Input sets.
    pub fn len(&self) -> usize {
        self.sets.len()
    }

    /// The cuBLAS handle the GEMMs run on.
    pub fn lib(&self) -> &'l Cublas {
        self.lib
    }

    /// (M, N, K).
    pub fn shape(&self) -> (usize, usize, usize) {
        self.shape
    }

    /// Every set's A, B and C as (device address, leading dimension), for [`Cublas::gemm_raw`] (launches captured
    /// into a graph). Each buffer's pending work on the GPU's stream is ordered before what that stream runs next.
    pub fn addresses(&self, gpu: &Gpu) -> Vec<[(CUdeviceptr, usize); 3]> {
        let stream = gpu.stream();
        let at = |m: &DeviceMatrix<f16>| (m.as_slice().device_ptr(stream).0, m.ld());
        self.sets.iter().map(|(a, b, c)| [at(a), at(b), (c.as_slice().device_ptr(stream).0, c.ld())]).collect()
    }

    /// C of set 0.
    pub fn output(&mut self) -> Option<&mut DeviceMatrix<f32>> {
        self.sets.first_mut().map(|t| &mut t.2)
    }
}

/// cuBLAS's C against the oracle of `a @ b`: a dense GEMM sums all K products (the zeros of A included) and may
/// split K, so its tolerance is bounded with K terms.
pub(crate) fn check_cublas(expected: &Expected, a: &Bsr<f16>, b: &Matrix<f16>, host: &Matrix<f32>) -> CheckReport {
    cublas_expected(expected, a, b).check(host)
}

/// The oracle's sampled rows with cuBLAS's tolerance ([`check_cublas`]), to check cuBLAS's output after A and B
/// have left the host.
pub(crate) fn cublas_expected(expected: &Expected, a: &Bsr<f16>, b: &Matrix<f16>) -> Expected {
    let tol = Tolerance::for_spmm(a.cols(), a.max_abs(), max_abs(b), Epilogue::default(), 0.0, false);
    expected.clone().with_tolerance(tol)
}

/// One contender's result in one case of a side run: what ran, the check of its output, the mode's own figures
/// (`F`, written into the same JSON object between the check and the error; their fields read through this value)
/// and why it did not run or was not timed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ContenderResult<F> {
    /// The contender's name (its form's).
    pub name: String,
    /// What it runs, in words.
    pub description: String,
    /// The check of its output against the oracle, if it ran.
    pub check: Option<Check>,
    /// The mode's figures: times, input sets.
    #[serde(flatten)]
    pub figures: F,
    /// Why it did not run or was not timed.
    pub error: Option<String>,
}

impl<F: Default> ContenderResult<F> {
    /// A contender not yet run.
    pub(crate) fn new(name: &str, description: &str) -> Self {
        let (name, description) = (name.into(), description.into());
        ContenderResult { name, description, check: None, figures: F::default(), error: None }
    }
}

impl<F> ContenderResult<F> {
    /// Whether it ran and its output passed its check.
    pub fn passed(&self) -> bool {
        self.error.is_none() && self.check.as_ref().is_some_and(|c| c.passed)
    }
}

impl<F> std::ops::Deref for ContenderResult<F> {
    type Target = F;
    fn deref(&self) -> &F {
        &self.figures
    }
}

impl<F> std::ops::DerefMut for ContenderResult<F> {
    fn deref_mut(&mut self) -> &mut F {
        &mut self.figures
    }
}

/// A side run's file as pretty-printed JSON (two-space indentation, a final newline): `{"header": ..., <the
/// keys of extra>, "complete": bool, "records": [...]}`, the header as in `latest.json`. `file` names it in an
/// error.
pub(crate) fn to_json<X: Serialize, R: Serialize>(
    file: &'static str,
    header: &Header,
    extra: X,
    records: &[R],
    complete: bool,
) -> Result<String> {
    #[derive(Serialize)]
    struct Out<'a, X, R> {
        header: &'a Header,
        #[serde(flatten)]
        extra: X,
        complete: bool,
        records: &'a [R],
    }
    let mut s = serde_json::to_string_pretty(&Out { header, extra, complete, records })
        .map_err(|source| Error::Serialize { file, source })?;
    s.push('\n');
    Ok(s)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::report::Check;

    /// A check outcome for the side runs' table and JSON tests: passed or failed, nothing else.
    pub(crate) fn check(passed: bool) -> Check {
        Check {
            passed,
            checked: 10,
            failures: usize::from(!passed),
            max_abs_err: 0.0,
            max_rel_err: 0.0,
            atol: 1e-6,
            rtol: 1e-6,
            detail: if passed { "PASS".into() } else { "FAIL".into() },
        }
    }

    /// The keys of [`super::CaseFacts`], which open every side record's JSON object.
    pub(crate) const FACTS: [&str; 9] = ["case", "m", "n", "k", "bs", "density", "pattern", "nnzb", "seed"];

    /// The keys of [`super::CaseStatus`], which close the reach and decode records' JSON objects.
    pub(crate) const STATUS: [&str; 2] = ["sm_clock_mhz", "error"];

    /// The keys of the first record of a side run's file `text`, in their order: [`FACTS`], then the mode's own.
    pub(crate) fn record_keys(text: &str) -> Vec<String> {
        let keys = keys_from(text, "case");
        assert_eq!(keys[..FACTS.len()], FACTS, "a record opens with its case facts");
        keys[FACTS.len()..].to_vec()
    }

    /// The keys of the first JSON object of `text` whose key is `first`, in their order.
    pub(crate) fn keys_from(text: &str, first: &str) -> Vec<String> {
        let start = text.find(&format!("\"{first}\":")).expect("the key is written");
        let indent = text[..start].rsplit('\n').next().unwrap().len();
        let mut keys = Vec::new();
        for line in text[start - indent..].lines() {
            let depth = line.len() - line.trim_start().len();
            if depth < indent {
                break;
            }
            if depth == indent && line.trim_start().starts_with('"') {
                keys.push(line.trim_start()[1..].split('"').next().unwrap().to_string());
            }
        }
        keys
    }
}
