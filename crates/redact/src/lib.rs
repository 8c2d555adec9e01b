//! toolcell-redact (doc pending)
mod ansi;
mod redact;
mod rules;
pub use ansi::{AnsiStripper, HELD_LINE_LIMIT, strip_ansi};
pub use redact::{LINE_MAX, MAX_HELD, MIN_EXACT_SECRET_LEN, RedactError, RedactStream, Redactor};
