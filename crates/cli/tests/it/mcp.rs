//! `toolcell mcp` driven by rmcp's own MCP client over stdio, with real
//! kernels: initialize, tools/list, execute_code with persistent state,
//! progress notifications while a cell prints, cancellation interrupting a
//! long cell, `--expose-tools`, malformed messages, and shutdown on
//! disconnect.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{Env, Serve, eventually};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest,
    ProgressNotificationParam,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RoleClient, RunningService};
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Value, json};

/// Records every progress notification with its arrival time.
#[derive(Clone, Default)]
struct Recorder {
    progress: Arc<Mutex<Vec<(Instant, ProgressNotificationParam)>>>,
}

impl ClientHandler for Recorder {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push((Instant::now(), params));
    }
}

impl Recorder {
    fn messages(&self) -> Vec<String> {
        self.progress
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(_, p)| p.message.clone())
            .collect()
    }
}

struct Client {
    service: RunningService<RoleClient, Recorder>,
    recorder: Recorder,
    child: tokio::process::Child,
}

async fn connect(env: &Env, args: &[&str]) -> Client {
    let mut cmd = tokio::process::Command::from(env.cmd());
    cmd.arg("mcp")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("spawn toolcell mcp");
    let stdout = child.stdout.take().unwrap();
    let stdin = child.stdin.take().unwrap();
    let recorder = Recorder::default();
    let service = tokio::time::timeout(
        Duration::from_secs(30),
        recorder.clone().serve((stdout, stdin)),
    )
    .await
    .expect("initialize within 30 s")
    .expect("initialize");
    Client {
        service,
        recorder,
        child,
    }
}

fn args(v: Value) -> rmcp::model::JsonObject {
    match v {
        Value::Object(o) => o,
        _ => panic!("arguments must be an object"),
    }
}

async fn call(client: &Client, tool: &'static str, arguments: Value) -> CallToolResult {
    let params = CallToolRequestParams::new(tool).with_arguments(args(arguments));
    tokio::time::timeout(Duration::from_secs(60), client.service.call_tool(params))
        .await
        .expect("tools/call answered within 60 s")
        .expect("tools/call")
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn structured(r: &CallToolResult) -> &Value {
    r.structured_content.as_ref().expect("structuredContent")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_lists_execute_code_with_configured_schema() {
    let env = Env::fast();
    let client = connect(&env, &["--tools", "read_file,write_file"]).await;
    let info = client.service.peer_info().expect("server info");
    assert_eq!(info.server_info.as_ref().unwrap().name, "toolcell");
    let instructions = info.instructions.clone().unwrap_or_default();
    assert!(
        instructions.contains("execute_code") && instructions.contains("persistent"),
        "instructions: {instructions}"
    );
    let tools = client.service.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        ["execute_code"],
        "without --expose-tools only execute_code"
    );
    let ec = &tools[0];
    let schema = Value::Object((*ec.input_schema).clone());
    assert_eq!(schema["required"], json!(["code"]));
    for p in ["code", "reset", "session"] {
        assert!(schema["properties"].get(p).is_some(), "{p} in {schema}");
    }
    let desc = ec.description.as_deref().unwrap_or_default();
    // Only the enabled tools, and the configured limit (FAST_CONFIG: 30 s).
    assert!(
        desc.contains("read_file(") && desc.contains("write_file("),
        "{desc}"
    );
    assert!(!desc.contains("terminal("), "disabled tool listed: {desc}");
    assert!(
        desc.contains("30 seconds"),
        "configured timeout missing: {desc}"
    );
    client.service.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_persists_and_sessions_are_separate() {
    let env = Env::fast();
    let client = connect(&env, &[]).await;
    let r1 = call(
        &client,
        "execute_code",
        json!({"code": "x = 41\nprint('set')"}),
    )
    .await;
    assert_eq!(r1.is_error, Some(false), "{}", text(&r1));
    assert_eq!(structured(&r1)["status"], "success");
    let r2 = call(&client, "execute_code", json!({"code": "print(x + 1)"})).await;
    assert_eq!(r2.is_error, Some(false), "{}", text(&r2));
    let s2 = structured(&r2);
    assert_eq!(s2["output"], "42\n");
    assert_eq!(s2["kernel"]["reused"], true);
    assert_eq!(s2["kernel"]["execution_count"], 2);
    assert!(text(&r2).starts_with("42\n"), "{}", text(&r2));
    assert!(text(&r2).contains("success"), "{}", text(&r2));
    // Another session has its own kernel.
    let r3 = call(
        &client,
        "execute_code",
        json!({"code": "print('x' in globals())", "session": "other"}),
    )
    .await;
    assert_eq!(structured(&r3)["output"], "False\n");
    assert_ne!(structured(&r3)["kernel"]["id"], s2["kernel"]["id"]);
    // A failing cell: isError, the docs/result.md fields, the traceback in the
    // text.
    let r4 = call(&client, "execute_code", json!({"code": "1/0"})).await;
    assert_eq!(r4.is_error, Some(true));
    assert_eq!(structured(&r4)["status"], "error");
    assert_eq!(structured(&r4)["exit_code"], 1);
    assert!(text(&r4).contains("ZeroDivisionError"), "{}", text(&r4));
    // reset=true: a fresh kernel without the old state.
    let r5 = call(
        &client,
        "execute_code",
        json!({"code": "print('x' in globals())", "reset": true}),
    )
    .await;
    assert_eq!(structured(&r5)["output"], "False\n");
    assert_eq!(structured(&r5)["kernel"]["state_reset"], true);
    client.service.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misdirected_arguments_get_actionable_errors() {
    let env = Env::fast();
    let client = connect(&env, &[]).await;
    let r = call(&client, "execute_code", json!({"command": "ls"})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("not `command`"), "{}", text(&r));
    let r = call(&client, "execute_code", json!({"code": 5})).await;
    assert!(text(&r).contains("must be a string"), "{}", text(&r));
    let r = call(&client, "execute_code", json!({"code": "  "})).await;
    assert!(text(&r).contains("empty"), "{}", text(&r));
    let r = call(&client, "execute_code", json!({"code": "1", "timeout": 3})).await;
    assert!(
        text(&r).contains("unknown parameter `timeout`"),
        "{}",
        text(&r)
    );
    // An unknown tool is a protocol error that names the offered tools.
    let err = client
        .service
        .call_tool(CallToolRequestParams::new("nope").with_arguments(args(json!({}))))
        .await
        .expect_err("unknown tool");
    assert!(err.to_string().contains("execute_code"), "{err}");
    client.service.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_arrives_as_progress_while_the_cell_runs() {
    let env = Env::fast();
    let client = connect(&env, &[]).await;
    let code = "import time, sys\nfor i in range(4):\n    print(f'tick {i}', flush=True)\n    \
                time.sleep(0.4)\nprint('oops', file=sys.stderr)";
    let r = call(&client, "execute_code", json!({ "code": code })).await;
    let answered = Instant::now();
    assert_eq!(structured(&r)["status"], "success", "{}", text(&r));
    // A stream's text may come in several chunks (the redactor holds back
    // what could be the start of a secret until it knows); each stderr
    // chunk is tagged. The client runs its notification handler in its own
    // task, so the last chunk's handler may finish just after the response.
    let stderr_of = |messages: &[String]| -> String {
        messages
            .iter()
            .filter_map(|m| m.strip_prefix("[stderr] "))
            .collect()
    };
    eventually(Duration::from_secs(5), || {
        stderr_of(&client.recorder.messages()).contains("oops")
    });
    let messages = client.recorder.messages();
    let all = messages.concat();
    for i in 0..4 {
        assert!(
            all.contains(&format!("tick {i}")),
            "tick {i} missing: {messages:?}"
        );
    }
    assert!(stderr_of(&messages).contains("oops"), "{messages:?}");
    let progress = client.recorder.progress.lock().unwrap().clone();
    // The first chunk came while the cell was still running (~1.2 s
    // before the answer), not in a burst with the response.
    let first = progress.first().expect("progress notifications").0;
    assert!(
        answered.duration_since(first) > Duration::from_millis(600),
        "first progress only {:?} before the result",
        answered.duration_since(first)
    );
    // progress increases.
    let values: Vec<f64> = progress.iter().map(|(_, p)| p.progress).collect();
    assert!(values.windows(2).all(|w| w[1] > w[0]), "{values:?}");
    client.service.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_interrupts_the_cell_and_keeps_state() {
    let env = Env::fast();
    let client = connect(&env, &[]).await;
    call(&client, "execute_code", json!({"code": "x = 'before'"})).await;
    let params = CallToolRequestParams::new("execute_code").with_arguments(args(json!({
        "code": "import time\nprint('started', flush=True)\ntime.sleep(25)\nx = 'after'"
    })));
    let handle = client
        .service
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || client
            .recorder
            .messages()
            .concat()
            .contains("started")),
        "the long cell never started"
    );
    let cancelled = Instant::now();
    handle.cancel(Some("test".into())).await.unwrap();
    // The next cell of the session runs as soon as the interrupted one
    // stopped, long before the 25 s sleep would have ended, and sees the
    // state from before the interrupted cell.
    let r = call(&client, "execute_code", json!({"code": "print(x)"})).await;
    assert!(
        cancelled.elapsed() < Duration::from_secs(12),
        "cancel did not interrupt: {:?}",
        cancelled.elapsed()
    );
    assert_eq!(structured(&r)["output"], "before\n", "{}", text(&r));
    assert_eq!(structured(&r)["kernel"]["reused"], true);
    client.service.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expose_tools_lists_and_calls_builtin_tools() {
    let env = Env::fast();
    let secret = format!("ghp_{}", "a1B2c3D4e5".repeat(4));
    env.write("notes.txt", &format!("hello from a file\ntoken {secret}\n"));
    let client = connect(&env, &["--expose-tools"]).await;
    let tools = client.service.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names[0], "execute_code");
    for t in [
        "read_file",
        "write_file",
        "search_files",
        "patch",
        "terminal",
    ] {
        assert!(names.contains(&t), "{t} not in {names:?}");
    }
    let rf = tools.iter().find(|t| t.name == "read_file").unwrap();
    assert!(rf.input_schema.contains_key("properties"));
    let path = env.path().join("notes.txt");
    let r = call(
        &client,
        "read_file",
        json!({"path": path.to_str().unwrap()}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let content = structured(&r)["content"].as_str().unwrap().to_string();
    assert!(content.contains("hello from a file"), "{content}");
    // Tool results leave the host redacted, like cell output.
    assert!(!content.contains(&secret), "secret leaked: {content}");
    assert!(!text(&r).contains(&secret));
    // Bad arguments: a tool error naming the field.
    let r = call(&client, "read_file", json!({"offset": 2})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("path"), "{}", text(&r));
    // A relative path resolves against the server's directory.
    let r = call(
        &client,
        "write_file",
        json!({"path": "out/made.txt", "content": "made by mcp"}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert_eq!(
        std::fs::read_to_string(env.path().join("out/made.txt")).unwrap(),
        "made by mcp"
    );
    client.service.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_shuts_every_kernel_down() {
    let env = Env::fast();
    let client = connect(&env, &[]).await;
    let r = call(
        &client,
        "execute_code",
        json!({"code": "import os; print(os.getpid())"}),
    )
    .await;
    // (A sandboxed cell's pid is its namespace's: the kernels are
    // counted from the host instead.)
    assert!(structured(&r)["output"].as_str().is_some(), "{r:?}");
    call(
        &client,
        "execute_code",
        json!({"code": "import os; print(os.getpid())", "session": "b"}),
    )
    .await;
    // Two session kernels and the warm pool's ready one (mcp keeps one).
    assert!(
        eventually(Duration::from_secs(30), || env.python_pids().len() == 3),
        "expected 3 kernels, found {:?}",
        env.python_pids()
    );
    let Client {
        service, mut child, ..
    } = client;
    // Closing the transport is the client going away (EOF on its stdin).
    service.cancel().await.unwrap();
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("mcp exits after the client disconnects")
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert!(env.python_pids().is_empty(), "{:?}", env.python_pids());
}

/// Raw JSON-RPC lines: what rmcp would ignore silently gets an error.
#[test]
fn malformed_messages_get_errors_and_the_server_keeps_serving() {
    let env = Env::fast();
    let mut s = Serve::start_command(&env, "mcp", &[]);
    let long = Duration::from_secs(60);
    s.request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "raw", "version": "0"}}),
    );
    let (init, _) = s.until_id(&json!(1), long);
    assert_eq!(init["result"]["serverInfo"]["name"], "toolcell", "{init}");
    s.send_raw(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);

    s.send_raw("this is not json");
    let e = s.next(long);
    assert_eq!(e["error"]["code"], -32700, "{e}");
    assert!(e["id"].is_null());
    s.send_raw("{\"jsonrpc\": \"2.0\", \"id\": 5, \"method\": ");
    assert_eq!(s.next(long)["error"]["code"], -32700);
    s.send_raw(r#"{"hello": 1}"#);
    let e = s.next(long);
    assert_eq!(e["error"]["code"], -32600, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("jsonrpc"),
        "{e}"
    );
    s.send_raw(r#"{"jsonrpc": "2.0", "id": 9, "params": {}}"#);
    let e = s.next(long);
    assert_eq!(
        (e["id"].clone(), e["error"]["code"].clone()),
        (json!(9), json!(-32600))
    );
    assert!(
        e["error"]["message"].as_str().unwrap().contains("method"),
        "{e}"
    );
    s.send_raw(r#"[{"jsonrpc": "2.0", "id": 10, "method": "ping"}]"#);
    let e = s.next(long);
    assert_eq!(e["error"]["code"], -32600, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("batches"),
        "{e}"
    );
    s.request(2, "no/such/method", json!({}));
    let (e, _) = s.until_id(&json!(2), long);
    assert_eq!(e["error"]["code"], -32601, "{e}");
    s.request(3, "tools/call", json!({"name": "nope", "arguments": {}}));
    let (e, _) = s.until_id(&json!(3), long);
    assert_eq!(e["error"]["code"], -32602, "{e}");
    s.send_bytes(b"\xff\xfe not utf8\n");
    assert_eq!(s.next(long)["error"]["code"], -32700);

    // Still serving: a real cell runs.
    s.request(
        4,
        "tools/call",
        json!({"name": "execute_code", "arguments": {"code": "print(6 * 7)"}}),
    );
    let (r, _) = s.until_id(&json!(4), long);
    assert_eq!(r["result"]["structuredContent"]["output"], "42\n", "{r}");
    assert_eq!(r["result"]["isError"], false);
    s.assert_only_jsonrpc();
    s.close_stdin();
    assert!(s.wait(Duration::from_secs(20)).success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mcp_cell_is_journaled_and_exports_as_a_notebook() {
    let env = Env::fast();
    let client = connect(&env, &[]).await;
    let secret = format!("ghp_{}", "Zy9Xw8Vu7T".repeat(4));
    call(&client, "execute_code", json!({"code": "x = 2"})).await;
    call(
        &client,
        "execute_code",
        json!({"code": format!("print(x * 21)\nprint('{secret}')")}),
    )
    .await;
    call(
        &client,
        "execute_code",
        json!({"code": "1/0", "session": "other"}),
    )
    .await;
    client.service.cancel().await.unwrap();
    let Client { mut child, .. } = client;
    let _ = tokio::time::timeout(Duration::from_secs(20), child.wait()).await;

    let out = env.run(&["history", "--json", "--limit", "0"]);
    out.expect_code(0);
    let rows: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 3, "{rows:#?}");
    let default: Vec<&Value> = rows.iter().filter(|r| r["session"] == "default").collect();
    assert_eq!(default.len(), 2);
    assert!(default[1]["output"].as_str().unwrap().starts_with("42\n"));
    assert!(
        rows.iter()
            .any(|r| r["session"] == "other" && r["status"] == "error")
    );
    // The secret the cell printed (and typed) is not in the journal.
    assert!(
        !out.stdout.contains(&secret),
        "secret in the journal: {}",
        out.stdout
    );

    let nb = env.run(&["export", "--session", "default", "--format", "ipynb"]);
    nb.expect_code(0);
    let nb: Value = serde_json::from_str(&nb.stdout).unwrap();
    assert_eq!(nb["nbformat"], 4);
    let code_cells: Vec<&Value> = nb["cells"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["cell_type"] == "code")
        .collect();
    assert_eq!(code_cells.len(), 2);
    assert_eq!(code_cells[1]["execution_count"], 2);
}
