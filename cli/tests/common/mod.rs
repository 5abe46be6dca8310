//! What the CLI's integration tests share: running the `sparsek` binary.

use std::ffi::OsStr;
use std::process::Command;

/// Runs `sparsek ARGS`: (exit success, stdout + stderr). Fails the test when the binary panicked or was killed
/// by a signal (an abort): every run must end with a verdict or a clear refusal.
pub fn sparsek<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(args: I) -> (bool, String) {
    let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let out = Command::new(env!("CARGO_BIN_EXE_sparsek")).args(&args).output().expect("start sparsek");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!text.contains("panicked"), "sparsek {args:?} panicked:\n{text}");
    assert!(out.status.code().is_some(), "sparsek {args:?} was killed: {:?}\n{text}", out.status);
    (out.status.success(), text)
}

/// `sparsek run --cpu --iters 1 --warmup 0 ARGS` (the CPU backend, one timed launch).
#[allow(dead_code)] // (each test binary compiles this module; not every one runs `run`)
pub fn run_cpu(args: &[&str]) -> (bool, String) {
    sparsek(["run", "--cpu", "--iters", "1", "--warmup", "0"].iter().chain(args))
}
