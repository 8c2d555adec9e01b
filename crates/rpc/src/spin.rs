//! Waiting awake for a local peer's next request, briefly.
//!
//! A cell calling tools in a loop sends its next request tens of
//! microseconds after the last reply. If the host's thread sleeps in
//! between, its CPU may go idle, and on a virtual machine waking an idle
//! CPU costs about as much as the whole call (36–53 µs here). So after a
//! reply the connection looks at its socket without blocking, yielding the
//! CPU between looks (the peer may need this very CPU) and letting the
//! runtime's other tasks run (other connections, other kernels: the wait
//! never holds the worker), for up to [`BUDGET`]. When the looks keep
//! missing (a cell that went on to compute), or a yield finds the CPU
//! wanted by someone else (a busy machine, where no CPU idles and spinning
//! only takes time from others), it stops looking for a while, longer each
//! time. The stub in the kernel does the same while it waits for a reply.

use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// How long one wait stays awake.
pub(crate) const BUDGET: Duration = Duration::from_micros(50);

/// Misses in a row after which waits sleep at once…
const MISSES: u32 = 3;
/// …for this many replies, doubled at each pause up to [`PAUSE_MAX`]
/// until a wait sees its request again.
const PAUSE: u32 = 64;
const PAUSE_MAX: u32 = 1 << 14;
/// A yield that took longer than this ran someone else: the CPU is wanted.
const CONTENDED: Duration = Duration::from_micros(20);
/// Every this many looks, the wait lets the runtime's other tasks run (a
/// task yield costs more than a look: not at every one).
const TASK_YIELD_EVERY: u32 = 4;

/// One connection's spinning state.
#[derive(Debug)]
pub(crate) struct Spin {
    misses: u32,
    paused: u32,
    next_pause: u32,
}

impl Default for Spin {
    fn default() -> Self {
        Self {
            misses: 0,
            paused: 0,
            next_pause: PAUSE,
        }
    }
}

impl Spin {
    /// Waits up to [`BUDGET`] for `fd` to be readable (data or EOF), with
    /// the CPU awake; returns whether it became readable.
    pub(crate) async fn wait(&mut self, fd: RawFd) -> bool {
        if self.paused > 0 {
            self.paused -= 1;
            return false;
        }
        let end = Instant::now() + BUDGET;
        let mut looks = 0u32;
        loop {
            if readable(fd) {
                self.misses = 0;
                self.next_pause = PAUSE;
                return true;
            }
            if Instant::now() >= end {
                self.misses += 1;
                if self.misses >= MISSES {
                    self.pause();
                }
                return false;
            }
            if looks.is_multiple_of(TASK_YIELD_EVERY) {
                // The runtime's other tasks (other connections and kernels)
                // get their turn; the time they take counts against the
                // budget.
                tokio::task::yield_now().await;
            }
            looks += 1;
            let before = Instant::now();
            std::thread::yield_now();
            if before.elapsed() > CONTENDED {
                // The CPU was wanted elsewhere meanwhile.
                self.pause();
                return false;
            }
        }
    }

    fn pause(&mut self) {
        self.misses = 0;
        self.paused = self.next_pause;
        self.next_pause = (self.next_pause * 2).min(PAUSE_MAX);
    }
}

/// Whether a read of `fd` would not block now: a byte waits, the peer
/// closed, or the socket failed.
fn readable(fd: RawFd) -> bool {
    let mut byte = 0u8;
    // SAFETY: a one-byte peek into a live local; `fd` is the connection's
    // own socket, open while its connection task runs.
    let n = unsafe {
        nix::libc::recv(
            fd,
            (&raw mut byte).cast(),
            1,
            nix::libc::MSG_PEEK | nix::libc::MSG_DONTWAIT,
        )
    };
    n >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(nix::libc::EAGAIN)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[tokio::test(flavor = "current_thread")]
    async fn a_wait_sees_data_and_pauses_after_misses() {
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut spin = Spin::default();
        // Nothing comes: three misses (or one wait that found the CPU
        // wanted elsewhere) pause the spin.
        assert!(!spin.wait(b.as_raw_fd()).await);
        assert!(!spin.wait(b.as_raw_fd()).await);
        assert!(!spin.wait(b.as_raw_fd()).await);
        assert!(spin.paused > 0, "{spin:?}");
        // Paused: the next waits return at once without looking.
        a.write_all(b"x").unwrap();
        assert!(!spin.wait(b.as_raw_fd()).await);
        let mut spin = Spin::default();
        assert!(spin.wait(b.as_raw_fd()).await, "a byte waits");
        assert_eq!(spin.next_pause, PAUSE, "a hit resets the pause length");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_closed_peer_counts_as_readable() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        drop(a);
        assert!(Spin::default().wait(b.as_raw_fd()).await);
    }

    /// A waiting connection lets the runtime's other tasks run: on a
    /// one-thread runtime, another task makes progress during the wait.
    #[tokio::test(flavor = "current_thread")]
    async fn a_wait_does_not_hold_the_runtime() {
        let (_a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let ticks = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let t2 = std::sync::Arc::clone(&ticks);
        let other = tokio::spawn(async move {
            loop {
                t2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        });
        tokio::task::yield_now().await;
        let before = ticks.load(std::sync::atomic::Ordering::Relaxed);
        assert!(!Spin::default().wait(b.as_raw_fd()).await);
        let during = ticks.load(std::sync::atomic::Ordering::Relaxed) - before;
        other.abort();
        assert!(during > 0, "the other task never ran during the wait");
    }
}
