//! Remotes with a lifecycle on real engines (issue 29): per engine, the
//! first cell of a session on a fresh allocation (`start`, the connection,
//! the runner's start, the cell) and a warm cell of that session.
//!
//! - Docker: the recipe of docs/remotes.md with the offline test image
//!   (`docker run -d … sleep infinity`, `docker exec -i`, `docker rm -f`);
//! - SLURM: `salloc --no-shell`, `srun --jobid --overlap --unbuffered`,
//!   `scancel` on the one-node cluster `scripts/engines.sh` starts.
//!
//! An engine `scripts/engines.sh` reported unavailable is skipped, saying
//! why. Allocations are stopped in the background between iterations (as a
//! session's end does); the registry's `shutdown_all` waits for them.
//!
//! `cargo bench -p toolcell-benches --bench remote_engines`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use toolcell_host::{ExecuteRequest, Registry, RegistryOptions};
use toolcell_kernel::Status;
use toolcell_kernel::remote::Remote;

fn docker() -> Remote {
    Remote::command(["docker", "exec", "-i", "{id}"]).with_lifecycle(
        [
            "docker",
            "run",
            "-d",
            "--rm",
            "--init",
            "--network",
            "none",
            "--memory",
            "512m",
            "--label",
            "toolcell.host={host}",
            "--label",
            "toolcell.bench=1",
            "toolcell-test-python:1",
            "sleep",
            "infinity",
        ],
        ["docker", "rm", "-f", "{id}"],
        [
            "docker",
            "ps",
            "-aq",
            "--no-trunc",
            "--filter",
            "label=toolcell.host={host}",
        ],
    )
}

fn slurm() -> Remote {
    Remote::command(["srun", "--jobid={id}", "--overlap", "--quiet", "--unbuffered"]).with_lifecycle(
        [
            "sh",
            "-c",
            "out=$(salloc --no-shell --job-name=toolcell-{host} 2>&1) || { echo \"$out\" >&2; exit 1; }; echo \"$out\" | sed -n 's/^salloc: Granted job allocation //p'",
        ],
        ["scancel", "{id}"],
        ["squeue", "-h", "-o", "%i", "-t", "PD,R", "--name=toolcell-{host}"],
    )
}

/// Why `engine` cannot run here, if it cannot (scripts/engines.sh's status).
fn unavailable(engine: &str) -> Option<String> {
    let deps = std::env::var("TOOLCELL_TEST_DEPS").unwrap_or_else(|_| {
        format!(
            "{}/.cache/toolcell-ci/deps",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    let status = match std::fs::read_to_string(format!("{deps}/engines/status")) {
        Ok(s) => s,
        Err(e) => return Some(format!("no status file ({e}): run scripts/engines.sh")),
    };
    match status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{engine}=")))
    {
        Some("ok") => None,
        Some(why) => Some(why.to_string()),
        None => Some("not in the status file".into()),
    }
}

fn bench_engine(c: &mut Criterion, name: &str, remote: Remote) {
    if let Some(why) = unavailable(name) {
        toolcell_benches::missing(&format!("remote_engines: {name}: {why}"));
        return;
    }
    let rt = toolcell_benches::runtime();
    let tmp = tempfile::tempdir().unwrap();
    let mut remotes = BTreeMap::new();
    remotes.insert(name.to_string(), remote);
    let opts = RegistryOptions {
        kernels_root: Some(tmp.path().join("kernels")),
        spill_dir: tmp.path().join("spill"),
        default_cwd: tmp.path().to_path_buf(),
        remote_records: Some(tmp.path().join("records")),
        max_kernels: 64,
        remotes,
        remote: name.to_string(),
        ..RegistryOptions::default()
    };
    let reg = rt.block_on(async { Registry::new(opts) }).unwrap();
    let run = |req: ExecuteRequest| {
        let r = rt.block_on(reg.execute(req));
        assert_eq!(r.status, Status::Success, "{}: {:?}", r.output, r.error);
    };
    let mut g = c.benchmark_group("remote_engines");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    let mut n = 0u64;
    g.bench_function(format!("{name}/first_cell_on_a_fresh_allocation"), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                n += 1;
                let session = format!("first-{n}");
                let t = Instant::now();
                run(ExecuteRequest::new("x = 1").owner(&session));
                total += t.elapsed();
                rt.block_on(reg.shutdown(&session));
            }
            total
        });
    });
    run(ExecuteRequest::new("x = 0").owner("warm"));
    g.bench_function(format!("{name}/warm_cell"), |b| {
        b.iter(|| run(ExecuteRequest::new("x += 1").owner("warm")));
    });
    g.finish();
    rt.block_on(reg.shutdown_all());
}

fn engines(c: &mut Criterion) {
    bench_engine(c, "docker", docker());
    bench_engine(c, "slurm", slurm());
}

criterion_group!(benches, engines);
criterion_main!(benches);
