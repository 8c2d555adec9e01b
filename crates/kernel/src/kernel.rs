//! One kernel: a Python child running the runner, its rpc server, its pipes,
//! and the execution of one cell at a time (docs/protocol.md; the output rules
//! of docs/result.md, "output").

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use toolcell_sys::private_dir::PrivateDir;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolcell_protocol::{CellResult, Decoder, Event, Execute, Hello, Reply, Request, Sentinel};
use toolcell_redact::{Cleaner, Redactor};
use toolcell_rpc::{CellReport, CellSpec, Dispatch, InbandCaller, Server, ServerConfig};
use toolcell_stubs::OnTimeout;
use toolcell_sys::process::Tree;
use toolcell_tools::DynTool;

use crate::capture::{Capture, Captured, SpillTarget};

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

/// The request channel to the runner (fd 3 for a local Python kernel,
/// stdin for a remote, R or JavaScript kernel). Writers take turns:
/// `execute`, `interrupt`, `shutdown` and in-band tool replies never
/// interleave within a line.
pub(crate) struct RequestPipe {
    w: tokio::sync::Mutex<Option<Box<dyn tokio::io::AsyncWrite + Send + Unpin>>>,
}

impl RequestPipe {
    fn new(w: impl tokio::io::AsyncWrite + Send + Unpin + 'static) -> Arc<Self> {
        Arc::new(Self {
            w: tokio::sync::Mutex::new(Some(Box::new(w))),
        })
    }

    /// Writes one whole request (or the bootstrap payload).
    ///
    /// The writer is out of the channel while it writes and goes back only
    /// once the whole line is written: a write that fails, that stalls for
    /// [`WRITE_STALL`], or whose future is dropped half-way (a caller's
    /// timeout, a cell that gave up) may have left part of a line, so the
    /// channel is closed instead — the runner sees EOF and ends, and no
    /// later request is read glued to a torn one.
    pub(crate) async fn send(&self, bytes: &[u8]) -> std::io::Result<()> {
        self.send_within(bytes, Some(WRITE_STALL)).await
    }

    /// [`RequestPipe::send`] with `stall` as the bound on a write that moves
    /// nothing (`None`: no bound of its own; the caller bounds it, as a
    /// cell's `execute` is by the cell's deadline).
    async fn send_within(&self, bytes: &[u8], stall: Option<Duration>) -> std::io::Result<()> {
        let mut g = self.w.lock().await;
        let Some(mut w) = g.take() else {
            return Err(std::io::ErrorKind::BrokenPipe.into());
        };
        let stalled = |limit: Duration| {
            tracing::warn!(
                "a kernel read nothing of a request for {limit:?}; its request channel is closed"
            );
            std::io::Error::from(std::io::ErrorKind::TimedOut)
        };
        let mut rest = bytes;
        while !rest.is_empty() {
            let wrote = match stall {
                Some(limit) => tokio::time::timeout(limit, w.write(rest))
                    .await
                    .map_err(|_| stalled(limit))?,
                None => w.write(rest).await,
            };
            match wrote {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => rest = rest.get(n..).unwrap_or_default(),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        match stall {
            Some(limit) => tokio::time::timeout(limit, w.flush())
                .await
                .map_err(|_| stalled(limit))??,
            None => w.flush().await?,
        }
        *g = Some(w);
        Ok(())
    }

    /// Closes the channel (the runner sees EOF and kills its group). A
    /// write in progress (a stalled remote) keeps it; killing the command
    /// ends that write.
    fn close(&self) {
        if let Ok(mut g) = self.w.try_lock() {
            *g = None;
        }
    }
}

/// Runs the `tool_call` frames a runner sends in-band: docs/protocol.md
/// ("Remote kernels: the same protocol over a command's stdio").
#[derive(Clone)]
struct Inband {
    caller: InbandCaller,
    pipe: Arc<RequestPipe>,
    slots: Arc<tokio::sync::Semaphore>,
}

#[derive(serde::Deserialize)]
struct ToolCallFrame {
    id: u64,
    tool: String,
    #[serde(default)]
    args: serde_json::Value,
}

impl Inband {
    /// Takes a `tool_call` frame: checks and dispatches it through the rpc
    /// server's in-band caller, then writes the `tool_reply` line.
    async fn take(&self, body: &[u8]) {
        let call: ToolCallFrame = match serde_json::from_slice(body) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("dropped an unreadable tool_call frame: {e}");
                return;
            }
        };
        let Ok(permit) = Arc::clone(&self.slots).acquire_owned().await else {
            return;
        };
        let this = self.clone();
        tokio::spawn(async move {
            let reply = this.caller.call(&call.tool, call.args).await;
            let mut line = Vec::with_capacity(reply.len() + 48);
            line.extend_from_slice(b"{\"type\":\"tool_reply\",\"id\":");
            line.extend_from_slice(call.id.to_string().as_bytes());
            line.extend_from_slice(b",\"reply\":");
            line.extend_from_slice(&reply);
            line.extend_from_slice(b"}\n");
            let _ = this.pipe.send(&line).await;
            drop(permit);
        });
    }
}

fn is_frame_of(body: &[u8], kind: &str) -> bool {
    body.strip_prefix(b"{\"type\":\"")
        .and_then(|rest| rest.strip_prefix(kind.as_bytes()))
        .is_some_and(|rest| rest.first() == Some(&b'"'))
}

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

#[derive(Debug)]
enum Ev {
    Raw(StreamKind, Vec<u8>),
    Frame(StreamKind, Vec<u8>),
    Eof(StreamKind),
}

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

fn remote_stderr_suffix(s: &str) -> String {
    if s.trim().is_empty() {
        String::new()
    } else {
        format!("; the command's stderr ended with:\n{}", s.trim_end())
    }
}

fn stderr_suffix(s: &str) -> String {
    if s.trim().is_empty() {
        String::new()
    } else {
        format!("; its stderr ended with:\n{}", s.trim_end())
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SpawnError {
    let what = what.into();
    move |source| SpawnError::Io { what, source }
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
    /// Run the kernel on a remote (README.md,
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

/// Until `interrupt` or `cancel` fires.
async fn interrupted(interrupt: &CancellationToken, cancel: Option<&CancellationToken>) {
    match cancel {
        Some(c) => tokio::select! {
            () = interrupt.cancelled() => {}
            () = c.cancelled() => {}
        },
        None => interrupt.cancelled().await,
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

fn idx(s: StreamKind) -> usize {
    match s {
        StreamKind::Stdout => 0,
        StreamKind::Stderr => 1,
    }
}

/// One side (stdout or stderr) of a kernel's output, read by [`pump`].
struct Side {
    which: StreamKind,
    fd: Option<tokio::io::unix::AsyncFd<OwnedFd>>,
    dec: Decoder,
    /// When the bytes the decoder holds back are released as output.
    release_at: Option<Instant>,
}

impl Side {
    fn new(fd: Option<OwnedFd>, which: StreamKind, sentinel: &Sentinel) -> Self {
        Self {
            which,
            fd: fd.and_then(|fd| {
                // tokio hands the pipe back in blocking mode.
                use nix::fcntl::{FcntlArg, OFlag, fcntl};
                let flags = OFlag::from_bits_truncate(fcntl(&fd, FcntlArg::F_GETFL).ok()?);
                fcntl(&fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK)).ok()?;
                // SAFETY: `fd` is an `OwnedFd` moved into the AsyncFd, which
                // owns it until it is dropped; nothing else closes it.
                unsafe { tokio::io::unix::AsyncFd::register(fd) }.ok()
            }),
            dec: Decoder::new(sentinel),
            release_at: None,
        }
    }
}

impl Side {
    /// The pipe ended (or failed): what the decoder holds is output.
    fn close(&mut self, batch: &mut Vec<Ev>) {
        self.fd = None;
        self.release_at = None;
        if let Some(ev) = self.dec.finish() {
            batch.push(Ev::Raw(self.which, ev.bytes().to_vec()));
        }
        batch.push(Ev::Eof(self.which));
    }
}

/// What a non-blocking read of one side gave.
enum Got {
    Bytes(usize),
    Nothing,
    Eof,
}

fn read_now(fd: &tokio::io::unix::AsyncFd<OwnedFd>, buf: &mut [u8]) -> Got {
    loop {
        match nix::unistd::read(fd.get_ref(), buf) {
            Ok(0) => return Got::Eof,
            Ok(n) => return Got::Bytes(n),
            Err(nix::errno::Errno::EINTR) => {}
            Err(nix::errno::Errno::EAGAIN) => return Got::Nothing,
            Err(_) => return Got::Eof,
        }
    }
}

/// Reads a kernel's stdout and stderr pipes, decodes their frames, and sends
/// the events to the kernel's channel, until both pipes reach EOF.
///
/// One task reads both pipes, and after every wake-up it reads whatever is
/// ready on either before it sends and sleeps again: the `end` frame
/// (stderr) and the `result` frame (stdout) a runner writes back to back
/// cost one wake-up of this task and one of the cell's, not two each.
async fn pump(
    out: Option<OwnedFd>,
    err: Option<OwnedFd>,
    sentinel: Sentinel,
    tx: mpsc::Sender<Ev>,
    busy: Arc<AtomicUsize>,
    inband: Option<Inband>,
) {
    let mut sides = [
        Side::new(out, StreamKind::Stdout, &sentinel),
        Side::new(err, StreamKind::Stderr, &sentinel),
    ];
    let mut buf = vec![0u8; READ_CHUNK];
    let mut batch: Vec<Ev> = Vec::new();
    while sides.iter().any(|s| s.fd.is_some()) {
        // Read every side until neither has anything (a chunk per side per
        // round, so one busy pipe cannot starve the other or hold a batch).
        let mut read_any = false;
        for side in &mut sides {
            let Some(fd) = &side.fd else { continue };
            match read_now(fd, &mut buf) {
                Got::Nothing => {}
                Got::Bytes(n) => {
                    read_any = true;
                    // Read from the pipe but not yet in the channel: a cell
                    // about to start waits for this to reach zero (see
                    // `Kernel::execute`).
                    busy.fetch_add(1, Ordering::SeqCst);
                    let mut raw: Vec<u8> = Vec::new();
                    for ev in side.dec.feed(&buf[..n]) {
                        match ev {
                            Event::Frame(body) => {
                                if !raw.is_empty() {
                                    batch.push(Ev::Raw(side.which, std::mem::take(&mut raw)));
                                }
                                if let Some(ib) = &inband
                                    && side.which == StreamKind::Stdout
                                    && is_frame_of(&body, "tool_call")
                                {
                                    ib.take(&body).await;
                                    continue;
                                }
                                batch.push(Ev::Frame(side.which, body));
                            }
                            other => raw.extend_from_slice(other.bytes()),
                        }
                    }
                    if !raw.is_empty() {
                        batch.push(Ev::Raw(side.which, raw));
                    }
                    // Output ending in `\n` leaves the decoder holding it (it
                    // could start a frame marker). The runner writes every
                    // frame header atomically, so if nothing follows within
                    // IDLE_RELEASE it is plain output: release it then, and
                    // live output is not a line behind.
                    side.release_at = side
                        .dec
                        .scan_held()
                        .is_some_and(|h| h > 0)
                        .then(|| Instant::now() + IDLE_RELEASE);
                }
                Got::Eof => {
                    read_any = true;
                    busy.fetch_add(1, Ordering::SeqCst);
                    side.close(&mut batch);
                }
            }
        }
        if read_any {
            for ev in batch.drain(..) {
                if tx.send(ev).await.is_err() {
                    busy.store(0, Ordering::SeqCst);
                    return;
                }
            }
            // Every chunk read this round is in the channel now.
            busy.store(0, Ordering::SeqCst);
            continue;
        }
        let release_at = sides.iter().filter_map(|s| s.release_at).min();
        let [a, b] = &mut sides;
        tokio::select! {
            // Readiness is cleared before the next round reads, so data
            // arriving after that read wakes us again.
            r = async { a.fd.as_ref()?.readable().await.ok() }, if a.fd.is_some() => {
                if let Some(mut g) = r { g.clear_ready(); } else { a.close(&mut batch); }
            }
            r = async { b.fd.as_ref()?.readable().await.ok() }, if b.fd.is_some() => {
                if let Some(mut g) = r { g.clear_ready(); } else { b.close(&mut batch); }
            }
            () = async {
                if let Some(t) = release_at { tokio::time::sleep_until(t).await }
            }, if release_at.is_some() => {
                let now = Instant::now();
                for side in &mut sides {
                    if side.release_at.is_some_and(|t| t <= now) {
                        side.release_at = None;
                        if let Some(ev) = side.dec.release_held()
                            && tx.send(Ev::Raw(side.which, ev.bytes().to_vec())).await.is_err()
                        {
                            return;
                        }
                    }
                }
            }
        }
    }
}

/// Creates `dir` with mode 0700 (missing parents too), after checking that
/// no other user can swap it or any of its ancestors (see
/// [`toolcell_sys::private_dir`]); the error says which path is unsafe and why.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    PrivateDir::ensure(dir)
        .map(drop)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::PermissionDenied, e.to_string()))
}

/// [`private_dir`] for a default location under a shared parent that later
/// processes must find again: when another user made `dir` first, the
/// first private `<parent>/<prefix>XXXXXX` of ours, else a fresh one (see
/// [`PrivateDir::ensure_or_reuse`]). Returns the directory used.
pub fn private_dir_or_reuse(dir: &Path, parent: &Path, prefix: &str) -> std::io::Result<PathBuf> {
    PrivateDir::ensure_or_reuse(dir, parent, prefix)
        .map(|(d, _)| d.path().to_path_buf())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::PermissionDenied, e.to_string()))
}

/// Creates `name` in `dir` (0600, `O_EXCL | O_NOFOLLOW`) with `text`, and
/// returns it open for reading from the start.
fn write_in(dir: &PrivateDir, name: &str, text: &str) -> std::io::Result<std::fs::File> {
    use std::io::{Seek, Write};
    let mut f = dir
        .create_file(name)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    f.write_all(text.as_bytes())?;
    f.rewind()?;
    Ok(f)
}

fn signal_name(sig: i32) -> String {
    Signal::try_from(sig).map_or_else(
        |_| format!("signal {sig}"),
        |s| format!("signal {sig} ({s})"),
    )
}

impl Kernel {
    /// Starts a kernel and waits for the runner's `ready`.
    ///
    /// # Errors
    /// [`SpawnError`] saying what failed; nothing is left behind.
    pub async fn spawn(spec: KernelSpec) -> Result<Kernel, SpawnError> {
        let limits = spec.limits;
        Self::spawn_inner(spec).await.map_err(|e| match e {
            SpawnError::NotReady { .. } | SpawnError::Io { .. } if !limits.is_empty() => {
                SpawnError::UnderLimits {
                    limits: limits.describe(),
                    source: Box::new(e),
                }
            }
            e => e,
        })
    }

    async fn spawn_inner(spec: KernelSpec) -> Result<Kernel, SpawnError> {
        // The root is walked and verified on every spawn (ours, 0700, no
        // link another user planted), and everything below it is made
        // through directory fds: nothing is re-resolved by path between the
        // check and the use (see `toolcell_sys::private_dir`).
        let root = PrivateDir::ensure(&spec.root).map_err(|e| SpawnError::Io {
            what: "opening the kernels root".into(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let dir_handle = root.create_dir(&spec.id).map_err(|e| SpawnError::Io {
            what: "creating the kernel directory".into(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let dir = dir_handle.path().to_path_buf();
        // From here on, a failure must remove the directory.
        let cleanup = DirGuard(Some(dir.clone()));
        write_in(&dir_handle, "owner.pid", &std::process::id().to_string())
            .map_err(io_err("writing owner.pid"))?;
        let stub = spec.language.stub_source(&spec.tools, &[])?;
        // A remote with a lifecycle: its allocation first (stopped again if
        // anything below fails: dropping it runs `stop`).
        let mut allocation = None;
        // The remote's working directory, placeholders filled in.
        let mut remote_cwd = String::new();
        let launched = match spec.remote.clone() {
            Some((name, remote)) if remote.has_lifecycle() => {
                let alloc = Self::allocate(&spec, &name, &remote).await?;
                let bound = remote.bound(&alloc.vars());
                allocation = Some(alloc);
                remote_cwd.clone_from(&bound.cwd);
                Self::launch_remote(&spec, &dir, &name, &bound, &stub)?
            }
            Some((name, remote)) => {
                remote_cwd.clone_from(&remote.cwd);
                Self::launch_remote(&spec, &dir, &name, &remote, &stub)?
            }
            None => Self::launch_local(&spec, &dir, &dir_handle, &stub).await?,
        };
        let Launched {
            mut child,
            pid,
            requests,
            server,
            cgroup,
            lineage,
            marker,
            payload,
        } = launched;

        let sentinel = Sentinel::generate().map_err(|e| SpawnError::Random(e.to_string()))?;
        let (tx, events) = mpsc::channel(EVENT_QUEUE);
        // Our own duplicates of the read ends, only to ask how many bytes
        // wait in each pipe (FIONREAD) before a cell starts.
        let mut watch: Vec<OwnedFd> = Vec::new();
        let inband = spec.tools_inband().then(|| Inband {
            caller: server.inband(),
            pipe: Arc::clone(&requests),
            slots: Arc::new(tokio::sync::Semaphore::new(INBAND_CALLS)),
        });
        let busy = Arc::new(AtomicUsize::new(0));
        // The pipes leave tokio's process types for raw non-blocking fds,
        // which the one reader polls itself (see `pump`).
        let out = child.stdout.take().and_then(|p| p.into_owned_fd().ok());
        let err = child.stderr.take().and_then(|p| p.into_owned_fd().ok());
        for fd in [&out, &err].into_iter().flatten() {
            if let Ok(d) = nix::unistd::dup(fd) {
                watch.push(d);
            }
        }
        tokio::spawn(pump(
            out,
            err,
            sentinel.clone(),
            tx,
            Arc::clone(&busy),
            inband,
        ));
        let tool_names = spec.tools.iter().map(|t| t.name().to_string()).collect();
        let mut kernel = Kernel {
            dir: dir.clone(),
            child,
            pid,
            requests,
            events,
            sentinel_marker_env: marker,
            server,
            early: Vec::new(),
            eof: [false; 2],
            execution_count: 0,
            dead: false,
            tool_names,
            python: spec.python_version.clone(),
            owned_cwd: None,
            files: None,
            watch,
            pumps_busy: busy,
            spec,
            cgroup,
            lineage,
            stubs_for: 0,
            pending_stubs: None,
            extra: None,
            // The leader thread's own stat: the process-wide one sums every
            // thread's times on each read (~10 µs for a Python kernel).
            proc_stat: std::fs::File::open(format!("/proc/{pid}/task/{pid}/stat")).ok(),
            started: toolcell_sys::process::start_time(pid),
            files_kept: 0,
            cell_files: Vec::new(),
            allocation,
        };
        let hello = Request::Hello(Hello {
            sentinel: sentinel.as_str().to_string(),
            protocol: toolcell_protocol::PROTOCOL_VERSION,
            inband_tools: kernel.spec.tools_inband(),
            cwd: (!remote_cwd.is_empty()).then_some(remote_cwd),
        });
        kernel.handshake(&payload, &hello).await?;
        std::mem::forget(cleanup);
        Ok(kernel)
    }

    /// Runs the remote's `start` (on the blocking pool) for this kernel.
    async fn allocate(
        spec: &KernelSpec,
        name: &str,
        remote: &Arc<crate::remote::Remote>,
    ) -> Result<Box<dyn crate::remote::Allocation>, SpawnError> {
        let Some(lc) = spec.lifecycle.clone() else {
            return Err(SpawnError::Remote {
                remote: name.to_string(),
                reason: "it has a `start` command, but this host runs no remote lifecycle".into(),
                stderr: String::new(),
            });
        };
        let (n, r, session) = (name.to_string(), Arc::clone(remote), spec.session.clone());
        let started = tokio::task::spawn_blocking(move || lc.start(&n, &r, &session))
            .await
            .map_err(|e| SpawnError::Remote {
                remote: name.to_string(),
                reason: format!("its start command could not be run: {e}"),
                stderr: String::new(),
            })?;
        started.map_err(|f| SpawnError::Remote {
            remote: name.to_string(),
            reason: f.reason,
            stderr: f.stderr,
        })
    }

    /// Starts a remote kernel's command (docs/protocol.md,
    /// "Remote kernels: the same protocol over a command's stdio"):
    /// `command + [python, "-u", "-c", BOOTSTRAP]`, stdin the request channel,
    /// in its own session so its whole tree can be killed. The bootstrap
    /// payload (runner and stub module) goes first on stdin. `[limits]` and
    /// `confine` are not applied: they would bind the local command, not the
    /// remote.
    fn launch_remote(
        spec: &KernelSpec,
        dir: &Path,
        name: &str,
        remote: &crate::remote::Remote,
        stub: &str,
    ) -> Result<Launched, SpawnError> {
        let _ = dir;
        // No socket: tool calls come in-band, checked by the same server.
        let server = Server::unbound(Arc::clone(&spec.dispatch), ServerConfig::default())?;
        let argv = remote.argv_for(spec.language);
        let marker = format!("remote:{}", spec.id);
        let mut cmd = std::process::Command::new(&argv[0]);
        // The command is the user's own (ssh, docker, kubectl): it gets the
        // host's environment (SSH_AUTH_SOCK, KUBECONFIG, DOCKER_HOST…);
        // the remote's environment is its own.
        cmd.args(&argv[1..])
            .current_dir(&spec.cwd)
            .env("TOOLCELL_REMOTE_KERNEL", &marker)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                nix::unistd::setsid().map_err(std::io::Error::from)?;
                Ok(())
            });
        }
        let mut child = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| SpawnError::Remote {
                remote: name.to_string(),
                reason: format!("cannot run {:?}: {e}", argv[0]),
                stderr: String::new(),
            })?;
        let pid = child.id().unwrap_or(0);
        let Some(stdin) = child.stdin.take() else {
            return Err(SpawnError::Remote {
                remote: name.to_string(),
                reason: "its stdin could not be opened".into(),
                stderr: String::new(),
            });
        };
        Ok(Launched {
            child,
            pid,
            requests: RequestPipe::new(stdin),
            server,
            cgroup: None,
            lineage: None,
            marker,
            payload: crate::remote::payload(spec.language.runner().1, stub),
        })
    }

    /// Starts the runner here, in its own session and cgroup. Python:
    /// `python -u -c BOOTSTRAP <dir>/runner.py`, fd 3 the request pipe, fd 4
    /// the runner. R and JavaScript: the in-band bootstrap with the kernel
    /// directory as its argument, stdin the request pipe (the runner and
    /// stub module go first, as for a remote), no tool socket.
    async fn launch_local(
        spec: &KernelSpec,
        dir: &Path,
        dir_handle: &PrivateDir,
        stub: &str,
    ) -> Result<Launched, SpawnError> {
        // A Python runner is launched from this open file (fd 4 of the
        // child), never from its path: a file swapped in after the check is
        // never what runs. R and JavaScript runners (in-band) get the runner
        // and the stub module on stdin instead, and requests after them: no
        // file at all.
        let inband = spec.language.inband();
        let (runner_name, runner_source) = spec.language.runner();
        let runner = if inband {
            None
        } else {
            let stub_name = spec.language.stub_file();
            write_in(dir_handle, stub_name, stub)
                .map_err(io_err(format!("writing {stub_name}")))?;
            Some(
                write_in(dir_handle, runner_name, runner_source)
                    .map_err(io_err(format!("writing {runner_name}")))?,
            )
        };
        let dir = dir.to_path_buf();
        let mut cgroup = match toolcell_sys::cgroup::HostCgroup::get() {
            Some(host) => Some(host.kernel(&spec.id).map_err(io_err(
                "creating the kernel's cgroup (set TOOLCELL_CGROUP=off to do without)",
            ))?),
            None => None,
        };
        // Only this kernel and its descendants may use its tool socket:
        // another kernel holding a stolen token may not, even after moving
        // itself into this kernel's cgroup (root hosts can). The kernel's
        // pid and lineage are known once it is spawned, before it runs code.
        let family: Arc<std::sync::OnceLock<Family>> = Arc::default();
        let rpc_config = {
            let family = Arc::clone(&family);
            let config =
                ServerConfig::default().peer_check(toolcell_rpc::PeerCheck::new(move |pid| {
                    family
                        .get()
                        .is_some_and(|f| u32::try_from(pid).is_ok_and(|p| f.admits(p)))
                }));
            match &cgroup {
                Some(cg) => config.peer_cgroup(cg.proc_path()),
                None => config,
            }
        };
        let server = if inband {
            // No socket: tool calls come in-band, checked by the same server.
            Server::unbound(Arc::clone(&spec.dispatch), ServerConfig::default())?
        } else if spec.rpc_tcp {
            Server::bind_tcp(Arc::clone(&spec.dispatch), ServerConfig::default())?
        } else {
            Server::bind_unix(&dir, Arc::clone(&spec.dispatch), rpc_config)?
        };
        let mut env = spec.env.clone();
        let marker = if inband {
            // Only the marker every descendant carries (see `Kernel::tree`).
            let marker = format!("inband:{}", spec.id);
            env.retain(|(k, _)| k != "TOOLCELL_RPC" && k != "TOOLCELL_RPC_TOKEN");
            env.push(("TOOLCELL_RPC".into(), marker.clone().into()));
            marker
        } else {
            crate::env::toolcell_vars(&mut env, &dir, server.endpoint(), server.token().expose());
            server.endpoint().to_string()
        };

        let (req_r, req_w) = if inband {
            (None, None)
        } else {
            let (r, w) =
                nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| SpawnError::Io {
                    what: "creating the request pipe".into(),
                    source: e.into(),
                })?;
            (Some(r), Some(w))
        };
        // The runner compiled once by this interpreter, when remembered.
        let code = (runner.is_some() && spec.language == crate::language::Language::Python)
            .then(|| crate::interpreter::runner_code(&spec.interpreter, runner_source))
            .flatten();
        let mut cmd = std::process::Command::new(&spec.interpreter);
        cmd.args(spec.language.launch_args(&dir.join(runner_name)));
        if code.is_some() {
            cmd.arg("code");
        }
        cmd.current_dir(&spec.cwd)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(if inband {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let fds = req_r
            .as_ref()
            .map(AsRawFd::as_raw_fd)
            .zip(runner.as_ref().map(AsRawFd::as_raw_fd));
        let code_fd = code.as_ref().map(AsRawFd::as_raw_fd);
        // Landlock and seccomp: the ruleset and the filter are built here
        // (they open directories, allocate); the child only enforces them.
        // They live until the child has exec'd.
        let confinement = if spec.confine {
            let writable = vec![dir.clone(), spec.cwd.clone(), std::env::temp_dir()];
            Some(crate::confine::Confinement::prepare(&writable)?)
        } else {
            None
        };
        let child_confinement = confinement
            .as_ref()
            .map(crate::confine::Confinement::for_child);
        let limits = spec.limits;
        // SAFETY: only async-signal-safe calls (dup2, fcntl, setsid,
        // setrlimit, sigaction, prctl, landlock_restrict_self, seccomp) run
        // between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                limits.apply_in_child()?;
                if let Some(c) = &child_confinement {
                    c.restrict()?;
                }
                // Move both to high fds first (close-on-exec), so neither
                // dup2 below can clobber the other; dup2 onto 3 and 4 then
                // clears close-on-exec on the targets only.
                let hi = |fd: i32| {
                    let n = nix::libc::fcntl(fd, nix::libc::F_DUPFD_CLOEXEC, 10);
                    if n < 0 {
                        Err(std::io::Error::last_os_error())
                    } else {
                        Ok(n)
                    }
                };
                if let Some((r, runner_fd)) = fds {
                    let (r_hi, runner_hi) = (hi(r)?, hi(runner_fd)?);
                    let code_hi = match code_fd {
                        Some(c) => Some(hi(c)?),
                        None => None,
                    };
                    if nix::libc::dup2(r_hi, 3) < 0 || nix::libc::dup2(runner_hi, 4) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    if let Some(c) = code_hi
                        && nix::libc::dup2(c, 5) < 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                nix::unistd::setsid().map_err(std::io::Error::from)?;
                Ok(())
            });
        }
        let mut child = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .spawn()
            .map_err(io_err(format!("launching {}", spec.interpreter.display())))?;
        drop(req_r);
        drop(runner);
        drop(code);
        drop(confinement);
        let pid = child.id().unwrap_or(0);
        let lineage = toolcell_sys::lineage::Lineage::adopt(pid).map(Arc::new);
        let _ = family.set(Family {
            root: pid,
            lineage: lineage.clone(),
        });
        // Into the kernel's cgroup. A cgroup migration waits for an RCU
        // grace period (~10 ms), so it runs on a blocking thread while
        // Python starts, and is awaited before `hello`: the runner runs no
        // cell code, and starts no process, before it has that.
        let joining = cgroup
            .as_mut()
            .and_then(toolcell_sys::cgroup::KernelCgroup::take_procs)
            .map(|procs| {
                tokio::task::spawn_blocking(move || {
                    use std::io::Write;
                    std::fs::File::from(procs).write_all(pid.to_string().as_bytes())
                })
            });
        let requests = match req_w {
            Some(w) => RequestPipe::new(
                tokio::net::unix::pipe::Sender::from_owned_fd(w)
                    .map_err(io_err("opening the request pipe"))?,
            ),
            None => match child.stdin.take() {
                Some(stdin) => RequestPipe::new(stdin),
                None => {
                    let _ = child.start_kill();
                    return Err(io_err("opening the request pipe")(
                        std::io::ErrorKind::BrokenPipe.into(),
                    ));
                }
            },
        };
        if let Some(j) = joining {
            let joined = j
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
            if let Err(e) = joined {
                let _ = child.start_kill();
                return Err(io_err(
                    "moving the kernel into its cgroup (set TOOLCELL_CGROUP=off to do without)",
                )(e));
            }
        }
        Ok(Launched {
            child,
            pid,
            requests,
            server,
            cgroup,
            lineage,
            marker,
            payload: if inband {
                crate::remote::payload(runner_source, stub)
            } else {
                Vec::new()
            },
        })
    }

    async fn handshake(&mut self, payload: &[u8], hello: &Request) -> Result<(), SpawnError> {
        let line = hello.to_line().map_err(|e| SpawnError::Io {
            what: "encoding hello".into(),
            source: std::io::Error::other(e),
        })?;
        let not_ready = |k: &Self, reason: String| match &k.spec.remote {
            Some((name, _)) => SpawnError::Remote {
                remote: name.clone(),
                reason: reason.replace("it exited", "its command exited"),
                stderr: k.early_text(StreamKind::Stderr),
            },
            None => SpawnError::NotReady {
                interpreter: k.spec.interpreter.display().to_string(),
                reason,
                stderr: k.early_text(StreamKind::Stderr),
            },
        };
        let mut first = payload.to_vec();
        first.extend_from_slice(&line);
        let deadline = Instant::now() + self.spec.startup_timeout;
        // A command that never reads (a stalled connection) must not hold
        // the spawn past the startup timeout.
        let Ok(sent) = tokio::time::timeout_at(deadline, self.requests.send(&first)).await else {
            self.kill_now();
            let _ = tokio::time::timeout(Duration::from_millis(500), self.drain_early()).await;
            return Err(not_ready(
                self,
                format!(
                    "it did not read its first request within {:?}",
                    self.spec.startup_timeout
                ),
            ));
        };
        if sent.is_err() {
            // The child died at once; collect what it said.
            let _ = tokio::time::timeout(Duration::from_secs(2), self.drain_early()).await;
            let how = match tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await {
                Ok(Ok(status)) => describe_exit(&status),
                _ => "it exited".into(),
            };
            return Err(not_ready(
                self,
                format!("{how} before reading its first request"),
            ));
        }
        loop {
            let ev = tokio::select! {
                ev = self.events.recv() => ev,
                () = tokio::time::sleep_until(deadline) => {
                    self.kill_now();
                    let _ = tokio::time::timeout(Duration::from_millis(500), self.drain_early()).await;
                    return Err(not_ready(self, format!("no ready frame within {:?}", self.spec.startup_timeout)));
                }
            };
            match ev {
                Some(Ev::Frame(StreamKind::Stdout, body)) => match Reply::from_body(&body) {
                    Ok(Reply::Ready(r)) => {
                        self.python = r.python;
                        return Ok(());
                    }
                    _ => tracing::warn!(kernel = %self.spec.id, "unexpected frame before ready"),
                },
                Some(Ev::Frame(..)) => {}
                Some(Ev::Raw(s, b)) => self.keep_early(s, b),
                Some(Ev::Eof(s)) => {
                    self.eof[idx(s)] = true;
                    if self.eof == [true, true] {
                        let status = self.child.wait().await.ok();
                        let how =
                            status.map_or_else(|| "it exited".to_string(), |s| describe_exit(&s));
                        return Err(not_ready(self, format!("{how} before saying ready")));
                    }
                }
                None => return Err(not_ready(self, "its output pipes closed".into())),
            }
        }
    }

    async fn drain_early(&mut self) {
        while let Some(ev) = self.events.recv().await {
            match ev {
                Ev::Raw(s, b) => self.keep_early(s, b),
                Ev::Eof(s) => {
                    self.eof[idx(s)] = true;
                    if self.eof == [true, true] {
                        return;
                    }
                }
                Ev::Frame(..) => {}
            }
        }
    }

    fn keep_early(&mut self, s: StreamKind, b: Vec<u8>) {
        let held: usize = self.early.iter().map(|(_, b)| b.len()).sum();
        if held < EARLY_OUTPUT_CAP {
            self.early.push((s, b));
        }
    }

    fn early_text(&self, which: StreamKind) -> String {
        let bytes: Vec<u8> = self
            .early
            .iter()
            .filter(|(s, _)| *s == which)
            .flat_map(|(_, b)| b.iter().copied())
            .collect();
        let text = self.spec.redactor.clean(&bytes);
        last_lines(&text, 10)
    }

    /// Makes `dir` (a private working directory) belong to the kernel: it
    /// is removed with the kernel.
    pub fn set_owned_cwd(&mut self, dir: Option<PathBuf>) {
        self.owned_cwd = dir;
    }

    /// The kernel's working directory.
    pub fn cwd(&self) -> &Path {
        &self.spec.cwd
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

    /// Whether the process still runs, asking the OS: a kernel that died
    /// while idle is noticed here, not only by its next cell.
    pub fn check_alive(&mut self) -> bool {
        // A killed kernel's leader can be a zombie while its other threads
        // still exit, before `waitpid` reports it: count that as dead too.
        if !self.dead
            && (!matches!(self.child.try_wait(), Ok(None))
                || exited_leader(self.proc_stat.as_ref()))
        {
            self.dead = true;
        }
        !self.dead
    }

    /// How the process ended, if it ended since the last cell (killed from
    /// outside, out of memory, `os._exit` in a thread a cell left behind):
    /// `Some("it was killed by signal 9 (SIGKILL)")`; `None` while it runs
    /// or when its death was already reported. Asks the OS (a `waitpid`
    /// that does not block).
    pub async fn ended_between_cells(&mut self) -> Option<String> {
        if self.dead {
            return None;
        }
        match self.child.try_wait() {
            Ok(None) if !exited_leader(self.proc_stat.as_ref()) => None,
            Ok(None) => {
                // A zombie whose other threads are still exiting: `waitpid`
                // reports it only once they are gone, a moment later.
                self.dead = true;
                match tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await {
                    Ok(Ok(status)) => Some(describe_exit(&status)),
                    _ => Some("it stopped running".into()),
                }
            }
            Ok(Some(status)) => {
                self.dead = true;
                Some(describe_exit(&status))
            }
            Err(e) => {
                self.dead = true;
                Some(format!("it could not be waited for ({e})"))
            }
        }
    }

    /// The rpc endpoint (`TOOLCELL_RPC`).
    pub fn rpc_endpoint(&self) -> &str {
        self.server.endpoint()
    }

    /// The kernel's process tree (group, descendants, env marker).
    pub fn tree(&self) -> Tree {
        Tree {
            root: self.pid,
            pgid: Some(self.pid),
            marker: Some((
                if self.spec.remote.is_some() {
                    "TOOLCELL_REMOTE_KERNEL"
                } else {
                    "TOOLCELL_RPC"
                }
                .to_string(),
                self.sentinel_marker_env.clone(),
            )),
            cgroup: self.cgroup.as_ref().map(|c| c.dir().to_path_buf()),
            started: self.started,
            lineage: self.lineage.clone(),
        }
    }

    /// Interrupts the running cell: an in-band `interrupt` request, after
    /// which the runner sends SIGINT to its own process group (the cell gets
    /// `KeyboardInterrupt`). In-band, it is ordered after the cell's
    /// `execute`: an interrupt that arrives before the cell's first line ran
    /// is kept for it, never lost. Between cells it does nothing. Should
    /// the request channel fail, a local kernel gets SIGINT directly (as
    /// local R and JavaScript kernels always do; remote ones get the
    /// in-band request, which their runner's reader turns into SIGINT).
    pub fn interrupt(&self) {
        // A stopped kernel (a cell can SIGSTOP its own process) reads no
        // request and takes no signal: it is continued first.
        self.resume();
        if self.spec.language.inband() && self.spec.remote.is_none() {
            // A local R or JavaScript runner takes SIGINT itself (its relay
            // would only pass it on).
            if let Ok(p) = i32::try_from(self.pid) {
                let _ = killpg(Pid::from_raw(p), Signal::SIGINT);
            }
            return;
        }
        let pipe = Arc::clone(&self.requests);
        let direct = if self.spec.remote.is_some() {
            // Never a signal to the local command: it would end the connection.
            None
        } else {
            i32::try_from(self.pid).ok()
        };
        match Request::Interrupt.to_line() {
            Ok(line) => {
                tokio::spawn(async move {
                    let sent = tokio::time::timeout(Duration::from_secs(5), pipe.send(&line)).await;
                    if !matches!(sent, Ok(Ok(_)))
                        && let Some(p) = direct
                    {
                        let _ = killpg(Pid::from_raw(p), Signal::SIGINT);
                    }
                });
            }
            Err(_) => {
                if let Some(p) = direct {
                    let _ = killpg(Pid::from_raw(p), Signal::SIGINT);
                }
            }
        }
    }

    /// SIGCONT to the kernel: its process group (a local runner leads
    /// one), and for a remote the local command's whole tree (a signal
    /// that ends nothing: the connection stays).
    fn resume(&self) {
        if self.pid == 0 || self.dead {
            return;
        }
        if self.spec.remote.is_some() {
            self.tree().signal(Signal::SIGCONT);
        } else if let Ok(p) = i32::try_from(self.pid) {
            let _ = killpg(Pid::from_raw(p), Signal::SIGCONT);
        }
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

    /// SIGKILL to the whole tree now, without waiting.
    fn kill_now(&mut self) {
        self.requests.close();
        if self.pid != 0 {
            self.tree().signal(Signal::SIGKILL);
        }
        self.dead = true;
    }

    /// A lifecycle remote's allocation is stopped before its kernel's
    /// command is killed: its `stop` starts now; once it is done (within
    /// [`STOP_FIRST`]) the command has [`EXIT_AFTER_STOP`] to end by itself
    /// (an engine's client ends with its allocation) before anything is
    /// signalled. Killing an engine's client first can hold the
    /// allocation's resources for seconds: with SLURM, an `srun` killed
    /// before `scancel` made the next `salloc` wait ~2.7 s instead of
    /// ~10 ms. No-op without an allocation, or once it is stopped.
    async fn stop_allocation_first(&mut self) {
        let Some(alloc) = self.allocation.take() else {
            return;
        };
        let done = alloc.stop_in_background();
        let child = &mut self.child;
        let stopped = tokio::select! {
            r = tokio::time::timeout(STOP_FIRST, done) => matches!(r, Ok(Ok(()))),
            _ = child.wait() => false,
        };
        if stopped {
            let _ = tokio::time::timeout(EXIT_AFTER_STOP, self.child.wait()).await;
        }
    }

    /// Kills the whole tree (SIGTERM, then SIGKILL after `grace`) and reaps it.
    pub async fn kill(&mut self, grace: Duration) {
        self.stop_allocation_first().await;
        if self.spec.remote.is_some() && !self.dead {
            // Closing stdin makes the remote runner kill its group; give
            // the command a moment to carry that EOF over, then kill it.
            self.requests.close();
            let _ =
                tokio::time::timeout(grace.min(Duration::from_secs(1)), self.child.wait()).await;
        }
        if self.pid != 0 {
            self.tree().kill(grace).await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
        self.dead = true;
    }

    /// Asks the runner to exit, then kills whatever is left after `grace`.
    pub async fn shutdown(mut self, grace: Duration) {
        self.stop_allocation_first().await;
        if !self.dead
            && let Ok(line) = Request::Shutdown.to_line()
        {
            self.resume();
            let _ = tokio::time::timeout(grace, self.requests.send(&line)).await;
            let _ = tokio::time::timeout(grace, self.child.wait()).await;
        }
        self.kill(grace).await;
    }

    /// Sets the tools from outside the registry that the next cells may
    /// call (a `serve` client's, an MCP server's; `None`: none). When they
    /// differ from the last cell's, a new stub module goes to the runner
    /// with the next cell, which loads it keeping the session's state.
    ///
    /// A tool whose name (or a parameter's) would clash in the stub module
    /// of any language with one that comes earlier — the kernel's own tools
    /// first — is left out ([`toolcell_tools::screen::screen`]), so one
    /// source's tool list never costs more than its own tools. Returns the
    /// warnings for the cell when the tools changed: those left-out tools
    /// and the set's own [`notices`](crate::extra::ExtraTools::notices);
    /// each is logged too.
    ///
    /// # Errors
    /// The stub module cannot be generated; nothing changes then.
    pub fn use_extra_tools(
        &mut self,
        extra: Option<&Arc<crate::extra::ExtraTools>>,
    ) -> Result<Vec<String>, SpawnError> {
        let fp = extra.map_or(0, |e| e.fingerprint());
        if fp == self.stubs_for {
            return Ok(Vec::new());
        }
        let mut notices = Vec::new();
        let (source, dispatch) = match extra.filter(|e| !e.is_empty()) {
            None => (self.spec.language.stub_source(&self.spec.tools, &[])?, None),
            Some(e) => {
                let mut all = self.spec.tools.clone();
                all.extend(e.tools.iter().cloned());
                let screened = toolcell_tools::screen::screen(&all, &e.unavailable);
                let kept: std::collections::HashSet<&str> =
                    screened.tools.iter().map(|t| t.name()).collect();
                let tools: Vec<Arc<dyn toolcell_tools::DynTool>> = e
                    .tools
                    .iter()
                    .filter(|t| kept.contains(t.name()))
                    .cloned()
                    .collect();
                let source = self
                    .spec
                    .language
                    .stub_source(&screened.tools, &screened.unavailable)?;
                let dispatch: Arc<dyn Dispatch> = toolcell_tools::ToolDispatcher::over(
                    &tools,
                    Arc::clone(&self.spec.tool_settings),
                );
                let names = tools.iter().map(|t| t.name().to_string()).collect();
                for why in &screened.dropped {
                    tracing::warn!(kernel = %self.spec.id, "{why}");
                }
                notices.extend(e.notices.iter().cloned());
                notices.extend(screened.dropped);
                (source, Some((dispatch, names)))
            }
        };
        self.pending_stubs = Some(source);
        self.extra = dispatch;
        self.stubs_for = fp;
        Ok(notices)
    }

    /// Runs one cell. `id` is fresh and random ([`crate::ids::CellId`]): the result is
    /// accepted only with it.
    pub async fn execute(
        &mut self,
        id: &crate::ids::CellId,
        code: &str,
        opts: &CellOptions,
    ) -> CellOutcome {
        let started = Instant::now();
        let id = id.as_str().to_string();
        let deadline = started + opts.timeout;
        let next_count = self.execution_count + 1;
        let mut streams = [
            StreamOut::new(
                &self.spec.redactor,
                opts.max_stdout_bytes,
                opts,
                &self.spec.id,
                next_count,
                StreamKind::Stdout,
            ),
            StreamOut::new(
                &self.spec.redactor,
                opts.max_stderr_bytes,
                opts,
                &self.spec.id,
                next_count,
                StreamKind::Stderr,
            ),
        ];
        let mut cell_spec = CellSpec::new(id.clone(), deadline)
            .budget(opts.max_tool_calls)
            .enable(self.tool_names.iter().cloned());
        if let Some((dispatch, names)) = &self.extra {
            cell_spec = cell_spec
                .enable(names.iter().cloned())
                .extra_dispatch(Arc::clone(dispatch));
        }
        let handle = match self.server.open_cell(cell_spec) {
            Ok(h) => Some(h),
            Err(e) => {
                tracing::error!(kernel = %self.spec.id, "cannot open the cell's tool authority: {e}");
                None
            }
        };

        // Output written since the last cell (or before ready) comes first,
        // under a one-line marker (docs/protocol.md, "Output between cells").
        let mut between = [false; 2];
        let early = std::mem::take(&mut self.early);
        for (s, b) in early {
            streams[idx(s)].between(&mut between[idx(s)], &b, opts);
        }
        let mut protocol_errors = 0u32;
        // Output still in the pipes (a thread the last cell left behind)
        // belongs before this cell: let the readers catch up first. The
        // common case, empty pipes, costs two ioctls.
        let settle = Instant::now() + SETTLE_LIMIT;
        loop {
            while let Ok(ev) = self.events.try_recv() {
                match ev {
                    Ev::Raw(s, b) => streams[idx(s)].between(&mut between[idx(s)], &b, opts),
                    Ev::Frame(..) => protocol_errors += 1,
                    Ev::Eof(s) => self.eof[idx(s)] = true,
                }
            }
            if Instant::now() >= settle {
                break;
            }
            if self.pipes_pending() == 0 && self.pumps_busy.load(Ordering::SeqCst) == 0 {
                // Nothing in the pipes or in a reader's hands; one yield
                // lets a reader that just returned from read() count itself.
                tokio::task::yield_now().await;
                if self.pumps_busy.load(Ordering::SeqCst) == 0 && self.events.is_empty() {
                    break;
                }
                continue;
            }
            if let Ok(Some(ev)) =
                tokio::time::timeout(Duration::from_millis(2), self.events.recv()).await
            {
                match ev {
                    Ev::Raw(s, b) => streams[idx(s)].between(&mut between[idx(s)], &b, opts),
                    Ev::Frame(..) => protocol_errors += 1,
                    Ev::Eof(s) => self.eof[idx(s)] = true,
                }
            }
        }

        let mut result: Option<CellResult> = None;
        let mut got_end = false;
        let mut phase = Phase::Running;
        // The interrupt is repeated once, halfway through the grace.
        let mut reminded = false;
        let mut timer = deadline;
        let mut end_wait: Option<Instant> = None;
        let mut died: Option<String> = None;
        // Files a remote cell sent back (figures): name and bytes.
        let mut files: Vec<(String, u64)> = Vec::new();
        // How many were refused for the kernel's cap on them.
        let mut over_cap = 0usize;

        let line = Request::Execute(Execute {
            id: id.clone(),
            code: code.to_string(),
            stubs: self.pending_stubs.take(),
        })
        .to_line();
        if let Some(secs) = self.spec.limits.cpu_seconds
            && self.spec.remote.is_none()
            && !self.dead
            && let Err(e) = crate::limits::set_cpu_budget(self.pid, secs)
        {
            tracing::warn!(kernel = %self.spec.id, "cannot re-arm [limits] cpu_seconds: {e}");
        }
        // The request is written while the cell's clock runs: a kernel that
        // reads nothing (stopped by a cell, a remote that stopped reading)
        // must not hold the cell, its interrupt or its session's shutdown
        // past the deadline. The write goes on beside the events, the timer
        // and the interrupt below; a cell that ends before it is done drops
        // it, which closes the channel (a torn line is never followed).
        let not_sent = "it was no longer running when the cell was sent";
        let mut sending: Option<SendFuture> = match line {
            Ok(l) if !self.dead && self.eof == [false, false] => {
                let pipe = Arc::clone(&self.requests);
                Some(Box::pin(async move { pipe.send_within(&l, None).await }))
            }
            _ => {
                died = Some(not_sent.into());
                None
            }
        };

        while died.is_none() && !(result.is_some() && got_end) {
            let wake = match end_wait {
                Some(t) => t.min(timer),
                None => timer,
            };
            tokio::select! {
                // Events first: a result already queued when the grace timer
                // also fires must win, or a kernel that answered in time
                // would be killed (seen in the soak test at load 16).
                biased;
                ev = self.events.recv() => match ev {
                    None => {
                        died = Some(self.exit_description().await);
                    }
                    Some(Ev::Raw(s, b)) => streams[idx(s)].push(&b, opts),
                    Some(Ev::Frame(StreamKind::Stdout, body)) if is_frame_of(&body, "file") => {
                        match self.take_file(&body, &mut files) {
                            Ok(()) => {}
                            Err(FileRefused::OverCap) => over_cap += 1,
                            Err(FileRefused::Bad(e)) => {
                                protocol_errors += 1;
                                tracing::warn!(kernel = %self.spec.id, "dropped a file frame: {e}");
                            }
                        }
                    }
                    Some(Ev::Frame(s, body)) => match (s, Reply::from_body(&body)) {
                        (StreamKind::Stderr, Ok(Reply::End(e))) if e.id == id => got_end = true,
                        (StreamKind::Stdout, Ok(Reply::Result(r))) if r.id == id && result.is_none() => {
                            end_wait = Some(Instant::now() + END_LAG);
                            result = Some(r);
                        }
                        _ => {
                            protocol_errors += 1;
                            tracing::warn!(kernel = %self.spec.id, "dropped a frame with a wrong id or body");
                        }
                    },
                    Some(Ev::Eof(s)) => {
                        self.eof[idx(s)] = true;
                        if self.eof == [true, true] {
                            if result.is_some() {
                                break;
                            }
                            died = Some(self.exit_description().await);
                        }
                    }
                },
                sent = async {
                    match sending.as_mut() {
                        Some(f) => f.await,
                        None => std::future::pending().await,
                    }
                }, if sending.is_some() => {
                    sending = None;
                    if sent.is_err() && result.is_none() {
                        died = Some(not_sent.into());
                    }
                },
                () = tokio::time::sleep_until(wake) => {
                    if result.is_some() {
                        // The end frame is late; everything else is in.
                        break;
                    }
                    match phase {
                        Phase::Running if opts.on_timeout == OnTimeout::Interrupt => {
                            self.interrupt();
                            phase = Phase::Interrupting { by_caller: false };
                            timer = Instant::now() + opts.interrupt_grace / 2;
                        }
                        Phase::Running => {
                            phase = Phase::Killed { by_caller: false };
                            break;
                        }
                        Phase::Interrupting { by_caller } if !reminded => {
                            // Halfway through the grace with no answer: say
                            // it once more (an interrupt that met the cell
                            // in a moment it could not be delivered), then
                            // wait out the rest.
                            reminded = true;
                            self.interrupt();
                            phase = Phase::Interrupting { by_caller };
                            timer = Instant::now() + opts.interrupt_grace / 2;
                        }
                        Phase::Interrupting { by_caller } => {
                            phase = Phase::Killed { by_caller };
                            break;
                        }
                        Phase::Killed { .. } => break,
                    }
                },
                () = interrupted(&opts.interrupt, opts.cancel.as_ref()), if phase == Phase::Running => {
                    self.interrupt();
                    phase = Phase::Interrupting { by_caller: true };
                    timer = Instant::now() + opts.interrupt_grace / 2;
                },
            }
        }

        // A request still being written is torn off here: dropping its
        // write closes the channel. Only a kill or a death ends a cell that
        // early — or a runner that answered before reading its whole
        // request, which cannot be trusted with another: it goes too.
        if sending.take().is_some() && died.is_none() && !matches!(phase, Phase::Killed { .. }) {
            tracing::warn!(kernel = %self.spec.id, "the kernel answered a cell it had not read whole; it is stopped");
            self.kill(opts.kill_grace).await;
        }
        if let Phase::Killed { .. } = phase {
            self.kill(opts.kill_grace).await;
            // Collect what is still in the pipes.
            let _ = tokio::time::timeout(Duration::from_millis(500), async {
                while let Some(ev) = self.events.recv().await {
                    match ev {
                        Ev::Raw(s, b) => streams[idx(s)].push(&b, opts),
                        Ev::Eof(s) => {
                            self.eof[idx(s)] = true;
                            if self.eof == [true, true] {
                                break;
                            }
                        }
                        Ev::Frame(..) => {}
                    }
                }
            })
            .await;
        }
        if died.is_some() {
            self.dead = true;
            // Make sure nothing of the tree is left: kill first, then reap.
            // A runner whose pipes a cell closed or covered may still be
            // running, deaf (waiting for it only delays the result), and
            // signalling before the reap means the root pid cannot have been
            // reused by then.
            self.tree().signal(Signal::SIGKILL);
            let _ = tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await;
        }

        let tools = handle.map(toolcell_rpc::CellHandle::settle);
        let [out, err] = streams;
        let stdout = out.finish(opts);
        let stderr = err.finish(opts);

        let traceback = result
            .as_ref()
            .map(|r| self.spec.redactor.clean(r.traceback.as_bytes()))
            .unwrap_or_default();
        if let Some(r) = result.as_mut()
            && self.spec.remote.is_some()
        {
            // The runner names the files it sent; they are in our artifacts
            // directory now, where `figures.rs` checks them as for a local
            // kernel. Other paths are left as they are (and dropped there).
            let artifacts = self.dir.join("artifacts");
            for d in &mut r.display {
                if files.iter().any(|(name, _)| *name == d.path) {
                    d.path = artifacts.join(&d.path).display().to_string();
                }
            }
        }
        // What the result does not list is of no use to anyone: it goes
        // now, not with the kernel (a runner could otherwise fill this
        // host's disk with files nobody asked for).
        let listed = |name: &str| {
            result.as_ref().is_some_and(|r| {
                r.display
                    .iter()
                    .any(|d| Path::new(&d.path).file_name() == Some(std::ffi::OsStr::new(name)))
            })
        };
        let (kept, unlisted): (Vec<_>, Vec<_>) =
            files.into_iter().partition(|(name, _)| listed(name));
        self.remove_files(&unlisted);
        self.cell_files = kept;
        let mut notices = Vec::new();
        if over_cap > 0 {
            notices.push(format!(
                "{over_cap} file(s) the kernel sent back (figures) were refused: the files of this kernel kept on the host would pass [kernels] remote_files_cap ({} bytes). Figures of earlier cells are freed when the session ends or is reset.",
                self.spec.files_cap
            ));
        }
        if let Some(r) = &result {
            self.execution_count = r.execution_count;
            if r.status == toolcell_protocol::RunnerStatus::Exit {
                // The runner exits after answering (running atexit
                // handlers); give it a moment, then make sure.
                let _ = tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await;
                self.kill(Duration::from_millis(200)).await;
            }
        } else {
            self.execution_count = next_count;
        }
        let ending = match (phase, result, died) {
            (_, _, Some(how)) => Ending::Died { how },
            (Phase::Killed { by_caller: true }, _, None) => Ending::InterruptedKilled,
            (Phase::Killed { by_caller: false }, _, None) => Ending::TimedOutKilled,
            (Phase::Interrupting { by_caller: true }, Some(r), None) => Ending::InterruptedKept(r),
            (Phase::Interrupting { by_caller: false }, Some(r), None) => Ending::TimedOutKept(r),
            (Phase::Running, Some(r), None) => Ending::Answered(r),
            (_, None, None) => Ending::Died {
                how: "it stopped answering".into(),
            },
        };
        CellOutcome {
            ending,
            stdout,
            stderr,
            traceback,
            tools,
            duration: started.elapsed(),
            alive: !self.dead,
            protocol_errors,
            execution_count: self.execution_count,
            notices,
        }
    }

    /// After the host checked the last cell's figures: the files that cell
    /// sent which are not among `kept` (dropped by the check) are removed.
    pub fn keep_files(&mut self, kept: &[crate::result::Display]) {
        let sent = std::mem::take(&mut self.cell_files);
        let (_, dropped): (Vec<_>, Vec<_>) = sent.into_iter().partition(|(name, _)| {
            kept.iter()
                .any(|d| Path::new(&d.path).file_name() == Some(std::ffi::OsStr::new(name)))
        });
        self.remove_files(&dropped);
    }

    /// Removes these files (sent by cells) from the artifacts directory.
    fn remove_files(&mut self, files: &[(String, u64)]) {
        if files.is_empty() {
            return;
        }
        let dir = PrivateDir::ensure(&self.dir).and_then(|d| d.open_dir("artifacts"));
        for (name, bytes) in files {
            let gone = match &dir {
                Ok(d) => nix::unistd::unlinkat(
                    d.fd(),
                    name.as_str(),
                    nix::unistd::UnlinkatFlags::NoRemoveDir,
                )
                .is_ok(),
                Err(_) => false,
            };
            if gone {
                self.files_kept = self.files_kept.saturating_sub(*bytes);
            } else {
                tracing::warn!(kernel = %self.spec.id, "cannot remove a file a cell sent: {name}");
            }
        }
    }

    /// Bytes waiting, unread, in the kernel's stdout and stderr pipes.
    fn pipes_pending(&self) -> usize {
        self.watch
            .iter()
            .map(|fd| {
                let mut n: nix::libc::c_int = 0;
                // SAFETY: FIONREAD writes one int; `fd` is our own open dup.
                let rc = unsafe { nix::libc::ioctl(fd.as_raw_fd(), nix::libc::FIONREAD, &mut n) };
                if rc == 0 {
                    usize::try_from(n).unwrap_or(0)
                } else {
                    0
                }
            })
            .sum()
    }

    /// Stores a `file` frame from a remote cell in the artifacts directory,
    /// within the kernel's cap on such files.
    fn take_file(
        &mut self,
        body: &[u8],
        files: &mut Vec<(String, u64)>,
    ) -> Result<(), FileRefused> {
        use base64::Engine as _;
        use std::io::Write as _;
        #[derive(serde::Deserialize)]
        struct FileFrame {
            name: String,
            data: String,
        }
        let bad = |e: String| FileRefused::Bad(e);
        let f: FileFrame = serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
        if files.len() >= MAX_CELL_FILES {
            return Err(bad(format!("more than {MAX_CELL_FILES} files in one cell")));
        }
        let ok_name = !f.name.is_empty()
            && f.name.len() <= 128
            && !f.name.starts_with('.')
            && f.name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !ok_name {
            return Err(bad("bad file name".into()));
        }
        if f.data.len() > MAX_FILE_BYTES / 3 * 4 + 4 {
            return Err(bad("file too large".into()));
        }
        let cap = self.spec.files_cap;
        // At least this many bytes once decoded: refused before decoding.
        let least = (f.data.len() / 4 * 3).saturating_sub(2) as u64;
        if cap > 0 && self.files_kept.saturating_add(least) > cap {
            return Err(FileRefused::OverCap);
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(f.data.as_bytes())
            .map_err(|e| bad(e.to_string()))?;
        let len = bytes.len() as u64;
        if cap > 0 && self.files_kept.saturating_add(len) > cap {
            return Err(FileRefused::OverCap);
        }
        let dir = PrivateDir::ensure(&self.dir)
            .and_then(|d| match d.open_dir("artifacts") {
                Ok(a) => Ok(a),
                Err(_) => d.create_dir("artifacts"),
            })
            .map_err(|e| bad(e.to_string()))?;
        let mut file = dir.create_file(&f.name).map_err(|e| bad(e.to_string()))?;
        // Counted from here: a file half-written is on the disk too.
        self.files_kept += len;
        files.push((f.name, len));
        file.write_all(&bytes).map_err(|e| bad(e.to_string()))?;
        Ok(())
    }

    async fn exit_description(&mut self) -> String {
        use std::os::unix::process::ExitStatusExt;
        if let Some((name, remote)) = &self.spec.remote {
            let program = remote.command.first().cloned().unwrap_or_default();
            let how = match tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await {
                Ok(Ok(status)) => describe_exit(&status).replacen("it ", "", 1),
                _ => "closed its output".to_string(),
            };
            return format!(
                "the connection to remote \"{name}\" was lost: {program} {how}; the remote kernel's state is lost"
            );
        }
        match tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await {
            Ok(Ok(status)) => {
                let how = describe_exit(&status);
                match self.spec.limits.cpu_seconds {
                    Some(secs) if status.signal() == Some(Signal::SIGXCPU as i32) => format!(
                        "{how}: it used up the [limits] cpu_seconds = {secs} CPU seconds a cell may take"
                    ),
                    _ => how,
                }
            }
            _ => "its output pipes closed".to_string(),
        }
    }
}

/// Whether `pid` is a zombie (or dying) according to `/proc`: a thread
/// group leader that exited while other threads of it still unwind, which
/// `waitpid` does not report yet. Unknown (no `/proc`) is `false`: only
/// `waitpid` then says a kernel ended.
fn exited_leader(stat: Option<&std::fs::File>) -> bool {
    use std::os::unix::fs::FileExt;
    let Some(f) = stat else {
        return false;
    };
    let mut buf = [0u8; 512];
    let n = match f.read_at(&mut buf, 0) {
        Ok(n) => n,
        // Not reaped (waitpid said so), so its entry exists: a failed read
        // says nothing.
        Err(_) => return false,
    };
    let stat = &buf[..n];
    let Some(close) = memchr::memrchr(b')', stat) else {
        return false;
    };
    dying(&stat[close + 1..])
}

/// Whether process `pid` exists and is neither gone nor on its way out
/// (see [`dying`]); for listings, which have no pid file open.
pub fn process_running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read(format!("/proc/{pid}/stat")) else {
        return false;
    };
    match memchr::memrchr(b')', &stat) {
        Some(close) => !dying(&stat[close + 1..]),
        None => true,
    }
}

/// Whether the fields of `/proc/PID/stat` after the command name say the
/// process is gone or on its way out: a zombie (`Z`, `X`), exiting
/// (`PF_EXITING` in its flags), or with SIGKILL pending — what a
/// `kill -9` from outside leaves for the few milliseconds before the
/// process is gone, so that a cell sent right after it does not go to a
/// kernel that will never read it.
fn dying(fields: &[u8]) -> bool {
    const PF_EXITING: u64 = 0x4;
    const SIGKILL_BIT: u64 = 1 << (9 - 1);
    let mut it = fields
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty());
    let num = |f: Option<&[u8]>| {
        f.and_then(|f| std::str::from_utf8(f).ok())
            .and_then(|f| f.parse::<u64>().ok())
    };
    // state (field 3), flags (9), pending signals (31).
    let state = it.next();
    if state.is_some_and(|s| s == b"Z" || s == b"X") {
        return true;
    }
    let flags = num(it.nth(5));
    let pending = num(it.nth(21));
    flags.is_some_and(|f| f & PF_EXITING != 0) || pending.is_some_and(|p| p & SIGKILL_BIT != 0)
}

fn describe_exit(status: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("it exited with status {c}"),
        (None, Some(s)) => format!("it was killed by {}", signal_name(s)),
        _ => "it exited".to_string(),
    }
}

/// The last `n` lines of `text`.
pub fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    Interrupting { by_caller: bool },
    Killed { by_caller: bool },
}

/// One stream of one cell: cleaner → capture → live sink.
struct StreamOut {
    kind: StreamKind,
    cleaner: Cleaner,
    capture: Capture,
    scratch: String,
}

impl StreamOut {
    fn new(
        redactor: &Redactor,
        cap: usize,
        opts: &CellOptions,
        kernel: &str,
        count: u64,
        kind: StreamKind,
    ) -> Self {
        let spill = opts.spill.as_ref().map(|(dir, cap)| SpillTarget {
            dir: dir.clone(),
            prefix: format!("{kernel}-cell{count}-{}", kind.as_str()),
            cap_bytes: *cap,
        });
        Self {
            kind,
            cleaner: Cleaner::new(redactor),
            capture: Capture::with_fold(cap, spill, opts.fold),
            scratch: String::new(),
        }
    }

    fn emit(&mut self, opts: &CellOptions) {
        if self.scratch.is_empty() {
            return;
        }
        self.capture.push(&self.scratch);
        if let Some(live) = &opts.live {
            live(self.kind, &self.scratch);
        }
        self.scratch.clear();
    }

    fn push(&mut self, bytes: &[u8], opts: &CellOptions) {
        self.cleaner.push(bytes, &mut self.scratch);
        self.emit(opts);
    }

    fn between(&mut self, marked: &mut bool, bytes: &[u8], opts: &CellOptions) {
        if !*marked {
            *marked = true;
            self.scratch
                .push_str("[toolcell: output written after the previous cell ended]\n");
            self.emit(opts);
        }
        self.push(bytes, opts);
    }

    fn finish(mut self, opts: &CellOptions) -> Captured {
        self.cleaner.finish(&mut self.scratch);
        self.emit(opts);
        self.capture.finish()
    }
}

/// A kernel's process and what was forked from it: who may use its socket.
struct Family {
    root: u32,
    lineage: Option<Arc<toolcell_sys::lineage::Lineage>>,
}

impl Family {
    /// The kernel itself, or a process forked from it: recorded in its
    /// lineage (which survives re-parenting), or below it by parent links.
    fn admits(&self, pid: u32) -> bool {
        self.lineage.as_ref().is_some_and(|l| l.contains(pid))
            || toolcell_sys::lineage::descends_from(pid, self.root)
    }
}

/// Why a `file` frame was not stored.
enum FileRefused {
    /// The kernel's files would pass [`KernelSpec::files_cap`].
    OverCap,
    /// The frame is malformed (a protocol error).
    Bad(String),
}

/// A request being written to a kernel, polled beside the cell's events.
type SendFuture = std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<()>> + Send>>;

/// A started child, before the handshake.
struct Launched {
    child: tokio::process::Child,
    pid: u32,
    requests: Arc<RequestPipe>,
    server: Server,
    cgroup: Option<toolcell_sys::cgroup::KernelCgroup>,
    lineage: Option<Arc<toolcell_sys::lineage::Lineage>>,
    /// `TOOLCELL_RPC` (local) or `TOOLCELL_REMOTE_KERNEL` (remote): every
    /// descendant's environment carries it (see [`Kernel::tree`]).
    marker: String,
    /// Written before `hello` (a remote kernel's bootstrap payload).
    payload: Vec<u8>,
}

/// Removes a directory on drop unless disarmed with `mem::forget`.
struct DirGuard(Option<PathBuf>);

impl Drop for DirGuard {
    fn drop(&mut self) {
        if let Some(d) = self.0.take() {
            let _ = std::fs::remove_dir_all(d);
        }
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

#[cfg(test)]
mod dying_tests {
    use super::dying;

    /// The fields of a `/proc/PID/stat` line after the command name, with
    /// the given state, flags and pending-signal bitmap.
    fn fields(state: &str, flags: u64, pending: u64) -> Vec<u8> {
        format!(
            " {state} 1 100 100 0 -1 {flags} 10 0 0 0 5 2 0 0 20 0 3 0 12345 1000 200 18446744073709551615 1 1 0 0 0 {pending} 0 0 0 0 0 0 17 1 0 0 0 0 0"
        )
        .into_bytes()
    }

    #[test]
    fn zombies_exiting_processes_and_pending_kills_are_dying() {
        assert!(!dying(&fields("S", 0x40_0000, 0)));
        assert!(
            !dying(&fields("R", 0x40_0000, 1 << 1)),
            "SIGINT pending is not death"
        );
        assert!(dying(&fields("Z", 0, 0)));
        assert!(dying(&fields("X", 0, 0)));
        assert!(dying(&fields("R", 0x40_0004, 0)), "PF_EXITING");
        assert!(dying(&fields("S", 0x40_0000, 1 << 8)), "SIGKILL pending");
        assert!(!dying(b" S 1"), "a short line says nothing");
    }

    #[test]
    fn this_process_is_not_dying() {
        let stat = std::fs::read("/proc/self/stat").unwrap();
        let close = stat.iter().rposition(|b| *b == b')').unwrap();
        assert!(!dying(&stat[close + 1..]));
    }
}
