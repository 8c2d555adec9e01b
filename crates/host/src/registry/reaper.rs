//! Background upkeep: the idle reaper (kernels idle longer than
//! `idle_timeout` go, not only when another cell arrives; on the same
//! period, what dead hosts left on lifecycle remotes is swept again) and
//! the spill pruner (see [`crate::spill`]). Both hold only a `Weak` to the
//! registry.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::Inner;
use super::pool::fill_pool;
use super::session::{SessionKey, Slot};

/// How often the reaper looks: a quarter of `idle_timeout`, within 50 ms
/// and 30 s.
pub(super) fn reap_period(idle_timeout: Duration) -> Duration {
    (idle_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(30))
}

/// Whether a slot is reaped: no cell running or waiting, and idle for at
/// least `idle_timeout`.
pub(super) fn reapable(busy: usize, idle_for: Duration, idle_timeout: Duration) -> bool {
    busy == 0 && idle_for >= idle_timeout
}

/// Shortest time between two sweeps of dead hosts' records.
const SWEEP_MIN_PERIOD: Duration = Duration::from_secs(1);

/// Reaps idle kernels every [`reap_period`] until the registry is gone,
/// and sweeps what dead hosts left on the remotes (as at the start) every
/// [`reap_period`] too, at least [`SWEEP_MIN_PERIOD`] apart: a host killed
/// while this one runs — or one whose killed process is a zombie its
/// parent has not reaped, which only now counts as dead — is not left for
/// the next start.
pub(super) async fn reap_loop(inner: Weak<Inner>) {
    let mut last_sweep = tokio::time::Instant::now();
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let period = reap_period(strong.opts.idle_timeout);
        drop(strong);
        tokio::time::sleep(period).await;
        let Some(strong) = inner.upgrade() else {
            return;
        };
        if last_sweep.elapsed() >= period.max(SWEEP_MIN_PERIOD) {
            last_sweep = tokio::time::Instant::now();
            strong.lifecycle.sweep_dead_hosts(&strong.opts.remotes);
        }
        let victims = take_idle(&strong);
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
            // Their room may go back to the warm pool.
            fill_pool(&strong);
        }
    }
}

/// Removes the reapable slots from the registry (remembering their keys
/// for `state_reset`) and returns them.
fn take_idle(inner: &Inner) -> Vec<Arc<Slot>> {
    let idle = inner.opts.idle_timeout;
    let mut st = inner.state();
    let keys: Vec<SessionKey> = st
        .slots
        .values()
        .filter(|s| {
            let m = s.meta();
            reapable(m.busy, m.last_used.elapsed(), idle)
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
}

/// Prunes the spill directory now and every `spill_prune_every` (see
/// [`crate::spill`]), keeping what live sessions' results report.
pub(super) async fn prune_loop(inner: Weak<Inner>) {
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
        let mut keep = crate::spill::Keep::default();
        for slot in strong.state().slots.values() {
            let m = slot.meta();
            keep.names.extend(m.spills.iter().cloned());
            // A cell running now may be writing a spill file it has not
            // reported yet.
            if m.busy > 0 && !m.kernel_id.is_empty() {
                keep.prefixes.push(format!("{}-cell", m.kernel_id));
            }
        }
        drop(strong);
        let pruned =
            tokio::task::spawn_blocking(move || crate::spill::prune(&dir, rules, &keep)).await;
        if let Ok(p) = pruned
            && p.removed > 0
        {
            tracing::info!("removed {} old spill files ({} bytes)", p.removed, p.bytes);
        }
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_unbusy_kernels_are_reaped_and_the_period_is_bounded() {
        let idle = Duration::from_secs(60);
        assert!(reapable(0, Duration::from_secs(60), idle));
        assert!(!reapable(0, Duration::from_secs(59), idle));
        assert!(!reapable(1, Duration::from_secs(600), idle), "busy");
        assert_eq!(reap_period(idle), Duration::from_secs(15));
        assert_eq!(
            reap_period(Duration::from_millis(10)),
            Duration::from_millis(50)
        );
        assert_eq!(
            reap_period(Duration::from_secs(3600)),
            Duration::from_secs(30)
        );
    }
}
