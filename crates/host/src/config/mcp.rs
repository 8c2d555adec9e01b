//! `[mcp_servers.NAME]`: MCP servers whose tools cells can call, as the
//! functions of `toolcell_tools.NAME`. A table of tables, so it lives
//! beside the fixed sections rather than in the `section!` list.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Longest server name.
pub(super) const MAX_NAME: usize = 64;

/// One `[mcp_servers.NAME]` table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct McpServer {
    /// The command that starts a stdio server: program and arguments.
    pub command: Vec<String>,
    /// Variables set for the server, on top of the host's environment.
    pub env: BTreeMap<String, String>,
    /// The server's working directory (relative to the config file's
    /// directory); empty: the host's.
    pub cwd: String,
    /// The URL of a streamable-HTTP server (instead of `command`).
    pub url: String,
    /// Which of its tools are enabled; empty: all.
    pub tools: Vec<String>,
    /// Seconds a cell waits for the server to start.
    pub startup_timeout: f64,
}

impl Default for McpServer {
    fn default() -> Self {
        Self {
            command: Vec::new(),
            env: BTreeMap::new(),
            cwd: String::new(),
            url: String::new(),
            tools: Vec::new(),
            startup_timeout: 30.0,
        }
    }
}

impl McpServer {
    /// A stdio server started by `command`.
    pub fn command<S: Into<String>>(command: impl IntoIterator<Item = S>) -> Self {
        Self {
            command: command.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// A streamable-HTTP server at `url`.
    pub fn url(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            ..Self::default()
        }
    }
}

/// What is wrong with server `name`: `(key under it, message)`.
pub(crate) fn check(name: &str, s: &McpServer) -> Result<(), (String, String)> {
    if name.is_empty()
        || name.len() > MAX_NAME
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err((
            String::new(),
            format!(
                "expected a server name of 1 to {MAX_NAME} letters, digits, `_` or `-` (it names the module toolcell_tools.NAME), got {name:?}"
            ),
        ));
    }
    let has_command = !s.command.is_empty();
    let has_url = !s.url.trim().is_empty();
    match (has_command, has_url) {
        (true, true) => {
            return Err((
                "url".into(),
                "expected either `command` (a stdio server) or `url` (a streamable-HTTP server), not both".into(),
            ));
        }
        (false, false) => {
            return Err((
                "command".into(),
                "expected `command = [\"program\", \"arg\", …]` (a stdio server) or `url = \"http://…\"` (a streamable-HTTP server)".into(),
            ));
        }
        _ => {}
    }
    if has_command && s.command[0].trim().is_empty() {
        return Err((
            "command".into(),
            "expected a program name first, got \"\"".into(),
        ));
    }
    if has_url && !(s.url.starts_with("http://") || s.url.starts_with("https://")) {
        return Err((
            "url".into(),
            format!("expected an http:// or https:// URL, got {:?}", s.url),
        ));
    }
    if !(s.startup_timeout > 0.0 && s.startup_timeout <= 3600.0) {
        return Err((
            "startup_timeout".into(),
            format!(
                "expected seconds > 0 and at most 3600, got {}",
                s.startup_timeout
            ),
        ));
    }
    if let Some(t) = s.tools.iter().find(|t| t.trim().is_empty()) {
        return Err(("tools".into(), format!("expected tool names, got {t:?}")));
    }
    Ok(())
}

/// Anchors a relative `cwd` to the config file's directory.
pub(crate) fn anchor(s: &mut McpServer, base: &Path) {
    if !s.cwd.is_empty() && Path::new(&s.cwd).is_relative() {
        s.cwd = base.join(&s.cwd).display().to_string();
    }
}

/// The `[mcp_servers.NAME]` tables as TOML, in name order.
pub(crate) fn to_toml(servers: &BTreeMap<String, McpServer>, source: Option<&str>) -> String {
    let mut out = String::new();
    for (name, s) in servers {
        let quoted = if name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            name.clone()
        } else {
            toml::Value::String(name.clone()).to_string()
        };
        out.push_str(&format!("\n[mcp_servers.{quoted}]"));
        if let Some(src) = source {
            out.push_str(&format!("  # {src}"));
        }
        out.push('\n');
        let table = toml::Value::try_from(s).ok();
        if let Some(toml::Value::Table(t)) = table {
            for (k, v) in t {
                out.push_str(&format!("{k} = {v}\n"));
            }
        }
    }
    out
}

/// The servers as the tools crate's specs (in name order).
#[cfg(feature = "mcp")]
pub(crate) fn specs(
    servers: &BTreeMap<String, McpServer>,
) -> Vec<toolcell_tools::mcp::McpServerSpec> {
    servers
        .iter()
        .map(|(name, s)| {
            let mut spec = if s.url.trim().is_empty() {
                toolcell_tools::mcp::McpServerSpec::stdio(name.clone(), s.command.clone())
            } else {
                toolcell_tools::mcp::McpServerSpec::http(name.clone(), s.url.clone())
            };
            spec.env = s.env.clone();
            spec.cwd = (!s.cwd.is_empty()).then(|| std::path::PathBuf::from(&s.cwd));
            spec.tools = s.tools.clone();
            spec.startup_timeout = std::time::Duration::from_secs_f64(s.startup_timeout);
            spec
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::config::Config;

    #[test]
    fn servers_are_read_checked_and_printed() {
        let c = Config::from_toml_str(
            "[mcp_servers.fs]\ncommand = [\"npx\", \"-y\", \"srv\"]\nenv = {A = \"1\"}\n\
             [mcp_servers.web-search]\nurl = \"http://127.0.0.1:9/mcp\"\ntools = [\"q\"]\nstartup_timeout = 5\n",
            None,
        )
        .unwrap();
        assert_eq!(c.mcp_server_names(), ["fs", "web-search"]);
        #[cfg(feature = "mcp")]
        {
            let specs = c.mcp_specs();
            assert_eq!(specs[0].command, ["npx", "-y", "srv"]);
            assert_eq!(specs[1].url.as_deref(), Some("http://127.0.0.1:9/mcp"));
            assert_eq!(specs[1].startup_timeout, std::time::Duration::from_secs(5));
        }
        let printed = c.to_toml();
        assert!(printed.contains("[mcp_servers.web-search]\n"), "{printed}");
        assert_eq!(
            Config::from_toml_str(&printed, None).unwrap().mcp_servers,
            c.mcp_servers
        );
        for (text, key) in [
            (
                "[mcp_servers.x]\ncommand = [\"a\"]\nurl = \"http://h\"\n",
                "mcp_servers.x.url",
            ),
            ("[mcp_servers.x]\n", "mcp_servers.x.command"),
            ("[mcp_servers.x]\nurl = \"ftp://h\"\n", "mcp_servers.x.url"),
            (
                "[mcp_servers.x]\ncommand = [\"a\"]\nstartup_timeout = 0\n",
                "mcp_servers.x.startup_timeout",
            ),
            (
                "[mcp_servers.\"a b\"]\ncommand = [\"a\"]\n",
                "mcp_servers.a b",
            ),
            (
                "[mcp_servers.x]\ncommand = [\"a\"]\nhandler = 1\n",
                "mcp_servers.x",
            ),
        ] {
            let e = Config::from_toml_str(text, None).unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }
}
