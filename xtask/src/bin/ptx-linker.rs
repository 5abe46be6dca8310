//! The project's PTX linker: the stand-in for rustc's `llvm-bitcode-linker` (flavor `llbc`), which cannot be
//! installed here. rustc calls it with the crate's bitcode objects and rlibs, one `--export-symbol` per kernel,
//! and the target CPU and features; it runs three tools from the toolchain's `llvm-tools` component (rustc puts
//! their directory on PATH):
//!
//! 1. `llvm-link --ignore-non-bitcode` merges all bitcode (rlib members that are not bitcode, like lib.rmeta,
//!    are skipped; `--only-needed` is NOT used: it drops kernels of other codegen units);
//! 2. `opt` internalizes everything but the kernels, drops dead code and optimizes (`default<O3>`);
//! 3. `llc` emits PTX for the target CPU and features.
//!
//! Set `SPARSEK_LINKER_LOG=<file>` to append the arguments and tool commands to a log.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

struct Args {
    exports: Vec<String>,
    inputs: Vec<PathBuf>,
    output: PathBuf,
    cpu: String,
    features: String,
}

fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut exports, mut inputs) = (Vec::new(), Vec::new());
    let (mut output, mut cpu, mut features) = (None, None, String::new());
    while let Some(a) = it.next() {
        let mut value = |flag: &str| it.next().ok_or_else(|| format!("{flag} needs a value"));
        match a.as_str() {
            "--export-symbol" => exports.push(value("--export-symbol")?),
            "-o" => output = Some(PathBuf::from(value("-o")?)),
            "--target-cpu" => cpu = Some(value("--target-cpu")?),
            "--target" | "-L" => {
                value(&a)?;
            }
            _ if a.starts_with("--target-feature=") => features = a["--target-feature=".len()..].to_string(),
            _ if a.starts_with("-O") || a == "--debug" || a.starts_with("-L") => {}
            _ if a.starts_with('-') => return Err(format!("unknown flag {a:?}")),
            _ => inputs.push(PathBuf::from(a)),
        }
    }
    let output = output.ok_or("no -o <output> given")?;
    let cpu = cpu.ok_or("no --target-cpu given")?;
    if exports.is_empty() {
        return Err("no --export-symbol given: the crate defines no kernel".into());
    }
    Ok(Args { exports, inputs, output, cpu, features })
}

fn run(log: &mut Option<std::fs::File>, cmd: &mut Command) -> Result<(), String> {
    if let Some(f) = log {
        use std::io::Write;
        let _ = writeln!(f, "{cmd:?}");
    }
    let status = cmd
        .status()
        .map_err(|e| format!("cannot start {:?}: {e} (is the llvm-tools component installed?)", cmd.get_program()))?;
    if status.success() { Ok(()) } else { Err(format!("{:?} failed with {status}", cmd.get_program())) }
}

fn link(args: Args, log: &mut Option<std::fs::File>) -> Result<(), String> {
    let linked = args.output.with_extension("linked.bc");
    let optimized = args.output.with_extension("opt.bc");
    run(log, Command::new("llvm-link").arg("--ignore-non-bitcode").arg("-o").arg(&linked).args(&args.inputs))?;
    run(
        log,
        Command::new("opt")
            .arg(format!("--internalize-public-api-list={}", args.exports.join(",")))
            .arg("--passes=internalize,globaldce,default<O3>")
            .arg(&linked)
            .arg("-o")
            .arg(&optimized),
    )?;
    run(
        log,
        Command::new("llc")
            .args(["-mtriple=nvptx64-nvidia-cuda", "-O3"])
            .arg(format!("-mcpu={}", args.cpu))
            .arg(format!("-mattr={}", args.features))
            .arg(&optimized)
            .arg("-o")
            .arg(&args.output),
    )?;
    let _ = std::fs::remove_file(linked);
    let _ = std::fs::remove_file(optimized);
    Ok(())
}

fn main() -> ExitCode {
    let mut log = std::env::var_os("SPARSEK_LINKER_LOG")
        .and_then(|p| std::fs::OpenOptions::new().create(true).append(true).open(p).ok());
    if let Some(f) = &mut log {
        use std::io::Write;
        let _ = writeln!(f, "ptx-linker {:?}", std::env::args().skip(1).collect::<Vec<_>>());
    }
    match parse(std::env::args().skip(1)).and_then(|a| link(a, &mut log)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ptx-linker: {e}");
            ExitCode::FAILURE
        }
    }
}
