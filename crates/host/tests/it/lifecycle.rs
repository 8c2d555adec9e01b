//! Kernel lifecycle with real Python (docs/result.md, "kernel" and "error";
//! SECURITY.md, "Kernels never outlive the host"): caller interrupts, timeouts
//! that keep or kill, whole-tree kills (setsid'd and forked descendants),
//! kernels that die mid-cell, and a host killed with SIGKILL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use crate::common::{
    Fixture, alive, assert_success, eventually, eventually_blocking, py_mark, show, tagged_pid,
    wait_file,
};
use toolcell_host::{ExecuteRequest, Registry};
use toolcell_kernel::Status;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_interrupt_stops_the_cell_and_keeps_state() {
    let f = Fixture::new();
    f.ok("import time\nx = 'still here'").await;
    let started = f.work().join("started");
    let code = format!(
        "print('sleeping')\n{}time.sleep(30)\nprint('not reached')",
        common::py_mark(&started, "1")
    );
    let run = f.reg.execute(ExecuteRequest::new(code));
    let interrupt = async {
        common::wait_file(&started, Duration::from_secs(10)).await;
        f.reg.interrupt("default")
    };
    let (r, signalled) = tokio::join!(run, interrupt);
    assert_eq!(signalled, 1);
    assert_eq!(r.status, Status::Interrupted, "{}", show(&r));
    assert_eq!(r.exit_code, -1);
    assert_eq!(r.kernel.state_kept, Some(true), "{}", show(&r));
    assert!(r.duration_seconds < 10.0, "{}", show(&r));
    assert!(r.output.starts_with("sleeping\n"), "{}", r.output);
    assert!(r.output.contains("KeyboardInterrupt"), "{}", r.output);
    assert!(!r.output.contains("not reached"));
    assert!(
        r.error.as_deref().unwrap().contains("state are kept"),
        "{}",
        show(&r)
    );
    // Same kernel, same variables.
    let n = f.run("print(x)").await;
    assert_success(&n);
    assert_eq!(n.output, "still here\n");
    assert_eq!(n.kernel.id, r.kernel.id);
    assert!(!n.kernel.state_reset);
    // An interrupt with no cell running does nothing to the next cell.
    f.reg.interrupt("default");
    assert_eq!(f.ok("x").await, "'still here'\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_interrupts_and_keeps_state() {
    let f = Fixture::new();
    f.ok("import time\ncounter = 41").await;
    let r = f
        .reg
        .execute(
            ExecuteRequest::new("counter += 1\ntime.sleep(20)").timeout(Duration::from_millis(600)),
        )
        .await;
    assert_eq!(r.status, Status::Timeout, "{}", show(&r));
    assert_eq!(r.exit_code, -1);
    assert_eq!(r.kernel.state_kept, Some(true), "{}", show(&r));
    assert_eq!(r.kernel.ended, None);
    assert!(r.duration_seconds < 5.0, "{}", show(&r));
    let err = r.error.as_deref().unwrap();
    assert!(
        err.contains("timeout") && err.contains("state are kept"),
        "{err}"
    );
    let n = f.run("counter").await;
    assert_success(&n);
    assert_eq!(n.output, "42\n");
    assert_eq!(n.kernel.id, r.kernel.id);
}

/// A cell that ignores SIGINT, with a child in the group, a setsid'd
/// grandchild (another session: not in the group) and a forked copy of the
/// runner, all recorded; then it spins.
const STUBBORN: &str = r#"
import os, signal, subprocess, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
child = subprocess.Popen(
    [sys.executable, '-c',
     'import subprocess, time\n'
     'g = subprocess.Popen(["sleep", "60"], start_new_session=True)\n'
     'print(g.pid, flush=True)\n'
     'time.sleep(60)\n'],
    stdout=subprocess.PIPE)
grandchild = int(child.stdout.readline())
forked = os.fork()
if forked == 0:
    while True:
        time.sleep(1)
print(f'kernel={os.getpid()}')
print(f'child={child.pid}')
print(f'grandchild={grandchild}')
print(f'forked={forked}', flush=True)
while True:
    pass
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigint_ignoring_cell_is_killed_with_its_whole_tree_and_state_is_lost() {
    let f = Fixture::with(|o| {
        o.interrupt_grace = Duration::from_millis(300);
        o.kill_grace = Duration::from_millis(300);
    });
    f.ok("x = 1").await;
    let r = f
        .reg
        .execute(ExecuteRequest::new(STUBBORN).timeout(Duration::from_secs(2)))
        .await;
    assert_eq!(r.status, Status::Timeout, "{}", show(&r));
    assert_eq!(r.exit_code, -1);
    assert_eq!(r.kernel.state_kept, Some(false), "{}", show(&r));
    assert_eq!(r.kernel.ended, Some(true));
    let err = r.error.as_deref().unwrap();
    assert!(
        err.contains("killed") && err.contains("state") && err.contains("lost"),
        "{err}"
    );
    let hint = r.hint.as_deref().unwrap_or_default();
    assert!(hint.contains("killed after the timeout"), "{}", show(&r));

    let pids =
        ["kernel", "child", "grandchild", "forked"].map(|t| f.host_pid(tagged_pid(&r.output, t)));
    let all_dead = eventually(Duration::from_secs(2), || pids.iter().all(|&p| !alive(p))).await;
    let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    assert!(all_dead, "still alive after the kill: {left:?} of {pids:?}");
    assert!(f.reg.sessions().is_empty());
    assert_eq!(f.reg.live_kernels(), 0);

    let n = f.run("print('x' in globals())").await;
    assert_success(&n);
    assert_eq!(n.output, "False\n");
    assert!(n.kernel.state_reset, "{}", show(&n));
    assert_ne!(n.kernel.id, r.kernel.id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segfault_is_reported_and_the_next_cell_gets_a_fresh_kernel() {
    let f = Fixture::new();
    f.ok("x = 1").await;
    let r = f
        .run("import ctypes, sys\nprint('before the crash', file=sys.stderr, flush=True)\nctypes.string_at(0)")
        .await;
    assert_eq!(r.status, Status::Error, "{}", show(&r));
    assert_eq!(r.exit_code, -1);
    assert_eq!(r.kernel.ended, Some(true));
    let err = r.error.as_deref().unwrap();
    assert!(err.contains("died") && err.contains("SIGSEGV"), "{err}");
    assert!(
        err.contains("before the crash"),
        "the last stderr lines belong in the error: {err}"
    );
    assert!(err.contains("state is lost"), "{err}");
    let n = f.run("print('x' in globals())").await;
    assert_success(&n);
    assert_eq!(n.output, "False\n");
    assert!(n.kernel.state_reset, "{}", show(&n));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn os_exit_is_reported_and_the_next_cell_gets_a_fresh_kernel() {
    let f = Fixture::new();
    f.ok("x = 1").await;
    let r = f
        .run("import os, sys\nsys.stderr.write('last words\\n')\nsys.stderr.flush()\nos._exit(7)")
        .await;
    assert_eq!(r.status, Status::Error, "{}", show(&r));
    assert_eq!(r.exit_code, -1);
    assert_eq!(r.kernel.ended, Some(true));
    let err = r.error.as_deref().unwrap();
    assert!(err.contains("status 7"), "{err}");
    assert!(err.contains("last words"), "{err}");
    let n = f.run("print('x' in globals())").await;
    assert_success(&n);
    assert_eq!(n.output, "False\n");
    assert!(n.kernel.state_reset && !n.kernel.reused, "{}", show(&n));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutting_the_owner_down_interrupts_a_waiting_cell_before_any_code_runs() {
    let f = Fixture::new();
    f.ok("import time").await;
    let marker = f.work().join("second-ran");
    let started = f.work().join("started");
    let first = f.reg.execute(ExecuteRequest::new(format!(
        "import os\n{}time.sleep(30)",
        common::py_mark(&started, "f'kernel={os.getpid()}'")
    )));
    let second = f.reg.execute(ExecuteRequest::new(format!(
        "open({:?}, 'w').write('x')",
        marker.display().to_string()
    )));
    let shut = async {
        let seen = common::wait_file(&started, Duration::from_secs(10)).await;
        // Both cells are in: one running, one waiting behind it.
        assert!(
            eventually(Duration::from_secs(5), || f
                .reg
                .sessions()
                .first()
                .is_some_and(|s| s.busy == 2))
            .await
        );
        (f.reg.shutdown("default").await, seen)
    };
    let (a, b, (n, seen)) = tokio::join!(first, second, shut);
    assert_eq!(n, 1);
    assert_eq!(b.status, Status::Interrupted, "{}", show(&b));
    assert_eq!(b.exit_code, -1);
    assert!(
        b.error.as_deref().unwrap().contains("none of its code ran"),
        "{}",
        show(&b)
    );
    assert!(!marker.exists(), "the waiting cell's code ran");
    // The running cell ended too, and its kernel is gone.
    assert_ne!(a.status, Status::Success, "{}", show(&a));
    let pid = f.host_pid(tagged_pid(&seen, "kernel"));
    assert!(eventually(Duration::from_secs(2), || !alive(pid)).await);
    assert_eq!(f.reg.live_kernels(), 0);
    // The owner can start again; its state is gone.
    let n = f.run("print('time' in globals())").await;
    assert_eq!(n.output, "False\n");
    assert!(n.kernel.state_reset, "{}", show(&n));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_registry_kills_every_kernel_and_removes_their_directories() {
    let f = Fixture::new();
    let root = f.kernels_root();
    for owner in ["a", "b", "c"] {
        assert_success(&f.run_as(owner, "x = 1").await);
    }
    let pids: Vec<u32> = f.reg.sessions().iter().map(|s| s.pid).collect();
    assert_eq!(pids.len(), 3);
    assert!(pids.iter().all(|&p| alive(p)));
    let dirs = common::entries(&root);
    assert_eq!(dirs.len(), 3, "{dirs:?}");
    let Fixture { reg, tmp, .. } = f;
    drop(reg);
    assert!(
        eventually(Duration::from_secs(2), || pids.iter().all(|&p| !alive(p))).await,
        "kernels outlived their registry: {pids:?}"
    );
    assert!(
        common::entries(&root).is_empty(),
        "{:?}",
        common::entries(&root)
    );
    drop(tmp);
}

const HOST_KILL: &str = "lifecycle::killing_the_host_with_sigkill_mid_cell_leaves_no_python_behind";

#[test]
fn killing_the_host_with_sigkill_mid_cell_leaves_no_python_behind() {
    if common::is_child(HOST_KILL) {
        host_kill_child();
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let pidfile = tmp.path().join("pids");
    let mut child = common::spawn_child(
        HOST_KILL,
        &[
            ("TOOLCELL_TEST_TMP", tmp.path().to_str().unwrap()),
            ("TOOLCELL_TEST_PIDFILE", pidfile.to_str().unwrap()),
        ],
    );
    let ready = eventually_blocking(Duration::from_secs(20), || pidfile.exists());
    if !ready {
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        panic!(
            "the host never got its cell running:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = std::fs::read_to_string(&pidfile).unwrap();
    let marker = tmp.path().join("kernels").display().to_string();
    let pids = ["kernel", "child", "setsid"]
        .map(|t| common::host_pid_in(&marker, tagged_pid(&text, t)).unwrap_or(common::GONE));
    assert!(pids.iter().all(|&p| alive(p)), "{text}");
    // SIGKILL: no destructor, no signal handler runs in the host.
    child.kill().unwrap();
    child.wait().unwrap();
    let gone = eventually_blocking(Duration::from_secs(2), || pids.iter().all(|&p| !alive(p)));
    let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    for p in &left {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*p as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(
        gone,
        "still alive 2 s after the host died: {left:?} of {pids:?}"
    );

    // The dead host left its kernel directory; a new registry on the same
    // root sweeps it at start.
    let root = tmp.path().join("kernels");
    let stale = common::entries(&root);
    assert_eq!(stale.len(), 1, "{stale:?}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut o = common::opts(tmp.path());
        o.default_cwd = tmp.path().to_path_buf();
        let reg = Registry::new(o).unwrap();
        assert!(
            common::entries(&root).is_empty(),
            "{:?}",
            common::entries(&root)
        );
        drop(reg);
    });
}

fn host_kill_child() {
    let tmp = std::path::PathBuf::from(std::env::var("TOOLCELL_TEST_TMP").unwrap());
    let pidfile = std::env::var("TOOLCELL_TEST_PIDFILE").unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut o = common::opts(&tmp);
        o.default_cwd = tmp.clone();
        let reg = Registry::new(o).unwrap();
        let code = format!(
            r#"
import os, subprocess, time
child = subprocess.Popen(['sleep', '60'])
setsid = subprocess.Popen(['sleep', '60'], start_new_session=True)
with open({pidfile:?} + '.tmp', 'w') as f:
    f.write(f'kernel={{os.getpid()}}\nchild={{child.pid}}\nsetsid={{setsid.pid}}\n')
os.rename({pidfile:?} + '.tmp', {pidfile:?})
time.sleep(60)
"#
        );
        let r = reg.execute(ExecuteRequest::new(code)).await;
        panic!(
            "the cell should never end; the parent kills this host: {}",
            show(&r)
        );
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_kernel_directories_of_a_dead_host_are_swept_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("kernels");
    std::fs::create_dir_all(&root).unwrap();
    // A pid that surely is dead: a process we started and reaped.
    let mut p = std::process::Command::new("true").spawn().unwrap();
    let dead = p.id();
    p.wait().unwrap();
    let stale = root.join("k-0123456789abcdef");
    std::fs::create_dir(&stale).unwrap();
    std::fs::write(stale.join("owner.pid"), dead.to_string()).unwrap();
    std::fs::write(stale.join("rpc.sock"), "").unwrap();
    // A live owner's directory (this process) is left alone.
    let live = root.join("k-fedcba9876543210");
    std::fs::create_dir(&live).unwrap();
    std::fs::write(live.join("owner.pid"), std::process::id().to_string()).unwrap();

    let mut o = common::opts(tmp.path());
    o.default_cwd = tmp.path().to_path_buf();
    let reg = Registry::new(o).unwrap();
    assert!(!stale.exists(), "the dead host's kernel directory was kept");
    assert!(live.exists(), "a live host's kernel directory was removed");
    drop(reg);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_between_cells_is_ignored() {
    let f = Fixture::new();
    let r = f.run("import os\nx = 'kept'\nos.getpid()").await;
    assert_success(&r);
    let pid = f.host_pid(r.output.trim().parse().unwrap()) as i32;
    for _ in 0..3 {
        nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap();
    }
    // Passage of time is the subject: give the signals time to act (they
    // must do nothing) before checking the kernel is still there.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(alive(pid as u32));
    let n = f.run("print(x)").await;
    assert_success(&n);
    assert_eq!(n.output, "kept\n");
    assert_eq!(n.kernel.id, r.kernel.id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_also_stops_cells_waiting_behind_the_running_one() {
    let f = Fixture::new();
    f.ok("import time\nx = 1").await;
    let started = f.work().join("started");
    let witness = f.work().join("second-ran");
    let first = f.reg.execute(ExecuteRequest::new(format!(
        "{}time.sleep(30)",
        common::py_mark(&started, "1")
    )));
    let second = f
        .reg
        .execute(ExecuteRequest::new(common::py_mark(&witness, "1")));
    let interrupt = async {
        common::wait_file(&started, Duration::from_secs(10)).await;
        assert!(
            eventually(Duration::from_secs(5), || f
                .reg
                .sessions()
                .first()
                .is_some_and(|s| s.busy == 2))
            .await
        );
        f.reg.interrupt("default")
    };
    let (a, b, n) = tokio::join!(first, second, interrupt);
    assert_eq!(n, 1);
    assert_eq!(a.status, Status::Interrupted, "{}", show(&a));
    assert_eq!(a.kernel.state_kept, Some(true));
    assert_eq!(b.status, Status::Interrupted, "{}", show(&b));
    assert!(
        b.error.as_deref().unwrap().contains("none of its code ran"),
        "{}",
        show(&b)
    );
    assert!(!witness.exists());
    // The kernel and state are intact, and later cells run normally.
    assert_eq!(f.ok("x + 1").await, "2\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutting_down_a_session_under_a_running_cell_says_so() {
    let f = std::sync::Arc::new(Fixture::new());
    let mark = f.tmp.path().join("running");
    let code = format!("{}import time\ntime.sleep(30)", py_mark(&mark, "1"));
    let runner = {
        let f = std::sync::Arc::clone(&f);
        tokio::spawn(async move { f.run_as("victim", &code).await })
    };
    wait_file(&mark, Duration::from_secs(20)).await;
    assert_eq!(f.reg.shutdown("victim").await, 1);
    let r = tokio::time::timeout(Duration::from_secs(10), runner)
        .await
        .expect("the running cell must return once its session is shut down")
        .unwrap();
    assert_eq!(r.status, Status::Interrupted, "{}", show(&r));
    assert_eq!(r.exit_code, -1);
    assert!(
        r.error.as_deref().unwrap_or("").contains("shut down"),
        "{}",
        show(&r)
    );
    assert_eq!(r.kernel.state_kept, Some(false));
    assert!(f.reg.sessions().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kernel_killed_between_cells_is_noticed_and_the_next_cell_runs_in_a_fresh_one() {
    let f = Fixture::new();
    let r = f.run("import os\nx = 1\nprint(f'pid={os.getpid()}')").await;
    assert_success(&r);
    let pid = f.host_pid(tagged_pid(&r.output, "pid"));
    // Killed from outside while idle (what the OOM killer does).
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(eventually(Duration::from_secs(10), || !alive(pid)).await);
    // Not listed as live any more, before any cell notices.
    assert!(
        eventually(Duration::from_secs(10), || f.reg.sessions().is_empty()).await,
        "{:?}",
        f.reg.sessions()
    );
    let n = f.run("print('x' in globals())").await;
    assert_success(&n);
    assert_eq!(n.output, "False\n", "{}", show(&n));
    assert!(
        n.kernel.state_reset && !n.kernel.reused,
        "a fresh kernel, and the result says the state is gone: {}",
        show(&n)
    );
    assert_ne!(n.kernel.id, r.kernel.id);
    assert_eq!(n.kernel.execution_count, 1);
    let w = n.warning.as_deref().unwrap_or_default();
    assert!(
        w.contains("ended between cells") && w.contains("signal 9 (SIGKILL)"),
        "the warning says how the old kernel ended: {}",
        show(&n)
    );
    assert!(w.contains("state"), "{w}");
    // The fresh kernel is an ordinary one: the next cell reuses it quietly.
    let m = f.run("print('x' in globals())").await;
    assert_success(&m);
    assert!(
        m.kernel.reused && !m.kernel.state_reset && m.warning.is_none(),
        "{}",
        show(&m)
    );
    assert_eq!(f.reg.live_kernels(), 1);
}

/// `kill -9` and the next cell at once, before the process is gone: the
/// cell must not go to a kernel that will never read it (it would come back
/// "died during the cell" with none of its code run). Repeated, since the
/// window is a few milliseconds wide.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_sent_right_after_a_kill_runs_in_a_fresh_kernel() {
    let f = Fixture::new();
    for round in 0..8 {
        let r = f.run("import os\nx = 1\nprint(f'pid={os.getpid()}')").await;
        assert_success(&r);
        let pid = f.host_pid(tagged_pid(&r.output, "pid"));
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        // No waiting.
        let n = f.run("print('x' in globals())").await;
        assert_success(&n);
        assert_eq!(n.output, "False\n", "round {round}: {}", show(&n));
        assert!(n.kernel.state_reset, "round {round}: {}", show(&n));
        assert!(
            n.warning
                .as_deref()
                .unwrap_or_default()
                .contains("ended between cells"),
            "round {round}: {}",
            show(&n)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kernel_that_os_exits_from_a_left_behind_thread_is_noticed_before_the_next_cell() {
    let f = Fixture::new();
    let gone = f.work().join("about-to-exit");
    let code = format!(
        "import os, threading, time\nx = 1\nprint(f'pid={{os.getpid()}}')\n\
         def later():\n    time.sleep(0.3)\n    open({p:?}, 'w').close()\n    os._exit(3)\n\
         threading.Thread(target=later, daemon=True).start()",
        p = gone.display().to_string()
    );
    let r = f.run(&code).await;
    assert_success(&r);
    let pid = f.host_pid(tagged_pid(&r.output, "pid"));
    wait_file(&gone, Duration::from_secs(10)).await;
    assert!(eventually(Duration::from_secs(10), || !alive(pid)).await);
    let n = f.run("print('x' in globals())").await;
    assert_success(&n);
    assert_eq!(n.output, "False\n", "{}", show(&n));
    assert!(n.kernel.state_reset && !n.kernel.reused, "{}", show(&n));
    let w = n.warning.as_deref().unwrap_or_default();
    assert!(
        w.contains("ended between cells") && w.contains("exited with status 3"),
        "{}",
        show(&n)
    );
}
