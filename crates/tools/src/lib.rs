//! Tools callable from toolcell cells: the [`Tool`] trait, the registry,
//! the built-in tools, and everything generated from them.
//!
//! # Where it sits
//!
//! Code in a cell calls `read_file(...)`; the generated stub module
//! `toolcell_tools` ([`stubs::stub_module`]) sends one JSON line to the
//! kernel's rpc server (crate `toolcell-rpc`), which checks token, cell and
//! budget and hands the call to a [`ToolDispatcher`] — this crate's
//! implementation of the rpc `Dispatch` interface — which validates the
//! arguments against the tool's argument type and runs it.
//!
//! ```text
//! cell ─▶ toolcell_tools.read_file() ─▶ rpc server ─▶ ToolDispatcher ─▶ ReadFile::call
//! ```
//!
//! # One definition, everything derived
//!
//! A tool is a Rust type implementing [`Tool`]: a name, a doc, an argument
//! type (serde + `schemars::JsonSchema`; doc comments on fields, defaults
//! declared once with `#[serde(default = "…")]`) and a result type. One
//! [`register_tool!`] line adds it to the compile-time registry. From that
//! single definition come the Python signature and docstring in the stub
//! ([`stubs`]), the per-tool JSON Schema and the tool's line in the
//! `execute_code` description ([`schema`]), `bad_args` messages naming the
//! field ([`ToolDispatcher`]), and `toolcell tools`.
//!
//! ```
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//! use toolcell_tools::{Tool, ToolContext, ToolError, ToolRegistry, erase, schema, stubs};
//!
//! /// Arguments of `add`.
//! #[derive(Debug, Serialize, Deserialize, JsonSchema)]
//! #[serde(deny_unknown_fields)]
//! struct AddArgs {
//!     /// First number.
//!     a: i64,
//!     /// Second number.
//!     #[serde(default)]
//!     b: i64,
//! }
//!
//! /// Result of `add`.
//! #[derive(Debug, Serialize, JsonSchema)]
//! struct Sum {
//!     /// a + b.
//!     sum: i64,
//! }
//!
//! #[derive(Debug, Default)]
//! struct Add;
//!
//! impl Tool for Add {
//!     const NAME: &'static str = "add";
//!     const DOC: &'static str = "Add two numbers.";
//!     type Args = AddArgs;
//!     type Output = Sum;
//!     async fn call(&self, args: AddArgs, _cx: &ToolContext) -> Result<Sum, ToolError> {
//!         Ok(Sum { sum: args.a + args.b })
//!     }
//! }
//!
//! // In a tool's own file this would be `toolcell_tools::register_tool!(Add);`.
//! // An embedder can also add tools at run time:
//! let mut registry = ToolRegistry::builtin()?;
//! registry.add(erase(Add))?;
//! let tools = registry.select(&["add", "read_file"])?;
//!
//! let module = stubs::stub_module(&tools)?;
//! assert!(module.contains("def add(a: int, b: int = 0) -> Dict[str, Any]:"));
//! let description = schema::execute_code_description(&tools, &Default::default());
//! assert!(description.contains("add(a: int, b: int = 0) -> {sum: int}: Add two numbers."));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Tools from a JSON Schema
//!
//! A tool whose shape is only known at run time — a name, a description,
//! an input JSON Schema (draft 2020-12 or draft-07), an optional output
//! schema and an async closure — is a [`SchemaTool`]. It joins the same
//! registry and goes through the same checks as a built-in: the host
//! validates the arguments against the schema before the closure runs
//! (`bad_args` names the JSON pointer of the offending value; no budget is
//! spent), and the stub function's signature and docstring come from the
//! schema. A name that is not a Python identifier is mapped in Python
//! (`get-user` → `get_user`, a property `from` → `from_`); the host and
//! the closure see the original names.
//!
//! ```
//! use std::sync::Arc;
//! use serde_json::{Value, json};
//! use toolcell_tools::{DynTool, SchemaTool, ToolRegistry, stubs};
//!
//! let upper = SchemaTool::new(
//!     "to-upper",
//!     "Upper-case some words.",
//!     json!({
//!         "type": "object",
//!         "properties": {
//!             "words": {"type": "array", "items": {"type": "string"}},
//!             "sep": {"type": "string", "default": " "}
//!         },
//!         "required": ["words"]
//!     }),
//!     // The handler: any async closure from the arguments to a JSON result.
//!     |args: Value, _cx| async move {
//!         let words: Vec<String> = args["words"]
//!             .as_array()
//!             .into_iter()
//!             .flatten()
//!             .filter_map(Value::as_str)
//!             .map(str::to_uppercase)
//!             .collect();
//!         Ok(json!({ "text": words.join(args["sep"].as_str().unwrap_or(" ")) }))
//!     },
//! )?;
//!
//! let mut registry = ToolRegistry::builtin()?;
//! registry.add(Arc::new(upper))?;
//! let tool = registry.get("to-upper").expect("just added");
//! assert_eq!(
//!     tool.validate(&json!({"words": ["a", 2]})),
//!     Err(r#"/words/1: 2 is not of type "string""#.to_string())
//! );
//! let module = stubs::stub_module(&registry.select(&["to-upper", "read_file"])?)?;
//! assert!(module.contains("def to_upper(words: List[str], sep: str = \" \") -> Any:"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Linking
//!
//! Registration uses `inventory`: a tool exists in a binary only if its
//! crate is linked. Every binary, test or bench that reads the registry must
//! link this crate; if it names nothing from it, add `use toolcell_tools as
//! _;`. `tests/registry.rs` fails if a built-in tool goes missing.
//!
//! # Built-in tools
//!
//! `read_file`, `write_file`, `search_files`, `patch`, `terminal`, one file
//! each under `src/builtin/`, and `web_extract`, `web_search` under
//! `src/builtin/web/` (only with the default-on `web` feature, which brings
//! the HTTP, TLS and HTML stack).
//!
//! # Enabled by default
//!
//! The default of `[tools] enabled` is [`default_enabled_tools`]: every
//! registered tool whose [`Tool::DEFAULT_ENABLED`] is true (the default).
//! Nothing lists the tools by hand.

mod builtin;
mod fsutil;
pub mod hints;
#[cfg(feature = "mcp")]
pub mod mcp;
mod registry;
pub mod schema;
mod schema_tool;
pub mod stubs;
pub mod stubs_js;
pub mod stubs_r;
mod tool;

#[doc(hidden)]
pub use inventory;

pub use registry::{RegistryError, ToolDispatcher, ToolRegistry, default_enabled_tools};
pub use schema_tool::SchemaTool;
pub use tool::{
    DynTool, Tool, ToolContext, ToolEntry, ToolError, ToolSettings, WebSettings, erase,
};
/// The boxed future [`DynTool::call`] returns (from the rpc crate), for
/// embedders implementing [`DynTool`] themselves.
pub use toolcell_rpc::BoxFuture;
