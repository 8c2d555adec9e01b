//! `toolcell mcp`: a Model Context Protocol server over stdio, built on
//! `rmcp` (the official Rust SDK).
//!
//! It offers one tool, `execute_code` (the schema the tools crate generates
//! for the enabled tools and configured limits, plus an optional `session`
//! argument), and with `--expose-tools` every enabled built-in tool as its
//! own MCP tool, run directly in the host. One kernel per connection (a
//! `toolcell mcp` process serves one client): cells without `session` share
//! the kernel of session `"default"`; a `session` name selects another.
//!
//! - The result of `execute_code` is the execute result (docs/result.md) as
//!   `structuredContent`, and a text block with the output followed by a status
//!   line (then one `files:` line when the cell changed files, and the error,
//!   hint and warning when present), so a client that shows only text still
//!   gives the model everything. `isError` is true unless the status is
//!   `success`.
//! - While a cell runs, each output chunk is sent as a
//!   `notifications/progress` message (the chunk in `message`, the bytes
//!   seen so far in `progress`) when the request carried a progress token.
//! - `notifications/cancelled` interrupts the cell (SIGINT, then the
//!   configured grace and tree kill, as for a timeout).
//! - Lines that are not JSON get a `-32700` error, and JSON that is not a
//!   JSON-RPC message a `-32600` (rmcp ignores unparsable lines; this
//!   module screens them first so the client always hears about its
//!   mistake). The server keeps serving.
//! - When the client disconnects (EOF on stdin), every kernel is shut down.

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use toolcell_host::Registry;
use toolcell_host::config::Config;
use toolcell_kernel::{ExecuteResult, Status, StreamKind};
use toolcell_stubs::SchemaFormat;
use toolcell_tools::{DynTool, ToolContext, ToolSettings};

use crate::host::{self, Overrides};
use crate::jsonrpc;

/// Arguments of `toolcell mcp`.
#[derive(Debug, clap::Args)]
#[command(
    long_about = "Serve the Model Context Protocol over stdio, for MCP clients (Claude Desktop, \
                  Claude Code, Cursor, ...). The server offers one tool, execute_code: run Python \
                  in a persistent kernel whose variables survive from one call to the next, and \
                  whose code can call the enabled tools as Python functions. Output chunks \
                  arrive as progress notifications while a cell runs (when the client asks for \
                  progress); cancelling the request interrupts the cell. With --expose-tools, \
                  each enabled tool (read_file, terminal, ...) is also listed as its own MCP \
                  tool. When the client disconnects, every kernel is shut down.\n\nClient \
                  configuration: {\"mcpServers\": {\"toolcell\": {\"command\": \"toolcell\", \
                  \"args\": [\"mcp\"]}}}"
)]
pub(crate) struct Args {
    #[command(flatten)]
    overrides: Overrides,
    /// Also list each enabled tool as its own MCP tool (run in the host, not in a kernel).
    #[arg(long)]
    expose_tools: bool,
}

/// The one tool every client sees.
const EXECUTE_CODE: &str = "execute_code";

/// Keys `execute_code` accepts.
const ACCEPTED: [&str; 5] = ["code", "reset", "session", "remote", "language"];

/// Live chunks queued for one request's progress notifications; when the
/// client reads slowly, chunks beyond this are dropped (the result still
/// carries the output).
const PROGRESS_QUEUE: usize = 256;

/// Longest accepted message line (the same cap as `serve`).
const MAX_LINE: usize = jsonrpc::MAX_LINE;

/// What the model reads in the initialize result.
const INSTRUCTIONS: &str = "toolcell runs Python for you in a persistent kernel. Use the \
    execute_code tool to run code: variables, imports and loaded data stay alive from one call \
    to the next, so load data once and explore it over several calls. Inside the code, the \
    host's tools (files, search, terminal, web) are plain Python functions that return dicts; \
    the execute_code description lists them with their signatures. Print what you need to \
    see: the result carries the printed output (cut in the middle when very long, with the full \
    text saved to a file), the files the code created, modified or deleted, the error and a \
    hint when something failed. Pass reset=true to start \
    over in a fresh kernel, and a `session` name to keep a separate kernel for a separate task.";

/// The MCP service of one connection.
struct McpServer {
    registry: Arc<Registry>,
    /// `tools/list`, in order: execute_code first, then exposed tools.
    listed: Vec<Tool>,
    /// The enabled built-in tools (the `execute_code` description lists
    /// them, and the MCP servers' tools when servers are configured).
    enabled_tools: Vec<Arc<dyn DynTool>>,
    /// The limits the description states.
    options: toolcell_stubs::ExecuteCodeOptions,
    /// The `[remotes.NAME]` a cell may name (`execute_code`'s `remote`).
    remotes: Vec<String>,
    /// Tools callable directly (`--expose-tools`), by name.
    exposed: HashMap<String, Arc<dyn DynTool>>,
    /// Settings for direct tool calls.
    settings: Arc<ToolSettings>,
    /// Timeout of a direct tool call (the cell timeout).
    tool_timeout: Duration,
    /// One lock per session: a session's cells run one at a time, in
    /// arrival order, so a cancellation interrupts exactly its own cell.
    sessions: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl McpServer {
    fn new(registry: Arc<Registry>, config: &Config, expose: bool) -> anyhow::Result<Self> {
        let enabled: Vec<Arc<dyn DynTool>> = registry
            .tools()
            .select(&config.tools.enabled)
            .context("selecting the enabled tools")?;
        let options = config.execute_code_options();
        let remotes: Vec<String> = config.remotes.keys().cloned().collect();
        let mut listed = vec![execute_code_def(&enabled, &options, &remotes)];
        let mut exposed = HashMap::new();
        let enabled_all = enabled.clone();
        if expose {
            for t in enabled {
                if t.name() == EXECUTE_CODE {
                    continue;
                }
                let mut tool = Tool::new(t.name().to_string(), t.doc().to_string(), {
                    object(t.args_schema())
                });
                // MCP wants an object schema here; a tool that declares no
                // result shape (`{}`) or a non-object one gets none.
                let out = t.output_schema();
                if out.get("type").and_then(Value::as_str) == Some("object") {
                    tool.output_schema = Some(Arc::new(as_object(out)));
                }
                listed.push(tool);
                exposed.insert(t.name().to_string(), t);
            }
        }
        let cwd = host::cwd()?;
        let settings = Arc::new(registry.tool_settings(&cwd));
        Ok(Self {
            enabled_tools: enabled_all,
            options,
            remotes,
            tool_timeout: registry.options().timeout,
            registry,
            listed,
            exposed,
            settings,
            sessions: Mutex::new(HashMap::new()),
        })
    }

    fn session_lock(&self, session: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        // Forget locks nobody holds or waits for (bounded by live requests).
        if map.len() > 64 {
            map.retain(|_, l| Arc::strong_count(l) > 1);
        }
        Arc::clone(map.entry(session.to_string()).or_default())
    }

    async fn execute_code(
        &self,
        args: Value,
        context: RequestContext<RoleServer>,
        token: Option<rmcp::model::ProgressToken>,
    ) -> CallToolResult {
        let params =
            match jsonrpc::cell_params(&args, self.registry.tools(), EXECUTE_CODE, &ACCEPTED) {
                Ok(p) => p,
                Err(msg) => return CallToolResult::error(vec![ContentBlock::text(msg)]),
            };
        let mut req = params.req;
        let session = params.session;
        let mut forwarder = None;
        if let Some(token) = token {
            let (tx, rx) = mpsc::channel::<(StreamKind, String)>(PROGRESS_QUEUE);
            req = req.live(Arc::new(move |s: StreamKind, chunk: &str| {
                // Never block the cell on a slow client.
                let _ = tx.try_send((s, chunk.to_string()));
            }));
            forwarder = Some(tokio::spawn(forward_progress(
                rx,
                context.peer.clone(),
                token,
            )));
        }
        let lock = self.session_lock(&session);
        let ct = context.ct.clone();
        let result = tokio::select! {
            // Cancelled while waiting for an earlier cell of the session:
            // this one never runs.
            _ = ct.cancelled() => None,
            held = lock.lock() => {
                let run = self.registry.execute(req);
                tokio::pin!(run);
                let r = tokio::select! {
                    r = &mut run => r,
                    _ = ct.cancelled() => {
                        // Only this request's cell runs in this session now.
                        self.registry.interrupt(&session);
                        run.await
                    }
                };
                drop(held);
                Some(r)
            }
        };
        if let Some(f) = forwarder {
            // Every chunk's notification goes out before the response.
            let _ = f.await;
        }
        match result {
            Some(r) => cell_result(&r),
            None => CallToolResult::error(vec![ContentBlock::text(
                "cancelled before the cell started; none of the code ran",
            )]),
        }
    }

    async fn call_exposed(
        &self,
        tool: Arc<dyn DynTool>,
        args: Value,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let name = tool.name().to_string();
        if let Some(p) = tool
            .blocked_params()
            .iter()
            .find(|p| args.get(**p).is_some_and(|v| !v.is_null()))
        {
            return self.tool_error(&format!("{name}: parameter `{p}` is not allowed here"));
        }
        if let Err(e) = tool.validate(&args) {
            return self.tool_error(&e);
        }
        let deadline = tokio::time::Instant::now() + self.tool_timeout;
        let cx = ToolContext::new(Arc::clone(&self.settings), deadline, context.ct.clone());
        let call = tool.call(args, cx);
        let outcome = tokio::select! {
            r = call => r.map_err(|e| e.to_string()),
            _ = tokio::time::sleep_until(deadline) => Err(format!(
                "{name}: timed out after {} seconds",
                self.tool_timeout.as_secs_f64()
            )),
        };
        match outcome {
            Ok(value) => {
                let value = self.clean_value(value);
                let text = serde_json::to_string_pretty(&value).unwrap_or_default();
                let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
                r.structured_content = Some(value);
                r
            }
            Err(e) => self.tool_error(&e),
        }
    }

    /// An error result whose text went through the redactor.
    fn tool_error(&self, msg: &str) -> CallToolResult {
        let clean = self.registry.redactor().clean(msg.as_bytes());
        CallToolResult::error(vec![ContentBlock::text(clean)])
    }

    /// Strips ANSI and redacts every string in a tool's result, as the
    /// output pipeline does for everything a kernel prints.
    fn clean_value(&self, v: Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.registry.redactor().clean(s.as_bytes())),
            Value::Array(a) => Value::Array(a.into_iter().map(|x| self.clean_value(x)).collect()),
            Value::Object(o) => Value::Object(
                o.into_iter()
                    .map(|(k, x)| (k, self.clean_value(x)))
                    .collect(),
            ),
            other => other,
        }
    }
}

/// Sends each live chunk as a progress notification, in order.
async fn forward_progress(
    mut rx: mpsc::Receiver<(StreamKind, String)>,
    peer: rmcp::Peer<RoleServer>,
    token: rmcp::model::ProgressToken,
) {
    let mut seen: u64 = 0;
    while let Some((stream, chunk)) = rx.recv().await {
        seen += chunk.len() as u64;
        let message = match stream {
            StreamKind::Stdout => chunk,
            StreamKind::Stderr => format!("[stderr] {chunk}"),
        };
        let note = ProgressNotificationParam::new(token.clone(), seen as f64).with_message(message);
        if peer.notify_progress(note).await.is_err() {
            // The client is gone; drain so the cell never waits on us.
            while rx.recv().await.is_some() {}
            return;
        }
    }
}

/// The MCP shape of a cell result (docs/mcp.md, "The result"): text for the
/// model, the execute result object (docs/result.md) as structured content.
fn cell_result(r: &ExecuteResult) -> CallToolResult {
    let mut text = if r.output.is_empty() {
        "(no output)".to_string()
    } else {
        r.output.clone()
    };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&format!(
        "[{} · exit_code {} · {:.2} s · {} tool call{}]",
        r.status.as_str(),
        r.exit_code,
        r.duration_seconds,
        r.tool_calls_made,
        if r.tool_calls_made == 1 { "" } else { "s" }
    ));
    if let Some(f) = &r.files {
        text.push('\n');
        text.push_str(&f.brief(5));
    }
    for (label, v) in [
        ("error", &r.error),
        ("hint", &r.hint),
        ("warning", &r.warning),
    ] {
        if let Some(v) = v {
            text.push_str(&format!("\n{label}: {v}"));
        }
    }
    let mut out = if r.status == Status::Success {
        CallToolResult::success(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::error(vec![ContentBlock::text(text)])
    };
    out.structured_content = serde_json::to_value(r).ok();
    out
}

fn as_object(v: Value) -> JsonObject {
    match v {
        Value::Object(o) => o,
        _ => JsonObject::new(),
    }
}

fn object(v: Value) -> Arc<JsonObject> {
    Arc::new(as_object(v))
}

/// The `execute_code` tool, its description listing `tools`.
fn execute_code_def(
    tools: &[Arc<dyn DynTool>],
    options: &toolcell_stubs::ExecuteCodeOptions,
    remotes: &[String],
) -> Tool {
    let def = toolcell_stubs::execute_code_tool(tools, options, SchemaFormat::Mcp);
    let description = def["description"].as_str().unwrap_or_default().to_string();
    let mut input = def["inputSchema"].clone();
    input["properties"]["session"] = json!({
        "type": "string",
        "description": "Name of the kernel to run in (default \"default\"). Each name keeps \
                        its own kernel and state for this connection."
    });
    if !remotes.is_empty() {
        let mut names: Vec<Value> = vec![json!("")];
        names.extend(remotes.iter().map(|r| json!(r)));
        input["properties"]["remote"] = json!({
            "type": "string",
            "enum": names,
            "description": "Where the kernel runs: one of the configured remote machines or                             containers, or \"\" for this machine. Each remote keeps its own                             kernel and state; tools still run on this machine."
        });
    }
    input["properties"]["language"] = json!({
        "type": "string",
        "enum": ["python", "r", "javascript"],
        "description": "The language of the code (default: the configured one). Each language \
                        has its own kernel and state in a session."
    });
    Tool::new(EXECUTE_CODE, description, object(input))
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("toolcell", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut listed = self.listed.clone();
        if self.registry.has_tool_sources() {
            // "Code mode": the MCP servers' tools (started now, on first
            // use) are functions the code calls; the description lists them.
            let mut tools = self.enabled_tools.clone();
            tools.extend(self.registry.source_tools().await.tools);
            listed[0] = execute_code_def(&tools, &self.options, &self.remotes);
        }
        Ok(ListToolsResult::with_all_items(listed))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let token = context
            .meta
            .get_progress_token()
            .or_else(|| request.meta.as_ref().and_then(|m| m.get_progress_token()));
        let args = Value::Object(request.arguments.unwrap_or_default());
        if request.name == EXECUTE_CODE {
            return Ok(self.execute_code(args, context, token).await.into());
        }
        if let Some(tool) = self.exposed.get(request.name.as_ref()) {
            return Ok(self
                .call_exposed(Arc::clone(tool), args, context)
                .await
                .into());
        }
        let names: Vec<&str> = self.listed.iter().map(|t| t.name.as_ref()).collect();
        Err(McpError::invalid_params(
            format!(
                "unknown tool `{}`; this server offers: {}",
                request.name,
                names.join(", ")
            ),
            None,
        ))
    }
}

/// Runs the command.
pub(crate) fn run(config: Option<&Path>, args: Args) -> anyhow::Result<ExitCode> {
    let cfg = host::load_config(config, &args.overrides)?;
    let rt = host::runtime()?;
    rt.block_on(async move {
        let registry = Arc::new(host::journaled_registry(&cfg, |_| {})?);
        host::exit_on_signals(Arc::clone(&registry));
        let server = McpServer::new(Arc::clone(&registry), &cfg, args.expose_tools)?;
        let (to_rmcp, rmcp_in) = tokio::io::duplex(1 << 20);
        let (rmcp_out, from_rmcp) = tokio::io::duplex(1 << 20);
        let (errors_tx, errors_rx) = mpsc::channel::<String>(64);
        let (input, output) = host::stdio();
        let screen = tokio::spawn(screen_input(input, to_rmcp, errors_tx));
        let writer = tokio::spawn(write_output(from_rmcp, errors_rx, output));
        match server.serve((rmcp_in, rmcp_out)).await {
            Ok(running) => {
                let _ = running.waiting().await;
            }
            Err(e) => tracing::warn!("MCP session ended before initialization: {e}"),
        }
        registry.shutdown_all().await;
        host::flush_journal(&registry);
        screen.abort();
        let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
        Ok(ExitCode::SUCCESS)
    })
}

/// A JSON-RPC error line with a null id.
fn error_line(code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}}).to_string()
}

/// Why a JSON value is not a JSON-RPC 2.0 message: (id to answer with,
/// code, message). rmcp answers such lines with a bare "Invalid request"
/// and no id; this names what is wrong.
fn shape_problem(msg: &Value) -> Option<(Value, i64, String)> {
    let Value::Object(o) = msg else {
        let message = if msg.is_array() {
            "JSON-RPC batches are not part of MCP (removed in protocol 2025-06-18); send one \
             message per line"
        } else {
            "a JSON-RPC message must be a JSON object"
        };
        return Some((Value::Null, jsonrpc::code::INVALID_REQUEST, message.into()));
    };
    let id = match o.get("id") {
        None => Value::Null,
        Some(v @ (Value::Null | Value::Number(_) | Value::String(_))) => v.clone(),
        Some(_) => {
            return Some((
                Value::Null,
                jsonrpc::code::INVALID_REQUEST,
                "`id` must be a string or a number".into(),
            ));
        }
    };
    let bad = |m: &str| Some((id.clone(), jsonrpc::code::INVALID_REQUEST, m.to_string()));
    if o.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return bad("`jsonrpc` must be \"2.0\"");
    }
    match o.get("method") {
        Some(Value::String(_)) => None,
        Some(_) => bad("`method` must be a string"),
        // A response to one of our requests.
        None if o.contains_key("id") && (o.contains_key("result") ^ o.contains_key("error")) => {
            None
        }
        None => bad("a request needs a `method` (a response needs `id` and `result` or `error`)"),
    }
}

/// Reads client lines; passes JSON on to rmcp and answers what is not JSON
/// (or too long) itself. Ends rmcp's input at EOF.
async fn screen_input<R>(
    input: R,
    mut to_rmcp: tokio::io::DuplexStream,
    errors: mpsc::Sender<String>,
) where
    R: tokio::io::AsyncRead + Unpin,
{
    let mut reader = jsonrpc::LineReader::new(input, MAX_LINE);
    while let Some(line) = reader.next_line().await {
        let line = match line {
            jsonrpc::Line::Text(text) => text,
            jsonrpc::Line::TooLong => {
                let _ = errors
                    .send(error_line(
                        jsonrpc::code::INVALID_REQUEST,
                        &format!("message line longer than {MAX_LINE} bytes; it was skipped"),
                    ))
                    .await;
                continue;
            }
            jsonrpc::Line::NotUtf8 => {
                let _ = errors
                    .send(error_line(
                        jsonrpc::code::PARSE,
                        "parse error: the line is not valid UTF-8; send one JSON-RPC message per line",
                    ))
                    .await;
                continue;
            }
        };
        if line.bytes().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        let problem = match serde_json::from_str::<Value>(&line) {
            Err(e) => Some((
                Value::Null,
                jsonrpc::code::PARSE,
                format!("parse error: {e}; send one JSON-RPC message per line"),
            )),
            Ok(msg) => shape_problem(&msg),
        };
        if let Some((id, code, message)) = problem {
            let line =
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
            let _ = errors.send(line.to_string()).await;
            continue;
        }
        if to_rmcp.write_all(line.as_bytes()).await.is_err()
            || to_rmcp.write_all(b"\n").await.is_err()
        {
            break;
        }
    }
    let _ = to_rmcp.shutdown().await;
}

/// Copies rmcp's output lines and our own error lines to stdout, whole
/// lines only.
async fn write_output<W>(
    from_rmcp: tokio::io::DuplexStream,
    mut errors: mpsc::Receiver<String>,
    mut out: W,
) where
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut lines = BufReader::new(from_rmcp);
    let mut buf = Vec::new();
    let mut errors_open = true;
    loop {
        tokio::select! {
            r = lines.read_until(b'\n', &mut buf) => {
                match r {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if !buf.ends_with(b"\n") {
                            buf.push(b'\n');
                        }
                        if out.write_all(&buf).await.is_err() || out.flush().await.is_err() {
                            break;
                        }
                        buf.clear();
                    }
                }
            }
            e = errors.recv(), if errors_open => {
                match e {
                    Some(line) => {
                        if out.write_all(line.as_bytes()).await.is_err()
                            || out.write_all(b"\n").await.is_err()
                            || out.flush().await.is_err()
                        {
                            break;
                        }
                    }
                    None => errors_open = false,
                }
            }
        }
    }
}
