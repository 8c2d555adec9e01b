//! The sandbox a local kernel runs in (docs/sandbox.md): the policy a
//! host configures, the layout and environment it becomes for one kernel,
//! the network rule and the proxy that enforces it, and what the result
//! reports. The mechanism itself is [`toolcell_sys::sandbox`].

mod proxy;
mod rule;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use proxy::Proxy;
pub use rule::{Dest, Rule, package_indexes};

/// `[sandbox] mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Sandbox where the machine allows it; otherwise run unsandboxed and
    /// say why in every result.
    #[default]
    Auto,
    /// A kernel that cannot be sandboxed is an error.
    Required,
    /// No sandbox.
    Off,
}

/// `[sandbox] network`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Network {
    /// Loopback inside the sandbox only.
    None,
    /// The package indexes pip, npm and R are configured with.
    #[default]
    Packages,
    /// The host's network.
    Host,
    /// These destinations only.
    List(Vec<String>),
}

impl Network {
    /// The name the result and the journal give it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Packages => "packages",
            Self::Host => "host",
            Self::List(_) => "list",
        }
    }
}

/// What the host configured (`[sandbox]`), with the hidden paths already
/// expanded (credential stores, toolcell's own directories).
#[derive(Debug, Clone)]
pub struct Policy {
    /// `mode`.
    pub mode: Mode,
    /// `network`.
    pub network: Network,
    /// Writable besides the working directory and the kernel's own.
    pub writable: Vec<PathBuf>,
    /// Shown empty.
    pub hidden: Vec<PathBuf>,
    /// Readable by the file tools even under a hidden path (the session's
    /// spill files and figures).
    pub readable: Vec<PathBuf>,
    /// The private `/tmp`'s size.
    pub tmp_bytes: u64,
}

/// The default size of the private `/tmp`: 512 MiB.
pub const DEFAULT_TMP_BYTES: u64 = 512 * 1024 * 1024;

impl Default for Policy {
    fn default() -> Self {
        Self::off()
    }
}

impl Policy {
    /// No sandbox (what an embedder gets unless it asks).
    pub fn off() -> Self {
        Self {
            mode: Mode::Off,
            network: Network::Packages,
            writable: Vec::new(),
            hidden: Vec::new(),
            readable: Vec::new(),
            tmp_bytes: DEFAULT_TMP_BYTES,
        }
    }

    /// The default policy: `mode = "auto"`, `network = "packages"`, the
    /// user's credential stores hidden.
    pub fn auto() -> Self {
        Self {
            mode: Mode::Auto,
            hidden: credential_stores(),
            ..Self::off()
        }
    }
}

/// The user's credential stores, hidden by default: the ssh, GnuPG, cloud,
/// Kubernetes, Docker, netrc, PyPI, git and GitHub CLI ones, plus the
/// sockets of agents and daemons that would act for the user.
pub fn credential_stores() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
        for rel in [
            ".ssh",
            ".gnupg",
            ".aws",
            ".azure",
            ".config/gcloud",
            ".kube",
            ".docker",
            ".netrc",
            ".pypirc",
            ".git-credentials",
            ".config/gh",
            ".npmrc",
            ".config/git/credentials",
            ".password-store",
            ".local/share/keyrings",
            ".config/hub",
            ".terraform.d",
        ] {
            out.push(home.join(rel));
        }
    }
    // The user's runtime directory holds agent sockets (ssh, gpg), the
    // session bus and often the Docker socket: a connect() needs no write
    // access to the mount.
    if let Some(run) = std::env::var_os("XDG_RUNTIME_DIR") {
        out.push(PathBuf::from(run));
    }
    if let Some(sock) = std::env::var_os("SSH_AUTH_SOCK") {
        out.push(PathBuf::from(sock));
    }
    for p in [
        "/run/docker.sock",
        "/var/run/docker.sock",
        "/run/containerd/containerd.sock",
        "/run/podman/podman.sock",
        "/run/dbus/system_bus_socket",
    ] {
        out.push(PathBuf::from(p));
    }
    out
}

/// What a kernel ran in, as every result says (`kernel.sandbox`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum SandboxInfo {
    /// Its own namespaces.
    Namespaces {
        /// `none`, `packages`, `host` or `list`.
        network: String,
    },
    /// No sandbox, and why.
    Off {
        /// `sandbox.mode = "off"`, or what the check at start found.
        reason: String,
    },
    /// A remote kernel: its engine isolates it.
    Remote,
}

impl Default for SandboxInfo {
    fn default() -> Self {
        Self::Off {
            reason: "sandbox.mode = \"off\"".into(),
        }
    }
}

impl SandboxInfo {
    /// True for a sandboxed kernel.
    pub fn is_sandboxed(&self) -> bool {
        matches!(self, Self::Namespaces { .. })
    }

    /// A short word for status lines and history: `namespaces`, `off`,
    /// `remote`.
    pub fn word(&self) -> &'static str {
        match self {
            Self::Namespaces { .. } => "namespaces",
            Self::Off { .. } => "off",
            Self::Remote => "remote",
        }
    }
}

/// The port the proxy listens on inside a sandbox (each sandbox has its
/// own loopback, so every one can use the same).
pub const PROXY_PORT: u16 = 3128;

/// What one kernel's sandbox is made of: the layout for
/// [`toolcell_sys::sandbox`], the variables the kernel gets, the rule its
/// proxy enforces.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) layout: toolcell_sys::sandbox::Layout,
    pub(crate) env: Vec<(OsString, OsString)>,
    pub(crate) rule: Option<Rule>,
    /// The tool server's TCP port, also listened on inside.
    pub(crate) rpc_port: Option<u16>,
}

/// Where the machine's services listen (Docker, D-Bus, systemd, the
/// user session's agents): hidden in every sandbox. A Unix socket is
/// reached by its path and a read-only mount does not stop `connect`, so
/// a socket in sight is a socket in reach; `/run` holds nearly all of
/// them, and the rest are in directories hidden with the credential
/// stores.
const SERVICE_SOCKETS: [&str; 4] = [
    "/run",
    "/var/run",
    "/var/snap/lxd/common/lxd",
    "/var/lib/lxd",
];

/// `/etc/resolv.conf`'s target when it lies under a hidden path (systemd
/// keeps it in `/run`): shown again, read-only, so names still resolve
/// where the network rule lets the kernel resolve them.
fn resolv_conf_under(hidden: &[PathBuf]) -> Vec<PathBuf> {
    match std::fs::canonicalize("/etc/resolv.conf") {
        Ok(target) if hidden.iter().any(|h| target.starts_with(h)) => vec![target],
        _ => Vec::new(),
    }
}

/// Package-index settings passed from the host's environment to a kernel
/// under `network = "packages"`.
const INDEX_VARS: [&str; 6] = [
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_TRUSTED_HOST",
    "PIP_CONFIG_FILE",
    "npm_config_registry",
    "NPM_CONFIG_REGISTRY",
];

/// The plan for a kernel in `cwd` with its directory `dir`.
pub(crate) fn plan(
    policy: &Policy,
    cwd: &Path,
    dir: &Path,
    rpc_port: Option<u16>,
    host_env: &[(OsString, OsString)],
) -> Plan {
    let mut writable = vec![cwd.to_path_buf(), dir.to_path_buf()];
    writable.extend(policy.writable.iter().cloned());
    let mut hidden = policy.hidden.clone();
    hidden.extend(SERVICE_SOCKETS.iter().map(PathBuf::from));
    // `host_env` is the scrubbed one, which drops the index settings: take
    // them from the host process itself.
    let mut host_env = host_env.to_vec();
    for name in INDEX_VARS {
        if let Some(v) = std::env::var_os(name).filter(|_| !host_env.iter().any(|(k, _)| k == name))
        {
            host_env.push((name.into(), v));
        }
    }
    let rule = match &policy.network {
        Network::None | Network::Host => None,
        Network::Packages => Some(Rule::packages(&host_env)),
        Network::List(list) => Some(Rule::list(list)),
    };
    let proxy_port = if rpc_port == Some(PROXY_PORT) {
        PROXY_PORT + 1
    } else {
        PROXY_PORT
    };
    let mut listen = Vec::new();
    if rule.is_some() {
        listen.push(proxy_port);
    }
    if let Some(p) = rpc_port {
        listen.push(p);
    }
    let net = match policy.network {
        Network::Host => toolcell_sys::sandbox::Net::Host,
        _ => toolcell_sys::sandbox::Net::Isolated { listen },
    };
    let mut env: Vec<(OsString, OsString)> = ["TMPDIR", "TMP", "TEMP"]
        .into_iter()
        .map(|k| (k.into(), "/tmp".into()))
        .collect();
    if let Some(rule) = &rule {
        let url = format!("http://127.0.0.1:{proxy_port}");
        for k in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ] {
            env.push((k.into(), url.clone().into()));
        }
        // The sandbox's own loopback stays direct, unless the rule names
        // the host's loopback (then it goes through the proxy to it).
        let no_proxy = if rule.names_loopback() {
            String::new()
        } else {
            "localhost,127.0.0.1,::1".to_string()
        };
        for k in ["NO_PROXY", "no_proxy"] {
            env.push((k.into(), no_proxy.clone().into()));
        }
    }
    if matches!(policy.network, Network::Packages) {
        // The indexes the rule lets through are the ones the host's pip
        // and npm use: the kernel's pip and npm get the same settings
        // (the scrubbed environment would otherwise drop them, and they
        // would ask an index the rule refuses).
        for (k, v) in &host_env {
            if INDEX_VARS.iter().any(|n| k == n) {
                env.push((k.clone(), v.clone()));
            }
        }
    }
    Plan {
        layout: toolcell_sys::sandbox::Layout {
            writable,
            readable: resolv_conf_under(&hidden),
            hidden,
            tmp_bytes: policy.tmp_bytes,
            cwd: cwd.to_path_buf(),
            net,
        },
        env,
        rule,
        rpc_port,
    }
}
