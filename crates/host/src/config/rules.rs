//! What each key accepts: one [`Rule`] per kind of value, used by the
//! section types (reading, checking, printing, anchoring) and by the
//! reference (`accepts`).

use std::path::Path;

use toml::Value;

use super::{MAX_SECONDS, MAX_WARM_POOL, Named, Switch};

/// Longest rendering of an offending value quoted in an error message.
const MAX_GOT_CHARS: usize = 80;

/// How a flag's string is turned into a value of the key's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Number,
    Text,
    List,
    Bool,
}

/// How one key's values are read, checked and written back.
pub(crate) trait Rule<T> {
    /// How a command-line string for this key is read.
    fn kind(&self) -> Kind;
    /// What the key accepts, as the reference states it.
    fn accepts(&self) -> String;
    /// Reads and checks a value; the error says what the key accepts (the
    /// `expected …` of the message), possibly specific to the value given.
    fn parse(&self, value: &Value) -> Result<T, String>;
    /// The value as TOML (reads back through [`Rule::parse`]).
    fn to_value(&self, value: &T) -> Value;
    /// Anchors a relative path read from a file at the file's directory.
    fn anchor(&self, _value: &mut T, _base: &Path) {}
}

/// A number of seconds (`f64`); `zero` says whether 0 is allowed.
pub(crate) struct Seconds {
    pub(crate) zero: bool,
}

impl Seconds {
    fn base(&self) -> &'static str {
        if self.zero {
            "a number of seconds >= 0"
        } else {
            "a number of seconds > 0"
        }
    }
}

impl Rule<f64> for Seconds {
    fn kind(&self) -> Kind {
        Kind::Number
    }
    fn accepts(&self) -> String {
        format!("{}, at most {MAX_SECONDS:.0}", self.base())
    }
    fn parse(&self, value: &Value) -> Result<f64, String> {
        let base = self.base();
        let secs = match value {
            Value::Integer(i) => *i as f64,
            Value::Float(f) => *f,
            _ => return Err(base.to_string()),
        };
        let low_ok = if self.zero { secs >= 0.0 } else { secs > 0.0 };
        if !secs.is_finite() || !low_ok {
            return Err(base.to_string());
        }
        if secs > MAX_SECONDS {
            return Err(format!("{base} and at most {MAX_SECONDS:.0}"));
        }
        Ok(secs)
    }
    fn to_value(&self, secs: &f64) -> Value {
        // Whole numbers print as integers (`timeout = 300`).
        if secs.fract() == 0.0 && secs.abs() < 9.0e15 {
            Value::Integer(*secs as i64)
        } else {
            Value::Float(*secs)
        }
    }
}

/// A whole number >= 1 and <= `max`.
pub(crate) struct Count {
    pub(crate) max: u64,
}

impl Count {
    /// Up to the largest TOML integer (and `usize`).
    pub(crate) const ANY: Self = Self {
        max: if (usize::MAX as u64) < i64::MAX as u64 {
            usize::MAX as u64
        } else {
            i64::MAX as u64
        },
    };
    /// Up to `u32::MAX`.
    pub(crate) const U32: Self = Self {
        max: u32::MAX as u64,
    };

    fn count(&self, value: &Value) -> Result<u64, String> {
        match value {
            Value::Integer(i) if *i >= 1 && (*i as u64) <= self.max => Ok(*i as u64),
            // Only a value over the top mentions the top.
            Value::Integer(i) if *i >= 1 => Err(format!("a whole number >= 1 and <= {}", self.max)),
            _ => Err("a whole number >= 1".to_string()),
        }
    }

    fn accepts_text(&self) -> String {
        if self.max == Self::ANY.max {
            "a whole number >= 1".to_string()
        } else {
            format!("a whole number from 1 to {}", self.max)
        }
    }
}

macro_rules! count_rule {
    ($($t:ty),+) => {$(
        impl Rule<$t> for Count {
            fn kind(&self) -> Kind {
                Kind::Number
            }
            fn accepts(&self) -> String {
                self.accepts_text()
            }
            fn parse(&self, value: &Value) -> Result<$t, String> {
                let n = self.count(value)?;
                <$t>::try_from(n).map_err(|_| format!("a whole number >= 1 and <= {}", self.max))
            }
            fn to_value(&self, n: &$t) -> Value {
                count_value(*n as u64)
            }
        }
    )+};
}

count_rule!(u32, u64, usize);

/// One of a closed set of names ([`Named`]).
pub(crate) struct Choice;

impl<T: Named> Rule<T> for Choice {
    fn kind(&self) -> Kind {
        Kind::Text
    }
    fn accepts(&self) -> String {
        let quoted: Vec<String> = T::NAMES.iter().map(|n| format!("\"{n}\"")).collect();
        match quoted.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => quoted.join(""),
        }
    }
    fn parse(&self, value: &Value) -> Result<T, String> {
        value
            .as_str()
            .and_then(T::from_name)
            .ok_or_else(|| <Self as Rule<T>>::accepts(self))
    }
    fn to_value(&self, value: &T) -> Value {
        Value::String(value.name().to_string())
    }
}

/// `true` or `false`.
pub(crate) struct Flag;

impl Rule<bool> for Flag {
    fn kind(&self) -> Kind {
        Kind::Bool
    }
    fn accepts(&self) -> String {
        "true or false".to_string()
    }
    fn parse(&self, value: &Value) -> Result<bool, String> {
        value.as_bool().ok_or_else(|| "true or false".to_string())
    }
    fn to_value(&self, value: &bool) -> Value {
        Value::Boolean(*value)
    }
}

/// `true`, `false` or `"auto"`.
pub(crate) struct AutoFlag;

impl Rule<Switch> for AutoFlag {
    fn kind(&self) -> Kind {
        Kind::Bool
    }
    fn accepts(&self) -> String {
        "true, false or \"auto\"".to_string()
    }
    fn parse(&self, value: &Value) -> Result<Switch, String> {
        Switch::from_value(value).ok_or_else(|| "true, false or \"auto\"".to_string())
    }
    fn to_value(&self, value: &Switch) -> Value {
        value.to_value()
    }
}

/// A whole number of kernels from 0 to [`MAX_WARM_POOL`], or `"auto"` (`None`).
pub(crate) struct WarmPool;

impl Rule<Option<usize>> for WarmPool {
    fn kind(&self) -> Kind {
        Kind::Number
    }
    fn accepts(&self) -> String {
        format!("a whole number of kernels from 0 to {MAX_WARM_POOL}, or \"auto\"")
    }
    fn parse(&self, value: &Value) -> Result<Option<usize>, String> {
        match value {
            Value::String(s) if s == "auto" => Ok(None),
            Value::Integer(n) if (0..=MAX_WARM_POOL as i64).contains(n) => {
                Ok(usize::try_from(*n).ok())
            }
            _ => Err(self.accepts()),
        }
    }
    fn to_value(&self, value: &Option<usize>) -> Value {
        match value {
            Some(n) => count_value(*n as u64),
            None => Value::String("auto".into()),
        }
    }
}

/// A resource limit: a whole number >= 0, 0 meaning no limit. `what` names
/// the unit (`a whole number of open files`).
pub(crate) struct Limit {
    pub(crate) what: &'static str,
}

impl Rule<u64> for Limit {
    fn kind(&self) -> Kind {
        Kind::Number
    }
    fn accepts(&self) -> String {
        format!("{} >= 0 (0 = no limit)", self.what)
    }
    fn parse(&self, value: &Value) -> Result<u64, String> {
        match value {
            Value::Integer(i) if *i >= 0 => Ok(*i as u64),
            _ => Err(self.accepts()),
        }
    }
    fn to_value(&self, value: &u64) -> Value {
        count_value(*value)
    }
}

/// A size: bytes as a whole number >= 0, or a size string (`"512MiB"`);
/// 0 means none. `accepts` is the whole description.
pub(crate) struct Size {
    accepts: &'static str,
}

impl Size {
    /// A `[limits]` size (0 = no limit).
    pub(crate) const LIMIT: Self = Self {
        accepts: "a size in bytes >= 0 (0 = no limit): a whole number or a string like \"512MiB\" or \"2GiB\"",
    };
    /// The sandbox's private `/tmp`.
    pub(crate) const TMP: Self = Self {
        accepts: "a size in bytes (at least 1MiB): a whole number or a string like \"512MiB\" or \"2GiB\"",
    };
    /// A cap on total bytes (0 = no cap).
    pub(crate) const CAP: Self = Self {
        accepts: "a size in bytes >= 0 (0 = no cap): a whole number or a string like \"500MiB\" or \"1GiB\"",
    };
}

impl Rule<u64> for Size {
    fn kind(&self) -> Kind {
        Kind::Number
    }
    fn accepts(&self) -> String {
        self.accepts.to_string()
    }
    fn parse(&self, value: &Value) -> Result<u64, String> {
        let bytes = match value {
            Value::Integer(i) if *i >= 0 => Some(*i as u64),
            Value::String(s) => toolcell_kernel::limits::parse_size(s),
            _ => None,
        };
        bytes
            .filter(|b| *b <= i64::MAX as u64)
            .filter(|b| self.accepts != Self::TMP.accepts || *b >= 1 << 20)
            .ok_or_else(|| self.accepts())
    }
    fn to_value(&self, value: &u64) -> Value {
        count_value(*value)
    }
}

/// A number of days from 0 to `max` (fractions allowed); 0 means never.
pub(crate) struct Days {
    pub(crate) max: f64,
}

impl Rule<f64> for Days {
    fn kind(&self) -> Kind {
        Kind::Number
    }
    fn accepts(&self) -> String {
        format!(
            "a number of days >= 0 and <= {:.0} (0 = never remove spill files for age)",
            self.max
        )
    }
    fn parse(&self, value: &Value) -> Result<f64, String> {
        let days = match value {
            Value::Integer(i) => *i as f64,
            Value::Float(f) => *f,
            _ => return Err(self.accepts()),
        };
        if days.is_finite() && (0.0..=self.max).contains(&days) {
            Ok(days)
        } else {
            Err(self.accepts())
        }
    }
    fn to_value(&self, days: &f64) -> Value {
        Seconds { zero: true }.to_value(days)
    }
}

/// A string with a rule.
#[derive(Clone, Copy)]
pub(crate) enum Text {
    /// A program: a path, or a bare name looked up on PATH. A relative path
    /// with a directory part is anchored at the config file's directory.
    Program,
    /// A path; a relative one is anchored at the config file's directory.
    Path,
    /// `""` or an `http://` / `https://` URL.
    Url,
    /// `""` or an environment variable name.
    EnvName,
    /// `""` or a remote's name (letters, digits, `_`, `-`).
    RemoteName,
}

impl Rule<String> for Text {
    fn kind(&self) -> Kind {
        Kind::Text
    }
    fn accepts(&self) -> String {
        match self {
            Self::Program | Self::Path => "a path (a string without NUL bytes)",
            Self::Url => "\"\" or an http:// or https:// URL",
            Self::EnvName => "\"\" or an environment variable name (letters, digits, _)",
            Self::RemoteName => "\"\" (local) or the name of a [remotes.NAME] table",
        }
        .to_string()
    }
    fn parse(&self, value: &Value) -> Result<String, String> {
        let s = value.as_str().ok_or_else(|| self.accepts())?;
        let ok = match self {
            Self::Program | Self::Path => !s.contains('\0'),
            Self::Url => {
                s.is_empty()
                    || ((s.starts_with("http://") || s.starts_with("https://"))
                        && !s.chars().any(|c| c.is_whitespace() || c.is_control()))
            }
            Self::EnvName => s.is_empty() || is_env_name(s),
            Self::RemoteName => s.is_empty() || toolcell_kernel::remote::valid_name(s),
        };
        if ok {
            Ok(s.to_string())
        } else {
            Err(self.accepts())
        }
    }
    fn to_value(&self, value: &String) -> Value {
        Value::String(value.clone())
    }
    fn anchor(&self, path: &mut String, base: &Path) {
        // `~/…` is expanded later against $HOME; absolute paths stay.
        let relative = !path.is_empty() && !path.starts_with("~/") && Path::new(path).is_relative();
        let anchor = match self {
            // A bare name (`python3.12`) is looked up on PATH.
            Self::Program => relative && path.contains('/'),
            Self::Path => relative,
            Self::Url | Self::EnvName | Self::RemoteName => false,
        };
        if anchor {
            *path = base.join(&*path).to_string_lossy().into_owned();
        }
    }
}

/// A list of strings with a rule for the items.
#[derive(Clone, Copy)]
pub(crate) enum List {
    /// Environment variable names; a trailing `*` matches a prefix.
    EnvNames,
    /// Distinct, non-empty tool names.
    ToolNames,
    /// Regexes that compile.
    Regexes,
    /// Paths (`~/` for the home directory; relative ones anchored at the
    /// config file's directory).
    Paths,
}

impl Rule<Vec<String>> for List {
    fn kind(&self) -> Kind {
        Kind::List
    }
    fn accepts(&self) -> String {
        match self {
            Self::EnvNames => {
                "a list of environment variable names (letters, digits, _; a trailing * matches a prefix)"
            }
            Self::ToolNames => "a list of distinct tool names",
            Self::Regexes => "a list of regexes",
            Self::Paths => "a list of paths",
        }
        .to_string()
    }
    fn parse(&self, value: &Value) -> Result<Vec<String>, String> {
        let expected = self.accepts();
        let items = value.as_array().ok_or_else(|| expected.clone())?;
        let mut out: Vec<String> = Vec::with_capacity(items.len());
        for item in items {
            let Some(s) = item.as_str() else {
                return Err(format!("{expected}, but an item is {}", render(item)));
            };
            match self {
                Self::EnvNames => {
                    let name = s.strip_suffix('*').unwrap_or(s);
                    if !is_env_name(name) {
                        return Err(format!("{expected}, but an item is {}", render(item)));
                    }
                }
                Self::ToolNames => {
                    if s.is_empty() || out.iter().any(|t| t == s) {
                        let why = if s.is_empty() { "empty" } else { "repeated" };
                        return Err(format!("{expected}, but {} is {why}", render(item)));
                    }
                }
                Self::Paths => {
                    if s.is_empty() || s.contains('\0') {
                        return Err(format!("{expected}, but an item is {}", render(item)));
                    }
                }
                Self::Regexes => {
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
    fn to_value(&self, value: &Vec<String>) -> Value {
        Value::Array(value.iter().cloned().map(Value::String).collect())
    }
    fn anchor(&self, value: &mut Vec<String>, base: &Path) {
        if matches!(self, Self::Paths) {
            for p in value.iter_mut() {
                if !p.starts_with('/') && !p.starts_with("~/") && p != "~" {
                    *p = base.join(&*p).to_string_lossy().into_owned();
                }
            }
        }
    }
}

/// `[sandbox] network`: `"none"`, `"packages"`, `"host"` or a list of
/// destinations.
pub(crate) struct NetworkRule;

impl Rule<toolcell_kernel::sandbox::Network> for NetworkRule {
    fn kind(&self) -> Kind {
        Kind::Text
    }
    fn accepts(&self) -> String {
        "\"packages\", \"none\", \"host\" or a list of destinations (\"example.com\", \"*.example.org\", \"example.net:8443\", \"127.0.0.1:9000\")".to_string()
    }
    fn parse(&self, value: &Value) -> Result<toolcell_kernel::sandbox::Network, String> {
        use toolcell_kernel::sandbox::{Dest, Network};
        match value {
            Value::String(s) => match s.as_str() {
                "packages" => Ok(Network::Packages),
                "none" => Ok(Network::None),
                "host" => Ok(Network::Host),
                _ => Err(self.accepts()),
            },
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    match item.as_str() {
                        Some(s) if Dest::parse(s).is_some() => out.push(s.to_string()),
                        _ => {
                            return Err(format!(
                                "{}, but an item is {}",
                                self.accepts(),
                                render(item)
                            ));
                        }
                    }
                }
                Ok(Network::List(out))
            }
            _ => Err(self.accepts()),
        }
    }
    fn to_value(&self, value: &toolcell_kernel::sandbox::Network) -> Value {
        use toolcell_kernel::sandbox::Network;
        match value {
            Network::List(l) => Value::Array(l.iter().cloned().map(Value::String).collect()),
            other => Value::String(other.name().to_string()),
        }
    }
}

pub(crate) fn is_env_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn count_value(n: u64) -> Value {
    i64::try_from(n).map_or(Value::Float(n as f64), Value::Integer)
}

/// The message part after the key: `expected …, got …`.
pub(crate) fn expected_got(expected: &str, value: &Value) -> String {
    format!("expected {expected}, got {}", render(value))
}

/// A value as TOML for an error message, shortened when long.
pub(crate) fn render(value: &Value) -> String {
    let text = one_line(&value.to_string());
    if text.chars().count() <= MAX_GOT_CHARS {
        return text;
    }
    let head: String = text.chars().take(MAX_GOT_CHARS).collect();
    format!("{head}…")
}

/// Control characters (a newline in a path, say) would break a TOML comment
/// or a one-line message.
pub(crate) fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// A flag's string as a TOML value of the key's kind. A string that does not
/// parse as the kind stays a string, so the key's check names it.
pub(crate) fn parse_flag_value(kind: Kind, raw: &str) -> Value {
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
