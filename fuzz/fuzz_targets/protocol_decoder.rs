//! Split invariance and bounded buffering of the frame decoder: decoding the
//! input whole, byte by byte and at input-derived cut points must give the
//! same events, with the held bytes within bounds after every chunk.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = toolcell_protocol::fuzzing::check_decoder(data) {
        panic!("{e}");
    }
});
