//! Secret redaction: [`Redactor`] (compiled once, shared) and [`RedactStream`]
//! (per output stream, split-invariant).

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, Input, MatchKind};

use crate::rules::{
    self, COMPILED, EXACT_KIND, How, IDX_APIHDR, IDX_AUTH, IDX_ENV, IDX_JWT, IDX_PEM, IDX_URL,
    LITERALS, RULES, URL_TOKEN_KIND, Verify, is_token_byte,
};
use crate::simd::SepFinder;

/// Step by which a line longer than one window is cut: each window commits
/// at most this much text (cut preferably after a blank or punctuation byte
/// in its last 4 KiB), extended past the cut through any match that crosses
/// it. The cut depends only on the text.
pub const LINE_MAX: usize = 16 * 1024;

/// Longest token recognised whole wherever a long line is cut. Every rule's
/// match is bounded by this (vendor keys by their patterns, JWTs explicitly,
/// exact secrets by registering longer values in pieces) except URL
/// passwords, header values and single-line PEM bodies, which are masked as
/// far as the window reaches. A window sees this much text on each side of
/// its cut: before it (already written, as context) and after it (lookahead).
pub const MAX_TOKEN: usize = 8 * 1024;

/// Text judged together beyond what a window has already written: one
/// [`LINE_MAX`] step plus [`MAX_TOKEN`] of lookahead.
const WINDOW: usize = LINE_MAX + MAX_TOKEN;

/// Most text a [`RedactStream`] holds back: the current incomplete line's
/// window (context + [`LINE_MAX`] + lookahead) plus, after a
/// `-----BEGIN … PRIVATE KEY-----` line, that line's last window until the
/// next line shows whether a key body follows.
pub const MAX_HELD: usize = 2 * (MAX_TOKEN + WINDOW + 8);

/// Exact secrets shorter than this are ignored (too likely to occur by chance).
pub const MIN_EXACT_SECRET_LEN: usize = 8;

/// Error building a [`Redactor`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedactError {
    /// The literal prefilter could not be built (e.g. the registered exact
    /// secrets are too large in total).
    #[error("cannot build the redaction prefilter: {0}")]
    Prefilter(#[from] aho_corasick::BuildError),
    /// No literal searcher could be built for the built-in patterns on this target.
    #[error("no literal searcher available for the built-in patterns")]
    NoSearcher,
}

const EXACT_BIT: u64 = 1 << 63;

/// Most literals in one SIMD search (Slim Teddy's limit).
const SLIM_TEDDY_MAX: usize = 32;

/// Literal searches at most (3-byte literals apart, longer ones in groups of
/// [`SLIM_TEDDY_MAX`]): the room in the candidate cache. [`Redactor::new`]
/// fails rather than leave a search out, so every test would catch a table
/// that needs more.
const MAX_SCANS: usize = 4;

struct Inner {
    /// SIMD (Teddy) search for the built-in literals.
    scans: Vec<LiteralScan>,
    /// Number of builtin literal patterns (exact secrets come after).
    n_builtin: usize,
    /// Exact secrets (case-sensitive, longest first at a position), scanned separately.
    exact: Option<AhoCorasick>,
    exact_values: Vec<String>,
}

/// One SIMD (Teddy) search over a group of literals, with each pattern's
/// rule mask and check. Literals are split by length: Teddy fingerprints the
/// first min(4, shortest) bytes, so mixing 3-byte literals into the long ones
/// would weaken every fingerprint (two searches measured ~2× faster than one).
/// The long ones are split again into groups of at most [`SLIM_TEDDY_MAX`]:
/// two Slim Teddy searches (32 bytes a step) cost less than one Fat Teddy
/// (16 bytes a step; 18% → 16% of the clean-text profile).
struct LiteralScan {
    searcher: aho_corasick::packed::Searcher,
    pat: Vec<(u64, Verify)>,
}

/// A compiled set of redaction rules plus the host's exact secret values.
///
/// Cheap to clone and share across threads (`Send + Sync`); build it once.
#[derive(Clone)]
pub struct Redactor {
    inner: Arc<Inner>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field("builtin_literals", &self.inner.n_builtin)
            .field("exact_secrets", &self.inner.exact_values.len())
            .finish()
    }
}

impl Default for Redactor {
    fn default() -> Self {
        Self::builtin()
    }
}

static BUILTIN: once_cell::sync::Lazy<Option<Redactor>> =
    once_cell::sync::Lazy::new(|| Redactor::new(Vec::<String>::new()).ok());

impl Redactor {
    /// Built-in rules plus exact `secrets` (each value of at least
    /// [`MIN_EXACT_SECRET_LEN`] bytes; shorter ones are ignored). A value with
    /// line breaks is registered line by line (each line of 8+ bytes), since
    /// redaction works on lines; a line longer than [`MAX_TOKEN`] is
    /// registered as consecutive pieces of at most that size (at least half
    /// of it), each masked wherever it appears, so that a long line cut into
    /// windows still masks all of it.
    pub fn new<I, S>(secrets: I) -> Result<Self, RedactError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut exact_values: Vec<String> = Vec::new();
        for s in secrets {
            let s: String = s.into();
            for part in s.split(['\n', '\r']) {
                let part = part.trim();
                if part.len() < MIN_EXACT_SECRET_LEN {
                    continue;
                }
                for piece in exact_pieces(part) {
                    if !exact_values.iter().any(|v| v == piece) {
                        exact_values.push(piece.to_string());
                    }
                }
            }
        }
        let mut scans = Vec::new();
        let mut groups = Vec::new();
        for short in [true, false] {
            let group: Vec<_> = LITERALS
                .iter()
                .filter(|(lit, _, _)| (lit.len() < 4) == short)
                .collect();
            // Slim Teddy (32 bytes a step) takes at most 32 literals; more
            // would make it Fat Teddy (16 bytes a step).
            let n = group.len().div_ceil(SLIM_TEDDY_MAX).max(1);
            let size = group.len().div_ceil(n).max(1);
            groups.extend(group.chunks(size).map(<[_]>::to_vec));
        }
        for group in groups {
            if group.is_empty() {
                continue;
            }
            let searcher = aho_corasick::packed::Config::new()
                .match_kind(aho_corasick::packed::MatchKind::LeftmostFirst)
                .builder()
                .extend(group.iter().map(|(lit, _, _)| lit))
                .build()
                .ok_or(RedactError::NoSearcher)?;
            let pat = group
                .iter()
                .map(|(_, kinds, verify)| (rules::mask_of(kinds), *verify))
                .collect();
            scans.push(LiteralScan { searcher, pat });
        }
        if scans.len() > MAX_SCANS {
            // The candidate cache has room for MAX_SCANS searches; more would
            // go unsearched (a constant table: every test would fail here).
            return Err(RedactError::NoSearcher);
        }
        let n_builtin = LITERALS.len();
        let exact = if exact_values.is_empty() {
            None
        } else {
            Some(
                AhoCorasickBuilder::new()
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(&exact_values)?,
            )
        };
        Ok(Self {
            inner: Arc::new(Inner {
                scans,
                n_builtin,
                exact,
                exact_values,
            }),
        })
    }

    /// The built-in rules only (no exact secrets). Compiled once per process.
    pub fn builtin() -> Self {
        match &*BUILTIN {
            Some(r) => r.clone(),
            // Unreachable in practice: the builtin literal set is small and fixed.
            None => Self::fallback(),
        }
    }

    #[cold]
    fn fallback() -> Self {
        #[allow(clippy::expect_used)]
        Self::new(Vec::<String>::new()).expect("built-in prefilter builds")
    }

    /// Number of exact secret values registered.
    pub fn exact_secret_count(&self) -> usize {
        self.inner.exact_values.len()
    }

    /// Redact a whole text. Returns the input unchanged (borrowed) when
    /// nothing in it needs masking. Same result as one [`RedactStream::push`]
    /// of the text followed by [`RedactStream::finish`].
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let first = match self.first_candidate(text, 0) {
            Some(p) => p,
            None => return Cow::Borrowed(text),
        };
        let ls = memchr::memrchr(b'\n', &text.as_bytes()[..first]).map_or(0, |i| i + 1);
        let mut out = String::with_capacity(text.len() + 64);
        out.push_str(&text[..ls]);
        let mut st = self.stream();
        st.push(&text[ls..], &mut out);
        st.finish(&mut out);
        if out == text {
            Cow::Borrowed(text)
        } else {
            Cow::Owned(out)
        }
    }

    /// A streaming redactor sharing this compiled rule set.
    pub fn stream(&self) -> RedactStream {
        RedactStream {
            red: self.clone(),
            pending: String::new(),
            done: 0,
            pem: Pem::None,
        }
    }

    /// Position of the first literal hit that passes its cheap check, from `at`.
    fn first_candidate(&self, hay: &str, at: usize) -> Option<usize> {
        let mut cache = Cands::default();
        self.first_candidate_cached(hay, at, &mut cache)
    }

    /// [`first_candidate`](Self::first_candidate) remembering the next hit
    /// of each source (literal groups, separators, exact secrets) across
    /// calls on the same haystack with growing `at`.
    fn first_candidate_cached(&self, hay: &str, at: usize, cache: &mut Cands) -> Option<usize> {
        let inner = &*self.inner;
        let finder = &mut cache.sep_finder;
        let mut best = cache
            .sep
            .get(at, |at| next_separator(hay.as_bytes(), at, finder));
        for (scan, next) in inner.scans.iter().zip(cache.lit.iter_mut()) {
            let hit = next.get(at, |at| next_literal(scan, hay, at));
            best = min_opt(best, hit);
        }
        if let Some(ac) = &inner.exact {
            let hit = cache.exact.get(at, |at| {
                ac.find(Input::new(hay).range(at..)).map(|m| m.start())
            });
            best = min_opt(best, hit);
        }
        best
    }

    /// Rule mask of every verified hit in `line`.
    fn line_mask(&self, line: &str) -> u64 {
        let mut mask = 0;
        for scan in &self.inner.scans {
            let mut at = 0;
            while at < line.len() {
                let Some(m) = scan
                    .searcher
                    .find_in(line, aho_corasick::Span::from(at..line.len()))
                else {
                    break;
                };
                mask |= verify(scan, line, m.start(), m.end(), m.pattern().as_usize());
                at = m.start() + 1;
            }
        }
        let b = line.as_bytes();
        let mut sep = 0u8;
        for p in memchr::memchr2_iter(b'=', b':', b) {
            sep |= rules::separator_rules(b, p);
        }
        if sep & rules::SEP_ENV != 0 {
            mask |= 1 << *IDX_ENV;
        }
        if sep & rules::SEP_AUTH != 0 {
            mask |= 1 << *IDX_AUTH;
        }
        if sep & rules::SEP_APIHDR != 0 {
            mask |= 1 << *IDX_APIHDR;
        }
        if let Some(ac) = &self.inner.exact
            && ac.is_match(line)
        {
            mask |= EXACT_BIT;
        }
        mask
    }
}

/// `v` in consecutive pieces of at most [`MAX_TOKEN`] bytes, of nearly
/// equal size, cut on char boundaries.
fn exact_pieces(v: &str) -> Vec<&str> {
    if v.len() <= MAX_TOKEN {
        return vec![v];
    }
    let k = v.len().div_ceil(MAX_TOKEN);
    let size = v.len().div_ceil(k);
    let mut pieces = Vec::with_capacity(k);
    let mut at = 0;
    while at < v.len() {
        let mut end = floor_boundary(v, at + size);
        if end <= at {
            end = (at + 1..=v.len())
                .find(|&i| v.is_char_boundary(i))
                .unwrap_or(v.len());
        }
        pieces.push(&v[at..end]);
        at = end;
    }
    pieces
}

fn min_opt(a: Option<usize>, b: Option<usize>) -> Option<usize> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Next literal hit of `scan` at or after `at` that passes its cheap check.
fn next_literal(scan: &LiteralScan, hay: &str, mut at: usize) -> Option<usize> {
    while at < hay.len() {
        let m = scan
            .searcher
            .find_in(hay, aho_corasick::Span::from(at..hay.len()))?;
        if verify(scan, hay, m.start(), m.end(), m.pattern().as_usize()) != 0 {
            return Some(m.start());
        }
        at = m.start() + 1;
    }
    None
}

/// Rule mask a literal hit enables after its cheap check (0 = not a candidate).
fn verify(scan: &LiteralScan, hay: &str, start: usize, end: usize, pattern: usize) -> u64 {
    let Some(&(mask, how)) = scan.pat.get(pattern) else {
        return 0;
    };
    let b = hay.as_bytes();
    let ok = match how {
        Verify::Always => true,
        Verify::TokenStart => start == 0 || !is_token_byte(b[start - 1]),
        Verify::UrlAt => {
            let tail = &b[end..b.len().min(end + 512)];
            let stop = tail
                .iter()
                .position(|c| c.is_ascii_whitespace())
                .unwrap_or(tail.len());
            memchr::memchr(b'@', &tail[..stop]).is_some()
        }
    };
    if ok { mask } else { 0 }
}

/// Next separator (`=`/`:`) at or after `at` that may start a name/header
/// match. `finder` keeps its block bitmask between calls on one haystack.
fn next_separator(b: &[u8], at: usize, finder: &mut SepFinder) -> Option<usize> {
    finder.next_where(b, at, |p| rules::separator_candidate(b, p))
}

/// The next hit of one candidate source, remembered between searches of the
/// same haystack (positions only grow).
#[derive(Default)]
struct NextHit {
    from: Option<usize>,
    hit: Option<usize>,
}

impl NextHit {
    fn get(&mut self, at: usize, search: impl FnOnce(usize) -> Option<usize>) -> Option<usize> {
        let fresh = match (self.from, self.hit) {
            (Some(from), Some(h)) => from <= at && h >= at,
            (Some(from), None) => from <= at,
            (None, _) => false,
        };
        if !fresh {
            self.hit = search(at);
            self.from = Some(at);
        }
        self.hit
    }
}

#[derive(Default)]
struct Cands {
    lit: [NextHit; MAX_SCANS],
    sep: NextHit,
    sep_finder: SepFinder,
    exact: NextHit,
}

#[derive(Clone, Debug)]
enum Pem {
    None,
    /// The last window of a line ending in a BEGIN … PRIVATE KEY marker
    /// (held): its text with context, where its unwritten part starts, and
    /// the marker offset.
    Pending(String, usize, usize),
    /// Inside a key block whose mask was already written; `headers` once a
    /// `Proc-Type:`-style header was seen (a blank line may follow it).
    In {
        headers: bool,
    },
}

/// Streaming redaction of one output stream.
///
/// Feed text with [`push`](Self::push), end with [`finish`](Self::finish).
/// The output equals [`Redactor::redact`] of the concatenated input for every
/// way of splitting it. Complete lines are judged as they arrive; the current
/// incomplete line is held back (at most [`MAX_HELD`] bytes in all).
pub struct RedactStream {
    red: Redactor,
    /// The current incomplete line from its window's context on:
    /// `pending[..done]` was already written (context for the next window),
    /// `pending[done..]` was not. Empty between lines.
    pending: String,
    done: usize,
    pem: Pem,
}

impl fmt::Debug for RedactStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedactStream")
            .field("held", &self.held_len())
            .field("in_private_key", &!matches!(self.pem, Pem::None))
            .finish()
    }
}

#[derive(Clone, Copy)]
struct Span {
    start: usize,
    end: usize,
    prio: usize,
    kind: &'static str,
}

/// Where to cut a line of more than one window (depends only on its first
/// [`LINE_MAX`] bytes): after the last blank or punctuation byte in the last
/// 4 KiB of the step, else at the last char boundary. A match crossing the
/// cut moves it to the match's end (see [`RedactStream::window`]).
fn cut_point(s: &str) -> usize {
    let w = floor_boundary(s, LINE_MAX);
    let lo = w.saturating_sub(4096);
    let b = s.as_bytes();
    for i in (lo..w).rev() {
        if matches!(
            b[i],
            b' ' | b'\t'
                | b','
                | b';'
                | b'('
                | b')'
                | b'['
                | b']'
                | b'{'
                | b'}'
                | b'<'
                | b'>'
                | b'"'
                | b'\''
                | b'|'
        ) {
            return i + 1;
        }
    }
    w.max(1)
}

/// The largest char boundary of `s` at or before `i` (or `s.len()`).
fn floor_boundary(s: &str, i: usize) -> usize {
    let mut i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

pub(crate) fn push_mask(out: &mut String, kind: &str) {
    out.push_str("«redacted:");
    out.push_str(kind);
    out.push('»');
}

impl RedactStream {
    /// Bytes currently held back.
    pub fn held_len(&self) -> usize {
        self.pending.len()
            + if let Pem::Pending(l, _, _) = &self.pem {
                l.len()
            } else {
                0
            }
    }

    /// Process one chunk, appending finished text to `out`.
    pub fn push(&mut self, chunk: &str, out: &mut String) {
        let mut rest = chunk;
        // Complete (or bound) the held partial line first.
        while !self.pending.is_empty() && !rest.is_empty() {
            let unwritten = self.pending.len() - self.done;
            let room = (WINDOW + 1).saturating_sub(unwritten).max(1);
            let nl = memchr::memchr(b'\n', &rest.as_bytes()[..room.min(rest.len())]);
            match nl {
                Some(i) => {
                    self.pending.push_str(&rest[..=i]);
                    rest = &rest[i + 1..];
                    let line = std::mem::take(&mut self.pending);
                    let from = std::mem::take(&mut self.done);
                    self.line(&line, from, out);
                }
                None => {
                    let mut take = room.min(rest.len());
                    while !rest.is_char_boundary(take) {
                        take += 1;
                    }
                    self.pending.push_str(&rest[..take]);
                    rest = &rest[take..];
                    self.drain_windows(out);
                }
            }
        }
        if rest.is_empty() {
            return;
        }
        let (region, tail) = match memchr::memrchr(b'\n', rest.as_bytes()) {
            Some(i) => rest.split_at(i + 1),
            None => ("", rest),
        };
        self.region(region, out);
        // Hold the unterminated tail, judging full windows as they come.
        let mut tail = tail;
        while !tail.is_empty() {
            let unwritten = self.pending.len() - self.done;
            let room = (WINDOW + 1).saturating_sub(unwritten).max(1);
            let mut take = room.min(tail.len());
            while !tail.is_char_boundary(take) {
                take += 1;
            }
            self.pending.push_str(&tail[..take]);
            tail = &tail[take..];
            self.drain_windows(out);
        }
    }

    /// End of stream: judge the held partial line and flush everything.
    /// The stream is reset and can be reused.
    pub fn finish(&mut self, out: &mut String) {
        let line = std::mem::take(&mut self.pending);
        let from = std::mem::take(&mut self.done);
        if !line.is_empty() {
            self.line(&line, from, out);
        }
        if let Pem::Pending(held, from, _) = std::mem::replace(&mut self.pem, Pem::None) {
            self.plain(&held, from, None, None, false, out);
        }
        self.pem = Pem::None;
    }

    /// While more than one window of the held partial line is unwritten,
    /// judge a window and keep only [`MAX_TOKEN`] of context before what is
    /// still unwritten. Same steps as [`line`](Self::line) takes on the
    /// whole line.
    fn drain_windows(&mut self, out: &mut String) {
        while self.pending.len() - self.done > WINDOW {
            let pending = std::mem::take(&mut self.pending);
            let e = self.window(&pending, self.done, false, out);
            let ctx = floor_boundary(&pending, e.saturating_sub(MAX_TOKEN));
            self.pending = pending;
            self.pending.drain(..ctx);
            self.done = e - ctx;
        }
    }

    /// A region made of complete lines: copy lines without candidates in bulk.
    fn region(&mut self, region: &str, out: &mut String) {
        let mut pos = 0;
        let mut cache = Cands::default();
        while pos < region.len() {
            if !matches!(self.pem, Pem::None) {
                let le = memchr::memchr(b'\n', &region.as_bytes()[pos..])
                    .map_or(region.len(), |i| pos + i + 1);
                self.line(&region[pos..le], 0, out);
                pos = le;
                continue;
            }
            let Some(hit) = self.red.first_candidate_cached(region, pos, &mut cache) else {
                break;
            };
            let b = region.as_bytes();
            let ls = memchr::memrchr(b'\n', &b[pos..hit]).map_or(pos, |i| pos + i + 1);
            let le = memchr::memchr(b'\n', &b[hit..]).map_or(region.len(), |i| hit + i + 1);
            out.push_str(&region[pos..ls]);
            self.line(&region[ls..le], 0, out);
            pos = le;
        }
        out.push_str(&region[pos..]);
    }

    /// One complete line (or the final partial line) whose first `from`
    /// bytes were already written by earlier windows: judged in windows of
    /// [`LINE_MAX`] plus [`MAX_TOKEN`] of lookahead, each seeing
    /// [`MAX_TOKEN`] of context before it, so that no match of up to
    /// [`MAX_TOKEN`] bytes is ever split between two judgements.
    fn line(&mut self, line: &str, mut from: usize, out: &mut String) {
        let mut text = line;
        while text.len() - from > WINDOW {
            let e = self.window(text, from, false, out);
            let ctx = floor_boundary(text, e.saturating_sub(MAX_TOKEN));
            text = &text[ctx..];
            from = e - ctx;
        }
        if from < text.len() {
            self.window(text, from, true, out);
        }
    }

    /// Judge one window of a line: `text[..from]` is context already
    /// written; `last` when `text` reaches the line's end (else it runs
    /// past the window, which is then `from + WINDOW` bytes). Writes
    /// `text[from..e]` and returns `e`, with the multi-line private key
    /// state.
    fn window(&mut self, text: &str, from: usize, last: bool, out: &mut String) -> usize {
        let (text, cut) = if last {
            (text, text.len())
        } else {
            let wend = floor_boundary(text, from + WINDOW);
            (&text[..wend], from + cut_point(&text[from..wend]))
        };
        let c = &*COMPILED;
        match std::mem::replace(&mut self.pem, Pem::None) {
            Pem::None => {}
            Pem::In { headers } => {
                if let Some(m) = c.pem_end.find(&text[from..])
                    && from + m.start() < cut
                {
                    // Swallow through the END marker; judge what follows it.
                    let after = from + m.end();
                    let cut = (!last).then_some(cut.max(after));
                    return self.plain(text, after, cut, None, false, out);
                }
                let t = text[from..cut].trim();
                if is_pem_header(t) {
                    self.pem = Pem::In { headers: true };
                    return cut;
                }
                if (t.is_empty() && headers) || (!t.is_empty() && is_base64_line(t)) {
                    self.pem = Pem::In { headers };
                    return cut;
                }
                // Not key material: the block ended without its END line.
            }
            Pem::Pending(held, hfrom, ms) => {
                let t = text[from..cut].trim();
                if is_pem_header(t) || (is_base64_line(t) && t.len() >= 16) {
                    self.plain(&held, hfrom, None, Some((ms, held.len())), false, out);
                    self.pem = Pem::In {
                        headers: is_pem_header(t),
                    };
                    return cut;
                }
                self.plain(&held, hfrom, None, None, false, out);
            }
        }
        self.plain(text, from, (!last).then_some(cut), None, last, out)
    }

    /// Apply the single-line rules to `text` (plus an extra private-key
    /// span) and write `text[from..e]`, where `e` is `cut` moved past any
    /// masked match crossing it (the end of `text` without a cut); returns
    /// `e`. Or hold `text` if it opens a multi-line private key block.
    fn plain(
        &mut self,
        text: &str,
        from: usize,
        cut: Option<usize>,
        extra: Option<(usize, usize)>,
        allow_pem_hold: bool,
        out: &mut String,
    ) -> usize {
        let end = cut.unwrap_or(text.len());
        if from >= text.len() {
            return end.max(from);
        }
        let red = &self.red;
        let mask = red.line_mask(text);
        if mask == 0 && extra.is_none() {
            out.push_str(&text[from..end]);
            return end;
        }
        let mut spans: Vec<Span> = Vec::new();
        if let Some((s, e)) = extra {
            spans.push(Span {
                start: s,
                end: e,
                prio: *IDX_PEM,
                kind: RULES[*IDX_PEM].kind,
            });
        }
        if mask & (1 << *IDX_PEM) != 0
            && extra.is_none()
            && let Some(ms) = pem_spans(text, &mut spans)
            && allow_pem_hold
        {
            self.pem = Pem::Pending(text.to_string(), from, ms);
            return text.len();
        }
        collect_spans(red, text, mask, &mut spans);
        write_spans(text, from, cut, spans, out)
    }
}

/// Single-line private keys (`-----BEGIN … PRIVATE KEY-----\nMII…` with
/// escaped newlines, as in JSON). Returns the marker offset when the marker
/// ends the line (a multi-line block may follow).
fn pem_spans(seg: &str, spans: &mut Vec<Span>) -> Option<usize> {
    let c = &*COMPILED;
    let mut hold = None;
    for m in c.pem_begin.find_iter(seg) {
        let b = seg.as_bytes();
        let mut i = m.end();
        let mut b64 = 0usize;
        let mut end = None;
        while i < b.len() {
            if b[i] == b'-' {
                if let Some(e) = c.pem_end.find_at(seg, i).filter(|e| e.start() == i) {
                    end = Some(e.end());
                }
                break;
            }
            if b[i] == b'\\' && matches!(b.get(i + 1), Some(b'n' | b'r')) {
                i += 2;
                continue;
            }
            if b[i].is_ascii_alphanumeric() || matches!(b[i], b'+' | b'/' | b'=') {
                b64 += 1;
            } else if !matches!(b[i], b' ' | b'\t' | b':' | b',' | b'.') {
                break;
            }
            i += 1;
        }
        if b64 >= 32 {
            spans.push(Span {
                start: m.start(),
                end: end.unwrap_or(i),
                prio: *IDX_PEM,
                kind: RULES[*IDX_PEM].kind,
            });
        } else if seg[m.end()..].trim().is_empty() {
            hold = Some(m.start());
        }
    }
    hold
}

fn is_pem_header(t: &str) -> bool {
    ["Proc-Type:", "DEK-Info:", "Comment:"]
        .iter()
        .any(|h| t.starts_with(h))
}

fn is_base64_line(t: &str) -> bool {
    !t.is_empty()
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
}

fn before_ok(b: &[u8], start: usize) -> bool {
    start == 0 || !(is_token_byte(b[start - 1]) || b[start - 1] == b'.')
}

fn after_ok(b: &[u8], end: usize) -> bool {
    end >= b.len() || !(is_token_byte(b[end]) || matches!(b[end], b'+' | b'/'))
}

fn collect_spans(red: &Redactor, seg: &str, mask: u64, spans: &mut Vec<Span>) {
    let c = &*COMPILED;
    let b = seg.as_bytes();
    for (idx, rule) in RULES.iter().enumerate() {
        if mask & (1 << idx) == 0 {
            continue;
        }
        match rule.how {
            How::Vendor(_) => {
                let Some(Some(re)) = c.vendor.get(idx) else {
                    continue;
                };
                for caps in re.captures_iter(seg) {
                    let Some(whole) = caps.get(0) else { continue };
                    if !before_ok(b, whole.start())
                        || !after_ok(b, whole.end())
                        || whole.len() > rules::vendor_max_len(rule.kind)
                    {
                        continue;
                    }
                    let part = caps.get(1).unwrap_or(whole);
                    let body = whole.as_str().get(3..).unwrap_or("");
                    if !rules::random_looking(body) {
                        continue;
                    }
                    spans.push(Span {
                        start: part.start(),
                        end: part.end(),
                        prio: idx,
                        kind: rule.kind,
                    });
                }
            }
            How::Jwt => {
                for m in c.jwt.find_iter(seg) {
                    if before_ok(b, m.start()) && after_ok(b, m.end()) && m.len() <= MAX_TOKEN {
                        spans.push(Span {
                            start: m.start(),
                            end: m.end(),
                            prio: *IDX_JWT,
                            kind: rule.kind,
                        });
                    }
                }
            }
            How::Pem => {}
            How::Url => url_spans(seg, spans),
            How::Authorization => header_spans(seg, &c.authorization, true, spans),
            How::ApiKeyHeader => header_spans(seg, &c.api_header, false, spans),
            How::Assignment => assignment_spans(seg, spans),
        }
    }
    if mask & EXACT_BIT != 0
        && let Some(ac) = &red.inner.exact
    {
        for m in ac.find_iter(seg) {
            spans.push(Span {
                start: m.start(),
                end: m.end(),
                prio: RULES.len(),
                kind: EXACT_KIND,
            });
        }
    }
}

fn url_spans(seg: &str, spans: &mut Vec<Span>) {
    let c = &*COMPILED;
    for caps in c.url.captures_iter(seg) {
        let user = caps.get(1);
        match caps.get(2) {
            Some(pw) => {
                if !rules::is_template(pw.as_str()) {
                    spans.push(Span {
                        start: pw.start(),
                        end: pw.end(),
                        prio: *IDX_URL,
                        kind: "url_password",
                    });
                }
            }
            None => {
                let Some(u) = user else { continue };
                let v = u.as_str();
                let cl = rules::classes(v);
                if v.len() >= 20
                    && cl.letter()
                    && cl.digit
                    && !rules::is_template(v)
                    && v.bytes().all(|b| {
                        b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'~' | b'+')
                    })
                {
                    spans.push(Span {
                        start: u.start(),
                        end: u.end(),
                        prio: *IDX_URL,
                        kind: URL_TOKEN_KIND,
                    });
                }
            }
        }
    }
}

/// Extract the value after a header name + separator at `i`.
/// Returns (value start, value end) or None when the value is code.
fn header_value(seg: &str, i: usize, key_quoted: bool) -> Option<(usize, usize)> {
    let b = seg.as_bytes();
    // String prefixes (only when a quote follows): an f-string is a template.
    let mut j = i;
    while j < b.len()
        && j < i + 2
        && matches!(b[j], b'r' | b'R' | b'b' | b'B' | b'u' | b'U' | b'f' | b'F')
    {
        j += 1;
    }
    if !matches!(b.get(j), Some(b'"' | b'\'' | b'`')) {
        j = i;
    }
    let fprefix = b[i..j].iter().any(|c| matches!(c, b'f' | b'F'));
    let quote = b
        .get(j)
        .copied()
        .filter(|q| matches!(q, b'"' | b'\'' | b'`'));
    match quote {
        Some(q) => {
            if fprefix || q == b'`' {
                return None;
            }
            let start = j + 1;
            let len = memchr::memchr(q, &b[start..])?;
            Some((start, start + len))
        }
        None => {
            if key_quoted || j != i {
                // `"Authorization": token` — a variable, i.e. code.
                return None;
            }
            let end = b[i..]
                .iter()
                .position(|&c| matches!(c, b'"' | b'\'' | b'\n' | b'\r'))
                .map_or(b.len(), |p| i + p);
            let mut e = end;
            while e > i && b[e - 1].is_ascii_whitespace() {
                e -= 1;
            }
            Some((i, e))
        }
    }
}

const PARAM_SCHEMES: &[&str] = &[
    "digest",
    "aws4-hmac-sha256",
    "oauth",
    "signature",
    "hoba",
    "mutual",
    "vapid",
];

fn header_spans(seg: &str, re: &regex::Regex, authorization: bool, spans: &mut Vec<Span>) {
    let b = seg.as_bytes();
    for caps in re.captures_iter(seg) {
        let Some(whole) = caps.get(0) else { continue };
        if whole.start() > 0
            && (b[whole.start() - 1].is_ascii_alphanumeric() || b[whole.start() - 1] == b'_')
        {
            continue;
        }
        let key_quoted = caps.get(1).is_some_and(|q| !q.as_str().is_empty());
        let Some((vs, ve)) = header_value(seg, whole.end(), key_quoted) else {
            continue;
        };
        let v = &seg[vs..ve];
        if v.is_empty() || rules::is_template(v) || v.contains(['{', '}', '$', '<', '>']) {
            continue;
        }
        let (prio, kind) = if authorization {
            (*IDX_AUTH, "authorization")
        } else {
            (*IDX_APIHDR, "api_key_header")
        };
        if authorization && let Some(sp) = v.find(' ') {
            let scheme = &v[..sp];
            let cred = v[sp..].trim_start();
            let cs = ve - cred.len();
            if scheme
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-')
                && !scheme.is_empty()
            {
                let lower = scheme.to_ascii_lowercase();
                if PARAM_SCHEMES.contains(&lower.as_str()) {
                    if cred.contains('=') && cred.len() >= 16 {
                        spans.push(Span {
                            start: cs,
                            end: ve,
                            prio,
                            kind,
                        });
                    }
                } else if !cred.contains(char::is_whitespace) && single_token_cred(cred) {
                    spans.push(Span {
                        start: cs,
                        end: ve,
                        prio,
                        kind,
                    });
                }
            }
            continue;
        }
        if rules::credential_shaped(v) || (!authorization && header_key_shaped(v)) {
            spans.push(Span {
                start: vs,
                end: ve,
                prio,
                kind,
            });
        }
    }
}

/// The credential after `Bearer `/`Basic `/`token `…: one token (the caller
/// checked there is nothing after it), not a template or placeholder word.
fn single_token_cred(cred: &str) -> bool {
    cred.len() >= 4
        && !rules::is_template(cred)
        && !rules::is_placeholder_word(cred)
        && cred.bytes().all(|b| b.is_ascii_graphic())
}

/// An API-key header value: one token of 8+ printable bytes, not a template,
/// placeholder word or expression.
fn header_key_shaped(v: &str) -> bool {
    v.len() >= 8
        && v.bytes().all(|b| b.is_ascii_graphic())
        && !rules::is_placeholder_word(v)
        && !v.contains(['(', ')', '[', ']'])
}

/// Where the assignment regex would start the name ending before the
/// separator at `p` (back over blanks, `]` and a closing quote, then the
/// name run; the name starts at the run's first letter or `_`). `None` when
/// no acceptable name starts there.
fn assignment_name_start(b: &[u8], p: usize) -> Option<usize> {
    let end = rules::name_end(b, p);
    let mut j = end;
    let lo = end.saturating_sub(102);
    while j > lo && (b[j - 1].is_ascii_alphanumeric() || matches!(b[j - 1], b'_' | b'.' | b'-')) {
        j -= 1;
    }
    if j == lo
        && lo > 0
        && (b[lo - 1].is_ascii_alphanumeric() || matches!(b[lo - 1], b'_' | b'.' | b'-'))
    {
        return None; // name longer than 101 bytes
    }
    let s = (j..end).find(|&i| b[i].is_ascii_alphabetic() || b[i] == b'_')?;
    if s > 0 && (matches!(b[s - 1], b'$' | b'%' | b'{') || is_token_byte(b[s - 1])) {
        return None;
    }
    Some(s)
}

/// Longest window after a separator the assignment regex looks at: a value
/// over 1024 bytes is never credential-shaped, so a value still running at
/// the window's end is rejected. Keeps the rule linear in the line length.
const ASSIGNMENT_WINDOW: usize = 1100;

fn assignment_spans(seg: &str, spans: &mut Vec<Span>) {
    let c = &*COMPILED;
    let b = seg.as_bytes();
    let mut done_upto = 0;
    for p in memchr::memchr2_iter(b'=', b':', b) {
        if rules::separator_rules(b, p) & rules::SEP_ENV == 0 {
            continue;
        }
        let Some(ns) = assignment_name_start(b, p) else {
            continue;
        };
        if ns < done_upto {
            continue;
        }
        let mut wend = (p + 1 + ASSIGNMENT_WINDOW).min(seg.len());
        while !seg.is_char_boundary(wend) {
            wend -= 1;
        }
        let window = &seg[ns..wend];
        let Some(caps) = c.assignment.captures(window) else {
            continue;
        };
        let (Some(name), Some(nq), Some(sp1), Some(sep), Some(sp2), Some(vq), Some(val)) = (
            caps.get(1),
            caps.get(2),
            caps.get(3),
            caps.get(4),
            caps.get(5),
            caps.get(6),
            caps.get(7),
        ) else {
            continue;
        };
        if ns + sep.start() != p {
            continue;
        }
        if val.end() == window.len()
            && wend < seg.len()
            && !b[wend].is_ascii_whitespace()
            && !matches!(
                b[wend],
                b'"' | b'\'' | b'`' | b',' | b';' | b'&' | b')' | b']' | b'}'
            )
        {
            continue; // the value runs past the window: too long to be a credential
        }
        // Offsets below are relative to `seg`.
        let name = (ns + name.start(), ns + name.end(), name.as_str());
        let val = (ns + val.start(), ns + val.end(), val.as_str());
        let sep = sep.as_str();
        if (sep != "=" && sep != ":") || name.2.len() > 101 {
            continue;
        }
        if !rules::secret_name(name.2) {
            continue;
        }
        let vqs = vq.as_str();
        if vqs.contains(['f', 'F']) {
            continue;
        }
        let quote = vqs
            .bytes()
            .last()
            .filter(|q| matches!(q, b'"' | b'\'' | b'`'));
        let v = val.2;
        match quote {
            Some(q) => {
                if q == b'`' || b.get(val.1) != Some(&q) {
                    continue;
                }
            }
            None => {
                if !vqs.is_empty() {
                    // `password=b...` without a quote: the letters were part of the value.
                    continue;
                }
                // Unquoted: `NAME = value` with blanks is code (an expression),
                // and so is a keyword argument `f(token=value)`.
                // An INI file (`name = value`) looks the same, so a value
                // with blanks around `=` is only taken when it cannot be a
                // Python name: it has operator-free non-identifier bytes
                // (`+`, `/`, `-`…) or reads as random, not as words.
                if sep == "="
                    && (!sp1.as_str().is_empty() || !sp2.as_str().is_empty())
                    && rules::is_identifier(v)
                    && !rules::random_identifier(v)
                {
                    continue;
                }
                let before = seg[..name.0].trim_end();
                if before.ends_with('(') || before.ends_with(',') {
                    continue;
                }
                let _ = nq;
            }
        }
        if !rules::credential_shaped(v) {
            continue;
        }
        spans.push(Span {
            start: val.0,
            end: val.1,
            prio: *IDX_ENV,
            kind: "env_secret",
        });
        done_upto = val.1;
    }
}

/// Merge overlapping spans (union, kind of the highest priority) and write
/// `seg[from..e]`: `e` is `cut` moved to the end of a merged span crossing
/// it (the end of `seg` without a cut). Spans are clipped to `from..e`: what
/// lies before `from` was written by an earlier window (context), what
/// starts at `e` or later is left to the next one. Returns `e`.
fn write_spans(
    seg: &str,
    from: usize,
    cut: Option<usize>,
    mut spans: Vec<Span>,
    out: &mut String,
) -> usize {
    let mut e = cut.unwrap_or(seg.len());
    if spans.is_empty() {
        out.push_str(&seg[from..e]);
        return e;
    }
    spans.sort_by_key(|s| (s.start, std::cmp::Reverse(s.end)));
    let mut merged: Vec<Span> = Vec::with_capacity(spans.len());
    for s in spans {
        if s.start >= s.end || s.end > seg.len() {
            continue;
        }
        // Pieces of one long exact secret meet end to end: one mask.
        if let Some(last) = merged.last_mut()
            && (s.start < last.end
                || (s.start == last.end && s.kind == EXACT_KIND && last.kind == EXACT_KIND))
        {
            if s.end > last.end {
                last.end = s.end;
            }
            if s.prio < last.prio {
                last.prio = s.prio;
                last.kind = s.kind;
            }
            continue;
        }
        merged.push(s);
    }
    if cut.is_some()
        && let Some(s) = merged.iter().find(|s| s.start < e && s.end > e)
    {
        e = s.end;
    }
    let mut pos = from;
    for s in merged {
        if s.end <= from {
            continue;
        }
        if s.start >= e {
            break;
        }
        let (start, end) = (s.start.max(from), s.end.min(e));
        // Spans come from regex/AC matches on `seg`, so they are on char boundaries.
        if let (Some(pre), true) = (seg.get(pos..start), seg.is_char_boundary(end)) {
            out.push_str(pre);
            push_mask(out, s.kind);
            pos = end;
        }
    }
    out.push_str(&seg[pos..e]);
    e
}
