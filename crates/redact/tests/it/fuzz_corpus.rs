//! Replays every committed fuzz corpus file through the same checks the fuzz
//! targets run (`fuzz/fuzz_targets/{ansi_stream,redact_stream}.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(
        &std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("tests/data")
    .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_file() {
            let data = std::fs::read(&path).unwrap();
            let r = std::panic::catch_unwind(|| check(&data));
            assert!(r.is_ok(), "corpus file {} fails", path.display());
            n += 1;
        }
    }
    assert!(n > 0, "no corpus files in {}", dir.display());
}

#[test]
fn ansi_stream_corpus() {
    replay("ansi_stream", toolcell_redact::fuzzing::check_ansi_stream);
}

#[test]
fn redact_stream_corpus() {
    replay(
        "redact_stream",
        toolcell_redact::fuzzing::check_redact_stream,
    );
}
