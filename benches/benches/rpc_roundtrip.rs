//! Round trip of a trivial tool call (`echo {}`) through the RPC server over
//! its Unix socket: from the Python reference client in a separate process
//! (what a cell pays per tool call) and from a blocking Rust client.
//!
//! Criterion times batches with `iter_custom`; after it, a summary with the
//! median and p99 of single calls is printed for BENCHMARKS.md.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use toolcell_rpc::testing::EchoDispatch;
use toolcell_rpc::{CellHandle, CellSpec, Server, ServerConfig};

struct Fixture {
    server: Server,
    cell: Option<CellHandle>,
    _dir: tempfile::TempDir,
    rt: ServerRuntime,
}

/// The server's runtime: tokio's default multi-thread one, or with
/// `TOOLCELL_RPC_BENCH_RUNTIME=current_thread` a current-thread runtime
/// driven by one dedicated thread.
enum ServerRuntime {
    Multi(tokio::runtime::Runtime),
    Current {
        handle: tokio::runtime::Handle,
        stop: Option<tokio::sync::oneshot::Sender<()>>,
        driver: Option<std::thread::JoinHandle<()>>,
    },
}

impl ServerRuntime {
    fn new() -> Self {
        if std::env::var("TOOLCELL_RPC_BENCH_RUNTIME").as_deref() == Ok("current_thread") {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let handle = rt.handle().clone();
            let (stop, wait) = tokio::sync::oneshot::channel::<()>();
            let driver = std::thread::spawn(move || {
                let _ = rt.block_on(wait);
            });
            Self::Current {
                handle,
                stop: Some(stop),
                driver: Some(driver),
            }
        } else {
            Self::Multi(
                tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()
                    .unwrap(),
            )
        }
    }

    fn handle(&self) -> tokio::runtime::Handle {
        match self {
            Self::Multi(rt) => rt.handle().clone(),
            Self::Current { handle, .. } => handle.clone(),
        }
    }
}

impl Drop for ServerRuntime {
    fn drop(&mut self) {
        if let Self::Current { stop, driver, .. } = self {
            drop(stop.take());
            if let Some(d) = driver.take() {
                let _ = d.join();
            }
        }
    }
}

impl Fixture {
    fn new() -> Self {
        let rt = ServerRuntime::new();
        let dir = tempfile::tempdir().unwrap();
        let server = {
            let handle = rt.handle();
            let _g = handle.enter();
            Server::bind_unix(
                dir.path().join("k"),
                Arc::new(EchoDispatch::new()),
                ServerConfig::default(),
            )
            .unwrap()
        };
        let mut f = Self {
            server,
            cell: None,
            _dir: dir,
            rt,
        };
        f.fresh_cell();
        f
    }

    /// A new cell per measured batch keeps the per-cell call log short.
    fn fresh_cell(&mut self) {
        if let Some(c) = self.cell.take() {
            c.settle();
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3600);
        self.cell = Some(
            self.server
                .open_cell(
                    CellSpec::new("bench", deadline)
                        .budget(u32::MAX)
                        .enable(["echo"]),
                )
                .unwrap(),
        );
    }
}

struct Python {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Python {
    fn spawn(server: &Server) -> Self {
        let driver = Path::new(
            &std::env::var("CARGO_MANIFEST_DIR")
                .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
        )
        .join("../crates/rpc/tests/python/driver.py");
        let mut child = Command::new("python3")
            .arg(driver)
            .env("TOOLCELL_RPC", server.endpoint())
            .env("TOOLCELL_RPC_TOKEN", server.token().expose())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Self {
            child,
            stdin,
            stdout,
        }
    }

    /// Runs `n` calls in the Python process; its own timing.
    fn bench(&mut self, n: u64) -> Value {
        writeln!(self.stdin, "{}", json!({"op": "bench", "n": n})).unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap()
    }
}

impl Drop for Python {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "{{\"op\":\"exit\"}}");
        let _ = self.child.wait();
    }
}

struct RustClient {
    stream: UnixStream,
    reader: BufReader<UnixStream>,
    request: Vec<u8>,
    line: Vec<u8>,
}

impl RustClient {
    fn connect(server: &Server) -> Self {
        let path = server.endpoint().strip_prefix("unix:").unwrap();
        let stream = UnixStream::connect(path).unwrap();
        let reader = BufReader::new(stream.try_clone().unwrap());
        let mut request = serde_json::to_vec(
            &json!({"tool": "echo", "args": {}, "token": server.token().expose()}),
        )
        .unwrap();
        request.push(b'\n');
        Self {
            stream,
            reader,
            request,
            line: Vec::with_capacity(256),
        }
    }

    fn call(&mut self) {
        self.stream.write_all(&self.request).unwrap();
        self.line.clear();
        self.reader.read_until(b'\n', &mut self.line).unwrap();
        debug_assert!(self.line.starts_with(b"{\"ok\":true"));
    }
}

fn percentiles(mut ns: Vec<u64>) -> (u64, u64) {
    ns.sort_unstable();
    (
        ns[ns.len() / 2],
        ns[(ns.len() * 99 / 100).min(ns.len() - 1)],
    )
}

fn rpc_roundtrip(c: &mut Criterion) {
    let mut fx = Fixture::new();
    let mut group = c.benchmark_group("rpc_roundtrip");

    let mut py = Python::spawn(&fx.server);
    py.bench(2000); // warm up the interpreter and the connection
    group.bench_function("python_client_unix", |b| {
        b.iter_custom(|iters| {
            fx.fresh_cell();
            let r = py.bench(iters);
            Duration::from_nanos(r["total_ns"].as_u64().unwrap())
        });
    });

    let mut rust = RustClient::connect(&fx.server);
    group.bench_function("rust_client_unix", |b| {
        b.iter_custom(|iters| {
            fx.fresh_cell();
            let start = Instant::now();
            for _ in 0..iters {
                rust.call();
            }
            start.elapsed()
        });
    });
    group.finish();

    // Single-call distribution for BENCHMARKS.md.
    let rt_label = match fx.rt {
        ServerRuntime::Multi(_) => "multi-thread runtime",
        ServerRuntime::Current { .. } => "current-thread runtime",
    };
    // Full size under `cargo bench`; tiny when run once as a test.
    let args: Vec<String> = std::env::args().collect();
    let n: u32 = if args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test") {
        50_000
    } else {
        500
    };
    fx.fresh_cell();
    let r = py.bench(u64::from(n));
    println!(
        "rpc_roundtrip summary ({rt_label}): python client, unix socket, {} calls: median {:.1} µs, p99 {:.1} µs, mean {:.1} µs",
        r["n"],
        r["median_ns"].as_f64().unwrap() / 1e3,
        r["p99_ns"].as_f64().unwrap() / 1e3,
        r["total_ns"].as_f64().unwrap() / r["n"].as_f64().unwrap() / 1e3,
    );
    fx.fresh_cell();
    let mut lat = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let t = Instant::now();
        rust.call();
        lat.push(u64::try_from(t.elapsed().as_nanos()).unwrap());
    }
    let mean = lat.iter().sum::<u64>() as f64 / lat.len() as f64;
    let (median, p99) = percentiles(lat);
    println!(
        "rpc_roundtrip summary ({rt_label}): rust client, unix socket, {n} calls: median {:.1} µs, p99 {:.1} µs, mean {:.1} µs",
        median as f64 / 1e3,
        p99 as f64 / 1e3,
        mean / 1e3,
    );
}

criterion_group!(benches, rpc_roundtrip);
criterion_main!(benches);
