//! Checking logic shared by the fuzz targets (`fuzz/fuzz_targets/*.rs`) and
//! the corpus replay test. Not part of the public API.
//!
//! Input layout: byte 0 picks how many split sizes follow (1–8), each next
//! byte gives one chunk size (1–64, used cyclically); the rest is the payload.

use crate::{AnsiStripper, Cleaner, Redactor, strip_ansi};

fn split(data: &[u8]) -> (Vec<usize>, &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return (vec![1], data);
    };
    let n = usize::from(first % 8) + 1;
    let n = n.min(rest.len());
    let sizes: Vec<usize> = rest[..n].iter().map(|&b| usize::from(b % 64) + 1).collect();
    let sizes = if sizes.is_empty() { vec![1] } else { sizes };
    (sizes, &rest[n..])
}

fn chunks<'a>(payload: &'a [u8], sizes: &[usize]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut k = 0;
    while i < payload.len() {
        let n = sizes[k % sizes.len()].min(payload.len() - i);
        out.push(&payload[i..i + n]);
        i += n;
        k += 1;
    }
    out
}

fn str_chunks<'a>(text: &'a str, sizes: &[usize]) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut k = 0;
    while i < text.len() {
        let mut e = (i + sizes[k % sizes.len()]).min(text.len());
        while !text.is_char_boundary(e) {
            e += 1;
        }
        out.push(&text[i..e]);
        i = e;
        k += 1;
    }
    out
}

/// Total bytes of `«redacted:…»` masks in `s`.
fn mask_bytes(s: &str) -> usize {
    let mut total = 0;
    let mut rest = s;
    while let Some(p) = rest.find("«redacted:") {
        let after = &rest[p..];
        match after.find('»') {
            Some(e) => {
                total += e + '»'.len_utf8();
                rest = &after[e + '»'.len_utf8()..];
            }
            None => break,
        }
    }
    total
}

/// ANSI stripper: streaming (in the derived chunks and byte by byte) equals
/// whole-text stripping; the output holds no escape or control character
/// except `\n`/`\t`, no C1 control; it is never longer than the input except
/// for U+FFFD replacements (3 bytes for at least 1 input byte).
pub fn check_ansi_stream(data: &[u8]) {
    let (sizes, payload) = split(data);
    let whole = strip_ansi(payload);
    let mut st = AnsiStripper::new();
    let mut out = String::new();
    for c in chunks(payload, &sizes) {
        st.push(c, &mut out);
        assert!(
            st.held_len() <= crate::HELD_LINE_LIMIT + 4,
            "held line over its bound"
        );
    }
    st.finish(&mut out);
    assert_eq!(
        out, whole,
        "chunked stripping differs from whole-text stripping"
    );
    let mut out1 = String::new();
    for b in payload {
        st.push(std::slice::from_ref(b), &mut out1);
    }
    st.finish(&mut out1);
    assert_eq!(
        out1, whole,
        "byte-by-byte stripping differs from whole-text stripping"
    );
    for ch in whole.chars() {
        let bad = (ch < ' ' && ch != '\n' && ch != '\t') || ('\u{7f}'..='\u{9f}').contains(&ch);
        assert!(!bad, "control character {ch:?} in output");
    }
    let fffd = whole.matches('\u{FFFD}').count();
    assert!(
        whole.len() <= payload.len() + 2 * fffd,
        "output longer than input"
    );
}

/// Redaction: a [`RedactStream`](crate::RedactStream) fed the derived chunks
/// equals [`Redactor::redact`]; a [`Cleaner`] fed raw chunks equals
/// strip-then-redact; output minus masks is never longer than the input.
pub fn check_redact_stream(data: &[u8]) {
    let (sizes, payload) = split(data);
    static RED: once_cell::sync::Lazy<Redactor> = once_cell::sync::Lazy::new(
        || match Redactor::new(["exact-Secret-1234", "tok3nValue99"]) {
            Ok(r) => r,
            Err(e) => panic!("redactor must build: {e}"),
        },
    );
    let red = &*RED;
    let text = String::from_utf8_lossy(payload);
    let whole = red.redact(&text);
    let mut st = red.stream();
    let mut out = String::new();
    for c in str_chunks(&text, &sizes) {
        st.push(c, &mut out);
        assert!(
            st.held_len() <= crate::MAX_HELD + 4,
            "redact stream held over its bound"
        );
    }
    st.finish(&mut out);
    assert_eq!(
        out,
        whole.as_ref(),
        "chunked redaction differs from whole-text redaction"
    );
    assert!(
        out.len() - mask_bytes(&out) <= text.len(),
        "output minus masks longer than input"
    );
    assert!(!out.contains("exact-Secret-1234"), "exact secret leaked");

    let cleaned = red.clean(payload);
    let mut c = Cleaner::new(red);
    let mut out2 = String::new();
    for ch in chunks(payload, &sizes) {
        c.push(ch, &mut out2);
    }
    c.finish(&mut out2);
    assert_eq!(out2, cleaned, "Cleaner differs from strip-then-redact");
}
