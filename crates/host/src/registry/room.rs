//! Room under `max_kernels`: the counts decisions are made on
//! ([`Census`]), what to do when there is none ([`make_room`]: the warm
//! pool yields first, then the least recently used idle session is
//! evicted), and [`Inner::reserve`], which carries the decision out.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::session::{Slot, State};
use super::{ExecuteRequest, Inner};
use toolcell_kernel::kernel::Kernel;

/// How many kernels there are and may be, at one moment: what the
/// decisions about room and about the warm pool are made on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Census {
    /// Session kernels running or reserved.
    pub(super) live: usize,
    /// Ready pooled kernels.
    pub(super) pooled: usize,
    /// Pool spawns in flight (yielding ones included).
    pub(super) filling: usize,
    /// Pool spawns in flight whose kernel will be closed.
    pub(super) yielding: usize,
    /// Cells waiting for room.
    pub(super) waiting: usize,
    /// `max_kernels` (at least 1).
    pub(super) max: usize,
}

impl Census {
    /// Python processes there are or are about to be.
    pub(super) fn used(&self) -> usize {
        self.live + self.pooled + self.filling
    }
}

/// What to do so that one more session kernel fits in `max_kernels`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Room {
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
pub(super) fn make_room(c: Census, idle_victim: bool) -> Room {
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

/// What eviction looks at in a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Candidate {
    pub(super) live: bool,
    pub(super) busy: usize,
    pub(super) last_used: Instant,
}

/// The least recently used candidate that has a kernel and no cell running
/// or waiting (a busy kernel is never evicted).
pub(super) fn pick_lru<T>(candidates: impl IntoIterator<Item = (T, Candidate)>) -> Option<T> {
    candidates
        .into_iter()
        .filter(|(_, c)| c.live && c.busy == 0)
        .min_by_key(|(_, c)| c.last_used)
        .map(|(t, _)| t)
}

/// The least recently used idle live kernel of a session other than `slot`.
pub(super) fn lru_idle(st: &State, slot: &Slot) -> Option<Arc<Slot>> {
    pick_lru(
        st.slots
            .values()
            .filter(|s| !std::ptr::eq(Arc::as_ptr(s), slot))
            .map(|s| {
                let m = s.meta();
                let c = Candidate {
                    live: m.live,
                    busy: m.busy,
                    last_used: m.last_used,
                };
                (Arc::clone(s), c)
            }),
    )
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

impl Inner {
    /// Makes room for one more live kernel within `max_kernels` (pooled
    /// kernels included): closes a ready pooled kernel, or has a pool spawn
    /// in flight discarded, or evicts the least recently used idle kernel of
    /// another session, or waits for one to become idle.
    pub(super) async fn reserve(
        &self,
        slot: &Slot,
        deadline: Instant,
        req: &ExecuteRequest,
    ) -> Result<(), String> {
        let inner = self;
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
                () = req.cancelled() => return Err("the request was cancelled".into()),
                () = tokio::time::sleep_until(deadline) => {
                    return Err(format!(
                        "all {} kernels are busy running cells (max_kernels = {}); none of the code ran",
                        inner.opts.max_kernels, inner.opts.max_kernels
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn census(live: usize, pooled: usize, filling: usize, yielding: usize) -> Census {
        Census {
            live,
            pooled,
            filling,
            yielding,
            waiting: 0,
            max: 2,
        }
    }

    #[test]
    fn room_is_free_below_max_kernels_counting_pooled_and_in_flight_kernels() {
        assert_eq!(make_room(census(0, 0, 0, 0), false), Room::Free);
        assert_eq!(make_room(census(1, 0, 0, 0), true), Room::Free);
        // One session and one pooled kernel fill max_kernels = 2.
        assert_ne!(make_room(census(1, 1, 0, 0), true), Room::Free);
        assert_ne!(make_room(census(1, 0, 1, 0), true), Room::Free);
    }

    #[test]
    fn the_pool_yields_before_any_session_is_evicted() {
        // A ready pooled kernel goes first, even with an idle session.
        assert_eq!(make_room(census(1, 1, 0, 0), true), Room::DrainPooled);
        // Then a spawn in flight is given up...
        assert_eq!(make_room(census(1, 0, 1, 0), true), Room::YieldFill);
        // ...and, once given up, waited for rather than evicting.
        assert_eq!(make_room(census(1, 0, 1, 1), true), Room::Wait);
        // Only with no pool left is an idle session evicted.
        assert_eq!(make_room(census(2, 0, 0, 0), true), Room::Evict);
        assert_eq!(make_room(census(2, 0, 0, 0), false), Room::Wait);
    }

    #[test]
    fn eviction_picks_the_least_recently_used_idle_live_kernel() {
        let now = Instant::now();
        let at = |secs_ago: u64| now - Duration::from_secs(secs_ago);
        let c = |live, busy, ago| Candidate {
            live,
            busy,
            last_used: at(ago),
        };
        let picked = pick_lru([
            ("recent", c(true, 0, 1)),
            ("oldest-but-busy", c(true, 1, 100)),
            ("old", c(true, 0, 50)),
            ("oldest-no-kernel", c(false, 0, 200)),
        ]);
        assert_eq!(picked, Some("old"));
        assert_eq!(pick_lru([("busy", c(true, 2, 9))]), None);
        assert_eq!(pick_lru(Vec::<(u8, Candidate)>::new()), None);
    }
}
