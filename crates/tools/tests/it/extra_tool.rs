//! A tool defined in another crate (this test crate), in one place with one
//! `register_tool!`, shows up in the registry, the stub module, the
//! `execute_code` schema and its own JSON Schema — nothing else touched.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolcell_stubs::{ExecuteCodeOptions, SchemaFormat};
use toolcell_tools::{Tool, ToolContext, ToolError, ToolRegistry, ToolSettings, erase};

// ---- the whole tool: ------------------------------------------------------

/// Arguments of `shout`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ShoutArgs {
    /// Text to shout.
    text: String,
    /// How many exclamation marks.
    #[serde(default = "three")]
    marks: u32,
}

fn three() -> u32 {
    3
}

/// Result of `shout`.
#[derive(Debug, Serialize, JsonSchema)]
struct ShoutOutput {
    /// The text in capitals.
    loud: String,
}

#[derive(Debug, Default)]
struct Shout;

impl Tool for Shout {
    const NAME: &'static str = "shout";
    const DOC: &'static str = "Say something loudly.";
    type Args = ShoutArgs;
    type Output = ShoutOutput;

    async fn call(&self, args: ShoutArgs, _cx: &ToolContext) -> Result<ShoutOutput, ToolError> {
        Ok(ShoutOutput {
            loud: format!(
                "{}{}",
                args.text.to_uppercase(),
                "!".repeat(args.marks as usize)
            ),
        })
    }
}

toolcell_tools::register_tool!(Shout);

// ---- a file tool outside the crate, as CONTRIBUTING.md describes: -----------

/// Arguments of `count_lines`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CountLinesArgs {
    /// The file, relative to the session's working directory.
    path: String,
}

/// Result of `count_lines`.
#[derive(Debug, Serialize, JsonSchema)]
struct CountLinesOutput {
    /// Newlines in the file.
    lines: usize,
}

#[derive(Debug, Default)]
struct CountLines;

impl Tool for CountLines {
    const NAME: &'static str = "count_lines";
    const DOC: &'static str = "Count the lines of a file.";
    const DEFAULT_ENABLED: bool = false;
    type Args = CountLinesArgs;
    type Output = CountLinesOutput;

    async fn call(
        &self,
        args: CountLinesArgs,
        cx: &ToolContext,
    ) -> Result<CountLinesOutput, ToolError> {
        use std::io::Read as _;
        let path = cx.resolve(&args.path);
        let (file, _meta) = toolcell_tools::fsutil::open_regular(&path)
            .map_err(|e| ToolError::failed(e.message(Self::NAME, "read", &path)))?;
        let mut text = String::new();
        file.take(1 << 20)
            .read_to_string(&mut text)
            .map_err(|e| ToolError::failed(format!("count_lines: {e}")))?;
        Ok(CountLinesOutput {
            lines: text.matches('\n').count(),
        })
    }
}

toolcell_tools::register_tool!(CountLines);

// ---------------------------------------------------------------------------

fn cx() -> ToolContext {
    ToolContext::new(
        Arc::new(ToolSettings::new(std::env::temp_dir())),
        tokio::time::Instant::now() + Duration::from_secs(10),
        tokio_util::sync::CancellationToken::new(),
    )
}

#[test]
fn the_new_tool_is_in_the_registry_next_to_the_builtins() {
    let reg = ToolRegistry::builtin().unwrap();
    let names: Vec<&str> = reg.names().collect();
    assert!(names.contains(&"shout"), "{names:?}");
    assert!(names.contains(&"read_file"), "{names:?}");
}

#[test]
fn the_new_tool_is_in_the_stub_and_the_schemas() {
    let reg = ToolRegistry::builtin().unwrap();
    let tools = reg.select(&["shout", "read_file"]).unwrap();
    let module = toolcell_stubs::python::stub_module(&tools).unwrap();
    assert!(
        module.contains("def shout(text: str, marks: int = 3) -> Dict[str, Any]:"),
        "{module}"
    );
    assert!(module.contains("Say something loudly."));
    let def = toolcell_stubs::execute_code_tool(
        &tools,
        &ExecuteCodeOptions::default(),
        SchemaFormat::Mcp,
    );
    let desc = def["description"].as_str().unwrap();
    assert!(
        desc.contains("shout(text: str, marks: int = 3) -> {loud: str}: Say something loudly."),
        "{desc}"
    );
    let own = toolcell_stubs::tool_definition(reg.get("shout").unwrap().as_ref());
    assert_eq!(own["inputSchema"]["properties"]["marks"]["default"], 3);
    assert_eq!(own["inputSchema"]["required"], serde_json::json!(["text"]));
}

#[tokio::test]
async fn the_new_tool_runs_and_validates_like_a_builtin() {
    let reg = ToolRegistry::builtin().unwrap();
    let shout = reg.get("shout").unwrap();
    let out = shout
        .call(serde_json::json!({"text": "hi", "marks": 1}), cx())
        .await
        .unwrap();
    assert_eq!(out, serde_json::json!({"loud": "HI!"}));
    let err = shout.validate(&serde_json::json!({"text": 5})).unwrap_err();
    assert!(
        err.contains("text") && err.contains("expected a string"),
        "{err}"
    );
    let err = shout
        .validate(&serde_json::json!({"txt": "x"}))
        .unwrap_err();
    assert!(err.contains("unknown field `txt`"), "{err}");
}

#[test]
fn a_duplicate_name_is_an_error() {
    let mut reg = ToolRegistry::builtin().unwrap();
    let err = reg.add(erase(Shout)).unwrap_err();
    assert!(err.to_string().contains("`shout`"), "{err}");
}

#[tokio::test]
async fn a_file_tool_outside_the_crate_opens_paths_through_fsutil_and_refuses_a_fifo() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "one\ntwo\n").unwrap();
    nix::unistd::mkfifo(&dir.path().join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let cx = ToolContext::new(
        Arc::new(ToolSettings::new(dir.path())),
        tokio::time::Instant::now() + Duration::from_secs(10),
        tokio_util::sync::CancellationToken::new(),
    );
    let tool = erase(CountLines);
    let out = tool
        .call(serde_json::json!({"path": "a.txt"}), cx.clone())
        .await
        .unwrap();
    assert_eq!(out["lines"], 2);
    // A FIFO would block a host thread forever: refused at once, by name.
    let err = tokio::time::timeout(
        Duration::from_secs(5),
        tool.call(serde_json::json!({"path": "pipe"}), cx),
    )
    .await
    .expect("the FIFO must be refused, not read")
    .unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
}
