//! Remote kernels (README.md,
//! "Kernels on other machines: ssh, Docker, Kubernetes") with real processes:
//! the cell-semantics suite through a real `sshd` on 127.0.0.1 (started here
//! with its own host key, user key and config in a temporary directory),
//! through a plain local launcher (`sh -c 'exec "$@"'`), and inside fresh user,
//! mount and network namespaces (`unshare`, standing in for a container);
//! stand-in `docker` and `kubectl` scripts that check their argv; and the
//! lifecycle over a connection: interrupt, timeout kill, a dropped connection,
//! a command that cannot connect or stalls, and a host killed with SIGKILL. R
//! and JavaScript kernels (state, tools in-band, stdin refused, an in-band
//! interrupt that keeps the state, a crash, R figures as bytes) through the
//! local launcher and the real sshd.
//!
//! `scripts/test-deps.sh` (run by `.ci/run`) installs `openssh-server`
//! and `openssh-client` when missing; without `/usr/sbin/sshd` the ssh
//! tests say so and pass vacuously.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Fixture, alive, assert_success, eventually_blocking, show, tagged_pid};
use toolcell_host::{ExecuteRequest, RegistryOptions};
use toolcell_kernel::remote::Remote;
use toolcell_kernel::{ExecuteResult, Language, Status};

/// An sshd on 127.0.0.1, killed on drop.
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

const SSHD: &str = "/usr/sbin/sshd";

fn keygen(path: &Path) {
    let ok = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "ssh-keygen failed");
}

impl Sshd {
    /// Starts sshd, or `None` (with a note) when it is not installed.
    fn start() -> Option<Sshd> {
        if !Path::new(SSHD).exists() {
            common::missing(&format!(
                "{SSHD} is missing (scripts/test-deps.sh installs it)"
            ));
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        keygen(&d.join("host_key"));
        keygen(&d.join("user_key"));
        std::fs::copy(d.join("user_key.pub"), d.join("authorized_keys")).unwrap();
        // sshd running as root wants its privilege-separation directory.
        if nix::unistd::geteuid().is_root() {
            let _ = std::fs::create_dir_all("/run/sshd");
        }
        for attempt in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let cfg = d.join("sshd_config");
            std::fs::write(
                &cfg,
                format!(
                    "Port {port}\nListenAddress 127.0.0.1\nHostKey {hk}\nPermitRootLogin yes\n\
                     AuthorizedKeysFile {ak}\nStrictModes no\nPasswordAuthentication no\n\
                     KbdInteractiveAuthentication no\nUsePAM no\nPidFile {pid}\nLogLevel ERROR\n\
                     MaxStartups 100\nMaxSessions 100\n",
                    hk = d.join("host_key").display(),
                    ak = d.join("authorized_keys").display(),
                    pid = d.join("sshd.pid").display(),
                ),
            )
            .unwrap();
            let mut child = Command::new(SSHD)
                .arg("-D")
                .arg("-e")
                .arg("-f")
                .arg(&cfg)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(d.join("sshd.log")).unwrap())
                .spawn()
                .unwrap();
            let up = eventually_blocking(Duration::from_secs(10), || {
                std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
                    || !matches!(child.try_wait(), Ok(None))
            });
            if up && matches!(child.try_wait(), Ok(None)) {
                return Some(Sshd { dir, port, child });
            }
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("sshd did not start on port {port} (attempt {attempt})");
        }
        panic!("sshd did not start");
    }

    /// The `ssh` command of the issue, for this server.
    fn command(&self) -> Vec<String> {
        ssh_command(self.port, &self.dir.path().join("user_key"))
    }
}

fn ssh_command(port: u16, key: &Path) -> Vec<String> {
    [
        "ssh",
        "-T",
        "-p",
        &port.to_string(),
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

fn local_launcher() -> Vec<String> {
    ["sh", "-c", "exec \"$@\"", "--"].map(String::from).to_vec()
}

fn unshare_launcher() -> Option<Vec<String>> {
    let ok = Command::new("unshare")
        .args([
            "--user",
            "--map-root-user",
            "--mount",
            "--net",
            "--fork",
            "true",
        ])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        common::missing("unshare cannot create user, mount and network namespaces here");
        return None;
    }
    Some(
        [
            "unshare",
            "--user",
            "--map-root-user",
            "--mount",
            "--net",
            "--fork",
            "--kill-child",
            "--",
        ]
        .map(String::from)
        .to_vec(),
    )
}

/// A registry whose default remote is `name`, reached by `command`.
fn fixture(command: Vec<String>, adjust: impl FnOnce(&mut RegistryOptions)) -> Fixture {
    Fixture::with(|o| {
        let mut remotes = BTreeMap::new();
        remotes.insert("far".to_string(), Remote::command(command));
        o.remotes = remotes;
        o.remote = "far".into();
        adjust(o);
    })
}

fn req(code: &str) -> ExecuteRequest {
    ExecuteRequest::new(code)
}

async fn run(f: &Fixture, r: ExecuteRequest) -> ExecuteResult {
    f.reg.execute(r).await
}

/// A fake `matplotlib.pyplot` whose one figure writes a valid 1×1 PNG.
const FIGURE_CELL: &str = r#"
import sys, types, zlib, struct
def _chunk(kind, data):
    body = kind + data
    return struct.pack('>I', len(data)) + body + struct.pack('>I', zlib.crc32(body) & 0xffffffff)
PNG = (b'\x89PNG\r\n\x1a\n' + _chunk(b'IHDR', struct.pack('>IIBBBBB', 1, 1, 8, 2, 0, 0, 0))
       + _chunk(b'IDAT', zlib.compress(b'\x00\xff\x00\x00')) + _chunk(b'IEND', b''))
class _Figure:
    def savefig(self, path, format=None):
        with open(path, 'wb') as f:
            f.write(PNG)
_figs = {1: _Figure()}
plt = types.ModuleType('matplotlib.pyplot')
plt.get_fignums = lambda: list(_figs)
plt.figure = lambda num=None: _figs[num]
plt.close = lambda num=None: _figs.pop(num, None)
sys.modules['matplotlib.pyplot'] = plt
"#;

/// Every cell semantic, output rule and result field (README.md,
/// "Kernels on other machines: ssh, Docker, Kubernetes") through the remote
/// `far`.
async fn semantics(f: &Fixture) {
    // State, echo, `kernel.remote`.
    let r = run(f, req("import os\nx = 41\nprint('pid=%d' % os.getpid())")).await;
    assert_success(&r);
    assert_eq!(r.kernel.remote.as_deref(), Some("far"), "{}", show(&r));
    // Its engine isolates it, not our sandbox; the result says which.
    assert_eq!(
        r.kernel.sandbox,
        Some(toolcell_kernel::sandbox::SandboxInfo::Remote),
        "{}",
        show(&r)
    );
    assert!(!r.kernel.state_reset);
    assert!(!r.kernel.python.is_empty(), "{}", show(&r));
    let pid = tagged_pid(&r.output, "pid");
    let r = run(f, req("x + 1")).await;
    assert_success(&r);
    assert_eq!(r.output, "42\n");
    assert!(r.kernel.reused);
    assert_eq!(r.kernel.execution_count, 2);
    assert!(r.usage.is_some());
    // Top-level await and `!cmd`.
    let r = run(f, req("import asyncio\nawait asyncio.sleep(0)\n'awaited'")).await;
    assert_eq!(r.output, "'awaited'\n", "{}", show(&r));
    let r = run(f, req("!echo shell-line")).await;
    assert_eq!(r.output, "shell-line\n", "{}", show(&r));
    // Tracebacks with source, no runner frames.
    let r = run(f, req("def f():\n    raise ValueError('boom')\nf()")).await;
    assert_eq!(r.status, Status::Error);
    assert!(
        r.output.contains("raise ValueError('boom')"),
        "{}",
        show(&r)
    );
    assert!(r.output.contains("<cell-"), "{}", show(&r));
    assert!(!r.output.contains("toolcell-runner"), "{}", show(&r));
    // Stdin refused.
    let r = run(f, req("input()")).await;
    assert!(r.stdin_requested, "{}", show(&r));
    // Host tools, in-band, from threads in parallel.
    std::fs::write(f.work().join("hello.txt"), "from the host\n").unwrap();
    let r = run(
        f,
        req("from concurrent.futures import ThreadPoolExecutor\n\
             with ThreadPoolExecutor(4) as ex:\n    \
             got = list(ex.map(lambda _: read_file(path='hello.txt')['content'], range(4)))\n\
             print(sorted(set(got)))"),
    )
    .await;
    assert_success(&r);
    assert!(r.output.contains("from the host"), "{}", show(&r));
    assert_eq!(r.tool_calls_made, 4, "{}", show(&r));
    // A tool call for a tool not enabled is refused (no budget taken).
    let mut narrow = req(
        "import toolcell_tools\ntry:\n    toolcell_tools._call('terminal', {'command': 'id'})\n\
         except toolcell_tools.ToolError as e:\n    print(e.code)",
    );
    narrow.tools = Some(vec!["read_file".into()]);
    let r = run(f, narrow).await;
    assert_eq!(r.output, "not_allowed\n", "{}", show(&r));
    assert_eq!(r.tool_calls_made, 0);
    // Output cap, spill, redaction (host-side, as for a local kernel).
    let r = run(
        f,
        req("print('\\n'.join(''.join(chr(103 + (i * j) % 20) for j in range(40)) for i in range(3000)))\n\
             print('ghp_' + 'a1B2' * 9)"),
    )
    .await;
    assert!(r.stdout_truncated, "{}", &r.output[..300]);
    let spill = r.stdout_spill_path.clone().unwrap();
    assert!(Path::new(&spill).exists());
    assert!(!r.output.contains(&format!("ghp_{}", "a1B2".repeat(9))));
    assert!(
        r.output.contains("«redacted:"),
        "{}",
        &r.output[r.output.len() - 300..]
    );
    // Figures come back as bytes and are stored in the host's kernel dir.
    let r = run(f, req(FIGURE_CELL)).await;
    assert_success(&r);
    assert_eq!(r.display.len(), 1, "{}", show(&r));
    let path = PathBuf::from(&r.display[0].path);
    assert!(
        path.starts_with(f.kernels_root().join(&r.kernel.id)),
        "{path:?}"
    );
    assert!(
        std::fs::read(&path)
            .unwrap()
            .starts_with(b"\x89PNG\r\n\x1a\n")
    );
    // A timeout interrupts in-band; the state survives.
    let mut slow = req("import time\ntime.sleep(30)");
    slow.timeout = Some(Duration::from_secs(1));
    let t = Instant::now();
    let r = run(f, slow).await;
    assert_eq!(r.status, Status::Timeout, "{}", show(&r));
    assert_eq!(r.kernel.state_kept, Some(true), "{}", show(&r));
    assert!(t.elapsed() < Duration::from_secs(10));
    let r = run(f, req("x")).await;
    assert_eq!(r.output, "41\n", "{}", show(&r));
    // A crash: the next cell starts a new remote kernel, state_reset.
    let r = run(f, req("import os\nos._exit(3)")).await;
    assert_eq!(r.status, Status::Error, "{}", show(&r));
    assert!(
        r.error.as_deref().unwrap().contains("state is lost"),
        "{}",
        show(&r)
    );
    let r = run(f, req("'x' in globals()")).await;
    assert_eq!(r.output, "False\n", "{}", show(&r));
    assert!(r.kernel.state_reset, "{}", show(&r));
    // The first remote runner is gone.
    assert!(
        eventually_blocking(Duration::from_secs(5), || !alive(pid)),
        "remote runner {pid} survived"
    );
    f.reg.shutdown_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cell_semantics_through_a_real_sshd() {
    let Some(sshd) = Sshd::start() else { return };
    let f = fixture(sshd.command(), |_| {});
    semantics(&f).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cell_semantics_through_a_plain_local_launcher() {
    let f = fixture(local_launcher(), |_| {});
    semantics(&f).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cell_semantics_in_fresh_namespaces() {
    let Some(cmd) = unshare_launcher() else {
        return;
    };
    let f = fixture(cmd, |_| {});
    // The namespace has no network at all: everything went through the pipe.
    let mut net = req(
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', 9), timeout=1)\nexcept OSError as e:\n    print(type(e).__name__)",
    );
    net.owner = "net".into();
    let r = run(&f, net).await;
    assert_success(&r);
    semantics(&f).await;
}

/// Stand-ins for `docker` and `kubectl` that check the argv shape the README
/// documents, then run the rest here.
fn stand_ins(dir: &Path) {
    let docker = "#!/bin/sh\n[ \"$1\" = exec ] && [ \"$2\" = -i ] && [ \"$3\" = box ] || { echo \"docker stand-in: bad argv ($# words, first: $1 $2 $3)\" >&2; exit 64; }\nshift 3\nexec \"$@\"\n";
    let kubectl = "#!/bin/sh\n[ \"$1\" = exec ] && [ \"$2\" = -i ] && [ \"$3\" = pod-0 ] && [ \"$4\" = -- ] || { echo \"kubectl stand-in: bad argv ($# words, first: $1 $2 $3 $4)\" >&2; exit 64; }\nshift 4\nexec \"$@\"\n";
    for (name, text) in [("docker", docker), ("kubectl", kubectl)] {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_and_kubectl_commands_have_the_documented_argv() {
    let bin = tempfile::tempdir().unwrap();
    stand_ins(bin.path());
    let p = |n: &str| bin.path().join(n).display().to_string();
    let f = Fixture::with(|o| {
        o.remotes.insert(
            "docker".into(),
            Remote::command([p("docker"), "exec".into(), "-i".into(), "box".into()]),
        );
        o.remotes.insert(
            "k8s".into(),
            Remote::command([
                p("kubectl"),
                "exec".into(),
                "-i".into(),
                "pod-0".into(),
                "--".into(),
            ]),
        );
    });
    for name in ["docker", "k8s"] {
        let mut r = req("import sys\nprint(sys.argv, 6 * 7)");
        r.remote = Some(name.into());
        let r = run(&f, r).await;
        assert_success(&r);
        assert_eq!(r.output, "[''] 42\n", "{}", show(&r));
        assert_eq!(r.kernel.remote.as_deref(), Some(name));
    }
    // The remote is part of the session key: a local cell of the same
    // session is another kernel.
    let mut local = req("print('local')");
    local.remote = Some(String::new());
    let r = run(&f, local).await;
    assert_success(&r);
    assert_eq!(r.kernel.remote, None);
    assert_eq!(f.reg.sessions().len(), 3);
    // A wrong argv is an error naming the remote, with the stand-in's words.
    f.reg.shutdown_all().await;
    let g = Fixture::with(|o| {
        o.remotes.insert(
            "docker".into(),
            Remote::command([p("docker"), "exec".into(), "box".into()]),
        );
    });
    let mut r = req("1");
    r.remote = Some("docker".into());
    let r = run(&g, r).await;
    assert_eq!(r.status, Status::Error);
    let e = r.error.unwrap();
    assert!(
        e.contains("remote \"docker\"") && e.contains("bad argv"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_remotes_are_clear_errors_and_the_host_keeps_serving() {
    let key = tempfile::tempdir().unwrap();
    // A closed port: ssh exits 255 at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let f = Fixture::with(|o| {
        o.startup_timeout = Duration::from_secs(2);
        let mut add = |n: &str, c: Vec<String>| {
            o.remotes.insert(n.into(), Remote::command(c));
        };
        add("refused", ssh_command(closed, &key.path().join("none")));
        add("exits", vec!["false".into()]);
        add(
            "stalls",
            vec!["sh".into(), "-c".into(), "sleep 30".into(), "--".into()],
        );
        add(
            "chatty",
            vec![
                "sh".into(),
                "-c".into(),
                "echo motd-garbage; echo warn >&2; exec \"$@\"".into(),
                "--".into(),
            ],
        );
        let old = Remote::command([
            "sh".to_string(),
            "-c".into(),
            // An interpreter that reports 3.7: the bootstrap refuses it.
            "exec \"$1\" -c 'import sys; sys.version_info = (3, 7, 0); exec(sys.argv[2])' x \"$4\""
                .into(),
            "--".into(),
        ]);
        o.remotes.insert("old".into(), old);
    });
    let on = |name: &str, code: &str| {
        let mut r = req(code);
        r.remote = Some(name.into());
        r.owner = name.into();
        r
    };
    if Path::new("/usr/bin/ssh").exists() {
        let t = Instant::now();
        let r = run(&f, on("refused", "1")).await;
        assert_eq!(r.status, Status::Error);
        let e = r.error.clone().unwrap();
        assert!(e.contains("remote \"refused\""), "{e}");
        assert!(
            e.contains("255") && e.to_lowercase().contains("refused"),
            "{e}"
        );
        assert!(t.elapsed() < Duration::from_secs(10));
    }
    let r = run(&f, on("exits", "1")).await;
    let e = r.error.clone().unwrap();
    assert!(
        e.contains("remote \"exits\"") && e.contains("status 1"),
        "{e}"
    );
    let t = Instant::now();
    let r = run(&f, on("stalls", "1")).await;
    let e = r.error.clone().unwrap();
    assert!(
        e.contains("remote \"stalls\"") && e.contains("within 2s"),
        "{e}"
    );
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    let r = run(&f, on("old", "1")).await;
    let e = r.error.clone().unwrap();
    assert!(
        e.contains("remote \"old\"") && e.contains("3.8 or newer"),
        "{e}"
    );
    let r = run(&f, on("chatty", "6 * 7")).await;
    assert_success(&r);
    assert!(r.output.contains("42\n"), "{}", show(&r));
    let r = run(&f, on("nowhere", "1")).await;
    assert!(r.error.unwrap().contains("unknown remote \"nowhere\""));
    // And the host still runs local cells.
    let r = run(&f, req("print('still here')")).await;
    assert_eq!(r.output, "still here\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_loses_the_state_and_the_next_cell_reconnects() {
    let Some(sshd) = Sshd::start() else { return };
    let f = std::sync::Arc::new(fixture(sshd.command(), |_| {}));
    let r = run(&f, req("import os\nx = 1\nprint('pid=%d' % os.getpid())")).await;
    assert_success(&r);
    let remote_pid = tagged_pid(&r.output, "pid");
    let ssh_pid = f.reg.sessions()[0].pid;
    let started = f.tmp.path().join("started");
    let cell = tokio::spawn({
        let f = std::sync::Arc::clone(&f);
        let code = format!(
            "{}import time\nprint('started', flush=True)\ntime.sleep(30)",
            common::py_mark(&started, "1")
        );
        async move { f.reg.execute(req(&code)).await }
    });
    // The cell runs on the remote (the same machine, through sshd).
    common::wait_file(&started, common::SYNC_LIMIT).await;
    // The connection drops: the local ssh client dies.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(ssh_pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let r = tokio::time::timeout(Duration::from_secs(10), cell)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.status, Status::Error, "{}", show(&r));
    let e = r.error.clone().unwrap();
    assert!(
        e.contains("connection to remote \"far\" was lost") && e.contains("state is lost"),
        "{e}"
    );
    assert!(
        eventually_blocking(Duration::from_secs(5), || !alive(remote_pid)),
        "the remote runner {remote_pid} survived its connection"
    );
    let r = run(&f, req("'x' in globals()")).await;
    assert_eq!(r.output, "False\n", "{}", show(&r));
    assert!(r.kernel.state_reset);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_that_ignores_the_interrupt_is_killed_with_its_remote_group() {
    let Some(sshd) = Sshd::start() else { return };
    let f = fixture(sshd.command(), |o| {
        o.interrupt_grace = Duration::from_millis(500);
        o.kill_grace = Duration::from_millis(500);
    });
    let mut r = req(
        "import os, signal, subprocess, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n\
         p = subprocess.Popen(['sleep', '60'])\nprint('pid=%d' % os.getpid())\n\
         print('child=%d' % p.pid, flush=True)\ntime.sleep(60)",
    );
    r.timeout = Some(Duration::from_secs(2));
    let t = Instant::now();
    let r = run(&f, r).await;
    assert_eq!(r.status, Status::Timeout, "{}", show(&r));
    assert_eq!(r.kernel.state_kept, Some(false), "{}", show(&r));
    assert!(t.elapsed() < Duration::from_secs(10));
    let pids = [tagged_pid(&r.output, "pid"), tagged_pid(&r.output, "child")];
    assert!(
        eventually_blocking(Duration::from_secs(5), || pids.iter().all(|&p| !alive(p))),
        "remote processes survived the kill: {pids:?}"
    );
    let r = run(&f, req("1 + 1")).await;
    assert_eq!(r.output, "2\n");
    assert!(r.kernel.state_reset);
}

const HOST_KILL: &str = "remote::killing_the_host_with_sigkill_ends_the_remote_runner";

#[test]
fn killing_the_host_with_sigkill_ends_the_remote_runner() {
    if common::is_child(HOST_KILL) {
        host_kill_child();
        return;
    }
    let Some(sshd) = Sshd::start() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let pidfile = tmp.path().join("pids");
    let mut child = common::spawn_child(
        HOST_KILL,
        &[
            ("TOOLCELL_TEST_TMP", tmp.path().to_str().unwrap()),
            ("TOOLCELL_TEST_PIDFILE", pidfile.to_str().unwrap()),
            ("TOOLCELL_TEST_SSH", &sshd.command().join("\u{1}")),
        ],
    );
    let ready = eventually_blocking(Duration::from_secs(30), || pidfile.exists());
    if !ready {
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        panic!(
            "the host never got its cell running:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = std::fs::read_to_string(&pidfile).unwrap();
    let pids = ["kernel", "child"].map(|t| tagged_pid(&text, t));
    assert!(pids.iter().all(|&p| alive(p)), "{text}");
    child.kill().unwrap();
    child.wait().unwrap();
    let gone = eventually_blocking(Duration::from_secs(5), || pids.iter().all(|&p| !alive(p)));
    let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    for p in &left {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*p as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(
        gone,
        "remote processes alive 5 s after the host died: {left:?}"
    );
}

fn host_kill_child() {
    let tmp = PathBuf::from(std::env::var("TOOLCELL_TEST_TMP").unwrap());
    let pidfile = std::env::var("TOOLCELL_TEST_PIDFILE").unwrap();
    let ssh: Vec<String> = std::env::var("TOOLCELL_TEST_SSH")
        .unwrap()
        .split('\u{1}')
        .map(String::from)
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut o = common::opts(&tmp);
        o.default_cwd = tmp.clone();
        o.remotes.insert("far".into(), Remote::command(ssh));
        o.remote = "far".into();
        let reg = toolcell_host::Registry::new(o).unwrap();
        let code = format!(
            r#"
import os, subprocess, time
child = subprocess.Popen(['sleep', '60'])
with open({pidfile:?} + '.tmp', 'w') as f:
    f.write(f'kernel={{os.getpid()}}\nchild={{child.pid}}\n')
os.rename({pidfile:?} + '.tmp', {pidfile:?})
time.sleep(60)
"#
        );
        let r = reg.execute(ExecuteRequest::new(code)).await;
        panic!("the cell should never end: {}", show(&r));
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_stalls_mid_cell_times_out_and_the_host_serves_on() {
    let f = fixture(local_launcher(), |o| {
        o.interrupt_grace = Duration::from_millis(500);
        o.kill_grace = Duration::from_millis(500);
    });
    // The runner stops itself, again each time it is continued (the host's
    // interrupt sends SIGCONT), and ignores SIGINT: no byte moves either
    // way, as on a stalled link.
    let mut r = req(
        "import os, signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n\
         print('pid=%d' % os.getpid(), flush=True)\n\
         while True:\n    os.kill(os.getpid(), signal.SIGSTOP)",
    );
    r.timeout = Some(Duration::from_secs(1));
    let t = Instant::now();
    let r = run(&f, r).await;
    assert_eq!(r.status, Status::Timeout, "{}", show(&r));
    assert_eq!(r.kernel.state_kept, Some(false), "{}", show(&r));
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    let pid = tagged_pid(&r.output, "pid");
    assert!(eventually_blocking(Duration::from_secs(5), || !alive(pid)));
    let r = run(&f, req("6 * 7")).await;
    assert_eq!(r.output, "42\n", "{}", show(&r));
    assert!(r.kernel.state_reset);
}

/// The cells of one R or JavaScript remote check: (set state and print the
/// pid as `pid=N`, read the state back with its expected output, a tool
/// call printing the file's content, a busy loop, a crash).
struct OtherCells {
    lang: Language,
    set: &'static str,
    get: &'static str,
    want: &'static str,
    tool: &'static str,
    busy: &'static str,
    crash: &'static str,
    fresh: &'static str,
    fresh_want: &'static str,
}

const R_CELLS: OtherCells = OtherCells {
    lang: Language::R,
    set: "x <- 41\ncat(sprintf('pid=%d\\n', Sys.getpid()))",
    get: "x + 1",
    want: "[1] 42\n",
    tool: "cat(read_file(path = 'hello.txt')$content)",
    busy: "i <- 0\nwhile (TRUE) i <- i + 1",
    crash: "tools::pskill(Sys.getpid(), 9L)",
    fresh: "exists('x')",
    fresh_want: "[1] FALSE\n",
};

const JS_CELLS: OtherCells = OtherCells {
    lang: Language::JavaScript,
    set: "let x = 41\nconsole.log(`pid=${process.pid}`)",
    get: "x + 1",
    want: "42\n",
    tool: "const r = await read_file({path: 'hello.txt'})\nconsole.log(r.content.trim())",
    busy: "let i = 0\nwhile (true) { i++ }",
    crash: "process.kill(process.pid, 'SIGKILL')",
    fresh: "typeof x",
    fresh_want: "'undefined'\n",
};

fn require_interpreter(lang: Language) {
    let (prog, install) = match lang {
        Language::R => (
            "Rscript",
            "scripts/test-deps.sh (apt-get install r-base-core r-cran-jsonlite)",
        ),
        _ => ("node", "apt-get install nodejs (node 18 or later)"),
    };
    let ok = Command::new(prog)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(ok, "{prog} is not installed; install it with: {install}");
}

/// The cell semantics of an R or JavaScript kernel on the remote `far`:
/// state, `kernel.remote` and `kernel.language`, stdin refused, host tools
/// in-band, a timeout interrupted in-band with the state kept, a crash that
/// loses the state (the next cell starts fresh), and the runner gone after.
async fn other_semantics(f: &Fixture, c: &OtherCells) {
    require_interpreter(c.lang);
    let req = |code: &str| ExecuteRequest::new(code).language(c.lang);
    let lang = c.lang;
    let r = run(f, req(c.set)).await;
    assert_success(&r);
    assert_eq!(r.kernel.remote.as_deref(), Some("far"), "{}", show(&r));
    assert_eq!(r.kernel.language, lang.as_str(), "{}", show(&r));
    let pid = tagged_pid(&r.output, "pid");
    let r = run(f, req(c.get)).await;
    assert_eq!(r.output, c.want, "{lang}: {}", show(&r));
    assert!(r.kernel.reused);
    std::fs::write(f.work().join("hello.txt"), "from the host\n").unwrap();
    let r = run(f, req(c.tool)).await;
    assert_success(&r);
    assert_eq!(r.output, "from the host\n", "{lang}: {}", show(&r));
    assert_eq!(r.tool_calls_made, 1, "{}", show(&r));
    let stdin = match lang {
        Language::R => "readLines('stdin')",
        _ => "process.stdin.read()",
    };
    let r = run(f, req(stdin)).await;
    assert!(r.stdin_requested, "{lang}: {}", show(&r));
    // A timeout interrupts in-band (the relay or reader thread turns it into
    // SIGINT); the state survives.
    let t = Instant::now();
    let r = run(f, req(c.busy).timeout(Duration::from_secs(1))).await;
    assert_eq!(r.status, Status::Timeout, "{lang}: {}", show(&r));
    assert_eq!(r.kernel.state_kept, Some(true), "{lang}: {}", show(&r));
    assert!(t.elapsed() < Duration::from_secs(10));
    let r = run(f, req(c.get)).await;
    assert_eq!(r.output, c.want, "{lang}: {}", show(&r));
    // A crash loses the state; the next cell starts a new remote kernel.
    let r = run(f, req(c.crash)).await;
    assert_eq!(r.status, Status::Error, "{lang}: {}", show(&r));
    assert!(
        r.error.as_deref().unwrap_or("").contains("state is lost"),
        "{lang}: {}",
        show(&r)
    );
    let r = run(f, req(c.fresh)).await;
    assert_eq!(r.output, c.fresh_want, "{lang}: {}", show(&r));
    assert!(r.kernel.state_reset, "{}", show(&r));
    assert!(
        eventually_blocking(Duration::from_secs(5), || !alive(pid)),
        "remote {lang} runner {pid} survived"
    );
}

/// An R plot drawn on a remote comes back as PNG bytes, stored in the
/// host's directory for the kernel.
async fn r_remote_figure(f: &Fixture) {
    let r = run(f, ExecuteRequest::new("plot(1:10)").language(Language::R)).await;
    assert_success(&r);
    assert_eq!(r.display.len(), 1, "{}", show(&r));
    let path = PathBuf::from(&r.display[0].path);
    assert!(
        path.starts_with(f.kernels_root().join(&r.kernel.id)),
        "{path:?}"
    );
    assert!(
        std::fs::read(&path)
            .unwrap()
            .starts_with(b"\x89PNG\r\n\x1a\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_and_javascript_through_a_plain_local_launcher() {
    let f = fixture(local_launcher(), |_| {});
    other_semantics(&f, &R_CELLS).await;
    r_remote_figure(&f).await;
    other_semantics(&f, &JS_CELLS).await;
    f.reg.shutdown_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_and_javascript_through_a_real_sshd() {
    let Some(sshd) = Sshd::start() else { return };
    let f = fixture(sshd.command(), |_| {});
    other_semantics(&f, &R_CELLS).await;
    r_remote_figure(&f).await;
    other_semantics(&f, &JS_CELLS).await;
    f.reg.shutdown_all().await;
}

/// A cell that finds the runner's own `_send_file` (its frames carry the
/// secret sentinel) and sends six 1 MB files no result will list.
const UNLISTED_FILES_CELL: &str = r#"
import os, sys
f = sys._getframe()
while f is not None and '_send_file' not in f.f_globals:
    f = f.f_back
send = f.f_globals['_send_file']
for i in range(6):
    path = 'junk-%d.png' % i
    with open(path, 'wb') as out:
        out.write(b'\x89PNG\r\n\x1a\n' + os.urandom(1000000 - 8))
    send(path, 'image/png')
print('sent')
"#;

/// The files in kernel `id`'s artifacts directory.
fn artifacts(f: &Fixture, id: &str) -> Vec<PathBuf> {
    common::entries(&f.kernels_root().join(id).join("artifacts"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_11_files_a_remote_sends_are_capped_and_unlisted_ones_deleted() {
    let f = fixture(local_launcher(), |o| o.remote_files_cap = 4 << 20);
    for round in 0..2 {
        let r = run(&f, req(UNLISTED_FILES_CELL)).await;
        assert_success(&r);
        assert_eq!(r.output, "sent\n", "{}", show(&r));
        assert!(r.display.is_empty(), "{}", show(&r));
        // Four fit under the cap, two are refused, with a warning.
        let w = r.warning.clone().unwrap_or_default();
        assert!(
            w.contains("2 file(s)") && w.contains("remote_files_cap"),
            "round {round}: {}",
            show(&r)
        );
        // None is listed: none is kept, so the next round has the room again.
        let left = artifacts(&f, &r.kernel.id);
        assert!(left.is_empty(), "round {round}: left behind: {left:?}");
    }
    // A figure the result lists is kept, and counted.
    let r = run(&f, req(FIGURE_CELL)).await;
    assert_success(&r);
    assert_eq!(r.display.len(), 1, "{}", show(&r));
    assert_eq!(artifacts(&f, &r.kernel.id).len(), 1);
    assert!(r.warning.is_none(), "{}", show(&r));
    f.reg.shutdown_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_s1_a_remote_kernel_killed_mid_cell_warns_the_next_cell() {
    let f = std::sync::Arc::new(fixture(local_launcher(), |_| {}));
    let r = run(&f, req("x = 1\nprint('ready')")).await;
    assert_success(&r);
    // Through the local launcher the command is the remote runner itself.
    let pid = f.reg.sessions()[0].pid;
    let mark = f.tmp.path().join("started");
    let cell = tokio::spawn({
        let f = std::sync::Arc::clone(&f);
        let code = format!("{}import time\ntime.sleep(60)", common::py_mark(&mark, "1"));
        async move { f.reg.execute(req(&code)).await }
    });
    common::wait_file(&mark, Duration::from_secs(30)).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let r = tokio::time::timeout(Duration::from_secs(20), cell)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.status, Status::Error, "{}", show(&r));
    assert!(
        r.error.as_deref().unwrap_or("").contains("state is lost"),
        "{}",
        show(&r)
    );
    // The next cell runs in a new remote kernel and says why.
    let r = run(&f, req("'x' in globals()")).await;
    assert_eq!(r.output, "False\n", "{}", show(&r));
    assert!(r.kernel.state_reset, "{}", show(&r));
    let w = r.warning.clone().unwrap_or_default();
    assert!(
        w.contains("lost its remote kernel") && w.contains("connection to remote \"far\" was lost"),
        "{}",
        show(&r)
    );
    // Said once: the cell after it has no such warning.
    let r = run(&f, req("1")).await;
    assert!(r.warning.is_none(), "{}", show(&r));
    f.reg.shutdown_all().await;
}
