//! What reporting the files a cell changed costs (issue 20): the host's
//! work around a cell that changes nothing in a 5,000-file project (target
//! ≤ 1 ms), a full scan of that tree (what a cell that changes something,
//! or a host without inotify, pays), and a warm `x += 1` cell through
//! `Registry::execute` with the watch on and off, in a 100-file and a
//! 5,000-file working directory.
//!
//! `cargo bench -p toolcell-benches --bench files_changed`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use toolcell_host::{ExecuteRequest, Registry, RegistryOptions};
use toolcell_kernel::Status;
use toolcell_kernel::watch::{WatchSettings, Watcher, scan};

/// `files` files in directories of 100 (plus a `.gitignore`d build dir
/// the scan never enters).
fn tree(root: &Path, files: usize) {
    for i in 0..files {
        let dir = root.join(format!("pkg{:02}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::write(dir.join(format!("mod_{i:04}.py")), format!("x = {i}\n")).unwrap();
    }
    std::fs::write(root.join(".gitignore"), "build/\n").unwrap();
    std::fs::create_dir_all(root.join("build")).unwrap();
    for i in 0..500 {
        std::fs::write(root.join(format!("build/o{i}.o")), "o").unwrap();
    }
}

fn bench_watch(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    tree(tmp.path(), 5000);
    let mut g = c.benchmark_group("files_changed");
    let mut w = Watcher::new(tmp.path(), WatchSettings::default());
    w.rescan();
    assert!(w.watching(), "inotify is needed for this figure");
    assert_eq!(w.snapshot().unwrap().len(), 5000 + 50 + 1);
    g.bench_function("no_change_cell_5000_files", |b| {
        b.iter(|| {
            w.before_cell();
            assert!(w.after_cell().is_none());
        });
    });
    let settings = WatchSettings::default();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    g.bench_function("full_scan_5000_files", |b| {
        b.iter(|| scan(&root, &settings, |_| {}));
    });
    let mut n = 0u64;
    g.bench_function("one_file_written_cell_5000_files", |b| {
        b.iter(|| {
            w.before_cell();
            n += 1;
            std::fs::write(tmp.path().join("pkg00/out.txt"), n.to_string()).unwrap();
            assert!(w.after_cell().is_some());
        });
    });
    let mut fallback = Watcher::new(tmp.path(), WatchSettings::default());
    // The same work as a host without inotify: a scan before and after.
    g.bench_function("no_change_cell_5000_files_without_inotify", |b| {
        b.iter(|| {
            fallback.rescan();
            fallback.rescan();
        });
    });
    g.finish();
}

struct Env {
    rt: tokio::runtime::Runtime,
    reg: Registry,
    _tmp: tempfile::TempDir,
}

fn env(files: usize, watch: bool) -> Env {
    let rt = toolcell_benches::runtime();
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    tree(&work, files);
    let opts = RegistryOptions {
        kernels_root: Some(tmp.path().join("kernels")),
        spill_dir: tmp.path().join("spill"),
        default_cwd: work,
        watch_files: watch,
        ..RegistryOptions::default()
    };
    let reg = rt.block_on(async { Registry::new(opts) }).unwrap();
    let e = Env { rt, reg, _tmp: tmp };
    run(&e, "x = 0");
    e
}

fn run(e: &Env, code: &str) {
    let r = e.rt.block_on(e.reg.execute(ExecuteRequest::new(code)));
    assert_eq!(r.status, Status::Success, "{}", r.output);
    assert!(r.files.is_none(), "{:?}", r.files);
}

fn bench_cells(c: &mut Criterion) {
    let mut g = c.benchmark_group("files_changed_cell");
    for (files, label) in [(100, "100_files"), (5000, "5000_files")] {
        for watch in [false, true] {
            let e = env(files, watch);
            let name = format!(
                "warm_cell_x_plus_1_{label}_watch_{}",
                if watch { "on" } else { "off" }
            );
            g.bench_function(&name, |b| b.iter(|| run(&e, "x += 1")));
        }
    }
    g.finish();
}

criterion_group!(benches, bench_watch, bench_cells);
criterion_main!(benches);
