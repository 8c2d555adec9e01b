//! A one-shot `toolcell exec` does not pay for the interpreter probe again:
//! the probe of a version-manager shim (slow, a shell script) is remembered
//! on disk, and made again when something the shim resolves with changes
//! (a `.python-version` file, `PYENV_VERSION`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::Env;

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

/// The `runner-*.code` files in the env's cache directory.
fn code_files(env: &Env) -> Vec<std::path::PathBuf> {
    cached_files(env, "runner-")
}

/// The `<prefix>*.code` files in the env's cache directory.
fn cached_files(env: &Env, prefix: &str) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(env.path().join("cache/toolcell"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    let n = p.file_name().unwrap().to_string_lossy().into_owned();
                    n.starts_with(prefix) && n.ends_with(".code")
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Runs `code` in a one-shot exec and returns its output.
fn exec_out(env: &Env, code: &str) -> String {
    let out = env
        .cmd()
        .args(["exec", "--mode", "strict", code])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// How the kernel running the cell was started: its command line's last word.
const HOW: &str = "print(open('/proc/self/cmdline','rb').read().split(b'\\0')[-2].decode())";

#[test]
fn the_runner_is_compiled_once_and_a_bad_cache_file_is_only_slower() {
    let env = Env::new();
    // The first kernel compiles the source, and the interpreter compiles
    // the runner for the next ones in the background.
    assert!(exec_out(&env, HOW).trim().ends_with("runner.py"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while code_files(&env).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no compiled runner was written"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let files = code_files(&env);
    assert_eq!(files.len(), 1, "{files:?}");
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&files[0]).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "the code file is private: {mode:o}");
    // The next kernel runs it: the bootstrap is told so, and cells,
    // tracebacks and tools work as before.
    assert_eq!(exec_out(&env, HOW).trim(), "code");
    let tb = env
        .cmd()
        .args(["exec", "--mode", "strict", "def f():\n    1/0\nf()"])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&tb.stdout).into_owned() + &String::from_utf8_lossy(&tb.stderr);
    assert!(text.contains("ZeroDivisionError"), "{text}");
    assert!(
        !text.contains("toolcell runner"),
        "runner frames leaked: {text}"
    );
    // A damaged file (another magic number, or this one followed by bad
    // or cut data) only means compiling from source again.
    let good = std::fs::read(&files[0]).unwrap();
    let cut = good.len() / 2;
    for bad in [
        b"\xff\xff\xff\xffgarbage".to_vec(),
        [&good[..4], b"garbage".as_slice()].concat(),
        good[..cut].to_vec(),
    ] {
        std::fs::write(&files[0], &bad).unwrap();
        assert_eq!(exec_out(&env, "print(6 * 7)"), "42\n");
    }
}

/// Where the stub module of the kernel running the cell came from, and
/// whether its tools work: the kernel directory's compiled stub (written
/// by the host from its cache) or the source.
const STUB: &str = "import os, toolcell_tools as t\n\
d = os.path.dirname(t.__file__)\n\
print(os.path.exists(os.path.join(d, 'toolcell_tools.code')))\n\
print(t.read_file.__code__.co_filename == os.path.join(d, 'toolcell_tools.py'))\n\
print(read_file('f.txt')['content'].strip())";

#[test]
fn the_stub_module_is_compiled_once_per_tool_set_and_a_bad_file_is_only_slower() {
    let env = Env::new();
    std::fs::write(env.path().join("f.txt"), "hello\n").unwrap();
    let run = |code: &str| {
        let out = env.cmd().args(["exec", code]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The first kernel compiles the stub itself; the host has the
    // interpreter compile it for the next ones in the background.
    assert_eq!(run(STUB), "False\nTrue\nhello\n");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while cached_files(&env, "stubs-").is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no compiled stub was written"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let files = cached_files(&env, "stubs-");
    assert_eq!(files.len(), 1, "{files:?}");
    // The next kernel loads it: tools work, and its functions name the
    // stub file of their own kernel directory (tracebacks, getsource).
    assert_eq!(run(STUB), "True\nTrue\nhello\n");
    let src = run(
        "import inspect, toolcell_tools as t\nprint(inspect.getsource(t.read_file).split('(')[0])",
    );
    assert_eq!(src.trim(), "def read_file");
    // A damaged file only means compiling the source again.
    let good = std::fs::read(&files[0]).unwrap();
    for bad in [
        b"\xff\xff\xff\xffgarbage".to_vec(),
        [&good[..4], b"garbage".as_slice()].concat(),
        good[..good.len() / 2].to_vec(),
    ] {
        std::fs::write(&files[0], &bad).unwrap();
        assert_eq!(
            run("print(read_file('f.txt')['content'].strip())"),
            "hello\n"
        );
    }
}
