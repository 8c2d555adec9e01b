//! `write_file(path, content)`: replace a file atomically.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Tool, ToolContext, ToolError, fsutil};

/// Arguments of `write_file`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct Args {
    /// File to write; relative paths are relative to the session's working directory.
    /// Missing parent directories are created.
    pub path: String,
    /// The whole new content of the file.
    pub content: String,
}

/// Result of `write_file`.
#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct Output {
    /// Absolute path of the file written.
    pub path: String,
    /// Number of bytes written.
    pub bytes_written: usize,
}

/// Writes a whole file atomically.
#[derive(Debug, Default)]
pub(super) struct WriteFile;

impl Tool for WriteFile {
    const NAME: &'static str = "write_file";
    const DOC: &'static str = "Write a whole file, replacing it atomically.\n\n\
        The content goes to a temporary file that is renamed over the target, so readers \
        never see a half-written file; parent directories are created. Use patch to change \
        part of a file. Only regular files are written: pipes, sockets, devices and \
        /proc/<pid>/fd paths are refused.";
    type Args = Args;
    type Output = Output;

    async fn call(&self, args: Args, cx: &ToolContext) -> Result<Output, ToolError> {
        if cx.cancelled().is_cancelled() {
            return Err(ToolError::Cancelled(Self::NAME));
        }
        let path = cx.resolve(&args.path);
        cx.check_write(&path)?;
        let bytes = args.content.len();
        let p = path.clone();
        let work = tokio::task::spawn_blocking(move || {
            fsutil::check_write_target(&p)
                .map_err(|e| ToolError::failed(e.message("write_file", "write", &p)))?;
            fsutil::write_atomic(&p, args.content.as_bytes())
                .map_err(|e| ToolError::io("write", &p, &e))
        });
        tokio::select! {
            joined = work => joined
                .map_err(|e| ToolError::failed(format!("write_file: worker failed: {e}")))??,
            // The write is one atomic rename: it completes or not at all,
            // but the cell is answered at once.
            () = cx.cancelled().cancelled() => return Err(ToolError::Cancelled(Self::NAME)),
            () = tokio::time::sleep_until(cx.deadline()) => {
                return Err(ToolError::failed(format!(
                    "write_file: the cell's time ran out while writing {}; the file is either \
                     fully written or unchanged: check it with read_file",
                    path.display()
                )));
            }
        }
        Ok(Output {
            path: path.display().to_string(),
            bytes_written: bytes,
        })
    }
}

crate::register_tool!(WriteFile);
