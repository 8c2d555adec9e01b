//! How each stub language names a tool, a source and a parameter: the
//! identifier rules of Python, R and JavaScript and the names each
//! language's stub module reserves, as pure functions of a name. Which
//! tools fit together under these names is [`crate::screen`]'s job; the
//! generators (the `toolcell-stubs` crate) claim the names
//! ([`NameClaims`]) while they write a module.

use std::collections::HashSet;
use std::sync::LazyLock;

/// Names every stub module (Python, R, JavaScript) defines besides the
/// tools.
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
    "_SPIN_SECONDS",
    "_CONTENDED",
    "_spin",
    "_spin_pause",
    "_spin_for_reply",
    "_yield",
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

/// The languages stub modules are generated for, and how each names a
/// tool, a source and a parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    Python,
    R,
    JavaScript,
}

impl Lang {
    pub const ALL: [Lang; 3] = [Lang::Python, Lang::R, Lang::JavaScript];

    pub fn label(self) -> &'static str {
        match self {
            Lang::Python => "Python",
            Lang::R => "R",
            Lang::JavaScript => "JavaScript",
        }
    }

    /// The name of a top-level tool or of a source's module.
    pub fn top_name(self, name: &str) -> String {
        match self {
            Lang::Python => python_function_name(name),
            Lang::R => r_function_name(name),
            Lang::JavaScript => js_identifier(name),
        }
    }

    /// The name of a source's tool inside the source's module.
    pub fn member_name(self, name: &str) -> String {
        match self {
            Lang::Python => python_function_name(name),
            Lang::R => r_identifier(name),
            Lang::JavaScript => js_member_name(name),
        }
    }

    /// The name of a parameter (`None`: the language passes the property
    /// names themselves, JavaScript's object of arguments).
    pub fn param_name(self, key: &str) -> Option<String> {
        match self {
            Lang::Python => Some(python_parameter_name(key)),
            Lang::R => Some(r_identifier(key)),
            Lang::JavaScript => None,
        }
    }
}

/// The names a top-level tool (or a source's module) called `name` has in
/// Python, R and JavaScript: `[("Python", …), ("R", …), ("JavaScript", …)]`.
/// Two names clash when they share an entry.
pub fn top_level_names(name: &str) -> [(&'static str, String); 3] {
    Lang::ALL.map(|lang| (lang.label(), lang.top_name(name)))
}

/// The names a generated module hands out, per module (`""` = the top
/// level): a second claim of one name is an error naming both claimants.
/// Shared by the Python, R and JavaScript generators.
#[derive(Debug)]
pub struct NameClaims {
    language: &'static str,
    seen: std::collections::HashMap<(String, String), String>,
}

impl NameClaims {
    /// Claims of the module of `language` (`Python`, `R`, `JavaScript`).
    pub fn new(language: &'static str) -> Self {
        Self {
            language,
            seen: std::collections::HashMap::new(),
        }
    }

    /// Claims `ident` in `module` for `what` (a tool or source name).
    ///
    /// # Errors
    /// [`StubError::SameIdentifier`] when it was claimed already.
    pub fn claim(&mut self, module: &str, ident: String, what: &str) -> Result<String, StubError> {
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

const JS_RESERVED: [&str; 48] = [
    "await",
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "debugger",
    "default",
    "delete",
    "do",
    "else",
    "enum",
    "export",
    "extends",
    "false",
    "finally",
    "for",
    "function",
    "if",
    "implements",
    "import",
    "in",
    "instanceof",
    "interface",
    "let",
    "new",
    "null",
    "package",
    "private",
    "protected",
    "public",
    "return",
    "static",
    "super",
    "switch",
    "this",
    "throw",
    "true",
    "try",
    "typeof",
    "var",
    "void",
    "while",
    "with",
    "yield",
    "arguments",
    "eval",
];

/// The globals of a node kernel, the members of `Object.prototype` and
/// `then` (one a line, `#` comments): a top-level tool never takes one.
const JS_GLOBALS: &str = include_str!("reserved/js_globals.txt");

/// Names an object's own member must not have: the members of
/// `Object.prototype` (`toString`, `valueOf`: string conversion would call
/// the tool), `toJSON` (`JSON.stringify`) and `then` (an object with a
/// `then` method is a thenable: `await` on it would never settle).
const PROTOCOL_NAMES: [&str; 14] = [
    "__defineGetter__",
    "__defineSetter__",
    "__lookupGetter__",
    "__lookupSetter__",
    "__proto__",
    "constructor",
    "hasOwnProperty",
    "isPrototypeOf",
    "propertyIsEnumerable",
    "then",
    "toJSON",
    "toLocaleString",
    "toString",
    "valueOf",
];

fn globals() -> &'static HashSet<&'static str> {
    static SET: LazyLock<HashSet<&'static str>> = LazyLock::new(|| {
        JS_GLOBALS
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect()
    });
    &SET
}

/// Whether `name` is a global of a node kernel (or a name the runner or
/// `Object.prototype` already uses) that a top-level tool must not replace.
pub fn is_reserved_global(name: &str) -> bool {
    globals().contains(name) || PROTOCOL_NAMES.contains(&name)
}

/// `name` with every character outside `[A-Za-z0-9_$]` as `_` and a
/// leading digit (or an empty name) behind a `_`.
fn js_syntax(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '$' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// `name` as the JavaScript name of a top-level tool or source: characters
/// outside `[A-Za-z0-9_$]` become `_`, a leading digit gets a `_` prefix,
/// and a reserved word, a helper's name, a global of the kernel (`Array`,
/// `Error`, `JSON`, `console`, `fetch`, the built-in modules `node -e`
/// exposes such as `fs` and `path`, …), a member of `Object.prototype` or
/// `then` gets `_` suffixes until it is none of them: `delete` → `delete_`,
/// `Map` → `Map_`, `fs` → `fs_`. Tools are copied onto the global object,
/// so a tool must never replace what the kernel and ordinary code use.
pub fn js_identifier(name: &str) -> String {
    let mut out = js_syntax(name);
    while JS_RESERVED.contains(&out.as_str())
        || HELPERS.contains(&out.as_str())
        || is_reserved_global(&out)
    {
        out.push('_');
    }
    out
}

/// The member name of a source's tool (`await NAME.member({...})`): as
/// [`js_identifier`] for the characters and reserved words, and a `_`
/// suffix for the names an object must keep for itself (`then`,
/// `toString`, `valueOf`, `constructor`, `__proto__`, …); globals are fine
/// here (`fetch.fetch`).
pub fn js_member_name(name: &str) -> String {
    let mut out = js_syntax(name);
    while JS_RESERVED.contains(&out.as_str()) || PROTOCOL_NAMES.contains(&out.as_str()) {
        out.push('_');
    }
    out
}

const R_RESERVED: [&str; 20] = [
    "if",
    "else",
    "repeat",
    "while",
    "function",
    "for",
    "next",
    "break",
    "TRUE",
    "FALSE",
    "NULL",
    "Inf",
    "NaN",
    "NA",
    "NA_integer_",
    "NA_real_",
    "NA_character_",
    "NA_complex_",
    "in",
    "T",
];

/// The names the packages on R's default search path export (one a line,
/// `#` comments): a top-level tool never takes one.
const R_NAMES: &str = include_str!("reserved/r_names.txt");

fn r_names() -> &'static HashSet<&'static str> {
    static SET: LazyLock<HashSet<&'static str>> = LazyLock::new(|| {
        R_NAMES
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect()
    });
    &SET
}

/// Whether `name` is exported by a package on R's default search path
/// (base, methods, utils, grDevices, graphics, stats, datasets).
pub fn is_r_builtin(name: &str) -> bool {
    r_names().contains(name)
}

/// `name` as an R name: characters outside `[A-Za-z0-9._]` become `_`, a
/// name not starting with a letter gets a `t` prefix, a reserved word (or
/// a helper's name) gets a `_` suffix. For parameters and a source's
/// members (`NAME$member`), which shadow nothing.
pub fn r_identifier(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if !out.starts_with(|c: char| c.is_ascii_alphabetic()) {
        out.insert(0, 't');
    }
    while R_RESERVED.contains(&out.as_str()) || HELPERS.contains(&out.as_str()) {
        out.push('_');
    }
    out
}

/// The R name of a top-level tool or source: its [`r_identifier`], with
/// `_` suffixes while that is a name a package on R's default search path
/// exports (`c` → `c_`, `paste0` → `paste0_`, `print` → `print_`). The
/// tools are attached before those packages on the search path, so a tool
/// named like one would replace it for every cell (and for the stub
/// module's own helpers).
pub fn r_function_name(name: &str) -> String {
    let mut out = r_identifier(name);
    while is_r_builtin(&out)
        || R_RESERVED.contains(&out.as_str())
        || HELPERS.contains(&out.as_str())
    {
        out.push('_');
    }
    out
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn js_identifiers() {
        assert_eq!(js_identifier("read_file"), "read_file");
        assert_eq!(js_identifier("get-user"), "get_user");
        assert_eq!(js_identifier("2fa"), "_2fa");
        assert_eq!(js_identifier("delete"), "delete_");
        assert_eq!(js_identifier("retry"), "retry_");
    }

    #[test]
    fn review_09_top_level_names_never_take_kernel_globals_and_members_never_then() {
        for (name, ident) in [
            ("Array", "Array_"),
            ("Error", "Error_"),
            ("Map", "Map_"),
            ("JSON", "JSON_"),
            ("console", "console_"),
            ("Promise", "Promise_"),
            ("then", "then_"),
            ("__proto__", "__proto___"),
            ("fs", "fs_"),
            ("toolcell_tools", "toolcell_tools_"),
        ] {
            assert_eq!(js_identifier(name), ident, "{name}");
        }
        assert_eq!(js_member_name("then"), "then_");
        assert_eq!(js_member_name("toString"), "toString_");
        assert_eq!(js_member_name("fetch"), "fetch");
        assert_eq!(js_member_name("delete"), "delete_");
        assert_eq!(js_member_name("get-user"), "get_user");
    }

    #[test]
    fn r_identifiers() {
        assert_eq!(r_identifier("read_file"), "read_file");
        assert_eq!(r_identifier("get-user"), "get_user");
        assert_eq!(r_identifier("2fa"), "t2fa");
        assert_eq!(r_identifier("_x"), "t_x");
        assert_eq!(r_identifier("if"), "if_");
        assert_eq!(r_identifier("retry"), "retry_");
    }

    #[test]
    fn review_09_top_level_names_never_take_r_builtins() {
        for (name, ident) in [
            ("c", "c_"),
            ("paste0", "paste0_"),
            ("print", "print_"),
            ("cat", "cat_"),
            ("F", "F_"),
            ("T", "T_"),
            ("read_file", "read_file"),
            ("get-user", "get_user"),
        ] {
            assert_eq!(r_function_name(name), ident, "{name}");
        }
        // Parameters and members shadow nothing.
        assert_eq!(r_identifier("c"), "c");
    }
}
