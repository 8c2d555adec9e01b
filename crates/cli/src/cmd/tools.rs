//! `toolcell tools`: the tools cells can call.

use std::io::Write;
use std::process::ExitCode;

use toolcell_tools::{ToolRegistry, schema};

/// Arguments of `toolcell tools`.
#[derive(Debug, clap::Args)]
#[command(
    long_about = "List every tool linked into this binary: its Python signature with its result \
                  shape, and a one-line summary. With --json, print each tool's definition: name, \
                  description, signature, inputSchema and outputSchema (JSON Schema), and the \
                  parameters cells may not use."
)]
pub struct Args {
    /// Print JSON definitions instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs the command.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let reg = ToolRegistry::builtin()?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let defs: Vec<_> = reg
            .iter()
            .map(|t| schema::tool_definition(t.as_ref()))
            .collect();
        serde_json::to_writer_pretty(&mut out, &defs)?;
        writeln!(out)?;
    } else {
        for t in reg.iter() {
            writeln!(out, "{}", schema::signature(t.as_ref()))?;
            writeln!(out, "    {}", schema::summary(t.as_ref()))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
