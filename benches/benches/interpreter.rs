//! What resolving the interpreter and building a kernel's environment cost per
//! spawn (docs/tour.md, "Kernels and the warm pool"; SECURITY.md,
//! "Host secrets stay out of the kernel's environment"): a cached resolution
//! (the path every kernel spawn after the first takes), a cold probe through
//! `python3` on PATH (a pyenv shim on the development machine) and through the
//! real executable it names, against the bare start of that executable
//! (`-I -S -c pass`), and `child_env` + `toolcell_vars` over a 60-variable host
//! environment.
//!
//! `cargo bench -p toolcell-benches --bench interpreter`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Stdio};

use criterion::{Criterion, criterion_group, criterion_main};
use toolcell_host::config::Mode;
use toolcell_kernel::env::{child_env, toolcell_vars};
use toolcell_kernel::interpreter::{HostEnv, ProbeCache, resolve};

fn host_env() -> Vec<(OsString, OsString)> {
    let mut vars: Vec<(OsString, OsString)> = Vec::new();
    for i in 0..20 {
        vars.push((format!("LC_VAR_{i}").into(), "en_US.UTF-8".into()));
        vars.push((format!("SOME_TOOL_SETTING_{i}").into(), "value".into()));
        vars.push((
            format!("SERVICE_{i}_API_KEY").into(),
            "sk-0123456789abcdef".into(),
        ));
    }
    vars.push(("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()));
    vars.push(("PYTHONPATH".into(), "/opt/lib".into()));
    vars
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let env = HostEnv::current();
    let cwd = dir.path();

    let mut g = c.benchmark_group("interpreter");
    let warm = ProbeCache::new();
    let found = resolve("", Mode::Strict, cwd, &env, &warm).unwrap();
    g.bench_function("resolve_cached", |b| {
        b.iter(|| resolve("", Mode::Strict, cwd, &env, &warm).unwrap());
    });

    g.sample_size(10);
    g.bench_function("resolve_cold_python3_on_path", |b| {
        b.iter(|| resolve("", Mode::Strict, cwd, &env, &ProbeCache::new()).unwrap());
    });
    let real = found.executable.to_str().unwrap().to_string();
    g.bench_function("resolve_cold_real_executable", |b| {
        b.iter(|| resolve(&real, Mode::Strict, cwd, &env, &ProbeCache::new()).unwrap());
    });
    g.bench_function("baseline_real_executable_-I_-S_-c_pass", |b| {
        b.iter(|| {
            let status = Command::new(&found.executable)
                .args(["-I", "-S", "-c", "pass"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(status.success());
        });
    });
    g.finish();

    let host = host_env();
    let passthrough = vec!["EDITOR".to_string()];
    c.bench_function("env/child_env_and_toolcell_vars_60_vars", |b| {
        b.iter(|| {
            let mut env = child_env(host.clone(), &passthrough);
            toolcell_vars(
                &mut env,
                Path::new("/run/k"),
                "unix:/run/k/rpc.sock",
                "token",
            );
            env
        });
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
