//! Scale figures of issue 9 that criterion does not fit: one cell printing
//! 1 GiB, and 64 sessions × 200 cells at once through `toolcell serve`.
//! Prints a table.
//!
//! **Output throughput** (through the library, `toolcell_host::Registry`):
//! a warm cell writes a pre-built 1 MiB block (the `redact` bench's clean
//! text, or the same with one secret line per 4 KiB) 1024 times with
//! `sys.stdout.buffer.write`; the host decodes, strips, redacts, captures and
//! spills it (spill cap 5 MB). Figure: bytes printed ÷ wall time from
//! `execute` to result, and the host's peak RSS (`VmHWM` of the bench
//! process, which is the host; each workload runs in a fresh re-exec of this
//! binary so the peak is its own). For context, Python's own write rate: the
//! same loop with fd 1 `dup2`ed to `/dev/null`, and into a pipe drained by
//! `cat`. Targets: ≥ 500 MB/s, host peak RSS ≤ 64 MB.
//!
//! **Serve at scale**: the release `toolcell serve` (from this workspace's
//! target dir) with `max_kernels = 72`; first a single session's warm-cell
//! median, then 64 sessions each running 200 cells closed-loop (its next
//! cell sent when its previous answer arrived), from one client thread.
//! Every response is checked: its id is one in flight, the status is
//! success, and the output is what that session's cell printed (its own
//! counter, so order and state are checked too). Figures: cells/s, latency
//! percentiles, p99 ÷ single-session median, lost/mismatched, serve RSS,
//! host RSS per idle kernel = (serve RSS with 64 idle kernels − with none) ÷
//! 64, and the kernels' own (Python) RSS. Targets: nothing lost or
//! mismatched, p99 ≤ 10× the single-session median, ≤ 256 KiB per kernel.
//!
//! `cargo bench -p toolcell-benches --bench scale [-- output|serve]` runs the
//! full sizes (needs `cargo build --release -p toolcell-cli` first).
//! `cargo test --benches` runs it without `--bench`: 10 MiB and 4 sessions ×
//! 5 cells, with whichever `toolcell` binary exists.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolcell_benches::scale::{block, cpu_seconds, percentile, proc_kb};
use toolcell_host::{ExecuteRequest, Registry, RegistryOptions};
use toolcell_kernel::Status;

const MIB: u64 = 1 << 20;
/// `[output] spill_cap_bytes` for the output workload (the default).
const SPILL_CAP: u64 = 5_000_000;
/// How long the serve client waits for any response before it calls the
/// rest lost.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Clone, Copy)]
struct Sizes {
    /// 1 MiB blocks the output cell writes.
    blocks: u64,
    /// Concurrent serve sessions.
    sessions: usize,
    /// Measured cells per session.
    cells: usize,
    /// Measured cells of the single-session baseline.
    single_cells: usize,
}

const FULL: Sizes = Sizes {
    blocks: 1024,
    sessions: 64,
    cells: 200,
    single_cells: 500,
};
const TINY: Sizes = Sizes {
    blocks: 10,
    sessions: 4,
    cells: 5,
    single_cells: 5,
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--scale-child") {
        child(&args[i + 1..]);
        return;
    }
    let full = args.iter().any(|a| a == "--bench");
    let sizes = if full { FULL } else { TINY };
    let filters: Vec<&str> = args
        .iter()
        .filter(|a| !a.starts_with('-'))
        .map(String::as_str)
        .collect();
    let wanted = |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f));
    println!(
        "scale: {} sizes ({} MiB output; {} sessions × {} cells), load average {}",
        if full { "full" } else { "tiny (no --bench)" },
        sizes.blocks,
        sizes.sessions,
        sizes.cells,
        load_average()
    );
    let mut failed = false;
    if wanted("output") {
        failed |= !output_workloads(sizes);
    }
    if wanted("serve") {
        match toolcell_binary(full) {
            Ok(bin) => failed |= !serve_workload(&bin, sizes),
            Err(msg) if full => {
                eprintln!("\n!!! scale/serve NOT RUN: {msg}\n");
                failed = true;
            }
            Err(msg) => toolcell_benches::missing(&format!("scale/serve: {msg}")),
        }
    }
    println!("load average at the end: {}", load_average());
    if failed {
        eprintln!("scale: a check failed (see above)");
        std::process::exit(1);
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

// ---------------------------------------------------------------- output

/// Runs `self --scale-child <args>` and returns the JSON it reports.
fn run_child(args: &[String]) -> Option<Value> {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .arg("--scale-child")
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = stdout
        .lines()
        .find_map(|l| l.strip_prefix("SCALE "))
        .and_then(|l| serde_json::from_str(l).ok());
    if !out.status.success() || report.is_none() {
        eprintln!("scale child {args:?} failed ({}):\n{stdout}", out.status);
        return None;
    }
    report
}

fn output_workloads(sizes: Sizes) -> bool {
    let n = sizes.blocks.to_string();
    let mut ok = true;
    let mut rows = Vec::new();
    for kind in ["clean", "secrets"] {
        match run_child(&["output".into(), kind.into(), n.clone()]) {
            Some(r) => rows.push(r),
            None => ok = false,
        }
    }
    let python = run_child(&["python".into(), n.clone()]);
    ok &= python.is_some();

    let mb = (sizes.blocks * MIB) as f64 / 1e6;
    println!(
        "\n## cell printing {} MiB ({mb:.0} MB) through Registry::execute\n",
        sizes.blocks
    );
    println!(
        "| input | wall | throughput | host VmHWM before → after cell | stdout_bytes_total | spill file |"
    );
    println!("|---|---|---|---|---|---|");
    for r in &rows {
        let wall = r["wall_s"].as_f64().unwrap();
        println!(
            "| {} | {:.3} s | {:.0} MB/s ({:.0} MiB/s) | {:.1} → {:.1} MB | {} | {} bytes (cap {}) |",
            r["kind"].as_str().unwrap(),
            wall,
            mb / wall,
            mb * 1e6 / MIB as f64 / wall,
            r["hwm_before_kb"].as_f64().unwrap() * 1024.0 / 1e6,
            r["hwm_after_kb"].as_f64().unwrap() * 1024.0 / 1e6,
            r["stdout_bytes_total"],
            r["spill_bytes"],
            SPILL_CAP,
        );
    }
    // CPU time does not depend on what else runs on the machine the way wall
    // time does: it says what an idle machine could do.
    println!(
        "\nCPU seconds for the same cells (/proc/<pid>/stat, 10 ms ticks). Ceiling = what the \
         CPU time allows on 2 idle cores: the cleaning thread alone, or all the work spread \
         over both cores, whichever is slower.\n"
    );
    println!(
        "| input | host CPU (cleaning thread + pipe readers) | Python CPU | cleaning thread alone | ceiling on 2 idle cores |"
    );
    println!("|---|---|---|---|---|");
    for r in &rows {
        let f = |k: &str| r[k].as_f64().unwrap();
        let (host, clean, py) = (f("host_cpu_s"), f("cleaner_cpu_s"), f("python_cpu_s"));
        let bound = clean.max((host + py) / 2.0).max(1e-9);
        println!(
            "| {} | {host:.2} s ({clean:.2} + {:.2}) | {py:.2} s | {:.0} MB/s | {:.0} MB/s |",
            r["kind"].as_str().unwrap(),
            host - clean,
            mb / clean.max(1e-9),
            mb / bound,
        );
    }
    if let Some(p) = python {
        let rate = |k: &str| mb / p[k].as_f64().unwrap();
        println!(
            "\nPython alone, the same {} × 1 MiB write loop: with fd 1 dup2'ed to /dev/null \
             {:.3} ms ({:.0} GB/s: the loop itself costs nothing); into a pipe drained by `cat` \
             {:.3} s ({:.0} MB/s: the pipe is the ceiling)",
            sizes.blocks,
            p["devnull_s"].as_f64().unwrap() * 1e3,
            rate("devnull_s") / 1e3,
            p["cat_pipe_s"].as_f64().unwrap(),
            rate("cat_pipe_s"),
        );
    }
    println!("targets: ≥ 500 MB/s, host peak RSS (VmHWM after) ≤ 64 MB");
    ok
}

fn child(args: &[String]) {
    let report = match args.first().map(String::as_str) {
        Some("output") => child_output(&args[1], args[2].parse().unwrap()),
        Some("python") => child_python(args[1].parse().unwrap()),
        other => panic!("unknown scale child {other:?}"),
    };
    println!("SCALE {report}");
}

struct Lib {
    rt: tokio::runtime::Runtime,
    reg: Registry,
    tmp: tempfile::TempDir,
}

/// A registry as the binary builds one (a two-worker runtime), with the
/// block in `block.txt` of its cwd and loaded as `_blk` in a warm kernel.
fn lib_with_block(with_secrets: bool) -> Lib {
    let rt = toolcell_benches::runtime();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("block.txt"), block(with_secrets)).unwrap();
    let opts = RegistryOptions {
        kernels_root: Some(tmp.path().join("kernels")),
        spill_dir: tmp.path().join("spill"),
        spill_cap_bytes: SPILL_CAP,
        default_cwd: tmp.path().to_path_buf(),
        ..RegistryOptions::default()
    };
    let reg = rt.block_on(async { Registry::new(opts) }).unwrap();
    let lib = Lib { rt, reg, tmp };
    let r = lib.exec(
        "import os, sys, time, subprocess\n\
         _blk = open('block.txt', 'rb').read()\n\
         assert len(_blk) == 1 << 20",
    );
    assert_eq!(r.status, Status::Success, "{}", r.output);
    lib
}

impl Lib {
    fn exec(&self, code: &str) -> toolcell_kernel::ExecuteResult {
        self.rt
            .block_on(self.reg.execute(ExecuteRequest::new(code)))
    }
}

fn child_output(kind: &str, blocks: u64) -> Value {
    let lib = lib_with_block(kind == "secrets");
    let hwm_before = proc_kb(0, "VmHWM").unwrap();
    let code = format!(
        "_w = sys.stdout.buffer.write\nfor _ in range({blocks}):\n    _w(_blk)\nsys.stdout.buffer.flush()"
    );
    // The cell's future runs on this thread (block_on), so this thread does
    // the cleaning (strip + redact + capture + spill); the runtime's workers
    // read the pipes and decode frames.
    let me = std::process::id();
    let (cpu0, main0) = (
        cpu_seconds(me, None).unwrap(),
        cpu_seconds(me, Some(me)).unwrap(),
    );
    let t = Instant::now();
    let r = lib.exec(&code);
    let wall = t.elapsed();
    let (cpu1, main1) = (
        cpu_seconds(me, None).unwrap(),
        cpu_seconds(me, Some(me)).unwrap(),
    );
    let hwm_after = proc_kb(0, "VmHWM").unwrap();
    assert_eq!(r.status, Status::Success, "{}", r.error.unwrap_or_default());
    assert!(r.stdout_truncated, "{blocks} MiB must be cut");
    if kind == "clean" {
        // Clean text passes the cleaner untouched: every byte is counted.
        assert_eq!(r.stdout_bytes_total, blocks * MIB);
    } else {
        assert!(r.output.contains("«redacted:"), "secrets must be masked");
    }
    let spill = PathBuf::from(r.stdout_spill_path.as_deref().expect("a spill file"));
    let spill_bytes = std::fs::metadata(&spill).unwrap().len();
    assert!(spill_bytes <= SPILL_CAP, "spill file {spill_bytes} > cap");
    lib.rt.block_on(lib.reg.shutdown_all());
    drop(lib.tmp);
    json!({
        "kind": kind,
        "wall_s": wall.as_secs_f64(),
        "hwm_before_kb": hwm_before,
        "hwm_after_kb": hwm_after,
        "stdout_bytes_total": r.stdout_bytes_total,
        "spill_bytes": spill_bytes,
        "host_cpu_s": cpu1 - cpu0,
        "cleaner_cpu_s": main1 - main0,
        "python_cpu_s": r.usage.map_or(0.0, |u| u.cpu_seconds),
    })
}

/// Python's own rate for the same write loop, without the host in the way.
fn child_python(blocks: u64) -> Value {
    let lib = lib_with_block(false);
    let devnull = format!(
        "sys.stdout.flush()\n\
         _saved, _dn = os.dup(1), os.open('/dev/null', os.O_WRONLY)\n\
         os.dup2(_dn, 1)\n\
         try:\n\
         \x20   _w = sys.stdout.buffer.write\n\
         \x20   _t = time.perf_counter()\n\
         \x20   for _ in range({blocks}):\n\
         \x20       _w(_blk)\n\
         \x20   sys.stdout.buffer.flush()\n\
         \x20   _dt = time.perf_counter() - _t\n\
         finally:\n\
         \x20   os.dup2(_saved, 1)\n\
         \x20   os.close(_saved)\n\
         \x20   os.close(_dn)\n\
         print(_dt)"
    );
    let cat = format!(
        "_p = subprocess.Popen(['cat'], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)\n\
         _t = time.perf_counter()\n\
         for _ in range({blocks}):\n\
         \x20   _p.stdin.write(_blk)\n\
         _p.stdin.close()\n\
         _p.wait()\n\
         print(time.perf_counter() - _t)"
    );
    let mut secs = Vec::new();
    for code in [devnull, cat] {
        let r = lib.exec(&code);
        assert_eq!(r.status, Status::Success, "{}", r.output);
        // Nothing but the timing reached the host.
        secs.push(r.output.trim().parse::<f64>().expect(&r.output));
    }
    lib.rt.block_on(lib.reg.shutdown_all());
    json!({"devnull_s": secs[0], "cat_pipe_s": secs[1]})
}

// ----------------------------------------------------------------- serve

/// The `toolcell` binary: `target/<profile>/toolcell` of this bench's own
/// profile (release under `cargo bench`); without `--bench`, the other
/// profile's one if that is missing.
fn toolcell_binary(full: bool) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/scale-<hash> → target/<profile>
    let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let mut candidates = vec![profile_dir.join("toolcell")];
    if !full && let Some(target) = profile_dir.parent() {
        candidates.push(target.join("release/toolcell"));
        candidates.push(target.join("debug/toolcell"));
    }
    candidates.into_iter().find(|p| p.is_file()).ok_or_else(|| {
        format!(
            "no toolcell binary at {}; build it first: cargo build --release -p toolcell-cli",
            profile_dir.join("toolcell").display()
        )
    })
}

struct Server {
    child: std::process::Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<(Instant, String)>,
    next_id: u64,
    _dir: tempfile::TempDir,
    log: PathBuf,
}

impl Server {
    fn start(bin: &Path, max_kernels: usize) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        for d in ["run", "cache", "config", "data", "spill"] {
            std::fs::create_dir_all(p.join(d)).unwrap();
        }
        let base = format!(
            "[kernels]\nmax_kernels = {max_kernels}\n\n[output]\nspill_dir = \"{}\"\n",
            p.join("spill").display()
        );
        // A warm pool kernel would sit in the "no kernels" baseline: turn it
        // off where the binary knows the key.
        let with_pool_off = base.replace("[kernels]\n", "[kernels]\nwarm_pool = 0\n");
        let config = p.join("toolcell.toml");
        std::fs::write(&config, &with_pool_off).unwrap();
        let accepted = Self::command(bin, p, &config)
            .arg("config")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !accepted {
            std::fs::write(&config, &base).unwrap();
        }
        let log = p.join("serve.log");
        let mut child = Self::command(bin, p, &config)
            .arg("serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { break };
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            stdin,
            lines,
            next_id: 1,
            _dir: dir,
            log,
        }
    }

    fn command(bin: &Path, dir: &Path, config: &Path) -> Command {
        let mut c = Command::new(bin);
        c.current_dir(dir)
            .env("XDG_RUNTIME_DIR", dir.join("run"))
            .env("XDG_CACHE_HOME", dir.join("cache"))
            .env("XDG_CONFIG_HOME", dir.join("config"))
            .env("XDG_DATA_HOME", dir.join("data"))
            .arg("--config")
            .arg(config);
        c
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a request; returns its id and when it was written.
    fn send(&mut self, method: &str, params: Value) -> (u64, Instant) {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut bytes = line.to_string().into_bytes();
        bytes.push(b'\n');
        let t = Instant::now();
        self.stdin.write_all(&bytes).unwrap();
        (id, t)
    }

    fn recv(&self) -> Option<(Instant, Value)> {
        let (t, line) = self.lines.recv_timeout(RESPONSE_TIMEOUT).ok()?;
        Some((t, serde_json::from_str(&line).unwrap_or(Value::Null)))
    }

    /// One request, waiting for its answer (nothing else may be in flight).
    fn call(&mut self, method: &str, params: Value) -> (Duration, Value) {
        let (id, t) = self.send(method, params);
        let (at, v) = self.recv().unwrap_or_else(|| self.fail("no answer"));
        if v["id"] != id || v.get("result").is_none() {
            self.fail(&format!("bad answer to {method}: {v}"));
        }
        (at - t, v["result"].clone())
    }

    fn fail(&self, msg: &str) -> ! {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        panic!("{msg}\nserve log:\n{log}");
    }

    fn rss_kb(&self) -> u64 {
        proc_kb(self.pid(), "VmRSS").unwrap()
    }

    /// The kernels' pids, from `sessions`.
    fn kernel_pids(&mut self) -> Vec<u32> {
        let (_, r) = self.call("sessions", json!({}));
        r["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["pid"].as_u64().unwrap() as u32)
            .collect()
    }

    /// Ends serve by EOF on stdin (docs/serve.md, "End of input"); returns its
    /// exit status.
    fn finish(self) -> Option<i32> {
        let Self {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(s)) = child.try_wait() {
                return s.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }
}

/// The cell every session runs: its own counter, printed with its name.
fn counter_cell(session: &str) -> String {
    format!("x = x + 1 if 'x' in globals() else 0\nprint({session:?}, x)")
}

fn expected_output(session: &str, n: usize) -> String {
    format!("{session} {n}\n")
}

fn python_rss_kb(pids: &[u32]) -> u64 {
    pids.iter().filter_map(|&p| proc_kb(p, "VmRSS")).sum()
}

fn serve_workload(bin: &Path, sizes: Sizes) -> bool {
    let modified = std::fs::metadata(bin)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .map_or(String::new(), |e| {
            format!(", built {:.0} min ago", e.as_secs_f64() / 60.0)
        });
    println!(
        "\n## serve: {} ({})",
        bin.display(),
        modified.trim_start_matches(", ")
    );
    let mut srv = Server::start(bin, sizes.sessions + 8);
    let mut ok = true;

    // Single-session baseline: warm cells one at a time.
    let single = "single";
    let mut single_lat = Vec::new();
    let mut single_cpu0 = (0.0, 0.0);
    let mut single_pid = 0;
    for n in 0..=sizes.single_cells {
        if n == 1 {
            single_pid = srv.kernel_pids()[0];
            single_cpu0 = (
                cpu_seconds(srv.pid(), None).unwrap(),
                cpu_seconds(single_pid, None).unwrap(),
            );
        }
        let (lat, r) = srv.call(
            "execute",
            json!({"code": counter_cell(single), "session": single}),
        );
        if r["output"] != expected_output(single, n) {
            srv.fail(&format!("single session cell {n}: {r}"));
        }
        if n > 0 {
            single_lat.push(lat);
        }
    }
    // CPU per cell of one session alone: serve and its kernel.
    let single_cpu = (cpu_seconds(srv.pid(), None).unwrap() - single_cpu0.0
        + cpu_seconds(single_pid, None).unwrap()
        - single_cpu0.1)
        / sizes.single_cells.max(1) as f64;
    single_lat.sort();
    let single_median = percentile(&single_lat, 0.5);
    srv.call("shutdown_session", json!({"session": single}));
    std::thread::sleep(Duration::from_millis(300));
    let idle_kernels = srv.kernel_pids().len();
    let rss_none = srv.rss_kb();

    // Every session's first cell (its spawn), all at once.
    let names: Vec<String> = (0..sizes.sessions).map(|i| format!("s{i}")).collect();
    let t0 = Instant::now();
    let mut inflight: HashMap<u64, (usize, usize, Instant)> = HashMap::new();
    for (i, s) in names.iter().enumerate() {
        let (id, t) = srv.send("execute", json!({"code": counter_cell(s), "session": s}));
        inflight.insert(id, (i, 0, t));
    }
    let mut bad = 0usize;
    while !inflight.is_empty() {
        let Some((_, v)) = srv.recv() else { break };
        let Some((i, n, _)) = v["id"].as_u64().and_then(|id| inflight.remove(&id)) else {
            bad += 1;
            continue;
        };
        if v["result"]["output"] != expected_output(&names[i], n) {
            eprintln!("spawn cell of {}: {v}", names[i]);
            bad += 1;
        }
    }
    let spawn_all = t0.elapsed();
    let lost_spawn = inflight.len();
    std::thread::sleep(Duration::from_millis(500));
    let pids = srv.kernel_pids();
    let rss_idle = srv.rss_kb();
    let py_idle = python_rss_kb(&pids);

    // The closed loop: each session sends its next cell when its previous
    // answer arrives.
    let kernels_cpu =
        |pids: &[u32]| -> f64 { pids.iter().filter_map(|&p| cpu_seconds(p, None)).sum() };
    let serve_cpu0 = cpu_seconds(srv.pid(), None).unwrap();
    let py_cpu0 = kernels_cpu(&pids);
    let mut counters = vec![1usize; sizes.sessions];
    let main = closed_loop(&mut srv, &names, &mut counters, sizes.cells);
    let (mut lat, mut per_session, wall) = (main.lat, main.per_session, main.wall);
    bad += main.bad;
    inflight.clear();
    let serve_cpu = cpu_seconds(srv.pid(), None).unwrap() - serve_cpu0;
    let py_cpu = kernels_cpu(&pids) - py_cpu0;
    let lost = lost_spawn + main.lost;

    // How the tail grows with the sessions in flight: the same closed loop
    // over the first n sessions.
    let mut sweep = Vec::new();
    for n in [1, 4, 16].into_iter().filter(|&n| n < sizes.sessions) {
        let r = closed_loop(&mut srv, &names[..n], &mut counters[..n], sizes.cells);
        bad += r.bad;
        sweep.push((n, r));
    }
    std::thread::sleep(Duration::from_millis(300));
    let pids_end = srv.kernel_pids();
    let rss_end = srv.rss_kb();
    let hwm_end = proc_kb(srv.pid(), "VmHWM").unwrap();
    let py_end = python_rss_kb(&pids_end);
    let kernels_end = pids_end.len();
    let exit = srv.finish();

    lat.sort();
    let cells = lat.len();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let p = |q: f64| percentile(&lat, q);
    let k = sizes.sessions as f64;
    let per_kernel = |rss: u64| (rss as f64 - rss_none as f64) / k;
    println!(
        "\n{} sessions × {} cells closed-loop (after each session's first cell; the {} spawns took {:.2} s)\n",
        sizes.sessions,
        sizes.cells,
        sizes.sessions,
        spawn_all.as_secs_f64()
    );
    println!("| figure | measured | target |");
    println!("|---|---|---|");
    println!(
        "| single-session warm cell, median of {} | {:.3} ms | |",
        single_lat.len(),
        ms(single_median)
    );
    println!(
        "| aggregate | {:.0} cells/s ({cells} cells in {:.2} s) | |",
        cells as f64 / wall.as_secs_f64(),
        wall.as_secs_f64()
    );
    println!(
        "| latency median / p90 / p99 / max | {:.2} / {:.2} / {:.2} / {:.2} ms | |",
        ms(p(0.5)),
        ms(p(0.9)),
        ms(p(0.99)),
        ms(p(1.0))
    );
    let ratio = p(0.99).as_secs_f64() / single_median.as_secs_f64().max(1e-9);
    println!("| p99 ÷ single-session median | {ratio:.1}× | ≤ 10× |");
    // Little's law: with N cells always in flight, mean latency = N ÷ rate.
    // However fair the host, no cell can beat the queue it stands in.
    let mean = wall.as_secs_f64() * k / cells.max(1) as f64;
    println!(
        "| mean latency = {} in flight ÷ rate (Little's law); p99 ÷ mean | {:.2} ms; {:.1}× | |",
        sizes.sessions,
        mean * 1e3,
        p(0.99).as_secs_f64() / mean.max(1e-9)
    );
    // Fairness: every session should see about the same latencies.
    let medians: Vec<Duration> = per_session
        .iter_mut()
        .map(|v| {
            v.sort();
            percentile(v, 0.5)
        })
        .collect();
    // The latency a perfectly fair host could give each cell: every session
    // waits for the others' cells, at the CPU cost one cell has alone.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let floor = k * single_cpu / cores;
    println!(
        "| fair-share floor = {} × CPU per cell alone ({:.0} µs) ÷ {cores} cores; p99 ÷ floor | {:.2} ms; {:.1}× | |",
        sizes.sessions,
        single_cpu * 1e6,
        floor * 1e3,
        p(0.99).as_secs_f64() / floor.max(1e-9)
    );
    println!(
        "| per-session median latency: fastest / slowest session | {:.2} / {:.2} ms | |",
        ms(medians.iter().copied().min().unwrap_or_default()),
        ms(medians.iter().copied().max().unwrap_or_default())
    );
    println!(
        "| CPU per cell: serve / the kernel (Python) | {:.0} / {:.0} µs | |",
        serve_cpu * 1e6 / cells.max(1) as f64,
        py_cpu * 1e6 / cells.max(1) as f64
    );
    println!("| lost / mismatched responses | {lost} / {bad} | 0 / 0 |");
    println!(
        "| serve RSS: no kernels ({idle_kernels} live) / {} idle kernels / at the end ({kernels_end} live) / peak | {:.1} / {:.1} / {:.1} / {:.1} MiB | |",
        pids.len(),
        rss_none as f64 / 1024.0,
        rss_idle as f64 / 1024.0,
        rss_end as f64 / 1024.0,
        hwm_end as f64 / 1024.0
    );
    println!(
        "| host RSS per idle kernel: after first cells / at the end | {:.0} / {:.0} KiB | ≤ 256 KiB |",
        per_kernel(rss_idle),
        per_kernel(rss_end)
    );
    println!(
        "| Python RSS per kernel (sum of kernels' VmRSS ÷ {}): idle / at the end | {:.0} / {:.0} KiB | |",
        sizes.sessions,
        py_idle as f64 / k,
        py_end as f64 / k
    );
    println!("| serve exit status at stdin EOF | {exit:?} | Some(0) |");
    println!(
        "\nThe same closed loop ({} cells per session) over fewer sessions, after the {}-session run:\n",
        sizes.cells, sizes.sessions
    );
    println!(
        "| sessions in flight | cells/s | median | p99 | p99 ÷ single-session median | lost / mismatched |"
    );
    println!("|---|---|---|---|---|---|");
    sweep.push((
        sizes.sessions,
        LoopStats {
            lat: lat.clone(),
            per_session: Vec::new(),
            wall,
            lost: main.lost,
            bad: main.bad,
        },
    ));
    for (n, r) in &mut sweep {
        r.lat.sort();
        println!(
            "| {n} | {:.0} | {:.2} ms | {:.2} ms | {:.1}× | {} / {} |",
            r.lat.len() as f64 / r.wall.as_secs_f64(),
            ms(percentile(&r.lat, 0.5)),
            ms(percentile(&r.lat, 0.99)),
            percentile(&r.lat, 0.99).as_secs_f64() / single_median.as_secs_f64().max(1e-9),
            r.lost,
            r.bad
        );
        ok &= r.lost == 0 && r.lat.len() == *n * sizes.cells;
    }

    ok &= lost == 0 && bad == 0 && exit == Some(0);
    ok &= cells == sizes.sessions * sizes.cells;
    ok &= pids.len() == sizes.sessions && idle_kernels == 0;
    if !ok {
        eprintln!("scale/serve: checks failed (lost {lost}, mismatched {bad}, exit {exit:?})");
    }
    ok
}

/// What one closed-loop run saw.
struct LoopStats {
    /// Every cell's latency, request written → response read.
    lat: Vec<Duration>,
    /// The same, per session.
    per_session: Vec<Vec<Duration>>,
    wall: Duration,
    /// Requests never answered within [`RESPONSE_TIMEOUT`].
    lost: usize,
    /// Answers to no request in flight, failed cells, or wrong output.
    bad: usize,
}

/// Runs `cells` counter cells in each of `names` at once, each session
/// sending its next cell when its previous answer arrives. `counters[i]` is
/// the value session `i` prints next; it is advanced.
fn closed_loop(
    srv: &mut Server,
    names: &[String],
    counters: &mut [usize],
    cells: usize,
) -> LoopStats {
    let mut lat = Vec::with_capacity(names.len() * cells);
    let mut per_session: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    let mut inflight: HashMap<u64, (usize, usize, Instant)> = HashMap::new();
    let mut bad = 0usize;
    let t0 = Instant::now();
    for (i, s) in names.iter().enumerate() {
        let (id, t) = srv.send("execute", json!({"code": counter_cell(s), "session": s}));
        inflight.insert(id, (i, 1, t));
    }
    while !inflight.is_empty() {
        let Some((at, v)) = srv.recv() else { break };
        let Some((i, k, sent)) = v["id"].as_u64().and_then(|id| inflight.remove(&id)) else {
            eprintln!("response to no request in flight: {v}");
            bad += 1;
            continue;
        };
        lat.push(at - sent);
        per_session[i].push(at - sent);
        if v["result"]["status"] != "success"
            || v["result"]["output"] != expected_output(&names[i], counters[i])
        {
            if bad < 5 {
                eprintln!("session {} cell {k}: {v}", names[i]);
            }
            bad += 1;
        }
        counters[i] += 1;
        if k < cells {
            let s = &names[i];
            let (id, t) = srv.send("execute", json!({"code": counter_cell(s), "session": s}));
            inflight.insert(id, (i, k + 1, t));
        }
    }
    LoopStats {
        lat,
        per_session,
        wall: t0.elapsed(),
        lost: inflight.len(),
        bad,
    }
}
