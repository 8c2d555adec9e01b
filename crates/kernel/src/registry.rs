//! The registry: one kernel per session key, bounded, reaped when idle,
//! cells in FIFO order per kernel, concurrently across kernels (SPEC §4).
//!
//! A cell goes through: admit → guard → acquire kernel → execute → capture
//! → result.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use regex::Regex;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolcell_protocol::RunnerStatus;
use toolcell_redact::Redactor;
use toolcell_rpc::ErrorCode;
use toolcell_tools::hints::{self, HintContext};
use toolcell_tools::process::Tree;
use toolcell_tools::schema::Mode;
use toolcell_tools::{ToolRegistry, ToolSettings, WebSettings, stubs};

use crate::capture::Captured;
use crate::kernel::{
    CellOptions, CellOutcome, Ending, Kernel, KernelSpec, LiveSink, TimeoutPolicy, last_lines,
};
use crate::result::{Display, ExecuteResult, KernelInfo, Status, Usage, round2};

/// Keys remembered after their kernel is gone, for `state_reset`.
const RETIRED_MEMORY: usize = 4096;

/// How cells map to kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KernelMode {
    /// One persistent kernel per session key.
    #[default]
    Session,
    /// A fresh kernel for every cell, discarded afterwards.
    PerCall,
}

/// Resolved settings of a registry (what `[execution]`, `[kernels]`,
/// `[output]`, `[env]`, `[tools]`, `[rpc]`, `[web]` and `[guard]` say).
#[derive(Debug, Clone)]
pub struct RegistryOptions {
    /// Cell wall-clock limit.
    pub timeout: Duration,
    /// Tool calls per cell.
    pub max_tool_calls: u32,
    /// Default mode.
    pub mode: Mode,
    /// Explicit interpreter (empty: resolve per SPEC §4).
    pub python: String,
    /// What a timeout does.
    pub on_timeout: TimeoutPolicy,
    /// Grace after SIGINT.
    pub interrupt_grace: Duration,
    /// Grace between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// Live kernels at most.
    pub max_kernels: usize,
    /// Idle kernels are reaped after this long.
    pub idle_timeout: Duration,
    /// Stdout bytes returned inline.
    pub max_stdout_bytes: usize,
    /// Stderr bytes returned inline.
    pub max_stderr_bytes: usize,
    /// Spill directory.
    pub spill_dir: PathBuf,
    /// Spill file cap.
    pub spill_cap_bytes: u64,
    /// Spill files older than this are removed when the registry starts and
    /// every [`RegistryOptions::spill_prune_every`] (`None`: age alone
    /// removes nothing). Default 7 days.
    pub spill_retention: Option<Duration>,
    /// While the spill files in `spill_dir` total more bytes than this, the
    /// oldest go (`None`: no cap). Default 1 GiB. Files a result of a live
    /// session reports stay until the session ends, whatever their age.
    pub spill_total_cap: Option<u64>,
    /// How often the spill directory is pruned; the first prune runs at
    /// start. Default 1 hour.
    pub spill_prune_every: Duration,
    /// Extra environment variable names passed to kernels.
    pub passthrough: Vec<String>,
    /// Tools enabled by default.
    pub tools: Vec<String>,
    /// RPC over TCP instead of a Unix socket.
    pub rpc_tcp: bool,
    /// Web search settings.
    pub web: WebSettings,
    /// Session or per-call kernels.
    pub kernel_mode: KernelMode,
    /// Regexes that refuse a cell whose code matches.
    pub deny: Vec<Regex>,
    /// Working directory of project-mode sessions that give none.
    pub default_cwd: PathBuf,
    /// Where kernel directories live (default: `$XDG_RUNTIME_DIR/toolcell/kernels`
    /// or `<tmp>/toolcell-<uid>/kernels`).
    pub kernels_root: Option<PathBuf>,
    /// `[limits]` of every kernel.
    pub limits: crate::limits::Limits,
    /// `[execution] confine`: Landlock-confine strict-mode kernels; cells in
    /// project mode are refused.
    pub confine: bool,
    /// How long a kernel may take to start.
    pub startup_timeout: Duration,
    /// Ready kernels kept for new sessions of the default shape (default
    /// mode, interpreter and cwd, the default tool set): the first cell of
    /// a new session takes one and a replacement starts in the background.
    /// Pooled kernels are not sessions (`sessions` does not list them), but
    /// they count against `max_kernels` and yield their room to sessions:
    /// a session that needs it closes a pooled kernel before any idle
    /// session is evicted, and the pool refills only when there is room
    /// again. 0: no pool.
    /// [`RegistryOptions::from_config`] leaves it 0: the host decides with
    /// [`crate::config::Config::warm_pool`].
    pub warm_pool: usize,
    /// Where every result [`Registry::execute`] returns is recorded (see
    /// [`crate::journal`]); `None`: nowhere. [`RegistryOptions::from_config`]
    /// leaves it `None`: the host decides with [`crate::config::Config::journal`].
    pub journal: Option<crate::journal::Journal>,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(300),
            max_tool_calls: 50,
            mode: Mode::Project,
            python: String::new(),
            on_timeout: TimeoutPolicy::Interrupt,
            interrupt_grace: Duration::from_secs(2),
            kill_grace: Duration::from_secs(2),
            max_kernels: 4,
            idle_timeout: Duration::from_secs(1800),
            max_stdout_bytes: 50_000,
            max_stderr_bytes: 10_000,
            spill_dir: default_spill_dir(),
            spill_cap_bytes: 5_000_000,
            spill_retention: Some(Duration::from_secs(7 * 86_400)),
            spill_total_cap: Some(1 << 30),
            spill_prune_every: Duration::from_secs(3600),
            passthrough: Vec::new(),
            tools: crate::config::DEFAULT_TOOLS
                .iter()
                .map(|s| (*s).to_string())
                .collect(),
            rpc_tcp: false,
            web: WebSettings::default(),
            kernel_mode: KernelMode::Session,
            deny: Vec::new(),
            default_cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            limits: crate::limits::Limits::default(),
            confine: false,
            kernels_root: None,
            startup_timeout: Duration::from_secs(60),
            warm_pool: 0,
            journal: None,
        }
    }
}

impl RegistryOptions {
    /// The options a configuration file (SPEC §11) describes, for a host
    /// whose project-mode sessions default to `default_cwd`.
    ///
    /// # Errors
    /// A `[guard] deny` pattern that is not a valid regex.
    pub fn from_config(
        config: &crate::config::Config,
        default_cwd: PathBuf,
    ) -> Result<Self, crate::config::ConfigError> {
        use crate::config;
        Ok(Self {
            timeout: config.timeout(),
            max_tool_calls: config.execution.max_tool_calls,
            mode: config.execution.mode,
            python: config.execution.python.clone(),
            on_timeout: match config.execution.on_timeout {
                toolcell_tools::schema::OnTimeout::Kill => TimeoutPolicy::Kill,
                _ => TimeoutPolicy::Interrupt,
            },
            interrupt_grace: config.interrupt_grace(),
            kill_grace: config.kill_grace(),
            max_kernels: config.kernels.max_kernels,
            idle_timeout: config.idle_timeout(),
            max_stdout_bytes: config.output.max_stdout_bytes,
            max_stderr_bytes: config.output.max_stderr_bytes,
            spill_dir: config.spill_dir(),
            spill_cap_bytes: config.output.spill_cap_bytes,
            spill_retention: config.spill_retention(),
            spill_total_cap: config.spill_total_cap(),
            spill_prune_every: Duration::from_secs(3600),
            passthrough: config.env.passthrough.clone(),
            tools: config.tools.enabled.clone(),
            rpc_tcp: config.rpc.transport == config::Transport::Tcp,
            web: config.web_settings(|name| std::env::var_os(name)),
            kernel_mode: match config.execution.kernel_mode {
                config::KernelMode::PerCall => KernelMode::PerCall,
                _ => KernelMode::Session,
            },
            deny: config.guard_deny()?,
            default_cwd,
            limits: config.limits(),
            confine: config.execution.confine,
            kernels_root: None,
            startup_timeout: Duration::from_secs(60),
            warm_pool: 0,
            journal: None,
        })
    }
}

/// The error for request tools outside the configured set, naming them.
fn widening(requested: &[String], enabled: &[String]) -> Option<String> {
    let extra: Vec<&str> = requested
        .iter()
        .filter(|t| !enabled.contains(t))
        .map(String::as_str)
        .collect();
    if extra.is_empty() {
        return None;
    }
    let enabled = if enabled.is_empty() {
        "none".to_string()
    } else {
        enabled.join(", ")
    };
    Some(format!(
        "the request names {} not enabled in this host's [tools] enabled ({enabled}); \
         a request's tools may only narrow that set; none of the code ran",
        extra
            .iter()
            .map(|t| format!("`{t}`"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// `$XDG_CACHE_HOME/toolcell/spill` or `~/.cache/toolcell/spill`.
pub fn default_spill_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("toolcell/spill");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(h).join(".cache/toolcell/spill");
    }
    std::env::temp_dir()
        .join(format!("toolcell-{}", nix::unistd::getuid()))
        .join("spill")
}

/// `$XDG_RUNTIME_DIR/toolcell/kernels` or `<tmp>/toolcell-<uid>/kernels`.
pub fn default_kernels_root() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("toolcell/kernels");
    }
    std::env::temp_dir()
        .join(format!("toolcell-{}", nix::unistd::getuid()))
        .join("kernels")
}

/// The kernels root, verified private (ours, 0700, no planted link). A
/// configured root that is not safe is an error naming it; the default one
/// under the shared temp dir (no `XDG_RUNTIME_DIR`) is replaced by a fresh
/// private directory when another user got there first.
fn verified_root(configured: Option<&Path>) -> Result<PathBuf, RegistryError> {
    use toolcell_rpc::private_dir::PrivateDir;
    let refused =
        |path: &Path, e: toolcell_rpc::private_dir::PrivateDirError| RegistryError::Root {
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
        PrivateDir::ensure_or_fresh(&root, &tmp, &prefix).map_err(|e| refused(&root, e))?;
    if dir.path() == root {
        return Ok(root);
    }
    // The fresh directory holds the kernels directly.
    dir.open_dir("kernels")
        .or_else(|_| dir.create_dir("kernels"))
        .map(|d| d.path().to_path_buf())
        .map_err(|e| refused(&root, e))
}

/// An embedder's veto over cells, asked before any kernel is touched.
pub trait Guard: Send + Sync + 'static {
    /// `Err(rule)` refuses the cell; `rule` names what refused it.
    ///
    /// # Errors
    /// The rule that refused the cell.
    fn check(&self, request: &ExecuteRequest) -> Result<(), String>;
}

/// One cell to run.
#[derive(Clone)]
pub struct ExecuteRequest {
    /// The code.
    pub code: String,
    /// The conversation id (default `"default"`).
    pub owner: String,
    /// Discard the session's kernel first.
    pub reset: bool,
    /// Override the timeout.
    pub timeout: Option<Duration>,
    /// Override the mode.
    pub mode: Option<Mode>,
    /// Override the enabled tools.
    pub tools: Option<Vec<String>>,
    /// Override the working directory (project mode).
    pub cwd: Option<PathBuf>,
    /// Receives cleaned output chunks while the cell runs.
    pub live: Option<LiveSink>,
}

impl std::fmt::Debug for ExecuteRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecuteRequest")
            .field("owner", &self.owner)
            .field("reset", &self.reset)
            .field("timeout", &self.timeout)
            .field("mode", &self.mode)
            .field("tools", &self.tools)
            .field("cwd", &self.cwd)
            .field("code_len", &self.code.len())
            .finish_non_exhaustive()
    }
}

impl ExecuteRequest {
    /// A request for `code` in the default session.
    pub fn new(code: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            owner: "default".into(),
            reset: false,
            timeout: None,
            mode: None,
            tools: None,
            cwd: None,
            live: None,
        }
    }

    /// Sets the owner (session).
    #[must_use]
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self
    }

    /// Asks for a fresh kernel.
    #[must_use]
    pub fn reset(mut self, reset: bool) -> Self {
        self.reset = reset;
        self
    }

    /// Sets the timeout.
    #[must_use]
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }

    /// Sets the mode.
    #[must_use]
    pub fn mode(mut self, m: Mode) -> Self {
        self.mode = Some(m);
        self
    }

    /// Sets the enabled tools.
    #[must_use]
    pub fn tools<S: Into<String>>(mut self, tools: impl IntoIterator<Item = S>) -> Self {
        self.tools = Some(tools.into_iter().map(Into::into).collect());
        self
    }

    /// Sets the working directory.
    #[must_use]
    pub fn cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Streams cleaned output chunks to `sink` while the cell runs.
    #[must_use]
    pub fn live(mut self, sink: LiveSink) -> Self {
        self.live = Some(sink);
        self
    }
}

/// A session key (SPEC §1): `(owner, mode, interpreter, cwd, sorted tools)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionKey {
    /// The owner.
    pub owner: String,
    /// The mode.
    pub mode: &'static str,
    /// The interpreter.
    pub interpreter: PathBuf,
    /// The working directory (empty for strict mode: a private one per kernel).
    pub cwd: PathBuf,
    /// Enabled tools, sorted.
    pub tools: Vec<String>,
}

/// A part of a session key besides the owner: two kernels of one session
/// name differ in at least one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyPart {
    Mode,
    Interpreter,
    Cwd,
    Tools,
}

impl KeyPart {
    const ALL: [KeyPart; 4] = [
        KeyPart::Cwd,
        KeyPart::Mode,
        KeyPart::Interpreter,
        KeyPart::Tools,
    ];

    /// The name `sessions` uses (a `KeyInfo` field).
    fn name(self) -> &'static str {
        match self {
            KeyPart::Mode => "mode",
            KeyPart::Interpreter => "interpreter",
            KeyPart::Cwd => "cwd",
            KeyPart::Tools => "tools",
        }
    }

    /// What a sentence calls it.
    fn label(self) -> &'static str {
        match self {
            KeyPart::Mode => "mode",
            KeyPart::Interpreter => "interpreter",
            KeyPart::Cwd => "working directory",
            KeyPart::Tools => "tool set",
        }
    }

    fn of(self, key: &KeyInfo) -> String {
        match self {
            KeyPart::Mode => key.mode.clone(),
            KeyPart::Interpreter => key.interpreter.clone(),
            KeyPart::Cwd if key.cwd.is_empty() => "a private one".into(),
            KeyPart::Cwd => key.cwd.clone(),
            KeyPart::Tools if key.tools.is_empty() => "none".into(),
            KeyPart::Tools => key.tools.join(", "),
        }
    }

    fn differs(self, a: &KeyInfo, b: &KeyInfo) -> bool {
        match self {
            KeyPart::Mode => a.mode != b.mode,
            KeyPart::Interpreter => a.interpreter != b.interpreter,
            KeyPart::Cwd => a.cwd != b.cwd,
            KeyPart::Tools => a.tools != b.tools,
        }
    }
}

/// The parts in which `a` and `b` differ, owner aside.
fn differing_parts(a: &KeyInfo, b: &KeyInfo) -> Vec<KeyPart> {
    KeyPart::ALL
        .into_iter()
        .filter(|p| p.differs(a, b))
        .collect()
}

/// The warning for a cell whose session name already has kernels under
/// other keys (`others`): it runs in a separate kernel with its own state.
fn sibling_warning(key: &SessionKey, others: &[SessionKey]) -> Option<String> {
    if others.is_empty() {
        return None;
    }
    let mine = KeyInfo::from(key);
    let described: Vec<String> = others
        .iter()
        .map(|o| {
            let theirs = KeyInfo::from(o);
            let parts: Vec<String> = differing_parts(&theirs, &mine)
                .into_iter()
                .map(|p| {
                    format!(
                        "a different {} ({}; this cell's: {})",
                        p.label(),
                        p.of(&theirs),
                        p.of(&mine)
                    )
                })
                .collect();
            join_and(&parts)
        })
        .collect();
    let which = if others.len() == 1 {
        "a kernel".to_string()
    } else {
        format!("{} kernels", others.len())
    };
    Some(format!(
        "session {:?} already has {which} with {}, so this cell runs in a separate kernel with its own state (a session's kernel is picked by its name together with its working directory, mode, interpreter and tools).",
        mine.owner,
        described.join("; another with ")
    ))
}

/// `a`, `a and b`, `a, b and c`.
fn join_and(items: &[String]) -> String {
    match items.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        Some((last, _)) => last.clone(),
        None => String::new(),
    }
}

/// Sets each entry's `differs`: the key parts in which it differs from
/// other entries of the same session name.
fn mark_differences(list: &mut [SessionInfo]) {
    let keys: Vec<KeyInfo> = list.iter().map(|s| s.key.clone()).collect();
    for (i, entry) in list.iter_mut().enumerate() {
        let mut parts: Vec<&'static str> = Vec::new();
        for (j, other) in keys.iter().enumerate() {
            if i == j || other.owner != entry.key.owner {
                continue;
            }
            for p in differing_parts(&entry.key, other) {
                if !parts.contains(&p.name()) {
                    parts.push(p.name());
                }
            }
        }
        entry.differs = KeyPart::ALL
            .into_iter()
            .map(KeyPart::name)
            .filter(|n| parts.contains(n))
            .map(String::from)
            .collect();
    }
}

/// A session key as `sessions` shows it (SPEC §1: owner, mode,
/// interpreter, cwd, sorted tools).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KeyInfo {
    /// The owner (session name).
    pub owner: String,
    /// `project` or `strict`.
    pub mode: String,
    /// Interpreter path.
    pub interpreter: String,
    /// Working directory (empty in strict mode: a private one per kernel).
    pub cwd: String,
    /// Enabled tools, sorted.
    pub tools: Vec<String>,
}

/// A live kernel, as `sessions` lists it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SessionInfo {
    /// The session key.
    pub key: KeyInfo,
    /// The owner.
    pub session: String,
    /// The kernel id.
    pub kernel_id: String,
    /// `project` or `strict`.
    pub mode: String,
    /// Working directory.
    pub cwd: String,
    /// Interpreter path.
    pub interpreter: String,
    /// Enabled tools.
    pub tools: Vec<String>,
    /// The runner's pid.
    pub pid: u32,
    /// Cells run.
    pub execution_count: u64,
    /// Seconds since the last cell ended.
    pub idle_seconds: f64,
    /// Cells running or waiting.
    pub busy: usize,
    /// When other kernels of the same session name are listed: the key
    /// parts (`cwd`, `mode`, `interpreter`, `tools`) in which this one
    /// differs from them. Omitted when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub differs: Vec<String>,
}

impl From<&SessionKey> for KeyInfo {
    fn from(k: &SessionKey) -> Self {
        Self {
            owner: k
                .owner
                .split('\u{0}')
                .next()
                .unwrap_or_default()
                .to_string(),
            mode: k.mode.to_string(),
            interpreter: k.interpreter.display().to_string(),
            cwd: k.cwd.display().to_string(),
            tools: k.tools.clone(),
        }
    }
}

struct SlotMeta {
    busy: usize,
    last_used: Instant,
    live: bool,
    had_kernel: bool,
    interrupt: CancellationToken,
    tree: Option<Tree>,
    kernel_id: String,
    execution_count: u64,
    /// Set when the session was shut down (the running cell's result says so).
    shut_down: bool,
    /// Spill files its results reported (newest last, at most
    /// [`SPILLS_KEPT`]): kept by the spill pruner while the slot lives.
    spills: VecDeque<OsString>,
}

/// Spill files per session protected from pruning (the newest).
const SPILLS_KEPT: usize = 256;

impl SlotMeta {
    fn remember_spill(&mut self, path: Option<&Path>) {
        let Some(name) = path.and_then(Path::file_name) else {
            return;
        };
        if self.spills.len() >= SPILLS_KEPT {
            self.spills.pop_front();
        }
        self.spills.push_back(name.to_os_string());
    }
}

struct Slot {
    key: SessionKey,
    kernel: tokio::sync::Mutex<Option<Kernel>>,
    meta: Mutex<SlotMeta>,
}

impl Slot {
    fn meta(&self) -> std::sync::MutexGuard<'_, SlotMeta> {
        self.meta
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[derive(Default)]
struct State {
    slots: HashMap<SessionKey, Arc<Slot>>,
    retired: VecDeque<SessionKey>,
    /// Cells waiting in `reserve` for room (the pool does not refill then).
    waiting: usize,
}

impl State {
    fn retire(&mut self, key: SessionKey) {
        if !self.retired.contains(&key) {
            if self.retired.len() >= RETIRED_MEMORY {
                self.retired.pop_front();
            }
            self.retired.push_back(key);
        }
    }

    fn live_count(&self) -> usize {
        self.slots.values().filter(|s| s.meta().live).count()
    }
}

/// `(mode, cwd)`: what interpreter resolution depends on besides the host.
type InterpreterKey = (&'static str, PathBuf);

struct Inner {
    opts: RegistryOptions,
    tools: ToolRegistry,
    redactor: Redactor,
    base_env: Vec<(OsString, OsString)>,
    root: PathBuf,
    guard: Option<Arc<dyn Guard>>,
    state: Mutex<State>,
    freed: Notify,
    interpreters: Mutex<HashMap<InterpreterKey, (PathBuf, String)>>,
    pool: Mutex<Pool>,
}

impl Inner {
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
    Confine(#[from] crate::confine::ConfineError),
    /// `confine = true` where nothing keeps a kernel off control sockets.
    #[error(
        "[execution] confine = true needs a writable cgroup v2 hierarchy (root, or a delegated subtree) so that a confined kernel cannot drive a toolcell daemon's socket; none is available here (or TOOLCELL_CGROUP=off is set)"
    )]
    NoControlFence,
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
            Some(pid) => !toolcell_tools::process::alive(pid),
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
            crate::confine::check_supported()?;
            // Confined kernels must not reach a host's control socket (a
            // pathname socket, which Landlock does not cover): the daemon
            // refuses peers in a kernel's cgroup. Without cgroups, say so.
            if toolcell_tools::cgroup::HostCgroup::get().is_none() {
                return Err(RegistryError::NoControlFence);
            }
        }
        let root = verified_root(opts.kernels_root.as_deref())?;
        let swept = sweep_stale(&root);
        if swept > 0 {
            tracing::info!("removed {swept} kernel directories left by a crashed host");
        }
        let host: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        let base_env = crate::env::child_env(host.clone(), &opts.passthrough);
        let secrets = crate::env::host_secret_values(host);
        let redactor = Redactor::new(secrets).unwrap_or_else(|_| Redactor::builtin());
        let inner = Arc::new(Inner {
            opts,
            tools,
            redactor,
            base_env,
            root,
            guard,
            state: Mutex::new(State::default()),
            freed: Notify::new(),
            interpreters: Mutex::new(HashMap::new()),
            pool: Mutex::new(Pool::default()),
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
    }

    /// Runs one cell and returns its SPEC §6 result. Never panics on input;
    /// every failure is a result.
    ///
    /// With [`RegistryOptions::journal`] set, every result returned here —
    /// success, error, timeout, interrupted, refused, or a request that
    /// could not run — is queued for the journal (cleaned output as
    /// returned, code redacted); recording never delays the result.
    pub async fn execute(&self, req: ExecuteRequest) -> ExecuteResult {
        let Some(journal) = &self.inner.opts.journal else {
            return self.run_cell(&req, None).await;
        };
        let started = std::time::SystemTime::now();
        let mut calls = Vec::new();
        let result = self.run_cell(&req, Some(&mut calls)).await;
        journal.record(crate::journal::CellRecord::from_result(
            &req.owner,
            &req.code,
            &result,
            &calls,
            started,
            &self.inner.redactor,
        ));
        result
    }

    /// [`Registry::execute`] without the journal; the cell's tool calls go
    /// to `calls` when given.
    async fn run_cell(
        &self,
        req: &ExecuteRequest,
        calls: Option<&mut Vec<toolcell_rpc::CallRecord>>,
    ) -> ExecuteResult {
        let inner = &self.inner;
        let t0 = Instant::now();
        let mode = req.mode.unwrap_or(inner.opts.mode);
        let blank = KernelInfo {
            mode: mode_str(mode).into(),
            ..KernelInfo::default()
        };
        // Admit: the embedder's guard, then `[guard] deny`.
        if let Some(rule) = self.admit(req) {
            return ExecuteResult::not_run(
                Status::Refused,
                format!("the cell was refused by {rule}; none of its code ran"),
                blank,
            );
        }
        let tool_names: Vec<String> = {
            let mut t = req
                .tools
                .clone()
                .unwrap_or_else(|| inner.opts.tools.clone());
            t.sort();
            t.dedup();
            t
        };
        // A request may only narrow the configured set, never widen it: a
        // cell (or a confined kernel reaching a control socket) must not
        // gain tools the operator did not enable.
        if let Some(e) = widening(&tool_names, &inner.opts.tools) {
            return ExecuteResult::not_run(Status::Error, e, blank);
        }
        let tools = match inner.tools.select(&tool_names) {
            Ok(t) => t,
            Err(e) => {
                return ExecuteResult::not_run(
                    Status::Error,
                    format!("{e}; none of the code ran"),
                    blank,
                );
            }
        };
        if inner.opts.confine && mode != Mode::Strict {
            return ExecuteResult::not_run(
                Status::Error,
                "[execution] confine = true allows only strict-mode cells (Landlock confinement applies to strict-mode kernels); this cell asked for project mode; none of the code ran",
                blank,
            );
        }
        let cwd = match mode {
            Mode::Strict => PathBuf::new(),
            _ => req
                .cwd
                .clone()
                .unwrap_or_else(|| inner.opts.default_cwd.clone()),
        };
        if mode != Mode::Strict && !cwd.is_dir() {
            return ExecuteResult::not_run(
                Status::Error,
                format!(
                    "the working directory {} does not exist; none of the code ran",
                    cwd.display()
                ),
                blank,
            );
        }
        let (interpreter, version) = match inner.interpreter(mode, &cwd) {
            Ok(i) => i,
            Err(e) => {
                return ExecuteResult::not_run(
                    Status::Error,
                    format!("{e}; none of the code ran"),
                    blank,
                );
            }
        };
        let per_call = inner.opts.kernel_mode == KernelMode::PerCall;
        let owner = if per_call {
            format!(
                "{}\u{0}per-call-{}",
                req.owner,
                toolcell_protocol::random_hex(8).unwrap_or_default()
            )
        } else {
            req.owner.clone()
        };
        let key = SessionKey {
            owner,
            mode: mode_str(mode),
            interpreter: interpreter.clone(),
            cwd: cwd.clone(),
            tools: tool_names.clone(),
        };

        // Acquire the slot; being busy protects it from eviction and reaping.
        let (slot, token) = {
            let mut st = inner.state();
            let had_before = st.retired.contains(&key);
            let slot = Arc::clone(st.slots.entry(key.clone()).or_insert_with(|| {
                Arc::new(Slot {
                    key: key.clone(),
                    kernel: tokio::sync::Mutex::new(None),
                    meta: Mutex::new(SlotMeta {
                        busy: 0,
                        last_used: Instant::now(),
                        live: false,
                        had_kernel: had_before,
                        interrupt: CancellationToken::new(),
                        tree: None,
                        kernel_id: String::new(),
                        execution_count: 0,
                        shut_down: false,
                        spills: VecDeque::new(),
                    }),
                })
            }));
            let token = {
                let mut m = slot.meta();
                m.busy += 1;
                m.interrupt.clone()
            };
            (slot, token)
        };
        let _busy = BusyGuard {
            inner: Arc::clone(inner),
            slot: Arc::clone(&slot),
        };

        // Strict FIFO per kernel: tokio's mutex is fair.
        let mut guard = tokio::select! {
            g = slot.kernel.lock() => g,
            () = token.cancelled() => {
                return ExecuteResult::not_run(
                    Status::Interrupted,
                    "the cell was interrupted while waiting for the previous cell of this session; none of its code ran",
                    blank,
                );
            }
        };
        if token.is_cancelled() {
            return ExecuteResult::not_run(
                Status::Interrupted,
                "the cell was interrupted before it started; none of its code ran",
                blank,
            );
        }
        if !inner
            .state()
            .slots
            .get(&key)
            .is_some_and(|s| Arc::ptr_eq(s, &slot))
        {
            return ExecuteResult::not_run(
                Status::Interrupted,
                "the session was shut down before the cell started; none of its code ran",
                blank,
            );
        }

        let mut state_reset = false;
        // Notices for the result's `warning`, before any truncation notice.
        let mut notices: Vec<String> = Vec::new();
        // A kernel that died since its last cell (killed from outside, OOM,
        // `os._exit` in a thread left behind) is noticed here, before the
        // cell is sent: the cell runs in a fresh kernel instead of failing.
        if let Some(k) = guard.as_mut() {
            let ended = k.ended_between_cells();
            if ended.is_some() || !k.is_alive() {
                if let Some(how) = ended {
                    tracing::info!(session = %slot.key.owner, "the kernel ended between cells: {how}");
                    notices.push(format!(
                        "the previous kernel of this session ended between cells: {how}; its state (variables, imports) is lost, and this cell ran in a fresh kernel."
                    ));
                }
                if let Some(k) = guard.take() {
                    // Whatever is left of its tree goes too.
                    k.shutdown(Duration::from_millis(100)).await;
                }
                state_reset = true;
                let mut m = slot.meta();
                m.live = false;
                m.tree = None;
            }
        }
        if req.reset
            && let Some(k) = guard.take()
        {
            k.shutdown(Duration::from_millis(200)).await;
            state_reset = true;
            slot.meta().live = false;
        }
        let reused = guard.is_some();
        let mut refill = false;
        if guard.is_none() {
            if slot.meta().had_kernel {
                state_reset = true;
            }
            let deadline = Instant::now() + req.timeout.unwrap_or(inner.opts.timeout);
            let shape = Shape {
                mode,
                interpreter: interpreter.clone(),
                version: version.clone(),
                cwd: cwd.clone(),
                tools: tool_names.clone(),
            };
            let (pooled, wants_refill) = inner.take_pooled(&slot, &shape);
            refill = wants_refill;
            if pooled.is_none()
                && let Err(msg) = self.reserve(&slot, deadline).await
            {
                return ExecuteResult::not_run(Status::Error, msg, blank);
            }
            if refill {
                // After this cell, or in 200 ms if the cell runs longer.
                let weak = Arc::downgrade(inner);
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    if let Some(inner) = weak.upgrade() {
                        fill_pool(&inner);
                    }
                });
            }
            let spawned = match pooled {
                Some(k) => Ok(k),
                None => spawn_kernel(inner, &shape, &tools).await,
            };
            match spawned {
                Ok(k) => {
                    let mut m = slot.meta();
                    m.had_kernel = true;
                    m.tree = Some(k.tree());
                    m.kernel_id = k.id().to_string();
                    m.execution_count = 0;
                    drop(m);
                    *guard = Some(k);
                }
                Err(e) => {
                    slot.meta().live = false;
                    inner.freed.notify_waiters();
                    return ExecuteResult::not_run(
                        Status::Error,
                        format!("{e}; none of the code ran"),
                        blank,
                    );
                }
            }
        }
        let Some(kernel) = guard.as_mut() else {
            return ExecuteResult::not_run(Status::Error, "no kernel could be started", blank);
        };
        if !reused && !per_call {
            // A newcomer's trip: the same session name from another
            // directory (or mode, interpreter, tools) is another kernel.
            let others: Vec<SessionKey> = inner
                .state()
                .slots
                .values()
                .filter(|s| s.key.owner == key.owner && s.key != key && s.meta().live)
                .map(|s| s.key.clone())
                .collect();
            notices.extend(sibling_warning(&key, &others));
        }

        let opts = CellOptions {
            timeout: req.timeout.unwrap_or(inner.opts.timeout),
            max_tool_calls: inner.opts.max_tool_calls,
            on_timeout: inner.opts.on_timeout,
            interrupt_grace: inner.opts.interrupt_grace,
            kill_grace: inner.opts.kill_grace,
            max_stdout_bytes: inner.opts.max_stdout_bytes,
            max_stderr_bytes: inner.opts.max_stderr_bytes,
            spill: Some((inner.opts.spill_dir.clone(), inner.opts.spill_cap_bytes)),
            live: req.live.clone(),
            interrupt: token.clone(),
        };
        let mut outcome = kernel.execute(&req.code, &opts).await;
        if refill {
            fill_pool(inner);
        }
        if let (Some(calls), Some(report)) = (calls, outcome.tools.as_ref()) {
            calls.extend_from_slice(report.calls());
        }
        if slot.meta().shut_down
            && let Ending::Died { .. } = outcome.ending
        {
            // Not a crash: the session was shut down under the cell.
            outcome.ending = Ending::ShutDown;
        }
        let info = KernelInfo {
            id: kernel.id().to_string(),
            mode: kernel.mode().to_string(),
            python: kernel.python().to_string(),
            reused,
            execution_count: outcome.execution_count,
            state_reset,
            state_kept: None,
            ended: None,
        };
        {
            let mut m = slot.meta();
            m.execution_count = outcome.execution_count;
            m.remember_spill(outcome.stdout.spill_path.as_deref());
            m.remember_spill(outcome.stderr.spill_path.as_deref());
        }
        if !outcome.alive || per_call {
            if let Some(k) = guard.take() {
                k.shutdown(Duration::from_millis(200)).await;
            }
            let mut m = slot.meta();
            m.live = false;
            m.tree = None;
        }
        if per_call {
            let mut st = inner.state();
            if st.slots.get(&key).is_some_and(|s| Arc::ptr_eq(s, &slot)) {
                st.slots.remove(&key);
            }
        }
        drop(guard);
        inner.freed.notify_waiters();
        if !slot.meta().live {
            // Its room may go back to the warm pool.
            fill_pool(inner);
        }
        // Hints are only looked for when a cell fails: build their context then.
        let python = info.python.clone();
        let kernel_id = info.id.clone();
        let hint_cx = || {
            let mut importable: Vec<String> = stubs::HELPERS[1..]
                .iter()
                .map(|s| (*s).to_string())
                .collect();
            importable.extend(tool_names.iter().cloned());
            let mut cx =
                HintContext::new(importable, format!("{} ({python})", interpreter.display()));
            cx.limits = inner
                .opts
                .limits
                .pairs()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            if inner.opts.confine {
                cx.confined_writable = vec![
                    inner.root.join(&kernel_id).display().to_string(),
                    inner
                        .root
                        .join(format!("{kernel_id}-work"))
                        .display()
                        .to_string(),
                    std::env::temp_dir().display().to_string(),
                ];
            }
            cx
        };
        let mut result = build_result(outcome, info, hint_cx, &opts, inner.opts.max_tool_calls);
        result.duration_seconds = round2(t0.elapsed().as_secs_f64());
        notices.extend(result.warning.take());
        if !notices.is_empty() {
            result.warning = Some(notices.join(" "));
        }
        result
    }

    fn admit(&self, req: &ExecuteRequest) -> Option<String> {
        if let Some(g) = &self.inner.guard
            && let Err(rule) = g.check(req)
        {
            return Some(format!("the host's guard ({rule})"));
        }
        for re in &self.inner.opts.deny {
            if re.is_match(&req.code) {
                return Some(format!("the [guard] deny rule `{}`", re.as_str()));
            }
        }
        None
    }

    /// Makes room for one more live kernel within `max_kernels` (pooled
    /// kernels included): closes a ready pooled kernel, or has a pool spawn
    /// in flight discarded, or evicts the least recently used idle kernel of
    /// another session, or waits for one to become idle.
    async fn reserve(&self, slot: &Arc<Slot>, deadline: Instant) -> Result<(), String> {
        let inner = &self.inner;
        let mut waiting: Option<WaitingGuard<'_>> = None;
        loop {
            let notified = inner.freed.notified();
            let step = {
                let mut st = inner.state();
                let mut p = inner.pool();
                let census = inner.census(&st, &p);
                let victim = lru_idle(&st, slot);
                match make_room(census, victim.is_some()) {
                    Room::Free => {
                        slot.meta().live = true;
                        return Ok(());
                    }
                    Room::DrainPooled => {
                        slot.meta().live = true;
                        Step::Close(p.ready.pop().map(Box::new))
                    }
                    Room::Evict => match victim {
                        Some(v) => {
                            st.slots.remove(&v.key);
                            st.retire(v.key.clone());
                            v.meta().live = false;
                            slot.meta().live = true;
                            Step::Evict(v)
                        }
                        None => Step::Wait,
                    },
                    Room::YieldFill => {
                        p.yielding += 1;
                        Step::Wait
                    }
                    Room::Wait => Step::Wait,
                }
            };
            match step {
                Step::Close(k) => {
                    tracing::info!("closing a warm-pool kernel to make room for a session");
                    if let Some(k) = k {
                        k.shutdown(Duration::from_millis(100)).await;
                    }
                    return Ok(());
                }
                Step::Evict(v) => {
                    tracing::info!(session = %v.key.owner, "evicting the least recently used idle kernel");
                    let k = v.kernel.lock().await.take();
                    if let Some(k) = k {
                        k.shutdown(Duration::from_millis(200)).await;
                    }
                    return Ok(());
                }
                Step::Wait => {}
            }
            if waiting.is_none() {
                waiting = Some(WaitingGuard::new(inner));
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(deadline) => {
                    return Err(format!(
                        "all {} kernels are busy running cells (max_kernels = {}); none of the code ran",
                        inner.opts.max_kernels, inner.opts.max_kernels
                    ));
                }
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
        self.kill_slots(slots).await
    }

    async fn kill_slots(&self, slots: Vec<Arc<Slot>>) -> usize {
        let mut n = 0;
        for slot in slots {
            let tree = {
                let mut m = slot.meta();
                m.interrupt.cancel();
                m.live = false;
                m.shut_down = true;
                m.tree.take()
            };
            if let Some(t) = tree {
                // Kill at once: a running cell sees the kernel die and returns.
                t.signal(nix::sys::signal::Signal::SIGKILL);
                n += 1;
            }
            if let Some(k) = slot.kernel.lock().await.take() {
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
                let tree = m.tree.as_ref()?;
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

struct BusyGuard {
    inner: Arc<Inner>,
    slot: Arc<Slot>,
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        {
            let mut m = self.slot.meta();
            m.busy = m.busy.saturating_sub(1);
            m.last_used = Instant::now();
        }
        self.inner.freed.notify_waiters();
    }
}

/// What a kernel is made of: everything of a session key but the owner,
/// plus the interpreter's version.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Shape {
    mode: Mode,
    interpreter: PathBuf,
    version: String,
    cwd: PathBuf,
    tools: Vec<String>,
}

/// Starts a kernel of `shape` (strict mode: in a fresh private working
/// directory the kernel owns). The error is a sentence for the result.
async fn spawn_kernel(
    inner: &Inner,
    shape: &Shape,
    tools: &[Arc<dyn toolcell_tools::DynTool>],
) -> Result<Kernel, String> {
    let id = format!("k-{}", toolcell_protocol::random_hex(8).unwrap_or_default());
    let (kcwd, owned_cwd) = if shape.mode == Mode::Strict {
        let dir = toolcell_rpc::private_dir::PrivateDir::ensure(&inner.root)
            .and_then(|root| root.create_dir(&format!("{id}-work")))
            .map(|d| d.path().to_path_buf())
            .map_err(|e| format!("cannot create a private working directory: {e}"))?;
        (dir.clone(), Some(dir))
    } else {
        (shape.cwd.clone(), None)
    };
    let mut settings = ToolSettings::new(&kcwd)
        .spill_dir(&inner.opts.spill_dir)
        .max_output_bytes(inner.opts.max_stdout_bytes)
        .web(inner.opts.web.clone());
    settings = settings.env(inner.base_env.clone());
    let spec = KernelSpec {
        id,
        interpreter: shape.interpreter.clone(),
        python_version: shape.version.clone(),
        mode: mode_str(shape.mode).into(),
        cwd: kcwd,
        env: inner.base_env.clone(),
        root: inner.root.clone(),
        tools: tools.to_vec(),
        dispatch: inner.tools.dispatcher(settings),
        rpc_tcp: inner.opts.rpc_tcp,
        redactor: inner.redactor.clone(),
        startup_timeout: inner.opts.startup_timeout,
        limits: inner.opts.limits,
        confine: inner.opts.confine,
    };
    match Kernel::spawn(spec).await {
        Ok(mut k) => {
            k.set_owned_cwd(owned_cwd);
            Ok(k)
        }
        Err(e) => {
            if let Some(d) = owned_cwd {
                let _ = std::fs::remove_dir_all(d);
            }
            Err(e.to_string())
        }
    }
}

/// The warm pool (see [`RegistryOptions::warm_pool`]).
#[derive(Default)]
struct Pool {
    /// Ready kernels, all of `shape`.
    ready: Vec<Kernel>,
    /// Spawns in flight.
    filling: usize,
    /// Spawns in flight whose kernel is closed when it is ready: their room
    /// was given to a session (at most `filling`).
    yielding: usize,
    /// Set by `shutdown_all`: nothing is pooled any more.
    closed: bool,
    /// The default shape, once resolved.
    shape: Option<Shape>,
}

impl Inner {
    /// The interpreter of `mode` in `cwd` and its version, resolved once
    /// per `(mode, cwd)`.
    fn interpreter(&self, mode: Mode, cwd: &Path) -> Result<(PathBuf, String), String> {
        let key = (mode_str(mode), cwd.to_path_buf());
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
        let explicit = self.opts.python.clone();
        let dir = cwd.to_path_buf();
        let resolve = || crate::interpreter::resolve_for_host(&explicit, mode, &dir);
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

    fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.pool
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The shape pooled kernels have: default mode, interpreter and cwd,
    /// the default tool set.
    fn default_shape(&self) -> Result<Shape, String> {
        let mode = self.opts.mode;
        let cwd = match mode {
            Mode::Strict => PathBuf::new(),
            _ => self.opts.default_cwd.clone(),
        };
        let (interpreter, version) = self.interpreter(mode, &cwd)?;
        let mut tools = self.opts.tools.clone();
        tools.sort();
        tools.dedup();
        Ok(Shape {
            mode,
            interpreter,
            version,
            cwd,
            tools,
        })
    }

    /// A ready pooled kernel of `shape` for `slot`, if there is one, and
    /// whether the pool should be refilled (`shape` is the pooled one, or
    /// the pooled shape is not known yet). A kernel taken moves from the
    /// pool to the session (the slot is marked live under the same locks),
    /// so the count of kernels does not change. The caller refills after
    /// its cell (or a little later if the cell runs long): a spawn running
    /// beside a short first cell would slow it on a small machine.
    fn take_pooled(&self, slot: &Slot, shape: &Shape) -> (Option<Kernel>, bool) {
        if self.opts.warm_pool == 0 {
            return (None, false);
        }
        let mut dead = Vec::new();
        let taken = {
            let _st = self.state();
            let mut p = self.pool();
            match &p.shape {
                // Not the pooled shape: nothing to take, nothing to refill.
                Some(pooled) if pooled != shape => return (None, false),
                // Not resolved yet (the first fill is running, or failed):
                // nothing to take; a refill tries again.
                None => None,
                Some(_) => {
                    let mut taken = None;
                    while let Some(mut k) = p.ready.pop() {
                        if k.check_alive() {
                            taken = Some(k);
                            break;
                        }
                        dead.push(k);
                    }
                    if taken.is_some() {
                        slot.meta().live = true;
                    }
                    taken
                }
            }
        };
        // Dead pooled kernels are dropped outside the locks.
        drop(dead);
        (taken, true)
    }

    /// The counts room decisions are made on; `st` and `p` are held (in
    /// that order: state, then pool).
    fn census(&self, st: &State, p: &Pool) -> Census {
        Census {
            live: st.live_count(),
            pooled: p.ready.len(),
            filling: p.filling,
            yielding: p.yielding,
            waiting: st.waiting,
            max: self.opts.max_kernels.max(1),
        }
    }

    /// Claims one pool spawn if the pool is short and there is room.
    fn claim_fill(&self) -> bool {
        let st = self.state();
        let mut p = self.pool();
        let census = self.census(&st, &p);
        if should_fill(census, self.opts.warm_pool, p.closed) {
            p.filling += 1;
            true
        } else {
            false
        }
    }
}

/// How many kernels there are and may be, at one moment: what the
/// decisions about room and about the warm pool are made on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Census {
    /// Session kernels running or reserved.
    live: usize,
    /// Ready pooled kernels.
    pooled: usize,
    /// Pool spawns in flight (yielding ones included).
    filling: usize,
    /// Pool spawns in flight whose kernel will be closed.
    yielding: usize,
    /// Cells waiting for room.
    waiting: usize,
    /// `max_kernels` (at least 1).
    max: usize,
}

impl Census {
    /// Python processes there are or are about to be.
    fn used(&self) -> usize {
        self.live + self.pooled + self.filling
    }
}

/// What to do so that one more session kernel fits in `max_kernels`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Room {
    /// There is room.
    Free,
    /// Close a ready pooled kernel and take its room.
    DrainPooled,
    /// Have a pool spawn in flight closed when it is ready, and wait.
    YieldFill,
    /// Evict the least recently used idle session kernel.
    Evict,
    /// Wait until a kernel goes idle or away.
    Wait,
}

/// The warm pool gives its room up first (ready kernels, then spawns in
/// flight); only then is an idle session evicted.
fn make_room(c: Census, idle_victim: bool) -> Room {
    if c.used() < c.max {
        Room::Free
    } else if c.pooled > 0 {
        Room::DrainPooled
    } else if c.filling > c.yielding {
        Room::YieldFill
    } else if c.yielding > 0 {
        // A yielded spawn frees its room when it is ready.
        Room::Wait
    } else if idle_victim {
        Room::Evict
    } else {
        Room::Wait
    }
}

/// Whether the warm pool should start one more kernel: it is short of
/// `warm_pool`, there is room under `max_kernels`, and no cell is waiting
/// for room (sessions come first).
fn should_fill(c: Census, warm_pool: usize, closed: bool) -> bool {
    !closed
        && c.waiting == 0
        && c.yielding == 0
        && c.pooled + c.filling < warm_pool
        && c.used() < c.max
}

/// The least recently used idle live kernel of a session other than `slot`.
fn lru_idle(st: &State, slot: &Arc<Slot>) -> Option<Arc<Slot>> {
    st.slots
        .values()
        .filter(|s| !Arc::ptr_eq(s, slot))
        .filter(|s| {
            let m = s.meta();
            m.live && m.busy == 0
        })
        .min_by_key(|s| s.meta().last_used)
        .cloned()
}

/// What `reserve` does after deciding, outside the locks.
enum Step {
    Close(Option<Box<Kernel>>),
    Evict(Arc<Slot>),
    Wait,
}

/// Counts a cell waiting for room while it lives (a cancelled wait too).
struct WaitingGuard<'a>(&'a Inner);

impl<'a> WaitingGuard<'a> {
    fn new(inner: &'a Inner) -> Self {
        inner.state().waiting += 1;
        Self(inner)
    }
}

impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        let mut st = self.0.state();
        st.waiting = st.waiting.saturating_sub(1);
    }
}

/// Tops the warm pool up to `warm_pool` kernels in the background, as far
/// as `max_kernels` leaves room.
fn fill_pool(inner: &Arc<Inner>) {
    if inner.opts.warm_pool == 0 {
        return;
    }
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if inner.claim_fill() {
        handle.spawn(fill_loop(Arc::downgrade(inner)));
    }
}

/// Runs the claimed spawn, then claims and runs more while the pool is short.
async fn fill_loop(inner: Weak<Inner>) {
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let shape = strong.pool().shape.clone();
        let shape = match shape {
            Some(s) => Ok(s),
            None => strong.default_shape(),
        };
        let spawned = match &shape {
            Ok(shape) => match strong.tools.select(&shape.tools) {
                Ok(tools) => spawn_kernel(&strong, shape, &tools).await,
                Err(e) => Err(e.to_string()),
            },
            Err(e) => Err(e.clone()),
        };
        let unwanted = {
            let mut p = strong.pool();
            p.filling -= 1;
            match (spawned, shape) {
                (Ok(k), Ok(shape)) if !p.closed && p.yielding == 0 => {
                    p.shape = Some(shape);
                    p.ready.push(k);
                    None
                }
                (Ok(k), _) => {
                    p.yielding = p.yielding.saturating_sub(1);
                    Some(k)
                }
                (Err(e), _) => {
                    p.yielding = p.yielding.saturating_sub(1);
                    // No retry loop: the next session that misses tries again.
                    tracing::warn!("warm pool: cannot start a kernel: {e}");
                    strong.freed.notify_waiters();
                    return;
                }
            }
        };
        if let Some(k) = unwanted {
            // Its room went to a session (or the pool closed).
            k.shutdown(Duration::from_millis(100)).await;
            strong.freed.notify_waiters();
            return;
        }
        if !strong.claim_fill() {
            return;
        }
    }
}

async fn reap_loop(inner: Weak<Inner>) {
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let idle = strong.opts.idle_timeout;
        let period = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
        drop(strong);
        tokio::time::sleep(period).await;
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let victims: Vec<Arc<Slot>> = {
            let mut st = strong.state();
            let keys: Vec<SessionKey> = st
                .slots
                .values()
                .filter(|s| {
                    let m = s.meta();
                    m.busy == 0 && m.last_used.elapsed() >= idle
                })
                .map(|s| s.key.clone())
                .collect();
            let mut out = Vec::new();
            for k in keys {
                if let Some(s) = st.slots.remove(&k) {
                    if s.meta().live {
                        st.retire(k);
                    }
                    out.push(s);
                }
            }
            out
        };
        let reaped = !victims.is_empty();
        for slot in victims {
            tracing::info!(session = %slot.key.owner, "reaping an idle kernel");
            let k = slot.kernel.lock().await.take();
            {
                let mut m = slot.meta();
                m.live = false;
                m.tree = None;
            }
            if let Some(k) = k {
                k.shutdown(Duration::from_millis(200)).await;
            }
        }
        strong.freed.notify_waiters();
        if reaped {
            fill_pool(&strong);
        }
    }
}

/// Prunes the spill directory now and every `spill_prune_every` (see
/// [`crate::spill`]), keeping what live sessions' results report.
async fn prune_loop(inner: Weak<Inner>) {
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let dir = strong.opts.spill_dir.clone();
        let rules = crate::spill::Rules {
            retention: strong.opts.spill_retention,
            total_cap: strong.opts.spill_total_cap,
        };
        let every = strong.opts.spill_prune_every.max(Duration::from_millis(10));
        let protected: std::collections::HashSet<OsString> = strong
            .state()
            .slots
            .values()
            .flat_map(|s| s.meta().spills.iter().cloned().collect::<Vec<_>>())
            .collect();
        drop(strong);
        let pruned =
            tokio::task::spawn_blocking(move || crate::spill::prune(&dir, rules, &protected)).await;
        if let Ok(p) = pruned
            && p.removed > 0
        {
            tracing::info!("removed {} old spill files ({} bytes)", p.removed, p.bytes);
        }
        tokio::time::sleep(every).await;
    }
}

/// Most bytes of the exception line quoted in `error` (one sentence).
const MAX_EXCEPTION_LINE: usize = 500;

fn exception_line(traceback: &str) -> Option<String> {
    traceback
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty() && !l.starts_with(' '))
        .map(|l| clip(l.trim(), MAX_EXCEPTION_LINE))
}

/// `text` cut to at most `max` bytes on a character boundary, `…` added
/// when cut.
fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The traceback as it goes into `output`: within `cap` bytes (the stderr
/// cap), a head (40%) and a tail (60%) around a notice, like a captured
/// stream. The runner already bounds it (2^22 characters, whole lines), but a cell that
/// raises a megabyte-long message or recurses 100k frames deep must not put
/// more than the configured caps into one result.
fn cap_traceback(traceback: &str, cap: usize) -> std::borrow::Cow<'_, str> {
    use toolcell_redact::{HeadTailCut, Unit};
    match HeadTailCut::plan(traceback, cap, Unit::Bytes) {
        None => std::borrow::Cow::Borrowed(traceback),
        Some(cut) => std::borrow::Cow::Owned(cut.render(traceback, "TRACEBACK")),
    }
}

fn truncation_warning(name: &str, c: &Captured) -> Option<String> {
    if !c.truncated {
        return None;
    }
    let mut w = format!(
        "{name} was truncated: {} of {} bytes omitted (head and tail kept).",
        c.bytes_omitted, c.bytes_total
    );
    if let Some(p) = &c.spill_path {
        w.push_str(&format!(
            " The full {name} is saved in {}; page it with read_file(\"{}\", offset=…) instead of re-running the cell.",
            p.display(),
            p.display()
        ));
        if c.spill_capped {
            w.push_str(" (The file itself was capped; its end is missing.)");
        }
    } else if let Some(e) = &c.spill_error {
        w.push_str(&format!(" It could not be saved to a file: {e}."));
    }
    Some(w)
}

fn build_result(
    outcome: CellOutcome,
    mut kernel: KernelInfo,
    hint_cx: impl FnOnce() -> HintContext,
    opts: &CellOptions,
    max_tool_calls: u32,
) -> ExecuteResult {
    let CellOutcome {
        ending,
        stdout,
        stderr,
        traceback,
        tools,
        duration,
        alive,
        ..
    } = outcome;
    let timeout_s = opts.timeout.as_secs_f64();
    let grace_s = opts.interrupt_grace.as_secs_f64();
    let mut stdin_requested = false;
    let mut usage = None;
    let mut display = Vec::new();
    let mut take_runner = |r: &toolcell_protocol::CellResult| {
        stdin_requested = r.stdin_requested;
        usage = Some(Usage {
            cpu_seconds: round2(r.usage.cpu_seconds),
            peak_rss_kb: r.usage.peak_rss_kb,
        });
        display = r
            .display
            .iter()
            .map(|d| Display {
                mime: d.mime.clone(),
                path: d.path.clone(),
            })
            .collect();
    };
    let (status, exit_code, error, killed_by_timeout) = match &ending {
        Ending::Answered(r) => {
            take_runner(r);
            match r.status {
                RunnerStatus::Ok => (Status::Success, 0, None, false),
                RunnerStatus::Error => (
                    Status::Error,
                    1,
                    Some(format!(
                        "{} (the kernel and its state are kept)",
                        exception_line(&traceback)
                            .unwrap_or_else(|| "the cell raised an exception".into())
                    )),
                    false,
                ),
                RunnerStatus::Exit => {
                    let code = r.exit_code.unwrap_or(0);
                    kernel.ended = Some(true);
                    if code == 0 {
                        (Status::Success, 0, None, false)
                    } else {
                        (
                            Status::Error,
                            code,
                            Some(format!(
                                "the cell raised SystemExit({code}); the kernel ended and its state is gone, the next cell starts a fresh one"
                            )),
                            false,
                        )
                    }
                }
                RunnerStatus::Interrupted => {
                    kernel.state_kept = Some(true);
                    (
                        Status::Interrupted,
                        -1,
                        Some("the cell was interrupted (KeyboardInterrupt); the kernel and its state are kept".into()),
                        false,
                    )
                }
            }
        }
        Ending::TimedOutKept(r) => {
            take_runner(r);
            kernel.state_kept = Some(true);
            (
                Status::Timeout,
                -1,
                Some(format!(
                    "the cell ran past its {timeout_s}s timeout and was interrupted; the kernel and its state are kept"
                )),
                false,
            )
        }
        Ending::TimedOutKilled => {
            kernel.state_kept = Some(false);
            kernel.ended = Some(true);
            (
                Status::Timeout,
                -1,
                Some(format!(
                    "the cell ran past its {timeout_s}s timeout and did not stop within {grace_s}s of an interrupt, so the kernel was killed; all its state (variables, imports) is lost"
                )),
                true,
            )
        }
        Ending::InterruptedKept(r) => {
            take_runner(r);
            kernel.state_kept = Some(true);
            (
                Status::Interrupted,
                -1,
                Some("the cell was interrupted; the kernel and its state are kept".into()),
                false,
            )
        }
        Ending::InterruptedKilled => {
            kernel.state_kept = Some(false);
            kernel.ended = Some(true);
            (
                Status::Interrupted,
                -1,
                Some(format!(
                    "the cell was interrupted but did not stop within {grace_s}s, so the kernel was killed; all its state is lost"
                )),
                false,
            )
        }
        Ending::ShutDown => {
            kernel.state_kept = Some(false);
            kernel.ended = Some(true);
            (
                Status::Interrupted,
                -1,
                Some("the session was shut down while the cell ran; the kernel was killed and its state is lost".into()),
                false,
            )
        }
        Ending::Died { how } => {
            kernel.ended = Some(true);
            let tail = last_lines(&stderr.text, 5);
            let mut e = format!(
                "the kernel died during the cell ({how}); its state is lost and the next cell starts a fresh kernel"
            );
            if !tail.trim().is_empty() {
                e.push_str(&format!(". Last stderr lines:\n{tail}"));
            }
            (Status::Error, -1, Some(e), false)
        }
    };
    if !alive {
        kernel.ended = Some(true);
    }
    let budget_exhausted = tools
        .as_ref()
        .is_some_and(|t| t.refused(ErrorCode::BudgetExhausted) > 0);
    let tool_calls_made = tools
        .as_ref()
        .map_or(0, toolcell_rpc::CellReport::dispatched);

    let mut output = stdout.text.clone();
    if !stderr.text.is_empty() || !traceback.is_empty() {
        output.push_str("\n--- stderr ---\n");
        output.push_str(&stderr.text);
        if !traceback.is_empty() && !stderr.text.is_empty() && !stderr.text.ends_with('\n') {
            output.push('\n');
        }
        output.push_str(&cap_traceback(&traceback, opts.max_stderr_bytes));
    }
    let hint = if status == Status::Success {
        None
    } else {
        let mut cx = hint_cx();
        cx.stdin_requested = stdin_requested;
        cx.budget_exhausted = budget_exhausted;
        cx.max_tool_calls = max_tool_calls;
        cx.killed_by_timeout = killed_by_timeout;
        cx.killed_by_cpu_limit =
            matches!(&ending, Ending::Died { how } if how.contains("[limits] cpu_seconds"));
        hints::hint(&traceback, &cx)
    };
    let warning = [
        truncation_warning("stdout", &stdout),
        truncation_warning("stderr", &stderr),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>();
    ExecuteResult {
        status,
        output,
        exit_code,
        tool_calls_made,
        duration_seconds: round2(duration.as_secs_f64()),
        kernel,
        error,
        hint,
        warning: if warning.is_empty() {
            None
        } else {
            Some(warning.join(" "))
        },
        stdout_truncated: stdout.truncated,
        stdout_bytes_captured: stdout.bytes_captured,
        stdout_bytes_total: stdout.bytes_total,
        stdout_bytes_omitted: stdout.bytes_omitted,
        stdout_spill_path: stdout.spill_path.map(|p| p.display().to_string()),
        stdin_requested,
        usage,
        display,
    }
}
