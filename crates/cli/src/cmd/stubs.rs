//! `toolcell stubs`: the generated Python module `toolcell_tools`.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use toolcell_tools::ToolRegistry;

use crate::host::{self, Overrides};

/// Arguments of `toolcell stubs`.
#[derive(Debug, clap::Args)]
#[command(
    long_about = "Print the Python stub module `toolcell_tools` that kernels import: one function \
                  per enabled tool (signature, type hints, defaults and docstring from the tool's \
                  schema), one submodule per configured MCP server (`toolcell_tools.NAME`; the servers \
                  are started to list their tools), ToolError, the helpers json_parse, shell_quote \
                  and retry, and the client that talks to the host over TOOLCELL_RPC."
)]
pub(crate) struct Args {
    #[command(flatten)]
    overrides: Overrides,
}

/// Runs the command.
pub(crate) fn run(config: Option<&Path>, args: &Args) -> anyhow::Result<ExitCode> {
    let config = host::load_config(config, &args.overrides)?;
    let reg = ToolRegistry::builtin()?;
    let mut tools = reg.select(&config.tools.enabled)?;
    let mut unavailable = Vec::new();
    if let Some(extra) = host::mcp_tools(&config)? {
        tools.extend(extra.tools);
        unavailable = extra.unavailable;
    }
    // What a kernel would leave out (names that clash), it leaves out here.
    let screened = toolcell_tools::screen::screen(&tools, &unavailable);
    for why in &screened.dropped {
        tracing::warn!("{why}");
    }
    let module = toolcell_stubs::python::stub_module_with(&screened.tools, &screened.unavailable)?;
    std::io::stdout().lock().write_all(module.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
