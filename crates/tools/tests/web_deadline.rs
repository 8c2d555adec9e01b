//! A page whose conversion outlives the cell's deadline: the call answers
//! in time and the converter thread stops with it (no core kept busy after
//! the cell returned). In its own test binary so that no other test's
//! converter thread is alive at the same time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "it/web_server/mod.rs"]
mod web_server;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolcell_tools::{ToolContext, ToolRegistry, ToolSettings};
use web_server::{Reply, Server};

/// Threads of this process named like the HTML converter ("web_extract-html",
/// cut to 15 bytes by the kernel).
fn converter_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.starts_with("web_extract-ht"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversion_past_the_deadline_stops_its_thread() {
    // Text in a table is foster-parented before it; html5ever's DOM finds
    // the table by a linear search of its siblings, so this page takes
    // minutes to parse (quadratic), though it is neither deep nor large.
    let body = format!("<table>{}", "text<b>x</b>".repeat(150_000));
    let server = Server::start(move |_| Reply::html(&body)).await;
    let tmp = tempfile::tempdir().unwrap();
    let reg = ToolRegistry::builtin().unwrap();
    let tool = reg.get("web_extract").unwrap();
    let deadline = Duration::from_millis(2500);
    let cx = ToolContext::new(
        Arc::new(ToolSettings::new(tmp.path()).spill_dir(tmp.path().join("spill"))),
        tokio::time::Instant::now() + deadline,
        CancellationToken::new(),
    );
    let started = Instant::now();
    let out = tool
        .call(json!({ "urls": [server.url("/table")] }), cx)
        .await
        .unwrap();
    // Cut at the deadline, with room for a loaded machine (the margin kept
    // before it is `deadline_margin_leaves_time_to_answer` in
    // src/builtin/web); the parse would take minutes.
    assert!(
        started.elapsed() < deadline + Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    let e = out["results"][0]["error"].as_str().unwrap_or_default();
    assert!(e.contains("timed out"), "{out}");
    // The thread gives up within one piece of the parse.
    let gone = Instant::now();
    while converter_threads() > 0 {
        assert!(
            gone.elapsed() < Duration::from_secs(5),
            "the converter thread still runs {:?} after the call answered",
            gone.elapsed()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
