//! docs/KERNELS.md against the planner's rules table (`sparsek::plan::RULES`): every threshold the page states is
//! the table's value, so a rule changed in host/src/plan/rules.rs without the page (or the page without the rule)
//! fails here. No GPU.

use sparsek::plan::RULES;

fn rule(name: &str) -> u64 {
    RULES.iter().find(|r| r.name == name).unwrap_or_else(|| panic!("{name} is not in plan::RULES")).value
}

#[test]
fn the_kernels_page_states_the_rules_table_values() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/KERNELS.md");
    let page = std::fs::read_to_string(&path).unwrap();
    // Sentences wrap at 120 columns: compare with line breaks as spaces.
    let page = page.split_whitespace().collect::<Vec<_>>().join(" ");
    let phrases = [
        format!("Products of at most {} columns", rule("DECODE_MAX_N")),
        format!("a row holds {} KiB of A or more", rule("DECODE_MAX_ROW_BYTES") >> 10),
        format!("Up to {} columns the narrow", rule("NARROW_MAX_N")),
        format!("the tile of 64 only on at least {} blocks per SM", rule("MID64_BS128_MIN_BLOCKS_PER_SM")),
        format!("the tile of 32 only on at least {} block rows per SM", rule("MID_SMALL_BS_MIN_ROWS_PER_SM")),
        format!("a workspace of {} MiB", rule("SPLIT_PARTIALS_BYTES") >> 20),
        format!("at least {} k-tiles of 64 rows per CTA", rule("FLAT_AUTO_MIN_K_TILES_PER_CTA")),
        format!("by at least {} k-tiles", rule("FLAT_MID_AUTO_MARGIN_K_TILES")),
        format!("rows of at most {} blocks on average", rule("SHORT_ROW_MAX_K_TILES")),
    ];
    for phrase in &phrases {
        assert!(page.contains(phrase.as_str()), "docs/KERNELS.md does not say \"{phrase}\" (plan::RULES)");
    }
    // Small factors, in words.
    let said = |name: &str, words: &[(u64, &str)], template: &str| {
        let v = rule(name);
        let w = words.iter().find(|w| w.0 == v).map_or_else(|| v.to_string(), |w| w.1.to_string());
        let phrase = template.replace("{}", &w);
        assert!(page.contains(&phrase), "docs/KERNELS.md does not say \"{phrase}\" ({name} = {v})");
    };
    said("FLAT_AUTO_CTAS_PER_SM", &[(2, "two")], "CTA of {} per SM");
    said("ROW_SKEW_FACTOR", &[(4, "four")], "over {} times the mean");
    said("A_WINDOW_MIN_L2_FRACTION", &[(8, "an eighth")], "at least {} of L2");
    said("HOPPER_SPLIT_MIN_SHARES", &[(2, "twice")], "more than {} an equal share");
}
