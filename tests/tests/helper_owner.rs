//! A helper run outlives the handler that started it, through each adapter's
//! `serve` binary as a real process (`serve-tokio`, `serve-async-std`,
//! `serve-blocking`): its `helper` tool runs `fixture-helper sleep 30` with
//! `run_helper`, every record of the run logged to stderr by the record sink.
//!
//! A `notifications/cancelled` for the call (and, in the second case, the
//! client closing stdin) makes `serve` cancel the handler — tokio and
//! async-std drop its future. The helper must still get the supervisor path
//! (G7, G11: `SIGTERM`, grace, `SIGKILL`, drain), and the run's final record
//! must still be written (G12): `cancelled_after_dispatch`, with the exit
//! the owner observed.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Generous bound for "promptly" on a shared 2-core machine: the default
/// TERM grace is 2 s, then the drain.
const PROMPT: Duration = Duration::from_secs(10);

struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    log: Receiver<String>,
    name: &'static str,
}

impl Server {
    fn start(name: &'static str, path: &str) -> Self {
        let mut child = Command::new(path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: spawn {path}: {e}"));
        let stderr = child.stderr.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let (tx, log) = mpsc::channel();
        let out_tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        // Responses are logged too, so one channel gives the order of things.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if out_tx.send(format!("stdout {line}")).is_err() {
                    return;
                }
            }
        });
        Self {
            stdin: child.stdin.take(),
            child,
            log,
            name,
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

    /// The next log line containing `needle` (earlier ones are kept in
    /// `seen`).
    fn wait_for(&self, needle: &str, within: Duration, seen: &mut Vec<String>) -> String {
        let end = Instant::now() + within;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.log.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(line) => seen.push(line),
                Err(_) => panic!(
                    "{}: no line with {needle:?} within {within:?}; seen:\n{}",
                    self.name,
                    seen.join("\n")
                ),
            }
        }
    }

    fn handshake(&mut self) {
        self.send(
            &json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":"2025-06-18","capabilities":{},
            "clientInfo":{"name":"helper-owner-test","version":"0"}}}),
        );
        self.wait_for("stdout {", PROMPT, &mut Vec::new());
        self.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The record logged as `record ID {json}`.
fn record(line: &str) -> Value {
    let json = &line[line.find('{').expect("a record line holds JSON")..];
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

fn binary(name: &str) -> &'static str {
    match name {
        "tokio" => env!("CARGO_BIN_EXE_serve-tokio"),
        "async-std" => env!("CARGO_BIN_EXE_serve-async-std"),
        _ => env!("CARGO_BIN_EXE_serve-blocking"),
    }
}

/// Starts a 30 s helper through the `helper` tool and waits until its record
/// says `dispatched`.
fn start_helper(server: &mut Server, seen: &mut Vec<String>) {
    start_helper_with(server, seen, false);
}

fn start_helper_with(server: &mut Server, seen: &mut Vec<String>, ignore_term: bool) {
    server.send(&json!({"jsonrpc":"2.0","id":7,"method":"tools/call",
        "params":{"name":"helper","arguments":{"seconds":30,"ignore_term":ignore_term}}}));
    // The attempt is on record before the process exists (G12).
    let authorized = server.wait_for("\"state\":\"authorized\"", PROMPT, seen);
    assert!(authorized.contains("record 7 "), "{authorized}");
    let dispatched = server.wait_for("\"state\":\"dispatched\"", PROMPT, seen);
    assert!(dispatched.contains("record 7 "), "{dispatched}");
}

/// The final record after the cancel: the helper's exit was observed and
/// the state says the cancel came after dispatch.
fn assert_final(name: &str, line: &str, took: Duration) {
    let r = record(line);
    eprintln!(
        "{name}: final record {took:?} after the cancel: state {}, exit {}",
        r["state"], r["exit_status"]
    );
    assert_eq!(r["state"], "cancelled_after_dispatch", "{name}: {r}");
    assert!(
        !r["exit_status"].is_null(),
        "{name}: the owner observed the helper's exit: {r}"
    );
    assert!(took < PROMPT, "{name}: {took:?}");
}

fn cancel_reaches_a_helper_whose_handler_is_dropped(name: &'static str) {
    let mut server = Server::start(name, binary(name));
    server.handshake();
    let mut seen = Vec::new();
    start_helper(&mut server, &mut seen);
    let t = Instant::now();
    server.send(&json!({"jsonrpc":"2.0","method":"notifications/cancelled",
        "params":{"requestId":7,"reason":"test"}}));
    let last = server.wait_for("\"state\":\"cancelled_after_dispatch\"", PROMPT, &mut seen);
    // The record is emitted on the state change, then once more, final.
    let fin = loop {
        let line = server.wait_for("record 7 ", PROMPT, &mut seen);
        if record(&line)["exit_status"].is_null() {
            continue;
        }
        break line;
    };
    let _ = last;
    assert_final(name, &fin, t.elapsed());
    // The session goes on: a ping is answered.
    server.send(&json!({"jsonrpc":"2.0","id":"p","method":"ping"}));
    server.wait_for(
        "stdout {\"jsonrpc\":\"2.0\",\"id\":\"p\"",
        PROMPT,
        &mut seen,
    );
}

/// A helper that ignores `SIGTERM`: the owner waits the grace, then kills.
fn cancel_escalates_to_kill_after_the_grace(name: &'static str) {
    let mut server = Server::start(name, binary(name));
    server.handshake();
    let mut seen = Vec::new();
    start_helper_with(&mut server, &mut seen, true);
    // Time for the helper to block SIGTERM (it says so on its stderr, which
    // the run captures, not us).
    std::thread::sleep(Duration::from_secs(1));
    let t = Instant::now();
    server.send(&json!({"jsonrpc":"2.0","method":"notifications/cancelled",
        "params":{"requestId":7,"reason":"test"}}));
    let fin = loop {
        let line = server.wait_for("record 7 ", PROMPT, &mut seen);
        if !record(&line)["exit_status"].is_null() {
            break line;
        }
    };
    let took = t.elapsed();
    assert_final(name, &fin, took);
    let r = record(&fin);
    assert_eq!(
        r["exit_status"]["signal"], 9,
        "{name}: killed after the grace: {r}"
    );
    assert!(
        took >= Duration::from_millis(500),
        "{name}: SIGKILL came only after the TERM grace, not at once ({took:?})"
    );
}

fn client_gone_reaches_a_running_helper(name: &'static str) {
    let mut server = Server::start(name, binary(name));
    server.handshake();
    let mut seen = Vec::new();
    start_helper(&mut server, &mut seen);
    let t = Instant::now();
    // The client goes away: serve drains, then cancels what still runs.
    server.stdin = None;
    let fin = loop {
        let line = server.wait_for("record 7 ", Duration::from_secs(20), &mut seen);
        let r = record(&line);
        if r["state"] == "cancelled_after_dispatch" && !r["exit_status"].is_null() {
            break line;
        }
    };
    let took = t.elapsed();
    eprintln!("{name}: final record {took:?} after stdin closed");
    assert_final(name, &fin, Duration::ZERO);
    assert!(took < Duration::from_secs(20), "{name}: {took:?}");
}

#[test]
fn g7_g11_g12_tokio_cancel_reaches_a_helper_whose_handler_is_dropped() {
    cancel_reaches_a_helper_whose_handler_is_dropped("tokio");
}

#[test]
fn g7_g11_g12_async_std_cancel_reaches_a_helper_whose_handler_is_dropped() {
    cancel_reaches_a_helper_whose_handler_is_dropped("async-std");
}

#[test]
fn g7_g11_g12_blocking_cancel_reaches_a_running_helper() {
    cancel_reaches_a_helper_whose_handler_is_dropped("blocking");
}

#[test]
fn g11_g12_tokio_client_gone_reaches_a_running_helper() {
    client_gone_reaches_a_running_helper("tokio");
}

#[test]
fn g11_g12_async_std_client_gone_reaches_a_running_helper() {
    client_gone_reaches_a_running_helper("async-std");
}

#[test]
fn g11_g12_blocking_client_gone_reaches_a_running_helper() {
    client_gone_reaches_a_running_helper("blocking");
}

#[test]
fn g11_tokio_cancel_escalates_to_kill_after_the_grace() {
    cancel_escalates_to_kill_after_the_grace("tokio");
}

#[test]
fn g11_async_std_cancel_escalates_to_kill_after_the_grace() {
    cancel_escalates_to_kill_after_the_grace("async-std");
}

#[test]
fn g11_blocking_cancel_escalates_to_kill_after_the_grace() {
    cancel_escalates_to_kill_after_the_grace("blocking");
}
