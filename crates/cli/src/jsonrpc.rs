//! The JSON-RPC 2.0 methods of SPEC §10, shared by `toolcell serve` (stdio)
//! and the daemon (one Unix socket connection per client).
//!
//! One message per line in, one per line out. Requests run concurrently
//! (each in its own task) and responses may come out of order; a single
//! writer task keeps every line whole.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::codec::{Decoder, LinesCodec, LinesCodecError};
use toolcell_kernel::config::Config;
use toolcell_kernel::{ExecuteRequest, Registry, StreamKind};
use toolcell_tools::ToolRegistry;
use toolcell_tools::schema::{self, Mode, SchemaFormat};

/// Longest accepted request line.
pub const MAX_LINE: usize = 64 * 1024 * 1024;

/// JSON-RPC error codes.
pub mod code {
    /// Not JSON.
    pub const PARSE: i64 = -32700;
    /// Not a valid request object.
    pub const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Bad parameters.
    pub const INVALID_PARAMS: i64 = -32602;
}

/// What the methods need.
pub struct Service {
    /// The kernels.
    pub registry: Arc<Registry>,
    /// The configuration (for `schema`).
    pub config: Config,
    /// Extra methods only the daemon offers (`ping`, `shutdown`).
    pub daemon: Option<DaemonHooks>,
}

/// Daemon-only behaviour.
pub struct DaemonHooks {
    /// Fires to stop the daemon.
    pub stop: tokio_util::sync::CancellationToken,
}

type Out = mpsc::Sender<String>;

fn response(id: &Value, result: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
}

fn error(id: &Value, code: i64, message: impl Into<String>) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}})
        .to_string()
}

/// A parameter problem: becomes -32602.
struct BadParams(String);

fn bad(msg: impl Into<String>) -> BadParams {
    BadParams(msg.into())
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn params_object<'a>(params: &'a Value, method: &str) -> Result<&'a Map<String, Value>, BadParams> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    match params {
        Value::Object(m) => Ok(m),
        Value::Null => Ok(EMPTY.get_or_init(Map::new)),
        other => Err(bad(format!(
            "{method}: params must be an object (named parameters), got {}",
            type_name(other)
        ))),
    }
}

fn check_known(p: &Map<String, Value>, method: &str, known: &[&str]) -> Result<(), BadParams> {
    for k in p.keys() {
        if !known.contains(&k.as_str()) {
            return Err(bad(format!(
                "{method}: unknown parameter `{k}`; accepted: {}",
                known.join(", ")
            )));
        }
    }
    Ok(())
}

fn opt_str<'a>(
    p: &'a Map<String, Value>,
    key: &str,
    method: &str,
) -> Result<Option<&'a str>, BadParams> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(bad(format!(
            "{method}: `{key}` must be a string, got {}",
            type_name(v)
        ))),
    }
}

fn session_of(p: &Map<String, Value>, method: &str) -> Result<String, BadParams> {
    match opt_str(p, "session", method)? {
        None => Ok("default".into()),
        Some("") => Err(bad(format!("{method}: `session` must not be empty"))),
        Some(s) => Ok(s.to_string()),
    }
}

/// Validated `execute` parameters.
pub(crate) struct ExecParams {
    pub(crate) req: ExecuteRequest,
    pub(crate) session: String,
    pub(crate) stream: bool,
}

const EXECUTE_PARAMS: [&str; 8] = [
    "code", "session", "reset", "timeout", "mode", "tools", "cwd", "stream",
];

fn execute_params(params: &Value, known_tools: &ToolRegistry) -> Result<ExecParams, BadParams> {
    execute_params_for(params, known_tools, "execute", &EXECUTE_PARAMS)
}

/// Parses the parameters of a cell request named `method` (serve's
/// `execute`, MCP's `execute_code`), accepting only the keys in `accepted`.
/// The error is a message for the caller: what was wrong and what to pass.
pub(crate) fn cell_params(
    params: &Value,
    known_tools: &ToolRegistry,
    method: &str,
    accepted: &[&str],
) -> Result<ExecParams, String> {
    execute_params_for(params, known_tools, method, accepted).map_err(|BadParams(m)| m)
}

fn execute_params_for(
    params: &Value,
    known_tools: &ToolRegistry,
    method: &str,
    accepted: &[&str],
) -> Result<ExecParams, BadParams> {
    let p = params_object(params, method)?;
    // Misdirected calls first (SPEC §8): the most useful message wins.
    let code = match p.get("code") {
        None => {
            if p.contains_key("command") {
                return Err(bad(format!(
                    "{method} takes `code` (Python source), not `command`. To run a shell command, \
                     pass Python such as `print(terminal(\"ls -la\")[\"output\"])` or a line `!ls -la`."
                )));
            }
            return Err(bad(format!(
                "{method}: missing `code` (the Python source to run)"
            )));
        }
        Some(Value::String(s)) => s.clone(),
        Some(v) => {
            return Err(bad(format!(
                "{method}: `code` must be a string of Python source, got {}; put the program text in a string",
                type_name(v)
            )));
        }
    };
    if code.trim().is_empty() {
        return Err(bad(format!(
            "{method}: `code` is empty; pass the Python source to run"
        )));
    }
    check_known(p, method, accepted)?;
    let session = session_of(p, method)?;
    let mut req = ExecuteRequest::new(code).owner(session.clone());
    match p.get("reset") {
        None | Some(Value::Null) => {}
        Some(Value::Bool(b)) => req = req.reset(*b),
        Some(v) => {
            return Err(bad(format!(
                "{method}: `reset` must be a boolean, got {}",
                type_name(v)
            )));
        }
    }
    match p.get("timeout") {
        None | Some(Value::Null) => {}
        Some(v) => match v.as_f64() {
            Some(t) if t > 0.0 && t.is_finite() && t <= 1e9 => {
                req = req.timeout(Duration::from_secs_f64(t))
            }
            _ => {
                return Err(bad(format!(
                    "{method}: `timeout` must be a number of seconds > 0, got {v}"
                )));
            }
        },
    }
    match opt_str(p, "mode", method)? {
        None => {}
        Some("project") => req = req.mode(Mode::Project),
        Some("strict") => req = req.mode(Mode::Strict),
        Some(other) => {
            return Err(bad(format!(
                "{method}: `mode` must be \"project\" or \"strict\", got \"{other}\""
            )));
        }
    }
    match p.get("tools") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            let mut names = Vec::new();
            for t in a {
                let Some(name) = t.as_str() else {
                    return Err(bad(format!(
                        "{method}: `tools` must be an array of tool names, got an element that is {}",
                        type_name(t)
                    )));
                };
                if known_tools.get(name).is_none() {
                    return Err(bad(format!(
                        "{method}: unknown tool `{name}` in `tools`; known tools: {}",
                        known_tools.names().collect::<Vec<_>>().join(", ")
                    )));
                }
                names.push(name.to_string());
            }
            req = req.tools(names);
        }
        Some(v) => {
            return Err(bad(format!(
                "{method}: `tools` must be an array of tool names, got {}",
                type_name(v)
            )));
        }
    }
    if let Some(cwd) = opt_str(p, "cwd", method)? {
        let path = PathBuf::from(cwd);
        if !path.is_absolute() || !path.is_dir() {
            return Err(bad(format!(
                "{method}: `cwd` must be an absolute path to a directory, got \"{cwd}\""
            )));
        }
        req = req.cwd(path);
    }
    let stream = match p.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(bad(format!(
                "{method}: `stream` must be a boolean, got {}",
                type_name(v)
            )));
        }
    };
    Ok(ExecParams {
        req,
        session,
        stream,
    })
}

impl Service {
    /// Handles one parsed request; `None` for notifications.
    async fn call(
        self: &Arc<Self>,
        id: Option<Value>,
        method: &str,
        params: Value,
        out: &Out,
    ) -> Option<String> {
        let result: Result<Value, BadParams> = match method {
            "execute" => {
                match execute_params(&params, self.registry.tools()) {
                    Err(e) => Err(e),
                    Ok(ExecParams {
                        mut req,
                        session,
                        stream,
                    }) => {
                        if stream {
                            let tx = out.clone();
                            req = req.live(Arc::new(move |s: StreamKind, chunk: &str| {
                                let note = json!({
                                    "jsonrpc": "2.0",
                                    "method": "cell/output",
                                    "params": {"session": session, "stream": s.as_str(), "chunk": chunk}
                                });
                                // Never block the cell on a slow client: a
                                // full queue drops a live chunk (the result
                                // still carries the output).
                                let _ = tx.try_send(note.to_string());
                            }));
                        }
                        let r = self.registry.execute(req).await;
                        serde_json::to_value(&r).map_err(|e| bad(e.to_string()))
                    }
                }
            }
            "interrupt" => params_object(&params, "interrupt").and_then(|p| {
                check_known(p, "interrupt", &["session"])?;
                let s = session_of(p, "interrupt")?;
                let n = self.registry.interrupt(&s);
                Ok(json!({"session": s, "interrupted": n}))
            }),
            "sessions" => match params_object(&params, "sessions") {
                Ok(p) if p.is_empty() => Ok(json!({"sessions": self.registry.sessions()})),
                Ok(_) => Err(bad("sessions takes no parameters")),
                Err(e) => Err(e),
            },
            "shutdown_session" => match params_object(&params, "shutdown_session").and_then(|p| {
                check_known(p, "shutdown_session", &["session"])?;
                session_of(p, "shutdown_session")
            }) {
                Ok(s) => {
                    let n = self.registry.shutdown(&s).await;
                    Ok(json!({"session": s, "shut_down": n}))
                }
                Err(e) => Err(e),
            },
            "schema" => params_object(&params, "schema").and_then(|p| {
                check_known(p, "schema", &["format"])?;
                let format: SchemaFormat = opt_str(p, "format", "schema")?
                    .unwrap_or("openai")
                    .parse()
                    .map_err(|e: String| bad(format!("schema: {e}")))?;
                let tools = ToolRegistry::builtin()
                    .ok()
                    .and_then(|r| r.select(&self.config.tools.enabled).ok())
                    .unwrap_or_default();
                Ok(schema::execute_code_tool(
                    &tools,
                    &self.config.execute_code_options(),
                    format,
                ))
            }),
            "ping" if self.daemon.is_some() => Ok(json!({
                "pid": std::process::id(),
                "version": env!("CARGO_PKG_VERSION"),
                "sessions": self.registry.sessions().len(),
            })),
            "shutdown" if self.daemon.is_some() => {
                let n = self.registry.shutdown_all().await;
                if let Some(d) = &self.daemon {
                    d.stop.cancel();
                }
                Ok(json!({"stopped": true, "kernels_killed": n}))
            }
            other => {
                return id.map(|i| {
                    error(
                        &i,
                        code::METHOD_NOT_FOUND,
                        format!(
                            "unknown method `{other}`; methods: execute, interrupt, sessions, shutdown_session, schema"
                        ),
                    )
                });
            }
        };
        let id = id?;
        Some(match result {
            Ok(v) => response(&id, v),
            Err(BadParams(m)) => error(&id, code::INVALID_PARAMS, m),
        })
    }

    /// Handles one request object (already parsed). `None` when nothing is
    /// to be sent back (a notification).
    async fn handle_value(self: &Arc<Self>, msg: Value, out: &Out) -> Option<String> {
        let Value::Object(mut obj) = msg else {
            return Some(error(
                &Value::Null,
                code::INVALID_REQUEST,
                "a request must be a JSON object",
            ));
        };
        let id = obj.remove("id");
        let id_ok = matches!(
            id,
            None | Some(Value::Null | Value::Number(_) | Value::String(_))
        );
        let rid = id.clone().unwrap_or(Value::Null);
        if !id_ok {
            return Some(error(
                &Value::Null,
                code::INVALID_REQUEST,
                "`id` must be a string, a number or null",
            ));
        }
        if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Some(error(
                &rid,
                code::INVALID_REQUEST,
                "`jsonrpc` must be \"2.0\"",
            ));
        }
        let method = match obj.remove("method") {
            Some(Value::String(m)) => m,
            _ => {
                return Some(error(
                    &rid,
                    code::INVALID_REQUEST,
                    "`method` must be a string",
                ));
            }
        };
        let params = obj.remove("params").unwrap_or(Value::Null);
        if !matches!(params, Value::Null | Value::Object(_) | Value::Array(_)) {
            return Some(error(
                &rid,
                code::INVALID_REQUEST,
                "`params` must be an object or an array",
            ));
        }
        self.call(id, &method, params, out).await
    }

    /// Handles one line: a request, a notification or a batch.
    pub async fn handle_line(self: &Arc<Self>, line: &str, out: &Out) -> Option<String> {
        let msg: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                return Some(error(
                    &Value::Null,
                    code::PARSE,
                    format!("parse error: {e}"),
                ));
            }
        };
        match msg {
            Value::Array(items) => {
                if items.is_empty() {
                    return Some(error(
                        &Value::Null,
                        code::INVALID_REQUEST,
                        "an empty batch is not a request",
                    ));
                }
                let mut set = JoinSet::new();
                for (i, item) in items.into_iter().enumerate() {
                    let me = Arc::clone(self);
                    let out = out.clone();
                    set.spawn(async move { (i, me.handle_value(item, &out).await) });
                }
                let mut replies: Vec<(usize, String)> = Vec::new();
                while let Some(Ok((i, r))) = set.join_next().await {
                    if let Some(r) = r {
                        replies.push((i, r));
                    }
                }
                if replies.is_empty() {
                    return None;
                }
                replies.sort_by_key(|(i, _)| *i);
                Some(format!(
                    "[{}]",
                    replies
                        .into_iter()
                        .map(|(_, r)| r)
                        .collect::<Vec<_>>()
                        .join(",")
                ))
            }
            other => self.handle_value(other, out).await,
        }
    }
}

/// Serves one connection: reads lines from `input` until EOF, runs each
/// request concurrently, writes responses and notifications to `output`
/// one per line. Returns when input is exhausted and every request has
/// been answered.
pub async fn serve_connection<R, W>(service: Arc<Service>, input: R, output: W)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, mut rx) = mpsc::channel::<String>(1024);
    let writer = tokio::spawn(async move {
        let mut output = output;
        while let Some(line) = rx.recv().await {
            if output.write_all(line.as_bytes()).await.is_err()
                || output.write_all(b"\n").await.is_err()
                || output.flush().await.is_err()
            {
                // The client is gone; keep draining so senders never block.
                while rx.recv().await.is_some() {}
                return;
            }
        }
    });
    let mut reader = LineReader::new(input, MAX_LINE);
    let mut tasks = JoinSet::new();
    let mut tails: HashMap<String, oneshot::Receiver<()>> = HashMap::new();
    while let Some(line) = reader.next_line().await {
        let text = match line {
            Line::Text(text) => text,
            Line::TooLong => {
                let _ = tx
                    .send(error(
                        &Value::Null,
                        code::INVALID_REQUEST,
                        format!("request line longer than {MAX_LINE} bytes"),
                    ))
                    .await;
                continue;
            }
            Line::NotUtf8 => {
                let _ = tx
                    .send(error(
                        &Value::Null,
                        code::PARSE,
                        "parse error: the line is not valid UTF-8",
                    ))
                    .await;
                continue;
            }
        };
        if text.bytes().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        // Cells of one session must reach the registry in arrival order
        // (SPEC §4), but spawned tasks may start in any order: an execute
        // waits for the previous execute of its session to be answered.
        let order = execute_session(&text).map(|session| {
            if tails.len() > 64 {
                tails.retain(|_, rx| {
                    matches!(rx.try_recv(), Err(oneshot::error::TryRecvError::Empty))
                });
            }
            let (done, rx) = oneshot::channel::<()>();
            (tails.insert(session, rx), done)
        });
        let service = Arc::clone(&service);
        let tx = tx.clone();
        tasks.spawn(async move {
            let done = match order {
                Some((prev, done)) => {
                    if let Some(prev) = prev {
                        let _ = prev.await;
                    }
                    Some(done)
                }
                None => None,
            };
            if let Some(reply) = service.handle_line(&text, &tx).await {
                let _ = tx.send(reply).await;
            }
            // The next cell of the session may start (after this answer).
            drop(done);
        });
        // Reap finished tasks so the set stays small.
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    drop(tx);
    let _ = writer.await;
}

/// The session of a single `execute` request line (`"default"` when not
/// given); `None` for anything else (other methods, batches, bad input).
fn execute_session(line: &str) -> Option<String> {
    let Ok(Value::Object(msg)) = serde_json::from_str::<Value>(line) else {
        return None;
    };
    if msg.get("method").and_then(Value::as_str) != Some("execute") {
        return None;
    }
    match msg.get("params").and_then(|p| p.get("session")) {
        None | Some(Value::Null) => Some("default".to_string()),
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => None,
    }
}

/// Newline-delimited input, one line at a time, with a cap on line length:
/// tokio-util's [`LinesCodec`] (memchr search, `\r\n` accepted, UTF-8
/// checked) fed from `input`. A line over the cap is read to its end and
/// dropped, so memory stays O(cap) whatever a client sends.
pub(crate) struct LineReader<R> {
    input: R,
    codec: LinesCodec,
    buf: BytesMut,
    eof: bool,
}

/// One line of a [`LineReader`]'s input.
pub(crate) enum Line {
    /// The line without its `\n` or `\r\n`.
    Text(String),
    /// Longer than the cap; skipped.
    TooLong,
    /// Not valid UTF-8; skipped.
    NotUtf8,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    /// Reads `input` in 64 KiB chunks; lines longer than `max` bytes are
    /// [`Line::TooLong`].
    pub(crate) fn new(input: R, max: usize) -> Self {
        Self {
            input,
            codec: LinesCodec::new_with_max_length(max),
            buf: BytesMut::new(),
            eof: false,
        }
    }

    /// The next line; `None` at the end of input or on a read error. A last
    /// line without a newline is still a line.
    pub(crate) async fn next_line(&mut self) -> Option<Line> {
        loop {
            let decoded = if self.eof {
                self.codec.decode_eof(&mut self.buf)
            } else {
                self.codec.decode(&mut self.buf)
            };
            match decoded {
                Ok(Some(line)) => return Some(Line::Text(line)),
                Err(LinesCodecError::MaxLineLengthExceeded) => return Some(Line::TooLong),
                // The only I/O error decoding makes: the line is not UTF-8
                // (the codec has consumed it).
                Err(LinesCodecError::Io(_)) => return Some(Line::NotUtf8),
                Ok(None) if self.eof => return None,
                Ok(None) => {}
            }
            self.buf.reserve(64 * 1024);
            match self.input.read_buf(&mut self.buf).await {
                Ok(0) => self.eof = true,
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }
}
