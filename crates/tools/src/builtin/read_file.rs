//! `read_file(path, offset=1, limit=2000)`: lines of a text file.
//!
//! Only regular files are read (see `fsutil::open_regular`: no FIFOs,
//! sockets, devices or `/proc/<pid>/fd` aliases). Memory is bounded
//! whatever the file holds: the file is scanned in fixed-size chunks, a
//! returned line keeps at most [`MAX_LINE_BYTES`] (the rest is counted and
//! marked), and the content stops growing at [`MAX_CONTENT_BYTES`]. The scan
//! runs on a blocking thread that stops when the cell is cancelled or its
//! deadline passes; a file of at most [`INLINE_MAX_BYTES`] that
//! `fsutil::open_regular_local` could open (the local root file system,
//! no mount crossed) is read at once on the calling thread instead, which
//! saves the two thread hand-offs of the blocking pool.

use std::io::Read;
use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::fsutil::{self, OpenError, StopOnDrop};
use crate::{Tool, ToolContext, ToolError};

/// Arguments of `read_file`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct Args {
    /// File to read; relative paths are relative to the session's working directory.
    pub path: String,
    /// First line to return, counting from 1.
    #[serde(default = "default_offset")]
    pub offset: NonZeroUsize,
    /// Most lines to return.
    #[serde(default = "default_limit")]
    pub limit: NonZeroUsize,
}

fn default_offset() -> NonZeroUsize {
    NonZeroUsize::MIN
}

fn default_limit() -> NonZeroUsize {
    NonZeroUsize::new(2000).unwrap_or(NonZeroUsize::MIN)
}

/// Result of `read_file`.
#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct Output {
    /// The requested lines, newlines included.
    pub content: String,
    /// Number of lines in the whole file.
    pub total_lines: usize,
    /// True when the file has lines after the ones returned.
    pub truncated: bool,
}

/// Files up to this size on a local file system are read on the runtime
/// thread that took the call (see [`fsutil::open_regular_local`]).
const INLINE_MAX_BYTES: u64 = 256 * 1024;
/// Bytes looked at to decide whether a file is binary.
const SNIFF: usize = 8192;
/// Bytes read from the file at a time.
const CHUNK: usize = 64 * 1024;
/// A returned line keeps at most this many bytes; the rest is replaced by
/// a marker saying how much was left out.
pub(crate) const MAX_LINE_BYTES: usize = 64 * 1024;
/// `content` stops at the first line that would take it past this many
/// bytes (it always holds at least one line when any is in range).
pub(crate) const MAX_CONTENT_BYTES: usize = 4 * 1024 * 1024;

const OUT_OF_TIME: &str = "read_file: the cell's time ran out before the file was read; \
    read a smaller range (offset, limit) or give the cell more time";

/// Reads lines of a text file.
#[derive(Debug, Default)]
pub(super) struct ReadFile;

impl Tool for ReadFile {
    const NAME: &'static str = "read_file";
    const DOC: &'static str = "Read lines of a text file.\n\n\
        Returns the lines offset..offset+limit-1 (1-indexed) as one string, the file's \
        total line count, and whether lines remain after the returned ones. Page through long \
        files (and spilled output files) by raising offset. Binary files are refused, and so \
        is anything that is not a regular file (pipes, sockets, devices, /proc/<pid>/fd \
        paths). A line longer than 64 KiB is cut and ends in a marker saying how many bytes \
        were left out; content stops early, at a line boundary, once it would pass 4 MiB \
        (truncated is then true: continue from the next line).";
    type Args = Args;
    type Output = Output;

    async fn call(&self, args: Args, cx: &ToolContext) -> Result<Output, ToolError> {
        // What it read goes to the cell's `files.read`, once it has.
        let noted = cx.resolve(&args.path);
        cx.check_read(&noted)?;
        let out = async move {
            if cx.cancelled().is_cancelled() {
                return Err(ToolError::Cancelled(Self::NAME));
            }
            let path = cx.resolve(&args.path);
            let stop = Arc::new(AtomicBool::new(false));
            // However this future ends (answer, deadline, cancellation, or the
            // rpc server dropping it), the worker stops.
            let _guard = StopOnDrop(Arc::clone(&stop));
            let worker_stop = Arc::clone(&stop);
            let (offset, limit) = (args.offset.get(), args.limit.get());
            // A small file on the local root file system is read right here: a
            // trip through the blocking pool costs two thread hand-offs, more
            // than the read. Anything else (another mount, a network file
            // system, a large file, any error) goes to the blocking pool.
            let scan = match fsutil::open_regular_local(&path) {
                Some((file, meta)) => {
                    let mut scan = Scan::new(file, meta.len(), &path, offset, limit);
                    if meta.len() <= INLINE_MAX_BYTES {
                        // Bounded: a file that grows while it is read (a cell
                        // appending to it) continues on the blocking pool.
                        if let Some(out) = scan.run(&stop, Some(2 * INLINE_MAX_BYTES))? {
                            return Ok(out);
                        }
                    }
                    Some(scan)
                }
                None => None,
            };
            let work = tokio::task::spawn_blocking(move || match scan {
                Some(scan) => scan.read_to_end(&worker_stop),
                None => read(&path, offset, limit, &worker_stop),
            });
            tokio::select! {
                joined = work => joined
                    .map_err(|e| ToolError::failed(format!("read_file: worker failed: {e}")))?,
                () = cx.cancelled().cancelled() => Err(ToolError::Cancelled(Self::NAME)),
                () = tokio::time::sleep_until(cx.deadline()) => Err(ToolError::failed(OUT_OF_TIME)),
            }
        }
        .await;
        if out.is_ok() {
            cx.note_read(&noted);
        }
        out
    }
}

/// The lines `offset..offset+limit` of `path`, with the caps of this module.
pub(crate) fn read(
    path: &Path,
    offset: usize,
    limit: usize,
    stop: &AtomicBool,
) -> Result<Output, ToolError> {
    let (file, meta) = fsutil::open_regular(path).map_err(|e| match e {
        OpenError::Dir => ToolError::failed(format!(
            "{} is a directory; use search_files(pattern, target=\"files\", path=...) to list it",
            path.display()
        )),
        other => ToolError::failed(other.message("read_file", "read", path)),
    })?;
    Scan::new(file, meta.len(), path, offset, limit).read_to_end(stop)
}

/// A read of one opened regular file for the lines `offset..offset+limit`.
/// It can stop after a number of bytes and go on later (on another thread).
struct Scan {
    file: std::fs::File,
    path: std::path::PathBuf,
    lines: Lines,
    buf: Vec<u8>,
    first: bool,
}

impl Scan {
    /// `len` is the file's size when it was opened; it sizes the buffer only.
    fn new(file: std::fs::File, len: u64, path: &Path, offset: usize, limit: usize) -> Self {
        // A small file gets a small buffer (never under SNIFF, the bytes the
        // binary check looks at); a file that grew meanwhile is read in more
        // rounds.
        let size = usize::try_from(len.saturating_add(1)).unwrap_or(CHUNK);
        Self {
            file,
            path: path.to_path_buf(),
            lines: Lines::new(offset, limit),
            buf: vec![0u8; size.clamp(SNIFF, CHUNK)],
            first: true,
        }
    }

    /// Reads to the end of the file.
    fn read_to_end(mut self, stop: &AtomicBool) -> Result<Output, ToolError> {
        loop {
            if let Some(out) = self.run(stop, None)? {
                return Ok(out);
            }
        }
    }

    /// Reads to the end of the file (`Some`), or until at least `budget`
    /// bytes were read (`None`: call again to go on).
    fn run(&mut self, stop: &AtomicBool, budget: Option<u64>) -> Result<Option<Output>, ToolError> {
        let mut left = budget;
        loop {
            if stop.load(Ordering::Relaxed) {
                return Err(ToolError::failed(OUT_OF_TIME));
            }
            if left == Some(0) {
                return Ok(None);
            }
            let n = match self.file.read(&mut self.buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ToolError::io("read", &self.path, &e)),
            };
            if n == 0 {
                let lines = std::mem::replace(&mut self.lines, Lines::new(1, 1));
                return Ok(Some(lines.finish()));
            }
            left = left.map(|b| b.saturating_sub(n as u64));
            let chunk = self.buf.get(..n).unwrap_or_default();
            if self.first {
                self.first = false;
                if chunk[..chunk.len().min(SNIFF)].contains(&0) {
                    return Err(ToolError::failed(format!(
                        "{} looks binary (it contains NUL bytes); read_file returns text only. \
                         Open it from Python (open(path, 'rb')) to inspect bytes.",
                        self.path.display()
                    )));
                }
            }
            self.lines.feed(chunk);
        }
    }
}

/// Line accounting over a stream of chunks.
struct Lines {
    /// First wanted line (1-based) and one past the last.
    offset: usize,
    end: usize,
    /// Lines completed so far.
    total: usize,
    /// Whether the current (incomplete) line has any byte.
    open: bool,
    /// The current line's kept bytes and the bytes dropped past the cap.
    line: Vec<u8>,
    dropped: usize,
    content: Vec<u8>,
    /// The last line put in `content` (0: none).
    last_returned: usize,
    /// `content` is full: later lines are only counted.
    full: bool,
}

impl Lines {
    fn new(offset: usize, limit: usize) -> Self {
        Self {
            offset,
            end: offset.saturating_add(limit),
            total: 0,
            open: false,
            line: Vec::new(),
            dropped: 0,
            content: Vec::new(),
            last_returned: 0,
            full: false,
        }
    }

    /// Whether the line being read now is one to return.
    fn current_wanted(&self) -> bool {
        let n = self.total + 1;
        !self.full && n >= self.offset && n < self.end
    }

    fn feed(&mut self, mut chunk: &[u8]) {
        while !chunk.is_empty() {
            let (part, ended) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (&chunk[..=i], true),
                None => (chunk, false),
            };
            chunk = &chunk[part.len()..];
            self.open = true;
            if self.current_wanted() {
                let room = MAX_LINE_BYTES.saturating_sub(self.line.len());
                let keep = part.len().min(room);
                self.line.extend_from_slice(&part[..keep]);
                self.dropped += part.len() - keep;
            }
            if ended {
                self.end_line(true);
            }
        }
    }

    fn end_line(&mut self, newline: bool) {
        let wanted = self.current_wanted();
        self.total += 1;
        self.open = false;
        if !wanted {
            return;
        }
        let line = std::mem::take(&mut self.line);
        let dropped = std::mem::replace(&mut self.dropped, 0);
        let rendered = render_line(line, dropped, newline);
        if !self.content.is_empty() && self.content.len() + rendered.len() > MAX_CONTENT_BYTES {
            self.full = true;
            return;
        }
        self.content.extend_from_slice(&rendered);
        self.last_returned = self.total;
    }

    fn finish(mut self) -> Output {
        if self.open {
            self.end_line(false);
        }
        // With nothing returned (offset past the end), nothing "remains after".
        let returned_upto = if self.last_returned == 0 {
            self.offset.saturating_sub(1)
        } else {
            self.last_returned
        };
        Output {
            content: String::from_utf8_lossy(&self.content).into_owned(),
            total_lines: self.total,
            truncated: self.total > returned_upto,
        }
    }
}

/// A kept line as returned: whole, or cut on a UTF-8 boundary with a
/// marker naming the bytes left out (its line ending, `newline`, kept).
fn render_line(mut line: Vec<u8>, dropped: usize, newline: bool) -> Vec<u8> {
    if dropped == 0 {
        return line;
    }
    // Cut before an incomplete UTF-8 sequence at the end of the kept part.
    let mut more = dropped;
    if let Err(e) = std::str::from_utf8(&line)
        && e.error_len().is_none()
    {
        more += line.len() - e.valid_up_to();
        line.truncate(e.valid_up_to());
    }
    // The dropped tail held the line ending, if there was one; it is not
    // counted as left out.
    let more = if newline { more - 1 } else { more };
    line.extend_from_slice(format!("… [line cut: {more} more bytes]").as_bytes());
    if newline {
        line.push(b'\n');
    }
    line
}

crate::register_tool!(ReadFile);

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &[u8], offset: usize, limit: usize, chunk: usize) -> Output {
        let mut l = Lines::new(offset, limit);
        for c in text.chunks(chunk.max(1)) {
            l.feed(c);
        }
        l.finish()
    }

    #[test]
    fn a_read_stopped_by_its_byte_budget_goes_on_where_it_stopped() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = tmp.path().join("lines.txt");
        let text: String = (0..40_000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, &text).unwrap_or_else(|e| panic!("{e}"));
        let stop = AtomicBool::new(false);
        let open = || std::fs::File::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let len = text.len() as u64;
        let mut scan = Scan::new(open(), len, &path, 39_990, 5);
        // The first round stops after its budget with the file unfinished.
        let first = scan.run(&stop, Some(64 * 1024));
        assert!(matches!(first, Ok(None)), "{first:?}");
        let out = scan.read_to_end(&stop).unwrap_or_else(|e| panic!("{e}"));
        let whole = Scan::new(open(), len, &path, 39_990, 5)
            .read_to_end(&stop)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            out.content,
            "line 39989\nline 39990\nline 39991\nline 39992\nline 39993\n"
        );
        assert_eq!((out.total_lines, out.truncated), (40_000, true));
        assert_eq!(
            (out.content, out.total_lines, out.truncated),
            (whole.content, whole.total_lines, whole.truncated)
        );
    }

    #[test]
    fn long_lines_are_cut_and_marked() {
        let mut text = vec![b'a'; MAX_LINE_BYTES + 10];
        text.extend_from_slice(b"\nnext\n");
        let out = run(&text, 1, 10, 999);
        assert_eq!(out.total_lines, 2);
        assert!(!out.truncated);
        let first = out.content.lines().next().unwrap_or_default();
        assert!(
            first.ends_with("… [line cut: 10 more bytes]"),
            "{first:.80}"
        );
        assert!(out.content.ends_with("\nnext\n"));
    }

    #[test]
    fn a_cut_never_splits_a_character() {
        let mut text = vec![b'a'; MAX_LINE_BYTES - 1];
        text.extend_from_slice("é".as_bytes());
        text.extend_from_slice(b"tail");
        let out = run(&text, 1, 1, 4096);
        assert!(!out.content.contains('\u{fffd}'));
        assert!(
            out.content.ends_with("… [line cut: 6 more bytes]"),
            "no newline was there"
        );
    }

    #[test]
    fn content_stops_at_the_cap_on_a_line_boundary() {
        let line = vec![b'x'; 1023];
        let mut text = Vec::new();
        for _ in 0..(MAX_CONTENT_BYTES / 1024 + 100) {
            text.extend_from_slice(&line);
            text.push(b'\n');
        }
        let out = run(&text, 1, 1_000_000, CHUNK);
        assert_eq!(out.content.len(), MAX_CONTENT_BYTES);
        assert!(out.truncated);
        assert_eq!(out.total_lines, MAX_CONTENT_BYTES / 1024 + 100);
    }

    proptest::proptest! {
        #[test]
        fn short_lines_page_exactly_as_before(
            lines in proptest::collection::vec("[a-z]{0,5}", 0..30),
            newline_at_end in proptest::bool::ANY,
            offset in 1usize..35,
            limit in 1usize..35,
            chunk in 1usize..9,
        ) {
            let mut text = lines.join("\n");
            if newline_at_end && !text.is_empty() {
                text.push('\n');
            }
            // The reference: read_until over the whole text.
            let all: Vec<&str> = text.split_inclusive('\n').collect();
            let want: String = all.iter().skip(offset - 1).take(limit).copied().collect();
            let out = run(text.as_bytes(), offset, limit, chunk);
            proptest::prop_assert_eq!(&out.content, &want);
            proptest::prop_assert_eq!(out.total_lines, all.len());
            proptest::prop_assert_eq!(out.truncated, all.len() >= offset + limit);
        }
    }
}
