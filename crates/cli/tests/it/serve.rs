//! `toolcell serve`: JSON-RPC 2.0 over the real binary's stdio.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::common::{Env, Serve, alive, eventually, session_pid, with_environ};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn eight_concurrent_sessions_with_malformed_lines_interleaved() {
    let env = Env::fast();
    let mut s = Serve::start(&env, &[]);
    // (raw line, expected error code, expected id)
    let malformed: [(&str, i64, Value); 8] = [
        ("this is not json", -32700, Value::Null),
        ("{\"jsonrpc\":\"2.0\",\"id\":\"m1\"}", -32600, json!("m1")),
        (
            "{\"jsonrpc\":\"2.0\",\"id\":\"m2\",\"method\":\"nope\"}",
            -32601,
            json!("m2"),
        ),
        (
            "{\"jsonrpc\":\"2.0\",\"id\":\"m3\",\"method\":\"execute\",\"params\":{\"command\":\"ls\"}}",
            -32602,
            json!("m3"),
        ),
        ("{\"jsonrpc\":\"2.0\",\"id\":", -32700, Value::Null),
        (
            "{\"id\":\"m5\",\"method\":\"sessions\"}",
            -32600,
            json!("m5"),
        ),
        ("42", -32600, Value::Null),
        (
            "{\"jsonrpc\":\"2.0\",\"id\":\"m7\",\"method\":\"execute\",\"params\":{\"code\":\"\"}}",
            -32602,
            json!("m7"),
        ),
    ];
    for (i, (bad_line, _, _)) in malformed.iter().enumerate() {
        s.request(
            i,
            "execute",
            json!({
                "session": format!("s{i}"),
                "code": format!("import time\nv = {i}\ntime.sleep(0.3)\nprint('session', v * v)"),
            }),
        );
        s.send_raw(bad_line);
    }
    let mut results: HashMap<i64, Value> = HashMap::new();
    let mut errors: Vec<Value> = Vec::new();
    while results.len() < 8 || errors.len() < 8 {
        let msg = s.next(LIMIT);
        if msg.get("error").is_some() {
            errors.push(msg);
        } else {
            let id = msg["id"].as_i64().unwrap();
            assert!(
                results.insert(id, msg).is_none(),
                "two responses for id {id}"
            );
        }
    }
    for i in 0..8i64 {
        let r = &results[&i]["result"];
        assert_eq!(r["status"], "success", "{r}");
        assert_eq!(r["output"], format!("session {}\n", i * i));
        assert_eq!(r["kernel"]["reused"], false);
    }
    let mut kernel_ids: Vec<&str> = (0..8)
        .map(|i| results[&i]["result"]["kernel"]["id"].as_str().unwrap())
        .collect();
    kernel_ids.sort_unstable();
    kernel_ids.dedup();
    assert_eq!(kernel_ids.len(), 8, "one kernel per session");
    for (_, code, id) in &malformed {
        let pos = errors
            .iter()
            .position(|e| e["id"] == *id && e["error"]["code"] == *code)
            .unwrap_or_else(|| panic!("no error {code} for id {id}: {errors:?}"));
        let e = errors.remove(pos);
        assert!(
            e["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }

    // State is per session, and still there.
    for i in 0..8 {
        s.request(
            100 + i,
            "execute",
            json!({"session": format!("s{i}"), "code": "print(v)"}),
        );
    }
    for _ in 0..8 {
        let msg = s.next(LIMIT);
        let i = msg["id"].as_i64().unwrap() - 100;
        assert_eq!(msg["result"]["output"], format!("{i}\n"));
        assert_eq!(msg["result"]["kernel"]["reused"], true);
    }
    s.close_stdin();
    assert!(s.wait(LIMIT).success());
    s.assert_only_jsonrpc();
    assert!(
        s.try_next(Duration::from_millis(100)).is_none(),
        "nothing extra"
    );
}

#[test]
fn a_slow_cell_does_not_hold_up_another_session() {
    let env = Env::fast();
    let mut s = Serve::start(&env, &[]);
    // Warm both kernels so spawn time does not decide the order.
    s.call(
        "w1",
        "execute",
        json!({"session": "slow", "code": "import time"}),
    );
    s.call(
        "w2",
        "execute",
        json!({"session": "fast", "code": "import time"}),
    );
    s.request(
        "slow",
        "execute",
        json!({"session": "slow", "code": "time.sleep(3); print('slow')"}),
    );
    s.request(
        "fast",
        "execute",
        json!({"session": "fast", "code": "print('fast')"}),
    );
    let first = s.next(LIMIT);
    assert_eq!(first["id"], "fast", "{first}");
    assert_eq!(first["result"]["output"], "fast\n");
    let second = s.next(LIMIT);
    assert_eq!(second["id"], "slow");
    assert_eq!(second["result"]["output"], "slow\n");

    // Cells of one session run one at a time, in arrival order.
    s.request(
        1,
        "execute",
        json!({"session": "q", "code": "import time; time.sleep(0.5); seq = ['a']"}),
    );
    s.request(
        2,
        "execute",
        json!({"session": "q", "code": "seq.append('b'); print(seq)"}),
    );
    let (r2, before) = s.until_id(&json!(2), LIMIT);
    assert_eq!(before.len(), 1, "response 1 came first: {before:?}");
    assert_eq!(before[0]["id"], 1);
    assert_eq!(r2["result"]["output"], "['a', 'b']\n");

    // Many cells sent at once run in the order they were sent.
    for i in 0..20 {
        s.request(
            10 + i,
            "execute",
            json!({"session": "q", "code": format!("seq.append({i})")}),
        );
    }
    let r = s.call(
        99,
        "execute",
        json!({"session": "q", "code": "print(seq[2:])"}),
    );
    let want: Vec<String> = (0..20).map(|i| i.to_string()).collect();
    assert_eq!(r["result"]["output"], format!("[{}]\n", want.join(", ")));
    s.assert_only_jsonrpc();
}

/// (line, code, words in the message)
fn error_cases() -> Vec<(String, i64, Vec<&'static str>)> {
    let req = |id: u32, method: &str, params: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
    };
    vec![
        ("{not json".into(), -32700, vec!["parse"]),
        ("\u{1}\u{2}".into(), -32700, vec!["parse"]),
        ("[]".into(), -32600, vec!["batch"]),
        ("\"a string\"".into(), -32600, vec!["object"]),
        (
            "{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"sessions\"}".into(),
            -32600,
            vec!["jsonrpc"],
        ),
        (
            "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":7}".into(),
            -32600,
            vec!["method"],
        ),
        (
            "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"sessions\"}".into(),
            -32600,
            vec!["id"],
        ),
        (
            "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"sessions\",\"params\":3}".into(),
            -32600,
            vec!["params"],
        ),
        (
            req(4, "no_such_method", json!({})),
            -32601,
            vec!["no_such_method", "execute"],
        ),
        (
            req(5, "execute", json!({"command": "ls -la"})),
            -32602,
            vec!["`code`", "`command`"],
        ),
        (
            req(6, "execute", json!({"code": 5})),
            -32602,
            vec!["`code`", "string"],
        ),
        (
            req(7, "execute", json!({"code": ["print(1)"]})),
            -32602,
            vec!["`code`", "string"],
        ),
        (
            req(8, "execute", json!({"code": ""})),
            -32602,
            vec!["empty"],
        ),
        (
            req(9, "execute", json!({"code": "  \n "})),
            -32602,
            vec!["empty"],
        ),
        (req(10, "execute", json!({})), -32602, vec!["code"]),
        (
            req(11, "execute", json!({"code": "1", "bogus": 1})),
            -32602,
            vec!["bogus"],
        ),
        (
            req(12, "execute", json!({"code": "1", "timeout": -1})),
            -32602,
            vec!["timeout"],
        ),
        (
            req(13, "execute", json!({"code": "1", "mode": "loose"})),
            -32602,
            vec!["mode", "strict"],
        ),
        (
            req(14, "execute", json!({"code": "1", "tools": ["nope"]})),
            -32602,
            vec!["nope", "read_file"],
        ),
        (
            req(15, "execute", json!({"code": "1", "cwd": "relative/dir"})),
            -32602,
            vec!["cwd"],
        ),
        (
            req(16, "execute", json!({"code": "1", "reset": "yes"})),
            -32602,
            vec!["reset"],
        ),
        (
            req(17, "execute", json!({"code": "1", "session": ""})),
            -32602,
            vec!["session"],
        ),
        (
            req(18, "execute", json!(["print(1)"])),
            -32602,
            vec!["object"],
        ),
        (
            req(19, "interrupt", json!({"session": 5})),
            -32602,
            vec!["session"],
        ),
        (
            req(20, "shutdown_session", json!({"sesion": "a"})),
            -32602,
            vec!["sesion"],
        ),
        (
            req(21, "schema", json!({"format": "xml"})),
            -32602,
            vec!["xml"],
        ),
        (
            req(22, "sessions", json!({"x": 1})),
            -32602,
            vec!["sessions"],
        ),
    ]
}

#[test]
fn every_error_code_with_a_message_and_the_server_keeps_serving() {
    let env = Env::fast();
    let mut s = Serve::start(&env, &[]);
    for (line, code, words) in error_cases() {
        s.send_raw(&line);
        let msg = s.next(LIMIT);
        assert_eq!(msg["error"]["code"], code, "{line} → {msg}");
        let sent: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        let want_id = match sent.get("id") {
            Some(id @ (Value::Number(_) | Value::String(_))) => id.clone(),
            _ => Value::Null,
        };
        assert_eq!(msg["id"], want_id, "{line} → {msg}");
        let m = msg["error"]["message"].as_str().unwrap();
        for w in words {
            assert!(m.contains(w), "{line}: message lacks {w:?}: {m}");
        }
    }
    // Notifications (no id) get no answer, not even errors of method.
    s.send_raw("{\"jsonrpc\":\"2.0\",\"method\":\"no_such_method\"}");
    s.send_raw("{\"jsonrpc\":\"2.0\",\"method\":\"sessions\"}");
    let r = s.call(
        "after",
        "execute",
        json!({"code": "print('still serving')"}),
    );
    assert_eq!(r["result"]["output"], "still serving\n");
    s.close_stdin();
    assert!(s.wait(LIMIT).success());
    s.assert_only_jsonrpc();
}

#[test]
fn interrupt_reaches_a_running_cell_and_keeps_state() {
    let env = Env::fast();
    let mut s = Serve::start(&env, &[]);
    s.call(
        1,
        "execute",
        json!({"session": "i", "code": "x = 'survives'"}),
    );
    s.request(
        2,
        "execute",
        json!({"session": "i", "stream": true,
               "code": "import time\nprint('started', flush=True)\ntime.sleep(30)"}),
    );
    // Wait until the cell runs.
    let note = s.next(LIMIT);
    assert_eq!(note["method"], "cell/output", "{note}");
    assert!(
        note["params"]["chunk"]
            .as_str()
            .unwrap()
            .starts_with("started\n")
    );
    let t0 = Instant::now();
    s.request(3, "interrupt", json!({"session": "i"}));
    let mut replies = HashMap::new();
    while replies.len() < 2 {
        let m = s.next(LIMIT);
        if let Some(id) = m["id"].as_i64() {
            replies.insert(id, m);
        }
    }
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert_eq!(replies[&3]["result"]["session"], "i");
    assert_eq!(replies[&3]["result"]["interrupted"], 1);
    let r = &replies[&2]["result"];
    assert_eq!(r["status"], "interrupted", "{r}");
    assert_eq!(r["exit_code"], -1);
    assert_eq!(r["kernel"]["state_kept"], true);
    let r = s.call(4, "execute", json!({"session": "i", "code": "print(x)"}));
    assert_eq!(r["result"]["output"], "survives\n");
    assert_eq!(r["result"]["kernel"]["reused"], true);
    // Interrupting an idle session (or a missing one) is harmless.
    let r = s.call(5, "interrupt", json!({"session": "i"}));
    assert_eq!(r["result"]["session"], "i");
    let r = s.call(6, "interrupt", json!({}));
    assert_eq!(r["result"]["session"], "default");
    let r = s.call(7, "execute", json!({"session": "i", "code": "print(x)"}));
    assert_eq!(
        r["result"]["status"], "success",
        "an idle interrupt leaves no trace"
    );
    s.assert_only_jsonrpc();
}

#[test]
fn cell_output_notifications_only_when_asked_and_before_the_response() {
    let env = Env::fast();
    let mut s = Serve::start(&env, &[]);
    let code = "import sys, time\nfor i in range(3):\n    print('line', i, flush=True)\n    time.sleep(0.1)\nprint('oops', file=sys.stderr, flush=True)";
    s.request(
        1,
        "execute",
        json!({"session": "st", "code": code, "stream": true}),
    );
    let (resp, notes) = s.until_id(&json!(1), LIMIT);
    assert!(!notes.is_empty());
    let mut out = String::new();
    let mut err = String::new();
    for n in &notes {
        assert_eq!(n["method"], "cell/output", "{n}");
        assert!(n.get("id").is_none(), "notifications carry no id");
        assert_eq!(n["params"]["session"], "st");
        let chunk = n["params"]["chunk"].as_str().unwrap();
        match n["params"]["stream"].as_str().unwrap() {
            "stdout" => out.push_str(chunk),
            "stderr" => err.push_str(chunk),
            other => panic!("stream {other}"),
        }
    }
    assert_eq!(out, "line 0\nline 1\nline 2\n");
    assert_eq!(err, "oops\n");
    assert!(
        resp["result"]["output"]
            .as_str()
            .unwrap()
            .starts_with("line 0\nline 1\nline 2\n")
    );
    // Nothing arrives after the response for that cell.
    assert!(s.try_next(Duration::from_millis(200)).is_none());

    // Without `stream`, only the response.
    s.request(
        2,
        "execute",
        json!({"session": "st", "code": "print('quiet')"}),
    );
    let (resp, notes) = s.until_id(&json!(2), LIMIT);
    assert!(notes.is_empty(), "{notes:?}");
    assert_eq!(resp["result"]["output"], "quiet\n");
    s.assert_only_jsonrpc();
}

#[test]
fn sessions_shutdown_session_and_schema() {
    let env = Env::fast();
    let mut s = Serve::start(&env, &[]);
    let r = s.call(1, "sessions", json!({}));
    assert_eq!(r["result"]["sessions"], json!([]));
    s.call(2, "execute", json!({"session": "a", "code": "a = 1"}));
    s.call(3, "execute", json!({"session": "a", "code": "a += 1"}));
    s.call(4, "execute", json!({"code": "d = 1"}));
    let r = s.call(5, "sessions", Value::Null);
    let list = r["result"]["sessions"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{r}");
    let a = list.iter().find(|x| x["session"] == "a").unwrap();
    assert_eq!(a["execution_count"], 2);
    assert!(a["idle_seconds"].as_f64().unwrap() >= 0.0);
    assert!(a.get("kernel_id").is_some() && a.get("mode").is_some());
    // The session key (docs/serve.md, "sessions").
    assert_eq!(a["key"]["owner"], "a");
    assert_eq!(a["key"]["mode"], "project");
    assert!(
        a["key"]["interpreter"]
            .as_str()
            .is_some_and(|p| p.contains("python"))
    );
    assert!(a["key"]["tools"].as_array().is_some_and(|t| !t.is_empty()));
    let pid_a = session_pid(&r["result"], "a").unwrap();
    let pid_d = session_pid(&r["result"], "default").unwrap();
    assert!(alive(pid_a) && alive(pid_d));

    let r = s.call(6, "shutdown_session", json!({"session": "a"}));
    assert_eq!(r["result"]["session"], "a");
    assert_eq!(r["result"]["shut_down"], 1);
    assert!(
        eventually(Duration::from_secs(2), || !alive(pid_a)),
        "kernel a killed"
    );
    assert!(alive(pid_d), "other sessions untouched");
    let r = s.call(7, "sessions", json!({}));
    assert!(session_pid(&r["result"], "a").is_none());
    let r = s.call(
        8,
        "execute",
        json!({"session": "a", "code": "print('a' in globals())"}),
    );
    assert_eq!(r["result"]["output"], "False\n");
    assert_eq!(r["result"]["kernel"]["state_reset"], true);
    let r = s.call(9, "shutdown_session", json!({"session": "never"}));
    assert_eq!(r["result"]["shut_down"], 0);

    let r = s.call(10, "schema", json!({}));
    assert_eq!(r["result"]["type"], "function");
    assert_eq!(r["result"]["function"]["name"], "execute_code");
    let r = s.call(11, "schema", json!({"format": "anthropic"}));
    assert!(r["result"]["input_schema"]["properties"]["code"].is_object());
    let r = s.call(12, "schema", json!({"format": "mcp"}));
    assert!(r["result"]["inputSchema"]["properties"]["code"].is_object());
    s.assert_only_jsonrpc();
}

#[test]
fn serve_flags_reach_every_session() {
    let env = Env::fast();
    let mut s = Serve::start(
        &env,
        &["--tools", "read_file", "--mode", "strict", "--timeout", "1"],
    );
    let r = s.call(
        1,
        "execute",
        json!({"code": "import toolcell_tools as t, os\nprint(hasattr(t, 'read_file'), hasattr(t, 'terminal'))"}),
    );
    assert_eq!(r["result"]["output"], "True False\n");
    assert_eq!(r["result"]["kernel"]["mode"], "strict");
    let r = s.call(2, "execute", json!({"code": "import time; time.sleep(20)"}));
    assert_eq!(r["result"]["status"], "timeout");
    // A per-request value wins over the flag (tools may only narrow).
    let r = s.call(
        3,
        "execute",
        json!({"session": "p", "code": "import time; time.sleep(1.5); print('ok')", "timeout": 10, "mode": "project", "tools": ["read_file"]}),
    );
    assert_eq!(r["result"]["status"], "success", "{r}");
    assert_eq!(r["result"]["kernel"]["mode"], "project");
    let r = s.call(
        4,
        "execute",
        json!({"session": "p", "code": "print('ran')", "tools": ["terminal"]}),
    );
    assert_eq!(r["result"]["status"], "error", "{r}");
    assert!(
        r["result"]["error"].as_str().unwrap().contains("narrow"),
        "{r}"
    );
}

#[test]
fn batches_answer_in_one_array() {
    let env = Env::fast();
    let mut s = Serve::start(&env, &[]);
    s.send_raw(
        &json!([
            {"jsonrpc": "2.0", "id": "b1", "method": "execute", "params": {"code": "print('one')"}},
            {"jsonrpc": "2.0", "id": "b2", "method": "sessions"},
            {"jsonrpc": "2.0", "method": "sessions"},
            {"jsonrpc": "2.0", "id": "b3", "method": "nope"},
            17
        ])
        .to_string(),
    );
    let batch = s.next(LIMIT);
    let items = batch
        .as_array()
        .unwrap_or_else(|| panic!("an array: {batch}"));
    assert_eq!(items.len(), 4, "no entry for the notification: {batch}");
    let by_id = |id: &str| items.iter().find(|i| i["id"] == id).unwrap();
    assert_eq!(by_id("b1")["result"]["output"], "one\n");
    assert!(by_id("b2")["result"]["sessions"].is_array());
    assert_eq!(by_id("b3")["error"]["code"], -32601);
    assert!(
        items
            .iter()
            .any(|i| i["id"].is_null() && i["error"]["code"] == -32600)
    );

    // A batch of notifications only gets nothing back.
    s.send_raw(&json!([{"jsonrpc": "2.0", "method": "sessions"}]).to_string());
    let r = s.call("after", "sessions", json!({}));
    assert_eq!(r["id"], "after");
    s.assert_only_jsonrpc();
}

#[test]
fn a_cell_writing_to_the_real_stdout_fd_cannot_break_the_protocol() {
    let env = Env::fast();
    let mut s = Serve::start(&env, &[]);
    let r = s.call(
        1,
        "execute",
        json!({"code": "import os, subprocess\nos.write(1, b'raw fd write\\n')\nsubprocess.run(['echo', 'child'])\nprint('{\"jsonrpc\": \"2.0\", \"id\": 99, \"result\": 1}')"}),
    );
    let out = r["result"]["output"].as_str().unwrap();
    assert!(
        out.contains("raw fd write") && out.contains("child"),
        "{out}"
    );
    assert!(
        s.try_next(Duration::from_millis(200)).is_none(),
        "no forged line"
    );
    s.assert_only_jsonrpc();
}

#[test]
fn a_line_is_streamed_before_the_cell_writes_more() {
    let env = Env::fast();
    let mut s = Serve::start(&env, &[]);
    s.call(0, "execute", json!({"session": "l", "code": "import time"}));
    let t0 = Instant::now();
    s.request(
        1,
        "execute",
        json!({"session": "l", "stream": true, "code": "print('tick', flush=True)\ntime.sleep(10)"}),
    );
    let first = s.next(LIMIT);
    assert_eq!(first["method"], "cell/output", "{first}");
    assert_eq!(first["params"]["chunk"], "tick\n");
    // Well before the cell's end (10 s), when a held line would come out.
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "the line arrived only after {:?}, with the cell's end",
        t0.elapsed()
    );
}

#[test]
fn raw_line_edge_cases() {
    let env = Env::fast();
    let mut s = Serve::start(&env, &[]);
    // Blank lines are skipped without an answer.
    s.send_bytes(b"\n   \n\t\n");
    // Invalid UTF-8 is a parse error.
    s.send_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"sessions\",\"x\":\"\xff\xfe\"}\n");
    let m = s.next(LIMIT);
    assert_eq!(m["error"]["code"], -32700, "{m}");
    assert_eq!(m["id"], Value::Null);
    // CRLF line endings are accepted.
    s.send_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"sessions\"}\r\n");
    let m = s.next(LIMIT);
    assert_eq!(m["id"], 2, "{m}");
    assert!(m["result"]["sessions"].is_array());
    // A last line without a newline is still answered before EOF.
    s.send_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"sessions\"}");
    s.close_stdin();
    let m = s.next(LIMIT);
    assert_eq!(m["id"], 3, "{m}");
    assert!(m["result"]["sessions"].is_array(), "{m}");
    assert!(s.wait(LIMIT).success());
    s.assert_only_jsonrpc();
}

#[test]
fn execute_params_cwd_timeout_reset_and_a_dying_kernel() {
    let env = Env::fast();
    env.write("proj/here.txt", "here");
    let mut s = Serve::start(&env, &[]);
    let cwd = env.canonical().join("proj");
    let r = s.call(
        1,
        "execute",
        json!({"session": "c", "cwd": cwd, "code": "import os; print(os.listdir('.'))"}),
    );
    assert_eq!(r["result"]["output"], "['here.txt']\n", "{r}");

    let t0 = Instant::now();
    let r = s.call(
        2,
        "execute",
        json!({"session": "c", "cwd": cwd, "timeout": 0.5, "code": "import time; time.sleep(20)"}),
    );
    assert_eq!(r["result"]["status"], "timeout", "{r}");
    assert!(t0.elapsed() < Duration::from_secs(10));

    s.call(
        3,
        "execute",
        json!({"session": "c", "cwd": cwd, "code": "v = 1"}),
    );
    let r = s.call(
        4,
        "execute",
        json!({"session": "c", "cwd": cwd, "reset": true, "code": "print('v' in globals())"}),
    );
    assert_eq!(r["result"]["output"], "False\n");
    assert_eq!(r["result"]["kernel"]["state_reset"], true);

    // A kernel that dies mid-cell: the result says so, the next cell gets a
    // fresh kernel.
    let r = s.call(
        5,
        "execute",
        json!({"session": "c", "cwd": cwd, "code": "import os, sys\nprint('bye', flush=True)\nos._exit(7)"}),
    );
    let res = &r["result"];
    assert_eq!(res["status"], "error", "{r}");
    assert!(
        res["error"].as_str().unwrap().contains("died")
            || res["error"].as_str().unwrap().contains("exit"),
        "{r}"
    );
    let r = s.call(
        6,
        "execute",
        json!({"session": "c", "cwd": cwd, "code": "print('again')"}),
    );
    assert_eq!(r["result"]["output"], "again\n");
    assert_eq!(r["result"]["kernel"]["state_reset"], true);
    s.assert_only_jsonrpc();
}

// ---- EOF, the in-flight limit, $/cancelRequest, ordering ----

/// Reads messages until every id in `ids` has its response (notifications
/// and other responses are skipped); the responses in arrival order.
#[track_caller]
fn responses(s: &Serve, ids: &[Value], limit: Duration) -> Vec<Value> {
    let deadline = Instant::now() + limit;
    let mut missing: std::collections::HashSet<String> = ids.iter().map(Value::to_string).collect();
    let mut got: Vec<Value> = Vec::new();
    while !missing.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        let m = s.next(left.max(Duration::from_millis(1)));
        if m.get("method").is_none() && missing.remove(&m["id"].to_string()) {
            got.push(m);
        }
    }
    got
}

/// The response with `id` among `msgs`.
#[track_caller]
fn by_id<'a>(msgs: &'a [Value], id: &Value) -> &'a Value {
    msgs.iter()
        .find(|m| m["id"] == *id)
        .unwrap_or_else(|| panic!("no response {id} in {msgs:?}"))
}

/// Sends an execute with `stream: true` and waits for its first output
/// chunk (the cell is running); returns that chunk.
#[track_caller]
fn start_running(s: &mut Serve, id: impl Into<Value>, session: &str, code: &str) -> String {
    s.request(
        id,
        "execute",
        json!({"session": session, "stream": true, "code": code}),
    );
    let note = s.next(LIMIT);
    assert_eq!(note["method"], "cell/output", "{note}");
    note["params"]["chunk"].as_str().unwrap().to_string()
}

fn cancel(s: &mut Serve, id: impl Into<Value>) {
    s.send_raw(
        &json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": id.into()}})
            .to_string(),
    );
}

#[test]
fn eof_interrupts_running_cells_answers_queued_ones_unrun_and_exits_within_the_graces() {
    // FAST_CONFIG: interrupt_grace 1 s, kill_grace 0.5 s.
    let env = Env::fast();
    let mut s = Serve::start(&env, &[]);
    let r = s.call(
        1,
        "execute",
        json!({"session": "idle", "code": "import os; print(os.getpid())"}),
    );
    let pid_idle: i32 = r["result"]["output"]
        .as_str()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let chunk = start_running(
        &mut s,
        2,
        "b",
        "import os, time\nx = 1\nprint(os.getpid(), flush=True)\ntime.sleep(100)",
    );
    let pid_b: i32 = chunk.trim().parse().unwrap();
    // A cell that ignores SIGINT: only the kill after interrupt_grace stops it.
    let chunk = start_running(
        &mut s,
        3,
        "c",
        "import os, signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint(os.getpid(), flush=True)\ntime.sleep(100)",
    );
    let pid_c: i32 = chunk.trim().parse().unwrap();
    // Queued behind the running cell of b: must be answered, never run.
    s.request(
        4,
        "execute",
        json!({"session": "b", "code": "open('queued-ran', 'w').write('x')"}),
    );
    // Synchronise on the request being queued rather than sleeping: serve
    // admits lines in order (a session's queue is its turn), so the answer
    // to a request sent after it means it waits behind b's running cell.
    s.request(5, "sessions", json!({}));
    let (r, before) = s.until_id(&json!(5), LIMIT);
    assert!(before.is_empty(), "unexpected messages: {before:?}");
    assert!(r["result"]["sessions"].is_array(), "{r}");
    // The host's pids (a cell prints its sandbox's own).
    let (pid_idle, pid_b, pid_c) = (
        session_pid(&r["result"], "idle").unwrap_or(pid_idle),
        session_pid(&r["result"], "b").unwrap_or(pid_b),
        session_pid(&r["result"], "c").unwrap_or(pid_c),
    );
    let t0 = Instant::now();
    s.close_stdin();
    let got = responses(&s, &[json!(2), json!(3), json!(4)], LIMIT);
    let st = s.wait(LIMIT);
    let took = t0.elapsed();
    assert_eq!(st.code(), Some(0));
    // interrupt_grace + kill_grace (1.5 s) + 3 s for a loaded machine; the
    // cells would run 100 s if nothing stopped them.
    assert!(took < Duration::from_millis(4500), "exit took {took:?}");

    let b = &by_id(&got, &json!(2))["result"];
    assert_eq!(b["status"], "interrupted", "{b}");
    assert!(
        b["output"].as_str().unwrap().contains("KeyboardInterrupt"),
        "{b}"
    );
    let c = &by_id(&got, &json!(3))["result"];
    assert_eq!(c["status"], "interrupted", "{c}");
    assert_eq!(c["kernel"]["state_kept"], false, "{c}");
    let q = &by_id(&got, &json!(4))["result"];
    assert_eq!(q["status"], "interrupted", "{q}");
    assert!(
        q["error"]
            .as_str()
            .unwrap()
            .contains("none of its code ran"),
        "{q}"
    );
    assert!(
        !env.path().join("queued-ran").exists(),
        "the queued cell ran"
    );
    for pid in [pid_idle, pid_b, pid_c] {
        assert!(!alive(pid), "kernel {pid} outlived serve");
    }
    assert!(env.python_pids().is_empty(), "{:?}", env.python_pids());
    s.assert_only_jsonrpc();
}

#[test]
fn the_request_past_1024_in_flight_gets_32000_and_eof_answers_the_rest_unrun() {
    let env = Env::fast();
    let mut s = Serve::start(&env, &[]);
    start_running(
        &mut s,
        0,
        "hold",
        "import time\nprint('go', flush=True)\ntime.sleep(100)",
    );
    // 1023 more cells queue behind it: 1024 requests in flight.
    let mut lines = String::new();
    for i in 1..=1023 {
        let msg = json!({"jsonrpc": "2.0", "id": i, "method": "execute",
                         "params": {"session": "hold", "code": format!("open('ran-{i}', 'w')")}});
        lines.push_str(&msg.to_string());
        lines.push('\n');
    }
    s.send_bytes(lines.as_bytes());
    s.request(
        1024,
        "execute",
        json!({"session": "other", "code": "print(1)"}),
    );
    s.request("s", "sessions", json!({}));
    let got = responses(&s, &[json!(1024), json!("s")], LIMIT);
    for m in &got {
        assert_eq!(m["error"]["code"], -32000, "{m}");
        let msg = m["error"]["message"].as_str().unwrap();
        assert!(msg.contains("1024") && msg.contains("in flight"), "{msg}");
    }
    // EOF: the running cell is interrupted, the 1023 queued are answered
    // without running, promptly.
    let t0 = Instant::now();
    s.close_stdin();
    let ids: Vec<Value> = (0..=1023).map(|i| json!(i)).collect();
    let got = responses(&s, &ids, LIMIT);
    assert_eq!(s.wait(LIMIT).code(), Some(0));
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(by_id(&got, &json!(0))["result"]["status"], "interrupted");
    for m in &got[..] {
        assert_eq!(m["result"]["status"], "interrupted", "{m}");
    }
    let ran: Vec<_> = std::fs::read_dir(env.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("ran-"))
        .collect();
    assert!(ran.is_empty(), "{} queued cells ran", ran.len());
    s.assert_only_jsonrpc();
}

#[test]
fn cancel_request_answers_a_queued_execute_with_32800_and_it_never_runs() {
    let env = Env::fast();
    let mut s = Serve::start(&env, &[]);
    start_running(
        &mut s,
        1,
        "q",
        "import time\nprint('go', flush=True)\ntime.sleep(1.5)\nprint('one')",
    );
    s.request(
        2,
        "execute",
        json!({"session": "q", "code": "open('cancelled-ran', 'w').write('x')"}),
    );
    s.request(
        3,
        "execute",
        json!({"session": "q", "code": "print('three')"}),
    );
    cancel(&mut s, 2);
    // The cancel is answered at once, before the running cell ends.
    let first = s.next(LIMIT);
    assert_eq!(first["id"], 2, "{first}");
    assert_eq!(first["error"]["code"], -32800, "{first}");
    assert!(
        first["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cancel"),
        "{first}"
    );
    let got = responses(&s, &[json!(1), json!(3)], LIMIT);
    assert_eq!(got[0]["id"], 1, "the session's order is kept: {got:?}");
    assert_eq!(got[0]["result"]["output"], "go\none\n");
    assert_eq!(got[1]["result"]["output"], "three\n");
    assert!(
        !env.path().join("cancelled-ran").exists(),
        "the cancelled cell ran"
    );
    // An unknown or finished id is ignored; sent as a request, the cancel
    // says whether it found the request.
    cancel(&mut s, 2);
    cancel(&mut s, "nope");
    let r = s.call(9, "$/cancelRequest", json!({"id": 1}));
    assert_eq!(r["result"]["cancelled"], false, "{r}");
    let r = s.call(10, "$/cancelRequest", json!({"identifier": 1}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = s.call(
        11,
        "execute",
        json!({"session": "q", "code": "print('fine')"}),
    );
    assert_eq!(r["result"]["output"], "fine\n");
    s.assert_only_jsonrpc();
}

#[test]
fn cancel_while_the_kernel_starts_answers_32800_and_the_cell_never_runs() {
    // Every kernel of this environment takes 4 s to start: a user
    // `usercustomize` (HOME is the environment's) marks that the start has
    // begun, then sleeps, at interpreter start-up. (Interpreter probes run
    // with `-I -S`, without it.) No warm pool: the first cell of a session
    // starts its kernel.
    let env = Env::with_config(
        &common::FAST_CONFIG.replace("max_kernels = 8\n", "max_kernels = 8\nwarm_pool = 0\n"),
    );
    let site = std::process::Command::new("python3")
        .args(["-c", "import site; print(site.getusersitepackages())"])
        .env("HOME", env.path())
        .output()
        .unwrap();
    let site = std::path::PathBuf::from(String::from_utf8(site.stdout).unwrap().trim());
    assert!(site.starts_with(env.path()), "{}", site.display());
    std::fs::create_dir_all(&site).unwrap();
    let starting = env.path().join("kernel-starting");
    std::fs::write(
        site.join("usercustomize.py"),
        format!(
            "import time\nopen({:?}, 'w').close()\ntime.sleep(4)\n",
            starting.display().to_string()
        ),
    )
    .unwrap();

    let mut s = Serve::start(&env, &[]);
    let t0 = Instant::now();
    s.request(
        1,
        "execute",
        json!({"session": "new", "code": "open('started-ran', 'w').write('x')"}),
    );
    common::wait_until("the session's kernel has begun its start", || {
        starting.exists()
    });
    let cancelled_at = t0.elapsed();
    cancel(&mut s, 1);
    let r = s.until_id(&json!(1), LIMIT).0;
    assert_eq!(r["error"]["code"], -32800, "{r}");
    // Answered after the cancel and at once, not when the 4 s start is over.
    let answered = t0.elapsed();
    assert!(
        answered >= cancelled_at && answered - cancelled_at < Duration::from_millis(2500),
        "answered at {answered:?}, cancelled at {cancelled_at:?}"
    );
    // The session's next cell gets a fresh kernel (the one being started
    // was abandoned); the cancelled cell never ran anywhere.
    let r = s.call(
        2,
        "execute",
        json!({"session": "new", "code": "import os; print(os.path.exists('started-ran'))"}),
    );
    assert_eq!(r["result"]["output"], "False\n", "{r}");
    assert_eq!(r["result"]["kernel"]["execution_count"], 1, "{r}");
    assert!(
        !env.path().join("started-ran").exists(),
        "the cancelled cell ran"
    );
    s.assert_only_jsonrpc();
}

#[test]
fn cancel_of_a_running_cell_interrupts_it_and_keeps_state() {
    let env = Env::fast();
    let mut s = Serve::start(&env, &[]);
    s.call(1, "execute", json!({"session": "r", "code": "x = 'kept'"}));
    start_running(
        &mut s,
        "long",
        "r",
        "import time\nprint('go', flush=True)\ntime.sleep(30)",
    );
    let t0 = Instant::now();
    cancel(&mut s, "long");
    let r = s.until_id(&json!("long"), Duration::from_secs(10)).0;
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let res = &r["result"];
    assert_eq!(res["status"], "interrupted", "{r}");
    assert_eq!(res["kernel"]["state_kept"], true, "{r}");
    let r = s.call(2, "execute", json!({"session": "r", "code": "print(x)"}));
    assert_eq!(r["result"]["output"], "kept\n");
    s.assert_only_jsonrpc();
}

#[test]
fn batch_entries_keep_their_session_order() {
    let env = Env::fast();
    let mut s = Serve::start(&env, &[]);
    let mut batch = vec![json!({"jsonrpc": "2.0", "id": "first", "method": "execute",
        "params": {"session": "o", "code": "import time\ntime.sleep(0.3)\nseq = []"}})];
    for i in 0..20 {
        batch.push(json!({"jsonrpc": "2.0", "id": i, "method": "execute",
            "params": {"session": "o", "code": format!("seq.append({i})")}}));
        // Another session's entries in between run on their own.
        batch.push(
            json!({"jsonrpc": "2.0", "id": format!("p{i}"), "method": "execute",
            "params": {"session": "p", "code": format!("print({i})")}}),
        );
    }
    batch.push(json!({"jsonrpc": "2.0", "id": "last", "method": "execute",
        "params": {"session": "o", "code": "print(seq)"}}));
    s.send_raw(&Value::Array(batch).to_string());
    // A single request after the batch waits for the batch's entries of
    // its session.
    s.request(
        "after",
        "execute",
        json!({"session": "o", "code": "seq.append('after'); print(len(seq))"}),
    );
    let mut batch_reply = None;
    let mut after = None;
    while batch_reply.is_none() || after.is_none() {
        let m = s.next(LIMIT);
        if m.is_array() {
            batch_reply = Some(m);
        } else if m["id"] == "after" {
            after = Some(m);
        }
    }
    let items = batch_reply.unwrap();
    let items = items.as_array().unwrap();
    assert_eq!(items.len(), 42);
    let want: Vec<String> = (0..20).map(|i| i.to_string()).collect();
    assert_eq!(
        by_id(items, &json!("last"))["result"]["output"],
        format!("[{}]\n", want.join(", "))
    );
    assert_eq!(by_id(items, &json!("p7"))["result"]["output"], "7\n");
    assert_eq!(after.unwrap()["result"]["output"], "21\n");
    s.assert_only_jsonrpc();
}

#[test]
fn shutdown_session_waits_for_the_cells_sent_before_it() {
    let env = Env::fast();
    let mut s = Serve::start(&env, &[]);
    s.request(
        1,
        "execute",
        json!({"session": "x", "code": "import time, os\nv = 1\ntime.sleep(1)\nprint(os.environ['TOOLCELL_RPC'])"}),
    );
    s.request(2, "shutdown_session", json!({"session": "x"}));
    s.request(
        3,
        "execute",
        json!({"session": "x", "code": "print('v' in globals())"}),
    );
    // `interrupt` does not queue: it is answered at once.
    s.request(4, "interrupt", json!({"session": "nobody"}));
    let got = responses(&s, &[json!(1), json!(2), json!(3), json!(4)], LIMIT);
    let order: Vec<&Value> = got.iter().map(|m| &m["id"]).collect();
    assert_eq!(
        order,
        [&json!(4), &json!(1), &json!(2), &json!(3)],
        "{got:?}"
    );
    let r1 = &got[1]["result"];
    assert_eq!(r1["status"], "success", "the cell ran to its end: {r1}");
    // The kernel, by the variable only its processes carry (a pid is 2
    // inside every sandbox).
    let marker = format!("TOOLCELL_RPC={}", r1["output"].as_str().unwrap().trim());
    assert_eq!(got[2]["result"]["shut_down"], 1, "{got:?}");
    assert!(with_environ(&marker).is_empty(), "shut down after the cell");
    assert_eq!(got[3]["result"]["output"], "False\n");
    assert_eq!(got[3]["result"]["kernel"]["state_reset"], true);
    // A queued shutdown_session can be cancelled like an execute.
    start_running(
        &mut s,
        5,
        "x",
        "import time\nprint('go', flush=True)\ntime.sleep(1)",
    );
    s.request(6, "shutdown_session", json!({"session": "x"}));
    cancel(&mut s, 6);
    let got = responses(&s, &[json!(5), json!(6)], LIMIT);
    assert_eq!(got[0]["id"], 6, "{got:?}");
    assert_eq!(got[0]["error"]["code"], -32800);
    let r = s.call(
        7,
        "execute",
        json!({"session": "x", "code": "print('alive')"}),
    );
    assert_eq!(r["result"]["kernel"]["reused"], true, "{r}");
    s.assert_only_jsonrpc();
}

#[test]
fn logs_go_to_stderr_only() {
    let env = Env::fast();
    let mut c = env.cmd();
    c.env("TOOLCELL_LOG", "debug");
    let mut child = c
        .arg("serve")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        writeln!(
            stdin,
            "{}",
            json!({"jsonrpc": "2.0", "id": 1, "method": "execute", "params": {"code": "print(1)"}})
        )
        .unwrap();
        writeln!(
            stdin,
            "{}",
            json!({"jsonrpc": "2.0", "id": 2, "method": "sessions"})
        )
        .unwrap();
    }
    let out = common::finish(child, LIMIT);
    out.expect_code(0);
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 2, "{}", out.stdout);
    assert!(lines.iter().all(|l| l["jsonrpc"] == "2.0"));
    assert!(!out.stderr.is_empty(), "debug logs are written, to stderr");
}

#[test]
fn serve_keeps_one_warm_kernel_unless_the_config_says_otherwise() {
    let env = Env::fast();
    let mut s = Serve::start(&env, &[]);
    // Before any request, one kernel is already waiting.
    assert!(
        eventually(Duration::from_secs(30), || env.python_pids().len() == 1),
        "no warm kernel: {:?}",
        env.python_pids()
    );
    let r = s.call(1, "execute", json!({"code": "print(1)", "session": "new"}));
    assert_eq!(r["result"]["kernel"]["reused"], false);
    // The session took it; a replacement starts.
    assert!(eventually(Duration::from_secs(30), || env
        .python_pids()
        .len()
        == 2));
    s.close_stdin();
    assert!(s.wait(Duration::from_secs(20)).success());
    assert!(eventually(Duration::from_secs(10), || env
        .python_pids()
        .is_empty()));

    let env = Env::with_config("[execution]\ntimeout = 30\n\n[kernels]\nwarm_pool = 0\n");
    let mut s = Serve::start(&env, &[]);
    let r = s.call(1, "sessions", json!({}));
    assert_eq!(r["result"]["sessions"], json!([]));
    // Passage of time is the subject: no warm kernel starts meanwhile.
    std::thread::sleep(Duration::from_millis(500));
    assert!(env.python_pids().is_empty(), "{:?}", env.python_pids());
    s.close_stdin();
    assert!(s.wait(Duration::from_secs(20)).success());
}

#[test]
fn read_file_refuses_the_servers_stdin_and_a_fifo_and_the_next_request_is_answered() {
    let env = Env::fast();
    let mut s = Serve::start(&env, &[]);
    // The tools run in the serve process: `/dev/stdin` there is the
    // JSON-RPC input. Reading it would swallow the next request; a FIFO
    // without a writer would block a host thread for good.
    let code = r#"
import os, time
from toolcell_tools import read_file, ToolError
os.mkfifo('pipe.fifo')
for path in ['/dev/stdin', '/proc/self/fd/0', 'pipe.fifo']:
    t = time.monotonic()
    try:
        read_file(path)
        print(path, 'was read')
    except ToolError as e:
        print(path, 'refused after %.1f s:' % (time.monotonic() - t), e)
"#;
    let r = s.call(1, "execute", json!({"code": code}));
    let out = r["result"]["output"].as_str().unwrap_or_default();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{r}");
    for (line, path, why) in [
        (lines[0], "/dev/stdin", "open file descriptor"),
        (lines[1], "/proc/self/fd/0", "open file descriptor"),
        (lines[2], "pipe.fifo", "FIFO"),
    ] {
        assert!(
            line.starts_with(&format!("{path} refused after ")),
            "{line}"
        );
        // A sandboxed kernel's /dev and /proc are its own: the host's are
        // not there for its tools.
        assert!(
            line.contains(why) && line.contains("regular file")
                || (path != "pipe.fifo" && line.contains("not found")),
            "{line}"
        );
        let secs: f64 = line
            .split("after ")
            .nth(1)
            .and_then(|t| t.split(' ').next())
            .and_then(|t| t.parse().ok())
            .unwrap();
        assert!(secs < 5.0, "{line}");
    }
    // Nothing was taken from the server's input: the next requests are
    // answered, and the session still works.
    let t0 = Instant::now();
    let r = s.call(2, "sessions", json!({}));
    assert!(r["result"]["sessions"].is_array(), "{r}");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    let r = s.call(3, "execute", json!({"code": "print(6 * 7)"}));
    assert_eq!(r["result"]["output"], "42\n", "{r}");
    s.assert_only_jsonrpc();
}

#[test]
fn sessions_shows_the_key_parts_that_tell_kernels_of_one_name_apart() {
    let env = Env::fast();
    let other = env.canonical().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let mut s = Serve::start(&env, &[]);
    let r = s.call(1, "execute", json!({"session": "w", "code": "x = 1"}));
    assert!(r["result"].get("warning").is_none(), "{r}");
    let r = s.call(
        2,
        "execute",
        json!({"session": "w", "code": "print('x' in globals())", "cwd": other.display().to_string(), "tools": ["read_file"]}),
    );
    assert_eq!(r["result"]["output"], "False\n", "{r}");
    let w = r["result"]["warning"].as_str().unwrap_or_default();
    assert!(
        w.starts_with("session \"w\" already has a kernel with a different working directory (")
            && w.contains(&format!("; this cell's: {})", other.display()))
            && w.contains("a different tool set ("),
        "{r}"
    );
    s.call(3, "execute", json!({"session": "solo", "code": "1"}));
    let r = s.call(4, "sessions", json!({}));
    let list = r["result"]["sessions"].as_array().unwrap();
    let w: Vec<&Value> = list.iter().filter(|x| x["session"] == "w").collect();
    assert_eq!(w.len(), 2, "{r}");
    for entry in w {
        assert_eq!(entry["differs"], json!(["cwd", "tools"]), "{r}");
    }
    let solo = list.iter().find(|x| x["session"] == "solo").unwrap();
    assert!(solo.get("differs").is_none(), "{r}");
    s.assert_only_jsonrpc();
}
