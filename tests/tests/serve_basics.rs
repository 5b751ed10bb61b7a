//! The protocol basics `serve` answers by itself, through each adapter's
//! serve binary as a real process (`serve-tokio`, `serve-async-std`,
//! `serve-blocking`; their options are `serve_tools::options`): `initialize`
//! with version negotiation, a second `initialize` refused, `ping`,
//! `tools/list`, method-not-found, an unknown tool refused — and the one
//! tool call that reaches the handler; the 2026-07-28 revision beside it
//! (`server/discover`, requests carrying their context in `_meta`, results
//! in the 2026 shape); and no message for a cancelled request after its
//! cancel arrived. The three must answer alike: the decisions live once, in
//! the core.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use mcp_stdio_core::{
    LATEST_HANDSHAKE_VERSION, META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION,
    META_SERVER_INFO, SUPPORTED_PROTOCOL_VERSIONS, UNSUPPORTED_PROTOCOL_VERSION,
};
use mcp_stdio_tests::serve_tools::INSTRUCTIONS;
use serde_json::{json, Value};

/// Generous bound for one answer on a shared 2-core machine.
const PROMPT: Duration = Duration::from_secs(10);
/// Exit after stdin EOF with nothing running: well inside the drain timeout.
const EXIT_BOUND: Duration = Duration::from_secs(15);

struct Server {
    name: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Receiver<String>,
    stderr: Receiver<String>,
    next_id: u64,
}

impl Server {
    fn start(name: &'static str, path: &str) -> Self {
        let mut child = Command::new(path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: spawn {path}: {e}"));
        Self {
            name,
            stdin: child.stdin.take(),
            stdout: lines(child.stdout.take().expect("piped")),
            stderr: lines(child.stderr.take().expect("piped")),
            child,
            next_id: 0,
        }
    }

    fn send(&mut self, v: &Value) {
        let mut line = serde_json::to_vec(v).expect("json");
        line.push(b'\n');
        self.stdin
            .as_mut()
            .expect("stdin open")
            .write_all(&line)
            .unwrap_or_else(|e| panic!("{}: write stdin: {e}", self.name));
    }

    /// Sends a request and returns its answer (the `result` or the `error`),
    /// checking it carries the request's id.
    fn call(&mut self, method: &str, params: Option<Value>) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut req = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if let Some(p) = params {
            req["params"] = p;
        }
        let t = Instant::now();
        self.send(&req);
        let line = self
            .stdout
            .recv_timeout(PROMPT)
            .unwrap_or_else(|_| panic!("{}: no answer to {method} within {PROMPT:?}", self.name));
        let took = t.elapsed();
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        assert_eq!(v["id"], id, "{}: {method}: {v}", self.name);
        eprintln!("{}: {method} answered in {took:?}", self.name);
        v.get("result")
            .or_else(|| v.get("error"))
            .cloned()
            .unwrap_or_else(|| panic!("{}: {method}: neither result nor error: {v}", self.name))
    }

    /// The next stdout line as JSON, within `within`; `None` when none came.
    fn next_message(&self, within: Duration) -> Option<Value> {
        let line = self.stdout.recv_timeout(within).ok()?;
        Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}")))
    }

    /// Closes stdin, waits for the exit, and returns the report line's JSON.
    fn finish(mut self) -> Value {
        drop(self.stdin.take());
        let t = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                break s;
            }
            assert!(
                t.elapsed() < EXIT_BOUND,
                "{}: still running {EXIT_BOUND:?} after stdin EOF",
                self.name
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        eprintln!(
            "{}: exited {status} {:?} after stdin EOF",
            self.name,
            t.elapsed()
        );
        assert!(status.success(), "{}: {status}", self.name);
        let report = self
            .stderr
            .iter()
            .find_map(|l| l.split_once("; report ").map(|(_, r)| r.to_owned()))
            .unwrap_or_else(|| panic!("{}: no report line on stderr", self.name));
        serde_json::from_str(&report).unwrap_or_else(|e| panic!("{e}: {report}"))
    }
}

/// Reads `from` line by line on a thread, so a test waits with a deadline.
fn lines(from: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

fn initialize(version: &str) -> Option<Value> {
    Some(json!({
        "protocolVersion": version,
        "capabilities": {"roots": {"listChanged": true}},
        "clientInfo": {"name": "serve-basics-test", "version": "0"},
    }))
}

const SERVERS: [(&str, &str); 3] = [
    ("serve-tokio", env!("CARGO_BIN_EXE_serve-tokio")),
    ("serve-async-std", env!("CARGO_BIN_EXE_serve-async-std")),
    ("serve-blocking", env!("CARGO_BIN_EXE_serve-blocking")),
];

/// The whole lifecycle in one session, answered alike by every adapter.
#[test]
fn serve_answers_initialize_ping_tools_list_and_unknown_methods_itself() {
    for (name, path) in SERVERS {
        let mut s = Server::start(name, path);
        // Before initialize: served anyway (and counted).
        assert_eq!(s.call("ping", None), json!({}), "{name}");
        let tools = s.call("tools/list", None);
        let names: Vec<&str> = tools["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: {tools}"))
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect();
        assert_eq!(
            names,
            ["echo", "slow", "helper", "whoami", "ticker", "revision"],
            "{name}"
        );
        // A 2025-11-25 client sees no 2026 field.
        assert!(tools.get("resultType").is_none(), "{name}: {tools}");
        // Before initialize the handler knows nothing of the client.
        let who = s.call("tools/call", Some(json!({"name": "whoami"})));
        assert_eq!(who["content"][0]["text"], "null", "{name}: {who}");

        // A supported version is echoed.
        let init = s.call("initialize", initialize("2025-03-26"));
        assert_eq!(init["protocolVersion"], "2025-03-26", "{name}: {init}");
        assert_eq!(init["serverInfo"]["name"], format!("mcp-stdio-{name}"));
        assert_eq!(init["serverInfo"]["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(init["capabilities"], json!({"tools": {}}), "{name}");
        assert_eq!(init["instructions"], INSTRUCTIONS, "{name}");
        s.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));

        // A second initialize is refused; the session keeps its version.
        let again = s.call("initialize", initialize("2025-06-18"));
        assert_eq!(again["code"], -32600, "{name}: {again}");

        assert_eq!(s.call("resources/list", None)["code"], -32601, "{name}");
        assert_eq!(s.call("no/such/method", Some(json!({})))["code"], -32601);
        let unknown = s.call("tools/call", Some(json!({"name": "nope", "arguments": {}})));
        assert_eq!(unknown["code"], -32602, "{name}: {unknown}");
        // The handler's own check still applies to a known tool.
        let bad = s.call("tools/call", Some(json!({"name": "echo", "arguments": {}})));
        assert_eq!(bad["code"], -32602, "{name}: {bad}");

        // The one request that reaches the handler.
        let echo = s.call(
            "tools/call",
            Some(json!({"name": "echo", "arguments": {"text": "hi"}})),
        );
        assert_eq!(
            echo,
            json!({"content": [{"type": "text", "text": "hi"}], "isError": false}),
            "{name}"
        );
        let rev = s.call("tools/call", Some(json!({"name": "revision"})));
        assert_eq!(
            rev["content"][0]["text"], r#""2025-03-26""#,
            "{name}: {rev}"
        );
        // The handler sees the client's initialize, which `serve` answered.
        let who = s.call("tools/call", Some(json!({"name": "whoami"})));
        let who: Value = serde_json::from_str(who["content"][0]["text"].as_str().expect("text"))
            .unwrap_or_else(|e| panic!("{name}: {e}: {who}"));
        assert_eq!(
            who,
            json!({"protocol_version": "2025-03-26",
                   "client_info": {"name": "serve-basics-test", "version": "0"},
                   "capabilities": {"roots": {"listChanged": true}}}),
            "{name}"
        );
        assert_eq!(s.call("ping", Some(json!({}))), json!({}), "{name}");

        let report = s.finish();
        eprintln!("{name}: report {report}");
        assert_eq!(report["protocol_version"], "2025-03-26", "{name}");
        assert_eq!(
            report["client_info"],
            json!({"name": "serve-basics-test", "version": "0"}),
            "{name}"
        );
        let basics = &report["basics"];
        // ping, tools/list, initialize, initialize, 2 unknown methods, unknown tool, ping.
        assert_eq!(basics["answered"], 8, "{name}: {basics}");
        assert_eq!(basics["modern_requests"], 0, "{name}: {basics}");
        assert_eq!(report["began_modern"], false, "{name}");
        assert_eq!(basics["method_not_found"], 2, "{name}: {basics}");
        assert_eq!(basics["unknown_tools"], 1, "{name}: {basics}");
        assert_eq!(basics["initialize_refused"], 1, "{name}: {basics}");
        assert_eq!(basics["requests_before_initialize"], 2, "{name}: {basics}");
        // Thirteen requests admitted: eight answered by `serve`, five tool calls by the handler.
        assert_eq!(report["metrics"]["requests"], 13, "{name}: {report}");
    }
}

/// Version negotiation through each adapter: bad params are invalid params
/// (and leave the session uninitialised), an unsupported version gets our
/// latest.
#[test]
fn serve_negotiates_the_protocol_version() {
    for (name, path) in SERVERS {
        let mut s = Server::start(name, path);
        for params in [None, Some(json!({})), Some(json!({"protocolVersion": 1}))] {
            let e = s.call("initialize", params.clone());
            assert_eq!(e["code"], -32602, "{name}: {params:?}: {e}");
        }
        let init = s.call("initialize", initialize("1999-01-01"));
        assert_eq!(init["protocolVersion"], LATEST_HANDSHAKE_VERSION, "{name}");
        let report = s.finish();
        assert_eq!(report["protocol_version"], LATEST_HANDSHAKE_VERSION);
        assert_eq!(report["basics"]["initialize_refused"], 3, "{name}");
    }
}

/// `params` with the `_meta` of a 2026-07-28 request (what the Python
/// client's `_make_modern_stamp` sends) added, keeping other `_meta` keys.
fn modern(mut params: Value) -> Option<Value> {
    let meta = params
        .as_object_mut()
        .expect("params are an object")
        .entry("_meta")
        .or_insert_with(|| json!({}));
    meta[META_PROTOCOL_VERSION] = json!("2026-07-28");
    meta[META_CLIENT_CAPABILITIES] = json!({"elicitation": {}});
    meta[META_CLIENT_INFO] = json!({"name": "modern-test", "version": "26"});
    Some(params)
}

/// Checks `v` is a valid 2026-07-28 `DiscoverResult` of a serve binary (the
/// fields the Python `mcp` client validates: `mcp_types._v2026_07_28`).
fn assert_discover_result(name: &str, v: &Value) {
    assert_eq!(v["resultType"], "complete", "{name}: {v}");
    assert_eq!(
        v["supportedVersions"],
        json!(SUPPORTED_PROTOCOL_VERSIONS),
        "{name}: {v}"
    );
    assert!(
        v["ttlMs"].as_u64().is_some(),
        "{name}: ttlMs an integer >= 0: {v}"
    );
    assert!(
        matches!(v["cacheScope"].as_str(), Some("private" | "public")),
        "{name}: {v}"
    );
    assert_eq!(v["capabilities"], json!({"tools": {}}), "{name}: {v}");
    assert_eq!(v["instructions"], INSTRUCTIONS, "{name}");
    assert_eq!(
        v["_meta"][META_SERVER_INFO],
        json!({"name": format!("mcp-stdio-{name}"), "version": env!("CARGO_PKG_VERSION")}),
        "{name}: {v}"
    );
}

/// The 2026-07-28 revision through each adapter: a session that begins with
/// `server/discover` and carries its context in every request's `_meta`
/// (results in the 2026 shape; `ping` gone; -32602 without the `_meta`,
/// -32022 for a version not spoken), and one whose `initialize` asked for
/// 2026-07-28.
#[test]
fn serve_answers_server_discover_and_2026_07_28_requests() {
    for (name, path) in SERVERS {
        let mut s = Server::start(name, path);
        let d = s.call("server/discover", modern(json!({})));
        assert_discover_result(name, &d);

        let tools = s.call("tools/list", modern(json!({})));
        assert_eq!(tools["resultType"], "complete", "{name}: {tools}");
        assert_eq!(tools["ttlMs"], 0, "{name}: {tools}");
        assert_eq!(tools["cacheScope"], "private", "{name}: {tools}");
        assert_eq!(tools["tools"].as_array().map(Vec::len), Some(6), "{name}");

        // The handler's result, completed by `serve`.
        let echo = s.call(
            "tools/call",
            modern(json!({"name": "echo", "arguments": {"text": "hi 2026"}})),
        );
        assert_eq!(
            echo,
            json!({"resultType": "complete",
                   "content": [{"type": "text", "text": "hi 2026"}], "isError": false}),
            "{name}"
        );
        // The handler sees its request's revision and the client's context.
        let rev = s.call("tools/call", modern(json!({"name": "revision"})));
        assert_eq!(
            rev["content"][0]["text"], r#""2026-07-28""#,
            "{name}: {rev}"
        );
        let who = s.call("tools/call", modern(json!({"name": "whoami"})));
        let who: Value = serde_json::from_str(who["content"][0]["text"].as_str().expect("text"))
            .unwrap_or_else(|e| panic!("{name}: {e}: {who}"));
        assert_eq!(
            who,
            json!({"protocol_version": "2026-07-28",
                   "client_info": {"name": "modern-test", "version": "26"},
                   "capabilities": {"elicitation": {}}}),
            "{name}"
        );

        // Removed in 2026-07-28.
        let ping = s.call("ping", modern(json!({})));
        assert_eq!(ping["code"], -32601, "{name}: {ping}");
        let level = s.call("logging/setLevel", modern(json!({"level": "info"})));
        assert_eq!(level["code"], -32601, "{name}: {level}");
        // The session began modern: a request without its context is refused.
        let bare = s.call("tools/list", None);
        assert_eq!(bare["code"], -32602, "{name}: {bare}");
        let other = s.call(
            "tools/list",
            Some(json!({"_meta": {META_PROTOCOL_VERSION: "2099-01-01",
                                  META_CLIENT_CAPABILITIES: {}}})),
        );
        assert_eq!(
            other["code"], UNSUPPORTED_PROTOCOL_VERSION,
            "{name}: {other}"
        );
        assert_eq!(
            other["data"],
            json!({"requested": "2099-01-01", "supported": SUPPORTED_PROTOCOL_VERSIONS}),
            "{name}: {other}"
        );

        let report = s.finish();
        eprintln!("{name}: report {report}");
        assert_eq!(report["began_modern"], true, "{name}");
        assert_eq!(report["protocol_version"], Value::Null, "{name}");
        assert_eq!(
            report["client_info"],
            json!({"name": "modern-test", "version": "26"}),
            "{name}"
        );
        let basics = &report["basics"];
        assert_eq!(basics["discovers_answered"], 1, "{name}: {basics}");
        // discover, tools/list, three tool calls, ping, setLevel.
        assert_eq!(basics["modern_requests"], 7, "{name}: {basics}");
        assert_eq!(basics["missing_meta_refused"], 1, "{name}: {basics}");
        assert_eq!(basics["unsupported_version_refused"], 1, "{name}: {basics}");
        assert_eq!(basics["requests_before_initialize"], 0, "{name}: {basics}");

        // `initialize` asking for 2026-07-28: granted, and the session is modern.
        let mut s = Server::start(name, path);
        let init = s.call("initialize", initialize("2026-07-28"));
        assert_eq!(init["protocolVersion"], "2026-07-28", "{name}: {init}");
        let tools = s.call("tools/list", None);
        assert_eq!(tools["resultType"], "complete", "{name}: {tools}");
        assert_eq!(tools["ttlMs"], 0, "{name}: {tools}");
        let rev = s.call("tools/call", Some(json!({"name": "revision"})));
        assert_eq!(
            rev["content"][0]["text"], r#""2026-07-28""#,
            "{name}: {rev}"
        );
        assert_eq!(rev["resultType"], "complete", "{name}: {rev}");
        assert_eq!(s.call("ping", None)["code"], -32601, "{name}");
        let report = s.finish();
        assert_eq!(report["protocol_version"], "2026-07-28", "{name}");
    }
}

/// G7 on a real process, in both revisions: `ticker` sends progress every
/// millisecond and looks at its cancel only every 20 ticks, then sends one
/// more. After the cancel, the test sends `tools/list`, which `serve`
/// answers the moment it reads it: any progress of the cancelled request
/// after that answer left `serve` after the cancel arrived — none may. The
/// cancelled request gets no response, and a second request completes
/// promptly (G8).
#[test]
fn g7_no_notification_for_a_cancelled_request_leaves_serve() {
    /// How long the test keeps reading after the marker's answer.
    const QUIET: Duration = Duration::from_millis(500);
    for (name, path) in SERVERS {
        for modern_session in [false, true] {
            let label = format!(
                "{name} {}",
                if modern_session {
                    "2026-07-28"
                } else {
                    "2025-11-25"
                }
            );
            let params = |p: Value| if modern_session { modern(p) } else { Some(p) };
            let mut s = Server::start(name, path);
            if !modern_session {
                let init = s.call("initialize", initialize("2025-11-25"));
                assert_eq!(init["protocolVersion"], "2025-11-25", "{label}");
                s.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
            }
            let ticker_id = 100;
            s.send(
                &json!({"jsonrpc": "2.0", "id": ticker_id, "method": "tools/call",
                "params": params(json!({"name": "ticker", "arguments": {"check_every": 20},
                                        "_meta": {"progressToken": "tick"}}))}),
            );
            let is_tick = |v: &Value| v["params"]["progressToken"] == "tick";
            let t = Instant::now();
            let mut before = 0;
            while before < 10 {
                let v = s
                    .next_message(PROMPT)
                    .unwrap_or_else(|| panic!("{label}: only {before} ticks within {PROMPT:?}"));
                assert!(is_tick(&v), "{label}: {v}");
                before += 1;
            }
            s.send(
                &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": ticker_id, "reason": "test"}}),
            );
            let marker_id = 101;
            s.send(
                &json!({"jsonrpc": "2.0", "id": marker_id, "method": "tools/list",
                "params": params(json!({}))}),
            );
            // What was on its way before the cancel arrived may still come.
            loop {
                let v = s
                    .next_message(PROMPT)
                    .unwrap_or_else(|| panic!("{label}: no answer to tools/list"));
                if v["id"] == marker_id {
                    break;
                }
                assert!(is_tick(&v), "{label}: {v}");
                before += 1;
            }
            let mut after = Vec::new();
            let quiet_end = Instant::now() + QUIET;
            while let Some(v) = s.next_message(quiet_end.saturating_duration_since(Instant::now()))
            {
                after.push(v);
            }
            assert!(
                after.is_empty(),
                "{label}: {} messages after the cancel arrived: {:?}",
                after.len(),
                after.iter().take(3).collect::<Vec<_>>()
            );
            // G8: the session goes on.
            let echo = s.call(
                "tools/call",
                params(json!({"name": "echo", "arguments": {"text": "after"}})),
            );
            assert_eq!(echo["content"][0]["text"], "after", "{label}: {echo}");
            let report = s.finish();
            let m = &report["metrics"];
            eprintln!(
                "{label}: {before} ticks before the marker in {:?}; dropped after cancel {}, withdrawn {}, suppressed {}",
                t.elapsed(),
                report["notifications_after_cancel_dropped"],
                m["notifications_withdrawn"],
                m["responses_suppressed"]
            );
            assert_eq!(m["cancels_running"], 1, "{label}: {report}");
            // The handler that returned after its last tick had that tick dropped.
            if m["responses_suppressed"] == 1 {
                assert!(
                    report["notifications_after_cancel_dropped"].as_u64() >= Some(1),
                    "{label}: {report}"
                );
            }
        }
    }
}
