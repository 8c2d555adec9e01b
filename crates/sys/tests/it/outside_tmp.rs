//! Shared with the cli tests (`#[path]`): where test files live that a
//! sandboxed process must see as the host's.

/// A directory for files a sandboxed kernel must see as the host's: not
/// under `/tmp`, which is the sandbox's own. Cargo's target tmp dir,
/// unless the target dir lives under `/tmp` (`CARGO_TARGET_DIR=/tmp/…`),
/// then `/var/tmp` or `$HOME/.cache`.
pub(crate) fn outside_tmp() -> std::path::PathBuf {
    let home_cache = std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache"));
    [
        Some(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))),
        Some(std::path::PathBuf::from("/var/tmp")),
        home_cache,
    ]
    .into_iter()
    .flatten()
    .find(|d| !d.starts_with("/tmp") && std::fs::create_dir_all(d).is_ok())
    .expect("a writable directory outside /tmp (set CARGO_TARGET_DIR or HOME)")
}
