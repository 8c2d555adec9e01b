//! `toolcell repl`: an interactive session (docs/tour.md).
//!
//! One kernel (owner `--session`, default `repl`) lives as long as the
//! REPL. Lines are read with rustyline on the main thread; a complete input
//! runs as one cell on the tokio runtime with its output streamed live, then
//! a short status line follows.
//!
//! Signals: while rustyline reads a line the terminal is in raw mode, so
//! Ctrl-C and Ctrl-D reach rustyline as keys (Ctrl-C discards the input,
//! Ctrl-D leaves). While a cell runs the terminal is back in cooked mode and
//! Ctrl-C is a SIGINT, which a tokio signal listener turns into
//! [`Registry::interrupt`]: the cell is interrupted, the REPL keeps going.
//! SIGTERM and SIGHUP kill the kernel and end the process.
//!
//! One rustyline `Editor` lives as long as the REPL ([`LineReader`]), so
//! what it read past the end of a line — the rest of a paste, lines typed
//! ahead while a cell ran — is the start of the next line, never dropped
//! (rustyline's `buffer-redux` feature keeps those bytes between calls).
//! The editor takes SIGINT (and SIGWINCH) over from its creation; while a
//! cell runs, SIGINT goes back to tokio's listener ([`LineReader::run`]) and
//! returns to the editor afterwards. (rustyline's signal-hook feature would
//! leave SIGINT alone, but its reader then stalls on typed-ahead input.)
//!
//! When is an input complete? See [`needs_more`]: decided locally, without
//! asking the kernel.

use std::io::{IsTerminal, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use nix::sys::signal::SigAction;
use rustyline::error::ReadlineError;
use rustyline::history::{DefaultHistory, History};
use rustyline::{Config, Editor};
use toolcell_host::{ExecuteRequest, Registry};
use toolcell_kernel::{ExecuteResult, Status, StreamKind};

use crate::host::{self, Overrides};

/// Prompt of a new input.
const PROMPT: &str = ">>> ";
/// Prompt of a continuation line.
const CONTINUATION: &str = "... ";
/// Entries kept in the history file.
const HISTORY_SIZE: usize = 10_000;

/// Arguments of `toolcell repl`.
#[derive(Debug, clap::Args)]
#[command(long_about = LONG_ABOUT)]
pub(crate) struct Args {
    /// The session name (kernel owner) of the cells. The kernel belongs to
    /// this REPL and ends with it; it is not the daemon's `exec --session` kernel.
    #[arg(long, value_name = "S", default_value = "repl")]
    pub session: String,
    /// Working directory of the kernel (project mode).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    #[command(flatten)]
    pub overrides: Overrides,
}

const LONG_ABOUT: &str = "Interactive Python in one persistent kernel: variables, imports and \
loaded data survive from one input to the next, and cells call the agent's tools (read_file, \
terminal, ...) as Python functions. Output streams as the cell runs; a short status line \
follows (green success, red error, yellow timeout or interrupted; no color when stdout is not a \
terminal or NO_COLOR is set).\n\n\
Input: a line runs at once when it is a complete statement. A line ending with `:` (`def f():`, \
`for x in xs:`) or starting with `@` opens a block that continues at the `... ` prompt until a \
blank line. A line ending with `\\`, or with an unclosed bracket or triple-quoted string, \
continues until it is closed.\n\n\
Keys: Ctrl-C interrupts a running cell (the kernel and its state are kept) or, at the prompt, \
discards the input; Ctrl-D leaves (a pending block runs first) and shuts the kernel down.\n\n\
Commands: :reset (a fresh kernel), :tools (the tools cells can call), :help, :quit.\n\n\
History: $XDG_DATA_HOME/toolcell/history (else ~/.local/share/toolcell/history), private to \
the user (0600 in a 0700 directory).";

/// Runs the command.
pub(crate) fn run(config: Option<&Path>, args: Args) -> anyhow::Result<ExitCode> {
    let cfg = host::load_config(config, &args.overrides)?;
    let cwd = match &args.cwd {
        None => None,
        Some(d) => {
            let d = std::path::absolute(d).context("resolving --cwd")?;
            if !d.is_dir() {
                return Err(host::usage(format!(
                    "--cwd {}: not a directory",
                    d.display()
                )));
            }
            Some(d)
        }
    };
    // The terminal as it was, for a SIGTERM that arrives while rustyline
    // holds it in raw mode.
    let tty = std::io::stdin()
        .is_terminal()
        .then(|| nix::sys::termios::tcgetattr(std::io::stdin()).ok())
        .flatten();
    let rt = host::runtime()?;
    let registry = rt.block_on(async {
        let registry = Arc::new(host::registry(&cfg, |o| {
            if let Some(d) = &cwd {
                o.default_cwd.clone_from(d);
            }
        })?);
        exit_on_termination(Arc::clone(&registry), tty);
        // Take SIGINT over from the start, so a stray one (kill -INT)
        // between lines never ends the REPL.
        let _ = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt());
        anyhow::Ok(registry)
    })?;
    let sigint = current_sigint();
    let mut repl = Repl {
        rt: &rt,
        registry: Arc::clone(&registry),
        session: args.session,
        color: use_color(),
        history: None,
        sigint,
    };
    let outcome = repl.run();
    rt.block_on(registry.shutdown_all());
    outcome?;
    Ok(ExitCode::SUCCESS)
}

/// On SIGTERM or SIGHUP: restore the terminal, kill the kernel, then exit
/// 143 or 129.
/// The handlers are in place when this returns.
fn exit_on_termination(registry: Arc<Registry>, tty: Option<nix::sys::termios::Termios>) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        tracing::warn!("could not install SIGTERM/SIGHUP handlers");
        return;
    };
    tokio::spawn(async move {
        let code = tokio::select! {
            _ = term.recv() => 143,
            _ = hup.recv() => 129,
        };
        if let Some(t) = &tty {
            use nix::sys::termios::{SetArg, tcsetattr};
            let _ = tcsetattr(std::io::stdin(), SetArg::TCSANOW, t);
            // rustyline turns bracketed paste on while it reads.
            let mut o = std::io::stdout().lock();
            let _ = o.write_all(b"\x1b[?2004l\n");
            let _ = o.flush();
        }
        registry.shutdown_all().await;
        toolcell_sys::process::kill_adopted(&[]);
        toolcell_sys::cgroup::remove_host_cgroup();
        std::process::exit(code);
    });
}

/// The REPL's state.
struct Repl<'a> {
    rt: &'a tokio::runtime::Runtime,
    registry: Arc<Registry>,
    session: String,
    color: bool,
    /// The history file, once it could be prepared.
    history: Option<PathBuf>,
    /// tokio's SIGINT action, put back while a cell runs.
    sigint: Option<SigAction>,
}

impl Repl<'_> {
    fn run(&mut self) -> anyhow::Result<()> {
        let config = Config::builder()
            .max_history_size(HISTORY_SIZE)
            .context("configuring the line editor")?
            .history_ignore_dups(true)
            .context("configuring the line editor")?
            .auto_add_history(false)
            .build();
        let mut ed = LineReader {
            editor: Editor::with_history(config.clone(), DefaultHistory::with_config(&config))
                .context("starting the line editor")?,
            sigint: self.sigint,
        };
        self.open_history(&mut ed);
        self.say(&format!(
            "toolcell repl · session {:?} · :help for help, Ctrl-D to leave",
            self.session
        ));
        let mut block: Vec<String> = Vec::new();
        loop {
            let prompt = if block.is_empty() {
                PROMPT
            } else {
                CONTINUATION
            };
            let line = match ed.readline(prompt) {
                Ok(line) => line,
                // Ctrl-C at the prompt: discard what was typed.
                Err(ReadlineError::Interrupted) => {
                    block.clear();
                    continue;
                }
                // Ctrl-D (or the end of piped input): run what is pending,
                // then leave.
                Err(ReadlineError::Eof) => {
                    if block.iter().any(|l| !l.trim().is_empty()) {
                        ed.run(|| self.run_cell(block.join("\n")));
                    }
                    return Ok(());
                }
                Err(e) => return Err(e).context("reading a line"),
            };
            if block.is_empty() {
                if line.trim().is_empty() {
                    continue;
                }
                if let Some(cmd) = line.trim().strip_prefix(':') {
                    self.remember(&mut ed, &line);
                    if !self.command(cmd.trim()) {
                        return Ok(());
                    }
                    continue;
                }
            }
            if !line.trim().is_empty() {
                self.remember(&mut ed, &line);
            }
            block.push(line);
            if needs_more(&block) {
                continue;
            }
            let code = block.join("\n");
            block.clear();
            ed.run(|| self.run_cell(code));
        }
    }

    /// Prepares the history file and loads what it holds.
    fn open_history(&mut self, ed: &mut LineReader) {
        let Some(path) = history_path() else {
            self.warn("no history: neither XDG_DATA_HOME nor HOME is set");
            return;
        };
        if let Err(e) = prepare_history(&path) {
            self.warn(&format!("no history: {}: {e}", path.display()));
            return;
        }
        if let Err(e) = ed.editor.history_mut().load(&path) {
            // An empty file is not an error worth a word.
            if std::fs::metadata(&path).is_ok_and(|m| m.len() > 0) {
                self.warn(&format!("history not loaded from {}: {e}", path.display()));
            }
        }
        self.history = Some(path);
    }

    /// Adds a line to the history and appends it to the file at once, so
    /// a REPL that is killed keeps what was typed.
    fn remember(&mut self, ed: &mut LineReader, line: &str) {
        let history = ed.editor.history_mut();
        let _ = history.add(line);
        if let Some(path) = &self.history
            && let Err(e) = history.append(path)
        {
            self.warn(&format!(
                "history not saved to {} ({e}); not trying again",
                path.display()
            ));
            self.history = None;
        }
    }

    /// Runs a `:command`; false means leave.
    fn command(&mut self, cmd: &str) -> bool {
        match cmd {
            "help" | "h" | "?" => {
                let history = self.history.as_ref().map_or_else(
                    || "not saved".to_string(),
                    |p| format!("saved in {}", p.display()),
                );
                self.say(&help_text(&history));
            }
            "tools" => self.say(&self.tools_text()),
            "reset" => {
                let killed = self.rt.block_on(self.registry.shutdown(&self.session));
                self.say(if killed > 0 {
                    "kernel reset: its state is gone; the next cell starts a fresh kernel"
                } else {
                    "no kernel running; the next cell starts a fresh one"
                });
            }
            "quit" | "q" | "exit" => return false,
            other => self.say(&format!(
                "unknown command :{other}; :help lists the commands"
            )),
        }
        true
    }

    /// The enabled tools with their signatures.
    fn tools_text(&self) -> String {
        let tools = self.registry.tools();
        let mut out = String::new();
        for name in &self.registry.options().tools {
            if let Some(t) = tools.get(name) {
                out.push_str(&toolcell_stubs::signature(t.as_ref()));
                out.push_str("\n    ");
                out.push_str(toolcell_stubs::summary(t.as_ref()));
                out.push('\n');
            }
        }
        if out.is_empty() {
            return "no tools are enabled ([tools] enabled, --tools)".to_string();
        }
        out.push_str("(call them directly in a cell: they are already imported)");
        out
    }

    /// Runs one cell with live output, Ctrl-C interrupting it, then reports.
    fn run_cell(&self, code: String) {
        let at_line_start = Arc::new(AtomicBool::new(true));
        let sink_flag = Arc::clone(&at_line_start);
        let req = ExecuteRequest::new(code)
            .owner(self.session.clone())
            .live(Arc::new(move |stream: StreamKind, chunk: &str| {
                if chunk.is_empty() {
                    return;
                }
                match stream {
                    StreamKind::Stdout => {
                        let mut o = std::io::stdout().lock();
                        let _ = o.write_all(chunk.as_bytes());
                        let _ = o.flush();
                    }
                    StreamKind::Stderr => {
                        let mut e = std::io::stderr().lock();
                        let _ = e.write_all(chunk.as_bytes());
                        let _ = e.flush();
                    }
                }
                sink_flag.store(chunk.ends_with('\n'), Ordering::Relaxed);
            }));
        let registry = &self.registry;
        let session = self.session.as_str();
        let (result, interrupted) = self.rt.block_on(async move {
            use tokio::signal::unix::{SignalKind, signal};
            // A listener made now sees only SIGINTs from now on, not a
            // Ctrl-C typed between two cells.
            let mut sigint = signal(SignalKind::interrupt()).ok();
            let exec = registry.execute(req);
            tokio::pin!(exec);
            let mut interrupted = false;
            loop {
                let ctrl_c = async {
                    match sigint.as_mut() {
                        Some(s) => s.recv().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    result = &mut exec => return (result, interrupted),
                    Some(()) = ctrl_c => {
                        interrupted = true;
                        registry.interrupt(session);
                    }
                }
            }
        });
        // The terminal echoed ^C where the cursor was: start a new line.
        let fresh_line = at_line_start.load(Ordering::Relaxed) && !interrupted;
        self.report(&result, fresh_line);
    }

    /// The traceback (not streamed live), error/hint/warning lines and the
    /// colored status line.
    fn report(&self, result: &ExecuteResult, fresh_line: bool) {
        let mut text = String::new();
        if !fresh_line {
            text.push('\n');
        }
        if let Some(tb) = traceback_of(result) {
            let mut e = std::io::stderr().lock();
            let _ = e.write_all(text.as_bytes());
            let _ = e.write_all(tb.as_bytes());
            if !tb.ends_with('\n') {
                let _ = e.write_all(b"\n");
            }
            let _ = e.flush();
            text.clear();
        }
        let (code, label) = status_style(result.status);
        text.push_str(&self.paint(code, &status_line(result, label)));
        text.push('\n');
        for (name, code, value) in [
            ("error", "31", &result.error),
            ("hint", "36", &result.hint),
            ("warning", "33", &result.warning),
        ] {
            if let Some(v) = value {
                text.push_str(&self.paint(code, &format!("{name}:")));
                text.push(' ');
                text.push_str(v);
                text.push('\n');
            }
        }
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(text.as_bytes());
        let _ = o.flush();
    }

    /// `s` in the ANSI color `code`, when colors are on.
    fn paint(&self, code: &str, s: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }

    /// A line of the REPL's own on stdout.
    fn say(&self, s: &str) {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "{s}");
        let _ = o.flush();
    }

    /// A warning about the REPL itself on stderr.
    fn warn(&self, s: &str) {
        let mut e = std::io::stderr().lock();
        let _ = writeln!(e, "toolcell: warning: {s}");
    }
}

/// The REPL's one line editor (see the module doc for why one).
struct LineReader {
    editor: Editor<(), DefaultHistory>,
    /// tokio's SIGINT action (`None`: it could not be read).
    sigint: Option<SigAction>,
}

impl LineReader {
    fn readline(&mut self, prompt: &str) -> rustyline::Result<String> {
        self.editor.readline(prompt)
    }

    /// Runs `cell` with SIGINT going to tokio's listener (Ctrl-C interrupts
    /// the cell), then gives it back to the editor.
    fn run<T>(&mut self, cell: impl FnOnce() -> T) -> T {
        use nix::sys::signal::{Signal, sigaction};
        // SAFETY: both actions were installed in this process by tokio and
        // by rustyline, for handlers that live as long as the process.
        let editors = self
            .sigint
            .and_then(|tokio| unsafe { sigaction(Signal::SIGINT, &tokio) }.ok());
        let out = cell();
        if let Some(editors) = editors {
            // SAFETY: as above.
            let _ = unsafe { sigaction(Signal::SIGINT, &editors) };
        }
        out
    }
}

/// The SIGINT action in place now (tokio's, once its listener exists),
/// read by swapping in "ignore" and putting it straight back.
fn current_sigint() -> Option<SigAction> {
    use nix::sys::signal::{SaFlags, SigHandler, SigSet, Signal, sigaction};
    let ignore = SigAction::new(SigHandler::SigIgn, SaFlags::empty(), SigSet::empty());
    // SAFETY: the action read is put back unchanged at once; for that
    // instant a SIGINT is ignored, which is what the REPL does with a stray
    // one between lines anyway.
    let now = unsafe { sigaction(Signal::SIGINT, &ignore) }.ok()?;
    // SAFETY: as above.
    unsafe { sigaction(Signal::SIGINT, &now) }.ok()?;
    Some(now)
}

/// Colors on unless stdout is not a terminal or `NO_COLOR` is set (and not
/// empty, as no-color.org says).
fn use_color() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The ANSI color and word of a status.
fn status_style(status: Status) -> (&'static str, &'static str) {
    match status {
        Status::Success => ("32", "success"),
        Status::Timeout => ("33", "timeout"),
        Status::Interrupted => ("33", "interrupted"),
        Status::Error => ("31", "error"),
        Status::Refused => ("31", "refused"),
    }
}

/// `[success] 0.02s · cell 3 · 1 tool call · …`
fn status_line(result: &ExecuteResult, label: &str) -> String {
    let mut s = format!("[{label}] {:.2}s", result.duration_seconds);
    let k = &result.kernel;
    if k.execution_count > 0 {
        s.push_str(&format!(" · cell {}", k.execution_count));
    }
    if result.tool_calls_made > 0 {
        s.push_str(&format!(
            " · {} tool call{}",
            result.tool_calls_made,
            if result.tool_calls_made == 1 { "" } else { "s" }
        ));
    }
    if let Some(f) = result.files.as_ref().filter(|f| f.changed()) {
        s.push_str(&format!(" · {}", f.summary()));
    }
    if let Some(read) = result.files.as_ref().and_then(|f| f.read_brief()) {
        s.push_str(&format!(" · {read}"));
    }
    if k.state_reset {
        s.push_str(" · fresh kernel (earlier state was reset)");
    }
    if k.ended == Some(true) {
        s.push_str(" · the kernel exited; the next cell starts a fresh one (Ctrl-D leaves)");
    }
    s
}

/// The traceback part of a result's output (it is not streamed live).
fn traceback_of(result: &ExecuteResult) -> Option<&str> {
    let (_, tail) = result.output.split_once("\n--- stderr ---\n")?;
    let start = tail
        .find("Traceback (most recent call last):")
        .or_else(|| tail.find("  File \"<cell-"))?;
    Some(&tail[start..])
}

fn help_text(history: &str) -> String {
    format!(
        "Type Python: it runs in this session's persistent kernel, so variables and imports \
         stay.\n\
         \n\
         Input\n  \
         A complete statement runs at once. A line ending with ':' (def f():, for x in xs:)\n  \
         or starting with '@' opens a block that continues at '... ' until a blank line.\n  \
         A line ending with '\\', or with an unclosed bracket or triple-quoted string,\n  \
         continues until it is closed.\n\
         \n\
         Keys\n  \
         Ctrl-C   interrupt the running cell (the kernel and its state are kept);\n           \
         at the prompt, discard the input\n  \
         Ctrl-D   leave (a pending block runs first; the kernel is shut down)\n  \
         Up, Ctrl-R  history ({history})\n\
         \n\
         Commands\n  \
         :reset   discard the kernel and its state; the next cell starts a fresh one\n  \
         :tools   the tools cells can call, with their signatures\n  \
         :help    this text\n  \
         :quit    leave, like Ctrl-D"
    )
}

/// `$XDG_DATA_HOME/toolcell/history`, else `~/.local/share/toolcell/history`.
fn history_path() -> Option<PathBuf> {
    let abs = |v: std::ffi::OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").and_then(abs) {
        return Some(x.join("toolcell/history"));
    }
    std::env::var_os("HOME")
        .and_then(abs)
        .map(|h| h.join(".local/share/toolcell/history"))
}

/// Creates the history directory (0700) and file (0600); an existing file
/// is made 0600 again.
fn prepare_history(path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
}

/// What [`scan`] learned about a piece of source.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Scan {
    /// `(`, `[` or `{` still open.
    depth: usize,
    /// Inside a triple-quoted string.
    open_string: bool,
    /// The text ends with a `\` line continuation (in code, or in a
    /// single-quoted string).
    backslash: bool,
    /// Some line at bracket depth 0 ends with `:` (a compound statement
    /// header) or starts with `@` (a decorator).
    compound: bool,
}

/// Tokenizes just enough Python to tell brackets, strings, comments and
/// line ends apart. Never fails: source Python would reject is scanned as
/// well as it can and left to the kernel to report.
fn scan(src: &str) -> Scan {
    let mut s = Scan::default();
    // (quote char, triple-quoted)
    let mut quote: Option<(char, bool)> = None;
    // First and last significant characters of the logical line.
    let mut first: Option<char> = None;
    let mut last: Option<char> = None;
    let mut chars = src.chars().peekable();
    let end_line = |s: &mut Scan, first: &mut Option<char>, last: &mut Option<char>| {
        if s.depth == 0 && (*last == Some(':') || *first == Some('@')) {
            s.compound = true;
        }
        *first = None;
        *last = None;
    };
    while let Some(c) = chars.next() {
        if let Some((q, triple)) = quote {
            match c {
                // An escape: the next character (a newline too) belongs to
                // the string and is consumed here; at the very end of the
                // text the string continues on the next line.
                '\\' if chars.next().is_none() => s.backslash = true,
                '\n' if !triple => {
                    // An unterminated string: Python reports it.
                    quote = None;
                    end_line(&mut s, &mut first, &mut last);
                }
                c if c == q => {
                    if !triple {
                        quote = None;
                    } else if chars.peek() == Some(&q) {
                        chars.next();
                        if chars.peek() == Some(&q) {
                            chars.next();
                            quote = None;
                        }
                    }
                }
                _ => {}
            }
            continue;
        }
        match c {
            '#' => {
                while chars.peek().is_some_and(|&n| n != '\n') {
                    chars.next();
                }
            }
            '\\' => match chars.peek() {
                // A joined line: the logical line goes on.
                Some('\n') => {
                    chars.next();
                }
                None => s.backslash = true,
                Some(_) => {
                    first.get_or_insert(c);
                    last = Some(c);
                }
            },
            '\'' | '"' => {
                let triple = {
                    let mut ahead = chars.clone();
                    ahead.next() == Some(c) && ahead.next() == Some(c)
                };
                if triple {
                    chars.next();
                    chars.next();
                }
                quote = Some((c, triple));
                first.get_or_insert(c);
                last = Some(c);
            }
            '(' | '[' | '{' => {
                s.depth += 1;
                first.get_or_insert(c);
                last = Some(c);
            }
            ')' | ']' | '}' => {
                s.depth = s.depth.saturating_sub(1);
                first.get_or_insert(c);
                last = Some(c);
            }
            '\n' => end_line(&mut s, &mut first, &mut last),
            c if c.is_whitespace() => {}
            c => {
                first.get_or_insert(c);
                last = Some(c);
            }
        }
    }
    if quote.is_none() {
        end_line(&mut s, &mut first, &mut last);
    }
    s.open_string = quote.is_some_and(|(_, triple)| triple);
    s
}

/// Whether the lines typed so far need more before they can run.
///
/// The rule: input with an open bracket, an open triple-quoted string or a
/// trailing `\` always continues (blank lines included). Otherwise, input
/// that holds a block header (a line at bracket depth 0 ending with `:`,
/// comments aside) or a decorator (`@` first) continues until a blank line.
/// Anything else is a complete statement and runs at once — also a one-line
/// compound such as `for i in range(3): print(i)`.
fn needs_more(lines: &[String]) -> bool {
    let s = scan(&lines.join("\n"));
    if s.depth > 0 || s.open_string || s.backslash {
        return true;
    }
    s.compound && !lines.last().is_some_and(|l| l.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn more(lines: &[&str]) -> bool {
        let v: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
        needs_more(&v)
    }

    #[test]
    fn simple_statements_are_complete() {
        assert!(!more(&["x = 1"]));
        assert!(!more(&["print('a:')"]));
        assert!(!more(&["d = {'a': 1}"]));
        assert!(!more(&["x[1:]"]));
        assert!(!more(&["x = 1  # note:"]));
        assert!(!more(&["for i in range(3): print(i)"]));
        assert!(!more(&["s = '''one line'''"]));
        assert!(!more(&["s = 'a\\'b'"]));
    }

    #[test]
    fn headers_continue_until_a_blank_line() {
        assert!(more(&["def f():"]));
        assert!(more(&["def f():", "    return 1"]));
        assert!(!more(&["def f():", "    return 1", ""]));
        assert!(more(&["for i in range(3):  # loop"]));
        assert!(more(&["class A:", "    x = 1", "    def f(self):"]));
        assert!(more(&["@decorator"]));
        assert!(more(&["@decorator", "def f(): pass"]));
        assert!(!more(&["@decorator", "def f(): pass", "  "]));
        assert!(more(&["if (a and", "    b):"]));
        assert!(more(&["if a and \\", "    b:"]));
    }

    #[test]
    fn brackets_strings_and_backslashes_continue() {
        assert!(more(&["x = [1,"]));
        assert!(more(&["x = [1,", ""]));
        assert!(!more(&["x = [1,", "2]"]));
        assert!(more(&["f(a,", "  g(b,"]));
        assert!(more(&["s = '''start"]));
        assert!(more(&["s = '''start", ""]));
        assert!(!more(&["s = '''start", "end'''"]));
        assert!(more(&["s = \"\"\"a \"\" b"]));
        assert!(more(&["x = 1 + \\"]));
        assert!(!more(&["x = 1 + \\", "2"]));
        assert!(more(&["s = 'abc\\"]));
        assert!(!more(&["s = 'abc\\", "def'"]));
        // A bracket or colon in a string or comment counts for nothing.
        assert!(!more(&["s = '(['"]));
        assert!(!more(&["x = 1  # (["]));
        assert!(!more(&["s = \"if x:\""]));
    }

    #[test]
    fn malformed_input_is_left_to_python() {
        // Unterminated single-quoted string, stray closers: complete, so
        // the kernel reports the SyntaxError instead of the REPL waiting.
        assert!(!more(&["s = 'abc"]));
        assert!(!more(&["x = 1)]"]));
        assert!(!more(&["s = 'a", "x = 1"]));
    }

    proptest! {
        #[test]
        fn scan_never_panics(src in ".{0,200}") {
            let _ = scan(&src);
        }

        // Whatever was typed, once no bracket or string is open a blank
        // line ends the input: the REPL never waits forever.
        #[test]
        fn a_blank_line_ends_input_unless_something_is_open(
            lines in proptest::collection::vec("[a-z :()\\[\\]{}'\"#@\\\\ ]{0,12}", 1..6)
        ) {
            let mut with_blank = lines.clone();
            with_blank.push(String::new());
            let s = scan(&with_blank.join("\n"));
            if s.depth == 0 && !s.open_string && !s.backslash {
                prop_assert!(!needs_more(&with_blank));
            } else {
                prop_assert!(needs_more(&with_blank));
            }
        }
    }
}
