//! The per-line logic, free of I/O: one request line in, checks in the order of
//! docs/protocol.md ("Checks, in order"), one reply line out (after an `await`
//! on the tool for a dispatch).

use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::Value;
use serde_json::value::RawValue;
use tokio::time::Instant;

use crate::cell::{ActiveSlot, CallOutcome, CellState, Slot};
use crate::dispatch::Dispatch;
use crate::token::Token;
use crate::wire::{self, ErrorCode, RawRequest};

/// Everything a connection needs to answer requests; shared by all of a
/// server's connections.
pub(crate) struct Core {
    pub(crate) token: Token,
    pub(crate) dispatch: Arc<dyn Dispatch>,
    pub(crate) active: Arc<ActiveSlot>,
    pub(crate) max_line: usize,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("token", &self.token)
            .field("max_line", &self.max_line)
            .finish_non_exhaustive()
    }
}

/// The result of the synchronous checks on one line.
#[derive(Debug)]
pub(crate) enum Step<'a> {
    /// A refusal was written to the output buffer.
    Replied,
    /// All checks passed and one budget unit was taken: run the tool.
    Dispatch(Ticket<'a>),
}

/// A call that passed every check and holds one budget unit.
#[derive(Debug)]
pub(crate) struct Ticket<'a> {
    cell: Arc<CellState>,
    dispatch: Arc<dyn Dispatch>,
    tool: Arc<str>,
    args: Value,
    id: Option<&'a RawValue>,
    slot: Slot,
}

impl Ticket<'_> {
    pub(crate) fn tool(&self) -> &str {
        &self.tool
    }
    pub(crate) fn id(&self) -> Option<&RawValue> {
        self.id
    }
}

fn refuse(
    out: &mut Vec<u8>,
    cell: Option<&CellState>,
    code: ErrorCode,
    msg: &str,
    id: Option<&RawValue>,
) {
    if let Some(cell) = cell {
        cell.count_refusal(code);
    }
    tracing::debug!(code = code.as_str(), "tool call refused");
    wire::write_error(out, code, msg, id);
}

impl Core {
    /// Runs checks 1–8 of docs/protocol.md ("Checks, in order") on one line
    /// (without its `\n`): size, JSON, token, active cell, tool known and
    /// enabled, blocked parameters, budget, argument validation; then takes one
    /// budget unit.
    pub(crate) fn check<'a>(&self, line: &'a [u8], out: &mut Vec<u8>) -> Step<'a> {
        if line.len() > self.max_line {
            refuse(
                out,
                None,
                ErrorCode::TooLarge,
                &too_large_msg(self.max_line),
                None,
            );
            return Step::Replied;
        }
        // Validate UTF-8 up front: serde skips unknown fields without
        // checking their strings, and a line that is not UTF-8 is not JSON.
        let Ok(text) = std::str::from_utf8(line) else {
            let msg = "request is not valid UTF-8 (JSON text must be UTF-8)";
            refuse(out, None, ErrorCode::BadRequest, msg, None);
            return Step::Replied;
        };
        let req: RawRequest<'a> = match serde_json::from_str(text) {
            Ok(req) => req,
            Err(e) => {
                let msg = format!(
                    "request is not a JSON object {{\"tool\": str, \"args\": object, \"token\": str}} on one line: {e}"
                );
                refuse(out, None, ErrorCode::BadRequest, &msg, None);
                return Step::Replied;
            }
        };
        let id = req.id;
        let args = match req.args {
            None => Value::Object(serde_json::Map::new()),
            Some(args @ Value::Object(_)) => args,
            Some(_) => {
                let msg = "\"args\" must be a JSON object of named arguments";
                refuse(out, None, ErrorCode::BadRequest, msg, id);
                return Step::Replied;
            }
        };
        match &req.token {
            None => {
                let msg = "request has no \"token\" (use TOOLCELL_RPC_TOKEN from the environment)";
                refuse(out, None, ErrorCode::BadToken, msg, id);
                return Step::Replied;
            }
            Some(t) if !self.token.matches(t.as_bytes()) => {
                let msg = "wrong token (use TOOLCELL_RPC_TOKEN from the environment)";
                refuse(out, None, ErrorCode::BadToken, msg, id);
                return Step::Replied;
            }
            Some(_) => {}
        }
        self.check_call(&req.tool, args, id, out)
    }

    /// Checks 4–8 of docs/protocol.md ("Checks, in order") on a parsed call
    /// whose channel is already trusted (the socket's token matched, or the
    /// private in-band pipe): an active cell, tool known and enabled, blocked
    /// parameters, budget, argument validation, deadline; then takes one budget
    /// unit.
    pub(crate) fn check_call<'a>(
        &self,
        tool_name: &str,
        args: Value,
        id: Option<&'a RawValue>,
        out: &mut Vec<u8>,
    ) -> Step<'a> {
        let Some(cell) = self.active.current() else {
            let msg = "no cell is running: tool calls are only accepted while a cell runs \
                       (this call came from code a finished cell left running, such as a thread)";
            refuse(out, None, ErrorCode::NoActiveCell, msg, id);
            return Step::Replied;
        };
        // The cell's own tools first (a serve client's, an MCP server's),
        // then the server's.
        let dispatch: Arc<dyn Dispatch> = match cell.extra_for(tool_name) {
            Some(d) => Arc::clone(d),
            None => Arc::clone(&self.dispatch),
        };
        if !dispatch.knows(tool_name) {
            let mut msg = String::from("unknown tool \"");
            wire::push_quoted_short(&mut msg, tool_name);
            let _ = write!(
                msg,
                "\"; tools enabled for this cell: {}",
                cell.enabled_list()
            );
            refuse(out, Some(&cell), ErrorCode::UnknownTool, &msg, id);
            return Step::Replied;
        }
        let Some(tool) = cell.enabled(tool_name) else {
            let mut msg = String::from("tool \"");
            wire::push_quoted_short(&mut msg, tool_name);
            let _ = write!(
                msg,
                "\" is not enabled for this cell; enabled: {}",
                cell.enabled_list()
            );
            refuse(out, Some(&cell), ErrorCode::NotAllowed, &msg, id);
            return Step::Replied;
        };
        if let Value::Object(map) = &args {
            for name in dispatch.blocked_params(&tool) {
                if map
                    .get(*name)
                    .is_some_and(|v| !matches!(v, Value::Null | Value::Bool(false)))
                {
                    let msg = format!(
                        "parameter \"{name}\" of tool \"{tool}\" cannot be used from a cell"
                    );
                    refuse(out, Some(&cell), ErrorCode::BlockedParam, &msg, id);
                    return Step::Replied;
                }
            }
        }
        if cell.budget_left() == 0 {
            refuse(
                out,
                Some(&cell),
                ErrorCode::BudgetExhausted,
                &budget_msg(&cell),
                id,
            );
            return Step::Replied;
        }
        if let Err(problem) = dispatch.validate(&tool, &args) {
            let msg = format!("bad arguments: {problem}");
            refuse(out, Some(&cell), ErrorCode::BadArgs, &msg, id);
            return Step::Replied;
        }
        if Instant::now() >= cell.cx.deadline() {
            let msg = format!("the cell's time limit ran out before \"{tool}\" could start");
            refuse(out, Some(&cell), ErrorCode::Timeout, &msg, id);
            return Step::Replied;
        }
        match cell.take_unit(Arc::clone(&tool)) {
            Ok(slot) => Step::Dispatch(Ticket {
                cell,
                dispatch,
                tool,
                args,
                id,
                slot,
            }),
            Err(ErrorCode::BudgetExhausted) => {
                refuse(
                    out,
                    Some(&cell),
                    ErrorCode::BudgetExhausted,
                    &budget_msg(&cell),
                    id,
                );
                Step::Replied
            }
            Err(code) => {
                let msg = "the cell ended before this call could start; it was not run";
                refuse(out, None, code, msg, id);
                Step::Replied
            }
        }
    }

    /// Runs a checked call, bounded by its cell's deadline and cancelled when
    /// the cell settles, and writes the reply.
    pub(crate) async fn run(&self, ticket: Ticket<'_>, out: &mut Vec<u8>) {
        let Ticket {
            cell,
            dispatch,
            tool,
            args,
            id,
            slot,
        } = ticket;
        let cx = cell.cx.clone();
        let call = dispatch.call(&tool, args, cx.clone());
        let result = tokio::select! {
            biased;
            () = cx.cancelled().cancelled() => None,
            r = tokio::time::timeout_at(cx.deadline(), call) => Some(r),
        };
        match result {
            Some(Ok(Ok(value))) => {
                cell.finish(&slot, CallOutcome::Ok);
                wire::write_ok(out, &value, id);
            }
            Some(Ok(Err(failure))) => {
                cell.finish(&slot, CallOutcome::Failed(ErrorCode::ToolFailed));
                wire::write_error(out, ErrorCode::ToolFailed, failure.message(), id);
            }
            Some(Err(_elapsed)) => {
                cell.finish(&slot, CallOutcome::Failed(ErrorCode::Timeout));
                let msg = format!(
                    "\"{tool}\" did not finish before the cell's time limit; it was stopped \
                     and its outcome is unknown"
                );
                wire::write_error(out, ErrorCode::Timeout, &msg, id);
            }
            None => {
                let msg = format!(
                    "the cell that made this call ended while \"{tool}\" was running; the call \
                     was cancelled and its outcome is unknown"
                );
                wire::write_error(out, ErrorCode::NoActiveCell, &msg, id);
            }
        }
    }

    /// One line in, one reply line appended to `out`.
    pub(crate) async fn handle_line(&self, line: &[u8], out: &mut Vec<u8>) {
        match self.check(line, out) {
            Step::Replied => {}
            Step::Dispatch(ticket) => self.run(ticket, out).await,
        }
    }
}

pub(crate) fn too_large_msg(max: usize) -> String {
    format!("request line is longer than the limit of {max} bytes; it was skipped")
}

fn budget_msg(cell: &CellState) -> String {
    format!(
        "tool-call budget exhausted: this cell already made {} tool calls, the most allowed per \
         cell (max_tool_calls); further calls fail until the next cell",
        cell.dispatched()
    )
}
