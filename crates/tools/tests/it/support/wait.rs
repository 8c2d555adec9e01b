//! Waiting for a state instead of sleeping for a guessed time.
#![allow(dead_code)]

use std::time::{Duration, Instant};

/// How long [`wait_until`] waits for a condition a test synchronises on:
/// generous, since only a broken condition takes anywhere near it.
pub(crate) const SYNC_LIMIT: Duration = Duration::from_secs(60);

/// Polls `cond` every 10 ms until it holds; panics naming `what` if it does
/// not within [`SYNC_LIMIT`].
pub(crate) async fn wait_until(what: &str, cond: impl FnMut() -> bool) {
    assert!(
        eventually(SYNC_LIMIT, cond).await,
        "gave up after {SYNC_LIMIT:?} waiting until {what}"
    );
}

/// Polls `cond` every 10 ms for at most `within`; whether it came to hold.
pub(crate) async fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
