//! The MCP servers of the configuration as a [`ToolSource`]: their tools
//! are the functions of `toolcell_tools.NAME` in every kernel of the
//! registry (see [`toolcell_tools::mcp`]).

use std::sync::Arc;

use toolcell_rpc::BoxFuture;
use toolcell_tools::mcp::{McpError, McpHub, McpServerSpec};
use toolcell_tools::names::Unavailable;

use toolcell_kernel::extra::{ExtraTools, ToolSource};

/// A [`McpHub`] as a source of tools: asked before every cell, it starts
/// servers not running (waiting up to each one's startup timeout) and
/// gives their tools; a server that is down and whose tools were never
/// listed is a submodule that raises `ToolError` with the reason.
///
/// ```no_run
/// # async fn demo(registry: toolcell_host::Registry) -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use toolcell_host::registry::McpSource;
/// use toolcell_tools::mcp::McpServerSpec;
///
/// let fs = McpServerSpec::stdio("fs", ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/data"]);
/// registry.add_tool_source(Arc::new(McpSource::new(vec![fs])?));
/// // Cells can now call `fs.list_directory(path="/data")`.
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct McpSource {
    hub: Arc<McpHub>,
}

impl McpSource {
    /// A source for `specs` (nothing starts until a cell needs them). What
    /// the servers say passes the host's redactor
    /// ([`host_redactor`](toolcell_kernel::env::host_redactor)).
    ///
    /// # Errors
    /// [`McpError`] naming the first entry that cannot be used.
    pub fn new(specs: Vec<McpServerSpec>) -> Result<Self, McpError> {
        Ok(Self {
            hub: McpHub::with_redactor(specs, toolcell_kernel::env::host_redactor())?,
        })
    }

    /// The hub (server pids, generation).
    pub fn hub(&self) -> &Arc<McpHub> {
        &self.hub
    }
}

impl ToolSource for McpSource {
    fn tools(&self) -> BoxFuture<'_, ExtraTools> {
        Box::pin(async move {
            let now = self.hub.tools().await;
            let mut unavailable: Vec<Unavailable> = Vec::new();
            let mut notices = Vec::new();
            for f in now.failed {
                let prefix = format!("{}.", f.server);
                let has_tools = now.tools.iter().any(|t| t.name().starts_with(&prefix));
                if !has_tools && !unavailable.iter().any(|u| u.namespace == f.server) {
                    unavailable.push(Unavailable {
                        namespace: f.server,
                        message: f.message,
                    });
                } else if has_tools {
                    // Tools it listed but that were left out: the cell hears why.
                    notices.push(f.message);
                }
            }
            ExtraTools {
                tools: now.tools,
                unavailable,
                generation: now.generation,
                notices,
            }
        })
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.hub.shutdown())
    }
}
