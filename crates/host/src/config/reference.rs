//! `docs/configuration.md`, rendered from the section declarations.

use toml::Value;

use super::{FILE_NAME, key_infos, section_infos};

const INTRO: &str = "\
# Configuration reference

<!-- Generated from crates/host/src/config/sections.rs; do not edit by hand.
     Regenerate: UPDATE_DOCS=1 cargo test -p toolcell-host --test it config_docs:: -->

toolcell reads one TOML file: the one given with `--config FILE`, else
`./toolcell.toml` in the working directory, else
`$XDG_CONFIG_HOME/toolcell/toolcell.toml` (`~/.config/toolcell/toolcell.toml`
when `XDG_CONFIG_HOME` is not set). Without any of them, every key has its
default.

Every key is optional. The file is read strictly: an unknown section or key,
a value of the wrong type or one out of range stops toolcell with an error
that names the key, what it accepts and what it got. Nothing falls back to a
default silently.

Command-line flags override the file (`--timeout 30`, `--max-kernels 2`, …).
`toolcell config` prints the effective configuration as TOML, each key
followed by where its value came from (`# default`, `# from <file>` or
`# from --flag`); its output is itself a valid configuration file.

Durations are seconds and may be fractional (`2.5`). Relative paths in a file
are taken from the file's directory; a path starting with `~/` is in your home
directory.

";

const REMOTES: &str = "\
## `[remotes.NAME]`

Machines or containers where kernels can run (one table per remote; a
request names one with `remote`, `exec --remote NAME`, or
`[kernels] remote` sets the default). toolcell runs `command` followed by
`python -u -c BOOTSTRAP`; the bootstrap reads the runner from stdin, so
the far side needs Python 3.8+ and nothing else. An R kernel runs `r
--no-echo --no-restore -e BOOTSTRAP` there (R 4.x, `sh` and `perl` or `awk`;
`jsonlite` for tool calls), a JavaScript kernel `node -e BOOTSTRAP` (node
18+). Tools still run on this machine; `[limits]` and `confine` apply to
local kernels only.

| Key | Default | Accepts | What it does |
|---|---|---|---|
| `command` | (required) | a list of strings | The program and arguments that connect stdin/stdout/stderr to a process there: `[\"ssh\", \"-T\", \"-o\", \"BatchMode=yes\", \"user@host\", \"--\"]`, `[\"docker\", \"exec\", \"-i\", \"CONTAINER\"]`, `[\"kubectl\", \"exec\", \"-i\", \"POD\", \"--\"]`. It runs with this machine's environment. |
| `python` | `\"python3\"` | a program name or path | The interpreter to run there. |
| `r` | `\"Rscript\"` | a program name or path | The R front end to run there for `language = \"r\"`. |
| `node` | `\"node\"` | a program name or path | The node binary to run there for `language = \"javascript\"`. |
| `cwd` | `\"\"` | a path there | The kernel's working directory there; empty: wherever the command lands. |
| `shell` | true for `ssh`, else false | true or false | Append the interpreter words as one shell-quoted word (the far side parses them with a shell, as sshd does). |
| `start` | `[]` | a list of strings | A command that makes an allocation for one kernel (a container, a SLURM job, a pod) and prints its id on stdout (its last line); empty: `command` reaches a place that is always there. A session's first cell runs it; later cells reuse the allocation. |
| `stop` | `[]` | a list of strings, with `{id}` | Removes an allocation; required with `start`. Run when the kernel ends: the session's end, `reset`, an idle reap, an eviction, a lost connection, the host's exit. |
| `list` | `[]` | a list of strings | Prints allocation ids, one per line — best only those one host made (`{host}`: label them with it in `start`); a later host runs it for a host that died and stops what it prints (without `{host}`: what it prints that the dead host's record names). Empty: the record's ids alone are swept. |
| `start_timeout` | `120` | seconds, > 0 and at most 86400 | How long `start` may take; then it is killed and the cell fails naming the remote. |
| `stop_timeout` | `30` | seconds, > 0 and at most 86400 | How long `stop` and `list` may take. The host's exit waits for its stops this long at most. |

In `command`, `cwd`, `start`, `stop` and `list`, toolcell replaces `{id}`
(the allocation), `{session}` (the session name, as `[A-Za-z0-9_.-]`, at
most 63 characters; `pool` for a warm-pool kernel), `{host}` (this host's
id) and `{remote}` (the remote's name), inside any word; no shell parses
the words. Recipes for Docker, SLURM and Kubernetes:
[remotes.md](remotes.md).

";

const EXAMPLE: &str = "\
## Example

```toml
[execution]
timeout = 60
mode = \"strict\"

[kernels]
max_kernels = 2

[env]
passthrough = [\"AWS_*\"]

[tools]
enabled = [\"read_file\", \"search_files\", \"terminal\"]

[mcp_servers.fs]
command = [\"npx\", \"-y\", \"@modelcontextprotocol/server-filesystem\", \"/data\"]
```
";

/// The configuration reference (`docs/configuration.md`): every section and
/// key with its default, what it accepts and what it does, in the order
/// `toolcell config` prints them.
pub fn reference_markdown() -> String {
    let mut out = String::from(INTRO);
    out.push_str(&format!(
        "The sections below are all there is; keys appear in the order `toolcell config`\nprints them. The file is named `{FILE_NAME}`.\n\n"
    ));
    for section in section_infos() {
        out.push_str(&format!("## `[{}]`\n\n", section.name));
        out.push_str(&unwrap_lines(&section.doc));
        out.push_str("\n\n| Key | Default | Accepts | What it does |\n|---|---|---|---|\n");
        for key in key_infos().iter().filter(|k| k.section == section.name) {
            out.push_str(&format!(
                "| `{}` | {} | {} | {} |\n",
                key.name,
                cell(&default_text(&key.default)),
                cell(&key.accepts),
                cell(&unwrap_lines(&key.doc)),
            ));
        }
        out.push('\n');
    }
    out.push_str(MCP_SERVERS);
    out.push_str(REMOTES);
    out.push_str(EXAMPLE);
    out
}

/// `[mcp_servers.NAME]`: a table per server, outside the fixed sections.
const MCP_SERVERS: &str = "## `[mcp_servers.NAME]`

MCP servers whose tools cells can call: the tools of server `NAME` are the
functions of the Python module `toolcell_tools.NAME` (also bound as `NAME` in
every cell). `NAME` is 1 to 64 letters, digits, `_` or `-`. Each server is
started once per host, when a cell (or `toolcell tools`, `stubs`, `schema`)
first needs it, and ends with the host. See [mcp-servers.md](mcp-servers.md).

| Key | Default | Accepts | What it does |
|---|---|---|---|
| `command` | `[]` | a list of strings | The program and arguments of a stdio server. Give `command` or `url`, not both. |
| `url` | `\"\"` | an http:// or https:// URL | A streamable-HTTP server. |
| `env` | `{}` | a table of strings | Variables set for the server, on top of the host's environment. |
| `cwd` | `\"\"` | a path | The server's working directory; empty: the host's. A relative path is taken from the config file's directory. |
| `tools` | `[]` | a list of tool names | Which of its tools are enabled; empty: all. A request's `tools` may also name `NAME.tool` or `NAME.*`. |
| `startup_timeout` | `30` | seconds, > 0 and at most 3600 | How long a cell waits for the server to start. |

";

/// A default as it would be written in the file.
fn default_text(value: &Value) -> String {
    format!("`{value}`")
}

/// One paragraph per blank-line-separated block, lines joined.
fn unwrap_lines(doc: &str) -> String {
    doc.split("\n\n")
        .map(|p| p.split('\n').collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Text safe inside a Markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}
