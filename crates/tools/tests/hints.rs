//! Every hint rule, each fed a real traceback produced by running Python.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use toolcell_tools::hints::{HintContext, hint};
use toolcell_tools::{ToolRegistry, stubs};

/// Runs `code` with the generated stub module importable; returns stderr.
fn traceback_of(code: &str) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let reg = ToolRegistry::builtin().unwrap();
    let tools = reg.select(&["read_file", "terminal"]).unwrap();
    std::fs::write(
        tmp.path().join("toolcell_tools.py"),
        stubs::stub_module(&tools).unwrap(),
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
