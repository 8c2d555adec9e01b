//! Shared input generators for the toolcell benchmarks (`benches/benches/`).
//!
//! Inputs are deterministic (a fixed xorshift seed), so figures are
//! comparable from run to run.

pub mod files;
pub mod frames;
pub mod text;
pub mod web;
