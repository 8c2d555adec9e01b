//! Keeps `benches/compare/jupyter.py` (the side-by-side benchmark against
//! Jupyter, run by `scripts/bench-compare.sh`) working in CI without network:
//! its toolcell half runs here against this package's binary, with `python3
//! -S` (no site-packages) to prove `--toolcell-only` needs nothing but the
//! standard library.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_toolcell");
const LIMIT: Duration = Duration::from_secs(180);
const WORKLOADS: [&str; 5] = [
    "kernel_start",
    "exec_oneshot",
    "warm_cell",
    "print_10mb",
    "interrupt",
];

fn script() -> PathBuf {
    Path::new(
        &std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../../benches/compare/jupyter.py")
}

/// Runs the script with `python3 -S` with private `XDG_*` and `TMPDIR` dirs
/// (`HOME` is kept: a version manager's `python3` shim may need it), killing
/// it after [`LIMIT`].
fn run_script(args: &[&str]) -> Output {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::new("python3");
    cmd.arg("-S").arg(script()).args(args);
    for var in [
        "TMPDIR",
        "XDG_RUNTIME_DIR",
        "XDG_CACHE_HOME",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
    ] {
        cmd.env(var, home.path());
    }
    let mut child = cmd
        .current_dir(home.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 on PATH");
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > LIMIT {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "jupyter.py ran longer than {LIMIT:?}; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn toolcell_only_quick_json_measures_every_workload() {
    let out = run_script(&["--toolcell-only", "--quick", "--json", "--toolcell", BIN]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "jupyter.py failed: {stderr}");
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stderr}"));

    let rows = report["workloads"].as_array().expect("workloads array");
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, WORKLOADS);
    for row in rows {
        let name = &row["name"];
        let t = &row["toolcell"];
        for field in ["median_s", "p90_s", "min_s"] {
            let v = t[field].as_f64().unwrap_or(0.0);
            assert!(v > 0.0, "{name}: toolcell {field} is {v}, row {row}");
        }
        assert!(t["n"].as_u64().unwrap_or(0) >= 1, "{name}: no sample");
        assert!(
            t["p90_s"].as_f64() >= t["median_s"].as_f64(),
            "{name}: p90 below median: {row}"
        );
        // Jupyter was skipped: no figure and no ratio made up for it.
        assert!(row["jupyter"].is_null(), "{name}: {row}");
        assert!(row["ratio"].is_null(), "{name}: {row}");
    }
    // Kernels are launched by the interpreter that ran the script (the
    // default --python), so both sides of a full run use one Python.
    let interp = report["interpreter"]["toolcell"].as_str().unwrap();
    assert!(!interp.is_empty(), "{report}");
    assert!(report["machine"]["cores"].as_u64().unwrap() >= 1);
}

#[test]
fn missing_binary_is_a_clear_error() {
    let out = run_script(&[
        "--toolcell-only",
        "--quick",
        "--toolcell",
        "/nonexistent/toolcell",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("/nonexistent/toolcell") && stderr.contains("cargo build --release"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}
