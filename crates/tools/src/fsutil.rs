//! File helpers shared by the built-in tools.

use std::io::{self, Write};
use std::path::Path;

/// Writes `bytes` to `path` atomically: a temporary file in the same
/// directory, flushed and synced, then renamed over `path`. Parent
/// directories are created. An existing file keeps its permissions.
///
/// # Errors
/// Any I/O error; `path` is never left half-written. Writing through a path
/// that is a directory is an `IsADirectory`-style error.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    if path.is_dir() {
        return Err(io::Error::other(format!(
            "{} is a directory; give a file path",
            path.display()
        )));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".toolcell-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    if let Ok(meta) = std::fs::metadata(path) {
        // Keep the mode of the file being replaced.
        let _ = std::fs::set_permissions(tmp.path(), meta.permissions());
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
