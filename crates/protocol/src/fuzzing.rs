//! Checks shared by the `protocol_decoder` fuzz target and the corpus replay
//! test. Not part of the public API.

use crate::{Decoder, Event, Sentinel};

/// Sentinels the fuzz input chooses from (short ones, so that the fuzzer
/// finds markers quickly).
const SENTINELS: [&str; 3] = ["S", "@@S@@", "tc-0123456789abcdef"];
/// Maximum frame lengths the fuzz input chooses from.
const MAX_LENS: [usize; 6] = [0, 1, 3, 16, 300, crate::DEFAULT_MAX_FRAME_LEN];

/// Merged view of an event stream: raw runs joined, rejected markers counted
/// as raw. This is what must not depend on the chunking.
#[derive(Debug, PartialEq, Eq)]
pub enum Norm {
    /// A maximal run of raw output.
    Raw(Vec<u8>),
    /// A frame body.
    Frame(Vec<u8>),
    /// EOF inside a frame, with the partial body.
    EofInFrame(Vec<u8>),
}

/// Merges adjacent raw runs (including rejected markers) into one.
#[must_use]
pub fn normalize<'a>(events: impl IntoIterator<Item = Event<'a>>) -> Vec<Norm> {
    let mut out: Vec<Norm> = Vec::new();
    for ev in events {
        if ev.is_raw() {
            if ev.bytes().is_empty() {
                continue;
            }
            if let Some(Norm::Raw(r)) = out.last_mut() {
                r.extend_from_slice(ev.bytes());
            } else {
                out.push(Norm::Raw(ev.bytes().to_vec()));
            }
        } else if let Event::Frame(b) = ev {
            out.push(Norm::Frame(b));
        } else if let Event::EofInFrame(b) = ev {
            out.push(Norm::EofInFrame(b));
        }
    }
    out
}

/// Decodes `input` split at `cuts` (sorted offsets), checking the buffering
/// bounds after every chunk.
///
/// # Errors
/// A description of the first bound that was broken.
pub fn decode_split(
    sentinel: &Sentinel,
    max: usize,
    input: &[u8],
    cuts: &[usize],
) -> Result<Vec<Norm>, String> {
    let mut dec = Decoder::new(sentinel).with_max_frame_len(max);
    let marker = sentinel.marker();
    let mut events = Vec::new();
    let mut start = 0;
    for &end in cuts.iter().chain(std::iter::once(&input.len())) {
        let end = end.clamp(start, input.len());
        for ev in dec.feed(&input[start..end]) {
            events.push(ev.into_owned());
        }
        start = end;
        if dec.buffered_len() > dec.buffered_bound() {
            return Err(format!(
                "buffered {} bytes, bound is {}",
                dec.buffered_len(),
                dec.buffered_bound()
            ));
        }
        if let Some(held) = dec.scan_held() {
            // Only a suffix that could still begin a marker may be held.
            if held >= marker.len() || !input[..end].ends_with(&marker[..held]) {
                return Err(format!(
                    "held {held} bytes that are not a marker prefix ending the input at {end}"
                ));
            }
        }
    }
    events.extend(dec.finish());
    Ok(normalize(events))
}

/// Total number of bytes carried by the events (raw, bodies, partial bodies).
fn carried(events: &[Norm]) -> usize {
    events
        .iter()
        .map(|n| match n {
            Norm::Raw(b) | Norm::Frame(b) | Norm::EofInFrame(b) => b.len(),
        })
        .sum()
}

/// The fuzz check: decoding whole, one byte at a time and at cut points
/// derived from the input gives the same normalized events; buffering stays
/// within bounds; every input byte is accounted for.
///
/// Input layout: byte 0 picks the maximum frame length, byte 1 the
/// sentinel, bytes 2..4 seed the cut points, the rest is the stream.
///
/// # Errors
/// A description of the first property that failed.
pub fn check_decoder(data: &[u8]) -> Result<(), String> {
    if data.len() < 4 {
        return Ok(());
    }
    let max = MAX_LENS[usize::from(data[0]) % MAX_LENS.len()];
    let sentinel = Sentinel::new(SENTINELS[usize::from(data[1]) % SENTINELS.len()])
        .map_err(|e| e.to_string())?;
    let mut seed = u32::from(u16::from_le_bytes([data[2], data[3]])) | 1;
    let input = &data[4..];

    let whole = decode_split(&sentinel, max, input, &[])?;
    let bytewise: Vec<usize> = (1..input.len()).collect();
    let one_by_one = decode_split(&sentinel, max, input, &bytewise)?;
    if whole != one_by_one {
        return Err(format!(
            "whole vs byte-at-a-time differ:\n{whole:?}\n{one_by_one:?}"
        ));
    }
    let mut cuts = Vec::new();
    let mut at = 0usize;
    while at < input.len() {
        // xorshift32: cheap, deterministic cut points of 1..=64 bytes.
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        at += 1 + (seed % 64) as usize;
        cuts.push(at.min(input.len()));
    }
    let split = decode_split(&sentinel, max, input, &cuts)?;
    if whole != split {
        return Err(format!(
            "whole vs split at {cuts:?} differ:\n{whole:?}\n{split:?}"
        ));
    }
    // Frames drop their headers; nothing else disappears or appears.
    let marker_len = sentinel.marker().len();
    let frames = whole.iter().filter(|n| !matches!(n, Norm::Raw(_))).count();
    let c = carried(&whole);
    if c > input.len() || c + frames * (marker_len + 1 + crate::MAX_HEADER_DIGITS) < input.len() {
        return Err(format!(
            "events carry {c} bytes for {} input bytes and {frames} frames",
            input.len()
        ));
    }
    Ok(())
}
