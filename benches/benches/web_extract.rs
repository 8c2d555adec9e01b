//! `web_extract` end to end, as a cell's call runs it: through the registry,
//! over HTTP from a loopback server in this process, HTML → markdown with
//! the title, the result serialized to JSON. Pages are article-like HTML
//! (`toolcell_benches::web::html_page`) of 10 kB, 100 kB and 1 MB; for big
//! pages the conversion dominates. `cut_and_spill` adds the default
//! `char_limit` cut and the full-text file write.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use toolcell_benches::web::html_page;
use toolcell_tools::{ToolContext, ToolRegistry, ToolSettings};

/// Serves `pages[n]` at `/n`, one response per connection.
async fn serve(pages: Arc<Vec<String>>) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                continue;
            };
            let pages = Arc::clone(&pages);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                let head = String::from_utf8_lossy(&got);
                let idx: usize = head
                    .split_whitespace()
                    .nth(1)
                    .and_then(|p| p.trim_start_matches('/').parse().ok())
                    .unwrap_or(0);
                let body = &pages[idx.min(pages.len() - 1)];
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(reply.as_bytes()).await;
                let _ = s.write_all(body.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    addr
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let sizes = [10_000usize, 100_000, 1_000_000];
    let pages: Arc<Vec<String>> = Arc::new(sizes.iter().map(|&n| html_page(n)).collect());
    let addr = rt.block_on(serve(Arc::clone(&pages)));
    let spill = tempfile::tempdir().unwrap();
    let settings = Arc::new(ToolSettings::new(spill.path()).spill_dir(spill.path().join("spill")));
    let registry = ToolRegistry::builtin().unwrap();
    let tool = Arc::clone(registry.get("web_extract").unwrap());
    let run = |args: serde_json::Value| {
        let cx = ToolContext::new(
            Arc::clone(&settings),
            tokio::time::Instant::now() + Duration::from_secs(60),
            CancellationToken::new(),
        );
        let out = rt.block_on(tool.call(args, cx)).unwrap();
        assert!(out["results"][0]["error"].is_null(), "{out}");
        out
    };

    let mut g = c.benchmark_group("web_extract");
    for (i, page) in pages.iter().enumerate() {
        g.throughput(Throughput::Bytes(page.len() as u64));
        let args = json!({ "urls": [format!("http://{addr}/{i}")], "char_limit": 100_000_000 });
        g.bench_function(format!("convert/{}kB", page.len() / 1000), |b| {
            b.iter(|| run(args.clone()));
        });
    }
    let args = json!({ "urls": [format!("http://{addr}/1")] });
    g.throughput(Throughput::Bytes(pages[1].len() as u64));
    g.bench_function("cut_and_spill/100kB", |b| {
        b.iter(|| {
            let out = run(args.clone());
            // Keep the spill dir from growing for the whole run.
            if let Some(p) = out["results"][0]["full_text_path"].as_str() {
                let _ = std::fs::remove_file(p);
            }
        });
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(8));
    targets = bench
}
criterion_main!(benches);
