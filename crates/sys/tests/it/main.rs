//! The sandbox, from outside: real processes in real namespaces.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

mod outside_tmp;
mod sandbox;
