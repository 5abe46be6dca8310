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

fn graph(us: f64) -> Option<Queued> {
    Some(Queued { batch: 32, time: Some(times(us)), hold_us: None, error: None })
}

fn kernel(us: f64) -> Queued {
    Queued { batch: 32, time: Some(times(us)), hold_us: Some(2000.0), error: None }
}

/// `r` with the graph times of sparsek, the read floor and cuBLAS (`None`: not measured), evaluated again.
fn with_graphs(
    mut r: DecodeRecord,
    case: &Case,
    refs: &References,
    (sparsek, floor, cublas): (Option<f64>, Option<f64>, Option<f64>),
) -> DecodeRecord {
    r.sparsek_graph = sparsek.and_then(graph);
    r.read_floor_graph = floor.and_then(graph);
    r.cublas_graph = cublas.and_then(graph);
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
    // Every case is a valid generator input. Targets (with the stored blocks the density asks for): the large
    // shapes at N <= 16 (the smallest, 8192^2 bs 64 10%, stores 13.4 MB), none at 32 and 64 or on the small layers
    // (1536 x 384 bs 64 50%: 0.59 MB).
    for case in c.iter().chain(&q) {
        assert!(case.m % case.bs == 0 && case.k % case.bs == 0, "{case}");
        let expected = case.m >= 8192 && case.n <= 16;
        assert_eq!(!targets(case, nominal_nnzb(case)).is_empty(), expected, "{case}");
    }
    assert_eq!(c.iter().filter(|c| !targets(c, nominal_nnzb(c)).is_empty()).count(), 24);
    assert_eq!(nominal_nnzb(&Case::synthetic(8192, 1, 8192, 64, 0.10, Pattern::Uniform)), 1638);
}

#[test]
fn target_rule() {
    let t = |m, n, k, bs, d, nnzb| targets(&Case::synthetic(m, n, k, bs, d, Pattern::Uniform), nnzb);
    let both = |d: f64| vec![(Figure::GraphFloorFraction, 0.9), (Figure::GraphSpeedupVsCublas, round_sig(0.8 / d, 6))];
    // 8192^2 bs 64 22%: 3604 blocks, 29.5 MB.
    for n in [1, 8, 16] {
        assert_eq!(t(8192, n, 8192, 64, 0.22, 3604), both(0.22));
    }
    assert_eq!(both(0.22)[1].1, 3.63636);
    assert_eq!(t(16384, 16, 16384, 128, 0.10, 1638), both(0.10));
    assert_eq!(both(0.10)[1].1, 8.0);
    // N: 16 has targets, 17 none.
    assert_eq!(t(8192, 16, 8192, 64, 0.22, 3604), both(0.22));
    assert!(t(8192, 17, 8192, 64, 0.22, 3604).is_empty());
    assert!(t(8192, 32, 8192, 64, 0.22, 3604).is_empty());
    // Stored bytes: bs 16 blocks are 512 bytes, so 15625 of them are 8 MB exactly (targets), one fewer is not.
    assert_eq!(stored_bytes(16, 15_625), TARGET_MIN_STORED_BYTES);
    assert_eq!(stored_bytes(64, 3604), 29_523_968);
    assert_eq!(t(8192, 16, 8192, 16, 0.0596, 15_625), both(0.0596));
    assert!(t(8192, 16, 8192, 16, 0.0596, 15_624).is_empty());
    // Any shape, block size or density: only N and the stored bytes decide (issue 43's 11008 x 4096 bs 64 25% layer
    // stores 11.3 MB).
    assert_eq!(t(11008, 1, 4096, 64, 0.25, 2752), both(0.25));
    assert_eq!(t(4096, 16, 11008, 64, 0.25, 2752), both(0.25));
    // The small layers store well under 8 MB.
    for (m, k) in [(1536, 384), (384, 1536)] {
        for n in [1, 16] {
            assert!(t(m, n, k, 64, 0.5, 72).is_empty());
        }
    }
    assert!(t(8192, 1, 8192, 64, 0.0, 0).is_empty());
    assert!(Figure::GraphFloorFraction.meets(0.9, 0.9) && !Figure::GraphFloorFraction.meets(0.8999, 0.9));
    assert!(Figure::GraphSpeedupVsCublas.meets(3.63636, 3.63636) && !Figure::GraphSpeedupVsCublas.meets(3.6, 3.63636));
}

#[test]
fn figures_and_verdicts() {
    let refs = references(Some(3000.0), Some(2.5));
    // 8192 x 8192 bs 64 22%, N 16: 3604 blocks, 29.5 MB stored.
    let case = Case::synthetic(8192, 16, 8192, 64, 0.22, Pattern::Uniform);
    let base = record(&case, 3604, 12.0, 48.0, true, &refs);
    // Per event: figures reported, no targets measured without graph times.
    let bytes = BytesMoved::new(8192, 16, 8192, 64, 3604).total as f64;
    assert_eq!(base.achieved_gbps, Some(round_sig(bytes / 12.0 / 1e3, 6)));
    assert_eq!(base.copy_fraction, Some(round_sig(base.achieved_gbps.unwrap() / 3000.0, 6)));
    assert_eq!(base.speedup_vs_cublas, Some(4.0));
    assert_eq!(base.launch_ratio, Some(4.8));
    assert_eq!(base.goals.iter().map(|g| (g.met, g.floor_met)).collect::<Vec<_>>(), vec![(None, None); 2]);

    // Graph: sparsek 10 µs, the read floor 9.5, cuBLAS 40: 95% of the floor, 4x cuBLAS, both met.
    let r = with_graphs(base.clone(), &case, &refs, (Some(10.0), Some(9.5), Some(40.0)));
    assert_eq!(r.graph_floor_fraction, Some(0.95));
    assert_eq!(r.graph_speedup_vs_cublas, Some(4.0));
    assert_eq!(r.graph_stored_gbps, Some(round_sig(29_523_968.0 / 10.0 / 1e3, 6)));
    assert_eq!(r.goals.iter().map(|g| (g.met, g.floor_met)).collect::<Vec<_>>(), vec![(Some(true), Some(true)); 2]);
    assert!(r.sparsek_passed());
    // The per-event figures do not enter the verdicts: a slow per-event time changes nothing.
    let slow_event =
        with_graphs(record(&case, 3604, 40.0, 48.0, true, &refs), &case, &refs, (Some(10.0), Some(9.5), Some(40.0)));
    assert_eq!(slow_event.goals, r.goals);

    // 90% exactly is met: the floor 9 µs, sparsek 10.
    let edge = with_graphs(base.clone(), &case, &refs, (Some(10.0), Some(9.0), Some(40.0)));
    assert_eq!(edge.goals[0].met, Some(true));

    // sparsek 12 µs: 79.2% of the floor and 3.33x, both missed; the floor meets both (100%, 4.21x).
    let slow = with_graphs(base.clone(), &case, &refs, (Some(12.0), Some(9.5), Some(40.0)));
    assert_eq!(slow.graph_floor_fraction, Some(round_sig(9.5 / 12.0, 6)));
    assert_eq!(slow.goals.iter().map(|g| (g.met, g.floor_met)).collect::<Vec<_>>(), vec![(Some(false), Some(true)); 2]);
    assert!(slow.sparsek_passed(), "a missed target is not a failure");
    // A floor of 12 µs misses the speedup too (3.33x): "read floor too".
    let beyond = with_graphs(base.clone(), &case, &refs, (Some(12.5), Some(12.0), Some(40.0)));
    assert_eq!(
        beyond.goals.iter().map(|g| (g.met, g.floor_met)).collect::<Vec<_>>(),
        vec![(Some(true), Some(true)), (Some(false), Some(false))]
    );

    // A failed graph (its output failed its check): no figures from it, the floor's verdicts stand.
    let mut failed = with_graphs(base.clone(), &case, &refs, (Some(10.0), Some(9.5), Some(40.0)));
    failed.sparsek_graph = Some(Queued::failed("the graph's output failed its check"));
    failed.evaluate(&case, &refs);
    assert_eq!(
        (failed.graph_floor_fraction, failed.graph_speedup_vs_cublas, failed.graph_stored_gbps),
        (None, None, None)
    );
    assert_eq!(failed.goals.iter().map(|g| (g.met, g.floor_met)).collect::<Vec<_>>(), vec![(None, Some(true)); 2]);
    // cuBLAS's graph failed: no speedup, the floor fraction stands.
    let mut no_cublas = with_graphs(base.clone(), &case, &refs, (Some(10.0), Some(9.5), Some(40.0)));
    no_cublas.cublas_graph = Some(Queued::failed("cuStreamBeginCapture"));
    no_cublas.evaluate(&case, &refs);
    assert_eq!((no_cublas.graph_floor_fraction, no_cublas.graph_speedup_vs_cublas), (Some(0.95), None));
    assert_eq!(no_cublas.goals.iter().map(|g| g.met).collect::<Vec<_>>(), vec![Some(true), None]);
    assert_eq!(checks_cell(&no_cublas), "pass; graph failed: cuBLAS");
    assert_eq!(checks_cell(&failed), "pass; graph failed: sparsek");

    // A failed sparsek check: no figures, no verdicts, a failed case (even with a graph time).
    let bad =
        with_graphs(record(&case, 3604, 12.0, 48.0, false, &refs), &case, &refs, (Some(10.0), Some(9.5), Some(40.0)));
    assert_eq!((bad.achieved_gbps, bad.speedup_vs_cublas, bad.launch_ratio), (None, None, None));
    assert_eq!((bad.graph_floor_fraction, bad.graph_speedup_vs_cublas), (None, None));
    assert!(bad.goals.iter().all(|g| g.met.is_none()));
    assert!(!bad.sparsek_passed());

    // A small layer: figures, no targets.
    let small = Case::synthetic(1536, 1, 384, 64, 0.5, Pattern::Uniform);
    let r = with_graphs(record(&small, 72, 4.0, 6.0, true, &refs), &small, &refs, (Some(2.0), Some(1.5), Some(3.0)));
    assert_eq!((r.graph_floor_fraction, r.graph_speedup_vs_cublas), (Some(0.75), Some(1.5)));
    assert!(r.goals.is_empty());

    // A case that failed before its A was generated keeps its targets (from the requested density), not measured.
    let mut early = DecodeRecord::new(&case, 7);
    early.status.error = Some("out of memory".into());
    early.evaluate(&case, &refs);
    assert_eq!(early.goals.iter().map(|g| g.met).collect::<Vec<_>>(), vec![None, None]);
}

#[test]
fn same_size_copy_figures() {
    let refs = references(Some(3000.0), Some(2.5));
    let case = Case::synthetic(8192, 16, 8192, 64, 0.22, Pattern::Uniform);
    let mut r =
        with_graphs(record(&case, 3604, 16.0, 48.0, true, &refs), &case, &refs, (Some(10.0), Some(9.5), Some(40.0)));
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
    assert_eq!(r.goals, goals, "the targets are on the graph times");
    // A failed sparsek check gives no fraction.
    let mut bad = record(&case, 3604, 16.0, 48.0, false, &refs);
    bad.same_size_copy = r.same_size_copy.clone();
    bad.evaluate(&case, &refs);
    assert_eq!(bad.same_size_copy_fraction, None);
    // In the progress line, and the field in the JSON.
    assert!(progress_line(&r).contains("of copy, 75.0% of a same-size copy"), "{}", progress_line(&r));
    let header = Header { gpu: "Test GPU".into(), iters: 30, warmup: 5, ..Default::default() };
    let v: serde_json::Value = serde_json::from_str(&to_json(&header, &refs, &[r], true).unwrap()).unwrap();
    assert_eq!(v["records"][0]["same_size_copy"]["sets"], 4);
    assert!((v["records"][0]["same_size_copy_fraction"].as_f64().unwrap() - 0.75).abs() < 1e-5);
}

#[test]
fn read_floor_figures() {
    let refs = references(Some(3000.0), Some(2.5));
    let case = Case::synthetic(8192, 16, 8192, 64, 0.22, Pattern::Uniform);
    // sparsek 12.5 µs in graph mode against cuBLAS's 40: 3.2x, missed; no floor: its verdicts not measured.
    let mut r = with_graphs(record(&case, 3604, 16.0, 48.0, true, &refs), &case, &refs, (Some(12.5), None, Some(40.0)));
    assert_eq!(
        r.goals.iter().map(|g| (g.met, g.floor_met)).collect::<Vec<_>>(),
        vec![(None, None), (Some(false), None)]
    );
    // The floor per event (14 µs: 87.5% of sparsek's 16) is reported beside it.
    r.read_floor = ReadFloor {
        read_bytes: r.bytes.total - r.bytes.c,
        write_bytes: r.bytes.c,
        ctas: 800,
        sets: 4,
        measured: measured(Some(times(14.0)), None),
    };
    // A floor graph time of 12 µs: sparsek at 96% of it, met; its own speedup 3.33x misses 3.64x too.
    r.read_floor_graph = graph(12.0);
    r.evaluate(&case, &refs);
    assert_eq!(r.read_floor_fraction, Some(0.875));
    assert_eq!(r.read_floor.measured.gbps, Some(round_sig(r.bytes.total as f64 / 14.0 / 1e3, 6)));
    assert_eq!(r.graph_floor_fraction, Some(0.96));
    assert_eq!(
        r.goals.iter().map(|g| (g.met, g.floor_met)).collect::<Vec<_>>(),
        vec![(Some(true), Some(true)), (Some(false), Some(false))]
    );
    let header = Header { gpu: "Test GPU".into(), iters: 30, warmup: 5, ..Default::default() };
    let t = markdown(&header, &refs, std::slice::from_ref(&r));
    let row = t.lines().find(|l| l.starts_with("| 8192")).unwrap();
    assert!(row.contains("| 12.50 | 12.00 | 40.00 |"), "{row}");
    assert!(row.contains("| 16.00 | 14.00 | 48.00 |"), "{row}");
    assert!(row.contains("| 96.0% | 3.20x |"), "{row}");
    assert!(row.contains("of read floor ≥ 90% met; speedup ≥ 3.64x MISSED, read floor too"), "{row}");
    assert!(t.contains("1 met, 1 missed, 0 not measured (1 of 1 cases have targets). Missed by the read floor too"));
    assert!(t.contains("kernel measured this way): 1."), "{t}");
    assert!(t.contains("(measured 3.20x; the read floor misses it too)"), "{t}");

    // A floor of 10 µs meets the speedup (4x): sparsek's miss is its own.
    r.read_floor_graph = graph(10.0);
    r.evaluate(&case, &refs);
    assert_eq!(r.goals.iter().map(|g| g.floor_met).collect::<Vec<_>>(), vec![Some(true), Some(true)]);
    assert_eq!(r.goals[0].met, Some(false), "80% of the floor");
    let t = markdown(&header, &refs, std::slice::from_ref(&r));
    assert!(t.contains("(measured 3.20x; the read floor meets it)"), "{t}");
    assert!(t.contains("(measured 80.0%; the read floor meets it)"), "{t}");
    assert!(t.contains("kernel measured this way): 0."), "{t}");
    let v: serde_json::Value = serde_json::from_str(&to_json(&header, &refs, &[r], true).unwrap()).unwrap();
    assert_eq!(v["records"][0]["read_floor"]["time"]["median_us"], 14.0);
    assert_eq!(v["records"][0]["read_floor"]["ctas"], 800);
    assert_eq!(v["records"][0]["read_floor_graph"]["time"]["median_us"], 10.0);
    assert_eq!(v["records"][0]["goals"][0]["floor_met"], true);
    assert!(v["references"]["read"]["time"].is_null());

    // A failed sparsek check: no fraction, but the floor's verdicts stand (they do not use sparsek's times).
    let bad =
        with_graphs(record(&case, 3604, 16.0, 48.0, false, &refs), &case, &refs, (Some(10.0), Some(12.0), Some(40.0)));
    assert_eq!((bad.read_floor_fraction, bad.graph_floor_fraction), (None, None));
    assert_eq!(
        bad.goals.iter().map(|g| (g.met, g.floor_met)).collect::<Vec<_>>(),
        vec![(None, Some(true)), (None, Some(false))]
    );
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
    missing.sparsek_graph = graph(3.0);
    missing.evaluate(&small, &refs);
    // Every time of the large case: graph, kernel (queued), per event, programmatic.
    let mut full = record(&large, 3604, 12.0, 48.0, true, &refs);
    full.sparsek_queued = kernel(9.0);
    full.read_floor_queued = kernel(8.25);
    full.cublas_queued = kernel(41.5);
    full.sparsek_queued_programmatic = Some(kernel(7.5));
    full.sparsek_graph_programmatic = Some(Queued::failed("the graph's output differs"));
    full.read_floor.measured.time = Some(times(11.0));
    let full = with_graphs(full, &large, &refs, (Some(9.5), Some(9.0), Some(40.0)));
    assert_eq!(full.queued_launch_ratio, Some(6.0));
    let mut failed = record(&large, 3604, 12.0, 48.0, false, &refs);
    failed.sparsek_queued = full.sparsek_queued.clone();
    failed.evaluate(&large, &refs);
    assert_eq!(failed.queued_launch_ratio, None);
    let records = vec![full, missing];

    let t = markdown(&header, &refs, &records);
    let rows: Vec<&str> = t.lines().filter(|l| l.starts_with("| 8192") || l.starts_with("| 1536")).collect();
    assert_eq!(rows.len(), 2);
    let head = t.lines().find(|l| l.starts_with("| M×K")).unwrap();
    for label in [
        "| stored MB | sparsek graph µs | read floor graph µs | cuBLAS graph µs |",
        "| sparsek kernel µs | read floor kernel µs | cuBLAS kernel µs |",
        "| sparsek per event, idle stream µs | read floor per event, idle stream µs |",
        "| cuBLAS per event, idle stream µs |",
        "| stored GB/s (graph) | of read floor (graph) | speedup (graph) | programmatic µs (kernel / graph) |",
    ] {
        assert!(head.contains(label), "{head}");
    }
    let cols = head.matches('|').count();
    assert_eq!(t.lines().nth(t.lines().position(|l| l == head).unwrap() + 1).unwrap().matches('|').count(), cols);
    for row in &rows {
        assert_eq!(row.matches('|').count(), cols, "{row}");
    }
    assert!(
        // 29.5 MB stored in 9.5 µs: 3107.8 GB/s.
        rows[0].contains(
            "| 3604 | 29.5 | 9.50 | 9.00 | 40.00 | 9.00 | 8.25 | 41.50 | 12.00 | 11.00 | 48.00 | 3107.8 | 94.7% \
             | 4.21x | 7.50 / failed | of read floor ≥ 90% met; speedup ≥ 3.64x met |"
        ),
        "{}",
        rows[0]
    );
    assert!(rows[0].ends_with("| pass; graph failed: sparsek programmatic |"), "{}", rows[0]);
    assert_eq!(records[0].graph_failures(), vec![("sparsek programmatic", "the graph's output differs")]);
    assert!(records[1].graph_failures().is_empty());
    assert!(rows[1].contains("| 0.590 | 3.00 | - | - | - | - | - | 6.00 | - | - |"), "{}", rows[1]);
    assert!(rows[1].contains("| - | - | cublas-gemmex-f16-f32 n/a |"), "{}", rows[1]);
    assert!(t.contains("- Empty launch, kernel (queued): 1.50 µs per launch, median of 30 batches of 32"), "{t}");
    assert!(t.contains("- Empty launch, per event: 2.50 µs median of 30"), "{t}");
    assert!(
        t.contains(
            "Targets (issue 43, graph times; N <= 16 and at least 8 MB of stored blocks): 2 met, 0 missed, 0 not \
             measured (1 of 2 cases have targets)."
        ),
        "{t}"
    );
    assert!(t.contains("at least 4 copies of every operand"), "{t}");
    let line = progress_line(&records[0]);
    assert!(line.contains("graph µs sparsek 9.50, read floor 9.00, cuBLAS 40.00"), "{line}");
    assert!(line.contains("kernel µs sparsek 9.00, read floor 8.25, cuBLAS 41.50"), "{line}");
    assert!(line.contains("per event, idle stream µs sparsek 12.00, read floor 11.00, cuBLAS 48.00"), "{line}");

    let json = to_json(&header, &refs, &records, true).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["complete"], true);
    assert_eq!(v["header"]["gpu"], "Test GPU");
    assert_eq!(v["references"]["copy"]["gbps"], 3000.0);
    assert_eq!(v["references"]["queued_empty_launch"]["time"]["median_us"], 1.5);
    assert_eq!(v["references"]["empty_launch"]["time"]["median_us"], 2.5);
    let r0 = &v["records"][0];
    assert_eq!(r0["case"], "8192x16x8192 bs64 22% uniform");
    assert_eq!(r0["bytes"]["total"], BytesMoved::new(8192, 16, 8192, 64, 3604).total);
    assert_eq!(r0["bytes"]["a_values"], 29_523_968);
    // Per event.
    assert_eq!(r0["sparsek"]["name"], "sparsek-f16");
    assert_eq!(r0["sparsek"]["time"]["median_us"], 12.0);
    assert_eq!(r0["cublas"]["time"]["median_us"], 48.0);
    assert_eq!(r0["read_floor"]["time"]["median_us"], 11.0);
    assert_eq!(r0["speedup_vs_cublas"], 4.0);
    // Kernel.
    assert_eq!(r0["sparsek_queued"]["time"]["median_us"], 9.0);
    assert_eq!(r0["read_floor_queued"]["time"]["median_us"], 8.25);
    assert_eq!(r0["cublas_queued"]["time"]["median_us"], 41.5);
    assert_eq!(r0["queued_launch_ratio"], 6.0);
    assert_eq!(r0["sparsek_queued_programmatic"]["time"]["median_us"], 7.5);
    // Graph and the targets' figures.
    assert_eq!(r0["sparsek_graph"]["time"]["median_us"], 9.5);
    assert_eq!(r0["read_floor_graph"]["time"]["median_us"], 9.0);
    assert_eq!(r0["cublas_graph"]["time"]["median_us"], 40.0);
    assert_eq!(r0["sparsek_graph_programmatic"]["error"], "the graph's output differs");
    assert_eq!(r0["graph_floor_fraction"], round_sig(9.0 / 9.5, 6));
    assert_eq!(r0["graph_speedup_vs_cublas"], round_sig(40.0 / 9.5, 6));
    assert_eq!(r0["graph_stored_gbps"], round_sig(29_523_968.0 / 9.5 / 1e3, 6));
    assert_eq!(r0["goals"][0]["figure"], "graph_floor_fraction");
    assert_eq!(r0["goals"][0]["bound"], 0.9);
    assert_eq!(r0["goals"][1]["figure"], "graph_speedup_vs_cublas");
    assert_eq!(r0["goals"][1]["bound"], 3.63636);
    assert_eq!(r0["goals"][1]["met"], true);
    // Every goal's figure names a field of its record.
    for r in v["records"].as_array().unwrap() {
        for g in r["goals"].as_array().unwrap() {
            assert!(r.get(g["figure"].as_str().unwrap()).is_some(), "{g}");
        }
    }
    let r1 = &v["records"][1];
    assert!(r1["sparsek_queued_programmatic"].is_null());
    assert!(r1["cublas_graph"].is_null() && r1["read_floor_graph"].is_null());
    assert!(r1["cublas_queued"]["time"].is_null());
    assert!(r1["speedup_vs_cublas"].is_null() && r1["graph_speedup_vs_cublas"].is_null());
    assert_eq!(r1["launch_ratio"], 2.4);
    assert_eq!(r1["goals"].as_array().unwrap().len(), 0);
}

/// The file keeps the layout of the committed ones (docs/bench/*-decode-*.json): the top-level keys, and each
/// contender's keys with its figures in place; issue 43's fields follow the older ones.
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
        "cublas_queued",
        "read_floor_graph",
        "cublas_graph",
        "graph_stored_gbps",
        "graph_floor_fraction",
        "graph_speedup_vs_cublas",
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
    let record = &record[record.find("\"cublas_queued\"").unwrap()..];
    assert_eq!(keys_from(record, "batch"), ["batch", "time", "hold_us", "error"]);
}

#[test]
fn at_least_four_sets() {
    let l2 = 50 << 20;
    // A set larger than 2x L2 (16384^2 dense A: 537 MB) is still rotated over 4 copies; small ones over as many
    // as span 2x L2.
    assert_eq!(decode_depth(537 << 20, l2), MIN_SETS);
    assert_eq!(decode_depth(30 << 20, l2), MIN_SETS);
    assert_eq!(decode_depth(10 << 20, l2), 10);
    assert_eq!(decode_depth(1 << 20, l2), 100);
}

/// On a GPU: two cases run end to end through [`run`] (the quick grid's 8192 x 16 x 8192 bs 64 22%, which has
/// targets, and 1536 x 1 x 384 bs 64 50%, which has none): every contender is timed three ways (graph, kernel, per
/// event) over at least [`MIN_SETS`] sets, sparsek's and cuBLAS's graph outputs pass the oracle, the targets are
/// judged. Skips without a GPU (`SPARSEK_REQUIRE_GPU=1` makes that a failure).
#[test]
fn gpu_every_contender_timed_three_ways() {
    use std::io::Write as _;
    let gpu = match Gpu::new(0) {
        Ok(g) => g,
        Err(e) => {
            assert!(
                std::env::var("SPARSEK_REQUIRE_GPU").map_or(true, |v| v != "1"),
                "SPARSEK_REQUIRE_GPU=1 but no usable GPU: {e}"
            );
            let _ = writeln!(
                std::io::stderr(),
                "SKIP gpu_every_contender_timed_three_ways: no GPU ({e}); set SPARSEK_REQUIRE_GPU=1 to make this a \
                 failure"
            );
            return;
        }
    };
    let out_dir = std::env::temp_dir().join(format!("sparsek-decode-gpu-test-{}", std::process::id()));
    let large = Case::synthetic(8192, 16, 8192, 64, 0.22, Pattern::Uniform);
    let small = Case::synthetic(1536, 1, 384, 64, 0.5, Pattern::Uniform);
    let cfg = DecodeConfig {
        cases: vec![large, small],
        warmup: 2,
        iters: MIN_ITERS,
        check_rows: 16,
        seed: 1,
        out_dir: out_dir.clone(),
        command: "decode::tests::gpu_every_contender_timed_three_ways".into(),
    };
    let summary = run(&gpu, None, &cfg).unwrap();
    assert!(summary.all_passed);
    assert!(summary.references.read.median_us().is_some(), "{:?}", summary.references.read);
    for r in &summary.records {
        let case = &r.facts.case;
        assert!(r.status.error.is_none(), "{case}: {:?}", r.status.error);
        assert!(r.contenders.sparsek.passed() && r.contenders.cublas.passed(), "{case}: {r:?}");
        assert!(r.graph_failures().is_empty(), "{case}: {:?}", r.graph_failures());
        assert!(r.contenders.sparsek.sets >= MIN_SETS && r.contenders.cublas.sets >= MIN_SETS, "{case}");
        assert!(r.read_floor.sets >= MIN_SETS && r.same_size_copy.sets >= MIN_SETS, "{case}");
        let graphs = [r.sparsek_graph_us(), r.read_floor_graph_us(), r.cublas_graph_us()];
        assert!(graphs.iter().all(|t| t.is_some_and(|t| t > 0.0)), "{case}: graph {graphs:?}");
        let kernels = [&r.sparsek_queued, &r.read_floor_queued, &r.cublas_queued].map(Queued::median_us);
        assert!(kernels.iter().all(|t| t.is_some_and(|t| t > 0.0)), "{case}: kernel {kernels:?}");
        let events = [r.contenders.sparsek.trusted_us(), r.read_floor.median_us(), r.contenders.cublas.trusted_us()];
        assert!(events.iter().all(|t| t.is_some_and(|t| t > 0.0)), "{case}: per event {events:?}");
        assert!(r.graph_floor_fraction.is_some() && r.graph_speedup_vs_cublas.is_some(), "{case}");
    }
    let [l, s] = &summary.records[..] else { panic!("two records") };
    assert_eq!(
        l.goals.iter().map(|g| g.figure).collect::<Vec<_>>(),
        [Figure::GraphFloorFraction, Figure::GraphSpeedupVsCublas]
    );
    assert!(l.goals.iter().all(|g| g.met.is_some() && g.floor_met.is_some()), "{:?}", l.goals);
    assert!(s.goals.is_empty());
    let md = std::fs::read_to_string(out_dir.join("decode.md")).unwrap();
    assert!(md.contains("| sparsek graph µs | read floor graph µs | cuBLAS graph µs |"), "{md}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("decode.json")).unwrap()).unwrap();
    assert_eq!(json["complete"], true);
    assert!(json["records"][0]["cublas_graph"]["time"]["median_us"].as_f64().is_some_and(|t| t > 0.0));
    std::fs::remove_dir_all(&out_dir).ok();
}
