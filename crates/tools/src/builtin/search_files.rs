//! `search_files`: ripgrep's engine (the `ignore` walker, `grep-searcher`,
//! `grep-regex`) searching file contents by regex, or file names by glob.
//!
//! The walk honours `.gitignore`, `.ignore` and `.git/info/exclude` (also
//! outside a git repository), skips hidden files and directories, never
//! follows symlinks, and visits entries in name order so that pages are
//! stable from one call to the next. Binary files (a NUL byte) are skipped.
//!
//! Memory is bounded whatever the tree holds: only the requested page keeps
//! line texts (each cut at [`MAX_LINE_BYTES`]); everything past it is only
//! counted. The search runs on a blocking thread and stops when the calling
//! cell is cancelled or its deadline passes.
//!
//! Only regular files are searched: the walk skips other entries, each file
//! is opened without blocking and checked with `fstat` (see
//! `fsutil::open_regular`), and a `path` that is a FIFO, socket, device or
//! `/proc/<pid>/fd` alias is refused.

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use grep_matcher::LineTerminator;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use ignore::WalkBuilder;
use ignore::overrides::{Override, OverrideBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::fsutil::{self, OpenError, StopOnDrop};
use crate::tool::{Tool, ToolContext, ToolError};

/// The most results one call returns, whatever `limit` asks for.
pub(crate) const MAX_LIMIT: usize = 500;
/// The most context lines shown on each side of a match.
pub(crate) const MAX_CONTEXT: usize = 20;
/// Longer lines are cut to this many bytes (on a character boundary).
pub(crate) const MAX_LINE_BYTES: usize = 1000;
/// A single line longer than this makes the file unsearchable (skipped).
const HEAP_LIMIT: usize = 32 * 1024 * 1024;

const OUT_OF_TIME: &str = "search_files: the cell's time ran out before the search finished; \
    narrow it with a more specific path or file_glob, or give the cell more time";

/// What `search_files` searches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(super) enum Target {
    /// Lines of file contents matching a regex.
    #[default]
    Content,
    /// File paths matching a glob.
    Files,
}

/// How content matches are reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(super) enum OutputMode {
    /// One result per matching line.
    #[default]
    Content,
    /// One result per file with at least one matching line.
    FilesWithMatches,
    /// One result per matching file, with its number of matching lines.
    Count,
}

fn default_path() -> String {
    ".".to_string()
}

fn default_limit() -> usize {
    50
}

/// Arguments of `search_files`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SearchFilesArgs {
    /// With target="content": a regular expression (Rust/ripgrep syntax, case-sensitive;
    /// prefix `(?i)` to ignore case) matched against each line. With target="files": a glob
    /// matched against file paths below `path`, as `rg --files -g` does (`*.py` matches at
    /// any depth, `src/**/*.rs` is anchored at `path`); a pattern without any of `*?[{`
    /// matches every file whose name contains it.
    pub pattern: String,
    /// "content" searches inside files; "files" lists files whose path matches `pattern`.
    #[serde(default)]
    pub target: Target,
    /// File or directory to search, relative to the working directory. Results are paths as
    /// `path` + the path below it, ready to pass to read_file.
    #[serde(default = "default_path")]
    pub path: String,
    /// Only search files matching this glob (e.g. `*.rs`, `src/**/*.{ts,tsx}`; `!*.min.js`
    /// excludes). .gitignore'd and hidden files stay skipped either way.
    #[serde(default)]
    pub file_glob: Option<String>,
    /// Results to return in this page (at most 500).
    #[serde(default = "default_limit")]
    pub limit: usize,
    /// Results to skip before the page starts; page on with offset += limit while
    /// `truncated` is true.
    #[serde(default)]
    pub offset: usize,
    /// With target="content": "content" gives {path, line, text} per matching line;
    /// "files_with_matches" gives {path} per matching file; "count" gives {path, count}.
    #[serde(default)]
    pub output_mode: OutputMode,
    /// Lines of context to show before and after each matching line (output_mode
    /// "content" only; at most 20).
    #[serde(default)]
    pub context: usize,
}

/// One result of `search_files`. Which fields are present depends on the
/// target and the output mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub(super) struct SearchMatch {
    /// The file, as the `path` argument plus the path below it.
    pub path: String,
    /// 1-based line number of the match (output_mode "content").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// The matching line without its line ending; lines over 1000 bytes are cut and end
    /// with "… [line cut]" (output_mode "content").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Lines just before the match, in order (when context > 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Vec<String>>,
    /// Lines just after the match, in order (when context > 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<String>>,
    /// Matching lines in the file (output_mode "count").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
}

/// The result of `search_files`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub(super) struct SearchFilesOutput {
    /// This page of results, in path order (then line order).
    pub matches: Vec<SearchMatch>,
    /// All results found: matching lines ("content"), matching files ("files_with_matches",
    /// "count") or matching paths (target "files").
    pub total: u64,
    /// True when results exist beyond this page (call again with a larger offset).
    pub truncated: bool,
}

/// Searches file contents (regex) or names (glob), honouring .gitignore.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct SearchFiles;

impl Tool for SearchFiles {
    const NAME: &'static str = "search_files";
    const DOC: &'static str = "Search file contents with a regex, or find files by name with a glob (ripgrep's engine).\n\
        Skips .gitignore'd, hidden and binary files. Results are paged: `total` counts all of \
        them, `matches` holds `offset`..`offset+limit`, `truncated` says more exist.";

    type Args = SearchFilesArgs;
    type Output = SearchFilesOutput;

    async fn call(
        &self,
        args: SearchFilesArgs,
        cx: &ToolContext,
    ) -> Result<SearchFilesOutput, ToolError> {
        if cx.cancelled().is_cancelled() {
            return Err(ToolError::Cancelled(Self::NAME));
        }
        if tokio::time::Instant::now() >= cx.deadline() {
            return Err(ToolError::failed(OUT_OF_TIME));
        }
        let root = cx.resolve(&args.path);
        cx.check_read(&root)?;
        let reads_contents = args.target == Target::Content;
        let stop = Arc::new(AtomicBool::new(false));
        // However this future ends (answer, deadline, cancellation, or the
        // rpc server dropping it), the search thread stops.
        let _guard = StopOnDrop(Arc::clone(&stop));
        let worker_stop = Arc::clone(&stop);
        let cwd = cx.cwd().to_path_buf();
        let handle = tokio::task::spawn_blocking(move || search(&args, &root, &cwd, &worker_stop));
        let outcome = tokio::select! {
            joined = handle => joined,
            () = cx.cancelled().cancelled() => {
                stop.store(true, Ordering::Relaxed);
                return Err(ToolError::Cancelled(Self::NAME));
            }
            () = tokio::time::sleep_until(cx.deadline()) => {
                stop.store(true, Ordering::Relaxed);
                return Err(ToolError::failed(OUT_OF_TIME));
            }
        };
        match outcome {
            Ok(mut result) => {
                // Nothing the calling kernel's sandbox hides (a hidden
                // directory inside the searched one).
                if let Ok(out) = &mut result
                    && cx.settings().sandbox.get().is_some()
                {
                    out.matches
                        .retain(|m| cx.check_read(&cx.resolve(&m.path)).is_ok());
                }
                // The files whose contents came back: the cell's reads.
                if let Ok(out) = &result
                    && reads_contents
                {
                    for m in &out.matches {
                        cx.note_read(&cx.resolve(&m.path));
                    }
                }
                result
            }
            Err(e) => Err(ToolError::failed(format!(
                "search_files: the search thread failed ({e}); this is a bug, please report it"
            ))),
        }
    }
}

crate::register_tool!(SearchFiles);

/// Runs a whole search on the current thread. `stop` is polled between
/// files and every few hundred lines.
pub(crate) fn search(
    args: &SearchFilesArgs,
    root: &Path,
    cwd: &Path,
    stop: &AtomicBool,
) -> Result<SearchFilesOutput, ToolError> {
    fsutil::check_host_path(root)
        .map_err(|e| ToolError::failed(e.message("search_files", "search", root)))?;
    let meta = std::fs::metadata(root).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            ToolError::failed(format!(
                "search_files: path `{}` does not exist (resolved to {}; relative paths are \
                 relative to the working directory {}); check the path or search from \".\"",
                args.path,
                root.display(),
                cwd.display()
            ))
        } else {
            ToolError::io("search", root, &e)
        }
    })?;
    if !meta.is_dir() && !meta.is_file() {
        return Err(ToolError::failed(
            OpenError::NotRegular(fsutil::kind_of(meta.file_type())).message(
                "search_files",
                "search",
                root,
            ),
        ));
    }
    let glob_root = if meta.is_dir() {
        root.to_path_buf()
    } else {
        root.parent().map_or_else(PathBuf::new, Path::to_path_buf)
    };
    let file_glob = match &args.file_glob {
        Some(g) if !g.trim().is_empty() => Some(build_glob(&glob_root, g.trim(), "file_glob")?),
        _ => None,
    };
    let mut page = Page::new(args.offset, args.limit.min(MAX_LIMIT));
    match args.target {
        Target::Files => {
            let pattern = args.pattern.trim();
            if pattern.is_empty() {
                return Err(ToolError::failed(
                    "search_files: target=\"files\" needs a glob in `pattern`, e.g. \"*.py\"",
                ));
            }
            let glob = if pattern.contains(['*', '?', '[', '{']) {
                pattern.to_string()
            } else {
                // Plain text: a name (or a path tail) containing it, at any depth.
                format!("**/*{pattern}*")
            };
            let name_glob = build_glob(&glob_root, &glob, "pattern")?;
            walk(args, root, stop, |path, display| {
                if name_glob.matched(path, false).is_whitelist()
                    && file_glob
                        .as_ref()
                        .is_none_or(|g| !g.matched(path, false).is_ignore())
                {
                    page.push(|| SearchMatch::path_only(display()));
                }
                Ok(())
            })?;
        }
        Target::Content => {
            // CRLF mode: `$` matches before `\r\n` too, as `rg --crlf`.
            let matcher = RegexMatcherBuilder::new()
                .crlf(true)
                .build(&args.pattern)
                .map_err(|e| {
                    ToolError::failed(format!(
                        "search_files: `pattern` is not a valid regex: {e}\nEscape characters \
                         such as ( ) [ ] {{ }} . * + ? | \\ with a backslash to match them \
                         literally."
                    ))
                })?;
            let context = args.context.min(MAX_CONTEXT);
            let mode = args.output_mode;
            let mut searcher = searcher_for(mode, context);
            walk(args, root, stop, |path, display| {
                if file_glob
                    .as_ref()
                    .is_some_and(|g| g.matched(path, false).is_ignore())
                {
                    return Ok(());
                }
                search_file(
                    &mut searcher,
                    &matcher,
                    path,
                    mode,
                    context,
                    &mut page,
                    stop,
                    display,
                );
                Ok(())
            })?;
        }
    }
    Ok(page.finish())
}

fn searcher_for(mode: OutputMode, context: usize) -> Searcher {
    let mut b = SearcherBuilder::new();
    b.line_terminator(LineTerminator::crlf())
        .binary_detection(BinaryDetection::quit(0))
        .heap_limit(Some(HEAP_LIMIT))
        .line_number(mode == OutputMode::Content);
    if mode == OutputMode::Content {
        b.before_context(context).after_context(context);
    }
    b.build()
}

/// A gitignore-style glob (as `rg -g`) rooted at `root`.
fn build_glob(root: &Path, glob: &str, arg: &str) -> Result<Override, ToolError> {
    let mut b = OverrideBuilder::new(root);
    b.add(glob)
        .and_then(|b| b.build())
        .map_err(|e| ToolError::failed(format!("search_files: `{arg}` is not a valid glob: {e}")))
}

/// Walks `root` as ripgrep does, calling `f(path, display)` for each file.
fn walk(
    args: &SearchFilesArgs,
    root: &Path,
    stop: &AtomicBool,
    mut f: impl FnMut(&Path, &dyn Fn() -> String) -> Result<(), ToolError>,
) -> Result<(), ToolError> {
    let shown_root = display_root(&args.path);
    let walker = WalkBuilder::new(root)
        .hidden(true)
        .parents(true)
        .ignore(true)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(true)
        .require_git(false)
        .follow_links(false)
        .sort_by_file_name(std::cmp::Ord::cmp)
        .build();
    for entry in walker {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                tracing::debug!(error = %e, "search_files: skipping an unreadable entry");
                continue;
            }
        };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        let display = || shown_path(&shown_root, root, path, &args.path);
        f(path, &display)?;
    }
    Ok(())
}

/// The prefix results are shown under: the `path` argument, or nothing for ".".
fn display_root(arg: &str) -> Option<PathBuf> {
    let trimmed = arg.trim_end_matches('/');
    if trimmed.is_empty() && arg.starts_with('/') {
        return Some(PathBuf::from("/"));
    }
    match trimmed {
        "" | "." => None,
        t => Some(PathBuf::from(t.strip_prefix("./").unwrap_or(t))),
    }
}

fn shown_path(shown_root: &Option<PathBuf>, root: &Path, path: &Path, arg: &str) -> String {
    let rel = path.strip_prefix(root).unwrap_or(path);
    let shown = match shown_root {
        // The root is the file itself: show it as given.
        Some(_) if rel.as_os_str().is_empty() => PathBuf::from(arg),
        Some(r) => r.join(rel),
        None if rel.as_os_str().is_empty() => path
            .file_name()
            .map_or_else(|| path.to_path_buf(), PathBuf::from),
        None => rel.to_path_buf(),
    };
    shown.to_string_lossy().into_owned()
}

impl SearchMatch {
    fn path_only(path: String) -> Self {
        Self {
            path,
            line: None,
            text: None,
            before: None,
            after: None,
            count: None,
        }
    }
}

/// The page being collected: results before `offset` and past
/// `offset + limit` are only counted.
struct Page {
    offset: u64,
    end: u64,
    total: u64,
    items: Vec<SearchMatch>,
}

impl Page {
    fn new(offset: usize, limit: usize) -> Self {
        let offset = offset as u64;
        Self {
            offset,
            end: offset.saturating_add(limit as u64),
            total: 0,
            items: Vec::new(),
        }
    }

    fn wants(&self, index: u64) -> bool {
        index >= self.offset && index < self.end
    }

    /// Counts one result, building it only when the page holds it.
    fn push(&mut self, make: impl FnOnce() -> SearchMatch) {
        if self.wants(self.total) {
            self.items.push(make());
        }
        self.total += 1;
    }

    fn finish(self) -> SearchFilesOutput {
        let shown = self.offset.saturating_add(self.items.len() as u64);
        SearchFilesOutput {
            truncated: self.total > shown,
            total: self.total,
            matches: self.items,
        }
    }
}

/// Searches one file and adds its results to `page` unless it is binary.
#[allow(clippy::too_many_arguments)]
fn search_file(
    searcher: &mut Searcher,
    matcher: &RegexMatcher,
    path: &Path,
    mode: OutputMode,
    context: usize,
    page: &mut Page,
    stop: &AtomicBool,
    display: &dyn Fn() -> String,
) {
    let mut sink = FileSink {
        first_index: page.total,
        offset: page.offset,
        end: page.end,
        mode,
        context,
        count: 0,
        items: Vec::new(),
        open: Vec::new(),
        recent: VecDeque::new(),
        binary: false,
        stop,
        ticks: 0,
        display,
        shown: None,
    };
    // Opened without blocking and checked to be a regular file: the walk saw
    // one, but it may have been swapped for a FIFO since.
    let file = match fsutil::open_regular(path) {
        Ok((file, _)) => file,
        Err(e) => {
            tracing::debug!(path = %path.display(), error = ?e, "search_files: skipping a file");
            return;
        }
    };
    if let Err(e) = searcher.search_file(matcher, &file, &mut sink) {
        tracing::debug!(path = %path.display(), error = %e, "search_files: skipping a file");
        return;
    }
    if sink.binary || sink.count == 0 {
        return;
    }
    match mode {
        OutputMode::Content => {
            page.total += sink.count;
            page.items.append(&mut sink.items);
        }
        OutputMode::FilesWithMatches => {
            let shown = sink.shown_path();
            page.push(|| SearchMatch::path_only(shown));
        }
        OutputMode::Count => {
            let count = sink.count;
            let shown = sink.shown_path();
            page.push(|| SearchMatch {
                count: Some(count),
                ..SearchMatch::path_only(shown)
            });
        }
    }
}

struct FileSink<'a> {
    /// Global index of this file's first matching line.
    first_index: u64,
    offset: u64,
    end: u64,
    mode: OutputMode,
    context: usize,
    /// Matching lines so far.
    count: u64,
    /// Page results from this file (content mode).
    items: Vec<SearchMatch>,
    /// Indexes into `items` still collecting `after` lines.
    open: Vec<usize>,
    /// The last `context` reported lines: (line number, text).
    recent: VecDeque<(u64, String)>,
    binary: bool,
    stop: &'a AtomicBool,
    ticks: u32,
    display: &'a dyn Fn() -> String,
    shown: Option<String>,
}

impl FileSink<'_> {
    fn shown_path(&mut self) -> String {
        if let Some(s) = &self.shown {
            return s.clone();
        }
        let s = (self.display)();
        self.shown = Some(s.clone());
        s
    }

    fn keep_going(&mut self) -> bool {
        self.ticks = self.ticks.wrapping_add(1);
        !(self.ticks.is_multiple_of(256) && self.stop.load(Ordering::Relaxed))
    }

    /// Feeds a reported line (match or context) to the matches waiting for
    /// `after` lines, and to the `before` window.
    fn saw_line(&mut self, line: u64, bytes: &[u8]) {
        if self.context == 0 {
            return;
        }
        if !self.open.is_empty() {
            let context = self.context as u64;
            let text = line_text(bytes);
            let items = &mut self.items;
            self.open.retain(|&i| {
                let Some(item) = items.get_mut(i) else {
                    return false;
                };
                let at = item.line.unwrap_or(0);
                if line > at && line <= at + context {
                    item.after.get_or_insert_with(Vec::new).push(text.clone());
                }
                line < at + context
            });
        }
        if self.any_page_item_possible() {
            self.recent.push_back((line, line_text(bytes)));
            while self.recent.len() > self.context {
                self.recent.pop_front();
            }
        }
    }

    /// Whether a later match of this file could still land in the page.
    fn any_page_item_possible(&self) -> bool {
        self.first_index + self.count < self.end
    }
}

impl Sink for FileSink<'_> {
    type Error = io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, io::Error> {
        match self.mode {
            OutputMode::FilesWithMatches => {
                self.count = 1;
                return Ok(false);
            }
            OutputMode::Count => {
                self.count += 1;
                return Ok(self.keep_going());
            }
            OutputMode::Content => {}
        }
        let line = mat.line_number().unwrap_or(0);
        let bytes = mat.bytes();
        let index = self.first_index + self.count;
        let in_page = index >= self.offset && index < self.end;
        // Lines after earlier matches first, so a match is never its own `after`.
        let item = in_page.then(|| {
            let before = (self.context > 0).then(|| {
                let from = line.saturating_sub(self.context as u64);
                self.recent
                    .iter()
                    .filter(|(n, _)| *n >= from && *n < line)
                    .map(|(_, t)| t.clone())
                    .collect::<Vec<_>>()
            });
            SearchMatch {
                line: Some(line),
                text: Some(line_text(bytes)),
                before,
                after: (self.context > 0).then(Vec::new),
                ..SearchMatch::path_only(self.shown_path())
            }
        });
        self.saw_line(line, bytes);
        if let Some(item) = item {
            self.items.push(item);
            if self.context > 0 {
                self.open.push(self.items.len() - 1);
            }
        }
        self.count += 1;
        Ok(self.keep_going())
    }

    fn context(&mut self, _: &Searcher, ctx: &SinkContext<'_>) -> Result<bool, io::Error> {
        let line = ctx.line_number().unwrap_or(0);
        self.saw_line(line, ctx.bytes());
        Ok(self.keep_going())
    }

    fn binary_data(&mut self, _: &Searcher, _offset: u64) -> Result<bool, io::Error> {
        self.binary = true;
        Ok(false)
    }
}

/// A reported line as text: line ending removed, invalid UTF-8 replaced,
/// cut at [`MAX_LINE_BYTES`].
fn line_text(bytes: &[u8]) -> String {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    if bytes.len() <= MAX_LINE_BYTES {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let mut cut = String::from_utf8_lossy(&bytes[..MAX_LINE_BYTES]).into_owned();
    // A cut inside a multi-byte character leaves one U+FFFD at the end; drop it.
    if cut.ends_with('\u{FFFD}') && std::str::from_utf8(&bytes[..MAX_LINE_BYTES]).is_err() {
        cut.pop();
    }
    cut.push_str("… [line cut]");
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_cut_on_a_char_boundary() {
        let line = "é".repeat(MAX_LINE_BYTES);
        let t = line_text(line.as_bytes());
        assert!(t.ends_with("… [line cut]"));
        assert!(!t.contains('\u{FFFD}'));
        assert!(t.len() <= MAX_LINE_BYTES + "… [line cut]".len());
        assert_eq!(line_text(b"abc\r\n"), "abc");
    }

    #[test]
    fn display_root_follows_the_argument() {
        assert_eq!(display_root("."), None);
        assert_eq!(display_root("./"), None);
        assert_eq!(display_root("src/"), Some(PathBuf::from("src")));
        assert_eq!(display_root("./src"), Some(PathBuf::from("src")));
        assert_eq!(display_root("/"), Some(PathBuf::from("/")));
    }

    #[test]
    fn page_counts_past_the_window() {
        let mut p = Page::new(2, 2);
        for i in 0..5 {
            p.push(|| SearchMatch::path_only(i.to_string()));
        }
        let out = p.finish();
        assert_eq!(out.total, 5);
        let paths: Vec<_> = out.matches.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(paths, ["2", "3"]);
        assert!(out.truncated);
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        fn args(mode: OutputMode, limit: usize, offset: usize, context: usize) -> SearchFilesArgs {
            SearchFilesArgs {
                pattern: "hit".into(),
                target: Target::Content,
                path: ".".into(),
                file_glob: None,
                limit,
                offset,
                output_mode: mode,
                context,
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]

            /// Any page of any tree is the matching slice of the full,
            /// independently computed list, context lines included.
            #[test]
            fn pages_and_context_agree_with_a_plain_scan(
                files in prop::collection::vec(
                    prop::collection::vec(prop_oneof![Just("hit"), Just("miss"), Just("")], 0..12),
                    1..5,
                ),
                limit in 0usize..6,
                offset in 0usize..12,
                context in 0usize..4,
            ) {
                let dir = tempfile::tempdir().unwrap();
                let mut want = Vec::new();
                for (f, lines) in files.iter().enumerate() {
                    let name = format!("f{f}.txt");
                    let numbered: Vec<String> =
                        lines.iter().enumerate().map(|(i, l)| format!("{l} {i}")).collect();
                    std::fs::write(dir.path().join(&name), numbered.join("\n")).unwrap();
                    for (i, l) in lines.iter().enumerate() {
                        if *l == "hit" {
                            let lo = i.saturating_sub(context);
                            let hi = (i + 1 + context).min(lines.len());
                            want.push(SearchMatch {
                                line: Some(i as u64 + 1),
                                text: Some(numbered[i].clone()),
                                before: (context > 0).then(|| numbered[lo..i].to_vec()),
                                after: (context > 0).then(|| numbered[i + 1..hi].to_vec()),
                                ..SearchMatch::path_only(name.clone())
                            });
                        }
                    }
                }
                let stop = AtomicBool::new(false);
                let a = args(OutputMode::Content, limit, offset, context);
                let got = search(&a, dir.path(), dir.path(), &stop).unwrap();
                let page: Vec<SearchMatch> =
                    want.iter().skip(offset).take(limit).cloned().collect();
                prop_assert_eq!(got.total, want.len() as u64);
                prop_assert_eq!(got.truncated, offset + page.len() < want.len());
                prop_assert_eq!(got.matches, page);

                // count mode: one entry per matching file, paged the same way.
                let a = args(OutputMode::Count, limit, offset, 0);
                let got = search(&a, dir.path(), dir.path(), &stop).unwrap();
                let mut per_file: Vec<SearchMatch> = Vec::new();
                for m in &want {
                    match per_file.last_mut() {
                        Some(last) if last.path == m.path => {
                            last.count = last.count.map(|c| c + 1);
                        }
                        _ => per_file.push(SearchMatch {
                            count: Some(1),
                            ..SearchMatch::path_only(m.path.clone())
                        }),
                    }
                }
                prop_assert_eq!(got.total, per_file.len() as u64);
                prop_assert_eq!(
                    got.matches,
                    per_file.into_iter().skip(offset).take(limit).collect::<Vec<_>>()
                );
            }
        }
    }
}
