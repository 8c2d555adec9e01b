//! Remotes with a lifecycle (`[remotes.NAME] start`, `stop`, `list`),
//! through the real binary, on an engine made of shell commands so it runs
//! on any machine: an allocation is a directory `alloc/<id>` holding the
//! host and session it was made for, `command` refuses to run without it,
//! `stop` removes it and `list` finds a host's. What a real engine adds is
//! tested in `engines.rs` (Docker and SLURM).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{Env, FAST_CONFIG, Serve, allocation_of, eventually};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

/// The fake engine's commands, its allocations under `dir`: `start`,
/// `command`, `stop`, `list`.
fn fake_words(dir: &Path) -> [Vec<String>; 4] {
    let a = dir.display();
    let w = |ws: &[&str]| ws.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    [
        w(&[
            "sh",
            "-c",
            &format!(
                "id=a$(od -An -N4 -tx4 /dev/urandom | tr -d ' '); mkdir -p {a}/$id && echo {{host}} > {a}/$id/host && echo {{session}} > {a}/$id/session && echo made $id >&2 && echo $id"
            ),
        ]),
        w(&[
            "sh",
            "-c",
            &format!("test -d {a}/$0 || {{ echo no allocation $0 >&2; exit 9; }}; exec \"$@\""),
            "{id}",
        ]),
        w(&["rm", "-rf", &format!("{a}/{{id}}")]),
        w(&[
            "sh",
            "-c",
            &format!(
                "for d in {a}/*/; do [ \"$(cat $d/host 2>/dev/null)\" = {{host}} ] && basename $d; done; true"
            ),
        ]),
    ]
}

/// The `[remotes.fake]` table, its allocations under `dir`, and `extra`
/// keys appended to it.
fn fake_remote(dir: &Path, extra: &str) -> String {
    let [start, command, stop, list] = fake_words(dir);
    // A JSON array of strings is a TOML array of basic strings.
    let j = |v: &Vec<String>| {
        let words: Vec<String> = v
            .iter()
            .map(|w| serde_json::to_string(w).unwrap())
            .collect();
        format!("[{}]", words.join(", "))
    };
    format!(
        "\n[remotes.fake]\nstart = {}\ncommand = {}\nstop = {}\nlist = {}\n{extra}\n",
        j(&start),
        j(&command),
        j(&stop),
        j(&list)
    )
}

/// An environment with the fake remote, `kernels` added to `[kernels]`.
fn env_with(kernels: &str, remote_extra: &str) -> (Env, PathBuf) {
    let env = Env::new();
    let alloc = env.path().join("alloc");
    std::fs::create_dir(&alloc).unwrap();
    let mut base = FAST_CONFIG.to_string();
    if kernels.contains("max_kernels") {
        base = base.replace("max_kernels = 8\n", "");
    }
    let config = format!(
        "{}\n{}",
        base.replace("[kernels]\n", &format!("[kernels]\n{kernels}")),
        fake_remote(&alloc, remote_extra)
    );
    env.write("toolcell.toml", &config);
    (env, alloc)
}

/// The allocations that exist now, with the session each was made for.
fn allocations(dir: &Path) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let id = e.file_name().to_string_lossy().into_owned();
            let session = std::fs::read_to_string(e.path().join("session"))
                .unwrap_or_default()
                .trim()
                .to_string();
            (id, session)
        })
        .collect();
    out.sort();
    out
}

/// Where this machine's host records are: one directory per machine.
fn records_dir(env: &Env) -> PathBuf {
    let key: String = machine_id()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    env.path()
        .join(".local/state/toolcell/remote-hosts")
        .join(key)
}

fn records(env: &Env) -> Vec<String> {
    let dir = records_dir(env);
    match std::fs::read_dir(dir) {
        Ok(d) => d
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn execute(s: &mut Serve, id: i64, params: Value) -> Value {
    let msg = s.call(id, "execute", params);
    msg.get("result").cloned().unwrap_or(msg)
}

#[test]
fn a_session_gets_one_allocation_that_ends_with_it() {
    let (env, alloc) = env_with("", "");
    let mut s = Serve::start(&env, &[]);
    let r1 = execute(
        &mut s,
        1,
        json!({"session": "chat 1", "remote": "fake", "code": "import os\nx = 41\nprint(os.getpid())"}),
    );
    assert_eq!(r1["status"], "success", "{r1:#}\n{}", s.stderr());
    assert_eq!(r1["kernel"]["remote"], "fake");
    let made = allocations(&alloc);
    assert_eq!(made.len(), 1, "{made:?}");
    // `{session}` is the session name as a safe word.
    assert_eq!(made[0].1, "chat_1");
    assert_eq!(
        allocation_of(&mut s, 2, "chat 1").as_deref(),
        Some(made[0].0.as_str())
    );
    // Later cells reuse the allocation and the kernel: state is kept, and
    // tools run on the host.
    env.write("host-only.txt", "from the host\n");
    let r2 = execute(
        &mut s,
        3,
        json!({"session": "chat 1", "remote": "fake", "code": "from toolcell_tools import read_file\nprint(x + 1, read_file('host-only.txt')['content'].strip())"}),
    );
    assert_eq!(r2["output"], "42 from the host\n", "{r2:#}");
    assert_eq!(r2["kernel"]["reused"], true);
    assert_eq!(allocations(&alloc).len(), 1);
    // Another session: its own allocation.
    let r3 = execute(
        &mut s,
        4,
        json!({"session": "b", "remote": "fake", "code": "y = 1"}),
    );
    assert_eq!(r3["status"], "success", "{r3:#}");
    assert_eq!(allocations(&alloc).len(), 2);
    // `reset` in b: a fresh allocation, the old one stopped.
    let before_b = allocation_of(&mut s, 5, "b").unwrap();
    let r4 = execute(
        &mut s,
        6,
        json!({"session": "b", "remote": "fake", "reset": true, "code": "print('fresh')"}),
    );
    assert_eq!(r4["kernel"]["state_reset"], true, "{r4:#}");
    let after_b = allocation_of(&mut s, 7, "b").unwrap();
    assert_ne!(before_b, after_b);
    assert!(
        eventually(Duration::from_secs(10), || !alloc.join(&before_b).exists()),
        "{before_b} was not stopped: {:?}",
        allocations(&alloc)
    );
    // The session's end stops its allocation; the other stays.
    let first = made[0].0.clone();
    s.call(8, "shutdown_session", json!({"session": "chat 1"}));
    assert!(
        eventually(Duration::from_secs(10), || !alloc.join(&first).exists()),
        "{:?}",
        allocations(&alloc)
    );
    assert!(alloc.join(&after_b).exists());
    assert_eq!(records(&env).len(), 1, "{:?}", records(&env));
    // EOF: the host stops everything before it exits, and removes its record.
    s.close_stdin();
    assert!(s.wait(LIMIT).success());
    assert_eq!(allocations(&alloc), Vec::<(String, String)>::new());
    assert_eq!(records(&env), Vec::<String>::new());
}

#[test]
fn start_failures_name_the_remote_and_its_stderr_and_the_server_keeps_serving() {
    let env = Env::new();
    let secret = "Q7w8E9r0T1".repeat(4);
    let config = format!(
        r#"{FAST_CONFIG}
[remotes.full]
start = ["sh", "-c", "echo 'error: quota of 4 sandboxes exceeded' >&2; exit 7"]
command = ["sh", "-c", "exec \"$@\"", "{{id}}"]
stop = ["true", "{{id}}"]

[remotes.chatty]
start = ["sh", "-c", "echo '--rm'"]
command = ["sh", "-c", "exec \"$@\"", "{{id}}"]
stop = ["true", "{{id}}"]

[remotes.slow]
start = ["sh", "-c", "echo queued >&2; sleep 30; echo late"]
command = ["sh", "-c", "exec \"$@\"", "{{id}}"]
stop = ["true", "{{id}}"]
start_timeout = 1

[remotes.loud]
start = ["sh", "-c", "printf '\\033[1;31mdenied\\033[0m for token ghp_{secret}\\n' >&2; exit 1"]
command = ["sh", "-c", "exec \"$@\"", "{{id}}"]
stop = ["true", "{{id}}"]
"#
    );
    env.write("toolcell.toml", &config);
    let mut s = Serve::start(&env, &[]);
    let r = execute(&mut s, 1, json!({"remote": "full", "code": "print(1)"}));
    assert_eq!(r["status"], "error", "{r:#}");
    let e = r["error"].as_str().unwrap();
    assert!(e.contains("remote \"full\""), "{e}");
    assert!(
        e.contains("exit status 7") && e.contains("quota of 4 sandboxes exceeded"),
        "{e}"
    );
    assert!(e.contains("none of the code ran"), "{e}");

    let r = execute(&mut s, 2, json!({"remote": "chatty", "code": "print(1)"}));
    let e = r["error"].as_str().unwrap();
    assert!(e.contains("allocation id") && e.contains("\"--rm\""), "{e}");

    let t = Instant::now();
    let r = execute(&mut s, 3, json!({"remote": "slow", "code": "print(1)"}));
    let e = r["error"].as_str().unwrap();
    assert!(
        e.contains("did not finish within 1 s") && e.contains("start_timeout"),
        "{e}"
    );
    assert!(e.contains("queued"), "the stderr tail: {e}");
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());

    // What an engine prints is cleaned like output: no escape codes, no
    // secrets.
    let r = execute(&mut s, 5, json!({"remote": "loud", "code": "print(1)"}));
    let e = r["error"].as_str().unwrap();
    assert!(e.contains("denied for token"), "{e}");
    assert!(!e.contains('\u{1b}'), "{e:?}");
    assert!(!e.contains(&secret), "{e}");

    // Still serving, locally too.
    let r = execute(&mut s, 4, json!({"code": "print('still here')"}));
    assert_eq!(r["output"], "still here\n", "{r:#}");
    s.close_stdin();
    assert!(s.wait(LIMIT).success());
}

#[test]
fn what_a_killed_host_left_is_swept_by_the_next_host() {
    let (env, alloc) = env_with("", "");
    let mut s = Serve::start(&env, &[]);
    for (i, session) in ["a", "b"].iter().enumerate() {
        let r = execute(
            &mut s,
            i as i64,
            json!({"session": session, "remote": "fake", "code": "pass"}),
        );
        assert_eq!(r["status"], "success", "{r:#}");
    }
    assert_eq!(allocations(&alloc).len(), 2);
    common::signal(s.pid(), nix::sys::signal::Signal::SIGKILL);
    let _ = s.wait(LIMIT);
    // Nothing stopped them: the host died.
    assert_eq!(allocations(&alloc).len(), 2);
    assert_eq!(records(&env).len(), 1);
    // An allocation of a host that is alive is never swept.
    let mut live = Serve::start(&env, &[]);
    let r = execute(
        &mut live,
        1,
        json!({"session": "c", "remote": "fake", "code": "pass"}),
    );
    assert_eq!(r["status"], "success", "{r:#}");
    let c = allocation_of(&mut live, 2, "c").unwrap();
    // The next host (here a one-shot `exec` that does not even use the
    // remote) lists the dead host's allocations and stops them.
    env.run(&["exec", "print(1)"]).expect_code(0);
    assert!(
        eventually(Duration::from_secs(10), || allocations(&alloc).len() == 1),
        "{:?}",
        allocations(&alloc)
    );
    assert_eq!(allocations(&alloc)[0].0, c);
    assert_eq!(
        records(&env).len(),
        1,
        "only the live host's: {:?}",
        records(&env)
    );
    live.close_stdin();
    assert!(live.wait(LIMIT).success());
    assert!(allocations(&alloc).is_empty());
    assert!(records(&env).is_empty());
}

/// Without `list`, or with one that lists every host's allocations (no
/// `{host}`), a killed host's allocations are still found: its record names
/// them, and only those are stopped.
#[test]
fn the_record_alone_lets_the_next_host_sweep() {
    for (label, list_all) in [("no list", false), ("list without {host}", true)] {
        let env = Env::new();
        let alloc = env.path().join("alloc");
        std::fs::create_dir(&alloc).unwrap();
        // The fake's list filters on {host}: drop it, or list everything.
        let mut remote: String = fake_remote(&alloc, "")
            .lines()
            .filter(|l| !l.starts_with("list = "))
            .collect::<Vec<_>>()
            .join("\n");
        if list_all {
            remote.push_str(&format!("\nlist = [\"ls\", \"{}\"]\n", alloc.display()));
        }
        env.write("toolcell.toml", &format!("{FAST_CONFIG}\n{remote}\n"));
        // Another host's allocation, which must survive the sweep.
        std::fs::create_dir(alloc.join("a00000000")).unwrap();
        std::fs::write(alloc.join("a00000000/host"), "tcsomeoneelse\n").unwrap();
        let mut s = Serve::start(&env, &[]);
        let r = execute(&mut s, 1, json!({"remote": "fake", "code": "pass"}));
        assert_eq!(r["status"], "success", "{label}: {r:#}");
        let mine = allocation_of(&mut s, 2, "default").unwrap();
        common::signal(s.pid(), nix::sys::signal::Signal::SIGKILL);
        let _ = s.wait(LIMIT);
        assert!(alloc.join(&mine).exists());
        env.run(&["exec", "print(1)"]).expect_code(0);
        assert!(
            eventually(Duration::from_secs(10), || !alloc.join(&mine).exists()),
            "{label}: {:?}",
            allocations(&alloc)
        );
        assert!(
            alloc.join("a00000000").exists(),
            "{label}: another host's allocation was stopped"
        );
        assert!(records(&env).is_empty(), "{label}: {:?}", records(&env));
    }
}

#[test]
fn a_lost_kernel_gets_a_fresh_allocation_and_idle_kernels_are_reaped() {
    let (env, alloc) = env_with("idle_timeout = 3\n", "");
    let mut s = Serve::start(&env, &[]);
    let r = execute(
        &mut s,
        1,
        json!({"remote": "fake", "code": "import os\nx = 1\npid = os.getpid()\nprint(pid)"}),
    );
    assert_eq!(r["status"], "success", "{r:#}");
    let pid: i32 = r["output"].as_str().unwrap().trim().parse().unwrap();
    let first = allocation_of(&mut s, 2, "default").unwrap();
    // The kernel dies between cells (its command is gone: the connection
    // is lost); the next cell says so, in a fresh allocation.
    common::signal(pid, nix::sys::signal::Signal::SIGKILL);
    assert!(eventually(Duration::from_secs(10), || !common::alive(pid)));
    let r = execute(
        &mut s,
        3,
        json!({"remote": "fake", "code": "print('x' in dir())"}),
    );
    assert_eq!(r["status"], "success", "{r:#}");
    assert_eq!(r["output"], "False\n");
    assert_eq!(r["kernel"]["state_reset"], true, "{r:#}");
    assert!(
        r["warning"]
            .as_str()
            .unwrap()
            .contains("ended between cells"),
        "{r:#}"
    );
    let second = allocation_of(&mut s, 4, "default").unwrap();
    assert_ne!(first, second);
    assert!(
        eventually(Duration::from_secs(10), || !alloc.join(&first).exists()),
        "{:?}",
        allocations(&alloc)
    );
    // Idle for longer than idle_timeout: reaped, and its allocation stopped.
    assert!(
        eventually(Duration::from_secs(20), || allocations(&alloc).is_empty()),
        "{:?}",
        allocations(&alloc)
    );
    s.close_stdin();
    assert!(s.wait(LIMIT).success());
}

#[test]
fn the_warm_pool_keeps_an_allocation_ready() {
    let (env, alloc) = env_with("remote = \"fake\"\nwarm_pool = 1\n", "");
    let mut s = Serve::start(&env, &[]);
    // (The fake engine makes the directory, then writes its session: wait
    // for both.)
    assert!(
        eventually(Duration::from_secs(30), || {
            let a = allocations(&alloc);
            a.len() == 1 && !a[0].1.is_empty()
        }),
        "{:?}",
        allocations(&alloc)
    );
    let pooled = allocations(&alloc);
    assert_eq!(pooled[0].1, "pool");
    let r = execute(&mut s, 1, json!({"session": "s1", "code": "print('hi')"}));
    assert_eq!(r["status"], "success", "{r:#}");
    assert_eq!(r["kernel"]["remote"], "fake");
    // The session took the pooled allocation; the pool starts another.
    assert_eq!(
        allocation_of(&mut s, 2, "s1").as_deref(),
        Some(pooled[0].0.as_str())
    );
    assert!(
        eventually(Duration::from_secs(30), || allocations(&alloc).len() == 2),
        "{:?}",
        allocations(&alloc)
    );
    s.close_stdin();
    assert!(s.wait(LIMIT).success());
    assert!(allocations(&alloc).is_empty(), "{:?}", allocations(&alloc));
}

#[test]
fn exec_starts_and_stops_its_allocation() {
    let (env, alloc) = env_with("", "");
    let out = env.run(&["exec", "--remote", "fake", "--json", "print(6 * 7)"]);
    out.expect_code(0);
    assert_eq!(out.json()["output"], "42\n", "{}", out.stdout);
    assert!(allocations(&alloc).is_empty(), "{:?}", allocations(&alloc));
    assert!(records(&env).is_empty());
}

#[test]
fn lifecycle_keys_are_checked_at_start() {
    for (table, key, words) in [
        (
            "start = [\"echo\", \"x\"]\ncommand = [\"sh\", \"{id}\"]",
            "stop",
            "left behind",
        ),
        (
            "start = [\"echo\", \"x\"]\ncommand = [\"sh\", \"{id}\"]\nstop = [\"rm\", \"x\"]",
            "stop",
            "{id}",
        ),
        (
            "start = [\"echo\", \"x\"]\ncommand = [\"sh\"]\nstop = [\"rm\", \"{id}\"]",
            "command",
            "{id}",
        ),
        (
            "command = [\"sh\"]\nstop = [\"rm\", \"{id}\"]",
            "stop",
            "start",
        ),
        (
            "start = [\"echo\", \"x\"]\ncommand = [\"sh\", \"{id}\"]\nstop = [\"rm\", \"{id}\"]\nstart_timeout = 0",
            "start_timeout",
            "> 0",
        ),
    ] {
        let env = Env::with_config(&format!("[remotes.r]\n{table}\n"));
        let out = env.run(&["exec", "print(1)"]);
        out.expect_code(2);
        assert!(
            out.stderr.contains(&format!("remotes.r.{key}")) && out.stderr.contains(words),
            "{table}:\n{}",
            out.stderr
        );
    }
}

#[test]
fn an_evicted_kernel_and_a_sigterm_stop_their_allocations() {
    // One kernel at most: a second session evicts the first (idle) one.
    let (env, alloc) = env_with("max_kernels = 1\nwarm_pool = 0\n", "");
    let mut s = Serve::start(&env, &[]);
    let r = execute(
        &mut s,
        1,
        json!({"session": "a", "remote": "fake", "code": "x = 1"}),
    );
    assert_eq!(r["status"], "success", "{r:#}");
    let a = allocation_of(&mut s, 2, "a").unwrap();
    let r = execute(
        &mut s,
        3,
        json!({"session": "b", "remote": "fake", "code": "y = 2"}),
    );
    assert_eq!(r["status"], "success", "{r:#}");
    let b = allocation_of(&mut s, 4, "b").unwrap();
    assert!(
        eventually(Duration::from_secs(10), || !alloc.join(&a).exists()),
        "the evicted kernel's allocation {a} is still there: {:?}",
        allocations(&alloc)
    );
    assert_eq!(allocations(&alloc).len(), 1);
    // Session a comes back: a fresh allocation, its state gone.
    let r = execute(
        &mut s,
        5,
        json!({"session": "a", "remote": "fake", "code": "print('x' in dir())"}),
    );
    assert_eq!(r["output"], "False\n", "{r:#}");
    assert_eq!(r["kernel"]["state_reset"], true, "{r:#}");
    assert!(eventually(Duration::from_secs(10), || !alloc
        .join(&b)
        .exists()));
    // SIGTERM: the host stops what it has before it exits.
    common::signal(s.pid(), nix::sys::signal::Signal::SIGTERM);
    let _ = s.wait(LIMIT);
    assert!(allocations(&alloc).is_empty(), "{:?}", allocations(&alloc));
    assert!(records(&env).is_empty(), "{:?}", records(&env));
}

/// A record whose host id is not one toolcell makes (a file written by
/// something else in the state directory) is removed without running
/// anything: its host would be substituted for `{host}` in the remote's
/// `list`, here inside `sh -c`.
#[test]
fn a_forged_record_runs_nothing() {
    let (env, alloc) = env_with("", "");
    let pwned = env.path().join("PWNED");
    let dir = records_dir(&env);
    std::fs::create_dir_all(&dir).unwrap();
    for d in [dir.parent().unwrap(), dir.as_path()] {
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    }
    std::fs::create_dir(alloc.join("a12345678")).unwrap();
    let record = json!({
        "host": format!("x ] || touch {}; [ x", pwned.display()),
        "remote": "fake",
        "pid": 1,
        "start_ticks": 1,
        "boot_id": "not-this-boot",
        "created": 1,
        "ids": ["a12345678"],
    });
    std::fs::write(dir.join("forged.fake"), record.to_string()).unwrap();
    env.run(&["exec", "print(1)"]).expect_code(0);
    assert!(
        eventually(Duration::from_secs(10), || records(&env).is_empty()),
        "{:?}",
        records(&env)
    );
    // Give a sweep that wrongly ran time to act, then check it did not.
    std::thread::sleep(Duration::from_millis(500));
    assert!(!pwned.exists(), "the forged host id ran as shell text");
    assert!(
        alloc.join("a12345678").exists(),
        "a forged record's allocation was stopped"
    );
}

/// A `start` that made its allocation and then failed (here: ran past
/// `start_timeout`) leaves nothing behind for long: the clean-up lists this
/// host's allocations and stops the one no kernel holds, while the host
/// keeps serving (and a kernel that does hold one keeps it).
#[test]
fn what_a_failed_start_made_is_cleaned_up_while_the_host_runs() {
    let env = Env::new();
    let alloc = env.path().join("alloc");
    std::fs::create_dir(&alloc).unwrap();
    let good = fake_remote(&alloc, "");
    let leaky = good.replace("[remotes.fake]", "[remotes.leaky]").replacen(
        "echo $id\"]",
        "sleep 30; echo $id\"]",
        1,
    ) + "start_timeout = 1\n";
    assert!(leaky.contains("sleep 30; echo $id"), "{leaky}");
    env.write("toolcell.toml", &format!("{FAST_CONFIG}\n{good}\n{leaky}"));
    let mut s = Serve::start(&env, &[]);
    let r = execute(
        &mut s,
        1,
        json!({"session": "held", "remote": "fake", "code": "x = 1"}),
    );
    assert_eq!(r["status"], "success", "{r:#}");
    let held = allocation_of(&mut s, 2, "held").unwrap();
    let r = execute(
        &mut s,
        3,
        json!({"session": "l", "remote": "leaky", "code": "pass"}),
    );
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("did not finish within 1 s"),
        "{r:#}"
    );
    assert!(
        eventually(Duration::from_secs(15), || allocations(&alloc).len() == 1),
        "{:?}",
        allocations(&alloc)
    );
    assert_eq!(allocations(&alloc)[0].0, held);
    let r = execute(
        &mut s,
        4,
        json!({"session": "held", "remote": "fake", "code": "print(x)"}),
    );
    assert_eq!(r["output"], "1\n", "{r:#}");
    s.close_stdin();
    assert!(s.wait(LIMIT).success());
    assert!(allocations(&alloc).is_empty());
}

/// This machine's identity as the host records it.
fn machine_id() -> String {
    for p in ["/etc/machine-id", "/var/lib/dbus/machine-id"] {
        if let Ok(s) = std::fs::read_to_string(p)
            && !s.trim().is_empty()
        {
            return s.trim().to_string();
        }
    }
    format!(
        "host:{}",
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .unwrap()
            .trim()
    )
}

/// A dead host's record is swept only by a host of the same machine and
/// pid namespace, with the remote configured as it was: a record written
/// on another machine (a shared home directory) or for another remote of
/// the same name is left alone.
#[test]
fn only_records_of_this_machine_and_this_remote_are_swept() {
    use std::os::unix::fs::MetadataExt;
    let (env, alloc) = env_with("", "");
    let [_, _, stop, list] = fake_words(&alloc);
    let dir = records_dir(&env);
    std::fs::create_dir_all(&dir).unwrap();
    for d in [dir.parent().unwrap(), dir.as_path()] {
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    }
    let pidns = std::fs::metadata("/proc/self/ns/pid").unwrap().ino();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let write = |host: &str, machine: &str, stop: &[String]| {
        let id = format!("a{}", &host[4..]);
        std::fs::create_dir(alloc.join(&id)).unwrap();
        std::fs::write(alloc.join(&id).join("host"), format!("{host}\n")).unwrap();
        let record = json!({
            "host": host, "remote": "fake", "pid": 1, "start_ticks": 1,
            "boot_id": "an-earlier-boot", "machine": machine, "pidns": pidns,
            "created": now, "stop": stop, "list": list, "ids": [id],
        });
        std::fs::write(dir.join(format!("{host}.fake")), record.to_string()).unwrap();
        id
    };
    let here = machine_id();
    let swept = write("tc0000000001", &here, &stop);
    let elsewhere = write("tc0000000002", "another-machine", &stop);
    let other_remote = write(
        "tc0000000003",
        &here,
        &["docker".into(), "rm".into(), "-f".into(), "{id}".into()],
    );
    env.run(&["exec", "print(1)"]).expect_code(0);
    assert!(
        eventually(Duration::from_secs(10), || !alloc.join(&swept).exists()),
        "{:?}",
        allocations(&alloc)
    );
    common::wait_until("the swept host's record is removed", || {
        !records(&env).contains(&"tc0000000001.fake".to_string())
    });
    // Give a sweep that wrongly took the other two time to act, then check
    // it did not: the passage of time is the subject.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        alloc.join(&elsewhere).exists(),
        "another machine's host was taken for dead"
    );
    assert!(
        alloc.join(&other_remote).exists(),
        "another remote's record was swept"
    );
    let mut left = records(&env);
    left.sort();
    assert_eq!(left, ["tc0000000002.fake", "tc0000000003.fake"]);
}

/// `cwd` may hold placeholders: the kernel starts in the allocation's own
/// directory.
#[test]
fn cwd_placeholders_are_filled_in() {
    let (env, alloc) = env_with("", &format!("cwd = \"{}/{{id}}\"", "ALLOC"));
    let config = std::fs::read_to_string(env.path().join("toolcell.toml"))
        .unwrap()
        .replace("ALLOC", &alloc.display().to_string());
    env.write("toolcell.toml", &config);
    let mut s = Serve::start(&env, &[]);
    let r = execute(
        &mut s,
        1,
        json!({"remote": "fake", "code": "import os\nprint(os.getcwd())"}),
    );
    assert_eq!(r["status"], "success", "{r:#}");
    let id = allocation_of(&mut s, 2, "default").unwrap();
    assert_eq!(
        r["output"].as_str().unwrap().trim(),
        alloc
            .join(&id)
            .canonicalize()
            .unwrap()
            .display()
            .to_string()
    );
    s.close_stdin();
    assert!(s.wait(LIMIT).success());
}

/// A stand-in `kubectl` for the Kubernetes recipe: pods are directories
/// under `$PODS` holding their labels. Each subcommand the recipe uses
/// checks its arguments as the recipe writes them, and names and label
/// values as the API server validates them (RFC 1123 names, label values
/// of at most 63 characters); anything else exits 64.
const KUBECTL: &str = r#"#!/bin/sh
bad() { echo "kubectl stand-in: $*" >&2; exit 64; }
name_ok() { echo "$1" | grep -Eq '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'; }
value_ok() { [ ${#1} -le 63 ] && echo "$1" | grep -Eq '^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$'; }
echo "$*" >> "$PODS.log"
cmd=$1; shift
case "$cmd" in
run)
  name=$1; name_ok "$name" || bad "invalid pod name $name"
  [ "$2" = --image=python:3.12-slim ] && [ "$3" = --restart=Never ] || bad "run: $*"
  case "$4" in --labels=*) labels=${4#--labels=} ;; *) bad "run: no labels: $*" ;; esac
  [ "$5 $6 $7 $8 $9 ${10}" = "--command -o name -- sleep infinity" ] || bad "run: $*"
  [ -e "$PODS/$name" ] && bad "pods \"$name\" already exists"
  mkdir -p "$PODS/$name"
  for kv in $(echo "$labels" | tr , ' '); do
    k=${kv%%=*}; v=${kv#*=}
    value_ok "$v" || bad "invalid label value $v"
    echo "$v" > "$PODS/$name/$k"
  done
  echo "pod/$name" ;;
wait)
  [ "$1" = --for=condition=Ready ] && [ "$3 $4 $5" = "--timeout=300s -o name" ] || bad "wait: $*"
  case "$2" in pod/*) [ -d "$PODS/${2#pod/}" ] || bad "pods \"${2#pod/}\" not found" ;; *) bad "wait: $2" ;; esac
  echo "$2" ;;
exec)
  [ "$1" = -i ] && [ "$3" = -- ] || bad "exec: $*"
  [ -d "$PODS/$2" ] || bad "pods \"$2\" not found"
  shift 3; exec "$@" ;;
delete)
  [ "$1" = pod ] && [ "$3 $4" = "--wait=false --ignore-not-found" ] || bad "delete: $*"
  name_ok "$2" || bad "invalid pod name $2"
  rm -rf "$PODS/$2" ;;
get)
  [ "$1 $2" = "pods -l" ] && [ "$4" = -o ] || bad "get: $*"
  [ "$5" = 'jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}' ] || bad "get: jsonpath $5"
  case "$3" in toolcell.host=*) host=${3#toolcell.host=} ;; *) bad "get: selector $3" ;; esac
  for d in "$PODS"/*/; do
    [ -d "$d" ] && [ "$(cat "$d/toolcell.host" 2>/dev/null)" = "$host" ] && basename "$d"
  done
  true ;;
*) bad "unknown command $cmd" ;;
esac
"#;

/// The `[remotes.k8s]` recipe of docs/remotes.md, as the page writes it.
fn kubernetes_recipe() -> String {
    let page = std::fs::read_to_string(
        Path::new(
            &std::env::var("CARGO_MANIFEST_DIR")
                .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
        )
        .join("../../docs/remotes.md"),
    )
    .unwrap();
    let from = page.find("### Kubernetes").expect("a Kubernetes section");
    let block = &page[from..];
    let start = block.find("```toml\n").expect("its recipe") + "```toml\n".len();
    let end = start + block[start..].find("```").unwrap();
    let recipe = block[start..end].to_string();
    assert!(recipe.starts_with("[remotes.k8s]"), "{recipe}");
    recipe
}

/// The Kubernetes recipe, word for word from the docs, through the binary
/// against the stand-in `kubectl`: a pod per session labelled with the host
/// and session, state and host tools across cells, the pod deleted at the
/// session's end, and a killed host's pod swept through `list`.
#[test]
fn the_kubernetes_recipe_runs_its_lifecycle() {
    let env = Env::new();
    let pods = env.path().join("pods");
    std::fs::create_dir(&pods).unwrap();
    let bin = env.write("bin/kubectl", KUBECTL);
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        env.path().join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    env.write(
        "toolcell.toml",
        &format!("{FAST_CONFIG}\n{}", kubernetes_recipe()),
    );
    let serve = || {
        let mut cmd = env.cmd();
        cmd.env("PATH", &path).env("PODS", &pods).arg("serve");
        Serve::spawn(cmd)
    };
    let log = || std::fs::read_to_string(env.path().join("pods.log")).unwrap_or_default();
    let label = |pod: &str, key: &str| {
        std::fs::read_to_string(pods.join(pod).join(key))
            .unwrap_or_default()
            .trim()
            .to_string()
    };

    let mut s = serve();
    let r = execute(
        &mut s,
        1,
        json!({"session": "chat 1", "remote": "k8s", "code": "x = 41"}),
    );
    assert_eq!(r["status"], "success", "{r:#}\n{}\n{}", s.stderr(), log());
    let made = allocations(&pods);
    assert_eq!(made.len(), 1, "{made:?}");
    let pod = made[0].0.clone();
    assert_eq!(
        allocation_of(&mut s, 2, "chat 1").as_deref(),
        Some(pod.as_str())
    );
    assert_eq!(label(&pod, "toolcell.session"), "chat_1");
    let host = label(&pod, "toolcell.host");
    assert!(
        pod.starts_with(&format!("tc-{host}-")),
        "{pod} for host {host}"
    );
    env.write("host-only.txt", "from the host\n");
    let r = execute(
        &mut s,
        3,
        json!({"session": "chat 1", "remote": "k8s", "code": "from toolcell_tools import read_file\nprint(x + 1, read_file('host-only.txt')['content'].strip())"}),
    );
    assert_eq!(r["output"], "42 from the host\n", "{r:#}");
    s.call(4, "shutdown_session", json!({"session": "chat 1"}));
    assert!(
        eventually(Duration::from_secs(10), || !pods.join(&pod).exists()),
        "{:?}\n{}",
        allocations(&pods),
        log()
    );

    // A killed host's pod is found by its label and deleted by the next host.
    let r = execute(
        &mut s,
        5,
        json!({"session": "b", "remote": "k8s", "code": "pass"}),
    );
    assert_eq!(r["status"], "success", "{r:#}");
    assert_eq!(allocations(&pods).len(), 1);
    common::signal(s.pid(), nix::sys::signal::Signal::SIGKILL);
    let _ = s.wait(LIMIT);
    assert_eq!(allocations(&pods).len(), 1);
    let mut next = serve();
    let r = execute(&mut next, 1, json!({"code": "print(1)"}));
    assert_eq!(r["output"], "1\n", "{r:#}");
    assert!(
        eventually(Duration::from_secs(10), || allocations(&pods).is_empty()),
        "{:?}\n{}",
        allocations(&pods),
        log()
    );
    assert!(
        log().contains(&format!("get pods -l toolcell.host={host} -o jsonpath=")),
        "{}",
        log()
    );
    next.close_stdin();
    assert!(next.wait(LIMIT).success());
    assert!(records(&env).is_empty(), "{:?}", records(&env));
}

/// A `start` that waits for its engine (here 5 s) does not hold the
/// client: a cancel or an interrupt answers at once, and the allocation the
/// abandoned start makes is stopped when it lands.
#[test]
fn cancel_and_interrupt_do_not_wait_for_a_slow_start() {
    let env = Env::new();
    let alloc = env.path().join("alloc");
    std::fs::create_dir(&alloc).unwrap();
    // Each start marks when it begins (`starting.SESSION`) and when its
    // allocation exists (`landed.SESSION`), outside `alloc`.
    let marks = env.path().display().to_string();
    let remote = fake_remote(&alloc, "")
        .replacen(
            "start = [\"sh\", \"-c\", \"",
            &format!("start = [\"sh\", \"-c\", \"touch {marks}/starting.{{session}}; sleep 5; "),
            1,
        )
        .replacen(
            "echo made $id >&2",
            &format!("echo made $id >&2 && touch {marks}/landed.{{session}}"),
            1,
        );
    assert!(remote.contains("sleep 5; "), "{remote}");
    assert!(remote.contains("landed."), "{remote}");
    let mark = |name: &str| env.path().join(name);
    let config = FAST_CONFIG.replace("max_kernels = 8\n", "max_kernels = 8\nwarm_pool = 0\n");
    env.write("toolcell.toml", &format!("{config}\n{remote}"));
    let mut s = Serve::start(&env, &[]);

    s.request(
        1,
        "execute",
        json!({"session": "c", "remote": "fake", "code": "open('ran-c', 'w')"}),
    );
    common::wait_until("session c's start has begun", || {
        mark("starting.c").exists()
    });
    let t0 = Instant::now();
    s.send_raw(
        &json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 1}}).to_string(),
    );
    let r = s.until_id(&json!(1), LIMIT).0;
    assert_eq!(r["error"]["code"], -32800, "{r}");
    // At once, not when the start lands (~5 s after the cancel).
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());

    s.request(
        2,
        "execute",
        json!({"session": "i", "remote": "fake", "code": "open('ran-i', 'w')"}),
    );
    common::wait_until("session i's start has begun", || {
        mark("starting.i").exists()
    });
    let t1 = Instant::now();
    let r = s.call(3, "interrupt", json!({"session": "i"}));
    assert_eq!(r["result"]["interrupted"], 1, "{r}");
    let r = s.until_id(&json!(2), LIMIT).0;
    assert_eq!(r["result"]["status"], "interrupted", "{r}");
    assert!(
        r["result"]["error"]
            .as_str()
            .unwrap()
            .contains("none of its code ran"),
        "{r}"
    );
    // At once, not when the start lands (~5 s after the interrupt).
    assert!(t1.elapsed() < Duration::from_secs(3), "{:?}", t1.elapsed());

    // Both starts land after 5 s; what they made is stopped.
    common::wait_until("both abandoned starts have made their allocation", || {
        mark("landed.c").exists() && mark("landed.i").exists()
    });
    assert!(
        eventually(Duration::from_secs(10), || allocations(&alloc).is_empty()),
        "{:?}",
        allocations(&alloc)
    );
    assert!(!env.path().join("ran-c").exists() && !env.path().join("ran-i").exists());
    // The session works afterwards, on a fresh allocation.
    let r = execute(
        &mut s,
        4,
        json!({"session": "c", "remote": "fake", "code": "print('after')"}),
    );
    assert_eq!(r["output"], "after\n", "{r:#}");
    assert_eq!(allocations(&alloc).len(), 1);
    s.close_stdin();
    assert!(s.wait(LIMIT).success());
    assert!(allocations(&alloc).is_empty());
}

/// The host's end does not wait for a `start` still running (a job queued
/// for hours): EOF during a 30 s start exits within the graces, and the
/// start's process group is killed.
#[test]
fn eof_during_a_slow_start_exits_promptly_and_kills_the_start() {
    let env = Env::new();
    let alloc = env.path().join("alloc");
    std::fs::create_dir(&alloc).unwrap();
    let pidfile = env.path().join("start.pid");
    let remote = fake_remote(&alloc, "").replacen(
        "start = [\"sh\", \"-c\", \"",
        &format!(
            "start = [\"sh\", \"-c\", \"echo $$ > {}; sleep 30; ",
            pidfile.display()
        ),
        1,
    );
    let config = FAST_CONFIG.replace("max_kernels = 8\n", "max_kernels = 8\nwarm_pool = 0\n");
    env.write("toolcell.toml", &format!("{config}\n{remote}"));
    let mut s = Serve::start(&env, &[]);
    s.request(
        1,
        "execute",
        json!({"session": "q", "remote": "fake", "code": "pass"}),
    );
    assert!(
        eventually(Duration::from_secs(10), || pidfile.exists()),
        "the start never ran"
    );
    let start_pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let t0 = Instant::now();
    s.close_stdin();
    let status = s.wait(LIMIT);
    // FAST_CONFIG: interrupt_grace 1 s + kill_grace 0.5 s, plus 3 s for a
    // loaded machine; waiting for the start would take 30 s.
    assert!(
        t0.elapsed() < Duration::from_millis(4500),
        "exit took {:?}",
        t0.elapsed()
    );
    assert!(status.success(), "{status:?}\n{}", s.stderr());
    assert!(
        eventually(Duration::from_secs(5), || !common::alive(start_pid)),
        "the start (pid {start_pid}) is still running"
    );
    assert!(allocations(&alloc).is_empty(), "{:?}", allocations(&alloc));
}

/// A start given up by its cell still holds its room under `max_kernels`
/// until it lands: cancelling in a loop cannot run more `start`s at once
/// than the bound.
#[test]
fn an_abandoned_start_keeps_its_room_until_it_lands() {
    let env = Env::new();
    let alloc = env.path().join("alloc");
    std::fs::create_dir(&alloc).unwrap();
    let lock = env.path().join("lock");
    let overlap = env.path().join("overlap");
    let begun = env.path().join("begun");
    let remote = fake_remote(&alloc, "").replacen(
        "start = [\"sh\", \"-c\", \"",
        &format!(
            "start = [\"sh\", \"-c\", \"echo {{session}} >> {b}; mkdir {l} || echo overlap >> {o}; sleep 2; rmdir {l}; ",
            b = begun.display(),
            l = lock.display(),
            o = overlap.display()
        ),
        1,
    );
    let config = FAST_CONFIG.replace("max_kernels = 8\n", "max_kernels = 1\nwarm_pool = 0\n");
    env.write("toolcell.toml", &format!("{config}\n{remote}"));
    let mut s = Serve::start(&env, &[]);
    for (i, session) in ["a", "b", "c"].iter().enumerate() {
        let id = i as i64 + 1;
        s.request(
            id,
            "execute",
            json!({"session": session, "remote": "fake", "code": "pass"}),
        );
        if i == 0 {
            // The first start takes the one room: wait until it runs.
            common::wait_until("session a's start has begun", || {
                std::fs::read_to_string(&begun).is_ok_and(|b| b.lines().any(|l| l == "a"))
            });
        } else {
            // Passage of time is the subject: a start wrongly let past the
            // bound would begin (and overlap) meanwhile.
            std::thread::sleep(Duration::from_millis(300));
        }
        s.send_raw(
            &json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": id}})
                .to_string(),
        );
        let r = s.until_id(&json!(id), LIMIT).0;
        assert_eq!(r["error"]["code"], -32800, "{r}");
    }
    // The last session waits for the room the abandoned starts hold.
    let r = execute(
        &mut s,
        9,
        json!({"session": "d", "remote": "fake", "code": "print('d')"}),
    );
    assert_eq!(r["output"], "d\n", "{r:#}");
    assert!(
        !overlap.exists(),
        "two starts ran at once under max_kernels = 1"
    );
    s.close_stdin();
    assert!(s.wait(LIMIT).success());
    assert!(allocations(&alloc).is_empty(), "{:?}", allocations(&alloc));
}

/// `/proc/PID/stat`'s state letter.
fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// A host with one allocation (session `session`) on the fake remote,
/// then SIGKILLed and left a zombie (this test, its parent, does not reap
/// it yet): its process entry, start time included, is still there.
fn zombie_host(env: &Env, session: &str) -> (Serve, String) {
    let mut s = Serve::start(env, &[]);
    let r = execute(
        &mut s,
        1,
        json!({"session": session, "remote": "fake", "code": "pass"}),
    );
    assert_eq!(r["status"], "success", "{r:#}");
    let id = allocation_of(&mut s, 2, session).unwrap();
    common::signal(s.pid(), nix::sys::signal::Signal::SIGKILL);
    assert!(
        eventually(Duration::from_secs(10), || proc_state(s.pid()) == Some('Z')),
        "the killed host is not a zombie: {:?}",
        proc_state(s.pid())
    );
    (s, id)
}

#[test]
fn review_12_a_killed_host_left_a_zombie_is_swept_at_start_and_on_a_later_period() {
    // A reaper period of 0.5 s: the running host sweeps about every second.
    let (env, alloc) = env_with("idle_timeout = 2\n", "");
    // At start: the next host (a one-shot exec) sweeps the zombie's.
    let (mut first, id) = zombie_host(&env, "a");
    env.run(&["exec", "print(1)"]).expect_code(0);
    assert!(
        eventually(Duration::from_secs(10), || !alloc.join(&id).exists()),
        "the zombie host's allocation was not swept at start: {:?}",
        allocations(&alloc)
    );
    // On a later period: a host that runs already sweeps what a host
    // killed after its start left.
    let mut live = Serve::start(&env, &[]);
    let r = execute(&mut live, 1, json!({"code": "print(1)"}));
    assert_eq!(r["status"], "success", "{r:#}");
    let (mut second, id) = zombie_host(&env, "b");
    assert!(
        eventually(Duration::from_secs(20), || !alloc.join(&id).exists()),
        "the running host never swept the zombie host's allocation: {:?}",
        allocations(&alloc)
    );
    assert!(
        eventually(Duration::from_secs(10), || records(&env).is_empty()),
        "{:?}",
        records(&env)
    );
    let _ = first.wait(LIMIT);
    let _ = second.wait(LIMIT);
    live.close_stdin();
    assert!(live.wait(LIMIT).success());
    assert!(allocations(&alloc).is_empty(), "{:?}", allocations(&alloc));
}

/// The fake engine, its `command` leaving the kernel's pid in the
/// allocation and its `stop` noting (in `<id>.stop-saw`) whether that
/// kernel was still running when the stop began.
fn witnessing_remote(dir: &Path) -> String {
    let [start, _, _, list] = fake_words(dir);
    let a = dir.display();
    let command = vec![
        "sh".to_string(),
        "-c".into(),
        format!("test -d {a}/$0 || exit 9; echo $$ > {a}/$0/pid; exec \"$@\""),
        "{id}".into(),
    ];
    let stop = vec![
        "sh".to_string(),
        "-c".into(),
        format!(
            "p=$(cat {a}/$0/pid); if grep -qs '^State:[[:space:]]*[RSD]' /proc/$p/status; then echo alive; else echo dead; fi > {a}/$0.stop-saw; rm -rf {a}/$0"
        ),
        "{id}".into(),
    ];
    let j = |v: &Vec<String>| serde_json::to_string(v).unwrap();
    format!(
        "\n[remotes.fake]\nstart = {}\ncommand = {}\nstop = {}\nlist = {}\n",
        j(&start),
        j(&command),
        j(&stop),
        j(&list)
    )
}

#[test]
fn review_s2_an_allocation_is_stopped_before_its_kernel_is_killed() {
    let env = Env::new();
    let alloc = env.path().join("alloc");
    std::fs::create_dir(&alloc).unwrap();
    let config = FAST_CONFIG.replace("[execution]\n", "[execution]\non_timeout = \"kill\"\n");
    env.write(
        "toolcell.toml",
        &format!("{config}\n{}", witnessing_remote(&alloc)),
    );
    let saw = |id: &str| {
        let f = alloc.join(format!("{id}.stop-saw"));
        assert!(
            eventually(Duration::from_secs(20), || f.exists()
                && !alloc.join(id).exists()),
            "{id} was not stopped"
        );
        std::fs::read_to_string(f).unwrap().trim().to_string()
    };
    let mut s = Serve::start(&env, &[]);
    // The session's end (shutdown_session, an idle kernel).
    let r = execute(
        &mut s,
        1,
        json!({"session": "a", "remote": "fake", "code": "x = 1"}),
    );
    assert_eq!(r["status"], "success", "{r:#}");
    let a = allocation_of(&mut s, 2, "a").unwrap();
    s.call(3, "shutdown_session", json!({"session": "a"}));
    assert_eq!(
        saw(&a),
        "alive",
        "the kernel was killed before its stop ran"
    );
    // A cell killed at its timeout.
    let r = execute(
        &mut s,
        4,
        json!({"session": "b", "remote": "fake", "code": "x = 1"}),
    );
    assert_eq!(r["status"], "success", "{r:#}");
    let b = allocation_of(&mut s, 5, "b").unwrap();
    let r = execute(
        &mut s,
        6,
        json!({"session": "b", "remote": "fake", "code": "while True: pass", "timeout": 1}),
    );
    assert_eq!(r["status"], "timeout", "{r:#}");
    assert_eq!(
        saw(&b),
        "alive",
        "the kernel was killed before its stop ran"
    );
    s.close_stdin();
    assert!(s.wait(LIMIT).success());
}

/// `[remotes.NAME] stop_timeout` (docs/configuration.md): a `stop` that
/// hangs is given up after that long, so a host's exit does not wait for it
/// (here 1 s, not the 30 s the stop would take), and it is not left running.
#[test]
fn stop_timeout_bounds_a_hung_stop_at_the_hosts_exit() {
    let (env, _alloc) = env_with("", "stop_timeout = 1");
    let text = std::fs::read_to_string(env.path().join("toolcell.toml")).unwrap();
    let stop = text
        .lines()
        .find(|l| l.starts_with("stop = "))
        .unwrap()
        .to_string();
    let mark = format!("tc-hung-stop-{}", std::process::id());
    env.write(
        "toolcell.toml",
        &text.replace(
            &stop,
            &format!("stop = [\"sh\", \"-c\", \"sleep 30; : {mark}\", \"{{id}}\"]"),
        ),
    );
    let t0 = Instant::now();
    let out = env.run(&["exec", "--remote", "fake", "--json", "print(6 * 7)"]);
    let took = t0.elapsed();
    out.expect_code(0);
    assert_eq!(out.json()["output"], "42\n", "{}", out.stdout);
    assert!(
        took < Duration::from_secs(15),
        "exec waited {took:?} for a stop bounded at 1 s"
    );
    let hung = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .any(|c| String::from_utf8_lossy(&c).contains(&mark))
    };
    assert!(
        eventually(Duration::from_secs(10), || !hung()),
        "the hung stop is still running"
    );
}
