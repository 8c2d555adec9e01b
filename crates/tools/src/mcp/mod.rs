//! MCP servers as tool sources: the client side of the Model Context Protocol
//! (rmcp), turning every tool of a configured server into a [`DynTool`] named
//! `SERVER.tool` (docs/mcp-servers.md).
//!
//! A host builds one [`McpHub`] from its `[mcp_servers.NAME]` entries and
//! shares it (it is `Send + Sync`, behind an `Arc`) among its kernels:
//!
//! - **Lazy start.** Nothing runs until [`McpHub::tools`] or a call needs a
//!   server. Servers start concurrently; each gets up to its
//!   `startup_timeout` for the MCP handshake and its tool list.
//! - **stdio servers** run in their own process group, with the
//!   configured `env` on top of the host's environment and `cwd`. Their
//!   stderr is drained into a small ring (the last 20 lines, each cut) that
//!   error messages quote; their stdout must carry only JSON-RPC lines of at
//!   most 17 MiB — anything else ends the connection with an error saying
//!   what the server printed.
//! - **url servers** speak streamable HTTP (reqwest with rustls).
//! - **Faults.** A server that dies, fails to start or breaks the protocol
//!   makes calls fail with a [`ToolError`] naming the server and quoting its
//!   last stderr lines; the next call (or [`McpHub::tools`]) starts it again,
//!   at most once every [`RESTART_INTERVAL`].
//! - **Redaction.** Everything a server says passes the host's redactor
//!   ([`McpHub::with_redactor`]) before it reaches a schema, a stub, a log or
//!   a message: tool descriptions and schemas, stderr lines, stdout
//!   garbage, error texts. A tool whose name or property names would have
//!   to be masked is left out.
//! - **Names.** A tool whose function name (or a parameter's) would clash
//!   with another of the server's in the stub module of any language
//!   (`get-user` and `get_user`) is left out, with a failure naming both
//!   ([`crate::screen::screen`]): a server's tool list never costs more than
//!   its own tools.
//! - **Tool list changes.** `notifications/tools/list_changed` (and a
//!   restart that brings other tools) bumps [`McpHub::generation`]; the next
//!   [`McpHub::tools`] re-lists.
//! - **Results** (see [`McpHub`]): `structuredContent` as it is; text
//!   content only → the texts joined with `"\n"`; otherwise a list of items
//!   where an image is saved to a new file (`0600`, random name) under
//!   [`ToolSettings::kernel_dir`](crate::ToolSettings::kernel_dir) (else the
//!   spill dir) and given as `{"type": "image", "mime", "path"}`.
//!   `isError: true` is a `ToolError` with the server's text. A result over
//!   [`MAX_RESULT_BYTES`] is an error saying so.
//! - **Ending.** [`McpHub::shutdown`] (or dropping the hub) ends every
//!   process group it started.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use toolcell_tools::mcp::{McpHub, McpServerSpec};
//!
//! let mut fs = McpServerSpec::stdio(
//!     "fs",
//!     ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/data"],
//! );
//! fs.startup_timeout = Duration::from_secs(30);
//! let hub = McpHub::new(vec![fs])?;
//! let now = hub.tools().await;
//! for tool in &now.tools {
//!     println!("{}", tool.name()); // fs.read_text_file, fs.list_directory, …
//! }
//! for failure in &now.failed {
//!     eprintln!("{}: {}", failure.server, failure.message);
//! }
//! hub.shutdown().await;
//! # Ok(()) }
//! ```

mod result;
mod server;
mod stdio;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use server::Server;
use toolcell_redact::Redactor;

use crate::tool::DynTool;
#[cfg(doc)]
use crate::tool::ToolError;

/// The largest tool result accepted from a server (decoded), in bytes.
pub const MAX_RESULT_BYTES: usize = 16 << 20;
/// The longest JSON-RPC message accepted from a server, in bytes: a result
/// at the cap plus room for its envelope and encoding.
pub(crate) const MAX_MESSAGE_BYTES: usize = 17 << 20;
/// A server that failed or died is started again at most this often.
pub const RESTART_INTERVAL: Duration = Duration::from_secs(5);
/// The default `startup_timeout`.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest server name.
const MAX_NAME: usize = 64;

/// One `[mcp_servers.NAME]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerSpec {
    /// The server's name: `[A-Za-z0-9_-]+`, at most 64 characters. Its tools
    /// are `NAME.tool`.
    pub name: String,
    /// A stdio server's program and arguments (empty for a `url` server).
    pub command: Vec<String>,
    /// Environment variables set for the server, on top of the host's.
    pub env: BTreeMap<String, String>,
    /// The server's working directory (`None`: the host's).
    pub cwd: Option<PathBuf>,
    /// A streamable HTTP server's URL (`http://` or `https://`).
    pub url: Option<String>,
    /// The tools enabled (their MCP names); empty: all of them.
    pub tools: Vec<String>,
    /// How long a start (handshake and tool list) may take.
    pub startup_timeout: Duration,
}

impl McpServerSpec {
    /// A stdio server run as `command`.
    pub fn stdio<I, S>(name: impl Into<String>, command: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            name: name.into(),
            command: command.into_iter().map(Into::into).collect(),
            env: BTreeMap::new(),
            cwd: None,
            url: None,
            tools: Vec::new(),
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
        }
    }

    /// A streamable HTTP server at `url`.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            url: Some(url.into()),
            ..Self::stdio(name, Vec::<String>::new())
        }
    }

    /// Checks the entry.
    ///
    /// # Errors
    /// [`McpError`] naming the server and what is wrong.
    pub fn validate(&self) -> Result<(), McpError> {
        let server = self.name.clone();
        if self.name.is_empty()
            || self.name.len() > MAX_NAME
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(McpError::BadName(server));
        }
        let has_command = !self.command.is_empty();
        let url = self.url.as_deref().filter(|u| !u.is_empty());
        match (has_command, url) {
            (true, Some(_)) => return Err(McpError::CommandAndUrl(server)),
            (false, None) => return Err(McpError::NoCommandOrUrl(server)),
            (true, None) => {
                if self.command[0].trim().is_empty() {
                    return Err(McpError::Invalid {
                        server,
                        problem: "the command's program is empty".into(),
                    });
                }
            }
            (false, Some(url)) => {
                let parsed = reqwest::Url::parse(url).map_err(|e| McpError::Invalid {
                    server: server.clone(),
                    problem: format!("url {url:?} is not a valid URL ({e})"),
                })?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(McpError::Invalid {
                        server,
                        problem: format!("url {url:?} must be http:// or https://"),
                    });
                }
            }
        }
        if self.startup_timeout.is_zero() {
            return Err(McpError::Invalid {
                server,
                problem: "startup_timeout must be more than 0".into(),
            });
        }
        if let Some(t) = self.tools.iter().find(|t| t.trim().is_empty()) {
            return Err(McpError::Invalid {
                server,
                problem: format!("`tools` has an empty name ({t:?})"),
            });
        }
        for (k, v) in &self.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                return Err(McpError::Invalid {
                    server,
                    problem: format!("env has an invalid variable {k:?}"),
                });
            }
        }
        Ok(())
    }
}

/// A configuration of MCP servers that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// A server name outside `[A-Za-z0-9_-]{1,64}`.
    #[error("MCP server name {0:?} cannot be used: a name is 1 to 64 letters, digits, `_` or `-`")]
    BadName(String),
    /// Two servers with one name.
    #[error("two MCP servers are named `{0}`")]
    Duplicate(String),
    /// Both `command` and `url`.
    #[error("MCP server `{0}` has both `command` and `url`; give one")]
    CommandAndUrl(String),
    /// Neither `command` nor `url`.
    #[error("MCP server `{0}` has neither `command` (stdio) nor `url` (streamable HTTP)")]
    NoCommandOrUrl(String),
    /// Another problem with one entry.
    #[error("MCP server `{server}`: {problem}")]
    Invalid {
        /// The server.
        server: String,
        /// What is wrong.
        problem: String,
    },
}

/// A server that is not usable now, or whose tools were partly left out.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct McpFailure {
    /// The server's name.
    pub server: String,
    /// What went wrong, with the server's last stderr lines when it ran.
    pub message: String,
}

/// The tools of every server, as of one [`McpHub::tools`].
#[derive(Clone)]
#[non_exhaustive]
pub struct McpTools {
    /// Every tool of every server (`SERVER.tool`), servers in configuration
    /// order, tools in the order the server lists them. A server that is
    /// down keeps the tools of its last listing (a call starts it again).
    pub tools: Vec<Arc<dyn DynTool>>,
    /// Servers that failed to start or died, and tools left out.
    pub failed: Vec<McpFailure>,
    /// [`McpHub::generation`] when the tools were read.
    pub generation: u64,
}

impl fmt::Debug for McpTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpTools")
            .field(
                "tools",
                &self.tools.iter().map(|t| t.name()).collect::<Vec<_>>(),
            )
            .field("failed", &self.failed)
            .field("generation", &self.generation)
            .finish()
    }
}

/// The MCP servers of one host, started on demand and shared.
pub struct McpHub {
    servers: Vec<Arc<Server>>,
    generation: Arc<AtomicU64>,
}

/// The redactor a hub uses unless given one: the built-in rules plus the
/// values of this process's secret-named environment variables.
fn default_redactor() -> Redactor {
    Redactor::from_env().unwrap_or_else(|_| Redactor::builtin())
}

impl fmt::Debug for McpHub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpHub")
            .field(
                "servers",
                &self
                    .servers
                    .iter()
                    .map(|s| &s.spec.name)
                    .collect::<Vec<_>>(),
            )
            .field("generation", &self.generation())
            .finish()
    }
}

impl McpHub {
    /// A hub for `specs`; nothing is started yet. What the servers send
    /// goes through the built-in redaction rules and this process's secret
    /// environment values (see [`McpHub::with_redactor`]).
    ///
    /// # Errors
    /// [`McpError`] for the first entry that cannot be used (see
    /// [`McpServerSpec::validate`]) or a name used twice.
    pub fn new(specs: Vec<McpServerSpec>) -> Result<Arc<Self>, McpError> {
        Self::with_redactor(specs, default_redactor())
    }

    /// A hub for `specs` whose servers' words pass `redactor` (the host's)
    /// before anyone sees them: every tool's description and schemas
    /// ([`SchemaTool::redacted`](crate::SchemaTool::redacted); a tool whose
    /// name or property names would have to be masked is left out), the
    /// lines of their stderr (in logs and messages), what they print on
    /// stdout by mistake, and their error messages.
    ///
    /// # Errors
    /// As [`McpHub::new`].
    pub fn with_redactor(
        specs: Vec<McpServerSpec>,
        redactor: Redactor,
    ) -> Result<Arc<Self>, McpError> {
        let generation = Arc::new(AtomicU64::new(0));
        let mut servers: Vec<Arc<Server>> = Vec::with_capacity(specs.len());
        for spec in specs {
            spec.validate()?;
            if servers.iter().any(|s| s.spec.name == spec.name) {
                return Err(McpError::Duplicate(spec.name));
            }
            servers.push(Server::new(spec, Arc::clone(&generation), redactor.clone()));
        }
        Ok(Arc::new(Self {
            servers,
            generation,
        }))
    }

    /// The configured servers' names, in order.
    pub fn server_names(&self) -> impl Iterator<Item = &str> {
        self.servers.iter().map(|s| s.spec.name.as_str())
    }

    /// Starts every server that is not running (one that failed or died
    /// again at most once per [`RESTART_INTERVAL`]), concurrently, waits for
    /// each up to its `startup_timeout`, re-lists the tools of servers that
    /// said theirs changed, and returns the tools of every server.
    pub async fn tools(&self) -> McpTools {
        let mut tasks = tokio::task::JoinSet::new();
        for (i, server) in self.servers.iter().enumerate() {
            let server = Arc::clone(server);
            tasks.spawn(async move { (i, server.current().await) });
        }
        let mut results = Vec::with_capacity(self.servers.len());
        while let Some(joined) = tasks.join_next().await {
            if let Ok(r) = joined {
                results.push(r);
            }
        }
        results.sort_by_key(|(i, _)| *i);
        let mut out = McpTools {
            tools: Vec::new(),
            failed: Vec::new(),
            generation: 0,
        };
        for (i, current) in results {
            out.tools.extend(current.tools);
            let name = &self.servers[i].spec.name;
            out.failed
                .extend(current.problems.into_iter().map(|message| McpFailure {
                    server: name.clone(),
                    message,
                }));
        }
        out.generation = self.generation();
        out
    }

    /// Bumped whenever a server's tool list may have changed (a
    /// `notifications/tools/list_changed`, or a start that listed other
    /// tools than before): a host that built stubs at an older generation
    /// calls [`McpHub::tools`] again.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The pid (and process group id) of stdio server `name` while it runs.
    pub fn server_pid(&self, name: &str) -> Option<i32> {
        self.servers
            .iter()
            .find(|s| s.spec.name == name)
            .and_then(|s| s.pid())
    }

    /// Ends every server this hub started: SIGTERM to each process group,
    /// a moment to exit, then SIGKILL. Later calls fail; nothing restarts.
    pub async fn shutdown(&self) {
        let mut tasks = tokio::task::JoinSet::new();
        for server in &self.servers {
            let server = Arc::clone(server);
            tasks.spawn(async move { server.shutdown().await });
        }
        while tasks.join_next().await.is_some() {}
    }
}

impl Drop for McpHub {
    fn drop(&mut self) {
        for server in &self.servers {
            server.kill();
        }
    }
}

/// The HTTP client for url servers, built once (rustls with ring, like the
/// web tools; no proxy-less surprises: reqwest's defaults otherwise).
fn http_client() -> Result<reqwest::Client, String> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let _ = rustls::crypto::ring::default_provider().install_default();
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(15))
                .pool_idle_timeout(Duration::from_secs(30))
                .build()
                .map_err(|e| e.to_string())
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_are_checked() {
        let ok = McpServerSpec::stdio("fs-1_x", ["node", "server.js"]);
        assert_eq!(ok.validate(), Ok(()));
        assert!(matches!(
            McpServerSpec::stdio("a.b", ["x"]).validate(),
            Err(McpError::BadName(_))
        ));
        assert!(matches!(
            McpServerSpec::stdio("", ["x"]).validate(),
            Err(McpError::BadName(_))
        ));
        let mut both = McpServerSpec::stdio("s", ["x"]);
        both.url = Some("http://127.0.0.1:1/mcp".into());
        assert_eq!(both.validate(), Err(McpError::CommandAndUrl("s".into())));
        assert_eq!(
            McpServerSpec::stdio("s", Vec::<String>::new()).validate(),
            Err(McpError::NoCommandOrUrl("s".into()))
        );
        let err = McpServerSpec::http("s", "ftp://x").validate().unwrap_err();
        assert!(err.to_string().contains("http://"), "{err}");
        let mut zero = McpServerSpec::stdio("s", ["x"]);
        zero.startup_timeout = Duration::ZERO;
        assert!(zero.validate().is_err());
        let dup = McpHub::new(vec![
            McpServerSpec::stdio("s", ["x"]),
            McpServerSpec::stdio("s", ["y"]),
        ]);
        assert_eq!(dup.unwrap_err(), McpError::Duplicate("s".into()));
    }
}
