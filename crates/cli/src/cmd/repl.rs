//! `toolcell repl` (being written).

use std::path::Path;
use std::process::ExitCode;

/// Arguments of `toolcell repl`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the command.
pub fn run(_config: Option<&Path>, _args: Args) -> anyhow::Result<ExitCode> {
    Err(crate::host::usage("not available yet"))
}
