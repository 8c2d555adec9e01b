//! Request-line parsing and the check order of the RPC server
//! (docs/protocol.md, "Checks, in order"): every line gets exactly one
//! well-formed JSON reply with a documented code, refusals follow the check
//! order, ids are echoed, and the line buffer stays within its cap. The checks
//! live in `toolcell_rpc::fuzzing` so the committed corpus
//! (`crates/rpc/tests/data/rpc_request/`) is replayed by `cargo test`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    toolcell_rpc::fuzzing::check_request_bytes(data);
});
