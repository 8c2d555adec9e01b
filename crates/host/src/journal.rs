//! The session journal: every cell a [`Registry`](crate::Registry) returns,
//! recorded durably in SQLite, for `toolcell history` and `toolcell export`.
//!
//! The journal sits at the very end of a cell's data flow, after the execute
//! result (docs/result.md) is built:
//!
//! ```text
//! Registry::execute ─▶ ExecuteResult ─▶ caller (serve, mcp, daemon, embedder)
//!                          │
//!                          └─▶ CellRecord ─▶ Journal::record ─(bounded queue)─▶ writer thread ─▶ SQLite (WAL)
//!                                                                                   │
//!                  toolcell history / export ◀── Journal::history (read-only) ◀─────┘
//! ```
//!
//! What it promises:
//!
//! - **It holds only cleaned text.** A [`CellRecord`] is built from the
//!   returned [`ExecuteResult`] — output already ANSI-stripped and redacted,
//!   cut to the caps — never from raw kernel bytes. The cell's *code* is run
//!   through the registry's redactor too, so a token pasted into a cell is
//!   stored as `«redacted:…»`, the same as in its output.
//! - **It never slows a cell.** [`Journal::record`] hands the row to one
//!   writer thread through a bounded queue with `try_send`: when the queue
//!   is full (a disk slower than the cells) the row is dropped and counted
//!   ([`Journal::dropped`]); the cell's result is never delayed. The writer
//!   wakes once per batch: it lets rows gather for a few milliseconds after
//!   the first, then writes them in a few short transactions (group
//!   commit), offering the CPU every 50 µs of work so that it never holds
//!   a kernel or client off a CPU for a whole batch.
//! - **It can be read while written.** The database is in WAL mode;
//!   [`Journal::history`] opens it read-only, so `toolcell history` works
//!   while a daemon or `serve` is recording.
//! - **The schema is versioned.** `PRAGMA user_version` holds the version;
//!   [`Journal::open`] applies the missing migrations in order and refuses a
//!   database written by a newer toolcell ([`JournalError::TooNew`]).
//! - The file is private: parent directories are created 0700, the database
//!   0600 (SQLite gives its `-wal`/`-shm` files the same mode).
//!
//! Timestamps (`started_at`, `finished_at`) are Unix seconds (UTC) with a
//! fraction, as `f64`; [`rfc3339`] renders one for people.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use toolcell_host::journal::{self, CellRecord, Format, HistoryQuery, Journal};
//! use toolcell_kernel::Status;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let tmp = tempfile::tempdir()?;
//! let path = tmp.path().join("toolcell/journal.db");
//! let journal = Journal::open(&path)?;
//!
//! // A registry with `RegistryOptions::journal` set does this for every cell.
//! let mut cell = CellRecord::new("chat-1", "print(6 * 7)");
//! cell.status = Status::Success;
//! cell.execution_count = 1;
//! cell.output = "42\n".into();
//! journal.record(cell);
//! assert!(journal.flush(Duration::from_secs(5)));
//!
//! let rows = Journal::history(&path, &HistoryQuery::session("chat-1"))?;
//! assert_eq!(rows.len(), 1);
//! assert_eq!(rows[0].output, "42\n");
//!
//! let notebook = journal::export(&rows, Format::Ipynb);
//! assert!(notebook.contains("\"nbformat_minor\": 5"));
//! # Ok(())
//! # }
//! ```

mod export;

pub use export::{Format, export};

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OpenFlags, params};
use serde::{Deserialize, Serialize};
use toolcell_redact::Redactor;
use toolcell_rpc::{CallOutcome, CallRecord};

use toolcell_kernel::result::{ExecuteResult, FilesChanged, Status, Usage};
use toolcell_kernel::sandbox::SandboxInfo;

/// Largest display file (a figure) whose bytes are kept in the journal (the
/// largest the host accepts at all, [`toolcell_kernel::figures::MAX_FIGURE_BYTES`]).
pub const MAX_DISPLAY_BYTES: u64 = toolcell_kernel::figures::MAX_FIGURE_BYTES;

/// Rows waiting for the writer, at most, by default.
pub const DEFAULT_QUEUE: usize = 1024;

/// Rows the writer puts in one transaction, at most.
const BATCH: usize = 256;

/// How the writer shares the CPU. A kernel the scheduler wakes on the
/// writer's CPU waits until the writer gives it up: kernels run under
/// SCHED_BATCH, and a batch task that wakes never preempts (a client may
/// wait too, when its deadline is not earlier). One batch (~100 rows after
/// 20 ms of a busy `serve`, ~0.5 ms of work with its commit) in one go was
/// the p99 of a warm cell on a quiet machine (issue 38). So the writer
/// offers the CPU after every
/// [`SLICE`] of work, and commits a batch [`ROWS_PER_COMMIT`] rows at a
/// time (a commit cannot be cut; one per batch left the p99 1.2× worse).
/// Offering after every row, and commits of 16, doubled the writer's CPU
/// on a busy machine, where each offer is taken (64 sessions: 6.9 → 12.8
/// µs a cell; this way 6.4).
const SLICE: Duration = Duration::from_micros(50);
const ROWS_PER_COMMIT: usize = 64;

/// Offers the CPU once per [`SLICE`] of the writer's work.
struct Pacer(Instant);

impl Pacer {
    fn offer(&mut self) {
        if self.0.elapsed() >= SLICE {
            std::thread::yield_now();
            self.0 = Instant::now();
        }
    }
}

/// How long the writer lets rows gather after the first of a batch, so a
/// busy host commits once per batch instead of once per cell (a cell's
/// result is never delayed by it, and [`Journal::flush`] cuts it short:
/// the daemon flushes before it answers an `exec --session`, so
/// `toolcell history` right after one reads its cell). 20 ms rather than
/// 4: the writer wakes for 0.03 cells' worth of rows instead of 0.19, and
/// a warm cell costs ~6 µs less CPU (issue 38). Another process reading
/// the journal while a `serve` runs sees its cells up to this much later.
const GROUP_WAIT: Duration = Duration::from_millis(20);

/// How long a connection waits for another one's lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Schema migrations, in order: `MIGRATIONS[i]` takes a database from
/// version `i` to `i + 1`. Append only; never edit a released step.
const MIGRATIONS: &[&str] = &[
    // v1: cells, their tool calls and display files.
    "CREATE TABLE cells (
        id INTEGER PRIMARY KEY,
        owner TEXT NOT NULL,
        kernel_id TEXT NOT NULL,
        execution_count INTEGER NOT NULL,
        code TEXT NOT NULL,
        status TEXT NOT NULL,
        exit_code INTEGER NOT NULL,
        output TEXT NOT NULL,
        error TEXT,
        hint TEXT,
        warning TEXT,
        tool_calls_made INTEGER NOT NULL,
        cpu_seconds REAL,
        peak_rss_kb INTEGER,
        started_at REAL NOT NULL,
        finished_at REAL NOT NULL,
        duration_seconds REAL NOT NULL,
        mode TEXT NOT NULL,
        python TEXT NOT NULL
    );
    CREATE INDEX cells_owner ON cells(owner, id);
    CREATE TABLE tool_calls (
        cell_id INTEGER NOT NULL REFERENCES cells(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        tool TEXT NOT NULL,
        duration_seconds REAL NOT NULL,
        outcome TEXT NOT NULL,
        PRIMARY KEY (cell_id, seq)
    );
    CREATE TABLE display (
        cell_id INTEGER NOT NULL REFERENCES cells(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        mime TEXT NOT NULL,
        path TEXT NOT NULL,
        PRIMARY KEY (cell_id, seq)
    );",
    // v2: the kernel's lifecycle, so an export can mark where a fresh
    // kernel started (reset, death, kill); display files' bytes, so an
    // export still has a figure after its kernel (and the file) is gone.
    "ALTER TABLE cells ADD COLUMN reused INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE cells ADD COLUMN state_reset INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE cells ADD COLUMN state_kept INTEGER;
    ALTER TABLE cells ADD COLUMN ended INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE display ADD COLUMN data BLOB;",
    // v3: the files a cell changed (the result's `files`, as JSON).
    "ALTER TABLE cells ADD COLUMN files TEXT;",
    // v4: what the kernel ran in (the result's `kernel.sandbox`, as JSON).
    "ALTER TABLE cells ADD COLUMN sandbox TEXT;",
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Why the journal could not be opened or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// A directory or the file could not be created.
    #[error("journal {}: {source}", .path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// SQLite refused an operation.
    #[error("journal {}: {source}", .path.display())]
    Sqlite {
        /// The database.
        path: PathBuf,
        /// The error.
        source: rusqlite::Error,
    },
    /// The database was written by a newer toolcell.
    #[error(
        "journal {}: schema version {found} is newer than this toolcell understands ({supported}); \
         upgrade toolcell or set [journal] path to another file",
        .path.display()
    )]
    TooNew {
        /// The database.
        path: PathBuf,
        /// Its `user_version`.
        found: i64,
        /// [`SCHEMA_VERSION`].
        supported: i64,
    },
}

/// One tool call of a cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The tool's name.
    pub tool: String,
    /// Dispatch to reply, seconds.
    pub duration_seconds: f64,
    /// `ok`, `cancelled`, or the failure code (`tool_failed`, `timeout`).
    pub outcome: String,
}

impl ToolCall {
    /// A call from the rpc server's report.
    pub fn from_record(c: &CallRecord) -> Self {
        let outcome = match c.outcome() {
            CallOutcome::Ok => "ok".to_string(),
            CallOutcome::Cancelled => "cancelled".to_string(),
            CallOutcome::Failed(code) => code.as_str().to_string(),
            _ => "unknown".to_string(),
        };
        Self {
            tool: c.tool().to_string(),
            duration_seconds: c.duration().as_secs_f64(),
            outcome,
        }
    }
}

/// A file the cell produced for display (a figure).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DisplayFile {
    /// MIME type (`image/png`).
    pub mime: String,
    /// Where the kernel saved it (gone once the kernel is).
    pub path: String,
    /// Its bytes, as the host read them through the checked descriptor
    /// just after the cell ([`toolcell_kernel::figures`]); the journal never opens
    /// the path itself. `None` when not kept. Not in JSON.
    #[serde(skip)]
    pub data: Option<std::sync::Arc<[u8]>>,
}

/// One journaled cell: what the caller got back, plus the code and who ran it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellRecord {
    /// Row id (set on rows read back; `None` before writing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    /// The session (owner / conversation id).
    pub session: String,
    /// The kernel's id (empty when no kernel was involved, e.g. refused).
    pub kernel_id: String,
    /// The cell's number in its kernel (0 when none ran).
    pub execution_count: u64,
    /// The code, redacted.
    pub code: String,
    /// How the cell ended.
    pub status: Status,
    /// As in the result.
    pub exit_code: i64,
    /// The cleaned output exactly as returned.
    pub output: String,
    /// As in the result.
    pub error: Option<String>,
    /// As in the result.
    pub hint: Option<String>,
    /// As in the result.
    pub warning: Option<String>,
    /// Each dispatched tool call, in order.
    pub tool_calls: Vec<ToolCall>,
    /// As in the result.
    pub tool_calls_made: u32,
    /// CPU and memory, when the runner reported them.
    pub usage: Option<Usage>,
    /// Files produced for display.
    pub display: Vec<DisplayFile>,
    /// Unix seconds (UTC) when `execute` was called.
    pub started_at: f64,
    /// Unix seconds (UTC) when the result was returned.
    pub finished_at: f64,
    /// As in the result.
    pub duration_seconds: f64,
    /// `project` or `strict`.
    pub mode: String,
    /// The interpreter's version.
    pub python: String,
    /// The kernel existed before this cell.
    pub reused: bool,
    /// The session had a kernel before whose state is gone.
    pub state_reset: bool,
    /// After a timeout or interrupt: whether the state survived.
    pub state_kept: Option<bool>,
    /// The kernel ended with this cell.
    pub ended: bool,
    /// As in the result: the files the cell changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<FilesChanged>,
    /// As in the result: what the kernel ran in (`kernel.sandbox`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxInfo>,
}

/// Unix seconds now.
pub fn unix_now() -> f64 {
    unix_seconds(SystemTime::now())
}

/// Unix seconds of `t` (0 before the epoch).
pub fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl CellRecord {
    /// An empty record for `code` in `session` (status `success`, times now).
    pub fn new(session: impl Into<String>, code: impl Into<String>) -> Self {
        let now = unix_now();
        Self {
            id: None,
            session: session.into(),
            kernel_id: String::new(),
            execution_count: 0,
            code: code.into(),
            status: Status::Success,
            exit_code: 0,
            output: String::new(),
            error: None,
            hint: None,
            warning: None,
            tool_calls: Vec::new(),
            tool_calls_made: 0,
            usage: None,
            display: Vec::new(),
            started_at: now,
            finished_at: now,
            duration_seconds: 0.0,
            mode: String::new(),
            python: String::new(),
            reused: false,
            state_reset: false,
            state_kept: None,
            ended: false,
            files: None,
            sandbox: None,
        }
    }

    /// The record of a returned result. `code` is redacted with `redactor`;
    /// everything else comes from `result` (already cleaned).
    pub fn from_result(
        session: &str,
        code: &str,
        result: &ExecuteResult,
        calls: &[CallRecord],
        started_at: SystemTime,
        redactor: &Redactor,
    ) -> Self {
        let k = &result.kernel;
        Self {
            id: None,
            session: session.to_string(),
            kernel_id: k.id.clone(),
            execution_count: k.execution_count,
            code: redactor.redact(code).into_owned(),
            status: result.status,
            exit_code: result.exit_code,
            output: result.output.clone(),
            error: result.error.clone(),
            hint: result.hint.clone(),
            warning: result.warning.clone(),
            tool_calls: calls.iter().map(ToolCall::from_record).collect(),
            tool_calls_made: result.tool_calls_made,
            usage: result.usage,
            display: result
                .display
                .iter()
                .map(|d| DisplayFile {
                    mime: d.mime.clone(),
                    path: d.path.clone(),
                    data: d.data().cloned(),
                })
                .collect(),
            started_at: unix_seconds(started_at),
            finished_at: unix_now(),
            duration_seconds: result.duration_seconds,
            mode: k.mode.clone(),
            python: k.python.clone(),
            reused: k.reused,
            state_reset: k.state_reset,
            state_kept: k.state_kept,
            ended: k.ended.unwrap_or(false),
            files: result.files.clone(),
            sandbox: k.sandbox.clone(),
        }
    }
}

/// Which rows [`Journal::history`] returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryQuery {
    /// Only this session (`None`: every session).
    pub session: Option<String>,
    /// The newest `limit` rows (0: all).
    pub limit: usize,
}

impl HistoryQuery {
    /// Every row of `session`.
    pub fn session(session: impl Into<String>) -> Self {
        Self {
            session: Some(session.into()),
            limit: 0,
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    /// Rows accepted by the queue.
    queued: u64,
    /// Rows the writer finished with (written or failed).
    done: u64,
    /// Someone waits for the queue ([`Journal::flush`], the last handle
    /// going): the writer writes at once instead of gathering a batch.
    urgent: bool,
}

#[derive(Debug, Default)]
struct Progress {
    counts: Mutex<Counts>,
    changed: Condvar,
}

impl Progress {
    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[derive(Debug)]
struct Shared {
    path: PathBuf,
    tx: SyncSender<CellRecord>,
    progress: Arc<Progress>,
    dropped: AtomicU64,
    failed: Arc<AtomicU64>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The last handle: give the writer a moment to finish the queue, so
        // a short-lived host (a one-shot `exec`) does not exit with rows
        // still queued. The sender is dropped right after, which ends it.
        let mut counts = self.progress.lock();
        counts.urgent = true;
        self.progress.changed.notify_all();
        let _ = self
            .progress
            .changed
            .wait_timeout_while(counts, Duration::from_secs(2), |c| c.done < c.queued);
    }
}

/// A handle on the journal: cheap to clone; the writer thread ends after the
/// last handle is dropped and the queue is written.
#[derive(Debug, Clone)]
pub struct Journal {
    shared: Arc<Shared>,
}

impl Journal {
    /// Opens (creating if needed) the journal at `path` with the default
    /// queue of [`DEFAULT_QUEUE`] rows, migrates it, and starts its writer.
    ///
    /// # Errors
    /// [`JournalError`] when the directory or file cannot be created, SQLite
    /// fails, or the database is from a newer toolcell.
    pub fn open(path: &Path) -> Result<Self, JournalError> {
        Self::with_capacity(path, DEFAULT_QUEUE)
    }

    /// [`Journal::open`] with a queue of `capacity` rows (at least 1).
    ///
    /// # Errors
    /// As [`Journal::open`].
    pub fn with_capacity(path: &Path, capacity: usize) -> Result<Self, JournalError> {
        let conn = open_rw(path)?;
        let (tx, rx) = std::sync::mpsc::sync_channel(capacity.max(1));
        let progress = Arc::new(Progress::default());
        let failed = Arc::new(AtomicU64::new(0));
        let writer = Writer {
            conn,
            path: path.to_path_buf(),
            progress: Arc::clone(&progress),
            failed: Arc::clone(&failed),
        };
        std::thread::Builder::new()
            .name("toolcell-journal".into())
            .spawn(move || writer.run(rx))
            .map_err(|source| JournalError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(Self {
            shared: Arc::new(Shared {
                path: path.to_path_buf(),
                tx,
                progress,
                dropped: AtomicU64::new(0),
                failed,
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Queues `rec` for writing. Never blocks: when the queue is full the
    /// row is dropped and counted in [`Journal::dropped`].
    pub fn record(&self, rec: CellRecord) {
        let mut counts = self.shared.progress.lock();
        match self.shared.tx.try_send(rec) {
            Ok(()) => counts.queued += 1,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                drop(counts);
                let n = self.shared.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                tracing::warn!(
                    dropped = n,
                    "journal queue full: a cell was not journaled (the disk is slower than the cells)"
                );
            }
        }
    }

    /// Rows dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Rows the writer could not write (SQLite errors; logged).
    pub fn failed(&self) -> u64 {
        self.shared.failed.load(Ordering::Relaxed)
    }

    /// Waits until every row queued before this call is written, at most
    /// `timeout`. Returns whether it got there.
    pub fn flush(&self, timeout: Duration) -> bool {
        let progress = &self.shared.progress;
        let mut counts = progress.lock();
        let target = counts.queued;
        if counts.done < target {
            counts.urgent = true;
            progress.changed.notify_all();
        }
        let (counts, _) = progress
            .changed
            .wait_timeout_while(counts, timeout, |c| c.done < target)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        counts.done >= target
    }

    /// Rows of the journal at `path`, oldest first (the newest `limit` when
    /// a limit is set). Opens the database read-only, so it works while
    /// another process writes; a missing file is an empty journal.
    ///
    /// # Errors
    /// [`JournalError`] when the file cannot be read or is from a newer
    /// toolcell.
    pub fn history(path: &Path, query: &HistoryQuery) -> Result<Vec<CellRecord>, JournalError> {
        if !path.exists() {
            return Ok(Vec::new());
        }
        let sql_err = sql_err(path);
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(&sql_err)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(&sql_err)?;
        let version = user_version(&conn).map_err(&sql_err)?;
        if version > SCHEMA_VERSION {
            return Err(JournalError::TooNew {
                path: path.to_path_buf(),
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        if version == 0 {
            return Ok(Vec::new());
        }
        if version < SCHEMA_VERSION {
            // Written by an older toolcell: bring it up to date first.
            drop(conn);
            drop(open_rw(path)?);
            return Self::history(path, query);
        }
        read_rows(&conn, query).map_err(&sql_err)
    }

    /// [`Journal::history`] of this journal's file (rows still queued are
    /// not included: [`flush`](Journal::flush) first).
    ///
    /// # Errors
    /// As [`Journal::history`].
    pub fn read(&self, query: &HistoryQuery) -> Result<Vec<CellRecord>, JournalError> {
        Self::history(self.path(), query)
    }
}

fn sql_err(path: &Path) -> impl Fn(rusqlite::Error) -> JournalError + '_ {
    move |source| JournalError::Sqlite {
        path: path.to_path_buf(),
        source,
    }
}

fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "user_version", |r| r.get(0))
}

/// Creates the parents (0700) and the file (0600), opens it read-write, sets
/// WAL mode and migrates.
fn open_rw(path: &Path) -> Result<Connection, JournalError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| JournalError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        // Ours, 0700, no link another user planted (the fallback location is
        // under the shared temp dir).
        toolcell_sys::private_dir::PrivateDir::ensure(parent).map_err(|e| {
            io(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                e.to_string(),
            ))
        })?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .map_err(io)?;
    let sql_err = sql_err(path);
    let mut conn = Connection::open(path).map_err(&sql_err)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(&sql_err)?;
    let _mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .map_err(&sql_err)?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(&sql_err)?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(&sql_err)?;
    migrate(&mut conn, path)?;
    Ok(conn)
}

/// Applies the migrations the database lacks, each in its own transaction.
fn migrate(conn: &mut Connection, path: &Path) -> Result<(), JournalError> {
    let sql_err = sql_err(path);
    loop {
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(&sql_err)?;
        let version = user_version(&tx).map_err(&sql_err)?;
        if version > SCHEMA_VERSION {
            return Err(JournalError::TooNew {
                path: path.to_path_buf(),
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        let Some(step) = usize::try_from(version)
            .ok()
            .and_then(|v| MIGRATIONS.get(v))
        else {
            return Ok(());
        };
        tx.execute_batch(step).map_err(&sql_err)?;
        tx.pragma_update(None, "user_version", version + 1)
            .map_err(&sql_err)?;
        tx.commit().map_err(&sql_err)?;
        tracing::info!(
            "journal {}: migrated to schema version {}",
            path.display(),
            version + 1
        );
    }
}

struct Writer {
    conn: Connection,
    path: PathBuf,
    progress: Arc<Progress>,
    failed: Arc<AtomicU64>,
}

impl Writer {
    fn run(mut self, rx: Receiver<CellRecord>) {
        while let Ok(first) = rx.recv() {
            // Group commit: rows that arrive within GROUP_WAIT share one
            // transaction. A wait that only a flush ends early, not a timed
            // receive: each send would wake a timed receive, and the point
            // is one wake-up per batch.
            {
                let counts = self.progress.lock();
                let _ = self
                    .progress
                    .changed
                    .wait_timeout_while(counts, GROUP_WAIT, |c| !c.urgent);
            }
            let mut batch = vec![first];
            while batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(r) => batch.push(r),
                    Err(_) => break,
                }
            }
            let n = batch.len() as u64;
            let mut pacer = Pacer(Instant::now());
            for rows in batch.chunks(ROWS_PER_COMMIT) {
                if let Err(e) = self.write(rows, &mut pacer) {
                    let lost = rows.len() as u64;
                    self.failed.fetch_add(lost, Ordering::Relaxed);
                    tracing::warn!(
                        "journal {}: {lost} cells could not be written: {e}",
                        self.path.display()
                    );
                }
                pacer.offer();
            }
            let mut counts = self.progress.lock();
            counts.done += n;
            if counts.done >= counts.queued {
                counts.urgent = false;
            }
            drop(counts);
            self.progress.changed.notify_all();
        }
    }

    fn write(&mut self, rows: &[CellRecord], pacer: &mut Pacer) -> rusqlite::Result<()> {
        let tx = self.conn.transaction()?;
        for r in rows {
            insert(&tx, r)?;
            pacer.offer();
        }
        tx.commit()
    }
}

fn opt_bool(b: Option<bool>) -> Option<i64> {
    b.map(i64::from)
}

fn insert(conn: &Connection, r: &CellRecord) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO cells (owner, kernel_id, execution_count, code, status, exit_code, output,
            error, hint, warning, tool_calls_made, cpu_seconds, peak_rss_kb, started_at,
            finished_at, duration_seconds, mode, python, reused, state_reset, state_kept, ended,
            files, sandbox)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
            ?19, ?20, ?21, ?22, ?23, ?24)",
    )?
    .execute(params![
        r.session,
        r.kernel_id,
        i64::try_from(r.execution_count).unwrap_or(i64::MAX),
        r.code,
        r.status.as_str(),
        r.exit_code,
        r.output,
        r.error,
        r.hint,
        r.warning,
        r.tool_calls_made,
        r.usage.map(|u| u.cpu_seconds),
        r.usage
            .map(|u| i64::try_from(u.peak_rss_kb).unwrap_or(i64::MAX)),
        r.started_at,
        r.finished_at,
        r.duration_seconds,
        r.mode,
        r.python,
        r.reused,
        r.state_reset,
        opt_bool(r.state_kept),
        r.ended,
        r.files.as_ref().and_then(|f| serde_json::to_string(f).ok()),
        r.sandbox
            .as_ref()
            .and_then(|f| serde_json::to_string(f).ok()),
    ])?;
    let id = conn.last_insert_rowid();
    let mut call = conn.prepare_cached(
        "INSERT INTO tool_calls (cell_id, seq, tool, duration_seconds, outcome) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for (seq, c) in r.tool_calls.iter().enumerate() {
        call.execute(params![
            id,
            seq as i64,
            c.tool,
            c.duration_seconds,
            c.outcome
        ])?;
    }
    let mut disp = conn.prepare_cached(
        "INSERT INTO display (cell_id, seq, mime, path, data) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for (seq, d) in r.display.iter().enumerate() {
        // Only the bytes the host checked; never a read of `d.path`.
        let data = d.data.as_deref();
        disp.execute(params![id, seq as i64, d.mime, d.path, data])?;
    }
    Ok(())
}

fn parse_status(s: &str) -> Status {
    match s {
        "success" => Status::Success,
        "timeout" => Status::Timeout,
        "interrupted" => Status::Interrupted,
        "refused" => Status::Refused,
        _ => Status::Error,
    }
}

fn read_rows(conn: &Connection, q: &HistoryQuery) -> rusqlite::Result<Vec<CellRecord>> {
    let limit = if q.limit == 0 {
        -1
    } else {
        i64::try_from(q.limit).unwrap_or(i64::MAX)
    };
    let mut stmt = conn.prepare(
        "SELECT id, owner, kernel_id, execution_count, code, status, exit_code, output, error,
            hint, warning, tool_calls_made, cpu_seconds, peak_rss_kb, started_at, finished_at,
            duration_seconds, mode, python, reused, state_reset, state_kept, ended, files,
            sandbox
         FROM cells WHERE (?1 IS NULL OR owner = ?1) ORDER BY id DESC LIMIT ?2",
    )?;
    let mut rows: Vec<CellRecord> = stmt
        .query_map(params![q.session, limit], |row| {
            let cpu: Option<f64> = row.get(12)?;
            let rss: Option<i64> = row.get(13)?;
            let status: String = row.get(5)?;
            let count: i64 = row.get(3)?;
            let kept: Option<i64> = row.get(21)?;
            let files: Option<String> = row.get(23)?;
            let sandbox: Option<String> = row.get(24)?;
            Ok(CellRecord {
                id: Some(row.get(0)?),
                session: row.get(1)?,
                kernel_id: row.get(2)?,
                execution_count: u64::try_from(count).unwrap_or(0),
                code: row.get(4)?,
                status: parse_status(&status),
                exit_code: row.get(6)?,
                output: row.get(7)?,
                error: row.get(8)?,
                hint: row.get(9)?,
                warning: row.get(10)?,
                tool_calls: Vec::new(),
                tool_calls_made: row.get(11)?,
                usage: cpu.map(|cpu_seconds| Usage {
                    cpu_seconds,
                    peak_rss_kb: rss.and_then(|r| u64::try_from(r).ok()).unwrap_or(0),
                }),
                display: Vec::new(),
                started_at: row.get(14)?,
                finished_at: row.get(15)?,
                duration_seconds: row.get(16)?,
                mode: row.get(17)?,
                python: row.get(18)?,
                reused: row.get(19)?,
                state_reset: row.get(20)?,
                state_kept: kept.map(|k| k != 0),
                ended: row.get(22)?,
                // A value this build cannot read is left out, not an error.
                files: files.and_then(|f| serde_json::from_str(&f).ok()),
                sandbox: sandbox.and_then(|f| serde_json::from_str(&f).ok()),
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    rows.reverse();
    let mut calls = conn.prepare(
        "SELECT tool, duration_seconds, outcome FROM tool_calls WHERE cell_id = ?1 ORDER BY seq",
    )?;
    let mut disp =
        conn.prepare("SELECT mime, path, data FROM display WHERE cell_id = ?1 ORDER BY seq")?;
    for r in &mut rows {
        let id = r.id.unwrap_or_default();
        r.tool_calls = calls
            .query_map([id], |row| {
                Ok(ToolCall {
                    tool: row.get(0)?,
                    duration_seconds: row.get(1)?,
                    outcome: row.get(2)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        r.display = disp
            .query_map([id], |row| {
                Ok(DisplayFile {
                    mime: row.get(0)?,
                    path: row.get(1)?,
                    data: row.get::<_, Option<Vec<u8>>>(2)?.map(Into::into),
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
    }
    Ok(rows)
}

/// `secs` (Unix seconds, UTC) as RFC 3339 with milliseconds:
/// `2026-11-29T13:05:07.123Z`.
pub fn rfc3339(secs: f64) -> String {
    let secs = if secs.is_finite() && secs > 0.0 {
        secs
    } else {
        0.0
    };
    let whole = secs.floor() as i64;
    let millis = (((secs - secs.floor()) * 1000.0).floor() as i64).clamp(0, 999);
    let days = whole.div_euclid(86_400);
    let rem = whole.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_renders_known_instants() {
        assert_eq!(rfc3339(0.0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400.5), "2000-02-29T00:00:00.500Z");
        assert_eq!(rfc3339(1_796_000_000.0), "2026-11-30T00:53:20.000Z");
    }

    #[test]
    fn status_words_read_back() {
        for s in [
            Status::Success,
            Status::Error,
            Status::Timeout,
            Status::Interrupted,
            Status::Refused,
        ] {
            assert_eq!(parse_status(s.as_str()), s);
        }
    }
}
