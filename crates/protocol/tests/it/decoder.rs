//! Decoder behaviour: every rule of docs/protocol.md ("Decoder rules"), split
//! invariance against a deliberately simple reference decoder, and bounds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use toolcell_protocol::fuzzing::{Norm, decode_split, normalize};
use toolcell_protocol::{Decoder, Event, MAX_HEADER_DIGITS, Rejection, Sentinel, encode_frame};

fn sentinel() -> Sentinel {
    Sentinel::new("@@S@@").unwrap()
}

/// The reference: looks at the whole input at once, one position at a time,
/// straight from the wording of docs/protocol.md ("Decoder rules"). Slow and
/// obviously right.
fn reference(input: &[u8], sentinel: &Sentinel, max: usize) -> Vec<Norm> {
    let marker = sentinel.marker();
    let m = marker.len();
    let mut out = Vec::new();
    let mut raw = Vec::new();
    let flush = |raw: &mut Vec<u8>, out: &mut Vec<Norm>| {
        if !raw.is_empty() {
            out.push(Norm::Raw(std::mem::take(raw)));
        }
    };
    let mut i = 0;
    while i < input.len() {
        if input[i..].starts_with(&marker) {
            let h = i + m;
            let mut j = h;
            while j < input.len() && input[j].is_ascii_digit() && j - h < MAX_HEADER_DIGITS {
                j += 1;
            }
            let digits = &input[h..j];
            if j < input.len() && input[j] == b'\n' && !digits.is_empty() {
                let len: u128 = std::str::from_utf8(digits).unwrap().parse().unwrap();
                if len <= max as u128 {
                    let len = len as usize;
                    let start = j + 1;
                    flush(&mut raw, &mut out);
                    if start + len <= input.len() {
                        out.push(Norm::Frame(input[start..start + len].to_vec()));
                        i = start + len;
                    } else {
                        out.push(Norm::EofInFrame(input[start..].to_vec()));
                        i = input.len();
                    }
                    continue;
                }
            }
            // Not a frame: the marker is raw, scanning resumes after it.
            raw.extend_from_slice(&marker);
            i += m;
            continue;
        }
        raw.push(input[i]);
        i += 1;
    }
    flush(&mut raw, &mut out);
    out
}

fn decode_chunks(dec: &mut Decoder, chunks: &[&[u8]]) -> Vec<Event<'static>> {
    let mut out = Vec::new();
    for c in chunks {
        out.extend(dec.feed(c).map(Event::into_owned));
    }
    out.extend(dec.finish());
    out
}

fn raw(s: &[u8]) -> Norm {
    Norm::Raw(s.to_vec())
}

// ---------------------------------------------------------------------------
// Generated streams: raw text, frames, false markers, marker prefixes,
// oversize headers, binary bytes.

fn segment(marker: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let s = sentinel();
    let m1 = marker.clone();
    let m2 = marker.clone();
    let m3 = marker.clone();
    let m4 = marker.clone();
    let m5 = marker.clone();
    prop_oneof![
        // plain text with newlines
        "[a-z \\n]{0,40}".prop_map(String::into_bytes),
        // binary noise
        proptest::collection::vec(any::<u8>(), 0..24),
        // a valid frame, body possibly containing the marker
        (proptest::collection::vec(any::<u8>(), 0..40), any::<bool>()).prop_map(
            move |(mut body, with_marker)| {
                if with_marker {
                    body.extend_from_slice(&m1);
                }
                encode_frame(&s, &body)
            }
        ),
        // a proper marker prefix
        (1..6usize).prop_map(move |k| m2[..k.min(m2.len() - 1)].to_vec()),
        // marker + bad header byte
        "[ a-z{\\r]".prop_map(move |tail| [m3.clone(), tail.into_bytes()].concat()),
        // marker + too many digits, or an oversize length
        (21..25usize, any::<bool>()).prop_map(move |(n, nl)| {
            let mut v = m4.clone();
            v.extend(std::iter::repeat_n(b'9', n));
            if nl {
                v.push(b'\n');
            }
            v
        }),
        // marker + leading zeros / empty frame / no digits
        prop_oneof![
            Just(b"0\n".to_vec()),
            Just(b"\n".to_vec()),
            Just(b"007\nabcdefg".to_vec())
        ]
        .prop_map(move |tail| [m5.clone(), tail].concat()),
    ]
}

fn stream() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(segment(sentinel().marker()), 0..12).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn split_invariance_and_reference_agreement(
        input in stream(),
        cut_seed in proptest::collection::vec(0usize..10_000, 0..16),
        max in prop_oneof![Just(16usize), Just(64), Just(64 * 1024 * 1024)],
    ) {
        let s = sentinel();
        let expected = reference(&input, &s, max);
        let whole = decode_split(&s, max, &input, &[]).unwrap();
        prop_assert_eq!(&whole, &expected);
        let bytewise: Vec<usize> = (1..input.len()).collect();
        prop_assert_eq!(&decode_split(&s, max, &input, &bytewise).unwrap(), &expected);
        let mut cuts: Vec<usize> = cut_seed.iter().map(|c| c % (input.len() + 1)).collect();
        cuts.sort_unstable();
        prop_assert_eq!(&decode_split(&s, max, &input, &cuts).unwrap(), &expected);
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_agree_with_reference(
        input in proptest::collection::vec(any::<u8>(), 0..512),
        chunk in 1usize..37,
    ) {
        // A one-byte sentinel makes markers common in random bytes.
        let s = Sentinel::new("S").unwrap();
        let cuts: Vec<usize> = (chunk..input.len()).step_by(chunk).collect();
        prop_assert_eq!(decode_split(&s, 1000, &input, &cuts).unwrap(), reference(&input, &s, 1000));
    }

    #[test]
    fn the_fuzz_check_holds_on_generated_streams(input in stream(), head in any::<[u8; 4]>()) {
        let mut data = head.to_vec();
        data.extend_from_slice(&input);
        prop_assert!(toolcell_protocol::fuzzing::check_decoder(&data).is_ok());
    }
}

// ---------------------------------------------------------------------------
// One test per edge case of docs/protocol.md ("Decoder rules").

#[test]
fn raw_bytes_are_released_at_once_when_no_marker_can_start() {
    let mut dec = Decoder::new(&sentinel());
    let evs: Vec<_> = dec.feed(b"plain output").map(Event::into_owned).collect();
    assert_eq!(normalize(evs), vec![raw(b"plain output")]);
    assert_eq!(dec.buffered_len(), 0);
}

#[test]
fn only_a_possible_marker_prefix_is_held_back() {
    let mut dec = Decoder::new(&sentinel());
    let evs: Vec<_> = dec.feed(b"abc\n@@S").map(Event::into_owned).collect();
    assert_eq!(normalize(evs), vec![raw(b"abc")]);
    assert_eq!(dec.buffered_len(), 4);
    // The next byte rules the marker out: everything is released.
    let evs: Vec<_> = dec.feed(b"x").map(Event::into_owned).collect();
    assert_eq!(normalize(evs), vec![raw(b"\n@@Sx")]);
    assert_eq!(dec.buffered_len(), 0);
}

#[test]
fn a_held_prefix_followed_by_a_newline_keeps_only_the_newline() {
    let mut dec = Decoder::new(&sentinel());
    let evs = decode_chunks(&mut dec, &[b"\n@@", b"\n@@S@@ 1\nx"]);
    assert_eq!(
        normalize(evs),
        vec![raw(b"\n@@"), Norm::Frame(b"x".to_vec())]
    );
}

#[test]
fn bad_header_byte_is_raw_and_scanning_resumes_after_the_marker() {
    let mut dec = Decoder::new(&sentinel());
    let evs = decode_chunks(&mut dec, &[b"\n@@S@@ 12x\n@@S@@ 2\n{}"]);
    assert!(matches!(
        &evs[0],
        Event::NotAFrame { bytes, reason: Rejection::BadHeaderByte(b'x') } if bytes.as_ref() == b"\n@@S@@ 12"
    ));
    assert_eq!(
        normalize(evs),
        vec![raw(b"\n@@S@@ 12x"), Norm::Frame(b"{}".to_vec())]
    );
}

#[test]
fn a_marker_right_after_a_bad_marker_is_found() {
    // The byte that spoils the first header starts the second marker.
    let mut dec = Decoder::new(&sentinel());
    let evs = decode_chunks(&mut dec, &[b"\n@@S@@ \n@@S@@ 1\nz"]);
    assert!(matches!(
        &evs[0],
        Event::NotAFrame {
            reason: Rejection::NoDigits,
            ..
        }
    ));
    assert_eq!(
        normalize(evs),
        vec![raw(b"\n@@S@@ "), Norm::Frame(b"z".to_vec())]
    );
}

#[test]
fn more_than_twenty_digits_is_not_a_frame() {
    let mut dec = Decoder::new(&sentinel());
    let input = b"\n@@S@@ 000000000000000000001\nx";
    let evs = decode_chunks(&mut dec, &[input]);
    assert!(matches!(
        &evs[0],
        Event::NotAFrame {
            reason: Rejection::TooManyDigits,
            ..
        }
    ));
    assert_eq!(normalize(evs), vec![raw(input)]);
    // Twenty digits, leading zeros and all, are fine.
    let mut dec = Decoder::new(&sentinel());
    let evs = decode_chunks(&mut dec, &[b"\n@@S@@ 00000000000000000001\nx"]);
    assert_eq!(normalize(evs), vec![Norm::Frame(b"x".to_vec())]);
}

#[test]
fn a_header_never_buffers_more_than_twenty_one_bytes() {
    let s = sentinel();
    let mut dec = Decoder::new(&s);
    let m = s.marker().len();
    let mut input = s.marker();
    input.extend(std::iter::repeat_n(b'1', 20));
    let evs: Vec<_> = dec.feed(&input).map(Event::into_owned).collect();
    assert!(evs.is_empty());
    assert_eq!(dec.buffered_len(), m + 20);
    let evs: Vec<_> = dec.feed(b"1").map(Event::into_owned).collect();
    assert!(!evs.is_empty(), "the 21st digit must release the header");
    assert_eq!(dec.buffered_len(), 0);
}

#[test]
fn a_length_above_the_maximum_is_not_a_frame() {
    let mut dec = Decoder::new(&sentinel()).with_max_frame_len(10);
    let evs = decode_chunks(&mut dec, &[b"\n@@S@@ 11\n01234567890"]);
    assert!(matches!(
        &evs[0],
        Event::NotAFrame {
            reason: Rejection::TooLong {
                declared: 11,
                max: 10
            },
            ..
        }
    ));
    assert_eq!(normalize(evs), vec![raw(b"\n@@S@@ 11\n01234567890")]);
    let mut dec = Decoder::new(&sentinel()).with_max_frame_len(10);
    let evs = decode_chunks(&mut dec, &[b"\n@@S@@ 10\n0123456789"]);
    assert_eq!(normalize(evs), vec![Norm::Frame(b"0123456789".to_vec())]);
}

#[test]
fn the_default_maximum_is_64_mib() {
    let mut dec = Decoder::new(&sentinel());
    let over = format!("\n@@S@@ {}\n", 64 * 1024 * 1024 + 1);
    let evs = decode_chunks(&mut dec, &[over.as_bytes()]);
    assert!(matches!(
        &evs[0],
        Event::NotAFrame {
            reason: Rejection::TooLong { .. },
            ..
        }
    ));
}

#[test]
fn a_body_may_contain_the_marker_and_any_bytes() {
    let s = sentinel();
    let body = [b"\x00\xff".as_slice(), &s.marker(), b"5\nhello"].concat();
    let mut dec = Decoder::new(&s);
    let framed = encode_frame(&s, &body);
    let evs = decode_chunks(&mut dec, &[&framed]);
    assert_eq!(normalize(evs), vec![Norm::Frame(body)]);
}

#[test]
fn eof_inside_a_body_is_its_own_event() {
    let mut dec = Decoder::new(&sentinel());
    let evs = decode_chunks(&mut dec, &[b"x\n@@S@@ 10\n", b"abc"]);
    assert_eq!(
        normalize(evs),
        vec![raw(b"x"), Norm::EofInFrame(b"abc".to_vec())]
    );
}

#[test]
fn eof_inside_a_header_releases_it_as_raw() {
    let mut dec = Decoder::new(&sentinel());
    let evs = decode_chunks(&mut dec, &[b"x\n@@S@@ 12"]);
    assert!(matches!(
        evs.last(),
        Some(Event::NotAFrame {
            reason: Rejection::Eof,
            ..
        })
    ));
    assert_eq!(normalize(evs), vec![raw(b"x\n@@S@@ 12")]);
    let mut dec = Decoder::new(&sentinel());
    assert_eq!(
        normalize(decode_chunks(&mut dec, &[b"x\n@@S"])),
        vec![raw(b"x\n@@S")]
    );
}

#[test]
fn a_zero_length_frame_is_valid_and_empty() {
    let mut dec = Decoder::new(&sentinel());
    let evs = decode_chunks(&mut dec, &[b"a\n@@S@@ 0\nb"]);
    assert_eq!(
        normalize(evs),
        vec![raw(b"a"), Norm::Frame(Vec::new()), raw(b"b")]
    );
}

#[test]
fn frames_back_to_back() {
    let s = sentinel();
    let input = [
        encode_frame(&s, b"1"),
        encode_frame(&s, b"22"),
        encode_frame(&s, b""),
    ]
    .concat();
    let mut dec = Decoder::new(&s);
    assert_eq!(
        normalize(decode_chunks(&mut dec, &[&input])),
        vec![
            Norm::Frame(b"1".to_vec()),
            Norm::Frame(b"22".to_vec()),
            Norm::Frame(vec![])
        ]
    );
}

#[test]
fn the_decoder_is_reusable_after_finish() {
    let mut dec = Decoder::new(&sentinel());
    let _ = decode_chunks(&mut dec, &[b"\n@@S@@ 5\nab"]);
    assert_eq!(dec.buffered_len(), 0);
    assert_eq!(
        normalize(decode_chunks(&mut dec, &[b"ok"])),
        vec![raw(b"ok")]
    );
}

#[test]
fn memory_stays_bounded_on_a_long_stream_without_frames() {
    let s = sentinel();
    let mut dec = Decoder::new(&s);
    // 64 MiB of output dense with marker prefixes, in 1 MiB chunks.
    let chunk: Vec<u8> = b"\n@@S@ \n@@x\n"
        .iter()
        .copied()
        .cycle()
        .take(1 << 20)
        .collect();
    let mut total = 0usize;
    for _ in 0..64 {
        for ev in dec.feed(&chunk) {
            total += ev.bytes().len();
        }
        assert!(dec.buffered_len() < s.marker().len());
    }
    total += dec.finish().map_or(0, |e| e.bytes().len());
    assert_eq!(total, 64 << 20);
}

#[test]
fn a_huge_declared_length_does_not_preallocate() {
    // A header declaring 60 MiB followed by EOF must not hold 60 MiB.
    let mut dec = Decoder::new(&sentinel());
    let evs: Vec<_> = dec
        .feed(b"\n@@S@@ 62914560\nab")
        .map(Event::into_owned)
        .collect();
    assert!(evs.is_empty());
    assert_eq!(dec.buffered_len(), 2);
    assert!(matches!(dec.finish(), Some(Event::EofInFrame(b)) if b == b"ab"));
}

#[test]
fn raw_output_is_borrowed_from_the_chunk() {
    let mut dec = Decoder::new(&sentinel());
    let chunk = b"no frames here".to_vec();
    let ev = dec.feed(&chunk).next().unwrap();
    assert!(matches!(ev, Event::Raw(std::borrow::Cow::Borrowed(_))));
}

#[test]
fn release_held_gives_back_a_held_prefix_and_nothing_else() {
    let mut dec = Decoder::new(&sentinel());
    let evs: Vec<_> = dec.feed(b"line\n").map(Event::into_owned).collect();
    assert_eq!(normalize(evs), vec![raw(b"line")]);
    assert_eq!(dec.buffered_len(), 1);
    let ev = dec.release_held().unwrap();
    assert_eq!(ev.bytes(), b"\n");
    assert_eq!(dec.buffered_len(), 0);
    assert!(dec.release_held().is_none());
    // Inside a header or a body there is nothing to release.
    let _: Vec<_> = dec.feed(b"\n@@S@@ 12").map(Event::into_owned).collect();
    assert!(dec.release_held().is_none());
    let _: Vec<_> = dec.feed(b"\nab").map(Event::into_owned).collect();
    assert!(dec.release_held().is_none());
    assert!(matches!(dec.finish(), Some(Event::EofInFrame(b)) if b == b"ab"));
}
