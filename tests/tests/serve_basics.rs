//! The protocol basics `serve` answers by itself, through each adapter's
//! serve binary as a real process (`serve-tokio`, `serve-async-std`,
//! `serve-blocking`; their options are `serve_tools::options`): `initialize`
//! with version negotiation, a second `initialize` refused, `ping`,
//! `tools/list`, method-not-found, an unknown tool refused — and the one
//! tool call that reaches the handler. The three must answer alike: the
//! decisions live once, in the core.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use mcp_stdio_core::LATEST_HANDSHAKE_VERSION;
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
        assert_eq!(names, ["echo", "slow", "helper", "whoami"], "{name}");
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
        assert_eq!(echo["content"][0]["text"], "hi", "{name}: {echo}");
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
        assert_eq!(basics["method_not_found"], 2, "{name}: {basics}");
        assert_eq!(basics["unknown_tools"], 1, "{name}: {basics}");
        assert_eq!(basics["initialize_refused"], 1, "{name}: {basics}");
        assert_eq!(basics["requests_before_initialize"], 2, "{name}: {basics}");
        // Twelve requests admitted: eight answered by `serve`, four tool calls by the handler.
        assert_eq!(report["metrics"]["requests"], 12, "{name}: {report}");
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
