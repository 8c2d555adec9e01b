//! Throughput of secret redaction (issue 3 targets: ≥ 1 GB/s on clean text,
//! ≥ 300 MB/s with one secret per 4 KiB) and of the whole per-stream
//! pipeline (`Cleaner`: strip + redact).
//!
//! `cargo bench -p toolcell-benches --bench redact`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use toolcell_benches::text;
use toolcell_redact::{Cleaner, Redactor};

fn stream(red: &Redactor, input: &str, chunk: usize, out: &mut String) -> usize {
    out.clear();
    let mut st = red.stream();
    let b = input.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let mut e = (i + chunk).min(b.len());
        while !input.is_char_boundary(e) {
            e += 1;
        }
        st.push(&input[i..e], out);
        i = e;
    }
    st.finish(out);
    out.len()
}

fn bench(c: &mut Criterion) {
    let len = text::bench_len(64 << 20);
    // A host typically registers a handful of secret env values (random tokens).
    let red = Redactor::new([
        "Zk3pQ9wXy7Lm2Vb8Tq4R",
        "tR5nG8hJ2kL9mP4qWx7Z",
        "ZmFrZS1zZWNyZXQtdmFsdWU=",
    ])
    .unwrap();
    let inputs: [(&str, String); 2] = [
        ("clean_text", text::clean_text(len)),
        ("secret_per_4KiB", text::text_with_secrets(len)),
    ];
    let mut g = c.benchmark_group("redact");
    g.sample_size(10);
    let mut out = String::with_capacity(len + 1024);
    for (name, input) in &inputs {
        g.throughput(Throughput::Bytes(input.len() as u64));
        g.bench_with_input(BenchmarkId::new(*name, "whole"), input, |b, input| {
            b.iter(|| red.redact(black_box(input)).len());
        });
        g.bench_with_input(
            BenchmarkId::new(*name, "stream_64KiB"),
            input,
            |b, input| {
                b.iter(|| stream(&red, black_box(input), 64 * 1024, &mut out));
            },
        );
    }
    let colored = text::colored_output(len);
    g.throughput(Throughput::Bytes(colored.len() as u64));
    g.bench_with_input(
        BenchmarkId::new("cleaner_colored", "stream_64KiB"),
        &colored,
        |b, input| {
            b.iter(|| {
                out.clear();
                let mut cl = Cleaner::new(&red);
                for ch in input.chunks(64 * 1024) {
                    cl.push(black_box(ch), &mut out);
                }
                cl.finish(&mut out);
                out.len()
            });
        },
    );
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
