//! `toolcell history`: the cells the journal recorded.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use toolcell_host::journal::{CellRecord, HistoryQuery, Journal, rfc3339};

use crate::host::{self, Overrides};

/// Arguments of `toolcell history`.
#[derive(Debug, clap::Args)]
#[command(
    long_about = "List the cells recorded in the journal ([journal] path; by default \
                  $XDG_DATA_HOME/toolcell/journal.db), oldest first: the newest --limit cells, of \
                  one session or of all. The journal records every cell run through `serve`, \
                  `mcp` and the daemon (`exec --session`), unless [journal] enabled = false; it \
                  holds only cleaned output (ANSI stripped, secrets redacted) and redacted code.\n\n\
                  The table shows: start time (UTC), session, the cell's number in its kernel, \
                  status, duration, the files the cell changed (+created ~modified -deleted), \
                  what the kernel ran in (its sandbox's network rule, `off` or `remote`) \
                  and the first line of the code. A --session with no cells in \
                  the journal is an error (exit 1), as in `toolcell export`. --json prints one JSON object \
                  per line (JSON Lines) with every recorded field: session, kernel_id, \
                  execution_count, code, status, exit_code, output, error, hint, warning, \
                  tool_calls [{tool, duration_seconds, outcome}], tool_calls_made, usage, display, \
                  started_at and finished_at (Unix seconds, UTC), duration_seconds, mode, python, \
                  reused, state_reset, state_kept, ended, files (as in the result, when the \
                  cell changed files) and sandbox (the result's kernel.sandbox). It works while a daemon is writing."
)]
pub(crate) struct Args {
    /// Only this session.
    #[arg(long, value_name = "S")]
    session: Option<String>,
    /// Show the newest N cells (0: all).
    #[arg(long, value_name = "N", default_value_t = 20)]
    limit: usize,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs the command.
pub(crate) fn run(config: Option<&Path>, args: &Args) -> anyhow::Result<ExitCode> {
    let cfg = host::load_config(config, &Overrides::default())?;
    let path = cfg.journal_path();
    let rows = Journal::history(
        &path,
        &HistoryQuery {
            session: args.session.clone(),
            limit: args.limit,
        },
    )?;
    if rows.is_empty()
        && let Some(s) = &args.session
    {
        // As `export` says it: a session with no cells is an error (exit 1).
        return Err(no_cells_of(s, &path));
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        for r in &rows {
            serde_json::to_writer(&mut out, r)?;
            writeln!(out)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        writeln!(
            std::io::stderr().lock(),
            "no cells in the journal {}",
            path.display()
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    write_table(&mut out, &rows)?;
    Ok(ExitCode::SUCCESS)
}

/// The error of `history --session S` and `export --session S` when the
/// journal holds no cell of `S` (exit 1).
pub(crate) fn no_cells_of(session: &str, journal: &Path) -> anyhow::Error {
    anyhow::anyhow!(
        "no cells of session {session:?} in the journal {}; `toolcell history` lists the \
         sessions that have some",
        journal.display()
    )
}

fn first_line(code: &str, max: usize) -> String {
    let line = code
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim_end();
    let more = code.lines().filter(|l| !l.trim().is_empty()).count() > 1;
    let mut s: String = line.chars().take(max).collect();
    if line.chars().count() > max || more {
        s.push('…');
    }
    s
}

/// `+2 ~1 -3 r4` (created, modified, deleted, read; kinds with none left
/// out), `-` when the cell changed and read no files.
///
/// (Empty when only a stopped scan was reported.)
fn files_column(r: &CellRecord) -> String {
    let Some(f) = &r.files else {
        return "-".to_string();
    };
    let t = f.totals();
    let parts: Vec<String> = [
        ("+", t.created),
        ("~", t.modified),
        ("-", t.deleted),
        ("r", t.read),
    ]
    .iter()
    .filter(|(_, n)| *n > 0)
    .map(|(c, n)| format!("{c}{n}"))
    .collect();
    parts.join(" ")
}

/// The sandbox column: the network rule of a sandboxed kernel, `off`,
/// `remote`, or `-` (no kernel, or a journal from before sandboxes).
fn sandbox_column(r: &CellRecord) -> &str {
    use toolcell_kernel::sandbox::SandboxInfo;
    match &r.sandbox {
        Some(SandboxInfo::Namespaces { network }) => network,
        Some(SandboxInfo::Off { .. }) => "off",
        Some(SandboxInfo::Remote) => "remote",
        _ => "-",
    }
}

fn write_table(out: &mut impl Write, rows: &[CellRecord]) -> std::io::Result<()> {
    let width = rows
        .iter()
        .map(|r| r.session.chars().count())
        .max()
        .unwrap_or(7)
        .clamp(7, 24);
    writeln!(
        out,
        "{:<20}  {:<width$}  {:>5}  {:<11}  {:>8}  {:<14}  {:<8}  code",
        "time (UTC)", "session", "cell", "status", "duration", "files", "sandbox"
    )?;
    for r in rows {
        let time = rfc3339(r.started_at);
        // 2026-11-29T13:05:07.123Z -> 2026-11-29 13:05:07
        let time = time.get(..19).unwrap_or(&time).replacen('T', " ", 1);
        let session: String = r.session.chars().take(width).collect();
        let cell = if r.execution_count > 0 && !r.kernel_id.is_empty() {
            r.execution_count.to_string()
        } else {
            "-".to_string()
        };
        writeln!(
            out,
            "{time:<20}  {session:<width$}  {cell:>5}  {:<11}  {:>7.2}s  {:<14}  {:<8}  {}",
            r.status.as_str(),
            r.duration_seconds,
            files_column(r),
            sandbox_column(r),
            first_line(&r.code, 60)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_line_skips_blank_lines_and_marks_more() {
        assert_eq!(first_line("\n\nx = 1\n", 60), "x = 1");
        assert_eq!(first_line("x = 1\ny = 2", 60), "x = 1…");
        assert_eq!(first_line("abcdef", 3), "abc…");
    }
}
