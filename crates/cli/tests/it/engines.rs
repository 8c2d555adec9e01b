//! The remote-lifecycle recipes of docs/remotes.md against real engines on
//! this machine, through the real binary: Docker (Debian's docker.io, the
//! offline image `toolcell-test-python:1`) and a one-node SLURM cluster
//! (slurm-wlm + munge). `scripts/engines.sh` installs and starts both and
//! writes why one cannot run; a test whose engine is unavailable says so
//! (on stderr: `cargo test -- --nocapture` shows it; `scripts/test-all.sh`
//! prints the status before the tests) and returns. With
//! `TOOLCELL_REQUIRE=1` (set by `scripts/test-all.sh`) an unavailable engine
//! fails instead.
//!
//! Each test, per engine: a session's cells keep their state and call a
//! tool on the host, the allocation exists while the session lives and is
//! removed when it ends; a host killed with SIGKILL leaves its allocation,
//! and the next host sweeps it; nothing this test made is left behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{Env, FAST_CONFIG, Serve, eventually};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(120);

/// `Ok` when `engine` runs here, else why not.
fn engine(engine: &str) -> Result<(), String> {
    let deps = std::env::var("TOOLCELL_TEST_DEPS").unwrap_or_else(|_| {
        format!(
            "{}/.cache/toolcell-ci/deps",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    let status = std::fs::read_to_string(format!("{deps}/engines/status")).map_err(|e| {
        format!(
            "{deps}/engines/status: {e} (run scripts/engines.sh to install and start the engines)"
        )
    })?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{engine}=")))
        .unwrap_or("unavailable: not in the status file (run scripts/engines.sh)");
    if line == "ok" {
        Ok(())
    } else {
        Err(line.to_string())
    }
}

/// Whether to run; prints why not.
fn available(name: &str) -> bool {
    match engine(name) {
        Ok(()) => true,
        Err(why) => {
            common::missing(&format!("{name} {why}"));
            false
        }
    }
}

fn sh(cmd: &str) -> String {
    let out = Command::new("sh").arg("-c").arg(cmd).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A fresh tag for what one test makes, so tests never see each other's.
fn tag() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{}x{nanos}", std::process::id())
}

fn execute(s: &mut Serve, id: i64, session: &str, code: &str) -> Value {
    let msg = s.call(id, "execute", json!({"session": session, "code": code}));
    msg.get("result").cloned().unwrap_or(msg)
}

fn allocation_of(s: &mut Serve, id: i64, session: &str) -> String {
    common::allocation_of(s, id, session)
        .unwrap_or_else(|| panic!("no allocation listed for session {session}"))
}

/// One engine's run through the lifecycle. `exists(id)` tells whether an
/// allocation is still there; `mine()` lists every allocation of `tag`.
/// `inside` is a Python expression true only inside the allocation whose
/// id is the variable `alloc`.
/// `remove(id)` takes an allocation away behind toolcell's back.
fn lifecycle(
    remote_toml: &str,
    inside: &str,
    exists: &dyn Fn(&str) -> bool,
    mine: &dyn Fn() -> Vec<String>,
    remove: &dyn Fn(&str),
) {
    let env = Env::new();
    // No warm pool: the allocations counted are the sessions' own.
    env.write(
        "toolcell.toml",
        &format!(
            "{}\n{remote_toml}",
            FAST_CONFIG.replace(
                "[kernels]\n",
                "[kernels]\nremote = \"engine\"\nwarm_pool = 0\n"
            )
        ),
    );
    env.write("on-the-host.txt", "only here\n");

    // A session: state across cells, a tool call served by the host.
    let mut s = Serve::start(&env, &[]);
    let t = Instant::now();
    let r = execute(
        &mut s,
        1,
        "s1",
        "import socket, os\nwhere = socket.gethostname()",
    );
    let first = t.elapsed();
    assert_eq!(r["status"], "success", "{r:#}\n{}", s.stderr());
    assert_eq!(r["kernel"]["remote"], "engine");
    let a1 = allocation_of(&mut s, 10, "s1");
    let r = execute(
        &mut s,
        11,
        "s1",
        &format!("alloc = {a1:?}\nprint({inside})"),
    );
    assert_eq!(
        r["output"], "True\n",
        "the cell runs in allocation {a1}: {r:#}"
    );
    let t = Instant::now();
    let r = execute(
        &mut s,
        2,
        "s1",
        "from toolcell_tools import read_file\nprint(read_file('on-the-host.txt')['content'].strip(), bool(where))",
    );
    let warm = t.elapsed();
    assert_eq!(r["output"], "only here True\n", "{r:#}");
    assert_eq!(r["tool_calls_made"], 1);
    assert_eq!(r["kernel"]["reused"], true);
    eprintln!("first cell (start + connect) {first:?}, warm cell {warm:?}");
    assert!(exists(&a1), "{a1} should exist");
    assert_eq!(mine(), vec![a1.clone()]);

    // The allocation is removed behind toolcell's back (the connection is
    // lost): the next cell says the state is gone and runs in a fresh one.
    let msg = s.call(19, "sessions", json!({}));
    let pid = common::session_pid(&msg["result"], "s1").unwrap();
    remove(&a1);
    assert!(eventually(Duration::from_secs(30), || !exists(&a1)));
    // Its command (docker exec, srun) notices and exits.
    assert!(eventually(Duration::from_secs(30), || !common::alive(pid)));
    let r = execute(&mut s, 20, "s1", "print('where' in dir())");
    assert_eq!(r["status"], "success", "{r:#}");
    assert_eq!(r["output"], "False\n", "{r:#}");
    assert_eq!(r["kernel"]["state_reset"], true, "{r:#}");
    assert!(
        r["warning"]
            .as_str()
            .is_some_and(|w| w.contains("ended between cells")),
        "{r:#}"
    );
    let a1 = allocation_of(&mut s, 21, "s1");
    assert!(exists(&a1));
    assert_eq!(mine(), vec![a1.clone()]);

    // The session's end removes its allocation.
    s.call(4, "shutdown_session", json!({"session": "s1"}));
    assert!(
        eventually(Duration::from_secs(30), || !exists(&a1)),
        "{a1} still there"
    );

    // A killed host leaves its allocation; the next host sweeps it.
    let r = execute(&mut s, 5, "s2", "x = 1");
    assert_eq!(r["status"], "success", "{r:#}");
    let a2 = allocation_of(&mut s, 6, "s2");
    assert!(exists(&a2));
    common::signal(s.pid(), nix::sys::signal::Signal::SIGKILL);
    let _ = s.wait(LIMIT);
    // Passage of time is the subject: the allocation stays (nothing is left
    // to stop it) until the next host sweeps it.
    std::thread::sleep(Duration::from_secs(1));
    assert!(exists(&a2), "nothing stops it when the host is killed");
    env.run(&["exec", "--remote", "", "print(1)"])
        .expect_code(0);
    assert!(
        eventually(Duration::from_secs(30), || !exists(&a2)),
        "{a2} was not swept"
    );

    // A host that exits normally stops its allocations on the way out.
    let out = env.run(&[
        "exec",
        "--json",
        "import socket\nprint(socket.gethostname() != '')",
    ]);
    out.expect_code(0);
    assert_eq!(out.json()["output"], "True\n", "{}", out.stdout);
    assert!(
        eventually(Duration::from_secs(30), || mine().is_empty()),
        "left behind: {:?}",
        mine()
    );
}

#[test]
fn docker_containers_per_session_through_the_binary() {
    if !available("docker") {
        return;
    }
    let tag = tag();
    let remote = format!(
        r#"
[remotes.engine]
start = ["docker", "run", "-d", "--rm", "--init", "--network", "none", "--memory", "512m",
         "--label", "toolcell.host={{host}}", "--label", "toolcell.session={{session}}",
         "--label", "toolcell.test={tag}", "toolcell-test-python:1", "sleep", "infinity"]
command = ["docker", "exec", "-i", "{{id}}"]
stop = ["docker", "rm", "-f", "{{id}}"]
list = ["docker", "ps", "-aq", "--no-trunc", "--filter", "label=toolcell.host={{host}}"]
"#
    );
    let exists = |id: &str| {
        !sh(&format!("docker ps -aq --no-trunc --filter id={id}"))
            .trim()
            .is_empty()
    };
    let mine = || -> Vec<String> {
        sh(&format!(
            "docker ps -aq --no-trunc --filter label=toolcell.test={tag}"
        ))
        .lines()
        .map(str::to_string)
        .collect()
    };
    // Its own machine: the host's files are not there.
    let inside = "not os.path.exists('on-the-host.txt') and alloc.startswith(socket.gethostname())";
    let remove = |id: &str| {
        sh(&format!("docker rm -f {id}"));
    };
    lifecycle(&remote, inside, &exists, &mine, &remove);
}

#[test]
fn slurm_allocations_per_session_through_the_binary() {
    if !available("slurm") {
        return;
    }
    let tag = tag();
    let remote = format!(
        r#"
[remotes.engine]
start = ["sh", "-c", "out=$(salloc --no-shell --job-name=toolcell-{{host}} --comment=test-{tag} 2>&1) || {{ echo \"$out\" >&2; exit 1; }}; echo \"$out\" | sed -n 's/^salloc: Granted job allocation //p'"]
command = ["srun", "--jobid={{id}}", "--overlap", "--quiet", "--unbuffered"]
stop = ["scancel", "{{id}}"]
list = ["squeue", "--me", "-h", "-o", "%i", "-t", "PD,R", "--name=toolcell-{{host}}"]
"#
    );
    // A job that is only completing is gone for our purposes.
    let exists = |id: &str| {
        !sh(&format!("squeue -h -j {id} -t PD,R,CF,S -o %i 2>/dev/null"))
            .trim()
            .is_empty()
    };
    let mine = || -> Vec<String> {
        sh("squeue -h -t PD,R,CF,S -o '%i %k'")
            .lines()
            .filter(|l| l.ends_with(&format!("test-{tag}")))
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .collect()
    };
    // A step of that job (the one node is this machine).
    let inside = "os.environ.get('SLURM_JOB_ID') == alloc";
    let remove = |id: &str| {
        sh(&format!("scancel {id}"));
    };
    lifecycle(&remote, inside, &exists, &mine, &remove);
}
