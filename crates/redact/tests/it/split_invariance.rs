//! Property tests: both streaming APIs give the whole-text result for every
//! way of splitting the input, on inputs built from the constructs the
//! state machines care about (escapes, controls, UTF-8, secrets, PEM blocks,
//! long lines).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::samples;

use proptest::prelude::*;
use toolcell_redact::{AnsiStripper, Cleaner, LINE_MAX, MAX_HELD, MAX_TOKEN, Redactor, strip_ansi};

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

/// A host secret (exact-value rule) for the long-line tests.
const EXACT: &str = "hunter2-Zq8vX9wK3mP7";

/// One single-line sample per kind (from the table tests) plus an exact
/// host secret: (sample, the secret in it, kind).
fn one_per_kind() -> Vec<(String, &'static str, &'static str)> {
    let mut seen = std::collections::HashSet::new();
    let mut v: Vec<_> = samples::positives()
        .into_iter()
        .map(|(input, secret, kind)| (input.trim_end_matches('\n').to_string(), secret, kind))
        .filter(|(input, _, kind)| !input.contains('\n') && seen.insert(*kind))
        .collect();
    v.push((format!("pw {EXACT} end"), EXACT, "secret"));
    v.push((EXACT.to_string(), EXACT, "secret"));
    v
}

fn stream_in(red: &Redactor, input: &str, step: usize) -> String {
    let mut st = red.stream();
    let mut out = String::new();
    let mut i = 0;
    while i < input.len() {
        let mut e = (i + step).min(input.len());
        while !input.is_char_boundary(e) {
            e += 1;
        }
        st.push(&input[i..e], &mut out);
        assert!(
            st.held_len() <= MAX_HELD,
            "held {} > {MAX_HELD}",
            st.held_len()
        );
        i = e;
    }
    st.finish(&mut out);
    out
}

/// The first place two long strings differ, with some context, for messages.
fn first_diff(a: &str, b: &str) -> String {
    let i = a
        .bytes()
        .zip(b.bytes())
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let lo = |s: &str| {
        let mut l = i.saturating_sub(60).min(s.len());
        while !s.is_char_boundary(l) {
            l -= 1;
        }
        let mut h = (i + 140).min(s.len());
        while !s.is_char_boundary(h) {
            h += 1;
        }
        s[l..h].to_string()
    };
    format!("at byte {i}: got {:?}\n want {:?}", lo(a), lo(b))
}

/// A secret of every kind slid byte by byte across the first and the fifth
/// cut of a long line (16–90 KiB), glued to filler without blanks or
/// punctuation before it so the cut cannot move away from it (a quote ends
/// values that would otherwise run to the end of the line): the line comes out as
/// the filler around the sample's own redaction, in whole text and streamed,
/// so no part of any secret is ever shown.
#[test]
fn a_secret_of_every_kind_is_masked_at_every_offset_around_a_cut() {
    let red = Redactor::new([EXACT]).unwrap();
    let mut kinds = std::collections::HashSet::new();
    for (sample, secret, kind) in one_per_kind() {
        let short = format!("x&{sample}\"y");
        let want_short = red.redact(&short).into_owned();
        if want_short.contains(secret) {
            continue; // masked only in its own context (line start, …)
        }
        kinds.insert(kind);
        for k in [1usize, 5] {
            let cut = k * LINE_MAX;
            let len = cut + MAX_TOKEN + short.len() + 64;
            for at in cut.saturating_sub(short.len())..=cut + 1 {
                let (pre, post) = ("x".repeat(at), "y".repeat(len - at - short.len()));
                let line = format!("{pre}{short}{post}\n");
                let want = format!("{pre}{want_short}{post}\n");
                let got = red.redact(&line);
                assert!(
                    got == want,
                    "{kind} at {at} (cut {cut}): {}",
                    first_diff(&got, &want)
                );
                if at % 7 == 0 {
                    let streamed = stream_in(&red, &line, 4093);
                    assert!(
                        streamed == want,
                        "{kind} at {at} streamed: {}",
                        first_diff(&streamed, &want)
                    );
                }
            }
        }
    }
    assert!(
        kinds.len() >= 30,
        "only {} kinds covered: {kinds:?}",
        kinds.len()
    );
}

/// The two lines of the report: a host secret glued to 16 KiB of filler, and
/// a `&pw=` assignment whose secret straddled the old 16 KiB cut.
#[test]
fn the_reported_cut_leaks_are_closed() {
    let red = Redactor::new([EXACT]).unwrap();
    let key = "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";
    let lines = [
        format!("{}{EXACT}\n", "A".repeat(16384 - 8)),
        format!("x={}&pw={EXACT}\n", "E".repeat(16384 - 10)),
        format!("x={}&pw={key}\n", "E".repeat(16384 - 10)),
    ];
    for (line, secret) in lines.iter().zip([EXACT, EXACT, key]) {
        for out in [red.redact(line).into_owned(), stream_in(&red, line, 1000)] {
            assert!(!out.contains(&secret[..8]), "{}", &out[16000..]);
            assert!(out.contains("«redacted:"), "{}", &out[16000..]);
        }
    }
}

/// An exact secret longer than [`MAX_TOKEN`] is registered in pieces and
/// still masked entirely (as one or more adjacent masks) wherever the long
/// line holding it is cut.
#[test]
fn a_long_exact_secret_is_masked_across_cuts() {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let long: String = (0..30_000)
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[(x >> 59) as usize % 36])
        })
        .collect();
    let red = Redactor::new([long.as_str()]).unwrap();
    assert_eq!(red.exact_secret_count(), 4);
    for at in [0usize, 100, LINE_MAX - 3, 40_000] {
        let line = format!("{}={long}=tail\n", "z".repeat(at));
        for out in [red.redact(&line).into_owned(), stream_in(&red, &line, 5000)] {
            let shown = out.replace("«redacted:secret»", "");
            assert_eq!(shown, format!("{}==tail\n", "z".repeat(at)));
            assert!(out.contains("=«redacted:secret»"));
        }
    }
    // Within one window its pieces make one mask.
    let red = Redactor::new([&long[..12_000]]).unwrap();
    assert_eq!(red.exact_secret_count(), 2);
    let line = format!("a {} b", &long[..12_000]);
    assert_eq!(red.redact(&line), "a «redacted:secret» b");
}

fn filler() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("x"),
        Just("lorem ipsum "),
        Just("é漢"),
        Just("a,b;c|"),
        Just("k=v&"),
        Just("0123456789abcdef"),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// Lines of 16–100 KiB with a secret of any kind at any offset, fed in
    /// chunks of any size: the streamed output equals the whole-text output,
    /// which is the filler around the sample's own redaction.
    #[test]
    fn long_lines_with_a_secret_anywhere_are_masked_and_split_invariant(
        pick in any::<prop::sample::Index>(),
        len in (16 * 1024usize)..(100 * 1024),
        pos in any::<prop::sample::Index>(),
        fill in filler(),
        step in prop_oneof![1usize..64, 64usize..70_000],
    ) {
        let red = Redactor::new([EXACT]).unwrap();
        let all = one_per_kind();
        let (sample, secret, _) = &all[pick.index(all.len())];
        let short = format!("x&{sample}\"y");
        let want_short = red.redact(&short).into_owned();
        let at = pos.index(len.saturating_sub(short.len()).max(1));
        let rep = |n: usize| {
            let mut s = fill.repeat(n / fill.len() + 1);
            let mut n = n.min(s.len());
            while !s.is_char_boundary(n) {
                n -= 1;
            }
            s.truncate(n);
            s
        };
        let pre = format!("{} ", rep(at));
        let post = format!("\" {}", rep(len.saturating_sub(at + short.len())));
        let line = format!("{pre}{short}{post}\n");
        let whole = red.redact(&line).into_owned();
        if !want_short.contains(secret) {
            prop_assert!(!whole.contains(secret));
            prop_assert!(whole == format!("{pre}{want_short}{post}\n"), "{}", first_diff(&whole, &format!("{pre}{want_short}{post}\n")));
        }
        let streamed = stream_in(&red, &line, step);
        prop_assert!(streamed == whole, "{}", first_diff(&streamed, &whole));
    }
}
