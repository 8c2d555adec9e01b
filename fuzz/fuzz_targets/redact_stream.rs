//! Split invariance of secret redaction: a `RedactStream` fed input-derived
//! chunks equals whole-text redaction, a `Cleaner` fed raw chunks equals
//! strip-then-redact, no panic, output minus masks never longer than input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    toolcell_redact::fuzzing::check_redact_stream(data);
});
