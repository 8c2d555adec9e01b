//! The generated R stub module (`toolcell_tools.R`; docs/languages.md, "R"):
//! the prelude (`stub/prelude.R`: `ToolError`, the in-band call, `json_parse`,
//! `shell_quote`, `retry`) and one function per enabled tool, its formals and
//! defaults from the tool's JSON Schema: `read_file(path = "x")` returns the
//! result as a list. Tools of an outside source `NAME` are the members of an
//! environment `NAME` (`NAME$tool(...)`).
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::Value;
use toolcell_tools::DynTool;
use toolcell_tools::names::{StubError, Unavailable, r_function_name, r_identifier};
use toolcell_tools::schema::{self, Param};

/// The hand-written part of the module.
pub const PRELUDE: &str = include_str!("stub/prelude.R");

/// A JSON value as an R literal (scalars; `NULL` for anything else, which
/// then is not sent and the tool's own default applies).
fn r_literal(v: &Value) -> String {
    match v {
        Value::Bool(true) => "TRUE".into(),
        Value::Bool(false) => "FALSE".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => r_string(s),
        _ => "NULL".into(),
    }
}

/// An R string literal (double quotes, escapes for `\`, `"` and controls).
pub fn r_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:04x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn comment(text: &str, out: &mut String) {
    for line in text.lines() {
        let line: String = line.chars().filter(|c| !c.is_control()).collect();
        let _ = writeln!(out, "#' {}", line.trim_end());
    }
}

fn is_array(p: &Param) -> bool {
    let h = p.hint.to_ascii_lowercase();
    h.starts_with("list[") || h.starts_with("optional[list[") || h == "list"
}

fn function(tool: &dyn DynTool, ident: &str, indent: &str) -> Result<String, StubError> {
    let params = schema::params(tool);
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut names = Vec::new();
    for p in &params {
        let n = r_identifier(&p.key);
        if let Some(first) = seen.insert(n.clone(), p.key.clone()) {
            return Err(StubError::SameIdentifier {
                what: format!("properties of tool `{}`", tool.name()),
                language: "R",
                first,
                second: p.key.clone(),
                ident: n,
            });
        }
        names.push(n);
    }
    let mut f = String::new();
    let mut doc = tool.doc().trim().to_string();
    if doc.is_empty() {
        doc = format!("Call the host tool {}.", tool.name());
    }
    let mut text = doc;
    for (p, n) in params.iter().zip(&names) {
        let desc = p
            .description
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let _ = write!(text, "\n@param {n} {desc}");
    }
    let _ = write!(
        text,
        "\n@return {}\n@section Errors: stops with a ToolError condition when the host refuses the call or the tool fails.",
        schema::shape(&tool.output_schema())
    );
    let mut c = String::new();
    comment(&text, &mut c);
    for line in c.lines() {
        let _ = writeln!(f, "{indent}{line}");
    }
    let formals: Vec<String> = params
        .iter()
        .zip(&names)
        .map(|(p, n)| match &p.default {
            Some(d) => format!("{n} = {}", r_literal(d)),
            None if p.omit_if_none || p.hint.starts_with("Optional[") => format!("{n} = NULL"),
            None => n.clone(),
        })
        .collect();
    let sent: Vec<String> = params
        .iter()
        .zip(&names)
        .map(|(p, n)| {
            let v = if is_array(p) {
                format!("if (base::is.null({n})) NULL else base::I({n})")
            } else {
                n.clone()
            };
            format!("{} = {v}", r_name_literal(&p.key))
        })
        .collect();
    let _ = writeln!(
        f,
        "{indent}{ident} <- function({}) {{\n{indent}  .toolcell_call({}, base::list({}))\n{indent}}}",
        formals.join(", "),
        r_string(tool.name()),
        sent.join(", ")
    );
    Ok(f)
}

/// A list element name: bare when it is a syntactic name, else backquoted.
fn r_name_literal(key: &str) -> String {
    if r_identifier(key) == key {
        key.to_string()
    } else {
        format!("`{}`", key.replace('\\', "\\\\").replace('`', "\\`"))
    }
}

/// Generates `toolcell_tools.R` for `tools` and the outside sources that
/// are down (`unavailable`: `NAME$anything(...)` stops with its message).
///
/// # Errors
/// [`StubError::SameIdentifier`] when two tools (or two parameters of a
/// tool, or a source and a tool) map to one R name.
pub fn stub_module(
    tools: &[Arc<dyn DynTool>],
    unavailable: &[Unavailable],
) -> Result<String, StubError> {
    crate::skeleton::generate::<R>(tools, unavailable)
}

/// R's parts of the stub module skeleton.
struct R;

impl crate::skeleton::Emit for R {
    const LANGUAGE: &'static str = "R";
    const PRELUDE: &'static str = PRELUDE;

    fn top_name(name: &str) -> String {
        r_function_name(name)
    }

    fn member_name(name: &str) -> String {
        r_identifier(name)
    }

    fn tool(out: &mut String, tool: &dyn DynTool, ident: &str) -> Result<(), StubError> {
        out.push('\n');
        out.push_str(&function(tool, ident, "")?);
        Ok(())
    }

    fn source(
        out: &mut String,
        ns: &str,
        ident: &str,
        members: &[crate::skeleton::Named<'_>],
    ) -> Result<(), StubError> {
        let _ = writeln!(out, "\n# Tools of {ns}: {ident}$tool(...)");
        let _ = writeln!(
            out,
            "{ident} <- local({{\n  .ns <- new.env(parent = parent.frame())"
        );
        for (t, local) in members {
            out.push_str(&function(t.as_ref(), &format!(".ns${local}"), "  ")?);
        }
        out.push_str("  .ns\n})\n");
        Ok(())
    }

    fn unavailable(out: &mut String, source: &Unavailable, ident: &str) {
        let _ = writeln!(
            out,
            "\n{ident} <- .toolcell_unavailable({}, {})",
            r_string(&source.namespace),
            r_string(&source.message)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_escape() {
        assert_eq!(r_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
    }
}
