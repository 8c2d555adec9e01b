//! The web tools: `web_extract` (fetch pages, HTML → markdown) and `web_search`
//! (the search provider configured in `[web]`: docs/configuration.md, "[web]").
//!
//! Both share one HTTP client per process ([`client`]): `reqwest` over
//! rustls, redirects followed up to [`MAX_REDIRECTS`]. Every request is
//! bounded in time by the calling cell's deadline (minus a small margin, so
//! the tool can still answer the cell before the rpc server gives up on the
//! call — see [`request_deadline`]) and in size by a cap on the body read
//! ([`read_body`]), so neither a slow nor a huge page can hold the host.

mod extract;
mod html;
mod search;

use std::sync::OnceLock;
use std::time::Duration;

use tokio::time::Instant;

use crate::tool::ToolError;

/// The `User-Agent` of every request.
const USER_AGENT: &str = concat!("toolcell/", env!("CARGO_PKG_VERSION"), " (web tools)");
/// Redirects followed before a fetch fails.
const MAX_REDIRECTS: usize = 10;
/// Time allowed for TCP + TLS connection setup.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// The process-wide HTTP client, built on first use.
///
/// Built once so connections and TLS sessions are pooled across calls.
fn client() -> Result<reqwest::Client, ToolError> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            // reqwest is built without a TLS crypto provider (see the root
            // manifest): install ring's, unless the embedder installed one.
            let _ = rustls::crypto::ring::default_provider().install_default();
            reqwest::Client::builder()
                .user_agent(USER_AGENT)
                .redirect(reqwest::redirect::Policy::limited(MAX_REDIRECTS))
                .connect_timeout(CONNECT_TIMEOUT)
                .pool_idle_timeout(Duration::from_secs(30))
                .build()
                .map_err(|e| error_chain(&e))
        })
        .as_ref()
        // `Client` is a handle around an `Arc`: cloning it is cheap and
        // shares the pool.
        .cloned()
        .map_err(|e| ToolError::failed(format!("cannot start the HTTP client: {e}")))
}

/// When a request started now must be finished: at most `cap` from now, and
/// before `cell_deadline` by a margin (a tenth of the time left, between
/// 50 ms and 1 s) so the tool's answer — including per-URL timeout errors —
/// still reaches the cell before the rpc server cuts the call off.
///
/// Returns the instant and whether the cell's deadline (not `cap`) set it.
fn request_deadline(cell_deadline: Instant, cap: Duration) -> (Instant, bool) {
    let now = Instant::now();
    let remaining = cell_deadline.saturating_duration_since(now);
    let margin = (remaining / 10)
        .clamp(Duration::from_millis(50), Duration::from_secs(1))
        .min(remaining);
    let by_cell = now + (remaining - margin);
    let by_cap = now + cap;
    if by_cell <= by_cap {
        (by_cell, true)
    } else {
        (by_cap, false)
    }
}

/// Why a body could not be read.
#[derive(Debug)]
enum BodyError {
    /// The body is longer than the cap (bytes).
    TooLarge(usize),
    /// The connection failed while reading.
    Read(reqwest::Error),
}

/// Reads the whole body of `resp`, failing as soon as it exceeds `cap`
/// bytes (before reading anything when `Content-Length` says so), so memory
/// stays bounded whatever the server sends.
async fn read_body(resp: &mut reqwest::Response, cap: usize) -> Result<Vec<u8>, BodyError> {
    if let Some(len) = resp.content_length()
        && len > cap as u64
    {
        return Err(BodyError::TooLarge(cap));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(BodyError::Read)? {
        if body.len() + chunk.len() > cap {
            return Err(BodyError::TooLarge(cap));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The parts of a `Content-Type` header a tool needs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ContentType {
    /// `type/subtype`, lowercased, without parameters (`text/html`).
    essence: String,
    /// The `charset` parameter, lowercased, if any.
    charset: Option<String>,
}

impl ContentType {
    /// Parses a header value such as `text/html; charset="UTF-8"`.
    fn parse(value: &str) -> Self {
        let mut parts = value.split(';');
        let essence = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let charset = parts.find_map(|p| {
            let (k, v) = p.split_once('=')?;
            (k.trim().eq_ignore_ascii_case("charset"))
                .then(|| v.trim().trim_matches('"').trim().to_ascii_lowercase())
                .filter(|v| !v.is_empty())
        });
        Self { essence, charset }
    }

    /// The content type of `resp`, if it sent one.
    fn of(resp: &reqwest::Response) -> Option<Self> {
        resp.headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(Self::parse)
            .filter(|ct| !ct.essence.is_empty())
    }
}

/// Decodes `bytes` in `charset` (a label as in `Content-Type` or `<meta>`),
/// falling back to UTF-8 with replacement characters. A byte-order mark
/// wins over the label, as browsers do.
fn decode(bytes: &[u8], charset: Option<&str>) -> String {
    let encoding = charset
        .and_then(|c| encoding_rs::Encoding::for_label(c.as_bytes()))
        .unwrap_or(encoding_rs::UTF_8);
    let (text, _, _) = encoding.decode(bytes);
    text.into_owned()
}

/// `err` and its causes as one line, without the request URL (the caller
/// says which URL it was about).
fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        let msg = e.to_string();
        // reqwest's own top line repeats the URL; its causes say what failed.
        let msg = match msg.split_once(" for url (") {
            Some((head, _)) => head.to_string(),
            None => msg,
        };
        if !msg.is_empty() && !parts.iter().any(|p| p.contains(&msg)) {
            parts.push(msg);
        }
        cur = e.source();
    }
    parts.join(": ")
}

/// A transport failure of `reqwest` phrased for a model.
fn describe_reqwest(err: &reqwest::Error) -> String {
    let chain = error_chain(err);
    if err.is_redirect() {
        format!("too many redirects (more than {MAX_REDIRECTS}) or a bad redirect: {chain}")
    } else if err.is_timeout() {
        format!("timed out: {chain}")
    } else if err.is_connect() {
        let lower = chain.to_ascii_lowercase();
        let tls = [
            "certificate",
            "tls",
            "handshake",
            "corrupt message",
            "alert",
        ]
        .iter()
        .any(|w| lower.contains(w));
        if tls {
            format!(
                "TLS handshake failed (the server's certificate is not trusted or does not \
                 match the host, or it does not speak https on this port): {chain}"
            )
        } else {
            format!("could not connect (check the host name and that the server is up): {chain}")
        }
    } else {
        chain
    }
}

/// `s` cut to at most `max` chars, with `…` when cut.
fn snippet(s: &str, max: usize) -> String {
    let s = s.trim();
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_type_parsing() {
        assert_eq!(
            ContentType::parse("Text/HTML; Charset=\"ISO-8859-1\""),
            ContentType {
                essence: "text/html".into(),
                charset: Some("iso-8859-1".into())
            }
        );
        assert_eq!(
            ContentType::parse("application/json"),
            ContentType {
                essence: "application/json".into(),
                charset: None
            }
        );
        assert_eq!(ContentType::parse("text/plain; charset=").charset, None);
    }

    #[test]
    fn decode_honours_charset_and_bom() {
        assert_eq!(decode(b"caf\xe9", Some("iso-8859-1")), "café");
        assert_eq!(decode("café".as_bytes(), None), "café");
        assert_eq!(decode(b"caf\xe9", None), "caf\u{fffd}");
        assert_eq!(decode(b"\xef\xbb\xbfhi", Some("iso-8859-1")), "hi");
        assert_eq!(decode(b"plain", Some("no-such-charset")), "plain");
    }

    #[test]
    fn deadline_margin_leaves_time_to_answer() {
        let now = Instant::now();
        let (d, by_cell) =
            request_deadline(now + Duration::from_millis(400), Duration::from_secs(60));
        assert!(by_cell);
        assert!(d < now + Duration::from_millis(400));
        let (_, by_cell) =
            request_deadline(now + Duration::from_secs(600), Duration::from_secs(60));
        assert!(!by_cell);
        // A deadline already past gives a deadline of now, not a panic.
        let (d, _) = request_deadline(now, Duration::from_secs(1));
        assert!(d <= Instant::now());
    }

    #[test]
    fn snippet_cuts_on_char_boundaries() {
        assert_eq!(snippet("ééééé", 3), "ééé…");
        assert_eq!(snippet(" ab ", 3), "ab");
    }
}
