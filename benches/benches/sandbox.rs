//! What the sandbox costs (issue 35), side by side in one run: the first
//! cell of a new session sandboxed and unsandboxed against the
//! interpreter's own `-u -c pass` (target: sandboxed ≤ 1.15× unsandboxed),
//! the first cell from the warm pool sandboxed (≤ 2 ms), and a warm cell
//! and a tool call inside a sandbox and outside (equal within noise;
//! medians and p99 printed as `... summary:` lines after criterion's).
//!
//! `cargo bench -p toolcell-benches --bench sandbox`
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    clippy::print_stdout
)]

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use toolcell_host::{ExecuteRequest, Registry, RegistryOptions};
use toolcell_kernel::Status;
use toolcell_kernel::sandbox::{Policy, SandboxInfo};

struct Env {
    rt: tokio::runtime::Runtime,
    reg: Registry,
    sandboxed: bool,
    _tmp: tempfile::TempDir,
}

impl Env {
    fn new(sandboxed: bool, tweak: impl FnOnce(&mut RegistryOptions)) -> Self {
        let rt = toolcell_benches::runtime();
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("f.txt"), "hello\n").unwrap();
        let mut opts = RegistryOptions {
            kernels_root: Some(tmp.path().join("kernels")),
            spill_dir: tmp.path().join("spill"),
            default_cwd: tmp.path().to_path_buf(),
            max_tool_calls: 1000,
            max_kernels: 10_000,
            ..RegistryOptions::default()
        };
        if !sandboxed {
            opts.sandbox = Policy::off();
        }
        tweak(&mut opts);
        let reg = rt.block_on(async { Registry::new(opts) }).unwrap();
        Env {
            rt,
            reg,
            sandboxed,
            _tmp: tmp,
        }
    }

    fn run(&self, req: ExecuteRequest) {
        let r = self.rt.block_on(self.reg.execute(req));
        assert_eq!(r.status, Status::Success, "{}", r.output);
        // What is measured is what it says it is.
        let sandboxed = matches!(r.kernel.sandbox, Some(SandboxInfo::Namespaces { .. }));
        assert_eq!(sandboxed, self.sandboxed, "{:?}", r.kernel.sandbox);
    }

    /// Times the first cell of a never-seen session, then shuts it down
    /// (untimed).
    fn first_cell(&self, owner: &str) -> Duration {
        let t = Instant::now();
        self.run(ExecuteRequest::new("1").owner(owner));
        let took = t.elapsed();
        self.rt.block_on(self.reg.shutdown(owner));
        took
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

/// Times `n` runs of `code` in `e`'s warm session; prints median and p99.
fn warm_summary(name: &str, e: &Env, code: &str, n: usize, per: f64) {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        e.run(ExecuteRequest::new(code));
        samples.push(t.elapsed());
    }
    samples.sort();
    println!(
        "{name} summary: {n} runs: median {:.1} µs, p99 {:.1} µs",
        percentile(&samples, 0.5) / per,
        percentile(&samples, 0.99) / per
    );
}

fn bench(c: &mut Criterion) {
    let inside = Env::new(true, |_| {});
    let outside = Env::new(false, |_| {});
    for e in [&inside, &outside] {
        e.run(ExecuteRequest::new(
            "x = 0\nfrom toolcell_tools import read_file",
        ));
    }
    let mut g = c.benchmark_group("sandbox");
    for (name, e) in [("inside", &inside), ("outside", &outside)] {
        g.bench_function(format!("warm_cell_x_plus_1_{name}"), |b| {
            b.iter(|| e.run(ExecuteRequest::new("x += 1")));
        });
        g.bench_function(format!("cell_with_100_tool_calls_{name}"), |b| {
            b.iter(|| {
                e.run(ExecuteRequest::new(
                    "for _ in range(100):\n    read_file('f.txt')",
                ))
            });
        });
    }
    g.sample_size(20);
    let python = inside.reg.sessions()[0].interpreter.clone();
    // A new session served by a sandboxed warm pool.
    let pool = Env::new(true, |o| o.warm_pool = 1);
    let mut m = 0u64;
    g.bench_function("first_cell_from_warm_pool_sandboxed", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                m += 1;
                let owner = format!("p{m}");
                toolcell_benches::wait_until("the warm pool never refilled", || {
                    pool.reg.pool_ready() > 0
                });
                let t = Instant::now();
                pool.run(ExecuteRequest::new("1").owner(owner.clone()));
                total += t.elapsed();
                pool.rt.block_on(pool.reg.shutdown(&owner));
            }
            total
        });
    });
    g.finish();
    // First cells of new sessions, sandboxed, unsandboxed and the bare
    // interpreter, one after the other in each round so drift and load
    // hit all three alike.
    let rounds = 40;
    let mut times: [Vec<Duration>; 3] = Default::default();
    for i in 0..rounds {
        times[0].push(inside.first_cell(&format!("s{i}")));
        times[1].push(outside.first_cell(&format!("u{i}")));
        let t = Instant::now();
        let s = std::process::Command::new(&python)
            .args(["-u", "-c", "pass"])
            .status()
            .unwrap();
        assert!(s.success());
        times[2].push(t.elapsed());
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        percentile(v, 0.5) / 1e3
    };
    let [s, u, p] = times.each_mut().map(median);
    println!(
        "first_cell_new_session summary: {rounds} rounds: sandboxed {s:.1} ms, unsandboxed {u:.1} ms, \
         python -u -c pass {p:.1} ms; sandboxed / unsandboxed {:.3}, sandboxed / python {:.3}, \
         unsandboxed / python {:.3}",
        s / u,
        s / p,
        u / p
    );
    // The first cell from a warm pool, sandboxed and not, alternating.
    let pool_out = Env::new(false, |o| o.warm_pool = 1);
    let mut pooled: [Vec<Duration>; 2] = Default::default();
    for i in 0..rounds {
        for (k, e) in [&pool, &pool_out].into_iter().enumerate() {
            // Both pools full and quiet: neither's refill runs beside the
            // other's timed cell.
            toolcell_benches::wait_until("the warm pools never refilled", || {
                pool.reg.pool_ready() > 0 && pool_out.reg.pool_ready() > 0
            });
            std::thread::sleep(Duration::from_millis(20));
            pooled[k].push(e.first_cell(&format!("q{i}")));
        }
    }
    let [s, u] = pooled.each_mut().map(median);
    println!(
        "first_cell_from_warm_pool summary: {rounds} rounds: sandboxed {s:.2} ms, unsandboxed {u:.2} ms"
    );
    // Medians and p99, alternating inside and outside so drift hits both.
    for _ in 0..2 {
        warm_summary("warm_cell_inside", &inside, "x += 1", 2000, 1.0);
        warm_summary("warm_cell_outside", &outside, "x += 1", 2000, 1.0);
        let calls = "for _ in range(100):\n    read_file('f.txt')";
        warm_summary("tool_call_inside (per call)", &inside, calls, 200, 100.0);
        warm_summary("tool_call_outside (per call)", &outside, calls, 200, 100.0);
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
