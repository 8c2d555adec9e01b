//! A small HTTP/1.1 server on 127.0.0.1 for the web tool tests: one
//! response per connection (`Connection: close`), routes given as a
//! closure, every request recorded so tests can check what arrived.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A request as the server saw it.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub method: String,
    /// Path and query, as sent (`/search?q=a+b&format=json`).
    pub target: String,
    /// Header names lowercased.
    pub headers: Vec<(String, String)>,
}

impl Request {
    pub(crate) fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }

    /// The decoded query parameter `name`.
    pub(crate) fn query(&self, name: &str) -> Option<String> {
        let q = self.target.split_once('?')?.1;
        q.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k == name).then(|| percent_decode(v))
        })
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What the server answers.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Waits this long before answering.
    pub delay: Duration,
    /// Sends no `Content-Length` (the body ends when the connection closes).
    pub no_length: bool,
}

impl Reply {
    pub(crate) fn new(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Self {
        Self {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body: body.into(),
            delay: Duration::ZERO,
            no_length: false,
        }
    }

    pub(crate) fn html(body: &str) -> Self {
        Self::new(200, "text/html; charset=utf-8", body)
    }

    pub(crate) fn status(status: u16) -> Self {
        Self::new(status, "text/plain", format!("status {status}"))
    }

    pub(crate) fn redirect(to: &str) -> Self {
        let mut r = Self::new(302, "text/plain", "moved");
        r.headers.push(("Location".into(), to.into()));
        r
    }

    pub(crate) fn delayed(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }

    pub(crate) fn without_length(mut self) -> Self {
        self.no_length = true;
        self
    }

    pub(crate) fn without_content_type(mut self) -> Self {
        self.headers
            .retain(|(k, _)| !k.eq_ignore_ascii_case("content-type"));
        self
    }
}

type Routes = dyn Fn(&Request) -> Reply + Send + Sync;

/// A running server; stops when dropped.
pub(crate) struct Server {
    addr: std::net::SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
    max_in_flight: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Server {
    /// Starts a server on 127.0.0.1:0 answering with `routes`.
    pub(crate) async fn start(routes: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let max_in_flight = Arc::new(AtomicUsize::new(0));
        let routes: Arc<Routes> = Arc::new(routes);
        let task = {
            let requests = Arc::clone(&requests);
            let max_in_flight = Arc::clone(&max_in_flight);
            tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let routes = Arc::clone(&routes);
                    let requests = Arc::clone(&requests);
                    let in_flight = Arc::clone(&in_flight);
                    let max_in_flight = Arc::clone(&max_in_flight);
                    tokio::spawn(async move {
                        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        max_in_flight.fetch_max(now, Ordering::SeqCst);
                        let _ = serve(stream, &*routes, &requests).await;
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                    });
                }
            })
        };
        Self {
            addr,
            requests,
            max_in_flight,
            task,
        }
    }

    /// `http://127.0.0.1:port{path}`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Every request received so far.
    pub(crate) fn requests(&self) -> Vec<Request> {
        self.requests.lock().expect("lock").clone()
    }

    /// The most connections that were being answered at once.
    pub(crate) fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    mut stream: TcpStream,
    routes: &Routes,
    requests: &Mutex<Vec<Request>>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > 64 * 1024 {
            return Ok(());
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let method = first.next().unwrap_or("").to_string();
    let target = first.next().unwrap_or("").to_string();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let req = Request {
        method,
        target,
        headers,
    };
    requests.lock().expect("lock").push(req.clone());
    let reply = routes(&req);
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let mut out = format!("HTTP/1.1 {} X\r\nConnection: close\r\n", reply.status);
    for (k, v) in &reply.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    if !reply.no_length {
        out.push_str(&format!("Content-Length: {}\r\n", reply.body.len()));
    }
    out.push_str("\r\n");
    stream.write_all(out.as_bytes()).await?;
    for piece in reply.body.chunks(64 * 1024) {
        stream.write_all(piece).await?;
    }
    stream.shutdown().await?;
    Ok(())
}
