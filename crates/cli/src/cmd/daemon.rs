//! `toolcell daemon start|stop|status` and the daemon itself, which keeps
//! the kernels of `toolcell exec --session` alive between commands.
//!
//! One daemon per user and configuration file: its socket and lock live in
//! a private 0700 directory under `$XDG_RUNTIME_DIR/toolcell` (or
//! `<tmp>/toolcell-<uid>`, or — when another user made that one first —
//! the first private `<tmp>/toolcell-<uid>-XXXXXX` of ours, as for the
//! kernels root), named after a hash of the configuration path.
//! The daemon holds an exclusive `flock` on its lock file for its whole
//! life, so two starters racing end with one daemon, and a socket file
//! whose lock is free is stale (its daemon crashed) and is replaced.
//! Clients speak the JSON-RPC of `toolcell serve` over the socket; peers of
//! another uid are refused.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio_util::sync::CancellationToken;

use crate::host::{self, Overrides};
use crate::jsonrpc::{AtEof, DaemonHooks, Service, serve_connection};

/// Arguments of `toolcell daemon`.
#[derive(Debug, clap::Args)]
#[command(
    long_about = "The daemon keeps the kernels of `toolcell exec --session` alive between \
                  commands. `exec --session` starts it on demand; it exits after [daemon] \
                  idle_exit seconds (default 900) without sessions or clients, and `daemon stop` \
                  kills every kernel and stops it. One daemon runs per user and configuration \
                  file; its socket is in a private directory under $XDG_RUNTIME_DIR."
)]
pub(crate) struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Start the daemon in the background (no-op if it runs).
    Start,
    /// Stop the daemon, killing every kernel it keeps.
    Stop,
    /// Print whether the daemon runs, its pid, socket and sessions.
    #[command(
        long_about = "Print whether the daemon runs, its pid, socket and sessions (with --json: \
                      one JSON object with `running`, `pid`, `socket` and `sessions`).\n\n\
                      Exit codes: 0 the daemon is running, 3 it is not running, 1 it holds the \
                      socket but did not answer, 2 usage or configuration error."
    )]
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run the daemon in the foreground (what `start` launches).
    #[command(hide = true)]
    Run,
}

/// Where one daemon's files are.
pub(crate) struct Paths {
    dir: PathBuf,
    pub(crate) socket: PathBuf,
    lock: PathBuf,
    log: PathBuf,
}

/// The daemon's private directory, verified (ours, 0700, no planted
/// link): `$XDG_RUNTIME_DIR/toolcell` (refused if unsafe: that directory is
/// the user's own), else `<tmp>/toolcell-<uid>` — and when another user
/// got there first, the same fallback the kernels root takes: a private
/// `<tmp>/toolcell-<uid>-XXXXXX` of ours, the first by name, so every
/// client finds the same one.
fn runtime_dir() -> anyhow::Result<PathBuf> {
    use toolcell_kernel::kernel::{private_dir, private_dir_or_reuse};
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|x| !x.is_empty()) {
        let dir = PathBuf::from(x).join("toolcell");
        private_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        return Ok(dir);
    }
    let tmp = std::env::temp_dir();
    let dir = tmp.join(format!("toolcell-{}", nix::unistd::getuid()));
    let prefix = format!("toolcell-{}-", nix::unistd::getuid());
    private_dir_or_reuse(&dir, &tmp, &prefix).with_context(|| format!("creating {}", dir.display()))
}

/// FNV-1a: a stable short name for a configuration path.
fn fnv(s: &str) -> String {
    fnv_bytes(s.as_bytes())
}

/// FNV-1a of bytes, as 16 hex digits.
fn fnv_bytes(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

pub(crate) fn paths(config_file: Option<&Path>) -> anyhow::Result<Paths> {
    let dir = runtime_dir()?;
    let meta = std::fs::metadata(&dir)?;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if meta.uid() != nix::unistd::getuid().as_raw() || meta.permissions().mode() & 0o077 != 0 {
        anyhow::bail!(
            "{} must be a directory of yours with mode 0700; fix or remove it",
            dir.display()
        );
    }
    let key = match config_file {
        Some(p) => fnv(&std::fs::canonicalize(p)
            .unwrap_or_else(|_| p.to_path_buf())
            .display()
            .to_string()),
        None => "default".to_string(),
    };
    Ok(Paths {
        socket: dir.join(format!("daemon-{key}.sock")),
        lock: dir.join(format!("daemon-{key}.lock")),
        log: dir.join(format!("daemon-{key}.log")),
        dir,
    })
}

/// Runs the command.
pub(crate) fn run(config: Option<&Path>, args: Args) -> anyhow::Result<ExitCode> {
    let cfg = host::load_config(config, &Overrides::default())?;
    let p = paths(cfg.file())?;
    match args.action {
        Action::Run => run_daemon(cfg, &p),
        Action::Start => {
            let rt = host::runtime()?;
            rt.block_on(async {
                let pid = ensure_running(cfg.file(), &p).await?;
                println_out(&format!(
                    "toolcell daemon running (pid {pid}, socket {})",
                    p.socket.display()
                ));
                Ok(ExitCode::SUCCESS)
            })
        }
        Action::Stop => {
            let rt = host::runtime()?;
            rt.block_on(async {
                match Client::connect(&p.socket).await {
                    Ok(mut c) => {
                        let pid = c
                            .call("ping", json!({}))
                            .await
                            .ok()
                            .and_then(|v| v["result"]["pid"].as_i64())
                            .and_then(|p| i32::try_from(p).ok());
                        // The daemon may close the connection as it exits.
                        let r = c.call("shutdown", json!({})).await.unwrap_or(Value::Null);
                        let n = r["result"]["kernels_killed"].as_u64().unwrap_or(0);
                        // Wait until it is really gone (its lock is released).
                        for _ in 0..100 {
                            if lock_is_free(&p.lock) {
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        // And its process has exited: "stopped" means gone.
                        if let Some(pid) = pid {
                            for _ in 0..250 {
                                if !u32::try_from(pid).is_ok_and(toolcell_sys::procfs::alive) {
                                    break;
                                }
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                        }
                        println_out(&format!(
                            "toolcell daemon stopped ({n} kernel{} killed)",
                            if n == 1 { "" } else { "s" }
                        ));
                    }
                    Err(_) => println_out("toolcell daemon is not running"),
                }
                Ok(ExitCode::SUCCESS)
            })
        }
        Action::Status { json } => {
            let rt = host::runtime()?;
            rt.block_on(async {
                let not_running =
                    || json!({"running": false, "socket": p.socket.display().to_string()});
                let status = match Client::connect(&p.socket).await {
                    Ok(mut c) => match c.call("ping", json!({})).await {
                        Ok(ping) => {
                            let sessions = c.call("sessions", json!({})).await?;
                            json!({
                                "running": true,
                                "pid": ping["result"]["pid"],
                                "socket": p.socket.display().to_string(),
                                "sessions": sessions["result"]["sessions"],
                            })
                        }
                        // A socket that took the connection but never
                        // answers (reset, EOF): no daemon serves it. A
                        // killed daemon's child, between its fork and its
                        // exec, can hold the listening socket for a moment.
                        Err(e) => {
                            tracing::debug!("the daemon socket did not answer a ping: {e}");
                            not_running()
                        }
                    },
                    Err(_) => not_running(),
                };
                if json {
                    println_out(&status.to_string());
                } else if status["running"] == true {
                    println_out(&format!(
                        "toolcell daemon running (pid {}, socket {})",
                        status["pid"],
                        p.socket.display()
                    ));
                    for s in status["sessions"].as_array().into_iter().flatten() {
                        println_out(&format!(
                            "  session {}: kernel {} pid {} · {} cells · idle {}s{}",
                            s["session"].as_str().unwrap_or("?"),
                            s["kernel_id"].as_str().unwrap_or("?"),
                            s["pid"],
                            s["execution_count"],
                            s["idle_seconds"],
                            differing_parts(s)
                        ));
                    }
                } else {
                    println_out("toolcell daemon is not running");
                }
                Ok(if status["running"] == true {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(3)
                })
            })
        }
    }
}

/// For a session name with several kernels: ` · cwd /a · tools x, y`, the
/// key parts that tell this one apart (the `differs` of `sessions`).
fn differing_parts(session: &Value) -> String {
    let mut out = String::new();
    for part in session["differs"].as_array().into_iter().flatten() {
        let Some(name) = part.as_str() else { continue };
        let value = match &session["key"][name] {
            Value::Array(items) => items
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", "),
            Value::String(s) if s.is_empty() => "(private)".to_string(),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.push_str(&format!(" · {name} {value}"));
    }
    out
}

fn println_out(s: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{s}");
}

/// Takes the daemon lock without blocking; `None` if another process holds it.
fn try_lock(path: &Path) -> anyhow::Result<Option<Flock<std::fs::File>>> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(Some(lock)),
        Err((_, Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(e).with_context(|| format!("locking {}", path.display())),
    }
}

fn lock_is_free(path: &Path) -> bool {
    matches!(try_lock(path), Ok(Some(_)))
}

/// The daemon's main loop.
fn run_daemon(cfg: toolcell_host::config::Config, p: &Paths) -> anyhow::Result<ExitCode> {
    let Some(lock) = try_lock(&p.lock)? else {
        // Another daemon for this user and config runs: nothing to do.
        return Ok(ExitCode::SUCCESS);
    };
    let _ = std::fs::remove_file(&p.socket); // stale: its daemon is gone
    let idle_exit = cfg.idle_exit();
    let started_from = started_from(cfg.file());
    let rt = host::runtime()?;
    rt.block_on(async move {
        let listener = {
            let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
            let l = tokio::net::UnixListener::bind(&p.socket);
            nix::sys::stat::umask(old);
            l.with_context(|| format!("binding {}", p.socket.display()))?
        };
        let registry = Arc::new(host::journaled_registry(&cfg, |_| {})?);
        let stop = CancellationToken::new();
        let service = Arc::new(Service {
            registry: Arc::clone(&registry),
            config: cfg,
            daemon: Some(DaemonHooks {
                stop: stop.clone(),
                started_from,
            }),
        });
        let clients = Arc::new(AtomicUsize::new(0));
        let mut last_active = Instant::now();
        let me = nix::unistd::getuid().as_raw();
        let own_name = toolcell_sys::lineage::comm_of(std::process::id());
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        loop {
            tokio::select! {
                conn = listener.accept() => {
                    let Ok((stream, _)) = conn else { continue };
                    match stream.peer_cred() {
                        Ok(c) if c.uid() == me => {
                            // A kernel (or anything it started: cgroup
                            // membership survives double forks, setsid and
                            // a cleared environment) never drives a host.
                            let pid = c.pid().and_then(|p| u32::try_from(p).ok());
                            if pid.is_some_and(|p| {
                                toolcell_sys::cgroup::in_kernel_cgroup(p) == Some(true)
                            }) {
                                tracing::warn!(
                                    "refused a daemon client running inside a toolcell kernel (pid {})",
                                    pid.unwrap_or(0)
                                );
                                continue;
                            }
                            // Nor does anything a toolcell host started, even
                            // after it left its kernel's cgroup: orphans are
                            // re-parented to the host (a subreaper), so the
                            // chain still passes through a toolcell process.
                            if let (Some(p), Some(name)) = (pid, own_name.as_deref())
                                && toolcell_sys::lineage::has_ancestor_named(p, name)
                            {
                                tracing::warn!(
                                    "refused a daemon client started by a toolcell process (pid {p})"
                                );
                                continue;
                            }
                        }
                        _ => {
                            tracing::warn!("refused a daemon client of another uid");
                            continue;
                        }
                    }
                    clients.fetch_add(1, Ordering::SeqCst);
                    let service = Arc::clone(&service);
                    let clients = Arc::clone(&clients);
                    tokio::spawn(async move {
                        let (r, w) = stream.into_split();
                        // A client that leaves stops nothing: the session's
                        // kernels are the daemon's.
                        serve_connection(service, r, w, AtEof::Finish).await;
                        clients.fetch_sub(1, Ordering::SeqCst);
                    });
                }
                () = stop.cancelled() => break,
                _ = term.recv() => break,
                _ = int.recv() => break,
                () = tokio::time::sleep(Duration::from_millis(500)) => {
                    if clients.load(Ordering::SeqCst) > 0 || registry.live_kernels() > 0 {
                        last_active = Instant::now();
                    } else if last_active.elapsed() >= idle_exit {
                        tracing::info!("no sessions for {idle_exit:?}: exiting");
                        break;
                    }
                }
            }
        }
        registry.shutdown_all().await;
        host::flush_journal(&registry);
        let _ = std::fs::remove_file(&p.socket);
        // Let in-flight responses (e.g. to `shutdown`) reach their clients.
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(lock);
        Ok(ExitCode::SUCCESS)
    })
}

/// A JSON-RPC client over the daemon socket.
pub(crate) struct Client {
    reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    writer: tokio::net::unix::OwnedWriteHalf,
    next: u64,
}

impl Client {
    pub(crate) async fn connect(socket: &Path) -> std::io::Result<Self> {
        let s = UnixStream::connect(socket).await?;
        let (r, w) = s.into_split();
        Ok(Self {
            reader: BufReader::new(r),
            writer: w,
            next: 1,
        })
    }

    async fn send(&mut self, method: &str, params: Value) -> anyhow::Result<u64> {
        let id = self.next;
        self.next += 1;
        let mut line =
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        line.push('\n');
        self.writer.write_all(line.as_bytes()).await?;
        Ok(id)
    }

    async fn read(&mut self) -> anyhow::Result<Value> {
        let mut line = String::new();
        let n = self.reader.read_line(&mut line).await?;
        anyhow::ensure!(n > 0, "the daemon closed the connection");
        Ok(serde_json::from_str(&line)?)
    }

    /// Sends a request; notifications before its response go to `on_note`.
    pub(crate) async fn call_with(
        &mut self,
        method: &str,
        params: Value,
        mut on_note: impl FnMut(&Value),
    ) -> anyhow::Result<Value> {
        let id = self.send(method, params).await?;
        loop {
            let msg = self.read().await?;
            if msg.get("id").and_then(Value::as_u64) == Some(id) {
                return Ok(msg);
            }
            if msg.get("method").is_some() {
                on_note(&msg);
            }
        }
    }

    pub(crate) async fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        self.call_with(method, params, |_| {}).await
    }
}

/// What a daemon was started from: its executable (device, inode, size and
/// modification time, so a rebuild or another install differs) and the
/// contents of its configuration file. `ping` reports it; a client compares
/// it with its own (see [`ensure_running`]).
fn started_from(config: Option<&Path>) -> Value {
    use std::os::unix::fs::MetadataExt;
    let binary = std::env::current_exe()
        .and_then(std::fs::metadata)
        .map_or_else(
            |_| "unknown".to_string(),
            |m| {
                format!(
                    "{}:{}:{}:{}.{}",
                    m.dev(),
                    m.ino(),
                    m.size(),
                    m.mtime(),
                    m.mtime_nsec()
                )
            },
        );
    let config = config
        .map(|c| std::fs::read(c).map_or_else(|e| format!("unreadable: {e}"), |b| fnv_bytes(&b)));
    json!({ "binary": binary, "config": config })
}

/// How a running daemon's [`started_from`] differs from this process's, in
/// words; `None` when it does not. A daemon too old to say counts as
/// another binary.
fn differs(theirs: &Value, mine: &Value, config: Option<&Path>) -> Option<String> {
    let binary = theirs["binary"] != mine["binary"];
    let config = (theirs["config"] != mine["config"]).then(|| {
        config.map_or_else(
            || "no configuration file".to_string(),
            |c| format!("an earlier version of {}", c.display()),
        )
    });
    match (binary, config) {
        (false, None) => None,
        (true, None) => {
            Some("another toolcell binary (it was rebuilt or reinstalled since)".into())
        }
        (false, Some(c)) => Some(c),
        (true, Some(c)) => Some(format!("another toolcell binary and {c}")),
    }
}

/// Connects to the daemon, starting it if needed; returns its pid.
///
/// `config` is the configuration file the caller *discovered* (not only a
/// `--config` flag): the daemon runs in its own directory, where discovery
/// would not find `./toolcell.toml`, and it must bind the socket named
/// after that same file.
///
/// A daemon started from another binary or another version of that file
/// (a rebuild, an edit of `toolcell.toml`) is replaced when it holds no
/// session, with a note on stderr; one that holds sessions is left alone
/// and the command is refused with what to run, since replacing it would
/// end those sessions' kernels.
pub(crate) async fn ensure_running(config: Option<&Path>, p: &Paths) -> anyhow::Result<u64> {
    if let Ok(mut c) = Client::connect(&p.socket).await
        && let Ok(r) = c.call("ping", json!({})).await
    {
        let pid = r["result"]["pid"].as_u64().unwrap_or(0);
        let Some(what) = differs(&r["result"]["started_from"], &started_from(config), config)
        else {
            return Ok(pid);
        };
        let sessions = r["result"]["sessions"].as_u64().unwrap_or(0);
        if sessions > 0 {
            return Err(host::usage(format!(
                "the session daemon (pid {pid}) was started from {what}, and {sessions} \
                 session(s) hold kernels in it; run `toolcell daemon stop` (it ends them), \
                 then run this command again"
            )));
        }
        let _ = c.call("shutdown", json!({})).await;
        drop(c);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !lock_is_free(&p.lock) {
            if Instant::now() > deadline {
                anyhow::bail!(
                    "the session daemon (pid {pid}), started from {what}, did not stop within \
                     10 s; run `toolcell daemon stop`"
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = writeln!(
            std::io::stderr(),
            "toolcell: restarted the session daemon (pid {pid}), which was started from {what}"
        );
    }
    let exe = std::env::current_exe().context("finding the toolcell executable")?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&p.log)
        .with_context(|| format!("opening {}", p.log.display()))?;
    let mut cmd = std::process::Command::new(exe);
    if let Some(c) = config {
        cmd.arg("--config").arg(std::path::absolute(c)?);
    }
    cmd.args(["daemon", "run"])
        .current_dir(&p.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    // Its own session: it must not die with this terminal or process group.
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(drop)
                .map_err(std::io::Error::from)
        });
    }
    let log_start = std::fs::metadata(&p.log).map_or(0, |m| m.len());
    let mut child = cmd.spawn().context("starting the daemon")?;
    // It outlives this client on purpose.
    toolcell_sys::process::detach(child.id());
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut exited_ok = false;
    let result = loop {
        if let Ok(mut c) = Client::connect(&p.socket).await
            && let Ok(r) = c.call("ping", json!({})).await
        {
            break Ok(r["result"]["pid"].as_u64().unwrap_or(0));
        }
        // A daemon that failed (cannot bind, bad directory) says why in its
        // log: report it now rather than after the 15 s wait. One that
        // exited 0 lost the start race; the winner is coming up.
        if !exited_ok && let Ok(Some(status)) = child.try_wait() {
            if status.success() {
                exited_ok = true;
            } else {
                let why = std::fs::read(&p.log)
                    .ok()
                    .and_then(|b| {
                        let start = usize::try_from(log_start).unwrap_or(0).min(b.len());
                        let text = String::from_utf8_lossy(&b[start..]).into_owned();
                        text.lines()
                            .rev()
                            .find(|l| !l.trim().is_empty())
                            .map(|l| l.trim_start_matches("toolcell: error: ").to_string())
                    })
                    .unwrap_or_else(|| format!("it exited with {status}"));
                break Err(anyhow::anyhow!(
                    "the daemon failed to start: {why} (log: {})",
                    p.log.display()
                ));
            }
        }
        if Instant::now() > deadline {
            break Err(anyhow::anyhow!(
                "the daemon did not start within 15 s; see its log {}",
                p.log.display()
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Reap it in the background whenever it exits.
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    result
}
