//! JSON Schemas: one per tool (arguments and result), and the `execute_code`
//! tool definition in OpenAI, Anthropic and MCP shapes (README.md,
//! "A short tour": `toolcell schema`; docs/mcp.md, "The `execute_code` tool").

use std::fmt::Write as _;
use std::sync::Arc;

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use crate::tool::DynTool;

/// The JSON Schema of `T`, subschemas inlined, without `$schema`.
pub fn schema_of<T: JsonSchema>() -> Value {
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

/// How many `$ref`s or nested schemas the renderers follow before giving
/// up (`Any`): bounds recursive schemas.
const MAX_DEPTH: usize = 32;

/// `schema` with its local `$ref` chain (`#/$defs/…`, `#/definitions/…`, any
/// `#/…` pointer into `root`) followed. A reference that does not resolve,
/// is not local or loops is returned as is.
pub fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    let mut cur = schema;
    for _ in 0..MAX_DEPTH {
        let Some(r) = cur.get("$ref").and_then(Value::as_str) else {
            return cur;
        };
        let Some(pointer) = r.strip_prefix('#') else {
            return cur;
        };
        let pointer = pointer.replace("%25", "%").replace("%22", "\"");
        match root.pointer(&pointer) {
            Some(next) => cur = next,
            None => return cur,
        }
    }
    cur
}

/// How many schema nodes one rendering may visit (a type hint, a result
/// shape, or all the parameters of one tool together) before the rest
/// renders as `Any`: `anyOf` alternatives that `$ref` each other can
/// describe exponentially many paths in a few hundred bytes, and a tool
/// list from outside must not cost more than its own tools.
pub const TYPE_RENDER_BUDGET: usize = 4096;

/// The work left for one rendering (see [`TYPE_RENDER_BUDGET`]).
#[derive(Debug)]
struct Budget(usize);

impl Budget {
    fn new() -> Self {
        Self(TYPE_RENDER_BUDGET)
    }

    /// Takes one unit of work; `false` once there is none left.
    fn take(&mut self) -> bool {
        if self.0 == 0 {
            return false;
        }
        self.0 -= 1;
        true
    }
}

/// A JSON Schema fragment rendered as a Python type hint (`typing` names,
/// valid on Python 3.8), local `$ref`s resolved against the fragment itself.
/// A schema too large or too branched to render within
/// [`TYPE_RENDER_BUDGET`] is `Any` where the budget ran out.
pub fn python_type(schema: &Value) -> String {
    python_type_in(schema, schema)
}

/// [`python_type`] of `schema`, a part of `root` whose `$ref`s point into
/// `root`.
pub fn python_type_in(root: &Value, schema: &Value) -> String {
    hint(root, schema, 0, &mut Budget::new())
}

fn is_scalar(v: &Value) -> bool {
    !matches!(v, Value::Array(_) | Value::Object(_))
}

fn hint(root: &Value, schema: &Value, depth: usize, budget: &mut Budget) -> String {
    if depth > MAX_DEPTH || !budget.take() {
        return "Any".into();
    }
    let schema = resolve(root, schema);
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        // typing.Literal hashes its values: only scalars.
        if values.is_empty() || !values.iter().all(is_scalar) {
            return "Any".into();
        }
        let lits: Vec<String> = values.iter().map(python_literal).collect();
        return format!("Literal[{}]", lits.join(", "));
    }
    if let Some(c) = schema.get("const") {
        if !is_scalar(c) {
            return "Any".into();
        }
        return format!("Literal[{}]", python_literal(c));
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(alts) = schema.get(key).and_then(Value::as_array) {
            let mut parts = Vec::with_capacity(alts.len().min(64));
            for a in alts {
                let part = hint(root, a, depth + 1, budget);
                // `Any` absorbs the union: the other alternatives need no work.
                if part == "Any" {
                    return part;
                }
                parts.push(part);
            }
            return union(parts);
        }
    }
    match schema.get("type") {
        Some(Value::String(t)) => scalar_type(root, t, schema, depth, budget),
        Some(Value::Array(ts)) => union(
            ts.iter()
                .filter_map(Value::as_str)
                .map(|t| scalar_type(root, t, schema, depth, budget))
                .collect(),
        ),
        _ => "Any".to_string(),
    }
}

fn scalar_type(root: &Value, t: &str, schema: &Value, depth: usize, budget: &mut Budget) -> String {
    match t {
        "string" => "str".into(),
        "integer" => "int".into(),
        "number" => "float".into(),
        "boolean" => "bool".into(),
        "null" => "None".into(),
        "array" => match schema.get("items") {
            Some(items) if items.is_object() => {
                format!("List[{}]", hint(root, items, depth + 1, budget))
            }
            _ => "List[Any]".into(),
        },
        "object" => "Dict[str, Any]".into(),
        _ => "Any".into(),
    }
}

fn union(mut parts: Vec<String>) -> String {
    let mut seen = std::collections::HashSet::new();
    parts.retain(|p| seen.insert(p.clone()));
    let has_none = parts.iter().any(|p| p == "None");
    parts.retain(|p| p != "None");
    if parts.iter().any(|p| p == "Any") {
        return "Any".into();
    }
    if parts.len() > 1 && parts.iter().all(|p| p.starts_with("Literal[")) {
        let lits: Vec<&str> = parts
            .iter()
            .map(|p| &p["Literal[".len()..p.len() - 1])
            .collect();
        parts = vec![format!("Literal[{}]", lits.join(", "))];
    }
    let inner = match parts.len() {
        0 => return "None".into(),
        1 => parts.remove(0),
        _ => format!("Union[{}]", parts.join(", ")),
    };
    if has_none {
        format!("Optional[{inner}]")
    } else {
        inner
    }
}

/// A JSON value as a Python literal.
pub fn python_literal(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        // JSON string escapes are valid Python escapes for what serde emits.
        Value::String(s) => serde_json::to_string(s).unwrap_or_else(|_| "''".into()),
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(python_literal).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, v)| format!(
                    "{}: {}",
                    python_literal(&Value::String(k.clone())),
                    python_literal(v)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A compact description of a result shape, e.g.
/// `{content: str, total_lines: int, truncated: bool}`; local `$ref`s are
/// resolved.
pub fn shape(schema: &Value) -> String {
    shape_in(schema, schema, 0, &mut Budget::new())
}

fn shape_in(root: &Value, schema: &Value, depth: usize, budget: &mut Budget) -> String {
    if depth > MAX_DEPTH / 4 || !budget.take() {
        return "...".into();
    }
    let schema = resolve(root, schema);
    if schema.get("type").and_then(Value::as_str) == Some("object")
        && let Some(props) = schema.get("properties").and_then(Value::as_object)
    {
        let fields: Vec<String> = props
            .iter()
            .map(|(k, v)| format!("{k}: {}", shape_in(root, v, depth + 1, budget)))
            .collect();
        return format!("{{{}}}", fields.join(", "));
    }
    if schema.get("type").and_then(Value::as_str) == Some("array")
        && let Some(items) = schema.get("items").filter(|i| i.is_object())
    {
        return format!("[{}]", shape_in(root, items, depth + 1, budget));
    }
    let t = hint(root, schema, 0, budget);
    match t.as_str() {
        "Dict[str, Any]" => "dict".into(),
        _ => t,
    }
}

/// The return annotation of a tool's stub function for its output schema:
/// `Dict[str, Any]` for an object, the schema's type hint otherwise, `Any`
/// when the shape is not declared.
pub fn return_hint(output: &Value) -> String {
    python_type(output)
}

/// One parameter of a tool, as the stub and descriptions render it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Param {
    /// The Python parameter name ([`stubs::python_parameter_name`] of `key`).
    ///
    /// [`stubs::python_parameter_name`]: crate::stubs::python_parameter_name
    pub name: String,
    /// The property name the tool receives.
    pub key: String,
    /// The Python type hint.
    pub hint: String,
    /// The default, if the parameter is optional.
    pub default: Option<Value>,
    /// The parameter's description.
    pub description: String,
    /// Optional without a declared default, and its schema does not admit
    /// null: when left at `None` the stub does not send it.
    pub omit_if_none: bool,
}

impl Param {
    /// `name: hint` or `name: hint = default`, as in a signature.
    pub fn python(&self) -> String {
        match &self.default {
            None => format!("{}: {}", self.name, self.hint),
            Some(d) => format!("{}: {} = {}", self.name, self.hint, python_literal(d)),
        }
    }
}

fn admits_none(hint: &str) -> bool {
    hint == "None" || hint.starts_with("Optional[")
}

/// The parameters of a tool from its argument schema (local `$ref`s
/// resolved): required ones first, then optional ones, each group in schema
/// order. An optional parameter without a declared default defaults to
/// `None` (its hint `Optional[…]`). All the hints of one tool share one
/// [`TYPE_RENDER_BUDGET`]: once it is spent, the remaining hints are `Any`.
pub fn params(tool: &dyn DynTool) -> Vec<Param> {
    params_of(&tool.args_schema())
}

/// [`params`] of an argument schema.
pub fn params_of(root: &Value) -> Vec<Param> {
    let schema = resolve(root, root);
    let required: std::collections::HashSet<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let empty = Map::new();
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut req = Vec::new();
    let mut opt = Vec::new();
    let mut budget = Budget::new();
    for (key, prop) in props {
        let is_required = required.contains(key.as_str());
        let resolved = resolve(root, prop);
        let mut rendered = hint(root, prop, 0, &mut budget);
        let declared = prop
            .get("default")
            .or_else(|| resolved.get("default"))
            .cloned();
        let omit_if_none = !is_required && declared.is_none() && !admits_none(&rendered);
        if omit_if_none && rendered != "Any" {
            rendered = format!("Optional[{rendered}]");
        }
        let param = Param {
            name: crate::stubs::python_parameter_name(key),
            key: key.clone(),
            hint: rendered,
            default: if is_required {
                None
            } else {
                Some(declared.unwrap_or(Value::Null))
            },
            description: prop
                .get("description")
                .or_else(|| resolved.get("description"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            omit_if_none,
        };
        if is_required {
            req.push(param);
        } else {
            opt.push(param);
        }
    }
    req.extend(opt);
    req
}

/// `name(a: str, b: int = 1) -> {shape}`: the tool's Python signature (the
/// names a cell uses) with its result shape, as the `execute_code`
/// description lists it.
pub fn signature(tool: &dyn DynTool) -> String {
    let ps: Vec<String> = params(tool).iter().map(Param::python).collect();
    let name = match tool.namespace() {
        // A source's tool is called through its submodule: `fs.read(...)`.
        Some(ns) => format!(
            "{}.{}",
            crate::stubs::python_function_name(ns),
            crate::stubs::python_function_name(local_name(tool, ns))
        ),
        None => crate::stubs::python_function_name(tool.name()),
    };
    format!(
        "{}({}) -> {}",
        name,
        ps.join(", "),
        shape(&tool.output_schema())
    )
}

/// The local part of a source's tool's name (`fs.read` → `read`).
fn local_name<'a>(tool: &'a dyn DynTool, namespace: &str) -> &'a str {
    tool.name()
        .strip_prefix(namespace)
        .and_then(|rest| rest.strip_prefix('.'))
        .unwrap_or(tool.name())
}

/// The first line of a tool's doc.
pub fn summary(tool: &dyn DynTool) -> &str {
    tool.doc().lines().next().unwrap_or("").trim()
}

/// Seconds a cell may run when nothing says otherwise (`[execution] timeout`).
pub const DEFAULT_TIMEOUT_SECS: f64 = 300.0;
/// Tool calls a cell may make when nothing says otherwise.
pub const DEFAULT_MAX_TOOL_CALLS: u32 = toolcell_rpc::DEFAULT_BUDGET;
/// Stdout bytes a result carries inline when nothing says otherwise.
pub const DEFAULT_MAX_STDOUT_BYTES: usize = 50_000;
/// Stderr bytes a result carries inline when nothing says otherwise.
pub const DEFAULT_MAX_STDERR_BYTES: usize = 10_000;
/// Seconds an interrupted cell gets to stop before its kernel is killed.
pub const DEFAULT_INTERRUPT_GRACE_SECS: f64 = 2.0;

/// Execution mode of a session (docs/configuration.md, `[execution] mode`):
/// where the kernel runs. The one definition: configuration, requests,
/// the registry and the `execute_code` description all use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Mode {
    /// The project's directory and interpreter (`.venv`, `$VIRTUAL_ENV`, …).
    #[default]
    Project,
    /// `python3` on PATH in a private temporary directory.
    Strict,
}

impl Mode {
    /// Every mode, in the order the docs list them.
    pub const ALL: [Mode; 2] = [Mode::Project, Mode::Strict];

    /// The name in configuration and on the wire: `project`, `strict`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Project => "project",
            Mode::Strict => "strict",
        }
    }

    /// The mode named `text`, if any.
    pub fn from_name(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == text)
    }
}

/// What the kernel does when a cell runs out of time
/// (`[execution] on_timeout`). The one definition: configuration, the
/// registry and each kernel's cell all use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnTimeout {
    /// SIGINT first; state survives if the cell stops within the grace.
    #[default]
    Interrupt,
    /// Kill the kernel; state is lost.
    Kill,
}

impl OnTimeout {
    /// Every policy, in the order the docs list them.
    pub const ALL: [OnTimeout; 2] = [OnTimeout::Interrupt, OnTimeout::Kill];

    /// The name in configuration: `interrupt`, `kill`.
    pub const fn as_str(self) -> &'static str {
        match self {
            OnTimeout::Interrupt => "interrupt",
            OnTimeout::Kill => "kill",
        }
    }

    /// The policy named `text`, if any.
    pub fn from_name(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == text)
    }
}

/// The configured limits and mode the `execute_code` description states.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecuteCodeOptions {
    /// Seconds a cell may run.
    pub timeout_secs: f64,
    /// Tool calls a cell may make.
    pub max_tool_calls: u32,
    /// Stdout bytes returned inline.
    pub max_stdout_bytes: usize,
    /// Stderr bytes returned inline.
    pub max_stderr_bytes: usize,
    /// Where the kernel runs.
    pub mode: Mode,
    /// What a timeout does.
    pub on_timeout: OnTimeout,
    /// Seconds an interrupted cell gets to stop before the kernel is killed.
    pub interrupt_grace_secs: f64,
    /// Resource limits of each kernel (`[limits]`) as `(key, value)`:
    /// `("memory", 2147483648)`; empty when none is set.
    pub resource_limits: Vec<(String, u64)>,
    /// Writes outside the kernel's private and temp directories fail
    /// (`[execution] confine`).
    pub confined: bool,
    /// The kernel's language: `python` (or empty), `r`, `javascript`.
    pub language: String,
    /// Output over its cap is folded (runs of similar lines, long lines)
    /// before the head/tail cut (`[output] fold`, not `false`).
    pub folds: bool,
}

impl Default for ExecuteCodeOptions {
    fn default() -> Self {
        Self {
            timeout_secs: DEFAULT_TIMEOUT_SECS,
            max_tool_calls: DEFAULT_MAX_TOOL_CALLS,
            max_stdout_bytes: DEFAULT_MAX_STDOUT_BYTES,
            max_stderr_bytes: DEFAULT_MAX_STDERR_BYTES,
            mode: Mode::Project,
            on_timeout: OnTimeout::Interrupt,
            interrupt_grace_secs: DEFAULT_INTERRUPT_GRACE_SECS,
            resource_limits: Vec::new(),
            confined: false,
            language: String::new(),
            folds: true,
        }
    }
}

/// `[limits]` as a phrase for the model: `memory 2 GiB (address space)`.
fn limit_phrase(key: &str, value: u64) -> String {
    let bytes = |v: u64| {
        const UNITS: [&str; 4] = ["bytes", "KiB", "MiB", "GiB"];
        let mut x = v as f64;
        let mut unit = 0;
        while x >= 1024.0 && unit < UNITS.len() - 1 {
            x /= 1024.0;
            unit += 1;
        }
        if x.fract() == 0.0 {
            format!("{x:.0} {}", UNITS[unit])
        } else {
            format!("{x:.1} {}", UNITS[unit])
        }
    };
    match key {
        "memory" => format!("{} of memory (address space) per process", bytes(value)),
        "cpu_seconds" => format!("{value} CPU seconds per call"),
        "open_files" => format!("{value} open files"),
        "processes" => format!("{value} processes"),
        "file_size" => format!("files up to {}", bytes(value)),
        other => format!("{other} {value}"),
    }
}

/// The tool definition shapes `toolcell schema` can print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SchemaFormat {
    /// `{"type":"function","function":{name, description, parameters}}`.
    OpenAi,
    /// `{name, description, input_schema}`.
    Anthropic,
    /// `{name, description, inputSchema}`.
    Mcp,
}

impl std::str::FromStr for SchemaFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "openai" => Ok(Self::OpenAi),
            "anthropic" => Ok(Self::Anthropic),
            "mcp" => Ok(Self::Mcp),
            other => Err(format!(
                "unknown schema format `{other}`; use openai, anthropic or mcp"
            )),
        }
    }
}

fn seconds(s: f64) -> String {
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s}")
    }
}

/// How output over its cap is shortened, for the description.
fn shortened(folds: bool) -> &'static str {
    if folds {
        "shortened (runs of similar lines and over-long lines folded, then head and tail kept if \
         still over)"
    } else {
        "cut (head and tail kept)"
    }
}

/// The `execute_code` description: what it does, the enabled tools with
/// their signatures and result shapes, the configured limits, the cwd rule
/// of the mode, that state persists, and what a timeout does to it.
///
/// Tools that cannot share the stub module with earlier ones (a name that
/// clashes in any language, see [`stubs::screen`](crate::stubs::screen))
/// are not listed, as the kernel leaves them out.
pub fn execute_code_description(tools: &[Arc<dyn DynTool>], opts: &ExecuteCodeOptions) -> String {
    let screened = crate::stubs::screen(tools, &[]);
    let tools = screened.tools.as_slice();
    if matches!(opts.language.as_str(), "r" | "javascript") {
        return other_language_description(tools, opts);
    }
    let mut d = String::new();
    d.push_str(
        "Run Python code in a persistent Python kernel. Variables, imports and loaded data \
         persist from one call to the next in the same conversation; pass reset=true to start \
         over in a fresh kernel. The value of a trailing expression is printed, top-level \
         `await` works, lines starting with `!` run shell commands, and `%pip install …` \
         installs packages into the kernel's interpreter.\n\n",
    );
    match opts.mode {
        Mode::Project => d.push_str(
            "The working directory is the project directory, and the interpreter is the \
             project's (its virtualenv when there is one).\n\n",
        ),
        Mode::Strict => d.push_str(
            "The working directory is a private temporary directory (not the project), and \
             the interpreter is python3 from PATH.\n\n",
        ),
    }
    if tools.is_empty() {
        d.push_str("No host tools are enabled.\n\n");
    } else {
        let all_dicts = tools
            .iter()
            .all(|t| t.output_schema().get("type").and_then(Value::as_str) == Some("object"));
        d.push_str(if all_dicts {
            "These host tools are Python functions in the kernel (already defined, or `from \
             toolcell_tools import …`); each returns a dict:\n"
        } else {
            "These host tools are Python functions in the kernel (already defined, or `from \
             toolcell_tools import …`; `NAME.tool` is the function `tool` of the module NAME, \
             also defined); each returns its JSON result (the shape after `->`):\n"
        });
        for t in tools {
            let _ = writeln!(d, "- {}: {}", signature(t.as_ref()), summary(t.as_ref()));
        }
        d.push_str(
            "A refused or failed tool call raises toolcell_tools.ToolError. Helpers: \
             json_parse(text), shell_quote(s), retry(fn, attempts=3).\n\n",
        );
    }
    let page = if tools.iter().any(|t| t.name() == "read_file") {
        "page it with read_file"
    } else {
        "read it from Python"
    };
    let _ = write!(
        d,
        "Limits per call: {} seconds; at most {} tool calls; stdout beyond {} bytes and stderr \
         beyond {} bytes is {} and the full output is saved to a file whose \
         path is returned; {page} instead of re-running. ",
        seconds(opts.timeout_secs),
        opts.max_tool_calls,
        opts.max_stdout_bytes,
        opts.max_stderr_bytes,
        shortened(opts.folds),
    );
    match opts.on_timeout {
        OnTimeout::Interrupt => {
            let _ = write!(
                d,
                "On timeout the code is interrupted (KeyboardInterrupt); if it stops within {} \
                 seconds the kernel and its state are kept, otherwise the kernel is killed and \
                 all state is lost.",
                seconds(opts.interrupt_grace_secs)
            );
        }
        OnTimeout::Kill => d.push_str("On timeout the kernel is killed and all state is lost."),
    }
    if !opts.resource_limits.is_empty() {
        let phrases: Vec<String> = opts
            .resource_limits
            .iter()
            .map(|(k, v)| limit_phrase(k, *v))
            .collect();
        let _ = write!(
            d,
            " Resource limits: {}; exceeding one fails the call (a CPU-time overrun ends the \
             kernel and its state).",
            phrases.join(", ")
        );
    }
    if opts.confined {
        d.push_str(
            "\n\nThe code may write files only in its working directory and the temp \
             directory; writes elsewhere fail with PermissionError (reading is not restricted).",
        );
    }
    d.push_str(
        "\n\nThe code runs with the user's rights on this machine; it is not isolated from it.",
    );
    d
}

/// The `execute_code` description for an R or JavaScript kernel: the
/// tools with that language's signatures, the same limits.
fn other_language_description(tools: &[Arc<dyn DynTool>], opts: &ExecuteCodeOptions) -> String {
    let r = opts.language == "r";
    let mut d = String::new();
    if r {
        d.push_str(
            "Run R code in a persistent R session (Rscript). Objects, loaded packages and data \
             persist from one call to the next in the same conversation; pass reset=true to \
             start over in a fresh session. Visible values are printed as at the R console \
             (a data frame or a ggplot as the last line shows); message() and warnings go to \
             stderr; every plot the code draws comes back as a PNG figure. A missing package \
             is installed with install.packages(\"name\").\n\n",
        );
    } else {
        d.push_str(
            "Run JavaScript code in a persistent Node.js context. Variables (let, const, var, \
             functions, classes) persist from one call to the next in the same conversation; \
             pass reset=true to start over in a fresh context. The value of the last \
             expression is printed (unless undefined), top-level `await` works, console.log \
             goes to stdout and console.error to stderr, require() loads Node's built-in \
             modules and packages installed with npm in the working directory.\n\n",
        );
    }
    match opts.mode {
        Mode::Project => d.push_str("The working directory is the project directory.\n\n"),
        Mode::Strict => d.push_str(
            "The working directory is a private temporary directory (not the project).\n\n",
        ),
    }
    if tools.is_empty() {
        d.push_str("No host tools are enabled.\n\n");
    } else if r {
        d.push_str(
            "These host tools are R functions already defined in the session; each returns a \
             list:\n",
        );
        for t in tools {
            let _ = writeln!(d, "- {}: {}", r_signature(t.as_ref()), summary(t.as_ref()));
        }
        d.push_str(
            "A refused or failed call stops with a ToolError condition \
             (tryCatch(..., ToolError = function(e) ...)).\n\n",
        );
    } else {
        d.push_str(
            "These host tools are async functions already defined in the context, taking one \
             object of named arguments; each resolves to an object:\n",
        );
        for t in tools {
            let _ = writeln!(
                d,
                "- await {}: {}",
                js_signature(t.as_ref()),
                summary(t.as_ref())
            );
        }
        d.push_str(
            "A refused or failed call rejects with a ToolError (e.code says why); calls may \
             run in parallel with Promise.all.\n\n",
        );
    }
    let _ = write!(
        d,
        "Limits per call: {} seconds; at most {} tool calls; stdout beyond {} bytes and stderr \
         beyond {} bytes is {} and the full output is saved to a file whose \
         path is returned. ",
        seconds(opts.timeout_secs),
        opts.max_tool_calls,
        opts.max_stdout_bytes,
        opts.max_stderr_bytes,
        shortened(opts.folds),
    );
    match opts.on_timeout {
        OnTimeout::Interrupt => {
            let _ = write!(
                d,
                "On timeout the code is interrupted (SIGINT); if it stops within {} seconds the \
                 session and its state are kept, otherwise it is killed and all state is lost.",
                seconds(opts.interrupt_grace_secs)
            );
        }
        OnTimeout::Kill => d.push_str("On timeout the kernel is killed and all state is lost."),
    }
    d.push_str(
        "\n\nThe code runs with the user's rights on this machine; it is not isolated from it.",
    );
    d
}

/// A tool's R signature: `read_file(path, offset = 1, limit = 2000)`.
pub fn r_signature(tool: &dyn DynTool) -> String {
    let name = match tool.namespace() {
        // A source's tool is a member of its environment: `fs$read(...)`.
        Some(ns) => format!(
            "{}${}",
            crate::stubs_r::r_function_name(ns),
            crate::stubs_r::r_identifier(local_name(tool, ns))
        ),
        None => crate::stubs_r::r_function_name(tool.name()),
    };
    let params: Vec<String> = params(tool)
        .iter()
        .map(|p| {
            let n = crate::stubs_r::r_identifier(&p.key);
            match &p.default {
                Some(Value::String(s)) => format!("{n} = {}", crate::stubs_r::r_string(s)),
                Some(Value::Bool(b)) => format!("{n} = {}", if *b { "TRUE" } else { "FALSE" }),
                Some(Value::Number(x)) => format!("{n} = {x}"),
                Some(_) => format!("{n} = NULL"),
                None if p.omit_if_none || p.hint.starts_with("Optional[") => format!("{n} = NULL"),
                None => n,
            }
        })
        .collect();
    format!("{name}({})", params.join(", "))
}

/// A tool's JavaScript signature: `read_file({path, offset = 1, limit = 2000})`.
pub fn js_signature(tool: &dyn DynTool) -> String {
    let name = match tool.namespace() {
        // A source's tool is a method of its object: `fs_.read({...})`.
        Some(ns) => format!(
            "{}.{}",
            crate::stubs_js::js_identifier(ns),
            crate::stubs_js::js_member_name(local_name(tool, ns))
        ),
        None => crate::stubs_js::js_identifier(tool.name()),
    };
    let params: Vec<String> = params(tool)
        .iter()
        .map(|p| match &p.default {
            Some(v) => format!("{} = {v}", p.key),
            None if p.omit_if_none || p.hint.starts_with("Optional[") => format!("{}?", p.key),
            None => p.key.clone(),
        })
        .collect();
    format!("{name}({{{}}})", params.join(", "))
}

/// The `execute_code` parameters schema (`code` required, `reset`).
pub fn execute_code_parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "code": {
                "type": "string",
                "description": "Python source to run as one cell."
            },
            "reset": {
                "type": "boolean",
                "default": false,
                "description": "Discard the kernel and its state first, and run in a fresh one."
            }
        },
        "required": ["code"],
        "additionalProperties": false
    })
}

/// The `execute_code` tool definition in the given shape.
pub fn execute_code_tool(
    tools: &[Arc<dyn DynTool>],
    opts: &ExecuteCodeOptions,
    format: SchemaFormat,
) -> Value {
    let description = execute_code_description(tools, opts);
    let params = execute_code_parameters();
    match format {
        SchemaFormat::OpenAi => json!({
            "type": "function",
            "function": {
                "name": "execute_code",
                "description": description,
                "parameters": params
            }
        }),
        SchemaFormat::Anthropic => json!({
            "name": "execute_code",
            "description": description,
            "input_schema": params
        }),
        SchemaFormat::Mcp => json!({
            "name": "execute_code",
            "description": description,
            "inputSchema": params
        }),
    }
}

/// One tool's own definition: name, doc, argument and result schemas (for
/// `toolcell tools --json` and MCP's `--expose-tools`).
pub fn tool_definition(tool: &dyn DynTool) -> Value {
    json!({
        "name": tool.name(),
        "description": tool.doc(),
        "signature": signature(tool),
        "inputSchema": tool.args_schema(),
        "outputSchema": tool.output_schema(),
        "blockedParams": tool.blocked_params(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_types_from_schemas() {
        assert_eq!(python_type(&json!({"type":"string"})), "str");
        assert_eq!(
            python_type(&json!({"type":["integer","null"]})),
            "Optional[int]"
        );
        assert_eq!(
            python_type(&json!({"type":"array","items":{"type":"string"}})),
            "List[str]"
        );
        assert_eq!(
            python_type(&json!({"type":"string","enum":["a","b"]})),
            "Literal[\"a\", \"b\"]"
        );
        assert_eq!(
            python_type(&json!({"anyOf":[{"type":"string"},{"type":"null"}]})),
            "Optional[str]"
        );
        assert_eq!(python_type(&json!({})), "Any");
        assert_eq!(
            python_type(&json!({"oneOf":[{"const":"a"},{"const":"b"}]})),
            "Literal[\"a\", \"b\"]"
        );
    }

    #[test]
    fn literals_are_python() {
        assert_eq!(python_literal(&json!(null)), "None");
        assert_eq!(python_literal(&json!(false)), "False");
        assert_eq!(python_literal(&json!("a\"b")), "\"a\\\"b\"");
        assert_eq!(python_literal(&json!(2000)), "2000");
    }

    #[test]
    fn the_description_never_says_sandbox() {
        for mode in [Mode::Project, Mode::Strict] {
            for on_timeout in [OnTimeout::Interrupt, OnTimeout::Kill] {
                let opts = ExecuteCodeOptions {
                    mode,
                    on_timeout,
                    ..ExecuteCodeOptions::default()
                };
                let d = execute_code_description(&[], &opts).to_lowercase();
                assert!(!d.contains("sandbox"), "{d}");
                // Without read_file, the description does not send the model to it.
                assert!(!d.contains("read_file"), "{d}");
            }
        }
    }

    #[test]
    fn the_description_states_resource_limits_and_confinement_only_when_set() {
        let plain = execute_code_description(&[], &ExecuteCodeOptions::default());
        assert!(!plain.contains("Resource limits"), "{plain}");
        assert!(!plain.contains("PermissionError"), "{plain}");
        let opts = ExecuteCodeOptions {
            resource_limits: vec![
                ("memory".into(), 2 << 30),
                ("cpu_seconds".into(), 30),
                ("file_size".into(), 1536 << 20),
            ],
            confined: true,
            ..ExecuteCodeOptions::default()
        };
        let d = execute_code_description(&[], &opts);
        for needle in [
            "2 GiB of memory",
            "30 CPU seconds per call",
            "files up to 1.5 GiB",
            "fail with PermissionError",
        ] {
            assert!(d.contains(needle), "{needle} missing: {d}");
        }
        assert!(!d.to_lowercase().contains("sandbox"), "{d}");
    }

    #[test]
    fn the_description_states_configured_limits() {
        let opts = ExecuteCodeOptions {
            timeout_secs: 17.0,
            max_tool_calls: 9,
            max_stdout_bytes: 1234,
            max_stderr_bytes: 567,
            ..ExecuteCodeOptions::default()
        };
        let d = execute_code_description(&[], &opts);
        for needle in [
            "17 seconds",
            "at most 9 tool calls",
            "1234 bytes",
            "567 bytes",
        ] {
            assert!(d.contains(needle), "missing {needle:?} in {d}");
        }
    }
}
