//! `toolcell tools`: the tools cells can call.

use std::io::Write;
use std::process::ExitCode;

use std::path::Path;

use toolcell_tools::ToolRegistry;

use crate::host::{self, Overrides};

/// Arguments of `toolcell tools`.
#[derive(Debug, clap::Args)]
#[command(
    long_about = "List every tool linked into this binary, then the tools of each configured \
                  MCP server (started to list them; called as NAME.tool from a cell): its Python \
                  signature with its result shape, and a one-line summary. With --json, print each \
                  tool's definition: name, description, signature, inputSchema and outputSchema \
                  (JSON Schema), and the parameters cells may not use."
)]
pub(crate) struct Args {
    /// Print JSON definitions instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    overrides: Overrides,
}

/// Runs the command.
pub(crate) fn run(config: Option<&Path>, args: &Args) -> anyhow::Result<ExitCode> {
    let config = host::load_config(config, &args.overrides)?;
    let reg = ToolRegistry::builtin()?;
    let mut tools: Vec<_> = reg.iter().cloned().collect();
    let mut unavailable = Vec::new();
    if let Some(extra) = host::mcp_tools(&config)? {
        tools.extend(extra.tools);
        unavailable = extra.unavailable;
    }
    // What a kernel would leave out (names that clash), is left out here.
    let screened = toolcell_tools::screen::screen(&tools, &unavailable);
    for why in &screened.dropped {
        tracing::warn!("{why}");
    }
    let (tools, unavailable) = (screened.tools, screened.unavailable);
    let mut out = std::io::stdout().lock();
    if args.json {
        let defs: Vec<_> = tools
            .iter()
            .map(|t| toolcell_stubs::tool_definition(t.as_ref()))
            .collect();
        serde_json::to_writer_pretty(&mut out, &defs)?;
        writeln!(out)?;
    } else {
        for t in &tools {
            writeln!(out, "{}", toolcell_stubs::signature(t.as_ref()))?;
            writeln!(out, "    {}", toolcell_stubs::summary(t.as_ref()))?;
        }
        for u in &unavailable {
            writeln!(out, "{}.*", u.namespace)?;
            writeln!(out, "    unavailable: {}", u.message)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
