//! The Python clients in the repository, run against the real binary:
//! `examples/agent_host.py` (the README's "give the code your agent's
//! tools" example) and the client-tool test client in `tests/clients/`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use crate::common::Env;

fn run_python(script: &std::path::Path, args: &[&str], env: &Env) -> String {
    let out = Command::new("python3")
        .arg(script)
        .args(args)
        .current_dir(env.path())
        .env("TOOLCELL", env!("CARGO_BIN_EXE_toolcell"))
        .env("XDG_RUNTIME_DIR", env.runtime_dir())
        .env("HOME", env.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} failed: {}\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_agent_host_example_runs_its_cell_over_its_own_tools() {
    let env = Env::new();
    let script = std::path::Path::new(
        &std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../../examples/agent_host.py");
    let out = run_python(&script, &[], &env);
    assert_eq!(out, "orders over 100: ['A-1', 'A-3']\n");
}

#[test]
fn a_python_client_serves_parallel_tool_calls_errors_and_cancels() {
    let env = Env::new();
    let script = std::path::Path::new(
        &std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("tests/clients/client_tools.py");
    let out = run_python(&script, &[env!("CARGO_BIN_EXE_toolcell")], &env);
    assert_eq!(out, "ok\n");
}
