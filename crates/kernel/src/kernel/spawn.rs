//! Starting a kernel: its private directory, the local or remote launch,
//! and the handshake up to the runner's `ready`.

#[allow(clippy::wildcard_imports)]
use super::*;

pub(super) fn remote_stderr_suffix(s: &str) -> String {
    if s.trim().is_empty() {
        String::new()
    } else {
        format!("; the command's stderr ended with:\n{}", s.trim_end())
    }
}

pub(super) fn stderr_suffix(s: &str) -> String {
    if s.trim().is_empty() {
        String::new()
    } else {
        format!("; its stderr ended with:\n{}", s.trim_end())
    }
}

pub(super) fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SpawnError {
    let what = what.into();
    move |source| SpawnError::Io { what, source }
}

/// Creates `dir` with mode 0700 (missing parents too), after checking that
/// no other user can swap it or any of its ancestors (see
/// [`toolcell_sys::private_dir`]); the error says which path is unsafe and why.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    PrivateDir::ensure(dir)
        .map(drop)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::PermissionDenied, e.to_string()))
}

/// [`private_dir`] for a default location under a shared parent that later
/// processes must find again: when another user made `dir` first, the
/// first private `<parent>/<prefix>XXXXXX` of ours, else a fresh one (see
/// [`PrivateDir::ensure_or_reuse`]). Returns the directory used.
pub fn private_dir_or_reuse(dir: &Path, parent: &Path, prefix: &str) -> std::io::Result<PathBuf> {
    PrivateDir::ensure_or_reuse(dir, parent, prefix)
        .map(|(d, _)| d.path().to_path_buf())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::PermissionDenied, e.to_string()))
}

/// Creates `name` in `dir` (0600, `O_EXCL | O_NOFOLLOW`) with `text`, and
/// returns it open for reading from the start.
pub(super) fn write_in(dir: &PrivateDir, name: &str, text: &str) -> std::io::Result<std::fs::File> {
    use std::io::{Seek, Write};
    let mut f = dir
        .create_file(name)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    f.write_all(text.as_bytes())?;
    f.rewind()?;
    Ok(f)
}

/// A started child, before the handshake.
pub(super) struct Launched {
    pub(super) child: tokio::process::Child,
    pub(super) pid: u32,
    pub(super) requests: Arc<RequestPipe>,
    pub(super) server: Server,
    pub(super) cgroup: Option<toolcell_sys::cgroup::KernelCgroup>,
    pub(super) lineage: Option<Arc<toolcell_sys::lineage::Lineage>>,
    /// The sandbox's init, whose end is the end of the whole tree.
    pub(super) namespace: Option<Arc<toolcell_sys::pidfd::Pidfd>>,
    /// `TOOLCELL_RPC` (local) or `TOOLCELL_REMOTE_KERNEL` (remote): every
    /// descendant's environment carries it (see [`Kernel::tree`]).
    pub(super) marker: String,
    /// Written before `hello` (a remote kernel's bootstrap payload).
    pub(super) payload: Vec<u8>,
    /// What it runs in.
    pub(super) sandbox: crate::sandbox::SandboxInfo,
    /// The proxy of its network rule.
    pub(super) proxy: Option<crate::sandbox::Proxy>,
    /// For the tools: where to join it and what it may read and write.
    pub(super) handle: Option<Arc<toolcell_tools::SandboxHandle>>,
}

/// Removes a directory on drop unless disarmed with `mem::forget`.
pub(super) struct DirGuard(pub(super) Option<PathBuf>);

impl Drop for DirGuard {
    fn drop(&mut self) {
        if let Some(d) = self.0.take() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

impl Kernel {
    /// Starts a kernel and waits for the runner's `ready`.
    ///
    /// # Errors
    /// [`SpawnError`] saying what failed; nothing is left behind.
    pub async fn spawn(spec: KernelSpec) -> Result<Kernel, SpawnError> {
        let limits = spec.limits;
        let mut spec = spec;
        let auto = spec.remote.is_none() && spec.sandbox.mode == crate::sandbox::Mode::Auto;
        if let Some(reason) = unavailable().filter(|_| auto) {
            spec.sandbox.mode = crate::sandbox::Mode::Off;
            spec.sandbox_off = Some(reason);
        }
        let first = if spec.remote.is_none() && spec.sandbox.mode == crate::sandbox::Mode::Auto {
            let retry = spec.clone();
            match Self::spawn_inner(spec).await {
                Err(SpawnError::Sandbox { reason }) if machine_refusal(&reason) => {
                    // `auto`: the machine refused; run unsandboxed and say
                    // so in every result (one warning per host process).
                    // Anything else (a report that came late on a loaded
                    // machine, a path that vanished) is this kernel's
                    // error, never a reason to drop the sandbox.
                    remember_unavailable(&reason);
                    let mut spec = retry;
                    spec.sandbox.mode = crate::sandbox::Mode::Off;
                    spec.sandbox_off = Some(reason);
                    Self::spawn_inner(spec).await
                }
                other => other,
            }
        } else {
            Self::spawn_inner(spec).await
        };
        first.map_err(|e| match e {
            SpawnError::NotReady { .. } | SpawnError::Io { .. } if !limits.is_empty() => {
                SpawnError::UnderLimits {
                    limits: limits.describe(),
                    source: Box::new(e),
                }
            }
            e => e,
        })
    }

    pub(super) async fn spawn_inner(spec: KernelSpec) -> Result<Kernel, SpawnError> {
        // The root is walked and verified on every spawn (ours, 0700, no
        // link another user planted), and everything below it is made
        // through directory fds: nothing is re-resolved by path between the
        // check and the use (see `toolcell_sys::private_dir`).
        let root = PrivateDir::ensure(&spec.root).map_err(|e| SpawnError::Io {
            what: "opening the kernels root".into(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let dir_handle = root.create_dir(&spec.id).map_err(|e| SpawnError::Io {
            what: "creating the kernel directory".into(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let dir = dir_handle.path().to_path_buf();
        // From here on, a failure must remove the directory.
        let cleanup = DirGuard(Some(dir.clone()));
        write_in(&dir_handle, "owner.pid", &std::process::id().to_string())
            .map_err(io_err("writing owner.pid"))?;
        let stub = spec.language.stub_source(&spec.tools, &[])?;
        // A remote with a lifecycle: its allocation first (stopped again if
        // anything below fails: dropping it runs `stop`).
        let mut allocation = None;
        // The remote's working directory, placeholders filled in.
        let mut remote_cwd = String::new();
        let launched = match spec.remote.clone() {
            Some((name, remote)) if remote.has_lifecycle() => {
                let alloc = Self::allocate(&spec, &name, &remote).await?;
                let bound = remote.bound(&alloc.vars());
                allocation = Some(alloc);
                remote_cwd.clone_from(&bound.cwd);
                Self::launch_remote(&spec, &dir, &name, &bound, &stub)?
            }
            Some((name, remote)) => {
                remote_cwd.clone_from(&remote.cwd);
                Self::launch_remote(&spec, &dir, &name, &remote, &stub)?
            }
            None => Self::launch_local(&spec, &dir, &dir_handle, &stub).await?,
        };
        let Launched {
            mut child,
            pid,
            requests,
            server,
            cgroup,
            lineage,
            namespace,
            marker,
            payload,
            sandbox,
            proxy,
            handle,
        } = launched;
        spec.tool_settings.sandbox.set(handle);

        let sentinel = Sentinel::generate().map_err(|e| SpawnError::Random(e.to_string()))?;
        let (tx, events) = mpsc::channel(EVENT_QUEUE);
        // Our own duplicates of the read ends, only to ask how many bytes
        // wait in each pipe (FIONREAD) before a cell starts.
        let mut watch: Vec<OwnedFd> = Vec::new();
        let inband = spec.tools_inband().then(|| Inband {
            caller: server.inband(),
            pipe: Arc::clone(&requests),
            slots: Arc::new(tokio::sync::Semaphore::new(INBAND_CALLS)),
        });
        let busy = Arc::new(AtomicUsize::new(0));
        // The pipes leave tokio's process types for raw non-blocking fds,
        // which the one reader polls itself (see `pump`).
        let out = child.stdout.take().and_then(|p| p.into_owned_fd().ok());
        let err = child.stderr.take().and_then(|p| p.into_owned_fd().ok());
        for fd in [&out, &err].into_iter().flatten() {
            if let Ok(d) = nix::unistd::dup(fd) {
                watch.push(d);
            }
        }
        tokio::spawn(pump(
            out,
            err,
            sentinel.clone(),
            tx,
            Arc::clone(&busy),
            inband,
        ));
        let tool_names = spec.tools.iter().map(|t| t.name().to_string()).collect();
        let mut kernel = Kernel {
            dir: dir.clone(),
            child,
            pid,
            requests,
            events,
            sentinel_marker_env: marker,
            server,
            early: Vec::new(),
            eof: [false; 2],
            execution_count: 0,
            dead: false,
            tool_names,
            python: spec.python_version.clone(),
            owned_cwd: None,
            files: None,
            watch,
            pumps_busy: busy,
            spec,
            cgroup,
            lineage,
            namespace,
            stubs_for: 0,
            pending_stubs: None,
            extra: None,
            // The leader thread's own stat: the process-wide one sums every
            // thread's times on each read (~10 µs for a Python kernel).
            proc_stat: std::fs::File::open(format!("/proc/{pid}/task/{pid}/stat")).ok(),
            started: toolcell_sys::process::start_time(pid),
            sandbox,
            _proxy: proxy,
            files_kept: 0,
            cell_files: Vec::new(),
            allocation,
        };
        let hello = Request::Hello(Hello {
            sentinel: sentinel.as_str().to_string(),
            protocol: toolcell_protocol::PROTOCOL_VERSION,
            inband_tools: kernel.spec.tools_inband(),
            cwd: (!remote_cwd.is_empty()).then_some(remote_cwd),
        });
        kernel.handshake(&payload, &hello).await?;
        std::mem::forget(cleanup);
        Ok(kernel)
    }

    /// Runs the remote's `start` (on the blocking pool) for this kernel.
    pub(super) async fn allocate(
        spec: &KernelSpec,
        name: &str,
        remote: &Arc<crate::remote::Remote>,
    ) -> Result<Box<dyn crate::remote::Allocation>, SpawnError> {
        let Some(lc) = spec.lifecycle.clone() else {
            return Err(SpawnError::Remote {
                remote: name.to_string(),
                reason: "it has a `start` command, but this host runs no remote lifecycle".into(),
                stderr: String::new(),
            });
        };
        let (n, r, session) = (name.to_string(), Arc::clone(remote), spec.session.clone());
        let started = tokio::task::spawn_blocking(move || lc.start(&n, &r, &session))
            .await
            .map_err(|e| SpawnError::Remote {
                remote: name.to_string(),
                reason: format!("its start command could not be run: {e}"),
                stderr: String::new(),
            })?;
        started.map_err(|f| SpawnError::Remote {
            remote: name.to_string(),
            reason: f.reason,
            stderr: f.stderr,
        })
    }

    /// Starts a remote kernel's command (docs/protocol.md,
    /// "Remote kernels: the same protocol over a command's stdio"):
    /// `command + [python, "-u", "-c", BOOTSTRAP]`, stdin the request channel,
    /// in its own session so its whole tree can be killed. The bootstrap
    /// payload (runner and stub module) goes first on stdin. `[limits]` and
    /// `confine` are not applied: they would bind the local command, not the
    /// remote.
    pub(super) fn launch_remote(
        spec: &KernelSpec,
        dir: &Path,
        name: &str,
        remote: &crate::remote::Remote,
        stub: &str,
    ) -> Result<Launched, SpawnError> {
        let _ = dir;
        // No socket: tool calls come in-band, checked by the same server.
        let server = Server::unbound(Arc::clone(&spec.dispatch), ServerConfig::default())?;
        let argv = remote.argv_for(spec.language);
        let marker = format!("remote:{}", spec.id);
        let mut cmd = std::process::Command::new(&argv[0]);
        // The command is the user's own (ssh, docker, kubectl): it gets the
        // host's environment (SSH_AUTH_SOCK, KUBECONFIG, DOCKER_HOST…);
        // the remote's environment is its own.
        cmd.args(&argv[1..])
            .current_dir(&spec.cwd)
            .env("TOOLCELL_REMOTE_KERNEL", &marker)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: sched_setscheduler and setsid are async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                toolcell_sys::process::apply_kernel_scheduling();
                nix::unistd::setsid().map_err(std::io::Error::from)?;
                Ok(())
            });
        }
        let mut child = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| SpawnError::Remote {
                remote: name.to_string(),
                reason: format!("cannot run {:?}: {e}", argv[0]),
                stderr: String::new(),
            })?;
        let pid = child.id().unwrap_or(0);
        let Some(stdin) = child.stdin.take() else {
            return Err(SpawnError::Remote {
                remote: name.to_string(),
                reason: "its stdin could not be opened".into(),
                stderr: String::new(),
            });
        };
        Ok(Launched {
            child,
            pid,
            requests: RequestPipe::new(stdin),
            server,
            cgroup: None,
            lineage: None,
            namespace: None,
            marker,
            payload: crate::remote::payload(spec.language.runner().1, stub),
            sandbox: crate::sandbox::SandboxInfo::Remote,
            proxy: None,
            handle: None,
        })
    }

    /// Starts the runner here, in its own session and cgroup. Python:
    /// `python -u -c BOOTSTRAP <dir>/runner.py`, fd 3 the request pipe, fd 4
    /// the runner. R and JavaScript: the in-band bootstrap with the kernel
    /// directory as its argument, stdin the request pipe (the runner and
    /// stub module go first, as for a remote), no tool socket.
    pub(super) async fn launch_local(
        spec: &KernelSpec,
        dir: &Path,
        dir_handle: &PrivateDir,
        stub: &str,
    ) -> Result<Launched, SpawnError> {
        // A Python runner is launched from this open file (fd 4 of the
        // child), never from its path: a file swapped in after the check is
        // never what runs. R and JavaScript runners (in-band) get the runner
        // and the stub module on stdin instead, and requests after them: no
        // file at all.
        let inband = spec.language.inband();
        let (runner_name, runner_source) = spec.language.runner();
        let runner = if inband {
            None
        } else {
            Some(write_runner_files(spec, dir_handle, stub)?)
        };
        let dir = dir.to_path_buf();
        let mut cgroup = match toolcell_sys::cgroup::HostCgroup::get() {
            Some(host) => Some(host.kernel(&spec.id).map_err(io_err(
                "creating the kernel's cgroup (set TOOLCELL_CGROUP=off to do without)",
            ))?),
            None => None,
        };
        // Only this kernel and its descendants may use its tool socket:
        // another kernel holding a stolen token may not, even after moving
        // itself into this kernel's cgroup (root hosts can). The kernel's
        // pid and lineage are known once it is spawned, before it runs code.
        let family: Arc<std::sync::OnceLock<Family>> = Arc::default();
        let server = tool_server(spec, &dir, inband, cgroup.as_ref(), &family)?;
        let (mut env, marker) = kernel_env(spec, &dir, &server, inband);
        // The sandbox: its plan, prepared here (paths checked, filter
        // compiled); the child only enters it.
        let plan = (spec.sandbox.mode != crate::sandbox::Mode::Off).then(|| {
            let rpc_port = server
                .endpoint()
                .strip_prefix("tcp://127.0.0.1:")
                .and_then(|p| p.parse().ok());
            crate::sandbox::plan(&spec.sandbox, &spec.cwd, &dir, rpc_port, &spec.env)
        });
        let prepared = match &plan {
            Some(p) => Some(
                toolcell_sys::sandbox::Prepared::new(&p.layout).map_err(|e| {
                    SpawnError::Sandbox {
                        reason: e.to_string(),
                    }
                })?,
            ),
            None => None,
        };
        if let Some(p) = &plan {
            env.retain(|(k, _)| !p.env.iter().any(|(pk, _)| pk == k));
            env.extend(p.env.iter().cloned());
        }

        let (req_r, req_w) = if inband {
            (None, None)
        } else {
            let (r, w) =
                nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| SpawnError::Io {
                    what: "creating the request pipe".into(),
                    source: e.into(),
                })?;
            (Some(r), Some(w))
        };
        // The runner compiled once by this interpreter, when remembered.
        let code = (runner.is_some() && spec.language == crate::language::Language::Python)
            .then(|| crate::interpreter::runner_code(&spec.interpreter, runner_source))
            .flatten();
        let mut cmd = std::process::Command::new(&spec.interpreter);
        cmd.args(spec.language.launch_args(&dir.join(runner_name)));
        if code.is_some() {
            cmd.arg("code");
        }
        cmd.current_dir(&spec.cwd)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(if inband {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let fds = req_r
            .as_ref()
            .map(AsRawFd::as_raw_fd)
            .zip(runner.as_ref().map(AsRawFd::as_raw_fd));
        let code_fd = code.as_ref().map(AsRawFd::as_raw_fd);
        // Landlock and seccomp: the ruleset and the filter are built here
        // (they open directories, allocate); the child only enforces them.
        // They live until the child has exec'd.
        let confinement = if spec.confine {
            let writable = vec![dir.clone(), spec.cwd.clone(), std::env::temp_dir()];
            Some(crate::confine::Confinement::prepare(&writable)?)
        } else {
            None
        };
        let child_confinement = confinement
            .as_ref()
            .map(crate::confine::Confinement::for_child);
        install_child_setup(
            &mut cmd,
            spec.limits,
            child_confinement,
            prepared
                .as_ref()
                .map(toolcell_sys::sandbox::Prepared::child),
            fds,
            code_fd,
        );
        let spawned = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .spawn();
        drop(req_r);
        drop(runner);
        drop(code);
        drop(confinement);
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                if let Some(reason) = prepared.and_then(toolcell_sys::sandbox::Prepared::failure) {
                    return Err(SpawnError::Sandbox { reason });
                }
                return Err(io_err(format!("launching {}", spec.interpreter.display()))(
                    e,
                ));
            }
        };
        let outer = child.id();
        let mut sandbox = crate::sandbox::SandboxInfo::Off {
            reason: spec
                .sandbox_off
                .clone()
                .unwrap_or_else(|| "sandbox.mode = \"off\"".into()),
        };
        let (mut proxy, mut handle, mut namespace) = (None, None, None);
        let pid = match (prepared, plan) {
            (Some(prepared), Some(plan)) => {
                let report = tokio::task::spawn_blocking(move || {
                    prepared.started(outer, SANDBOX_REPORT_TIMEOUT)
                })
                .await
                .unwrap_or_else(|e| {
                    Err(toolcell_sys::sandbox::SandboxError::Refused(e.to_string()))
                });
                let started = match report {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = child.start_kill();
                        let _ = child.wait().await;
                        return Err(SpawnError::Sandbox {
                            reason: e.to_string(),
                        });
                    }
                };
                namespace = started.namespace.map(Arc::new);
                let mut listeners = started.listeners.into_iter();
                if let Some(rule) = plan.rule.clone()
                    && let Some(l) = listeners.next()
                {
                    proxy = Some(
                        crate::sandbox::Proxy::start(l, rule)
                            .map_err(io_err("starting the sandbox's proxy"))?,
                    );
                }
                if plan.rpc_port.is_some()
                    && let Some(l) = listeners.next()
                {
                    server.accept_also(l)?;
                }
                sandbox = crate::sandbox::SandboxInfo::Namespaces {
                    network: spec.sandbox.network.name().to_string(),
                };
                handle = Some(Arc::new(toolcell_tools::SandboxHandle {
                    pid: started.pid,
                    started: toolcell_sys::process::start_time(started.pid),
                    view: toolcell_sys::sandbox::View::new(
                        &plan.layout.writable,
                        &plan.layout.hidden,
                        &spec.sandbox.readable,
                    ),
                    env: plan.env.clone(),
                }));
                started.pid
            }
            _ => outer.unwrap_or(0),
        };
        let lineage = toolcell_sys::lineage::Lineage::adopt(pid).map(Arc::new);
        let _ = family.set(Family {
            root: pid,
            lineage: lineage.clone(),
        });
        // Into the kernel's cgroup. A cgroup migration waits for an RCU
        // grace period (~10 ms), so it runs on a blocking thread while
        // Python starts, and is awaited before `hello`: the runner runs no
        // cell code, and starts no process, before it has that.
        let joining = cgroup
            .as_mut()
            .and_then(toolcell_sys::cgroup::KernelCgroup::take_procs)
            .map(|procs| {
                tokio::task::spawn_blocking(move || {
                    use std::io::Write;
                    std::fs::File::from(procs).write_all(pid.to_string().as_bytes())
                })
            });
        let requests = match req_w {
            Some(w) => RequestPipe::new(
                tokio::net::unix::pipe::Sender::from_owned_fd(w)
                    .map_err(io_err("opening the request pipe"))?,
            ),
            None => match child.stdin.take() {
                Some(stdin) => RequestPipe::new(stdin),
                None => {
                    let _ = child.start_kill();
                    return Err(io_err("opening the request pipe")(
                        std::io::ErrorKind::BrokenPipe.into(),
                    ));
                }
            },
        };
        if let Some(j) = joining {
            let joined = j
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
            if let Err(e) = joined {
                let _ = child.start_kill();
                return Err(io_err(
                    "moving the kernel into its cgroup (set TOOLCELL_CGROUP=off to do without)",
                )(e));
            }
        }
        Ok(Launched {
            child,
            pid,
            requests,
            server,
            cgroup,
            lineage,
            namespace,
            marker,
            payload: if inband {
                crate::remote::payload(runner_source, stub)
            } else {
                Vec::new()
            },
            sandbox,
            proxy,
            handle,
        })
    }

    pub(super) async fn handshake(
        &mut self,
        payload: &[u8],
        hello: &Request,
    ) -> Result<(), SpawnError> {
        let line = hello.to_line().map_err(|e| SpawnError::Io {
            what: "encoding hello".into(),
            source: std::io::Error::other(e),
        })?;
        let not_ready = |k: &Self, reason: String| match &k.spec.remote {
            Some((name, _)) => SpawnError::Remote {
                remote: name.clone(),
                reason: reason.replace("it exited", "its command exited"),
                stderr: k.early_text(StreamKind::Stderr),
            },
            None => SpawnError::NotReady {
                interpreter: k.spec.interpreter.display().to_string(),
                reason,
                stderr: k.early_text(StreamKind::Stderr),
            },
        };
        let mut first = payload.to_vec();
        first.extend_from_slice(&line);
        let deadline = Instant::now() + self.spec.startup_timeout;
        // A command that never reads (a stalled connection) must not hold
        // the spawn past the startup timeout.
        let Ok(sent) = tokio::time::timeout_at(deadline, self.requests.send(&first)).await else {
            self.kill_now();
            let _ = tokio::time::timeout(Duration::from_millis(500), self.drain_early()).await;
            return Err(not_ready(
                self,
                format!(
                    "it did not read its first request within {:?}",
                    self.spec.startup_timeout
                ),
            ));
        };
        if sent.is_err() {
            // The child died at once; collect what it said.
            let _ = tokio::time::timeout(Duration::from_secs(2), self.drain_early()).await;
            let how = match tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await {
                Ok(Ok(status)) => describe_exit(&status),
                _ => "it exited".into(),
            };
            return Err(not_ready(
                self,
                format!("{how} before reading its first request"),
            ));
        }
        loop {
            let ev = tokio::select! {
                ev = self.events.recv() => ev,
                () = tokio::time::sleep_until(deadline) => {
                    self.kill_now();
                    let _ = tokio::time::timeout(Duration::from_millis(500), self.drain_early()).await;
                    return Err(not_ready(self, format!("no ready frame within {:?}", self.spec.startup_timeout)));
                }
            };
            match ev {
                Some(Ev::Frame(StreamKind::Stdout, body)) => match Reply::from_body(&body) {
                    Ok(Reply::Ready(r)) => {
                        self.python = r.python;
                        return Ok(());
                    }
                    _ => tracing::warn!(kernel = %self.spec.id, "unexpected frame before ready"),
                },
                Some(Ev::Frame(..)) => {}
                Some(Ev::Raw(s, b)) => self.keep_early(s, b),
                Some(Ev::Eof(s)) => {
                    self.eof[idx(s)] = true;
                    if self.eof == [true, true] {
                        let status = self.child.wait().await.ok();
                        let how =
                            status.map_or_else(|| "it exited".to_string(), |s| describe_exit(&s));
                        return Err(not_ready(self, format!("{how} before saying ready")));
                    }
                }
                None => return Err(not_ready(self, "its output pipes closed".into())),
            }
        }
    }

    pub(super) async fn drain_early(&mut self) {
        while let Some(ev) = self.events.recv().await {
            match ev {
                Ev::Raw(s, b) => self.keep_early(s, b),
                Ev::Eof(s) => {
                    self.eof[idx(s)] = true;
                    if self.eof == [true, true] {
                        return;
                    }
                }
                Ev::Frame(..) => {}
            }
        }
    }

    pub(super) fn keep_early(&mut self, s: StreamKind, b: Vec<u8>) {
        let held: usize = self.early.iter().map(|(_, b)| b.len()).sum();
        if held < EARLY_OUTPUT_CAP {
            self.early.push((s, b));
        }
    }

    pub(super) fn early_text(&self, which: StreamKind) -> String {
        let bytes: Vec<u8> = self
            .early
            .iter()
            .filter(|(s, _)| *s == which)
            .flat_map(|(_, b)| b.iter().copied())
            .collect();
        let text = self.spec.redactor.clean(&bytes);
        last_lines(&text, 10)
    }
}

/// The tool-call server of a local kernel: in-band (no socket) for R and
/// JavaScript, on 127.0.0.1 with `[rpc] transport = "tcp"`, else a Unix
/// socket in the kernel's directory that only the kernel's `family` (and,
/// with cgroups, its cgroup) may use.
fn tool_server(
    spec: &KernelSpec,
    dir: &Path,
    inband: bool,
    cgroup: Option<&toolcell_sys::cgroup::KernelCgroup>,
    family: &Arc<std::sync::OnceLock<Family>>,
) -> Result<Server, SpawnError> {
    if inband {
        // No socket: tool calls come in-band, checked by the same server.
        return Ok(Server::unbound(
            Arc::clone(&spec.dispatch),
            ServerConfig::default(),
        )?);
    }
    if spec.rpc_tcp {
        return Ok(Server::bind_tcp(
            Arc::clone(&spec.dispatch),
            ServerConfig::default(),
        )?);
    }
    let family = Arc::clone(family);
    let config = ServerConfig::default().peer_check(toolcell_rpc::PeerCheck::new(move |pid| {
        family
            .get()
            .is_some_and(|f| u32::try_from(pid).is_ok_and(|p| f.admits(p)))
    }));
    let config = match cgroup {
        Some(cg) => config.peer_cgroup(cg.proc_path()),
        None => config,
    };
    Ok(Server::bind_unix(dir, Arc::clone(&spec.dispatch), config)?)
}

/// The kernel's environment and the marker every descendant carries (see
/// `Kernel::tree`): the socket's endpoint and token for a socket kernel,
/// only the marker for an in-band one.
fn kernel_env(
    spec: &KernelSpec,
    dir: &Path,
    server: &Server,
    inband: bool,
) -> (Vec<(OsString, OsString)>, String) {
    let mut env = spec.env.clone();
    let marker = if inband {
        let marker = format!("inband:{}", spec.id);
        env.retain(|(k, _)| k != "TOOLCELL_RPC" && k != "TOOLCELL_RPC_TOKEN");
        env.push(("TOOLCELL_RPC".into(), marker.clone().into()));
        marker
    } else {
        crate::env::toolcell_vars(&mut env, dir, server.endpoint(), server.token().expose());
        server.endpoint().to_string()
    };
    (env, marker)
}

/// What the child does between fork and exec: `[limits]`, the Landlock
/// and seccomp confinement, the request pipe on fd 3, the runner on fd 4
/// (and its compiled code on fd 5), and a session of its own.
fn install_child_setup(
    cmd: &mut std::process::Command,
    limits: crate::limits::Limits,
    child_confinement: Option<crate::confine::ChildConfinement>,
    sandbox: Option<toolcell_sys::sandbox::ChildSandbox>,
    fds: Option<(i32, i32)>,
    code_fd: Option<i32>,
) {
    // SAFETY: only async-signal-safe calls (sched_setscheduler, dup2,
    // fcntl, setsid, setrlimit, sigaction, prctl, landlock_restrict_self,
    // seccomp, and the sandbox's unshare, mount and fork) run between fork
    // and exec.
    unsafe {
        cmd.pre_exec(move || {
            toolcell_sys::process::apply_kernel_scheduling();
            limits.apply_in_child()?;
            // Returns in the sandboxed runner (pid 2 of its namespace).
            if let Some(s) = &sandbox {
                s.enter()?;
            }
            if let Some(c) = &child_confinement {
                if sandbox.is_some() {
                    // Its /tmp is the sandbox's own, not the host's the
                    // ruleset was built with.
                    c.allow_beneath_in_child(c"/tmp")?;
                }
                c.restrict()?;
            }
            // Move both to high fds first (close-on-exec), so neither
            // dup2 below can clobber the other; dup2 onto 3 and 4 then
            // clears close-on-exec on the targets only.
            let hi = |fd: i32| {
                let n = nix::libc::fcntl(fd, nix::libc::F_DUPFD_CLOEXEC, 10);
                if n < 0 {
                    Err(std::io::Error::last_os_error())
                } else {
                    Ok(n)
                }
            };
            if let Some((r, runner_fd)) = fds {
                let (r_hi, runner_hi) = (hi(r)?, hi(runner_fd)?);
                let code_hi = match code_fd {
                    Some(c) => Some(hi(c)?),
                    None => None,
                };
                if nix::libc::dup2(r_hi, 3) < 0 || nix::libc::dup2(runner_hi, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(c) = code_hi
                    && nix::libc::dup2(c, 5) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            Ok(())
        });
    }
}

/// How long a sandbox may take to report that it holds.
const SANDBOX_REPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why sandboxes are refused on this machine, once one was (for
/// `mode = "auto"`: later kernels do not try again).
static UNAVAILABLE: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

fn unavailable() -> Option<String> {
    UNAVAILABLE.lock().ok().and_then(|g| g.clone())
}

/// Whether a sandbox failure is the machine's, not this kernel's: the
/// namespaces, the user mapping, the mount API or `/proc` refused.
fn machine_refusal(reason: &str) -> bool {
    [
        "creating a user namespace",
        "creating the user and other namespaces",
        "mapping the user",
        "mounting /proc",
        "making / private",
        "making the filesystem read-only",
    ]
    .iter()
    .any(|m| reason.starts_with(m))
        || reason.contains("Not supported by this kernel")
}

/// Remembers a machine's refusal (`mode = "auto"`): later kernels run
/// unsandboxed without trying again, and the warning is logged once.
fn remember_unavailable(reason: &str) {
    tracing::warn!(%reason, "kernels run unsandboxed: the machine refused a sandbox");
    if let Ok(mut g) = UNAVAILABLE.lock() {
        *g = Some(reason.to_string());
    }
}

/// Writes a socket kernel's stub module and runner into its directory;
/// returns the runner, open for the child's fd 4.
fn write_runner_files(
    spec: &KernelSpec,
    dir_handle: &PrivateDir,
    stub: &str,
) -> Result<std::fs::File, SpawnError> {
    let (runner_name, runner_source) = spec.language.runner();
    let stub_name = spec.language.stub_file();
    write_in(dir_handle, stub_name, stub).map_err(io_err(format!("writing {stub_name}")))?;
    // The stub compiled once by this interpreter, when remembered: the
    // runner loads it instead of compiling the source (~5 ms a start).
    if spec.language == crate::language::Language::Python
        && let Some(code) = crate::interpreter::stub_code(&spec.interpreter, stub)
    {
        use std::io::Write as _;
        let written = dir_handle
            .create_file("toolcell_tools.code")
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|mut f| f.write_all(&code));
        if let Err(e) = written {
            tracing::debug!("cannot write the stub's compiled code: {e}");
        }
    }
    write_in(dir_handle, runner_name, runner_source)
        .map_err(io_err(format!("writing {runner_name}")))
}

#[cfg(test)]
mod tests {
    use super::machine_refusal;

    #[test]
    fn only_the_machines_refusals_drop_the_sandbox_under_auto() {
        for machine in [
            "creating a user namespace (unshare): this user may not (sysctl kernel.unprivileged_userns_clone, or on Ubuntu kernel.apparmor_restrict_unprivileged_userns): Operation not permitted (errno 1)",
            "creating a user namespace (unshare): the machine's limit is reached (sysctl user.max_user_namespaces): No space left (errno 28)",
            "mapping the user into its namespace: Permission denied (errno 13)",
            "making the filesystem read-only: Not supported by this kernel (errno 38)",
            "cloning a writable path: Not supported by this kernel (errno 38)",
        ] {
            assert!(machine_refusal(machine), "{machine}");
        }
        for kernel in [
            "the sandbox did not report within 10s",
            "cloning a writable or readable path: No such file or directory (errno 2)",
            "the sandbox's report did not name its program",
        ] {
            assert!(!machine_refusal(kernel), "{kernel}");
        }
    }
}
