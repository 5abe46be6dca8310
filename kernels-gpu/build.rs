//! Generates the kernels' entry points from the one variant table, `sparsek_layout::VARIANTS`: for the module this
//! build makes (the product module; with feature `tune-kernels` the tuning module; with `sm90` the sm_90a module;
//! with `test-kernels` none), one line per variant, `kernel!(<decomposition>, name, types...)` (lib.rs), into
//! `$OUT_DIR/<template>_entries.rs` of the template that implements the row's decomposition, which the template's
//! file includes. No list of entry points is written by hand: a row of the table is a kernel, with the table's
//! configuration and decomposition (`variant_config!` checks them again).

use std::fmt::Write as _;

use sparsek_layout::{Decomposition, InType, Layout, Module, Op, OutType, VARIANTS};

fn main() {
    let feature = |f: &str| std::env::var_os(format!("CARGO_FEATURE_{f}")).is_some();
    let module = if feature("TEST_KERNELS") {
        None
    } else if feature("TUNE_KERNELS") {
        Some(Module::Tuning)
    } else if feature("SM90") {
        Some(Module::Hopper)
    } else {
        Some(Module::Product)
    };
    let mut files = [
        ("bsr", String::new()),
        ("decode", String::new()),
        ("flat", String::new()),
        ("hopper", String::new()),
        ("sddmm", String::new()),
    ];
    for v in VARIANTS.iter().filter(|v| Some(v.module) == module) {
        // The row's decomposition names the template that implements it (and its file includes the line); the
        // Hopper module's rows are all the sm_90a template's.
        let template = match v.decomposition {
            _ if v.module == Module::Hopper => "hopper",
            Decomposition::HopperTiles => "hopper",
            Decomposition::DecodeSlices => "decode",
            Decomposition::FlatList => "flat",
            Decomposition::WholeRows | Decomposition::SplitRows => "bsr",
            Decomposition::StoredBlocks => "sddmm",
        };
        let (input, in_type) = match v.input {
            InType::F16 => ("crate::epilogue::F16In", "crate::layout::InType::F16"),
            InType::Bf16 => ("crate::epilogue::Bf16In", "crate::layout::InType::Bf16"),
        };
        let (b_layout, b_col) = match v.b_layout {
            Layout::RowMajor => ("crate::layout::Layout::RowMajor", false),
            Layout::ColMajor => ("crate::layout::Layout::ColMajor", true),
        };
        let (out, out_type) = match v.out {
            OutType::F32 => ("f32", "crate::layout::OutType::F32"),
            OutType::F16 => ("u16", "crate::layout::OutType::F16"),
            OutType::Bf16 => ("crate::epilogue::Bf16", "crate::layout::OutType::Bf16"),
        };
        let text = &mut files.iter_mut().find(|(t, _)| *t == template).expect("a template").1;
        // The rows of A^T (`Op::BsrSpmmT`) read A through its transposed index; the sm_90a SDDMM's source names
        // X's order.
        let decomposition = match (v.op, v.decomposition, v.a_layout) {
            (Op::BsrSpmmT, d, _) => format!("Transposed{d:?}"),
            (Op::Sddmm, _, Layout::RowMajor) if template == "hopper" => "HopperSddmmXRow".into(),
            (Op::Sddmm, _, Layout::ColMajor) if template == "hopper" => "HopperSddmmXCol".into(),
            (_, d, _) => format!("{d:?}"),
        };
        // An sm_80 SDDMM kernel also takes X's order (how its A operand is read).
        let x_col = match (v.op, v.a_layout) {
            _ if template == "hopper" => "",
            (Op::Sddmm, Layout::RowMajor) => ", crate::sm80::bsr::src::SDDMM_X_ROW",
            (Op::Sddmm, Layout::ColMajor) => ", crate::sm80::bsr::src::SDDMM_X_COL",
            _ => "",
        };
        let name = v.name;
        // One macro for every row (lib.rs `kernel!`), dispatching on the decomposition to the template's entry
        // point.
        writeln!(
            text,
            "kernel!({decomposition}, {name}, {input}, {in_type}, {b_layout}, {b_col}, {out}, {out_type}{x_col});"
        )
        .expect("writing to a String");
    }
    let dir = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    for (template, text) in files {
        let path = dir.join(format!("{template}_entries.rs"));
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    println!("cargo::rerun-if-changed=build.rs");
}
