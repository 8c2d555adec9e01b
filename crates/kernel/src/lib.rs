//! One persistent toolcell kernel: a Python, R or JavaScript process that
//! keeps its state from cell to cell, calls the host's tools, and hands back
//! each cell as a cleaned, bounded result (docs/protocol.md, docs/result.md).
//!
//! A [`Kernel`] is spawned from a [`KernelSpec`] (locally, or on a remote
//! through a command's stdio) and runs one cell at a time
//! ([`Kernel::execute`]). The host that owns many kernels — sessions,
//! queues, the warm pool, configuration, the journal — is the
//! `toolcell-host` crate above this one.
//!
//! ```text
//! Kernel::execute ─▶ fd 3: execute request ─▶ runner (persistent namespace)
//!                                               │ fd 1/2: output + frames   │ rpc.sock: tool calls
//!                                               ▼                            ▼
//!          protocol::Decoder ─▶ redact::Cleaner ─▶ Capture          rpc::Server ─▶ tools
//! ```
//!
//! What a kernel is made of, and the rules it keeps:
//!
//! - a private 0700 directory holding the runner (embedded from
//!   `runner/runner.py`), the generated stub module and the rpc socket;
//!   removed when the kernel dies;
//! - the scrubbed environment ([`env`]; SECURITY.md,
//!   "Host secrets stay out of the kernel's environment") and the interpreter
//!   resolved once per host ([`interpreter`]);
//! - stdin `/dev/null`, stdout/stderr pipes read into frame decoders, and
//!   the request pipe on fd 3 — whose EOF makes the runner kill its whole
//!   process group, so no kernel outlives its host;
//! - output cleaned (ANSI, progress lines, secrets) before it is counted,
//!   captured (head 40% / tail 60% of the cap), spilled to a 0600 file past
//!   the cap, or streamed to a live sink — O(cap) memory whatever a cell
//!   prints;
//! - timeouts and interrupts: SIGINT to the group, then after the grace a
//!   kill of the whole tree (group, `/proc` descendants, and anything
//!   carrying the kernel's `TOOLCELL_RPC` value in its environment), and the
//!   result says whether state survived;
//! - optional `[limits]` ([`limits`]: address space, CPU seconds per cell,
//!   open files, processes, file size; `setrlimit` in the child before exec)
//!   and, in strict mode, optional Landlock confinement ([`confine`]: writes
//!   only to the kernel's own directories and the temp dir).
//!
//! It pulls no SQLite, no MCP client and no HTTP/TLS stack: the tools it
//! offers are what its [`KernelSpec`] lists.
//!
//! # One kernel, by hand
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use toolcell_kernel::{CellOptions, Ending, Kernel, KernelSpec, Language, ids, interpreter};
//! use toolcell_tools::{ToolRegistry, ToolSettings};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let python = interpreter::resolve_for_host("", toolcell_kernel::Mode::Project, dir.path())?;
//! let registry = ToolRegistry::builtin()?;
//! let settings = Arc::new(ToolSettings::new(dir.path()));
//! let mut kernel = Kernel::spawn(KernelSpec {
//!     id: ids::kernel_id()?,
//!     interpreter: python.executable,
//!     python_version: python.version,
//!     mode: "project".into(),
//!     cwd: dir.path().to_path_buf(),
//!     env: toolcell_kernel::env::child_env(std::env::vars_os(), &[]),
//!     root: dir.path().join("kernels"),
//!     tools: registry.select(&["read_file"])?,
//!     dispatch: registry.dispatcher_shared(Arc::clone(&settings)),
//!     tool_settings: settings,
//!     rpc_tcp: false,
//!     redactor: toolcell_kernel::env::host_redactor(),
//!     startup_timeout: Duration::from_secs(30),
//!     limits: Default::default(),
//!     confine: false,
//!     remote: None,
//!     inband_tools: false,
//!     language: Language::Python,
//!     session: "demo".into(),
//!     lifecycle: None,
//!     files_cap: 0,
//!     sandbox: toolcell_kernel::sandbox::Policy::auto(),
//!     sandbox_off: None,
//! })
//! .await?;
//!
//! // State persists from one cell to the next.
//! let opts = CellOptions::default();
//! kernel.execute(&ids::CellId::generate()?, "x = 41", &opts).await;
//! let out = kernel.execute(&ids::CellId::generate()?, "print(x + 1)", &opts).await;
//! assert!(matches!(out.ending, Ending::Answered(_)), "{:?}", out.ending);
//! assert_eq!(out.stdout.text, "42\n");
//! kernel.shutdown(Duration::from_secs(2)).await;
//! # Ok(())
//! # }
//! ```

pub mod capture;
pub mod confine;
pub mod env;
pub mod extra;
pub mod figures;
pub mod fold;
pub mod ids;
pub mod interpreter;
pub mod kernel;
pub mod language;
pub mod limits;
pub mod remote;
pub mod result;
pub mod sandbox;
pub mod watch;

pub use extra::{ExtraTools, ToolSource};
pub use kernel::{
    CellOptions, CellOutcome, Ending, Kernel, KernelSpec, LiveSink, SpawnError, StreamKind,
};
pub use language::Language;
pub use result::{
    ChangedFile, Display, ExecuteResult, FileCounts, FilesChanged, KernelInfo, Status, Usage,
};
pub use toolcell_stubs::{Mode, OnTimeout};
