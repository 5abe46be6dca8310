//! `latest.json` through serde: the writer ([`to_json`]) and the reader ([`read_results`], [`parse_results`]).
//!
//! The file keeps the layout of the earlier hand-written writer, so records written before serde (such as the
//! committed `docs/bench/latest.json`) read back unchanged:
//!
//! ```text
//! {"header": {..., "method": {...}}, "complete": bool,
//!  "records": [{m, n, k, bs, density, pattern, nnzb, seed, sparsek_ms, ...,
//!               "contenders": {sparsek, cublas, cusparse}}]}
//! ```
//!
//! Each record starts with the flat keys of DESIGN.md (times, TFLOPS, ratios, checks: what a reader of the file
//! wants at a glance), then each contender's details. The flat figures derived from the times (TFLOPS, ratios,
//! `*_trusted`) are written for readers of the file but recomputed on reading, from the case, `nnzb` and the
//! contenders' details, which are the source of truth. Measured values are written to 6 significant digits
//! (f32 event times carry hardly more); a non-finite value is written as `null` (an error of `null` reads back as
//! infinite: a non-finite output). Seeds are strings (a u64 does not fit a JSON reader's double); a number is
//! accepted too.
//!
//! The in-memory types ([`Header`], [`Record`], [`Outcome`]) are serialized here, through the wire types of this
//! module (their `Serialize` / `Deserialize` impls convert); [`Check`] maps onto its JSON object directly.

use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, Result};
use crate::grid::{Case, Source};
use crate::num::{opt_sig6, u64_string};
use crate::report::{Check, Header, Outcome, Record, Results, TimingFields};
use sparsek::format::Pattern;

/// The whole run as pretty-printed JSON (two-space indentation, a final newline):
/// `{"header": ..., "complete": bool, "records": [...]}`. `complete` is false while a run is still going (the
/// file is rewritten after every case, so an interrupted run leaves its results behind).
pub fn to_json(header: &Header, records: &[Record], complete: bool) -> String {
    #[derive(Serialize)]
    struct ResultsRef<'a> {
        header: &'a Header,
        complete: bool,
        records: &'a [Record],
    }
    let mut s = serde_json::to_string_pretty(&ResultsRef { header, complete, records })
        .expect("the records serialize (string keys, no maps with other keys)");
    s.push('\n');
    s
}

/// Reads a results file written by `sparsek bench` (this version or the earlier hand-written writer).
pub fn read_results(path: impl AsRef<Path>) -> Result<Results> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    parse_results(&text).map_err(|e| match e {
        Error::Parse { line, column, source, .. } => {
            Error::Parse { file: path.display().to_string(), line, column, source }
        }
        e => e,
    })
}

/// Parses the text of a results file (see [`read_results`]).
pub fn parse_results(text: &str) -> Result<Results> {
    serde_json::from_str(text).map_err(|source| Error::Parse {
        file: "<results>".into(),
        line: source.line(),
        column: source.column(),
        source,
    })
}

/// `Serialize` and `Deserialize` for an in-memory type through its wire type (`From` one way, `TryFrom` back).
macro_rules! serde_via {
    ($($ty:ty => $wire:ty),* $(,)?) => {$(
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                <$wire>::from(self.clone()).serialize(s)
            }
        }
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                <$ty>::try_from(<$wire>::deserialize(d)?).map_err(serde::de::Error::custom)
            }
        }
    )*};
}
serde_via!(Header => HeaderJson, Outcome => OutcomeJson, Record => RecordJson);

// ---------------------------------------------------------------------------------------------------------
// The header.

/// `header` as written.
#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct HeaderJson {
    gpu: String,
    /// "9.0".
    compute_capability: String,
    driver: String,
    sm_count: u32,
    l2_bytes: u64,
    sm_clock_max_mhz: u32,
    date_utc: String,
    git_commit: String,
    git_dirty: Option<bool>,
    sparsek_version: String,
    cublas: String,
    cusparse: String,
    method: MethodJson,
    command: String,
}

/// `header.method`: the run's parameters and, for readers of the file, the method in words (fixed strings,
/// not read back).
#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct MethodJson {
    timer: String,
    statistic: String,
    warmup: usize,
    iters: usize,
    interleaved: bool,
    input_sets: String,
    check_rows: usize,
    #[serde(with = "u64_string")]
    seed: u64,
    effective_tflops: String,
    cublas_tflops: String,
}

/// `$ty { .. }` with the header's fields that are written as they are moved from `$h`, and the others given.
macro_rules! same_fields {
    ($ty:ident, $h:ident, { $($rest:tt)* }) => {
        $ty {
            gpu: $h.gpu,
            driver: $h.driver,
            sm_count: $h.sm_count,
            l2_bytes: $h.l2_bytes,
            sm_clock_max_mhz: $h.sm_clock_max_mhz,
            date_utc: $h.date_utc,
            git_commit: $h.git_commit,
            git_dirty: $h.git_dirty,
            sparsek_version: $h.sparsek_version,
            cublas: $h.cublas,
            cusparse: $h.cusparse,
            command: $h.command,
            $($rest)*
        }
    };
}

impl From<Header> for HeaderJson {
    fn from(h: Header) -> Self {
        same_fields!(HeaderJson, h, {
            compute_capability: format!("{}.{}", h.compute_capability.0, h.compute_capability.1),
            method: MethodJson {
                timer: "CUDA events, one pair per launch, read after the loop".into(),
                statistic: "median".into(),
                warmup: h.warmup,
                iters: h.iters,
                interleaved: true,
                input_sets: "rotated per launch while one set (every operand of a launch) is under 2x L2".into(),
                check_rows: h.check_rows,
                seed: h.seed,
                effective_tflops: "2 * nnzb * bs^2 * N / time".into(),
                cublas_tflops: "2 * M * N * K / time".into(),
            },
        })
    }
}

impl TryFrom<HeaderJson> for Header {
    type Error = Error;
    fn try_from(h: HeaderJson) -> Result<Self> {
        let cc = &h.compute_capability;
        let compute_capability = if cc.is_empty() {
            (0, 0)
        } else {
            cc.split_once('.').and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?))).ok_or_else(
                || Error::Field { field: "compute_capability", value: cc.clone(), expected: "MAJOR.MINOR" },
            )?
        };
        Ok(same_fields!(Header, h, {
            compute_capability,
            warmup: h.method.warmup,
            iters: h.method.iters,
            check_rows: h.method.check_rows,
            seed: h.method.seed,
        }))
    }
}

// ---------------------------------------------------------------------------------------------------------
// One contender.

/// `contenders.<name>` as written: the kind, the timing flattened, the input sets, trust and the check.
#[derive(Serialize, Deserialize)]
struct OutcomeJson {
    kind: String,
    #[serde(flatten)]
    timing: TimingFields,
    #[serde(default)]
    input_sets: usize,
    /// Derived (the check passed); not read back.
    #[serde(default)]
    trusted: bool,
    #[serde(default)]
    check: Option<Check>,
}

impl From<Outcome> for OutcomeJson {
    fn from(o: Outcome) -> Self {
        OutcomeJson {
            trusted: o.trusted(),
            timing: o.timing.as_ref().into(),
            input_sets: o.sets,
            kind: o.kind,
            check: o.check,
        }
    }
}

impl From<OutcomeJson> for Outcome {
    fn from(o: OutcomeJson) -> Self {
        Outcome { kind: o.kind, check: o.check, timing: o.timing.timing(), sets: o.input_sets }
    }
}

// ---------------------------------------------------------------------------------------------------------
// One record.

/// A record as written: the flat keys first, then `contenders`.
#[derive(Serialize, Deserialize)]
struct RecordJson {
    m: usize,
    n: usize,
    k: usize,
    bs: usize,
    /// Written exactly (it identifies the case); not rounded.
    density: f64,
    #[serde(default, serialize_with = "opt_sig6")]
    density_actual: Option<f64>,
    /// A generator pattern ("uniform", "skewed", ...) or `file:<file name>`.
    pattern: String,
    /// For a case read from a file: the path given (absent in files written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    matrix_path: Option<String>,
    nnzb: usize,
    #[serde(with = "u64_string")]
    seed: u64,
    #[serde(default, serialize_with = "opt_sig6")]
    sparsek_ms: Option<f64>,
    #[serde(default, serialize_with = "opt_sig6")]
    cublas_dense_ms: Option<f64>,
    #[serde(default, serialize_with = "opt_sig6")]
    cusparse_ms: Option<f64>,
    #[serde(default)]
    cublas_kind: String,
    #[serde(default)]
    cusparse_kind: String,
    #[serde(default, serialize_with = "opt_sig6")]
    sparsek_tflops: Option<f64>,
    #[serde(default, serialize_with = "opt_sig6")]
    cublas_tflops: Option<f64>,
    #[serde(default, serialize_with = "opt_sig6")]
    cusparse_tflops: Option<f64>,
    #[serde(default, serialize_with = "opt_sig6")]
    ratio_vs_cublas: Option<f64>,
    #[serde(default, serialize_with = "opt_sig6")]
    speedup_vs_cublas: Option<f64>,
    #[serde(default, serialize_with = "opt_sig6")]
    speedup_vs_cusparse: Option<f64>,
    #[serde(default)]
    sm_clock_mhz: Option<u32>,
    #[serde(default)]
    sparsek_check_passed: Option<bool>,
    #[serde(default, serialize_with = "opt_sig6")]
    sparsek_max_abs_err: Option<f64>,
    #[serde(default)]
    cublas_check_passed: Option<bool>,
    #[serde(default, serialize_with = "opt_sig6")]
    cublas_max_abs_err: Option<f64>,
    #[serde(default)]
    cublas_trusted: bool,
    #[serde(default)]
    cusparse_check_passed: Option<bool>,
    #[serde(default, serialize_with = "opt_sig6")]
    cusparse_max_abs_err: Option<f64>,
    #[serde(default)]
    cusparse_trusted: bool,
    #[serde(default)]
    error: Option<String>,
    contenders: ContendersJson,
}

/// `contenders`.
#[derive(Serialize, Deserialize)]
struct ContendersJson {
    sparsek: Outcome,
    cublas: Outcome,
    cusparse: Outcome,
}

impl From<Record> for RecordJson {
    fn from(r: Record) -> Self {
        let passed = |o: &Outcome| o.check.as_ref().map(|c| c.passed);
        let err = |o: &Outcome| o.check.as_ref().map(|c| c.max_abs_err);
        let c = &r.case;
        RecordJson {
            m: c.m,
            n: c.n,
            k: c.k,
            bs: c.bs,
            density: c.density,
            density_actual: r.actual_density(),
            pattern: c.pattern_name(),
            matrix_path: match &c.source {
                Source::File(p) => Some(p.display().to_string()),
                Source::Synthetic(_) => None,
            },
            nnzb: r.nnzb,
            seed: r.seed,
            sparsek_ms: r.sparsek.ms(),
            cublas_dense_ms: r.cublas.ms(),
            cusparse_ms: r.cusparse.ms(),
            cublas_kind: r.cublas.kind.clone(),
            cusparse_kind: r.cusparse.kind.clone(),
            sparsek_tflops: r.sparsek_tflops(),
            cublas_tflops: r.cublas_tflops(),
            cusparse_tflops: r.cusparse_tflops(),
            ratio_vs_cublas: r.ratio_vs_cublas(),
            speedup_vs_cublas: r.speedup_vs_cublas(),
            speedup_vs_cusparse: r.speedup_vs_cusparse(),
            sm_clock_mhz: r.sm_clock_mhz,
            sparsek_check_passed: passed(&r.sparsek),
            sparsek_max_abs_err: err(&r.sparsek),
            cublas_check_passed: passed(&r.cublas),
            cublas_max_abs_err: err(&r.cublas),
            cublas_trusted: r.cublas.trusted(),
            cusparse_check_passed: passed(&r.cusparse),
            cusparse_max_abs_err: err(&r.cusparse),
            cusparse_trusted: r.cusparse.trusted(),
            error: r.error,
            contenders: ContendersJson { sparsek: r.sparsek, cublas: r.cublas, cusparse: r.cusparse },
        }
    }
}

impl TryFrom<RecordJson> for Record {
    type Error = Error;
    fn try_from(r: RecordJson) -> Result<Self> {
        let source = match r.pattern.strip_prefix("file:") {
            Some(name) => Source::File(r.matrix_path.unwrap_or_else(|| name.to_string()).into()),
            None => Source::Synthetic(r.pattern.parse::<Pattern>()?),
        };
        let record = Record {
            case: Case { m: r.m, n: r.n, k: r.k, bs: r.bs, density: r.density, source },
            nnzb: r.nnzb,
            seed: r.seed,
            sparsek: r.contenders.sparsek,
            cublas: r.contenders.cublas,
            cusparse: r.contenders.cusparse,
            sm_clock_mhz: r.sm_clock_mhz,
            error: r.error,
        };
        // A malformed record (bs 0, a density of 500%, a time of 0) is refused, not compared.
        record.validate().map_err(|why| Error::MalformedRecord { m: r.m, n: r.n, k: r.k, bs: r.bs, why })?;
        Ok(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Timing;
    use crate::report::tests::{header, outcome, record};

    fn committed() -> Results {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/bench/latest.json");
        read_results(&path).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A contender's times as written: flat, to 6 digits, `null` when not timed; a median written as `null` (not
    /// computable) reads back as no timing, a missing minimum or maximum as the median.
    #[test]
    fn contender_timing_fields() {
        let timing = Timing { median_ms: 1.234_567_8, min_ms: 1.0, max_ms: 2.0, samples: 30 };
        let text = serde_json::to_string(&TimingFields::from(Some(&timing))).unwrap();
        assert_eq!(text, r#"{"median_ms":1.23457,"min_ms":1.0,"max_ms":2.0,"samples":30}"#);
        let back: TimingFields = serde_json::from_str(&text).unwrap();
        assert_eq!(back.timing(), Some(Timing { median_ms: 1.23457, ..timing }));
        let none = serde_json::to_string(&TimingFields::from(None)).unwrap();
        assert_eq!(none, r#"{"median_ms":null,"min_ms":null,"max_ms":null,"samples":0}"#);
        let nan = serde_json::to_string(&TimingFields::from(Some(&Timing { median_ms: f64::NAN, ..timing }))).unwrap();
        assert_eq!(serde_json::from_str::<TimingFields>(&nan).unwrap().timing(), None);
        let median_only: TimingFields = serde_json::from_str(r#"{"median_ms": 2.5, "samples": 3}"#).unwrap();
        assert_eq!(median_only.timing(), Some(Timing { median_ms: 2.5, min_ms: 2.5, max_ms: 2.5, samples: 3 }));
    }

    #[test]
    fn round_trip() {
        let mut recs = vec![record(64, 0.22, 1.0, Some(1.5)), record(16, 0.05, 0.5, None)];
        // A failed check with a non-finite error, an untimed contender, a sparsek error, a file case.
        recs[1].sparsek.check.as_mut().unwrap().max_abs_err = f64::INFINITY;
        recs[1].sparsek.check.as_mut().unwrap().passed = false;
        recs[1].cusparse = Outcome::unavailable("disabled (--cusparse off)");
        let mut file = record(32, 0.0123, 0.25, Some(0.125));
        file.case.source = Source::File("/data/web \"graph\".mtx".into());
        file.error = Some("launch failed: \u{1}\n".into());
        file.sm_clock_mhz = None;
        file.cublas = outcome("cublas-gemmex-f16-f32", None, None);
        recs.push(file);
        let mut h = header();
        h.seed = u64::MAX;
        h.git_dirty = Some(true);
        for complete in [false, true] {
            let text = to_json(&h, &recs, complete);
            let back = parse_results(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(back, Results { header: h.clone(), complete, records: recs.clone() });
            assert!(text.ends_with("}\n"));
        }
    }

    #[test]
    fn json_has_the_design_keys() {
        let recs = vec![record(64, 0.22, 1.0, Some(1.5)), record(16, 0.05, 0.5, None)];
        let j = to_json(&header(), &recs, true);
        for key in [
            "m",
            "n",
            "k",
            "bs",
            "density",
            "pattern",
            "nnzb",
            "sparsek_ms",
            "cublas_dense_ms",
            "cusparse_ms",
            "cusparse_kind",
            "sparsek_tflops",
            "cublas_tflops",
            "ratio_vs_cublas",
            "speedup_vs_cublas",
            "speedup_vs_cusparse",
            "sm_clock_mhz",
            "git_commit",
            "date_utc",
        ] {
            assert!(j.contains(&format!("\"{key}\": ")), "missing {key}");
        }
        assert!(j.contains("\"cublas_kind\": \"unavailable: libcublas not found\""));
        assert!(j.contains("\"cusparse_trusted\": false"));
        assert!(j.contains("\"complete\": true"));
        assert!(j.contains("\"seed\": \"1\""), "seeds are strings");
        assert!(j.contains("\"compute_capability\": \"9.0\""));
        // The derived figures are written, rounded to 6 digits: 2 * 8192^3 / 1.5 ms.
        assert!(j.contains("\"cublas_tflops\": 733.008"), "{j}");
    }

    #[test]
    fn reads_the_committed_results() {
        let r = committed();
        assert!(r.complete);
        // The committed run comes from a lent H100 or H200 (compute capability 9.0).
        assert!(matches!(r.header.gpu.as_str(), "NVIDIA H100 80GB HBM3" | "NVIDIA H200"), "{}", r.header.gpu);
        assert_eq!(r.header.compute_capability, (9, 0));
        assert_eq!((r.header.warmup, r.header.iters, r.header.check_rows, r.header.seed), (5, 30, 64, 1));
        assert_eq!(r.records.len(), 21);
        // The same cases as the default grid, in the same order.
        assert_eq!(r.cases(), crate::grid::default_grid());
        let first = &r.records[0];
        assert_eq!(first.case.to_string(), "8192x8192x8192 bs16 5% uniform");
        assert_eq!(first.nnzb, 13107);
        assert_eq!(first.seed, 1_899_041_265_126_584_298);
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/bench/latest.json")).unwrap();
        let raw: serde_json::Value = serde_json::from_str(&text).unwrap();
        // The times are the file's (whichever run is committed), read into the right fields.
        assert_eq!(first.sparsek.ms(), raw["records"][0]["sparsek_ms"].as_f64());
        assert!(first.sparsek.ms().is_some_and(|ms| ms > 0.0));
        assert_eq!(first.cublas.ms(), raw["records"][0]["cublas_dense_ms"].as_f64());
        assert_eq!(first.sparsek.timing.as_ref().unwrap().samples, 30);
        assert!(first.sparsek_passed() && first.cublas.trusted() && first.cusparse.trusted());
        assert_eq!(first.cusparse.kind, "bsr-spmm-f16");
        // The derived figures recomputed from the times match the ones written in the file.
        for (rec, raw) in r.records.iter().zip(raw["records"].as_array().unwrap()) {
            for (key, v) in [
                ("sparsek_tflops", rec.sparsek_tflops()),
                ("ratio_vs_cublas", rec.ratio_vs_cublas()),
                ("speedup_vs_cublas", rec.speedup_vs_cublas()),
            ] {
                let want = raw[key].as_f64().unwrap();
                let got = v.unwrap();
                assert!((got - want).abs() <= 1e-5 * want.abs(), "{}: {key} {got} vs {want}", rec.case);
            }
        }
    }

    #[test]
    fn committed_results_rewrite_stably() {
        let r = committed();
        let text = to_json(&r.header, &r.records, r.complete);
        let again = parse_results(&text).unwrap();
        assert_eq!(again, r);
        assert_eq!(to_json(&again.header, &again.records, again.complete), text);
    }

    #[test]
    fn tolerant_of_numbers_for_seeds_and_missing_details() {
        let text = r#"{"header": {"gpu": "X", "method": {"seed": 7}}, "complete": false, "records": [
            {"m": 64, "n": 8, "k": 64, "bs": 16, "density": 0.5, "pattern": "skewed", "nnzb": 8, "seed": 42,
             "contenders": {"sparsek": {"kind": "sparsek", "median_ms": 0.01},
                            "cublas": {"kind": "unavailable: none"}, "cusparse": {"kind": "unavailable: none"}}}]}"#;
        let r = parse_results(text).unwrap();
        assert_eq!(r.header.seed, 7);
        assert_eq!(r.records[0].seed, 42);
        assert_eq!(r.records[0].case.to_string(), "64x8x64 bs16 50% skewed");
        assert_eq!(r.records[0].sparsek.ms(), Some(0.01));
        assert!(!r.records[0].sparsek_passed(), "no check: not passed");
    }

    #[test]
    fn bad_files_are_errors() {
        assert!(parse_results("").is_err());
        assert!(parse_results("{\"records\": 3}").is_err());
        let unknown = r#"{"header": {}, "complete": true, "records": [{"m": 1, "n": 1, "k": 1, "bs": 16,
            "density": 0.5, "pattern": "zigzag", "nnzb": 0, "seed": "1", "contenders": {}}]}"#;
        assert!(parse_results(unknown).is_err());
        let e = read_results("/nonexistent/latest.json").unwrap_err();
        assert!(matches!(&e, Error::Io { path, .. } if path == Path::new("/nonexistent/latest.json")), "{e:?}");
        assert!(e.to_string().starts_with("/nonexistent/latest.json: "), "{e}");
    }

    #[test]
    fn a_malformed_record_is_a_parse_error_with_its_file_and_line() {
        let text =
            to_json(&header(), &[record(64, 0.22, 1.0, Some(1.5))], true).replacen("\"bs\": 64,", "\"bs\": 0,", 1);
        let line = 1 + text[..text.find("\"bs\": 0").unwrap()].lines().count();
        let e = parse_results(&text).unwrap_err();
        let Error::Parse { file, line: at, .. } = &e else { panic!("{e:?}") };
        assert_eq!(file, "<results>");
        assert!(*at >= line, "the error at line {at}, the record's bs at line {line}");
        let msg = e.to_string();
        assert!(msg.starts_with("<results>: not a sparsek bench results file: malformed record"), "{msg}");
        assert!(msg.contains("(8192x8192x8192 bs0): block size 0 is not one of [16, 32, 64, 128]"), "{msg}");
        // Read from a file, the error names it.
        let path = std::env::temp_dir().join(format!("sparsek-bench-malformed-{}.json", std::process::id()));
        std::fs::write(&path, &text).unwrap();
        let e = read_results(&path).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(&e, Error::Parse { file, .. } if *file == path.display().to_string()), "{e:?}");
    }

    #[test]
    fn plot_of_the_committed_results_is_small() {
        let r = committed();
        let canvas = crate::report::speedup_plot(&r.header, &r.records)
            .expect("the committed grid has uniform cases with cuBLAS");
        let file = canvas.to_png();
        assert!(file.len() < 100_000, "speedup.png of the committed grid takes {} bytes", file.len());
        let (w, h, rgb) = crate::png::tests::decode_rgb(&file);
        assert_eq!((w as usize, h as usize), (canvas.width(), canvas.height()));
        assert!(rgb == canvas.pixels());
    }
}
