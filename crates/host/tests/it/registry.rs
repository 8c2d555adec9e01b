//! The registry with real kernels (docs/tour.md, "Kernels and the warm pool"):
//! isolation under concurrency, LRU eviction, idle reaping, the `sessions`
//! listing, and admission (guard and `[guard] deny`) before any kernel is
//! touched.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use crate::common::{Fixture, alive, assert_success, eventually, show};
use toolcell_host::{ExecuteRequest, Guard, Registry};
use toolcell_kernel::Status;
use toolcell_tools::ToolRegistry;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_owners_run_fifty_cells_each_concurrently_with_isolated_state() {
    const OWNERS: usize = 8;
    const CELLS: usize = 50;
    let f = Arc::new(Fixture::with(|o| o.max_kernels = OWNERS));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..OWNERS {
        let f = Arc::clone(&f);
        tasks.spawn(async move {
            let owner = format!("owner-{i}");
            let r = f.run_as(&owner, &format!("me = {owner:?}\nn = 0")).await;
            assert_success(&r);
            for k in 1..=CELLS {
                let r = f.run_as(&owner, "n += 1\nprint(me, n)").await;
                assert_success(&r);
                assert_eq!(r.output, format!("{owner} {k}\n"), "{}", show(&r));
                assert_eq!(r.kernel.execution_count, k as u64 + 1);
                assert!(!r.kernel.state_reset);
            }
            (owner, r.kernel.id)
        });
    }
    let mut ids = Vec::new();
    while let Some(done) = tasks.join_next().await {
        ids.push(done.unwrap());
    }
    ids.sort();
    ids.dedup_by(|a, b| a.1 == b.1);
    assert_eq!(ids.len(), OWNERS, "owners shared kernels: {ids:?}");
    let sessions = f.reg.sessions();
    assert_eq!(sessions.len(), OWNERS);
    assert!(
        sessions
            .iter()
            .all(|s| s.execution_count == CELLS as u64 + 1 && s.busy == 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_cells_of_one_session_share_one_spawn_and_run_in_order() {
    let f = Fixture::new();
    let cells = (0..5).map(|i| {
        f.reg.execute(ExecuteRequest::new(format!(
            "import os\nlog = globals().get('log', []) + [{i}]\nprint(os.getpid(), log)"
        )))
    });
    let results = futures_join(cells.collect()).await;
    let pids: Vec<&str> = results
        .iter()
        .map(|r| r.output.split(' ').next().unwrap())
        .collect();
    assert!(pids.iter().all(|p| *p == pids[0]), "{pids:?}");
    // Strict arrival order: the i-th cell saw 0..=i.
    for (i, r) in results.iter().enumerate() {
        assert_success(r);
        let expected: Vec<String> = (0..=i).map(|k| k.to_string()).collect();
        assert!(
            r.output.ends_with(&format!("[{}]\n", expected.join(", "))),
            "{}",
            show(r)
        );
    }
    assert_eq!(f.reg.live_kernels(), 1);
}

/// Polls every future in order on one task (like `join_all`), preserving
/// the order in which they first reach the registry.
async fn futures_join<F: std::future::Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut futs: Vec<_> = futs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in futs.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(Option::unwrap).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_least_recently_used_idle_kernel_is_evicted_at_max_kernels() {
    let f = Fixture::with(|o| o.max_kernels = 2);
    assert_success(&f.run_as("a", "v = 'a'").await);
    assert_success(&f.run_as("b", "v = 'b'").await);
    // a is used again, so b is now the least recently used.
    assert_success(&f.run_as("a", "v").await);
    let pid_of = |owner: &str| {
        f.reg
            .sessions()
            .iter()
            .find(|s| s.session == owner)
            .map(|s| s.pid)
    };
    let b_pid = pid_of("b").unwrap();
    let c = f.run_as("c", "v = 'c'").await;
    assert_success(&c);
    assert!(
        !c.kernel.state_reset,
        "a first spawn is not a reset: {}",
        show(&c)
    );
    let mut live: Vec<String> = f.reg.sessions().into_iter().map(|s| s.session).collect();
    live.sort();
    assert_eq!(live, ["a", "c"]);
    assert_eq!(f.reg.live_kernels(), 2);
    assert!(
        eventually(Duration::from_secs(2), || !alive(b_pid)).await,
        "the evicted kernel still runs"
    );
    // a kept its state; b starts over and is told so.
    assert_eq!(f.run_as("a", "v").await.output, "'a'\n");
    let b = f.run_as("b", "print('v' in globals())").await;
    assert_success(&b);
    assert_eq!(b.output, "False\n");
    assert!(b.kernel.state_reset, "{}", show(&b));
    assert_eq!(f.reg.live_kernels(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_kernel_is_never_evicted() {
    let f = Fixture::with(|o| o.max_kernels = 1);
    let started = f.work().join("started");
    let long = f.reg.execute(
        ExecuteRequest::new(format!(
            "import time\nv = 'kept'\n{}time.sleep(0.5)\nprint(v)",
            common::py_mark(&started, "1")
        ))
        .owner("a"),
    );
    let other = async {
        common::wait_file(&started, Duration::from_secs(10)).await;
        // b has to wait until a is idle, then evicts it.
        f.run_as("b", "print('b ran')").await
    };
    let (a, b) = tokio::join!(long, other);
    assert_success(&a);
    assert_eq!(a.output, "kept\n");
    assert_success(&b);
    assert_eq!(b.output, "b ran\n");
    assert_eq!(f.reg.live_kernels(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_kernels_are_reaped_in_the_background() {
    let f = Fixture::with(|o| o.idle_timeout = Duration::from_millis(300));
    let r = f.run("import os\nv = 1\nos.getpid()").await;
    assert_success(&r);
    let pid = f.host_pid(r.output.trim().parse().unwrap());
    // No other cell arrives: the reaper alone must retire the kernel.
    assert!(
        eventually(Duration::from_secs(3), || f.reg.sessions().is_empty()).await,
        "the idle kernel was not reaped: {:?}",
        f.reg.sessions()
    );
    assert!(
        eventually(Duration::from_secs(2), || !alive(pid)).await,
        "the reaped kernel still runs"
    );
    assert_eq!(f.reg.live_kernels(), 0);
    let root = f.kernels_root();
    assert!(
        eventually(Duration::from_secs(2), || common::entries(&root).is_empty()).await,
        "the reaped kernel's directory was kept: {:?}",
        common::entries(&root)
    );
    let n = f.run("print('v' in globals())").await;
    assert_eq!(n.output, "False\n");
    assert!(n.kernel.state_reset, "{}", show(&n));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_lists_each_live_kernel_with_pid_and_execution_count() {
    let f = Fixture::new();
    let mut last = None;
    for _ in 0..3 {
        last = Some(f.run_as("alpha", "import os\nos.getpid()").await);
    }
    let alpha = last.unwrap();
    let alpha_pid = f.host_pid(alpha.output.trim().parse().unwrap());
    f.run_as("beta", "pass").await;
    let sessions = f.reg.sessions();
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    let a = sessions.iter().find(|s| s.session == "alpha").unwrap();
    assert_eq!(a.pid, alpha_pid);
    assert_eq!(a.execution_count, 3);
    assert_eq!(a.kernel_id, alpha.kernel.id);
    assert_eq!(a.mode, "project");
    assert_eq!(a.busy, 0);
    assert!(a.idle_seconds >= 0.0);
    assert!(a.tools.contains(&"read_file".to_string()));
    assert_eq!(std::path::Path::new(&a.cwd), f.work());
    assert!(alive(a.pid));
    let b = sessions.iter().find(|s| s.session == "beta").unwrap();
    assert_eq!(b.execution_count, 1);
    assert_ne!(b.pid, a.pid);
    // Shutting one owner down removes only its kernel.
    assert_eq!(f.reg.shutdown("alpha").await, 1);
    let left: Vec<String> = f.reg.sessions().into_iter().map(|s| s.session).collect();
    assert_eq!(left, ["beta"]);
    assert!(eventually(Duration::from_secs(2), || !alive(a.pid)).await);
}

/// While a reset replaces a session's kernel, `sessions` never lists the
/// old kernel's pid once that process has ended (nor counts it: the soak
/// test saw 17 entries under `max_kernels = 16` this way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_never_lists_a_kernel_a_reset_has_ended() {
    let f = Arc::new(Fixture::new());
    let first = f.run_as("a", "import os\nos.getpid()").await;
    assert_success(&first);
    let old = f.host_pid(first.output.trim().parse().unwrap());
    let reset = {
        let f = Arc::clone(&f);
        tokio::spawn(async move {
            f.reg
                .execute(
                    ExecuteRequest::new("import os\nos.getpid()")
                        .owner("a")
                        .reset(true),
                )
                .await
        })
    };
    let mut saw_dead = false;
    while !reset.is_finished() {
        // Dead first, listed after: a listing that names it is stale.
        if !alive(old) {
            saw_dead = true;
            let listed: Vec<u32> = f.reg.sessions().iter().map(|s| s.pid).collect();
            assert!(
                !listed.contains(&old),
                "sessions lists pid {old}, which a reset has ended: {listed:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let r = reset.await.unwrap();
    assert_success(&r);
    assert!(r.kernel.state_reset);
    let new = f.host_pid(r.output.trim().parse().unwrap());
    assert_ne!(new, old);
    assert!(
        saw_dead,
        "the old kernel was still alive when the reset ended"
    );
    let listed: Vec<u32> = f.reg.sessions().iter().map(|s| s.pid).collect();
    assert_eq!(listed, [new]);
}

struct NoNetwork;

impl Guard for NoNetwork {
    fn check(&self, req: &ExecuteRequest) -> Result<(), String> {
        if req.code.contains("socket") {
            Err("no-network: cells may not open sockets".into())
        } else {
            Ok(())
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_and_a_deny_rule_refuse_cells_before_any_kernel_exists() {
    let tmp = tempfile::tempdir().unwrap();
    let mut o = common::opts(tmp.path());
    o.default_cwd = tmp.path().to_path_buf();
    o.deny = vec![regex::Regex::new(r"rm\s+-rf").unwrap()];
    let reg = Registry::with_tools(
        o,
        ToolRegistry::builtin().unwrap(),
        Some(Arc::new(NoNetwork)),
    )
    .unwrap();
    let witness = tmp.path().join("ran");
    let mark = common::py_mark(&witness, "1");

    let r = reg
        .execute(ExecuteRequest::new(format!("{mark}import socket")))
        .await;
    assert_eq!(r.status, Status::Refused, "{}", show(&r));
    assert_eq!(r.exit_code, -1);
    let err = r.error.as_deref().unwrap();
    assert!(
        err.contains("no-network") && err.contains("none of its code ran"),
        "{err}"
    );

    let r = reg
        .execute(ExecuteRequest::new(format!("{mark}!rm   -rf /nonexistent")))
        .await;
    assert_eq!(r.status, Status::Refused, "{}", show(&r));
    assert_eq!(r.exit_code, -1);
    assert!(
        r.error.as_deref().unwrap().contains(r"rm\s+-rf"),
        "{}",
        show(&r)
    );
    assert_eq!(serde_json::to_value(&r).unwrap()["status"], "refused");

    // Nothing was spawned and nothing ran.
    assert_eq!(reg.live_kernels(), 0);
    assert!(reg.sessions().is_empty());
    assert!(common::entries(&tmp.path().join("kernels")).is_empty());
    assert!(!witness.exists());

    // An admitted cell still runs.
    let r = reg
        .execute(ExecuteRequest::new(format!("{mark}print('fine')")))
        .await;
    assert_success(&r);
    assert_eq!(r.output, "fine\n");
    assert!(witness.exists());
    assert_eq!(reg.live_kernels(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_that_finds_every_kernel_busy_until_its_deadline_is_not_run() {
    let f = Fixture::with(|o| o.max_kernels = 1);
    let started = f.work().join("started");
    let witness = f.work().join("b-ran");
    let long = f.reg.execute(
        ExecuteRequest::new(format!(
            "import time\n{}time.sleep(1.5)",
            common::py_mark(&started, "1")
        ))
        .owner("a"),
    );
    let other = async {
        common::wait_file(&started, Duration::from_secs(10)).await;
        f.reg
            .execute(
                ExecuteRequest::new(common::py_mark(&witness, "1"))
                    .owner("b")
                    .timeout(Duration::from_millis(300)),
            )
            .await
    };
    let (a, b) = tokio::join!(long, other);
    assert_success(&a);
    assert_eq!(b.status, Status::Error, "{}", show(&b));
    let err = b.error.as_deref().unwrap();
    assert!(
        err.contains("busy") && err.contains("max_kernels") && err.contains("none of the code ran"),
        "{err}"
    );
    assert!(!witness.exists());
    // a's kernel was not disturbed.
    assert_eq!(f.reg.sessions().len(), 1);
    assert_eq!(f.reg.sessions()[0].session, "a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_name_reused_with_other_key_parts_warns_and_sessions_shows_the_difference() {
    use toolcell_stubs::Mode;
    let f = Fixture::new();
    let r = f.run_as("cw", "x = 1").await;
    assert_success(&r);
    assert!(r.warning.is_none(), "{}", show(&r));
    // Same name, narrower tools and strict mode: another kernel.
    let n = f
        .reg
        .execute(
            ExecuteRequest::new("print('x' in globals())")
                .owner("cw")
                .mode(Mode::Strict)
                .tools(["read_file"]),
        )
        .await;
    assert_success(&n);
    assert_eq!(n.output, "False\n");
    let w = n.warning.as_deref().unwrap_or_default();
    assert!(
        w.starts_with(&format!(
            "session \"cw\" already has a kernel with a different working directory ({}; this cell's: a private one), a different mode (project; this cell's: strict) and a different tool set (",
            f.work().display()
        )),
        "{w}"
    );
    assert!(
        w.contains(
            "; this cell's: read_file), so this cell runs in a separate kernel with its own state"
        ),
        "{w}"
    );
    assert!(!w.contains("interpreter ("), "same interpreter: {w}");
    // Other session names do not count.
    let o = f.run_as("other", "1").await;
    assert!(o.warning.is_none(), "{}", show(&o));

    let sessions = f.reg.sessions();
    let cw: Vec<_> = sessions.iter().filter(|s| s.session == "cw").collect();
    assert_eq!(cw.len(), 2);
    for s in cw {
        assert_eq!(s.differs, ["cwd", "mode", "tools"], "{s:?}");
    }
    let other = sessions.iter().find(|s| s.session == "other").unwrap();
    assert!(other.differs.is_empty());
}

/// Writes `bytes` bytes to `dir/name` and sets its mtime `age` ago.
fn aged_file(dir: &std::path::Path, name: &str, bytes: usize, age: Duration) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, vec![b'.'; bytes]).unwrap();
    let f = std::fs::File::options().write(true).open(&p).unwrap();
    f.set_modified(std::time::SystemTime::now() - age).unwrap();
    p
}

const DAY: Duration = Duration::from_secs(86_400);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_and_excess_spill_files_are_removed_when_the_registry_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let spill = tmp.path().join("spill");
    let expired = aged_file(&spill, "k-00000001-cell1-stdout-aaaa.txt", 10, DAY * 8);
    let web = aged_file(&spill, "web_extract-000000000001.md", 10, DAY * 30);
    // 3 × 400 bytes under the 7-day retention, against a 1000-byte cap:
    // the oldest goes.
    let oldest = aged_file(&spill, "k-00000002-cell1-stdout-bbbb.txt", 400, DAY * 3);
    let middle = aged_file(&spill, "k-00000002-cell2-stderr-cccc.txt", 400, DAY * 2);
    let newest = aged_file(&spill, "k-00000002-cell3-stdout-dddd.txt", 400, DAY);
    // Not toolcell's: never touched, however old.
    let foreign = aged_file(&spill, "notes.txt", 5000, DAY * 400);
    std::fs::create_dir_all(tmp.path().join("work")).unwrap();
    let reg = Registry::new(toolcell_host::RegistryOptions {
        spill_retention: Some(DAY * 7),
        spill_total_cap: Some(1000),
        ..common::opts(tmp.path())
    })
    .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || !oldest.exists()).await,
        "the oldest file over the cap is still there"
    );
    assert!(!expired.exists() && !web.exists(), "expired files stayed");
    assert!(middle.exists() && newest.exists(), "too much was removed");
    assert!(
        foreign.exists(),
        "a file toolcell did not write was removed"
    );
    drop(reg);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spill_file_a_live_session_reported_stays_until_the_session_ends() {
    let f = Fixture::with(|o| {
        o.max_stdout_bytes = 1000;
        // Any spill file is over this cap: only protection keeps one.
        o.spill_total_cap = Some(1);
        o.spill_prune_every = Duration::from_millis(50);
    });
    let r = f.run_as("s", "print('x' * 20000)").await;
    assert_success(&r);
    let path = std::path::PathBuf::from(r.stdout_spill_path.clone().expect("a spill file"));
    assert!(path.exists());
    // The pruner is running: an unreported spill file goes...
    let stray = aged_file(&f.spill_dir(), "k-ffffffff-cell9-stdout-eeee.txt", 10, DAY);
    assert!(
        eventually(Duration::from_secs(10), || !stray.exists()).await,
        "the pruner never ran"
    );
    // ...but the one the session's result reported stays, through several
    // more rounds of the pruner (every 50 ms): the passage of time is the
    // subject here.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(path.exists(), "a live session's spill file was pruned");
    // The agent can still page it from the session, with read_file (the
    // spill dir is hidden from a sandboxed cell's own open()).
    let read = f
        .run_as(
            "s",
            &format!(
                "print(len(read_file({:?}, limit=100000)['content']))",
                path.display().to_string()
            ),
        )
        .await;
    assert!(
        read.output.trim().parse::<usize>().unwrap_or(0) >= 20001,
        "{}",
        show(&read)
    );
    assert_eq!(f.reg.shutdown("s").await, 1);
    assert!(
        eventually(Duration::from_secs(10), || !path.exists()).await,
        "the spill file outlived its session's protection"
    );
}
