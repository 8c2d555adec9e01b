//! The generated Python stub module `toolcell_tools` (docs/protocol.md,
//! "The Python side").
//!
//! The module is the static prelude (`stub/prelude.py`: `ToolError`, the tool
//! socket client, `json_parse`, `shell_quote`, `retry`) followed by one
//! function per enabled tool, whose signature, type hints, defaults and
//! docstring come from the tool's JSON Schema and doc.

use std::fmt::Write as _;
use std::sync::Arc;

use crate::schema::{self, Param};
use crate::tool::DynTool;

/// The hand-written part of the module.
pub const PRELUDE: &str = include_str!("stub/prelude.py");

/// Names the module always exports besides the tools.
pub const HELPERS: [&str; 4] = ["ToolError", "json_parse", "shell_quote", "retry"];

const PY_KEYWORDS: [&str; 35] = [
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// Python's builtins. The runner copies every tool into the cell's
/// namespace and the prelude calls builtins (`str`, `isinstance`, …), so a
/// tool function must never shadow one.
const PY_BUILTINS: &[&str] = &[
    "ArithmeticError",
    "AssertionError",
    "AttributeError",
    "BaseException",
    "BaseExceptionGroup",
    "BlockingIOError",
    "BrokenPipeError",
    "BufferError",
    "BytesWarning",
    "ChildProcessError",
    "ConnectionAbortedError",
    "ConnectionError",
    "ConnectionRefusedError",
    "ConnectionResetError",
    "DeprecationWarning",
    "EOFError",
    "Ellipsis",
    "EncodingWarning",
    "EnvironmentError",
    "Exception",
    "ExceptionGroup",
    "False",
    "FileExistsError",
    "FileNotFoundError",
    "FloatingPointError",
    "FutureWarning",
    "GeneratorExit",
    "IOError",
    "ImportError",
    "ImportWarning",
    "IndentationError",
    "IndexError",
    "InterruptedError",
    "IsADirectoryError",
    "KeyError",
    "KeyboardInterrupt",
    "LookupError",
    "MemoryError",
    "ModuleNotFoundError",
    "NameError",
    "None",
    "NotADirectoryError",
    "NotImplemented",
    "NotImplementedError",
    "OSError",
    "OverflowError",
    "PendingDeprecationWarning",
    "PermissionError",
    "ProcessLookupError",
    "PythonFinalizationError",
    "RecursionError",
    "ReferenceError",
    "ResourceWarning",
    "RuntimeError",
    "RuntimeWarning",
    "StopAsyncIteration",
    "StopIteration",
    "SyntaxError",
    "SyntaxWarning",
    "SystemError",
    "SystemExit",
    "TabError",
    "TimeoutError",
    "True",
    "TypeError",
    "UnboundLocalError",
    "UnicodeDecodeError",
    "UnicodeEncodeError",
    "UnicodeError",
    "UnicodeTranslateError",
    "UnicodeWarning",
    "UserWarning",
    "ValueError",
    "Warning",
    "ZeroDivisionError",
    "abs",
    "aiter",
    "all",
    "anext",
    "any",
    "ascii",
    "bin",
    "bool",
    "breakpoint",
    "bytearray",
    "bytes",
    "callable",
    "chr",
    "classmethod",
    "compile",
    "complex",
    "copyright",
    "credits",
    "delattr",
    "dict",
    "dir",
    "divmod",
    "enumerate",
    "eval",
    "exec",
    "exit",
    "filter",
    "float",
    "format",
    "frozenset",
    "getattr",
    "globals",
    "hasattr",
    "hash",
    "help",
    "hex",
    "id",
    "input",
    "int",
    "isinstance",
    "issubclass",
    "iter",
    "len",
    "license",
    "list",
    "locals",
    "map",
    "max",
    "memoryview",
    "min",
    "next",
    "object",
    "oct",
    "open",
    "ord",
    "pow",
    "print",
    "property",
    "quit",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "setattr",
    "slice",
    "sorted",
    "staticmethod",
    "str",
    "sum",
    "super",
    "tuple",
    "type",
    "vars",
    "zip",
];

/// Names the prelude defines or imports at module level (besides
/// [`HELPERS`]); a test checks this against the prelude itself.
pub const PRELUDE_NAMES: &[&str] = &[
    "_thread",
    "_os",
    "_FINAL_CODES",
    "_local",
    "_connect",
    "_peer_closed",
    "_connection",
    "_drop",
    "_call",
    "_namespace",
    "_unavailable",
    "__path__",
    "Any",
    "Callable",
    "Dict",
    "List",
    "Literal",
    "Optional",
    "Union",
];

/// Names a generated function body uses; a parameter never takes one.
const BODY_NAMES: [&str; 2] = ["_call", "_args"];

/// Why a stub could not be generated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StubError {
    /// A tool or parameter name cannot be a Python identifier (no longer
    /// produced: such names are mapped).
    #[error("{0} `{1}` is a Python keyword or a name the stub module reserves; rename it")]
    ReservedName(&'static str, String),
    /// Two tools, or two parameters of one tool, map to one name in one of
    /// the stub languages.
    #[error(
        "{what} `{first}` and `{second}` both map to the {language} name `{ident}`; rename one"
    )]
    SameIdentifier {
        /// `"tools"`, or `"parameters of tool `x`"`.
        what: String,
        /// `Python`, `R` or `JavaScript`.
        language: &'static str,
        /// The first name.
        first: String,
        /// The second name.
        second: String,
        /// The identifier both map to.
        ident: String,
    },
}

/// `name` as a Python identifier: every character outside `[A-Za-z0-9_]`
/// becomes `_`, a leading digit (or an empty name) gets a `_` prefix, and a
/// keyword (or `__debug__`, which Python never lets a program bind) gets a
/// `_` suffix. `get-user` → `get_user`, `from` → `from_`, `2fa` → `_2fa`,
/// `__debug__` → `__debug___`. Soft keywords (`match`, `case`, `type`, `_`)
/// are ordinary names and stay.
pub fn python_identifier(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    if PY_KEYWORDS.contains(&out.as_str()) || out == "__debug__" {
        out.push('_');
    }
    out
}

fn taken_by_module(ident: &str) -> bool {
    PY_BUILTINS.contains(&ident) || HELPERS.contains(&ident) || PRELUDE_NAMES.contains(&ident)
}

/// The Python function name of a tool called `name`: its
/// [`python_identifier`], with a `_` suffix while that is a builtin or a
/// name the module itself defines (`print` → `print_`, `retry` →
/// `retry_`), so that no tool shadows them; a dunder name (`__init__`,
/// which no suffix can turn into an ordinary name) gets a `tool` prefix.
/// The host always sees `name`.
pub fn python_function_name(name: &str) -> String {
    let mut ident = python_identifier(name);
    if ident.starts_with("__") && ident.ends_with("__") {
        ident.insert_str(0, "tool");
    }
    // Terminates: the reserved names are finite.
    while taken_by_module(&ident) {
        ident.push('_');
    }
    ident
}

/// The Python parameter name of a property called `key`: its
/// [`python_identifier`], with a `_` suffix while that is a name the
/// function body uses. The tool receives `key`.
pub fn python_parameter_name(key: &str) -> String {
    let mut ident = python_identifier(key);
    while BODY_NAMES.contains(&ident.as_str()) {
        ident.push('_');
    }
    ident
}

/// Escapes text for a `"""` docstring.
fn docstring(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push('\n'),
            // NUL and other controls are not allowed (or not kept) in source.
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.replace("\"\"\"", "\\\"\\\"\\\"")
}

/// Wraps each paragraph of `text` at `width` columns: the first line of a
/// paragraph starts with `first`, the following ones with `rest`.
fn wrap(text: &str, first: &str, rest: &str, width: usize) -> String {
    let mut out = String::new();
    for para in text.split('\n') {
        let mut line = String::new();
        let mut indent = first;
        for word in para.split_whitespace() {
            if !line.is_empty() && indent.len() + line.len() + 1 + word.len() > width {
                let _ = writeln!(out, "{indent}{line}");
                line.clear();
                indent = rest;
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        if line.is_empty() {
            out.push('\n');
        } else {
            let _ = writeln!(out, "{indent}{line}");
        }
    }
    out
}

fn function(tool: &dyn DynTool, ident: &str) -> Result<String, StubError> {
    let name = tool.name();
    let params: Vec<Param> = schema::params(tool);
    check_params_in(name, &params, &[Lang::Python])?;
    let sig: Vec<String> = params.iter().map(Param::python).collect();
    let output = tool.output_schema();
    let mut f = String::new();
    let _ = writeln!(
        f,
        "def {ident}({}) -> {}:",
        sig.join(", "),
        schema::return_hint(&output)
    );
    let summary = tool.doc().trim();
    let mut doc = if summary.is_empty() {
        format!(
            "Call the host tool {}.\n",
            schema::python_literal(&name.into())
        )
    } else {
        wrap(summary, "", "", 84)
    };
    if ident != name {
        let _ = writeln!(
            doc,
            "\nThe host knows this tool as {}.",
            schema::python_literal(&name.into())
        );
    }
    if !params.is_empty() {
        doc.push_str("\nArgs:\n");
        for p in &params {
            let mut desc = p
                .description
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            if p.key != p.name {
                if !desc.is_empty() {
                    desc.push(' ');
                }
                let _ = write!(
                    desc,
                    "(sent as {})",
                    schema::python_literal(&p.key.clone().into())
                );
            }
            doc.push_str(&wrap(
                &format!("{} ({}): {desc}", p.name, p.hint),
                "    ",
                "        ",
                84,
            ));
        }
    }
    doc.push_str("\nReturns:\n");
    let shape = schema::shape(&output);
    let shape = if shape == "Any" {
        "Any: the tool's JSON result (its shape is not declared).".to_string()
    } else {
        shape
    };
    doc.push_str(&wrap(&shape, "    ", "        ", 84));
    doc.push_str("\nRaises:\n    ToolError: the host refused the call or the tool failed.\n");
    let text = docstring(&doc);
    let mut lines = text.trim_end().lines();
    let _ = writeln!(f, "    \"\"\"{}", lines.next().unwrap_or(""));
    for line in lines {
        if line.is_empty() {
            f.push('\n');
        } else {
            let _ = writeln!(f, "    {line}");
        }
    }
    let _ = writeln!(f, "    \"\"\"");
    let key = |p: &Param| schema::python_literal(&p.key.clone().into());
    let always: Vec<String> = params
        .iter()
        .filter(|p| !p.omit_if_none)
        .map(|p| format!("{}: {}", key(p), p.name))
        .collect();
    let tool_name = schema::python_literal(&name.into());
    if params.iter().any(|p| p.omit_if_none) {
        // An optional property whose schema does not admit null is left
        // out when not given (None), rather than sent as null.
        let _ = writeln!(f, "    _args = {{{}}}", always.join(", "));
        for p in params.iter().filter(|p| p.omit_if_none) {
            let _ = writeln!(f, "    if {} is not None:", p.name);
            let _ = writeln!(f, "        _args[{}] = {}", key(p), p.name);
        }
        let _ = writeln!(f, "    return _call({tool_name}, _args)");
    } else {
        let _ = writeln!(
            f,
            "    return _call({tool_name}, {{{}}})",
            always.join(", ")
        );
    }
    Ok(f)
}

/// Checks that no two parameters of `tool` map to one parameter name in
/// Python or R (JavaScript passes the keys themselves).
///
/// # Errors
/// [`StubError::SameIdentifier`] naming both properties and the language.
pub(crate) fn check_params(tool: &str, params: &[Param]) -> Result<(), StubError> {
    check_params_in(tool, params, &Lang::ALL)
}

/// [`check_params`] for some languages only.
fn check_params_in(tool: &str, params: &[Param], langs: &[Lang]) -> Result<(), StubError> {
    for &lang in langs {
        let mut seen: std::collections::HashMap<String, &str> = std::collections::HashMap::new();
        for p in params {
            let Some(ident) = lang.param_name(&p.key) else {
                continue;
            };
            if let Some(first) = seen.insert(ident.clone(), &p.key) {
                return Err(StubError::SameIdentifier {
                    what: format!("properties of tool `{tool}`"),
                    language: lang.label(),
                    first: first.to_string(),
                    second: p.key.clone(),
                    ident,
                });
            }
        }
    }
    Ok(())
}

/// The languages stub modules are generated for, and how each names a
/// tool, a source and a parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lang {
    Python,
    R,
    JavaScript,
}

impl Lang {
    pub(crate) const ALL: [Lang; 3] = [Lang::Python, Lang::R, Lang::JavaScript];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Lang::Python => "Python",
            Lang::R => "R",
            Lang::JavaScript => "JavaScript",
        }
    }

    /// The name of a top-level tool or of a source's module.
    pub(crate) fn top_name(self, name: &str) -> String {
        match self {
            Lang::Python => python_function_name(name),
            Lang::R => crate::stubs_r::r_function_name(name),
            Lang::JavaScript => crate::stubs_js::js_identifier(name),
        }
    }

    /// The name of a source's tool inside the source's module.
    pub(crate) fn member_name(self, name: &str) -> String {
        match self {
            Lang::Python => python_function_name(name),
            Lang::R => crate::stubs_r::r_identifier(name),
            Lang::JavaScript => crate::stubs_js::js_member_name(name),
        }
    }

    /// The name of a parameter (`None`: the language passes the property
    /// names themselves, JavaScript's object of arguments).
    pub(crate) fn param_name(self, key: &str) -> Option<String> {
        match self {
            Lang::Python => Some(python_parameter_name(key)),
            Lang::R => Some(crate::stubs_r::r_identifier(key)),
            Lang::JavaScript => None,
        }
    }

    /// `(module, name)` of `tool` in this language (`""`: the top level).
    pub(crate) fn tool_name(self, tool: &dyn DynTool) -> (String, String) {
        match tool.namespace() {
            None => (String::new(), self.top_name(tool.name())),
            Some(ns) => (ns.to_string(), self.member_name(local_name(tool, ns))),
        }
    }
}

/// The names a top-level tool (or a source's module) called `name` has in
/// Python, R and JavaScript: `[("Python", …), ("R", …), ("JavaScript", …)]`.
/// Two names clash when they share an entry.
pub fn top_level_names(name: &str) -> [(&'static str, String); 3] {
    Lang::ALL.map(|lang| (lang.label(), lang.top_name(name)))
}

/// What [`screen`] kept of a set of tools.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct Screened {
    /// The tools that fit together in one stub module of every language, in
    /// the order given.
    pub tools: Vec<Arc<dyn DynTool>>,
    /// The sources that are down whose module names are free.
    pub unavailable: Vec<Unavailable>,
    /// One message for each tool or source left out, naming it, the one
    /// that keeps the name, and the name.
    pub dropped: Vec<String>,
}

impl std::fmt::Debug for Screened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Screened")
            .field(
                "tools",
                &self.tools.iter().map(|t| t.name()).collect::<Vec<_>>(),
            )
            .field("unavailable", &self.unavailable)
            .field("dropped", &self.dropped)
            .finish()
    }
}

/// The tools (and down sources) of `tools` and `unavailable` that can be in
/// one stub module together, in Python, R and JavaScript alike: a tool
/// whose function name in any language is already taken (by an earlier
/// tool, or by a source's module), a tool two of whose parameters map to
/// one name, and a source whose module name is taken are left out, each
/// with a message in [`Screened::dropped`]. Earlier tools win, so put the
/// host's own tools first; what one source lists can then only cost that
/// source's own tools. With the result, [`stub_module_with`] and the R and
/// JavaScript generators never fail.
pub fn screen(tools: &[Arc<dyn DynTool>], unavailable: &[Unavailable]) -> Screened {
    use std::collections::HashMap;
    // (language, module, name) → who has it.
    let mut taken: HashMap<(&'static str, String, String), String> = HashMap::new();
    let mut out = Screened::default();
    // Top-level tools first (as the generators claim them), then sources.
    let (top, sourced): (Vec<_>, Vec<_>) = tools.iter().partition(|t| t.namespace().is_none());
    let mut kept: Vec<&Arc<dyn DynTool>> = Vec::with_capacity(tools.len());
    // The first wanted name someone has: (index, who, language, name).
    let clash = |taken: &HashMap<(&'static str, String, String), String>,
                 wanted: &[(&'static str, String, String)]|
     -> Option<(usize, String, &'static str, String)> {
        wanted.iter().enumerate().find_map(|(i, k)| {
            taken
                .get(k)
                .map(|first| (i, first.clone(), k.0, k.2.clone()))
        })
    };
    let source_key = |ns: &str| ("source", String::new(), ns.to_string());
    for t in top.into_iter().chain(sourced) {
        let name = t.name();
        if let Err(e) = check_params(name, &schema::params(t.as_ref())) {
            out.dropped.push(format!("tool `{name}` left out: {e}"));
            continue;
        }
        // The tool's own names, then its source's module names if the
        // source has no module yet.
        let mut wanted: Vec<(&'static str, String, String)> = Lang::ALL
            .iter()
            .map(|lang| {
                let (module, ident) = lang.tool_name(t.as_ref());
                (lang.label(), module, ident)
            })
            .collect();
        let own = wanted.len();
        let new_source = t
            .namespace()
            .filter(|ns| !taken.contains_key(&source_key(ns)));
        if let Some(ns) = new_source {
            wanted.extend(
                Lang::ALL
                    .iter()
                    .map(|lang| (lang.label(), String::new(), lang.top_name(ns))),
            );
        }
        if let Some((i, first, language, ident)) = clash(&taken, &wanted) {
            let what = match new_source {
                Some(ns) if i >= own => format!("the module of its source `{ns}`"),
                _ => "its function".to_string(),
            };
            out.dropped.push(format!(
                "tool `{name}` left out: {what} would have the {language} name `{ident}`, \
                 which {first} has already"
            ));
            continue;
        }
        let mut wanted = wanted.into_iter();
        for k in wanted.by_ref().take(own) {
            taken.insert(k, format!("`{name}`"));
        }
        if let Some(ns) = new_source {
            for k in wanted {
                taken.insert(k, format!("the module of source `{ns}`"));
            }
            taken.insert(source_key(ns), String::new());
        }
        kept.push(t);
    }
    out.tools = kept.into_iter().cloned().collect();
    for u in unavailable {
        let ns = u.namespace.as_str();
        if taken.contains_key(&source_key(ns)) {
            // Its module exists already (with the tools of its last listing).
            continue;
        }
        let wanted: Vec<(&'static str, String, String)> = Lang::ALL
            .iter()
            .map(|lang| (lang.label(), String::new(), lang.top_name(ns)))
            .collect();
        if let Some((_, first, language, ident)) = clash(&taken, &wanted) {
            out.dropped.push(format!(
                "source `{ns}` left out: its module would have the {language} name `{ident}`, \
                 which {first} has already"
            ));
            continue;
        }
        for k in wanted {
            taken.insert(k, format!("the module of source `{ns}`"));
        }
        taken.insert(source_key(ns), String::new());
        out.unavailable.push(u.clone());
    }
    out
}

/// The names a generated module hands out, per module (`""` = the top
/// level): a second claim of one name is an error naming both claimants.
/// Shared by the Python, R and JavaScript generators.
#[derive(Debug)]
pub(crate) struct NameClaims {
    language: &'static str,
    seen: std::collections::HashMap<(String, String), String>,
}

impl NameClaims {
    /// Claims of the module of `language` (`Python`, `R`, `JavaScript`).
    pub(crate) fn new(language: &'static str) -> Self {
        Self {
            language,
            seen: std::collections::HashMap::new(),
        }
    }

    /// Claims `ident` in `module` for `what` (a tool or source name).
    ///
    /// # Errors
    /// [`StubError::SameIdentifier`] when it was claimed already.
    pub(crate) fn claim(
        &mut self,
        module: &str,
        ident: String,
        what: &str,
    ) -> Result<String, StubError> {
        if let Some(first) = self
            .seen
            .insert((module.to_string(), ident.clone()), what.to_string())
        {
            return Err(StubError::SameIdentifier {
                what: if module.is_empty() {
                    "tools".into()
                } else {
                    format!("tools of `{module}`")
                },
                language: self.language,
                first,
                second: what.to_string(),
                ident,
            });
        }
        Ok(ident)
    }
}

/// A source of tools whose tools are not known now (an MCP server that
/// failed to start): its submodule raises `ToolError` with `message` for any
/// name taken from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    /// The source's name (the submodule's).
    pub namespace: String,
    /// Why, for the cell (name the source and what to do).
    pub message: String,
}

/// The local part of a namespaced tool's name (`fs.read` → `read`).
fn local_name<'a>(tool: &'a dyn DynTool, namespace: &str) -> &'a str {
    tool.name()
        .strip_prefix(namespace)
        .and_then(|rest| rest.strip_prefix('.'))
        .unwrap_or(tool.name())
}

/// Generates `toolcell_tools.py` for `tools` (the kernel's enabled tools).
///
/// Tool and parameter names that are not Python identifiers are mapped
/// ([`python_function_name`], [`python_parameter_name`]); the host and the
/// tool always see the original names.
///
/// # Errors
/// [`StubError`] when two tools, or two parameters of a tool, map to the
/// same Python name.
pub fn stub_module(tools: &[Arc<dyn DynTool>]) -> Result<String, StubError> {
    stub_module_with(tools, &[])
}

/// [`stub_module`] with outside sources: a tool with a
/// [`namespace`](DynTool::namespace) `NAME` is a function of the submodule
/// `toolcell_tools.NAME` (also bound as `NAME` in the module, so a cell can
/// call `NAME.tool(...)`), and each [`Unavailable`] source is a submodule
/// that raises `ToolError` with its message.
///
/// # Errors
/// [`StubError::SameIdentifier`] when two tools of one module, two
/// parameters of a tool, or a source and a tool map to the same Python name.
pub fn stub_module_with(
    tools: &[Arc<dyn DynTool>],
    unavailable: &[Unavailable],
) -> Result<String, StubError> {
    use std::collections::BTreeMap;
    let mut out = String::with_capacity(PRELUDE.len() + tools.len() * 1024);
    out.push_str(PRELUDE);
    let mut all: Vec<String> = HELPERS.iter().map(|h| (*h).to_string()).collect();
    let mut names = NameClaims::new("Python");
    let mut claim = |module: &str, ident: String, what: &str| names.claim(module, ident, what);
    // Each tool with its Python function name.
    type Named<'a> = (&'a Arc<dyn DynTool>, String);
    let mut top: Vec<Named<'_>> = Vec::new();
    let mut spaces: BTreeMap<&str, Vec<Named<'_>>> = BTreeMap::new();
    for t in tools {
        match t.namespace() {
            None => {
                let ident = claim("", python_function_name(t.name()), t.name())?;
                all.push(ident.clone());
                top.push((t, ident));
            }
            Some(ns) => {
                let ident = claim(
                    ns,
                    python_function_name(local_name(t.as_ref(), ns)),
                    t.name(),
                )?;
                spaces.entry(ns).or_default().push((t, ident));
            }
        }
    }
    for members in spaces.values_mut() {
        members.sort_by(|a, b| a.1.cmp(&b.1));
    }
    let mut modules: Vec<(String, &str)> = Vec::new();
    for ns in spaces
        .keys()
        .copied()
        .chain(unavailable.iter().map(|u| u.namespace.as_str()))
    {
        if modules.iter().any(|(_, n)| *n == ns) {
            continue;
        }
        let ident = claim("", python_function_name(ns), &format!("source {ns}"))?;
        all.push(ident.clone());
        modules.push((ident, ns));
    }
    if !modules.is_empty() {
        // A package, so importers treat `toolcell_tools.NAME` as a submodule.
        out.push_str("\n\n__path__ = []\n");
    }
    out.push_str("\n\n__all__ = [");
    out.push_str(
        &all.iter()
            .map(|n| format!("{n:?}"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    out.push_str("]\n");
    for (ident, ns) in &modules {
        let doc = schema::python_literal(&format!("Tools of the source {ns:?}.").into());
        let lit = schema::python_literal(&ident.clone().into());
        let original = schema::python_literal(&(*ns).into());
        out.push_str("\n\n");
        if let Some(members) = spaces.get(ns) {
            let _ = writeln!(out, "def _source_{ident}():");
            for (t, fident) in members {
                for line in function(t.as_ref(), fident)?.lines() {
                    if line.is_empty() {
                        out.push('\n');
                    } else {
                        let _ = writeln!(out, "    {line}");
                    }
                }
                out.push('\n');
            }
            let names: Vec<&str> = members.iter().map(|(_, f)| f.as_str()).collect();
            let _ = writeln!(
                out,
                "    return _namespace({lit}, {doc}, [{}])\n\n\n{ident} = _source_{ident}()\ndel _source_{ident}",
                names.join(", ")
            );
        } else if let Some(u) = unavailable.iter().find(|u| u.namespace == *ns) {
            let msg = schema::python_literal(&u.message.clone().into());
            let _ = writeln!(
                out,
                "{ident} = _unavailable({lit}, {original}, {doc}, {msg})"
            );
        }
    }
    // After the sources, so that their temporary builders are gone
    // before any tool function is defined.
    for (t, ident) in &top {
        out.push_str("\n\n");
        out.push_str(&function(t.as_ref(), ident)?);
    }
    Ok(out)
}

#[cfg(test)]
mod name_tests {
    use super::*;

    #[test]
    fn names_map_to_python_identifiers() {
        for (name, ident) in [
            ("get-user", "get_user"),
            ("from", "from_"),
            ("2fa", "_2fa"),
            ("", "_"),
            ("naïve", "na_ve"),
            ("print", "print_"),
            ("retry", "retry_"),
            ("_call", "_call_"),
            ("__init__", "tool__init__"),
            ("__", "tool__"),
            ("read_file", "read_file"),
        ] {
            assert_eq!(python_function_name(name), ident, "{name}");
        }
        assert_eq!(python_parameter_name("__debug__"), "__debug___");
        assert_eq!(python_parameter_name("match"), "match");
        assert_eq!(python_parameter_name("None"), "None_");
        assert_eq!(python_parameter_name("class"), "class_");
        assert_eq!(python_parameter_name("_args"), "_args_");
        assert_eq!(python_parameter_name("type"), "type");
    }
}
