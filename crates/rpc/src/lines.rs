//! Splitting a byte stream into request lines with a length cap, without
//! ever buffering more than the cap plus one read.

/// Bytes asked of the socket per read.
pub(crate) const READ_CHUNK: usize = 64 * 1024;

/// What [`LineBuf::next_line`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next<'a> {
    /// A complete line, without its `\n`.
    Line(&'a [u8]),
    /// A line longer than the cap ended; its bytes were dropped.
    TooLarge,
    /// No complete line buffered; read more.
    NeedMore,
}

/// A read buffer that yields `\n`-terminated lines of at most `max` bytes.
/// Longer lines are discarded as they arrive (memory stays below
/// `max + READ_CHUNK`) and reported once their `\n` is seen.
#[derive(Debug)]
pub(crate) struct LineBuf {
    buf: Vec<u8>,
    /// Start of unconsumed data.
    start: usize,
    /// Bytes from `start` already known to hold no `\n`.
    scanned: usize,
    /// Inside an over-long line, dropping bytes until its `\n`.
    skipping: bool,
    max: usize,
}

impl LineBuf {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            buf: Vec::with_capacity(READ_CHUNK.min(max.saturating_add(1)).max(1024)),
            start: 0,
            scanned: 0,
            skipping: false,
            max,
        }
    }

    /// The next complete line, if any.
    pub(crate) fn next_line(&mut self) -> Next<'_> {
        let pending = &self.buf[self.start..];
        if self.skipping {
            return match memchr::memchr(b'\n', pending) {
                Some(pos) => {
                    self.start += pos + 1;
                    self.scanned = 0;
                    self.skipping = false;
                    Next::TooLarge
                }
                None => {
                    self.clear();
                    Next::NeedMore
                }
            };
        }
        match memchr::memchr(b'\n', &pending[self.scanned..]) {
            Some(rel) => {
                let end = self.start + self.scanned + rel;
                let line_start = self.start;
                self.start = end + 1;
                self.scanned = 0;
                if end - line_start > self.max {
                    Next::TooLarge
                } else {
                    Next::Line(&self.buf[line_start..end])
                }
            }
            None => {
                if pending.len() > self.max {
                    self.skipping = true;
                    self.clear();
                } else {
                    self.scanned = pending.len();
                }
                Next::NeedMore
            }
        }
    }

    /// Whether an unterminated over-long line was being skipped (at EOF).
    pub(crate) fn in_overlong_line(&self) -> bool {
        self.skipping
    }

    fn clear(&mut self) {
        self.buf.clear();
        self.start = 0;
        self.scanned = 0;
    }

    /// Makes room for one more read and returns the buffer to read into
    /// (its spare capacity is at least a few KiB).
    pub(crate) fn prepare_read(&mut self) -> &mut Vec<u8> {
        if self.start == self.buf.len() {
            self.clear();
            if self.buf.capacity() > 4 * READ_CHUNK {
                self.buf.shrink_to(READ_CHUNK);
            }
        } else if self.start > 0 && (self.start >= self.buf.len() / 2 || self.spare() < 4096) {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        if self.spare() < 4096 {
            self.buf.reserve(READ_CHUNK);
        }
        &mut self.buf
    }

    fn spare(&self) -> usize {
        self.buf.capacity() - self.buf.len()
    }

    /// Appends bytes directly (tests and fuzzing; sockets use `prepare_read`).
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.prepare_read().extend_from_slice(bytes);
    }

    /// Unconsumed bytes held right now (for memory-bound checks).
    pub(crate) fn held(&self) -> usize {
        self.buf.len() - self.start
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Feeds `input` in the given chunk sizes and collects what comes out:
    /// `Some(line)` for lines, `None` for too-large markers.
    fn split(input: &[u8], chunks: &[usize], max: usize) -> (Vec<Option<Vec<u8>>>, usize) {
        let mut lb = LineBuf::new(max);
        let mut out = Vec::new();
        let mut peak = 0;
        let mut rest = input;
        let mut i = 0;
        while !rest.is_empty() {
            let n = chunks.get(i).copied().unwrap_or(7).clamp(1, rest.len());
            i += 1;
            lb.push(&rest[..n]);
            rest = &rest[n..];
            peak = peak.max(lb.held());
            loop {
                match lb.next_line() {
                    Next::Line(l) => out.push(Some(l.to_vec())),
                    Next::TooLarge => out.push(None),
                    Next::NeedMore => break,
                }
            }
        }
        (out, peak)
    }

    #[test]
    fn lines_at_and_over_the_cap() {
        let (out, _) = split(b"abcd\nabcde\n\nxy\npartial", &[3, 1, 5, 100], 4);
        assert_eq!(
            out,
            vec![
                Some(b"abcd".to_vec()),
                None,
                Some(vec![]),
                Some(b"xy".to_vec())
            ]
        );
    }

    #[test]
    fn an_overlong_line_is_not_buffered() {
        let mut input = vec![b'x'; 1_000_000];
        input.extend_from_slice(b"\nok\n");
        let (out, peak) = split(&input, &[4096; 1000], 1000);
        assert_eq!(out, vec![None, Some(b"ok".to_vec())]);
        assert!(peak < 1000 + 2 * 4096, "held {peak} bytes");
    }

    proptest! {
        #[test]
        fn output_does_not_depend_on_chunking(
            lines in proptest::collection::vec(proptest::collection::vec(
                prop_oneof![Just(b'a'), Just(b'{'), Just(b'\n'), any::<u8>()], 0..40), 0..8),
            chunks in proptest::collection::vec(1usize..50, 0..30),
            max in 0usize..30,
        ) {
            let input: Vec<u8> = lines.concat();
            let (whole, _) = split(&input, &[usize::MAX], max);
            let (pieces, peak) = split(&input, &chunks, max);
            prop_assert_eq!(&whole, &pieces);
            // Reference: split on '\n', drop the unterminated tail.
            let mut expected = Vec::new();
            let mut parts: Vec<&[u8]> = input.split(|b| *b == b'\n').collect();
            parts.pop();
            for p in parts {
                expected.push(if p.len() > max { None } else { Some(p.to_vec()) });
            }
            prop_assert_eq!(whole, expected);
            prop_assert!(peak <= max + 50 + 1);
        }
    }
}
