//! The plan cache file: tuned plans, one tab-separated line each, under the user's cache directory.
//!
//! Writers take an exclusive lock on a side file (`plans-v1.tsv.lock`), read the current file, merge their plans
//! in (a plan for the same device and key replaces the old one), write a temporary file next to it, sync it,
//! rename it over the old one and sync the directory, so readers (who take no lock) always see a whole file,
//! concurrent writers from several processes lose nothing, and a crash leaves the old file or the new one.
//!
//! The file is untrusted input, and no good plan is lost to a bad one:
//! - **Line by line.** A line that cannot be parsed (a bad field, a bad byte, a cut line) is skipped with one
//!   warning for the whole file (how many lines, the first one's number and reason), and the file's other plans
//!   are used; the next save keeps them and drops the bad lines. Only a file that is not a plan cache at all
//!   (no header) or that another format version wrote is ignored whole.
//! - **What save writes, read reads.** [`PlanCache::save`] checks every new entry with the reader's own rules
//!   (it renders the line and parses it back): a NaN or negative time, a tab, newline or carriage return in a
//!   name, a name starting with `#` (a comment to the reader) are [`Error::InvalidArgument`], and nothing is
//!   written.
//! - **Bounded.** Only a regular file is read (a FIFO, a device such as `/dev/zero`, a directory: a warning,
//!   without blocking: its type is checked before opening, and it is opened non-blocking), and at most
//!   [`PlanCache::MAX_FILE_BYTES`]; a warning quotes at most [`PlanCache::QUOTE_BYTES`] bytes of the input.
//! - **The lock.** A writer that finds the lock held says so once on stderr and waits at most
//!   [`PlanCache::LOCK_TIMEOUT`], then gives up with
//!   [`Error::Io`] naming the lock file.
//! - **No leftovers.** Temporary files are written only under the lock, so one found while holding it is
//!   a killed writer's: it is deleted.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{DeviceKey, InType, KernelFamily, Layout, OutType, Plan, PlanKey};
use crate::error::{Error, Result};

/// The format version written in the file's header; a file with another version is ignored.
const VERSION: u32 = 2;
const MAGIC: &str = "sparsek-plans";
/// Fields of a plan line.
const FIELDS: usize = 22;
const MAX_FILE_BYTES: u64 = PlanCache::MAX_FILE_BYTES;
const QUOTE_BYTES: usize = PlanCache::QUOTE_BYTES;

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

/// What a cache file held: every entry (all devices), and a warning when the file, or some of its lines, were
/// ignored.
#[derive(Clone, Debug, Default)]
pub struct CacheContents {
    /// The plans, for every device the file has seen.
    pub entries: Vec<PlanEntry>,
    /// Why the file, or some of its lines, were ignored (unreadable, not a regular file, too large, bad lines,
    /// another format version), when they were: one line, quoting at most [`PlanCache::QUOTE_BYTES`] of the input.
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
    lock_timeout: Duration,
}

impl PlanCache {
    /// The file's name inside the cache directory.
    pub const FILE_NAME: &'static str = "plans-v1.tsv";

    /// The most bytes of the cache file read: 16 MiB (a plan line is about 150 bytes). Beyond, the rest is
    /// ignored with a warning.
    pub const MAX_FILE_BYTES: u64 = 16 << 20;

    /// The most bytes of input a warning quotes.
    pub const QUOTE_BYTES: usize = 40;

    /// How long [`PlanCache::save`] and [`PlanCache::clear`] wait for another writer's lock by default: 10 s
    /// (a save holds it for milliseconds).
    pub const LOCK_TIMEOUT: Duration = Duration::from_secs(10);

    /// The same cache, waiting at most `timeout` for the writers' lock (the tests' shorter wait).
    #[cfg(test)]
    pub(crate) fn with_lock_timeout(mut self, timeout: Duration) -> PlanCache {
        self.lock_timeout = timeout;
        self
    }

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
        PlanCache { mode: Mode::File(dir.into().join(Self::FILE_NAME)), lock_timeout: Self::LOCK_TIMEOUT }
    }

    /// Plans tuned in this process serve its later launches; nothing is read or written.
    pub fn memory() -> PlanCache {
        PlanCache { mode: Mode::Memory, lock_timeout: Self::LOCK_TIMEOUT }
    }

    /// No plans at all: every launch takes the built-in heuristic's kernel, tuned or not.
    pub fn off() -> PlanCache {
        PlanCache { mode: Mode::Off, lock_timeout: Self::LOCK_TIMEOUT }
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

    /// Every plan in the file. Never fails nor blocks: a missing file is an empty cache; a file that is not a
    /// regular file, cannot be read, is not a plan cache or another version's is an empty cache with a warning
    /// saying why; bad lines are skipped with one warning (the other plans are kept); at most
    /// [`PlanCache::MAX_FILE_BYTES`] are read.
    pub fn read(&self) -> CacheContents {
        let Some(path) = self.path() else { return CacheContents::default() };
        match read_bounded(path) {
            Ok(None) => CacheContents::default(),
            Ok(Some((bytes, cut))) => {
                let (entries, mut warning) = parse(&bytes);
                if cut {
                    let w = format!("only its first {MAX_FILE_BYTES} bytes were read");
                    warning = Some(warning.map_or(w.clone(), |x| format!("{x}; {w}")));
                }
                let warning = warning.map(|w| format!("plan cache {}: {w}", path.display()));
                CacheContents { entries, warning }
            }
            Err(reason) => CacheContents {
                entries: Vec::new(),
                warning: Some(format!("ignoring the plan cache {}: {reason}", path.display())),
            },
        }
    }

    /// Takes the writers' lock on `<file>.lock`: at once if free, else after saying so once on stderr, polling
    /// until [`PlanCache::LOCK_TIMEOUT`] has passed ([`Error::Io`] then). `Ok(None)` when the lock
    /// file's directory does not exist and `create_dir` is false.
    fn lock(&self, path: &Path, create_dir: bool) -> Result<Option<File>> {
        let lock_path = path.with_extension("tsv.lock");
        let io = |what: &str, e: std::io::Error| Error::Io {
            path: lock_path.display().to_string(),
            reason: format!("plan cache: {what}: {e}"),
        };
        let lock = match OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !create_dir => return Ok(None),
            Err(e) => return Err(io("cannot open the lock file", e)),
        };
        let start = Instant::now();
        let mut said = false;
        loop {
            match lock.try_lock() {
                Ok(()) => return Ok(Some(lock)),
                Err(std::fs::TryLockError::Error(e)) => return Err(io("cannot lock", e)),
                Err(std::fs::TryLockError::WouldBlock) => {}
            }
            let waited = start.elapsed();
            if waited >= self.lock_timeout {
                return Err(Error::Io {
                    path: lock_path.display().to_string(),
                    reason: format!(
                        "plan cache: gave up waiting for the lock after {:.1} s (another process holds it; delete \
                         the lock file only if no sparsek process is running)",
                        waited.as_secs_f64()
                    ),
                });
            }
            if !said {
                eprintln!(
                    "sparsek: waiting for the plan cache lock {} (another process is saving plans; giving up after \
                     {:.0} s)",
                    lock_path.display(),
                    self.lock_timeout.as_secs_f64()
                );
                said = true;
            }
            std::thread::sleep(Duration::from_millis(20).min(self.lock_timeout.saturating_sub(waited)));
        }
    }

    /// Merges `new` into the file (an entry for the same device and key replaces the old one) and returns how
    /// many plans the file holds afterwards; with plans in memory or off, does nothing and returns 0. Safe when
    /// several processes save at once (an exclusive lock on `<file>.lock`, then an atomic rename). A corrupt or
    /// other-version file is replaced. Errors ([`Error::Io`]) name the path and the reason: a directory that
    /// cannot be created or written, a full disk.
    pub fn save(&self, new: &[PlanEntry]) -> Result<usize> {
        let Some(path) = self.path() else { return Ok(0) };
        // What is written must read back: checked before anything is touched.
        for e in new {
            check_entry(e)?;
        }
        let io = |p: &Path, what: &str, e: std::io::Error| Error::Io {
            path: p.display().to_string(),
            reason: format!("plan cache: {what}: {e}"),
        };
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        if let Some(dir) = dir {
            fs::create_dir_all(dir).map_err(|e| io(dir, "cannot create the directory", e))?;
        }
        let lock = self.lock(path, true)?;
        remove_stale_temporaries(path);
        // Under the lock: what other writers saved (good lines only), then ours over it.
        let mut entries = match read_bounded(path) {
            Ok(Some((bytes, _))) => parse(&bytes).0,
            Ok(None) | Err(_) => Vec::new(),
        };
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
        // The rename is durable once the directory is synced.
        #[cfg(unix)]
        if let Some(dir) = dir {
            File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io(dir, "cannot sync the directory", e))?;
        }
        drop(lock);
        Ok(entries.len())
    }
}

/// Checks that `e` reads back as itself (the reader's own rules): a device name or build with a tab, a line
/// break or a leading `#`, a time that is NaN, infinite or negative are [`Error::InvalidArgument`].
fn check_entry(e: &PlanEntry) -> Result<()> {
    let bad = |reason: String| Error::InvalidArgument { name: "plan cache entry", reason };
    let d = &e.device;
    for (what, s) in [("device name", d.name.as_str()), ("module build", d.modules.as_str())] {
        if s.contains(['\t', '\n', '\r']) {
            return Err(bad(format!("the {what} {} holds a tab or a line break", quote(s.as_bytes()))));
        }
    }
    if d.name.starts_with('#') {
        return Err(bad(format!("the device name {} starts with '#' (a comment line)", quote(d.name.as_bytes()))));
    }
    let line = render_entry(e);
    let back =
        parse_entry(line.trim_end_matches('\n')).map_err(|why| bad(format!("it would not read back ({why})")))?;
    if back.device != e.device || back.key != e.key || back.cached.plan != e.cached.plan {
        return Err(bad(format!("it would read back as another entry: {}", quote(line.as_bytes()))));
    }
    Ok(())
}

/// Deletes the temporary files a killed writer left next to `path` (`<file>.tmp.<pid>.<n>`). Called under the
/// writers' lock, outside which no temporary file is written: every one found is stale.
fn remove_stale_temporaries(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else { return };
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    let prefix = format!("{name}.tmp.");
    let Ok(list) = fs::read_dir(dir) else { return };
    for entry in list.flatten().take(10_000) {
        if entry.file_name().to_str().is_some_and(|n| n.starts_with(&prefix))
            && entry.file_type().is_ok_and(|t| t.is_file())
        {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// The bytes of the cache file (at most [`PlanCache::MAX_FILE_BYTES`], and whether it was longer), `None` when there is
/// none, or why it cannot be read. Never blocks: anything but a regular file (after following symbolic links)
/// is refused before it is opened, and it is opened non-blocking (a FIFO swapped in meanwhile does not wait for
/// a writer) and checked again once open.
fn read_bounded(path: &Path) -> std::result::Result<Option<(Vec<u8>, bool)>, String> {
    let not_regular = |t: fs::FileType| {
        let what = if t.is_dir() { "a directory" } else { "not a regular file (a FIFO, socket or device?)" };
        format!("it is {what}")
    };
    match fs::metadata(path) {
        Ok(m) if !m.is_file() => return Err(not_regular(m.file_type())),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read it: {e}")),
    }
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(0o4000); // O_NONBLOCK on these targets (no libc dependency for one constant)
    }
    let file = match options.open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read it: {e}")),
    };
    match file.metadata() {
        Ok(m) if !m.is_file() => return Err(not_regular(m.file_type())),
        Ok(_) => {}
        Err(e) => return Err(format!("cannot read it: {e}")),
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(|e| format!("cannot read it: {e}"))?;
    let cut = bytes.len() as u64 > MAX_FILE_BYTES;
    if cut {
        // Keep whole lines only.
        bytes.truncate(MAX_FILE_BYTES as usize);
        let end = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        bytes.truncate(end);
    }
    Ok(Some((bytes, cut)))
}

/// At most [`PlanCache::QUOTE_BYTES`] of `s`, in quotes, printable ASCII only (anything else shown as `?`), with `...` and
/// the full length when cut.
fn quote(s: &[u8]) -> String {
    let shown: String =
        s.iter().take(QUOTE_BYTES).map(|&b| if b == b' ' || b.is_ascii_graphic() { b as char } else { '?' }).collect();
    if s.len() > QUOTE_BYTES { format!("'{shown}'... ({} bytes)", s.len()) } else { format!("'{shown}'") }
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
        // No directory: nothing to clear.
        let Some(_lock) = self.lock(path, false)? else { return Ok(false) };
        remove_stale_temporaries(path);
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
         nnzb_bucket\tskew_bucket\tfamily\tgroup_rows\trow_split\ttile_schedule\ttuned_us\theuristic_us\tunix_time\n",
    );
    s.push_str(&format!("{MAGIC}\t{VERSION}\n"));
    for e in entries {
        s.push_str(&render_entry(e));
    }
    s
}

/// One plan line, with its line feed.
fn render_entry(e: &PlanEntry) -> String {
    let (d, k, c) = (&e.device, &e.key, &e.cached);
    let [input, b_layout, out, c_layout] = k.type_names();
    format!(
        "{}\t{}.{}\t{}\t{}\tspmm\t{input}\t{b_layout}\t{out}\t{c_layout}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\
         \t{:.3}\t{:.3}\t{}\n",
        d.name,
        d.compute_capability.0,
        d.compute_capability.1,
        d.driver_version,
        d.modules,
        k.bs,
        k.m,
        k.k,
        k.n_bucket,
        k.nnzb_bucket,
        k.skew_bucket,
        c.plan.family.name(),
        c.plan.group_name(),
        c.plan.row_split_name(),
        c.plan.tile_schedule_name(),
        c.tuned_us,
        c.heuristic_us,
        c.unix_time,
    )
}

/// The entries of a cache file's bytes and, when some were ignored, why (one line, no path): a file without the
/// header or with another version's is ignored whole; a bad line (not UTF-8, a bad field) is skipped, counted,
/// and the first named.
fn parse(bytes: &[u8]) -> (Vec<PlanEntry>, Option<String>) {
    let mut lines = bytes
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .enumerate()
        .filter(|(_, l)| !l.starts_with(b"#") && !l.trim_ascii().is_empty());
    let header = format!("{MAGIC}\t{VERSION}");
    match lines.next() {
        Some((_, l)) if l == header.as_bytes() => {}
        Some((_, l)) if l.starts_with(MAGIC.as_bytes()) => {
            let w = format!(
                "ignored: written by another version of sparsek (header {}, this version reads '{MAGIC} {VERSION}')",
                quote(l)
            );
            return (Vec::new(), Some(w));
        }
        Some((i, l)) => {
            return (
                Vec::new(),
                Some(format!("ignored: line {}: not a sparsek plan cache header {}", i + 1, quote(l))),
            );
        }
        None => return (Vec::new(), None),
    }
    let mut entries = Vec::new();
    let (mut bad, mut first) = (0usize, None);
    for (i, l) in lines {
        let parsed = std::str::from_utf8(l).map_err(|_| "not UTF-8".to_string()).and_then(parse_entry);
        match parsed {
            Ok(e) => entries.push(e),
            Err(why) => {
                bad += 1;
                first.get_or_insert(format!("line {}: {why}", i + 1));
            }
        }
    }
    let warning = first.map(|f| format!("skipped {bad} unreadable lines (the first, {f}); the other plans are used"));
    (entries, warning)
}

fn parse_entry(line: &str) -> std::result::Result<PlanEntry, String> {
    let f: Vec<&str> = line.split('\t').collect();
    if f.len() != FIELDS {
        return Err(format!("{} fields, expected {FIELDS}", f.len()));
    }
    fn num<T: std::str::FromStr>(what: &str, s: &str) -> std::result::Result<T, String> {
        s.parse().map_err(|_| format!("{what} {} is not a valid number", quote(s.as_bytes())))
    }
    let layout = |what: &str, s: &str| match s {
        "row" => Ok(Layout::RowMajor),
        "col" => Ok(Layout::ColMajor),
        _ => Err(format!("{what} layout {} is neither row nor col", quote(s.as_bytes()))),
    };
    let (major, minor) =
        f[1].split_once('.').ok_or_else(|| format!("compute capability {}", quote(f[1].as_bytes())))?;
    if f[4] != "spmm" {
        return Err(format!("unknown op {}", quote(f[4].as_bytes())));
    }
    let input = match f[5] {
        "f16" => InType::F16,
        "bf16" => InType::Bf16,
        s => return Err(format!("input type {}", quote(s.as_bytes()))),
    };
    let out = match f[7] {
        "f32" => OutType::F32,
        "f16" => OutType::F16,
        "bf16" => OutType::Bf16,
        s => return Err(format!("output type {}", quote(s.as_bytes()))),
    };
    let bs: u32 = num("bs", f[9])?;
    if !matches!(bs, 16 | 32 | 64 | 128) {
        return Err(format!("block size {bs}"));
    }
    let family =
        KernelFamily::parse(f[15]).ok_or_else(|| format!("unknown kernel family {}", quote(f[15].as_bytes())))?;
    let group_rows = match f[16] {
        "auto" => None,
        s => match num::<u32>("group_rows", s)? {
            0 => return Err("group_rows 0".into()),
            r => Some(r),
        },
    };
    let row_split =
        Plan::parse_row_split(f[17]).ok_or_else(|| format!("unknown row split {}", quote(f[17].as_bytes())))?;
    let tile_schedule =
        Plan::parse_tile_schedule(f[18]).ok_or_else(|| format!("unknown tile schedule {}", quote(f[18].as_bytes())))?;
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
            plan: Plan { family, group_rows, row_split, tile_schedule },
            tuned_us: time("tuned_us", f[19])?,
            heuristic_us: time("heuristic_us", f[20])?,
            unix_time: num("unix_time", f[21])?,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{RowSplit, TileSchedule};

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
                plan: Plan { group_rows, ..Plan::new(family) },
                tuned_us: 12.5,
                heuristic_us: 20.25,
                unix_time: 1_795_000_000,
            },
        }
    }

    /// A fresh directory under the system's temporary directory, removed when the test passes.
    fn scratch(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("sparsek-plan-cache-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        Scratch(d)
    }

    /// A test's directory, removed when the test ends (kept when it fails, to be looked at).
    struct Scratch(PathBuf);

    impl std::ops::Deref for Scratch {
        type Target = PathBuf;
        fn deref(&self) -> &PathBuf {
            &self.0
        }
    }

    impl AsRef<std::ffi::OsStr> for Scratch {
        fn as_ref(&self) -> &std::ffi::OsStr {
            self.0.as_os_str()
        }
    }

    impl AsRef<std::path::Path> for Scratch {
        fn as_ref(&self) -> &std::path::Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            if !std::thread::panicking() {
                fs::remove_dir_all(&self.0).unwrap();
            }
        }
    }

    /// Whole plans (the decomposition the tuner measured) round-trip; a file of the previous format (version 1:
    /// family and group only) is ignored whole with the other-version warning and replaced on the next save.
    #[test]
    fn whole_plans_round_trip_and_version_1_files_are_ignored() {
        let dir = scratch("whole-plans");
        let cache = PlanCache::in_dir(&dir);
        let mut entries = Vec::new();
        for (i, (row_split, tile_schedule)) in [
            (RowSplit::Off, TileSchedule::Auto),
            (RowSplit::Blocks(12), TileSchedule::Auto),
            (RowSplit::Flat(2), TileSchedule::Auto),
            (RowSplit::Flat(0), TileSchedule::Auto),
            (RowSplit::Auto, TileSchedule::PerTile),
            (RowSplit::Auto, TileSchedule::Static),
        ]
        .into_iter()
        .enumerate()
        {
            let mut e = entry("GPU", 1000 + i as u64, KernelFamily::Narrow, Some(8));
            e.cached.plan = e.cached.plan.with_decomposition(row_split, tile_schedule);
            entries.push(e);
        }
        cache.save(&entries).unwrap();
        let read = cache.read();
        assert!(read.warning.is_none(), "{:?}", read.warning);
        assert_eq!(read.entries, entries);
        // What version 1 wrote (sparsek at 9e7fe91): 20 fields, no decomposition.
        let v1 = "# sparsek plan cache\nsparsek-plans\t1\nNVIDIA H100 80GB HBM3\t9.0\t13000\tsm80:aa+sm90a:bb\tspmm\t\
                  f16\trow\tf32\trow\t64\t8192\t8192\t16\t40\t3\tnarrow\tauto\t12.500\t20.250\t1795000000\n";
        fs::write(cache.path().unwrap(), v1).unwrap();
        let read = cache.read();
        let warning = read.warning.unwrap();
        assert!(read.entries.is_empty() && warning.contains("another version"), "{warning}");
        assert_eq!(cache.save(&entries[..1]).unwrap(), 1);
        assert_eq!(cache.read().entries, entries[..1]);
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
    }

    #[test]
    fn bad_lines_are_skipped_and_other_plans_kept() {
        let dir = scratch("corrupt");
        let cache = PlanCache::in_dir(&dir);
        let good = entry("GPU", 1024, KernelFamily::Narrow, None);
        let other = entry("GPU", 2048, KernelFamily::Wide, Some(8));
        cache.save(&[good.clone(), other.clone()]).unwrap();
        let path = cache.path().unwrap().to_path_buf();
        let text = fs::read_to_string(&path).unwrap();
        let line = text.lines().find(|l| l.contains("\t1024\t")).unwrap().to_string();
        let long = "x".repeat(1 << 20);
        let lines = [
            (line.replace("\tnarrow\t", "\tfastest\t"), "unknown kernel family"),
            (line.replace("\t64\t1024\t", "\t48\t1024\t"), "block size 48"),
            (line.replace("\tauto\tauto\tauto\t", "\t0\tauto\tauto\t"), "group_rows 0"),
            (line.replace("\tauto\tauto\t12.5", "\tsplit\tauto\t12.5"), "unknown row split"),
            (line.replace("\tauto\tauto\t12.5", "\trows-0\tauto\t12.5"), "unknown row split"),
            (line.replace("\tauto\tauto\t12.5", "\tauto\tcounter\t12.5"), "unknown tile schedule"),
            (line.replace("\t12.500\t", "\tNaN\t"), "tuned_us"),
            (line.replace("\t12.500\t", "\t12.500\textra\t"), "fields"),
            (line.replace("\tnarrow\t", &format!("\t{long}\t")), "unknown kernel family"),
            (line[..line.len() - 20].to_string(), "fields"),
        ];
        for (bad, why) in lines {
            fs::write(&path, text.replace(&line, &bad)).unwrap();
            let read = cache.read();
            let warning = read.warning.unwrap_or_else(|| panic!("no warning for {bad:?}"));
            assert_eq!(read.entries, vec![other.clone()], "the good line is kept");
            assert!(warning.contains(why) && warning.contains("skipped 1 unreadable lines"), "{warning} ({why})");
            assert!(warning.len() < 300, "an unbounded warning: {} bytes", warning.len());
            // The next save keeps the other plan.
            assert_eq!(cache.save(std::slice::from_ref(&good)).unwrap(), 2);
            assert_eq!(cache.read().entries, vec![good.clone(), other.clone()]);
        }
        // A bad byte in one line: that line only.
        let mut bytes = text.replace(&line, &line.replace("GPU", "G\u{1}U")).into_bytes();
        let at = bytes.iter().position(|&b| b == 1).unwrap();
        bytes[at] = 0xff;
        fs::write(&path, &bytes).unwrap();
        let read = cache.read();
        assert_eq!(read.entries, vec![other.clone()]);
        assert!(read.warning.unwrap().contains("not UTF-8"));
        // Not a plan cache, or another version's: ignored whole, with a short warning, and replaced on save.
        for (bad, why) in [
            (text.replace("sparsek-plans\t2", "sparsek-plans\t1"), "another version"),
            (text.replace("sparsek-plans\t2", "sparsek-plans\t3"), "another version"),
            ("\u{0}\u{1}binary".to_string(), "header"),
            (format!("{long}\n{text}"), "header"),
        ] {
            fs::write(&path, &bad).unwrap();
            let read = cache.read();
            let warning = read.warning.unwrap();
            assert!(read.entries.is_empty() && warning.contains(why) && warning.contains("ignored"), "{warning}");
            assert!(warning.len() < 300, "{warning}");
            assert_eq!(cache.save(std::slice::from_ref(&good)).unwrap(), 1);
            assert_eq!(cache.read().entries, vec![good.clone()]);
        }
        fs::write(&path, [0xff, 0xfe, 0x00]).unwrap();
        assert!(cache.read().warning.is_some());
    }

    #[test]
    fn save_refuses_what_read_would_reject() {
        let dir = scratch("validate");
        let cache = PlanCache::in_dir(&dir);
        let good = entry("GPU", 1024, KernelFamily::Narrow, None);
        cache.save(std::slice::from_ref(&good)).unwrap();
        let before = fs::read(cache.path().unwrap()).unwrap();
        // Built field by field (DeviceKey::new cleans names).
        let with_name =
            |name: &str| PlanEntry { device: DeviceKey { name: name.into(), ..device("x") }, ..good.clone() };
        let with_time = |t: f64| PlanEntry { cached: CachedPlan { tuned_us: t, ..good.cached }, ..good.clone() };
        let mut bad_modules = good.clone();
        bad_modules.device.modules = "sm80\tx".into();
        for bad in [
            with_time(f64::NAN),
            with_time(f64::INFINITY),
            with_time(-1.0),
            with_name("GPU\tX"),
            with_name("GPU\nX"),
            with_name("GPU\rX"),
            with_name("# GPU"),
            bad_modules,
        ] {
            let e = cache.save(&[entry("GPU", 7, KernelFamily::Wide, None), bad.clone()]).unwrap_err();
            assert!(matches!(&e, Error::InvalidArgument { name: "plan cache entry", .. }), "{bad:?}: {e}");
            assert_eq!(fs::read(cache.path().unwrap()).unwrap(), before, "{bad:?} changed the file");
        }
        // DeviceKey::new makes any name safe.
        assert_eq!(device("# GPU\tX\n").name, "GPU X");
        // What save accepts reads back.
        let odd = with_name("GPU with spaces, ünïcode and a # inside");
        cache.save(std::slice::from_ref(&odd)).unwrap();
        let read = cache.read();
        assert!(read.warning.is_none() && read.entries.contains(&odd), "{:?}", read.warning);
    }

    #[cfg(unix)]
    #[test]
    fn special_and_huge_files_are_refused_without_blocking() {
        let dir = scratch("special");
        fs::create_dir_all(&dir).unwrap();
        let cache = PlanCache::in_dir(&dir);
        let path = cache.path().unwrap().to_path_buf();
        let good = entry("GPU", 1024, KernelFamily::Narrow, None);
        // A FIFO with no writer (opening it for reading would block), /dev/zero (endless), a directory.
        let fifo = std::process::Command::new("mkfifo").arg(&path).status().is_ok_and(|s| s.success());
        let mut kinds = vec![];
        if fifo {
            kinds.push("fifo");
        }
        kinds.extend(["dev-zero", "directory"]);
        for kind in kinds {
            match kind {
                "fifo" => {}
                "dev-zero" => std::os::unix::fs::symlink("/dev/zero", &path).unwrap(),
                _ => fs::create_dir(&path).unwrap(),
            }
            let start = Instant::now();
            let read = cache.read();
            let warning = read.warning.unwrap_or_else(|| panic!("{kind}: no warning"));
            assert!(read.entries.is_empty() && warning.contains("it is"), "{kind}: {warning}");
            assert!(start.elapsed() < Duration::from_secs(2), "{kind}: read took {:?}", start.elapsed());
            if kind == "directory" {
                assert!(cache.save(std::slice::from_ref(&good)).is_err());
                fs::remove_dir(&path).unwrap();
            } else {
                // Saving replaces it with a plan cache.
                assert_eq!(cache.save(std::slice::from_ref(&good)).unwrap(), 1, "{kind}");
                assert_eq!(cache.read().entries, vec![good.clone()]);
                fs::remove_file(&path).unwrap();
            }
        }
        // A file beyond MAX_FILE_BYTES (sparse: no disk used): read up to the bound, with a warning.
        cache.save(std::slice::from_ref(&good)).unwrap();
        let f = OpenOptions::new().append(true).open(&path).unwrap();
        f.set_len(2 * MAX_FILE_BYTES).unwrap();
        let read = cache.read();
        assert_eq!(read.entries, vec![good.clone()]);
        let w = read.warning.unwrap();
        assert!(w.contains("only its first 16777216 bytes were read") && w.len() < 400, "{w}");
    }

    #[test]
    fn a_held_lock_is_waited_for_a_bounded_time() {
        let dir = scratch("lock");
        let cache = PlanCache::in_dir(&dir).with_lock_timeout(Duration::from_millis(300));
        let good = entry("GPU", 1024, KernelFamily::Narrow, None);
        cache.save(std::slice::from_ref(&good)).unwrap();
        // Another "process" holds the lock (its own handle).
        let held = OpenOptions::new().write(true).open(dir.join("plans-v1.tsv.lock")).unwrap();
        held.lock().unwrap();
        let start = Instant::now();
        let e = cache.save(&[entry("GPU", 7, KernelFamily::Wide, None)]).unwrap_err();
        let waited = start.elapsed();
        assert!(matches!(&e, Error::Io { reason, .. } if reason.contains("gave up waiting for the lock")), "{e}");
        assert!(waited >= Duration::from_millis(300) && waited < Duration::from_secs(5), "{waited:?}");
        assert!(cache.clear().unwrap_err().to_string().contains("gave up waiting"));
        assert_eq!(cache.read().entries, vec![good.clone()], "nothing changed");
        // Released meanwhile: the waiting writer goes on.
        let cache = cache.with_lock_timeout(Duration::from_secs(20));
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            drop(held);
        });
        assert_eq!(cache.save(&[entry("GPU", 7, KernelFamily::Wide, None)]).unwrap(), 2);
        releaser.join().unwrap();
    }

    #[test]
    fn a_killed_writers_temporary_file_is_removed() {
        let dir = scratch("stale");
        fs::create_dir_all(&dir).unwrap();
        let stale = [dir.join("plans-v1.tsv.tmp.4000000.0"), dir.join("plans-v1.tsv.tmp.1.17")];
        for f in &stale {
            fs::write(f, "sparsek-plans\t1\n").unwrap();
        }
        let unrelated = dir.join("plans-v1.tsv.bak");
        fs::write(&unrelated, "mine").unwrap();
        let cache = PlanCache::in_dir(&dir);
        cache.save(&[entry("GPU", 1, KernelFamily::Wide, None)]).unwrap();
        assert!(stale.iter().all(|f| !f.exists()), "stale temporary files left");
        assert!(unrelated.exists());
        fs::write(&stale[0], "x").unwrap();
        assert!(cache.clear().unwrap() && !stale[0].exists());
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
    }

    #[test]
    fn concurrent_writers_lose_nothing() {
        let dir = scratch("concurrent");
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let dir = dir.to_path_buf();
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
