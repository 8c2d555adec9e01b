//! The host-side file tools (`read_file`, `write_file`, `patch`,
//! `search_files`) on what is not a regular file — FIFOs, sockets,
//! devices, a process's own descriptors under `/proc/<pid>/fd` — and on
//! files too long to hold: each call is refused or cut promptly, never
//! blocks a host thread, and never outlives its cell's deadline.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::fd::AsRawFd as _;
use std::os::unix::fs::FileTypeExt as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolcell_tools::{ToolContext, ToolRegistry, ToolSettings};

/// Longest any refusal may take (a blocked open or read would take forever).
const PROMPT: Duration = Duration::from_secs(10);

fn cx(cwd: &Path, timeout: Duration, cancel: CancellationToken) -> ToolContext {
    ToolContext::new(
        Arc::new(ToolSettings::new(cwd)),
        tokio::time::Instant::now() + timeout,
        cancel,
    )
}

/// Validates and calls `tool`, failing the test if it takes longer than
/// [`PROMPT`].
async fn call(tool: &str, cwd: &Path, args: Value) -> Result<Value, String> {
    let reg = ToolRegistry::builtin().unwrap();
    let t = reg.get(tool).unwrap();
    t.validate(&args)?;
    let fut = t.call(
        args.clone(),
        cx(cwd, Duration::from_secs(60), CancellationToken::new()),
    );
    match tokio::time::timeout(PROMPT, fut).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => panic!("{tool}({args}) blocked for {PROMPT:?}"),
    }
}

async fn refused(tool: &str, cwd: &Path, args: Value) -> String {
    match call(tool, cwd, args.clone()).await {
        Ok(v) => panic!("{tool}({args}) was not refused: {v}"),
        Err(e) => e,
    }
}

fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
}

#[tokio::test]
async fn fifos_sockets_and_devices_are_refused_by_every_file_tool() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    mkfifo(&dir.join("fifo"));
    let _listener = std::os::unix::net::UnixListener::bind(dir.join("sock")).unwrap();
    std::fs::write(dir.join("ok.txt"), "needle here\n").unwrap();

    for (path, kind) in [
        ("fifo", "FIFO"),
        ("sock", "socket"),
        ("/dev/null", "character device"),
        ("/dev/zero", "character device"),
    ] {
        for (tool, args) in [
            ("read_file", json!({"path": path})),
            ("write_file", json!({"path": path, "content": "x"})),
            (
                "patch",
                json!({"path": path, "old_string": "a", "new_string": "b"}),
            ),
            ("search_files", json!({"pattern": "x", "path": path})),
        ] {
            let e = refused(tool, dir, args).await;
            assert!(
                e.contains(kind) && e.contains("not a regular file"),
                "{tool} on {path}: {e}"
            );
        }
    }
    // patch never creates or moves onto one either.
    let e = refused(
        "patch",
        dir,
        json!({"mode": "patch", "patch": "*** Begin Patch\n*** Add File: fifo\n+x\n*** End Patch"}),
    )
    .await;
    assert!(
        e.contains("FIFO") && e.contains("Nothing was changed"),
        "{e}"
    );
    let e = refused(
        "patch",
        dir,
        json!({"mode": "patch", "patch": "*** Begin Patch\n*** Update File: ok.txt\n*** Move to: sock\n@@\n-needle here\n+moved\n*** End Patch"}),
    )
    .await;
    assert!(e.contains("socket"), "{e}");
    assert_eq!(
        std::fs::read_to_string(dir.join("ok.txt")).unwrap(),
        "needle here\n"
    );

    // Nothing was replaced or written through.
    assert!(
        std::fs::symlink_metadata(dir.join("fifo"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
    assert!(
        std::fs::symlink_metadata(dir.join("sock"))
            .unwrap()
            .file_type()
            .is_socket()
    );

    // A search over the directory skips them and finds the text file.
    let out = call("search_files", dir, json!({"pattern": "needle"}))
        .await
        .unwrap();
    assert_eq!(out["total"], 1, "{out}");
}

#[tokio::test]
async fn a_processs_own_descriptors_are_refused_however_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // A regular file this process holds open: readable through its
    // descriptor, but not a path the tools may use.
    let held = dir.join("held.txt");
    std::fs::write(&held, "host data\n").unwrap();
    let file = std::fs::File::open(&held).unwrap();
    let fd = file.as_raw_fd();
    std::os::unix::fs::symlink(format!("/proc/self/fd/{fd}"), dir.join("link")).unwrap();
    let pid = std::process::id();
    let names = [
        format!("/proc/self/fd/{fd}"),
        format!("/proc/{pid}/fd/{fd}"),
        format!("/proc/{pid}/task/{pid}/fd/{fd}"),
        format!("/dev/fd/{fd}"),
        format!("/proc/../proc/self/fd/{fd}"),
        "link".to_string(),
        "/dev/stdin".to_string(),
    ];
    for path in &names {
        for (tool, args) in [
            ("read_file", json!({"path": path})),
            ("write_file", json!({"path": path, "content": "x"})),
            (
                "patch",
                json!({"path": path, "old_string": "host", "new_string": "cell"}),
            ),
            ("search_files", json!({"pattern": "host", "path": path})),
        ] {
            let e = refused(tool, dir, args).await;
            assert!(e.contains("open file descriptor"), "{tool} on {path}: {e}");
        }
    }
    let e = refused(
        "search_files",
        dir,
        json!({"pattern": "x", "path": "/proc/self/fd"}),
    )
    .await;
    assert!(e.contains("open file descriptor"), "{e}");
    assert_eq!(std::fs::read_to_string(&held).unwrap(), "host data\n");
    // The file itself, by its real name, is fine.
    let out = call("read_file", dir, json!({"path": "held.txt"}))
        .await
        .unwrap();
    assert_eq!(out["content"], "host data\n");
    drop(file);
}

#[tokio::test]
async fn read_file_cuts_long_lines_and_stops_content_at_its_cap() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let long = 3 * 1024 * 1024;
    let mut text = String::from("short\n");
    text.push_str(&"x".repeat(long));
    text.push_str("\nend\n");
    std::fs::write(dir.join("long.txt"), &text).unwrap();
    let out = call("read_file", dir, json!({"path": "long.txt"}))
        .await
        .unwrap();
    let content = out["content"].as_str().unwrap();
    let lines: Vec<&str> = content.lines().collect();
    assert_eq!(lines.len(), 3, "{:.200}", content);
    assert_eq!(lines[0], "short");
    let kept = 64 * 1024;
    assert!(lines[1].starts_with(&"x".repeat(kept)), "{:.80}", lines[1]);
    assert!(
        lines[1].ends_with(&format!("… [line cut: {} more bytes]", long - kept)),
        "{}",
        &lines[1][kept..]
    );
    assert_eq!(lines[2], "end");
    assert_eq!(out["total_lines"], 3);
    assert_eq!(out["truncated"], false);

    // 5 MiB of 1 KiB lines: content stops at a line boundary under 4 MiB,
    // says lines remain, and the next page starts where it stopped.
    let line = format!("{}\n", "y".repeat(1023));
    std::fs::write(dir.join("many.txt"), line.repeat(5 * 1024)).unwrap();
    let out = call(
        "read_file",
        dir,
        json!({"path": "many.txt", "limit": 100000}),
    )
    .await
    .unwrap();
    let content = out["content"].as_str().unwrap();
    assert_eq!(content.len(), 4 * 1024 * 1024);
    assert!(content.ends_with('\n'));
    assert_eq!(out["truncated"], true);
    assert_eq!(out["total_lines"], 5 * 1024);
    let returned = content.lines().count();
    let next = call(
        "read_file",
        dir,
        json!({"path": "many.txt", "offset": returned + 1, "limit": 100000}),
    )
    .await
    .unwrap();
    assert_eq!(next["content"].as_str().unwrap().lines().count(), 1024);
    assert_eq!(next["truncated"], false);
}

/// Bytes this process has read with read(2) and friends so far.
fn bytes_read_by_this_process() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("rchar:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_file_answers_by_the_deadline_and_its_reader_stops() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Text, then a 64 GiB hole (sparse: no disk used) that reads as one
    // endless line of NUL bytes: minutes to scan.
    let path = dir.join("huge.txt");
    std::fs::write(&path, "text line\n".repeat(2000)).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(64 << 30)
        .unwrap();
    let reg = ToolRegistry::builtin().unwrap();
    let t = reg.get("read_file").unwrap();
    let args = json!({"path": "huge.txt", "limit": 5000});

    let deadline = Duration::from_millis(1500);
    let started = Instant::now();
    let e = t
        .call(args.clone(), cx(dir, deadline, CancellationToken::new()))
        .await
        .unwrap_err()
        .to_string();
    let took = started.elapsed();
    assert!(e.contains("time ran out"), "{e}");
    // By the deadline, with room for a loaded machine; the scan would take
    // minutes.
    assert!(took < deadline + Duration::from_secs(3), "{took:?}");
    // The blocking reader stopped too: this process reads (almost) nothing
    // more. Wait (at most 5 s: it gives up within one piece of its scan,
    // and reads GB/s until then) for reading to stall...
    let mut last = (Instant::now(), bytes_read_by_this_process());
    let stalled = crate::wait::eventually(Duration::from_secs(5), || {
        if last.0.elapsed() < Duration::from_millis(100) {
            return false;
        }
        let now = (Instant::now(), bytes_read_by_this_process());
        let quiet = now.1 - last.1 < 8 << 20;
        last = now;
        quiet
    })
    .await;
    assert!(
        stalled,
        "the blocking reader still reads 5 s after the call answered"
    );
    // ...then watch it stay stopped: the passage of time is the subject.
    let before = bytes_read_by_this_process();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let more = bytes_read_by_this_process() - before;
    assert!(more < 64 << 20, "{more} bytes read after the call answered");

    // Cancelling the cell ends the call at once.
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let e = t
        .call(args, cx(dir, Duration::from_secs(60), cancel))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("cancelled"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}
