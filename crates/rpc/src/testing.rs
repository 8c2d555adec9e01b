//! Helpers for testing code that uses the server: an in-process dispatcher
//! with a few trivial tools, and a client connection (in-memory or over a
//! real socket).

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

use crate::dispatch::{BoxFuture, CellContext, Dispatch, ToolFailure};
use crate::server::Server;

/// A dispatcher with three tools:
///
/// - `echo {…}` → `{"cell": <cell id>, "args": {…}}`; the parameter
///   `danger` is blocked, and a non-object `args` fails validation;
/// - `sleep {"ms": n}` → `{"slept_ms": n}` after `n` milliseconds
///   (`ms` must be a non-negative integer);
/// - `fail {"message"?: str}` → a tool failure with that message.
///
/// It counts calls started and finished, so tests can see that a
/// cancelled call was really dropped.
#[derive(Debug, Default)]
pub struct EchoDispatch {
    started: AtomicUsize,
    finished: Arc<AtomicUsize>,
}

impl EchoDispatch {
    /// A fresh dispatcher with zeroed counters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Calls whose future was created (dispatches).
    pub fn started(&self) -> usize {
        self.started.load(Ordering::SeqCst)
    }

    /// Calls whose future ran to completion (not dropped by a timeout or a
    /// settled cell).
    pub fn finished(&self) -> usize {
        self.finished.load(Ordering::SeqCst)
    }
}

impl Dispatch for EchoDispatch {
    fn knows(&self, tool: &str) -> bool {
        matches!(tool, "echo" | "sleep" | "fail")
    }

    fn blocked_params(&self, tool: &str) -> &[&'static str] {
        if tool == "echo" { &["danger"] } else { &[] }
    }

    fn validate(&self, tool: &str, args: &Value) -> Result<(), String> {
        let Some(map) = args.as_object() else {
            return Err("arguments must be an object".to_owned());
        };
        match tool {
            "sleep" => match map.get("ms") {
                Some(v) if v.as_u64().is_some() => Ok(()),
                Some(v) => Err(format!(
                    "field \"ms\" must be a non-negative integer, got {v}"
                )),
                None => Err("field \"ms\" is required (milliseconds to sleep)".to_owned()),
            },
            "fail" => match map.get("message") {
                None | Some(Value::String(_)) => Ok(()),
                Some(v) => Err(format!("field \"message\" must be a string, got {v}")),
            },
            _ => Ok(()),
        }
    }

    fn call(
        &self,
        tool: &str,
        args: Value,
        cx: CellContext,
    ) -> BoxFuture<'static, Result<Value, ToolFailure>> {
        self.started.fetch_add(1, Ordering::SeqCst);
        // The future is 'static, so it gets its own handle on the counter.
        let finished = Arc::clone(&self.finished);
        let bump = move || finished.fetch_add(1, Ordering::SeqCst);
        match tool {
            "echo" => {
                let result = json!({"cell": cx.cell_id(), "args": args});
                bump();
                Box::pin(std::future::ready(Ok(result)))
            }
            "sleep" => {
                let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(0);
                Box::pin(async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    bump();
                    Ok(json!({"slept_ms": ms}))
                })
            }
            _ => {
                let message = args
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("fail was called")
                    .to_owned();
                bump();
                Box::pin(std::future::ready(Err(ToolFailure::new(message))))
            }
        }
    }
}

/// A client connection speaking the line protocol of docs/protocol.md
/// ("Request and reply"), over an in-memory pipe ([`Connection::open`]) or a
/// real socket ([`Connection::connect`]). Requests are answered in order, so
/// each method sends one line and reads one reply line.
pub struct Connection {
    reader: BufReader<Box<dyn AsyncRead + Unpin + Send>>,
    writer: Box<dyn AsyncWrite + Unpin + Send>,
    token: String,
    line: Vec<u8>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").finish_non_exhaustive()
    }
}

impl Connection {
    /// An in-memory connection to `server` (no socket, no filesystem).
    pub fn open(server: &Server) -> Self {
        let (client, server_end) = tokio::io::duplex(256 * 1024);
        server.serve_stream(server_end);
        let (r, w) = tokio::io::split(client);
        Self::from_parts(Box::new(r), Box::new(w), server.token().expose())
    }

    /// Connects to an endpoint as found in `TOOLCELL_RPC`
    /// (`unix:/path` or `tcp://host:port`).
    ///
    /// # Errors
    /// An unknown endpoint scheme or a failed connect.
    pub async fn connect(endpoint: &str, token: &str) -> io::Result<Self> {
        if let Some(path) = endpoint.strip_prefix("unix:") {
            let s = tokio::net::UnixStream::connect(path).await?;
            let (r, w) = s.into_split();
            Ok(Self::from_parts(Box::new(r), Box::new(w), token))
        } else if let Some(addr) = endpoint.strip_prefix("tcp://") {
            let s = tokio::net::TcpStream::connect(addr).await?;
            s.set_nodelay(true)?;
            let (r, w) = s.into_split();
            Ok(Self::from_parts(Box::new(r), Box::new(w), token))
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("unknown endpoint {endpoint:?}"),
            ))
        }
    }

    fn from_parts(
        reader: Box<dyn AsyncRead + Unpin + Send>,
        writer: Box<dyn AsyncWrite + Unpin + Send>,
        token: &str,
    ) -> Self {
        Self {
            reader: BufReader::new(reader),
            writer,
            token: token.to_owned(),
            line: Vec::new(),
        }
    }

    /// Calls `tool` with `args` and the connection's token; returns the
    /// parsed reply object.
    ///
    /// # Errors
    /// I/O errors, or a reply that is not JSON.
    pub async fn call(&mut self, tool: &str, args: Value) -> io::Result<Value> {
        let req = json!({"tool": tool, "args": args, "token": self.token});
        self.request(&req).await
    }

    /// Sends any JSON value as a request line and reads the reply.
    ///
    /// # Errors
    /// I/O errors, or a reply that is not JSON.
    pub async fn request(&mut self, req: &Value) -> io::Result<Value> {
        let mut line = serde_json::to_vec(req)?;
        line.push(b'\n');
        self.send_raw(&line).await?;
        self.read_reply().await
    }

    /// Writes raw bytes (which may hold any number of lines, or half of one).
    ///
    /// # Errors
    /// I/O errors.
    pub async fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.writer.write_all(bytes).await?;
        self.writer.flush().await
    }

    /// Reads one reply line and parses it; `UnexpectedEof` when the server
    /// closed the connection.
    ///
    /// # Errors
    /// I/O errors, EOF, or a reply that is not exactly one JSON line.
    pub async fn read_reply(&mut self) -> io::Result<Value> {
        self.line.clear();
        let n = self.reader.read_until(b'\n', &mut self.line).await?;
        if n == 0 || self.line.last() != Some(&b'\n') {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(serde_json::from_slice(&self.line)?)
    }

    /// The token this connection sends.
    pub fn token(&self) -> &str {
        &self.token
    }
}
