//! `toolcell.toml`: the configuration, where each value came from, and CLI
//! overrides.
//!
//! Every key is optional and has a default. The keys are declared once, in
//! `config/sections.rs` (the section types [`Execution`], [`Kernels`], …:
//! each field's type, default, rule and doc); reading, checking, printing,
//! the provenance output of `toolcell config`, the key list
//! ([`key_infos`]) and the reference `docs/configuration.md`
//! ([`reference_markdown`]) are all derived from those declarations.
//!
//! A file is read strictly: an unknown section or key, a wrong type or an
//! out-of-range value is a [`ConfigError`] naming the key as `section.key`,
//! what it accepts and what it got — never a silent fallback:
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
//! use toolcell_host::config::{Config, Mode, Source};
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
//! # Ok::<(), toolcell_host::config::ConfigError>(())
//! ```
//!
//! Durations are `f64` seconds in the file (an integer is fine too); the
//! typed getters ([`Config::timeout`], …) return [`Duration`]s. `[limits]`
//! keys are 0 (no limit) by default; [`Config::limits`] gives them as
//! [`toolcell_kernel::limits::Limits`], and `toolcell config` prints sizes in bytes.
//!
//! # Adding a key
//!
//! Add a field to its section in `config/sections.rs` with its type,
//! default, rule (`config/rules.rs`) and a doc comment whose text is what
//! users read in `docs/configuration.md`; then regenerate that file with
//! `UPDATE_DOCS=1 cargo test -p toolcell-host --test it config_docs::`.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Value;

mod mcp;
mod reference;
mod rules;
mod section;
mod sections;

pub use mcp::McpServer;
pub use reference::reference_markdown;
pub use sections::{
    Daemon, Env, Execution, Guard, JournalConfig, Kernels, Limits, Output, Rpc, Sandbox, Tools, Web,
};

use rules::{Kind, expected_got, one_line, parse_flag_value};
use section::Section;

/// The file name looked for in the working directory and the user config dir.
pub const FILE_NAME: &str = "toolcell.toml";

/// Largest accepted number of seconds for any duration key (about 31 years):
/// large enough to mean "never", small enough that deadlines never overflow.
pub const MAX_SECONDS: f64 = 1e9;

/// Largest config file read (a config is a few hundred bytes; this bounds
/// the memory a wrong `--config` path can cost).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The largest `[kernels] warm_pool`.
pub const MAX_WARM_POOL: usize = 64;

/// Most days `[output] spill_retention_days` may say (100 years).
pub const MAX_RETENTION_DAYS: f64 = 36_500.0;

/// The tools enabled by default (`[tools] enabled` when the configuration
/// does not set it): every tool linked into the binary whose registration
/// says it is on by default (`Tool::DEFAULT_ENABLED`), sorted. Derived from
/// the tools registry, so a new tool needs no entry here.
pub fn default_tools() -> Vec<String> {
    toolcell_tools::default_enabled_tools()
}

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

pub use toolcell_stubs::{Mode, OnTimeout};

impl Named for toolcell_kernel::language::Language {
    const NAMES: &'static [&'static str] = &["python", "r", "javascript"];
    fn name(self) -> &'static str {
        self.as_str()
    }
    fn from_name(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.as_str() == text)
    }
}

impl Named for toolcell_kernel::sandbox::Mode {
    const NAMES: &'static [&'static str] = &["auto", "required", "off"];
    fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Required => "required",
            Self::Off => "off",
        }
    }
    fn from_name(text: &str) -> Option<Self> {
        Self::NAMES
            .iter()
            .position(|n| *n == text)
            .map(|i| [Self::Auto, Self::Required, Self::Off][i])
    }
}

impl Named for Mode {
    const NAMES: &'static [&'static str] = &[Mode::Project.as_str(), Mode::Strict.as_str()];
    fn name(self) -> &'static str {
        self.as_str()
    }
    fn from_name(text: &str) -> Option<Self> {
        Mode::from_name(text)
    }
}

impl Named for OnTimeout {
    const NAMES: &'static [&'static str] =
        &[OnTimeout::Interrupt.as_str(), OnTimeout::Kill.as_str()];
    fn name(self) -> &'static str {
        self.as_str()
    }
    fn from_name(text: &str) -> Option<Self> {
        OnTimeout::from_name(text)
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
    /// `[rpc] transport`: how a kernel reaches the host's tools.
    pub enum Transport {
        /// A Unix socket in the kernel's private directory.
        #[default]
        Unix = "unix",
        /// 127.0.0.1 on an ephemeral port.
        Tcp = "tcp",
    }
}

choice_enum! {
    /// `[web] search_provider`: the API behind `web_search`.
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

    pub(crate) fn to_value(self) -> Value {
        match self {
            Self::Auto => Value::String("auto".into()),
            Self::On => Value::Boolean(true),
            Self::Off => Value::Boolean(false),
        }
    }

    pub(crate) fn from_value(value: &Value) -> Option<Self> {
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
        self.to_value().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Switch {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Self::from_value(&v)
            .ok_or_else(|| serde::de::Error::custom("expected true, false or \"auto\""))
    }
}

/// Where a key's effective value came from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// The built-in default (or set in code).
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
    #[error("{}{key}: {message}", Prefix(.origin))]
    Invalid {
        /// Where the value came from.
        origin: Source,
        /// `section.key`.
        key: String,
        /// `expected <what the key accepts>, got <the value as TOML>` (the
        /// value shortened when long).
        message: String,
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

/// One key of `toolcell.toml`, as its declaration gives it: what the
/// reference prints and what `toolcell config` walks.
#[derive(Debug)]
#[non_exhaustive]
pub struct KeyInfo {
    /// `section.key`.
    pub key: String,
    /// The section.
    pub section: &'static str,
    /// The key within its section.
    pub name: &'static str,
    /// The doc comment, one line per source line, trimmed.
    pub doc: String,
    /// What the key accepts.
    pub accepts: String,
    /// The default value as TOML.
    pub default: Value,
    kind: Kind,
}

/// One `[section]` of `toolcell.toml`.
#[derive(Debug)]
#[non_exhaustive]
pub struct SectionInfo {
    /// The section name.
    pub name: &'static str,
    /// The doc comment, trimmed.
    pub doc: String,
    /// Its keys, in printing order.
    pub keys: &'static [&'static str],
}

fn trim_doc(doc: &str) -> String {
    doc.lines()
        .map(str::trim)
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string()
}

impl SectionInfo {
    fn of<T: Section>(name: &'static str) -> Self {
        Self {
            name,
            doc: trim_doc(T::DOC),
            keys: T::KEYS,
        }
    }
}

fn keys_of<T: Section + Serialize>(section: &'static str, out: &mut Vec<KeyInfo>) {
    let defaults = T::default();
    for meta in T::meta() {
        out.push(KeyInfo {
            key: format!("{section}.{}", meta.name),
            section,
            name: meta.name,
            doc: trim_doc(meta.doc),
            accepts: meta.accepts,
            default: defaults.get(meta.name).unwrap_or(Value::Boolean(false)),
            kind: meta.kind,
        });
    }
}

/// Declares [`Config`] from its list of sections: the struct, the section
/// list and the per-section dispatch.
macro_rules! config {
    (
        $(#[$meta:meta])*
        pub struct Config {
            $( $(#[doc = $doc:literal])* $field:ident: $ty:ty, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, Serialize, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        #[non_exhaustive]
        pub struct Config {
            $( $(#[doc = $doc])* pub $field: $ty, )+
            /// `[mcp_servers.NAME]`: MCP servers whose tools cells can call
            /// (as the functions of `toolcell_tools.NAME`).
            pub mcp_servers: std::collections::BTreeMap<String, McpServer>,
            /// `[remotes.NAME]`: machines or containers where kernels can
            /// run, each reached by a command (`ssh`, `docker exec -i`,
            /// `kubectl exec -i POD --`).
            pub remotes: std::collections::BTreeMap<String, toolcell_kernel::remote::Remote>,
            /// Provenance of every key not at its default.
            #[serde(skip)]
            sources: HashMap<&'static str, Source>,
            /// The file read, if any.
            #[serde(skip)]
            file: Option<PathBuf>,
        }

        static SECTIONS: LazyLock<Vec<SectionInfo>> =
            LazyLock::new(|| vec![$( SectionInfo::of::<$ty>(stringify!($field)) ),+]);

        static KEYS: LazyLock<Vec<KeyInfo>> = LazyLock::new(|| {
            let mut keys = Vec::new();
            $( keys_of::<$ty>(stringify!($field), &mut keys); )+
            keys
        });

        impl Config {
            fn get_in(&self, section: &str, key: &str) -> Option<Value> {
                match section {
                    $( stringify!($field) => self.$field.get(key), )+
                    _ => None,
                }
            }

            fn set_in(&mut self, section: &str, key: &str, value: &Value) -> Option<Result<(), String>> {
                match section {
                    $( stringify!($field) => self.$field.set(key, value), )+
                    _ => None,
                }
            }

            fn anchor_paths(&mut self, base: &Path) {
                $( self.$field.anchor(base); )+
                for s in self.mcp_servers.values_mut() {
                    mcp::anchor(s, base);
                }
            }
        }
    };
}

config! {
    /// The effective configuration — every section of `toolcell.toml` —
    /// and where each value came from.
    ///
    /// Build one with [`Config::default`], [`Config::discover`],
    /// [`Config::from_file`] or [`Config::from_toml_str`]; the last three check
    /// every value. A `Config` changed in code (its fields are public) can be
    /// checked with [`Config::validate`]. It also implements serde's traits
    /// for embedders that keep it inside their own configuration: reading is
    /// as strict as from a file (unknown keys and bad values are errors),
    /// except for [`Config::validate`]'s rules that tie two keys together.
    pub struct Config {
        /// `[execution]`
        execution: Execution,
        /// `[kernels]`
        kernels: Kernels,
        /// `[limits]`
        limits: Limits,
        /// `[output]`
        output: Output,
        /// `[env]`
        env: Env,
        /// `[tools]`
        tools: Tools,
        /// `[rpc]`
        rpc: Rpc,
        /// `[web]`
        web: Web,
        /// `[guard]`
        guard: Guard,
        /// `[daemon]`
        daemon: Daemon,
        /// `[journal]`
        journal: JournalConfig,
        /// `[sandbox]`
        sandbox: Sandbox,
    }
}

/// Every key of `toolcell.toml`, in printing order.
pub fn key_infos() -> &'static [KeyInfo] {
    &KEYS
}

/// Every section of `toolcell.toml`, in printing order.
pub fn section_infos() -> &'static [SectionInfo] {
    &SECTIONS
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

    /// Reads and checks one file. Relative `spill_dir`, `journal.path` and
    /// `python` paths in it are taken relative to the file's directory.
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
        // Unknown names first, with suggestions serde's error cannot give.
        let mut given: Vec<&'static str> = Vec::new();
        for (section, value) in &table {
            if section == "mcp_servers" || section == "remotes" {
                // Checked below, by serde and `check_cross`.
                continue;
            }
            let Some(info) = SECTIONS.iter().find(|s| s.name == section) else {
                return Err(unknown_section(origin, section));
            };
            let Some(keys) = value.as_table() else {
                return Err(ConfigError::Invalid {
                    origin,
                    key: section.clone(),
                    message: expected_got(&format!("a table [{section}]"), value),
                });
            };
            for name in keys.keys() {
                let full = format!("{}.{name}", info.name);
                let Some(key) = known_key(&full) else {
                    return Err(unknown_key(origin, &full));
                };
                given.push(key);
            }
        }
        // Then every value, each checked by its key's rule.
        let mut config: Self =
            serde_path_to_error::deserialize(Value::Table(table)).map_err(|e| {
                ConfigError::Invalid {
                    origin: origin.clone(),
                    key: e.path().to_string(),
                    message: e.inner().message().trim_end().to_string(),
                }
            })?;
        if let Some(p) = path {
            if let Some(base) = p.parent() {
                config.anchor_paths(base);
            }
            for key in given {
                config.sources.insert(key, Source::File(p.to_path_buf()));
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
        let Some(info) = key_info(key) else {
            return Err(unknown_key(origin, key));
        };
        let parsed = parse_flag_value(info.kind, value);
        self.set_key(info, &parsed, &origin)?;
        self.sources.insert(info.key.as_str(), origin);
        Ok(())
    }

    /// Checks every value (types, ranges, regexes) and the rules that tie two
    /// keys together. Configs read from a file are already checked; use this
    /// after changing fields in code or deserializing with serde directly.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut scratch = Self::default();
        for info in KEYS.iter() {
            let value = self
                .get_in(info.section, info.name)
                .unwrap_or(Value::Boolean(false));
            scratch.set_key(info, &value, self.source_or_default(&info.key))?;
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
                    message: expected_got(
                        &format!("valid regexes ({})", one_line(&e.to_string())),
                        &Value::String(pattern.clone()),
                    ),
                })
            })
            .collect()
    }

    /// Where `key`'s value came from; `None` if `key` is not a known
    /// `section.key`.
    pub fn source(&self, key: &str) -> Option<&Source> {
        let info = key_info(key)?;
        Some(self.source_or_default(&info.key))
    }

    /// The file this configuration was read from, if any.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// Every known `section.key`, in printing order.
    pub fn keys() -> impl Iterator<Item = &'static str> {
        KEYS.iter().map(|k| k.key.as_str())
    }

    /// The value of `key` as TOML; `None` if `key` is unknown.
    pub fn value(&self, key: &str) -> Option<Value> {
        let (section, name) = key.split_once('.')?;
        self.get_in(section, name)
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

    /// The limits the `execute_code` tool description states.
    pub fn execute_code_options(&self) -> toolcell_stubs::ExecuteCodeOptions {
        toolcell_stubs::ExecuteCodeOptions {
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
            language: self.execution.language.as_str().to_string(),
            folds: self.output.fold != Switch::Off,
            reach: self.reach(),
        }
    }

    /// What a kernel of this configuration can reach, for the description.
    fn reach(&self) -> toolcell_stubs::Reach {
        use toolcell_kernel::sandbox::{Mode, Network};
        use toolcell_stubs::{NetworkReach, Reach};
        if !self.kernels.remote.is_empty() {
            return Reach::Remote;
        }
        if self.sandbox.mode == Mode::Off {
            return Reach::Unsandboxed;
        }
        Reach::Sandboxed(match &self.sandbox.network {
            Network::None => NetworkReach::None,
            Network::Packages => NetworkReach::Packages,
            Network::Host => NetworkReach::Host,
            Network::List(l) => NetworkReach::List(l.clone()),
        })
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
    pub fn limits(&self) -> toolcell_kernel::limits::Limits {
        let on = |v: u64| (v > 0).then_some(v);
        toolcell_kernel::limits::Limits {
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
    #[cfg(feature = "journal")]
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
            out.push_str(section.name);
            out.push_str("]\n");
            for name in section.keys {
                let value = self
                    .get_in(section.name, name)
                    .map(|v| v.to_string())
                    .unwrap_or_default();
                out.push_str(name);
                out.push_str(" = ");
                out.push_str(&value);
                if with_sources {
                    let key = format!("{}.{name}", section.name);
                    out.push_str("  # ");
                    out.push_str(&one_line(&self.source_or_default(&key).to_string()));
                }
                out.push('\n');
            }
        }
        let source = self.file.as_ref().map(|f| format!("from {}", f.display()));
        out.push_str(&mcp::to_toml(
            &self.mcp_servers,
            if with_sources {
                source.as_deref()
            } else {
                None
            },
        ));
        out.push_str(&toolcell_kernel::remote::to_toml(
            &self.remotes,
            if with_sources {
                source.as_deref()
            } else {
                None
            },
        ));
        out
    }

    /// Checks and stores one value.
    fn set_key(
        &mut self,
        info: &KeyInfo,
        value: &Value,
        origin: &Source,
    ) -> Result<(), ConfigError> {
        match self.set_in(info.section, info.name, value) {
            Some(Ok(())) => Ok(()),
            Some(Err(expected)) => Err(ConfigError::Invalid {
                origin: origin.clone(),
                key: info.key.clone(),
                message: expected_got(&expected, value),
            }),
            None => Err(unknown_key(origin.clone(), &info.key)),
        }
    }

    /// The `[mcp_servers]` as specs for [`crate::registry::McpSource`]
    /// (with the `mcp` feature, on by default).
    #[cfg(feature = "mcp")]
    pub fn mcp_specs(&self) -> Vec<toolcell_tools::mcp::McpServerSpec> {
        mcp::specs(&self.mcp_servers)
    }

    /// The names of the `[mcp_servers]`, sorted.
    pub fn mcp_server_names(&self) -> Vec<String> {
        self.mcp_servers.keys().cloned().collect()
    }

    /// `[sandbox] writable` and `hidden`: each path exists, and no
    /// writable path lies under a hidden one.
    fn check_sandbox_paths(&self) -> Result<(), ConfigError> {
        let writable = self.sandbox_paths(&self.sandbox.writable);
        let hidden = self.sandbox_paths(&self.sandbox.hidden);
        for (key, list) in [("sandbox.writable", &writable), ("sandbox.hidden", &hidden)] {
            for p in list {
                if std::fs::symlink_metadata(p).is_err() {
                    return Err(ConfigError::Invalid {
                        origin: self.source_or_default(key).clone(),
                        key: key.into(),
                        message: format!(
                            "{} does not exist (create it, or remove it from the list)",
                            p.display()
                        ),
                    });
                }
            }
        }
        for w in &writable {
            let w = toolcell_sys::sandbox::resolve(w);
            if let Some(h) = hidden
                .iter()
                .find(|h| w.starts_with(toolcell_sys::sandbox::resolve(h)))
            {
                return Err(ConfigError::Invalid {
                    origin: self.source_or_default("sandbox.writable").clone(),
                    key: "sandbox.writable".into(),
                    message: format!(
                        "{} is under a hidden path ({}, sandbox.hidden): a hidden path shows nothing, so nothing under it can be writable",
                        w.display(),
                        h.display()
                    ),
                });
            }
        }
        Ok(())
    }

    /// The paths of a `[sandbox]` list, `~/` expanded.
    fn sandbox_paths(&self, list: &[String]) -> Vec<PathBuf> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        list.iter()
            .map(|p| match (p.strip_prefix("~/"), &home) {
                (Some(rest), Some(h)) => h.join(rest),
                _ if p == "~" => home.clone().unwrap_or_else(|| PathBuf::from("/")),
                _ => PathBuf::from(p),
            })
            .collect()
    }

    /// The sandbox policy `[sandbox]` describes: the user's lists plus the
    /// credential stores and `toolcell_dirs` hidden.
    pub fn sandbox_policy(&self, toolcell_dirs: &[PathBuf]) -> toolcell_kernel::sandbox::Policy {
        let mut hidden = toolcell_kernel::sandbox::credential_stores();
        hidden.extend(toolcell_dirs.iter().cloned());
        hidden.extend(self.sandbox_paths(&self.sandbox.hidden));
        toolcell_kernel::sandbox::Policy {
            mode: self.sandbox.mode,
            network: self.sandbox.network.clone(),
            writable: self.sandbox_paths(&self.sandbox.writable),
            hidden,
            readable: Vec::new(),
            tmp_bytes: self.sandbox.tmp_bytes,
        }
    }

    /// Rules involving two keys.
    fn check_cross(&self) -> Result<(), ConfigError> {
        let file_origin = || {
            self.file
                .as_ref()
                .map_or(Source::Default, |f| Source::File(f.clone()))
        };
        for (name, remote) in &self.remotes {
            if let Err((key, message)) = toolcell_kernel::remote::check(name, remote) {
                let key = if key.is_empty() {
                    format!("remotes.{name}")
                } else {
                    format!("remotes.{name}.{key}")
                };
                return Err(ConfigError::Invalid {
                    origin: file_origin(),
                    key,
                    message,
                });
            }
        }
        let remote = &self.kernels.remote;
        if !remote.is_empty() && !self.remotes.contains_key(remote) {
            let known: Vec<&str> = self.remotes.keys().map(String::as_str).collect();
            return Err(ConfigError::Invalid {
                origin: self.source_or_default("kernels.remote").clone(),
                key: "kernels.remote".into(),
                message: format!(
                    "expected \"\" or one of the [remotes.NAME] tables ({}), got {remote:?}",
                    if known.is_empty() {
                        "none is configured".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            });
        }
        for (name, server) in &self.mcp_servers {
            if let Err((key, message)) = mcp::check(name, server) {
                let key = if key.is_empty() {
                    format!("mcp_servers.{name}")
                } else {
                    format!("mcp_servers.{name}.{key}")
                };
                return Err(ConfigError::Invalid {
                    origin: self
                        .file
                        .as_ref()
                        .map_or(Source::Default, |f| Source::File(f.clone())),
                    key,
                    message,
                });
            }
        }
        let (min_run, keep) = (self.output.fold_min_run, self.output.fold_keep);
        if self.output.fold != Switch::Off && (min_run < 2 || keep.saturating_mul(2) >= min_run) {
            return Err(ConfigError::Invalid {
                origin: self.source_or_default("output.fold_keep").clone(),
                key: "output.fold_keep".into(),
                message: format!(
                    "expected fewer than half of output.fold_min_run ({min_run}) lines, and fold_min_run at least 2 (a folded run shows fold_keep lines at each end and omits at least one), got fold_keep = {keep}; set fold = false to turn folding off"
                ),
            });
        }
        self.check_sandbox_paths()?;
        if self.execution.confine && self.execution.mode != Mode::Strict {
            return Err(ConfigError::Invalid {
                origin: self.source_or_default("execution.confine").clone(),
                key: "execution.confine".into(),
                message: "expected false unless execution.mode = \"strict\" (Landlock confinement applies to strict-mode kernels only), got true".into(),
            });
        }
        if self.web.search_provider == SearchProvider::Searxng
            && self.web.search_url.trim().is_empty()
        {
            return Err(ConfigError::Invalid {
                origin: self.source_or_default("web.search_url").clone(),
                key: "web.search_url".into(),
                message: "expected the SearXNG base URL when web.search_provider is \"searxng\", got \"\"".into(),
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

fn key_info(key: &str) -> Option<&'static KeyInfo> {
    KEYS.iter().find(|k| k.key == key)
}

fn known_key(key: &str) -> Option<&'static str> {
    key_info(key).map(|k| k.key.as_str())
}

fn section_names() -> Vec<&'static str> {
    SECTIONS.iter().map(|s| s.name).collect()
}

fn unknown_key(origin: Source, key: &str) -> ConfigError {
    let (section, name) = key.split_once('.').unwrap_or(("", key));
    let Some(info) = SECTIONS.iter().find(|s| s.name == section) else {
        return unknown_section(origin, section);
    };
    let known: Vec<&'static str> = info.keys.to_vec();
    // A key in another section, or a near miss in this one.
    let suggestion = KEYS
        .iter()
        .find(|k| k.name == name && k.key != key)
        .or_else(|| {
            KEYS.iter()
                .filter(|k| k.section == section)
                .map(|k| (k, edit_distance(k.name, name)))
                .filter(|(_, d)| *d <= 2)
                .min_by_key(|(_, d)| *d)
                .map(|(k, _)| k)
        })
        .map(|k| k.key.as_str());
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
        .find(|k| k.name == section)
        .map(|k| format!("did you mean `{}` under [{}]?", k.name, k.section))
        .or_else(|| {
            SECTIONS
                .iter()
                .map(|s| (s.name, edit_distance(s.name, section)))
                .filter(|(s, d)| *d <= 2 || (section.len() >= 3 && s.starts_with(section)))
                .min_by_key(|(_, d)| *d)
                .map(|(s, _)| format!("did you mean [{s}]?"))
        });
    ConfigError::UnknownSection {
        origin,
        section: section.to_string(),
        known: section_names(),
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

fn duration(secs: f64) -> Duration {
    // Values are checked when read; one set wrongly in code saturates rather
    // than panicking.
    if secs.is_nan() || secs <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(secs.min(MAX_SECONDS)).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_serde_output_has_exactly_the_declared_keys() {
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
    }

    #[test]
    fn every_key_reads_back_its_own_value() {
        let config = Config::default();
        for info in key_infos() {
            let mut other = Config::default();
            let value = config.value(&info.key).unwrap();
            assert_eq!(value, info.default, "{}", info.key);
            other.set_key(info, &value, &Source::Default).unwrap();
            assert_eq!(other.value(&info.key), Some(value), "{}", info.key);
        }
        config.validate().unwrap();
    }

    #[test]
    fn every_key_and_section_has_a_doc() {
        for info in key_infos() {
            assert!(!info.doc.is_empty(), "{}", info.key);
            assert!(!info.accepts.is_empty(), "{}", info.key);
        }
        for section in section_infos() {
            assert!(!section.doc.is_empty(), "{}", section.name);
        }
    }

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("timeout", "timout"), 1);
        assert_eq!(edit_distance("mode", "mode"), 0);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn choice_lists_read_naturally() {
        let got = rules::Rule::<SearchProvider>::parse(&rules::Choice, &Value::Integer(1));
        assert_eq!(got.unwrap_err(), "\"\", \"searxng\" or \"brave\"");
    }
}
