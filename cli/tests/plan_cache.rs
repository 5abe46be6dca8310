//! `sparsek tune --show` on a hostile plan cache: a FIFO or /dev/zero as the file is refused at once (no block),
//! and a file with one bad line still lists its other plans, with one short warning.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sparsek-cli-plan-cache-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `sparsek tune --show --cache DIR`, killed (and the test failed) after 20 s: (success, stdout + stderr).
fn show(dir: &PathBuf) -> (bool, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sparsek"))
        .args(["tune", "--show", "--cache"])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(20) {
            child.kill().unwrap();
            panic!("sparsek tune --show blocked on {}", dir.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn special_files_are_refused_without_blocking() {
    let dir = scratch("special");
    let file = dir.join("plans-v1.tsv");
    if Command::new("mkfifo").arg(&file).status().is_ok_and(|s| s.success()) {
        let (ok, text) = show(&dir);
        assert!(!ok && text.contains("not a regular file"), "{text}");
        std::fs::remove_file(&file).unwrap();
    }
    std::os::unix::fs::symlink("/dev/zero", &file).unwrap();
    let (ok, text) = show(&dir);
    assert!(!ok && text.contains("not a regular file"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_bad_line_does_not_hide_the_other_plans() {
    let dir = scratch("bad-line");
    let good = "NVIDIA H100\t9.0\t13000\tsm80:x\tspmm\tf16\trow\tf32\trow\t64\t8192\t8192\t16\t2048\t1\tnarrow\tauto\t\
                whole\tauto\t12.500\t20.250\t1795000000\n";
    let bad = good.replace("8192\t8192", "8192\tNaN").replace("narrow", &"z".repeat(100_000));
    std::fs::write(dir.join("plans-v1.tsv"), format!("sparsek-plans\t2\n{bad}{good}")).unwrap();
    let (ok, text) = show(&dir);
    assert!(!ok && text.contains("skipped 1 unreadable lines (the first, line 2:"), "{text}");
    assert!(text.contains("NVIDIA H100") && text.contains("narrow"), "the good plan is listed:\n{text}");
    assert!(text.len() < 2000, "unbounded output: {} bytes", text.len());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn waiting_for_the_lock_is_said_once() {
    let dir = scratch("lock");
    std::fs::write(dir.join("plans-v1.tsv"), "sparsek-plans\t2\n").unwrap();
    // Another process holds the writers' lock for a while.
    let held = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(dir.join("plans-v1.tsv.lock"));
    let held = held.unwrap();
    held.lock().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_sparsek"))
        .args(["tune", "--clear", "--cache"])
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    drop(held);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.matches("waiting for the plan cache lock").count(), 1, "{err}");
    assert!(!dir.join("plans-v1.tsv").exists(), "cleared after the wait");
    std::fs::remove_dir_all(&dir).unwrap();
}
