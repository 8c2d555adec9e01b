//! Request-line parsing and SPEC §7 check order of the RPC server: every
//! line gets exactly one well-formed JSON reply with a SPEC code, refusals
//! follow the check order, ids are echoed, and the line buffer stays within
//! its cap. The checks live in `toolcell_rpc::fuzzing` so the committed
//! corpus (`crates/rpc/tests/data/rpc_request/`) is replayed by `cargo test`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    toolcell_rpc::fuzzing::check_request_bytes(data);
});
