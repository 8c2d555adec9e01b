//! The `execute_code` definition in its three shapes (golden files for the
//! default configuration) and the per-tool JSON Schemas.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::golden;

use golden::check_golden;
use toolcell_stubs::{ExecuteCodeOptions, Mode, OnTimeout, SchemaFormat};
use toolcell_tools::ToolRegistry;

fn pretty(v: &serde_json::Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap();
    s.push('\n');
    s
}

/// The golden files hold every built-in tool, web tools included.
#[test]
fn default_configuration_golden_files() {
    let reg = ToolRegistry::builtin().unwrap();
    // The default `[tools] enabled`: derived from the registrations.
    let tools = reg
        .select(&toolcell_tools::default_enabled_tools())
        .unwrap();
    let opts = ExecuteCodeOptions::default();
    for (format, file) in [
        (SchemaFormat::OpenAi, "execute_code.openai.json"),
        (SchemaFormat::Anthropic, "execute_code.anthropic.json"),
        (SchemaFormat::Mcp, "execute_code.mcp.json"),
    ] {
        check_golden(
            file,
            &pretty(&toolcell_stubs::execute_code_tool(&tools, &opts, format)),
        );
    }
    let per_tool: Vec<_> = tools
        .iter()
        .map(|t| toolcell_stubs::tool_definition(t.as_ref()))
        .collect();
    check_golden("tools.json", &pretty(&serde_json::Value::Array(per_tool)));
}

#[test]
fn shapes_differ_only_in_wrapping() {
    let reg = ToolRegistry::builtin().unwrap();
    let tools = reg.select(&["read_file"]).unwrap();
    let opts = ExecuteCodeOptions::default();
    let openai = toolcell_stubs::execute_code_tool(&tools, &opts, SchemaFormat::OpenAi);
    let anthropic = toolcell_stubs::execute_code_tool(&tools, &opts, SchemaFormat::Anthropic);
    let mcp = toolcell_stubs::execute_code_tool(&tools, &opts, SchemaFormat::Mcp);
    assert_eq!(openai["type"], "function");
    assert_eq!(openai["function"]["name"], "execute_code");
    assert_eq!(openai["function"]["parameters"], anthropic["input_schema"]);
    assert_eq!(anthropic["input_schema"], mcp["inputSchema"]);
    assert_eq!(mcp["inputSchema"]["required"], serde_json::json!(["code"]));
    assert_eq!(mcp["inputSchema"]["properties"]["reset"]["type"], "boolean");
}

#[test]
fn the_description_lists_only_enabled_tools_with_signatures() {
    let reg = ToolRegistry::builtin().unwrap();
    let tools = reg.select(&["read_file", "terminal"]).unwrap();
    let d = toolcell_stubs::execute_code_description(&tools, &ExecuteCodeOptions::default());
    assert!(
        d.contains("read_file(path: str, offset: int = 1, limit: int = 2000) -> {content: str, total_lines: int, truncated: bool}"),
        "{d}"
    );
    assert!(d.contains("- terminal(command: str"), "{d}");
    assert!(!d.contains("web_search"), "{d}");
    assert!(!d.contains("write_file("), "{d}");
}

#[test]
fn mode_and_timeout_policy_change_the_description() {
    let strict = ExecuteCodeOptions {
        mode: Mode::Strict,
        on_timeout: OnTimeout::Kill,
        ..ExecuteCodeOptions::default()
    };
    let d = toolcell_stubs::execute_code_description(&[], &strict);
    assert!(d.contains("private temporary directory"), "{d}");
    assert!(d.contains("killed and all state is lost"), "{d}");
    let d = toolcell_stubs::execute_code_description(&[], &ExecuteCodeOptions::default());
    assert!(d.contains("project directory"), "{d}");
    assert!(d.contains("state are kept"), "{d}");
    assert!(d.contains("persist"), "{d}");
}

#[test]
fn every_tool_schema_is_an_object_schema_without_refs() {
    let reg = ToolRegistry::builtin().unwrap();
    for t in reg.iter() {
        let s = t.args_schema();
        assert_eq!(s["type"], "object", "{}", t.name());
        let text = s.to_string();
        assert!(!text.contains("$ref"), "{}: {text}", t.name());
        assert!(!text.contains("$schema"), "{}", t.name());
    }
}
