//! The Python reference client (tests/python/) against the real server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use crate::common::{PyDriver, deadline, runtime, wait_until};
use serde_json::json;
use toolcell_rpc::testing::EchoDispatch;
use toolcell_rpc::{CellSpec, Server, ServerConfig};

fn unix_server(dir: &std::path::Path) -> (Server, Arc<EchoDispatch>) {
    let d = Arc::new(EchoDispatch::new());
    let s = Server::bind_unix(dir, d.clone(), ServerConfig::default()).unwrap();
    (s, d)
}

#[test]
fn calls_return_results_and_refusals_raise_tool_error_with_the_code() {
    let rt = runtime();
    let _g = rt.enter();
    let tmp = tempfile::tempdir().unwrap();
    let (server, _) = unix_server(&tmp.path().join("k"));
    let mut py = PyDriver::spawn(server.endpoint(), server.token().expose());
    let cell = server
        .open_cell(
            CellSpec::new("c1", deadline(60))
                .budget(1)
                .enable(["echo", "fail"]),
        )
        .unwrap();
    let a = py.call("echo", json!({"path": "a.txt", "n": [1, 2]}));
    assert_eq!(
        a,
        json!({"ok": true, "result": {"cell": "c1", "args": {"path": "a.txt", "n": [1, 2]}}})
    );
    let a = py.call("sleep", json!({"ms": 1}));
    assert_eq!(a["code"], "not_allowed");
    let a = py.call("echo", json!({}));
    assert_eq!(a["code"], "budget_exhausted");
    drop(cell);

    // A new cell: budget is fresh, and tool failures carry the tool's message.
    let cell = server
        .open_cell(
            CellSpec::new("c2", deadline(60))
                .budget(1)
                .enable(["echo", "fail"]),
        )
        .unwrap();
    let a = py.call("fail", json!({"message": "no such file: a.txt"}));
    assert_eq!(a["code"], "tool_failed");
    assert_eq!(a["error"], "no such file: a.txt");
    assert_eq!(cell.settle().dispatched(), 1);
}

#[test]
fn a_thread_left_behind_is_refused_no_active_cell() {
    let rt = runtime();
    let _g = rt.enter();
    let tmp = tempfile::tempdir().unwrap();
    let (server, d) = unix_server(&tmp.path().join("k"));
    let mut py = PyDriver::spawn(server.endpoint(), server.token().expose());
    let cell1 = server
        .open_cell(CellSpec::new("c1", deadline(60)).enable(["echo"]))
        .unwrap();
    assert_eq!(py.call("echo", json!({}))["ok"], true);
    // The cell starts a thread that will call a tool later, then finishes.
    assert_eq!(
        py.cmd(json!({"op": "spawn", "name": "t", "tool": "echo", "args": {"late": true}})),
        json!({"spawned": "t"})
    );
    let report = cell1.settle();
    assert_eq!(report.dispatched(), 1);
    let late = py.cmd(json!({"op": "release", "name": "t"}));
    assert_eq!(late["ok"], false, "{late}");
    assert_eq!(late["code"], "no_active_cell");
    assert_eq!(d.started(), 1, "the late call never ran");

    // Even while a later cell runs, a leftover thread can call, but only
    // under the new cell's authority (never cell 1's).
    let cell2 = server
        .open_cell(CellSpec::new("c2", deadline(60)).enable(["echo"]))
        .unwrap();
    py.cmd(json!({"op": "spawn", "name": "t2", "tool": "echo", "args": {}}));
    let a = py.cmd(json!({"op": "release", "name": "t2"}));
    assert_eq!(a["result"]["cell"], "c2");
    drop(cell2);
}

#[test]
fn threads_each_get_their_own_connection_and_call_in_parallel() {
    let rt = runtime();
    let _g = rt.enter();
    let tmp = tempfile::tempdir().unwrap();
    let (server, _) = unix_server(&tmp.path().join("k"));
    let cell = server
        .open_cell(
            CellSpec::new("c", deadline(120))
                .budget(8 * 200)
                .enable(["echo"]),
        )
        .unwrap();
    let mut py = PyDriver::spawn(server.endpoint(), server.token().expose());
    let a = py.cmd(json!({"op": "parallel", "threads": 8, "calls": 200}));
    assert_eq!(a, json!({"errors": [], "connections": 8}));
    assert_eq!(cell.settle().dispatched(), 8 * 200);
}

#[test]
fn a_forked_child_opens_its_own_connection() {
    let rt = runtime();
    let _g = rt.enter();
    let tmp = tempfile::tempdir().unwrap();
    let (server, _) = unix_server(&tmp.path().join("k"));
    let cell = server
        .open_cell(CellSpec::new("c", deadline(60)).enable(["echo"]))
        .unwrap();
    let mut py = PyDriver::spawn(server.endpoint(), server.token().expose());
    let a = py.cmd(json!({"op": "fork_call"}));
    assert_eq!(a["child_ok"], true, "{a}");
    assert_eq!(a["first"]["ok"], true, "{a}");
    assert_eq!(
        a["after"]["result"]["args"],
        json!({"who": "parent-after"}),
        "{a}"
    );
    assert_eq!(cell.settle().dispatched(), 3);
}

#[test]
fn a_connection_lost_after_sending_is_an_unknown_outcome_and_never_replayed() {
    let rt = runtime();
    let _g = rt.enter();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("k");
    let (server, d) = unix_server(&dir);
    let cell = server
        .open_cell(CellSpec::new("c", deadline(60)).enable(["sleep", "echo"]))
        .unwrap();
    let mut py = PyDriver::spawn(server.endpoint(), server.token().expose());
    // The main thread has a working, cached connection.
    assert_eq!(py.call("echo", json!({}))["ok"], true);
    // Another thread starts a long call.
    py.cmd(json!({"op": "spawn", "name": "t", "tool": "sleep", "args": {"ms": 30_000}}));
    py.send(&json!({"op": "release", "name": "t"}));
    while d.started() < 2 {
        std::thread::sleep(Duration::from_millis(5));
    }
    // The server goes away while the call runs (the cell is still open).
    drop(server);
    let a = py.answer();
    drop(cell);
    assert_eq!(a["ok"], false, "{a}");
    assert_eq!(a["code"], json!(null), "{a}");
    let msg = a["error"].as_str().unwrap();
    assert!(
        msg.contains("outcome is unknown") && msg.contains("not retried"),
        "{msg}"
    );
    assert_eq!(d.started(), 2, "the call was not replayed");

    // A new server at the same path: the main thread's cached connection is
    // dead; the client notices *before* sending, reconnects, and is answered
    // (with the new server's verdict on its now-stale token) instead of
    // failing with an unknown outcome.
    // (The old server's connections close on its runtime right after the
    // drop; wait until the client can see that, as a real client would
    // only call later.)
    wait_until("the client sees the old server's connection closed", || {
        py.cmd(json!({"op": "cached_usable"}))["usable"] == false
    });
    let (server2, d2) = unix_server(&dir);
    let _cell = server2
        .open_cell(CellSpec::new("c2", deadline(60)).enable(["echo"]))
        .unwrap();
    let a = py.call("echo", json!({}));
    assert_eq!(a["code"], "bad_token", "{a}");
    assert_eq!(d2.started(), 0);
}

#[test]
fn an_interrupted_call_never_leaves_its_reply_for_the_next_call() {
    let rt = runtime();
    let _g = rt.enter();
    let tmp = tempfile::tempdir().unwrap();
    let (server, _) = unix_server(&tmp.path().join("k"));
    let cell = server
        .open_cell(CellSpec::new("c", deadline(60)).enable(["sleep", "echo"]))
        .unwrap();
    let mut py = PyDriver::spawn(server.endpoint(), server.token().expose());
    let a = py.cmd(json!({"op": "interrupt_then_call", "ms": 400}));
    assert_eq!(a["interrupted"], true, "{a}");
    assert_eq!(
        a["after"],
        json!({"ok": true, "result": {"cell": "c", "args": {"after": true}}}),
        "the call after an interrupt must get its own reply"
    );
    drop(cell);
}
