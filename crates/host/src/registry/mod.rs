//! The registry: one kernel per session key, bounded, reaped when idle, cells
//! in FIFO order per kernel, concurrently across kernels (docs/tour.md,
//! "Kernels and the warm pool"; docs/serve.md, "Ordering and concurrency").
//!
//! A cell goes through: admit → guard → acquire kernel → execute → capture
//! → result. The parts:
//!
//! - `options`: [`RegistryOptions`] (what a configuration says) and the
//!   default directories;
//! - `request`: [`ExecuteRequest`], the embedder's [`Guard`], and admission
//!   (`admission`: guard, `[guard] deny`, tool narrowing, confinement,
//!   working directory), a pure function of the request and the options;
//! - `session`: session keys and slots, the `sessions` listing, and room
//!   under `max_kernels` (`Census`, `make_room`, LRU eviction);
//! - `pool`: the warm pool (`should_fill`, taking a pooled kernel, filling);
//! - `reaper`: the idle reaper and the spill pruner (background tasks
//!   holding only a `Weak` to the registry);
//! - `cell`: one cell from admission to result.

mod cell;

#[cfg(feature = "mcp")]
mod mcp_source;
mod options;
mod pool;
mod reaper;
mod request;
mod room;
mod session;

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use toolcell_redact::Redactor;
use toolcell_stubs::Mode;
use toolcell_tools::{ToolRegistry, ToolSettings};

use toolcell_kernel::result::{ExecuteResult, round2};

#[cfg(feature = "mcp")]
pub use mcp_source::McpSource;
pub use options::{
    DEFAULT_REMOTE_FILES_CAP, KernelMode, ONE_CELL_INOTIFY_MIN_ENTRIES, RegistryOptions,
    default_kernels_root, default_spill_dir,
};
use pool::{Pool, fill_pool};
use reaper::{prune_loop, reap_loop};
pub use request::{ExecuteRequest, Guard};
pub use session::{KeyInfo, SessionInfo, SessionKey};
use session::{Slot, State, mark_differences};
pub use toolcell_kernel::extra::{ExtraTools, ToolSource};

/// The kernels root, verified private (ours, 0700, no planted link). A
/// configured root that is not safe is an error naming it; the default one
/// under the shared temp dir (no `XDG_RUNTIME_DIR`) is replaced, when
/// another user got there first, by a private `<tmp>/toolcell-<uid>-XXXXXX`
/// of ours (the first by name, else a fresh one: the daemon's socket
/// directory falls back the same way).
fn verified_root(configured: Option<&Path>) -> Result<PathBuf, RegistryError> {
    use toolcell_sys::private_dir::PrivateDir;
    let refused =
        |path: &Path, e: toolcell_sys::private_dir::PrivateDirError| RegistryError::Root {
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::PermissionDenied, e.to_string()),
        };
    if let Some(root) = configured {
        return PrivateDir::ensure(root)
            .map(|d| d.path().to_path_buf())
            .map_err(|e| refused(root, e));
    }
    let root = default_kernels_root();
    if std::env::var_os("XDG_RUNTIME_DIR").is_some_and(|x| !x.is_empty()) {
        return PrivateDir::ensure(&root)
            .map(|d| d.path().to_path_buf())
            .map_err(|e| refused(&root, e));
    }
    let tmp = std::env::temp_dir();
    let prefix = format!("toolcell-{}-", nix::unistd::getuid());
    let (dir, _) =
        PrivateDir::ensure_or_reuse(&root, &tmp, &prefix).map_err(|e| refused(&root, e))?;
    if dir.path() == root {
        return Ok(root);
    }
    // The fresh directory holds the kernels directly.
    dir.open_dir("kernels")
        .or_else(|_| dir.create_dir("kernels"))
        .map(|d| d.path().to_path_buf())
        .map_err(|e| refused(&root, e))
}

/// `(mode, cwd)`: what interpreter resolution depends on besides the host.
type InterpreterKey = (toolcell_kernel::language::Language, &'static str, PathBuf);

/// What the registry's handles, background tasks and cells share.
struct Inner {
    opts: RegistryOptions,
    tools: ToolRegistry,
    redactor: Redactor,
    base_env: Vec<(OsString, OsString)>,
    root: PathBuf,
    guard: Option<Arc<dyn Guard>>,
    state: Mutex<State>,
    freed: Notify,
    /// A pool spawn finished (its kernel is ready, or it failed).
    pool_done: Notify,
    interpreters: Mutex<HashMap<InterpreterKey, (PathBuf, String)>>,
    pool: Mutex<Pool>,
    /// Host-wide sources of tools (MCP servers), asked before every cell.
    sources: Mutex<Vec<Arc<dyn ToolSource>>>,
    /// Remotes with a lifecycle: this host's id, records and stops.
    lifecycle: Arc<crate::lifecycle::Lifecycle>,
}

impl Inner {
    async fn source_tools(&self) -> ExtraTools {
        let sources = self
            .sources
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let mut all = ExtraTools::default();
        for s in sources {
            all.extend(s.tools().await);
        }
        all
    }

    /// The outside tools of one cell: the request's own, then every
    /// source's, narrowed by the request's `tools`. `None`: none at all.
    async fn cell_extra_tools(&self, req: &ExecuteRequest) -> Option<Arc<ExtraTools>> {
        let has_sources = !self
            .sources
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_empty();
        if !has_sources {
            let extra = req.extra_tools.as_ref()?;
            return Some(match &req.tools {
                Some(wanted) => Arc::new(extra.narrowed(wanted)),
                None => Arc::clone(extra),
            });
        }
        let mut all = match &req.extra_tools {
            Some(e) => (**e).clone(),
            None => ExtraTools::default(),
        };
        all.extend(self.source_tools().await);
        if let Some(wanted) = &req.tools {
            all = all.narrowed(wanted);
        }
        Some(Arc::new(all))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Why a registry could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The kernels directory could not be created.
    #[error("cannot create the kernels directory {path}: {source}")]
    Root {
        /// The directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A default tool name is unknown.
    #[error(transparent)]
    Tools(#[from] toolcell_tools::RegistryError),
    /// No tokio runtime is running.
    #[error("the kernel registry needs a running tokio runtime")]
    NoRuntime,
    /// `confine = true` but this system cannot confine kernels.
    #[error(transparent)]
    Confine(#[from] toolcell_kernel::confine::ConfineError),
    /// `confine = true` where nothing keeps a kernel off control sockets.
    #[error(
        "[execution] confine = true needs a writable cgroup v2 hierarchy (root, or a delegated subtree) so that a confined kernel cannot drive a toolcell daemon's socket; none is available here (or TOOLCELL_CGROUP=off is set)"
    )]
    NoControlFence,
    /// The operating system's random source failed (no host id).
    #[error("cannot make this host's id: {0}")]
    Random(String),
}

/// Owns kernels and runs cells in them. Dropping it kills every kernel.
pub struct Registry {
    inner: Arc<Inner>,
    reaper: tokio::task::JoinHandle<()>,
    pruner: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("root", &self.inner.root)
            .field("live", &self.inner.state().live_count())
            .finish_non_exhaustive()
    }
}

fn mode_str(m: Mode) -> &'static str {
    match m {
        Mode::Strict => "strict",
        _ => "project",
    }
}

/// Removes kernel directories under `root` whose owning host pid is dead
/// (left by a crashed host). Returns how many were removed.
pub fn sweep_stale(root: &Path) -> usize {
    let Ok(dir) = std::fs::read_dir(root) else {
        return 0;
    };
    let mut removed = 0;
    for entry in dir.flatten() {
        let path = entry.path();
        let owner = std::fs::read_to_string(path.join("owner.pid"))
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        let stale = match owner {
            Some(pid) => !toolcell_sys::process::alive(pid),
            // A directory without an owner file is a spawn that crashed
            // half-way, or not ours; only remove our own naming pattern.
            None => entry.file_name().to_string_lossy().starts_with("k-"),
        };
        if stale && std::fs::remove_dir_all(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

impl Registry {
    /// A registry with `opts`, the built-in tools, and the host's
    /// environment (scrubbed for kernels; its secret values registered with
    /// the redactor).
    ///
    /// # Errors
    /// [`RegistryError`] when the kernels directory cannot be made, a
    /// default tool is unknown, or no tokio runtime is running.
    pub fn new(opts: RegistryOptions) -> Result<Self, RegistryError> {
        let tools = ToolRegistry::builtin()?;
        Self::with_tools(opts, tools, None)
    }

    /// A registry with explicit tools and an optional guard.
    ///
    /// # Errors
    /// As [`Registry::new`].
    pub fn with_tools(
        opts: RegistryOptions,
        tools: ToolRegistry,
        guard: Option<Arc<dyn Guard>>,
    ) -> Result<Self, RegistryError> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| RegistryError::NoRuntime)?;
        tools.select(&opts.tools)?;
        if opts.confine {
            // Never silently unconfined: no Landlock, no registry.
            toolcell_kernel::confine::check_supported()?;
            // Confined kernels must not reach a host's control socket (a
            // pathname socket, which Landlock does not cover): the daemon
            // refuses peers in a kernel's cgroup. Without cgroups, say so.
            if toolcell_sys::cgroup::HostCgroup::get().is_none() {
                return Err(RegistryError::NoControlFence);
            }
        }
        let root = verified_root(opts.kernels_root.as_deref())?;
        let swept = sweep_stale(&root);
        if swept > 0 {
            tracing::info!("removed {swept} kernel directories left by a crashed host");
        }
        let host: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        let base_env = toolcell_kernel::env::child_env(host.clone(), &opts.passthrough);
        let redactor = toolcell_kernel::env::host_redactor();
        let lifecycle = crate::lifecycle::Lifecycle::new(opts.remote_records.clone())
            .map_err(|e| RegistryError::Random(e.to_string()))?;
        // What crashed hosts left on the remotes (their `list`), in the
        // background.
        lifecycle.sweep_dead_hosts(&opts.remotes);
        let inner = Arc::new(Inner {
            opts,
            tools,
            redactor,
            base_env,
            root,
            guard,
            state: Mutex::new(State::default()),
            freed: Notify::new(),
            pool_done: Notify::new(),
            interpreters: Mutex::new(HashMap::new()),
            pool: Mutex::new(Pool::default()),
            sources: Mutex::new(Vec::new()),
            lifecycle,
        });
        let reaper = handle.spawn(reap_loop(Arc::downgrade(&inner)));
        let pruner = (inner.opts.spill_retention.is_some() || inner.opts.spill_total_cap.is_some())
            .then(|| handle.spawn(prune_loop(Arc::downgrade(&inner))));
        fill_pool(&inner);
        Ok(Self {
            inner,
            reaper,
            pruner,
        })
    }

    /// The options in force.
    pub fn options(&self) -> &RegistryOptions {
        &self.inner.opts
    }

    /// How many warm-pool kernels are ready now (see
    /// [`RegistryOptions::warm_pool`]).
    pub fn pool_ready(&self) -> usize {
        self.inner.pool().ready.len()
    }

    /// The tools this registry knows.
    pub fn tools(&self) -> &ToolRegistry {
        &self.inner.tools
    }

    /// Adds a host-wide source of tools (e.g. the MCP servers of the
    /// configuration): asked before every cell, its tools are callable from
    /// every kernel of this registry, as functions of `toolcell_tools` (or of
    /// its submodule `toolcell_tools.NAME` for a namespaced source).
    pub fn add_tool_source(&self, source: Arc<dyn ToolSource>) {
        self.inner
            .sources
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(source);
    }

    /// Whether any [`ToolSource`] was added.
    pub fn has_tool_sources(&self) -> bool {
        !self
            .inner
            .sources
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_empty()
    }

    /// The tools of every added [`ToolSource`] now (starting them if they
    /// start lazily), for listings such as `toolcell tools`.
    pub async fn source_tools(&self) -> ExtraTools {
        self.inner.source_tools().await
    }

    /// The redactor applied to everything kernels print.
    pub fn redactor(&self) -> &Redactor {
        &self.inner.redactor
    }

    /// The settings a tool call runs with when made from a kernel working
    /// in `cwd` (spill dir, output cap, web settings, the scrubbed child
    /// environment): for hosts that call tools directly, outside any cell
    /// (e.g. MCP's `--expose-tools`).
    pub fn tool_settings(&self, cwd: &Path) -> ToolSettings {
        let opts = &self.inner.opts;
        ToolSettings::new(cwd)
            .spill_dir(&opts.spill_dir)
            .max_output_bytes(opts.max_stdout_bytes)
            .web(opts.web.clone())
            .env(self.inner.base_env.clone())
            .redactor(self.inner.redactor.clone())
    }

    /// Runs one cell and returns its execute result (docs/result.md). Never
    /// panics on input; every failure is a result.
    ///
    /// With [`RegistryOptions::journal`] set, every result returned here —
    /// success, error, timeout, interrupted, refused, or a request that
    /// could not run — is queued for the journal (cleaned output as
    /// returned, code redacted); recording never delays the result.
    pub async fn execute(&self, req: ExecuteRequest) -> ExecuteResult {
        #[cfg(feature = "journal")]
        if let Some(journal) = &self.inner.opts.journal {
            let started = std::time::SystemTime::now();
            let mut calls = Vec::new();
            let mut result = self.run_cell(&req, Some(&mut calls)).await;
            self.scrub(&mut result);
            journal.record(crate::journal::CellRecord::from_result(
                &req.owner,
                &req.code,
                &result,
                &calls,
                started,
                &self.inner.redactor,
            ));
            return result;
        }
        let mut result = self.run_cell(&req, None).await;
        self.scrub(&mut result);
        result
    }

    /// The result's own texts (`error`, `hint`, `warning`) cleaned like
    /// output: they can quote what a remote's `start`, a kernel that failed
    /// to start or an engine printed, which no stream cleaned.
    fn scrub(&self, result: &mut ExecuteResult) {
        let redactor = &self.inner.redactor;
        for text in [&mut result.error, &mut result.hint, &mut result.warning]
            .into_iter()
            .flatten()
        {
            let cleaned = redactor.clean(text.as_bytes());
            if cleaned != *text {
                *text = cleaned;
            }
        }
    }

    /// Interrupts the running cell of every kernel of `owner`, and any cell
    /// of theirs still waiting. Returns how many sessions were signalled.
    pub fn interrupt(&self, owner: &str) -> usize {
        let st = self.inner.state();
        let mut n = 0;
        for slot in st
            .slots
            .values()
            .filter(|s| s.key.owner == owner || s.key.owner.starts_with(&format!("{owner}\u{0}")))
        {
            let mut m = slot.meta();
            m.interrupt.cancel();
            m.interrupt = CancellationToken::new();
            n += 1;
        }
        n
    }

    /// Kills every kernel of `owner`; waiting cells return `interrupted`.
    /// Returns how many kernels were shut down.
    pub async fn shutdown(&self, owner: &str) -> usize {
        let slots: Vec<Arc<Slot>> = {
            let mut st = self.inner.state();
            let keys: Vec<SessionKey> = st
                .slots
                .keys()
                .filter(|k| k.owner == owner || k.owner.starts_with(&format!("{owner}\u{0}")))
                .cloned()
                .collect();
            let mut out = Vec::new();
            for k in keys {
                if let Some(s) = st.slots.remove(&k) {
                    st.retire(k);
                    out.push(s);
                }
            }
            out
        };
        let n = self.kill_slots(slots).await;
        fill_pool(&self.inner);
        n
    }

    /// Kills every kernel.
    pub async fn shutdown_all(&self) -> usize {
        let sources = self
            .inner
            .sources
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        for s in sources {
            s.shutdown().await;
        }
        // The warm pool closes for good: its kernels die with the rest.
        let pooled = {
            let mut p = self.inner.pool();
            p.closed = true;
            std::mem::take(&mut p.ready)
        };
        drop(pooled);
        let slots: Vec<Arc<Slot>> = {
            let mut st = self.inner.state();
            let all: Vec<(SessionKey, Arc<Slot>)> = st.slots.drain().collect();
            for (k, _) in &all {
                st.retire(k.clone());
            }
            all.into_iter().map(|(_, s)| s).collect()
        };
        let n = self.kill_slots(slots).await;
        self.finish_remotes().await;
        n
    }

    /// Waits for the remotes' `stop`s under way, stops what this host
    /// still has there (their `list`) and removes its records: at most
    /// twice the longest `stop_timeout` (plus a few seconds), so an exit
    /// stays prompt.
    async fn finish_remotes(&self) {
        let remotes = self.inner.opts.remotes.clone();
        if !remotes
            .values()
            .any(toolcell_kernel::remote::Remote::has_lifecycle)
        {
            return;
        }
        let limit = remotes
            .values()
            .map(|r| r.stop_timeout)
            .fold(0.0_f64, f64::max);
        let limit = Duration::try_from_secs_f64(limit).unwrap_or(Duration::from_secs(30))
            + Duration::from_secs(1);
        let lc = Arc::clone(&self.inner.lifecycle);
        let _ = tokio::task::spawn_blocking(move || lc.finish(limit)).await;
    }

    /// This host's id in its remotes' commands (`{host}`).
    pub fn host_id(&self) -> &str {
        self.inner.lifecycle.host_id()
    }

    async fn kill_slots(&self, slots: Vec<Arc<Slot>>) -> usize {
        let mut n = 0;
        for slot in slots {
            let (tree, allocation) = {
                let mut m = slot.meta();
                m.interrupt.cancel();
                m.live = false;
                m.shut_down = true;
                (m.tree.take(), m.allocation.is_some())
            };
            // An idle kernel with an allocation (a lifecycle remote) goes
            // through its shutdown, which stops the allocation before it
            // kills the command (see `Kernel::shutdown`).
            let idle = if allocation {
                slot.kernel.try_lock().ok()
            } else {
                None
            };
            if let Some(t) = &tree {
                if idle.is_none() {
                    // Kill at once: a running cell sees the kernel die and returns.
                    t.signal(nix::sys::signal::Signal::SIGKILL);
                }
                n += 1;
            }
            let kernel = match idle {
                Some(mut g) => g.take(),
                None => slot.kernel.lock().await.take(),
            };
            if let Some(k) = kernel {
                k.shutdown(Duration::from_millis(100)).await;
            }
        }
        self.inner.freed.notify_waiters();
        n
    }

    /// Live kernels, for `sessions`.
    pub fn sessions(&self) -> Vec<SessionInfo> {
        let st = self.inner.state();
        let mut out: Vec<SessionInfo> = st
            .slots
            .values()
            .filter_map(|s| {
                let m = s.meta();
                // A slot out of the count (reset, evicted, failed to
                // start) is not listed even if it still remembers a tree.
                if !m.live {
                    return None;
                }
                let tree = m.tree.as_ref()?;
                // A kernel killed from outside since its last cell is not
                // live, though its slot stays until a cell notices.
                if !toolcell_kernel::kernel::process_running(tree.root) {
                    return None;
                }
                let key = KeyInfo::from(&s.key);
                Some(SessionInfo {
                    session: key.owner.clone(),
                    key,
                    kernel_id: m.kernel_id.clone(),
                    mode: s.key.mode.to_string(),
                    cwd: s.key.cwd.display().to_string(),
                    interpreter: s.key.interpreter.display().to_string(),
                    tools: s.key.tools.clone(),
                    pid: tree.root,
                    execution_count: m.execution_count,
                    idle_seconds: round2(m.last_used.elapsed().as_secs_f64()),
                    busy: m.busy,
                    differs: Vec::new(),
                    allocation: m.allocation.clone(),
                })
            })
            .collect();
        mark_differences(&mut out);
        out.sort_by(|a, b| {
            a.session
                .cmp(&b.session)
                .then(a.kernel_id.cmp(&b.kernel_id))
        });
        out
    }

    /// Number of live kernels.
    pub fn live_kernels(&self) -> usize {
        self.inner.state().live_count()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.reaper.abort();
        if let Some(p) = &self.pruner {
            p.abort();
        }
        let slots: Vec<Arc<Slot>> = self.inner.state().slots.drain().map(|(_, s)| s).collect();
        for slot in slots {
            let mut m = slot.meta();
            m.interrupt.cancel();
            if let Some(t) = m.tree.take() {
                t.signal(nix::sys::signal::Signal::SIGKILL);
            }
            drop(m);
            if let Ok(mut k) = slot.kernel.try_lock() {
                // Dropping the kernel removes its directory.
                k.take();
            }
        }
    }
}

impl Inner {
    /// The interpreter of `mode` in `cwd` and its version, resolved once
    /// per `(mode, cwd)`.
    fn interpreter(
        &self,
        language: toolcell_kernel::language::Language,
        mode: Mode,
        cwd: &Path,
    ) -> Result<(PathBuf, String), String> {
        let key = (language, mode_str(mode), cwd.to_path_buf());
        let cached = self
            .interpreters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&key)
            .cloned();
        if let Some(hit) = cached {
            return Ok(hit);
        }
        // A first probe runs the interpreter (up to seconds through a
        // version-manager shim): keep it off the async workers.
        if language != toolcell_kernel::language::Language::Python {
            // R and node: the configured path or the program on PATH; the
            // runner's `ready` says the version.
            let explicit = match language {
                toolcell_kernel::language::Language::R => &self.opts.r,
                _ => &self.opts.node,
            };
            let found = toolcell_kernel::interpreter::resolve_program(language, explicit)?;
            self.interpreters
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(key, found.clone());
            return Ok(found);
        }
        let explicit = self.opts.python.clone();
        let dir = cwd.to_path_buf();
        let resolve = || toolcell_kernel::interpreter::resolve_for_host(&explicit, mode, &dir);
        let multi = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        let found = if multi {
            tokio::task::block_in_place(resolve)
        } else {
            resolve()
        }
        .map(|i| (i.executable, i.version))
        .map_err(|e| e.to_string())?;
        self.interpreters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key, found.clone());
        Ok(found)
    }
}
