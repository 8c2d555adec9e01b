//! The execute result: docs/result.md.

use serde::{Deserialize, Serialize};

mod build;
mod files;
pub use build::build_result;
pub use files::{ChangedFile, Changes, FileCounts, FilesChanged, MAX_LISTED};

/// How a cell ended, as the caller sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Ran to the end (or `SystemExit` with code 0/None).
    Success,
    /// An exception, a non-zero `SystemExit`, or a kernel that died.
    Error,
    /// The cell ran out of time.
    Timeout,
    /// The caller interrupted the cell (or it never started).
    Interrupted,
    /// Admission refused the cell; nothing ran.
    Refused,
}

impl Status {
    /// The word used in JSON and status lines.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Success => "success",
            Status::Error => "error",
            Status::Timeout => "timeout",
            Status::Interrupted => "interrupted",
            Status::Refused => "refused",
        }
    }
}

/// Which kernel ran the cell: docs/result.md ("kernel").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct KernelInfo {
    /// The kernel's id.
    pub id: String,
    /// `project` or `strict`.
    pub mode: String,
    /// `python`, `r` or `javascript` (docs/languages.md): present in every
    /// result.
    #[serde(default)]
    pub language: String,
    /// The interpreter's version, e.g. `3.11.7`.
    pub python: String,
    /// True when the kernel already existed before this cell.
    pub reused: bool,
    /// The cell's number in this kernel.
    pub execution_count: u64,
    /// True when the session had a kernel before whose state is now gone.
    pub state_reset: bool,
    /// After a timeout or interrupt: whether the kernel and its state survived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_kept: Option<bool>,
    /// True when the kernel ended with this cell (`SystemExit`, death, kill).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<bool>,
    /// The remote the kernel runs on (`[remotes.NAME]`); absent: local.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    /// What the kernel ran in (docs/sandbox.md): its sandbox, `off` with
    /// the reason, or `remote`. Absent only when no kernel was reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<crate::sandbox::SandboxInfo>,
}

/// CPU and memory of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Usage {
    /// CPU seconds (kernel and children).
    pub cpu_seconds: f64,
    /// Peak resident set size, KiB.
    pub peak_rss_kb: u64,
}

/// A file produced for display: a figure the host checked
/// ([`crate::figures`]) — an allowed image type, a regular file directly in
/// the kernel's artifacts directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Display {
    /// MIME type (`image/png`, `image/svg+xml` or `image/jpeg`).
    pub mime: String,
    /// Absolute path (in the kernel's directory: gone with the kernel).
    pub path: String,
    /// The bytes read through the checked descriptor, for the journal
    /// (only when the registry journals). Not in JSON.
    #[serde(skip)]
    pub(crate) data: Option<std::sync::Arc<[u8]>>,
}

impl Display {
    /// An entry (without bytes for the journal).
    #[must_use]
    pub fn new(mime: impl Into<String>, path: impl Into<String>) -> Self {
        Self {
            mime: mime.into(),
            path: path.into(),
            data: None,
        }
    }

    /// The same entry carrying the checked bytes.
    pub(crate) fn with_data(mut self, data: Option<std::sync::Arc<[u8]>>) -> Self {
        self.data = data;
        self
    }

    /// The checked bytes, when the registry journals.
    pub fn data(&self) -> Option<&std::sync::Arc<[u8]>> {
        self.data.as_ref()
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The execute result of docs/result.md. Field names and order are the
/// contract; optional fields are omitted when empty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecuteResult {
    /// How the cell ended.
    pub status: Status,
    /// Cleaned stdout, then `"\n--- stderr ---\n"` + stderr + traceback when
    /// either is non-empty.
    pub output: String,
    /// 0 success, 1 exception, the `SystemExit` code, -1 timeout/interrupt/death.
    pub exit_code: i64,
    /// Tool calls dispatched during the cell.
    pub tool_calls_made: u32,
    /// Wall time, 2 decimals.
    pub duration_seconds: f64,
    /// Which kernel ran it.
    pub kernel: KernelInfo,
    /// One sentence: what went wrong and whether state was lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Recovery advice for a well-known failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// Truncation / spill notice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// Stdout was cut.
    pub stdout_truncated: bool,
    /// Stdout bytes in `output`.
    pub stdout_bytes_captured: u64,
    /// Stdout bytes in all.
    pub stdout_bytes_total: u64,
    /// Stdout bytes left out.
    pub stdout_bytes_omitted: u64,
    /// The file with the whole stdout, when it was cut or folded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_spill_path: Option<String>,
    /// Stdout lines left out of folded runs of same-shape lines.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stdout_lines_folded: u64,
    /// Stdout lines whose middle was cut (longer than `max_line_chars`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stdout_lines_cut: u64,
    /// Stderr lines left out of folded runs.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stderr_lines_folded: u64,
    /// Stderr lines whose middle was cut.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stderr_lines_cut: u64,
    /// Stderr's counts, when the cell wrote to stderr.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<StderrCounts>,
    /// True when the cell tried to read input.
    #[serde(default, skip_serializing_if = "is_false")]
    pub stdin_requested: bool,
    /// CPU and memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Files produced for display.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub display: Vec<Display>,
    /// Files the cell (and the tools it called) created, modified or
    /// deleted under the kernel's working directory; absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<FilesChanged>,
}

/// The stderr counterparts of the `stdout_*` counts, present when the cell
/// wrote to stderr (the traceback is not counted: it is not written by the
/// cell).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StderrCounts {
    /// Any byte of stderr was left out (folded, a long line cut, the middle cut).
    pub stderr_truncated: bool,
    /// Stderr bytes in `output`.
    pub stderr_bytes_captured: u64,
    /// Stderr bytes the cell wrote in all.
    pub stderr_bytes_total: u64,
    /// `stderr_bytes_total - stderr_bytes_captured`.
    pub stderr_bytes_omitted: u64,
    /// The file with the whole stderr, when anything was left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_spill_path: Option<String>,
}

impl StderrCounts {
    /// The counts of a stream that wrote `total` bytes; `None` when it
    /// wrote none.
    pub fn of(truncated: bool, captured: u64, total: u64, spill: Option<String>) -> Option<Self> {
        (total > 0).then(|| Self {
            stderr_truncated: truncated,
            stderr_bytes_captured: captured,
            stderr_bytes_total: total,
            stderr_bytes_omitted: total.saturating_sub(captured),
            stderr_spill_path: spill,
        })
    }
}

impl ExecuteResult {
    /// A result for a cell none of whose code ran.
    pub fn not_run(status: Status, error: impl Into<String>, kernel: KernelInfo) -> Self {
        Self {
            status,
            output: String::new(),
            exit_code: -1,
            tool_calls_made: 0,
            duration_seconds: 0.0,
            kernel,
            error: Some(error.into()),
            hint: None,
            warning: None,
            stdout_truncated: false,
            stdout_bytes_captured: 0,
            stdout_bytes_total: 0,
            stdout_bytes_omitted: 0,
            stdout_spill_path: None,
            stdout_lines_folded: 0,
            stdout_lines_cut: 0,
            stderr_lines_folded: 0,
            stderr_lines_cut: 0,
            stderr: None,
            stdin_requested: false,
            usage: None,
            display: Vec::new(),
            files: None,
        }
    }

    /// True when none of the cell's code ran: admission refused it, no
    /// kernel could be started for it, or it was interrupted, shut down or
    /// cancelled before it was sent. Such results name no kernel.
    pub fn not_started(&self) -> bool {
        self.kernel.id.is_empty()
    }

    /// The exit code a CLI should use for this result (docs/result.md,
    /// "The `exec` status line and exit code"): 0 success, 1 cell error, 124
    /// timeout, 130 interrupted.
    pub fn cli_exit_code(&self) -> u8 {
        match self.status {
            Status::Success => 0,
            Status::Timeout => 124,
            Status::Interrupted => 130,
            Status::Error | Status::Refused => 1,
        }
    }
}

/// Rounds to 2 decimals.
pub fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optional_fields_are_omitted_and_order_is_the_contract() {
        let r = ExecuteResult::not_run(Status::Refused, "denied by rule x", KernelInfo::default());
        let v = serde_json::to_value(&r).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "status",
                "output",
                "exit_code",
                "tool_calls_made",
                "duration_seconds",
                "kernel",
                "error",
                "stdout_truncated",
                "stdout_bytes_captured",
                "stdout_bytes_total",
                "stdout_bytes_omitted"
            ]
        );
        assert_eq!(v["status"], "refused");
        let k: Vec<&str> = v["kernel"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            k,
            [
                "id",
                "mode",
                "language",
                "python",
                "reused",
                "execution_count",
                "state_reset"
            ]
        );
    }

    #[test]
    fn cli_exit_codes() {
        let mut r = ExecuteResult::not_run(Status::Timeout, "x", KernelInfo::default());
        assert_eq!(r.cli_exit_code(), 124);
        r.status = Status::Interrupted;
        assert_eq!(r.cli_exit_code(), 130);
        r.status = Status::Success;
        assert_eq!(r.cli_exit_code(), 0);
    }
}
