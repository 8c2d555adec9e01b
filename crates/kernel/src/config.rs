//! `toolcell.toml`: the configuration of SPEC §11, where each value came from,
//! and CLI overrides.
//!
//! Every key is optional and has the default SPEC §11 gives. A file is read
//! strictly: an unknown section or key, a wrong type or an out-of-range value
//! is a [`ConfigError`] naming the key as `section.key`, what it accepts and
//! what it got — never a silent fallback:
//!
//! ```text
//! /home/me/proj/toolcell.toml: execution.timeout: expected a number of seconds > 0, got -1
//! /home/me/proj/toolcell.toml: unknown key `execution.timout` (known keys in [execution]: timeout, …)
//! --mode: execution.mode: expected "project" or "strict", got "fast"
//! ```
//!
//! [`Config::discover`] finds the file (`--config`, else `./toolcell.toml`,
//! else the user config dir), [`Config::set_override`] applies a CLI flag with
//! the same parsing and checks, and [`Config::to_toml_with_sources`] prints
//! the effective configuration with, after each key, where its value came
//! from (`# default`, `# from /path/toolcell.toml`, `# from --timeout`).
//!
//! ```
//! use std::time::Duration;
//! use toolcell_kernel::config::{Config, Mode, Source};
//!
//! let mut config = Config::from_toml_str("[execution]\nmode = \"strict\"\n", None)?;
//! config.set_override("execution.timeout", "30")?;
//! assert_eq!(config.execution.mode, Mode::Strict);
//! assert_eq!(config.timeout(), Duration::from_secs(30));
//! assert_eq!(config.source("execution.timeout"), Some(&Source::Flag("--timeout".into())));
//! assert!(config.to_toml_with_sources().contains("timeout = 30  # from --timeout"));
//!
//! let err = Config::from_toml_str("[kernels]\nmax_kernels = 0\n", None).unwrap_err();
//! assert_eq!(err.to_string(), "kernels.max_kernels: expected a whole number >= 1, got 0");
//! # Ok::<(), toolcell_kernel::config::ConfigError>(())
//! ```
//!
//! Durations are `f64` seconds in the file (an integer is fine too); the
//! typed getters ([`Config::timeout`], …) return [`Duration`]s.
//!
//! Besides SPEC §11's keys, resource limits and confinement (issue 10), all
//! off by default:
//!
//! ```text
//! [execution]  confine=false     true: Landlock-confine kernels (needs mode="strict", Linux, ABI >= 3)
//! [limits]     memory=0          address space per process, bytes or "512MiB"/"2GiB"/"1.5G" (RLIMIT_AS)
//!              cpu_seconds=0     CPU seconds per cell (RLIMIT_CPU, re-armed before each cell)
//!              open_files=0      descriptors per process (RLIMIT_NOFILE)
//!              processes=0       processes + threads of the whole user (RLIMIT_NPROC)
//!              file_size=0       largest file written, bytes or a size string (RLIMIT_FSIZE)
//! ```
//!
//! `0` means no limit; [`Config::limits`] gives them as
//! [`crate::limits::Limits`]. `toolcell config` prints sizes in bytes.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Value;

/// The file name looked for in the working directory and the user config dir.
pub const FILE_NAME: &str = "toolcell.toml";

/// Largest accepted number of seconds for any duration key (about 31 years):
/// large enough to mean "never", small enough that deadlines never overflow.
pub const MAX_SECONDS: f64 = 1e9;

/// Largest config file read (a config is a few hundred bytes; this bounds
/// the memory a wrong `--config` path can cost).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The tools enabled by default (`[tools] enabled` when the configuration
/// does not set it): every tool linked into the binary whose registration
/// says it is on by default (`Tool::DEFAULT_ENABLED`), sorted. Derived from
/// the tools registry, so a new tool needs no entry here.
pub fn default_tools() -> Vec<String> {
    toolcell_tools::default_enabled_tools()
}

/// Longest rendering of an offending value quoted in an error message.
const MAX_GOT_CHARS: usize = 80;

macro_rules! choice_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $( $(#[$vmeta])* #[serde(rename = $text)] $variant, )+
        }

        impl $name {
            /// Every accepted spelling, in documentation order.
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            /// The spelling used in `toolcell.toml`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $text, )+
                }
            }

            /// Parses the exact spelling used in `toolcell.toml`.
            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $( $text => Some(Self::$variant), )+
                    _ => None,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Named for $name {
            const NAMES: &'static [&'static str] = Self::NAMES;
            fn name(self) -> &'static str {
                self.as_str()
            }
            fn from_name(text: &str) -> Option<Self> {
                Self::parse(text)
            }
        }
    };
}

/// The closed sets of names a key accepts (`mode`, `on_timeout`, …).
pub trait Named: Sized + Copy + 'static {
    /// Every accepted spelling, in documentation order.
    const NAMES: &'static [&'static str];
    /// The spelling used in `toolcell.toml`.
    fn name(self) -> &'static str;
    /// Parses the exact spelling used in `toolcell.toml`.
    fn from_name(text: &str) -> Option<Self>;
}

pub use toolcell_tools::schema::{Mode, OnTimeout};

impl Named for Mode {
    const NAMES: &'static [&'static str] = &["project", "strict"];
    fn name(self) -> &'static str {
        match self {
            Mode::Strict => "strict",
            _ => "project",
        }
    }
    fn from_name(text: &str) -> Option<Self> {
        match text {
            "project" => Some(Mode::Project),
            "strict" => Some(Mode::Strict),
            _ => None,
        }
    }
}

impl Named for OnTimeout {
    const NAMES: &'static [&'static str] = &["interrupt", "kill"];
    fn name(self) -> &'static str {
        match self {
            OnTimeout::Kill => "kill",
            _ => "interrupt",
        }
    }
    fn from_name(text: &str) -> Option<Self> {
        match text {
            "interrupt" => Some(OnTimeout::Interrupt),
            "kill" => Some(OnTimeout::Kill),
            _ => None,
        }
    }
}

/// serde for the [`Named`] types defined in other crates.
mod named {
    use super::Named;
    use serde::{Deserialize as _, Deserializer, Serializer, de::Error as _};

    pub(super) fn serialize<T: Named, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(value.name())
    }

    pub(super) fn deserialize<'de, T: Named, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
        let text = String::deserialize(d)?;
        T::from_name(&text).ok_or_else(|| D::Error::unknown_variant(&text, T::NAMES))
    }
}

choice_enum! {
    /// `[execution] kernel_mode`: one kernel per session, or a fresh one per cell.
    pub enum KernelMode {
        /// One persistent kernel per session key.
        #[default]
        Session = "session",
        /// Each cell runs in a fresh kernel discarded afterwards.
        PerCall = "per-call",
    }
}

choice_enum! {
    /// `[rpc] transport` (SPEC §7).
    pub enum Transport {
        /// A Unix socket in the kernel's private directory.
        #[default]
        Unix = "unix",
        /// 127.0.0.1 on an ephemeral port.
        Tcp = "tcp",
    }
}

choice_enum! {
    /// `[web] search_provider` (SPEC §8 `web_search`).
    pub enum SearchProvider {
        /// No provider: `web_search` explains how to configure one.
        #[default]
        None = "",
        /// A SearXNG instance's JSON API at `search_url`.
        Searxng = "searxng",
        /// The Brave Search API.
        Brave = "brave",
    }
}

/// `[execution]`: limits and behaviour of one cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Execution {
    /// Seconds a cell may run (> 0).
    pub timeout: f64,
    /// Tool calls allowed per cell (>= 1).
    pub max_tool_calls: u32,
    /// Interpreter and cwd selection.
    #[serde(with = "named")]
    pub mode: Mode,
    /// Explicit interpreter (a path, or a name looked up on PATH); empty = resolve per `mode`.
    pub python: String,
    /// What a timeout does.
    #[serde(with = "named")]
    pub on_timeout: OnTimeout,
    /// Seconds to wait for the result after SIGINT (>= 0).
    pub interrupt_grace: f64,
    /// Seconds between SIGTERM and SIGKILL (>= 0).
    pub kill_grace: f64,
    /// One kernel per session or one per cell.
    pub kernel_mode: KernelMode,
    /// Confine strict-mode kernels with Landlock (writes only to their own
    /// directories and the temp dir); requires `mode = "strict"`.
    pub confine: bool,
}

impl Default for Execution {
    fn default() -> Self {
        Self {
            timeout: 300.0,
            max_tool_calls: 50,
            mode: Mode::Project,
            python: String::new(),
            on_timeout: OnTimeout::Interrupt,
            interrupt_grace: 2.0,
            kill_grace: 2.0,
            kernel_mode: KernelMode::Session,
            confine: false,
        }
    }
}

/// `[kernels]`: the registry's bounds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Kernels {
    /// Live kernels at most (>= 1).
    pub max_kernels: usize,
    /// Seconds an idle kernel lives before it is reaped (> 0).
    pub idle_timeout: f64,
    /// Ready kernels kept for new sessions of the default shape; `None`
    /// (`"auto"`, the default): the host decides — 1 for `serve`, `mcp` and
    /// the daemon, 0 for a one-shot `exec`. See [`Config::warm_pool`].
    #[serde(with = "warm_pool_serde")]
    pub warm_pool: Option<usize>,
}

impl Default for Kernels {
    fn default() -> Self {
        Self {
            max_kernels: 4,
            idle_timeout: 1800.0,
            warm_pool: None,
        }
    }
}

/// The largest `[kernels] warm_pool`.
pub const MAX_WARM_POOL: usize = 64;

/// `[kernels] warm_pool` in TOML: a whole number, or `"auto"`.
mod warm_pool_serde {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &Option<usize>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(n) => s.serialize_u64(*n as u64),
            None => s.serialize_str("auto"),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
        let v = toml::Value::deserialize(d)?;
        super::warm_pool_value(&v).map_err(serde::de::Error::custom)
    }
}

fn warm_pool_value(value: &Value) -> Result<Option<usize>, String> {
    match value {
        Value::String(s) if s == "auto" => Ok(None),
        Value::Integer(n) if (0..=MAX_WARM_POOL as i64).contains(n) => Ok(usize::try_from(*n).ok()),
        _ => Err(format!(
            "a whole number of kernels from 0 to {MAX_WARM_POOL}, or \"auto\""
        )),
    }
}

/// `[limits]`: resource limits of each kernel (see [`crate::limits`]); 0
/// means no limit, and every key defaults to 0.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Limits {
    /// Address space of each kernel process in bytes (`RLIMIT_AS`); the file
    /// may also give a size string (`"512MiB"`, `"2GiB"`).
    pub memory: u64,
    /// CPU seconds a cell may use (`RLIMIT_CPU`, re-armed per cell).
    pub cpu_seconds: u64,
    /// Open file descriptors per process (`RLIMIT_NOFILE`).
    pub open_files: u64,
    /// Processes and threads of the whole user (`RLIMIT_NPROC`).
    pub processes: u64,
    /// Largest file a kernel may write, in bytes or a size string (`RLIMIT_FSIZE`).
    pub file_size: u64,
}

/// `[output]`: caps of SPEC §5.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Output {
    /// Bytes of cleaned stdout returned inline (>= 1).
    pub max_stdout_bytes: usize,
    /// Bytes of cleaned stderr returned inline (>= 1).
    pub max_stderr_bytes: usize,
    /// Where spill files go; empty = the user cache dir ([`Config::spill_dir`]).
    pub spill_dir: String,
    /// Bytes written to one spill file at most (>= 1).
    pub spill_cap_bytes: u64,
    /// Spill files older than this many days are removed (at host start
    /// and hourly); 0 = never for age alone. Fractions allowed.
    pub spill_retention_days: f64,
    /// While the spill files total more bytes than this, the oldest are
    /// removed; 0 = no cap. The file may give a size string (`"1GiB"`).
    pub spill_total_cap: u64,
}

impl Default for Output {
    fn default() -> Self {
        Self {
            max_stdout_bytes: 50_000,
            max_stderr_bytes: 10_000,
            spill_dir: String::new(),
            spill_cap_bytes: 5_000_000,
            spill_retention_days: 7.0,
            spill_total_cap: 1 << 30,
        }
    }
}

/// `[env]`: the child environment (SPEC §4).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Env {
    /// Host variables passed to kernels even if the default rules would drop
    /// them. Exact names; a trailing `*` matches a prefix (`AWS_*`).
    pub passthrough: Vec<String>,
}

/// `[tools]`: which registered tools cells may call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Tools {
    /// Tool names, each at most once; checked against the registry with
    /// [`Config::validate_tools`].
    pub enabled: Vec<String>,
}

impl Default for Tools {
    fn default() -> Self {
        Self {
            enabled: default_tools(),
        }
    }
}

/// `[rpc]`: the tool-call socket (SPEC §7).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Rpc {
    /// Unix socket or loopback TCP.
    pub transport: Transport,
}

/// `[web]`: `web_search` settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Web {
    /// Which search API `web_search` uses.
    pub search_provider: SearchProvider,
    /// Base URL of the provider (`http://` or `https://`); required for SearXNG.
    pub search_url: String,
    /// Name of the host environment variable holding the API key.
    pub search_api_key_env: String,
}

/// `[guard]`: cells refused before they run (issue 6 item 5).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Guard {
    /// Regexes (Rust `regex` syntax); a cell whose code matches one is refused.
    pub deny: Vec<String>,
}

/// `[daemon]`: the `exec --session` background daemon (SPEC §9).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Daemon {
    /// Seconds without sessions after which the daemon exits (> 0).
    pub idle_exit: f64,
}

impl Default for Daemon {
    fn default() -> Self {
        Self { idle_exit: 900.0 }
    }
}

/// `[journal] enabled`: on, off, or what the host decides (`"auto"`: on
/// for `serve`, `mcp` and the daemon, off for a one-shot `exec`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Switch {
    /// The host decides (`"auto"`, the default).
    #[default]
    Auto,
    /// `true`.
    On,
    /// `false`.
    Off,
}

impl Switch {
    /// Whether it is on, `host_default` deciding `Auto`.
    pub fn resolve(self, host_default: bool) -> bool {
        match self {
            Self::Auto => host_default,
            Self::On => true,
            Self::Off => false,
        }
    }

    fn to_value(self) -> Value {
        match self {
            Self::Auto => Value::String("auto".into()),
            Self::On => Value::Boolean(true),
            Self::Off => Value::Boolean(false),
        }
    }

    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Boolean(true) => Some(Self::On),
            Value::Boolean(false) => Some(Self::Off),
            Value::String(s) if s == "auto" => Some(Self::Auto),
            _ => None,
        }
    }
}

impl Serialize for Switch {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Auto => s.serialize_str("auto"),
            Self::On => s.serialize_bool(true),
            Self::Off => s.serialize_bool(false),
        }
    }
}

impl<'de> Deserialize<'de> for Switch {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Self::from_value(&v)
            .ok_or_else(|| serde::de::Error::custom("expected true, false or \"auto\""))
    }
}

/// `[journal]`: the SQLite record of every cell (see [`crate::journal`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct JournalConfig {
    /// On, off, or `"auto"` (the host decides).
    pub enabled: Switch,
    /// The database file; empty: `$XDG_DATA_HOME/toolcell/journal.db`, else
    /// `~/.local/share/toolcell/journal.db`.
    pub path: String,
}

/// Where a key's effective value came from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// SPEC §11's default (or set in code).
    #[default]
    Default,
    /// A `toolcell.toml` file.
    File(PathBuf),
    /// A command-line flag, spelled as the user wrote it (`--timeout`).
    Flag(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Default => f.write_str("default"),
            Self::File(path) => write!(f, "from {}", path.display()),
            Self::Flag(flag) => write!(f, "from {flag}"),
        }
    }
}

/// The error prefix naming where a bad value came from: `path: `, `--flag: `
/// or nothing.
struct Prefix<'a>(&'a Source);

impl fmt::Display for Prefix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Source::Default => Ok(()),
            Source::File(path) => write!(f, "{}: ", path.display()),
            Source::Flag(flag) => write!(f, "{flag}: "),
        }
    }
}

/// Why a configuration was refused. Every message names the file or flag
/// (when there is one) and the key.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `--config` names a file that does not exist.
    #[error("--config {}: no such file", .path.display())]
    NotFound {
        /// The path as resolved against the working directory.
        path: PathBuf,
    },
    /// A config file exists but could not be read.
    #[error("{}: cannot read: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A config file larger than [`MAX_FILE_BYTES`].
    #[error("{}: too large for a config file (more than {max} bytes)", .path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit.
        max: u64,
    },
    /// Not valid TOML (the message carries line and column).
    #[error("{}invalid TOML: {message}", Prefix(.origin))]
    Syntax {
        /// The file, if any.
        origin: Source,
        /// The parser's message.
        message: String,
    },
    /// A `[section]` toolcell does not know.
    #[error("{}unknown section `[{section}]` (known sections: {}){}", Prefix(.origin), .known.join(", "), Hint(.hint.as_deref()))]
    UnknownSection {
        /// Where it came from.
        origin: Source,
        /// The section name as written (a top-level key counts as one).
        section: String,
        /// The sections toolcell knows.
        known: Vec<&'static str>,
        /// What was probably meant, if anything is close.
        hint: Option<String>,
    },
    /// A key toolcell does not know in a known section.
    #[error("{}unknown key `{key}` (known keys in [{section}]: {}){}", Prefix(.origin), .known.join(", "), Suggestion(.suggestion.as_deref()))]
    UnknownKey {
        /// Where it came from.
        origin: Source,
        /// `section.key` as written.
        key: String,
        /// The section.
        section: String,
        /// The keys of that section.
        known: Vec<&'static str>,
        /// A known key spelled almost the same, if any.
        suggestion: Option<&'static str>,
    },
    /// A value of the wrong type or out of range.
    #[error("{}{key}: expected {expected}, got {got}", Prefix(.origin))]
    Invalid {
        /// Where the value came from.
        origin: Source,
        /// `section.key`.
        key: String,
        /// What the key accepts.
        expected: String,
        /// The value given, as TOML (shortened when long).
        got: String,
    },
    /// `[tools] enabled` names a tool the registry does not have.
    #[error("{}tools.enabled: unknown tool \"{tool}\" (known tools: {})", Prefix(.origin), .known.join(", "))]
    UnknownTool {
        /// Where `tools.enabled` came from.
        origin: Source,
        /// The unknown name.
        tool: String,
        /// The registry's tool names.
        known: Vec<String>,
    },
}

struct Hint<'a>(Option<&'a str>);

impl fmt::Display for Hint<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(hint) => write!(f, "; {hint}"),
            None => Ok(()),
        }
    }
}

struct Suggestion<'a>(Option<&'a str>);

impl fmt::Display for Suggestion<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(key) => write!(f, "; did you mean `{key}`?"),
            None => Ok(()),
        }
    }
}

/// How a flag's string is turned into a value of the key's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Number,
    Text,
    List,
    Bool,
}

/// Every key, in the order `to_toml` prints them.
const KEYS: &[(&str, Kind)] = &[
    ("execution.timeout", Kind::Number),
    ("execution.max_tool_calls", Kind::Number),
    ("execution.mode", Kind::Text),
    ("execution.python", Kind::Text),
    ("execution.on_timeout", Kind::Text),
    ("execution.interrupt_grace", Kind::Number),
    ("execution.kill_grace", Kind::Number),
    ("execution.kernel_mode", Kind::Text),
    ("execution.confine", Kind::Bool),
    ("kernels.max_kernels", Kind::Number),
    ("kernels.idle_timeout", Kind::Number),
    ("kernels.warm_pool", Kind::Number),
    ("limits.memory", Kind::Number),
    ("limits.cpu_seconds", Kind::Number),
    ("limits.open_files", Kind::Number),
    ("limits.processes", Kind::Number),
    ("limits.file_size", Kind::Number),
    ("output.max_stdout_bytes", Kind::Number),
    ("output.max_stderr_bytes", Kind::Number),
    ("output.spill_dir", Kind::Text),
    ("output.spill_cap_bytes", Kind::Number),
    ("output.spill_retention_days", Kind::Number),
    ("output.spill_total_cap", Kind::Number),
    ("env.passthrough", Kind::List),
    ("tools.enabled", Kind::List),
    ("rpc.transport", Kind::Text),
    ("web.search_provider", Kind::Text),
    ("web.search_url", Kind::Text),
    ("web.search_api_key_env", Kind::Text),
    ("guard.deny", Kind::List),
    ("daemon.idle_exit", Kind::Number),
    ("journal.enabled", Kind::Bool),
    ("journal.path", Kind::Text),
];

/// Section names, in the order `to_toml` prints them.
const SECTIONS: &[&str] = &[
    "execution",
    "kernels",
    "limits",
    "output",
    "env",
    "tools",
    "rpc",
    "web",
    "guard",
    "daemon",
    "journal",
];

/// The effective configuration: SPEC §11's keys plus `[execution]
/// kernel_mode`, `[guard]` and `[daemon]`, and where each value came from.
///
/// Build one with [`Config::default`], [`Config::discover`],
/// [`Config::from_file`] or [`Config::from_toml_str`]; the last three check
/// every value. A `Config` changed in code (its fields are public) can be
/// checked with [`Config::validate`]. It also implements serde's traits
/// (with `deny_unknown_fields`) for embedders that keep it inside their own
/// configuration; call [`Config::validate`] after deserializing it that way.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Config {
    /// `[execution]`
    pub execution: Execution,
    /// `[kernels]`
    pub kernels: Kernels,
    /// `[limits]`
    pub limits: Limits,
    /// `[output]`
    pub output: Output,
    /// `[env]`
    pub env: Env,
    /// `[tools]`
    pub tools: Tools,
    /// `[rpc]`
    pub rpc: Rpc,
    /// `[web]`
    pub web: Web,
    /// `[guard]`
    pub guard: Guard,
    /// `[daemon]`
    pub daemon: Daemon,
    /// `[journal]`
    pub journal: JournalConfig,
    /// Provenance of every key not at its default.
    #[serde(skip)]
    sources: HashMap<&'static str, Source>,
    /// The file read, if any.
    #[serde(skip)]
    file: Option<PathBuf>,
}

static DEFAULT_SOURCE: Source = Source::Default;

impl Config {
    /// Finds and reads the configuration, using the real environment for the
    /// user config dir: `explicit` (the `--config` path, resolved against
    /// `cwd`; it must exist), else `<cwd>/toolcell.toml`, else
    /// [`user_config_file`]; with none of them, the defaults.
    pub fn discover(explicit: Option<&Path>, cwd: &Path) -> Result<Self, ConfigError> {
        let user = user_config_file(|name| std::env::var_os(name));
        Self::discover_in(explicit, cwd, user.as_deref())
    }

    /// [`Config::discover`] with the user config file given (`None` = there
    /// is none), for tests and embedders with their own layout.
    pub fn discover_in(
        explicit: Option<&Path>,
        cwd: &Path,
        user_file: Option<&Path>,
    ) -> Result<Self, ConfigError> {
        match discover_path(explicit, cwd, user_file)? {
            Some(path) => Self::from_file(&path),
            None => Ok(Self::default()),
        }
    }

    /// Reads and checks one file. Relative `spill_dir` and `python` paths in
    /// it are taken relative to the file's directory.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = read_bounded(path)?;
        Self::from_toml_str(&text, Some(path))
    }

    /// Parses and checks TOML text; `path` names the file in errors and
    /// provenance and anchors relative paths.
    pub fn from_toml_str(text: &str, path: Option<&Path>) -> Result<Self, ConfigError> {
        let origin = path.map_or(Source::Default, |p| Source::File(p.to_path_buf()));
        let table: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| ConfigError::Syntax {
                    origin: origin.clone(),
                    message: e.to_string().trim_end().to_string(),
                })?;
        if let Some(section) = table.keys().find(|s| !SECTIONS.contains(&s.as_str())) {
            return Err(unknown_section(origin, section));
        }
        let base_dir = path.and_then(Path::parent);
        let mut config = Self::default();
        for section in SECTIONS {
            let Some(value) = table.get(*section) else {
                continue;
            };
            let Some(keys) = value.as_table() else {
                return Err(ConfigError::Invalid {
                    origin,
                    key: (*section).to_string(),
                    expected: format!("a table [{section}]"),
                    got: render(value),
                });
            };
            for (name, value) in keys {
                let full = format!("{section}.{name}");
                let Some(key) = known_key(&full) else {
                    return Err(unknown_key(origin, &full));
                };
                config.apply(key, value, base_dir, &origin)?;
                if let Some(p) = path {
                    config.sources.insert(key, Source::File(p.to_path_buf()));
                }
            }
        }
        config.file = path.map(Path::to_path_buf);
        config.check_cross()?;
        Ok(config)
    }

    /// Overrides `key` (`section.key`) with a command-line value, recorded as
    /// coming from the flag `--<key name>` (`execution.timeout` →
    /// `--timeout`, `kernels.max_kernels` → `--max-kernels`). See
    /// [`Config::set_override_as`].
    pub fn set_override(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let name = key.rsplit('.').next().unwrap_or(key).replace('_', "-");
        self.set_override_as(key, value, &format!("--{name}"))
    }

    /// Overrides `key` with `value` parsed as the key's type, the same checks
    /// as in a file, and records `flag` as the source. Numbers are written as
    /// in TOML (`30`, `2.5`); strings as they are (no quotes); lists as
    /// `a,b,c` (or a TOML array `["a", "b"]`), an empty string being the
    /// empty list. Call [`Config::validate`] after the last override to run
    /// the checks that involve two keys.
    pub fn set_override_as(
        &mut self,
        key: &str,
        value: &str,
        flag: &str,
    ) -> Result<(), ConfigError> {
        let origin = Source::Flag(flag.to_string());
        let Some(known) = known_key(key) else {
            return Err(unknown_key(origin, key));
        };
        let parsed = parse_flag_value(kind_of(known), value);
        self.apply(known, &parsed, None, &origin)?;
        self.sources.insert(known, origin);
        Ok(())
    }

    /// Checks every value (types, ranges, regexes) and the rules that tie two
    /// keys together. Configs read from a file are already checked; use this
    /// after changing fields in code or deserializing with serde directly.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut scratch = Self::default();
        for (key, _) in KEYS {
            let value = self.value(key).unwrap_or(Value::Boolean(false));
            scratch.apply(key, &value, None, self.source_or_default(key))?;
        }
        self.check_cross()
    }

    /// Checks `[tools] enabled` against the registry's tool names.
    pub fn validate_tools(&self, known: &[&str]) -> Result<(), ConfigError> {
        match self
            .tools
            .enabled
            .iter()
            .find(|t| !known.contains(&t.as_str()))
        {
            Some(tool) => Err(ConfigError::UnknownTool {
                origin: self.source_or_default("tools.enabled").clone(),
                tool: tool.clone(),
                known: known.iter().map(|s| (*s).to_string()).collect(),
            }),
            None => Ok(()),
        }
    }

    /// The `[guard] deny` regexes, compiled (they were checked when read).
    pub fn guard_deny(&self) -> Result<Vec<regex::Regex>, ConfigError> {
        self.guard
            .deny
            .iter()
            .map(|pattern| {
                regex::Regex::new(pattern).map_err(|e| ConfigError::Invalid {
                    origin: self.source_or_default("guard.deny").clone(),
                    key: "guard.deny".into(),
                    expected: format!("valid regexes ({})", one_line(&e.to_string())),
                    got: render(&Value::String(pattern.clone())),
                })
            })
            .collect()
    }

    /// Where `key`'s value came from; `None` if `key` is not a known
    /// `section.key`.
    pub fn source(&self, key: &str) -> Option<&Source> {
        let key = known_key(key)?;
        Some(self.source_or_default(key))
    }

    /// The file this configuration was read from, if any.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// Every known `section.key`, in printing order.
    pub fn keys() -> impl Iterator<Item = &'static str> {
        KEYS.iter().map(|(k, _)| *k)
    }

    /// The value of `key` as TOML; `None` if `key` is unknown.
    pub fn value(&self, key: &str) -> Option<Value> {
        let strings = |v: &[String]| Value::Array(v.iter().cloned().map(Value::String).collect());
        let text = |s: &str| Value::String(s.to_string());
        Some(match key {
            "execution.timeout" => seconds_value(self.execution.timeout),
            "execution.max_tool_calls" => Value::Integer(i64::from(self.execution.max_tool_calls)),
            "execution.mode" => text(self.execution.mode.name()),
            "execution.python" => text(&self.execution.python),
            "execution.on_timeout" => text(self.execution.on_timeout.name()),
            "execution.interrupt_grace" => seconds_value(self.execution.interrupt_grace),
            "execution.kill_grace" => seconds_value(self.execution.kill_grace),
            "execution.kernel_mode" => text(self.execution.kernel_mode.as_str()),
            "execution.confine" => Value::Boolean(self.execution.confine),
            "limits.memory" => count_value(self.limits.memory),
            "limits.cpu_seconds" => count_value(self.limits.cpu_seconds),
            "limits.open_files" => count_value(self.limits.open_files),
            "limits.processes" => count_value(self.limits.processes),
            "limits.file_size" => count_value(self.limits.file_size),
            "kernels.max_kernels" => count_value(self.kernels.max_kernels as u64),
            "kernels.idle_timeout" => seconds_value(self.kernels.idle_timeout),
            "kernels.warm_pool" => match self.kernels.warm_pool {
                Some(n) => count_value(n as u64),
                None => text("auto"),
            },
            "output.max_stdout_bytes" => count_value(self.output.max_stdout_bytes as u64),
            "output.max_stderr_bytes" => count_value(self.output.max_stderr_bytes as u64),
            "output.spill_dir" => text(&self.output.spill_dir),
            "output.spill_cap_bytes" => count_value(self.output.spill_cap_bytes),
            "output.spill_retention_days" => seconds_value(self.output.spill_retention_days),
            "output.spill_total_cap" => count_value(self.output.spill_total_cap),
            "env.passthrough" => strings(&self.env.passthrough),
            "tools.enabled" => strings(&self.tools.enabled),
            "rpc.transport" => text(self.rpc.transport.as_str()),
            "web.search_provider" => text(self.web.search_provider.as_str()),
            "web.search_url" => text(&self.web.search_url),
            "web.search_api_key_env" => text(&self.web.search_api_key_env),
            "guard.deny" => strings(&self.guard.deny),
            "daemon.idle_exit" => seconds_value(self.daemon.idle_exit),
            "journal.enabled" => self.journal.enabled.to_value(),
            "journal.path" => text(&self.journal.path),
            _ => return None,
        })
    }

    /// The effective configuration as TOML, every key written out.
    pub fn to_toml(&self) -> String {
        self.write_toml(false)
    }

    /// [`Config::to_toml`] with, after each key, a comment saying where the
    /// value came from: `# default`, `# from /path/toolcell.toml` or
    /// `# from --flag`. The output is valid TOML that reads back to the same
    /// values.
    pub fn to_toml_with_sources(&self) -> String {
        self.write_toml(true)
    }

    /// The limits the `execute_code` schema description states (SPEC §8).
    pub fn execute_code_options(&self) -> toolcell_tools::schema::ExecuteCodeOptions {
        toolcell_tools::schema::ExecuteCodeOptions {
            timeout_secs: self.execution.timeout,
            max_tool_calls: self.execution.max_tool_calls,
            max_stdout_bytes: self.output.max_stdout_bytes,
            max_stderr_bytes: self.output.max_stderr_bytes,
            mode: self.execution.mode,
            on_timeout: self.execution.on_timeout,
            interrupt_grace_secs: self.execution.interrupt_grace,
            resource_limits: self
                .limits()
                .pairs()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            confined: self.execution.confine,
        }
    }

    /// The `[web]` settings for the tools crate, the API key read from the
    /// host variable named by `search_api_key_env` through `env` (the host
    /// keeps it; it never reaches a kernel).
    pub fn web_settings(
        &self,
        env: impl Fn(&str) -> Option<OsString>,
    ) -> toolcell_tools::WebSettings {
        let settings = toolcell_tools::WebSettings::new(
            self.web.search_provider.as_str(),
            self.web.search_url.as_str(),
        );
        let name = self.web.search_api_key_env.as_str();
        match (!name.is_empty()).then(|| env(name)).flatten() {
            Some(key) => settings.api_key(key.to_string_lossy().into_owned()),
            None => settings,
        }
    }

    /// `[limits]` as the kernel takes them (0 = not limited).
    pub fn limits(&self) -> crate::limits::Limits {
        let on = |v: u64| (v > 0).then_some(v);
        crate::limits::Limits {
            memory: on(self.limits.memory),
            cpu_seconds: on(self.limits.cpu_seconds),
            open_files: on(self.limits.open_files),
            processes: on(self.limits.processes),
            file_size: on(self.limits.file_size),
        }
    }

    /// `[execution] timeout` as a [`Duration`].
    pub fn timeout(&self) -> Duration {
        duration(self.execution.timeout)
    }

    /// `[execution] interrupt_grace` as a [`Duration`].
    pub fn interrupt_grace(&self) -> Duration {
        duration(self.execution.interrupt_grace)
    }

    /// `[execution] kill_grace` as a [`Duration`].
    pub fn kill_grace(&self) -> Duration {
        duration(self.execution.kill_grace)
    }

    /// `[output] spill_retention_days` as a [`Duration`]; `None` when 0
    /// (spill files are never removed for age alone).
    pub fn spill_retention(&self) -> Option<Duration> {
        let days = self.output.spill_retention_days;
        (days > 0.0).then(|| duration(days * 86_400.0))
    }

    /// `[output] spill_total_cap` in bytes; `None` when 0 (no cap).
    pub fn spill_total_cap(&self) -> Option<u64> {
        (self.output.spill_total_cap > 0).then_some(self.output.spill_total_cap)
    }

    /// `[kernels] idle_timeout` as a [`Duration`].
    pub fn idle_timeout(&self) -> Duration {
        duration(self.kernels.idle_timeout)
    }

    /// The journal file: `[journal] path` (a leading `~/` is the home
    /// dir), or when it is empty `$XDG_DATA_HOME/toolcell/journal.db`, else
    /// `~/.local/share/toolcell/journal.db`, else (no usable `HOME`)
    /// `<temp dir>/toolcell-<uid>/journal.db`.
    pub fn journal_path(&self) -> PathBuf {
        self.journal_path_with(|name| std::env::var_os(name))
    }

    /// [`Config::journal_path`] with the environment given as a lookup function.
    pub fn journal_path_with(&self, env: impl Fn(&str) -> Option<OsString>) -> PathBuf {
        let configured = self.journal.path.as_str();
        if !configured.is_empty() {
            if let (Some(rest), Some(home)) = (configured.strip_prefix("~/"), abs_var(&env, "HOME"))
            {
                return home.join(rest);
            }
            return PathBuf::from(configured);
        }
        if let Some(data) = abs_var(&env, "XDG_DATA_HOME") {
            return data.join("toolcell").join("journal.db");
        }
        if let Some(home) = abs_var(&env, "HOME") {
            return home.join(".local/share/toolcell/journal.db");
        }
        std::env::temp_dir()
            .join(format!("toolcell-{}", nix::unistd::getuid()))
            .join("journal.db")
    }

    /// `[kernels] warm_pool`, `host_default` deciding `"auto"`.
    pub fn warm_pool(&self, host_default: usize) -> usize {
        self.kernels.warm_pool.unwrap_or(host_default)
    }

    /// The journal this host should record into: `[journal] enabled`, with
    /// `host_default` deciding `"auto"` (on for `serve`, `mcp` and the
    /// daemon, off for a one-shot `exec`); `None` when off.
    ///
    /// # Errors
    /// The journal could not be opened (see [`crate::journal::JournalError`]).
    pub fn journal(
        &self,
        host_default: bool,
    ) -> Result<Option<crate::journal::Journal>, crate::journal::JournalError> {
        if !self.journal.enabled.resolve(host_default) {
            return Ok(None);
        }
        crate::journal::Journal::open(&self.journal_path()).map(Some)
    }

    /// `[daemon] idle_exit` as a [`Duration`].
    pub fn idle_exit(&self) -> Duration {
        duration(self.daemon.idle_exit)
    }

    /// The directory for spill files: `[output] spill_dir`, or when it is
    /// empty the user cache dir — `$XDG_CACHE_HOME/toolcell/spill`, else
    /// `~/.cache/toolcell/spill`, else (no usable `HOME`)
    /// `<temp dir>/toolcell-<uid>/spill`. A leading `~/` is the home dir.
    pub fn spill_dir(&self) -> PathBuf {
        self.spill_dir_with(|name| std::env::var_os(name))
    }

    /// [`Config::spill_dir`] with the environment given as a lookup function.
    pub fn spill_dir_with(&self, env: impl Fn(&str) -> Option<OsString>) -> PathBuf {
        let configured = self.output.spill_dir.as_str();
        if !configured.is_empty() {
            if let (Some(rest), Some(home)) = (configured.strip_prefix("~/"), abs_var(&env, "HOME"))
            {
                return home.join(rest);
            }
            return PathBuf::from(configured);
        }
        if let Some(cache) = abs_var(&env, "XDG_CACHE_HOME") {
            return cache.join("toolcell").join("spill");
        }
        if let Some(home) = abs_var(&env, "HOME") {
            return home.join(".cache").join("toolcell").join("spill");
        }
        std::env::temp_dir()
            .join(format!("toolcell-{}", nix::unistd::getuid()))
            .join("spill")
    }

    fn source_or_default(&self, key: &str) -> &Source {
        self.sources.get(key).unwrap_or(&DEFAULT_SOURCE)
    }

    fn write_toml(&self, with_sources: bool) -> String {
        let mut out = String::new();
        for (i, section) in SECTIONS.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.push('[');
            out.push_str(section);
            out.push_str("]\n");
            for (key, _) in KEYS {
                let Some(name) = key
                    .strip_prefix(section)
                    .and_then(|rest| rest.strip_prefix('.'))
                else {
                    continue;
                };
                let value = self.value(key).map(|v| v.to_string()).unwrap_or_default();
                out.push_str(name);
                out.push_str(" = ");
                out.push_str(&value);
                if with_sources {
                    out.push_str("  # ");
                    out.push_str(&one_line(&self.source_or_default(key).to_string()));
                }
                out.push('\n');
            }
        }
        out
    }

    /// Checks and stores one value. `base_dir` anchors relative paths (the
    /// config file's directory).
    fn apply(
        &mut self,
        key: &'static str,
        value: &Value,
        base_dir: Option<&Path>,
        origin: &Source,
    ) -> Result<(), ConfigError> {
        let invalid = |expected: String| ConfigError::Invalid {
            origin: origin.clone(),
            key: key.to_string(),
            expected,
            got: render(value),
        };
        match key {
            "execution.timeout" => {
                self.execution.timeout = seconds(value, false).map_err(invalid)?
            }
            "execution.max_tool_calls" => {
                self.execution.max_tool_calls =
                    count(value, u64::from(u32::MAX)).map_err(invalid)? as u32;
            }
            "execution.mode" => self.execution.mode = choice(value).map_err(invalid)?,
            "execution.python" => {
                self.execution.python =
                    anchored(text(value, TextRule::Path).map_err(invalid)?, base_dir);
            }
            "execution.on_timeout" => {
                self.execution.on_timeout = choice(value).map_err(invalid)?;
            }
            "execution.interrupt_grace" => {
                self.execution.interrupt_grace = seconds(value, true).map_err(invalid)?;
            }
            "execution.kill_grace" => {
                self.execution.kill_grace = seconds(value, true).map_err(invalid)?
            }
            "execution.kernel_mode" => {
                self.execution.kernel_mode = choice(value).map_err(invalid)?;
            }
            "execution.confine" => {
                self.execution.confine = value
                    .as_bool()
                    .ok_or_else(|| invalid("true or false".into()))?;
            }
            "limits.memory" => self.limits.memory = size_limit(value).map_err(invalid)?,
            "limits.cpu_seconds" => {
                self.limits.cpu_seconds =
                    whole_limit(value, "a whole number of CPU seconds per cell")
                        .map_err(invalid)?;
            }
            "limits.open_files" => {
                self.limits.open_files =
                    whole_limit(value, "a whole number of open files").map_err(invalid)?;
            }
            "limits.processes" => {
                self.limits.processes =
                    whole_limit(value, "a whole number of processes").map_err(invalid)?;
            }
            "limits.file_size" => self.limits.file_size = size_limit(value).map_err(invalid)?,
            "kernels.max_kernels" => {
                self.kernels.max_kernels = usize_count(value).map_err(invalid)?;
            }
            "kernels.idle_timeout" => {
                self.kernels.idle_timeout = seconds(value, false).map_err(invalid)?
            }
            "kernels.warm_pool" => {
                self.kernels.warm_pool = warm_pool_value(value).map_err(invalid)?
            }
            "output.max_stdout_bytes" => {
                self.output.max_stdout_bytes = usize_count(value).map_err(invalid)?;
            }
            "output.max_stderr_bytes" => {
                self.output.max_stderr_bytes = usize_count(value).map_err(invalid)?;
            }
            "output.spill_dir" => {
                let dir = text(value, TextRule::Path).map_err(invalid)?;
                self.output.spill_dir = match base_dir {
                    Some(base)
                        if !dir.is_empty()
                            && !dir.starts_with("~/")
                            && Path::new(&dir).is_relative() =>
                    {
                        base.join(&dir).to_string_lossy().into_owned()
                    }
                    _ => dir,
                };
            }
            "output.spill_cap_bytes" => {
                self.output.spill_cap_bytes = count(value, i64::MAX as u64).map_err(invalid)?;
            }
            "output.spill_retention_days" => {
                self.output.spill_retention_days = retention_days(value).map_err(invalid)?;
            }
            "output.spill_total_cap" => {
                self.output.spill_total_cap = size_limit(value)
                    .map_err(|_| "a size in bytes >= 0 (0 = no cap): a whole number or a string like \"500MiB\" or \"1GiB\"".to_string())
                    .map_err(invalid)?;
            }
            "env.passthrough" => {
                self.env.passthrough = list(value, ListRule::EnvNames).map_err(invalid)?;
            }
            "tools.enabled" => {
                self.tools.enabled = list(value, ListRule::ToolNames).map_err(invalid)?
            }
            "rpc.transport" => {
                self.rpc.transport = choice(value).map_err(invalid)?;
            }
            "web.search_provider" => {
                self.web.search_provider = choice(value).map_err(invalid)?;
            }
            "web.search_url" => {
                self.web.search_url = text(value, TextRule::Url).map_err(invalid)?
            }
            "web.search_api_key_env" => {
                self.web.search_api_key_env = text(value, TextRule::EnvName).map_err(invalid)?;
            }
            "guard.deny" => self.guard.deny = list(value, ListRule::Regexes).map_err(invalid)?,
            "daemon.idle_exit" => self.daemon.idle_exit = seconds(value, false).map_err(invalid)?,
            "journal.enabled" => {
                self.journal.enabled = Switch::from_value(value)
                    .ok_or_else(|| invalid("true, false or \"auto\"".into()))?;
            }
            "journal.path" => {
                let path = text(value, TextRule::Path).map_err(invalid)?;
                self.journal.path = match base_dir {
                    Some(base)
                        if !path.is_empty()
                            && !path.starts_with("~/")
                            && Path::new(&path).is_relative() =>
                    {
                        base.join(&path).to_string_lossy().into_owned()
                    }
                    _ => path,
                };
            }
            _ => return Err(unknown_key(origin.clone(), key)),
        }
        Ok(())
    }

    /// Rules involving two keys.
    fn check_cross(&self) -> Result<(), ConfigError> {
        if self.execution.confine && self.execution.mode != Mode::Strict {
            return Err(ConfigError::Invalid {
                origin: self.source_or_default("execution.confine").clone(),
                key: "execution.confine".into(),
                expected: "false unless execution.mode = \"strict\" (Landlock confinement applies to strict-mode kernels only)".into(),
                got: "true".into(),
            });
        }
        if self.web.search_provider == SearchProvider::Searxng
            && self.web.search_url.trim().is_empty()
        {
            return Err(ConfigError::Invalid {
                origin: self.source_or_default("web.search_url").clone(),
                key: "web.search_url".into(),
                expected: "the SearXNG base URL when web.search_provider is \"searxng\"".into(),
                got: "\"\"".into(),
            });
        }
        Ok(())
    }
}

/// Which file [`Config::discover_in`] reads: `explicit` (must exist), else
/// `<cwd>/toolcell.toml`, else `user_file` if it exists, else none. A file
/// that exists but cannot be inspected is an error, not a reason to look
/// further.
pub fn discover_path(
    explicit: Option<&Path>,
    cwd: &Path,
    user_file: Option<&Path>,
) -> Result<Option<PathBuf>, ConfigError> {
    if let Some(explicit) = explicit {
        let path = cwd.join(explicit);
        return match std::fs::metadata(&path) {
            Ok(_) => Ok(Some(path)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(ConfigError::NotFound { path })
            }
            Err(source) => Err(ConfigError::Io { path, source }),
        };
    }
    let local = cwd.join(FILE_NAME);
    let candidates = std::iter::once(local).chain(user_file.map(Path::to_path_buf));
    for path in candidates {
        match std::fs::metadata(&path) {
            Ok(_) => return Ok(Some(path)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(ConfigError::Io { path, source }),
        }
    }
    Ok(None)
}

/// The user config file: `$XDG_CONFIG_HOME/toolcell/toolcell.toml`, else
/// `$HOME/.config/toolcell/toolcell.toml` (relative or empty variables are
/// ignored, as the XDG spec says); `None` without either.
pub fn user_config_file(env: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    if let Some(dir) = abs_var(&env, "XDG_CONFIG_HOME") {
        return Some(dir.join("toolcell").join(FILE_NAME));
    }
    abs_var(&env, "HOME").map(|home| home.join(".config").join("toolcell").join(FILE_NAME))
}

fn abs_var(env: &impl Fn(&str) -> Option<OsString>, name: &str) -> Option<PathBuf> {
    let value = PathBuf::from(env(name)?);
    value.is_absolute().then_some(value)
}

fn read_bounded(path: &Path) -> Result<String, ConfigError> {
    let io = |source| ConfigError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(ConfigError::TooLarge {
            path: path.to_path_buf(),
            max: MAX_FILE_BYTES,
        });
    }
    String::from_utf8(bytes).map_err(|e| ConfigError::Syntax {
        origin: Source::File(path.to_path_buf()),
        message: format!(
            "not UTF-8 (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ),
    })
}

fn known_key(key: &str) -> Option<&'static str> {
    KEYS.iter().map(|(k, _)| *k).find(|k| *k == key)
}

fn kind_of(key: &str) -> Kind {
    KEYS.iter()
        .find(|(k, _)| *k == key)
        .map_or(Kind::Text, |(_, kind)| *kind)
}

fn unknown_key(origin: Source, key: &str) -> ConfigError {
    let (section, name) = key.split_once('.').unwrap_or(("", key));
    if !section.is_empty() && !SECTIONS.contains(&section) {
        return unknown_section(origin, section);
    }
    let known: Vec<&'static str> = KEYS
        .iter()
        .filter_map(|(k, _)| k.strip_prefix(section)?.strip_prefix('.'))
        .collect();
    // A key in another section, or a near miss in this one.
    let suggestion = KEYS
        .iter()
        .map(|(k, _)| *k)
        .find(|k| k.rsplit('.').next() == Some(name) && *k != key)
        .or_else(|| {
            KEYS.iter()
                .map(|(k, _)| *k)
                .filter(|k| {
                    k.starts_with(section) && k.as_bytes().get(section.len()) == Some(&b'.')
                })
                .map(|k| (k, edit_distance(&k[section.len() + 1..], name)))
                .filter(|(_, d)| *d <= 2)
                .min_by_key(|(_, d)| *d)
                .map(|(k, _)| k)
        });
    ConfigError::UnknownKey {
        origin,
        key: key.to_string(),
        section: section.to_string(),
        known,
        suggestion,
    }
}

fn unknown_section(origin: Source, section: &str) -> ConfigError {
    // A key written outside its section (`timeout = 30` at the top), or a
    // section name misspelt or shortened.
    let hint = KEYS
        .iter()
        .find_map(|(k, _)| {
            let (sec, name) = k.split_once('.')?;
            (name == section).then(|| format!("did you mean `{name}` under [{sec}]?"))
        })
        .or_else(|| {
            SECTIONS
                .iter()
                .map(|s| (*s, edit_distance(s, section)))
                .filter(|(s, d)| *d <= 2 || (section.len() >= 3 && s.starts_with(section)))
                .min_by_key(|(_, d)| *d)
                .map(|(s, _)| format!("did you mean [{s}]?"))
        });
    ConfigError::UnknownSection {
        origin,
        section: section.to_string(),
        known: SECTIONS.to_vec(),
        hint,
    }
}

/// Levenshtein distance on bytes (keys are short ASCII; a long input is
/// capped so the cost stays bounded).
fn edit_distance(a: &str, b: &str) -> usize {
    let a = &a.as_bytes()[..a.len().min(64)];
    let b = &b.as_bytes()[..b.len().min(64)];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// A flag's string as a TOML value of the key's kind. A string that does not
/// parse as the kind stays a string, so the key's check names it.
fn parse_flag_value(kind: Kind, raw: &str) -> Value {
    let trimmed = raw.trim();
    match kind {
        Kind::Number => {
            if let Ok(i) = trimmed.parse::<i64>() {
                Value::Integer(i)
            } else if let Ok(f) = trimmed.parse::<f64>() {
                Value::Float(f)
            } else {
                Value::String(raw.to_string())
            }
        }
        Kind::Text => Value::String(raw.to_string()),
        Kind::Bool => match trimmed {
            "true" => Value::Boolean(true),
            "false" => Value::Boolean(false),
            _ => Value::String(raw.to_string()),
        },
        Kind::List => {
            if trimmed.starts_with('[') {
                return trimmed
                    .parse::<Value>()
                    .unwrap_or_else(|_| Value::String(raw.to_string()));
            }
            Value::Array(
                raw.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|s| Value::String(s.to_string()))
                    .collect(),
            )
        }
    }
}

/// A value as TOML for an error message, shortened when long.
fn render(value: &Value) -> String {
    let text = one_line(&value.to_string());
    if text.chars().count() <= MAX_GOT_CHARS {
        return text;
    }
    let head: String = text.chars().take(MAX_GOT_CHARS).collect();
    format!("{head}…")
}

/// Control characters (a newline in a path, say) would break a TOML comment
/// or a one-line message.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

fn seconds_value(secs: f64) -> Value {
    // Whole numbers print as integers (`timeout = 300`, as SPEC writes them).
    if secs.fract() == 0.0 && secs.abs() < 9.0e15 {
        Value::Integer(secs as i64)
    } else {
        Value::Float(secs)
    }
}

fn count_value(n: u64) -> Value {
    i64::try_from(n).map_or(Value::Float(n as f64), Value::Integer)
}

fn duration(secs: f64) -> Duration {
    // Values are checked when read; one set wrongly in code saturates rather
    // than panicking.
    if secs.is_nan() || secs <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(secs.min(MAX_SECONDS)).unwrap_or(Duration::ZERO)
}

fn seconds(value: &Value, allow_zero: bool) -> Result<f64, String> {
    let base = if allow_zero {
        "a number of seconds >= 0"
    } else {
        "a number of seconds > 0"
    };
    let secs = match value {
        Value::Integer(i) => *i as f64,
        Value::Float(f) => *f,
        _ => return Err(base.to_string()),
    };
    let low_ok = if allow_zero { secs >= 0.0 } else { secs > 0.0 };
    if !secs.is_finite() || !low_ok {
        return Err(base.to_string());
    }
    if secs > MAX_SECONDS {
        return Err(format!("{base} and at most {MAX_SECONDS:.0}"));
    }
    Ok(secs)
}

fn count(value: &Value, max: u64) -> Result<u64, String> {
    match value {
        Value::Integer(i) if *i >= 1 && (*i as u64) <= max => Ok(*i as u64),
        // Only a value over the top mentions the top.
        Value::Integer(i) if *i >= 1 => Err(format!("a whole number >= 1 and <= {max}")),
        _ => Err("a whole number >= 1".to_string()),
    }
}

/// Most days `[output] spill_retention_days` may say (100 years).
const MAX_RETENTION_DAYS: f64 = 36_500.0;

/// `[output] spill_retention_days`: a number of days >= 0, 0 meaning never.
fn retention_days(value: &Value) -> Result<f64, String> {
    let expected = || {
        format!(
            "a number of days >= 0 and <= {MAX_RETENTION_DAYS:.0} (0 = never remove spill files for age)"
        )
    };
    let days = match value {
        Value::Integer(i) => *i as f64,
        Value::Float(f) => *f,
        _ => return Err(expected()),
    };
    if days.is_finite() && (0.0..=MAX_RETENTION_DAYS).contains(&days) {
        Ok(days)
    } else {
        Err(expected())
    }
}

/// A `[limits]` count: a whole number >= 0, 0 meaning no limit.
fn whole_limit(value: &Value, what: &str) -> Result<u64, String> {
    match value {
        Value::Integer(i) if *i >= 0 => Ok(*i as u64),
        _ => Err(format!("{what} >= 0 (0 = no limit)")),
    }
}

/// A `[limits]` size: bytes as a whole number >= 0, or a size string.
fn size_limit(value: &Value) -> Result<u64, String> {
    const EXPECTED: &str = "a size in bytes >= 0 (0 = no limit): a whole number or a string like \"512MiB\" or \"2GiB\"";
    let bytes = match value {
        Value::Integer(i) if *i >= 0 => Some(*i as u64),
        Value::String(s) => crate::limits::parse_size(s),
        _ => None,
    };
    bytes
        .filter(|b| *b <= i64::MAX as u64)
        .ok_or_else(|| EXPECTED.to_string())
}

fn usize_count(value: &Value) -> Result<usize, String> {
    let max = u64::try_from(usize::MAX)
        .unwrap_or(u64::MAX)
        .min(i64::MAX as u64);
    let n = count(value, max)?;
    usize::try_from(n).map_err(|_| format!("a whole number >= 1 and <= {max}"))
}

fn choice<T: Named>(value: &Value) -> Result<T, String> {
    value.as_str().and_then(T::from_name).ok_or_else(|| {
        let quoted: Vec<String> = T::NAMES.iter().map(|n| format!("\"{n}\"")).collect();
        match quoted.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => quoted.join(""),
        }
    })
}

#[derive(Clone, Copy)]
enum TextRule {
    Path,
    Url,
    EnvName,
}

fn text(value: &Value, rule: TextRule) -> Result<String, String> {
    let expected = match rule {
        TextRule::Path => "a path (a string without NUL bytes)",
        TextRule::Url => "\"\" or an http:// or https:// URL",
        TextRule::EnvName => "\"\" or an environment variable name (letters, digits, _)",
    };
    let s = value.as_str().ok_or_else(|| expected.to_string())?;
    let ok = match rule {
        TextRule::Path => !s.contains('\0'),
        TextRule::Url => {
            s.is_empty()
                || ((s.starts_with("http://") || s.starts_with("https://"))
                    && !s.chars().any(|c| c.is_whitespace() || c.is_control()))
        }
        TextRule::EnvName => s.is_empty() || is_env_name(s),
    };
    if ok {
        Ok(s.to_string())
    } else {
        Err(expected.to_string())
    }
}

fn is_env_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[derive(Clone, Copy)]
enum ListRule {
    EnvNames,
    ToolNames,
    Regexes,
}

fn list(value: &Value, rule: ListRule) -> Result<Vec<String>, String> {
    let expected = match rule {
        ListRule::EnvNames => {
            "a list of environment variable names (letters, digits, _; a trailing * matches a prefix)"
        }
        ListRule::ToolNames => "a list of distinct tool names",
        ListRule::Regexes => "a list of regexes",
    };
    let items = value.as_array().ok_or_else(|| expected.to_string())?;
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let Some(s) = item.as_str() else {
            return Err(format!("{expected}, but an item is {}", render(item)));
        };
        match rule {
            ListRule::EnvNames => {
                let name = s.strip_suffix('*').unwrap_or(s);
                if !is_env_name(name) {
                    return Err(format!("{expected}, but an item is {}", render(item)));
                }
            }
            ListRule::ToolNames => {
                if s.is_empty() || out.iter().any(|t| t == s) {
                    let why = if s.is_empty() { "empty" } else { "repeated" };
                    return Err(format!("{expected}, but {} is {why}", render(item)));
                }
            }
            ListRule::Regexes => {
                if let Err(e) = regex::Regex::new(s) {
                    return Err(format!(
                        "{expected}, but {} does not compile: {}",
                        render(item),
                        one_line(&e.to_string())
                    ));
                }
            }
        }
        out.push(s.to_string());
    }
    Ok(out)
}

/// A relative path with a directory part, anchored at the config file's
/// directory; bare names (`python3.12`), `~/…` (expanded later against
/// `$HOME`) and absolute paths unchanged.
fn anchored(path: String, base_dir: Option<&Path>) -> String {
    match base_dir {
        Some(base)
            if path.contains('/') && !path.starts_with("~/") && !Path::new(&path).is_absolute() =>
        {
            base.join(&path).to_string_lossy().into_owned()
        }
        _ => path,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_table_matches_the_serde_structs() {
        let table: toml::Table = toml::to_string(&Config::default())
            .unwrap()
            .parse()
            .unwrap();
        let mut from_serde: Vec<String> = Vec::new();
        for (section, keys) in &table {
            for key in keys.as_table().unwrap().keys() {
                from_serde.push(format!("{section}.{key}"));
            }
        }
        from_serde.sort();
        let mut ours: Vec<String> = Config::keys().map(str::to_string).collect();
        ours.sort();
        assert_eq!(from_serde, ours);
        for (key, _) in KEYS {
            assert!(SECTIONS.contains(&key.split_once('.').unwrap().0), "{key}");
        }
    }

    #[test]
    fn every_key_reads_back_its_own_value() {
        let config = Config::default();
        for key in Config::keys() {
            let mut other = Config::default();
            let value = config.value(key).unwrap();
            other
                .apply(known_key(key).unwrap(), &value, None, &Source::Default)
                .unwrap();
            assert_eq!(other.value(key), Some(value), "{key}");
        }
        config.validate().unwrap();
    }

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("timeout", "timout"), 1);
        assert_eq!(edit_distance("mode", "mode"), 0);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn choice_lists_read_naturally() {
        let got = choice::<SearchProvider>(&Value::Integer(1));
        assert_eq!(got.unwrap_err(), "\"\", \"searxng\" or \"brave\"");
    }
}
