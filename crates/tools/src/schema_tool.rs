//! Tools defined at run time from a JSON Schema and an async handler.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use serde_json::{Value, json};
use toolcell_redact::Redactor;
use toolcell_rpc::BoxFuture;

use crate::registry::RegistryError;
use crate::schema;
use crate::screen;
use crate::tool::{DynTool, ToolContext, ToolError};

type Handler =
    Arc<dyn Fn(Value, ToolContext) -> BoxFuture<'static, Result<Value, ToolError>> + Send + Sync>;

/// The longest `bad_args` message, in bytes.
const MAX_PROBLEM: usize = 1000;
/// The longest rendering of an offending value inside a message, in chars.
const MAX_VALUE: usize = 80;

/// A tool whose shape is known at run time: a name, a description, an input
/// JSON Schema (draft 2020-12 or draft-07; `$ref` into `$defs` or
/// `definitions` resolved), an optional output schema and an async handler.
///
/// It goes through the same registry, dispatcher and checks as a built-in
/// tool: arguments are validated against the input schema on the host before
/// the handler runs (a violation is `bad_args` naming the JSON pointer of the
/// offending value, and spends no budget), and its stub function's
/// signature, type hints and docstring come from the schemas.
///
/// ```
/// use serde_json::{Value, json};
/// use std::sync::Arc;
/// use toolcell_tools::{SchemaTool, ToolError, ToolRegistry};
///
/// let lookup = SchemaTool::new(
///     "get-user",
///     "Look a user up by id.",
///     json!({
///         "type": "object",
///         "properties": {
///             "id": {"type": "integer", "description": "The user's id."},
///             "from": {"type": "string", "description": "Which directory."}
///         },
///         "required": ["id"]
///     }),
///     |args: Value, _cx| async move {
///         let id = args["id"].as_i64().ok_or_else(|| ToolError::failed("no id"))?;
///         Ok(json!({"id": id, "name": format!("user {id}")}))
///     },
/// )?
/// .with_output_schema(json!({
///     "type": "object",
///     "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}
/// }))?;
///
/// let mut registry = ToolRegistry::builtin()?;
/// registry.add(Arc::new(lookup))?;
/// let tool = registry.get("get-user").expect("registered");
///
/// // Arguments are checked against the schema; the message names the value.
/// let err = tool.validate(&json!({"id": "x"})).unwrap_err();
/// assert_eq!(err, r#"/id: "x" is not of type "integer""#);
///
/// // In Python: a mapped name, `from` → `from_`, the original keys sent.
/// let module = toolcell_stubs::python::stub_module(&registry.select(&["get-user"])?)?;
/// assert!(module.contains(
///     "def get_user(id: int, from_: Optional[str] = None) -> Dict[str, Any]:"
/// ));
/// assert!(module.contains(r#"_args["from"] = from_"#));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct SchemaTool {
    name: String,
    doc: String,
    input: Value,
    output: Option<Value>,
    validator: jsonschema::Validator,
    handler: Handler,
    namespace: Option<String>,
}

impl fmt::Debug for SchemaTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchemaTool")
            .field("name", &self.name)
            .field("input", &self.input)
            .field("output", &self.output)
            .finish_non_exhaustive()
    }
}

fn bad_schema(tool: &str, problem: impl Into<String>) -> RegistryError {
    RegistryError::BadSchema {
        tool: tool.to_string(),
        problem: truncate(problem.into(), MAX_PROBLEM),
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// Compiles `schema`, which must be a valid JSON Schema; `what` names it in
/// errors.
fn compile(tool: &str, what: &str, schema: &Value) -> Result<jsonschema::Validator, RegistryError> {
    jsonschema::validator_for(schema)
        .map_err(|e| bad_schema(tool, format!("{what} is not a valid JSON Schema: {e}")))
}

impl SchemaTool {
    /// A tool called `name` (any name: one that is not a Python identifier
    /// is mapped in the stub, `get-user` → `get_user`), described by
    /// `description`, taking arguments that `input_schema` accepts, run by
    /// `handler`.
    ///
    /// # Errors
    /// [`RegistryError::BadSchema`] naming the tool and the problem when
    /// `input_schema` is not an object schema (`"type": "object"`), not a
    /// valid JSON Schema, refers to anything outside itself, or has two
    /// properties that map to one Python parameter name (`from` and
    /// `from_`).
    pub fn new<F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
        handler: F,
    ) -> Result<Self, RegistryError>
    where
        F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        let name = name.into();
        if !input_schema.is_object() {
            return Err(bad_schema(
                &name,
                "the input schema must be a JSON object schema ({\"type\": \"object\", …})",
            ));
        }
        let validator = compile(&name, "the input schema", &input_schema)?;
        let root = schema::resolve(&input_schema, &input_schema);
        if root.get("type").and_then(Value::as_str) != Some("object") {
            return Err(bad_schema(
                &name,
                format!(
                    "the input schema must be an object schema (\"type\": \"object\"), not {}",
                    truncate(
                        root.get("type")
                            .map_or_else(|| "a schema without a type".into(), Value::to_string),
                        MAX_VALUE
                    )
                ),
            ));
        }
        screen::check_params(&name, &schema::params_of(&input_schema))
            .map_err(|e| bad_schema(&name, e.to_string()))?;
        let handler: Handler = Arc::new(move |args, cx| Box::pin(handler(args, cx)));
        Ok(Self {
            name,
            doc: description.into(),
            input: input_schema,
            output: None,
            validator,
            handler,
            namespace: None,
        })
    }

    /// Puts the tool in the submodule `toolcell_tools.NAMESPACE` (the way an
    /// MCP server's tools are): its name must be `NAMESPACE.tool`, and the
    /// Python function is `tool`.
    ///
    /// # Errors
    /// [`RegistryError::BadName`] if the name does not start with
    /// `NAMESPACE.` or the namespace is empty.
    pub fn in_namespace(mut self, namespace: impl Into<String>) -> Result<Self, RegistryError> {
        let ns = namespace.into();
        let local = self
            .name
            .strip_prefix(ns.as_str())
            .and_then(|r| r.strip_prefix('.'));
        if ns.is_empty() || local.is_none_or(str::is_empty) {
            return Err(RegistryError::BadName(self.name));
        }
        self.namespace = Some(ns);
        Ok(self)
    }

    /// Declares the shape of the result (shown in the stub's docstring and
    /// the `execute_code` description; results are not checked against it).
    ///
    /// # Errors
    /// [`RegistryError::BadSchema`] if `schema` is not a valid JSON Schema.
    pub fn with_output_schema(mut self, schema: Value) -> Result<Self, RegistryError> {
        compile(&self.name, "the output schema", &schema)?;
        self.output = Some(schema);
        Ok(self)
    }

    /// The tool as a model may see it: its description and every string in
    /// its input and output schemas (descriptions, defaults, enums,
    /// examples, …) through `redactor`, so that the host's secret values and
    /// known token shapes never reach a schema, a tool list or a stub. A
    /// `default` that held a secret is dropped (the stub then leaves the
    /// argument out and the tool's own default applies). Arguments are
    /// still validated against the schema as given.
    ///
    /// # Errors
    /// [`RegistryError::BadSchema`] when the name, or a property (or any
    /// other key) of a schema, would have to be masked: the tool cannot be
    /// shown without it. The message shows the masked name.
    pub fn redacted(mut self, redactor: &Redactor) -> Result<Self, RegistryError> {
        // The whole name, and each part of a source's `NAME.tool` (a token
        // right after a `.` is not at a token start for the rules).
        let secret_name = std::iter::once(self.name.as_str())
            .chain(self.name.split('.'))
            .any(|part| matches!(redactor.redact(part), Cow::Owned(_)));
        if secret_name {
            let masked: String = self
                .name
                .split('.')
                .map(|part| redactor.redact(part).into_owned())
                .collect::<Vec<_>>()
                .join(".");
            return Err(bad_schema(
                &masked,
                "its name holds what looks like a secret; it is left out",
            ));
        }
        if let Cow::Owned(doc) = redactor.redact(&self.doc) {
            self.doc = doc;
        }
        self.input = redact_schema(&self.input, redactor)
            .map_err(|key| bad_schema(&self.name, secret_key(&key, "input")))?;
        if let Some(output) = &self.output {
            let shown = redact_schema(output, redactor)
                .map_err(|key| bad_schema(&self.name, secret_key(&key, "output")))?;
            self.output = Some(shown);
        }
        Ok(self)
    }

    /// Checks `args` against the input schema: the first violation, as
    /// `/json/pointer: what is wrong` (no pointer for the arguments object
    /// itself).
    fn check(&self, args: &Value) -> Result<(), String> {
        match self.validator.validate(args) {
            Ok(()) => Ok(()),
            Err(e) => {
                let value = truncate_chars(&e.instance().to_string(), MAX_VALUE);
                let message = e.masked_with(value).to_string();
                let pointer = e.instance_path().to_string();
                let text = if pointer.is_empty() {
                    message
                } else {
                    format!("{pointer}: {message}")
                };
                Err(truncate(text, MAX_PROBLEM))
            }
        }
    }
}

fn secret_key(masked: &str, which: &str) -> String {
    format!(
        "the {which} schema has a key holding what looks like a secret ({masked}); the tool is \
         left out"
    )
}

/// `schema` with every string through `redactor` and each `default` that
/// held a secret removed. `Err`: a key that would have to be masked
/// (masked).
fn redact_schema(schema: &Value, redactor: &Redactor) -> Result<Value, String> {
    Ok(match schema {
        Value::String(s) => Value::String(redactor.redact(s).into_owned()),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|i| redact_schema(i, redactor))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => {
            let mut out = serde_json::Map::with_capacity(map.len());
            for (k, v) in map {
                if let Cow::Owned(masked) = redactor.redact(k) {
                    return Err(masked);
                }
                let shown = redact_schema(v, redactor)?;
                if k == "default" && shown != *v {
                    continue;
                }
                out.insert(k.clone(), shown);
            }
            Value::Object(out)
        }
        other => other.clone(),
    })
}

fn truncate_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max).collect();
    out.push('…');
    out
}

impl DynTool for SchemaTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    fn doc(&self) -> &str {
        &self.doc
    }

    fn args_schema(&self) -> Value {
        self.input.clone()
    }

    fn output_schema(&self) -> Value {
        self.output.clone().unwrap_or_else(|| json!({}))
    }

    fn blocked_params(&self) -> &[&'static str] {
        &[]
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        self.check(args)
    }

    fn call(&self, args: Value, cx: ToolContext) -> BoxFuture<'static, Result<Value, ToolError>> {
        // The dispatcher validated already; a direct caller gets the same check.
        if let Err(problem) = self.check(&args) {
            let msg = format!("bad arguments for \"{}\": {problem}", self.name);
            return Box::pin(async move { Err(ToolError::Failed(msg)) });
        }
        (self.handler)(args, cx)
    }
}
