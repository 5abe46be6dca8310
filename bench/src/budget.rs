//! Memory estimates for a run, checked before anything is allocated: a run that will not fit is refused with the
//! estimate and the limit, instead of being killed half-way (or aborting on an allocation).

/// Bytes of memory available to this process on the host: the least of what each limit leaves, where readable
/// (see [`host_limits`]): `MemAvailable` of /proc/meminfo, the address-space limit (`RLIMIT_AS`, as `ulimit -v`
/// sets it) less the address space in use, and the memory cgroup's limit less its usage (cgroup v2
/// `memory.max`, v1 `memory.limit_in_bytes`, of this process's cgroup and every ancestor). `None` when no limit
/// can be read.
pub fn host_available() -> Option<u128> {
    least(&host_limits())
}

/// The least of the limits' bytes (`None` for none).
fn least(limits: &[(&'static str, u128)]) -> Option<u128> {
    limits.iter().map(|l| l.1).min()
}

/// What each readable memory limit leaves to this process, in bytes, named (`"MemAvailable"`, `"RLIMIT_AS"`,
/// `"cgroup memory.max"`, `"cgroup memory.limit_in_bytes"`). Read from /proc and /sys (no system call needed).
pub fn host_limits() -> Vec<(&'static str, u128)> {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let mut out = Vec::new();
    if let Some(b) = read("/proc/meminfo").as_deref().and_then(|t| status_kib(t, "MemAvailable:")) {
        out.push(("MemAvailable", b));
    }
    if let Some(limit) = read("/proc/self/limits").as_deref().and_then(address_space_limit) {
        let used = read("/proc/self/status").as_deref().and_then(|t| status_kib(t, "VmSize:")).unwrap_or(0);
        out.push(("RLIMIT_AS", limit.saturating_sub(used)));
    }
    if let Some(text) = read("/proc/self/cgroup") {
        for (what, dir, max, usage) in cgroup_dirs(&text) {
            let value = |file: &str| read(&format!("{dir}/{file}")).and_then(|t| t.trim().parse::<u128>().ok());
            // "max" (v2) does not parse: no limit there; v1 writes a huge number for none.
            if let Some(limit) = value(max).filter(|&l| l < 1 << 62) {
                out.push((what, limit.saturating_sub(value(usage).unwrap_or(0))));
            }
        }
    }
    out
}

/// A `Name:   123 kB` line of /proc/meminfo or /proc/self/status, in bytes.
fn status_kib(text: &str, name: &str) -> Option<u128> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    let kib: u128 = line[name.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// The soft `Max address space` of /proc/self/limits in bytes; `None` when unlimited or unreadable.
fn address_space_limit(limits: &str) -> Option<u128> {
    let line = limits.lines().find_map(|l| l.strip_prefix("Max address space"))?;
    line.split_whitespace().next()?.parse().ok()
}

/// The memory cgroup directories of this process, innermost first, from /proc/self/cgroup: v2 (`0::/path`,
/// under /sys/fs/cgroup) and v1 (`N:...memory...:/path`, under /sys/fs/cgroup/memory), each with its
/// ancestors up to the mount's root (a limit set on a parent binds too; in a cgroup namespace the path may be
/// `/`, the root of the mount, which then holds the container's limit). Each entry: (name, directory, limit
/// file, usage file).
fn cgroup_dirs(proc_cgroup: &str) -> Vec<(&'static str, String, &'static str, &'static str)> {
    let mut out = Vec::new();
    for line in proc_cgroup.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(id), Some(ctrl), Some(path)) = (f.next(), f.next(), f.next()) else { continue };
        let (root, what, max, usage) = if id == "0" && ctrl.is_empty() {
            ("/sys/fs/cgroup", "cgroup memory.max", "memory.max", "memory.current")
        } else if ctrl.split(',').any(|c| c == "memory") {
            ("/sys/fs/cgroup/memory", "cgroup memory.limit_in_bytes", "memory.limit_in_bytes", "memory.usage_in_bytes")
        } else {
            continue;
        };
        let mut p = path.trim_end_matches('/').to_string();
        loop {
            out.push((what, format!("{root}{p}"), max, usage));
            match p.rfind('/') {
                Some(i) => p.truncate(i),
                None => break,
            }
        }
    }
    out
}

/// A byte count for messages: "1.5 GiB".
pub fn human(bytes: u128) -> String {
    let units = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{bytes} bytes") } else { format!("{v:.1} {}", units[u]) }
}

/// The estimate of a run, in bytes, item by item.
#[derive(Debug, Default)]
pub struct Estimate {
    items: Vec<(&'static str, u128)>,
}

impl Estimate {
    /// Adds `count * size` bytes for `what` (saturating: an absurd size stays absurd, never wraps).
    pub fn add(&mut self, what: &'static str, count: u128, size: u128) {
        self.items.push((what, count.saturating_mul(size)));
    }

    /// The total.
    pub fn total(&self) -> u128 {
        self.items.iter().fold(0u128, |t, (_, b)| t.saturating_add(*b))
    }

    /// [`OverBudget`] when the total exceeds `limit` of `place`'s memory ("host", "GPU").
    pub fn check(&self, place: &'static str, limit: u128) -> Result<(), OverBudget> {
        let need = self.total();
        if need <= limit {
            return Ok(());
        }
        Err(OverBudget { place, need, limit, items: self.items.clone() })
    }
}

/// A run that would need more memory than there is: the estimate, item by item, and the limit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "this run needs about {} of {place} memory ({}), more than the {} available; use smaller --m/--n/--k, a lower \
     --density or fewer --check-rows",
    human(*.need),
    .items.iter().map(|(w, b)| format!("{w} {}", human(*b))).collect::<Vec<_>>().join(", "),
    human(*.limit)
)]
pub struct OverBudget {
    /// "host" or "GPU".
    pub place: &'static str,
    /// The estimate's total, in bytes.
    pub need: u128,
    /// The memory available, in bytes.
    pub limit: u128,
    /// The estimate, item by item.
    pub items: Vec<(&'static str, u128)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_refuse_what_does_not_fit() {
        let mut e = Estimate::default();
        e.add("B", 1 << 20, 2);
        e.add("C", u128::MAX, 4); // saturates
        assert_eq!(e.total(), u128::MAX);
        let msg = e.check("host", 1 << 30).unwrap_err().to_string();
        assert!(msg.contains("B 2.0 MiB") && msg.contains("available"), "{msg}");
        let mut small = Estimate::default();
        small.add("A", 10, 2);
        assert!(small.check("host", 100).is_ok());
        assert_eq!(human(1536), "1.5 KiB");
    }

    #[test]
    fn limits_are_parsed() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max stack size            8388608              unlimited            bytes\n\
                      Max address space         1073741824           unlimited            bytes\n";
        assert_eq!(address_space_limit(limits), Some(1 << 30));
        assert_eq!(
            address_space_limit("Max address space         unlimited            unlimited            bytes"),
            None
        );
        assert_eq!(status_kib("Name:\tx\nVmSize:\t  2048 kB\n", "VmSize:"), Some(2 << 20));
        let dirs = cgroup_dirs("12:cpu,memory:/a/b\n3:pids:/x\n0::/user.slice/u.scope\n");
        let names: Vec<String> = dirs.iter().map(|d| d.1.clone()).collect();
        assert_eq!(
            names,
            [
                "/sys/fs/cgroup/memory/a/b",
                "/sys/fs/cgroup/memory/a",
                "/sys/fs/cgroup/memory",
                "/sys/fs/cgroup/user.slice/u.scope",
                "/sys/fs/cgroup/user.slice",
                "/sys/fs/cgroup"
            ]
        );
        assert_eq!((dirs[0].2, dirs[3].2), ("memory.limit_in_bytes", "memory.max"));
        assert_eq!(cgroup_dirs("0::/\n").len(), 1);
        // The least limit is the one used. (On the live machine two readings differ whenever the machine's memory
        // use moves between them, as it did in CI beside a build: compare on one reading.)
        assert_eq!(least(&[("MemAvailable", 5), ("RLIMIT_AS", 3), ("cgroup memory.max", 9)]), Some(3));
        assert_eq!(least(&[]), None);
        let all = host_limits();
        assert_eq!(least(&all), all.iter().map(|l| l.1).min());
        // On Linux /proc/meminfo is always there: some limit is read.
        if cfg!(target_os = "linux") {
            assert!(host_available().is_some());
        }
    }
}
