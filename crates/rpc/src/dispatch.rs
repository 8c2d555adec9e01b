//! The interface between the server and whatever implements the tools.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A boxed, sendable future, as returned by [`Dispatch::call`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a tool call knows about the cell that made it.
///
/// A call is always dispatched with the context of the cell that was active
/// when the request arrived, never a later or earlier one.
#[derive(Debug, Clone)]
pub struct CellContext {
    id: Arc<str>,
    deadline: Instant,
    cancel: CancellationToken,
}

impl CellContext {
    pub(crate) fn new(id: Arc<str>, deadline: Instant, cancel: CancellationToken) -> Self {
        Self {
            id,
            deadline,
            cancel,
        }
    }

    /// The cell's id, as the owner gave it in [`CellSpec`](crate::CellSpec).
    pub fn cell_id(&self) -> &str {
        &self.id
    }

    /// When the cell's time runs out. The server stops waiting for the call at
    /// this instant (the client gets `timeout`); a tool that starts
    /// subprocesses should bound them by it too.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Fires when the cell settles. The server drops the call's future then;
    /// tools that hand work to other tasks or processes should watch this to
    /// stop them.
    pub fn cancelled(&self) -> &CancellationToken {
        &self.cancel
    }
}

/// A tool ran and failed; becomes a `tool_failed` reply carrying the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolFailure {
    message: String,
}

impl ToolFailure {
    /// A failure with a message for the caller (it is raised as `ToolError`
    /// in the cell, so say what went wrong and what to do about it).
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// The message sent to the client.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// The set of tools a server can dispatch to. The server itself knows no
/// tool; the owner hands it one `Arc<dyn Dispatch>` (the tools crate
/// implements this over its registry).
///
/// The server calls the methods in the order of docs/protocol.md
/// ("Checks, in order"): [`knows`](Dispatch::knows), then (after the cell's
/// enabled set) [`blocked_params`](Dispatch::blocked_params), then the budget
/// check, then [`validate`](Dispatch::validate), then [`call`](Dispatch::call).
/// Only `call` consumes budget.
pub trait Dispatch: Send + Sync + 'static {
    /// Whether `tool` exists at all (unknown → `unknown_tool`).
    fn knows(&self, tool: &str) -> bool;

    /// Top-level argument names cells may not use with `tool`. A request
    /// whose `args` has one of them with a value other than `null` or `false`
    /// is refused `blocked_param`.
    fn blocked_params(&self, tool: &str) -> &[&'static str] {
        let _ = tool;
        &[]
    }

    /// Checks the arguments without running anything. The `Err` message
    /// becomes the `bad_args` reply: name the field and what was expected.
    ///
    /// # Errors
    /// A message describing the first problem found.
    fn validate(&self, tool: &str, args: &Value) -> Result<(), String>;

    /// Runs the tool. The server bounds the returned future by the cell's
    /// deadline and drops it when the cell settles.
    fn call(
        &self,
        tool: &str,
        args: Value,
        cx: CellContext,
    ) -> BoxFuture<'static, Result<Value, ToolFailure>>;
}

impl std::fmt::Debug for dyn Dispatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dyn Dispatch")
    }
}
