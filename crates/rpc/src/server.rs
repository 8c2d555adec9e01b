//! The socket server: binding, accepting, and serving connections.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};
use tokio_util::sync::CancellationToken;

use crate::cell::{ActiveSlot, CellHandle, CellSpec, CellState};
use crate::dispatch::Dispatch;
use crate::handler::{Core, too_large_msg};
use crate::lines::{LineBuf, Next};
use crate::token::{Token, TokenError};
use crate::wire::{self, ErrorCode};

/// Default cap on one request line: 16 MiB, as docs/protocol.md
/// ("Request and reply") says.
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// File name of the socket inside the kernel's directory: docs/protocol.md
/// ("Endpoint and credentials").
pub const SOCKET_NAME: &str = "rpc.sock";

/// Longest socket path the kernel accepts: `sun_path` is 108 bytes
/// including the terminating NUL.
pub const MAX_SOCKET_PATH_BYTES: usize = 107;

/// Server settings. `Default` gives the documented values (the 16 MiB line cap
/// of docs/protocol.md, "Request and reply").
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    /// Longest accepted request line in bytes, without its `\n`.
    pub max_line_bytes: usize,
    /// When set (a cgroup v2 path as `/proc/<pid>/cgroup` shows it after
    /// `0::`), a Unix peer must run in that cgroup or below it: only the
    /// kernel the server belongs to (and what it started) may connect, not
    /// another kernel that read this one's token.
    pub peer_cgroup: Option<String>,
    /// When set, a Unix peer's pid (as `SO_PEERCRED` gives it) must pass
    /// this check too: the kernel uses it to accept only its own process
    /// and its descendants, so a process that moved itself into the
    /// kernel's cgroup is still refused.
    pub peer_check: Option<PeerCheck>,
    /// Most connections open at once; one more is closed at once with a
    /// `bad_token` error line. A kernel needs one per thread that calls
    /// tools at once (a thread pool of 64 callers is ordinary); the cap
    /// keeps a cell from spending the host's file descriptors.
    pub max_connections: usize,
}

/// A check of a connecting process's pid (see [`ServerConfig::peer_check`]).
#[derive(Clone)]
pub struct PeerCheck(Arc<dyn Fn(i32) -> bool + Send + Sync>);

impl PeerCheck {
    /// Wraps `f`, which answers whether pid may connect.
    pub fn new(f: impl Fn(i32) -> bool + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    fn allows(&self, pid: i32) -> bool {
        (self.0)(pid)
    }
}

impl std::fmt::Debug for PeerCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerCheck(..)")
    }
}

/// Default cap on connections open at once to one server.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            peer_cgroup: None,
            peer_check: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

impl ServerConfig {
    /// Only peers in the cgroup `path` (see [`ServerConfig::peer_cgroup`]).
    #[must_use]
    pub fn peer_cgroup(mut self, path: impl Into<String>) -> Self {
        self.peer_cgroup = Some(path.into());
        self
    }

    /// Only peers whose pid passes `check` (see [`ServerConfig::peer_check`]).
    #[must_use]
    pub fn peer_check(mut self, check: PeerCheck) -> Self {
        self.peer_check = Some(check);
        self
    }

    /// At most `n` connections open at once (at least 1).
    #[must_use]
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }
}

/// Whether process `pid` runs in the cgroup v2 `want` or below it.
fn in_cgroup(pid: i32, want: &str) -> bool {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return false;
    };
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .is_some_and(|have| {
            have == want
                || have
                    .strip_prefix(want)
                    .is_some_and(|rest| rest.starts_with('/'))
        })
}

impl ServerConfig {
    /// Sets the line cap (tests use small ones).
    #[must_use]
    pub fn max_line_bytes(mut self, bytes: usize) -> Self {
        self.max_line_bytes = bytes;
        self
    }
}

/// Why a server could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BindError {
    /// Not called from inside a tokio runtime.
    #[error("the RPC server must be started from inside a tokio runtime")]
    NoRuntime,
    /// No randomness for the token.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// The socket path does not fit in `sun_path`.
    #[error(
        "socket path {path} is {len} bytes long; Unix sockets allow at most {max} — use a shorter kernel directory"
    )]
    PathTooLong {
        /// The path that was too long.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The endpoint must be passed through the environment as text.
    #[error("socket path {0} is not valid UTF-8")]
    NonUtf8Path(PathBuf),
    /// The directory exists but is not a plain directory (a symlink, a file…).
    #[error("{0} exists but is not a directory (symlinks are refused)")]
    NotADirectory(PathBuf),
    /// The directory belongs to someone else.
    #[error("directory {path} is owned by uid {owner}, not by this process (uid {ours})")]
    NotOwned {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// Our effective uid.
        ours: u32,
    },
    /// The directory lets other users in.
    #[error(
        "directory {path} has mode {mode:04o}; it must not be accessible to group or others (0700)"
    )]
    TooOpen {
        /// The directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// An I/O error while creating the directory or binding.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
}

/// Why [`Server::open_cell`] refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenCellError {
    /// Cells of one kernel run one at a time; settle the previous one first.
    #[error("cell {active} is still active; settle it before opening cell {requested}")]
    AlreadyActive {
        /// The cell that is still open.
        active: String,
        /// The cell that was asked for.
        requested: String,
    },
}

/// A running tool-call server: docs/protocol.md ("The tool socket"). Dropping
/// it stops accepting, closes every connection (calls in flight are abandoned)
/// and removes the socket file.
#[derive(Debug)]
pub struct Server {
    core: Arc<Core>,
    endpoint: String,
    socket: Option<SocketFile>,
    shutdown: CancellationToken,
    runtime: tokio::runtime::Handle,
}

/// The socket file we created, to remove on drop only if it is still ours.
#[derive(Debug)]
struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> BindError + 'a {
    move |source| BindError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

fn our_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Whether a Unix-socket peer with `peer_uid` may talk to a server running as
/// `server_uid`: only the same user may.
pub fn peer_allowed(server_uid: u32, peer_uid: u32) -> bool {
    server_uid == peer_uid
}

/// Creates `dir` with mode 0700 if missing; refuses one that is not a plain
/// directory owned by us with no group/other permission bits.
fn prepare_dir(dir: &Path) -> Result<(), BindError> {
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_err("cannot create directory", dir)(e)),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(io_err("cannot inspect directory", dir))?;
    if !meta.file_type().is_dir() {
        return Err(BindError::NotADirectory(dir.to_path_buf()));
    }
    let ours = our_uid();
    if meta.uid() != ours {
        return Err(BindError::NotOwned {
            path: dir.to_path_buf(),
            owner: meta.uid(),
            ours,
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(BindError::TooOpen {
            path: dir.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

impl Server {
    /// Binds `dir/rpc.sock`, creating `dir` with mode 0700 if it is missing
    /// (an existing `dir` must be ours and 0700 or stricter). The socket is
    /// created inside that private directory and then set to 0600, so it is
    /// never reachable by another user, even for an instant. A stale socket
    /// file left at that path is replaced.
    ///
    /// Must be called inside a tokio runtime; the server's tasks run there.
    ///
    /// # Errors
    /// [`BindError`] naming the path and what is wrong with it.
    pub fn bind_unix(
        dir: impl AsRef<Path>,
        dispatch: Arc<dyn Dispatch>,
        config: ServerConfig,
    ) -> Result<Self, BindError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| BindError::NoRuntime)?;
        let dir = std::path::absolute(dir.as_ref())
            .map_err(io_err("cannot resolve directory", dir.as_ref()))?;
        let path = dir.join(SOCKET_NAME);
        let len = path.as_os_str().len();
        if len > MAX_SOCKET_PATH_BYTES {
            return Err(BindError::PathTooLong {
                path,
                len,
                max: MAX_SOCKET_PATH_BYTES,
            });
        }
        let Some(path_str) = path.to_str() else {
            return Err(BindError::NonUtf8Path(path));
        };
        let endpoint = format!("unix:{path_str}");
        prepare_dir(&dir)?;
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_dir() => {
                return Err(io_err("cannot bind over a directory", &path)(
                    io::ErrorKind::AlreadyExists.into(),
                ));
            }
            Ok(_) => {
                std::fs::remove_file(&path).map_err(io_err("cannot remove stale socket", &path))?
            }
            Err(_) => {}
        }
        let token = Token::generate()?;
        let listener = {
            let _guard = runtime.enter();
            UnixListener::bind(&path).map_err(io_err("cannot bind Unix socket", &path))?
        };
        let finish = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(io_err("cannot set mode 0600 on socket", &path))
            .and_then(|()| {
                std::fs::symlink_metadata(&path).map_err(io_err("cannot inspect socket", &path))
            });
        let meta = match finish {
            Ok(meta) => meta,
            Err(e) => {
                drop(listener);
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
        };
        let socket = SocketFile {
            path,
            dev: meta.dev(),
            ino: meta.ino(),
        };
        let fence = Fence {
            cgroup: config.peer_cgroup.clone(),
            check: config.peer_check.clone(),
            slots: Arc::new(tokio::sync::Semaphore::new(config.max_connections.max(1))),
            refusing: Arc::new(tokio::sync::Semaphore::new(MAX_REFUSALS_IN_FLIGHT)),
        };
        let server = Self::assemble(token, dispatch, config, endpoint, Some(socket), runtime);
        let core = Arc::clone(&server.core);
        let shutdown = server.shutdown.clone();
        server
            .runtime
            .spawn(accept_unix(listener, core, shutdown, fence));
        Ok(server)
    }

    /// Binds 127.0.0.1 on an ephemeral port (`[rpc] transport = "tcp"`).
    /// Any local user can connect to it; the token is the only check.
    ///
    /// # Errors
    /// [`BindError`] when the port cannot be bound.
    pub fn bind_tcp(dispatch: Arc<dyn Dispatch>, config: ServerConfig) -> Result<Self, BindError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| BindError::NoRuntime)?;
        let token = Token::generate()?;
        let loopback = Path::new("127.0.0.1:0");
        let std_listener = std::net::TcpListener::bind(("127.0.0.1", 0))
            .map_err(io_err("cannot bind", loopback))?;
        std_listener
            .set_nonblocking(true)
            .map_err(io_err("cannot configure", loopback))?;
        let port = std_listener
            .local_addr()
            .map_err(io_err("cannot read address of", loopback))?
            .port();
        let listener = {
            let _guard = runtime.enter();
            TcpListener::from_std(std_listener).map_err(io_err("cannot register", loopback))?
        };
        let endpoint = format!("tcp://127.0.0.1:{port}");
        let server = Self::assemble(token, dispatch, config, endpoint, None, runtime);
        let core = Arc::clone(&server.core);
        let shutdown = server.shutdown.clone();
        server.runtime.spawn(accept_tcp(listener, core, shutdown));
        Ok(server)
    }

    /// Accepts connections on `listener` too, under the same token and
    /// checks: the same port bound inside a kernel's sandbox (its own
    /// network namespace), handed over by the sandbox.
    ///
    /// # Errors
    /// [`BindError`] when the listener cannot be registered.
    pub fn accept_also(&self, listener: std::net::TcpListener) -> Result<(), BindError> {
        let at = Path::new("a sandbox's listener");
        listener
            .set_nonblocking(true)
            .map_err(io_err("cannot configure", at))?;
        let listener = {
            let _guard = self.runtime.enter();
            TcpListener::from_std(listener).map_err(io_err("cannot register", at))?
        };
        let core = Arc::clone(&self.core);
        self.runtime
            .spawn(accept_tcp(listener, core, self.shutdown.clone()));
        Ok(())
    }

    /// A server with no listener: connections come only from
    /// [`Server::serve_stream`] / [`testing::Connection::open`](crate::testing::Connection::open).
    /// For tests of the request logic that need no filesystem or port.
    ///
    /// # Errors
    /// [`BindError::NoRuntime`] outside a tokio runtime, or no randomness.
    pub fn unbound(dispatch: Arc<dyn Dispatch>, config: ServerConfig) -> Result<Self, BindError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| BindError::NoRuntime)?;
        let token = Token::generate()?;
        Ok(Self::assemble(
            token,
            dispatch,
            config,
            "memory:".to_owned(),
            None,
            runtime,
        ))
    }

    fn assemble(
        token: Token,
        dispatch: Arc<dyn Dispatch>,
        config: ServerConfig,
        endpoint: String,
        socket: Option<SocketFile>,
        runtime: tokio::runtime::Handle,
    ) -> Self {
        let core = Arc::new(Core {
            token,
            dispatch,
            active: Arc::new(ActiveSlot::default()),
            max_line: config.max_line_bytes,
        });
        Self {
            core,
            endpoint,
            socket,
            shutdown: CancellationToken::new(),
            runtime,
        }
    }

    /// The value for `TOOLCELL_RPC`: `unix:/abs/dir/rpc.sock` or
    /// `tcp://127.0.0.1:PORT` (`memory:` for an [`unbound`](Server::unbound) server).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The token clients must send (`TOOLCELL_RPC_TOKEN`).
    pub fn token(&self) -> &Token {
        &self.core.token
    }

    /// The socket file, for a Unix server.
    pub fn socket_path(&self) -> Option<&Path> {
        self.socket.as_ref().map(|s| s.path.as_path())
    }

    /// Installs a fresh authority for a cell: from now until the handle is
    /// settled or dropped, requests are checked against `spec` and
    /// dispatched with its context.
    ///
    /// # Errors
    /// [`OpenCellError::AlreadyActive`] while another cell's handle is alive.
    pub fn open_cell(&self, spec: CellSpec) -> Result<CellHandle, OpenCellError> {
        let mut active = self.core.active.lock();
        if let Some(current) = active.as_ref() {
            return Err(OpenCellError::AlreadyActive {
                active: current.cx.cell_id().to_owned(),
                requested: spec.id().to_owned(),
            });
        }
        let cell = Arc::new(CellState::new(spec));
        *active = Some(Arc::clone(&cell));
        drop(active);
        Ok(CellHandle::new(Arc::clone(&self.core.active), cell))
    }

    /// A handle that runs tool calls arriving over a private channel of the
    /// kernel's own (the in-band pipe of docs/protocol.md,
    /// "Remote kernels: the same protocol over a command's stdio") through the
    /// same checks as the socket, without the token: the channel is private. It
    /// stays usable after the server is dropped (calls are then refused
    /// `no_active_cell`, as every cell has settled).
    pub fn inband(&self) -> InbandCaller {
        InbandCaller {
            core: Arc::clone(&self.core),
        }
    }

    /// Serves one already-connected stream (any transport) until it closes
    /// or the server is dropped. No peer check is made.
    pub fn serve_stream<S>(&self, stream: S)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        spawn_connection(
            &self.runtime,
            stream,
            Arc::clone(&self.core),
            self.shutdown.clone(),
            None,
            None,
        );
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(sock) = &self.socket {
            // Remove the file only if it is still the socket we bound.
            if let Ok(meta) = std::fs::symlink_metadata(&sock.path)
                && meta.dev() == sock.dev
                && meta.ino() == sock.ino
                && let Err(e) = std::fs::remove_file(&sock.path)
            {
                tracing::warn!(path = %sock.path.display(), error = %e, "could not remove RPC socket");
            }
        }
    }
}

/// Runs in-band tool calls (see [`Server::inband`]).
#[derive(Debug, Clone)]
pub struct InbandCaller {
    core: Arc<Core>,
}

impl InbandCaller {
    /// Runs one call — active cell, tool known and enabled, blocked parameters,
    /// budget, argument validation, dispatch bounded by the cell's deadline, in
    /// the order of docs/protocol.md ("Checks, in order") — and returns the
    /// reply object exactly as the socket would send it
    /// (`{"ok":true,"result":…}` or `{"ok":false,"code","error"}`), without the
    /// trailing newline.
    pub async fn call(&self, tool: &str, args: serde_json::Value) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        let args = match args {
            serde_json::Value::Null => serde_json::Value::Object(serde_json::Map::new()),
            a @ serde_json::Value::Object(_) => a,
            _ => {
                wire::write_error(
                    &mut out,
                    ErrorCode::BadRequest,
                    "\"args\" must be a JSON object of named arguments",
                    None,
                );
                trim_newline(&mut out);
                return out;
            }
        };
        match self.core.check_call(tool, args, None, &mut out) {
            crate::handler::Step::Replied => {}
            crate::handler::Step::Dispatch(ticket) => self.core.run(ticket, &mut out).await,
        }
        trim_newline(&mut out);
        out
    }
}

fn trim_newline(out: &mut Vec<u8>) {
    while out.last() == Some(&b'\n') {
        out.pop();
    }
}

fn spawn_connection<S>(
    runtime: &tokio::runtime::Handle,
    stream: S,
    core: Arc<Core>,
    shutdown: CancellationToken,
    slot: Option<tokio::sync::OwnedSemaphorePermit>,
    spin: Option<std::os::fd::RawFd>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    runtime.spawn(async move {
        // Held while the connection lives.
        let _slot = slot;
        tokio::select! {
            () = shutdown.cancelled() => {}
            r = serve_connection(stream, &core, spin) => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "RPC connection ended with an error");
                }
            }
        }
    });
}

/// Pause after a failed accept (e.g. out of file descriptors) so the loop
/// does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(20);

/// Refusals answered at once at most: beyond it a refused connection is
/// closed without a word, so refused peers cannot hold descriptors either.
const MAX_REFUSALS_IN_FLIGHT: usize = 8;

/// Who may connect to a Unix server, and how many at once.
struct Fence {
    cgroup: Option<String>,
    check: Option<PeerCheck>,
    slots: Arc<tokio::sync::Semaphore>,
    refusing: Arc<tokio::sync::Semaphore>,
}

impl Fence {
    /// Whether the peer `pid` is this kernel's own (cgroup and check).
    fn admits(&self, pid: Option<i32>) -> bool {
        if self.cgroup.is_none() && self.check.is_none() {
            return true;
        }
        let Some(pid) = pid else { return false };
        self.cgroup.as_ref().is_none_or(|want| in_cgroup(pid, want))
            && self.check.as_ref().is_none_or(|c| c.allows(pid))
    }

    /// Answers a refused peer in a task of its own, when few are.
    fn refuse<F>(&self, runtime: &tokio::runtime::Handle, answer: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        if let Ok(permit) = Arc::clone(&self.refusing).try_acquire_owned() {
            runtime.spawn(async move {
                answer.await;
                drop(permit);
            });
        }
    }
}

async fn accept_unix(
    listener: UnixListener,
    core: Arc<Core>,
    shutdown: CancellationToken,
    fence: Fence,
) {
    let runtime = tokio::runtime::Handle::current();
    let ours = our_uid();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return,
            r = listener.accept() => r,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "accept on RPC socket failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let cred = match stream.peer_cred() {
            Ok(cred) => Some(cred),
            Err(e) => {
                tracing::warn!(error = %e, "could not read RPC peer credentials; refusing");
                None
            }
        };
        let peer = cred.map(|c| c.uid());
        if !peer.is_some_and(|uid| peer_allowed(ours, uid)) {
            tracing::warn!(peer_uid = ?peer, server_uid = ours, "RPC connection from another user refused");
            fence.refuse(&runtime, refuse_peer(stream, peer, ours));
            continue;
        }
        if !fence.admits(cred.and_then(|c| c.pid())) {
            tracing::warn!(peer_pid = ?cred.and_then(|c| c.pid()), "RPC connection from outside this kernel refused");
            fence.refuse(&runtime, refuse_outsider(stream));
            continue;
        }
        let Ok(slot) = Arc::clone(&fence.slots).try_acquire_owned() else {
            tracing::warn!("RPC connection refused: too many open connections for this kernel");
            refuse_busy(&stream);
            continue;
        };
        let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
        spawn_connection(
            &runtime,
            stream,
            Arc::clone(&core),
            shutdown.clone(),
            Some(slot),
            Some(fd),
        );
    }
}

/// Tells a peer over the connection cap why it is refused, without waiting
/// (the stream is closed right after).
fn refuse_busy(stream: &tokio::net::UnixStream) {
    let mut out = Vec::with_capacity(160);
    wire::write_error(
        &mut out,
        ErrorCode::BadToken,
        "connection refused: this kernel already has the most tool-call connections open at once; close some",
        None,
    );
    let _ = stream.try_write(&out);
}

/// Tells a peer from outside the kernel why it is refused, then closes.
async fn refuse_outsider(mut stream: tokio::net::UnixStream) {
    // Take the first request line (bounded, briefly) before answering, so a
    // client that writes then reads gets the refusal rather than EPIPE.
    let _ = tokio::time::timeout(Duration::from_millis(500), async {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 4096];
        let mut seen = 0usize;
        while let Ok(n) = stream.read(&mut buf).await {
            if n == 0 || buf[..n].contains(&b'\n') {
                break;
            }
            seen += n;
            if seen > 64 * 1024 {
                break;
            }
        }
    })
    .await;
    let mut out = Vec::with_capacity(160);
    wire::write_error(
        &mut out,
        ErrorCode::BadToken,
        "connection refused: only the kernel this socket belongs to (and the processes it started) may call its tools",
        None,
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&out)).await;
    let _ = stream.shutdown().await;
}

/// Tells a foreign peer why it is refused, then closes.
async fn refuse_peer(mut stream: tokio::net::UnixStream, peer: Option<u32>, ours: u32) {
    let mut out = Vec::with_capacity(160);
    let msg = match peer {
        Some(uid) => format!(
            "connection refused: the client runs as uid {uid}, but only uid {ours} may call tools"
        ),
        None => "connection refused: the client's uid could not be checked".to_owned(),
    };
    wire::write_error(&mut out, ErrorCode::BadToken, &msg, None);
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&out)).await;
    let _ = stream.shutdown().await;
}

async fn accept_tcp(listener: TcpListener, core: Arc<Core>, shutdown: CancellationToken) {
    let runtime = tokio::runtime::Handle::current();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((stream, _)) => {
                if let Err(e) = stream.set_nodelay(true) {
                    tracing::debug!(error = %e, "TCP_NODELAY failed");
                }
                spawn_connection(
                    &runtime,
                    stream,
                    Arc::clone(&core),
                    shutdown.clone(),
                    None,
                    None,
                );
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept on RPC port failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// Answers the lines of one connection in order until EOF. With `spin`
/// (the connection's descriptor, a local one), it waits for the next
/// request awake for a moment after each reply ([`crate::spin::Spin`]).
pub(crate) async fn serve_connection<S>(
    mut stream: S,
    core: &Core,
    spin: Option<std::os::fd::RawFd>,
) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut lines = LineBuf::new(core.max_line);
    let mut out = Vec::with_capacity(512);
    let mut spinner = crate::spin::Spin::default();
    let mut answered = false;
    loop {
        loop {
            out.clear();
            match lines.next_line() {
                Next::Line(line) => core.handle_line(line, &mut out).await,
                Next::TooLarge => {
                    wire::write_error(
                        &mut out,
                        ErrorCode::TooLarge,
                        &too_large_msg(core.max_line),
                        None,
                    );
                }
                Next::NeedMore => break,
            }
            stream.write_all(&out).await?;
            answered = true;
            if out.capacity() > 1024 * 1024 {
                out = Vec::with_capacity(512);
            }
        }
        if let Some(fd) = spin
            && std::mem::take(&mut answered)
        {
            spinner.wait(fd).await;
        }
        let n = stream.read_buf(lines.prepare_read()).await?;
        if n == 0 {
            if lines.in_overlong_line() {
                out.clear();
                wire::write_error(
                    &mut out,
                    ErrorCode::TooLarge,
                    &too_large_msg(core.max_line),
                    None,
                );
                stream.write_all(&out).await?;
            }
            return Ok(());
        }
    }
}
