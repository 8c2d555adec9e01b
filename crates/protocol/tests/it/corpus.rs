//! Replays the committed fuzz corpus of the `protocol_decoder` target
//! (`tests/data/protocol_decoder/`) through the same check the fuzzer runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

#[test]
fn every_corpus_file_passes_the_decoder_check() {
    let dir = Path::new(
        &std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("tests/data/protocol_decoder");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        if let Err(e) = toolcell_protocol::fuzzing::check_decoder(&data) {
            panic!("{}: {e}", path.display());
        }
        n += 1;
    }
    assert!(
        n >= 10,
        "the corpus in {} has only {n} files",
        dir.display()
    );
}
