//! `read_file(path, offset=1, limit=2000)`: lines of a text file.

use std::io::{BufRead, BufReader, Read};
use std::num::NonZeroUsize;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Tool, ToolContext, ToolError};

/// Arguments of `read_file`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
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
pub struct Output {
    /// The requested lines, newlines included.
    pub content: String,
    /// Number of lines in the whole file.
    pub total_lines: usize,
    /// True when the file has lines after the ones returned.
    pub truncated: bool,
}

/// Bytes looked at to decide whether a file is binary.
const SNIFF: usize = 8192;

/// Reads lines of a text file.
#[derive(Debug, Default)]
pub struct ReadFile;

impl Tool for ReadFile {
    const NAME: &'static str = "read_file";
    const DOC: &'static str = "Read lines of a text file.\n\n\
        Returns the lines offset..offset+limit-1 (1-indexed) as one string, the file's \
        total line count, and whether lines remain after the returned ones. Page through long \
        files (and spilled output files) by raising offset. Binary files are refused.";
    type Args = Args;
    type Output = Output;

    async fn call(&self, args: Args, cx: &ToolContext) -> Result<Output, ToolError> {
        let path = cx.resolve(&args.path);
        tokio::task::spawn_blocking(move || read(&path, args.offset.get(), args.limit.get()))
            .await
            .map_err(|e| ToolError::failed(format!("read_file: worker failed: {e}")))?
    }
}

fn read(path: &std::path::Path, offset: usize, limit: usize) -> Result<Output, ToolError> {
    if path.is_dir() {
        return Err(ToolError::failed(format!(
            "{} is a directory; use search_files(pattern, target=\"files\", path=...) to list it",
            path.display()
        )));
    }
    let file = std::fs::File::open(path).map_err(|e| ToolError::io("read", path, &e))?;
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let head = reader
        .fill_buf()
        .map_err(|e| ToolError::io("read", path, &e))?;
    if head[..head.len().min(SNIFF)].contains(&0) {
        return Err(ToolError::failed(format!(
            "{} looks binary (it contains NUL bytes); read_file returns text only. \
             Open it from Python (open(path, 'rb')) to inspect bytes.",
            path.display()
        )));
    }
    let last = offset.saturating_add(limit);
    let mut content = Vec::new();
    let mut line = Vec::new();
    let mut total = 0usize;
    loop {
        line.clear();
        let n = reader
            .by_ref()
            .read_until(b'\n', &mut line)
            .map_err(|e| ToolError::io("read", path, &e))?;
        if n == 0 {
            break;
        }
        total += 1;
        if total >= offset && total < last {
            content.extend_from_slice(&line);
        }
    }
    Ok(Output {
        content: String::from_utf8_lossy(&content).into_owned(),
        total_lines: total,
        truncated: total >= last,
    })
}

crate::register_tool!(ReadFile);
