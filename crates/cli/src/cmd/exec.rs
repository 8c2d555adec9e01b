//! `toolcell exec`: run one cell (docs/tour.md).

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolcell_host::{ExecuteRequest, RegistryOptions};
use toolcell_kernel::{ExecuteResult, Status, StreamKind};
use toolcell_stubs::Mode;

use crate::cmd::daemon;
use crate::host::{self, Overrides};

/// Arguments of `toolcell exec`.
#[derive(Debug, clap::Args)]
#[command(
    long_about = "Run one cell of Python. Without --session it runs in a fresh kernel that ends \
                  with the command. With --session NAME it runs in that session's persistent \
                  kernel, kept by a background daemon (started on demand), so state survives \
                  across separate exec commands:\n\n  toolcell exec --session a 'x = 41'\n  \
                  toolcell exec --session a 'x + 1'      # prints 42\n\nOutput: the cell's output \
                  on stdout as it streams, then one status line on stderr; --json prints the \
                  result object instead.\n\nExit codes: 0 success, 1 cell error, 2 usage or \
                  configuration error, 124 timeout, 130 interrupted."
)]
pub(crate) struct Args {
    /// The code to run; `-` (or nothing, with stdin not a terminal) reads it from stdin.
    #[arg(value_name = "CODE", conflicts_with = "file")]
    pub code: Option<String>,
    /// Read the code from FILE.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Run in this persistent session (kept by the daemon).
    #[arg(long, value_name = "S")]
    pub session: Option<String>,
    /// Start the session over in a fresh kernel first.
    #[arg(long)]
    pub reset: bool,
    /// Working directory of the kernel (project mode).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Run on the remote NAME (a `[remotes.NAME]` table of toolcell.toml:
    /// ssh, `docker exec -i`, `kubectl exec -i POD --`); `""`: here.
    #[arg(long, value_name = "NAME")]
    pub remote: Option<String>,
    /// Print the full result object (status, output, error, hint, …) as JSON, not the output.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub overrides: Overrides,
}

impl Args {
    /// The code, from the argument, the file or stdin.
    pub(crate) fn read_code(&self) -> anyhow::Result<String> {
        if let Some(f) = &self.file {
            return std::fs::read_to_string(f)
                .map_err(|e| host::usage(format!("-f {}: {e}", f.display())));
        }
        match self.code.as_deref() {
            Some("-") | None => {
                let stdin = std::io::stdin();
                if self.code.is_none() && stdin.is_terminal() {
                    return Err(host::usage(
                        "no code given: pass it as an argument, with -f FILE, or on stdin",
                    ));
                }
                let mut s = String::new();
                stdin
                    .lock()
                    .read_to_string(&mut s)
                    .map_err(|e| host::usage(format!("reading code from stdin: {e}")))?;
                Ok(s)
            }
            Some(code) => Ok(code.to_string()),
        }
    }

    /// The working directory, absolute.
    pub(crate) fn abs_cwd(&self) -> anyhow::Result<Option<PathBuf>> {
        match &self.cwd {
            None => Ok(None),
            Some(d) => {
                let d = std::path::absolute(d).context("resolving --cwd")?;
                if !d.is_dir() {
                    return Err(host::usage(format!(
                        "--cwd {}: not a directory",
                        d.display()
                    )));
                }
                Ok(Some(d))
            }
        }
    }
}

/// Runs the command.
pub(crate) fn run(config: Option<&Path>, args: Args) -> anyhow::Result<ExitCode> {
    let code = args.read_code()?;
    if code.trim().is_empty() {
        return Err(host::usage("the code is empty: give some Python to run"));
    }
    // `--tools` narrows the configured set for this cell (a request's tools
    // never widen `[tools] enabled`); it does not override the file.
    let overrides = host::Overrides {
        tools: None,
        ..args.overrides.clone()
    };
    let cfg = host::load_config(config, &overrides)?;
    let tools = host::tool_list(args.overrides.tools.as_deref());
    if let Some(t) = &tools {
        let enabled = &cfg.tools.enabled;
        if let Some(bad) = t.iter().find(|n| !enabled.contains(n)) {
            // The user's to fix (exit 2), not a cell that failed.
            return Err(host::usage(format!(
                "--tools: `{bad}` is not an enabled tool; --tools may only narrow [tools] \
                 enabled ({})",
                enabled.join(", ")
            )));
        }
    }
    let cwd = args.abs_cwd()?;
    if let Some(session) = &args.session {
        return in_session(config, &args, session, code);
    }
    let rt = host::runtime()?;
    rt.block_on(async move {
        let registry = Arc::new(host::registry(&cfg, |o| {
            if let Some(d) = &cwd {
                o.default_cwd.clone_from(d);
            }
            // One cell: a small tree is rescanned rather than watched.
            o.watch_inotify_min_entries = toolcell_host::ONE_CELL_INOTIFY_MIN_ENTRIES;
        })?);
        // A bad interpreter is the configuration's fault (exit 2), found
        // before any kernel is started: the registry's own resolution then
        // answers from the same per-host probe cache.
        let remote = args
            .remote
            .clone()
            .unwrap_or_else(|| registry.options().remote.clone());
        if !remote.is_empty() {
            if registry.options().remote_named_public(&remote).is_err() {
                let known: Vec<&String> = registry.options().remotes.keys().collect();
                return Err(host::usage(format!(
                    "--remote {remote}: no [remotes.{remote}] table in the configuration (configured: {})",
                    if known.is_empty() { "none".to_string() } else { known.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ") }
                )));
            }
        } else {
            check_interpreter(registry.options(), args.overrides.python.is_some())?;
        }
        // Ctrl-C interrupts the cell, which is reported as usual (exit 130);
        // a second Ctrl-C, or SIGTERM, stops at once.
        let ctrl_c = CancellationToken::new();
        host::exit_on_signals_after(Arc::clone(&registry), Some(ctrl_c.clone()));
        let mut req = ExecuteRequest::new(code).cancel(ctrl_c).remote(remote);
        if let Some(t) = tools {
            req = req.tools(t);
        }
        if !args.json {
            req = req.live(Arc::new(|stream: StreamKind, chunk: &str| match stream {
                StreamKind::Stdout => {
                    let mut o = std::io::stdout().lock();
                    let _ = o.write_all(chunk.as_bytes());
                    let _ = o.flush();
                }
                StreamKind::Stderr => {
                    let _ = std::io::stderr().lock().write_all(chunk.as_bytes());
                }
            }));
        }
        let mut result = registry.execute(req).await;
        if result.status == Status::Interrupted && result.not_started() {
            result.error =
                Some("interrupted (Ctrl-C) before the cell started; none of its code ran".into());
        }
        registry.shutdown_all().await;
        let code = report(&result, args.json, true)?;
        Ok(host::signal_exit_code().map_or(code, ExitCode::from))
    })
}

/// Resolves the interpreter `opts` asks for; a failure is a usage error
/// naming every candidate tried (`flag`: it came from `--python`).
fn check_interpreter(opts: &RegistryOptions, flag: bool) -> anyhow::Result<()> {
    let cwd = match opts.mode {
        Mode::Strict => PathBuf::new(),
        _ => opts.default_cwd.clone(),
    };
    let resolve = || toolcell_kernel::interpreter::resolve_for_host(&opts.python, opts.mode, &cwd);
    match tokio::task::block_in_place(resolve) {
        Ok(_) => Ok(()),
        Err(e) if flag => Err(host::usage(format!("--python: {e}"))),
        Err(e) => Err(host::usage(e.to_string())),
    }
}

/// Prints a result: the JSON object, or (human mode) what was not streamed plus
/// one status line on stderr. Returns the exit code of docs/result.md
/// ("The `exec` status line and exit code").
pub(crate) fn report(
    result: &ExecuteResult,
    json: bool,
    streamed: bool,
) -> anyhow::Result<ExitCode> {
    if json {
        let mut out = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, result)?;
        writeln!(out)?;
        return Ok(ExitCode::from(result.cli_exit_code()));
    }
    // Buffered: the status line is many small writes (stderr is
    // unbuffered); it goes out in one when `err` is dropped.
    let mut err = std::io::BufWriter::new(std::io::stderr().lock());
    if !streamed {
        std::io::stdout()
            .lock()
            .write_all(result.output.as_bytes())?;
    }
    // When output was streamed, stderr was too, but not the traceback.
    if streamed && let Some(tb) = traceback_of(result) {
        err.write_all(tb.as_bytes())?;
    }
    if let Some(e) = &result.error {
        writeln!(err, "error: {e}")?;
    }
    if let Some(h) = &result.hint {
        writeln!(err, "hint: {h}")?;
    }
    match &result.warning {
        // Streamed, everything was printed: the cut is only in the result
        // an agent gets. Stdout's is on the status line; stderr's here.
        Some(w) if streamed => {
            // Notices before the truncation ones (a kernel that ended
            // between cells, a session name with another kernel) are news
            // to a terminal; from the first truncation sentence on, the
            // warning speaks of the result an agent gets (the terminal got
            // the streams whole): all of it is shown, as that.
            let cut_at = ["stdout was truncated", "stderr was truncated"]
                .iter()
                .filter_map(|m| w.find(m))
                .min()
                .unwrap_or(w.len());
            let before = w[..cut_at].trim();
            if !before.is_empty() {
                writeln!(err, "warning: {before}")?;
            }
            let rest = w[cut_at..].trim();
            if !rest.is_empty() {
                writeln!(
                    err,
                    "note: the output was printed in full above; the result an agent receives \
                     (--json, serve, mcp) says: {rest}"
                )?;
            }
        }
        Some(w) => writeln!(err, "warning: {w}")?,
        None => {}
    }
    if result.not_started() {
        writeln!(
            err,
            "[toolcell] {} · none of the code ran",
            result.status.as_str()
        )?;
        return Ok(ExitCode::from(result.cli_exit_code()));
    }
    let k = &result.kernel;
    let kernel = if k.state_reset {
        "fresh kernel (earlier state was reset)"
    } else if k.reused {
        "reused kernel"
    } else {
        "new kernel"
    };
    let cut = if streamed && result.stdout_truncated {
        format!(" · {}", streamed_truncation_note(result))
    } else {
        String::new()
    };
    let mut files = match &result.files {
        Some(f) if f.scan_stopped => format!(" · {} (scan stopped early)", f.summary()),
        Some(f) if f.changed() => format!(" · {}", f.summary()),
        _ => String::new(),
    };
    if let Some(read) = result.files.as_ref().and_then(|f| f.read_brief()) {
        files.push_str(&format!(" · {read}"));
    }
    writeln!(
        err,
        "[toolcell] {} in {:.2}s · {} tool call{} · {} {} · cell {}{files}{cut}",
        result.status.as_str(),
        result.duration_seconds,
        result.tool_calls_made,
        if result.tool_calls_made == 1 { "" } else { "s" },
        kernel,
        k.id,
        k.execution_count,
    )?;
    Ok(ExitCode::from(result.cli_exit_code()))
}

/// What a truncation means when the whole output was streamed: the
/// terminal got all of it, an agent's result (--json, serve, mcp) keeps the
/// head and tail, and where the full text is.
fn streamed_truncation_note(result: &ExecuteResult) -> String {
    let mut note = format!(
        "stdout printed in full above, but the result an agent receives (--json, serve, mcp) \
         omits {} of its {} bytes (see the note above for how)",
        result.stdout_bytes_omitted, result.stdout_bytes_total
    );
    match &result.stdout_spill_path {
        Some(p) => note.push_str(&format!("; full text saved in {p}")),
        None => note.push_str("; the full text could not be saved to a file"),
    }
    note
}

/// The traceback part of a result's output (it is not streamed live).
fn traceback_of(result: &ExecuteResult) -> Option<String> {
    let (_, tail) = result.output.split_once("\n--- stderr ---\n")?;
    let start = tail
        .find("Traceback (most recent call last):")
        .or_else(|| tail.find("  File \"<cell-"))?;
    Some(tail[start..].to_string())
}

/// `toolcell exec --session S`: run the cell in the daemon.
fn in_session(
    config: Option<&Path>,
    args: &Args,
    session: &str,
    code: String,
) -> anyhow::Result<ExitCode> {
    if let Some(py) = &args.overrides.python {
        // The daemon's sessions use the interpreter of its configuration;
        // silently running another Python than the one asked for is worse.
        return Err(host::usage(format!(
            "--python {py} cannot be used with --session: the daemon runs the interpreter of \
             its configuration; set [execution] python in toolcell.toml (or use --config)"
        )));
    }
    let cfg = host::load_config(config, &Overrides::default())?;
    let p = daemon::paths(cfg.file())?;
    let cwd = match args.abs_cwd()? {
        Some(d) => d,
        None => host::cwd()?,
    };
    let rt = host::runtime()?;
    rt.block_on(async {
        daemon::ensure_running(cfg.file(), &p).await?;
        let mut client = daemon::Client::connect(&p.socket)
            .await
            .context("connecting to the daemon")?;
        let mut params = json!({
            "code": code,
            "session": session,
            "reset": args.reset,
            "cwd": cwd.display().to_string(),
            "stream": !args.json,
        });
        if let Some(t) = &args.overrides.timeout {
            let secs: f64 = t.parse().map_err(|_| {
                host::usage(format!(
                    "--timeout: expected a number of seconds > 0, got {t}"
                ))
            })?;
            params["timeout"] = json!(secs);
        }
        if let Some(m) = &args.overrides.mode {
            params["mode"] = json!(m);
        }
        if let Some(t) = host::tool_list(args.overrides.tools.as_deref()) {
            params["tools"] = json!(t);
        }
        if let Some(r) = &args.remote {
            params["remote"] = json!(r);
        }
        if let Some(l) = &args.overrides.language {
            params["language"] = json!(l);
        }
        // Ctrl-C interrupts the cell in the daemon (the session survives).
        let sock = p.socket.clone();
        let owner = session.to_string();
        // The handler is installed here, not in the task: a SIGINT arriving
        // before the task first runs would otherwise kill this process.
        use tokio::signal::unix::{SignalKind, signal};
        let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
        let interrupter = tokio::spawn(async move {
            while int.recv().await.is_some() {
                if let Ok(mut c) = daemon::Client::connect(&sock).await {
                    let _ = c.call("interrupt", json!({"session": owner})).await;
                }
            }
        });
        let reply = client
            .call_with("execute", params, |note| {
                let p = &note["params"];
                if let Some(chunk) = p["chunk"].as_str() {
                    if p["stream"] == "stderr" {
                        let _ = std::io::stderr().lock().write_all(chunk.as_bytes());
                    } else {
                        let mut o = std::io::stdout().lock();
                        let _ = o.write_all(chunk.as_bytes());
                        let _ = o.flush();
                    }
                }
            })
            .await?;
        interrupter.abort();
        if let Some(err) = reply.get("error") {
            let msg = err["message"]
                .as_str()
                .unwrap_or("the daemon refused the request");
            return Err(host::usage(msg.to_string()));
        }
        let result: toolcell_kernel::ExecuteResult =
            serde_json::from_value(reply["result"].clone())
                .context("reading the daemon's result")?;
        report(&result, args.json, !args.json)
    })
}
