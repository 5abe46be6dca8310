//! Facts about the run that are not the GPU's: the date, the git commit, the SM clock as `nvidia-smi` reads it.

use std::process::{Child, Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

/// The current UTC time from the system clock as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn now_utc() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    format_utc(secs)
}

/// `secs` since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_utc(secs: u64) -> String {
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// (year, month, day) of a day count since 1970-01-01 (H. Hinnant's `civil_from_days`, proleptic Gregorian).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The commit being measured: the environment variable `SPARSEK_COMMIT` when set (a GPU machine's copy of the
/// tree may carry a stale `.git`: the caller who built the binaries knows better), else `git rev-parse --short
/// HEAD` where git and a repository are available, else "unknown"; and whether the working tree has uncommitted
/// changes (`None` when git could not tell or the commit came from the environment).
pub fn git_commit() -> (String, Option<bool>) {
    if let Some(c) = std::env::var("SPARSEK_COMMIT").ok().filter(|s| !s.trim().is_empty()) {
        return (c.trim().to_string(), None);
    }
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "--short", "HEAD"]).filter(|s| !s.is_empty()) {
        Some(c) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).map(|s| !s.is_empty());
            (c, dirty)
        }
        None => ("unknown".into(), None),
    }
}

/// A PCI address (domain, bus, device) as the CUDA driver reports it.
pub type PciAddress = (u32, u32, u32);

/// Starts `nvidia-smi --query-gpu=pci.bus_id,clocks.sm` without waiting for it (so it can read the clock
/// while the last timed launches still run); `None` if it cannot be started.
pub fn spawn_clock_query() -> Option<Child> {
    Command::new("nvidia-smi")
        .args(["--query-gpu=pci.bus_id,clocks.sm", "--format=csv,noheader,nounits"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

/// Waits for a query started by [`spawn_clock_query`] and returns the SM clock in MHz of the GPU at `pci`.
pub fn finish_clock_query(child: Option<Child>, pci: Option<PciAddress>) -> Option<u32> {
    let out = child?.wait_with_output().ok().filter(|o| o.status.success())?;
    parse_clock(&String::from_utf8_lossy(&out.stdout), pci)
}

/// Picks the SM clock out of `nvidia-smi --query-gpu=pci.bus_id,clocks.sm --format=csv,noheader,nounits`
/// output (`00000000:17:00.0, 1755` per GPU): the line whose bus id matches `pci`, or the only line when
/// there is one GPU (or no address to match).
pub fn parse_clock(text: &str, pci: Option<PciAddress>) -> Option<u32> {
    let rows: Vec<(Option<PciAddress>, u32)> = text
        .lines()
        .filter_map(|l| {
            let (bus, clock) = l.split_once(',')?;
            Some((parse_bus_id(bus.trim()), clock.trim().parse::<u32>().ok()?))
        })
        .collect();
    if let Some(want) = pci
        && let Some(&(_, c)) = rows.iter().find(|(a, _)| *a == Some(want))
    {
        return Some(c);
    }
    if rows.len() == 1 { Some(rows[0].1) } else { None }
}

/// `DDDDDDDD:BB:DD.F` (hex; nvidia-smi writes 8 domain digits, CUDA 4) -> (domain, bus, device).
fn parse_bus_id(s: &str) -> Option<PciAddress> {
    let mut it = s.split(':');
    let (domain, bus, rest) = (it.next()?, it.next()?, it.next()?);
    let device = rest.split('.').next()?;
    let hex = |x: &str| u32::from_str_radix(x, 16).ok();
    Some((hex(domain)?, hex(bus)?, hex(device)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        let dates = [
            (0, "1970-01-01T00:00:00Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (1_700_000_000, "2023-11-14T22:13:20Z"),
            (4_102_444_799, "2099-12-31T23:59:59Z"),
        ];
        for (secs, date) in dates {
            assert_eq!(format_utc(secs), date, "{secs} s after the epoch");
        }
        assert!(now_utc().ends_with('Z'));
    }

    #[test]
    fn clock_parsing() {
        let one = "00000000:17:00.0, 1755\n";
        assert_eq!(parse_clock(one, None), Some(1755));
        assert_eq!(parse_clock(one, Some((0, 0x99, 0))), Some(1755), "a single GPU is taken as is");
        let two = "00000000:17:00.0, 1755\n00000000:B3:00.0, 1410\n";
        assert_eq!(parse_clock(two, Some((0, 0xb3, 0))), Some(1410));
        assert_eq!(parse_clock(two, Some((0, 0x17, 0))), Some(1755));
        assert_eq!(parse_clock(two, None), None, "ambiguous without an address");
        assert_eq!(parse_clock("", None), None);
        assert_eq!(parse_clock("00000000:17:00.0, [N/A]\n", None), None);
    }
}
