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
//! starts) stops what each dead host left: with a `list` that names
//! `{host}`, everything it prints for that host — the engine's own account,
//! through the labels or names `start` gave it, which also covers a `start`
//! that timed out after the engine had made the allocation — and the ids
//! the record names; with a `list` without `{host}`, the listed ids the
//! record names; without `list`, the record's ids. [`Lifecycle::finish`]
//! (run by `Registry::shutdown_all`) waits for the stops under way, sweeps
//! this host's own leftovers the same way, and removes its records.
//!
//! Everything a `start` or `list` prints is hostile: ids are one line of at
//! most 256 characters of `[A-Za-z0-9_.:@+=/-]`, not starting with `-` (so
//! an id can never pass as an option to `stop`) or `/`, with no `.`, `..`
//! or empty part between slashes (so it cannot climb out of a path like
//! `DIR/{id}`), and output is read up to a bound.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::remote::Remote;

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

/// Reads `r` to its end, keeping the first `cap` bytes (`keep_tail`: the
/// last `cap` bytes instead).
fn read_bounded(mut r: impl Read, cap: usize, keep_tail: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                if out.len() > cap {
                    if keep_tail {
                        let cut = out.len() - cap;
                        out.drain(..cut);
                    } else {
                        out.truncate(cap);
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    out
}

/// Runs `argv` (no shell) with stdin on `/dev/null`, in a process group of
/// its own, for at most `timeout`: then the group is killed. Blocking.
fn run(argv: &[String], cwd: Option<&Path>, timeout: Duration) -> Result<Ran, RunError> {
    run_tracked(argv, cwd, timeout, None)
}

/// The `start`s running now (their process groups), so that the host's end
/// can kill them instead of waiting up to `start_timeout` for each.
#[derive(Debug, Default)]
struct Starting {
    /// Set by [`Lifecycle::finish`]: no `start` runs from then on.
    closing: bool,
    groups: BTreeSet<u32>,
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
/// killed at once when `starting` is closing).
fn run_tracked(
    argv: &[String],
    cwd: Option<&Path>,
    timeout: Duration,
    starting: Option<&Mutex<Starting>>,
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
    // Readers on threads of their own, answering through channels: a
    // process that left the group but kept a pipe (a daemon `start` forgot
    // to detach) cannot hold this caller past the grace below.
    let reader = |pipe: Option<Box<dyn Read + Send>>, cap: usize, tail: bool| {
        let (tx, rx) = std::sync::mpsc::channel();
        if let Some(p) = pipe {
            std::thread::spawn(move || {
                let _ = tx.send(read_bounded(p, cap, tail));
            });
        }
        rx
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|o| Box::new(o) as Box<dyn Read + Send>),
        STDOUT_CAP,
        false,
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|e| Box::new(e) as Box<dyn Read + Send>),
        STDERR_TAIL * 4,
        true,
    );
    const READ_GRACE: Duration = Duration::from_secs(2);
    let deadline = Instant::now() + timeout;
    // Whether the command ended by itself. The leader's exit is seen
    // without reaping it (WNOWAIT), so its process group is killed while
    // the pgid cannot belong to anyone else; it is reaped only then, off
    // `starting` in the same critical section (`finish` kills under it).
    let leader = nix::unistd::Pid::from_raw(i32::try_from(pgid).unwrap_or(i32::MAX));
    let ended = loop {
        use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
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
    // pipes (and so this thread) open.
    kill_group(pgid);
    let status = {
        let _held = starting.map(|st| {
            let mut g = st.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            g.groups.remove(&pgid);
            g
        });
        child.wait()
    };
    let status = match status {
        Ok(s) if ended => s,
        _ => {
            let stderr = err
                .recv_timeout(READ_GRACE)
                .map(|b| tail_text(&b))
                .unwrap_or_default();
            return Err(RunError::Timeout { stderr });
        }
    };
    let stdout = out.recv_timeout(READ_GRACE).unwrap_or_default();
    let stderr = err.recv_timeout(READ_GRACE).unwrap_or_default();
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
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: tail_text(&stderr),
    })
}

/// `argv` with the placeholders filled in.
pub fn fill(argv: &[String], vars: &Vars<'_>) -> Vec<String> {
    argv.iter()
        .map(|w| {
            if !w.contains('{') {
                return w.clone();
            }
            let mut s = w.clone();
            for (key, value) in [
                ("{id}", vars.id),
                ("{session}", vars.session),
                ("{host}", vars.host),
                ("{remote}", vars.remote),
            ] {
                if let Some(v) = value
                    && s.contains(key)
                {
                    s = s.replace(key, v);
                }
            }
            s
        })
        .collect()
}

/// The values of the placeholders (`None`: left as written).
#[derive(Debug, Clone, Copy, Default)]
pub struct Vars<'a> {
    /// `{id}`.
    pub id: Option<&'a str>,
    /// `{session}` (already reduced with [`session_label`]).
    pub session: Option<&'a str>,
    /// `{host}`.
    pub host: Option<&'a str>,
    /// `{remote}`.
    pub remote: Option<&'a str>,
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
        && !id.starts_with('-')
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
            "printed {shown:?} as the allocation id: an id is 1 to {MAX_ID_LEN} characters of letters, digits and `_.:@+=/-`, not starting with `-` or `/` and with no `.`, `..` or empty part between slashes"
        ))
    }
}

/// `argv` as one line for a message.
fn shown(argv: &[String]) -> String {
    let s = argv
        .iter()
        .map(|w| crate::remote::shell_quote(w))
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

/// Why a `start` failed: a sentence naming the command, and its stderr.
#[derive(Debug, Clone)]
pub struct StartFailure {
    /// What went wrong (`its start command (docker run …) failed with exit status 125`).
    pub reason: String,
    /// The command's last stderr lines.
    pub stderr: String,
}

/// This host's lifecycle bookkeeping: its id, its records, and the stop
/// commands running in the background.
#[derive(Debug)]
pub struct Lifecycle {
    host: String,
    records: Option<PathBuf>,
    /// Per remote this host wrote a record for: the allocations it has
    /// there now (what the record lists).
    recorded: Mutex<BTreeMap<String, BTreeSet<String>>>,
    /// `stop`s and sweeps running on their own threads.
    pending: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// `start`s running now.
    starting: Mutex<Starting>,
}

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

impl Drop for Allocation {
    fn drop(&mut self) {
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
        });
    }
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::from_secs(30))
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
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Record {
    host: String,
    remote: String,
    pid: u32,
    start_ticks: u64,
    boot_id: String,
    created: u64,
    /// The allocations the host had when it last wrote the record.
    #[serde(default)]
    ids: Vec<String>,
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Record {
    /// Whether the host that wrote it still runs.
    fn alive(&self) -> bool {
        !self.boot_id.is_empty()
            && self.boot_id == boot_id()
            && toolcell_tools::process::start_time(self.pid) == Some(self.start_ticks)
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
    pub fn new(records: Option<PathBuf>) -> Result<Arc<Self>, crate::ids::RandomError> {
        let host = format!("tc{}", toolcell_protocol::random_hex(5)?);
        Ok(Arc::new(Self {
            host,
            records,
            recorded: Mutex::new(BTreeMap::new()),
            pending: Mutex::new(Vec::new()),
            starting: Mutex::new(Starting::default()),
        }))
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
        match std::thread::Builder::new()
            .name("toolcell-remote-lifecycle".into())
            .spawn(f)
        {
            Ok(h) => pending.push(h),
            Err(e) => tracing::warn!("cannot start a thread for a remote's stop/list: {e}"),
        }
    }

    /// Writes this host's record for `remote` before its first `start`
    /// (whatever happens next, a later host can sweep), and again whenever
    /// the allocations it has there change (`note`).
    fn record(&self, remote: &str) {
        let mut recorded = self
            .recorded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if recorded.contains_key(remote) {
            return;
        }
        recorded.insert(remote.to_string(), BTreeSet::new());
        self.write_record(remote, &BTreeSet::new());
    }

    /// Adds (`live`) or removes an allocation of `remote` in this host's record.
    fn note(&self, remote: &str, id: &str, live: bool) {
        let mut recorded = self
            .recorded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let ids = recorded.entry(remote.to_string()).or_default();
        let changed = if live {
            ids.insert(id.to_string())
        } else {
            ids.remove(id)
        };
        if changed {
            let ids = ids.clone();
            self.write_record(remote, &ids);
        }
    }

    /// (Re)writes the record: a fresh file renamed over the old one, so a
    /// reader sees one or the other, whole.
    fn write_record(&self, remote: &str, ids: &BTreeSet<String>) {
        let Some(dir) = &self.records else {
            return;
        };
        let pid = std::process::id();
        let rec = Record {
            host: self.host.clone(),
            remote: remote.to_string(),
            pid,
            start_ticks: toolcell_tools::process::start_time(pid).unwrap_or(0),
            boot_id: boot_id(),
            created: now_secs(),
            ids: ids.iter().cloned().collect(),
        };
        let name = format!("{}.{remote}", self.host);
        let written = toolcell_rpc::private_dir::PrivateDir::ensure(dir)
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
    /// # Errors
    /// The command failed, timed out or printed no usable id.
    pub fn start(
        self: &Arc<Self>,
        name: &str,
        remote: &Arc<Remote>,
        session: &str,
    ) -> Result<Allocation, StartFailure> {
        self.record(name);
        let session = session_label(session);
        let vars = Vars {
            id: None,
            session: Some(&session),
            host: Some(&self.host),
            remote: Some(name),
        };
        let argv = fill(&remote.start, &vars);
        let timeout = secs(remote.start_timeout);
        let ran = run_tracked(&argv, None, timeout, Some(&self.starting)).map_err(|e| match e {
            RunError::Spawn(e) => StartFailure {
                reason: format!("cannot run its start command ({}): {e}", shown(&argv)),
                stderr: String::new(),
            },
            RunError::Timeout { stderr } => StartFailure {
                reason: format!(
                    "its start command ({}) did not finish within {} s ([remotes.{name}] start_timeout); it was killed",
                    shown(&argv),
                    remote.start_timeout
                ),
                stderr,
            },
        })?;
        if !ran.success {
            if self.closing() {
                return Err(StartFailure {
                    reason: "its start command was stopped: this host is shutting down".into(),
                    stderr: ran.stderr,
                });
            }
            return Err(StartFailure {
                reason: format!(
                    "its start command ({}) failed with {}",
                    shown(&argv),
                    ran.status
                ),
                stderr: ran.stderr,
            });
        }
        let id = id_of(&ran.stdout).map_err(|why| StartFailure {
            reason: format!("its start command ({}) {why}", shown(&argv)),
            stderr: ran.stderr.clone(),
        })?;
        tracing::debug!("remote \"{name}\": allocation {id} started for session {session}");
        self.note(name, &id, true);
        Ok(Allocation {
            id,
            remote_name: name.to_string(),
            remote: Arc::clone(remote),
            session,
            lifecycle: Arc::clone(self),
        })
    }

    /// Stops what dead hosts left on `remotes` (see the module docs), on a
    /// thread of its own.
    pub fn sweep_dead_hosts(self: &Arc<Self>, remotes: &BTreeMap<String, Remote>) {
        let Some(dir) = self.records.clone() else {
            return;
        };
        let sweepable: BTreeMap<String, Remote> = remotes
            .iter()
            .filter(|(_, r)| !r.stop.is_empty())
            .map(|(n, r)| (n.clone(), r.clone()))
            .collect();
        if sweepable.is_empty() || !dir.exists() {
            return;
        }
        let me = self.host.clone();
        self.in_background(move || {
            sweep_records(&dir, &sweepable, |rec| rec.host != me && !rec.alive())
        });
    }

    /// At the host's end: waits (at most `limit`) for the stops under way,
    /// then stops what this host still has on each remote it used (its
    /// `list`, and the allocations its record still names: a `stop` that
    /// failed) and removes its records — each only when all of that worked,
    /// else a later host tries again. Blocking.
    pub fn finish(&self, remotes: &BTreeMap<String, Remote>, limit: Duration) {
        let deadline = Instant::now() + limit;
        // The starts under way are killed, not waited for (a queued job can
        // wait for hours); what one made before it died is this host's
        // `list`'s to find below.
        {
            let mut st = self
                .starting
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            st.closing = true;
            for g in &st.groups {
                kill_group(*g);
            }
        }
        self.wait(deadline);
        let Some(dir) = &self.records else {
            return;
        };
        let used: BTreeMap<String, Remote> = {
            let recorded = self
                .recorded
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            remotes
                .iter()
                .filter(|(n, _)| recorded.contains_key(*n))
                .map(|(n, r)| (n.clone(), r.clone()))
                .collect()
        };
        let me = self.host.clone();
        sweep_records(dir, &used, |rec| rec.host == me);
        let mut recorded = self
            .recorded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        recorded.clear();
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

/// The records in `dir` (at most [`MAX_RECORDS`]) with their file names.
fn read_records(dir: &Path) -> Vec<(String, Option<Record>)> {
    let Ok(d) = toolcell_rpc::private_dir::PrivateDir::ensure(dir) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(d.path()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten().take(MAX_RECORDS) {
        let Some(name) = e.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if name.starts_with('.') {
            continue; // a record being written
        }
        let rec = nix::fcntl::openat(
            d.fd(),
            name.as_str(),
            nix::fcntl::OFlag::O_RDONLY
                | nix::fcntl::OFlag::O_NOFOLLOW
                | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .ok()
        .map(std::fs::File::from)
        .and_then(|f| {
            let bytes = read_bounded(f, RECORD_MAX_BYTES, false);
            serde_json::from_slice::<Record>(&bytes).ok()
        });
        out.push((name, rec));
    }
    out
}

fn remove_record(dir: &Path, name: &str) {
    if let Ok(d) = toolcell_rpc::private_dir::PrivateDir::ensure(dir) {
        let _ = nix::unistd::unlinkat(d.fd(), name, nix::unistd::UnlinkatFlags::NoRemoveDir);
    }
}

/// For every record `which` picks: stop the host's allocations on its
/// remote ([`sweep_host`]) and remove the record when all of that worked.
/// Records nobody can read, or too old to matter, are removed.
fn sweep_records(dir: &Path, remotes: &BTreeMap<String, Remote>, which: impl Fn(&Record) -> bool) {
    for (name, rec) in read_records(dir) {
        // A record nobody can read, or whose host id is not one this code
        // makes (it is substituted for `{host}`, maybe inside `sh -c`), is
        // not acted on.
        let Some(rec) = rec.filter(|r| valid_host_id(&r.host)) else {
            remove_record(dir, &name);
            continue;
        };
        if !which(&rec) {
            continue;
        }
        let Some(remote) = remotes.get(&rec.remote) else {
            if now_secs().saturating_sub(rec.created) > RECORD_MAX_AGE.as_secs() {
                remove_record(dir, &name);
            }
            continue;
        };
        if sweep_host(&rec.remote, remote, &rec) {
            remove_record(dir, &name);
        }
    }
}

/// What of one host is stopped on one remote: with a `list` that names
/// `{host}`, everything it lists for that host and every allocation the
/// record names; with a `list` without `{host}` (it lists every host's),
/// only the listed allocations the record names; without `list`, the
/// record's allocations. True when every `stop` (and the `list`) worked.
fn sweep_host(name: &str, remote: &Remote, rec: &Record) -> bool {
    let host = rec.host.as_str();
    let vars = Vars {
        id: None,
        session: None,
        host: Some(host),
        remote: Some(name),
    };
    let recorded: BTreeSet<&str> = rec
        .ids
        .iter()
        .map(String::as_str)
        .filter(|i| valid_id(i))
        .collect();
    let mut targets: BTreeSet<String> = BTreeSet::new();
    if remote.list.is_empty() {
        targets.extend(recorded.iter().map(|s| s.to_string()));
    } else {
        let argv = fill(&remote.list, &vars);
        let listed = match run(&argv, None, secs(remote.stop_timeout)) {
            Ok(r) if r.success => r.stdout,
            Ok(r) => {
                tracing::warn!(
                    "sweeping remote \"{name}\" for host {host}: `{}` ended with {}: {}",
                    shown(&argv),
                    r.status,
                    r.stderr
                );
                return false;
            }
            Err(e) => {
                tracing::warn!(
                    "sweeping remote \"{name}\" for host {host}: `{}` failed: {e:?}",
                    shown(&argv)
                );
                return false;
            }
        };
        let by_host = remote.list.iter().any(|w| w.contains("{host}"));
        for id in listed
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .take(MAX_LISTED)
        {
            if !valid_id(id) {
                let shown_id: String = id.chars().take(80).collect();
                tracing::warn!(
                    "sweeping remote \"{name}\": `list` printed {shown_id:?}, not an allocation id; skipped"
                );
                continue;
            }
            if by_host || recorded.contains(id) {
                targets.insert(id.to_string());
            }
        }
        if by_host {
            targets.extend(recorded.iter().map(|s| s.to_string()));
        }
    }
    let mut all = true;
    for id in &targets {
        let vars = Vars {
            id: Some(id),
            ..vars
        };
        let stop = fill(&remote.stop, &vars);
        let what = format!("remote \"{name}\" allocation {id} of host {host}");
        if stop_one(&stop, secs(remote.stop_timeout), &what) {
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
                .contains("not starting with `-`")
        );
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
