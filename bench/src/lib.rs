//! `sparsek bench`: sparsek against cuBLAS dense GEMM and cuSPARSE, in one process on one GPU, with the method
//! of DESIGN.md (Benchmarks):
//!
//! - every contender gets the same A (BSR; expanded to dense f16 for cuBLAS) and B, f16, with f32
//!   accumulation and an f32 C (cuSPARSE: whichever precision the installed library accepts, named in the
//!   output);
//! - each contender's output is compared with the f64 CPU oracle on sampled rows *before* it is timed (C
//!   poisoned first); a baseline that fails is kept but its time marked untrusted;
//! - warm-up, then launches interleaved contender by contender, each between its own pair of CUDA events,
//!   read after the loop; the median is reported;
//! - while one input set (every operand a launch reads) is under 2x L2, several identical sets are allocated
//!   and rotated per launch;
//! - the SM clock is read with nvidia-smi right after each case's timed loop.
//!
//! Every contender's output goes through the library's one verification path ([`sparsek::check::Expected`]:
//! sampled oracle rows, the tolerance of the output's precision, the comparison), and every timing through
//! its one timer ([`sparsek::gpu::timing::EventTimer`]); the problem is a [`Case`], whose [`Case::operands`]
//! builds A and B as `sparsek run` does.
//!
//! Results: `latest.json` (one record per case and a header; serde, read back by [`read_results`]), a
//! Markdown table (stdout, and between markers in `BENCHMARKS.md`), and `speedup.png`. [`compare()`] sets a
//! run against an earlier one (`sparsek bench --compare OLD.json`): the perf-regression gate. The writers and
//! the reader ([`json`], [`report`], [`png`], [`plot`]), the comparison ([`mod@compare`]), the grid ([`grid`]) and
//! the run facts ([`mod@env`]) need no GPU and are unit-tested.

pub mod budget;
pub mod compare;
mod cublas;
mod cusparse;
pub mod decode;
pub mod env;
pub mod grid;
pub mod json;
pub mod measure;
pub mod plans;
pub mod plot;
pub mod png;
pub mod reach;
pub mod report;
pub mod research;
mod runner;
pub mod side;
pub mod tune;

use std::path::{Path, PathBuf};

use cudarc::driver::{CudaViewMut, DevicePtrMut};

pub use compare::{Comparison, compare};
pub use cusparse::Kind as CusparseKind;
pub use grid::{Case, Source, default_grid, parse_case, quick_grid};
pub use json::read_results;
pub use report::{Header, Record, Results};

use sparsek::error::{Error, Result};
use sparsek::gpu::Gpu;

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
            _ => CusparseKind::parse(s).map(CusparseChoice::Only).ok_or_else(|| Error::InvalidArgument {
                name: "--cusparse",
                reason: format!(
                    "'{s}' is none of auto, off, {}",
                    CusparseKind::AUTO.map(CusparseKind::name).join(", ")
                ),
            }),
        }
    }
}

/// What to run and where to write it.
#[derive(Clone, Debug)]
pub struct Config {
    /// The cases, in order.
    pub cases: Vec<Case>,
    /// Untimed launches per contender before the timed ones.
    pub warmup: usize,
    /// Timed launches per contender (the median is reported).
    pub iters: usize,
    /// Rows of C compared with the oracle per contender (plus the first and the last).
    pub check_rows: usize,
    /// Seed mixed into every case's matrices.
    pub seed: u64,
    /// Where `latest.json`, `speedup.png` (and `bench.md` when `../BENCHMARKS.md` has no markers) go.
    pub out_dir: PathBuf,
    /// The cuSPARSE entry point.
    pub cusparse: CusparseChoice,
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

/// Input sets to rotate through for a contender whose one set (every operand a launch reads) takes
/// `set_bytes`: enough that together they span at least 2x L2 (so no launch finds its operands in L2 from
/// its previous use), at most 128; one when a set alone is that large.
pub fn rotation_sets(set_bytes: usize, l2_bytes: u64) -> usize {
    let target = 2 * l2_bytes as u128;
    let set = set_bytes.max(1) as u128;
    if set >= target { 1 } else { target.div_ceil(set).clamp(1, 128) as usize }
}

/// Runs `f`, turning a panic (cudarc panics when a library or symbol is missing) into an error message.
pub(crate) fn catch<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic in the CUDA library bindings".into())
    })
}

/// Fills a device buffer with the byte 0x7B: 1.3e36 as f32, 61280 as f16 — finite (so a library that reads C
/// despite beta == 0 still gets 0 * C = 0) but far outside any checked value, so elements left unwritten fail
/// the check.
pub(crate) fn poison<T>(gpu: &Gpu, mut s: CudaViewMut<'_, T>) -> std::result::Result<(), String> {
    let bytes = s.len() * std::mem::size_of::<T>();
    let stream = gpu.stream();
    let (ptr, _guard) = s.device_ptr_mut(stream);
    // SAFETY: `ptr` addresses the slice's `bytes` bytes, allocated on this stream and alive during the call;
    // every byte pattern is a valid f16/f32.
    unsafe { cudarc::driver::result::memset_d8_async(ptr, 0x7b, bytes, stream.cu_stream()) }
        .map_err(|e| format!("cuMemsetD8Async: {e}"))
}

/// Runs every case of `cfg` on `gpu`, printing progress on stderr, and writes the results (see the module
/// documentation). Returns the records; errors only when an output cannot be written.
pub fn run(gpu: &Gpu, cfg: &Config) -> Result<Summary> {
    let info = gpu.info();
    let libs = runner::Libs { cublas: cublas::Cublas::new(gpu), cusparse: cusparse::Cusparse::new(gpu) };
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
        warmup: cfg.warmup,
        iters: cfg.iters,
        check_rows: cfg.check_rows,
        seed: cfg.seed,
        command: cfg.command.clone(),
        ..Header::for_gpu(gpu)
    };
    eprintln!(
        "sparsek bench on {} (sm_{}{}, driver CUDA {}), {} cases, median of {} launches after {} warm-up",
        header.gpu,
        info.compute_capability.0,
        info.compute_capability.1,
        header.driver,
        cfg.cases.len(),
        cfg.iters,
        cfg.warmup
    );
    eprintln!("  cuBLAS: {}", header.cublas);
    eprintln!("  cuSPARSE: {}", header.cusparse);
    std::fs::create_dir_all(&cfg.out_dir).map_err(|e| io_err(&cfg.out_dir, e))?;
    let json_path = cfg.out_dir.join("latest.json");

    let mut records = Vec::with_capacity(cfg.cases.len());
    for (i, case) in cfg.cases.iter().enumerate() {
        let rec = runner::run_case(gpu, &libs, cfg, case);
        eprintln!("[{}/{}] {}", i + 1, cfg.cases.len(), progress_line(&rec));
        records.push(rec);
        // Written after every case, so an interrupted run leaves its results behind ("complete": false).
        write(&json_path, json::to_json(&header, &records, i + 1 == cfg.cases.len()).as_bytes())?;
    }
    if cfg.cases.is_empty() {
        write(&json_path, json::to_json(&header, &records, true).as_bytes())?;
    }
    drop(libs);

    let table = report::markdown(&header, &records);
    println!("{table}");
    let doc_path = cfg.out_dir.parent().map(|p| p.join("BENCHMARKS.md"));
    let spliced =
        doc_path.as_ref().and_then(|p| std::fs::read_to_string(p).ok().map(|doc| (p, report::splice(&doc, &table))));
    match spliced {
        Some((p, Some(doc))) => {
            write(p, doc.as_bytes())?;
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
            let p = cfg.out_dir.join("bench.md");
            write(&p, table.as_bytes())?;
            eprintln!("wrote {}", p.display());
        }
    }
    eprintln!("wrote {}", json_path.display());
    match report::speedup_plot(&header, &records) {
        Some(canvas) => {
            let p = cfg.out_dir.join("speedup.png");
            write(&p, &canvas.to_png())?;
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

fn io_err(path: &Path, e: std::io::Error) -> Error {
    Error::Io { path: path.display().to_string(), reason: e.to_string() }
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|e| io_err(path, e))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_covers_twice_l2() {
        let l2 = 50u64 << 20;
        assert_eq!(rotation_sets(512 << 20, l2), 1);
        assert_eq!(rotation_sets(100 << 20, l2), 1);
        assert_eq!(rotation_sets(30 << 20, l2), 4);
        assert_eq!(rotation_sets(1, l2), 128);
        for bytes in [1usize << 20, 7 << 20, 33 << 20, 99 << 20] {
            let r = rotation_sets(bytes, l2);
            assert!(r as u64 * bytes as u64 >= 2 * l2, "{r} sets of {bytes} bytes");
        }
    }

    #[test]
    fn cusparse_choice_parses() {
        assert_eq!("auto".parse::<CusparseChoice>().unwrap(), CusparseChoice::Auto);
        assert_eq!("off".parse::<CusparseChoice>().unwrap(), CusparseChoice::Off);
        assert_eq!("bsrmm-f32".parse::<CusparseChoice>().unwrap(), CusparseChoice::Only(CusparseKind::Bsrmm));
        assert!("cusparse".parse::<CusparseChoice>().is_err());
    }

    #[test]
    fn catch_turns_panics_into_messages() {
        assert_eq!(catch(|| 3), Ok(3));
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let r = catch(|| -> i32 { panic!("Unable to dynamically load the cublas shared library") });
        std::panic::set_hook(prev);
        assert!(r.unwrap_err().contains("cublas"));
    }
}
