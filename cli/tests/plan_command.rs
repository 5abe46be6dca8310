//! `sparsek plan`: the plan of a product without running it (here for a preset GPU, which needs none) and the
//! planner's rules table.

mod common;

#[test]
fn a_preset_gpus_plan_is_printed_without_a_gpu() {
    // 8192^2 bs 128 22% at 16 columns: 64 block rows on 132 SMs, split rows (docs/perf-notes.md "Step 4").
    let (ok, text) = common::sparsek([
        "plan",
        "--preset",
        "h100",
        "--m",
        "8192",
        "--k",
        "8192",
        "--n",
        "16",
        "--bs",
        "128",
        "--density",
        "0.22",
    ]);
    assert!(ok, "{text}");
    let plan = text.lines().find(|l| l.starts_with("plan ")).unwrap_or_else(|| panic!("no plan line:\n{text}"));
    assert!(plan.contains("sparsek_bsr_bs128_f16_brow_f32_n16 (narrow, heuristic); rows split"), "{plan}");
    // Many columns: the sm_90a kernel on the tile counter, C stored by TMA (beta 0) or not (beta 1).
    let wide = ["plan", "--preset", "h200", "--m", "8192", "--k", "8192", "--n", "8192", "--bs", "128"];
    let (ok, text) = common::sparsek(wide);
    assert!(
        ok && text.contains("sparsek_sm90_bs128_f16_brow_f32 (sm90a") && text.contains("C stored by TMA"),
        "{text}"
    );
    let (ok, text) = common::sparsek(wide.iter().chain(&["--beta", "1"]));
    assert!(ok && !text.contains("C stored by TMA"), "{text}");
    // A block size without kernels: an error, not a plan.
    let (ok, text) = common::sparsek(["plan", "--preset", "h100", "--m", "480", "--k", "480", "--bs", "48"]);
    assert!(!ok && text.contains("error"), "{text}");
}

#[test]
fn the_rules_table_lists_every_rule_with_its_measurement() {
    let (ok, text) = common::sparsek(["plan", "--rules"]);
    assert!(ok, "{text}");
    for name in ["SPLIT_PART_BYTES", "FLAT_AUTO_CTAS_PER_SM", "NARROW_MAX_N", "A_WINDOW_MIN_L2_FRACTION"] {
        assert!(text.lines().any(|l| l.starts_with(name)), "{name} missing:\n{text}");
    }
    assert!(text.contains("docs/perf-notes.md"), "{text}");
}
