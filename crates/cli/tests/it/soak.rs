//! Soak and fault injection (issue 10 part 5): the real `toolcell serve`
//! driven for `TOOLCELL_SOAK_SECS` seconds (default 60) by 16 client
//! threads multiplexed over its one JSON-RPC connection, while a chaos
//! thread SIGKILLs random kernels.
//!
//! Each client owns two sessions and sends random cells from a corpus:
//! normal, failing, printing (a lot, with ANSI and a secret-shaped token),
//! sleeping, tool-calling, crashing three ways, timing out, interrupted,
//! reset, plus invalid requests and unparsable lines. Asserted:
//! - every request gets exactly one response; none for an unknown id, no
//!   duplicate; unparsable lines get exactly one `id: null` error each;
//! - every `execute` result is a well-formed execute result (docs/result.md),
//!   and a JSON-RPC error comes only for the deliberately invalid requests
//!   (with the right code);
//! - the status fits the kind of cell; a cell whose kernel the chaos
//!   thread killed may instead say the kernel died;
//! - no stdout line carries the secret or an ANSI escape;
//! - the host's fd count and RSS stay flat (first vs last quarter after a
//!   warmup);
//! - after stdin EOF `serve` exits 0 and no Python process of this test
//!   remains.
//!
//! `scripts/soak.sh [SECONDS]` runs it long, in release mode; a summary
//! table is printed at the end (visible with `--nocapture`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::process::ChildStdin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use crate::common::{Env, Serve, eventually, fd_count, python_children, rss_kb};
use serde_json::{Value, json};

const CLIENTS: usize = 16;

/// How long a client waits for one response before calling it lost. Far
/// above any cell's timeout: a loaded 2-core machine is slow, never this slow.
const RESPONSE_LIMIT: Duration = Duration::from_secs(240);

/// `interrupt_grace` is roomy: with 16 clients, 16 kernels and other builds
/// the load average on 2 cores reaches 16, and an interrupted cell then
/// sometimes needs over a second to format its traceback and answer (the
/// host would kill the kernel and the interrupt case would lose its state).
const CONFIG: &str = "\
[execution]
timeout = 60
interrupt_grace = 5
kill_grace = 0.5

[kernels]
max_kernels = 16

[daemon]
idle_exit = 60
";

/// Marks every secret a printing cell makes; no stdout line may hold it.
const SECRET_PREFIX: &str = "ghp_SOAK";

/// xorshift64*: deterministic per seed, no dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn range_f(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn alnum(&mut self, n: usize) -> String {
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        (0..n)
            .map(|_| A[self.below(A.len() as u64) as usize] as char)
            .collect()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Kind {
    Normal,
    Failing,
    Printing,
    Sleeping,
    Tools,
    CrashExit,
    CrashSegv,
    CrashKill,
    Timeout,
    Interrupt,
    Reset,
    Sessions,
    Invalid,
    Unparsable,
}

impl Kind {
    const WEIGHTED: [(Kind, u64); 14] = [
        (Kind::Normal, 22),
        (Kind::Failing, 10),
        (Kind::Printing, 12),
        (Kind::Sleeping, 8),
        (Kind::Tools, 12),
        (Kind::CrashExit, 2),
        (Kind::CrashSegv, 2),
        (Kind::CrashKill, 2),
        (Kind::Timeout, 3),
        (Kind::Interrupt, 4),
        (Kind::Reset, 5),
        (Kind::Sessions, 3),
        (Kind::Invalid, 6),
        (Kind::Unparsable, 2),
    ];

    fn pick(rng: &mut Rng) -> Kind {
        let total: u64 = Self::WEIGHTED.iter().map(|w| w.1).sum();
        let mut r = rng.below(total);
        for (k, w) in Self::WEIGHTED {
            if r < w {
                return k;
            }
            r -= w;
        }
        Kind::Normal
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Normal => "normal",
            Kind::Failing => "failing",
            Kind::Printing => "printing",
            Kind::Sleeping => "sleeping",
            Kind::Tools => "tools",
            Kind::CrashExit => "crash-exit",
            Kind::CrashSegv => "crash-segv",
            Kind::CrashKill => "crash-kill9",
            Kind::Timeout => "timeout",
            Kind::Interrupt => "interrupt",
            Kind::Reset => "reset",
            Kind::Sessions => "sessions",
            Kind::Invalid => "invalid",
            Kind::Unparsable => "unparsable",
        }
    }
}

/// What the test records about one answered request.
struct Record {
    kind: Kind,
    /// `success`, …, `rpc-error`, or `died (chaos)`.
    outcome: String,
    latency: Duration,
}

/// One sample of the host's resources.
#[derive(Clone, Copy)]
struct Sample {
    at: Duration,
    fds: usize,
    rss_kb: u64,
    kernels: usize,
}

/// State shared by the clients, the reader, the chaos thread and the sampler.
struct Shared {
    stdin: Mutex<Option<ChildStdin>>,
    /// Request id (serialized) → the client waiting for it.
    pending: Mutex<HashMap<String, usize>>,
    answered: Mutex<HashSet<String>>,
    to_client: Vec<Mutex<mpsc::Sender<Value>>>,
    problems: Mutex<Vec<String>>,
    /// Kernel ids the chaos thread SIGKILLed (recorded before the kill).
    killed: Mutex<HashSet<String>>,
    kills: AtomicU64,
    /// Kernel ids seen in results (a chaos-killed id never seen here was
    /// killed before it said ready).
    seen_kernels: Mutex<HashSet<String>>,
    /// Results saying a kernel was SIGKILLed before it said ready.
    spawn_killed: AtomicU64,
    null_id_errors: AtomicU64,
    unparsable_sent: AtomicU64,
    notifications: AtomicU64,
    responses: AtomicU64,
    stop: AtomicBool,
}

impl Shared {
    fn problem(&self, p: String) {
        eprintln!("soak problem: {p}");
        self.problems.lock().unwrap().push(p);
    }

    fn write_line(&self, line: &str) {
        let mut g = self.stdin.lock().unwrap();
        let stdin = g.as_mut().expect("stdin open while clients run");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request on behalf of `client`; registers the id first so the
    /// reader can never see the response before it knows the id.
    fn send(&self, client: usize, id: &Value, method: &str, params: Value) {
        let key = id.to_string();
        assert!(
            self.pending.lock().unwrap().insert(key, client).is_none(),
            "id reused by the test itself"
        );
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.write_line(&msg.to_string());
    }

    fn chaos_killed(&self, kernel_id: &str) -> bool {
        self.killed.lock().unwrap().contains(kernel_id)
    }
}

/// Reads every stdout line: routes responses to the client that asked and
/// notifications to the client owning the session; flags leaks, unknown
/// ids and duplicates.
fn reader(shared: &Shared, lines: &mpsc::Receiver<String>) {
    while let Ok(line) = lines.recv() {
        if line.contains(SECRET_PREFIX) {
            shared.problem(format!("a secret reached stdout: {}", clip(&line)));
        }
        if line.contains("\\u001b") || line.contains('\u{1b}') {
            shared.problem(format!("an ANSI escape reached stdout: {}", clip(&line)));
        }
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            shared.problem(format!("stdout line is not JSON: {}", clip(&line)));
            continue;
        };
        if let Some(method) = msg.get("method") {
            shared.notifications.fetch_add(1, Ordering::Relaxed);
            if method != "cell/output" {
                shared.problem(format!("unexpected notification: {}", clip(&line)));
                continue;
            }
            let session = msg["params"]["session"].as_str().unwrap_or("");
            match client_of_session(session) {
                Some(c) => {
                    let _ = shared.to_client[c].lock().unwrap().send(msg);
                }
                None => shared.problem(format!(
                    "notification for a session no client owns: {}",
                    clip(&line)
                )),
            }
            continue;
        }
        let Some(id) = msg.get("id") else {
            shared.problem(format!(
                "message with neither id nor method: {}",
                clip(&line)
            ));
            continue;
        };
        shared.responses.fetch_add(1, Ordering::Relaxed);
        if id.is_null() {
            if msg["error"]["code"] == -32700 {
                shared.null_id_errors.fetch_add(1, Ordering::Relaxed);
            } else {
                shared.problem(format!("id null but not a parse error: {}", clip(&line)));
            }
            continue;
        }
        let key = id.to_string();
        let client = shared.pending.lock().unwrap().remove(&key);
        let first = shared.answered.lock().unwrap().insert(key.clone());
        match client {
            Some(c) => {
                let _ = shared.to_client[c].lock().unwrap().send(msg);
            }
            None if !first => {
                shared.problem(format!("duplicate response for id {key}: {}", clip(&line)))
            }
            None => shared.problem(format!("response for an id never sent: {}", clip(&line))),
        }
    }
}

/// Sessions are `c<client>a` and `c<client>b`.
fn client_of_session(s: &str) -> Option<usize> {
    let digits = s.strip_prefix('c')?.strip_suffix(['a', 'b'])?;
    digits.parse().ok().filter(|c| *c < CLIENTS)
}

fn clip(s: &str) -> String {
    if s.len() <= 600 {
        return s.to_string();
    }
    let mut end = 600;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &s[..end], s.len())
}

/// Checks `r` is an execute result (docs/result.md): every required field with
/// its type, optional fields typed when present, nothing else.
fn check_result_shape(r: &Value) -> Result<(), String> {
    let o = r.as_object().ok_or("result is not an object")?;
    let want = |k: &str, ok: fn(&Value) -> bool| -> Result<(), String> {
        match o.get(k) {
            Some(v) if ok(v) => Ok(()),
            Some(v) => Err(format!("field `{k}` has the wrong type: {v}")),
            None => Err(format!("required field `{k}` missing")),
        }
    };
    let maybe = |k: &str, ok: fn(&Value) -> bool| -> Result<(), String> {
        match o.get(k) {
            Some(v) if !ok(v) => Err(format!("field `{k}` has the wrong type: {v}")),
            _ => Ok(()),
        }
    };
    want("status", |v| {
        matches!(
            v.as_str(),
            Some("success" | "error" | "timeout" | "interrupted" | "refused")
        )
    })?;
    want("output", Value::is_string)?;
    want("exit_code", Value::is_i64)?;
    want("tool_calls_made", Value::is_u64)?;
    want("duration_seconds", |v| v.as_f64().is_some_and(|d| d >= 0.0))?;
    want("kernel", Value::is_object)?;
    want("stdout_truncated", Value::is_boolean)?;
    want("stdout_bytes_captured", Value::is_u64)?;
    want("stdout_bytes_total", Value::is_u64)?;
    want("stdout_bytes_omitted", Value::is_u64)?;
    maybe("error", Value::is_string)?;
    maybe("hint", Value::is_string)?;
    maybe("warning", Value::is_string)?;
    maybe("stdout_spill_path", Value::is_string)?;
    maybe("stdin_requested", Value::is_boolean)?;
    maybe("usage", |u| {
        u["cpu_seconds"].is_number() && u["peak_rss_kb"].is_u64()
    })?;
    maybe("display", |d| {
        d.as_array().is_some_and(|a| {
            a.iter()
                .all(|x| x["mime"].is_string() && x["path"].is_string())
        })
    })?;
    maybe("files", |f| {
        f["created"].is_array()
            && f["modified"].is_array()
            && f["deleted"].is_array()
            && f["truncated"].is_boolean()
    })?;
    // `files` is docs/result.md ("files"); the folding counts appear only with
    // `[output] fold`.
    const KNOWN: [&str; 27] = [
        "status",
        "output",
        "exit_code",
        "tool_calls_made",
        "duration_seconds",
        "kernel",
        "error",
        "hint",
        "warning",
        "stdout_truncated",
        "stdout_bytes_captured",
        "stdout_bytes_total",
        "stdout_bytes_omitted",
        "stdout_spill_path",
        "stdin_requested",
        "usage",
        "display",
        "files",
        "stdout_lines_folded",
        "stdout_lines_cut",
        "stderr_lines_folded",
        "stderr_lines_cut",
        "stderr_truncated",
        "stderr_bytes_captured",
        "stderr_bytes_total",
        "stderr_bytes_omitted",
        "stderr_spill_path",
    ];
    if let Some(k) = o.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(format!(
            "field `{k}` is not a result field of docs/result.md"
        ));
    }
    let k = &r["kernel"];
    for (f, ok) in [
        ("id", Value::is_string as fn(&Value) -> bool),
        ("mode", Value::is_string),
        ("python", Value::is_string),
        ("reused", Value::is_boolean),
        ("execution_count", Value::is_u64),
        ("state_reset", Value::is_boolean),
    ] {
        if !k.get(f).is_some_and(ok) {
            return Err(format!("kernel.{f} missing or mistyped: {k}"));
        }
    }
    for f in ["state_kept", "ended"] {
        if k.get(f).is_some_and(|v| !v.is_boolean()) {
            return Err(format!("kernel.{f} mistyped: {k}"));
        }
    }
    let (cap, om, tot) = (
        r["stdout_bytes_captured"].as_u64().unwrap_or(0),
        r["stdout_bytes_omitted"].as_u64().unwrap_or(0),
        r["stdout_bytes_total"].as_u64().unwrap_or(0),
    );
    if cap + om != tot {
        return Err(format!(
            "stdout bytes: captured {cap} + omitted {om} != total {tot}"
        ));
    }
    if r["stdout_truncated"] != (om > 0) {
        return Err("stdout_truncated disagrees with stdout_bytes_omitted".into());
    }
    Ok(())
}

/// The result says the kernel died during (or before) the cell.
fn says_died(r: &Value) -> bool {
    r["status"] == "error"
        && r["exit_code"] == -1
        && r["error"].as_str().is_some_and(|e| e.contains("died"))
}

/// Checks an execute result against what its cell kind must give.
type Check = Box<dyn Fn(&Value) -> Result<(), String>>;

/// One client thread: picks cells until the deadline.
struct Client {
    idx: usize,
    shared: Arc<Shared>,
    rx: mpsc::Receiver<Value>,
    rng: Rng,
    n: u64,
    /// Sessions that got at least one execute result.
    had_cell: HashSet<String>,
    records: Vec<Record>,
}

impl Client {
    fn next_id(&mut self) -> Value {
        self.n += 1;
        // Mixed id types: strings and numbers, both must round-trip.
        if self.n.is_multiple_of(2) {
            json!(format!("c{}-{}", self.idx, self.n))
        } else {
            json!(self.idx as u64 * 10_000_000 + self.n)
        }
    }

    /// Waits for the response with `id`; notifications are passed to
    /// `on_note` (which returns true to stop waiting early, giving `None`).
    fn wait(&self, id: &Value, mut on_note: impl FnMut(&Value) -> bool) -> Option<Value> {
        let deadline = Instant::now() + RESPONSE_LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(m) if m.get("method").is_some() => {
                    if on_note(&m) {
                        return None;
                    }
                }
                Ok(m) if m["id"] == *id => return Some(m),
                Ok(m) => self.shared.problem(format!(
                    "client {} got a response it was not waiting for (wanted {id}): {}",
                    self.idx,
                    clip(&m.to_string())
                )),
                Err(_) => {
                    self.shared.problem(format!(
                        "client {}: no response for id {id} within {RESPONSE_LIMIT:?}",
                        self.idx
                    ));
                    return Some(Value::Null);
                }
            }
        }
    }

    fn run(mut self, deadline: Instant) -> Vec<Record> {
        while Instant::now() < deadline && !self.shared.stop.load(Ordering::Relaxed) {
            let kind = Kind::pick(&mut self.rng);
            let t0 = Instant::now();
            let outcome = self.one(kind);
            self.records.push(Record {
                kind,
                outcome,
                latency: t0.elapsed(),
            });
        }
        self.records
    }

    fn session(&mut self) -> String {
        let s = if self.rng.below(5) == 0 { 'b' } else { 'a' };
        format!("c{}{s}", self.idx)
    }

    /// Sends one request of `kind`, checks its response; returns the outcome.
    fn one(&mut self, kind: Kind) -> String {
        let id = self.next_id();
        let n = self.n;
        let session = self.session();
        match kind {
            Kind::Unparsable => {
                let line = ["{not json", "{\"jsonrpc\":\"2.0\",\"id\":", "\u{1}\u{2}"]
                    [self.rng.below(3) as usize];
                self.shared.unparsable_sent.fetch_add(1, Ordering::Relaxed);
                self.shared.write_line(line);
                "sent (no id)".into()
            }
            Kind::Invalid => {
                let cases: [(&str, Value, i64); 5] = [
                    ("no_such_method", json!({}), -32601),
                    ("execute", json!({"code": 5, "session": session}), -32602),
                    ("execute", json!({"session": session}), -32602),
                    ("execute", json!({"code": "1", "timeout": -1}), -32602),
                    ("interrupt", json!({"session": 7}), -32602),
                ];
                let (method, params, code) = cases[self.rng.below(5) as usize].clone();
                self.shared.send(self.idx, &id, method, params);
                let r = self.wait(&id, |_| false).unwrap_or(Value::Null);
                if r.is_null() {
                    return "lost".into();
                }
                if r["error"]["code"] != code || !r["error"]["message"].is_string() {
                    self.shared.problem(format!(
                        "invalid {method} request wanted error {code}, got {}",
                        clip(&r.to_string())
                    ));
                }
                "rpc-error".into()
            }
            Kind::Sessions => {
                self.shared.send(self.idx, &id, "sessions", json!({}));
                let r = self.wait(&id, |_| false).unwrap_or(Value::Null);
                if r.is_null() {
                    return "lost".into();
                }
                let ok = r["result"]["sessions"].as_array().is_some_and(|a| {
                    a.len() <= 16 && a.iter().all(|s| s["pid"].is_i64() || s["pid"].is_u64())
                });
                if !ok {
                    self.shared
                        .problem(format!("bad sessions result: {}", clip(&r.to_string())));
                }
                "result".into()
            }
            Kind::Interrupt => self.interrupt_cell(&id, &session),
            _ => {
                let (params, check) = self.cell(kind, n, &session);
                self.shared.send(self.idx, &id, "execute", params);
                let r = self.wait(&id, |_| false).unwrap_or(Value::Null);
                self.judge(kind, &session, &r, check)
            }
        }
    }

    /// The execute params for a cell of `kind` and a check of its result.
    fn cell(&mut self, kind: Kind, n: u64, session: &str) -> (Value, Check) {
        let mut p = json!({"session": session});
        let check: Check = match kind {
            Kind::Normal => {
                let (a, b) = (self.rng.below(100_000), self.rng.below(100_000));
                p["code"] = json!(format!("x = {a}\ny = {b}\nx * y"));
                let want = format!("{}\n", a * b);
                Box::new(move |r| {
                    expect_status(r, "success")?;
                    expect_eq(&r["output"], &json!(want))
                })
            }
            Kind::Failing => {
                p["code"] = json!(format!("def f():\n    raise ValueError('boom-{n}')\nf()"));
                let want = format!("ValueError: boom-{n}");
                Box::new(move |r| {
                    expect_status(r, "error")?;
                    expect_eq(&r["exit_code"], &json!(1))?;
                    expect_contains(r, &want)
                })
            }
            Kind::Printing => {
                let secret = format!("{SECRET_PREFIX}{}", self.rng.alnum(32));
                // Mostly under the 50 000-byte cap, sometimes far over it.
                let lines = if self.rng.below(8) == 0 {
                    2_000 + self.rng.below(8_000)
                } else {
                    10 + self.rng.below(400)
                };
                let to_err = self.rng.below(4) == 0;
                p["code"] = json!(format!(
                    "import sys\n\
                     tok = '{secret}'\n\
                     print('first token: ' + tok)\n\
                     for i in range({lines}):\n    \
                         print('\\x1b[1;31mline\\x1b[0m', i, '\\x1b]0;title\\x07' + 'x' * 60)\n\
                     print('\\r50%\\r100% done')\n\
                     print('last token: ' + tok)\n\
                     {}",
                    if to_err {
                        "print('err token: ' + tok, file=sys.stderr)"
                    } else {
                        ""
                    }
                ));
                if self.rng.below(2) == 0 {
                    p["stream"] = json!(true);
                }
                let big = lines > 1_000;
                Box::new(move |r| {
                    expect_status(r, "success")?;
                    let out = r["output"].as_str().unwrap_or("");
                    if out.contains(SECRET_PREFIX) || out.contains('\u{1b}') {
                        return Err("secret or ANSI escape in output".into());
                    }
                    for want in [
                        "first token: «redacted:",
                        "last token: «redacted:",
                        "line 0 x",
                        "100% done\n",
                    ] {
                        if !out.contains(want) {
                            return Err(format!("output lacks {want:?}"));
                        }
                    }
                    if to_err && !out.contains("\n--- stderr ---\nerr token: «redacted:") {
                        return Err("stderr part missing or unredacted".into());
                    }
                    if big {
                        expect_eq(&r["stdout_truncated"], &json!(true))?;
                        let path = r["stdout_spill_path"].as_str().ok_or("no spill path")?;
                        let spilled = std::fs::read_to_string(path)
                            .map_err(|e| format!("spill file {path}: {e}"))?;
                        if spilled.contains(SECRET_PREFIX) || !spilled.contains("«redacted:") {
                            return Err("spill file holds the secret or no mask".into());
                        }
                    }
                    Ok(())
                })
            }
            Kind::Sleeping => {
                let secs = self.rng.range_f(0.05, 1.5);
                p["code"] = json!(format!(
                    "import time\ntime.sleep({secs:.3})\nprint('slept')"
                ));
                Box::new(|r| {
                    expect_status(r, "success")?;
                    expect_eq(&r["output"], &json!("slept\n"))
                })
            }
            Kind::Tools => {
                let file = format!("soak/c{}.txt", self.idx);
                p["code"] = json!(format!(
                    "w = write_file('{file}', 'hello-{n}\\n')\n\
                     t = read_file('{file}')\n\
                     o = terminal('echo tool-{n}')\n\
                     print(w['bytes_written'], 'hello-{n}' in t['content'], o['output'].strip(), o['exit_code'])"
                ));
                let want = format!("{} True tool-{n} 0\n", format!("hello-{n}\n").len());
                Box::new(move |r| {
                    expect_status(r, "success")?;
                    expect_eq(&r["tool_calls_made"], &json!(3))?;
                    expect_eq(&r["output"], &json!(want))
                })
            }
            Kind::CrashExit | Kind::CrashSegv | Kind::CrashKill => {
                p["code"] = json!(match kind {
                    Kind::CrashExit => "import os\nprint('exiting', flush=True)\nos._exit(3)",
                    Kind::CrashSegv => "import ctypes\nctypes.string_at(0)",
                    _ => "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
                });
                Box::new(|r| {
                    if !says_died(r) {
                        return Err("a crashing cell must say the kernel died".into());
                    }
                    expect_eq(&r["kernel"]["ended"], &json!(true))
                })
            }
            Kind::Timeout => {
                p["timeout"] = json!(1.5);
                p["code"] = json!("import time\ntime.sleep(60)");
                Box::new(|r| {
                    expect_status(r, "timeout")?;
                    expect_eq(&r["exit_code"], &json!(-1))
                })
            }
            Kind::Reset => {
                p["reset"] = json!(true);
                p["code"] = json!("print('fresh', 'v' in globals())\nv = 1");
                let had = self.had_cell.contains(session);
                Box::new(move |r| {
                    expect_status(r, "success")?;
                    expect_eq(&r["output"], &json!("fresh False\n"))?;
                    if had {
                        expect_eq(&r["kernel"]["state_reset"], &json!(true))?;
                    }
                    expect_eq(&r["kernel"]["reused"], &json!(false))
                })
            }
            Kind::Interrupt | Kind::Sessions | Kind::Invalid | Kind::Unparsable => {
                unreachable!("not a plain cell")
            }
        };
        (p, check)
    }

    /// Checks an execute response; returns the outcome for the table.
    fn judge(&mut self, kind: Kind, session: &str, r: &Value, check: Check) -> String {
        if r.is_null() {
            return "lost".into();
        }
        let Some(res) = r.get("result") else {
            self.shared.problem(format!(
                "{}: JSON-RPC error for a valid request: {}",
                kind.name(),
                clip(&r.to_string())
            ));
            return "rpc-error".into();
        };
        if let Err(e) = check_result_shape(res) {
            self.shared.problem(format!(
                "{}: malformed result ({e}): {}",
                kind.name(),
                clip(&r.to_string())
            ));
            return "malformed".into();
        }
        self.had_cell.insert(session.to_string());
        let kid = res["kernel"]["id"].as_str().unwrap_or("");
        if !kid.is_empty() {
            self.shared
                .seen_kernels
                .lock()
                .unwrap()
                .insert(kid.to_string());
        }
        if says_died(res) && self.shared.chaos_killed(kid) {
            return "died (chaos)".into();
        }
        // The chaos thread can kill a kernel before it says ready ("killed
        // by SIGKILL before saying ready", or "exited before reading its
        // first request" when the hello write hit a dead pipe); the cell
        // then never had a kernel (no id). Counted, and checked at the end
        // against the chaos kills of kernels no result ever named.
        if kid.is_empty()
            && res["status"] == "error"
            && res["error"]
                .as_str()
                .is_some_and(|e| e.contains("did not start") && e.contains("none of the code ran"))
        {
            self.shared.spawn_killed.fetch_add(1, Ordering::Relaxed);
            return "spawn killed (chaos)".into();
        }
        if let Err(e) = check(res) {
            self.shared.problem(format!(
                "{} cell in {session}: {e}: {}",
                kind.name(),
                clip(&r.to_string())
            ));
        }
        res["status"].as_str().unwrap_or("?").to_string()
    }

    /// Starts a long sleep with live output, interrupts it once it runs.
    fn interrupt_cell(&mut self, id: &Value, session: &str) -> String {
        let params = json!({
            "session": session,
            "stream": true,
            "code": "import time\nprint('sleeping', flush=True)\ntime.sleep(60)\nprint('woke')",
        });
        self.shared.send(self.idx, id, "execute", params);
        // Wait for the cell's first live chunk (it is running), or 15 s if
        // the chunk was dropped (a full queue drops live chunks).
        let started = Instant::now();
        let mut running = false;
        let mut early = None;
        while !running && started.elapsed() < Duration::from_secs(15) {
            match self.rx.recv_timeout(Duration::from_millis(200)) {
                Ok(m) if m.get("method").is_some() => {
                    running = m["params"]["session"] == session
                        && m["params"]["chunk"]
                            .as_str()
                            .is_some_and(|c| c.contains("sleeping"));
                }
                Ok(m) if m["id"] == *id => {
                    early = Some(m);
                    break;
                }
                Ok(m) => self.shared.problem(format!(
                    "client {} got a stray response: {}",
                    self.idx,
                    clip(&m.to_string())
                )),
                Err(_) => {}
            }
        }
        let mut resp = early;
        // Interrupt (again every 2 s while the cell has not answered: an
        // interrupt before the cell was queued reaches nothing).
        while resp.is_none() {
            let iid = self.next_id();
            self.shared
                .send(self.idx, &iid, "interrupt", json!({"session": session}));
            let deadline = Instant::now() + Duration::from_secs(2);
            let mut got_iid = false;
            // Until this interrupt is answered, and then for the rest of the
            // 2 s or until the cell answers.
            while !(got_iid && (resp.is_some() || Instant::now() >= deadline)) {
                let wait = if got_iid {
                    deadline.saturating_duration_since(Instant::now())
                } else {
                    RESPONSE_LIMIT
                };
                match self.rx.recv_timeout(wait) {
                    Ok(m) if m.get("method").is_some() => {}
                    Ok(m) if m["id"] == iid => {
                        got_iid = true;
                        let ok = m["result"]["session"] == session
                            && m["result"]["interrupted"].as_u64().is_some_and(|n| n <= 1);
                        if !ok {
                            self.shared
                                .problem(format!("bad interrupt result: {}", clip(&m.to_string())));
                        }
                    }
                    Ok(m) if m["id"] == *id => resp = Some(m),
                    Ok(m) => self.shared.problem(format!(
                        "client {} got a stray response: {}",
                        self.idx,
                        clip(&m.to_string())
                    )),
                    Err(_) if got_iid => {}
                    Err(_) => {
                        self.shared.problem(format!(
                            "client {}: interrupt {iid} unanswered within {RESPONSE_LIMIT:?}",
                            self.idx
                        ));
                        return "lost".into();
                    }
                }
            }
        }
        let r = resp.unwrap_or(Value::Null);
        self.judge(
            Kind::Interrupt,
            session,
            &r,
            Box::new(|r| {
                expect_status(r, "interrupted")?;
                expect_eq(&r["exit_code"], &json!(-1))?;
                if r["output"].as_str().is_some_and(|o| o.contains("woke")) {
                    return Err("the interrupted cell ran on".into());
                }
                expect_eq(&r["kernel"]["state_kept"], &json!(true))
            }),
        )
    }
}

fn expect_status(r: &Value, want: &str) -> Result<(), String> {
    if r["status"] == want {
        Ok(())
    } else {
        Err(format!("status {} where {want:?} was due", r["status"]))
    }
}

fn expect_eq(got: &Value, want: &Value) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("got {got}, wanted {want}"))
    }
}

fn expect_contains(r: &Value, want: &str) -> Result<(), String> {
    if r["output"].as_str().is_some_and(|o| o.contains(want)) {
        Ok(())
    } else {
        Err(format!("output lacks {want:?}"))
    }
}

/// SIGKILLs a random kernel of `serve_pid` every 0.5–4 s until stopped;
/// records the kernel id (its directory name `k-…`) before the kill.
fn chaos(shared: &Shared, serve_pid: i32, mut rng: Rng) {
    while !shared.stop.load(Ordering::Relaxed) {
        let pause = Duration::from_secs_f64(rng.range_f(0.5, 4.0));
        let until = Instant::now() + pause;
        while Instant::now() < until && !shared.stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        let kids = python_children(serve_pid);
        if kids.is_empty() {
            continue;
        }
        let pid = kids[rng.below(kids.len() as u64) as usize];
        let Some(kid) = kernel_id_of(pid) else {
            continue;
        };
        shared.killed.lock().unwrap().insert(kid);
        if nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .is_ok()
        {
            shared.kills.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The kernel id of a kernel process: the `k-…` directory of its runner.py.
fn kernel_id_of(pid: i32) -> Option<String> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    cmdline
        .split(|&b| b == 0)
        .map(String::from_utf8_lossy)
        .find(|a| a.ends_with("/runner.py"))
        .and_then(|a| {
            std::path::Path::new(a.as_ref())
                .parent()
                .and_then(|d| d.file_name())
                .map(|d| d.to_string_lossy().into_owned())
        })
        .filter(|d| d.starts_with("k-"))
}

fn sampler(shared: &Shared, serve_pid: i32, t0: Instant) -> Vec<Sample> {
    let mut samples = Vec::new();
    while !shared.stop.load(Ordering::Relaxed) {
        if let (Some(fds), Some(rss)) = (fd_count(serve_pid), rss_kb(serve_pid)) {
            samples.push(Sample {
                at: t0.elapsed(),
                fds,
                rss_kb: rss,
                kernels: python_children(serve_pid).len(),
            });
        }
        // The sampling period (throttling, not synchronisation).
        std::thread::sleep(Duration::from_millis(500));
    }
    samples
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = xs.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 { 0.0 } else { s / n as f64 }
}

#[test]
fn soak_serve_with_16_clients_and_chaos_kills() {
    let secs: u64 = std::env::var("TOOLCELL_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let seed: u64 = std::env::var("TOOLCELL_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!(
        "soak: {secs}s, {CLIENTS} clients, seed {seed} (TOOLCELL_SOAK_SEED to replay the choices)"
    );

    let env = Env::with_config(CONFIG);
    std::fs::create_dir(env.path().join("soak")).unwrap();
    let mut serve = Serve::start(&env, &[]);
    let serve_pid = serve.pid();
    let (stdin, lines) = serve.take_io();

    let mut rxs = Vec::new();
    let mut txs = Vec::new();
    for _ in 0..CLIENTS {
        let (tx, rx) = mpsc::channel();
        txs.push(Mutex::new(tx));
        rxs.push(rx);
    }
    let shared = Arc::new(Shared {
        stdin: Mutex::new(Some(stdin)),
        pending: Mutex::new(HashMap::new()),
        answered: Mutex::new(HashSet::new()),
        to_client: txs,
        problems: Mutex::new(Vec::new()),
        killed: Mutex::new(HashSet::new()),
        kills: AtomicU64::new(0),
        seen_kernels: Mutex::new(HashSet::new()),
        spawn_killed: AtomicU64::new(0),
        null_id_errors: AtomicU64::new(0),
        unparsable_sent: AtomicU64::new(0),
        notifications: AtomicU64::new(0),
        responses: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });

    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(secs);
    let reader_t = {
        let sh = Arc::clone(&shared);
        std::thread::spawn(move || reader(&sh, &lines))
    };
    let sampler_t = {
        let sh = Arc::clone(&shared);
        std::thread::spawn(move || sampler(&sh, serve_pid, t0))
    };
    let chaos_t = {
        let sh = Arc::clone(&shared);
        let rng = Rng::new(seed ^ 0xC4A0_5C4A_05C4_A05C);
        std::thread::spawn(move || chaos(&sh, serve_pid, rng))
    };
    let clients: Vec<_> = rxs
        .into_iter()
        .enumerate()
        .map(|(idx, rx)| {
            let client = Client {
                idx,
                shared: Arc::clone(&shared),
                rx,
                rng: Rng::new(seed.wrapping_add((idx as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))),
                n: 0,
                had_cell: HashSet::new(),
                records: Vec::new(),
            };
            std::thread::spawn(move || client.run(deadline))
        })
        .collect();

    let mut records = Vec::new();
    for c in clients {
        records.extend(c.join().expect("client thread panicked"));
    }
    let elapsed = t0.elapsed();
    shared.stop.store(true, Ordering::Relaxed);
    chaos_t.join().unwrap();
    let samples = sampler_t.join().unwrap();

    // Every unparsable line got its own `id: null` error.
    let sent = shared.unparsable_sent.load(Ordering::Relaxed);
    let all_parse_errors = eventually(Duration::from_secs(10), || {
        shared.null_id_errors.load(Ordering::Relaxed) >= sent
    });
    let null_errors = shared.null_id_errors.load(Ordering::Relaxed);

    // EOF: serve exits 0 and leaves no Python process behind.
    shared.stdin.lock().unwrap().take();
    let status = serve.wait(Duration::from_secs(60));
    reader_t.join().unwrap();
    let leftovers_gone = eventually(Duration::from_secs(10), || env.python_pids().is_empty());
    let leftovers = env.python_pids();

    // ---- summary ----
    let mut table: BTreeMap<Kind, BTreeMap<String, u64>> = BTreeMap::new();
    let mut max_lat: BTreeMap<Kind, Duration> = BTreeMap::new();
    let mut outcomes: Vec<String> = Vec::new();
    for r in &records {
        *table
            .entry(r.kind)
            .or_default()
            .entry(r.outcome.clone())
            .or_default() += 1;
        let m = max_lat.entry(r.kind).or_default();
        *m = (*m).max(r.latency);
        if !outcomes.contains(&r.outcome) {
            outcomes.push(r.outcome.clone());
        }
    }
    outcomes.sort();
    let warm = Duration::from_secs_f64((secs as f64 * 0.15).min(60.0));
    let steady: Vec<Sample> = samples.iter().copied().filter(|s| s.at >= warm).collect();
    let q = (steady.len() / 4).max(1);
    let (first, last) = (
        &steady[..q.min(steady.len())],
        &steady[steady.len().saturating_sub(q)..],
    );
    let fd_first = mean(first.iter().map(|s| s.fds as f64));
    let fd_last = mean(last.iter().map(|s| s.fds as f64));
    let rss_first = mean(first.iter().map(|s| s.rss_kb as f64));
    let rss_last = mean(last.iter().map(|s| s.rss_kb as f64));
    let k_first = mean(first.iter().map(|s| s.kernels as f64));
    let k_last = mean(last.iter().map(|s| s.kernels as f64));
    let fd_max = samples.iter().map(|s| s.fds).max().unwrap_or(0);
    let rss_max = samples.iter().map(|s| s.rss_kb).max().unwrap_or(0);
    let responses = shared.responses.load(Ordering::Relaxed);
    let mut out = String::new();
    out.push_str(&format!(
        "\nsoak summary: {:.0}s, {CLIENTS} clients, seed {seed}\n",
        elapsed.as_secs_f64()
    ));
    out.push_str(&format!("{:<12}{:>7}", "kind", "total"));
    let width = |o: &str| o.chars().count().max(6) + 2;
    for o in &outcomes {
        out.push_str(&format!("{o:>w$}", w = width(o)));
    }
    out.push_str(&format!("{:>12}\n", "max lat s"));
    for (k, row) in &table {
        out.push_str(&format!("{:<12}{:>7}", k.name(), row.values().sum::<u64>()));
        for o in &outcomes {
            out.push_str(&format!(
                "{:>w$}",
                row.get(o).copied().unwrap_or(0),
                w = width(o)
            ));
        }
        out.push_str(&format!("{:>12.2}\n", max_lat[k].as_secs_f64()));
    }
    out.push_str(&format!(
        "requests: {} (plus interrupts), responses: {} ({:.1}/s), notifications: {}, unparsable lines: {sent} → {null_errors} parse errors\n",
        records.len(),
        responses,
        responses as f64 / elapsed.as_secs_f64(),
        shared.notifications.load(Ordering::Relaxed),
    ));
    out.push_str(&format!(
        "chaos kills: {}\n",
        shared.kills.load(Ordering::Relaxed)
    ));
    out.push_str(&format!(
        "host fds: first quarter {fd_first:.1}, last quarter {fd_last:.1}, max {fd_max} (after {warm:?} warmup, {} samples)\n",
        steady.len()
    ));
    out.push_str(&format!(
        "host RSS KiB: first quarter {rss_first:.0}, last quarter {rss_last:.0}, max {rss_max}\n"
    ));
    out.push_str(&format!(
        "live kernels: first quarter {k_first:.1}, last quarter {k_last:.1}\n"
    ));
    // All four quarters, to tell a plateau from a trend.
    let quarters: Vec<String> = steady
        .chunks(q)
        .take(4)
        .map(|c| {
            format!(
                "{:.0} fds / {:.0} KiB",
                mean(c.iter().map(|s| s.fds as f64)),
                mean(c.iter().map(|s| s.rss_kb as f64))
            )
        })
        .collect();
    out.push_str(&format!("by quarter: {}\n", quarters.join(", ")));
    out.push_str(&format!(
        "max latency: {:.2}s; serve exit: {status}\n",
        records
            .iter()
            .map(|r| r.latency)
            .max()
            .unwrap_or_default()
            .as_secs_f64()
    ));
    println!("{out}");

    // ---- assertions ----
    let problems = shared.problems.lock().unwrap().clone();
    assert!(
        problems.is_empty(),
        "{} problems; the first ones:\n{}\n{out}",
        problems.len(),
        problems
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    let killed_unseen = {
        let seen = shared.seen_kernels.lock().unwrap();
        shared
            .killed
            .lock()
            .unwrap()
            .iter()
            .filter(|k| !seen.contains(*k))
            .count() as u64
    };
    let spawn_killed = shared.spawn_killed.load(Ordering::Relaxed);
    assert!(
        spawn_killed <= killed_unseen,
        "{spawn_killed} results say a kernel was SIGKILLed before ready, but the chaos thread killed only {killed_unseen} kernels no result named\n{out}"
    );
    let pending = shared.pending.lock().unwrap().clone();
    assert!(pending.is_empty(), "requests never answered: {pending:?}");
    assert!(
        all_parse_errors && null_errors == sent,
        "{sent} unparsable lines, {null_errors} parse errors"
    );
    assert!(
        records
            .iter()
            .filter(|r| r.kind != Kind::Unparsable)
            .count()
            >= CLIENTS,
        "too few requests ran:\n{out}"
    );
    assert!(
        status.success(),
        "serve exit after EOF: {status}\n{}",
        serve.stderr()
    );
    assert!(
        leftovers_gone,
        "Python processes left after serve exited: {leftovers:?}"
    );
    serve.assert_only_jsonrpc();
    // Flat resources: steady state, not a leak. A kernel holds a handful of
    // fds in the host and the number of live kernels swings with the
    // chaos, so the fd bound is a constant above that swing.
    assert!(
        fd_last <= fd_first + 48.0,
        "host fd count grew: {fd_first:.1} → {fd_last:.1}\n{out}"
    );
    assert!(
        rss_last <= rss_first * 1.3 + 2048.0,
        "host RSS grew: {rss_first:.0} → {rss_last:.0} KiB\n{out}"
    );
}
