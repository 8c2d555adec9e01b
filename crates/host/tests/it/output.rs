//! The output pipeline with real cells (docs/result.md, "output" and the fields
//! after it): a cell printing 200 MB keeps the host's memory bounded, counts
//! every byte and spills to a capped file; head/tail truncation; ANSI and
//! progress bars cleaned; stderr after stdout; live chunks while the cell runs;
//! output written between cells.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use crate::common;

use std::time::{Duration, Instant};

use crate::common::{Fixture, assert_success, show};
use toolcell_host::{ExecuteRequest, Registry};
use toolcell_kernel::StreamKind;

const BIG: &str = "output::printing_200_mb_keeps_host_memory_bounded_and_spills_a_capped_file";
/// 200 MiB, in lines of 1 KiB.
const BIG_BYTES: u64 = 200 * 1024 * 1024;

#[test]
fn printing_200_mb_keeps_host_memory_bounded_and_spills_a_capped_file() {
    // Measured in a host process of its own, so other tests running in
    // parallel cannot move its resident set.
    if common::is_child(BIG) {
        big_output_child();
    } else {
        common::run_child(BIG, &[]);
    }
}

fn big_output_child() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let f = Fixture::with(|o| o.spill_cap_bytes = 5_000_000);
        // The kernel and the pipeline exist before the measurement starts.
        assert_success(&f.run("import sys\nline = 'output line. ' + '.' * 1010 + '\\n'\nblock = line * 1024\nprint('warm')").await);
        let (rss0, hwm0) = common::memory_kb();
        let t = Instant::now();
        let r = f.run("for _ in range(200):\n    sys.stdout.write(block)\nprint('the end')").await;
        let took = t.elapsed();
        let (rss1, hwm1) = common::memory_kb();
        println!("\nmeasured: 200 MiB cell: {took:?}; VmRSS {rss0} -> {rss1} KiB, VmHWM {hwm0} -> {hwm1} KiB");
        assert_success(&r);
        assert!(hwm1 - hwm0 < 64 * 1024, "host peak memory grew by {} KiB", hwm1 - hwm0);
        assert!(rss1.saturating_sub(rss0) < 64 * 1024, "host memory grew by {} KiB", rss1 - rss0);

        let total = BIG_BYTES + "the end\n".len() as u64;
        assert_eq!(r.stdout_bytes_total, total, "{}", show(&r));
        assert!(r.stdout_truncated);
        // The default folds the 204 800 lines of one shape down to a few.
        // Shown: the first and last 3 lines of the run, and "the end".
        let line_len = "output line. ".len() as u64 + 1010 + 1;
        assert_eq!(r.stdout_bytes_captured, 6 * line_len + 8, "{}", show(&r));
        assert_eq!(r.stdout_bytes_omitted, total - r.stdout_bytes_captured);
        assert_eq!(r.stdout_lines_folded, 204_800 - 6, "{}", show(&r));
        assert!(r.output.starts_with("output line. ..."), "{}", &r.output[..100]);
        assert!(r.output.ends_with("the end\n"));
        assert!(r.output.contains("204794 similar lines omitted"), "{}", show(&r));
        assert!(!r.output.contains("OUTPUT TRUNCATED"), "{}", show(&r));

        let spill = std::path::PathBuf::from(r.stdout_spill_path.as_deref().unwrap());
        assert!(spill.starts_with(f.spill_dir()), "{}", spill.display());
        let warning = r.warning.as_deref().unwrap();
        assert!(warning.contains(&spill.display().to_string()) && warning.contains("read_file"), "{warning}");
        assert!(warning.contains("capped"), "{warning}");
        let saved = std::fs::read(&spill).unwrap();
        // The file holds the start of the stream, and at most the cap.
        assert_eq!(saved.len(), 5_000_000, "spill file size");
        let line = format!("output line. {}\n", ".".repeat(1010));
        assert!(saved.starts_with(line.repeat(5).as_bytes()));
        assert!(saved.ends_with(b"[spill file capped at 5000000 bytes; the rest of the output was not saved] ...\n"));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&spill).unwrap().permissions().mode() & 0o777, 0o600);

        // The kernel is fine afterwards.
        assert_eq!(f.ok("print('still here')").await, "still here\n");
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_cap_output_keeps_head_and_tail_and_the_spill_has_everything() {
    // `[output] fold = false`: the plain head/tail cut (by default these
    // same-shape lines would be folded first).
    let f = Fixture::with(|o| {
        o.max_stdout_bytes = 1000;
        o.max_stderr_bytes = 200;
        o.fold = toolcell_kernel::fold::FoldOptions::off();
    });
    let r = f
        .run("import sys\nfor i in range(1000):\n    print(f'line {i:04d}')\n_ = sys.stderr.write('E' * 500 + '\\n')")
        .await;
    assert_success(&r);
    let total = 1000 * "line 0000\n".len() as u64;
    assert_eq!(r.stdout_bytes_total, total);
    assert_eq!(r.stdout_bytes_captured, 1000);
    assert_eq!(r.stdout_bytes_omitted, total - 1000);
    assert!(r.stdout_truncated);
    // Head is 40% of the cap, tail 60%.
    let head = &r.output[..400];
    assert!(head.starts_with("line 0000\nline 0001\n"), "{head}");
    assert!(r.output.contains(&format!(
        "[OUTPUT TRUNCATED - {} bytes omitted out of {total} total]",
        total - 1000
    )));
    let (stdout, stderr) = r.output.split_once("\n--- stderr ---\n").unwrap();
    assert!(stdout.ends_with("line 0998\nline 0999\n"), "{stdout}");
    // stderr has its own cap.
    assert!(
        stderr.starts_with("EEEE")
            && stderr.contains("OUTPUT TRUNCATED - 301 bytes omitted out of 501 total"),
        "{stderr}"
    );
    let spill = std::fs::read_to_string(r.stdout_spill_path.as_deref().unwrap()).unwrap();
    let whole: String = (0..1000).map(|i| format!("line {i:04}\n")).collect();
    assert_eq!(spill, whole);
    let warning = r.warning.as_deref().unwrap();
    assert!(
        warning.contains("stdout") && warning.contains("stderr"),
        "{warning}"
    );
    // Under the cap: nothing cut, no spill.
    let r = f.run("print('short')").await;
    assert!(
        !r.stdout_truncated && r.stdout_spill_path.is_none() && r.warning.is_none(),
        "{}",
        show(&r)
    );
    assert_eq!(
        (
            r.stdout_bytes_captured,
            r.stdout_bytes_total,
            r.stdout_bytes_omitted
        ),
        (6, 6, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ansi_and_progress_bars_are_cleaned_and_stderr_follows_stdout() {
    let f = Fixture::new();
    let r = f
        .run("import sys\nprint('\\x1b[1;31mred\\x1b[0m text')\nfor p in range(0, 101, 25):\n    sys.stdout.write(f'\\r{p}%')\nprint()\nprint('oops', file=sys.stderr)\nprint('\\x1b]8;;http://x.invalid\\x1b\\\\link\\x1b]8;;\\x1b\\\\')")
        .await;
    assert_success(&r);
    assert_eq!(r.output, "red text\n100%\nlink\n\n--- stderr ---\noops\n");
    // Invalid UTF-8 becomes U+FFFD.
    let r = f.run("import os\nos.write(1, b'bad \\xff byte\\n')").await;
    assert_success(&r);
    assert!(
        r.output.starts_with("bad \u{FFFD} byte\n"),
        "{:?}",
        r.output
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_chunks_arrive_while_the_cell_is_still_running() {
    let f = Fixture::new();
    f.ok("import time").await;
    let (sink, mut rx) = common::live_channel();
    let t0 = Instant::now();
    let run = f.reg.execute(
        ExecuteRequest::new("for i in range(3):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.3)\nprint('done')")
            .live(sink),
    );
    let watch = async {
        let mut first_tick = None;
        while first_tick.is_none() {
            let Some((kind, chunk)) = rx.recv().await else {
                break;
            };
            if kind == StreamKind::Stdout && chunk.contains("tick 0") {
                first_tick = Some(t0.elapsed());
            }
        }
        first_tick
    };
    let (r, first_tick) = tokio::join!(run, watch);
    let ended = t0.elapsed();
    assert_success(&r);
    assert_eq!(r.output, "tick 0\ntick 1\ntick 2\ndone\n");
    let first_tick = first_tick.expect("no live chunk with tick 0");
    // The first line came out at least one sleep before the cell ended.
    assert!(
        first_tick + Duration::from_millis(250) < ended,
        "tick 0 arrived at {first_tick:?}, the cell ended at {ended:?}"
    );
    // Everything the sink got adds up to the output, in order.
    let mut rest = String::from("tick 0\n");
    while let Ok((kind, chunk)) = rx.try_recv() {
        if kind == StreamKind::Stdout {
            rest.push_str(&chunk);
        }
    }
    assert!(
        r.output.ends_with(rest.trim_start_matches("tick 0\n")),
        "{rest:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_printed_before_a_pause_is_live_during_the_pause() {
    // The trailing newline could begin a frame marker, so the decoder holds
    // it; the pump releases it once the pipe is quiet (frame headers are
    // written atomically), so the line is not stuck until the cell ends.
    let f = Fixture::new();
    f.ok("import time").await;
    let (sink, mut rx) = common::live_channel();
    let run = f
        .reg
        .execute(ExecuteRequest::new("print('step 1')\ntime.sleep(5)").live(sink));
    // Well before the cell's end (5 s), when a held line would come out.
    let watch = async {
        let t0 = Instant::now();
        common::wait_live(&mut rx, "step 1\n", Duration::from_secs(3)).await;
        t0.elapsed()
    };
    let (r, seen_after) = tokio::join!(run, watch);
    assert_success(&r);
    assert!(seen_after < Duration::from_secs(3), "{seen_after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_written_between_cells_is_given_to_the_next_cell_under_a_marker() {
    let f = Fixture::new();
    let done = f.work().join("written");
    let code = format!(
        "import threading, time, sys\ndef later():\n    time.sleep(0.2)\n    print('from the thread')\n    print('thread stderr', file=sys.stderr, flush=True)\n    {}\nthreading.Thread(target=later).start()\nprint('cell ends')",
        common::py_mark(&done, "1").replace('\n', "\n    ")
    );
    let r = f.run(&code).await;
    assert_success(&r);
    assert_eq!(r.output, "cell ends\n");
    common::wait_file(&done, Duration::from_secs(10)).await;
    let r = f.run("print('second cell')").await;
    assert_success(&r);
    let marker = "[toolcell: output written after the previous cell ended]\n";
    assert_eq!(
        r.output,
        format!("{marker}from the thread\nsecond cell\n\n--- stderr ---\n{marker}thread stderr\n")
    );
    // Said once: the cell after that is clean.
    assert_eq!(f.ok("print('third')").await, "third\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_without_a_writable_spill_dir_still_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let blocker = tmp.path().join("not-a-dir");
    std::fs::write(&blocker, "").unwrap();
    let mut o = common::opts(tmp.path());
    o.default_cwd = tmp.path().to_path_buf();
    o.spill_dir = blocker.join("spill");
    o.max_stdout_bytes = 100;
    let reg = Registry::new(o).unwrap();
    let r = reg.execute(ExecuteRequest::new("print('x' * 1000)")).await;
    assert_success(&r);
    assert!(r.stdout_truncated);
    assert_eq!(r.stdout_spill_path, None);
    let warning = r.warning.as_deref().unwrap();
    assert!(warning.contains("could not be saved"), "{warning}");
}
