//! How `serve` and `mcp` read their input: one message per line, lines
//! capped at 64 MiB. A longer line is answered with an error and skipped
//! (never buffered whole), a line that is not UTF-8 is a parse error, and
//! the server goes on reading the next line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::common::{Env, Serve};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);

/// The servers' line cap.
const MAX_LINE: usize = 64 * 1024 * 1024;

/// A line one byte over the cap, then its newline.
fn over_the_cap() -> Vec<u8> {
    let mut line = vec![b' '; MAX_LINE + 1];
    line[0] = b'{';
    line.push(b'\n');
    line
}

#[test]
fn serve_skips_a_line_over_the_cap_and_answers_the_next() {
    let env = Env::fast();
    let mut s = Serve::start(&env, &[]);
    s.send_bytes(&over_the_cap());
    let m = s.next(LIMIT);
    assert_eq!(m["error"]["code"], -32600, "{m}");
    let msg = m["error"]["message"].as_str().unwrap();
    assert!(msg.contains("longer than 67108864 bytes"), "{msg}");
    // A line exactly at the cap is read (and is not valid JSON).
    let mut at_cap = vec![b' '; MAX_LINE];
    at_cap[0] = b'{';
    at_cap.push(b'\n');
    s.send_bytes(&at_cap);
    let m = s.next(LIMIT);
    assert_eq!(m["error"]["code"], -32700, "{m}");
    s.request(1, "sessions", json!({}));
    let m = s.next(LIMIT);
    assert_eq!(m["id"], 1, "{m}");
    assert!(m["result"]["sessions"].is_array(), "{m}");
    s.close_stdin();
    assert!(s.wait(LIMIT).success());
    s.assert_only_jsonrpc();
}

#[test]
fn mcp_skips_a_line_over_the_cap_and_bad_utf8_and_reads_on() {
    let env = Env::fast();
    let mut s = Serve::start_command(&env, "mcp", &[]);
    s.send_bytes(&over_the_cap());
    let m = s.next(LIMIT);
    assert_eq!(m["error"]["code"], -32600, "{m}");
    let msg = m["error"]["message"].as_str().unwrap();
    assert!(msg.contains("longer than"), "{msg}");
    s.send_bytes(b"{\"jsonrpc\": \"\xff\xfe\"}\n");
    let m = s.next(LIMIT);
    assert_eq!(m["error"]["code"], -32700, "{m}");
    assert!(
        m["error"]["message"].as_str().unwrap().contains("UTF-8"),
        "{m}"
    );
    s.send_raw("{not json");
    let m = s.next(LIMIT);
    assert_eq!(m["error"]["code"], -32700, "{m}");
    s.close_stdin();
    assert!(s.wait(LIMIT).success());
    s.assert_only_jsonrpc();
}
