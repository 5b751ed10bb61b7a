//! A guard run by a test as a host runs it: `mcp-stdio guard` in front of
//! the fixture server (or any command), stdout lines on a channel, stderr
//! collected. Shared by the guard's test files (`#[path]`-included).
//!
//! The fixture server is built by the tests crate: run
//! `cargo build -p mcp-stdio-tests --bins` first (CI does, through
//! `cargo test --workspace`).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
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

/// The bound of the waits that are given none ([`Guarded::reply`],
/// [`Guarded::call_tool`], [`Guarded::close`], [`Guarded::initialize`]),
/// unless [`Guarded::bounded`] sets another.
pub(crate) const DEFAULT_BOUND: Duration = Duration::from_secs(10);

/// `mcp-stdio guard GUARD_ARGS -- SERVER…`; the guard's own environment
/// gets `env` on top of ours.
pub(crate) fn guard_command(
    guard_args: &[&str],
    server: &[&Path],
    env: &[(&str, &str)],
) -> Command {
    let mut cmd = Command::new(guard_bin());
    cmd.arg("guard").args(guard_args).arg("--").args(server);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// A running guard: lines from its stdout arrive on a channel; its stderr is
/// collected (or discarded: [`Guarded::spawn_discarding_stderr`]).
pub(crate) struct Guarded {
    pub(crate) child: Child,
    pub(crate) stdin: Option<ChildStdin>,
    pub(crate) lines: Receiver<String>,
    pub(crate) stderr: thread::JoinHandle<String>,
    /// The bound of the waits that are given none: [`DEFAULT_BOUND`] unless
    /// [`Guarded::bounded`] sets another.
    pub(crate) bound: Duration,
}

impl Guarded {
    /// The guard with `guard_args` in front of the fixture server with `server_args`.
    pub(crate) fn start(guard_args: &[&str], server_args: &[&str]) -> Self {
        Self::start_server(&fixture_server(), guard_args, server_args)
    }

    /// The guard with `guard_args` in front of `server` with `server_args`.
    pub(crate) fn start_server(server: &Path, guard_args: &[&str], server_args: &[&str]) -> Self {
        let mut cmd = guard_command(guard_args, &[server], &[]);
        cmd.args(server_args);
        Self::spawn(cmd)
    }

    /// Runs a prepared guard command (arguments, environment) with its
    /// stdin, stdout and stderr piped.
    pub(crate) fn spawn(cmd: Command) -> Self {
        Self::spawn_with_stderr(cmd, true)
    }

    /// [`Guarded::spawn`] with the guard's stderr going nowhere (the
    /// collected stderr is then empty).
    pub(crate) fn spawn_discarding_stderr(cmd: Command) -> Self {
        Self::spawn_with_stderr(cmd, false)
    }

    fn spawn_with_stderr(mut cmd: Command, collect_stderr: bool) -> Self {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(if collect_stderr {
                Stdio::piped()
            } else {
                Stdio::null()
            })
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
        let stderr = child.stderr.take();
        let stderr = thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut stderr) = stderr {
                let _ = stderr.read_to_string(&mut s);
            }
            s
        });
        Self {
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
            bound: DEFAULT_BOUND,
        }
    }

    /// Sets the bound of the waits that are given none.
    pub(crate) fn bounded(mut self, bound: Duration) -> Self {
        self.bound = bound;
        self
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

    /// [`Guarded::response`] within the guard's bound, without the lines before it.
    pub(crate) fn reply(&self, id: impl Into<Value>) -> Value {
        self.response(id.into(), self.bound).0
    }

    /// Calls `tool` with `args` and waits (within the guard's bound) for the response.
    pub(crate) fn call_tool(&mut self, id: impl Into<Value>, tool: &str, args: Value) -> Value {
        let id = id.into();
        self.send(&json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
            "params":{"name":tool,"arguments":args}}));
        self.reply(id)
    }

    /// `tools/list` (one page, from `cursor`), answered within the guard's bound.
    pub(crate) fn list_tools(&mut self, id: impl Into<Value>, cursor: Option<&str>) -> Value {
        let id = id.into();
        let params = cursor.map_or(json!({}), |c| json!({ "cursor": c }));
        self.send(&json!({"jsonrpc":"2.0","id":id,"method":"tools/list","params":params}));
        self.reply(id)
    }

    /// The handshake with the fixture server (protocol version 2025-06-18),
    /// answered within the guard's bound.
    pub(crate) fn initialize(&mut self) {
        let r = self.initialize_as("2025-06-18");
        assert_eq!(r["result"]["serverInfo"]["name"], "fixture-server", "{r}");
    }

    /// The handshake asking for `protocol_version`: `initialize` (answered
    /// within the guard's bound), then `notifications/initialized`; returns
    /// the answer to `initialize`.
    pub(crate) fn initialize_as(&mut self, protocol_version: &str) -> Value {
        self.send(&json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":protocol_version,"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}));
        let r = self.reply(0);
        self.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
        r
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

    /// [`Guarded::finish`] within the guard's bound, saying how long the exit
    /// took; returns (exit code, stderr).
    pub(crate) fn close(self) -> (Option<i32>, String) {
        let within = self.bound;
        let (code, stderr, took) = self.finish(within);
        eprintln!("the guard exited after {took:?}");
        (code, stderr)
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

/// A `ping` through the guard, answered within its bound; how long it took.
pub(crate) fn ping(g: &mut Guarded, id: i64) -> Duration {
    let t = Instant::now();
    g.send(&json!({"jsonrpc": "2.0", "id": id, "method": "ping"}));
    let r = g.reply(id);
    assert!(r.get("result").is_some(), "{r}");
    t.elapsed()
}

/// The notes of the audit log's records of `operation` (a method, or a
/// tool's name for a `tools/call`), in order.
pub(crate) fn audit_notes(audit: &Path, operation: &str) -> Vec<String> {
    let text = std::fs::read_to_string(audit).expect("the audit log");
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("JSON entry"))
        .filter(|e| e["record"]["operation"] == operation)
        .flat_map(|e| {
            e["record"]["events"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|ev| ev["detail"].as_str().map(str::to_owned))
        .collect()
}

/// A runtime folder of a test's own (`XDG_RUNTIME_DIR`, mode 0700): where
/// its guards announce themselves, share their servers, and where `ps`
/// looks.
pub(crate) struct RuntimeBase(TempPath);

impl RuntimeBase {
    /// A fresh one.
    pub(crate) fn new() -> Self {
        use std::os::unix::fs::PermissionsExt;
        let t = tmp("xdg");
        std::fs::create_dir(t.path()).expect("base");
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o700)).expect("0700");
        Self(t)
    }

    /// Its path.
    pub(crate) fn path(&self) -> &Path {
        self.0.path()
    }

    /// Its `mcp-stdio` folder (the status sockets; `share/` in it).
    pub(crate) fn folder(&self) -> PathBuf {
        self.path().join("mcp-stdio")
    }

    /// `mcp-stdio guard ARGS -- fixture-server` in this base.
    pub(crate) fn guard_command(&self, guard_args: &[&str]) -> Command {
        let base = self.path().to_str().expect("utf-8");
        guard_command(
            guard_args,
            &[&fixture_server()],
            &[("XDG_RUNTIME_DIR", base)],
        )
    }

    /// `mcp-stdio ARGS` in this base: (status, stdout, stderr).
    pub(crate) fn run(&self, args: &[&str]) -> (Option<i32>, String, String) {
        let out = Command::new(guard_bin())
            .args(args)
            .env("XDG_RUNTIME_DIR", self.path())
            .output()
            .expect("run mcp-stdio");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `mcp-stdio ps --json` in this base: a row per guard (and hub).
    pub(crate) fn ps(&self) -> Vec<Value> {
        let (code, out, err) = self.run(&["ps", "--json"]);
        assert_eq!(code, Some(0), "ps: {err}");
        serde_json::from_str(&out).expect("ps --json is JSON")
    }
}
