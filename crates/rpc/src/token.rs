//! The shared secret a kernel presents with every request.

use std::fmt;

use subtle::ConstantTimeEq;

/// Number of random bytes in a generated token (256 bits, printed as 64 hex digits).
const TOKEN_BYTES: usize = 32;

/// Failure to get randomness from the operating system for a new [`Token`].
#[derive(Debug, thiserror::Error)]
#[error("could not read random bytes from the operating system for the RPC token: {0}")]
pub struct TokenError(getrandom::Error);

/// The secret a client must send as `"token"` in every request:
/// docs/protocol.md ("Endpoint and credentials").
///
/// 256 bits from the operating system's random source, as lowercase hex.
/// Comparison is constant-time, and neither `Debug` nor `Display` print the
/// value: use [`Token::expose`] to put it into the kernel's environment
/// (`TOOLCELL_RPC_TOKEN`).
///
/// ```
/// let token = toolcell_rpc::Token::generate()?;
/// assert_eq!(format!("{token}"), "«redacted:rpc-token»");
/// assert_eq!(token.expose().len(), 64);
/// assert!(token.matches(token.expose().as_bytes()));
/// assert!(!token.matches(b"guess"));
/// # Ok::<(), toolcell_rpc::TokenError>(())
/// ```
#[derive(Clone)]
pub struct Token {
    hex: String,
}

impl Token {
    /// Makes a fresh token from the operating system's random source.
    ///
    /// # Errors
    /// [`TokenError`] when the OS cannot provide randomness.
    pub fn generate() -> Result<Self, TokenError> {
        let mut raw = [0_u8; TOKEN_BYTES];
        getrandom::fill(&mut raw).map_err(TokenError)?;
        let mut hex = String::with_capacity(TOKEN_BYTES * 2);
        for byte in raw {
            hex.push(char::from(HEX[usize::from(byte >> 4)]));
            hex.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
        Ok(Self { hex })
    }

    /// A token with a chosen value, for tests and fuzzing only.
    #[doc(hidden)]
    pub fn from_fixed(value: &str) -> Self {
        Self {
            hex: value.to_owned(),
        }
    }

    /// The secret itself, for `TOOLCELL_RPC_TOKEN` in the kernel's environment.
    /// Never log it.
    pub fn expose(&self) -> &str {
        &self.hex
    }

    /// Constant-time comparison with what a client sent (the time taken
    /// depends only on the lengths, never on where the bytes differ).
    pub fn matches(&self, candidate: &[u8]) -> bool {
        self.hex.as_bytes().ct_eq(candidate).into()
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(«redacted»)")
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("«redacted:rpc-token»")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tokens_are_long_hex_and_distinct() {
        let a = Token::generate().unwrap();
        let b = Token::generate().unwrap();
        assert_eq!(a.expose().len(), 64);
        assert!(a.expose().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a.expose(), b.expose());
    }

    #[test]
    fn debug_and_display_never_show_the_value() {
        let t = Token::generate().unwrap();
        let shown = format!("{t} {t:?} {t:#?}");
        assert!(!shown.contains(t.expose()));
        assert!(!shown.contains(&t.expose()[..8]));
    }

    #[test]
    fn matches_only_the_exact_value() {
        let t = Token::from_fixed("abcdef");
        assert!(t.matches(b"abcdef"));
        assert!(!t.matches(b"abcdeF"));
        assert!(!t.matches(b"abcde"));
        assert!(!t.matches(b"abcdefa"));
        assert!(!t.matches(b""));
    }
}
