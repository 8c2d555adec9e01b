//! The integration tests of `toolcell-kernel`, one module per subject, linked
//! into one test binary (a binary per file cost most of CI's build time).
//! Run one module with `cargo test -p toolcell-kernel --test it <module>::`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

mod runner_python;
