//! `web_search`: query the search provider configured in `[web]`.
//!
//! Providers:
//! - `searxng`: `GET {search_url}/search?q=…&format=json`, results in
//!   `results[].{url,title,content}` (the instance must allow the `json`
//!   format in its `search.formats` setting).
//! - `brave`: `GET {search_url or the public endpoint}?q=…&count=…` with the
//!   key in `X-Subscription-Token`, results in
//!   `web.results[].{url,title,description}`.
//!
//! The API key is only ever put in that header (marked sensitive); every
//! error message is scrubbed of it before it leaves this module.

use std::time::Duration;

use reqwest::header::{ACCEPT, HeaderValue};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::{BodyError, client, decode, describe_reqwest, html, request_deadline, snippet};
use crate::tool::{Tool, ToolContext, ToolError, WebSettings};

/// Brave's public web search endpoint.
const BRAVE_DEFAULT_URL: &str = "https://api.search.brave.com/res/v1/web/search";
/// Most results one call may ask for (Brave's own maximum `count`).
const MAX_LIMIT: u32 = 20;
/// Longest query accepted.
const MAX_QUERY_CHARS: usize = 2000;
/// Largest provider response read.
const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;
/// Longest a search may take, whatever the cell's deadline.
const SEARCH_TIMEOUT: Duration = Duration::from_secs(30);

/// How to configure a provider, for error messages.
const HOW_TO_CONFIGURE: &str = "Configure one in toolcell.toml: either\n  [web]\n  \
search_provider = \"searxng\"\n  search_url = \"http://localhost:8888\"   # your SearXNG \
instance, with the json format enabled\nor\n  [web]\n  search_provider = \"brave\"\n  \
search_api_key_env = \"BRAVE_API_KEY\"   # and export BRAVE_API_KEY=<your key>";

fn default_limit() -> u32 {
    5
}

/// Arguments of `web_search`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct WebSearchArgs {
    /// What to search the web for.
    pub query: String,
    /// The most results to return, from 1 to 20.
    #[serde(default = "default_limit")]
    pub limit: u32,
}

/// The result of `web_search`.
#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct WebSearchOutput {
    /// The results, by kind.
    pub data: SearchData,
}

/// Search results by kind.
#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct SearchData {
    /// Web results, best first, at most `limit`.
    pub web: Vec<SearchHit>,
}

/// One web search result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub(super) struct SearchHit {
    /// The page's address (fetch it with `web_extract`).
    pub url: String,
    /// The page's title.
    pub title: String,
    /// A snippet of the page's text, as the provider gives it.
    pub description: String,
}

/// Searches the web with the configured provider.
#[derive(Debug, Default)]
pub(super) struct WebSearch;

impl Tool for WebSearch {
    const NAME: &'static str = "web_search";
    const DOC: &'static str = "Search the web and return result URLs, titles and snippets.\n\
\n\
Uses the search provider configured in the `[web]` section of toolcell.toml (SearXNG or Brave \
Search). Pass result URLs to web_extract to read the pages.";

    type Args = WebSearchArgs;
    type Output = WebSearchOutput;

    async fn call(
        &self,
        args: WebSearchArgs,
        cx: &ToolContext,
    ) -> Result<WebSearchOutput, ToolError> {
        let query = args.query.trim();
        if query.is_empty() {
            return Err(ToolError::failed(
                "web_search: `query` is empty; say what to search for.",
            ));
        }
        if query.chars().count() > MAX_QUERY_CHARS {
            return Err(ToolError::failed(format!(
                "web_search: `query` is longer than {MAX_QUERY_CHARS} characters; use a few keywords."
            )));
        }
        if args.limit == 0 || args.limit > MAX_LIMIT {
            return Err(ToolError::failed(format!(
                "web_search: `limit` must be between 1 and {MAX_LIMIT}, got {}.",
                args.limit
            )));
        }
        let provider = Provider::from_settings(&cx.settings().web)?;
        let key = provider.key().map(str::to_string);
        let search = provider.search(query, args.limit, cx.deadline());
        let result = tokio::select! {
            () = cx.cancelled().cancelled() => return Err(ToolError::Cancelled(Self::NAME)),
            r = search => r,
        };
        match result {
            Ok(mut web) => {
                web.truncate(args.limit as usize);
                Ok(WebSearchOutput {
                    data: SearchData { web },
                })
            }
            Err(msg) => Err(ToolError::failed(scrub(&msg, key.as_deref()))),
        }
    }
}

crate::register_tool!(WebSearch);

/// A configured provider.
#[derive(Clone, PartialEq, Eq)]
enum Provider {
    SearXng { base: String },
    Brave { url: String, key: String },
}

impl Provider {
    /// The provider `web` configures, or an error saying how to configure
    /// one.
    fn from_settings(web: &WebSettings) -> Result<Self, ToolError> {
        let url = web.search_url.trim();
        match web.search_provider.trim().to_ascii_lowercase().as_str() {
            "" => Err(ToolError::failed(format!(
                "web_search: no search provider is configured. {HOW_TO_CONFIGURE}"
            ))),
            "searxng" => {
                if url.is_empty() {
                    return Err(ToolError::failed(format!(
                        "web_search: search_provider is \"searxng\" but search_url is empty; set it \
                         to the base URL of your SearXNG instance. {HOW_TO_CONFIGURE}"
                    )));
                }
                Ok(Self::SearXng {
                    base: url.to_string(),
                })
            }
            "brave" => {
                let key = web
                    .search_api_key
                    .as_deref()
                    .map(str::trim)
                    .filter(|k| !k.is_empty())
                    .ok_or_else(|| {
                        ToolError::failed(format!(
                            "web_search: search_provider is \"brave\" but no API key was found; set \
                             search_api_key_env to the name of an environment variable holding \
                             your Brave Search key and export it. {HOW_TO_CONFIGURE}"
                        ))
                    })?;
                Ok(Self::Brave {
                    url: if url.is_empty() {
                        BRAVE_DEFAULT_URL.to_string()
                    } else {
                        url.to_string()
                    },
                    key: key.to_string(),
                })
            }
            other => Err(ToolError::failed(format!(
                "web_search: unknown search_provider \"{}\"; use \"searxng\" or \"brave\". \
                 {HOW_TO_CONFIGURE}",
                snippet(other, 40)
            ))),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Self::SearXng { .. } => "SearXNG",
            Self::Brave { .. } => "Brave Search",
        }
    }

    fn key(&self) -> Option<&str> {
        match self {
            Self::SearXng { .. } => None,
            Self::Brave { key, .. } => Some(key),
        }
    }

    /// The request URL for `query`.
    fn request_url(&self, query: &str, limit: u32) -> Result<reqwest::Url, String> {
        let raw = match self {
            Self::SearXng { base } => base,
            Self::Brave { url, .. } => url,
        };
        let mut url = reqwest::Url::parse(raw).map_err(|e| {
            format!(
                "the configured search_url `{}` is not a valid URL ({e}); fix [web] search_url",
                snippet(raw, 200)
            )
        })?;
        if let Self::SearXng { .. } = self {
            // The instance's base URL (any path prefix and query kept), with
            // `/search` appended unless it is already there.
            let path = url.path().trim_end_matches('/').to_string();
            if !path.ends_with("/search") {
                url.set_path(&format!("{path}/search"));
            }
        }
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "the configured search_url `{}` must be an http:// or https:// URL",
                snippet(raw, 200)
            ));
        }
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("q", query);
            match self {
                Self::SearXng { .. } => {
                    q.append_pair("format", "json");
                }
                Self::Brave { .. } => {
                    q.append_pair("count", &limit.to_string());
                }
            }
        }
        Ok(url)
    }

    /// Runs the search; errors are plain messages, not yet scrubbed.
    async fn search(
        &self,
        query: &str,
        limit: u32,
        cell_deadline: Instant,
    ) -> Result<Vec<SearchHit>, String> {
        let url = self.request_url(query, limit)?;
        let mut req = client()
            .map_err(|e| e.to_string())?
            .get(url)
            .header(ACCEPT, "application/json");
        if let Self::Brave { key, .. } = self {
            let mut value = HeaderValue::from_str(key).map_err(|_| {
                "the Brave API key contains characters not allowed in an HTTP header; check the \
                 variable named by search_api_key_env"
                    .to_string()
            })?;
            value.set_sensitive(true);
            req = req.header("X-Subscription-Token", value);
        }
        let name = self.name();
        let started = Instant::now();
        let (deadline, by_cell) = request_deadline(cell_deadline, SEARCH_TIMEOUT);
        let exchange = async {
            let mut resp = req
                .send()
                .await
                .map_err(|e| format!("{name} request failed: {}", describe_reqwest(&e)))?;
            let status = resp.status();
            let body = super::read_body(&mut resp, MAX_RESPONSE_BYTES)
                .await
                .map_err(|e| match e {
                    BodyError::TooLarge(cap) => {
                        format!("{name} sent a response larger than {cap} bytes")
                    }
                    BodyError::Read(e) => format!(
                        "{name} connection failed while reading the response: {}",
                        describe_reqwest(&e)
                    ),
                })?;
            Ok::<_, String>((status, body))
        };
        let (status, body) = match tokio::time::timeout_at(deadline, exchange).await {
            Ok(r) => r?,
            Err(_) => {
                let waited = started.elapsed().as_secs_f64();
                return Err(if by_cell {
                    format!(
                        "{name} did not answer within {waited:.1}s, before the cell's time limit"
                    )
                } else {
                    format!("{name} did not answer within {waited:.0}s")
                });
            }
        };
        let text = decode(&body, None);
        if !status.is_success() {
            return Err(self.status_error(status, &text));
        }
        tracing::debug!(
            provider = name,
            status = status.as_u16(),
            bytes = body.len(),
            "web_search answered"
        );
        self.parse(&text)
    }

    /// An HTTP error from the provider, with what to do about it.
    fn status_error(&self, status: reqwest::StatusCode, body: &str) -> String {
        let name = self.name();
        let code = status.as_u16();
        let reason = status.canonical_reason().unwrap_or("error");
        let hint = match (self, code) {
            (Self::SearXng { .. }, 403) => {
                " The instance refuses the JSON API: add `json` to `search.formats` in its settings.yml."
            }
            (Self::Brave { .. }, 401 | 403) => {
                " The API key was rejected: check the key in the variable named by search_api_key_env."
            }
            (_, 429) => {
                " The provider is rate limiting: wait a little and retry, or search less often."
            }
            (_, 500..) => " The provider failed: retry later.",
            _ => "",
        };
        let body = html::collapse_whitespace(body);
        let shown = if body.is_empty() {
            String::new()
        } else {
            format!(" Response: {}", snippet(&body, 300))
        };
        format!("{name} answered HTTP {code} {reason}.{hint}{shown}")
    }

    /// Parses the provider's JSON into hits.
    fn parse(&self, body: &str) -> Result<Vec<SearchHit>, String> {
        let name = self.name();
        let malformed = |e: serde_json::Error| {
            format!(
                "{name} sent a response that is not its JSON search format ({e}); check that \
                 search_url points at the search API. Response starts: {}",
                snippet(&html::collapse_whitespace(body), 200)
            )
        };
        let hits = match self {
            Self::SearXng { .. } => {
                let r: SearxResponse = serde_json::from_str(body).map_err(malformed)?;
                r.results
                    .into_iter()
                    .map(|i| (i.url, i.title, i.content))
                    .collect::<Vec<_>>()
            }
            Self::Brave { .. } => {
                let r: BraveResponse = serde_json::from_str(body).map_err(malformed)?;
                r.web
                    .map(|w| w.results)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|i| (i.url, i.title, i.description))
                    .collect()
            }
        };
        Ok(hits
            .into_iter()
            .filter_map(|(url, title, desc)| {
                let url = url.filter(|u| !u.trim().is_empty())?;
                Some(SearchHit {
                    url,
                    title: strip_tags(&title.unwrap_or_default()),
                    description: strip_tags(&desc.unwrap_or_default()),
                })
            })
            .collect())
    }
}

/// SearXNG's JSON (`format=json`): only what we use.
#[derive(Deserialize)]
struct SearxResponse {
    results: Vec<SearxItem>,
}

#[derive(Deserialize)]
struct SearxItem {
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    content: Option<String>,
}

/// Brave Search's JSON: only what we use. A query without web results has
/// no `web` object.
#[derive(Deserialize)]
struct BraveResponse {
    #[serde(default)]
    web: Option<BraveWeb>,
}

#[derive(Deserialize)]
struct BraveWeb {
    #[serde(default)]
    results: Vec<BraveItem>,
}

#[derive(Deserialize)]
struct BraveItem {
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    description: Option<String>,
}

/// Snippet markup (`<strong>` highlights, entities) removed, whitespace
/// collapsed.
fn strip_tags(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_tag = false;
    for c in s.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    let out = html::decode_entities(&out);
    html::collapse_whitespace(&out)
}

/// `msg` with every occurrence of `key` replaced.
fn scrub(msg: &str, key: Option<&str>) -> String {
    match key {
        Some(k) if !k.is_empty() => msg.replace(k, "[redacted]"),
        _ => msg.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_tags_removes_highlights() {
        assert_eq!(
            strip_tags("The <strong>Rust</strong> &amp; <em>Cargo</em>\n book &lt;3"),
            "The Rust & Cargo book <3"
        );
    }

    #[test]
    fn scrub_removes_the_key() {
        assert_eq!(
            scrub("bad key sk-123 here", Some("sk-123")),
            "bad key [redacted] here"
        );
        assert_eq!(scrub("nothing", None), "nothing");
    }

    #[test]
    fn searxng_url_gets_search_path_once() {
        for base in ["http://h:1", "http://h:1/", "http://h:1/search"] {
            let p = Provider::SearXng { base: base.into() };
            let u = p.request_url("a b&c", 3).unwrap();
            assert_eq!(u.as_str(), "http://h:1/search?q=a+b%26c&format=json");
        }
        let p = Provider::SearXng {
            base: "https://h/searx/?language=en".into(),
        };
        let u = p.request_url("x", 3).unwrap();
        assert_eq!(
            u.as_str(),
            "https://h/searx/search?language=en&q=x&format=json"
        );
        let p = Provider::Brave {
            url: "http://h:2/res/v1/web/search".into(),
            key: "k".into(),
        };
        let u = p.request_url("x y", 7).unwrap();
        assert_eq!(u.as_str(), "http://h:2/res/v1/web/search?q=x+y&count=7");
        let p = Provider::Brave {
            url: "ftp://h/".into(),
            key: "k".into(),
        };
        assert!(p.request_url("x", 1).unwrap_err().contains("http://"));
    }

    #[test]
    fn bad_configured_url_is_a_config_error() {
        let p = Provider::SearXng {
            base: "not a url".into(),
        };
        let e = p.request_url("x", 1).unwrap_err();
        assert!(e.contains("search_url"), "{e}");
    }
}
