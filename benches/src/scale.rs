//! Helpers for the `scale` bench (`benches/benches/scale.rs`): memory
//! figures from `/proc/<pid>/status`, latency percentiles, and the 1 MiB
//! block a cell prints.

use std::time::Duration;

/// One `kB` field (`VmRSS`, `VmHWM`, …) of a `/proc/<pid>/status` text.
pub fn status_field_kb(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        rest.trim().strip_suffix("kB")?.trim().parse().ok()
    })
}

/// One `kB` field of `/proc/<pid>/status` (`pid` 0: this process).
pub fn proc_kb(pid: u32, field: &str) -> Option<u64> {
    let path = if pid == 0 {
        "/proc/self/status".to_string()
    } else {
        format!("/proc/{pid}/status")
    };
    status_field_kb(&std::fs::read_to_string(path).ok()?, field)
}

/// The `p` quantile (0..=1) of `sorted` by the nearest-rank rule; zero for
/// an empty slice.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (p.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Exactly 1 MiB of the `redact` bench's clean text (prose and code, no
/// escapes, no secrets), or with one secret line per 4 KiB.
pub fn block(with_secrets: bool) -> Vec<u8> {
    const MIB: usize = 1 << 20;
    let mut text = if with_secrets {
        crate::text::text_with_secrets(MIB)
    } else {
        crate::text::clean_text(MIB)
    }
    .into_bytes();
    text.truncate(MIB);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_parse() {
        let s = "Name:\tscale\nVmPeak:\t  123456 kB\nVmHWM:\t    4321 kB\nVmRSS:\t    1234 kB\nThreads:\t3\n";
        assert_eq!(status_field_kb(s, "VmHWM"), Some(4321));
        assert_eq!(status_field_kb(s, "VmRSS"), Some(1234));
        assert_eq!(status_field_kb(s, "VmSwap"), None);
        assert_eq!(status_field_kb(s, "Threads"), None);
        // A field name that is a prefix of another is not confused with it.
        assert_eq!(status_field_kb(s, "Vm"), None);
    }

    #[test]
    fn own_status_is_readable() {
        let rss = proc_kb(0, "VmRSS").unwrap();
        let hwm = proc_kb(0, "VmHWM").unwrap();
        assert!(rss > 0 && hwm >= rss);
        assert_eq!(
            proc_kb(std::process::id(), "VmHWM").map(|h| h >= rss),
            Some(true)
        );
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&v, 0.5), Duration::from_millis(50));
        assert_eq!(percentile(&v, 0.9), Duration::from_millis(90));
        assert_eq!(percentile(&v, 0.99), Duration::from_millis(99));
        assert_eq!(percentile(&v, 1.0), Duration::from_millis(100));
        assert_eq!(percentile(&v, 0.0), Duration::from_millis(1));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
        let one = [Duration::from_secs(3)];
        assert_eq!(percentile(&one, 0.99), Duration::from_secs(3));
    }

    #[test]
    fn blocks_are_one_mib_of_text() {
        for secrets in [false, true] {
            let b = block(secrets);
            assert_eq!(b.len(), 1 << 20);
            assert!(b.iter().all(|&c| c == b'\n' || (0x20..0x7f).contains(&c)));
        }
        assert_ne!(block(false), block(true));
    }
}
