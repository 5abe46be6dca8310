//! `cargo xtask <verb>`: project automation. Run `cargo xtask help` for the verbs.

mod dist;
mod ptx;
mod ptx_check;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const HELP: &str = "\
cargo xtask <verb> [flags]

verbs:
  build-ptx [--check]   build kernels-gpu to PTX (nightly, -Zbuild-std=core, the project's ptx-linker) and write
                        the committed modules (host/ptx/sparsek_sm80.ptx.zst, host/ptx/sparsek_sm80_tune.ptx.zst,
                        host/ptx/sparsek_sm90a.ptx.zst: zstd, what the library embeds; tests/ptx/primitives_sm80.ptx).
                        --check: build into a temporary folder and fail if a committed module differs.
                        When ptxas is present (cargo xtask fetch-ptxas, or $SPARSEK_PTXAS) every module is
                        assembled for sm_80 and sm_90a; the verb prints registers and shared memory per kernel
                        and fails on any stack frame, spill or local memory.
  fetch-ptxas           download CUDA 13.0's ptxas (PyPI wheel nvidia-cuda-nvcc==13.0.88) into .tools/
  gpu-dist              build the CLI and the test binaries in release mode and package them with the PTX and a
                        run script into dist/ (git-ignored), for a GPU machine that has no Rust:
                        there, `dist/run-gpu-tests.sh [--sanitize]` runs every GPU test with SPARSEK_REQUIRE_GPU=1.
  help                  this text
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("build-ptx") => flag(&args, "--check").and_then(ptx::build_ptx),
        Some("fetch-ptxas") => ptx::fetch_ptxas(),
        Some("gpu-dist") => flag(&args, "--python").and_then(dist::gpu_dist),
        Some("help" | "--help" | "-h") | None => {
            print!("{HELP}");
            Ok(())
        }
        Some(other) => Err(format!("unknown verb {other:?}\n\n{HELP}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Whether the verb `args[0]`, which takes at most the one flag `flag`, was given it; anything else is an error.
fn flag(args: &[String], flag: &str) -> Result<bool, String> {
    match &args[1..] {
        [] => Ok(false),
        [a] if a == flag => Ok(true),
        rest => Err(format!("{} takes only {flag}, got {rest:?}", args[0])),
    }
}

/// The workspace root (the parent of xtask/).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives inside the workspace").to_path_buf()
}

/// Runs a command, failing with its name and status; stdout and stderr go to the terminal.
pub fn run(cmd: &mut Command) -> Result<(), String> {
    let status = cmd.status().map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))?;
    if status.success() { Ok(()) } else { Err(format!("{cmd:?} failed with {status}")) }
}

/// Runs a command and returns its stdout; stderr goes to the terminal.
pub fn output(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed with {}", out.status));
    }
    String::from_utf8(out.stdout).map_err(|e| format!("{cmd:?}: output is not UTF-8: {e}"))
}
