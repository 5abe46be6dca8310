use super::*;
use crate::side::tests::check;

fn times(median_us: f64) -> Times {
    Times { median_us, min_us: median_us, max_us: median_us, samples: 30 }
}

fn measured(time: Option<Times>, gbps: Option<f64>) -> Measured {
    Measured { time, gbps, error: None }
}

fn references(copy_gbps: Option<f64>, empty_us: Option<f64>) -> References {
    References {
        copy: CopyBandwidth { bytes: COPY_BYTES, measured: measured(copy_gbps.map(|_| times(800.0)), copy_gbps) },
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
    r.contenders.sparsek.check = Some(check(sparsek_ok));
    r.contenders.sparsek.time = Some(times(sparsek_us));
    r.contenders.cublas.check = Some(check(true));
    r.contenders.cublas.time = Some(times(cublas_us));
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
        assert_eq!(t(8192, n, 8192, 64, 0.22), vec![(Figure::CopyFraction, 0.8), (Figure::SpeedupVsCublas, 3.63636)]);
    }
    for n in [32, 64] {
        assert_eq!(t(16384, n, 16384, 128, 0.10), vec![(Figure::CopyFraction, 0.7), (Figure::SpeedupVsCublas, 8.0)]);
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
    assert_eq!((r.same_size_copy.measured.gbps, r.same_size_copy_fraction), (None, None));
    let goals = r.goals.clone();
    // A copy of half the bytes moved, 12 µs: sparsek's 16 µs is 75% of it.
    let bytes = r.bytes.total.div_ceil(2).next_multiple_of(16);
    r.same_size_copy = SameSizeCopy { bytes, sets: 4, measured: measured(Some(times(12.0)), None) };
    r.evaluate(&case, &refs);
    assert_eq!(r.same_size_copy.measured.gbps, Some(round_sig(2.0 * bytes as f64 / 12.0 / 1e3, 6)));
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
        measured: measured(Some(times(14.0)), None),
    };
    r.evaluate(&case, &refs);
    assert_eq!(r.read_floor_fraction, Some(0.875));
    assert_eq!(r.read_floor.measured.gbps, Some(round_sig(r.bytes.total as f64 / 14.0 / 1e3, 6)));
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
    assert!(t.contains("0 met, 2 missed, 0 not measured (1 of 1 cases have targets). Missed by the read floor too"));
    assert!(t.contains("kernel measured this way): 2."), "{t}");
    assert!(t.contains("(measured 63.2%; the read floor misses it too)"), "{t}");

    r.read_floor.measured.time = Some(times(12.0));
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
    bad.read_floor.measured.time = Some(times(12.0));
    bad.evaluate(&case, &refs);
    assert_eq!(bad.read_floor_fraction, None);
    assert_eq!(bad.goals.iter().map(|g| (g.met, g.floor_met)).collect::<Vec<_>>(), vec![(None, Some(true)); 2]);
}

#[test]
fn read_text_names_the_kernel() {
    let copy = CopyBandwidth { bytes: 1 << 30, measured: measured(Some(times(700.0)), Some(3000.0)) };
    let read = ReadFloor {
        read_bytes: 1 << 30,
        ctas: floor::ctas(1 << 30, 0),
        sets: 1,
        measured: measured(Some(times(340.0)), Some(3158.0)),
        ..ReadFloor::default()
    };
    let t = read_text(&read, &copy);
    assert!(t.starts_with("1024 MiB read in 340.0 µs median of 30: 3158.0 GB/s, 105.3% of the copy's"), "{t}");
    assert!(t.contains("sparsek_read_floor: 32768 CTAs of 128 threads, each reading 32 KiB"), "{t}");
    let failed = ReadFloor {
        measured: Measured { error: Some("no PTX".into()), ..Measured::default() },
        ..ReadFloor::default()
    };
    assert_eq!(read_text(&failed, &copy), "not measured (no PTX)");
}

#[test]
fn table_and_json() {
    let header = Header { gpu: "Test GPU".into(), iters: 30, warmup: 5, ..Default::default() };
    let refs = references(Some(3000.0), Some(2.5));
    let large = Case::synthetic(8192, 16, 8192, 64, 0.22, Pattern::Uniform);
    let small = Case::synthetic(1536, 1, 384, 64, 0.5, Pattern::Uniform);
    let mut missing = record(&small, 72, 6.0, 6.0, true, &refs);
    missing.contenders.cublas = ContenderResult::of(Form::Cublas);
    missing.contenders.cublas.error = Some("cuBLAS unavailable: no | library".into());
    missing.evaluate(&small, &refs);
    // Queued: 9 µs per launch against the queued empty launch's 1.5 (no figure when the check failed).
    let mut queued = record(&large, 3604, 12.0, 48.0, true, &refs);
    queued.sparsek_queued = Queued { batch: 32, time: Some(times(9.0)), hold_us: Some(2000.0), error: None };
    queued.sparsek_queued_programmatic =
        Some(Queued { batch: 32, time: Some(times(7.5)), hold_us: Some(2000.0), error: None });
    queued.sparsek_graph = Some(Queued { batch: 32, time: Some(times(9.5)), hold_us: None, error: None });
    queued.sparsek_graph_programmatic = Some(Queued::failed("the graph's output differs"));
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

/// The file keeps the layout of the committed ones (docs/bench/*-decode-*.json): the top-level keys, and each
/// contender's keys with its figures in place.
#[test]
fn decode_file_keeps_its_layout() {
    use crate::side::tests::{check, keys_from};
    let mut d = ContenderResult::of(Form::Sparsek);
    d.check = Some(check(true));
    let refs = serde_json::json!({"references": {}});
    let text = crate::side::to_json("decode.json", &crate::report::tests::header(), refs, &[d], true).unwrap();
    assert_eq!(keys_from(&text, "header"), ["header", "references", "complete", "records"]);
    assert_eq!(keys_from(&text, "name"), ["name", "description", "check", "time", "sets", "rotated_bytes", "error"]);
    // The references and a record's copy and read floor, their measured figures last.
    let refs = references(Some(3000.0), Some(2.5));
    let case = Case::synthetic(8192, 16, 8192, 64, 0.22, Pattern::Uniform);
    let text = to_json(&crate::report::tests::header(), &refs, &[record(&case, 3604, 16.0, 48.0, true, &refs)], true);
    let text = text.unwrap();
    // A record's own keys, after its case facts.
    let figures = [
        "bytes",
        "sparsek",
        "cublas",
        "same_size_copy",
        "achieved_gbps",
        "copy_fraction",
        "same_size_copy_fraction",
        "read_floor",
        "read_floor_fraction",
        "read_floor_queued",
        "speedup_vs_cublas",
        "launch_ratio",
        "sparsek_queued",
        "queued_launch_ratio",
        "sparsek_queued_programmatic",
        "sparsek_graph",
        "sparsek_graph_programmatic",
        "goals",
    ];
    assert_eq!(crate::side::tests::record_keys(&text), [&figures[..], &crate::side::tests::STATUS].concat());
    let measured = ["time", "gbps", "error"];
    assert_eq!(keys_from(&text, "bytes"), [&["bytes"][..], &measured].concat());
    let floor = [&["read_bytes", "write_bytes", "ctas", "sets"][..], &measured].concat();
    assert_eq!(keys_from(&text, "read_bytes"), floor);
    let record = &text[text.find("\"same_size_copy\"").unwrap()..];
    assert_eq!(keys_from(record, "bytes"), [&["bytes", "sets"][..], &measured].concat());
    let record = &record[record.find("\"read_floor\"").unwrap()..];
    assert_eq!(keys_from(record, "read_bytes"), floor);
}
