//! Checks and finishing of the emitted PTX against the variant table (`sparsek_layout::VARIANTS`).
//!
//! - [`check_counts`]: every kernel of the table holds exactly the barriers, `mma.sync`, `wgmma.mma_async`,
//!   `setmaxnreg`, `wgmma.fence`, `wgmma.commit_group` and `wgmma.wait_group` its configuration implies. rustc does not mark inline asm `convergent`, so LLVM may duplicate
//!   an asm collective into both arms of a branch (it did, with an asm `bar.sync`: ../shared/HOPPER.md); a
//!   duplicated or dropped collective changes these counts and fails the build.
//! - [`finish_sm90a`]: what rustc cannot say in the sm_90a kernels' PTX: the launch bound (`.maxntid`, so ptxas
//!   allocates registers for the CTA size and `setmaxnreg` can move them between warpgroups) and the 64-byte
//!   alignment of the parameter that holds the tensor maps (rustc refuses a by-value kernel parameter aligned
//!   above 16; TMA needs 64).
//! - [`programmatic_sm90`]: the product module's PTX as its sm_90a cubin is assembled from it: `.target sm_90`
//!   and the grid-dependency markers (kernels-gpu/src/ptx/griddep.rs) made `griddepcontrol` instructions.

use sparsek_layout::{GRIDDEP_LAUNCH_DEPENDENTS_MARKER, GRIDDEP_WAIT_MARKER, Module, Pipeline, VARIANTS, Variant};

/// The entry points of a PTX text: (name, the text from `.entry` up to the next entry).
fn entries(ptx: &str) -> Vec<(&str, &str)> {
    let starts: Vec<usize> = ptx.match_indices(".entry ").map(|(i, _)| i).collect();
    starts
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            let end = starts.get(i + 1).copied().unwrap_or(ptx.len());
            let text = &ptx[s..end];
            let name = text[".entry ".len()..].split('(').next().unwrap_or("").trim();
            (name, text)
        })
        .collect()
}

/// Instruction lines of a PTX body that start with (or, for inline-asm blocks, contain) `op`, outside comments.
fn count(body: &str, op: &str) -> u32 {
    body.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .filter(|l| l.trim_start().starts_with(op) || l.contains(&format!(" {op}")) || l.contains(&format!(";{op}")))
        .count() as u32
}

/// The collectives counted per kernel: the CTA barrier and every `.sync.aligned` instruction the kernels write as
/// inline asm, except `ldmatrix`, whose count follows the unrolled fragment schedules rather than a formula.
const COUNTED: [&str; 7] =
    ["bar.sync", "mma.sync", "wgmma.mma_async", "setmaxnreg.", "wgmma.fence", "wgmma.commit_group", "wgmma.wait_group"];

/// What a kernel's PTX must hold, in the order of [`COUNTED`].
fn expected(v: &Variant) -> [u32; 7] {
    let c = v.config;
    let setmaxnreg = if matches!(c.pipeline, Pipeline::TmaWgmma { .. }) { 2 } else { 0 };
    let [fence, commit, wait] = c.expected_wgmma_group_ops();
    [v.expected_barriers(), c.expected_mma_sync(), c.expected_wgmma(), setmaxnreg, fence, commit, wait]
}

/// What a kernel's PTX holds, in the order of [`COUNTED`] (`bar.sync` counts `barrier.sync` too).
fn counted(body: &str) -> [u32; 7] {
    COUNTED.map(|op| count(body, op) + if op == "bar.sync" { count(body, "barrier.sync") } else { 0 })
}

/// Fails when a kernel of the variant table holds other numbers of the [`COUNTED`] collectives than its
/// configuration implies.
pub fn check_counts(module: &str, ptx: &str) -> Result<(), String> {
    let mut problems = Vec::new();
    for (name, body) in entries(ptx) {
        let Some(v) = VARIANTS.iter().find(|v| v.name == name) else { continue };
        let (got, want) = (counted(body), expected(v));
        if got != want {
            problems.push(format!("{name}: {COUNTED:?} = {got:?}, the configuration implies {want:?}"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{module}: collective instruction counts differ from the variant table (a duplicated or lost asm \
             collective?):\n  {}",
            problems.join("\n  ")
        ))
    }
}

/// Adds `.maxntid <threads>, 1, 1` to every sm_90a kernel and raises its first parameter (the tensor maps) to
/// 64-byte alignment. Fails on an entry point the variant table does not list as a Hopper kernel.
pub fn finish_sm90a(ptx: &str) -> Result<String, String> {
    let mut out = ptx.to_string();
    for (name, _) in entries(ptx) {
        let v = VARIANTS
            .iter()
            .find(|v| v.name == name && v.module == Module::Hopper)
            .ok_or_else(|| format!("sm_90a module: entry point {name} is not a Hopper kernel of layout::VARIANTS"))?;
        let param = format!(".param .align 16 .b8 {name}_param_0[");
        if out.matches(&param).count() != 1 {
            return Err(format!("sm_90a module: {name}: no single 16-byte aligned parameter 0 to raise to 64"));
        }
        out = out.replace(&param, &format!(".param .align 64 .b8 {name}_param_0["));
        let head = format!(".entry {name}(");
        let start = out.find(&head).ok_or_else(|| format!("{name}: entry vanished"))?;
        // The parameter list ends with a line starting with ")" (LLVM may append a comment).
        let close = out[start..].find("\n)").ok_or_else(|| format!("{name}: no end of the parameter list"))?;
        let eol = out[start + close + 1..].find('\n').ok_or_else(|| format!("{name}: no end of the parameter list"))?;
        let at = start + close + 1 + eol + 1;
        out.insert_str(at, &format!(".maxntid {}, 1, 1\n", v.config.threads()));
    }
    Ok(out)
}

/// The product module's PTX for its sm_90a cubin: `.target sm_80` becomes `.target sm_90` (the PTX ISA 8.0 of the
/// module has `griddepcontrol`, which needs sm_90) and every line that is exactly a grid-dependency marker
/// becomes its instruction. Fails unless every `Pipeline::CpAsync` and `Pipeline::Direct` kernel of the product
/// module holds at least one wait and one trigger: the host launches exactly those kernels with programmatic
/// serialization, and one without the wait would read B before the preceding grid had written it.
pub fn programmatic_sm90(ptx: &str) -> Result<String, String> {
    if ptx.lines().filter(|l| l.trim() == ".target sm_80").count() != 1 {
        return Err("programmatic sm_90 PTX: the module has no single `.target sm_80` line".into());
    }
    let mut problems = Vec::new();
    for (name, body) in entries(ptx) {
        let Some(v) = VARIANTS.iter().find(|v| v.name == name) else { continue };
        if v.module != Module::Product || !matches!(v.config.pipeline, Pipeline::CpAsync | Pipeline::Direct) {
            continue;
        }
        let markers = |m: &str| body.lines().filter(|l| l.trim() == m).count();
        let (waits, triggers) = (markers(GRIDDEP_WAIT_MARKER), markers(GRIDDEP_LAUNCH_DEPENDENTS_MARKER));
        if waits == 0 || triggers == 0 {
            problems.push(format!("{name}: {waits} grid-dependency waits, {triggers} triggers (at least 1 each)"));
        }
    }
    if !problems.is_empty() {
        return Err(format!("programmatic sm_90 PTX:\n  {}", problems.join("\n  ")));
    }
    let mut out = String::with_capacity(ptx.len());
    for line in ptx.split_inclusive('\n') {
        let (text, eol) = line.strip_suffix('\n').map_or((line, ""), |t| (t, "\n"));
        let indent = &text[..text.len() - text.trim_start().len()];
        match text.trim() {
            ".target sm_80" => out.push_str(&format!("{indent}.target sm_90{eol}")),
            t if t == GRIDDEP_WAIT_MARKER => out.push_str(&format!("{indent}griddepcontrol.wait;{eol}")),
            t if t == GRIDDEP_LAUNCH_DEPENDENTS_MARKER => {
                out.push_str(&format!("{indent}griddepcontrol.launch_dependents;{eol}"))
            }
            _ => out.push_str(line),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_instructions_not_comments() {
        let body = "\tbar.sync \t0;\n\t// bar.sync in a comment\n\t{ .reg .pred p; setp.ne.u32 p, %r1, 0;\n\
                    wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {...}\n\tmma.sync.aligned.m16n8k16\n";
        assert_eq!(count(body, "bar.sync"), 1);
        assert_eq!(count(body, "wgmma.mma_async"), 1);
        assert_eq!(count(body, "mma.sync"), 1);
    }

    /// The committed modules pass; a collective duplicated into a second line, or lost, in one kernel fails the
    /// check and names the kernel.
    #[test]
    fn duplicated_or_lost_collectives_fail_the_count() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for (file, line, dup) in [
            ("sparsek_sm90a.ptx", "wgmma.commit_group.sync.aligned;", true),
            ("sparsek_sm90a.ptx", "wgmma.fence.sync.aligned;", true),
            ("sparsek_sm90a.ptx", "wgmma.wait_group.sync.aligned \t1;", false),
            ("sparsek_sm80.ptx", "bar.sync \t0;", true),
        ] {
            let ptx =
                String::from_utf8(crate::ptx::read_committed(&root, &format!("host/ptx/{file}")).unwrap()).unwrap();
            check_counts(file, &ptx).unwrap();
            let at = ptx.find(line).unwrap_or_else(|| panic!("{file}: no {line:?}"));
            let eol = at + ptx[at..].find('\n').unwrap() + 1;
            let start = ptx[..at].rfind('\n').map_or(0, |i| i + 1);
            let changed = if dup {
                format!("{}{}{}", &ptx[..eol], &ptx[start..eol], &ptx[eol..])
            } else {
                format!("{}{}", &ptx[..start], &ptx[eol..])
            };
            let kernel = entries(&ptx).into_iter().find(|(_, body)| body.contains(line)).unwrap().0;
            let err = check_counts(file, &changed).unwrap_err();
            assert!(err.contains(kernel) && err.lines().count() == 2, "{file} {line:?}: {err}");
        }
    }

    #[test]
    fn finishing_adds_bounds_and_alignment() {
        let name = "sparsek_sm90_bs64_f16_brow_f32";
        let ptx = format!(".visible .entry {name}(\n\t.param .align 16 .b8 {name}_param_0[352]\n)\n{{\n\tret;\n}}\n");
        let done = finish_sm90a(&ptx).unwrap();
        assert!(done.contains(&format!(".param .align 64 .b8 {name}_param_0[352]")), "{done}");
        assert!(done.contains(")\n.maxntid 384, 1, 1\n{"), "{done}");
        assert!(finish_sm90a(".visible .entry other(\n\t.param .u64 other_param_0\n)\n{\n}\n").is_err());
    }

    #[test]
    fn programmatic_ptx_turns_markers_into_instructions() {
        let kernel = |name: &str, markers: &str| {
            format!(".visible .entry {name}(\n\t.param .align 8 .b8 {name}_param_0[160]\n)\n{{\n{markers}\tret;\n}}\n")
        };
        let both = format!(
            "\t// begin inline asm\n\t{GRIDDEP_WAIT_MARKER}\n\t// end inline asm\n\t{GRIDDEP_LAUNCH_DEPENDENTS_MARKER}\n"
        );
        let product = sparsek_layout::VARIANTS
            .iter()
            .filter(|v| v.module == Module::Product && matches!(v.config.pipeline, Pipeline::CpAsync))
            .map(|v| v.name)
            .next()
            .unwrap();
        let ptx = format!(".version 8.0\n.target sm_80\n.address_size 64\n\n{}", kernel(product, &both));
        let done = programmatic_sm90(&ptx).unwrap();
        assert!(done.contains("\n.target sm_90\n") && !done.contains("sm_80"), "{done}");
        assert!(done.contains("\n\tgriddepcontrol.wait;\n\t// end inline asm\n\tgriddepcontrol.launch_dependents;\n"));
        assert!(!done.contains("sparsek.griddepcontrol"), "{done}");
        // A product kernel without its wait (or trigger) fails the build; kernels outside the table pass as they are.
        let no_wait = format!(".target sm_80\n{}", kernel(product, &format!("\t{GRIDDEP_LAUNCH_DEPENDENTS_MARKER}\n")));
        assert!(programmatic_sm90(&no_wait).unwrap_err().contains("0 grid-dependency waits"));
        assert!(programmatic_sm90(&format!(".target sm_80\n{}", kernel("sparsek_bsr_check", ""))).is_ok());
        assert!(programmatic_sm90(&kernel(product, &both)).is_err(), "no .target line");
    }
}
