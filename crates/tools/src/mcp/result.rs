//! An MCP `tools/call` result as the value a cell gets (docs/mcp-servers.md,
//! "What a call returns"): `structuredContent` as it is; text content only as
//! the texts joined; anything else as a list of items, images (and other binary
//! content) saved as files and named by path. `isError` is a [`ToolError`].

use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use serde_json::{Value, json};
use toolcell_sys::private_dir::PrivateDir;

use super::MAX_RESULT_BYTES;
use crate::tool::{ToolContext, ToolError};

/// The longest error text from a server kept in a `ToolError`, in bytes.
const MAX_ERROR_TEXT: usize = 4000;

/// Every string in `v` through the host's redactor (a server's output is
/// outside text, like a web page's: the host's secret values and known
/// token shapes never reach the cell from it).
pub(crate) fn redact_value(v: Value, redactor: &toolcell_redact::Redactor) -> Value {
    match v {
        Value::String(s) => match redactor.redact(&s) {
            std::borrow::Cow::Borrowed(_) => Value::String(s),
            std::borrow::Cow::Owned(r) => Value::String(r),
        },
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|i| redact_value(i, redactor))
                .collect(),
        ),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, redact_value(v, redactor)))
                .collect(),
        ),
        other => other,
    }
}

/// Maps `result` of `server.tool` to the cell's value, saving binary
/// content under the kernel's directory.
pub(crate) async fn map_result(
    qualified: &str,
    result: CallToolResult,
    cx: &ToolContext,
) -> Result<Value, ToolError> {
    if result.is_error == Some(true) {
        let text = texts(&result.content).join("\n");
        let text = if text.trim().is_empty() {
            "the tool reported an error without a message".to_string()
        } else {
            cut(text, MAX_ERROR_TEXT)
        };
        return Err(ToolError::failed(
            cx.settings().redactor.redact(&text).into_owned(),
        ));
    }
    if let Some(structured) = result.structured_content {
        let size = serde_json::to_vec(&structured).map_or(0, |v| v.len());
        check_size(size)?;
        return Ok(structured);
    }
    if result.content.is_empty() {
        return Ok(Value::Null);
    }
    let size: usize = result.content.iter().map(approx_size).sum();
    check_size(size)?;
    if result
        .content
        .iter()
        .all(|c| matches!(c, ContentBlock::Text(_)))
    {
        return Ok(Value::String(texts(&result.content).join("\n")));
    }
    let dir = cx.settings().files_dir().to_path_buf();
    let mut items = Vec::with_capacity(result.content.len());
    for block in result.content {
        items.push(item(qualified, block, &dir).await?);
    }
    Ok(Value::Array(items))
}

fn texts(content: &[ContentBlock]) -> Vec<&str> {
    content
        .iter()
        .filter_map(|c| match c {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect()
}

/// About how many bytes a content block brings (binary data decoded).
fn approx_size(block: &ContentBlock) -> usize {
    match block {
        ContentBlock::Text(t) => t.text.len(),
        ContentBlock::Image(i) => i.data.len() / 4 * 3,
        ContentBlock::Audio(a) => a.data.len() / 4 * 3,
        ContentBlock::Resource(r) => match &r.resource {
            ResourceContents::TextResourceContents { text, .. } => text.len(),
            ResourceContents::BlobResourceContents { blob, .. } => blob.len() / 4 * 3,
            #[allow(unreachable_patterns)]
            _ => 0,
        },
        _ => 256,
    }
}

fn check_size(size: usize) -> Result<(), ToolError> {
    if size > MAX_RESULT_BYTES {
        return Err(ToolError::failed(format!(
            "the result is {:.1} MiB, over the {} MiB cap on a tool result",
            size as f64 / (1024.0 * 1024.0),
            MAX_RESULT_BYTES >> 20
        )));
    }
    Ok(())
}

async fn item(qualified: &str, block: ContentBlock, dir: &Path) -> Result<Value, ToolError> {
    Ok(match block {
        ContentBlock::Text(t) => json!({"type": "text", "text": t.text}),
        ContentBlock::Image(i) => {
            let path = save(qualified, dir, &i.data, &i.mime_type).await?;
            json!({"type": "image", "mime": i.mime_type, "path": path})
        }
        ContentBlock::Audio(a) => {
            let path = save(qualified, dir, &a.data, &a.mime_type).await?;
            json!({"type": "audio", "mime": a.mime_type, "path": path})
        }
        ContentBlock::Resource(r) => match r.resource {
            ResourceContents::TextResourceContents {
                uri,
                mime_type,
                text,
                ..
            } => json!({"type": "resource", "uri": uri, "mime": mime_type, "text": text}),
            ResourceContents::BlobResourceContents {
                uri,
                mime_type,
                blob,
                ..
            } => {
                let mime = mime_type
                    .clone()
                    .unwrap_or_else(|| "application/octet-stream".into());
                let path = save(qualified, dir, &blob, &mime).await?;
                json!({"type": "resource", "uri": uri, "mime": mime_type, "path": path})
            }
            #[allow(unreachable_patterns)]
            other => json!({"type": "resource", "resource": other}),
        },
        other => {
            let mut v = serde_json::to_value(&other).unwrap_or(Value::Null);
            if let Some(o) = v.as_object_mut() {
                o.remove("_meta");
                o.remove("annotations");
                if let Some(m) = o.remove("mimeType") {
                    o.insert("mime".into(), m);
                }
            }
            v
        }
    })
}

/// Decodes base64 `data` and saves it as a new file of ours under `dir`
/// (created `0600` with a random name, never over an existing file);
/// returns its path.
async fn save(qualified: &str, dir: &Path, data: &str, mime: &str) -> Result<String, ToolError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| {
            ToolError::failed(format!(
                "the server sent {mime} content that is not valid base64: {e}"
            ))
        })?;
    let dir = dir.to_path_buf();
    let prefix = file_prefix(qualified);
    let ext = extension(mime);
    let path = tokio::task::spawn_blocking(move || write_new(&dir, &prefix, ext, &bytes))
        .await
        .map_err(|e| ToolError::failed(format!("saving the content failed: {e}")))?
        .map_err(|e| ToolError::failed(format!("cannot save the content: {e}")))?;
    Ok(path.display().to_string())
}

fn write_new(dir: &Path, prefix: &str, ext: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
    let dir = PrivateDir::ensure(dir).map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut rand = [0u8; 8];
    getrandom::fill(&mut rand).map_err(|e| std::io::Error::other(e.to_string()))?;
    let hex: String = rand.iter().map(|b| format!("{b:02x}")).collect();
    let name = format!("{prefix}-{hex}.{ext}");
    let mut file = dir
        .create_file(&name)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    file.write_all(bytes)?;
    file.flush()?;
    Ok(dir.path().join(name))
}

/// `mcp-<server>.<tool>` with anything but `[A-Za-z0-9._-]` as `_`, cut short.
fn file_prefix(qualified: &str) -> String {
    let clean: String = qualified
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(60)
        .collect();
    format!("mcp-{clean}")
}

fn extension(mime: &str) -> &'static str {
    let base = mime.split(';').next().unwrap_or("").trim();
    match base.to_ascii_lowercase().as_str() {
        "image/png" => "png",
        "image/jpeg" | "image/jpg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "image/svg+xml" => "svg",
        "image/bmp" => "bmp",
        "audio/wav" | "audio/x-wav" | "audio/wave" => "wav",
        "audio/mpeg" | "audio/mp3" => "mp3",
        "audio/ogg" => "ogg",
        "application/pdf" => "pdf",
        "application/json" => "json",
        "text/plain" => "txt",
        _ => "bin",
    }
}

fn cut(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut at = max;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_extensions() {
        assert_eq!(file_prefix("fs.read/x y"), "mcp-fs.read_x_y");
        assert_eq!(extension("image/PNG"), "png");
        assert_eq!(extension("image/jpeg; q=1"), "jpg");
        assert_eq!(extension("x/unknown"), "bin");
    }
}
