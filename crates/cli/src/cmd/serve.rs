//! `toolcell serve`: JSON-RPC 2.0 over stdio (SPEC §10).

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use crate::host::{self, Overrides};
use crate::jsonrpc::{Service, serve_connection};

/// Arguments of `toolcell serve`.
#[derive(Debug, clap::Args)]
#[command(
    long_about = "Serve JSON-RPC 2.0 over stdio: one message per line on stdin, one \
                  response per line on stdout (logs go to stderr only).\n\nMethods:\n  \
                  execute {code, session?, reset?, timeout?, mode?, tools?, cwd?, stream?}  → the \
                  result object\n  interrupt {session?}\n  sessions\n  shutdown_session \
                  {session}\n  schema {format?}\n\n`session` defaults to \"default\". Requests \
                  for different sessions run concurrently and responses may come out of order \
                  (match them by id). With `stream: true`, `cell/output` notifications {session, \
                  stream, chunk} arrive while the cell runs. A malformed line gets a JSON-RPC \
                  error (-32700, -32600, -32601, -32602) and the server keeps serving. At EOF on \
                  stdin the server answers what is still running, shuts every kernel down and \
                  exits 0."
)]
pub struct Args {
    #[command(flatten)]
    overrides: Overrides,
}

/// Runs the command.
pub fn run(config: Option<&Path>, args: Args) -> anyhow::Result<ExitCode> {
    let cfg = host::load_config(config, &args.overrides)?;
    let rt = host::runtime()?;
    rt.block_on(async move {
        let registry = Arc::new(host::journaled_registry(&cfg, |_| {})?);
        host::exit_on_signals(Arc::clone(&registry));
        let service = Arc::new(Service {
            registry: Arc::clone(&registry),
            config: cfg,
            daemon: None,
        });
        let (input, output) = host::stdio();
        serve_connection(service, input, output).await;
        registry.shutdown_all().await;
        host::flush_journal(&registry);
        Ok(ExitCode::SUCCESS)
    })
}
