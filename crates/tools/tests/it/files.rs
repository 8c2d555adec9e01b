//! `read_file` and `write_file` on real files, through the registry.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolcell_tools::{ToolContext, ToolRegistry, ToolSettings};

fn cx(cwd: &Path) -> ToolContext {
    ToolContext::new(
        Arc::new(ToolSettings::new(cwd)),
        tokio::time::Instant::now() + Duration::from_secs(30),
        tokio_util::sync::CancellationToken::new(),
    )
}

async fn call(tool: &str, cwd: &Path, args: Value) -> Result<Value, String> {
    let reg = ToolRegistry::builtin().unwrap();
    let t = reg.get(tool).unwrap();
    t.validate(&args)?;
    t.call(args, cx(cwd)).await.map_err(|e| e.to_string())
}

#[tokio::test]
async fn read_file_pages_by_line_and_counts_them() {
    let tmp = tempfile::tempdir().unwrap();
    let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    std::fs::write(tmp.path().join("a.txt"), &text).unwrap();
    let all = call("read_file", tmp.path(), json!({"path": "a.txt"}))
        .await
        .unwrap();
    assert_eq!(
        all,
        json!({"content": text, "total_lines": 10, "truncated": false})
    );
    let page = call(
        "read_file",
        tmp.path(),
        json!({"path": "a.txt", "offset": 3, "limit": 2}),
    )
    .await
    .unwrap();
    assert_eq!(page["content"], "line 3\nline 4\n");
    assert_eq!(page["total_lines"], 10);
    assert_eq!(page["truncated"], true);
    let last = call(
        "read_file",
        tmp.path(),
        json!({"path": "a.txt", "offset": 9, "limit": 2}),
    )
    .await
    .unwrap();
    assert_eq!(last["content"], "line 9\nline 10\n");
    assert_eq!(last["truncated"], false);
    let past = call(
        "read_file",
        tmp.path(),
        json!({"path": "a.txt", "offset": 50}),
    )
    .await
    .unwrap();
    assert_eq!(past["content"], "");
}

#[tokio::test]
async fn read_file_handles_a_last_line_without_newline_and_absolute_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("b.txt");
    std::fs::write(&p, "x\ny").unwrap();
    let out = call(
        "read_file",
        Path::new("/"),
        json!({"path": p.to_str().unwrap()}),
    )
    .await
    .unwrap();
    assert_eq!(out["content"], "x\ny");
    assert_eq!(out["total_lines"], 2);
}

#[tokio::test]
async fn read_file_refuses_binary_files_directories_and_missing_files() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("bin"), b"\x7fELF\x00\x01\x02").unwrap();
    let err = call("read_file", tmp.path(), json!({"path": "bin"}))
        .await
        .unwrap_err();
    assert!(err.contains("binary"), "{err}");
    let err = call("read_file", tmp.path(), json!({"path": "."}))
        .await
        .unwrap_err();
    assert!(err.contains("directory"), "{err}");
    let err = call("read_file", tmp.path(), json!({"path": "nope.txt"}))
        .await
        .unwrap_err();
    assert!(
        err.contains("nope.txt") && err.contains("No such file"),
        "{err}"
    );
}

#[tokio::test]
async fn read_file_arguments_are_validated_with_the_field_named() {
    let tmp = tempfile::tempdir().unwrap();
    let err = call("read_file", tmp.path(), json!({"path": "a", "offset": 0}))
        .await
        .unwrap_err();
    assert!(err.contains("offset"), "{err}");
    let err = call("read_file", tmp.path(), json!({"path": 3}))
        .await
        .unwrap_err();
    assert!(err.contains("path") && err.contains("string"), "{err}");
    let err = call("read_file", tmp.path(), json!({})).await.unwrap_err();
    assert!(err.contains("missing field `path`"), "{err}");
    let err = call("read_file", tmp.path(), json!({"path": "a", "lines": 3}))
        .await
        .unwrap_err();
    assert!(err.contains("unknown field `lines`"), "{err}");
}

#[tokio::test]
async fn write_file_creates_parents_and_replaces_atomically() {
    let tmp = tempfile::tempdir().unwrap();
    let out = call(
        "write_file",
        tmp.path(),
        json!({"path": "d/e/f.txt", "content": "héllo\n"}),
    )
    .await
    .unwrap();
    let target = tmp.path().join("d/e/f.txt");
    assert_eq!(out["path"], target.display().to_string());
    assert_eq!(out["bytes_written"], "héllo\n".len());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "héllo\n");
    // Replacing keeps the file's mode and leaves no temporary file behind.
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
    call(
        "write_file",
        tmp.path(),
        json!({"path": "d/e/f.txt", "content": "new"}),
    )
    .await
    .unwrap();
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
    let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640);
    let names: Vec<_> = std::fs::read_dir(tmp.path().join("d/e"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

#[tokio::test]
async fn write_file_refuses_to_write_through_a_directory() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("dir")).unwrap();
    let err = call(
        "write_file",
        tmp.path(),
        json!({"path": "dir", "content": "x"}),
    )
    .await
    .unwrap_err();
    assert!(err.contains("is a directory"), "{err}");
    assert!(tmp.path().join("dir").is_dir());
}
