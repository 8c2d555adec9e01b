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

/// User + system CPU seconds from a `/proc/<pid>/stat` (or
/// `/proc/<pid>/task/<tid>/stat`) line, at the usual 100 ticks a second.
pub fn stat_cpu_seconds(stat: &str) -> Option<f64> {
    // The command name may hold spaces and parentheses: fields restart
    // after the last `)`, with field 3 (state) first; utime and stime are
    // fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

/// CPU seconds of a process (`tid` `None`) or of one of its threads.
pub fn cpu_seconds(pid: u32, tid: Option<u32>) -> Option<f64> {
    let path = match tid {
        None => format!("/proc/{pid}/stat"),
        Some(t) => format!("/proc/{pid}/task/{t}/stat"),
    };
    stat_cpu_seconds(&std::fs::read_to_string(path).ok()?)
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
    fn cpu_seconds_from_stat() {
        let line = "4242 (tokio (rt) x) S 1 4242 4242 0 -1 4194560 90 0 0 0 250 75 3 1 20 0 3 0 1000 1000 100";
        assert_eq!(stat_cpu_seconds(line), Some(3.25));
        assert_eq!(stat_cpu_seconds("4242 (x) S 1"), None);
        assert_eq!(stat_cpu_seconds("no parenthesis"), None);
    }

    #[test]
    fn own_cpu_time_grows_with_work() {
        let me = std::process::id();
        // This test runs on a harness thread, not the main one: /proc
        // names it `<pid>/task/<tid>`.
        let link = std::fs::read_link("/proc/thread-self").unwrap();
        let tid: u32 = link.file_name().unwrap().to_str().unwrap().parse().unwrap();
        let before = cpu_seconds(me, Some(tid)).unwrap();
        let t = std::time::Instant::now();
        let mut x = 1u64;
        while t.elapsed() < Duration::from_millis(300) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let after = cpu_seconds(me, Some(tid)).unwrap();
        // Busy for 300 ms of wall time: some ticks were charged even on a
        // loaded machine, never more than the wall time.
        assert!(
            after > before && after - before <= 0.35,
            "{before} → {after}"
        );
        assert!(cpu_seconds(me, None).unwrap() >= after);
        assert_eq!(cpu_seconds(me, Some(u32::MAX)), None);
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
