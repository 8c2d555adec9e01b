//! The generated Python stub module `toolcell_tools` (SPEC §8).
//!
//! The module is the static prelude (`stub/prelude.py`: `ToolError`, the
//! SPEC §7 client, `json_parse`, `shell_quote`, `retry`) followed by one
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

/// Why a stub could not be generated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StubError {
    /// A tool or parameter name cannot be a Python identifier.
    #[error("{0} `{1}` is a Python keyword or a name the stub module reserves; rename it")]
    ReservedName(&'static str, String),
}

fn reserved(name: &str) -> bool {
    PY_KEYWORDS.contains(&name) || HELPERS.contains(&name) || name.starts_with('_')
}

/// Escapes text for a `"""` docstring.
fn docstring(text: &str) -> String {
    text.replace('\\', "\\\\").replace("\"\"\"", "\\\"\\\"\\\"")
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

fn function(tool: &dyn DynTool) -> Result<String, StubError> {
    let name = tool.name();
    if reserved(name) {
        return Err(StubError::ReservedName("tool name", name.to_string()));
    }
    let params: Vec<Param> = schema::params(tool);
    for p in &params {
        if PY_KEYWORDS.contains(&p.name.as_str()) {
            return Err(StubError::ReservedName("parameter", p.name.clone()));
        }
    }
    let sig: Vec<String> = params
        .iter()
        .map(|p| match &p.default {
            None => format!("{}: {}", p.name, p.hint),
            Some(d) => format!("{}: {} = {}", p.name, p.hint, schema::python_literal(d)),
        })
        .collect();
    let mut f = String::new();
    let _ = writeln!(f, "def {name}({}) -> Dict[str, Any]:", sig.join(", "));
    let mut doc = wrap(tool.doc().trim(), "", "", 84);
    if !params.is_empty() {
        doc.push_str("\nArgs:\n");
        for p in &params {
            let desc = p
                .description
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            doc.push_str(&wrap(
                &format!("{} ({}): {desc}", p.name, p.hint),
                "    ",
                "        ",
                84,
            ));
        }
    }
    doc.push_str("\nReturns:\n");
    doc.push_str(&wrap(
        &schema::shape(&tool.output_schema()),
        "    ",
        "        ",
        84,
    ));
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
    let args: Vec<String> = params
        .iter()
        .map(|p| {
            format!(
                "{}: {}",
                schema::python_literal(&p.name.clone().into()),
                p.name
            )
        })
        .collect();
    let _ = writeln!(f, "    return _call({:?}, {{{}}})", name, args.join(", "));
    Ok(f)
}

/// Generates `toolcell_tools.py` for `tools` (the kernel's enabled tools).
///
/// # Errors
/// [`StubError`] when a tool's name or a parameter name cannot be used in
/// Python.
pub fn stub_module(tools: &[Arc<dyn DynTool>]) -> Result<String, StubError> {
    let mut out = String::with_capacity(PRELUDE.len() + tools.len() * 1024);
    out.push_str(PRELUDE);
    let mut all: Vec<&str> = HELPERS.to_vec();
    all.extend(tools.iter().map(|t| t.name()));
    out.push_str("\n\n__all__ = [");
    out.push_str(
        &all.iter()
            .map(|n| format!("{n:?}"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    out.push_str("]\n");
    for t in tools {
        out.push_str("\n\n");
        out.push_str(&function(t.as_ref())?);
    }
    Ok(out)
}
