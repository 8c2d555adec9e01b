//! Client tools over `toolcell serve`: a client registers its own
//! functions with `tools/register`, cells call them, and each call comes
//! back to the client as a `tool/call` request it answers. Driven here by a
//! client written in Rust (this file); `examples/agent_host.py` and
//! `tests/clients/client_tools.py` drive the same protocol from Python.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use crate::common::{Env, Serve};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

fn tools() -> Value {
    json!([
        {
            "name": "add",
            "description": "Add two integers.",
            "input_schema": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "default": 0}},
                "required": ["a"]
            },
            "output_schema": {"type": "object", "properties": {"sum": {"type": "integer"}}}
        },
        {
            "name": "lookup-order",
            "description": "Find an order; answers with an error for unknown ones.",
            "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
        },
        {
            "name": "hang",
            "description": "Never answers.",
            "input_schema": {"type": "object", "properties": {}}
        },
        {
            "name": "wait_for_eight",
            "description": "Answered once eight calls are waiting.",
            "input_schema": {"type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]}
        },
        {
            "name": "garbage",
            "description": "Answered with both result and error.",
            "input_schema": {"type": "object", "properties": {}}
        },
        {
            "name": "huge",
            "description": "Answered with 17 MiB.",
            "input_schema": {"type": "object", "properties": {}}
        }
    ])
}

/// What the test client saw while a request ran.
#[derive(Default)]
struct Seen {
    calls: Vec<Value>,
    cancels: Vec<String>,
}

/// Runs the client loop until the response to `id`: answers `tool/call`s
/// the way each tool says, records `$/cancelRequest`s.
fn drive(serve: &mut Serve, id: &Value, seen: &mut Seen) -> Value {
    let deadline = Instant::now() + LIMIT;
    let mut eight: Vec<Value> = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = serve.next(left.max(Duration::from_millis(1)));
        if msg.get("id") == Some(id) && msg.get("method").is_none() {
            return msg;
        }
        match msg["method"].as_str() {
            Some("tool/call") => {
                seen.calls.push(msg.clone());
                let call_id = msg["id"].clone();
                let p = &msg["params"];
                assert!(call_id.is_string(), "{msg}");
                assert!(p["deadline_ms"].as_u64().unwrap() > 0, "{msg}");
                let args = &p["arguments"];
                let reply = match p["name"].as_str().unwrap() {
                    "add" => json!({"jsonrpc": "2.0", "id": call_id,
                        "result": {"sum": args["a"].as_i64().unwrap() + args["b"].as_i64().unwrap_or(0)}}),
                    "lookup-order" => json!({"jsonrpc": "2.0", "id": call_id,
                        "error": {"code": 404, "message": format!("no order {}", args["id"].as_str().unwrap())}}),
                    "garbage" => {
                        json!({"jsonrpc": "2.0", "id": call_id, "result": 1, "error": {"code": 1, "message": "x"}})
                    }
                    "huge" => {
                        json!({"jsonrpc": "2.0", "id": call_id, "result": "x".repeat(17 << 20)})
                    }
                    "wait_for_eight" => {
                        eight.push(call_id);
                        if eight.len() == 8 {
                            for c in eight.drain(..) {
                                serve.send_raw(
                                    &json!({"jsonrpc": "2.0", "id": c, "result": "ok"}).to_string(),
                                );
                            }
                        }
                        continue;
                    }
                    _ => continue, // hang: never answered
                };
                serve.send_raw(&reply.to_string());
            }
            Some("$/cancelRequest") => {
                seen.cancels
                    .push(msg["params"]["id"].as_str().unwrap().to_string());
            }
            _ => {}
        }
    }
}

fn execute(serve: &mut Serve, id: u64, params: Value, seen: &mut Seen) -> Value {
    serve.request(id, "execute", params);
    let reply = drive(serve, &json!(id), seen);
    reply
        .get("result")
        .cloned()
        .unwrap_or_else(|| panic!("execute failed: {reply}"))
}

#[test]
fn a_client_registers_its_functions_and_cells_call_them() {
    let env = Env::fast();
    let mut serve = Serve::start(&env, &[]);
    let mut seen = Seen::default();

    // A live kernel gets the tools at its next cell, its state kept.
    let r = execute(&mut serve, 1, json!({"code": "n = 10"}), &mut seen);
    assert_eq!(r["status"], "success", "{r}");
    let kernel = r["kernel"]["id"].clone();
    let reg = serve.call(2, "tools/register", json!({"tools": tools()}));
    assert_eq!(
        reg["result"]["registered"],
        json!([
            "add",
            "lookup-order",
            "hang",
            "wait_for_eight",
            "garbage",
            "huge"
        ]),
        "{reg}"
    );

    // A loop of calls, the original keys sent, results returned; an error
    // answer raises ToolError with the client's message; the budget
    // counts client calls like any other.
    let code = r#"
total = 0
for i in range(n):
    total += add(i, b=1)["sum"]
print(total)
try:
    lookup_order("A-17")
except ToolError as e:
    print("error:", e)
try:
    garbage()
except ToolError as e:
    print("garbage:", "both `result` and `error`" in str(e))
try:
    huge()
except ToolError as e:
    print("huge:", "over the limit of 16777216 bytes" in str(e))
"#;
    let r = execute(&mut serve, 3, json!({"code": code}), &mut seen);
    assert_eq!(r["kernel"]["id"], kernel, "{r}");
    assert_eq!(r["kernel"]["state_reset"], false, "{r}");
    let out = r["output"].as_str().unwrap();
    assert!(
        out.starts_with("55\nerror: lookup-order: no order A-17\ngarbage: True\nhuge: True\n"),
        "{r}"
    );
    assert_eq!(r["tool_calls_made"], 13, "{r}");
    assert_eq!(seen.calls.len(), 13);
    assert_eq!(seen.calls[0]["params"]["session"], "default");
    assert_eq!(seen.calls[0]["params"]["name"], "add");
    assert_eq!(
        seen.calls[0]["params"]["arguments"],
        json!({"a": 0, "b": 1})
    );
    assert_eq!(
        seen.calls[10]["params"]["name"], "lookup-order",
        "the host always uses the original name"
    );

    // Eight threads: all eight calls are out before any is answered.
    let code = r#"
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(8) as ex:
    print(sorted(ex.map(lambda i: wait_for_eight(i), range(8))))
"#;
    let r = execute(
        &mut serve,
        4,
        json!({"code": code, "timeout": 30}),
        &mut seen,
    );
    assert_eq!(r["status"], "success", "{r}");
    assert!(
        r["output"]
            .as_str()
            .unwrap()
            .starts_with("['ok', 'ok', 'ok', 'ok', 'ok', 'ok', 'ok', 'ok']"),
        "{r}"
    );

    // Bad arguments never reach the client and cost nothing.
    let before = seen.calls.len();
    let r = execute(
        &mut serve,
        5,
        json!({"code": "try:\n    add('x')\nexcept ToolError as e:\n    print(e.code, e)"}),
        &mut seen,
    );
    assert_eq!(seen.calls.len(), before);
    assert_eq!(r["tool_calls_made"], 0, "{r}");
    assert!(
        r["output"].as_str().unwrap().contains("bad_args")
            && r["output"].as_str().unwrap().contains("/a"),
        "{r}"
    );

    // The model's description lists them with their signatures.
    let schema = serve.call(6, "schema", json!({"format": "anthropic"}));
    let desc = schema["result"]["description"].as_str().unwrap();
    assert!(
        desc.contains("- add(a: int, b: int = 0) -> {sum: int}: Add two integers."),
        "{desc}"
    );
    assert!(desc.contains("lookup_order(id: str)"), "{desc}");

    // Unregistered: gone at the next cell, with the hint naming what is there.
    let un = serve.call(7, "tools/unregister", json!({"names": ["add", "nope"]}));
    assert_eq!(un["result"]["unregistered"], json!(["add"]), "{un}");
    let r = execute(
        &mut serve,
        8,
        json!({"code": "print(n)\nfrom toolcell_tools import add"}),
        &mut seen,
    );
    assert_eq!(r["kernel"]["id"], kernel, "{r}");
    assert!(r["output"].as_str().unwrap().starts_with("10\n"), "{r}");
    let hint = r["hint"].as_str().unwrap_or("");
    assert!(
        hint.contains("lookup_order") && hint.contains("read_file"),
        "{r}"
    );
}

#[test]
fn a_call_left_unanswered_is_cancelled_when_the_cell_ends() {
    let env = Env::fast();
    let mut serve = Serve::start(&env, &[]);
    let mut seen = Seen::default();
    let reg = serve.call(
        1,
        "tools/register",
        json!({"tools": tools(), "session": "s1"}),
    );
    assert!(reg.get("result").is_some(), "{reg}");

    // The client never answers: the cell's time runs out, the client is
    // told to stop, the cell gets a clear ToolError (or the timeout).
    let r = execute(
        &mut serve,
        2,
        json!({"code": "import time\ntry:\n    hang()\nexcept ToolError as e:\n    print('ToolError:', e.code, e)\n    time.sleep(5)", "session": "s1", "timeout": 2}),
        &mut seen,
    );
    assert_eq!(seen.calls.len(), 1, "{r}");
    let call_id = seen.calls[0]["id"].as_str().unwrap().to_string();
    // The cancel notice may trail the result by a line.
    if seen.cancels.is_empty() {
        let note = serve.next(Duration::from_secs(5));
        assert_eq!(note["method"], "$/cancelRequest", "{note}");
        seen.cancels
            .push(note["params"]["id"].as_str().unwrap().to_string());
    }
    assert_eq!(seen.cancels, vec![call_id.clone()]);
    assert_eq!(r["status"], "timeout", "{r}");
    let out = r["output"].as_str().unwrap();
    assert!(
        out.starts_with(
            "ToolError: tool_failed hang: the client did not answer `hang` within its deadline"
        ),
        "{r}"
    );

    // A late answer, an answer to an id never sent, and one that is not an
    // object are ignored; the server keeps serving.
    serve.send_raw(&json!({"jsonrpc": "2.0", "id": call_id, "result": 1}).to_string());
    serve.send_raw(&json!({"jsonrpc": "2.0", "id": "toolcell-999999", "result": 1}).to_string());
    serve.send_raw(
        &json!({"jsonrpc": "2.0", "id": 5, "error": {"code": 1, "message": "x"}}).to_string(),
    );
    let r = execute(
        &mut serve,
        3,
        json!({"code": "print(add(2, 3))", "session": "s1"}),
        &mut seen,
    );
    assert!(
        r["output"].as_str().unwrap().starts_with("{'sum': 5}"),
        "{r}"
    );

    // Session-scoped: another session does not see them.
    let r = execute(
        &mut serve,
        4,
        json!({"code": "add(1)", "session": "s2"}),
        &mut seen,
    );
    assert_eq!(r["status"], "error", "{r}");
    assert!(r["output"].as_str().unwrap().contains("NameError"), "{r}");

    // Interrupting a cell with a call pending cancels the call too.
    serve.request(5, "execute", json!({"code": "hang()", "session": "s1"}));
    let deadline = Instant::now() + LIMIT;
    loop {
        let msg = serve.next(deadline.saturating_duration_since(Instant::now()));
        if msg["method"] == "tool/call" {
            let id = msg["id"].as_str().unwrap().to_string();
            let i = serve.call(6, "interrupt", json!({"session": "s1"}));
            assert_eq!(i["result"]["interrupted"], 1, "{i}");
            let mut seen2 = Seen::default();
            let r = drive(&mut serve, &json!(5), &mut seen2);
            assert_eq!(r["result"]["status"], "interrupted", "{r}");
            if seen2.cancels.is_empty() {
                let note = serve.next(Duration::from_secs(5));
                assert_eq!(note["params"]["id"], id, "{note}");
            } else {
                assert_eq!(seen2.cancels, vec![id]);
            }
            break;
        }
    }
    assert!(serve.not_jsonrpc.lock().unwrap().is_empty());
}

#[test]
fn bad_registrations_are_errors_naming_the_tool_and_the_problem() {
    let env = Env::fast();
    let mut serve = Serve::start(&env, &[]);
    let cases = [
        (
            json!({"tools": [{"name": "t", "input_schema": {"type": "string"}}]}),
            "tool `t`",
        ),
        (
            json!({"tools": [{"name": "t", "input_schema": {"type": "object", "properties": {"a": {"type": 5}}}}]}),
            "not a valid JSON Schema",
        ),
        (json!({"tools": [{"name": "t"}]}), "missing `input_schema`"),
        (
            json!({"tools": [{"name": "read_file", "input_schema": {"type": "object"}}]}),
            "`read_file` is already a tool",
        ),
        (
            json!({"tools": [{"name": "get-user", "input_schema": {"type": "object"}}, {"name": "get_user", "input_schema": {"type": "object"}}]}),
            "both map to the Python name `get_user`",
        ),
        (
            json!({"tools": [{"name": "t", "input_schema": {"type": "object"}, "handler": 1}]}),
            "unknown field `handler`",
        ),
        (json!({"tools": "add"}), "`tools` must be an array"),
        (
            json!({"tools": [{"name": "big", "input_schema": {"type": "object", "description": "x".repeat(70_000)}}]}),
            "`input_schema` is 70",
        ),
        (
            json!({"tools": [{"name": "a b", "input_schema": {"type": "object"}}]}),
            "cannot be used",
        ),
    ];
    for (i, (params, needle)) in cases.iter().enumerate() {
        let r = serve.call(i as u64 + 1, "tools/register", params.clone());
        assert_eq!(r["error"]["code"], -32602, "{params} → {r}");
        let msg = r["error"]["message"].as_str().unwrap();
        assert!(msg.contains(needle), "{params}: {msg}");
    }
    // Nothing of a refused batch was registered; the server still serves.
    let r = serve.call(
        100,
        "execute",
        json!({"code": "print('get_user' in globals())"}),
    );
    assert_eq!(r["result"]["output"], "False\n", "{r}");
}

/// Answers every `tool/call` with `{"tool": NAME}` until the response to
/// `id`.
fn answer_all(serve: &mut Serve, id: u64) -> Value {
    let id = json!(id);
    let deadline = Instant::now() + LIMIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = serve.next(left.max(Duration::from_millis(1)));
        if msg.get("id") == Some(&id) && msg.get("method").is_none() {
            return msg;
        }
        if msg["method"] == "tool/call" {
            let reply = json!({"jsonrpc": "2.0", "id": msg["id"],
                "result": {"tool": msg["params"]["name"]}});
            serve.send_raw(&reply.to_string());
        }
    }
}

fn register_named(serve: &mut Serve, id: u64, names: &[&str]) {
    let tools: Vec<Value> = names
        .iter()
        .map(|n| json!({"name": n, "input_schema": {"type": "object", "properties": {}}}))
        .collect();
    let reg = serve.call(id, "tools/register", json!({"tools": tools}));
    assert!(reg.get("result").is_some(), "{reg}");
}

#[test]
fn review_09_client_tools_named_like_r_functions_do_not_shadow_them() {
    let env = Env::fast();
    let mut serve = Serve::start(&env, &[]);
    register_named(&mut serve, 1, &["c", "paste0", "print", "cat"]);
    serve.request(
        2,
        "execute",
        json!({"language": "r", "code": "x <- c(1, 2)\nprint(sum(x))\ncat(paste0(\"a\", x), \"\\n\")\ncat(c_()$tool, paste0_()$tool, print_()$tool, cat_()$tool, \"\\n\")"}),
    );
    let r = answer_all(&mut serve, 2);
    let r = &r["result"];
    assert_eq!(r["status"], "success", "{r}");
    assert_eq!(r["output"], "[1] 3\na1 a2 \nc paste0 print cat \n", "{r}");
    serve.close_stdin();
    serve.wait(LIMIT);
}

#[test]
fn review_09_client_tools_named_like_js_globals_keep_the_runner_alive() {
    let env = Env::fast();
    let mut serve = Serve::start(&env, &[]);
    register_named(
        &mut serve,
        1,
        &["Array", "Error", "Map", "JSON", "console", "Promise", "fs"],
    );
    serve.request(
        2,
        "execute",
        json!({"language": "javascript", "code": "var kept = 41;\nconsole.log(Array.isArray([]), typeof Map, JSON.stringify({a: 1}), new Error('e').message);\nconst r = await Promise.all([Array_(), Error_(), Map_(), JSON_(), console_(), Promise_(), fs_()]);\nconsole.log(r.map((x) => x.tool).join(' '), typeof fs.readFileSync);"}),
    );
    let r = answer_all(&mut serve, 2);
    let r = &r["result"];
    assert_eq!(r["status"], "success", "{r}");
    assert_eq!(
        r["output"],
        "true function {\"a\":1} e\nArray Error Map JSON console Promise fs function\n",
        "{r}"
    );
    // The same kernel, its state kept.
    serve.request(
        3,
        "execute",
        json!({"language": "javascript", "code": "kept + 1"}),
    );
    let r = answer_all(&mut serve, 3);
    let r = &r["result"];
    assert_eq!(r["output"], "42\n", "{r}");
    assert_eq!(r["kernel"]["state_reset"], false, "{r}");
    serve.close_stdin();
    serve.wait(LIMIT);
}
