//! The `execute_code` tool: its description (what the kernel keeps, the
//! enabled tools with their signatures, the configured limits), its
//! parameters, and the definition in OpenAI, Anthropic and MCP shapes; the
//! execution mode and timeout policy it states, each default written once.

use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::{Value, json};
use toolcell_tools::DynTool;
use toolcell_tools::names;
use toolcell_tools::schema::{Param, params, shape};
use toolcell_tools::screen::local_name;

/// `name(a: str, b: int = 1) -> {shape}`: the tool's Python signature (the
/// names a cell uses) with its result shape, as the `execute_code`
/// description lists it.
pub fn signature(tool: &dyn DynTool) -> String {
    let ps: Vec<String> = params(tool).iter().map(Param::python).collect();
    let name = match tool.namespace() {
        // A source's tool is called through its submodule: `fs.read(...)`.
        Some(ns) => format!(
            "{}.{}",
            names::python_function_name(ns),
            names::python_function_name(local_name(tool, ns))
        ),
        None => names::python_function_name(tool.name()),
    };
    format!(
        "{}({}) -> {}",
        name,
        ps.join(", "),
        shape(&tool.output_schema())
    )
}

/// The first line of a tool's doc.
pub fn summary(tool: &dyn DynTool) -> &str {
    tool.doc().lines().next().unwrap_or("").trim()
}

/// Seconds a cell may run when nothing says otherwise (`[execution] timeout`).
pub const DEFAULT_TIMEOUT_SECS: f64 = 300.0;
/// Tool calls a cell may make when nothing says otherwise.
pub const DEFAULT_MAX_TOOL_CALLS: u32 = toolcell_rpc::DEFAULT_BUDGET;
/// Stdout bytes a result carries inline when nothing says otherwise.
pub const DEFAULT_MAX_STDOUT_BYTES: usize = 50_000;
/// Stderr bytes a result carries inline when nothing says otherwise.
pub const DEFAULT_MAX_STDERR_BYTES: usize = 10_000;
/// Seconds an interrupted cell gets to stop before its kernel is killed.
pub const DEFAULT_INTERRUPT_GRACE_SECS: f64 = 2.0;

/// Execution mode of a session (docs/configuration.md, `[execution] mode`):
/// where the kernel runs. The one definition: configuration, requests,
/// the registry and the `execute_code` description all use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Mode {
    /// The project's directory and interpreter (`.venv`, `$VIRTUAL_ENV`, …).
    #[default]
    Project,
    /// `python3` on PATH in a private temporary directory.
    Strict,
}

impl Mode {
    /// Every mode, in the order the docs list them.
    pub const ALL: [Mode; 2] = [Mode::Project, Mode::Strict];

    /// The name in configuration and on the wire: `project`, `strict`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Project => "project",
            Mode::Strict => "strict",
        }
    }

    /// The mode named `text`, if any.
    pub fn from_name(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == text)
    }
}

/// What the kernel does when a cell runs out of time
/// (`[execution] on_timeout`). The one definition: configuration, the
/// registry and each kernel's cell all use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnTimeout {
    /// SIGINT first; state survives if the cell stops within the grace.
    #[default]
    Interrupt,
    /// Kill the kernel; state is lost.
    Kill,
}

impl OnTimeout {
    /// Every policy, in the order the docs list them.
    pub const ALL: [OnTimeout; 2] = [OnTimeout::Interrupt, OnTimeout::Kill];

    /// The name in configuration: `interrupt`, `kill`.
    pub const fn as_str(self) -> &'static str {
        match self {
            OnTimeout::Interrupt => "interrupt",
            OnTimeout::Kill => "kill",
        }
    }

    /// The policy named `text`, if any.
    pub fn from_name(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == text)
    }
}

/// The configured limits and mode the `execute_code` description states.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecuteCodeOptions {
    /// Seconds a cell may run.
    pub timeout_secs: f64,
    /// Tool calls a cell may make.
    pub max_tool_calls: u32,
    /// Stdout bytes returned inline.
    pub max_stdout_bytes: usize,
    /// Stderr bytes returned inline.
    pub max_stderr_bytes: usize,
    /// Where the kernel runs.
    pub mode: Mode,
    /// What a timeout does.
    pub on_timeout: OnTimeout,
    /// Seconds an interrupted cell gets to stop before the kernel is killed.
    pub interrupt_grace_secs: f64,
    /// Resource limits of each kernel (`[limits]`) as `(key, value)`:
    /// `("memory", 2147483648)`; empty when none is set.
    pub resource_limits: Vec<(String, u64)>,
    /// Writes outside the kernel's private and temp directories fail
    /// (`[execution] confine`).
    pub confined: bool,
    /// The kernel's language: `python` (or empty), `r`, `javascript`.
    pub language: String,
    /// Output over its cap is folded (runs of similar lines, long lines)
    /// before the head/tail cut (`[output] fold`, not `false`).
    pub folds: bool,
    /// What the kernel can reach (`[sandbox]`; a remote's engine).
    pub reach: Reach,
}

/// What the kernel can reach, as the description's last paragraph says.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reach {
    /// No sandbox: the user's rights on this machine.
    Unsandboxed,
    /// Its own sandbox, with this network rule.
    Sandboxed(NetworkReach),
    /// A remote kernel, isolated by its engine.
    Remote,
}

/// A sandbox's network rule, for [`Reach::Sandboxed`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NetworkReach {
    /// Nothing.
    None,
    /// The package indexes pip, npm and R are configured with.
    Packages,
    /// The host's network.
    Host,
    /// These destinations.
    List(Vec<String>),
}

impl Default for Reach {
    fn default() -> Self {
        Self::Sandboxed(NetworkReach::Packages)
    }
}

/// The paragraph on what the code can reach.
fn reach_paragraph(reach: &Reach, tools: &[Arc<dyn DynTool>]) -> String {
    let web = tools
        .iter()
        .any(|t| matches!(t.name(), "web_extract" | "web_search"));
    let refused = if web {
        "other hosts are refused (use web_extract and web_search to read the web)"
    } else {
        "other hosts are refused"
    };
    match reach {
        Reach::Unsandboxed => {
            "\n\nThe code runs with the user's rights on this machine; it is not isolated from it."
                .to_string()
        }
        Reach::Remote => {
            "\n\nThe code runs on a remote machine or container, isolated by its engine; \
             host tools act on this host."
                .to_string()
        }
        Reach::Sandboxed(net) => {
            let network = match net {
                NetworkReach::None => format!("no network access; {refused}"),
                NetworkReach::Packages => {
                    format!("only the package indexes (so package installs work); {refused}")
                }
                NetworkReach::Host => "the machine's network".to_string(),
                NetworkReach::List(list) => format!("only {}; {refused}", list.join(", ")),
            };
            format!(
                "\n\nThe code runs in a sandbox: it sees only its own processes; the machine's \
                 files are readable, but only the working directory and /tmp (private to the \
                 kernel) are writable, and credential stores (~/.ssh, ~/.aws, ...) are hidden. \
                 Network: {network}. Host tools act within the same view."
            )
        }
    }
}

impl Default for ExecuteCodeOptions {
    fn default() -> Self {
        Self {
            timeout_secs: DEFAULT_TIMEOUT_SECS,
            max_tool_calls: DEFAULT_MAX_TOOL_CALLS,
            max_stdout_bytes: DEFAULT_MAX_STDOUT_BYTES,
            max_stderr_bytes: DEFAULT_MAX_STDERR_BYTES,
            mode: Mode::Project,
            on_timeout: OnTimeout::Interrupt,
            interrupt_grace_secs: DEFAULT_INTERRUPT_GRACE_SECS,
            resource_limits: Vec::new(),
            confined: false,
            language: String::new(),
            folds: true,
            reach: Reach::default(),
        }
    }
}

/// `[limits]` as a phrase for the model: `memory 2 GiB (address space)`.
fn limit_phrase(key: &str, value: u64) -> String {
    let bytes = |v: u64| {
        const UNITS: [&str; 4] = ["bytes", "KiB", "MiB", "GiB"];
        let mut x = v as f64;
        let mut unit = 0;
        while x >= 1024.0 && unit < UNITS.len() - 1 {
            x /= 1024.0;
            unit += 1;
        }
        if x.fract() == 0.0 {
            format!("{x:.0} {}", UNITS[unit])
        } else {
            format!("{x:.1} {}", UNITS[unit])
        }
    };
    match key {
        "memory" => format!("{} of memory (address space) per process", bytes(value)),
        "cpu_seconds" => format!("{value} CPU seconds per call"),
        "open_files" => format!("{value} open files"),
        "processes" => format!("{value} processes"),
        "file_size" => format!("files up to {}", bytes(value)),
        other => format!("{other} {value}"),
    }
}

/// The tool definition shapes `toolcell schema` can print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SchemaFormat {
    /// `{"type":"function","function":{name, description, parameters}}`.
    OpenAi,
    /// `{name, description, input_schema}`.
    Anthropic,
    /// `{name, description, inputSchema}`.
    Mcp,
}

impl std::str::FromStr for SchemaFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "openai" => Ok(Self::OpenAi),
            "anthropic" => Ok(Self::Anthropic),
            "mcp" => Ok(Self::Mcp),
            other => Err(format!(
                "unknown schema format `{other}`; use openai, anthropic or mcp"
            )),
        }
    }
}

fn seconds(s: f64) -> String {
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s}")
    }
}

/// How output over its cap is shortened, for the description.
fn shortened(folds: bool) -> &'static str {
    if folds {
        "shortened (runs of similar lines and over-long lines folded, then head and tail kept if \
         still over)"
    } else {
        "cut (head and tail kept)"
    }
}

/// The `execute_code` description: what it does, the enabled tools with
/// their signatures and result shapes, the configured limits, the cwd rule
/// of the mode, that state persists, and what a timeout does to it.
///
/// Tools that cannot share the stub module with earlier ones (a name that
/// clashes in any language, see [`screen`](toolcell_tools::screen::screen))
/// are not listed, as the kernel leaves them out.
pub fn execute_code_description(tools: &[Arc<dyn DynTool>], opts: &ExecuteCodeOptions) -> String {
    let screened = toolcell_tools::screen::screen(tools, &[]);
    let tools = screened.tools.as_slice();
    if matches!(opts.language.as_str(), "r" | "javascript") {
        return other_language_description(tools, opts);
    }
    let mut d = String::new();
    d.push_str(
        "Run Python code in a persistent Python kernel. Variables, imports and loaded data \
         persist from one call to the next in the same conversation; pass reset=true to start \
         over in a fresh kernel. The value of a trailing expression is printed, top-level \
         `await` works, lines starting with `!` run shell commands, and `%pip install …` \
         installs packages into the kernel's interpreter.\n\n",
    );
    match opts.mode {
        Mode::Project => d.push_str(
            "The working directory is the project directory, and the interpreter is the \
             project's (its virtualenv when there is one).\n\n",
        ),
        Mode::Strict => d.push_str(
            "The working directory is a private temporary directory (not the project), and \
             the interpreter is python3 from PATH.\n\n",
        ),
    }
    if tools.is_empty() {
        d.push_str("No host tools are enabled.\n\n");
    } else {
        let all_dicts = tools
            .iter()
            .all(|t| t.output_schema().get("type").and_then(Value::as_str) == Some("object"));
        d.push_str(if all_dicts {
            "These host tools are Python functions in the kernel (already defined, or `from \
             toolcell_tools import …`); each returns a dict:\n"
        } else {
            "These host tools are Python functions in the kernel (already defined, or `from \
             toolcell_tools import …`; `NAME.tool` is the function `tool` of the module NAME, \
             also defined); each returns its JSON result (the shape after `->`):\n"
        });
        for t in tools {
            let _ = writeln!(d, "- {}: {}", signature(t.as_ref()), summary(t.as_ref()));
        }
        d.push_str(
            "A refused or failed tool call raises toolcell_tools.ToolError. Helpers: \
             json_parse(text), shell_quote(s), retry(fn, attempts=3).\n\n",
        );
    }
    let page = if tools.iter().any(|t| t.name() == "read_file") {
        "page it with read_file"
    } else {
        "read it from Python"
    };
    let _ = write!(
        d,
        "Limits per call: {} seconds; at most {} tool calls; stdout beyond {} bytes and stderr \
         beyond {} bytes is {} and the full output is saved to a file whose \
         path is returned; {page} instead of re-running. ",
        seconds(opts.timeout_secs),
        opts.max_tool_calls,
        opts.max_stdout_bytes,
        opts.max_stderr_bytes,
        shortened(opts.folds),
    );
    match opts.on_timeout {
        OnTimeout::Interrupt => {
            let _ = write!(
                d,
                "On timeout the code is interrupted (KeyboardInterrupt); if it stops within {} \
                 seconds the kernel and its state are kept, otherwise the kernel is killed and \
                 all state is lost.",
                seconds(opts.interrupt_grace_secs)
            );
        }
        OnTimeout::Kill => d.push_str("On timeout the kernel is killed and all state is lost."),
    }
    if !opts.resource_limits.is_empty() {
        let phrases: Vec<String> = opts
            .resource_limits
            .iter()
            .map(|(k, v)| limit_phrase(k, *v))
            .collect();
        let _ = write!(
            d,
            " Resource limits: {}; exceeding one fails the call (a CPU-time overrun ends the \
             kernel and its state).",
            phrases.join(", ")
        );
    }
    if opts.confined {
        d.push_str(
            "\n\nThe code may write files only in its working directory and the temp \
             directory; writes elsewhere fail with PermissionError (reading is not restricted).",
        );
    }
    d.push_str(&reach_paragraph(&opts.reach, tools));
    d
}

/// The `execute_code` description for an R or JavaScript kernel: the
/// tools with that language's signatures, the same limits.
fn other_language_description(tools: &[Arc<dyn DynTool>], opts: &ExecuteCodeOptions) -> String {
    let r = opts.language == "r";
    let mut d = String::new();
    if r {
        d.push_str(
            "Run R code in a persistent R session (Rscript). Objects, loaded packages and data \
             persist from one call to the next in the same conversation; pass reset=true to \
             start over in a fresh session. Visible values are printed as at the R console \
             (a data frame or a ggplot as the last line shows); message() and warnings go to \
             stderr; every plot the code draws comes back as a PNG figure. A missing package \
             is installed with install.packages(\"name\").\n\n",
        );
    } else {
        d.push_str(
            "Run JavaScript code in a persistent Node.js context. Variables (let, const, var, \
             functions, classes) persist from one call to the next in the same conversation; \
             pass reset=true to start over in a fresh context. The value of the last \
             expression is printed (unless undefined), top-level `await` works, console.log \
             goes to stdout and console.error to stderr, require() loads Node's built-in \
             modules and packages installed with npm in the working directory.\n\n",
        );
    }
    match opts.mode {
        Mode::Project => d.push_str("The working directory is the project directory.\n\n"),
        Mode::Strict => d.push_str(
            "The working directory is a private temporary directory (not the project).\n\n",
        ),
    }
    if tools.is_empty() {
        d.push_str("No host tools are enabled.\n\n");
    } else if r {
        d.push_str(
            "These host tools are R functions already defined in the session; each returns a \
             list:\n",
        );
        for t in tools {
            let _ = writeln!(d, "- {}: {}", r_signature(t.as_ref()), summary(t.as_ref()));
        }
        d.push_str(
            "A refused or failed call stops with a ToolError condition \
             (tryCatch(..., ToolError = function(e) ...)).\n\n",
        );
    } else {
        d.push_str(
            "These host tools are async functions already defined in the context, taking one \
             object of named arguments; each resolves to an object:\n",
        );
        for t in tools {
            let _ = writeln!(
                d,
                "- await {}: {}",
                js_signature(t.as_ref()),
                summary(t.as_ref())
            );
        }
        d.push_str(
            "A refused or failed call rejects with a ToolError (e.code says why); calls may \
             run in parallel with Promise.all.\n\n",
        );
    }
    let _ = write!(
        d,
        "Limits per call: {} seconds; at most {} tool calls; stdout beyond {} bytes and stderr \
         beyond {} bytes is {} and the full output is saved to a file whose \
         path is returned. ",
        seconds(opts.timeout_secs),
        opts.max_tool_calls,
        opts.max_stdout_bytes,
        opts.max_stderr_bytes,
        shortened(opts.folds),
    );
    match opts.on_timeout {
        OnTimeout::Interrupt => {
            let _ = write!(
                d,
                "On timeout the code is interrupted (SIGINT); if it stops within {} seconds the \
                 session and its state are kept, otherwise it is killed and all state is lost.",
                seconds(opts.interrupt_grace_secs)
            );
        }
        OnTimeout::Kill => d.push_str("On timeout the kernel is killed and all state is lost."),
    }
    d.push_str(&reach_paragraph(&opts.reach, tools));
    d
}

/// A tool's R signature: `read_file(path, offset = 1, limit = 2000)`.
pub fn r_signature(tool: &dyn DynTool) -> String {
    let name = match tool.namespace() {
        // A source's tool is a member of its environment: `fs$read(...)`.
        Some(ns) => format!(
            "{}${}",
            names::r_function_name(ns),
            names::r_identifier(local_name(tool, ns))
        ),
        None => names::r_function_name(tool.name()),
    };
    let params: Vec<String> = params(tool)
        .iter()
        .map(|p| {
            let n = names::r_identifier(&p.key);
            match &p.default {
                Some(Value::String(s)) => format!("{n} = {}", crate::r::r_string(s)),
                Some(Value::Bool(b)) => format!("{n} = {}", if *b { "TRUE" } else { "FALSE" }),
                Some(Value::Number(x)) => format!("{n} = {x}"),
                Some(_) => format!("{n} = NULL"),
                None if p.omit_if_none || p.hint.starts_with("Optional[") => format!("{n} = NULL"),
                None => n,
            }
        })
        .collect();
    format!("{name}({})", params.join(", "))
}

/// A tool's JavaScript signature: `read_file({path, offset = 1, limit = 2000})`.
pub fn js_signature(tool: &dyn DynTool) -> String {
    let name = match tool.namespace() {
        // A source's tool is a method of its object: `fs_.read({...})`.
        Some(ns) => format!(
            "{}.{}",
            names::js_identifier(ns),
            names::js_member_name(local_name(tool, ns))
        ),
        None => names::js_identifier(tool.name()),
    };
    let params: Vec<String> = params(tool)
        .iter()
        .map(|p| match &p.default {
            Some(v) => format!("{} = {v}", p.key),
            None if p.omit_if_none || p.hint.starts_with("Optional[") => format!("{}?", p.key),
            None => p.key.clone(),
        })
        .collect();
    format!("{name}({{{}}})", params.join(", "))
}

/// The `execute_code` parameters schema (`code` required, `reset`).
pub fn execute_code_parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "code": {
                "type": "string",
                "description": "Python source to run as one cell."
            },
            "reset": {
                "type": "boolean",
                "default": false,
                "description": "Discard the kernel and its state first, and run in a fresh one."
            }
        },
        "required": ["code"],
        "additionalProperties": false
    })
}

/// The `execute_code` tool definition in the given shape.
pub fn execute_code_tool(
    tools: &[Arc<dyn DynTool>],
    opts: &ExecuteCodeOptions,
    format: SchemaFormat,
) -> Value {
    let description = execute_code_description(tools, opts);
    let params = execute_code_parameters();
    match format {
        SchemaFormat::OpenAi => json!({
            "type": "function",
            "function": {
                "name": "execute_code",
                "description": description,
                "parameters": params
            }
        }),
        SchemaFormat::Anthropic => json!({
            "name": "execute_code",
            "description": description,
            "input_schema": params
        }),
        SchemaFormat::Mcp => json!({
            "name": "execute_code",
            "description": description,
            "inputSchema": params
        }),
    }
}

/// One tool's own definition: name, doc, argument and result schemas (for
/// `toolcell tools --json` and MCP's `--expose-tools`).
pub fn tool_definition(tool: &dyn DynTool) -> Value {
    json!({
        "name": tool.name(),
        "description": tool.doc(),
        "signature": signature(tool),
        "inputSchema": tool.args_schema(),
        "outputSchema": tool.output_schema(),
        "blockedParams": tool.blocked_params(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_says_what_the_kernel_can_reach() {
        for mode in [Mode::Project, Mode::Strict] {
            let opts = ExecuteCodeOptions {
                mode,
                ..ExecuteCodeOptions::default()
            };
            let d = execute_code_description(&[], &opts);
            assert!(d.contains("runs in a sandbox"), "{d}");
            assert!(d.contains("Network: only the package indexes"), "{d}");
            // Without the web tools, the description does not send the
            // model to them, nor to read_file.
            assert!(
                !d.contains("web_extract") && !d.contains("read_file"),
                "{d}"
            );
        }
        let text = |reach: Reach| {
            execute_code_description(
                &[],
                &ExecuteCodeOptions {
                    reach,
                    ..ExecuteCodeOptions::default()
                },
            )
        };
        let d = text(Reach::Unsandboxed);
        assert!(d.ends_with("it is not isolated from it."), "{d}");
        assert!(!d.contains("sandbox"), "{d}");
        let d = text(Reach::Sandboxed(NetworkReach::List(vec![
            "example.com".into(),
            "127.0.0.1:9000".into(),
        ])));
        assert!(
            d.contains("Network: only example.com, 127.0.0.1:9000;"),
            "{d}"
        );
        let d = text(Reach::Sandboxed(NetworkReach::None));
        assert!(d.contains("Network: no network access"), "{d}");
        let d = text(Reach::Remote);
        assert!(d.contains("remote machine or container"), "{d}");
    }

    #[test]
    fn the_description_states_resource_limits_and_confinement_only_when_set() {
        let plain = execute_code_description(&[], &ExecuteCodeOptions::default());
        assert!(!plain.contains("Resource limits"), "{plain}");
        assert!(!plain.contains("PermissionError"), "{plain}");
        let opts = ExecuteCodeOptions {
            resource_limits: vec![
                ("memory".into(), 2 << 30),
                ("cpu_seconds".into(), 30),
                ("file_size".into(), 1536 << 20),
            ],
            confined: true,
            ..ExecuteCodeOptions::default()
        };
        let d = execute_code_description(&[], &opts);
        for needle in [
            "2 GiB of memory",
            "30 CPU seconds per call",
            "files up to 1.5 GiB",
            "fail with PermissionError",
        ] {
            assert!(d.contains(needle), "{needle} missing: {d}");
        }
    }

    #[test]
    fn the_description_states_configured_limits() {
        let opts = ExecuteCodeOptions {
            timeout_secs: 17.0,
            max_tool_calls: 9,
            max_stdout_bytes: 1234,
            max_stderr_bytes: 567,
            ..ExecuteCodeOptions::default()
        };
        let d = execute_code_description(&[], &opts);
        for needle in [
            "17 seconds",
            "at most 9 tool calls",
            "1234 bytes",
            "567 bytes",
        ] {
            assert!(d.contains(needle), "missing {needle:?} in {d}");
        }
    }
}
