//! The messages of docs/protocol.md ("Messages"): requests the host writes to
//! the runner's fd 3 (one JSON object per line) and the frame bodies the runner
//! writes back.

use serde::{Deserialize, Serialize};

/// The protocol version this crate speaks (`"protocol": 1`).
pub const PROTOCOL_VERSION: u32 = 1;

/// A request line from host to runner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Request {
    /// First line: hands the runner its sentinel.
    Hello(Hello),
    /// Run one cell.
    Execute(Execute),
    /// Exit cleanly.
    Shutdown,
    /// Interrupt the running cell (in-band): the runner sends SIGINT to its own
    /// process group. Ignored between cells. See docs/protocol.md
    /// ("Remote kernels: the same protocol over a command's stdio").
    Interrupt,
}

/// `{"type":"hello","sentinel":…,"protocol":1}`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The frame sentinel (kept in memory only by the runner).
    pub sentinel: String,
    /// Protocol version, [`PROTOCOL_VERSION`].
    pub protocol: u32,
    /// Tool calls travel in-band: the stub sends a `tool_call` frame on stdout
    /// and the host answers with a `tool_reply` line on the request channel,
    /// instead of the socket. See docs/protocol.md
    /// ("Remote kernels: the same protocol over a command's stdio").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inband_tools: bool,
    /// The directory the runner changes to before its first cell (a remote
    /// kernel's `cwd`); absent: where it was started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

impl std::fmt::Debug for Hello {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hello")
            .field("sentinel", &"«hidden»")
            .field("protocol", &self.protocol)
            .field("inband_tools", &self.inband_tools)
            .field("cwd", &self.cwd)
            .finish()
    }
}

/// `{"type":"execute","id":<random hex>,"code":…}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Execute {
    /// Random hex id; the result must carry the same one.
    pub id: String,
    /// The cell's source code.
    pub code: String,
    /// A new source for the stub module, sent when the tools the cell may
    /// call changed since the kernel's last cell (tools a `serve` client
    /// registered, an MCP server's list): the runner loads it before the
    /// cell, keeping the session's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stubs: Option<String>,
}

/// A frame body from runner to host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reply {
    /// On stdout after `hello`.
    Ready(Ready),
    /// On stderr when a cell settles, just before its result: everything the
    /// cell wrote to stderr came before it.
    End(End),
    /// On stdout: the outcome of a cell.
    Result(CellResult),
}

/// `{"type":"ready","protocol":1,"pid","python":"3.11.7","executable"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ready {
    /// Protocol version the runner speaks.
    pub protocol: u32,
    /// The runner's process id.
    pub pid: u32,
    /// Python version, e.g. `"3.11.7"`.
    pub python: String,
    /// The interpreter's real `sys.executable`.
    pub executable: String,
}

/// `{"type":"end","id"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct End {
    /// The id of the cell that settled.
    pub id: String,
}

/// How a cell ended, as the runner saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunnerStatus {
    /// Ran to the end.
    Ok,
    /// An uncaught exception.
    Error,
    /// `SystemExit`: the runner ends after this reply.
    Exit,
    /// `KeyboardInterrupt`, e.g. after a host interrupt.
    Interrupted,
}

/// Resource usage of one cell.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// CPU seconds, the runner and its children.
    pub cpu_seconds: f64,
    /// Peak resident set size in KiB.
    pub peak_rss_kb: u64,
    /// Wall-clock seconds.
    pub wall_seconds: f64,
}

/// A file the cell produced for display (e.g. a matplotlib figure).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Display {
    /// MIME type, e.g. `image/png`.
    pub mime: String,
    /// Absolute path of the file.
    pub path: String,
}

/// `{"type":"result","id","status",…}`: docs/protocol.md
/// ("Runner → host (frames)").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellResult {
    /// The id of the execute request.
    pub id: String,
    /// How the cell ended.
    pub status: RunnerStatus,
    /// The `SystemExit` code, present with [`RunnerStatus::Exit`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// Formatted traceback, empty when none.
    #[serde(default)]
    pub traceback: String,
    /// The cell's number in this kernel, from 1.
    pub execution_count: u64,
    /// The cell tried to read standard input.
    #[serde(default)]
    pub stdin_requested: bool,
    /// Resource usage of the cell.
    #[serde(default)]
    pub usage: Usage,
    /// Files produced for display.
    #[serde(default)]
    pub display: Vec<Display>,
    /// The regular files the cell opened for reading, when the runner
    /// observes reads (the Python runner does); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<Reads>,
}

/// `{"paths", "total"}`: the files a cell read, absolute, each once in
/// first-read order (at most 50), and how many there were in all.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Reads {
    /// Absolute paths, in first-read order.
    #[serde(default)]
    pub paths: Vec<String>,
    /// Files read in all, listed or not.
    #[serde(default)]
    pub total: u64,
}

impl Request {
    /// The request as one JSON line, `\n` included.
    ///
    /// # Errors
    /// Only if serialization fails, which these types do not do in practice.
    pub fn to_line(&self) -> Result<Vec<u8>, serde_json::Error> {
        let mut v = serde_json::to_vec(self)?;
        v.push(b'\n');
        Ok(v)
    }
}

impl Reply {
    /// Parses a frame body.
    ///
    /// # Errors
    /// The JSON error when the body is not a known reply.
    pub fn from_body(body: &[u8]) -> Result<Self, serde_json::Error> {
        /// Only the tag: the other fields are skipped, not buffered.
        #[derive(Deserialize)]
        struct Tag<'a> {
            #[serde(rename = "type", borrow)]
            kind: std::borrow::Cow<'a, str>,
        }
        // An internally tagged enum buffers the whole body before it picks
        // the variant; reading the tag first and the variant's struct
        // directly is several times faster for the result of every cell.
        match serde_json::from_slice::<Tag<'_>>(body).map(|t| t.kind) {
            Ok(k) if k == "result" => serde_json::from_slice(body).map(Reply::Result),
            Ok(k) if k == "end" => serde_json::from_slice(body).map(Reply::End),
            Ok(k) if k == "ready" => serde_json::from_slice(body).map(Reply::Ready),
            _ => serde_json::from_slice(body),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip_request(r: &Request, expected: serde_json::Value) {
        let line = r.to_line().unwrap();
        assert_eq!(line.last(), Some(&b'\n'));
        let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v, expected);
        let back: Request = serde_json::from_value(v).unwrap();
        assert_eq!(&back, r);
    }

    #[test]
    fn requests_have_the_spec_shape() {
        round_trip_request(
            &Request::Hello(Hello {
                sentinel: "@@S@@".into(),
                protocol: 1,
                inband_tools: false,
                cwd: None,
            }),
            json!({"type":"hello","sentinel":"@@S@@","protocol":1}),
        );
        round_trip_request(
            &Request::Execute(Execute {
                id: "ab12".into(),
                code: "print(1)\n".into(),
                stubs: None,
            }),
            json!({"type":"execute","id":"ab12","code":"print(1)\n"}),
        );
        round_trip_request(&Request::Shutdown, json!({"type":"shutdown"}));
    }

    #[test]
    fn replies_parse_from_what_the_runner_writes() {
        let ready = br#"{"type":"ready","protocol":1,"pid":42,"python":"3.11.7","executable":"/usr/bin/python3"}"#;
        assert_eq!(
            Reply::from_body(ready).unwrap(),
            Reply::Ready(Ready {
                protocol: 1,
                pid: 42,
                python: "3.11.7".into(),
                executable: "/usr/bin/python3".into()
            })
        );
        let end = br#"{"type":"end","id":"ab"}"#;
        assert_eq!(
            Reply::from_body(end).unwrap(),
            Reply::End(End { id: "ab".into() })
        );
        let result = json!({
            "type":"result","id":"ab","status":"exit","exit_code":3,
            "traceback":"","execution_count":2,"stdin_requested":false,
            "usage":{"cpu_seconds":0.01,"peak_rss_kb":9000,"wall_seconds":0.02},
            "display":[{"mime":"image/png","path":"/k/artifacts/fig-2-1.png"}]
        });
        let parsed = Reply::from_body(&serde_json::to_vec(&result).unwrap()).unwrap();
        let Reply::Result(r) = &parsed else {
            panic!("not a result: {parsed:?}")
        };
        assert_eq!(r.status, RunnerStatus::Exit);
        assert_eq!(r.exit_code, Some(3));
        assert_eq!(r.usage.peak_rss_kb, 9000);
        assert_eq!(r.display[0].mime, "image/png");
        // And back to the same JSON.
        assert_eq!(serde_json::to_value(&parsed).unwrap(), result);
    }

    #[test]
    fn exit_code_is_omitted_unless_present() {
        let r = Reply::Result(CellResult {
            id: "x".into(),
            status: RunnerStatus::Ok,
            exit_code: None,
            traceback: String::new(),
            execution_count: 1,
            stdin_requested: false,
            usage: Usage::default(),
            display: vec![],
            read: None,
        });
        let v = serde_json::to_value(&r).unwrap();
        assert!(v.get("exit_code").is_none());
        assert_eq!(v["status"], "ok");
    }

    #[test]
    fn unknown_or_malformed_bodies_are_errors_not_panics() {
        assert!(Reply::from_body(b"{}").is_err());
        assert!(Reply::from_body(br#"{"type":"nope"}"#).is_err());
        assert!(Reply::from_body(b"\xff\xfe").is_err());
        assert!(Reply::from_body(br#"{"type":"result","id":1}"#).is_err());
    }

    #[test]
    fn reading_the_tag_first_parses_as_the_tagged_enum_does() {
        let bodies: [&[u8]; 9] = [
            br#"{"type":"end","id":"c1"}"#,
            br#"{"id":"c1","type":"end"}"#,
            br#"{"type":"e\u006ed","id":"c1"}"#,
            br#"{"type":"ready","protocol":1,"pid":7,"python":"3.11.7","executable":"/p"}"#,
            br#"{"type":"result","id":"c","status":"ok","traceback":"","execution_count":1,"stdin_requested":false,"usage":{"cpu_seconds":0.0,"peak_rss_kb":1,"wall_seconds":0.0},"display":[]}"#,
            br#"{"type":"result","id":"c","status":"nope"}"#,
            br#"{"type":"end","type":"result","id":"c"}"#,
            br#"{"type":7}"#,
            br#"[1,2]"#,
        ];
        for b in bodies {
            let tagged = serde_json::from_slice::<Reply>(b);
            let fast = Reply::from_body(b);
            match (&tagged, &fast) {
                (Ok(x), Ok(y)) => assert_eq!(x, y),
                (Err(_), Err(_)) => {}
                _ => panic!("{}: {tagged:?} vs {fast:?}", String::from_utf8_lossy(b)),
            }
        }
    }

    #[test]
    fn hello_debug_hides_the_sentinel() {
        let h = Hello {
            sentinel: "topsecret".into(),
            protocol: 1,
            inband_tools: false,
            cwd: None,
        };
        assert!(!format!("{h:?}").contains("topsecret"));
    }
}
