//! One cell: the `execute` request, the events until its result, the
//! output of each stream, and the files a remote cell sends back.

#[allow(clippy::wildcard_imports)]
use super::*;

/// Until `interrupt` or `cancel` fires.
pub(super) async fn interrupted(interrupt: &CancellationToken, cancel: Option<&CancellationToken>) {
    match cancel {
        Some(c) => tokio::select! {
            () = interrupt.cancelled() => {}
            () = c.cancelled() => {}
        },
        None => interrupt.cancelled().await,
    }
}

/// The last `n` lines of `text`.
pub fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Running,
    Interrupting { by_caller: bool },
    Killed { by_caller: bool },
}

/// One stream of one cell: cleaner → capture → live sink.
pub(super) struct StreamOut {
    pub(super) kind: StreamKind,
    pub(super) cleaner: Cleaner,
    pub(super) capture: Capture,
    pub(super) scratch: String,
}

impl StreamOut {
    pub(super) fn new(
        redactor: &Redactor,
        cap: usize,
        opts: &CellOptions,
        kernel: &str,
        count: u64,
        kind: StreamKind,
    ) -> Self {
        let spill = opts.spill.as_ref().map(|(dir, cap)| SpillTarget {
            dir: dir.clone(),
            prefix: format!("{kernel}-cell{count}-{}", kind.as_str()),
            cap_bytes: *cap,
        });
        Self {
            kind,
            cleaner: Cleaner::new(redactor),
            capture: Capture::with_fold(cap, spill, opts.fold),
            scratch: String::new(),
        }
    }

    pub(super) fn emit(&mut self, opts: &CellOptions) {
        if self.scratch.is_empty() {
            return;
        }
        self.capture.push(&self.scratch);
        if let Some(live) = &opts.live {
            live(self.kind, &self.scratch);
        }
        self.scratch.clear();
    }

    pub(super) fn push(&mut self, bytes: &[u8], opts: &CellOptions) {
        self.cleaner.push(bytes, &mut self.scratch);
        self.emit(opts);
    }

    pub(super) fn between(&mut self, marked: &mut bool, bytes: &[u8], opts: &CellOptions) {
        if !*marked {
            *marked = true;
            self.scratch
                .push_str("[toolcell: output written after the previous cell ended]\n");
            self.emit(opts);
        }
        self.push(bytes, opts);
    }

    pub(super) fn finish(mut self, opts: &CellOptions) -> Captured {
        self.cleaner.finish(&mut self.scratch);
        self.emit(opts);
        self.capture.finish()
    }
}

/// A kernel's process and what was forked from it: who may use its socket.
pub(super) struct Family {
    pub(super) root: u32,
    pub(super) lineage: Option<Arc<toolcell_sys::lineage::Lineage>>,
}

impl Family {
    /// The kernel itself, or a process forked from it: recorded in its
    /// lineage (which survives re-parenting), or below it by parent links.
    pub(super) fn admits(&self, pid: u32) -> bool {
        self.lineage.as_ref().is_some_and(|l| l.contains(pid))
            || toolcell_sys::lineage::descends_from(pid, self.root)
    }
}

/// Why a `file` frame was not stored.
pub(super) enum FileRefused {
    /// The kernel's files would pass [`KernelSpec::files_cap`].
    OverCap,
    /// The frame is malformed (a protocol error).
    Bad(String),
}

impl Kernel {
    /// Sets the tools from outside the registry that the next cells may
    /// call (a `serve` client's, an MCP server's; `None`: none). When they
    /// differ from the last cell's, a new stub module goes to the runner
    /// with the next cell, which loads it keeping the session's state.
    ///
    /// A tool whose name (or a parameter's) would clash in the stub module
    /// of any language with one that comes earlier — the kernel's own tools
    /// first — is left out ([`toolcell_tools::screen::screen`]), so one
    /// source's tool list never costs more than its own tools. Returns the
    /// warnings for the cell when the tools changed: those left-out tools
    /// and the set's own [`notices`](crate::extra::ExtraTools::notices);
    /// each is logged too.
    ///
    /// # Errors
    /// The stub module cannot be generated; nothing changes then.
    pub fn use_extra_tools(
        &mut self,
        extra: Option<&Arc<crate::extra::ExtraTools>>,
    ) -> Result<Vec<String>, SpawnError> {
        let fp = extra.map_or(0, |e| e.fingerprint());
        if fp == self.stubs_for {
            return Ok(Vec::new());
        }
        let mut notices = Vec::new();
        let (source, dispatch) = match extra.filter(|e| !e.is_empty()) {
            None => (self.spec.language.stub_source(&self.spec.tools, &[])?, None),
            Some(e) => {
                let mut all = self.spec.tools.clone();
                all.extend(e.tools.iter().cloned());
                let screened = toolcell_tools::screen::screen(&all, &e.unavailable);
                let kept: std::collections::HashSet<&str> =
                    screened.tools.iter().map(|t| t.name()).collect();
                let tools: Vec<Arc<dyn toolcell_tools::DynTool>> = e
                    .tools
                    .iter()
                    .filter(|t| kept.contains(t.name()))
                    .cloned()
                    .collect();
                let source = self
                    .spec
                    .language
                    .stub_source(&screened.tools, &screened.unavailable)?;
                let dispatch: Arc<dyn Dispatch> = toolcell_tools::ToolDispatcher::over(
                    &tools,
                    Arc::clone(&self.spec.tool_settings),
                );
                let names = tools.iter().map(|t| t.name().to_string()).collect();
                for why in &screened.dropped {
                    tracing::warn!(kernel = %self.spec.id, "{why}");
                }
                notices.extend(e.notices.iter().cloned());
                notices.extend(screened.dropped);
                (source, Some((dispatch, names)))
            }
        };
        self.pending_stubs = Some(source);
        self.extra = dispatch;
        self.stubs_for = fp;
        Ok(notices)
    }

    /// Runs one cell. `id` is fresh and random ([`crate::ids::CellId`]): the result is
    /// accepted only with it.
    pub async fn execute(
        &mut self,
        id: &crate::ids::CellId,
        code: &str,
        opts: &CellOptions,
    ) -> CellOutcome {
        let started = Instant::now();
        let id = id.as_str().to_string();
        let deadline = started + opts.timeout;
        let next_count = self.execution_count + 1;
        let mut streams = self.open_streams(opts, next_count);
        let handle = self.open_authority(&id, deadline, opts);

        let mut protocol_errors = self.settle_between(&mut streams, opts).await;

        let mut result: Option<CellResult> = None;
        let mut got_end = false;
        let mut phase = Phase::Running;
        // The interrupt is repeated once, halfway through the grace.
        let mut reminded = false;
        let mut timer = deadline;
        let mut end_wait: Option<Instant> = None;
        let mut died: Option<String> = None;
        // Files a remote cell sent back (figures): name and bytes.
        let mut files: Vec<(String, u64)> = Vec::new();
        // How many were refused for the kernel's cap on them.
        let mut over_cap = 0usize;

        self.rearm_cpu_budget();
        let not_sent = "it was no longer running when the cell was sent";
        let mut sending = self.send_execute(&id, code);
        if sending.is_none() {
            died = Some(not_sent.into());
        }

        while died.is_none() && !(result.is_some() && got_end) {
            let wake = match end_wait {
                Some(t) => t.min(timer),
                None => timer,
            };
            tokio::select! {
                // Events first: a result already queued when the grace timer
                // also fires must win, or a kernel that answered in time
                // would be killed (seen in the soak test at load 16).
                biased;
                ev = self.events.recv() => match ev {
                    None => {
                        died = Some(self.exit_description().await);
                    }
                    Some(Ev::Raw(s, b)) => streams[idx(s)].push(&b, opts),
                    Some(Ev::Frame(StreamKind::Stdout, body)) if is_frame_of(&body, "file") => {
                        self.file_frame(&body, &mut files, &mut over_cap, &mut protocol_errors);
                    }
                    Some(Ev::Frame(s, body)) => match (s, Reply::from_body(&body)) {
                        (StreamKind::Stderr, Ok(Reply::End(e))) if e.id == id => got_end = true,
                        (StreamKind::Stdout, Ok(Reply::Result(r))) if r.id == id && result.is_none() => {
                            end_wait = Some(Instant::now() + END_LAG);
                            result = Some(r);
                        }
                        _ => {
                            protocol_errors += 1;
                            tracing::warn!(kernel = %self.spec.id, "dropped a frame with a wrong id or body");
                        }
                    },
                    Some(Ev::Eof(s)) => {
                        self.eof[idx(s)] = true;
                        if self.eof == [true, true] {
                            if result.is_some() {
                                break;
                            }
                            died = Some(self.exit_description().await);
                        }
                    }
                },
                sent = async {
                    match sending.as_mut() {
                        Some(f) => f.await,
                        None => std::future::pending().await,
                    }
                }, if sending.is_some() => {
                    sending = None;
                    if sent.is_err() && result.is_none() {
                        died = Some(not_sent.into());
                    }
                },
                () = tokio::time::sleep_until(wake) => {
                    if result.is_some() {
                        // The end frame is late; everything else is in.
                        break;
                    }
                    if self.on_deadline(&mut phase, &mut reminded, &mut timer, opts) {
                        break;
                    }
                },
                () = interrupted(&opts.interrupt, opts.cancel.as_ref()), if phase == Phase::Running => {
                    self.interrupt();
                    phase = Phase::Interrupting { by_caller: true };
                    timer = Instant::now() + opts.interrupt_grace / 2;
                },
            }
        }

        // A request still being written is torn off here: dropping its
        // write closes the channel. Only a kill or a death ends a cell that
        // early — or a runner that answered before reading its whole
        // request, which cannot be trusted with another: it goes too.
        if sending.take().is_some() && died.is_none() && !matches!(phase, Phase::Killed { .. }) {
            tracing::warn!(kernel = %self.spec.id, "the kernel answered a cell it had not read whole; it is stopped");
            self.kill(opts.kill_grace).await;
        }
        if let Phase::Killed { .. } = phase {
            self.kill_and_drain(&mut streams, opts).await;
        }
        if died.is_some() {
            self.bury().await;
        }

        let tools = handle.map(toolcell_rpc::CellHandle::settle);
        let [out, err] = streams;
        let stdout = out.finish(opts);
        let stderr = err.finish(opts);

        let traceback = result
            .as_ref()
            .map(|r| self.spec.redactor.clean(r.traceback.as_bytes()))
            .unwrap_or_default();
        let notices = self.keep_listed_files(result.as_mut(), files, over_cap);
        self.count_cell(result.as_ref(), next_count).await;
        let ending = ending_of(phase, result, died);
        CellOutcome {
            ending,
            stdout,
            stderr,
            traceback,
            tools,
            duration: started.elapsed(),
            alive: !self.dead,
            protocol_errors,
            execution_count: self.execution_count,
            notices,
        }
    }

    /// After the host checked the last cell's figures: the files that cell
    /// sent which are not among `kept` (dropped by the check) are removed.
    pub fn keep_files(&mut self, kept: &[crate::result::Display]) {
        let sent = std::mem::take(&mut self.cell_files);
        let (_, dropped): (Vec<_>, Vec<_>) = sent.into_iter().partition(|(name, _)| {
            kept.iter()
                .any(|d| Path::new(&d.path).file_name() == Some(std::ffi::OsStr::new(name)))
        });
        self.remove_files(&dropped);
    }

    /// Removes these files (sent by cells) from the artifacts directory.
    pub(super) fn remove_files(&mut self, files: &[(String, u64)]) {
        if files.is_empty() {
            return;
        }
        let dir = PrivateDir::ensure(&self.dir).and_then(|d| d.open_dir("artifacts"));
        for (name, bytes) in files {
            let gone = match &dir {
                Ok(d) => nix::unistd::unlinkat(
                    d.fd(),
                    name.as_str(),
                    nix::unistd::UnlinkatFlags::NoRemoveDir,
                )
                .is_ok(),
                Err(_) => false,
            };
            if gone {
                self.files_kept = self.files_kept.saturating_sub(*bytes);
            } else {
                tracing::warn!(kernel = %self.spec.id, "cannot remove a file a cell sent: {name}");
            }
        }
    }

    /// Bytes waiting, unread, in the kernel's stdout and stderr pipes.
    pub(super) fn pipes_pending(&self) -> usize {
        self.watch
            .iter()
            .map(|fd| {
                let mut n: nix::libc::c_int = 0;
                // SAFETY: FIONREAD writes one int; `fd` is our own open dup.
                let rc = unsafe { nix::libc::ioctl(fd.as_raw_fd(), nix::libc::FIONREAD, &mut n) };
                if rc == 0 {
                    usize::try_from(n).unwrap_or(0)
                } else {
                    0
                }
            })
            .sum()
    }

    /// Stores a `file` frame from a remote cell in the artifacts directory,
    /// within the kernel's cap on such files.
    pub(super) fn take_file(
        &mut self,
        body: &[u8],
        files: &mut Vec<(String, u64)>,
    ) -> Result<(), FileRefused> {
        use base64::Engine as _;
        use std::io::Write as _;
        #[derive(serde::Deserialize)]
        struct FileFrame {
            name: String,
            data: String,
        }
        let bad = |e: String| FileRefused::Bad(e);
        let f: FileFrame = serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
        if files.len() >= MAX_CELL_FILES {
            return Err(bad(format!("more than {MAX_CELL_FILES} files in one cell")));
        }
        let ok_name = !f.name.is_empty()
            && f.name.len() <= 128
            && !f.name.starts_with('.')
            && f.name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !ok_name {
            return Err(bad("bad file name".into()));
        }
        if f.data.len() > MAX_FILE_BYTES / 3 * 4 + 4 {
            return Err(bad("file too large".into()));
        }
        let cap = self.spec.files_cap;
        // At least this many bytes once decoded: refused before decoding.
        let least = (f.data.len() / 4 * 3).saturating_sub(2) as u64;
        if cap > 0 && self.files_kept.saturating_add(least) > cap {
            return Err(FileRefused::OverCap);
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(f.data.as_bytes())
            .map_err(|e| bad(e.to_string()))?;
        let len = bytes.len() as u64;
        if cap > 0 && self.files_kept.saturating_add(len) > cap {
            return Err(FileRefused::OverCap);
        }
        let dir = PrivateDir::ensure(&self.dir)
            .and_then(|d| match d.open_dir("artifacts") {
                Ok(a) => Ok(a),
                Err(_) => d.create_dir("artifacts"),
            })
            .map_err(|e| bad(e.to_string()))?;
        let mut file = dir.create_file(&f.name).map_err(|e| bad(e.to_string()))?;
        // Counted from here: a file half-written is on the disk too.
        self.files_kept += len;
        files.push((f.name, len));
        file.write_all(&bytes).map_err(|e| bad(e.to_string()))?;
        Ok(())
    }
}

impl Kernel {
    /// The stdout and stderr of the cell numbered `next_count`.
    fn open_streams(&self, opts: &CellOptions, next_count: u64) -> [StreamOut; 2] {
        [
            (opts.max_stdout_bytes, StreamKind::Stdout),
            (opts.max_stderr_bytes, StreamKind::Stderr),
        ]
        .map(|(cap, kind)| {
            StreamOut::new(
                &self.spec.redactor,
                cap,
                opts,
                &self.spec.id,
                next_count,
                kind,
            )
        })
    }

    /// The cell's tool authority on the kernel's rpc server: its id,
    /// deadline, budget and tools (`None`, logged, if it cannot be opened).
    fn open_authority(
        &self,
        id: &str,
        deadline: Instant,
        opts: &CellOptions,
    ) -> Option<toolcell_rpc::CellHandle> {
        let mut cell_spec = CellSpec::new(id.to_string(), deadline)
            .budget(opts.max_tool_calls)
            .enable(self.tool_names.iter().cloned());
        if let Some((dispatch, names)) = &self.extra {
            cell_spec = cell_spec
                .enable(names.iter().cloned())
                .extra_dispatch(Arc::clone(dispatch));
        }
        match self.server.open_cell(cell_spec) {
            Ok(h) => Some(h),
            Err(e) => {
                tracing::error!(kernel = %self.spec.id, "cannot open the cell's tool authority: {e}");
                None
            }
        }
    }

    /// Output from before this cell, under its marker; returns the frames
    /// dropped meanwhile.
    async fn settle_between(&mut self, streams: &mut [StreamOut; 2], opts: &CellOptions) -> u32 {
        // Output written since the last cell (or before ready) comes first,
        // under a one-line marker (docs/protocol.md, "Output between cells").
        let mut between = [false; 2];
        let early = std::mem::take(&mut self.early);
        for (s, b) in early {
            streams[idx(s)].between(&mut between[idx(s)], &b, opts);
        }
        let mut protocol_errors = 0u32;
        // Output still in the pipes (a thread the last cell left behind)
        // belongs before this cell: let the readers catch up first. The
        // common case, empty pipes, costs two ioctls.
        let settle = Instant::now() + SETTLE_LIMIT;
        loop {
            while let Ok(ev) = self.events.try_recv() {
                match ev {
                    Ev::Raw(s, b) => streams[idx(s)].between(&mut between[idx(s)], &b, opts),
                    Ev::Frame(..) => protocol_errors += 1,
                    Ev::Eof(s) => self.eof[idx(s)] = true,
                }
            }
            if Instant::now() >= settle {
                break;
            }
            // Nothing in the pipes, in the reader's hands (it counts itself
            // busy before it reads) or in the channel: settled, with no
            // yield (a yield costs a trip through the scheduler per cell).
            if self.pipes_pending() == 0
                && self.pumps_busy.load(Ordering::SeqCst) == 0
                && self.events.is_empty()
            {
                break;
            }
            if let Ok(Some(ev)) =
                tokio::time::timeout(Duration::from_millis(2), self.events.recv()).await
            {
                match ev {
                    Ev::Raw(s, b) => streams[idx(s)].between(&mut between[idx(s)], &b, opts),
                    Ev::Frame(..) => protocol_errors += 1,
                    Ev::Eof(s) => self.eof[idx(s)] = true,
                }
            }
        }
        protocol_errors
    }

    /// Starts writing the cell's `execute` request (`None`: the kernel is
    /// gone). The request is written while the cell's clock runs: a kernel
    /// that reads nothing (stopped by a cell, a remote that stopped reading)
    /// must not hold the cell, its interrupt or its session's shutdown past
    /// the deadline. The write goes on beside the events, the timer and the
    /// interrupt; a cell that ends before it is done drops it, which closes
    /// the channel (a torn line is never followed).
    fn send_execute(&mut self, id: &str, code: &str) -> Option<SendFuture> {
        let line = Request::Execute(Execute {
            id: id.to_string(),
            code: code.to_string(),
            stubs: self.pending_stubs.take(),
        })
        .to_line();
        match line {
            Ok(l) if !self.dead && self.eof == [false, false] => {
                let pipe = Arc::clone(&self.requests);
                Some(Box::pin(async move { pipe.send_within(&l, None).await }))
            }
            _ => None,
        }
    }

    /// Re-arms `[limits] cpu_seconds` for this cell (a local kernel's).
    fn rearm_cpu_budget(&self) {
        if let Some(secs) = self.spec.limits.cpu_seconds
            && self.spec.remote.is_none()
            && !self.dead
            && let Err(e) = crate::limits::set_cpu_budget(self.pid, secs)
        {
            tracing::warn!(kernel = %self.spec.id, "cannot re-arm [limits] cpu_seconds: {e}");
        }
    }

    /// A `file` frame of a remote cell: kept, refused over the cap, or
    /// dropped as malformed.
    fn file_frame(
        &mut self,
        body: &[u8],
        files: &mut Vec<(String, u64)>,
        over_cap: &mut usize,
        protocol_errors: &mut u32,
    ) {
        match self.take_file(body, files) {
            Ok(()) => {}
            Err(FileRefused::OverCap) => *over_cap += 1,
            Err(FileRefused::Bad(e)) => {
                *protocol_errors += 1;
                tracing::warn!(kernel = %self.spec.id, "dropped a file frame: {e}");
            }
        }
    }

    /// The cell's timer fired: interrupt (and once more halfway through the
    /// grace), or give up. True when the cell is to be killed.
    fn on_deadline(
        &self,
        phase: &mut Phase,
        reminded: &mut bool,
        timer: &mut Instant,
        opts: &CellOptions,
    ) -> bool {
        match *phase {
            Phase::Running if opts.on_timeout == OnTimeout::Interrupt => {
                self.interrupt();
                *phase = Phase::Interrupting { by_caller: false };
                *timer = Instant::now() + opts.interrupt_grace / 2;
                false
            }
            Phase::Running => {
                *phase = Phase::Killed { by_caller: false };
                true
            }
            Phase::Interrupting { .. } if !*reminded => {
                // Halfway through the grace with no answer: say it once
                // more (an interrupt that met the cell in a moment it could
                // not be delivered), then wait out the rest.
                *reminded = true;
                self.interrupt();
                *timer = Instant::now() + opts.interrupt_grace / 2;
                false
            }
            Phase::Interrupting { by_caller } => {
                *phase = Phase::Killed { by_caller };
                true
            }
            Phase::Killed { .. } => true,
        }
    }

    /// Kills a cell's kernel and collects what is still in the pipes.
    async fn kill_and_drain(&mut self, streams: &mut [StreamOut; 2], opts: &CellOptions) {
        self.kill(opts.kill_grace).await;
        let _ = tokio::time::timeout(Duration::from_millis(500), async {
            while let Some(ev) = self.events.recv().await {
                match ev {
                    Ev::Raw(s, b) => streams[idx(s)].push(&b, opts),
                    Ev::Eof(s) => {
                        self.eof[idx(s)] = true;
                        if self.eof == [true, true] {
                            break;
                        }
                    }
                    Ev::Frame(..) => {}
                }
            }
        })
        .await;
    }

    /// A kernel that died in a cell: nothing of its tree may be left.
    async fn bury(&mut self) {
        self.dead = true;
        // Kill first, then reap. A runner whose pipes a cell closed or
        // covered may still be running, deaf (waiting for it only delays
        // the result), and signalling before the reap means the root pid
        // cannot have been reused by then.
        self.tree().signal(Signal::SIGKILL);
        let _ = tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await;
    }

    /// The files a remote cell sent: those its result lists are moved into
    /// its paths, the others removed now; returns the notices for files
    /// refused over the cap.
    fn keep_listed_files(
        &mut self,
        result: Option<&mut CellResult>,
        files: Vec<(String, u64)>,
        over_cap: usize,
    ) -> Vec<String> {
        let mut result = result;
        if let Some(r) = result.as_deref_mut()
            && self.spec.remote.is_some()
        {
            // The runner names the files it sent; they are in our artifacts
            // directory now, where `figures.rs` checks them as for a local
            // kernel. Other paths are left as they are (and dropped there).
            let artifacts = self.dir.join("artifacts");
            for d in &mut r.display {
                if files.iter().any(|(name, _)| *name == d.path) {
                    d.path = artifacts.join(&d.path).display().to_string();
                }
            }
        }
        // What the result does not list is of no use to anyone: it goes
        // now, not with the kernel (a runner could otherwise fill this
        // host's disk with files nobody asked for).
        let listed = |name: &str| {
            result.as_deref().is_some_and(|r| {
                r.display
                    .iter()
                    .any(|d| Path::new(&d.path).file_name() == Some(std::ffi::OsStr::new(name)))
            })
        };
        let (kept, unlisted): (Vec<_>, Vec<_>) =
            files.into_iter().partition(|(name, _)| listed(name));
        self.remove_files(&unlisted);
        self.cell_files = kept;
        let mut notices = Vec::new();
        if over_cap > 0 {
            notices.push(format!(
            "{over_cap} file(s) the kernel sent back (figures) were refused: the files of this kernel kept on the host would pass [kernels] remote_files_cap ({} bytes). Figures of earlier cells are freed when the session ends or is reset.",
            self.spec.files_cap
        ));
        }
        notices
    }

    /// The execution count after a cell, and a runner that exits after
    /// answering (running atexit handlers) given a moment, then made sure of.
    async fn count_cell(&mut self, result: Option<&CellResult>, next_count: u64) {
        let Some(r) = result else {
            self.execution_count = next_count;
            return;
        };
        self.execution_count = r.execution_count;
        if r.status == toolcell_protocol::RunnerStatus::Exit {
            let _ = tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await;
            self.kill(Duration::from_millis(200)).await;
        }
    }
}

/// How a cell ended, from its phase, its result and whether its kernel
/// died.
fn ending_of(phase: Phase, result: Option<CellResult>, died: Option<String>) -> Ending {
    match (phase, result, died) {
        (_, _, Some(how)) => Ending::Died { how },
        (Phase::Killed { by_caller: true }, _, None) => Ending::InterruptedKilled,
        (Phase::Killed { by_caller: false }, _, None) => Ending::TimedOutKilled,
        (Phase::Interrupting { by_caller: true }, Some(r), None) => Ending::InterruptedKept(r),
        (Phase::Interrupting { by_caller: false }, Some(r), None) => Ending::TimedOutKept(r),
        (Phase::Running, Some(r), None) => Ending::Answered(r),
        (_, None, None) => Ending::Died {
            how: "it stopped answering".into(),
        },
    }
}
