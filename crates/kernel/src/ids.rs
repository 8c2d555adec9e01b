//! Random identifiers: cell ids, kernel ids and the private owner of a
//! per-call kernel.
//!
//! Each comes from the operating system's random source (`getrandom`). When
//! that source fails, generating an id is an error ([`RandomError`]) that the
//! caller turns into a failed operation (a cell that did not run, a kernel
//! that did not start) — never a predictable fallback such as a counter, the
//! time or a pid. A predictable cell id would let a cell forge the result of
//! a later cell; a predictable kernel id or owner would let one session land
//! in another's kernel.
//!
//! Every generator has a `*_with` twin taking the random source, so tests
//! can show a failing source is an error.

pub use toolcell_protocol::RandomError;
use toolcell_protocol::random_hex_with;

/// Random bytes in a cell id (64 bits, as 16 hex digits).
const CELL_ID_BYTES: usize = 8;
/// Random bytes in a kernel id.
const KERNEL_ID_BYTES: usize = 8;
/// Random bytes in a per-call kernel's private owner suffix.
const OWNER_BYTES: usize = 8;

/// The id the host sends with a cell and accepts its result only with.
/// Only made from fresh random bytes ([`CellId::generate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellId(String);

impl CellId {
    /// A fresh cell id from the OS random source.
    ///
    /// # Errors
    /// [`RandomError`] when the source fails.
    pub fn generate() -> Result<Self, RandomError> {
        Self::generate_with(getrandom::fill)
    }

    /// [`CellId::generate`] with the random source given.
    ///
    /// # Errors
    /// [`RandomError`] when `fill` fails.
    pub fn generate_with(
        fill: impl FnOnce(&mut [u8]) -> Result<(), getrandom::Error>,
    ) -> Result<Self, RandomError> {
        random_hex_with(CELL_ID_BYTES, fill).map(Self)
    }

    /// The id as sent to the runner.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A fresh kernel id, `k-` and 16 hex digits.
///
/// # Errors
/// [`RandomError`] when the source fails.
pub fn kernel_id() -> Result<String, RandomError> {
    kernel_id_with(getrandom::fill)
}

/// [`kernel_id`] with the random source given.
///
/// # Errors
/// [`RandomError`] when `fill` fails.
pub fn kernel_id_with(
    fill: impl FnOnce(&mut [u8]) -> Result<(), getrandom::Error>,
) -> Result<String, RandomError> {
    Ok(format!("k-{}", random_hex_with(KERNEL_ID_BYTES, fill)?))
}

/// The private session owner of one per-call kernel: `owner`, a NUL and a
/// random suffix, so no other request can name (and reuse) that kernel.
///
/// # Errors
/// [`RandomError`] when the source fails.
pub fn per_call_owner(owner: &str) -> Result<String, RandomError> {
    per_call_owner_with(owner, getrandom::fill)
}

/// [`per_call_owner`] with the random source given.
///
/// # Errors
/// [`RandomError`] when `fill` fails.
pub fn per_call_owner_with(
    owner: &str,
    fill: impl FnOnce(&mut [u8]) -> Result<(), getrandom::Error>,
) -> Result<String, RandomError> {
    Ok(format!(
        "{owner}\u{0}per-call-{}",
        random_hex_with(OWNER_BYTES, fill)?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failing(_: &mut [u8]) -> Result<(), getrandom::Error> {
        Err(getrandom::Error::UNSUPPORTED)
    }

    #[test]
    fn a_failing_random_source_is_an_error_for_every_id() {
        let want = RandomError(getrandom::Error::UNSUPPORTED);
        assert_eq!(CellId::generate_with(failing), Err(want));
        assert_eq!(kernel_id_with(failing), Err(want));
        assert_eq!(per_call_owner_with("alice", failing), Err(want));
        assert!(
            want.to_string()
                .starts_with("could not read random bytes from the operating system"),
            "{want}"
        );
    }

    #[test]
    fn ids_are_the_random_bytes_in_hex_and_differ_each_time() {
        let fixed = |b: &mut [u8]| {
            b.fill(0x5a);
            Ok(())
        };
        assert_eq!(
            CellId::generate_with(fixed).unwrap().as_str(),
            "5a5a5a5a5a5a5a5a"
        );
        assert_eq!(kernel_id_with(fixed).unwrap(), "k-5a5a5a5a5a5a5a5a");
        assert_eq!(
            per_call_owner_with("bob", fixed).unwrap(),
            "bob\u{0}per-call-5a5a5a5a5a5a5a5a"
        );
        let a = CellId::generate().unwrap();
        let b = CellId::generate().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 16);
        assert_ne!(kernel_id().unwrap(), kernel_id().unwrap());
    }
}
