//! [`RegistryOptions`]: what a configuration (docs/configuration.md) says a
//! registry does, and the default directories.

use std::path::PathBuf;
use std::time::Duration;

use regex::Regex;
use toolcell_stubs::{Mode, OnTimeout};
use toolcell_tools::WebSettings;

pub use crate::config::KernelMode;

/// The least [`RegistryOptions::watch_inotify_min_entries`] of a kernel
/// that runs one cell. Unwatched, its tree is scanned as it starts (beside
/// the interpreter's start) and again before and after the cell (~10 µs
/// an entry each): at 500 entries about 10 ms on the cell's path, under
/// the 15–25 ms closing an inotify instance costs. (The scan before the
/// cell stays: toolcell's own start, writing its caches, may touch the
/// tree, and that is not the cell's doing.)
pub const ONE_CELL_INOTIFY_MIN_ENTRIES: usize = 500;

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
    /// Explicit interpreter (empty: resolve by mode, as docs/configuration.md
    /// ("[execution]") and docs/mcp.md ("Setting it up") describe).
    pub python: String,
    /// The language of a cell that names none: docs/languages.md
    /// ("Choosing the language").
    pub language: toolcell_kernel::language::Language,
    /// The R interpreter (`Rscript`; empty: `Rscript` on `PATH`).
    pub r: String,
    /// The JavaScript interpreter (empty: `node` on `PATH`).
    pub node: String,
    /// What a timeout does.
    pub on_timeout: OnTimeout,
    /// Grace after SIGINT.
    pub interrupt_grace: Duration,
    /// Grace between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// Kernel processes at most, warm-pool kernels included.
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
    /// Report the files each cell created, modified and deleted under the
    /// kernel's working directory (the result's `files`).
    pub watch_files: bool,
    /// Entries (files and directories) one scan of a working directory
    /// records at most; beyond it changes are not reported.
    pub watch_max_entries: usize,
    /// A working directory of at most this many entries is rescanned after
    /// each cell instead of watched with inotify (0: always watch; see
    /// [`toolcell_kernel::watch::WatchSettings::inotify_min_entries`]). For hosts
    /// whose kernels run one cell (`toolcell exec`), where tearing the
    /// inotify instance down at the end costs more than a rescan; per-call
    /// kernels use at least [`ONE_CELL_INOTIFY_MIN_ENTRIES`].
    pub watch_inotify_min_entries: usize,
    /// Folding of repeated lines and long lines in cell output
    /// (`[output] fold`, `fold_min_run`, `fold_keep`, `max_line_chars`).
    pub fold: toolcell_kernel::fold::FoldOptions,
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
    pub limits: toolcell_kernel::limits::Limits,
    /// `[execution] confine`: Landlock-confine strict-mode kernels; cells in
    /// project mode are refused.
    pub confine: bool,
    /// `[sandbox]`: the sandbox every local kernel runs in. The registry
    /// adds toolcell's own directories (kernels, spill files, journal,
    /// configuration) to its hidden paths.
    pub sandbox: toolcell_kernel::sandbox::Policy,
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
    /// Only with the `journal` feature (on by default).
    #[cfg(feature = "journal")]
    pub journal: Option<crate::journal::Journal>,
    /// `[remotes.NAME]`: where kernels can run besides here
    /// (docs/configuration.md, "[remotes.NAME]").
    pub remotes: std::collections::BTreeMap<String, toolcell_kernel::remote::Remote>,
    /// Where this host records the remotes it starts allocations on, so a
    /// later host can sweep them if this one dies (`None`: no records). By
    /// default `$XDG_STATE_HOME/toolcell/remote-hosts`.
    pub remote_records: Option<PathBuf>,
    /// `[kernels] remote`: the remote of a request that names none; empty: local.
    pub remote: String,
    /// `[kernels] remote_files_cap`: bytes of the files (figures) a remote
    /// kernel's cells sent that are kept on this host at once, per kernel;
    /// past it a file is refused with a warning. 0: no cap. Default 64 MiB.
    pub remote_files_cap: u64,
    /// Local kernels take tool calls in-band (on the request pipe) instead
    /// of the socket. Off: the socket is faster locally (BENCHMARKS.md,
    /// issue 17); remote kernels always use the in-band channel.
    pub inband_tools: bool,
}

impl RegistryOptions {
    /// The remote called `name` (`""`: none, a local kernel), or a sentence
    /// saying it is not configured.
    pub(crate) fn remote_named(
        &self,
        name: &str,
    ) -> Result<Option<(String, std::sync::Arc<toolcell_kernel::remote::Remote>)>, String> {
        if name.is_empty() {
            return Ok(None);
        }
        match self.remotes.get(name) {
            Some(r) => Ok(Some((name.to_string(), std::sync::Arc::new(r.clone())))),
            None if self.remotes.is_empty() => Err(format!(
                "unknown remote \"{name}\": no remotes are configured (add a [remotes.{name}] table with `command` to toolcell.toml)"
            )),
            None => Err(format!(
                "unknown remote \"{name}\"; configured remotes: {}",
                self.remotes.keys().cloned().collect::<Vec<_>>().join(", ")
            )),
        }
    }

    /// Whether a remote called `name` is configured (`""`: here, always).
    ///
    /// # Errors
    /// A sentence naming the configured remotes.
    pub fn remote_named_public(&self, name: &str) -> Result<(), String> {
        self.remote_named(name).map(drop)
    }

    /// Whether results are journaled (always false without the `journal`
    /// feature).
    pub(crate) fn journaling(&self) -> bool {
        #[cfg(feature = "journal")]
        return self.journal.is_some();
        #[cfg(not(feature = "journal"))]
        false
    }
}

impl Default for RegistryOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs_f64(toolcell_stubs::DEFAULT_TIMEOUT_SECS),
            max_tool_calls: toolcell_stubs::DEFAULT_MAX_TOOL_CALLS,
            mode: Mode::Project,
            python: String::new(),
            language: toolcell_kernel::language::Language::Python,
            r: String::new(),
            node: String::new(),
            on_timeout: OnTimeout::Interrupt,
            interrupt_grace: Duration::from_secs_f64(toolcell_stubs::DEFAULT_INTERRUPT_GRACE_SECS),
            kill_grace: Duration::from_secs(2),
            max_kernels: 4,
            idle_timeout: Duration::from_secs(1800),
            max_stdout_bytes: toolcell_stubs::DEFAULT_MAX_STDOUT_BYTES,
            max_stderr_bytes: toolcell_stubs::DEFAULT_MAX_STDERR_BYTES,
            spill_dir: default_spill_dir(),
            spill_cap_bytes: 5_000_000,
            spill_retention: Some(Duration::from_secs(7 * 86_400)),
            spill_total_cap: Some(1 << 30),
            spill_prune_every: Duration::from_secs(3600),
            watch_files: true,
            watch_max_entries: toolcell_kernel::watch::DEFAULT_MAX_ENTRIES,
            watch_inotify_min_entries: 0,
            fold: toolcell_kernel::fold::FoldOptions::auto(),
            passthrough: Vec::new(),
            tools: crate::config::default_tools(),
            rpc_tcp: false,
            web: WebSettings::default(),
            kernel_mode: KernelMode::Session,
            deny: Vec::new(),
            default_cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            limits: toolcell_kernel::limits::Limits::default(),
            confine: false,
            sandbox: toolcell_kernel::sandbox::Policy::auto(),
            kernels_root: None,
            startup_timeout: Duration::from_secs(60),
            warm_pool: 0,
            #[cfg(feature = "journal")]
            journal: None,
            remotes: std::collections::BTreeMap::new(),
            remote_records: crate::lifecycle::default_records_dir(),
            remote: String::new(),
            remote_files_cap: DEFAULT_REMOTE_FILES_CAP,
            inband_tools: false,
        }
    }
}

impl RegistryOptions {
    /// The options a configuration file (docs/configuration.md) describes, for
    /// a host whose project-mode sessions default to `default_cwd`.
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
            language: config.execution.language,
            r: config.execution.r.clone(),
            node: config.execution.node.clone(),
            on_timeout: config.execution.on_timeout,
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
            watch_files: config.output.watch_files,
            watch_max_entries: config.output.watch_max_entries,
            watch_inotify_min_entries: 0,
            fold: match config.output.fold {
                config::Switch::Off => toolcell_kernel::fold::FoldOptions::off(),
                when => toolcell_kernel::fold::FoldOptions {
                    when: if when == config::Switch::On {
                        toolcell_kernel::fold::FoldWhen::Always
                    } else {
                        toolcell_kernel::fold::FoldWhen::OverCap
                    },
                    fold: true,
                    min_run: config.output.fold_min_run,
                    keep: config.output.fold_keep,
                    max_line_chars: usize::try_from(config.output.max_line_chars)
                        .unwrap_or(usize::MAX),
                },
            },
            passthrough: config.env.passthrough.clone(),
            tools: config.tools.enabled.clone(),
            rpc_tcp: config.rpc.transport == config::Transport::Tcp,
            web: config.web_settings(|name| std::env::var_os(name)),
            kernel_mode: config.execution.kernel_mode,
            deny: config.guard_deny()?,
            default_cwd,
            limits: config.limits(),
            confine: config.execution.confine,
            sandbox: config.sandbox_policy(&[]),
            kernels_root: None,
            startup_timeout: Duration::from_secs(60),
            warm_pool: 0,
            #[cfg(feature = "journal")]
            journal: None,
            remotes: config.remotes.clone(),
            remote_records: crate::lifecycle::default_records_dir(),
            remote: config.kernels.remote.clone(),
            remote_files_cap: config.kernels.remote_files_cap,
            inband_tools: false,
        })
    }
}

/// toolcell's own directories, hidden from sandboxed kernels: its
/// configuration, data (the journal) and cache (spill files), wherever the
/// environment puts them.
pub(super) fn toolcell_dirs() -> Vec<PathBuf> {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    let xdg = |var: &str, fallback: &str| {
        std::env::var_os(var)
            .filter(|x| !x.is_empty())
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(fallback)))
            .map(|d| d.join("toolcell"))
    };
    [
        xdg("XDG_CONFIG_HOME", ".config"),
        xdg("XDG_DATA_HOME", ".local/share"),
        xdg("XDG_CACHE_HOME", ".cache"),
        xdg("XDG_STATE_HOME", ".local/state"),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// `[kernels] remote_files_cap` by default: 64 MiB per kernel.
pub const DEFAULT_REMOTE_FILES_CAP: u64 = 64 << 20;

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
