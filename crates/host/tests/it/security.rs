//! What a cell cannot do to the host (SECURITY.md, "What is protected"): forge
//! frames (with a guessed sentinel, or the real one dug out of the runner's
//! memory) to change another cell's result, see the host's secret-named
//! variables, or get a secret value past the redactor into the output or the
//! spill file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use crate::common::{Fixture, assert_success, show};
use toolcell_kernel::Status;

/// Finds the runner's frame marker (`"\n" + SENTINEL + " "`) the hard way:
/// up the call stack into the runner's globals, else through every object
/// the garbage collector tracks. Defines `frame(mark, obj)` to forge one.
const DIG: &str = r#"
import gc, json, os, sys, threading, time

def find_mark():
    f = sys._getframe()
    while f is not None:
        m = f.f_globals.get('_MARK')
        if isinstance(m, bytes) and len(m) > 2:
            return m
        f = f.f_back
    for o in gc.get_objects():
        if isinstance(o, dict):
            m = o.get('_MARK')
            if isinstance(m, bytes) and len(m) > 2:
                return m
    return None

def frame(mark, obj):
    body = json.dumps(obj).encode()
    return mark + str(len(body)).encode() + b'\n' + body

def forged_result(rid):
    return {'type': 'result', 'id': rid, 'status': 'error', 'exit_code': 99,
            'traceback': 'FORGED-TRACEBACK', 'execution_count': 999, 'stdin_requested': True,
            'usage': {'cpu_seconds': 0.0, 'peak_rss_kb': 0, 'wall_seconds': 0.0}, 'display': []}

MARK = find_mark()
GUESS = b'\n' + b'0123456789abcdef' * 2 + b' '
print('dug out the real marker:', MARK is not None and MARK.startswith(b'\n') and MARK.endswith(b' '))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_frames_cannot_change_this_or_another_cells_result() {
    let f = Fixture::new();
    let r = f.run(DIG).await;
    assert_success(&r);
    assert_eq!(r.output, "dug out the real marker: True\n", "{}", show(&r));

    // In its own cell: a frame with a guessed sentinel is plain output; one
    // with the real sentinel but a guessed id is dropped.
    let r = f
        .run(
            "sys.stdout.flush()\n\
             os.write(1, frame(GUESS, forged_result('00000000deadbeef')))\n\
             os.write(1, frame(MARK, forged_result('11111111deadbeef')))\n\
             os.write(2, frame(MARK, {'type': 'end', 'id': '11111111deadbeef'}))\n\
             print()\n\
             print('cell two done')",
        )
        .await;
    assert_success(&r);
    assert_eq!(r.kernel.execution_count, 2, "{}", show(&r));
    assert!(!r.stdin_requested);
    assert!(
        r.output.contains("0123456789abcdef0123456789abcdef"),
        "{}",
        r.output
    );
    assert_eq!(
        r.output.matches("FORGED-TRACEBACK").count(),
        1,
        "{}",
        r.output
    );
    assert!(
        !r.output.contains("11111111deadbeef"),
        "the real-sentinel frame leaked: {}",
        r.output
    );
    assert!(r.output.ends_with("cell two done\n"), "{}", r.output);

    // Into ANOTHER cell: a thread started now forges results and end frames
    // with the real sentinel and guessed ids while the next cell runs.
    let r = f
        .run(
            "go = threading.Event()\n\
             stop = threading.Event()\n\
             sent = []\n\
             def forger():\n\
             \x20   go.wait()\n\
             \x20   while not stop.is_set():\n\
             \x20       rid = os.urandom(8).hex()\n\
             \x20       os.write(2, frame(MARK, {'type': 'end', 'id': rid}))\n\
             \x20       os.write(1, frame(MARK, forged_result(rid)))\n\
             \x20       sent.append(rid)\n\
             \x20       time.sleep(0.001)\n\
             threading.Thread(target=forger, daemon=True).start()",
        )
        .await;
    assert_success(&r);
    let r = f
        .run("go.set()\ntime.sleep(0.3)\nstop.set()\nprint('the real cell four', len(sent) > 10)")
        .await;
    assert_eq!(r.status, Status::Success, "{}", show(&r));
    assert_eq!(r.exit_code, 0);
    assert_eq!(r.kernel.execution_count, 4);
    assert!(!r.stdin_requested);
    assert_eq!(r.output, "the real cell four True\n", "{}", show(&r));
    // The kernel still answers normally.
    assert_eq!(f.ok("print('five')").await, "five\n");
}

const SECRETS: &str = "security::secret_values_are_masked_and_secret_names_never_reach_the_kernel";
const API_KEY: &str = "tc-test-Zq8sV3kR9mW2xY7pL4nB";
const PASSED_TOKEN: &str = "passed-Hc5T1uQ0wE6rN8aJ3dK2";

#[test]
fn secret_values_are_masked_and_secret_names_never_reach_the_kernel() {
    // The variables must be in the host's environment before the registry
    // is built; a host process of its own gets them from the start.
    if !common::is_child(SECRETS) {
        common::run_child(
            SECRETS,
            &[
                ("TOOLCELL_TEST_API_KEY", API_KEY),
                ("LC_SECRET_THING", "lc-secret-value-123456"),
                ("HOME_PASSWORD", "home-password-value-98765"),
                ("MY_PASSED_TOKEN", PASSED_TOKEN),
                ("TOOLCELL_TEST_PLAIN", "plain-but-not-allowed"),
                ("LANG_TEST_EXTRA", "allowed-prefix"),
            ],
        );
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let f = Fixture::with(|o| {
            o.passthrough = vec!["MY_PASSED_TOKEN".into()];
            o.max_stdout_bytes = 1000;
        });
        // The child environment: allowed prefixes without secret words,
        // plus passthrough, plus toolcell's own.
        let r = f
            .run(
                "import os\n\
                 words = ['KEY', 'TOKEN', 'SECRET', 'PASSWORD', 'PASSWD', 'CREDENTIAL', 'CREDS', 'AUTH', 'BEARER', 'DSN', 'WEBHOOK', 'APIKEY']\n\
                 print(sorted(k for k in os.environ if any(w in k.upper() for w in words)))\n\
                 print('TOOLCELL_TEST_PLAIN' in os.environ, os.environ.get('LANG_TEST_EXTRA'))",
            )
            .await;
        assert_success(&r);
        assert_eq!(
            r.output,
            "['MY_PASSED_TOKEN', 'TOOLCELL_RPC_TOKEN']\nFalse allowed-prefix\n",
            "{}",
            show(&r)
        );

        // Printed values are masked, also when a passed-through cell reads
        // its own variable, and across a spill.
        let code = format!(
            "import os\nv = {API_KEY:?}\nprint('key:', v)\nprint('passed:', os.environ['MY_PASSED_TOKEN'])\nprint(('filler line ' * 10 + '\\n') * 300, end='')\nprint('key again:' + v + '.')"
        );
        let r = f.run(&code).await;
        assert_success(&r);
        assert!(r.stdout_truncated);
        for leak in [API_KEY, PASSED_TOKEN] {
            assert!(!r.output.contains(leak), "{leak} leaked into the output: {}", r.output);
        }
        assert!(r.output.starts_with("key: «redacted:"), "{}", r.output);
        assert!(r.output.contains("passed: «redacted:"), "{}", r.output);
        assert!(r.output.contains("key again:«redacted:"), "{}", r.output);
        let spill = std::fs::read_to_string(r.stdout_spill_path.as_deref().unwrap()).unwrap();
        assert!(spill.starts_with("key: «redacted:"), "{}", &spill[..100]);
        assert!(spill.contains("key again:«redacted:"));
        for leak in [API_KEY, PASSED_TOKEN] {
            assert!(!spill.contains(leak), "{leak} reached the spill file");
        }
        // Tracebacks are cleaned too.
        let r = f.run(&format!("raise ValueError({API_KEY:?})")).await;
        assert_eq!(r.status, Status::Error);
        assert!(!r.output.contains(API_KEY) && !r.error.as_deref().unwrap().contains(API_KEY), "{}", show(&r));
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sentinel_is_only_in_memory_and_the_request_pipe_is_out_of_reach() {
    let f = Fixture::new();
    assert_success(&f.run(DIG).await);
    let r = f
        .run(
            "s = MARK[1:-1].decode()\n\
             kdir = os.path.dirname(sys.modules['toolcell_tools'].__file__)\n\
             files = ''.join(open(os.path.join(kdir, n), errors='replace').read() for n in os.listdir(kdir) if os.path.isfile(os.path.join(kdir, n)))\n\
             print('env', s in repr(dict(os.environ)))\n\
             print('argv', s in open('/proc/self/cmdline', 'rb').read().decode(errors='replace'))\n\
             print('files', s in files)\n\
             try:\n\
             \x20   os.fstat(3)\n\
             \x20   print('fd3 open')\n\
             except OSError:\n\
             \x20   print('fd3 closed')",
        )
        .await;
    assert_success(&r);
    assert_eq!(
        r.output,
        "env False\nargv False\nfiles False\nfd3 closed\n",
        "{}",
        show(&r)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_that_redirects_or_closes_its_fds_cannot_cut_the_protocol() {
    let f = Fixture::new();
    let r = f
        .run(
            "import os, sys\n\
             print('before', flush=True)\n\
             null = os.open('/dev/null', os.O_WRONLY)\n\
             os.dup2(null, 1)\n\
             os.dup2(null, 2)\n\
             os.close(0)\n\
             kept = 'yes'\n\
             print('into the void')",
        )
        .await;
    assert_success(&r);
    assert_eq!(r.output, "before\n");
    // The kernel still answers; the cell's own fds stay redirected.
    let r = f.run("print('also void')\nkept").await;
    assert_success(&r);
    assert_eq!(r.kernel.execution_count, 2);
    assert_eq!(r.output, "");
    // Closing fds 1 and 2 outright does not cut it either.
    let r = f.run("os.close(1)\nos.close(2)\nkept2 = kept").await;
    assert_success(&r);
    // Results still arrive; the state is there (seen through a file, since
    // the cell has no stdout any more).
    let out = f.work().join("kept.txt");
    let r = f
        .run(&format!(
            "open({:?}, 'w').write(kept2 + '!')\npass",
            out.display().to_string()
        ))
        .await;
    assert_success(&r);
    assert_eq!(r.kernel.execution_count, 4);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "yes!");
}

#[cfg(feature = "journal")]
const CUTS: &str = "security::a_secret_is_masked_wherever_a_line_or_a_traceback_is_cut";
#[cfg(feature = "journal")]
const HOST_SECRET: &str = "hunter2-Qz7vX9wK3mP5bT8yR4nL6cJ2hD0sF1gA";
#[cfg(feature = "journal")]
const OPENAI_KEY: &str = "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";

/// Every 5-byte piece of `secret` that occurs in `text`.
#[cfg(feature = "journal")]
fn pieces_of(secret: &str, text: &str) -> Vec<String> {
    (0..=secret.len() - 5)
        .map(|i| &secret[i..i + 5])
        .filter(|p| text.contains(p))
        .map(str::to_string)
        .collect()
}

/// A host secret glued to 16 KiB of filler, and an OpenAI key in a `&pw=`
/// value where the redactor used to cut a long line, are masked in the
/// result, the spill file and the journal; a traceback over the runner's
/// bound (with the host's stderr cap above it) is cut by the runner at line
/// boundaries only, so no part of a secret is left at the cut.
#[test]
#[cfg(feature = "journal")]
fn a_secret_is_masked_wherever_a_line_or_a_traceback_is_cut() {
    if !common::is_child(CUTS) {
        common::run_child(CUTS, &[("TOOLCELL_TEST_API_KEY", HOST_SECRET)]);
        return;
    }
    use toolcell_host::journal::{HistoryQuery, Journal};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("journal.db");
        let journal = Journal::open(&db).unwrap();
        let j = journal.clone();
        let f = Fixture::with(move |o| {
            o.max_stdout_bytes = 1000;
            o.max_stderr_bytes = 3_000_000;
            o.journal = Some(j);
        });
        let cells = [
            (
                format!("print('A' * (16384 - 8) + {HOST_SECRET:?})"),
                HOST_SECRET,
            ),
            (
                format!("print('x=' + 'E' * (16384 - 10) + '&pw=' + {OPENAI_KEY:?})"),
                OPENAI_KEY,
            ),
        ];
        for (code, secret) in &cells {
            let r = f.run_as("cuts", code).await;
            assert_success(&r);
            assert!(r.stdout_truncated, "{}", show(&r));
            assert!(r.output.contains("«redacted:"), "{}", &r.output[400..]);
            assert_eq!(
                pieces_of(secret, &r.output),
                Vec::<String>::new(),
                "{}",
                &r.output[400..]
            );
            let spill = std::fs::read_to_string(r.stdout_spill_path.as_deref().unwrap()).unwrap();
            assert!(spill.contains("«redacted:"), "{}", &spill[16000..]);
            assert_eq!(
                pieces_of(secret, &spill),
                Vec::<String>::new(),
                "{}",
                &spill[16000..]
            );
        }

        // 200 000 lines of the secret: 8 MB of traceback, over the runner's
        // bound of 2^22 characters (its old head/tail cut fell inside a line).
        let code = format!("raise ValueError(('{HOST_SECRET}\\n') * 200_000)");
        let r = f.run_as("cuts", &code).await;
        assert_eq!(r.status, Status::Error, "{}", show(&r));
        let stderr = r.output.split_once("--- stderr ---\n").unwrap().1;
        assert!(stderr.contains("traceback truncated"), "{}", &stderr[..300]);
        assert!(stderr.contains("«redacted:secret»\n"), "{}", &stderr[..300]);
        assert_eq!(pieces_of(HOST_SECRET, &r.output), Vec::<String>::new());
        // Only whole masked lines either side of the runner's notice.
        for line in stderr
            .lines()
            .skip_while(|l| !l.starts_with("ValueError"))
            .skip(1)
        {
            assert!(
                line.is_empty()
                    || line == "«redacted:secret»"
                    || line.starts_with("... [traceback truncated: "),
                "{line:?}"
            );
        }

        // One line over the runner's bound: left out whole, the exception's
        // type stands in for it.
        let code = format!("raise ValueError('A' * 5_000_000 + {HOST_SECRET:?})");
        let r = f.run_as("cuts", &code).await;
        assert_eq!(r.status, Status::Error, "{}", show(&r));
        assert!(
            r.output
                .ends_with("ValueError: (message too long to show)\n"),
            "{}",
            &r.output[r.output.len().saturating_sub(300)..]
        );
        assert!(r.output.len() < 10_000, "{}", r.output.len());
        assert_eq!(pieces_of(HOST_SECRET, &r.output), Vec::<String>::new());

        assert!(
            journal.flush(std::time::Duration::from_secs(20)),
            "journal did not flush"
        );
        let rows = Journal::history(&db, &HistoryQuery::session("cuts")).unwrap();
        assert_eq!(rows.len(), 4);
        for row in &rows {
            for secret in [HOST_SECRET, OPENAI_KEY] {
                assert_eq!(pieces_of(secret, &row.output), Vec::<String>::new());
                assert_eq!(pieces_of(secret, &row.code), Vec::<String>::new());
            }
        }
        f.reg.shutdown_all().await;
    });
}
