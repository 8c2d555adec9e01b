//! Property tests: both streaming APIs give the whole-text result for every
//! way of splitting the input, on inputs built from the constructs the
//! state machines care about (escapes, controls, UTF-8, secrets, PEM blocks,
//! long lines).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use toolcell_redact::{AnsiStripper, Cleaner, LINE_MAX, Redactor, strip_ansi};

fn ansi_fragment() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"\x1b[1;31m".to_vec()),
        Just(b"\x1b[0m".to_vec()),
        Just(b"\x1b[38:2::1:2:3m".to_vec()),
        Just(b"\x1b[?25l".to_vec()),
        Just(b"\x1b]8;;https://x.y\x1b\\".to_vec()),
        Just(b"\x1b]0;title\x07".to_vec()),
        Just(b"\x1bP1$r\x1b\\".to_vec()),
        Just(b"\x1b(B".to_vec()),
        Just(b"\x9b2K".to_vec()),
        Just("\u{9b}1m".as_bytes().to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\x08".to_vec()),
        Just(b"\t".to_vec()),
        Just("é漢😀".as_bytes().to_vec()),
        Just(b"\xe2\x9c".to_vec()),
        Just(b"\xff".to_vec()),
        Just(b"\x1b".to_vec()),
        "[ -~]{0,12}".prop_map(String::into_bytes),
        prop::collection::vec(any::<u8>(), 0..6),
    ]
}

fn text_fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("GITHUB_TOKEN=ghp_D53X83RZJzzzzgEOzdmenCkhvMdgaKjIg8xN".to_string()),
        Just("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".to_string()),
        Just("postgres://u:Xk9mQ2vL8pR4wZt@h/db".to_string()),
        Just("Authorization: Bearer o09jwQO10Y0ADsWJPiX1EwY2orTyRqBR".to_string()),
        Just("DB_PASSWORD=Xk9#mQ2vL8pR4wZt".to_string()),
        Just("api_key = os.environ[\"X\"]".to_string()),
        Just("-----BEGIN RSA PRIVATE KEY-----\n".to_string()),
        Just("MIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\n".to_string()),
        Just("-----END RSA PRIVATE KEY-----".to_string()),
        Just("exact-Secret-1234".to_string()),
        Just("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fw".to_string()),
        Just("\n".to_string()),
        Just(" ".to_string()),
        Just("«redacted:x»".to_string()),
        "[ -~]{0,16}",
        "\\PC{0,6}",
    ]
}

fn splits(len: usize, cuts: &[usize]) -> Vec<usize> {
    let mut v: Vec<usize> = cuts.iter().map(|c| c % (len + 1)).collect();
    v.sort_unstable();
    v.dedup();
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    #[test]
    fn ansi_stream_is_split_invariant(
        frags in prop::collection::vec(ansi_fragment(), 0..40),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let input: Vec<u8> = frags.concat();
        let whole = strip_ansi(&input);
        let mut st = AnsiStripper::new();
        let mut out = String::new();
        let mut prev = 0;
        for c in splits(input.len(), &cuts) {
            st.push(&input[prev..c], &mut out);
            prev = c;
        }
        st.push(&input[prev..], &mut out);
        st.finish(&mut out);
        prop_assert_eq!(out, whole);
    }

    #[test]
    fn redact_stream_is_split_invariant(
        frags in prop::collection::vec(text_fragment(), 0..30),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let red = Redactor::new(["exact-Secret-1234"]).unwrap();
        let input: String = frags.concat();
        let whole = red.redact(&input).into_owned();
        let mut st = red.stream();
        let mut out = String::new();
        let mut prev = 0;
        for mut c in splits(input.len(), &cuts) {
            while !input.is_char_boundary(c) { c += 1; }
            if c < prev { continue; }
            st.push(&input[prev..c], &mut out);
            prev = c;
        }
        st.push(&input[prev..], &mut out);
        st.finish(&mut out);
        prop_assert!(!out.contains("exact-Secret-1234"));
        prop_assert_eq!(out, whole);
    }

    #[test]
    fn cleaner_is_split_invariant(
        frags in prop::collection::vec(prop_oneof![ansi_fragment(), text_fragment().prop_map(String::into_bytes)], 0..30),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let red = Redactor::builtin();
        let input: Vec<u8> = frags.concat();
        let whole = red.clean(&input);
        let mut c = Cleaner::new(&red);
        let mut out = String::new();
        let mut prev = 0;
        for cut in splits(input.len(), &cuts) {
            c.push(&input[prev..cut], &mut out);
            prev = cut;
        }
        c.push(&input[prev..], &mut out);
        c.finish(&mut out);
        prop_assert_eq!(out, whole);
    }
}

/// Lines longer than the redactor's segment bound are cut at a point that
/// depends only on the text, so streaming still equals whole-text redaction,
/// and a secret well inside a segment is still masked.
#[test]
fn long_lines_are_split_invariant_and_bounded() {
    let red = Redactor::builtin();
    let filler = "lorem ipsum dolor sit amet ".repeat(LINE_MAX / 10);
    let input =
        format!("{filler}GITHUB_TOKEN=ghp_D53X83RZJzzzzgEOzdmenCkhvMdgaKjIg8xN {filler}\nend");
    let whole = red.redact(&input).into_owned();
    assert!(!whole.contains("ghp_D53X83RZ"));
    for step in [1usize, 7, 4093, LINE_MAX - 1, LINE_MAX + 1] {
        let mut st = red.stream();
        let mut out = String::new();
        let mut i = 0;
        while i < input.len() {
            let e = (i + step).min(input.len());
            st.push(&input[i..e], &mut out);
            assert!(st.held_len() <= toolcell_redact::MAX_HELD);
            i = e;
        }
        st.finish(&mut out);
        assert_eq!(out, whole, "step {step}");
    }
    // The stripper's held line is bounded too, and still split-invariant.
    let raw = format!("{}\r{}", "x".repeat(100_000), "y".repeat(70_000));
    let whole = strip_ansi(raw.as_bytes());
    let mut st = AnsiStripper::new();
    let mut out = String::new();
    for chunk in raw.as_bytes().chunks(999) {
        st.push(chunk, &mut out);
        assert!(st.held_len() <= toolcell_redact::HELD_LINE_LIMIT);
    }
    st.finish(&mut out);
    assert_eq!(out, whole);
}

/// A private key split across many chunks is masked whole, and code that
/// merely mentions the marker is untouched.
#[test]
fn pem_block_across_chunks() {
    let red = Redactor::builtin();
    let input = "key:\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIIrYSSNQFaA2Hwf1duRSxKtLYX5CB04fSeQ6tF1aY/PuoAoGCCqGSM49\nAwEHoUQDQgAEPR3tU2Fta9ktY+6P9G0cWO+0kETA6SFs38GecTyfWxiQRNMJgIGq\n-----END EC PRIVATE KEY-----\nafter\n";
    let whole = red.redact(input);
    assert_eq!(whole, "key:\n«redacted:private_key»\nafter\n");
    let mut st = red.stream();
    let mut out = String::new();
    for ch in input.as_bytes().chunks(3) {
        st.push(std::str::from_utf8(ch).unwrap(), &mut out);
    }
    st.finish(&mut out);
    assert_eq!(out, whole);
    let code = "if text.startswith(\"-----BEGIN RSA PRIVATE KEY-----\"):\n    kind = \"rsa\"\n";
    assert_eq!(red.redact(code), code);
    let marker_only = "-----BEGIN RSA PRIVATE KEY-----\nprint('no key here')\n";
    assert_eq!(red.redact(marker_only), marker_only);
}

#[test]
fn redactor_is_send_sync_clone_and_shared_across_threads() {
    fn assert_traits<T: Send + Sync + Clone>() {}
    assert_traits::<Redactor>();
    let red = Redactor::new(["exact-Secret-1234"]).unwrap();
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let r = red.clone();
            std::thread::spawn(move || r.redact(&format!("{i}: exact-Secret-1234")).into_owned())
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().unwrap(), format!("{i}: «redacted:secret»"));
    }
}
