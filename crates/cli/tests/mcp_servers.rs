//! MCP servers as tool sources, through the real binary: `[mcp_servers]`
//! in `toolcell.toml`, real kernels, and servers nobody here wrote
//! (`@modelcontextprotocol/server-everything` from npm and a FastMCP server
//! written with the Python `mcp` SDK, from `scripts/test-deps.sh`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Env, Serve, alive, eventually};
use serde_json::{Value, json};

fn deps() -> PathBuf {
    let dir = std::env::var_os("TOOLCELL_TEST_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/toolcell-ci/deps")
        });
    for path in [
        dir.join("venv/bin/python"),
        dir.join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
    ] {
        assert!(
            path.exists(),
            "{} is missing: install the MCP test servers with `scripts/test-deps.sh` \
             (TOOLCELL_TEST_DEPS={})",
            path.display(),
            dir.display()
        );
    }
    dir
}

/// A config with the FastMCP server as `fast`, server-everything as
/// `everything`, a server that cannot start as `down`, and `extra` after.
fn config(extra: &str) -> String {
    let d = deps();
    let fast = Path::new(
        &std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../tools/tests/mcp/fast_server.py");
    format!(
        "[execution]\nmax_tool_calls = 500\ntimeout = 60\n[journal]\nenabled = false\n\
         [mcp_servers.fast]\ncommand = [{py:?}, {fast:?}]\n\
         [mcp_servers.everything]\ncommand = [\"node\", {every:?}]\n\
         [mcp_servers.down]\ncommand = [\"/nonexistent/mcp-server\"]\nstartup_timeout = 3\n{extra}",
        py = d.join("venv/bin/python").display().to_string(),
        fast = fast.display().to_string(),
        every = d
            .join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
            .display()
            .to_string(),
    )
}

fn output(r: &Value) -> &str {
    r["output"].as_str().unwrap_or("")
}

#[test]
fn exec_calls_the_servers_tools_loops_threads_errors_images() {
    let env = Env::with_config(&config(""));
    let code = r#"
import os
total = 0
for i in range(200):
    total += fast.add(i, b=1)["sum"]
print("loop", total)
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(8) as ex:
    print("threads", sorted(ex.map(lambda i: fast.echo(str(i)), range(8))))
print(everything.get_sum(a=2, b=3))
img = fast.image(seed="xyz")
print(img[0]["type"], img[0]["mime"], open(img[0]["path"], "rb").read()[8:])
try:
    fast.fail(message="on purpose")
except ToolError as e:
    print("error:", e.code, e)
try:
    down.anything()
except ToolError as e:
    print("down:", "/nonexistent/mcp-server" in str(e))
from toolcell_tools.fast import add
print(add(1)["sum"])
"#;
    let out = env.run(&["exec", "--json", code]);
    let r = out.json();
    assert_eq!(r["status"], "success", "{r}");
    let lines: Vec<&str> = output(&r).lines().collect();
    assert_eq!(lines[0], "loop 20100", "{r}");
    assert_eq!(
        lines[1], "threads ['0', '1', '2', '3', '4', '5', '6', '7']",
        "{r}"
    );
    assert_eq!(lines[2], "The sum of 2 and 3 is 5.", "{r}");
    assert_eq!(lines[3], "image image/png b'xyz'", "{r}");
    assert!(
        lines[4].starts_with("error: tool_failed fast.fail:") && lines[4].contains("on purpose"),
        "{r}"
    );
    assert_eq!(lines[5], "down: True", "{r}");
    assert_eq!(lines[6], "1", "{r}");
    assert_eq!(r["tool_calls_made"], 200 + 8 + 1 + 1 + 1 + 1, "{r}");
}

#[test]
fn a_slow_server_hits_the_cell_deadline_and_a_killed_one_comes_back() {
    let env = Env::with_config(&config(""));
    let mut serve = Serve::start(&env, &[]);
    // The slow call: stopped a moment before the cell's time runs out,
    // with a ToolError the cell handles.
    let r = serve.call(
        1,
        "execute",
        json!({"code": "try:\n    fast.slow(30)\nexcept ToolError as e:\n    print('ToolError', e.code)", "timeout": 3}),
    );
    let r = &r["result"];
    assert_eq!(r["status"], "success", "{r}");
    assert_eq!(output(r), "ToolError tool_failed\n", "{r}");

    // Killed mid-call: ToolError naming the server; a later call restarts it.
    let r = serve.call(2, "execute", json!({"code": "print(fast.pid())"}));
    let pid: i32 = output(&r["result"]).trim().parse().unwrap();
    serve.request(
        3,
        "execute",
        json!({"code": "try:\n    fast.slow(20)\nexcept ToolError as e:\n    print('died:', 'fast' in str(e))"}),
    );
    std::thread::sleep(Duration::from_millis(500));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let (r, _) = serve.until_id(&json!(3), Duration::from_secs(30));
    assert!(output(&r["result"]).contains("died: True"), "{r}");
    std::thread::sleep(Duration::from_secs(5));
    let r = serve.call(4, "execute", json!({"code": "print(fast.pid())"}));
    let again: i32 = output(&r["result"]).trim().parse().unwrap_or(0);
    assert!(again > 0 && again != pid, "{r}");

    // A new tool from the server (tools/list_changed) is there at the next
    // cell, the state kept.
    let r = serve.call(
        5,
        "execute",
        json!({"code": "x = 5\nprint(fast.add_tool(name='late'))"}),
    );
    assert_eq!(r["result"]["status"], "success", "{r}");
    let found = eventually(Duration::from_secs(10), || {
        let r = serve.call(
            6,
            "execute",
            json!({"code": "print(x, fast.late(text='hi'))"}),
        );
        output(&r["result"]).starts_with("5 ") && output(&r["result"]).contains("late: hi")
    });
    assert!(found, "the new tool never appeared");

    // MCP tools and client tools side by side.
    let reg = serve.call(
        7,
        "tools/register",
        json!({"tools": [{"name": "double", "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}]}),
    );
    assert!(reg.get("result").is_some(), "{reg}");
    let schema = serve.call(8, "schema", json!({}));
    let desc = schema["result"]["function"]["description"]
        .as_str()
        .unwrap();
    assert!(desc.contains("fast.add(a: int, b: int = 0)"), "{desc}");
    assert!(desc.contains("double(n: int)"), "{desc}");
    assert!(desc.contains("everything.get_sum("), "{desc}");

    // The servers end with the host.
    serve.close_stdin();
    assert!(serve.wait(Duration::from_secs(20)).success());
    assert!(
        eventually(Duration::from_secs(5), || !alive(again)),
        "MCP server {again} outlived the host"
    );
}

#[test]
fn review_s3_a_never_answered_mcp_call_raises_tool_error_the_cell_can_handle() {
    let env = Env::with_config(&config(""));
    let mut serve = Serve::start(&env, &[]);
    // The call gives up a moment before the cell's deadline (a tenth of
    // the time left, at most 1 s): the cell catches it, carries on and
    // ends by itself; at the deadline it would have been interrupted.
    let t = std::time::Instant::now();
    let r = serve.call(
        1,
        "execute",
        json!({"code": "import time\ntry:\n    fast.slow(60)\nexcept ToolError as e:\n    time.sleep(0.2)\n    print('ToolError:', e)", "timeout": 10}),
    );
    let r = &r["result"];
    assert_eq!(r["status"], "success", "{r}");
    assert!(
        output(r).contains("ToolError:") && output(r).contains("did not answer"),
        "{r}"
    );
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    serve.close_stdin();
    assert!(serve.wait(Duration::from_secs(20)).success());
}

#[test]
fn tools_lists_the_servers_and_mcp_is_code_mode() {
    let env = Env::with_config(&config(""));
    let out = env.run(&["tools"]);
    let text = out.stdout.clone();
    assert!(
        text.contains("fast.add(a: int, b: int = 0) -> {sum: int}"),
        "{text}"
    );
    assert!(text.contains("everything.get_sum("), "{text}");
    assert!(text.contains("down.*\n    unavailable: "), "{text}");
    let out = env.run(&["stubs"]);
    let stubs = out.stdout.clone();
    assert!(stubs.contains("def _source_fast():"), "{}", &stubs[..200]);

    // `toolcell mcp`: one execute_code tool whose description lists the
    // servers' tools; a cell calls them.
    let mut mcp = Serve::start_command(&env, "mcp", &[]);
    let init = mcp.call(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    );
    assert!(init.get("result").is_some(), "{init}");
    mcp.send_raw(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string());
    let list = mcp.call(2, "tools/list", json!({}));
    let tools = list["result"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "{list}");
    let desc = tools[0]["description"].as_str().unwrap();
    assert!(desc.contains("fast.echo(text: str)"), "{desc}");
    let r = mcp.call(
        3,
        "tools/call",
        json!({"name": "execute_code", "arguments": {"code": "print(sum(fast.add(i)['sum'] for i in range(100)))"}}),
    );
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("4950\n"), "{r}");
}
