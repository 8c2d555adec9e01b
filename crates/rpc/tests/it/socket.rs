//! The server over real sockets: permissions, peer uid, every error code,
//! concurrency and abuse.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::common::{PyDriver, RawClient, deadline, runtime};
use serde_json::{Value, json};
use toolcell_rpc::testing::EchoDispatch;
use toolcell_rpc::{
    BindError, CallOutcome, CellSpec, ErrorCode, Server, ServerConfig, peer_allowed,
};

fn code(reply: &Value) -> &str {
    assert_eq!(reply["ok"], false, "expected a refusal, got {reply}");
    assert!(
        reply["error"].as_str().is_some_and(|e| !e.is_empty()),
        "refusal without a message: {reply}"
    );
    reply["code"].as_str().unwrap()
}

#[test]
fn every_error_code_from_a_real_client_on_one_connection() {
    let rt = runtime();
    let _g = rt.enter();
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::bind_unix(
        tmp.path().join("k"),
        Arc::new(EchoDispatch::new()),
        ServerConfig::default().max_line_bytes(1024),
    )
    .unwrap();
    let mut c = RawClient::connect(server.endpoint(), server.token().expose());

    let mut huge = vec![b'x'; 5000];
    huge.push(b'\n');
    assert_eq!(code(&c.line(&huge)), "too_large");
    assert_eq!(code(&c.line(b"this is not json\n")), "bad_request");
    assert_eq!(
        code(&c.line(b"{\"tool\":\"echo\",\"args\":[1],\"token\":\"x\"}\n")),
        "bad_request"
    );
    let wrong = c.line(b"{\"tool\":\"echo\",\"args\":{},\"token\":\"nope\",\"id\":41}\n");
    assert_eq!(code(&wrong), "bad_token");
    assert_eq!(wrong["id"], 41);
    assert_eq!(
        code(&c.line(b"{\"tool\":\"echo\",\"args\":{}}\n")),
        "bad_token"
    );
    assert_eq!(code(&c.call("echo", json!({}))), "no_active_cell");

    let cell = server
        .open_cell(
            CellSpec::new("a", deadline(60))
                .budget(1)
                .enable(["echo", "sleep"]),
        )
        .unwrap();
    assert_eq!(code(&c.call("nope", json!({}))), "unknown_tool");
    assert_eq!(code(&c.call("fail", json!({}))), "not_allowed");
    assert_eq!(
        code(&c.call("echo", json!({"danger": true}))),
        "blocked_param"
    );
    assert_eq!(code(&c.call("sleep", json!({"ms": "soon"}))), "bad_args");
    let ok = c.call("echo", json!({"danger": false, "x": 1}));
    assert_eq!(
        ok,
        json!({"ok": true, "result": {"cell": "a", "args": {"danger": false, "x": 1}}})
    );
    assert_eq!(code(&c.call("echo", json!({}))), "budget_exhausted");
    let report = cell.settle();
    assert_eq!(report.dispatched(), 1);
    for (c, n) in [
        (ErrorCode::UnknownTool, 1),
        (ErrorCode::NotAllowed, 1),
        (ErrorCode::BlockedParam, 1),
        (ErrorCode::BadArgs, 1),
        (ErrorCode::BudgetExhausted, 1),
    ] {
        assert_eq!(report.refused(c), n, "{c}");
    }

    let cell = server
        .open_cell(CellSpec::new("b", deadline(60)).enable(["fail"]))
        .unwrap();
    let failed = c.call("fail", json!({"message": "disk on fire"}));
    assert_eq!(code(&failed), "tool_failed");
    assert_eq!(failed["error"], "disk on fire");
    drop(cell);

    let cell = server
        .open_cell(
            CellSpec::new(
                "c",
                tokio::time::Instant::now() + Duration::from_millis(300),
            )
            .enable(["sleep"]),
        )
        .unwrap();
    assert_eq!(code(&c.call("sleep", json!({"ms": 20_000}))), "timeout");
    let report = cell.settle();
    assert_eq!(
        report.calls()[0].outcome(),
        CallOutcome::Failed(ErrorCode::Timeout)
    );
    // Every code of docs/protocol.md ("Checks, in order") has now been seen on
    // this one connection, which is still open.
    assert_eq!(code(&c.call("echo", json!({}))), "no_active_cell");
}

#[test]
fn directory_is_0700_and_socket_0600_and_removed_on_drop() {
    let rt = runtime();
    let _g = rt.enter();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("nested/kernel");
    let server =
        Server::bind_unix(&dir, Arc::new(EchoDispatch::new()), ServerConfig::default()).unwrap();
    let dmeta = std::fs::metadata(&dir).unwrap();
    assert_eq!(dmeta.mode() & 0o7777, 0o700);
    let sock = dir.join("rpc.sock");
    let smeta = std::fs::symlink_metadata(&sock).unwrap();
    assert!(smeta.file_type().is_socket());
    assert_eq!(smeta.mode() & 0o7777, 0o600);
    assert_eq!(server.endpoint(), format!("unix:{}", sock.display()));
    assert_eq!(server.socket_path(), Some(sock.as_path()));
    drop(server);
    assert!(
        !sock.exists(),
        "socket file must be removed when the server is dropped"
    );
    assert!(UnixStream::connect(&sock).is_err());
}

#[test]
fn unsafe_directories_and_long_paths_are_refused() {
    let rt = runtime();
    let _g = rt.enter();
    let tmp = tempfile::tempdir().unwrap();
    let d = Arc::new(EchoDispatch::new());

    let open = tmp.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let err = Server::bind_unix(&open, d.clone(), ServerConfig::default()).unwrap_err();
    assert!(
        matches!(err, BindError::TooOpen { mode: 0o755, .. }),
        "{err}"
    );

    let link = tmp.path().join("link");
    let real = tmp.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let err = Server::bind_unix(&link, d.clone(), ServerConfig::default()).unwrap_err();
    assert!(matches!(err, BindError::NotADirectory(_)), "{err}");

    // An existing private directory of ours is fine, and a stale socket file is replaced.
    std::fs::write(real.join("rpc.sock"), b"stale").unwrap();
    let server = Server::bind_unix(&real, d.clone(), ServerConfig::default()).unwrap();
    let mut c = RawClient::connect(server.endpoint(), server.token().expose());
    assert_eq!(code(&c.call("echo", json!({}))), "no_active_cell");
    drop(server);

    if nix::unistd::geteuid().is_root() {
        let theirs = tmp.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        let err = Server::bind_unix(&theirs, d.clone(), ServerConfig::default()).unwrap_err();
        assert!(
            matches!(err, BindError::NotOwned { owner: 65534, .. }),
            "{err}"
        );
    }

    let long = tmp.path().join("x".repeat(120));
    let err = Server::bind_unix(&long, d, ServerConfig::default()).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, BindError::PathTooLong { max: 107, .. }),
        "{msg}"
    );
    assert!(
        msg.contains(&"x".repeat(120)),
        "error must name the path: {msg}"
    );
    assert!(
        !long.exists(),
        "nothing is created for a path that cannot work"
    );
}

#[test]
fn a_peer_with_another_uid_is_refused() {
    // The comparison itself, with forged credentials.
    assert!(peer_allowed(1000, 1000));
    assert!(!peer_allowed(1000, 0));
    assert!(!peer_allowed(0, 65534));

    let runuser = ["/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    let Some(runuser) = runuser.filter(|_| nix::unistd::geteuid().is_root()) else {
        common::missing("the real wrong-uid client needs root and runuser (util-linux)");
        return;
    };
    let rt = runtime();
    let _g = rt.enter();
    let tmp = tempfile::tempdir().unwrap();
    let mode = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    };
    mode(tmp.path(), 0o755);
    let dir = tmp.path().join("k");
    let server =
        Server::bind_unix(&dir, Arc::new(EchoDispatch::new()), ServerConfig::default()).unwrap();
    let cell = server
        .open_cell(CellSpec::new("c", deadline(60)).enable(["echo"]))
        .unwrap();
    // Open the way for this test only, so that only the uid check stands.
    mode(&dir, 0o711);
    mode(&dir.join("rpc.sock"), 0o777);
    let py = tmp.path().join("py");
    std::fs::create_dir(&py).unwrap();
    mode(&py, 0o755);
    for f in ["driver.py", "toolcell_rpc_client.py"] {
        std::fs::copy(common::python_dir().join(f), py.join(f)).unwrap();
        mode(&py.join(f), 0o644);
    }
    let mut cmd = Command::new(runuser);
    cmd.args(["-u", "nobody", "--", "python3"]);
    let mut foreign = PyDriver::spawn_with(
        cmd,
        &py.join("driver.py"),
        server.endpoint(),
        server.token().expose(),
    );
    // Even with the right token, the foreign user gets nothing.
    let answer = foreign.call("echo", json!({"x": 1}));
    assert_eq!(answer["ok"], false, "{answer}");
    assert_eq!(answer["code"], "bad_token", "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("uid"),
        "{answer}"
    );
    // And the server still serves its own user.
    let mut c = RawClient::connect(server.endpoint(), server.token().expose());
    assert_eq!(c.call("echo", json!({"x": 2}))["ok"], true);
    assert_eq!(cell.settle().dispatched(), 1);
}

#[test]
fn thirty_two_connections_times_five_hundred_calls_all_matched() {
    let rt = runtime();
    let _g = rt.enter();
    let tmp = tempfile::tempdir().unwrap();
    let dispatch = Arc::new(EchoDispatch::new());
    let server = Server::bind_unix(
        tmp.path().join("k"),
        dispatch.clone(),
        ServerConfig::default(),
    )
    .unwrap();
    let cell = server
        .open_cell(
            CellSpec::new("many", deadline(300))
                .budget(32 * 500)
                .enable(["echo"]),
        )
        .unwrap();
    let endpoint = server.endpoint().to_owned();
    let token = server.token().expose().to_owned();
    let workers: Vec<_> = (0..32)
        .map(|conn| {
            let (endpoint, token) = (endpoint.clone(), token.clone());
            thread::spawn(move || {
                let mut c = RawClient::connect(&endpoint, &token);
                // Pipeline 10 requests per write, then read the 10 replies in order.
                for batch in 0..50 {
                    let mut buf = Vec::new();
                    for k in 0..10 {
                        let n = batch * 10 + k;
                        let req = json!({"tool": "echo", "args": {"c": conn, "n": n},
                                         "token": token, "id": [conn, n]});
                        serde_json::to_writer(&mut buf, &req).unwrap();
                        buf.push(b'\n');
                    }
                    c.send(&buf);
                    for k in 0..10 {
                        let n = batch * 10 + k;
                        let r = c.reply().unwrap();
                        assert_eq!(r["ok"], true, "{r}");
                        assert_eq!(r["id"], json!([conn, n]));
                        assert_eq!(r["result"]["args"], json!({"c": conn, "n": n}));
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(dispatch.started(), 32 * 500);
    let report = cell.settle();
    assert_eq!(report.dispatched(), 32 * 500);
    assert!(
        report
            .calls()
            .iter()
            .all(|c| c.outcome() == CallOutcome::Ok)
    );
}

#[test]
fn garbage_huge_lines_and_half_lines_do_not_stop_the_server() {
    let rt = runtime();
    let _g = rt.enter();
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::bind_unix(
        tmp.path().join("k"),
        Arc::new(EchoDispatch::new()),
        ServerConfig::default().max_line_bytes(64 * 1024),
    )
    .unwrap();
    let cell = server
        .open_cell(CellSpec::new("c", deadline(120)).enable(["echo"]))
        .unwrap();
    let endpoint = server.endpoint().to_owned();
    let token = server.token().expose().to_owned();

    // A flood of garbage lines, read back concurrently: one reply per line.
    let flood = {
        let (endpoint, token) = (endpoint.clone(), token.clone());
        thread::spawn(move || {
            let mut c = RawClient::connect(&endpoint, &token);
            let mut writer = c.stream.try_clone().unwrap();
            let lines = 5000;
            let sender = thread::spawn(move || {
                let mut seed: u32 = 12345;
                let mut buf = Vec::new();
                for i in 0..lines {
                    buf.clear();
                    for _ in 0..(i % 97) {
                        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                        let b = (seed >> 16) as u8;
                        buf.push(if b == b'\n' { b'?' } else { b });
                    }
                    buf.push(b'\n');
                    writer.write_all(&buf).unwrap();
                }
            });
            let mut codes = std::collections::BTreeMap::new();
            for _ in 0..lines {
                let r = c.reply().unwrap();
                *codes
                    .entry(r["code"].as_str().unwrap().to_owned())
                    .or_insert(0) += 1;
            }
            sender.join().unwrap();
            codes
        })
    };
    // Huge lines (5 MiB against a 64 KiB cap), each answered too_large.
    let huge = {
        let (endpoint, token) = (endpoint.clone(), token.clone());
        thread::spawn(move || {
            let mut c = RawClient::connect(&endpoint, &token);
            let mut writer = c.stream.try_clone().unwrap();
            let sender = thread::spawn(move || {
                let chunk = vec![b'{'; 1024 * 1024];
                for _ in 0..3 {
                    for _ in 0..5 {
                        writer.write_all(&chunk).unwrap();
                    }
                    writer.write_all(b"\n").unwrap();
                }
            });
            let replies: Vec<Value> = (0..3).map(|_| c.reply().unwrap()).collect();
            sender.join().unwrap();
            // The connection is still usable afterwards.
            let after = c.call("echo", json!({"after": "huge"}));
            (replies, after)
        })
    };
    // Half lines then disconnect, many times.
    for i in 0..50 {
        let mut s = UnixStream::connect(endpoint.strip_prefix("unix:").unwrap()).unwrap();
        let half = format!("{{\"tool\":\"echo\",\"args\":{{\"i\":{i}}},\"token\":\"{token}\"");
        s.write_all(half.as_bytes()).unwrap();
        drop(s);
    }
    // A client that sends a request and disconnects without reading.
    for _ in 0..20 {
        let mut s = UnixStream::connect(endpoint.strip_prefix("unix:").unwrap()).unwrap();
        s.write_all(b"garbage\n{\"tool\":\"echo\"}\n").unwrap();
        let mut one = [0_u8; 1];
        let _ = s.read(&mut one);
    }

    let codes = flood.join().unwrap();
    assert_eq!(codes.values().sum::<i32>(), 5000);
    assert!(codes.keys().all(|k| k == "bad_request"), "{codes:?}");
    let (replies, after) = huge.join().unwrap();
    for r in &replies {
        assert_eq!(code(r), "too_large");
    }
    assert_eq!(after["ok"], true, "{after}");

    // An honest client is served as usual, and no half line ever ran.
    let mut honest = RawClient::connect(&endpoint, &token);
    let r = honest.call("echo", json!({"honest": true}));
    assert_eq!(r["result"]["args"], json!({"honest": true}));
    let report = cell.settle();
    assert_eq!(
        report.dispatched(),
        2,
        "only the two complete echo requests ran"
    );
}

#[test]
fn tcp_transport_serves_on_loopback() {
    let rt = runtime();
    let _g = rt.enter();
    let server = Server::bind_tcp(Arc::new(EchoDispatch::new()), ServerConfig::default()).unwrap();
    let ep = server.endpoint().to_owned();
    let addr = ep.strip_prefix("tcp://127.0.0.1:").expect(&ep);
    assert!(addr.parse::<u16>().unwrap() > 0);
    let cell = server
        .open_cell(CellSpec::new("t", deadline(60)).enable(["echo"]))
        .unwrap();
    let mut py = PyDriver::spawn(&ep, server.token().expose());
    let a = py.call("echo", json!({"via": "tcp"}));
    assert_eq!(
        a,
        json!({"ok": true, "result": {"cell": "t", "args": {"via": "tcp"}}})
    );
    assert_eq!(cell.settle().dispatched(), 1);
}
