//! `toolcell export`: a session from the journal as a notebook, script or
//! Markdown.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use toolcell_host::journal::{self, Format, HistoryQuery, Journal};

use crate::host::{self, Overrides};

/// Arguments of `toolcell export`.
#[derive(Debug, clap::Args)]
#[command(
    long_about = "Write every journaled cell of a session (see `toolcell history`), oldest \
                  first, as a Jupyter notebook (ipynb: nbformat 4.5, code cells with their \
                  execution counts, stdout/stderr streams, error outputs with the traceback, the \
                  figures the journal kept, a markdown note wherever a new kernel started), a \
                  percent-format Python script (py: `# %%` cells, outputs as comments) or \
                  Markdown (md). Output goes to stdout, or to FILE with -o. FILE holds what the \
                  journal holds, so it is private like the journal: created with mode 0600, and \
                  an existing regular file is set to 0600 before it is overwritten; chmod it \
                  yourself to share it. A session with no cells in the journal is an error (exit \
                  1), as in `toolcell history`."
)]
pub(crate) struct Args {
    /// The session to export.
    #[arg(long, value_name = "S")]
    session: String,
    /// Output format.
    #[arg(long, value_name = "ipynb|py|md", default_value = "ipynb")]
    format: String,
    /// Write to FILE (mode 0600) instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
}

/// Runs the command.
pub(crate) fn run(config: Option<&Path>, args: &Args) -> anyhow::Result<ExitCode> {
    let Some(format) = Format::parse(&args.format) else {
        return Err(host::usage(format!(
            "--format: expected \"ipynb\", \"py\" or \"md\", got {:?}",
            args.format
        )));
    };
    let cfg = host::load_config(config, &Overrides::default())?;
    let path = cfg.journal_path();
    let rows = Journal::history(&path, &HistoryQuery::session(args.session.clone()))?;
    if rows.is_empty() {
        return Err(crate::cmd::history::no_cells_of(&args.session, &path));
    }
    let text = journal::export(&rows, format);
    match &args.output {
        Some(file) => write_private(file, text.as_bytes())
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", file.display()))?,
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())?;
            out.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `bytes` to `file` readable by its owner only: a new file is
/// created 0600 (whatever the umask), an existing regular file is set to
/// 0600 *before* it is truncated and written, so the export is never
/// readable by others, not even for a moment. Other files (`/dev/stdout`, a
/// FIFO) are written as they are.
fn write_private(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(file)?;
    let meta = f.metadata()?;
    if meta.is_file() {
        if meta.permissions().mode() & 0o7777 != 0o600 {
            f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        f.set_len(0)?;
    }
    f.write_all(bytes)?;
    f.flush()
}
