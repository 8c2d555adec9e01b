//! `patch` through the registry, as a cell calls it, on real files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolcell_tools::{ToolContext, ToolRegistry, ToolSettings};

fn write(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

fn read(root: &Path, rel: &str) -> String {
    std::fs::read_to_string(root.join(rel)).unwrap()
}

/// Validates then calls, as the rpc dispatcher does.
async fn call(cwd: &Path, args: Value) -> Result<Value, String> {
    let reg = ToolRegistry::builtin().unwrap();
    let tool = reg.get("patch").expect("patch is registered");
    tool.validate(&args)?;
    let cx = ToolContext::new(
        Arc::new(ToolSettings::new(cwd)),
        Instant::now() + Duration::from_secs(60),
        CancellationToken::new(),
    );
    tool.call(args, cx).await.map_err(|e| e.to_string())
}

async fn ok(cwd: &Path, args: Value) -> Value {
    match call(cwd, args.clone()).await {
        Ok(v) => v,
        Err(e) => panic!("patch({args}) failed: {e}"),
    }
}

/// Every file under `root` with its bytes, to check nothing changed.
fn snapshot(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

// --- replace mode ----------------------------------------------------------

#[tokio::test]
async fn replace_a_unique_string() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "src/app.py",
        "def f():\n    return 1\n\nprint(f())\n",
    );
    let v = ok(
        dir.path(),
        json!({"path": "src/app.py", "old_string": "return 1", "new_string": "return 2"}),
    )
    .await;
    assert_eq!(
        read(dir.path(), "src/app.py"),
        "def f():\n    return 2\n\nprint(f())\n"
    );
    assert_eq!(v["files_changed"], json!(["src/app.py"]));
    assert_eq!(v["replacements"], 1);
    let diff = v["diff"].as_str().unwrap();
    assert!(
        diff.starts_with("--- a/src/app.py\n+++ b/src/app.py\n"),
        "{diff}"
    );
    assert!(diff.contains("\n-    return 1\n+    return 2\n"), "{diff}");
}

#[tokio::test]
async fn an_ambiguous_string_reports_count_and_lines_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let body = "x = 1\nvalue = 0\ny = 2\nvalue = 0\n\n\nvalue = 0\n";
    write(dir.path(), "a.py", body);
    let err = call(
        dir.path(),
        json!({"path": "a.py", "old_string": "value = 0", "new_string": "value = 9"}),
    )
    .await
    .unwrap_err();
    assert!(err.contains("occurs 3 times"), "{err}");
    assert!(err.contains("lines 2, 4, 7"), "{err}");
    assert!(err.contains("replace_all"), "{err}");
    assert_eq!(read(dir.path(), "a.py"), body);
}

#[tokio::test]
async fn replace_all_replaces_every_occurrence() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.txt", "foo bar foo\nfoo\n");
    let v = ok(
        dir.path(),
        json!({"path": "a.txt", "old_string": "foo", "new_string": "baz", "replace_all": true}),
    )
    .await;
    assert_eq!(read(dir.path(), "a.txt"), "baz bar baz\nbaz\n");
    assert_eq!(v["replacements"], 3);
    // A deletion: new_string "".
    ok(
        dir.path(),
        json!({"path": "a.txt", "old_string": " bar", "new_string": ""}),
    )
    .await;
    assert_eq!(read(dir.path(), "a.txt"), "baz baz\nbaz\n");
    // Occurrences never overlap, as with str::replace.
    write(dir.path(), "o.txt", "aaaaa\n");
    let v = ok(
        dir.path(),
        json!({"path": "o.txt", "old_string": "aa", "new_string": "b", "replace_all": true}),
    )
    .await;
    assert_eq!(v["replacements"], 2);
    assert_eq!(read(dir.path(), "o.txt"), "bba\n");
}

#[tokio::test]
async fn not_found_points_at_a_whitespace_insensitive_match() {
    let dir = tempfile::tempdir().unwrap();
    let body = "a = 1\nif a:\n\tcall(a,\n\t     b)\n";
    write(dir.path(), "m.py", body);
    let err = call(
        dir.path(),
        json!({"path": "m.py", "old_string": "call(a, b)", "new_string": "call(b)"}),
    )
    .await
    .unwrap_err();
    assert!(err.contains("not found"), "{err}");
    assert!(err.contains("lines 3-4"), "{err}");
    assert!(err.contains("\tcall(a,\n\t     b)"), "{err}");
    // Nothing close at all: no location claimed.
    let err = call(
        dir.path(),
        json!({"path": "m.py", "old_string": "zzz", "new_string": "y"}),
    )
    .await
    .unwrap_err();
    assert!(err.contains("not found") && !err.contains("line"), "{err}");
    assert_eq!(read(dir.path(), "m.py"), body);
}

#[tokio::test]
async fn crlf_files_keep_crlf_when_edited_with_lf_strings() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "w.txt", "one\r\ntwo\r\nthree\r\n");
    ok(
        dir.path(),
        json!({"path": "w.txt", "old_string": "one\ntwo\n", "new_string": "1\n2\n2.5\n"}),
    )
    .await;
    assert_eq!(read(dir.path(), "w.txt"), "1\r\n2\r\n2.5\r\nthree\r\n");
}

#[tokio::test]
async fn replace_mode_argument_errors_are_actionable() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.txt", "abc\n");
    let err = call(dir.path(), json!({"path": "a.txt", "old_string": "abc"}))
        .await
        .unwrap_err();
    assert!(err.contains("missing: new_string"), "{err}");
    let err = call(
        dir.path(),
        json!({"patch": "*** Begin Patch\n*** End Patch"}),
    )
    .await
    .unwrap_err();
    assert!(err.contains("mode=\"patch\""), "{err}");
    let err = call(
        dir.path(),
        json!({"path": "a.txt", "old_string": "", "new_string": "x"}),
    )
    .await
    .unwrap_err();
    assert!(err.contains("old_string is empty"), "{err}");
    let err = call(
        dir.path(),
        json!({"path": "nope.txt", "old_string": "a", "new_string": "b"}),
    )
    .await
    .unwrap_err();
    assert!(err.contains("`nope.txt` does not exist"), "{err}");
    std::fs::write(dir.path().join("bin"), [0xff, 0xfe, 0x00]).unwrap();
    let err = call(
        dir.path(),
        json!({"path": "bin", "old_string": "a", "new_string": "b"}),
    )
    .await
    .unwrap_err();
    assert!(err.contains("not UTF-8"), "{err}");
    // A pipe would block a read forever: refused up front.
    let fifo = dir.path().join("fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let err = call(
        dir.path(),
        json!({"path": "fifo", "old_string": "a", "new_string": "b"}),
    )
    .await
    .unwrap_err();
    assert!(err.contains("not a regular file"), "{err}");
    let err = call(dir.path(), json!({"mode": "patch"}))
        .await
        .unwrap_err();
    assert!(err.contains("needs the V4A patch text"), "{err}");
}

#[tokio::test]
async fn argument_validation_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let err = call(dir.path(), json!({"path": "a", "old": "x"}))
        .await
        .unwrap_err();
    assert!(err.contains("old"), "{err}");
    let err = call(dir.path(), json!({"mode": "diff"})).await.unwrap_err();
    assert!(err.contains("mode") && err.contains("replace"), "{err}");
    let err = call(dir.path(), json!({"replace_all": "yes"}))
        .await
        .unwrap_err();
    assert!(err.contains("replace_all"), "{err}");
}

#[tokio::test]
async fn the_stub_signature_carries_the_contract_defaults() {
    let reg = ToolRegistry::builtin().unwrap();
    let tool = reg.get("patch").unwrap();
    let got: Vec<(String, Option<Value>)> = toolcell_tools::schema::params(tool.as_ref())
        .iter()
        .map(|p| (p.name.clone(), p.default.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("path".to_string(), Some(Value::Null)),
            ("old_string".to_string(), Some(Value::Null)),
            ("new_string".to_string(), Some(Value::Null)),
            ("replace_all".to_string(), Some(json!(false))),
            ("mode".to_string(), Some(json!("replace"))),
            ("patch".to_string(), Some(Value::Null)),
        ]
    );
}

// --- V4A patch mode --------------------------------------------------------

async fn apply(cwd: &Path, patch: &str) -> Result<Value, String> {
    call(cwd, json!({"mode": "patch", "patch": patch})).await
}

#[tokio::test]
async fn add_update_delete_and_move_in_one_patch() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(
        r,
        "keep.py",
        "import os\n\ndef main():\n    print('hi')\n    return 0\n",
    );
    write(r, "old.txt", "bye\n");
    write(r, "mv/src.txt", "a\nb\nc\n");
    let patch = "*** Begin Patch
*** Add File: new/dir/hello.txt
+hello
+
+world
*** Update File: keep.py
@@ def main():
     print('hi')
-    return 0
+    return 1
*** Delete File: old.txt
*** Update File: mv/src.txt
*** Move to: mv/dst.txt
 a
-b
+B
 c
*** End Patch
";
    let v = apply(r, patch).await.unwrap();
    assert_eq!(read(r, "new/dir/hello.txt"), "hello\n\nworld\n");
    assert_eq!(
        read(r, "keep.py"),
        "import os\n\ndef main():\n    print('hi')\n    return 1\n"
    );
    assert!(!r.join("old.txt").exists());
    assert!(!r.join("mv/src.txt").exists());
    assert_eq!(read(r, "mv/dst.txt"), "a\nB\nc\n");
    assert_eq!(
        v["files_changed"],
        json!([
            "new/dir/hello.txt",
            "keep.py",
            "old.txt",
            "mv/src.txt",
            "mv/dst.txt"
        ])
    );
    assert_eq!(v["replacements"], 4);
    let diff = v["diff"].as_str().unwrap();
    for needle in [
        "--- /dev/null\n+++ b/new/dir/hello.txt\n",
        "+hello\n",
        "--- a/keep.py\n+++ b/keep.py\n",
        "-    return 0\n+    return 1\n",
        "--- a/old.txt\n+++ /dev/null\n",
        "-bye\n",
        "--- a/mv/src.txt\n+++ b/mv/dst.txt\n",
        "-b\n+B\n",
    ] {
        assert!(diff.contains(needle), "missing {needle:?} in\n{diff}");
    }
}

#[tokio::test]
async fn nested_anchors_pick_the_right_place() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    let body = "class A:\n    def run(self):\n        return 0\n\nclass B:\n    def run(self):\n        return 0\n";
    write(r, "m.py", body);
    let patch = "*** Begin Patch
*** Update File: m.py
@@ class B:
@@     def run(self):
-        return 0
+        return 2
*** End Patch";
    apply(r, patch).await.unwrap();
    assert_eq!(
        read(r, "m.py"),
        body.replacen("        return 0\n", "@@", 1)
            .replacen("        return 0\n", "        return 2\n", 1)
            .replacen("@@", "        return 0\n", 1)
    );
    // Two hunks in order, the second a pure insertion after its anchor.
    let patch = "*** Begin Patch
*** Update File: m.py
@@ class A:
     def run(self):
-        return 0
+        return 1
@@ class B:
+    x = 1
*** End Patch";
    let v = apply(r, patch).await.unwrap();
    assert_eq!(v["replacements"], 2);
    assert_eq!(
        read(r, "m.py"),
        "class A:\n    def run(self):\n        return 1\n\nclass B:\n    x = 1\n    def run(self):\n        return 2\n"
    );
}

#[tokio::test]
async fn end_of_file_hunks_match_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(r, "f.txt", "x\nend\nmiddle\nx\nend\n");
    let patch = "*** Begin Patch
*** Update File: f.txt
 x
-end
+END
*** End of File
*** End Patch";
    apply(r, patch).await.unwrap();
    assert_eq!(read(r, "f.txt"), "x\nend\nmiddle\nx\nEND\n");
    // Appending at the end of a file without a trailing newline keeps it so.
    write(r, "g.txt", "a\nb");
    let patch = "*** Begin Patch\n*** Update File: g.txt\n b\n+c\n*** End of File\n*** End Patch";
    apply(r, patch).await.unwrap();
    assert_eq!(read(r, "g.txt"), "a\nb\nc");
}

#[tokio::test]
async fn context_whitespace_differences_are_tolerated_and_the_file_text_kept() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(r, "f.py", "def f():\n    a = 1   \n    b = 2\n");
    let patch = "*** Begin Patch
*** Update File: f.py
     a = 1
-    b = 2
+    b = 3
*** End Patch";
    apply(r, patch).await.unwrap();
    assert_eq!(read(r, "f.py"), "def f():\n    a = 1   \n    b = 3\n");
}

#[tokio::test]
async fn crlf_files_keep_crlf_under_a_v4a_patch() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(r, "w.txt", "one\r\ntwo\r\nthree\r\n");
    let patch = "*** Begin Patch\r\n*** Update File: w.txt\r\n one\r\n-two\r\n+2\r\n+2b\r\n three\r\n*** End Patch\r\n";
    apply(r, patch).await.unwrap();
    assert_eq!(read(r, "w.txt"), "one\r\n2\r\n2b\r\nthree\r\n");
}

#[tokio::test]
async fn a_failing_hunk_leaves_every_file_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(r, "a.txt", "alpha\nbeta\n");
    write(r, "b.txt", "gamma\ndelta\n");
    write(r, "gone.txt", "still here\n");
    let before = snapshot(r);
    let patch = "*** Begin Patch
*** Update File: a.txt
-alpha
+ALPHA
*** Add File: created.txt
+new
*** Delete File: gone.txt
*** Update File: b.txt
 gamma
-epsilon
+EPSILON
*** End Patch";
    let err = apply(r, patch).await.unwrap_err();
    assert!(err.contains("`b.txt`"), "{err}");
    assert!(err.contains("hunk 1 (patch line 9)"), "{err}");
    assert!(err.contains("  |gamma\n  |epsilon\n"), "{err}");
    assert!(
        err.contains(
            "Closest: its first 1 line(s) match at line 1; then the file has `delta` where \
             the hunk has `epsilon`"
        ),
        "{err}"
    );
    assert!(err.contains("Nothing was changed"), "{err}");
    assert_eq!(snapshot(r), before);
    // A missing anchor names it.
    let patch =
        "*** Begin Patch\n*** Update File: a.txt\n@@ def nowhere():\n-alpha\n+A\n*** End Patch";
    let err = apply(r, patch).await.unwrap_err();
    assert!(err.contains("`def nowhere():` was not found"), "{err}");
    assert_eq!(snapshot(r), before);
    // Hunks out of file order: the second one is found before the first.
    let patch = "*** Begin Patch\n*** Update File: a.txt\n-beta\n+B\n@@\n-alpha\n+A\n*** End Patch";
    let err = apply(r, patch).await.unwrap_err();
    assert!(err.contains("hunk 2 (patch line 6)"), "{err}");
    assert!(err.contains("hunks must be in file order"), "{err}");
    let patch = "*** Begin Patch\n*** Update File: a.txt\n-zeta\n+Z\n*** End Patch";
    let err = apply(r, patch).await.unwrap_err();
    assert!(
        err.contains("Its first line `zeta` is nowhere in the file"),
        "{err}"
    );
    assert_eq!(snapshot(r), before);
}

#[tokio::test]
async fn a_write_failure_rolls_back_files_already_written() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(r, "a.txt", "alpha\n");
    write(r, "blocker", "a file where a directory is needed\n");
    let before = snapshot(r);
    // The update is written first; creating blocker/x.txt then fails.
    let patch = "*** Begin Patch
*** Update File: a.txt
-alpha
+ALPHA
*** Add File: blocker/x.txt
+x
*** End Patch";
    let err = apply(r, patch).await.unwrap_err();
    assert!(err.contains("blocker"), "{err}");
    assert!(err.contains("restored"), "{err}");
    assert_eq!(snapshot(r), before);
}

#[tokio::test]
async fn operations_that_would_lose_data_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(r, "a.txt", "a\n");
    write(r, "b.txt", "b\n");
    let before = snapshot(r);
    let err = apply(r, "*** Begin Patch\n*** Add File: a.txt\n+x\n*** End Patch")
        .await
        .unwrap_err();
    assert!(err.contains("already exists"), "{err}");
    let err = apply(
        r,
        "*** Begin Patch\n*** Update File: a.txt\n*** Move to: b.txt\n-a\n+A\n*** End Patch",
    )
    .await
    .unwrap_err();
    assert!(err.contains("destination already exists"), "{err}");
    let err = apply(
        r,
        "*** Begin Patch\n*** Update File: a.txt\n-a\n+A\n*** Delete File: a.txt\n*** End Patch",
    )
    .await
    .unwrap_err();
    assert!(err.contains("named twice (patch lines 2 and 5)"), "{err}");
    let err = apply(r, "*** Begin Patch\n*** Delete File: zz.txt\n*** End Patch")
        .await
        .unwrap_err();
    assert!(err.contains("`zz.txt` does not exist"), "{err}");
    assert_eq!(snapshot(r), before);
}

#[tokio::test]
async fn malformed_patches_name_the_line_and_what_was_expected() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(r, "a.txt", "a\n");
    let before = snapshot(r);
    let cases = [
        (
            "*** Update File: a.txt\n-a\n+b\n*** End Patch",
            "line 1",
            "expected `*** Begin Patch`",
        ),
        (
            "*** Begin Patch\n*** Update File: a.txt\n-a\n+b\n",
            "line 5",
            "without `*** End Patch`",
        ),
        (
            "*** Begin Patch\n*** Update File: a.txt\n-a\n+b\n*** End Patch",
            "",
            "",
        ),
        (
            "*** Begin Patch\n*** Update File: a.txt\n-a\n~b\n*** End Patch",
            "line 4",
            "expected a hunk line starting with",
        ),
        (
            "*** Begin Patch\n*** Add File: n.txt\n+x\ny\n*** End Patch",
            "line 4",
            "must start with `+`",
        ),
        (
            "*** Begin Patch\nhello\n*** End Patch",
            "line 2",
            "expected `*** Add File: <path>`",
        ),
        (
            "*** Begin Patch\n*** Update File: a.txt\n*** End Patch",
            "line 2",
            "has no hunks",
        ),
        (
            "*** Begin Patch\n*** Delete File:\n*** End Patch",
            "line 2",
            "needs a file path",
        ),
        (
            "*** Begin Patch\n*** Delete File: a.txt\n*** End Patch\nmore",
            "line 4",
            "after `*** End Patch`",
        ),
    ];
    for (patch, line, what) in cases {
        if line.is_empty() {
            // The well-formed control case applies; undo it for the next case.
            apply(r, patch).await.unwrap();
            write(r, "a.txt", "a\n");
            continue;
        }
        let err = apply(r, patch).await.unwrap_err();
        assert!(
            err.contains(&format!("malformed patch at {line}:")),
            "{patch:?}: {err}"
        );
        assert!(err.contains(what), "{patch:?}: {err}");
        assert_eq!(snapshot(r), before, "{patch:?}");
    }
}

#[tokio::test]
async fn unified_diff_style_hunk_headers_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(r, "a.txt", "1\n2\n3\n");
    apply(
        r,
        "*** Begin Patch\n*** Update File: a.txt\n@@ -1,3 +1,3 @@\n 1\n-2\n+two\n 3\n*** End Patch",
    )
    .await
    .unwrap();
    assert_eq!(read(r, "a.txt"), "1\ntwo\n3\n");
}

#[tokio::test]
async fn paths_resolve_against_the_session_cwd() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(r, "sub/a.txt", "a\n");
    ok(
        &r.join("sub"),
        json!({"path": "a.txt", "old_string": "a", "new_string": "b"}),
    )
    .await;
    assert_eq!(read(r, "sub/a.txt"), "b\n");
    apply(
        &r.join("sub"),
        "*** Begin Patch\n*** Add File: c.txt\n+c\n*** End Patch",
    )
    .await
    .unwrap();
    assert_eq!(read(r, "sub/c.txt"), "c\n");
}

#[tokio::test]
async fn a_pure_rename_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(r, "a.txt", "same\n");
    let v = apply(
        r,
        "*** Begin Patch\n*** Update File: a.txt\n*** Move to: b/a.txt\n*** End Patch",
    )
    .await
    .unwrap();
    assert_eq!(read(r, "b/a.txt"), "same\n");
    assert!(!r.join("a.txt").exists());
    assert!(
        v["diff"]
            .as_str()
            .unwrap()
            .contains("rename from a.txt\nrename to b/a.txt")
    );
}

#[tokio::test]
async fn editing_through_a_symlink_keeps_the_link() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(r, "real/target.txt", "v1\n");
    std::os::unix::fs::symlink(r.join("real/target.txt"), r.join("link.txt")).unwrap();
    ok(
        r,
        json!({"path": "link.txt", "old_string": "v1", "new_string": "v2"}),
    )
    .await;
    assert!(
        std::fs::symlink_metadata(r.join("link.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(read(r, "real/target.txt"), "v2\n");
    apply(
        r,
        "*** Begin Patch\n*** Update File: link.txt\n-v2\n+v3\n*** End Patch",
    )
    .await
    .unwrap();
    assert!(
        std::fs::symlink_metadata(r.join("link.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(read(r, "real/target.txt"), "v3\n");
}

/// What a cell really does: Python calls the generated stubs, over a real
/// rpc server, with the stub's own defaults filled in.
#[test]
fn search_then_patch_from_python_through_the_stub() {
    use toolcell_rpc::{CellSpec, Server, ServerConfig};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    write(&work, "pkg/a.py", "def f():\n    return 1\n");
    write(&work, "pkg/b.py", "from a import f\nprint(f())\n");
    write(&work, ".gitignore", "build/\n");
    write(&work, "build/a.py", "def f():\n    return 1\n");
    let reg = ToolRegistry::builtin().unwrap();
    let dispatcher = reg.dispatcher(ToolSettings::new(&work));
    let _guard = rt.enter();
    let server =
        Server::bind_unix(tmp.path().join("k"), dispatcher, ServerConfig::default()).unwrap();
    let cell = server
        .open_cell(
            CellSpec::new("c1", Instant::now() + Duration::from_secs(60))
                .budget(10)
                .enable(["search_files", "patch"]),
        )
        .unwrap();
    let moddir = tmp.path().join("mod");
    std::fs::create_dir(&moddir).unwrap();
    let tools = reg.select(&["patch", "search_files"]).unwrap();
    std::fs::write(
        moddir.join("toolcell_tools.py"),
        toolcell_stubs::python::stub_module(&tools).unwrap(),
    )
    .unwrap();
    let code = r#"
from toolcell_tools import search_files, patch, ToolError
hits = search_files("return 1")
assert hits["total"] == 1 and hits["matches"][0]["path"] == "pkg/a.py", hits
r = patch(hits["matches"][0]["path"], "return 1", "return 2")
assert r["files_changed"] == ["pkg/a.py"] and r["replacements"] == 1, r
r = patch(mode="patch", patch="""*** Begin Patch
*** Update File: pkg/b.py
 from a import f
-print(f())
+print(f() + 1)
*** End Patch""")
assert "+print(f() + 1)" in r["diff"], r
try:
    patch("pkg/b.py", "nope", "x")
except ToolError as e:
    print(e.code)
try:
    search_files("(")
except ToolError as e:
    print(e.code, "regex" in str(e))
"#;
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(code)
        .current_dir(&moddir)
        .env("PYTHONPATH", &moddir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("TOOLCELL_RPC", server.endpoint())
        .env("TOOLCELL_RPC_TOKEN", server.token().expose())
        .output()
        .unwrap();
    let report = cell.settle();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "tool_failed\ntool_failed True"
    );
    assert_eq!(report.dispatched(), 5);
    assert_eq!(read(&work, "pkg/a.py"), "def f():\n    return 2\n");
    assert_eq!(read(&work, "pkg/b.py"), "from a import f\nprint(f() + 1)\n");
    assert_eq!(read(&work, "build/a.py"), "def f():\n    return 1\n");
}
