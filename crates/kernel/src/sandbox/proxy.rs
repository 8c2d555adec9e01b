//! The per-sandbox HTTP proxy: the only way out of a sandbox with a
//! network rule. It listens on a socket bound inside the sandbox's own
//! network namespace (handed to the host by the sandbox's init), resolves
//! names and connects from the host, and answers a destination outside the
//! rule at once with `403` naming the rule.
//!
//! `CONNECT host:port` opens a tunnel (HTTPS and anything else); a request
//! with an absolute `http://` URL is forwarded as one request with
//! `Connection: close` (so a kept-alive connection cannot reach a second
//! host unchecked).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::rule::{Rule, split_host_port};

/// A request head larger than this is refused.
const MAX_HEAD: usize = 16 * 1024;
/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting to a destination may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// Connections served at once; past it a client gets `503`.
const MAX_CONNECTIONS: usize = 256;

/// A running proxy; dropping it stops it and every connection it serves.
#[derive(Debug)]
pub struct Proxy {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    /// Serves `listener` under `rule` on the current runtime.
    ///
    /// # Errors
    /// When the listener cannot be registered with the runtime.
    pub fn start(listener: std::net::TcpListener, rule: Rule) -> std::io::Result<Self> {
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let rule = Arc::new(rule);
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        };
                        if conns.len() >= MAX_CONNECTIONS {
                            let mut s = stream;
                            let _ = s.write_all(&response(503, "toolcell sandbox: too many proxy connections at once")).await;
                            continue;
                        }
                        let rule = Arc::clone(&rule);
                        conns.spawn(async move {
                            if let Err(e) = serve(stream, &rule).await {
                                tracing::debug!(error = %e, "sandbox proxy connection");
                            }
                        });
                    }
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
        });
        Ok(Self { task })
    }
}

/// A complete response with a one-line reason, in the status line (which
/// is what most clients show) and the body.
fn response(code: u16, reason: &str) -> Vec<u8> {
    let phrase = reason.replace(['\r', '\n'], " ");
    let body = format!("{phrase}\n");
    format!(
        "HTTP/1.1 {code} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Reads up to the end of the request head; returns the head and any
/// bytes after it.
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<(Vec<u8>, Vec<u8>)>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        let start = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = memchr::memmem::find(&buf[start..], b"\r\n\r\n") {
            let end = start + i + 4;
            if end > MAX_HEAD {
                return Ok(Some((Vec::new(), Vec::new())));
            }
            let rest = buf.split_off(end);
            return Ok(Some((buf, rest)));
        }
        if buf.len() > MAX_HEAD {
            return Ok(Some((Vec::new(), Vec::new())));
        }
    }
}

async fn serve(mut client: TcpStream, rule: &Rule) -> std::io::Result<()> {
    let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await {
        Ok(Ok(Some(h))) => h,
        Ok(Ok(None)) | Err(_) => return Ok(()),
        Ok(Err(e)) => return Err(e),
    };
    let (head, rest) = head;
    if head.is_empty() {
        return client
            .write_all(&response(431, "toolcell sandbox: request head too large"))
            .await;
    }
    let text = String::from_utf8_lossy(&head);
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default();
    let mut parts = first.split(' ');
    let (method, target, version) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or("HTTP/1.1"),
    );
    let connect = method.eq_ignore_ascii_case("CONNECT");
    let (authority, path) = if connect {
        (target.to_string(), String::new())
    } else if let Some(after) = target.strip_prefix("http://") {
        let (auth, path) = after.find('/').map_or((after, "/"), |i| after.split_at(i));
        (auth.to_string(), path.to_string())
    } else {
        return client
            .write_all(&response(
                400,
                "toolcell sandbox: the proxy takes CONNECT and http:// requests only",
            ))
            .await;
    };
    let Some((host, port)) = split_host_port(&authority) else {
        return client
            .write_all(&response(400, "toolcell sandbox: bad destination"))
            .await;
    };
    let port = port.unwrap_or(if connect { 443 } else { 80 });
    let shown = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    if !rule.allows(&host, port) {
        tracing::info!(destination = %shown, rule = %rule.name, "sandbox proxy refused");
        return client
            .write_all(&response(
                403,
                &format!("toolcell sandbox: {shown} is not allowed by {}", rule.name),
            ))
            .await;
    }
    let target_host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let addrs = match resolve(&target_host, port).await {
        Ok(a) => a,
        Err(why) => {
            return client
                .write_all(&response(403, &format!("toolcell sandbox: {shown} {why}")))
                .await;
        }
    };
    let upstream = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&addrs[..])).await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            return client
                .write_all(&response(
                    502,
                    &format!("toolcell sandbox: cannot reach {shown}: {e}"),
                ))
                .await;
        }
        Err(_) => {
            return client
                .write_all(&response(
                    504,
                    &format!("toolcell sandbox: {shown} did not answer in time"),
                ))
                .await;
        }
    };
    let mut upstream = upstream;
    if connect {
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await?;
    } else {
        let mut out = format!("{method} {path} {version}\r\n");
        for line in lines {
            if line.is_empty() {
                continue;
            }
            let name = line.split(':').next().unwrap_or_default().trim();
            if [
                "connection",
                "proxy-connection",
                "proxy-authorization",
                "keep-alive",
            ]
            .iter()
            .any(|h| name.eq_ignore_ascii_case(h))
            {
                continue;
            }
            out.push_str(line);
            out.push_str("\r\n");
        }
        out.push_str("Connection: close\r\n\r\n");
        upstream.write_all(out.as_bytes()).await?;
    }
    if !rest.is_empty() {
        upstream.write_all(&rest).await?;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    Ok(())
}

/// The addresses to connect to for an allowed `host:port`. An address
/// the rule named is taken as it is; a name is resolved here, and its
/// loopback, link-local and unspecified addresses are dropped: a name the
/// rule allows must not lead to the host's own services or a cloud's
/// metadata endpoint (a name whose DNS an attacker controls can point
/// anywhere). `localhost` counts as named by address.
async fn resolve(host: &str, port: u16) -> Result<Vec<std::net::SocketAddr>, String> {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(vec![std::net::SocketAddr::new(ip, port)]);
    }
    let found: Vec<std::net::SocketAddr> =
        match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((host, port))).await {
            Ok(Ok(a)) => a.collect(),
            Ok(Err(e)) => return Err(format!("cannot be resolved: {e}")),
            Err(_) => return Err("was not resolved in time".into()),
        };
    if host.eq_ignore_ascii_case("localhost") {
        return Ok(found);
    }
    let outside: Vec<_> = found
        .iter()
        .copied()
        .filter(|a| !is_local(a.ip()))
        .collect();
    if outside.is_empty() {
        return Err(
            "resolves only to local addresses (loopback, link-local); name the address itself in the rule to allow it"
                .into(),
        );
    }
    Ok(outside)
}

/// Loopback, link-local (169.254.0.0/16, fe80::/10, where cloud metadata
/// lives) or unspecified, IPv4-mapped ones included.
fn is_local(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => v4.is_loopback() || v4.is_link_local() || v4.is_unspecified(),
        std::net::IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_local(std::net::IpAddr::V4(v4));
            }
            v6.is_loopback() || v6.is_unspecified() || (v6.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_addresses_are_loopback_link_local_and_unspecified() {
        for local in [
            "127.0.0.1",
            "127.1.2.3",
            "169.254.169.254",
            "0.0.0.0",
            "::1",
            "::",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(is_local(local.parse().unwrap()), "{local}");
        }
        for outside in ["10.0.0.1", "192.168.1.1", "151.101.0.223", "2a04:4e42::223"] {
            assert!(!is_local(outside.parse().unwrap()), "{outside}");
        }
    }

    #[tokio::test]
    async fn a_name_that_resolves_only_to_loopback_is_refused_and_an_address_is_not() {
        // The machine's own hostname resolves locally (/etc/hosts), to a
        // loopback address on many machines; "localhost" is exempt.
        let e = resolve("localhost.localdomain.invalid", 80).await;
        assert!(e.is_err(), "{e:?}");
        assert_eq!(
            resolve("127.0.0.1", 9000).await.unwrap(),
            vec!["127.0.0.1:9000".parse().unwrap()]
        );
        assert!(resolve("localhost", 80).await.is_ok());
        // A name that resolves to loopback only (from /etc/hosts here,
        // when the machine maps one): refused, naming why.
        if let Ok(hosts) = std::fs::read_to_string("/etc/hosts") {
            let name = hosts.lines().find_map(|l| {
                let mut w = l.split_whitespace();
                let ip: std::net::IpAddr = w.next()?.parse().ok()?;
                (ip.is_loopback()).then_some(())?;
                w.find(|n| *n != "localhost" && !n.starts_with('#'))
                    .map(str::to_string)
            });
            if let Some(name) = name {
                let e = resolve(&name, 80).await.unwrap_err();
                assert!(e.contains("only to local addresses"), "{name}: {e}");
            }
        }
    }

    async fn http_server() -> (u16, tokio::task::JoinHandle<()>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let n = s.read(&mut buf).await.unwrap();
                    let req = String::from_utf8_lossy(&buf[..n]).to_string();
                    let body = format!("got {}", req.lines().next().unwrap_or_default());
                    let _ = s
                        .write_all(
                            format!(
                                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                                body.len()
                            )
                            .as_bytes(),
                        )
                        .await;
                });
            }
        });
        (port, task)
    }

    async fn ask(proxy_port: u16, req: String) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", proxy_port)).await.unwrap();
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).to_string()
    }

    #[tokio::test]
    async fn allowed_destinations_pass_and_others_are_refused_naming_the_rule() {
        let (port, _server) = http_server().await;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let pport = listener.local_addr().unwrap().port();
        let _proxy = Proxy::start(listener, Rule::list(&[format!("127.0.0.1:{port}")])).unwrap();

        let got = ask(pport, format!("GET http://127.0.0.1:{port}/x?y HTTP/1.1\r\nHost: 127.0.0.1\r\nProxy-Connection: keep-alive\r\n\r\n")).await;
        assert!(got.starts_with("HTTP/1.1 200"), "{got}");
        assert!(got.contains("got GET /x?y HTTP/1.1"), "{got}");

        let got = ask(
            pport,
            format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\nGET /t HTTP/1.1\r\n\r\n"),
        )
        .await;
        assert!(
            got.starts_with("HTTP/1.1 200 Connection established"),
            "{got}"
        );
        assert!(got.contains("got GET /t"), "{got}");

        let started = std::time::Instant::now();
        let got = ask(pport, "CONNECT example.com:443 HTTP/1.1\r\n\r\n".into()).await;
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(
            got.starts_with("HTTP/1.1 403 toolcell sandbox: example.com:443 is not allowed by network = [\"127.0.0.1:"),
            "{got}"
        );
        let got = ask(
            pport,
            format!(
                "GET http://127.0.0.1:{}/ HTTP/1.1\r\n\r\n",
                port.wrapping_add(1)
            ),
        )
        .await;
        assert!(got.starts_with("HTTP/1.1 403"), "{got}");
        let got = ask(pport, "GET /relative HTTP/1.1\r\n\r\n".into()).await;
        assert!(got.starts_with("HTTP/1.1 400"), "{got}");
        let got = ask(
            pport,
            format!(
                "GET http://x/ HTTP/1.1\r\nX: {}\r\n\r\n",
                "a".repeat(20_000)
            ),
        )
        .await;
        assert!(got.starts_with("HTTP/1.1 431"), "{got}");
    }
}
