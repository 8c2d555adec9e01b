//! The `Tool` trait, its type-erased form, and the context a call runs in.

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolcell_redact::Redactor;
use toolcell_rpc::{BoxFuture, CellContext};

/// A host function callable from Python cells.
///
/// Everything an agent or a model sees about the tool — the Python signature
/// and docstring in the stub module, the JSON Schema, the line in the
/// `execute_code` description — is derived from this one definition: the
/// name, [`Tool::DOC`], the doc comments and serde attributes of
/// [`Tool::Args`], and the shape of [`Tool::Output`].
///
/// Register a tool with [`register_tool!`](crate::register_tool) in the same
/// file; see CONTRIBUTING.md, "Adding a tool".
pub trait Tool: Send + Sync + 'static {
    /// The function name in Python and in JSON (`snake_case`).
    const NAME: &'static str;
    /// What the tool does, for a model: first line a one-sentence summary,
    /// then details. Parameter docs come from the fields of `Args`.
    const DOC: &'static str;
    /// Top-level argument names that cells may not set to a truthy value
    /// (refused `blocked_param` before anything runs).
    const BLOCKED_PARAMS: &'static [&'static str] = &[];
    /// Whether the tool is in the default `[tools] enabled` set (the set a
    /// configuration without that key gets). A tool that should only run
    /// when a user names it says `false`.
    const DEFAULT_ENABLED: bool = true;

    /// The arguments. Use `#[serde(deny_unknown_fields)]` so a misspelt
    /// argument is an error, and declare defaults once with
    /// `#[serde(default = "…")]` (they appear in the schema and the stub).
    type Args: DeserializeOwned + Serialize + JsonSchema + Send + 'static;
    /// The result, serialized to JSON for the cell.
    type Output: Serialize + JsonSchema + Send + 'static;

    /// Runs the tool.
    fn call(
        &self,
        args: Self::Args,
        cx: &ToolContext,
    ) -> impl Future<Output = Result<Self::Output, ToolError>> + Send;
}

/// A failed tool call. The message is what the cell sees (raised as
/// `ToolError` in Python), so say what went wrong and what to do next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The tool ran and could not do what was asked.
    #[error("{0}")]
    Failed(String),
    /// The cell settled while the tool was running.
    #[error("the cell ended while {0} was running; the call was cancelled")]
    Cancelled(&'static str),
}

impl ToolError {
    /// A failure with a message for the caller.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::Failed(message.into())
    }

    /// An I/O failure on `path`, phrased for a model.
    pub fn io(action: &str, path: &Path, err: &std::io::Error) -> Self {
        Self::Failed(format!("cannot {action} {}: {err}", path.display()))
    }
}

/// Settings every call of a kernel's tools shares: fixed for the kernel.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ToolSettings {
    /// The session's working directory; relative paths resolve against it.
    pub cwd: PathBuf,
    /// Where tools save full texts they had to cut (e.g. `web_extract`).
    pub spill_dir: PathBuf,
    /// The kernel's own directory, where tools save files a result names
    /// (images from MCP tools). `None`: they go to [`spill_dir`](Self::spill_dir).
    pub kernel_dir: Option<PathBuf>,
    /// The most output bytes a tool returns inline (e.g. `terminal`).
    pub max_output_bytes: usize,
    /// Web search settings (`[web]` in the configuration).
    pub web: WebSettings,
    /// The environment for processes tools start (`terminal`): the kernel's
    /// scrubbed environment (SECURITY.md,
    /// "Host secrets stay out of the kernel's environment"). `None` inherits
    /// the host's.
    pub env: Option<Arc<Vec<(std::ffi::OsString, std::ffi::OsString)>>>,
    /// The host's redactor (its built-in rules plus the host's secret env
    /// values). Tools that bring outside text in (`web_extract`) redact it
    /// with this before returning or saving it.
    pub redactor: Redactor,
    /// The files tools read on behalf of the kernel's cells (`read_file`,
    /// `search_files`, `patch`), for the result's `files.read`.
    pub reads: ReadLog,
    /// The sandbox of the kernel these settings serve, once it started
    /// (docs/sandbox.md): `terminal` runs inside it, the file tools keep to
    /// what it could read and write.
    pub sandbox: SandboxSlot,
}

/// What a tool acting for a sandboxed kernel needs: where to join it, what
/// the kernel may read and write, the variables a command there gets.
#[derive(Debug)]
pub struct SandboxHandle {
    /// The sandboxed runner's pid, as the host sees it.
    pub pid: u32,
    /// Its start time (`/proc` clock ticks): a recycled pid is never joined.
    pub started: Option<u64>,
    /// What the kernel may read and write.
    pub view: toolcell_sys::sandbox::View,
    /// Variables a command run inside gets (the proxy, `TMPDIR`).
    pub env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
}

/// Where the kernel puts its [`SandboxHandle`] when it starts (and takes it
/// away when it ends). Clones share it: a copy of the settings serves the
/// same kernel.
#[derive(Debug, Default, Clone)]
pub struct SandboxSlot(Arc<std::sync::Mutex<Option<Arc<SandboxHandle>>>>);

impl SandboxSlot {
    /// Puts (or, with `None`, removes) the kernel's sandbox.
    pub fn set(&self, handle: Option<Arc<SandboxHandle>>) {
        if let Ok(mut g) = self.0.lock() {
            *g = handle;
        }
    }

    /// The kernel's sandbox, when it runs in one.
    pub fn get(&self) -> Option<Arc<SandboxHandle>> {
        self.0.lock().ok().and_then(|g| g.clone())
    }
}

/// The files host tools read for one cell (docs/result.md, "files"): each
/// tool notes the files it reads ([`ToolContext::note_read`]); the host
/// takes the list when the cell ends ([`ReadLog::take`]). Bounded: at most
/// [`ReadLog::LISTED`] paths are kept, the rest only counted.
#[derive(Debug, Default)]
pub struct ReadLog(std::sync::Mutex<ReadLogInner>);

/// A copy of settings keeps its own log: a clone starts empty.
impl Clone for ReadLog {
    fn clone(&self) -> Self {
        Self::default()
    }
}

#[derive(Debug, Default)]
struct ReadLogInner {
    cell: Option<Arc<str>>,
    paths: Vec<PathBuf>,
    more: u64,
}

impl ReadLog {
    /// Paths kept per cell.
    pub const LISTED: usize = 50;

    /// Notes that a tool called by cell `cell` read `path` (absolute). A
    /// note of another cell than the last one starts a new list (a late
    /// call of a cell that ended is not the next cell's).
    pub fn note(&self, cell: &Arc<str>, path: &Path) {
        let Ok(mut g) = self.0.lock() else { return };
        if g.cell.as_ref() != Some(cell) {
            *g = ReadLogInner {
                cell: Some(Arc::clone(cell)),
                ..ReadLogInner::default()
            };
        }
        if g.paths.iter().any(|p| p == path) {
            return;
        }
        if g.paths.len() < Self::LISTED {
            g.paths.push(path.to_path_buf());
        } else {
            g.more += 1;
        }
    }

    /// What tools read for cell `cell`, in the order read (at most
    /// [`Self::LISTED`]), and how many files beyond those; the log is empty
    /// afterwards.
    pub fn take(&self, cell: &str) -> (Vec<PathBuf>, u64) {
        let Ok(mut g) = self.0.lock() else {
            return (Vec::new(), 0);
        };
        let mine = g.cell.as_deref() == Some(cell);
        let taken = std::mem::take(&mut *g);
        if mine {
            (taken.paths, taken.more)
        } else {
            (Vec::new(), 0)
        }
    }
}

impl ToolSettings {
    /// Settings for `cwd` with defaults elsewhere: spill files under the
    /// system temp dir, 50 000 output bytes, no web search provider, the
    /// built-in redaction rules only (no host secret values).
    pub fn new(cwd: impl Into<PathBuf>) -> Self {
        Self {
            cwd: cwd.into(),
            spill_dir: std::env::temp_dir().join("toolcell-spill"),
            kernel_dir: None,
            max_output_bytes: 50_000,
            web: WebSettings::default(),
            env: None,
            redactor: Redactor::builtin(),
            reads: ReadLog::default(),
            sandbox: SandboxSlot::default(),
        }
    }

    /// Sets the redactor (the host's: built-in rules plus its secret values).
    #[must_use]
    pub fn redactor(mut self, redactor: Redactor) -> Self {
        self.redactor = redactor;
        self
    }

    /// Sets the environment for processes tools start (instead of the
    /// host's own).
    #[must_use]
    pub fn env(mut self, vars: Vec<(std::ffi::OsString, std::ffi::OsString)>) -> Self {
        self.env = Some(Arc::new(vars));
        self
    }

    /// Sets the spill directory.
    #[must_use]
    pub fn spill_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.spill_dir = dir.into();
        self
    }

    /// Sets the kernel's directory (where files a result names are saved).
    #[must_use]
    pub fn kernel_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.kernel_dir = Some(dir.into());
        self
    }

    /// Where tools save files a result names: the kernel's directory, else
    /// the spill directory.
    pub fn files_dir(&self) -> &Path {
        self.kernel_dir.as_deref().unwrap_or(&self.spill_dir)
    }

    /// Sets the inline output cap.
    #[must_use]
    pub fn max_output_bytes(mut self, bytes: usize) -> Self {
        self.max_output_bytes = bytes;
        self
    }

    /// Sets the web search settings.
    #[must_use]
    pub fn web(mut self, web: WebSettings) -> Self {
        self.web = web;
        self
    }
}

/// `[web]` settings: which search provider `web_search` uses.
#[derive(Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WebSettings {
    /// `"searxng"`, `"brave"`, or empty for none.
    pub search_provider: String,
    /// Base URL of the provider's API (required for SearXNG; optional for
    /// Brave, whose public endpoint is the default).
    pub search_url: String,
    /// The API key (read by the host from the env var named in
    /// `search_api_key_env`; never given to the kernel).
    pub search_api_key: Option<String>,
}

impl WebSettings {
    /// Settings for `provider` at `url`.
    pub fn new(provider: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            search_provider: provider.into(),
            search_url: url.into(),
            search_api_key: None,
        }
    }

    /// Sets the API key.
    #[must_use]
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.search_api_key = Some(key.into());
        self
    }
}

impl fmt::Debug for WebSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebSettings")
            .field("search_provider", &self.search_provider)
            .field("search_url", &self.search_url)
            .field(
                "search_api_key",
                &self.search_api_key.as_ref().map(|_| "«hidden»"),
            )
            .finish()
    }
}

fn denied(path: &Path, why: toolcell_sys::sandbox::Denied) -> ToolError {
    ToolError::failed(match why {
        toolcell_sys::sandbox::Denied::ReadOnly => format!(
            "{}: read-only in this sandbox (the kernel may write only in its working directory, its own directory and [sandbox] writable)",
            path.display()
        ),
        _ => format!("{}: not found", path.display()),
    })
}

/// What a tool call knows: the kernel's settings and the calling cell.
#[derive(Debug, Clone)]
pub struct ToolContext {
    settings: Arc<ToolSettings>,
    deadline: Instant,
    cancel: CancellationToken,
    /// The calling cell, when the call came from one.
    cell: Option<Arc<str>>,
}

impl ToolContext {
    /// A context for one call.
    pub fn new(settings: Arc<ToolSettings>, deadline: Instant, cancel: CancellationToken) -> Self {
        Self {
            settings,
            deadline,
            cancel,
            cell: None,
        }
    }

    /// A context from the rpc server's cell context.
    pub fn from_cell(settings: Arc<ToolSettings>, cell: &CellContext) -> Self {
        let mut cx = Self::new(settings, cell.deadline(), cell.cancelled().clone());
        cx.cell = Some(Arc::from(cell.cell_id()));
        cx
    }

    /// Notes that this call read the regular file `path` on the calling
    /// cell's behalf (for the result's `files.read`); nothing outside a
    /// cell.
    pub fn note_read(&self, path: &Path) {
        if let Some(cell) = &self.cell {
            self.settings.reads.note(cell, path);
        }
    }

    /// Refuses `path` (resolved) when the calling kernel's sandbox could
    /// not read it: a hidden path is "not found".
    ///
    /// # Errors
    /// [`ToolError::Failed`] naming the path.
    pub fn check_read(&self, path: &Path) -> Result<(), ToolError> {
        match self.settings.sandbox.get() {
            Some(s) => s.view.check_read(path).map_err(|e| denied(path, e)),
            None => Ok(()),
        }
    }

    /// Refuses `path` (resolved) when the calling kernel's sandbox could
    /// not write it: "read-only in this sandbox" outside the writable set,
    /// "not found" for a hidden path.
    ///
    /// # Errors
    /// [`ToolError::Failed`] naming the path.
    pub fn check_write(&self, path: &Path) -> Result<(), ToolError> {
        match self.settings.sandbox.get() {
            Some(s) => s.view.check_write(path).map_err(|e| denied(path, e)),
            None => Ok(()),
        }
    }

    /// The kernel's settings.
    pub fn settings(&self) -> &ToolSettings {
        &self.settings
    }

    /// The session's working directory.
    pub fn cwd(&self) -> &Path {
        &self.settings.cwd
    }

    /// `path` resolved against the session's working directory.
    pub fn resolve(&self, path: &str) -> PathBuf {
        let p = Path::new(path);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.settings.cwd.join(p)
        }
    }

    /// When the calling cell's time runs out.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// When a tool that waits on someone else (an MCP server, a client)
    /// should stop waiting: the cell's deadline less a tenth of the time
    /// left now, at most a second, so that its `ToolError` still reaches a
    /// cell that can handle it instead of landing as the cell times out.
    pub fn answer_by(&self) -> Instant {
        let now = Instant::now();
        let left = self.deadline.saturating_duration_since(now);
        now + (left - (left / 10).min(std::time::Duration::from_secs(1)))
    }

    /// Fires when the calling cell settles.
    pub fn cancelled(&self) -> &CancellationToken {
        &self.cancel
    }
}

/// The object-safe form of a tool, as the registry holds it. Implement
/// [`Tool`] and let [`register_tool!`](crate::register_tool) or
/// [`erase`] produce this; for a tool whose shape is only known at run time
/// use [`SchemaTool`](crate::SchemaTool).
pub trait DynTool: Send + Sync + 'static {
    /// The function name.
    fn name(&self) -> &str;
    /// The submodule of `toolcell_tools` this tool's function lives in, for
    /// tools of an outside source (an MCP server `NAME`: its tools are the
    /// functions of `toolcell_tools.NAME`, and their names are
    /// `NAME.tool`). `None` (the default): the top-level module.
    fn namespace(&self) -> Option<&str> {
        None
    }
    /// The doc: summary line, then details.
    fn doc(&self) -> &str;
    /// JSON Schema of the arguments: an object schema (built-in tools inline
    /// their subschemas; a [`SchemaTool`](crate::SchemaTool)'s may use local
    /// `$ref`s into `$defs`/`definitions`).
    fn args_schema(&self) -> Value;
    /// JSON Schema of the result; `{}` (anything) when not declared.
    fn output_schema(&self) -> Value;
    /// Arguments cells may not set.
    fn blocked_params(&self) -> &[&'static str];
    /// Whether the tool is enabled when the configuration does not list the
    /// enabled tools (see [`Tool::DEFAULT_ENABLED`]).
    fn default_enabled(&self) -> bool {
        true
    }
    /// Checks the arguments without running anything; the message names the
    /// field and what was expected.
    ///
    /// # Errors
    /// A message for a `bad_args` reply.
    fn validate(&self, args: &Value) -> Result<(), String>;
    /// Runs the tool.
    fn call(&self, args: Value, cx: ToolContext) -> BoxFuture<'static, Result<Value, ToolError>>;
}

impl fmt::Debug for dyn DynTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynTool")
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

/// Type-erases a [`Tool`] for the registry.
pub fn erase<T: Tool>(tool: T) -> Arc<dyn DynTool> {
    Arc::new(Erased(Arc::new(tool)))
}

struct Erased<T>(Arc<T>);

/// Deserializes `args`, naming the field that failed.
pub(crate) fn parse_args<A: DeserializeOwned>(tool: &str, args: &Value) -> Result<A, String> {
    match serde_path_to_error::deserialize::<_, A>(args) {
        Ok(a) => Ok(a),
        Err(e) => {
            let path = e.path().to_string();
            let inner = e.into_inner();
            if path == "." || path.is_empty() {
                Err(format!("{tool}: {inner}"))
            } else {
                Err(format!("{tool}: argument `{path}`: {inner}"))
            }
        }
    }
}

impl<T: Tool> DynTool for Erased<T> {
    fn name(&self) -> &str {
        T::NAME
    }

    fn doc(&self) -> &str {
        T::DOC
    }

    fn args_schema(&self) -> Value {
        schema_of::<T::Args>()
    }

    fn output_schema(&self) -> Value {
        schema_of::<T::Output>()
    }

    fn blocked_params(&self) -> &[&'static str] {
        T::BLOCKED_PARAMS
    }

    fn default_enabled(&self) -> bool {
        T::DEFAULT_ENABLED
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        parse_args::<T::Args>(T::NAME, args).map(drop)
    }

    fn call(&self, args: Value, cx: ToolContext) -> BoxFuture<'static, Result<Value, ToolError>> {
        let tool = Arc::clone(&self.0);
        Box::pin(async move {
            let args: T::Args = parse_args(T::NAME, &args).map_err(ToolError::Failed)?;
            let out = tool.call(args, &cx).await?;
            serde_json::to_value(out).map_err(|e| {
                ToolError::failed(format!("{}: result not serializable: {e}", T::NAME))
            })
        })
    }
}

/// One entry of the compile-time tool list, submitted with
/// [`register_tool!`](crate::register_tool).
#[derive(Debug)]
pub struct ToolEntry {
    make: fn() -> Arc<dyn DynTool>,
}

impl ToolEntry {
    /// The entry for a tool type with a `Default` constructor.
    pub const fn of<T: Tool + Default>() -> Self {
        Self { make: make::<T> }
    }

    /// Builds the tool.
    pub fn build(&self) -> Arc<dyn DynTool> {
        (self.make)()
    }
}

fn make<T: Tool + Default>() -> Arc<dyn DynTool> {
    erase(T::default())
}

inventory::collect!(ToolEntry);

/// Registers a tool type (which must implement [`Tool`] and `Default`) in
/// the compile-time registry. One line, in the tool's own file:
///
/// ```text
/// toolcell_tools::register_tool!(MyTool);
/// ```
#[macro_export]
macro_rules! register_tool {
    ($tool:ty) => {
        $crate::inventory::submit! { $crate::ToolEntry::of::<$tool>() }
    };
}

/// The JSON Schema of `T`, subschemas inlined, without `$schema`.
pub(crate) fn schema_of<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let schema = generator.into_root_schema_for::<T>();
    let mut v = schema.to_value();
    if let Some(obj) = v.as_object_mut() {
        obj.remove("$schema");
    }
    v
}
