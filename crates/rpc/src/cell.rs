//! Per-cell authority: which cell may call tools right now, with what budget,
//! and the log of what it called.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::dispatch::{CellContext, Dispatch};
use crate::wire::ErrorCode;

/// Default tool-call budget per cell: `max_tool_calls` in docs/configuration.md
/// ("[execution]").
pub const DEFAULT_BUDGET: u32 = 50;

/// What the owner knows about a cell when it starts it.
///
/// ```
/// use std::time::Duration;
/// use toolcell_rpc::CellSpec;
///
/// let spec = CellSpec::new("cell-7", tokio::time::Instant::now() + Duration::from_secs(300))
///     .budget(50)
///     .enable(["read_file", "terminal"]);
/// assert_eq!(spec.id(), "cell-7");
/// ```
#[derive(Clone)]
pub struct CellSpec {
    id: String,
    deadline: Instant,
    budget: u32,
    enabled: Vec<String>,
    extra: Option<Arc<dyn Dispatch>>,
}

impl std::fmt::Debug for CellSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CellSpec")
            .field("id", &self.id)
            .field("budget", &self.budget)
            .field("enabled", &self.enabled)
            .field("extra", &self.extra.is_some())
            .finish_non_exhaustive()
    }
}

impl CellSpec {
    /// A cell with id `id` whose tool calls must finish by `deadline`, with
    /// the default budget ([`DEFAULT_BUDGET`]) and no tool enabled.
    pub fn new(id: impl Into<String>, deadline: Instant) -> Self {
        Self {
            id: id.into(),
            deadline,
            budget: DEFAULT_BUDGET,
            enabled: Vec::new(),
            extra: None,
        }
    }

    /// Adds a dispatcher for this cell only, consulted before the server's
    /// own: tools that come and go between cells (a `serve` client's tools,
    /// an MCP server's) without restarting the server. Its tools still
    /// need [`enable`](Self::enable) and go through every check.
    #[must_use]
    pub fn extra_dispatch(mut self, dispatch: Arc<dyn Dispatch>) -> Self {
        self.extra = Some(dispatch);
        self
    }

    /// Sets how many tool calls the cell may dispatch (refusals are free).
    #[must_use]
    pub fn budget(mut self, calls: u32) -> Self {
        self.budget = calls;
        self
    }

    /// Adds tools the cell may call; others get `not_allowed`.
    #[must_use]
    pub fn enable<I, S>(mut self, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.enabled.extend(tools.into_iter().map(Into::into));
        self
    }

    /// The cell id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// How one dispatched call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallOutcome {
    /// The tool returned a result.
    Ok,
    /// The call failed with this code (`tool_failed` or `timeout`).
    Failed(ErrorCode),
    /// The cell settled while the call was running; the call was dropped and
    /// its client got `no_active_cell`.
    Cancelled,
}

/// One dispatched call in a [`CellReport`].
#[derive(Debug, Clone)]
pub struct CallRecord {
    tool: Arc<str>,
    duration: Duration,
    outcome: CallOutcome,
}

impl CallRecord {
    /// The tool's name.
    pub fn tool(&self) -> &str {
        &self.tool
    }
    /// Time from dispatch to reply (to settle, for a cancelled call).
    pub fn duration(&self) -> Duration {
        self.duration
    }
    /// How it ended.
    pub fn outcome(&self) -> CallOutcome {
        self.outcome
    }
}

/// What a cell did with its authority, returned by [`CellHandle::settle`].
#[derive(Debug, Clone)]
pub struct CellReport {
    id: String,
    calls: Vec<CallRecord>,
    refused: [u64; ErrorCode::ALL.len()],
}

impl CellReport {
    /// The cell id.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// Every dispatched call in dispatch order (refusals are not listed,
    /// only counted; the list is bounded by the cell's budget).
    pub fn calls(&self) -> &[CallRecord] {
        &self.calls
    }
    /// Number of calls dispatched, i.e. budget units used: the result's
    /// `tool_calls_made` (docs/result.md, "tool_calls_made").
    pub fn dispatched(&self) -> u32 {
        u32::try_from(self.calls.len()).unwrap_or(u32::MAX)
    }
    /// How many requests made while this cell was active were refused with
    /// `code` (codes decided before a cell is looked up — `too_large`,
    /// `bad_request`, `bad_token`, `no_active_cell` — are not counted here).
    pub fn refused(&self, code: ErrorCode) -> u64 {
        self.refused[code.index()]
    }
}

/// The owner's side of an open cell. Dropping it retires the cell as
/// [`settle`](CellHandle::settle) does.
#[derive(Debug)]
pub struct CellHandle {
    slot: Arc<ActiveSlot>,
    cell: Arc<CellState>,
    settled: bool,
}

impl CellHandle {
    pub(crate) fn new(slot: Arc<ActiveSlot>, cell: Arc<CellState>) -> Self {
        Self {
            slot,
            cell,
            settled: false,
        }
    }

    /// The cell id.
    pub fn id(&self) -> &str {
        self.cell.cx.cell_id()
    }

    /// Calls dispatched so far.
    pub fn dispatched(&self) -> u32 {
        self.cell.dispatched.load(Ordering::Relaxed)
    }

    /// The context calls of this cell are dispatched with.
    pub fn context(&self) -> &CellContext {
        &self.cell.cx
    }

    /// Retires the cell: from now on requests get `no_active_cell`, calls
    /// still running are cancelled (their clients get `no_active_cell`
    /// saying the call was cancelled), and the call log is returned.
    pub fn settle(mut self) -> CellReport {
        self.settled = true;
        self.retire()
    }

    fn retire(&self) -> CellReport {
        {
            let mut active = self.slot.lock();
            if active
                .as_ref()
                .is_some_and(|current| Arc::ptr_eq(current, &self.cell))
            {
                *active = None;
            }
        }
        self.cell.cx.cancelled().cancel();
        self.cell.close_log()
    }
}

impl Drop for CellHandle {
    fn drop(&mut self) {
        if !self.settled {
            let _ = self.retire();
        }
    }
}

/// The server's single "active cell" slot.
#[derive(Debug, Default)]
pub(crate) struct ActiveSlot(Mutex<Option<Arc<CellState>>>);

impl ActiveSlot {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Option<Arc<CellState>>> {
        // A poisoned lock only means a panic elsewhere while holding it; the
        // Option inside is always consistent, so keep going.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn current(&self) -> Option<Arc<CellState>> {
        self.lock().clone()
    }
}

/// The server's view of a cell.
#[derive(Debug)]
pub(crate) struct CellState {
    pub(crate) cx: CellContext,
    extra: Option<Arc<dyn Dispatch>>,
    enabled: HashSet<Arc<str>>,
    remaining: AtomicU32,
    dispatched: AtomicU32,
    log: Mutex<CellLog>,
}

#[derive(Debug)]
struct CellLog {
    closed: bool,
    entries: Vec<Entry>,
    refused: [u64; ErrorCode::ALL.len()],
}

#[derive(Debug)]
struct Entry {
    tool: Arc<str>,
    started: Instant,
    done: Option<(Duration, CallOutcome)>,
}

/// A budget unit taken for one dispatch, with its log slot.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) index: usize,
    pub(crate) started: Instant,
}

impl CellState {
    pub(crate) fn new(spec: CellSpec) -> Self {
        let CellSpec {
            id,
            deadline,
            budget,
            enabled,
            extra,
        } = spec;
        Self {
            cx: CellContext::new(Arc::from(id), deadline, CancellationToken::new()),
            extra,
            enabled: enabled.into_iter().map(Arc::from).collect(),
            remaining: AtomicU32::new(budget),
            dispatched: AtomicU32::new(0),
            log: Mutex::new(CellLog {
                closed: false,
                entries: Vec::new(),
                refused: [0; ErrorCode::ALL.len()],
            }),
        }
    }

    fn log(&self) -> MutexGuard<'_, CellLog> {
        self.log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The cell's own dispatcher if it knows `tool`.
    pub(crate) fn extra_for(&self, tool: &str) -> Option<&Arc<dyn Dispatch>> {
        self.extra.as_ref().filter(|d| d.knows(tool))
    }

    /// The interned name if `tool` is enabled for this cell.
    pub(crate) fn enabled(&self, tool: &str) -> Option<Arc<str>> {
        self.enabled.get(tool).cloned()
    }

    /// Enabled tool names, sorted, for error messages.
    pub(crate) fn enabled_list(&self) -> String {
        let mut names: Vec<&str> = self.enabled.iter().map(|s| &**s).collect();
        names.sort_unstable();
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    }

    pub(crate) fn budget_left(&self) -> u32 {
        self.remaining.load(Ordering::Acquire)
    }

    pub(crate) fn dispatched(&self) -> u32 {
        self.dispatched.load(Ordering::Relaxed)
    }

    /// Atomically takes one budget unit and opens a log entry. Fails with
    /// `budget_exhausted` when the budget ran out (a race lost against
    /// another connection) and `no_active_cell` when the cell has settled.
    pub(crate) fn take_unit(&self, tool: Arc<str>) -> Result<Slot, ErrorCode> {
        let mut log = self.log();
        if log.closed {
            return Err(ErrorCode::NoActiveCell);
        }
        self.remaining
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                left.checked_sub(1)
            })
            .map_err(|_| ErrorCode::BudgetExhausted)?;
        self.dispatched.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        log.entries.push(Entry {
            tool,
            started,
            done: None,
        });
        Ok(Slot {
            index: log.entries.len() - 1,
            started,
        })
    }

    pub(crate) fn finish(&self, slot: &Slot, outcome: CallOutcome) {
        let mut log = self.log();
        if log.closed {
            return;
        }
        if let Some(entry) = log.entries.get_mut(slot.index) {
            entry.done = Some((slot.started.elapsed(), outcome));
        }
    }

    pub(crate) fn count_refusal(&self, code: ErrorCode) {
        let mut log = self.log();
        if !log.closed {
            log.refused[code.index()] = log.refused[code.index()].saturating_add(1);
        }
    }

    /// Freezes the log (calls finishing later are recorded as cancelled).
    fn close_log(&self) -> CellReport {
        let mut log = self.log();
        log.closed = true;
        let now = Instant::now();
        let calls = log
            .entries
            .iter()
            .map(|e| {
                let (duration, outcome) = e.done.unwrap_or_else(|| {
                    (
                        now.saturating_duration_since(e.started),
                        CallOutcome::Cancelled,
                    )
                });
                CallRecord {
                    tool: Arc::clone(&e.tool),
                    duration,
                    outcome,
                }
            })
            .collect();
        CellReport {
            id: self.cx.cell_id().to_owned(),
            calls,
            refused: log.refused,
        }
    }
}
