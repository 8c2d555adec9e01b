//! What `[limits]` and `[execution] confine` cost (issue 10): a warm
//! `x += 1` cell with and without `cpu_seconds` (the host re-arms
//! `RLIMIT_CPU` with `prlimit` before every cell: one `/proc/<pid>/stat` read
//! and two system calls), and spawn-to-first-result of a strict-mode kernel
//! plain, under every limit, and Landlock-confined (the ruleset is built in
//! the host before each fork).
//!
//! `cargo bench -p toolcell-benches --bench limits`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use toolcell_host::config::Mode;
use toolcell_host::{ExecuteRequest, Registry, RegistryOptions};
use toolcell_kernel::Status;
use toolcell_kernel::limits::Limits;

struct Env {
    rt: tokio::runtime::Runtime,
    reg: Registry,
    _tmp: tempfile::TempDir,
}

fn env_with(tweak: impl FnOnce(&mut RegistryOptions)) -> Env {
    let rt = toolcell_benches::runtime();
    let tmp = tempfile::tempdir().unwrap();
    let mut opts = RegistryOptions {
        kernels_root: Some(tmp.path().join("kernels")),
        spill_dir: tmp.path().join("spill"),
        default_cwd: tmp.path().to_path_buf(),
        max_kernels: 10_000,
        ..RegistryOptions::default()
    };
    tweak(&mut opts);
    let reg = rt.block_on(async { Registry::new(opts) }).unwrap();
    Env { rt, reg, _tmp: tmp }
}

fn run(e: &Env, req: ExecuteRequest) {
    let r = e.rt.block_on(e.reg.execute(req));
    assert_eq!(r.status, Status::Success, "{}\n{:?}", r.output, r.error);
}

fn every_limit() -> Limits {
    Limits {
        memory: Some(2 << 30),
        cpu_seconds: Some(60),
        open_files: Some(1024),
        processes: Some(65_536),
        file_size: Some(1 << 30),
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("limits");
    for (name, limits) in [
        ("warm_cell_no_limits", Limits::default()),
        ("warm_cell_cpu_seconds", every_limit()),
    ] {
        let e = env_with(|o| o.limits = limits);
        run(&e, ExecuteRequest::new("x = 0"));
        g.bench_function(name, |b| {
            b.iter(|| run(&e, ExecuteRequest::new("x += 1")));
        });
    }
    g.sample_size(10);
    let cases: [(&str, Limits, bool); 3] = [
        ("spawn_strict_plain", Limits::default(), false),
        ("spawn_strict_every_limit", every_limit(), false),
        ("spawn_strict_confined", Limits::default(), true),
    ];
    for (name, limits, confine) in cases {
        let e = env_with(|o| {
            o.mode = Mode::Strict;
            o.limits = limits;
            o.confine = confine;
        });
        let mut n = 0u64;
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    n += 1;
                    let t = Instant::now();
                    run(&e, ExecuteRequest::new("1").owner(format!("s{n}")));
                    total += t.elapsed();
                }
                e.rt.block_on(e.reg.shutdown_all());
                total
            });
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
