//! Shared wiring: configuration with CLI overrides, the kernel registry,
//! logging, and signal handling.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use toolcell_host::config::Config;
use toolcell_host::{Registry, RegistryOptions};
use toolcell_tools::ToolRegistry;

/// An error that is the user's to fix (bad flag, bad config): exit code 2.
#[derive(Debug)]
pub(crate) struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A usage error as an `anyhow::Error`.
pub(crate) fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}

/// Logs go to stderr only (stdout carries results); `TOOLCELL_LOG` sets the
/// filter (default `warn`). Every log line passes the host's redactor: logs
/// quote what children said (an MCP server's stderr, a remote's, the
/// protocol messages a server sent, at `trace`), and a daemon's log is a
/// file.
pub(crate) fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TOOLCELL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let redactor = toolcell_kernel::env::host_redactor();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(move || RedactedStderr {
            redactor: redactor.clone(),
            buf: Vec::new(),
        })
        // Colours only for a person at a terminal; a log read by a program
        // (an agent host capturing stderr) gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

/// One log event's text, written to stderr through the redactor when the
/// event is complete (the formatter writes an event, then drops its writer).
struct RedactedStderr {
    redactor: toolcell_redact::Redactor,
    buf: Vec<u8>,
}

impl std::io::Write for RedactedStderr {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&self.buf);
        let clean = self.redactor.redact(&text);
        let mut err = std::io::stderr().lock();
        let out = err.write_all(clean.as_bytes());
        self.buf.clear();
        out
    }
}

impl Drop for RedactedStderr {
    fn drop(&mut self) {
        let _ = std::io::Write::flush(self);
    }
}

/// Flags that override configuration keys, shared by exec, serve and repl.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct Overrides {
    /// Seconds a cell may run ([execution] timeout).
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<String>,
    /// project: the project's directory and interpreter; strict: python3 in a private temp dir.
    #[arg(long, value_name = "project|strict")]
    pub mode: Option<String>,
    /// Tools cells may call, comma-separated ([tools] enabled).
    #[arg(long, value_name = "a,b")]
    pub tools: Option<String>,
    /// The Python interpreter ([execution] python).
    #[arg(long, value_name = "PATH")]
    pub python: Option<String>,
    /// The cells' language: python, r or javascript ([execution] language).
    #[arg(long, value_name = "python|r|javascript")]
    pub language: Option<String>,
}

impl Overrides {
    fn pairs(&self) -> Vec<(&'static str, String, &'static str)> {
        let mut v = Vec::new();
        if let Some(t) = &self.timeout {
            v.push(("execution.timeout", t.clone(), "--timeout"));
        }
        if let Some(m) = &self.mode {
            v.push(("execution.mode", m.clone(), "--mode"));
        }
        if let Some(t) = &self.tools {
            v.push(("tools.enabled", t.clone(), "--tools"));
        }
        if let Some(p) = &self.python {
            // A relative path is relative to where the command was run.
            let p = if p.contains('/') {
                std::path::absolute(p).map_or_else(|_| p.clone(), |a| a.display().to_string())
            } else {
                p.clone()
            };
            v.push(("execution.python", p, "--python"));
        }
        if let Some(l) = &self.language {
            // `js`, `R`: the spellings a person types.
            let l = toolcell_kernel::Language::parse(l)
                .map_or_else(|_| l.clone(), |l| l.as_str().to_string());
            v.push(("execution.language", l, "--language"));
        }
        v
    }
}

/// A `--tools a,b` value as names (blanks dropped); `None` without the flag.
pub(crate) fn tool_list(flag: Option<&str>) -> Option<Vec<String>> {
    flag.map(|t| {
        t.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    })
}

/// The names of the tools linked into this binary.
pub(crate) fn tool_names() -> anyhow::Result<Vec<String>> {
    let reg = ToolRegistry::builtin().context("building the tool registry")?;
    Ok(reg.names().map(str::to_string).collect())
}

/// Loads the configuration (found as docs/configuration.md says) and applies
/// CLI overrides; every problem is a [`UsageError`].
pub(crate) fn load_config(path: Option<&Path>, overrides: &Overrides) -> anyhow::Result<Config> {
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let mut config = Config::discover(path, &cwd).map_err(|e| usage(e.to_string()))?;
    for (key, value, flag) in overrides.pairs() {
        config
            .set_override_as(key, &value, flag)
            .map_err(|e| usage(e.to_string()))?;
    }
    config.validate().map_err(|e| usage(e.to_string()))?;
    let names = tool_names()?;
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    config
        .validate_tools(&refs)
        .map_err(|e| usage(e.to_string()))?;
    Ok(config)
}

/// The current directory.
pub(crate) fn cwd() -> anyhow::Result<PathBuf> {
    std::env::current_dir().context("reading the current directory")
}

/// A registry for `config`; tweak its options with `adjust`. It journals
/// only when `[journal] enabled = true` and pools kernels only when
/// `[kernels] warm_pool` is set (the defaults of one-shot hosts: `exec`,
/// `repl`); long-running hosts use [`journaled_registry`].
pub(crate) fn registry(
    config: &Config,
    adjust: impl FnOnce(&mut RegistryOptions),
) -> anyhow::Result<Registry> {
    registry_with_journal(config, false, adjust)
}

/// A registry for a long-running host (`serve`, `mcp`, the daemon): it
/// journals every cell unless `[journal] enabled = false`, and keeps a
/// warm pool of one kernel unless `[kernels] warm_pool` says otherwise. Call
/// [`flush_journal`] before the process exits.
pub(crate) fn journaled_registry(
    config: &Config,
    adjust: impl FnOnce(&mut RegistryOptions),
) -> anyhow::Result<Registry> {
    registry_with_journal(config, true, adjust)
}

fn registry_with_journal(
    config: &Config,
    long_running: bool,
    adjust: impl FnOnce(&mut RegistryOptions),
) -> anyhow::Result<Registry> {
    let mut opts =
        RegistryOptions::from_config(config, cwd()?).map_err(|e| usage(e.to_string()))?;
    opts.journal = journal(config, long_running)?;
    // Long-running hosts keep one ready kernel for the next new session; a
    // one-shot command would only pay for a kernel it never uses.
    opts.warm_pool = config.warm_pool(usize::from(long_running));
    adjust(&mut opts);
    let registry = Registry::new(opts).context("starting the kernel registry")?;
    if !config.mcp_servers.is_empty() {
        // Started on first use, shared by every kernel of this host.
        let source = toolcell_host::registry::McpSource::new(config.mcp_specs())
            .map_err(|e| usage(format!("[mcp_servers]: {e}")))?;
        registry.add_tool_source(Arc::new(source));
    }
    Ok(registry)
}

/// The tools of `config`'s MCP servers, for the listing commands (`tools`,
/// `stubs`, `schema`): the servers are started, listed and stopped.
/// `None` when none are configured.
pub(crate) fn mcp_tools(config: &Config) -> anyhow::Result<Option<toolcell_kernel::ExtraTools>> {
    use toolcell_kernel::ToolSource as _;
    if config.mcp_servers.is_empty() {
        return Ok(None);
    }
    let source = toolcell_host::registry::McpSource::new(config.mcp_specs())
        .map_err(|e| usage(format!("[mcp_servers]: {e}")))?;
    let rt = runtime()?;
    Ok(Some(rt.block_on(async {
        let tools = source.tools().await;
        source.shutdown().await;
        tools
    })))
}

/// The journal `config` asks for, `host_default` deciding `[journal]
/// enabled = "auto"`. A journal that cannot be opened is an error (exit 2)
/// when the file asked for it, and a warning (no journal) when it was only
/// the host's default.
pub(crate) fn journal(
    config: &Config,
    host_default: bool,
) -> anyhow::Result<Option<toolcell_host::journal::Journal>> {
    match config.journal(host_default) {
        Ok(j) => Ok(j),
        Err(e) if config.journal.enabled == toolcell_host::config::Switch::Auto => {
            tracing::warn!("cells are not journaled: {e}");
            Ok(None)
        }
        Err(e) => Err(usage(format!("journal.enabled = true, but {e}"))),
    }
}

/// Waits (at most 5 s) until the registry's journal has written every cell
/// queued so far; call it after the last cell, before exiting.
pub(crate) fn flush_journal(registry: &Registry) {
    if let Some(j) = &registry.options().journal
        && !j.flush(std::time::Duration::from_secs(5))
    {
        tracing::warn!(
            "the journal did not finish writing within 5 s; the last cells may be missing"
        );
    }
}

/// Async stdin and stdout for a line protocol (`serve`, `mcp`).
///
/// tokio's `stdin()`/`stdout()` run every read and write on the blocking
/// thread pool: two thread hand-offs per message, which on a small machine
/// cost more than the cell itself. When they are pipes (how agent hosts
/// start us), they are reopened through `/proc/self/fd` — a new open file
/// description, so making it non-blocking does not touch the descriptors we
/// inherited or anyone else's — and driven by the reactor. Anything else
/// (a terminal, a file) falls back to tokio's handles.
pub(crate) fn stdio() -> (
    Box<dyn tokio::io::AsyncRead + Unpin + Send>,
    Box<dyn tokio::io::AsyncWrite + Unpin + Send>,
) {
    use tokio::net::unix::pipe;
    let input: Box<dyn tokio::io::AsyncRead + Unpin + Send> =
        match reopen_fifo(0, false).and_then(|f| pipe::Receiver::from_file(f).ok()) {
            Some(r) => Box::new(r),
            None => Box::new(tokio::io::stdin()),
        };
    let output: Box<dyn tokio::io::AsyncWrite + Unpin + Send> =
        match reopen_fifo(1, true).and_then(|f| pipe::Sender::from_file(f).ok()) {
            Some(w) => Box::new(w),
            None => Box::new(tokio::io::stdout()),
        };
    (input, output)
}

/// `fd` reopened non-blocking through `/proc/self/fd`, if it is a pipe.
fn reopen_fifo(fd: i32, write: bool) -> Option<std::fs::File> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let path = format!("/proc/self/fd/{fd}");
    if !std::fs::metadata(&path).ok()?.file_type().is_fifo() {
        return None;
    }
    std::fs::OpenOptions::new()
        .read(!write)
        .write(write)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(&path)
        .ok()
}

/// The tokio runtime of a command: one worker thread.
///
/// A cell is a chain of waits on other processes (client, kernel), not
/// work to share out: with a second worker every task woken or spawned
/// also woke that worker to steal it, a futex wake-up and a switch between
/// CPUs per step of every cell, for nothing to run in parallel. Blocking
/// work goes to the blocking pool as before (`spawn_blocking`, and
/// `block_in_place`, which a multi-threaded runtime keeps working).
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// The exit code a caught SIGINT (130) or SIGTERM (143) asks for; 0 = none.
static SIGNAL_EXIT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// The exit code of a SIGINT/SIGTERM caught by [`exit_on_signals`], if any.
/// A command that finishes on its own while the handler is shutting down
/// (its cell ended because its kernel was killed) must exit with this code,
/// not its own: the process would otherwise exit 130 or 143 by a race.
pub(crate) fn signal_exit_code() -> Option<u8> {
    match SIGNAL_EXIT.load(std::sync::atomic::Ordering::SeqCst) {
        0 => None,
        code => Some(code),
    }
}

/// On SIGINT or SIGTERM: kill every kernel of `registry`, then exit with
/// 130 (SIGINT) or 143 (SIGTERM). For commands whose Ctrl-C means "stop".
/// Call it inside the runtime: the handlers are installed before it
/// returns, so a signal arriving right after is not missed.
pub(crate) fn exit_on_signals(registry: Arc<Registry>) {
    exit_on_signals_after(registry, None);
}

/// As [`exit_on_signals`], except that with `first_int` the first SIGINT
/// only cancels that token (the command interrupts its cell and reports it
/// as usual); a second SIGINT, or a SIGTERM, kills every kernel and exits.
pub(crate) fn exit_on_signals_after(
    registry: Arc<Registry>,
    first_int: Option<tokio_util::sync::CancellationToken>,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return;
    };
    tokio::spawn(async move {
        let mut first_int = first_int;
        let code: u8 = loop {
            tokio::select! {
                _ = int.recv() => match first_int.take() {
                    Some(first) => first.cancel(),
                    None => break 130,
                },
                _ = term.recv() => break 143,
            }
        };
        SIGNAL_EXIT.store(code, std::sync::atomic::Ordering::SeqCst);
        registry.shutdown_all().await;
        toolcell_sys::process::kill_adopted(&[]);
        toolcell_sys::cgroup::remove_host_cgroup();
        flush_journal(&registry);
        std::process::exit(i32::from(code));
    });
}
