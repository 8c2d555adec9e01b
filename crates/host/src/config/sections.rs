//! The sections of `toolcell.toml`: the one place each key is declared —
//! its type, default, what it accepts ([`super::rules`]) and its doc, which
//! is also the line `docs/configuration.md` gives it. The first line of a
//! key's doc is its summary there; write it for users.

use super::rules::{
    AutoFlag, Choice, Count, Days, Flag, Limit, List, NetworkRule, Seconds, Size, Text, WarmPool,
};
use super::section::section;
use super::{
    KernelMode, MAX_RETENTION_DAYS, Mode, OnTimeout, SearchProvider, Switch, Transport,
    default_tools,
};

section! {
    /// How each cell runs: its time limit, tool-call budget, interpreter and
    /// what happens on a timeout.
    pub struct Execution {
        /// Seconds a cell may run before it is interrupted (or killed, see `on_timeout`).
        timeout: f64 = toolcell_stubs::DEFAULT_TIMEOUT_SECS, Seconds { zero: false };
        /// Tool calls one cell may make; the next one fails with an error the cell can catch.
        max_tool_calls: u32 = toolcell_stubs::DEFAULT_MAX_TOOL_CALLS, Count::U32;
        /// `"project"` runs cells in the working directory with the project's Python (its `.venv` if there is one); `"strict"` runs each kernel in a private temporary directory with `python3` from `PATH`.
        mode: Mode = Mode::Project, Choice;
        /// The interpreter to run, as a path or a name looked up on `PATH`; empty picks one by `mode`. A relative path is taken from the config file's directory.
        python: String = String::new(), Text::Program;
        /// The language of a cell that names none: `"python"`, `"r"` (R through `Rscript`) or `"javascript"` (`node`). Each language's kernels are separate sessions.
        language: toolcell_kernel::language::Language = toolcell_kernel::language::Language::Python, Choice;
        /// The R interpreter (`Rscript`), as a path or a name looked up on `PATH`; empty: `Rscript` on `PATH`.
        r: String = String::new(), Text::Program;
        /// The JavaScript interpreter (node 18 or later), as a path or a name looked up on `PATH`; empty: `node` on `PATH`.
        node: String = String::new(), Text::Program;
        /// What a timeout does: `"interrupt"` raises `KeyboardInterrupt` in the cell and keeps the kernel; `"kill"` ends the kernel.
        on_timeout: OnTimeout = OnTimeout::Interrupt, Choice;
        /// Seconds to wait for a result after interrupting a cell (timed out, or interrupted by the caller) before killing its kernel; the interrupt is sent again once, halfway through.
        interrupt_grace: f64 = toolcell_stubs::DEFAULT_INTERRUPT_GRACE_SECS, Seconds { zero: true };
        /// Seconds between asking a kernel to stop (SIGTERM) and killing it (SIGKILL).
        kill_grace: f64 = 2.0, Seconds { zero: true };
        /// `"session"` keeps one kernel per session so variables persist between cells; `"per-call"` runs each cell in a fresh kernel.
        kernel_mode: KernelMode = KernelMode::Session, Choice;
        /// Confine kernels with Linux Landlock so they can write only to their own directories and the temp dir; needs `mode = "strict"`.
        confine: bool = false, Flag;
    }
}

section! {
    /// How many kernels live at once and for how long.
    pub struct Kernels {
        /// Live kernels at most; a new session beyond it evicts the least recently used idle kernel.
        max_kernels: usize = 4, Count::ANY;
        /// Seconds an idle kernel lives before it is stopped.
        idle_timeout: f64 = 1800.0, Seconds { zero: false };
        /// Started kernels kept ready for new sessions; `"auto"`: one for `serve`, `mcp` and the session daemon, none for a one-shot `exec`.
        warm_pool: Option<usize> = None, WarmPool;
        /// Where kernels run when a request names no remote: `""` here, or the name of a `[remotes.NAME]` table (a machine or container reached by its `command`).
        remote: String = String::new(), Text::RemoteName;
        /// Bytes of the files (figures) a remote kernel's cells send back that this host keeps at once, per kernel, in the kernel's directory; past it a file is refused and the result's `warning` says so. A file no result lists is deleted when its cell ends; listed ones go with the kernel. 0: no cap.
        remote_files_cap: u64 = crate::registry::DEFAULT_REMOTE_FILES_CAP, Size::CAP;
    }
}

section! {
    /// Operating-system resource limits applied to every kernel process.
    /// 0 means no limit; every key defaults to 0.
    pub struct Limits {
        /// Address space of each kernel process (`RLIMIT_AS`), in bytes or a size such as `"512MiB"` or `"2GiB"`.
        memory: u64 = 0, Size::LIMIT;
        /// CPU seconds one cell may use (`RLIMIT_CPU`, re-armed before each cell). Linux counts it on its tick-sampled CPU clock, so on a busy machine a cell may be stopped a little before or after exactly this much.
        cpu_seconds: u64 = 0, Limit { what: "a whole number of CPU seconds per cell" };
        /// Open file descriptors per process (`RLIMIT_NOFILE`).
        open_files: u64 = 0, Limit { what: "a whole number of open files" };
        /// Processes and threads of the whole user (`RLIMIT_NPROC`).
        processes: u64 = 0, Limit { what: "a whole number of processes" };
        /// Largest file a kernel may write (`RLIMIT_FSIZE`), in bytes or a size string.
        file_size: u64 = 0, Size::LIMIT;
    }
}

section! {
    /// How much of a cell's output comes back inline, and where the rest goes.
    pub struct Output {
        /// Bytes of cleaned stdout returned inline; the rest is written to a spill file.
        max_stdout_bytes: usize = toolcell_stubs::DEFAULT_MAX_STDOUT_BYTES, Count::ANY;
        /// Bytes of cleaned stderr returned inline; the rest is written to a spill file.
        max_stderr_bytes: usize = toolcell_stubs::DEFAULT_MAX_STDERR_BYTES, Count::ANY;
        /// Directory for spill files; empty: `$XDG_CACHE_HOME/toolcell/spill` (else `~/.cache/toolcell/spill`). A relative path is taken from the config file's directory.
        spill_dir: String = String::new(), Text::Path;
        /// Bytes written to one spill file at most.
        spill_cap_bytes: u64 = 5_000_000, Count::ANY;
        /// Spill files older than this many days are removed (when a host starts and hourly); 0 keeps them regardless of age. Fractions are allowed.
        spill_retention_days: f64 = 7.0, Days { max: MAX_RETENTION_DAYS };
        /// While the spill files total more than this, the oldest are removed; 0 means no cap.
        spill_total_cap: u64 = 1 << 30, Size::CAP;
        /// Report in each result the files the cell created, modified and deleted under the kernel's working directory (`files`); `false` turns the scans off.
        watch_files: bool = true, Flag;
        /// Entries (files and directories) one scan of the working directory covers at most; beyond it the scan stops and the result says so (`files.scan_stopped`).
        watch_max_entries: usize = 20_000, Count { max: 10_000_000 };
        /// Fold repetition out of a stream before the head/tail cut: runs of `fold_min_run` or more same-shape lines (equal once numbers, hex ids, timestamps and UUIDs are masked) keep their first and last `fold_keep` lines and one line saying how many were omitted, and lines longer than `max_line_chars` keep their head and tail. `"auto"`: only a stream over its cap is folded (one that fits comes back byte for byte), and it is cut to head and tail only if it is still over; `true`: every stream is folded; `false`: never (over the cap, head and tail only). Whenever anything is left out, `warning` says so and names the spill file with the whole text (up to `spill_cap_bytes`).
        fold: Switch = Switch::Auto, AutoFlag;
        /// With `fold`: the shortest run of same-shape lines that is folded (at least 2, and more than twice `fold_keep`).
        fold_min_run: usize = 8, Count { max: 1_000_000 };
        /// With `fold`: lines shown at each end of a folded run (fewer than half of `fold_min_run`).
        fold_keep: usize = 3, Count { max: 1_000 };
        /// With `fold`: a line longer than this many characters keeps its head and tail with a note of how many characters were cut; 0: no limit (a line longer than the stream's cap is still cut at the cap, so memory stays bounded).
        max_line_chars: u64 = 2_000, Limit { what: "a whole number of characters" };
    }
}

section! {
    /// The environment kernels get.
    pub struct Env {
        /// Host variables passed to kernels even where the default rules would drop them (secrets, say); a trailing `*` matches a prefix (`AWS_*`).
        passthrough: Vec<String> = Vec::new(), List::EnvNames;
    }
}

section! {
    /// Which tools cells may call.
    pub struct Tools {
        /// Names of the tools cells may call; each must be a tool toolcell knows. The default is every built-in tool (a request may narrow the set, never widen it).
        enabled: Vec<String> = default_tools(), List::ToolNames;
    }
}

section! {
    /// The socket a kernel uses to call tools.
    pub struct Rpc {
        /// `"unix"`: a Unix socket in the kernel's private directory; `"tcp"`: 127.0.0.1 on an ephemeral port.
        transport: Transport = Transport::Unix, Choice;
    }
}

section! {
    /// Settings of the `web_search` tool.
    pub struct Web {
        /// The search API `web_search` uses; `""`: none (the tool explains how to configure one).
        search_provider: SearchProvider = SearchProvider::None, Choice;
        /// Base URL of the search provider; required for `"searxng"`.
        search_url: String = String::new(), Text::Url;
        /// Name of the host environment variable holding the provider's API key (the key never reaches a kernel).
        search_api_key_env: String = String::new(), Text::EnvName;
    }
}

section! {
    /// Cells refused before they run.
    pub struct Guard {
        /// Regexes (Rust `regex` syntax); a cell whose code matches one is refused with an error.
        deny: Vec<String> = Vec::new(), List::Regexes;
    }
}

section! {
    /// The background daemon that keeps `exec --session` kernels alive between commands.
    pub struct Daemon {
        /// Seconds without sessions after which the daemon exits.
        idle_exit: f64 = 900.0, Seconds { zero: false };
    }
}

section! {
    /// The journal: a SQLite record of every cell run (code, output, tool calls).
    pub struct JournalConfig {
        /// Record cells; `"auto"`: on for `serve`, `mcp` and the session daemon, off for a one-shot `exec`.
        enabled: Switch = Switch::Auto, AutoFlag;
        /// The database file; empty: `$XDG_DATA_HOME/toolcell/journal.db` (else `~/.local/share/toolcell/journal.db`). A relative path is taken from the config file's directory.
        path: String = String::new(), Text::Path;
    }
}

section! {
    /// The sandbox every local kernel runs in (docs/sandbox.md): namespaces of its own, a read-only view of the machine with the credential stores hidden, and a network rule.
    pub struct Sandbox {
        /// `"auto"` sandboxes each local kernel where the machine allows it (root, or unprivileged user namespaces) and otherwise runs it unsandboxed, saying why in every result; `"required"` makes a kernel that cannot be sandboxed an error before any code runs; `"off"` runs kernels without a sandbox.
        mode: toolcell_kernel::sandbox::Mode = toolcell_kernel::sandbox::Mode::Auto, Choice;
        /// What a sandboxed kernel can reach over the network: `"packages"` (only the package indexes pip, npm and R are configured with, through a proxy), `"none"` (only its own loopback), `"host"` (the host's network, no isolation) or a list of destinations such as `["example.com", "*.example.org", "example.net:8443", "127.0.0.1:9000"]` (a name without a port allows every port).
        network: toolcell_kernel::sandbox::Network = toolcell_kernel::sandbox::Network::Packages, NetworkRule;
        /// Paths a sandboxed kernel may write besides its working directory, its own directory and its private `/tmp`. Each must exist; `~/` is the home directory; a relative path is taken from the config file's directory.
        writable: Vec<String> = Vec::new(), List::Paths;
        /// Paths a sandboxed kernel sees empty, besides the credential stores (`~/.ssh`, `~/.aws`, …), toolcell's own directories and `/run` (the machine's service sockets). Each must exist.
        hidden: Vec<String> = Vec::new(), List::Paths;
        /// Size of a sandboxed kernel's private `/tmp`, in bytes or a size string such as `"512MiB"`.
        tmp_bytes: u64 = toolcell_kernel::sandbox::DEFAULT_TMP_BYTES, Size::TMP;
    }
}
