//! ARCHITECTURE.md's invariant "`unsafe` lives in a few named places": the host library's `unsafe` code stays in the
//! files that list says, so a new `unsafe` block elsewhere (the pure planning room, the formats, the checks, the
//! tuner's cache) fails here and must be argued for in ARCHITECTURE.md first.

use std::path::{Path, PathBuf};

/// The host library's files allowed to hold `unsafe` code (paths under host/src), as ARCHITECTURE.md lists them.
const ALLOWED: &[&str] = &[
    "cpu/mod.rs",
    "gpu/driver.rs",
    "gpu/tma.rs",
    "gpu/views.rs",
    "gpu/split.rs",
    "gpu/launch/spmm.rs",
    "gpu/launch/check.rs",
    "gpu/launch/backward.rs",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Whether a line of Rust holds the `unsafe` keyword as code: outside `//` comments (doc comments included) and
/// outside the lint name `unsafe_op_in_unsafe_fn`.
fn has_unsafe_code(line: &str) -> bool {
    let code = line.split("//").next().unwrap_or_default();
    code.split(|c: char| !(c.is_alphanumeric() || c == '_')).any(|word| word == "unsafe")
}

#[test]
fn unsafe_code_stays_in_the_named_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../host/src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(files.len() > 20, "host/src not found at {}", root.display());
    let mut found = Vec::new();
    for path in files {
        let rel = path.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
        let text = std::fs::read_to_string(&path).unwrap();
        if text.lines().any(has_unsafe_code) {
            found.push(rel.clone());
            assert!(ALLOWED.contains(&rel.as_str()), "host/src/{rel} holds unsafe code: not in ARCHITECTURE.md's list");
        }
    }
    // The list is not stale either: every allowed file still needs its entry.
    for allowed in ALLOWED {
        assert!(found.iter().any(|f| f == allowed), "host/src/{allowed} holds no unsafe code any more: drop it");
    }
}

#[test]
fn the_scan_sees_unsafe_code_and_not_comments() {
    assert!(has_unsafe_code("    unsafe { f() }"));
    assert!(has_unsafe_code("pub unsafe fn from_raw("));
    assert!(!has_unsafe_code("/// the `unsafe` constructors' contract"));
    assert!(!has_unsafe_code("#![forbid(unsafe_op_in_unsafe_fn)]"));
    assert!(!has_unsafe_code("let x = 1; // unsafe here would be wrong"));
}
