//! `web_extract` and `web_search` called through the registry, as a cell's
//! call reaches them, against real HTTP servers on 127.0.0.1 started by
//! each test (no other network).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::web_server::{Reply, Server};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolcell_tools::{ToolContext, ToolError, ToolRegistry, ToolSettings, WebSettings};

/// Settings with the spill dir under `tmp`.
fn settings(tmp: &Path) -> ToolSettings {
    ToolSettings::new(tmp).spill_dir(tmp.join("spill"))
}

/// Calls `tool` through the built-in registry with a cell deadline
/// `timeout` away.
async fn call_with(
    tool: &str,
    args: Value,
    settings: ToolSettings,
    timeout: Duration,
    cancel: CancellationToken,
) -> Result<Value, ToolError> {
    let reg = ToolRegistry::builtin().unwrap();
    let t = reg
        .get(tool)
        .unwrap_or_else(|| panic!("{tool} is not registered"));
    t.validate(&args).map_err(ToolError::failed)?;
    let cx = ToolContext::new(Arc::new(settings), Instant::now() + timeout, cancel);
    t.call(args, cx).await
}

async fn call(tool: &str, args: Value, settings: ToolSettings) -> Result<Value, ToolError> {
    call_with(
        tool,
        args,
        settings,
        Duration::from_secs(30),
        CancellationToken::new(),
    )
    .await
}

/// `web_extract` of `urls`; the results array.
async fn extract(tmp: &Path, urls: &[String], char_limit: Option<usize>) -> Vec<Value> {
    let mut args = json!({ "urls": urls });
    if let Some(l) = char_limit {
        args["char_limit"] = json!(l);
    }
    let out = call("web_extract", args, settings(tmp)).await.unwrap();
    let results = out["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), urls.len(), "{out}");
    results
}

fn error_of(r: &Value) -> &str {
    r["error"]
        .as_str()
        .unwrap_or_else(|| panic!("expected an error: {r}"))
}

fn assert_ok(r: &Value) {
    assert!(r["error"].is_null(), "unexpected error: {r}");
}

const PAGE: &str = "<!DOCTYPE html><html><head><title>The  Test\n Page</title>\
<style>body { color: red }</style><script>document.write('tracker')</script></head>\
<body><h1>Main heading</h1><p>First paragraph with <strong>bold</strong> text and a \
<a href=\"https://example.org/next\">link</a>.</p><ul><li>alpha</li><li>beta</li></ul>\
<pre><code>let x = 1;</code></pre></body></html>";

#[tokio::test]
async fn html_becomes_markdown_with_its_title() {
    let server = Server::start(|_| Reply::html(PAGE)).await;
    let tmp = tempfile::tempdir().unwrap();
    let r = &extract(tmp.path(), &[server.url("/page")], None).await[0];
    assert_ok(r);
    assert_eq!(r["url"], server.url("/page"));
    assert_eq!(r["title"], "The Test Page");
    let md = r["content"].as_str().unwrap();
    assert!(md.contains("# Main heading"), "{md}");
    assert!(md.contains("**bold**"), "{md}");
    assert!(md.contains("[link](https://example.org/next)"), "{md}");
    assert!(md.contains("alpha") && md.contains("beta"), "{md}");
    assert!(md.contains("let x = 1;"), "{md}");
    assert!(!md.contains("<p>") && !md.contains("<strong>"), "{md}");
    assert!(
        !md.contains("tracker") && !md.contains("color: red"),
        "{md}"
    );
    assert!(r["full_text_path"].is_null());
    let req = &server.requests()[0];
    assert_eq!(req.method, "GET");
    assert!(req.header("user-agent").unwrap().starts_with("toolcell/"));
}

#[tokio::test]
async fn long_page_is_cut_head_and_tail_with_the_full_text_saved() {
    let paras: Vec<String> = (0..400)
        .map(|i| format!("Paragraph-{i:04} says something about item {i} at some length."))
        .collect();
    let body = format!(
        "<html><head><title>Long</title></head><body>{}</body></html>",
        paras
            .iter()
            .map(|p| format!("<p>{p}</p>"))
            .collect::<String>()
    );
    let server = Server::start(move |_| Reply::html(&body)).await;
    let tmp = tempfile::tempdir().unwrap();
    let limit = 2000;
    let r = &extract(tmp.path(), &[server.url("/long")], Some(limit)).await[0];
    assert_ok(r);
    assert_eq!(r["title"], "Long");
    let content = r["content"].as_str().unwrap();

    // Head and tail kept, the middle left out, the marker says how much.
    assert!(content.starts_with("Paragraph-0000"), "{content}");
    assert!(
        content
            .trim_end()
            .ends_with("Paragraph-0399 says something about item 399 at some length.")
    );
    assert!(
        !content.contains("Paragraph-0200"),
        "middle should be omitted"
    );
    assert!(content.contains("characters omitted"), "{content}");
    let marker_start = content.find("\n\n[…").unwrap();
    let marker_end = content.find("…]\n\n").unwrap() + "…]\n\n".len();
    let kept = content[..marker_start].chars().count() + content[marker_end..].chars().count();
    assert_eq!(kept, limit);
    let head = content[..marker_start].chars().count();
    assert_eq!(head, limit * 2 / 5);

    // The full text is in a private file under the spill dir, complete.
    let path = r["full_text_path"].as_str().unwrap();
    assert!(content.contains(path), "the marker names the file");
    let path = Path::new(path);
    assert_eq!(path.parent().unwrap(), tmp.path().join("spill"));
    let full = std::fs::read_to_string(path).unwrap();
    for p in &paras {
        assert!(full.contains(p.as_str()), "{p} missing from the saved text");
    }
    let omitted: usize = content[marker_start..]
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(omitted, full.chars().count() - limit);
    let file_mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(file_mode, 0o600);
    let dir_mode = std::fs::metadata(path.parent().unwrap())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(dir_mode, 0o700);

    // A second cut page gets its own file.
    let r2 = &extract(tmp.path(), &[server.url("/long")], Some(limit)).await[0];
    assert_ne!(r2["full_text_path"], r["full_text_path"]);
}

#[tokio::test]
async fn plain_text_and_json_pass_through() {
    let json_body = r#"{"name": "toolcell", "tags": ["a", "b"]}"#;
    let server = Server::start(move |req| match req.path() {
        "/notes.txt" => Reply::new(
            200,
            "text/plain; charset=utf-8",
            "line one\n<b>not markup</b>\n",
        ),
        "/data.json" => Reply::new(200, "application/json", json_body),
        "/latin1" => Reply::new(200, "text/plain; charset=iso-8859-1", b"caf\xe9".to_vec()),
        _ => Reply::status(404),
    })
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let urls = [
        server.url("/notes.txt"),
        server.url("/data.json"),
        server.url("/latin1"),
    ];
    let rs = extract(tmp.path(), &urls, None).await;
    for r in &rs {
        assert_ok(r);
        assert_eq!(r["title"], "");
    }
    assert_eq!(rs[0]["content"], "line one\n<b>not markup</b>\n");
    assert_eq!(rs[1]["content"], json_body);
    let parsed: Value = serde_json::from_str(rs[1]["content"].as_str().unwrap()).unwrap();
    assert_eq!(parsed["tags"][1], "b");
    assert_eq!(rs[2]["content"], "café");
}

#[tokio::test]
async fn binary_content_types_are_a_per_url_error() {
    let server = Server::start(|req| match req.path() {
        "/logo.png" => Reply::new(200, "image/png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec()),
        "/doc.pdf" => Reply::new(200, "application/pdf", b"%PDF-1.7\n%\xe2\xe3".to_vec()),
        _ => Reply::html("<title>ok</title><p>fine</p>"),
    })
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let urls = [
        server.url("/logo.png"),
        server.url("/doc.pdf"),
        server.url("/"),
    ];
    let rs = extract(tmp.path(), &urls, None).await;
    assert!(error_of(&rs[0]).contains("image/png"), "{}", rs[0]);
    assert_eq!(rs[0]["content"], "");
    assert!(error_of(&rs[1]).contains("application/pdf"), "{}", rs[1]);
    assert_ok(&rs[2]);
    assert_eq!(rs[2]["title"], "ok");
}

#[tokio::test]
async fn http_error_fails_only_that_url() {
    let server = Server::start(|req| match req.path() {
        "/missing" => Reply::status(404),
        "/broken" => Reply::status(503),
        _ => Reply::html("<title>Fine</title><p>still here</p>"),
    })
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let urls = [
        server.url("/missing"),
        server.url("/ok"),
        server.url("/broken"),
    ];
    let rs = extract(tmp.path(), &urls, None).await;
    let e = error_of(&rs[0]);
    assert!(e.contains("HTTP 404 Not Found"), "{e}");
    assert!(!e.contains("after redirects"), "{e}");
    assert_ok(&rs[1]);
    assert_eq!(rs[1]["content"], "still here");
    assert!(error_of(&rs[2]).contains("503"), "{}", rs[2]);
    // Results keep the order of the URLs given.
    for (r, u) in rs.iter().zip(&urls) {
        assert_eq!(r["url"], *u);
    }
}

#[tokio::test]
async fn redirects_are_followed() {
    let server = Server::start(|req| match req.path() {
        "/old" => Reply::redirect("/new"),
        "/loop" => Reply::redirect("/loop"),
        "/moved-away" => Reply::redirect("/gone"),
        "/gone" => Reply::status(404),
        _ => Reply::html("<title>New home</title><p>moved here</p>"),
    })
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let urls = [
        server.url("/old"),
        server.url("/loop"),
        server.url("/moved-away"),
    ];
    let rs = extract(tmp.path(), &urls, None).await;
    assert_ok(&rs[0]);
    assert_eq!(rs[0]["title"], "New home");
    assert_eq!(rs[0]["url"], server.url("/old"));
    assert!(error_of(&rs[1]).contains("redirect"), "{}", rs[1]);
    let e = error_of(&rs[2]);
    assert!(
        e.contains("HTTP 404") && e.contains("/gone (after redirects)"),
        "{e}"
    );
    let loops = server
        .requests()
        .iter()
        .filter(|r| r.path() == "/loop")
        .count();
    assert!(loops <= 11, "redirects must be bounded, saw {loops}");
}

#[tokio::test]
async fn slow_page_times_out_at_the_cell_deadline_without_failing_others() {
    let server = Server::start(|req| match req.path() {
        "/slow" => Reply::html("<p>too late</p>").delayed(Duration::from_secs(10)),
        _ => Reply::html("<title>Quick</title><p>quick</p>"),
    })
    .await;
    let tmp = tempfile::tempdir().unwrap();
    // Long enough that the margin kept before it (a tenth) absorbs
    // scheduling delays on a loaded machine.
    let deadline = Duration::from_millis(1500);
    let started = std::time::Instant::now();
    let out = call_with(
        "web_extract",
        json!({ "urls": [server.url("/slow"), server.url("/fast")] }),
        settings(tmp.path()),
        deadline,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let elapsed = started.elapsed();
    // Cut at the cell's deadline, not when the page comes (10 s). That the
    // answer comes a margin *before* the deadline (so the cell still gets
    // it) is `deadline_margin_leaves_time_to_answer` in src/builtin/web; a
    // wall-clock check of a 150 ms margin would flake on a loaded machine.
    assert!(
        elapsed < deadline + Duration::from_millis(1500),
        "took {elapsed:?}"
    );
    let rs = out["results"].as_array().unwrap();
    let e = error_of(&rs[0]);
    assert!(e.contains("timed out"), "{e}");
    assert_ok(&rs[1]);
    assert_eq!(rs[1]["title"], "Quick");
}

#[tokio::test]
async fn cancelled_cell_stops_the_call() {
    let server =
        Server::start(|_| Reply::html("<p>never</p>").delayed(Duration::from_secs(10))).await;
    let tmp = tempfile::tempdir().unwrap();
    let cancel = CancellationToken::new();
    let started = std::time::Instant::now();
    let call = tokio::spawn(call_with(
        "web_extract",
        json!({ "urls": [server.url("/a")] }),
        settings(tmp.path()),
        Duration::from_secs(30),
        cancel.clone(),
    ));
    // Cancelled while the request waits on the server.
    crate::wait::wait_until("the request has reached the server", || {
        !server.requests().is_empty()
    })
    .await;
    cancel.cancel();
    let err = call.await.unwrap().unwrap_err();
    assert!(
        matches!(err, ToolError::Cancelled("web_extract")),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn non_http_urls_are_per_url_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let urls = [
        "file:///etc/passwd".to_string(),
        "ftp://example.org/x".to_string(),
        "not a url".to_string(),
        "/relative/path".to_string(),
    ];
    let rs = extract(tmp.path(), &urls, None).await;
    assert!(error_of(&rs[0]).contains("read_file"), "{}", rs[0]);
    assert!(error_of(&rs[1]).contains("ftp"), "{}", rs[1]);
    assert!(error_of(&rs[2]).contains("not a valid URL"), "{}", rs[2]);
    assert!(error_of(&rs[3]).contains("not a valid URL"), "{}", rs[3]);
    for r in &rs {
        assert_eq!(r["content"], "");
    }
}

#[tokio::test]
async fn refused_connection_is_a_per_url_error() {
    // Bind then drop a listener: nothing listens on that port any more.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let tmp = tempfile::tempdir().unwrap();
    let rs = extract(tmp.path(), &[format!("http://127.0.0.1:{port}/")], None).await;
    assert!(error_of(&rs[0]).contains("connect"), "{}", rs[0]);
}

#[tokio::test]
async fn oversized_bodies_are_refused() {
    let big = "x".repeat(11 * 1024 * 1024);
    let server = Server::start(move |req| match req.path() {
        "/declared" => Reply::new(200, "text/plain", big.clone()),
        "/streamed" => Reply::new(200, "text/plain", big.clone()).without_length(),
        _ => Reply::new(200, "text/plain", "small"),
    })
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let urls = [
        server.url("/declared"),
        server.url("/streamed"),
        server.url("/small"),
    ];
    let rs = extract(tmp.path(), &urls, None).await;
    assert!(error_of(&rs[0]).contains("larger than 10 MB"), "{}", rs[0]);
    assert!(error_of(&rs[1]).contains("larger than 10 MB"), "{}", rs[1]);
    assert_ok(&rs[2]);
}

#[tokio::test]
async fn untyped_bodies_are_sniffed() {
    let server = Server::start(|req| match req.path() {
        "/html" => {
            Reply::html("<!doctype html><title>Sniffed</title><p>body</p>").without_content_type()
        }
        "/text" => Reply::new(200, "", "just text").without_content_type(),
        _ => Reply::new(200, "", b"\0\x01\x02binary".to_vec()).without_content_type(),
    })
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let urls = [server.url("/html"), server.url("/text"), server.url("/bin")];
    let rs = extract(tmp.path(), &urls, None).await;
    assert_eq!(rs[0]["title"], "Sniffed");
    assert_eq!(rs[1]["content"], "just text");
    assert!(error_of(&rs[2]).contains("content type"), "{}", rs[2]);
}

#[tokio::test]
async fn pathologically_deep_html_does_not_crash() {
    let n = 200_000;
    let body = format!(
        "<title>Deep</title>{}bottom{}",
        "<div>".repeat(n),
        "</div>".repeat(n)
    );
    let server = Server::start(move |_| Reply::html(&body)).await;
    let tmp = tempfile::tempdir().unwrap();
    let r = &extract(tmp.path(), &[server.url("/deep")], None).await[0];
    assert_ok(r);
    assert_eq!(r["title"], "Deep");
    assert!(r["content"].as_str().unwrap().contains("bottom"), "{r}");
}

#[tokio::test]
async fn fetches_run_at_most_four_at_a_time() {
    let server =
        Server::start(|_| Reply::html("<p>x</p>").delayed(Duration::from_millis(150))).await;
    let tmp = tempfile::tempdir().unwrap();
    let urls: Vec<String> = (0..10).map(|i| server.url(&format!("/p{i}"))).collect();
    let rs = extract(tmp.path(), &urls, None).await;
    assert!(rs.iter().all(|r| r["error"].is_null()));
    let max = server.max_in_flight();
    assert!((2..=4).contains(&max), "max concurrent fetches {max}");
}

#[tokio::test]
async fn bad_arguments_name_the_field() {
    let reg = ToolRegistry::builtin().unwrap();
    let t = reg.get("web_extract").unwrap();
    let e = t.validate(&json!({})).unwrap_err();
    assert!(e.contains("urls"), "{e}");
    let e = t
        .validate(&json!({ "urls": "https://example.org" }))
        .unwrap_err();
    assert!(e.contains("urls") && e.contains("sequence"), "{e}");
    let e = t.validate(&json!({ "urls": [], "limit": 3 })).unwrap_err();
    assert!(e.contains("limit"), "{e}");
    let e = t
        .validate(&json!({ "urls": [], "char_limit": -1 }))
        .unwrap_err();
    assert!(e.contains("char_limit"), "{e}");
    assert!(
        t.validate(&json!({ "urls": ["https://example.org"] }))
            .is_ok()
    );

    let tmp = tempfile::tempdir().unwrap();
    let many: Vec<String> = (0..21).map(|i| format!("http://127.0.0.1:9/{i}")).collect();
    let e = call("web_extract", json!({ "urls": many }), settings(tmp.path()))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("at most 20"), "{e}");

    let s = reg.get("web_search").unwrap();
    let e = s.validate(&json!({ "limit": 3 })).unwrap_err();
    assert!(e.contains("query"), "{e}");
    let e = s
        .validate(&json!({ "query": "x", "limit": "many" }))
        .unwrap_err();
    assert!(e.contains("limit"), "{e}");
}

#[test]
fn schemas_show_the_contract_defaults() {
    let reg = ToolRegistry::builtin().unwrap();
    let ex = reg.get("web_extract").unwrap().args_schema();
    assert_eq!(ex["properties"]["char_limit"]["default"], 15000);
    assert_eq!(ex["required"], json!(["urls"]));
    let out = reg.get("web_extract").unwrap().output_schema();
    let item = &out["properties"]["results"]["items"]["properties"];
    for field in ["url", "title", "content", "error", "full_text_path"] {
        assert!(item.get(field).is_some(), "{field} missing from {out}");
    }
    let s = reg.get("web_search").unwrap().args_schema();
    assert_eq!(s["properties"]["limit"]["default"], 5);
    assert_eq!(s["required"], json!(["query"]));
    let out = reg.get("web_search").unwrap().output_schema();
    let hit = &out["properties"]["data"]["properties"]["web"]["items"]["properties"];
    for field in ["url", "title", "description"] {
        assert!(hit.get(field).is_some(), "{field} missing from {out}");
    }
}

// ---------------------------------------------------------------- web_search

fn searxng_body(n: usize) -> String {
    let results: Vec<Value> = (0..n)
        .map(|i| {
            json!({
                "url": format!("https://site{i}.example/page"),
                "title": format!("Result {i}"),
                "content": format!("Snippet number {i}"),
                "engine": "duckduckgo",
                "score": 1.0
            })
        })
        .collect();
    json!({ "query": "q", "number_of_results": n, "results": results, "answers": [],
            "suggestions": [], "unresponsive_engines": [] })
    .to_string()
}

fn brave_body(n: usize) -> String {
    let results: Vec<Value> = (0..n)
        .map(|i| {
            json!({
                "type": "search_result",
                "url": format!("https://brave{i}.example/"),
                "title": format!("Brave <strong>hit</strong> {i}"),
                "description": format!("About <strong>rust</strong> &amp; more {i}"),
                "language": "en"
            })
        })
        .collect();
    json!({ "type": "search", "query": { "original": "q" },
            "web": { "type": "search", "results": results } })
    .to_string()
}

#[tokio::test]
async fn searxng_results_and_limit() {
    let server = Server::start(|req| {
        if req.path() == "/search" {
            Reply::new(200, "application/json", searxng_body(8))
        } else {
            Reply::status(404)
        }
    })
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let s = settings(tmp.path()).web(WebSettings::new("searxng", server.url("/")));
    let out = call(
        "web_search",
        json!({ "query": "rust async & tokio", "limit": 3 }),
        s,
    )
    .await
    .unwrap();
    let web = out["data"]["web"].as_array().unwrap();
    assert_eq!(web.len(), 3);
    assert_eq!(
        web[0],
        json!({ "url": "https://site0.example/page", "title": "Result 0",
                "description": "Snippet number 0" })
    );
    assert_eq!(web[2]["url"], "https://site2.example/page");
    let req = &server.requests()[0];
    assert_eq!(req.path(), "/search");
    assert_eq!(req.query("q").as_deref(), Some("rust async & tokio"));
    assert_eq!(req.query("format").as_deref(), Some("json"));

    // Default limit is 5.
    let s = settings(tmp.path()).web(WebSettings::new("searxng", server.url("")));
    let out = call("web_search", json!({ "query": "x" }), s)
        .await
        .unwrap();
    assert_eq!(out["data"]["web"].as_array().unwrap().len(), 5);
}

#[tokio::test]
async fn brave_results_key_header_and_limit() {
    let key = "BSA-test-key-0123456789";
    let server = Server::start(move |req| {
        if req.header("x-subscription-token") == Some(key) {
            Reply::new(200, "application/json", brave_body(10))
        } else {
            Reply::new(401, "application/json", r#"{"error":"bad token"}"#)
        }
    })
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let s = settings(tmp.path())
        .web(WebSettings::new("brave", server.url("/res/v1/web/search")).api_key(key));
    let out = call("web_search", json!({ "query": "rust lang", "limit": 4 }), s)
        .await
        .unwrap();
    let web = out["data"]["web"].as_array().unwrap();
    assert_eq!(web.len(), 4);
    assert_eq!(
        web[1],
        json!({ "url": "https://brave1.example/", "title": "Brave hit 1",
                "description": "About rust & more 1" })
    );
    let req = &server.requests()[0];
    assert_eq!(req.path(), "/res/v1/web/search");
    assert_eq!(req.header("x-subscription-token"), Some(key));
    assert_eq!(req.query("q").as_deref(), Some("rust lang"));
    assert_eq!(req.query("count").as_deref(), Some("4"));
    assert_eq!(req.header("accept"), Some("application/json"));
}

#[tokio::test]
async fn brave_rejection_never_shows_the_key() {
    let key = "BSA-secret-key-must-not-leak";
    // The provider echoes the key back in its error body.
    let server = Server::start(move |req| {
        let sent = req.header("x-subscription-token").unwrap_or("").to_string();
        Reply::new(
            401,
            "application/json",
            format!(r#"{{"error":"token {sent} is invalid"}}"#),
        )
    })
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let s = settings(tmp.path()).web(WebSettings::new("brave", server.url("/s")).api_key(key));
    let e = call("web_search", json!({ "query": "x" }), s)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("401"), "{e}");
    assert!(e.contains("search_api_key_env"), "{e}");
    assert!(!e.contains(key), "key leaked: {e}");
    assert!(server.requests()[0].header("x-subscription-token") == Some(key));
}

#[tokio::test]
async fn brave_without_web_results_is_empty() {
    let server = Server::start(|_| {
        Reply::new(
            200,
            "application/json",
            r#"{"type":"search","query":{"original":"zzz"}}"#,
        )
    })
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let s = settings(tmp.path()).web(WebSettings::new("brave", server.url("/s")).api_key("k"));
    let out = call("web_search", json!({ "query": "zzz" }), s)
        .await
        .unwrap();
    assert_eq!(out, json!({ "data": { "web": [] } }));
}

#[tokio::test]
async fn no_provider_is_a_configuration_error() {
    let tmp = tempfile::tempdir().unwrap();
    let e = call(
        "web_search",
        json!({ "query": "anything" }),
        settings(tmp.path()),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("no search provider is configured"), "{e}");
    assert!(e.contains("[web]"), "{e}");
    assert!(e.contains("search_provider = \"searxng\""), "{e}");
    assert!(e.contains("search_url"), "{e}");
    assert!(e.contains("search_api_key_env = \"BRAVE_API_KEY\""), "{e}");

    let s = settings(tmp.path()).web(WebSettings::new("searxng", ""));
    let e = call("web_search", json!({ "query": "x" }), s)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("search_url is empty"), "{e}");

    let s = settings(tmp.path()).web(WebSettings::new("brave", ""));
    let e = call("web_search", json!({ "query": "x" }), s)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("no API key"), "{e}");

    let s = settings(tmp.path()).web(WebSettings::new("google", "http://127.0.0.1:9"));
    let e = call("web_search", json!({ "query": "x" }), s)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unknown search_provider") && e.contains("google"),
        "{e}"
    );
}

#[tokio::test]
async fn provider_http_errors_and_malformed_answers_are_clear() {
    let server = Server::start(|req| match req.query("q").as_deref() {
        Some("forbidden") => Reply::status(403),
        Some("down") => Reply::status(500),
        Some("html") => Reply::html("<html><body>Welcome to nginx!</body></html>"),
        Some("shape") => Reply::new(200, "application/json", r#"{"results": "nope"}"#),
        _ => Reply::new(200, "application/json", searxng_body(1)),
    })
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let run = |q: &'static str| {
        let s = settings(tmp.path()).web(WebSettings::new("searxng", server.url("")));
        async move { call("web_search", json!({ "query": q }), s).await }
    };
    let e = run("forbidden").await.unwrap_err().to_string();
    assert!(
        e.contains("HTTP 403") && e.contains("search.formats"),
        "{e}"
    );
    let e = run("down").await.unwrap_err().to_string();
    assert!(e.contains("HTTP 500"), "{e}");
    let e = run("html").await.unwrap_err().to_string();
    assert!(
        e.contains("not its JSON search format") && e.contains("nginx"),
        "{e}"
    );
    let e = run("shape").await.unwrap_err().to_string();
    assert!(e.contains("not its JSON search format"), "{e}");
    assert!(run("fine").await.is_ok());
}

#[tokio::test]
async fn search_arguments_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let s = || settings(tmp.path()).web(WebSettings::new("searxng", "http://127.0.0.1:9"));
    let e = call("web_search", json!({ "query": "  " }), s())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("`query` is empty"), "{e}");
    let e = call("web_search", json!({ "query": "x", "limit": 0 }), s())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("between 1 and 20"), "{e}");
    let e = call("web_search", json!({ "query": "x", "limit": 21 }), s())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("between 1 and 20"), "{e}");
}

#[tokio::test]
async fn slow_provider_times_out_before_the_cell_deadline() {
    let server = Server::start(|_| {
        Reply::new(200, "application/json", searxng_body(1)).delayed(Duration::from_secs(10))
    })
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let s = settings(tmp.path()).web(WebSettings::new("searxng", server.url("")));
    let started = std::time::Instant::now();
    let e = call_with(
        "web_search",
        json!({ "query": "x" }),
        s,
        Duration::from_millis(1500),
        CancellationToken::new(),
    )
    .await
    .unwrap_err();
    // Cut at the cell's deadline (1.5 s, with room for a loaded machine),
    // not when the provider answers (10 s).
    assert!(
        started.elapsed() < Duration::from_millis(3000),
        "{:?}",
        started.elapsed()
    );
    assert!(e.to_string().contains("did not answer"), "{e}");
}

#[tokio::test]
async fn https_goes_through_rustls_and_handshake_failures_are_per_url() {
    // A server that answers any connection with plain HTTP at once: the TLS
    // client starts (rustls, the process-wide client), gets garbage for a
    // ServerHello, and that URL alone fails.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt as _;
        while let Ok((mut s, _)) = listener.accept().await {
            let _ = s
                .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                .await;
            let _ = s.shutdown().await;
        }
    });
    let server = Server::start(|_| Reply::html("<title>plain</title>")).await;
    let tmp = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let rs = extract(
        tmp.path(),
        &[format!("https://127.0.0.1:{port}/"), server.url("/")],
        None,
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(10));
    let e = error_of(&rs[0]);
    assert!(e.contains("TLS handshake failed"), "{e}");
    assert_ok(&rs[1]);
}

// ---- redaction of fetched text ---------------------------------------------

/// Tokens the built-in rules know, each with `_`s that markdown escapes.
const TOKENS: [(&str, &str); 3] = [
    ("ghp_R8fK2mQ9xLp4Vt7Wn3Zc6Yb1Hd5Js0GaEu2T", "github_token"),
    ("sk_live_4eC39HqLyjWDarjtT1zdp7dcXy", "stripe_key"),
    ("hf_kD8sJ2mN4pQ7rT1vW3xZ5yB6cF9gH0jLaQ", "huggingface_token"),
];

/// A value only the host knows (as if from its environment).
const HOST_SECRET: &str = "Zq8-host-only-value-90210";

fn no_secret_in(text: &str, what: &str) {
    for (tok, _) in TOKENS {
        assert!(!text.contains(tok), "{tok} in {what}");
        let escaped = tok.replace('_', "\\_");
        assert!(!text.contains(&escaped), "{escaped} in {what}");
    }
    assert!(!text.contains(HOST_SECRET), "the host secret in {what}");
}

#[tokio::test]
async fn fetched_text_and_its_saved_full_text_are_redacted() {
    let secrets = || {
        format!(
            "Keys: {} and {} and {}; host: {HOST_SECRET}.",
            TOKENS[0].0, TOKENS[1].0, TOKENS[2].0
        )
    };
    let paras: String = (0..300)
        .map(|i| format!("<p>Filler paragraph {i} of the page.</p>"))
        .collect();
    let html = format!(
        "<html><head><title>{}</title></head><body><p>{}</p>{paras}\
         <p><a href=\"https://example.org/?key={}\">{}</a></p>{paras}<p>{}</p></body></html>",
        TOKENS[0].0,
        secrets(),
        TOKENS[1].0,
        HOST_SECRET,
        secrets()
    );
    let text = format!("plain {}\n", secrets());
    let server = Server::start(move |req| match req.path() {
        "/page" => Reply::html(&html),
        _ => Reply::new(200, "text/plain", text.clone()),
    })
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let redactor = toolcell_redact::Redactor::new([HOST_SECRET]).unwrap();
    let out = call(
        "web_extract",
        json!({ "urls": [server.url("/page"), server.url("/plain")], "char_limit": 600 }),
        settings(tmp.path()).redactor(redactor),
    )
    .await
    .unwrap();
    let rs = out["results"].as_array().unwrap();
    let page = &rs[0];
    assert_ok(page);
    let content = page["content"].as_str().unwrap();
    no_secret_in(content, "the content");
    no_secret_in(page["title"].as_str().unwrap(), "the title");
    assert_eq!(page["title"], "«redacted:github_token»");
    // The head of the cut content holds the first paragraph, masked with
    // unescaped markers naming each kind.
    for (_, kind) in TOKENS {
        assert!(
            content.contains(&format!("«redacted:{kind}»")),
            "{kind}: {content}"
        );
    }
    assert!(content.contains("host: «redacted:secret»"), "{content}");

    // The saved full text (middle included) is redacted too.
    let saved = std::fs::read_to_string(page["full_text_path"].as_str().unwrap()).unwrap();
    no_secret_in(&saved, "the saved full text");
    assert!(saved.contains("Filler paragraph 150"), "the whole page");
    assert_eq!(saved.matches("«redacted:secret»").count(), 3, "{saved}");
    assert!(saved.contains("«redacted:stripe_key»"), "the link's URL");

    let plain = &rs[1];
    assert_ok(plain);
    let content = plain["content"].as_str().unwrap();
    no_secret_in(content, "the plain-text page");
    assert!(content.contains("host: «redacted:secret»"), "{content}");
}
