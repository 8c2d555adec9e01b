//! The integration tests of `toolcell-host`, one module per subject, linked
//! into one test binary (a binary per file cost most of CI's build time).
//! Run one module with `cargo test -p toolcell-host --test it <module>::`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

mod common;

mod added_tool;
mod adversarial;
mod cancel;
mod cells;
mod config;
mod config_docs;
mod confine;
mod documented;
mod extra_tools;
mod figures;
mod hardening;
mod interpreter;
mod interrupt_race;
mod journal;
mod languages;
mod lifecycle;
mod limits;
mod output;
mod pool;
mod registry;
mod remote;
mod schema_tool;
mod security;
mod stalls;
mod tools;
