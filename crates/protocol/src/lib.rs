//! Sentinel framing between a toolcell host and its Python runner
//! (docs/protocol.md, "Frames").
//!
//! A kernel's stdout and stderr carry two things at once: whatever the cell
//! prints (raw output, passed to the user) and, now and then, a *frame* the
//! runner writes to tell the host something (`ready`, `end`, `result`). A
//! frame is
//!
//! ```text
//! "\n" SENTINEL " " <decimal length> "\n" <body of exactly that many bytes>
//! ```
//!
//! where `SENTINEL` is a per-kernel random string that only the host and the
//! runner know ([`Sentinel::generate`]), so a cell cannot forge a frame by
//! printing one.
//!
//! This crate is sans-IO: it never reads a pipe. The kernel crate reads
//! chunks from the child's pipes and pushes them into a [`Decoder`], which
//! yields [`Event`]s: raw bytes (borrowed from the chunk when possible), a
//! complete frame body, a marker that turned out not to be a frame (raw
//! output too), or end-of-stream inside a frame. The events never depend on
//! how the input was split into chunks, raw bytes are released as early as
//! possible (only a suffix that could still begin a marker is held back), a
//! bad header turns back into raw output, and memory is bounded by the
//! maximum frame length whatever the input.
//!
//! It also holds the messages of the runner protocol ([`Request`] written to
//! the runner's fd 3 as JSON lines, [`Reply`] read from frame bodies) and the
//! encoder the runner's side mirrors ([`encode_frame`]).
//!
//! ```
//! use toolcell_protocol::{encode_frame, Decoder, Event, Reply, Sentinel};
//!
//! let sentinel = Sentinel::new("@@S@@")?;
//! let mut bytes = b"hello\n".to_vec();
//! bytes.extend(encode_frame(&sentinel, br#"{"type":"end","id":"c1"}"#));
//! bytes.extend_from_slice(b"more output");
//!
//! let mut decoder = Decoder::new(&sentinel);
//! let mut raw = Vec::new();
//! let mut frames = Vec::new();
//! // Chunks of any size give the same result; here, 3 bytes at a time.
//! for chunk in bytes.chunks(3) {
//!     for event in decoder.feed(chunk) {
//!         match event {
//!             Event::Frame(body) => frames.push(Reply::from_body(&body)?),
//!             other if other.is_raw() => raw.extend_from_slice(other.bytes()),
//!             other => panic!("unexpected {other:?}"),
//!         }
//!     }
//! }
//! if let Some(last) = decoder.finish() {
//!     raw.extend_from_slice(last.bytes());
//! }
//! assert_eq!(raw, b"hello\nmore output");
//! assert!(matches!(&frames[0], Reply::End(end) if end.id == "c1"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod decoder;
#[doc(hidden)]
pub mod fuzzing;
mod message;
mod sentinel;

pub use decoder::{DEFAULT_MAX_FRAME_LEN, Decoder, Event, Feed, MAX_HEADER_DIGITS, Rejection};
pub use message::{
    CellResult, Display, End, Execute, Hello, PROTOCOL_VERSION, Reads, Ready, Reply, Request,
    RunnerStatus, Usage,
};
pub use sentinel::{
    MAX_SENTINEL_LEN, RandomError, Sentinel, SentinelError, encode_frame, random_hex,
    random_hex_with,
};
