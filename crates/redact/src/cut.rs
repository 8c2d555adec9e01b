//! Head/tail cutting: keep the first 40% and the last 60% of a limit around a
//! notice of what was left out, never splitting a UTF-8 character.
//!
//! One implementation for every place that shortens text: captured cell
//! output (streaming, bytes), a traceback (whole text, bytes), `terminal`
//! output (streaming raw bytes, see [`Utf8Stream`]) and `web_extract` pages
//! (whole text, characters). Text that may hold a secret must be cut only
//! after it was redacted: a cut through a secret leaves a part the redactor
//! can no longer recognise.
//!
//! ```
//! use toolcell_redact::{HeadTail, HeadTailCut, Unit};
//!
//! // Whole text: where to cut, then head + notice + tail.
//! let text = "abcdefghijklmnopqrstuvwxyz";
//! let cut = HeadTailCut::plan(text, 10, Unit::Bytes).unwrap();
//! assert_eq!((cut.head(text), cut.tail(text)), ("abcd", "uvwxyz"));
//! assert_eq!(
//!     cut.render(text, "OUTPUT"),
//!     "abcd\n\n... [OUTPUT TRUNCATED - 16 bytes omitted out of 26 total] ...\n\nuvwxyz"
//! );
//!
//! // Streaming: memory stays within the limit whatever is pushed.
//! let mut ht = HeadTail::new(10);
//! for piece in ["abcdefgh", "ijklmnopqrstuvwxyz"] {
//!     ht.push(piece);
//! }
//! let kept = ht.finish("OUTPUT");
//! assert_eq!(kept.text, cut.render(text, "OUTPUT"));
//! assert_eq!((kept.captured, kept.omitted, kept.total), (10, 16, 26));
//! ```

use std::collections::VecDeque;

/// Share of the limit kept from the start of the text, in percent; the rest
/// of the limit is kept from its end.
pub const HEAD_PERCENT: usize = 40;

/// What a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unit {
    /// UTF-8 bytes (a character that would cross the cut is left out).
    Bytes,
    /// Unicode scalar values.
    Chars,
}

/// The head part of `limit` (40%); the tail part is `limit - head_limit(limit)`.
pub fn head_limit(limit: usize) -> usize {
    limit * HEAD_PERCENT / 100
}

/// The notice between head and tail (the execute result's format), e.g.
/// `"\n\n... [OUTPUT TRUNCATED - 16 bytes omitted out of 26 total] ...\n\n"`.
/// `label` names what was cut (`OUTPUT`, `TRACEBACK`).
pub fn truncation_notice(label: &str, omitted: u64, total: u64) -> String {
    format!("\n\n... [{label} TRUNCATED - {omitted} bytes omitted out of {total} total] ...\n\n")
}

/// Where a whole text longer than a limit is cut: its first
/// [`head_end`](Self::head_end) bytes and the bytes from
/// [`tail_start`](Self::tail_start) on are kept. Both are character
/// boundaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadTailCut {
    /// Byte offset where the head ends.
    pub head_end: usize,
    /// Byte offset where the tail starts (`>= head_end`).
    pub tail_start: usize,
    /// Units (of the plan's [`Unit`]) left out.
    pub omitted: usize,
    /// Units in the whole text.
    pub total: usize,
}

impl HeadTailCut {
    /// The cut of `text` to at most `limit` units, or `None` when it fits.
    /// The head gets [`head_limit`]`(limit)` units, the tail the rest; in
    /// bytes, a character crossing the head's end is left to the tail's
    /// share and one crossing the tail's start is left out (so up to 3 bytes
    /// less than `limit` may be kept), in characters exactly `limit` are kept.
    pub fn plan(text: &str, limit: usize, unit: Unit) -> Option<Self> {
        let head = head_limit(limit);
        let tail = limit - head;
        match unit {
            Unit::Bytes => {
                let total = text.len();
                if total <= limit {
                    return None;
                }
                let head_end = floor_char_boundary(text, head);
                let mut tail_start = total - (limit - head_end);
                while !text.is_char_boundary(tail_start) {
                    tail_start += 1;
                }
                Some(Self {
                    head_end,
                    tail_start,
                    omitted: tail_start - head_end,
                    total,
                })
            }
            Unit::Chars => {
                let total = text.chars().count();
                if total <= limit {
                    return None;
                }
                let byte_at = |n: usize| text.char_indices().nth(n).map_or(text.len(), |(i, _)| i);
                Some(Self {
                    head_end: byte_at(head),
                    tail_start: byte_at(total - tail),
                    omitted: total - limit,
                    total,
                })
            }
        }
    }

    /// The kept head of `text` (the text the cut was planned for).
    pub fn head<'a>(&self, text: &'a str) -> &'a str {
        text.get(..self.head_end).unwrap_or("")
    }

    /// The kept tail of `text` (the text the cut was planned for).
    pub fn tail<'a>(&self, text: &'a str) -> &'a str {
        text.get(self.tail_start..).unwrap_or("")
    }

    /// Head, [`truncation_notice`] with `label`, tail. For a [`Unit::Bytes`] plan.
    pub fn render(&self, text: &str, label: &str) -> String {
        let notice = truncation_notice(label, self.omitted as u64, self.total as u64);
        let (head, tail) = (self.head(text), self.tail(text));
        let mut out = String::with_capacity(head.len() + notice.len() + tail.len());
        out.push_str(head);
        out.push_str(&notice);
        out.push_str(tail);
        out
    }
}

fn floor_char_boundary(s: &str, i: usize) -> usize {
    let mut i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Streaming head/tail of text pushed piece by piece: the first
/// [`head_limit`]`(limit)` bytes and the last `limit - head` bytes are kept
/// (the same cut as [`HeadTailCut::plan`] in bytes), never more than `limit`
/// bytes in memory; nothing is cut while the text fits, and the result never
/// splits a character.
///
/// Text pushed with [`push_marker`](Self::push_marker) (a note the caller
/// wrote, such as a fold marker) is cut like the rest but counted apart:
/// [`Kept::markers`] says how many of the kept bytes were markers, so the
/// caller can tell how much of its *own* text survived.
#[derive(Debug, Clone)]
pub struct HeadTail {
    limit: usize,
    head: String,
    tail: VecDeque<u8>,
    total: u64,
    /// Marker bytes in `head`.
    head_markers: u64,
    /// Marker bytes that went to the tail, as `[start, end)` offsets into
    /// everything pushed; those that slid out of the tail window are
    /// dropped, so at most about `limit` spans are held.
    tail_markers: VecDeque<(u64, u64)>,
}

/// What a [`HeadTail`] kept.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Kept {
    /// Everything, or head + [`truncation_notice`] + tail.
    pub text: String,
    /// True when the middle was cut.
    pub truncated: bool,
    /// Bytes of the pushed text in `text` (the notice not counted).
    pub captured: u64,
    /// Bytes pushed in all.
    pub total: u64,
    /// `total - captured`.
    pub omitted: u64,
    /// Bytes of `captured` that were pushed as markers
    /// ([`HeadTail::push_marker`]).
    pub markers: u64,
}

/// What a [`HeadTail`] kept, before the notice is written: see
/// [`HeadTail::finish_parts`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeptParts {
    /// The kept head.
    pub head: String,
    /// The kept tail (empty when nothing was cut and all fit in the head).
    pub tail: String,
    /// True when the middle was cut.
    pub truncated: bool,
    /// Bytes pushed in all.
    pub total: u64,
    /// Bytes of `head` and `tail` that were pushed as markers.
    pub markers: u64,
}

impl KeptParts {
    /// Bytes of the pushed text kept (markers included).
    pub fn captured(&self) -> u64 {
        (self.head.len() + self.tail.len()) as u64
    }

    /// Head, then (when the middle was cut) a [`truncation_notice`]
    /// labelled `label` saying `omitted` of `total` bytes were left out,
    /// then tail. The caller picks the figures the notice shows (a capture
    /// that folded before cutting gives the stream's own).
    pub fn render(self, label: &str, omitted: u64, total: u64) -> String {
        let mut text = self.head;
        if self.truncated {
            text.push_str(&truncation_notice(label, omitted, total));
        }
        text.push_str(&self.tail);
        text
    }
}

impl HeadTail {
    /// A cutter keeping at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            head: String::new(),
            tail: VecDeque::new(),
            total: 0,
            head_markers: 0,
            tail_markers: VecDeque::new(),
        }
    }

    /// Bytes pushed so far.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The head kept so far.
    pub fn head(&self) -> &str {
        &self.head
    }

    /// The tail kept so far, as the two slices of its ring buffer (it may
    /// start inside a character until [`finish`](Self::finish)).
    pub fn tail(&self) -> (&[u8], &[u8]) {
        self.tail.as_slices()
    }

    /// True when pushing `text` would drop some text (the limit would be
    /// passed): until then, head and tail hold everything pushed.
    pub fn would_drop(&self, text: &str) -> bool {
        let room = head_limit(self.limit).saturating_sub(self.head.len());
        let to_head = if room > 0 && self.tail.is_empty() {
            floor_char_boundary(text, room)
        } else {
            0
        };
        let tail_cap = self.limit - self.head.len() - to_head;
        self.tail.len() + text.len() - to_head > tail_cap
    }

    /// Adds text.
    pub fn push(&mut self, text: &str) {
        self.push_as(text, false);
    }

    /// Adds a marker: text the caller wrote about its text (a note that
    /// lines were folded, say), kept or cut like any other, and counted in
    /// [`Kept::markers`].
    pub fn push_marker(&mut self, text: &str) {
        self.push_as(text, true);
    }

    fn push_as(&mut self, mut text: &str, marker: bool) {
        if text.is_empty() {
            return;
        }
        self.total += text.len() as u64;
        // Head: up to its share, cut on a character boundary. Once anything
        // went to the tail, the head is closed.
        let room = head_limit(self.limit).saturating_sub(self.head.len());
        if room > 0 && self.tail.is_empty() {
            let take = floor_char_boundary(text, room);
            self.head.push_str(&text[..take]);
            if marker {
                self.head_markers += take as u64;
            }
            text = &text[take..];
        }
        if text.is_empty() {
            return;
        }
        if marker {
            let end = self.total;
            self.tail_markers.push_back((end - text.len() as u64, end));
        }

        // The tail gets the rest of the limit (60%, plus what the head left
        // unused when a character did not fit), so nothing is dropped until
        // the limit is passed.
        let tail_cap = self.limit - self.head.len();
        let bytes = text.as_bytes();
        if bytes.len() >= tail_cap {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - tail_cap..]);
        } else {
            let over = (self.tail.len() + bytes.len()).saturating_sub(tail_cap);
            self.tail.drain(..over);
            self.tail.extend(bytes);
        }
        // Markers that slid out of the tail window are no longer kept.
        let window = self.total - self.tail.len() as u64;
        while self
            .tail_markers
            .front()
            .is_some_and(|&(_, end)| end <= window)
        {
            self.tail_markers.pop_front();
        }
    }

    /// Ends the cut: the kept text, with a [`truncation_notice`] labelled
    /// `label` when the middle was dropped.
    pub fn finish(self, label: &str) -> Kept {
        let parts = self.finish_parts();
        let captured = parts.captured();
        let (total, markers) = (parts.total, parts.markers);
        let omitted = total.saturating_sub(captured);
        let truncated = parts.truncated;
        Kept {
            text: parts.render(label, omitted, total),
            truncated,
            captured,
            total,
            omitted,
            markers,
        }
    }

    /// Ends the cut without writing the notice: head, tail and counts, for
    /// a caller whose notice shows other figures ([`KeptParts::render`]).
    pub fn finish_parts(self) -> KeptParts {
        let mut tail: Vec<u8> = self.tail.into_iter().collect();
        // The tail may start inside a character: drop the partial bytes.
        let start = tail
            .iter()
            .position(|&b| (b & 0xC0) != 0x80)
            .unwrap_or(tail.len());
        tail.drain(..start);
        let tail = String::from_utf8(tail)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        let from = self.total - tail.len() as u64;
        let tail_markers: u64 = self
            .tail_markers
            .iter()
            .map(|&(a, b)| b.saturating_sub(a.max(from)))
            .sum();
        let truncated = self.total > (self.head.len() + tail.len()) as u64;
        KeptParts {
            head: self.head,
            tail,
            truncated,
            total: self.total,
            markers: self.head_markers + tail_markers,
        }
    }
}

/// Raw bytes to text, chunk by chunk: invalid UTF-8 becomes U+FFFD (as
/// [`String::from_utf8_lossy`] does), and a character split between two
/// chunks is decoded whole (at most 3 bytes are held back).
#[derive(Debug, Clone, Default)]
pub struct Utf8Stream {
    partial: Vec<u8>,
}

impl Utf8Stream {
    /// A decoder with nothing held.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decode `bytes`, appending to `out`; an incomplete character at the
    /// end is held for the next push.
    pub fn push(&mut self, bytes: &[u8], out: &mut String) {
        let joined;
        let mut rest: &[u8] = if self.partial.is_empty() {
            bytes
        } else {
            self.partial.extend_from_slice(bytes);
            joined = std::mem::take(&mut self.partial);
            &joined
        };
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    return;
                }
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    // `good` was just validated.
                    out.push_str(std::str::from_utf8(good).unwrap_or_default());
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            rest = &bad[n..];
                        }
                        None => {
                            self.partial.extend_from_slice(bad);
                            return;
                        }
                    }
                }
            }
        }
    }

    /// End of input: an incomplete character left becomes U+FFFD.
    pub fn finish(&mut self, out: &mut String) {
        if !self.partial.is_empty() {
            self.partial.clear();
            out.push('\u{FFFD}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn under_the_limit_nothing_is_cut() {
        assert_eq!(HeadTailCut::plan("short", 5, Unit::Bytes), None);
        assert_eq!(HeadTailCut::plan("ééé", 3, Unit::Chars), None);
        let mut ht = HeadTail::new(100);
        ht.push("hello ");
        ht.push("world");
        let k = ht.finish("OUTPUT");
        assert_eq!(
            (k.text.as_str(), k.truncated, k.omitted),
            ("hello world", false, 0)
        );
    }

    #[test]
    fn byte_cuts_leave_out_a_character_that_crosses_them() {
        // 10 bytes: head 4, tail the rest.
        let text = "aéé€€€€€zz"; // 1 + 2 + 2 + 3*5 + 2 = 22 bytes
        let cut = HeadTailCut::plan(text, 10, Unit::Bytes).unwrap();
        assert_eq!(cut.head(text), "aé"); // 3 bytes: the next é would cross
        assert_eq!(cut.tail(text), "€zz"); // 5 of the 7 bytes left: another € would cross
        assert_eq!(cut.omitted, text.len() - 8);
        // Text that fits is never cut, even when a character sits at 40%.
        let mut ht = HeadTail::new(5);
        ht.push("aéa\n");
        assert_eq!(ht.finish("OUTPUT").text, "aéa\n");
    }

    #[test]
    fn char_cuts_keep_exactly_the_limit() {
        let text: String = ('a'..='z').collect();
        let cut = HeadTailCut::plan(&text, 10, Unit::Chars).unwrap();
        assert_eq!((cut.head(&text), cut.tail(&text)), ("abcd", "uvwxyz"));
        assert_eq!((cut.omitted, cut.total), (16, 26));
    }

    #[test]
    fn utf8_stream_decodes_characters_split_between_chunks() {
        let text = "a€😀é";
        for split in 0..=text.len() {
            let mut d = Utf8Stream::new();
            let mut out = String::new();
            d.push(&text.as_bytes()[..split], &mut out);
            d.push(&text.as_bytes()[split..], &mut out);
            d.finish(&mut out);
            assert_eq!(out, text, "split at {split}");
        }
        let mut d = Utf8Stream::new();
        let mut out = String::new();
        d.push(b"x\xffy\xe2\x82", &mut out);
        d.finish(&mut out);
        assert_eq!(out, "x\u{FFFD}y\u{FFFD}");
    }

    proptest! {
        #[test]
        fn streaming_and_whole_text_cuts_agree_and_never_split_characters(
            parts in proptest::collection::vec("[a-zé€😀\n]{0,12}", 0..20),
            limit in 1usize..60,
        ) {
            let whole = parts.concat();
            let mut ht = HeadTail::new(limit);
            let mut dropped = false;
            for p in &parts {
                dropped |= ht.would_drop(p);
                ht.push(p);
                let (a, b) = ht.tail();
                let kept = (ht.head().len() + a.len() + b.len()) as u64;
                prop_assert!(kept as usize <= limit);
                prop_assert_eq!(dropped, kept < ht.total());
            }
            let k = ht.finish("OUTPUT");
            prop_assert_eq!(k.total, whole.len() as u64);
            prop_assert_eq!(k.captured + k.omitted, k.total);
            prop_assert!(k.captured as usize <= limit);
            match HeadTailCut::plan(&whole, limit, Unit::Bytes) {
                None => prop_assert_eq!(&k.text, &whole),
                Some(cut) => prop_assert_eq!(&k.text, &cut.render(&whole, "OUTPUT")),
            }
        }

        #[test]
        fn markers_are_counted_where_they_are_kept(
            parts in proptest::collection::vec(("[a-zé€\n]{0,12}", any::<bool>()), 0..30),
            limit in 1usize..60,
        ) {
            let mut ht = HeadTail::new(limit);
            let mut whole = String::new();
            let mut is_marker: Vec<bool> = Vec::new();
            for (p, m) in &parts {
                if *m { ht.push_marker(p) } else { ht.push(p) }
                whole.push_str(p);
                is_marker.extend(std::iter::repeat_n(*m, p.len()));
            }
            let count = |r: std::ops::Range<usize>| is_marker[r].iter().filter(|&&m| m).count() as u64;
            let expect = match HeadTailCut::plan(&whole, limit, Unit::Bytes) {
                None => count(0..whole.len()),
                Some(cut) => count(0..cut.head_end) + count(cut.tail_start..whole.len()),
            };
            let k = ht.finish("OUTPUT");
            prop_assert_eq!(k.markers, expect);
            prop_assert!(k.markers <= k.captured);
        }

        #[test]
        fn char_plans_keep_exactly_limit_chars(text in "\\PC{0,300}", limit in 0usize..320) {
            let total = text.chars().count();
            match HeadTailCut::plan(&text, limit, Unit::Chars) {
                None => prop_assert!(total <= limit),
                Some(cut) => {
                    prop_assert_eq!(cut.head(&text).chars().count() + cut.tail(&text).chars().count(), limit);
                    prop_assert_eq!(cut.omitted, total - limit);
                    prop_assert!(cut.head_end <= cut.tail_start);
                }
            }
        }
    }
}
