//! The sans-IO incremental frame decoder: docs/protocol.md ("Decoder rules").

use std::borrow::Cow;
use std::fmt;

use memchr::memmem;

use crate::sentinel::Sentinel;

/// Default largest frame body the decoder accepts: 64 MiB (docs/protocol.md,
/// "Decoder rules").
pub const DEFAULT_MAX_FRAME_LEN: usize = 64 * 1024 * 1024;

/// Most decimal digits a frame header may carry: docs/protocol.md ("Frames").
pub const MAX_HEADER_DIGITS: usize = 20;

/// One thing the decoder found in the byte stream.
///
/// Raw output borrows from the chunk that was pushed whenever it can, so the
/// common case (a cell printing and no frame in sight) copies nothing.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event<'a> {
    /// Bytes outside any frame: the cell's own output, in order.
    Raw(Cow<'a, [u8]>),
    /// The body of one complete frame (UTF-8 JSON when the runner wrote it).
    Frame(Vec<u8>),
    /// A marker that turned out not to start a frame, plus the header bytes
    /// that were read after it. These bytes are raw output; they are a
    /// separate event so that a host can count them (a cell printing
    /// something frame-like is worth a log line).
    NotAFrame {
        /// The marker and header bytes, to be treated as raw output
        /// (borrowed from the chunk when the whole header was in it).
        bytes: Cow<'a, [u8]>,
        /// Why they are not a frame.
        reason: Rejection,
    },
    /// The stream ended after a complete header but before the whole body;
    /// carries the partial body.
    EofInFrame(Vec<u8>),
}

impl Event<'_> {
    /// Detaches the event from the chunk it borrows from.
    #[must_use]
    pub fn into_owned(self) -> Event<'static> {
        match self {
            Event::Raw(b) => Event::Raw(Cow::Owned(b.into_owned())),
            Event::Frame(b) => Event::Frame(b),
            Event::NotAFrame { bytes, reason } => Event::NotAFrame {
                bytes: Cow::Owned(bytes.into_owned()),
                reason,
            },
            Event::EofInFrame(b) => Event::EofInFrame(b),
        }
    }

    /// The bytes this event carries (raw output, frame body or partial body).
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        match self {
            Event::Raw(b) | Event::NotAFrame { bytes: b, .. } => b,
            Event::Frame(b) | Event::EofInFrame(b) => b,
        }
    }

    /// True for events whose bytes are raw output ([`Event::Raw`] and
    /// [`Event::NotAFrame`]).
    #[must_use]
    pub fn is_raw(&self) -> bool {
        matches!(self, Event::Raw(_) | Event::NotAFrame { .. })
    }
}

impl fmt::Debug for Event<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        match self {
            Event::Raw(b) => f.debug_tuple("Raw").field(&show(b)).finish(),
            Event::Frame(b) => f.debug_tuple("Frame").field(&show(b)).finish(),
            Event::NotAFrame { bytes, reason } => f
                .debug_struct("NotAFrame")
                .field("bytes", &show(bytes))
                .field("reason", reason)
                .finish(),
            Event::EofInFrame(b) => f.debug_tuple("EofInFrame").field(&show(b)).finish(),
        }
    }
}

/// Why a marker was not the start of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejection {
    /// A byte other than a digit or `\n` followed the marker or the digits.
    BadHeaderByte(u8),
    /// `\n` came right after the marker: no length.
    NoDigits,
    /// More than [`MAX_HEADER_DIGITS`] digits.
    TooManyDigits,
    /// The declared length is above the decoder's maximum.
    TooLong {
        /// The length the header declared.
        declared: u128,
        /// The decoder's maximum.
        max: usize,
    },
    /// The stream ended while the header was incomplete.
    Eof,
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::BadHeaderByte(b) => {
                write!(f, "byte 0x{b:02x} where a length digit or newline belongs")
            }
            Rejection::NoDigits => f.write_str("newline right after the marker, no length"),
            Rejection::TooManyDigits => {
                write!(f, "more than {MAX_HEADER_DIGITS} length digits")
            }
            Rejection::TooLong { declared, max } => {
                write!(f, "declared length {declared} is above the maximum {max}")
            }
            Rejection::Eof => f.write_str("end of stream inside the frame header"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Looking for a marker; `marker[..held]` (a proper prefix) ends the input
    /// seen so far and has not been released yet.
    Scan { held: usize },
    /// A whole marker was seen; `digits[..n]` followed it so far.
    Header {
        digits: [u8; MAX_HEADER_DIGITS],
        n: usize,
    },
    /// Inside a body; `remaining` bytes still to come (already read ones are
    /// in `Decoder::body`).
    Body { remaining: usize },
}

/// Incremental decoder for the sentinel framing of docs/protocol.md ("Frames").
///
/// Push chunks with [`Decoder::feed`] and drain the returned iterator; call
/// [`Decoder::finish`] at end of stream. The events, once adjacent raw runs
/// are merged, do not depend on how the input was split into chunks.
///
/// Memory: the decoder holds at most `marker.len() - 1` bytes while scanning,
/// `marker.len() + 20` while reading a header and the body (at most
/// [`Decoder::max_frame_len`]) while reading a frame. Raw bytes are never
/// copied except a held-back marker prefix.
pub struct Decoder {
    marker: Vec<u8>,
    finder: memmem::Finder<'static>,
    max_frame_len: usize,
    state: State,
    body: Vec<u8>,
}

impl fmt::Debug for Decoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decoder")
            .field("max_frame_len", &self.max_frame_len)
            .field("state", &self.state)
            .field("body_len", &self.body.len())
            .finish_non_exhaustive()
    }
}

impl Decoder {
    /// A decoder for frames marked with `sentinel`, accepting bodies up to
    /// [`DEFAULT_MAX_FRAME_LEN`].
    #[must_use]
    pub fn new(sentinel: &Sentinel) -> Self {
        let marker = sentinel.marker();
        let finder = memmem::Finder::new(&marker).into_owned();
        Self {
            marker,
            finder,
            max_frame_len: DEFAULT_MAX_FRAME_LEN,
            state: State::Scan { held: 0 },
            body: Vec::new(),
        }
    }

    /// Sets the largest accepted body length; a header declaring more is not
    /// a frame (its bytes become raw output).
    #[must_use]
    pub fn with_max_frame_len(mut self, max: usize) -> Self {
        self.max_frame_len = max;
        self
    }

    /// The largest accepted body length.
    #[must_use]
    pub fn max_frame_len(&self) -> usize {
        self.max_frame_len
    }

    /// Bytes currently held inside the decoder (held-back marker prefix,
    /// marker and digits of an incomplete header, or a partial body).
    #[must_use]
    pub fn buffered_len(&self) -> usize {
        match self.state {
            State::Scan { held } => held,
            State::Header { n, .. } => self.marker.len() + n,
            State::Body { .. } => self.body.len(),
        }
    }

    /// The most [`Decoder::buffered_len`] can ever be for this decoder.
    #[must_use]
    pub fn buffered_bound(&self) -> usize {
        self.max_frame_len
            .max(self.marker.len() + MAX_HEADER_DIGITS)
    }

    /// In the scanning state, how many bytes are held back as a possible
    /// marker start; `None` inside a header or body.
    #[doc(hidden)]
    #[must_use]
    pub fn scan_held(&self) -> Option<usize> {
        match self.state {
            State::Scan { held } => Some(held),
            _ => None,
        }
    }

    /// Releases a held-back marker prefix as raw output, if there is one.
    ///
    /// Only for a writer that sends every frame header in one atomic write
    /// (the toolcell runner does: pipe writes up to `PIPE_BUF` are atomic).
    /// Then, once the stream has been quiet for a moment, a held prefix
    /// cannot be the start of a real frame — its rest would have arrived
    /// with it — and a host may call this so that output ending in `\n`
    /// (which could begin a marker) is not delayed until more output comes.
    /// Inside a header or a body it does nothing.
    pub fn release_held(&mut self) -> Option<Event<'static>> {
        match self.state {
            State::Scan { held } if held > 0 => {
                self.state = State::Scan { held: 0 };
                Some(Event::Raw(Cow::Owned(self.marker[..held].to_vec())))
            }
            _ => None,
        }
    }

    /// Pushes one chunk; the returned iterator yields its events.
    ///
    /// Drain the iterator before pushing the next chunk: the part of the
    /// chunk not yet decoded when the iterator is dropped is discarded.
    pub fn feed<'d, 'c>(&'d mut self, chunk: &'c [u8]) -> Feed<'d, 'c> {
        Feed {
            dec: self,
            chunk,
            pos: 0,
            header_start: None,
        }
    }

    /// Ends the stream: returns what was still held, if anything, and
    /// resets the decoder for a new stream.
    ///
    /// - a held-back marker prefix → [`Event::Raw`];
    /// - an incomplete header → [`Event::NotAFrame`] with [`Rejection::Eof`];
    /// - a partial body → [`Event::EofInFrame`].
    pub fn finish(&mut self) -> Option<Event<'static>> {
        let state = std::mem::replace(&mut self.state, State::Scan { held: 0 });
        match state {
            State::Scan { held: 0 } => None,
            State::Scan { held } => Some(Event::Raw(Cow::Owned(self.marker[..held].to_vec()))),
            State::Header { digits, n } => Some(Event::NotAFrame {
                bytes: Cow::Owned(self.rejected_bytes(&digits[..n])),
                reason: Rejection::Eof,
            }),
            State::Body { .. } => Some(Event::EofInFrame(std::mem::take(&mut self.body))),
        }
    }

    fn rejected_bytes(&self, digits: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.marker.len() + digits.len());
        v.extend_from_slice(&self.marker);
        v.extend_from_slice(digits);
        v
    }
}

/// The events of one pushed chunk; see [`Decoder::feed`].
#[must_use = "a Feed decodes its chunk only as it is iterated"]
pub struct Feed<'d, 'c> {
    dec: &'d mut Decoder,
    chunk: &'c [u8],
    pos: usize,
    /// Where the marker of the current header began, when it began in this
    /// chunk (so a rejected header can be borrowed instead of copied).
    header_start: Option<usize>,
}

impl fmt::Debug for Feed<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Feed")
            .field("remaining", &(self.chunk.len() - self.pos))
            .finish_non_exhaustive()
    }
}

impl<'c> Iterator for Feed<'_, 'c> {
    type Item = Event<'c>;

    fn next(&mut self) -> Option<Event<'c>> {
        let chunk: &'c [u8] = self.chunk;
        loop {
            let rest = chunk.get(self.pos..).unwrap_or_default();
            if rest.is_empty() {
                return None;
            }
            let dec = &mut *self.dec;
            match dec.state {
                State::Body { remaining } => {
                    let take = remaining.min(rest.len());
                    dec.body.extend_from_slice(&rest[..take]);
                    self.pos += take;
                    if take == remaining {
                        dec.state = State::Scan { held: 0 };
                        return Some(Event::Frame(std::mem::take(&mut dec.body)));
                    }
                    dec.state = State::Body {
                        remaining: remaining - take,
                    };
                }
                State::Header { mut digits, mut n } => {
                    // Take the run of digits in one go (at most 20 in all).
                    let run = rest
                        .iter()
                        .take(MAX_HEADER_DIGITS - n + 1)
                        .take_while(|b| b.is_ascii_digit())
                        .count();
                    let run = run.min(MAX_HEADER_DIGITS - n);
                    digits[n..n + run].copy_from_slice(&rest[..run]);
                    n += run;
                    self.pos += run;
                    let Some(&b) = rest.get(run) else {
                        dec.state = State::Header { digits, n };
                        return None;
                    };
                    let rejection = if b.is_ascii_digit() {
                        Rejection::TooManyDigits
                    } else if b == b'\n' {
                        if n == 0 {
                            Rejection::NoDigits
                        } else {
                            let declared = parse_digits(&digits[..n]);
                            match usize::try_from(declared) {
                                Ok(len) if len <= dec.max_frame_len => {
                                    self.pos += 1;
                                    self.header_start = None;
                                    if len == 0 {
                                        dec.state = State::Scan { held: 0 };
                                        return Some(Event::Frame(Vec::new()));
                                    }
                                    dec.body = Vec::with_capacity(len.min(64 * 1024));
                                    dec.state = State::Body { remaining: len };
                                    continue;
                                }
                                _ => Rejection::TooLong {
                                    declared,
                                    max: dec.max_frame_len,
                                },
                            }
                        }
                    } else {
                        Rejection::BadHeaderByte(b)
                    };
                    // Not a frame: the marker and the digits are raw output.
                    // Scanning resumes right after the marker; the digits
                    // cannot start a marker (it begins with `\n`), so it is
                    // the same to resume at the offending byte, which is
                    // left unconsumed.
                    let bytes = match self.header_start.take() {
                        Some(start) => Cow::Borrowed(&chunk[start..self.pos]),
                        None => Cow::Owned(dec.rejected_bytes(&digits[..n])),
                    };
                    dec.state = State::Scan { held: 0 };
                    return Some(Event::NotAFrame {
                        bytes,
                        reason: rejection,
                    });
                }
                State::Scan { held } if held > 0 => {
                    let m = dec.marker.len();
                    let n = (m - held).min(rest.len());
                    if rest[..n] == dec.marker[held..held + n] {
                        self.pos += n;
                        dec.state = if held + n == m {
                            State::Header {
                                digits: [0; MAX_HEADER_DIGITS],
                                n: 0,
                            }
                        } else {
                            State::Scan { held: held + n }
                        };
                        continue;
                    }
                    // The held prefix did not become a marker. No marker can
                    // start inside it (the marker has `\n` only at its first
                    // byte), so all of it is raw output; the mismatching byte
                    // is scanned normally.
                    dec.state = State::Scan { held: 0 };
                    return Some(Event::Raw(Cow::Owned(dec.marker[..held].to_vec())));
                }
                State::Scan { .. } => {
                    let m = dec.marker.len();
                    if let Some(i) = dec.finder.find(rest) {
                        self.header_start = Some(self.pos + i);
                        self.pos += i + m;
                        dec.state = State::Header {
                            digits: [0; MAX_HEADER_DIGITS],
                            n: 0,
                        };
                        if i > 0 {
                            return Some(Event::Raw(Cow::Borrowed(&rest[..i])));
                        }
                        continue;
                    }
                    let held = held_suffix(&dec.marker, rest);
                    self.pos = chunk.len();
                    dec.state = State::Scan { held };
                    let release = rest.len() - held;
                    if release > 0 {
                        return Some(Event::Raw(Cow::Borrowed(&rest[..release])));
                    }
                    return None;
                }
            }
        }
    }
}

/// Length of the longest suffix of `data` that is a proper prefix of
/// `marker`. `marker` starts with `\n` and has no other `\n`, so the only
/// candidate starts at the last `\n` within the final `marker.len() - 1`
/// bytes.
fn held_suffix(marker: &[u8], data: &[u8]) -> usize {
    let start = data.len().saturating_sub(marker.len() - 1);
    let window = &data[start..];
    match memchr::memrchr(b'\n', window) {
        Some(j) if marker.starts_with(&window[j..]) => window.len() - j,
        _ => 0,
    }
}

/// Decimal value of at most 20 ASCII digits (fits in a u128).
fn parse_digits(digits: &[u8]) -> u128 {
    digits
        .iter()
        .fold(0u128, |acc, d| acc * 10 + u128::from(d - b'0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s() -> Sentinel {
        Sentinel::new("@@S@@").unwrap()
    }

    fn all(dec: &mut Decoder, input: &[u8]) -> Vec<Event<'static>> {
        let mut out: Vec<_> = dec.feed(input).map(Event::into_owned).collect();
        out.extend(dec.finish());
        out
    }

    fn raw(s: &str) -> Event<'static> {
        Event::Raw(Cow::Owned(s.as_bytes().to_vec()))
    }

    #[test]
    fn the_issue_example_gives_raw_frame_raw() {
        let mut d = Decoder::new(&s());
        assert_eq!(
            all(&mut d, b"a\n@@S@@ 2\n{}b"),
            vec![raw("a"), Event::Frame(b"{}".to_vec()), raw("b")]
        );
    }

    #[test]
    fn held_suffix_finds_only_marker_prefixes() {
        let m = b"\n@@S@@ ";
        assert_eq!(held_suffix(m, b"abc\n@@"), 3);
        assert_eq!(held_suffix(m, b"abc\n"), 1);
        assert_eq!(held_suffix(m, b"abc\n@x"), 0);
        assert_eq!(held_suffix(m, b"abc"), 0);
        assert_eq!(held_suffix(m, b""), 0);
        // A full marker is never "held": it would have been found.
        assert_eq!(held_suffix(m, b"\n@@S@@ "), 0);
    }

    #[test]
    fn twenty_digit_lengths_do_not_overflow() {
        assert_eq!(
            parse_digits(b"99999999999999999999"),
            99_999_999_999_999_999_999
        );
    }
}
