//! One case on the GPU: build the operands ([`Case::operands`]) and the oracle's sampled rows
//! ([`Expected`]), set up every contender with its rotated input sets, check each contender's output (C
//! poisoned first) with the library's verification path, then time them interleaved launch by launch
//! ([`EventTimer`]).

use half::f16;

use super::cublas::{self, Cublas};
use super::cusparse::{self, Cusparse, HostC, HostOperands};
use super::grid::Case;
use super::report::{Check, Outcome, Record, Timing};
use super::{Config, CusparseChoice, env, poison, rotation_sets};
use sparsek::Epilogue;
use sparsek::check::{Expected, RowSample, Tolerance, max_abs};
use sparsek::error::Result;
use sparsek::format::Bsr;
use sparsek::gpu::timing::EventTimer;
use sparsek::gpu::{DeviceBsr, DeviceMatrix, Gpu};
use sparsek::matrix::Matrix;

/// The baseline libraries, loaded once per run (or why they could not be).
pub struct Libs {
    /// cuBLAS, or why it is unavailable.
    pub cublas: std::result::Result<Cublas, String>,
    /// cuSPARSE, or why it is unavailable.
    pub cusparse: std::result::Result<Cusparse, String>,
}

/// Something the timed loop can launch: one product on input set `set` (`0..sets()`), queued on the GPU's
/// stream without waiting.
pub(crate) trait Contender {
    fn launch(&mut self, gpu: &Gpu, set: usize) -> std::result::Result<(), String>;
    fn sets(&self) -> usize;
}

struct SparsekSets {
    sets: Vec<(DeviceBsr, DeviceMatrix<f16>, DeviceMatrix<f32>)>,
}

impl Contender for SparsekSets {
    fn launch(&mut self, gpu: &Gpu, set: usize) -> std::result::Result<(), String> {
        let (a, b, c) = &mut self.sets[set];
        gpu.spmm(a, b, c, Epilogue::default()).map_err(|e| e.to_string())
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
    fn launch(&mut self, gpu: &Gpu, set: usize) -> std::result::Result<(), String> {
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
    fn launch(&mut self, gpu: &Gpu, set: usize) -> std::result::Result<(), String> {
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
    let seed = case.seed(cfg.seed);
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
            rec.error = Some(format!("building the operands: {e}"));
            return rec;
        }
    };
    rec.case = case;
    rec.nnzb = inputs.a.nnzb();
    if let Err(e) = measure(gpu, libs, cfg, &inputs, &mut rec) {
        rec.error = Some(e);
    }
    rec
}

/// A and B ([`Case::operands`], which fills in a file's shape and density) and the oracle on `check_rows`
/// random rows of C plus the first and the last ([`Expected::compute`]).
fn inputs(case: &mut Case, cfg: &Config, seed: u64) -> Result<Inputs> {
    // A file's BSR may use at most half of the host memory available now.
    let budget = crate::budget::host_available().map_or(usize::MAX, |b| usize::try_from(b / 2).unwrap_or(usize::MAX));
    let (a, b) = case.operands(seed, budget)?;
    // The oracle reads only C's shape (beta == 0), and the tolerance its type (f32, as sparsek's output).
    // `zeros` of f32 is a zeroed allocation whose pages are never touched.
    let c0 = Matrix::<f32>::zeros(case.m, case.n)?;
    let sample = RowSample::Random { count: cfg.check_rows, seed: seed ^ 0x5EED };
    let expected = Expected::compute(&a, &b, &c0, Epilogue::default(), sample, |_, _| {})?;
    let max_b = max_abs(&b);
    Ok(Inputs { a, b, expected, max_b })
}

fn set_count(gpu: &Gpu, bytes: usize) -> usize {
    rotation_sets(bytes, gpu.info().l2_bytes)
}

fn measure(gpu: &Gpu, libs: &Libs, cfg: &Config, inputs: &Inputs, rec: &mut Record) -> std::result::Result<(), String> {
    let (a, b) = (&inputs.a, &inputs.b);
    let (m, n, k) = (a.rows(), b.cols(), a.cols());
    let k_eff = a.max_row_length() * a.block_size();
    let s = |e: sparsek::Error| e.to_string();

    // sparsek.
    let sparse_bytes = 2 * a.values().len() + 4 * (a.row_ptr().len() + 2 * a.col_idx().len()) + 2 * k * n + 4 * m * n;
    let mut sparsek = SparsekSets { sets: Vec::new() };
    for _ in 0..set_count(gpu, sparse_bytes) {
        sparsek.sets.push((gpu.upload(a).map_err(s)?, gpu.upload_matrix(b).map_err(s)?, gpu.zeros(m, n).map_err(s)?));
    }
    {
        let c = &mut sparsek.sets[0].2;
        poison(gpu, c.as_view_mut())?;
    }
    sparsek.launch(gpu, 0)?;
    let host = sparsek.sets[0].2.to_host().map_err(s)?;
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
    let (times, clock) = time_interleaved(gpu, &mut contenders, cfg.warmup, cfg.iters)?;
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

fn setup_cublas<'l>(
    gpu: &Gpu,
    lib: &'l Cublas,
    inputs: &Inputs,
) -> std::result::Result<(CublasSets<'l>, Check), String> {
    let (a, b) = (&inputs.a, &inputs.b);
    let (m, n, k) = (a.rows(), b.cols(), a.cols());
    let s = |e: sparsek::Error| e.to_string();
    let dense = a.to_dense().map_err(s)?;
    let mut sets = CublasSets { lib, shape: (m, n, k), sets: Vec::new() };
    for _ in 0..set_count(gpu, 2 * m * k + 2 * k * n + 4 * m * n) {
        sets.sets.push((
            gpu.upload_matrix(&dense).map_err(s)?,
            gpu.upload_matrix(b).map_err(s)?,
            gpu.zeros(m, n).map_err(s)?,
        ));
    }
    drop(dense);
    poison(gpu, sets.sets[0].2.as_view_mut())?;
    sets.launch(gpu, 0)?;
    let host = sets.sets[0].2.to_host().map_err(s)?;
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
) -> std::result::Result<(CusparseSets<'l>, Check), String> {
    let kinds: Vec<cusparse::Kind> = match cfg.cusparse {
        CusparseChoice::Only(k) => vec![k],
        _ => cusparse::Kind::AUTO.to_vec(),
    };
    let mut why = Vec::new();
    for kind in kinds {
        let attempt = || -> std::result::Result<(CusparseSets<'l>, Check), String> {
            lib.missing_symbol(kind)?;
            let host = HostOperands::new(kind, &inputs.a, &inputs.b)?;
            let mut sets = CusparseSets { lib, sets: vec![lib.upload(gpu, &host)?] };
            // One trial launch: the library refuses unsupported combinations here.
            sets.launch(gpu, 0)?;
            gpu.synchronize().map_err(|e| e.to_string())?;
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
            Err(e) => why.push(format!("{}: {e}", kind.name())),
        }
    }
    Err(why.join("; "))
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
) -> std::result::Result<(Vec<Vec<f32>>, Option<u32>), String> {
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
            failure = Some(e.clone());
            sparsek::Error::InvalidArgument { name: "launch", reason: e }
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
        Err(e) => Err(failure.unwrap_or_else(|| e.to_string())),
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
