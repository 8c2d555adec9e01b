//! Every hint rule, each fed a real traceback produced by running Python.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use toolcell_tools::ToolRegistry;
use toolcell_tools::hints::{HintContext, hint};

/// Runs `code` with the generated stub module importable; returns stderr.
fn traceback_of(code: &str) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let reg = ToolRegistry::builtin().unwrap();
    let tools = reg.select(&["read_file", "terminal"]).unwrap();
    std::fs::write(
        tmp.path().join("toolcell_tools.py"),
        toolcell_stubs::python::stub_module(&tools).unwrap(),
    )
    .unwrap();
    let out = Command::new("python3")
        .arg("-c")
        .arg(code)
        .env("PYTHONPATH", tmp.path())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "the snippet was meant to fail: {code}"
    );
    String::from_utf8(out.stderr).unwrap()
}

fn cx() -> HintContext {
    let mut cx = HintContext::new(
        vec![
            "read_file".into(),
            "terminal".into(),
            "json_parse".into(),
            "shell_quote".into(),
            "retry".into(),
        ],
        "/usr/bin/python3 (3.11.7)",
    );
    cx.max_tool_calls = 50;
    cx
}

#[test]
fn a_missing_name_in_toolcell_tools_lists_what_is_importable() {
    let tb = traceback_of("from toolcell_tools import web_search");
    let h = hint(&tb, &cx()).unwrap();
    assert!(h.contains("`web_search`"), "{h}");
    assert!(h.contains("read_file, terminal"), "{h}");
    let tb = traceback_of("import toolcell_tools\ntoolcell_tools.patch('x')");
    assert!(hint(&tb, &cx()).unwrap().contains("`patch`"));
}

#[test]
fn a_helper_imported_from_the_wrong_place_or_called_wrongly() {
    let tb = traceback_of("from json import json_parse");
    let h = hint(&tb, &cx()).unwrap();
    assert!(h.contains("already defined"), "{h}");
    let tb = traceback_of("from toolcell import retry");
    assert!(hint(&tb, &cx()).unwrap().contains("already defined"));
    let tb = traceback_of("from toolcell_tools import retry\nretry()");
    let h = hint(&tb, &cx()).unwrap();
    assert!(h.contains("retry(fn"), "{h}");
    let tb = traceback_of("from toolcell_tools import json_parse\njson_parse('{}', 'extra')");
    assert!(hint(&tb, &cx()).unwrap().contains("json_parse(text)"));
}

#[test]
fn a_missing_module_names_the_interpreter_and_suggests_pip() {
    let tb = traceback_of("import sklearn_not_installed_xyz");
    let h = hint(&tb, &cx()).unwrap();
    assert!(h.contains("/usr/bin/python3 (3.11.7)"), "{h}");
    assert!(h.contains("%pip install sklearn_not_installed_xyz"), "{h}");
    let tb = traceback_of("import cv2.something_missing_xyz");
    // The pip name differs from the import name for common packages.
    let h = hint(&tb, &cx()).unwrap();
    assert!(h.contains("%pip install opencv-python"), "{h}");
}

#[test]
fn a_dict_result_treated_as_a_string() {
    for code in [
        "r = {'content': 'a\\nb'}\nr.splitlines()",
        "r = {'output': 'x'}\n'prefix' + r",
        "import json\njson.loads({'a': 1})",
        "open({'path': 'x'})",
    ] {
        let tb = traceback_of(code);
        let h = hint(&tb, &cx()).unwrap_or_else(|| panic!("no hint for {code}:\n{tb}"));
        assert!(h.contains("Tools return dicts"), "{h}");
    }
}

#[test]
fn stdin_budget_and_timeout_rules_use_the_context() {
    let tb = traceback_of("raise RuntimeError('input() is not supported in toolcell cells')");
    let mut c = cx();
    c.stdin_requested = true;
    assert!(hint(&tb, &c).unwrap().contains("interactive input"));

    let tb = traceback_of(
        "from toolcell_tools import ToolError\nraise ToolError('read_file: budget exhausted', 'budget_exhausted')",
    );
    let mut c = cx();
    c.budget_exhausted = true;
    assert!(hint(&tb, &c).unwrap().contains("all 50 tool calls"));

    let mut c = cx();
    c.killed_by_timeout = true;
    assert!(hint("", &c).unwrap().contains("killed after the timeout"));
}

#[test]
fn first_match_wins_and_unrelated_errors_get_none() {
    let tb = traceback_of("1/0");
    assert_eq!(hint(&tb, &cx()), None);
    // A missing module and a stdin flag: the module rule comes first.
    let tb = traceback_of("import not_installed_xyz_2");
    let mut c = cx();
    c.stdin_requested = true;
    assert!(hint(&tb, &c).unwrap().contains("%pip install"));
}

/// Runs `code` as an unprivileged user (as `nobody` through `runuser` when
/// the tests run as root: root is exempt from `RLIMIT_NPROC` and from file
/// permissions); returns stderr.
fn unprivileged_traceback_of(code: &str) -> String {
    // From a file, so the traceback shows source lines (as a cell's does).
    let dir = tempfile::tempdir_in("/tmp").unwrap();
    let script = dir.path().join("cell.py");
    std::fs::write(&script, code).unwrap();
    for p in [dir.path(), script.as_path()] {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let mut cmd = if nix::unistd::geteuid().is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "nobody", "--", "python3"]);
        c
    } else {
        Command::new("python3")
    };
    let out = cmd
        .arg(&script)
        .current_dir("/")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    assert!(!out.status.success(), "meant to fail: {code}");
    String::from_utf8(out.stderr).unwrap()
}

fn limited(pairs: &[(&str, u64)]) -> HintContext {
    let mut c = cx();
    c.limits = pairs.iter().map(|(k, v)| ((*k).to_string(), *v)).collect();
    c
}

#[test]
fn memory_error_names_the_memory_limit_only_when_it_is_set() {
    let tb = traceback_of(
        "import resource\nresource.setrlimit(resource.RLIMIT_AS, (300 << 20, 300 << 20))\nx = bytes(1 << 40)",
    );
    assert!(tb.contains("MemoryError"), "{tb}");
    let h = hint(&tb, &limited(&[("memory", 314_572_800)])).unwrap();
    assert!(
        h.contains("out of memory under [limits] memory = 314572800"),
        "{h}"
    );
    let h = hint(&tb, &cx()).unwrap();
    assert!(
        h.contains("out of memory") && !h.contains("[limits]"),
        "{h}"
    );
}

#[test]
fn a_process_that_cannot_start_names_the_processes_limit() {
    let tb = unprivileged_traceback_of(
        "import resource, subprocess\nresource.setrlimit(resource.RLIMIT_NPROC, (1, 1))\nsubprocess.run(['true'])",
    );
    assert!(tb.contains("[Errno 11]"), "{tb}");
    let h = hint(&tb, &limited(&[("processes", 64)])).unwrap();
    assert!(h.contains("[limits] processes = 64"), "{h}");
    assert!(h.contains("every process and thread of the user"), "{h}");
    assert!(!hint(&tb, &cx()).unwrap().contains("[limits]"));
    let tb = unprivileged_traceback_of(
        "import resource, os\nresource.setrlimit(resource.RLIMIT_NPROC, (1, 1))\nos.fork()",
    );
    assert!(hint(&tb, &cx()).unwrap().contains("could not be started"));
    // EAGAIN from a non-blocking read is not about processes.
    let tb = traceback_of("import os\nr, w = os.pipe()\nos.set_blocking(r, False)\nos.read(r, 1)");
    assert!(tb.contains("[Errno 11]"), "{tb}");
    assert_eq!(hint(&tb, &limited(&[("processes", 64)])), None);
}

#[test]
fn too_many_open_files_and_file_too_large_name_their_limits() {
    let tb = traceback_of(
        "import resource\nresource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))\nfs = [open('/dev/null') for _ in range(100)]",
    );
    let h = hint(&tb, &limited(&[("open_files", 32)])).unwrap();
    assert!(
        h.contains("too many files open under [limits] open_files = 32"),
        "{h}"
    );
    let tmp = tempfile::tempdir().unwrap();
    let tb = traceback_of(&format!(
        "import resource, signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\nresource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))\nopen({:?}, 'wb').write(b'x' * 100000)",
        tmp.path().join("f").display().to_string()
    ));
    let h = hint(&tb, &limited(&[("file_size", 1000)])).unwrap();
    assert!(h.contains("[limits] file_size = 1000"), "{h}");
    assert!(!hint(&tb, &cx()).unwrap().contains("[limits]"));
}

#[test]
fn a_refused_write_names_the_confinement_only_when_confined() {
    let tb = unprivileged_traceback_of("open('/root-owned-nowhere.txt', 'w')");
    assert!(tb.contains("PermissionError: [Errno 13]"), "{tb}");
    assert_eq!(hint(&tb, &cx()), None);
    let mut c = cx();
    c.confined_writable = vec!["/run/k-1".into(), "/run/k-1-work".into(), "/tmp".into()];
    let h = hint(&tb, &c).unwrap();
    assert!(h.contains("[execution] confine = true"), "{h}");
    assert!(h.contains("/run/k-1, /run/k-1-work, /tmp"), "{h}");
}

#[test]
fn a_cpu_limit_kill_names_cpu_seconds() {
    let mut c = limited(&[("cpu_seconds", 5)]);
    c.killed_by_cpu_limit = true;
    let h = hint("", &c).unwrap();
    assert!(h.contains("[limits] cpu_seconds = 5"), "{h}");
    assert!(h.contains("SIGXCPU"), "{h}");
}

#[test]
fn a_refused_signal_in_a_confined_kernel_says_so() {
    let tb = unprivileged_traceback_of("import os\nos.kill(1, 0)");
    assert!(tb.contains("PermissionError: [Errno 1]"), "{tb}");
    assert_eq!(hint(&tb, &cx()), None);
    let mut c = cx();
    c.confined_writable = vec!["/tmp".into()];
    let h = hint(&tb, &c).unwrap();
    assert!(
        h.contains("may signal only the processes it started"),
        "{h}"
    );
}
