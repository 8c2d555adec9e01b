#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `toolcell.toml` as a user meets it: defaults, strict errors naming the
//! key, discovery order, CLI overrides and the provenance printout.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use proptest::prelude::*;
use toolcell_host::config::{
    Config, ConfigError, KernelMode, Mode, OnTimeout, SearchProvider, Source, Transport,
    discover_path, user_config_file,
};

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, text).unwrap();
    path
}

/// The message a user sees for `text` in a file at `dir/toolcell.toml`.
fn file_error(text: &str) -> (PathBuf, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "toolcell.toml", text);
    let err = Config::from_file(&path).unwrap_err();
    (path, err.to_string())
}

#[test]
fn defaults_are_spec_11() {
    let c = Config::default();
    assert_eq!(c.execution.timeout, 300.0);
    assert_eq!(c.execution.max_tool_calls, 50);
    assert_eq!(c.execution.mode, Mode::Project);
    assert_eq!(c.execution.python, "");
    assert_eq!(c.execution.on_timeout, OnTimeout::Interrupt);
    assert_eq!(c.execution.interrupt_grace, 2.0);
    assert_eq!(c.execution.kill_grace, 2.0);
    assert_eq!(c.execution.kernel_mode, KernelMode::Session);
    assert_eq!(c.kernels.max_kernels, 4);
    assert_eq!(c.kernels.idle_timeout, 1800.0);
    assert_eq!(c.output.max_stdout_bytes, 50_000);
    assert_eq!(c.output.max_stderr_bytes, 10_000);
    assert_eq!(c.output.spill_dir, "");
    assert_eq!(c.output.spill_cap_bytes, 5_000_000);
    assert!(c.env.passthrough.is_empty());
    // Derived from the registrations: every built-in tool is on by default.
    let registry = toolcell_tools::ToolRegistry::builtin().unwrap();
    assert_eq!(c.tools.enabled, registry.default_enabled());
    assert!(c.tools.enabled.iter().any(|t| t == "read_file"));
    assert_eq!(c.rpc.transport, Transport::Unix);
    assert_eq!(c.web.search_provider, SearchProvider::None);
    assert_eq!(c.web.search_url, "");
    assert_eq!(c.web.search_api_key_env, "");
    assert!(c.guard.deny.is_empty());
    assert_eq!(c.daemon.idle_exit, 900.0);
    assert_eq!(c.timeout(), Duration::from_secs(300));
    assert_eq!(c.idle_timeout(), Duration::from_secs(1800));
    assert_eq!(c.idle_exit(), Duration::from_secs(900));
    assert_eq!(c.kill_grace(), Duration::from_secs(2));
    assert_eq!(c.interrupt_grace(), Duration::from_secs(2));
    for key in Config::keys() {
        assert_eq!(c.source(key), Some(&Source::Default), "{key}");
    }
    assert_eq!(c.file(), None);
    c.validate().unwrap();
}

#[test]
fn an_empty_file_gives_the_defaults() {
    let c = Config::from_toml_str("", None).unwrap();
    assert_eq!(c.to_toml(), Config::default().to_toml());
}

#[test]
fn every_key_is_read_from_a_file_and_attributed_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "toolcell.toml",
        r#"
[execution]
timeout = 12.5
max_tool_calls = 7
mode = "strict"
python = "/opt/py/bin/python3"
language = "r"
r = "/opt/R/bin/Rscript"
node = "/opt/node/bin/node"
on_timeout = "kill"
interrupt_grace = 0
kill_grace = 0.25
kernel_mode = "per-call"
confine = true

[kernels]
max_kernels = 2
idle_timeout = 60
warm_pool = 2
remote = "gpu"
remote_files_cap = "8MiB"

[remotes.gpu]
command = ["ssh", "-T", "gpu.example", "--"]

[limits]
memory = "1GiB"
cpu_seconds = 30
open_files = 256
processes = 2048
file_size = 1000000

[output]
max_stdout_bytes = 1000
max_stderr_bytes = 500
spill_dir = "/var/spill"
spill_cap_bytes = 123456
spill_retention_days = 0.5
spill_total_cap = "2GiB"
watch_files = false
watch_max_entries = 1000
fold = false
fold_min_run = 10
fold_keep = 2
max_line_chars = 100

[env]
passthrough = ["EDITOR", "AWS_*"]

[tools]
enabled = ["read_file", "terminal"]

[rpc]
transport = "tcp"

[web]
search_provider = "searxng"
search_url = "http://localhost:8888"
search_api_key_env = "BRAVE_API_KEY"

[guard]
deny = ["rm\\s+-rf", "^import os$"]

[daemon]
idle_exit = 30

[journal]
enabled = false
path = "/var/toolcell/journal.db"

[sandbox]
mode = "required"
network = ["example.com", "127.0.0.1:9000"]
writable = ["/var"]
hidden = ["/etc/hostname"]
tmp_bytes = "64MiB"
"#,
    );
    let c = Config::from_file(&path).unwrap();
    assert_eq!(c.execution.timeout, 12.5);
    assert_eq!(c.timeout(), Duration::from_millis(12_500));
    assert_eq!(c.execution.max_tool_calls, 7);
    assert_eq!(c.execution.mode, Mode::Strict);
    assert_eq!(c.execution.python, "/opt/py/bin/python3");
    assert_eq!(c.execution.on_timeout, OnTimeout::Kill);
    assert_eq!(c.interrupt_grace(), Duration::ZERO);
    assert_eq!(c.kill_grace(), Duration::from_millis(250));
    assert_eq!(c.execution.kernel_mode, KernelMode::PerCall);
    assert!(c.execution.confine);
    let limits = c.limits();
    assert_eq!(
        (limits.memory, limits.cpu_seconds, limits.open_files),
        (Some(1 << 30), Some(30), Some(256))
    );
    assert_eq!(
        (limits.processes, limits.file_size),
        (Some(2048), Some(1_000_000))
    );
    assert_eq!(c.kernels.max_kernels, 2);
    assert_eq!(c.idle_timeout(), Duration::from_secs(60));
    assert_eq!(c.warm_pool(0), 2);
    assert_eq!(c.kernels.remote, "gpu");
    assert_eq!(c.kernels.remote_files_cap, 8 << 20);
    assert!(c.remotes["gpu"].uses_shell());
    assert_eq!(c.output.max_stdout_bytes, 1000);
    assert_eq!(c.output.max_stderr_bytes, 500);
    assert_eq!(c.output.spill_dir, "/var/spill");
    assert_eq!(c.spill_dir(), Path::new("/var/spill"));
    assert_eq!(c.output.spill_cap_bytes, 123_456);
    assert_eq!(c.spill_retention(), Some(Duration::from_secs(43_200)));
    assert_eq!(c.spill_total_cap(), Some(2 << 30));
    assert_eq!(c.env.passthrough, ["EDITOR", "AWS_*"]);
    assert_eq!(c.tools.enabled, ["read_file", "terminal"]);
    assert_eq!(c.rpc.transport, Transport::Tcp);
    assert_eq!(c.web.search_provider, SearchProvider::Searxng);
    assert_eq!(c.web.search_url, "http://localhost:8888");
    assert_eq!(c.web.search_api_key_env, "BRAVE_API_KEY");
    let deny = c.guard_deny().unwrap();
    assert!(deny[0].is_match("rm  -rf /"));
    assert!(!deny[1].is_match("import sys"));
    assert_eq!(c.idle_exit(), Duration::from_secs(30));
    assert!(!c.journal.enabled.resolve(true));
    assert_eq!(c.journal_path(), Path::new("/var/toolcell/journal.db"));
    assert_eq!(c.sandbox.mode, toolcell_kernel::sandbox::Mode::Required);
    assert_eq!(
        c.sandbox.network,
        toolcell_kernel::sandbox::Network::List(vec![
            "example.com".into(),
            "127.0.0.1:9000".into()
        ])
    );
    assert_eq!(c.sandbox.writable, ["/var"]);
    assert_eq!(c.sandbox.hidden, ["/etc/hostname"]);
    assert_eq!(c.sandbox.tmp_bytes, 64 << 20);
    assert_eq!(c.file(), Some(path.as_path()));
    for key in Config::keys() {
        assert_eq!(c.source(key), Some(&Source::File(path.clone())), "{key}");
    }
}

#[test]
fn only_the_keys_in_the_file_are_attributed_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "toolcell.toml", "[kernels]\nmax_kernels = 9\n");
    let c = Config::from_file(&path).unwrap();
    assert_eq!(c.source("kernels.max_kernels"), Some(&Source::File(path)));
    assert_eq!(c.source("kernels.idle_timeout"), Some(&Source::Default));
    assert_eq!(c.source("execution.timeout"), Some(&Source::Default));
    assert_eq!(c.source("execution.nope"), None);
}

#[test]
fn a_bad_value_names_the_file_the_key_what_it_accepts_and_what_it_got() {
    let (path, msg) = file_error("[execution]\ntimeout = -1\n");
    assert_eq!(
        msg,
        format!(
            "{}: execution.timeout: expected a number of seconds > 0, got -1",
            path.display()
        )
    );
    let (_, msg) = file_error("[execution]\nmode = \"fast\"\n");
    assert!(
        msg.ends_with("execution.mode: expected \"project\" or \"strict\", got \"fast\""),
        "{msg}"
    );
    let (_, msg) = file_error("[execution]\non_timeout = \"wait\"\n");
    assert!(
        msg.ends_with("execution.on_timeout: expected \"interrupt\" or \"kill\", got \"wait\""),
        "{msg}"
    );
    let (_, msg) = file_error("[execution]\nkernel_mode = \"pool\"\n");
    assert!(
        msg.ends_with("expected \"session\" or \"per-call\", got \"pool\""),
        "{msg}"
    );
    let (_, msg) = file_error("[rpc]\ntransport = \"udp\"\n");
    assert!(
        msg.ends_with("rpc.transport: expected \"unix\" or \"tcp\", got \"udp\""),
        "{msg}"
    );
    let (_, msg) = file_error("[web]\nsearch_provider = \"google\"\n");
    assert!(
        msg.ends_with(
            "web.search_provider: expected \"\", \"searxng\" or \"brave\", got \"google\""
        ),
        "{msg}"
    );
}

#[test]
fn wrong_types_are_errors_not_coercions() {
    for (text, key, got) in [
        (
            "[execution]\ntimeout = \"30\"\n",
            "execution.timeout",
            "\"30\"",
        ),
        (
            "[execution]\nmax_tool_calls = 2.5\n",
            "execution.max_tool_calls",
            "2.5",
        ),
        (
            "[kernels]\nmax_kernels = 4.0\n",
            "kernels.max_kernels",
            "4.0",
        ),
        (
            "[kernels]\nmax_kernels = true\n",
            "kernels.max_kernels",
            "true",
        ),
        ("[execution]\nmode = 1\n", "execution.mode", "1"),
        ("[execution]\npython = 3\n", "execution.python", "3"),
        (
            "[env]\npassthrough = \"EDITOR\"\n",
            "env.passthrough",
            "\"EDITOR\"",
        ),
        (
            "[tools]\nenabled = [\"read_file\", 3]\n",
            "tools.enabled",
            "[\"read_file\", 3]",
        ),
        ("[output]\nspill_dir = []\n", "output.spill_dir", "[]"),
    ] {
        let (_, msg) = file_error(text);
        assert!(msg.contains(&format!("{key}: expected ")), "{text}: {msg}");
        assert!(msg.ends_with(&format!("got {got}")), "{text}: {msg}");
    }
}

#[test]
fn ranges_are_checked() {
    for (text, key, expected) in [
        (
            "[execution]\ntimeout = 0\n",
            "execution.timeout",
            "a number of seconds > 0",
        ),
        (
            "[execution]\ntimeout = nan\n",
            "execution.timeout",
            "a number of seconds > 0",
        ),
        (
            "[execution]\ntimeout = inf\n",
            "execution.timeout",
            "a number of seconds > 0",
        ),
        (
            "[execution]\ntimeout = 1e12\n",
            "execution.timeout",
            "a number of seconds > 0 and at most 1000000000",
        ),
        (
            "[execution]\nkill_grace = -0.5\n",
            "execution.kill_grace",
            "a number of seconds >= 0",
        ),
        (
            "[execution]\ninterrupt_grace = -1\n",
            "execution.interrupt_grace",
            "a number of seconds >= 0",
        ),
        (
            "[execution]\nmax_tool_calls = 0\n",
            "execution.max_tool_calls",
            "a whole number >= 1",
        ),
        (
            "[execution]\nmax_tool_calls = 5000000000\n",
            "execution.max_tool_calls",
            "a whole number >= 1 and <= 4294967295",
        ),
        (
            "[kernels]\nmax_kernels = 0\n",
            "kernels.max_kernels",
            "a whole number >= 1",
        ),
        (
            "[kernels]\nmax_kernels = -3\n",
            "kernels.max_kernels",
            "a whole number >= 1",
        ),
        (
            "[kernels]\nidle_timeout = 0\n",
            "kernels.idle_timeout",
            "a number of seconds > 0",
        ),
        (
            "[output]\nmax_stdout_bytes = 0\n",
            "output.max_stdout_bytes",
            "a whole number >= 1",
        ),
        (
            "[output]\nmax_stderr_bytes = 0\n",
            "output.max_stderr_bytes",
            "a whole number >= 1",
        ),
        (
            "[output]\nspill_cap_bytes = 0\n",
            "output.spill_cap_bytes",
            "a whole number >= 1",
        ),
        (
            "[daemon]\nidle_exit = 0\n",
            "daemon.idle_exit",
            "a number of seconds > 0",
        ),
    ] {
        let (_, msg) = file_error(text);
        assert!(
            msg.contains(&format!("{key}: expected {expected}, got ")),
            "{text}: {msg}"
        );
    }
}

#[test]
fn unknown_keys_list_the_known_ones_and_suggest_a_near_miss() {
    let (path, msg) = file_error("[execution]\ntimout = 30\n");
    assert_eq!(
        msg,
        format!(
            "{}: unknown key `execution.timout` (known keys in [execution]: timeout, \
             max_tool_calls, mode, python, language, r, node, on_timeout, interrupt_grace, kill_grace, \
             kernel_mode, confine); did you mean `execution.timeout`?",
            path.display()
        )
    );
    // A key of another section is pointed at.
    let (_, msg) = file_error("[execution]\nmax_kernels = 3\n");
    assert!(msg.contains("unknown key `execution.max_kernels`"), "{msg}");
    assert!(
        msg.ends_with("did you mean `kernels.max_kernels`?"),
        "{msg}"
    );
    // No suggestion when nothing is close.
    let (_, msg) = file_error("[kernels]\nbanana = 1\n");
    assert!(
        msg.ends_with(
            "unknown key `kernels.banana` (known keys in [kernels]: max_kernels, idle_timeout, warm_pool, remote, remote_files_cap)"
        ),
        "{msg}"
    );
}

#[test]
fn unknown_sections_and_non_table_sections_are_errors() {
    let (_, msg) = file_error("[exec]\ntimeout = 3\n");
    assert!(
        msg.ends_with(
            "unknown section `[exec]` (known sections: execution, kernels, limits, output, env, \
             tools, rpc, web, guard, daemon, journal, sandbox); did you mean [execution]?"
        ),
        "{msg}"
    );
    let (_, msg) = file_error("[kernel]\nmax_kernels = 3\n");
    assert!(msg.ends_with("did you mean [kernels]?"), "{msg}");
    // A key written above any section.
    let (_, msg) = file_error("timeout = 3\n");
    assert!(msg.contains("unknown section `[timeout]`"), "{msg}");
    assert!(
        msg.ends_with("did you mean `timeout` under [execution]?"),
        "{msg}"
    );
    let (_, msg) = file_error("[zzz]\n");
    assert!(msg.ends_with("guard, daemon, journal, sandbox)"), "{msg}");
    let (_, msg) = file_error("execution = 3\n");
    assert!(
        msg.ends_with("execution: expected a table [execution], got 3"),
        "{msg}"
    );
}

#[test]
fn toml_syntax_errors_name_the_file_and_line() {
    let (path, msg) = file_error("[execution]\ntimeout = = 3\n");
    assert!(
        msg.starts_with(&format!("{}: invalid TOML: ", path.display())),
        "{msg}"
    );
    assert!(msg.contains("line 2"), "{msg}");
}

#[test]
fn list_items_are_checked_and_the_bad_one_named() {
    let (_, msg) = file_error("[guard]\ndeny = [\"ok\", \"(unclosed\"]\n");
    assert!(
        msg.contains("guard.deny: expected a list of regexes, but \"(unclosed\" does not compile"),
        "{msg}"
    );
    let (_, msg) = file_error("[env]\npassthrough = [\"EDITOR\", \"BAD NAME\"]\n");
    assert!(
        msg.contains("env.passthrough: expected a list of environment variable names"),
        "{msg}"
    );
    assert!(msg.contains("\"BAD NAME\""), "{msg}");
    let (_, msg) = file_error("[tools]\nenabled = [\"patch\", \"patch\"]\n");
    assert!(msg.contains("\"patch\" is repeated"), "{msg}");
    let (_, msg) = file_error("[web]\nsearch_url = \"localhost:8888\"\n");
    assert!(
        msg.contains(
            "web.search_url: expected \"\" or an http:// or https:// URL, got \"localhost:8888\""
        ),
        "{msg}"
    );
    let (_, msg) = file_error("[web]\nsearch_api_key_env = \"$BRAVE\"\n");
    assert!(msg.contains("web.search_api_key_env: expected"), "{msg}");
}

#[test]
fn searxng_without_a_url_is_an_error_at_start() {
    let (_, msg) = file_error("[web]\nsearch_provider = \"searxng\"\n");
    assert!(
        msg.contains("web.search_url: expected the SearXNG base URL"),
        "{msg}"
    );
    // Brave has a public endpoint: no URL needed.
    Config::from_toml_str("[web]\nsearch_provider = \"brave\"\n", None).unwrap();
}

#[test]
fn fold_settings_that_would_never_fold_are_an_error_not_a_silent_no_op() {
    let (_, msg) = file_error("[output]\nfold_min_run = 8\nfold_keep = 4\n");
    assert!(
        msg.contains("output.fold_keep") && msg.contains("fewer than half"),
        "{msg}"
    );
    let (_, msg) = file_error("[output]\nfold = true\nfold_min_run = 1\n");
    assert!(msg.contains("fold_min_run at least 2"), "{msg}");
    // With folding off they do nothing, so they are fine.
    Config::from_toml_str("[output]\nfold = false\nfold_min_run = 1\n", None).unwrap();
    Config::from_toml_str("[output]\nfold_min_run = 9\nfold_keep = 4\n", None).unwrap();
}

#[test]
fn a_long_bad_value_is_shortened_in_the_message() {
    let long = "x".repeat(10_000);
    let (_, msg) = file_error(&format!("[execution]\nmode = \"{long}\"\n"));
    assert!(msg.len() < 400, "{} bytes", msg.len());
    assert!(msg.ends_with('…'), "{msg}");
}

#[test]
fn relative_paths_in_a_file_are_taken_from_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "proj/toolcell.toml",
        "[execution]\npython = \".venv/bin/python\"\n[output]\nspill_dir = \"spill\"\n",
    );
    let c = Config::from_file(&path).unwrap();
    let proj = dir.path().join("proj");
    assert_eq!(
        c.execution.python,
        proj.join(".venv/bin/python").to_str().unwrap()
    );
    assert_eq!(c.spill_dir(), proj.join("spill"));
    // A bare name is looked up on PATH later, so it stays a name.
    let c = Config::from_toml_str("[execution]\npython = \"python3.12\"\n", Some(&path)).unwrap();
    assert_eq!(c.execution.python, "python3.12");
    // `~/` is the home dir, expanded when used, never glued to the file's dir.
    let c = Config::from_toml_str(
        "[execution]\npython = \"~/py/bin/python\"\n[output]\nspill_dir = \"~/spill\"\n",
        Some(&path),
    )
    .unwrap();
    assert_eq!(c.execution.python, "~/py/bin/python");
    assert_eq!(c.output.spill_dir, "~/spill");
}

#[test]
fn discovery_prefers_explicit_then_cwd_then_user_dir() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().join("cwd");
    fs::create_dir_all(&cwd).unwrap();
    let user = write(
        dir.path(),
        "xdg/toolcell/toolcell.toml",
        "[kernels]\nmax_kernels = 3\n",
    );

    // Only the user file.
    let c = Config::discover_in(None, &cwd, Some(&user)).unwrap();
    assert_eq!(c.kernels.max_kernels, 3);
    assert_eq!(c.file(), Some(user.as_path()));

    // A file in cwd wins over the user file.
    let local = write(&cwd, "toolcell.toml", "[kernels]\nmax_kernels = 5\n");
    let c = Config::discover_in(None, &cwd, Some(&user)).unwrap();
    assert_eq!(c.kernels.max_kernels, 5);
    assert_eq!(c.source("kernels.max_kernels"), Some(&Source::File(local)));

    // --config wins over both, relative to cwd.
    write(&cwd, "other.toml", "[kernels]\nmax_kernels = 7\n");
    let c = Config::discover_in(Some(Path::new("other.toml")), &cwd, Some(&user)).unwrap();
    assert_eq!(c.kernels.max_kernels, 7);
    assert_eq!(c.file(), Some(cwd.join("other.toml").as_path()));

    // Nothing anywhere: defaults.
    let empty = dir.path().join("empty");
    fs::create_dir_all(&empty).unwrap();
    let missing_user = dir.path().join("nope/toolcell.toml");
    let c = Config::discover_in(None, &empty, Some(&missing_user)).unwrap();
    assert_eq!(c.file(), None);
    assert_eq!(c.kernels.max_kernels, 4);
    assert_eq!(discover_path(None, &empty, None).unwrap(), None);
}

#[test]
fn a_missing_explicit_config_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "toolcell.toml", "");
    let err = Config::discover_in(Some(Path::new("missing.toml")), dir.path(), None).unwrap_err();
    assert!(matches!(err, ConfigError::NotFound { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "--config {}: no such file",
            dir.path().join("missing.toml").display()
        )
    );
}

#[test]
fn a_config_that_cannot_be_read_is_an_error_not_a_fallback() {
    let dir = tempfile::tempdir().unwrap();
    // A directory where the file should be.
    fs::create_dir_all(dir.path().join("toolcell.toml")).unwrap();
    let user = write(dir.path(), "user.toml", "");
    let err = Config::discover_in(None, dir.path(), Some(&user)).unwrap_err();
    assert!(
        err.to_string().contains("toolcell.toml: cannot read"),
        "{err}"
    );
    // Not UTF-8.
    let bad = dir.path().join("bad.toml");
    fs::write(&bad, b"[execution]\npython = \"\xff\"\n").unwrap();
    let err = Config::from_file(&bad).unwrap_err();
    assert!(err.to_string().contains("not UTF-8"), "{err}");
    // Too large.
    let big = dir.path().join("big.toml");
    fs::write(&big, "#".repeat(2 * 1024 * 1024)).unwrap();
    let err = Config::from_file(&big).unwrap_err();
    assert!(matches!(err, ConfigError::TooLarge { .. }), "{err:?}");
}

#[test]
fn user_config_file_follows_xdg() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        }
    };
    assert_eq!(
        user_config_file(env(&[("XDG_CONFIG_HOME", "/x"), ("HOME", "/h")])),
        Some(PathBuf::from("/x/toolcell/toolcell.toml"))
    );
    assert_eq!(
        user_config_file(env(&[("HOME", "/h")])),
        Some(PathBuf::from("/h/.config/toolcell/toolcell.toml"))
    );
    // A relative XDG_CONFIG_HOME is ignored, as the XDG spec says.
    assert_eq!(
        user_config_file(env(&[("XDG_CONFIG_HOME", "rel"), ("HOME", "/h")])),
        Some(PathBuf::from("/h/.config/toolcell/toolcell.toml"))
    );
    assert_eq!(user_config_file(env(&[])), None);
}

#[test]
fn spill_dir_defaults_to_the_user_cache_dir() {
    let c = Config::default();
    let lookup = |pairs: Vec<(&'static str, &'static str)>| {
        move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        }
    };
    assert_eq!(
        c.spill_dir_with(lookup(vec![("XDG_CACHE_HOME", "/c"), ("HOME", "/h")])),
        Path::new("/c/toolcell/spill")
    );
    assert_eq!(
        c.spill_dir_with(lookup(vec![("HOME", "/h")])),
        Path::new("/h/.cache/toolcell/spill")
    );
    let fallback = c.spill_dir_with(lookup(vec![]));
    assert!(fallback.starts_with(std::env::temp_dir()), "{fallback:?}");
    assert!(fallback.ends_with("spill"));

    let mut c = Config::default();
    c.set_override("output.spill_dir", "~/spills").unwrap();
    assert_eq!(
        c.spill_dir_with(lookup(vec![("HOME", "/h")])),
        Path::new("/h/spills")
    );
    c.set_override("output.spill_dir", "/abs").unwrap();
    assert_eq!(c.spill_dir_with(lookup(vec![])), Path::new("/abs"));
}

#[test]
fn overrides_parse_the_keys_type_and_win_over_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "toolcell.toml",
        "[execution]\ntimeout = 100\nmode = \"strict\"\n",
    );
    let mut c = Config::from_file(&path).unwrap();
    c.set_override("execution.timeout", "30").unwrap();
    c.set_override("execution.kill_grace", "0.5").unwrap();
    c.set_override_as("tools.enabled", "read_file, terminal", "--tools")
        .unwrap();
    c.set_override("env.passthrough", "[\"EDITOR\", \"PAGER\"]")
        .unwrap();
    c.set_override("guard.deny", "").unwrap();
    c.set_override("execution.python", "/usr/bin/python3")
        .unwrap();
    c.set_override("kernels.max_kernels", "2").unwrap();
    c.validate().unwrap();

    assert_eq!(c.timeout(), Duration::from_secs(30));
    assert_eq!(c.kill_grace(), Duration::from_millis(500));
    assert_eq!(c.tools.enabled, ["read_file", "terminal"]);
    assert_eq!(c.env.passthrough, ["EDITOR", "PAGER"]);
    assert!(c.guard.deny.is_empty());
    assert_eq!(c.execution.python, "/usr/bin/python3");
    assert_eq!(c.kernels.max_kernels, 2);
    assert_eq!(c.execution.mode, Mode::Strict);

    assert_eq!(
        c.source("execution.timeout"),
        Some(&Source::Flag("--timeout".into()))
    );
    assert_eq!(
        c.source("kernels.max_kernels"),
        Some(&Source::Flag("--max-kernels".into()))
    );
    assert_eq!(
        c.source("tools.enabled"),
        Some(&Source::Flag("--tools".into()))
    );
    assert_eq!(c.source("execution.mode"), Some(&Source::File(path)));
    assert_eq!(c.source("execution.on_timeout"), Some(&Source::Default));
}

#[test]
fn a_bad_override_names_the_flag_and_the_key_and_changes_nothing() {
    let mut c = Config::default();
    let err = c.set_override("execution.timeout", "abc").unwrap_err();
    assert_eq!(
        err.to_string(),
        "--timeout: execution.timeout: expected a number of seconds > 0, got \"abc\""
    );
    let err = c
        .set_override_as("execution.mode", "fast", "--mode")
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "--mode: execution.mode: expected \"project\" or \"strict\", got \"fast\""
    );
    let err = c.set_override("execution.timout", "3").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("--timout: unknown key `execution.timout`"),
        "{err}"
    );
    let err = c.set_override("exec.timeout", "3").unwrap_err();
    assert!(
        err.to_string().contains("unknown section `[exec]`"),
        "{err}"
    );
    let err = c.set_override("kernels.max_kernels", "-1").unwrap_err();
    assert!(
        err.to_string()
            .ends_with("expected a whole number >= 1, got -1"),
        "{err}"
    );
    assert_eq!(c.to_toml(), Config::default().to_toml());
    assert_eq!(c.source("execution.timeout"), Some(&Source::Default));
}

#[test]
fn validate_tools_checks_against_the_registry() {
    let mut c = Config::default();
    c.set_override_as("tools.enabled", "read_file,shell", "--tools")
        .unwrap();
    let err = c.validate_tools(&["read_file", "terminal"]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "--tools: tools.enabled: unknown tool \"shell\" (known tools: read_file, terminal)"
    );
    c.set_override_as("tools.enabled", "terminal", "--tools")
        .unwrap();
    c.validate_tools(&["read_file", "terminal"]).unwrap();
    let registry = toolcell_tools::ToolRegistry::builtin().unwrap();
    let known: Vec<&str> = registry.names().collect();
    Config::default().validate_tools(&known).unwrap();
}

#[test]
fn the_sources_printout_is_toml_with_one_comment_per_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "toolcell.toml", "[kernels]\nmax_kernels = 6\n");
    let mut c = Config::from_file(&path).unwrap();
    c.set_override("execution.timeout", "45").unwrap();
    let text = c.to_toml_with_sources();

    assert!(text.contains("timeout = 45  # from --timeout\n"), "{text}");
    assert!(
        text.contains(&format!("max_kernels = 6  # from {}\n", path.display())),
        "{text}"
    );
    assert!(text.contains("idle_timeout = 1800  # default\n"), "{text}");
    assert!(text.contains("mode = \"project\"  # default\n"), "{text}");
    assert!(text.contains("[execution]\n"), "{text}");
    let key_lines = text.lines().filter(|l| l.contains(" = ")).count();
    assert_eq!(key_lines, Config::keys().count());
    assert!(
        text.lines()
            .filter(|l| l.contains(" = "))
            .all(|l| l.contains("  # "))
    );

    // It is valid TOML that reads back to the same values.
    let back = Config::from_toml_str(&text, None).unwrap();
    assert_eq!(back.to_toml(), c.to_toml());
}

#[test]
fn serde_deserialization_is_strict_too() {
    let err = toml::from_str::<Config>("[execution]\ntimout = 3\n").unwrap_err();
    assert!(err.to_string().contains("timout"), "{err}");
    // Values are checked while deserializing, and the error names the key.
    let de = toml::Deserializer::parse("[kernels]\nmax_kernels = 0\n").unwrap();
    let err = serde_path_to_error::deserialize::<_, Config>(de).unwrap_err();
    assert_eq!(err.path().to_string(), "kernels.max_kernels");
    assert_eq!(err.inner().message(), "expected a whole number >= 1, got 0");
    // Rules tying two keys together are left to validate().
    let c: Config = toml::from_str("[execution]\nconfine = true\n").unwrap();
    let err = c.validate().unwrap_err();
    assert!(
        err.to_string()
            .starts_with("execution.confine: expected false unless"),
        "{err}"
    );
    let c: Config = toml::from_str("[execution]\nmode = \"strict\"\n").unwrap();
    assert_eq!(c.execution.mode, Mode::Strict);
}

#[test]
fn values_set_in_code_are_checked_by_validate() {
    let mut c = Config::default();
    c.execution.timeout = f64::NAN;
    assert!(
        c.validate()
            .unwrap_err()
            .to_string()
            .starts_with("execution.timeout: expected")
    );
    // The getter saturates instead of panicking.
    assert_eq!(c.timeout(), Duration::ZERO);
    c.execution.timeout = 1e300;
    assert_eq!(c.timeout(), Duration::from_secs(1_000_000_000));
    let mut c = Config::default();
    c.guard.deny.push("(".into());
    assert!(c.validate().unwrap_err().to_string().contains("guard.deny"));
    assert!(
        c.guard_deny()
            .unwrap_err()
            .to_string()
            .contains("guard.deny")
    );
}

fn valid_config() -> impl Strategy<Value = Config> {
    let secs = prop_oneof![(1u32..100_000).prop_map(f64::from), (1e-3f64..1e6),];
    let name = "[A-Z_][A-Z0-9_]{0,12}";
    (
        (
            secs.clone(),
            1u32..1000,
            any::<bool>(),
            "[a-z/._ 0-9-]{0,20}",
            any::<bool>(),
            secs.clone(),
        ),
        (
            1usize..64,
            secs.clone(),
            1usize..1_000_000,
            1u64..1_000_000_000,
        ),
        (
            proptest::collection::vec(name, 0..4),
            proptest::collection::btree_set("[a-z_]{1,10}", 0..5),
            any::<bool>(),
            proptest::collection::vec("[a-z]{1,5}( [0-9]+)?", 0..3),
            secs,
        ),
    )
        .prop_map(
            |(
                (t, calls, strict, python, kill, grace),
                (k, idle, out, cap),
                (pass, tools, tcp, deny, exit),
            )| {
                let mut c = Config::default();
                c.execution.timeout = t;
                c.execution.max_tool_calls = calls;
                c.execution.mode = if strict { Mode::Strict } else { Mode::Project };
                c.execution.python = python;
                c.execution.on_timeout = if kill {
                    OnTimeout::Kill
                } else {
                    OnTimeout::Interrupt
                };
                c.execution.interrupt_grace = grace;
                c.kernels.max_kernels = k;
                c.kernels.idle_timeout = idle;
                c.output.max_stdout_bytes = out;
                c.output.spill_cap_bytes = cap;
                c.env.passthrough = pass;
                c.tools.enabled = tools.into_iter().collect();
                c.rpc.transport = if tcp { Transport::Tcp } else { Transport::Unix };
                c.guard.deny = deny;
                c.daemon.idle_exit = exit;
                c
            },
        )
}

proptest! {
    #[test]
    fn any_valid_config_round_trips_through_its_toml(c in valid_config()) {
        c.validate().unwrap();
        let back = Config::from_toml_str(&c.to_toml(), None).unwrap();
        prop_assert_eq!(back.execution.clone(), c.execution.clone());
        prop_assert_eq!(back.kernels.clone(), c.kernels.clone());
        prop_assert_eq!(back.output.clone(), c.output.clone());
        prop_assert_eq!(back.env.clone(), c.env.clone());
        prop_assert_eq!(back.tools.clone(), c.tools.clone());
        prop_assert_eq!(back.guard.clone(), c.guard.clone());
        prop_assert_eq!(back.daemon.clone(), c.daemon.clone());
        let with_sources = Config::from_toml_str(&c.to_toml_with_sources(), None).unwrap();
        prop_assert_eq!(with_sources.to_toml(), c.to_toml());
    }

    #[test]
    fn arbitrary_text_never_panics(text in "(\\PC|\n){0,200}") {
        let _ = Config::from_toml_str(&text, None);
    }

    #[test]
    fn arbitrary_sections_and_keys_are_accepted_or_named(
        section in "(execution|kernels|output|env|tools|rpc|web|guard|daemon|[a-z]{1,6})",
        key in "[a-z_]{1,16}",
        value in prop_oneof![
            Just("1".to_string()), Just("-1".to_string()), Just("0.5".to_string()),
            Just("\"x\"".to_string()), Just("[]".to_string()), Just("true".to_string()),
            Just("[\"a\"]".to_string()), Just("{}".to_string()),
        ],
    ) {
        let text = format!("[{section}]\n{key} = {value}\n");
        if let Err(e) = Config::from_toml_str(&text, None) {
            let msg = e.to_string();
            prop_assert!(
                msg.contains(&format!("{section}.{key}")) || msg.contains(&format!("[{section}]")),
                "{}", msg
            );
        }
    }

    #[test]
    fn any_override_either_applies_or_names_the_key(
        idx in 0usize..22,
        value in "(\\PC){0,30}",
    ) {
        let key = Config::keys().nth(idx % Config::keys().count()).unwrap();
        let mut c = Config::default();
        match c.set_override(key, &value) {
            Ok(()) => {
                prop_assert!(matches!(c.source(key), Some(Source::Flag(_))));
                match c.validate() {
                    // What was accepted prints and reads back.
                    Ok(()) => {
                        Config::from_toml_str(&c.to_toml(), None).unwrap();
                    }
                    // A rule tying two keys (`kernels.remote` naming a
                    // `[remotes.NAME]` table) is checked after the last
                    // override, and names the key.
                    Err(e) => prop_assert!(e.to_string().contains(key), "{}", e),
                }
            }
            Err(e) => {
                prop_assert!(e.to_string().contains(key), "{}", e);
                prop_assert_eq!(c.source(key), Some(&Source::Default));
            }
        }
    }
}

#[test]
fn spill_pruning_keys_default_to_a_week_and_a_gib_and_bad_values_name_the_key() {
    let c = Config::from_toml_str("", None).unwrap();
    assert_eq!(c.spill_retention(), Some(Duration::from_secs(7 * 86_400)));
    assert_eq!(c.spill_total_cap(), Some(1 << 30));
    let c = Config::from_toml_str(
        "[output]\nspill_retention_days = 0\nspill_total_cap = 0\n",
        None,
    )
    .unwrap();
    assert_eq!((c.spill_retention(), c.spill_total_cap()), (None, None));
    let c = Config::from_toml_str("[output]\nspill_total_cap = 1048576\n", None).unwrap();
    assert_eq!(c.spill_total_cap(), Some(1 << 20));
    for (toml, key, expected) in [
        (
            "spill_retention_days = -1",
            "output.spill_retention_days",
            "days >= 0",
        ),
        (
            "spill_retention_days = 40000",
            "output.spill_retention_days",
            "<= 36500",
        ),
        (
            "spill_retention_days = \"7d\"",
            "output.spill_retention_days",
            "number of days",
        ),
        (
            "spill_total_cap = -5",
            "output.spill_total_cap",
            "0 = no cap",
        ),
        (
            "spill_total_cap = \"lots\"",
            "output.spill_total_cap",
            "\"1GiB\"",
        ),
    ] {
        let err = Config::from_toml_str(&format!("[output]\n{toml}\n"), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains(key) && err.contains(expected), "{toml}: {err}");
    }
}
