//! One cgroup v2 per kernel: the one container nothing inside can leave.
//!
//! A process a cell starts can clear its environment, call `setsid` and be
//! re-parented to init; then neither the process group, nor `/proc` parent
//! links, nor an environment marker finds it. Its cgroup still does: a
//! process cannot leave its cgroup without write access to another one's
//! `cgroup.procs` (which a confined kernel does not have), and
//! `cgroup.kill` (Linux 5.14) kills every member at once.
//!
//! [`HostCgroup::get`] finds the cgroup v2 hierarchy and this process's
//! place in it, and makes `toolcell-<pid>` there when it may (root, or a
//! delegated subtree such as systemd's user slice). [`HostCgroup::kernel`]
//! makes one child per kernel; the host writes the kernel's pid to its open
//! `cgroup.procs` ([`KernelCgroup::take_procs`]) while Python starts, and
//! waits for that before the runner gets its first request, so no cell code
//! runs outside it.
//! Where cgroups are not available (or `TOOLCELL_CGROUP=off` is set), every
//! caller falls back to process-tree walking.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The host's own cgroup directory, under which kernels get theirs.
#[derive(Debug)]
pub struct HostCgroup {
    dir: PathBuf,
    /// The same place as `/proc/<pid>/cgroup` names it (after `0::`).
    rel: String,
}

static HOST: OnceLock<Option<HostCgroup>> = OnceLock::new();

/// The cgroup v2 directory of this process, and its path as
/// `/proc/self/cgroup` names it.
fn own_cgroup_dir() -> Option<(PathBuf, String)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let (mount_root, mount_point) = info.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        if !post.starts_with("cgroup2 ") {
            return None;
        }
        let f: Vec<&str> = pre.split(' ').collect();
        Some((f.get(3)?.to_string(), f.get(4)?.to_string()))
    })?;
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let rel = path
        .strip_prefix(mount_root.trim_end_matches('/'))
        .unwrap_or(path);
    Some((
        PathBuf::from(mount_point).join(rel.trim_start_matches('/')),
        path.trim_end_matches('/').to_string(),
    ))
}

impl HostCgroup {
    /// This host's cgroup, made on first use; `None` where cgroup v2 is
    /// missing, not writable by us, or turned off with `TOOLCELL_CGROUP=off`.
    pub fn get() -> Option<&'static HostCgroup> {
        HOST.get_or_init(|| {
            if std::env::var("TOOLCELL_CGROUP").is_ok_and(|v| v == "off" || v == "0") {
                return None;
            }
            let (base, base_rel) = own_cgroup_dir()?;
            sweep_stale(&base);
            let name = format!("toolcell-{}", std::process::id());
            let dir = base.join(&name);
            let rel = format!("{base_rel}/{name}");
            match std::fs::create_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    tracing::debug!("no per-kernel cgroups ({}: {e})", dir.display());
                    return None;
                }
            }
            // cgroup.kill exists from Linux 5.14 on.
            if !dir.join("cgroup.kill").exists() {
                let _ = std::fs::remove_dir(&dir);
                return None;
            }
            Some(HostCgroup { dir, rel })
        })
        .as_ref()
    }

    /// The host's cgroup directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Makes the cgroup of kernel `id` and opens its `cgroup.procs`.
    ///
    /// # Errors
    /// The directory or file could not be made or opened.
    pub fn kernel(&self, id: &str) -> std::io::Result<KernelCgroup> {
        let dir = self.dir.join(id);
        std::fs::create_dir(&dir)?;
        let procs = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))
            .inspect_err(|_| {
                let _ = std::fs::remove_dir(&dir);
            })?;
        Ok(KernelCgroup {
            dir,
            rel: format!("{}/{id}", self.rel),
            procs: Some(OwnedFd::from(procs)),
        })
    }
}

/// Removes this host's cgroup when it made one, after killing what is
/// left in its kernels' cgroups (normally nothing: each kernel's goes with
/// it). Call it as the host ends; otherwise the next host to start sweeps
/// it up. No kernel can get a cgroup afterwards.
pub fn remove_host_cgroup() {
    let Some(Some(host)) = HOST.get() else {
        return;
    };
    if let Ok(kids) = std::fs::read_dir(&host.dir) {
        for k in kids.flatten().filter(|k| k.path().is_dir()) {
            kill_and_remove(&k.path(), Duration::from_millis(200));
        }
    }
    let _ = std::fs::remove_dir(&host.dir);
}

/// Kills and removes `toolcell-<pid>` cgroups whose host is gone.
fn sweep_stale(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("toolcell-"))
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == i32::try_from(std::process::id()).unwrap_or(0) || crate::procfs::alive(pid as u32)
        {
            continue;
        }
        let host = e.path();
        if let Ok(kids) = std::fs::read_dir(&host) {
            for k in kids.flatten().filter(|k| k.path().is_dir()) {
                kill_and_remove(&k.path(), Duration::from_millis(500));
            }
        }
        let _ = std::fs::remove_dir(&host);
    }
}

/// Writes `1` to `dir/cgroup.kill`, waits up to `wait` for the cgroup to
/// empty, and removes it. True when it is gone.
fn kill_and_remove(dir: &Path, wait: Duration) -> bool {
    let _ = std::fs::write(dir.join("cgroup.kill"), b"1");
    let until = Instant::now() + wait;
    loop {
        if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One kernel's cgroup.
#[derive(Debug)]
pub struct KernelCgroup {
    dir: PathBuf,
    rel: String,
    procs: Option<OwnedFd>,
}

impl KernelCgroup {
    /// The open `cgroup.procs` (once): the host writes the kernel's pid to
    /// it right after the spawn, before the runner gets its first request.
    pub fn take_procs(&mut self) -> Option<OwnedFd> {
        self.procs.take()
    }

    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cgroup as `/proc/<pid>/cgroup` names it (after `0::`).
    pub fn proc_path(&self) -> &str {
        &self.rel
    }

    /// Every process in the cgroup now.
    pub fn members(&self) -> Vec<u32> {
        members(&self.dir)
    }

    /// Kills every member at once (`cgroup.kill`).
    pub fn kill(&self) {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .write(true)
            .open(self.dir.join("cgroup.kill"))
        {
            let _ = f.write_all(b"1");
        }
    }
}

impl Drop for KernelCgroup {
    fn drop(&mut self) {
        // Kill whatever is left (a process that outlived its kernel) and
        // remove the directory; a slow exit finishes in the background.
        let dir = self.dir.clone();
        if !kill_and_remove(&dir, Duration::from_millis(50)) {
            let _ = std::thread::Builder::new()
                .name("toolcell-cgroup-rm".into())
                .spawn(move || {
                    kill_and_remove(&dir, Duration::from_secs(5));
                });
        }
    }
}

/// The pids in the cgroup at `dir`.
pub fn members(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// Whether process `pid` is in a toolcell kernel's cgroup (of any host of
/// any user on this machine): its cgroup path has a `toolcell-<pid>/k-…`
/// component pair. `None` when its cgroup cannot be read.
pub fn in_kernel_cgroup(pid: u32) -> Option<bool> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    let comps: Vec<&str> = path.split('/').collect();
    Some(comps.windows(2).any(|w| {
        w[0].strip_prefix("toolcell-")
            .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            && w[1].starts_with("k-")
    }))
}
