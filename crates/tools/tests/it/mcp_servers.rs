//! The MCP client side (`toolcell_tools::mcp`) against servers nobody here
//! wrote: `@modelcontextprotocol/server-everything` and
//! `server-filesystem` (npm) and a FastMCP server written with the Python
//! `mcp` SDK (tests/mcp/fast_server.py), over stdio and streamable HTTP.
//!
//! The servers come from `scripts/test-deps.sh` (into
//! `$TOOLCELL_TEST_DEPS`, default `$HOME/.cache/toolcell-ci/deps`); a test
//! fails, naming that script, when they are missing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolcell_tools::mcp::{McpHub, McpServerSpec, McpTools};
use toolcell_tools::{DynTool, ToolContext, ToolError, ToolSettings};

const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";

fn deps() -> PathBuf {
    let dir = std::env::var_os("TOOLCELL_TEST_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/toolcell-ci/deps")
        });
    let needed = [
        dir.join("venv/bin/python"),
        dir.join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
        dir.join("npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"),
    ];
    for path in &needed {
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

fn python() -> String {
    deps().join("venv/bin/python").display().to_string()
}

fn fast_script() -> String {
    Path::new(
        &std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("tests/mcp/fast_server.py")
    .display()
    .to_string()
}

fn fast(name: &str) -> McpServerSpec {
    let mut spec = McpServerSpec::stdio(name, [python(), fast_script()]);
    spec.startup_timeout = Duration::from_secs(30);
    spec
}

fn node_server(name: &str, package: &str, args: &[&str]) -> McpServerSpec {
    let script = deps()
        .join("npm/node_modules/@modelcontextprotocol")
        .join(package)
        .join("dist/index.js");
    let mut command = vec!["node".to_string(), script.display().to_string()];
    command.extend(args.iter().map(|s| s.to_string()));
    let mut spec = McpServerSpec::stdio(name, command);
    spec.startup_timeout = Duration::from_secs(30);
    spec
}

fn settings(dir: &Path) -> Arc<ToolSettings> {
    Arc::new(
        ToolSettings::new(dir)
            .spill_dir(dir.join("spill"))
            .kernel_dir(dir.join("kernel")),
    )
}

fn cx_for(settings: &Arc<ToolSettings>, secs: f64) -> ToolContext {
    ToolContext::new(
        Arc::clone(settings),
        Instant::now() + Duration::from_secs_f64(secs),
        CancellationToken::new(),
    )
}

fn tool(tools: &McpTools, name: &str) -> Arc<dyn DynTool> {
    tools
        .tools
        .iter()
        .find(|t| t.name() == name)
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "no tool {name}; have {:?}, failed {:?}",
                tools.tools.iter().map(|t| t.name()).collect::<Vec<_>>(),
                tools.failed
            )
        })
}

async fn call(t: &Arc<dyn DynTool>, args: Value, cx: ToolContext) -> Result<Value, ToolError> {
    t.validate(&args).map_err(ToolError::Failed)?;
    t.call(args, cx).await
}

fn message(r: Result<Value, ToolError>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v}"),
        Err(ToolError::Failed(m)) => m,
        Err(other) => other.to_string(),
    }
}

/// Processes whose process group is `pgid` (from /proc).
fn group_members(pgid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // state ppid pgrp …; a zombie is already dead.
        if fields.len() > 2 && fields[0] != "Z" && fields[2].parse::<i32>() == Ok(pgid) {
            out.push(pid);
        }
    }
    out
}

async fn eventually_empty(pgid: i32) {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let left = group_members(pgid);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < until,
            "processes of group {pgid} still running: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fastmcp_results_map_as_documented() {
    let tmp = tempfile::tempdir().unwrap();
    let s = settings(tmp.path());
    let hub = McpHub::new(vec![fast("fast")]).unwrap();
    let tools = hub.tools().await;
    assert!(tools.failed.is_empty(), "{:?}", tools.failed);

    let echo = tool(&tools, "fast.echo");
    assert_eq!(echo.doc(), "Return the text unchanged.");
    assert_eq!(echo.args_schema()["required"], json!(["text"]));
    // Text content only: the text.
    assert_eq!(
        call(&echo, json!({"text": "héllo"}), cx_for(&s, 30.0))
            .await
            .unwrap(),
        json!("héllo")
    );

    // structuredContent: that object; the output schema is the server's.
    let add = tool(&tools, "fast.add");
    assert_eq!(
        add.output_schema()["properties"]["sum"]["type"],
        json!("integer")
    );
    assert_eq!(
        call(&add, json!({"a": 2, "b": 40}), cx_for(&s, 30.0))
            .await
            .unwrap(),
        json!({"sum": 42})
    );
    // Arguments are checked against the input schema on our side.
    assert_eq!(
        add.validate(&json!({"a": "x"})),
        Err(r#"/a: "x" is not of type "integer""#.to_string())
    );

    // isError: a ToolError with the server's text.
    let err = message(
        call(
            &tool(&tools, "fast.fail"),
            json!({"message": "boom 7"}),
            cx_for(&s, 30.0),
        )
        .await,
    );
    // The cell's ToolError adds the tool's name (the stub prefixes it).
    assert!(
        err.contains("boom 7") && !err.contains("fast.fail"),
        "{err}"
    );

    // An image: saved under the kernel dir, 0600, with the bytes sent.
    let out = call(
        &tool(&tools, "fast.image"),
        json!({"seed": "abc"}),
        cx_for(&s, 30.0),
    )
    .await
    .unwrap();
    let items = out.as_array().expect("a list of content items");
    assert_eq!(items.len(), 1, "{out}");
    assert_eq!(items[0]["type"], "image");
    assert_eq!(items[0]["mime"], "image/png");
    let path = PathBuf::from(items[0]["path"].as_str().unwrap());
    assert!(
        path.starts_with(tmp.path().join("kernel")),
        "{}",
        path.display()
    );
    assert_eq!(path.extension().unwrap(), "png");
    let mut want = PNG_MAGIC.to_vec();
    want.extend_from_slice(b"abc");
    assert_eq!(std::fs::read(&path).unwrap(), want);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // Without a kernel dir the image goes to the spill dir.
    let spill_only = Arc::new(ToolSettings::new(tmp.path()).spill_dir(tmp.path().join("spill")));
    let out = call(
        &tool(&tools, "fast.image"),
        json!({"seed": "z"}),
        cx_for(&spill_only, 30.0),
    )
    .await
    .unwrap();
    assert!(
        out[0]["path"]
            .as_str()
            .unwrap()
            .starts_with(&tmp.path().join("spill").display().to_string()),
        "{out}"
    );

    // Results over 16 MiB are refused, saying so; the server keeps serving
    // one just under the message cap, and is restarted after one over it.
    let big = tool(&tools, "fast.big");
    let err = message(call(&big, json!({"mib": 16.5}), cx_for(&s, 60.0)).await);
    assert!(err.contains("16 MiB") && err.contains("over the"), "{err}");
    assert_eq!(
        call(&echo, json!({"text": "still here"}), cx_for(&s, 30.0))
            .await
            .unwrap(),
        json!("still here")
    );
    let err = message(call(&big, json!({"mib": 20}), cx_for(&s, 60.0)).await);
    eprintln!("oversized: {err}");
    assert!(err.contains("16 MiB") && err.contains("fast"), "{err}");
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_calls_in_a_loop_and_eight_in_parallel() {
    let tmp = tempfile::tempdir().unwrap();
    let s = settings(tmp.path());
    let hub = McpHub::new(vec![fast("fast")]).unwrap();
    let tools = hub.tools().await;
    let echo = tool(&tools, "fast.echo");
    let started = Instant::now();
    for i in 0..200 {
        let out = call(&echo, json!({"text": format!("n{i}")}), cx_for(&s, 30.0))
            .await
            .unwrap();
        assert_eq!(out, json!(format!("n{i}")));
    }
    eprintln!("200 calls: {:?}", started.elapsed());

    // Eight calls of 1 s each at once overlap: well under the 8 s they
    // would take one after the other.
    let slow = tool(&tools, "fast.slow");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let slow = Arc::clone(&slow);
        let cx = cx_for(&s, 30.0);
        tasks.push(tokio::spawn(async move {
            call(&slow, json!({"seconds": 1.0}), cx).await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap(), json!("slept 1.0"));
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(6),
        "8 parallel calls took {took:?}"
    );
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_call_fails_the_call_and_restarts_after_five_seconds() {
    let tmp = tempfile::tempdir().unwrap();
    let s = settings(tmp.path());
    let hub = McpHub::new(vec![fast("fast")]).unwrap();
    let tools = hub.tools().await;
    let started_at = Instant::now();
    let pid = hub.server_pid("fast").expect("running");
    let slow = tool(&tools, "fast.slow");
    // The server creates `begun` as it takes the call.
    let begun = tmp.path().join("slow-begun");
    let pending = {
        let slow = Arc::clone(&slow);
        let cx = cx_for(&s, 60.0);
        let args = json!({"seconds": 30, "marker": begun.display().to_string()});
        tokio::spawn(async move { call(&slow, args, cx).await })
    };
    crate::wait::wait_until("the server is in the slow call", || begun.exists()).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let err = message(
        tokio::time::timeout(Duration::from_secs(10), pending)
            .await
            .expect("the call ends soon after the kill")
            .unwrap(),
    );
    assert!(
        err.contains("fast.slow") && err.contains("MCP server `fast`"),
        "{err}"
    );
    assert!(err.contains("SIGKILL"), "exit named: {err}");
    assert!(
        err.contains(&format!("fast_server: starting pid {pid}")),
        "stderr tail quoted: {err}"
    );

    // Within 5 s of the last start: no restart, the same story.
    let echo = tool(&tools, "fast.echo");
    let err = message(call(&echo, json!({"text": "a"}), cx_for(&s, 30.0)).await);
    assert!(err.contains("started again"), "{err}");
    assert!(err.contains("SIGKILL"), "{err}");
    // The hub still lists the tools (a call starts the server again)…
    let listed = hub.tools().await;
    assert!(listed.tools.iter().any(|t| t.name() == "fast.echo"));
    assert_eq!(listed.failed.len(), 1, "{:?}", listed.failed);

    // …and after 5 s a call does.
    tokio::time::sleep_until(started_at + Duration::from_millis(5200)).await;
    assert_eq!(
        call(&echo, json!({"text": "back"}), cx_for(&s, 30.0))
            .await
            .unwrap(),
        json!("back")
    );
    let new_pid = hub.server_pid("fast").expect("running again");
    assert_ne!(new_pid, pid);
    assert!(hub.tools().await.failed.is_empty());
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_starts_honours_startup_timeout() {
    let mut sleeper = McpServerSpec::stdio("sleeper", ["sleep", "1001"]);
    sleeper.startup_timeout = Duration::from_secs(1);
    let missing = McpServerSpec::stdio("missing", ["/nonexistent/mcp-server", "--stdio"]);
    let hub = McpHub::new(vec![sleeper, missing, fast("fast")]).unwrap();
    let started = Instant::now();
    let tools = hub.tools().await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(20), "took {took:?}");
    let failure = |server: &str| {
        tools
            .failed
            .iter()
            .find(|f| f.server == server)
            .unwrap_or_else(|| panic!("no failure for {server}: {:?}", tools.failed))
            .message
            .clone()
    };
    let sleeper = failure("sleeper");
    assert!(
        sleeper.contains("MCP server `sleeper`") && sleeper.contains("within 1 s"),
        "{sleeper}"
    );
    let missing = failure("missing");
    assert!(
        missing.contains("`missing`") && missing.contains("`/nonexistent/mcp-server` not found"),
        "{missing}"
    );
    // The other server is unaffected.
    assert!(tools.tools.iter().any(|t| t.name() == "fast.echo"));
    assert_eq!(tools.failed.len(), 2, "{:?}", tools.failed);
    // The sleeper's process is gone.
    let until = Instant::now() + Duration::from_secs(5);
    while sleeping_children() > 0 {
        assert!(Instant::now() < until, "`sleep 1001` still running");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Asked again within 5 s: the same failure at once, no new attempt.
    let again = Instant::now();
    let tools = hub.tools().await;
    assert!(again.elapsed() < Duration::from_millis(500));
    assert!(
        tools
            .failed
            .iter()
            .any(|f| f.message.contains("started again"))
    );
    hub.shutdown().await;
}

/// Processes running `sleep 1001`.
fn sleeping_children() -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| c == b"sleep\x001001\x00")
                .unwrap_or(false)
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_call_hits_the_deadline_and_cancellation_ends_a_call() {
    let tmp = tempfile::tempdir().unwrap();
    let s = settings(tmp.path());
    let hub = McpHub::new(vec![fast("fast")]).unwrap();
    let tools = hub.tools().await;
    let slow = tool(&tools, "fast.slow");
    let started = Instant::now();
    let err = message(call(&slow, json!({"seconds": 20}), cx_for(&s, 1.0)).await);
    let took = started.elapsed();
    assert!(
        // The cell's 1 s less its margin (a tenth: 0.1 s); the call itself
        // would take 20 s.
        took >= Duration::from_millis(850) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert!(
        err.contains("time limit") && err.contains("MCP server `fast`"),
        "{err}"
    );

    let cancel = CancellationToken::new();
    let cx = ToolContext::new(
        Arc::clone(&s),
        Instant::now() + Duration::from_secs(30),
        cancel.clone(),
    );
    let begun = tmp.path().join("slow-begun");
    let pending = {
        let slow = Arc::clone(&slow);
        let args = json!({"seconds": 20, "marker": begun.display().to_string()});
        tokio::spawn(async move { call(&slow, args, cx).await })
    };
    crate::wait::wait_until("the server is in the slow call", || begun.exists()).await;
    cancel.cancel();
    let err = message(
        tokio::time::timeout(Duration::from_secs(2), pending)
            .await
            .unwrap()
            .unwrap(),
    );
    assert!(err.contains("cancelled"), "{err}");
    // The server is fine afterwards.
    let echo = tool(&tools, "fast.echo");
    assert_eq!(
        call(&echo, json!({"text": "ok"}), cx_for(&s, 30.0))
            .await
            .unwrap(),
        json!("ok")
    );
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_printing_non_json_on_stdout_gets_a_clear_error() {
    let mut spec = fast("noisy");
    spec.command.push("--garbage".into());
    let hub = McpHub::new(vec![spec, fast("fast")]).unwrap();
    let tools = hub.tools().await;
    let failure = tools
        .failed
        .iter()
        .find(|f| f.server == "noisy")
        .expect("noisy fails");
    assert!(
        failure.message.contains("not JSON-RPC")
            && failure
                .message
                .contains("hello from a server that logs to stdout"),
        "{}",
        failure.message
    );
    assert!(failure.message.contains("stderr"), "{}", failure.message);
    assert!(!tools.tools.iter().any(|t| t.name().starts_with("noisy.")));
    assert!(tools.tools.iter().any(|t| t.name() == "fast.echo"));
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_changed_bumps_the_generation_and_relists() {
    let tmp = tempfile::tempdir().unwrap();
    let s = settings(tmp.path());
    let hub = McpHub::new(vec![fast("fast")]).unwrap();
    let before = hub.tools().await;
    assert!(!before.tools.iter().any(|t| t.name() == "fast.extra"));
    let out = call(
        &tool(&before, "fast.add_tool"),
        json!({"name": "extra"}),
        cx_for(&s, 30.0),
    )
    .await
    .unwrap();
    assert_eq!(out, json!("added extra"));
    let until = Instant::now() + Duration::from_secs(5);
    while hub.generation() == before.generation {
        assert!(Instant::now() < until, "generation not bumped");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = hub.tools().await;
    assert!(after.generation > before.generation);
    let extra = tool(&after, "fast.extra");
    assert_eq!(extra.doc(), "Added at run time: extra.");
    assert_eq!(
        call(&extra, json!({"text": "hi"}), cx_for(&s, 30.0))
            .await
            .unwrap(),
        // FastMCP gives a function returning `str` structured output.
        json!({"result": "extra: hi"})
    );
    // Nothing changed since: the same generation.
    assert_eq!(hub.tools().await.generation, after.generation);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_against_fastmcp_on_loopback() {
    let tmp = tempfile::tempdir().unwrap();
    let s = settings(tmp.path());
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut server = tokio::process::Command::new(python())
        .arg(fast_script())
        .arg("--http")
        .arg(port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < until, "FastMCP did not listen on {port}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let hub = McpHub::new(vec![McpServerSpec::http(
        "web",
        format!("http://127.0.0.1:{port}/mcp"),
    )])
    .unwrap();
    let tools = hub.tools().await;
    assert!(tools.failed.is_empty(), "{:?}", tools.failed);
    assert_eq!(
        call(
            &tool(&tools, "web.echo"),
            json!({"text": "over http"}),
            cx_for(&s, 30.0)
        )
        .await
        .unwrap(),
        json!("over http")
    );
    assert_eq!(
        call(
            &tool(&tools, "web.add"),
            json!({"a": 1, "b": 2}),
            cx_for(&s, 30.0)
        )
        .await
        .unwrap(),
        json!({"sum": 3})
    );
    let err = message(
        call(
            &tool(&tools, "web.fail"),
            json!({"message": "nope"}),
            cx_for(&s, 30.0),
        )
        .await,
    );
    assert!(err.contains("nope"), "{err}");
    let img = call(
        &tool(&tools, "web.image"),
        json!({"seed": "h"}),
        cx_for(&s, 30.0),
    )
    .await
    .unwrap();
    let mut want = PNG_MAGIC.to_vec();
    want.push(b'h');
    assert_eq!(
        std::fs::read(img[0]["path"].as_str().unwrap()).unwrap(),
        want
    );
    // Eight at once over one connection: well under the 8 s they would take
    // one after the other.
    let slow = tool(&tools, "web.slow");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let slow = Arc::clone(&slow);
        let cx = cx_for(&s, 30.0);
        tasks.push(tokio::spawn(async move {
            call(&slow, json!({"seconds": 1.0}), cx).await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    hub.shutdown().await;
    server.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_tools_env_images_and_structured_content() {
    let tmp = tempfile::tempdir().unwrap();
    let s = settings(tmp.path());
    let mut spec = node_server("everything", "server-everything", &["stdio"]);
    spec.env
        .insert("TOOLCELL_MCP_MARK".into(), "mark-4711".into());
    let hub = McpHub::new(vec![spec]).unwrap();
    let tools = hub.tools().await;
    assert!(tools.failed.is_empty(), "{:?}", tools.failed);
    let echo = tool(&tools, "everything.echo");
    let out = call(&echo, json!({"message": "hi"}), cx_for(&s, 30.0))
        .await
        .unwrap();
    assert!(out.as_str().unwrap().contains("hi"), "{out}");
    let sum = call(
        &tool(&tools, "everything.get-sum"),
        json!({"a": 2, "b": 3}),
        cx_for(&s, 30.0),
    )
    .await
    .unwrap();
    assert!(sum.as_str().unwrap().contains('5'), "{sum}");
    // env on top of the host's.
    let env = call(
        &tool(&tools, "everything.get-env"),
        json!({}),
        cx_for(&s, 30.0),
    )
    .await
    .unwrap();
    let env = env.to_string();
    assert!(env.contains("mark-4711") && env.contains("PATH"), "{env}");
    // A real PNG, saved.
    let img = call(
        &tool(&tools, "everything.get-tiny-image"),
        json!({}),
        cx_for(&s, 30.0),
    )
    .await
    .unwrap();
    let image = img
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "image")
        .unwrap_or_else(|| panic!("no image in {img}"));
    assert_eq!(image["mime"], "image/png");
    let bytes = std::fs::read(image["path"].as_str().unwrap()).unwrap();
    assert!(bytes.starts_with(PNG_MAGIC) && bytes.len() > 100);
    assert!(img.as_array().unwrap().iter().any(|i| i["type"] == "text"));
    // Structured content with an output schema.
    let t = tool(&tools, "everything.get-structured-content");
    assert_ne!(t.output_schema(), json!({}));
    let args = example_args(&t.args_schema());
    let out = call(&t, args, cx_for(&s, 30.0)).await.unwrap();
    assert!(out.is_object(), "{out}");
    // Bad arguments are caught on our side with the pointer.
    let err = t.validate(&json!({"location": 5})).unwrap_err();
    assert!(err.starts_with("/location"), "{err}");
    hub.shutdown().await;
}

/// Arguments that satisfy a simple schema: the first enum value or a string.
fn example_args(schema: &Value) -> Value {
    let mut args = serde_json::Map::new();
    for name in schema["required"].as_array().into_iter().flatten() {
        let name = name.as_str().unwrap();
        let prop = &schema["properties"][name];
        let v = match prop.get("enum").and_then(|e| e.get(0)) {
            Some(first) => first.clone(),
            None => json!("New York"),
        };
        args.insert(name.to_string(), v);
    }
    Value::Object(args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_filesystem_reads_lists_and_refuses_outside_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let s = settings(tmp.path());
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("notes.txt"), "first line\nsecond line\n").unwrap();
    let data = data.canonicalize().unwrap();
    let mut spec = node_server("fs", "server-filesystem", &[data.to_str().unwrap()]);
    spec.tools = vec!["read_text_file".into(), "list_directory".into()];
    let hub = McpHub::new(vec![spec]).unwrap();
    let tools = hub.tools().await;
    assert!(tools.failed.is_empty(), "{:?}", tools.failed);
    let mut names: Vec<&str> = tools.tools.iter().map(|t| t.name()).collect();
    names.sort_unstable();
    assert_eq!(names, ["fs.list_directory", "fs.read_text_file"]);
    let read = tool(&tools, "fs.read_text_file");
    let path = data.join("notes.txt").display().to_string();
    let out = call(&read, json!({"path": path}), cx_for(&s, 30.0))
        .await
        .unwrap();
    let text = out
        .as_str()
        .map(str::to_string)
        .or_else(|| {
            out.get("content")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_else(|| out.to_string());
    assert!(text.contains("second line"), "{out}");
    let listing = call(
        &tool(&tools, "fs.list_directory"),
        json!({"path": data.display().to_string()}),
        cx_for(&s, 30.0),
    )
    .await
    .unwrap();
    assert!(listing.to_string().contains("notes.txt"), "{listing}");
    let err = message(call(&read, json!({"path": "/etc/hostname"}), cx_for(&s, 30.0)).await);
    assert!(
        err.to_lowercase().contains("denied") || err.contains("outside"),
        "{err}"
    );
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_processes_survive_shutdown_or_drop() {
    // A server that leaves a child of its own running in its group.
    let wrapper = |name: &str| {
        let script = format!("sleep 1003 & exec '{}' '{}'", python(), fast_script());
        McpServerSpec::stdio(name, ["sh".to_string(), "-c".to_string(), script])
    };
    let hub = McpHub::new(vec![
        wrapper("wrapped"),
        node_server("everything", "server-everything", &["stdio"]),
    ])
    .unwrap();
    let tools = hub.tools().await;
    assert!(tools.failed.is_empty(), "{:?}", tools.failed);
    let groups = [
        hub.server_pid("wrapped").unwrap(),
        hub.server_pid("everything").unwrap(),
    ];
    for g in groups {
        assert!(!group_members(g).is_empty());
    }
    assert!(group_members(groups[0]).len() >= 2, "sleep and python");
    hub.shutdown().await;
    for g in groups {
        eventually_empty(g).await;
    }
    // After shutdown, calls fail and nothing starts again.
    let s = settings(Path::new("/tmp"));
    let err = message(
        call(
            &tool(&tools, "wrapped.echo"),
            json!({"text": "x"}),
            cx_for(&s, 5.0),
        )
        .await,
    );
    assert!(err.contains("shutting down"), "{err}");
    assert!(hub.server_pid("wrapped").is_none());

    // Dropping a hub without shutdown kills its process groups too.
    let hub = McpHub::new(vec![wrapper("dropped")]).unwrap();
    let tools = hub.tools().await;
    assert!(tools.failed.is_empty(), "{:?}", tools.failed);
    let group = hub.server_pid("dropped").unwrap();
    assert!(group_members(group).len() >= 2);
    drop(tools);
    drop(hub);
    eventually_empty(group).await;
}

// ---------------------------------------------------------------------------
// Hostile servers (tests/mcp/hostile_server.py, standard library only).
// ---------------------------------------------------------------------------

const HOST_SECRET: &str = "Zq8vKp2LmX9rTw4YhB6n";
const GH_TOKEN: &str = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8";

/// A hostile server named `name` saying `spec` (see the script).
fn hostile(dir: &Path, name: &str, spec: &Value) -> McpServerSpec {
    let file = dir.join(format!("{name}.json"));
    std::fs::write(&file, spec.to_string()).unwrap();
    let script = Path::new(
        &std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("tests/mcp/hostile_server.py");
    let mut spec = McpServerSpec::stdio(
        name,
        [
            python(),
            script.display().to_string(),
            file.display().to_string(),
        ],
    );
    spec.startup_timeout = Duration::from_secs(20);
    spec
}

#[track_caller]
fn assert_no_secret(what: &str, text: &str) {
    for secret in [HOST_SECRET, GH_TOKEN] {
        assert!(!text.contains(secret), "{what} shows {secret}:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_06_a_servers_tool_list_passes_the_redactor_before_any_stub() {
    let tmp = tempfile::tempdir().unwrap();
    let leaky = json!({"tools": [{
        "name": "lookup",
        "description": format!("Look up (signed with {HOST_SECRET}; token {GH_TOKEN})."),
        "inputSchema": {
            "type": "object",
            "properties": {
                "q": {"type": "string", "description": format!("Needs {GH_TOKEN}.")},
                "key": {"type": "string", "default": HOST_SECRET},
                "mode": {"type": "string", "enum": ["plain", HOST_SECRET]}
            },
            "required": ["q"]
        },
        "outputSchema": {"type": "object", "properties": {"k": {"type": "string", "default": GH_TOKEN}}}
    }, {
        "name": GH_TOKEN,
        "description": "A name that is a secret.",
        "inputSchema": {"type": "object"}
    }]});
    let redactor = toolcell_redact::Redactor::new([HOST_SECRET]).unwrap();
    let hub = McpHub::with_redactor(vec![hostile(tmp.path(), "leaky", &leaky)], redactor).unwrap();
    let tools = hub.tools().await;
    let names: Vec<&str> = tools.tools.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["leaky.lookup"], "{:?}", tools.failed);
    // The tool whose name is a secret is left out, its name masked in the
    // failure.
    let failures: String = tools.failed.iter().map(|f| f.message.clone()).collect();
    assert!(failures.contains("left out"), "{failures}");
    assert_no_secret("failures", &failures);
    let py = toolcell_stubs::python::stub_module(&tools.tools).unwrap();
    let r = toolcell_stubs::r::stub_module(&tools.tools, &[]).unwrap();
    let js = toolcell_stubs::js::stub_module(&tools.tools, &[]).unwrap();
    let def = toolcell_stubs::tool_definition(tools.tools[0].as_ref()).to_string();
    let desc = toolcell_stubs::execute_code_description(&tools.tools, &Default::default());
    for (what, text) in [
        ("Python", &py),
        ("R", &r),
        ("JavaScript", &js),
        ("definition", &def),
        ("description", &desc),
    ] {
        assert_no_secret(what, text);
        assert!(text.contains("«redacted:"), "{what}: {text}");
    }
    // Arguments are still checked against the schema as the server gave it,
    // and the default that held a secret is the server's to apply.
    let t = tool(&tools, "leaky.lookup");
    let s = settings(tmp.path());
    let out = call(&t, json!({"q": "x"}), cx_for(&s, 10.0)).await.unwrap();
    assert_eq!(out, json!("lookup {\"q\": \"x\"}"));
    assert!(t.validate(&json!({"q": "x", "mode": HOST_SECRET})).is_ok());
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_07_a_servers_stderr_is_redacted_before_it_is_kept_or_cut() {
    let tmp = tempfile::tempdir().unwrap();
    // The secret straddles the 400-byte cut of a stderr line.
    let noisy = json!({
        "stderr": format!(
            "{} {GH_TOKEN}\nkey \u{1b}[31m{HOST_SECRET}\u{1b}[0m\n",
            "x".repeat(390)
        ),
        "exit": 1
    });
    let redactor = toolcell_redact::Redactor::new([HOST_SECRET]).unwrap();
    let hub = McpHub::with_redactor(vec![hostile(tmp.path(), "noisy", &noisy)], redactor).unwrap();
    let tools = hub.tools().await;
    let failure = &tools.failed[0].message;
    assert!(failure.contains("key «redacted:secret»"), "{failure}");
    assert!(!failure.contains("ghp_A1b2"), "{failure}");
    assert_no_secret("the failure", failure);
    hub.shutdown().await;
}
