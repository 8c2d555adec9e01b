//! An interrupt that arrives right after a cell was sent — before its
//! first line ran — interrupts that cell (state kept), instead of being
//! lost in the gap and letting the kernel be killed after the grace.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use crate::common::{Fixture, show};
use toolcell_host::ExecuteRequest;
use toolcell_kernel::Status;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_at_once_interrupts_the_cell_and_keeps_the_kernel() {
    let fx = Fixture::new();
    let r = fx.reg.execute(ExecuteRequest::new("n = 0")).await;
    assert_eq!(r.status, Status::Success, "{}", show(&r));
    let kernel = r.kernel.id.clone();
    for round in 0..12 {
        let t0 = Instant::now();
        let (r, ()) = tokio::join!(
            fx.reg
                .execute(ExecuteRequest::new("n += 1\nimport time\ntime.sleep(30)")),
            async {
                // As soon as the session is busy: usually before the runner
                // has even read the cell.
                while fx.reg.interrupt("default") == 0 {
                    tokio::task::yield_now().await;
                }
            }
        );
        assert_eq!(r.status, Status::Interrupted, "round {round}: {}", show(&r));
        assert_eq!(
            r.kernel.id, kernel,
            "round {round}: the kernel was replaced"
        );
        assert_eq!(
            r.kernel.state_kept,
            Some(true),
            "round {round}: {}",
            show(&r)
        );
        assert!(t0.elapsed() < Duration::from_secs(10), "round {round}");
    }
    // Never more than one increment per round, and the state is there.
    let r = fx.reg.execute(ExecuteRequest::new("print(n <= 12)")).await;
    assert_eq!(r.output, "True\n", "{}", show(&r));
    assert_eq!(r.kernel.id, kernel);
}
