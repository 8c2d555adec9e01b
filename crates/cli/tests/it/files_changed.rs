//! The files a cell changed (`files` in the result), through the real
//! binary: `exec`, `serve`, `mcp`, the journal (`history`, `export`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use crate::common::{Env, FAST_CONFIG, Serve};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

/// `exec --json CODE` in `env`: the result.
fn exec_json(env: &Env, code: &str) -> Value {
    let out = env.run(&["exec", "--json", code]);
    let r = out.json();
    assert_eq!(r["status"], "success", "{r:#}\nstderr:\n{}", out.stderr);
    r
}

fn paths(files: &Value, kind: &str) -> Vec<String> {
    files[kind]
        .as_array()
        .unwrap_or_else(|| panic!("{kind} in {files:#}"))
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect()
}

fn bytes_of(files: &Value, kind: &str, path: &str) -> u64 {
    files[kind]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == path)
        .unwrap_or_else(|| panic!("{path} in {kind}: {files:#}"))["bytes"]
        .as_u64()
        .unwrap()
}

#[test]
fn create_modify_delete_and_rename_are_reported() {
    let env = Env::fast();
    env.write("keep.txt", "same\n");
    env.write("mod.txt", "old\n");
    env.write("del.txt", "bye\n");
    env.write("old_name.txt", "moving\n");
    env.write("cfg.yaml", "a: 1\n");
    env.write("sub/deep/gone.txt", "x\n");
    let r = exec_json(
        &env,
        "import os, shutil\n\
         open('new.txt', 'w').write('hello')\n\
         open('mod.txt', 'a').write('more\\n')\n\
         os.remove('del.txt')\n\
         os.rename('old_name.txt', 'new_name.txt')\n\
         # same size and content, another inode: an editor's atomic save\n\
         open('cfg.tmp', 'w').write('a: 1\\n')\n\
         os.replace('cfg.tmp', 'cfg.yaml')\n\
         shutil.rmtree('sub')\n\
         os.makedirs('out/x')\n\
         open('out/x/r.csv', 'w').write('1,2\\n')\n\
         print('done')",
    );
    assert_eq!(r["output"], "done\n");
    let f = &r["files"];
    assert_eq!(
        paths(f, "created"),
        ["new.txt", "new_name.txt", "out/x/r.csv"],
        "{f:#}"
    );
    assert_eq!(paths(f, "modified"), ["cfg.yaml", "mod.txt"], "{f:#}");
    assert_eq!(
        paths(f, "deleted"),
        ["del.txt", "old_name.txt", "sub/deep/gone.txt"],
        "{f:#}"
    );
    assert_eq!(bytes_of(f, "created", "new.txt"), 5);
    assert_eq!(bytes_of(f, "modified", "mod.txt"), 9);
    assert!(f["deleted"][0].get("bytes").is_none(), "{f:#}");
    assert_eq!(f["truncated"], false);
    assert!(f.get("counts").is_none() && f.get("scan_stopped").is_none());

    // The human status line says it in words.
    let out = env.run(&[
        "exec",
        "open('one.txt', 'w').write('1'); open('mod.txt', 'w')",
    ]);
    out.expect_code(0);
    let status = out
        .stderr
        .lines()
        .find(|l| l.starts_with("[toolcell] "))
        .unwrap();
    assert!(status.contains("· 1 file created, 1 modified"), "{status}");
}

/// toolcell's cache directory (probes, compiled runners) is its own, like
/// the spill directory: here it is under the working directory (`HOME`
/// is the test's directory), and what is written there, while a kernel
/// starts or by a cell, is never reported.
#[test]
fn toolcells_own_cache_directory_is_never_reported() {
    // Unsandboxed: a sandboxed cell cannot write there at all (toolcell's
    // directories are hidden, read-only; sandbox::…_hidden_paths_…).
    let env = Env::fast_unsandboxed();
    let r = exec_json(
        &env,
        "import os\n\
         os.makedirs('cache/toolcell', exist_ok=True)\n\
         open('cache/toolcell/cell-wrote-this', 'w').write('x')\n\
         open('mine.txt', 'w').write('y')",
    );
    assert!(
        env.path().join("cache/toolcell/cell-wrote-this").is_file(),
        "the cell did not write where the test expects the cache: {r:#}"
    );
    assert_eq!(paths(&r["files"], "created"), ["mine.txt"], "{r:#}");
}

#[test]
fn a_cell_that_changes_nothing_has_no_files_field_or_only_what_it_read() {
    let env = Env::fast();
    env.write("data.txt", "x\n");
    let r = exec_json(&env, "x = open('data.txt').read()\nprint(len(x))");
    assert_eq!(
        r["files"],
        json!({"created": [], "modified": [], "deleted": [], "truncated": false, "read": ["data.txt"]}),
        "{r:#}"
    );
    let r = exec_json(&env, "print(1)");
    assert!(r.get("files").is_none(), "{r:#}");
    let out = env.run(&["exec", "print(1)"]);
    assert!(!out.stderr.contains("file"), "{}", out.stderr);
}

#[test]
fn changes_made_by_the_terminal_tool_count() {
    let env = Env::fast();
    let r = exec_json(
        &env,
        "from toolcell_tools import terminal\n\
         r = terminal('mkdir -p logs && echo hi > logs/t.txt && echo 12345 > made_by_shell.txt')\n\
         print(r.get('exit_code'))",
    );
    assert_eq!(r["tool_calls_made"], 1, "{r:#}");
    let f = &r["files"];
    assert_eq!(
        paths(f, "created"),
        ["logs/t.txt", "made_by_shell.txt"],
        "{f:#}"
    );
    assert_eq!(bytes_of(f, "created", "made_by_shell.txt"), 6);
}

#[test]
fn ignored_paths_are_not_reported() {
    let env = Env::fast();
    env.write(".gitignore", "build/\n*.log\n");
    env.write("venv/pyvenv.cfg", "home = /usr/bin\n");
    let r = exec_json(
        &env,
        "import os\n\
         for d in ['build', '__pycache__', '.git/objects', 'node_modules/m', 'venv/lib']:\n\
         \x20   os.makedirs(d, exist_ok=True)\n\
         \x20   open(os.path.join(d, 'f'), 'w').write('x')\n\
         open('run.log', 'w').write('log')\n\
         print('ok')",
    );
    assert!(r.get("files").is_none(), "ignored paths reported: {r:#}");
    // A visible file next to them is.
    let r = exec_json(&env, "open('build/again', 'w'); open('seen.txt', 'w')");
    assert_eq!(paths(&r["files"], "created"), ["seen.txt"], "{r:#}");
}

#[test]
fn sixty_files_are_cut_to_fifty_with_counts() {
    let env = Env::fast();
    let r = exec_json(
        &env,
        "import os\nos.mkdir('many')\n\
         for i in range(60):\n    open(f'many/f{i:02}.txt', 'w').write('x' * i)",
    );
    let f = &r["files"];
    let created = paths(f, "created");
    assert_eq!(created.len(), 50, "{f:#}");
    assert_eq!(created[0], "many/f00.txt");
    assert_eq!(created[49], "many/f49.txt");
    assert_eq!(f["truncated"], true);
    assert_eq!(
        f["counts"],
        json!({"created": 60, "modified": 0, "deleted": 0})
    );
    let out = env.run(&["exec", "import shutil; shutil.rmtree('many')"]);
    out.expect_code(0);
    assert!(out.stderr.contains("60 files deleted"), "{}", out.stderr);
}

#[test]
fn a_huge_directory_is_scanned_only_up_to_the_bound_and_the_result_says_so() {
    let env = Env::fast();
    let big = env.path().join("big");
    std::fs::create_dir(&big).unwrap();
    for i in 0..30_000 {
        std::fs::File::create(big.join(format!("e{i:05}"))).unwrap();
    }
    let t0 = Instant::now();
    let r = exec_json(&env, "open('new.txt', 'w').write('n')");
    let took = t0.elapsed();
    let warning = r["warning"].as_str().unwrap_or_default();
    assert!(
        warning.contains("more than 20000 entries") && warning.contains("watch_max_entries"),
        "{r:#}"
    );
    assert_eq!(r["files"]["scan_stopped"], true, "{r:#}");
    // The root was listed (and watched) but not finished: the new file at
    // the top is still seen.
    assert_eq!(paths(&r["files"], "created"), ["new.txt"], "{r:#}");
    assert!(took < Duration::from_secs(20), "{took:?}");

    // A smaller bound (a config key) stops earlier; the status line of a
    // cell that changed something says the scan stopped.
    let env2 = Env::with_config(&format!("{FAST_CONFIG}\n[output]\nwatch_max_entries = 3\n"));
    for i in 0..10 {
        env2.write(&format!("d/f{i}"), "x");
    }
    let r = exec_json(&env2, "print(1)");
    assert!(
        r["warning"]
            .as_str()
            .is_some_and(|w| w.contains("more than 3 entries")),
        "{r:#}"
    );
}

/// A tree bigger than `watch_max_entries`: the scan stops, yet a session's
/// later cells still report what inotify saw in the directories it
/// reached (a file created at the top), and every result — not only the
/// first — says the report may be incomplete.
#[test]
fn a_stopped_scan_still_reports_what_inotify_saw_and_says_so_every_cell() {
    let env = Env::with_config(&format!(
        "{FAST_CONFIG}\n[output]\nwatch_max_entries = 200\n"
    ));
    for d in 0..10 {
        for f in 0..40 {
            env.write(&format!("d{d}/f{f}.txt"), "x");
        }
    }
    env.write("d3/old.txt", "old");
    let mut s = Serve::start(&env, &[]);
    let mut run = |id: i64, code: &str| -> Value {
        let msg = s.call(id, "execute", json!({"session": "big", "code": code}));
        let r = msg["result"].clone();
        assert_eq!(r["status"], "success", "{msg:#}");
        r
    };
    let r1 = run(1, "open('before.txt', 'w').write('b')");
    let r2 = run(2, "open('after.txt', 'w').write('aa')");
    let r3 = run(3, "x = 1");
    let r4 = run(
        4,
        "import os\nos.remove('before.txt')\nopen('after.txt', 'a').write('more')",
    );
    for (i, r) in [&r1, &r2, &r3, &r4].into_iter().enumerate() {
        let f = &r["files"];
        assert_eq!(f["scan_stopped"], true, "cell {}: {r:#}", i + 1);
        let w = r["warning"].as_str().unwrap_or_default();
        assert!(
            w.contains("may be incomplete") && w.contains("watch_max_entries"),
            "cell {}: {r:#}",
            i + 1
        );
    }
    assert!(
        r1["warning"]
            .as_str()
            .unwrap()
            .contains("more than 200 entries")
    );
    assert_eq!(paths(&r1["files"], "created"), ["before.txt"], "{r1:#}");
    assert_eq!(paths(&r2["files"], "created"), ["after.txt"], "{r2:#}");
    assert_eq!(bytes_of(&r2["files"], "created", "after.txt"), 2);
    // Nothing changed: empty lists, still marked.
    for kind in ["created", "modified", "deleted"] {
        assert!(paths(&r3["files"], kind).is_empty(), "{r3:#}");
    }
    assert_eq!(paths(&r4["files"], "deleted"), ["before.txt"], "{r4:#}");
    assert_eq!(paths(&r4["files"], "modified"), ["after.txt"], "{r4:#}");
    assert_eq!(bytes_of(&r4["files"], "modified", "after.txt"), 6);
}

/// In a tree over `watch_max_entries`, a directory the cell makes is
/// reported whole (all in it is new), and a report known to miss changes
/// says so with `truncated` and counts.
#[test]
fn a_stopped_scan_reports_the_files_of_a_new_directory() {
    let env = Env::with_config(&format!(
        "{FAST_CONFIG}\n[output]\nwatch_max_entries = 200\n"
    ));
    for d in 0..10 {
        for f in 0..40 {
            env.write(&format!("d{d}/f{f}.txt"), "x");
        }
    }
    let mut s = Serve::start(&env, &[]);
    let mut run = |id: i64, code: &str| -> Value {
        let msg = s.call(id, "execute", json!({"session": "big", "code": code}));
        let r = msg["result"].clone();
        assert_eq!(r["status"], "success", "{msg:#}");
        r
    };
    run(1, "x = 1");
    let r = run(
        2,
        "import os\nos.makedirs('results/csv')\n\
         for i in range(3):\n    open(f'results/csv/r{i}.csv', 'w').write('a,b\\n')\n\
         open('results/summary.txt', 'w').write('ok')",
    );
    assert_eq!(
        paths(&r["files"], "created"),
        [
            "results/csv/r0.csv",
            "results/csv/r1.csv",
            "results/csv/r2.csv",
            "results/summary.txt"
        ],
        "{r:#}"
    );
    assert_eq!(bytes_of(&r["files"], "created", "results/csv/r1.csv"), 4);
    assert_eq!(r["files"]["scan_stopped"], true, "{r:#}");
    // A virtualenv the cell makes is not reported; a directory removed and
    // made again is walked like a new one.
    let r = run(
        4,
        "import os, shutil\nos.makedirs('venv2/lib')\n\
         open('venv2/pyvenv.cfg', 'w').write('home = /usr\\n')\n\
         open('venv2/lib/site.py', 'w').write('x')\n\
         shutil.rmtree('d0')\nos.makedirs('d0')\nopen('d0/fresh.txt', 'w').write('new')",
    );
    let created = paths(&r["files"], "created");
    assert!(created.iter().all(|p| !p.starts_with("venv2")), "{r:#}");
    assert!(created.contains(&"d0/fresh.txt".to_string()), "{r:#}");
    // A new directory with more than the scan's bound: the report is cut
    // and says so.
    let r = run(
        5,
        "import os\nos.makedirs('many')\n\
         for i in range(300):\n    open(f'many/f{i:03}.txt', 'w').write('x')",
    );
    let f = &r["files"];
    assert_eq!(f["truncated"], true, "{r:#}");
    assert_eq!(paths(f, "created").len(), 50, "{r:#}");
    assert!(
        paths(f, "created").iter().all(|p| p.starts_with("many/f")),
        "{r:#}"
    );
    let counted = f["counts"]["created"].as_u64().unwrap();
    assert!((50..=300).contains(&counted), "{r:#}");
}

#[test]
fn watch_files_false_turns_it_off() {
    let env = Env::with_config(&format!("{FAST_CONFIG}\n[output]\nwatch_files = false\n"));
    let r = exec_json(&env, "open('new.txt', 'w').write('x')");
    assert!(r.get("files").is_none(), "{r:#}");
    let bad = Env::with_config("[output]\nwatch_max_entries = 0\n");
    let out = bad.run(&["exec", "print(1)"]);
    out.expect_code(2);
    assert!(out.stderr.contains("watch_max_entries"), "{}", out.stderr);
}

/// One session over `serve`: the watcher is reused between cells; tools'
/// writes count; the journal gets the column; history and export show it.
#[test]
fn serve_session_history_and_export_carry_the_changes() {
    let env = Env::fast();
    env.write("notes.md", "# notes\n");
    let mut s = Serve::start(&env, &[]);
    let run = |s: &mut Serve, id: i64, code: &str| -> Value {
        let msg = s.call(id, "execute", json!({"session": "fs", "code": code}));
        let r = msg["result"].clone();
        assert_eq!(r["status"], "success", "{msg:#}");
        r
    };
    let r1 = run(&mut s, 1, "open('a.csv', 'w').write('1,2,3\\n')");
    assert_eq!(paths(&r1["files"], "created"), ["a.csv"], "{r1:#}");
    // Nothing changed: no field (the scan after the last cell still holds).
    let r2 = run(&mut s, 2, "x = 1");
    assert!(r2.get("files").is_none(), "{r2:#}");
    // Between cells someone else edits a file: not this cell's doing.
    env.write("notes.md", "# notes, edited outside\n");
    let r3 = run(
        &mut s,
        3,
        "from toolcell_tools import write_file, patch\n\
         write_file('b.txt', 'bee')\n\
         patch('a.csv', old_string='1,2,3', new_string='4,5,6,7')",
    );
    let f3 = &r3["files"];
    assert_eq!(paths(f3, "created"), ["b.txt"], "{f3:#}");
    assert_eq!(paths(f3, "modified"), ["a.csv"], "{f3:#}");
    assert_eq!(bytes_of(f3, "modified", "a.csv"), 8);
    let r4 = run(&mut s, 4, "import os; os.remove('b.txt')");
    assert_eq!(paths(&r4["files"], "deleted"), ["b.txt"], "{r4:#}");
    s.close_stdin();
    assert!(s.wait(LIMIT).success());

    let out = env.run(&["history", "--json", "--session", "fs"]);
    out.expect_code(0);
    let rows: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[0]["files"]["created"][0]["path"], "a.csv");
    assert!(rows[1].get("files").is_none(), "{:#}", rows[1]);
    assert_eq!(rows[2]["files"], r3["files"]);

    let table = env.run(&["history", "--session", "fs"]);
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert!(lines[0].contains("files"), "{}", table.stdout);
    assert!(lines[1].contains("+1 "), "{}", table.stdout);
    assert!(lines[3].contains("+1 ~1"), "{}", table.stdout);
    assert!(lines[4].contains("-1 "), "{}", table.stdout);

    let md = env.run(&["export", "--session", "fs", "--format", "md"]);
    md.expect_code(0);
    assert!(
        md.stdout
            .contains("**Files changed** (1 file created, 1 modified): created `b.txt` (3 bytes); modified `a.csv` (8 bytes)."),
        "{}",
        md.stdout
    );
    let nb = env.run(&["export", "--session", "fs"]);
    let nb: Value = serde_json::from_str(&nb.stdout).unwrap();
    let notes: Vec<&Value> = nb["cells"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"].as_str().is_some_and(|id| id.starts_with("files-")))
        .collect();
    assert_eq!(notes.len(), 3, "{nb:#}");
}

#[test]
fn mcp_text_has_one_files_line() {
    let env = Env::fast();
    let mut s = Serve::start_command(&env, "mcp", &[]);
    s.request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "raw", "version": "0"}}),
    );
    let (init, _) = s.until_id(&json!(1), LIMIT);
    assert_eq!(init["result"]["serverInfo"]["name"], "toolcell", "{init}");
    s.send_raw(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    s.request(
        2,
        "tools/call",
        json!({"name": "execute_code", "arguments": {
            "code": "import os\nos.mkdir('o')\nfor i in range(7): open(f'o/{i}.txt', 'w')"}}),
    );
    let (msg, _) = s.until_id(&json!(2), LIMIT);
    let text = msg["result"]["content"][0]["text"].as_str().unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("files:")).collect();
    assert_eq!(
        lines,
        ["files: created o/0.txt, o/1.txt, o/2.txt, o/3.txt, o/4.txt (+2 more)"],
        "{text}"
    );
    assert_eq!(
        msg["result"]["structuredContent"]["files"]["created"]
            .as_array()
            .unwrap()
            .len(),
        7
    );
    s.request(
        3,
        "tools/call",
        json!({"name": "execute_code", "arguments": {"code": "print(2)"}}),
    );
    let (msg, _) = s.until_id(&json!(3), LIMIT);
    let text = msg["result"]["content"][0]["text"].as_str().unwrap();
    assert!(!text.contains("files:"), "{text}");
    // What a cell read is on the same line.
    s.request(
        4,
        "tools/call",
        json!({"name": "execute_code", "arguments": {
            "code": "for i in range(7): open(f'o/{i}.txt').read()"}}),
    );
    let (msg, _) = s.until_id(&json!(4), LIMIT);
    let text = msg["result"]["content"][0]["text"].as_str().unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("files:")).collect();
    assert_eq!(
        lines,
        ["files: read o/0.txt, o/1.txt, o/2.txt, o/3.txt, o/4.txt (+2 more)"],
        "{text}"
    );
    s.close_stdin();
    s.wait(LIMIT);
}

#[test]
fn a_strict_mode_kernel_reports_changes_in_its_own_directory() {
    let env = Env::fast();
    env.write("project.txt", "p");
    let out = env.run(&[
        "exec",
        "--json",
        "--mode",
        "strict",
        "import os\nopen('scratch.txt', 'w').write('abc')\nprint(os.getcwd())",
    ]);
    let r = out.json();
    assert_eq!(r["status"], "success", "{r:#}");
    assert_eq!(paths(&r["files"], "created"), ["scratch.txt"], "{r:#}");
    assert_eq!(bytes_of(&r["files"], "created", "scratch.txt"), 3);
}

#[test]
fn what_a_python_cell_read_is_listed_once_each_in_first_read_order() {
    let env = Env::fast();
    env.write("data/orders.csv", "id,total\n1,120\n2,35.5\n");
    env.write("notes.txt", "n\n");
    // Not under /tmp: a sandboxed kernel's /tmp is its own.
    let outside = tempfile::NamedTempFile::new_in(crate::outside_tmp::outside_tmp()).unwrap();
    std::fs::write(outside.path(), "elsewhere\n").unwrap();
    let outside = outside.path().to_str().unwrap().to_string();
    let r = exec_json(
        &env,
        &format!(
            "import csv, json\n\
             rows = list(csv.reader(open('data/orders.csv')))\n\
             for _ in range(10000):\n    open('notes.txt').read()\n\
             open({outside:?}).read()\n\
             open('made.txt', 'w').write('m')\n\
             open('made.txt').read()\n\
             text = \"open('named_only.txt')\"\n\
             print(len(rows))"
        ),
    );
    assert_eq!(r["output"], "3\n");
    let files = &r["files"];
    assert_eq!(
        files["read"],
        json!(["data/orders.csv", "notes.txt", outside, "made.txt"]),
        "{files:#}"
    );
    // Read after it was written: in both lists.
    assert_eq!(paths(files, "created"), ["made.txt"]);
    assert!(files.get("counts").is_none(), "{files:#}");

    // The status line names the first read and counts the rest.
    let out = env.run(&["exec", "print(open('data/orders.csv').read().count(','))"]);
    out.expect_code(0);
    assert!(
        out.stderr.contains(" · read data/orders.csv\n"),
        "{}",
        out.stderr
    );

    // Sixty files: fifty listed, then truncated with the count.
    let r = exec_json(
        &env,
        "import os\nos.makedirs('many')\n\
         for i in range(60):\n    open('many/f%02d' % i, 'w').close()\n\
         for i in range(60):\n    open('many/f%02d' % i).close()",
    );
    let files = &r["files"];
    let read = files["read"].as_array().unwrap();
    assert_eq!(read.len(), 50);
    assert_eq!(read[0], "many/f00");
    assert_eq!(read[49], "many/f49");
    assert_eq!(files["truncated"], true);
    assert_eq!(files["counts"]["read"], 60, "{files:#}");

    // Nothing read: no `read` key.
    let r = exec_json(&env, "x = 1 + 1");
    assert!(r.get("files").is_none(), "{r:#}");
}

#[test]
fn reads_reach_the_journal_history_and_the_notebook() {
    let env = Env::fast();
    env.write("data.csv", "a\n1\n");
    let out = env.run(&[
        "exec",
        "--session",
        "j",
        "print(open('data.csv').read().splitlines()[1])",
    ]);
    out.expect_code(0);
    assert!(out.stderr.contains(" · read data.csv"), "{}", out.stderr);
    let history = env.run(&["history", "--session", "j"]);
    history.expect_code(0);
    assert!(history.stdout.contains(" r1 "), "{}", history.stdout);
    let json = env.run(&["history", "--session", "j", "--json"]);
    let row: Value = serde_json::from_str(json.stdout.lines().next().unwrap()).unwrap();
    assert_eq!(row["files"]["read"], json!(["data.csv"]), "{row:#}");
    let nb = env.path().join("j.ipynb");
    env.run(&["export", "--session", "j", "-o", nb.to_str().unwrap()])
        .expect_code(0);
    let nb: Value = serde_json::from_str(&std::fs::read_to_string(&nb).unwrap()).unwrap();
    let cell = nb["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["cell_type"] == "code")
        .unwrap();
    assert_eq!(
        cell["metadata"]["toolcell"]["files"]["read"],
        json!(["data.csv"]),
        "{cell:#}"
    );
    env.run(&["daemon", "stop"]).expect_code(0);
}

#[test]
fn files_host_tools_read_for_the_cell_are_listed_after_its_own() {
    let env = Env::fast();
    env.write("own.txt", "mine\n");
    env.write("via_tool.txt", "tool\n");
    env.write("src/a.py", "needle = 1\n");
    env.write("src/b.py", "nothing here\n");
    env.write("edit.txt", "old\n");
    let r = exec_json(
        &env,
        "open('own.txt').read()\n\
         read_file('via_tool.txt')\n\
         read_file('via_tool.txt')\n\
         search_files(pattern='needle', path='src')\n\
         patch(mode='replace', path='edit.txt', old_string='old', new_string='new')\n\
         search_files(pattern='*.py', target='files', path='src')",
    );
    assert_eq!(
        r["files"]["read"],
        json!(["own.txt", "via_tool.txt", "src/a.py", "edit.txt"]),
        "{:#}",
        r["files"]
    );
    assert_eq!(paths(&r["files"], "modified"), ["edit.txt"]);
}

#[test]
fn r_and_javascript_cells_list_what_host_tools_read_for_them() {
    let env = Env::fast();
    env.write("notes.txt", "n\n");
    for (lang, code) in [
        ("r", "x <- read_file(path = 'notes.txt')"),
        (
            "javascript",
            "const x = await read_file({path: 'notes.txt'});",
        ),
    ] {
        let out = env.run(&["exec", "--json", "--language", lang, code]);
        let r = out.json();
        assert_eq!(r["status"], "success", "{r:#}\n{}", out.stderr);
        assert_eq!(r["files"]["read"], json!(["notes.txt"]), "{lang}: {r:#}");
    }
}

#[test]
fn what_a_javascript_cell_read_through_fs_is_listed() {
    let env = Env::fast();
    env.write("a.txt", "a\n");
    env.write("b.json", "{\"b\": 1}\n");
    env.write("c.txt", "c\n");
    env.write("mod.js", "module.exports = 1;\n");
    let code = "const fs = require('fs');\n\
        for (let i = 0; i < 1000; i++) fs.readFileSync('a.txt', 'utf8');\n\
        JSON.parse(await require('fs/promises').readFile('b.json', 'utf8'));\n\
        fs.closeSync(fs.openSync('c.txt', 'r'));\n\
        fs.writeFileSync('w.txt', 'written');\n\
        fs.closeSync(fs.openSync('w2.txt', 'w'));\n\
        require('./mod.js');\n\
        const named = 'fs.readFileSync(\"never.txt\")';";
    let out = env.run(&["exec", "--json", "--language", "javascript", code]);
    let r = out.json();
    assert_eq!(r["status"], "success", "{r:#}\n{}", out.stderr);
    assert_eq!(
        r["files"]["read"],
        json!(["a.txt", "b.json", "c.txt"]),
        "{:#}",
        r["files"]
    );
}

#[test]
fn what_an_r_cell_read_through_its_connections_is_listed() {
    let env = Env::fast();
    env.write("a.txt", "a\n");
    env.write("b.csv", "x,y\n1,2\n");
    let code = "for (i in 1:100) x <- readLines('a.txt')\n\
        d <- read.csv('b.csv')\n\
        saveRDS(d, 'd.rds')\n\
        e <- readRDS('d.rds')\n\
        writeLines('w', 'w.txt')\n\
        s <- 'readLines(\"never.txt\")'\n\
        cat(nrow(e), '\\n')";
    let out = env.run(&["exec", "--json", "--language", "r", code]);
    let r = out.json();
    assert_eq!(r["status"], "success", "{r:#}\n{}", out.stderr);
    assert_eq!(r["output"], "1 \n", "{r:#}");
    assert_eq!(
        r["files"]["read"],
        json!(["a.txt", "b.csv", "d.rds"]),
        "{:#}",
        r["files"]
    );
}

#[test]
fn a_read_file_whose_name_is_not_utf8_is_listed_with_a_replacement_character() {
    let env = Env::fast();
    let r = exec_json(
        &env,
        "open(b'caf\\xe9.txt', 'wb').close()\nopen(b'caf\\xe9.txt', 'rb').close()\nprint('ok')",
    );
    assert_eq!(r["output"], "ok\n");
    assert_eq!(r["files"]["read"], json!(["caf\u{fffd}.txt"]), "{r:#}");
}
