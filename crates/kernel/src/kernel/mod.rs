//! One kernel: a child running the runner, its rpc server, its pipes, and
//! the execution of one cell at a time (docs/protocol.md; the output rules
//! of docs/result.md, "output").
//!
//! This file holds the kernel's types and its accessors; each phase of its
//! life is a file of its own: `spawn` (private directory, local or remote
//! launch, handshake), `transport` (the request channel and in-band tool
//! calls), `pump` (the stdout/stderr readers), `cell` (one `execute` to its
//! outcome) and `death` (interrupts, the tree kill, how it exited).

use crate::capture::{Capture, Captured, SpillTarget};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolcell_protocol::{CellResult, Decoder, Event, Execute, Hello, Reply, Request, Sentinel};
use toolcell_redact::{Cleaner, Redactor};
use toolcell_rpc::{CellReport, CellSpec, Dispatch, InbandCaller, Server, ServerConfig};
use toolcell_stubs::OnTimeout;
use toolcell_sys::private_dir::PrivateDir;
use toolcell_sys::process::Tree;
use toolcell_tools::DynTool;

mod cell;
mod death;
mod pump;
mod spawn;
mod transport;

pub use self::cell::last_lines;
pub use self::death::process_running;
pub use self::spawn::{private_dir, private_dir_or_reuse};
#[allow(clippy::wildcard_imports)]
use self::{cell::*, death::*, pump::*, spawn::*, transport::*};

/// The runner script (docs/protocol.md), written into each kernel's directory.
pub const RUNNER: &str = crate::language::RUNNER_PY;

/// Bytes read from a pipe at a time.
const READ_CHUNK: usize = 64 * 1024;

/// Events buffered between the pipe readers and the cell; when full, the
/// readers stop reading and the child blocks on its writes (bounded memory).
const EVENT_QUEUE: usize = 64;

/// Raw output kept from before `ready` (e.g. a `sitecustomize` print).
const EARLY_OUTPUT_CAP: usize = 64 * 1024;

/// Longest wait, before a cell starts, for output still in the pipes.
const SETTLE_LIMIT: Duration = Duration::from_millis(50);

/// Quiet time after which a held-back marker prefix is released as output.
const IDLE_RELEASE: Duration = Duration::from_millis(5);

/// How long a lifecycle remote's kernel waits, when it ends, for its
/// allocation's `stop` before its local command is killed.
const STOP_FIRST: Duration = Duration::from_secs(2);

/// How long, once that `stop` is done, the command has to end by itself.
const EXIT_AFTER_STOP: Duration = Duration::from_millis(500);

/// How long the `end` frame may lag behind the `result` frame.
const END_LAG: Duration = Duration::from_secs(2);

/// In-band tool calls running at once per kernel; past it the stdout
/// reader waits (the runner's threads block), nothing queues without bound.
const INBAND_CALLS: usize = 64;

/// Files (figures) a remote cell may send back.
const MAX_CELL_FILES: usize = 64;

/// Largest file a remote cell may send back (as `figures.rs` accepts).
const MAX_FILE_BYTES: usize = 16 << 20;

/// Longest a write to a kernel's request channel may go without moving a
/// byte before the channel is given up: a runner (or a remote) that stops
/// reading cannot hold a writer — an in-band tool reply, an `interrupt` —
/// for ever. The cell's own `execute` is bounded sooner, by the cell's
/// deadline (see [`Kernel::execute`]).
const WRITE_STALL: Duration = Duration::from_secs(30);

/// Which output stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamKind {
    /// fd 1.
    Stdout,
    /// fd 2.
    Stderr,
}

impl StreamKind {
    /// `stdout` or `stderr`.
    pub fn as_str(self) -> &'static str {
        match self {
            StreamKind::Stdout => "stdout",
            StreamKind::Stderr => "stderr",
        }
    }
}

/// Receives cleaned output chunks while a cell runs.
pub type LiveSink = Arc<dyn Fn(StreamKind, &str) + Send + Sync>;

/// Why a kernel could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// Setting up the kernel directory, pipes or process failed.
    #[error("cannot start the kernel: {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// The rpc server could not be bound.
    #[error("cannot start the kernel's tool server: {0}")]
    Rpc(#[from] toolcell_rpc::BindError),
    /// The stub module could not be generated.
    #[error("cannot generate the tool stub module: {0}")]
    Stub(#[from] toolcell_tools::names::StubError),
    /// The kernel did not start while `[limits]` were set (likely too low).
    #[error(
        "kernel failed to start under [limits] {limits} (a limit may be too low for the interpreter to start, or above the hard limit the host itself runs under): {source}"
    )]
    UnderLimits {
        /// The limits in force, `key = value, …`.
        limits: String,
        /// Why it did not start.
        source: Box<SpawnError>,
    },
    /// `[execution] confine = true` could not be applied.
    #[error("cannot confine the kernel: {0}")]
    Confine(#[from] crate::confine::ConfineError),
    /// The runner exited or misbehaved before saying `ready`.
    #[error("the kernel ({interpreter}) did not start: {reason}{}", stderr_suffix(.stderr))]
    NotReady {
        /// The interpreter used.
        interpreter: String,
        /// What happened.
        reason: String,
        /// The last lines it wrote to stderr.
        stderr: String,
    },
    /// No random bytes from the OS.
    #[error("cannot generate a sentinel: {0}")]
    Random(String),
    /// `[sandbox] mode = "required"` and the kernel could not be
    /// sandboxed (with `"auto"` it runs unsandboxed instead).
    #[error(
        "cannot sandbox the kernel: {reason} (set [sandbox] mode = \"auto\" to run kernels unsandboxed where the machine refuses a sandbox)"
    )]
    Sandbox {
        /// The step that failed and why.
        reason: String,
    },
    /// A remote kernel's command failed to connect or start the runner.
    #[error("cannot start a kernel on remote \"{remote}\": {reason}{}", remote_stderr_suffix(.stderr))]
    Remote {
        /// The remote's name.
        remote: String,
        /// What happened.
        reason: String,
        /// The last lines the command wrote to stderr.
        stderr: String,
    },
}

/// Everything needed to start one kernel.
#[derive(Clone)]
pub struct KernelSpec {
    /// Kernel id (also its directory name).
    pub id: String,
    /// The interpreter to launch (its real `sys.executable`).
    pub interpreter: PathBuf,
    /// Its version, for results.
    pub python_version: String,
    /// `project` or `strict`.
    pub mode: String,
    /// Working directory of the kernel.
    pub cwd: PathBuf,
    /// The scrubbed base environment (SECURITY.md,
    /// "Host secrets stay out of the kernel's environment"), without toolcell's
    /// own variables.
    pub env: Vec<(OsString, OsString)>,
    /// Directory under which the kernel's private directory is created.
    pub root: PathBuf,
    /// The enabled tools (for the stub module and the cell's allow-list).
    pub tools: Vec<Arc<dyn DynTool>>,
    /// Dispatches tool calls for this kernel.
    pub dispatch: Arc<dyn Dispatch>,
    /// The settings tool calls of this kernel run with (also for tools
    /// from outside the registry, see [`Kernel::use_extra_tools`]).
    pub tool_settings: Arc<toolcell_tools::ToolSettings>,
    /// Bind the rpc server on 127.0.0.1 instead of a Unix socket.
    pub rpc_tcp: bool,
    /// Cleans everything the kernel prints.
    pub redactor: Redactor,
    /// How long the runner may take to say `ready`.
    pub startup_timeout: Duration,
    /// `[limits]`, applied in the child before exec.
    pub limits: crate::limits::Limits,
    /// Confine the kernel with Landlock (`[execution] confine`): writes only
    /// beneath its private directory, `cwd` and the temp dir.
    pub confine: bool,
    /// Run the kernel on a remote (docs/tour.md,
    /// "Kernels on other machines: ssh, Docker, Kubernetes"): its name and how
    /// to reach it. `[limits]` and `confine` apply to local kernels only.
    pub remote: Option<(String, Arc<crate::remote::Remote>)>,
    /// Tool calls travel in-band on the request pipe instead of the socket
    /// (always so for a remote kernel).
    pub inband_tools: bool,
    /// The kernel's language (its runner, stubs and launch command).
    pub language: crate::language::Language,
    /// The session the kernel is for (`{session}` in a remote's commands;
    /// a warm-pool kernel's is `pool`).
    pub session: String,
    /// Runs a remote's `start` and `stop` ([`crate::remote::Allocator`]); needed
    /// for a remote with `start`.
    pub lifecycle: Option<Arc<dyn crate::remote::Allocator>>,
    /// Bytes of the files (figures) the kernel's cells sent as `file`
    /// frames that may be kept on this host at once (`[kernels]
    /// remote_files_cap`); 0: no cap.
    pub files_cap: u64,
    /// `[sandbox]`: the sandbox every local kernel runs in
    /// ([`crate::sandbox`]); [`crate::sandbox::Policy::off`] for none.
    pub sandbox: crate::sandbox::Policy,
    /// Why this kernel runs unsandboxed although the policy asked for a
    /// sandbox (`mode = "auto"` on a machine that refused one); set by
    /// [`Kernel::spawn`].
    pub sandbox_off: Option<String>,
}

impl KernelSpec {
    /// Whether tool calls travel in-band: a remote kernel, an R or
    /// JavaScript kernel, or `inband_tools`.
    fn tools_inband(&self) -> bool {
        self.inband_tools || self.remote.is_some() || self.language.inband()
    }
}

impl std::fmt::Debug for KernelSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelSpec")
            .field("id", &self.id)
            .field("interpreter", &self.interpreter)
            .field("mode", &self.mode)
            .field("cwd", &self.cwd)
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// The limits and hooks of one cell.
#[derive(Clone)]
pub struct CellOptions {
    /// Wall-clock limit.
    pub timeout: Duration,
    /// Tool-call budget.
    pub max_tool_calls: u32,
    /// What a timeout does.
    pub on_timeout: OnTimeout,
    /// How long an interrupted cell has to stop.
    pub interrupt_grace: Duration,
    /// Between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// Stdout bytes kept.
    pub max_stdout_bytes: usize,
    /// Stderr bytes kept.
    pub max_stderr_bytes: usize,
    /// Spill directory and per-file cap; `None` disables spilling.
    pub spill: Option<(PathBuf, u64)>,
    /// Cleaned chunks as they come.
    pub live: Option<LiveSink>,
    /// Folding of repeated and long lines before the cut.
    pub fold: crate::fold::FoldOptions,
    /// Fires to interrupt the cell (caller interrupt).
    pub interrupt: CancellationToken,
    /// A second token that interrupts the cell as `interrupt` does (a
    /// request's own cancel), watched beside it: no task links the two.
    pub cancel: Option<CancellationToken>,
}

impl std::fmt::Debug for CellOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CellOptions")
            .field("timeout", &self.timeout)
            .field("max_tool_calls", &self.max_tool_calls)
            .field("on_timeout", &self.on_timeout)
            .finish_non_exhaustive()
    }
}

impl Default for CellOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs_f64(toolcell_stubs::DEFAULT_TIMEOUT_SECS),
            max_tool_calls: toolcell_stubs::DEFAULT_MAX_TOOL_CALLS,
            on_timeout: OnTimeout::Interrupt,
            interrupt_grace: Duration::from_secs_f64(toolcell_stubs::DEFAULT_INTERRUPT_GRACE_SECS),
            kill_grace: Duration::from_secs(2),
            max_stdout_bytes: toolcell_stubs::DEFAULT_MAX_STDOUT_BYTES,
            max_stderr_bytes: toolcell_stubs::DEFAULT_MAX_STDERR_BYTES,
            spill: None,
            live: None,
            fold: crate::fold::FoldOptions::auto(),
            interrupt: CancellationToken::new(),
            cancel: None,
        }
    }
}

/// How the cell ended, from the host's point of view.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// The runner answered.
    Answered(CellResult),
    /// Timed out; the runner answered within the grace (state kept).
    TimedOutKept(CellResult),
    /// Timed out and the kernel was killed.
    TimedOutKilled,
    /// Interrupted by the caller; the runner answered.
    InterruptedKept(CellResult),
    /// Interrupted by the caller; no answer within the grace; killed.
    InterruptedKilled,
    /// The session was shut down (its kernel killed) while the cell ran.
    ShutDown,
    /// The kernel died during the cell.
    Died {
        /// e.g. "killed by signal 11 (SIGSEGV)" or "exited with status 3".
        how: String,
    },
}

/// Everything a cell produced.
#[derive(Debug)]
pub struct CellOutcome {
    /// How it ended.
    pub ending: Ending,
    /// Cleaned, captured stdout.
    pub stdout: Captured,
    /// Cleaned, captured stderr.
    pub stderr: Captured,
    /// Cleaned traceback (empty when none).
    pub traceback: String,
    /// The rpc call log of the cell (`None` if its tool authority could not
    /// be opened).
    pub tools: Option<CellReport>,
    /// Wall time.
    pub duration: Duration,
    /// Whether the kernel is still usable after the cell.
    pub alive: bool,
    /// Frames dropped because their id or body was wrong.
    pub protocol_errors: u32,
    /// The execution count the cell had (or would have had).
    pub execution_count: u64,
    /// Sentences for the result's `warning` (files refused).
    pub notices: Vec<String>,
}

/// A live kernel.
pub struct Kernel {
    spec: KernelSpec,
    /// The kernel's own cgroup, where the machine allows one: every process
    /// the cell starts stays in it, whatever it does to its session or
    /// environment, and dies with the kernel.
    cgroup: Option<toolcell_sys::cgroup::KernelCgroup>,
    /// Every process forked from the kernel since its spawn, where the host
    /// sees process events (root hosts): found and killed with the kernel
    /// even after leaving its cgroup.
    lineage: Option<Arc<toolcell_sys::lineage::Lineage>>,
    /// A sandboxed kernel's PID-namespace init ([`toolcell_sys::process::Tree::namespace`]).
    namespace: Option<Arc<toolcell_sys::pidfd::Pidfd>>,
    /// The fingerprint of the outside tools the stub module was last made
    /// for (0: none, the module written at spawn).
    stubs_for: u64,
    /// A new stub module to send with the next cell.
    pending_stubs: Option<String>,
    /// The outside tools of the current cells: their dispatcher and names.
    extra: Option<(Arc<dyn Dispatch>, Vec<String>)>,
    /// `/proc/<pid>/task/<pid>/stat`, kept open: read before each cell to notice a
    /// kernel that died between cells (one `pread`, no path lookup).
    proc_stat: Option<std::fs::File>,
    /// When the runner started (`/proc` clock ticks), for [`Kernel::tree`].
    started: Option<u64>,
    /// What the kernel runs in (`kernel.sandbox` of every result).
    sandbox: crate::sandbox::SandboxInfo,
    /// The proxy of its network rule, while it lives.
    _proxy: Option<crate::sandbox::Proxy>,
    dir: PathBuf,
    child: tokio::process::Child,
    pid: u32,
    requests: Arc<RequestPipe>,
    events: mpsc::Receiver<Ev>,
    server: Server,
    sentinel_marker_env: String,
    early: Vec<(StreamKind, Vec<u8>)>,
    eof: [bool; 2],
    execution_count: u64,
    dead: bool,
    tool_names: Vec<String>,
    python: String,
    owned_cwd: Option<PathBuf>,
    watch: Vec<OwnedFd>,
    /// The files of its working directory after its last cell (docs/result.md,
    /// "files").
    files: Option<Box<crate::watch::Watcher>>,
    pumps_busy: Arc<AtomicUsize>,
    /// Bytes of the files cells sent (`file` frames) kept in the
    /// artifacts directory now, under [`KernelSpec::files_cap`].
    files_kept: u64,
    /// The files the last cell sent that its result lists (name, bytes),
    /// until [`Kernel::keep_files`] says which the host kept.
    cell_files: Vec<(String, u64)>,
    /// A lifecycle remote's allocation: dropped last, after the kernel and
    /// its command are gone, which runs the remote's `stop`.
    allocation: Option<Box<dyn crate::remote::Allocation>>,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel")
            .field("id", &self.spec.id)
            .field("pid", &self.pid)
            .field("dir", &self.dir)
            .field("execution_count", &self.execution_count)
            .field("dead", &self.dead)
            .finish_non_exhaustive()
    }
}

impl Kernel {
    /// Makes `dir` (a private working directory) belong to the kernel: it
    /// is removed with the kernel.
    pub fn set_owned_cwd(&mut self, dir: Option<PathBuf>) {
        self.owned_cwd = dir;
    }

    /// The kernel's working directory.
    pub fn cwd(&self) -> &Path {
        &self.spec.cwd
    }

    /// What host tools read for cell `cell_id` (`files.read`): absolute
    /// paths in the order read, and how many more; the log is emptied.
    pub fn take_tool_reads(&self, cell_id: &str) -> (Vec<std::path::PathBuf>, u64) {
        self.spec.tool_settings.reads.take(cell_id)
    }

    /// Takes the watcher of the kernel's working directory (put back after
    /// the cell with [`Kernel::put_files_watcher`]).
    pub fn take_files_watcher(&mut self) -> Option<Box<crate::watch::Watcher>> {
        self.files.take()
    }

    /// Keeps `w` for the next cell.
    pub fn put_files_watcher(&mut self, w: Option<Box<crate::watch::Watcher>>) {
        self.files = w;
    }

    /// The kernel's id.
    pub fn id(&self) -> &str {
        &self.spec.id
    }

    /// The runner's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// What the kernel runs in: its sandbox, or why it has none
    /// (`kernel.sandbox` of every result).
    pub fn sandbox(&self) -> &crate::sandbox::SandboxInfo {
        &self.sandbox
    }

    /// The kernel's private directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The interpreter's version (from `ready`).
    pub fn python(&self) -> &str {
        &self.python
    }

    /// `project` or `strict`.
    pub fn mode(&self) -> &str {
        &self.spec.mode
    }

    /// Cells run so far.
    pub fn execution_count(&self) -> u64 {
        self.execution_count
    }

    /// False once the kernel died, exited or was killed.
    pub fn is_alive(&self) -> bool {
        !self.dead
    }

    /// The rpc endpoint (`TOOLCELL_RPC`).
    pub fn rpc_endpoint(&self) -> &str {
        self.server.endpoint()
    }

    /// The kernel's language.
    pub fn language(&self) -> crate::language::Language {
        self.spec.language
    }

    /// The allocation (container, job, pod) of a lifecycle remote this
    /// kernel runs in: the id its `start` printed.
    pub fn allocation_id(&self) -> Option<&str> {
        self.allocation.as_ref().map(|a| a.id())
    }

    /// The remote this kernel runs on (`None`: local).
    pub fn remote(&self) -> Option<&str> {
        self.spec.remote.as_ref().map(|(n, _)| n.as_str())
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        // Closing the request channel (fd 3, or a remote kernel's stdin)
        // makes the runner kill its group (an in-band tool reply in flight
        // may hold the pipe: close it for everyone); do it ourselves too.
        self.requests.close();
        if self.pid != 0 && !self.dead {
            self.tree().signal(Signal::SIGKILL);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(d) = self.owned_cwd.take() {
            let _ = std::fs::remove_dir_all(d);
        }
        // Closing an inotify instance waits for a kernel grace period
        // (15–25 ms): not on a runtime worker, where it would stall every
        // task queued there.
        if let Some(w) = self.files.take().filter(|w| w.watching())
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn_blocking(move || drop(w));
        }
    }
}
