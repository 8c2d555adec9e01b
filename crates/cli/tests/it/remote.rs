//! Remote kernels through the real binary (README.md,
//! "Kernels on other machines: ssh, Docker, Kubernetes"): `exec --remote` with
//! stand-in `docker` and `kubectl` on PATH (they check their argv, then run the
//! rest here), `remote` in serve's `execute` and MCP's `execute_code`, and
//! `toolcell config` listing the remotes. The cell semantics over a real sshd
//! are tested in crates/host/tests/it/remote.rs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::common::{Env, FAST_CONFIG, Serve};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);

fn config() -> String {
    format!(
        "{FAST_CONFIG}\n\
         [remotes.here]\ncommand = [\"sh\", \"-c\", 'exec \"$@\"', \"--\"]\n\n\
         [remotes.box]\ncommand = [\"docker\", \"exec\", \"-i\", \"box\"]\n\n\
         [remotes.pod]\ncommand = [\"kubectl\", \"exec\", \"-i\", \"pod-0\", \"--\"]\n"
    )
}

fn stand_ins(env: &Env) -> String {
    let docker = "#!/bin/sh\n[ \"$1\" = exec ] && [ \"$2\" = -i ] && [ \"$3\" = box ] || { echo \"docker stand-in: bad argv\" >&2; exit 64; }\nshift 3\nexec \"$@\"\n";
    let kubectl = "#!/bin/sh\n[ \"$1\" = exec ] && [ \"$2\" = -i ] && [ \"$3\" = pod-0 ] && [ \"$4\" = -- ] || { echo \"kubectl stand-in: bad argv\" >&2; exit 64; }\nshift 4\nexec \"$@\"\n";
    for (name, text) in [("docker", docker), ("kubectl", kubectl)] {
        let p = env.write(&format!("bin/{name}"), text);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    format!(
        "{}:{}",
        env.path().join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

#[test]
fn exec_remote_runs_through_docker_and_kubectl_on_path() {
    let env = Env::with_config(&config());
    let path = stand_ins(&env);
    for name in ["box", "pod", "here"] {
        let out = env
            .cmd()
            .env("PATH", &path)
            .args([
                "exec",
                "--json",
                "--remote",
                name,
                "import sys\nprint(sys.version_info >= (3, 8))",
            ])
            .output()
            .unwrap();
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(r["status"], "success", "{r}");
        assert_eq!(r["output"], "True\n", "{r}");
        assert_eq!(r["kernel"]["remote"], name, "{r}");
    }
    // Unknown remote: a usage error (exit 2) naming the configured ones.
    let out = env
        .cmd()
        .args(["exec", "--remote", "nope", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nope") && err.contains("box, here, pod"),
        "{err}"
    );
    // `toolcell config` shows them.
    let out = env.cmd().arg("config").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("[remotes.box]") && text.contains("shell = false  # auto"),
        "{text}"
    );
    assert!(text.contains("remote = \"\""), "{text}");
}

#[test]
fn serve_execute_takes_remote_and_tools_work_in_band() {
    let env = Env::with_config(&config());
    env.write("note.txt", "host file\n");
    let mut s = Serve::start(&env, &[]);
    let r = s.call(
        1,
        "execute",
        json!({"code": "x = read_file(path='note.txt')['content']\nprint(x.strip())", "remote": "here"}),
    );
    let res = &r["result"];
    assert_eq!(res["status"], "success", "{r}");
    assert_eq!(res["output"], "host file\n", "{r}");
    assert_eq!(res["kernel"]["remote"], "here");
    assert_eq!(res["tool_calls_made"], 1);
    // Same session name, local: another kernel (the remote is in the key).
    let r = s.call(2, "execute", json!({"code": "'x' in globals()"}));
    assert_eq!(r["result"]["output"], "False\n", "{r}");
    assert!(r["result"]["kernel"].get("remote").is_none(), "{r}");
    let r = s.call(3, "execute", json!({"code": "x", "remote": "here"}));
    assert_eq!(r["result"]["output"], "'host file\\n'\n", "{r}");
    let r = s.call(4, "execute", json!({"code": "1", "remote": "nope"}));
    assert_eq!(r["result"]["status"], "error", "{r}");
    assert!(
        r["result"]["error"]
            .as_str()
            .unwrap()
            .contains("unknown remote \"nope\""),
        "{r}"
    );
    let r = s.call(5, "execute", json!({"code": "1", "remote": "a b"}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    s.close_stdin();
    assert!(s.wait(Duration::from_secs(20)).success());
}

#[test]
fn mcp_execute_code_takes_remote() {
    let env = Env::with_config(&config());
    let mut s = Serve::start_command(&env, "mcp", &[]);
    s.request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "raw", "version": "0"}}),
    );
    let _ = s.until_id(&json!(1), LIMIT);
    s.send_raw(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    s.request(2, "tools/list", json!({}));
    let (list, _) = s.until_id(&json!(2), LIMIT);
    let schema = &list["result"]["tools"][0]["inputSchema"]["properties"]["remote"];
    assert_eq!(schema["enum"], json!(["", "box", "here", "pod"]), "{list}");
    s.request(
        3,
        "tools/call",
        json!({"name": "execute_code", "arguments": {"code": "print(6 * 7)", "remote": "here"}}),
    );
    let (r, _) = s.until_id(&json!(3), LIMIT);
    let res = &r["result"]["structuredContent"];
    assert_eq!(res["output"], "42\n", "{r}");
    assert_eq!(res["kernel"]["remote"], "here", "{r}");
    s.close_stdin();
    assert!(s.wait(Duration::from_secs(20)).success());
}

#[test]
fn exec_remote_runs_r_and_javascript_through_docker_on_path() {
    for (prog, install) in [
        (
            "Rscript",
            "scripts/test-deps.sh (apt-get install r-base-core r-cran-jsonlite)",
        ),
        ("node", "apt-get install nodejs (node 18 or later)"),
    ] {
        let ok = std::process::Command::new(prog)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(ok, "{prog} is not installed; install it with: {install}");
    }
    let env = Env::with_config(&config());
    let path = stand_ins(&env);
    env.write("note.txt", "from the host\n");
    for (lang, code, want) in [
        (
            "r",
            "x <- read_file(path = 'note.txt')\ncat(class(x), x$content)",
            "list from the host\n",
        ),
        (
            "javascript",
            "const r = await read_file({path: 'note.txt'})\nconsole.log(typeof r, r.content.trim())",
            "object from the host\n",
        ),
    ] {
        let out = env
            .cmd()
            .env("PATH", &path)
            .args([
                "exec",
                "--json",
                "--remote",
                "box",
                "--language",
                lang,
                code,
            ])
            .output()
            .unwrap();
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(r["status"], "success", "{r}");
        assert_eq!(r["output"], want, "{r}");
        assert_eq!(r["kernel"]["remote"], "box", "{r}");
        assert_eq!(r["kernel"]["language"], lang, "{r}");
        assert_eq!(r["tool_calls_made"], 1, "{r}");
    }
}
