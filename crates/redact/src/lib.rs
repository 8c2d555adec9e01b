//! toolcell-redact (doc pending)
mod ansi;
pub use ansi::{AnsiStripper, HELD_LINE_LIMIT, strip_ansi};
