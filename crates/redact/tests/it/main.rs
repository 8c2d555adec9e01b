//! The integration tests of `toolcell-redact`, one module per subject, linked
//! into one test binary (a binary per file cost most of CI's build time).
//! Run one module with `cargo test -p toolcell-redact --test it <module>::`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

mod samples;

mod cases;
mod fuzz_corpus;
mod split_invariance;
