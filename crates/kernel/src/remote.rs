//! Remote kernels (docs/protocol.md,
//! "Remote kernels: the same protocol over a command's stdio"; docs/tour.md,
//! "Kernels on other machines: ssh, Docker, Kubernetes"): the runner's protocol
//! carried over the stdio of any command that reaches a process elsewhere
//! (`ssh`, `docker exec -i`, `kubectl exec -i POD --`), with tool calls
//! multiplexed on the same pipe.
//!
//! The host starts `command + [python, "-u", "-c", BOOTSTRAP]` (the last
//! three words joined into one shell-quoted word when the far side parses
//! them with a shell, as `ssh` does). The bootstrap reads two
//! length-prefixed blobs from stdin — the runner and the stub module — and
//! runs the runner in "remote" mode: requests on stdin (moved to a private
//! fd; fd 0 becomes `/dev/null` for cells), frames on stdout and stderr
//! exactly as for a local kernel, tool calls in-band, figures as `file`
//! frames. Nothing is installed or copied beforehand; the remote needs
//! Python 3.8+ and its standard library.
//!
//! An R or JavaScript kernel runs `command + [r, "--no-echo",
//! "--no-restore", "-e", BOOTSTRAP_R]` or `command + [node, "-e",
//! BOOTSTRAP_JS]` (`[remotes.NAME] r` / `node`): the same bootstraps as
//! locally ([`crate::language`]), which read the runner and stub module from
//! stdin the same way; without a kernel directory argument the runner is in
//! remote mode (figures as `file` frames).
//!
//! [`crate::kernel::Kernel`] does the rest: the same decoder, capture,
//! redaction and result; `kernel.rs` branches only where the transport
//! differs (launch, requests, interrupt, kill).

use std::collections::BTreeMap;

use crate::language::Language;

/// The bootstrap `python -u -c` runs on the remote (Python 3.8+ stdlib):
/// reads `<len>\n<runner><len>\n<stub module>` from fd 0, without reading a
/// byte past them (requests follow on the same pipe), and runs the runner
/// with the stub module's source in `_TOOLCELL_INBAND`.
pub const REMOTE_BOOTSTRAP: &str = "import os,sys\n\
if sys.version_info<(3,8):sys.stderr.write('toolcell: the remote Python is %s; toolcell needs 3.8 or newer\\n'%sys.version.split()[0]);sys.exit(3)\n\
def r(n):\n b=b''\n while len(b)<n:\n  c=os.read(0,n-len(b))\n  if not c:sys.exit(3)\n  b+=c\n return b\n\
def g():\n h=b''\n while h[-1:]!=b'\\n':\n  h+=r(1)\n  if len(h)>12:sys.exit(3)\n return r(int(h))\n\
s=g();t=g()\n\
exec(compile(s,'<toolcell-runner>','exec'),{'__name__':'__main__','__builtins__':__builtins__,'_TOOLCELL_INBAND':t})\n";

/// Longest remote name.
pub const MAX_NAME: usize = 64;

/// One `[remotes.NAME]`: how to reach a machine (or container) where
/// kernels run.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Remote {
    /// The command that connects stdin/stdout/stderr to a process
    /// elsewhere; the interpreter words are appended to it.
    pub command: Vec<String>,
    /// The interpreter to run there.
    pub python: String,
    /// The R front end there (for `language = "r"`).
    pub r: String,
    /// The node binary there (for `language = "javascript"`).
    pub node: String,
    /// The working directory there; empty: wherever the command lands.
    pub cwd: String,
    /// Append the interpreter words as one shell-quoted word; absent: true
    /// when the command's program is `ssh`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shell: Option<bool>,
    /// Makes an allocation for one kernel (a container, a SLURM job, a
    /// pod) and prints its id on stdout; empty: the remote is always there
    /// ([`crate::lifecycle`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub start: Vec<String>,
    /// Removes an allocation (`{id}`); required with `start`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// Prints the ids of the allocations a host made (`{host}`), one per
    /// line, so a later host can sweep what a dead one left.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub list: Vec<String>,
    /// Seconds `start` may take.
    pub start_timeout: f64,
    /// Seconds `stop` (and `list`) may take.
    pub stop_timeout: f64,
}

impl Default for Remote {
    fn default() -> Self {
        Self {
            command: Vec::new(),
            python: "python3".into(),
            r: "Rscript".into(),
            node: "node".into(),
            cwd: String::new(),
            shell: None,
            start: Vec::new(),
            stop: Vec::new(),
            list: Vec::new(),
            start_timeout: DEFAULT_START_TIMEOUT,
            stop_timeout: DEFAULT_STOP_TIMEOUT,
        }
    }
}

/// `[remotes.NAME] start_timeout` by default.
pub const DEFAULT_START_TIMEOUT: f64 = 120.0;
/// `[remotes.NAME] stop_timeout` by default.
pub const DEFAULT_STOP_TIMEOUT: f64 = 30.0;

impl Remote {
    /// A remote reached by `command`.
    pub fn command<S: Into<String>>(command: impl IntoIterator<Item = S>) -> Self {
        Self {
            command: command.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// This remote with a lifecycle: `start` makes an allocation per
    /// kernel and prints its id, `stop` removes one (`{id}`), `list` prints
    /// a host's (`{host}`; empty: no sweeping). See [`crate::lifecycle`].
    pub fn with_lifecycle<S: Into<String>>(
        mut self,
        start: impl IntoIterator<Item = S>,
        stop: impl IntoIterator<Item = S>,
        list: impl IntoIterator<Item = S>,
    ) -> Self {
        self.start = start.into_iter().map(Into::into).collect();
        self.stop = stop.into_iter().map(Into::into).collect();
        self.list = list.into_iter().map(Into::into).collect();
        self
    }

    /// Whether each kernel gets an allocation of its own (`start`).
    pub fn has_lifecycle(&self) -> bool {
        !self.start.is_empty()
    }

    /// This remote with the placeholders of `command` and `cwd` filled in
    /// for one allocation.
    pub fn bound(&self, vars: &Vars<'_>) -> Self {
        let cwd = fill(std::slice::from_ref(&self.cwd), vars)
            .pop()
            .unwrap_or_default();
        Self {
            command: fill(&self.command, vars),
            cwd,
            ..self.clone()
        }
    }

    /// Whether the interpreter words go as one shell-quoted word.
    pub fn uses_shell(&self) -> bool {
        self.shell.unwrap_or_else(|| {
            self.command.first().is_some_and(|p| {
                std::path::Path::new(p)
                    .file_name()
                    .is_some_and(|n| n == "ssh")
            })
        })
    }

    /// The full argv the host runs for a Python kernel: `command +
    /// [python, "-u", "-c", BOOTSTRAP]`.
    pub fn argv(&self) -> Vec<String> {
        self.argv_for(Language::Python)
    }

    /// The interpreter this remote runs for `language`.
    pub fn interpreter(&self, language: Language) -> &str {
        match language {
            Language::R => &self.r,
            Language::JavaScript => &self.node,
            _ => &self.python,
        }
    }

    /// The full argv the host runs for a `language` kernel: `command` and
    /// the interpreter with its bootstrap (R: `Rscript --no-echo
    /// --no-restore -e BOOTSTRAP`; JavaScript: `node -e BOOTSTRAP`).
    pub fn argv_for(&self, language: Language) -> Vec<String> {
        let mut argv = self.command.clone();
        let mut words = vec![self.interpreter(language).to_string()];
        match language {
            Language::R | Language::JavaScript => {
                words.extend(language.flags().into_iter().map(String::from));
            }
            _ => words.extend(["-u", "-c", REMOTE_BOOTSTRAP].map(String::from)),
        }
        if self.uses_shell() {
            argv.push(
                words
                    .iter()
                    .map(|w| shell_quote(w))
                    .collect::<Vec<_>>()
                    .join(" "),
            );
        } else {
            argv.extend(words);
        }
        argv
    }
}

/// `s` as one POSIX shell word.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\"'\"'"))
}

/// What the bootstrap reads before the `hello` line.
pub(crate) fn payload(runner: &str, stubs: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(runner.len() + stubs.len() + 24);
    for blob in [runner, stubs] {
        out.extend_from_slice(blob.len().to_string().as_bytes());
        out.push(b'\n');
        out.extend_from_slice(blob.as_bytes());
    }
    out
}

/// What is wrong with remote `name`: `(key under it, message)`.
pub fn check(name: &str, r: &Remote) -> Result<(), (String, String)> {
    if !valid_name(name) {
        return Err((
            String::new(),
            format!(
                "expected a remote name of 1 to {MAX_NAME} letters, digits, `_` or `-`, got {name:?}"
            ),
        ));
    }
    match r.command.first() {
        None => {
            return Err((
                "command".into(),
                "expected `command = [\"program\", \"arg\", …]`, e.g. [\"ssh\", \"-T\", \"-o\", \"BatchMode=yes\", \"user@host\", \"--\"]".into(),
            ));
        }
        Some(p) if p.trim().is_empty() => {
            return Err((
                "command".into(),
                "expected a program name first, got \"\"".into(),
            ));
        }
        _ => {}
    }
    if r.command.iter().any(|w| w.contains('\0')) {
        return Err(("command".into(), "expected no NUL bytes".into()));
    }
    for (key, value, example) in [
        ("python", &r.python, "python3"),
        ("r", &r.r, "Rscript"),
        ("node", &r.node, "node"),
    ] {
        if value.trim().is_empty() || value.contains('\0') {
            return Err((
                key.into(),
                format!(
                    "expected the interpreter to run on the remote (e.g. \"{example}\"), got {value:?}"
                ),
            ));
        }
    }
    if r.cwd.contains('\0') {
        return Err(("cwd".into(), "expected no NUL bytes".into()));
    }
    check_lifecycle(r)
}

/// The lifecycle keys: all or nothing, each with the placeholders it needs.
fn check_lifecycle(r: &Remote) -> Result<(), (String, String)> {
    for (key, argv) in [("start", &r.start), ("stop", &r.stop), ("list", &r.list)] {
        if argv.iter().any(|w| w.contains('\0')) {
            return Err((key.into(), "expected no NUL bytes".into()));
        }
        if argv.first().is_some_and(|p| p.trim().is_empty()) {
            return Err((key.into(), "expected a program name first, got \"\"".into()));
        }
    }
    for (key, v) in [
        ("start_timeout", r.start_timeout),
        ("stop_timeout", r.stop_timeout),
    ] {
        if !(v > 0.0 && v <= 86_400.0) {
            return Err((
                key.into(),
                format!("expected seconds, > 0 and at most 86400, got {v}"),
            ));
        }
    }
    let has = |argv: &[String], p: &str| argv.iter().any(|w| w.contains(p));
    if r.start.is_empty() {
        for (key, argv) in [("stop", &r.stop), ("list", &r.list)] {
            if !argv.is_empty() {
                return Err((
                    key.into(),
                    "expected it only together with `start` (the command that makes an allocation per kernel)".into(),
                ));
            }
        }
        return Ok(());
    }
    if r.stop.is_empty() {
        return Err((
            "stop".into(),
            "expected a command that removes an allocation, e.g. [\"docker\", \"rm\", \"-f\", \"{id}\"]: with `start` and no `stop` every allocation would be left behind".into(),
        ));
    }
    if !has(&r.stop, "{id}") {
        return Err((
            "stop".into(),
            "expected `{id}` in one of its words (the allocation to remove)".into(),
        ));
    }
    if !has(&r.command, "{id}") && !has(std::slice::from_ref(&r.cwd), "{id}") {
        return Err((
            "command".into(),
            "expected `{id}` in one of its words (the allocation `start` made), e.g. [\"docker\", \"exec\", \"-i\", \"{id}\"]".into(),
        ));
    }
    if has(&r.start, "{id}") {
        return Err((
            "start".into(),
            "expected no `{id}`: `start` prints the id".into(),
        ));
    }
    Ok(())
}

/// Whether `name` can name a remote.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The `[remotes.NAME]` tables as TOML, in name order.
pub fn to_toml(remotes: &BTreeMap<String, Remote>, source: Option<&str>) -> String {
    let mut out = String::new();
    for (name, r) in remotes {
        out.push_str(&format!("\n[remotes.{name}]"));
        if let Some(src) = source {
            out.push_str(&format!("  # {src}"));
        }
        out.push('\n');
        if let Ok(toml::Value::Table(t)) = toml::Value::try_from(r) {
            for (k, v) in t {
                out.push_str(&format!("{k} = {v}\n"));
            }
        }
        if r.shell.is_none() {
            out.push_str(&format!("shell = {}  # auto\n", r.uses_shell()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_gets_one_shell_word_others_separate_words() {
        let ssh = Remote::command(["ssh", "-T", "host", "--"]);
        let argv = ssh.argv();
        assert_eq!(argv.len(), 5);
        assert!(argv[4].starts_with("python3 -u -c 'import os,sys"));
        let docker = Remote::command(["docker", "exec", "-i", "box"]);
        let argv = docker.argv();
        assert_eq!(&argv[4..7], ["python3", "-u", "-c"]);
        assert_eq!(argv[7], REMOTE_BOOTSTRAP);
        let forced = Remote {
            shell: Some(false),
            ..ssh
        };
        assert_eq!(forced.argv().len(), 8);
    }

    #[test]
    fn shell_quote_round_trips_through_sh() {
        for s in ["plain", "", "it's", "a b", "$HOME", REMOTE_BOOTSTRAP] {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf %s {}", shell_quote(s)))
                .output()
                .map(|o| o.stdout);
            if let Ok(out) = out {
                assert_eq!(out, s.as_bytes());
            }
        }
    }

    #[test]
    fn bootstrap_is_small() {
        assert!(REMOTE_BOOTSTRAP.len() < 600, "{}", REMOTE_BOOTSTRAP.len());
    }

    #[test]
    fn names_and_commands_are_checked() {
        assert!(check("gpu-1", &Remote::command(["ssh", "h"])).is_ok());
        assert!(check("a b", &Remote::command(["ssh"])).is_err());
        assert!(check("x", &Remote::default()).is_err());
        let no_py = Remote {
            python: String::new(),
            ..Remote::command(["ssh"])
        };
        assert_eq!(check("x", &no_py).unwrap_err().0, "python");
    }
}

/// `argv` with the placeholders filled in.
pub fn fill(argv: &[String], vars: &Vars<'_>) -> Vec<String> {
    argv.iter()
        .map(|w| {
            if !w.contains('{') {
                return w.clone();
            }
            let mut s = w.clone();
            for (key, value) in [
                ("{id}", vars.id),
                ("{session}", vars.session),
                ("{host}", vars.host),
                ("{remote}", vars.remote),
            ] {
                if let Some(v) = value
                    && s.contains(key)
                {
                    s = s.replace(key, v);
                }
            }
            s
        })
        .collect()
}

/// The values of the placeholders (`None`: left as written).
#[derive(Debug, Clone, Copy, Default)]
pub struct Vars<'a> {
    /// `{id}`.
    pub id: Option<&'a str>,
    /// `{session}` (already reduced with [`session_label`]).
    pub session: Option<&'a str>,
    /// `{host}`.
    pub host: Option<&'a str>,
    /// `{remote}`.
    pub remote: Option<&'a str>,
}

/// Why a `start` failed: a sentence naming the command, and its stderr.
#[derive(Debug, Clone)]
pub struct StartFailure {
    /// What went wrong (`its start command (docker run …) failed with exit status 125`).
    pub reason: String,
    /// The command's last stderr lines.
    pub stderr: String,
}

/// Starts the allocations of remotes with a lifecycle (`start`): the seam
/// between one kernel and the host that keeps the records of every
/// allocation (`toolcell_host::lifecycle::Lifecycle` implements it).
pub trait Allocator: Send + Sync + std::fmt::Debug {
    /// Runs `remote`'s `start` for `session`; blocks (the kernel calls it on
    /// the blocking pool).
    ///
    /// # Errors
    /// The command failed, timed out or printed no usable id.
    fn start(
        &self,
        name: &str,
        remote: &std::sync::Arc<Remote>,
        session: &str,
    ) -> Result<Box<dyn Allocation>, StartFailure>;
}

/// One allocation a kernel holds: stopped when dropped (in the background),
/// or first, before the kernel's command is killed.
pub trait Allocation: Send + Sync + std::fmt::Debug {
    /// The id `start` printed.
    fn id(&self) -> &str;
    /// The placeholder values for this allocation's commands.
    fn vars(&self) -> Vars<'_>;
    /// Starts the `stop` now, on a thread of its own, and returns what says
    /// when it is done.
    fn stop_in_background(self: Box<Self>) -> tokio::sync::oneshot::Receiver<()>;
}
