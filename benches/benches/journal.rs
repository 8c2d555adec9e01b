//! The session journal (issue 8): what recording costs a cell (building the
//! `CellRecord` and queueing it — the only part on the cell's path), a warm
//! cell through `Registry::execute` with and without a journal, how fast
//! the writer thread stores rows, and how long an export takes.
//!
//! `cargo bench -p toolcell-benches --bench journal`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use toolcell_host::journal::{self, CellRecord, Format, HistoryQuery, Journal};
use toolcell_host::{ExecuteRequest, Registry, RegistryOptions};
use toolcell_kernel::{ExecuteResult, KernelInfo, Status};
use toolcell_redact::Redactor;

/// A typical result: 4 KiB of output, a kernel, usage.
fn result() -> ExecuteResult {
    let mut r = ExecuteResult::not_run(
        Status::Success,
        "",
        KernelInfo {
            id: "k-0123456789abcdef".into(),
            mode: "project".into(),
            python: "3.11.7".into(),
            reused: true,
            execution_count: 7,
            ..KernelInfo::default()
        },
    );
    r.error = None;
    r.exit_code = 0;
    r.output = "row 0042: alpha beta gamma delta epsilon zeta eta theta\n".repeat(72);
    r.duration_seconds = 0.01;
    r
}

const CODE: &str = "import json\nrows = [json.loads(l) for l in open('data.jsonl')]\nfor r in rows[:40]:\n    print(r['id'], r['name'])\n";

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let redactor = Redactor::builtin();
    let res = result();
    let mut g = c.benchmark_group("journal");

    // The cell's side: from_result (clone output, redact code) + try_send.
    let j = Journal::open(&tmp.path().join("record.db")).unwrap();
    g.bench_function("from_result_and_record_4KiB", |b| {
        b.iter(|| {
            j.record(CellRecord::from_result(
                "bench",
                CODE,
                &res,
                &[],
                std::time::SystemTime::now(),
                &redactor,
            ));
        });
    });
    j.flush(Duration::from_secs(60));

    // The writer's side: 1000 rows queued, then flushed (batched transactions).
    let j = Journal::with_capacity(&tmp.path().join("write.db"), 2048).unwrap();
    let rec = CellRecord::from_result(
        "bench",
        CODE,
        &res,
        &[],
        std::time::SystemTime::now(),
        &redactor,
    );
    g.throughput(Throughput::Elements(1000));
    g.sample_size(20);
    g.bench_function("write_1000_rows_4KiB", |b| {
        b.iter(|| {
            for _ in 0..1000 {
                j.record(rec.clone());
            }
            assert!(j.flush(Duration::from_secs(60)));
        });
    });
    assert_eq!(j.dropped(), 0);

    // Export of 200 cells read back from the database.
    let rows: Vec<CellRecord> = Journal::history(
        &tmp.path().join("write.db"),
        &HistoryQuery {
            session: None,
            limit: 200,
        },
    )
    .unwrap();
    g.throughput(Throughput::Elements(rows.len() as u64));
    g.bench_function("export_ipynb_200_cells", |b| {
        b.iter(|| journal::export(&rows, Format::Ipynb));
    });
    g.bench_function("history_read_200_cells", |b| {
        b.iter(|| {
            Journal::history(
                &tmp.path().join("write.db"),
                &HistoryQuery {
                    session: Some("bench".into()),
                    limit: 200,
                },
            )
            .unwrap()
        });
    });
    g.finish();

    // A warm `x += 1` cell through the registry, without and with a journal.
    let mut g = c.benchmark_group("journal_warm_cell");
    g.sample_size(50);
    let rt = toolcell_benches::runtime();
    for journaled in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let opts = RegistryOptions {
            kernels_root: Some(dir.path().join("kernels")),
            spill_dir: dir.path().join("spill"),
            default_cwd: dir.path().to_path_buf(),
            journal: journaled.then(|| Journal::open(&dir.path().join("j.db")).unwrap()),
            ..RegistryOptions::default()
        };
        let reg = rt.block_on(async { Registry::new(opts) }).unwrap();
        let r = rt.block_on(reg.execute(ExecuteRequest::new("x = 0")));
        assert_eq!(r.status, Status::Success);
        let name = if journaled { "journaled" } else { "plain" };
        g.bench_function(name, |b| {
            b.iter(|| {
                let r = rt.block_on(reg.execute(ExecuteRequest::new("x += 1")));
                assert_eq!(r.status, Status::Success);
            });
        });
        rt.block_on(reg.shutdown_all());
        if let Some(j) = &reg.options().journal {
            j.flush(Duration::from_secs(60));
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
