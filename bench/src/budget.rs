//! Memory estimates for a run, checked before anything is allocated: a run that will not fit is refused with the
//! estimate and the limit, instead of being killed half-way (or aborting on an allocation).

/// Bytes of memory available to this process on the host: `MemAvailable` of /proc/meminfo, when readable.
pub fn host_available() -> Option<u128> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u128 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
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

    /// `Err(message)` when the total exceeds `limit` (named `where_`), listing the items.
    pub fn check(&self, where_: &str, limit: u128) -> Result<(), String> {
        let total = self.total();
        if total <= limit {
            return Ok(());
        }
        let items: Vec<String> = self.items.iter().map(|(w, b)| format!("{w} {}", human(*b))).collect();
        Err(format!(
            "this run needs about {} of {where_} memory ({}), more than the {} available; use smaller --m/--n/--k, \
             a lower --density or fewer --check-rows",
            human(total),
            items.join(", "),
            human(limit)
        ))
    }
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
        let msg = e.check("host", 1 << 30).unwrap_err();
        assert!(msg.contains("B 2.0 MiB") && msg.contains("available"), "{msg}");
        let mut small = Estimate::default();
        small.add("A", 10, 2);
        assert!(small.check("host", 100).is_ok());
        assert_eq!(human(1536), "1.5 KiB");
    }
}
