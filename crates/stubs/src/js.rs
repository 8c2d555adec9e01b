//! The generated JavaScript stub module (`toolcell_tools.js`;
//! docs/languages.md, "JavaScript"): the prelude (`stub/prelude.js`: `ToolError`, the in-band call,
//! `json_parse`, `shell_quote`, `retry`) and one async function per enabled
//! tool taking one object of arguments: `await read_file({path: "x"})`
//! resolves to the result object. Tools of an outside source `NAME` are
//! the methods of an object `NAME` (`await NAME.tool({...})`).

use std::fmt::Write as _;
use std::sync::Arc;

use toolcell_tools::DynTool;
use toolcell_tools::names::{StubError, Unavailable, js_identifier, js_member_name};
use toolcell_tools::schema;

/// The hand-written part of the module.
pub const PRELUDE: &str = include_str!("stub/prelude.js");

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
    crate::skeleton::generate::<Js>(tools, unavailable)
}

/// JavaScript's parts of the stub module skeleton.
struct Js;

impl crate::skeleton::Emit for Js {
    const LANGUAGE: &'static str = "JavaScript";
    const PRELUDE: &'static str = PRELUDE;

    fn top_name(name: &str) -> String {
        js_identifier(name)
    }

    fn member_name(name: &str) -> String {
        js_member_name(name)
    }

    fn tool(out: &mut String, tool: &dyn DynTool, ident: &str) -> Result<(), StubError> {
        out.push('\n');
        out.push_str(&doc_comment(tool, ""));
        let _ = writeln!(
            out,
            "module.exports.{ident} = async function {ident}(args) {{ return __call({}, args); }};",
            js_string(tool.name())
        );
        Ok(())
    }

    fn source(
        out: &mut String,
        ns: &str,
        ident: &str,
        members: &[crate::skeleton::Named<'_>],
    ) -> Result<(), StubError> {
        let _ = writeln!(out, "\n// Tools of {ns}: await {ident}.tool({{...}})");
        let _ = writeln!(out, "module.exports.{ident} = {{");
        for (t, local) in members {
            out.push_str(&doc_comment(t.as_ref(), "  "));
            let _ = writeln!(
                out,
                "  {local}(args) {{ return __call({}, args); }},",
                js_string(t.name())
            );
        }
        out.push_str("};\n");
        Ok(())
    }

    fn unavailable(out: &mut String, source: &Unavailable, ident: &str) {
        let _ = writeln!(
            out,
            "\nmodule.exports.{ident} = unavailable({}, {});",
            js_string(&source.namespace),
            js_string(&source.message)
        );
    }
}
