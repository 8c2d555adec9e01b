//! `terminal(command, timeout=60, workdir=None)`: run a shell command in the
//! foreground.

use std::num::NonZeroU64;
use std::os::fd::OwnedFd;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;

use toolcell_redact::{HeadTail, Utf8Stream};

use crate::{Tool, ToolContext, ToolError};
use toolcell_sys::process;

/// Arguments of `terminal`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct Args {
    /// Shell command, run with `sh -c` (pipes, redirections and `&&` work).
    pub command: String,
    /// Seconds before the command and everything it started are killed
    /// (never later than the cell's own deadline).
    #[serde(default = "default_timeout")]
    pub timeout: NonZeroU64,
    /// Directory to run in; relative to the session's working directory. Default: that directory.
    #[serde(default)]
    pub workdir: Option<String>,
}

fn default_timeout() -> NonZeroU64 {
    NonZeroU64::new(60).unwrap_or(NonZeroU64::MIN)
}

/// Result of `terminal`.
#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct Output {
    /// Standard output and standard error, interleaved as written; long
    /// output keeps its head and tail with a note of what was cut.
    pub output: String,
    /// The exit status; -N when killed by signal N, -1 after a timeout.
    pub exit_code: i32,
    /// True when the command ran out of time and was killed.
    pub timed_out: bool,
}

/// Runs a shell command in the foreground.
#[derive(Debug, Default)]
pub(super) struct Terminal;

/// Environment variable marking every process a `terminal` call started.
const MARKER_VAR: &str = "TOOLCELL_TERMINAL_JOB";
static NEXT_JOB: AtomicU64 = AtomicU64::new(1);

/// How long output may keep arriving after the shell exits (from processes
/// it left in the background, which are then killed).
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(200);
/// Between SIGTERM and SIGKILL on timeout.
const KILL_GRACE: Duration = Duration::from_millis(500);

impl Tool for Terminal {
    const NAME: &'static str = "terminal";
    const DOC: &'static str = "Run a shell command in the foreground and return its output.\n\n\
        The command runs with `sh -c` in its own process group, stdin empty, stdout and stderr \
        merged. When it exits, anything it left running is killed; on timeout the whole process \
        tree is killed and the output so far is returned. Background jobs and pseudo-terminals \
        are not offered: use Python's subprocess for long-lived processes.";
    const BLOCKED_PARAMS: &'static [&'static str] = &["background", "pty", "notify"];
    type Args = Args;
    type Output = Output;

    async fn call(&self, args: Args, cx: &ToolContext) -> Result<Output, ToolError> {
        let dir = match &args.workdir {
            Some(w) => cx.resolve(w),
            None => cx.cwd().to_path_buf(),
        };
        if !dir.is_dir() {
            return Err(ToolError::failed(format!(
                "workdir {} is not a directory",
                dir.display()
            )));
        }
        let cap = Arc::new(Mutex::new(Capture::new(cx.settings().max_output_bytes)));

        let (reader, writer) = std::io::pipe()
            .map_err(|e| ToolError::failed(format!("terminal: cannot create a pipe: {e}")))?;
        let writer2 = writer
            .try_clone()
            .map_err(|e| ToolError::failed(format!("terminal: cannot create a pipe: {e}")))?;
        let mut cmd = tokio::process::Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(&args.command)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(writer)
            .stderr(writer2)
            .process_group(0)
            .kill_on_drop(true);
        if let Some(env) = &cx.settings().env {
            cmd.env_clear();
            cmd.envs(env.iter().map(|(k, v)| (k, v)));
        }
        // Everything the command starts inherits this marker, so processes
        // that setsid() and outlive their parent are still found.
        let marker = format!(
            "{}-{}",
            std::process::id(),
            NEXT_JOB.fetch_add(1, Ordering::Relaxed)
        );
        cmd.env(MARKER_VAR, &marker);
        // A sandboxed kernel's command runs inside its sandbox: the same
        // namespaces, view and network rule (docs/sandbox.md).
        let join = match cx.settings().sandbox.get() {
            Some(sandbox) => {
                cmd.envs(sandbox.env.iter().map(|(k, v)| (k, v)));
                let join = toolcell_sys::sandbox::Join::open(sandbox.pid, sandbox.started, &dir)
                    .map_err(|e| {
                        ToolError::failed(format!(
                            "terminal: cannot enter the kernel's sandbox: {e}"
                        ))
                    })?;
                let inside = join.child();
                // SAFETY: `enter` makes only raw system calls (setns, chdir,
                // fork, prctl, seccomp) between fork and exec.
                unsafe {
                    cmd.pre_exec(move || inside.enter());
                }
                Some(join)
            }
            None => None,
        };
        let mut child = cmd
            .spawn()
            .map_err(|e| ToolError::failed(format!("terminal: cannot start sh: {e}")))?;
        // Close our copies of the write end, or EOF never comes.
        drop(cmd);
        drop(join);
        let pid = child.id().unwrap_or(0);
        let tree = process::Tree {
            root: pid,
            pgid: Some(pid),
            marker: Some((MARKER_VAR.to_string(), marker)),
            cgroup: None,
            started: process::start_time(pid),
            lineage: toolcell_sys::lineage::Lineage::adopt(pid).map(Arc::new),
            namespace: None,
        };

        let rx = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(reader))
            .map_err(|e| ToolError::failed(format!("terminal: cannot read the pipe: {e}")))?;
        let reader_cap = Arc::clone(&cap);
        let mut reader_task = tokio::spawn(async move {
            let mut rx = rx;
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match rx.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if let Ok(mut c) = reader_cap.lock() {
                            c.push(&buf[..n]);
                        }
                    }
                }
            }
        });

        let started = tokio::time::Instant::now();
        let limit = started + Duration::from_secs(args.timeout.get());
        let deadline = limit.min(cx.deadline());
        let outcome = tokio::select! {
            status = child.wait() => Ok(status),
            () = tokio::time::sleep_until(deadline) => Err(false),
            () = cx.cancelled().cancelled() => Err(true),
        };
        let (exit_code, timed_out) = match outcome {
            Ok(status) => {
                let code = match status {
                    Ok(s) => exit_code(s),
                    Err(_) => -1,
                };
                (code, false)
            }
            Err(cancelled) => {
                tree.kill(KILL_GRACE).await;
                let _ = child.wait().await;
                if cancelled {
                    reader_task.abort();
                    return Err(ToolError::Cancelled("terminal"));
                }
                (-1, true)
            }
        };
        // Output may still be in flight, or a background process may hold
        // the pipe open: drain briefly, then end the group.
        if tokio::time::timeout(DRAIN_AFTER_EXIT, &mut reader_task)
            .await
            .is_err()
        {
            tree.signal(nix::sys::signal::Signal::SIGKILL);
            if tokio::time::timeout(DRAIN_AFTER_EXIT, &mut reader_task)
                .await
                .is_err()
            {
                reader_task.abort();
            }
        }
        // Foreground only: nothing the command started outlives the call.
        tree.signal(nix::sys::signal::Signal::SIGKILL);
        let mut output = cap.lock().map(|c| c.render()).unwrap_or_default();
        if timed_out {
            let secs = deadline
                .saturating_duration_since(started)
                .as_secs_f64()
                .round();
            output.push_str(&format!(
                "\n[terminal: timed out after {secs}s; the command and everything it started were killed]\n"
            ));
        }
        Ok(Output {
            output,
            exit_code,
            timed_out,
        })
    }
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => -sig,
        (None, None) => -1,
    }
}

/// Output as it is read: raw bytes decoded to text (a character split
/// between two reads is decoded whole, invalid UTF-8 becomes U+FFFD), then
/// the shared head/tail cut (40% / 60% of `cap` bytes, never inside a
/// character).
#[derive(Debug)]
struct Capture {
    decode: Utf8Stream,
    kept: HeadTail,
    buf: String,
}

impl Capture {
    fn new(cap: usize) -> Self {
        Self {
            decode: Utf8Stream::new(),
            kept: HeadTail::new(cap),
            buf: String::new(),
        }
    }

    fn push(&mut self, data: &[u8]) {
        self.buf.clear();
        self.decode.push(data, &mut self.buf);
        self.kept.push(&self.buf);
    }

    fn render(&self) -> String {
        let mut rest = String::new();
        self.decode.clone().finish(&mut rest);
        let mut kept = self.kept.clone();
        kept.push(&rest);
        kept.finish("OUTPUT").text
    }
}

crate::register_tool!(Terminal);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_keeps_head_and_tail() {
        let mut c = Capture::new(10);
        c.push(b"0123456789abcdefghij");
        let r = c.render();
        assert!(r.starts_with("0123"), "{r}");
        assert!(r.ends_with("efghij"), "{r}");
        assert!(r.contains("10 bytes omitted out of 20 total"), "{r}");
        let mut c = Capture::new(10);
        c.push(b"short");
        assert_eq!(c.render(), "short");
    }

    /// The head's end (4 of 10 bytes) falls inside a `€` (bytes 3..6), and
    /// reads split characters: whole characters come back, no U+FFFD.
    #[test]
    fn capture_never_splits_a_multibyte_character() {
        let text = "aaa€bbbbbbbbbbbb€€😀";
        for split in 0..=text.len() {
            let mut c = Capture::new(10);
            c.push(&text.as_bytes()[..split]);
            c.push(&text.as_bytes()[split..]);
            let r = c.render();
            assert!(!r.contains('\u{FFFD}'), "split {split}: {r:?}");
            let (head, tail) = r.split_once("\n\n... [OUTPUT TRUNCATED").unwrap();
            assert_eq!(head, "aaa");
            assert!(tail.ends_with("] ...\n\n€😀"), "split {split}: {r:?}");
        }
        // Bytes that are not UTF-8 still become U+FFFD, once each.
        let mut c = Capture::new(100);
        c.push(b"ok \xff\xe2\x82");
        assert_eq!(c.render(), "ok \u{FFFD}\u{FFFD}");
    }
}
