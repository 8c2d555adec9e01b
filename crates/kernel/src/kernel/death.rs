//! How a kernel ends: interrupts, the tree kill, a remote's allocation
//! stopped first, and the words for how its process exited.

#[allow(clippy::wildcard_imports)]
use super::*;

pub(super) fn signal_name(sig: i32) -> String {
    Signal::try_from(sig).map_or_else(
        |_| format!("signal {sig}"),
        |s| format!("signal {sig} ({s})"),
    )
}

/// Whether `pid` is a zombie (or dying) according to `/proc`: a thread
/// group leader that exited while other threads of it still unwind, which
/// `waitpid` does not report yet. Unknown (no `/proc`) is `false`: only
/// `waitpid` then says a kernel ended. `reaped_elsewhere`: the process is
/// not our child (a sandboxed runner, whose parent is its sandbox's init),
/// so a failed read means it is gone, before `waitpid` on the sandbox says
/// so.
pub(super) fn exited_leader(stat: Option<&std::fs::File>, reaped_elsewhere: bool) -> bool {
    use std::os::unix::fs::FileExt;
    let Some(f) = stat else {
        return false;
    };
    let mut buf = [0u8; 512];
    let n = match f.read_at(&mut buf, 0) {
        Ok(n) => n,
        // Our own child is not reaped (waitpid said so), so its entry
        // exists: a failed read says nothing. Another's child: it is gone.
        Err(_) => return reaped_elsewhere,
    };
    let stat = &buf[..n];
    let Some(close) = memchr::memrchr(b')', stat) else {
        return false;
    };
    dying(&stat[close + 1..])
}

/// Whether process `pid` exists and is neither gone nor on its way out
/// (see [`dying`]); for listings, which have no pid file open.
pub fn process_running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read(format!("/proc/{pid}/stat")) else {
        return false;
    };
    match memchr::memrchr(b')', &stat) {
        Some(close) => !dying(&stat[close + 1..]),
        None => true,
    }
}

/// Whether the fields of `/proc/PID/stat` after the command name say the
/// process is gone or on its way out: a zombie (`Z`, `X`), exiting
/// (`PF_EXITING` in its flags), or with SIGKILL pending — what a
/// `kill -9` from outside leaves for the few milliseconds before the
/// process is gone, so that a cell sent right after it does not go to a
/// kernel that will never read it.
pub(super) fn dying(fields: &[u8]) -> bool {
    const PF_EXITING: u64 = 0x4;
    const SIGKILL_BIT: u64 = 1 << (9 - 1);
    let mut it = fields
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty());
    let num = |f: Option<&[u8]>| {
        f.and_then(|f| std::str::from_utf8(f).ok())
            .and_then(|f| f.parse::<u64>().ok())
    };
    // state (field 3), flags (9), pending signals (31).
    let state = it.next();
    if state.is_some_and(|s| s == b"Z" || s == b"X") {
        return true;
    }
    let flags = num(it.nth(5));
    let pending = num(it.nth(21));
    flags.is_some_and(|f| f & PF_EXITING != 0) || pending.is_some_and(|p| p & SIGKILL_BIT != 0)
}

pub(super) fn describe_exit(status: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("it exited with status {c}"),
        (None, Some(s)) => format!("it was killed by {}", signal_name(s)),
        _ => "it exited".to_string(),
    }
}

impl Kernel {
    /// Whether the process still runs, asking the OS: a kernel that died
    /// while idle is noticed here, not only by its next cell.
    pub fn check_alive(&mut self) -> bool {
        // A killed kernel's leader can be a zombie while its other threads
        // still exit, before `waitpid` reports it: count that as dead too.
        if !self.dead
            && (!matches!(self.child.try_wait(), Ok(None))
                || exited_leader(self.proc_stat.as_ref(), self.sandbox.is_sandboxed()))
        {
            self.dead = true;
        }
        !self.dead
    }

    /// How the process ended, if it ended since the last cell (killed from
    /// outside, out of memory, `os._exit` in a thread a cell left behind):
    /// `Some("it was killed by signal 9 (SIGKILL)")`; `None` while it runs
    /// or when its death was already reported. Asks the OS (a `waitpid`
    /// that does not block).
    pub async fn ended_between_cells(&mut self) -> Option<String> {
        if self.dead {
            return None;
        }
        match self.child.try_wait() {
            Ok(None) if !exited_leader(self.proc_stat.as_ref(), self.sandbox.is_sandboxed()) => {
                None
            }
            Ok(None) => {
                // A zombie whose other threads are still exiting: `waitpid`
                // reports it only once they are gone, a moment later.
                self.dead = true;
                match tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await {
                    Ok(Ok(status)) => Some(describe_exit(&status)),
                    _ => Some("it stopped running".into()),
                }
            }
            Ok(Some(status)) => {
                self.dead = true;
                Some(describe_exit(&status))
            }
            Err(e) => {
                self.dead = true;
                Some(format!("it could not be waited for ({e})"))
            }
        }
    }

    /// The kernel's process tree (group, descendants, env marker).
    pub fn tree(&self) -> Tree {
        Tree {
            root: self.pid,
            pgid: Some(self.pid),
            marker: Some((
                if self.spec.remote.is_some() {
                    "TOOLCELL_REMOTE_KERNEL"
                } else {
                    "TOOLCELL_RPC"
                }
                .to_string(),
                self.sentinel_marker_env.clone(),
            )),
            cgroup: self.cgroup.as_ref().map(|c| c.dir().to_path_buf()),
            started: self.started,
            lineage: self.lineage.clone(),
            namespace: self.namespace.clone(),
        }
    }

    /// Interrupts the running cell: an in-band `interrupt` request, after
    /// which the runner sends SIGINT to its own process group (the cell gets
    /// `KeyboardInterrupt`). In-band, it is ordered after the cell's
    /// `execute`: an interrupt that arrives before the cell's first line ran
    /// is kept for it, never lost. Between cells it does nothing. Should
    /// the request channel fail, a local kernel gets SIGINT directly (as
    /// local R and JavaScript kernels always do; remote ones get the
    /// in-band request, which their runner's reader turns into SIGINT).
    pub fn interrupt(&self) {
        // A stopped kernel (a cell can SIGSTOP its own process) reads no
        // request and takes no signal: it is continued first.
        self.resume();
        if self.spec.language.inband() && self.spec.remote.is_none() {
            // A local R or JavaScript runner takes SIGINT itself (its relay
            // would only pass it on).
            if let Ok(p) = i32::try_from(self.pid) {
                let _ = killpg(Pid::from_raw(p), Signal::SIGINT);
            }
            return;
        }
        let pipe = Arc::clone(&self.requests);
        let direct = if self.spec.remote.is_some() {
            // Never a signal to the local command: it would end the connection.
            None
        } else {
            i32::try_from(self.pid).ok()
        };
        match Request::Interrupt.to_line() {
            Ok(line) => {
                tokio::spawn(async move {
                    let sent = tokio::time::timeout(Duration::from_secs(5), pipe.send(&line)).await;
                    if !matches!(sent, Ok(Ok(_)))
                        && let Some(p) = direct
                    {
                        let _ = killpg(Pid::from_raw(p), Signal::SIGINT);
                    }
                });
            }
            Err(_) => {
                if let Some(p) = direct {
                    let _ = killpg(Pid::from_raw(p), Signal::SIGINT);
                }
            }
        }
    }

    /// SIGCONT to the kernel: its process group (a local runner leads
    /// one), and for a remote the local command's whole tree (a signal
    /// that ends nothing: the connection stays).
    pub(super) fn resume(&self) {
        if self.pid == 0 || self.dead {
            return;
        }
        if self.spec.remote.is_some() {
            self.tree().signal(Signal::SIGCONT);
        } else if let Ok(p) = i32::try_from(self.pid) {
            let _ = killpg(Pid::from_raw(p), Signal::SIGCONT);
        }
    }

    /// SIGKILL to the whole tree now, without waiting.
    pub(super) fn kill_now(&mut self) {
        self.requests.close();
        if self.pid != 0 {
            self.tree().signal(Signal::SIGKILL);
        }
        self.dead = true;
    }

    /// A lifecycle remote's allocation is stopped before its kernel's
    /// command is killed: its `stop` starts now; once it is done (within
    /// [`STOP_FIRST`]) the command has [`EXIT_AFTER_STOP`] to end by itself
    /// (an engine's client ends with its allocation) before anything is
    /// signalled. Killing an engine's client first can hold the
    /// allocation's resources for seconds: with SLURM, an `srun` killed
    /// before `scancel` made the next `salloc` wait ~2.7 s instead of
    /// ~10 ms. No-op without an allocation, or once it is stopped.
    pub(super) async fn stop_allocation_first(&mut self) {
        let Some(alloc) = self.allocation.take() else {
            return;
        };
        let done = alloc.stop_in_background();
        let child = &mut self.child;
        let stopped = tokio::select! {
            r = tokio::time::timeout(STOP_FIRST, done) => matches!(r, Ok(Ok(()))),
            _ = child.wait() => false,
        };
        if stopped {
            let _ = tokio::time::timeout(EXIT_AFTER_STOP, self.child.wait()).await;
        }
    }

    /// Kills the whole tree (SIGTERM, then SIGKILL after `grace`) and reaps it.
    pub async fn kill(&mut self, grace: Duration) {
        self.stop_allocation_first().await;
        if self.spec.remote.is_some() && !self.dead {
            // Closing stdin makes the remote runner kill its group; give
            // the command a moment to carry that EOF over, then kill it.
            self.requests.close();
            let _ =
                tokio::time::timeout(grace.min(Duration::from_secs(1)), self.child.wait()).await;
        }
        if self.pid != 0 {
            self.tree().kill(grace).await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
        self.dead = true;
    }

    /// Asks the runner to exit, then kills whatever is left after `grace`.
    pub async fn shutdown(mut self, grace: Duration) {
        self.stop_allocation_first().await;
        if !self.dead
            && let Ok(line) = Request::Shutdown.to_line()
        {
            self.resume();
            let _ = tokio::time::timeout(grace, self.requests.send(&line)).await;
            let _ = tokio::time::timeout(grace, self.child.wait()).await;
        }
        self.kill(grace).await;
    }

    pub(super) async fn exit_description(&mut self) -> String {
        use std::os::unix::process::ExitStatusExt;
        if let Some((name, remote)) = &self.spec.remote {
            let program = remote.command.first().cloned().unwrap_or_default();
            let how = match tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await {
                Ok(Ok(status)) => describe_exit(&status).replacen("it ", "", 1),
                _ => "closed its output".to_string(),
            };
            return format!(
                "the connection to remote \"{name}\" was lost: {program} {how}; the remote kernel's state is lost"
            );
        }
        match tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await {
            Ok(Ok(status)) => {
                let how = describe_exit(&status);
                match self.spec.limits.cpu_seconds {
                    Some(secs) if status.signal() == Some(Signal::SIGXCPU as i32) => format!(
                        "{how}: it used up the [limits] cpu_seconds = {secs} CPU seconds a cell may take"
                    ),
                    _ => how,
                }
            }
            _ => "its output pipes closed".to_string(),
        }
    }
}

#[cfg(test)]
mod dying_tests {
    use super::dying;

    /// The fields of a `/proc/PID/stat` line after the command name, with
    /// the given state, flags and pending-signal bitmap.
    fn fields(state: &str, flags: u64, pending: u64) -> Vec<u8> {
        format!(
            " {state} 1 100 100 0 -1 {flags} 10 0 0 0 5 2 0 0 20 0 3 0 12345 1000 200 18446744073709551615 1 1 0 0 0 {pending} 0 0 0 0 0 0 17 1 0 0 0 0 0"
        )
        .into_bytes()
    }

    #[test]
    fn zombies_exiting_processes_and_pending_kills_are_dying() {
        assert!(!dying(&fields("S", 0x40_0000, 0)));
        assert!(
            !dying(&fields("R", 0x40_0000, 1 << 1)),
            "SIGINT pending is not death"
        );
        assert!(dying(&fields("Z", 0, 0)));
        assert!(dying(&fields("X", 0, 0)));
        assert!(dying(&fields("R", 0x40_0004, 0)), "PF_EXITING");
        assert!(dying(&fields("S", 0x40_0000, 1 << 8)), "SIGKILL pending");
        assert!(!dying(b" S 1"), "a short line says nothing");
    }

    #[test]
    fn this_process_is_not_dying() {
        let stat = std::fs::read("/proc/self/stat").unwrap();
        let close = stat.iter().rposition(|b| *b == b')').unwrap();
        assert!(!dying(&stat[close + 1..]));
    }
}
