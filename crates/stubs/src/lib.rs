//! What a kernel is told about the host's tools: the `execute_code` tool
//! (its description, parameters and definition in OpenAI, Anthropic and MCP
//! shapes) and the stub module `toolcell_tools` a cell imports, generated
//! for Python, R and JavaScript from each tool's JSON Schema and doc.
//!
//! It sits between the tools and the kernel: [`toolcell_tools`] owns the
//! tools, their schemas and the naming rules of each language
//! ([`toolcell_tools::names`]); this crate turns a set of tools into text;
//! the kernel writes that text into each kernel's directory and the binary
//! prints the definition (`toolcell schema`). The Python, R and JavaScript
//! generators share one skeleton: claim every name the module defines
//! ([`NameClaims`]: one function per top-level tool, one module per source,
//! one refusing module per source that is down, [`Unavailable`]), then write
//! the prelude and each part in the language's own way (Python lists
//! `__all__` first and defines the source modules before the functions).
//!
//! - [`python`], [`r`], [`js`]: `stub_module` for each language and its
//!   hand-written prelude (the client of the tool-call protocol,
//!   `ToolError`, `json_parse`, `shell_quote`, `retry`).
//! - [`execute_code_description`] and [`execute_code_tool`]: what the model
//!   reads, with the limits of [`ExecuteCodeOptions`].
//! - [`Mode`], [`OnTimeout`] and the `DEFAULT_*` limits: defined once here
//!   and used by configuration, requests, the registry and each kernel.
//!
//! ```
//! use std::sync::Arc;
//! use toolcell_stubs::{ExecuteCodeOptions, SchemaFormat, execute_code_tool, python};
//! use toolcell_tools::{DynTool, ToolRegistry};
//!
//! let registry = ToolRegistry::builtin().unwrap();
//! let tools: Vec<Arc<dyn DynTool>> = registry.select(&["read_file"]).unwrap();
//! let module = python::stub_module(&tools).unwrap();
//! assert!(module.contains("def read_file("));
//! let def = execute_code_tool(&tools, &ExecuteCodeOptions::default(), SchemaFormat::Mcp);
//! assert_eq!(def["name"], "execute_code");
//! ```
//!
//! [`NameClaims`]: toolcell_tools::names::NameClaims
//! [`Unavailable`]: toolcell_tools::names::Unavailable

mod describe;
pub mod js;
pub mod python;
pub mod r;
mod skeleton;

pub use describe::{
    DEFAULT_INTERRUPT_GRACE_SECS, DEFAULT_MAX_STDERR_BYTES, DEFAULT_MAX_STDOUT_BYTES,
    DEFAULT_MAX_TOOL_CALLS, DEFAULT_TIMEOUT_SECS, ExecuteCodeOptions, Mode, NetworkReach,
    OnTimeout, Reach, SchemaFormat, execute_code_description, execute_code_parameters,
    execute_code_tool, js_signature, r_signature, signature, summary, tool_definition,
};
pub use toolcell_tools::names::{StubError, Unavailable, top_level_names};
pub use toolcell_tools::screen::{Screened, screen};
