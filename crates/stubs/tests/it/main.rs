//! The integration tests of `toolcell-stubs`, one module per subject, linked
//! into one test binary (a binary per file cost most of CI's build time).
//! Run one module with `cargo test -p toolcell-stubs --test it <module>::`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

#[path = "../../../tools/tests/it/support/golden.rs"]
mod golden;

mod schema;
mod stubs;
mod stubs_other;
