//! Byte streams for the `frame_decoder` bench.

use toolcell_protocol::{Sentinel, encode_frame};

/// A fixed sentinel of the generated shape (`@tc` + 32 hex digits).
///
/// # Panics
/// Never: the literal is a valid sentinel.
#[must_use]
pub fn sentinel() -> Sentinel {
    match Sentinel::new("@tc5d41402abc4b2a76b9719d911017c592") {
        Ok(s) => s,
        Err(e) => unreachable!("fixed sentinel is valid: {e}"),
    }
}

/// `len` bytes of program output: log-ish lines of text and numbers, no frame.
#[must_use]
pub fn raw_output(len: usize) -> Vec<u8> {
    let lines: [&[u8]; 6] = [
        b"epoch 12/100  loss=0.04312  acc=0.9871  lr=3.0e-4\n",
        b"Traceback (most recent call last):\n  File \"<cell-3>\", line 2, in <module>\n",
        b"    df = pd.read_csv(path, sep=',', dtype={'id': int})\n",
        b"{\"id\": 1042, \"name\": \"widget\", \"tags\": [\"a\", \"b\"], \"price\": 12.5}\n",
        b"INFO 2026-11-29T10:00:00Z request served in 12ms path=/api/v1/items\n",
        b"\n",
    ];
    let mut out = Vec::with_capacity(len);
    let mut i = 0usize;
    while out.len() < len {
        out.extend_from_slice(lines[i % lines.len()]);
        i = i.wrapping_mul(31).wrapping_add(7);
    }
    out.truncate(len);
    out
}

/// About `len` bytes of 1 KiB frames back to back.
#[must_use]
pub fn back_to_back_frames(len: usize) -> Vec<u8> {
    let s = sentinel();
    let body: Vec<u8> = std::iter::repeat_n(b'x', 1024).collect();
    let frame = encode_frame(&s, &body);
    let mut out = Vec::with_capacity(len + frame.len());
    while out.len() < len {
        out.extend_from_slice(&frame);
    }
    out
}

/// About `len` bytes dense with things that look like the start of a
/// marker: newline + most of the sentinel, newline + the whole sentinel
/// with a bad header, and newlines; a few plain bytes between them.
#[must_use]
pub fn false_markers(len: usize) -> Vec<u8> {
    let s = sentinel();
    let marker = s.marker();
    let mut out = Vec::with_capacity(len + marker.len() * 2);
    let mut x: u32 = 0x9e37_79b9;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        match x % 4 {
            0 => out.extend_from_slice(&marker[..marker.len() - 1 - (x as usize >> 8) % 8]),
            1 => {
                out.extend_from_slice(&marker);
                out.extend_from_slice(b"12x");
            }
            2 => out.push(b'\n'),
            _ => out.extend_from_slice(b"ab"),
        }
    }
    out
}
