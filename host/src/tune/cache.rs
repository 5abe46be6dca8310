//! The plan cache file: tuned plans, one tab-separated line each, under the user's cache directory.
//!
//! Writers take an exclusive lock on a side file (`plans-v1.tsv.lock`), read the current file, merge their plans
//! in (a plan for the same device and key replaces the old one), write a temporary file next to it and rename it
//! over the old one, so readers (who take no lock) always see a whole file, and concurrent writers from several
//! processes lose nothing. A file that cannot be parsed, or that another format version wrote, is ignored with a
//! warning, and the next save replaces it.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{DeviceKey, InType, KernelFamily, Layout, OutType, Plan, PlanKey};
use crate::error::{Error, Result};

/// The format version written in the file's header; a file with another version is ignored.
const VERSION: u32 = 1;
const MAGIC: &str = "sparsek-plans";
/// Fields of a plan line.
const FIELDS: usize = 20;

/// A measured plan as the cache keeps it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CachedPlan {
    /// The plan.
    pub plan: Plan,
    /// Median time of a launch with it when it was tuned, in microseconds.
    pub tuned_us: f64,
    /// Median time of the heuristic's plan in the same tuning run, in microseconds.
    pub heuristic_us: f64,
    /// When it was tuned (seconds since the Unix epoch).
    pub unix_time: u64,
}

/// One line of the cache file: a plan for a problem on a device.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanEntry {
    /// The GPU and build it was measured with.
    pub device: DeviceKey,
    /// The problem.
    pub key: PlanKey,
    /// The plan and its measurements.
    pub cached: CachedPlan,
}

/// What a cache file held: every entry (all devices), and a warning when the file was ignored.
#[derive(Clone, Debug, Default)]
pub struct CacheContents {
    /// The plans, for every device the file has seen.
    pub entries: Vec<PlanEntry>,
    /// Why the file was ignored (unreadable, corrupt, another format version), when it was.
    pub warning: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Mode {
    Off,
    Memory,
    File(PathBuf),
}

/// Where tuned plans are kept: a file (the default: [`PlanCache::from_env`]), only this process's memory, or
/// nowhere (the built-in heuristic serves every launch: fixed behaviour).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanCache {
    mode: Mode,
}

impl PlanCache {
    /// The file's name inside the cache directory.
    pub const FILE_NAME: &'static str = "plans-v1.tsv";

    /// The cache the environment asks for: `SPARSEK_PLAN_CACHE=off` (also `0`, `none`, `false`): no plans,
    /// the heuristic always; `SPARSEK_PLAN_CACHE=memory`: plans tuned in this process only; `SPARSEK_PLAN_CACHE=<a
    /// directory>`: the file in that directory; unset or empty: the file in [`PlanCache::default_dir`] (memory
    /// only when no home or cache directory is known).
    pub fn from_env() -> PlanCache {
        match std::env::var_os("SPARSEK_PLAN_CACHE") {
            Some(v) if !v.is_empty() => match v.to_str().map(str::to_ascii_lowercase).as_deref() {
                Some("off" | "0" | "none" | "false") => PlanCache::off(),
                Some("memory") => PlanCache::memory(),
                _ => PlanCache::in_dir(v),
            },
            _ => Self::default_dir().map_or_else(PlanCache::memory, PlanCache::in_dir),
        }
    }

    /// The user's cache directory for sparsek: `$XDG_CACHE_HOME/sparsek`, else `~/.cache/sparsek` (Linux and
    /// other Unix), `~/Library/Caches/sparsek` (macOS), `%LOCALAPPDATA%\sparsek` (Windows).
    pub fn default_dir() -> Option<PathBuf> {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        if cfg!(windows) {
            return var("LOCALAPPDATA").map(|d| d.join("sparsek"));
        }
        if cfg!(target_os = "macos") {
            return var("HOME").map(|h| h.join("Library/Caches/sparsek"));
        }
        var("XDG_CACHE_HOME").or_else(|| var("HOME").map(|h| h.join(".cache"))).map(|d| d.join("sparsek"))
    }

    /// The cache file [`PlanCache::FILE_NAME`] in `dir` (created when the first plan is saved).
    pub fn in_dir(dir: impl Into<PathBuf>) -> PlanCache {
        PlanCache { mode: Mode::File(dir.into().join(Self::FILE_NAME)) }
    }

    /// Plans tuned in this process serve its later launches; nothing is read or written.
    pub fn memory() -> PlanCache {
        PlanCache { mode: Mode::Memory }
    }

    /// No plans at all: every launch takes the built-in heuristic's kernel, tuned or not.
    pub fn off() -> PlanCache {
        PlanCache { mode: Mode::Off }
    }

    /// Whether plans are off ([`PlanCache::off`]).
    pub fn is_off(&self) -> bool {
        self.mode == Mode::Off
    }

    /// The cache file, when plans are kept in one.
    pub fn path(&self) -> Option<&Path> {
        match &self.mode {
            Mode::File(p) => Some(p),
            Mode::Off | Mode::Memory => None,
        }
    }

    /// One line on where plans are kept (`sparsek info`, `sparsek tune --show`).
    pub fn describe(&self) -> String {
        match &self.mode {
            Mode::Off => "off (the built-in heuristic serves every launch)".into(),
            Mode::Memory => "in memory only (plans tuned in this process)".into(),
            Mode::File(p) => p.display().to_string(),
        }
    }

    /// Every plan in the file. Never fails: a missing file is an empty cache, and an unreadable, corrupt or
    /// other-version file is an empty cache with a warning saying why.
    pub fn read(&self) -> CacheContents {
        let Some(path) = self.path() else { return CacheContents::default() };
        match fs::read_to_string(path) {
            Ok(text) => match parse(&text) {
                Ok(entries) => CacheContents { entries, warning: None },
                Err(reason) => CacheContents {
                    entries: Vec::new(),
                    warning: Some(format!("ignoring the plan cache {}: {reason}", path.display())),
                },
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => CacheContents::default(),
            Err(e) => CacheContents {
                entries: Vec::new(),
                warning: Some(format!("ignoring the plan cache {}: cannot read it: {e}", path.display())),
            },
        }
    }

    /// Merges `new` into the file (an entry for the same device and key replaces the old one) and returns how
    /// many plans the file holds afterwards; with plans in memory or off, does nothing and returns 0. Safe when
    /// several processes save at once (an exclusive lock on `<file>.lock`, then an atomic rename). A corrupt or
    /// other-version file is replaced. Errors ([`Error::Io`]) name the path and the reason: a directory that
    /// cannot be created or written, a full disk.
    pub fn save(&self, new: &[PlanEntry]) -> Result<usize> {
        let Some(path) = self.path() else { return Ok(0) };
        let io = |p: &Path, what: &str, e: std::io::Error| Error::Io {
            path: p.display().to_string(),
            reason: format!("plan cache: {what}: {e}"),
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(|e| io(dir, "cannot create the directory", e))?;
        }
        let lock_path = path.with_extension("tsv.lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| io(&lock_path, "cannot open the lock file", e))?;
        lock.lock().map_err(|e| io(&lock_path, "cannot lock", e))?;
        // Under the lock: what other writers saved, then ours over it.
        let mut entries = fs::read_to_string(path).ok().and_then(|t| parse(&t).ok()).unwrap_or_default();
        for e in new {
            entries.retain(|old| !(old.device == e.device && old.key == e.key));
            entries.push(e.clone());
        }
        entries.sort_by(|a, b| (&a.device, &a.key).cmp(&(&b.device, &b.key)));
        let text = render(&entries);
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let tmp =
            path.with_extension(format!("tsv.tmp.{}.{}", std::process::id(), SERIAL.fetch_add(1, Ordering::Relaxed)));
        let written = File::create(&tmp)
            .and_then(|mut f| f.write_all(text.as_bytes()).and_then(|()| f.sync_all()))
            .and_then(|()| fs::rename(&tmp, path));
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(io(path, "cannot write", e));
        }
        drop(lock);
        Ok(entries.len())
    }
}

impl PlanCache {
    /// Deletes the cache file (under the writers' lock, so no save is lost halfway); `Ok(false)` when there was
    /// none, or plans are not kept in a file. A [`Gpu`](crate::gpu::Gpu) keeps the plans it read until it is
    /// dropped or given another cache.
    pub fn clear(&self) -> Result<bool> {
        let Some(path) = self.path() else { return Ok(false) };
        let io = |what: &str, e: std::io::Error| Error::Io {
            path: path.display().to_string(),
            reason: format!("plan cache: {what}: {e}"),
        };
        let lock_path = path.with_extension("tsv.lock");
        let lock = match OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path) {
            Ok(f) => f,
            // No directory: nothing to clear.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io("cannot open the lock file", e)),
        };
        lock.lock().map_err(|e| io("cannot lock", e))?;
        match fs::remove_file(path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io("cannot delete", e)),
        }
    }
}

fn render(entries: &[PlanEntry]) -> String {
    let mut s = String::from(
        "# sparsek plan cache: tuned kernel plans, one per line, tab-separated (written by Gpu::tune and `sparsek \
         tune`; safe to delete)\n# device\tcc\tdriver\tmodules\top\tinput\tb\tout\tc\tbs\tm\tk\tn_bucket\t\
         nnzb_bucket\tskew_bucket\tfamily\tgroup_rows\ttuned_us\theuristic_us\tunix_time\n",
    );
    s.push_str(&format!("{MAGIC}\t{VERSION}\n"));
    for e in entries {
        let (d, k, c) = (&e.device, &e.key, &e.cached);
        s.push_str(&format!(
            "{}\t{}.{}\t{}\t{}\tspmm\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{:.3}\t{:.3}\t{}\n",
            d.name,
            d.compute_capability.0,
            d.compute_capability.1,
            d.driver_version,
            d.modules,
            k.input.name(),
            k.b_layout.name(),
            k.out.name(),
            k.c_layout.name(),
            k.bs,
            k.m,
            k.k,
            k.n_bucket,
            k.nnzb_bucket,
            k.skew_bucket,
            c.plan.family.name(),
            c.plan.group_name(),
            c.tuned_us,
            c.heuristic_us,
            c.unix_time,
        ));
    }
    s
}

/// The entries of a cache file, or why it cannot be used (with the line number).
fn parse(text: &str) -> std::result::Result<Vec<PlanEntry>, String> {
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.starts_with('#') && !l.trim().is_empty());
    match lines.next() {
        Some((_, l)) if l == format!("{MAGIC}\t{VERSION}") => {}
        Some((_, l)) if l.starts_with(MAGIC) => {
            return Err(format!(
                "written by another version of sparsek (header '{}', this version reads '{MAGIC} {VERSION}')",
                l.replace('\t', " ")
            ));
        }
        Some((i, _)) => return Err(format!("line {}: not a sparsek plan cache header", i + 1)),
        None => return Ok(Vec::new()),
    }
    lines.map(|(i, l)| parse_entry(l).map_err(|e| format!("line {}: {e}", i + 1))).collect()
}

fn parse_entry(line: &str) -> std::result::Result<PlanEntry, String> {
    let f: Vec<&str> = line.split('\t').collect();
    if f.len() != FIELDS {
        return Err(format!("{} fields, expected {FIELDS}", f.len()));
    }
    fn num<T: std::str::FromStr>(what: &str, s: &str) -> std::result::Result<T, String> {
        s.parse().map_err(|_| format!("{what} '{s}' is not a valid number"))
    }
    let layout = |what: &str, s: &str| match s {
        "row" => Ok(Layout::RowMajor),
        "col" => Ok(Layout::ColMajor),
        _ => Err(format!("{what} layout '{s}' is neither row nor col")),
    };
    let (major, minor) = f[1].split_once('.').ok_or_else(|| format!("compute capability '{}'", f[1]))?;
    if f[4] != "spmm" {
        return Err(format!("unknown op '{}'", f[4]));
    }
    let input = match f[5] {
        "f16" => InType::F16,
        "bf16" => InType::Bf16,
        s => return Err(format!("input type '{s}'")),
    };
    let out = match f[7] {
        "f32" => OutType::F32,
        "f16" => OutType::F16,
        "bf16" => OutType::Bf16,
        s => return Err(format!("output type '{s}'")),
    };
    let bs: u32 = num("bs", f[9])?;
    if !matches!(bs, 16 | 32 | 64 | 128) {
        return Err(format!("block size {bs}"));
    }
    let family = KernelFamily::parse(f[15]).ok_or_else(|| format!("unknown kernel family '{}'", f[15]))?;
    let group_rows = match f[16] {
        "auto" => None,
        s => match num::<u32>("group_rows", s)? {
            0 => return Err("group_rows 0".into()),
            r => Some(r),
        },
    };
    let time = |what: &str, s: &str| {
        num::<f64>(what, s).and_then(|t| if t.is_finite() && t >= 0.0 { Ok(t) } else { Err(format!("{what} {t}")) })
    };
    Ok(PlanEntry {
        device: DeviceKey::new(f[0], (num("cc", major)?, num("cc", minor)?), num("driver", f[2])?, f[3]),
        key: PlanKey {
            input,
            b_layout: layout("B", f[6])?,
            out,
            c_layout: layout("C", f[8])?,
            bs,
            m: num("m", f[10])?,
            k: num("k", f[11])?,
            n_bucket: num("n_bucket", f[12])?,
            nnzb_bucket: num("nnzb_bucket", f[13])?,
            skew_bucket: num("skew_bucket", f[14])?,
        },
        cached: CachedPlan {
            plan: Plan { family, group_rows },
            tuned_us: time("tuned_us", f[17])?,
            heuristic_us: time("heuristic_us", f[18])?,
            unix_time: num("unix_time", f[19])?,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(name: &str) -> DeviceKey {
        DeviceKey::new(name, (9, 0), 13000, "sm80:c803521177bb51ad+sm90a:9d45bd550b941dbc")
    }

    fn entry(dev: &str, m: u64, family: KernelFamily, group_rows: Option<u32>) -> PlanEntry {
        let key = PlanKey::new(
            (InType::F16, Layout::RowMajor, OutType::F32, Layout::RowMajor),
            64,
            (0, 0, 16),
            2000,
            Some(40),
        );
        PlanEntry {
            device: device(dev),
            key: PlanKey { m, k: 4096, ..key },
            cached: CachedPlan {
                plan: Plan { family, group_rows },
                tuned_us: 12.5,
                heuristic_us: 20.25,
                unix_time: 1_795_000_000,
            },
        }
    }

    /// A fresh directory under the system's temporary directory (removed by the test).
    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sparsek-plan-cache-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn round_trip_and_replace() {
        let dir = scratch("round-trip");
        let cache = PlanCache::in_dir(dir.join("nested/deeper"));
        assert!(cache.read().entries.is_empty() && cache.read().warning.is_none(), "a missing file is empty");
        let a = entry("NVIDIA H100 80GB HBM3", 8192, KernelFamily::Decode, None);
        let b = entry("NVIDIA H100 80GB HBM3", 4096, KernelFamily::Wide, Some(16));
        let other_gpu = entry("NVIDIA A100-SXM4-80GB", 8192, KernelFamily::Narrow, Some(u32::MAX));
        assert_eq!(cache.save(&[a.clone(), b.clone()]).unwrap(), 2);
        assert_eq!(cache.save(std::slice::from_ref(&other_gpu)).unwrap(), 3);
        let read = cache.read();
        assert!(read.warning.is_none(), "{:?}", read.warning);
        for e in [&a, &b, &other_gpu] {
            assert!(read.entries.contains(e), "{e:?} lost");
        }
        // Same device and key: replaced, not duplicated.
        let a2 = PlanEntry { cached: CachedPlan { tuned_us: 9.0, ..a.cached }, ..a.clone() };
        assert_eq!(cache.save(std::slice::from_ref(&a2)).unwrap(), 3);
        assert!(cache.read().entries.contains(&a2) && !cache.read().entries.contains(&a));
        // Writing is deterministic: the same entries give the same bytes whatever the order they came in.
        let text = fs::read_to_string(cache.path().unwrap()).unwrap();
        let again = PlanCache::in_dir(dir.join("again"));
        again.save(&[other_gpu, b, a2]).unwrap();
        assert_eq!(fs::read_to_string(again.path().unwrap()).unwrap(), text);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn corrupt_and_other_version_files_are_ignored_with_a_warning_and_replaced() {
        let dir = scratch("corrupt");
        let cache = PlanCache::in_dir(&dir);
        let good = entry("GPU", 1024, KernelFamily::Narrow, None);
        cache.save(std::slice::from_ref(&good)).unwrap();
        let path = cache.path().unwrap().to_path_buf();
        let text = fs::read_to_string(&path).unwrap();
        let corruptions = [
            (text.replace("\tnarrow\t", "\tfastest\t"), "unknown kernel family"),
            (text.replace("\t64\t1024\t", "\t48\t1024\t"), "block size 48"),
            (text.replace("\tauto\t", "\t0\t"), "group_rows 0"),
            (text.replace("\t12.500\t", "\tNaN\t"), "tuned_us"),
            (text.replace("\t12.500\t", "\t12.500\textra\t"), "fields"),
            (format!("{}garbage\n", text), "fields"),
            (text.replace("sparsek-plans\t1", "sparsek-plans\t2"), "another version"),
            ("\u{0}\u{1}binary".to_string(), "header"),
            // Cut short inside the plan line.
            (text[..text.len() - 20].to_string(), "fields"),
        ];
        for (bad, why) in corruptions {
            fs::write(&path, &bad).unwrap();
            let read = cache.read();
            let warning = read.warning.unwrap_or_else(|| panic!("no warning for {bad:?}"));
            assert!(read.entries.is_empty());
            assert!(warning.contains(why) && warning.contains("ignoring"), "{warning} (expected '{why}')");
            // The next save replaces the bad file with a good one.
            assert_eq!(cache.save(std::slice::from_ref(&good)).unwrap(), 1);
            assert_eq!(cache.read().entries, vec![good.clone()]);
        }
        // Not UTF-8 at all.
        fs::write(&path, [0xff, 0xfe, 0x00]).unwrap();
        assert!(cache.read().warning.is_some());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unwritable_locations_are_errors_not_panics() {
        let dir = scratch("unwritable");
        fs::create_dir_all(&dir).unwrap();
        // A regular file where the directory should be: no user (root included) can create the cache in it.
        let blocker = dir.join("not-a-dir");
        fs::write(&blocker, "x").unwrap();
        let cache = PlanCache::in_dir(blocker.join("sub"));
        let e = cache.save(&[entry("GPU", 1, KernelFamily::Wide, None)]).unwrap_err();
        assert!(e.to_string().contains("plan cache") && e.to_string().contains("not-a-dir"), "{e}");
        assert!(cache.read().entries.is_empty());
        // A read-only directory: an error for ordinary users (root may write anyway; then the plan is saved).
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let ro = dir.join("read-only");
            fs::create_dir_all(&ro).unwrap();
            fs::set_permissions(&ro, fs::Permissions::from_mode(0o555)).unwrap();
            let cache = PlanCache::in_dir(&ro);
            match cache.save(&[entry("GPU", 1, KernelFamily::Wide, None)]) {
                Err(e) => assert!(e.to_string().contains("plan cache"), "{e}"),
                Ok(n) => assert_eq!((n, cache.read().entries.len()), (1, 1)),
            }
            fs::set_permissions(&ro, fs::Permissions::from_mode(0o755)).unwrap();
        }
        // Clearing: the file goes, a second clear finds none, a missing directory is not an error.
        let ok = PlanCache::in_dir(dir.join("clear"));
        ok.save(&[entry("GPU", 1, KernelFamily::Wide, None)]).unwrap();
        assert!(ok.clear().unwrap());
        assert!(!ok.clear().unwrap());
        assert!(ok.read().entries.is_empty() && ok.read().warning.is_none());
        assert!(!PlanCache::in_dir(dir.join("never/made")).clear().unwrap());
        // Memory and off never touch a file.
        assert_eq!(PlanCache::memory().save(&[entry("GPU", 1, KernelFamily::Wide, None)]).unwrap(), 0);
        assert_eq!(PlanCache::off().save(&[]).unwrap(), 0);
        assert!(PlanCache::off().read().entries.is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn concurrent_writers_lose_nothing() {
        let dir = scratch("concurrent");
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let dir = dir.clone();
                std::thread::spawn(move || {
                    // Each writer has its own PlanCache (its own lock-file handle, as another process would).
                    for i in 0..10 {
                        let cache = PlanCache::in_dir(&dir);
                        cache.save(&[entry("GPU", 1000 * t + i, KernelFamily::Narrow, Some(8))]).unwrap();
                        // Readers never see a partial file.
                        assert!(cache.read().warning.is_none());
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let read = PlanCache::in_dir(&dir).read();
        assert!(read.warning.is_none());
        assert_eq!(read.entries.len(), 80);
        // No temporary file left behind.
        let leftovers: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .filter(|n| n.contains(".tmp."))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn environment_choices() {
        // Only the parsing of the variable's values (the process environment is shared between tests).
        assert!(PlanCache::off().is_off());
        assert_eq!(PlanCache::in_dir("/x").path(), Some(Path::new("/x/plans-v1.tsv")));
        assert!(PlanCache::memory().path().is_none() && !PlanCache::memory().is_off());
        assert!(PlanCache::default_dir().is_none_or(|d| d.ends_with("sparsek")));
    }
}
