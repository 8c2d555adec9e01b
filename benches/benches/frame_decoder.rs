//! Throughput of the frame decoder (issue 2 targets: ≥ 10 GB/s on raw
//! output without frames, ≥ 1 GB/s on output dense with false markers).
//!
//! `cargo bench -p toolcell-benches --bench frame_decoder`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use toolcell_benches::frames;
use toolcell_protocol::Decoder;

const LEN: usize = 64 * 1024 * 1024;

/// Feeds `input` in `chunk`-sized pieces and drains every event.
fn decode(input: &[u8], chunk: usize) -> usize {
    let s = frames::sentinel();
    let mut dec = Decoder::new(&s);
    let mut n = 0usize;
    for c in input.chunks(chunk) {
        for ev in dec.feed(c) {
            n += ev.bytes().len();
        }
    }
    if let Some(ev) = dec.finish() {
        n += ev.bytes().len();
    }
    n
}

fn bench(c: &mut Criterion) {
    let inputs: [(&str, Vec<u8>); 3] = [
        ("raw_no_frames", frames::raw_output(LEN)),
        ("frames_1k_back_to_back", frames::back_to_back_frames(LEN)),
        ("false_marker_dense", frames::false_markers(LEN)),
    ];
    let mut g = c.benchmark_group("frame_decoder");
    g.sample_size(10);
    for (name, input) in &inputs {
        g.throughput(Throughput::Bytes(input.len() as u64));
        for chunk in [4 * 1024, 64 * 1024, input.len()] {
            let label = match chunk {
                4096 => "4KiB".to_string(),
                65536 => "64KiB".to_string(),
                _ => "whole".to_string(),
            };
            g.bench_with_input(BenchmarkId::new(*name, label), input, |b, input| {
                b.iter(|| decode(black_box(input), chunk));
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
