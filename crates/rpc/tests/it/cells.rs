//! Per-cell authority, budget and cancellation, over in-memory connections.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;
use toolcell_rpc::testing::{Connection, EchoDispatch};
use toolcell_rpc::{CallOutcome, CellSpec, ErrorCode, OpenCellError, Server, ServerConfig};

fn setup() -> (Server, Arc<EchoDispatch>) {
    let d = Arc::new(EchoDispatch::new());
    let server = Server::unbound(d.clone(), ServerConfig::default()).unwrap();
    (server, d)
}

fn soon(secs: u64) -> Instant {
    Instant::now() + Duration::from_secs(secs)
}

fn code(r: &Value) -> &str {
    assert_eq!(r["ok"], false, "{r}");
    r["code"].as_str().unwrap()
}

#[tokio::test]
async fn budget_resets_at_each_cell() {
    let (server, _) = setup();
    let mut c = Connection::open(&server);
    let cell = server
        .open_cell(CellSpec::new("1", soon(60)).budget(2).enable(["echo"]))
        .unwrap();
    assert_eq!(c.call("echo", json!({})).await.unwrap()["ok"], true);
    assert_eq!(c.call("echo", json!({})).await.unwrap()["ok"], true);
    let r = c.call("echo", json!({})).await.unwrap();
    assert_eq!(code(&r), "budget_exhausted");
    assert!(r["error"].as_str().unwrap().contains("2 tool calls"), "{r}");
    let report = cell.settle();
    assert_eq!(report.dispatched(), 2);
    assert_eq!(report.refused(ErrorCode::BudgetExhausted), 1);

    let cell = server
        .open_cell(CellSpec::new("2", soon(60)).budget(2).enable(["echo"]))
        .unwrap();
    for _ in 0..2 {
        let r = c.call("echo", json!({})).await.unwrap();
        assert_eq!(r["result"]["cell"], "2");
    }
    assert_eq!(
        code(&c.call("echo", json!({})).await.unwrap()),
        "budget_exhausted"
    );
    assert_eq!(cell.settle().dispatched(), 2);
}

#[tokio::test]
async fn refusals_cost_no_budget() {
    let (server, d) = setup();
    let mut c = Connection::open(&server);
    let cell = server
        .open_cell(
            CellSpec::new("1", soon(60))
                .budget(1)
                .enable(["echo", "sleep"]),
        )
        .unwrap();
    let tok = c.token().to_owned();
    for _ in 0..3 {
        assert_eq!(
            code(&c.call("nope", json!({})).await.unwrap()),
            "unknown_tool"
        );
        assert_eq!(
            code(&c.call("fail", json!({})).await.unwrap()),
            "not_allowed"
        );
        assert_eq!(
            code(&c.call("echo", json!({"danger": 1})).await.unwrap()),
            "blocked_param"
        );
        assert_eq!(code(&c.call("sleep", json!({})).await.unwrap()), "bad_args");
        let r = c
            .request(&json!({"tool": "echo", "args": {}, "token": format!("{tok}0")}))
            .await
            .unwrap();
        assert_eq!(code(&r), "bad_token");
    }
    assert_eq!(d.started(), 0);
    assert_eq!(c.call("echo", json!({})).await.unwrap()["ok"], true);
    assert_eq!(
        code(&c.call("echo", json!({})).await.unwrap()),
        "budget_exhausted"
    );
    let report = cell.settle();
    assert_eq!(report.dispatched(), 1);
    assert_eq!(report.refused(ErrorCode::BadArgs), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_never_exceed_the_budget() {
    let (server, d) = setup();
    let cell = server
        .open_cell(CellSpec::new("race", soon(60)).budget(10).enable(["sleep"]))
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..40 {
        let mut c = Connection::open(&server);
        tasks.push(tokio::spawn(async move {
            c.call("sleep", json!({"ms": 5})).await.unwrap()
        }));
    }
    let mut ok = 0;
    let mut exhausted = 0;
    for t in tasks {
        let r = t.await.unwrap();
        if r["ok"] == true {
            ok += 1;
        } else {
            assert_eq!(code(&r), "budget_exhausted");
            exhausted += 1;
        }
    }
    assert_eq!((ok, exhausted), (10, 30));
    assert_eq!(d.started(), 10);
    assert_eq!(cell.settle().dispatched(), 10);
}

#[tokio::test]
async fn a_running_call_is_cancelled_when_its_cell_settles() {
    let (server, d) = setup();
    let mut c1 = Connection::open(&server);
    let cell1 = server
        .open_cell(CellSpec::new("cell-1", soon(60)).enable(["sleep", "echo"]))
        .unwrap();
    let pending = tokio::spawn(async move {
        let r = c1.call("sleep", json!({"ms": 30_000})).await.unwrap();
        (r, c1)
    });
    while d.started() == 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let started = Instant::now();
    let report = cell1.settle();
    assert_eq!(report.calls().len(), 1);
    assert_eq!(report.calls()[0].outcome(), CallOutcome::Cancelled);
    let (r, mut c1) = pending.await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(code(&r), "no_active_cell");
    let msg = r["error"].as_str().unwrap();
    assert!(msg.contains("ended") && msg.contains("cancelled"), "{msg}");
    assert_eq!(d.finished(), 0, "the cancelled call's future was dropped");

    // The same connection, now under cell 2, gets cell 2's context.
    let cell2 = server
        .open_cell(CellSpec::new("cell-2", soon(60)).enable(["echo"]))
        .unwrap();
    let r = c1.call("echo", json!({"k": 1})).await.unwrap();
    assert_eq!(r["result"]["cell"], "cell-2");
    let report = cell2.settle();
    assert_eq!(report.id(), "cell-2");
    assert_eq!(report.dispatched(), 1);
}

#[tokio::test]
async fn calls_after_the_cell_and_a_second_open_cell_are_refused() {
    let (server, _) = setup();
    let mut c = Connection::open(&server);
    let cell = server
        .open_cell(CellSpec::new("1", soon(60)).enable(["echo"]))
        .unwrap();
    let err = server
        .open_cell(CellSpec::new("2", soon(60)).enable(["echo"]))
        .unwrap_err();
    assert!(matches!(err, OpenCellError::AlreadyActive { .. }));
    assert!(err.to_string().contains("cell 1 is still active"), "{err}");
    assert_eq!(
        c.call("echo", json!({})).await.unwrap()["result"]["cell"],
        "1"
    );
    drop(cell); // dropping the handle retires the cell too
    let r = c.call("echo", json!({})).await.unwrap();
    assert_eq!(code(&r), "no_active_cell");
    assert!(r["error"].as_str().unwrap().contains("no cell is running"));
    // Now a new cell can open.
    let cell = server
        .open_cell(CellSpec::new("2", soon(60)).enable(["echo"]))
        .unwrap();
    assert_eq!(
        c.call("echo", json!({})).await.unwrap()["result"]["cell"],
        "2"
    );
    drop(cell);
}

#[tokio::test]
async fn the_cell_deadline_bounds_every_call() {
    let (server, d) = setup();
    let mut c = Connection::open(&server);
    let cell = server
        .open_cell(
            CellSpec::new("1", Instant::now() + Duration::from_millis(200)).enable(["sleep"]),
        )
        .unwrap();
    let t = Instant::now();
    let r = c.call("sleep", json!({"ms": 60_000})).await.unwrap();
    assert_eq!(code(&r), "timeout");
    assert!(t.elapsed() < Duration::from_secs(10));
    // Past the deadline a call is refused without taking budget.
    let r = c.call("sleep", json!({"ms": 1})).await.unwrap();
    assert_eq!(code(&r), "timeout");
    assert_eq!(d.started(), 1);
    let report = cell.settle();
    assert_eq!(report.dispatched(), 1);
    assert_eq!(
        report.calls()[0].outcome(),
        CallOutcome::Failed(ErrorCode::Timeout)
    );
    assert!(report.calls()[0].duration() >= Duration::from_millis(150));
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order_with_ids_echoed() {
    let (server, _) = setup();
    let mut c = Connection::open(&server);
    let cell = server
        .open_cell(CellSpec::new("1", soon(60)).enable(["echo", "sleep"]))
        .unwrap();
    let tok = c.token().to_owned();
    let mut buf = String::new();
    for (tool, args, id) in [
        ("sleep", json!({"ms": 50}), json!(1)),
        ("echo", json!({"n": 2}), json!("two")),
        ("nope", json!({}), json!(null)),
        ("echo", json!({"n": 4}), json!({"deep": [4]})),
    ] {
        buf.push_str(&json!({"tool": tool, "args": args, "token": tok, "id": id}).to_string());
        buf.push('\n');
    }
    buf.push_str("{\"tool\":\"echo\",\"token\":\"");
    buf.push_str(&tok);
    buf.push_str("\"}\n");
    c.send_raw(buf.as_bytes()).await.unwrap();
    let replies: Vec<Value> = {
        let mut v = Vec::new();
        for _ in 0..5 {
            v.push(c.read_reply().await.unwrap());
        }
        v
    };
    assert_eq!(replies[0]["id"], 1);
    assert_eq!(replies[0]["result"], json!({"slept_ms": 50}));
    assert_eq!(replies[1]["id"], "two");
    assert_eq!(replies[2]["id"], Value::Null);
    assert!(
        replies[2].as_object().unwrap().contains_key("id"),
        "a null id is echoed too"
    );
    assert_eq!(code(&replies[2]), "unknown_tool");
    assert_eq!(replies[3]["id"], json!({"deep": [4]}));
    assert_eq!(
        replies[4],
        json!({"ok": true, "result": {"cell": "1", "args": {}}})
    );
    let report = cell.settle();
    let tools: Vec<&str> = report.calls().iter().map(|c| c.tool()).collect();
    assert_eq!(tools, ["sleep", "echo", "echo", "echo"]);
    assert!(report.calls()[0].duration() >= Duration::from_millis(45));
}

#[tokio::test]
async fn no_tool_is_enabled_unless_the_cell_says_so() {
    let (server, _) = setup();
    let mut c = Connection::open(&server);
    let cell = server.open_cell(CellSpec::new("1", soon(60))).unwrap();
    let r = c.call("echo", json!({})).await.unwrap();
    assert_eq!(code(&r), "not_allowed");
    assert!(
        r["error"].as_str().unwrap().contains("enabled: none"),
        "{r}"
    );
    drop(cell);
}

#[test]
fn owner_types_can_move_between_tasks() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Server>();
    send_sync::<toolcell_rpc::CellHandle>();
    send_sync::<toolcell_rpc::CellReport>();
    send_sync::<toolcell_rpc::CellContext>();
    send::<Connection>();
}
