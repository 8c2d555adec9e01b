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
