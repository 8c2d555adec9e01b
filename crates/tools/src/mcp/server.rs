//! One configured MCP server: started on first use, shared by every caller,
//! restarted after it dies (at most once per [`RESTART_INTERVAL`]), its tool
//! list re-read after `notifications/tools/list_changed`.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation,
    PaginatedRequestParams, ProtocolVersion,
};
use rmcp::service::{NotificationContext, RoleClient, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ServiceExt};
use serde_json::Value;
use tokio::time::Instant;

use super::stdio::{self, ProcessGroup, StderrTail, StdoutProblem};
use super::{MAX_MESSAGE_BYTES, McpServerSpec, RESTART_INTERVAL, result};
use crate::schema_tool::SchemaTool;
use crate::tool::{DynTool, ToolContext, ToolError};
use toolcell_redact::Redactor;

/// The most tools one server may list (more are left out, with a failure).
const MAX_TOOLS: usize = 1000;
/// The most `tools/list` pages followed.
const MAX_PAGES: usize = 100;
/// How long a dying server's exit status is waited for, for a message.
const EXIT_WAIT: Duration = Duration::from_millis(300);
/// How long `shutdown` lets a server exit after SIGTERM before SIGKILL.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(1500);

type Service = RunningService<RoleClient, Notifier>;

/// One live connection to a server (one process, for a stdio server).
struct Conn {
    service: Service,
    /// The child's process group (stdio servers only).
    group: Option<ProcessGroup>,
    stderr: Arc<StderrTail>,
    stdout_problem: Arc<StdoutProblem>,
}

impl Conn {
    fn alive(&self) -> bool {
        !self.service.is_transport_closed()
            && !self.service.is_closed()
            && !self.group.as_ref().is_some_and(ProcessGroup::has_exited)
    }

    /// Why the connection is gone, with the last stderr lines.
    async fn death(&self, name: &str) -> String {
        let mut msg = format!("MCP server `{name}` ");
        if let Some(problem) = self.stdout_problem.get() {
            msg.push_str(&format!("broke the protocol: {problem}"));
        } else if let Some(group) = &self.group {
            match group.exit_description(EXIT_WAIT).await {
                Some(how) => msg.push_str(&format!("stopped ({how})")),
                None => msg.push_str("closed its stdout"),
            }
        } else {
            msg.push_str("closed the connection");
        }
        push_tail(&mut msg, &self.stderr);
        msg
    }
}

fn push_tail(msg: &mut String, tail: &StderrTail) {
    let tail = tail.render();
    if tail.is_empty() {
        msg.push_str("; it wrote nothing to stderr");
    } else {
        msg.push_str("; its last stderr lines:\n");
        msg.push_str(&tail);
    }
}

/// What a server has now.
#[derive(Default)]
struct State {
    conn: Option<Arc<Conn>>,
    /// Which start the connection came from (notifications of an older one
    /// are ignored).
    epoch: u64,
    /// When the last start began.
    last_attempt: Option<Instant>,
    /// Why the last start failed or the last connection died.
    failure: Option<String>,
    /// The tools of the last listing (kept while the server is down, so a
    /// call can start it again).
    tools: Vec<Arc<dyn DynTool>>,
    /// Tools left out of the last listing, and why.
    problems: Vec<String>,
    fingerprint: u64,
    /// The server said its tool list changed since the last listing.
    stale: bool,
}

/// One configured server.
pub(crate) struct Server {
    pub(crate) spec: McpServerSpec,
    generation: Arc<AtomicU64>,
    /// Everything the server says passes it before it is shown or logged.
    redactor: Redactor,
    state: Mutex<State>,
    /// Held while a start (or a re-listing) runs.
    start: Arc<tokio::sync::Mutex<()>>,
    closed: AtomicBool,
    me: Weak<Server>,
}

/// What [`Server::current`] found.
pub(crate) struct Current {
    pub(crate) tools: Vec<Arc<dyn DynTool>>,
    /// Why the server is not usable, or which of its tools were left out.
    pub(crate) problems: Vec<String>,
}

impl Server {
    pub(crate) fn new(
        spec: McpServerSpec,
        generation: Arc<AtomicU64>,
        redactor: Redactor,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            spec,
            generation,
            redactor,
            state: Mutex::new(State::default()),
            start: Arc::new(tokio::sync::Mutex::new(())),
            closed: AtomicBool::new(false),
            me: me.clone(),
        })
    }

    /// `msg` (which may quote the server) through the redactor.
    fn clean(&self, msg: String) -> String {
        match self.redactor.redact(&msg) {
            std::borrow::Cow::Borrowed(_) => msg,
            std::borrow::Cow::Owned(clean) => clean,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The live connection, if there is one and nothing needs doing.
    fn ready(&self, need_fresh_list: bool) -> Option<Arc<Conn>> {
        let st = self.state();
        let conn = st.conn.as_ref()?;
        (conn.alive() && !(need_fresh_list && st.stale)).then(|| Arc::clone(conn))
    }

    /// A live connection: the current one, or a new start (unless the last
    /// one began less than [`RESTART_INTERVAL`] ago). With
    /// `need_fresh_list`, re-reads the tool list if the server said it
    /// changed. Not bounded in time here: callers wrap it in a timeout, and
    /// a start goes on (and ends at its `startup_timeout`) when they give up.
    async fn ensure(&self, need_fresh_list: bool) -> Result<Arc<Conn>, String> {
        if self.closed.load(Ordering::Acquire) {
            return Err(self.closed_message());
        }
        if let Some(conn) = self.ready(need_fresh_list) {
            return Ok(conn);
        }
        let Some(me) = self.me.upgrade() else {
            return Err(self.closed_message());
        };
        let guard = Arc::clone(&self.start).lock_owned().await;
        if let Some(conn) = self.ready(need_fresh_list) {
            return Ok(conn);
        }
        // Run the start (or listing) in a task of its own: a caller that
        // stops waiting must not leave a half-started server behind.
        let task = tokio::spawn(async move {
            let out = me.start_or_refresh().await;
            drop(guard);
            out
        });
        match task.await {
            Ok(out) => out,
            Err(e) => Err(format!(
                "MCP server `{}`: starting it failed: {e}",
                self.spec.name
            )),
        }
    }

    fn closed_message(&self) -> String {
        format!(
            "MCP server `{}` is not available: its host is shutting down",
            self.spec.name
        )
    }

    /// Under the start lock: re-list a live server's tools if they changed,
    /// or start it (again).
    async fn start_or_refresh(self: Arc<Self>) -> Result<Arc<Conn>, String> {
        let name = self.spec.name.clone();
        let (conn, dead) = {
            let mut st = self.state();
            match st.conn.take() {
                Some(c) if c.alive() => {
                    st.conn = Some(Arc::clone(&c));
                    (Some(c), None)
                }
                Some(c) => (None, Some(c)),
                None => (None, None),
            }
        };
        if let Some(conn) = conn {
            // Alive but stale: list again.
            self.state().stale = false;
            let listed = tokio::time::timeout(self.spec.startup_timeout, list_tools(&conn)).await;
            return match listed {
                Ok(Ok(tools)) => {
                    self.install_tools(tools);
                    Ok(conn)
                }
                Ok(Err(e)) => {
                    self.state().stale = true;
                    Err(self.clean(format!(
                        "MCP server `{name}`: listing its tools failed: {e}"
                    )))
                }
                Err(_) => {
                    self.state().stale = true;
                    Err(format!(
                        "MCP server `{name}` did not list its tools within {}",
                        secs(self.spec.startup_timeout)
                    ))
                }
            };
        }
        if let Some(dead) = dead {
            let why = self.clean(dead.death(&name).await);
            tracing::warn!(server = %name, "{why}");
            self.state().failure = Some(why);
            drop(dead);
        }
        {
            let st = self.state();
            if let (Some(at), Some(failure)) = (st.last_attempt, &st.failure) {
                let since = at.elapsed();
                if since < RESTART_INTERVAL {
                    let wait = RESTART_INTERVAL.saturating_sub(since);
                    return Err(format!(
                        "{failure}\n(it is started again at the next call from {:.1} s on)",
                        wait.as_secs_f64()
                    ));
                }
            }
        }
        if self.closed.load(Ordering::Acquire) {
            return Err(self.closed_message());
        }
        let epoch = {
            let mut st = self.state();
            st.last_attempt = Some(Instant::now());
            st.epoch += 1;
            st.epoch
        };
        match self.start_once(epoch).await {
            Ok((conn, tools)) => {
                let conn = Arc::new(conn);
                {
                    let mut st = self.state();
                    if self.closed.load(Ordering::Acquire) {
                        return Err(self.closed_message());
                    }
                    st.conn = Some(Arc::clone(&conn));
                    st.failure = None;
                    st.stale = false;
                }
                self.install_tools(tools);
                tracing::info!(server = %name, "MCP server started");
                Ok(conn)
            }
            Err(why) => {
                let why = self.clean(why);
                tracing::warn!(server = %name, "{why}");
                self.state().failure = Some(why.clone());
                Err(why)
            }
        }
    }

    /// Starts the server and lists its tools, within `startup_timeout`.
    async fn start_once(&self, epoch: u64) -> Result<(Conn, Vec<rmcp::model::Tool>), String> {
        let name = &self.spec.name;
        let notifier = Notifier {
            server: self.me.clone(),
            epoch,
        };
        let timeout = self.spec.startup_timeout;
        if let Some(url) = &self.spec.url {
            let client = super::http_client()
                .map_err(|e| format!("MCP server `{name}`: cannot build an HTTP client: {e}"))?;
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            config.max_json_response_size = MAX_MESSAGE_BYTES;
            config.max_sse_event_size = MAX_MESSAGE_BYTES;
            let transport = StreamableHttpClientTransport::with_client(client, config);
            let started = tokio::time::timeout(timeout, async {
                let service = notifier.serve(transport).await.map_err(|e| e.to_string())?;
                let conn = Conn {
                    service,
                    group: None,
                    stderr: Arc::default(),
                    stdout_problem: Arc::default(),
                };
                let tools = list_tools(&conn).await.map_err(|e| e.to_string())?;
                Ok::<_, String>((conn, tools))
            })
            .await;
            return match started {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(format!("MCP server `{name}` at {url}: {e}")),
                Err(_) => Err(format!(
                    "MCP server `{name}` at {url} did not answer within {}",
                    secs(timeout)
                )),
            };
        }
        let spawned = stdio::spawn(&self.spec, MAX_MESSAGE_BYTES, &self.redactor)?;
        let stderr = Arc::clone(&spawned.stderr);
        let stdout_problem = Arc::clone(&spawned.stdout_problem);
        let group = spawned.group;
        // The guard enforces the size cap (with an error); the transport's
        // own cap (which drops a line silently) sits above it.
        let transport = AsyncRwTransport::new_client(spawned.stdout, spawned.stdin)
            .with_max_line_length(MAX_MESSAGE_BYTES.saturating_mul(2));
        let started = tokio::time::timeout(timeout, async {
            let service = notifier
                .serve(transport)
                .await
                .map_err(|e| (e.to_string(), None))?;
            let conn = Conn {
                service,
                group: None,
                stderr: Arc::clone(&stderr),
                stdout_problem: Arc::clone(&stdout_problem),
            };
            match list_tools(&conn).await {
                Ok(tools) => Ok((conn, tools)),
                Err(e) => Err((e.to_string(), Some(conn))),
            }
        })
        .await;
        let fail = |what: String| match stdout_problem.get() {
            Some(problem) => format!(
                "MCP server `{name}` ({}) broke the protocol: {problem}",
                self.command_line()
            ),
            None => format!("MCP server `{name}` ({}) {what}", self.command_line()),
        };
        match started {
            Ok(Ok((mut conn, tools))) => {
                conn.group = Some(group);
                Ok((conn, tools))
            }
            Ok(Err((e, _conn))) => {
                let how = group.exit_description(EXIT_WAIT).await;
                let mut msg = match how {
                    Some(how) => fail(format!("stopped during startup ({how}): {e}")),
                    None => fail(format!("failed during startup: {e}")),
                };
                push_tail(&mut msg, &stderr);
                Err(msg)
            }
            Err(_) => {
                let mut msg = fail(format!(
                    "did not complete the MCP handshake and list its tools within {} \
                     (startup_timeout)",
                    secs(timeout)
                ));
                push_tail(&mut msg, &stderr);
                Err(msg)
            }
        }
    }

    fn command_line(&self) -> String {
        let line = self.spec.command.join(" ");
        if line.len() > 200 {
            let mut cut = 200;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            format!("{}…", &line[..cut])
        } else {
            line
        }
    }

    /// Builds the tools of a listing and bumps the generation if they
    /// differ from the last ones.
    fn install_tools(&self, listed: Vec<rmcp::model::Tool>) {
        let mut tools: Vec<Arc<dyn DynTool>> = Vec::new();
        let mut problems = Vec::new();
        let mut hasher = DefaultHasher::new();
        let name = &self.spec.name;
        for t in listed {
            if !self.spec.tools.is_empty() && !self.spec.tools.iter().any(|n| *n == t.name) {
                continue;
            }
            if tools.len() == MAX_TOOLS {
                problems.push(format!(
                    "MCP server `{name}` lists more than {MAX_TOOLS} tools; the rest are left out"
                ));
                break;
            }
            let input = Value::Object((*t.input_schema).clone());
            let output = t
                .output_schema
                .as_ref()
                .map(|o| Value::Object((**o).clone()));
            let qualified = format!("{name}.{}", t.name);
            let doc = t
                .description
                .as_deref()
                .or(t.title.as_deref())
                .unwrap_or("")
                .to_string();
            qualified.hash(&mut hasher);
            doc.hash(&mut hasher);
            input.to_string().hash(&mut hasher);
            output.as_ref().map(Value::to_string).hash(&mut hasher);
            match self.make_tool(&qualified, &t.name, doc, input, output) {
                Ok(tool) => tools.push(tool),
                Err(e) => problems.push(format!("MCP server `{name}`: tool left out: {e}")),
            }
        }
        // Names that would clash in a stub module (`get-user`, `get_user`):
        // the later tool is left out, never the server's whole list.
        let screened = crate::screen::screen(&tools, &[]);
        tools = screened.tools;
        problems.extend(
            screened
                .dropped
                .into_iter()
                .map(|why| format!("MCP server `{name}`: {why}")),
        );
        for want in &self.spec.tools {
            let qualified = format!("{name}.{want}");
            if !tools.iter().any(|t| t.name() == qualified) {
                problems.push(format!(
                    "MCP server `{name}` has no tool `{want}` (named in its `tools`)"
                ));
            }
        }
        let problems: Vec<String> = problems.into_iter().map(|p| self.clean(p)).collect();
        for problem in &problems {
            tracing::warn!(server = %name, "{problem}");
        }
        let fingerprint = hasher.finish();
        let mut st = self.state();
        let changed = st.fingerprint != fingerprint || st.tools.len() != tools.len();
        st.tools = tools;
        st.problems = problems;
        st.fingerprint = fingerprint;
        drop(st);
        if changed {
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn make_tool(
        &self,
        qualified: &str,
        tool: &str,
        doc: String,
        input: Value,
        output: Option<Value>,
    ) -> Result<Arc<dyn DynTool>, String> {
        if !crate::registry::valid_name(qualified) {
            return Err(format!(
                "tool name {tool:?} cannot be used (1 to 128 characters without whitespace or \
                 control characters)"
            ));
        }
        let me = self.me.clone();
        let tool_name: Arc<str> = Arc::from(tool);
        let qualified_name: Arc<str> = Arc::from(qualified);
        let made = SchemaTool::new(
            qualified,
            doc,
            input,
            move |args: Value, cx: ToolContext| {
                let me = me.clone();
                let tool_name = Arc::clone(&tool_name);
                let qualified_name = Arc::clone(&qualified_name);
                async move {
                    let Some(server) = me.upgrade() else {
                        return Err(ToolError::failed("its MCP server is no longer configured"));
                    };
                    server.call(&tool_name, &qualified_name, args, cx).await
                }
            },
        )
        .map_err(|e| e.to_string())?;
        let made = match output {
            Some(schema) => made.with_output_schema(schema).map_err(|e| e.to_string())?,
            None => made,
        };
        // What the model sees of it: the host's secrets masked.
        let made = made.redacted(&self.redactor).map_err(|e| e.to_string())?;
        // The function of `toolcell_tools.SERVER`.
        let made = made
            .in_namespace(self.spec.name.clone())
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(made))
    }

    /// Calls `tool` with `args`, bounded by the cell's deadline (less a
    /// margin, [`ToolContext::answer_by`], so the cell gets the `ToolError`
    /// in time to handle it) and ended when the cell settles.
    async fn call(
        &self,
        tool: &str,
        qualified: &str,
        args: Value,
        cx: ToolContext,
    ) -> Result<Value, ToolError> {
        let deadline = cx.answer_by();
        let cancel = cx.cancelled().clone();
        let work = async {
            let conn = self.ensure(false).await.map_err(ToolError::Failed)?;
            let arguments = match args {
                Value::Object(o) => o,
                Value::Null => serde_json::Map::new(),
                other => {
                    return Err(ToolError::failed(format!(
                        "arguments must be an object, not {other}"
                    )));
                }
            };
            let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
            match conn.service.peer().call_tool(params).await {
                Ok(r) => result::map_result(qualified, r, &cx)
                    .await
                    .map(|v| result::redact_value(v, &cx.settings().redactor)),
                Err(e) => Err(self.call_error(&conn, qualified, e).await),
            }
        };
        tokio::select! {
            r = work => r,
            () = tokio::time::sleep_until(deadline) => Err(ToolError::failed(format!(
                "MCP server `{}` did not answer within the cell's time limit (less a \
                 moment for the cell to handle this error); the call was cancelled and \
                 its outcome is unknown",
                self.spec.name
            ))),
            () = cancel.cancelled() => Err(ToolError::failed(format!(
                "the cell ended while {qualified} was running; the call was cancelled"
            ))),
        }
    }

    async fn call_error(&self, conn: &Conn, qualified: &str, e: ServiceError) -> ToolError {
        let name = &self.spec.name;
        match e {
            ServiceError::McpError(data) => ToolError::failed(self.clean(format!(
                "MCP server `{name}` refused the call: {} (code {})",
                data.message, data.code.0
            ))),
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
                let death = if conn.alive() && self.spec.url.is_some() {
                    format!("MCP server `{name}` could not be reached: {e}")
                } else {
                    conn.death(name).await
                };
                ToolError::failed(self.clean(format!(
                    "{qualified} failed: {death}\n(the next call starts the server again, at \
                     most once every {} s)",
                    RESTART_INTERVAL.as_secs()
                )))
            }
            other => ToolError::failed(self.clean(format!("MCP server `{name}`: {other}"))),
        }
    }

    /// Starts the server if needed (waiting up to its `startup_timeout`),
    /// re-lists its tools if they changed, and returns them.
    pub(crate) async fn current(&self) -> Current {
        // A start ends by itself at `startup_timeout` with a precise
        // message; the margin lets it, when this call began it.
        let wait = self.spec.startup_timeout + Duration::from_secs(2);
        let waited = tokio::time::timeout(wait, self.ensure(true)).await;
        let failure = match waited {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(e),
            Err(_) => Some(format!(
                "MCP server `{}` is still starting after {} (startup_timeout)",
                self.spec.name,
                secs(self.spec.startup_timeout)
            )),
        };
        let st = self.state();
        let mut problems: Vec<String> = failure.into_iter().collect();
        problems.extend(st.problems.iter().cloned());
        Current {
            tools: st.tools.clone(),
            problems,
        }
    }

    /// The server said its tools changed.
    fn list_changed(&self, epoch: u64) {
        let mut st = self.state();
        if st.epoch != epoch {
            return;
        }
        st.stale = true;
        drop(st);
        tracing::debug!(server = %self.spec.name, "MCP server tool list changed");
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The pid (= process group id) of the running stdio server.
    pub(crate) fn pid(&self) -> Option<i32> {
        let st = self.state();
        st.conn
            .as_ref()
            .filter(|c| c.alive())
            .and_then(|c| c.group.as_ref().map(ProcessGroup::pgid))
    }

    /// Ends the server for good, gracefully.
    pub(crate) async fn shutdown(&self) {
        self.closed.store(true, Ordering::Release);
        let conn = self.state().conn.take();
        if let Some(conn) = conn {
            if let Some(group) = &conn.group {
                group.terminate(SHUTDOWN_GRACE).await;
            }
            conn.service.cancellation_token().cancel();
        }
    }

    /// Ends the server for good, at once (SIGKILL to its process group).
    pub(crate) fn kill(&self) {
        self.closed.store(true, Ordering::Release);
        let conn = self.state().conn.take();
        if let Some(conn) = conn {
            if let Some(group) = &conn.group {
                group.signal(nix::sys::signal::Signal::SIGKILL);
            }
            conn.service.cancellation_token().cancel();
        }
    }
}

/// Every page of the server's tool list, bounded.
async fn list_tools(conn: &Conn) -> Result<Vec<rmcp::model::Tool>, ServiceError> {
    let peer = conn.service.peer();
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = cursor
            .take()
            .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let page = peer.list_tools(params).await?;
        out.extend(page.tools);
        match page.next_cursor {
            Some(c) if out.len() <= MAX_TOOLS => cursor = Some(c),
            _ => break,
        }
    }
    Ok(out)
}

fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0} s")
    } else {
        format!("{s:.1} s")
    }
}

/// The client side's handler: identifies toolcell and hears
/// `notifications/tools/list_changed`.
#[derive(Clone)]
struct Notifier {
    server: Weak<Server>,
    epoch: u64,
}

impl ClientHandler for Notifier {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        if let Some(server) = self.server.upgrade() {
            server.list_changed(self.epoch);
        }
    }

    fn get_info(&self) -> ClientConfig {
        // The newest revision that still has the `initialize` handshake:
        // every released server speaks it (2026-07-28 servers answer it too).
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("toolcell", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }
}
