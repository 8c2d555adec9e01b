//! The kernel's environment (SECURITY.md,
//! "Host secrets stay out of the kernel's environment"): what of the host's
//! environment a kernel sees, the variables toolcell adds, and the host secrets
//! the redactor must mask.
//!
//! The environment is frozen when a kernel spawns. It is built in two steps:
//! [`child_env`] keeps the host variables a Python program plausibly needs
//! (by name prefix) minus anything secret-named, plus the configured
//! `[env] passthrough` names; then [`toolcell_vars`] adds toolcell's own
//! (`TOOLCELL_RPC`, `TOOLCELL_RPC_TOKEN`, `PYTHONPATH` with the kernel dir
//! first, …). [`host_secret_values`] gives the values that were scrubbed, so
//! the redactor masks them if a cell finds and prints them anyway.
//!
//! Matching rules, decided here and relied on by the tests:
//! - the allowed prefixes ([`ALLOWED_PREFIXES`]) are matched case-sensitively,
//!   as SECURITY.md writes them (environment names are case-sensitive; `path`
//!   is not `PATH`);
//! - the secret words ([`SECRET_WORDS`]) are matched case-insensitively
//!   anywhere in the name (`github_token` is as secret as `GITHUB_TOKEN`);
//! - a passthrough entry is an exact name, or a prefix when it ends in `*`
//!   (`AWS_*`); passthrough wins over the secret words.
//!
//! ```
//! use std::ffi::OsString;
//! use std::path::Path;
//! use toolcell_kernel::env::{child_env, host_secret_values, toolcell_vars};
//!
//! let host: Vec<(OsString, OsString)> = [
//!     ("PATH", "/usr/bin"),
//!     ("HOME", "/home/me"),
//!     ("GITHUB_TOKEN", "ghp_0123456789abcdef"),
//!     ("EDITOR", "vim"),
//!     ("PYTHONPATH", "/opt/lib"),
//! ]
//! .into_iter()
//! .map(|(k, v)| (k.into(), v.into()))
//! .collect();
//!
//! let mut env = child_env(host.clone(), &[]);
//! toolcell_vars(&mut env, Path::new("/run/k1"), "unix:/run/k1/rpc.sock", "t0k3n");
//! let get = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
//! assert_eq!(get("PATH"), Some("/usr/bin".into()));
//! assert_eq!(get("GITHUB_TOKEN"), None); // secret-named: scrubbed
//! assert_eq!(get("EDITOR"), None); // not an allowed prefix
//! assert_eq!(get("PYTHONPATH"), Some("/run/k1:/opt/lib".into()));
//! assert_eq!(get("MPLBACKEND"), Some("Agg".into()));
//! assert_eq!(host_secret_values(host), vec!["ghp_0123456789abcdef".to_string()]);
//! ```

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

/// Host variables whose names start with one of these reach the kernel
/// (unless secret-named).
pub const ALLOWED_PREFIXES: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_",
    "TERM",
    "TZ",
    "TMPDIR",
    "TMP",
    "TEMP",
    "SHELL",
    "XDG_",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "CONDA",
];

/// A variable whose name contains one of these (any case) is secret: it is
/// kept from the kernel and its value is given to the redactor. The list is
/// the redact crate's, so what is scrubbed and what is masked never differ.
pub use toolcell_redact::SECRET_ENV_WORDS as SECRET_WORDS;

/// Shortest secret value handed to the redactor: shorter values (`1`,
/// `true`) would mask ordinary text everywhere.
pub const MIN_SECRET_LEN: usize = 8;

/// Whether a variable name contains a secret word, in any case.
pub fn is_secret_name(name: &OsStr) -> bool {
    let upper = name.as_bytes().to_ascii_uppercase();
    SECRET_WORDS
        .iter()
        .any(|word| memchr::memmem::find(&upper, word.as_bytes()).is_some())
}

/// Whether a variable name starts with one of [`ALLOWED_PREFIXES`].
pub fn is_allowed_name(name: &OsStr) -> bool {
    let bytes = name.as_bytes();
    ALLOWED_PREFIXES
        .iter()
        .any(|prefix| bytes.starts_with(prefix.as_bytes()))
}

/// Whether `name` is named by a passthrough entry (exact, or a prefix when
/// the entry ends in `*`).
fn is_passed_through(name: &OsStr, passthrough: &[String]) -> bool {
    let bytes = name.as_bytes();
    passthrough
        .iter()
        .any(|entry| match entry.strip_suffix('*') {
            Some(prefix) => bytes.starts_with(prefix.as_bytes()),
            None => bytes == entry.as_bytes(),
        })
}

/// The host variables a kernel inherits (SECURITY.md,
/// "Host secrets stay out of the kernel's environment"): those whose names
/// start with an allowed prefix and contain no secret word, plus those named in
/// `passthrough` (which win, secret-named or not). The host's order is kept; a
/// name given twice keeps its last value, as `Command::envs` would.
pub fn child_env(
    host: impl IntoIterator<Item = (OsString, OsString)>,
    passthrough: &[String],
) -> Vec<(OsString, OsString)> {
    let mut out: Vec<(OsString, OsString)> = Vec::new();
    for (name, value) in host {
        let keep = is_passed_through(&name, passthrough)
            || (is_allowed_name(&name) && !is_secret_name(&name));
        if !keep || name.is_empty() || name.as_bytes().contains(&b'=') {
            continue;
        }
        set(&mut out, name, value);
    }
    out
}

/// Adds toolcell's own variables to a kernel's environment, replacing any
/// already there: `TOOLCELL_RPC` (the rpc endpoint, `unix:/…` or
/// `tcp://127.0.0.1:…`), `TOOLCELL_RPC_TOKEN`, `PYTHONDONTWRITEBYTECODE=1`,
/// `PYTHONUNBUFFERED=1`, `PYTHONIOENCODING=utf-8`, `MPLBACKEND=Agg` unless
/// `env` already has one, and `PYTHONPATH` = the kernel directory, then
/// `:` and the inherited `PYTHONPATH` if it is not empty (so `import
/// toolcell_tools` finds the stub module, in the kernel and in any Python
/// subprocess a cell starts).
///
/// A kernel directory containing `:` cannot be put in `PYTHONPATH`; kernel
/// directories are generated without one, and if one appears anyway it is
/// logged and the inherited path is kept unchanged.
pub fn toolcell_vars(
    env: &mut Vec<(OsString, OsString)>,
    kernel_dir: &Path,
    rpc_endpoint: &str,
    rpc_token: &str,
) {
    set(env, "TOOLCELL_RPC".into(), rpc_endpoint.into());
    set(env, "TOOLCELL_RPC_TOKEN".into(), rpc_token.into());
    set(env, "PYTHONDONTWRITEBYTECODE".into(), "1".into());
    set(env, "PYTHONUNBUFFERED".into(), "1".into());
    set(env, "PYTHONIOENCODING".into(), "utf-8".into());
    if get(env, "MPLBACKEND").is_none() {
        set(env, "MPLBACKEND".into(), "Agg".into());
    }
    let dir = kernel_dir.as_os_str();
    if dir.as_bytes().contains(&b':') {
        tracing::warn!(
            kernel_dir = %kernel_dir.display(),
            "kernel directory contains ':', not added to PYTHONPATH"
        );
        return;
    }
    let mut pythonpath = dir.to_os_string();
    if let Some(inherited) = get(env, "PYTHONPATH").filter(|v| !v.is_empty()) {
        pythonpath.push(":");
        pythonpath.push(inherited);
    }
    set(env, "PYTHONPATH".into(), pythonpath);
}

/// The values of the host's secret-named variables (see [`is_secret_name`]),
/// for the redactor's exact-value rule: each valid UTF-8 value of at least
/// [`MIN_SECRET_LEN`] bytes, once, longest first. Values that are absolute
/// paths (`SSH_AUTH_SOCK=/tmp/ssh-…/agent.1`, `XAUTHORITY=/home/me/.Xauthority`)
/// are not secrets and are left out, so paths in cell output stay readable.
/// Variables passed through to the kernel are still listed: a cell may use
/// them, but their values are still masked in what it prints.
pub fn host_secret_values(host: impl IntoIterator<Item = (OsString, OsString)>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (name, value) in host {
        if !is_secret_name(&name) {
            continue;
        }
        let Ok(value) = value.into_string() else {
            continue;
        };
        if value.len() < MIN_SECRET_LEN || value.starts_with('/') || out.contains(&value) {
            continue;
        }
        out.push(value);
    }
    // Longest first, then by value, so the order never depends on the host's.
    out.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    out
}

/// The host's redactor: the built-in rules plus [`host_secret_values`] of
/// this process's environment. What a kernel prints, and everything a tool
/// source (an MCP server) says, passes it.
pub fn host_redactor() -> toolcell_redact::Redactor {
    let secrets = host_secret_values(std::env::vars_os());
    toolcell_redact::Redactor::new(secrets).unwrap_or_else(|_| toolcell_redact::Redactor::builtin())
}

fn get<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a OsString> {
    env.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v)
}

/// Sets `name`, replacing every earlier entry of it.
fn set(env: &mut Vec<(OsString, OsString)>, name: OsString, value: OsString) {
    env.retain(|(k, _)| *k != name);
    env.push((name, value));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    fn names(env: &[(OsString, OsString)]) -> Vec<String> {
        env.iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect()
    }

    fn value(env: &[(OsString, OsString)], name: &str) -> Option<String> {
        get(env, name).map(|v| v.to_string_lossy().into_owned())
    }

    #[test]
    fn keeps_allowed_prefixes_and_drops_the_rest() {
        let host = vars(&[
            ("PATH", "/usr/bin"),
            ("HOME", "/home/u"),
            ("USER", "u"),
            ("LOGNAME", "u"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "C"),
            ("TERM", "xterm"),
            ("TZ", "UTC"),
            ("TMPDIR", "/tmp"),
            ("TEMP", "/tmp"),
            ("SHELL", "/bin/sh"),
            ("XDG_CACHE_HOME", "/c"),
            ("PYTHONPATH", "/lib"),
            ("VIRTUAL_ENV", "/v"),
            ("CONDA_PREFIX", "/c"),
            ("EDITOR", "vim"),
            ("RUST_LOG", "debug"),
            ("PYTHONSTARTUP", "/x.py"),
            ("LD_PRELOAD", "/evil.so"),
            ("path", "/lower"),
        ]);
        let env = child_env(host, &[]);
        assert_eq!(
            names(&env),
            [
                "PATH",
                "HOME",
                "USER",
                "LOGNAME",
                "LANG",
                "LC_ALL",
                "TERM",
                "TZ",
                "TMPDIR",
                "TEMP",
                "SHELL",
                "XDG_CACHE_HOME",
                "PYTHONPATH",
                "VIRTUAL_ENV",
                "CONDA_PREFIX"
            ]
        );
    }

    #[test]
    fn drops_secret_named_variables_in_any_case() {
        let host = vars(&[
            ("PATH_API_KEY", "x"),
            ("HOMEBREW_GITHUB_API_TOKEN", "x"),
            ("XDG_secret_dir", "x"),
            ("CONDA_PASSWD", "x"),
            ("USER_CREDS", "x"),
            ("TERM_AUTH", "x"),
            ("LC_BEARER", "x"),
            ("XDG_SENTRY_DSN", "x"),
            ("XDG_WEBHOOK_URL", "x"),
            ("TMP_Password", "x"),
            ("XDG_CREDENTIALS", "x"),
            ("XDG_APIKEY", "x"),
            ("XDG_DATA_HOME", "/d"),
        ]);
        assert_eq!(names(&child_env(host, &[])), ["XDG_DATA_HOME"]);
    }

    #[test]
    fn passthrough_wins_even_for_secret_names() {
        let host = vars(&[
            ("OPENAI_API_KEY", "sk-abc"),
            ("EDITOR", "vim"),
            ("AWS_REGION", "eu"),
            ("AWS_SECRET_ACCESS_KEY", "s3cr3t"),
            ("MY_TOKEN", "t"),
            ("PATH", "/bin"),
        ]);
        let pass = [
            "OPENAI_API_KEY".to_string(),
            "AWS_*".to_string(),
            "NOT_SET".to_string(),
        ];
        let env = child_env(host, &pass);
        assert_eq!(
            names(&env),
            [
                "OPENAI_API_KEY",
                "AWS_REGION",
                "AWS_SECRET_ACCESS_KEY",
                "PATH"
            ]
        );
        assert_eq!(value(&env, "OPENAI_API_KEY").as_deref(), Some("sk-abc"));
    }

    #[test]
    fn passthrough_names_are_exact() {
        let host = vars(&[("EDITOR", "vim"), ("EDITOR_X", "x"), ("editor", "y")]);
        assert_eq!(names(&child_env(host, &["EDITOR".into()])), ["EDITOR"]);
    }

    #[test]
    fn a_repeated_name_keeps_its_last_value() {
        let host = vars(&[("PATH", "/a"), ("HOME", "/h"), ("PATH", "/b")]);
        let env = child_env(host, &[]);
        assert_eq!(names(&env), ["HOME", "PATH"]);
        assert_eq!(value(&env, "PATH").as_deref(), Some("/b"));
    }

    #[test]
    fn toolcell_vars_sets_and_overrides_everything_spec_lists() {
        let mut env = vars(&[
            ("PYTHONUNBUFFERED", "0"),
            ("PYTHONIOENCODING", "latin-1"),
            ("TOOLCELL_RPC", "stale"),
            ("PATH", "/bin"),
        ]);
        toolcell_vars(&mut env, Path::new("/k/dir"), "tcp://127.0.0.1:4000", "tok");
        assert_eq!(
            value(&env, "TOOLCELL_RPC").as_deref(),
            Some("tcp://127.0.0.1:4000")
        );
        assert_eq!(value(&env, "TOOLCELL_RPC_TOKEN").as_deref(), Some("tok"));
        assert_eq!(value(&env, "PYTHONDONTWRITEBYTECODE").as_deref(), Some("1"));
        assert_eq!(value(&env, "PYTHONUNBUFFERED").as_deref(), Some("1"));
        assert_eq!(value(&env, "PYTHONIOENCODING").as_deref(), Some("utf-8"));
        assert_eq!(value(&env, "MPLBACKEND").as_deref(), Some("Agg"));
        assert_eq!(value(&env, "PYTHONPATH").as_deref(), Some("/k/dir"));
        assert_eq!(value(&env, "PATH").as_deref(), Some("/bin"));
        let mut sorted = names(&env);
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), env.len(), "no name twice: {env:?}");
    }

    #[test]
    fn toolcell_vars_keeps_a_callers_mplbackend_and_appends_pythonpath() {
        let mut env = vars(&[("MPLBACKEND", "svg"), ("PYTHONPATH", "/a:/b")]);
        toolcell_vars(&mut env, Path::new("/k"), "unix:/k/rpc.sock", "t");
        assert_eq!(value(&env, "MPLBACKEND").as_deref(), Some("svg"));
        assert_eq!(value(&env, "PYTHONPATH").as_deref(), Some("/k:/a:/b"));

        let mut empty = vars(&[("PYTHONPATH", "")]);
        toolcell_vars(&mut empty, Path::new("/k"), "unix:/k/rpc.sock", "t");
        assert_eq!(value(&empty, "PYTHONPATH").as_deref(), Some("/k"));
    }

    #[test]
    fn secret_values_are_the_scrubbed_ones() {
        let host = vars(&[
            ("OPENAI_API_KEY", "sk-proj-abcdefgh"),
            ("GITHUB_TOKEN", "ghp_1234567890"),
            ("short_token", "1234567"),
            ("DB_PASSWORD", "hunter2hunter2"),
            ("SSH_AUTH_SOCK", "/tmp/ssh-XXXX/agent.1"),
            ("EDITOR", "not-a-secret-value"),
            ("DUP_KEY", "ghp_1234567890"),
        ]);
        assert_eq!(
            host_secret_values(host),
            ["sk-proj-abcdefgh", "ghp_1234567890", "hunter2hunter2"]
        );
    }

    #[test]
    fn non_utf8_values_and_names_do_not_panic() {
        use std::os::unix::ffi::OsStringExt as _;
        let bad = OsString::from_vec(vec![0xff, 0xfe, b'K', b'E', b'Y']);
        let host = vec![
            (bad.clone(), OsString::from_vec(vec![0xff; 20])),
            (OsString::from("PATH"), OsString::from_vec(vec![b'/', 0xff])),
            (
                OsString::from("API_KEY"),
                OsString::from_vec(vec![0xc3; 20]),
            ),
        ];
        let env = child_env(host.clone(), &[]);
        assert_eq!(names(&env), ["PATH"]);
        assert!(host_secret_values(host).is_empty());
    }
}
