//! One MCP tool call over stdio through toolcell's MCP client
//! (`toolcell_tools::mcp`: the hub, the `SchemaTool` with its argument
//! check, rmcp's client, the stdout guard, the result mapping) against two
//! echo servers: a minimal Rust rmcp server (`mcp_echo_server`, this crate's
//! binary) and the FastMCP server of the tools tests (Python `mcp` SDK, from
//! `scripts/test-deps.sh`).
//!
//! The server's own time is measured with a bare client: JSON lines written
//! to the server's stdin and read from its stdout by one blocking thread, no
//! MCP library. The summary prints both medians and their difference — what
//! the client side adds per call (target: ≤ 250 µs).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolcell_tools::mcp::{McpHub, McpServerSpec};
use toolcell_tools::{DynTool, ToolContext, ToolSettings};

fn deps() -> PathBuf {
    let dir = std::env::var_os("TOOLCELL_TEST_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/toolcell-ci/deps")
        });
    assert!(
        dir.join("venv/bin/python").exists(),
        "the Python MCP SDK is missing under {}: run scripts/test-deps.sh",
        dir.display()
    );
    dir
}

fn servers() -> Vec<(&'static str, Vec<String>)> {
    let fast = Path::new(
        &std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../crates/tools/tests/mcp/fast_server.py")
    .display()
    .to_string();
    vec![
        (
            "rust_rmcp_echo",
            vec![env!("CARGO_BIN_EXE_mcp_echo_server").to_string()],
        ),
        (
            "fastmcp_echo",
            vec![deps().join("venv/bin/python").display().to_string(), fast],
        ),
    ]
}

/// The bare client: JSON lines over the server's stdio.
struct Bare {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    line: String,
    id: u64,
}

impl Bare {
    fn spawn(command: &[String]) -> Self {
        let mut child = Command::new(&command[0])
            .args(&command[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut me = Self {
            child,
            stdin,
            stdout,
            line: String::new(),
            id: 0,
        };
        me.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "0"}}),
        );
        writeln!(
            me.stdin,
            "{}",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )
        .unwrap();
        me
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.id += 1;
        let id = self.id;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{msg}").unwrap();
        self.stdin.flush().unwrap();
        loop {
            self.line.clear();
            assert!(self.stdout.read_line(&mut self.line).unwrap() > 0, "EOF");
            let v: Value = serde_json::from_str(&self.line).unwrap();
            if v["id"] == json!(id) {
                return v;
            }
        }
    }

    fn call(&mut self) {
        let r = self.request(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "hello"}}),
        );
        debug_assert_eq!(r["result"]["content"][0]["text"], "hello");
    }
}

impl Drop for Bare {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Hub {
    hub: Arc<McpHub>,
    tool: Arc<dyn DynTool>,
    settings: Arc<ToolSettings>,
}

impl Hub {
    fn start(rt: &tokio::runtime::Runtime, name: &str, command: &[String]) -> Self {
        let hub = McpHub::new(vec![McpServerSpec::stdio(name, command.to_vec())]).unwrap();
        let tools = rt.block_on(hub.tools());
        assert!(tools.failed.is_empty(), "{:?}", tools.failed);
        let tool = tools
            .tools
            .iter()
            .find(|t| t.name() == format!("{name}.echo"))
            .cloned()
            .unwrap();
        let settings = Arc::new(ToolSettings::new(std::env::temp_dir()));
        Self {
            hub,
            tool,
            settings,
        }
    }

    async fn call(&self) {
        let cx = ToolContext::new(
            Arc::clone(&self.settings),
            tokio::time::Instant::now() + Duration::from_secs(60),
            CancellationToken::new(),
        );
        let out = self.tool.call(json!({"text": "hello"}), cx).await.unwrap();
        debug_assert_eq!(out, json!("hello"));
    }
}

fn median_us(mut ns: Vec<u64>) -> f64 {
    ns.sort_unstable();
    ns[ns.len() / 2] as f64 / 1e3
}

fn mcp_call(c: &mut Criterion) {
    let rt = toolcell_benches::runtime();
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test");
    let mut group = c.benchmark_group("mcp_call");
    let mut summary = Vec::new();
    for (name, command) in servers() {
        let mut bare = Bare::spawn(&command);
        let hub = Hub::start(&rt, "bench", &command);
        for _ in 0..200 {
            bare.call();
            rt.block_on(hub.call());
        }
        group.bench_function(format!("{name}/bare_json_lines"), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    bare.call();
                }
                start.elapsed()
            });
        });
        group.bench_function(format!("{name}/mcp_hub"), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        hub.call().await;
                    }
                    start.elapsed()
                })
            });
        });
        // Single-call medians, interleaved so drift hits both alike.
        let n = if full { 5000 } else { 200 };
        let (mut b_ns, mut h_ns) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for _ in 0..n {
            let t = Instant::now();
            bare.call();
            b_ns.push(u64::try_from(t.elapsed().as_nanos()).unwrap());
            let t = Instant::now();
            rt.block_on(hub.call());
            h_ns.push(u64::try_from(t.elapsed().as_nanos()).unwrap());
        }
        let (b, h) = (median_us(b_ns), median_us(h_ns));
        summary.push(format!(
            "mcp_call summary: {name}, {n} calls: bare JSON lines median {b:.1} µs, through \
             McpHub median {h:.1} µs, client side adds {:.1} µs",
            h - b
        ));
        rt.block_on(hub.hub.shutdown());
    }
    group.finish();
    summary.push(code_mode(&rt));
    for line in summary {
        println!("{line}");
    }
}

/// The same 100 calls of the Rust echo server's `echo`, made the way an MCP
/// client's model loop makes them (one call at a time, each result handed
/// to the model) and as one cell that loops over them and prints a line:
/// the time (model time excluded) and the bytes that would reach the model.
fn code_mode(rt: &tokio::runtime::Runtime) -> String {
    use toolcell_host::registry::McpSource;
    use toolcell_host::{ExecuteRequest, Registry, RegistryOptions};
    use toolcell_kernel::Status;
    let command = vec![env!("CARGO_BIN_EXE_mcp_echo_server").to_string()];
    // One by one: each call is a tool-use block the model writes and a
    // result block it reads.
    let hub = Hub::start(rt, "bench", &command);
    let t = Instant::now();
    let mut direct_bytes = 0usize;
    for i in 0..100 {
        let args = json!({"text": format!("order {i}")});
        let call = json!({"name": "bench.echo", "arguments": args});
        let cx = ToolContext::new(
            Arc::clone(&hub.settings),
            tokio::time::Instant::now() + Duration::from_secs(60),
            CancellationToken::new(),
        );
        let out = rt.block_on(hub.tool.call(args, cx)).unwrap();
        let result = json!({"content": [{"type": "text", "text": out}], "isError": false});
        direct_bytes += call.to_string().len() + result.to_string().len();
    }
    let direct = t.elapsed();
    rt.block_on(hub.hub.shutdown());

    let tmp = tempfile::tempdir().unwrap();
    let opts = RegistryOptions {
        kernels_root: Some(tmp.path().join("kernels")),
        spill_dir: tmp.path().join("spill"),
        default_cwd: tmp.path().to_path_buf(),
        max_tool_calls: 1000,
        ..RegistryOptions::default()
    };
    let reg = rt.block_on(async { Registry::new(opts) }).unwrap();
    reg.add_tool_source(Arc::new(
        McpSource::new(vec![McpServerSpec::stdio("bench", command)]).unwrap(),
    ));
    let code = "found = [bench.echo(text=f'order {i}') for i in range(100)]\nprint(len(found), 'echoed; last:', found[-1])";
    let r = rt.block_on(reg.execute(ExecuteRequest::new("pass")));
    assert_eq!(r.status, Status::Success, "{}", r.output);
    let t = Instant::now();
    let r = rt.block_on(reg.execute(ExecuteRequest::new(code)));
    let cell = t.elapsed();
    assert_eq!(r.status, Status::Success, "{}", r.output);
    let cell_bytes = code.len() + r.output.len();
    rt.block_on(reg.shutdown_all());
    format!(
        "mcp_call code mode: 100 echo calls one by one (an MCP client's loop, model time excluded): \
         {:.1} ms, {direct_bytes} bytes to and from the model; as one cell: {:.1} ms, {cell_bytes} \
         bytes ({:.0}x fewer)",
        direct.as_secs_f64() * 1e3,
        cell.as_secs_f64() * 1e3,
        direct_bytes as f64 / cell_bytes as f64
    )
}

criterion_group!(benches, mcp_call);
criterion_main!(benches);
