//! Tool calls from real cells through the generated stub, the kernel's rpc
//! socket and the built-in tools (docs/protocol.md, "The tool socket"): every
//! built-in that works offline, `web_extract` against a loopback server this
//! test starts, the per-cell budget, and a thread left behind after its cell.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use crate::common::{Fixture, assert_success, show};
use toolcell_kernel::Status;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_and_terminal_tools_work_from_a_cell_and_are_counted() {
    let f = Fixture::new();
    let code = r#"
from toolcell_tools import read_file, write_file, search_files, patch, terminal
w = write_file('notes/a.txt', 'alpha\nbeta\ngamma\n')
print('write', w['bytes_written'])
r = read_file('notes/a.txt', offset=2, limit=1)
print('read', repr(r['content']), r['total_lines'], r['truncated'])
s = search_files('gam+a', path='notes')
print('search', s['total'], [m.get('path', m) for m in s['matches']])
p = patch('notes/a.txt', 'beta', 'BETA')
print('patch', p['replacements'])
t = terminal('cat notes/a.txt && echo done')
print('terminal', t['exit_code'], repr(t['output']))
"#;
    let r = f.run(code).await;
    assert_success(&r);
    assert_eq!(r.tool_calls_made, 5, "{}", show(&r));
    assert_eq!(
        r.output,
        "write 17\nread 'beta\\n' 3 True\nsearch 1 ['notes/a.txt']\npatch 1\nterminal 0 'alpha\\nBETA\\ngamma\\ndone\\n'\n"
    );
    // The tools acted on the session's working directory on disk.
    let on_disk = std::fs::read_to_string(f.work().join("notes/a.txt")).unwrap();
    assert_eq!(on_disk, "alpha\nBETA\ngamma\n");
    // The count is per cell.
    let r = f.run("read_file('notes/a.txt')['total_lines']").await;
    assert_success(&r);
    assert_eq!(r.output, "3\n");
    assert_eq!(r.tool_calls_made, 1);
}

/// A one-page HTTP server on 127.0.0.1; returns its base URL.
#[cfg(feature = "web")]
async fn loopback_server(page: &'static str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut buf = [0u8; 4096];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    page.len()
                );
                let _ = sock.write_all(head.as_bytes()).await;
                let _ = sock.write_all(page.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

// The web tools are in the kernel's default tool set only with its `web`
// feature (on by default).
#[cfg(feature = "web")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_tools_extract_from_a_loopback_server_and_search_without_a_provider_fails_clearly() {
    let f = Fixture::new();
    let base = loopback_server(
        "<html><head><title>Loopback page</title></head><body><h1>Hello from the test</h1>\
         <p>A paragraph with <b>bold</b> text.</p></body></html>",
    )
    .await;
    let code = format!(
        r#"
from toolcell_tools import web_extract, web_search, ToolError
res = web_extract([{url:?}])['results'][0]
print('title', res['title'])
print('content', 'Hello from the test' in res['content'], 'bold' in res['content'], res.get('error'))
try:
    web_search('anything')
    print('search answered')
except ToolError as e:
    print('search refused', e.code)
    print(str(e))
"#,
        url = format!("{base}/page.html")
    );
    let r = f.run(&code).await;
    assert_success(&r);
    let out = &r.output;
    assert!(out.contains("title Loopback page\n"), "{out}");
    assert!(out.contains("content True True None\n"), "{out}");
    assert!(out.contains("search refused "), "{out}");
    assert!(!out.contains("search answered"), "{out}");
    assert!(
        out.to_lowercase().contains("search_provider"),
        "the error should say how to configure one: {out}"
    );
    assert_eq!(r.tool_calls_made, 2, "{}", show(&r));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tool_budget_raises_tool_error_in_python_with_a_hint() {
    let f = Fixture::with(|o| o.max_tool_calls = 3);
    std::fs::write(f.work().join("a.txt"), "x\n").unwrap();
    // Caught in Python: the code says why.
    let r = f
        .run(
            "from toolcell_tools import read_file, ToolError\nn = 0\ntry:\n    for _ in range(10):\n        read_file('a.txt')\n        n += 1\nexcept ToolError as e:\n    print(n, e.code)",
        )
        .await;
    assert_success(&r);
    assert_eq!(r.output, "3 budget_exhausted\n");
    assert_eq!(r.tool_calls_made, 3);
    // Uncaught: an error with the budget hint.
    let r = f.run("for _ in range(10):\n    read_file('a.txt')").await;
    assert_eq!(r.status, Status::Error, "{}", show(&r));
    assert_eq!(r.tool_calls_made, 3);
    assert!(r.output.contains("ToolError"), "{}", r.output);
    let hint = r.hint.as_deref().unwrap_or_default();
    assert!(hint.contains("all 3 tool calls"), "{}", show(&r));
    // The budget is per cell: the next one may call again.
    let r = f.run("read_file('a.txt')['total_lines']").await;
    assert_success(&r);
    assert_eq!(r.tool_calls_made, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_left_behind_is_refused_and_its_output_reaches_the_next_cell() {
    let f = Fixture::new();
    std::fs::write(f.work().join("a.txt"), "x\n").unwrap();
    let done = f.work().join("late-done");
    let code = format!(
        r#"
import threading, time
from toolcell_tools import read_file, ToolError
late = {{}}
def later():
    time.sleep(0.3)
    try:
        read_file('a.txt')
        late['outcome'] = 'ran'
    except ToolError as e:
        late['outcome'] = e.code
    print('late thread says', late['outcome'], flush=True)
    {mark}
threading.Thread(target=later, daemon=True).start()
print('cell one ends')
"#,
        mark = common::py_mark(&done, "1").replace('\n', "\n    ")
    );
    let r = f.run(&code).await;
    assert_success(&r);
    assert_eq!(r.output, "cell one ends\n");
    assert_eq!(r.tool_calls_made, 0);
    common::wait_file(&done, Duration::from_secs(10)).await;
    let r = f.run("print('outcome:', late['outcome'])").await;
    assert_success(&r);
    assert_eq!(
        r.tool_calls_made,
        0,
        "the refused call is not this cell's: {}",
        show(&r)
    );
    assert_eq!(
        r.output,
        "[toolcell: output written after the previous cell ended]\nlate thread says no_active_cell\noutcome: no_active_cell\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_work_over_the_tcp_transport_too() {
    let f = Fixture::with(|o| o.rpc_tcp = true);
    std::fs::write(f.work().join("a.txt"), "one\ntwo\n").unwrap();
    let r = f
        .run("import os\nfrom toolcell_tools import read_file\nprint(os.environ['TOOLCELL_RPC'].startswith('tcp://127.0.0.1:'), read_file('a.txt')['total_lines'])")
        .await;
    assert_success(&r);
    assert_eq!(r.output, "True 2\n");
    assert_eq!(r.tool_calls_made, 1);
}

/// Pids whose command line contains `needle`.
fn pids_running(needle: &str) -> Vec<u32> {
    common::entries(std::path::Path::new("/proc"))
        .iter()
        .filter_map(|p| p.file_name()?.to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
                && common::alive(*pid)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_does_not_outlive_its_cells_timeout() {
    let f = Fixture::new();
    f.ok("from toolcell_tools import terminal\nkept = 'yes'")
        .await;
    // A unique sleep length marks the host-side process the tool starts.
    let run = f.reg.execute(
        toolcell_host::ExecuteRequest::new("terminal('sleep 31.4159; echo finished')")
            .timeout(Duration::from_millis(800)),
    );
    let seen = common::eventually(Duration::from_secs(5), || {
        !pids_running("31.4159").is_empty()
    });
    let (r, seen) = tokio::join!(run, seen);
    assert!(seen, "the tool's process never ran");
    assert_eq!(r.status, Status::Timeout, "{}", show(&r));
    let gone = common::eventually(Duration::from_secs(3), || {
        pids_running("31.4159").is_empty()
    })
    .await;
    assert!(
        gone,
        "the tool's process outlived the cell: {:?}",
        pids_running("31.4159")
    );
    // The kernel and its state survive the interrupted call.
    assert_eq!(r.kernel.state_kept, Some(true), "{}", show(&r));
    assert_eq!(f.ok("print(kept)").await, "yes\n");
    // And the stub can call tools again.
    let r = f.run("terminal('echo again')['output']").await;
    assert_success(&r);
    assert_eq!(r.output, "'again\\n'\n");
}
