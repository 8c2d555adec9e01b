//! The compile-time registry really holds every built-in tool (registration
//! survives linking), and the dispatcher validates before running.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use toolcell_tools as _;
use toolcell_tools::ToolRegistry;

/// The built-in tools. If one goes missing from the registry — a file
/// dropped from `builtin/mod.rs`, a `register_tool!` line deleted, the crate
/// not linked — this fails. The web tools exist with the `web` feature.
const BUILTINS: &[&str] = &[
    "patch",
    "read_file",
    "search_files",
    "terminal",
    #[cfg(feature = "web")]
    "web_extract",
    #[cfg(feature = "web")]
    "web_search",
    "write_file",
];

#[test]
fn every_builtin_tool_is_registered() {
    let reg = ToolRegistry::builtin().unwrap();
    for &name in BUILTINS {
        assert!(
            reg.get(name).is_some(),
            "built-in tool `{name}` is not registered"
        );
    }
}

#[test]
fn every_builtin_tool_has_a_doc_and_documented_arguments() {
    let reg = ToolRegistry::builtin().unwrap();
    for &name in BUILTINS {
        let Some(tool) = reg.get(name) else { continue };
        assert!(!tool.doc().trim().is_empty(), "{name} has no doc");
        for p in toolcell_tools::schema::params(tool.as_ref()) {
            assert!(
                !p.description.is_empty(),
                "{name}.{} has no doc comment",
                p.name
            );
        }
    }
}

#[test]
fn every_builtin_tool_is_enabled_by_default_and_only_registered_ones_are() {
    let reg = ToolRegistry::builtin().unwrap();
    let defaults = toolcell_tools::default_enabled_tools();
    assert_eq!(defaults, reg.default_enabled());
    for &name in BUILTINS {
        assert!(defaults.iter().any(|d| d == name), "{name}: {defaults:?}");
    }
    #[cfg(not(feature = "web"))]
    assert!(
        !defaults.iter().any(|d| d.starts_with("web_")),
        "{defaults:?}"
    );
    reg.select(&defaults).unwrap();
}

#[test]
fn select_reports_unknown_names_with_the_known_ones() {
    let reg = ToolRegistry::builtin().unwrap();
    let err = reg.select(&["read_file", "nope"]).unwrap_err().to_string();
    assert!(err.contains("`nope`") && err.contains("read_file"), "{err}");
}
