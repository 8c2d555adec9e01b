//! The per-kernel sentinel and the frame encoder.

use std::fmt;

/// Number of random bytes in a generated sentinel (128 bits, rendered as hex).
const RANDOM_BYTES: usize = 16;

/// Prefix of generated sentinels. Purely cosmetic: it makes a frame header
/// recognisable in a hex dump; the secrecy is in the random part.
const PREFIX: &str = "@tc";

/// The longest sentinel [`Sentinel::new`] accepts.
pub const MAX_SENTINEL_LEN: usize = 256;

/// A per-kernel frame sentinel: printable ASCII without whitespace.
///
/// The runner learns it from the `hello` request and keeps it only in memory,
/// so code running in a cell cannot forge a frame without guessing it.
/// `Debug` does not print the value; use [`Sentinel::as_str`] on purpose.
#[derive(Clone, PartialEq, Eq)]
pub struct Sentinel(String);

/// Why a string was refused as a sentinel.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SentinelError {
    /// The sentinel was empty.
    #[error("the sentinel is empty; give at least one printable ASCII character")]
    Empty,
    /// The sentinel was longer than [`MAX_SENTINEL_LEN`].
    #[error("the sentinel is {0} bytes long; at most {MAX_SENTINEL_LEN} are accepted")]
    TooLong(usize),
    /// The sentinel contained a byte outside `!`..=`~`.
    #[error(
        "the sentinel contains byte 0x{byte:02x} at offset {offset}; only printable ASCII without whitespace (0x21..=0x7e) is allowed"
    )]
    BadByte {
        /// The offending byte.
        byte: u8,
        /// Its offset in the sentinel.
        offset: usize,
    },
    /// The operating system's random source failed.
    #[error(transparent)]
    Random(#[from] RandomError),
}

/// The operating system's random source (`getrandom`) failed. Every random
/// value toolcell needs (sentinels, tokens, cell and kernel ids) is an error
/// then, never a predictable fallback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("could not read random bytes from the operating system: {0}")]
pub struct RandomError(pub getrandom::Error);

impl Sentinel {
    /// Validates `s` as a sentinel: 1 to [`MAX_SENTINEL_LEN`] bytes of
    /// printable ASCII without whitespace (`0x21..=0x7e`).
    ///
    /// # Errors
    /// [`SentinelError`] naming the first problem found.
    pub fn new(s: impl Into<String>) -> Result<Self, SentinelError> {
        let s = s.into();
        if s.is_empty() {
            return Err(SentinelError::Empty);
        }
        if s.len() > MAX_SENTINEL_LEN {
            return Err(SentinelError::TooLong(s.len()));
        }
        if let Some((offset, &byte)) = s
            .as_bytes()
            .iter()
            .enumerate()
            .find(|&(_, b)| !(0x21..=0x7e).contains(b))
        {
            return Err(SentinelError::BadByte { byte, offset });
        }
        Ok(Self(s))
    }

    /// Generates a fresh sentinel with 128 random bits from the operating
    /// system (`getrandom`), e.g. `@tc3f9a…` (35 characters).
    ///
    /// # Errors
    /// [`SentinelError::Random`] if the OS random source is unavailable.
    pub fn generate() -> Result<Self, SentinelError> {
        let hex = random_hex(RANDOM_BYTES)?;
        Ok(Self(format!("{PREFIX}{hex}")))
    }

    /// The sentinel text, for the `hello` request.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The bytes a frame starts with: `"\n" + sentinel + " "`.
    #[must_use]
    pub fn marker(&self) -> Vec<u8> {
        let mut m = Vec::with_capacity(self.0.len() + 2);
        m.push(b'\n');
        m.extend_from_slice(self.0.as_bytes());
        m.push(b' ');
        m
    }
}

impl fmt::Debug for Sentinel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sentinel(«hidden»)")
    }
}

/// `n` random bytes from the OS, as lowercase hex.
///
/// # Errors
/// [`RandomError`] when the random source fails (there is no fallback).
pub fn random_hex(n: usize) -> Result<String, RandomError> {
    random_hex_with(n, getrandom::fill)
}

/// [`random_hex`] with the random source given: the seam that lets tests
/// show a failing source is an error, not a predictable value.
///
/// ```
/// use toolcell_protocol::{RandomError, random_hex_with};
///
/// let failing = |_: &mut [u8]| Err(getrandom::Error::UNSUPPORTED);
/// assert_eq!(random_hex_with(8, failing), Err(RandomError(getrandom::Error::UNSUPPORTED)));
/// let fixed = |b: &mut [u8]| { b.fill(0xab); Ok(()) };
/// assert_eq!(random_hex_with(2, fixed).unwrap(), "abab");
/// ```
///
/// # Errors
/// [`RandomError`] when `fill` fails.
pub fn random_hex_with(
    n: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<(), getrandom::Error>,
) -> Result<String, RandomError> {
    let mut buf = vec![0u8; n];
    fill(&mut buf).map_err(RandomError)?;
    let mut out = String::with_capacity(n * 2);
    for b in buf {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    Ok(out)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Encodes one frame: `"\n" + sentinel + " " + len(body) + "\n" + body`.
///
/// ```
/// use toolcell_protocol::{encode_frame, Sentinel};
/// let s = Sentinel::new("@@S@@").unwrap();
/// assert_eq!(encode_frame(&s, b"{}"), b"\n@@S@@ 2\n{}");
/// ```
#[must_use]
pub fn encode_frame(sentinel: &Sentinel, body: &[u8]) -> Vec<u8> {
    let len = body.len().to_string();
    let mut out = Vec::with_capacity(sentinel.0.len() + len.len() + body.len() + 3);
    out.push(b'\n');
    out.extend_from_slice(sentinel.0.as_bytes());
    out.push(b' ');
    out.extend_from_slice(len.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_sentinels_are_valid_distinct_and_long_enough() {
        let a = Sentinel::generate().unwrap();
        let b = Sentinel::generate().unwrap();
        assert_ne!(a, b);
        assert!(Sentinel::new(a.as_str()).is_ok());
        // 128 bits as hex after the prefix.
        assert_eq!(a.as_str().len(), PREFIX.len() + 32);
    }

    #[test]
    fn debug_hides_the_value() {
        let s = Sentinel::new("secret-sentinel").unwrap();
        assert!(!format!("{s:?}").contains("secret"));
    }

    #[test]
    fn invalid_sentinels_are_refused_with_the_reason() {
        assert_eq!(Sentinel::new(""), Err(SentinelError::Empty));
        assert_eq!(
            Sentinel::new("a b"),
            Err(SentinelError::BadByte {
                byte: b' ',
                offset: 1
            })
        );
        assert!(matches!(
            Sentinel::new("é"),
            Err(SentinelError::BadByte { offset: 0, .. })
        ));
        assert_eq!(
            Sentinel::new("x".repeat(300)),
            Err(SentinelError::TooLong(300))
        );
    }

    #[test]
    fn marker_wraps_the_sentinel() {
        let s = Sentinel::new("S").unwrap();
        assert_eq!(s.marker(), b"\nS ");
        assert_eq!(encode_frame(&s, b""), b"\nS 0\n");
    }
}
