//! Client tools: functions a `serve` (or daemon) client registers with
//! `tools/register` and cells call like any tool.
//!
//! A call from a cell becomes the server-to-client request `tool/call`
//! `{session, name, arguments, deadline_ms}` on the client's connection;
//! the client's response (matched by its string id) is the function's
//! return value, or its `error.message` raised as `ToolError`. When the
//! cell ends with a call unanswered (finished, timed out, interrupted,
//! reset), the call's future is dropped: the client gets the notification
//! `$/cancelRequest {id}` and a late answer is ignored.
//!
//! Bounds: at most [`MAX_CLIENT_TOOLS`] tools per connection, results up to
//! [`MAX_RESULT_BYTES`]; pending calls are bounded by the cells' budgets.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use toolcell_kernel::ExtraTools;
use toolcell_tools::BoxFuture;
use toolcell_tools::{DynTool, SchemaTool, ToolContext, ToolError, ToolRegistry};

/// Most tools one connection may have registered (all scopes together).
pub(crate) const MAX_CLIENT_TOOLS: usize = 1024;

/// Largest `tool/call` answer accepted (its JSON line), in bytes.
pub(crate) const MAX_RESULT_BYTES: usize = 16 * 1024 * 1024;

/// Largest schema (input or output) of one client tool, as JSON bytes: with
/// [`MAX_CLIENT_TOOLS`], what one connection can make the host hold stays
/// bounded.
pub(crate) const MAX_SCHEMA_BYTES: usize = 64 * 1024;

/// Most sessions whose tool sets are kept built between cells.
const MAX_CACHED: usize = 256;

type Answer = Result<Value, String>;

/// One connection's client tools and its calls waiting for answers.
pub(crate) struct Link {
    out: mpsc::Sender<String>,
    pending: Mutex<HashMap<String, oneshot::Sender<Answer>>>,
    next: AtomicU64,
    closed: AtomicBool,
    scopes: Mutex<Scopes>,
    /// Tool names cells may already call (enabled built-ins) and the
    /// Python names of MCP sources: a client tool may not take them.
    reserved: ToolRegistry,
    sources: Vec<String>,
    /// The host's redactor: a tool's description and schemas pass it
    /// before any schema, tool list or stub shows them.
    redactor: toolcell_redact::Redactor,
    me: Weak<Link>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Scopes {
    /// For every session of the connection.
    global: BTreeMap<String, Arc<SchemaTool>>,
    /// For one session each.
    sessions: HashMap<String, BTreeMap<String, Arc<SchemaTool>>>,
    generation: u64,
    /// Built sets by session, valid for `generation`.
    cache: HashMap<String, (u64, Option<Arc<ExtraTools>>)>,
}

impl Scopes {
    fn count(&self) -> usize {
        self.global.len() + self.sessions.values().map(BTreeMap::len).sum::<usize>()
    }

    /// The tools a session's cells see: its own, then the connection's
    /// (a session tool shadows a connection tool of the same name).
    fn visible(&self, session: &str) -> BTreeMap<String, Arc<SchemaTool>> {
        let mut all = self.global.clone();
        if let Some(own) = self.sessions.get(session) {
            for (k, v) in own {
                all.insert(k.clone(), Arc::clone(v));
            }
        }
        all
    }
}

fn str_field<'a>(o: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    o.get(key).and_then(Value::as_str)
}

impl Link {
    /// A link writing server-to-client messages to `out`. `reserved`: the
    /// tools cells already have (a client tool may not be named like one);
    /// `sources`: names of MCP servers (their submodules); `redactor`: the
    /// host's, for what the client's definitions say.
    pub(crate) fn new(
        out: mpsc::Sender<String>,
        reserved: ToolRegistry,
        sources: Vec<String>,
        redactor: toolcell_redact::Redactor,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            out,
            pending: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            closed: AtomicBool::new(false),
            scopes: Mutex::new(Scopes::default()),
            reserved,
            sources,
            redactor,
            me: me.clone(),
        })
    }

    fn scopes(&self) -> std::sync::MutexGuard<'_, Scopes> {
        self.scopes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<Answer>>> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `tools/register {tools: [{name, description?, input_schema,
    /// output_schema?}], session?}`: all or nothing. `Err` is the -32602
    /// message naming the tool and the problem.
    pub(crate) fn register(&self, params: &Map<String, Value>) -> Result<Value, String> {
        const M: &str = "tools/register";
        for k in params.keys() {
            if k != "tools" && k != "session" {
                return Err(format!(
                    "{M}: unknown parameter `{k}`; it takes `tools` and `session`"
                ));
            }
        }
        let session = session_param(params, M)?;
        let Some(Value::Array(list)) = params.get("tools") else {
            return Err(format!(
                "{M}: `tools` must be an array of {{name, description?, input_schema, output_schema?}}"
            ));
        };
        let mut batch: Vec<Arc<SchemaTool>> = Vec::with_capacity(list.len());
        for (i, t) in list.iter().enumerate() {
            let Value::Object(o) = t else {
                return Err(format!("{M}: tools[{i}] must be an object"));
            };
            let Some(name) = str_field(o, "name") else {
                return Err(format!("{M}: tools[{i}] needs a string `name`"));
            };
            for k in o.keys() {
                if !matches!(
                    k.as_str(),
                    "name" | "description" | "input_schema" | "output_schema"
                ) {
                    return Err(format!(
                        "{M}: tool `{name}`: unknown field `{k}`; a tool has name, description, input_schema, output_schema"
                    ));
                }
            }
            let description = match o.get("description") {
                None | Some(Value::Null) => "",
                Some(Value::String(s)) => s.as_str(),
                Some(_) => {
                    return Err(format!(
                        "{M}: tool `{name}`: `description` must be a string"
                    ));
                }
            };
            let Some(input) = o.get("input_schema") else {
                return Err(format!(
                    "{M}: tool `{name}`: missing `input_schema` (a JSON Schema object schema)"
                ));
            };
            for key in ["input_schema", "output_schema"] {
                let size = o.get(key).map_or(0, |v| v.to_string().len());
                if size > MAX_SCHEMA_BYTES {
                    return Err(format!(
                        "{M}: tool `{name}`: `{key}` is {size} bytes, over the limit of {MAX_SCHEMA_BYTES}"
                    ));
                }
            }
            let mut tool = SchemaTool::new(name, description, input.clone(), |_args, _cx| async {
                Err(ToolError::failed("a client tool runs in the client"))
            })
            .map_err(|e| format!("{M}: {e}"))?;
            match o.get("output_schema") {
                None | Some(Value::Null) => {}
                Some(out) => {
                    tool = tool
                        .with_output_schema(out.clone())
                        .map_err(|e| format!("{M}: {e}"))?;
                }
            }
            // The host's secrets never reach a schema, a tool list or a stub.
            let tool = tool
                .redacted(&self.redactor)
                .map_err(|e| format!("{M}: {e}"))?;
            batch.push(Arc::new(tool));
        }
        let mut scopes = self.scopes();
        // Check the scope as it would be: names, Python names, collisions
        // with the host's tools and sources.
        let existing: BTreeMap<String, Arc<SchemaTool>> = match &session {
            None => scopes.global.clone(),
            Some(s) => scopes.visible(s),
        };
        let replaced = batch
            .iter()
            .filter(|t| existing.contains_key(t.name()))
            .count();
        if scopes.count() + batch.len() - replaced > MAX_CLIENT_TOOLS {
            return Err(format!(
                "{M}: at most {MAX_CLIENT_TOOLS} client tools per connection; unregister some first"
            ));
        }
        let mut check = self.reserved.clone();
        for t in &batch {
            if self.reserved.get(t.name()).is_some() {
                return Err(format!(
                    "{M}: `{}` is already a tool of this host (enabled in [tools] enabled); choose another name",
                    t.name()
                ));
            }
            let names = toolcell_tools::names::top_level_names(t.name());
            for src in &self.sources {
                let modules = toolcell_tools::names::top_level_names(src);
                if let Some((language, ident)) = names.iter().find(|n| modules.contains(n)) {
                    return Err(format!(
                        "{M}: tool `{}` maps to the {language} name `{ident}`, which is the module of the MCP server `{src}`; choose another name",
                        t.name()
                    ));
                }
            }
            check
                .add(Arc::clone(t) as Arc<dyn DynTool>)
                .map_err(|e| format!("{M}: {e}"))?;
        }
        for (name, t) in &existing {
            if batch.iter().any(|b| b.name() == name) {
                continue;
            }
            check
                .add(Arc::clone(t) as Arc<dyn DynTool>)
                .map_err(|e| format!("{M}: {e}"))?;
        }
        let names: Vec<String> = batch.iter().map(|t| t.name().to_string()).collect();
        let scope = match &session {
            None => &mut scopes.global,
            Some(s) => scopes.sessions.entry(s.clone()).or_default(),
        };
        for t in batch {
            scope.insert(t.name().to_string(), t);
        }
        scopes.generation += 1;
        scopes.cache.clear();
        Ok(json!({ "registered": names }))
    }

    /// `tools/unregister {names, session?}`: removes those that are there
    /// (unknown names are ignored: unregistering twice is not an error).
    pub(crate) fn unregister(&self, params: &Map<String, Value>) -> Result<Value, String> {
        const M: &str = "tools/unregister";
        for k in params.keys() {
            if k != "names" && k != "session" {
                return Err(format!(
                    "{M}: unknown parameter `{k}`; it takes `names` and `session`"
                ));
            }
        }
        let session = session_param(params, M)?;
        let Some(Value::Array(list)) = params.get("names") else {
            return Err(format!("{M}: `names` must be an array of tool names"));
        };
        let mut names = Vec::with_capacity(list.len());
        for n in list {
            let Some(n) = n.as_str() else {
                return Err(format!("{M}: `names` must hold strings"));
            };
            names.push(n.to_string());
        }
        let mut scopes = self.scopes();
        let scope = match &session {
            None => Some(&mut scopes.global),
            Some(s) => scopes.sessions.get_mut(s),
        };
        let mut removed = Vec::new();
        if let Some(scope) = scope {
            for n in names {
                if scope.remove(&n).is_some() {
                    removed.push(n);
                }
            }
        }
        if let Some(s) = &session
            && scopes.sessions.get(s).is_some_and(BTreeMap::is_empty)
        {
            scopes.sessions.remove(s);
        }
        if !removed.is_empty() {
            scopes.generation += 1;
            scopes.cache.clear();
        }
        Ok(json!({ "unregistered": removed }))
    }

    /// Whether a tool called `name` is registered in any scope.
    pub(crate) fn is_registered(&self, name: &str) -> bool {
        let scopes = self.scopes();
        scopes.global.contains_key(name) || scopes.sessions.values().any(|s| s.contains_key(name))
    }

    /// The client tools a cell of `session` may call (`None`: none).
    pub(crate) fn tools_for(&self, session: &str) -> Option<Arc<ExtraTools>> {
        let mut scopes = self.scopes();
        let generation = scopes.generation;
        if let Some((g, set)) = scopes.cache.get(session)
            && *g == generation
        {
            return set.clone();
        }
        let visible = scopes.visible(session);
        let set = if visible.is_empty() {
            None
        } else {
            let tools: Vec<Arc<dyn DynTool>> = visible
                .into_values()
                .map(|def| {
                    Arc::new(ClientTool {
                        def,
                        session: session.to_string(),
                        link: self.me.clone(),
                    }) as Arc<dyn DynTool>
                })
                .collect();
            Some(Arc::new(ExtraTools::new(tools, generation)))
        };
        if scopes.cache.len() >= MAX_CACHED {
            scopes.cache.clear();
        }
        scopes
            .cache
            .insert(session.to_string(), (generation, set.clone()));
        set
    }

    /// Every client tool a session sees (for `schema`).
    pub(crate) fn definitions(&self, session: &str) -> Vec<Arc<dyn DynTool>> {
        self.tools_for(session)
            .map(|e| e.tools.clone())
            .unwrap_or_default()
    }

    /// Takes a message that is a response (no `method`, an `id`, and a
    /// `result` or an `error`). Returns `false` when it is not one.
    pub(crate) fn take_response(&self, msg: &Map<String, Value>, line_len: usize) -> bool {
        if msg.contains_key("method")
            || !msg.contains_key("id")
            || !(msg.contains_key("result") || msg.contains_key("error"))
        {
            return false;
        }
        let id = match msg.get("id") {
            Some(Value::String(s)) => s.clone(),
            other => {
                tracing::warn!(
                    "ignored a response whose id {} is not one this server sent (tool/call ids are strings)",
                    other.map_or_else(|| "null".to_string(), ToString::to_string)
                );
                return true;
            }
        };
        let Some(tx) = self.pending().remove(&id) else {
            tracing::warn!(
                "ignored a response to {id:?}: no tool/call with that id is waiting (never sent, already answered, or cancelled)"
            );
            return true;
        };
        let answer = match (msg.get("result"), msg.get("error")) {
            (Some(_), Some(_)) => Err(
                "the client's answer had both `result` and `error`; a JSON-RPC response has one of them"
                    .to_string(),
            ),
            _ if line_len > MAX_RESULT_BYTES => Err(format!(
                "the client's answer is {line_len} bytes, over the limit of {MAX_RESULT_BYTES} bytes for a tool result; return less (or write it to a file and return its path)"
            )),
            (Some(result), None) => Ok(result.clone()),
            (None, Some(Value::Object(e))) => match e.get("message").and_then(Value::as_str) {
                Some(m) => Err(m.to_string()),
                None => Err(format!(
                    "the client answered with an error without a string `message`: {}",
                    clip(&Value::Object(e.clone()).to_string())
                )),
            },
            (None, Some(other)) => Err(format!(
                "the client answered with an `error` that is not an object {{code, message}}: {}",
                clip(&other.to_string())
            )),
            (None, None) => Err("the client's answer had neither `result` nor `error`".into()),
        };
        let _ = tx.send(answer);
        true
    }

    /// The client is gone: calls waiting fail now, later ones at once.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let waiting: Vec<_> = self.pending().drain().collect();
        for (_, tx) in waiting {
            let _ = tx.send(Err(
                "the client that registered this tool disconnected before answering".into(),
            ));
        }
    }

    async fn call(
        self: Arc<Self>,
        session: String,
        name: String,
        args: Value,
        cx: ToolContext,
    ) -> Result<Value, ToolError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(ToolError::failed(format!(
                "the client that registered `{name}` has disconnected"
            )));
        }
        let id = format!("toolcell-{}", self.next.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        self.pending().insert(id.clone(), tx);
        let mut waiting = Waiting {
            link: Arc::clone(&self),
            id: Some(id.clone()),
        };
        // The client's deadline comes a little before the cell's, so that a
        // client that never answers gives the cell a ToolError it can still
        // handle, rather than a cell killed mid-call.
        let left = cx
            .deadline()
            .saturating_duration_since(tokio::time::Instant::now());
        let margin = (left / 10).min(std::time::Duration::from_secs(1));
        let cutoff = cx.deadline() - margin;
        let deadline_ms = u64::try_from((left - margin).as_millis()).unwrap_or(u64::MAX);
        let msg = json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": "tool/call",
            "params": {"session": session, "name": name, "arguments": args, "deadline_ms": deadline_ms}
        });
        if self.out.send(msg.to_string()).await.is_err() {
            return Err(ToolError::failed(format!(
                "the client that registered `{name}` has disconnected"
            )));
        }
        let Ok(answer) = tokio::time::timeout_at(cutoff, rx).await else {
            // `waiting` tells the client to stop.
            return Err(ToolError::failed(format!(
                "the client did not answer `{name}` within its deadline ({deadline_ms} ms, the time left in the cell); the call was cancelled and its outcome is unknown"
            )));
        };
        waiting.id = None;
        match answer {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(m)) => Err(ToolError::failed(m)),
            Err(_) => Err(ToolError::failed(format!(
                "the client that registered `{name}` disconnected before answering"
            ))),
        }
    }
}

fn clip(s: &str) -> String {
    if s.len() <= 200 {
        return s.to_string();
    }
    let mut end = 200;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

fn session_param(p: &Map<String, Value>, method: &str) -> Result<Option<String>, String> {
    match p.get("session") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        Some(_) => Err(format!("{method}: `session` must be a non-empty string")),
    }
}

/// A call waiting for its answer; dropped unanswered (the cell ended), it
/// tells the client with `$/cancelRequest`.
struct Waiting {
    link: Arc<Link>,
    id: Option<String>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(id) = self.id.take()
            && self.link.pending().remove(&id).is_some()
        {
            let note = json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": id}});
            // Never block in drop: a full queue means a client that reads
            // nothing, which a lost notice does not harm further.
            let _ = self.link.out.try_send(note.to_string());
        }
    }
}

/// A registered tool as a session's cells see it.
struct ClientTool {
    def: Arc<SchemaTool>,
    session: String,
    link: Weak<Link>,
}

impl DynTool for ClientTool {
    fn name(&self) -> &str {
        self.def.name()
    }
    fn doc(&self) -> &str {
        self.def.doc()
    }
    fn args_schema(&self) -> Value {
        self.def.args_schema()
    }
    fn output_schema(&self) -> Value {
        self.def.output_schema()
    }
    fn blocked_params(&self) -> &[&'static str] {
        &[]
    }
    fn validate(&self, args: &Value) -> Result<(), String> {
        self.def.validate(args)
    }
    fn call(&self, args: Value, cx: ToolContext) -> BoxFuture<'static, Result<Value, ToolError>> {
        let name = self.def.name().to_string();
        let session = self.session.clone();
        match self.link.upgrade() {
            Some(link) => Box::pin(link.call(session, name, args, cx)),
            None => Box::pin(async move {
                Err(ToolError::failed(format!(
                    "the client that registered `{name}` has disconnected"
                )))
            }),
        }
    }
}
