//! The real binary: help texts, usage errors, configuration errors and
//! `toolcell config`, `schema`, `tools` and `stubs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use crate::common::Env;
use serde_json::Value;

const SUBCOMMANDS: [&str; 9] = [
    "exec", "serve", "repl", "daemon", "schema", "tools", "stubs", "config", "frames",
];

/// The tools a default configuration enables: derived, as the binary does,
/// from the tools' own registrations (this test links the same crate).
fn default_tools() -> Vec<String> {
    toolcell_tools::default_enabled_tools()
}

/// Every tool linked into the binary.
fn all_tools() -> Vec<String> {
    toolcell_tools::ToolRegistry::builtin()
        .unwrap()
        .names()
        .map(str::to_string)
        .collect()
}

#[test]
fn top_level_help_lists_every_command_and_exits_0() {
    let env = Env::new();
    for flag in ["--help", "-h", "help"] {
        let out = env.run(&[flag]);
        out.expect_code(0);
        assert!(out.stdout.contains("Usage: toolcell"), "{}", out.stdout);
        for sub in SUBCOMMANDS {
            assert!(
                out.stdout.contains(&format!("\n  {sub} ")),
                "`toolcell {flag}` does not list {sub}:\n{}",
                out.stdout
            );
        }
    }
    let v = env.run(&["--version"]);
    v.expect_code(0);
    assert!(v.stdout.starts_with("toolcell "), "{}", v.stdout);
}

#[test]
fn every_subcommand_has_help_naming_its_flags() {
    let env = Env::new();
    let expect: &[(&[&str], &[&str])] = &[
        (
            &["exec"],
            &[
                "--session",
                "--reset",
                "--timeout",
                "--mode",
                "--tools",
                "--cwd",
                "--json",
                "--file",
                "-f",
                "124",
                "130",
            ],
        ),
        (
            &["serve"],
            &[
                "execute",
                "interrupt",
                "sessions",
                "shutdown_session",
                "schema",
                "cell/output",
                "-32700",
                "--timeout",
                "--mode",
                "--tools",
            ],
        ),
        (&["daemon"], &["start", "stop", "status", "idle_exit"]),
        (&["daemon", "start"], &["Usage"]),
        (&["daemon", "stop"], &["Usage"]),
        (&["daemon", "status"], &["--json"]),
        (
            &["schema"],
            &["--format", "openai", "anthropic", "mcp", "--tools"],
        ),
        (&["tools"], &["--json"]),
        (&["stubs"], &["--tools", "toolcell_tools"]),
        (&["config"], &["# default", "--timeout", "--plain"]),
        (&["frames"], &["--sentinel"]),
        (&["repl"], &["Usage"]),
    ];
    for (cmd, words) in expect {
        let mut args = cmd.to_vec();
        args.push("--help");
        let out = env.run(&args);
        out.expect_code(0);
        assert!(
            out.stdout.contains("Usage: toolcell"),
            "{args:?}: {}",
            out.stdout
        );
        for w in *words {
            assert!(
                out.stdout.contains(w),
                "`toolcell {}` help lacks {w}:\n{}",
                args.join(" "),
                out.stdout
            );
        }
        assert!(out.stderr.is_empty(), "{args:?}: {}", out.stderr);
    }
}

#[test]
fn unknown_flags_and_commands_exit_2_with_a_message_on_stderr() {
    let env = Env::new();
    let cases: &[&[&str]] = &[
        &["--bogus"],
        &["nosuchcommand"],
        &["exec", "--bogus", "print(1)"],
        &["serve", "--bogus"],
        &["daemon", "--bogus"],
        &["daemon", "restart"],
        &["daemon", "status", "--bogus"],
        &["schema", "--bogus"],
        &["tools", "--bogus"],
        &["stubs", "--bogus"],
        &["config", "--bogus"],
        &["frames", "--bogus"],
        &["exec", "-f"],
        &["exec", "print(1)", "-f", "x.py"],
    ];
    for args in cases {
        let out = env.run(args);
        out.expect_code(2);
        assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
        assert!(out.stderr.contains("error"), "{args:?}: {}", out.stderr);
    }
}

/// (file content, words the error must contain)
const BAD_CONFIGS: &[(&str, &[&str])] = &[
    (
        "[execution]\nbogus = 1\n",
        &["execution.bogus", "timeout", "max_tool_calls"],
    ),
    ("[nosuch]\na = 1\n", &["nosuch", "execution", "kernels"]),
    (
        "[execution]\ntimeout = \"soon\"\n",
        &["execution.timeout", "seconds"],
    ),
    ("[execution]\ntimeout = -3\n", &["execution.timeout", "> 0"]),
    (
        "[kernels]\nmax_kernels = 0\n",
        &["kernels.max_kernels", ">= 1"],
    ),
    (
        "[execution]\nmode = \"loose\"\n",
        &["execution.mode", "project", "strict", "loose"],
    ),
    (
        "[execution]\non_timeout = \"maybe\"\n",
        &["execution.on_timeout", "interrupt", "kill"],
    ),
    ("[tools]\nenabled = [\"nope\"]\n", &["nope", "read_file"]),
    ("[tools]\nenabled = \"read_file\"\n", &["tools.enabled"]),
    ("not toml [\n", &["toolcell.toml", "TOML"]),
    ("[daemon]\nidle_exit = 0\n", &["daemon.idle_exit", "> 0"]),
    (
        "[output]\nmax_stdout_bytes = \"big\"\n",
        &["output.max_stdout_bytes", "whole number"],
    ),
    (
        "[rpc]\ntransport = \"udp\"\n",
        &["rpc.transport", "unix", "tcp", "udp"],
    ),
    (
        "[env]\npassthrough = [\"BAD NAME\"]\n",
        &["env.passthrough", "BAD NAME"],
    ),
    (
        "[web]\nsearch_provider = \"searxng\"\n",
        &["web.search_url", "searxng"],
    ),
    (
        "[execution]\ntimeout = 1e12\n",
        &["execution.timeout", "at most"],
    ),
    (
        "[execution]\nmax_tool_calls = 1.5\n",
        &["execution.max_tool_calls", "whole number"],
    ),
];

#[test]
fn config_errors_name_the_key_and_what_it_accepts_and_exit_2() {
    for (toml, words) in BAD_CONFIGS {
        let env = Env::with_config(toml);
        for args in [
            &["exec", "print('ran')"][..],
            &["config"][..],
            &["schema"][..],
            &["serve"][..],
        ] {
            let out = env.run(args);
            out.expect_code(2);
            assert!(
                !out.stdout.contains("ran"),
                "a bad config must stop before any cell runs"
            );
            for w in *words {
                assert!(
                    out.stderr.contains(w),
                    "{args:?} with {toml:?}: the error lacks {w:?}:\n{}",
                    out.stderr
                );
            }
        }
    }
}

#[test]
fn bad_flag_values_are_usage_errors_naming_the_flag() {
    let env = Env::new();
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["exec", "--timeout", "abc", "print(1)"],
            &["--timeout", "abc"],
        ),
        (&["exec", "--timeout", "0", "print(1)"], &["--timeout"]),
        (
            &["exec", "--mode", "loose", "print(1)"],
            &["--mode", "project", "strict"],
        ),
        (
            &["exec", "--tools", "read_file,nope", "print(1)"],
            &["--tools", "nope", "read_file"],
        ),
        (&["exec", "--cwd", "no/such/dir", "print(1)"], &["--cwd"]),
        (&["exec", "-f", "missing.py"], &["missing.py"]),
        (&["exec", "   "], &["empty"]),
        (
            &["--config", "nonexistent.toml", "config"],
            &["nonexistent.toml"],
        ),
        (
            &["schema", "--format", "xml"],
            &["xml", "openai", "anthropic", "mcp"],
        ),
        (&["config", "--timeout=-1"], &["--timeout"]),
        (&["serve", "--mode", "loose"], &["--mode"]),
    ];
    for (args, words) in cases {
        let out = env.run(args);
        out.expect_code(2);
        for w in *words {
            assert!(
                out.stderr.contains(w),
                "{args:?}: stderr lacks {w:?}:\n{}",
                out.stderr
            );
        }
    }
}

#[test]
fn config_prints_values_and_their_sources() {
    let env = Env::with_config("[execution]\ntimeout = 42\nmax_tool_calls = 7\n");
    let file = env.canonical().join("toolcell.toml");
    let out = env.run(&["config"]);
    out.expect_code(0);
    let line = |key: &str| {
        out.stdout
            .lines()
            .find(|l| l.starts_with(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("no {key} line:\n{}", out.stdout))
            .to_string()
    };
    assert_eq!(
        line("timeout"),
        format!("timeout = 42  # from {}", file.display())
    );
    assert_eq!(
        line("max_tool_calls"),
        format!("max_tool_calls = 7  # from {}", file.display())
    );
    assert_eq!(line("max_kernels"), "max_kernels = 4  # default");
    assert_eq!(
        line("max_stdout_bytes"),
        "max_stdout_bytes = 50000  # default"
    );
    assert_eq!(line("on_timeout"), "on_timeout = \"interrupt\"  # default");
    for section in [
        "[execution]",
        "[kernels]",
        "[output]",
        "[env]",
        "[tools]",
        "[rpc]",
        "[web]",
    ] {
        assert!(out.stdout.contains(section), "{section}:\n{}", out.stdout);
    }

    // A flag wins over the file and says so.
    let out = env.run(&["config", "--timeout", "9", "--mode", "strict"]);
    out.expect_code(0);
    assert!(
        out.stdout.contains("\ntimeout = 9  # from --timeout\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("\nmode = \"strict\"  # from --mode\n"),
        "{}",
        out.stdout
    );

    // --plain: the same values without comments.
    let plain = env.run(&["config", "--plain"]);
    plain.expect_code(0);
    assert!(plain.stdout.contains("timeout = 42\n"), "{}", plain.stdout);
    assert!(!plain.stdout.contains('#'), "{}", plain.stdout);
}

#[test]
fn config_discovery_explicit_then_cwd_then_user_dir() {
    let env = Env::new();
    // No file anywhere: defaults.
    let out = env.run(&["config"]);
    out.expect_code(0);
    assert!(
        out.stdout.contains("\ntimeout = 300  # default\n"),
        "{}",
        out.stdout
    );

    // The user config dir.
    let user = env.write(
        "config/toolcell/toolcell.toml",
        "[execution]\ntimeout = 11\n",
    );
    let out = env.run(&["config"]);
    assert!(
        out.stdout
            .contains(&format!("timeout = 11  # from {}", user.display())),
        "{}",
        out.stdout
    );

    // ./toolcell.toml wins over the user dir.
    env.write("toolcell.toml", "[execution]\ntimeout = 12\n");
    let out = env.run(&["config"]);
    assert!(
        out.stdout.contains("timeout = 12  # from "),
        "{}",
        out.stdout
    );

    // --config wins over both.
    env.write("other.toml", "[execution]\ntimeout = 13\n");
    let out = env.run(&["--config", "other.toml", "config"]);
    out.expect_code(0);
    assert!(
        out.stdout.contains("timeout = 13  # from "),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("other.toml"), "{}", out.stdout);
}

fn description(def: &Value, format: &str) -> String {
    let d = match format {
        "openai" => &def["function"]["description"],
        _ => &def["description"],
    };
    d.as_str().unwrap().to_string()
}

#[test]
fn schema_has_the_shape_of_each_format() {
    let env = Env::new();
    for format in ["openai", "anthropic", "mcp"] {
        let out = env.run(&["schema", "--format", format]);
        out.expect_code(0);
        let def = out.json();
        let params = match format {
            "openai" => {
                assert_eq!(def["type"], "function");
                assert_eq!(def["function"]["name"], "execute_code");
                &def["function"]["parameters"]
            }
            "anthropic" => {
                assert_eq!(def["name"], "execute_code");
                assert!(def.get("inputSchema").is_none());
                &def["input_schema"]
            }
            _ => {
                assert_eq!(def["name"], "execute_code");
                assert!(def.get("input_schema").is_none());
                &def["inputSchema"]
            }
        };
        assert_eq!(params["type"], "object");
        assert_eq!(params["properties"]["code"]["type"], "string");
        assert_eq!(params["properties"]["reset"]["type"], "boolean");
        assert!(
            params["required"]
                .as_array()
                .unwrap()
                .contains(&Value::from("code"))
        );
        let d = description(&def, format);
        for t in default_tools() {
            assert!(d.contains(&t), "{format}: description lacks {t}");
        }
        // It says what the code can reach: by default, a sandbox whose
        // network is the package indexes.
        assert!(
            d.contains("The code runs in a sandbox")
                && d.contains("Network: only the package indexes"),
            "{format}: {d}"
        );
    }
    // Unsandboxed, it says so, and never calls it a sandbox.
    let off = Env::with_config("[sandbox]\nmode = \"off\"\n");
    let out = off.run(&["schema", "--format", "mcp"]);
    out.expect_code(0);
    let d = description(&out.json(), "mcp");
    assert!(d.contains("it is not isolated from it"), "{d}");
    assert!(!d.to_lowercase().contains("sandbox"), "{d}");
    // The default format is openai.
    let out = env.run(&["schema"]);
    out.expect_code(0);
    assert_eq!(out.json()["type"], "function");
}

#[test]
fn schema_lists_only_enabled_tools_and_configured_limits() {
    let env = Env::with_config("[execution]\ntimeout = 123\nmax_tool_calls = 17\n");
    let out = env.run(&[
        "schema",
        "--format",
        "anthropic",
        "--tools",
        "read_file,patch",
    ]);
    out.expect_code(0);
    let d = description(&out.json(), "anthropic");
    assert!(d.contains("read_file("), "{d}");
    assert!(d.contains("patch("), "{d}");
    for absent in [
        "terminal",
        "web_search",
        "web_extract",
        "write_file",
        "search_files",
    ] {
        assert!(!d.contains(absent), "{absent} is not enabled:\n{d}");
    }
    assert!(d.contains("123"), "the configured timeout:\n{d}");
    assert!(d.contains("17"), "the configured tool budget:\n{d}");

    // The same through the config file.
    let env = Env::with_config("[tools]\nenabled = [\"terminal\"]\n");
    let d = description(&env.run(&["schema", "--format", "mcp"]).json(), "mcp");
    assert!(d.contains("terminal("), "{d}");
    assert!(!d.contains("read_file("), "{d}");
}

#[test]
fn tools_lists_every_builtin_tool() {
    let env = Env::new();
    let out = env.run(&["tools"]);
    out.expect_code(0);
    for t in all_tools() {
        assert!(
            out.stdout.lines().any(|l| l.starts_with(&format!("{t}("))),
            "{t} missing:\n{}",
            out.stdout
        );
    }
    // read_file's documented defaults are in its signature.
    let sig = out
        .stdout
        .lines()
        .find(|l| l.starts_with("read_file("))
        .unwrap();
    assert!(sig.contains("offset") && sig.contains("2000"), "{sig}");

    let out = env.run(&["tools", "--json"]);
    out.expect_code(0);
    let defs = out.json();
    let defs = defs.as_array().unwrap();
    let mut names: Vec<&str> = defs.iter().map(|d| d["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    let mut want = all_tools();
    want.sort_unstable();
    assert_eq!(names, want);
    for d in defs {
        assert!(
            d["description"].as_str().is_some_and(|s| !s.is_empty()),
            "{d}"
        );
        assert_eq!(d["inputSchema"]["type"], "object", "{d}");
        assert!(d.get("outputSchema").is_some(), "{d}");
    }
    let read = defs.iter().find(|d| d["name"] == "read_file").unwrap();
    assert_eq!(read["inputSchema"]["properties"]["limit"]["default"], 2000);
}

#[test]
fn stubs_compile_and_import_and_follow_tools() {
    let env = Env::new();
    let out = env.run(&["stubs"]);
    out.expect_code(0);
    let path = env.write("stubs/toolcell_tools.py", &out.stdout);
    let compile = std::process::Command::new("python3")
        .args(["-m", "py_compile"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        compile.status.success(),
        "py_compile: {}",
        String::from_utf8_lossy(&compile.stderr)
    );
    for t in default_tools() {
        assert!(out.stdout.contains(&format!("def {t}(")), "def {t}");
    }
    for helper in [
        "class ToolError",
        "def json_parse(",
        "def shell_quote(",
        "def retry(",
    ] {
        assert!(out.stdout.contains(helper), "{helper}");
    }
    // Importing it has no side effects (no connection, no output).
    let import = std::process::Command::new("python3")
        .args([
            "-c",
            "import toolcell_tools as t; print(sorted(n for n in dir(t) if n in \
             ('read_file','terminal','ToolError')))",
        ])
        .env("PYTHONPATH", path.parent().unwrap())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("TOOLCELL_RPC")
        .output()
        .unwrap();
    assert!(
        import.status.success(),
        "import: {}",
        String::from_utf8_lossy(&import.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&import.stdout),
        "['ToolError', 'read_file', 'terminal']\n"
    );

    let out = env.run(&["stubs", "--tools", "read_file"]);
    out.expect_code(0);
    assert!(out.stdout.contains("def read_file("));
    assert!(!out.stdout.contains("def terminal("));
    assert!(!out.stdout.contains("def web_search("));
}

#[test]
fn schema_states_the_cwd_rule_of_the_mode() {
    let env = Env::new();
    let project = description(&env.run(&["schema", "--format", "mcp"]).json(), "mcp");
    let strict = description(
        &env.run(&["schema", "--format", "mcp", "--mode", "strict"])
            .json(),
        "mcp",
    );
    assert!(project.contains("project directory"), "{project}");
    assert!(strict.contains("temporary directory"), "{strict}");
    assert!(!strict.contains("is the project directory"), "{strict}");
    // The same through the config file.
    let env = Env::with_config("[execution]\nmode = \"strict\"\n");
    let d = description(&env.run(&["schema", "--format", "mcp"]).json(), "mcp");
    assert!(d.contains("temporary directory"), "{d}");
}

#[test]
fn config_output_is_toml_that_reads_back_the_same() {
    let env = Env::with_config("[execution]\ntimeout = 42\n[tools]\nenabled = [\"read_file\"]\n");
    let with_sources = env.run(&["config"]);
    with_sources.expect_code(0);
    let plain = env.run(&["config", "--plain"]);
    plain.expect_code(0);
    // Python's tomllib (3.11+) reads both; without it there is nothing to check.
    let script = "import json, sys\n\
        try:\n    import tomllib\nexcept ImportError:\n    print('skip'); sys.exit(0)\n\
        a, b = sys.stdin.read().split('\\0')\n\
        x, y = tomllib.loads(a), tomllib.loads(b)\n\
        assert x == y, (x, y)\n\
        print(json.dumps(x))";
    let mut child = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        write!(stdin, "{}\0{}", with_sources.stdout, plain.stdout).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    if text.trim() == "skip" {
        common::missing("python3 has no tomllib (Python 3.11 or newer reads TOML)");
        return;
    }
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["execution"]["timeout"], 42);
    assert_eq!(v["tools"]["enabled"], serde_json::json!(["read_file"]));
    assert_eq!(v["kernels"]["max_kernels"], 4);
}

// ---- exit codes of history, export and daemon status ----

#[test]
fn history_and_export_of_an_unknown_session_agree() {
    let env = Env::fast();
    // With a journal that has cells of another session, and with none.
    for with_cells in [false, true] {
        if with_cells {
            let mut s = common::Serve::start(&env, &[]);
            s.call(
                1,
                "execute",
                serde_json::json!({"session": "real", "code": "1"}),
            );
            drop(s);
        }
        let history = env.run(&["history", "--session", "nosuch"]);
        let json = env.run(&["history", "--json", "--session", "nosuch"]);
        let export = env.run(&["export", "--session", "nosuch"]);
        for out in [&history, &json, &export] {
            out.expect_code(1);
            assert!(out.stdout.is_empty(), "{}", out.stdout);
            assert!(
                out.stderr
                    .contains("no cells of session \"nosuch\" in the journal")
                    && out.stderr.contains("toolcell history"),
                "{}",
                out.stderr
            );
        }
        assert_eq!(history.stderr, export.stderr);
    }
    // A session that has cells is found by both.
    env.run(&["history", "--session", "real"]).expect_code(0);
    env.run(&["export", "--session", "real"]).expect_code(0);
}

#[test]
fn daemon_status_documents_its_exit_codes() {
    let env = Env::fast();
    let help = env.run(&["daemon", "status", "--help"]);
    help.expect_code(0);
    for words in [
        "Exit codes",
        "0 the daemon is running",
        "3 it is not running",
    ] {
        assert!(help.stdout.contains(words), "{words:?}:\n{}", help.stdout);
    }
    let out = env.run(&["daemon", "status"]);
    out.expect_code(3);
    assert!(out.stdout.contains("not running"), "{}", out.stdout);
}

#[test]
fn a_reader_that_stops_reading_ends_the_command_quietly() {
    // `toolcell schema | head -1`: the pipe's reader is gone before the
    // command writes; it ends with 0 and says nothing.
    let env = Env::fast();
    let mut child = env
        .cmd()
        .args(["schema", "--format", "anthropic"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = common::finish(child, common::COMMAND_LIMIT);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stderr, "", "{out:?}");
}
