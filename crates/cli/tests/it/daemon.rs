//! `toolcell exec --session` and `toolcell daemon`: the real binary, a real
//! daemon process, real kernels.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use crate::common::{Env, alive, eventually, signal};
use nix::sys::signal::Signal;

fn kernel_pid(env: &Env, session: &str) -> i32 {
    let st = env.daemon_status();
    common::session_pid(&st, session).unwrap_or_else(|| panic!("no session {session}: {st}"))
}

#[test]
fn state_persists_across_exec_commands_and_the_daemon_starts_on_demand() {
    let env = Env::fast();
    let st = env.run(&["daemon", "status"]);
    st.expect_code(3);
    assert!(st.stdout.contains("not running"), "{}", st.stdout);
    assert!(env.daemon_pids().is_empty());

    let out = env.run(&["exec", "--session", "a", "x = 41"]);
    out.expect_code(0);
    assert!(out.stderr.contains("new kernel"), "{}", out.stderr);
    let out = env.run(&["exec", "--session", "a", "x + 1"]);
    out.expect_code(0);
    assert_eq!(out.stdout.trim(), "42");
    assert!(out.stderr.contains("reused kernel"), "{}", out.stderr);
    assert!(out.stderr.contains("cell 2"), "{}", out.stderr);

    let st = env.run(&["daemon", "status"]);
    st.expect_code(0);
    assert!(st.stdout.contains("running (pid"), "{}", st.stdout);
    assert!(st.stdout.contains("session a"), "{}", st.stdout);
    let pids = env.daemon_pids();
    assert_eq!(pids.len(), 1, "one daemon");
    let json = env.daemon_status();
    assert_eq!(json["running"], true);
    assert_eq!(json["pid"], i64::from(pids[0]));
    assert_eq!(json["sessions"][0]["session"], "a");
    assert_eq!(json["sessions"][0]["execution_count"], 2);
    let socket = json["socket"].as_str().unwrap();
    assert!(
        socket.starts_with(env.runtime_dir().to_str().unwrap()),
        "socket under $XDG_RUNTIME_DIR: {socket}"
    );
    use std::os::unix::fs::PermissionsExt;
    let dir_mode = std::fs::metadata(std::path::Path::new(socket).parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o700);

    // Sessions are separate.
    let out = env.run(&["exec", "--session", "b", "x"]);
    out.expect_code(1);
    assert!(out.stderr.contains("NameError"), "{}", out.stderr);

    // --json through the daemon gives the same object.
    let out = env.run(&["exec", "--session", "a", "--json", "print(x)"]);
    out.expect_code(0);
    let r = out.json();
    assert_eq!(r["output"], "41\n");
    assert_eq!(r["kernel"]["reused"], true);
    assert_eq!(r["kernel"]["execution_count"], 3);
}

#[test]
fn reset_timeout_and_stdin_in_a_session() {
    let env = Env::fast();
    env.run(&["exec", "--session", "s", "y = 'kept'"])
        .expect_code(0);

    // A timeout interrupts the cell; the session's state survives.
    let out = env.run(&[
        "exec",
        "--session",
        "s",
        "--timeout",
        "1",
        "import time; time.sleep(20)",
    ]);
    out.expect_code(124);
    let out = env.run_input(&["exec", "--session", "s", "-"], Some("print(y)\n"));
    out.expect_code(0);
    assert_eq!(out.stdout, "kept\n");

    // --reset starts over.
    let out = env.run(&[
        "exec",
        "--session",
        "s",
        "--reset",
        "--json",
        "print('y' in globals())",
    ]);
    out.expect_code(0);
    let r = out.json();
    assert_eq!(r["output"], "False\n");
    assert_eq!(r["kernel"]["state_reset"], true);

    // A cell error exits 1 and keeps the session.
    env.run(&["exec", "--session", "s", "z = 5"]).expect_code(0);
    let out = env.run(&[
        "exec",
        "--session",
        "s",
        "print('to-err', file=__import__('sys').stderr)\n1/0",
    ]);
    out.expect_code(1);
    assert_eq!(
        out.stderr
            .matches("Traceback (most recent call last)")
            .count(),
        1,
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("to-err\n"), "{}", out.stderr);
    assert!(
        out.stderr.contains("[toolcell] error in "),
        "{}",
        out.stderr
    );
    let out = env.run(&["exec", "--session", "s", "print(z)"]);
    out.expect_code(0);
    assert_eq!(out.stdout, "5\n");

    // --cwd and --mode reach the daemon's kernel.
    env.write("w/marker.txt", "m");
    let out = env.run(&[
        "exec",
        "--session",
        "s",
        "--cwd",
        "w",
        "import os; print(sorted(os.listdir('.')))",
    ]);
    out.expect_code(0);
    assert_eq!(out.stdout, "['marker.txt']\n");
    let out = env.run(&[
        "exec",
        "--session",
        "s",
        "--mode",
        "strict",
        "--json",
        "print(1)",
    ]);
    out.expect_code(0);
    assert_eq!(out.json()["kernel"]["mode"], "strict");

    // --tools reaches it too.
    let out = env.run(&[
        "exec",
        "--session",
        "s",
        "--tools",
        "read_file",
        "import toolcell_tools as t; print(hasattr(t, 'read_file'), hasattr(t, 'terminal'))",
    ]);
    out.expect_code(0);
    assert_eq!(out.stdout, "True False\n");

    // --python cannot be honoured by the daemon: a usage error, not a
    // cell silently run by another interpreter.
    let out = env.run(&[
        "exec",
        "--session",
        "s",
        "--python",
        "/no/such/python",
        "print(1)",
    ]);
    out.expect_code(2);
    assert!(out.stderr.contains("--python"), "{}", out.stderr);
    assert!(out.stdout.is_empty());
}

#[test]
fn start_is_idempotent_and_stop_kills_every_kernel() {
    let env = Env::fast();
    let out = env.run(&["daemon", "start"]);
    out.expect_code(0);
    assert!(out.stdout.contains("running (pid"), "{}", out.stdout);
    let pid = env.daemon_status()["pid"].as_i64().unwrap();
    env.run(&["daemon", "start"]).expect_code(0);
    assert_eq!(
        env.daemon_status()["pid"].as_i64().unwrap(),
        pid,
        "no second daemon"
    );
    assert_eq!(env.daemon_pids().len(), 1);

    env.run(&["exec", "--session", "a", "import time"])
        .expect_code(0);
    env.run(&["exec", "--session", "b", "import time"])
        .expect_code(0);
    let kernels = [kernel_pid(&env, "a"), kernel_pid(&env, "b")];
    assert!(kernels.iter().all(|&k| alive(k)));
    let socket = env.daemon_status()["socket"].as_str().unwrap().to_string();

    let out = env.run(&["daemon", "stop"]);
    out.expect_code(0);
    assert!(
        out.stdout.contains("stopped (2 kernels killed)"),
        "{}",
        out.stdout
    );
    for k in kernels {
        assert!(!alive(k), "kernel {k} outlived `daemon stop`");
    }
    assert!(env.daemon_pids().is_empty(), "the daemon is gone");
    assert!(
        env.python_pids().is_empty(),
        "no python left: {:?}",
        env.python_pids()
    );
    assert!(!std::path::Path::new(&socket).exists(), "socket removed");
    env.run(&["daemon", "status"]).expect_code(3);

    let out = env.run(&["daemon", "stop"]);
    out.expect_code(0);
    assert!(out.stdout.contains("not running"), "{}", out.stdout);
}

#[test]
fn a_stale_socket_from_a_killed_daemon_is_replaced() {
    let env = Env::fast();
    env.run(&["exec", "--session", "a", "x = 1"]).expect_code(0);
    let st = env.daemon_status();
    let old = i32::try_from(st["pid"].as_i64().unwrap()).unwrap();
    let old_kernel = kernel_pid(&env, "a");
    let socket = st["socket"].as_str().unwrap().to_string();
    signal(old, Signal::SIGKILL);
    assert!(eventually(Duration::from_secs(5), || !alive(old)));
    assert!(
        std::path::Path::new(&socket).exists(),
        "SIGKILL leaves the socket file"
    );
    // Its kernel follows it (fd 3 EOF).
    assert!(
        eventually(Duration::from_secs(3), || !alive(old_kernel)),
        "the killed daemon's kernel outlived it"
    );
    env.run(&["daemon", "status"]).expect_code(3);

    let out = env.run(&[
        "exec",
        "--session",
        "a",
        "--json",
        "print('x' in globals())",
    ]);
    out.expect_code(0);
    assert_eq!(out.json()["output"], "False\n");
    let new = env.daemon_pids();
    assert_eq!(new.len(), 1);
    assert_ne!(new[0], old);
    assert_eq!(env.daemon_status()["pid"], i64::from(new[0]));
}

#[test]
fn racing_execs_end_with_one_daemon() {
    let env = Env::fast();
    let spawn = |session: &str| {
        env.cmd()
            .args(["exec", "--session", session, &format!("print('{session}')")])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let children: Vec<_> = ["a", "b", "c"].iter().map(|s| spawn(s)).collect();
    for (child, s) in children.into_iter().zip(["a", "b", "c"]) {
        let out = common::finish(child, common::COMMAND_LIMIT);
        out.expect_code(0);
        assert_eq!(out.stdout, format!("{s}\n"));
    }
    // Losers of the race exit at once; the winner keeps serving.
    assert!(
        eventually(Duration::from_secs(3), || env.daemon_pids().len() == 1),
        "daemons: {:?}",
        env.daemon_pids()
    );
    let st = env.daemon_status();
    assert_eq!(st["sessions"].as_array().unwrap().len(), 3, "{st}");
    // Passage of time is the subject: no second daemon appears later.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(env.daemon_pids().len(), 1);
}

#[test]
fn the_daemon_exits_when_idle() {
    let env = Env::with_config(
        "[daemon]\nidle_exit = 1\n[kernels]\nidle_timeout = 1\n[execution]\ninterrupt_grace = 1\nkill_grace = 0.5\n",
    );
    // Without sessions.
    env.run(&["daemon", "start"]).expect_code(0);
    let pid = env.daemon_pids()[0];
    assert!(
        eventually(Duration::from_secs(8), || !alive(pid)),
        "the idle daemon did not exit"
    );
    env.run(&["daemon", "status"]).expect_code(3);

    // With a session: its kernel is reaped when idle, then the daemon exits.
    env.run(&["exec", "--session", "a", "x = 1"]).expect_code(0);
    let pid = env.daemon_pids()[0];
    let kernel = kernel_pid(&env, "a");
    assert!(
        eventually(Duration::from_secs(10), || !alive(pid)),
        "the daemon did not exit after its session went idle"
    );
    assert!(!alive(kernel), "its kernel is gone too");
}

#[test]
fn a_busy_daemon_does_not_exit_when_idle_exit_passes() {
    let env = Env::with_config("[daemon]\nidle_exit = 1\n");
    let out = env.run(&[
        "exec",
        "--session",
        "a",
        "import time; time.sleep(3); print('done')",
    ]);
    out.expect_code(0);
    assert_eq!(out.stdout, "done\n");
    // The kernel is alive (idle_timeout is long): the daemon stays. The
    // passage of time is the subject: idle_exit (1 s) passes meanwhile.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(env.daemon_pids().len(), 1);
    let out = env.run(&["exec", "--session", "a", "print(time.time() > 0)"]);
    out.expect_code(0);
    assert_eq!(out.stdout, "True\n");
}

#[test]
fn an_explicit_config_gets_its_own_daemon() {
    let env = Env::fast();
    env.write("other.toml", common::FAST_CONFIG);
    env.run(&["exec", "--session", "a", "v = 'default cfg'"])
        .expect_code(0);
    env.run(&[
        "--config",
        "other.toml",
        "exec",
        "--session",
        "a",
        "v = 'other cfg'",
    ])
    .expect_code(0);
    assert_eq!(env.daemon_pids().len(), 2, "one daemon per config file");
    let out = env.run(&["exec", "--session", "a", "print(v)"]);
    assert_eq!(out.stdout, "default cfg\n");
    let out = env.run(&[
        "--config",
        "other.toml",
        "exec",
        "--session",
        "a",
        "print(v)",
    ]);
    assert_eq!(out.stdout, "other cfg\n");
    env.run(&["--config", "other.toml", "daemon", "stop"])
        .expect_code(0);
    assert_eq!(env.daemon_pids().len(), 1);
}

#[test]
fn without_xdg_runtime_dir_the_socket_is_in_a_private_temp_dir() {
    let env = Env::fast();
    let run = |args: &[&str]| {
        let mut c = env.cmd();
        c.env_remove("XDG_RUNTIME_DIR").args(args);
        common::finish(
            c.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
            common::COMMAND_LIMIT,
        )
    };
    run(&["exec", "--session", "t", "y = 2"]).expect_code(0);
    let out = run(&["exec", "--session", "t", "y * 21"]);
    out.expect_code(0);
    assert_eq!(out.stdout.trim(), "42");
    let uid = nix::unistd::getuid();
    let dir = env.path().join("tmp").join(format!("toolcell-{uid}"));
    let st: serde_json::Value =
        serde_json::from_str(&run(&["daemon", "status", "--json"]).stdout).unwrap();
    assert!(
        std::path::Path::new(st["socket"].as_str().unwrap()).starts_with(&dir),
        "{st}"
    );
    let out = run(&["daemon", "stop"]);
    out.expect_code(0);
    assert!(out.stdout.contains("1 kernel killed"), "{}", out.stdout);
}

#[test]
fn a_runtime_dir_others_can_write_is_refused() {
    let env = Env::fast();
    let dir = env.runtime_dir().join("toolcell");
    std::fs::create_dir(&dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    // Others may write to it: refused (a readable-only one of ours is
    // simply tightened to 0700).
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o775)).unwrap();
    let out = env.run(&["exec", "--session", "a", "print('ran')"]);
    assert_ne!(out.code, Some(0));
    assert!(!out.stdout.contains("ran"));
    assert!(out.stderr.contains("0700"), "{}", out.stderr);
    assert!(env.daemon_pids().is_empty());
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
}

#[test]
fn a_timeout_with_on_timeout_kill_loses_the_session_state() {
    let env = Env::with_config(
        "[execution]\non_timeout = \"kill\"\nkill_grace = 0.5\ninterrupt_grace = 1\n",
    );
    env.run(&["exec", "--session", "k", "x = 1"]).expect_code(0);
    let before = kernel_pid(&env, "k");
    let out = env.run(&[
        "exec",
        "--session",
        "k",
        "--timeout",
        "0.5",
        "--json",
        "import time; time.sleep(20)",
    ]);
    out.expect_code(124);
    let r = out.json();
    assert_eq!(r["status"], "timeout");
    assert!(r["error"].as_str().unwrap().contains("lost"), "{r}");
    assert!(!alive(before), "the kernel was killed");
    let out = env.run(&[
        "exec",
        "--session",
        "k",
        "--json",
        "print('x' in globals())",
    ]);
    out.expect_code(0);
    let r = out.json();
    assert_eq!(r["output"], "False\n");
    assert_eq!(r["kernel"]["state_reset"], true);
}

#[test]
fn the_daemon_refuses_a_client_of_another_uid() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    // Needs root (to run a client as another user) and a system python3
    // that user can execute; elsewhere there is nothing to check.
    let py = std::path::Path::new("/usr/bin/python3");
    if !nix::unistd::getuid().is_root() || !py.exists() {
        common::missing("needs root and /usr/bin/python3, to run a client as another user");
        return;
    }
    let env = Env::fast();
    env.run(&["daemon", "start"]).expect_code(0);
    let socket = std::path::PathBuf::from(env.daemon_status()["socket"].as_str().unwrap());
    // Open every directory and the socket itself to everyone, so only the
    // daemon's own peer check stands in the way.
    let mode = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    };
    let dirs = [
        env.path().to_path_buf(),
        env.runtime_dir(),
        socket.parent().unwrap().to_path_buf(),
    ];
    for d in &dirs {
        mode(d, 0o711);
    }
    mode(&socket, 0o666);
    let client = "import socket, sys\n\
        s = socket.socket(socket.AF_UNIX)\n\
        s.connect(sys.argv[1])\n\
        s.settimeout(5)\n\
        try:\n    \
        s.sendall(b'{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"sessions\"}\\n')\n    \
        data = s.recv(65536)\n\
        except OSError:\n    data = b''  # refused: closed before or after the request\n\
        print('REPLY' if data else 'NO REPLY')";
    let run_as = |uid: u32| {
        let mut c = std::process::Command::new(py);
        c.args(["-c", client]).arg(&socket).env_clear();
        if uid != 0 {
            c.uid(uid).gid(uid);
        }
        let out = c.output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
            + &String::from_utf8_lossy(&out.stderr)
    };
    let other = run_as(65534);
    let me = run_as(0);
    mode(&socket, 0o600);
    for d in &dirs {
        mode(d, 0o700);
    }
    assert_eq!(other, "NO REPLY", "a client of another uid was served");
    assert_eq!(me, "REPLY", "the same client as the owner is served");
}

/// Starts `exec --session S CODE` and waits for its first stdout line.
fn exec_running(env: &Env, session: &str, code: &str) -> std::process::Child {
    use std::io::BufRead;
    let mut child = env
        .cmd()
        .args(["exec", "--session", session, code])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "go\n");
    child
}

#[test]
fn stopping_the_daemon_under_a_running_cell_ends_that_exec() {
    let env = Env::fast();
    let code = "import time\nprint('go', flush=True)\ntime.sleep(30)";
    let child = exec_running(&env, "a", code);
    let kernel = kernel_pid(&env, "a");
    let out = env.run(&["daemon", "stop"]);
    out.expect_code(0);
    assert!(out.stdout.contains("1 kernel killed"), "{}", out.stdout);
    let out = common::finish(child, Duration::from_secs(10));
    out.expect_code(130);
    assert!(out.stderr.contains("shut down"), "{}", out.stderr);
    assert!(!alive(kernel));

    // A daemon that dies under a cell: exec fails instead of hanging.
    let child = exec_running(&env, "b", code);
    let daemon = env.daemon_pids()[0];
    signal(daemon, Signal::SIGKILL);
    let out = common::finish(child, Duration::from_secs(10));
    out.expect_code(1);
    assert!(out.stderr.contains("daemon"), "{}", out.stderr);
}

#[test]
fn a_daemon_that_cannot_start_is_reported_at_once() {
    let env = Env::fast();
    // Too long for a Unix socket path (SUN_LEN).
    let deep = env.path().join("r".repeat(100));
    std::fs::create_dir(&deep).unwrap();
    let t0 = std::time::Instant::now();
    let mut c = env.cmd();
    c.env("XDG_RUNTIME_DIR", &deep)
        .args(["exec", "--session", "a", "print('ran')"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = common::finish(c.spawn().unwrap(), common::COMMAND_LIMIT);
    out.expect_code(1);
    assert!(out.stdout.is_empty());
    assert!(
        out.stderr.contains("the daemon failed to start"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(".sock"),
        "names the socket: {}",
        out.stderr
    );
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "reported after {:?}, not at once",
        t0.elapsed()
    );
}

/// Runs the binary with `args` from `dir` (not the environment's directory).
fn run_from(env: &Env, dir: &std::path::Path, args: &[&str]) -> common::Out {
    let child = env
        .cmd()
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::finish(child, common::COMMAND_LIMIT)
}

#[test]
fn one_session_name_from_another_directory_is_another_kernel_and_both_say_so() {
    // The configuration is the user's (found from any directory), so both
    // commands talk to the same daemon.
    let env = Env::new();
    env.write("config/toolcell/toolcell.toml", common::FAST_CONFIG);
    let here = env.canonical().join("proj");
    let there = env.canonical().join("elsewhere");
    std::fs::create_dir_all(&here).unwrap();
    std::fs::create_dir_all(&there).unwrap();

    let first = run_from(&env, &here, &["exec", "--session", "cw2", "x = 1"]);
    first.expect_code(0);
    assert!(!first.stderr.contains("warning"), "{}", first.stderr);

    let out = run_from(
        &env,
        &there,
        &["exec", "--session", "cw2", "print('x' in globals())"],
    );
    out.expect_code(0);
    assert_eq!(
        out.stdout.trim(),
        "False",
        "a separate kernel: {}",
        out.stderr
    );
    let warning = out
        .stderr
        .lines()
        .find(|l| l.starts_with("warning:"))
        .unwrap_or_else(|| panic!("no warning line: {}", out.stderr));
    assert!(
        warning.contains("session \"cw2\" already has a kernel with a different working directory"),
        "{warning}"
    );
    assert!(
        warning.contains(here.to_str().unwrap()) && warning.contains(there.to_str().unwrap()),
        "the warning names both directories: {warning}"
    );
    assert!(warning.contains("its own state"), "{warning}");
    // Only the cell that started the second kernel warns.
    let again = run_from(&env, &there, &["exec", "--session", "cw2", "y = 2"]);
    again.expect_code(0);
    assert!(!again.stderr.contains("warning"), "{}", again.stderr);

    // `daemon status` lists cw2 twice, each with its working directory.
    let st = run_from(&env, &here, &["daemon", "status"]);
    st.expect_code(0);
    let lines: Vec<&str> = st
        .stdout
        .lines()
        .filter(|l| l.contains("session cw2:"))
        .collect();
    assert_eq!(lines.len(), 2, "{}", st.stdout);
    assert!(
        lines
            .iter()
            .any(|l| l.ends_with(&format!("· cwd {}", here.display())))
            && lines
                .iter()
                .any(|l| l.ends_with(&format!("· cwd {}", there.display()))),
        "{}",
        st.stdout
    );
    // The JSON (the daemon's `sessions`) names the differing parts.
    let json = run_from(&env, &here, &["daemon", "status", "--json"]).json();
    let sessions = json["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2, "{json}");
    for s in sessions {
        assert_eq!(s["differs"], serde_json::json!(["cwd"]), "{json}");
    }
    // A session name used once has no `differs`.
    run_from(&env, &here, &["exec", "--session", "solo", "1"]).expect_code(0);
    let json = run_from(&env, &here, &["daemon", "status", "--json"]).json();
    let solo = json["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session"] == "solo")
        .unwrap();
    assert!(solo.get("differs").is_none(), "{json}");
}

#[test]
fn review_13_a_squatted_runtime_dir_falls_back_and_exec_session_works() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !nix::unistd::getuid().is_root() {
        common::missing("needs root, to make a directory that belongs to another user");
        return;
    }
    let env = Env::fast();
    let tmp = env.path().join("tmp");
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let uid = nix::unistd::getuid();
    // Another user got to `<tmp>/toolcell-<uid>` first.
    let squatted = tmp.join(format!("toolcell-{uid}"));
    std::fs::create_dir(&squatted).unwrap();
    std::fs::write(squatted.join("planted"), "x").unwrap();
    for p in [&squatted, &squatted.join("planted")] {
        nix::unistd::chown(p, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    }
    std::fs::set_permissions(&squatted, std::fs::Permissions::from_mode(0o777)).unwrap();
    let run = |args: &[&str]| {
        let mut c = env.cmd();
        c.env_remove("XDG_RUNTIME_DIR").args(args);
        common::finish(
            c.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
            common::COMMAND_LIMIT,
        )
    };
    run(&["exec", "--session", "t", "y = 2"]).expect_code(0);
    // The next command finds the same daemon: the session's state is there.
    let out = run(&["exec", "--session", "t", "y * 21"]);
    out.expect_code(0);
    assert_eq!(out.stdout.trim(), "42");
    let st: serde_json::Value =
        serde_json::from_str(&run(&["daemon", "status", "--json"]).stdout).unwrap();
    let socket = std::path::PathBuf::from(st["socket"].as_str().unwrap());
    let dir = socket.parent().unwrap();
    assert_eq!(dir.parent(), Some(tmp.as_path()), "{st}");
    assert!(
        dir.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(&format!("toolcell-{uid}-")),
        "{st}"
    );
    let md = std::fs::metadata(dir).unwrap();
    assert_eq!((md.uid(), md.mode() & 0o7777), (uid.as_raw(), 0o700));
    // The squatter's directory is as it was.
    let md = std::fs::metadata(&squatted).unwrap();
    assert_eq!((md.uid(), md.mode() & 0o7777), (65534, 0o777));
    let names: Vec<String> = std::fs::read_dir(&squatted)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["planted"]);
    let out = run(&["daemon", "stop"]);
    out.expect_code(0);
    assert!(out.stdout.contains("1 kernel killed"), "{}", out.stdout);
}

#[test]
fn a_daemon_started_before_an_edit_of_the_configuration_is_replaced_when_idle_and_named_when_busy()
{
    let env = Env::fast();
    env.run(&["exec", "--session", "s", "x = 1"]).expect_code(0);
    let first = env.daemon_status()["pid"].as_i64().unwrap();
    // Edited while the session holds a kernel: the command is refused with
    // what to run, and the daemon and its session are left alone.
    env.write(
        "toolcell.toml",
        &format!(
            "{}\n[tools]\nenabled = [\"read_file\"]\n",
            common::FAST_CONFIG
        ),
    );
    let busy = env.run(&["exec", "--session", "s", "print(x)"]);
    busy.expect_code(2);
    assert!(
        busy.stderr
            .contains("was started from an earlier version of")
            && busy.stderr.contains("toolcell.toml")
            && busy.stderr.contains("run `toolcell daemon stop`"),
        "{}",
        busy.stderr
    );
    assert_eq!(env.daemon_status()["pid"].as_i64(), Some(first));
    env.run(&["daemon", "stop"]).expect_code(0);

    // Idle (no session): replaced at once, with a note, and the new daemon
    // runs the new configuration.
    env.run(&["daemon", "start"]).expect_code(0);
    let idle = env.daemon_status()["pid"].as_i64().unwrap();
    env.write(
        "toolcell.toml",
        &format!(
            "{}\n[tools]\nenabled = [\"terminal\"]\n",
            common::FAST_CONFIG
        ),
    );
    let out = env.run(&[
        "exec",
        "--session",
        "s",
        "print(terminal('echo from the new config')['output'].strip())",
    ]);
    out.expect_code(0);
    assert_eq!(out.stdout, "from the new config\n");
    assert!(
        out.stderr.contains(&format!(
            "restarted the session daemon (pid {idle}), which was started from an earlier version of"
        )),
        "{}",
        out.stderr
    );
    let now = env.daemon_status()["pid"].as_i64().unwrap();
    assert_ne!(now, idle);
    let idle = i32::try_from(idle).unwrap();
    assert!(eventually(Duration::from_secs(10), || !alive(idle)));
    // The same binary and configuration again: no restart, no note.
    let again = env.run(&["exec", "--session", "s", "print(1)"]);
    again.expect_code(0);
    assert!(!again.stderr.contains("restarted"), "{}", again.stderr);
    assert_eq!(env.daemon_status()["pid"].as_i64(), Some(now));
}

#[test]
fn a_daemon_of_another_toolcell_binary_is_replaced_when_idle() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::fast();
    // An older build: another file with the same code.
    let old = env.path().join("old-toolcell");
    std::fs::copy(common::BIN, &old).unwrap();
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = env.cmd_of(&old).args(["daemon", "start"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let first = env.daemon_status()["pid"].as_i64().unwrap();
    let exe = |pid: i64| std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert_eq!(exe(first), std::fs::canonicalize(&old).unwrap());

    let out = env.run(&["exec", "--session", "s", "print(6 * 7)"]);
    out.expect_code(0);
    assert_eq!(out.stdout, "42\n");
    assert!(
        out.stderr.contains(&format!(
            "restarted the session daemon (pid {first}), which was started from another toolcell binary"
        )),
        "{}",
        out.stderr
    );
    let now = env.daemon_status()["pid"].as_i64().unwrap();
    assert_eq!(exe(now), std::fs::canonicalize(common::BIN).unwrap());
}
