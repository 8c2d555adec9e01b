//! `toolcell`: run Python cells that call the agent's tools.
//!
//! The binary is thin: argument parsing, configuration and wiring. Each
//! subcommand lives in its own module under `cmd/`.

mod cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit code for usage and configuration errors (SPEC §9).
const EXIT_USAGE: u8 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "toolcell",
    version,
    about = "Run Python cells that call the agent's tools, in persistent kernels",
    long_about = "toolcell runs Python code for an LLM agent in a persistent kernel (one Python \
                  process per session, so state survives from one cell to the next). Code in a cell \
                  calls the agent's tools through a generated stub module. Output is ANSI-stripped \
                  and has secrets redacted.\n\nThis build offers the protocol debugging command \
                  `frames`; the other commands of the product contract are being added."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Decode a kernel byte stream from stdin into one JSON event per line.
    Frames(cmd::frames::Args),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version to stdout (exit 0) and errors to
            // stderr; usage errors exit 2 as SPEC §9 says.
            let code = if e.use_stderr() { EXIT_USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let result = match cli.command {
        Command::Frames(args) => cmd::frames::run(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln_error(&e);
            ExitCode::FAILURE
        }
    }
}

/// Prints an error chain on stderr as `toolcell: error: …`.
fn eprintln_error(e: &anyhow::Error) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "toolcell: error: {e:#}");
}
