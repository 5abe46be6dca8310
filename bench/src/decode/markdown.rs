//! The decode grid's rendering: the table's cells, the reference lines, `decode.md` and the progress line.

use super::*;

/// `2 x 1024 MiB (read + written) in 812.3 µs median of 30: 2643.9 GB/s`, or why it was not measured.
pub(super) fn copy_text(c: &CopyBandwidth) -> String {
    match (&c.measured.time, c.measured.gbps, &c.measured.error) {
        (Some(t), Some(g), None) => {
            let mib = c.bytes as f64 / f64::from(1 << 20);
            format!("2 x {mib:.0} MiB (read + written) in {:.1} µs median of {}: {g:.1} GB/s", t.median_us, t.samples)
        }
        (_, _, Some(e)) => format!("not measured ({e})"),
        _ => "not measured".into(),
    }
}

/// `1024 MiB read in 340.2 µs median of 30: 3156.1 GB/s, 105.1% of the copy's`, or why it was not measured.
pub(super) fn read_text(r: &ReadFloor, copy: &CopyBandwidth) -> String {
    match (&r.measured.time, r.measured.gbps, &r.measured.error) {
        (Some(t), Some(g), None) => {
            let mib = r.read_bytes as f64 / f64::from(1 << 20);
            let of_copy = ratio(Some(g), copy.measured.gbps)
                .map_or_else(String::new, |f| format!(", {:.1}% of the copy's", 100.0 * f));
            format!(
                "{mib:.0} MiB read in {:.1} µs median of {}: {g:.1} GB/s{of_copy} ({}: {} CTAs of {} threads, each \
                 reading {} KiB with {}-byte loads marked evict-first in L2)",
                t.median_us,
                t.samples,
                floor::KERNEL,
                r.ctas,
                floor::THREADS,
                floor::CTA_BYTES / 1024,
                16
            )
        }
        (_, _, Some(e)) => format!("not measured ({e})"),
        _ => "not measured".into(),
    }
}

/// `2.41 µs median of 30 (sparsek_empty: ...)`, or why it was not measured.
pub(super) fn empty_text(e: &EmptyLaunch) -> String {
    match (&e.time, &e.error) {
        (Some(t), None) => format!("{:.2} µs median of {} ({})", t.median_us, t.samples, e.kernel),
        (_, Some(err)) => format!("not measured ({err})"),
        _ => "not measured".into(),
    }
}

/// `1.84 µs per launch, median of 5 batches of 32 (behind a 2000 µs hold)`, or why it was not measured.
pub(super) fn queued_text(q: &Queued) -> String {
    match (&q.time, &q.error) {
        (Some(t), None) => format!(
            "{:.2} µs per launch, median of {} batches of {} (behind a {:.0} µs hold)",
            t.median_us,
            t.samples,
            q.batch,
            q.hold_us.unwrap_or(0.0)
        ),
        (_, Some(err)) => format!("not measured ({err})"),
        _ => "not measured".into(),
    }
}

/// Microseconds with precision that suits their size, `!` appended when the output failed its check.
pub(super) fn us_cell(c: &ContenderResult) -> String {
    let Some(t) = c.time.as_ref().map(|t| t.median_us) else { return "-".into() };
    let s = if t < 100.0 { format!("{t:.2}") } else { format!("{t:.1}") };
    if c.passed() { s } else { format!("{s}!") }
}

/// sparsek's queued time per launch (`!` when its output failed its check), or `-`.
pub(super) fn queued_cell(r: &DecodeRecord) -> String {
    let Some(t) = r.sparsek_queued.median_us() else { return "-".into() };
    if r.contenders.sparsek.passed() { format!("{t:.2}") } else { format!("{t:.2}!") }
}

/// sparsek's queued time per launch with programmatic launches, `failed` when it could not be measured or its
/// output differed from the plain launches', or `-` when not measured.
pub(super) fn queued_programmatic_cell(r: &DecodeRecord) -> String {
    checked_cell(r, &r.sparsek_queued_programmatic)
}

/// A time per launch checked against the plain launches' output (`q`): `failed` when it could not be measured or
/// its output differed, `-` when not measured, `!` appended when the plain launches failed their own check.
pub(super) fn checked_cell(r: &DecodeRecord, q: &Option<Queued>) -> String {
    match q {
        None => "-".into(),
        Some(q) => match (q.median_us(), &q.error) {
            (Some(t), None) if r.contenders.sparsek.passed() => format!("{t:.2}"),
            (Some(t), None) => format!("{t:.2}!"),
            _ => "failed".into(),
        },
    }
}

pub(super) fn opt_cell(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "-".into(), f)
}

/// Megabytes (1e6 bytes).
pub(super) fn mb_cell(bytes: u64) -> String {
    let mb = bytes as f64 / 1e6;
    if mb < 10.0 { format!("{mb:.3}") } else { format!("{mb:.1}") }
}

/// The targets column: each target with its verdict (`met`, `MISSED`, or `n/a` when not measured).
pub(super) fn goals_cell(r: &DecodeRecord) -> String {
    if r.goals.is_empty() {
        return "-".into();
    }
    let verdict = |g: &Goal| match (g.met, g.floor_met) {
        (Some(true), _) => "met",
        (Some(false), Some(false)) => "MISSED, read floor too",
        (Some(false), _) => "MISSED",
        (None, _) => "n/a",
    };
    r.goals.iter().map(|g| format!("{} {}", g.figure.target_text(g.bound), verdict(g))).collect::<Vec<_>>().join("; ")
}

/// The checks column: "pass", or what failed or could not run.
pub(super) fn checks_cell(r: &DecodeRecord) -> String {
    r.status.checks_cell(r.contenders.all())
}

/// The targets met, missed and not measured over all records, and a line per missed one.
pub(super) fn goals_summary(records: &[DecodeRecord]) -> String {
    let goals = || records.iter().flat_map(|r| r.goals.iter().map(move |g| (r, g)));
    let count = |met: Option<bool>| goals().filter(|(_, g)| g.met == met).count();
    let beyond = goals().filter(|(_, g)| g.met == Some(false) && g.floor_met == Some(false)).count();
    let mut s = format!(
        "Targets (issue 12): {} met, {} missed, {} not measured ({} of {} cases have targets). Missed by the read \
         floor too (out of reach of any kernel measured this way): {beyond}.\n",
        count(Some(true)),
        count(Some(false)),
        count(None),
        records.iter().filter(|r| !r.goals.is_empty()).count(),
        records.len()
    );
    for (r, g) in goals().filter(|(_, g)| g.met == Some(false)) {
        let value = r.figure(g.figure).map_or_else(|| "-".into(), |v| g.figure.value_text(v));
        let floor = match g.floor_met {
            Some(true) => "; the read floor meets it",
            Some(false) => "; the read floor misses it too",
            None => "; the read floor not measured",
        };
        let _ = writeln!(s, "- missed: {}: {} (measured {value}{floor})", r.facts.case, g.figure.target_text(g.bound));
    }
    s
}

/// The read floor's median (or `-`).
pub(super) fn floor_cell(r: &DecodeRecord) -> String {
    opt_cell(r.read_floor.median_us(), |t| format!("{t:.2}"))
}

/// The Markdown report: the run's facts, the method and the references, one row per case, and the targets met
/// and missed.
pub fn markdown(header: &Header, references: &References, records: &[DecodeRecord]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}", crate::report::header_line(header));
    let _ = writeln!(
        s,
        "Median of {} launches per contender after {} warm-up, interleaved launch by launch, each on the next of \
         its rotated input sets (together at least 2x L2). sparsek: `Gpu::spmm`, f16 A (BSR) and B row-major, \
         f32 C; cuBLAS: {} (`cublasGemmEx`, dense f16 A, f32 C). MB moved: A's values and u32 indices, B read, \
         C written (1e6 bytes); GB/s: MB moved / sparsek's time; of copy: that over the copy bandwidth; of \
         same-size copy: that over the bandwidth of a copy moving the same bytes, timed in the same loop; read floor \
         µs: a kernel reading the bytes sparsek must read and writing those it must write, and nothing else \
         (`sparsek_read_floor`, timed in the same loop), and of read floor: its time over sparsek's; speedup: \
         cuBLAS time / sparsek time; × empty: sparsek time / the empty launch's; queued µs and × queued empty: \
         sparsek's time per launch with {} launches queued back to back behind a kernel holding the stream (the \
         GPU's own time, without the host's), and its ratio to the empty launch queued alike; read floor queued: the \
         read floor queued alike; queued, programmatic: \
         the same with programmatic dependent launch (`Policy::programmatic`: each launch may start under \
         the one before it; its output must have the plain launches' bits; `-` where the GPU has none); graph µs: \
         sparsek's time per launch replayed from a CUDA graph of {} captured launches (global mode, as \
         `torch.cuda.graph`), its output checked against the oracle; graph, programmatic: the same \
         with programmatic launches. `!` marks a time whose output failed its check; figures come only from \
         checked times.",
        header.iters,
        header.warmup,
        header.cublas,
        queued::BATCH,
        queued::BATCH
    );
    s.push('\n');
    let _ = writeln!(s, "- Copy bandwidth (`cuMemcpyDtoDAsync`): {}.", copy_text(&references.copy));
    let _ = writeln!(s, "- Read bandwidth: {}.", read_text(&references.read, &references.copy));
    let _ = writeln!(s, "- Empty launch: {}.", empty_text(&references.empty_launch));
    let _ = writeln!(s, "- Empty launch, queued: {}.", queued_text(&references.queued_empty_launch));
    s.push('\n');
    s.push_str(
        "| M×K | N | bs | density | nnzb | MB moved | sparsek µs | GB/s | of copy | of same-size copy | read floor µs \
         | of read floor | cuBLAS µs \
         | speedup | × empty | queued µs | × queued empty | read floor queued | queued, programmatic | graph µs \
         | graph, programmatic \
         | targets | SM MHz | checks |\n",
    );
    s.push_str("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|---|\n");
    for r in records {
        let _ = writeln!(
            s,
            "| {}×{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.facts.m,
            r.facts.k,
            r.facts.n,
            r.facts.bs,
            percent(r.facts.density),
            r.facts.nnzb,
            mb_cell(r.bytes.total),
            us_cell(&r.contenders.sparsek),
            opt_cell(r.achieved_gbps, |v| format!("{v:.1}")),
            opt_cell(r.copy_fraction, |v| Figure::CopyFraction.value_text(v)),
            opt_cell(r.same_size_copy_fraction, |v| Figure::CopyFraction.value_text(v)),
            floor_cell(r),
            opt_cell(r.read_floor_fraction, |v| Figure::CopyFraction.value_text(v)),
            us_cell(&r.contenders.cublas),
            opt_cell(r.speedup_vs_cublas, |v| Figure::SpeedupVsCublas.value_text(v)),
            opt_cell(r.launch_ratio, |v| Figure::LaunchRatio.value_text(v)),
            queued_cell(r),
            opt_cell(r.queued_launch_ratio, |v| Figure::LaunchRatio.value_text(v)),
            opt_cell(r.read_floor_queued.median_us(), |t| format!("{t:.2}")),
            queued_programmatic_cell(r),
            checked_cell(r, &r.sparsek_graph),
            checked_cell(r, &r.sparsek_graph_programmatic),
            goals_cell(r),
            r.status.clock_cell(),
            checks_cell(r),
        );
    }
    s.push('\n');
    s.push_str(&goals_summary(records));
    s
}

/// `8192x16x8192 bs64 22% uniform: sparsek 12.34 µs (2650.1 GB/s, 85.2% of copy, 97.0% of a same-size copy),
/// cuBLAS 45.60 µs (3.70x), 5.12x empty launch; copy ≥ 80% met; ...; checks pass`.
pub(super) fn progress_line(r: &DecodeRecord) -> String {
    let mut s = format!("{}: ", r.facts.case);
    if let Some(e) = &r.status.error {
        s.push_str(&format!("ERROR {e}"));
        return s;
    }
    let text = |f: Figure| opt_cell(r.figure(f), |v| f.value_text(v));
    s.push_str(&format!(
        "sparsek {} µs ({} GB/s, {} of copy, {} of a same-size copy; read floor {} µs), cuBLAS {} µs ({}), {} empty launch; \
         queued {} µs ({} the queued empty launch; programmatic {} µs; read floor {} µs); graph {} µs \
         (programmatic {} µs); \
         targets: {}; checks {}",
        us_cell(&r.contenders.sparsek),
        opt_cell(r.achieved_gbps, |v| format!("{v:.1}")),
        text(Figure::CopyFraction),
        opt_cell(r.same_size_copy_fraction, |v| Figure::CopyFraction.value_text(v)),
        floor_cell(r),
        us_cell(&r.contenders.cublas),
        text(Figure::SpeedupVsCublas),
        text(Figure::LaunchRatio),
        queued_cell(r),
        opt_cell(r.queued_launch_ratio, |v| Figure::LaunchRatio.value_text(v)),
        queued_programmatic_cell(r),
        opt_cell(r.read_floor_queued.median_us(), |t| format!("{t:.2}")),
        checked_cell(r, &r.sparsek_graph),
        checked_cell(r, &r.sparsek_graph_programmatic),
        goals_cell(r),
        checks_cell(r),
    ));
    s.push_str(&r.status.clock_note());
    s
}
