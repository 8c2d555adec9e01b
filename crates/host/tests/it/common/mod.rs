//! Shared helpers of the kernel crate's integration tests: registries rooted
//! in a temporary directory, polling (never fixed sleeps where a condition
//! can be watched), process checks through `/proc`, live-output channels,
//! and re-running this test binary as a separate host process.
//!
//! Every test uses real Python (the interpreter the registry resolves), real
//! pipes and real sockets.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tempfile::TempDir;
use tokio::sync::mpsc;
use toolcell_host::{ExecuteRequest, Registry, RegistryOptions};
use toolcell_kernel::{ExecuteResult, LiveSink, Status, StreamKind};

/// Options whose every directory is under `tmp`, so a test never touches the
/// user's runtime, cache or working directories.
pub(crate) fn opts(tmp: &Path) -> RegistryOptions {
    let mut sandbox = toolcell_kernel::sandbox::Policy::auto();
    // The test's scratch root stays writable for the marker files tests
    // poll (its kernels root and spill dir are still hidden).
    sandbox.writable.push(tmp.to_path_buf());
    RegistryOptions {
        kernels_root: Some(tmp.join("kernels")),
        spill_dir: tmp.join("spill"),
        default_cwd: tmp.join("work"),
        sandbox,
        ..RegistryOptions::default()
    }
}

/// A registry and the temporary directory it lives in (dropped after the
/// registry, so kernels die before their directories go).
pub(crate) struct Fixture {
    pub reg: Registry,
    pub tmp: TempDir,
    pub sandboxed: bool,
}

impl Fixture {
    /// Default options under a fresh temporary directory.
    pub(crate) fn new() -> Self {
        Self::with(|_| {})
    }

    /// Default options without a sandbox: for tests of the layers inside
    /// it (tokens, peer checks, cgroups, Landlock), which a sandbox would
    /// stop before they are reached.
    pub(crate) fn unsandboxed() -> Self {
        Self::with(|o| o.sandbox = toolcell_kernel::sandbox::Policy::off())
    }

    /// Default options, adjusted by `f`.
    pub(crate) fn with(f: impl FnOnce(&mut RegistryOptions)) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("work")).unwrap();
        let mut o = opts(tmp.path());
        f(&mut o);
        let sandboxed = o.sandbox.mode != toolcell_kernel::sandbox::Mode::Off;
        let reg = Registry::new(o).unwrap();
        Self {
            reg,
            tmp,
            sandboxed,
        }
    }

    /// The host pid of this fixture's kernel process that a cell sees as
    /// `pid`: inside a sandbox, `os.getpid()` is its PID namespace's number
    /// (the runner is 2). Unsandboxed, `pid` itself. Sandboxed and no live
    /// process here is `pid` inside its namespace: [`GONE`].
    pub(crate) fn host_pid(&self, pid: u32) -> u32 {
        match host_pid_in(&self.kernels_root().display().to_string(), pid) {
            Some(p) => p,
            None if self.sandboxed => GONE,
            None => pid,
        }
    }

    /// The working directory of project-mode cells.
    pub(crate) fn work(&self) -> PathBuf {
        self.tmp.path().join("work")
    }

    /// The kernels root.
    pub(crate) fn kernels_root(&self) -> PathBuf {
        self.tmp.path().join("kernels")
    }

    /// The spill directory.
    pub(crate) fn spill_dir(&self) -> PathBuf {
        self.tmp.path().join("spill")
    }

    /// Runs `code` in the default session.
    pub(crate) async fn run(&self, code: &str) -> ExecuteResult {
        self.reg.execute(ExecuteRequest::new(code)).await
    }

    /// Runs `code` for `owner`.
    pub(crate) async fn run_as(&self, owner: &str, code: &str) -> ExecuteResult {
        self.reg
            .execute(ExecuteRequest::new(code).owner(owner))
            .await
    }

    /// Runs `code` in the default session, asserts success, returns the output.
    pub(crate) async fn ok(&self, code: &str) -> String {
        let r = self.run(code).await;
        assert_success(&r);
        r.output
    }
}

/// Asserts that `r` succeeded, showing the whole result otherwise.
#[track_caller]
pub(crate) fn assert_success(r: &ExecuteResult) {
    assert_eq!(r.status, Status::Success, "{}", show(r));
    assert_eq!(r.exit_code, 0, "{}", show(r));
}

/// The result as pretty JSON, for assertion messages.
pub(crate) fn show(r: &ExecuteResult) -> String {
    serde_json::to_string_pretty(r).unwrap()
}

/// Whether `pid` exists and is not a zombie (read from `/proc` directly).
pub(crate) fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
        .unwrap_or("X");
    state != "Z" && state != "X"
}

/// Polls `cond` every 10 ms until it holds or `within` passes.
pub(crate) async fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Blocking variant of [`eventually`] for non-async code.
pub(crate) fn eventually_blocking(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How long [`wait_until`] waits for a condition a test synchronises on:
/// generous, since only a broken condition takes anywhere near it.
pub(crate) const SYNC_LIMIT: Duration = Duration::from_secs(60);

/// Polls `cond` every 10 ms until it holds (how a test waits for a state
/// instead of sleeping for a guessed time); panics naming `what` if it does
/// not within [`SYNC_LIMIT`].
pub(crate) async fn wait_until(what: &str, cond: impl FnMut() -> bool) {
    assert!(
        eventually(SYNC_LIMIT, cond).await,
        "gave up after {SYNC_LIMIT:?} waiting until {what}"
    );
}

/// Every pid printed in `text` on a line `<tag>=<pid>`.
pub(crate) fn tagged_pids(text: &str, tag: &str) -> Vec<u32> {
    let prefix = format!("{tag}=");
    text.lines()
        .filter_map(|l| l.trim().strip_prefix(&prefix))
        .filter_map(|v| v.trim().parse().ok())
        .collect()
}

/// The one pid printed as `<tag>=<pid>`.
#[track_caller]
pub(crate) fn tagged_pid(text: &str, tag: &str) -> u32 {
    let pids = tagged_pids(text, tag);
    assert_eq!(pids.len(), 1, "expected one {tag}=<pid> line in {text:?}");
    pids[0]
}

/// A live sink and the channel its chunks arrive on.
pub(crate) fn live_channel() -> (LiveSink, mpsc::UnboundedReceiver<(StreamKind, String)>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let sink: LiveSink = Arc::new(move |kind, chunk: &str| {
        let _ = tx.send((kind, chunk.to_string()));
    });
    (sink, rx)
}

/// Reads live chunks until their concatenated stdout contains `needle`;
/// panics after `within`.
pub(crate) async fn wait_live(
    rx: &mut mpsc::UnboundedReceiver<(StreamKind, String)>,
    needle: &str,
    within: Duration,
) -> String {
    let mut seen = String::new();
    let found = tokio::time::timeout(within, async {
        while let Some((kind, chunk)) = rx.recv().await {
            if kind == StreamKind::Stdout {
                seen.push_str(&chunk);
                if seen.contains(needle) {
                    return true;
                }
            }
        }
        false
    })
    .await;
    assert!(
        matches!(found, Ok(true)),
        "no live {needle:?} within {within:?}; saw {seen:?}"
    );
    seen
}

/// The environment variable that makes a re-run test binary act as a
/// separate host process for one test.
pub(crate) const ROLE_VAR: &str = "TOOLCELL_KERNEL_TEST_ROLE";

/// True in the re-run host process for `test`.
pub(crate) fn is_child(test: &str) -> bool {
    std::env::var(ROLE_VAR).is_ok_and(|v| v == test)
}

/// Starts this test binary again, running only `test` with [`ROLE_VAR`] set
/// to `test` and `envs` added, its output captured.
pub(crate) fn spawn_child(test: &str, envs: &[(&str, &str)]) -> std::process::Child {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = std::process::Command::new(exe);
    cmd.args([test, "--exact", "--test-threads=1", "--nocapture"])
        .env(ROLE_VAR, test)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// Runs `test` in a separate host process (see [`spawn_child`]) and asserts
/// that it ran and passed.
#[track_caller]
pub(crate) fn run_child(test: &str, envs: &[(&str, &str)]) {
    let out = spawn_child(test, envs).wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Figures the child printed (visible with --nocapture).
    for line in stdout.lines().filter(|l| l.starts_with("measured:")) {
        println!("{line}");
    }
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the child host process for {test} failed ({}):\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        out.status
    );
}

/// `VmRSS` and `VmHWM` of this process, in KiB.
pub(crate) fn memory_kb() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/self/status"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Entries of `dir` (empty when it does not exist).
pub(crate) fn entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// Python that atomically writes `text` (a Python expression) to `path`, for
/// a cell to announce that it is running.
pub(crate) fn py_mark(path: &Path, text: &str) -> String {
    let p = path.display().to_string();
    format!(
        "open({tmp:?}, 'w').write(str({text}))\n__import__('os').rename({tmp:?}, {p:?})\n",
        tmp = format!("{p}.tmp")
    )
}

/// Waits until `path` exists and returns its contents; panics after `within`.
pub(crate) async fn wait_file(path: &Path, within: Duration) -> String {
    let found = eventually(within, || path.exists()).await;
    assert!(found, "{} did not appear within {within:?}", path.display());
    std::fs::read_to_string(path).unwrap()
}

/// Called where a test cannot run its subject on this machine; `what` says
/// what is missing and how to get it. Under `TOOLCELL_REQUIRE=1` (which
/// `scripts/test-all.sh`, and so CI, sets) that is a failure: no test passes
/// there without running what it tests. Elsewhere the test says so on
/// stderr and the caller returns.
#[track_caller]
pub(crate) fn missing(what: &str) {
    assert!(
        std::env::var_os("TOOLCELL_REQUIRE").is_none_or(|v| v != "1"),
        "TOOLCELL_REQUIRE=1, and this test cannot run its subject here: {what}"
    );
    eprintln!("SKIPPED: {what}");
}

/// Live processes in a PID namespace of their own (sandboxed) whose
/// environment mentions `marker`: each one's host pid and its pid in its
/// innermost namespace.
fn sandboxed_with(marker: &str) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(environ) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if !String::from_utf8_lossy(&environ).contains(marker) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(e.path().join("status")) else {
            continue;
        };
        let ns: Vec<u32> = status
            .lines()
            .find(|l| l.starts_with("NSpid:"))
            .map(|l| {
                l[6..]
                    .split_whitespace()
                    .filter_map(|s| s.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        if let [_, .., inner] = ns.as_slice()
            && alive(p)
        {
            out.push((p, *inner));
        }
    }
    out
}

/// Live processes inside a PID namespace of their own (sandboxed) whose
/// environment mentions `marker`, as the host numbers them.
pub(crate) fn sandboxed_processes(marker: &str) -> Vec<u32> {
    sandboxed_with(marker).into_iter().map(|(p, _)| p).collect()
}

/// What [`Fixture::host_pid`] answers for a sandboxed process that is no
/// longer there: no process has pid 0, so [`alive`] says no.
pub(crate) const GONE: u32 = 0;

/// The host pid of the live kernel process whose environment mentions
/// `marker` and which its sandbox knows as `pid`; `None` when there is none.
pub(crate) fn host_pid_in(marker: &str, pid: u32) -> Option<u32> {
    let found: Vec<u32> = sandboxed_with(marker)
        .into_iter()
        .filter(|&(_, inner)| inner == pid)
        .map(|(p, _)| p)
        .collect();
    match found.as_slice() {
        [one] => Some(*one),
        [] => None,
        many => panic!("several sandboxed processes are {pid} inside: {many:?}"),
    }
}
