//! The warm pool: ready kernels of the default shape for the next new
//! session, so its first cell does not wait for Python to start. Pooled
//! kernels count against `max_kernels` and yield their room to sessions
//! (see `room`); the pool fills in the background, only with room to spare
//! and nobody waiting ([`should_fill`]).

use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use toolcell_stubs::Mode;
use toolcell_tools::ToolSettings;

use super::room::Census;
use super::session::{Slot, State};
use super::{Inner, mode_str};
use toolcell_kernel::kernel::{Kernel, KernelSpec};

/// What a kernel is made of: everything of a session key but the owner,
/// plus the interpreter's version.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Shape {
    pub(super) mode: Mode,
    pub(super) language: toolcell_kernel::language::Language,
    pub(super) interpreter: PathBuf,
    pub(super) version: String,
    pub(super) cwd: PathBuf,
    pub(super) tools: Vec<String>,
    /// The remote (`[remotes.NAME]`) kernels of this shape run on.
    pub(super) remote: Option<(String, Arc<toolcell_kernel::remote::Remote>)>,
}

/// The sandbox of one local kernel: the configured policy with toolcell's
/// own directories hidden (the kernels root holds every other kernel's
/// socket and files; the spill dir other sessions' output) and the
/// session's own spill files and figures readable to its file tools.
fn sandbox_policy(
    inner: &Inner,
    settings: &ToolSettings,
    shape: &Shape,
) -> toolcell_kernel::sandbox::Policy {
    let mut policy = inner.opts.sandbox.clone();
    if shape.remote.is_some() {
        policy.mode = toolcell_kernel::sandbox::Mode::Off;
        return policy;
    }
    policy.hidden.extend(super::options::toolcell_dirs());
    policy.hidden.push(inner.root.clone());
    policy.hidden.push(inner.opts.spill_dir.clone());
    policy.hidden.extend(inner.opts.remote_records.clone());
    policy.readable.push(settings.spill_dir.clone());
    policy.readable.push(settings.files_dir().to_path_buf());
    policy
}

/// Starts a kernel of `shape` (strict mode: in a fresh private working
/// directory the kernel owns). The error is a sentence for the result.
pub(super) async fn spawn_kernel(
    inner: &Inner,
    shape: &Shape,
    tools: &[Arc<dyn toolcell_tools::DynTool>],
    session: &str,
) -> Result<Kernel, String> {
    let id =
        toolcell_kernel::ids::kernel_id().map_err(|e| format!("cannot name a new kernel: {e}"))?;
    let (kcwd, owned_cwd) = if shape.mode == Mode::Strict {
        let dir = toolcell_sys::private_dir::PrivateDir::ensure(&inner.root)
            .and_then(|root| root.create_dir(&format!("{id}-work")))
            .map(|d| d.path().to_path_buf())
            .map_err(|e| format!("cannot create a private working directory: {e}"))?;
        (dir.clone(), Some(dir))
    } else {
        (shape.cwd.clone(), None)
    };
    let mut settings = ToolSettings::new(&kcwd)
        .spill_dir(&inner.opts.spill_dir)
        .max_output_bytes(inner.opts.max_stdout_bytes)
        .web(inner.opts.web.clone())
        .redactor(inner.redactor.clone());
    settings = settings.env(inner.base_env.clone());
    // Where tools save files for the cell (an MCP server's images): the
    // kernel's own directory, which Kernel::spawn creates under the root.
    settings.kernel_dir = Some(inner.root.join(&id));
    let sandbox = sandbox_policy(inner, &settings, shape);
    let settings = Arc::new(settings);
    let watch_cwd = kcwd.clone();
    let spec = KernelSpec {
        id,
        interpreter: shape.interpreter.clone(),
        python_version: shape.version.clone(),
        mode: mode_str(shape.mode).into(),
        cwd: kcwd,
        env: inner.base_env.clone(),
        root: inner.root.clone(),
        tools: tools.to_vec(),
        dispatch: inner.tools.dispatcher_shared(Arc::clone(&settings)),
        tool_settings: settings,
        rpc_tcp: inner.opts.rpc_tcp,
        redactor: inner.redactor.clone(),
        startup_timeout: inner.opts.startup_timeout,
        limits: inner.opts.limits,
        confine: inner.opts.confine && shape.remote.is_none(),
        remote: shape.remote.clone(),
        inband_tools: inner.opts.inband_tools,
        language: shape.language,
        session: session.to_string(),
        lifecycle: Some(Arc::new(crate::lifecycle::Allocator(Arc::clone(
            &inner.lifecycle,
        )))),
        files_cap: inner.opts.remote_files_cap,
        sandbox,
        sandbox_off: None,
    };
    // The first scan of the working directory (docs/result.md, "files") runs
    // while the interpreter starts.
    // A strict kernel's own working directory goes with a failed start,
    // and with a start abandoned midway (its future dropped on a cancel).
    let mut cwd_guard = OwnedCwd(owned_cwd);
    let (spawned, files) = tokio::join!(Kernel::spawn(spec), inner.files_scan(&watch_cwd));
    match spawned {
        Ok(mut k) => {
            k.set_owned_cwd(cwd_guard.0.take());
            k.put_files_watcher(files);
            Ok(k)
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Removes the directory it holds when dropped.
struct OwnedCwd(Option<PathBuf>);

impl Drop for OwnedCwd {
    fn drop(&mut self) {
        if let Some(d) = self.0.take() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// The warm pool (see [`RegistryOptions::warm_pool`]).
#[derive(Default)]
pub(super) struct Pool {
    /// Ready kernels, all of `shape`.
    pub(super) ready: Vec<Kernel>,
    /// Spawns in flight.
    pub(super) filling: usize,
    /// Spawns in flight whose kernel is closed when it is ready: their room
    /// was given to a session (at most `filling`).
    pub(super) yielding: usize,
    /// Set by `shutdown_all`: nothing is pooled any more.
    pub(super) closed: bool,
    /// The default shape, once resolved.
    pub(super) shape: Option<Shape>,
    /// The shape the spawns in flight start (the default shape, known
    /// before the first of them is ready).
    pub(super) starting: Option<Shape>,
}

impl Inner {
    pub(super) fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.pool
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The shape pooled kernels have: default mode, interpreter and cwd,
    /// the default tool set.
    pub(super) fn default_shape(&self) -> Result<Shape, String> {
        let mode = self.opts.mode;
        let cwd = match mode {
            Mode::Strict => PathBuf::new(),
            _ => self.opts.default_cwd.clone(),
        };
        let language = self.opts.language;
        let remote = self.opts.remote_named(&self.opts.remote)?;
        let (interpreter, version) = match &remote {
            Some((_, r)) => (PathBuf::from(r.interpreter(language)), String::new()),
            None => self.interpreter(language, mode, &cwd)?,
        };
        let mut tools = self.opts.tools.clone();
        tools.sort();
        tools.dedup();
        Ok(Shape {
            mode,
            language,
            interpreter,
            version,
            cwd,
            tools,
            remote,
        })
    }

    /// A ready pooled kernel of `shape` for `slot`, if there is one, and
    /// whether the pool should be refilled (`shape` is the pooled one, or
    /// the pooled shape is not known yet). A kernel taken moves from the
    /// pool to the session (the slot is marked live under the same locks),
    /// so the count of kernels does not change. The caller refills after
    /// its cell (or a little later if the cell runs long): a spawn running
    /// beside a short first cell would slow it on a small machine.
    pub(super) fn take_pooled(&self, slot: &Slot, shape: &Shape) -> (Option<Kernel>, bool) {
        if self.opts.warm_pool == 0 {
            return (None, false);
        }
        let mut dead = Vec::new();
        let taken = {
            let _st = self.state();
            let mut p = self.pool();
            match fit(p.shape.as_ref(), shape) {
                Fit::Other => return (None, false),
                Fit::Unknown => None,
                Fit::Same => {
                    let mut taken = None;
                    while let Some(mut k) = p.ready.pop() {
                        if k.check_alive() {
                            taken = Some(k);
                            break;
                        }
                        dead.push(k);
                    }
                    if taken.is_some() {
                        slot.meta().live = true;
                    }
                    taken
                }
            }
        };
        // Dead pooled kernels are dropped outside the locks.
        drop(dead);
        (taken, true)
    }

    /// A kernel of `shape` from a pool spawn already under way, for a cell
    /// that found the pool empty: on a small machine a second interpreter
    /// starting beside that one would slow both, so the cell waits for it
    /// (until `deadline` or a cancel) and takes it when ready. `None` when
    /// no such spawn is running, it failed, or another cell took its kernel.
    pub(super) async fn await_fill(
        &self,
        slot: &Slot,
        shape: &Shape,
        deadline: tokio::time::Instant,
        req: &super::ExecuteRequest,
    ) -> Option<Kernel> {
        let done = self.pool_done.notified();
        tokio::pin!(done);
        // Registered before the check: a spawn ending in between still wakes us.
        done.as_mut().enable();
        let starting = {
            let p = self.pool();
            if p.filling <= p.yielding || p.closed {
                return None;
            }
            p.starting.clone()
        };
        // A spawn that has not resolved its shape yet starts the default one
        // (resolved for this cell already, so this costs no probe).
        let same = match starting {
            Some(s) => &s == shape,
            None => self.default_shape().is_ok_and(|d| &d == shape),
        };
        if !same {
            return None;
        }
        tokio::select! {
            () = done => {}
            () = tokio::time::sleep_until(deadline) => return None,
            () = req.cancelled() => return None,
        }
        self.take_pooled(slot, shape).0
    }

    /// The counts room decisions are made on; `st` and `p` are held (in
    /// that order: state, then pool).
    pub(super) fn census(&self, st: &State, p: &Pool) -> Census {
        Census {
            live: st.live_count(),
            pooled: p.ready.len(),
            filling: p.filling,
            yielding: p.yielding,
            waiting: st.waiting,
            max: self.opts.max_kernels.max(1),
        }
    }

    /// Claims one pool spawn if the pool is short and there is room.
    pub(super) fn claim_fill(&self) -> bool {
        let st = self.state();
        let mut p = self.pool();
        let census = self.census(&st, &p);
        if should_fill(census, self.opts.warm_pool, p.closed) {
            p.filling += 1;
            true
        } else {
            false
        }
    }
}

/// How a wanted shape relates to the pooled one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fit {
    /// The pooled shape: take a ready kernel, refill after.
    Same,
    /// Not resolved yet (the first fill is running, or failed): nothing to
    /// take; a refill tries again.
    Unknown,
    /// Another shape: nothing to take, nothing to refill.
    Other,
}

pub(super) fn fit(pooled: Option<&Shape>, wanted: &Shape) -> Fit {
    match pooled {
        None => Fit::Unknown,
        Some(p) if p == wanted => Fit::Same,
        Some(_) => Fit::Other,
    }
}

/// Whether the warm pool should start one more kernel: it is short of
/// `warm_pool`, there is room under `max_kernels`, and no cell is waiting
/// for room (sessions come first).
pub(super) fn should_fill(c: Census, warm_pool: usize, closed: bool) -> bool {
    !closed
        && c.waiting == 0
        && c.yielding == 0
        && c.pooled + c.filling < warm_pool
        && c.used() < c.max
}

/// Tops the warm pool up to `warm_pool` kernels in the background, as far
/// as `max_kernels` leaves room.
pub(super) fn fill_pool(inner: &Arc<Inner>) {
    if inner.opts.warm_pool == 0 {
        return;
    }
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if inner.claim_fill() {
        handle.spawn(fill_loop(Arc::downgrade(inner)));
    }
}

/// Runs the claimed spawn, then claims and runs more while the pool is short.
async fn fill_loop(inner: Weak<Inner>) {
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let shape = strong.pool().shape.clone();
        let shape = match shape {
            Some(s) => Ok(s),
            None => strong.default_shape(),
        };
        if let Ok(shape) = &shape {
            strong.pool().starting = Some(shape.clone());
        }
        let spawned = match &shape {
            Ok(shape) => match strong.tools.select(&shape.tools) {
                Ok(tools) => spawn_kernel(&strong, shape, &tools, "pool").await,
                Err(e) => Err(e.to_string()),
            },
            Err(e) => Err(e.clone()),
        };
        let unwanted = {
            let mut p = strong.pool();
            p.filling -= 1;
            match (spawned, shape) {
                (Ok(k), Ok(shape)) if !p.closed && p.yielding == 0 => {
                    p.shape = Some(shape);
                    p.ready.push(k);
                    drop(p);
                    strong.pool_done.notify_waiters();
                    None
                }
                (Ok(k), _) => {
                    p.yielding = p.yielding.saturating_sub(1);
                    Some(k)
                }
                (Err(e), _) => {
                    p.yielding = p.yielding.saturating_sub(1);
                    // Closed: the host is stopping, and a spawn cut short by
                    // it (its runtime shutting down) is no news. Otherwise
                    // no retry loop: the next session that misses tries again.
                    if !p.closed {
                        tracing::warn!("warm pool: cannot start a kernel: {e}");
                    }
                    drop(p);
                    strong.freed.notify_waiters();
                    strong.pool_done.notify_waiters();
                    return;
                }
            }
        };
        if let Some(k) = unwanted {
            // Its room went to a session (or the pool closed).
            strong.pool_done.notify_waiters();
            k.shutdown(Duration::from_millis(100)).await;
            strong.freed.notify_waiters();
            return;
        }
        if !strong.claim_fill() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn census(live: usize, pooled: usize, filling: usize) -> Census {
        Census {
            live,
            pooled,
            filling,
            yielding: 0,
            waiting: 0,
            max: 2,
        }
    }

    #[test]
    fn the_pool_fills_only_when_short_with_room_and_nobody_waiting() {
        assert!(should_fill(census(0, 0, 0), 1, false));
        assert!(should_fill(census(1, 0, 0), 1, false));
        // Full pool, or a spawn already under way.
        assert!(!should_fill(census(0, 1, 0), 1, false));
        assert!(!should_fill(census(0, 0, 1), 1, false));
        // No room under max_kernels = 2.
        assert!(!should_fill(census(2, 0, 0), 1, false));
        assert!(!should_fill(census(1, 1, 0), 2, false));
        // Closed, no pool, a cell waiting for room, a spawn being given up.
        assert!(!should_fill(census(0, 0, 0), 1, true));
        assert!(!should_fill(census(0, 0, 0), 0, false));
        let waiting = Census {
            waiting: 1,
            ..census(0, 0, 0)
        };
        assert!(!should_fill(waiting, 1, false));
        let yielding = Census {
            filling: 1,
            yielding: 1,
            ..census(0, 0, 0)
        };
        assert!(!should_fill(yielding, 2, false));
    }

    #[test]
    fn only_the_pooled_shape_takes_a_pooled_kernel() {
        let shape = Shape {
            mode: Mode::Project,
            language: toolcell_kernel::language::Language::Python,
            interpreter: PathBuf::from("/usr/bin/python3"),
            version: "3.11.7".into(),
            cwd: PathBuf::from("/w"),
            tools: vec!["read_file".into()],
            remote: None,
        };
        assert_eq!(fit(Some(&shape), &shape), Fit::Same);
        assert_eq!(fit(None, &shape), Fit::Unknown);
        let elsewhere = Shape {
            cwd: PathBuf::from("/x"),
            ..shape.clone()
        };
        assert_eq!(fit(Some(&shape), &elsewhere), Fit::Other);
        let strict = Shape {
            mode: Mode::Strict,
            ..shape.clone()
        };
        assert_eq!(fit(Some(&shape), &strict), Fit::Other);
    }
}
