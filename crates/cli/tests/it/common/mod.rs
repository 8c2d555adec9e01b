//! Shared helpers for the tests that spawn the real `toolcell` binary.
//!
//! Every [`Env`] is a private temp dir that is the binary's current
//! directory and holds its `XDG_*`, `HOME` and `TMPDIR`, so config
//! discovery, the daemon socket, kernel directories and spill files never
//! touch the real user's directories, and tests never see each other's
//! daemons. Dropping an `Env` stops any daemon it started.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Path of the binary under test.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_toolcell");

/// How long any one command may take before the test gives up on it.
pub(crate) const COMMAND_LIMIT: Duration = Duration::from_secs(60);

/// A config that keeps tests fast: short graces, short idle exit, and a
/// timeout long enough for a loaded 2-core machine.
pub(crate) const FAST_CONFIG: &str = "\
[execution]
timeout = 30
interrupt_grace = 1
kill_grace = 0.5

[kernels]
max_kernels = 8

[daemon]
idle_exit = 60
";

/// One isolated place to run the binary.
pub(crate) struct Env {
    dir: tempfile::TempDir,
}

/// What a finished command left.
#[derive(Debug)]
pub(crate) struct Out {
    /// Exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Everything on stdout.
    pub stdout: String,
    /// Everything on stderr.
    pub stderr: String,
}

impl Out {
    /// Asserts the exit code and returns self for chaining.
    #[track_caller]
    pub(crate) fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code,
            Some(code),
            "exit code; stdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    /// stdout parsed as one JSON value.
    #[track_caller]
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not one JSON value ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

impl Env {
    /// An empty environment (no config file: defaults apply).
    pub(crate) fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("tc-")
            .tempdir()
            .expect("temp dir");
        for d in ["run", "cache", "config", "data", "tmp"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.path().join("run"),
            std::fs::Permissions::from_mode(0o700),
        )
        .unwrap();
        Self { dir }
    }

    /// An environment with `./toolcell.toml` holding `toml`.
    pub(crate) fn with_config(toml: &str) -> Self {
        let env = Self::new();
        env.write("toolcell.toml", toml);
        env
    }

    /// [`FAST_CONFIG`] with `[sandbox] mode = "off"`: for tests of the
    /// layers under the sandbox (tokens, cgroups, Landlock, redaction),
    /// which the sandbox would stop before they are reached.
    pub(crate) fn fast_unsandboxed() -> Self {
        Self::with_config(&format!("{FAST_CONFIG}\n[sandbox]\nmode = \"off\"\n"))
    }

    /// An environment with [`FAST_CONFIG`].
    pub(crate) fn fast() -> Self {
        Self::with_config(FAST_CONFIG)
    }

    /// The directory (the binary's current directory).
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The directory, canonical (what `os.getcwd()` reports).
    pub(crate) fn canonical(&self) -> PathBuf {
        std::fs::canonicalize(self.path()).unwrap()
    }

    /// `$XDG_RUNTIME_DIR` of this environment.
    pub(crate) fn runtime_dir(&self) -> PathBuf {
        self.path().join("run")
    }

    /// Writes a file relative to the directory.
    pub(crate) fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.path().join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&p, text).unwrap();
        p
    }

    /// A command for the binary, isolated in this environment.
    pub(crate) fn cmd(&self) -> Command {
        self.cmd_of(Path::new(BIN))
    }

    /// A command for `program` (another copy of the binary, or `sh`) with
    /// this environment's directory, `HOME`, `TMPDIR` and `XDG_*`.
    pub(crate) fn cmd_of(&self, program: &Path) -> Command {
        let mut c = Command::new(program);
        let d = self.path();
        c.current_dir(d)
            .env("XDG_RUNTIME_DIR", d.join("run"))
            .env("XDG_CACHE_HOME", d.join("cache"))
            .env("XDG_CONFIG_HOME", d.join("config"))
            .env("XDG_DATA_HOME", d.join("data"))
            .env("HOME", d)
            .env("TMPDIR", d.join("tmp"))
            .env_remove("TOOLCELL_LOG")
            .env_remove("VIRTUAL_ENV")
            .env_remove("CONDA_PREFIX");
        c
    }

    /// Runs the binary with `args` (stdin empty) to completion.
    pub(crate) fn run(&self, args: &[&str]) -> Out {
        self.run_input(args, None)
    }

    /// Runs the binary with `args` and `input` on stdin to completion.
    pub(crate) fn run_input(&self, args: &[&str], input: Option<&str>) -> Out {
        let mut c = self.cmd();
        c.args(args)
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().expect("spawn toolcell");
        if let Some(text) = input {
            let mut stdin = child.stdin.take().unwrap();
            let text = text.to_string();
            std::thread::spawn(move || {
                let _ = stdin.write_all(text.as_bytes());
            });
        }
        finish(child, COMMAND_LIMIT)
    }

    /// Pids of `toolcell daemon run` processes of this environment. A
    /// daemon's own forks (a kernel's sandbox before it renames itself, a
    /// child before its `exec`) carry the same argv: a process whose
    /// parent is a daemon is not one.
    pub(crate) fn daemon_pids(&self) -> Vec<i32> {
        let all = self.processes(|argv| {
            argv.len() >= 3
                && argv[0].ends_with("toolcell")
                && argv.windows(2).any(|w| w[0] == "daemon" && w[1] == "run")
        });
        let parent = |pid: i32| -> Option<i32> {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            stat[stat.rfind(')')? + 1..]
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        };
        all.iter()
            .copied()
            .filter(|&p| parent(p).is_none_or(|pp| !all.contains(&pp)))
            .collect()
    }

    /// Pids of Python processes started under this environment (kernels and
    /// whatever their cells spawned: they inherit `XDG_RUNTIME_DIR`).
    pub(crate) fn python_pids(&self) -> Vec<i32> {
        self.processes(|argv| {
            argv.first().is_some_and(|a| {
                Path::new(a)
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("python"))
            })
        })
    }

    /// The host pid of this environment's process that a cell sees as
    /// `pid`: inside a sandbox, `os.getpid()` is its PID namespace's number
    /// (the runner is 2). Unsandboxed, `pid` itself; sandboxed and no live
    /// process here is `pid` inside its namespace, 0 (no process is 0, so
    /// [`alive`] says no).
    pub(crate) fn host_pid(&self, pid: i32) -> i32 {
        let found: Vec<i32> = self
            .processes(|_| true)
            .into_iter()
            .filter(|p| ns_pid(*p) == Some(pid))
            .collect();
        let unsandboxed = std::fs::read_to_string(self.path().join("toolcell.toml"))
            .is_ok_and(|t| t.contains("[sandbox]\nmode = \"off\""));
        match found.as_slice() {
            [one] => *one,
            [] if unsandboxed => pid,
            [] => 0,
            many => panic!("several sandboxed processes are {pid} inside: {many:?}"),
        }
    }

    /// Live (non-zombie) processes whose environment carries this
    /// environment's `XDG_RUNTIME_DIR` and whose argv matches `pred`.
    fn processes(&self, pred: impl Fn(&[String]) -> bool) -> Vec<i32> {
        let marker = format!("XDG_RUNTIME_DIR={}", self.runtime_dir().display());
        let mut pids = Vec::new();
        let Ok(rd) = std::fs::read_dir("/proc") else {
            return pids;
        };
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            if !alive(pid) {
                continue;
            }
            let Ok(environ) = std::fs::read(e.path().join("environ")) else {
                continue;
            };
            if !environ.split(|&b| b == 0).any(|v| v == marker.as_bytes()) {
                continue;
            }
            let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
                continue;
            };
            let argv: Vec<String> = cmdline
                .split(|&b| b == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect();
            if pred(&argv) {
                pids.push(pid);
            }
        }
        pids
    }

    /// `daemon status --json`.
    pub(crate) fn daemon_status(&self) -> Value {
        self.run(&["daemon", "status", "--json"]).json()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        // Nothing here may panic: this also runs while a failed test unwinds.
        if self.runtime_dir().join("toolcell").exists()
            && let Ok(mut child) = self
                .cmd()
                .args(["daemon", "stop"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
            && wait_limit(&mut child, Duration::from_secs(20)).is_none()
        {
            let _ = child.kill();
        }
        // Backstop: nothing of this test may outlive it.
        for pid in self.daemon_pids().into_iter().chain(self.python_pids()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Waits for `child` (stdout/stderr piped) at most `limit`, killing it and
/// failing the test if it runs longer.
#[track_caller]
pub(crate) fn finish(mut child: Child, limit: Duration) -> Out {
    let mut so = child.stdout.take();
    let mut se = child.stderr.take();
    let t_out = std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(o) = so.as_mut() {
            let _ = o.read_to_end(&mut s);
        }
        String::from_utf8_lossy(&s).into_owned()
    });
    let t_err = std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(o) = se.as_mut() {
            let _ = o.read_to_end(&mut s);
        }
        String::from_utf8_lossy(&s).into_owned()
    });
    let status = wait_limit(&mut child, limit);
    let stdout = t_out.join().unwrap();
    let stderr = t_err.join().unwrap();
    let Some(status) = status else {
        panic!("toolcell ran longer than {limit:?}; stdout:\n{stdout}\nstderr:\n{stderr}");
    };
    // Whatever a test feeds it, toolcell answers; it never panics (a
    // panicking task can still end in a plausible result, so every run
    // checks).
    assert!(
        !(stderr.contains("thread '") && stderr.contains("' panicked at ")),
        "toolcell panicked; stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    Out {
        code: status.code(),
        stdout,
        stderr,
    }
}

/// Waits at most `limit` for `child`; kills it and returns `None` on overrun.
pub(crate) fn wait_limit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) => {}
            Err(_) => return None,
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `pid` is a live process (a zombie counts as dead: it has
/// exited, only its parent has not reaped it yet).
pub(crate) fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // "pid (comm) S ...": the state follows the last ')'.
            let state = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].trim_start().chars().next());
            !matches!(state, Some('Z' | 'X') | None)
        }
        Err(_) => false,
    }
}

/// Polls `cond` every 20 ms for at most `limit`; whether it became true.
pub(crate) fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How long [`wait_until`] waits for a condition a test synchronises on:
/// generous, since only a broken condition takes anywhere near it.
pub(crate) const SYNC_LIMIT: Duration = Duration::from_secs(60);

/// Polls `cond` every 20 ms until it holds (how a test waits for a state
/// instead of sleeping for a guessed time); panics naming `what` if it does
/// not within [`SYNC_LIMIT`].
#[track_caller]
pub(crate) fn wait_until(what: &str, cond: impl FnMut() -> bool) {
    assert!(
        eventually(SYNC_LIMIT, cond),
        "gave up after {SYNC_LIMIT:?} waiting until {what}"
    );
}

/// Sends `sig` to `pid`.
pub(crate) fn signal(pid: i32, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).unwrap();
}

/// A running `toolcell serve` with a line reader on its stdout.
pub(crate) struct Serve {
    /// The process.
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// Every stdout line that was not a JSON-RPC 2.0 message.
    pub not_jsonrpc: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
}

fn is_jsonrpc(v: &Value) -> bool {
    match v {
        Value::Array(items) => !items.is_empty() && items.iter().all(is_jsonrpc),
        Value::Object(o) => {
            o.get("jsonrpc") == Some(&json!("2.0"))
                && (o.contains_key("method")
                    || (o.contains_key("id")
                        && (o.contains_key("result") ^ o.contains_key("error"))))
        }
        _ => false,
    }
}

impl Serve {
    /// Starts `toolcell serve ARGS` in `env`.
    pub(crate) fn start(env: &Env, args: &[&str]) -> Self {
        Self::start_command(env, "serve", args)
    }

    /// Starts `toolcell COMMAND ARGS` (a line-oriented JSON-RPC server:
    /// `serve` or `mcp`) in `env`.
    pub(crate) fn start_command(env: &Env, command: &str, args: &[&str]) -> Self {
        let mut cmd = env.cmd();
        cmd.arg(command).args(args);
        Self::spawn(cmd)
    }

    /// Starts `cmd` (from [`Env::cmd`], its arguments and environment
    /// set) as a line-oriented JSON-RPC server.
    pub(crate) fn spawn(mut cmd: Command) -> Self {
        let command = format!("{:?}", cmd.get_args().next().unwrap_or_default());
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn toolcell {command}: {e}"));
        let stdout = child.stdout.take().unwrap();
        let stderr_pipe = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let not_jsonrpc = Arc::new(Mutex::new(Vec::new()));
        let bad = Arc::clone(&not_jsonrpc);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) if is_jsonrpc(&v) => {}
                    _ => bad.lock().unwrap().push(line.clone()),
                }
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let se = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut r = BufReader::new(stderr_pipe);
            let mut buf = String::new();
            while r.read_line(&mut buf).unwrap_or(0) > 0 {
                se.lock().unwrap().push_str(&buf);
                buf.clear();
            }
        });
        Self {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            not_jsonrpc,
            stderr,
        }
    }

    /// The server's pid.
    pub(crate) fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap()
    }

    /// Writes one raw line.
    pub(crate) fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Writes raw bytes (no newline added).
    pub(crate) fn send_bytes(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request.
    pub(crate) fn request(&mut self, id: impl Into<Value>, method: &str, params: Value) {
        let msg = json!({"jsonrpc": "2.0", "id": id.into(), "method": method, "params": params});
        self.send_raw(&msg.to_string());
    }

    /// The next stdout message (waits at most `limit`).
    #[track_caller]
    pub(crate) fn next(&self, limit: Duration) -> Value {
        match self.lines.recv_timeout(limit) {
            Ok(line) => serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not JSON on stdout ({e}): {line}")),
            Err(e) => panic!(
                "no message from serve within {limit:?} ({e}); stderr:\n{}",
                self.stderr()
            ),
        }
    }

    /// Whether a message arrives within `limit` (it is consumed).
    pub(crate) fn try_next(&self, limit: Duration) -> Option<Value> {
        self.lines
            .recv_timeout(limit)
            .ok()
            .map(|l| serde_json::from_str(&l).unwrap())
    }

    /// Reads messages until the response with `id`; returns it and the
    /// messages (notifications, other responses) seen before it.
    #[track_caller]
    pub(crate) fn until_id(&self, id: &Value, limit: Duration) -> (Value, Vec<Value>) {
        let deadline = Instant::now() + limit;
        let mut before = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let msg = self.next(left.max(Duration::from_millis(1)));
            if msg.get("id") == Some(id) && msg.get("method").is_none() {
                return (msg, before);
            }
            before.push(msg);
        }
    }

    /// Sends a request and waits for its response (notifications dropped).
    #[track_caller]
    pub(crate) fn call(&mut self, id: impl Into<Value>, method: &str, params: Value) -> Value {
        let id = id.into();
        self.request(id.clone(), method, params);
        self.until_id(&id, COMMAND_LIMIT).0
    }

    /// Closes stdin (EOF for the server).
    pub(crate) fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Everything the server wrote on stderr so far.
    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits for exit (at most `limit`).
    #[track_caller]
    pub(crate) fn wait(&mut self, limit: Duration) -> ExitStatus {
        wait_limit(&mut self.child, limit)
            .unwrap_or_else(|| panic!("serve did not exit within {limit:?}"))
    }

    /// Asserts stdout carried nothing but JSON-RPC 2.0 messages so far.
    #[track_caller]
    pub(crate) fn assert_only_jsonrpc(&self) {
        let bad = self.not_jsonrpc.lock().unwrap();
        assert!(bad.is_empty(), "non-JSON-RPC lines on stdout: {bad:?}");
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.stdin = None;
        if wait_limit(&mut self.child, Duration::from_secs(10)).is_none() {
            let _ = self.child.kill();
        }
        // As `finish`: the server never panics, whatever it was sent.
        let stderr = self.stderr();
        if !std::thread::panicking()
            && stderr.contains("thread '")
            && stderr.contains("' panicked at ")
        {
            panic!("the server panicked; stderr:\n{stderr}");
        }
    }
}

/// The pid of the kernel of `session` from a `sessions` result.
/// The allocation id `sessions` lists for `session` (a remote with a
/// lifecycle), if any.
pub(crate) fn allocation_of(s: &mut Serve, id: i64, session: &str) -> Option<String> {
    let msg = s.call(id, "sessions", json!({}));
    msg["result"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["session"] == session)
        .and_then(|k| k["allocation"].as_str().map(str::to_string))
}

pub(crate) fn session_pid(sessions: &Value, session: &str) -> Option<i32> {
    sessions["sessions"]
        .as_array()?
        .iter()
        .find(|s| s["session"] == session)
        .and_then(|s| s["pid"].as_i64())
        .and_then(|p| i32::try_from(p).ok())
}

// ---- Helpers for the soak test (crates/cli/tests/it/soak.rs) ----

impl Serve {
    /// Takes the server's stdin and its stdout line channel, so a test can
    /// write from several threads and read on one of its own. Afterwards
    /// `send_*`/`next`/`request` must not be used; dropping the returned
    /// stdin is the EOF. The `not_jsonrpc` check keeps working.
    pub(crate) fn take_io(&mut self) -> (ChildStdin, mpsc::Receiver<String>) {
        let stdin = self.stdin.take().expect("stdin open");
        let lines = std::mem::replace(&mut self.lines, mpsc::channel().1);
        (stdin, lines)
    }
}

/// Pids of the live direct children of `parent` whose command name starts
/// with `python` (a host's kernels), read from `/proc/<pid>/stat`.
pub(crate) fn python_children(parent: i32) -> Vec<i32> {
    let mut pids = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // "pid (comm) S ppid ...": comm may hold spaces and parens.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        let mut rest = stat[close + 1..].split_whitespace();
        let state = rest.next();
        let ppid = rest.next().and_then(|p| p.parse::<i32>().ok());
        if ppid == Some(parent) && comm.starts_with("python") && !matches!(state, Some("Z" | "X")) {
            pids.push(pid);
        }
    }
    pids
}

/// Number of open file descriptors of `pid` (`/proc/<pid>/fd`).
pub(crate) fn fd_count(pid: i32) -> Option<usize> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()
        .map(|rd| rd.count())
}

/// Resident set size of `pid` in KiB (`VmRSS` of `/proc/<pid>/status`).
pub(crate) fn rss_kb(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
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

/// The pid `pid` has inside its own PID namespace, when that is not the
/// host's (the last `NSpid` of `/proc/<pid>/status`).
pub(crate) fn ns_pid(pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    let ids: Vec<i32> = line[6..]
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect();
    (ids.len() > 1).then(|| ids[ids.len() - 1])
}

/// Live processes whose environment holds `needle` (a `NAME=value` or a
/// part of one).
pub(crate) fn with_environ(needle: &str) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(environ) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if alive(pid) && String::from_utf8_lossy(&environ).contains(needle) {
            out.push(pid);
        }
    }
    out
}

/// The host pid of the process that a cell of a sandboxed kernel sees as
/// `pid`, among the processes whose environment holds `needle`; `pid` when
/// none is in a namespace of its own.
pub(crate) fn host_pid_with(needle: &str, pid: i32) -> i32 {
    let found: Vec<i32> = with_environ(needle)
        .into_iter()
        .filter(|p| ns_pid(*p) == Some(pid))
        .collect();
    match found.as_slice() {
        [one] => *one,
        [] => pid,
        many => panic!("several sandboxed processes are {pid} inside: {many:?}"),
    }
}
