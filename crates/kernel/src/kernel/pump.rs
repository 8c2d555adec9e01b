//! Reading a kernel's stdout and stderr: raw chunks and frames, one reader
//! per pipe, into one bounded channel.

#[allow(clippy::wildcard_imports)]
use super::*;

#[derive(Debug)]
pub(super) enum Ev {
    Raw(StreamKind, Vec<u8>),
    Frame(StreamKind, Vec<u8>),
    Eof(StreamKind),
}

pub(super) fn idx(s: StreamKind) -> usize {
    match s {
        StreamKind::Stdout => 0,
        StreamKind::Stderr => 1,
    }
}

/// One side (stdout or stderr) of a kernel's output, read by [`pump`].
pub(super) struct Side {
    pub(super) which: StreamKind,
    pub(super) fd: Option<tokio::io::unix::AsyncFd<OwnedFd>>,
    pub(super) dec: Decoder,
    /// When the bytes the decoder holds back are released as output.
    pub(super) release_at: Option<Instant>,
}

impl Side {
    pub(super) fn new(fd: Option<OwnedFd>, which: StreamKind, sentinel: &Sentinel) -> Self {
        Self {
            which,
            fd: fd.and_then(|fd| {
                // tokio hands the pipe back in blocking mode.
                use nix::fcntl::{FcntlArg, OFlag, fcntl};
                let flags = OFlag::from_bits_truncate(fcntl(&fd, FcntlArg::F_GETFL).ok()?);
                fcntl(&fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK)).ok()?;
                // SAFETY: `fd` is an `OwnedFd` moved into the AsyncFd, which
                // owns it until it is dropped; nothing else closes it.
                unsafe { tokio::io::unix::AsyncFd::register(fd) }.ok()
            }),
            dec: Decoder::new(sentinel),
            release_at: None,
        }
    }
}

impl Side {
    /// The pipe ended (or failed): what the decoder holds is output.
    pub(super) fn close(&mut self, batch: &mut Vec<Ev>) {
        self.fd = None;
        self.release_at = None;
        if let Some(ev) = self.dec.finish() {
            batch.push(Ev::Raw(self.which, ev.bytes().to_vec()));
        }
        batch.push(Ev::Eof(self.which));
    }
}

/// What a non-blocking read of one side gave.
pub(super) enum Got {
    Bytes(usize),
    Nothing,
    Eof,
}

pub(super) fn read_now(fd: &tokio::io::unix::AsyncFd<OwnedFd>, buf: &mut [u8]) -> Got {
    loop {
        match nix::unistd::read(fd.get_ref(), buf) {
            Ok(0) => return Got::Eof,
            Ok(n) => return Got::Bytes(n),
            Err(nix::errno::Errno::EINTR) => {}
            Err(nix::errno::Errno::EAGAIN) => return Got::Nothing,
            Err(_) => return Got::Eof,
        }
    }
}

/// Clears `fd`'s read readiness if the runtime has it marked ready, without
/// waiting (the caller reads `fd` next).
fn clear_if_ready(fd: Option<&tokio::io::unix::AsyncFd<OwnedFd>>) {
    let Some(fd) = fd else { return };
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    if let std::task::Poll::Ready(Ok(mut g)) = fd.poll_read_ready(&mut cx) {
        g.clear_ready();
    }
}

/// Reads a kernel's stdout and stderr pipes, decodes their frames, and sends
/// the events to the kernel's channel, until both pipes reach EOF.
///
/// One task reads both pipes, and after every wake-up it reads whatever is
/// ready on either before it sends and sleeps again: the `end` frame
/// (stderr) and the `result` frame (stdout) a runner writes back to back
/// cost one wake-up of this task and one of the cell's, not two each.
pub(super) async fn pump(
    out: Option<OwnedFd>,
    err: Option<OwnedFd>,
    sentinel: Sentinel,
    tx: mpsc::Sender<Ev>,
    busy: Arc<AtomicUsize>,
    inband: Option<Inband>,
) {
    let mut sides = [
        Side::new(out, StreamKind::Stdout, &sentinel),
        Side::new(err, StreamKind::Stderr, &sentinel),
    ];
    let mut buf = vec![0u8; READ_CHUNK];
    let mut batch: Vec<Ev> = Vec::new();
    while sides.iter().any(|s| s.fd.is_some()) {
        // Read every side until neither has anything (a chunk per side per
        // round, so one busy pipe cannot starve the other or hold a batch).
        let mut read_any = false;
        // A short read empties a pipe: what comes after it raises a new
        // readiness event. When every side was emptied, wait for that
        // instead of reading each once more to be told EAGAIN.
        let mut drained = true;
        // From before a read until what it read is in the channel, the pump
        // is busy: a cell about to start waits for it (see
        // `Kernel::settle_between`), which sees the bytes in the pipe, in
        // the pump's hands or in the channel, never in none of them.
        busy.store(1, Ordering::SeqCst);
        for side in &mut sides {
            let Some(fd) = &side.fd else { continue };
            match read_now(fd, &mut buf) {
                Got::Nothing => {}
                Got::Bytes(n) => {
                    read_any = true;
                    drained &= n < buf.len();
                    let mut raw: Vec<u8> = Vec::new();
                    for ev in side.dec.feed(&buf[..n]) {
                        match ev {
                            Event::Frame(body) => {
                                if !raw.is_empty() {
                                    batch.push(Ev::Raw(side.which, std::mem::take(&mut raw)));
                                }
                                if let Some(ib) = &inband
                                    && side.which == StreamKind::Stdout
                                    && is_frame_of(&body, "tool_call")
                                {
                                    ib.take(&body).await;
                                    continue;
                                }
                                batch.push(Ev::Frame(side.which, body));
                            }
                            other => raw.extend_from_slice(other.bytes()),
                        }
                    }
                    if !raw.is_empty() {
                        batch.push(Ev::Raw(side.which, raw));
                    }
                    // Output ending in `\n` leaves the decoder holding it (it
                    // could start a frame marker). The runner writes every
                    // frame header atomically, so if nothing follows within
                    // IDLE_RELEASE it is plain output: release it then, and
                    // live output is not a line behind.
                    side.release_at = side
                        .dec
                        .scan_held()
                        .is_some_and(|h| h > 0)
                        .then(|| Instant::now() + IDLE_RELEASE);
                }
                Got::Eof => {
                    read_any = true;
                    // Round again: the loop ends when both sides are closed
                    // (the wait below needs one open).
                    drained = false;
                    side.close(&mut batch);
                }
            }
        }
        if read_any {
            for ev in batch.drain(..) {
                if tx.send(ev).await.is_err() {
                    busy.store(0, Ordering::SeqCst);
                    return;
                }
            }
            // Every chunk read this round is in the channel now.
            busy.store(0, Ordering::SeqCst);
            if !drained {
                continue;
            }
        }
        busy.store(0, Ordering::SeqCst);
        let release_at = sides.iter().filter_map(|s| s.release_at).min();
        let [a, b] = &mut sides;
        tokio::select! {
            // Readiness is cleared before the next round reads, so data
            // arriving after that read wakes us again; the other side's
            // too, as the round reads both (its event for what the last
            // round read would wake us once more for nothing).
            r = async { a.fd.as_ref()?.readable().await.ok() }, if a.fd.is_some() => {
                if let Some(mut g) = r { g.clear_ready(); } else { a.close(&mut batch); }
                clear_if_ready(b.fd.as_ref());
            }
            r = async { b.fd.as_ref()?.readable().await.ok() }, if b.fd.is_some() => {
                if let Some(mut g) = r { g.clear_ready(); } else { b.close(&mut batch); }
                clear_if_ready(a.fd.as_ref());
            }
            () = async {
                if let Some(t) = release_at { tokio::time::sleep_until(t).await }
            }, if release_at.is_some() => {
                let now = Instant::now();
                for side in &mut sides {
                    if side.release_at.is_some_and(|t| t <= now) {
                        side.release_at = None;
                        if let Some(ev) = side.dec.release_held()
                            && tx.send(Ev::Raw(side.which, ev.bytes().to_vec())).await.is_err()
                        {
                            return;
                        }
                    }
                }
            }
            // Not reached: the loop runs while a side is open, and an open
            // side's branch is enabled.
            else => break,
        }
    }
}
