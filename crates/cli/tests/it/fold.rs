//! Folding repetition out of cell output, through the real binary: runs of
//! same-shape lines and over-long lines come back short, the result says
//! what was left out (`*_truncated`, true byte counts, a warning naming the
//! spill file), the spill file holds the whole text, and output without
//! repetition is exactly what it was. `[output] fold = "auto"` (the
//! default) folds only a stream over its cap; `true` always; `false` never.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::Env;
use serde_json::Value;

fn exec(env: &Env, code: &str) -> Value {
    env.run(&["exec", "--json", code]).json()
}

/// Bytes of the stream's own text in `out` (stdout only): `out` less fold
/// markers (whole lines `... [N similar lines omitted …] ...`, and
/// ` … [N characters cut from this line of M] … ` inside a line) and the
/// truncation notice. Exact when the head/tail cut split no marker.
fn stream_bytes_in(out: &str, notice: &str) -> u64 {
    let out = out.replacen(notice, "", 1);
    let mut n = 0u64;
    for line in out.split_inclusive('\n') {
        if line.starts_with("... [") && line.trim_end().ends_with("] ...") {
            continue;
        }
        let mut len = line.len();
        if let Some(a) = line.find(" … [")
            && let Some(b) = line[a..].find("] … ")
        {
            len -= b + "] … ".len();
        }
        n += len as u64;
    }
    n
}

/// The `[OUTPUT TRUNCATED …]` notice with the result's own figures.
fn notice_of(r: &Value) -> String {
    format!(
        "\n\n... [OUTPUT TRUNCATED - {} bytes omitted out of {} total] ...\n\n",
        r["stdout_bytes_omitted"], r["stdout_bytes_total"]
    )
}

/// An environment that folds every stream (`fold = true`; the default,
/// `"auto"`, folds only streams over their cap).
fn folding() -> Env {
    Env::with_config("[output]\nfold = true\n")
}

#[test]
fn a_timestamped_log_with_one_error_comes_back_short() {
    let env = folding();
    let code = r#"
import datetime
t0 = datetime.datetime(2026, 12, 1, 18, 0, 0)
for i in range(400):
    ts = (t0 + datetime.timedelta(milliseconds=137 * i)).isoformat(timespec="milliseconds")
    print(f"{ts}Z INFO worker-{i % 4} processed batch {i} of 400 in {i % 17}.{i % 10}ms")
    if i == 250:
        print(f"{ts}Z ERROR worker-2 lost its connection to db-7f3a9c21")
"#;
    let r = exec(&env, code);
    let out = r["output"].as_str().unwrap();
    assert!(out.len() < 1500, "{} bytes: {out}", out.len());
    assert!(out.contains("ERROR worker-2 lost its connection"), "{out}");
    assert!(out.contains("processed batch 399 of 400"), "{out}");
    assert!(out.contains("similar lines omitted"), "{out}");
    assert_eq!(r["stdout_lines_folded"], 400 - 12, "{r}");
    assert!(
        r["warning"]
            .as_str()
            .unwrap()
            .contains("388 similar lines were folded"),
        "{r}"
    );
    // Nothing lost: the spill file has all 401 lines.
    let spill = r["stdout_spill_path"].as_str().unwrap();
    let full = std::fs::read_to_string(spill).unwrap();
    assert_eq!(full.lines().count(), 401);
    assert_eq!(r["stdout_bytes_total"].as_u64().unwrap(), full.len() as u64);
}

#[test]
fn two_hundred_thousand_rows_of_one_shape_fit_in_two_kilobytes() {
    let env = folding();
    let code = "for i in range(200000):\n    print(f'{i},{i * 7 % 1000},0.{i % 97},2026-01-{i % 28 + 1:02d}')\nprint('total rows: 200000')";
    let r = exec(&env, code);
    let out = r["output"].as_str().unwrap();
    assert!(out.len() < 2000, "{} bytes: {out}", out.len());
    assert!(out.starts_with("0,0,0.0,2026-01-01\n"), "{out}");
    assert!(out.ends_with("total rows: 200000\n"), "{out}");
    assert!(out.contains("199994 similar lines omitted"), "{out}");
    assert_eq!(r["stdout_lines_folded"], 199_994, "{r}");
}

#[test]
fn output_without_repetition_is_unchanged_and_fold_false_turns_it_off() {
    let env = folding();
    let code = "import json\nprint(json.dumps({'a': 1, 'b': [1, 2, 3]}, indent=2))\nfor w in ['alpha', 'beta', 'gamma']:\n    print(w.upper(), len(w))\nprint('done')";
    let on = exec(&env, code);
    let off_env = Env::with_config("[output]\nfold = false\n");
    let off = exec(&off_env, code);
    assert_eq!(on["output"], off["output"]);
    assert!(on.get("stdout_lines_folded").is_none(), "{on}");
    assert_eq!(on["stdout_truncated"], false, "{on}");
    let rows = "for i in range(50):\n    print('row', i)";
    let r = exec(&off_env, rows);
    assert_eq!(r["output"].as_str().unwrap().lines().count(), 50, "{r}");
    assert!(r.get("stdout_lines_folded").is_none(), "{r}");
    // `fold = true` folds them even though they fit the cap, and says so.
    let r = exec(&env, rows);
    assert_eq!(r["stdout_lines_folded"], 44, "{r}");
    assert_eq!(r["stdout_truncated"], true, "{r}");
}

/// The default (`"auto"`): what fits the cap comes back byte for byte,
/// repetition included.
#[test]
fn by_default_a_stream_that_fits_its_cap_is_returned_byte_for_byte() {
    let env = Env::new();
    let code = "for i in range(200):\n    print('row', i)\nprint('<' + 'x' * 9998 + '>')";
    let r = exec(&env, code);
    let out = r["output"].as_str().unwrap();
    let want: String = (0..200).map(|i| format!("row {i}\n")).collect::<String>()
        + "<"
        + &"x".repeat(9998)
        + ">\n";
    assert_eq!(out, want);
    assert_eq!(r["stdout_truncated"], false, "{r}");
    assert_eq!(r["stdout_bytes_total"], want.len() as u64);
    assert_eq!(r["stdout_bytes_captured"], want.len() as u64);
    assert_eq!(r["stdout_bytes_omitted"], 0);
    assert!(
        r.get("warning").is_none() && r.get("stdout_spill_path").is_none(),
        "{r}"
    );
}

/// The default (`"auto"`), a stream over its cap: folded first, and only
/// then cut if still over; the counts are true and add up.
#[test]
fn by_default_a_stream_over_its_cap_is_folded_before_any_cut() {
    let env = Env::new();
    // 400 log lines (~30 KB) with one error, and one 60 KB line: ~90 KB in
    // all, over the 50 000-byte cap; folded it fits, so nothing is cut.
    let code = r#"
for i in range(400):
    print(f"2026-12-01T18:00:{i % 60:02d}Z INFO worker-{i % 4} processed batch {i} of 400")
    if i == 250:
        print("2026-12-01T18:04:10Z ERROR worker-2 lost its connection to db-7f3a9c21")
print('[' + 'y' * 60000 + ']')
print('done')
"#;
    let r = exec(&env, code);
    let out = r["output"].as_str().unwrap();
    assert!(out.len() < 5_000, "{} bytes: {out}", out.len());
    assert!(!out.contains("OUTPUT TRUNCATED"), "{out}");
    assert!(out.contains("ERROR worker-2 lost its connection"), "{out}");
    assert!(out.ends_with("]\ndone\n"), "{out}");
    assert_eq!(r["stdout_truncated"], true, "{r}");
    assert_eq!(r["stdout_lines_cut"], 1, "{r}");
    assert!(r["stdout_lines_folded"].as_u64().unwrap() > 380, "{r}");
    let spill = std::fs::read_to_string(r["stdout_spill_path"].as_str().unwrap()).unwrap();
    let total = r["stdout_bytes_total"].as_u64().unwrap();
    assert_eq!(
        total,
        spill.len() as u64,
        "the total is what the cell wrote"
    );
    assert_eq!(spill.lines().count(), 403);
    // Exactly the stream's bytes in `output`: the markers are not counted.
    let captured = r["stdout_bytes_captured"].as_u64().unwrap();
    assert_eq!(captured, stream_bytes_in(out, ""), "{r}");
    assert_eq!(
        r["stdout_bytes_omitted"].as_u64().unwrap(),
        total - captured
    );
    let w = r["warning"].as_str().unwrap();
    assert!(w.starts_with("stdout was truncated: "), "{w}");
    assert!(
        w.contains("similar lines were folded") && w.contains("1 long line was cut"),
        "{w}"
    );
    assert!(w.contains(r["stdout_spill_path"].as_str().unwrap()), "{w}");

    // Without repetition, over the cap: head and tail, as with fold = false.
    let r = exec(
        &env,
        "import random\nrandom.seed(1)\nfor i in range(3000):\n    print(''.join(random.choice('abcdefgh ') for _ in range(random.randint(5, 60))))",
    );
    assert_eq!(r["stdout_truncated"], true, "{r}");
    let out = r["output"].as_str().unwrap();
    assert!(out.contains(&notice_of(&r)), "{r}");
    assert_eq!(r["stdout_bytes_captured"], 50_000, "{r}");
    assert_eq!(
        r["stdout_bytes_captured"].as_u64().unwrap() + r["stdout_bytes_omitted"].as_u64().unwrap(),
        r["stdout_bytes_total"].as_u64().unwrap()
    );
}

/// Folding that does not bring a stream under its cap, then the cut: fold
/// markers in the dropped middle are not taken off the count, and the
/// notice shows the result's own figures.
#[test]
fn after_folding_and_a_cut_the_counts_are_the_streams() {
    let env = Env::new();
    // Runs of 8 same-shape lines (2 folded each, plus a marker line) between
    // epoch lines: the folded text is longer than the 105 KB stream.
    let code = "for e in range(600):\n    for b in range(8):\n        print(f'batch {b} loss 0.{(e * 7 + b) % 10000:04d}')\n    print(f'== epoch {e} ==')";
    let r = exec(&env, code);
    let out = r["output"].as_str().unwrap();
    let total = r["stdout_bytes_total"].as_u64().unwrap();
    let mut want = 0u64;
    for e in 0..600u64 {
        for b in 0..8u64 {
            want += format!("batch {b} loss 0.{:04}\n", (e * 7 + b) % 10000).len() as u64;
        }
        want += format!("== epoch {e} ==\n").len() as u64;
    }
    assert_eq!(total, want);
    let notice = notice_of(&r);
    assert!(
        out.contains(&notice),
        "the notice shows the result's figures: {r}"
    );
    let captured = r["stdout_bytes_captured"].as_u64().unwrap();
    let shown = stream_bytes_in(out, &notice);
    // The head and tail may each end or start inside a marker line.
    assert!(
        captured.abs_diff(shown) <= 2 * 100,
        "captured {captured}, shown {shown}"
    );
    assert!(captured > 20_000, "{r}");
    assert_eq!(
        r["stdout_bytes_omitted"].as_u64().unwrap(),
        total - captured
    );
    assert_eq!(r["stdout_truncated"], true);
}

/// Edges: a stream exactly at its cap comes back whole; one byte more is
/// over (and its one long line is cut); a cut never splits a character;
/// a progress bar counts as its cleaned text, not the bytes it wrote.
#[test]
fn the_cap_edge_multibyte_cuts_and_progress_bars() {
    let env = Env::new();
    let r = exec(&env, "print('a' * 49999)");
    assert_eq!(r["stdout_truncated"], false, "{r}");
    assert_eq!(r["output"].as_str().unwrap().len(), 50_000);
    let r = exec(&env, "print('a' * 50000)");
    assert_eq!(r["stdout_truncated"], true, "{r}");
    assert_eq!(r["stdout_lines_cut"], 1, "{r}");
    assert_eq!(r["stdout_bytes_captured"], 2001, "{r}");
    assert_eq!(r["stdout_bytes_omitted"], 48_000, "{r}");

    // 30 000 two-byte characters: cut by characters, never inside one.
    let r = exec(&env, "print('é' * 30000)");
    let out = r["output"].as_str().unwrap();
    assert_eq!(r["stdout_bytes_total"], 60_001, "{r}");
    assert_eq!(r["stdout_bytes_captured"], 4001, "{r}");
    assert!(
        out.starts_with(&"é".repeat(1000)) && out.ends_with(&format!("{}\n", "é".repeat(1000))),
        "{out}"
    );
    let fold_false = Env::with_config("[output]\nfold = false\n");
    let r = exec(&fold_false, "print('€' * 30000)");
    let out = r["output"].as_str().unwrap();
    assert!(!out.contains('\u{FFFD}'), "no character was split");
    assert!(
        r["stdout_bytes_captured"].as_u64().unwrap() <= 50_000,
        "{r}"
    );
    assert!(out.contains(&notice_of(&r)), "{r}");

    // A progress bar: 300 KB written, one line once cleaned.
    let r = exec(
        &env,
        "for i in range(20000):\n    print(f'\\rprogress {i:05d}', end='')\nprint()",
    );
    assert_eq!(r["output"], "progress 19999\n", "{r}");
    assert_eq!(r["stdout_truncated"], false, "{r}");
    assert_eq!(r["stdout_bytes_total"], 15, "{r}");
}

/// A traceback over the stderr cap: cut to head and tail, and the warning
/// says so and names a file with all of it; `exec` prints that warning.
#[test]
fn a_traceback_over_the_cap_is_saved_and_the_warning_says_where() {
    let env = Env::new();
    let code = "raise ValueError('<' + 'v' * 100000 + '>')";
    let r = exec(&env, code);
    assert_eq!(r["status"], "error", "{r}");
    let out = r["output"].as_str().unwrap();
    assert!(out.contains("[TRACEBACK TRUNCATED - "), "{out}");
    let w = r["warning"].as_str().unwrap();
    assert!(w.contains("The traceback was truncated"), "{w}");
    let path = w
        .split("The whole traceback is saved in ")
        .nth(1)
        .and_then(|s| s.split(';').next())
        .unwrap_or_else(|| panic!("{w}"));
    let saved = std::fs::read_to_string(path).unwrap();
    assert!(
        saved.contains(&format!("<{}>", "v".repeat(100000))),
        "the whole message"
    );
    assert!(
        saved.starts_with("Traceback (most recent call last)"),
        "{}",
        &saved[..100]
    );

    // Human mode: printed with everything else, even when stdout was cut
    // too (its part is on the status line).
    let out = env.run(&["exec", &format!("print('x' * 80000)\n{code}")]);
    out.expect_code(1);
    assert!(
        out.stderr.contains("The traceback was truncated"),
        "{}",
        out.stderr
    );
    assert!(
        !out.stderr.contains("warning: stdout was truncated"),
        "{}",
        out.stderr
    );
}

/// A 100 000-character line: over the cap, so folded to its head and tail;
/// the result says output was left out and where all of it is.
#[test]
fn a_huge_single_line_says_what_was_left_out_and_where_it_is() {
    for config in ["", "[output]\nfold = true\n", "[output]\nfold = false\n"] {
        let env = Env::with_config(config);
        let r = exec(&env, "print('x' * 100000)");
        assert_eq!(r["stdout_truncated"], true, "{config}: {r}");
        assert_eq!(r["stdout_bytes_total"], 100_001, "{config}: {r}");
        let captured = r["stdout_bytes_captured"].as_u64().unwrap();
        let want = if config.contains("false") {
            50_000
        } else {
            2001
        };
        assert_eq!(captured, want, "{config}: {r}");
        assert_eq!(r["stdout_bytes_omitted"].as_u64().unwrap(), 100_001 - want);
        let path = r["stdout_spill_path"].as_str().unwrap();
        assert_eq!(std::fs::read(path).unwrap().len(), 100_001, "{config}");
        let w = r["warning"].as_str().unwrap();
        assert!(
            w.contains("bytes omitted") && w.contains(path),
            "{config}: {w}"
        );
        if config.contains("false") {
            assert!(r.get("stdout_lines_cut").is_none(), "{r}");
            assert_eq!(captured, 50_000, "{r}");
        } else {
            assert_eq!(r["stdout_lines_cut"], 1, "{config}: {r}");
            // The line's head and tail: 2000 characters and the newline.
            assert_eq!(captured, 2001, "{config}: {r}");
        }
    }
}

/// `fold = true` with a 5 001-byte stream (one line of 5 000): the counts
/// are the stream's, not the folded text's.
#[test]
fn counts_are_true_when_a_fitting_stream_is_folded() {
    let env = Env::with_config("[output]\nfold = true\n");
    let r = exec(&env, "print('x' * 5000)");
    assert_eq!(r["stdout_bytes_total"], 5001, "{r}");
    assert_eq!(r["stdout_bytes_captured"], 2001, "{r}");
    assert_eq!(r["stdout_bytes_omitted"], 3000, "{r}");
    assert_eq!(r["stdout_truncated"], true, "{r}");
    assert!(
        r["warning"]
            .as_str()
            .unwrap()
            .contains("3000 of 5001 bytes omitted"),
        "{r}"
    );
}

/// 200 MB on stdout and a large stderr: bounded, counted, and said.
#[test]
fn two_hundred_megabytes_are_counted_and_the_warning_says_where_they_are() {
    let env = Env::new();
    let r = exec(
        &env,
        "import sys\nchunk = 'z' * 1_000_000\nfor _ in range(200):\n    sys.stdout.write(chunk)\nprint()\n_ = sys.stderr.write('e' * 30000 + '\\n')",
    );
    assert_eq!(r["status"], "success", "{r}");
    assert_eq!(r["stdout_bytes_total"], 200_000_001u64, "{r}");
    assert_eq!(r["stdout_truncated"], true, "{r}");
    assert!(r["output"].as_str().unwrap().len() < 60_000, "{r}");
    let path = r["stdout_spill_path"].as_str().unwrap();
    // The spill file is capped (5 MB by default) and the warning says so.
    assert!(std::fs::metadata(path).unwrap().len() <= 5_000_000);
    let w = r["warning"].as_str().unwrap();
    assert!(
        w.contains("stdout was truncated") && w.contains(path),
        "{w}"
    );
    assert!(w.contains("capped"), "{w}");
    // stderr's counts, beside stdout's.
    assert_eq!(r["stderr_bytes_total"], 30_001, "{r}");
    assert_eq!(r["stderr_truncated"], true, "{r}");
    // One 30 000-character line: cut to its 2 000-character head and tail.
    assert_eq!(r["stderr_bytes_captured"], 2001, "{r}");
    assert_eq!(r["stderr_bytes_omitted"], 28_000, "{r}");
    assert!(w.contains("stderr was truncated"), "{w}");
    assert!(r["stderr_spill_path"].as_str().is_some(), "{r}");
}

#[test]
fn a_long_line_keeps_its_head_and_tail() {
    let env = folding();
    let r = exec(&env, "print('<' + 'x' * 9998 + '>')\nprint('after')");
    let out = r["output"].as_str().unwrap();
    assert!(out.starts_with(&format!("<{}", "x".repeat(999))), "{out}");
    assert!(
        out.contains(" … [8000 characters cut from this line of 10000] … "),
        "{out}"
    );
    assert!(
        out.ends_with(&format!("{}>\nafter\n", "x".repeat(999))),
        "{out}"
    );
    assert_eq!(r["stdout_lines_cut"], 1, "{r}");
    let spill = r["stdout_spill_path"].as_str().unwrap();
    assert_eq!(
        std::fs::read_to_string(spill).unwrap().len(),
        10_000 + 1 + 6
    );
}
