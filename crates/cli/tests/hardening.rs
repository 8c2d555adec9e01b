//! Issue-14 hardening through the real binary: no process a cell starts
//! outlives `toolcell exec` (cgroup path and subreaper path), and a request's
//! tools never widen the configured set.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod common;

use common::*;
use std::time::Duration;

fn sleepers(tag: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c).replace('\0', " ").trim() == format!("sleep {tag}")
                })
                .unwrap_or(false)
        })
        .collect()
}

fn escape_outlives_exec(cgroups: bool) {
    let env = Env::fast();
    let tag = format!(
        "{}{}",
        if cgroups { 7772 } else { 7773 },
        std::process::id() % 10_000
    );
    let code = format!(
        "import subprocess\nsubprocess.run(['/bin/sh', '-c', 'env -i setsid sleep {tag} </dev/null >/dev/null 2>&1 &'])\nimport time; time.sleep(0.3)\nprint('started')"
    );
    let mut c = env.cmd();
    if !cgroups {
        c.env("TOOLCELL_CGROUP", "off");
    }
    let out = c
        .args(["exec", &code])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = finish(out, Duration::from_secs(60));
    out.expect_code(0);
    assert!(out.stdout.contains("started"), "{out:?}");
    // exec has exited: nothing the cell started may still run.
    let left = sleepers(&tag);
    let gone = eventually(Duration::from_secs(5), || sleepers(&tag).is_empty());
    for p in sleepers(&tag) {
        signal(p, nix::sys::signal::Signal::SIGKILL);
    }
    assert!(
        gone,
        "`env -i setsid sleep` outlived toolcell exec (cgroups: {cgroups}): {left:?}"
    );
}

#[test]
fn an_env_cleared_setsid_process_does_not_outlive_exec_with_cgroups() {
    escape_outlives_exec(true);
}

#[test]
fn an_env_cleared_setsid_process_does_not_outlive_exec_without_cgroups() {
    escape_outlives_exec(false);
}

#[test]
fn exec_tools_narrows_and_never_widens_the_configured_set() {
    let env = Env::with_config("[tools]\nenabled = [\"read_file\"]\n");
    let out = env.run(&[
        "exec",
        "--tools",
        "terminal",
        "import toolcell_tools; print('ran')",
    ]);
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(!out.stdout.contains("ran"), "{out:?}");
    assert!(out.stderr.contains("`terminal`"), "{out:?}");
    let out = env.run(&[
        "exec",
        "--tools",
        "read_file",
        "import toolcell_tools as t; print(hasattr(t, 'read_file'), hasattr(t, 'terminal'))",
    ]);
    out.expect_code(0);
    assert!(out.stdout.contains("True False"), "{out:?}");
}

/// The attack of a confined cell on a daemon's socket: once directly and
/// once from a double-forked, `setsid`'d grandchild; prints what each got.
const SOCKET_ATTACK: &str = r#"
import glob, json, os, socket, sys, time
run, mark, cwd, out = sys.argv[1:5]
socks = glob.glob(run + "/toolcell/daemon-*.sock")
req = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "execute", "params": {
    "code": "open(%r, 'w').write('pwned')" % mark, "tools": ["terminal", "write_file"],
    "mode": "project", "cwd": cwd}}) + "\n"
def attack():
    got = []
    for p in socks:
        try:
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(20)
            s.connect(p)
            s.sendall(req.encode())
            got.append(s.recv(65536).decode(errors="replace"))
        except Exception as e:
            got.append(repr(e))
    return got
print("sockets", len(socks))
print("direct", attack())
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        r = attack()
        with open(out + ".tmp", "w") as f:
            f.write(repr(r))
        os.rename(out + ".tmp", out)
    os._exit(0)
for _ in range(300):
    if os.path.exists(out):
        break
    time.sleep(0.1)
print("orphan", open(out).read())
"#;

#[test]
fn a_confined_kernel_cannot_drive_a_daemon_socket() {
    if toolcell_tools::cgroup::HostCgroup::get().is_none() {
        // confine = true refuses to start without cgroups (tested below).
        let env = Env::with_config("[execution]\nmode = \"strict\"\nconfine = true\n");
        let out = env.run(&["exec", "print(1)"]);
        assert_eq!(out.code, Some(2), "{out:?}");
        assert!(out.stderr.contains("cgroup"), "{out:?}");
        return;
    }
    // The daemon of the default configuration: every tool enabled.
    let env = Env::new();
    env.run(&["daemon", "start"]).expect_code(0);
    env.write(
        "attack.toml",
        "[execution]\nmode = \"strict\"\nconfine = true\ntimeout = 60\n[tools]\nenabled = [\"read_file\"]\n",
    );
    env.write("attack.py", SOCKET_ATTACK);
    let mark = env.path().join("pwned");
    let result = env.path().join("tmp").join("orphan.txt");
    let code = format!(
        "import sys, runpy\nsys.argv = ['attack', {run:?}, {mark:?}, {cwd:?}, {res:?}]\nrunpy.run_path({script:?}, run_name='__main__')\n",
        run = env.runtime_dir().display().to_string(),
        mark = mark.display().to_string(),
        cwd = env.path().display().to_string(),
        res = result.display().to_string(),
        script = env.path().join("attack.py").display().to_string(),
    );
    let out = env.run(&["--config", "attack.toml", "exec", &code]);
    println!("{}", out.stdout);
    out.expect_code(0);
    assert!(
        out.stdout.contains("sockets 1"),
        "the attack found no daemon socket: {out:?}"
    );
    assert!(out.stdout.contains("orphan"), "{out:?}");
    assert!(
        !out.stdout.contains("\"result\""),
        "the daemon answered a confined kernel: {out:?}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(!mark.exists(), "a confined kernel made the daemon run code");
}
