//! The session journal with real kernels: every result the registry returns
//! is a row (success, error, timeout, refused, bad input), tool calls are
//! recorded per call, secrets never reach the database file, a full queue
//! drops rows instead of delaying anyone, and old schemas are migrated.
#![cfg(feature = "journal")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{Fixture, assert_success, show};
use toolcell_host::ExecuteRequest;
use toolcell_host::journal::{
    self, CellRecord, Format, HistoryQuery, Journal, JournalError, SCHEMA_VERSION,
};
use toolcell_kernel::Status;

const FLUSH: Duration = Duration::from_secs(20);

struct Journaled {
    f: Fixture,
    journal: Journal,
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Journaled {
    fn new() -> Self {
        Self::with(|_| {})
    }

    fn with(adjust: impl FnOnce(&mut toolcell_host::RegistryOptions)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data/toolcell/journal.db");
        let journal = Journal::open(&path).unwrap();
        let j = journal.clone();
        let f = Fixture::with(move |o| {
            o.journal = Some(j);
            o.interrupt_grace = Duration::from_secs(2);
            adjust(o);
        });
        Self {
            f,
            journal,
            path,
            _dir: dir,
        }
    }

    fn rows(&self, session: &str) -> Vec<CellRecord> {
        assert!(self.journal.flush(FLUSH), "journal did not flush");
        Journal::history(&self.path, &HistoryQuery::session(session)).unwrap()
    }
}

fn file_bytes(path: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        if let Ok(b) = std::fs::read(PathBuf::from(p)) {
            all.extend(b);
        }
    }
    all
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn success_error_timeout_and_refused_cells_are_rows_with_their_fields() {
    let j = Journaled::with(|o| {
        o.deny = vec![regex::Regex::new("forbidden_call").unwrap()];
    });
    let ok = j.f.run_as("s1", "x = 41\nprint(x + 1)").await;
    assert_success(&ok);
    let err = j.f.run_as("s1", "print('before')\n1/0").await;
    assert_eq!(err.status, Status::Error, "{}", show(&err));
    let slow =
        j.f.reg
            .execute(
                ExecuteRequest::new("import time\ntime.sleep(60)")
                    .owner("s1")
                    .timeout(Duration::from_millis(700)),
            )
            .await;
    assert_eq!(slow.status, Status::Timeout, "{}", show(&slow));
    let refused = j.f.run_as("s1", "forbidden_call()").await;
    assert_eq!(refused.status, Status::Refused);
    let bad =
        j.f.reg
            .execute(ExecuteRequest::new("1").owner("s1").cwd("/no/such/dir"))
            .await;
    assert_eq!(bad.status, Status::Error);
    j.f.run_as("other", "pass").await;

    let rows = j.rows("s1");
    assert_eq!(rows.len(), 5, "{rows:#?}");
    assert!(rows.iter().all(|r| r.session == "s1"));

    let r = &rows[0];
    assert_eq!(r.code, "x = 41\nprint(x + 1)");
    assert_eq!((r.status, r.exit_code), (Status::Success, 0));
    assert_eq!(r.output, "42\n");
    assert_eq!(r.kernel_id, ok.kernel.id);
    assert_eq!(r.execution_count, 1);
    assert_eq!(r.python, ok.kernel.python);
    assert_eq!(r.mode, "project");
    assert!(r.usage.is_some());
    assert!(r.finished_at >= r.started_at && r.started_at > 1.7e9);
    assert!(!r.reused);

    let r = &rows[1];
    assert_eq!((r.status, r.exit_code), (Status::Error, 1));
    assert_eq!(r.output, err.output);
    assert!(r.output.contains("ZeroDivisionError"));
    assert_eq!(r.error, err.error);
    assert_eq!(r.execution_count, 2);
    assert!(r.reused);

    let r = &rows[2];
    assert_eq!(r.status, Status::Timeout);
    assert_eq!(r.exit_code, -1);
    assert_eq!(r.error, slow.error);
    assert_eq!(r.state_kept, slow.kernel.state_kept);

    let r = &rows[3];
    assert_eq!(r.status, Status::Refused);
    assert_eq!(r.code, "forbidden_call()");
    assert!(r.error.as_deref().unwrap().contains("forbidden_call"));
    assert!(r.kernel_id.is_empty());

    let r = &rows[4];
    assert_eq!(r.status, Status::Error);
    assert!(r.error.as_deref().unwrap().contains("/no/such/dir"));

    // Every session, newest last, and a limit keeps the newest.
    let all = Journal::history(&j.path, &HistoryQuery::default()).unwrap();
    assert_eq!(all.len(), 6);
    assert_eq!(all.last().unwrap().session, "other");
    let last2 = Journal::history(
        &j.path,
        &HistoryQuery {
            session: Some("s1".into()),
            limit: 2,
        },
    )
    .unwrap();
    assert_eq!(last2, rows[3..].to_vec());
    j.f.reg.shutdown_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_are_recorded_with_names_and_outcomes() {
    let j = Journaled::new();
    std::fs::write(j.f.work().join("notes.txt"), "hello\n").unwrap();
    let r =
        j.f.run_as(
            "t",
            "print(read_file('notes.txt')['content'])\n\
             try:\n    read_file('missing.txt')\nexcept ToolError as e:\n    print('failed:', e)",
        )
        .await;
    assert_success(&r);
    assert_eq!(r.tool_calls_made, 2);
    let rows = j.rows("t");
    assert_eq!(rows.len(), 1);
    let calls = &rows[0].tool_calls;
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0].tool, "read_file");
    assert_eq!(calls[0].outcome, "ok");
    assert_eq!(calls[1].tool, "read_file");
    assert_eq!(calls[1].outcome, "tool_failed");
    assert!(calls.iter().all(|c| c.duration_seconds >= 0.0));
    assert_eq!(rows[0].tool_calls_made, 2);
    j.f.reg.shutdown_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_in_code_or_output_never_reaches_the_database_file() {
    let j = Journaled::new();
    // Typed into the code, and printed (built at run time, so the printed
    // value is not just an echo of the source).
    let token = "ghp_Zx8Kq2Lm4Np6Rs8Tv0Wx2Yz4Ab6Cd8Ef0Gh2";
    let code = format!(
        "typed = '{token}'\nbuilt = 'ghp_' + '{}'\nprint(built)\nprint(built == typed)\nraise ValueError(built)",
        &token[4..]
    );
    let r = j.f.run_as("sec", &code).await;
    assert_eq!(r.status, Status::Error, "{}", show(&r));
    assert!(r.output.contains("True"), "{}", show(&r));
    assert!(!r.output.contains(token));
    let rows = j.rows("sec");
    assert_eq!(rows.len(), 1);
    assert!(rows[0].code.contains("«redacted:"), "{}", rows[0].code);
    assert!(rows[0].output.contains("«redacted:"), "{}", rows[0].output);
    let bytes = file_bytes(&j.path);
    assert!(bytes.len() > 4096);
    assert!(
        contains(&bytes, b"redacted:"),
        "the row is not in the files read"
    );
    assert!(
        !contains(&bytes, token.as_bytes()),
        "the secret is in the journal files"
    );
    j.f.reg.shutdown_all().await;
}

#[test]
fn a_full_queue_drops_and_counts_rows_and_never_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let journal = Journal::with_capacity(&path, 1).unwrap();
    // Another connection holds the write lock: the writer is stuck on its
    // first row, the queue (one row) fills, and every further row must be
    // dropped — if `record` waited for room, this thread (which holds the
    // lock) would never get past the loop.
    let blocker = rusqlite::Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    for i in 0..200 {
        journal.record(CellRecord::new("q", format!("cell {i}")));
    }
    let dropped = journal.dropped();
    // Kept: the queue's one row plus the few the writer drained into its
    // batch before it blocked on the lock (timing decides how many).
    assert!(dropped >= 190, "only {dropped} of 200 rows were dropped");
    blocker.execute_batch("COMMIT").unwrap();
    assert!(journal.flush(FLUSH));
    let rows = Journal::history(&path, &HistoryQuery::session("q")).unwrap();
    assert_eq!(rows.len() as u64 + dropped + journal.failed(), 200);
    assert_eq!(rows[0].code, "cell 0");
}

#[test]
fn a_batch_of_many_commits_lands_whole_and_in_order() {
    // The writer commits a batch in short pieces (so a waiting kernel gets
    // the CPU between them): 200 rows recorded at once span several.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let journal = Journal::open(&path).unwrap();
    for i in 0..200 {
        journal.record(CellRecord::new("b", format!("cell {i}")));
    }
    assert!(journal.flush(FLUSH));
    let rows = Journal::history(&path, &HistoryQuery::session("b")).unwrap();
    let codes: Vec<String> = rows.into_iter().map(|r| r.code).collect();
    let want: Vec<String> = (0..200).map(|i| format!("cell {i}")).collect();
    assert_eq!(codes, want);
    assert_eq!((journal.dropped(), journal.failed()), (0, 0));
}

#[test]
fn files_are_private() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a/b/journal.db");
    let journal = Journal::open(&path).unwrap();
    journal.record(CellRecord::new("p", "1"));
    assert!(journal.flush(FLUSH));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&dir.path().join("a/b")), 0o700);
    assert_eq!(mode(&dir.path().join("a")), 0o700);
    let wal = dir.path().join("a/b/journal.db-wal");
    if wal.exists() {
        assert_eq!(mode(&wal), 0o600);
    }
}

/// The schema of version 1, as toolcell 0.1 wrote it before the kernel
/// lifecycle columns were added.
const V1: &str = "CREATE TABLE cells (
    id INTEGER PRIMARY KEY, owner TEXT NOT NULL, kernel_id TEXT NOT NULL,
    execution_count INTEGER NOT NULL, code TEXT NOT NULL, status TEXT NOT NULL,
    exit_code INTEGER NOT NULL, output TEXT NOT NULL, error TEXT, hint TEXT, warning TEXT,
    tool_calls_made INTEGER NOT NULL, cpu_seconds REAL, peak_rss_kb INTEGER,
    started_at REAL NOT NULL, finished_at REAL NOT NULL, duration_seconds REAL NOT NULL,
    mode TEXT NOT NULL, python TEXT NOT NULL);
CREATE INDEX cells_owner ON cells(owner, id);
CREATE TABLE tool_calls (cell_id INTEGER NOT NULL, seq INTEGER NOT NULL, tool TEXT NOT NULL,
    duration_seconds REAL NOT NULL, outcome TEXT NOT NULL, PRIMARY KEY (cell_id, seq));
CREATE TABLE display (cell_id INTEGER NOT NULL, seq INTEGER NOT NULL, mime TEXT NOT NULL,
    path TEXT NOT NULL, PRIMARY KEY (cell_id, seq));
INSERT INTO cells VALUES (1, 'old', 'k-1', 3, 'print(1)', 'success', 0, '1\n', NULL, NULL,
    NULL, 1, 0.01, 9000, 1700000000.0, 1700000000.5, 0.5, 'project', '3.11.7');
INSERT INTO tool_calls VALUES (1, 0, 'terminal', 0.25, 'ok');
PRAGMA user_version = 1;";

#[test]
fn a_version_1_database_is_migrated_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(V1)
        .unwrap();
    // Reading an old journal migrates it first.
    let rows = Journal::history(&path, &HistoryQuery::session("old")).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].output, "1\n");
    assert_eq!(rows[0].execution_count, 3);
    assert_eq!(rows[0].tool_calls[0].tool, "terminal");
    assert!(!rows[0].state_reset && !rows[0].ended);
    let version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    // And a writer adds rows with the new columns.
    let journal = Journal::open(&path).unwrap();
    let mut rec = CellRecord::new("old", "x");
    rec.state_reset = true;
    let files: toolcell_kernel::FilesChanged = serde_json::from_value(serde_json::json!({
        "created": [{"path": "out/a.csv", "bytes": 12}],
        "modified": [],
        "deleted": [{"path": "tmp.txt"}],
        "truncated": false
    }))
    .unwrap();
    rec.files = Some(files.clone());
    journal.record(rec);
    assert!(journal.flush(FLUSH));
    let rows = Journal::history(&path, &HistoryQuery::session("old")).unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows[1].state_reset);
    // The files column (v3): none for the old row, the list for the new one.
    assert_eq!(rows[0].files, None);
    assert_eq!(rows[1].files, Some(files));
}

#[test]
fn a_database_from_a_newer_toolcell_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE future (x); PRAGMA user_version = 99;")
        .unwrap();
    let err = Journal::open(&path).unwrap_err();
    assert!(
        matches!(err, JournalError::TooNew { found: 99, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("newer"), "{err}");
    let err = Journal::history(&path, &HistoryQuery::default()).unwrap_err();
    assert!(matches!(err, JournalError::TooNew { .. }), "{err}");
}

#[test]
fn reading_works_while_a_writer_has_the_database_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.db");
    let journal = Journal::open(&path).unwrap();
    for i in 0..3 {
        journal.record(CellRecord::new("live", format!("{i}")));
    }
    assert!(journal.flush(FLUSH));
    // The writer's connection is still open (WAL): a reader sees the rows.
    let rows = Journal::history(&path, &HistoryQuery::session("live")).unwrap();
    assert_eq!(rows.len(), 3);
    assert!(
        Journal::history(&dir.path().join("none.db"), &HistoryQuery::default())
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exported_notebook_has_code_stream_and_error_outputs() {
    let j = Journaled::new();
    j.f.run_as("nb", "print('hi')").await;
    j.f.run_as("nb", "import sys\nprint('warn', file=sys.stderr)\n{}['k']")
        .await;
    let r =
        j.f.reg
            .execute(ExecuteRequest::new("y = 1").owner("nb").reset(true))
            .await;
    assert!(r.kernel.state_reset);
    let rows = j.rows("nb");
    let nb: serde_json::Value =
        serde_json::from_str(&journal::export(&rows, Format::Ipynb)).unwrap();
    assert_eq!(nb["nbformat"], 4);
    assert_eq!(nb["nbformat_minor"], 5);
    let code: Vec<&serde_json::Value> = nb["cells"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["cell_type"] == "code")
        .collect();
    assert_eq!(code.len(), 3);
    assert_eq!(code[0]["source"], "print('hi')");
    assert_eq!(code[0]["execution_count"], 1);
    assert_eq!(code[0]["outputs"][0]["name"], "stdout");
    assert_eq!(code[0]["outputs"][0]["text"], "hi\n");
    let outs = code[1]["outputs"].as_array().unwrap();
    assert!(
        outs.iter()
            .any(|o| o["name"] == "stderr" && o["text"] == "warn\n"),
        "{outs:?}"
    );
    let e = outs.iter().find(|o| o["output_type"] == "error").unwrap();
    assert_eq!(e["ename"], "KeyError");
    assert_eq!(e["evalue"], "'k'");
    // The reset shows as a markdown cell before the third code cell.
    let md = nb["cells"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["cell_type"] == "markdown")
        .map(|c| c["source"].as_str().unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(md.contains("New kernel"), "{md}");
    let py = journal::export(&rows, Format::Py);
    assert_eq!(py.matches("# %% [").count(), 3 + 1, "{py}");
    let md = journal::export(&rows, Format::Md);
    assert!(md.contains("```python\nprint('hi')\n```"), "{md}");
    j.f.reg.shutdown_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cells_return_while_the_journal_cannot_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stuck.db");
    let journal = Journal::with_capacity(&path, 1).unwrap();
    let blocker = rusqlite::Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let j = journal.clone();
    let f = Fixture::with(move |o| o.journal = Some(j));
    // The writer is stuck on the lock; every cell still gets its result.
    // Each cell outlasts the writer's group-commit wait (20 ms), so its
    // first batch holds one row: one more fits the queue, the rest drop.
    for i in 0..4 {
        let r = f
            .run_as(
                "stuck",
                &format!("import time; time.sleep(0.06); print({i})"),
            )
            .await;
        assert_success(&r);
        assert_eq!(r.output, format!("{i}\n"));
    }
    assert!(journal.dropped() >= 2, "dropped {}", journal.dropped());
    blocker.execute_batch("COMMIT").unwrap();
    assert!(journal.flush(FLUSH));
    let rows = Journal::history(&path, &HistoryQuery::session("stuck")).unwrap();
    assert_eq!(
        rows.len() as u64 + journal.dropped() + journal.failed(),
        4,
        "{rows:#?}"
    );
    f.reg.shutdown_all().await;
}

#[test]
fn journal_config_keys_name_themselves_in_errors() {
    use toolcell_host::config::{Config, Switch};
    let c = Config::from_toml_str("[journal]\nenabled = false\npath = \"j.db\"\n", None).unwrap();
    assert_eq!(c.journal.enabled, Switch::Off);
    assert!(!c.journal.enabled.resolve(true));
    assert_eq!(c.journal_path(), PathBuf::from("j.db"));
    let c = Config::from_toml_str("[journal]\nenabled = \"auto\"\n", None).unwrap();
    assert!(c.journal.enabled.resolve(true) && !c.journal.enabled.resolve(false));
    let err = Config::from_toml_str("[journal]\nenabled = \"on\"\n", None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "journal.enabled: expected true, false or \"auto\", got \"on\""
    );
    let err = Config::from_toml_str("[journal]\nfile = \"x\"\n", None).unwrap_err();
    assert!(err.to_string().contains("journal.file"), "{err}");
    // Relative to the config file; the XDG data dir by default.
    let c = Config::from_toml_str(
        "[journal]\npath = \"db/j.db\"\n",
        Some(Path::new("/p/toolcell.toml")),
    )
    .unwrap();
    assert_eq!(c.journal_path(), PathBuf::from("/p/db/j.db"));
    let d = Config::default();
    let env = |name: &str| match name {
        "XDG_DATA_HOME" => Some("/xdg/data".into()),
        "HOME" => Some("/home/u".into()),
        _ => None,
    };
    assert_eq!(
        d.journal_path_with(env),
        PathBuf::from("/xdg/data/toolcell/journal.db")
    );
    let home_only = |name: &str| (name == "HOME").then(|| "/home/u".into());
    assert_eq!(
        d.journal_path_with(home_only),
        PathBuf::from("/home/u/.local/share/toolcell/journal.db")
    );
    let mut flag = Config::default();
    flag.set_override("journal.enabled", "true").unwrap();
    assert_eq!(flag.journal.enabled, Switch::On);
    assert!(
        flag.to_toml()
            .contains("[journal]\nenabled = true\npath = \"\"\n")
    );
}
