//! Request parsing and reply encoding for the tool socket's line protocol:
//! docs/protocol.md ("Request and reply").

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde_json::value::RawValue;

/// The `code` of a refused or failed request; docs/protocol.md
/// ("Checks, in order") lists them all. The string forms are the contract;
/// [`ErrorCode::as_str`] gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The line is not a JSON request object of the expected shape.
    BadRequest,
    /// The line is longer than the configured maximum (16 MiB by default).
    TooLarge,
    /// The token is missing or wrong (also used when a Unix peer has another uid).
    BadToken,
    /// No cell is running (a thread the cell left behind), or the call's cell
    /// ended while the call was running (it was cancelled).
    NoActiveCell,
    /// The dispatcher does not know the tool.
    UnknownTool,
    /// The tool exists but is not enabled for the current cell.
    NotAllowed,
    /// The arguments contain a parameter cells may not use with this tool.
    BlockedParam,
    /// The cell's tool-call budget is used up.
    BudgetExhausted,
    /// The arguments failed the tool's validation.
    BadArgs,
    /// The tool ran and reported a failure.
    ToolFailed,
    /// The cell's deadline passed before the call finished.
    Timeout,
}

impl ErrorCode {
    /// Every code, in the order of docs/protocol.md ("Checks, in order").
    pub const ALL: [ErrorCode; 11] = [
        ErrorCode::BadRequest,
        ErrorCode::TooLarge,
        ErrorCode::BadToken,
        ErrorCode::NoActiveCell,
        ErrorCode::UnknownTool,
        ErrorCode::NotAllowed,
        ErrorCode::BlockedParam,
        ErrorCode::BudgetExhausted,
        ErrorCode::BadArgs,
        ErrorCode::ToolFailed,
        ErrorCode::Timeout,
    ];

    /// The wire form, e.g. `"budget_exhausted"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::BadToken => "bad_token",
            ErrorCode::NoActiveCell => "no_active_cell",
            ErrorCode::UnknownTool => "unknown_tool",
            ErrorCode::NotAllowed => "not_allowed",
            ErrorCode::BlockedParam => "blocked_param",
            ErrorCode::BudgetExhausted => "budget_exhausted",
            ErrorCode::BadArgs => "bad_args",
            ErrorCode::ToolFailed => "tool_failed",
            ErrorCode::Timeout => "timeout",
        }
    }

    /// Parses the wire form.
    pub fn from_wire(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }

    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request line, borrowed from the read buffer where possible.
/// `"args": null` and `"token": null` read as absent; `"id"` is kept
/// verbatim (even `null`) to be echoed.
#[derive(Deserialize)]
pub(crate) struct RawRequest<'a> {
    #[serde(borrow)]
    pub tool: Cow<'a, str>,
    #[serde(default)]
    pub args: Option<serde_json::Value>,
    #[serde(borrow, default)]
    pub token: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "raw_some")]
    pub id: Option<&'a RawValue>,
}

fn raw_some<'de, D>(d: D) -> Result<Option<&'de RawValue>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    <&'de RawValue>::deserialize(d).map(Some)
}

/// Longest piece of client input quoted back in an error message.
const QUOTE_MAX: usize = 80;

/// Appends `s` to `out` as a JSON string, cut to [`QUOTE_MAX`] bytes (on a
/// character boundary) with `…` when longer.
pub(crate) fn push_quoted_short(out: &mut String, s: &str) {
    if s.len() <= QUOTE_MAX {
        out.push_str(s);
        return;
    }
    let mut end = QUOTE_MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    out.push_str(&s[..end]);
    out.push('…');
}

/// Writes `{"ok":false,"code":…,"error":…[,"id":…]}\n` into `out`.
pub(crate) fn write_error(
    out: &mut Vec<u8>,
    code: ErrorCode,
    message: &str,
    id: Option<&RawValue>,
) {
    out.extend_from_slice(b"{\"ok\":false,\"code\":\"");
    out.extend_from_slice(code.as_str().as_bytes());
    out.extend_from_slice(b"\",\"error\":");
    write_json_str(out, message);
    write_id_and_end(out, id);
}

/// Writes `{"ok":true,"result":…[,"id":…]}\n` into `out`.
pub(crate) fn write_ok(out: &mut Vec<u8>, result: &serde_json::Value, id: Option<&RawValue>) {
    out.extend_from_slice(b"{\"ok\":true,\"result\":");
    // Writing a `Value` into a Vec cannot fail: its keys are strings and
    // numbers are finite by construction. Fall back to null just in case.
    let mark = out.len();
    if serde_json::to_writer(&mut *out, result).is_err() {
        out.truncate(mark);
        out.extend_from_slice(b"null");
    }
    write_id_and_end(out, id);
}

fn write_id_and_end(out: &mut Vec<u8>, id: Option<&RawValue>) {
    if let Some(id) = id {
        out.extend_from_slice(b",\"id\":");
        out.extend_from_slice(id.get().as_bytes());
    }
    out.extend_from_slice(b"}\n");
}

fn write_json_str(out: &mut Vec<u8>, s: &str) {
    let mark = out.len();
    if serde_json::to_writer(&mut *out, s).is_err() {
        out.truncate(mark);
        out.extend_from_slice(b"\"\"");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_through_their_wire_form() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_wire(code.as_str()), Some(code));
            assert_eq!(ErrorCode::ALL[code.index()], code);
        }
        assert_eq!(ErrorCode::from_wire("nope"), None);
    }

    #[test]
    fn replies_are_one_json_line_with_the_id_echoed() {
        let id: Box<RawValue> = serde_json::from_str(r#"{"n":[1,2]}"#).unwrap();
        let mut out = Vec::new();
        write_error(
            &mut out,
            ErrorCode::BadArgs,
            "field \"x\": \"quoted\"\n",
            Some(&id),
        );
        write_ok(&mut out, &serde_json::json!({"a": "b"}), None);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        let e: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(e["ok"], false);
        assert_eq!(e["code"], "bad_args");
        assert_eq!(e["error"], "field \"x\": \"quoted\"\n");
        assert_eq!(e["id"], serde_json::json!({"n": [1, 2]}));
        let o: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(o, serde_json::json!({"ok": true, "result": {"a": "b"}}));
    }

    #[test]
    fn quoting_cuts_long_input_on_a_char_boundary() {
        let mut s = String::new();
        push_quoted_short(&mut s, &"é".repeat(100));
        assert!(s.ends_with('…'));
        assert!(s.len() <= QUOTE_MAX + '…'.len_utf8());
    }
}
