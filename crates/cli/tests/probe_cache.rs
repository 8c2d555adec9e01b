//! A one-shot `toolcell exec` does not pay for the interpreter probe again:
//! the probe of a version-manager shim (slow, a shell script) is remembered
//! on disk, and made again when something the shim resolves with changes
//! (a `.python-version` file, `PYENV_VERSION`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Env;

#[test]
fn a_shim_is_probed_once_until_its_context_changes() {
    let env = Env::new();
    // A shim like pyenv's: a script that logs each run, then runs Python.
    let real = String::from_utf8(
        std::process::Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let log = env.path().join("shim.log");
    let shims = env.path().join("shims");
    std::fs::create_dir(&shims).unwrap();
    let shim = shims.join("python3");
    std::fs::write(
        &shim,
        format!(
            "#!/bin/sh\necho run >> {}\nexec {} \"$@\"\n",
            log.display(),
            real.trim()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", shims.display());
    let runs = || {
        std::fs::read_to_string(&log)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    let exec = |extra: &[(&str, &str)]| {
        let mut cmd = env.cmd();
        cmd.env("PATH", &path)
            .args(["exec", "--mode", "strict", "print(6 * 7)"]);
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "42\n");
    };
    exec(&[]);
    assert_eq!(runs(), 1, "the first exec probes through the shim");
    exec(&[]);
    exec(&[]);
    assert_eq!(runs(), 1, "later ones use the remembered probe");
    std::fs::write(env.path().join(".python-version"), "3.11\n").unwrap();
    exec(&[]);
    assert_eq!(runs(), 2, "a new .python-version means a new probe");
    exec(&[("PYENV_VERSION", "3.11")]);
    assert_eq!(runs(), 3, "so does PYENV_VERSION");
    exec(&[("PYENV_VERSION", "3.11")]);
    assert_eq!(runs(), 3);
    exec(&[("TOOLCELL_PROBE_CACHE", "off")]);
    assert_eq!(runs(), 4, "TOOLCELL_PROBE_CACHE=off probes every time");
}
