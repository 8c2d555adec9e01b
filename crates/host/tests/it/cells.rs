//! Cell semantics through `Registry::execute` with real Python (docs/result.md;
//! docs/protocol.md, "Runner → host (frames)"): state, reset, echo, top-level
//! await, shell lines, tracebacks, `SystemExit`, stdin, per-call kernels.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use crate::common::{Fixture, assert_success, show};
use toolcell_host::{ExecuteRequest, KernelMode};
use toolcell_kernel::Status;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_persists_across_cells_in_one_kernel() {
    let f = Fixture::new();
    let a = f
        .run("import math\ndata = [1, 2, 3]\ndef total():\n    return sum(data)")
        .await;
    assert_success(&a);
    assert!(!a.kernel.reused);
    assert!(!a.kernel.state_reset);
    assert_eq!(a.kernel.execution_count, 1);
    let b = f
        .run("data.append(4)\nprint(total(), math.floor(2.5))")
        .await;
    assert_success(&b);
    assert_eq!(b.output, "10 2\n");
    assert!(b.kernel.reused);
    assert_eq!(b.kernel.id, a.kernel.id);
    assert_eq!(b.kernel.execution_count, 2);
    assert!(!b.kernel.state_reset);
    assert!(b.kernel.python.starts_with('3'), "{}", show(&b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_discards_the_kernel_and_its_variables() {
    let f = Fixture::new();
    let a = f.run("secret_state = 42").await;
    assert_success(&a);
    let r = f
        .reg
        .execute(ExecuteRequest::new("print('secret_state' in globals())").reset(true))
        .await;
    assert_success(&r);
    assert_eq!(r.output, "False\n");
    assert!(r.kernel.state_reset, "{}", show(&r));
    assert!(!r.kernel.reused);
    assert_ne!(r.kernel.id, a.kernel.id);
    assert_eq!(r.kernel.execution_count, 1);
    // The fresh kernel is the session's kernel from now on.
    let n = f.run("print('after')").await;
    assert!(n.kernel.reused && !n.kernel.state_reset, "{}", show(&n));
    assert_eq!(n.kernel.id, r.kernel.id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trailing_expression_is_echoed_and_sets_underscore() {
    let f = Fixture::new();
    assert_eq!(f.ok("x = 6\nx * 7").await, "42\n");
    // The repr, not str; `_` holds the last echoed value.
    assert_eq!(f.ok("'a' + 'b'").await, "'ab'\n");
    assert_eq!(f.ok("_ * 2").await, "'abab'\n");
    // None is not echoed; an assignment is not an expression.
    assert_eq!(f.ok("None").await, "");
    assert_eq!(f.ok("y = 5").await, "");
    // Only the last statement is echoed.
    assert_eq!(f.ok("1\n2\n3").await, "3\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_level_await_runs_on_one_persistent_loop() {
    let f = Fixture::new();
    let out = f
        .ok("import asyncio\nawait asyncio.sleep(0.01)\nloop = asyncio.get_running_loop()\nawait asyncio.sleep(0, result='awaited')")
        .await;
    assert_eq!(out, "'awaited'\n");
    // The same loop serves the next cell with an await.
    assert_eq!(
        f.ok("await asyncio.sleep(0)\nasyncio.get_running_loop() is loop")
            .await,
        "True\n"
    );
    // A task started in one cell keeps running on the loop across cells.
    f.ok("async def tick():\n    await asyncio.sleep(0)\n    return 'done'\ntask = loop.create_task(tick())").await;
    assert_eq!(f.ok("await task").await, "'done'\n");
    // A cell without await runs outside the loop, so asyncio.run works there.
    assert_eq!(f.ok("asyncio.run(asyncio.sleep(0, result=3))").await, "3\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_lines_run_in_a_shell_and_stream_like_output() {
    let f = Fixture::new();
    assert_eq!(f.ok("!echo hi").await, "hi\n");
    // Mixed with Python, in order; a failing command does not raise.
    let out = f
        .ok("print('before')\n!echo from-shell; exit 3\nprint('after')")
        .await;
    assert_eq!(out, "before\nfrom-shell\nafter\n");
    // Inside a block, indentation kept.
    assert_eq!(
        f.ok("for i in range(2):\n    !echo loop").await,
        "loop\nloop\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tracebacks_show_the_cell_line_and_no_runner_or_stub_frame() {
    let f = Fixture::new();
    let r = f
        .run("def inner(d):\n    return d['missing']\n\ninner({})")
        .await;
    assert_eq!(r.status, Status::Error, "{}", show(&r));
    assert_eq!(r.exit_code, 1);
    let out = &r.output;
    assert!(
        out.starts_with("\n--- stderr ---\nTraceback (most recent call last):"),
        "{out}"
    );
    assert!(
        out.contains("File \"<cell-1>\", line 4, in <module>"),
        "{out}"
    );
    assert!(out.contains("File \"<cell-1>\", line 2, in inner"), "{out}");
    assert!(out.contains("    return d['missing']"), "{out}");
    assert!(out.contains("KeyError: 'missing'"), "{out}");
    assert!(!out.contains("runner.py"), "{out}");
    let err = r.error.as_deref().unwrap();
    assert!(
        err.contains("KeyError") && err.contains("state are kept"),
        "{err}"
    );
    // The kernel survived with its state.
    assert_eq!(f.ok("inner({'missing': 1})").await, "1\n");

    // A refused tool call: ToolError from the stub, with no frame of the stub.
    let r = f
        .run("from toolcell_tools import read_file\ncontent = read_file('no/such/file.txt')")
        .await;
    assert_eq!(r.status, Status::Error, "{}", show(&r));
    assert!(
        r.output.contains("File \"<cell-3>\", line 2, in <module>"),
        "{}",
        r.output
    );
    assert!(
        r.output.contains("content = read_file('no/such/file.txt')"),
        "{}",
        r.output
    );
    assert!(r.output.contains("ToolError"), "{}", r.output);
    assert!(!r.output.contains("toolcell_tools.py"), "{}", r.output);
    assert!(!r.output.contains("runner.py"), "{}", r.output);

    // A syntax error points into the cell too.
    let r = f.run("x = (1,\ny = 2 +").await;
    assert_eq!(r.status, Status::Error);
    assert!(
        r.output.contains("<cell-4>") && r.output.contains("SyntaxError"),
        "{}",
        r.output
    );
    assert!(!r.output.contains("runner.py"), "{}", r.output);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_exit_ends_the_kernel_with_its_code() {
    let f = Fixture::new();
    f.ok("kept = 1").await;
    // Code 0: success, but the kernel is gone.
    let r = f.run("import sys\nprint('bye')\nsys.exit(0)").await;
    assert_success(&r);
    assert_eq!(r.output, "bye\n");
    assert_eq!(r.kernel.ended, Some(true), "{}", show(&r));
    let first = r.kernel.id.clone();
    let pid_gone = |id: &str| f.reg.sessions().iter().all(|s| s.kernel_id != id);
    assert!(pid_gone(&first));

    // The next cell gets a fresh kernel and is told its state is gone.
    let r = f.run("print('kept' in globals())").await;
    assert_success(&r);
    assert_eq!(r.output, "False\n");
    assert!(r.kernel.state_reset && !r.kernel.reused, "{}", show(&r));
    assert_ne!(r.kernel.id, first);

    // A non-zero code is an error carrying that code.
    f.ok("kept = 2").await;
    let r = f.run("raise SystemExit(3)").await;
    assert_eq!(r.status, Status::Error, "{}", show(&r));
    assert_eq!(r.exit_code, 3);
    assert_eq!(r.kernel.ended, Some(true));
    assert!(
        r.error.as_deref().unwrap().contains("SystemExit(3)"),
        "{}",
        show(&r)
    );
    let r = f.run("print('kept' in globals())").await;
    assert_eq!(r.output, "False\n");
    assert!(r.kernel.state_reset, "{}", show(&r));

    // None counts as 0.
    let r = f.run("raise SystemExit").await;
    assert_success(&r);
    assert_eq!(r.kernel.ended, Some(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_is_refused_at_once_with_a_hint() {
    let f = Fixture::new();
    f.ok("kept = 'yes'").await;
    let r = f.run("name = input('your name? ')").await;
    assert_eq!(r.status, Status::Error, "{}", show(&r));
    assert!(r.stdin_requested);
    assert!(
        r.output.contains("interactive input is not supported"),
        "{}",
        r.output
    );
    let hint = r.hint.as_deref().unwrap_or_default();
    assert!(hint.contains("input()"), "{}", show(&r));
    // A direct read of sys.stdin is refused the same way; state is kept.
    let r = f.run("import sys\ntry:\n    sys.stdin.read()\nexcept NotImplementedError as e:\n    print(type(e).__name__, kept)").await;
    assert_success(&r);
    assert!(r.stdin_requested);
    assert_eq!(r.output, "StdinNotImplementedError yes\n");
    // And the flag does not stick to later cells.
    let r = f.run("1").await;
    assert!(!r.stdin_requested);
    let v = serde_json::to_value(&r).unwrap();
    assert!(v.get("stdin_requested").is_none(), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_call_mode_runs_each_cell_in_a_fresh_kernel() {
    let f = Fixture::with(|o| o.kernel_mode = KernelMode::PerCall);
    let a = f.run("import os\nx = 1\nprint(os.getpid())").await;
    assert_success(&a);
    let b = f
        .run("import os\nprint('x' in globals(), os.getpid())")
        .await;
    assert_success(&b);
    assert!(b.output.starts_with("False "), "{}", b.output);
    // (Sandboxed, both are pid 2 of their own namespace: the ids differ.)
    assert_ne!(a.kernel.id, b.kernel.id);
    assert!(!b.kernel.reused);
    assert_eq!(b.kernel.execution_count, 1);
    // Nothing stays alive between cells.
    assert_eq!(f.reg.live_kernels(), 0);
    assert!(f.reg.sessions().is_empty());
    assert!(common::entries(&f.kernels_root()).is_empty());
    let pid = f.host_pid(a.output.trim().parse().unwrap());
    assert!(common::eventually(std::time::Duration::from_secs(2), || !common::alive(pid)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_module_gets_a_pip_hint_and_pip_lines_use_the_kernels_interpreter() {
    let f = Fixture::new();
    let r = f.run("import toolcell_surely_not_installed_xyz").await;
    assert_eq!(r.status, Status::Error, "{}", show(&r));
    assert!(r.output.contains("ModuleNotFoundError"), "{}", r.output);
    let hint = r.hint.as_deref().unwrap_or_default();
    assert!(
        hint.contains("%pip install toolcell_surely_not_installed_xyz"),
        "{}",
        show(&r)
    );
    assert!(
        hint.contains(&r.kernel.python),
        "the hint names the interpreter: {hint}"
    );
    // `%pip` runs the kernel's own interpreter's pip.
    let r = f
        .run("import sys\n%pip --version\nprint(sys.executable)")
        .await;
    assert_success(&r);
    let mut lines = r.output.lines();
    let pip = lines.next().unwrap();
    let exe = lines.last().unwrap();
    let prefix = std::path::Path::new(exe)
        .parent()
        .unwrap()
        .parent()
        .unwrap();
    assert!(
        pip.starts_with("pip ") && pip.contains(&prefix.display().to_string()),
        "{}",
        r.output
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_mode_runs_in_a_private_directory_removed_with_the_kernel() {
    use toolcell_stubs::Mode;
    let f = Fixture::new();
    let r = f
        .reg
        .execute(ExecuteRequest::new("import os\nprint(os.getcwd())").mode(Mode::Strict))
        .await;
    assert_success(&r);
    assert_eq!(r.kernel.mode, "strict");
    let cwd = std::path::PathBuf::from(r.output.trim());
    assert_ne!(cwd, f.work());
    assert!(cwd.is_dir());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&cwd).unwrap().permissions().mode() & 0o777,
        0o700
    );
    // A project-mode cell of the same owner is another session.
    let p = f.ok("import os\nprint(os.getcwd())").await;
    assert_eq!(std::path::PathBuf::from(p.trim()), f.work());
    assert_eq!(f.reg.sessions().len(), 2);
    f.reg.shutdown("default").await;
    assert!(
        common::eventually(std::time::Duration::from_secs(2), || !cwd.exists()).await,
        "the strict kernel's private directory outlived it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_reports_cpu_time_and_peak_memory_of_the_cell() {
    let f = Fixture::new();
    let r = f
        .run("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2:\n    pass\nblob = bytearray(64 * 1024 * 1024)")
        .await;
    assert_success(&r);
    let usage = r.usage.unwrap();
    assert!(usage.cpu_seconds >= 0.15, "{}", show(&r));
    assert!(usage.peak_rss_kb >= 64 * 1024, "{}", show(&r));
    let v = serde_json::to_value(&r).unwrap();
    assert!(v["usage"].get("wall_seconds").is_none(), "{v}");
}
