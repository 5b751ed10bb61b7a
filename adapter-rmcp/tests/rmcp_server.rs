//! An rmcp server over [`ServerTransport`] as a real process: the crate's
//! example `rmcp_server` (built with the crate's examples: `cargo test -p
//! mcp-stdio-rmcp` builds it; with `--test`, run `cargo build -p
//! mcp-stdio-rmcp --examples` first), driven over real pipes by a raw
//! JSON-RPC client here and by the Python `mcp` package's client.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use mcp_stdio_tests::interop::{python, require, scripts_dir};
use serde_json::{json, Value};

/// Generous: "at once" is milliseconds; CI machines are slow, never this slow.
const PROMPT: Duration = Duration::from_secs(10);

fn example_server() -> PathBuf {
    // Test binaries live in `target/<profile>/deps`; examples in `target/<profile>/examples`.
    let exe = std::env::current_exe().expect("the test's own path");
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>")
        .join("examples")
        .join("rmcp_server");
    assert!(
        path.exists(),
        "{} missing: run `cargo build -p mcp-stdio-rmcp --examples`",
        path.display()
    );
    path
}

/// A client speaking raw JSON-RPC to the example server over pipes. Stdout
/// is read on the test's thread until [`start_reading`](Self::start_reading)
/// hands it to a thread; until then nothing reads it unless asked.
struct RawClient {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Option<BufReader<ChildStdout>>,
    lines: Option<mpsc::Receiver<String>>,
    stderr: Arc<Mutex<String>>,
}

impl RawClient {
    fn spawn(args: &[&str]) -> Self {
        let mut child = Command::new(example_server())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the example server");
        let stderr = Arc::new(Mutex::new(String::new()));
        let pipe = child.stderr.take().expect("piped");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut s = sink.lock().expect("stderr lock");
                s.push_str(&line);
                s.push('\n');
            }
        });
        let stdout = child.stdout.take().map(BufReader::new);
        let stdin = child.stdin.take();
        let mut client = Self {
            child,
            stdin,
            stdout,
            lines: None,
            stderr,
        };
        client.send(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}),
        );
        let init = client.read_now();
        assert_eq!(init["id"], json!(1), "{init}");
        assert!(init["result"]["serverInfo"].is_object(), "{init}");
        client.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        client
    }

    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        let mut line = serde_json::to_vec(message).expect("encodes");
        line.push(b'\n');
        stdin.write_all(&line).expect("the server reads stdin");
        stdin.flush().expect("flush");
    }

    fn call(&mut self, id: u64, tool: &str, arguments: Value) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}));
    }

    /// One line of stdout, read on this thread.
    fn read_now(&mut self) -> Value {
        let mut line = String::new();
        let stdout = self.stdout.as_mut().expect("stdout not handed over");
        stdout.read_line(&mut line).expect("read stdout");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:.200}"))
    }

    /// From now on a thread reads stdout.
    fn start_reading(&mut self) {
        let stdout = self.stdout.take().expect("stdout not handed over");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        self.lines = Some(rx);
    }

    /// Messages until the response for `id`; panics after `within`.
    fn until_response(&mut self, id: u64, within: Duration) -> (Value, Vec<Value>) {
        if self.lines.is_none() {
            self.start_reading();
        }
        let deadline = Instant::now() + within;
        let mut before = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .as_ref()
                .expect("reading")
                .recv_timeout(left)
                .unwrap_or_else(|e| {
                    panic!(
                        "no response for {id} within {within:?} ({e}); stderr:\n{}",
                        self.stderr()
                    )
                });
            let message: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {line:.200}"));
            if message["id"] == json!(id) {
                return (message, before);
            }
            before.push(message);
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr lock").clone()
    }

    /// Waits until the server's stderr contains `needle`; how long it took.
    fn stderr_wait(&self, needle: &str, within: Duration) -> Duration {
        let started = Instant::now();
        while !self.stderr().contains(needle) {
            assert!(
                started.elapsed() < within,
                "no {needle:?} on the server's stderr within {within:?}:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        started.elapsed()
    }

    /// Closes stdin and reads stdout to its end.
    fn rest_until_eof(&mut self, within: Duration) -> Vec<Value> {
        drop(self.stdin.take());
        if self.lines.is_none() {
            self.start_reading();
        }
        let deadline = Instant::now() + within;
        let mut rest = Vec::new();
        let lines = self.lines.as_ref().expect("reading");
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) => rest.push(serde_json::from_str(&line).expect("JSON")),
                Err(mpsc::RecvTimeoutError::Disconnected) => return rest,
                Err(mpsc::RecvTimeoutError::Timeout) => panic!("stdout open after {within:?}"),
            }
        }
    }

    /// Closes stdin, waits for the exit and returns the transport's report.
    fn finish(mut self, within: Duration) -> (Value, Duration) {
        drop(self.stdin.take());
        let started = Instant::now();
        loop {
            if self.child.try_wait().expect("wait").is_some() {
                break;
            }
            if started.elapsed() > within {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "the server did not exit within {within:?} of stdin EOF:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let took = started.elapsed();
        // The stderr thread sees EOF right after the exit.
        let line = (0..200)
            .find_map(|_| {
                let stderr = self.stderr();
                let found = stderr
                    .lines()
                    .find_map(|l| l.strip_prefix("rmcp_server: report "))
                    .map(str::to_owned);
                if found.is_none() {
                    std::thread::sleep(Duration::from_millis(10));
                }
                found
            })
            .unwrap_or_else(|| panic!("no report on stderr:\n{}", self.stderr()));
        let report: Value = serde_json::from_str(&line).expect("the report is JSON");
        (report, took)
    }
}

impl Drop for RawClient {
    fn drop(&mut self) {
        // A failed test leaves no process behind.
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn result_text(response: &Value) -> &str {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a text result: {response:.300}"))
}

/// G1, pinned: a client that stops reading stdout while an 8 MiB response is
/// being written still gets a new request started and its cancel through to
/// rmcp's handler; notifications past the outgoing limit are refused, so
/// memory stays bounded; once the client reads again everything owed comes.
/// A loop that awaited the write would never start `slow`.
#[test]
fn g1_rmcp_server_reads_stdin_and_cancels_while_stdout_is_not_read() {
    let max_outgoing = 64 * 1024;
    let mut client = RawClient::spawn(&[
        "--max-frame",
        "16777216",
        "--max-outgoing",
        &max_outgoing.to_string(),
    ]);
    let big = 8 * 1024 * 1024;
    client.call(2, "big", json!({"bytes": big}));
    std::thread::sleep(Duration::from_millis(300));

    client.call(3, "slow", json!({"seconds": 60}));
    let started = client.stderr_wait("slow 3 started", PROMPT);
    client.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 3, "reason": "not needed"}}),
    );
    let cancelled = client.stderr_wait("slow 3 cancelled", PROMPT);
    eprintln!("stdout unread: slow started after {started:?}, its cancel reached rmcp after {cancelled:?}");

    // 2 MB of notifications against a 64 KiB outgoing limit, still unread.
    client.call(4, "flood", json!({"count": 200, "bytes": 10_000}));
    client.send(&json!({"jsonrpc": "2.0", "id": 5, "method": "ping"}));
    std::thread::sleep(Duration::from_millis(300));

    let t = Instant::now();
    let (ping, mut seen) = client.until_response(5, PROMPT);
    eprintln!("reading again: the ping answered after {:?}", t.elapsed());
    assert!(ping["result"].is_object(), "{ping}");
    if !seen.iter().any(|m| m["id"] == json!(4)) {
        // The flood may still be sending (through rmcp, which stops at EOF).
        let (flood, before) = client.until_response(4, PROMPT);
        seen.extend(before);
        seen.push(flood);
    }
    seen.extend(client.rest_until_eof(PROMPT));
    let response = |id: u64| {
        seen.iter()
            .find(|m| m["id"] == json!(id))
            .unwrap_or_else(|| panic!("a response for {id}"))
    };
    assert_eq!(
        result_text(response(2)).len(),
        big,
        "the 8 MiB response came whole"
    );
    assert_eq!(result_text(response(4)), "sent 200");
    assert!(
        !seen.iter().any(|m| m["id"] == json!(3)),
        "the cancelled request's response is suppressed"
    );
    let notifications = seen.iter().filter(|m| m.get("method").is_some()).count();

    let (report, took) = client.finish(PROMPT);
    eprintln!(
        "{notifications} of 200 notifications delivered; exit {took:?} after EOF; report {report}"
    );
    let serve = &report["serve"];
    let refused = serve["notifications_refused"].as_u64().expect("counted");
    assert!(refused > 0, "the outgoing limit refused some: {report}");
    assert_eq!(notifications as u64 + refused, 200, "{report}");
    assert_eq!(serve["metrics"]["cancels_running"], json!(1), "{report}");
    let peak = serve["outgoing_peak"].as_u64().expect("peak");
    // The big response plus at most the notification limit and one more message.
    assert!(
        peak <= (big + 2 * max_outgoing + 20_000) as u64,
        "outgoing memory bounded: peak {peak}"
    );
    assert_eq!(serve["end"], json!("input_closed"));
}

/// G9: a response above the wire limit reaches the client as an error for
/// its id; a notification above it is dropped and counted; the session goes on.
#[test]
fn g9_rmcp_server_oversized_response_becomes_an_error_for_its_id() {
    let max_frame = 64 * 1024;
    let mut client = RawClient::spawn(&["--max-frame", &max_frame.to_string()]);
    let t = Instant::now();
    client.call(2, "big", json!({"bytes": 100_000}));
    let (response, _) = client.until_response(2, PROMPT);
    eprintln!("oversized result answered in {:?}: {response}", t.elapsed());
    let message = response["error"]["message"].as_str().expect("an error");
    assert!(message.contains("wire limit"), "{response}");
    // The one wire-limit error of every component: code, text, data.
    assert_eq!(response["error"]["code"], -32000, "{response}");
    // It names the server's knob as its author writes it.
    assert!(
        message.ends_with("; raise ServeOptions::framer_mut().max_frame(bytes)"),
        "{response}"
    );
    assert_eq!(response["error"]["data"]["limit"], max_frame, "{response}");

    client.call(3, "log", json!({"bytes": 100_000}));
    let (logged, before) = client.until_response(3, PROMPT);
    assert!(result_text(&logged).starts_with("sent"), "{logged}");
    assert!(before.is_empty(), "the oversized notification was dropped");

    client.call(4, "echo", json!({"text": "still here"}));
    let (echo, _) = client.until_response(4, PROMPT);
    assert_eq!(result_text(&echo), "still here");

    let (report, _) = client.finish(PROMPT);
    let serve = &report["serve"];
    assert_eq!(
        serve["metrics"]["responses_too_large"],
        json!(1),
        "{report}"
    );
    assert_eq!(serve["notifications_refused"], json!(1), "{report}");
    let written = serve["metrics"]["stdout_bytes"].as_u64().expect("bytes");
    assert!(
        written < 3 * max_frame as u64,
        "nothing large was written: {written}"
    );
}

/// Server→client requests are not carried: rmcp's `list_roots` fails at
/// once with the transport's typed error, never a hang.
#[test]
fn rmcp_server_request_to_the_client_fails_at_once() {
    let mut client = RawClient::spawn(&[]);
    let t = Instant::now();
    client.call(2, "roots", json!({}));
    let (response, before) = client.until_response(2, PROMPT);
    eprintln!(
        "roots refused in {:?}: {}",
        t.elapsed(),
        result_text(&response)
    );
    assert!(
        result_text(&response).contains("not supported"),
        "{response}"
    );
    assert!(
        !before.iter().any(|m| m["method"] == json!("roots/list")),
        "nothing was sent to the client"
    );
    let (report, _) = client.finish(PROMPT);
    assert_eq!(report["server_requests_refused"], json!(1), "{report}");
}

/// Stdin EOF with a request still running: rmcp sees the transport close,
/// the request is answered with an error at the drain deadline, and the
/// process exits by itself (rmcp's own drain waits for its handler up to 5 s).
#[test]
fn g11_rmcp_server_at_stdin_eof_drains_with_a_deadline_and_exits() {
    let mut client = RawClient::spawn(&["--drain-ms", "500"]);
    client.call(2, "slow", json!({"seconds": 60}));
    client.stderr_wait("slow 2 started", PROMPT);
    client.start_reading();
    drop(client.stdin.take());
    let t = Instant::now();
    let (response, _) = client.until_response(2, PROMPT);
    let answered = t.elapsed();
    assert!(response["error"].is_object(), "{response}");
    let (report, took) = client.finish(Duration::from_secs(30));
    eprintln!("EOF: running request answered after {answered:?}, exit after {took:?}; {report}");
    assert!(answered < PROMPT);
    assert_eq!(report["serve"]["end"], json!("input_closed"), "{report}");
    assert_eq!(report["serve"]["aborted_at_exit"], json!(1), "{report}");
}

/// G7 with a client we did not write: the Python `mcp` package's stdio
/// client drives the rmcp server over our transport (initialize, tools/list,
/// echo short and 1 MiB, `slow` cancelled by its anyio scope, echo after,
/// ping, stdin close); rmcp's handler sees the cancel.
#[test]
fn g7_python_sdk_client_drives_the_rmcp_server_over_our_transport() {
    const TEST: &str = "g7_python_sdk_client_drives_the_rmcp_server_over_our_transport";
    let Some((python, mcp_version)) = require(TEST, python()) else {
        return;
    };
    let stderr_file = mcp_stdio_tests::TempPath::new("rmcp-server.stderr");
    let started = Instant::now();
    let mut child = Command::new(&python)
        .arg(scripts_dir().join("py_client.py"))
        .arg("--server-stderr")
        .arg(&stderr_file)
        .args(["--cancel-after", "1.0", "--"])
        .arg(example_server())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the Python client");
    let deadline = Instant::now() + Duration::from_secs(90);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the Python client did not finish in 90 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    let server_stderr = std::fs::read_to_string(&stderr_file).unwrap_or_default();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let context = format!(
        "--- client stderr:\n{}\n--- server stderr:\n{server_stderr}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON summary: {stdout}\n{context}"));
    eprintln!(
        "{TEST}: mcp {mcp_version}, {:?}; summary {summary}",
        started.elapsed()
    );
    assert!(
        out.status.success() && summary["ok"] == json!(true),
        "{summary}\n{context}"
    );
    assert_eq!(summary["server_name"], json!("mcp-stdio-rmcp-example"));
    assert_eq!(summary["slow_outcome"], json!("cancelled"), "{summary}");
    let echo_ms = summary["echo_after_cancel_ms"].as_f64().expect("timed");
    assert!(echo_ms < 5000.0, "echo after cancel took {echo_ms} ms");
    assert!(
        server_stderr.contains("\"end\":\"input_closed\""),
        "the server ended on stdin EOF by itself:\n{server_stderr}"
    );
}
