//! Folding repetition out of cell output, through the real binary: runs of
//! same-shape lines and over-long lines come back short, the result says
//! what was left out, the spill file holds the whole text, and output
//! without repetition is exactly what it was.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Env;
use serde_json::Value;

fn exec(env: &Env, code: &str) -> Value {
    env.run(&["exec", "--json", code]).json()
}

/// An environment with folding on (it is off by default).
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
    // The default: off.
    let off_env = Env::new();
    let off = exec(&off_env, code);
    assert_eq!(on["output"], off["output"]);
    assert!(on.get("stdout_lines_folded").is_none(), "{on}");
    let rows = "for i in range(50):\n    print('row', i)";
    let r = exec(&off_env, rows);
    assert_eq!(r["output"].as_str().unwrap().lines().count(), 50, "{r}");
    assert!(r.get("stdout_lines_folded").is_none(), "{r}");
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
