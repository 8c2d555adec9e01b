#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]
//! Interpreter resolution (docs/configuration.md, "[execution]"; docs/mcp.md,
//! "Setting it up") with real interpreters: venvs, `.venv`, PATH, shims,
//! too-old Pythons, and the once-per-host probe cache.
//!
//! Fake "interpreters" for failure modes are small shell scripts; every
//! success case runs a real Python.

use std::fs;
use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use toolcell_host::config::Mode;
use toolcell_kernel::interpreter::{
    HostEnv, InterpreterError, ProbeCache, Reason, Rule, resolve, resolve_for_host,
};

/// The real interpreter behind `python3` on this host (through any shim),
/// and its version; `None` (with a message) when there is none.
fn real_python() -> Option<(PathBuf, String)> {
    let out = Command::new("python3")
        .args([
            "-I",
            "-S",
            "-c",
            "import sys; print(sys.executable); print('.'.join(map(str, sys.version_info[:3])))",
        ])
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let mut lines = text.lines();
    let exe = PathBuf::from(lines.next()?);
    let version = lines.next()?.to_string();
    Some((exe, version))
}

macro_rules! require_python {
    () => {
        match real_python() {
            Some(found) => found,
            None => {
                crate::common::missing("no python3 on PATH");
                return;
            }
        }
    };
}

/// The `major.minor.micro` version of the interpreter at `exe`, if it runs.
fn version_of(exe: &Path) -> Option<String> {
    let out = Command::new(exe)
        .args([
            "-c",
            "import sys; print('.'.join(map(str, sys.version_info[:3])))",
        ])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The first of `candidates` (relative ones under `$HOME`) that runs and
/// whose version `wanted` accepts, with that version. Old interpreters come
/// from pyenv where it has them, else from what `scripts/test-deps.sh`
/// installs (Debian 11's `python2.7` and `pypy3`, a Python 3.7).
fn old_python(candidates: &[&str], wanted: fn(&str) -> bool) -> Option<(PathBuf, String)> {
    let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
    candidates.iter().find_map(|c| {
        let exe = home.join(c);
        let version = version_of(&exe).filter(|v| wanted(v))?;
        Some((exe, version))
    })
}

fn make_venv(root: &Path, python: &Path) -> PathBuf {
    let bin = root.join("bin");
    fs::create_dir_all(&bin).unwrap();
    symlink(python, bin.join("python")).unwrap();
    root.to_path_buf()
}

fn script(path: &Path, body: &str) -> PathBuf {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
    path.to_path_buf()
}

fn attempts(err: &InterpreterError) -> Vec<(Rule, Reason)> {
    match err {
        InterpreterError::NoneUsable { attempts, .. } => attempts
            .iter()
            .map(|a| (a.rule, a.reason.clone()))
            .collect(),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn a_virtual_env_is_used_and_its_own_path_launched() {
    let (real, version) = require_python!();
    let dir = tempfile::tempdir().unwrap();
    let venv = make_venv(&dir.path().join("venv"), &real);
    let env = HostEnv {
        virtual_env: Some(venv.clone().into()),
        ..HostEnv::with_path("/nonexistent")
    };
    let cache = ProbeCache::new();
    let found = resolve("", Mode::Project, dir.path(), &env, &cache).unwrap();
    assert_eq!(found.rule, Rule::VirtualEnv);
    // The venv's symlink, not the interpreter it points to: that is what
    // activates a venv.
    assert_eq!(found.executable, venv.join("bin/python"));
    assert_eq!(found.version, version);
    assert_eq!(found.requested, venv.join("bin/python").to_str().unwrap());
}

#[test]
fn conda_prefix_comes_after_virtual_env_and_before_dot_venv() {
    let (real, _) = require_python!();
    let dir = tempfile::tempdir().unwrap();
    let conda = make_venv(&dir.path().join("conda"), &real);
    make_venv(&dir.path().join(".venv"), &real);
    let env = HostEnv {
        conda_prefix: Some(conda.clone().into()),
        virtual_env: Some(dir.path().join("gone").into()),
        ..HostEnv::with_path("/nonexistent")
    };
    let found = resolve("", Mode::Project, dir.path(), &env, &ProbeCache::new()).unwrap();
    assert_eq!(found.rule, Rule::CondaPrefix);
    assert_eq!(found.executable, conda.join("bin/python"));
}

#[test]
fn a_dot_venv_in_cwd_is_used_in_project_mode_and_ignored_in_strict_mode() {
    let (real, version) = require_python!();
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    make_venv(&project.join(".venv"), &real);
    // PATH holds a python3 of its own (a symlink to the same real binary).
    let path_dir = dir.path().join("pathbin");
    fs::create_dir_all(&path_dir).unwrap();
    symlink(&real, path_dir.join("python3")).unwrap();
    let env = HostEnv::with_path(path_dir.as_os_str());
    let cache = ProbeCache::new();

    let found = resolve("", Mode::Project, &project, &env, &cache).unwrap();
    assert_eq!(found.rule, Rule::DotVenv);
    assert_eq!(found.executable, project.join(".venv/bin/python"));

    let strict = resolve("", Mode::Strict, &project, &env, &cache).unwrap();
    assert_eq!(strict.rule, Rule::Path);
    assert_eq!(strict.executable, path_dir.join("python3"));
    assert_eq!(strict.version, version);

    // Strict mode also ignores $VIRTUAL_ENV.
    let env = HostEnv {
        virtual_env: Some(project.join(".venv").into()),
        ..HostEnv::with_path(path_dir.as_os_str())
    };
    let strict = resolve("", Mode::Strict, &project, &env, &cache).unwrap();
    assert_eq!(strict.rule, Rule::Path);
}

#[test]
fn a_shim_is_paid_once_the_real_executable_is_launched() {
    let (real, version) = require_python!();
    let dir = tempfile::tempdir().unwrap();
    // A version-manager style shim: a shell script that execs the real one.
    script(
        &dir.path().join("shims/python3"),
        &format!("exec '{}' \"$@\"", real.display()),
    );
    let env = HostEnv::with_path(dir.path().join("shims").as_os_str());
    let found = resolve("", Mode::Strict, dir.path(), &env, &ProbeCache::new()).unwrap();
    assert_eq!(
        found.requested,
        dir.path().join("shims/python3").to_str().unwrap()
    );
    assert_eq!(found.executable, real);
    assert_eq!(found.version, version);
}

#[test]
fn explicit_interpreters_by_path_relative_path_and_name() {
    let (real, _) = require_python!();
    let dir = tempfile::tempdir().unwrap();
    let venv = make_venv(&dir.path().join("env"), &real);
    let cache = ProbeCache::new();
    let env = HostEnv::with_path(venv.join("bin").as_os_str());

    let abs = resolve(
        venv.join("bin/python").to_str().unwrap(),
        Mode::Strict,
        dir.path(),
        &env,
        &cache,
    )
    .unwrap();
    assert_eq!(abs.rule, Rule::Explicit);
    assert_eq!(abs.executable, venv.join("bin/python"));

    let rel = resolve("env/bin/python", Mode::Project, dir.path(), &env, &cache).unwrap();
    assert_eq!(rel.executable, venv.join("bin/python"));

    // A bare name is looked up on PATH.
    let named = resolve("python", Mode::Project, Path::new("/"), &env, &cache).unwrap();
    assert_eq!(named.executable, venv.join("bin/python"));
    // `~/` is $HOME.
    let home_env = HostEnv {
        home: Some(dir.path().into()),
        ..HostEnv::default()
    };
    let tilde = resolve(
        "~/env/bin/python",
        Mode::Strict,
        Path::new("/"),
        &home_env,
        &cache,
    )
    .unwrap();
    assert_eq!(tilde.executable, venv.join("bin/python"));
    // All four were the same candidate file: one probe.
    assert_eq!(cache.probe_count(), 1);
}

#[test]
fn a_missing_explicit_interpreter_is_an_error_naming_it_without_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no/such/python");
    // A python3 on PATH exists, but an explicit choice never falls back to it.
    let env = HostEnv::current();
    let err = resolve(
        missing.to_str().unwrap(),
        Mode::Project,
        dir.path(),
        &env,
        &ProbeCache::new(),
    )
    .unwrap_err();
    assert_eq!(attempts(&err), [(Rule::Explicit, Reason::NotFound)]);
    let msg = err.to_string();
    assert!(
        msg.contains(&format!(
            "explicit interpreter \"{}\": not found",
            missing.display()
        )),
        "{msg}"
    );

    let err = resolve(
        "python9.99",
        Mode::Strict,
        dir.path(),
        &HostEnv::with_path("/a:/b"),
        &ProbeCache::new(),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("explicit interpreter \"python9.99\": not found on PATH (/a:/b)"),
        "{err}"
    );
}

#[test]
fn every_candidate_is_named_when_none_works() {
    let dir = tempfile::tempdir().unwrap();
    let env = HostEnv::with_path(dir.path().join("empty-bin").as_os_str());
    let err = resolve("", Mode::Project, dir.path(), &env, &ProbeCache::new()).unwrap_err();
    assert_eq!(
        attempts(&err),
        [
            (Rule::VirtualEnv, Reason::NotSet("VIRTUAL_ENV")),
            (Rule::CondaPrefix, Reason::NotSet("CONDA_PREFIX")),
            (Rule::DotVenv, Reason::NotFound),
            (
                Rule::Path,
                Reason::NotOnPath(dir.path().join("empty-bin").to_string_lossy().into_owned())
            ),
        ]
    );
    let msg = err.to_string();
    assert!(
        msg.starts_with(
            "no usable Python interpreter (need 3.8 or newer) in project mode; tried: 1) "
        ),
        "{msg}"
    );
    assert!(
        msg.contains(&dir.path().join(".venv/bin/python").display().to_string()),
        "{msg}"
    );

    let err = resolve(
        "",
        Mode::Strict,
        dir.path(),
        &HostEnv::default(),
        &ProbeCache::new(),
    )
    .unwrap_err();
    assert_eq!(attempts(&err).len(), 1, "{err}");
    assert!(err.to_string().contains("in strict mode"), "{err}");
    assert!(
        err.to_string()
            .ends_with("1) \"python3\" on PATH: not found: PATH is empty or unset"),
        "{err}"
    );
}

#[test]
fn a_broken_candidate_is_reported_and_the_next_one_tried() {
    let (real, _) = require_python!();
    let dir = tempfile::tempdir().unwrap();
    // $VIRTUAL_ENV's python exits 1 with a message; .venv's is not executable.
    script(
        &dir.path().join("venv/bin/python"),
        "echo 'error while loading shared libraries: libpython3.11.so' >&2; exit 127",
    );
    fs::create_dir_all(dir.path().join(".venv/bin")).unwrap();
    fs::write(dir.path().join(".venv/bin/python"), "not a program").unwrap();
    let path_dir = dir.path().join("pathbin");
    fs::create_dir_all(&path_dir).unwrap();
    symlink(&real, path_dir.join("python3")).unwrap();
    let env = HostEnv {
        virtual_env: Some(dir.path().join("venv").into()),
        ..HostEnv::with_path(path_dir.as_os_str())
    };
    let found = resolve("", Mode::Project, dir.path(), &env, &ProbeCache::new()).unwrap();
    assert_eq!(found.rule, Rule::Path);

    // With no python3 on PATH the error carries each reason.
    let env = HostEnv {
        virtual_env: Some(dir.path().join("venv").into()),
        ..HostEnv::with_path("/nonexistent")
    };
    let err = resolve("", Mode::Project, dir.path(), &env, &ProbeCache::new()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("probe failed: exit status: 127: error while loading shared libraries"),
        "{msg}"
    );
    assert!(msg.contains(".venv/bin/python): not executable"), "{msg}");
}

#[test]
fn an_interpreter_that_is_too_old_is_refused_with_its_version() {
    let older_than_3_8 = |v: &str| {
        let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        parts.next() == Some(3) && parts.next().is_some_and(|minor| minor < 8)
    };
    let candidates = [
        ".pyenv/versions/3.6.15/bin/python3.6",
        ".pyenv/versions/3.7.16/bin/python3.7",
        "/usr/bin/pypy3",
    ];
    let Some((old, version)) = old_python(&candidates, older_than_3_8) else {
        crate::common::missing(&format!(
            "no Python 3 older than 3.8 among {candidates:?} (scripts/test-deps.sh installs one)"
        ));
        return;
    };
    let cache = ProbeCache::new();
    let dir = tempfile::tempdir().unwrap();
    let err = resolve(
        old.to_str().unwrap(),
        Mode::Project,
        dir.path(),
        &HostEnv::default(),
        &cache,
    )
    .unwrap_err();
    assert_eq!(
        attempts(&err),
        [(Rule::Explicit, Reason::TooOld(version.clone()))]
    );
    assert!(
        err.to_string().contains(&format!(
            "too old: Python {version} (toolcell needs 3.8 or newer)"
        )),
        "{err}"
    );
    // "Too old" is cached: asking again does not start Python again.
    resolve(
        old.to_str().unwrap(),
        Mode::Project,
        dir.path(),
        &HostEnv::default(),
        &cache,
    )
    .unwrap_err();
    assert_eq!(cache.probe_count(), 1);

    // As $VIRTUAL_ENV it is passed over for python3 on PATH.
    let (real, _) = require_python!();
    let venv = make_venv(&dir.path().join("oldenv"), &old);
    let path_dir = dir.path().join("pathbin");
    fs::create_dir_all(&path_dir).unwrap();
    symlink(&real, path_dir.join("python3")).unwrap();
    let env = HostEnv {
        virtual_env: Some(venv.into()),
        ..HostEnv::with_path(path_dir.as_os_str())
    };
    let found = resolve("", Mode::Project, dir.path(), &env, &cache).unwrap();
    assert_eq!(found.rule, Rule::Path);
}

#[test]
fn python_2_is_refused_with_a_reason() {
    let candidates = [".pyenv/versions/2.7.18/bin/python2.7", "/usr/bin/python2.7"];
    let Some((py2, _)) = old_python(&candidates, |v| v.starts_with("2.")) else {
        crate::common::missing(&format!(
            "no Python 2 among {candidates:?} (scripts/test-deps.sh installs one)"
        ));
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let err = resolve(
        py2.to_str().unwrap(),
        Mode::Project,
        dir.path(),
        &HostEnv::default(),
        &ProbeCache::new(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("no -I option"), "{err}");
}

#[test]
fn two_resolutions_probe_once() {
    let (real, _) = require_python!();
    let dir = tempfile::tempdir().unwrap();
    let venv = make_venv(&dir.path().join(".venv"), &real);
    let cache = ProbeCache::new();
    let env = HostEnv::default();
    let first = resolve("", Mode::Project, dir.path(), &env, &cache).unwrap();
    assert_eq!(cache.probe_count(), 1);
    let second = resolve("", Mode::Project, dir.path(), &env, &cache).unwrap();
    assert_eq!(cache.probe_count(), 1);
    assert_eq!(first, second);

    // A candidate replaced on disk is probed again.
    fs::remove_file(venv.join("bin/python")).unwrap();
    script(
        &venv.join("bin/python"),
        &format!("exec '{}' \"$@\"", real.display()),
    );
    let third = resolve("", Mode::Project, dir.path(), &env, &cache).unwrap();
    assert_eq!(cache.probe_count(), 2);
    assert_eq!(third.executable, real);
}

#[test]
fn concurrent_first_probes_share_one_run() {
    let (real, _) = require_python!();
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    // A slow shim that counts its starts.
    let shim = script(
        &dir.path().join("slow/python3"),
        &format!(
            "echo run >> '{}'; sleep 0.3; exec '{}' \"$@\"",
            runs.display(),
            real.display()
        ),
    );
    let cache = Arc::new(ProbeCache::new());
    let env = HostEnv::with_path(shim.parent().unwrap().as_os_str());
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let cache = Arc::clone(&cache);
            let env = env.clone();
            let cwd = dir.path().to_path_buf();
            std::thread::spawn(move || resolve("", Mode::Strict, &cwd, &env, &cache).unwrap())
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(results.iter().all(|r| r.executable == real));
    assert_eq!(cache.probe_count(), 1);
    assert_eq!(fs::read_to_string(&runs).unwrap().lines().count(), 1);
}

#[test]
fn a_failed_probe_is_not_cached() {
    let dir = tempfile::tempdir().unwrap();
    let flaky = script(
        &dir.path().join("python"),
        "echo 'flaky failure' >&2; exit 3",
    );
    let cache = ProbeCache::new();
    for _ in 0..2 {
        let err = resolve(
            flaky.to_str().unwrap(),
            Mode::Project,
            dir.path(),
            &HostEnv::default(),
            &cache,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("exit status: 3: flaky failure"),
            "{err}"
        );
    }
    assert_eq!(cache.probe_count(), 2);
}

#[test]
fn a_hung_or_flooding_probe_is_killed_at_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let hung = script(
        &dir.path().join("hung/python"),
        &format!("echo $$ > '{}'; exec sleep 30", pidfile.display()),
    );
    let flood = script(&dir.path().join("flood/python"), "exec yes 0123456789");
    let cache = ProbeCache::with_timeout(Duration::from_millis(400));
    for (candidate, why) in [
        (&hung, "no answer within 0.4 s (killed)"),
        (&flood, "printed more than 16384 bytes"),
    ] {
        let started = Instant::now();
        let err = resolve(
            candidate.to_str().unwrap(),
            Mode::Project,
            dir.path(),
            &HostEnv::default(),
            &cache,
        )
        .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert!(err.to_string().contains(why), "{err}");
    }
    // The hung process is gone (killed and reaped), not left behind.
    let pid: u32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "probe {pid} still alive"
    );
}

#[test]
fn resolve_for_host_finds_the_hosts_python() {
    let (_, version) = require_python!();
    let dir = tempfile::tempdir().unwrap();
    let found = resolve_for_host("", Mode::Strict, dir.path()).unwrap();
    assert_eq!(found.rule, Rule::Path);
    assert_eq!(found.version, version);
    assert!(found.executable.is_absolute());
    let again = resolve_for_host("", Mode::Strict, dir.path()).unwrap();
    assert_eq!(found, again);
    // At most one probe for both (none when an earlier process left it on disk).
    assert!(ProbeCache::global().probe_count() <= 1);
}
