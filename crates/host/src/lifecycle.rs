//! Remotes with a lifecycle: `[remotes.NAME] start`, `stop` and `list`.
//!
//! A remote with a `start` command has no fixed place to run: each kernel
//! gets an *allocation* of its own — a container, a SLURM job, a pod — made
//! by `start` (which prints the allocation's id on stdout) before the
//! kernel's `command` connects to it, and removed by `stop` when the kernel
//! ends: the session's end, a reset, an idle reap, an eviction, a lost
//! connection, the host's exit. Placement stays with the engine; toolcell
//! only runs the three commands.
//!
//! Words of `start`, `stop`, `list` and `command` may hold placeholders,
//! replaced whole-word or inside a word, never parsed by a shell:
//! `{id}` (the allocation), `{session}` (the session name, reduced to
//! `[A-Za-z0-9_.-]`, at most 63 characters), `{host}` (this host's id) and
//! `{remote}` (the remote's name).
//!
//! **Nothing is orphaned.** A host writes a small record for each remote it
//! starts allocations on (in a private directory under the user's state
//! directory) holding its pid, the process's start time and the boot id, so
//! that a later host can tell it is dead, and the ids of the allocations it
//! has there (rewritten, by rename, whenever they change).
//! [`Lifecycle::sweep_dead_hosts`] (run in the background when a registry
//! starts, and again on its reaper's period) stops what each dead host
//! left: with a `list` that names
//! `{host}`, everything it prints for that host — the engine's own account,
//! through the labels or names `start` gave it, which also covers a `start`
//! that timed out after the engine had made the allocation — and the ids
//! the record names; with a `list` without `{host}`, the listed ids the
//! record names; without `list`, the record's ids. [`Lifecycle::finish`]
//! (run by `Registry::shutdown_all`) waits for the stops under way, sweeps
//! this host's own leftovers the same way, and removes its records.
//!
//! Everything a `start` or `list` prints is hostile: ids are one line of at
//! most 256 characters of `[A-Za-z0-9_.:@+=/-]`, starting with a letter or
//! digit (so an id can never pass as an option, an `@file` or a path from
//! the root), with no `.`, `..` or empty part between slashes (so it cannot
//! climb out of a path like `DIR/{id}`), and output is read up to a bound.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use toolcell_kernel::remote::{Remote, StartFailure, Vars, fill};

/// Longest allocation id accepted from `start` or `list`.
pub const MAX_ID_LEN: usize = 256;

/// Bytes of a command's stdout read at most (the rest is discarded).
const STDOUT_CAP: usize = 256 * 1024;

/// Bytes of a command's stderr kept for an error message (the last ones).
const STDERR_TAIL: usize = 4096;

/// Ids one `list` may print that are acted on.
const MAX_LISTED: usize = 10_000;

/// Records older than this are removed even when a remote they name is no
/// longer configured (nothing could sweep them).
const RECORD_MAX_AGE: Duration = Duration::from_secs(30 * 86_400);

/// Records nobody on this machine can use (another project's remote,
/// another pid namespace) are removed when older than this.
const FOREIGN_RECORD_MAX_AGE: Duration = Duration::from_secs(365 * 86_400);

/// Most records looked at per sweep.
const MAX_RECORDS: usize = 1024;

/// Largest record read (a host's allocations on one remote).
const RECORD_MAX_BYTES: usize = 1 << 20;

/// What running one lifecycle command gave.
#[derive(Debug)]
struct Ran {
    success: bool,
    status: String,
    stdout: String,
    /// More than [`STDOUT_CAP`] bytes came; `stdout` has the first (or,
    /// for a `start`, the last) of them.
    stdout_truncated: bool,
    stderr: String,
}

/// Why a lifecycle command could not be run to its end.
#[derive(Debug)]
enum RunError {
    Spawn(std::io::Error),
    Timeout { stderr: String },
}

/// The last `STDERR_TAIL` bytes of `bytes`, as text (whole lines when it
/// was cut).
fn tail_text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim_end();
    if text.len() <= STDERR_TAIL {
        return text.to_string();
    }
    let mut start = text.len() - STDERR_TAIL;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let cut = &text[start..];
    cut.find('\n').map_or(cut, |i| &cut[i + 1..]).to_string()
}

/// Bytes kept of a stream read piece by piece: the first `cap` (or, with
/// `keep_tail`, the last `cap`), and whether any were dropped.
#[derive(Debug, Default)]
struct Bounded {
    buf: Vec<u8>,
    cap: usize,
    keep_tail: bool,
    truncated: bool,
}

impl Bounded {
    fn new(cap: usize, keep_tail: bool) -> Self {
        Self {
            buf: Vec::new(),
            cap,
            keep_tail,
            truncated: false,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        if !self.keep_tail && self.buf.len() >= self.cap {
            self.truncated |= !bytes.is_empty();
            return;
        }
        self.buf.extend_from_slice(bytes);
        if self.buf.len() > self.cap {
            self.truncated = true;
            if self.keep_tail {
                let cut = self.buf.len() - self.cap;
                self.buf.drain(..cut);
            } else {
                self.buf.truncate(self.cap);
            }
        }
    }

    /// Reads what `r` has now (a non-blocking pipe) or to its end: true at
    /// its end (or an error).
    fn read_from(&mut self, mut r: impl Read) -> bool {
        let mut chunk = [0u8; 8192];
        loop {
            match r.read(&mut chunk) {
                Ok(0) => return true,
                Ok(n) => self.push(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
                Err(_) => return true,
            }
        }
    }
}

/// Runs `argv` (no shell) with stdin on `/dev/null`, in a process group of
/// its own, for at most `timeout`: then the group is killed. Blocking.
fn run(argv: &[String], cwd: Option<&Path>, timeout: Duration) -> Result<Ran, RunError> {
    run_tracked(argv, cwd, timeout, None, false)
}

/// The `start`s running now (their process groups), so that the host's end
/// can kill them instead of waiting up to `start_timeout` for each.
#[derive(Debug, Default)]
struct Starting {
    /// Set by [`Lifecycle::finish`]: no `start` runs from then on.
    closing: bool,
    groups: BTreeSet<u32>,
    /// [`Lifecycle::start`] calls under way, from their first step until
    /// the id they got is in the record.
    active: usize,
    /// A clean-up after a failed `start` is listing and stopping: no
    /// `start` begins until it is done (it stops what `list` prints and no
    /// kernel holds, so no allocation may be on its way meanwhile).
    cleaning: bool,
    /// Remotes a clean-up is due for (one at a time each).
    dirty: BTreeSet<String>,
}

fn kill_group(pgid: u32) {
    if let Ok(pg) = i32::try_from(pgid) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pg),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// [`run`], its process group listed in `starting` while it runs (and
/// killed at once when `starting` is closing). With `stdout_tail`, the last
/// [`STDOUT_CAP`] bytes of stdout are kept (a `start`'s id is its last
/// line), else the first.
///
/// The pipes are read on this thread, non-blocking, while it waits for the
/// command: once the command's leader has exited its group is killed and
/// what is left in the pipes is read for a short grace, then the pipes are
/// closed. A process that left the group keeping a pipe open holds
/// nothing of this host (no thread, no fd).
fn run_tracked(
    argv: &[String],
    cwd: Option<&Path>,
    timeout: Duration,
    starting: Option<&Mutex<Starting>>,
    stdout_tail: bool,
) -> Result<Ran, RunError> {
    let Some((program, args)) = argv.split_first() else {
        return Err(RunError::Spawn(std::io::Error::other("an empty command")));
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(d) = cwd {
        cmd.current_dir(d);
    }
    let mut child = cmd.spawn().map_err(RunError::Spawn)?;
    let pgid = child.id();
    // Listed, or killed at once if the host is ending (under the lock that
    // `finish` takes to close: no start slips between the two).
    if let Some(st) = starting {
        let mut g = st.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if g.closing {
            kill_group(pgid);
        } else {
            g.groups.insert(pgid);
        }
    }
    let nonblocking = |fd: std::os::fd::BorrowedFd<'_>| {
        use nix::fcntl::{FcntlArg, OFlag, fcntl};
        let flags = fcntl(fd, FcntlArg::F_GETFL).map_or(OFlag::empty(), OFlag::from_bits_truncate);
        let _ = fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK));
    };
    let mut out_pipe = child.stdout.take();
    let mut err_pipe = child.stderr.take();
    if let Some(p) = &out_pipe {
        nonblocking(std::os::fd::AsFd::as_fd(p));
    }
    if let Some(p) = &err_pipe {
        nonblocking(std::os::fd::AsFd::as_fd(p));
    }
    let mut out = Bounded::new(STDOUT_CAP, stdout_tail);
    let mut err = Bounded::new(STDERR_TAIL, true);
    let mut read_pipes =
        |out_pipe: &mut Option<std::process::ChildStdout>,
         err_pipe: &mut Option<std::process::ChildStderr>| {
            if let Some(p) = out_pipe.as_mut()
                && out.read_from(p)
            {
                *out_pipe = None;
            }
            if let Some(p) = err_pipe.as_mut()
                && err.read_from(p)
            {
                *err_pipe = None;
            }
        };
    const READ_GRACE: Duration = Duration::from_secs(2);
    let deadline = Instant::now() + timeout;
    // Whether the command ended by itself. The leader's exit is seen
    // without reaping it (WNOWAIT), so its process group is killed while
    // the pgid cannot belong to anyone else; it is reaped only then, off
    // `starting` in the same critical section (`finish` kills under it).
    let leader = nix::unistd::Pid::from_raw(i32::try_from(pgid).unwrap_or(i32::MAX));
    let ended = loop {
        use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
        read_pipes(&mut out_pipe, &mut err_pipe);
        match waitid(
            Id::Pid(leader),
            WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG,
        ) {
            Ok(WaitStatus::StillAlive) if Instant::now() >= deadline => break false,
            Ok(WaitStatus::StillAlive) => std::thread::sleep(Duration::from_millis(5)),
            Ok(_) => break true,
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => break false,
        }
    };
    // Done or out of time: what is left in the group must not keep the
    // pipes open.
    kill_group(pgid);
    let status = {
        let _held = starting.map(|st| {
            let mut g = st.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            g.groups.remove(&pgid);
            g
        });
        child.wait()
    };
    // What the pipes still hold: until both end, for a short grace at most.
    let grace = Instant::now() + READ_GRACE;
    loop {
        read_pipes(&mut out_pipe, &mut err_pipe);
        if (out_pipe.is_none() && err_pipe.is_none()) || Instant::now() >= grace {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    drop((out_pipe, err_pipe));
    let status = match status {
        Ok(s) if ended => s,
        _ => {
            return Err(RunError::Timeout {
                stderr: tail_text(&err.buf),
            });
        }
    };
    let status_text = match (
        status.code(),
        std::os::unix::process::ExitStatusExt::signal(&status),
    ) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "an unknown status".to_string(),
    };
    Ok(Ran {
        success: status.success(),
        status: status_text,
        stdout_truncated: out.truncated,
        stdout: String::from_utf8_lossy(&out.buf).into_owned(),
        stderr: tail_text(&err.buf),
    })
}

/// A session name as `{session}`: characters outside `[A-Za-z0-9_.-]`
/// become `_`, at most 63 characters, starting and ending with a letter or
/// digit (what Docker labels, SLURM job names and Kubernetes label values
/// all accept).
pub fn session_label(session: &str) -> String {
    let mapped: String = session
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect();
    let trimmed = mapped.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if trimmed.is_empty() {
        "s".to_string()
    } else {
        trimmed.to_string()
    }
}

/// Whether `id` is acceptable as an allocation id (see the module docs).
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_LEN
        // Not an option (`-x`), an argument file (`@file`), a path from
        // the root or a `+x`: a letter or digit first.
        && id.as_bytes()[0].is_ascii_alphanumeric()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.:@+=/-".contains(&b))
        // Never a path that leaves where a `stop` like `rm -rf DIR/{id}`
        // puts it: no leading `/`, no `.` or `..` part, no empty part.
        && id.split('/').all(|part| !matches!(part, "" | "." | ".."))
}

/// The id a `start` printed: its last non-empty line.
fn id_of(stdout: &str) -> Result<String, String> {
    let Some(line) = stdout.lines().map(str::trim).rfind(|l| !l.is_empty()) else {
        return Err("printed no allocation id on stdout".into());
    };
    if valid_id(line) {
        Ok(line.to_string())
    } else {
        let shown: String = line.chars().take(80).collect();
        Err(format!(
            "printed {shown:?} as the allocation id: an id is 1 to {MAX_ID_LEN} characters of letters, digits and `_.:@+=/-`, starting with a letter or digit, with no `.`, `..` or empty part between slashes"
        ))
    }
}

/// `argv` as one line for a message.
fn shown(argv: &[String]) -> String {
    let s = argv
        .iter()
        .map(|w| toolcell_kernel::remote::shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ");
    if s.len() > 200 {
        let mut end = 200;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &s[..end])
    } else {
        s
    }
}

/// This host's lifecycle bookkeeping: its id, its records, and the stop
/// commands running in the background.
#[derive(Debug)]
pub struct Lifecycle {
    host: String,
    records: Option<PathBuf>,
    /// Per remote this host wrote a record for: the remote as it was
    /// configured, and the allocations it has there now (what the record
    /// lists).
    recorded: Mutex<BTreeMap<String, (Remote, BTreeSet<String>)>>,
    /// `stop`s and clean-ups running on their own threads (the host's
    /// exit waits for them, within its bound).
    pending: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// `start`s running now.
    starting: Mutex<Starting>,
    /// Signalled when `starting`'s `active` or `cleaning` change.
    start_cv: std::sync::Condvar,
    /// The sweep of dead hosts' records started with the host.
    sweeper: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// How long the host's exit waits for the sweep of dead hosts' records it
/// started with (a one-shot `exec` should still sweep; an engine that does
/// not answer must not hold every exit): what is not done stays for the
/// next host.
const SWEEP_WAIT_AT_EXIT: Duration = Duration::from_secs(5);

/// Counts one [`Lifecycle::start`] as active until dropped.
struct ActiveStart<'a>(&'a Lifecycle);

impl Drop for ActiveStart<'_> {
    fn drop(&mut self) {
        let mut g = self.0.lock_starting();
        g.active = g.active.saturating_sub(1);
        drop(g);
        self.0.start_cv.notify_all();
    }
}

/// How long a clean-up after a failed `start` waits for a moment without
/// starts before it gives up (the host's exit sweeps anyway).
const CLEANUP_WAIT: Duration = Duration::from_secs(600);

/// One allocation: stopped when dropped (on a thread of its own; see
/// [`Lifecycle::finish`] for waiting).
#[derive(Debug)]
pub struct Allocation {
    id: String,
    remote_name: String,
    remote: Arc<Remote>,
    session: String,
    lifecycle: Arc<Lifecycle>,
}

impl Allocation {
    /// The id `start` printed.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The placeholder values for this allocation's commands.
    pub fn vars(&self) -> Vars<'_> {
        Vars {
            id: Some(&self.id),
            session: Some(&self.session),
            host: Some(&self.lifecycle.host),
            remote: Some(&self.remote_name),
        }
    }
}

/// Stops `alloc` now, on this thread (not in the background as a drop
/// does).
fn stop_now(mut alloc: Allocation) {
    let argv = fill(&alloc.remote.stop, &alloc.vars());
    let what = format!("remote \"{}\" allocation {}", alloc.remote_name, alloc.id);
    if stop_one(&argv, secs(alloc.remote.stop_timeout), &what) {
        alloc.lifecycle.note(&alloc.remote_name, &alloc.id, false);
    }
    // Stopped: the drop has nothing left to do.
    alloc.id.clear();
}

impl Allocation {
    /// Starts the `stop` now, on a thread of its own (as dropping does),
    /// and returns what says when it is done: a kernel that ends runs its
    /// allocation's `stop` before it kills the local command (an engine
    /// whose client is killed first — SLURM's `srun` — can take seconds
    /// to free the allocation's resources for the next one).
    pub fn stop_in_background(mut self) -> tokio::sync::oneshot::Receiver<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.spawn_stop(Some(tx));
        // Stopped: the drop has nothing left to do.
        self.id.clear();
        rx
    }

    fn spawn_stop(&self, done: Option<tokio::sync::oneshot::Sender<()>>) {
        let argv = fill(&self.remote.stop, &self.vars());
        let timeout = secs(self.remote.stop_timeout);
        let what = format!("remote \"{}\" allocation {}", self.remote_name, self.id);
        let lc = Arc::clone(&self.lifecycle);
        let (remote, id) = (self.remote_name.clone(), self.id.clone());
        self.lifecycle.in_background(move || {
            // A stop that failed leaves the id in the record: whoever
            // sweeps this host's record tries again.
            if stop_one(&argv, timeout, &what) {
                lc.note(&remote, &id, false);
            }
            if let Some(tx) = done {
                let _ = tx.send(());
            }
        });
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        if self.id.is_empty() {
            return;
        }
        self.spawn_stop(None);
    }
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::from_secs(30))
}

/// A command's time: the remote's `stop_timeout`, or what is left until
/// `deadline` if that is sooner.
fn remaining(deadline: Instant, remote: &Remote) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .min(secs(remote.stop_timeout))
}

/// A thread for a remote's commands.
fn spawn_named(f: impl FnOnce() + Send + 'static) -> Option<std::thread::JoinHandle<()>> {
    match std::thread::Builder::new()
        .name("toolcell-remote-lifecycle".into())
        .spawn(f)
    {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::warn!("cannot start a thread for a remote's stop/list: {e}");
            None
        }
    }
}

/// The file name of `host`'s record for remote `name`.
fn record_file(host: &str, name: &str) -> String {
    format!("{host}.{name}")
}

/// Runs one `stop`, logging what went wrong.
fn stop_one(argv: &[String], timeout: Duration, what: &str) -> bool {
    match run(argv, None, timeout) {
        Ok(r) if r.success => {
            tracing::debug!("stopped {what}");
            true
        }
        Ok(r) => {
            tracing::warn!(
                "stopping {what} failed: `{}` ended with {}: {}",
                shown(argv),
                r.status,
                r.stderr
            );
            false
        }
        Err(RunError::Timeout { stderr }) => {
            tracing::warn!(
                "stopping {what}: `{}` did not finish within {timeout:?}: {stderr}",
                shown(argv)
            );
            false
        }
        Err(RunError::Spawn(e)) => {
            tracing::warn!("stopping {what}: cannot run `{}`: {e}", shown(argv));
            false
        }
    }
}

/// One host's record of a remote it starts allocations on.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Record {
    host: String,
    remote: String,
    pid: u32,
    start_ticks: u64,
    boot_id: String,
    /// The machine (`/etc/machine-id`, else the host name) and the pid
    /// namespace the host ran in: a record is only judged — and swept — by
    /// a host on the same machine in the same namespace (a home directory
    /// shared between machines holds every machine's records).
    #[serde(default)]
    machine: String,
    #[serde(default)]
    pidns: u64,
    created: u64,
    /// The remote's `stop` and `list` as configured when the record was
    /// written: a host whose `[remotes.NAME]` differs (another project's
    /// remote of the same name) leaves the record alone.
    #[serde(default)]
    stop: Vec<String>,
    #[serde(default)]
    list: Vec<String>,
    /// The allocations the host had when it last wrote the record.
    #[serde(default)]
    ids: Vec<String>,
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// This machine's identity: `/etc/machine-id` (or D-Bus's copy), else the
/// host name; empty when none can be read.
fn machine_id() -> String {
    for path in ["/etc/machine-id", "/var/lib/dbus/machine-id"] {
        if let Ok(s) = std::fs::read_to_string(path) {
            let s = s.trim();
            if !s.is_empty() && s.len() <= 128 {
                return s.to_string();
            }
        }
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .map(|h| format!("host:{h}"))
        .unwrap_or_default()
}

/// A machine id as a directory name: `[A-Za-z0-9_-]`, at most 64
/// characters (empty when there is none).
fn machine_key(machine: &str) -> String {
    machine
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect()
}

/// The inode of this process's pid namespace (0 when unknown).
fn pid_namespace() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino())
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Record {
    /// Whether the host that wrote it is surely gone: it ran on this
    /// machine, in this pid namespace, and either the machine rebooted
    /// since, or its pid is not the same process any more, or it is that
    /// process but a zombie (killed, its parent not yet reaping it: it
    /// runs nothing and will stop nothing). Anything that
    /// cannot be told (a record of another machine or namespace, an
    /// identity that cannot be read) counts as alive: a live host's
    /// allocations are never stopped on a guess.
    fn dead(&self) -> bool {
        let machine = machine_id();
        let pidns = pid_namespace();
        let boot = boot_id();
        if machine.is_empty() || self.machine != machine || pidns == 0 || self.pidns != pidns {
            return false;
        }
        if boot.is_empty() || self.boot_id.is_empty() {
            return false;
        }
        self.boot_id != boot
            || toolcell_sys::process::start_time(self.pid) != Some(self.start_ticks)
            || toolcell_sys::process::is_zombie(self.pid)
    }

    /// Whether `remote` is the remote this record was written for (same
    /// `stop` and `list`): only then do its ids mean anything to it.
    fn matches(&self, remote: &Remote) -> bool {
        self.stop == remote.stop && self.list == remote.list
    }
}

/// Whether `s` is a host id as [`Lifecycle::new`] makes them: `tc` and ten
/// lowercase hex digits.
fn valid_host_id(s: &str) -> bool {
    s.len() == 12
        && s.starts_with("tc")
        && s[2..]
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The default directory of host records: `$XDG_STATE_HOME/toolcell/remote-hosts`,
/// else `~/.local/state/toolcell/remote-hosts`.
pub fn default_records_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|h| h.join(".local").join("state"))
        })?;
    Some(base.join("toolcell").join("remote-hosts"))
}

impl Lifecycle {
    /// A host's bookkeeping, its records in `records` (`None`: no records,
    /// so no sweeping after a crash).
    ///
    /// # Errors
    /// No randomness for the host id.
    pub fn new(records: Option<PathBuf>) -> Result<Arc<Self>, toolcell_kernel::ids::RandomError> {
        let host = format!("tc{}", toolcell_protocol::random_hex(5)?);
        // One directory per machine: a home directory shared between
        // machines holds every machine's records, and a host only ever
        // reads its own machine's (so another machine's can neither be
        // taken for dead nor crowd this one's out of a sweep).
        let records = records.and_then(|dir| {
            let key = machine_key(&machine_id());
            if key.is_empty() {
                tracing::warn!(
                    "this machine has no machine id or host name: remote allocations of a host that dies are not swept by the next one"
                );
                return None;
            }
            Some(dir.join(key))
        });
        Ok(Arc::new(Self {
            host,
            records,
            recorded: Mutex::new(BTreeMap::new()),
            pending: Mutex::new(Vec::new()),
            starting: Mutex::new(Starting::default()),
            start_cv: std::sync::Condvar::new(),
            sweeper: Mutex::new(None),
        }))
    }

    fn lock_starting(&self) -> std::sync::MutexGuard<'_, Starting> {
        self.starting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// This host's id (`{host}`).
    pub fn host_id(&self) -> &str {
        &self.host
    }

    fn in_background(&self, f: impl FnOnce() + Send + 'static) {
        let mut pending = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        pending.retain(|h| !h.is_finished());
        if let Some(h) = spawn_named(f) {
            pending.push(h);
        }
    }

    /// Writes this host's record for `remote` before its first `start`
    /// (whatever happens next, a later host can sweep), and again whenever
    /// the allocations it has there change (`note`).
    fn record(&self, name: &str, remote: &Remote) {
        let mut recorded = self
            .recorded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if recorded.contains_key(name) {
            return;
        }
        recorded.insert(name.to_string(), (remote.clone(), BTreeSet::new()));
        self.write_record(name, remote, &BTreeSet::new());
    }

    /// Adds (`live`) or removes an allocation of `remote` in this host's record.
    fn note(&self, name: &str, id: &str, live: bool) {
        let mut recorded = self
            .recorded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some((remote, ids)) = recorded.get_mut(name) else {
            return;
        };
        let changed = if live {
            ids.insert(id.to_string())
        } else {
            ids.remove(id)
        };
        if changed {
            let (remote, ids) = (remote.clone(), ids.clone());
            self.write_record(name, &remote, &ids);
        }
    }

    /// This host's record for `remote` with `ids`.
    fn record_of(&self, name: &str, remote: &Remote, ids: &BTreeSet<String>) -> Record {
        let pid = std::process::id();
        Record {
            host: self.host.clone(),
            remote: name.to_string(),
            pid,
            start_ticks: toolcell_sys::process::start_time(pid).unwrap_or(0),
            boot_id: boot_id(),
            machine: machine_id(),
            pidns: pid_namespace(),
            created: now_secs(),
            stop: remote.stop.clone(),
            list: remote.list.clone(),
            ids: ids.iter().cloned().collect(),
        }
    }

    /// (Re)writes the record: a fresh file renamed over the old one, so a
    /// reader sees one or the other, whole.
    fn write_record(&self, remote_name: &str, remote: &Remote, ids: &BTreeSet<String>) {
        let Some(dir) = &self.records else {
            return;
        };
        let rec = self.record_of(remote_name, remote, ids);
        let remote = remote_name;
        let name = record_file(&self.host, remote);
        let written = toolcell_sys::private_dir::PrivateDir::ensure(dir)
            .map_err(|e| e.to_string())
            .and_then(|d| {
                let rand = toolcell_protocol::random_hex(4).map_err(|e| e.to_string())?;
                let tmp = format!(".{name}.{rand}");
                let mut f = d.create_file(&tmp).map_err(|e| e.to_string())?;
                let body = serde_json::to_vec(&rec).map_err(|e| e.to_string())?;
                std::io::Write::write_all(&mut f, &body).map_err(|e| e.to_string())?;
                nix::fcntl::renameat(d.fd(), tmp.as_str(), d.fd(), name.as_str()).map_err(|e| {
                    let _ = nix::unistd::unlinkat(
                        d.fd(),
                        tmp.as_str(),
                        nix::unistd::UnlinkatFlags::NoRemoveDir,
                    );
                    e.to_string()
                })
            });
        if let Err(e) = written {
            tracing::warn!(
                "cannot write the host record in {}: {e}; if this host dies, its allocations on remote \"{remote}\" may not be swept",
                dir.display()
            );
        }
    }

    /// Runs `remote`'s `start` for a kernel of `session`: the allocation,
    /// stopped when dropped. Blocking (call it on the blocking pool).
    ///
    /// A `start` that fails in any way may still have made an allocation
    /// (the engine made the container, then the command timed out): when
    /// the remote's `list` names `{host}`, a clean-up runs in the
    /// background at the next moment no `start` is under way, and stops
    /// what `list` prints that no kernel of this host holds.
    ///
    /// # Errors
    /// The command failed, timed out or printed no usable id.
    pub fn start(
        self: &Arc<Self>,
        name: &str,
        remote: &Arc<Remote>,
        session: &str,
    ) -> Result<Allocation, StartFailure> {
        let _active = {
            let mut g = self.lock_starting();
            while g.cleaning {
                g = self
                    .start_cv
                    .wait(g)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            g.active += 1;
            ActiveStart(self.as_ref())
        };
        self.record(name, remote);
        let session = session_label(session);
        let vars = Vars {
            id: None,
            session: Some(&session),
            host: Some(&self.host),
            remote: Some(name),
        };
        let argv = fill(&remote.start, &vars);
        let timeout = secs(remote.start_timeout);
        let ran = run_tracked(&argv, None, timeout, Some(&self.starting), true);
        let failed = |f: StartFailure| {
            self.clean_up_later(name, remote);
            Err(f)
        };
        let ran = match ran {
            Ok(r) => r,
            Err(RunError::Spawn(e)) => {
                return Err(StartFailure {
                    reason: format!("cannot run its start command ({}): {e}", shown(&argv)),
                    stderr: String::new(),
                });
            }
            Err(RunError::Timeout { stderr }) => {
                return failed(StartFailure {
                    reason: format!(
                        "its start command ({}) did not finish within {} s ([remotes.{name}] start_timeout); it was killed",
                        shown(&argv),
                        remote.start_timeout
                    ),
                    stderr,
                });
            }
        };
        if !ran.success {
            if self.closing() {
                return Err(StartFailure {
                    reason: "its start command was stopped: this host is shutting down".into(),
                    stderr: ran.stderr,
                });
            }
            return failed(StartFailure {
                reason: format!(
                    "its start command ({}) failed with {}",
                    shown(&argv),
                    ran.status
                ),
                stderr: ran.stderr,
            });
        }
        let id = match id_of(&ran.stdout) {
            Ok(id) => id,
            Err(why) => {
                return failed(StartFailure {
                    reason: format!("its start command ({}) {why}", shown(&argv)),
                    stderr: ran.stderr,
                });
            }
        };
        tracing::debug!("remote \"{name}\": allocation {id} started for session {session}");
        self.note(name, &id, true);
        let alloc = Allocation {
            id,
            remote_name: name.to_string(),
            remote: Arc::clone(remote),
            session,
            lifecycle: Arc::clone(self),
        };
        if self.closing() {
            // The host is ending: `finish` may have swept already.
            stop_now(alloc);
            return Err(StartFailure {
                reason: "its allocation was stopped again: this host is shutting down".into(),
                stderr: String::new(),
            });
        }
        Ok(alloc)
    }

    /// Schedules the clean-up after a failed `start` of `name` (see
    /// [`Lifecycle::start`]), once per remote at a time.
    fn clean_up_later(self: &Arc<Self>, name: &str, remote: &Remote) {
        if !remote.list.iter().any(|w| w.contains("{host}")) {
            return; // nothing tells this host's allocations apart
        }
        if !self.lock_starting().dirty.insert(name.to_string()) {
            return;
        }
        let lc = Arc::clone(self);
        let (owned, remote) = (name.to_string(), remote.clone());
        let mut pending = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        pending.retain(|h| !h.is_finished());
        match spawn_named(move || lc.clean_up(&owned, &remote)) {
            Some(h) => pending.push(h),
            // No thread: the next failed start tries again.
            None => {
                drop(pending);
                self.lock_starting().dirty.remove(name);
            }
        }
    }

    /// The clean-up itself: waits for a moment without starts (and holds
    /// new ones off), then lists this host's allocations on `name` and
    /// stops those no kernel holds.
    fn clean_up(&self, name: &str, remote: &Remote) {
        let give_up = Instant::now() + CLEANUP_WAIT;
        {
            let mut g = self.lock_starting();
            loop {
                if g.closing {
                    g.dirty.remove(name);
                    return; // `finish` sweeps
                }
                if g.active == 0 && !g.cleaning {
                    break;
                }
                if Instant::now() >= give_up {
                    g.dirty.remove(name);
                    tracing::warn!(
                        "remote \"{name}\": no moment without a start for the clean-up after a failed start; the host's exit sweeps instead"
                    );
                    return;
                }
                g = self
                    .start_cv
                    .wait_timeout(g, Duration::from_millis(500))
                    .map_or_else(|e| e.into_inner().0, |(g, _)| g);
            }
            g.cleaning = true;
            g.dirty.remove(name);
        }
        // Starts wait while `cleaning`: it is cleared however this ends.
        struct Cleaning<'a>(&'a Lifecycle);
        impl Drop for Cleaning<'_> {
            fn drop(&mut self) {
                self.0.lock_starting().cleaning = false;
                self.0.start_cv.notify_all();
            }
        }
        let _cleaning = Cleaning(self);
        // Every allocation a kernel of this host holds, on any remote: two
        // remotes may list the same engine's allocations by `{host}`.
        let held: BTreeSet<String> = self
            .recorded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .flat_map(|(_, ids)| ids.iter().cloned())
            .collect();
        let deadline = Instant::now() + secs(remote.stop_timeout) * 2;
        if let Some(listed) = list_host(name, remote, &self.host, deadline) {
            for id in listed.difference(&held) {
                let vars = Vars {
                    id: Some(id),
                    session: None,
                    host: Some(&self.host),
                    remote: Some(name),
                };
                let what = format!("remote \"{name}\" allocation {id}, left by a failed start");
                let timeout = remaining(deadline, remote);
                if timeout.is_zero() {
                    break; // the rest is for the host's exit
                }
                if stop_one(&fill(&remote.stop, &vars), timeout, &what) {
                    tracing::info!("stopped {what}");
                }
            }
        }
    }

    /// Stops what dead hosts left on `remotes` (see the module docs), on a
    /// thread of its own. The host's exit waits for it only briefly
    /// ([`SWEEP_WAIT_AT_EXIT`]): a record whose sweep did not finish stays
    /// for the next host. Run when a registry starts, and again on the
    /// reaper's period (a host that dies while this one runs is swept
    /// too); a call while the last sweep still runs does nothing.
    pub fn sweep_dead_hosts(self: &Arc<Self>, remotes: &BTreeMap<String, Remote>) {
        let Some(dir) = self.records.clone() else {
            return;
        };
        if self.closing()
            || self
                .sweeper
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .as_ref()
                .is_some_and(|h| !h.is_finished())
        {
            return;
        }
        let sweepable: BTreeMap<String, Remote> = remotes
            .iter()
            .filter(|(_, r)| !r.stop.is_empty())
            .map(|(n, r)| (n.clone(), r.clone()))
            .collect();
        if sweepable.is_empty() || !dir.exists() {
            return;
        }
        let me = self.host.clone();
        let handle = spawn_named(move || {
            sweep_records(&dir, &sweepable, |rec| rec.host != me && rec.dead(), None)
        });
        *self
            .sweeper
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = handle;
    }

    /// At the host's end: kills the `start`s under way, waits (at most
    /// `limit`) for the stops under way, then (within `limit` more) stops
    /// what this host still has on each remote it used — what its `list`
    /// prints for `{host}`, else the allocations it still holds (a `stop`
    /// that failed) — and removes its records, each only when all of that
    /// worked and no `start` was cut short (a later host tries again).
    /// Blocking, at most `2 × limit` plus [`SWEEP_WAIT_AT_EXIT`].
    pub fn finish(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        // The starts under way are killed, not waited for (a queued job can
        // wait for hours); what one made before it died is this host's
        // `list`'s to find below — or, when the engine makes it only after
        // that, the next host's: the record stays.
        let cut_short = {
            let mut st = self.lock_starting();
            st.closing = true;
            for g in &st.groups {
                kill_group(*g);
            }
            st.active > 0
        };
        self.start_cv.notify_all();
        self.wait(deadline);
        if let Some(h) = self
            .sweeper
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            let until = Instant::now() + SWEEP_WAIT_AT_EXIT;
            while !h.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let deadline = Instant::now() + limit;
        let recorded = std::mem::take(
            &mut *self
                .recorded
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for (name, (was, ids)) in recorded {
            let rec = self.record_of(&name, &was, &ids);
            let swept = sweep_host(&name, &was, &rec, Some(deadline));
            if swept
                && !cut_short
                && let Some(dir) = &self.records
            {
                remove_record(dir, &record_file(&self.host, &name));
            }
        }
    }

    fn closing(&self) -> bool {
        self.starting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .closing
    }

    /// Waits for the background stops and sweeps until `deadline`.
    fn wait(&self, deadline: Instant) {
        loop {
            let handles: Vec<_> = std::mem::take(
                &mut *self
                    .pending
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            if handles.is_empty() {
                return;
            }
            for h in handles {
                while !h.is_finished() {
                    if Instant::now() >= deadline {
                        tracing::warn!(
                            "a remote's stop command is still running; leaving it (a later host sweeps what it leaves)"
                        );
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                let _ = h.join();
            }
        }
    }
}

/// The records in `dir` (at most [`MAX_RECORDS`]) with their file names
/// (`None`: not a record this code can act on). Only regular files of this
/// user with one link are read (a FIFO planted there cannot block), and
/// leftovers of a record being written that are older than an hour go.
fn read_records(dir: &Path) -> Vec<(String, Option<Record>)> {
    let Ok(d) = toolcell_sys::private_dir::PrivateDir::ensure(dir) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(d.path()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        if out.len() >= MAX_RECORDS {
            break;
        }
        let Some(name) = e.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if name.starts_with('.') {
            // A record being written, or left by a host that died writing.
            let old = e
                .metadata()
                .ok()
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > Duration::from_secs(3600));
            if old {
                remove_record(dir, &name);
            }
            continue;
        }
        out.push((name.clone(), read_record(&d, &name)));
    }
    out
}

/// One record file, if it is a regular file of this user with one link,
/// at most [`RECORD_MAX_BYTES`], and parses.
fn read_record(d: &toolcell_sys::private_dir::PrivateDir, name: &str) -> Option<Record> {
    use nix::fcntl::OFlag;
    use std::os::unix::fs::MetadataExt;
    let fd = nix::fcntl::openat(
        d.fd(),
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
        nix::sys::stat::Mode::empty(),
    )
    .ok()?;
    let f = std::fs::File::from(fd);
    let md = f.metadata().ok()?;
    if !md.is_file() || md.uid() != nix::unistd::geteuid().as_raw() || md.nlink() != 1 {
        return None;
    }
    let mut bytes = Bounded::new(RECORD_MAX_BYTES, false);
    bytes.read_from(f);
    if bytes.truncated {
        return None;
    }
    serde_json::from_slice::<Record>(&bytes.buf).ok()
}

fn remove_record(dir: &Path, name: &str) {
    if let Ok(d) = toolcell_sys::private_dir::PrivateDir::ensure(dir) {
        let _ = nix::unistd::unlinkat(d.fd(), name, nix::unistd::UnlinkatFlags::NoRemoveDir);
    }
}

/// For every record `which` picks: stop the host's allocations on its
/// remote ([`sweep_host`]) and remove the record when all of that worked.
/// Records nobody can act on (unreadable, not shaped as this code writes
/// them) are removed; so are picked records older than [`RECORD_MAX_AGE`]
/// whose sweep keeps failing with the remote they were written for (their
/// host is long gone and whatever keeps the sweep from working will not
/// change), and any record older than [`FOREIGN_RECORD_MAX_AGE`] (another
/// project's remote, another pid namespace: nobody here can use it).
fn sweep_records(
    dir: &Path,
    remotes: &BTreeMap<String, Remote>,
    which: impl Fn(&Record) -> bool,
    deadline: Option<Instant>,
) {
    for (name, rec) in read_records(dir) {
        // A record nobody can read, or whose host id is not one this code
        // makes (it is substituted for `{host}`, maybe inside `sh -c`), is
        // not acted on.
        let Some(rec) = rec.filter(|r| valid_host_id(&r.host)) else {
            remove_record(dir, &name);
            continue;
        };
        let age = now_secs().saturating_sub(rec.created);
        if age > FOREIGN_RECORD_MAX_AGE.as_secs() {
            remove_record(dir, &name);
            continue;
        }
        let too_old = age > RECORD_MAX_AGE.as_secs();
        if !which(&rec) {
            continue;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return;
        }
        // Only a remote configured as it was when the record was written
        // (another project may name another engine the same).
        let Some(remote) = remotes.get(&rec.remote).filter(|r| rec.matches(r)) else {
            continue; // another project's, or a remote since changed
        };
        if sweep_host(&rec.remote, remote, &rec, deadline) {
            remove_record(dir, &name);
        } else if too_old {
            tracing::warn!(
                "remote \"{}\": giving up the record of host {} (older than {} days); what it names may be left on the engine",
                rec.remote,
                rec.host,
                RECORD_MAX_AGE.as_secs() / 86_400
            );
            remove_record(dir, &name);
        }
    }
}

/// The allocations `remote`'s `list` prints for `host` (a `list` that
/// names `{host}`), or `None` when it failed. Lines that are not ids are
/// skipped (with a warning), and so is a last line cut by the output bound.
fn list_host(
    name: &str,
    remote: &Remote,
    host: &str,
    deadline: Instant,
) -> Option<BTreeSet<String>> {
    let vars = Vars {
        id: None,
        session: None,
        host: Some(host),
        remote: Some(name),
    };
    let argv = fill(&remote.list, &vars);
    let timeout = remaining(deadline, remote);
    if timeout.is_zero() {
        return None;
    }
    let listed = match run(&argv, None, timeout) {
        Ok(r) if r.success => r,
        Ok(r) => {
            tracing::warn!(
                "remote \"{name}\", host {host}: `{}` ended with {}: {}",
                shown(&argv),
                r.status,
                r.stderr
            );
            return None;
        }
        Err(e) => {
            tracing::warn!(
                "remote \"{name}\", host {host}: `{}` failed: {e:?}",
                shown(&argv)
            );
            return None;
        }
    };
    let mut text = listed.stdout.as_str();
    if listed.stdout_truncated {
        // The last line may be a piece of an id: never stop that.
        text = text.rfind('\n').map_or("", |i| &text[..i]);
    }
    let mut ids = BTreeSet::new();
    for id in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .take(MAX_LISTED)
    {
        if valid_id(id) {
            ids.insert(id.to_string());
        } else {
            let shown_id: String = id.chars().take(80).collect();
            tracing::warn!(
                "remote \"{name}\": `list` printed {shown_id:?}, not an allocation id; skipped"
            );
        }
    }
    Some(ids)
}

/// What of one host is stopped on one remote: with a `list` that names
/// `{host}`, everything it lists for that host (what the engine no longer
/// lists is gone already); with a `list` without `{host}` (it lists every
/// host's), only the listed allocations the record names; without `list`,
/// the record's allocations. True when every `stop` (and the `list`)
/// worked before `deadline`.
fn sweep_host(name: &str, remote: &Remote, rec: &Record, deadline: Option<Instant>) -> bool {
    let host = rec.host.as_str();
    let deadline = deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400));
    let recorded: BTreeSet<String> = rec.ids.iter().filter(|i| valid_id(i)).cloned().collect();
    let targets: BTreeSet<String> = if remote.list.is_empty() {
        recorded
    } else {
        let Some(listed) = list_host(name, remote, host, deadline) else {
            return false;
        };
        if remote.list.iter().any(|w| w.contains("{host}")) {
            listed
        } else {
            listed.intersection(&recorded).cloned().collect()
        }
    };
    let mut all = true;
    for id in &targets {
        let timeout = remaining(deadline, remote);
        if timeout.is_zero() {
            return false;
        }
        let vars = Vars {
            id: Some(id),
            session: None,
            host: Some(host),
            remote: Some(name),
        };
        let what = format!("remote \"{name}\" allocation {id} of host {host}");
        if stop_one(&fill(&remote.stop, &vars), timeout, &what) {
            tracing::info!("swept {what}");
        } else {
            all = false;
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(ws: &[&str]) -> Vec<String> {
        ws.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn placeholders_are_filled_inside_words_and_nothing_else_changes() {
        let argv = words(&[
            "docker",
            "exec",
            "-i",
            "{id}",
            "--label=toolcell.host={host}",
            "{{.ID}}",
            "{other}",
        ]);
        let vars = Vars {
            id: Some("abc"),
            host: Some("tc01"),
            ..Vars::default()
        };
        assert_eq!(
            fill(&argv, &vars),
            words(&[
                "docker",
                "exec",
                "-i",
                "abc",
                "--label=toolcell.host=tc01",
                "{{.ID}}",
                "{other}"
            ])
        );
    }

    #[test]
    fn session_labels_are_safe_words() {
        assert_eq!(session_label("default"), "default");
        assert_eq!(session_label("chat 42/räume"), "chat_42_r_ume");
        assert_eq!(session_label("--rm"), "rm");
        assert_eq!(session_label("$(reboot)"), "reboot");
        assert_eq!(session_label("!!!"), "s");
        assert_eq!(session_label(&"x".repeat(100)).len(), 63);
    }

    #[test]
    fn host_ids_are_checked() {
        let l = Lifecycle::new(None).unwrap();
        assert!(valid_host_id(l.host_id()), "{}", l.host_id());
        assert!(!valid_host_id("tc$(reboot)xx"));
        assert!(!valid_host_id("tc0123456789a"));
        assert!(!valid_host_id("tcABCDEF0123"));
        assert!(!valid_host_id(""));
    }

    #[test]
    fn ids_are_checked() {
        assert!(valid_id("3f9a0c"));
        assert!(valid_id("12345"));
        assert!(valid_id("pod/toolcell-abc"));
        assert!(!valid_id(""));
        assert!(!valid_id("-rf"));
        assert!(!valid_id("a b"));
        assert!(!valid_id("a;b"));
        assert!(!valid_id("$(x)"));
        assert!(!valid_id(".."));
        assert!(!valid_id("a/../b"));
        assert!(!valid_id("/etc"));
        assert!(!valid_id("a//b"));
        assert!(valid_id("a..b"));
        assert!(!valid_id(&"a".repeat(MAX_ID_LEN + 1)));
        assert_eq!(id_of("pulling...\n\nabc123\n\n").unwrap(), "abc123");
        assert!(id_of("").unwrap_err().contains("no allocation id"));
        assert!(
            id_of("--help\n")
                .unwrap_err()
                .contains("starting with a letter or digit")
        );
        for bad in ["@/etc/passwd", "+x", "_x", ".x", ":x"] {
            assert!(!valid_id(bad), "{bad}");
        }
    }

    #[test]
    fn a_start_that_logs_much_still_gives_its_id() {
        // 400 KB of progress on stdout, then the id: the last line counts,
        // so the tail is what is kept.
        let r = run_tracked(
            &words(&["sh", "-c", "i=0; while [ $i -lt 20000 ]; do echo \"step $i of the pull\"; i=$((i+1)); done; echo abc123"]),
            None,
            Duration::from_secs(20),
            None,
            true,
        )
        .unwrap();
        assert!(r.stdout_truncated);
        assert_eq!(id_of(&r.stdout).unwrap(), "abc123");
    }

    #[test]
    fn a_process_that_leaves_the_group_holds_nothing() {
        // `setsid` takes the sleeper out of the group the kill reaches; it
        // keeps stdout open. What was printed before still counts, and the
        // call returns after the read grace.
        let t = Instant::now();
        let r = run(
            &words(&["sh", "-c", "echo id1; setsid sleep 30 &"]),
            None,
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(r.stdout.trim(), "id1");
        assert!(t.elapsed() < Duration::from_secs(6), "{:?}", t.elapsed());
    }

    fn record(machine: &str, pidns: u64, pid: u32, boot: &str) -> Record {
        Record {
            host: "tc0123456789".into(),
            remote: "r".into(),
            pid,
            start_ticks: toolcell_sys::process::start_time(pid).unwrap_or(0),
            boot_id: boot.into(),
            machine: machine.into(),
            pidns,
            created: now_secs(),
            stop: words(&["true", "{id}"]),
            list: Vec::new(),
            ids: Vec::new(),
        }
    }

    #[test]
    fn only_a_host_of_this_machine_and_namespace_can_be_judged_dead() {
        let (m, ns, boot) = (machine_id(), pid_namespace(), boot_id());
        assert!(!m.is_empty() && ns != 0 && !boot.is_empty());
        let me = std::process::id();
        // This very process: alive.
        assert!(!record(&m, ns, me, &boot).dead());
        // Another boot of this machine: dead.
        assert!(record(&m, ns, me, "another-boot").dead());
        // A pid that is not the process that wrote the record: dead.
        let mut gone = record(&m, ns, me, &boot);
        gone.start_ticks += 1;
        assert!(gone.dead());
        // Another machine (a shared home directory), another pid
        // namespace, or no identity: never judged dead.
        assert!(!record("other-machine", ns, me, "another-boot").dead());
        assert!(!record(&m, ns + 1, me, "another-boot").dead());
        assert!(!record("", ns, me, "another-boot").dead());
        assert!(!record(&m, ns, me, "").dead());
    }

    #[test]
    fn a_fifo_among_the_records_is_not_opened_for_reading() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("records");
        toolcell_sys::private_dir::PrivateDir::ensure(&dir).unwrap();
        nix::unistd::mkfifo(
            &dir.join("tc0123456789.r"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let t = Instant::now();
        let recs = read_records(&dir);
        assert!(t.elapsed() < Duration::from_secs(2));
        assert_eq!(recs.len(), 1);
        assert!(recs[0].1.is_none());
    }

    #[test]
    fn a_command_is_bounded_in_time_and_output() {
        let r = run(
            &words(&["sh", "-c", "echo out; echo err >&2; exit 3"]),
            None,
            Duration::from_secs(10),
        )
        .unwrap();
        assert!(!r.success);
        assert_eq!(r.status, "exit status 3");
        assert_eq!(r.stdout, "out\n");
        assert_eq!(r.stderr, "err");
        let t = Instant::now();
        match run(
            &words(&["sh", "-c", "echo half >&2; sleep 30"]),
            None,
            Duration::from_millis(300),
        ) {
            Err(RunError::Timeout { stderr }) => assert_eq!(stderr, "half"),
            other => panic!("{other:?}"),
        }
        assert!(t.elapsed() < Duration::from_secs(5));
        // A background child holding the pipes does not hold the caller.
        let t = Instant::now();
        let r = run(
            &words(&["sh", "-c", "sleep 30 & echo id1"]),
            None,
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(r.stdout.trim(), "id1");
        assert!(t.elapsed() < Duration::from_secs(5));
        let big = run(
            &words(&["sh", "-c", "head -c 1000000 /dev/zero | tr '\\0' x"]),
            None,
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(big.stdout.len(), STDOUT_CAP);
        assert!(matches!(
            run(&words(&["/nonexistent/x"]), None, Duration::from_secs(1)),
            Err(RunError::Spawn(_))
        ));
    }
}

/// A [`Lifecycle`] as the kernel's allocator: what a kernel of a remote
/// with `start` calls to get its allocation.
#[derive(Debug)]
pub struct Allocator(pub Arc<Lifecycle>);

impl toolcell_kernel::remote::Allocator for Allocator {
    fn start(
        &self,
        name: &str,
        remote: &Arc<Remote>,
        session: &str,
    ) -> Result<Box<dyn toolcell_kernel::remote::Allocation>, StartFailure> {
        Lifecycle::start(&self.0, name, remote, session)
            .map(|a| Box::new(a) as Box<dyn toolcell_kernel::remote::Allocation>)
    }
}

impl toolcell_kernel::remote::Allocation for Allocation {
    fn id(&self) -> &str {
        Allocation::id(self)
    }

    fn vars(&self) -> Vars<'_> {
        Allocation::vars(self)
    }

    fn stop_in_background(self: Box<Self>) -> tokio::sync::oneshot::Receiver<()> {
        Allocation::stop_in_background(*self)
    }
}
