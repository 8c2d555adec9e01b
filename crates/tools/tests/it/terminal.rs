//! `terminal`: real shells and process trees.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolcell_rpc::Dispatch;
use toolcell_tools::{ToolContext, ToolRegistry, ToolSettings};

fn settings(cwd: &Path) -> ToolSettings {
    ToolSettings::new(cwd).max_output_bytes(1000)
}

async fn run(cwd: &Path, args: Value) -> Result<Value, String> {
    run_with(settings(cwd), args, Duration::from_secs(30)).await
}

async fn run_with(
    settings: ToolSettings,
    args: Value,
    cell_left: Duration,
) -> Result<Value, String> {
    let reg = ToolRegistry::builtin().unwrap();
    let t = reg.get("terminal").unwrap();
    t.validate(&args)?;
    let cx = ToolContext::new(
        Arc::new(settings),
        tokio::time::Instant::now() + cell_left,
        tokio_util::sync::CancellationToken::new(),
    );
    t.call(args, cx).await.map_err(|e| e.to_string())
}

fn pid_alive(pid: u32) -> bool {
    toolcell_sys::process::alive(pid)
}

#[tokio::test]
async fn runs_in_the_session_cwd_and_merges_streams() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(
        tmp.path(),
        json!({"command": "pwd; echo out; echo err >&2; exit 3"}),
    )
    .await
    .unwrap();
    let text = out["output"].as_str().unwrap();
    let real = std::fs::canonicalize(tmp.path()).unwrap();
    assert!(text.starts_with(&format!("{}\n", real.display())), "{text}");
    assert!(text.contains("out\n") && text.contains("err\n"), "{text}");
    assert_eq!(out["exit_code"], 3);
    assert_eq!(out["timed_out"], false);
}

#[tokio::test]
async fn workdir_is_relative_to_the_cwd() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("sub")).unwrap();
    let out = run(
        tmp.path(),
        json!({"command": "basename \"$PWD\"", "workdir": "sub"}),
    )
    .await
    .unwrap();
    assert_eq!(out["output"], "sub\n");
    let err = run(tmp.path(), json!({"command": "true", "workdir": "missing"}))
        .await
        .unwrap_err();
    assert!(err.contains("not a directory"), "{err}");
}

#[tokio::test]
async fn stdin_is_empty() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(tmp.path(), json!({"command": "cat; echo done"}))
        .await
        .unwrap();
    assert_eq!(out["output"], "done\n");
}

#[tokio::test]
async fn output_is_capped_head_and_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(tmp.path(), json!({"command": "seq 1 100000"}))
        .await
        .unwrap();
    let text = out["output"].as_str().unwrap();
    assert!(text.starts_with("1\n2\n3\n"), "{}", &text[..50]);
    assert!(text.ends_with("99999\n100000\n"));
    assert!(text.contains("[OUTPUT TRUNCATED - "), "{text}");
    assert!(text.len() < 1200);
}

#[tokio::test]
async fn a_timeout_kills_the_tree_including_setsid_children_and_keeps_partial_output() {
    let tmp = tempfile::tempdir().unwrap();
    let pidfile = tmp.path().join("pids");
    let cmd = format!(
        "echo started; (setsid sleep 60 & echo $! >> {p}); sleep 60 & echo $! >> {p}; wait",
        p = pidfile.display()
    );
    let t0 = Instant::now();
    let out = run(tmp.path(), json!({"command": cmd, "timeout": 1}))
        .await
        .unwrap();
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert_eq!(out["timed_out"], true);
    assert_eq!(out["exit_code"], -1);
    let text = out["output"].as_str().unwrap();
    assert!(text.starts_with("started\n"), "{text}");
    assert!(text.contains("timed out after 1s"), "{text}");
    let pids: Vec<u32> = std::fs::read_to_string(&pidfile)
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    for p in pids {
        assert!(
            crate::wait::eventually(Duration::from_secs(5), || !pid_alive(p)).await,
            "process {p} survived the timeout"
        );
    }
}

#[tokio::test]
async fn the_cell_deadline_bounds_the_command() {
    let tmp = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let out = run_with(
        settings(tmp.path()),
        json!({"command": "sleep 30", "timeout": 60}),
        Duration::from_millis(500),
    )
    .await
    .unwrap();
    assert_eq!(out["timed_out"], true);
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn background_jobs_left_behind_are_killed_when_the_shell_exits() {
    let tmp = tempfile::tempdir().unwrap();
    let pidfile = tmp.path().join("bg");
    // The job closes its output, so only the "kill what is left" rule stops it.
    let cmd = format!(
        "sleep 60 >/dev/null 2>&1 & echo $! > {}; echo bye",
        pidfile.display()
    );
    let t0 = Instant::now();
    let out = run(tmp.path(), json!({"command": cmd})).await.unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(out["output"], "bye\n");
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        crate::wait::eventually(Duration::from_secs(5), || !pid_alive(pid)).await,
        "background job {pid} survived"
    );
}

#[tokio::test]
async fn the_environment_given_in_settings_replaces_the_hosts() {
    let tmp = tempfile::tempdir().unwrap();
    let s = settings(tmp.path()).env(vec![
        ("PATH".into(), std::env::var_os("PATH").unwrap()),
        ("ONLY_THIS".into(), "yes".into()),
    ]);
    let out = run_with(s, json!({"command": "env | sort"}), Duration::from_secs(10))
        .await
        .unwrap();
    let text = out["output"].as_str().unwrap();
    assert!(text.contains("ONLY_THIS=yes"), "{text}");
    assert!(!text.contains("HOME="), "{text}");
}

#[test]
fn background_pty_and_notify_are_blocked_parameters() {
    let reg = ToolRegistry::builtin().unwrap();
    let d = reg.dispatcher(ToolSettings::new("/"));
    let blocked = d.blocked_params("terminal");
    for p in ["background", "pty", "notify"] {
        assert!(blocked.contains(&p), "{p} not blocked: {blocked:?}");
    }
}
