//! The destinations a sandbox may reach through its proxy: a list the
//! user wrote, or the package indexes pip, npm and R are configured with
//! on the host.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// One allowed destination: a host name (exact, or `*.suffix` for any
/// name under it) or an address, and a port (any when absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dest {
    host: String,
    wildcard: bool,
    port: Option<u16>,
}

impl Dest {
    /// Parses `example.com`, `*.example.org`, `example.net:8443`,
    /// `127.0.0.1:9000`, `[::1]:9000`.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        let (host, port) = split_host_port(s)?;
        let host = host.to_ascii_lowercase();
        let (host, wildcard) = match host.strip_prefix("*.") {
            Some(rest) => (rest.to_string(), true),
            None => (host, false),
        };
        if host.is_empty() || host.contains(['/', ' ', '@']) {
            return None;
        }
        Some(Self {
            host,
            wildcard,
            port,
        })
    }

    fn allows(&self, host: &str, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        if self.wildcard {
            host.strip_suffix(self.host.as_str())
                .is_some_and(|head| head.ends_with('.'))
        } else {
            host == self.host
        }
    }

    fn is_loopback(&self) -> bool {
        self.host == "localhost"
            || self
                .host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

/// `host[:port]`, with `[v6]:port` for IPv6 addresses.
pub(crate) fn split_host_port(s: &str) -> Option<(String, Option<u16>)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p.parse().ok()?),
            None if after.is_empty() => None,
            None => return None,
        };
        return Some((h.to_string(), port));
    }
    match s.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => Some((h.to_string(), Some(p.parse().ok()?))),
        Some(_) => Some((s.to_string(), None)),
        None => Some((s.to_string(), None)),
    }
}

/// The rule a sandbox's proxy enforces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    dests: Vec<Dest>,
    /// How the refusal names it: `network = "packages"` or the list.
    pub name: String,
}

impl Rule {
    /// The user's list (entries that do not parse were refused when the
    /// configuration was read).
    pub fn list(list: &[String]) -> Self {
        Self {
            dests: list.iter().filter_map(|s| Dest::parse(s)).collect(),
            name: format!(
                "network = [{}]",
                list.iter()
                    .map(|s| format!("{s:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// The package indexes of the host's pip, npm and R configuration
    /// (see [`package_indexes`]).
    pub fn packages(env: &[(OsString, OsString)]) -> Self {
        let hosts = package_indexes(env);
        Self {
            name: format!("network = \"packages\" ({})", hosts.join(", ")),
            dests: hosts.iter().filter_map(|h| Dest::parse(h)).collect(),
        }
    }

    /// Whether `host:port` may be reached.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let host = host.trim_start_matches('[').trim_end_matches(']');
        self.dests.iter().any(|d| d.allows(host, port))
    }

    /// Whether a destination is the host's loopback.
    pub fn names_loopback(&self) -> bool {
        self.dests.iter().any(Dest::is_loopback)
    }
}

/// `host:port` of a URL (`https://pypi.org/simple` → `pypi.org:443`).
fn url_dest(url: &str) -> Option<String> {
    let url = url.trim().trim_matches(['"', '\'']);
    let (scheme, rest) = url.split_once("://")?;
    let default = match scheme.to_ascii_lowercase().as_str() {
        "https" => 443,
        "http" => 80,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = split_host_port(authority)?;
    if host.is_empty() {
        return None;
    }
    let port = port.unwrap_or(default);
    if host.contains(':') {
        Some(format!("[{host}]:{port}"))
    } else {
        Some(format!("{host}:{port}"))
    }
}

/// The `http://` and `https://` URLs in a line of text.
fn urls_in(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("http") {
        let tail = &rest[i..];
        if tail.starts_with("https://") || tail.starts_with("http://") {
            let end = tail
                .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ')' | ','))
                .unwrap_or(tail.len());
            out.push(tail[..end].to_string());
            rest = &tail[end..];
        } else {
            rest = &tail[4..];
        }
    }
    out
}

fn env_of<'a>(env: &'a [(OsString, OsString)], key: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| v.to_str())
}

fn home(env: &[(OsString, OsString)]) -> Option<PathBuf> {
    env_of(env, "HOME").map(PathBuf::from)
}

/// The `key = value` lines of an ini-like file for any of `keys`, with
/// pip's continuation lines (more URLs indented below the key).
fn ini_values(path: &Path, keys: &[&str]) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut in_key = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with(['#', ';']) || trimmed.is_empty() {
            in_key = false;
            continue;
        }
        if line.starts_with([' ', '\t']) && in_key {
            out.extend(trimmed.split_whitespace().map(str::to_string));
            continue;
        }
        in_key = false;
        if let Some((k, v)) = trimmed.split_once('=') {
            let k = k.trim();
            if keys
                .iter()
                .any(|want| k == *want || k.ends_with(&format!(":{want}")))
            {
                in_key = true;
                out.extend(v.split_whitespace().map(str::to_string));
            }
        }
    }
    out
}

/// The `host:port` of every package index the host's pip, npm and R are
/// configured with, the public defaults included when a tool names none:
/// pip's `index-url` and `extra-index-url` (environment, then its
/// configuration files), npm's `registry` (also per scope), R's `repos`
/// (URLs on lines that set it in `Rprofile.site` and `~/.Rprofile`).
pub fn package_indexes(env: &[(OsString, OsString)]) -> Vec<String> {
    let mut urls: Vec<String> = Vec::new();
    let home = home(env);
    // pip
    let mut pip: Vec<String> = Vec::new();
    for key in ["PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"] {
        if let Some(v) = env_of(env, key) {
            pip.extend(v.split_whitespace().map(str::to_string));
        }
    }
    let mut pip_files: Vec<PathBuf> = vec!["/etc/pip.conf".into(), "/etc/xdg/pip/pip.conf".into()];
    if let Some(h) = &home {
        pip_files.push(h.join(".pip/pip.conf"));
        pip_files.push(h.join(".config/pip/pip.conf"));
    }
    if let Some(f) = env_of(env, "PIP_CONFIG_FILE") {
        pip_files.push(f.into());
    }
    for f in &pip_files {
        pip.extend(ini_values(f, &["index-url", "extra-index-url"]));
    }
    // pip's own default index, unless the environment or a file replaced it.
    let replaced = env_of(env, "PIP_INDEX_URL").is_some()
        || pip_files
            .iter()
            .any(|f| !ini_values(f, &["index-url"]).is_empty());
    if !replaced {
        pip.push("https://pypi.org/simple".into());
        pip.push("https://files.pythonhosted.org".into());
    }
    urls.extend(pip);
    // npm
    let mut npm: Vec<String> = Vec::new();
    for key in ["npm_config_registry", "NPM_CONFIG_REGISTRY"] {
        if let Some(v) = env_of(env, key) {
            npm.push(v.to_string());
        }
    }
    let mut npm_files: Vec<PathBuf> = vec![
        "/etc/npmrc".into(),
        "/usr/etc/npmrc".into(),
        "/usr/local/etc/npmrc".into(),
    ];
    if let Some(h) = &home {
        npm_files.push(h.join(".npmrc"));
    }
    for f in &npm_files {
        npm.extend(ini_values(f, &["registry"]));
    }
    if npm.is_empty() {
        npm.push("https://registry.npmjs.org".into());
    }
    urls.extend(npm);
    // R
    let mut r: Vec<String> = Vec::new();
    let mut r_files: Vec<PathBuf> = vec![
        "/etc/R/Rprofile.site".into(),
        "/usr/lib/R/etc/Rprofile.site".into(),
        "/usr/local/lib/R/etc/Rprofile.site".into(),
    ];
    if let Some(h) = &home {
        r_files.push(h.join(".Rprofile"));
    }
    for f in &r_files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for line in text.lines().filter(|l| l.contains("repos")) {
            r.extend(urls_in(line));
        }
    }
    if r.is_empty() {
        r.push("https://cloud.r-project.org".into());
    }
    urls.extend(r);
    let mut out: Vec<String> = Vec::new();
    for u in urls {
        if let Some(d) = url_dest(&u)
            && !out.contains(&d)
        {
            out.push(d);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_match_by_name_wildcard_and_port() {
        let r = Rule::list(&[
            "example.com".into(),
            "*.example.org".into(),
            "example.net:8443".into(),
            "127.0.0.1:9000".into(),
            "[::1]:9001".into(),
        ]);
        assert!(r.allows("example.com", 443));
        assert!(r.allows("EXAMPLE.com.", 80));
        assert!(!r.allows("www.example.com", 443));
        assert!(r.allows("a.b.example.org", 443));
        assert!(!r.allows("example.org", 443));
        assert!(!r.allows("badexample.org", 443));
        assert!(r.allows("example.net", 8443));
        assert!(!r.allows("example.net", 443));
        assert!(r.allows("127.0.0.1", 9000));
        assert!(!r.allows("127.0.0.1", 9001));
        assert!(r.allows("[::1]", 9001));
        assert!(r.names_loopback());
        assert!(r.name.contains("\"*.example.org\""));
    }

    #[test]
    fn package_indexes_come_from_pip_npm_and_r_configuration() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join(".config/pip")).unwrap();
        std::fs::write(
            d.path().join(".config/pip/pip.conf"),
            "[global]\nindex-url = https://mirror.example/simple\nextra-index-url =\n    https://extra.example:8443/simple\n    http://10.0.0.5/simple\n",
        )
        .unwrap();
        std::fs::write(
            d.path().join(".npmrc"),
            "registry=https://npm.example/\n@corp:registry=https://npm.corp.example/\n",
        )
        .unwrap();
        std::fs::write(
            d.path().join(".Rprofile"),
            "options(repos = c(CRAN = \"https://cran.example/\"))\n",
        )
        .unwrap();
        let env = vec![("HOME".into(), d.path().as_os_str().to_os_string())];
        let got = package_indexes(&env);
        for want in [
            "mirror.example:443",
            "extra.example:8443",
            "10.0.0.5:80",
            "npm.example:443",
            "npm.corp.example:443",
            "cran.example:443",
        ] {
            assert!(got.contains(&want.to_string()), "{want} not in {got:?}");
        }
        assert!(
            !got.contains(&"registry.npmjs.org:443".to_string()),
            "{got:?}"
        );
        // With nothing configured: the public defaults.
        let empty = tempfile::tempdir().unwrap();
        let env = vec![("HOME".into(), empty.path().as_os_str().to_os_string())];
        let got = package_indexes(&env);
        for want in ["registry.npmjs.org:443", "cloud.r-project.org:443"] {
            assert!(got.contains(&want.to_string()), "{want} not in {got:?}");
        }
        // The environment's index replaces pip's default.
        let env = vec![
            ("HOME".into(), empty.path().as_os_str().to_os_string()),
            (
                "PIP_INDEX_URL".into(),
                "http://127.0.0.1:4444/simple".into(),
            ),
        ];
        let got = package_indexes(&env);
        assert!(got.contains(&"127.0.0.1:4444".to_string()), "{got:?}");
    }
}
