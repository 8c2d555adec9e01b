#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]
//! `docs/configuration.md` is rendered from the key declarations; this test
//! fails when the committed file differs, and rewrites it with
//! `UPDATE_DOCS=1`.

use toolcell_host::config::{Config, key_infos, reference_markdown, section_infos};

#[cfg(feature = "web")]
fn docs_file() -> std::path::PathBuf {
    std::path::PathBuf::from(
        &std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../../docs/configuration.md")
}

// The reference lists the default tool set, which holds the web tools only
// with the `web` feature (on by default, and in the binary).
#[cfg(feature = "web")]
#[test]
fn the_configuration_reference_is_up_to_date() {
    let want = reference_markdown();
    let path = docs_file();
    if std::env::var_os("UPDATE_DOCS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &want).unwrap();
        eprintln!("rewrote {}", path.display());
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    if have != want {
        let first = have
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| have.lines().count().min(want.lines().count()));
        panic!(
            "docs/configuration.md is out of date with the config declarations \
             (first difference at line {}).\n\
             Run `UPDATE_DOCS=1 cargo test -p toolcell-host --test config_docs` to update it.",
            first + 1
        );
    }
}

#[test]
fn the_reference_lists_every_key_with_its_default() {
    let text = reference_markdown();
    for section in section_infos() {
        assert!(
            text.contains(&format!("## `[{}]`", section.name)),
            "{}",
            section.name
        );
    }
    for info in key_infos() {
        let row = format!("| `{}` | `{}` |", info.name, info.default);
        assert!(text.contains(&row), "{} missing: {row}", info.key);
    }
    assert_eq!(key_infos().len(), Config::keys().count());
    // The defaults the reference states are the ones a config gets.
    assert!(text.contains("| `timeout` | `300` |"));
    assert!(text.contains("| `max_kernels` | `4` |"));
}

#[test]
fn the_example_in_the_reference_is_a_valid_configuration() {
    let text = reference_markdown();
    let example = text
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .unwrap();
    let c = Config::from_toml_str(example, None).unwrap();
    assert_eq!(c.kernels.max_kernels, 2);
}
