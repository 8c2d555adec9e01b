//! The token-checked socket server through which Python cells call host tools
//! (docs/protocol.md, "The tool socket").
//!
//! # Where it sits
//!
//! The kernel crate owns one [`Server`] per kernel. It binds the server in
//! the kernel's private directory ([`Server::bind_unix`], or
//! [`Server::bind_tcp`] for `[rpc] transport = "tcp"`), puts
//! [`Server::endpoint`] and [`Server::token`] into the child's environment as
//! `TOOLCELL_RPC` and `TOOLCELL_RPC_TOKEN`, and wraps every cell in
//! [`Server::open_cell`] … [`CellHandle::settle`]. Code in the cell calls the
//! generated stub `toolcell_tools`, which sends one JSON line per call:
//!
//! ```text
//! → {"tool":"read_file","args":{"path":"a.txt"},"token":"3f9c…","id":7}
//! ← {"ok":true,"result":{"content":"…","total_lines":3,"truncated":false},"id":7}
//! → {"tool":"terminal","args":{"command":"ls"},"token":"wrong"}
//! ← {"ok":false,"code":"bad_token","error":"wrong token (use TOOLCELL_RPC_TOKEN from the environment)"}
//! ```
//!
//! The server knows no tool. It checks each request in the order of
//! docs/protocol.md ("Checks, in order") — size, JSON, token (constant-time),
//! an active cell, tool known ([`Dispatch::knows`]) and enabled for the cell,
//! blocked parameters ([`Dispatch::blocked_params`]), budget, argument
//! validation ([`Dispatch::validate`]) — and only then takes one unit of the
//! cell's budget and runs [`Dispatch::call`], bounded by the cell's deadline.
//! The tools crate implements [`Dispatch`] over its registry.
//!
//! # Example
//!
//! A complete exchange over a real Unix socket, with the in-process
//! [`testing::EchoDispatch`] standing in for the tools:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use serde_json::json;
//! use tokio::time::Instant;
//! use toolcell_rpc::testing::{Connection, EchoDispatch};
//! use toolcell_rpc::{CellSpec, Server, ServerConfig};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let tmp = tempfile::tempdir()?;
//! let server = Server::bind_unix(
//!     tmp.path().join("kernel-1"), // created with mode 0700
//!     Arc::new(EchoDispatch::new()),
//!     ServerConfig::default(),
//! )?;
//! // What the kernel's environment gets:
//! assert!(server.endpoint().starts_with("unix:/"));
//! assert!(server.endpoint().ends_with("/kernel-1/rpc.sock"));
//! let token = server.token().expose().to_owned();
//!
//! let mut client = Connection::connect(server.endpoint(), &token).await?;
//!
//! // Between cells nobody may call tools.
//! let reply = client.call("echo", json!({"x": 1})).await?;
//! assert_eq!(reply["code"], "no_active_cell");
//!
//! // A cell with a budget of one call and one enabled tool.
//! let deadline = Instant::now() + Duration::from_secs(30);
//! let cell = server.open_cell(CellSpec::new("cell-1", deadline).budget(1).enable(["echo"]))?;
//! let reply = client.call("echo", json!({"x": 1})).await?;
//! assert_eq!(reply, json!({"ok": true, "result": {"cell": "cell-1", "args": {"x": 1}}}));
//! let reply = client.call("sleep", json!({"ms": 1})).await?;
//! assert_eq!(reply["code"], "not_allowed");
//! let reply = client.call("echo", json!({})).await?;
//! assert_eq!(reply["code"], "budget_exhausted");
//!
//! // Settling retires the cell's authority and hands back its call log.
//! let report = cell.settle();
//! assert_eq!(report.dispatched(), 1);
//! assert_eq!(report.calls()[0].tool(), "echo");
//! # Ok(())
//! # }
//! ```
//!
//! # Design notes
//!
//! - **Socket permissions.** [`Server::bind_unix`] creates the directory with
//!   mode 0700 (an existing one must be ours and no more open), binds
//!   `rpc.sock` inside it and then sets the socket to 0600. As the directory
//!   admits nobody else, there is no moment when another user can reach the
//!   socket. Peers whose uid (`SO_PEERCRED`) differs from ours are refused
//!   anyway: they get one `bad_token` line saying so and are disconnected.
//!   TCP has no peer check; the token is the only protection there.
//! - **Replies.** Every request line gets exactly one reply line, in order,
//!   on its connection; requests on one connection are handled one after
//!   another, and connections run concurrently. The optional `"id"` is
//!   echoed verbatim. A line longer than the cap (16 MiB) is dropped as it
//!   arrives, never buffered whole, and answered `too_large` when its `\n`
//!   comes. Bytes after the last `\n` when a client disconnects are never
//!   executed, so a request cut short in transit never runs.
//! - **Cells.** One cell is active per server at a time. A call arriving with
//!   no active cell is refused `no_active_cell`. A call still running when its
//!   cell settles is dropped and answered `no_active_cell` with a message that
//!   the cell ended and the call was cancelled (its outcome is unknown); the
//!   closest documented code, since the caller is exactly the "thread left
//!   behind" that code exists for. A call whose deadline passes gets `timeout`.
//!   Refusals never take budget; the unit is taken atomically just before
//!   dispatch, so concurrent callers can never exceed the budget.
//! - **Blocked parameters** are refused when present with any value other
//!   than `null` or `false` (asking explicitly for the default is harmless).
//! - `"args"` may be omitted (read as `{}`); a non-object `"args"` is a
//!   `bad_request`. A missing `"token"` is a `bad_token`. A line that is not
//!   UTF-8 is a `bad_request`.
//! - **For the owner.** The server's tasks run on the tokio runtime it was
//!   created in. [`CellReport::dispatched`] is the result's `tool_calls_made`
//!   (docs/result.md, "tool_calls_made");
//!   `report.refused(ErrorCode::BudgetExhausted) > 0` tells the cell hit its
//!   budget (for the budget hint of docs/result.md, "hint"). Memory per
//!   connection is bounded by the line cap plus 64 KiB while a line is
//!   arriving, and by the largest reply. TCP endpoints accept any local user's
//!   connection (the token still applies); prefer the Unix socket.

mod cell;
mod dispatch;
#[doc(hidden)]
pub mod fuzzing;
mod handler;
mod lines;
mod server;
mod spin;
pub mod testing;
mod token;
mod wire;

pub use cell::{CallOutcome, CallRecord, CellHandle, CellReport, CellSpec, DEFAULT_BUDGET};
pub use dispatch::{BoxFuture, CellContext, Dispatch, ToolFailure};
pub use server::{
    BindError, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_LINE_BYTES, InbandCaller,
    MAX_SOCKET_PATH_BYTES, OpenCellError, PeerCheck, SOCKET_NAME, Server, ServerConfig,
    peer_allowed,
};
pub use token::{Token, TokenError};
pub use wire::ErrorCode;
