//! build-ptx and fetch-ptxas.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{output, root, run};

/// One PTX module the project commits: which cargo features of kernels-gpu build it and where it goes.
struct Module {
    name: &'static str,
    features: &'static str,
    dest: &'static str,
    /// Whether ptxas's output for each of its target's architectures is committed next to the PTX (`<dest stem>.<arch>.cubin`)
    /// with a manifest (`<dest stem>.cubins.txt`: the PTX's FNV-1a 64 hash), so the host loads prebuilt SASS on
    /// those GPUs instead of JIT-compiling the PTX (20 s for the product module on an H100, measured 2026-11-22).
    cubins: bool,
    /// Whether its sm_90 cubins are assembled from the PTX with the grid-dependency markers made instructions
    /// (`ptx_check::programmatic_sm90`), so that its kernels can be launched with programmatic serialization there.
    programmatic: bool,
    /// The target: `-C target-cpu`, the PTX ISA feature, and the architectures ptxas assembles (and checks) it for.
    target: Target,
}

/// A module's target architecture.
struct Target {
    cpu: &'static str,
    ptx_feature: &'static str,
    ptxas_archs: &'static [&'static str],
}

/// sm_80 modules (kernels-gpu/.cargo/config.toml's flags), JIT-compiled for any sm_80+ GPU and prebuilt for sm_80
/// and sm_90a.
const SM80: Target = Target { cpu: "sm_80", ptx_feature: "+ptx80", ptxas_archs: &["sm_80", "sm_90a"] };
/// sm_90a modules: PTX 8.3 (`fence.proxy.tensormap` and friends need it); `ptxas -arch=sm_90` refuses sm_90a PTX,
/// so it is assembled for sm_90a only.
const SM90A: Target = Target { cpu: "sm_90a", ptx_feature: "+ptx83", ptxas_archs: &["sm_90a"] };

const MODULES: &[Module] = &[
    Module {
        name: "sparsek_sm80",
        features: "",
        dest: "host/ptx/sparsek_sm80.ptx",
        cubins: true,
        programmatic: true,
        target: SM80,
    },
    Module {
        name: "primitives_sm80",
        features: "test-kernels",
        dest: "tests/ptx/primitives_sm80.ptx",
        cubins: false,
        programmatic: false,
        target: SM80,
    },
    Module {
        name: "sparsek_sm80_tune",
        features: "tune-kernels",
        dest: "host/ptx/sparsek_sm80_tune.ptx",
        cubins: false,
        programmatic: false,
        target: SM80,
    },
    Module {
        name: "sparsek_sm90a",
        features: "sm90",
        dest: "host/ptx/sparsek_sm90a.ptx",
        cubins: true,
        programmatic: false,
        target: SM90A,
    },
];

/// FNV-1a, 64 bits: the PTX a set of committed cubins was assembled from (tests/tests/ptx_content.rs computes the
/// same hash of the committed PTX and compares it with the manifest).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// Where the cubin of `m` for `arch` is committed.
fn cubin_path(m: &Module, arch: &str) -> String {
    format!("{}.{arch}.cubin", m.dest.trim_end_matches(".ptx"))
}

/// Where the manifest of `m`'s cubins is committed.
fn manifest_path(m: &Module) -> String {
    format!("{}.cubins.txt", m.dest.trim_end_matches(".ptx"))
}

/// The manifest's text for a PTX.
fn manifest(ptx: &str, archs: &[&str]) -> String {
    format!(
        "# ptxas output committed next to the PTX, assembled from the PTX with this FNV-1a 64 hash (written by\n\
         # `cargo xtask build-ptx`; tests/tests/ptx_content.rs checks it against the committed PTX)\n\
         ptx_fnv1a64 = {:016x}\n\
         archs = {}\n",
        fnv1a64(ptx.as_bytes()),
        archs.join(" ")
    )
}

const PTXAS_WHEEL: &str = "nvidia-cuda-nvcc==13.0.88";
const PTXAS_MEMBER: &str = "nvidia/cu13/bin/ptxas";

pub fn build_ptx(check: bool) -> Result<(), String> {
    let root = root();
    let linker = build_linker(&root)?;
    let mut stale: Vec<String> = Vec::new();
    let mut built = Vec::new();
    for m in MODULES {
        let ptx = build_module(&root, &linker, m)?;
        if check {
            if read_committed(&root, m.dest).as_deref() != Some(ptx.as_bytes()) {
                stale.push(stored(m.dest));
            }
        } else if read_committed(&root, m.dest).as_deref() != Some(ptx.as_bytes()) {
            write_committed(&root, m.dest, ptx.as_bytes())?;
            eprintln!("build-ptx: wrote {}", stored(m.dest));
        } else {
            eprintln!("build-ptx: {} unchanged", stored(m.dest));
        }
        built.push((m, ptx));
    }
    let cubins = validate_with_ptxas(&root, &built)?;
    for (m, ptx) in &built {
        if !m.cubins {
            continue;
        }
        let Some(cubins) = &cubins else {
            if check {
                eprintln!("build-ptx --check: WARNING: ptxas not found: the committed cubins were not checked");
                continue;
            }
            return Err(format!(
                "{} ships prebuilt cubins, which need ptxas: run `cargo xtask fetch-ptxas` (or set SPARSEK_PTXAS)",
                m.dest
            ));
        };
        let mut files: Vec<(String, Vec<u8>)> =
            vec![(manifest_path(m), manifest(ptx, m.target.ptxas_archs).into_bytes())];
        for (name, arch, bytes) in cubins {
            if *name == m.name {
                files.push((cubin_path(m, arch), bytes.clone()));
            }
        }
        for (rel, bytes) in files {
            let same = read_committed(&root, &rel).as_deref() == Some(&bytes[..]);
            if check {
                if !same {
                    stale.push(stored(&rel));
                }
            } else if !same {
                write_committed(&root, &rel, &bytes)?;
                eprintln!("build-ptx: wrote {}", stored(&rel));
            }
        }
    }
    if !stale.is_empty() {
        return Err(format!(
            "committed PTX or cubins are stale (differ from a fresh build): {}; run `cargo xtask build-ptx` and commit",
            stale.join(", ")
        ));
    }
    if check {
        eprintln!("build-ptx --check: committed PTX matches a fresh build");
    }
    Ok(())
}

/// Builds the ptx-linker binary and returns its path.
fn build_linker(root: &Path) -> Result<PathBuf, String> {
    run(Command::new(cargo()).current_dir(root).args([
        "build",
        "--quiet",
        "--package",
        "xtask",
        "--bin",
        "ptx-linker",
    ]))?;
    let exe = root.join("target/debug/ptx-linker").with_extension(std::env::consts::EXE_EXTENSION);
    if !exe.exists() {
        return Err(format!("ptx-linker was built but {} is missing", exe.display()));
    }
    Ok(exe)
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// Builds one module of kernels-gpu and returns the PTX text.
fn build_module(root: &Path, linker: &Path, m: &Module) -> Result<String, String> {
    let crate_dir = root.join("kernels-gpu");
    // Cargo does not fingerprint the linker binary: after changing xtask/src/bin/ptx-linker.rs, touch
    // kernels-gpu/src/lib.rs (ARCHITECTURE.md says so too).
    // Plain `cargo` through rustup, so the pinned nightly of rust-toolchain.toml builds the kernels whichever
    // toolchain runs xtask.
    let mut cmd = Command::new("cargo");
    // Modules for another CPU than the config's sm_80 get their flags from CARGO_ENCODED_RUSTFLAGS (which
    // replaces the config's target rustflags) and their own target directory (so switching does not rebuild
    // core for each module).
    let target_dir = if m.target.cpu == SM80.cpu {
        crate_dir.join("target")
    } else {
        let flags = [
            "-C".to_string(),
            format!("target-cpu={}", m.target.cpu),
            "-C".into(),
            format!("target-feature={}", m.target.ptx_feature),
            "-C".into(),
            "llvm-args=-unroll-threshold=4000".into(),
        ];
        cmd.env("CARGO_ENCODED_RUSTFLAGS", flags.join("\x1f"));
        crate_dir.join("target").join(m.target.cpu)
    };
    cmd.current_dir(&crate_dir)
        // The outer `cargo xtask` (stable or nightly) must not leak its toolchain into the nightly build.
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO")
        .env_remove("RUSTC")
        .env_remove("RUSTFLAGS")
        .env("CARGO_TARGET_NVPTX64_NVIDIA_CUDA_LINKER", linker)
        .env("CARGO_TARGET_DIR", &target_dir)
        .args(["build", "--release", "--quiet"]);
    if !m.features.is_empty() {
        cmd.args(["--features", m.features]);
    }
    eprintln!("build-ptx: building {} (features: {})", m.name, if m.features.is_empty() { "-" } else { m.features });
    run(&mut cmd)?;
    let out = target_dir.join("nvptx64-nvidia-cuda/release/sparsek_kernels.ptx");
    let ptx = std::fs::read_to_string(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let ptx = if m.target.cpu == SM90A.cpu { crate::ptx_check::finish_sm90a(&ptx)? } else { ptx };
    crate::ptx_check::check_counts(m.name, &ptx)?;
    Ok(ptx)
}

/// Where ptxas is: $SPARSEK_PTXAS, then .tools/ (fetch-ptxas), then PATH.
pub fn find_ptxas(root: &Path) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SPARSEK_PTXAS") {
        return Some(PathBuf::from(p));
    }
    let local = root.join(".tools/ptxas").join(PTXAS_MEMBER);
    if local.exists() {
        return Some(local);
    }
    Command::new("ptxas").arg("--version").output().ok().filter(|o| o.status.success()).map(|_| "ptxas".into())
}

/// One kernel's resource use as ptxas reports it.
#[derive(Default, Debug)]
struct KernelReport {
    name: String,
    registers: u32,
    smem: u32,
    stack: u32,
    spill_stores: u32,
    spill_loads: u32,
    lmem: u32,
}

/// The cubins ptxas made: (module name, arch, bytes).
type Cubins = Vec<(&'static str, &'static str, Vec<u8>)>;

/// Assembles every module for each architecture of its target, checks ptxas's report (no stack frame, spill or
/// local memory) and returns the cubins of the modules that commit them; `None` without ptxas.
fn validate_with_ptxas(root: &Path, built: &[(&Module, String)]) -> Result<Option<Cubins>, String> {
    let Some(ptxas) = find_ptxas(root) else {
        eprintln!("build-ptx: WARNING: ptxas not found (run `cargo xtask fetch-ptxas`): PTX not assembled or checked");
        return Ok(None);
    };
    let mut cubins = Vec::new();
    let tmp = root.join("target/xtask-ptx");
    std::fs::create_dir_all(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let mut problems = Vec::new();
    println!(
        "{:<16} {:<7} {:<40} {:>5} {:>7} {:>6} {:>6}",
        "module", "arch", "kernel", "regs", "smem", "stack", "spill"
    );
    for (m, ptx) in built {
        let file = tmp.join(format!("{}.ptx", m.name));
        std::fs::write(&file, ptx).map_err(|e| format!("{}: {e}", file.display()))?;
        for arch in m.target.ptxas_archs {
            let cubin = tmp.join(format!("{}.{arch}.cubin", m.name));
            // On sm_90 the product module's cubin comes from its PTX with the grid-dependency markers made
            // instructions (ptx_check::programmatic_sm90).
            let source = if m.programmatic && arch.starts_with("sm_90") {
                let patched = tmp.join(format!("{}.{arch}.programmatic.ptx", m.name));
                let text = crate::ptx_check::programmatic_sm90(ptx)?;
                std::fs::write(&patched, text).map_err(|e| format!("{}: {e}", patched.display()))?;
                patched
            } else {
                file.clone()
            };
            let out = Command::new(&ptxas)
                .args([&format!("-arch={arch}"), "-v", "-warn-spills", "-warn-lmem-usage"])
                .arg(&source)
                .arg("-o")
                .arg(&cubin)
                .output()
                .map_err(|e| format!("cannot start {}: {e}", ptxas.display()))?;
            let text = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
            if !out.status.success() {
                return Err(format!("ptxas -arch={arch} rejected {}:\n{text}", m.dest));
            }
            if m.cubins {
                let bytes = std::fs::read(&cubin).map_err(|e| format!("{}: {e}", cubin.display()))?;
                cubins.push((m.name, *arch, bytes));
            }
            for w in text.lines().filter(|l| l.contains("warning")) {
                problems.push(format!("{} {arch}: {w}", m.name));
            }
            for k in parse_ptxas(&text) {
                println!(
                    "{:<16} {:<7} {:<40} {:>5} {:>7} {:>6} {:>6}",
                    m.name,
                    arch,
                    k.name,
                    k.registers,
                    k.smem,
                    k.stack,
                    k.spill_stores + k.spill_loads
                );
                if k.stack > 0 || k.spill_stores > 0 || k.spill_loads > 0 || k.lmem > 0 {
                    problems.push(format!(
                        "{} {arch} {}: stack frame {} B, spill stores {} B, spill loads {} B, local memory {} B",
                        m.name, k.name, k.stack, k.spill_stores, k.spill_loads, k.lmem
                    ));
                }
            }
        }
    }
    if problems.is_empty() {
        eprintln!(
            "build-ptx: ptxas ({}) accepted every module: no stack frame, spill or local memory",
            ptxas.display()
        );
        Ok(Some(cubins))
    } else {
        Err(format!("ptxas found problems:\n  {}", problems.join("\n  ")))
    }
}

/// Parses `ptxas -v` output: "Compiling entry function 'X' for 'sm_90a'", "N bytes stack frame, N bytes spill
/// stores, N bytes spill loads", `Used N registers, used N barriers, N bytes smem, N bytes cmem[0]` (and an
/// optional "N bytes lmem").
fn parse_ptxas(text: &str) -> Vec<KernelReport> {
    let mut out: Vec<KernelReport> = Vec::new();
    let num_before = |line: &str, unit: &str| -> u32 {
        let Some(pos) = line.find(unit) else { return 0 };
        line[..pos]
            .split(|c: char| !c.is_ascii_digit())
            .rfind(|s| !s.is_empty())
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    };
    for line in text.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or("?").to_string();
            out.push(KernelReport { name, ..Default::default() });
        } else if let Some(k) = out.last_mut() {
            if line.contains("stack frame") {
                k.stack = num_before(line, " bytes stack frame");
                k.spill_stores = num_before(line, " bytes spill stores");
                k.spill_loads = num_before(line, " bytes spill loads");
            }
            if line.contains("Used") && line.contains("registers") {
                k.registers = num_before(line, " registers");
                k.smem = num_before(line, " bytes smem");
                k.lmem = num_before(line, " bytes lmem");
            }
        }
    }
    out
}

pub fn fetch_ptxas() -> Result<(), String> {
    let root = root();
    let dir = root.join(".tools/ptxas");
    let exe = dir.join(PTXAS_MEMBER);
    if exe.exists() {
        eprintln!("fetch-ptxas: {} already present", exe.display());
        return Ok(());
    }
    let wheels = root.join(".tools/wheels");
    eprintln!("fetch-ptxas: downloading {PTXAS_WHEEL} from PyPI");
    run(Command::new("python3")
        .args(["-m", "pip", "download", "--quiet", "--no-deps", PTXAS_WHEEL, "-d"])
        .arg(&wheels))?;
    let wheel = std::fs::read_dir(&wheels)
        .map_err(|e| format!("{}: {e}", wheels.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("nvidia_cuda_nvcc-13.0.88")))
        .ok_or("the downloaded wheel is missing")?;
    // A wheel is a zip file; python's zipfile extracts the one member we need.
    run(Command::new("python3")
        .args(["-c", "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])"])
        .arg(&wheel)
        .arg(PTXAS_MEMBER)
        .arg(&dir))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("{}: {e}", exe.display()))?;
    }
    let version = output(Command::new(&exe).arg("--version"))?;
    eprintln!("fetch-ptxas: {} ({})", exe.display(), version.lines().last().unwrap_or("").trim());
    Ok(())
}

/// zstd level of the embedded kernels: the strongest non-"ultra" level (2.5 MB for the ~50 MB of PTX and cubins,
/// 2026-11-27), decoded by the library's ruzstd in 5-10 ms per cubin.
const PACK_LEVEL: i32 = 19;

/// Where a module's file is committed: the library's PTX and cubins (under host/) zstd-compressed as `<file>.zst` (it embeds
/// those: 2.5 MB for ~50 MB of PTX and cubins; host/src/gpu/registry.rs decodes them), the test module as it is.
pub fn stored(rel: &str) -> String {
    if packed(rel) { format!("{rel}.zst") } else { rel.to_string() }
}

/// Whether `rel` is committed compressed: the library's PTX and cubins (not their plain-text manifests).
fn packed(rel: &str) -> bool {
    rel.starts_with("host/") && (rel.ends_with(".ptx") || rel.ends_with(".cubin"))
}

/// The committed content of `rel` ([`stored`]: decoded when compressed), or `None` when it is missing or does not
/// decode. Compares content, not compressed bytes, so a newer zstd that compresses differently is not stale.
pub fn read_committed(root: &Path, rel: &str) -> Option<Vec<u8>> {
    let bytes = std::fs::read(root.join(stored(rel))).ok()?;
    if packed(rel) { zstd::stream::decode_all(&bytes[..]).ok() } else { Some(bytes) }
}

/// Commits `bytes` as `rel` ([`stored`]: compressed when the library embeds it).
fn write_committed(root: &Path, rel: &str, bytes: &[u8]) -> Result<(), String> {
    let path = root.join(stored(rel));
    std::fs::create_dir_all(path.parent().unwrap()).map_err(|e| format!("{}: {e}", path.display()))?;
    let out = if packed(rel) { compress(bytes)? } else { bytes.to_vec() };
    std::fs::write(&path, out).map_err(|e| format!("{}: {e}", path.display()))
}

/// One zstd frame of `raw` at [`PACK_LEVEL`], with its content size, a window covering the whole input (the PTX
/// repeats itself across entry points megabytes apart) and no checksum (the committed cubins' manifest and
/// tests/tests/ptx_content.rs check the content).
fn compress(raw: &[u8]) -> Result<Vec<u8>, String> {
    use zstd::stream::raw::CParameter;
    let window_log = (usize::BITS - raw.len().max(1 << 10).next_power_of_two().leading_zeros() - 1).clamp(10, 27);
    let mut c = zstd::bulk::Compressor::new(PACK_LEVEL).map_err(|e| format!("zstd: {e}"))?;
    c.set_parameter(CParameter::WindowLog(window_log)).map_err(|e| format!("zstd: {e}"))?;
    c.set_parameter(CParameter::EnableLongDistanceMatching(true)).map_err(|e| format!("zstd: {e}"))?;
    c.set_parameter(CParameter::ContentSizeFlag(true)).map_err(|e| format!("zstd: {e}"))?;
    c.compress(raw).map_err(|e| format!("zstd: {e}"))
}
