//! `toolcell frames`: the real binary on byte streams.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::Value;

fn frames(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolcell"))
        .arg("frames")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let data = input.to_vec();
    // Write from a thread so a large input cannot deadlock against stdout.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&data);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

fn events(out: &Output) -> Vec<(String, Vec<u8>)> {
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let obj = v.as_object().unwrap();
            assert_eq!(obj.len(), 2, "exactly event and data_b64: {l}");
            (
                v["event"].as_str().unwrap().to_string(),
                B64.decode(v["data_b64"].as_str().unwrap()).unwrap(),
            )
        })
        .collect()
}

fn ev(kind: &str, data: &[u8]) -> (String, Vec<u8>) {
    (kind.to_string(), data.to_vec())
}

#[test]
fn the_readme_example_prints_raw_frame_raw() {
    let out = frames(&["--sentinel", "@@S@@"], b"a\n@@S@@ 2\n{}b");
    assert!(out.status.success());
    assert_eq!(
        events(&out),
        vec![ev("raw", b"a"), ev("frame", b"{}"), ev("raw", b"b")]
    );
}

#[test]
fn eof_inside_a_frame_is_reported() {
    let out = frames(&["--sentinel", "S"], b"x\nS 10\nabc");
    assert!(out.status.success());
    assert_eq!(
        events(&out),
        vec![ev("raw", b"x"), ev("eof_in_frame", b"abc")]
    );
}

#[test]
fn false_markers_and_bad_headers_are_raw() {
    let input = b"\nS 12x\nS \nS 99999999999999999999999\n\nS";
    let out = frames(&["--sentinel", "S"], input);
    assert!(out.status.success());
    assert_eq!(events(&out), vec![ev("raw", input)]);
}

#[test]
fn max_frame_len_is_honoured() {
    let out = frames(
        &["--sentinel", "S", "--max-frame-len", "3"],
        b"\nS 4\nabcd\nS 3\nabc",
    );
    assert_eq!(
        events(&out),
        vec![ev("raw", b"\nS 4\nabcd"), ev("frame", b"abc")]
    );
}

#[test]
fn garbage_in_gives_events_and_exit_zero() {
    // Binary noise with markers sprinkled in, including invalid UTF-8.
    let mut input = Vec::new();
    let mut x: u32 = 0x1234_5678;
    for i in 0..200_000u32 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        input.push((x >> 24) as u8);
        if i % 997 == 0 {
            input.extend_from_slice(b"\nS ");
        }
    }
    let out = frames(&["--sentinel", "S"], &input);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let total: usize = events(&out)
        .iter()
        .filter(|(k, _)| k == "raw")
        .map(|(_, d)| d.len())
        .sum();
    assert!(total > 0);
    assert!(out.stderr.is_empty());
}

#[test]
fn empty_input_prints_nothing() {
    let out = frames(&["--sentinel", "S"], b"");
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
}

#[test]
fn an_invalid_sentinel_is_a_usage_error() {
    let out = frames(&["--sentinel", "has space"], b"x");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sentinel"), "{err}");
    let out = frames(&[], b"x");
    assert_eq!(out.status.code(), Some(2));
}
