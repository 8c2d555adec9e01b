//! A handle on one process that its pid cannot outlive: `pidfd_open(2)`.
//!
//! A pid is recycled once its process is reaped, so a pid kept for later
//! may name a stranger by then; a pidfd keeps naming the process it was
//! opened for. [`Pidfd::signal`] never reaches another process, and
//! [`Pidfd::exited`] says whether it has ended. Used for a sandbox's init,
//! whose end ends its whole PID namespace (see
//! [`crate::process::Tree::namespace`]).

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use nix::libc as c;
use nix::sys::signal::Signal;

/// An open pidfd.
#[derive(Debug)]
pub struct Pidfd(OwnedFd);

impl Pidfd {
    /// Opens `pid`. Linux 5.3 and later; `None` when the process is gone,
    /// or the kernel has no pidfds.
    pub fn open(pid: u32) -> Option<Pidfd> {
        let pid = c::pid_t::try_from(pid).ok().filter(|&p| p > 0)?;
        // SAFETY: pidfd_open with integer arguments; the result is a new
        // descriptor we own, or -1.
        let fd = unsafe { c::syscall(c::SYS_pidfd_open, pid, c::PIDFD_NONBLOCK) };
        let fd = i32::try_from(fd).ok().filter(|&f| f >= 0)?;
        // SAFETY: `fd` was just returned to us and is not owned elsewhere.
        Some(Pidfd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Sends `signal` to the process; false when it has ended (or the
    /// signal was refused).
    pub fn signal(&self, signal: Signal) -> bool {
        // SAFETY: pidfd_send_signal on our own descriptor, no siginfo.
        let r = unsafe {
            c::syscall(
                c::SYS_pidfd_send_signal,
                self.0.as_raw_fd(),
                signal as c::c_int,
                std::ptr::null::<c::siginfo_t>(),
                0,
            )
        };
        r == 0
    }

    /// Whether the process has ended (a pidfd reads as ready then).
    pub fn exited(&self) -> bool {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let mut fds = [PollFd::new(self.0.as_fd(), PollFlags::POLLIN)];
        matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_pidfd_signals_its_process_and_sees_it_end() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let fd = Pidfd::open(child.id()).unwrap();
        assert!(!fd.exited());
        assert!(fd.signal(Signal::SIGKILL));
        let _ = child.wait();
        assert!(fd.exited());
        // Reaped: the handle does not reach whatever gets the pid next.
        assert!(!fd.signal(Signal::SIGKILL));
        assert!(Pidfd::open(0).is_none());
    }
}
