//! Which Python a kernel runs (docs/configuration.md, "[execution]";
//! docs/mcp.md, "Setting it up"): resolution order, the one-time probe of each
//! candidate, and an error naming every candidate tried.
//!
//! Order: an explicit interpreter (`[execution] python` or `--python`: a
//! path, or a name looked up on PATH) is the only candidate when given.
//! Otherwise, in `project` mode: `$VIRTUAL_ENV/bin/python`,
//! `$CONDA_PREFIX/bin/python`, `<cwd>/.venv/bin/python`, then `python3` on
//! PATH; in `strict` mode only `python3` on PATH. The first candidate that
//! exists, is executable and probes as Python 3.8 or newer wins; one that
//! fails is recorded and the next is tried, and if none is usable the
//! [`InterpreterError`] lists every candidate with its reason.
//!
//! A candidate is *probed* by running it once with `-I -S -c …` printing
//! `sys.executable` and the version. (`-I` ignores `PYTHON*` variables and
//! the user site dir, `-S` skips `site`: the probe costs a bare interpreter
//! start, about 7 ms here.) What gets launched afterwards is the probe's
//! `sys.executable`, not the candidate: a version-manager shim such as
//! pyenv's `python3` (a shell script costing 60–90 ms a start) is paid once
//! per host, not once per kernel. `sys.executable` is used as Python reports
//! it, never with symlinks resolved, since a venv's `bin/python` symlink is
//! what makes the venv active.
//!
//! Probes are cached per host in a [`ProbeCache`] keyed by candidate path:
//! thread-safe, concurrent first probes of one path share one run, and an
//! entry is reused while the candidate file is unchanged (same inode, size
//! and mtime) and the executable it named still exists. Successes and "too
//! old" are cached; a probe that crashed or timed out is not, so a transient
//! failure is retried next time. The probe is a blocking call (a few ms, the
//! first time); async callers should run it on a blocking thread.
//!
//! [`ProbeCache::global`] also remembers probes on disk (`interpreters.json`
//! in `$XDG_CACHE_HOME/toolcell`), so that a one-shot `toolcell exec`
//! behind a shim does not pay for it each time; an entry is used only while
//! the candidate, the interpreter it named, and everything a pyenv or asdf
//! shim resolves with (their variables, `PATH`, `.python-version` and
//! `.tool-versions` files up the tree, the global version files) are
//! unchanged. `TOOLCELL_PROBE_CACHE=off` turns it off.
//!
//! A pyenv shim picks its version from `.python-version` files in the
//! directory it runs in; the probe runs in the host's working directory, so
//! that is the one consulted.
//!
//! ```no_run
//! use std::path::Path;
//! use toolcell_kernel::Mode;
//! use toolcell_kernel::interpreter::{resolve, HostEnv, ProbeCache};
//!
//! let cache = ProbeCache::new();
//! let env = HostEnv::current();
//! let python = resolve("", Mode::Project, Path::new("/my/project"), &env, &cache)?;
//! println!("{} ({})", python.executable.display(), python.version);
//! // The same candidate again: answered from the cache, no second probe.
//! resolve("", Mode::Project, Path::new("/my/project"), &env, &cache)?;
//! assert_eq!(cache.probe_count(), 1);
//! # Ok::<(), toolcell_kernel::interpreter::InterpreterError>(())
//! ```

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::io::Read;
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

mod code;
mod disk;

pub(crate) use code::{runner_code, stub_code};

use toolcell_stubs::Mode;

/// Oldest Python a kernel runs on (the runner needs 3.8).
pub const MIN_VERSION: (u32, u32) = (3, 8);

/// How long a probe may take before it is killed (a cold pyenv shim on a
/// busy machine can take a second; a hung one must not hang the host).
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The code the probe runs (Python 2 and 3 compatible, so a too-old
/// interpreter still reports its version when it accepts the flags).
pub const PROBE_CODE: &str =
    "import sys; print(sys.executable); print('.'.join(map(str, sys.version_info[:3])))";

/// Candidate paths remembered at most; past this, idle entries are dropped
/// (they are re-probed if seen again), so memory stays bounded.
const MAX_CACHE_ENTRIES: usize = 4096;

/// Bytes kept of a probe's stdout and of its stderr.
const PROBE_OUTPUT_LIMIT: u64 = 16 * 1024;

/// A resolved interpreter.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Interpreter {
    /// What to launch: the probe's `sys.executable`.
    pub executable: PathBuf,
    /// `major.minor.micro`, e.g. `3.11.7`.
    pub version: String,
    /// The candidate that was probed, as a path (`/proj/.venv/bin/python`,
    /// `/home/me/.pyenv/shims/python3`).
    pub requested: String,
    /// Which resolution rule found it.
    pub rule: Rule,
}

/// The resolution rule a candidate comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Rule {
    /// `[execution] python` or `--python`.
    Explicit,
    /// `$VIRTUAL_ENV/bin/python`.
    VirtualEnv,
    /// `$CONDA_PREFIX/bin/python`.
    CondaPrefix,
    /// `<cwd>/.venv/bin/python`.
    DotVenv,
    /// `python3` on PATH.
    Path,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Explicit => "explicit interpreter",
            Self::VirtualEnv => "$VIRTUAL_ENV/bin/python",
            Self::CondaPrefix => "$CONDA_PREFIX/bin/python",
            Self::DotVenv => "<cwd>/.venv/bin/python",
            Self::Path => "python3 on PATH",
        })
    }
}

/// The host variables resolution reads, taken explicitly so tests (and
/// embedders) can resolve for an environment other than the process's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostEnv {
    /// `$VIRTUAL_ENV`.
    pub virtual_env: Option<OsString>,
    /// `$CONDA_PREFIX`.
    pub conda_prefix: Option<OsString>,
    /// `$PATH`.
    pub path: Option<OsString>,
    /// `$HOME`, for a `~/` in an explicit path.
    pub home: Option<OsString>,
}

impl HostEnv {
    /// The process's own environment.
    pub fn current() -> Self {
        Self::from_lookup(|name| std::env::var_os(name))
    }

    /// Reads the variables through `lookup` (`None` = unset).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<OsString>) -> Self {
        Self {
            virtual_env: lookup("VIRTUAL_ENV"),
            conda_prefix: lookup("CONDA_PREFIX"),
            path: lookup("PATH"),
            home: lookup("HOME"),
        }
    }

    /// An environment with only `PATH` set.
    pub fn with_path(path: impl Into<OsString>) -> Self {
        Self {
            path: Some(path.into()),
            ..Self::default()
        }
    }
}

/// Why one candidate was not used.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reason {
    /// The variable the rule reads is unset or empty.
    NotSet(&'static str),
    /// No such file.
    NotFound,
    /// The name is in no PATH directory (the PATH searched is kept).
    NotOnPath(String),
    /// Exists but cannot be executed (or is a directory).
    NotExecutable,
    /// Probed fine but older than [`MIN_VERSION`].
    TooOld(String),
    /// The probe failed: could not start, non-zero exit, odd output or timeout.
    ProbeFailed(String),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotSet(var) => write!(f, "${var} is not set"),
            Self::NotFound => f.write_str("not found"),
            Self::NotOnPath(path) if path.is_empty() => {
                f.write_str("not found: PATH is empty or unset")
            }
            Self::NotOnPath(path) => write!(f, "not found on PATH ({path})"),
            Self::NotExecutable => f.write_str("not executable"),
            Self::TooOld(version) => write!(
                f,
                "too old: Python {version} (toolcell needs {}.{} or newer)",
                MIN_VERSION.0, MIN_VERSION.1
            ),
            Self::ProbeFailed(why) => write!(f, "probe failed: {why}"),
        }
    }
}

/// One candidate tried and why it was not used.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Attempt {
    /// The rule the candidate comes from.
    pub rule: Rule,
    /// The candidate as a path or name (empty when the rule's variable is unset).
    pub candidate: String,
    /// Why it was passed over.
    pub reason: Reason,
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.rule, self.candidate.is_empty()) {
            (_, true) => write!(f, "{}: {}", self.rule, self.reason),
            (Rule::Explicit, false) => {
                write!(
                    f,
                    "explicit interpreter \"{}\": {}",
                    self.candidate, self.reason
                )
            }
            (Rule::Path, false) => write!(f, "\"{}\" on PATH: {}", self.candidate, self.reason),
            (rule, false) => write!(f, "{rule} ({}): {}", self.candidate, self.reason),
        }
    }
}

/// No usable interpreter.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InterpreterError {
    /// Every candidate failed; each is listed with its reason.
    #[error(
        "no usable Python interpreter (need {}.{} or newer) in {} mode; tried: {}",
        MIN_VERSION.0,
        MIN_VERSION.1,
        .mode_name,
        AttemptList(.attempts)
    )]
    NoneUsable {
        /// `project` or `strict`.
        mode_name: &'static str,
        /// Every candidate, in resolution order.
        attempts: Vec<Attempt>,
    },
}

struct AttemptList<'a>(&'a [Attempt]);

impl fmt::Display for AttemptList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, attempt) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{}) {attempt}", i + 1)?;
        }
        Ok(())
    }
}

/// What a probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Probe {
    /// `sys.executable`.
    pub executable: PathBuf,
    /// `major.minor.micro`.
    pub version: String,
}

/// Identity of a candidate file when it was probed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fingerprint {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
}

impl Fingerprint {
    fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: meta.mtime(),
            mtime_nsec: meta.mtime_nsec(),
        }
    }
}

#[derive(Debug)]
struct Cached {
    fingerprint: Fingerprint,
    outcome: Result<Probe, Reason>,
}

/// toolcell's cache directory of this user (`$XDG_CACHE_HOME/toolcell`,
/// else `~/.cache/toolcell`), where probes and compiled runners are kept;
/// `None` when there is none or `TOOLCELL_PROBE_CACHE=off`.
pub fn user_cache_dir() -> Option<std::path::PathBuf> {
    disk::DiskCache::for_user().map(|c| c.dir().to_path_buf())
}

/// The per-host cache of probes (see the module docs). One process-wide
/// instance is [`ProbeCache::global`]; tests make their own to count probes.
#[derive(Debug)]
pub struct ProbeCache {
    entries: Mutex<HashMap<PathBuf, Arc<Mutex<Option<Cached>>>>>,
    probes: AtomicU64,
    timeout: Duration,
    /// Probes remembered across processes (the global cache only).
    disk: Option<disk::DiskCache>,
}

impl Default for ProbeCache {
    fn default() -> Self {
        Self::new()
    }
}

impl ProbeCache {
    /// An empty cache with [`DEFAULT_PROBE_TIMEOUT`].
    pub fn new() -> Self {
        Self::with_timeout(DEFAULT_PROBE_TIMEOUT)
    }

    /// An empty cache whose probes are killed after `timeout`.
    pub fn with_timeout(timeout: Duration) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            probes: AtomicU64::new(0),
            timeout,
            disk: None,
        }
    }

    /// The process-wide cache [`resolve_for_host`] uses. It also remembers
    /// probes on disk for the next process (`$XDG_CACHE_HOME/toolcell/
    /// interpreters.json`, keyed by everything a version manager's shim
    /// resolves with; `TOOLCELL_PROBE_CACHE=off` turns that off).
    pub fn global() -> &'static Self {
        static GLOBAL: OnceLock<ProbeCache> = OnceLock::new();
        GLOBAL.get_or_init(|| Self {
            disk: disk::DiskCache::for_user(),
            ..Self::new()
        })
    }

    /// How many probe processes this cache has started.
    pub fn probe_count(&self) -> u64 {
        self.probes.load(Ordering::Relaxed)
    }

    /// Probes `candidate` (an existing file), or answers from the cache.
    /// Returns the probe, or why the candidate is unusable.
    pub fn probe(&self, candidate: &Path) -> Result<Probe, Reason> {
        let meta = match std::fs::metadata(candidate) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Reason::NotFound),
            Err(e) => return Err(Reason::ProbeFailed(format!("cannot inspect it: {e}"))),
        };
        if meta.is_dir() || nix::unistd::access(candidate, nix::unistd::AccessFlags::X_OK).is_err()
        {
            return Err(Reason::NotExecutable);
        }
        let fingerprint = Fingerprint::of(&meta);
        let entry = {
            let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            if entries.len() >= MAX_CACHE_ENTRIES && !entries.contains_key(candidate) {
                // A long-lived host that has seen very many project dirs:
                // forget the entries nobody is probing right now.
                entries.retain(|_, entry| Arc::strong_count(entry) > 1);
            }
            Arc::clone(entries.entry(candidate.to_path_buf()).or_default())
        };
        // Held across the probe: a concurrent first probe of the same path
        // waits here and then reads the result.
        let mut slot = entry.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(cached) = slot.as_ref() {
            let still_there = match &cached.outcome {
                Ok(probe) => probe.executable.is_file(),
                Err(_) => true,
            };
            if cached.fingerprint == fingerprint && still_there {
                return cached.outcome.clone();
            }
        }
        // Another process may have probed it in the same context.
        let context = self.disk.as_ref().map(|_| {
            let cwd = std::env::current_dir().unwrap_or_default();
            disk::context(&cwd, &|k| std::env::var_os(k))
        });
        if let (Some(d), Some(ctx)) = (&self.disk, context)
            && let Some(probe) = d.get(candidate, ctx)
        {
            *slot = Some(Cached {
                fingerprint,
                outcome: Ok(probe.clone()),
            });
            return Ok(probe);
        }
        self.probes.fetch_add(1, Ordering::Relaxed);
        let outcome = run_probe(candidate, self.timeout);
        if let (Some(d), Some(ctx), Ok(probe)) = (&self.disk, context, &outcome) {
            d.put(candidate, ctx, probe);
        }
        let cacheable = matches!(outcome, Ok(_) | Err(Reason::TooOld(_)));
        *slot = cacheable.then(|| Cached {
            fingerprint,
            outcome: outcome.clone(),
        });
        outcome
    }
}

/// Resolves the interpreter for the real process environment with the
/// process-wide cache. `explicit` is `[execution] python` / `--python`
/// (empty = none).
pub fn resolve_for_host(
    explicit: &str,
    mode: Mode,
    cwd: &Path,
) -> Result<Interpreter, InterpreterError> {
    resolve(
        explicit,
        mode,
        cwd,
        &HostEnv::current(),
        ProbeCache::global(),
    )
}

/// Resolves the interpreter (order in the module docs) for the environment
/// `env`, probing through `cache`. `explicit` (empty = none) is a path
/// (relative ones against `cwd`; `~/` is `$HOME`) or a bare name looked up on
/// PATH.
pub fn resolve(
    explicit: &str,
    mode: Mode,
    cwd: &Path,
    env: &HostEnv,
    cache: &ProbeCache,
) -> Result<Interpreter, InterpreterError> {
    let mut attempts: Vec<Attempt> = Vec::new();
    let mut try_candidate = |rule: Rule, found: Result<PathBuf, (String, Reason)>| {
        let (candidate, reason) = match found {
            Ok(path) => match cache.probe(&path) {
                Ok(probe) => {
                    return Some(Interpreter {
                        executable: probe.executable,
                        version: probe.version,
                        requested: path.to_string_lossy().into_owned(),
                        rule,
                    });
                }
                Err(reason) => (path.to_string_lossy().into_owned(), reason),
            },
            Err(failure) => failure,
        };
        tracing::debug!(%rule, %candidate, %reason, "interpreter candidate passed over");
        attempts.push(Attempt {
            rule,
            candidate,
            reason,
        });
        None
    };

    let explicit = explicit.trim();
    if !explicit.is_empty() {
        let found = if explicit.contains('/') {
            let expanded = match (explicit.strip_prefix("~/"), &env.home) {
                (Some(rest), Some(home)) if !home.is_empty() => Path::new(home).join(rest),
                _ => PathBuf::from(explicit),
            };
            Ok(cwd.join(expanded))
        } else {
            find_on_path(explicit, env.path.as_deref(), cwd)
        };
        if let Some(found) =
            try_candidate(Rule::Explicit, found.map_err(|r| (explicit.to_string(), r)))
        {
            return Ok(found);
        }
        return Err(none_usable(mode, attempts));
    }

    if mode != Mode::Strict {
        for (rule, var, value) in [
            (Rule::VirtualEnv, "VIRTUAL_ENV", &env.virtual_env),
            (Rule::CondaPrefix, "CONDA_PREFIX", &env.conda_prefix),
        ] {
            let found = match value.as_deref().filter(|v| !v.is_empty()) {
                Some(prefix) => Ok(cwd.join(prefix).join("bin").join("python")),
                None => Err((String::new(), Reason::NotSet(var))),
            };
            if let Some(found) = try_candidate(rule, found) {
                return Ok(found);
            }
        }
        let dot_venv = cwd.join(".venv").join("bin").join("python");
        if let Some(found) = try_candidate(Rule::DotVenv, Ok(dot_venv)) {
            return Ok(found);
        }
    }
    let on_path =
        find_on_path("python3", env.path.as_deref(), cwd).map_err(|r| ("python3".to_string(), r));
    if let Some(found) = try_candidate(Rule::Path, on_path) {
        return Ok(found);
    }
    Err(none_usable(mode, attempts))
}

fn none_usable(mode: Mode, attempts: Vec<Attempt>) -> InterpreterError {
    InterpreterError::NoneUsable {
        mode_name: if mode == Mode::Strict {
            "strict"
        } else {
            "project"
        },
        attempts,
    }
}

/// The first executable `name` in the PATH directories (empty entries are
/// skipped rather than meaning the working directory; relative ones are
/// taken against `cwd`).
fn find_on_path(name: &str, path: Option<&std::ffi::OsStr>, cwd: &Path) -> Result<PathBuf, Reason> {
    let path = path.unwrap_or_default();
    let mut not_executable = false;
    for dir in std::env::split_paths(path) {
        if dir.as_os_str().is_empty() {
            continue;
        }
        let file = cwd.join(dir).join(name);
        match std::fs::metadata(&file) {
            Ok(meta)
                if !meta.is_dir()
                    && nix::unistd::access(&file, nix::unistd::AccessFlags::X_OK).is_ok() =>
            {
                return Ok(file);
            }
            Ok(_) => not_executable = true,
            Err(_) => {}
        }
    }
    if not_executable {
        Err(Reason::NotExecutable)
    } else {
        Err(Reason::NotOnPath(path.to_string_lossy().into_owned()))
    }
}

/// Runs one probe: `candidate -I -S -c PROBE_CODE`, stdin from /dev/null,
/// in its own process group (killed whole on timeout), output bounded.
fn run_probe(candidate: &Path, timeout: Duration) -> Result<Probe, Reason> {
    let mut command = Command::new(candidate);
    command
        .args(["-I", "-S", "-c", PROBE_CODE])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = command
        .spawn()
        .map_err(|e| Reason::ProbeFailed(format!("cannot start it: {e}")))?;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    // `exited` turns true (under the lock) once the child has exited and
    // just before it is reaped: a kill while it is false cannot hit a reused
    // pid.
    let exited = Arc::new(Mutex::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter_exited = Arc::clone(&exited);
    let spawned = std::thread::Builder::new()
        .name("toolcell-probe".into())
        .spawn(move || {
            let err_reader = std::thread::Builder::new()
                .name("toolcell-probe-err".into())
                .spawn(move || read_limited(stderr));
            let out = read_limited(stdout);
            let _ = nix::sys::wait::waitid(
                nix::sys::wait::Id::Pid(pid),
                nix::sys::wait::WaitPidFlag::WEXITED | nix::sys::wait::WaitPidFlag::WNOWAIT,
            );
            let status = {
                let mut flag = waiter_exited.lock().unwrap_or_else(PoisonError::into_inner);
                *flag = true;
                child.wait()
            };
            let err = err_reader
                .ok()
                .and_then(|h| h.join().ok())
                .unwrap_or_default();
            let _ = tx.send((status, out, err));
        });
    if let Err(e) = spawned {
        kill_group_unless_exited(pid, &exited);
        return Err(Reason::ProbeFailed(format!(
            "cannot start a waiter thread: {e}"
        )));
    }
    let (status, out, err) = match rx.recv_timeout(timeout) {
        Ok(done) => done,
        Err(_) => {
            kill_group_unless_exited(pid, &exited);
            return Err(Reason::ProbeFailed(format!(
                "no answer within {:.1} s (killed)",
                timeout.as_secs_f64()
            )));
        }
    };
    let status = status.map_err(|e| Reason::ProbeFailed(format!("waiting for it: {e}")))?;
    if out.len() as u64 >= PROBE_OUTPUT_LIMIT {
        return Err(Reason::ProbeFailed(format!(
            "it printed more than {PROBE_OUTPUT_LIMIT} bytes (not a Python interpreter?)"
        )));
    }
    let stdout = String::from_utf8_lossy(&out);
    let stderr = String::from_utf8_lossy(&err);
    if !status.success() {
        let mut why = format!("{status}");
        let tail = last_lines(&stderr, 3);
        if !tail.is_empty() {
            why.push_str(": ");
            why.push_str(&tail);
        }
        if stderr.contains("Unknown option") && stderr.contains("-I") {
            why.push_str(" (no -I option: Python 2, or Python 3 older than 3.4)");
        }
        return Err(Reason::ProbeFailed(why));
    }
    parse_probe_output(&stdout)
}

fn kill_group_unless_exited(pid: nix::unistd::Pid, exited: &Mutex<bool>) {
    let flag = exited.lock().unwrap_or_else(PoisonError::into_inner);
    if !*flag {
        let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
    }
}

fn read_limited(pipe: Option<impl Read>) -> Vec<u8> {
    let mut buf = Vec::new();
    if let Some(pipe) = pipe {
        let _ = pipe.take(PROBE_OUTPUT_LIMIT).read_to_end(&mut buf);
    }
    buf
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].join(" | ").chars().take(500).collect()
}

/// Parses the probe's two lines (`sys.executable`, version) and checks the
/// version.
fn parse_probe_output(stdout: &str) -> Result<Probe, Reason> {
    let mut lines = stdout.lines();
    let executable = lines.next().unwrap_or("").trim_end_matches('\r');
    let version = lines.next().unwrap_or("").trim();
    let odd = || {
        Reason::ProbeFailed(format!(
            "unexpected output {:?}",
            stdout.chars().take(200).collect::<String>()
        ))
    };
    let mut parts = version.split('.').map(str::parse::<u32>);
    let (Some(Ok(major)), Some(Ok(minor))) = (parts.next(), parts.next()) else {
        return Err(odd());
    };
    if (major, minor) < MIN_VERSION {
        return Err(Reason::TooOld(version.to_string()));
    }
    if executable.is_empty() || !Path::new(executable).is_absolute() {
        return Err(Reason::ProbeFailed(format!(
            "sys.executable is {executable:?}, not an absolute path"
        )));
    }
    Ok(Probe {
        executable: PathBuf::from(executable),
        version: version.to_string(),
    })
}

/// The interpreter of an R or JavaScript kernel (docs/languages.md,
/// "Choosing the language"): `explicit` (`[execution] r` / `node`) when set — a
/// path, or a program name looked up on `PATH` — else the language's program
/// (`Rscript`, `node`) on `PATH`. The version is empty here: the runner's
/// `ready` says it.
///
/// # Errors
/// A sentence naming what was looked for and how to install it.
pub fn resolve_program(
    language: crate::language::Language,
    explicit: &str,
) -> Result<(PathBuf, String), String> {
    let wanted = if explicit.trim().is_empty() {
        language.default_program()
    } else {
        explicit.trim()
    };
    let key = language.config_key();
    let found = if wanted.contains('/') {
        let p = PathBuf::from(wanted);
        is_executable(&p).then_some(p)
    } else {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(wanted))
                .find(|p| is_executable(p))
        })
    };
    match found {
        Some(p) => Ok((std::fs::canonicalize(&p).unwrap_or(p), String::new())),
        None => Err(format!(
            "no {} interpreter: `{wanted}` {} (install it: {}; or set [execution] {key} to its path)",
            language.label(),
            if wanted.contains('/') {
                "is not an executable file"
            } else {
                "is not on PATH"
            },
            language.install_hint(),
        )),
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_output_is_checked() {
        let p = parse_probe_output("/usr/bin/python3.11\n3.11.7\n").unwrap();
        assert_eq!(p.executable, Path::new("/usr/bin/python3.11"));
        assert_eq!(p.version, "3.11.7");
        assert_eq!(
            parse_probe_output("/x/python3.6\n3.6.15\n"),
            Err(Reason::TooOld("3.6.15".into()))
        );
        assert_eq!(
            parse_probe_output("/x/python2\n2.7.18\n"),
            Err(Reason::TooOld("2.7.18".into()))
        );
        assert!(matches!(
            parse_probe_output("\n3.12.1\n"),
            Err(Reason::ProbeFailed(_))
        ));
        assert!(matches!(
            parse_probe_output("/x\nbanana\n"),
            Err(Reason::ProbeFailed(_))
        ));
        assert!(matches!(
            parse_probe_output(""),
            Err(Reason::ProbeFailed(_))
        ));
    }

    #[test]
    fn attempts_read_as_one_sentence() {
        let err = none_usable(
            Mode::Project,
            vec![
                Attempt {
                    rule: Rule::VirtualEnv,
                    candidate: String::new(),
                    reason: Reason::NotSet("VIRTUAL_ENV"),
                },
                Attempt {
                    rule: Rule::DotVenv,
                    candidate: "/p/.venv/bin/python".into(),
                    reason: Reason::NotFound,
                },
                Attempt {
                    rule: Rule::Path,
                    candidate: "python3".into(),
                    reason: Reason::NotOnPath("/nowhere".into()),
                },
            ],
        );
        assert_eq!(
            err.to_string(),
            "no usable Python interpreter (need 3.8 or newer) in project mode; tried: \
             1) $VIRTUAL_ENV/bin/python: $VIRTUAL_ENV is not set; \
             2) <cwd>/.venv/bin/python (/p/.venv/bin/python): not found; \
             3) \"python3\" on PATH: not found on PATH (/nowhere)"
        );
    }
}
