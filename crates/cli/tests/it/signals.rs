//! Signals to the real binary: its kernels die with it, and no Python
//! process outlives it, even after SIGKILL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use crate::common::{Env, Serve, alive, eventually, session_pid, signal};
use nix::sys::signal::Signal;
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);

/// Code that starts a grandchild Python, prints both pids, then sleeps.
const SLEEPER: &str = "import os, subprocess, sys, time\n\
     child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n\
     print(os.getpid(), child.pid, flush=True)\n\
     time.sleep(60)";

fn serve_with_running_cell(env: &Env) -> (Serve, i32, i32) {
    let mut s = Serve::start(env, &[]);
    s.request(
        1,
        "execute",
        json!({"session": "k", "code": SLEEPER, "stream": true}),
    );
    let note = s.next(LIMIT);
    let chunk = note["params"]["chunk"].as_str().unwrap().to_string();
    let mut it = chunk
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse::<i32>().unwrap());
    // The cell prints its sandbox's pids; the host's are checked.
    let (kernel, child) = (
        env.host_pid(it.next().unwrap()),
        env.host_pid(it.next().unwrap()),
    );
    // The kernel pid, as the client finds it: through `sessions`.
    let r = s.call(2, "sessions", json!({}));
    assert_eq!(session_pid(&r["result"], "k"), Some(kernel));
    assert!(alive(kernel) && alive(child));
    (s, kernel, child)
}

fn serve_signal_kills_kernels(sig: Signal, code: i32) {
    let env = Env::fast();
    let (mut s, kernel, child) = serve_with_running_cell(&env);
    signal(s.pid(), sig);
    let st = s.wait(LIMIT);
    assert_eq!(st.code(), Some(code), "{st:?}");
    assert!(!alive(kernel), "the kernel outlived serve");
    assert!(
        eventually(Duration::from_millis(500), || !alive(child)),
        "the cell's subprocess outlived serve"
    );
    assert!(env.python_pids().is_empty(), "{:?}", env.python_pids());
    s.assert_only_jsonrpc();
}

#[test]
fn sigterm_to_serve_kills_its_kernels_first() {
    serve_signal_kills_kernels(Signal::SIGTERM, 143);
}

#[test]
fn sigint_to_serve_kills_its_kernels_first() {
    serve_signal_kills_kernels(Signal::SIGINT, 130);
}

#[test]
fn sigkill_to_serve_mid_cell_leaves_no_python_behind() {
    let env = Env::fast();
    let (mut s, kernel, child) = serve_with_running_cell(&env);
    signal(s.pid(), Signal::SIGKILL);
    s.wait(LIMIT);
    assert!(
        eventually(Duration::from_secs(2), || !alive(kernel)
            && !alive(child)
            && env.python_pids().is_empty()),
        "python left 2 s after SIGKILL: {:?}",
        env.python_pids()
    );
    // The next host sweeps the kernel directories the killed one left.
    let kernels = env.runtime_dir().join("toolcell/kernels");
    let left: Vec<_> = std::fs::read_dir(&kernels)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        !left.is_empty(),
        "a SIGKILLed host cannot clean up after itself"
    );
    env.run(&["exec", "print(1)"]).expect_code(0);
    let after: Vec<_> = std::fs::read_dir(&kernels)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    for name in &left {
        assert!(!after.contains(name), "{name:?} was not swept");
    }
}

/// Starts `exec CODE`, waits for its first stdout line (kernel and child pids).
fn exec_with_running_cell(env: &Env, extra: &[&str]) -> (std::process::Child, i32, i32) {
    let mut child = env
        .cmd()
        .arg("exec")
        .args(extra)
        .arg(SLEEPER)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let mut it = line.split_whitespace().map(|p| p.parse::<i32>().unwrap());
    // The cell prints its sandbox's pids; the host's are checked.
    let pids = (
        env.host_pid(it.next().unwrap()),
        env.host_pid(it.next().unwrap()),
    );
    assert!(alive(pids.0) && alive(pids.1));
    (child, pids.0, pids.1)
}

fn exec_signal_kills_kernel(sig: Signal, code: i32) {
    let env = Env::fast();
    let (mut child, kernel, sub) = exec_with_running_cell(&env, &[]);
    signal(i32::try_from(child.id()).unwrap(), sig);
    let st = common::wait_limit(&mut child, LIMIT).unwrap();
    assert_eq!(st.code(), Some(code), "{st:?}");
    assert!(!alive(kernel), "the kernel outlived exec");
    assert!(
        eventually(Duration::from_millis(500), || !alive(sub)),
        "the cell's subprocess outlived exec"
    );
    assert!(env.python_pids().is_empty(), "{:?}", env.python_pids());
}

#[test]
fn sigint_to_exec_exits_130_and_kills_the_kernel() {
    exec_signal_kills_kernel(Signal::SIGINT, 130);
}

#[test]
fn sigterm_to_exec_kills_the_kernel() {
    exec_signal_kills_kernel(Signal::SIGTERM, 143);
}

#[test]
fn sigkill_to_exec_leaves_no_python_behind() {
    let env = Env::fast();
    let (mut child, kernel, sub) = exec_with_running_cell(&env, &[]);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        eventually(Duration::from_secs(2), || !alive(kernel) && !alive(sub)),
        "python left 2 s after SIGKILL: {:?}",
        env.python_pids()
    );
}

#[test]
fn sigint_to_exec_session_interrupts_the_cell_and_keeps_the_session() {
    let env = Env::fast();
    env.run(&["exec", "--session", "a", "kept = 'yes'"])
        .expect_code(0);
    let mut child = env
        .cmd()
        .args([
            "exec",
            "--session",
            "a",
            "import sys, time\nprint('running', flush=True)\ntime.sleep(30)",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "running\n");
    signal(i32::try_from(child.id()).unwrap(), Signal::SIGINT);
    let out = common::finish(child, LIMIT);
    out.expect_code(130);
    assert!(
        out.stderr.contains("[toolcell] interrupted"),
        "{}",
        out.stderr
    );
    let out = env.run(&["exec", "--session", "a", "print(kept)"]);
    out.expect_code(0);
    assert_eq!(out.stdout, "yes\n");
}

#[test]
fn sigterm_to_the_daemon_kills_its_kernels_and_removes_its_socket() {
    let env = Env::fast();
    env.run(&["exec", "--session", "a", "x = 1"]).expect_code(0);
    let st = env.daemon_status();
    let daemon = i32::try_from(st["pid"].as_i64().unwrap()).unwrap();
    let kernel = session_pid(&st, "a").unwrap();
    let socket = st["socket"].as_str().unwrap().to_string();
    signal(daemon, Signal::SIGTERM);
    assert!(eventually(Duration::from_secs(5), || !alive(daemon)));
    assert!(!alive(kernel), "the kernel outlived its daemon");
    assert!(!std::path::Path::new(&socket).exists());
    env.run(&["daemon", "status"]).expect_code(3);
}
