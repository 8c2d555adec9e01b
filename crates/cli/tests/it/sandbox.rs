//! The sandbox every local kernel runs in by default (docs/sandbox.md),
//! tried through the real binary the way a hostile cell would: what it
//! cannot see, signal, trace, read, write or reach — and what still works
//! inside (tools, `%pip install` from the configured index, a network
//! list). Each test fails with `[sandbox] mode = "off"`.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{self, BIN, Env, Serve};

/// Runs `exec --json` with `code` (and `args` before it); the result.
fn exec(env: &Env, args: &[&str], code: &str) -> Value {
    let mut all = vec!["exec", "--json"];
    all.extend_from_slice(args);
    all.push(code);
    env.run(&all).json()
}

/// The one JSON line a probe printed.
#[track_caller]
fn probe_output(r: &Value) -> Value {
    assert_eq!(r["status"], "success", "{r:#}");
    let out = r["output"].as_str().unwrap_or_default();
    let line = out.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {r:#}"))
}

/// A unique tag for paths outside the test's own directory.
fn tag() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{}-{nanos}", std::process::id())
}

/// A loopback HTTP/1.0 server on the host answering `routes` (path →
/// body; anything else 404) until the test ends. Its port.
fn http_server(routes: HashMap<String, Vec<u8>>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let mut conn = conn;
            let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 * 1024 {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let head = String::from_utf8_lossy(&head);
            // "GET /path HTTP/1.1" (or an absolute URL, from a proxy).
            let target = head.split_whitespace().nth(1).unwrap_or("/");
            let path = target.split_once("://").map_or(target, |(_, rest)| {
                rest.find('/').map_or("/", |i| &rest[i..])
            });
            let reply = match routes.get(path) {
                Some(body) => {
                    let kind = if path.ends_with(".whl") {
                        "application/octet-stream"
                    } else {
                        "text/html"
                    };
                    let mut r = format!(
                        "HTTP/1.0 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    )
                    .into_bytes();
                    r.extend_from_slice(body);
                    r
                }
                None => b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
            };
            let _ = conn.write_all(&reply);
        }
    });
    port
}

fn hello_server(body: &str) -> u16 {
    http_server(HashMap::from([("/".to_string(), body.as_bytes().to_vec())]))
}

/// What a cell can learn about processes outside its sandbox.
const PROC_PROBE: &str = r#"
import os, errno, json
out = {'pid': os.getpid()}
out['procs'] = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
names = set()
for p in out['procs']:
    try:
        with open(f'/proc/{p}/environ', 'rb') as f:
            names.update(e.split(b'=', 1)[0].decode() for e in f.read().split(b'\0') if e)
    except OSError:
        pass
out['env_names'] = sorted(names)
def tries(pid):
    r = []
    for what in ('environ', 'fd', 'mem'):
        p = f'/proc/{pid}/{what}'
        try:
            if what == 'fd':
                os.listdir(p)
            else:
                open(p, 'rb').close()
            r.append('open')
        except OSError as e:
            r.append(errno.errorcode[e.errno])
    try:
        os.kill(pid, 0)
        r.append('signalled')
    except OSError as e:
        r.append(errno.errorcode[e.errno])
    return r
out['host'] = tries(HOST)
out['other'] = tries(OTHER)
print(json.dumps(out))
"#;

#[test]
fn a_cell_sees_only_its_sandbox_and_reaches_neither_the_host_nor_another_session() {
    let env = Env::fast();
    let mut cmd = env.cmd();
    cmd.arg("serve")
        .env("OPENAI_API_KEY", "sk-sandbox-test-0123456789abcdef");
    let mut s = Serve::spawn(cmd);
    let r = s.call(1, "execute", json!({"session": "other", "code": "x = 1"}));
    assert_eq!(r["result"]["status"], "success", "{r:#}");
    let sessions = s.call(2, "sessions", json!({}));
    let other = common::session_pid(&sessions["result"], "other").expect("other's pid");
    let host = s.pid();
    assert!(common::alive(other) && common::alive(host));
    let code = PROC_PROBE
        .replace("HOST", &host.to_string())
        .replace("OTHER", &other.to_string());
    let r = s.call(3, "execute", json!({"session": "me", "code": code}));
    let v = probe_output(&r["result"]);
    assert_eq!(
        r["result"]["kernel"]["sandbox"],
        json!({"mode": "namespaces", "network": "packages"})
    );
    // Its own PID namespace: the runner is 2 under the sandbox's init, and
    // nothing else of the machine is listed.
    assert_eq!(v["pid"], 2, "{v}");
    let procs: Vec<i64> = serde_json::from_value(v["procs"].clone()).unwrap();
    assert!(procs.contains(&1) && procs.len() <= 4, "{procs:?}");
    // The host's environment is nowhere in reach.
    let names: Vec<String> = serde_json::from_value(v["env_names"].clone()).unwrap();
    assert!(!names.iter().any(|n| n == "OPENAI_API_KEY"), "{names:?}");
    // Neither the host nor another session's kernel can be opened or
    // signalled: inside, those pids do not exist.
    for who in ["host", "other"] {
        assert_eq!(
            v[who],
            json!(["ENOENT", "ENOENT", "ENOENT", "ESRCH"]),
            "{who}: {v}"
        );
    }
    // The other session was not disturbed.
    let r = s.call(
        4,
        "execute",
        json!({"session": "other", "code": "print(x)"}),
    );
    assert_eq!(r["result"]["output"], "1\n", "{r:#}");
    s.assert_only_jsonrpc();
}

#[test]
fn the_seccomp_filter_refuses_tracing_mounts_namespaces_devices_and_terminal_injection_and_sysctls_are_read_only()
 {
    let env = Env::fast();
    let code = r#"
import ctypes, errno, json, os, stat, fcntl, termios, platform
libc = ctypes.CDLL(None, use_errno=True)
def rc(v):
    return 'ok' if v == 0 else errno.errorcode[ctypes.get_errno()]
out = {}
out['ptrace'] = rc(libc.ptrace(0, 0, None, None))
out['unshare'] = rc(libc.unshare(0x10000000))
out['mount'] = rc(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None))
try:
    os.mknod('/tmp/null2', stat.S_IFCHR | 0o600, os.makedev(1, 3))
    out['mknod'] = 'ok'
except OSError as e:
    out['mknod'] = errno.errorcode[e.errno]
try:
    fcntl.ioctl(1, termios.TIOCSTI, b'x')
    out['tiocsti'] = 'ok'
except OSError as e:
    out['tiocsti'] = errno.errorcode[e.errno]
if platform.machine() == 'x86_64':
    for name, nr in (('bpf', 321), ('perf_event_open', 298), ('userfaultfd', 323),
                     ('keyctl', 250), ('kexec_load', 246)):
        out[name] = rc(libc.syscall(nr, 0, 0, 0, 0, 0))
out['dev'] = sorted(os.listdir('/dev'))
# Host sysctls: on a root host the sandbox's uid is the host's root.
try:
    v = open('/proc/sys/kernel/core_pattern').read()
    open('/proc/sys/kernel/core_pattern', 'w').write(v)
    out['sysctl'] = 'ok'
except OSError as e:
    out['sysctl'] = errno.errorcode[e.errno]
print(json.dumps(out))
"#;
    let v = probe_output(&exec(&env, &[], code));
    for call in ["ptrace", "unshare", "mount", "mknod", "tiocsti"] {
        assert_eq!(v[call], "EPERM", "{call}: {v}");
    }
    // The sandbox's /proc is read-only: no host sysctl can be written.
    assert_eq!(v["sysctl"], "EROFS", "{v}");
    if cfg!(target_arch = "x86_64") {
        for call in [
            "bpf",
            "perf_event_open",
            "userfaultfd",
            "keyctl",
            "kexec_load",
        ] {
            assert_eq!(v[call], "EPERM", "{call}: {v}");
        }
    }
    // A minimal /dev: no disk, no kmsg, no host terminal.
    let dev: Vec<String> = serde_json::from_value(v["dev"].clone()).unwrap();
    for want in ["null", "zero", "full", "random", "urandom", "pts", "shm"] {
        assert!(dev.iter().any(|d| d == want), "{want} missing: {dev:?}");
    }
    for never in ["sda", "vda", "kmsg", "mem", "tty", "console"] {
        assert!(!dev.iter().any(|d| d == never), "{never} present: {dev:?}");
    }
}

#[test]
fn credential_stores_toolcell_dirs_and_hidden_paths_are_invisible_to_cells_and_tools() {
    let env = Env::with_config(&format!(
        "{}\n[sandbox]\nhidden = [\"private\"]\n",
        common::FAST_CONFIG
    ));
    for (rel, text) in [
        (".ssh/id_ed25519", "PRIVATE ssh key"),
        (".aws/credentials", "PRIVATE aws key"),
        (".netrc", "machine x login y password PRIVATE"),
        ("config/toolcell/secret.txt", "PRIVATE toolcell config"),
        ("private/notes.txt", "PRIVATE notes"),
    ] {
        env.write(rel, text);
    }
    let code = r#"
import os, json
from toolcell_tools import read_file, terminal, ToolError
home = os.path.expanduser('~')
out = {}
for rel in ['.ssh/id_ed25519', '.aws/credentials', '.netrc', 'config/toolcell/secret.txt',
            'private/notes.txt']:
    p = os.path.join(home, rel)
    try:
        with open(p) as f:
            cell = 'read: ' + f.read()
    except OSError as e:
        cell = type(e).__name__
    try:
        tool = 'read: ' + read_file(p)['content']
    except ToolError as e:
        tool = 'error: ' + str(e)
    t = terminal(f'cat {p}')
    out[rel] = [cell, tool, t['output']]
out['ssh'] = os.listdir(os.path.join(home, '.ssh'))
print(json.dumps(out))
"#;
    let r = exec(&env, &[], code);
    let v = probe_output(&r);
    for rel in [
        ".ssh/id_ed25519",
        ".aws/credentials",
        ".netrc",
        "config/toolcell/secret.txt",
        "private/notes.txt",
    ] {
        let [cell, tool, term] = [0, 1, 2].map(|i| v[rel][i].as_str().unwrap().to_string());
        assert!(!cell.contains("PRIVATE"), "{rel}: the cell read {cell}");
        assert!(!term.contains("PRIVATE"), "{rel}: terminal read {term}");
        assert!(
            tool.starts_with("error: ") && tool.contains("not found"),
            "{rel}: read_file said {tool}"
        );
    }
    assert_eq!(v["ssh"], json!([]), "{v}");
    // On the host, they are all still there.
    assert!(
        std::fs::read_to_string(env.path().join(".ssh/id_ed25519"))
            .unwrap()
            .contains("PRIVATE")
    );
}

#[test]
fn writes_outside_the_writable_set_are_refused_for_cells_terminal_and_file_tools() {
    let env = Env::fast();
    let t = tag();
    let code = r#"
import os, json, errno
from toolcell_tools import write_file, terminal, ToolError
def w(p):
    try:
        with open(p, 'w') as f:
            f.write('from the cell')
        return 'written'
    except OSError as e:
        return errno.errorcode[e.errno]
out = {'cwd': w('inside.txt'), 'usr': w('/usr/local/toolcell-probe-TAG'),
       'var_tmp': w('/var/tmp/toolcell-probe-TAG'), 'tmp': w('/tmp/toolcell-private-TAG'),
       'tmpdir': os.environ.get('TMPDIR')}
try:
    write_file('/var/tmp/toolcell-tool-TAG', 'x')
    out['tool'] = 'written'
except ToolError as e:
    out['tool'] = str(e)
try:
    write_file('made-by-tool.txt', 'y')
    out['tool_cwd'] = 'written'
except ToolError as e:
    out['tool_cwd'] = str(e)
r = terminal('touch /var/tmp/toolcell-term-TAG; echo rc=$?; cat /tmp/toolcell-private-TAG')
out['term'] = r['output']
print(json.dumps(out))
"#
    .replace("TAG", &t);
    let v = probe_output(&exec(&env, &[], &code));
    assert_eq!(v["cwd"], "written", "{v}");
    assert_eq!(v["tmp"], "written", "{v}");
    assert_eq!(v["tmpdir"], "/tmp", "{v}");
    assert_eq!(v["usr"], "EROFS", "{v}");
    assert_eq!(v["var_tmp"], "EROFS", "{v}");
    let tool = v["tool"].as_str().unwrap();
    assert!(tool.contains("read-only in this sandbox"), "{tool}");
    assert_eq!(v["tool_cwd"], "written", "{v}");
    // `terminal` runs inside: refused the same way, and it sees the
    // cell's private /tmp.
    let term = v["term"].as_str().unwrap();
    assert!(term.contains("Read-only file system"), "{term}");
    assert!(term.contains("rc=1"), "{term}");
    assert!(term.contains("from the cell"), "{term}");
    // The host: the working directory has the writes; nothing else does,
    // and the sandbox's /tmp was its own.
    assert!(env.path().join("inside.txt").exists());
    assert!(env.path().join("made-by-tool.txt").exists());
    for p in [
        format!("/usr/local/toolcell-probe-{t}"),
        format!("/var/tmp/toolcell-probe-{t}"),
        format!("/var/tmp/toolcell-tool-{t}"),
        format!("/var/tmp/toolcell-term-{t}"),
        format!("/tmp/toolcell-private-{t}"),
    ] {
        assert!(!Path::new(&p).exists(), "{p} was written on the host");
    }
}

/// What a cell can reach: a direct connection to `PORT`, and HTTP GETs
/// (through the proxy the environment names, where there is one) with how
/// long each took.
const NET_PROBE: &str = r#"
import json, socket, time, urllib.request, urllib.error
def direct(port):
    try:
        socket.create_connection(('127.0.0.1', port), timeout=3).close()
        return 'connected'
    except OSError as e:
        return type(e).__name__
def get(url):
    t = time.monotonic()
    try:
        r = 'ok: ' + urllib.request.urlopen(url, timeout=10).read().decode()
    except urllib.error.HTTPError as e:
        r = f'http {e.code}: {e.reason}'
    except Exception as e:
        r = type(e).__name__ + ': ' + str(e)
    return [r, time.monotonic() - t]
print(json.dumps({'direct': direct(PORT), 'allowed': get('http://127.0.0.1:PORT/'),
                  'other': get('http://127.0.0.1:OTHER/'),
                  'outside': get('http://example.com/')}))
"#;

fn net_probe(env: &Env, port: u16, other: u16) -> Value {
    let code = NET_PROBE
        .replace("PORT", &port.to_string())
        .replace("OTHER", &other.to_string());
    let r = exec(env, &[], &code);
    let v = probe_output(&r);
    let mut v = v;
    v["sandbox"] = r["kernel"]["sandbox"].clone();
    v
}

/// An environment whose `[sandbox] network` is `rule` (TOML).
fn with_network(rule: &str) -> Env {
    Env::with_config(&format!(
        "{}\n[sandbox]\nnetwork = {rule}\n",
        common::FAST_CONFIG
    ))
}

#[track_caller]
fn refused_quickly(v: &Value, key: &str, rule: &str) {
    let text = v[key][0].as_str().unwrap();
    assert!(
        text.starts_with("http 403: toolcell sandbox:") && text.contains(rule),
        "{key}: {v}"
    );
    let took = v[key][1].as_f64().unwrap();
    assert!(took < 1.0, "{key}: the refusal took {took} s");
}

#[test]
fn the_network_rule_decides_what_a_cell_reaches() {
    let port = hello_server("hello from the host");
    let other = hello_server("another host server");

    // Default, "packages": the host's loopback is not the sandbox's, and
    // anything but a package index is refused by the proxy, naming the rule.
    let v = net_probe(&Env::fast(), port, other);
    assert_eq!(
        v["sandbox"],
        json!({"mode": "namespaces", "network": "packages"})
    );
    assert_eq!(v["direct"], "ConnectionRefusedError", "{v}");
    assert!(!v["allowed"][0].as_str().unwrap().starts_with("ok"), "{v}");
    refused_quickly(&v, "outside", "network = \"packages\"");

    // A list: what it names is reached (through the proxy; a direct
    // connection still is not), the rest refused at once.
    let env = with_network(&format!("[\"127.0.0.1:{port}\"]"));
    let v = net_probe(&env, port, other);
    assert_eq!(
        v["sandbox"],
        json!({"mode": "namespaces", "network": "list"})
    );
    assert_eq!(v["allowed"][0], "ok: hello from the host", "{v}");
    assert_eq!(v["direct"], "ConnectionRefusedError", "{v}");
    refused_quickly(&v, "other", &format!("network = [\"127.0.0.1:{port}\"]"));
    refused_quickly(&v, "outside", "network = [");

    // "none": nothing at all, and no waiting for it.
    let env = with_network("\"none\"");
    let v = net_probe(&env, port, other);
    assert_eq!(
        v["sandbox"],
        json!({"mode": "namespaces", "network": "none"})
    );
    for key in ["allowed", "other", "outside"] {
        assert!(!v[key][0].as_str().unwrap().starts_with("ok"), "{key}: {v}");
        assert!(v[key][1].as_f64().unwrap() < 2.0, "{key}: {v}");
    }

    // "host": the machine's network, the host's loopback included.
    let env = with_network("\"host\"");
    let v = net_probe(&env, port, other);
    assert_eq!(
        v["sandbox"],
        json!({"mode": "namespaces", "network": "host"})
    );
    assert_eq!(v["direct"], "connected", "{v}");
    assert_eq!(v["allowed"][0], "ok: hello from the host", "{v}");
}

/// Writes a pure-Python wheel `tinypkg_tc-0.1-py3-none-any.whl` (module
/// `tinypkg_tc`, `VALUE = 42`) and returns its bytes.
fn tiny_wheel(dir: &Path) -> Vec<u8> {
    let path = dir.join("tinypkg_tc-0.1-py3-none-any.whl");
    let script = r#"
import base64, hashlib, sys, zipfile
files = {
    'tinypkg_tc/__init__.py': b'VALUE = 42\n',
    'tinypkg_tc-0.1.dist-info/METADATA': b'Metadata-Version: 2.1\nName: tinypkg-tc\nVersion: 0.1\n',
    'tinypkg_tc-0.1.dist-info/WHEEL': b'Wheel-Version: 1.0\nGenerator: toolcell-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n',
}
record = ''
for name, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()
    record += f'{name},sha256={digest},{len(data)}\n'
record += 'tinypkg_tc-0.1.dist-info/RECORD,,\n'
with zipfile.ZipFile(sys.argv[1], 'w') as z:
    for name, data in files.items():
        z.writestr(name, data)
    z.writestr('tinypkg_tc-0.1.dist-info/RECORD', record)
"#;
    let st = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(&path)
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::read(&path).unwrap()
}

#[test]
fn pip_install_reaches_the_configured_index_under_the_default_rule() {
    let env = Env::fast();
    let wheel = tiny_wheel(&env.path().join("tmp"));
    let file = "/files/tinypkg_tc-0.1-py3-none-any.whl";
    let port = http_server(HashMap::from([
        (
            "/simple/tinypkg-tc/".to_string(),
            format!(
                "<html><body><a href=\"{file}\">tinypkg_tc-0.1-py3-none-any.whl</a></body></html>"
            )
            .into_bytes(),
        ),
        (file.to_string(), wheel),
    ]));
    // The session's virtual environment, in its working directory.
    let st = std::process::Command::new("python3")
        .args(["-m", "venv", ".venv"])
        .current_dir(env.path())
        .status()
        .unwrap();
    assert!(st.success());
    let index = format!("http://127.0.0.1:{port}/simple/");
    let out = {
        let mut c = env.cmd();
        c.args([
            "exec",
            "--json",
            "--timeout",
            "120",
            "%pip install --no-cache-dir tinypkg-tc\nimport sys, tinypkg_tc\nprint(tinypkg_tc.VALUE, sys.prefix)",
        ])
        .env("PIP_INDEX_URL", &index)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        common::finish(c.spawn().unwrap(), Duration::from_secs(180))
    };
    let r = out.json();
    assert_eq!(r["status"], "success", "{r:#}");
    assert_eq!(r["kernel"]["sandbox"]["network"], "packages", "{r:#}");
    let text = r["output"].as_str().unwrap();
    let venv = env.canonical().join(".venv");
    assert!(text.contains(&format!("42 {}", venv.display())), "{text}");
    // Installed into the working directory's environment, on the host too.
    let found = walk_has(&venv, "tinypkg_tc");
    assert!(found, "tinypkg_tc is not in {}", venv.display());
}

fn walk_has(dir: &Path, name: &str) -> bool {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return false;
    };
    rd.flatten().any(|e| {
        e.file_name() == name
            || (e.path().is_dir() && !e.path().is_symlink() && walk_has(&e.path(), name))
    })
}

/// The pid namespace of `pid` (the link `/proc/<pid>/ns/pid` names).
fn pid_ns(pid: i32) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()
}

/// Live processes in the pid namespace `ns`.
fn in_pid_ns(ns: &Path) -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&p| common::alive(p) && pid_ns(p).as_deref() == Some(ns))
        .collect()
}

#[test]
fn a_double_forked_setsid_child_with_a_cleared_environment_dies_with_its_session() {
    let env = Env::fast();
    let mut s = Serve::start(&env, &[]);
    let code = "import subprocess\n\
                subprocess.run(['sh', '-c', '(setsid env -i sleep 300 &) ; true'], check=True)\n\
                import time; time.sleep(0.3)\n\
                print(subprocess.run(['pgrep', '-x', 'sleep'], capture_output=True, text=True).stdout.split())";
    let r = s.call(1, "execute", json!({"session": "s", "code": code}));
    assert_eq!(r["result"]["status"], "success", "{r:#}");
    let sessions = s.call(2, "sessions", json!({}));
    let kernel = common::session_pid(&sessions["result"], "s").expect("kernel pid");
    let ns = pid_ns(kernel).expect("the kernel's pid namespace");
    assert_ne!(
        pid_ns(std::process::id() as i32).as_deref(),
        Some(ns.as_path())
    );
    // The sleeper escaped the kernel's session and environment, not its
    // sandbox: it is in the kernel's pid namespace.
    let sleeper: Vec<i32> = in_pid_ns(&ns)
        .into_iter()
        .filter(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "sleep")
        })
        .collect();
    assert_eq!(sleeper.len(), 1, "{:?}", in_pid_ns(&ns));
    let r = s.call(3, "shutdown_session", json!({"session": "s"}));
    assert!(r.get("error").is_none(), "{r:#}");
    assert!(
        common::eventually(Duration::from_secs(5), || in_pid_ns(&ns).is_empty()),
        "left in the sandbox after its session: {:?}",
        in_pid_ns(&ns)
    );
    assert!(!common::alive(sleeper[0]));
}

/// `toolcell exec` in a user namespace where no further one may be made
/// (`user.max_user_namespaces = 0`): a machine that refuses sandboxes.
fn exec_where_namespaces_are_refused(env: &Env, code: &str) -> common::Out {
    let mut c = env.cmd_of(Path::new("unshare"));
    c.args([
        "--user",
        "--map-root-user",
        "sh",
        "-c",
        "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$0\" \"$@\"",
        BIN,
        "exec",
        "--json",
        code,
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    common::finish(c.spawn().unwrap(), Duration::from_secs(60))
}

#[test]
fn required_fails_before_any_code_runs_where_sandboxes_are_refused_and_auto_says_off() {
    let code = "open('ran.txt', 'w').close()\nprint('ran')";
    let env = Env::with_config(&format!(
        "{}\n[sandbox]\nmode = \"required\"\n",
        common::FAST_CONFIG
    ));
    let out = exec_where_namespaces_are_refused(&env, code);
    assert_ne!(out.code, Some(0), "{out:?}");
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(all.contains("cannot sandbox the kernel"), "{all}");
    assert!(all.contains("user namespace"), "the reason is named: {all}");
    assert!(!env.path().join("ran.txt").exists(), "code ran: {all}");

    let env = Env::fast();
    let out = exec_where_namespaces_are_refused(&env, code);
    let r = out.json();
    assert_eq!(r["status"], "success", "{r:#}");
    assert_eq!(r["output"], "ran\n");
    assert_eq!(r["kernel"]["sandbox"]["mode"], "off", "{r:#}");
    let reason = r["kernel"]["sandbox"]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(reason.contains("user namespace"), "{r:#}");
    assert!(
        out.stderr.contains("unsandboxed"),
        "one warning: {}",
        out.stderr
    );
}

#[test]
fn an_unprivileged_user_gets_the_same_sandbox() {
    let env = Env::fast();
    // The binary where that user can run it (root's home is private).
    let bin = env.path().join("toolcell");
    std::fs::copy(BIN, &bin).unwrap();
    let st = std::process::Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(env.path())
        .status()
        .unwrap();
    assert!(st.success());
    let mut c = env.cmd_of(Path::new("setpriv"));
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .args([
            "exec",
            "--json",
            "import os, json\nfrom toolcell_tools import terminal\n\
             t = terminal('touch /usr/x; ls /proc | grep -c \"^[0-9]\"')['output']\n\
             print(json.dumps([os.getuid(), os.getpid(), sorted(int(p) for p in os.listdir('/proc') if p.isdigit()), t]))",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = common::finish(c.spawn().unwrap(), Duration::from_secs(60));
    let r = out.json();
    assert_eq!(
        r["kernel"]["sandbox"],
        json!({"mode": "namespaces", "network": "packages"}),
        "{r:#}"
    );
    let v = probe_output(&r);
    assert_eq!(v[0], 65534, "{v}");
    assert_eq!(v[1], 2, "{v}");
    assert!(v[2].as_array().unwrap().len() <= 4, "{v}");
    // `terminal` joined that sandbox: read-only outside, the same /proc.
    let t = v[3].as_str().unwrap();
    assert!(t.contains("Read-only file system"), "{t}");
    let n: usize = t.lines().last().unwrap().trim().parse().unwrap();
    assert!(n <= 6, "{t}");
}

#[test]
fn r_and_javascript_kernels_are_sandboxed_too() {
    let host = std::process::id();
    let env = Env::fast();
    for (lang, code) in [
        (
            "r",
            format!(
                "cat(Sys.getpid(), sum(grepl('^[0-9]+$', list.files('/proc'))), file.exists('/proc/{host}/environ'), file.access('/usr/lib', 2) == 0, '\\n')"
            ),
        ),
        (
            "javascript",
            format!(
                "const fs = require('fs'); let w = true; try {{ fs.writeFileSync('/usr/lib/x', 'x') }} catch (e) {{ w = false }}; console.log(process.pid, fs.readdirSync('/proc').filter(x => /^\\d+$/.test(x)).length, fs.existsSync('/proc/{host}/environ'), w)"
            ),
        ),
    ] {
        let r = exec(&env, &["--language", lang], &code);
        assert_eq!(r["status"], "success", "{lang}: {r:#}");
        assert_eq!(
            r["kernel"]["sandbox"]["mode"], "namespaces",
            "{lang}: {r:#}"
        );
        let words: Vec<String> = r["output"]
            .as_str()
            .unwrap()
            .split_whitespace()
            .map(str::to_lowercase)
            .collect();
        assert_eq!(words[0], "2", "{lang}: {r:#}");
        let procs: usize = words[1].parse().unwrap();
        assert!(procs <= 4, "{lang}: {r:#}");
        assert_eq!(words[2], "false", "{lang}: the host's /proc entry: {r:#}");
        assert_eq!(words[3], "false", "{lang}: wrote under /usr: {r:#}");
    }
}

#[test]
fn the_machines_service_sockets_are_out_of_reach() {
    // A service socket only its owner may use, where system services keep
    // theirs (Docker's, D-Bus's, systemd's). A read-only mount does not
    // stop `connect` to a Unix socket: only hiding it does.
    let path = format!("/run/toolcell-test-{}.sock", tag());
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::thread::spawn(move || {
        for c in listener.incoming().flatten() {
            let mut c = c;
            let _ = c.write_all(b"the host's service answered");
        }
    });
    let env = Env::fast();
    let code = format!(
        r#"
import json, os, socket
out = {{}}
try:
    s = socket.socket(socket.AF_UNIX)
    s.connect({path:?})
    out['service'] = s.recv(100).decode()
except OSError as e:
    out['service'] = type(e).__name__
out['run'] = sorted(os.listdir('/run'))
try:
    out['resolv'] = open('/etc/resolv.conf').read() == {resolv:?}
except OSError as e:
    out['resolv'] = type(e).__name__
print(json.dumps(out))
"#,
        resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default()
    );
    let v = probe_output(&exec(&env, &[], &code));
    // Unsandboxed, the same cell reaches it: the probe is sound.
    let off = probe_output(&exec(&Env::fast_unsandboxed(), &[], &code));
    let _ = std::fs::remove_file(&path);
    assert_eq!(off["service"], "the host's service answered", "{off}");
    assert_eq!(v["service"], "FileNotFoundError", "{v}");
    assert!(
        !v["run"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().is_some_and(|n| n.ends_with(".sock"))),
        "{v}"
    );
    // Names still resolve where the rule lets them: resolv.conf (which
    // systemd keeps in /run) is there.
    if Path::new("/etc/resolv.conf").exists() {
        assert_eq!(v["resolv"], true, "{v}");
    }
}

#[test]
fn confine_inside_a_sandbox_keeps_both_layers() {
    // `extra` is writable for the sandbox; Landlock (confine) still
    // allows only the kernel's own directories and /tmp. Both outside
    // /tmp, which is the sandbox's own.
    let outside = tempfile::tempdir_in(crate::outside_tmp::outside_tmp()).unwrap();
    let extra = outside.path().join("extra");
    std::fs::create_dir(&extra).unwrap();
    let env = Env::with_config(&format!(
        "[execution]\ntimeout = 30\nmode = \"strict\"\nconfine = true\n\n\
         [kernels]\nmax_kernels = 8\n\n[sandbox]\nwritable = [{:?}]\n",
        extra.display().to_string()
    ));
    let code = format!(
        r#"
import os, json, errno
from toolcell_tools import write_file, ToolError
def w(p):
    try:
        with open(p, 'w') as f:
            f.write('x')
        return 'written'
    except OSError as e:
        return errno.errorcode[e.errno]
out = {{'cwd': w('here.txt'), 'tmp': w('/tmp/x'), 'extra': w({extra:?}),
        'home': w({home:?})}}
try:
    write_file('tool.txt', 'y')
    out['tool'] = 'written'
except ToolError as e:
    out['tool'] = str(e)
print(json.dumps(out))
"#,
        extra = extra.join("by-cell.txt").display().to_string(),
        home = outside.path().join("nope.txt").display().to_string(),
    );
    let r = exec(&env, &[], &code);
    assert_eq!(r["kernel"]["sandbox"]["mode"], "namespaces", "{r:#}");
    let v = probe_output(&r);
    assert_eq!(v["cwd"], "written", "{v}");
    assert_eq!(v["tmp"], "written", "{v}");
    assert_eq!(v["tool"], "written", "{v}");
    // The sandbox lets `extra` be written; Landlock does not.
    assert_eq!(v["extra"], "EACCES", "{v}");
    assert!(
        matches!(v["home"].as_str(), Some("EROFS" | "EACCES")),
        "{v}"
    );
    assert!(!extra.join("by-cell.txt").exists());
    assert!(!outside.path().join("nope.txt").exists());
    // Without confine, the sandbox alone lets `extra` be written.
    let open = Env::with_config(&format!(
        "[execution]\ntimeout = 30\nmode = \"strict\"\n\n[sandbox]\nwritable = [{:?}]\n",
        extra.display().to_string()
    ));
    let v = probe_output(&exec(&open, &[], &code));
    assert_eq!(v["extra"], "written", "{v}");
    assert_eq!(v["home"], "EROFS", "{v}");
    assert!(extra.join("by-cell.txt").exists());
}
