//! Assembling the execute result (docs/result.md) from a cell's outcome:
//! status, exit code and the one-sentence `error` from how the cell ended,
//! `output` (stdout, then stderr and the capped traceback), the hint for a
//! failure, and the truncation warnings.

use toolcell_protocol::{CellResult, RunnerStatus};
use toolcell_rpc::ErrorCode;
use toolcell_tools::hints::{self, HintContext};

use super::{ExecuteResult, KernelInfo, Status, Usage, round2};
use crate::capture::Captured;
use crate::kernel::{CellOptions, CellOutcome, Ending, last_lines};

/// Most bytes of the exception line quoted in `error` (one sentence).
const MAX_EXCEPTION_LINE: usize = 500;

/// The exception a traceback ends with, on one line: every line after the
/// last indented one (frames, source lines, carets), so a message of
/// several lines is kept whole (joined with spaces); when the traceback
/// ends indented (another language's stack, an exception group), its last
/// unindented line.
fn exception_line(traceback: &str) -> Option<String> {
    let lines: Vec<&str> = traceback.lines().collect();
    let start = lines
        .iter()
        .rposition(|l| l.starts_with(' ') || l.starts_with('\t'))
        .map_or(0, |i| i + 1);
    let own: Vec<&str> = lines[start..]
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect();
    if !own.is_empty() && !own[0].starts_with("Traceback (most recent call last)") {
        return Some(clip(&own.join(" "), MAX_EXCEPTION_LINE));
    }
    traceback
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty() && !l.starts_with(' '))
        .map(|l| clip(l.trim(), MAX_EXCEPTION_LINE))
}

/// `text` cut to at most `max` bytes on a character boundary, `…` added
/// when cut.
fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The traceback as it goes into `output`: within `cap` bytes (the stderr
/// cap), a head (40%) and a tail (60%) around a notice, like a captured
/// stream. The runner already bounds it (2^22 characters, whole lines), but a cell that
/// raises a megabyte-long message or recurses 100k frames deep must not put
/// more than the configured caps into one result.
fn cap_traceback(traceback: &str, cap: usize) -> std::borrow::Cow<'_, str> {
    use toolcell_redact::{HeadTailCut, Unit};
    match HeadTailCut::plan(traceback, cap, Unit::Bytes) {
        None => std::borrow::Cow::Borrowed(traceback),
        Some(cut) => std::borrow::Cow::Owned(cut.render(traceback, "TRACEBACK")),
    }
}

/// The sentence for a stream of which anything was left out (folded, a
/// long line cut, the middle cut): how much, how, and where the whole text
/// is. `None` when the stream came back whole.
fn stream_warning(name: &str, c: &Captured) -> Option<String> {
    if !c.truncated {
        return None;
    }
    let f = &c.folded;
    let mut how = Vec::new();
    if f.lines_folded > 0 {
        how.push(format!(
            "{} similar lines were folded ({} run{} of same-shape lines, each shown by its first and last lines)",
            f.lines_folded,
            f.runs_folded,
            if f.runs_folded == 1 { "" } else { "s" }
        ));
    }
    if f.lines_cut > 0 {
        how.push(format!(
            "{} long line{} cut in the middle",
            f.lines_cut,
            if f.lines_cut == 1 { " was" } else { "s were" }
        ));
    }
    if c.cut {
        how.push(if how.is_empty() {
            "head and tail kept".to_string()
        } else {
            "then the middle was cut (head and tail kept)".to_string()
        });
    }
    let mut w = format!(
        "{name} was truncated: {} of {} bytes omitted ({}).",
        c.bytes_omitted,
        c.bytes_total,
        how.join(", ")
    );
    if let Some(p) = &c.spill_path {
        let p = p.display();
        if c.spill_capped {
            w.push_str(&format!(
                " The start of the full {name} is saved in {p} (the file is capped at [output] spill_cap_bytes, so its end is missing); page it with read_file(\"{p}\", offset=…) instead of re-running the cell."
            ));
        } else {
            w.push_str(&format!(
                " The full {name} is saved in {p}; page it with read_file(\"{p}\", offset=…) instead of re-running the cell."
            ));
        }
    } else if let Some(e) = &c.spill_error {
        w.push_str(&format!(" It could not be saved to a file: {e}."));
    } else {
        w.push_str(" The whole text was not saved (no spill directory).");
    }
    Some(w)
}

/// The sentence for a traceback cut to fit the stderr cap: how much was
/// left out and where the whole of it is (a spill file, when there is a
/// spill directory). `None` when it fits.
fn traceback_warning(traceback: &str, opts: &CellOptions, kernel: &KernelInfo) -> Option<String> {
    let cap = opts.max_stderr_bytes;
    let cut = toolcell_redact::HeadTailCut::plan(traceback, cap, toolcell_redact::Unit::Bytes)?;
    let mut w = format!(
        "The traceback was truncated: {} of {} bytes omitted (head and tail kept).",
        cut.omitted, cut.total
    );
    let Some((dir, cap_bytes)) = &opts.spill else {
        w.push_str(" The whole traceback was not saved (no spill directory).");
        return Some(w);
    };
    let target = crate::capture::SpillTarget {
        dir: dir.clone(),
        prefix: format!("{}-cell{}-traceback", kernel.id, kernel.execution_count),
        cap_bytes: *cap_bytes,
    };
    match crate::capture::spill_whole(&target, traceback) {
        Ok((p, capped)) => {
            let p = p.display();
            if capped {
                w.push_str(&format!(
                    " Its start is saved in {p} (capped at [output] spill_cap_bytes); page it with read_file(\"{p}\", offset=…)."
                ));
            } else {
                w.push_str(&format!(
                    " The whole traceback is saved in {p}; page it with read_file(\"{p}\", offset=…)."
                ));
            }
        }
        Err(e) => w.push_str(&format!(" It could not be saved to a file: {e}.")),
    }
    Some(w)
}

/// What the runner's own result adds: `stdin_requested`, `usage`. (Its
/// `display` list is checked by the caller: `crate::figures`.)
#[derive(Default)]
struct RunnerFields {
    stdin_requested: bool,
    usage: Option<Usage>,
}

impl RunnerFields {
    fn of(ending: &Ending) -> Self {
        let r = match ending {
            Ending::Answered(r) | Ending::TimedOutKept(r) | Ending::InterruptedKept(r) => r,
            _ => return Self::default(),
        };
        Self {
            stdin_requested: r.stdin_requested,
            usage: Some(Usage {
                cpu_seconds: round2(r.usage.cpu_seconds),
                peak_rss_kb: r.usage.peak_rss_kb,
            }),
        }
    }
}

/// How a cell ended, as the result says it.
struct Verdict {
    status: Status,
    exit_code: i64,
    error: Option<String>,
    killed_by_timeout: bool,
}

impl Verdict {
    fn new(status: Status, exit_code: i64, error: Option<String>) -> Self {
        Self {
            status,
            exit_code,
            error,
            killed_by_timeout: false,
        }
    }
}

/// The verdict on a cell the runner answered normally.
fn answered(r: &CellResult, traceback: &str, kernel: &mut KernelInfo) -> Verdict {
    match r.status {
        RunnerStatus::Ok => Verdict::new(Status::Success, 0, None),
        RunnerStatus::Error => Verdict::new(
            Status::Error,
            1,
            Some(format!(
                "{} (the kernel and its state are kept)",
                exception_line(traceback).unwrap_or_else(|| "the cell raised an exception".into())
            )),
        ),
        RunnerStatus::Exit => {
            let code = r.exit_code.unwrap_or(0);
            kernel.ended = Some(true);
            if code == 0 {
                Verdict::new(Status::Success, 0, None)
            } else {
                Verdict::new(
                    Status::Error,
                    code,
                    Some(format!(
                        "the cell raised SystemExit({code}); the kernel ended and its state is gone, the next cell starts a fresh one"
                    )),
                )
            }
        }
        RunnerStatus::Interrupted => {
            kernel.state_kept = Some(true);
            Verdict::new(
                Status::Interrupted,
                -1,
                Some("the cell was interrupted (KeyboardInterrupt); the kernel and its state are kept".into()),
            )
        }
    }
}

/// The verdict for every ending, marking in `kernel` whether its state was
/// kept and whether it ended.
fn verdict(
    ending: &Ending,
    traceback: &str,
    stderr: &str,
    opts: &CellOptions,
    kernel: &mut KernelInfo,
) -> Verdict {
    let timeout_s = opts.timeout.as_secs_f64();
    let grace_s = opts.interrupt_grace.as_secs_f64();
    let (kept, ended) = match ending {
        Ending::Answered(_) => (None, None),
        Ending::TimedOutKept(_) | Ending::InterruptedKept(_) => (Some(true), None),
        Ending::Died { .. } => (None, Some(true)),
        _ => (Some(false), Some(true)),
    };
    kernel.state_kept = kept.or(kernel.state_kept);
    kernel.ended = ended.or(kernel.ended);
    let (status, error) = match ending {
        Ending::Answered(r) => return answered(r, traceback, kernel),
        Ending::TimedOutKept(_) => (Status::Timeout, format!(
            "the cell ran past its {timeout_s}s timeout and was interrupted; the kernel and its state are kept"
        )),
        Ending::TimedOutKilled => {
            let mut v = Verdict::new(Status::Timeout, -1, Some(format!(
                "the cell ran past its {timeout_s}s timeout and did not stop within {grace_s}s of an interrupt, so the kernel was killed; all its state (variables, imports) is lost"
            )));
            v.killed_by_timeout = true;
            return v;
        }
        Ending::InterruptedKept(_) => (
            Status::Interrupted,
            "the cell was interrupted; the kernel and its state are kept".into(),
        ),
        Ending::InterruptedKilled => (Status::Interrupted, format!(
            "the cell was interrupted but did not stop within {grace_s}s, so the kernel was killed; all its state is lost"
        )),
        Ending::ShutDown => (
            Status::Interrupted,
            "the session was shut down while the cell ran; the kernel was killed and its state is lost".into(),
        ),
        Ending::Died { how } => (Status::Error, died(how, stderr)),
    };
    Verdict::new(status, -1, Some(error))
}

/// The error for a kernel that died during the cell, with the last stderr
/// lines.
fn died(how: &str, stderr: &str) -> String {
    let tail = last_lines(stderr, 5);
    let mut e = if how.starts_with("the connection to remote") {
        // A remote kernel (docs/tour.md,
        // "Kernels on other machines: ssh, Docker, Kubernetes"): `how` already
        // says the state is lost.
        format!("{how}; the next cell starts a new remote kernel")
    } else {
        format!(
            "the kernel died during the cell ({how}); its state is lost and the next cell starts a fresh kernel"
        )
    };
    if !tail.trim().is_empty() {
        e.push_str(&format!(". Last stderr lines:\n{tail}"));
    }
    e
}

/// `output`: stdout, then `"\n--- stderr ---\n"`, stderr and the traceback
/// (capped at the stderr cap) when either is non-empty.
fn assemble_output(stdout: &str, stderr: &str, traceback: &str, cap: usize) -> String {
    let mut output = stdout.to_string();
    if !stderr.is_empty() || !traceback.is_empty() {
        output.push_str("\n--- stderr ---\n");
        output.push_str(stderr);
        if !traceback.is_empty() && !stderr.is_empty() && !stderr.ends_with('\n') {
            output.push('\n');
        }
        output.push_str(&cap_traceback(traceback, cap));
    }
    output
}

/// The execute result (docs/result.md) of `outcome`. `hint_cx` builds the hint
/// context; it is called only when the cell failed.
pub fn build_result(
    outcome: CellOutcome,
    mut kernel: KernelInfo,
    hint_cx: impl FnOnce() -> HintContext,
    opts: &CellOptions,
    max_tool_calls: u32,
) -> ExecuteResult {
    let CellOutcome {
        ending,
        stdout,
        stderr,
        traceback,
        tools,
        duration,
        alive,
        ..
    } = outcome;
    let runner = RunnerFields::of(&ending);
    let v = verdict(&ending, &traceback, &stderr.text, opts, &mut kernel);
    if !alive {
        kernel.ended = Some(true);
    }
    let hint = (v.status != Status::Success).then(|| {
        let mut cx = hint_cx();
        cx.stdin_requested = runner.stdin_requested;
        cx.budget_exhausted = tools
            .as_ref()
            .is_some_and(|t| t.refused(ErrorCode::BudgetExhausted) > 0);
        cx.max_tool_calls = max_tool_calls;
        cx.killed_by_timeout = v.killed_by_timeout;
        cx.killed_by_cpu_limit =
            matches!(&ending, Ending::Died { how } if how.contains("[limits] cpu_seconds"));
        hints::hint(&traceback, &cx)
    });
    let warning: Vec<String> = [
        stream_warning("stdout", &stdout),
        stream_warning("stderr", &stderr),
        traceback_warning(&traceback, opts, &kernel),
    ]
    .into_iter()
    .flatten()
    .collect();
    ExecuteResult {
        status: v.status,
        output: assemble_output(
            &stdout.text,
            &stderr.text,
            &traceback,
            opts.max_stderr_bytes,
        ),
        exit_code: v.exit_code,
        tool_calls_made: tools
            .as_ref()
            .map_or(0, toolcell_rpc::CellReport::dispatched),
        duration_seconds: round2(duration.as_secs_f64()),
        kernel,
        error: v.error,
        hint: hint.flatten(),
        warning: (!warning.is_empty()).then(|| warning.join(" ")),
        stdout_truncated: stdout.truncated,
        stdout_bytes_captured: stdout.bytes_captured,
        stdout_bytes_total: stdout.bytes_total,
        stdout_bytes_omitted: stdout.bytes_omitted,
        stdout_spill_path: stdout.spill_path.map(|p| p.display().to_string()),
        stdout_lines_folded: stdout.folded.lines_folded,
        stdout_lines_cut: stdout.folded.lines_cut,
        stderr_lines_folded: stderr.folded.lines_folded,
        stderr_lines_cut: stderr.folded.lines_cut,
        stderr: super::StderrCounts::of(
            stderr.truncated,
            stderr.bytes_captured,
            stderr.bytes_total,
            stderr.spill_path.map(|p| p.display().to_string()),
        ),
        stdin_requested: runner.stdin_requested,
        usage: runner.usage,
        // Set by the caller from the checked figures (crate::figures).
        display: Vec::new(),
        files: None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use super::*;
    use toolcell_stubs::OnTimeout;

    fn opts() -> CellOptions {
        CellOptions {
            timeout: Duration::from_secs(5),
            max_tool_calls: 50,
            on_timeout: OnTimeout::Interrupt,
            interrupt_grace: Duration::from_secs(2),
            kill_grace: Duration::from_secs(2),
            max_stdout_bytes: 1000,
            max_stderr_bytes: 1000,
            spill: None,
            live: None,
            fold: crate::fold::FoldOptions::off(),
            interrupt: tokio_util::sync::CancellationToken::new(),
            cancel: None,
        }
    }

    fn runner(status: &str, exit_code: Option<i64>) -> CellResult {
        serde_json::from_value(serde_json::json!({
            "id": "c1", "status": status, "exit_code": exit_code, "execution_count": 1
        }))
        .unwrap()
    }

    fn judge(ending: &Ending, traceback: &str) -> (Verdict, KernelInfo) {
        let mut k = KernelInfo::default();
        let v = verdict(ending, traceback, "boom\n", &opts(), &mut k);
        (v, k)
    }

    #[test]
    fn the_exception_line_keeps_a_message_of_several_lines() {
        let tb = "Traceback (most recent call last):\n  File \"<cell-2>\", line 1, in <module>\n    u()\ntoolcell_tools.ToolError: u: ValueError: bad\nsecond line\n";
        assert_eq!(
            exception_line(tb).unwrap(),
            "toolcell_tools.ToolError: u: ValueError: bad second line"
        );
        let syntax = "  File \"<cell-1>\", line 1\n    x = (\n        ^\nSyntaxError: '(' was never closed\n";
        assert_eq!(
            exception_line(syntax).unwrap(),
            "SyntaxError: '(' was never closed"
        );
        // A JavaScript stack ends indented: the error line before it.
        let js = "Error: boom\n    at <cell-1>:1:7\n";
        assert_eq!(exception_line(js).unwrap(), "Error: boom");
    }

    #[test]
    fn each_ending_gets_its_status_exit_code_and_state_flags() {
        let (v, k) = judge(&Ending::Answered(runner("ok", None)), "");
        assert_eq!((v.status, v.exit_code, v.error), (Status::Success, 0, None));
        assert_eq!((k.state_kept, k.ended), (None, None));

        let tb = "Traceback (most recent call last):\n  File \"<cell-1>\"\nZeroDivisionError: division by zero\n";
        let (v, _) = judge(&Ending::Answered(runner("error", None)), tb);
        assert_eq!((v.status, v.exit_code), (Status::Error, 1));
        assert_eq!(
            v.error.unwrap(),
            "ZeroDivisionError: division by zero (the kernel and its state are kept)"
        );

        let (v, k) = judge(&Ending::Answered(runner("exit", Some(3))), "");
        assert_eq!(
            (v.status, v.exit_code, k.ended),
            (Status::Error, 3, Some(true))
        );
        let (v, _) = judge(&Ending::Answered(runner("exit", Some(0))), "");
        assert_eq!(v.status, Status::Success);

        let (v, k) = judge(&Ending::TimedOutKept(runner("interrupted", None)), "");
        assert_eq!(
            (v.status, k.state_kept, k.ended),
            (Status::Timeout, Some(true), None)
        );
        let (v, k) = judge(&Ending::TimedOutKilled, "");
        assert!(v.killed_by_timeout);
        assert_eq!(
            (v.status, k.state_kept, k.ended),
            (Status::Timeout, Some(false), Some(true))
        );
        assert!(v.error.unwrap().contains("5s timeout"));
        let (v, k) = judge(&Ending::InterruptedKilled, "");
        assert_eq!((v.status, k.state_kept), (Status::Interrupted, Some(false)));
        let (v, _) = judge(&Ending::ShutDown, "");
        assert!(v.error.unwrap().contains("shut down"));
        let died = Ending::Died {
            how: "it was killed by signal 9 (SIGKILL)".into(),
        };
        let (v, k) = judge(&died, "");
        assert_eq!(
            (v.status, v.exit_code, k.ended),
            (Status::Error, -1, Some(true))
        );
        let e = v.error.unwrap();
        assert!(
            e.contains("SIGKILL") && e.ends_with("Last stderr lines:\nboom"),
            "{e}"
        );
    }

    #[test]
    fn output_is_stdout_then_stderr_and_the_capped_traceback() {
        assert_eq!(assemble_output("out\n", "", "", 100), "out\n");
        assert_eq!(
            assemble_output("out\n", "err", "Traceback\n", 100),
            "out\n\n--- stderr ---\nerr\nTraceback\n"
        );
        let long = "x\n".repeat(1000);
        let capped = assemble_output("", "", &long, 100);
        assert!(
            capped.len() < 400 && capped.contains("TRACEBACK"),
            "{capped}"
        );
    }
}
