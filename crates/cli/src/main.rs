//! `toolcell`: run Python cells that call the agent's tools.
//!
//! The binary is thin: argument parsing, configuration and wiring. Each
//! subcommand lives in its own module under `cmd/`; `host.rs` builds the
//! kernel registry from the configuration and handles signals.

mod client_tools;
mod cmd;
mod host;
mod jsonrpc;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit code for usage and configuration errors (docs/result.md,
/// "The `exec` status line and exit code").
const EXIT_USAGE: u8 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "toolcell",
    version,
    about = "Run Python cells that call the agent's tools, in persistent kernels",
    long_about = "toolcell runs Python code for an LLM agent in a persistent kernel: one Python \
                  process per session, so variables, imports and loaded data survive from one cell \
                  to the next. Code in a cell calls the agent's tools (read_file, terminal, \
                  web_extract, ...) as Python functions. Output is ANSI-stripped and has secrets \
                  redacted; time, tool calls, output size and live kernels are bounded.\n\n\
                  Each local kernel runs in a sandbox of its own by default: its own processes \
                  only, the machine read-only but for its working directory and a private /tmp, \
                  credential stores hidden, and only the package indexes on the network (see \
                  [sandbox] in `toolcell config`).\n\n\
                  Configuration: --config FILE, else ./toolcell.toml, else the user config dir \
                  (see `toolcell config`)."
)]
struct Cli {
    /// Configuration file (default: ./toolcell.toml, else $XDG_CONFIG_HOME/toolcell/toolcell.toml).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

// `about` as an attribute, not a doc comment: a doc comment on a variant
// also sets `long_about` (to None for one line), hiding each command's own
// long help from `toolcell <command> --help`.
#[derive(Debug, Subcommand)]
enum Command {
    #[command(
        about = "Run one cell (in a fresh kernel, or in a persistent session with --session)"
    )]
    Exec(cmd::exec::Args),
    #[command(about = "Serve JSON-RPC 2.0 over stdio (one message per line)")]
    Serve(cmd::serve::Args),
    #[command(about = "Serve the Model Context Protocol over stdio (an execute_code tool)")]
    Mcp(cmd::mcp::Args),
    #[command(about = "Interactive session: type Python, see results; Ctrl-C interrupts the cell")]
    Repl(cmd::repl::Args),
    #[command(
        about = "Start, stop or inspect the background daemon that keeps `exec --session` kernels"
    )]
    Daemon(cmd::daemon::Args),
    #[command(about = "Print the execute_code tool definition (OpenAI, Anthropic or MCP shape)")]
    Schema(cmd::schema::Args),
    #[command(about = "List the tools cells can call")]
    Tools(cmd::tools::Args),
    #[command(about = "Print the generated Python stub module `toolcell_tools`")]
    Stubs(cmd::stubs::Args),
    #[command(about = "Print the effective configuration and where each value came from")]
    Config(cmd::config::Args),
    #[command(about = "Decode a kernel byte stream from stdin into one JSON event per line")]
    Frames(cmd::frames::Args),
    #[command(about = "List the cells the journal recorded (newest last)")]
    History(cmd::history::Args),
    #[command(about = "Export a journaled session as a Jupyter notebook, a script or Markdown")]
    Export(cmd::export::Args),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version to stdout (exit 0) and errors to stderr;
            // usage errors exit 2 as docs/result.md
            // ("The `exec` status line and exit code") says.
            let code = if e.use_stderr() { EXIT_USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    host::init_logging();
    // Kernels run under SCHED_BATCH; this process keeps its policy.
    if std::env::var("TOOLCELL_BATCH").is_ok_and(|v| v == "off" || v == "0") {
        tracing::debug!(
            "TOOLCELL_BATCH=off: kernels keep the scheduling policy we were started with"
        );
    } else {
        toolcell_sys::process::prefer_batch_scheduling_for_kernels();
    }
    // Nothing of our uid but a privileged process may open our /proc
    // entries: our stdin and stdout (the client's protocol), our
    // environment (the host's secrets), our memory.
    if let Err(e) = toolcell_sys::process::forbid_inspection() {
        tracing::warn!("cannot make this process non-dumpable: {e}");
    }
    // Orphans of cells (double fork, setsid) are re-parented to this host,
    // not init, so they can be found and killed with their kernels.
    if let Err(e) = toolcell_sys::process::become_subreaper() {
        tracing::warn!("cannot become a child subreaper: {e}");
    }
    let config = cli.config.as_deref();
    let result = match cli.command {
        Command::Exec(args) => cmd::exec::run(config, args),
        Command::Serve(args) => cmd::serve::run(config, args),
        Command::Mcp(args) => cmd::mcp::run(config, args),
        Command::Repl(args) => cmd::repl::run(config, args),
        Command::Daemon(args) => cmd::daemon::run(config, args),
        Command::Schema(args) => cmd::schema::run(config, &args),
        Command::Tools(args) => cmd::tools::run(config, &args),
        Command::Stubs(args) => cmd::stubs::run(config, &args),
        Command::Config(args) => cmd::config::run(config, &args),
        Command::Frames(args) => cmd::frames::run(&args),
        Command::History(args) => cmd::history::run(config, &args),
        Command::Export(args) => cmd::export::run(config, &args),
    };
    // Whatever cells started that escaped their kernels' trees ends with us.
    toolcell_sys::process::kill_adopted(&[]);
    toolcell_sys::cgroup::remove_host_cgroup();
    match result {
        Ok(code) => code,
        // The reader of stdout went away (`toolcell schema | head`): what
        // it wanted it has; end quietly, as cat and grep do.
        Err(e)
            if e.chain().any(|c| {
                let kind = c.downcast_ref::<std::io::Error>().map(std::io::Error::kind);
                let json = c.downcast_ref::<serde_json::Error>();
                kind.or_else(|| json.and_then(serde_json::Error::io_error_kind))
                    == Some(std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            let usage = e.downcast_ref::<host::UsageError>().is_some();
            eprintln_error(&e);
            if usage {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Prints an error chain on stderr as `toolcell: error: …`.
fn eprintln_error(e: &anyhow::Error) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "toolcell: error: {e:#}");
}
