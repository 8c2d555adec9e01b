//! Output folding (issue 18 part 2) in the capture path, on its own: the
//! `redact` bench's prose + code text (little repetition) and a
//! timestamped log (one long run), through `Capture` with folding on
//! (`true`), `"auto"` (the default: both texts are over the cap, so they
//! are folded from the moment they pass it) and off, cap 50 000 bytes,
//! spilling to a temp dir like a cell's stdout. Target: the pipeline with
//! folding on stays ≥ 400 MB/s.
//!
//! `cargo bench -p toolcell-benches --bench fold`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use toolcell_kernel::capture::{Capture, SpillTarget};
use toolcell_kernel::fold::FoldOptions;

fn log_text(len: usize) -> String {
    let mut s = String::with_capacity(len + 200);
    let mut i = 0u64;
    while s.len() < len {
        s.push_str(&format!(
            "2026-12-01T18:{:02}:{:02}.{:03}Z INFO worker-{} processed batch {i} in {}.{}ms\n",
            (i / 60_000) % 60,
            (i / 1000) % 60,
            i % 1000,
            i % 4,
            i % 17,
            i % 10
        ));
        i += 1;
    }
    s
}

fn bench(c: &mut Criterion) {
    let len = toolcell_benches::text::bench_len(64 << 20);
    let prose = toolcell_benches::text::clean_text(len);
    let log = log_text(len);
    let tmp = tempfile::tempdir().unwrap();
    let mut g = c.benchmark_group("fold");
    g.sample_size(10);
    for (name, text) in [("prose", &prose), ("log", &log)] {
        g.throughput(Throughput::Bytes(text.len() as u64));
        for (mode, fold) in [
            ("on", FoldOptions::default()),
            ("auto", FoldOptions::auto()),
            ("off", FoldOptions::off()),
        ] {
            g.bench_function(format!("{name}/fold_{mode}"), |b| {
                b.iter(|| {
                    let target = SpillTarget {
                        dir: tmp.path().to_path_buf(),
                        prefix: "bench".into(),
                        cap_bytes: 5_000_000,
                    };
                    let mut cap = Capture::with_fold(50_000, Some(target), fold);
                    // 64 KiB chunks, as the pipe readers deliver them.
                    let mut rest = text.as_str();
                    while !rest.is_empty() {
                        let mut n = rest.len().min(64 * 1024);
                        while !rest.is_char_boundary(n) {
                            n += 1;
                        }
                        cap.push(&rest[..n]);
                        rest = &rest[n..];
                    }
                    let r = cap.finish();
                    if let Some(p) = r.spill_path {
                        let _ = std::fs::remove_file(p);
                    }
                    r.bytes_total
                });
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
