//! `toolcell exec` without a session: the real binary, a real kernel.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use crate::common::Env;
use serde_json::Value;

/// The one status line on stderr.
fn status_line(stderr: &str) -> &str {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("[toolcell] "))
        .collect();
    assert_eq!(lines.len(), 1, "exactly one status line:\n{stderr}");
    lines[0]
}

#[test]
fn code_argument_human_output() {
    let env = Env::fast();
    let out = env.run(&[
        "exec",
        "print(1 + 1)\nimport sys; print('to-err', file=sys.stderr)",
    ]);
    out.expect_code(0);
    assert_eq!(out.stdout, "2\n");
    assert!(out.stderr.contains("to-err\n"), "{}", out.stderr);
    let status = status_line(&out.stderr);
    assert!(status.starts_with("[toolcell] success in "), "{status}");
    assert!(status.contains("0 tool calls"), "{status}");
    assert!(status.contains("new kernel"), "{status}");
}

#[test]
fn the_value_of_a_last_expression_is_shown() {
    let env = Env::fast();
    let out = env.run(&["exec", "x = 41\nx + 1"]);
    out.expect_code(0);
    assert_eq!(out.stdout.trim(), "42");
}

#[test]
fn code_from_file_dash_and_plain_stdin() {
    let env = Env::fast();
    env.write("cell.py", "for i in range(3):\n    print('file', i)\n");
    let out = env.run(&["exec", "-f", "cell.py"]);
    out.expect_code(0);
    assert_eq!(out.stdout, "file 0\nfile 1\nfile 2\n");
    let out = env.run(&["exec", "--file", "cell.py"]);
    out.expect_code(0);
    assert_eq!(out.stdout, "file 0\nfile 1\nfile 2\n");

    let out = env.run_input(&["exec", "-"], Some("print('dash')\n"));
    out.expect_code(0);
    assert_eq!(out.stdout, "dash\n");

    let out = env.run_input(&["exec"], Some("print('stdin')\n"));
    out.expect_code(0);
    assert_eq!(out.stdout, "stdin\n");

    // Nothing on stdin and no code: a usage error, no kernel.
    let out = env.run_input(&["exec"], Some(""));
    out.expect_code(2);
    assert!(out.stderr.contains("empty"), "{}", out.stderr);
}

fn assert_result_shape(r: &Value) {
    for key in [
        "status",
        "output",
        "exit_code",
        "tool_calls_made",
        "duration_seconds",
        "kernel",
        "stdout_truncated",
        "stdout_bytes_captured",
        "stdout_bytes_total",
        "stdout_bytes_omitted",
    ] {
        assert!(r.get(key).is_some(), "result lacks {key}: {r}");
    }
    for key in [
        "id",
        "mode",
        "python",
        "reused",
        "execution_count",
        "state_reset",
    ] {
        assert!(r["kernel"].get(key).is_some(), "kernel lacks {key}: {r}");
    }
    let d = r["duration_seconds"].as_f64().unwrap();
    assert!(
        d >= 0.0 && (d * 100.0 - (d * 100.0).round()).abs() < 1e-6,
        "2 decimals: {d}"
    );
}

#[test]
fn json_prints_the_result_object() {
    let env = Env::fast();
    let out = env.run(&["exec", "--json", "print('hi')"]);
    out.expect_code(0);
    let r = out.json();
    assert_result_shape(&r);
    assert_eq!(r["status"], "success");
    assert_eq!(r["output"], "hi\n");
    assert_eq!(r["exit_code"], 0);
    assert_eq!(r["tool_calls_made"], 0);
    assert_eq!(r["stdout_truncated"], false);
    assert_eq!(r["stdout_bytes_total"], 3);
    assert_eq!(r["kernel"]["reused"], false);
    assert_eq!(r["kernel"]["state_reset"], false);
    assert_eq!(r["kernel"]["execution_count"], 1);
    assert_eq!(r["kernel"]["mode"], "project");
    assert!(
        r.get("error").is_none(),
        "optional fields omitted when empty"
    );
    assert!(
        !out.stderr.contains("[toolcell]"),
        "no status line with --json"
    );

    let out = env.run(&["exec", "--json", "raise ValueError('boom')"]);
    out.expect_code(1);
    let r = out.json();
    assert_result_shape(&r);
    assert_eq!(r["status"], "error");
    assert_eq!(r["exit_code"], 1);
    let output = r["output"].as_str().unwrap();
    assert!(output.contains("\n--- stderr ---\n") || output.starts_with("--- stderr ---"));
    assert!(output.contains("ValueError: boom"), "{output}");
    assert!(r["error"].as_str().unwrap().contains("ValueError"), "{r}");
}

#[test]
fn a_cell_error_exits_1_with_the_traceback_on_stderr() {
    let env = Env::fast();
    let out = env.run(&["exec", "print('before')\n1/0"]);
    out.expect_code(1);
    assert_eq!(out.stdout, "before\n");
    assert!(out.stderr.contains("ZeroDivisionError"), "{}", out.stderr);
    assert!(
        status_line(&out.stderr).starts_with("[toolcell] error in "),
        "{}",
        out.stderr
    );
}

#[test]
fn system_exit_codes() {
    let env = Env::fast();
    let out = env.run(&["exec", "--json", "import sys; sys.exit(0)"]);
    out.expect_code(0);
    assert_eq!(out.json()["kernel"]["ended"], true);
    let out = env.run(&["exec", "--json", "import sys; sys.exit(3)"]);
    out.expect_code(1);
    let r = out.json();
    assert_eq!(r["status"], "error");
    assert_eq!(r["exit_code"], 3);
}

#[test]
fn a_kernel_that_vanishes_mid_cell_is_reported_not_a_host_panic() {
    // `os._exit` closes the runner's stdout and stderr at once: the host's
    // reader sees both ends in one round (a wait with no pipe left to wait
    // on once panicked there).
    let env = Env::fast();
    for _ in 0..5 {
        let out = env.run(&[
            "exec",
            "--json",
            "print('bye', flush=True)\nimport os; os._exit(5)",
        ]);
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
        out.expect_code(1);
        let r = out.json();
        assert_eq!(r["status"], "error", "{r}");
        assert!(r["output"].as_str().unwrap().contains("bye"), "{r}");
        assert!(r["error"].as_str().unwrap().contains("kernel"), "{r}");
    }
}

#[test]
fn timeout_exits_124_and_the_flag_overrides_the_config() {
    let env = Env::fast(); // config says 30 s
    let t0 = Instant::now();
    let out = env.run(&[
        "exec",
        "--timeout",
        "1",
        "import time\nprint('start', flush=True)\ntime.sleep(20)",
    ]);
    out.expect_code(124);
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "the 1 s timeout was honoured"
    );
    assert_eq!(out.stdout, "start\n");
    assert!(
        status_line(&out.stderr).starts_with("[toolcell] timeout in "),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("timeout"), "{}", out.stderr);

    let out = env.run(&["exec", "--json", "--timeout", "0.5", "while True: pass"]);
    out.expect_code(124);
    let r = out.json();
    assert_eq!(r["status"], "timeout");
    assert_eq!(r["exit_code"], -1);
    assert!(r["error"].as_str().is_some());
}

#[test]
fn timeout_from_the_config_file() {
    let env = Env::with_config("[execution]\ntimeout = 1\ninterrupt_grace = 1\nkill_grace = 0.5\n");
    let out = env.run(&["exec", "import time; time.sleep(20)"]);
    out.expect_code(124);
}

#[test]
fn keyboard_interrupt_in_the_cell_exits_130() {
    let env = Env::fast();
    let out = env.run(&["exec", "raise KeyboardInterrupt"]);
    out.expect_code(130);
    assert!(
        status_line(&out.stderr).starts_with("[toolcell] interrupted in "),
        "{}",
        out.stderr
    );
    let out = env.run(&["exec", "--json", "raise KeyboardInterrupt"]);
    out.expect_code(130);
    assert_eq!(out.json()["status"], "interrupted");
}

#[test]
fn strict_mode_runs_in_a_private_temp_dir() {
    let env = Env::fast();
    let code = "import os, stat\nst = os.stat('.')\nprint(os.getcwd())\nprint(oct(st.st_mode & 0o777))\nopen('w.txt', 'w').write('x')";
    let out = env.run(&["exec", "--mode", "strict", code]);
    out.expect_code(0);
    let mut lines = out.stdout.lines();
    let cwd = lines.next().unwrap();
    let mode = lines.next().unwrap();
    assert_ne!(std::path::Path::new(cwd), env.canonical());
    assert_eq!(mode, "0o700", "private: {cwd}");
    assert!(
        !env.path().join("w.txt").exists(),
        "strict writes stay out of the cwd"
    );

    let out = env.run(&["exec", "--json", "--mode", "strict", "print(1)"]);
    assert_eq!(out.json()["kernel"]["mode"], "strict");

    // Project mode (the default) runs in the current directory.
    let out = env.run(&["exec", "import os; print(os.getcwd())"]);
    assert_eq!(out.stdout.trim(), env.canonical().to_str().unwrap());
}

#[test]
fn tools_flag_leaves_other_tools_out() {
    let env = Env::fast();
    env.write("notes.txt", "alpha\nbeta\n");
    let code = "import toolcell_tools as t\n\
                print(hasattr(t, 'read_file'), hasattr(t, 'terminal'), hasattr(t, 'write_file'))\n\
                print(read_file('notes.txt')['content'].split())";
    let out = env.run(&["exec", "--json", "--tools", "read_file", code]);
    out.expect_code(0);
    let r = out.json();
    let output = r["output"].as_str().unwrap();
    assert!(output.starts_with("True False False\n"), "{output}");
    assert!(
        output.contains("alpha") && output.contains("beta"),
        "{output}"
    );
    assert_eq!(r["tool_calls_made"], 1);

    let out = env.run(&["exec", "--json", "--tools", "read_file", "terminal('ls')"]);
    out.expect_code(1);
    let r = out.json();
    assert!(r["output"].as_str().unwrap().contains("NameError"), "{r}");

    let out = env.run(&[
        "exec",
        "--json",
        "--tools",
        "read_file",
        "from toolcell_tools import terminal",
    ]);
    out.expect_code(1);
    let hint = out.json()["hint"].as_str().unwrap_or_default().to_string();
    assert!(
        hint.contains("read_file"),
        "the hint lists what is importable: {hint}"
    );

    // The status line counts tool calls.
    let out = env.run(&[
        "exec",
        "read_file('notes.txt'); read_file('notes.txt'); None",
    ]);
    out.expect_code(0);
    assert!(
        status_line(&out.stderr).contains("2 tool calls"),
        "{}",
        out.stderr
    );
}

#[test]
fn cwd_flag_sets_the_kernel_directory() {
    let env = Env::fast();
    env.write("sub/dir/data.txt", "in sub\n");
    let out = env.run(&[
        "exec",
        "--cwd",
        "sub/dir",
        "import os; print(os.getcwd()); print(open('data.txt').read(), end='')",
    ]);
    out.expect_code(0);
    let want = env.canonical().join("sub/dir");
    assert_eq!(out.stdout, format!("{}\nin sub\n", want.display()));

    // read_file resolves relative paths against it too.
    let out = env.run(&[
        "exec",
        "--cwd",
        "sub/dir",
        "print(read_file('data.txt')['content'], end='')",
    ]);
    out.expect_code(0);
    assert!(out.stdout.contains("in sub"), "{}", out.stdout);
}

#[test]
fn reset_without_a_session_still_runs_in_a_fresh_kernel() {
    let env = Env::fast();
    let out = env.run(&["exec", "--json", "--reset", "print('x' in globals())"]);
    out.expect_code(0);
    let r = out.json();
    assert_eq!(r["output"], "False\n");
    assert_eq!(r["kernel"]["execution_count"], 1);
}

#[test]
fn output_is_cleaned() {
    let env = Env::fast();
    let out = env.run(&[
        "exec",
        "print('\\x1b[31mred\\x1b[0m')\nprint('key sk-proj-' + 'A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6')",
    ]);
    out.expect_code(0);
    assert!(out.stdout.starts_with("red\n"), "{:?}", out.stdout);
    assert!(!out.stdout.contains('\x1b'));
    assert!(out.stdout.contains("«redacted:"), "{}", out.stdout);
    assert!(
        !out.stdout.contains("A1b2C3d4E5f6G7h8I9j0"),
        "{}",
        out.stdout
    );
}

#[test]
fn python_flag_picks_the_interpreter() {
    let env = Env::fast();
    let real = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    let real = String::from_utf8(real.stdout).unwrap().trim().to_string();
    let out = env.run(&[
        "exec",
        "--python",
        &real,
        "import sys; print(sys.executable)",
    ]);
    out.expect_code(0);
    assert_eq!(out.stdout.trim(), real);

    let out = env.run(&["exec", "--python", "/no/such/python", "print('ran')"]);
    assert_ne!(out.code, Some(0));
    assert!(!out.stdout.contains("ran"));
    assert!(out.stderr.contains("/no/such/python"), "{}", out.stderr);
}

#[test]
fn long_output_is_cut_and_spilled_to_the_user_cache_dir() {
    let env = Env::fast();
    // 2000 distinct lines of 50 letters (nothing to fold): 102 000 bytes.
    const LINES: &str = "import random\nrandom.seed(7)\nprint('\\n'.join(''.join(random.choice('ghijklmnop') for _ in range(50)) for _ in range(2000)))";
    let out = env.run(&["exec", "--json", LINES]);
    out.expect_code(0);
    let r = out.json();
    assert_eq!(r["stdout_truncated"], true);
    assert_eq!(r["stdout_bytes_total"], 102_000);
    assert_eq!(r["stdout_bytes_captured"], 50_000);
    assert_eq!(r["stdout_bytes_omitted"], 52_000);
    assert!(
        r["output"]
            .as_str()
            .unwrap()
            .contains("[OUTPUT TRUNCATED - 52000 bytes omitted out of 102000 total]")
    );
    let spill = std::path::PathBuf::from(r["stdout_spill_path"].as_str().unwrap());
    assert!(
        spill.starts_with(env.path().join("cache")),
        "spill under $XDG_CACHE_HOME: {}",
        spill.display()
    );
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(&spill).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.len(), 102_000);
    assert!(r["warning"].as_str().unwrap().contains("read_file"), "{r}");

    // Human mode: printed in full; the status line says the cut is the
    // agent's (see a_long_output_is_printed_in_full_…).
    let out = env.run(&["exec", LINES]);
    out.expect_code(0);
    assert_eq!(out.stdout.len(), 102_000);
    assert!(
        status_line(&out.stderr).contains("omits 52000 of its 102000 bytes"),
        "{}",
        out.stderr
    );
}

#[test]
fn reading_stdin_is_reported_with_a_hint() {
    let env = Env::fast();
    let out = env.run_input(&["exec", "--json", "input('name? ')"], Some("ignored\n"));
    out.expect_code(1);
    let r = out.json();
    assert_eq!(r["stdin_requested"], true);
    assert!(
        r["hint"].as_str().is_some_and(|h| h.contains("input")),
        "{r}"
    );
}

#[test]
fn the_traceback_is_printed_once() {
    let env = Env::fast();
    let out = env.run(&["exec", "def f():\n    1/0\nf()"]);
    out.expect_code(1);
    assert_eq!(
        out.stderr
            .matches("Traceback (most recent call last)")
            .count(),
        1,
        "{}",
        out.stderr
    );
    assert!(out.stdout.is_empty(), "{}", out.stdout);
}

#[test]
fn output_streams_while_the_cell_runs() {
    use std::io::BufRead;
    let env = Env::fast();
    let mut child = env
        .cmd()
        .args([
            "exec",
            "import time\nprint('tick', flush=True)\ntime.sleep(3)\nprint('tock')",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let first_at = Instant::now();
    assert_eq!(line, "tick\n");
    line.clear();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "tock\n");
    assert!(
        first_at.elapsed() > Duration::from_secs(2),
        "the first line came while the cell slept, not with its end"
    );
    assert_eq!(
        common::wait_limit(&mut child, common::COMMAND_LIMIT)
            .unwrap()
            .code(),
        Some(0)
    );
}

// ---- exit codes and status lines ----

#[test]
fn a_long_output_is_printed_in_full_and_the_status_line_says_the_agent_gets_it_cut() {
    let env = Env::fast();
    let out = env.run(&["exec", "for i in range(200000):\n    print(i)"]);
    out.expect_code(0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 200_000, "every line printed");
    assert_eq!(lines[199_999], "199999");
    let status = status_line(&out.stderr);
    assert!(
        status.contains("printed in full") && status.contains("the result an agent receives"),
        "{status}"
    );
    assert!(status.contains("--json"), "{status}");
    let spill = status
        .split("full text saved in ")
        .nth(1)
        .unwrap_or_else(|| panic!("no spill path: {status}"))
        .trim();
    let saved = std::fs::read_to_string(spill).unwrap();
    assert_eq!(saved, out.stdout, "the spill file holds the whole output");
    assert!(
        !out.stderr.contains("warning: stdout was truncated"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_bad_python_is_a_configuration_error_with_no_status_line() {
    let env = Env::fast();
    let out = env.run(&["exec", "--python", "/no/such/python", "print('ran')"]);
    out.expect_code(2);
    assert!(!out.stdout.contains("ran"));
    assert!(
        out.stderr.contains("--python") && out.stderr.contains("/no/such/python"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("[toolcell]"), "{}", out.stderr);
    let out = env.run(&[
        "exec",
        "--json",
        "--python",
        "/no/such/python",
        "print('ran')",
    ]);
    out.expect_code(2);
    assert!(out.stdout.is_empty(), "{}", out.stdout);

    // An interpreter that is too old.
    let old = env.write("old/python", "#!/bin/sh\necho \"$0\"\necho 3.6.15\n");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = env.run(&["exec", "--python", old.to_str().unwrap(), "print('ran')"]);
    out.expect_code(2);
    assert!(out.stderr.contains("too old"), "{}", out.stderr);
    assert!(!out.stderr.contains("[toolcell]"), "{}", out.stderr);

    // The same from the configuration file.
    let env = Env::with_config(&common::FAST_CONFIG.replace(
        "[execution]\n",
        "[execution]\npython = \"/no/such/python\"\n",
    ));
    let out = env.run(&["exec", "print('ran')"]);
    out.expect_code(2);
    assert!(out.stderr.contains("/no/such/python"), "{}", out.stderr);
}

#[test]
fn a_cell_that_never_started_has_a_status_line_without_a_kernel() {
    // Refused by a deny rule: none of the code ran, no kernel to name.
    let env = Env::with_config(&format!(
        "{}\n[guard]\ndeny = [\"forbidden\"]\n",
        common::FAST_CONFIG
    ));
    let out = env.run(&["exec", "forbidden = 1"]);
    out.expect_code(1);
    let status = status_line(&out.stderr);
    assert_eq!(
        status, "[toolcell] refused · none of the code ran",
        "{}",
        out.stderr
    );
}

/// A one-shot `exec` whose cell has printed `running` and sleeps 30 s.
fn exec_a_running_cell(env: &Env) -> std::process::Child {
    use std::io::BufRead;
    let mut child = env
        .cmd()
        .args([
            "exec",
            "import time\nprint('running', flush=True)\ntime.sleep(30)",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "running\n");
    assert!(stdout.buffer().is_empty(), "{:?}", stdout.buffer());
    child.stdout = Some(stdout.into_inner());
    child
}

#[test]
fn sigint_to_a_one_shot_exec_reports_the_interrupted_cell_and_exits_130() {
    let env = Env::fast();
    let child = exec_a_running_cell(&env);
    let t0 = Instant::now();
    common::signal(
        i32::try_from(child.id()).unwrap(),
        nix::sys::signal::Signal::SIGINT,
    );
    let out = common::finish(child, common::COMMAND_LIMIT);
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    out.expect_code(130);
    // The same status line as `exec --session` prints for Ctrl-C.
    let status = status_line(&out.stderr);
    assert!(
        status.starts_with("[toolcell] interrupted in ") && status.contains("kernel k-"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("KeyboardInterrupt"), "{}", out.stderr);
    assert!(
        common::eventually(Duration::from_secs(2), || env.python_pids().is_empty()),
        "{:?}",
        env.python_pids()
    );
}

/// Kernels run under `SCHED_BATCH` (fewer preemptions between host and
/// kernel at every cell), unless `TOOLCELL_BATCH=off`; the host itself
/// keeps the default policy (a batch host waited for the scheduler's tick
/// at every hop of a cell on a busy machine); a kernel can still change
/// its own policy.
#[test]
fn kernels_run_under_batch_scheduling_unless_turned_off() {
    let env = Env::fast();
    let code = "import os\nprint(os.sched_getscheduler(0) == os.SCHED_BATCH)";
    let out = env.run(&["exec", code]);
    out.expect_code(0);
    assert_eq!(out.stdout, "True\n", "{}", out.stderr);

    // The host's own policy (field 41 of its `stat`), while its cell runs.
    let child = exec_a_running_cell(&env);
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap();
    let policy = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(38)
        .map(str::to_owned);
    common::signal(
        i32::try_from(child.id()).unwrap(),
        nix::sys::signal::Signal::SIGTERM,
    );
    common::finish(child, common::COMMAND_LIMIT).expect_code(143);
    assert_eq!(policy.as_deref(), Some("0"), "{stat}");

    let out = common::finish(
        env.cmd()
            .args(["exec", code])
            .env("TOOLCELL_BATCH", "off")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
        common::COMMAND_LIMIT,
    );
    out.expect_code(0);
    assert_eq!(out.stdout, "False\n", "{}", out.stderr);

    // Not a cage: a cell may take the default policy back.
    let out = env.run(&[
        "exec",
        "import os\nos.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))\n\
         print(os.sched_getscheduler(0) == os.SCHED_OTHER)",
    ]);
    out.expect_code(0);
    assert_eq!(out.stdout, "True\n", "{}", out.stderr);
}
