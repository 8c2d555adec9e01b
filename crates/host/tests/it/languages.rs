//! R and JavaScript kernels (docs/languages.md) through `Registry::execute`,
//! next to Python where a case applies: state, echo, errors with the cell line,
//! stdin refused (and a subprocess's stdin empty), interrupt and timeout, tool
//! calls (parallel where the language allows), figures (R), each language's own
//! cases, and a host killed mid-cell.
//!
//! A missing interpreter fails the test with the install command: these
//! tests never skip (scripts/test-deps.sh installs R from Debian packages).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use crate::common::{Fixture, show};
use toolcell_host::ExecuteRequest;
use toolcell_kernel::{ExecuteResult, Language, Status};

fn require(lang: Language) {
    let (prog, install) = match lang {
        Language::R => (
            "Rscript",
            "scripts/test-deps.sh (apt-get install r-base-core r-cran-jsonlite r-cran-ggplot2)",
        ),
        Language::JavaScript => ("node", "apt-get install nodejs (node 18 or later)"),
        _ => return,
    };
    let ok = std::process::Command::new(prog)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(ok, "{prog} is not installed; install it with: {install}");
}

async fn run(f: &Fixture, lang: Language, code: &str) -> ExecuteResult {
    require(lang);
    f.reg
        .execute(ExecuteRequest::new(code).language(lang))
        .await
}

fn ok(r: &ExecuteResult) {
    assert_eq!(r.status, Status::Success, "{}", show(r));
}

const LANGS: [Language; 3] = [Language::Python, Language::R, Language::JavaScript];

/// (set x, read x): state survives the cell.
fn state_cells(lang: Language) -> (&'static str, &'static str) {
    match lang {
        Language::R => (
            "x <- c(1, 2, 3)\nf <- function() sum(x)",
            "x <- c(x, 4)\ncat(f(), '\\n')",
        ),
        Language::JavaScript => (
            "let x = [1, 2, 3]\nconst f = () => x.reduce((a, b) => a + b)",
            "x.push(4)\nconsole.log(f())",
        ),
        _ => (
            "x = [1, 2, 3]\ndef f(): return sum(x)",
            "x.append(4)\nprint(f())",
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_persists_and_language_is_reported() {
    let f = Fixture::new();
    for lang in LANGS {
        let (a, b) = state_cells(lang);
        let r1 = run(&f, lang, a).await;
        ok(&r1);
        assert_eq!(r1.kernel.language, lang.as_str());
        let r2 = run(&f, lang, b).await;
        ok(&r2);
        assert_eq!(r2.output.trim(), "10", "{lang}: {}", show(&r2));
        assert!(r2.kernel.reused);
        assert_eq!(r2.kernel.execution_count, 2);
        assert!(!r2.kernel.python.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session_holds_a_kernel_per_language() {
    let f = Fixture::new();
    let py = run(&f, Language::Python, "v = 1").await;
    let r = run(&f, Language::R, "v <- 2").await;
    let js = run(&f, Language::JavaScript, "var v = 3").await;
    for x in [&py, &r, &js] {
        ok(x);
    }
    assert_ne!(py.kernel.id, r.kernel.id);
    assert_ne!(r.kernel.id, js.kernel.id);
    let r2 = run(&f, Language::R, "v").await;
    assert_eq!(r2.output, "[1] 2\n", "{}", show(&r2));
    let js2 = run(&f, Language::JavaScript, "v").await;
    assert_eq!(js2.output, "3\n", "{}", show(&js2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_value_is_echoed() {
    let f = Fixture::new();
    let r = run(&f, Language::R, "y <- 5\ny * 2\ninvisible(7)").await;
    ok(&r);
    assert_eq!(r.output, "[1] 10\n", "{}", show(&r));
    let js = run(&f, Language::JavaScript, "const o = {a: 1, b: 'x'}\no").await;
    ok(&js);
    assert_eq!(js.output, "{ a: 1, b: 'x' }\n", "{}", show(&js));
    let js = run(&f, Language::JavaScript, "let u = 1\nundefined").await;
    ok(&js);
    assert_eq!(js.output, "", "{}", show(&js));
    // let/const may be declared again by a later cell (a re-run).
    let js = run(&f, Language::JavaScript, "const o = 5; o + 1").await;
    ok(&js);
    assert_eq!(js.output, "6\n", "{}", show(&js));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_top_level_await_keeps_declarations() {
    let f = Fixture::new();
    let js = run(
        &f,
        Language::JavaScript,
        "const t = await new Promise((r) => setTimeout(() => r(21), 10))\nlet u = t * 2\nu",
    )
    .await;
    ok(&js);
    assert_eq!(js.output, "42\n", "{}", show(&js));
    let js = run(&f, Language::JavaScript, "t + u").await;
    ok(&js);
    assert_eq!(js.output, "63\n", "{}", show(&js));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_name_the_failing_line() {
    let f = Fixture::new();
    let py = run(
        &f,
        Language::Python,
        "a = 1\ndef g(v):\n    raise ValueError('bad value: %s' % v)\ng(a)",
    )
    .await;
    assert_eq!(py.status, Status::Error, "{}", show(&py));
    assert!(
        py.output.contains("ValueError: bad value: 1"),
        "{}",
        show(&py)
    );
    assert!(py.output.contains("g(a)"), "{}", show(&py));
    let r = run(
        &f,
        Language::R,
        "a <- 1\ng <- function(v) stop('bad value: ', v)\ng(a)",
    )
    .await;
    assert_eq!(r.status, Status::Error, "{}", show(&r));
    assert!(
        r.output.contains("Error in g(a) : bad value: 1"),
        "{}",
        show(&r)
    );
    assert!(r.output.contains("line 3: g(a)"), "{}", show(&r));
    assert!(
        r.error.as_deref().unwrap_or("").contains("bad value: 1"),
        "{}",
        show(&r)
    );
    let js = run(
        &f,
        Language::JavaScript,
        "let a = 1\nfunction g(v) { throw new Error('bad value: ' + v) }\ng(a)",
    )
    .await;
    assert_eq!(js.status, Status::Error, "{}", show(&js));
    assert!(js.output.contains("Error: bad value: 1"), "{}", show(&js));
    assert!(js.output.contains("cell-"), "{}", show(&js));
    assert!(js.output.contains("line 2"), "{}", show(&js));
    // The kernel lives on.
    let again = run(&f, Language::JavaScript, "a").await;
    assert_eq!(again.output, "1\n", "{}", show(&again));
    let again = run(&f, Language::R, "a").await;
    assert_eq!(again.output, "[1] 1\n", "{}", show(&again));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stderr_is_its_own_stream() {
    let f = Fixture::new();
    let r = run(
        &f,
        Language::R,
        "message('to stderr')\nwarning('careful')\ncat('to stdout\\n')",
    )
    .await;
    ok(&r);
    let (out, err) = r.output.split_once("--- stderr ---").expect("stderr part");
    assert!(out.contains("to stdout"), "{}", show(&r));
    assert!(
        err.contains("to stderr") && err.contains("careful"),
        "{}",
        show(&r)
    );
    let js = run(
        &f,
        Language::JavaScript,
        "console.error('to stderr')\nconsole.log('to stdout')",
    )
    .await;
    ok(&js);
    let (out, err) = js.output.split_once("--- stderr ---").expect("stderr part");
    assert!(
        out.contains("to stdout") && err.contains("to stderr"),
        "{}",
        show(&js)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_is_refused_at_once() {
    let f = Fixture::new();
    for (lang, code) in [
        (Language::Python, "x = input('name? ')"),
        (Language::R, "x <- readline('name? ')"),
        (Language::R, "x <- readLines('stdin')"),
        (Language::JavaScript, "process.stdin.on('data', () => {})"),
    ] {
        let r = run(&f, lang, code).await;
        assert_eq!(r.status, Status::Error, "{}", show(&r));
        assert!(r.stdin_requested, "{}", show(&r));
        assert!(
            r.output.contains("interactive input is not supported"),
            "{}",
            show(&r)
        );
        assert!(r.duration_seconds < 5.0);
    }
}

/// The runner owns the request stream: what a cell starts finds /dev/null
/// on its stdin (it reads nothing, at once), and the kernel keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subprocesses_cannot_read_the_request_stream() {
    let f = Fixture::new();
    for (lang, code, want) in [
        (
            Language::Python,
            "import subprocess\nprint(repr(subprocess.run(['cat'], capture_output=True).stdout))",
            "b''\n",
        ),
        (
            Language::R,
            "out <- system('cat; echo done', intern = TRUE)\ncat(out, sep = '|')",
            "done",
        ),
        (
            Language::JavaScript,
            "require('child_process').execSync('cat; echo done', {stdio: ['inherit', 'pipe', 'pipe']}).toString()",
            "'done\\n'\n",
        ),
    ] {
        let r = run(&f, lang, code).await;
        ok(&r);
        assert_eq!(r.output, want, "{lang}: {}", show(&r));
        let again = run(&f, lang, "1 + 1").await;
        ok(&again);
        assert!(again.output.contains('2'), "{lang}: {}", show(&again));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_interrupts_a_busy_loop_and_keeps_state() {
    let f = Fixture::new();
    for (lang, set, busy, get, want) in [
        (
            Language::Python,
            "kept = 'yes'",
            "i = 0\nwhile True:\n    i += 1",
            "kept",
            "'yes'\n",
        ),
        (
            Language::R,
            "kept <- 'yes'",
            "i <- 0\nwhile (TRUE) i <- i + 1",
            "kept",
            "[1] \"yes\"\n",
        ),
        (
            Language::JavaScript,
            "var kept = 'yes'",
            "let i = 0\nwhile (true) { i++ }",
            "kept",
            "'yes'\n",
        ),
    ] {
        ok(&run(&f, lang, set).await);
        let r = f
            .reg
            .execute(
                ExecuteRequest::new(busy)
                    .language(lang)
                    .timeout(Duration::from_millis(1500)),
            )
            .await;
        assert_eq!(r.status, Status::Timeout, "{}", show(&r));
        assert_eq!(r.kernel.state_kept, Some(true), "{}", show(&r));
        let after = run(&f, lang, get).await;
        ok(&after);
        assert_eq!(after.output, want, "{}", show(&after));
        assert!(after.kernel.reused);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_return_structured_results() {
    let f = Fixture::new();
    std::fs::write(f.work().join("note.txt"), "alpha\nbeta\n").unwrap();
    let r = run(
        &f,
        Language::R,
        "res <- read_file(path = 'note.txt')\ncat(res$total_lines, res$content, sep = '|')",
    )
    .await;
    ok(&r);
    assert!(r.output.starts_with("2|"), "{}", show(&r));
    assert!(r.output.contains("alpha"), "{}", show(&r));
    assert_eq!(r.tool_calls_made, 1);
    let r = run(&f, Language::R, "e <- tryCatch(read_file(path = 'missing.txt'), ToolError = function(e) e)\ncat(class(e)[1], conditionMessage(e))").await;
    ok(&r);
    assert!(r.output.starts_with("ToolError read_file:"), "{}", show(&r));
    let js = run(
        &f,
        Language::JavaScript,
        "const res = await read_file({path: 'note.txt'})\nres.total_lines",
    )
    .await;
    ok(&js);
    assert_eq!(js.output, "2\n", "{}", show(&js));
    // Parallel calls.
    let js = run(
        &f,
        Language::JavaScript,
        "const all = await Promise.all([1, 2, 3, 4].map(() => read_file({path: 'note.txt'})))\nall.length",
    )
    .await;
    ok(&js);
    assert_eq!(js.output, "4\n", "{}", show(&js));
    assert_eq!(js.tool_calls_made, 4);
    let js = run(
        &f,
        Language::JavaScript,
        "try { await read_file({path: 'missing.txt'}) } catch (e) { console.log(e instanceof ToolError, e.code) }",
    )
    .await;
    ok(&js);
    assert!(js.output.starts_with("true "), "{}", show(&js));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_prints_factors_and_data_frames() {
    let f = Fixture::new();
    let r = run(
        &f,
        Language::R,
        "df <- data.frame(name = c('a', 'b'), n = 1:2)\ndf",
    )
    .await;
    ok(&r);
    assert_eq!(r.output, "  name n\n1    a 1\n2    b 2\n", "{}", show(&r));
    let r = run(&f, Language::R, "factor(c('lo', 'hi', 'lo'))").await;
    ok(&r);
    assert_eq!(r.output, "[1] lo hi lo\nLevels: hi lo\n", "{}", show(&r));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_missing_package_gets_an_install_hint() {
    let f = Fixture::new();
    let r = run(&f, Language::R, "library(surelynotapkg)").await;
    assert_eq!(r.status, Status::Error, "{}", show(&r));
    let hint = r.hint.clone().unwrap_or_default();
    assert!(
        hint.contains("install.packages(\"surelynotapkg\")"),
        "{}",
        show(&r)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_plots_come_back_as_png_figures() {
    require(Language::R);
    let ggplot2 = std::process::Command::new("Rscript")
        .args(["-e", "library(ggplot2)"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ggplot2,
        "the R package ggplot2 is not installed; install it with: scripts/test-deps.sh (apt-get install r-cran-ggplot2)"
    );
    let f = Fixture::new();
    let r = run(&f, Language::R, "plot(1:10)\nhist(rnorm(100))").await;
    ok(&r);
    assert_eq!(r.display.len(), 2, "{}", show(&r));
    for d in &r.display {
        assert_eq!(d.mime, "image/png");
        let bytes = std::fs::read(&d.path).unwrap();
        assert!(bytes.starts_with(b"\x89PNG"), "not a PNG");
    }
    let r = run(
        &f,
        Language::R,
        "library(ggplot2)\nggplot(data.frame(x = 1:3, y = c(2, 4, 3)), aes(x, y)) + geom_line()",
    )
    .await;
    ok(&r);
    assert_eq!(r.display.len(), 1, "{}", show(&r));
    let r = run(&f, Language::R, "1 + 1").await;
    assert!(r.display.is_empty(), "{}", show(&r));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_unhandled_rejection_fails_the_cell() {
    let f = Fixture::new();
    let js = run(
        &f,
        Language::JavaScript,
        "Promise.reject(new Error('nobody caught me'))\n1",
    )
    .await;
    assert_eq!(js.status, Status::Error, "{}", show(&js));
    assert!(js.output.contains("nobody caught me"), "{}", show(&js));
    assert!(
        js.output
            .contains("line 1: Promise.reject(new Error('nobody caught me'))"),
        "{}",
        show(&js)
    );
    let js = run(
        &f,
        Language::JavaScript,
        "await Promise.reject(new Error('awaited'))",
    )
    .await;
    assert_eq!(js.status, Status::Error, "{}", show(&js));
    assert!(js.output.contains("awaited"), "{}", show(&js));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_process_exit_ends_the_kernel_and_the_next_cell_is_fresh() {
    let f = Fixture::new();
    ok(&run(&f, Language::JavaScript, "var keep = 1").await);
    let js = run(&f, Language::JavaScript, "process.exit(3)").await;
    assert_eq!(js.status, Status::Error, "{}", show(&js));
    assert_eq!(js.kernel.ended, Some(true), "{}", show(&js));
    assert!(
        js.error.as_deref().unwrap_or("").contains("status 3"),
        "{}",
        show(&js)
    );
    let next = run(&f, Language::JavaScript, "typeof keep").await;
    ok(&next);
    assert_eq!(next.output, "'undefined'\n", "{}", show(&next));
    assert!(next.kernel.state_reset, "{}", show(&next));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_quit_ends_the_kernel_with_its_status() {
    let f = Fixture::new();
    let r = run(&f, Language::R, "quit(status = 4)").await;
    assert_eq!(r.status, Status::Error, "{}", show(&r));
    assert_eq!(r.exit_code, 4, "{}", show(&r));
    assert_eq!(r.kernel.ended, Some(true), "{}", show(&r));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_reported() {
    let f = Fixture::new();
    for lang in [Language::R, Language::JavaScript] {
        let r = run(&f, lang, "1").await;
        ok(&r);
        let u = r.usage.expect("usage");
        assert!(u.peak_rss_kb > 1000, "{lang}: {}", show(&r));
    }
}

const HOST_KILL: &str =
    "languages::a_host_killed_mid_cell_takes_its_r_and_javascript_kernels_along";

/// The host dies with SIGKILL while R and JavaScript cells spin: the
/// runners see EOF on their stdin (R's relay, JavaScript's reader thread)
/// and kill their process groups at once — nothing polls, and nothing else
/// (no parent-death signal) would end them.
#[test]
fn a_host_killed_mid_cell_takes_its_r_and_javascript_kernels_along() {
    if common::is_child(HOST_KILL) {
        host_kill_child();
        return;
    }
    require(Language::R);
    require(Language::JavaScript);
    let tmp = tempfile::tempdir().unwrap();
    let pidfile = tmp.path().join("pids");
    let mut child = common::spawn_child(
        HOST_KILL,
        &[
            ("TOOLCELL_TEST_TMP", tmp.path().to_str().unwrap()),
            ("TOOLCELL_TEST_PIDFILE", pidfile.to_str().unwrap()),
        ],
    );
    let both = || {
        std::fs::read_to_string(&pidfile)
            .map(|t| t.lines().count() >= 2)
            .unwrap_or(false)
    };
    if !common::eventually_blocking(Duration::from_secs(60), both) {
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        panic!(
            "the host never got both cells running:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = std::fs::read_to_string(&pidfile).unwrap();
    // Sandboxed, both runners are pid 2 of their own namespaces: every
    // process of both sandboxes is watched instead (the host's are found
    // by the scratch directory in their environment).
    let mut pids = common::sandboxed_processes(tmp.path().to_str().unwrap());
    if pids.is_empty() {
        pids = ["r", "js"].map(|t| common::tagged_pid(&text, t)).to_vec();
    }
    assert!(pids.len() >= 2, "{text}: {pids:?}");
    assert!(pids.iter().all(|&p| common::alive(p)), "{text}");
    child.kill().unwrap();
    child.wait().unwrap();
    let gone = common::eventually_blocking(Duration::from_secs(5), || {
        pids.iter().all(|&p| !common::alive(p))
    });
    let left: Vec<u32> = pids.iter().copied().filter(|&p| common::alive(p)).collect();
    for p in &left {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*p as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(gone, "kernels alive 5 s after the host died: {left:?}");
}

fn host_kill_child() {
    let tmp = std::path::PathBuf::from(std::env::var("TOOLCELL_TEST_TMP").unwrap());
    let pidfile = std::env::var("TOOLCELL_TEST_PIDFILE").unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut o = common::opts(&tmp);
        o.default_cwd = tmp.clone();
        let reg = std::sync::Arc::new(toolcell_host::Registry::new(o).unwrap());
        let r_code = format!(
            "cat(sprintf('r=%d\\n', Sys.getpid()), file = {pidfile:?}, append = TRUE)\nwhile (TRUE) {{}}"
        );
        let js_code = format!(
            "require('fs').appendFileSync({pidfile:?}, `js=${{process.pid}}\\n`)\nwhile (true) {{}}"
        );
        let a = {
            let reg = std::sync::Arc::clone(&reg);
            tokio::spawn(async move {
                reg.execute(ExecuteRequest::new(r_code).language(Language::R).owner("a"))
                    .await
            })
        };
        let b = {
            let reg = std::sync::Arc::clone(&reg);
            tokio::spawn(async move {
                reg.execute(
                    ExecuteRequest::new(js_code)
                        .language(Language::JavaScript)
                        .owner("b"),
                )
                .await
            })
        };
        let _ = (a.await, b.await);
        panic!("the cells should never end");
    });
}
