//! `web_extract`: fetch pages and return them as markdown.

use std::io::Write as _;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use toolcell_redact::{HeadTailCut, Unit};

use std::sync::atomic::AtomicBool;

use toolcell_redact::Redactor;

use super::{BodyError, ContentType, client, decode, describe_reqwest, html, request_deadline};
use crate::fsutil::StopOnDrop;
use crate::tool::{Tool, ToolContext, ToolError};

/// Most URLs one call may fetch.
const MAX_URLS: usize = 20;
/// URLs fetched at the same time.
const CONCURRENCY: usize = 4;
/// Largest body read per URL; a larger page is a per-URL error.
const MAX_BODY_BYTES: usize = 10 * 1024 * 1024;
/// Longest a single fetch may take, whatever the cell's deadline.
const PER_URL_TIMEOUT: Duration = Duration::from_secs(60);
/// Stack of the thread that converts HTML (htmd recurses over the DOM).
const CONVERT_STACK_BYTES: usize = 64 * 1024 * 1024;

fn default_char_limit() -> usize {
    15_000
}

/// Arguments of `web_extract`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct WebExtractArgs {
    /// The pages to fetch: absolute `http://` or `https://` URLs, at most 20
    /// per call (fetched 4 at a time). Each URL succeeds or fails on its own.
    pub urls: Vec<String>,
    /// The most characters of `content` per page. A longer page keeps its
    /// first 40% and last 60% around a marker saying how much was left out,
    /// and its full text is saved to the file named in `full_text_path`.
    #[serde(default = "default_char_limit")]
    pub char_limit: usize,
}

/// The result of `web_extract`: one entry per URL, in the order given.
#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct WebExtractOutput {
    /// One result per URL, in the order of `urls`.
    pub results: Vec<PageResult>,
}

/// One fetched page.
#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct PageResult {
    /// The URL as given.
    pub url: String,
    /// The page's `<title>`; empty when it has none, is not HTML, or failed.
    pub title: String,
    /// The page as markdown (HTML) or as text (plain text, JSON); cut to
    /// `char_limit` characters plus a marker when longer. Empty on error.
    pub content: String,
    /// Why this URL failed (bad URL, timeout, connection, HTTP status,
    /// unsupported content type, body too large), or null on success.
    pub error: Option<String>,
    /// When `content` was cut: the file holding the full text (read it with
    /// `read_file`); null otherwise.
    pub full_text_path: Option<String>,
}

impl PageResult {
    fn failed(url: &str, error: String) -> Self {
        Self {
            url: url.to_string(),
            title: String::new(),
            content: String::new(),
            error: Some(error),
            full_text_path: None,
        }
    }
}

/// Fetches web pages and returns each as markdown with its title.
///
/// What a page says is outside text: it is redacted with the host's
/// redactor (`ToolSettings::redactor`) before it is returned, and the full
/// text saved for a long page is the redacted text.
#[derive(Debug, Default)]
pub(super) struct WebExtract;

impl Tool for WebExtract {
    const NAME: &'static str = "web_extract";
    const DOC: &'static str = "Fetch web pages and return each as markdown with its title.\n\
\n\
HTML is converted to markdown (scripts and styles dropped); plain text and JSON are returned \
as text; other content types (images, PDFs, binaries) are an error for that URL. Redirects \
are followed. Each URL succeeds or fails on its own: check `error` in every result. A page \
longer than `char_limit` keeps its head and tail around a marker, and its full text is saved \
to `full_text_path` (read it with read_file). Secrets in a page (API keys, tokens, passwords \
in URLs) come back as «redacted:<kind>» markers, in the saved text too. HTML over 2 MiB, \
nested over 400 levels deep or too slow to parse comes back as plain text instead of \
markdown.";

    type Args = WebExtractArgs;
    type Output = WebExtractOutput;

    async fn call(
        &self,
        args: WebExtractArgs,
        cx: &ToolContext,
    ) -> Result<WebExtractOutput, ToolError> {
        if args.urls.len() > MAX_URLS {
            return Err(ToolError::failed(format!(
                "web_extract: {} URLs given; at most {MAX_URLS} per call. Split the list over several calls.",
                args.urls.len()
            )));
        }
        let client = client()?;
        let job = Arc::new(Job {
            client,
            char_limit: args.char_limit,
            cell_deadline: cx.deadline(),
            spill_dir: cx.settings().spill_dir.clone(),
            redactor: cx.settings().redactor.clone(),
        });
        let permits = Arc::new(Semaphore::new(CONCURRENCY));
        let mut tasks = JoinSet::new();
        for (i, url) in args.urls.iter().enumerate() {
            let job = Arc::clone(&job);
            let permits = Arc::clone(&permits);
            let url = url.clone();
            tasks.spawn(async move {
                // The semaphore is never closed; a failed acquire would only
                // lift the concurrency bound, never lose the URL.
                let _permit = permits.acquire_owned().await.ok();
                (i, job.extract(&url).await)
            });
        }

        let mut results: Vec<Option<PageResult>> = args.urls.iter().map(|_| None).collect();
        loop {
            tokio::select! {
                // Dropping `tasks` aborts the fetches still running.
                () = cx.cancelled().cancelled() => return Err(ToolError::Cancelled(Self::NAME)),
                next = tasks.join_next() => match next {
                    None => break,
                    Some(Ok((i, r))) => {
                        if let Some(slot) = results.get_mut(i) {
                            *slot = Some(r);
                        }
                    }
                    Some(Err(e)) => tracing::warn!(error = %e, "web_extract: a fetch task failed"),
                },
            }
        }
        let results = results
            .into_iter()
            .zip(&args.urls)
            .map(|(r, url)| {
                r.unwrap_or_else(|| {
                    PageResult::failed(
                        url,
                        "internal error while fetching this URL; try again".into(),
                    )
                })
            })
            .collect();
        Ok(WebExtractOutput { results })
    }
}

crate::register_tool!(WebExtract);

/// What every URL of one call shares.
struct Job {
    client: reqwest::Client,
    char_limit: usize,
    cell_deadline: Instant,
    spill_dir: PathBuf,
    /// The host's redactor: page text is redacted before it is returned or
    /// saved.
    redactor: Redactor,
}

/// A fetched page before cutting, already redacted.
struct Page {
    title: String,
    text: String,
}

impl Job {
    /// Fetches one URL; every failure becomes that URL's `error`.
    async fn extract(&self, url: &str) -> PageResult {
        let page = match self.fetch(url).await {
            Ok(p) => p,
            Err(e) => return PageResult::failed(url, e),
        };
        let Some(cut) = Cut::new(&page.text, self.char_limit) else {
            return PageResult {
                url: url.to_string(),
                title: page.title,
                content: page.text,
                error: None,
                full_text_path: None,
            };
        };
        let dir = self.spill_dir.clone();
        let text = Arc::new(page.text);
        let saved = {
            let text = Arc::clone(&text);
            tokio::task::spawn_blocking(move || save_full_text(&dir, &text))
                .await
                .map_err(|e| std::io::Error::other(e.to_string()))
                .and_then(|r| r)
        };
        let (note, path) = match saved {
            Ok(path) => {
                let shown = path.display().to_string();
                (
                    format!("full text saved to {shown}; read it with read_file"),
                    Some(shown),
                )
            }
            Err(e) => {
                tracing::warn!(error = %e, dir = %self.spill_dir.display(), "web_extract: cannot save full text");
                (format!("the full text could not be saved: {e}"), None)
            }
        };
        PageResult {
            url: url.to_string(),
            title: page.title,
            content: cut.render(&text, &note),
            error: None,
            full_text_path: path,
        }
    }

    /// Fetches and converts one URL, bounded by the cell's deadline.
    async fn fetch(&self, url: &str) -> Result<Page, String> {
        let parsed = reqwest::Url::parse(url.trim()).map_err(|e| {
            format!("not a valid URL ({e}); give an absolute http:// or https:// URL")
        })?;
        match parsed.scheme() {
            "http" | "https" => {}
            "file" => {
                return Err(
                    "file: URLs are not fetched; read local files with read_file".to_string(),
                );
            }
            other => {
                return Err(format!(
                    "only http:// and https:// URLs can be fetched, not {other}:"
                ));
            }
        }
        let started = Instant::now();
        let (deadline, by_cell) = request_deadline(self.cell_deadline, PER_URL_TIMEOUT);
        let timed_out = || {
            let waited = started.elapsed().as_secs_f64();
            if by_cell {
                format!(
                    "timed out after {waited:.1}s: the cell's time limit was near. Fetch fewer URLs \
                     per call or run the cell with a longer timeout."
                )
            } else {
                format!("timed out after {waited:.0}s waiting for the server")
            }
        };
        let (content_type, body) =
            match tokio::time::timeout_at(deadline, self.download(parsed)).await {
                Ok(r) => r?,
                Err(_) => return Err(timed_out()),
            };
        let kind = Kind::of(content_type.as_ref(), &body)?;
        let charset = content_type.as_ref().and_then(|c| c.charset.clone());
        let work = convert_on_big_stack(body, kind, charset, self.redactor.clone());
        // Dropping `work` at the deadline stops the converter thread too.
        match tokio::time::timeout_at(deadline, work).await {
            Ok(r) => r,
            Err(_) => Err(timed_out()),
        }
    }

    /// Sends the request and reads the body under the size cap.
    async fn download(&self, url: reqwest::Url) -> Result<(Option<ContentType>, Vec<u8>), String> {
        let asked = url.clone();
        let mut resp = self
            .client
            .get(url)
            .header(
                reqwest::header::ACCEPT,
                "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,*/*;q=0.5",
            )
            .send()
            .await
            .map_err(|e| describe_reqwest(&e))?;
        let status = resp.status();
        if status.is_client_error() || status.is_server_error() {
            let reason = status.canonical_reason().unwrap_or("error");
            let code = status.as_u16();
            let hint = match code {
                401 | 403 => " (the page needs a login or refuses automated clients)",
                404 | 410 => " (check the URL)",
                429 => " (rate limited: wait before retrying)",
                500.. => " (the server failed: retry later)",
                _ => "",
            };
            // Name where redirects led, without any credentials in it.
            let mut landed = resp.url().clone();
            let _ = landed.set_password(None);
            let _ = landed.set_username("");
            let after = if *resp.url() == asked {
                String::new()
            } else {
                format!(" at {landed} (after redirects)")
            };
            return Err(format!("HTTP {code} {reason}{after}{hint}"));
        }
        let content_type = ContentType::of(&resp);
        let body = super::read_body(&mut resp, MAX_BODY_BYTES)
            .await
            .map_err(|e| match e {
                BodyError::TooLarge(cap) => format!(
                    "the page is larger than {} MB, the most web_extract reads; download it with \
                     terminal (e.g. curl -o page.html URL) and read parts of it",
                    cap / (1024 * 1024)
                ),
                BodyError::Read(e) => format!(
                    "the connection failed while reading the page: {}",
                    describe_reqwest(&e)
                ),
            })?;
        Ok((content_type, body))
    }
}

/// How a body is turned into text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Html,
    Text,
}

impl Kind {
    /// Decides from the content type, or by sniffing the body when there is
    /// none. Unsupported types are an error naming the type.
    fn of(content_type: Option<&ContentType>, body: &[u8]) -> Result<Self, String> {
        let Some(ct) = content_type else {
            return sniff(body).ok_or_else(|| {
                "the server sent binary content without a content type; web_extract reads HTML, \
                 plain text and JSON only"
                    .to_string()
            });
        };
        let e = ct.essence.as_str();
        let (top, sub) = e.split_once('/').unwrap_or((e, ""));
        if e == "text/html" || e == "application/xhtml+xml" {
            return Ok(Self::Html);
        }
        let texty_application = matches!(
            sub,
            "json"
                | "xml"
                | "javascript"
                | "ecmascript"
                | "x-javascript"
                | "yaml"
                | "x-yaml"
                | "toml"
                | "x-ndjson"
                | "ndjson"
                | "csv"
                | "x-sh"
                | "sql"
                | "graphql"
        ) || sub.ends_with("+json")
            || sub.ends_with("+xml");
        if top == "text" || (top == "application" && texty_application) {
            return Ok(Self::Text);
        }
        Err(format!(
            "unsupported content type {e}: web_extract returns HTML pages, plain text and JSON. \
             Download other files with terminal (e.g. curl -L -o file URL) instead."
        ))
    }
}

/// A body without a content type: HTML if it looks like markup, text if it
/// is valid UTF-8 without NUL bytes, else unknown.
fn sniff(body: &[u8]) -> Option<Kind> {
    let head = &body[..body.len().min(1024)];
    let text = String::from_utf8_lossy(head)
        .trim_start()
        .to_ascii_lowercase();
    if text.starts_with("<!doctype html") || text.starts_with("<html") || text.contains("<body") {
        return Some(Kind::Html);
    }
    if !body.contains(&0) && std::str::from_utf8(body).is_ok() {
        return Some(Kind::Text);
    }
    None
}

/// The charset a `<meta charset=…>` or `<meta http-equiv content="…;
/// charset=…">` declares in the first 2 KiB, if any.
fn meta_charset(body: &[u8]) -> Option<String> {
    let head = String::from_utf8_lossy(&body[..body.len().min(2048)]).to_ascii_lowercase();
    let at = head.find("charset=")? + "charset=".len();
    let rest = head[at..].trim_start_matches(['"', '\'', ' ']);
    let label: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.'))
        .collect();
    (!label.is_empty()).then_some(label)
}

/// Decodes a body and turns it into the page's text, redacted, on a
/// dedicated thread with a large stack (htmd recurses over the DOM), off the
/// async runtime. Dropping the returned future (the deadline passed, the
/// call was cancelled) tells the thread to stop; it gives up within one
/// piece of the parse.
async fn convert_on_big_stack(
    body: Vec<u8>,
    kind: Kind,
    charset: Option<String>,
    redactor: Redactor,
) -> Result<Page, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let _guard = StopOnDrop(Arc::clone(&stop));
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("web_extract-html".into())
        .stack_size(CONVERT_STACK_BYTES)
        .spawn(move || {
            let page = match kind {
                // Plain text, JSON…: redacted as it is (nothing escapes it).
                Kind::Text => {
                    let text = decode(&body, charset.as_deref());
                    drop(body);
                    Ok(Page {
                        title: String::new(),
                        text: redactor.redact(&text).into_owned(),
                    })
                }
                Kind::Html => {
                    let charset = charset.or_else(|| meta_charset(&body));
                    let html = decode(&body, charset.as_deref());
                    drop(body);
                    html::convert_redacted(&html, &redactor, &stop, html::PARSE_BUDGET).map(|c| {
                        Page {
                            title: c.title,
                            text: c.markdown,
                        }
                    })
                }
            };
            // Stopped: the receiver is gone, nobody waits for an answer.
            if let Ok(page) = page {
                let _ = tx.send(page);
            }
        })
        .map_err(|e| format!("cannot start the HTML converter: {e}"))?;
    rx.await
        .map_err(|_| "the HTML converter failed on this page".to_string())
}

/// Where a text longer than the limit is cut: the shared head/tail cut,
/// counted in characters, with web_extract's own notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Cut(HeadTailCut);

impl Cut {
    /// The cut for `text` at `limit` chars, or `None` if it fits.
    pub(super) fn new(text: &str, limit: usize) -> Option<Self> {
        HeadTailCut::plan(text, limit, Unit::Chars).map(Self)
    }

    /// Head, marker, tail.
    pub(super) fn render(&self, text: &str, note: &str) -> String {
        format!(
            "{}\n\n[… {} characters omitted of {} (char_limit reached); {note} …]\n\n{}",
            self.0.head(text),
            self.0.omitted,
            self.0.total,
            self.0.tail(text)
        )
    }
}

/// Saves `text` to a new file (mode 0600) in `dir` (created 0700 if
/// missing) and returns its path.
fn save_full_text(dir: &Path, text: &str) -> std::io::Result<PathBuf> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let mut file = tempfile::Builder::new()
        .prefix("web_extract-")
        .suffix(".md")
        .rand_bytes(12)
        .tempfile_in(dir)?;
    file.write_all(text.as_bytes())?;
    file.flush()?;
    let (_, path) = file.keep().map_err(|e| e.error)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds() {
        let ct = |s: &str| Some(ContentType::parse(s));
        assert_eq!(
            Kind::of(ct("text/html; charset=utf-8").as_ref(), b""),
            Ok(Kind::Html)
        );
        assert_eq!(
            Kind::of(ct("application/xhtml+xml").as_ref(), b""),
            Ok(Kind::Html)
        );
        assert_eq!(Kind::of(ct("text/plain").as_ref(), b""), Ok(Kind::Text));
        assert_eq!(
            Kind::of(ct("application/json").as_ref(), b""),
            Ok(Kind::Text)
        );
        assert_eq!(
            Kind::of(ct("application/ld+json").as_ref(), b""),
            Ok(Kind::Text)
        );
        let err = Kind::of(ct("application/pdf").as_ref(), b"%PDF").unwrap_err();
        assert!(err.contains("application/pdf"), "{err}");
        assert_eq!(Kind::of(None, b"<!DOCTYPE html><p>x"), Ok(Kind::Html));
        assert_eq!(Kind::of(None, b"just words"), Ok(Kind::Text));
        assert!(Kind::of(None, b"\x89PNG\r\n\x1a\n\0\0").is_err());
    }

    #[test]
    fn meta_charset_is_found() {
        assert_eq!(
            meta_charset(b"<html><head><meta charset=\"windows-1252\">").as_deref(),
            Some("windows-1252")
        );
        assert_eq!(
            meta_charset(b"<meta http-equiv=Content-Type content='text/html; charset=ISO-8859-1'>")
                .as_deref(),
            Some("iso-8859-1")
        );
        assert_eq!(meta_charset(b"<p>no charset here</p>"), None);
    }

    #[test]
    fn cut_keeps_head_and_tail() {
        let text: String = ('a'..='z').collect();
        let cut = Cut::new(&text, 10).unwrap();
        let out = cut.render(&text, "note");
        assert!(
            out.starts_with("abcd\n\n[… 16 characters omitted of 26"),
            "{out}"
        );
        assert!(out.ends_with("…]\n\nuvwxyz"), "{out}");
        assert_eq!(Cut::new(&text, 26), None);
    }

    proptest::proptest! {
        #[test]
        fn cut_is_exact_on_any_text(text in "\\PC{0,300}", limit in 0usize..320) {
            let total = text.chars().count();
            match Cut::new(&text, limit) {
                None => proptest::prop_assert!(total <= limit),
                Some(cut) => {
                    proptest::prop_assert!(total > limit);
                    let head = cut.0.head(&text);
                    let tail = cut.0.tail(&text);
                    proptest::prop_assert_eq!(head.chars().count() + tail.chars().count(), limit);
                    proptest::prop_assert_eq!(cut.0.omitted, total - limit);
                    proptest::prop_assert!(cut.0.head_end <= cut.0.tail_start);
                    let out = cut.render(&text, "n");
                    proptest::prop_assert!(out.starts_with(head));
                    proptest::prop_assert!(out.ends_with(tail));
                }
            }
        }
    }
}
