//! End-to-end kernel figures (issue 6 targets): a warm `x += 1` cell
//! through `Registry::execute` (≤ 40 µs median), tool calls inside a cell
//! (≤ 25 µs each), and spawn-to-first-result against the interpreter's own
//! `-u -c pass` start (≤ 1.25×), and the first cell of a new session when
//! the warm pool holds a kernel (≤ 2 ms, issue 9).
//!
//! `cargo bench -p toolcell-benches --bench kernel`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use toolcell_host::{ExecuteRequest, Registry, RegistryOptions};
use toolcell_kernel::Status;

struct Env {
    rt: tokio::runtime::Runtime,
    reg: Registry,
    _tmp: tempfile::TempDir,
}

fn env() -> Env {
    env_with(|_| {})
}

fn env_with(tweak: impl FnOnce(&mut RegistryOptions)) -> Env {
    let rt = toolcell_benches::runtime();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("f.txt"), "hello\n").unwrap();
    let opts = RegistryOptions {
        kernels_root: Some(tmp.path().join("kernels")),
        spill_dir: tmp.path().join("spill"),
        default_cwd: tmp.path().to_path_buf(),
        max_tool_calls: 1000,
        ..RegistryOptions::default()
    };
    let mut opts = opts;
    tweak(&mut opts);
    let reg = rt.block_on(async { Registry::new(opts) }).unwrap();
    Env { rt, reg, _tmp: tmp }
}

fn run(e: &Env, req: ExecuteRequest) {
    let r = e.rt.block_on(e.reg.execute(req));
    assert_eq!(r.status, Status::Success, "{}", r.output);
}

fn bench(c: &mut Criterion) {
    let e = env();
    run(
        &e,
        ExecuteRequest::new("x = 0\nfrom toolcell_tools import read_file"),
    );
    let mut g = c.benchmark_group("kernel");
    g.bench_function("warm_cell_x_plus_1", |b| {
        b.iter(|| run(&e, ExecuteRequest::new("x += 1")));
    });
    g.bench_function("cell_with_1_tool_call", |b| {
        b.iter(|| run(&e, ExecuteRequest::new("read_file('f.txt')")));
    });
    g.bench_function("cell_with_100_tool_calls", |b| {
        b.iter(|| {
            run(
                &e,
                ExecuteRequest::new("for _ in range(100):\n    read_file('f.txt')"),
            );
        });
    });
    g.sample_size(10);
    // New sessions (no kernel to kill first), in a registry with room for
    // all of them.
    let spawn_env = env_with(|o| o.max_kernels = 10_000);
    let mut n = 0u64;
    g.bench_function("spawn_to_first_result", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                n += 1;
                let t = Instant::now();
                run(&spawn_env, ExecuteRequest::new("1").owner(format!("s{n}")));
                total += t.elapsed();
            }
            spawn_env.rt.block_on(spawn_env.reg.shutdown_all());
            total
        });
    });
    // A new session served by the warm pool (issue 9: <= 2 ms median):
    // each timed cell is the first of a never-seen session; between cells
    // (untimed) the session is shut down and the pool refilled.
    let pool_env = env_with(|o| o.warm_pool = 1);
    let mut m = 0u64;
    g.bench_function("new_session_from_warm_pool", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                m += 1;
                let owner = format!("p{m}");
                toolcell_benches::wait_until("the warm pool never refilled", || {
                    pool_env.reg.pool_ready() > 0
                });
                let t = Instant::now();
                let r = pool_env.rt.block_on(
                    pool_env
                        .reg
                        .execute(ExecuteRequest::new("1").owner(owner.clone())),
                );
                total += t.elapsed();
                assert_eq!(r.status, Status::Success, "{}", r.output);
                assert!(!r.kernel.reused);
                pool_env.rt.block_on(pool_env.reg.shutdown(&owner));
            }
            total
        });
    });
    // The baseline: the same interpreter starting with the same flags.
    let python = e.reg.sessions()[0].interpreter.clone();
    g.bench_function("python_u_c_pass", |b| {
        b.iter(|| {
            let s = std::process::Command::new(&python)
                .args(["-u", "-c", "pass"])
                .status()
                .unwrap();
            assert!(s.success());
        });
    });
    g.finish();
}

criterion_group!(benches, bench);

/// `TOOLCELL_BENCH_CELLS=N`: run N warm `x += 1` cells (after one that
/// starts the kernel) and exit, for `perf stat`. The CPU of one cell is the
/// difference of two such runs (N = 3200 and N = 200) divided by 3000, so
/// the start and the exit cancel out:
///
/// ```sh
/// B=$(ls -t target/release/deps/kernel-* | grep -v '\.d$' | head -1)
/// for n in 200 3200; do TOOLCELL_BENCH_CELLS=$n perf stat -e task-clock,context-switches $B --bench; done
/// ```
///
/// `TOOLCELL_BENCH_CODE` replaces `x += 1` (the tool-call figure in
/// BENCHMARKS.md uses `for _ in range(100): read_file('f.txt')`).
fn cells_only() -> bool {
    let Some(n) = std::env::var("TOOLCELL_BENCH_CELLS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    else {
        return false;
    };
    // `TOOLCELL_BENCH_CODE`: another cell to repeat, e.g. one that makes
    // 100 tool calls, for the CPU of a tool call.
    let code = std::env::var("TOOLCELL_BENCH_CODE").unwrap_or_else(|_| "x += 1".into());
    let e = env();
    run(
        &e,
        ExecuteRequest::new("x = 0\nfrom toolcell_tools import read_file"),
    );
    let t = Instant::now();
    for _ in 0..n {
        run(&e, ExecuteRequest::new(code.as_str()));
    }
    let per = t.elapsed() / u32::try_from(n.max(1)).unwrap_or(u32::MAX);
    eprintln!("{n} warm cells: {per:?} per cell (wall)");
    e.rt.block_on(e.reg.shutdown_all());
    true
}

fn main() {
    if cells_only() {
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
