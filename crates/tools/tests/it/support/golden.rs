//! Golden-file comparison shared by the tests of this crate.

use std::path::{Path, PathBuf};

fn golden_dir() -> PathBuf {
    Path::new(
        &std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("tests/golden")
}

/// Compares `actual` with the golden file `name`; `TOOLCELL_UPDATE_GOLDEN=1`
/// rewrites it instead.
pub(crate) fn check_golden(name: &str, actual: &str) {
    let path = golden_dir().join(name);
    if std::env::var_os("TOOLCELL_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with TOOLCELL_UPDATE_GOLDEN=1 to create it",
            path.display()
        )
    });
    if expected != actual {
        let diff_at = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(expected.lines().count().min(actual.lines().count()));
        panic!(
            "{} differs from the generated text at line {}:\n  golden:    {:?}\n  generated: {:?}\n\
             If the change is intended, rerun with TOOLCELL_UPDATE_GOLDEN=1 and review the diff.",
            path.display(),
            diff_at + 1,
            expected.lines().nth(diff_at),
            actual.lines().nth(diff_at)
        );
    }
}
