//! The JSON-RPC 2.0 methods of docs/serve.md, shared by `toolcell serve`
//! (stdio) and the daemon (one Unix socket connection per client).
//!
//! One message per line in, one per line out. Each line is parsed once;
//! requests run concurrently (each in its own task) and responses may come
//! out of order; a single writer task keeps every line whole.
//!
//! Per connection: at most [`MAX_IN_FLIGHT`] requests at once (past that,
//! -32000); the `execute` and `shutdown_session` requests of one session
//! (batch entries included) take effect in arrival order; the notification
//! `$/cancelRequest {id}` cancels one request (-32800 when its cell never
//! ran, an interrupt when it runs); what EOF does is [`AtEof`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::codec::{Decoder, LinesCodec, LinesCodecError};
use tokio_util::sync::CancellationToken;
use toolcell_host::config::Config;
use toolcell_host::{ExecuteRequest, Registry};
use toolcell_kernel::StreamKind;
use toolcell_tools::ToolRegistry;

use crate::client_tools::Link;
use toolcell_stubs::{Mode, SchemaFormat};

/// Longest accepted request line.
pub(crate) const MAX_LINE: usize = 64 * 1024 * 1024;

/// Most requests in flight (received, not yet answered) on one connection.
pub(crate) const MAX_IN_FLIGHT: usize = 1024;

/// JSON-RPC error codes.
pub(crate) mod code {
    /// Not JSON.
    pub(crate) const PARSE: i64 = -32700;
    /// Not a valid request object.
    pub(crate) const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
    /// Bad parameters.
    pub(crate) const INVALID_PARAMS: i64 = -32602;
    /// Too many requests in flight on the connection.
    pub(crate) const TOO_MANY_IN_FLIGHT: i64 = -32000;
    /// The client cancelled the request (`$/cancelRequest`) before it ran.
    pub(crate) const REQUEST_CANCELLED: i64 = -32800;
}

/// What a connection does when its input ends.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AtEof {
    /// Answer every request in flight, letting running cells finish: a
    /// daemon client that leaves stops nothing.
    Finish,
    /// `toolcell serve`: interrupt the running cells (each is answered
    /// `interrupted`) and answer queued ones without running them. Requests
    /// still unanswered after `grace` are given up: every kernel is killed.
    Abort {
        /// How long answers may take (`interrupt_grace + kill_grace`).
        grace: Duration,
    },
}

/// Cancellation of one request: by `$/cancelRequest`, or by EOF in
/// [`AtEof::Abort`] (the token is a child of the connection's).
struct Cancel {
    token: CancellationToken,
    by_client: AtomicBool,
}

impl Cancel {
    fn by_client(&self) -> bool {
        self.by_client.load(Ordering::SeqCst)
    }
}

/// What the methods need.
pub(crate) struct Service {
    /// The kernels.
    pub registry: Arc<Registry>,
    /// The configuration (for `schema`).
    pub config: Config,
    /// Extra methods only the daemon offers (`ping`, `shutdown`).
    pub daemon: Option<DaemonHooks>,
}

/// Daemon-only behaviour.
pub(crate) struct DaemonHooks {
    /// Fires to stop the daemon.
    pub stop: tokio_util::sync::CancellationToken,
    /// What the daemon was started from (binary, configuration), for
    /// `ping`: a client started from something else replaces it.
    pub started_from: Value,
}

type Out = mpsc::Sender<String>;

fn response(id: &Value, result: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
}

/// [`response`] of a result already serialized (`result` is JSON text).
fn response_text(id: &Value, result: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#)
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

const EXECUTE_PARAMS: [&str; 10] = [
    "code", "session", "reset", "timeout", "mode", "language", "tools", "cwd", "stream", "remote",
];

fn execute_params(
    params: &Value,
    known_tools: &ToolRegistry,
    link: &Link,
) -> Result<ExecParams, BadParams> {
    execute_params_for(
        params,
        known_tools,
        &|n| n.contains('.') || link.is_registered(n),
        "execute",
        &EXECUTE_PARAMS,
    )
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
    execute_params_for(params, known_tools, &|n| n.contains('.'), method, accepted)
        .map_err(|BadParams(m)| m)
}

fn execute_params_for(
    params: &Value,
    known_tools: &ToolRegistry,
    outside: &dyn Fn(&str) -> bool,
    method: &str,
    accepted: &[&str],
) -> Result<ExecParams, BadParams> {
    let p = params_object(params, method)?;
    // Misdirected calls first (docs/serve.md, "execute"): the most useful
    // message wins.
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
    if let Some(l) = opt_str(p, "language", method)? {
        match toolcell_kernel::Language::parse(l) {
            Ok(l) => req = req.language(l),
            Err(e) => return Err(bad(format!("{method}: {e}"))),
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
                // Outside tools (a client's, `SERVER.tool`, `SERVER.*`) are
                // checked when the cell is admitted, against what is there.
                if known_tools.get(name).is_none() && !outside(name) {
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
    if let Some(remote) = opt_str(p, "remote", method)? {
        if !remote.is_empty() && !toolcell_kernel::remote::valid_name(remote) {
            return Err(bad(format!(
                "{method}: `remote` must be \"\" (here) or the name of a [remotes.NAME] table, got \"{remote}\""
            )));
        }
        req = req.remote(remote);
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
        cancel: &Cancel,
        link: &Arc<Link>,
    ) -> Option<String> {
        let result: Result<Value, BadParams> = match method {
            "tools/register" => {
                params_object(&params, "tools/register").and_then(|p| link.register(p).map_err(bad))
            }
            "tools/unregister" => params_object(&params, "tools/unregister")
                .and_then(|p| link.unregister(p).map_err(bad)),
            "execute" => {
                match execute_params(&params, self.registry.tools(), link) {
                    Err(e) => Err(e),
                    Ok(ExecParams {
                        mut req,
                        session,
                        stream,
                    }) => {
                        if let Some(extra) = link.tools_for(&session) {
                            req = req.extra_tools(extra);
                        }
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
                        let mut r = self
                            .registry
                            .execute(req.cancel(cancel.token.clone()))
                            .await;
                        if r.not_started() && cancel.token.is_cancelled() {
                            if cancel.by_client() {
                                return id.map(|i| cancelled_error(&i, "execute"));
                            }
                            r.error = Some(
                                "the client's input ended (EOF) before the cell started; none of its code ran"
                                    .into(),
                            );
                        }
                        // The daemon answers one-shot commands: a
                        // `toolcell history` right after `exec --session`
                        // must find the cell, so its row is written first
                        // (the flush cuts the journal's batch wait short).
                        if self.daemon.is_some()
                            && let Some(j) = &self.registry.options().journal
                        {
                            let j = j.clone();
                            let _ = tokio::task::spawn_blocking(move || {
                                j.flush(Duration::from_secs(2))
                            })
                            .await;
                        }
                        // Straight to text: the result is the biggest
                        // answer there is, sent once per cell.
                        match serde_json::to_string(&r) {
                            Ok(body) => return id.map(|i| response_text(&i, &body)),
                            Err(e) => Err(bad(e.to_string())),
                        }
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
            "schema" => match params_object(&params, "schema").and_then(|p| {
                check_known(p, "schema", &["format", "session"])?;
                let format: SchemaFormat = opt_str(p, "format", "schema")?
                    .unwrap_or("openai")
                    .parse()
                    .map_err(|e: String| bad(format!("schema: {e}")))?;
                Ok((format, session_of(p, "schema")?))
            }) {
                Err(e) => Err(e),
                Ok((format, session)) => {
                    // Every source a session's cells have: the enabled
                    // built-ins, the client's tools, the MCP servers'.
                    let mut tools = self
                        .registry
                        .tools()
                        .select(&self.config.tools.enabled)
                        .unwrap_or_default();
                    tools.extend(link.definitions(&session));
                    tools.extend(self.registry.source_tools().await.tools);
                    Ok(toolcell_stubs::execute_code_tool(
                        &tools,
                        &self.config.execute_code_options(),
                        format,
                    ))
                }
            },
            "ping" if self.daemon.is_some() => Ok(json!({
                "pid": std::process::id(),
                "version": env!("CARGO_PKG_VERSION"),
                "sessions": self.registry.sessions().len(),
                "started_from": self.daemon.as_ref().map(|d| d.started_from.clone()),
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
}

/// The -32800 answer of a request cancelled before it ran.
fn cancelled_error(id: &Value, method: &str) -> String {
    error(
        id,
        code::REQUEST_CANCELLED,
        format!("{method} cancelled by $/cancelRequest before it ran; nothing of it ran"),
    )
}

/// A request whose envelope is valid.
struct Envelope {
    id: Option<Value>,
    method: String,
    params: Value,
}

/// Checks a message's envelope; `Err` is the error to send back.
fn envelope(msg: Value) -> Result<Envelope, String> {
    let Value::Object(mut obj) = msg else {
        return Err(error(
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
        return Err(error(
            &Value::Null,
            code::INVALID_REQUEST,
            "`id` must be a string, a number or null",
        ));
    }
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(error(
            &rid,
            code::INVALID_REQUEST,
            "`jsonrpc` must be \"2.0\"",
        ));
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        _ => {
            return Err(error(
                &rid,
                code::INVALID_REQUEST,
                "`method` must be a string",
            ));
        }
    };
    let params = obj.remove("params").unwrap_or(Value::Null);
    if !matches!(params, Value::Null | Value::Object(_) | Value::Array(_)) {
        return Err(error(
            &rid,
            code::INVALID_REQUEST,
            "`params` must be an object or an array",
        ));
    }
    Ok(Envelope { id, method, params })
}

/// The session whose order a request keeps: `execute` and
/// `shutdown_session` (`"default"` when not given); `None` for other
/// methods and for a `session` that is not a string (a params error).
fn ordered_session(method: &str, params: &Value) -> Option<String> {
    if method != "execute" && method != "shutdown_session" {
        return None;
    }
    match params.get("session") {
        None | Some(Value::Null) => Some("default".to_string()),
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => None,
    }
}

/// Bookkeeping shared by a connection's reader and its requests.
#[derive(Default)]
struct Flight {
    /// Requests received and not yet answered.
    count: usize,
    /// Cancellation of the requests in flight, by id (`id.to_string()`),
    /// with how many requests in flight carry that id.
    by_id: HashMap<String, (Arc<Cancel>, usize)>,
}

type Shared = Arc<Mutex<Flight>>;

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Flight> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A request's place in flight; dropping it (after the answer) frees it.
struct InFlight {
    shared: Shared,
    key: Option<String>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut f = lock(&self.shared);
        f.count = f.count.saturating_sub(1);
        if let Some(k) = &self.key
            && let Some(entry) = f.by_id.get_mut(k)
        {
            entry.1 -= 1;
            if entry.1 == 0 {
                f.by_id.remove(k);
            }
        }
    }
}

/// A request's turn among its session's ordered requests: it waits for
/// `prev` (the previous one's answer); dropping `done` lets the next go.
struct Turn {
    prev: Option<oneshot::Receiver<()>>,
    done: oneshot::Sender<()>,
}

/// An admitted request, ready to run.
struct Job {
    env: Envelope,
    cancel: Arc<Cancel>,
    turn: Option<Turn>,
    place: InFlight,
}

/// What is left to drop once a job's answer is sent.
struct Release {
    _done: Option<oneshot::Sender<()>>,
    _place: InFlight,
}

/// What became of one message.
enum Entry {
    /// Answered at once (or nothing to answer).
    Done(Option<String>),
    /// To run.
    Run(Box<Job>),
}

/// One connection's state.
struct Conn {
    service: Arc<Service>,
    out: Out,
    /// The client's tools and its unanswered `tool/call`s.
    link: Arc<Link>,
    shared: Shared,
    /// Cancelled at EOF in [`AtEof::Abort`]; every request's token is its child.
    eof: CancellationToken,
}

impl Conn {
    /// Admits one parsed message: envelope checks, `$/cancelRequest`, the
    /// in-flight limit, the session turn (`tails`: each ordered session's
    /// last request).
    fn admit(&self, msg: Value, tails: &mut HashMap<String, oneshot::Receiver<()>>) -> Entry {
        let env = match envelope(msg) {
            Ok(e) => e,
            Err(reply) => return Entry::Done(Some(reply)),
        };
        if env.method == "$/cancelRequest" {
            return Entry::Done(self.cancel_request(env));
        }
        let key = env.id.as_ref().map(Value::to_string);
        let cancel = {
            let mut f = lock(&self.shared);
            if f.count >= MAX_IN_FLIGHT {
                drop(f);
                let Some(id) = env.id else {
                    tracing::warn!(
                        method = %env.method,
                        "dropped a notification: {MAX_IN_FLIGHT} requests already in flight"
                    );
                    return Entry::Done(None);
                };
                return Entry::Done(Some(error(
                    &id,
                    code::TOO_MANY_IN_FLIGHT,
                    format!(
                        "too many requests in flight on this connection (at most \
                         {MAX_IN_FLIGHT}); wait for answers before sending more"
                    ),
                )));
            }
            f.count += 1;
            let fresh = || {
                Arc::new(Cancel {
                    token: self.eof.child_token(),
                    by_client: AtomicBool::new(false),
                })
            };
            match &key {
                Some(k) => {
                    let entry = f.by_id.entry(k.clone()).or_insert_with(|| (fresh(), 0));
                    entry.1 += 1;
                    Arc::clone(&entry.0)
                }
                None => fresh(),
            }
        };
        let turn = ordered_session(&env.method, &env.params).map(|session| {
            if tails.len() > 64 {
                tails.retain(|_, rx| {
                    matches!(rx.try_recv(), Err(oneshot::error::TryRecvError::Empty))
                });
            }
            let (done, rx) = oneshot::channel::<()>();
            Turn {
                prev: tails.insert(session, rx),
                done,
            }
        });
        Entry::Run(Box::new(Job {
            env,
            cancel,
            turn,
            place: InFlight {
                shared: Arc::clone(&self.shared),
                key,
            },
        }))
    }

    /// `$/cancelRequest {id}`: cancels the requests in flight with that id
    /// (unknown or finished ids are ignored, as LSP says). Answers only when
    /// it was sent as a request.
    fn cancel_request(&self, env: Envelope) -> Option<String> {
        let target = match &env.params {
            Value::Object(p) => match p.get("id") {
                Some(id @ (Value::String(_) | Value::Number(_))) => Some(id.to_string()),
                _ => None,
            },
            _ => None,
        };
        let Some(target) = target else {
            tracing::debug!("$/cancelRequest without a string or number `id`");
            return env.id.map(|i| {
                error(
                    &i,
                    code::INVALID_PARAMS,
                    "$/cancelRequest: params must be {\"id\": <the request's id>}",
                )
            });
        };
        let found = lock(&self.shared)
            .by_id
            .get(&target)
            .map(|e| Arc::clone(&e.0));
        if let Some(c) = &found {
            c.by_client.store(true, Ordering::SeqCst);
            c.token.cancel();
        }
        env.id
            .map(|i| response(&i, json!({"cancelled": found.is_some()})))
    }
}

impl Job {
    /// Waits for the request's turn, runs it, and returns its answer and
    /// what to drop once that answer is sent.
    async fn run(self, conn: &Conn) -> (Option<String>, Release) {
        let Job {
            env,
            cancel,
            turn,
            place,
        } = self;
        let mut done = None;
        if let Some(Turn { prev, done: d }) = turn {
            if let Some(mut prev) = prev {
                tokio::select! {
                    biased;
                    _ = &mut prev => {}
                    () = cancel.token.cancelled(), if !conn.eof.is_cancelled() => {
                        if cancel.by_client() {
                            // Answered now, never run; the session's next
                            // request still waits for the one before this.
                            tokio::spawn(async move {
                                let _ = prev.await;
                                drop(d);
                            });
                            let reply = env.id.map(|i| cancelled_error(&i, &env.method));
                            return (reply, Release { _done: None, _place: place });
                        }
                        // EOF: the request before is being interrupted;
                        // this one follows it and comes back unrun.
                        let _ = prev.await;
                    }
                }
            }
            done = Some(d);
        }
        let reply = conn
            .service
            .call(
                env.id,
                &env.method,
                env.params,
                &conn.out,
                &cancel,
                &conn.link,
            )
            .await;
        (
            reply,
            Release {
                _done: done,
                _place: place,
            },
        )
    }
}

/// Serves one connection: reads lines from `input` until EOF, runs each
/// request concurrently, writes responses and notifications to `output`
/// one per line. Returns once every request has been answered (or, in
/// [`AtEof::Abort`], given up).
pub(crate) async fn serve_connection<R, W>(
    service: Arc<Service>,
    input: R,
    output: W,
    at_eof: AtEof,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<String>(1024);
    let writer = tokio::spawn(write_lines(output, rx));
    let link = Link::new(
        tx.clone(),
        reserved_tools(&service),
        service.config.mcp_server_names(),
        service.registry.redactor().clone(),
    );
    let conn = Arc::new(Conn {
        service,
        link: Arc::clone(&link),
        out: tx.clone(),
        shared: Shared::default(),
        eof: CancellationToken::new(),
    });
    let mut reader = LineReader::new(input, MAX_LINE);
    let mut tasks = JoinSet::new();
    let mut tails: HashMap<String, oneshot::Receiver<()>> = HashMap::new();
    while let Some(line) = reader.next_line().await {
        let Some((text, msg)) = parse_line(line, &tx).await else {
            continue;
        };
        match msg {
            Value::Array(items) => {
                if items.is_empty() {
                    let _ = tx
                        .send(error(
                            &Value::Null,
                            code::INVALID_REQUEST,
                            "an empty batch is not a request",
                        ))
                        .await;
                    continue;
                }
                // Answers to our `tool/call`s are taken out; the rest are
                // admitted in order, so entries keep their session's order.
                let entries: Vec<Entry> = items
                    .into_iter()
                    .filter(|item| !matches!(item, Value::Object(o) if link.take_response(o, text.len())))
                    .map(|item| conn.admit(item, &mut tails))
                    .collect();
                if entries.is_empty() {
                    continue;
                }
                tasks.spawn(answer_batch(Arc::clone(&conn), tx.clone(), entries));
            }
            Value::Object(ref o) if link.take_response(o, text.len()) => {}
            other => match conn.admit(other, &mut tails) {
                Entry::Done(Some(reply)) => {
                    let _ = tx.send(reply).await;
                }
                Entry::Done(None) => {}
                Entry::Run(job) => {
                    let conn = Arc::clone(&conn);
                    let tx = tx.clone();
                    tasks.spawn(async move {
                        let (reply, release) = job.run(&conn).await;
                        if let Some(reply) = reply {
                            let _ = tx.send(reply).await;
                        }
                        // The session's next request may start (after this answer).
                        drop(release);
                    });
                }
            },
        }
        // Reap finished tasks so the set stays small.
        while tasks.try_join_next().is_some() {}
    }
    // Nobody will answer a `tool/call` any more.
    link.close();
    finish(conn, tasks, at_eof).await;
    // The link holds a sender too: the writer ends when every one is gone.
    drop(link);
    drop(tx);
    match at_eof {
        AtEof::Finish => {
            let _ = writer.await;
        }
        AtEof::Abort { .. } => {
            // Every answer is queued; a stuck stdout must not keep us alive.
            let _ = tokio::time::timeout(Duration::from_millis(500), writer).await;
        }
    }
}

/// Writes each queued line to `output`, one write per line (a client
/// reading lines wakes once); once the client is gone, keeps draining so
/// senders never block.
async fn write_lines<W>(mut output: W, mut rx: mpsc::Receiver<String>)
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    while let Some(mut line) = rx.recv().await {
        line.push('\n');
        if output.write_all(line.as_bytes()).await.is_err() || output.flush().await.is_err() {
            while rx.recv().await.is_some() {}
            return;
        }
    }
}

/// The configured tools, whose names a client's own tools may not take.
fn reserved_tools(service: &Service) -> ToolRegistry {
    let mut r = ToolRegistry::empty();
    for t in service
        .registry
        .tools()
        .select(&service.config.tools.enabled)
        .unwrap_or_default()
    {
        let _ = r.add(t);
    }
    r
}

/// The one parse of a request line: its text and JSON, or `None` after
/// answering a line that is too long, not UTF-8 or not JSON (a blank line
/// is skipped without an answer).
async fn parse_line(line: Line, tx: &mpsc::Sender<String>) -> Option<(String, Value)> {
    let refusal = match line {
        Line::Text(text) => {
            if text.bytes().all(|b| b.is_ascii_whitespace()) {
                return None;
            }
            match serde_json::from_str(&text) {
                Ok(v) => return Some((text, v)),
                Err(e) => error(&Value::Null, code::PARSE, format!("parse error: {e}")),
            }
        }
        Line::TooLong => error(
            &Value::Null,
            code::INVALID_REQUEST,
            format!("request line longer than {MAX_LINE} bytes"),
        ),
        Line::NotUtf8 => error(
            &Value::Null,
            code::PARSE,
            "parse error: the line is not valid UTF-8",
        ),
    };
    let _ = tx.send(refusal).await;
    None
}

/// Runs a batch's entries concurrently and sends their answers as one
/// array, in the batch's order.
async fn answer_batch(conn: Arc<Conn>, tx: mpsc::Sender<String>, entries: Vec<Entry>) {
    let mut replies: Vec<Option<String>> = Vec::with_capacity(entries.len());
    let mut set = JoinSet::new();
    for (i, entry) in entries.into_iter().enumerate() {
        match entry {
            Entry::Done(r) => replies.push(r),
            Entry::Run(job) => {
                replies.push(None);
                let conn = Arc::clone(&conn);
                set.spawn(async move {
                    // The entry's release (its session's next request may
                    // start) comes with its answer, not the whole batch's.
                    let (r, _release) = job.run(&conn).await;
                    (i, r)
                });
            }
        }
    }
    while let Some(joined) = set.join_next().await {
        if let Ok((i, r)) = joined {
            replies[i] = r;
        }
    }
    let parts: Vec<String> = replies.into_iter().flatten().collect();
    if !parts.is_empty() {
        let _ = tx.send(format!("[{}]", parts.join(","))).await;
    }
}

/// After EOF: waits for every request (`Finish`), or gives them `grace`
/// and then kills every kernel (`Abort`).
async fn finish(conn: Arc<Conn>, mut tasks: JoinSet<()>, at_eof: AtEof) {
    match at_eof {
        AtEof::Finish => while tasks.join_next().await.is_some() {},
        AtEof::Abort { grace } => {
            conn.eof.cancel();
            let answered = async { while tasks.join_next().await.is_some() {} };
            if tokio::time::timeout(grace, answered).await.is_err() {
                tracing::warn!(
                    "requests still unanswered {grace:?} after EOF; killing every kernel"
                );
                conn.service.registry.shutdown_all().await;
                let answered = async { while tasks.join_next().await.is_some() {} };
                if tokio::time::timeout(Duration::from_millis(500), answered)
                    .await
                    .is_err()
                {
                    tasks.abort_all();
                }
            }
        }
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
