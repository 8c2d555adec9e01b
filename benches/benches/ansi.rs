//! Throughput of ANSI stripping (issue 3 targets: ≥ 5 GB/s on text without
//! escapes, ≥ 1 GB/s on colored output).
//!
//! `cargo bench -p toolcell-benches --bench ansi`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use toolcell_benches::text;
use toolcell_redact::{AnsiStripper, strip_ansi};

fn stream(input: &[u8], chunk: usize, out: &mut String) -> usize {
    out.clear();
    let mut st = AnsiStripper::new();
    for c in input.chunks(chunk) {
        st.push(c, out);
    }
    st.finish(out);
    out.len()
}

fn bench(c: &mut Criterion) {
    let len = text::bench_len(64 << 20);
    let inputs: [(&str, Vec<u8>); 3] = [
        ("plain_text", text::clean_text(len).into_bytes()),
        ("colored_compiler", text::colored_output(len)),
        ("progress_bars", text::progress_output(len)),
    ];
    let mut g = c.benchmark_group("ansi");
    g.sample_size(10);
    let mut out = String::with_capacity(len + 1024);
    for (name, input) in &inputs {
        g.throughput(Throughput::Bytes(input.len() as u64));
        g.bench_with_input(BenchmarkId::new(*name, "whole"), input, |b, input| {
            b.iter(|| strip_ansi(black_box(input)).len());
        });
        g.bench_with_input(
            BenchmarkId::new(*name, "stream_64KiB"),
            input,
            |b, input| {
                b.iter(|| stream(black_box(input), 64 * 1024, &mut out));
            },
        );
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
