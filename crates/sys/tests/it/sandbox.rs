//! A shell in a sandbox, asked what it can see and do.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use toolcell_sys::sandbox::{Join, Layout, Net, Prepared};

/// Whether this machine lets us build a sandbox at all (root, or
/// unprivileged user namespaces). `TOOLCELL_REQUIRE=1` makes its absence
/// a failure.
fn sandbox_missing() -> bool {
    let ok = Command::new("unshare")
        .args(["--user", "--map-current-user", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("TOOLCELL_REQUIRE").as_deref() != Ok("1"),
            "user namespaces are refused on this machine (TOOLCELL_REQUIRE=1)"
        );
        eprintln!("skipped: user namespaces are refused here");
    }
    !ok
}

struct Ran {
    out: String,
    status: std::process::ExitStatus,
    pid: u32,
}

fn layout(cwd: &Path, hidden: Vec<std::path::PathBuf>, net: Net) -> Layout {
    Layout {
        writable: vec![cwd.to_path_buf()],
        hidden,
        readable: Vec::new(),
        tmp_bytes: 1 << 20,
        cwd: cwd.to_path_buf(),
        net,
    }
}

/// Runs `script` with `sh -c` in a sandbox of `layout`; returns what it
/// printed (stdout and stderr) and how it ended.
fn run(layout: &Layout, script: &str) -> Ran {
    let prepared = Prepared::new(layout).unwrap();
    let child = prepared.child();
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(script)
        .current_dir(&layout.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: enter runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || child.enter());
    }
    let mut c = cmd.spawn().unwrap();
    let started = prepared
        .started(Some(c.id()), Duration::from_secs(10))
        .unwrap();
    let mut out = String::new();
    c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    c.stderr.take().unwrap().read_to_string(&mut out).unwrap();
    let status = c.wait().unwrap();
    Ran {
        out,
        status,
        pid: started.pid,
    }
}

#[test]
fn a_sandboxed_shell_sees_only_its_own_processes_and_files() {
    if sandbox_missing() {
        return;
    }
    // Not under /tmp: the sandbox's /tmp is its own.
    let home = tempfile::tempdir_in(crate::outside_tmp::outside_tmp()).unwrap();
    let secret = home.path().join(".ssh");
    std::fs::create_dir(&secret).unwrap();
    std::fs::write(secret.join("id_rsa"), "PRIVATE").unwrap();
    let netrc = home.path().join(".netrc");
    std::fs::write(&netrc, "machine x password p").unwrap();
    let cwd = home.path().join("project");
    std::fs::create_dir(&cwd).unwrap();
    let l = layout(
        &cwd,
        vec![secret.clone(), netrc.clone()],
        Net::Isolated { listen: vec![] },
    );
    let host = std::process::id();
    let script = format!(
        "echo pid=$$; ls /proc | grep -c '^[0-9]'; \
         test -e /proc/{host} && echo SEES-HOST; \
         ls -A {ssh}; cat {netrc}; echo netrc-done; \
         echo hi > written.txt && echo wrote-cwd; \
         echo x > /tmp/t && echo wrote-tmp; \
         echo x > {home}/outside 2>/dev/null || echo outside-refused; \
         ls /dev | tr '\\n' ' '; echo; \
         pwd",
        ssh = secret.display(),
        netrc = netrc.display(),
        home = home.path().display(),
    );
    let ran = run(&l, &script);
    let out = ran.out;
    assert!(ran.status.success(), "{out}");
    assert!(out.contains("pid=2\n"), "{out}");
    assert!(!out.contains("SEES-HOST"), "{out}");
    assert!(!out.contains("id_rsa") && !out.contains("PRIVATE"), "{out}");
    assert!(
        out.contains("netrc-done") && !out.contains("password"),
        "{out}"
    );
    assert!(
        out.contains("wrote-cwd") && out.contains("wrote-tmp"),
        "{out}"
    );
    assert!(out.contains("outside-refused"), "{out}");
    assert!(!home.path().join("outside").exists());
    assert_eq!(
        std::fs::read_to_string(cwd.join("written.txt")).unwrap(),
        "hi\n"
    );
    assert!(out.contains(&format!("{}\n", cwd.display())), "{out}");
    for dev in ["null", "zero", "full", "random", "urandom", "pts", "shm"] {
        assert!(out.contains(dev), "{dev} missing: {out}");
    }
    assert!(!out.contains(" sda") && !out.contains("kmsg"), "{out}");
    assert!(ran.pid > 0);
}

#[test]
fn the_sandbox_refuses_namespaces_tracing_and_devices() {
    if sandbox_missing() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let l = layout(d.path(), vec![], Net::Isolated { listen: vec![] });
    let ran = run(
        &l,
        "unshare --user true 2>&1 || echo unshare-refused; \
         mknod dev c 1 3 2>&1 || echo mknod-refused; \
         mount -t tmpfs none /mnt 2>&1 || echo mount-refused; \
         grep CapEff /proc/self/status; grep NoNewPrivs /proc/self/status; grep Seccomp: /proc/self/status",
    );
    let out = ran.out;
    for want in ["unshare-refused", "mknod-refused", "mount-refused"] {
        assert!(out.contains(want), "{want}: {out}");
    }
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    assert!(out.contains("Seccomp:\t2"), "{out}");
}

#[test]
fn the_sandbox_has_no_network_but_its_own_listeners() {
    if sandbox_missing() {
        return;
    }
    // A server on the host's loopback.
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    let d = tempfile::tempdir().unwrap();
    let l = layout(d.path(), vec![], Net::Isolated { listen: vec![3128] });
    let prepared = Prepared::new(&l).unwrap();
    let child = prepared.child();
    let script = format!(
        "python3 -c \"
import socket
try:
    socket.create_connection(('127.0.0.1', {port}), timeout=2); print('host-reached')
except OSError as e: print('host-refused', e)
s = socket.create_connection(('127.0.0.1', 3128), timeout=5); s.sendall(b'ping'); print('listener', s.recv(4))
\""
    );
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(script)
        .current_dir(d.path())
        .stdout(Stdio::piped());
    // SAFETY: enter runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || child.enter());
    }
    let mut c = cmd.spawn().unwrap();
    let mut started = prepared
        .started(Some(c.id()), Duration::from_secs(10))
        .unwrap();
    let listener = started.listeners.remove(0);
    let (mut conn, _) = listener.accept().unwrap();
    let mut b = [0u8; 4];
    conn.read_exact(&mut b).unwrap();
    conn.write_all(b"pong").unwrap();
    let mut out = String::new();
    c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    c.wait().unwrap();
    assert_eq!(&b, b"ping");
    assert!(out.contains("host-refused"), "{out}");
    assert!(out.contains("listener b'pong'"), "{out}");
}

#[test]
fn everything_in_the_sandbox_ends_with_it_and_a_join_runs_inside() {
    if sandbox_missing() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let l = layout(d.path(), vec![], Net::Isolated { listen: vec![] });
    let prepared = Prepared::new(&l).unwrap();
    let child = prepared.child();
    // A double-forked, setsid, cleared-environment sleeper, then wait for
    // stdin to close.
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg("(setsid env -i sleep 300 &) ; echo x > /tmp/mine; echo started; read _ || true")
        .current_dir(d.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    // SAFETY: enter runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || child.enter());
    }
    let mut c = cmd.spawn().unwrap();
    let started = prepared
        .started(Some(c.id()), Duration::from_secs(10))
        .unwrap();
    let mut line = [0u8; 8];
    c.stdout.as_mut().unwrap().read_exact(&mut line).unwrap();
    // The sleeper, found from the host through the init's children.
    let sleeper =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", started.init)).unwrap();
    let others: Vec<u32> = sleeper
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .filter(|p| *p != started.pid)
        .collect();
    assert_eq!(others.len(), 1, "children of init: {sleeper}");

    // A command joined into the running sandbox sees its /tmp.
    let join = Join::open(
        started.pid,
        toolcell_sys::process::start_time(started.pid),
        d.path(),
    )
    .unwrap();
    let jc = join.child();
    let mut j = Command::new("/bin/sh");
    j.arg("-c")
        .arg("cat /tmp/mine; echo pid=$$; grep Seccomp: /proc/self/status")
        .stdout(Stdio::piped());
    // SAFETY: enter runs between fork and exec.
    unsafe {
        j.pre_exec(move || jc.enter());
    }
    let out = j.output().unwrap();
    let out = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.starts_with("x\npid="), "{out}");
    assert!(out.contains("Seccomp:\t2"), "{out}");

    drop(c.stdin.take());
    let status = c.wait().unwrap();
    assert!(status.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while toolcell_sys::process::alive(others[0]) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !toolcell_sys::process::alive(others[0]) || toolcell_sys::process::is_zombie(others[0]),
        "the setsid sleeper outlived its sandbox"
    );
}

#[test]
fn a_signal_death_inside_is_the_outer_process_s_death() {
    if sandbox_missing() {
        return;
    }
    use std::os::unix::process::ExitStatusExt;
    let d = tempfile::tempdir().unwrap();
    let l = layout(d.path(), vec![], Net::Host);
    let ran = run(&l, "kill -XCPU $$");
    assert_eq!(ran.status.signal(), Some(nix::libc::SIGXCPU), "{}", ran.out);
    let ran = run(&l, "exit 7");
    assert_eq!(ran.status.code(), Some(7));
}

#[test]
fn a_readable_path_inside_a_hidden_one_is_shown_again_read_only() {
    if sandbox_missing() {
        return;
    }
    let home = tempfile::tempdir_in(crate::outside_tmp::outside_tmp()).unwrap();
    // Like /run: a hidden directory of services, and one file in it the
    // sandbox needs (systemd's resolv.conf), deeper than the cut.
    let run_dir = home.path().join("run");
    let resolve = run_dir.join("systemd/resolve");
    std::fs::create_dir_all(&resolve).unwrap();
    let conf = resolve.join("stub-resolv.conf");
    std::fs::write(&conf, "nameserver 127.0.0.53\n").unwrap();
    std::fs::write(run_dir.join("service.pid"), "42").unwrap();
    let cwd = home.path().join("project");
    std::fs::create_dir(&cwd).unwrap();
    let mut l = layout(
        &cwd,
        vec![run_dir.clone()],
        Net::Isolated { listen: vec![] },
    );
    l.readable = vec![conf.clone()];
    let script = format!(
        "cat {conf}; ls -A {run}; ls -A {resolve}; \
         echo x >> {conf} 2>/dev/null || echo write-refused; \
         touch {run}/new 2>/dev/null || echo create-refused",
        conf = conf.display(),
        run = run_dir.display(),
        resolve = resolve.display(),
    );
    let ran = run(&l, &script);
    let out = ran.out;
    assert!(ran.status.success(), "{out}");
    assert!(out.starts_with("nameserver 127.0.0.53\n"), "{out}");
    // Only the path to it is there; the rest of the hidden dir is not.
    assert!(!out.contains("service.pid"), "{out}");
    assert!(
        out.contains("systemd\n") && out.contains("stub-resolv.conf\n"),
        "{out}"
    );
    assert!(
        out.contains("write-refused") && out.contains("create-refused"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(&conf).unwrap(),
        "nameserver 127.0.0.53\n"
    );
}
