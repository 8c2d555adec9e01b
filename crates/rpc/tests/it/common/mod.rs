//! Shared helpers for the integration tests: a background runtime, a
//! blocking raw-socket client, and a steerable Python reference client.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// A multi-threaded runtime the servers run on while the test thread
/// blocks on plain sockets and processes.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

pub(crate) fn deadline(secs: u64) -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(secs)
}

/// How long [`wait_until`] waits for a condition a test synchronises on:
/// generous, since only a broken condition takes anywhere near it.
pub(crate) const SYNC_LIMIT: Duration = Duration::from_secs(60);

/// Polls `cond` every 10 ms until it holds (how a test waits for a state
/// instead of sleeping for a guessed time); panics naming `what` if it does
/// not within [`SYNC_LIMIT`].
#[track_caller]
pub(crate) fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let limit = std::time::Instant::now() + SYNC_LIMIT;
    while !cond() {
        assert!(
            std::time::Instant::now() < limit,
            "gave up after {SYNC_LIMIT:?} waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A blocking client on a real Unix socket.
pub(crate) struct RawClient {
    pub stream: UnixStream,
    reader: BufReader<UnixStream>,
    pub token: String,
}

impl RawClient {
    pub(crate) fn connect(endpoint: &str, token: &str) -> Self {
        let path = endpoint.strip_prefix("unix:").expect("unix endpoint");
        let stream = UnixStream::connect(path).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let reader = BufReader::new(stream.try_clone().unwrap());
        Self {
            stream,
            reader,
            token: token.to_owned(),
        }
    }

    pub(crate) fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// Reads one reply line; `None` at EOF.
    pub(crate) fn reply(&mut self) -> Option<Value> {
        let mut line = Vec::new();
        let n = self.reader.read_until(b'\n', &mut line).unwrap();
        if n == 0 {
            return None;
        }
        assert_eq!(line.last(), Some(&b'\n'), "reply must end with a newline");
        Some(serde_json::from_slice(&line).unwrap())
    }

    pub(crate) fn line(&mut self, bytes: &[u8]) -> Value {
        self.send(bytes);
        self.reply().expect("server closed the connection")
    }

    pub(crate) fn call(&mut self, tool: &str, args: Value) -> Value {
        let mut req =
            serde_json::to_vec(&json!({"tool": tool, "args": args, "token": self.token})).unwrap();
        req.push(b'\n');
        self.line(&req)
    }
}

pub(crate) fn python_dir() -> PathBuf {
    Path::new(
        &std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("tests/python")
}

/// The Python reference client, driven one JSON command at a time.
pub(crate) struct PyDriver {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl PyDriver {
    pub(crate) fn spawn(endpoint: &str, token: &str) -> Self {
        Self::spawn_with(
            Command::new("python3"),
            &python_dir().join("driver.py"),
            endpoint,
            token,
        )
    }

    pub(crate) fn spawn_with(mut cmd: Command, script: &Path, endpoint: &str, token: &str) -> Self {
        let mut child = cmd
            .arg(script)
            .env("TOOLCELL_RPC", endpoint)
            .env("TOOLCELL_RPC_TOKEN", token)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 must be installed for these tests");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Self {
            child,
            stdin,
            stdout,
        }
    }

    pub(crate) fn send(&mut self, cmd: &Value) {
        let mut line = serde_json::to_vec(cmd).unwrap();
        line.push(b'\n');
        self.stdin.write_all(&line).unwrap();
        self.stdin.flush().unwrap();
    }

    pub(crate) fn answer(&mut self) -> Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert!(!line.is_empty(), "python driver died");
        serde_json::from_str(&line).unwrap()
    }

    pub(crate) fn cmd(&mut self, cmd: Value) -> Value {
        self.send(&cmd);
        self.answer()
    }

    pub(crate) fn call(&mut self, tool: &str, args: Value) -> Value {
        self.cmd(json!({"op": "call", "tool": tool, "args": args}))
    }
}

impl Drop for PyDriver {
    fn drop(&mut self) {
        let _ = self.stdin.write_all(b"{\"op\":\"exit\"}\n");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
