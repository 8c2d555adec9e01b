//! `toolcell serve`: JSON-RPC 2.0 over stdio (docs/serve.md).

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use crate::host::{self, Overrides};
use crate::jsonrpc::{AtEof, Service, serve_connection};

/// Arguments of `toolcell serve`.
#[derive(Debug, clap::Args)]
#[command(
    long_about = "Serve JSON-RPC 2.0 over stdio: one message per line on stdin, one \
                  response per line on stdout (logs go to stderr only).\n\nMethods:\n  \
                  execute {code, session?, reset?, timeout?, mode?, tools?, cwd?, stream?}  → the \
                  result object\n  interrupt {session?}\n  sessions\n  shutdown_session \
                  {session}\n  schema {format?, session?}\n  tools/register {tools: [{name, description?, \
                  input_schema, output_schema?}], session?}  → {registered}\n  tools/unregister \
                  {names, session?}  → {unregistered}\n\nClient tools: a cell's call to a registered tool \
                  comes to the client as a request `tool/call` {session, name, arguments, \
                  deadline_ms} (string id); answer with `result` (the return value) or `error` \
                  {code, message} (raised as ToolError in the cell). A call still unanswered when \
                  its cell ends gets the notification `$/cancelRequest` {id}.\n\n`session` defaults to \"default\". Requests \
                  for different sessions run concurrently and responses may come out of order \
                  (match them by id); the execute and shutdown_session requests of one session \
                  take effect in the order they arrive (interrupt acts at once). With `stream: \
                  true`, `cell/output` notifications {session, stream, chunk} arrive while the \
                  cell runs. The notification `$/cancelRequest {id}` cancels one request: an \
                  execute that has not started (queued, or waiting for its kernel) is answered \
                  with error -32800 and never runs; a running one is interrupted and answered as \
                  usual. A malformed line gets a JSON-RPC error (-32700, -32600, -32601, -32602) \
                  and the server keeps serving; at most 1024 requests may be in flight, past \
                  that a request gets error -32000.\n\nAt EOF on stdin the server stops: a \
                  running cell is interrupted and answered `interrupted`, queued cells are \
                  answered without running, every kernel is killed, and it exits 0 within \
                  interrupt_grace + kill_grace and a second."
)]
pub(crate) struct Args {
    #[command(flatten)]
    overrides: Overrides,
}

/// Runs the command.
pub(crate) fn run(config: Option<&Path>, args: Args) -> anyhow::Result<ExitCode> {
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
        // EOF stops everything: the running cells are interrupted, and an
        // interrupted cell is answered within the two graces (a SIGINT, then
        // a kill); a little more covers reaping the killed tree.
        let o = registry.options();
        let grace = o.interrupt_grace + o.kill_grace + std::time::Duration::from_millis(300);
        // On a worker, not this thread: a request's task then starts on the
        // worker that read its line (tokio's LIFO slot), with no hand-off
        // between threads; `block_on`'s own thread runs no spawned task.
        let conn = tokio::spawn(serve_connection(
            service,
            input,
            output,
            AtEof::Abort { grace },
        ));
        if let Err(e) = conn.await {
            tracing::error!("the connection's task failed: {e}");
        }
        registry.shutdown_all().await;
        host::flush_journal(&registry);
        Ok(ExitCode::SUCCESS)
    })
}
