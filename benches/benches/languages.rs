//! R and JavaScript kernels against Python (issue 19 targets): a warm
//! `x <- x + 1` / `x += 1` cell through `Registry::execute` for each
//! language (R and JavaScript within 2× of Python's), and spawn to first
//! result for R and JavaScript against the bare interpreter start
//! (`Rscript -e 0`, `node -e 0`; target ≤ 1.25×).
//!
//! `cargo bench -p toolcell-benches --bench languages`
//!
//! A missing interpreter fails the bench with its install command
//! (`scripts/test-deps.sh` installs R).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use toolcell_host::{ExecuteRequest, Registry, RegistryOptions};
use toolcell_kernel::{Language, Status};

struct Env {
    rt: tokio::runtime::Runtime,
    reg: Registry,
    _tmp: tempfile::TempDir,
}

fn env(max_kernels: usize) -> Env {
    let rt = toolcell_benches::runtime();
    let tmp = tempfile::tempdir().unwrap();
    let opts = RegistryOptions {
        kernels_root: Some(tmp.path().join("kernels")),
        spill_dir: tmp.path().join("spill"),
        default_cwd: tmp.path().to_path_buf(),
        max_kernels,
        ..RegistryOptions::default()
    };
    let reg = rt.block_on(async { Registry::new(opts) }).unwrap();
    Env { rt, reg, _tmp: tmp }
}

fn run(e: &Env, req: ExecuteRequest) {
    let r = e.rt.block_on(e.reg.execute(req));
    assert_eq!(r.status, Status::Success, "{}", r.output);
}

fn require(program: &str, install: &str) {
    let ok = std::process::Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(ok, "{program} is not installed; install it with: {install}");
}

fn bench(c: &mut Criterion) {
    require(
        "Rscript",
        "scripts/test-deps.sh (apt-get install r-base-core r-cran-jsonlite)",
    );
    require("node", "apt-get install nodejs (node 18 or later)");
    let e = env(16);
    let mut g = c.benchmark_group("languages");
    for (lang, setup, cell) in [
        (Language::Python, "x = 0", "x += 1"),
        (Language::R, "x <- 0", "x <- x + 1"),
        (Language::JavaScript, "var x = 0", "x += 1"),
    ] {
        run(&e, ExecuteRequest::new(setup).language(lang));
        g.bench_function(format!("warm_cell_{}", lang.as_str()), |b| {
            b.iter(|| run(&e, ExecuteRequest::new(cell).language(lang)));
        });
    }
    // JavaScript echoes `x += 1`'s value (R's assignment is invisible,
    // Python's statement has none): the same cell without the echo.
    g.bench_function("warm_cell_javascript_no_echo", |b| {
        b.iter(|| {
            run(
                &e,
                ExecuteRequest::new("x += 1; undefined").language(Language::JavaScript),
            );
        });
    });
    // And Python with an echo, for the comparison the other way round.
    g.bench_function("warm_cell_python_echo", |b| {
        b.iter(|| run(&e, ExecuteRequest::new("x += 1\nx")));
    });
    g.finish();
    let mut g = c.benchmark_group("languages_spawn");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    // New sessions (no kernel to kill first) in a registry with room for
    // all of them; the host is warm, only the kernel is new.
    let spawn_env = env(10_000);
    let mut n = 0u64;
    for lang in [Language::R, Language::JavaScript] {
        g.bench_function(format!("spawn_to_first_result_{}", lang.as_str()), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    n += 1;
                    let t = Instant::now();
                    run(
                        &spawn_env,
                        ExecuteRequest::new("1")
                            .language(lang)
                            .owner(format!("s{n}")),
                    );
                    total += t.elapsed();
                }
                spawn_env.rt.block_on(spawn_env.reg.shutdown_all());
                total
            });
        });
    }
    // The baselines: the bare interpreters.
    for (name, program, args) in [
        ("rscript_e_0", "Rscript", ["-e", "0"]),
        ("node_e_0", "node", ["-e", "0"]),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let s = std::process::Command::new(program)
                    .args(args)
                    .stdout(std::process::Stdio::null())
                    .status()
                    .unwrap();
                assert!(s.success());
            });
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
