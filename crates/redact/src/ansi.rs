//! ANSI / control-sequence stripping and carriage-return line collapsing.
//!
//! See the crate documentation for the rules; this module holds the byte-level
//! state machine ([`AnsiStripper`]) and the whole-text wrapper ([`strip_ansi`]).

use std::fmt;

use crate::simd::{self, is_special};

/// Size at which the held (still erasable) current line is committed to the
/// output even without a newline. The decision depends only on the byte
/// sequence, so streaming output does not depend on chunk boundaries.
pub const HELD_LINE_LIMIT: usize = 64 * 1024;

/// Strip ANSI escape sequences and control characters from `input`, collapse
/// carriage-return-overwritten lines and apply backspaces.
///
/// Invalid UTF-8 becomes U+FFFD; an unterminated escape sequence at the end of
/// the input is dropped. Equivalent to one [`AnsiStripper::push`] of the whole
/// input followed by [`AnsiStripper::finish`].
///
/// ```
/// use toolcell_redact::strip_ansi;
/// assert_eq!(strip_ansi(b"\x1b[1;31merror\x1b[0m: arr[31]"), "error: arr[31]");
/// assert_eq!(strip_ansi(b" 10%\r 50%\r100%\n"), "100%\n");
/// ```
pub fn strip_ansi(input: &[u8]) -> String {
    let mut out = String::with_capacity(input.len());
    let mut stripper = AnsiStripper::new();
    stripper.push(input, &mut out);
    stripper.finish(&mut out);
    out
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Ground,
    /// After ESC.
    Esc,
    /// nF escape: ESC, intermediates 0x20–0x2F, waiting for the final byte.
    EscInter,
    /// Control sequence (7-bit `ESC [` or 8-bit CSI).
    Csi,
    /// OSC / DCS / SOS / PM / APC string, swallowed until its terminator.
    Str,
    /// ESC seen inside a string (ST is `ESC \`).
    StrEsc,
}

/// Streaming ANSI stripper: raw bytes in, clean UTF-8 text out.
///
/// Feed chunks with [`push`](Self::push) and call [`finish`](Self::finish) at
/// the end of the stream (end of a cell). The concatenated output never
/// depends on how the input was split.
///
/// Text of the current line is held back until its newline, because a later
/// `\r` or backspace may still erase it; the held line is committed once it
/// reaches [`HELD_LINE_LIMIT`] bytes. Besides that line the stripper holds at
/// most an incomplete UTF-8 sequence (3 bytes) and a few state bits: escape
/// sequence bytes are discarded as they arrive, never buffered.
///
/// ```
/// use toolcell_redact::AnsiStripper;
/// let mut s = AnsiStripper::new();
/// let mut out = String::new();
/// s.push(b"Downloading \x1b[3", &mut out);
/// s.push(b"2m 40%\r", &mut out);
/// s.push(b"Downloading \xe2\x9c", &mut out);
/// s.push(b"\x93 done\n", &mut out);
/// s.finish(&mut out);
/// assert_eq!(out, "Downloading \u{2713} done\n");
/// ```
#[derive(Clone)]
pub struct AnsiStripper {
    state: State,
    /// Pending UTF-8 bytes of an incomplete sequence (ground state only).
    utf8: [u8; 4],
    utf8_len: u8,
    utf8_need: u8,
    /// Continuation bytes still expected inside a swallowed string, and whether
    /// the sequence started with 0xC2 (so `C2 9C` is a UTF-8-encoded ST).
    str_need: u8,
    str_c2: bool,
    /// A `\r` was seen and not yet resolved (by `\n` or by new text).
    cr: bool,
    /// The current, still erasable line, held between pushes.
    line: String,
    /// During a push: a lower bound of where the current line starts in
    /// `out` (exact after [`settle`](Self::settle)).
    ls: usize,
    /// During a push: `out[..scanned]` holds no newline after `ls`, so
    /// [`settle`](Self::settle) only looks at newer bytes (no rescans).
    scanned: usize,
}

impl fmt::Debug for AnsiStripper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnsiStripper")
            .field("state", &self.state)
            .field("pending_utf8", &&self.utf8[..usize::from(self.utf8_len)])
            .field("cr", &self.cr)
            .field("held_line_len", &self.line.len())
            .finish()
    }
}

impl Default for AnsiStripper {
    fn default() -> Self {
        Self::new()
    }
}

/// Length of the longest prefix of `bytes` (which starts with a non-ASCII
/// byte) that is visible text: complete valid UTF-8 characters other than
/// C1 controls (U+0080–U+009F), printable ASCII, `\n` and `\t`. Validated
/// in bulk with `str::from_utf8`; whatever is left (escapes, controls,
/// invalid or incomplete UTF-8, C1) goes through the byte state machine.
#[inline]
fn utf8_run_len(bytes: &[u8]) -> usize {
    let end = bytes
        .iter()
        .position(|&b| (b < 0x20 && b != b'\n' && b != b'\t') || b == 0x7f)
        .unwrap_or(bytes.len());
    let mut valid = match std::str::from_utf8(&bytes[..end]) {
        Ok(_) => end,
        Err(e) => e.valid_up_to(),
    };
    // U+0080–U+009F (C2 80..C2 9F) are C1 controls: stop before the first.
    let mut k = 0;
    while let Some(p) = memchr::memchr(0xc2, &bytes[k..valid]) {
        let q = k + p;
        if q + 1 < valid && bytes[q + 1] <= 0x9f {
            valid = q;
            break;
        }
        k = q + 1;
    }
    valid
}

/// Smallest char boundary of `s` that is `>= at` (or `s.len()`).
fn ceil_boundary(s: &str, at: usize) -> usize {
    let mut i = at.min(s.len());
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

impl AnsiStripper {
    /// A stripper in its initial state.
    pub fn new() -> Self {
        Self {
            state: State::Ground,
            utf8: [0; 4],
            utf8_len: 0,
            utf8_need: 0,
            str_need: 0,
            str_c2: false,
            cr: false,
            line: String::new(),
            ls: 0,
            scanned: 0,
        }
    }

    /// Bytes of text currently held back (the erasable current line).
    pub fn held_len(&self) -> usize {
        self.line.len() + usize::from(self.utf8_len)
    }

    /// Process one chunk, appending finished text to `out`.
    pub fn push(&mut self, input: &[u8], out: &mut String) {
        // The held line is written to `out` tentatively and taken back at the
        // end, so text is copied once, straight into `out`.
        self.ls = out.len();
        out.push_str(&self.line);
        self.line.clear();
        // The held line never contains a newline.
        self.scanned = out.len();
        self.push_inner(input, out);
        self.settle(out);
        self.line.push_str(&out[self.ls..]);
        out.truncate(self.ls);
    }

    fn push_inner(&mut self, input: &[u8], out: &mut String) {
        let mut i = 0;
        while i < input.len() {
            if self.state == State::Ground && self.utf8_len == 0 {
                // Clean runs and complete CSI sequences (the bulk of colored
                // output): the state stays Ground. The vector walk does most;
                // this loop does what it leaves (near the input's end, or
                // right after a `\r`).
                loop {
                    if !self.cr {
                        // Runs and CSI sequences in one vector loop; it
                        // stops at anything else, or near the input's end.
                        i = simd::ground_run(input, i, out);
                        if i == input.len() {
                            return;
                        }
                    }
                    let first = input[i];
                    if !is_special(first) {
                        // Printable ASCII, `\n`, `\t`: checked and copied in one pass.
                        self.resolve_cr(first, out);
                        i += simd::copy_clean_prefix(&input[i..], out);
                    } else if first == 0x1b && input.get(i + 1) == Some(&b'[') {
                        let mut j = i + 2;
                        while j < input.len() && (0x20..=0x3f).contains(&input[j]) {
                            j += 1;
                        }
                        if j < input.len() && (0x40..=0x7e).contains(&input[j]) {
                            i = j + 1;
                        } else {
                            break;
                        }
                    } else {
                        break;
                    }
                    if i == input.len() {
                        return;
                    }
                }
                let first = input[i];
                if first >= 0x80 {
                    let n = utf8_run_len(&input[i..]);
                    if n > 0 {
                        // `utf8_run_len` only accepts printable ASCII, `\n`,
                        // `\t` and complete valid UTF-8 characters.
                        let bytes = &input[i..i + n];
                        debug_assert!(std::str::from_utf8(bytes).is_ok());
                        // SAFETY: `utf8_run_len` only accepts bytes that
                        // passed `str::from_utf8` (cut at a char boundary:
                        // `valid_up_to`, or before a `C2` lead byte), so
                        // `bytes` is valid UTF-8.
                        let run = unsafe { std::str::from_utf8_unchecked(bytes) };
                        self.text(run, out);
                        i += n;
                        continue;
                    }
                }
            }
            let b = input[i];
            if self.byte(b, out) {
                i += 1;
            }
        }
    }

    /// End of stream: flush the held line, drop any unterminated escape
    /// sequence, turn an incomplete UTF-8 sequence into U+FFFD, and reset the
    /// stripper so it can be reused.
    pub fn finish(&mut self, out: &mut String) {
        self.ls = out.len();
        out.push_str(&self.line);
        self.line.clear();
        self.scanned = out.len();
        if self.utf8_len > 0 {
            self.utf8_len = 0;
            self.utf8_need = 0;
            self.text("\u{FFFD}", out);
        }
        self.state = State::Ground;
        self.str_need = 0;
        self.str_c2 = false;
        self.cr = false;
    }

    /// Make `self.ls` exact: the start of the current line in `out`, after
    /// committing every full [`HELD_LINE_LIMIT`] bytes of it (the same cut
    /// points as committing char by char, so chunking never matters).
    fn settle(&mut self, out: &str) {
        let from = self.scanned.max(self.ls).min(out.len());
        if let Some(k) = memchr::memrchr(b'\n', &out.as_bytes()[from..]) {
            self.ls = from + k + 1;
        }
        self.scanned = out.len();
        while out.len() - self.ls >= HELD_LINE_LIMIT {
            self.ls += ceil_boundary(&out[self.ls..], HELD_LINE_LIMIT);
        }
    }

    /// Append visible text (no controls except `\n` and `\t`).
    fn text(&mut self, s: &str, out: &mut String) {
        if s.is_empty() {
            return;
        }
        self.resolve_cr(s.as_bytes()[0], out);
        out.push_str(s);
    }

    /// Visible text starting with byte `first` follows: a pending `\r`
    /// not followed by `\n` starts the line over.
    #[inline]
    fn resolve_cr(&mut self, first: u8, out: &mut String) {
        if self.cr {
            self.cr = false;
            if first != b'\n' {
                // `\r` not followed by `\n`: the line starts over.
                self.settle(out);
                out.truncate(self.ls);
                self.scanned = self.ls;
            }
        }
    }

    fn char_out(&mut self, c: char, out: &mut String) {
        let mut buf = [0u8; 4];
        let s: &str = c.encode_utf8(&mut buf);
        self.text(s, out);
    }

    /// A C1 control (8-bit form or UTF-8-encoded U+0080–U+009F) in ground state.
    fn c1(&mut self, b: u8) {
        self.state = match b {
            0x9b => State::Csi,
            0x9d | 0x90 | 0x98 | 0x9e | 0x9f => {
                self.str_need = 0;
                self.str_c2 = false;
                State::Str
            }
            _ => State::Ground,
        };
    }

    /// Process one byte. Returns false when the byte must be processed again
    /// (it ended a sequence without belonging to it).
    fn byte(&mut self, b: u8, out: &mut String) -> bool {
        match self.state {
            State::Ground => self.ground(b, out),
            State::Esc => {
                match b {
                    b'[' => self.state = State::Csi,
                    b']' | b'P' | b'X' | b'^' | b'_' => {
                        self.str_need = 0;
                        self.str_c2 = false;
                        self.state = State::Str;
                    }
                    0x20..=0x2f => self.state = State::EscInter,
                    0x30..=0x7e => self.state = State::Ground,
                    0x1b | 0x7f => {}
                    _ => {
                        self.state = State::Ground;
                        return false;
                    }
                }
                true
            }
            State::EscInter => {
                match b {
                    0x20..=0x2f | 0x7f => {}
                    0x30..=0x7e => self.state = State::Ground,
                    0x1b => self.state = State::Esc,
                    _ => {
                        self.state = State::Ground;
                        return false;
                    }
                }
                true
            }
            State::Csi => {
                match b {
                    0x20..=0x3f | 0x7f => {}
                    0x40..=0x7e => self.state = State::Ground,
                    0x1b => self.state = State::Esc,
                    _ => {
                        self.state = State::Ground;
                        return false;
                    }
                }
                true
            }
            State::Str => {
                if self.str_need > 0 && (0x80..=0xbf).contains(&b) {
                    self.str_need -= 1;
                    if self.str_c2 && b == 0x9c {
                        // UTF-8-encoded ST (U+009C).
                        self.state = State::Ground;
                    }
                    self.str_c2 = false;
                    return true;
                }
                self.str_need = 0;
                self.str_c2 = false;
                match b {
                    0x07 | 0x9c => self.state = State::Ground,
                    0x1b => self.state = State::StrEsc,
                    b'\n' => {
                        // A newline ends a runaway string: never swallow more than one line.
                        self.state = State::Ground;
                        return false;
                    }
                    0xc2..=0xdf => {
                        self.str_need = 1;
                        self.str_c2 = b == 0xc2;
                    }
                    0xe0..=0xef => self.str_need = 2,
                    0xf0..=0xf4 => self.str_need = 3,
                    _ => {}
                }
                true
            }
            State::StrEsc => {
                if b == b'\\' {
                    self.state = State::Ground;
                    true
                } else {
                    // ESC inside a string aborts it and starts a new escape.
                    self.state = State::Esc;
                    false
                }
            }
        }
    }

    fn ground(&mut self, b: u8, out: &mut String) -> bool {
        if self.utf8_len > 0 {
            let first = self.utf8[0];
            let len = usize::from(self.utf8_len);
            let valid = if len == 1 {
                match first {
                    0xe0 => (0xa0..=0xbf).contains(&b),
                    0xed => (0x80..=0x9f).contains(&b),
                    0xf0 => (0x90..=0xbf).contains(&b),
                    0xf4 => (0x80..=0x8f).contains(&b),
                    _ => (0x80..=0xbf).contains(&b),
                }
            } else {
                (0x80..=0xbf).contains(&b)
            };
            if !valid {
                // Maximal invalid subpart becomes one U+FFFD; reprocess `b`.
                self.utf8_len = 0;
                self.utf8_need = 0;
                self.text("\u{FFFD}", out);
                return false;
            }
            self.utf8[len] = b;
            self.utf8_len += 1;
            self.utf8_need -= 1;
            if self.utf8_need == 0 {
                let n = usize::from(self.utf8_len);
                self.utf8_len = 0;
                let bytes = self.utf8;
                match std::str::from_utf8(&bytes[..n])
                    .ok()
                    .and_then(|s| s.chars().next())
                {
                    Some(c) if ('\u{80}'..='\u{9f}').contains(&c) => self.c1(c as u8),
                    Some(c) => self.char_out(c, out),
                    None => self.text("\u{FFFD}", out),
                }
            }
            return true;
        }
        match b {
            0x1b => self.state = State::Esc,
            b'\r' => self.cr = true,
            0x08 => {
                if !self.cr {
                    self.settle(out);
                    if out.len() > self.ls {
                        out.pop();
                        self.scanned = out.len();
                    }
                }
            }
            b'\n' | b'\t' | 0x20..=0x7e => {
                let buf = [b];
                if let Ok(s) = std::str::from_utf8(&buf) {
                    self.text(s, out);
                }
            }
            0x00..=0x1f | 0x7f => {}
            0x80..=0x9f => self.c1(b),
            0xc2..=0xdf => self.start_utf8(b, 1),
            0xe0..=0xef => self.start_utf8(b, 2),
            0xf0..=0xf4 => self.start_utf8(b, 3),
            _ => self.text("\u{FFFD}", out),
        }
        true
    }

    fn start_utf8(&mut self, b: u8, need: u8) {
        self.utf8[0] = b;
        self.utf8_len = 1;
        self.utf8_need = need;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(input: &[u8]) -> String {
        strip_ansi(input)
    }

    #[test]
    fn clean_text_is_untouched() {
        let t = "fn main() { let arr = [1, 2]; arr[31]; } C:\\path\\to \u{1F600} 漢字 café\n\ttab";
        assert_eq!(s(t.as_bytes()), t);
    }

    #[test]
    fn csi_sgr_and_private_modes() {
        assert_eq!(s(b"\x1b[1;31mred\x1b[0m"), "red");
        assert_eq!(s(b"\x1b[38:2::255:0:0mtrue\x1b[m"), "true");
        assert_eq!(s(b"\x1b[38;5;208mx\x1b[39m"), "x");
        assert_eq!(s(b"\x1b[?25lhidden\x1b[?25h"), "hidden");
        assert_eq!(s(b"a\x1b[2Kb\x1b[1A\x1b[10;20Hc"), "abc");
        assert_eq!(s(b"\x9b31mC1\x9b0m"), "C1");
        assert_eq!(s("\u{9b}31mU\u{9b}0m".as_bytes()), "U");
    }

    #[test]
    fn osc_and_hyperlinks() {
        assert_eq!(s(b"\x1b]0;title\x07text"), "text");
        assert_eq!(s(b"\x1b]2;title\x1b\\text"), "text");
        assert_eq!(
            s(b"\x1b]8;;https://example.com\x1b\\link text\x1b]8;;\x1b\\ after"),
            "link text after"
        );
        assert_eq!(s(b"\x1b]8;id=1;http://x\x07vis\x1b]8;;\x07"), "vis");
        // A UTF-8 title containing a 0x9C continuation byte does not end the OSC.
        assert_eq!(s("\x1b]0;Ŝitle\x07ok".as_bytes()), "ok");
        assert_eq!(s("\x1b]0;t\u{9c}ok".as_bytes()), "ok");
    }

    #[test]
    fn dcs_sos_pm_apc_and_short_escapes() {
        assert_eq!(s(b"a\x1bPq#0;2;0;0;0#0~~\x1b\\b"), "ab");
        assert_eq!(s(b"a\x1bXsos\x1b\\b\x1b^pm\x1b\\c\x1b_apc\x1b\\d"), "abcd");
        assert_eq!(s(b"\x1b(Bx\x1b)0y\x1b#8z"), "xyz");
        assert_eq!(s(b"\x1b7saved\x1b8\x1bM\x1bc"), "saved");
    }

    #[test]
    fn controls_and_c1() {
        assert_eq!(s(b"a\x00b\x07c\x0bd\x0ce\x7ff"), "abcdef");
        assert_eq!(s(b"tab\there\n"), "tab\there\n");
        assert_eq!(s(b"x\x85y\x8dz"), "xyz");
        assert_eq!(s("x\u{85}y".as_bytes()), "xy");
        assert_eq!(
            s(b"bad \xff\xfe utf8 \xe2\x28"),
            "bad \u{FFFD}\u{FFFD} utf8 \u{FFFD}("
        );
    }

    #[test]
    fn carriage_return_collapses_progress() {
        assert_eq!(s(b" 10%|#   |\r 50%|##  |\r100%|####|\n"), "100%|####|\n");
        assert_eq!(s(b"line\r\nnext\r\n"), "line\nnext\n");
        assert_eq!(s(b"abc\r\r\n"), "abc\n");
        assert_eq!(s(b"keep\nabc\rxy"), "keep\nxy");
        // `\r` at the very end: the terminal still shows the line.
        assert_eq!(s(b"Downloading...\r"), "Downloading...");
        assert_eq!(s(b"a\r\x1b[Kb\n"), "b\n");
    }

    #[test]
    fn backspace_erases_one_char() {
        assert_eq!(s(b"abc\x08\x08d"), "ad");
        assert_eq!(s("h\u{e9}\x08e".as_bytes()), "he");
        assert_eq!(s(b"x\n\x08y"), "x\ny");
        assert_eq!(s(b"|\x08/\x08-\x08\\\x08done"), "done");
    }

    #[test]
    fn unterminated_escape_is_dropped() {
        assert_eq!(s(b"text\x1b[31"), "text");
        assert_eq!(s(b"text\x1b]0;never ends"), "text");
        assert_eq!(s(b"text\xe2\x9c"), "text\u{FFFD}");
    }

    #[test]
    fn runaway_string_stops_at_newline() {
        assert_eq!(s(b"a\x1b]0;oops\nvisible\n"), "a\nvisible\n");
    }

    #[test]
    fn held_line_is_bounded_and_committed() {
        let long = "x".repeat(HELD_LINE_LIMIT + 10);
        let mut st = AnsiStripper::new();
        let mut out = String::new();
        st.push(long.as_bytes(), &mut out);
        assert_eq!(out.len(), HELD_LINE_LIMIT);
        assert_eq!(st.held_len(), 10);
        // A carriage return only erases the part not yet committed.
        st.push(b"\rY", &mut out);
        st.finish(&mut out);
        assert_eq!(out.len(), HELD_LINE_LIMIT + 1);
        assert!(out.ends_with('Y'));
    }

    #[test]
    fn streaming_byte_by_byte_matches_whole() {
        let input: &[u8] = b"\x1b[32m ok \x1b[0m\xe2\x9c\x93 10%\r50%\r\x1b]8;;u\x07v\x1b]8;;\x07\x9b1m\xc3\xa9\xff\r\nend";
        let whole = strip_ansi(input);
        let mut st = AnsiStripper::new();
        let mut out = String::new();
        for b in input {
            st.push(std::slice::from_ref(b), &mut out);
        }
        st.finish(&mut out);
        assert_eq!(out, whole);
    }
}

#[cfg(test)]
mod spinner_tests {
    use super::*;

    /// A spinner drawn with backspaces at the end of a long line: the line
    /// survives intact and only the spinner is erased (the line start is
    /// tracked incrementally, not rescanned per backspace).
    #[test]
    fn backspace_spinner_on_long_line() {
        let mut input = "x".repeat(60_000).into_bytes();
        for _ in 0..200_000 {
            input.extend_from_slice(b"|\x08");
        }
        input.extend_from_slice(b"done\n");
        let out = strip_ansi(&input);
        assert_eq!(out.len(), 60_000 + 5);
        assert!(out.ends_with("xdone\n"));
    }
}

#[cfg(test)]
mod simd_tests {
    use super::*;
    use proptest::prelude::*;

    /// Escapes, controls and UTF-8 between clean runs long enough for the
    /// vector path (several 32-byte blocks).
    fn input() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            prop_oneof![
                "[ -~\n\t]{0,100}".prop_map(String::into_bytes),
                Just(b"\x1b[0m\x1b[1m\x1b[38;5;12m|\x1b[0m text \x1b[0m".to_vec()),
                Just(b"\x1b[1;2;3;4;5;6;7;8;9;10;11;12;13;14;15;16m".to_vec()),
                Just(b"\x1b[1;31m".to_vec()),
                Just(b"\x1b]8;;u\x07".to_vec()),
                Just(b"\r".to_vec()),
                Just(b"\x08".to_vec()),
                Just("é漢😀\u{85}".as_bytes().to_vec()),
                proptest::collection::vec(any::<u8>(), 0..4),
            ],
            0..16,
        )
        .prop_map(|v| v.concat())
    }

    proptest! {
        /// The whole input goes through the vector path; fed byte by byte
        /// (chunks under one block) it takes the scalar path only. Both,
        /// and every split in two, give the same text.
        #[test]
        fn vector_and_scalar_paths_agree_at_every_split(input in input()) {
            let whole = strip_ansi(&input);
            let mut st = AnsiStripper::new();
            let mut bytewise = String::new();
            for b in &input {
                st.push(std::slice::from_ref(b), &mut bytewise);
            }
            st.finish(&mut bytewise);
            prop_assert_eq!(&bytewise, &whole);
            for cut in 0..=input.len() {
                let mut st = AnsiStripper::new();
                let mut out = String::new();
                st.push(&input[..cut], &mut out);
                st.push(&input[cut..], &mut out);
                st.finish(&mut out);
                prop_assert_eq!(&out, &whole, "cut at {}", cut);
            }
        }
    }
}
