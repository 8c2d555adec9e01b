//! Recovery hints for well-known failures: docs/result.md ("hint").
//!
//! [`hint`] looks at a cell's traceback and what the host knows about the cell,
//! and returns one actionable sentence or two — or nothing. Rules are tried in
//! the order docs/result.md lists them and the first match wins:
//!
//! 1. a name imported from `toolcell_tools` that it lacks (lists what is importable);
//! 2. a helper (`json_parse`, `shell_quote`, `retry`) imported from the wrong place or called wrongly;
//! 3. `ModuleNotFoundError` (names the interpreter, suggests `%pip install`);
//! 4. a tool's dict result treated as a string;
//! 5. the cell asked for stdin;
//! 6. the cell used up its tool-call budget;
//! 7. a timeout killed the kernel;
//! 8. the kernel was killed for using up `[limits] cpu_seconds` (SIGXCPU);
//! 9. `MemoryError` (names `[limits] memory` when it is set);
//! 10. a process or thread could not be started: `EAGAIN` (names `[limits] processes` when set);
//! 11. too many open files: `EMFILE` (names `[limits] open_files` when set);
//! 12. file too large: `EFBIG` (names `[limits] file_size` when set);
//! 13. a signal or a write refused in a confined kernel (`[execution] confine
//!     = true`; for a write, lists the writable directories).
//!
//! A limit is named only when the host says it is configured
//! ([`HintContext::limits`]); otherwise the hint is the generic advice.

use std::sync::LazyLock;

use regex::Regex;

/// What the host knows about the cell besides its traceback.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct HintContext {
    /// Names `toolcell_tools` exports (enabled tools and helpers).
    pub importable: Vec<String>,
    /// The kernel's interpreter (path and version), e.g. `/usr/bin/python3 (3.11.7)`.
    pub interpreter: String,
    /// The cell tried to read stdin.
    pub stdin_requested: bool,
    /// The cell's tool-call budget ran out.
    pub budget_exhausted: bool,
    /// The cell's budget, for the message.
    pub max_tool_calls: u32,
    /// The kernel was killed after a timeout (state lost).
    pub killed_by_timeout: bool,
    /// The `[limits]` in force, `(key, value)`: `("memory", 268435456)`.
    pub limits: Vec<(String, u64)>,
    /// The kernel was killed for using up `[limits] cpu_seconds`.
    pub killed_by_cpu_limit: bool,
    /// Non-empty when the kernel is confined (`[execution] confine = true`):
    /// the directories it may write beneath.
    pub confined_writable: Vec<String>,
    /// The kernel's language: `python` (or empty), `r`, `javascript`.
    pub language: String,
}

impl HintContext {
    /// A context listing `importable` names and the `interpreter`.
    pub fn new(importable: Vec<String>, interpreter: impl Into<String>) -> Self {
        Self {
            importable,
            interpreter: interpreter.into(),
            ..Self::default()
        }
    }
}

static R_NO_PACKAGE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"there is no package called [‘'`]([A-Za-z0-9._]+)[’'`]")
        .unwrap_or_else(|_| unreachable_regex())
});
static R_NO_FUNCTION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"could not find function "([A-Za-z0-9._]+)""#)
        .unwrap_or_else(|_| unreachable_regex())
});
static JS_NO_MODULE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"Cannot find module '([^'./][^']*)'").unwrap_or_else(|_| unreachable_regex())
});

/// Hints for an R or JavaScript kernel's well-known failures
/// (docs/languages.md, "R" and "JavaScript").
fn language_hint(traceback: &str, cx: &HintContext) -> Option<String> {
    match cx.language.as_str() {
        "r" => {
            if let Some(c) = R_NO_PACKAGE.captures(traceback) {
                let pkg = &c[1];
                return Some(format!(
                    "The R package `{pkg}` is not installed for {}. Install it in a cell with                      install.packages(\"{pkg}\") (needs a CRAN mirror), or on Debian with                      apt-get install r-cran-{}; then run library({pkg}) again.",
                    cx.interpreter,
                    pkg.to_ascii_lowercase()
                ));
            }
            if let Some(c) = R_NO_FUNCTION.captures(traceback) {
                let name = &c[1];
                if name.contains('_') && !cx.importable.is_empty() {
                    return Some(format!(
                        "`{name}` is not defined. The tool functions of this kernel are: {}.",
                        cx.importable.join(", ")
                    ));
                }
            }
            None
        }
        "javascript" => {
            if let Some(c) = JS_NO_MODULE.captures(traceback) {
                let module = &c[1];
                return Some(format!(
                    "The npm package `{module}` is not installed where this kernel looks                      (its working directory's node_modules). Install it with a shell command:                      npm install {module}; then require('{module}') again. Node's built-in                      modules (fs, path, child_process, …) need no install."
                ));
            }
            None
        }
        _ => None,
    }
}

static IMPORT_FROM_TOOLS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"ImportError: cannot import name '([A-Za-z_][A-Za-z0-9_]*)' from 'toolcell_tools'")
        .unwrap_or_else(|_| unreachable_regex())
});
static ATTR_OF_TOOLS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"AttributeError: module 'toolcell_tools' has no attribute '([A-Za-z_][A-Za-z0-9_]*)'",
    )
    .unwrap_or_else(|_| unreachable_regex())
});
static HELPER_IMPORT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:ImportError: cannot import name '(json_parse|shell_quote|retry)' from '([^']+)'|ModuleNotFoundError: No module named '(toolcell|toolcell\.[a-z_]+|toolcell_tools\.[a-z_]+)')")
        .unwrap_or_else(|_| unreachable_regex())
});
static HELPER_CALL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"TypeError: (json_parse|shell_quote|retry)\(\) ")
        .unwrap_or_else(|_| unreachable_regex())
});
static MODULE_NOT_FOUND: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"ModuleNotFoundError: No module named '([A-Za-z0-9_.]+)'")
        .unwrap_or_else(|_| unreachable_regex())
});
static DICT_AS_STRING: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?:AttributeError: 'dict' object has no attribute '(?:split|splitlines|strip|lower|upper|startswith|endswith|replace|find|encode|decode|lstrip|rstrip|format|join)'",
        r"|TypeError: string indices must be integers",
        r"|TypeError: can only concatenate str \(not .dict.\) to str",
        r"|TypeError: expected str, bytes or os\.PathLike object, not dict",
        r"|TypeError: the JSON object must be str, bytes or bytearray, not dict",
        r"|TypeError: argument of type 'dict' is not iterable",
        r"|TypeError: a bytes-like object is required, not 'dict')"
    ))
    .unwrap_or_else(|_| unreachable_regex())
});

static MEMORY_ERROR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^(?:MemoryError\b|\w*Error: \[Errno 12\])")
        .unwrap_or_else(|_| unreachable_regex())
});
static NO_PROCESS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^RuntimeError: can't start new thread").unwrap_or_else(|_| unreachable_regex())
});
/// `EAGAIN` is also what a non-blocking read says: it counts as a failed
/// process start only when the traceback shows one.
static EAGAIN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^\w*Error: \[Errno 11\]").unwrap_or_else(|_| unreachable_regex())
});
static SPAWNING: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\bfork\b|fork_exec|_execute_child|posix_spawn|Popen|\bspawn")
        .unwrap_or_else(|_| unreachable_regex())
});
static TOO_MANY_FILES: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^\w*Error: \[Errno 24\] Too many open files")
        .unwrap_or_else(|_| unreachable_regex())
});
static FILE_TOO_LARGE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^\w*Error: \[Errno 27\] File too large")
        .unwrap_or_else(|_| unreachable_regex())
});
static PERMISSION_DENIED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^(?:PermissionError: \[Errno (?:13|1)\]|OSError: \[Errno 30\])")
        .unwrap_or_else(|_| unreachable_regex())
});

static SIGNALLING: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b(?:os\.kill|os\.killpg|kill|killpg|send_signal|pidfd_send_signal)\(")
        .unwrap_or_else(|_| unreachable_regex())
});

/// A regex that matches nothing; stands in if a literal pattern above ever
/// failed to compile (they are tested, so this is never used).
fn unreachable_regex() -> Regex {
    Regex::new(r"[^\s\S]").unwrap_or_else(|_| unreachable!("a trivial regex compiles"))
}

/// Pip's name for an import name, where they commonly differ.
fn pip_name(module: &str) -> &str {
    match module {
        "cv2" => "opencv-python",
        "PIL" => "pillow",
        "sklearn" => "scikit-learn",
        "yaml" => "pyyaml",
        "bs4" => "beautifulsoup4",
        "dateutil" => "python-dateutil",
        "docx" => "python-docx",
        "dotenv" => "python-dotenv",
        "jwt" => "pyjwt",
        "magic" => "python-magic",
        "Crypto" => "pycryptodome",
        other => other,
    }
}

/// The hint for a failed cell, if a rule matches.
pub fn hint(traceback: &str, cx: &HintContext) -> Option<String> {
    if let Some(h) = language_hint(traceback, cx) {
        return Some(h);
    }
    let importable = || {
        if cx.importable.is_empty() {
            "nothing is enabled".to_string()
        } else {
            cx.importable.join(", ")
        }
    };
    for re in [&*IMPORT_FROM_TOOLS, &*ATTR_OF_TOOLS] {
        if let Some(c) = re.captures(traceback) {
            let name = &c[1];
            return Some(format!(
                "toolcell_tools has no `{name}` (the tool is not enabled for this session, or the \
                 name is misspelt). Importable: {}.",
                importable()
            ));
        }
    }
    if let Some(c) = HELPER_IMPORT.captures(traceback) {
        let what = c.get(1).map_or_else(
            || "the helpers".to_string(),
            |m| format!("`{}`", m.as_str()),
        );
        return Some(format!(
            "{what} comes from toolcell_tools and is already defined in the kernel: call \
             json_parse(text), shell_quote(s) or retry(fn, attempts=3) directly, or `from \
             toolcell_tools import json_parse, shell_quote, retry`."
        ));
    }
    if let Some(c) = HELPER_CALL.captures(traceback) {
        let usage = match &c[1] {
            "json_parse" => "json_parse(text) takes one str or bytes and returns the parsed value",
            "shell_quote" => "shell_quote(s) takes one value and returns it quoted as a shell word",
            _ => {
                "retry(fn, *args, attempts=3, delay=0.5, backoff=2.0, **kwargs) calls fn(*args, \
                 **kwargs) until it succeeds; pass the function itself, not its result"
            }
        };
        return Some(format!("Helper called wrongly: {usage}."));
    }
    if let Some(c) = MODULE_NOT_FOUND.captures(traceback) {
        let module = &c[1];
        let top = module.split('.').next().unwrap_or(module);
        if top != "toolcell_tools" {
            let interp = if cx.interpreter.is_empty() {
                "the kernel's interpreter".to_string()
            } else {
                format!("the kernel's interpreter, {}", cx.interpreter)
            };
            return Some(format!(
                "`{top}` is not installed for {interp}. Install it with a cell containing \
                 `%pip install {}`, then run your code again.",
                pip_name(top)
            ));
        }
    }
    if DICT_AS_STRING.is_match(traceback) {
        return Some(
            "Tools return dicts, not strings: take the field you need, e.g. \
             read_file(p)[\"content\"], terminal(cmd)[\"output\"], \
             web_extract([u])[\"results\"][0][\"content\"]."
                .to_string(),
        );
    }
    if cx.stdin_requested {
        return Some(
            "Cells cannot read interactive input: put the data in the code, read it from a \
             file, or pass a value instead of calling input()."
                .to_string(),
        );
    }
    if cx.budget_exhausted {
        return Some(format!(
            "This cell used all {} tool calls it may make. Continue in the next cell (state is \
             kept), or do more per call (e.g. one terminal command or search instead of many).",
            cx.max_tool_calls
        ));
    }
    if cx.killed_by_timeout {
        return Some(
            "The kernel was killed after the timeout, so its variables and imports are gone: \
             re-run the setup you need, and split long work into smaller cells (save \
             intermediate results to files)."
                .to_string(),
        );
    }
    limit_hint(traceback, cx)
}

/// ` under [limits] key = value` when `key` is configured, else "".
fn under(cx: &HintContext, key: &str) -> String {
    cx.limits
        .iter()
        .find(|(k, _)| k == key)
        .map_or_else(String::new, |(k, v)| format!(" under [limits] {k} = {v}"))
}

/// Rules 8–13: resource limits and confinement.
fn limit_hint(traceback: &str, cx: &HintContext) -> Option<String> {
    if cx.killed_by_cpu_limit {
        return Some(format!(
            "The cell used more CPU time than it may{}, so the kernel was killed (SIGXCPU) \
             and its variables and imports are gone: re-run the setup you need, do less work \
             per cell (smaller inputs, a faster algorithm, results saved to files), or ask for \
             a higher [limits] cpu_seconds.",
            under(cx, "cpu_seconds")
        ));
    }
    if MEMORY_ERROR.is_match(traceback) {
        let limit = under(cx, "memory");
        let raise = if limit.is_empty() {
            ""
        } else {
            " or ask for a higher [limits] memory"
        };
        return Some(format!(
            "The cell ran out of memory{limit}. The kernel is still running: free what you \
             do not need (del big_object), process the data in chunks or stream it from \
             disk, use compact types (numpy arrays, generators){raise}."
        ));
    }
    if NO_PROCESS.is_match(traceback)
        || (EAGAIN.is_match(traceback) && SPAWNING.is_match(traceback))
    {
        let limit = under(cx, "processes");
        let why = if limit.is_empty() {
            ""
        } else {
            " (it counts every process and thread of the user, not just this kernel's)"
        };
        return Some(format!(
            "A new process or thread could not be started{limit}{why}: wait for or end the \
             processes the cell started (subprocess .wait(), pool.close()), use fewer \
             workers, or do the work in this process."
        ));
    }
    if TOO_MANY_FILES.is_match(traceback) {
        return Some(format!(
            "The cell has too many files open{}: close files and sockets when done (use \
             `with open(...) as f:`), and do not keep one open per item.",
            under(cx, "open_files")
        ));
    }
    if FILE_TOO_LARGE.is_match(traceback) {
        return Some(format!(
            "A file grew past the largest size the kernel may write{}: write less (compress, \
             sample, or split into several smaller files).",
            under(cx, "file_size")
        ));
    }
    if !cx.confined_writable.is_empty()
        && PERMISSION_DENIED.is_match(traceback)
        && SIGNALLING.is_match(traceback)
    {
        return Some(
            "The kernel is confined ([execution] confine = true): it may signal only the \
             processes it started itself, not the host or other programs."
                .to_string(),
        );
    }
    if !cx.confined_writable.is_empty() && PERMISSION_DENIED.is_match(traceback) {
        return Some(format!(
            "The kernel is confined ([execution] confine = true): it may write only beneath {}. \
             Write there instead (e.g. tempfile.mkdtemp() or the working directory); reading \
             is not restricted.",
            cx.confined_writable.join(", ")
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_regex_compiles() {
        for re in [
            &*IMPORT_FROM_TOOLS,
            &*ATTR_OF_TOOLS,
            &*HELPER_IMPORT,
            &*HELPER_CALL,
            &*MODULE_NOT_FOUND,
            &*DICT_AS_STRING,
            &*MEMORY_ERROR,
            &*NO_PROCESS,
            &*EAGAIN,
            &*SPAWNING,
            &*TOO_MANY_FILES,
            &*FILE_TOO_LARGE,
            &*PERMISSION_DENIED,
            &*SIGNALLING,
        ] {
            assert!(!re.is_match("nothing to see"));
        }
    }

    #[test]
    fn no_rule_no_hint() {
        assert_eq!(
            hint(
                "ZeroDivisionError: division by zero",
                &HintContext::default()
            ),
            None
        );
    }
}
