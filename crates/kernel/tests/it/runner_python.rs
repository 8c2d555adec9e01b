//! Runs the runner's own Python test suite (`runner/tests`, stdlib
//! unittest) so `cargo test` covers it, under the default `python3` and,
//! when installed, the oldest supported Python (3.8) too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

fn run_suite(python: &str) {
    let dir = Path::new(
        &std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("runner/tests");
    let out = Command::new("python3")
        .args(["-m", "unittest", "discover", "-s"])
        .arg(&dir)
        .env("TOOLCELL_TEST_PYTHON", python)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "runner suite failed under {python}:\n{}",
        &err[err.len().saturating_sub(6000)..]
    );
    assert!(err.contains("\nOK"), "{err}");
}

#[test]
fn runner_suite_passes_under_python3() {
    let exe = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    run_suite(String::from_utf8_lossy(&exe.stdout).trim());
}

/// The oldest supported Python is 3.8. No registry CI reaches carries a
/// 3.8 (Debian 11 ships 3.9, Debian 12 3.11), so where pyenv has no 3.8 the
/// suite runs under the oldest Python that `scripts/test-deps.sh` can
/// install, Debian 11's 3.9.
#[test]
fn runner_suite_passes_under_the_oldest_python_found() {
    let home = std::env::var("HOME").unwrap_or_default();
    let candidates = [
        format!("{home}/.pyenv/versions/3.8.18/bin/python3.8"),
        "/usr/bin/python3.8".to_string(),
        format!("{home}/.pyenv/versions/3.9.18/bin/python3.9"),
        "/usr/bin/python3.9".to_string(),
    ];
    match candidates.iter().find(|p| Path::new(p).exists()) {
        Some(p) => run_suite(p),
        None => {
            assert!(
                std::env::var_os("TOOLCELL_REQUIRE").is_none_or(|v| v != "1"),
                "TOOLCELL_REQUIRE=1, and no Python 3.8 or 3.9 is installed ({candidates:?}; \
                 scripts/test-deps.sh installs one)"
            );
            eprintln!("SKIPPED: no Python 3.8 or 3.9 found ({candidates:?})");
        }
    }
}
