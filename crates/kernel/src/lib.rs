//! Persistent Python kernels: the heart of toolcell (docs/protocol.md,
//! docs/result.md, README.md "Kernels and the warm pool").
//!
//! A [`Registry`] owns kernels — one live Python process per session key
//! `(owner, mode, interpreter, cwd, tools)` — and runs cells in them. A cell
//! goes through admission (an embedder [`Guard`] and `[guard] deny`), then
//! waits its turn in its kernel (strict FIFO), runs, and comes back as the
//! [`ExecuteResult`] of docs/result.md: cleaned output, status, exit code, tool
//! calls, hints, usage.
//!
//! ```text
//! execute(req) ─▶ admit ─▶ slot (session key) ─▶ Kernel::execute
//!                                                 │  fd 3: execute request
//!                                                 ▼
//!                               runner.py (persistent namespace)
//!                                 │ fd 1/2: output + frames   │ rpc.sock: tool calls
//!                                 ▼                            ▼
//!          protocol::Decoder ─▶ redact::Cleaner ─▶ Capture   rpc::Server ─▶ tools
//! ```
//!
//! What a kernel is made of, and the rules it keeps:
//!
//! - a private 0700 directory holding the runner (embedded from
//!   `runner/runner.py`), the generated `toolcell_tools.py` stub module and
//!   the rpc socket; removed when the kernel dies;
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
//! # Features
//!
//! - `journal` (default): [`journal`], the SQLite record of every cell
//!   (bundled SQLite via `rusqlite`), and `RegistryOptions::journal`.
//!   Without it the crate builds without a C compiler or SQLite, and
//!   `[journal]` keys are still read but nothing is recorded.
//! - `mcp` (default): `registry::McpSource` and `Config::mcp_specs`, the
//!   `[mcp_servers]` as tool sources (rmcp's client over stdio or HTTP).
//! - `web` (default): the web tools (`web_extract`, `web_search`) in the
//!   default tool set.
//!
//! With `default-features = false` the crate pulls none of SQLite, rmcp,
//! reqwest or rustls: one kernel with the file and process tools.
//!
//! # Embedding
//!
//! ```
//! use toolcell_kernel::config::Config;
//! use toolcell_kernel::{ExecuteRequest, Registry, RegistryOptions, Status};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let tmp = tempfile::tempdir()?;
//! // Options from a toolcell.toml (or RegistryOptions::default()).
//! let config = Config::from_toml_str("[execution]\ntimeout = 30\n", None)?;
//! let mut opts = RegistryOptions::from_config(&config, std::env::current_dir()?)?;
//! # opts.kernels_root = Some(tmp.path().join("kernels"));
//! # opts.spill_dir = tmp.path().join("spill");
//! let registry = Registry::new(opts)?;
//!
//! // State persists across cells of one owner (conversation).
//! let r = registry.execute(ExecuteRequest::new("x = 41").owner("chat-1")).await;
//! assert_eq!(r.status, Status::Success);
//! let r = registry.execute(ExecuteRequest::new("x + 1").owner("chat-1")).await;
//! assert_eq!(r.output, "42\n");
//! assert!(r.kernel.reused);
//!
//! // Tools are Python functions inside the cell.
//! let r = registry
//!     .execute(ExecuteRequest::new("print(terminal('echo hi')['output'], end='')").owner("chat-1"))
//!     .await;
//! assert_eq!((r.output.as_str(), r.tool_calls_made), ("hi\n", 1));
//!
//! // Errors come back as results, with the cell's line in the traceback.
//! let r = registry.execute(ExecuteRequest::new("1/0").owner("chat-1")).await;
//! assert_eq!((r.status, r.exit_code), (Status::Error, 1));
//! assert!(r.output.contains("ZeroDivisionError"));
//!
//! registry.shutdown_all().await;
//! # Ok(())
//! # }
//! ```

pub mod capture;
pub mod config;
pub mod confine;
pub mod env;
pub mod figures;
pub mod fold;
pub mod ids;
pub mod interpreter;
#[cfg(feature = "journal")]
pub mod journal;
pub mod kernel;
pub mod language;
pub mod lifecycle;
pub mod limits;
pub mod registry;
pub mod remote;
pub mod result;
mod spill;
pub mod watch;

pub use kernel::{
    CellOptions, CellOutcome, Ending, Kernel, KernelSpec, LiveSink, SpawnError, StreamKind,
};
pub use language::Language;
pub use registry::{
    ExecuteRequest, ExtraTools, Guard, KernelMode, KeyInfo, ONE_CELL_INOTIFY_MIN_ENTRIES, Registry,
    RegistryError, RegistryOptions, SessionInfo, SessionKey, ToolSource,
};
pub use result::{
    ChangedFile, Display, ExecuteResult, FileCounts, FilesChanged, KernelInfo, Status, Usage,
};
pub use toolcell_stubs::{Mode, OnTimeout};
