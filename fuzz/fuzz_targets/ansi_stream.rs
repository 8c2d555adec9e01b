//! Split invariance of ANSI stripping: streaming at input-derived cut points
//! and byte by byte equals whole-text stripping; no control characters
//! survive; output never longer than input except for U+FFFD replacements.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    toolcell_redact::fuzzing::check_ansi_stream(data);
});
