//! The generated Python stub module `toolcell_tools` (docs/protocol.md,
//! "The Python side").
//!
//! The module is the static prelude (`stub/prelude.py`: `ToolError`, the tool
//! socket client, `json_parse`, `shell_quote`, `retry`) followed by one
//! function per enabled tool, whose signature, type hints, defaults and
//! docstring come from the tool's JSON Schema and doc.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use toolcell_tools::DynTool;
use toolcell_tools::names::{
    HELPERS, Lang, NameClaims, StubError, Unavailable, python_function_name,
};
use toolcell_tools::schema::{self, Param};
use toolcell_tools::screen::{check_params_in, local_name};

/// The hand-written part of the module.
pub const PRELUDE: &str = include_str!("stub/prelude.py");

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
