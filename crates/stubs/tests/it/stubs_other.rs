//! The R and JavaScript stub modules (docs/languages.md): golden files of every
//! built-in tool, and each module parsed by its own interpreter (a missing
//! interpreter fails the test with the install command).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::golden;

use golden::check_golden;
use std::sync::Arc;
use toolcell_tools::{DynTool, ToolRegistry};

fn builtin_tools() -> Vec<Arc<dyn DynTool>> {
    let reg = ToolRegistry::builtin().unwrap();
    let names: Vec<String> = reg.names().map(str::to_string).collect();
    reg.select(&names).unwrap()
}

fn parses(program: &str, args: &[&str], install: &str) {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} is not installed ({e}); install it with: {install}"));
    assert!(
        out.status.success(),
        "{program} rejected the module: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_r_module_matches_its_golden_file_and_parses() {
    let src = toolcell_stubs::r::stub_module(&builtin_tools(), &[]).unwrap();
    check_golden("toolcell_tools.R", &src);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.R");
    std::fs::write(&path, &src).unwrap();
    let expr = format!(
        "e <- new.env(); sys.source('{}', envir = e); stopifnot(is.function(e$read_file), identical(names(formals(e$read_file)), c('path', 'offset', 'limit')))",
        path.display()
    );
    parses(
        "Rscript",
        &["-e", &expr],
        "apt-get install r-base-core r-cran-jsonlite",
    );
}

#[test]
fn the_javascript_module_matches_its_golden_file_and_loads() {
    let src = toolcell_stubs::js::stub_module(&builtin_tools(), &[]).unwrap();
    check_golden("toolcell_tools.js", &src);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.js");
    std::fs::write(&path, &src).unwrap();
    let code = format!(
        "const m = require('{}'); if (typeof m.read_file !== 'function' || typeof m.ToolError !== 'function') process.exit(1)",
        path.display()
    );
    parses("node", &["-e", &code], "apt-get install nodejs");
}
