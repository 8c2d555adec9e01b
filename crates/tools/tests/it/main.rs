//! The integration tests of `toolcell-tools`, one module per subject, linked
//! into one test binary (a binary per file cost most of CI's build time).
//! Run one module with `cargo test -p toolcell-tools --test it <module>::`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

#[path = "support/golden.rs"]
mod golden;
#[path = "support/wait.rs"]
mod wait;
mod web_server;

mod extra_tool;
mod files;
mod hints;
#[cfg(feature = "mcp")]
mod mcp_servers;
mod patch;
mod registry;
mod schema_tool;
mod search_files;
mod special_files;
mod terminal;
#[cfg(feature = "web")]
mod web;
