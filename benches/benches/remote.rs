//! Remote kernels (issue 17): a warm cell over ssh to 127.0.0.1 against a
//! local one (≤ 0.5 ms on top), tool calls from a remote cell against local
//! ones (≤ 150 µs on top; local in-band against the local socket too),
//! bootstrap (connection excluded: a plain local launcher) against a local
//! spawn (≤ 1.5×), and, side by side, a Hermes-style cell: code written to
//! a file, a worker polling every 100 ms, the result file polled back.
//!
//! The ssh figures need `/usr/sbin/sshd` (scripts/test-deps.sh); the
//! bench starts its own on a free loopback port with keys in a temp dir.
//!
//! `cargo bench -p toolcell-benches --bench remote`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use toolcell_host::{ExecuteRequest, Registry, RegistryOptions};
use toolcell_kernel::Status;
use toolcell_kernel::remote::Remote;

struct Env {
    rt: tokio::runtime::Runtime,
    reg: Registry,
    _tmp: tempfile::TempDir,
}

fn env_with(tweak: impl FnOnce(&mut RegistryOptions)) -> Env {
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
    tweak(&mut opts);
    let reg = rt.block_on(async { Registry::new(opts) }).unwrap();
    Env { rt, reg, _tmp: tmp }
}

/// The real interpreter behind `python3` (a version-manager shim on PATH
/// costs 60-90 ms a start; the local kernel is started from the probed
/// executable too).
fn real_python() -> String {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn with_remote(command: Vec<String>) -> impl FnOnce(&mut RegistryOptions) {
    move |o| {
        let mut remotes = BTreeMap::new();
        let mut remote = Remote::command(command);
        remote.python = real_python();
        remotes.insert("far".to_string(), remote);
        o.remotes = remotes;
        o.remote = "far".into();
    }
}

fn run(e: &Env, req: ExecuteRequest) {
    let r = e.rt.block_on(e.reg.execute(req));
    assert_eq!(r.status, Status::Success, "{}", r.output);
}

struct Sshd {
    dir: tempfile::TempDir,
    port: u16,
    child: Child,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sshd() -> Option<Sshd> {
    if !Path::new("/usr/sbin/sshd").exists() {
        toolcell_benches::missing("no /usr/sbin/sshd for the ssh benches (scripts/test-deps.sh)");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for k in ["host_key", "user_key"] {
        Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(d.join(k))
            .status()
            .unwrap();
    }
    std::fs::copy(d.join("user_key.pub"), d.join("authorized_keys")).unwrap();
    let _ = std::fs::create_dir_all("/run/sshd");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        d.join("cfg"),
        format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {}\nPermitRootLogin yes\n\
             AuthorizedKeysFile {}\nStrictModes no\nPasswordAuthentication no\nUsePAM no\n\
             PidFile {}\nLogLevel ERROR\nMaxStartups 1000\n",
            d.join("host_key").display(),
            d.join("authorized_keys").display(),
            d.join("pid").display()
        ),
    )
    .unwrap();
    let child = Command::new("/usr/sbin/sshd")
        .args(["-D", "-e", "-f"])
        .arg(d.join("cfg"))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "sshd did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(Sshd { dir, port, child })
}

impl Sshd {
    fn command(&self) -> Vec<String> {
        let key = self.dir.path().join("user_key");
        [
            "ssh",
            "-T",
            "-p",
            &self.port.to_string(),
            "-i",
            key.to_str().unwrap(),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "LogLevel=ERROR",
            "127.0.0.1",
            "--",
        ]
        .map(String::from)
        .to_vec()
    }
}

/// Warm cells and tool calls in one kernel of `e`.
fn warm_group(c: &mut Criterion, name: &str, e: &Env) {
    run(e, ExecuteRequest::new("x = 0"));
    let mut g = c.benchmark_group("remote");
    g.bench_function(format!("{name}/warm_cell_x_plus_1"), |b| {
        b.iter(|| run(e, ExecuteRequest::new("x += 1")));
    });
    g.bench_function(format!("{name}/cell_with_1_tool_call"), |b| {
        b.iter(|| run(e, ExecuteRequest::new("read_file('f.txt')")));
    });
    g.sample_size(20);
    g.bench_function(format!("{name}/cell_with_100_tool_calls"), |b| {
        b.iter(|| {
            run(
                e,
                ExecuteRequest::new("for _ in range(100):\n    read_file('f.txt')"),
            );
        });
    });
    g.finish();
}

/// Spawn to first result of fresh sessions.
fn spawn_bench(c: &mut Criterion, name: &str, e: &Env) {
    let mut g = c.benchmark_group("remote");
    g.sample_size(10);
    let mut n = 0u64;
    g.bench_function(format!("{name}/spawn_to_first_result"), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                n += 1;
                let t = Instant::now();
                run(e, ExecuteRequest::new("1").owner(format!("s{n}")));
                total += t.elapsed();
            }
            e.rt.block_on(e.reg.shutdown_all());
            total
        });
    });
    g.finish();
}

const WORKER: &str = r#"
import os, sys, time, io, contextlib
d = sys.argv[1]
ns = {}
while True:
    p = os.path.join(d, 'cell.py')
    if os.path.exists(p):
        with open(p) as f:
            code = f.read()
        os.unlink(p)
        if code == 'STOP':
            break
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(code, ns)
        with open(os.path.join(d, 'result.tmp'), 'w') as f:
            f.write(out.getvalue())
        os.rename(os.path.join(d, 'result.tmp'), os.path.join(d, 'result.txt'))
    time.sleep(0.1)
"#;

/// A Hermes-style cell: write the code file, a worker polls for it every
/// 100 ms, runs it and writes the result; the host polls for that every
/// 100 ms and reads it back.
fn hermes(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let mut worker = Command::new("python3")
        .args(["-u", "-c", WORKER])
        .arg(dir.path())
        .spawn()
        .unwrap();
    let cell = |code: &str| {
        let tmp = dir.path().join("cell.tmp");
        std::fs::write(&tmp, code).unwrap();
        std::fs::rename(&tmp, dir.path().join("cell.py")).unwrap();
        let result = dir.path().join("result.txt");
        loop {
            std::thread::sleep(Duration::from_millis(100));
            if let Ok(text) = std::fs::read_to_string(&result) {
                std::fs::remove_file(&result).unwrap();
                return text;
            }
        }
    };
    cell("x = 0");
    let mut g = c.benchmark_group("remote");
    g.sample_size(10);
    g.bench_function("hermes_file_polling_100ms/warm_cell_x_plus_1", |b| {
        b.iter(|| cell("x += 1\nprint(x)"));
    });
    g.finish();
    let tmp = dir.path().join("cell.tmp");
    std::fs::write(&tmp, "STOP").unwrap();
    std::fs::rename(&tmp, dir.path().join("cell.py")).unwrap();
    let _ = worker.wait();
}

fn bench(c: &mut Criterion) {
    let local = env_with(|_| {});
    warm_group(c, "local_socket", &local);
    let inband = env_with(|o| o.inband_tools = true);
    warm_group(c, "local_inband", &inband);
    let launcher = env_with(with_remote(
        ["sh", "-c", "exec \"$@\"", "--"].map(String::from).to_vec(),
    ));
    warm_group(c, "local_launcher", &launcher);
    let server = sshd();
    let ssh = server.as_ref().map(|s| env_with(with_remote(s.command())));
    if let Some(e) = &ssh {
        warm_group(c, "ssh_loopback", e);
    }
    spawn_bench(c, "local", &local);
    spawn_bench(c, "local_launcher", &launcher);
    if let Some(e) = &ssh {
        spawn_bench(c, "ssh_loopback", e);
    }
    hermes(c);
}

criterion_group!(benches, bench);
criterion_main!(benches);
