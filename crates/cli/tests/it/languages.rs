//! R and JavaScript through the real binary (docs/languages.md):
//! `exec --language`, `serve`'s `execute {language}` with one session holding a
//! kernel per language, and `schema --language`. A missing interpreter fails
//! with the install command.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

fn bin() -> Command {
    let tmp = std::env::temp_dir();
    let mut c = Command::new(env!("CARGO_BIN_EXE_toolcell"));
    c.current_dir(&tmp);
    c
}

fn require(prog: &str, install: &str) {
    let ok = Command::new(prog)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(ok, "{prog} is not installed; install it with: {install}");
}

#[test]
fn exec_runs_r_and_javascript() {
    require(
        "Rscript",
        "scripts/test-deps.sh (apt-get install r-base-core r-cran-jsonlite)",
    );
    require("node", "apt-get install nodejs");
    let out = bin()
        .args(["exec", "--json", "--language", "r", "x <- 20; x * 2 + 2"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "success", "{v}");
    assert_eq!(v["output"], "[1] 42\n", "{v}");
    assert_eq!(v["kernel"]["language"], "r", "{v}");
    let out = bin()
        .args([
            "exec",
            "--language",
            "js",
            "const a = await Promise.resolve(41); a + 1",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "42\n");
    let out = bin()
        .args(["exec", "--language", "cobol", "1"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn serve_keeps_a_kernel_per_language_in_one_session() {
    require(
        "Rscript",
        "scripts/test-deps.sh (apt-get install r-base-core r-cran-jsonlite)",
    );
    require("node", "apt-get install nodejs");
    let mut child = bin()
        .arg("serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut call = |id: u64, code: &str, language: Option<&str>| -> Value {
        let mut params = json!({"code": code, "session": "s"});
        if let Some(l) = language {
            params["language"] = json!(l);
        }
        let req = json!({"jsonrpc": "2.0", "id": id, "method": "execute", "params": params});
        writeln!(stdin, "{req}").unwrap();
        stdin.flush().unwrap();
        loop {
            let line = lines.next().unwrap().unwrap();
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == json!(id) {
                return v;
            }
        }
    };
    let a = call(1, "v = 'py'", None);
    let b = call(2, "v <- 'r'", Some("r"));
    let c = call(3, "var v = 'js'", Some("javascript"));
    for r in [&a, &b, &c] {
        assert_eq!(r["result"]["status"], "success", "{r}");
    }
    assert_eq!(a["result"]["kernel"]["language"], "python");
    let r = call(4, "cat(v)", Some("r"));
    assert_eq!(r["result"]["output"], "r", "{r}");
    let p = call(5, "print(v)", None);
    assert_eq!(p["result"]["output"], "py\n", "{p}");
    let bad = call(6, "1", Some("ruby"));
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("unknown language"),
        "{bad}"
    );
    drop(stdin);
    let _ = child.wait();
}

#[test]
fn schema_describes_the_tool_for_the_language() {
    let out = bin()
        .args(["schema", "--language", "r", "--format", "mcp"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let d = v["description"].as_str().unwrap();
    assert!(d.starts_with("Run R code"), "{d}");
    assert!(
        d.contains("read_file(path, offset = 1, limit = 2000)"),
        "{d}"
    );
    let out = bin()
        .args(["schema", "--language", "javascript"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let d = v["function"]["description"].as_str().unwrap();
    assert!(
        d.contains("await read_file({path, offset = 1, limit = 2000})"),
        "{d}"
    );
}
