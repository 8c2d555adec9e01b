//! A sandbox for one process tree, built from the kernel's own parts: user,
//! PID, mount, IPC, UTS, network and cgroup namespaces, a read-only view of
//! the machine with a few paths writable and others hidden, a minimal
//! `/dev`, no capabilities, `no_new_privs` and a seccomp filter.
//!
//! The caller prepares a [`Prepared`] in the host (paths checked and turned
//! into C strings, the seccomp program compiled), then calls
//! [`ChildSandbox::enter`] from its `pre_exec` closure. Three processes come
//! out of that one fork:
//!
//! - the **outer** process (the pid the caller's `Command` knows) creates
//!   the namespaces, maps its own uid and gid, forks the init and waits for
//!   it; it exits the way the sandboxed program did, so the caller's
//!   `wait()` still tells an exit code from a signal;
//! - the **init** (pid 1 inside) builds the mount view, mounts a `/proc`
//!   of the new PID namespace, brings loopback up, binds the listeners the
//!   host asked for, checks from inside that the sandbox holds, reports to
//!   the host over a socket and reaps orphans until the program ends; when
//!   it exits, the kernel kills everything left in the namespace;
//! - the **program** (pid 2 inside) drops every capability, sets
//!   `no_new_privs`, installs the seccomp filter and returns to the caller's
//!   closure, which execs.
//!
//! The host then reads the init's report with [`Prepared::started`]: the
//! program's pid as the host sees it and the listeners (their descriptors
//! passed over the socket), or why the sandbox could not be built.
//! [`Join`] runs another command inside an existing sandbox (the
//! `terminal` tool), and [`View`] answers, for tools that act on the host's
//! files for a sandboxed caller, whether the caller could read or write a
//! path itself.
//!
//! ```no_run
//! use std::os::unix::process::CommandExt;
//! use std::path::PathBuf;
//! use std::time::Duration;
//! use toolcell_sys::sandbox::{Layout, Net, Prepared};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let project = PathBuf::from("/home/me/project");
//! let prepared = Prepared::new(&Layout {
//!     writable: vec![project.clone()],
//!     hidden: vec![PathBuf::from("/home/me/.ssh")],
//!     readable: Vec::new(),
//!     tmp_bytes: 64 << 20,
//!     cwd: project.clone(),
//!     net: Net::Isolated { listen: Vec::new() },
//! })?;
//! let child = prepared.child();
//! let mut cmd = std::process::Command::new("python3");
//! cmd.args(["-c", "import os; print(os.getpid())"]).current_dir(&project);
//! // SAFETY: `enter` is made to run between fork and exec.
//! unsafe { cmd.pre_exec(move || child.enter()) };
//! let mut running = cmd.spawn()?;
//! let started = prepared.started(Some(running.id()), Duration::from_secs(10))?;
//! // `started.pid` is the program on this host; inside it is 2.
//! running.wait()?;
//! # let _ = started;
//! # Ok(())
//! # }
//! ```

mod child;
mod filter;
mod join;
mod view;

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use filter::{BLOCKED, program as filter_program};
pub use join::{Join, JoinChild};
pub use view::{Denied, View, resolve};

/// Why a sandbox could not be prepared or did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// A path of the layout is unusable (missing, relative, not UTF-8-free
    /// of NUL bytes).
    #[error("{what} {path}: {reason}")]
    Path {
        /// Which list it came from (`writable path`, `hidden path`).
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The seccomp filter could not be built for this machine.
    #[error("the seccomp filter cannot be built: {0}")]
    Filter(String),
    /// The socket between host and sandbox could not be made.
    #[error("cannot create the sandbox's report socket: {0}")]
    Socket(std::io::Error),
    /// The sandbox was refused or failed inside; the reason is what the
    /// failing step said (`unshare: Operation not permitted`, ...).
    #[error("{0}")]
    Refused(String),
}

/// Whether the sandbox has a network of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Net {
    /// The host's network, no network namespace.
    Host,
    /// A network namespace with only loopback; the init binds a TCP
    /// listener on `127.0.0.1:<port>` inside it for each port and hands it
    /// to the host (a proxy, a tool server).
    Isolated {
        /// Ports to listen on inside the sandbox.
        listen: Vec<u16>,
    },
}

/// What the sandbox makes of the machine's filesystem. Paths are absolute
/// and as the host names them; inside they keep those names.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Directories (or files) that stay writable: they must exist.
    pub writable: Vec<PathBuf>,
    /// Paths shown empty: a directory as an empty read-only directory, a
    /// file as an empty file. Missing ones are skipped.
    pub hidden: Vec<PathBuf>,
    /// Paths inside hidden ones shown again, read-only (a file the
    /// sandbox needs from a hidden directory, such as a `resolv.conf` that
    /// lives in `/run`). Missing ones are skipped.
    pub readable: Vec<PathBuf>,
    /// Size of the private `/tmp` in bytes.
    pub tmp_bytes: u64,
    /// The working directory inside (the program `chdir`s there again once
    /// the view is built).
    pub cwd: PathBuf,
    /// The network.
    pub net: Net,
}

/// One mount step of the view, in the order the init runs them.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// A tmpfs over a directory; read-only once every step ran.
    HideDir(CString),
    /// An empty file over a file.
    HideFile(CString),
    /// A writable directory, cloned before anything was covered (index into
    /// the writable sources) and attached here again.
    Writable(usize, CString),
    /// A path inside a hidden one, cloned before anything was covered
    /// (index into the same sources as writable paths) and attached here
    /// again, read-only; its parent is made in the hiding tmpfs first.
    Readable {
        index: usize,
        path: CString,
        parent: CString,
        dir: bool,
    },
    /// The private `/tmp`.
    Tmp,
    /// The minimal `/dev`.
    Dev,
    /// A `/proc` of the sandbox's own PID namespace.
    Proc,
}

/// Everything the child needs, built in the host: no path is looked at and
/// nothing is allocated for the view after the fork but what the steps say.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) writable: Vec<CString>,
    pub(crate) steps: Vec<Step>,
    pub(crate) tmp_opts: CString,
    pub(crate) cwd: CString,
    pub(crate) uid_map: Vec<u8>,
    pub(crate) gid_map: Vec<u8>,
    pub(crate) listen: Option<Vec<u16>>,
    pub(crate) filter: Arc<Vec<seccompiler::BpfProgram>>,
}

/// A sandbox ready to be entered by one child.
#[derive(Debug)]
pub struct Prepared {
    plan: Arc<Plan>,
    host_end: OwnedFd,
    child_end: OwnedFd,
}

/// What [`ChildSandbox::enter`] needs inside a `pre_exec` closure: cheap to
/// clone, `Send + Sync`.
#[derive(Debug, Clone)]
pub struct ChildSandbox {
    plan: Arc<Plan>,
    report: RawFd,
}

/// A sandbox that started: the program's pid as the host sees it, and the
/// listeners the layout asked for, in its order.
#[derive(Debug)]
pub struct Started {
    /// The sandboxed program (pid 2 inside).
    pub pid: u32,
    /// The init (pid 1 inside); 0 when it had already ended by the time
    /// the host looked (the program ended at once).
    pub init: u32,
    /// A handle on the init, opened while it still was the outer
    /// process's child (so never a recycled pid): its end is the end of
    /// everything in the namespace. `None` when it had already ended.
    pub namespace: Option<crate::pidfd::Pidfd>,
    /// One per port of [`Net::Isolated`].
    pub listeners: Vec<std::net::TcpListener>,
}

fn cstring(what: &'static str, p: &Path) -> Result<CString, SandboxError> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| SandboxError::Path {
        what,
        path: p.to_path_buf(),
        reason: "it contains a NUL byte".into(),
    })
}

/// Directory depth, for ordering steps parents first.
fn depth(p: &Path) -> usize {
    p.components().count()
}

impl Prepared {
    /// Checks the layout and builds the plan.
    ///
    /// # Errors
    /// [`SandboxError::Path`] for a relative or missing writable path,
    /// [`SandboxError::Filter`], [`SandboxError::Socket`].
    pub fn new(layout: &Layout) -> Result<Self, SandboxError> {
        let mut ordered: Vec<(usize, u8, Step)> = Vec::new();
        let mut writable = Vec::new();
        for w in &layout.writable {
            if !w.is_absolute() {
                return Err(SandboxError::Path {
                    what: "writable path",
                    path: w.clone(),
                    reason: "it is not absolute".into(),
                });
            }
            if std::fs::symlink_metadata(w).is_err() {
                return Err(SandboxError::Path {
                    what: "writable path",
                    path: w.clone(),
                    reason: "it does not exist".into(),
                });
            }
            let c = cstring("writable path", w)?;
            // A writable path that is `/` itself, or the same as another,
            // needs no clone of its own.
            if w == Path::new("/") || writable.contains(&c) {
                continue;
            }
            ordered.push((depth(w), 2, Step::Writable(writable.len(), c.clone())));
            writable.push(c);
        }
        for r in &layout.readable {
            let Ok(meta) = std::fs::symlink_metadata(r) else {
                continue;
            };
            let Some(parent) = r.parent().filter(|_| r.is_absolute()) else {
                continue;
            };
            if meta.file_type().is_symlink() {
                continue;
            }
            let c = cstring("readable path", r)?;
            let step = Step::Readable {
                index: writable.len(),
                path: c.clone(),
                parent: cstring("readable path", parent)?,
                dir: meta.is_dir(),
            };
            ordered.push((depth(r), 4, step));
            writable.push(c);
        }
        for h in &layout.hidden {
            let Ok(meta) = std::fs::symlink_metadata(h) else {
                continue;
            };
            if !h.is_absolute() || meta.file_type().is_symlink() {
                continue;
            }
            let c = cstring("hidden path", h)?;
            let step = if meta.is_dir() {
                Step::HideDir(c)
            } else {
                Step::HideFile(c)
            };
            ordered.push((depth(h), 3, step));
        }
        ordered.push((depth(Path::new("/tmp")), 1, Step::Tmp));
        ordered.push((depth(Path::new("/dev")), 1, Step::Dev));
        ordered.push((depth(Path::new("/proc")), 1, Step::Proc));
        // Parents first; at one depth the private /tmp, /dev and /proc,
        // then writable paths, then hidden ones (a hidden path inside a
        // writable one covers it), then readable ones.
        ordered.sort_by_key(|(d, kind, _)| (*d, *kind));
        let uid = nix::unistd::geteuid().as_raw();
        let gid = nix::unistd::getegid().as_raw();
        let (a, b) = std::os::unix::net::UnixDatagram::pair().map_err(SandboxError::Socket)?;
        // The report's credentials name the program's pid, translated into
        // ours by the kernel.
        nix::sys::socket::setsockopt(&a, nix::sys::socket::sockopt::PassCred, &true)
            .map_err(|e| SandboxError::Socket(e.into()))?;
        Ok(Self {
            plan: Arc::new(Plan {
                writable,
                steps: ordered.into_iter().map(|(_, _, s)| s).collect(),
                tmp_opts: CString::new(format!("size={},mode=1777", layout.tmp_bytes.max(4096)))
                    .map_err(|e| SandboxError::Filter(e.to_string()))?,
                cwd: cstring("working directory", &layout.cwd)?,
                uid_map: format!("{uid} {uid} 1\n").into_bytes(),
                gid_map: format!("{gid} {gid} 1\n").into_bytes(),
                listen: match &layout.net {
                    Net::Host => None,
                    Net::Isolated { listen } => Some(listen.clone()),
                },
                filter: compiled_filter()?,
            }),
            host_end: OwnedFd::from(a),
            child_end: OwnedFd::from(b),
        })
    }

    /// The part the child needs; valid while `self` lives (keep it until
    /// the `Command` has spawned).
    pub fn child(&self) -> ChildSandbox {
        ChildSandbox {
            plan: Arc::clone(&self.plan),
            report: self.child_end.as_raw_fd(),
        }
    }

    /// After the spawn: waits up to `timeout` for the init's report, and
    /// finds the program's pid from `outer` (the pid the `Command` got).
    /// Blocking: run it off the async executor.
    ///
    /// # Errors
    /// [`SandboxError::Refused`] with the step that failed inside, or
    /// "no report" when the sandbox died without one.
    pub fn started(self, outer: Option<u32>, timeout: Duration) -> Result<Started, SandboxError> {
        drop(self.child_end);
        let (text, fds, program) = receive(&self.host_end, timeout)?;
        let text = String::from_utf8_lossy(&text).trim().to_string();
        if let Some(reason) = text.strip_prefix("fail ") {
            return Err(SandboxError::Refused(reason.to_string()));
        }
        if text != "ok" {
            return Err(SandboxError::Refused(
                "the sandbox ended before it reported".into(),
            ));
        }
        let outer = outer.ok_or_else(|| SandboxError::Refused("the sandbox has no pid".into()))?;
        // The program may already have ended (and the init with it): its
        // pid came with the report; the init's is only for the record.
        let pid = program.ok_or_else(|| {
            SandboxError::Refused("the sandbox's report did not name its program".into())
        })?;
        let init = only_child(outer).unwrap_or(0);
        // The outer process forks nothing but the init: if the init is
        // still its child after the open, the handle is the init's.
        let namespace = crate::pidfd::Pidfd::open(init).filter(|_| only_child(outer) == Some(init));
        let listeners = fds
            .into_iter()
            .map(std::net::TcpListener::from)
            .collect::<Vec<_>>();
        Ok(Started {
            pid,
            init,
            namespace,
            listeners,
        })
    }

    /// Why the child refused, when the spawn itself failed (the outer
    /// process could not create the namespaces).
    pub fn failure(self) -> Option<String> {
        drop(self.child_end);
        let (text, _, _) = receive(&self.host_end, Duration::from_millis(50)).ok()?;
        String::from_utf8_lossy(&text)
            .trim()
            .strip_prefix("fail ")
            .map(str::to_string)
    }
}

/// The one child `pid` has (read from `/proc/<pid>/task/<pid>/children`).
fn only_child(pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// What a report brought: its text, the descriptors that came with it,
/// and the pid its credentials named (in this process's PID namespace).
type Report = (Vec<u8>, Vec<OwnedFd>, Option<u32>);

/// Reads one report datagram and the descriptors that came with it.
fn receive(sock: &OwnedFd, timeout: Duration) -> Result<Report, SandboxError> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    use std::os::fd::AsFd;
    let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
    let mut pfd = [PollFd::new(sock.as_fd(), PollFlags::POLLIN)];
    match poll(&mut pfd, PollTimeout::from(ms)) {
        Ok(0) => {
            return Err(SandboxError::Refused(format!(
                "the sandbox did not report within {timeout:?}"
            )));
        }
        Ok(_) => {}
        Err(e) => {
            return Err(SandboxError::Refused(format!(
                "waiting for its report: {e}"
            )));
        }
    }
    let mut buf = vec![0u8; 1024];
    let mut cmsg = nix::cmsg_space!([RawFd; 8], nix::libc::ucred);
    let mut iov = [std::io::IoSliceMut::new(&mut buf)];
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(|e| SandboxError::Refused(format!("reading its report: {e}")))?;
    let mut fds = Vec::new();
    let mut pid = None;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            match c {
                ControlMessageOwned::ScmRights(list) => {
                    // SAFETY: the kernel just installed these descriptors
                    // in this process for us; nothing else owns them.
                    fds.extend(
                        list.into_iter()
                            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                    );
                }
                ControlMessageOwned::ScmCredentials(cred) => {
                    pid = u32::try_from(cred.pid()).ok().filter(|&p| p > 0);
                }
                _ => {}
            }
        }
    }
    let n = msg.bytes;
    buf.truncate(n);
    Ok((buf, fds, pid))
}

impl ChildSandbox {
    /// Builds the sandbox around the calling process and returns in the
    /// sandboxed program, ready to exec. For a `pre_exec` closure only:
    /// the calling process must be a freshly forked, single-threaded child.
    /// The outer process and the init never return from here.
    ///
    /// # Errors
    /// The `errno` of a step that failed in the outer process (the reason
    /// also goes to the host's report).
    ///
    /// # Safety
    /// Call only between fork and exec.
    pub unsafe fn enter(&self) -> std::io::Result<()> {
        // SAFETY: forwarded: we are between fork and exec.
        unsafe { child::enter(&self.plan, self.report) }
    }
}

/// The seccomp programs, compiled once per process: they are the same for
/// every sandbox, and compiling them on every spawn cost time on the
/// first cell's path.
fn compiled_filter() -> Result<Arc<Vec<seccompiler::BpfProgram>>, SandboxError> {
    static COMPILED: std::sync::OnceLock<Result<Arc<Vec<seccompiler::BpfProgram>>, String>> =
        std::sync::OnceLock::new();
    COMPILED
        .get_or_init(|| filter::program().map(Arc::new).map_err(|e| e.to_string()))
        .clone()
        .map_err(SandboxError::Filter)
}
