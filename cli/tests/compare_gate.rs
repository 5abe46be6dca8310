//! `sparsek bench --compare OLD --against NEW` (no GPU needed): the gate fails, with a clear line and a non-zero
//! exit, when NEW has no records, when a time is not finite and positive, or when a record is malformed.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

mod common;

fn committed() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/bench/latest.json")).unwrap()
}

fn file(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("sparsek-compare-gate-{}-{name}.json", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

/// (exit success, stdout + stderr) of comparing `old` with `new`.
fn gate(old: &Path, new: &Path) -> (bool, String) {
    common::sparsek([
        OsStr::new("bench"),
        OsStr::new("--compare"),
        old.as_os_str(),
        OsStr::new("--against"),
        new.as_os_str(),
    ])
}

#[test]
fn the_gate_fails_on_what_it_cannot_compare() {
    let text = committed();
    let old = file("old", &text);
    let (ok, out) = gate(&old, &old);
    assert!(ok && out.contains("No regression beyond 5%."), "{out}");
    // NEW without records: every case of OLD is missing.
    let start = text.find("\"records\": [").unwrap();
    let empty = format!("{}\"records\": []\n}}\n", &text[..start]);
    let new = file("empty", &empty);
    let (ok, out) = gate(&old, &new);
    assert!(!ok && out.contains("COMPARISON FAILED") && out.contains("FAILED: NEW has no cases"), "{out}");
    assert!(out.contains("MISSING: in OLD but not in NEW (21)"), "{out}");
    // A time of 0 and a block size of 0: refused on read, naming the record.
    let first = text.find("\"median_ms\": ").unwrap() + "\"median_ms\": ".len();
    let end = first + text[first..].find([',', '\n']).unwrap();
    for (name, bad, why) in [
        ("zero", format!("{}0.0{}", &text[..first], &text[end..]), "median time 0 ms is not finite and positive"),
        ("bs0", text.replacen("\"bs\": 16,", "\"bs\": 0,", 1), "block size 0"),
    ] {
        let new = file(name, &bad);
        let (ok, out) = gate(&old, &new);
        assert!(!ok && out.contains("malformed record") && out.contains(why), "{name}: {out}");
        std::fs::remove_file(new).unwrap();
    }
    std::fs::remove_file(old).unwrap();
    std::fs::remove_file(file("empty", "")).unwrap();
}
