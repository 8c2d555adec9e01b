//! The binary end to end (issue 7 targets): a warm `x += 1` cell through
//! `toolcell serve` measured from a client process (≤ 80 µs median), and
//! `toolcell exec --session` as a whole command, process start and daemon
//! round trip included (≤ 5 ms median).
//!
//! The bench runs the `toolcell` binary of the same profile
//! (`target/<profile>/toolcell`), building it with cargo if it is missing.
//! After criterion, a summary with median and p99 of single round trips is
//! printed for BENCHMARKS.md.
//!
//! `cargo bench -p toolcell-benches --bench cli`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};

struct Isolated {
    dir: tempfile::TempDir,
}

impl Isolated {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        for d in ["run", "cache", "config", "data"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        Self { dir }
    }

    fn command(&self, bin: &Path) -> Command {
        let mut c = Command::new(bin);
        let p = self.dir.path();
        c.current_dir(p)
            .env("XDG_RUNTIME_DIR", p.join("run"))
            .env("XDG_CACHE_HOME", p.join("cache"))
            .env("XDG_CONFIG_HOME", p.join("config"))
            .env("XDG_DATA_HOME", p.join("data"));
        c
    }
}

struct Serve {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Serve {
    fn start(iso: &Isolated, bin: &Path) -> Self {
        let mut child = iso
            .command(bin)
            .arg("serve")
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
        }
    }

    fn execute(&mut self, code: &str) -> String {
        let id = self.next;
        self.next += 1;
        let line = serde_json::json!({
            "jsonrpc": "2.0", "id": id, "method": "execute", "params": {"code": code}
        });
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        let mut reply = String::new();
        self.stdout.read_line(&mut reply).unwrap();
        assert!(reply.contains("\"status\":\"success\""), "{reply}");
        reply
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

fn summary(name: &str, mut samples: Vec<Duration>, unit_ms: bool) {
    samples.sort();
    let (m, p99) = (percentile(&samples, 0.5), percentile(&samples, 0.99));
    if unit_ms {
        println!(
            "{name} summary: {} runs: median {:.2} ms, p99 {:.2} ms",
            samples.len(),
            m / 1e3,
            p99 / 1e3
        );
    } else {
        println!(
            "{name} summary: {} runs: median {m:.1} µs, p99 {p99:.1} µs",
            samples.len()
        );
    }
}

fn bench(c: &mut Criterion) {
    let bin = toolcell_benches::toolcell_binary();
    let iso = Isolated::new();
    let mut g = c.benchmark_group("cli");

    let mut serve = Serve::start(&iso, &bin);
    serve.execute("x = 0");
    g.bench_function("serve_warm_cell_x_plus_1", |b| {
        b.iter(|| serve.execute("x += 1"));
    });
    let n = if std::env::args().any(|a| a == "--bench") {
        2000
    } else {
        20
    };
    let samples: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            serve.execute("x += 1");
            t.elapsed()
        })
        .collect();
    summary("serve_warm_cell_x_plus_1", samples, false);
    drop(serve);

    let exec = |code: &str| {
        let out = iso
            .command(&bin)
            .args(["exec", "--session", "bench", code])
            .stderr(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success());
    };
    exec("x = 0"); // starts the daemon and the session's kernel
    g.sample_size(20);
    g.bench_function("exec_session_end_to_end", |b| {
        b.iter(|| exec("x += 1"));
    });
    let n = if std::env::args().any(|a| a == "--bench") {
        200
    } else {
        5
    };
    let samples: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            exec("x += 1");
            t.elapsed()
        })
        .collect();
    summary("exec_session_end_to_end", samples, true);
    let _ = iso.command(&bin).args(["daemon", "stop"]).output();
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
