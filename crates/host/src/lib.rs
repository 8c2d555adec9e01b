//! What owns many toolcell kernels: the [`Registry`] of sessions, the
//! [`config`] read from `toolcell.toml`, the [`journal`] of every cell, and
//! the [`lifecycle`] of remote allocations (docs/serve.md, docs/result.md,
//! docs/tour.md, "Kernels and the warm pool").
//!
//! A [`Registry`] owns kernels — one live process per session key
//! `(owner, mode, interpreter, cwd, tools)` — and runs cells in them. A cell
//! goes through admission (an embedder [`Guard`] and `[guard] deny`), then
//! waits its turn in its kernel (strict FIFO), runs, and comes back as the
//! [`ExecuteResult`] of docs/result.md: cleaned output, status, exit code, tool
//! calls, hints, usage. Idle kernels are reaped, the least recently used is
//! evicted when `[kernels] max` is reached, and a warm pool keeps kernels
//! started ahead of the cells that will want them.
//!
//! ```text
//! execute(req) ─▶ admit ─▶ slot (session key) ─▶ toolcell_kernel::Kernel::execute
//!                   │                               (one process, its tools, its output)
//!                   └─▶ journal (SQLite row per result)
//! ```
//!
//! It sits above `toolcell-kernel` (one kernel: spawn, transport, cell,
//! output, result) and below the `toolcell` binary (serve, exec, the MCP
//! server, the daemon).
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
//! # Embedding
//!
//! ```
//! use toolcell_host::config::Config;
//! use toolcell_host::{ExecuteRequest, Registry, RegistryOptions, Status};
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

pub mod config;
#[cfg(feature = "journal")]
pub mod journal;
pub mod lifecycle;
pub mod registry;
mod spill;

pub use registry::{
    ExecuteRequest, Guard, KernelMode, KeyInfo, ONE_CELL_INOTIFY_MIN_ENTRIES, Registry,
    RegistryError, RegistryOptions, SessionInfo, SessionKey,
};
pub use toolcell_kernel::{
    ChangedFile, Display, ExecuteResult, ExtraTools, FileCounts, FilesChanged, KernelInfo,
    Language, Mode, OnTimeout, Status, ToolSource, Usage,
};
