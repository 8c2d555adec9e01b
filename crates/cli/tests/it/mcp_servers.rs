//! MCP servers as tool sources, through the real binary: `[mcp_servers]`
//! in `toolcell.toml`, real kernels, and servers nobody here wrote
//! (`@modelcontextprotocol/server-everything` from npm and a FastMCP server
//! written with the Python `mcp` SDK, from `scripts/test-deps.sh`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{Env, Serve, alive, eventually};
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
    // The server creates `begun` as it takes the call.
    let begun = env.path().join("slow-begun");
    serve.request(
        3,
        "execute",
        json!({"code": format!("try:\n    fast.slow(20, marker={:?})\nexcept ToolError as e:\n    print('died:', 'fast' in str(e))", begun.display().to_string())}),
    );
    common::wait_until("the server is in the slow call", || begun.exists());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let (r, _) = serve.until_id(&json!(3), Duration::from_secs(30));
    assert!(output(&r["result"]).contains("died: True"), "{r}");
    // Passage of time is the subject: a crashed server is started again
    // only 5 s after its last start.
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

// ---------------------------------------------------------------------------
// Hostile servers (tests/mcp/hostile_server.py: plain JSON-RPC, standard
// library only, saying whatever the test gives it).
// ---------------------------------------------------------------------------

/// A value of the host's `OPENAI_API_KEY` (the redactor knows it only as a
/// host secret: it has no vendor shape).
const HOST_SECRET: &str = "Zq8vKp2LmX9rTw4YhB6n";
/// A GitHub token shape (the redactor knows it by its prefix).
const GH_TOKEN: &str = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8";

/// The `[mcp_servers.NAME]` section of a hostile server saying `spec`
/// (written next to the config), with a journal-less, quick `[execution]`.
fn hostile_config(env: &Env, servers: &[(&str, Value)]) -> String {
    let script = Path::new(
        &std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../tools/tests/mcp/hostile_server.py");
    let py = deps().join("venv/bin/python");
    let mut toml = String::from(
        "[execution]\ntimeout = 60\n[journal]\nenabled = false\n[daemon]\nidle_exit = 60\n",
    );
    for (name, spec) in servers {
        let file = env.write(&format!("{name}.json"), &spec.to_string());
        toml.push_str(&format!(
            "[mcp_servers.{name}]\ncommand = [{:?}, {:?}, {:?}]\nstartup_timeout = 20\n",
            py.display().to_string(),
            script.display().to_string(),
            file.display().to_string()
        ));
    }
    env.write("toolcell.toml", &toml);
    toml
}

/// `toolcell ARGS` in `env` with `OPENAI_API_KEY` set to [`HOST_SECRET`]
/// and `extra` variables.
fn run_with_secret(env: &Env, args: &[&str], extra: &[(&str, &str)]) -> common::Out {
    let mut c = env.cmd();
    c.env("OPENAI_API_KEY", HOST_SECRET)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in extra {
        c.env(k, v);
    }
    common::finish(c.spawn().unwrap(), Duration::from_secs(120))
}

#[track_caller]
fn assert_no_secret(what: &str, text: &str) {
    for secret in [HOST_SECRET, GH_TOKEN] {
        assert!(!text.contains(secret), "{what} shows {secret}:\n{text}");
    }
}

/// The text reversed (a cell can carry a secret that way without the cell's
/// own source being masked: only the test knows the value).
fn reversed(s: &str) -> String {
    s.chars().rev().collect()
}

#[test]
fn review_06_host_secrets_in_an_mcp_tool_list_reach_no_schema_tool_list_or_stub() {
    let env = Env::new();
    let leaky = json!({"tools": [
        {
            "name": "lookup",
            "description": format!("Look a record up (signed with {HOST_SECRET}; admin token {GH_TOKEN})."),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "q": {"type": "string", "description": format!("The query. Needs {GH_TOKEN}.")},
                    "key": {"type": "string", "default": HOST_SECRET, "description": "The API key."},
                    "mode": {"type": "string", "enum": ["plain", HOST_SECRET]}
                },
                "required": ["q"]
            }
        },
        {"name": "echo", "description": "Echo.", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}
    ]});
    hostile_config(&env, &[("leaky", leaky)]);

    let outputs: Vec<(&str, Vec<&str>)> = vec![
        ("schema openai", vec!["schema", "--format", "openai"]),
        ("schema anthropic", vec!["schema", "--format", "anthropic"]),
        ("schema mcp", vec!["schema", "--format", "mcp"]),
        ("schema for R", vec!["schema", "--language", "r"]),
        (
            "schema for JavaScript",
            vec!["schema", "--language", "javascript"],
        ),
        ("tools", vec!["tools"]),
        ("tools --json", vec!["tools", "--json"]),
        ("stubs", vec!["stubs"]),
    ];
    for (what, args) in &outputs {
        let out = run_with_secret(&env, args, &[]);
        out.expect_code(0);
        assert_no_secret(what, &out.stdout);
        assert_no_secret(what, &out.stderr);
        assert!(out.stdout.contains("lookup"), "{what}: {}", out.stdout);
        if *what != "schema for JavaScript" && *what != "schema for R" {
            assert!(out.stdout.contains("«redacted:"), "{what}: {}", out.stdout);
        }
    }

    // `toolcell mcp`: the execute_code description in tools/list.
    let mut cmd = env.cmd();
    cmd.env("OPENAI_API_KEY", HOST_SECRET).arg("mcp");
    let mut mcp = Serve::spawn(cmd);
    let init = mcp.call(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    );
    assert!(init.get("result").is_some(), "{init}");
    mcp.send_raw(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string());
    let list = mcp.call(2, "tools/list", json!({}));
    let text = list.to_string();
    assert!(text.contains("leaky.lookup("), "{text}");
    assert_no_secret("mcp tools/list", &text);
    mcp.close_stdin();
    mcp.wait(Duration::from_secs(20));

    // The kernels' own stub modules hold neither (a cell could read them
    // and print them in a form the output redactor does not know), and the
    // tool still works: the default that held a secret is left to the
    // server, not sent as a mask.
    let code = format!(
        "import toolcell_tools\nsrc = open(toolcell_tools.__file__).read()\n\
         print({:?}[::-1] in src, {:?}[::-1] in src)\nprint(leaky.lookup(q='x'))\n",
        reversed(HOST_SECRET),
        reversed(GH_TOKEN)
    );
    let out = run_with_secret(&env, &["exec", "--json", &code], &[]);
    let r = out.json();
    assert_eq!(r["status"], "success", "{r}");
    assert_eq!(output(&r), "False False\nlookup {\"q\": \"x\"}\n", "{r}");
    let code = format!(
        "s <- paste(rev(strsplit({:?}, \"\")[[1]]), collapse = \"\")\n\
         cat(grepl(s, paste(deparse(formals(leaky$lookup)), collapse = \"\"), fixed = TRUE), \"\\n\")\n\
         cat(leaky$lookup(q = \"x\"), \"\\n\")",
        reversed(HOST_SECRET)
    );
    let out = run_with_secret(&env, &["exec", "--json", "--language", "r", &code], &[]);
    let r = out.json();
    assert_eq!(r["status"], "success", "{r}");
    assert_eq!(output(&r), "FALSE \nlookup {\"q\": \"x\"} \n", "{r}");
}

#[test]
fn review_06_client_tool_definitions_pass_the_redactor() {
    let env = Env::fast();
    let mut cmd = env.cmd();
    cmd.env("OPENAI_API_KEY", HOST_SECRET).arg("serve");
    let mut serve = Serve::spawn(cmd);
    let reg = serve.call(
        1,
        "tools/register",
        json!({"tools": [{
            "name": "deploy",
            "description": format!("Deploy with {HOST_SECRET}."),
            "input_schema": {"type": "object", "properties": {
                "token": {"type": "string", "default": GH_TOKEN, "description": format!("defaults to {GH_TOKEN}")}
            }}
        }]}),
    );
    assert!(reg.get("result").is_some(), "{reg}");
    for (i, format) in ["openai", "anthropic", "mcp"].iter().enumerate() {
        let s = serve.call(2 + i as u64, "schema", json!({"format": format}));
        let text = s.to_string();
        assert!(text.contains("deploy("), "{text}");
        assert_no_secret(format, &text);
    }
    let code = format!(
        "import toolcell_tools\nsrc = open(toolcell_tools.__file__).read()\n\
         print({:?}[::-1] in src, {:?}[::-1] in src, 'def deploy(' in src)",
        reversed(HOST_SECRET),
        reversed(GH_TOKEN)
    );
    let r = serve.call(9, "execute", json!({"code": code}));
    assert_eq!(output(&r["result"]), "False False True\n", "{r}");
    serve.close_stdin();
    serve.wait(Duration::from_secs(20));
}

#[test]
fn review_07_an_mcp_servers_stderr_is_redacted_in_logs_and_messages() {
    let env = Env::new();
    let noisy = json!({
        "stderr": format!(
            "starting with OPENAI_API_KEY={HOST_SECRET}\nsession {HOST_SECRET} opened\nauth: {GH_TOKEN} rejected\n"
        ),
        "exit": 3
    });
    // A server that works, with secrets in its stderr and its tool list.
    let mut lookup = tool_with("lookup", json!({}));
    lookup["description"] = json!(format!("Signed with {HOST_SECRET}, token {GH_TOKEN}."));
    let leaky = json!({"tools": [lookup], "stderr": format!("ready, key {HOST_SECRET}\n")});
    hostile_config(&env, &[("noisy", noisy), ("leaky", leaky)]);
    let code = "try:\n    noisy.anything()\nexcept ToolError as e:\n    print('refused:', 'noisy' in str(e))\n";
    // A one-shot exec: the failure is logged on its stderr, the MCP
    // server's stderr lines on it too at debug level.
    let out = run_with_secret(
        &env,
        &["exec", code],
        &[("TOOLCELL_LOG", "warn,toolcell_tools=debug")],
    );
    out.expect_code(0);
    assert_eq!(out.stdout, "refused: True\n");
    assert!(
        out.stderr.contains("noisy") && out.stderr.contains("«redacted:"),
        "{}",
        out.stderr
    );
    assert_no_secret("exec's stderr", &out.stderr);

    // At `trace`, the log quotes the protocol messages the servers sent
    // (the tool list with its descriptions): they pass the redactor too.
    let out = run_with_secret(
        &env,
        &["exec", "print(leaky.lookup())"],
        &[("TOOLCELL_LOG", "trace")],
    );
    out.expect_code(0);
    assert_eq!(out.stdout, "lookup {}\n");
    assert!(
        out.stderr.contains("Signed with «redacted:"),
        "{}",
        out.stderr
    );
    assert_no_secret("exec's stderr at trace", &out.stderr);

    // The daemon: its log file.
    let out = run_with_secret(&env, &["exec", "--session", "s", code], &[]);
    out.expect_code(0);
    assert_eq!(out.stdout, "refused: True\n");
    assert_no_secret("exec's stderr", &out.stderr);
    let dir = env.runtime_dir().join("toolcell");
    let logs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().ends_with(".log"))
        })
        .collect();
    assert!(!logs.is_empty(), "no daemon log in {}", dir.display());
    let log: String = logs
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    assert!(log.contains("noisy"), "{log}");
    assert_no_secret("the daemon's log", &log);
    let _ = env.run(&["daemon", "stop"]);
}

/// A tool that echoes; `props` its input schema's properties.
fn tool_with(name: &str, props: Value) -> Value {
    json!({"name": name, "description": format!("Tool {name}."),
           "inputSchema": {"type": "object", "properties": props}})
}

#[test]
fn review_08_a_parameter_named_debug_keeps_python_stubs_valid() {
    let env = Env::new();
    let mut props = serde_json::Map::new();
    for name in [
        "__debug__",
        "None",
        "True",
        "False",
        "print",
        "match",
        "case",
        "type",
        "_",
        "class",
        "lambda",
        "_call",
        "_args",
    ] {
        props.insert(name.into(), json!({"type": "integer"}));
    }
    let odd =
        json!({"tools": [tool_with("odd", Value::Object(props)), tool_with("ok", json!({}))]});
    hostile_config(&env, &[("odd", odd)]);
    let code = "import inspect\nprint(inspect.signature(odd.odd))\n\
                print(odd.odd(__debug___=1, None_=2, print=3, match=4, class_=5, _call_=6, type=7))\n\
                print(odd.ok())\n";
    let out = run_with_secret(&env, &["exec", "--json", code], &[]);
    let r = out.json();
    assert_eq!(r["status"], "success", "{r}");
    let lines: Vec<&str> = output(&r).lines().collect();
    assert!(lines[0].contains("__debug___: Optional[int] = None"), "{r}");
    assert_eq!(
        lines[1],
        r#"odd {"None": 2, "__debug__": 1, "_call": 6, "class": 5, "match": 4, "print": 3, "type": 7}"#,
        "{r}"
    );
    assert_eq!(lines[2], "ok {}", "{r}");
}

#[test]
fn review_08_two_mcp_tools_with_one_identifier_cost_only_one_tool() {
    let env = Env::new();
    let twins = json!({"tools": [
        tool_with("get-user", json!({"id": {"type": "integer"}})),
        tool_with("get_user", json!({"id": {"type": "integer"}})),
        tool_with("ok", json!({}))
    ]});
    hostile_config(&env, &[("twins", twins)]);
    for (language, code, want) in [
        (
            "python",
            "print(twins.get_user(id=1)); print(twins.ok())",
            "get-user {\"id\": 1}\nok {}\n",
        ),
        (
            "r",
            "writeLines(c(twins$get_user(id = 1), twins$ok()))",
            "get-user {\"id\": 1}\nok {}\n",
        ),
        (
            "javascript",
            "console.log(await twins.get_user({id: 1})); console.log(await twins.ok())",
            "get-user {\"id\": 1}\nok {}\n",
        ),
    ] {
        let out = run_with_secret(&env, &["exec", "--json", "--language", language, code], &[]);
        let r = out.json();
        assert_eq!(r["status"], "success", "{language}: {r}");
        assert_eq!(output(&r), want, "{language}: {r}");
        let warning = r["warning"].as_str().unwrap_or("");
        assert!(
            warning.contains("twins.get_user") && warning.contains("twins.get-user"),
            "{language}: {r}"
        );
        assert!(
            out.stderr.contains("twins.get_user") && out.stderr.contains("left out"),
            "{language}: the warning is logged: {}",
            out.stderr
        );
    }
}

#[test]
fn review_08_an_exponential_input_schema_does_not_stall_sessions() {
    let env = Env::new();
    // Twelve levels of `anyOf` over four `$ref`s to the next level: about
    // 1 KiB describing 4^12 paths.
    let mut defs = serde_json::Map::new();
    for i in 0..12 {
        let next = format!("#/$defs/d{}", i + 1);
        defs.insert(
            format!("d{i}"),
            json!({"anyOf": [{"$ref": next}, {"$ref": next}, {"$ref": next}, {"$ref": next}]}),
        );
    }
    defs.insert("d12".into(), json!({"type": "string"}));
    let deep = json!({"name": "deep", "description": "Deep.", "inputSchema": {
        "type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": defs
    }});
    assert!(deep.to_string().len() < 1500);
    hostile_config(
        &env,
        &[("bomb", json!({"tools": [deep, tool_with("ok", json!({}))]}))],
    );
    let started = std::time::Instant::now();
    let out = run_with_secret(
        &env,
        &[
            "exec",
            "--json",
            "print(bomb.ok()); print(bomb.deep(x='s'))",
        ],
        &[],
    );
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(15),
        "a 1 KiB schema held the session for {took:?}"
    );
    let r = out.json();
    assert_eq!(r["status"], "success", "{r}");
    assert_eq!(output(&r), "ok {}\ndeep {\"x\": \"s\"}\n", "{r}");
    let out = run_with_secret(&env, &["stubs"], &[]);
    out.expect_code(0);
    assert!(
        out.stdout.contains("def deep(x: Any = None)"),
        "{}",
        out.stdout
    );
}

#[test]
fn review_09_an_mcp_tool_named_then_does_not_make_its_namespace_thenable() {
    let env = Env::new();
    hostile_config(
        &env,
        &[(
            "srv",
            json!({"tools": [tool_with("then", json!({})), tool_with("ok", json!({}))]}),
        )],
    );
    // `await` on the namespace (or returning it from an async function)
    // must settle; the tool is there as `then_`.
    let code = "const ns = await srv;\nconsole.log(await ns.ok({}));\nconsole.log(await srv.then_({}));\n\
                console.log(await (async () => srv)() === srv);";
    let out = run_with_secret(
        &env,
        &[
            "exec",
            "--json",
            "--language",
            "javascript",
            "--timeout",
            "20",
            code,
        ],
        &[],
    );
    let r = out.json();
    assert_eq!(r["status"], "success", "{r}");
    assert_eq!(output(&r), "ok {}\nthen {}\ntrue\n", "{r}");
}

#[test]
fn review_08_a_client_tool_named_like_a_servers_module_in_any_language_is_refused() {
    let env = Env::new();
    hostile_config(
        &env,
        &[("fs", json!({"tools": [tool_with("read", json!({}))]}))],
    );
    let mut serve = Serve::start(&env, &[]);
    // In JavaScript the server's module is `fs_` (`fs` is a global there):
    // a client tool `fs_` would take it, and with it every `fs` tool.
    let reg = serve.call(
        1,
        "tools/register",
        json!({"tools": [{"name": "fs_", "input_schema": {"type": "object"}}]}),
    );
    let msg = reg["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(reg["error"]["code"], -32602, "{reg}");
    assert!(
        msg.contains("JavaScript name `fs_`") && msg.contains("MCP server `fs`"),
        "{reg}"
    );
    let r = serve.call(
        2,
        "execute",
        json!({"language": "javascript", "code": "console.log(await fs_.read({}), typeof fs.readFileSync)"}),
    );
    assert_eq!(r["result"]["output"], "read {} function\n", "{r}");
    serve.close_stdin();
    serve.wait(Duration::from_secs(20));
}
