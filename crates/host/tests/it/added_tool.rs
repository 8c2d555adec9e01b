//! Adding a tool touches one file. The tool below is defined in this file
//! and registered with one `register_tool!` line — no list edited, no
//! `[tools] enabled` anywhere — and it is in the default enabled set, in
//! what `toolcell stubs`, `toolcell schema` and `toolcell tools` print (the
//! same calls those commands make, on a configuration discovered in an
//! empty directory), and callable from a real cell. A tool that opts out
//! with `DEFAULT_ENABLED = false` is registered and listed but not enabled.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::{Fixture, assert_success, show};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolcell_host::config::Config;
use toolcell_stubs::SchemaFormat;
use toolcell_tools::{Tool, ToolContext, ToolError, ToolRegistry};

// ---- the whole tool: -------------------------------------------------------

/// Arguments of `count_words`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CountArgs {
    /// The text whose words are counted.
    text: String,
}

/// Result of `count_words`.
#[derive(Debug, Serialize, JsonSchema)]
struct CountOutput {
    /// How many whitespace-separated words the text has.
    words: usize,
}

#[derive(Debug, Default)]
struct CountWords;

impl Tool for CountWords {
    const NAME: &'static str = "count_words";
    const DOC: &'static str = "Count the words of a text.";
    type Args = CountArgs;
    type Output = CountOutput;

    async fn call(&self, args: CountArgs, _cx: &ToolContext) -> Result<CountOutput, ToolError> {
        Ok(CountOutput {
            words: args.text.split_whitespace().count(),
        })
    }
}

toolcell_tools::register_tool!(CountWords);

// ---- a tool that is only enabled when a user names it: ---------------------

#[derive(Debug, Default)]
struct Shy;

impl Tool for Shy {
    const NAME: &'static str = "shy_tool";
    const DOC: &'static str = "Only runs when enabled by name.";
    const DEFAULT_ENABLED: bool = false;
    type Args = CountArgs;
    type Output = CountOutput;

    async fn call(&self, _args: CountArgs, _cx: &ToolContext) -> Result<CountOutput, ToolError> {
        Ok(CountOutput { words: 0 })
    }
}

toolcell_tools::register_tool!(Shy);

// ---------------------------------------------------------------------------

/// The configuration `toolcell` reads in a directory without a config file.
fn default_config() -> Config {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::discover_in(None, dir.path(), None).unwrap();
    let reg = ToolRegistry::builtin().unwrap();
    let known: Vec<&str> = reg.names().collect();
    config.validate_tools(&known).unwrap();
    config
}

#[test]
fn the_new_tool_is_enabled_by_default_without_any_list() {
    let config = default_config();
    let enabled = &config.tools.enabled;
    assert!(enabled.iter().any(|t| t == "count_words"), "{enabled:?}");
    assert!(enabled.iter().any(|t| t == "read_file"), "{enabled:?}");
    assert!(!enabled.iter().any(|t| t == "shy_tool"), "{enabled:?}");
    assert_eq!(enabled, &toolcell_host::config::default_tools());
}

#[test]
fn stubs_schema_and_tools_show_it() {
    let config = default_config();
    let reg = ToolRegistry::builtin().unwrap();

    // `toolcell stubs`
    let tools = reg.select(&config.tools.enabled).unwrap();
    let module = toolcell_stubs::python::stub_module(&tools).unwrap();
    assert!(
        module.contains("def count_words(text: str) -> Dict[str, Any]:"),
        "{module}"
    );
    assert!(!module.contains("def shy_tool("));

    // `toolcell schema`, each format
    for format in [
        SchemaFormat::OpenAi,
        SchemaFormat::Anthropic,
        SchemaFormat::Mcp,
    ] {
        let def = toolcell_stubs::execute_code_tool(&tools, &config.execute_code_options(), format);
        let text = def.to_string();
        assert!(
            text.contains("count_words(text: str) -> {words: int}: Count the words of a text."),
            "{format:?}: {text}"
        );
        assert!(!text.contains("shy_tool"), "{format:?}");
    }

    // `toolcell tools`: every registered tool, enabled or not.
    let listed: Vec<String> = reg
        .iter()
        .map(|t| {
            format!(
                "{}\n    {}",
                toolcell_stubs::signature(t.as_ref()),
                toolcell_stubs::summary(t.as_ref())
            )
        })
        .collect();
    assert!(
        listed
            .iter()
            .any(|l| l.starts_with("count_words(text: str)") && l.contains("Count the words")),
        "{listed:?}"
    );
    assert!(listed.iter().any(|l| l.starts_with("shy_tool(")));

    // Named explicitly, the opt-out tool is enabled like any other.
    let mut config = config;
    config
        .set_override_as("tools.enabled", "shy_tool,read_file", "--tools")
        .unwrap();
    let module =
        toolcell_stubs::python::stub_module(&reg.select(&config.tools.enabled).unwrap()).unwrap();
    assert!(module.contains("def shy_tool(") && !module.contains("def count_words("));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_calls_it_with_the_default_options() {
    let f = Fixture::new();
    let r = f
        .run(
            "from toolcell_tools import count_words\nprint(count_words('one two  three')['words'])",
        )
        .await;
    assert_success(&r);
    assert_eq!(r.output, "3\n", "{}", show(&r));
    // Not enabled: not in the stub module the kernel imports.
    let r = f.run("from toolcell_tools import shy_tool").await;
    assert!(
        show(&r).contains("cannot import name 'shy_tool'"),
        "{}",
        show(&r)
    );
}
