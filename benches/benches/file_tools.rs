//! `search_files` and `patch` end to end, as a cell's call runs them:
//! through the registry, on real files in a temp dir, result serialized to
//! JSON.
//!
//! `search_files`: a tree of 600 Rust-like files × 400 lines (about 11 MB
//! searched) plus a `.gitignore`d `target/` copy of the same size that must
//! be skipped. `rare` finds one line (the whole tree is still read),
//! `common` finds ~100 000 lines but returns one page of 50 (everything is
//! counted), `count` is output_mode="count", `files_glob` is target="files".
//!
//! `patch`: one 10 000-line file (≈450 kB). `replace` swaps a unique
//! string back and forth; `v4a_3_hunks` applies a three-hunk V4A patch and
//! then its reverse. Both include the atomic write and the unified diff.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolcell_benches::files::{source_file, source_tree};
use toolcell_tools::{ToolContext, ToolRegistry, ToolSettings};

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    std::fs::create_dir_all(&tree).unwrap();
    let searched = source_tree(&tree, 600, 400).unwrap();
    let settings = Arc::new(ToolSettings::new(dir.path()));
    let registry = ToolRegistry::builtin().unwrap();
    let run = |tool: &str, args: Value| -> Value {
        let cx = ToolContext::new(
            Arc::clone(&settings),
            tokio::time::Instant::now() + Duration::from_secs(300),
            CancellationToken::new(),
        );
        let t = registry.get(tool).unwrap();
        rt.block_on(t.call(args, cx)).unwrap()
    };

    let mut g = c.benchmark_group("search_files");
    g.sample_size(20);
    g.throughput(Throughput::Bytes(searched));
    let cases = [
        (
            "rare",
            json!({"pattern": r"fn needle_\d+", "path": "tree"}),
            1u64,
        ),
        ("common", json!({"pattern": r"\blet\b", "path": "tree"}), 0),
        (
            "count",
            json!({"pattern": "config", "path": "tree", "output_mode": "count"}),
            0,
        ),
        (
            "files_glob",
            json!({"pattern": "*.rs", "path": "tree", "target": "files"}),
            600,
        ),
    ];
    for (name, args, expect_total) in cases {
        let out = run("search_files", args.clone());
        let total = out["total"].as_u64().unwrap();
        if expect_total > 0 {
            assert_eq!(total, expect_total, "{name}: {out}");
        }
        g.bench_function(name, |b| b.iter(|| run("search_files", args.clone())));
    }
    g.finish();

    let body = source_file(10_000, 0);
    std::fs::write(dir.path().join("big.rs"), &body).unwrap();
    let mut g = c.benchmark_group("patch");
    g.throughput(Throughput::Bytes(body.len() as u64));
    let flip = Cell::new(false);
    g.bench_function("replace", |b| {
        b.iter(|| {
            let (old, new) = if flip.get() {
                ("fn needle_x()", "fn needle_0()")
            } else {
                ("fn needle_0()", "fn needle_x()")
            };
            flip.set(!flip.get());
            run(
                "patch",
                json!({"path": "big.rs", "old_string": old, "new_string": new}),
            )
        });
    });
    std::fs::write(dir.path().join("big.rs"), &body).unwrap();
    let lines: Vec<&str> = body.lines().collect();
    let hunks = |forward: bool| {
        let mut p = String::from("*** Begin Patch\n*** Update File: big.rs\n");
        for k in [lines.len() / 4, lines.len() / 2, lines.len() * 3 / 4] {
            let edited = format!("{} // edited", lines[k]);
            let (minus, plus) = if forward {
                (lines[k].to_string(), edited)
            } else {
                (edited, lines[k].to_string())
            };
            p.push_str(&format!(
                "@@\n {}\n {}\n-{minus}\n+{plus}\n {}\n {}\n",
                lines[k - 2],
                lines[k - 1],
                lines[k + 1],
                lines[k + 2]
            ));
        }
        p.push_str("*** End Patch\n");
        p
    };
    let (fwd, back) = (hunks(true), hunks(false));
    flip.set(false);
    g.bench_function("v4a_3_hunks", |b| {
        b.iter(|| {
            let p = if flip.get() { &back } else { &fwd };
            flip.set(!flip.get());
            run("patch", json!({"mode": "patch", "patch": p}))
        });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
