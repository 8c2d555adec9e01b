//! A cell's request ([`ExecuteRequest`]) and its admission: the embedder's
//! [`Guard`], `[guard] deny`, tool narrowing, confinement's mode rule and
//! the working directory, all decided before any kernel is touched.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use toolcell_stubs::Mode;

use super::RegistryOptions;
use toolcell_kernel::extra::ExtraTools;
use toolcell_kernel::kernel::LiveSink;
use toolcell_kernel::result::Status;

/// The error for request tools outside the configured set, naming them.
fn widening(requested: &[String], enabled: &[String]) -> Option<String> {
    let extra: Vec<&str> = requested
        .iter()
        .filter(|t| !enabled.contains(t))
        .map(String::as_str)
        .collect();
    if extra.is_empty() {
        return None;
    }
    let enabled = if enabled.is_empty() {
        "none".to_string()
    } else {
        enabled.join(", ")
    };
    Some(format!(
        "the request names {} not enabled in this host's [tools] enabled ({enabled}); \
         a request's tools may only narrow that set; none of the code ran",
        extra
            .iter()
            .map(|t| format!("`{t}`"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// An embedder's veto over cells, asked before any kernel is touched.
pub trait Guard: Send + Sync + 'static {
    /// `Err(rule)` refuses the cell; `rule` names what refused it.
    ///
    /// # Errors
    /// The rule that refused the cell.
    fn check(&self, request: &ExecuteRequest) -> Result<(), String>;
}

/// One cell to run.
#[derive(Clone)]
pub struct ExecuteRequest {
    /// The code.
    pub code: String,
    /// The conversation id (default `"default"`).
    pub owner: String,
    /// Discard the session's kernel first.
    pub reset: bool,
    /// Override the timeout.
    pub timeout: Option<Duration>,
    /// Override the mode.
    pub mode: Option<Mode>,
    /// The cell's language (default: the registry's, Python unless
    /// configured). Part of the session key.
    pub language: Option<toolcell_kernel::language::Language>,
    /// Override the enabled tools.
    pub tools: Option<Vec<String>>,
    /// Override the working directory (project mode).
    pub cwd: Option<PathBuf>,
    /// Receives cleaned output chunks while the cell runs.
    pub live: Option<LiveSink>,
    /// Cancels this request alone (see [`ExecuteRequest::cancel`]).
    pub cancel: Option<CancellationToken>,
    /// Tools for this cell besides the registry's (see
    /// [`ExecuteRequest::extra_tools`]).
    pub extra_tools: Option<Arc<ExtraTools>>,
    /// Run on this remote (`[remotes.NAME]`; `Some("")`: locally); `None`:
    /// the `[kernels] remote` default. Part of the session key.
    pub remote: Option<String>,
}

impl std::fmt::Debug for ExecuteRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecuteRequest")
            .field("owner", &self.owner)
            .field("reset", &self.reset)
            .field("timeout", &self.timeout)
            .field("mode", &self.mode)
            .field("language", &self.language)
            .field("tools", &self.tools)
            .field("cwd", &self.cwd)
            .field("extra_tools", &self.extra_tools)
            .field("remote", &self.remote)
            .field("code_len", &self.code.len())
            .finish_non_exhaustive()
    }
}

impl ExecuteRequest {
    /// A request for `code` in the default session.
    pub fn new(code: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            owner: "default".into(),
            reset: false,
            timeout: None,
            mode: None,
            language: None,
            tools: None,
            cwd: None,
            live: None,
            cancel: None,
            extra_tools: None,
            remote: None,
        }
    }

    /// Tools this cell may call besides the registry's (a `serve`
    /// client's): not part of the session key — a live kernel gets them
    /// with this cell, its state kept, and loses them with a later cell
    /// that does not carry them. The request's [`tools`](Self::tools),
    /// when given, narrows them too (by name, or `SOURCE.*`).
    #[must_use]
    pub fn extra_tools(mut self, tools: Arc<ExtraTools>) -> Self {
        self.extra_tools = Some(tools);
        self
    }

    /// Sets the language (docs/languages.md, "Choosing the language").
    #[must_use]
    pub fn language(mut self, language: toolcell_kernel::language::Language) -> Self {
        self.language = Some(language);
        self
    }

    /// Sets the owner (session).
    #[must_use]
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self
    }

    /// Asks for a fresh kernel.
    #[must_use]
    pub fn reset(mut self, reset: bool) -> Self {
        self.reset = reset;
        self
    }

    /// Sets the timeout.
    #[must_use]
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }

    /// Sets the mode.
    #[must_use]
    pub fn mode(mut self, m: Mode) -> Self {
        self.mode = Some(m);
        self
    }

    /// Sets the enabled tools.
    #[must_use]
    pub fn tools<S: Into<String>>(mut self, tools: impl IntoIterator<Item = S>) -> Self {
        self.tools = Some(tools.into_iter().map(Into::into).collect());
        self
    }

    /// Runs on the remote `name` (`[remotes.NAME]`; `""`: here), not the
    /// `[kernels] remote` default.
    #[must_use]
    pub fn remote(mut self, name: impl Into<String>) -> Self {
        self.remote = Some(name.into());
        self
    }

    /// Sets the working directory.
    #[must_use]
    pub fn cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Streams cleaned output chunks to `sink` while the cell runs.
    #[must_use]
    pub fn live(mut self, sink: LiveSink) -> Self {
        self.live = Some(sink);
        self
    }

    /// Lets the caller cancel this request alone, whatever else its
    /// session runs or queues. Cancelled before its cell is sent to the
    /// kernel — waiting for its turn, for room, or for its kernel to start
    /// (the check is made under the session's lock, right before sending) —
    /// the request returns [`Status::Interrupted`] with none of its code
    /// run ([`toolcell_kernel::ExecuteResult::not_started`] is true); a kernel that
    /// was starting for it is kept for the session's next cell. Cancelled
    /// while the cell runs, it interrupts that cell as
    /// [`super::Registry::interrupt`] would, and the result is the usual
    /// interrupted one.
    #[must_use]
    pub fn cancel(mut self, token: CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }

    pub(super) fn is_cancelled(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
    }

    /// Resolves when the request is cancelled (never without a token).
    pub(super) async fn cancelled(&self) {
        match &self.cancel {
            Some(c) => c.cancelled().await,
            None => std::future::pending().await,
        }
    }
}

/// What admission settled for a cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Admitted {
    pub(super) mode: Mode,
    /// Sorted, each once.
    pub(super) tools: Vec<String>,
    /// Empty in strict mode (a private one per kernel).
    pub(super) cwd: PathBuf,
}

/// Why a cell was not admitted: the status and the `error` sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refusal {
    pub(super) status: Status,
    pub(super) error: String,
}

impl Refusal {
    fn error(error: impl Into<String>) -> Self {
        Self {
            status: Status::Error,
            error: error.into(),
        }
    }
}

/// Admits `req` or says why not, in this order: the embedder's guard and
/// `[guard] deny` (`refused`), then tools outside the configured set, a
/// project-mode cell under `confine`, a working directory that does not
/// exist (`error`). Pure but for the guard and one `is_dir`.
pub(super) fn admission(
    req: &ExecuteRequest,
    opts: &RegistryOptions,
    guard: Option<&dyn Guard>,
    outside: Option<&ExtraTools>,
) -> Result<Admitted, Refusal> {
    if let Some(rule) = refused_by(req, opts, guard) {
        return Err(Refusal {
            status: Status::Refused,
            error: format!("the cell was refused by {rule}; none of its code ran"),
        });
    }
    let mode = req.mode.unwrap_or(opts.mode);
    let mut tools = req.tools.clone().unwrap_or_else(|| opts.tools.clone());
    // Names of tools from outside the registry (a client's, an MCP
    // server's) are not part of the session key.
    if let Some(outside) = outside {
        tools.retain(|t| opts.tools.contains(t) || !outside.names(t));
    }
    tools.sort();
    tools.dedup();
    // A request may only narrow the configured set, never widen it: a
    // cell (or a confined kernel reaching a control socket) must not gain
    // tools the operator did not enable.
    if let Some(e) = widening(&tools, &opts.tools) {
        return Err(Refusal::error(e));
    }
    if opts.confine && mode != Mode::Strict {
        return Err(Refusal::error(
            "[execution] confine = true allows only strict-mode cells (Landlock confinement applies to strict-mode kernels); this cell asked for project mode; none of the code ran",
        ));
    }
    let cwd = match mode {
        Mode::Strict => PathBuf::new(),
        _ => req.cwd.clone().unwrap_or_else(|| opts.default_cwd.clone()),
    };
    if mode != Mode::Strict && !cwd.is_dir() {
        return Err(Refusal::error(format!(
            "the working directory {} does not exist; none of the code ran",
            cwd.display()
        )));
    }
    Ok(Admitted { mode, tools, cwd })
}

/// The rule that refuses `req`: the embedder's guard, then `[guard] deny`.
fn refused_by(
    req: &ExecuteRequest,
    opts: &RegistryOptions,
    guard: Option<&dyn Guard>,
) -> Option<String> {
    if let Some(g) = guard
        && let Err(rule) = g.check(req)
    {
        return Some(format!("the host's guard ({rule})"));
    }
    opts.deny
        .iter()
        .find(|re| re.is_match(&req.code))
        .map(|re| format!("the [guard] deny rule `{}`", re.as_str()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    struct NoImports;

    impl Guard for NoImports {
        fn check(&self, request: &ExecuteRequest) -> Result<(), String> {
            if request.code.contains("import") {
                Err("no imports".into())
            } else {
                Ok(())
            }
        }
    }

    fn opts(dir: &std::path::Path) -> RegistryOptions {
        RegistryOptions {
            default_cwd: dir.to_path_buf(),
            tools: vec!["terminal".into(), "read_file".into()],
            deny: vec![regex::Regex::new(r"rm\s+-rf").unwrap()],
            ..RegistryOptions::default()
        }
    }

    #[test]
    fn a_plain_request_gets_the_default_mode_sorted_tools_and_cwd() {
        let tmp = tempfile::tempdir().unwrap();
        let a = admission(&ExecuteRequest::new("1"), &opts(tmp.path()), None, None).unwrap();
        assert_eq!(a.mode, Mode::Project);
        assert_eq!(a.tools, ["read_file", "terminal"]);
        assert_eq!(a.cwd, tmp.path());
        let strict = ExecuteRequest::new("1").mode(Mode::Strict);
        let a = admission(&strict, &opts(tmp.path()), None, None).unwrap();
        assert_eq!(
            a.cwd,
            PathBuf::new(),
            "strict mode: a private cwd per kernel"
        );
        let narrow = ExecuteRequest::new("1").tools(["read_file", "read_file"]);
        let a = admission(&narrow, &opts(tmp.path()), None, None).unwrap();
        assert_eq!(a.tools, ["read_file"]);
    }

    #[test]
    fn the_guard_then_deny_refuse_before_anything_else() {
        let tmp = tempfile::tempdir().unwrap();
        let o = opts(tmp.path());
        let guard: &dyn Guard = &NoImports;
        let r = admission(&ExecuteRequest::new("import os"), &o, Some(guard), None).unwrap_err();
        assert_eq!(r.status, Status::Refused);
        assert!(
            r.error.contains("the host's guard (no imports)"),
            "{}",
            r.error
        );
        // Refused even though its cwd does not exist: nothing else is looked at.
        let req = ExecuteRequest::new("rm  -rf /").cwd(tmp.path().join("missing"));
        let r = admission(&req, &o, Some(guard), None).unwrap_err();
        assert_eq!(r.status, Status::Refused);
        assert!(
            r.error.contains(r"[guard] deny rule `rm\s+-rf`"),
            "{}",
            r.error
        );
    }

    #[test]
    fn widening_tools_confinement_and_a_missing_cwd_are_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let o = opts(tmp.path());
        let wide = ExecuteRequest::new("1").tools(["read_file", "write_file"]);
        let r = admission(&wide, &o, None, None).unwrap_err();
        assert_eq!(r.status, Status::Error);
        assert!(r.error.contains("`write_file`"), "{}", r.error);
        let confined = RegistryOptions {
            confine: true,
            ..opts(tmp.path())
        };
        let r = admission(&ExecuteRequest::new("1"), &confined, None, None).unwrap_err();
        assert!(
            r.error.contains("confine = true allows only strict-mode"),
            "{}",
            r.error
        );
        assert!(
            admission(
                &ExecuteRequest::new("1").mode(Mode::Strict),
                &confined,
                None,
                None
            )
            .is_ok()
        );
        let gone = ExecuteRequest::new("1").cwd(tmp.path().join("missing"));
        let r = admission(&gone, &o, None, None).unwrap_err();
        assert!(r.error.contains("does not exist"), "{}", r.error);
    }
}
