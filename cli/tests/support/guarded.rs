//! A guard run by a test as a host runs it: `mcp-stdio guard` in front of
//! the fixture server (or any command), stdout lines on a channel, stderr
//! collected. Shared by the guard's test files (`#[path]`-included).
//!
//! The fixture server is built by the tests crate: run
//! `cargo build -p mcp-stdio-tests --bins` first (CI does, through
//! `cargo test --workspace`).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use mcp_stdio_tests::TempPath;
use serde_json::{json, Value};

pub(crate) fn fixture_server() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/debug/fixture-server");
    assert!(
        p.exists(),
        "{} is missing: run `cargo build -p mcp-stdio-tests --bins` first",
        p.display()
    );
    p
}

pub(crate) fn guard_bin() -> &'static str {
    env!("CARGO_BIN_EXE_mcp-stdio")
}

/// `name` in a temporary folder of its own, removed with what is in it when the test ends.
pub(crate) fn tmp(name: &str) -> TempPath {
    TempPath::new(name)
}

/// A running guard: lines from its stdout arrive on a channel; its stderr is collected.
pub(crate) struct Guarded {
    pub(crate) child: Child,
    pub(crate) stdin: Option<ChildStdin>,
    pub(crate) lines: Receiver<String>,
    pub(crate) stderr: thread::JoinHandle<String>,
}

impl Guarded {
    pub(crate) fn start(guard_args: &[&str], server_args: &[&str]) -> Self {
        let mut cmd = Command::new(guard_bin());
        cmd.arg("guard")
            .args(guard_args)
            .arg("--")
            .arg(fixture_server())
            .args(server_args);
        Self::spawn(cmd)
    }

    pub(crate) fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the guard");
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut stderr = child.stderr.take().expect("piped");
        let stderr = thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        Self {
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
        }
    }

    pub(crate) fn send(&mut self, v: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{v}").expect("write to the guard");
        stdin.flush().expect("flush");
    }

    pub(crate) fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).expect("write to the guard");
        stdin.flush().expect("flush");
    }

    /// The next line from the guard's stdout, as JSON (every line must be JSON: G13).
    pub(crate) fn recv(&self, within: Duration) -> Value {
        let line = self
            .lines
            .recv_timeout(within)
            .unwrap_or_else(|e| panic!("no line from the guard within {within:?}: {e}"));
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("guard stdout line is not JSON ({e}): {line}"))
    }

    /// Waits for the response with `id`, returning it and every line before it.
    pub(crate) fn response(&self, id: Value, within: Duration) -> (Value, Vec<Value>) {
        let deadline = Instant::now() + within;
        let mut before = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self.recv(left);
            if v.get("id") == Some(&id) && (v.get("result").is_some() || v.get("error").is_some()) {
                return (v, before);
            }
            before.push(v);
        }
    }

    pub(crate) fn initialize(&mut self) {
        self.send(&json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}));
        let (r, _) = self.response(json!(0), Duration::from_secs(10));
        assert_eq!(r["result"]["serverInfo"]["name"], "fixture-server");
        self.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    }

    /// Waits for the guard to exit with its stdin still open (it closed the
    /// session itself); returns (exit code, stderr).
    pub(crate) fn exits_by_itself(mut self, within: Duration) -> (Option<i32>, String) {
        let t = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                let err = self.stderr.join().expect("stderr reader");
                return (status.code(), err);
            }
            if t.elapsed() > within {
                let _ = self.child.kill();
                panic!("the guard did not close the session within {within:?}");
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Closes stdin and waits for the guard to exit; returns (exit code, stderr, elapsed).
    pub(crate) fn finish(mut self, within: Duration) -> (Option<i32>, String, Duration) {
        self.stdin = None;
        let t = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                let err = self.stderr.join().expect("stderr reader");
                return (status.code(), err, t.elapsed());
            }
            if t.elapsed() > within {
                let _ = self.child.kill();
                panic!("the guard did not exit within {within:?}");
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
}

pub(crate) fn call(id: i64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":args}})
}

/// [`call`] with a string id.
pub(crate) fn call_named(id: &str, tool: &str, args: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":args}})
}
