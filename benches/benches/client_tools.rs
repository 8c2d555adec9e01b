//! Client tools through `toolcell serve` (issue 16): a cell calling a tool
//! the client registered, with a client (this process) that answers each
//! `tool/call` at once, against the same cell calling the built-in
//! `read_file` on a one-line file. Per-call figures are a 100-call cell's
//! time ÷ 100. Target: a client-tool call ≤ 120 µs on top of a built-in
//! call; 100 calls from 8 threads in one cell < 100 × the single-call
//! time ÷ 3.
//!
//! `cargo bench -p toolcell-benches --bench client_tools`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

struct Serve {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
    _dir: tempfile::TempDir,
}

impl Serve {
    fn start(bin: &Path) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        for d in ["run", "cache", "config", "data"] {
            std::fs::create_dir_all(p.join(d)).unwrap();
        }
        std::fs::write(
            p.join("toolcell.toml"),
            "[execution]\nmax_tool_calls = 1000\n[journal]\nenabled = false\n",
        )
        .unwrap();
        std::fs::write(p.join("one.txt"), "one line\n").unwrap();
        let mut child = Command::new(bin)
            .arg("serve")
            .current_dir(p)
            .env("XDG_RUNTIME_DIR", p.join("run"))
            .env("XDG_CACHE_HOME", p.join("cache"))
            .env("XDG_CONFIG_HOME", p.join("config"))
            .env("XDG_DATA_HOME", p.join("data"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Self {
            child,
            stdin,
            stdout,
            next: 1,
            _dir: dir,
        }
    }

    fn send(&mut self, v: &Value) {
        writeln!(self.stdin, "{v}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Sends a request and answers `tool/call`s until its response.
    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let mut line = String::new();
        loop {
            line.clear();
            self.stdout.read_line(&mut line).unwrap();
            let msg: Value = serde_json::from_str(&line).unwrap();
            if msg["method"] == "tool/call" {
                let reply = json!({"jsonrpc": "2.0", "id": msg["id"], "result": msg["params"]["arguments"]});
                self.send(&reply);
            } else if msg["id"] == json!(id) {
                return msg;
            }
        }
    }

    fn cell(&mut self, code: &str) -> Duration {
        let t = Instant::now();
        let r = self.call("execute", json!({"code": code}));
        let d = t.elapsed();
        assert_eq!(r["result"]["status"], "success", "{r}");
        d
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const BUILTIN: &str = "for _ in range(100):\n    read_file('one.txt', limit=1)";
const CLIENT: &str = "for _ in range(100):\n    echo(x=1)";
const THREADS: &str = "from concurrent.futures import ThreadPoolExecutor\nwith ThreadPoolExecutor(8) as ex:\n    list(ex.map(lambda i: echo(x=i), range(100)))";

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e6
}

fn bench(c: &mut Criterion) {
    let bin = toolcell_benches::toolcell_binary();
    let mut serve = Serve::start(&bin);
    let r = serve.call(
        "tools/register",
        json!({"tools": [{"name": "echo", "input_schema": {"type": "object", "properties": {"x": {"type": "integer"}}}}]}),
    );
    assert!(r.get("result").is_some(), "{r}");
    serve.cell("pass");
    let mut g = c.benchmark_group("client_tools");
    g.sample_size(20);
    g.bench_function("builtin_read_file_100_calls", |b| {
        b.iter(|| serve.cell(BUILTIN))
    });
    g.bench_function("client_tool_100_calls", |b| b.iter(|| serve.cell(CLIENT)));
    g.bench_function("client_tool_100_calls_8_threads", |b| {
        b.iter(|| serve.cell(THREADS))
    });
    g.finish();
    let runs = 30;
    let builtin = median((0..runs).map(|_| serve.cell(BUILTIN)).collect()) / 100.0;
    let client = median((0..runs).map(|_| serve.cell(CLIENT)).collect()) / 100.0;
    let threads = median((0..runs).map(|_| serve.cell(THREADS)).collect());
    println!(
        "client_tools summary: per call: built-in read_file {builtin:.1} µs, client tool {client:.1} µs, \
         client tool on top of built-in {:.1} µs; 100 calls from 8 threads: {:.2} ms \
         (100 × single ÷ 3 = {:.2} ms)",
        client - builtin,
        threads / 1e3,
        client * 100.0 / 3.0 / 1e3
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
