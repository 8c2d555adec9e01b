//! `search_files` through the registry, as a cell calls it, on real files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolcell_tools::{ToolContext, ToolError, ToolRegistry, ToolSettings};

fn write(root: &Path, rel: &str, content: impl AsRef<[u8]>) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

fn context_for(cwd: &Path) -> ToolContext {
    ToolContext::new(
        Arc::new(ToolSettings::new(cwd)),
        Instant::now() + Duration::from_secs(60),
        CancellationToken::new(),
    )
}

/// Validates then calls, as the rpc dispatcher does.
async fn call(cwd: &Path, args: Value) -> Result<Value, String> {
    let reg = ToolRegistry::builtin().unwrap();
    let tool = reg.get("search_files").expect("search_files is registered");
    tool.validate(&args)?;
    tool.call(args, context_for(cwd))
        .await
        .map_err(|e| e.to_string())
}

async fn ok(cwd: &Path, args: Value) -> Value {
    match call(cwd, args.clone()).await {
        Ok(v) => v,
        Err(e) => panic!("search_files({args}) failed: {e}"),
    }
}

fn paths(v: &Value) -> Vec<String> {
    v["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["path"].as_str().unwrap().to_string())
        .collect()
}

fn lines(v: &Value) -> Vec<(String, u64, String)> {
    v["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["path"].as_str().unwrap().to_string(),
                m["line"].as_u64().unwrap(),
                m["text"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(r, "src/main.rs", "fn main() {\n    let needle = 1;\n}\n");
    write(r, "src/lib.rs", "// no match here\npub fn needle() {}\n");
    write(r, "README.md", "A needle in a haystack.\n");
    write(r, "notes/todo.txt", "nothing\n");
    dir
}

#[tokio::test]
async fn content_matches_give_path_line_and_text_in_path_order() {
    let dir = tree();
    let v = ok(dir.path(), json!({"pattern": "needle"})).await;
    assert_eq!(
        lines(&v),
        vec![
            ("README.md".into(), 1, "A needle in a haystack.".into()),
            ("src/lib.rs".into(), 2, "pub fn needle() {}".into()),
            ("src/main.rs".into(), 2, "    let needle = 1;".into()),
        ]
    );
    assert_eq!(v["total"], 3);
    assert_eq!(v["truncated"], false);
    // Plain content matches carry no count/context fields.
    let first = v["matches"][0].as_object().unwrap();
    assert_eq!(
        first.keys().map(String::as_str).collect::<Vec<_>>(),
        ["path", "line", "text"]
    );
}

#[tokio::test]
async fn regex_syntax_and_case_flag() {
    let dir = tree();
    let v = ok(dir.path(), json!({"pattern": r"fn \w+\(\)"})).await;
    assert_eq!(paths(&v), ["src/lib.rs", "src/main.rs"]);
    let v = ok(dir.path(), json!({"pattern": "NEEDLE"})).await;
    assert_eq!(v["total"], 0);
    assert_eq!(v["matches"], json!([]));
    let v = ok(dir.path(), json!({"pattern": "(?i)NEEDLE"})).await;
    assert_eq!(v["total"], 3);
}

#[tokio::test]
async fn gitignore_ignore_and_hidden_files_are_skipped_without_a_git_repo() {
    let dir = tree();
    let r = dir.path();
    write(r, ".gitignore", "target/\n*.log\n");
    write(r, ".ignore", "generated.rs\n");
    write(r, "target/debug/out.rs", "needle\n");
    write(r, "app.log", "needle\n");
    write(r, "src/generated.rs", "needle\n");
    write(r, ".hidden/secret.txt", "needle\n");
    write(r, ".env", "needle\n");
    let v = ok(r, json!({"pattern": "needle"})).await;
    assert_eq!(paths(&v), ["README.md", "src/lib.rs", "src/main.rs"]);
    let v = ok(r, json!({"pattern": "*", "target": "files"})).await;
    assert_eq!(
        paths(&v),
        ["README.md", "notes/todo.txt", "src/lib.rs", "src/main.rs"]
    );
}

#[tokio::test]
async fn nested_gitignore_applies_below_its_directory() {
    let dir = tree();
    let r = dir.path();
    write(r, "src/.gitignore", "lib.rs\n");
    let v = ok(r, json!({"pattern": "needle"})).await;
    assert_eq!(paths(&v), ["README.md", "src/main.rs"]);
}

#[tokio::test]
async fn binary_files_are_skipped() {
    let dir = tree();
    let r = dir.path();
    let mut bin = b"needle\n".to_vec();
    bin.extend_from_slice(&[0, 1, 2, 3]);
    bin.extend_from_slice(b"\nneedle again\n");
    write(r, "blob.bin", &bin);
    let v = ok(r, json!({"pattern": "needle"})).await;
    assert!(!paths(&v).contains(&"blob.bin".to_string()), "{v}");
    assert_eq!(v["total"], 3);
    let v = ok(r, json!({"pattern": "needle", "output_mode": "count"})).await;
    assert!(!paths(&v).contains(&"blob.bin".to_string()), "{v}");
}

#[tokio::test]
async fn pages_cover_every_match_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(r, "a.txt", "hit 1\nmiss\nhit 2\nhit 3\n");
    write(r, "b.txt", "hit 4\n");
    write(r, "c/d.txt", "hit 5\nhit 6\nmiss\nhit 7\n");
    let all = ok(r, json!({"pattern": "hit"})).await;
    assert_eq!(all["total"], 7);
    let mut seen = Vec::new();
    for (offset, more) in [(0, true), (3, true), (6, false)] {
        let v = ok(r, json!({"pattern": "hit", "limit": 3, "offset": offset})).await;
        assert_eq!(v["total"], 7, "total is the same on every page");
        assert_eq!(v["truncated"], more, "offset {offset}: {v}");
        seen.extend(lines(&v));
    }
    assert_eq!(seen, lines(&all));
    let texts: Vec<_> = seen.iter().map(|(_, _, t)| t.clone()).collect();
    assert_eq!(
        texts,
        (1..=7).map(|i| format!("hit {i}")).collect::<Vec<_>>()
    );
    // Past the end: empty page, nothing more.
    let v = ok(r, json!({"pattern": "hit", "offset": 50})).await;
    assert_eq!(v["matches"], json!([]));
    assert_eq!(v["total"], 7);
    assert_eq!(v["truncated"], false);
    // limit=0 just counts.
    let v = ok(r, json!({"pattern": "hit", "limit": 0})).await;
    assert_eq!(v["matches"], json!([]));
    assert_eq!(v["total"], 7);
    assert_eq!(v["truncated"], true);
}

#[tokio::test]
async fn limit_is_capped_but_everything_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let body: String = (0..1200).map(|i| format!("row {i}\n")).collect();
    write(dir.path(), "big.txt", body);
    let v = ok(dir.path(), json!({"pattern": "row", "limit": 100000})).await;
    assert_eq!(v["matches"].as_array().unwrap().len(), 500);
    assert_eq!(v["total"], 1200);
    assert_eq!(v["truncated"], true);
}

#[tokio::test]
async fn context_lines_before_and_after_each_match() {
    let dir = tempfile::tempdir().unwrap();
    let body = "l1\nl2 hit\nl3\nl4\nl5\nl6 hit\nl7 hit\nl8\n";
    write(dir.path(), "f.txt", body);
    let v = ok(dir.path(), json!({"pattern": "hit", "context": 2})).await;
    let m = v["matches"].as_array().unwrap();
    assert_eq!(m.len(), 3);
    assert_eq!(m[0]["line"], 2);
    assert_eq!(m[0]["before"], json!(["l1"]));
    assert_eq!(m[0]["after"], json!(["l3", "l4"]));
    assert_eq!(m[1]["line"], 6);
    assert_eq!(m[1]["before"], json!(["l4", "l5"]));
    assert_eq!(m[1]["after"], json!(["l7 hit", "l8"]));
    assert_eq!(m[2]["line"], 7);
    assert_eq!(m[2]["before"], json!(["l5", "l6 hit"]));
    assert_eq!(m[2]["after"], json!(["l8"]));
    // Context also works on a later page.
    let v = ok(
        dir.path(),
        json!({"pattern": "hit", "context": 1, "offset": 2, "limit": 1}),
    )
    .await;
    assert_eq!(v["matches"][0]["line"], 7);
    assert_eq!(v["matches"][0]["before"], json!(["l6 hit"]));
    assert_eq!(v["matches"][0]["after"], json!(["l8"]));
}

#[tokio::test]
async fn files_with_matches_and_count_modes() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(r, "a.txt", "x\nx\nx\n");
    write(r, "b.txt", "y\n");
    write(r, "c.txt", "x\n");
    let v = ok(
        r,
        json!({"pattern": "x", "output_mode": "files_with_matches"}),
    )
    .await;
    assert_eq!(v["matches"], json!([{"path": "a.txt"}, {"path": "c.txt"}]));
    assert_eq!(v["total"], 2);
    let v = ok(r, json!({"pattern": "x", "output_mode": "count"})).await;
    assert_eq!(
        v["matches"],
        json!([{"path": "a.txt", "count": 3}, {"path": "c.txt", "count": 1}])
    );
    assert_eq!(v["total"], 2);
    let v = ok(
        r,
        json!({"pattern": "x", "output_mode": "count", "offset": 1, "limit": 1}),
    )
    .await;
    assert_eq!(v["matches"], json!([{"path": "c.txt", "count": 1}]));
    assert_eq!(v["truncated"], false);
}

#[tokio::test]
async fn target_files_matches_globs_like_rg_files() {
    let dir = tree();
    let r = dir.path();
    write(r, "src/deep/inner/mod.rs", "");
    write(r, "Cargo.toml", "");
    let v = ok(r, json!({"pattern": "*.rs", "target": "files"})).await;
    assert_eq!(
        paths(&v),
        ["src/deep/inner/mod.rs", "src/lib.rs", "src/main.rs"]
    );
    assert_eq!(v["total"], 3);
    let v = ok(r, json!({"pattern": "src/*.rs", "target": "files"})).await;
    assert_eq!(paths(&v), ["src/lib.rs", "src/main.rs"]);
    let v = ok(r, json!({"pattern": "src/**/*.rs", "target": "files"})).await;
    assert_eq!(v["total"], 3);
    // No glob characters: file names containing the text.
    let v = ok(r, json!({"pattern": "mai", "target": "files"})).await;
    assert_eq!(paths(&v), ["src/main.rs"]);
    let v = ok(r, json!({"pattern": "inner/mod", "target": "files"})).await;
    assert_eq!(paths(&v), ["src/deep/inner/mod.rs"]);
    // file_glob narrows further.
    let v = ok(
        r,
        json!({"pattern": "*", "target": "files", "file_glob": "*.{toml,md}"}),
    )
    .await;
    assert_eq!(paths(&v), ["Cargo.toml", "README.md"]);
    // Paged like content results.
    let v = ok(r, json!({"pattern": "*.rs", "target": "files", "limit": 2})).await;
    assert_eq!(paths(&v).len(), 2);
    assert_eq!(v["truncated"], true);
}

#[tokio::test]
async fn file_glob_filters_content_search() {
    let dir = tree();
    let r = dir.path();
    let v = ok(r, json!({"pattern": "needle", "file_glob": "*.rs"})).await;
    assert_eq!(paths(&v), ["src/lib.rs", "src/main.rs"]);
    let v = ok(r, json!({"pattern": "needle", "file_glob": "!*.rs"})).await;
    assert_eq!(paths(&v), ["README.md"]);
    let v = ok(r, json!({"pattern": "needle", "file_glob": "*.md"})).await;
    assert_eq!(paths(&v), ["README.md"]);
}

#[tokio::test]
async fn path_argument_scopes_the_search_and_prefixes_results() {
    let dir = tree();
    let r = dir.path();
    let v = ok(r, json!({"pattern": "needle", "path": "src"})).await;
    assert_eq!(paths(&v), ["src/lib.rs", "src/main.rs"]);
    let v = ok(r, json!({"pattern": "needle", "path": "./src/"})).await;
    assert_eq!(paths(&v), ["src/lib.rs", "src/main.rs"]);
    // A single file.
    let v = ok(r, json!({"pattern": "needle", "path": "src/main.rs"})).await;
    assert_eq!(
        lines(&v),
        [("src/main.rs".into(), 2, "    let needle = 1;".into())]
    );
    // An absolute path gives absolute results.
    let abs = r.join("src");
    let v = ok(
        Path::new("/"),
        json!({"pattern": "needle", "path": abs.to_str().unwrap()}),
    )
    .await;
    assert_eq!(
        paths(&v),
        [
            abs.join("lib.rs").to_str().unwrap(),
            abs.join("main.rs").to_str().unwrap()
        ]
    );
    // Results are usable as paths relative to the session cwd.
    for p in paths(&ok(r, json!({"pattern": "needle", "path": "src"})).await) {
        assert!(r.join(p).is_file());
    }
}

#[tokio::test]
async fn relative_paths_resolve_against_the_session_cwd() {
    let dir = tree();
    // The default path "." is the session cwd, not the test process's cwd.
    let v = ok(&dir.path().join("src"), json!({"pattern": "needle"})).await;
    assert_eq!(paths(&v), ["lib.rs", "main.rs"]);
}

#[tokio::test]
async fn a_missing_path_is_a_clear_error() {
    let dir = tree();
    let err = call(dir.path(), json!({"pattern": "x", "path": "nope"}))
        .await
        .unwrap_err();
    assert!(err.contains("`nope` does not exist"), "{err}");
    assert!(err.contains(dir.path().to_str().unwrap()), "{err}");
}

#[tokio::test]
async fn a_bad_regex_shows_the_regex_error() {
    let dir = tree();
    let err = call(dir.path(), json!({"pattern": "foo(bar"}))
        .await
        .unwrap_err();
    assert!(err.contains("not a valid regex"), "{err}");
    assert!(err.contains("unclosed group"), "{err}");
    let err = call(dir.path(), json!({"pattern": "[", "target": "files"}))
        .await
        .unwrap_err();
    assert!(err.contains("not a valid glob"), "{err}");
}

#[tokio::test]
async fn long_lines_are_cut_and_invalid_utf8_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let mut long = "needle ".repeat(1000).into_bytes();
    long.push(b'\n');
    long.extend_from_slice(b"bad \xff needle\n");
    write(dir.path(), "f.txt", &long);
    let v = ok(dir.path(), json!({"pattern": "needle"})).await;
    let first = v["matches"][0]["text"].as_str().unwrap();
    assert!(first.len() < 1100, "{}", first.len());
    assert!(first.ends_with("… [line cut]"));
    assert_eq!(v["matches"][1]["text"], "bad \u{FFFD} needle");
}

#[tokio::test]
async fn argument_validation_names_the_field() {
    let dir = tree();
    let err = call(dir.path(), json!({"patern": "x"})).await.unwrap_err();
    assert!(err.contains("patern"), "{err}");
    let err = call(dir.path(), json!({"pattern": "x", "limit": "ten"}))
        .await
        .unwrap_err();
    assert!(err.contains("limit"), "{err}");
    let err = call(dir.path(), json!({"pattern": "x", "output_mode": "lines"}))
        .await
        .unwrap_err();
    assert!(
        err.contains("output_mode") && err.contains("files_with_matches"),
        "{err}"
    );
    let err = call(dir.path(), json!({"pattern": "x", "context": -1}))
        .await
        .unwrap_err();
    assert!(err.contains("context"), "{err}");
    let err = call(dir.path(), json!({})).await.unwrap_err();
    assert!(err.contains("pattern"), "{err}");
}

#[tokio::test]
async fn a_cancelled_or_expired_cell_stops_the_search() {
    let dir = tree();
    let reg = ToolRegistry::builtin().unwrap();
    let tool = reg.get("search_files").unwrap();
    let cancel = CancellationToken::new();
    cancel.cancel();
    let cx = ToolContext::new(
        Arc::new(ToolSettings::new(dir.path())),
        Instant::now() + Duration::from_secs(60),
        cancel,
    );
    let err = tool
        .call(json!({"pattern": "needle"}), cx)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ToolError::Cancelled("search_files")),
        "{err:?}"
    );
    let cx = ToolContext::new(
        Arc::new(ToolSettings::new(dir.path())),
        Instant::now(),
        CancellationToken::new(),
    );
    let err = tool
        .call(json!({"pattern": "needle"}), cx)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("time ran out"), "{err}");
}

#[tokio::test]
async fn the_stub_signature_carries_the_contract_defaults() {
    let reg = ToolRegistry::builtin().unwrap();
    let tool = reg.get("search_files").unwrap();
    let params = toolcell_tools::schema::params(tool.as_ref());
    let got: Vec<(String, Option<Value>)> = params
        .iter()
        .map(|p| (p.name.clone(), p.default.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("pattern".to_string(), None),
            ("target".to_string(), Some(json!("content"))),
            ("path".to_string(), Some(json!("."))),
            ("file_glob".to_string(), Some(Value::Null)),
            ("limit".to_string(), Some(json!(50))),
            ("offset".to_string(), Some(json!(0))),
            ("output_mode".to_string(), Some(json!("content"))),
            ("context".to_string(), Some(json!(0))),
        ]
    );
    for p in &params {
        assert!(!p.description.is_empty(), "{} has no doc", p.name);
    }
    let sig = toolcell_stubs::signature(tool.as_ref());
    assert!(
        sig.contains("Literal[\"content\", \"files_with_matches\", \"count\"]"),
        "{sig}"
    );
}

#[tokio::test]
async fn crlf_files_match_line_anchors_and_show_clean_lines() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "w.txt", "one\r\ntwo\r\nthree two\r\n");
    let v = ok(dir.path(), json!({"pattern": "two$", "context": 1})).await;
    assert_eq!(v["total"], 2);
    assert_eq!(v["matches"][0]["text"], "two");
    assert_eq!(v["matches"][0]["before"], json!(["one"]));
    assert_eq!(v["matches"][0]["after"], json!(["three two"]));
    assert_eq!(v["matches"][1]["line"], 3);
    let v = ok(dir.path(), json!({"pattern": "^t"})).await;
    assert_eq!(v["total"], 2);
}

#[tokio::test]
async fn a_hidden_directory_given_as_path_is_searched() {
    let dir = tree();
    write(dir.path(), ".github/workflows/ci.yml", "run: needle\n");
    let v = ok(dir.path(), json!({"pattern": "needle", "path": ".github"})).await;
    assert_eq!(paths(&v), [".github/workflows/ci.yml"]);
}
