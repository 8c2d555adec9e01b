//! Journal rows as a Jupyter notebook (nbformat 4.5), a percent-format
//! Python script, or Markdown.

use std::fmt::Write as _;

use base64::Engine as _;
use serde_json::{Value, json};

use super::{CellRecord, DisplayFile, MAX_DISPLAY_BYTES, rfc3339};
use toolcell_kernel::figures::ALLOWED_MIMES;
use toolcell_kernel::result::Status;

/// The separator between stdout and stderr in a result's `output`:
/// docs/result.md ("output").
const STDERR_SEP: &str = "\n--- stderr ---\n";

/// What [`export`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Format {
    /// A Jupyter notebook, nbformat 4.5.
    Ipynb,
    /// A percent-format script (`# %%` cells), outputs as comments.
    Py,
    /// Markdown: fenced code and output blocks.
    Md,
}

impl Format {
    /// Parses `ipynb`, `py` or `md`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "ipynb" => Some(Self::Ipynb),
            "py" => Some(Self::Py),
            "md" => Some(Self::Md),
            _ => None,
        }
    }
}

/// `rows` (oldest first, as [`Journal::history`](super::Journal::history)
/// returns them) in `format`.
pub fn export(rows: &[CellRecord], format: Format) -> String {
    match format {
        Format::Ipynb => ipynb(rows),
        Format::Py => py(rows),
        Format::Md => md(rows),
    }
}

/// A cell's output split as docs/result.md ("output") joins it.
struct Parts<'a> {
    stdout: &'a str,
    /// Stderr text before the traceback.
    stderr: &'a str,
    /// The traceback, when the cell raised.
    traceback: Option<&'a str>,
}

fn split_output(r: &CellRecord) -> Parts<'_> {
    let (stdout, rest) = match r.output.split_once(STDERR_SEP) {
        Some((out, err)) => (out, err),
        None => (r.output.as_str(), ""),
    };
    let mut parts = Parts {
        stdout,
        stderr: rest,
        traceback: None,
    };
    if r.status == Status::Error {
        let marker = "Traceback (most recent call last):";
        let at = if rest.starts_with(marker) {
            Some(0)
        } else {
            rest.rfind(&format!("\n{marker}")).map(|i| i + 1)
        };
        if let Some(i) = at {
            parts.stderr = &rest[..i];
            parts.traceback = Some(&rest[i..]);
        }
    }
    parts
}

/// `(ename, evalue)` from a traceback's last line (`NameError: name 'x' is
/// not defined`).
fn exception_of(traceback: &str) -> (String, String) {
    let last = traceback
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty() && !l.starts_with(' '))
        .unwrap_or("")
        .trim();
    match last.split_once(": ") {
        Some((name, value)) if !name.contains(' ') => (name.to_string(), value.to_string()),
        _ if !last.contains(' ') && !last.is_empty() => (last.to_string(), String::new()),
        _ => ("Error".to_string(), last.to_string()),
    }
}

/// Why a new kernel started before `r`, if one did after an earlier cell.
fn new_kernel_note(prev: Option<&CellRecord>, r: &CellRecord) -> Option<String> {
    let prev = prev?;
    if r.kernel_id.is_empty() || r.kernel_id == prev.kernel_id {
        return None;
    }
    let why = if prev.ended {
        match prev.status {
            Status::Timeout => "the previous cell timed out and its kernel was killed",
            Status::Interrupted => "the previous cell was interrupted and its kernel was killed",
            _ => "the previous kernel ended (it exited or died)",
        }
    } else if r.state_reset {
        "the session was reset (or its kernel was evicted or reaped)"
    } else {
        "a new kernel was started"
    };
    Some(format!(
        "New kernel `{}` (Python {}): {why}; variables from earlier cells are gone.",
        r.kernel_id,
        if r.python.is_empty() { "?" } else { &r.python }
    ))
}

/// A one-line summary of a cell: status, duration, tool calls.
fn summary(r: &CellRecord) -> String {
    let mut s = format!("{} · {:.2}s", r.status.as_str(), r.duration_seconds);
    if r.tool_calls_made > 0 {
        let names: Vec<&str> = r.tool_calls.iter().map(|c| c.tool.as_str()).collect();
        let _ = write!(
            s,
            " · {} tool call{} ({})",
            r.tool_calls_made,
            if r.tool_calls_made == 1 { "" } else { "s" },
            names.join(", ")
        );
    }
    s
}

/// Notes the host added (error sentence for failures other than a
/// traceback, truncation warnings), as `[toolcell] …` lines.
fn host_notes(r: &CellRecord, has_traceback: bool) -> String {
    let mut notes = String::new();
    if let Some(e) = &r.error
        && !(r.status == Status::Error && has_traceback)
    {
        let _ = writeln!(notes, "[toolcell] {}: {e}", r.status.as_str());
    }
    if let Some(w) = &r.warning {
        let _ = writeln!(notes, "[toolcell] {w}");
    }
    notes
}

/// `text` as a Markdown code span, whatever backticks it holds.
fn code_span(text: &str) -> String {
    // A file name may hold a newline; the note stays one line.
    let text: String = text
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    let text = text.as_str();
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    let ticks = "`".repeat(longest + 1);
    if longest > 0 || text.starts_with(' ') || text.ends_with(' ') {
        format!("{ticks} {text} {ticks}")
    } else {
        format!("{ticks}{text}{ticks}")
    }
}

/// The Markdown note under a cell that changed files: each listed path
/// (with its size), and how many more when the list was cut.
fn files_note(r: &CellRecord) -> Option<String> {
    let f = r.files.as_ref()?;
    let t = f.totals();
    if t.created + t.modified + t.deleted == 0 {
        // Only a stopped scan reports nothing changed: nothing to show.
        return None;
    }
    let mut kinds: Vec<String> = Vec::new();
    for (list, total, word) in [
        (&f.created, t.created, "created"),
        (&f.modified, t.modified, "modified"),
        (&f.deleted, t.deleted, "deleted"),
    ] {
        if total == 0 {
            continue;
        }
        let names: Vec<String> = list
            .iter()
            .map(|e| match e.bytes {
                Some(b) => format!(
                    "{} ({b} byte{})",
                    code_span(&e.path),
                    if b == 1 { "" } else { "s" }
                ),
                None => code_span(&e.path),
            })
            .collect();
        let more = total.saturating_sub(list.len() as u64);
        let mut s = format!("{word} {}", names.join(", "));
        if more > 0 {
            let _ = write!(s, " and {more} more");
        }
        kinds.push(s);
    }
    let mut note = format!("**Files changed** ({}): {}.", f.summary(), kinds.join("; "));
    if f.scan_stopped {
        note.push_str(
            " The scan of the working directory stopped early: the list may be incomplete.",
        );
    }
    Some(note)
}

fn stream(name: &str, text: &str) -> Value {
    json!({"output_type": "stream", "name": name, "text": text})
}

/// Whether a journaled display entry has an allowed type (rows written
/// before the host checked figures may not).
fn allowed(d: &DisplayFile) -> bool {
    ALLOWED_MIMES.contains(&d.mime.as_str())
}

/// A display file as a `display_data` output, from the bytes the journal
/// kept (checked by the host when the cell ran). A path is never opened: it
/// is the kernel's to name, and the file is gone with the kernel anyway.
fn figure(d: &DisplayFile) -> Result<Value, String> {
    if !allowed(d) {
        return Err("its type is not an allowed image type".into());
    }
    let Some(bytes) = d.data.as_deref() else {
        return Err(format!("{}: its bytes were not kept", d.path));
    };
    if bytes.len() as u64 > MAX_DISPLAY_BYTES {
        return Err(format!(
            "{}: {} bytes, more than the {MAX_DISPLAY_BYTES} embedded",
            d.path,
            bytes.len()
        ));
    }
    // nbformat keeps SVG as text, the binary types as base64.
    let data = if d.mime == "image/svg+xml" {
        match std::str::from_utf8(bytes) {
            Ok(text) => Value::String(text.to_string()),
            Err(_) => return Err(format!("{}: the SVG is not UTF-8", d.path)),
        }
    } else {
        Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
    };
    Ok(json!({"output_type": "display_data", "data": {d.mime.as_str(): data}, "metadata": {}}))
}

fn ipynb(rows: &[CellRecord]) -> String {
    let mut cells: Vec<Value> = Vec::new();
    if let Some(first) = rows.first() {
        let last = rows.last().unwrap_or(first);
        cells.push(json!({
            "cell_type": "markdown",
            "id": "toolcell-title",
            "metadata": {},
            "source": format!(
                "# toolcell session `{}`\n\n{} cells, {} to {} (UTC). Exported from the toolcell journal: \
                 the code the agent ran and the output it saw (secrets redacted).",
                first.session,
                rows.len(),
                rfc3339(first.started_at),
                rfc3339(last.finished_at)
            ),
        }));
    }
    let mut prev: Option<&CellRecord> = None;
    for (i, r) in rows.iter().enumerate() {
        if let Some(note) = new_kernel_note(prev, r) {
            cells.push(json!({
                "cell_type": "markdown",
                "id": format!("kernel-{i}"),
                "metadata": {},
                "source": format!("*{note}*"),
            }));
        }
        let parts = split_output(r);
        let mut outputs: Vec<Value> = Vec::new();
        if !parts.stdout.is_empty() {
            outputs.push(stream("stdout", parts.stdout));
        }
        for d in &r.display {
            match figure(d) {
                Ok(v) => outputs.push(v),
                Err(e) => outputs.push(stream(
                    "stderr",
                    &format!("[toolcell] display file not embedded: {e}\n"),
                )),
            }
        }
        let mut stderr = parts.stderr.to_string();
        stderr.push_str(&host_notes(r, parts.traceback.is_some()));
        if !stderr.is_empty() {
            outputs.push(stream("stderr", &stderr));
        }
        if let Some(tb) = parts.traceback {
            let (ename, evalue) = exception_of(tb);
            let lines: Vec<&str> = tb.lines().collect();
            outputs.push(json!({
                "output_type": "error",
                "ename": ename,
                "evalue": evalue,
                "traceback": lines,
            }));
        }
        let ran = !r.kernel_id.is_empty() && r.execution_count > 0;
        cells.push(json!({
            "cell_type": "code",
            "id": format!("cell-{i}"),
            "execution_count": if ran { json!(r.execution_count) } else { Value::Null },
            "metadata": {
                "toolcell": {
                    "status": r.status.as_str(),
                    "exit_code": r.exit_code,
                    "duration_seconds": r.duration_seconds,
                    "kernel_id": r.kernel_id,
                    "started_at": rfc3339(r.started_at),
                    "tool_calls": r.tool_calls,
                    "files": r.files,
                }
            },
            "source": r.code,
            "outputs": outputs,
        }));
        if let Some(note) = files_note(r) {
            cells.push(json!({
                "cell_type": "markdown",
                "id": format!("files-{i}"),
                "metadata": {},
                "source": note,
            }));
        }
        if !r.kernel_id.is_empty() {
            prev = Some(r);
        }
    }
    let python = rows
        .iter()
        .map(|r| r.python.as_str())
        .find(|p| !p.is_empty())
        .unwrap_or("3");
    let nb = json!({
        "cells": cells,
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {
                "name": "python",
                "version": python,
                "file_extension": ".py",
                "mimetype": "text/x-python",
            },
            "toolcell": {"session": rows.first().map(|r| r.session.as_str()).unwrap_or("")},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    });
    let mut out = serde_json::to_string_pretty(&nb).unwrap_or_default();
    out.push('\n');
    out
}

/// What a reader sees of a cell's output, as plain text.
fn output_text(r: &CellRecord) -> String {
    let parts = split_output(r);
    let mut text = parts.stdout.to_string();
    let mut err = parts.stderr.to_string();
    if let Some(tb) = parts.traceback {
        err.push_str(tb);
    }
    if !err.is_empty() {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("--- stderr ---\n");
        text.push_str(&err);
    }
    for d in &r.display {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        if allowed(d) {
            let _ = writeln!(text, "[display {}: {}]", d.mime, d.path);
        } else {
            let _ = writeln!(
                text,
                "[display entry not exported: not an allowed image type]"
            );
        }
    }
    let notes = host_notes(r, parts.traceback.is_some());
    if !notes.is_empty() {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&notes);
    }
    text
}

fn count_label(r: &CellRecord) -> String {
    if r.execution_count > 0 && !r.kernel_id.is_empty() {
        format!("[{}]", r.execution_count)
    } else {
        "[ ]".to_string()
    }
}

fn py(rows: &[CellRecord]) -> String {
    let mut out = String::new();
    if let Some(first) = rows.first() {
        let _ = writeln!(
            out,
            "# toolcell session {:?}: {} cells, exported from the journal (secrets redacted).\n",
            first.session,
            rows.len()
        );
    }
    let mut prev = None;
    for r in rows {
        if let Some(note) = new_kernel_note(prev, r) {
            let _ = writeln!(out, "# %% [markdown]\n# {note}\n");
        }
        let _ = writeln!(out, "# %% {} {}", count_label(r), summary(r));
        out.push_str(&r.code);
        if !r.code.ends_with('\n') {
            out.push('\n');
        }
        let text = output_text(r);
        if !text.is_empty() {
            out.push_str("# Output:\n");
            for line in text.lines() {
                if line.is_empty() {
                    out.push_str("#\n");
                } else {
                    let _ = writeln!(out, "# {line}");
                }
            }
        }
        out.push('\n');
        if let Some(note) = files_note(r) {
            let _ = writeln!(out, "# %% [markdown]\n# {note}\n");
        }
        if !r.kernel_id.is_empty() {
            prev = Some(r);
        }
    }
    out
}

/// A backtick fence longer than any run of backticks in `text`.
fn fence(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    "`".repeat((longest + 1).max(3))
}

fn md(rows: &[CellRecord]) -> String {
    let mut out = String::new();
    if let Some(first) = rows.first() {
        let last = rows.last().unwrap_or(first);
        let _ = writeln!(
            out,
            "# toolcell session `{}`\n\n{} cells, {} to {} (UTC), exported from the journal (secrets redacted).\n",
            first.session,
            rows.len(),
            rfc3339(first.started_at),
            rfc3339(last.finished_at)
        );
    }
    let mut prev = None;
    for r in rows {
        if let Some(note) = new_kernel_note(prev, r) {
            let _ = writeln!(out, "*{note}*\n");
        }
        let _ = writeln!(out, "## {} {}\n", count_label(r), summary(r));
        let f = fence(&r.code);
        let code = r.code.trim_end_matches('\n');
        let _ = writeln!(out, "{f}python\n{code}\n{f}\n");
        let text = output_text(r);
        if !text.is_empty() {
            let f = fence(&text);
            let body = text.trim_end_matches('\n');
            let _ = writeln!(out, "{f}text\n{body}\n{f}\n");
        }
        if let Some(note) = files_note(r) {
            let _ = writeln!(out, "{note}\n");
        }
        if !r.kernel_id.is_empty() {
            prev = Some(r);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(code: &str, status: Status, output: &str) -> CellRecord {
        let mut r = CellRecord::new("s", code);
        r.status = status;
        r.output = output.into();
        r.kernel_id = "k-1".into();
        r.execution_count = 1;
        r
    }

    #[test]
    fn error_output_splits_into_stderr_and_traceback() {
        let r = cell(
            "print('a'); 1/0",
            Status::Error,
            "a\n\n--- stderr ---\nwarn\nTraceback (most recent call last):\n  File \"<cell-1>\", line 1, in <module>\nZeroDivisionError: division by zero\n",
        );
        let p = split_output(&r);
        assert_eq!(p.stdout, "a\n");
        assert_eq!(p.stderr, "warn\n");
        let tb = p.traceback.unwrap();
        assert!(tb.starts_with("Traceback"));
        assert_eq!(
            exception_of(tb),
            ("ZeroDivisionError".into(), "division by zero".into())
        );
    }

    #[test]
    fn a_bare_exception_name_is_the_ename() {
        assert_eq!(
            exception_of("Traceback (most recent call last):\nKeyboardInterrupt\n"),
            ("KeyboardInterrupt".into(), String::new())
        );
    }

    #[test]
    fn a_cell_that_changed_files_gets_a_note_in_every_format() {
        let mut r = cell("open('a.csv','w').write('x')", Status::Success, "");
        r.files = toolcell_kernel::result::FilesChanged::from_changes(
            toolcell_kernel::result::Changes {
                created: vec![("a.csv".into(), 1), ("we`ird\nname".into(), 2)],
                modified: vec![],
                deleted: (0..3).map(|i| format!("old{i}")).collect(),
            },
            2,
            false,
        );
        let note = files_note(&r).unwrap();
        assert_eq!(
            note,
            "**Files changed** (2 files created, 3 deleted): created `a.csv` (1 byte), \
             `` we`ird?name `` (2 bytes); deleted `old0`, `old1` and 1 more."
        );
        assert!(md(std::slice::from_ref(&r)).contains(&note));
        assert!(py(std::slice::from_ref(&r)).contains(&format!("# %% [markdown]\n# {note}")));
        let nb: Value = serde_json::from_str(&ipynb(std::slice::from_ref(&r))).unwrap();
        let cells = nb["cells"].as_array().unwrap();
        assert_eq!(cells.last().unwrap()["source"], note.as_str());
        assert_eq!(
            cells[1]["metadata"]["toolcell"]["files"]["counts"]["deleted"],
            3
        );
        r.files = None;
        assert!(!md(&[r]).contains("Files changed"));
    }

    #[test]
    fn fences_outgrow_backticks_in_the_text() {
        assert_eq!(fence("no ticks"), "```");
        assert_eq!(fence("a ```` b"), "`````");
    }

    #[test]
    fn a_new_kernel_after_a_killing_timeout_is_marked() {
        let mut a = cell("while True: pass", Status::Timeout, "");
        a.ended = true;
        let mut b = cell("x", Status::Success, "");
        b.kernel_id = "k-2".into();
        b.state_reset = true;
        let note = new_kernel_note(Some(&a), &b).unwrap();
        assert!(note.contains("timed out"), "{note}");
        assert!(new_kernel_note(Some(&b), &b).is_none());
        let md = md(&[a.clone(), b]);
        assert!(md.contains("New kernel `k-2`"), "{md}");
        // A refused cell (no kernel) between two cells of one kernel is no
        // new kernel.
        let mut refused = cell("no", Status::Refused, "");
        refused.kernel_id.clear();
        let mut again = a.clone();
        again.ended = false;
        let md = super::md(&[again.clone(), refused, again]);
        assert!(!md.contains("New kernel"), "{md}");
    }
}
