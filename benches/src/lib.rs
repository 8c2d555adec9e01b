//! Shared input generators for the toolcell benchmarks (`benches/benches/`).
//!
//! Inputs are deterministic (a fixed xorshift seed), so figures are
//! comparable from run to run.

pub mod files;
pub mod frames;
pub mod scale;
pub mod text;
pub mod web;

/// A deterministic xorshift64 generator for input generators.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next pseudo-random value.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// One of `items`.
    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }

    /// A value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
