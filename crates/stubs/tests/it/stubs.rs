//! The generated stub module: golden file, py_compile, signatures that
//! match the schemas, and calls from 8 threads against a real rpc server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use crate::golden;
use golden::check_golden;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use toolcell_rpc::{CellSpec, Server, ServerConfig};
use toolcell_tools::{DynTool, ToolRegistry, ToolSettings, schema};

fn builtin_tools() -> Vec<Arc<dyn DynTool>> {
    let reg = ToolRegistry::builtin().unwrap();
    let names: Vec<&str> = reg.names().collect();
    reg.select(&names).unwrap()
}

fn write_module(dir: &Path, tools: &[Arc<dyn DynTool>]) -> PathBuf {
    let src = toolcell_stubs::python::stub_module(tools).unwrap();
    let path = dir.join("toolcell_tools.py");
    std::fs::write(&path, src).unwrap();
    path
}

fn python(dir: &Path, code: &str, envs: &[(&str, &str)]) -> std::process::Output {
    Command::new("python3")
        .arg("-c")
        .arg(code)
        .current_dir(dir)
        .env("PYTHONPATH", dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .envs(envs.iter().copied())
        .output()
        .unwrap()
}

/// The golden file holds every built-in tool, web tools included.
#[test]
fn the_builtin_module_matches_its_golden_file() {
    let src = toolcell_stubs::python::stub_module(&builtin_tools()).unwrap();
    check_golden("toolcell_tools.py", &src);
}

#[test]
fn the_module_compiles_and_imports_without_side_effects() {
    let tmp = tempfile::tempdir().unwrap();
    let path = write_module(tmp.path(), &builtin_tools());
    let out = Command::new("python3")
        .args(["-m", "py_compile"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Importing opens no connection and needs no environment.
    let out = python(
        tmp.path(),
        "import toolcell_tools, threading; print(threading.active_count(), len(toolcell_tools.__all__))",
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("1 "), "{text}");
}

#[test]
fn python_signatures_match_the_schemas() {
    let tmp = tempfile::tempdir().unwrap();
    let tools = builtin_tools();
    write_module(tmp.path(), &tools);
    let out = python(
        tmp.path(),
        r#"
import inspect, json, toolcell_tools as t
sigs = {}
for name in t.__all__:
    f = getattr(t, name)
    if not inspect.isfunction(f) or name in ("json_parse", "shell_quote", "retry"):
        continue
    sigs[name] = [
        [p.name, None if p.default is inspect.Parameter.empty else repr(p.default), p.default is inspect.Parameter.empty]
        for p in inspect.signature(f).parameters.values()
    ]
    assert f.__doc__ and f.__doc__.strip(), name
print(json.dumps(sigs))
"#,
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sigs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sigs.as_object().unwrap().len(), tools.len());
    for tool in &tools {
        let params = schema::params(tool.as_ref());
        let got = sigs[tool.name()].as_array().unwrap();
        assert_eq!(got.len(), params.len(), "{}", tool.name());
        for (p, g) in params.iter().zip(got) {
            assert_eq!(g[0], p.name.as_str(), "{}", tool.name());
            match &p.default {
                None => assert_eq!(g[2], true, "{}.{} must be required", tool.name(), p.name),
                Some(d) => assert_eq!(
                    g[1].as_str().unwrap(),
                    schema::python_literal(d).replace('"', "'"),
                    "{}.{} default",
                    tool.name(),
                    p.name
                ),
            }
        }
    }
}

#[test]
fn calls_from_eight_threads_succeed_against_a_real_server() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    for i in 0..8 {
        std::fs::write(work.join(format!("f{i}.txt")), format!("line {i}\n")).unwrap();
    }
    let reg = ToolRegistry::builtin().unwrap();
    let dispatcher = reg.dispatcher(ToolSettings::new(&work));
    let _guard = rt.enter();
    let server =
        Server::bind_unix(tmp.path().join("k"), dispatcher, ServerConfig::default()).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let cell = server
        .open_cell(
            CellSpec::new("c1", deadline)
                .budget(100)
                .enable(["read_file"]),
        )
        .unwrap();
    let moddir = tmp.path().join("mod");
    std::fs::create_dir(&moddir).unwrap();
    write_module(&moddir, &reg.select(&["read_file"]).unwrap());
    let token = server.token().expose().to_string();
    let out = python(
        &moddir,
        r#"
import threading
from toolcell_tools import read_file, ToolError
results, errors = {}, []
def work(i):
    try:
        for _ in range(5):
            results[i] = read_file(f"f{i}.txt")["content"]
    except Exception as e:
        errors.append(repr(e))
ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
assert not errors, errors
assert all(results[i] == f"line {i}\n" for i in range(8)), results
try:
    read_file("missing.txt")
except ToolError as e:
    print("ToolError", e.code)
"#,
        &[
            ("TOOLCELL_RPC", server.endpoint()),
            ("TOOLCELL_RPC_TOKEN", &token),
        ],
    );
    let report = cell.settle();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "ToolError tool_failed"
    );
    assert_eq!(report.dispatched(), 41);
}
