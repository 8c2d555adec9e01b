//! Issue-14 hardening through the real binary: no process a cell starts
//! outlives `toolcell exec` (cgroup path and subreaper path), and a request's
//! tools never widen the configured set.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use crate::common::*;
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

/// The host's own cgroup (`toolcell-<pid>`, the parent of its kernels')
/// goes when the host ends, not at the next host's start.
#[test]
fn exec_removes_its_cgroup_when_it_ends() {
    let Some(mount) = root_with_cgroups("exec_removes_its_cgroup_when_it_ends") else {
        return;
    };
    // The exec starts in this test's cgroup and makes its own beneath it.
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let rel = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap()
        .to_string();
    let base = std::path::Path::new(&mount).join(rel.trim_start_matches('/'));
    let env = Env::fast();
    let child = env
        .cmd()
        .args(["exec", "import time; time.sleep(1); print('done')"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let dir = base.join(format!("toolcell-{}", child.id()));
    assert!(
        eventually(Duration::from_secs(10), || dir.is_dir()),
        "no host cgroup at {} while exec ran",
        dir.display()
    );
    let out = finish(child, Duration::from_secs(60));
    out.expect_code(0);
    assert_eq!(out.stdout, "done\n");
    assert!(!dir.exists(), "{} outlived the exec", dir.display());
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
    if toolcell_sys::cgroup::HostCgroup::get().is_none() {
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
        // Unsandboxed: Landlock and cgroups as the layers under the
        // sandbox, which hides the daemon's socket altogether.
        "[execution]\nmode = \"strict\"\nconfine = true\ntimeout = 60\n[tools]\nenabled = [\"read_file\"]\n[sandbox]\nmode = \"off\"\n",
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
    // Passage of time is the subject: a daemon that wrongly took the
    // request would have run its code by now.
    std::thread::sleep(Duration::from_millis(500));
    assert!(!mark.exists(), "a confined kernel made the daemon run code");
}

// ---------------------------------------------------------------------------
// Review 33: a cell acting for the host or for another session.
// ---------------------------------------------------------------------------

/// Where cgroup v2 is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified`
/// on a hybrid host).
fn cgroup2_mount() -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        post.starts_with("cgroup2 ")
            .then(|| pre.split(' ').nth(4).map(str::to_owned))?
    })
}

/// Where cgroup v2 is mounted, when this test runs as root and the host
/// makes per-kernel cgroups (the hosts where a kernel can move itself
/// between cgroups); prints why not when it does not.
fn root_with_cgroups(test: &str) -> Option<String> {
    let mount = cgroup2_mount().filter(|_| {
        nix::unistd::getuid().is_root() && toolcell_sys::cgroup::HostCgroup::get().is_some()
    });
    if mount.is_none() {
        crate::common::missing(&format!(
            "{test}: needs root and cgroup v2 (only there can a process change cgroups)"
        ));
    }
    mount
}

/// The cell's own cgroup v2 path, in Python.
const OWN_CGROUP: &str =
    "[l[3:] for l in open('/proc/self/cgroup').read().splitlines() if l.startswith('0::')][0]";

/// From the kernel: finds the host (the nearest ancestor named
/// `toolcell`) and tries what the review did to it.
const PROBE_HOST: &str = r#"
import os
def comm(p):
    return open(f'/proc/{p}/comm').read().strip()
def parent(p):
    return int(open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[1])
host = parent(os.getpid())
while comm(host) != 'toolcell':
    host = parent(host)
for what, mode in [('environ', 'rb'), ('fd/1', 'wb'), ('fd/0', 'rb'), ('mem', 'rb')]:
    try:
        with open(f'/proc/{host}/{what}', mode, buffering=0) as f:
            print(what, 'OPENED')
    except PermissionError:
        print(what, 'denied')
"#;

#[test]
fn review_01_a_cell_cannot_open_the_hosts_proc_fds_environ_or_memory() {
    use std::os::unix::process::CommandExt;
    let env = Env::fast();
    let mut cmd = env.cmd();
    if nix::unistd::getuid().is_root() {
        // Root with capabilities may open anything; without any, root is
        // held to the rules a same-uid user meets, which is what a
        // non-root host's kernels face.
        // SAFETY: prctl in the child before exec; no allocation.
        unsafe {
            cmd.pre_exec(|| {
                for cap in 0..64 {
                    if nix::libc::prctl(nix::libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                        let e = std::io::Error::last_os_error();
                        if e.raw_os_error() != Some(nix::libc::EINVAL) {
                            return Err(e);
                        }
                    }
                }
                Ok(())
            });
        }
    }
    cmd.env("OPENAI_API_KEY", "sk-review01-Vq3Rk8Zt1Wn6Lp0Xs5Hd9Bc2Jf7");
    let mut serve = Serve::spawn({
        cmd.arg("serve");
        cmd
    });
    let r = serve.call(1, "execute", serde_json::json!({"code": PROBE_HOST}));
    assert_eq!(
        r["result"]["output"], "environ denied\nfd/1 denied\nfd/0 denied\nmem denied\n",
        "{r}"
    );
    // And the host still answers.
    let r = serve.call(2, "execute", serde_json::json!({"code": "print(6 * 7)"}));
    assert_eq!(r["result"]["output"], "42\n", "{r}");
}

/// Started by the test, not by a kernel: joins the kernel's cgroup, takes
/// its token from its environment and calls `write_file` on its socket.
const JOIN_CGROUP: &str = r#"
import json, os, socket, sys
kpid, cg, target, mount = sys.argv[1:5]
env = dict(kv.split(b'=', 1) for kv in open(f'/proc/{kpid}/environ', 'rb').read().split(b'\0') if b'=' in kv)
endpoint = env[b'TOOLCELL_RPC'].decode()[len('unix:'):]
token = env[b'TOOLCELL_RPC_TOKEN'].decode()
with open(f'{mount}{cg}/cgroup.procs', 'w') as f:
    f.write(str(os.getpid()))
print('joined', '0::' + cg in open('/proc/self/cgroup').read().splitlines())
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(endpoint)
s.sendall((json.dumps({'tool': 'write_file', 'args': {'path': target, 'content': 'pwned'}, 'token': token}) + '\n').encode())
print(s.makefile().readline().strip())
"#;

#[test]
fn review_02_a_process_that_joins_a_kernels_cgroup_cannot_use_its_socket() {
    let Some(mount) = root_with_cgroups("review_02") else {
        return;
    };
    // Unsandboxed: the cgroup layer under the sandbox.
    let env = Env::fast_unsandboxed();
    let info = env.path().join("tmp").join("kernel-info");
    let done = env.path().join("tmp").join("done");
    let target = env.path().join("pwned.txt");
    env.write("join.py", JOIN_CGROUP);
    let mut serve = Serve::start(&env, &[]);
    // The kernel's cell stays running (so its token is live) until the
    // attack is over.
    let code = format!(
        "import os, time\n\
         open({info:?} + '.tmp', 'w').write(f\"{{os.getpid()}} {{{OWN_CGROUP}}}\")\n\
         os.rename({info:?} + '.tmp', {info:?})\n\
         for _ in range(600):\n\
         \x20   if os.path.exists({done:?}): break\n\
         \x20   time.sleep(0.05)\n\
         print('cell done')\n",
        info = info.display().to_string(),
        done = done.display().to_string(),
    );
    serve.request(
        1,
        "execute",
        serde_json::json!({"code": code, "session": "a"}),
    );
    assert!(
        eventually(Duration::from_secs(30), || info.exists()),
        "the cell never started"
    );
    let text = std::fs::read_to_string(&info).unwrap();
    let (kpid, cg) = text.split_once(' ').unwrap();
    let out = std::process::Command::new("python3")
        .arg(env.path().join("join.py"))
        .args([kpid, cg, &target.display().to_string(), &mount])
        .output()
        .unwrap();
    std::fs::write(&done, "").unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("joined True\n"),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("connection refused: only the kernel this socket belongs to"),
        "{stdout}"
    );
    let (r, _) = serve.until_id(&serde_json::json!(1), Duration::from_secs(60));
    assert_eq!(r["result"]["output"], "cell done\n", "{r}");
    assert_eq!(r["result"]["tool_calls_made"], 0, "{r}");
    assert!(
        !target.exists(),
        "a process outside the kernel wrote with its token"
    );
}

/// From a cell: a double-forked, `setsid`'d grandchild moves itself to the
/// root cgroup (out of every kernel cgroup), then asks the daemon to run
/// code with tools this session was not given.
const LEAVE_AND_DRIVE: &str = r#"
import glob, json, os, socket, sys, time
run, mark, cwd, out, mount = sys.argv[1:6]
socks = glob.glob(run + "/toolcell/daemon-*.sock")
req = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "execute", "params": {
    "code": "open(%r, 'w').write('pwned')" % mark, "tools": ["terminal", "write_file"],
    "cwd": cwd}}) + "\n"
print("sockets", len(socks))
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(mount + '/cgroup.procs', 'w') as f:
            f.write(str(os.getpid()))
        got = [l for l in open('/proc/self/cgroup').read().splitlines() if l.startswith('0::')]
        for p in socks:
            try:
                s = socket.socket(socket.AF_UNIX)
                s.settimeout(20)
                s.connect(p)
                s.sendall(req.encode())
                got.append(s.recv(65536).decode(errors="replace"))
            except Exception as e:
                got.append(repr(e))
        with open(out + ".tmp", "w") as f:
            f.write(repr(got))
        os.rename(out + ".tmp", out)
    os._exit(0)
for _ in range(300):
    if os.path.exists(out):
        break
    time.sleep(0.1)
print("orphan", open(out).read())
"#;

#[test]
fn review_02_a_process_that_left_its_kernels_cgroup_cannot_drive_a_daemon() {
    let Some(mount) = root_with_cgroups("review_02 daemon") else {
        return;
    };
    let env = Env::new();
    env.run(&["daemon", "start"]).expect_code(0);
    env.write(
        "attack.toml",
        // Unsandboxed: the cgroup check as the layer under the sandbox.
        "[execution]\ntimeout = 60\n[tools]\nenabled = [\"read_file\"]\n[sandbox]\nmode = \"off\"\n",
    );
    env.write("attack.py", LEAVE_AND_DRIVE);
    let mark = env.path().join("pwned");
    let result = env.path().join("tmp").join("orphan.txt");
    let code = format!(
        "import sys, runpy\nsys.argv = ['attack', {run:?}, {mark:?}, {cwd:?}, {res:?}, {mount:?}]\nrunpy.run_path({script:?}, run_name='__main__')\n",
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
        "no daemon socket found: {out:?}"
    );
    assert!(
        out.stdout.contains("orphan ['0::/'"),
        "the grandchild did not leave its cgroup: {out:?}"
    );
    assert!(
        !out.stdout.contains("\"result\""),
        "the daemon answered a process a kernel started: {out:?}"
    );
    // Passage of time is the subject: a daemon that wrongly took the
    // request would have run its code by now.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !mark.exists(),
        "the daemon ran code for a process a kernel started"
    );
}

#[test]
fn review_05_a_process_that_left_its_kernels_cgroup_ends_with_its_session() {
    let Some(mount) = root_with_cgroups("review_05") else {
        return;
    };
    // Unsandboxed: the cgroup layer under the sandbox.
    let env = Env::fast_unsandboxed();
    let tag = format!("7775{}", std::process::id() % 10_000);
    let code = format!(
        "import os, subprocess, time\n\
         subprocess.run(['/bin/sh', '-c', 'sh -c \"echo \\$\\$ > {mount}/cgroup.procs && exec env -i setsid sleep {tag}\" </dev/null >/dev/null 2>&1 &'])\n\
         time.sleep(0.5)\n\
         for p in os.listdir('/proc'):\n\
         \x20   try:\n\
         \x20       if open(f'/proc/{{p}}/cmdline').read().split('\\0')[:2] == ['sleep', '{tag}']:\n\
         \x20           print('left', [l for l in open(f'/proc/{{p}}/cgroup').read().splitlines() if l.startswith('0::')])\n\
         \x20   except OSError:\n\
         \x20       pass\n"
    );
    // A long-lived host: the session ends, the host goes on serving.
    let mut serve = Serve::start(&env, &[]);
    let r = serve.call(
        1,
        "execute",
        serde_json::json!({"code": code, "session": "a"}),
    );
    assert_eq!(
        r["result"]["output"], "left ['0::/']\n",
        "the sleeper did not leave its cgroup: {r}"
    );
    assert_eq!(sleepers(&tag).len(), 1, "{r}");
    let r = serve.call(2, "shutdown_session", serde_json::json!({"session": "a"}));
    assert!(r.get("result").is_some(), "{r}");
    let left = sleepers(&tag);
    let gone = eventually(Duration::from_secs(5), || sleepers(&tag).is_empty());
    for p in sleepers(&tag) {
        signal(p, nix::sys::signal::Signal::SIGKILL);
    }
    assert!(
        gone,
        "a process that left its cgroup outlived its session: {left:?}"
    );
    // The host is still serving.
    let r = serve.call(
        3,
        "execute",
        serde_json::json!({"code": "print(6 * 7)", "session": "b"}),
    );
    assert_eq!(r["result"]["output"], "42\n", "{r}");
}
