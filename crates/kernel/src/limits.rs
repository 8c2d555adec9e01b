//! `[limits]`: resource limits of each kernel (`setrlimit`), all off by default.
//!
//! | key | resource | unit | scope |
//! |---|---|---|---|
//! | `memory` | `RLIMIT_AS` (address space) | bytes, or `"512MiB"`, `"2GiB"`, `"1.5G"` | each process of the kernel tree |
//! | `cpu_seconds` | `RLIMIT_CPU` | whole CPU seconds | **per cell**, the runner process |
//! | `open_files` | `RLIMIT_NOFILE` | descriptors | each process |
//! | `processes` | `RLIMIT_NPROC` | processes + threads | **all** of the user's, see below |
//! | `file_size` | `RLIMIT_FSIZE` | bytes, or a size string | each file written |
//!
//! Where it sits: the registry hands a [`Limits`] to each `Kernel::spawn`,
//! whose `pre_exec` calls [`Limits::apply_in_child`] between fork and exec
//! (only `setrlimit`/`sigaction`: async-signal-safe). Soft and hard limits
//! are set to the same value, so a cell cannot raise them again — except
//! `cpu_seconds`, whose hard limit stays unlimited because the host raises
//! the soft limit before every cell ([`set_cpu_budget`]: `prlimit` on the
//! runner's pid, to its CPU time so far plus `cpu_seconds`, rounded up).
//! A cell that busy-loops past it gets `SIGXCPU`, which kills the kernel
//! (with `cpu_seconds` set the soft core-file limit is 0, so no core dump);
//! the result says `[limits] cpu_seconds` and the next cell gets a fresh
//! kernel. (A cell that calls `resource.setrlimit` itself can lift its own
//! CPU limit: this guards against runaway code, not against hostile code.)
//!
//! `processes` is `RLIMIT_NPROC`, which Linux counts per **user**, not per
//! kernel: every process and thread the user runs counts, so the value must
//! leave room for them (a desktop session runs hundreds). It does not apply
//! to root (or any process with `CAP_SYS_RESOURCE`/`CAP_SYS_ADMIN`).
//!
//! With `file_size` set, `SIGXFSZ` is ignored in the kernel, so a write past
//! the limit fails with `OSError: [Errno 27] File too large` instead of
//! killing the process (subprocesses started with `subprocess` restore the
//! default action and are killed by the signal).
//!
//! ```
//! use toolcell_kernel::limits::{Limits, parse_size};
//!
//! assert_eq!(parse_size("2GiB"), Some(2 << 30));
//! assert_eq!(parse_size("512 MB"), Some(512_000_000));
//! assert_eq!(parse_size("1.5KiB"), Some(1536));
//! assert_eq!(parse_size("lots"), None);
//!
//! let limits = Limits { memory: Some(256 << 20), processes: Some(64), ..Limits::default() };
//! assert!(!limits.is_empty());
//! assert_eq!(limits.describe(), "memory = 268435456, processes = 64");
//! ```

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// The limits of one kernel; `None` means not limited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// Address space in bytes (`RLIMIT_AS`).
    pub memory: Option<u64>,
    /// CPU seconds per cell (`RLIMIT_CPU`, re-armed before each cell).
    pub cpu_seconds: Option<u64>,
    /// Open file descriptors (`RLIMIT_NOFILE`).
    pub open_files: Option<u64>,
    /// Processes and threads of the user (`RLIMIT_NPROC`).
    pub processes: Option<u64>,
    /// Largest file written, in bytes (`RLIMIT_FSIZE`).
    pub file_size: Option<u64>,
}

impl Limits {
    /// True when no limit is set.
    pub fn is_empty(&self) -> bool {
        self.pairs().next().is_none()
    }

    /// `(key, value)` for each limit set, in documentation order.
    pub fn pairs(&self) -> impl Iterator<Item = (&'static str, u64)> {
        [
            ("memory", self.memory),
            ("cpu_seconds", self.cpu_seconds),
            ("open_files", self.open_files),
            ("processes", self.processes),
            ("file_size", self.file_size),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k, v?)))
    }

    /// The limits set, as `key = value` joined by `, ` (for messages).
    pub fn describe(&self) -> String {
        self.pairs()
            .map(|(k, v)| format!("{k} = {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Applies the limits to the calling process. For `pre_exec`: only
    /// `getrlimit`, `setrlimit` and `sigaction`, no allocation
    /// (async-signal-safe).
    ///
    /// # Errors
    /// The failing call's `errno` (e.g. `EPERM` for a value above the hard
    /// limit the host itself runs under).
    pub fn apply_in_child(&self) -> std::io::Result<()> {
        let both = |r: Resource, v: Option<u64>| -> std::io::Result<()> {
            match v {
                Some(v) => setrlimit(r, v, v).map_err(std::io::Error::from),
                None => Ok(()),
            }
        };
        both(Resource::RLIMIT_AS, self.memory)?;
        both(Resource::RLIMIT_NOFILE, self.open_files)?;
        both(Resource::RLIMIT_NPROC, self.processes)?;
        both(Resource::RLIMIT_FSIZE, self.file_size)?;
        if self.file_size.is_some() {
            // SAFETY: SIG_IGN installs no handler code; sigaction is
            // async-signal-safe.
            unsafe {
                nix::sys::signal::signal(
                    nix::sys::signal::Signal::SIGXFSZ,
                    nix::sys::signal::SigHandler::SigIgn,
                )
            }
            .map_err(std::io::Error::from)?;
        }
        if let Some(secs) = self.cpu_seconds {
            // The first cell's budget; re-armed before every cell.
            setrlimit(Resource::RLIMIT_CPU, secs, nix::libc::RLIM_INFINITY)
                .map_err(std::io::Error::from)?;
            // SIGXCPU's default action dumps core: no core file of a
            // kernel killed by the limit lands in the user's directory.
            let (_, hard) = getrlimit(Resource::RLIMIT_CORE).map_err(std::io::Error::from)?;
            setrlimit(Resource::RLIMIT_CORE, 0, hard).map_err(std::io::Error::from)?;
        }
        Ok(())
    }
}

/// Parses a size: a whole number of bytes, or a number (decimals allowed)
/// followed by a unit — `B`, `K`/`KB` (1000), `KiB` (1024), `M`/`MB`, `MiB`,
/// `G`/`GB`, `GiB`, `T`/`TB`, `TiB`; case-insensitive, spaces allowed.
/// `None` when it does not parse or overflows.
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return None;
    }
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "kib" => 1 << 10,
        "m" | "mb" => 1_000_000,
        "mib" => 1 << 20,
        "g" | "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        "t" | "tb" => 1_000_000_000_000,
        "tib" => 1 << 40,
        _ => return None,
    };
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(mult);
    }
    let f: f64 = num.parse().ok()?;
    let bytes = (f * mult as f64).round();
    (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64).then_some(bytes as u64)
}

/// CPU seconds (user + system) the process `pid` has used, from
/// `/proc/<pid>/stat`.
///
/// # Errors
/// The process is gone or its stat line cannot be read.
pub fn process_cpu_seconds(pid: u32) -> std::io::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name may hold spaces and parentheses: fields follow the
    // last ')'. utime and stime are fields 14 and 15 (11th and 12th after it).
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| std::io::Error::other("malformed /proc stat line"))?;
    let mut fields = rest.split_whitespace().skip(11);
    let mut next = || -> std::io::Result<u64> {
        fields
            .next()
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| std::io::Error::other("malformed /proc stat line"))
    };
    let ticks = next()? + next()?;
    // SAFETY: sysconf only reads a constant.
    let hz = unsafe { nix::libc::sysconf(nix::libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as f64 } else { 100.0 };
    Ok(ticks as f64 / hz)
}

/// Gives the process `pid` `secs` more CPU seconds from now: sets its soft
/// `RLIMIT_CPU` to its CPU time so far, rounded up, plus `secs` (the hard
/// limit is left as is). Called before each cell, so the limit is per cell.
///
/// # Errors
/// The process is gone, or `prlimit` failed.
pub fn set_cpu_budget(pid: u32, secs: u64) -> std::io::Result<()> {
    let used = process_cpu_seconds(pid)?.ceil() as u64;
    let soft = used.saturating_add(secs);
    let pid = nix::libc::pid_t::try_from(pid).map_err(|_| std::io::Error::other("bad pid"))?;
    let mut old = nix::libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit with a null new-limit pointer only fills `old`.
    let rc =
        unsafe { nix::libc::prlimit(pid, nix::libc::RLIMIT_CPU, std::ptr::null(), &raw mut old) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let new = nix::libc::rlimit {
        rlim_cur: soft.min(old.rlim_max),
        rlim_max: old.rlim_max,
    };
    // SAFETY: `new` is a valid rlimit; a null old-limit pointer is allowed.
    let rc = unsafe {
        nix::libc::prlimit(
            pid,
            nix::libc::RLIMIT_CPU,
            &raw const new,
            std::ptr::null_mut(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_and_without_units() {
        assert_eq!(parse_size("1024"), Some(1024));
        assert_eq!(parse_size("2GiB"), Some(2 * 1024 * 1024 * 1024));
        assert_eq!(parse_size("2gib"), Some(2 * 1024 * 1024 * 1024));
        assert_eq!(parse_size(" 300 MB "), Some(300_000_000));
        assert_eq!(parse_size("0.5MiB"), Some(512 * 1024));
        assert_eq!(parse_size("1k"), Some(1000));
        for bad in [
            "",
            "MiB",
            "-1",
            "1 parsec",
            "1.2.3G",
            "99999999999999999999TiB",
        ] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }

    #[test]
    fn own_cpu_time_is_readable_and_grows() {
        let me = std::process::id();
        let before = process_cpu_seconds(me).unwrap();
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < std::time::Duration::from_millis(300) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let after = process_cpu_seconds(me).unwrap();
        assert!(after > before, "{before} -> {after}");
        assert!(process_cpu_seconds(u32::MAX).is_err());
    }

    #[test]
    fn describe_lists_only_what_is_set() {
        assert!(Limits::default().is_empty());
        assert_eq!(Limits::default().describe(), "");
        let l = Limits {
            cpu_seconds: Some(2),
            file_size: Some(10),
            ..Limits::default()
        };
        assert_eq!(l.describe(), "cpu_seconds = 2, file_size = 10");
    }
}
