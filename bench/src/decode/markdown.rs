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

/// A kernel (queued) time per launch: `{:.2}`, `!` appended when the contender's plain output failed its check
/// (`passed` false), `failed` when it could not be measured, `-` when not measured.
pub(super) fn kernel_cell(q: &Queued, passed: bool) -> String {
    match (q.median_us(), &q.error) {
        (Some(t), None) if passed => format!("{t:.2}"),
        (Some(t), None) => format!("{t:.2}!"),
        (_, Some(_)) => "failed".into(),
        _ => "-".into(),
    }
}

/// A graph time per launch, or a time checked against the plain launches' output: `{:.2}`, `failed` when it could
/// not be measured or its output failed its check, `-` when not measured, `!` appended when the contender's plain
/// output failed its own check (`passed` false).
pub(super) fn graph_cell(q: &Option<Queued>, passed: bool) -> String {
    match q {
        None => "-".into(),
        Some(q) => match (q.median_us(), &q.error) {
            (Some(t), None) if passed => format!("{t:.2}"),
            (Some(t), None) => format!("{t:.2}!"),
            _ => "failed".into(),
        },
    }
}

/// sparsek with programmatic launches, `kernel / graph` µs (each as [`graph_cell`]), or `-` when not measured.
pub(super) fn programmatic_cell(r: &DecodeRecord) -> String {
    if r.sparsek_queued_programmatic.is_none() && r.sparsek_graph_programmatic.is_none() {
        return "-".into();
    }
    let passed = r.contenders.sparsek.passed();
    format!(
        "{} / {}",
        graph_cell(&r.sparsek_queued_programmatic, passed),
        graph_cell(&r.sparsek_graph_programmatic, passed)
    )
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
/// The checks column: "pass", or what failed or could not run; then each graph that failed (not measured, or its
/// output failed its check), as `; graph failed: sparsek, cuBLAS`.
pub(super) fn checks_cell(r: &DecodeRecord) -> String {
    let mut s = r.status.checks_cell(r.contenders.all());
    let failed: Vec<&str> = r.graph_failures().into_iter().map(|(name, _)| name).collect();
    if !failed.is_empty() {
        let _ = write!(s, "; graph failed: {}", failed.join(", "));
    }
    s
}

/// The targets met, missed and not measured over all records, and a line per missed one.
pub(super) fn goals_summary(records: &[DecodeRecord]) -> String {
    let goals = || records.iter().flat_map(|r| r.goals.iter().map(move |g| (r, g)));
    let count = |met: Option<bool>| goals().filter(|(_, g)| g.met == met).count();
    let beyond = goals().filter(|(_, g)| g.met == Some(false) && g.floor_met == Some(false)).count();
    let mut s = format!(
        "Targets (issue 43, graph times; N <= {TARGET_MAX_N} and at least {} MB of stored blocks): {} met, {} \
         missed, {} not measured ({} of {} cases have targets). Missed by the read floor too (out of reach of any \
         kernel measured this way): {beyond}.\n",
        TARGET_MIN_STORED_BYTES / 1_000_000,
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

/// The read floor's median per event (or `-`).
pub(super) fn floor_cell(r: &DecodeRecord) -> String {
    opt_cell(r.read_floor.median_us(), |t| format!("{t:.2}"))
}

/// The three contenders' graph cells: sparsek, the read floor, cuBLAS.
fn graph_cells(r: &DecodeRecord) -> [String; 3] {
    [
        graph_cell(&r.sparsek_graph, r.contenders.sparsek.passed()),
        graph_cell(&r.read_floor_graph, true),
        graph_cell(&r.cublas_graph, r.contenders.cublas.passed()),
    ]
}

/// The three contenders' kernel (queued) cells: sparsek, the read floor, cuBLAS.
fn kernel_cells(r: &DecodeRecord) -> [String; 3] {
    [
        kernel_cell(&r.sparsek_queued, r.contenders.sparsek.passed()),
        kernel_cell(&r.read_floor_queued, true),
        kernel_cell(&r.cublas_queued, r.contenders.cublas.passed()),
    ]
}

/// The three contenders' per-event (idle stream) cells: sparsek, the read floor, cuBLAS.
fn event_cells(r: &DecodeRecord) -> [String; 3] {
    [us_cell(&r.contenders.sparsek), floor_cell(r), us_cell(&r.contenders.cublas)]
}

/// The method, as `decode.md` states it above the table.
fn method_text(header: &Header) -> String {
    format!(
        "Three contenders per case: sparsek (`Gpu::spmm`, f16 A (BSR) and B row-major, f32 C), the read floor (a \
         kernel reading the bytes sparsek must read and writing those it must write, and nothing else: \
         `sparsek_read_floor`) and cuBLAS ({}: `cublasGemmEx`, dense f16 A, f32 C), each over its own input sets \
         rotated launch by launch (at least {MIN_SETS} copies of every operand, together at least 2x L2), each \
         timed three ways, all per launch. **graph** (the targets' time): {} launches captured once into a CUDA \
         graph (global mode, as `torch.cuda.graph`) over the rotated sets in turn, the graph replayed once \
         untimed, then {} replays each between a pair of events: the median replay's time / {}; sparsek's and \
         cuBLAS's outputs checked against the oracle after the replays. **kernel**: {} launches queued back to \
         back behind a kernel holding the stream while the host queues them, the batch between a pair of events: \
         the median time of {} batches / {}, the GPU's own time per launch without host gaps. **per event, idle \
         stream**: each launch between its own pair of events, the contenders (and a copy of the same bytes) \
         interleaved launch by launch, median of {} after {} warm-up; when a launch is shorter than the host's \
         time to queue the next, this includes the host's queuing. stored MB: A's stored blocks, `nnzb * bs^2 * \
         2` (1e6 bytes); stored GB/s (graph): that over sparsek's graph time; of read floor (graph): the read \
         floor's graph time / sparsek's, i.e. sparsek's rate on the stored bytes over the read floor's on the \
         same bytes; speedup (graph): cuBLAS's graph time / sparsek's; programmatic: sparsek's kernel / graph \
         time with programmatic dependent launch (`Policy::programmatic`; its kernel output must have the plain \
         launches' bits; `-` where not measured). Targets (issue 43; they replace issue 12's): for N <= \
         {TARGET_MAX_N} and at least {} MB of stored blocks, of read floor (graph) ≥ {} and speedup (graph) ≥ \
         0.8 / density; \"read floor too\" marks a target that the read floor's own graph time misses. `!` marks \
         a time whose contender's output failed its check, `failed` a time not measured or whose own output \
         failed; figures come only from checked times. The per-event figures of issue 12 (of the copy, of a \
         same-size copy, × the empty launch) are in `decode.json`.",
        header.cublas,
        queued::BATCH,
        queued::REPS,
        queued::BATCH,
        queued::BATCH,
        queued::REPS,
        queued::BATCH,
        header.iters,
        header.warmup,
        TARGET_MIN_STORED_BYTES / 1_000_000,
        percent(FLOOR_FRACTION_MIN),
    )
}

/// The Markdown report: the run's facts, the method and the references, one row per case, and the targets met
/// and missed.
pub fn markdown(header: &Header, references: &References, records: &[DecodeRecord]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}", crate::report::header_line(header));
    let _ = writeln!(s, "{}", method_text(header));
    s.push('\n');
    let _ = writeln!(s, "- Copy bandwidth (`cuMemcpyDtoDAsync`): {}.", copy_text(&references.copy));
    let _ = writeln!(s, "- Read bandwidth: {}.", read_text(&references.read, &references.copy));
    let _ = writeln!(s, "- Empty launch, per event: {}.", empty_text(&references.empty_launch));
    let _ = writeln!(s, "- Empty launch, kernel (queued): {}.", queued_text(&references.queued_empty_launch));
    s.push('\n');
    s.push_str(
        "| M×K | N | bs | density | nnzb | stored MB \
         | sparsek graph µs | read floor graph µs | cuBLAS graph µs \
         | sparsek kernel µs | read floor kernel µs | cuBLAS kernel µs \
         | sparsek per event, idle stream µs | read floor per event, idle stream µs \
         | cuBLAS per event, idle stream µs \
         | stored GB/s (graph) | of read floor (graph) | speedup (graph) | programmatic µs (kernel / graph) \
         | targets | SM MHz | checks |\n",
    );
    s.push_str("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|---|\n");
    for r in records {
        let [sg, fg, cg] = graph_cells(r);
        let [sk, fk, ck] = kernel_cells(r);
        let [se, fe, ce] = event_cells(r);
        let _ = writeln!(
            s,
            "| {}×{} | {} | {} | {} | {} | {} | {sg} | {fg} | {cg} | {sk} | {fk} | {ck} | {se} | {fe} | {ce} | {} | {} \
             | {} | {} | {} | {} | {} |",
            r.facts.m,
            r.facts.k,
            r.facts.n,
            r.facts.bs,
            percent(r.facts.density),
            r.facts.nnzb,
            mb_cell(r.bytes.a_values),
            opt_cell(r.graph_stored_gbps, |v| format!("{v:.1}")),
            opt_cell(r.graph_floor_fraction, |v| Figure::GraphFloorFraction.value_text(v)),
            opt_cell(r.graph_speedup_vs_cublas, |v| Figure::GraphSpeedupVsCublas.value_text(v)),
            programmatic_cell(r),
            goals_cell(r),
            r.status.clock_cell(),
            checks_cell(r),
        );
    }
    s.push('\n');
    s.push_str(&goals_summary(records));
    s
}

/// `8192x16x8192 bs64 22% uniform: graph µs sparsek 9.80, read floor 9.10, cuBLAS 40.10 (of read floor 92.9%,
/// speedup 4.09x); kernel µs ...; per event, idle stream µs ...; targets: ...; checks pass`.
pub(super) fn progress_line(r: &DecodeRecord) -> String {
    let mut s = format!("{}: ", r.facts.case);
    if let Some(e) = &r.status.error {
        s.push_str(&format!("ERROR {e}"));
        return s;
    }
    let text = |f: Figure| opt_cell(r.figure(f), |v| f.value_text(v));
    let [sg, fg, cg] = graph_cells(r);
    let [sk, fk, ck] = kernel_cells(r);
    let [se, fe, ce] = event_cells(r);
    s.push_str(&format!(
        "graph µs sparsek {sg}, read floor {fg}, cuBLAS {cg} ({} GB/s of stored blocks, of read floor {}, speedup \
         {}); kernel µs sparsek {sk}, read floor {fk}, cuBLAS {ck}; per event, idle stream µs sparsek {se}, read \
         floor {fe}, cuBLAS {ce} ({} of copy, {} of a same-size copy, {} empty launch); programmatic µs {}; \
         targets: {}; checks {}",
        opt_cell(r.graph_stored_gbps, |v| format!("{v:.1}")),
        text(Figure::GraphFloorFraction),
        text(Figure::GraphSpeedupVsCublas),
        opt_cell(r.copy_fraction, |v| format!("{:.1}%", 100.0 * v)),
        opt_cell(r.same_size_copy_fraction, |v| format!("{:.1}%", 100.0 * v)),
        opt_cell(r.launch_ratio, |v| format!("{v:.2}x")),
        programmatic_cell(r),
        goals_cell(r),
        checks_cell(r),
    ));
    s.push_str(&r.status.clock_note());
    s
}
