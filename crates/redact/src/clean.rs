//! [`Cleaner`]: the per-stream pipeline stripper → redactor.

use crate::ansi::AnsiStripper;
use crate::redact::{RedactStream, Redactor};

/// Bytes in, cleaned text out: [`AnsiStripper`] followed by a [`RedactStream`].
///
/// This is what a kernel's stdout or stderr goes through, chunk by chunk, as
/// it is read from the pipe. The output never depends on how the input was
/// split. Held back at any time: the stripper's current line (at most
/// [`HELD_LINE_LIMIT`](crate::HELD_LINE_LIMIT) bytes) plus the redactor's
/// (at most [`MAX_HELD`](crate::MAX_HELD)); [`finish`](Self::finish) flushes
/// both at the end of a cell.
///
/// ```
/// use toolcell_redact::{Cleaner, Redactor};
/// let mut c = Cleaner::new(&Redactor::builtin());
/// let mut out = String::new();
/// c.push(b"\x1b[33mwarning\x1b[0m: GITHUB_TOKEN=ghp_D53X83RZJzzz", &mut out);
/// c.push(b"zgEOzdmenCkhvMdgaKjIg8xN\n 50%\r100%\n", &mut out);
/// c.finish(&mut out);
/// assert_eq!(out, "warning: GITHUB_TOKEN=«redacted:github_token»\n100%\n");
/// ```
#[derive(Debug)]
pub struct Cleaner {
    strip: AnsiStripper,
    redact: RedactStream,
    buf: String,
}

impl Cleaner {
    /// A cleaner using `redactor`'s rules (shared, not copied).
    pub fn new(redactor: &Redactor) -> Self {
        Self {
            strip: AnsiStripper::new(),
            redact: redactor.stream(),
            buf: String::new(),
        }
    }

    /// Clean one chunk of raw output, appending finished text to `out`.
    pub fn push(&mut self, chunk: &[u8], out: &mut String) {
        self.buf.clear();
        self.strip.push(chunk, &mut self.buf);
        if !self.buf.is_empty() {
            self.redact.push(&self.buf, out);
        }
        self.shrink();
    }

    /// End of the stream: flush everything held back. The cleaner is reset
    /// and can be reused for the next cell.
    pub fn finish(&mut self, out: &mut String) {
        self.buf.clear();
        self.strip.finish(&mut self.buf);
        self.redact.push(&self.buf, out);
        self.redact.finish(out);
        self.buf.clear();
        self.shrink();
    }

    /// Bytes currently held back by both stages.
    pub fn held_len(&self) -> usize {
        self.strip.held_len() + self.redact.held_len()
    }

    /// Keep the scratch buffer from pinning the memory of one huge chunk.
    fn shrink(&mut self) {
        if self.buf.capacity() > 1 << 20 {
            self.buf = String::new();
        }
    }
}

impl Redactor {
    /// Whole-text convenience: strip ANSI from `raw`, then redact.
    pub fn clean(&self, raw: &[u8]) -> String {
        let stripped = crate::ansi::strip_ansi(raw);
        match self.redact(&stripped) {
            std::borrow::Cow::Borrowed(_) => stripped,
            std::borrow::Cow::Owned(s) => s,
        }
    }
}

/// Words that make an environment variable name secret: such variables are
/// scrubbed from a kernel's environment, and their values are redacted wherever
/// they appear. See SECURITY.md
/// ("Host secrets stay out of the kernel's environment").
pub const SECRET_ENV_WORDS: &[&str] = &[
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "CREDS",
    "AUTH",
    "BEARER",
    "DSN",
    "WEBHOOK",
    "APIKEY",
];

/// Does this environment variable name contain a secret word (ASCII
/// case-insensitive)? `OPENAI_API_KEY`, `GH_TOKEN`, `SENTRY_DSN` do.
pub fn is_secret_env_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_ENV_WORDS.iter().any(|w| upper.contains(w))
}

impl Redactor {
    /// Built-in rules plus the values of this process's secret-named
    /// environment variables ([`is_secret_env_name`], values of at least
    /// [`MIN_EXACT_SECRET_LEN`](crate::MIN_EXACT_SECRET_LEN) bytes).
    pub fn from_env() -> Result<Self, crate::RedactError> {
        let values = std::env::vars_os().filter_map(|(k, v)| {
            let k = k.to_str()?;
            let v = v.into_string().ok()?;
            is_secret_env_name(k).then_some(v)
        });
        Self::new(values)
    }
}
