//! `patch`: targeted edits of text files.
//!
//! Two modes. *replace*: `old_string` → `new_string` in one file, where
//! `old_string` must occur exactly once unless `replace_all` (errors give the
//! count and line numbers of the matches, or where a whitespace-insensitive
//! match is). *patch*: a V4A multi-file patch (the `*** Begin Patch` format)
//! applied all-or-nothing: every file is parsed, read and patched in memory
//! first, and written (atomically, temp file + rename) only when all of them
//! succeeded; if a write still fails, the files already written are restored.
//!
//! Line endings are kept: a CRLF file stays CRLF even when the strings or
//! the patch use `\n`. Both modes return a unified diff of what changed.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use similar::TextDiff;

use std::io::Read as _;

use crate::fsutil::{
    OpenError, StopOnDrop, check_host_path, check_write_target, open_regular, write_atomic,
};
use crate::tool::{Tool, ToolContext, ToolError};

/// Files larger than this are refused (they are read whole into memory).
pub(crate) const MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;
/// Whitespace-insensitive suggestions are only searched for in files up to
/// this size.
const MAX_FUZZY_BYTES: usize = 4 * 1024 * 1024;
/// The most match line numbers an ambiguity error lists.
const MAX_LISTED_LINES: usize = 20;

/// How `patch` edits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(super) enum PatchMode {
    /// Replace `old_string` with `new_string` in `path`.
    #[default]
    Replace,
    /// Apply a V4A multi-file patch given in `patch`.
    Patch,
}

/// Arguments of `patch`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PatchArgs {
    /// mode="replace": the file to edit, relative to the working directory.
    #[serde(default)]
    pub path: Option<String>,
    /// mode="replace": the exact text to replace, whitespace and indentation included; it
    /// must occur exactly once in the file unless replace_all=True (add surrounding lines to
    /// make it unique).
    #[serde(default)]
    pub old_string: Option<String>,
    /// mode="replace": the text to put in its place ("" deletes it).
    #[serde(default)]
    pub new_string: Option<String>,
    /// mode="replace": replace every occurrence of old_string instead of requiring exactly one.
    #[serde(default)]
    pub replace_all: bool,
    /// "replace" edits one file with old_string/new_string; "patch" applies the V4A patch
    /// given in `patch` to any number of files, all-or-nothing.
    #[serde(default)]
    pub mode: PatchMode,
    /// mode="patch": the patch text. Format: "*** Begin Patch", then per file one of
    /// "*** Add File: p" (+ every line prefixed "+"), "*** Delete File: p", or "*** Update
    /// File: p" (optionally followed by "*** Move to: q") with hunks: optional "@@ <line that
    /// comes before the change, e.g. a def or class>" anchors, then lines prefixed " "
    /// (context, about 3 before and after), "-" (remove) or "+" (add), and "*** End of File"
    /// when a hunk ends at the end of the file; finally "*** End Patch".
    #[serde(default)]
    pub patch: Option<String>,
}

/// The result of `patch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub(super) struct PatchOutput {
    /// Paths written, created, deleted or moved (both paths of a move), as given.
    pub files_changed: Vec<String>,
    /// mode="replace": occurrences replaced; mode="patch": hunks applied plus files added or
    /// deleted.
    pub replacements: u64,
    /// Unified diff of every change (long diffs are cut in the middle).
    pub diff: String,
}

/// Edits files: one unique string replacement, or a V4A multi-file patch.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Patch;

impl Tool for Patch {
    const NAME: &'static str = "patch";
    const DOC: &'static str = "Edit text files: replace a unique string in one file, or apply a multi-file V4A patch all-or-nothing.\n\
        Returns the paths changed, the number of replacements and a unified diff. Nothing is \
        written when any part fails; files keep their line endings (CRLF stays CRLF). Only \
        regular files of at most 32 MiB are edited (pipes, sockets, devices and /proc/<pid>/fd \
        paths are refused).";

    type Args = PatchArgs;
    type Output = PatchOutput;

    async fn call(&self, args: PatchArgs, cx: &ToolContext) -> Result<PatchOutput, ToolError> {
        let max_diff = cx.settings().max_output_bytes;
        let cwd = cx.cwd().to_path_buf();
        let resolve = {
            let cx = cx.clone();
            // Every file an edit touches must be writable for the calling
            // kernel (its sandbox, when it has one).
            move |p: &str| {
                let path = cx.resolve(p);
                cx.check_write(&path)?;
                Ok(path)
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        // However this future ends (answer, deadline, cancellation, or the
        // rpc server dropping it), an edit not yet written never is.
        let _guard = StopOnDrop(Arc::clone(&stop));
        let worker_stop = Arc::clone(&stop);
        let work = tokio::task::spawn_blocking(move || match args.mode {
            PatchMode::Replace => replace_mode(&args, &resolve, &cwd, max_diff, &worker_stop),
            PatchMode::Patch => patch_mode(&args, &resolve, &cwd, max_diff, &worker_stop),
        });
        let out = tokio::select! {
            joined = work => joined.unwrap_or_else(|e| Err(ToolError::failed(format!(
                "patch: the edit thread failed ({e}); check the files with read_file before retrying"
            )))),
            // Files are read and patched in memory first and written only if
            // the call is still wanted; a write already under way finishes
            // (all-or-nothing), but the caller is told at once.
            () = cx.cancelled().cancelled() => Err(ToolError::Cancelled(Self::NAME)),
            () = tokio::time::sleep_until(cx.deadline()) => Err(ToolError::failed(
                "patch: the cell's time ran out during the edit; check the files with read_file \
                 before retrying (an edit is written whole or not at all)"
            )),
        };
        // The files it edited (read, then written) are the cell's reads.
        if let Ok(o) = &out {
            for f in &o.files_changed {
                let path = cx.resolve(f);
                if path.is_file() {
                    cx.note_read(&path);
                }
            }
        }
        out
    }
}

crate::register_tool!(Patch);

// ---------------------------------------------------------------------------
// Shared helpers

/// Reads a text file for editing: it must exist, be a regular file (see
/// `fsutil::open_regular`), be at most [`MAX_FILE_BYTES`] and be UTF-8.
fn read_text(path: &Path, shown: &str, cwd: &Path) -> Result<String, ToolError> {
    let (file, meta) = open_regular(path).map_err(|e| match e {
        OpenError::Io(e) if e.kind() == std::io::ErrorKind::NotFound => ToolError::failed(format!(
            "patch: `{shown}` does not exist (resolved to {}; relative paths are relative to \
                 the working directory {}); create new files with write_file or \"*** Add File:\"",
            path.display(),
            cwd.display()
        )),
        OpenError::Dir => ToolError::failed(format!(
            "patch: `{shown}` is a directory; give the path of a file"
        )),
        other => ToolError::failed(other.message("patch", "read", path)),
    })?;
    let too_big = |len: u64| {
        ToolError::failed(format!(
            "patch: `{shown}` is {len} bytes, over the {MAX_FILE_BYTES}-byte limit of this tool; \
             edit it with a script instead"
        ))
    };
    if meta.len() > MAX_FILE_BYTES {
        return Err(too_big(meta.len()));
    }
    // Bounded even if the file grows after the size check.
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ToolError::io("read", path, &e))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(too_big(bytes.len() as u64));
    }
    match String::from_utf8(bytes) {
        Ok(text) => Ok(text),
        Err(_) => Err(ToolError::failed(format!(
            "patch: `{shown}` is not UTF-8 text (binary or another encoding); patch edits text \
             files only"
        ))),
    }
}

/// Fails (before anything is written) when the call is no longer wanted:
/// its cell ended, ran out of time, or the call was dropped.
fn still_wanted(stop: &AtomicBool) -> Result<(), ToolError> {
    if stop.load(Ordering::Relaxed) {
        return Err(ToolError::failed(
            "patch: the cell ended before the edit was written. Nothing was changed.",
        ));
    }
    Ok(())
}

/// Refuses to create, replace or move onto `path` unless it is missing or
/// a regular file (see `fsutil::check_write_target`).
fn check_target(path: &Path, shown: &str) -> Result<(), ToolError> {
    check_write_target(path).map_err(|e| match e {
        OpenError::Dir => ToolError::failed(format!(
            "patch: `{shown}` is a directory; give the path of a file. Nothing was changed."
        )),
        other => ToolError::failed(format!(
            "{} Nothing was changed.",
            other.message("patch", "write", path)
        )),
    })
}

/// The file an in-place edit writes: a symlink's target, so that the link
/// survives the atomic rename. A link into a process's descriptors
/// (`/proc/<pid>/fd/N`) is refused before it is resolved: resolving it
/// would name whatever file that descriptor has open.
fn edit_target(path: PathBuf) -> Result<PathBuf, ToolError> {
    check_host_path(&path).map_err(|e| ToolError::failed(e.message("patch", "edit", &path)))?;
    Ok(match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(&path).unwrap_or(path),
        _ => path,
    })
}

fn uses_crlf(text: &str) -> bool {
    memchr::memmem::find(text.as_bytes(), b"\r\n").is_some()
}

/// `text` with CRLF line endings as LF (borrowed when there are none).
fn lf(text: &str) -> Cow<'_, str> {
    if memchr::memchr(b'\r', text.as_bytes()).is_some() {
        Cow::Owned(text.replace("\r\n", "\n"))
    } else {
        Cow::Borrowed(text)
    }
}

/// 1-based line number of byte offset `at`.
fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Lines of context around each change in diffs.
const DIFF_CONTEXT: usize = 3;

/// A unified diff of `old` → `new` (line endings shown as `\n`).
///
/// Only the changed region (plus context) is handed to the diff algorithm,
/// so a small edit of a large file costs little; hunk headers are shifted
/// back to the file's line numbers.
fn unified(old: &str, new: &str, from: &str, to: &str) -> String {
    let (old, new) = (lf(old), lf(new));
    let (skipped, o, n) = diff_window(&old, &new);
    let text = full_diff(o, n, from, to);
    if skipped == 0 {
        text
    } else {
        shift_hunk_headers(&text, skipped)
    }
}

fn full_diff(old: &str, new: &str, from: &str, to: &str) -> String {
    let diff = TextDiff::configure()
        .timeout(Duration::from_secs(2))
        .diff_lines(old, new);
    diff.unified_diff()
        .context_radius(DIFF_CONTEXT)
        .header(from, to)
        .to_string()
}

/// The part of `old` and `new` that differs, widened to whole lines plus
/// [`DIFF_CONTEXT`] lines each side, and the number of lines before it.
fn diff_window<'a>(old: &'a str, new: &'a str) -> (usize, &'a str, &'a str) {
    let (ob, nb) = (old.as_bytes(), new.as_bytes());
    let prefix = ob.iter().zip(nb).take_while(|(a, b)| a == b).count();
    let line_start = |end: usize| {
        ob[..end]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1)
    };
    let mut start = line_start(prefix);
    for _ in 0..DIFF_CONTEXT {
        if start == 0 {
            break;
        }
        start = line_start(start - 1);
    }
    let skipped = ob[..start].iter().filter(|&&b| b == b'\n').count();
    // The common suffix of what is left, cut to whole lines (the bytes
    // after its first newline), keeping DIFF_CONTEXT lines of it.
    let room = (ob.len() - start).min(nb.len() - start);
    let suffix = ob
        .iter()
        .rev()
        .zip(nb.iter().rev())
        .take(room)
        .take_while(|(a, b)| a == b)
        .count();
    let tail = &ob[ob.len() - suffix..];
    let mut keep = match tail.iter().position(|&b| b == b'\n') {
        Some(i) => i + 1,
        None => suffix,
    };
    for _ in 0..DIFF_CONTEXT {
        match tail[keep..].iter().position(|&b| b == b'\n') {
            Some(i) => keep += i + 1,
            None => {
                keep = suffix;
                break;
            }
        }
    }
    let cut = suffix - keep;
    // Every boundary is just after a newline or at an end: char boundaries.
    match (
        old.get(start..old.len() - cut),
        new.get(start..new.len() - cut),
    ) {
        (Some(o), Some(n)) => (skipped, o, n),
        _ => (0, old, new),
    }
}

/// Adds `by` to the line numbers of every `@@ -a,b +c,d @@` header.
fn shift_hunk_headers(diff: &str, by: usize) -> String {
    let shift = |range: &str| -> Option<String> {
        let (start, len) = match range.split_once(',') {
            Some((s, l)) => (s.parse::<usize>().ok()?, Some(l)),
            None => (range.parse::<usize>().ok()?, None),
        };
        Some(match len {
            Some(l) => format!("{},{l}", start + by),
            None => format!("{}", start + by),
        })
    };
    let mut out = String::with_capacity(diff.len() + 64);
    for line in diff.split_inclusive('\n') {
        let header = line
            .strip_prefix("@@ -")
            .and_then(|rest| rest.strip_suffix(" @@\n"))
            .and_then(|ranges| ranges.split_once(" +"))
            .and_then(|(a, b)| Some(format!("@@ -{} +{} @@\n", shift(a)?, shift(b)?)));
        match header {
            Some(h) => out.push_str(&h),
            None => out.push_str(line),
        }
    }
    out
}

/// Cuts `diff` to about `max` bytes, keeping head and tail.
fn cap_diff(diff: String, max: usize) -> String {
    if diff.len() <= max || max == 0 {
        return diff;
    }
    let head_len = floor_char(&diff, max * 2 / 5);
    let tail_start = ceil_char(&diff, diff.len() - (max - max * 2 / 5));
    let omitted = tail_start - head_len;
    format!(
        "{}\n... [diff cut: {omitted} bytes omitted; read the files to see the rest] ...\n{}",
        &diff[..head_len],
        &diff[tail_start..]
    )
}

fn floor_char(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

// ---------------------------------------------------------------------------
// Replace mode

fn replace_mode(
    args: &PatchArgs,
    resolve: &dyn Fn(&str) -> Result<PathBuf, ToolError>,
    cwd: &Path,
    max_diff: usize,
    stop: &AtomicBool,
) -> Result<PatchOutput, ToolError> {
    let mut missing = Vec::new();
    if args.path.is_none() {
        missing.push("path");
    }
    if args.old_string.is_none() {
        missing.push("old_string");
    }
    if args.new_string.is_none() {
        missing.push("new_string");
    }
    if !missing.is_empty() {
        let hint = if args.patch.is_some() {
            " You gave `patch`: to apply a V4A patch pass mode=\"patch\"."
        } else {
            ""
        };
        return Err(ToolError::failed(format!(
            "patch: mode=\"replace\" needs path, old_string and new_string; missing: {}.{hint}",
            missing.join(", ")
        )));
    }
    let (Some(shown), Some(old_arg), Some(new_arg)) =
        (&args.path, &args.old_string, &args.new_string)
    else {
        return Err(ToolError::failed("patch: missing arguments"));
    };
    if old_arg.is_empty() {
        return Err(ToolError::failed(
            "patch: old_string is empty; give the exact text to replace (to create or overwrite \
             a whole file use write_file)",
        ));
    }
    if old_arg == new_arg {
        return Err(ToolError::failed(
            "patch: old_string and new_string are identical; nothing would change",
        ));
    }
    let path = edit_target(resolve(shown)?)?;
    let text = read_text(&path, shown, cwd)?;
    // A CRLF file edited with \n strings: match and write CRLF.
    let (old, new) = if uses_crlf(&text) && !old_arg.contains('\r') {
        (
            old_arg.replace('\n', "\r\n"),
            if new_arg.contains('\r') {
                new_arg.clone()
            } else {
                new_arg.replace('\n', "\r\n")
            },
        )
    } else {
        (old_arg.clone(), new_arg.clone())
    };
    let starts: Vec<usize> = memchr::memmem::find_iter(text.as_bytes(), old.as_bytes()).collect();
    if starts.is_empty() {
        return Err(ToolError::failed(not_found_message(shown, &text, old_arg)));
    }
    if starts.len() > 1 && !args.replace_all {
        let mut lines: Vec<String> = starts
            .iter()
            .take(MAX_LISTED_LINES)
            .map(|&s| line_of(&text, s).to_string())
            .collect();
        if starts.len() > MAX_LISTED_LINES {
            lines.push("…".into());
        }
        return Err(ToolError::failed(format!(
            "patch: old_string occurs {} times in `{shown}` (at lines {}); it must be unique. \
             Include more surrounding lines in old_string to pick one, or pass replace_all=True \
             to replace them all. Nothing was changed.",
            starts.len(),
            lines.join(", ")
        )));
    }
    let mut updated = String::with_capacity(text.len() + starts.len() * new.len());
    let mut from = 0;
    for &at in &starts {
        updated.push_str(&text[from..at]);
        updated.push_str(&new);
        from = at + old.len();
    }
    updated.push_str(&text[from..]);
    still_wanted(stop)?;
    write_atomic(&path, updated.as_bytes()).map_err(|e| ToolError::io("write", &path, &e))?;
    let diff = unified(
        &text,
        &updated,
        &format!("a/{shown}"),
        &format!("b/{shown}"),
    );
    Ok(PatchOutput {
        files_changed: vec![shown.clone()],
        replacements: starts.len() as u64,
        diff: cap_diff(diff, max_diff),
    })
}

/// Why `needle` was not found, with where a whitespace-insensitive match is.
fn not_found_message(shown: &str, text: &str, needle: &str) -> String {
    let mut msg = format!("patch: old_string was not found in `{shown}`. Nothing was changed.");
    if text.len() <= MAX_FUZZY_BYTES
        && let Some((start, end)) = find_ignoring_whitespace(text, needle)
    {
        let first = line_of(text, start);
        let last = line_of(text, end.saturating_sub(1).max(start));
        let snippet: String = text
            .lines()
            .skip(first - 1)
            .take((last - first + 1).min(40))
            .collect::<Vec<_>>()
            .join("\n");
        let snippet = if snippet.len() > 4000 {
            format!("{}…", &snippet[..floor_char(&snippet, 4000)])
        } else {
            snippet
        };
        let where_ = if first == last {
            format!("line {first}")
        } else {
            format!("lines {first}-{last}")
        };
        let _ = write!(
            msg,
            " A match that differs only in whitespace (indentation, line breaks) is at {where_}; \
             the file has there:\n{snippet}\nCopy old_string exactly from the file (read_file \
             shows it) and retry."
        );
    } else {
        msg.push_str(
            " Read the file with read_file and copy old_string exactly, whitespace and \
             indentation included.",
        );
    }
    msg
}

/// Finds `needle` in `text` with every run of whitespace treated as one
/// space (and the needle's ends trimmed); returns the byte range in `text`.
fn find_ignoring_whitespace(text: &str, needle: &str) -> Option<(usize, usize)> {
    let (hay, map) = collapse_whitespace(text);
    let (pin, _) = collapse_whitespace(needle.trim());
    if pin.is_empty() {
        return None;
    }
    let at = hay.find(&pin)?;
    let start = *map.get(at)?;
    let last = at + pin.len() - 1;
    let end = map.get(last).map_or(text.len(), |&o| {
        o + text[o..].chars().next().map_or(1, char::len_utf8)
    });
    Some((start, end))
}

/// `text` with whitespace runs as single spaces, and for each byte of the
/// result the byte offset in `text` it came from.
fn collapse_whitespace(text: &str) -> (String, Vec<usize>) {
    let mut out = String::with_capacity(text.len());
    let mut map = Vec::with_capacity(text.len());
    let mut in_ws = false;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            if !in_ws {
                out.push(' ');
                map.push(i);
            }
            in_ws = true;
        } else {
            in_ws = false;
            out.push(c);
            map.extend(std::iter::repeat_n(i, c.len_utf8()));
        }
    }
    (out, map)
}

// ---------------------------------------------------------------------------
// Patch mode: parsing

/// One operation of a V4A patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    /// `*** Add File:` with its lines.
    Add {
        path: String,
        line: usize,
        lines: Vec<String>,
    },
    /// `*** Delete File:`.
    Delete { path: String, line: usize },
    /// `*** Update File:` with an optional move and its hunks.
    Update {
        path: String,
        line: usize,
        move_to: Option<String>,
        hunks: Vec<Hunk>,
    },
}

/// One hunk of an update.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Hunk {
    /// Patch line where the hunk starts.
    pub line: usize,
    /// `@@` anchors, outermost first.
    pub anchors: Vec<String>,
    /// The body.
    pub lines: Vec<HunkLine>,
    /// `*** End of File` closed it: it must match at the end.
    pub eof: bool,
}

/// One body line of a hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HunkLine {
    Context(String),
    Remove(String),
    Add(String),
}

impl Hunk {
    fn old_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                HunkLine::Context(s) | HunkLine::Remove(s) => Some(s.as_str()),
                HunkLine::Add(_) => None,
            })
            .collect()
    }

    fn is_empty(&self) -> bool {
        self.anchors.is_empty() && self.lines.is_empty()
    }
}

fn malformed(line: usize, what: impl std::fmt::Display) -> ToolError {
    ToolError::failed(format!(
        "patch: malformed patch at line {line}: {what}. Nothing was changed."
    ))
}

fn header_path(rest: &str, line: usize, header: &str) -> Result<String, ToolError> {
    let p = rest.trim();
    if p.is_empty() {
        return Err(malformed(
            line,
            format!("`{header}` needs a file path after it"),
        ));
    }
    Ok(p.to_string())
}

/// Text of an `@@` anchor, or None for a bare `@@` or a unified-diff range
/// header such as `@@ -1,3 +1,4 @@`.
fn anchor_text(rest: &str) -> Option<String> {
    let t = rest.trim();
    let t = t.strip_suffix("@@").map_or(t, str::trim_end);
    if t.is_empty() {
        return None;
    }
    let is_range = |s: &str, sign: char| {
        s.strip_prefix(sign).is_some_and(|n| {
            !n.is_empty()
                && n.split(',')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
    };
    let mut parts = t.split_whitespace();
    if let (Some(a), Some(b), None) = (parts.next(), parts.next(), parts.next())
        && is_range(a, '-')
        && is_range(b, '+')
    {
        return None;
    }
    Some(
        rest.trim_start()
            .strip_suffix("@@")
            .map_or(rest.trim_start(), str::trim_end)
            .to_string(),
    )
}

/// Parses a V4A patch. Errors name the patch line and what was expected.
pub(crate) fn parse_patch(text: &str) -> Result<Vec<Op>, ToolError> {
    let lines: Vec<(usize, &str)> = text
        .split('\n')
        .enumerate()
        .map(|(i, l)| (i + 1, l.strip_suffix('\r').unwrap_or(l)))
        .collect();
    let mut i = 0;
    while i < lines.len() && lines[i].1.trim().is_empty() {
        i += 1;
    }
    match lines.get(i) {
        Some((_, l)) if l.trim() == "*** Begin Patch" => i += 1,
        Some((n, l)) => {
            return Err(malformed(
                *n,
                format!("expected `*** Begin Patch`, found `{}`", clip(l)),
            ));
        }
        None => {
            return Err(malformed(
                1,
                "the patch is empty; expected `*** Begin Patch`",
            ));
        }
    }
    let mut ops = Vec::new();
    loop {
        let Some(&(n, l)) = lines.get(i) else {
            let last = lines.last().map_or(1, |(n, _)| *n);
            return Err(malformed(
                last,
                "the patch ended without `*** End Patch` (was it cut off?)",
            ));
        };
        let t = l.trim_end();
        if t.trim_start() == "*** End Patch" {
            i += 1;
            break;
        }
        if let Some(rest) = t.strip_prefix("*** Add File:") {
            let path = header_path(rest, n, "*** Add File:")?;
            i += 1;
            let body = parse_add_body(&lines, &mut i, &path)?;
            ops.push(Op::Add {
                path,
                line: n,
                lines: body,
            });
        } else if let Some(rest) = t.strip_prefix("*** Delete File:") {
            let path = header_path(rest, n, "*** Delete File:")?;
            ops.push(Op::Delete { path, line: n });
            i += 1;
        } else if let Some(rest) = t.strip_prefix("*** Update File:") {
            let path = header_path(rest, n, "*** Update File:")?;
            i += 1;
            ops.push(parse_update(&lines, &mut i, n, path)?);
        } else if t.trim().is_empty() {
            i += 1;
        } else {
            return Err(malformed(
                n,
                format!(
                    "expected `*** Add File: <path>`, `*** Delete File: <path>`, `*** Update File: \
                     <path>` or `*** End Patch`, found `{}`",
                    clip(l)
                ),
            ));
        }
    }
    if let Some(&(n, l)) = lines[i.min(lines.len())..]
        .iter()
        .find(|(_, l)| !l.trim().is_empty())
    {
        return Err(malformed(
            n,
            format!("unexpected text after `*** End Patch`: `{}`", clip(l)),
        ));
    }
    if ops.is_empty() {
        return Err(malformed(1, "the patch has no file operations"));
    }
    Ok(ops)
}

/// The `+` lines of an `*** Add File:` section, from `lines[*i]` to the
/// next `*** ` header.
fn parse_add_body(
    lines: &[(usize, &str)],
    i: &mut usize,
    path: &str,
) -> Result<Vec<String>, ToolError> {
    let mut body = Vec::new();
    while let Some(&(bn, bl)) = lines.get(*i) {
        if bl.starts_with("*** ") {
            break;
        }
        match bl.strip_prefix('+') {
            Some(content) => body.push(content.to_string()),
            None => {
                return Err(malformed(
                    bn,
                    format!(
                        "every line of `*** Add File: {path}` must start with `+` (a blank \
                         line is a lone `+`), found `{}`",
                        clip(bl)
                    ),
                ));
            }
        }
        *i += 1;
    }
    Ok(body)
}

/// The `*** Update File:` section at line `n`, from `lines[*i]` (after its
/// header) to the next `*** ` header: an optional `*** Move to:` and the
/// hunks.
fn parse_update(
    lines: &[(usize, &str)],
    i: &mut usize,
    n: usize,
    path: String,
) -> Result<Op, ToolError> {
    let mut move_to = None;
    if let Some(&(mn, ml)) = lines.get(*i)
        && let Some(rest) = ml.trim_end().strip_prefix("*** Move to:")
    {
        move_to = Some(header_path(rest, mn, "*** Move to:")?);
        *i += 1;
    }
    let mut hunks: Vec<Hunk> = Vec::new();
    let mut cur = Hunk {
        line: lines.get(*i).map_or(n, |x| x.0),
        ..Hunk::default()
    };
    while let Some(&(bn, bl)) = lines.get(*i) {
        if bl.trim_end() == "*** End of File" {
            if cur.lines.is_empty() {
                return Err(malformed(
                    bn,
                    "`*** End of File` must follow the lines of a hunk",
                ));
            }
            cur.eof = true;
            hunks.push(std::mem::take(&mut cur));
            *i += 1;
            cur.line = lines.get(*i).map_or(bn, |x| x.0);
            continue;
        }
        if bl.starts_with("*** ") {
            break;
        }
        if let Some(rest) = bl.strip_prefix("@@") {
            if !cur.lines.is_empty() {
                hunks.push(std::mem::take(&mut cur));
            }
            if cur.anchors.is_empty() {
                cur.line = bn;
            }
            if let Some(a) = anchor_text(rest) {
                cur.anchors.push(a);
            }
            *i += 1;
            continue;
        }
        let body = if let Some(s) = bl.strip_prefix(' ') {
            HunkLine::Context(s.to_string())
        } else if let Some(s) = bl.strip_prefix('-') {
            HunkLine::Remove(s.to_string())
        } else if let Some(s) = bl.strip_prefix('+') {
            HunkLine::Add(s.to_string())
        } else if bl.is_empty() {
            // An empty line in a hunk is an empty context line.
            HunkLine::Context(String::new())
        } else {
            return Err(malformed(
                bn,
                format!(
                    "in `*** Update File: {path}` expected a hunk line starting with ` ` \
                     (context), `-` (remove), `+` (add), an `@@` anchor, `*** End of \
                     File` or the next `*** ` header; found `{}`",
                    clip(bl)
                ),
            ));
        };
        if cur.lines.is_empty() && cur.anchors.is_empty() {
            cur.line = bn;
        }
        cur.lines.push(body);
        *i += 1;
    }
    // Trailing blank lines before the next header are separators, not context.
    while matches!(cur.lines.last(), Some(HunkLine::Context(s)) if s.is_empty()) {
        cur.lines.pop();
    }
    if !cur.is_empty() {
        if cur.lines.is_empty() {
            return Err(malformed(
                cur.line,
                format!("the `@@` anchor in `*** Update File: {path}` has no hunk lines after it"),
            ));
        }
        hunks.push(cur);
    }
    if hunks.is_empty() && move_to.is_none() {
        return Err(malformed(
            n,
            format!("`*** Update File: {path}` has no hunks; expected `@@` or ` `/`-`/`+` lines"),
        ));
    }
    Ok(Op::Update {
        path,
        line: n,
        move_to,
        hunks,
    })
}

fn clip(s: &str) -> String {
    if s.len() <= 120 {
        s.to_string()
    } else {
        format!("{}…", &s[..floor_char(s, 120)])
    }
}

// ---------------------------------------------------------------------------
// Patch mode: applying

/// A file's lines without terminators, and how to put them back.
struct Lines {
    lines: Vec<String>,
    eol: &'static str,
    trailing_newline: bool,
}

impl Lines {
    fn parse(text: &str) -> Self {
        let eol = if uses_crlf(text) { "\r\n" } else { "\n" };
        let trailing_newline = text.ends_with('\n');
        let body = text.strip_suffix('\n').unwrap_or(text);
        let lines = if text.is_empty() {
            Vec::new()
        } else {
            body.split('\n')
                .map(|l| l.strip_suffix('\r').unwrap_or(l).to_string())
                .collect()
        };
        Self {
            lines,
            eol,
            trailing_newline,
        }
    }

    fn render(&self) -> String {
        let mut s = self.lines.join(self.eol);
        if !self.lines.is_empty() && self.trailing_newline {
            s.push_str(self.eol);
        }
        s
    }
}

/// Normalizations tried in order when matching hunk lines to file lines.
const PASSES: [fn(&str) -> String; 4] = [
    |s| s.to_string(),
    |s| s.trim_end().to_string(),
    |s| s.trim().to_string(),
    |s| {
        s.trim()
            .chars()
            .map(|c| match c {
                '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
                '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' => '\'',
                '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' => '"',
                '\u{00A0}' | '\u{2002}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
                other => other,
            })
            .collect()
    },
];

/// Where `needle` occurs in `hay` at or after `from` (at the very end first
/// when `eof`), trying ever looser normalizations.
fn seek(hay: &[String], needle: &[&str], from: usize, eof: bool) -> Option<usize> {
    if needle.len() > hay.len() {
        return None;
    }
    let last_start = hay.len() - needle.len();
    for norm in PASSES {
        let want: Vec<String> = needle.iter().map(|s| norm(s)).collect();
        let at = |i: usize| {
            hay[i..i + needle.len()]
                .iter()
                .zip(&want)
                .all(|(h, w)| norm(h) == *w)
        };
        if eof && last_start >= from && at(last_start) {
            return Some(last_start);
        }
        if let Some(i) = (from..=last_start).find(|&i| at(i)) {
            return Some(i);
        }
    }
    None
}

fn seek_line(hay: &[String], anchor: &str, from: usize) -> Option<usize> {
    for norm in PASSES {
        let want = norm(anchor);
        if let Some(i) = (from..hay.len()).find(|&i| norm(&hay[i]) == want) {
            return Some(i);
        }
    }
    None
}

/// Applies the hunks of one update to `text`; returns the new text.
fn apply_hunks(text: &str, hunks: &[Hunk], shown: &str) -> Result<String, ToolError> {
    let mut file = Lines::parse(text);
    let mut cursor = 0usize;
    let mut edits: Vec<(usize, usize, Vec<String>)> = Vec::new();
    for (k, hunk) in hunks.iter().enumerate() {
        for anchor in &hunk.anchors {
            match seek_line(&file.lines, anchor, cursor) {
                Some(i) => cursor = i + 1,
                None => {
                    return Err(ToolError::failed(format!(
                        "patch: in `{shown}`, hunk {} (patch line {}): the @@ context line `{}` was \
                         not found{}. Nothing was changed; read the file and regenerate the patch \
                         with lines copied from it.",
                        k + 1,
                        hunk.line,
                        clip(anchor),
                        after_line(cursor)
                    )));
                }
            }
        }
        let old = hunk.old_lines();
        let start = if old.is_empty() {
            if hunk.anchors.is_empty() || hunk.eof {
                file.lines.len()
            } else {
                cursor
            }
        } else {
            seek(&file.lines, &old, cursor, hunk.eof).ok_or_else(|| {
                let shown_lines: String =
                    old.iter().take(30).map(|l| format!("  |{l}\n")).collect();
                ToolError::failed(format!(
                    "patch: in `{shown}`, hunk {} (patch line {}) does not match the file{}{}. \
                     It looked for these {} line(s) (context and `-` lines):\n{shown_lines}\
                     {}Nothing was changed; read the file and regenerate the hunk with context \
                     lines copied exactly from it.",
                    k + 1,
                    hunk.line,
                    after_line(cursor),
                    if hunk.eof {
                        " at the end of the file"
                    } else {
                        ""
                    },
                    old.len(),
                    closest(&file.lines, &old, cursor)
                ))
            })?
        };
        // Context lines keep the file's text (it may differ in whitespace).
        let mut new_lines = Vec::new();
        let mut j = start;
        for l in &hunk.lines {
            match l {
                HunkLine::Context(s) => {
                    new_lines.push(file.lines.get(j).cloned().unwrap_or_else(|| s.clone()));
                    j += 1;
                }
                HunkLine::Remove(_) => j += 1,
                HunkLine::Add(s) => new_lines.push(s.clone()),
            }
        }
        edits.push((start, old.len(), new_lines));
        cursor = start + old.len();
    }
    for (start, len, new_lines) in edits.into_iter().rev() {
        file.lines.splice(start..start + len, new_lines);
    }
    if text.is_empty() {
        file.trailing_newline = true;
    }
    Ok(file.render())
}

/// Where the file comes closest to a hunk that did not match: the longest
/// run of its first lines found (whitespace-insensitive), and the line
/// where file and hunk part. Empty when nothing is close or the file is too
/// large to look.
fn closest(hay: &[String], needle: &[&str], cursor: usize) -> String {
    if needle.is_empty() || hay.len().saturating_mul(needle.len()) > 5_000_000 {
        return String::new();
    }
    let mut best = (0usize, 0usize);
    for i in 0..hay.len() {
        let n = hay[i..]
            .iter()
            .zip(needle)
            .take_while(|(h, w)| h.trim() == w.trim())
            .count();
        if n > best.1 {
            best = (i, n);
        }
    }
    let (at, n) = best;
    if n == 0 {
        return format!(
            "Its first line `{}` is nowhere in the file. ",
            clip(needle[0])
        );
    }
    let order = if at < cursor {
        " (before the previous hunk: hunks must be in file order)"
    } else {
        ""
    };
    let parted = match (hay.get(at + n), needle.get(n)) {
        (Some(h), Some(w)) => format!(
            "; then the file has `{}` where the hunk has `{}`",
            clip(h),
            clip(w)
        ),
        (None, Some(w)) => format!("; then the file ends where the hunk has `{}`", clip(w)),
        _ => String::new(),
    };
    format!(
        "Closest: its first {n} line(s) match at line {}{order}{parted}. ",
        at + 1
    )
}

fn after_line(cursor: usize) -> String {
    if cursor == 0 {
        String::new()
    } else {
        format!(" after line {cursor}")
    }
}

/// One file change, computed in memory before anything is written.
struct Change {
    /// The path as the patch names it (for the diff and the result).
    shown_from: String,
    shown_to: String,
    from: PathBuf,
    to: PathBuf,
    /// Original text at `from` (None: the file is new).
    before: Option<String>,
    /// New text at `to` (None: the file is deleted).
    after: Option<String>,
}

fn patch_mode(
    args: &PatchArgs,
    resolve: &dyn Fn(&str) -> Result<PathBuf, ToolError>,
    cwd: &Path,
    max_diff: usize,
    stop: &AtomicBool,
) -> Result<PatchOutput, ToolError> {
    let Some(text) = &args.patch else {
        return Err(ToolError::failed(
            "patch: mode=\"patch\" needs the V4A patch text in `patch` (starting with `*** Begin \
             Patch`); for a single replacement use mode=\"replace\" with path, old_string and \
             new_string",
        ));
    };
    let ops = parse_patch(text)?;
    // Each path may appear once, so every change is independent.
    let mut claimed: BTreeMap<PathBuf, usize> = BTreeMap::new();
    let mut claim = |p: &Path, shown: &str, line: usize| -> Result<(), ToolError> {
        if let Some(first) = claimed.insert(p.to_path_buf(), line) {
            return Err(ToolError::failed(format!(
                "patch: `{shown}` is named twice (patch lines {first} and {line}); merge all \
                 changes to one file into one section. Nothing was changed."
            )));
        }
        Ok(())
    };
    let mut changes = Vec::new();
    let mut replacements = 0u64;
    for op in &ops {
        match op {
            Op::Add { path, line, lines } => {
                let p = resolve(path)?;
                claim(&p, path, *line)?;
                check_target(&p, path)?;
                if p.exists() {
                    return Err(ToolError::failed(format!(
                        "patch: `*** Add File: {path}` (patch line {line}): the file already exists; \
                         use `*** Update File:` to change it, or delete it first. Nothing was changed."
                    )));
                }
                let mut content = lines.join("\n");
                if !lines.is_empty() {
                    content.push('\n');
                }
                changes.push(Change {
                    shown_from: path.clone(),
                    shown_to: path.clone(),
                    from: p.clone(),
                    to: p,
                    before: None,
                    after: Some(content),
                });
                replacements += 1;
            }
            Op::Delete { path, line } => {
                let p = resolve(path)?;
                claim(&p, path, *line)?;
                let text = read_text(&p, path, cwd)?;
                changes.push(Change {
                    shown_from: path.clone(),
                    shown_to: path.clone(),
                    from: p.clone(),
                    to: p,
                    before: Some(text),
                    after: None,
                });
                replacements += 1;
            }
            Op::Update {
                path,
                line,
                move_to,
                hunks,
            } => {
                let p = if move_to.is_some() {
                    resolve(path)?
                } else {
                    edit_target(resolve(path)?)?
                };
                claim(&p, path, *line)?;
                let text = read_text(&p, path, cwd)?;
                let new_text = apply_hunks(&text, hunks, path)?;
                let (to, shown_to) = match move_to {
                    Some(dest) => {
                        let d = resolve(dest)?;
                        if d != p {
                            claim(&d, dest, *line)?;
                            check_target(&d, dest)?;
                            if d.exists() {
                                return Err(ToolError::failed(format!(
                                    "patch: `*** Move to: {dest}` (for `{path}`, patch line {line}): \
                                     the destination already exists. Nothing was changed."
                                )));
                            }
                        }
                        (d, dest.clone())
                    }
                    None => (p.clone(), path.clone()),
                };
                replacements += hunks.len() as u64;
                changes.push(Change {
                    shown_from: path.clone(),
                    shown_to,
                    from: p,
                    to,
                    before: Some(text),
                    after: Some(new_text),
                });
            }
        }
    }
    still_wanted(stop)?;
    commit(&changes)?;
    let mut diff = String::new();
    let mut files_changed = Vec::new();
    for c in &changes {
        let (from, to) = match (&c.before, &c.after) {
            (None, _) => ("/dev/null".to_string(), format!("b/{}", c.shown_to)),
            (Some(_), None) => (format!("a/{}", c.shown_from), "/dev/null".to_string()),
            (Some(_), Some(_)) => (format!("a/{}", c.shown_from), format!("b/{}", c.shown_to)),
        };
        let after = c.after.as_deref().unwrap_or("");
        let d = unified(c.before.as_deref().unwrap_or(""), after, &from, &to);
        if d.is_empty() && c.from != c.to {
            let _ = writeln!(
                diff,
                "rename from {}\nrename to {}",
                c.shown_from, c.shown_to
            );
        }
        diff.push_str(&d);
        files_changed.push(c.shown_from.clone());
        if c.from != c.to {
            files_changed.push(c.shown_to.clone());
        }
    }
    Ok(PatchOutput {
        files_changed,
        replacements,
        diff: cap_diff(diff, max_diff),
    })
}

/// Writes every change (new contents first, then deletions); on a failure
/// restores what was already done and reports it.
fn commit(changes: &[Change]) -> Result<(), ToolError> {
    let mut done: Vec<Undo<'_>> = Vec::new();
    let mut result = Ok(());
    for c in changes {
        if let Some(after) = &c.after {
            // Unchanged content at the same path: nothing to write.
            if c.from == c.to && c.before.as_deref() == Some(after.as_str()) {
                continue;
            }
            let existed = c.from == c.to && c.before.is_some();
            if let Err(e) = write_atomic(&c.to, after.as_bytes()) {
                result = Err((c.to.clone(), "write", e));
                break;
            }
            done.push(if existed {
                Undo::Restore(&c.to, c.before.as_deref().unwrap_or_default().as_bytes())
            } else {
                Undo::Remove(&c.to)
            });
        }
    }
    if result.is_ok() {
        for c in changes {
            if c.after.is_none() || c.from != c.to {
                if let Err(e) = std::fs::remove_file(&c.from) {
                    result = Err((c.from.clone(), "delete", e));
                    break;
                }
                done.push(Undo::Restore(
                    &c.from,
                    c.before.as_deref().unwrap_or_default().as_bytes(),
                ));
            }
        }
    }
    let Err((path, action, err)) = result else {
        return Ok(());
    };
    let mut unrestored = Vec::new();
    for undo in done.into_iter().rev() {
        let r = match undo {
            Undo::Restore(p, bytes) => write_atomic(p, bytes).map(|()| p),
            Undo::Remove(p) => std::fs::remove_file(p).map(|()| p),
        };
        if let Err(e) = r {
            tracing::warn!(error = %e, "patch: could not roll back a change");
            unrestored.push(match undo {
                Undo::Restore(p, _) | Undo::Remove(p) => p.display().to_string(),
            });
        }
    }
    let state = if unrestored.is_empty() {
        "every file already written was restored, so nothing was changed".to_string()
    } else {
        format!(
            "these files could not be restored: {}",
            unrestored.join(", ")
        )
    };
    Err(ToolError::failed(format!(
        "patch: cannot {action} {}: {err}; {state}",
        path.display()
    )))
}

enum Undo<'a> {
    Restore(&'a Path, &'a [u8]),
    Remove(&'a Path),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unified_range_headers_are_not_anchors() {
        assert_eq!(anchor_text(" -1,3 +1,4 @@"), None);
        assert_eq!(anchor_text(""), None);
        assert_eq!(anchor_text(" def f():"), Some("def f():".into()));
        assert_eq!(anchor_text(" class A @@"), Some("class A".into()));
    }

    #[test]
    fn whitespace_insensitive_search_maps_back_to_the_file() {
        let text = "a\n  fn  x()\n{\n";
        let (s, e) = find_ignoring_whitespace(text, "fn x() {").unwrap();
        assert_eq!(&text[s..e], "fn  x()\n{");
        assert_eq!(line_of(text, s), 2);
    }

    #[test]
    fn lines_round_trip() {
        for t in ["", "a", "a\n", "a\r\nb\r\n", "a\nb", "\n\n"] {
            assert_eq!(Lines::parse(t).render(), t, "{t:?}");
        }
    }

    #[test]
    fn a_deep_edit_gets_the_file_line_numbers() {
        let old: String = (1..=10_000).map(|i| format!("line {i}\n")).collect();
        let new = old.replace("line 5000\n", "line 5000 changed\n");
        let d = unified(&old, &new, "a/f", "b/f");
        assert_eq!(
            d,
            "--- a/f\n+++ b/f\n@@ -4997,7 +4997,7 @@\n line 4997\n line 4998\n line 4999\n\
             -line 5000\n+line 5000 changed\n line 5001\n line 5002\n line 5003\n"
        );
        assert_eq!(d, full_diff(&old, &new, "a/f", "b/f"));
        // Only the changed region (with its context) goes to the diff.
        let (skipped, o, n) = diff_window(&old, &new);
        assert_eq!(skipped, 4996);
        assert_eq!(
            o,
            "line 4997\nline 4998\nline 4999\nline 5000\nline 5001\nline 5002\nline 5003\n"
        );
        assert_eq!(n, o.replace("line 5000", "line 5000 changed"));
    }

    #[test]
    fn diff_is_capped_on_char_boundaries() {
        let d = "é".repeat(1000);
        let c = cap_diff(d, 101);
        assert!(c.contains("[diff cut:"));
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        fn line_kind() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("*** Begin Patch".to_string()),
                Just("*** End Patch".to_string()),
                Just("*** End of File".to_string()),
                "\\*\\*\\* (Add|Delete|Update) File: ?[a-z/.]{0,6}",
                "\\*\\*\\* Move to: ?[a-z/.]{0,6}",
                "@@ ?[a-z@ ]{0,6}",
                "[ +-][a-z ]{0,5}",
                "[^\\n]{0,8}",
            ]
        }

        proptest! {
            #[test]
            fn parsing_and_applying_anything_never_panics(
                body in prop::collection::vec(line_kind(), 0..24),
                file in "[a-z \\n\\r]{0,60}",
                wrap in any::<bool>(),
            ) {
                let mut text = body.join("\n");
                if wrap {
                    text = format!("*** Begin Patch\n{text}\n*** End Patch");
                }
                if let Ok(ops) = parse_patch(&text) {
                    for op in ops {
                        if let Op::Update { hunks, .. } = op {
                            let _ = apply_hunks(&file, &hunks, "f");
                        }
                    }
                }
            }

            #[test]
            fn a_hunk_built_from_any_edit_reproduces_it(
                n in 1usize..30,
                a_frac in 0.0f64..1.0,
                len in 0usize..4,
                added in prop::collection::vec("[a-z]{0,4}", 0..4),
                context in 0usize..4,
                crlf in any::<bool>(),
                trailing in any::<bool>(),
            ) {
                let lines: Vec<String> = (0..n).map(|i| format!("L{i}")).collect();
                let a = ((n as f64) * a_frac) as usize;
                let b = (a + len).min(n);
                let lo = a.saturating_sub(context);
                let hi = (b + context).min(n);
                prop_assume!(hi > lo); // a hunk with no old lines is an insertion at the end
                let eol = if crlf { "\r\n" } else { "\n" };
                let render = |ls: &[String]| {
                    let mut t = ls.join(eol);
                    if trailing && !ls.is_empty() {
                        t.push_str(eol);
                    }
                    t
                };
                let added: Vec<String> = added.iter().map(|s| format!("N{s}")).collect();
                let mut patch = String::from("*** Begin Patch\n*** Update File: f\n");
                for l in &lines[lo..a] { patch.push_str(&format!(" {l}\n")); }
                for l in &lines[a..b] { patch.push_str(&format!("-{l}\n")); }
                for l in &added { patch.push_str(&format!("+{l}\n")); }
                for l in &lines[b..hi] { patch.push_str(&format!(" {l}\n")); }
                patch.push_str("*** End Patch\n");
                let ops = parse_patch(&patch).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let Some(Op::Update { hunks, .. }) = ops.into_iter().next() else {
                    return Err(TestCaseError::fail("not an update"));
                };
                let got = apply_hunks(&render(&lines), &hunks, "f")
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                let mut want = lines[..a].to_vec();
                want.extend(added);
                want.extend_from_slice(&lines[b..]);
                // A file without any line ending has no style to keep: new ones are \n.
                let original = render(&lines);
                let want = render(&want);
                let want = if original.contains('\n') { want } else { want.replace("\r\n", "\n") };
                prop_assert_eq!(got, want);
            }

            // Distinct lines: with repeated lines several diffs are equally
            // right, and similar's Myers can pick differently (or emit
            // inconsistent ops) depending on the surroundings.
            #[test]
            fn windowed_diffs_equal_full_diffs(
                n in 0usize..40,
                edits in prop::collection::vec((0usize..40, 0usize..3, 0usize..3), 0..3),
                final_newline in any::<bool>(),
            ) {
                let old: Vec<String> = (0..n).map(|i| format!("line {i}")).collect();
                let mut new = old.clone();
                for (k, (at, del, ins)) in edits.into_iter().enumerate() {
                    let at = at.min(new.len());
                    let del = del.min(new.len() - at);
                    new.splice(at..at + del, (0..ins).map(|j| format!("new {k}.{j}")));
                }
                let join = |ls: &[String]| {
                    let mut t = ls.join("\n");
                    if final_newline && !ls.is_empty() {
                        t.push('\n');
                    }
                    t
                };
                let (o, n) = (join(&old), join(&new));
                prop_assert_eq!(unified(&o, &n, "a/f", "b/f"), full_diff(&o, &n, "a/f", "b/f"));
            }

            #[test]
            fn whitespace_insensitive_matches_are_real(
                text in "[ab \\t\\n\\u{e9}]{0,40}",
                start in 0usize..40,
                len in 0usize..10,
            ) {
                let chars: Vec<char> = text.chars().collect();
                let start = start.min(chars.len());
                let end = (start + len).min(chars.len());
                let needle: String = chars[start..end].iter().collect();
                if let Some((s, e)) = find_ignoring_whitespace(&text, &needle) {
                    prop_assert!(text.is_char_boundary(s) && text.is_char_boundary(e) && s <= e);
                    prop_assert_eq!(
                        collapse_whitespace(text[s..e].trim()).0,
                        collapse_whitespace(needle.trim()).0
                    );
                } else {
                    prop_assert!(collapse_whitespace(needle.trim()).0.is_empty(), "{needle:?} in {text:?}");
                }
            }
        }
    }
}
