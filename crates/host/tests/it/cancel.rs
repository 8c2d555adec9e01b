//! `ExecuteRequest::cancel`: one request cancelled, before its cell is sent
//! (it never runs) or while it runs (that cell alone is interrupted).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{Fixture, assert_success, live_channel, show, wait_live, wait_until};
use tokio_util::sync::CancellationToken;
use toolcell_host::ExecuteRequest;
use toolcell_kernel::Status;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_cancelled_before_it_is_made_starts_nothing() {
    let f = Fixture::new();
    let token = CancellationToken::new();
    token.cancel();
    let marker = f.work().join("ran");
    let r = f
        .reg
        .execute(
            ExecuteRequest::new(format!("open({:?}, 'w')", marker.display().to_string()))
                .cancel(token),
        )
        .await;
    assert_eq!(r.status, Status::Interrupted, "{}", show(&r));
    assert!(r.not_started(), "{}", show(&r));
    assert!(
        r.error.as_deref().unwrap().contains("cancelled"),
        "{}",
        show(&r)
    );
    assert_eq!(f.reg.live_kernels(), 0, "no kernel was started for it");
    assert!(!marker.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_request_cancelled_returns_at_once_and_never_runs() {
    let f = Arc::new(Fixture::new());
    f.ok("import time").await;
    let (sink, mut live) = live_channel();
    let running = {
        let f = Arc::clone(&f);
        tokio::spawn(async move {
            f.reg
                .execute(
                    ExecuteRequest::new("print('go', flush=True)\ntime.sleep(4)\nprint('done')")
                        .live(sink),
                )
                .await
        })
    };
    wait_live(&mut live, "go", Duration::from_secs(30)).await;
    let marker = f.work().join("queued-ran");
    let token = CancellationToken::new();
    let queued = {
        let f = Arc::clone(&f);
        let code = format!("open({:?}, 'w')", marker.display().to_string());
        let token = token.clone();
        tokio::spawn(async move { f.reg.execute(ExecuteRequest::new(code).cancel(token)).await })
    };
    wait_until(
        "the second request waits behind the running cell (busy 2)",
        || busy(&f) == 2,
    )
    .await;
    let t0 = Instant::now();
    token.cancel();
    let q = queued.await.unwrap();
    // At once: well before the running cell's remaining ~4 s, which is what
    // waiting for that cell would take.
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(q.status, Status::Interrupted, "{}", show(&q));
    assert!(q.not_started(), "{}", show(&q));
    let r = running.await.unwrap();
    assert_success(&r);
    assert_eq!(r.output, "go\ndone\n", "the running cell was not touched");
    // The session goes on; the cancelled cell never ran.
    assert_eq!(f.ok("print(1)").await, "1\n");
    assert!(!marker.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_running_cell_interrupts_that_cell_only() {
    let f = Arc::new(Fixture::new());
    f.ok("import time\nkept = 'yes'").await;
    let (sink, mut live) = live_channel();
    let token = CancellationToken::new();
    let running = {
        let f = Arc::clone(&f);
        let token = token.clone();
        tokio::spawn(async move {
            f.reg
                .execute(
                    ExecuteRequest::new("print('go', flush=True)\ntime.sleep(30)")
                        .live(sink)
                        .cancel(token),
                )
                .await
        })
    };
    wait_live(&mut live, "go", Duration::from_secs(30)).await;
    // Queued behind it, without a token: it must still run.
    let next = {
        let f = Arc::clone(&f);
        tokio::spawn(async move { f.reg.execute(ExecuteRequest::new("print(kept)")).await })
    };
    wait_until(
        "the second request waits behind the running cell (busy 2)",
        || busy(&f) == 2,
    )
    .await;
    token.cancel();
    let r = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("the cancel interrupted the cell")
        .unwrap();
    assert_eq!(r.status, Status::Interrupted, "{}", show(&r));
    assert!(!r.not_started(), "{}", show(&r));
    assert_eq!(r.kernel.state_kept, Some(true), "{}", show(&r));
    let n = next.await.unwrap();
    assert_success(&n);
    assert_eq!(n.output, "yes\n");
    // A token cancelled after its cell ended changes nothing.
    let late = CancellationToken::new();
    let r = f
        .reg
        .execute(ExecuteRequest::new("print(2)").cancel(late.clone()))
        .await;
    late.cancel();
    assert_success(&r);
    assert_eq!(f.ok("print(3)").await, "3\n");
}

/// Cells running or waiting in the fixture's sessions.
fn busy(f: &Fixture) -> usize {
    f.reg.sessions().iter().map(|s| s.busy).sum()
}
