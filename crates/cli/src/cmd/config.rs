//! `toolcell config`: the effective configuration, as TOML, with where each
//! value came from.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use crate::host::{self, Overrides};

/// Arguments of `toolcell config`.
#[derive(Debug, clap::Args)]
#[command(
    long_about = "Print the effective configuration as TOML. Each key is followed by a comment \
                  saying where its value came from: `# default`, `# from <file>`, or `# from \
                  --flag`. The file is --config FILE, else ./toolcell.toml, else \
                  $XDG_CONFIG_HOME/toolcell/toolcell.toml (~/.config/toolcell/toolcell.toml)."
)]
pub(crate) struct Args {
    #[command(flatten)]
    overrides: Overrides,
    /// Print plain TOML without the source comments.
    #[arg(long)]
    plain: bool,
}

/// Runs the command.
pub(crate) fn run(config: Option<&Path>, args: &Args) -> anyhow::Result<ExitCode> {
    let config = host::load_config(config, &args.overrides)?;
    let text = if args.plain {
        config.to_toml()
    } else {
        let mut t = String::new();
        match config.file() {
            Some(f) => t.push_str(&format!("# configuration file: {}\n", f.display())),
            None => t.push_str("# no configuration file found; defaults apply\n"),
        }
        t.push_str(&config.to_toml_with_sources());
        t
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
