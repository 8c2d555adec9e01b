//! The integration tests of `toolcell-cli`, one module per subject, linked
//! into one test binary (a binary per file cost most of CI's build time).
//! Run one module with `cargo test -p toolcell-cli --test it <module>::`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

mod common;
#[path = "../../../sys/tests/it/outside_tmp.rs"]
mod outside_tmp;

mod client_tools;
mod commands;
mod compare_script;
mod daemon;
mod doc_examples;
mod engines;
mod examples;
mod exec;
mod files_changed;
mod fold;
mod frames;
mod hardening;
mod journal;
mod languages;
mod lifecycle;
mod lines;
mod mcp;
mod mcp_servers;
mod probe_cache;
mod remote;
mod repl;
mod sandbox;
mod serve;
mod signals;
mod soak;
