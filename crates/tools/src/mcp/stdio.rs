//! A stdio MCP server as a child process: its own process group (so ending
//! it ends everything it started, `npx` and the `node` under it alike), the
//! last lines of its stderr kept for error messages, and its stdout checked
//! to carry nothing but JSON-RPC lines of bounded size.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};
use tokio::process::{ChildStdin, ChildStdout, Command};
use tokio::sync::watch;
use toolcell_redact::{Cleaner, Redactor};

use super::McpServerSpec;

/// Lines of stderr kept per server process.
const STDERR_LINES: usize = 20;
/// The longest stderr line kept, in bytes (longer ones are cut).
const STDERR_LINE_BYTES: usize = 400;
/// How much of an offending stdout line an error message quotes, in bytes.
const STDOUT_SAMPLE_BYTES: usize = 200;
/// How much of an offending stdout line is redacted before the sample is
/// cut from it (so that no secret is half shown).
const STDOUT_REDACT_BYTES: usize = 16 << 10;

/// The last lines a server wrote to stderr (bounded: [`STDERR_LINES`]
/// lines of at most [`STDERR_LINE_BYTES`] bytes), cleaned and redacted
/// before they were cut.
#[derive(Debug, Default)]
pub(crate) struct StderrTail {
    lines: Mutex<VecDeque<String>>,
}

impl StderrTail {
    fn push(&self, line: &[u8]) {
        let text = cut_line(line, STDERR_LINE_BYTES);
        if text.trim().is_empty() {
            return;
        }
        let mut lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        if lines.len() == STDERR_LINES {
            lines.pop_front();
        }
        lines.push_back(text);
    }

    /// The kept lines, oldest first, one per line, indented; empty if none.
    pub(crate) fn render(&self) -> String {
        let lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        lines
            .iter()
            .map(|l| format!("  {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// `line` without its line ending, lossily decoded, cut to `max` bytes.
fn cut_line(line: &[u8], max: usize) -> String {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut text = String::from_utf8_lossy(line).into_owned();
    if text.len() > max {
        let mut cut = max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// The process group of a started server. Dropping it kills the group.
#[derive(Debug)]
pub(crate) struct ProcessGroup {
    pgid: Pid,
    /// `Some(description)` once the leader has exited and been reaped.
    exited: watch::Receiver<Option<String>>,
}

impl ProcessGroup {
    /// Whether the leader is gone.
    pub(crate) fn has_exited(&self) -> bool {
        self.exited.borrow().is_some()
    }

    /// How the leader ended (`exit status 1`, `killed by signal 9`), waiting
    /// up to `wait` for it; `None` if it is still running.
    pub(crate) async fn exit_description(&self, wait: Duration) -> Option<String> {
        let mut rx = self.exited.clone();
        let _ = tokio::time::timeout(wait, rx.wait_for(Option::is_some)).await;
        rx.borrow().clone()
    }

    /// Sends `signal` to every process of the group.
    pub(crate) fn signal(&self, signal: Signal) {
        // ESRCH (the group is gone) is the normal case after an exit.
        let _ = killpg(self.pgid, signal);
    }

    /// Ends the group: SIGTERM, up to `grace` for the leader to exit, then
    /// SIGKILL for whatever is left of the group.
    pub(crate) async fn terminate(&self, grace: Duration) {
        if !self.has_exited() {
            self.signal(Signal::SIGTERM);
            let _ = self.exit_description(grace).await;
        }
        self.signal(Signal::SIGKILL);
    }

    /// The process group id (the leader's pid).
    pub(crate) fn pgid(&self) -> i32 {
        self.pgid.as_raw()
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.signal(Signal::SIGKILL);
    }
}

/// What went wrong on a server's stdout, shared with the error messages.
#[derive(Debug, Default)]
pub(crate) struct StdoutProblem(Mutex<Option<String>>);

impl StdoutProblem {
    fn set(&self, problem: String) {
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(problem);
        }
    }

    /// The problem, if there was one.
    pub(crate) fn get(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A started stdio server: its pipes for the MCP transport and the handles
/// that outlive the transport.
pub(crate) struct Spawned {
    pub(crate) stdout: StdoutGuard<ChildStdout>,
    pub(crate) stdin: ChildStdin,
    pub(crate) group: ProcessGroup,
    pub(crate) stderr: Arc<StderrTail>,
    pub(crate) stdout_problem: Arc<StdoutProblem>,
}

/// Starts `spec.command` in its own process group, with `spec.env` on top
/// of the host's environment and `spec.cwd`, its stderr drained through
/// `redactor` into a [`StderrTail`] (and the debug log).
///
/// # Errors
/// A message naming the server and the command when it cannot be started.
pub(crate) fn spawn(
    spec: &McpServerSpec,
    max_line: usize,
    redactor: &Redactor,
) -> Result<Spawned, String> {
    let Some((program, args)) = spec.command.split_first() else {
        return Err(format!("MCP server `{}` has an empty command", spec.name));
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .envs(&spec.env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(cwd) = &spec.cwd {
        cmd.current_dir(cwd);
    }
    let mut child = cmd.spawn().map_err(|e| spawn_error(spec, program, &e))?;
    let (Some(pid), Some(stdin), Some(stdout), Some(stderr)) = (
        child.id(),
        child.stdin.take(),
        child.stdout.take(),
        child.stderr.take(),
    ) else {
        return Err(format!(
            "MCP server `{}`: the process started without its pipes",
            spec.name
        ));
    };
    let pgid = Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX));
    let (exit_tx, exit_rx) = watch::channel(None);
    let group = ProcessGroup {
        pgid,
        exited: exit_rx,
    };
    let name = spec.name.clone();
    tokio::spawn(async move {
        let description = match child.wait().await {
            Ok(status) => describe(status),
            Err(e) => format!("cannot wait for it: {e}"),
        };
        tracing::debug!(server = %name, %description, "MCP server process ended");
        // Whatever the leader left running in its group goes with it.
        let _ = killpg(pgid, Signal::SIGKILL);
        let _ = exit_tx.send(Some(description));
    });
    let tail = Arc::new(StderrTail::default());
    tokio::spawn(drain_stderr(
        spec.name.clone(),
        stderr,
        Arc::clone(&tail),
        redactor.clone(),
    ));
    let stdout_problem = Arc::new(StdoutProblem::default());
    Ok(Spawned {
        stdout: StdoutGuard::new(
            stdout,
            max_line,
            Arc::clone(&stdout_problem),
            redactor.clone(),
        ),
        stdin,
        group,
        stderr: tail,
        stdout_problem,
    })
}

fn spawn_error(spec: &McpServerSpec, program: &str, e: &io::Error) -> String {
    let name = &spec.name;
    match e.kind() {
        io::ErrorKind::NotFound => match &spec.cwd {
            Some(cwd) if !cwd.is_dir() => format!(
                "cannot start MCP server `{name}`: its working directory {} does not exist",
                cwd.display()
            ),
            _ => format!(
                "cannot start MCP server `{name}`: command `{program}` not found \
                 (give a path or a program on PATH)"
            ),
        },
        io::ErrorKind::PermissionDenied => {
            format!("cannot start MCP server `{name}`: command `{program}` is not executable ({e})")
        }
        _ => format!("cannot start MCP server `{name}` (command `{program}`): {e}"),
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        format!("exit status {code}")
    } else if let Some(sig) = status.signal() {
        let name = Signal::try_from(sig).map_or_else(|_| sig.to_string(), |s| s.to_string());
        format!("killed by {name}")
    } else {
        status.to_string()
    }
}

/// Reads stderr to its end through a [`Cleaner`] (ANSI stripped, secrets
/// redacted: the host's secret values and token shapes never reach a log
/// or a message), keeping the last lines, each cut to
/// [`STDERR_LINE_BYTES`] only after it was redacted and without buffering
/// more than that of a long line.
async fn drain_stderr(
    name: String,
    mut stderr: tokio::process::ChildStderr,
    tail: Arc<StderrTail>,
    redactor: Redactor,
) {
    let mut cleaner = Cleaner::new(&redactor);
    let mut buf = vec![0u8; 8192];
    let mut clean = String::new();
    let mut line = String::new();
    loop {
        let n = match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        clean.clear();
        cleaner.push(&buf[..n], &mut clean);
        take_lines(&name, &clean, &mut line, &tail);
    }
    clean.clear();
    cleaner.finish(&mut clean);
    take_lines(&name, &clean, &mut line, &tail);
    if !line.is_empty() {
        tail.push(line.as_bytes());
    }
}

/// Splits cleaned stderr text into lines for the tail: `line` holds the
/// start of the current one (at most [`STDERR_LINE_BYTES`] + 4 bytes).
fn take_lines(name: &str, text: &str, line: &mut String, tail: &StderrTail) {
    for piece in text.split_inclusive('\n') {
        let (body, done) = match piece.strip_suffix('\n') {
            Some(body) => (body, true),
            None => (piece, false),
        };
        let room = (STDERR_LINE_BYTES + 4).saturating_sub(line.len());
        if room > 0 {
            let mut cut = room.min(body.len());
            while !body.is_char_boundary(cut) {
                cut -= 1;
            }
            line.push_str(&body[..cut]);
        }
        if done {
            tracing::debug!(server = %name, line = %line.trim_end(), "MCP server stderr");
            tail.push(line.as_bytes());
            line.clear();
        }
    }
}

/// Where a [`StdoutGuard`] is in the current line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineState {
    /// Before the first non-blank byte of a line.
    Start,
    /// Inside a line that began like JSON.
    Json,
}

/// Passes a server's stdout through to the MCP transport while checking
/// that every line is a JSON message (starts with `{` or `[`) of at most
/// `max_line` bytes. The first line that is not ends the stream with an
/// error (the lines before it still go through), and the problem is kept
/// for the error messages of the calls that fail.
pub(crate) struct StdoutGuard<R> {
    inner: R,
    state: LineState,
    line_len: usize,
    max_line: usize,
    problem: Arc<StdoutProblem>,
    failed: Option<String>,
    /// The quoted sample of an offending line goes through it first.
    redactor: Redactor,
}

impl<R> StdoutGuard<R> {
    fn new(inner: R, max_line: usize, problem: Arc<StdoutProblem>, redactor: Redactor) -> Self {
        Self {
            inner,
            state: LineState::Start,
            line_len: 0,
            max_line,
            problem,
            failed: None,
            redactor,
        }
    }

    /// Scans newly read bytes. `Err((keep, problem))`: only the first
    /// `keep` bytes are good.
    fn scan(&mut self, bytes: &[u8]) -> Result<(), (usize, String)> {
        let mut i = 0;
        while i < bytes.len() {
            match self.state {
                LineState::Start => match bytes[i] {
                    b' ' | b'\t' | b'\r' | b'\n' => i += 1,
                    b'{' | b'[' => {
                        self.state = LineState::Json;
                        self.line_len = 0;
                    }
                    _ => {
                        let rest = &bytes[i..];
                        let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
                        // Redacted before it is cut: no secret is half shown.
                        let cleaned = self.redactor.clean(&rest[..end.min(STDOUT_REDACT_BYTES)]);
                        let sample = cut_line(cleaned.as_bytes(), STDOUT_SAMPLE_BYTES);
                        return Err((
                            i,
                            format!(
                                "it printed a line that is not JSON-RPC on stdout: {sample:?} \
                                     (stdout must carry only MCP messages; a server logs to stderr)"
                            ),
                        ));
                    }
                },
                LineState::Json => {
                    let rest = &bytes[i..];
                    let (len, next) = match memchr::memchr(b'\n', rest) {
                        Some(p) => (p, Some(p + 1)),
                        None => (rest.len(), None),
                    };
                    self.line_len = self.line_len.saturating_add(len);
                    if self.line_len > self.max_line {
                        return Err((
                            i,
                            format!(
                                "it sent a message over {} MiB on stdout (a tool result is \
                                 capped at {} MiB)",
                                self.max_line >> 20,
                                super::MAX_RESULT_BYTES >> 20
                            ),
                        ));
                    }
                    match next {
                        Some(n) => {
                            i += n;
                            self.state = LineState::Start;
                        }
                        None => i = bytes.len(),
                    }
                }
            }
        }
        Ok(())
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for StdoutGuard<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(problem) = &this.failed {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                problem.clone(),
            )));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let Err((keep, problem)) = this.scan(&buf.filled()[before..]) else {
            return Poll::Ready(Ok(()));
        };
        tracing::warn!(%problem, "MCP server stdout");
        this.problem.set(problem.clone());
        this.failed = Some(problem.clone());
        if keep == 0 {
            buf.set_filled(before);
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, problem)));
        }
        // Hand over the good lines first; the next read reports the problem.
        buf.set_filled(before + keep);
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(max: usize) -> StdoutGuard<&'static [u8]> {
        StdoutGuard::new(&b""[..], max, Arc::default(), Redactor::builtin())
    }

    #[test]
    fn json_lines_pass_and_others_stop_at_their_start() {
        let mut g = guard(100);
        assert_eq!(g.scan(b"{\"a\":1}\n  \r\n[1,2]\n{\"b\""), Ok(()));
        assert_eq!(g.scan(b":2}\n"), Ok(()));
        let err = g.scan(b"{}\nhello world\n{}").unwrap_err();
        assert_eq!(err.0, 3);
        assert!(err.1.contains("\"hello world\""), "{}", err.1);
    }

    #[test]
    fn long_lines_are_refused_across_reads() {
        let mut g = guard(10);
        assert_eq!(g.scan(b"{\"aaaa"), Ok(()));
        assert!(g.scan(b"aaaaaaaa").is_err());
        let mut g = guard(10);
        assert_eq!(g.scan(b"{\"aaaa\":1}\n{}"), Ok(()));
    }

    #[test]
    fn stderr_tail_is_bounded() {
        let tail = StderrTail::default();
        for i in 0..100 {
            tail.push(format!("line {i}\n").as_bytes());
        }
        tail.push("x".repeat(10_000).as_bytes());
        let text = tail.render();
        assert_eq!(text.lines().count(), STDERR_LINES);
        assert!(!text.contains("line 80\n"));
        assert!(text.contains("line 99"));
        assert!(text.len() < STDERR_LINES * (STDERR_LINE_BYTES + 10));
    }
}
