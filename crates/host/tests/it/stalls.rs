//! Kernels that stop reading their requests (review item 10): a local
//! kernel a cell SIGSTOPs, and a remote whose far side stops reading after
//! a cell or right after the handshake. A request larger than a pipe buffer
//! then cannot be written whole; the cell must still end by its deadline,
//! an interrupt must still end it, and the session must still shut down.
//!
//! The stalled remote is a real relay (a Python script between the host and
//! the remote runner, reached like any remote `command`) that forwards the
//! bootstrap, the `hello` line and a given number of `execute` lines, then
//! stops reading its stdin for good, leaving a flag file when it does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{Fixture, alive, assert_success, eventually, show, tagged_pid};
use toolcell_host::ExecuteRequest;
use toolcell_kernel::remote::Remote;
use toolcell_kernel::{ExecuteResult, Status};

/// Longest any one step may take before the test calls it a hang.
const HANG: Duration = Duration::from_secs(60);

/// A cell whose code is well over a pipe buffer (64 KiB): 256 KiB of
/// comments, then `tail`.
fn large_cell(tail: &str) -> String {
    let mut code = String::with_capacity(300 * 1024);
    while code.len() < 256 * 1024 {
        code.push_str("# padding padding padding padding padding padding padding padding\n");
    }
    code.push_str(tail);
    code
}

/// Runs `req`, failing the test (instead of hanging it) after [`HANG`].
async fn run_bounded(f: &Fixture, req: ExecuteRequest) -> ExecuteResult {
    tokio::time::timeout(HANG, f.reg.execute(req))
        .await
        .expect("the cell hung past its deadline")
}

/// `/proc/PID/stat`'s state letter.
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_10_a_kernel_a_cell_sigstops_cannot_hang_a_large_next_cell() {
    let f = Fixture::with(|o| {
        o.interrupt_grace = Duration::from_secs(1);
        o.kill_grace = Duration::from_millis(500);
    });
    // The cell answers, then a thread it left stops the whole kernel.
    let r = f
        .run(
            "import os, signal, threading\nx = 41\nprint('pid=%d' % os.getpid())\n\
             threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGSTOP)).start()",
        )
        .await;
    assert_success(&r);
    let pid = f.host_pid(tagged_pid(&r.output, "pid"));
    assert!(
        eventually(Duration::from_secs(20), || state(pid) == Some('T')).await,
        "the kernel never stopped: {:?}",
        state(pid)
    );
    // The next cell cannot be written whole into a stopped reader's pipe.
    let t = Instant::now();
    let r = run_bounded(
        &f,
        ExecuteRequest::new(large_cell("print('ran', x + 1)")).timeout(Duration::from_secs(2)),
    )
    .await;
    assert_eq!(r.status, Status::Timeout, "{}", show(&r));
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    // The session shuts down, and the next cell gets a working kernel.
    let t = Instant::now();
    tokio::time::timeout(HANG, f.reg.shutdown("default"))
        .await
        .expect("shutdown_session hung");
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    assert!(eventually(Duration::from_secs(10), || !alive(pid)).await);
    let r = run_bounded(&f, ExecuteRequest::new(large_cell("print(6 * 7)"))).await;
    assert_success(&r);
    assert_eq!(r.output, "42\n", "{}", show(&r));
}

/// The relay: `python3 relay.py N FLAG -- CMD…` forwards the bootstrap,
/// the `hello` line and N `execute` lines (N < 0: everything) to CMD; once
/// the next request has begun to arrive it writes FLAG and never reads
/// again.
const RELAY: &str = r#"
import os, subprocess, sys, time
stall_after, flag, cmd = int(sys.argv[1]), sys.argv[2], sys.argv[4:]
child = subprocess.Popen(cmd, stdin=subprocess.PIPE)
buf = b''
def more():
    global buf
    c = os.read(0, 65536)
    if not c:
        child.stdin.close()
        sys.exit(child.wait())
    buf += c
def line():
    global buf
    while b'\n' not in buf:
        more()
    i = buf.index(b'\n') + 1
    out, buf = buf[:i], buf[i:]
    return out
def exactly(n):
    global buf
    while len(buf) < n:
        more()
    out, buf = buf[:n], buf[n:]
    return out
def fwd(b):
    child.stdin.write(b)
    child.stdin.flush()
for _ in range(2):
    head = line()
    fwd(head)
    fwd(exactly(int(head)))
fwd(line())
seen = 0
while True:
    if seen == stall_after:
        # The next request has begun to arrive; not a byte more is read.
        more()
        open(flag + '.tmp', 'w').close()
        os.rename(flag + '.tmp', flag)
        while True:
            time.sleep(3600)
    request = line()
    fwd(request)
    if request.startswith(b'{"type":"execute"'):
        seen += 1
"#;

/// A registry with remotes `stalls` (its relay stops reading after
/// `stall_after` cells, writing `<tmp>/stalled`) and `fine` (never stops).
fn relay_fixture(stall_after: i32) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("work")).unwrap();
    let relay = tmp.path().join("relay.py");
    std::fs::write(&relay, RELAY).unwrap();
    let flag = tmp.path().join("stalled");
    let command = |n: i32| {
        Remote::command([
            "python3".to_string(),
            relay.display().to_string(),
            n.to_string(),
            flag.display().to_string(),
            "--".into(),
        ])
    };
    let mut o = common::opts(tmp.path());
    o.remotes.insert("stalls".into(), command(stall_after));
    o.remotes.insert("fine".into(), command(-1));
    o.interrupt_grace = Duration::from_secs(1);
    o.kill_grace = Duration::from_millis(500);
    let reg = toolcell_host::Registry::new(o).unwrap();
    Fixture {
        reg,
        tmp,
        sandboxed: true,
    }
}

fn on(remote: &str, session: &str, code: &str) -> ExecuteRequest {
    let mut r = ExecuteRequest::new(code).owner(session);
    r.remote = Some(remote.into());
    r
}

async fn wait_stalled(flag: &Path) {
    assert!(
        eventually(Duration::from_secs(30), || flag.exists()).await,
        "the relay never stopped reading"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_10_a_remote_that_stops_reading_after_a_cell_cannot_hang_the_next() {
    let f = relay_fixture(1);
    let r = run_bounded(&f, on("stalls", "s", "x = 41\nprint('first')")).await;
    assert_success(&r);
    assert_eq!(r.output, "first\n");
    let t = Instant::now();
    let r = run_bounded(
        &f,
        on("stalls", "s", &large_cell("print(x + 1)")).timeout(Duration::from_secs(2)),
    )
    .await;
    assert_eq!(r.status, Status::Timeout, "{}", show(&r));
    assert_eq!(r.kernel.state_kept, Some(false), "{}", show(&r));
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    assert!(
        f.tmp.path().join("stalled").exists(),
        "the relay read it all"
    );
    // The session shuts down at once, and a new one works.
    tokio::time::timeout(Duration::from_secs(20), f.reg.shutdown("s"))
        .await
        .expect("shutdown_session hung");
    let r = run_bounded(&f, on("fine", "s", &large_cell("print(6 * 7)"))).await;
    assert_success(&r);
    assert_eq!(r.output, "42\n", "{}", show(&r));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_10_a_remote_that_stops_reading_after_the_handshake_yields_to_interrupt_and_shutdown()
 {
    let f = Arc::new(relay_fixture(0));
    let flag = f.tmp.path().join("stalled");
    // An interrupt ends a cell whose request is stuck half-written.
    let cell = tokio::spawn({
        let f = Arc::clone(&f);
        async move { run_bounded(&f, on("stalls", "a", &large_cell("print(1)"))).await }
    });
    wait_stalled(&flag).await;
    let t = Instant::now();
    assert_eq!(f.reg.interrupt("a"), 1);
    let r = tokio::time::timeout(Duration::from_secs(20), cell)
        .await
        .expect("the interrupt did not end the cell")
        .unwrap();
    assert_eq!(r.status, Status::Interrupted, "{}", show(&r));
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    // So does shutting its session down.
    std::fs::remove_file(&flag).unwrap();
    let cell = tokio::spawn({
        let f = Arc::clone(&f);
        async move { run_bounded(&f, on("stalls", "b", &large_cell("print(2)"))).await }
    });
    wait_stalled(&flag).await;
    let t = Instant::now();
    tokio::time::timeout(Duration::from_secs(20), f.reg.shutdown("b"))
        .await
        .expect("shutdown_session hung");
    let r = tokio::time::timeout(Duration::from_secs(20), cell)
        .await
        .expect("the shut-down session's cell did not end")
        .unwrap();
    assert_eq!(r.status, Status::Interrupted, "{}", show(&r));
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    // A new session of that name starts and runs.
    let r = run_bounded(&f, on("fine", "b", &large_cell("print(6 * 7)"))).await;
    assert_success(&r);
    assert_eq!(r.output, "42\n", "{}", show(&r));
}
