//! `toolcell frames --sentinel S`: decode a byte stream (as a kernel writes it
//! on stdout or stderr) into JSON events, one per line (docs/protocol.md,
//! "Frames").
//!
//! Output lines are `{"event":"raw"|"frame"|"eof_in_frame","data_b64":…}`.
//! Adjacent raw bytes are merged into one event, and a raw run is cut only
//! every [`RAW_RUN_LIMIT`] bytes of that run, so the output depends only on
//! the input bytes, never on how reads happened to split them, and memory
//! stays bounded whatever the input.

use std::io::{self, BufWriter, Read, Write};
use std::process::ExitCode;

use anyhow::Context;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use toolcell_protocol::{DEFAULT_MAX_FRAME_LEN, Decoder, Event, Sentinel};

/// Longest raw event printed; longer runs are cut into several events.
pub(crate) const RAW_RUN_LIMIT: usize = 64 * 1024;

const READ_CHUNK: usize = 64 * 1024;

/// Arguments of `toolcell frames`.
#[derive(Debug, clap::Args)]
#[command(
    long_about = "Decode a kernel byte stream read from stdin and print one JSON event per line:\n  \
                  {\"event\":\"raw\",\"data_b64\":…}           bytes outside frames (merged; \
                  cut every 64 KiB)\n  {\"event\":\"frame\",\"data_b64\":…}         the body of a \
                  complete frame\n  {\"event\":\"eof_in_frame\",\"data_b64\":…}  the partial body \
                  when input ends inside a frame\n\nA frame is \"\\n\" SENTINEL \" \" <length> \
                  \"\\n\" <body>. Anything that is not a valid frame is raw output. Exits 0 at end \
                  of input. Useful for debugging the runner protocol and for making fuzz corpora."
)]
pub(crate) struct Args {
    /// The frame sentinel: printable ASCII, no whitespace.
    #[arg(long, value_name = "S")]
    pub sentinel: String,
    /// Largest accepted frame body in bytes; longer headers are raw output.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_FRAME_LEN)]
    pub max_frame_len: usize,
}

/// Runs the command: stdin to stdout until EOF.
pub(crate) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let sentinel = match Sentinel::new(args.sentinel.as_str()) {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(io::stderr(), "toolcell frames: invalid --sentinel: {e}");
            return Ok(ExitCode::from(crate::EXIT_USAGE));
        }
    };
    let stdin = io::stdin().lock();
    let stdout = BufWriter::new(io::stdout().lock());
    match decode_stream(&sentinel, args.max_frame_len, stdin, stdout) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        // A closed stdout (e.g. `| head`) is not an error worth a message.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e).context("decoding stdin"),
    }
}

/// Decodes `input` into JSON lines on `out`.
fn decode_stream(
    sentinel: &Sentinel,
    max_frame_len: usize,
    mut input: impl Read,
    mut out: impl Write,
) -> io::Result<()> {
    let mut decoder = Decoder::new(sentinel).with_max_frame_len(max_frame_len);
    let mut printer = Printer::default();
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        for event in decoder.feed(&buf[..n]) {
            printer.event(&event, &mut out)?;
        }
    }
    if let Some(event) = decoder.finish() {
        printer.event(&event, &mut out)?;
    }
    printer.flush_raw(&mut out)?;
    out.flush()
}

/// Merges raw runs and prints events.
#[derive(Default)]
struct Printer {
    raw: Vec<u8>,
}

impl Printer {
    fn event(&mut self, event: &Event<'_>, out: &mut impl Write) -> io::Result<()> {
        if event.is_raw() {
            let mut bytes = event.bytes();
            while !bytes.is_empty() {
                let room = RAW_RUN_LIMIT - self.raw.len();
                let (now, later) = bytes.split_at(room.min(bytes.len()));
                self.raw.extend_from_slice(now);
                bytes = later;
                if self.raw.len() == RAW_RUN_LIMIT {
                    self.flush_raw(out)?;
                }
            }
            return Ok(());
        }
        self.flush_raw(out)?;
        let kind = match event {
            Event::Frame(_) => "frame",
            _ => "eof_in_frame",
        };
        print_line(out, kind, event.bytes())
    }

    fn flush_raw(&mut self, out: &mut impl Write) -> io::Result<()> {
        if !self.raw.is_empty() {
            print_line(out, "raw", &self.raw)?;
            self.raw.clear();
        }
        Ok(())
    }
}

fn print_line(out: &mut impl Write, kind: &str, data: &[u8]) -> io::Result<()> {
    // Field order as docs/protocol.md ("Frames") writes it; both values need no
    // JSON escaping (a fixed word and base64), so the line is written directly.
    writeln!(
        out,
        "{{\"event\":\"{kind}\",\"data_b64\":\"{}\"}}",
        B64.encode(data)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_on(input: &[u8], read_size: usize) -> String {
        /// A reader that returns at most `n` bytes per read.
        struct Trickle<'a>(&'a [u8], usize);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = self.1.min(buf.len()).min(self.0.len());
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let s = Sentinel::new("@@S@@").unwrap();
        let mut out = Vec::new();
        decode_stream(
            &s,
            DEFAULT_MAX_FRAME_LEN,
            Trickle(input, read_size),
            &mut out,
        )
        .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn output_does_not_depend_on_read_sizes() {
        let mut input = b"a\n@@S@@ 2\n{}b\n@@S@@ x".to_vec();
        input.extend(std::iter::repeat_n(b'z', 3 * RAW_RUN_LIMIT + 5));
        let whole = run_on(&input, usize::MAX);
        for n in [1, 2, 7, 4096] {
            assert_eq!(run_on(&input, n), whole, "read size {n}");
        }
        let lines: Vec<&str> = whole.lines().collect();
        // raw "a", the frame, then ~192 KiB of raw cut into 4 events.
        assert_eq!(lines.len(), 1 + 1 + 4);
    }
}
