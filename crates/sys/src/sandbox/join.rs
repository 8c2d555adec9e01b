//! Running another command inside a sandbox that already runs: its
//! namespaces joined through `/proc/<pid>/ns`, then the same lock-down as
//! the sandboxed program.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::Arc;

use nix::libc as c;

use super::{SandboxError, child, cstring};

/// The namespaces of a sandboxed process, opened in the host; the user
/// namespace first (it gives the rights to join the others).
#[derive(Debug)]
pub struct Join {
    fds: Vec<OwnedFd>,
    cwd: CString,
    filters: Arc<Vec<seccompiler::BpfProgram>>,
}

/// What a `pre_exec` closure needs to join: cheap to clone.
#[derive(Debug, Clone)]
pub struct JoinChild {
    fds: Arc<Vec<RawFd>>,
    cwd: CString,
    filters: Arc<Vec<seccompiler::BpfProgram>>,
}

const KINDS: [&str; 7] = ["user", "mnt", "pid", "net", "ipc", "uts", "cgroup"];

impl Join {
    /// Opens the namespaces of `pid`, which must still have started at
    /// `started` (clock ticks, `/proc/<pid>/stat`), so a recycled pid is
    /// never joined. `cwd` is where the command starts inside.
    ///
    /// # Errors
    /// [`SandboxError::Refused`] when the process is gone or is not the
    /// one meant.
    pub fn open(pid: u32, started: Option<u64>, cwd: &Path) -> Result<Self, SandboxError> {
        let gone = || SandboxError::Refused(format!("the sandboxed process {pid} is gone"));
        if crate::procfs::start_time(pid) != started || started.is_none() {
            return Err(gone());
        }
        let mut fds = Vec::with_capacity(KINDS.len());
        for kind in KINDS {
            let f = std::fs::File::open(format!("/proc/{pid}/ns/{kind}")).map_err(|_| gone())?;
            fds.push(OwnedFd::from(f));
        }
        if crate::procfs::start_time(pid) != started {
            return Err(gone());
        }
        Ok(Self {
            fds,
            cwd: cstring("working directory", cwd)?,
            filters: Arc::new(super::filter::program()?),
        })
    }

    /// The part the child needs; valid while `self` lives.
    pub fn child(&self) -> JoinChild {
        JoinChild {
            fds: Arc::new(self.fds.iter().map(AsRawFd::as_raw_fd).collect()),
            cwd: self.cwd.clone(),
            filters: Arc::clone(&self.filters),
        }
    }
}

impl JoinChild {
    /// Joins the namespaces, forks once more (a PID namespace is joined by
    /// the children of who joins it: the parent stays to wait and ends as
    /// the child does) and locks the child down. Returns in the child.
    ///
    /// # Errors
    /// The `errno` of the failing step.
    ///
    /// # Safety
    /// Call only between fork and exec.
    pub unsafe fn enter(&self) -> std::io::Result<()> {
        for &fd in self.fds.iter() {
            // SAFETY: setns with a namespace descriptor we hold, in a
            // single-threaded child.
            if unsafe { c::setns(fd, 0) } < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        // SAFETY: chdir to the plan's path (joining a mount namespace put
        // us at its root).
        if unsafe { c::chdir(self.cwd.as_ptr()) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        child::fork_and_wait().map_err(std::io::Error::from_raw_os_error)?;
        child::lock_down(&self.filters).map_err(|(_, e)| std::io::Error::from_raw_os_error(e))
    }
}
