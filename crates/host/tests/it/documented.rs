//! Result fields whose documented meaning had no test of its own:
//! `duration_seconds` counts the wait behind earlier cells of the session
//! and the kernel's start (docs/result.md, "duration_seconds"), and `usage`
//! is there when the kernel answered, absent when no code ran
//! (docs/result.md, "usage").
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use crate::common::{self, Fixture, show};
use toolcell_host::ExecuteRequest;
use toolcell_kernel::Status;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duration_seconds_counts_the_kernels_start_and_the_wait_behind_earlier_cells() {
    let f = Fixture::new();
    // The first cell of a session starts its kernel: the result's duration
    // is the caller's whole wait, not the cell's own run.
    let t0 = Instant::now();
    let first = f.reg.execute(ExecuteRequest::new("1").owner("q")).await;
    let wall = t0.elapsed().as_secs_f64();
    assert_eq!(first.status, Status::Success, "{}", show(&first));
    assert!(
        first.duration_seconds >= wall * 0.8 - 0.01,
        "duration {} s for a call that took {wall:.3} s",
        first.duration_seconds
    );
    // A cell sent while a 2 s cell of its session runs waits its turn,
    // and its duration says so.
    let started = f.tmp.path().join("slow-started");
    let slow = f.reg.execute(
        ExecuteRequest::new(format!(
            "{}import time; time.sleep(2)",
            common::py_mark(&started, "1")
        ))
        .owner("q"),
    );
    let queued = async {
        common::wait_file(&started, common::SYNC_LIMIT).await;
        f.reg.execute(ExecuteRequest::new("2").owner("q")).await
    };
    let (s, q) = tokio::join!(slow, queued);
    assert_eq!(s.status, Status::Success, "{}", show(&s));
    assert_eq!(q.output, "2\n", "{}", show(&q));
    assert!(
        q.duration_seconds >= 0.9,
        "a cell that waited ~2 s behind another reports {} s",
        q.duration_seconds
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_there_when_the_kernel_answered_and_absent_when_no_code_ran() {
    let f = Fixture::with(|o| o.deny = vec![regex::Regex::new("forbidden").unwrap()]);
    let ran = f.reg.execute(ExecuteRequest::new("x = 1").owner("u")).await;
    assert_eq!(ran.status, Status::Success, "{}", show(&ran));
    assert!(ran.usage.is_some(), "{}", show(&ran));
    let failed = f.reg.execute(ExecuteRequest::new("1/0").owner("u")).await;
    assert_eq!(failed.status, Status::Error, "{}", show(&failed));
    assert!(
        failed.usage.is_some(),
        "an error the kernel answered has usage"
    );
    // Refused by `[guard] deny` before any code ran: no usage, and the
    // field is left out of the JSON (not null).
    let refused = f
        .reg
        .execute(ExecuteRequest::new("forbidden = 1").owner("u"))
        .await;
    assert_ne!(refused.status, Status::Success, "{}", show(&refused));
    assert!(refused.usage.is_none(), "{}", show(&refused));
    let json = serde_json::to_value(&refused).unwrap();
    assert!(json.get("usage").is_none(), "{json}");
}

/// `[execution] interrupt_grace`: the interrupt is sent again once, halfway
/// through the grace (docs/configuration.md). A cell that swallows the
/// first SIGINT stops at the second, and its kernel and state live on;
/// without the second, it would be killed at the end of the grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_interrupt_is_sent_again_halfway_through_the_grace_and_the_state_survives() {
    // A grace long enough that the second interrupt (at 1 s + 3 s) and the
    // kill (at 1 s + 6 s) are far apart on a loaded machine.
    let f = Fixture::with(|o| o.interrupt_grace = Duration::from_secs(6));
    let set = f
        .reg
        .execute(ExecuteRequest::new("kept = 41").owner("g"))
        .await;
    assert_eq!(set.status, Status::Success, "{}", show(&set));
    let code = "import signal, time\nseen = []\ndef once(signum, frame):\n    \
                seen.append(signum)\n    if len(seen) >= 2:\n        raise KeyboardInterrupt\n\
                signal.signal(signal.SIGINT, once)\nwhile True:\n    time.sleep(0.02)\n";
    let t0 = Instant::now();
    let r = f
        .reg
        .execute(
            ExecuteRequest::new(code)
                .owner("g")
                .timeout(Duration::from_secs(1)),
        )
        .await;
    let took = t0.elapsed();
    assert_eq!(r.status, Status::Timeout, "{}", show(&r));
    // The first interrupt at 1 s, the second at 1 s + 3 s, the kill at 7 s:
    // the upper bound stays below the kill, or it would prove nothing.
    assert!(
        took >= Duration::from_millis(3500) && took < Duration::from_millis(6500),
        "the cell ended after {took:?}"
    );
    let next = f
        .reg
        .execute(ExecuteRequest::new("print(kept + 1, len(seen))").owner("g"))
        .await;
    assert_eq!(next.output, "42 2\n", "{}", show(&next));
    assert!(!next.kernel.state_reset, "{}", show(&next));
}

/// `[mcp_servers.NAME] cwd` (docs/mcp-servers.md): the server runs in that
/// directory; a relative one is taken from the configuration file's
/// directory.
#[cfg(feature = "mcp")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_server_runs_in_its_configured_cwd_relative_to_the_config_file() {
    use std::path::PathBuf;
    let deps = std::env::var_os("TOOLCELL_TEST_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/toolcell-ci/deps")
        });
    let python = deps.join("venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: install the MCP test servers with `scripts/test-deps.sh`",
        python.display()
    );
    let server =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tools/tests/mcp/fast_server.py");
    let tmp = tempfile::tempdir().unwrap();
    let conf = tmp.path().join("conf");
    std::fs::create_dir_all(conf.join("srv")).unwrap();
    let file = conf.join("toolcell.toml");
    std::fs::write(
        &file,
        format!(
            "[mcp_servers.fast]\ncommand = [{:?}, {:?}]\ncwd = \"srv\"\nstartup_timeout = 30\n",
            python.display().to_string(),
            server.display().to_string()
        ),
    )
    .unwrap();
    let config = toolcell_host::config::Config::from_file(&file).unwrap();
    let hub = toolcell_tools::mcp::McpHub::new(config.mcp_specs()).unwrap();
    let tools = hub.tools().await;
    assert!(tools.failed.is_empty(), "{:?}", tools.failed);
    let pid = hub.server_pid("fast").expect("the server runs");
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap();
    assert_eq!(cwd, std::fs::canonicalize(conf.join("srv")).unwrap());
    hub.shutdown().await;
}
