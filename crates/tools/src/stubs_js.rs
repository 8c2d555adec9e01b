//! The generated JavaScript stub module (`toolcell_tools.js`;
//! docs/languages.md, "JavaScript"): the prelude (`stub/prelude.js`:
//! `ToolError`, the in-band call, `json_parse`, `shell_quote`, `retry`) and one
//! async function per enabled tool taking one object of arguments:
//! `await read_file({path: "x"})` resolves to the result object. Tools of an
//! outside source `NAME` are the methods of an object `NAME`
//! (`await NAME.tool({...})`).

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::sync::{Arc, LazyLock};

use crate::schema;
use crate::stubs::{StubError, Unavailable};
use crate::tool::DynTool;

/// The hand-written part of the module.
pub const PRELUDE: &str = include_str!("stub/prelude.js");

/// Names the module exports besides the tools.
pub const HELPERS: [&str; 4] = ["ToolError", "json_parse", "shell_quote", "retry"];

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
const JS_GLOBALS: &str = include_str!("stub/js_globals.txt");

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

/// A JavaScript string literal (JSON's, which JavaScript reads as is).
fn js_string(s: &str) -> String {
    serde_json::to_string(s)
        .unwrap_or_else(|_| "\"\"".into())
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

fn doc_comment(tool: &dyn DynTool, indent: &str) -> String {
    let mut text = tool.doc().trim().to_string();
    if text.is_empty() {
        text = format!("Call the host tool {}.", tool.name());
    }
    for p in schema::params(tool) {
        let desc = p
            .description
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let default = p
            .default
            .as_ref()
            .map(|d| format!(" (default {d})"))
            .unwrap_or_default();
        let opt = if p.default.is_some() || p.omit_if_none {
            format!("[args.{}]", p.key)
        } else {
            format!("args.{}", p.key)
        };
        let _ = write!(text, "\n@param {{{}}} {opt} {desc}{default}", p.hint);
    }
    let _ = write!(
        text,
        "\n@returns {{Promise<object>}} {}\n@throws {{ToolError}} the host refused the call or the tool failed.",
        schema::shape(&tool.output_schema())
    );
    let mut out = format!("{indent}/**\n");
    for line in text.lines() {
        let line = line.replace("*/", "* /");
        let _ = writeln!(out, "{indent} * {}", line.trim_end());
    }
    let _ = writeln!(out, "{indent} */");
    out
}

/// Generates `toolcell_tools.js` (a CommonJS module body) for `tools` and
/// the outside sources that are down (`NAME.anything()` rejects with its
/// message).
///
/// # Errors
/// [`StubError::SameIdentifier`] when two tools (or a source and a tool)
/// map to one identifier.
pub fn stub_module(
    tools: &[Arc<dyn DynTool>],
    unavailable: &[Unavailable],
) -> Result<String, StubError> {
    let mut out = String::with_capacity(PRELUDE.len() + tools.len() * 1024);
    out.push_str(PRELUDE);
    let mut names = crate::stubs::NameClaims::new("JavaScript");
    let mut claim = |module: &str, ident: String, what: &str| names.claim(module, ident, what);
    let mut spaces: BTreeMap<&str, Vec<&Arc<dyn DynTool>>> = BTreeMap::new();
    for t in tools {
        match t.namespace() {
            None => {
                let ident = claim("", js_identifier(t.name()), t.name())?;
                out.push('\n');
                out.push_str(&doc_comment(t.as_ref(), ""));
                let _ = writeln!(
                    out,
                    "module.exports.{ident} = async function {ident}(args) {{ return __call({}, args); }};",
                    js_string(t.name())
                );
            }
            Some(ns) => spaces.entry(ns).or_default().push(t),
        }
    }
    for (ns, members) in &spaces {
        let ident = claim("", js_identifier(ns), &format!("source {ns}"))?;
        let _ = writeln!(out, "\n// Tools of {ns}: await {ident}.tool({{...}})");
        let _ = writeln!(out, "module.exports.{ident} = {{");
        let mut sorted = members.clone();
        sorted.sort_by(|a, b| a.name().cmp(b.name()));
        for t in sorted {
            let local = t
                .name()
                .strip_prefix(ns)
                .and_then(|r| r.strip_prefix('.'))
                .unwrap_or(t.name());
            let local = claim(ns, js_member_name(local), t.name())?;
            out.push_str(&doc_comment(t.as_ref(), "  "));
            let _ = writeln!(
                out,
                "  {local}(args) {{ return __call({}, args); }},",
                js_string(t.name())
            );
        }
        out.push_str("};\n");
    }
    for u in unavailable {
        if spaces.contains_key(u.namespace.as_str()) {
            continue;
        }
        let ident = claim(
            "",
            js_identifier(&u.namespace),
            &format!("source {}", u.namespace),
        )?;
        let _ = writeln!(
            out,
            "\nmodule.exports.{ident} = unavailable({}, {});",
            js_string(&u.namespace),
            js_string(&u.message)
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
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
}
