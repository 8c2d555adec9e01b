//! The request channel to a runner (fd 3, or stdin for in-band kernels) and
//! the tool calls that travel on it in-band.

#[allow(clippy::wildcard_imports)]
use super::*;

/// The request channel to the runner (fd 3 for a local Python kernel,
/// stdin for a remote, R or JavaScript kernel). Writers take turns:
/// `execute`, `interrupt`, `shutdown` and in-band tool replies never
/// interleave within a line.
pub(crate) struct RequestPipe {
    pub(super) w: tokio::sync::Mutex<Option<Box<dyn tokio::io::AsyncWrite + Send + Unpin>>>,
}

impl RequestPipe {
    pub(super) fn new(w: impl tokio::io::AsyncWrite + Send + Unpin + 'static) -> Arc<Self> {
        Arc::new(Self {
            w: tokio::sync::Mutex::new(Some(Box::new(w))),
        })
    }

    /// Writes one whole request (or the bootstrap payload).
    ///
    /// The writer is out of the channel while it writes and goes back only
    /// once the whole line is written: a write that fails, that stalls for
    /// [`WRITE_STALL`], or whose future is dropped half-way (a caller's
    /// timeout, a cell that gave up) may have left part of a line, so the
    /// channel is closed instead — the runner sees EOF and ends, and no
    /// later request is read glued to a torn one.
    pub(crate) async fn send(&self, bytes: &[u8]) -> std::io::Result<()> {
        self.send_within(bytes, Some(WRITE_STALL)).await
    }

    /// [`RequestPipe::send`] with `stall` as the bound on a write that moves
    /// nothing (`None`: no bound of its own; the caller bounds it, as a
    /// cell's `execute` is by the cell's deadline).
    pub(super) async fn send_within(
        &self,
        bytes: &[u8],
        stall: Option<Duration>,
    ) -> std::io::Result<()> {
        let mut g = self.w.lock().await;
        let Some(mut w) = g.take() else {
            return Err(std::io::ErrorKind::BrokenPipe.into());
        };
        let stalled = |limit: Duration| {
            tracing::warn!(
                "a kernel read nothing of a request for {limit:?}; its request channel is closed"
            );
            std::io::Error::from(std::io::ErrorKind::TimedOut)
        };
        let mut rest = bytes;
        while !rest.is_empty() {
            let wrote = match stall {
                Some(limit) => tokio::time::timeout(limit, w.write(rest))
                    .await
                    .map_err(|_| stalled(limit))?,
                None => w.write(rest).await,
            };
            match wrote {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => rest = rest.get(n..).unwrap_or_default(),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        match stall {
            Some(limit) => tokio::time::timeout(limit, w.flush())
                .await
                .map_err(|_| stalled(limit))??,
            None => w.flush().await?,
        }
        *g = Some(w);
        Ok(())
    }

    /// Closes the channel (the runner sees EOF and kills its group). A
    /// write in progress (a stalled remote) keeps it; killing the command
    /// ends that write.
    pub(super) fn close(&self) {
        if let Ok(mut g) = self.w.try_lock() {
            *g = None;
        }
    }
}

/// Runs the `tool_call` frames a runner sends in-band: docs/protocol.md
/// ("Remote kernels: the same protocol over a command's stdio").
#[derive(Clone)]
pub(super) struct Inband {
    pub(super) caller: InbandCaller,
    pub(super) pipe: Arc<RequestPipe>,
    pub(super) slots: Arc<tokio::sync::Semaphore>,
}

#[derive(serde::Deserialize)]
pub(super) struct ToolCallFrame {
    pub(super) id: u64,
    pub(super) tool: String,
    #[serde(default)]
    pub(super) args: serde_json::Value,
}

impl Inband {
    /// Takes a `tool_call` frame: checks and dispatches it through the rpc
    /// server's in-band caller, then writes the `tool_reply` line.
    pub(super) async fn take(&self, body: &[u8]) {
        let call: ToolCallFrame = match serde_json::from_slice(body) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("dropped an unreadable tool_call frame: {e}");
                return;
            }
        };
        let Ok(permit) = Arc::clone(&self.slots).acquire_owned().await else {
            return;
        };
        let this = self.clone();
        tokio::spawn(async move {
            let reply = this.caller.call(&call.tool, call.args).await;
            let mut line = Vec::with_capacity(reply.len() + 48);
            line.extend_from_slice(b"{\"type\":\"tool_reply\",\"id\":");
            line.extend_from_slice(call.id.to_string().as_bytes());
            line.extend_from_slice(b",\"reply\":");
            line.extend_from_slice(&reply);
            line.extend_from_slice(b"}\n");
            let _ = this.pipe.send(&line).await;
            drop(permit);
        });
    }
}

pub(super) fn is_frame_of(body: &[u8], kind: &str) -> bool {
    body.strip_prefix(b"{\"type\":\"")
        .and_then(|rest| rest.strip_prefix(kind.as_bytes()))
        .is_some_and(|rest| rest.first() == Some(&b'"'))
}

/// A request being written to a kernel, polled beside the cell's events.
pub(super) type SendFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<()>> + Send>>;
