//! One case on the GPU: build the operands, set up every contender with its rotated input sets, check each
//! contender's output against the oracle, then time them interleaved launch by launch.

use cudarc::driver::CudaEvent;
use cudarc::driver::sys::CUevent_flags;
use half::f16;

use super::cublas::{self, Cublas};
use super::cusparse::{self, Cusparse, HostC, HostOperands};
use super::grid::{Case, Source};
use super::report::{Check, Outcome, Record, Timing};
use super::{Config, CusparseChoice, env, poison, rotation_sets};
use crate::Epilogue;
use crate::check::{Tolerance, compare_rows};
use crate::error::Result;
use crate::format::{Bsr, generate};
use crate::gpu::{DeviceBsr, DeviceMatrix, Gpu};
use crate::matrix::Matrix;
use crate::rng::Rng;
use crate::scalar::Scalar;

/// The baseline libraries, loaded once per run (or why they could not be).
pub struct Libs {
    /// cuBLAS, or why it is unavailable.
    pub cublas: std::result::Result<Cublas, String>,
    /// cuSPARSE, or why it is unavailable.
    pub cusparse: std::result::Result<Cusparse, String>,
}

/// Something the timed loop can launch: one product on input set `set` (`0..sets()`), queued on the GPU's
/// stream without waiting.
trait Contender {
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
        self.lib.gemm(gpu, self.shape, a.as_slice(), lda, b.as_slice(), ldb, c.as_mut_slice(), ldc)
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
    /// Sampled rows of C and their f64 oracle values, in the same order.
    rows: Vec<usize>,
    expected: Vec<(usize, Vec<f64>)>,
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

fn inputs(case: &mut Case, cfg: &Config, seed: u64) -> Result<Inputs> {
    let a: Bsr<f16> = match &case.source {
        Source::Synthetic(p) => generate(*p, case.m, case.k, case.bs, case.density, seed)?,
        Source::File(path) => Bsr::from_matrix_market(path, case.bs)?,
    };
    (case.m, case.k) = (a.rows(), a.cols());
    if matches!(case.source, Source::File(_)) {
        case.density = a.density();
    }
    let b = Matrix::<f16>::random(case.k, case.n, seed ^ 0xB);
    let (m, n) = (case.m, case.n);
    let mut rows: Vec<usize> = if m <= cfg.check_rows + 2 {
        (0..m).collect()
    } else {
        let mut rng = Rng::new(seed ^ 0x5EED);
        let mut r: Vec<usize> = (0..cfg.check_rows).map(|_| rng.below(m as u64) as usize).collect();
        r.extend([0, m - 1]);
        r
    };
    rows.sort_unstable();
    rows.dedup();
    // The oracle only reads C's shape (beta == 0); f16 zeros are the cheapest M x N matrix to hold it.
    let shape_only = Matrix::<f16>::zeros(m, n);
    let expected = crate::cpu::reference_rows(&a, &b, &shape_only, Epilogue::default(), &rows)?;
    Ok(Inputs { a, b, rows, expected })
}

/// Compares sampled rows of a downloaded C (`transposed`: `host` holds C^T) with the oracle; the report names
/// rows of C, not positions in the sample.
fn check<T: Scalar>(host: &Matrix<T>, transposed: bool, inputs: &Inputs, tol: Tolerance) -> Check {
    let n = inputs.b.cols();
    let got = Matrix::<f64>::from_fn(inputs.rows.len(), n, |i, j| {
        let r = inputs.rows[i];
        if transposed { host.get(j, r) } else { host.get(r, j) }.to_f64()
    });
    let sample: Vec<(usize, Vec<f64>)> = inputs.expected.iter().enumerate().map(|(i, (_, v))| (i, v.clone())).collect();
    let mut report = compare_rows(&got, &sample, tol);
    let real = |p: Option<(usize, usize, f64, f64)>| p.map(|(i, c, g, e)| (inputs.rows[i], c, g, e));
    report.first_failure = real(report.first_failure);
    report.worst = real(report.worst);
    // A product that should be nonzero but whose oracle rows are all zero would make the check vacuous.
    if inputs.a.nnzb() > 0 && inputs.expected.iter().all(|(_, v)| v.iter().all(|&x| x == 0.0)) {
        report.shape_error = Some("the sampled oracle rows are all zero (vacuous check)".into());
    }
    Check::from(&report)
}

/// Tolerance of an f16 x f16 product accumulated in f32 over dot products of `k_eff` terms.
fn tolerance(inputs: &Inputs, k_eff: usize, out_is_f16: bool) -> Tolerance {
    let max_b = crate::check::max_abs(&inputs.b);
    Tolerance::for_spmm(k_eff, inputs.a.max_abs(), max_b, Epilogue::default(), 0.0, out_is_f16)
}

fn set_count(gpu: &Gpu, bytes: usize) -> usize {
    rotation_sets(bytes, gpu.info().l2_bytes)
}

fn measure(gpu: &Gpu, libs: &Libs, cfg: &Config, inputs: &Inputs, rec: &mut Record) -> std::result::Result<(), String> {
    let (a, b) = (&inputs.a, &inputs.b);
    let (m, n, k) = (a.rows(), b.cols(), a.cols());
    let k_eff = a.max_row_length() * a.block_size();
    let s = |e: crate::Error| e.to_string();

    // sparsek.
    let sparse_bytes = 2 * a.values().len() + 4 * (a.row_ptr().len() + 2 * a.col_idx().len()) + 2 * k * n + 4 * m * n;
    let mut sparsek = SparsekSets { sets: Vec::new() };
    for _ in 0..set_count(gpu, sparse_bytes) {
        sparsek.sets.push((gpu.upload(a).map_err(s)?, gpu.upload_matrix(b).map_err(s)?, gpu.zeros(m, n).map_err(s)?));
    }
    {
        let c = &mut sparsek.sets[0].2;
        poison(gpu, c.as_mut_slice())?;
    }
    sparsek.launch(gpu, 0)?;
    let host = sparsek.sets[0].2.to_host().map_err(s)?;
    rec.sparsek = Outcome {
        kind: "sparsek".into(),
        check: Some(check(&host, false, inputs, tolerance(inputs, k_eff, false))),
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
    let s = |e: crate::Error| e.to_string();
    let dense = a.to_dense();
    let mut sets = CublasSets { lib, shape: (m, n, k), sets: Vec::new() };
    for _ in 0..set_count(gpu, 2 * m * k + 2 * k * n + 4 * m * n) {
        sets.sets.push((
            gpu.upload_matrix(&dense).map_err(s)?,
            gpu.upload_matrix(b).map_err(s)?,
            gpu.zeros(m, n).map_err(s)?,
        ));
    }
    drop(dense);
    poison(gpu, sets.sets[0].2.as_mut_slice())?;
    sets.launch(gpu, 0)?;
    let host = sets.sets[0].2.to_host().map_err(s)?;
    // A dense GEMM sums all K products (the zeros of A included) and may split K: bound the error with K terms.
    let check = check(&host, false, inputs, tolerance(inputs, k, false));
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
            let check = match sets.sets[0].output()? {
                HostC::F32 { m, transposed } => check(&m, transposed, inputs, tolerance(inputs, k_eff, false)),
                HostC::F16(m) => check(&m, false, inputs, tolerance(inputs, k_eff, true)),
            };
            Ok((sets, check))
        };
        match attempt() {
            Ok(r) => return Ok(r),
            Err(e) => why.push(format!("{}: {e}", kind.name())),
        }
    }
    Err(why.join("; "))
}

/// Warm-up, then `iters` rounds of one launch per contender, each between its own pair of events; input sets
/// rotate per launch. The events are read after the loop (no host synchronisation inside it); the SM clock is
/// queried while the last launches still run. Returns the times per contender and the clock.
fn time_interleaved(
    gpu: &Gpu,
    contenders: &mut [&mut dyn Contender],
    warmup: usize,
    iters: usize,
) -> std::result::Result<(Vec<Vec<f32>>, Option<u32>), String> {
    for w in 0..warmup {
        for c in contenders.iter_mut() {
            let set = w % c.sets();
            c.launch(gpu, set)?;
        }
    }
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let new = || gpu.context().new_event(flags).map_err(|e| format!("cuEventCreate: {e}"));
    let mut events: Vec<Vec<(CudaEvent, CudaEvent)>> = Vec::with_capacity(contenders.len());
    for _ in 0..contenders.len() {
        events.push((0..iters).map(|_| Ok((new()?, new()?))).collect::<std::result::Result<_, String>>()?);
    }
    let stream = gpu.stream();
    for i in 0..iters {
        for (c, ev) in contenders.iter_mut().zip(&events) {
            let set = (warmup + i) % c.sets();
            ev[i].0.record(stream).map_err(|e| format!("cuEventRecord: {e}"))?;
            c.launch(gpu, set)?;
            ev[i].1.record(stream).map_err(|e| format!("cuEventRecord: {e}"))?;
        }
    }
    let smi = env::spawn_clock_query();
    gpu.synchronize().map_err(|e| e.to_string())?;
    let clock = env::finish_clock_query(smi, pci_address(gpu));
    let times = events
        .iter()
        .map(|ev| ev.iter().map(|(s, e)| s.elapsed_ms(e).map_err(|e| format!("cuEventElapsedTime: {e}"))).collect())
        .collect::<std::result::Result<Vec<Vec<f32>>, String>>()?;
    Ok((times, clock))
}

/// The GPU's PCI (domain, bus, device), to pick its line out of nvidia-smi's output.
fn pci_address(gpu: &Gpu) -> Option<env::PciAddress> {
    use cudarc::driver::sys::CUdevice_attribute as A;
    let get = |a| gpu.context().attribute(a).ok().map(|v| v as u32);
    Some((
        get(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
        get(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
        get(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
    ))
}
