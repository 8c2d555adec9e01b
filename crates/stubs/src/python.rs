//! The generated Python stub module `toolcell_tools` (docs/protocol.md,
//! "The Python side").
//!
//! The module is the static prelude (`stub/prelude.py`: `ToolError`, the tool
//! socket client, `json_parse`, `shell_quote`, `retry`) followed by one
//! function per enabled tool, whose signature, type hints, defaults and
//! docstring come from the tool's JSON Schema and doc.

use std::fmt::Write as _;
use std::sync::Arc;

use toolcell_tools::DynTool;
use toolcell_tools::names::{HELPERS, Lang, StubError, Unavailable, python_function_name};
use toolcell_tools::schema::{self, Param};
use toolcell_tools::screen::check_params_in;

use crate::skeleton::{Named, Plan};

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
    crate::skeleton::generate::<Py>(tools, unavailable)
}

struct Py;

impl crate::skeleton::Emit for Py {
    const LANGUAGE: &'static str = "Python";
    const PRELUDE: &'static str = PRELUDE;
    const MEMBERS_BY_IDENT: bool = true;

    fn top_name(name: &str) -> String {
        python_function_name(name)
    }

    fn member_name(name: &str) -> String {
        python_function_name(name)
    }

    fn tool(out: &mut String, tool: &dyn DynTool, ident: &str) -> Result<(), StubError> {
        out.push_str("\n\n");
        out.push_str(&function(tool, ident)?);
        Ok(())
    }

    fn source(
        out: &mut String,
        ns: &str,
        ident: &str,
        members: &[Named<'_>],
    ) -> Result<(), StubError> {
        let _ = writeln!(out, "\n\ndef _source_{ident}():");
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
            "    return _namespace({}, {}, [{}])\n\n\n{ident} = _source_{ident}()\ndel _source_{ident}",
            schema::python_literal(&ident.to_string().into()),
            source_doc(ns),
            names.join(", ")
        );
        Ok(())
    }

    fn unavailable(out: &mut String, source: &Unavailable, ident: &str) {
        let _ = writeln!(
            out,
            "\n\n{ident} = _unavailable({}, {}, {}, {})",
            schema::python_literal(&ident.to_string().into()),
            schema::python_literal(&source.namespace.clone().into()),
            source_doc(&source.namespace),
            schema::python_literal(&source.message.clone().into())
        );
    }

    /// `__all__` first (so every name is claimed before any is written),
    /// then the source modules, then the top-level functions: after the
    /// sources, so that their temporary builders are gone before any tool
    /// function is defined.
    fn module(plan: &Plan<'_>) -> Result<String, StubError> {
        let mut out = String::with_capacity(PRELUDE.len() + plan.top.len() * 1024);
        out.push_str(PRELUDE);
        if !plan.sources.is_empty() {
            // A package, so importers treat `toolcell_tools.NAME` as a submodule.
            out.push_str("\n\n__path__ = []\n");
        }
        let all: Vec<String> = HELPERS
            .iter()
            .map(|h| (*h).to_string())
            .chain(plan.top.iter().map(|(_, ident)| ident.clone()))
            .chain(plan.sources.iter().map(|s| s.ident.clone()))
            .map(|n| format!("{n:?}"))
            .collect();
        let _ = writeln!(out, "\n\n__all__ = [{}]", all.join(", "));
        for s in &plan.sources {
            match &s.members {
                Ok(members) => Self::source(&mut out, s.ns, &s.ident, members)?,
                Err(down) => Self::unavailable(&mut out, down, &s.ident),
            }
        }
        for (t, ident) in &plan.top {
            Self::tool(&mut out, t.as_ref(), ident)?;
        }
        Ok(out)
    }
}

/// The docstring of a source's module.
fn source_doc(ns: &str) -> String {
    schema::python_literal(&format!("Tools of the source {ns:?}.").into())
}
