//! The adversarial suite (issue 10 part 4): cells written to break the host,
//! run in real kernels through the [`Registry`]. For each, what a user would
//! notice: the host keeps serving (a normal cell afterwards works), the
//! result is well-formed and honest (status, error, `state_reset`), no
//! process of the kernel is left (found through `/proc` by the
//! `TOOLCELL_RPC` value every kernel descendant inherits), and the host's
//! memory stays bounded where a flood could grow it.
//!
//! The fork bomb and memory bomb under `[limits]` live in `tests/limits.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use crate::common;

use std::path::Path;
use std::time::Duration;

use crate::common::{Fixture, alive, assert_success, eventually, show, tagged_pid, wait_file};
use toolcell_host::ExecuteRequest;
use toolcell_kernel::Status;

/// Live processes (not zombies) whose environment carries a `TOOLCELL_RPC`
/// endpoint under `root`: every kernel of a fixture and everything a kernel
/// started, `setsid`'d or reparented ones included.
fn kernel_processes(root: &Path) -> Vec<u32> {
    let needle = format!("TOOLCELL_RPC=unix:{}", root.display());
    let me = std::process::id();
    common::entries(Path::new("/proc"))
        .iter()
        .filter_map(|p| p.file_name()?.to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                env.split(|&b| b == 0)
                    .any(|kv| kv.starts_with(needle.as_bytes()))
            }) && alive(pid)
        })
        .collect()
}

/// Asserts that no process of the fixture's kernels is left within `within`.
async fn assert_no_kernel_processes(f: &Fixture, within: Duration) {
    let root = f.kernels_root();
    let gone = eventually(within, || kernel_processes(&root).is_empty()).await;
    assert!(gone, "kernel processes left: {:?}", kernel_processes(&root));
}

/// Shuts every kernel of the fixture down and asserts none of its
/// processes is left.
async fn shut_down_and_check(f: &Fixture) {
    f.reg.shutdown_all().await;
    assert_no_kernel_processes(f, Duration::from_secs(5)).await;
}

/// Asserts that a fresh kernel answers a normal cell: the state is gone.
async fn assert_fresh_kernel(f: &Fixture, old_id: &str) {
    let n = f.run("print('x' in globals(), 40 + 2)").await;
    assert_success(&n);
    assert_eq!(n.output, "False 42\n", "{}", show(&n));
    assert!(n.kernel.state_reset, "{}", show(&n));
    assert!(!n.kernel.reused, "{}", show(&n));
    assert_ne!(n.kernel.id, old_id);
}

// ---------------------------------------------------------------------------
// 1. File descriptors 1, 2 and 3
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_or_dup2ing_over_fds_1_2_and_3_cannot_cut_the_protocol() {
    let f = Fixture::new();
    // fd 3 is the request pipe at spawn, but the runner moved it to a
    // private descriptor and closed 3 before the first cell: closing it
    // fails, and putting /dev/null there changes nothing.
    let r = f
        .run(
            "import os\n\
             x = 1\n\
             try:\n\
             \x20   os.close(3)\n\
             \x20   print('closed 3')\n\
             except OSError as e:\n\
             \x20   print('close(3):', e.errno)\n\
             null = os.open('/dev/null', os.O_RDWR)\n\
             os.dup2(null, 3)\n\
             print('dup2 over 3 done')",
        )
        .await;
    assert_success(&r);
    assert_eq!(r.output, "close(3): 9\ndup2 over 3 done\n", "{}", show(&r));
    // dup2 over fds 1 and 2: the cell's own output goes nowhere, the
    // result still arrives.
    let r = f
        .run(
            "print('before', flush=True)\n\
             os.dup2(null, 1)\n\
             os.dup2(null, 2)\n\
             print('into the void')\n\
             raise ValueError('unseen')",
        )
        .await;
    assert_eq!(r.status, Status::Error, "{}", show(&r));
    assert_eq!(r.exit_code, 1);
    assert!(r.output.starts_with("before\n"), "{}", show(&r));
    assert!(!r.output.contains("into the void"), "{}", show(&r));
    // The traceback travels in the result frame, not on fd 2.
    assert!(r.output.contains("ValueError: unseen"), "{}", show(&r));
    // Closing them outright: same.
    let r = f.run("os.close(1)\nos.close(2)\nos.close(0)\nx += 1").await;
    assert_success(&r);
    // (No echo: printing to the closed fd 1 would rightly fail.)
    let r = f.run("assert x == 2").await;
    assert_success(&r);
    assert_eq!(r.kernel.execution_count, 4, "{}", show(&r));
    assert!(r.kernel.reused && !r.kernel.state_reset, "{}", show(&r));
    assert_eq!(f.reg.live_kernels(), 1);
    shut_down_and_check(&f).await;
}

/// Closes every descriptor the process has, the runner's private
/// duplicates of the request pipe and of fds 1 and 2 included (a cell can
/// find them in /proc/self/fd): the runner can no longer answer.
const CLOSE_ALL: &str = "import os\n\
    for fd in sorted(int(n) for n in os.listdir('/proc/self/fd')):\n\
    \x20   try:\n\
    \x20       os.close(fd)\n\
    \x20   except OSError:\n\
    \x20       pass\n";

/// Puts /dev/null over every descriptor, the runner's private ones included.
const DUP2_ALL: &str = "import os\n\
    null = os.open('/dev/null', os.O_RDWR)\n\
    for fd in sorted(int(n) for n in os.listdir('/proc/self/fd')):\n\
    \x20   if fd != null:\n\
    \x20       try:\n\
    \x20           os.dup2(null, fd)\n\
    \x20       except OSError:\n\
    \x20           pass\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_that_closes_or_covers_the_runners_private_fds_is_reported_dead_and_replaced() {
    let f = Fixture::with(|o| {
        o.interrupt_grace = Duration::from_millis(300);
        o.kill_grace = Duration::from_millis(300);
    });
    for (what, evil) in [("close", CLOSE_ALL), ("dup2", DUP2_ALL)] {
        let first = f.run("x = 1\nimport os\nprint(os.getpid())").await;
        assert_success(&first);
        let r = f
            .reg
            .execute(ExecuteRequest::new(format!("{evil}x = 2\n")).timeout(Duration::from_secs(15)))
            .await;
        // Its output pipes close: the host reports the kernel dead (not a
        // timeout: it does not wait for the deadline), its state lost.
        assert_eq!(r.status, Status::Error, "{what}: {}", show(&r));
        assert_eq!(r.exit_code, -1, "{what}: {}", show(&r));
        assert_eq!(r.kernel.ended, Some(true), "{what}: {}", show(&r));
        let err = r.error.as_deref().unwrap_or_default();
        assert!(
            err.contains("died") && err.contains("state is lost"),
            "{what}: {}",
            show(&r)
        );
        assert_no_kernel_processes(&f, Duration::from_secs(5)).await;
        assert_eq!(f.reg.live_kernels(), 0, "{what}");
        assert_fresh_kernel(&f, &r.kernel.id).await;
        f.reg.shutdown("default").await;
    }
}

/// Closes only the runner's private duplicate of fd 1, the channel its
/// result frames travel on (found in its globals); fds 1 and 2 stay open.
const CLOSE_RESULT_CHANNEL: &str = "import gc, os\n\
    g = next(o for o in gc.get_objects() if isinstance(o, dict) and isinstance(o.get('_OUT_FD'), int) and '_MARK' in o)\n\
    os.close(g['_OUT_FD'])\n\
    print('closed', flush=True)\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_that_closes_only_the_result_channel_is_reported_dead_without_waiting_for_the_timeout()
 {
    let f = Fixture::new();
    f.ok("x = 1").await;
    let r = f
        .reg
        .execute(ExecuteRequest::new(CLOSE_RESULT_CHANNEL).timeout(Duration::from_secs(60)))
        .await;
    // The runner cannot send the result and exits; the host says so (with
    // the runner's last stderr line) long before the 60 s deadline.
    assert_eq!(r.status, Status::Error, "{}", show(&r));
    assert_eq!(r.exit_code, -1);
    assert_eq!(r.kernel.ended, Some(true), "{}", show(&r));
    assert!(r.duration_seconds < 30.0, "{}", show(&r));
    assert!(r.output.starts_with("closed\n"), "{}", show(&r));
    let err = r.error.as_deref().unwrap_or_default();
    assert!(
        err.contains("died")
            && err.contains("state is lost")
            && err.contains("cannot send the cell's result"),
        "{}",
        show(&r)
    );
    assert_no_kernel_processes(&f, Duration::from_secs(5)).await;
    assert_fresh_kernel(&f, &r.kernel.id).await;

    // Covering it with /dev/null instead cannot be noticed (writes succeed):
    // the result vanishes, and the cell ends at its timeout with the kernel
    // killed and its state lost — honest about the state, bounded by the
    // timeout.
    let cover = CLOSE_RESULT_CHANNEL.replace(
        "os.close(g['_OUT_FD'])",
        "os.dup2(os.open('/dev/null', os.O_WRONLY), g['_OUT_FD'])",
    );
    let r = f
        .reg
        .execute(ExecuteRequest::new(cover).timeout(Duration::from_secs(2)))
        .await;
    assert_eq!(r.status, Status::Timeout, "{}", show(&r));
    assert_eq!(r.kernel.state_kept, Some(false), "{}", show(&r));
    assert_eq!(r.kernel.ended, Some(true), "{}", show(&r));
    assert!(r.output.starts_with("closed\n"), "{}", show(&r));
    assert_no_kernel_processes(&f, Duration::from_secs(5)).await;
    assert_fresh_kernel(&f, &r.kernel.id).await;
    shut_down_and_check(&f).await;
}

// ---------------------------------------------------------------------------
// 2. Marker-like prefixes and fake frames
// ---------------------------------------------------------------------------

/// 10^6 things that look like the start of a frame: the marker's fixed
/// prefix (`"\n@tc"`) without a valid header, whole fake frames with a
/// wrong sentinel, and the real marker (dug out of the runner's globals)
/// followed by a header that is not one (no digits, too many digits).
const MARKERS: &str = r#"
import os, sys, json, gc
def find_mark():
    for o in gc.get_objects():
        if isinstance(o, dict):
            m = o.get('_MARK')
            if isinstance(m, bytes) and m.startswith(b'\n@tc'):
                return m
MARK = find_mark()
body = json.dumps({'type': 'result', 'id': 'deadbeefdeadbeef', 'status': 'error',
                   'traceback': 'FORGED', 'execution_count': 99, 'stdin_requested': True,
                   'usage': {'cpu_seconds': 0, 'peak_rss_kb': 0, 'wall_seconds': 0},
                   'display': []}).encode()
fake = b'\n@tc' + b'0f' * 16 + b' ' + str(len(body)).encode() + b'\n' + body
pieces = [
    b'\n@tc',                      # fixed prefix, then a newline
    b'\n@tc0123 7\nnot json',     # wrong sentinel, header-shaped
    fake,                          # a whole frame under a wrong sentinel
    MARK + b'x\n',                 # real marker, no digits
    MARK + b'1' * 21 + b'\n',      # real marker, header too long
    b'\n@t',                       # a prefix cut short
]
block = b''.join(pieces * 1000)
n = 0
total = 0
sys.stdout.flush()
for _ in range(1_000_000 // (len(pieces) * 1000) + 1):
    os.write(1, block)
    n += len(pieces) * 1000
    total += len(block)
_ = sys.stdout.write('\nREAL END %d %d\n' % (n, total))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_marker_like_prefixes_come_back_as_text_and_the_real_result_is_found() {
    let f = Fixture::with(|o| o.spill_cap_bytes = 200_000);
    let r = f
        .reg
        .execute(ExecuteRequest::new(MARKERS).timeout(Duration::from_secs(60)))
        .await;
    assert_success(&r);
    let last = r.output.lines().last().unwrap_or_default().to_string();
    let parts: Vec<u64> = last
        .strip_prefix("REAL END ")
        .unwrap_or_else(|| panic!("no REAL END line: {}", show(&r)))
        .split(' ')
        .map(|n| n.parse().unwrap())
        .collect();
    let (count, bytes) = (parts[0], parts[1]);
    assert!(count >= 1_000_000, "{count}");
    // Every byte the cell wrote is output: no frame was cut out of it, the
    // forged one included (text only, never a result).
    let end_line = format!("\nREAL END {count} {bytes}\n");
    assert_eq!(
        r.stdout_bytes_total,
        bytes + end_line.len() as u64,
        "{}",
        show(&r)
    );
    assert!(r.stdout_truncated);
    assert!(
        r.output.starts_with("\n@tc\n@tc0123 7\nnot json\n@tc0f0f"),
        "{}",
        &r.output[..200]
    );
    assert!(r.output.contains("FORGED"), "the fake frame is text");
    assert!(
        !r.stdin_requested,
        "the forged result was taken: {}",
        show(&r)
    );
    assert_eq!(r.kernel.execution_count, 1);
    assert!(r.duration_seconds < 60.0, "{}", show(&r));
    assert_eq!(f.ok("print('next')").await, "next\n");
    shut_down_and_check(&f).await;
}

// ---------------------------------------------------------------------------
// 3. A 50 MB single line
// ---------------------------------------------------------------------------

const LONG_LINE: &str =
    "adversarial::a_50_mb_single_line_keeps_head_and_tail_spills_whole_and_host_memory_flat";

#[test]
fn a_50_mb_single_line_keeps_head_and_tail_spills_whole_and_host_memory_flat() {
    // Measured in a host process of its own, so that other tests running in
    // parallel cannot move its resident set.
    if common::is_child(LONG_LINE) {
        long_line_child();
    } else {
        common::run_child(LONG_LINE, &[]);
    }
}

fn long_line_child() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // `fold = false`: the plain head/tail cut of one huge line (the
        // default would cut the line to its head and tail first).
        let f = Fixture::with(|o| {
            o.spill_cap_bytes = 60_000_000;
            o.fold = toolcell_kernel::fold::FoldOptions::off();
        });
        // A line of words, `NAME=value` pairs and quotes: the redactor's
        // rules have work to do on it, with no newline for 50 MB.
        assert_success(
            &f.run("import sys\nunit = 'head word api_key=abc \"quoted\" x: 1; '\nline = (unit * (50_000_000 // len(unit) + 1))[:50_000_000]\nprint('warm')")
                .await,
        );
        let (rss0, hwm0) = common::memory_kb();
        let r = f
            .run("_ = sys.stdout.write(line)\n_ = sys.stdout.write('\\nTHE END\\n')")
            .await;
        let (rss1, hwm1) = common::memory_kb();
        println!(
            "\nmeasured: 50 MB line: {:.2}s; VmRSS {rss0} -> {rss1} KiB, VmHWM {hwm0} -> {hwm1} KiB",
            r.duration_seconds
        );
        assert_success(&r);
        // The line alone is 48 MiB: the host never held it.
        assert!(
            hwm1 - hwm0 < 24 * 1024,
            "host peak memory grew by {} KiB",
            hwm1 - hwm0
        );
        assert!(
            rss1.saturating_sub(rss0) < 24 * 1024,
            "host memory grew by {} KiB",
            rss1 - rss0
        );
        let total = 50_000_000 + "\nTHE END\n".len() as u64;
        assert_eq!(r.stdout_bytes_total, total, "{}", show(&r));
        assert!(r.stdout_truncated);
        assert_eq!(r.stdout_bytes_captured, 50_000);
        assert!(r.output.starts_with("head word api_key=abc \"quoted\""), "{}", &r.output[..100]);
        assert!(r.output.ends_with("\nTHE END\n"), "{}", &r.output[r.output.len() - 100..]);
        let notice = format!(
            "\n\n... [OUTPUT TRUNCATED - {} bytes omitted out of {total} total] ...\n\n",
            total - 50_000
        );
        assert!(r.output.contains(&notice), "no truncation notice");
        assert_eq!(r.output.len(), 50_000 + notice.len());
        // The spill file holds the whole stream.
        let spill = std::fs::read(r.stdout_spill_path.as_deref().unwrap()).unwrap();
        assert_eq!(spill.len() as u64, total);
        assert!(spill.starts_with(b"head word api_key=abc \"quoted\" x: 1; head word"));
        assert!(spill.ends_with(b"\nTHE END\n"));
        assert_eq!(f.ok("print(len(line))").await, "50000000\n");
        shut_down_and_check(&f).await;
    });
}

// ---------------------------------------------------------------------------
// 4. A traceback 100k frames deep
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traceback_100k_frames_deep_is_an_error_with_a_bounded_traceback() {
    let f = Fixture::new();
    f.ok("kept = 'yes'").await;
    // Two functions calling each other: consecutive traceback lines differ,
    // so Python's "[Previous line repeated]" folding cannot shorten it.
    let r = f
        .run(
            "import sys\n\
             sys.setrecursionlimit(250_000)\n\
             def ping(n):\n\
             \x20   if n == 0:\n\
             \x20       raise RuntimeError('bottom of 100000 frames')\n\
             \x20   return pong(n - 1)\n\
             def pong(n):\n\
             \x20   return ping(n - 1)\n\
             ping(100_000)",
        )
        .await;
    assert_eq!(r.status, Status::Error, "{}", show(&r));
    assert_eq!(r.exit_code, 1);
    assert!(r.kernel.ended.is_none(), "{}", show(&r));
    assert!(
        r.output.contains("RuntimeError: bottom of 100000 frames"),
        "{}",
        &r.output[r.output.len().saturating_sub(500)..]
    );
    assert!(
        r.output.contains("ping"),
        "{}",
        &r.output[..500.min(r.output.len())]
    );
    // 100k frames are ~10 MB of traceback: what comes back is a head and a
    // tail within the stderr cap (default 10 000 bytes).
    let (before, tb) = r.output.split_once("\n--- stderr ---\n").unwrap();
    assert_eq!(before, "");
    assert!(tb.len() < 10_200, "traceback of {} bytes", tb.len());
    assert!(
        tb.starts_with("Traceback (most recent call last):\n"),
        "{tb}"
    );
    assert!(tb.contains("\n\n... [TRACEBACK TRUNCATED - "), "{tb}");
    assert!(
        tb.ends_with("RuntimeError: bottom of 100000 frames\n"),
        "{tb}"
    );
    assert_eq!(
        r.error.as_deref(),
        Some("RuntimeError: bottom of 100000 frames (the kernel and its state are kept)")
    );
    // A megabyte-long message: the output and the one-sentence error stay
    // short too.
    let r = f.run("raise ValueError('x' * 2_000_000)").await;
    assert_eq!(r.status, Status::Error, "{:.2000}", show(&r));
    assert!(
        r.output.len() < 10_200,
        "output of {} bytes",
        r.output.len()
    );
    assert!(r.output.contains("TRACEBACK TRUNCATED"));
    let err = r.error.as_deref().unwrap();
    assert!(err.len() < 600, "error of {} bytes", err.len());
    assert!(err.contains("xxxxxxxx…"), "{err}");
    assert_eq!(f.ok("print(len('still'))").await, "5\n");
    // The same kernel goes on.
    let n = f.run("print(kept, sys.getrecursionlimit())").await;
    assert_success(&n);
    assert_eq!(n.output, "yes 250000\n");
    assert_eq!(n.kernel.id, r.kernel.id);
    shut_down_and_check(&f).await;
}

// ---------------------------------------------------------------------------
// 5. Binary and invalid UTF-8 output
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_and_invalid_utf8_output_comes_back_as_clean_text() {
    let f = Fixture::with(|o| o.max_stdout_bytes = 20_000);
    let r = f
        .run(
            "import os, sys\n\
             sys.stdout.flush()\n\
             os.write(1, bytes(range(256)) * 1000)\n\
             os.write(2, b'err \\xff\\xfe\\xc3 tail\\n')\n\
             os.write(1, b'\\nhalf a char: \\xe2\\x82')\n\
             os.write(1, b'\\xac euro\\n')\n\
             print('done')",
        )
        .await;
    assert_success(&r);
    assert!(r.stdout_truncated, "{}", show(&r));
    // The printable ASCII run survives; control bytes are gone; invalid
    // bytes are U+FFFD; a character split across writes is whole again.
    assert!(
        r.output
            .contains(" !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
        "{}",
        show(&r)
    );
    assert!(r.output.contains('\u{FFFD}'), "{}", show(&r));
    assert!(
        !r.output
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t'),
        "control characters in the output"
    );
    assert!(
        r.output.contains("half a char: € euro\ndone\n"),
        "{}",
        show(&r)
    );
    assert!(
        r.output
            .contains("--- stderr ---\nerr \u{FFFD}\u{FFFD}\u{FFFD} tail\n"),
        "{}",
        show(&r)
    );
    assert_eq!(f.ok("print('ok')").await, "ok\n");
    shut_down_and_check(&f).await;
}

// ---------------------------------------------------------------------------
// 6. SIGINT and SIGTERM ignored or blocked
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_that_ignores_sigint_and_sigterm_is_killed_at_the_timeout() {
    let f = Fixture::with(|o| {
        o.interrupt_grace = Duration::from_millis(300);
        o.kill_grace = Duration::from_millis(300);
    });
    f.ok("x = 1").await;
    let code = "import os, signal\n\
                signal.signal(signal.SIGINT, signal.SIG_IGN)\n\
                signal.signal(signal.SIGTERM, signal.SIG_IGN)\n\
                print(f'kernel={os.getpid()}', flush=True)\n\
                while True:\n\
                \x20   pass\n";
    let r = f
        .reg
        .execute(ExecuteRequest::new(code).timeout(Duration::from_millis(1500)))
        .await;
    assert_eq!(r.status, Status::Timeout, "{}", show(&r));
    assert_eq!(r.exit_code, -1);
    assert_eq!(r.kernel.state_kept, Some(false), "{}", show(&r));
    assert_eq!(r.kernel.ended, Some(true), "{}", show(&r));
    let err = r.error.as_deref().unwrap_or_default();
    assert!(err.contains("killed") && err.contains("lost"), "{err}");
    // Timeout 1.5 s + interrupt grace + kill grace, with room for a loaded machine.
    assert!(r.duration_seconds < 10.0, "{}", show(&r));
    let pid = f.host_pid(tagged_pid(&r.output, "kernel"));
    assert!(
        eventually(Duration::from_secs(2), || !alive(pid)).await,
        "SIGKILL after the grace did not end the kernel"
    );
    assert_no_kernel_processes(&f, Duration::from_secs(2)).await;
    assert_fresh_kernel(&f, &r.kernel.id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_taking_sigio_over_does_not_kill_the_kernel_or_its_interrupts() {
    // Between cells the runner learns of requests by SIGIO, whose default
    // action ends a process: a cell that resets it must not turn the next
    // request into the kernel's death, and a later interrupt still works.
    let f = Fixture::with(|o| {
        o.interrupt_grace = Duration::from_secs(5);
        o.kill_grace = Duration::from_millis(300);
    });
    let r = f
        .run(
            "import signal
signal.signal(signal.SIGIO, signal.SIG_DFL)
x = 5",
        )
        .await;
    assert_success(&r);
    let n = f.run("print(x)").await;
    assert_success(&n);
    assert_eq!(n.output, "5\n");
    assert_eq!(n.kernel.id, r.kernel.id);
    let t = f
        .reg
        .execute(ExecuteRequest::new("while True:\n    pass").timeout(Duration::from_millis(800)))
        .await;
    assert_eq!(t.status, Status::Timeout, "{}", show(&t));
    assert_eq!(t.kernel.state_kept, Some(true), "{}", show(&t));
    let m = f.run("print(x + 1)").await;
    assert_success(&m);
    assert_eq!(m.output, "6\n");
    assert_eq!(m.kernel.id, r.kernel.id);
    shut_down_and_check(&f).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_sigint_and_sigterm_in_the_cells_thread_does_not_stop_the_interrupt() {
    // pthread_sigmask blocks a signal for the calling thread only: the
    // process-directed SIGINT is taken by another thread of the runner, and
    // Python raises KeyboardInterrupt in the main thread all the same.
    let f = Fixture::with(|o| {
        o.interrupt_grace = Duration::from_secs(5);
        o.kill_grace = Duration::from_millis(300);
    });
    f.ok("x = 1").await;
    let code = "import signal\n\
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})\n\
                x = 2\n\
                while True:\n\
                \x20   pass\n";
    let r = f
        .reg
        .execute(ExecuteRequest::new(code).timeout(Duration::from_millis(1000)))
        .await;
    assert_eq!(r.status, Status::Timeout, "{}", show(&r));
    assert_eq!(r.exit_code, -1);
    assert!(r.output.contains("KeyboardInterrupt"), "{}", show(&r));
    assert_eq!(r.kernel.state_kept, Some(true), "{}", show(&r));
    let n = f.run("print(x)").await;
    assert_success(&n);
    assert_eq!(n.output, "2\n");
    assert_eq!(n.kernel.id, r.kernel.id);
    assert!(!n.kernel.state_reset);
    shut_down_and_check(&f).await;
}

// ---------------------------------------------------------------------------
// 7. 100 subprocesses
// ---------------------------------------------------------------------------

/// Starts 100 `sleep 300`, half of them in sessions of their own, and
/// prints their pids.
const HUNDRED: &str = "import subprocess\n\
    procs = [subprocess.Popen(['sleep', '300'], start_new_session=(i % 2 == 0)) for i in range(100)]\n\
    for p in procs:\n\
    \x20   print(f'sleep={p.pid}')\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_subprocesses_live_with_their_kernel_and_die_with_it() {
    let f = Fixture::new();
    // Between cells the kernel leaves its children alone (a cell may start
    // a server for the next one): they live as long as the kernel does...
    let r = f.run(HUNDRED).await;
    assert_success(&r);
    let pids: Vec<u32> = common::tagged_pids(&r.output, "sleep")
        .into_iter()
        .map(|p| f.host_pid(p))
        .collect();
    assert_eq!(pids.len(), 100);
    assert!(
        pids.iter().all(|&p| alive(p)),
        "children died with the cell"
    );
    // The /proc scan every test relies on finds the kernel and all of them.
    let root = f.kernels_root();
    let scanned = eventually(Duration::from_secs(5), || {
        let found = kernel_processes(&root);
        pids.iter().all(|p| found.contains(p)) && found.len() >= 101
    })
    .await;
    assert!(scanned, "{:?} of {pids:?}", kernel_processes(&root));
    assert_eq!(
        f.ok("print(sum(p.poll() is None for p in procs))").await,
        "100\n"
    );
    // ...and none outlives it.
    assert_eq!(f.reg.shutdown("default").await, 1);
    assert!(
        eventually(Duration::from_secs(5), || pids.iter().all(|&p| !alive(p))).await,
        "left after shutdown: {:?}",
        pids.iter().filter(|&&p| alive(p)).collect::<Vec<_>>()
    );
    assert_no_kernel_processes(&f, Duration::from_secs(2)).await;

    // A cell that starts them and then ends its kernel (SystemExit): the
    // host kills the kernel's whole tree after the result.
    let r = f
        .run(&format!(
            "{HUNDRED}import sys\nsys.stdout.flush()\nsys.exit(0)"
        ))
        .await;
    assert_success(&r);
    assert_eq!(r.kernel.ended, Some(true), "{}", show(&r));
    // (Sandboxed, the kernel's PID namespace went with it: a pid no live
    // process of ours is known by inside one is gone.)
    let pids: Vec<u32> = common::tagged_pids(&r.output, "sleep")
        .into_iter()
        .map(|p| f.host_pid(p))
        .collect();
    assert_eq!(pids.len(), 100);
    assert!(
        eventually(Duration::from_secs(5), || pids.iter().all(|&p| !alive(p))).await,
        "left after the kernel exited: {:?}",
        pids.iter().filter(|&&p| alive(p)).collect::<Vec<_>>()
    );
    assert_no_kernel_processes(&f, Duration::from_secs(2)).await;

    // One that starts them and is interrupted once they all run: the
    // interrupt (SIGINT to the kernel's process group, as on a timeout)
    // ends the cell and keeps the kernel; the children in its group die of
    // the SIGINT, the setsid'd ones live on with the kernel, and dropping
    // the registry kills them.
    let started = f.work().join("hundred-started");
    let run = f.reg.execute(ExecuteRequest::new(format!(
        "{HUNDRED}import sys, time\nsys.stdout.flush()\n{}time.sleep(60)",
        common::py_mark(&started, "1")
    )));
    let interrupt = async {
        wait_file(&started, Duration::from_secs(30)).await;
        f.reg.interrupt("default")
    };
    let (r, signalled) = tokio::join!(run, interrupt);
    assert_eq!(signalled, 1);
    assert_eq!(r.status, Status::Interrupted, "{}", show(&r));
    let pids: Vec<u32> = common::tagged_pids(&r.output, "sleep")
        .into_iter()
        .map(|p| f.host_pid(p))
        .collect();
    assert_eq!(pids.len(), 100, "{}", show(&r));
    assert_eq!(r.kernel.state_kept, Some(true), "{}", show(&r));
    // HUNDRED starts the even-numbered ones in sessions of their own.
    let own_session: Vec<u32> = pids.iter().step_by(2).copied().collect();
    let in_group: Vec<u32> = pids.iter().skip(1).step_by(2).copied().collect();
    assert!(
        eventually(Duration::from_secs(5), || in_group
            .iter()
            .all(|&p| !alive(p)))
        .await,
        "the SIGINT did not reach the kernel's group"
    );
    assert!(own_session.iter().all(|&p| alive(p)));
    drop(f);
    assert!(
        eventually(Duration::from_secs(5), || pids.iter().all(|&p| !alive(p))).await,
        "left after the registry was dropped: {:?}",
        pids.iter().filter(|&&p| alive(p)).collect::<Vec<_>>()
    );
}

// ---------------------------------------------------------------------------
// 8. Flooding the rpc socket
// ---------------------------------------------------------------------------

/// 64 threads call `read_file` in a loop on their own connections, while 8
/// more write garbage lines to raw connections of their own.
const FLOOD: &str = r#"
import json, os, socket, threading
from toolcell_tools import read_file, ToolError
ok = 0
codes = {}
replies = {}
lock = threading.Lock()
def caller():
    global ok
    for _ in range(20):
        try:
            read_file('small.txt')
            with lock:
                ok += 1
        except ToolError as e:
            with lock:
                codes[e.code] = codes.get(e.code, 0) + 1
def garbage():
    path = os.environ['TOOLCELL_RPC'][len('unix:'):]
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    f = s.makefile('rwb')
    lines = [b'not json at all', b'{"tool": 1}', b'[]', b'\xff\xfe\x00',
             b'{"tool":"read_file","args":{"path":"small.txt"},"token":"wrong"}']
    for i in range(50):
        f.write(lines[i % len(lines)] + b'\n')
        f.flush()
        r = json.loads(f.readline())
        with lock:
            key = r.get('code', 'ok')
            replies[key] = replies.get(key, 0) + 1
    s.close()
threads = [threading.Thread(target=caller) for _ in range(64)]
threads += [threading.Thread(target=garbage) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print('ok', ok)
print('codes', sorted(codes.items()))
print('replies', sorted(replies.items()))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flooding_the_rpc_socket_from_72_threads_is_refused_within_budget_and_the_host_keeps_serving()
 {
    let f = Fixture::with(|o| o.max_tool_calls = 25);
    std::fs::write(f.work().join("small.txt"), "one line\n").unwrap();
    f.ok("import time").await;
    // Another session keeps being served while the flood runs.
    let flood = f
        .reg
        .execute(ExecuteRequest::new(FLOOD).timeout(Duration::from_secs(60)));
    let other = async {
        let mut outs = Vec::new();
        for i in 0..5 {
            let r = f.run_as("bystander", &format!("print({i} * 2)")).await;
            assert_success(&r);
            outs.push(r.output);
        }
        outs
    };
    let (r, outs) = tokio::join!(flood, other);
    assert_eq!(outs, ["0\n", "2\n", "4\n", "6\n", "8\n"]);
    assert_success(&r);
    // 64 x 20 attempts: exactly the budget ran, every other call was
    // refused with the budget code; the garbage got its codes, and a
    // connection survived every refusal (50 replies each).
    assert_eq!(r.tool_calls_made, 25, "{}", show(&r));
    assert_eq!(
        r.output,
        "ok 25\ncodes [('budget_exhausted', 1255)]\nreplies [('bad_request', 320), ('bad_token', 80)]\n",
        "{}",
        show(&r)
    );
    // The kernel and its tools still work, with a fresh budget.
    let r = f
        .run("print(read_file('small.txt')['content'], end='')")
        .await;
    assert_success(&r);
    assert_eq!(r.output, "one line\n");
    assert_eq!(r.tool_calls_made, 1);
    shut_down_and_check(&f).await;
}

/// A left-behind thread tries 2,000 connections to its own kernel's socket
/// and holds every one it gets; prints how many were admitted and how many
/// were refused on the spot (a refusal line, then end of stream).
const HOLD: &str = r#"
import json, os, select, socket, threading
path = os.environ['TOOLCELL_RPC'][len('unix:'):]
held = []
def hold():
    for _ in range(2000):
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(path)
        except OSError:
            s.close()
            continue
        held.append(s)
t = threading.Thread(target=hold, daemon=True)
t.start()
t.join()
refused, why = [], set()
p = select.poll()
for s in held:
    p.register(s, select.POLLIN)
by_fd = {s.fileno(): s for s in held}
quiet = 0
while quiet < 3:
    ready = p.poll(300)
    quiet = quiet + 1 if not ready else 0
    for fd, _ in ready:
        s = by_fd.pop(fd)
        p.unregister(fd)
        r = json.loads(s.recv(4096).decode())
        why.add((r['code'], r['error']))
        refused.append(s)
        s.close()
held = [s for s in held if s.fileno() != -1]
print('held', len(held), 'refused', len(refused))
print(sorted(why))
"#;

/// Fifty tool calls, each on a new connection (a new thread), while the
/// kernel is over its cap: every one must fail with the host's reason, even
/// when the host closed the connection before the stub sent its request.
const REFUSED_CALLS: &str = r#"
import threading
errs = []
def one():
    try:
        read_file('small.txt')
        errs.append('ran')
    except Exception as e:
        errs.append(str(e))
for _ in range(50):
    t = threading.Thread(target=one)
    t.start()
    t.join()
print('refused:', all('close some' in e for e in errs), len(errs))
"#;

fn open_fds() -> usize {
    common::entries(Path::new("/proc/self/fd")).len()
}

const HOLDING: &str = "adversarial::review_03_a_cell_holding_thousands_of_connections_is_capped_and_other_sessions_keep_their_tools";

#[test]
fn review_03_a_cell_holding_thousands_of_connections_is_capped_and_other_sessions_keep_their_tools()
{
    // The host's descriptors are counted: in a process of its own, so no
    // other test's kernels open or close any meanwhile.
    if !common::is_child(HOLDING) {
        common::run_child(HOLDING, &[]);
        return;
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(holding_thousands_of_connections());
}

async fn holding_thousands_of_connections() {
    let f = Fixture::new();
    std::fs::write(f.work().join("small.txt"), "one line\n").unwrap();
    // The bystander's kernel is up before the flood, so its socket and
    // tool calls are what must keep working.
    let r = f
        .run_as(
            "bystander",
            "print(read_file('small.txt')['content'], end='')",
        )
        .await;
    assert_success(&r);
    let before = open_fds();
    let r = f.run(HOLD).await;
    assert_success(&r);
    assert_eq!(
        r.output,
        format!(
            "held {} refused {}\n[('bad_token', 'connection refused: this kernel already has the most tool-call connections open at once; close some')]\n",
            toolcell_rpc::DEFAULT_MAX_CONNECTIONS,
            2000 - toolcell_rpc::DEFAULT_MAX_CONNECTIONS
        ),
        "{}",
        show(&r)
    );
    // The host spent at most the cap on the flood, not 2,000 descriptors.
    let during = open_fds();
    assert!(
        during < before + toolcell_rpc::DEFAULT_MAX_CONNECTIONS + 16,
        "host fds {before} -> {during}"
    );
    // Another session's tools and a new kernel still work while the
    // connections are held.
    let r = f
        .run_as(
            "bystander",
            "print(read_file('small.txt')['content'], end='')",
        )
        .await;
    assert_success(&r);
    assert_eq!(r.output, "one line\n");
    let r = f.run_as("newcomer", "print(6 * 7)").await;
    assert_success(&r);
    assert_eq!(r.output, "42\n");
    // The flooding kernel's own tool call says why it cannot connect;
    // closing what it holds gives its tools back.
    let r = f.run(REFUSED_CALLS).await;
    assert_eq!(r.output, "refused: True 50\n", "{}", show(&r));
    let r = f
        .run("for s in held:\n    s.close()\nimport time; time.sleep(0.3)\nprint(read_file('small.txt')['content'], end='')")
        .await;
    assert_success(&r);
    assert_eq!(r.output, "one line\n", "{}", show(&r));
    shut_down_and_check(&f).await;
}

// ---------------------------------------------------------------------------
// 9. Another kernel's socket
// ---------------------------------------------------------------------------

/// Defines `call(endpoint, token)`: one raw tool call on a new connection,
/// returning the reply object.
const RAW_CALL: &str = r#"
import json, os, socket
def call(endpoint, token):
    s = socket.socket(socket.AF_UNIX)
    s.connect(endpoint[len('unix:'):])
    req = {'tool': 'read_file', 'args': {'path': 'small.txt'}, 'token': token}
    s.sendall(json.dumps(req).encode() + b'\n')
    reply = json.loads(s.makefile('rb').readline())
    s.close()
    return reply
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_cannot_use_another_kernels_socket_without_its_token_or_outside_its_cell() {
    // The token and peer checks, as the layer under the sandbox (which
    // hides the other kernel's socket altogether).
    let f = Fixture::unsandboxed();
    std::fs::write(f.work().join("small.txt"), "one line\n").unwrap();
    let b_file = f.work().join("b-endpoint.json");
    // Session B writes where its socket is and its token (to a file: the
    // output would redact nothing here, but a file is what a snooping cell
    // would reach for anyway).
    let r = f
        .run_as(
            "b",
            &format!(
                "import json, os\nopen({:?}, 'w').write(json.dumps([os.environ['TOOLCELL_RPC'], os.environ['TOOLCELL_RPC_TOKEN']]))",
                b_file.display().to_string()
            ),
        )
        .await;
    assert_success(&r);
    // Session A finds B's socket (same user: B's 0700 directory is open to
    // it), and tries its own token, then B's real one while B is idle.
    let code = format!(
        "{RAW_CALL}\nb_endpoint, b_token = json.load(open({:?}))\n\
         mine = os.environ['TOOLCELL_RPC']\n\
         print(b_endpoint != mine and os.path.exists(b_endpoint[len('unix:'):]))\n\
         print(call(b_endpoint, os.environ['TOOLCELL_RPC_TOKEN']).get('code'))\n\
         print(call(b_endpoint, b_token).get('code'))\n\
         print(call(mine, b_token).get('code'))\n\
         print(call(mine, os.environ['TOOLCELL_RPC_TOKEN'])['ok'])",
        b_file.display().to_string()
    );
    let r = f.run_as("a", &code).await;
    assert_success(&r);
    // With per-kernel cgroups, B's socket refuses every process outside B's
    // cgroup at connect (bad_token, whatever token it sends); without, the
    // token and the per-cell authority are the fences.
    let fenced = toolcell_sys::cgroup::HostCgroup::get().is_some();
    assert_eq!(
        r.output,
        if fenced {
            "True\nbad_token\nbad_token\nbad_token\nTrue\n"
        } else {
            "True\nbad_token\nno_active_cell\nbad_token\nTrue\n"
        },
        "{}",
        show(&r)
    );
    assert_eq!(r.tool_calls_made, 1, "{}", show(&r));

    // What the token is without cgroups: a capability. While B runs a
    // cell, a same-user process holding B's token may call B's tools,
    // counted in B's cell. With cgroups, only B's own processes may.
    let started = f.work().join("b-started");
    let a_done = f.work().join("a-done");
    let b_cell = format!(
        "import os, time\n{}\nfor _ in range(3000):\n    if os.path.exists({:?}):\n        break\n    time.sleep(0.01)\nprint('b done')",
        common::py_mark(&started, "1"),
        a_done.display().to_string()
    );
    let b_run = f.reg.execute(ExecuteRequest::new(b_cell).owner("b"));
    let a_run = async {
        wait_file(&started, Duration::from_secs(10)).await;
        let r = f
            .run_as(
                "a",
                &format!(
                    "print(call(b_endpoint, b_token)['ok'])\nprint(call(b_endpoint, os.environ['TOOLCELL_RPC_TOKEN']).get('code'))\n_ = open({:?}, 'w').write('1')",
                    a_done.display().to_string()
                ),
            )
            .await;
        std::fs::write(&a_done, "1").unwrap();
        r
    };
    let (b, a) = tokio::join!(b_run, a_run);
    assert_success(&a);
    let expect = if fenced {
        "False\nbad_token\n"
    } else {
        "True\nbad_token\n"
    };
    assert_eq!(a.output, expect, "{}", show(&a));
    assert_eq!(a.tool_calls_made, 0, "{}", show(&a));
    assert_success(&b);
    assert_eq!(b.tool_calls_made, u32::from(!fenced), "{}", show(&b));
    shut_down_and_check(&f).await;
}

// ---------------------------------------------------------------------------
// 10. The host's environment through /proc
// ---------------------------------------------------------------------------

const ENVIRON: &str =
    "adversarial::a_cell_reading_the_hosts_proc_environ_gets_no_secret_back_through_toolcell";
const HOST_SECRET: &str = "adv-Vq3Rk8Zt1Wn6Lp0Xs5Hd9Bc2Jf7Mg4";

#[test]
fn a_cell_reading_the_hosts_proc_environ_gets_no_secret_back_through_toolcell() {
    // The secret must be in the host's environment before the registry is
    // built: a host process of its own gets it from the start.
    if !common::is_child(ENVIRON) {
        common::run_child(ENVIRON, &[("TOOLCELL_ADV_SECRET_TOKEN", HOST_SECRET)]);
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // The redactor, as the layer under the sandbox (which hides the
        // host's process altogether: sandbox::the_hosts_environ_fds_and_memory_are_out_of_reach).
        let f = Fixture::with(|o| {
            o.max_stdout_bytes = 2000;
            o.sandbox = toolcell_kernel::sandbox::Policy::off();
        });
        // The kernel's own environment does not have it.
        let r = f
            .run("import os\nprint('TOOLCELL_ADV_SECRET_TOKEN' in os.environ, os.getppid())")
            .await;
        assert_success(&r);
        assert_eq!(
            r.output,
            format!("False {}\n", std::process::id()),
            "{}",
            show(&r)
        );
        let kernel_pid = f.reg.sessions()[0].pid;
        let env = std::fs::read(format!("/proc/{kernel_pid}/environ")).unwrap();
        assert!(!String::from_utf8_lossy(&env).contains(HOST_SECRET));

        // The host's is readable (same uid: not a sandbox), but whatever
        // way it is printed, the value does not come back, inline or
        // spilled: it is one of the host's secret values the redactor
        // knows.
        let (sink, mut live) = common::live_channel();
        let r = f
            .reg
            .execute(
                ExecuteRequest::new(
                    "raw = open(f'/proc/{os.getppid()}/environ', 'rb').read()\n\
                 pairs = [kv.decode(errors='replace') for kv in raw.split(b'\\0') if kv]\n\
                 mine = [kv for kv in pairs if kv.startswith('TOOLCELL_ADV_SECRET_TOKEN=')]\n\
                 print('readable', len(mine))\n\
                 print(mine[0])\n\
                 print('value only:', mine[0].split('=', 1)[1])\n\
                 print('reversed back:', mine[0].split('=', 1)[1][::-1][::-1])\n\
                 print('\\n'.join(pairs))\n\
                 print(('filler ' * 20 + '\\n') * 100, end='')\n\
                 print('last:', mine[0].split('=', 1)[1])\n\
                 raise RuntimeError(mine[0])",
                )
                .live(sink),
            )
            .await;
        // Live chunks (what `serve` streams and MCP sends as progress) are
        // cleaned too.
        let mut streamed = String::new();
        while let Ok((_, chunk)) = live.try_recv() {
            streamed.push_str(&chunk);
        }
        assert!(streamed.contains("value only: «redacted:"), "{streamed}");
        assert!(
            !streamed.contains(HOST_SECRET),
            "the host secret was streamed live"
        );
        assert_eq!(r.status, Status::Error, "{}", show(&r));
        assert!(r.output.starts_with("readable 1\n"), "{}", show(&r));
        assert!(r.stdout_truncated, "{}", show(&r));
        assert!(
            !r.output.contains(HOST_SECRET),
            "the host secret leaked: {}",
            show(&r)
        );
        assert!(!r.error.as_deref().unwrap_or_default().contains(HOST_SECRET));
        assert!(r.output.contains("value only: «redacted:"), "{}", show(&r));
        assert!(r.output.contains("last: «redacted:"), "{}", show(&r));
        let spill = std::fs::read_to_string(r.stdout_spill_path.as_deref().unwrap()).unwrap();
        assert!(spill.contains("value only: «redacted:"), "{spill}");
        assert!(
            !spill.contains(HOST_SECRET),
            "the host secret reached the spill file"
        );
        // Nothing else the host wrote has it either.
        for dir in [f.spill_dir(), f.kernels_root()] {
            for p in walk(&dir) {
                let bytes = std::fs::read(&p).unwrap_or_default();
                assert!(
                    !String::from_utf8_lossy(&bytes).contains(HOST_SECRET),
                    "{} holds the host secret",
                    p.display()
                );
            }
        }
        shut_down_and_check(&f).await;
    });
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for p in common::entries(&d) {
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}
