//! One cell, from admission to result: admit and resolve the session key, enter
//! the slot (busy, so never evicted or reaped), wait for the kernel (strict
//! FIFO), make sure there is a live kernel (a dead one replaced, a reset
//! honoured, a pooled or fresh one started within `max_kernels`), run, settle
//! the slot, and assemble the execute result (docs/result.md).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::MutexGuard;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolcell_tools::DynTool;
use toolcell_tools::hints::HintContext;

use super::pool::{Shape, fill_pool, spawn_kernel};
use super::request::{Refusal, admission};
use super::session::{BusyGuard, SessionKey, Slot, SlotMeta, sibling_warning};
use super::{ExecuteRequest, Inner, KernelMode, Registry, mode_str};
use toolcell_kernel::ids::CellId;
use toolcell_kernel::kernel::{CellOptions, CellOutcome, Ending, Kernel};
use toolcell_kernel::result::{
    ExecuteResult, FilesChanged, KernelInfo, Status, build_result, round2,
};
use toolcell_kernel::watch;

/// A cell admitted and resolved: what it runs with.
struct Plan {
    /// Fresh and random: the runner's result is accepted only with it.
    cell_id: CellId,
    key: SessionKey,
    shape: Shape,
    tools: Vec<Arc<dyn DynTool>>,
    per_call: bool,
    /// The `kernel` of a result for a cell that did not run.
    blank: KernelInfo,
}

/// What getting a kernel ready found out.
#[derive(Default)]
struct Readiness {
    reused: bool,
    state_reset: bool,
    /// The warm pool should be refilled after the cell.
    refill: bool,
    /// Notices for the result's `warning`, before any truncation notice.
    notices: Vec<String>,
}

type KernelGuard<'a> = MutexGuard<'a, Option<Kernel>>;

fn not_run(status: Status, error: impl Into<String>, blank: &KernelInfo) -> ExecuteResult {
    ExecuteResult::not_run(status, error, blank.clone())
}

/// What a request cancelled before its cell was sent returns.
fn cancelled_before_start(blank: &KernelInfo) -> Box<ExecuteResult> {
    Box::new(not_run(
        Status::Interrupted,
        "the request was cancelled before the cell started; none of its code ran",
        blank,
    ))
}

impl Registry {
    /// [`Registry::execute`] without the journal; the cell's tool calls go
    /// to `calls` when given.
    pub(super) async fn run_cell(
        &self,
        req: &ExecuteRequest,
        calls: Option<&mut Vec<toolcell_rpc::CallRecord>>,
    ) -> ExecuteResult {
        let inner = &self.inner;
        let t0 = Instant::now();
        let extra = inner.cell_extra_tools(req).await;
        let plan = match inner.plan(req, extra.as_deref()) {
            Ok(p) => p,
            Err(r) => return *r,
        };
        let (slot, token) = inner.enter(&plan.key);
        let _busy = BusyGuard {
            inner: Arc::clone(inner),
            slot: Arc::clone(&slot),
        };
        let mut guard = match inner.wait_turn(&slot, &token, req, &plan).await {
            Ok(g) => g,
            Err(r) => return *r,
        };
        let mut ready = match inner
            .ready_kernel(&mut guard, &slot, &token, req, &plan)
            .await
        {
            Ok(r) => r,
            Err(r) => return *r,
        };
        let Some(kernel) = guard.as_mut() else {
            return not_run(Status::Error, "no kernel could be started", &plan.blank);
        };
        // The last moment a cancel keeps the cell from running: under the
        // slot lock, after any spawn, right before the cell is sent.
        if req.is_cancelled() {
            return *cancelled_before_start(&plan.blank);
        }
        match kernel.use_extra_tools(extra.as_ref()) {
            Ok(notices) => ready.notices.extend(notices),
            Err(e) => {
                return not_run(
                    Status::Error,
                    format!("{e}; none of the code ran"),
                    &plan.blank,
                );
            }
        }
        // From here a cancel interrupts this cell (not the session's
        // others): the cell watches the request's token beside the
        // session's.
        let opts = inner.cell_options(req, &token);
        let watcher = inner.files_before(kernel).await;
        let mut outcome = kernel.execute(&plan.cell_id, &req.code, &opts).await;
        // The runner's figure list is the cell's to forge: only checked
        // entries reach the result, read before the kernel's directory can go.
        let figures = toolcell_kernel::figures::check(
            kernel.dir(),
            &runner_display(&mut outcome.ending),
            &inner.redactor,
            inner.opts.journaling(),
        );
        // Files the kernel sent that the check dropped go at once.
        kernel.keep_files(&figures.display);
        let reads = all_reads(
            runner_reads(&mut outcome.ending),
            kernel.take_tool_reads(plan.cell_id.as_str()),
        );
        let (files, files_notice) = inner.files_after(kernel, watcher).await;
        let files = match reads {
            Some(r) => inner.with_reads(files, r, kernel.cwd()),
            None => files,
        };
        let mut cell_notices = std::mem::take(&mut outcome.notices);
        if ready.refill {
            fill_pool(inner);
        }
        if let (Some(calls), Some(report)) = (calls, outcome.tools.as_ref()) {
            calls.extend_from_slice(report.calls());
        }
        let info = KernelInfo {
            id: kernel.id().to_string(),
            mode: kernel.mode().to_string(),
            language: kernel.language().as_str().to_string(),
            python: kernel.python().to_string(),
            reused: ready.reused,
            execution_count: outcome.execution_count,
            state_reset: ready.state_reset,
            state_kept: None,
            ended: None,
            remote: kernel.remote().map(str::to_string),
            sandbox: Some(kernel.sandbox().clone()),
        };
        inner.settle(guard, &slot, &plan, &mut outcome).await;
        let hint_cx = || {
            let mut cx = inner.hint_context(&plan, &info.python, &info.id);
            if let Some(e) = &extra {
                // Outside tools: top-level functions and source submodules.
                let mut names: Vec<String> = Vec::new();
                for t in &e.tools {
                    let name = t.namespace().unwrap_or(t.name());
                    names.push(toolcell_tools::names::python_function_name(name));
                }
                names.extend(
                    e.unavailable
                        .iter()
                        .map(|u| toolcell_tools::names::python_function_name(&u.namespace)),
                );
                names.sort();
                names.dedup();
                cx.importable.extend(names);
            }
            cx
        };
        let mut result = build_result(
            outcome,
            info.clone(),
            hint_cx,
            &opts,
            inner.opts.max_tool_calls,
        );
        result.duration_seconds = round2(t0.elapsed().as_secs_f64());
        let figure_warning = figures.warning();
        result.display = figures.display;
        ready.notices.extend(result.warning.take());
        ready.notices.append(&mut cell_notices);
        ready.notices.extend(figure_warning);
        ready.notices.extend(files_notice);
        result.files = files;
        if !ready.notices.is_empty() {
            result.warning = Some(ready.notices.join(" "));
        }
        result
    }
}

impl Inner {
    /// Admission, then everything the session key needs: the tools, the
    /// interpreter (probed once per host), the owner (unique per cell in
    /// per-call mode).
    fn plan(
        &self,
        req: &ExecuteRequest,
        extra: Option<&super::ExtraTools>,
    ) -> Result<Plan, Box<ExecuteResult>> {
        let mode = req.mode.unwrap_or(self.opts.mode);
        let language = req.language.unwrap_or(self.opts.language);
        let blank = KernelInfo {
            mode: mode_str(mode).into(),
            language: language.as_str().into(),
            ..KernelInfo::default()
        };
        if req.is_cancelled() {
            return Err(cancelled_before_start(&blank));
        }
        let fail = |r: Refusal| Box::new(not_run(r.status, r.error, &blank));
        let admitted = admission(req, &self.opts, self.guard.as_deref(), extra).map_err(fail)?;
        let error = |e: String| {
            Box::new(not_run(
                Status::Error,
                format!("{e}; none of the code ran"),
                &blank,
            ))
        };
        let tools = self
            .tools
            .select(&admitted.tools)
            .map_err(|e| error(e.to_string()))?;
        let remote_name = req.remote.as_deref().unwrap_or(&self.opts.remote);
        let remote = self.opts.remote_named(remote_name).map_err(error)?;
        let (interpreter, version) = match &remote {
            // The remote's interpreter is whatever `python` names there;
            // its version comes with the runner's `ready`.
            Some((_, r)) => (
                std::path::PathBuf::from(r.interpreter(language)),
                String::new(),
            ),
            None => self
                .interpreter(language, mode, &admitted.cwd)
                .map_err(error)?,
        };
        let per_call = self.opts.kernel_mode == KernelMode::PerCall;
        // Random ids come first: a failing random source fails the cell
        // before anything starts, never a predictable id (toolcell_kernel::ids).
        let cell_id = CellId::generate().map_err(|e| error(e.to_string()))?;
        let owner = if per_call {
            toolcell_kernel::ids::per_call_owner(&req.owner).map_err(|e| error(e.to_string()))?
        } else {
            req.owner.clone()
        };
        let key = SessionKey {
            owner,
            mode: mode_str(mode),
            language,
            interpreter: interpreter.clone(),
            cwd: admitted.cwd.clone(),
            tools: admitted.tools.clone(),
            remote: remote.as_ref().map(|(n, _)| n.clone()).unwrap_or_default(),
        };
        let shape = Shape {
            mode,
            language,
            interpreter,
            version,
            cwd: admitted.cwd,
            tools: admitted.tools,
            remote,
        };
        Ok(Plan {
            cell_id,
            key,
            shape,
            tools,
            per_call,
            blank,
        })
    }

    /// The slot of `key` (made on first use), marked busy: being busy
    /// protects it from eviction and reaping. Returns the slot and its
    /// interrupt token.
    fn enter(&self, key: &SessionKey) -> (Arc<Slot>, CancellationToken) {
        let mut st = self.state();
        let had_before = st.retired.contains(key);
        let slot = Arc::clone(st.slots.entry(key.clone()).or_insert_with(|| {
            Arc::new(Slot {
                key: key.clone(),
                kernel: tokio::sync::Mutex::new(None),
                meta: Mutex::new(SlotMeta::new(had_before)),
            })
        }));
        let token = {
            let mut m = slot.meta();
            m.busy += 1;
            m.interrupt.clone()
        };
        (slot, token)
    }

    /// Waits for the slot's kernel (strict FIFO: tokio's mutex is fair). An
    /// interrupt while waiting, or a session shut down meanwhile, is a
    /// result: none of the cell's code runs.
    async fn wait_turn<'a>(
        &self,
        slot: &'a Slot,
        token: &CancellationToken,
        req: &ExecuteRequest,
        plan: &Plan,
    ) -> Result<KernelGuard<'a>, Box<ExecuteResult>> {
        let stop = |why: &str| Box::new(not_run(Status::Interrupted, why, &plan.blank));
        let guard = tokio::select! {
            g = slot.kernel.lock() => g,
            () = req.cancelled() => return Err(cancelled_before_start(&plan.blank)),
            () = token.cancelled() => {
                return Err(stop("the cell was interrupted while waiting for the previous cell of this session; none of its code ran"));
            }
        };
        if token.is_cancelled() {
            return Err(stop(
                "the cell was interrupted before it started; none of its code ran",
            ));
        }
        if req.is_cancelled() {
            return Err(cancelled_before_start(&plan.blank));
        }
        let current = self
            .state()
            .slots
            .get(&plan.key)
            .is_some_and(|s| std::ptr::eq(Arc::as_ptr(s), slot));
        if !current {
            return Err(stop(
                "the session was shut down before the cell started; none of its code ran",
            ));
        }
        Ok(guard)
    }

    /// Makes sure `guard` holds a live kernel for the cell: a kernel that
    /// died between cells is replaced (with a notice), `reset` honoured, a
    /// pooled or fresh kernel started within `max_kernels`; a newcomer's
    /// second kernel for one session name gets a notice.
    async fn ready_kernel(
        self: &Arc<Self>,
        guard: &mut KernelGuard<'_>,
        slot: &Slot,
        token: &CancellationToken,
        req: &ExecuteRequest,
        plan: &Plan,
    ) -> Result<Readiness, Box<ExecuteResult>> {
        let mut ready = Readiness::default();
        drop_ended_kernel(guard, slot, &mut ready).await;
        if req.reset
            && let Some(k) = guard.take()
        {
            {
                // Off the `sessions` list and out of the count before the
                // kernel goes, so no listing names a pid that has ended.
                let mut m = slot.meta();
                m.live = false;
                m.tree = None;
            }
            k.shutdown(Duration::from_millis(200)).await;
            ready.state_reset = true;
        }
        ready.reused = guard.is_some();
        if guard.is_none() {
            let deadline = Instant::now() + req.timeout.unwrap_or(self.opts.timeout);
            let k = self
                .start_kernel(slot, token, req, plan, deadline, &mut ready)
                .await?;
            **guard = Some(k);
            if let Some(how) = slot.meta().lost.take() {
                ready.notices.push(format!(
                    "the previous cell of this session lost its remote kernel ({how}); this cell ran in a new one, with none of the old state."
                ));
            }
        }
        if !ready.reused && !plan.per_call {
            // A newcomer's trip: the same session name from another
            // directory (or mode, interpreter, tools) is another kernel.
            let others: Vec<SessionKey> = self
                .state()
                .slots
                .values()
                .filter(|s| s.key.owner == plan.key.owner && s.key != plan.key && s.meta().live)
                .map(|s| s.key.clone())
                .collect();
            ready.notices.extend(sibling_warning(&plan.key, &others));
        }
        Ok(ready)
    }

    /// A kernel for a slot that has none: a pooled one of the same shape
    /// (the count does not change), else a fresh one once there is room.
    async fn start_kernel(
        self: &Arc<Self>,
        slot: &Slot,
        token: &CancellationToken,
        req: &ExecuteRequest,
        plan: &Plan,
        deadline: Instant,
        ready: &mut Readiness,
    ) -> Result<Kernel, Box<ExecuteResult>> {
        if slot.meta().had_kernel {
            ready.state_reset = true;
        }
        let (mut pooled, refill) = self.take_pooled(slot, &plan.shape);
        if pooled.is_none() && refill {
            pooled = self.await_fill(slot, &plan.shape, deadline, req).await;
        }
        ready.refill = refill;
        if pooled.is_none()
            && let Err(msg) = self.reserve(slot, deadline, req).await
        {
            if req.is_cancelled() {
                return Err(cancelled_before_start(&plan.blank));
            }
            return Err(Box::new(not_run(Status::Error, msg, &plan.blank)));
        }
        if refill {
            // After this cell, or in 200 ms if the cell runs longer.
            let weak = Arc::downgrade(self);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if let Some(inner) = weak.upgrade() {
                    fill_pool(&inner);
                }
            });
        }
        // A start can take long (a remote's `start` waits for its engine:
        // a queued job, a pulled image), so a cancel or an interrupt ends
        // the wait. What the abandoned start makes is cleaned up as it
        // lands: the kernel is killed, its allocation stopped.
        let spawned = match pooled {
            Some(k) => Ok(k),
            None => {
                let inner = Arc::clone(self);
                let (shape, tools) = (plan.shape.clone(), plan.tools.clone());
                let owner = plan.key.owner.clone();
                let mut start =
                    tokio::spawn(async move { spawn_kernel(&inner, &shape, &tools, &owner).await });
                tokio::select! {
                    r = &mut start => r.unwrap_or_else(|e| Err(format!("the kernel's start failed: {e}"))),
                    () = req.cancelled() => Err(self.abandon(slot, start)),
                    () = token.cancelled() => Err(self.abandon(slot, start)),
                }
            }
        };
        let stopped = req.is_cancelled() || token.is_cancelled();
        match spawned {
            Ok(k) => {
                let mut m = slot.meta();
                m.had_kernel = true;
                m.tree = Some(k.tree());
                m.kernel_id = k.id().to_string();
                m.allocation = k.allocation_id().map(str::to_string);
                m.execution_count = 0;
                Ok(k)
            }
            Err(_) if stopped => {
                slot.meta().live = false;
                self.freed.notify_waiters();
                if req.is_cancelled() {
                    Err(cancelled_before_start(&plan.blank))
                } else {
                    Err(Box::new(not_run(
                        Status::Interrupted,
                        "the cell was interrupted while its kernel was starting; none of its code ran",
                        &plan.blank,
                    )))
                }
            }
            Err(e) => {
                slot.meta().live = false;
                self.freed.notify_waiters();
                Err(Box::new(not_run(
                    Status::Error,
                    format!("{e}; none of the code ran"),
                    &plan.blank,
                )))
            }
        }
    }

    /// Gives up a kernel start its cell no longer waits for: its room
    /// passes from the slot to [`State::abandoned`] until it lands, and
    /// what it made is then dropped (the kernel killed, a remote's
    /// allocation stopped).
    fn abandon(
        self: &Arc<Self>,
        slot: &Slot,
        start: tokio::task::JoinHandle<Result<Kernel, String>>,
    ) -> String {
        {
            let mut st = self.state();
            st.abandoned += 1;
            slot.meta().live = false;
        }
        let inner = Arc::clone(self);
        tokio::spawn(async move {
            if let Ok(Ok(k)) = start.await {
                k.shutdown(Duration::from_millis(100)).await;
            }
            {
                let mut st = inner.state();
                st.abandoned = st.abandoned.saturating_sub(1);
            }
            inner.freed.notify_waiters();
            fill_pool(&inner);
        });
        String::new()
    }

    fn cell_options(&self, req: &ExecuteRequest, interrupt: &CancellationToken) -> CellOptions {
        let o = &self.opts;
        CellOptions {
            timeout: req.timeout.unwrap_or(o.timeout),
            max_tool_calls: o.max_tool_calls,
            on_timeout: o.on_timeout,
            interrupt_grace: o.interrupt_grace,
            kill_grace: o.kill_grace,
            max_stdout_bytes: o.max_stdout_bytes,
            max_stderr_bytes: o.max_stderr_bytes,
            spill: Some((o.spill_dir.clone(), o.spill_cap_bytes)),
            live: req.live.clone(),
            fold: o.fold,
            interrupt: interrupt.clone(),
            cancel: req.cancel.clone(),
        }
    }

    /// After the cell: the slot's record (count, spill files to protect),
    /// a dead or per-call kernel shut down and its room freed (perhaps for
    /// the warm pool), and a session shut down under the cell said so.
    async fn settle(
        self: &Arc<Self>,
        mut guard: KernelGuard<'_>,
        slot: &Arc<Slot>,
        plan: &Plan,
        outcome: &mut CellOutcome,
    ) {
        if slot.meta().shut_down
            && let Ending::Died { .. } = outcome.ending
        {
            // Not a crash: the session was shut down under the cell.
            outcome.ending = Ending::ShutDown;
        }
        // A remote kernel lost under its cell: the cell that starts the
        // next one says so too.
        if let Ending::Died { how } = &outcome.ending
            && guard.as_ref().is_some_and(|k| k.remote().is_some())
        {
            slot.meta().lost = Some(how.clone());
        }
        {
            let mut m = slot.meta();
            m.execution_count = outcome.execution_count;
            m.remember_spill(outcome.stdout.spill_path.as_deref());
            m.remember_spill(outcome.stderr.spill_path.as_deref());
        }
        if !outcome.alive || plan.per_call {
            if let Some(k) = guard.take() {
                k.shutdown(Duration::from_millis(200)).await;
            }
            let mut m = slot.meta();
            m.live = false;
            m.tree = None;
        }
        if plan.per_call {
            let mut st = self.state();
            if st
                .slots
                .get(&plan.key)
                .is_some_and(|s| Arc::ptr_eq(s, slot))
            {
                st.slots.remove(&plan.key);
            }
        }
        drop(guard);
        self.freed.notify_waiters();
        if !slot.meta().live {
            // Its room may go back to the warm pool.
            fill_pool(self);
        }
    }

    /// Before the cell: the kernel's watcher made current (its first scan
    /// ran while the kernel started, `spawn_kernel`). `None`: not watching.
    async fn files_before(&self, kernel: &mut Kernel) -> Option<Box<watch::Watcher>> {
        // A remote kernel's files are on the remote: the local working
        // directory says nothing about what its cells changed (docs/tour.md,
        // "Kernels on other machines: ssh, Docker, Kubernetes").
        if !self.opts.watch_files || kernel.remote().is_some() {
            return None;
        }
        match kernel.take_files_watcher() {
            Some(w) => watch::before(w).await,
            None => self.files_scan(kernel.cwd()).await,
        }
    }

    /// A watcher of `cwd` with its first scan done, on the blocking pool
    /// (`None` when watching is off or the task failed).
    pub(super) async fn files_scan(&self, cwd: &std::path::Path) -> Option<Box<watch::Watcher>> {
        if !self.opts.watch_files {
            return None;
        }
        let (root, settings) = (cwd.to_path_buf(), self.watch_settings());
        tokio::task::spawn_blocking(move || watch::Watcher::scanned(&root, settings))
            .await
            .ok()
    }

    /// After the cell: what it changed (paths redacted like output) and,
    /// whenever the scan stopped early, the notice saying so. The
    /// watcher goes back to the kernel for the next cell.
    async fn files_after(
        &self,
        kernel: &mut Kernel,
        watcher: Option<Box<watch::Watcher>>,
    ) -> (Option<FilesChanged>, Option<String>) {
        let Some((mut w, files)) = (match watcher {
            Some(w) => watch::after(w).await,
            None => None,
        }) else {
            return (None, None);
        };
        let notice = w.stopped_notice(files.as_ref().is_some_and(|f| f.scan_stopped));
        kernel.put_files_watcher(Some(w));
        let files = files.map(|mut f| {
            for e in f
                .created
                .iter_mut()
                .chain(&mut f.modified)
                .chain(&mut f.deleted)
            {
                if let std::borrow::Cow::Owned(p) = self.redactor.redact(&e.path) {
                    e.path = p;
                }
            }
            f
        });
        (files, notice)
    }

    /// `files` with what the cell read added, paths relative to `cwd` when
    /// under it and redacted like output.
    fn with_reads(
        &self,
        files: Option<FilesChanged>,
        reads: toolcell_protocol::Reads,
        cwd: &std::path::Path,
    ) -> Option<FilesChanged> {
        let paths = reads
            .paths
            .into_iter()
            .map(|p| match self.redactor.redact(&p) {
                std::borrow::Cow::Owned(r) => r,
                std::borrow::Cow::Borrowed(_) => p,
            })
            .collect();
        FilesChanged::with_reads(files, paths, reads.total, cwd)
    }

    /// What scans of working directories skip: toolcell's own spill
    /// directory, kernels root, journal and cache directory (the probe
    /// cache and compiled runners, written while a kernel starts).
    fn watch_settings(&self) -> watch::WatchSettings {
        let mut skip = vec![self.opts.spill_dir.clone(), self.root.clone()];
        skip.extend(toolcell_kernel::interpreter::user_cache_dir());
        #[cfg(feature = "journal")]
        if let Some(j) = &self.opts.journal {
            for suffix in ["", "-wal", "-shm", "-journal"] {
                let mut p = j.path().as_os_str().to_os_string();
                p.push(suffix);
                skip.push(p.into());
            }
        }
        let mut inotify_min_entries = self.opts.watch_inotify_min_entries;
        if self.opts.kernel_mode == KernelMode::PerCall {
            inotify_min_entries = inotify_min_entries.max(super::ONE_CELL_INOTIFY_MIN_ENTRIES);
        }
        watch::WatchSettings {
            max_entries: self.opts.watch_max_entries,
            skip,
            inotify_min_entries,
        }
    }

    /// What hints need to know (only built when a cell fails).
    fn hint_context(&self, plan: &Plan, python: &str, kernel_id: &str) -> HintContext {
        let mut importable: Vec<String> = toolcell_tools::names::HELPERS[1..]
            .iter()
            .map(|s| (*s).to_string())
            .collect();
        // The names a cell imports: tool names mapped to Python identifiers.
        importable.extend(
            plan.shape
                .tools
                .iter()
                .map(|t| toolcell_tools::names::python_function_name(t)),
        );
        let interpreter = plan.shape.interpreter.display();
        let mut cx = HintContext::new(importable, format!("{interpreter} ({python})"));
        cx.language = plan.shape.language.as_str().to_string();
        cx.limits = self
            .opts
            .limits
            .pairs()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        if self.opts.confine {
            let dir = |name: String| -> String { self.root.join(name).display().to_string() };
            cx.confined_writable = vec![
                dir(kernel_id.to_string()),
                dir(format!("{kernel_id}-work")),
                std::env::temp_dir().display().to_string(),
            ];
        }
        cx
    }
}

/// Drops a kernel that died since its last cell
/// (killed from outside, OOM, `os._exit` in a thread left behind), so the
/// cell runs in a fresh kernel instead of failing, and says how it ended.
async fn drop_ended_kernel(guard: &mut KernelGuard<'_>, slot: &Slot, ready: &mut Readiness) {
    let Some(k) = guard.as_mut() else {
        return;
    };
    let ended = k.ended_between_cells().await;
    if ended.is_none() && k.is_alive() {
        return;
    }
    if let Some(how) = ended {
        tracing::info!(session = %slot.key.owner, "the kernel ended between cells: {how}");
        ready.notices.push(format!(
            "the previous kernel of this session ended between cells: {how}; its state (variables, imports) is lost, and this cell ran in a fresh kernel."
        ));
    }
    if let Some(k) = guard.take() {
        // Whatever is left of its tree goes too.
        k.shutdown(Duration::from_millis(100)).await;
    }
    ready.state_reset = true;
    let mut m = slot.meta();
    m.live = false;
    m.tree = None;
}

/// Takes the runner's (unchecked) `display` list out of a cell's ending.
/// The files the runner saw the cell read (docs/result.md, "files"), taken
/// out of its result: absolute paths, at most the listed number kept.
fn runner_reads(ending: &mut Ending) -> Option<toolcell_protocol::Reads> {
    match ending {
        Ending::Answered(r) | Ending::TimedOutKept(r) | Ending::InterruptedKept(r) => {
            let mut reads = r.read.take()?;
            // The runner's word, bounded: a forged list costs no more than
            // the listed number of paths.
            reads.paths.truncate(toolcell_kernel::result::MAX_LISTED);
            Some(reads)
        }
        _ => None,
    }
}

/// The cell's own reads (in first-read order), then those of the host
/// tools it called; `None` when neither saw any.
fn all_reads(
    runner: Option<toolcell_protocol::Reads>,
    (tool_paths, tool_more): (Vec<std::path::PathBuf>, u64),
) -> Option<toolcell_protocol::Reads> {
    if tool_paths.is_empty() {
        return runner;
    }
    let mut reads = runner.unwrap_or_default();
    let mut total = reads.total.max(reads.paths.len() as u64) + tool_more;
    for p in tool_paths {
        let p = p.to_string_lossy().into_owned();
        if !reads.paths.contains(&p) {
            total += 1;
            reads.paths.push(p);
        }
    }
    reads.paths.truncate(toolcell_kernel::result::MAX_LISTED);
    reads.total = total;
    Some(reads)
}

fn runner_display(ending: &mut Ending) -> Vec<toolcell_protocol::Display> {
    match ending {
        Ending::Answered(r) | Ending::TimedOutKept(r) | Ending::InterruptedKept(r) => {
            std::mem::take(&mut r.display)
        }
        _ => Vec::new(),
    }
}
