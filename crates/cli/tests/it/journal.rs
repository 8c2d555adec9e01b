//! The journal through the real binary: `serve` and the daemon
//! (`exec --session`) record every cell by default, a one-shot `exec` only
//! when `[journal] enabled = true`; `history` and `export` read it (also
//! while the daemon is writing); the exported notebook passes the
//! `nbformat` package's validator and embeds figures as `image/png`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::{Env, FAST_CONFIG, Serve, eventually};
use base64::Engine as _;
use serde_json::{Value, json};

/// `history --json` (JSON Lines) as values.
fn history(env: &Env, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["history", "--json", "--limit", "0"];
    all.extend_from_slice(args);
    let out = env.run(&all);
    out.expect_code(0);
    out.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Polls `history --session S` until it has `n` rows (the daemon writes
/// after it answered).
fn history_of(env: &Env, session: &str, n: usize) -> Vec<Value> {
    let mut rows = Vec::new();
    let ok = eventually(Duration::from_secs(20), || {
        rows = history(env, &["--session", session]);
        rows.len() >= n
    });
    assert!(
        ok,
        "history of {session} has {} rows, want {n}: {rows:#?}",
        rows.len()
    );
    rows
}

#[test]
fn serve_journals_every_cell_and_history_shows_it() {
    let env = Env::fast();
    std::fs::write(env.path().join("notes.txt"), "hello\n").unwrap();
    let mut s = Serve::start(&env, &[]);
    let a = s.call(
        1,
        "execute",
        json!({"code": "print(read_file('notes.txt')['content'], end='')", "session": "s1"}),
    );
    assert_eq!(a["result"]["status"], "success", "{a}");
    let b = s.call(
        2,
        "execute",
        json!({"code": "import sys\nprint('warn', file=sys.stderr)\nundefined_name", "session": "s1"}),
    );
    assert_eq!(b["result"]["status"], "error", "{b}");
    s.call(3, "execute", json!({"code": "1", "session": "s2"}));
    s.close_stdin();
    assert!(s.wait(Duration::from_secs(30)).success());

    let rows = history(&env, &["--session", "s1"]);
    assert_eq!(rows.len(), 2, "{rows:#?}");
    assert_eq!(rows[0]["session"], "s1");
    assert_eq!(rows[0]["status"], "success");
    assert_eq!(rows[0]["output"], a["result"]["output"]);
    assert_eq!(rows[0]["execution_count"], 1);
    assert_eq!(rows[0]["kernel_id"], a["result"]["kernel"]["id"]);
    assert_eq!(rows[0]["tool_calls"][0]["tool"], "read_file");
    assert_eq!(rows[0]["tool_calls"][0]["outcome"], "ok");
    assert_eq!(rows[1]["status"], "error");
    assert_eq!(rows[1]["output"], b["result"]["output"]);
    assert_eq!(rows[1]["error"], b["result"]["error"]);
    assert!(rows[1]["started_at"].as_f64().unwrap() >= rows[0]["finished_at"].as_f64().unwrap());

    // Every session, and the newest N.
    assert_eq!(history(&env, &[]).len(), 3);
    let last = env.run(&["history", "--json", "--limit", "1"]);
    assert_eq!(last.stdout.lines().count(), 1);
    assert!(last.stdout.contains("\"s2\""), "{}", last.stdout);

    // The table: one header and one line per cell, the code's first line.
    let table = env.run(&["history", "--session", "s1"]);
    table.expect_code(0);
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", table.stdout);
    assert!(lines[0].contains("status") && lines[0].contains("code"));
    assert!(lines[1].contains("success") && lines[1].contains("print(read_file"));
    assert!(lines[2].contains("error") && lines[2].contains("import sys…"));
}

#[test]
fn one_shot_exec_journals_only_when_asked() {
    let env = Env::fast();
    env.run(&["exec", "print(1)"]).expect_code(0);
    assert!(history(&env, &[]).is_empty());
    let none = env.run(&["history"]);
    assert!(none.stderr.contains("no cells"), "{}", none.stderr);

    let on = Env::with_config(&format!(
        "{FAST_CONFIG}\n[journal]\nenabled = true\npath = \"j/cells.db\"\n"
    ));
    on.run(&["exec", "print(2)"]).expect_code(0);
    let rows = history(&on, &[]);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["output"], "2\n");
    assert!(on.path().join("j/cells.db").exists());

    let off = Env::with_config(&format!("{FAST_CONFIG}\n[journal]\nenabled = false\n"));
    let mut s = Serve::start(&off, &[]);
    s.call(1, "execute", json!({"code": "1"}));
    s.close_stdin();
    s.wait(Duration::from_secs(30));
    assert!(history(&off, &[]).is_empty());

    let bad = Env::with_config("[journal]\nenabled = \"yes\"\n");
    let out = bad.run(&["history"]);
    out.expect_code(2);
    assert!(out.stderr.contains("journal.enabled"), "{}", out.stderr);
}

/// A cell that stands in for matplotlib (not installed here): a
/// `matplotlib.pyplot` module whose one open figure saves a real 1x1 PNG,
/// which the runner's figure capture finds at the end of the cell.
const FIGURE_CELL: &str = r#"
import sys, types, zlib, struct
def _chunk(kind, data):
    body = kind + data
    return struct.pack('>I', len(data)) + body + struct.pack('>I', zlib.crc32(body) & 0xffffffff)
PNG = (b'\x89PNG\r\n\x1a\n' + _chunk(b'IHDR', struct.pack('>IIBBBBB', 1, 1, 8, 2, 0, 0, 0))
       + _chunk(b'IDAT', zlib.compress(b'\x00\xff\x00\x00')) + _chunk(b'IEND', b''))
class _Figure:
    def savefig(self, path, format=None):
        with open(path, 'wb') as f:
            f.write(PNG)
_figs = {1: _Figure()}
plt = types.ModuleType('matplotlib.pyplot')
plt.get_fignums = lambda: list(_figs)
plt.figure = lambda num=None: _figs[num]
plt.close = lambda num=None: _figs.pop(num, None)
sys.modules['matplotlib.pyplot'] = plt
print('drew a figure')
"#;

#[test]
fn exec_session_is_journaled_and_exports_a_valid_notebook_with_figures() {
    let env = Env::with_config(&format!(
        "{FAST_CONFIG}\n[guard]\ndeny = [\"forbidden_call\"]\n"
    ));
    let exec = |code: &str, extra: &[&str]| {
        let mut args = vec!["exec", "--session", "nb", "--json"];
        args.extend_from_slice(extra);
        args.push(code);
        let out = env.run(&args);
        out.json()
    };
    let r = exec("x = 6 * 7\nprint(x)", &[]);
    assert_eq!(r["status"], "success", "{r}");
    // history reads while the daemon (the writer) is still running.
    let rows = history_of(&env, "nb", 1);
    assert_eq!(rows[0]["output"], "42\n");

    let r = exec(
        "import sys\nprint('to stderr', file=sys.stderr)\n{}['missing']",
        &[],
    );
    assert_eq!(r["status"], "error");
    let r = exec("import time\ntime.sleep(30)", &["--timeout", "1"]);
    assert_eq!(r["status"], "timeout", "{r}");
    let r = exec("forbidden_call()", &[]);
    assert_eq!(r["status"], "refused");
    let fig = exec(FIGURE_CELL, &[]);
    assert_eq!(fig["status"], "success", "{fig}");
    let png_path = fig["display"][0]["path"].as_str().unwrap().to_string();
    let r = exec("print(x)", &["--reset"]);
    assert_eq!(r["status"], "error", "a reset kernel has no x: {r}");
    let rows = history_of(&env, "nb", 6);
    assert_eq!(
        rows.iter()
            .map(|r| r["status"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["success", "error", "timeout", "refused", "success", "error"]
    );
    assert_eq!(rows[4]["display"][0]["mime"], "image/png");

    // Exported while the daemon (and the kernel holding the figure) lives.
    let out = env.run(&["export", "--session", "nb"]);
    out.expect_code(0);
    let nb: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        (nb["nbformat"].clone(), nb["nbformat_minor"].clone()),
        (json!(4), json!(5))
    );
    assert_eq!(nb["metadata"]["kernelspec"]["name"], "python3");
    let cells = nb["cells"].as_array().unwrap();
    let code: Vec<&Value> = cells.iter().filter(|c| c["cell_type"] == "code").collect();
    assert_eq!(code.len(), 6);
    assert!(cells.iter().all(|c| c["id"].is_string()));
    assert_eq!(code[0]["execution_count"], 1);
    assert_eq!(code[0]["source"], "x = 6 * 7\nprint(x)");
    assert_eq!(
        code[3]["execution_count"],
        Value::Null,
        "a refused cell never ran"
    );
    let err = code[1]["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["output_type"] == "error")
        .unwrap();
    assert_eq!(err["ename"], "KeyError");
    assert_eq!(err["evalue"], "'missing'");
    assert!(err["traceback"].as_array().unwrap().len() > 1);
    let png = code[4]["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["output_type"] == "display_data")
        .unwrap_or_else(|| panic!("no display_data in {}", code[4]));
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(png["data"]["image/png"].as_str().unwrap())
        .unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
    assert!(bytes.ends_with(b"IEND\xaeB`\x82"), "{bytes:?}");
    // The reset removed the kernel's directory with the file: the journal
    // kept the bytes.
    assert!(!Path::new(&png_path).exists());
    let notes: String = cells
        .iter()
        .filter(|c| c["cell_type"] == "markdown")
        .map(|c| c["source"].as_str().unwrap())
        .collect();
    assert!(notes.contains("New kernel"), "{notes}");

    // nbformat itself accepts it.
    let file = env.path().join("nb.ipynb");
    env.run(&["export", "--session", "nb", "-o", file.to_str().unwrap()])
        .expect_code(0);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), out.stdout);
    if let Some(python) = nbformat_python() {
        let check = Command::new(&python)
            .args([
                "-c",
                "import sys, nbformat\nnb = nbformat.read(sys.argv[1], as_version=nbformat.NO_CONVERT)\nnbformat.validate(nb)\nprint('valid', nb.nbformat, nb.nbformat_minor)",
            ])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "nbformat rejected the notebook:\n{}",
            String::from_utf8_lossy(&check.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&check.stdout).trim(), "valid 4 5");
    }

    // The other formats.
    let py = env.run(&["export", "--session", "nb", "--format", "py"]);
    py.expect_code(0);
    // Six code cells and one note where the reset started a new kernel.
    assert_eq!(py.stdout.matches("# %% [").count(), 7, "{}", py.stdout);
    assert!(py.stdout.contains("# %% [1] success"), "{}", py.stdout);
    let md = env.run(&["export", "--session", "nb", "--format", "md"]);
    md.expect_code(0);
    assert!(
        md.stdout.contains("```python\nx = 6 * 7\nprint(x)\n```"),
        "{}",
        md.stdout
    );
    let bad = env.run(&["export", "--session", "nb", "--format", "docx"]);
    bad.expect_code(2);
    let none = env.run(&["export", "--session", "nobody"]);
    none.expect_code(1);
    assert!(none.stderr.contains("no cells"), "{}", none.stderr);
}

/// A Python with `nbformat`, in a venv cached under the target dir; `None`
/// (after a loud SKIPPED line) only when no package index is reachable.
fn nbformat_python() -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("nbformat-venv");
    let python = venv.join("bin/python");
    let has = |p: &Path| {
        Command::new(p)
            .args(["-c", "import nbformat"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if has(&python) {
        return Some(python);
    }
    let made = Command::new("python3")
        .args(["-m", "venv", "--clear"])
        .arg(&venv)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "python3 -m venv failed: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let pip = Command::new(&python)
        .args(["-m", "pip", "install", "-q", "nbformat"])
        .output()
        .unwrap();
    if !pip.status.success() {
        let err = String::from_utf8_lossy(&pip.stderr);
        let offline = [
            "No matching distribution",
            "Could not find a version",
            "NewConnectionError",
            "Max retries exceeded",
            "Temporary failure in name resolution",
            "Network is unreachable",
            "ConnectTimeout",
            "ReadTimeout",
        ]
        .iter()
        .any(|s| err.contains(s));
        assert!(offline, "pip install nbformat failed:\n{err}");
        eprintln!(
            "SKIPPED: nbformat validation of the exported notebook: no Python package index is reachable ({})",
            err.lines().last().unwrap_or("")
        );
        return None;
    }
    assert!(has(&python), "nbformat installed but not importable");
    Some(python)
}

/// `export -o` holds what the journal holds: the file is 0600 under umask
/// 022, and an existing 0644 file it replaces becomes 0600 too.
#[test]
fn export_to_a_file_is_private_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let env = Env::fast();
    let r = env
        .run(&["exec", "--session", "mode", "--json", "print('private')"])
        .json();
    assert_eq!(r["status"], "success", "{r}");
    history_of(&env, "mode", 1);
    let export_to = |file: &Path| {
        let mut c = env.cmd();
        c.args(["export", "--session", "mode", "-o", file.to_str().unwrap()]);
        // SAFETY: umask is async-signal-safe.
        unsafe {
            c.pre_exec(|| {
                nix::libc::umask(0o022);
                Ok(())
            });
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;

    let fresh = env.path().join("fresh.ipynb");
    export_to(&fresh);
    assert_eq!(mode(&fresh), 0o600);
    assert!(std::fs::read_to_string(&fresh).unwrap().contains("private"));

    let old = env.path().join("old.ipynb");
    std::fs::write(&old, "x".repeat(1_000_000)).unwrap();
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).unwrap();
    export_to(&old);
    assert_eq!(mode(&old), 0o600);
    assert_eq!(
        std::fs::read(&old).unwrap(),
        std::fs::read(&fresh).unwrap(),
        "the old content is gone entirely"
    );
}
