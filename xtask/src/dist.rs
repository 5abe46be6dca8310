//! gpu-dist: package what a GPU machine without Rust needs into dist/ (git-ignored): the CLI (`sparsek info | run |
//! bench | tune`), the GPU test binaries (release builds; the PTX is embedded in them) and run-gpu-tests.sh; with
//! `--python`, also the Python package's wheel (dist/py, built by maturin) and pytest's wheels (dist/pywheels,
//! from PyPI) for python/gpu-run.sh.

use std::path::Path;
use std::process::Command;

use crate::{output, root, run};

const RUN_SCRIPT: &str = include_str!("../assets/run-gpu-tests.sh");

pub fn gpu_dist(python: bool) -> Result<(), String> {
    let root = root();
    let dist = root.join("dist");
    let _ = std::fs::remove_dir_all(&dist);
    for d in ["bin", "tests"] {
        std::fs::create_dir_all(dist.join(d)).map_err(|e| format!("{}: {e}", dist.display()))?;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("gpu-dist: building the CLI (release)");
    run(Command::new(&cargo).current_dir(&root).args(["build", "--release", "-p", "sparsek-cli", "--bins"]))?;
    copy(&root.join("target/release/sparsek"), &dist.join("bin/sparsek"))?;

    eprintln!("gpu-dist: building the GPU test binaries (release)");
    let json = output(Command::new(&cargo).current_dir(&root).args([
        "test",
        "--release",
        "-p",
        "sparsek-tests",
        "--no-run",
        "--message-format=json",
    ]))?;
    let mut n = 0;
    for line in json.lines().filter(|l| l.contains("\"reason\":\"compiler-artifact\"")) {
        let (Some(name), Some(exe)) =
            (field(line, "\"target\":{", "\"name\":\""), field(line, "", "\"executable\":\""))
        else {
            continue;
        };
        if name.starts_with("gpu_") {
            copy(Path::new(&exe), &dist.join("tests").join(&name))?;
            n += 1;
        }
    }
    if n == 0 {
        return Err("no gpu_* test binaries found in cargo's output".into());
    }
    let script = dist.join("run-gpu-tests.sh");
    std::fs::write(&script, RUN_SCRIPT).map_err(|e| format!("{}: {e}", script.display()))?;
    make_executable(&script)?;
    if python {
        python_wheels(&root, &dist)?;
    }
    eprintln!("gpu-dist: dist/ ready ({n} test binaries); on the GPU machine run dist/run-gpu-tests.sh [--sanitize]");
    Ok(())
}

/// The Python package's abi3 wheel (maturin from `$MATURIN` or PATH) and pytest's pure-Python wheels for the GPU
/// machine's CPython 3.12 (pip from `$PIP` or PATH), so that python/gpu-run.sh needs no network there.
fn python_wheels(root: &Path, dist: &Path) -> Result<(), String> {
    let maturin = std::env::var("MATURIN").unwrap_or_else(|_| "maturin".into());
    let pip = std::env::var("PIP").unwrap_or_else(|_| "pip".into());
    eprintln!("gpu-dist: building the Python wheel ({maturin})");
    let py = dist.join("py");
    run(Command::new(&maturin).current_dir(root.join("python")).args(["build", "--release", "--out"]).arg(&py))?;
    eprintln!("gpu-dist: downloading pytest's wheels ({pip})");
    let only_wheels = ["--python-version", "3.12", "--only-binary=:all:", "--platform", "any"];
    run(Command::new(&pip).args(["download", "-q", "pytest"]).args(only_wheels).arg("-d").arg(dist.join("pywheels")))?;
    Ok(())
}

/// The string value of `"key":"..."` found after `after` in a JSON line (no escapes expected in names/paths).
fn field(line: &str, after: &str, key: &str) -> Option<String> {
    let from = if after.is_empty() { 0 } else { line.find(after)? };
    let rest = &line[from..];
    let start = rest.find(key)? + key.len();
    let end = rest[start..].find('"')?;
    Some(rest[start..start + end].to_string())
}

/// Copies a binary and strips its debug information when `strip` is available (the GPU machine needs no
/// debug info and the package must stay small enough to carry).
fn copy(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::copy(from, to).map_err(|e| format!("copy {} -> {}: {e}", from.display(), to.display()))?;
    let _ = Command::new("strip").arg("--strip-debug").arg(to).status();
    make_executable(to)
}

fn make_executable(p: &Path) -> Result<(), String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}
