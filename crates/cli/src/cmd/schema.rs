//! `toolcell schema`: the execute_code tool definition.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use toolcell_stubs::SchemaFormat;
use toolcell_tools::ToolRegistry;

use crate::host::{self, Overrides};

/// Arguments of `toolcell schema`.
#[derive(Debug, clap::Args)]
#[command(
    long_about = "Print the execute_code tool definition as JSON, in the shape a model API \
                  expects: openai ({type: function, function: {name, description, parameters}}), \
                  anthropic ({name, description, input_schema}) or mcp ({name, description, \
                  inputSchema}). The description lists only the enabled tools (and the tools of the \
                  configured MCP servers, which are started to list them) and states the \
                  configured limits."
)]
pub(crate) struct Args {
    /// The shape of the definition.
    #[arg(long, value_name = "openai|anthropic|mcp", default_value = "openai")]
    format: String,
    #[command(flatten)]
    overrides: Overrides,
}

/// Runs the command.
pub(crate) fn run(config: Option<&Path>, args: &Args) -> anyhow::Result<ExitCode> {
    let format: SchemaFormat = args.format.parse().map_err(host::usage)?;
    let config = host::load_config(config, &args.overrides)?;
    let reg = ToolRegistry::builtin()?;
    let mut tools = reg.select(&config.tools.enabled)?;
    if let Some(extra) = host::mcp_tools(&config)? {
        tools.extend(extra.tools);
    }
    let def = toolcell_stubs::execute_code_tool(&tools, &config.execute_code_options(), format);
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, &def)?;
    writeln!(out)?;
    Ok(ExitCode::SUCCESS)
}
