//! Replays the committed `rpc_request` fuzz corpus and runs the same
//! checks on generated inputs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use proptest::prelude::*;
use toolcell_rpc::fuzzing::{FUZZ_TOKEN, check_request_bytes};

#[test]
fn replay_rpc_request_corpus() {
    let dir = Path::new(
        &std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("tests/data/rpc_request");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| check_request_bytes(&data));
        assert!(outcome.is_ok(), "corpus file {} fails", path.display());
        n += 1;
    }
    assert!(n >= 10, "corpus has only {n} files");
}

fn json_ish_line() -> impl Strategy<Value = Vec<u8>> {
    let tool = prop_oneof![
        Just("\"echo\"".to_owned()),
        Just("\"sleep\"".to_owned()),
        Just("\"fail\"".to_owned()),
        Just("\"nope\"".to_owned()),
        Just("7".to_owned()),
    ];
    let token = prop_oneof![
        Just(format!("\"{FUZZ_TOKEN}\"")),
        Just("\"bad\"".to_owned()),
        Just("null".to_owned()),
        Just("1".to_owned()),
    ];
    let args = prop_oneof![
        Just("{}".to_owned()),
        Just("{\"ms\":3}".to_owned()),
        Just("{\"ms\":\"x\"}".to_owned()),
        Just("{\"danger\":true}".to_owned()),
        Just("{\"danger\":false}".to_owned()),
        Just("{\"message\":\"m\"}".to_owned()),
        Just("[]".to_owned()),
        Just("null".to_owned()),
    ];
    let id = prop_oneof![
        Just(String::new()),
        Just(",\"id\":1".to_owned()),
        Just(",\"id\":null".to_owned()),
        Just(",\"id\":{\"a\":[1,\"x\"]}".to_owned()),
    ];
    (tool, token, args, id, any::<bool>(), any::<u8>()).prop_map(
        |(tool, token, args, id, omit_args, garble)| {
            let mut line = if omit_args {
                format!("{{\"tool\":{tool},\"token\":{token}{id}}}")
            } else {
                format!("{{\"tool\":{tool},\"args\":{args},\"token\":{token}{id}}}")
            }
            .into_bytes();
            // Sometimes damage one byte.
            if garble < 20 && !line.is_empty() {
                let i = usize::from(garble) % line.len();
                line[i] = garble;
            }
            line
        },
    )
}

proptest! {
    #[test]
    fn generated_requests_follow_the_check_order(
        mode in any::<u8>(),
        lines in proptest::collection::vec(json_ish_line(), 1..12),
    ) {
        let mut data = vec![mode];
        for l in lines {
            data.extend_from_slice(&l);
            data.push(b'\n');
        }
        check_request_bytes(&data);
    }

    #[test]
    fn arbitrary_bytes_never_break_the_reply_format(
        data in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        check_request_bytes(&data);
    }
}
