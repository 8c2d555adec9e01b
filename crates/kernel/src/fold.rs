//! Folding repetition out of a cell's output, before the head/tail cut:
//! what reaches the model should not be 400 log lines that differ only in
//! a counter and a timestamp, or one 2 MB line of minified JSON.
//!
//! - **Runs of same-shape lines.** A line's *shape* is the line with every
//!   run of digits and every hex-ish token (8+ characters of `[0-9a-fA-F-]`
//!   with a digit: ids, UUIDs, hashes) replaced by `#`; timestamps, counters
//!   and ids therefore vanish. A run of at least `min_run` consecutive lines
//!   of one shape keeps its first `keep` and last `keep` lines, with one
//!   marker line between them saying how many similar lines (and bytes)
//!   were omitted, and their shape (where the whole text is, the result's
//!   `warning` says: a spill file may be capped or missing). A line of
//!   another shape ends the run and is always shown.
//! - **Long lines.** A line longer than `max_line_chars` characters keeps
//!   its head and tail with a marker saying how many characters were cut.
//!
//! [`Folder`] is sans-IO and streaming: text goes in as it comes (any
//! split), folded text comes out through a callback as [`Piece`]s — the
//! stream's text and the markers, apart, so a caller can count what of the
//! stream it kept — and memory is bounded by about `(min_run + keep) ×
//! max_line_chars` whatever the input ([`Folder::bounded`]: O(cap) whatever
//! the settings). Output without such repetition comes out byte for byte as
//! it went in.

use std::collections::VecDeque;

/// When a capture folds (`[output] fold`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoldWhen {
    /// Never (`false`): over its cap a stream is only cut to head and tail.
    Never,
    /// Only a stream over its cap (`"auto"`, the default): one that fits
    /// comes back byte for byte; one that does not is folded first and cut
    /// to head and tail only if it is still over.
    OverCap,
    /// Always (`true`), whether or not the stream fits its cap.
    Always,
}

/// Folding settings (`[output] fold`, `fold_min_run`, `fold_keep`,
/// `max_line_chars`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoldOptions {
    /// When the capture folds at all.
    pub when: FoldWhen,
    /// Fold runs of same-shape lines (else only long lines are cut).
    pub fold: bool,
    /// Shortest run that is folded.
    pub min_run: usize,
    /// Lines shown at each end of a folded run.
    pub keep: usize,
    /// Longest line kept whole, in characters (0: no limit).
    pub max_line_chars: usize,
}

impl Default for FoldOptions {
    fn default() -> Self {
        Self {
            when: FoldWhen::Always,
            fold: true,
            min_run: 8,
            keep: 3,
            max_line_chars: 2000,
        }
    }
}

impl FoldOptions {
    /// The default of `[output] fold = "auto"`: a stream that fits its cap
    /// is left alone, one over it is folded before the head/tail cut.
    pub fn auto() -> Self {
        Self {
            when: FoldWhen::OverCap,
            ..Self::default()
        }
    }

    /// Settings that change nothing.
    pub fn off() -> Self {
        Self {
            when: FoldWhen::Never,
            fold: false,
            min_run: usize::MAX,
            keep: 0,
            max_line_chars: 0,
        }
    }

    /// Whether a capture with these settings may leave anything out
    /// before its head/tail cut.
    pub fn active(&self) -> bool {
        self.when != FoldWhen::Never && (self.folds() || self.max_line_chars > 0)
    }

    fn folds(&self) -> bool {
        self.fold && self.min_run > 2 * self.keep && self.min_run >= 2
    }
}

/// What a [`Folder`] left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FoldStats {
    /// Lines omitted from folded runs.
    pub lines_folded: u64,
    /// Runs folded.
    pub runs_folded: u64,
    /// Lines whose middle was cut.
    pub lines_cut: u64,
    /// Bytes of the input not in the output (omitted lines and cut middles).
    pub bytes_omitted: u64,
}

/// A piece of folded output: the stream's own text, or a marker the
/// folder wrote in place of what it left out. A capture counts only
/// [`Piece::Text`] as the stream's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Text of the stream, as it came.
    Text(&'a str),
    /// A note about text left out (a folded run, a line's cut middle).
    Marker(&'a str),
}

impl<'a> Piece<'a> {
    /// The piece's text, whatever it is.
    pub fn as_str(&self) -> &'a str {
        match *self {
            Piece::Text(s) | Piece::Marker(s) => s,
        }
    }
}

/// Where the folded output goes.
pub type Out<'o> = dyn FnMut(Piece<'_>) + 'o;

/// A finished line: its text (with `\n`), and for a line whose middle was
/// cut, where its marker is and how many bytes of the stream the cut left
/// out.
#[derive(Debug, Default)]
struct Line {
    text: String,
    marker: Option<(usize, usize)>,
    cut: u64,
}

impl Line {
    /// The stream's bytes this line stands for.
    fn stream_len(&self) -> u64 {
        let marker = self.marker.map_or(0, |(a, b)| b - a);
        (self.text.len() - marker) as u64 + self.cut
    }
}

/// The longest shape quoted in a marker, in bytes.
const MAX_SHAPE_SHOWN: usize = 120;

/// The streaming folder of one stream.
#[derive(Debug)]
pub struct Folder {
    opts: FoldOptions,
    /// The current line so far (capped: head, then a tail window).
    partial: String,
    /// Characters of the current line so far.
    partial_chars: usize,
    /// Bytes of the current line so far (cut or not).
    partial_bytes: u64,
    /// Head of an over-long current line (when cutting).
    long_head: Option<String>,
    /// Tail window of an over-long current line.
    long_tail: VecDeque<char>,
    /// The last line of the current run (without its `\n`); every line of
    /// a run has the run's shape. A line that differs from it only in its
    /// digits has that shape too, without shaping either.
    run_last: String,
    /// The run's shape, when `run_shape_ok` (computed only when needed).
    run_shape: Vec<u8>,
    run_shape_ok: bool,
    /// Scratch: the shape of the line being judged.
    shape_buf: Vec<u8>,
    run_len: usize,
    /// Lines of the current run past the first `keep`, not yet shown: all of
    /// them while the run is shorter than `min_run`, then the last `keep`.
    held: VecDeque<Line>,
    /// Bytes of `held`'s texts.
    held_bytes: usize,
    /// Most bytes held before a run counts as folded even if shorter than
    /// `min_run` (the capture's cap: held lines past it could not all be
    /// shown anyway), so memory stays bounded whatever `min_run` is.
    hold_limit: usize,
    /// Emptied held lines, reused for the next held ones (at most
    /// `min_run + keep`, each of at most [`SPARE_MAX_CAPACITY`]).
    spare: Vec<String>,
    /// Omitted so far in the current run: lines and bytes.
    run_omitted: (u64, u64),
    stats: FoldStats,
}

/// Largest buffer kept for reuse once a held line is given out.
const SPARE_MAX_CAPACITY: usize = 16 * 1024;

impl Folder {
    /// A folder with `opts`. Memory grows with `min_run × max_line_chars`
    /// (and without bound for `max_line_chars = 0`): a capture uses
    /// [`Folder::bounded`].
    pub fn new(opts: FoldOptions) -> Self {
        Self::bounded(opts, usize::MAX)
    }

    /// A folder for a capture of `cap` bytes: memory stays O(`cap`)
    /// whatever the settings and the input. A line is cut at
    /// `min(max_line_chars, cap)` characters (`max_line_chars = 0` means
    /// `cap`: a longer line could not be shown whole anyway), and a run
    /// whose held lines pass `cap` bytes is folded even if it is shorter
    /// than `min_run` (the text is over the cap, so it is cut anyway).
    pub fn bounded(mut opts: FoldOptions, cap: usize) -> Self {
        if cap < usize::MAX && opts.max_line_chars != usize::MAX {
            let cap = cap.max(2);
            opts.max_line_chars = match opts.max_line_chars {
                0 => cap,
                n => n.min(cap),
            };
        }
        Self {
            opts,
            held_bytes: 0,
            hold_limit: cap,
            partial: String::new(),
            partial_chars: 0,
            partial_bytes: 0,
            long_head: None,
            long_tail: VecDeque::new(),
            run_last: String::new(),
            run_shape: Vec::new(),
            run_shape_ok: false,
            shape_buf: Vec::new(),
            run_len: 0,
            held: VecDeque::new(),
            spare: Vec::new(),
            run_omitted: (0, 0),
            stats: FoldStats::default(),
        }
    }

    /// What was left out so far.
    pub fn stats(&self) -> FoldStats {
        self.stats
    }

    /// Bytes of text held, not yet given out (about: a cut line's tail
    /// window counts 4 bytes a character).
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
            + self.partial.len()
            + self.long_head.as_ref().map_or(0, String::len)
            + self.long_tail.len() * 4
            + self.run_last.len()
    }

    /// Text not yet given out, in stream order, exactly as it came in:
    /// the held lines, then the current partial line. Only meaningful
    /// while nothing was left out yet (see [`Folder::will_omit`]).
    pub fn pending_raw(&self) -> impl Iterator<Item = &str> {
        self.held
            .iter()
            .map(|l| l.text.as_str())
            .chain(std::iter::once(self.partial.as_str()))
    }

    /// Whether taking in `segment` (a piece of text with at most one
    /// `\n`, at its end) would leave something out: a cut of the current
    /// line, or the first omission of a run. Lets the caller save the whole
    /// text before anything is lost.
    pub fn will_omit(&mut self, segment: &str) -> bool {
        let max = self.opts.max_line_chars;
        // Bytes bound characters: a short segment needs no count.
        if max > 0
            && (self.long_head.is_some()
                || (self.partial.len() + segment.len() > max
                    && self.partial_chars + segment.chars().count()
                        - usize::from(segment.ends_with('\n'))
                        > max))
        {
            return true;
        }
        if !self.opts.folds() || !segment.ends_with('\n') {
            return false;
        }
        if self.run_len == 0
            || (self.run_len + 1 < self.opts.min_run
                && self.held_bytes + segment.len() + self.partial.len() <= self.hold_limit)
        {
            return false;
        }
        if self.partial.is_empty() {
            return self.judge(segment.trim_end_matches('\n')) == Judged::Same;
        }
        let mut line = String::with_capacity(self.partial.len() + segment.len());
        line.push_str(&self.partial);
        line.push_str(segment);
        self.judge(line.trim_end_matches('\n')) == Judged::Same
    }

    /// Whether `body` has the current run's shape (a run must exist). Only
    /// caches the run's own shape; the run itself does not change.
    fn judge(&mut self, body: &str) -> Judged {
        if digits_only_differ(self.run_last.as_bytes(), body.as_bytes()) {
            return Judged::Same;
        }
        // The first bytes of the shapes differ: surely another shape (most
        // lines of prose and code end here, after a few bytes).
        const PREFIX: usize = 16;
        if !Shape::new(self.run_last.as_bytes())
            .take(PREFIX)
            .eq(Shape::new(body.as_bytes()).take(PREFIX))
        {
            return Judged::Other { shaped: false };
        }
        if !self.run_shape_ok {
            shape_into(&self.run_last, &mut self.run_shape);
            self.run_shape_ok = true;
        }
        shape_into(body, &mut self.shape_buf);
        if self.shape_buf == self.run_shape {
            Judged::Same
        } else {
            Judged::Other { shaped: true }
        }
    }

    /// Takes in `text` (any split), giving out folded text through `out`.
    pub fn push(&mut self, text: &str, out: &mut Out<'_>) {
        for segment in text.split_inclusive('\n') {
            self.push_segment(segment, out);
        }
    }

    /// Takes in one segment: text with at most one `\n`, at its end.
    pub fn push_segment(&mut self, segment: &str, out: &mut Out<'_>) {
        let (body, complete) = match segment.strip_suffix('\n') {
            Some(b) => (b, true),
            None => (segment, false),
        };
        // The common case: a whole line in one piece, under the cap (its
        // bytes bound its characters): judged in place, never copied.
        if complete
            && self.partial.is_empty()
            && self.long_head.is_none()
            && (self.opts.max_line_chars == 0 || body.len() <= self.opts.max_line_chars)
        {
            self.line(segment, None, 0, out);
            return;
        }
        self.add_to_line(body);
        if complete {
            let line = self.take_line();
            self.line(&line.text, line.marker, line.cut, out);
        }
    }

    /// Ends the stream: the last line (without `\n`) and any run.
    pub fn finish(&mut self, out: &mut Out<'_>) {
        if self.partial_chars > 0 || self.long_head.is_some() {
            let mut line = self.take_line();
            // Not a full line: never part of a run, shown as it is.
            line.text.pop();
            self.end_run(out);
            self.show(&line.text, line.marker, line.cut, out);
        } else {
            self.end_run(out);
        }
    }

    fn add_to_line(&mut self, body: &str) {
        self.partial_bytes += body.len() as u64;
        let max = self.opts.max_line_chars;
        if max == 0 {
            self.partial.push_str(body);
            self.partial_chars += body.chars().count();
            return;
        }
        let tail_chars = max - max / 2;
        let mut rest = body;
        if self.long_head.is_none() {
            // The common case: the line stays under the cap; no per-char work.
            let n = body.chars().count();
            if self.partial_chars + n <= max {
                self.partial.push_str(body);
                self.partial_chars += n;
                return;
            }
            // The line passes the cap in this piece: keep its head, and the
            // rest of what it has so far starts the tail window.
            let take = max - self.partial_chars;
            let split = body.char_indices().nth(take).map_or(body.len(), |(i, _)| i);
            self.partial.push_str(&body[..split]);
            self.partial_chars += take;
            rest = &body[split..];
            let head_chars = max / 2;
            let cut_at = self
                .partial
                .char_indices()
                .nth(head_chars)
                .map_or(self.partial.len(), |(i, _)| i);
            let head = self.partial[..cut_at].to_string();
            self.long_tail.clear();
            self.long_tail.extend(self.partial[cut_at..].chars());
            self.long_head = Some(head);
            self.partial.clear();
        }
        // Only the last `tail_chars` characters of `rest` can stay in the
        // window: skip the others without touching them one by one.
        let n = rest.chars().count();
        self.partial_chars += n;
        if n >= tail_chars {
            // From the end: only `tail_chars` steps, however long `rest` is.
            let from = if tail_chars == 0 {
                rest.len()
            } else {
                rest.char_indices()
                    .rev()
                    .nth(tail_chars - 1)
                    .map_or(0, |(i, _)| i)
            };
            self.long_tail.clear();
            self.long_tail.extend(rest[from..].chars());
        } else {
            self.long_tail.extend(rest.chars());
            while self.long_tail.len() > tail_chars {
                self.long_tail.pop_front();
            }
        }
    }

    /// The finished current line, with its `\n`, cut if it was too long.
    fn take_line(&mut self) -> Line {
        let chars = std::mem::take(&mut self.partial_chars);
        let bytes = std::mem::take(&mut self.partial_bytes);
        match self.long_head.take() {
            None => {
                let mut text = std::mem::take(&mut self.partial);
                text.push('\n');
                Line {
                    text,
                    marker: None,
                    cut: 0,
                }
            }
            Some(head) => {
                let tail: String = self.long_tail.drain(..).collect();
                let kept = head.chars().count() + tail.chars().count();
                let cut = chars - kept;
                let marker = format!(" … [{cut} characters cut from this line of {chars}] … ");
                let mut text = String::with_capacity(head.len() + marker.len() + tail.len() + 1);
                text.push_str(&head);
                text.push_str(&marker);
                text.push_str(&tail);
                text.push('\n');
                Line {
                    marker: Some((head.len(), head.len() + marker.len())),
                    // Exact: the line's bytes less the head's and the tail's.
                    cut: bytes.saturating_sub((head.len() + tail.len()) as u64),
                    text,
                }
            }
        }
    }

    /// Gives out a line that is shown: its text, and for a cut line its
    /// marker as a [`Piece::Marker`] (what the cut left out is counted now).
    fn show(&mut self, text: &str, marker: Option<(usize, usize)>, cut: u64, out: &mut Out<'_>) {
        let Some((a, b)) = marker else {
            out(Piece::Text(text));
            return;
        };
        self.stats.lines_cut += 1;
        self.stats.bytes_omitted += cut;
        out(Piece::Text(&text[..a]));
        out(Piece::Marker(&text[a..b]));
        out(Piece::Text(&text[b..]));
    }

    /// One finished line, with its `\n` (and, when cut, its marker's place
    /// and the bytes the cut left out).
    fn line(&mut self, line: &str, marker: Option<(usize, usize)>, cut: u64, out: &mut Out<'_>) {
        if !self.opts.folds() {
            self.show(line, marker, cut, out);
            return;
        }
        let body = line.trim_end_matches('\n');
        let judged = if self.run_len > 0 {
            self.judge(body)
        } else {
            Judged::Other { shaped: false }
        };
        if judged == Judged::Same {
            self.run_last.clear();
            self.run_last.push_str(body);
            self.run_len += 1;
            if self.run_len <= self.opts.keep {
                self.show(line, marker, cut, out);
                return;
            }
            let mut text = self.spare.pop().unwrap_or_default();
            text.push_str(line);
            self.held_bytes += text.len();
            self.held.push_back(Line { text, marker, cut });
            if self.run_len >= self.opts.min_run || self.held_bytes > self.hold_limit {
                // A folded run: only the last `keep` lines stay held.
                while self.held.len() > self.opts.keep {
                    if let Some(dropped) = self.held.pop_front() {
                        self.held_bytes -= dropped.text.len();
                        self.run_omitted.0 += 1;
                        self.run_omitted.1 += dropped.stream_len();
                        self.recycle(dropped.text);
                    }
                }
            }
            return;
        }
        self.end_run(out);
        self.run_last.clear();
        self.run_last.push_str(body);
        // The new run's shape, if `judge` just computed it.
        self.run_shape_ok = judged == Judged::Other { shaped: true };
        if self.run_shape_ok {
            std::mem::swap(&mut self.run_shape, &mut self.shape_buf);
        }
        self.run_len = 1;
        self.show(line, marker, cut, out);
    }

    /// Keeps an emptied held line's buffer for the next one (bounded).
    fn recycle(&mut self, mut s: String) {
        if s.capacity() <= SPARE_MAX_CAPACITY
            && self.spare.len() < self.opts.min_run + self.opts.keep
        {
            s.clear();
            self.spare.push(s);
        }
    }

    /// The current run ends: its marker (when folded) and held lines.
    fn end_run(&mut self, out: &mut Out<'_>) {
        let (lines, bytes) = std::mem::take(&mut self.run_omitted);
        if lines > 0 {
            self.stats.lines_folded += lines;
            self.stats.runs_folded += 1;
            self.stats.bytes_omitted += bytes;
            let mut shape_buf = Vec::new();
            shape_into(&self.run_last, &mut shape_buf);
            let shape = String::from_utf8_lossy(&shape_buf);
            let shape = if shape.len() > MAX_SHAPE_SHOWN {
                let mut end = MAX_SHAPE_SHOWN;
                while !shape.is_char_boundary(end) {
                    end -= 1;
                }
                format!("{}…", &shape[..end])
            } else {
                shape.into_owned()
            };
            out(Piece::Marker(&format!(
                "... [{lines} similar lines omitted ({bytes} bytes), shaped like: {shape}] ...\n"
            )));
        }
        while let Some(l) = self.held.pop_front() {
            self.held_bytes -= l.text.len();
            self.show(&l.text, l.marker, l.cut, out);
            self.recycle(l.text);
        }
        self.run_len = 0;
        self.run_last.clear();
        self.run_shape_ok = false;
    }
}

/// How a line compares with the current run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Judged {
    Same,
    /// Another shape; `shaped` when the line's shape is in `shape_buf`.
    Other {
        shaped: bool,
    },
}

/// True when `a` and `b` are equal but for digits replaced by other
/// digits: then they have the same shape, since every shaping decision
/// looks only at whether a byte is a digit, a hex letter, `-` or
/// alphanumeric, and digits never appear in a shape (they become `#`).
fn digits_only_differ(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    const W: usize = 32;
    let same = |x: &u8, y: &u8| (x == y) | (x.is_ascii_digit() & y.is_ascii_digit());
    let mut ca = a.chunks_exact(W);
    let mut cb = b.chunks_exact(W);
    for (x, y) in (&mut ca).zip(&mut cb) {
        // Branch-free within a block, so that it vectorizes.
        if !x.iter().zip(y).fold(true, |ok, (x, y)| ok & same(x, y)) {
            return false;
        }
    }
    ca.remainder()
        .iter()
        .zip(cb.remainder())
        .all(|(x, y)| same(x, y))
}

/// Whether two lines have the same shape ([`shape_into`]) (the reference
/// for [`Folder`]'s shortcuts, in tests).
#[cfg(test)]
fn same_shape(a: &str, b: &str) -> bool {
    Shape::new(a.as_bytes()).eq(Shape::new(b.as_bytes()))
}

/// The bytes of a line's shape, one at a time: what [`shape_into`] writes.
struct Shape<'a> {
    b: &'a [u8],
    i: usize,
    /// End of the `[0-9a-fA-F-]` token being given out (not an id: its
    /// digit runs are masked one at a time).
    tok_end: usize,
}

impl<'a> Shape<'a> {
    fn new(b: &'a [u8]) -> Self {
        Self {
            b,
            i: 0,
            tok_end: 0,
        }
    }
}

impl Iterator for Shape<'_> {
    type Item = u8;

    #[inline]
    fn next(&mut self) -> Option<u8> {
        let b = self.b;
        let mut i = self.i;
        if i >= self.tok_end {
            let &c = b.get(i)?;
            if !(c.is_ascii_hexdigit() || c == b'-') {
                self.i = i + 1;
                return Some(c);
            }
            // A token of [0-9a-fA-F-]: a hex id when 8+ long with a digit,
            // and a whole word.
            let start = i;
            let mut digit = false;
            while i < b.len() && (b[i].is_ascii_hexdigit() || b[i] == b'-') {
                digit |= b[i].is_ascii_digit();
                i += 1;
            }
            let word_start = start == 0 || !b[start - 1].is_ascii_alphanumeric();
            let word_end = i == b.len() || !b[i].is_ascii_alphanumeric();
            if digit && i - start >= 8 && word_start && word_end {
                self.i = i;
                return Some(b'#');
            }
            self.tok_end = i;
            i = start;
        }
        // Inside a token that is not an id: digit runs become `#`.
        if b[i].is_ascii_digit() {
            while i < self.tok_end && b[i].is_ascii_digit() {
                i += 1;
            }
            self.i = i;
            return Some(b'#');
        }
        self.i = i + 1;
        Some(b[i])
    }
}

/// The shape of `line` into `buf`: digit runs and hex-ish tokens become `#`.
fn shape_into(line: &str, buf: &mut Vec<u8>) {
    buf.clear();
    let b = line.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_hexdigit() || c == b'-' {
            // A token of [0-9a-fA-F-]: a hex id when 8+ long with a digit;
            // otherwise digits inside it are masked one run at a time.
            let start = i;
            let mut digit = false;
            while i < b.len() && (b[i].is_ascii_hexdigit() || b[i] == b'-') {
                digit |= b[i].is_ascii_digit();
                i += 1;
            }
            // Only a whole word counts as an id.
            let word_start = start == 0 || !b[start - 1].is_ascii_alphanumeric();
            let word_end = i == b.len() || !b[i].is_ascii_alphanumeric();
            if digit && i - start >= 8 && word_start && word_end {
                buf.push(b'#');
                continue;
            }
            let mut j = start;
            while j < i {
                if b[j].is_ascii_digit() {
                    while j < i && b[j].is_ascii_digit() {
                        j += 1;
                    }
                    buf.push(b'#');
                } else {
                    buf.push(b[j]);
                    j += 1;
                }
            }
            continue;
        }
        if c.is_ascii_digit() {
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            buf.push(b'#');
            continue;
        }
        buf.push(c);
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fold_all(opts: FoldOptions, chunks: &[&str]) -> (String, FoldStats) {
        let mut f = Folder::new(opts);
        let mut out = String::new();
        for c in chunks {
            f.push(c, &mut |p| out.push_str(p.as_str()));
        }
        f.finish(&mut |p| out.push_str(p.as_str()));
        (out, f.stats())
    }

    fn shape(s: &str) -> String {
        let mut b = Vec::new();
        shape_into(s, &mut b);
        String::from_utf8(b).unwrap()
    }

    #[test]
    fn shapes_mask_numbers_ids_and_timestamps() {
        assert_eq!(
            shape("2026-12-01T18:00:00.123Z INFO step 17 of 400"),
            "#-#-#T#:#:#.#Z INFO step # of #"
        );
        assert_eq!(
            shape("req 3f2a9c1e-77b0-4c1d-9e2f-0a1b2c3d4e5f done"),
            "req # done"
        );
        assert_eq!(shape("commit deadbeef12 ok"), "commit # ok");
        assert_eq!(shape("beef cafe added"), "beef cafe added");
    }

    #[test]
    fn a_log_run_keeps_its_ends_the_error_and_says_what_it_left_out() {
        let mut text = String::new();
        for i in 0..400 {
            text.push_str(&format!(
                "2026-12-01T18:{:02}:{:02}.{i:03}Z INFO processed batch {i} of 400\n",
                i / 60,
                i % 60
            ));
            if i == 200 {
                text.push_str("2026-12-01T18:03:20.200Z ERROR disk full on /dev/sda1\n");
            }
        }
        let (out, stats) = fold_all(FoldOptions::default(), &[&text]);
        assert!(out.len() < 1500, "{} bytes:\n{out}", out.len());
        assert!(out.contains("ERROR disk full"), "{out}");
        assert!(out.contains("processed batch 399 of 400"), "{out}");
        assert!(out.contains("processed batch 0 of 400"), "{out}");
        assert!(out.contains("similar lines omitted"), "{out}");
        assert_eq!(stats.runs_folded, 2);
        assert_eq!(stats.lines_folded, 400 - 12);
    }

    #[test]
    fn output_without_repetition_is_unchanged_in_any_split() {
        let text = "name: alpha\nsize: 3\n\nitems:\n- a\n- b\nthe end";
        for cut in 0..=text.len() {
            if !text.is_char_boundary(cut) {
                continue;
            }
            let (out, stats) = fold_all(FoldOptions::default(), &[&text[..cut], &text[cut..]]);
            assert_eq!(out, text);
            assert_eq!(stats, FoldStats::default());
        }
    }

    #[test]
    fn a_short_run_is_shown_whole() {
        let text: String = (0..7).map(|i| format!("row {i}\n")).collect();
        assert_eq!(fold_all(FoldOptions::default(), &[&text]).0, text);
        let eight: String = (0..8).map(|i| format!("row {i}\n")).collect();
        let (out, stats) = fold_all(FoldOptions::default(), &[&eight]);
        assert_eq!(stats.lines_folded, 2);
        assert!(
            out.starts_with("row 0\nrow 1\nrow 2\n... [2 similar lines omitted"),
            "{out}"
        );
        assert!(out.ends_with("row 5\nrow 6\nrow 7\n"), "{out}");
    }

    #[test]
    fn long_lines_keep_head_and_tail() {
        let opts = FoldOptions {
            max_line_chars: 20,
            ..FoldOptions::default()
        };
        let line = format!("{}{}\n", "a".repeat(50), "z".repeat(50));
        let (out, stats) = fold_all(opts, &[&line[..30], &line[30..]]);
        assert_eq!(
            out,
            format!(
                "{} … [80 characters cut from this line of 100] … {}\n",
                "a".repeat(10),
                "z".repeat(10)
            )
        );
        assert_eq!(stats.lines_cut, 1);
    }

    #[test]
    fn a_bounded_folder_holds_at_most_its_cap_whatever_min_run_is() {
        let opts = FoldOptions {
            min_run: 1_000_000,
            max_line_chars: 0,
            ..FoldOptions::default()
        };
        let mut f = Folder::bounded(opts, 10_000);
        let mut out = String::new();
        for i in 0..100_000 {
            f.push(&format!("row {i} of many\n"), &mut |p| {
                out.push_str(p.as_str())
            });
            assert!(f.held_bytes() <= 10_000 + 64, "{}", f.held_bytes());
        }
        // One long line: cut at the cap, not held whole.
        f.push(&"y".repeat(1_000_000), &mut |p| out.push_str(p.as_str()));
        assert!(f.held_bytes() <= 4 * 10_000 + 64, "{}", f.held_bytes());
        f.finish(&mut |p| out.push_str(p.as_str()));
        let stats = f.stats();
        assert!(stats.lines_folded > 99_000, "{stats:?}");
        assert_eq!(stats.lines_cut, 1);
        assert!(
            out.contains("characters cut from this line of 1000000"),
            "{}",
            &out[out.len() - 200..]
        );
    }

    #[test]
    fn markers_come_apart_from_the_text() {
        let opts = FoldOptions {
            max_line_chars: 20,
            ..FoldOptions::default()
        };
        let mut text = String::new();
        for i in 0..20 {
            text.push_str(&format!("row {i:02} {}\n", "q".repeat(40)));
        }
        let mut f = Folder::new(opts);
        let (mut stream, mut markers) = (0u64, String::new());
        let mut add = |p: Piece<'_>| match p {
            Piece::Text(t) => stream += t.len() as u64,
            Piece::Marker(m) => markers.push_str(m),
        };
        f.push(&text, &mut add);
        f.finish(&mut add);
        let stats = f.stats();
        // Every byte of the stream is either given out as text or omitted.
        assert_eq!(stream + stats.bytes_omitted, text.len() as u64);
        assert_eq!(stats.lines_folded, 14);
        assert_eq!(stats.lines_cut, 6, "only the lines shown count as cut");
        assert!(markers.contains("similar lines omitted"), "{markers}");
        assert!(
            markers.contains("characters cut from this line"),
            "{markers}"
        );
    }

    #[test]
    fn off_changes_nothing() {
        let text: String = (0..100).map(|i| format!("row {i}\n")).collect();
        assert_eq!(fold_all(FoldOptions::off(), &[&text]).0, text);
    }

    proptest! {
        #[test]
        fn any_split_gives_the_same_output(lines in proptest::collection::vec("[a-c0-9 ]{0,6}", 0..40), cut in 0usize..400) {
            let text = lines.join("\n");
            let cut = cut.min(text.len());
            let whole = fold_all(FoldOptions::default(), &[&text]).0;
            let split = fold_all(FoldOptions::default(), &[&text[..cut], &text[cut..]]).0;
            prop_assert_eq!(whole, split);
        }

        #[test]
        fn shape_walk_matches_shape_into(a in "[0-9a-gA-Gx: .-]{0,40}", b in "[0-9a-gA-Gx: .-]{0,40}") {
            let (mut sa, mut sb) = (Vec::new(), Vec::new());
            shape_into(&a, &mut sa);
            shape_into(&b, &mut sb);
            prop_assert_eq!(Shape::new(a.as_bytes()).collect::<Vec<u8>>(), sa.clone());
            prop_assert_eq!(same_shape(&a, &b), sa == sb);
            // Every line has its own shape.
            prop_assert!(same_shape(&a, &a));
        }

        #[test]
        fn lines_differing_in_digits_only_have_one_shape(a in "[0-9a-gA-Gx: .-]{0,60}", digits in proptest::collection::vec(0u8..10, 60)) {
            // Replace every digit of `a` by another digit.
            let b: String = a.chars().zip(digits.iter().cycle()).map(|(c, d)| if c.is_ascii_digit() { char::from(b'0' + d) } else { c }).collect();
            prop_assert!(digits_only_differ(a.as_bytes(), b.as_bytes()));
            prop_assert!(same_shape(&a, &b));
        }

        #[test]
        fn folding_matches_the_plain_shape_rule(groups in proptest::collection::vec((0usize..4, 1usize..14, 0u64..100_000), 0..12)) {
            // Groups of lines from a few templates; digits vary (and change
            // length) within a group, so some runs are long enough to fold.
            let mut lines: Vec<String> = Vec::new();
            for (t, n, seed) in groups {
                for k in 0..n as u64 {
                    let v = seed.wrapping_mul(k + 7) % (10u64.pow((k % 5) as u32 + 1));
                    lines.push(match t {
                        0 => format!("{v} ab {v:08x}-cafe"),
                        1 => format!("x{v}"),
                        2 => format!("beef{v} step"),
                        _ => "c".repeat((v % 3) as usize),
                    });
                }
            }
            // The folder's runs are exactly the maximal runs of lines of one
            // shape (checked through what it omits).
            let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
            let (_, stats) = fold_all(FoldOptions::default(), &[&text]);
            let mut expect = FoldStats::default();
            let mut i = 0;
            while i < lines.len() {
                let mut j = i + 1;
                while j < lines.len() && shape(&lines[j]) == shape(&lines[i]) {
                    j += 1;
                }
                if j - i >= 8 {
                    expect.runs_folded += 1;
                    expect.lines_folded += (j - i - 6) as u64;
                    expect.bytes_omitted += lines[i + 3..j - 3].iter().map(|l| l.len() as u64 + 1).sum::<u64>();
                }
                i = j;
            }
            prop_assert_eq!(stats, expect);
        }

        #[test]
        fn memory_is_bounded(n in 1000usize..3000) {
            let mut f = Folder::new(FoldOptions { max_line_chars: 50, ..FoldOptions::default() });
            let mut total = 0usize;
            for i in 0..n {
                f.push(&format!("line {i} {}\n", "x".repeat(i % 200)), &mut |p| total += p.as_str().len());
                prop_assert!(f.held.len() <= 8);
                prop_assert!(f.partial.len() <= 200);
            }
        }
    }
}
