//! "Stalled peer" for the guard, through real processes (G1): the host stops
//! reading the guard's stdout while the server keeps writing, or nobody reads
//! the guard's stderr. The guard keeps draining the server, still carries
//! cancels and signals, keeps its queue within `--max-buffered`, and at that
//! limit exits 75 with the server shut down.
//!
//! The fixture server is built by the tests crate: run
//! `cargo build -p mcp-stdio-tests --bins` first (`cargo test --workspace`
//! builds every package's binaries before running tests).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use mcp_stdio_tests::helper_adapter::assert_group_gone;
use mcp_stdio_tests::{signal_group, signal_pid, wait_until, Signal};
use serde_json::{json, Value};

// The host here reads the guard's stdout only when told to, so it has a
// harness of its own; the shared one gives the command and the helpers.
#[path = "support/guarded.rs"]
mod guarded;
use guarded::{call, guard_command, tmp};

const MIB: usize = 1024 * 1024;

fn fixture_server() -> PathBuf {
    mcp_stdio_tests::fixture_server_path()
}

/// A host that reads the guard's stdout only when told to. The guard's stderr
/// is collected continuously (the server's log lines arrive through it).
struct Host {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    stderr: Arc<Mutex<String>>,
    server_pid: Option<u32>,
}

impl Host {
    fn start(guard_args: &[&str], server_args: &[&str]) -> Self {
        let mut child = guard_command(guard_args, &[&fixture_server()], &[])
            .args(server_args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the guard");
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let mut err = child.stderr.take().expect("piped");
        thread::spawn(move || {
            let mut buf = [0u8; 64 * 1024];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .expect("stderr lock")
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let mut host = Self {
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            child,
            stderr,
            server_pid: None,
        };
        host.server_pid = Some(host.server_pid());
        host
    }

    fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr lock").clone()
    }

    /// How long until the guard's stderr contains `needle`, or `None`.
    fn wait_stderr(&self, needle: &str, within: Duration) -> Option<Duration> {
        wait_until(within, Duration::from_millis(10), || {
            self.stderr().contains(needle)
        })
    }

    fn server_pid(&self) -> u32 {
        let seen = self.wait_stderr("fixture: started pid ", Duration::from_secs(10));
        assert!(seen.is_some(), "no server pid: {}", self.stderr());
        let text = self.stderr();
        let rest = &text[text.find("fixture: started pid ").expect("seen") + 21..];
        rest.split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a pid")
    }

    fn send(&mut self, v: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{v}").expect("write to the guard");
        stdin.flush().expect("flush");
    }

    /// One line from the guard's stdout, read byte by byte so nothing more is consumed.
    fn read_line(&mut self) -> Value {
        let out = self.stdout.as_mut().expect("stdout open");
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        loop {
            assert_eq!(out.read(&mut b).expect("read stdout"), 1, "stdout ended");
            if b[0] == b'\n' {
                break;
            }
            line.push(b[0]);
        }
        serde_json::from_slice(&line).expect("every stdout line is JSON")
    }

    fn initialize(&mut self) {
        self.send(&json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}));
        let r = self.read_line();
        assert_eq!(r["id"], 0, "{r}");
        self.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    }

    /// Waits for the guard to exit: (exit code, time taken).
    fn wait_exit(&mut self, within: Duration) -> (Option<i32>, Duration) {
        let t = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return (status.code(), t.elapsed());
            }
            assert!(
                t.elapsed() < within,
                "the guard did not exit within {within:?}; stderr: {}",
                tail(&self.stderr())
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Asserts the server's process group is empty (within a few seconds).
    fn assert_server_gone(&self) {
        assert_group_gone(self.server_pid.expect("server pid"));
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // Clean up after a failed assertion; harmless after a normal exit.
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(pgid) = self.server_pid {
            let _ = signal_group(pgid, Signal::SIGKILL);
        }
    }
}

fn tail(s: &str) -> &str {
    let mut from = s.len().saturating_sub(4000);
    while !s.is_char_boundary(from) {
        from += 1;
    }
    &s[from..]
}

/// The reproduction: a 1 MiB result, then ~45 MB of notifications, to a host
/// that stopped reading. The guard keeps draining the server until more than
/// `--max-buffered` (32 MiB by default) waits, then exits 75 and leaves no server.
#[test]
fn g1_guard_exits_75_when_host_stops_reading() {
    let metrics = tmp("exit75-metrics.json");
    let mut host = Host::start(&["--metrics", metrics.to_str().expect("utf-8")], &[]);
    host.initialize();
    host.send(&call(
        1,
        "result_then_flood",
        json!({"bytes": MIB, "notify_bytes": 45_000_000, "each": 1000, "delay_ms": 500}),
    ));
    host.send(&call(2, "echo", json!({"text": "second"})));
    // From here on the host reads nothing (the pipe stays open).
    let (code, took) = host.wait_exit(Duration::from_secs(20));
    eprintln!("host stopped reading: guard exited {code:?} after {took:?}");
    assert_eq!(code, Some(75), "{}", tail(&host.stderr()));
    host.assert_server_gone();
    assert!(
        host.stderr().contains("the host stopped reading stdout"),
        "{}",
        tail(&host.stderr())
    );
    let m: Value = serde_json::from_slice(&std::fs::read(&metrics).expect("metrics written"))
        .expect("metrics JSON");
    assert_eq!(m["guard_closed_session"], "host_stopped_reading");
    let peak = m["proxy"]["host_queue_peak"].as_u64().expect("peak");
    let limit = 32 * MIB as u64;
    eprintln!("queue peak {peak} bytes (limit {limit})");
    // The queue passes the limit by at most the message that crossed it.
    assert!(peak > limit && peak <= limit + 4 * MIB as u64, "{peak}");
}

/// The same stalled state, then SIGTERM to the guard: honoured within its
/// grace, and the server is shut down.
#[test]
fn g1_guard_honours_sigterm_while_the_host_is_not_reading() {
    let mut host = Host::start(
        &["--max-buffered", "100000000", "--shutdown-grace", "1"],
        &[],
    );
    host.initialize();
    host.send(&call(
        1,
        "result_then_flood",
        json!({"bytes": MIB, "notify_bytes": 8_000_000, "each": 1000, "delay_ms": 500}),
    ));
    host.send(&call(
        2,
        "slow",
        json!({"chunks": 1000, "delay_ms": 50, "honour_cancel": false}),
    ));
    let drained = host.wait_stderr("request 1 flood done", Duration::from_secs(20));
    assert!(drained.is_some(), "{}", tail(&host.stderr()));
    let guard_pid = host.child.id();
    let t = Instant::now();
    signal_pid(guard_pid, Signal::SIGTERM).expect("signal the guard");
    let (code, _) = host.wait_exit(Duration::from_secs(20));
    let took = t.elapsed();
    eprintln!("SIGTERM while stalled: guard exited {code:?} after {took:?}");
    // Grace 1 s (stdin close → TERM), then at most 2 s for the host to take
    // what it is owed: well under 10 s.
    assert!(took < Duration::from_secs(10), "{took:?}");
    host.assert_server_gone();
}

/// The host stops reading after a message smaller than the pipe buffer, and
/// after one larger: meanwhile the guard keeps reading the server's stdout and
/// stderr (the server is never blocked), and a cancel from the host still
/// reaches the server. When the host reads again, everything arrives, in order.
#[test]
fn g1_stalled_host_small_and_large_message_server_drained_and_cancel_delivered() {
    for first in [1000, 2 * MIB] {
        let mut host = Host::start(&["--max-buffered", "100000000"], &[]);
        host.initialize();
        host.send(&call(
            1,
            "result_then_flood",
            json!({"bytes": first, "notify_bytes": 4_000_000, "each": 1000}),
        ));
        // The flood finishes although the host reads nothing: stdout is drained.
        let t = Instant::now();
        let drained = host.wait_stderr("request 1 flood done", Duration::from_secs(20));
        assert!(drained.is_some(), "{}", tail(&host.stderr()));
        eprintln!(
            "[{first} B first] 4 MB of notifications drained in {:?}",
            t.elapsed()
        );
        // A cancel still reaches the server.
        host.send(&call(
            3,
            "slow",
            json!({"chunks": 1000, "delay_ms": 20, "honour_cancel": true}),
        ));
        let started = host.wait_stderr("request 3 received", Duration::from_secs(10));
        assert!(started.is_some(), "{}", tail(&host.stderr()));
        let t = Instant::now();
        host.send(&json!({"jsonrpc":"2.0","method":"notifications/cancelled",
            "params":{"requestId":3,"reason":"host gave up"}}));
        let cancelled = host.wait_stderr("request 3 cancel received", Duration::from_secs(10));
        assert!(cancelled.is_some(), "{}", tail(&host.stderr()));
        eprintln!(
            "[{first} B first] cancel reached the server in {:?}",
            t.elapsed()
        );
        // stderr is drained too: 3 MB pass the 1 MiB forwarding budget (so this comes
        // last: the server's log lines are not forwarded past it).
        host.send(&call(2, "stderr_flood", json!({"bytes": 3_000_000})));
        let seen = host.wait_stderr("server stderr passed its budget", Duration::from_secs(20));
        assert!(seen.is_some(), "{}", tail(&host.stderr()));
        // The host reads again: the responses to 1 and 2 arrive, never one for 3.
        let mut stdout = BufReader::new(host.stdout.take().expect("stdout"));
        let (mut got1, mut got2, mut notes) = (false, false, 0);
        let t = Instant::now();
        while !(got1 && got2) {
            assert!(t.elapsed() < Duration::from_secs(30), "responses missing");
            let mut line = String::new();
            assert!(
                stdout.read_line(&mut line).expect("read") > 0,
                "stdout ended"
            );
            let v: Value = serde_json::from_str(&line).expect("JSON line");
            match v.get("id").and_then(Value::as_i64) {
                Some(1) => {
                    got1 = true;
                    assert_eq!(notes, 0, "the result comes before its notifications");
                }
                Some(2) => got2 = true,
                Some(3) => panic!("a response for the cancelled request: {v}"),
                _ => notes += 1,
            }
        }
        assert!(notes > 3000, "{notes} notifications");
        host.stdin = None;
        let (code, took) = host.wait_exit(Duration::from_secs(15));
        eprintln!("[{first} B first] {notes} notifications read; exit {code:?} after {took:?}");
        assert_eq!(code, Some(0));
        host.assert_server_gone();
    }
}

/// "Stalled stderr": nobody reads the guard's own stderr while it has lots to
/// say (non-protocol server stdout moved there, the server's own stderr, debug
/// diagnostics). The session still works and ends promptly.
#[test]
fn g1_g10_stalled_stderr_the_session_still_works() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-stdio"))
        .env("MCP_STDIO_LOG", "debug")
        .args(["guard", "--stderr-budget", "1000000000", "--"])
        .arg(fixture_server())
        .args(["--noisy-stderr", "20000000", "--stdout-log-between"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped()) // never read
        .spawn()
        .expect("spawn");
    let _stderr = child.stderr.take().expect("piped");
    let mut stdin = child.stdin.take().expect("piped");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let t = Instant::now();
    for i in 0..20 {
        let req = call(i, "stdout_noise", json!({"lines": 2000}));
        writeln!(stdin, "{req}").expect("write");
        stdin.flush().expect("flush");
        loop {
            let line = lines.next().expect("a line").expect("readable");
            let v: Value = serde_json::from_str(&line).expect("only JSON on stdout");
            if v["id"] == i {
                assert!(v["result"].is_object(), "{v}");
                break;
            }
        }
    }
    let took = t.elapsed();
    eprintln!(
        "20 calls of 2000 noise lines each through a guard whose stderr nobody reads: {took:?}"
    );
    assert!(took < Duration::from_secs(30), "{took:?}");
    drop(stdin);
    let t = Instant::now();
    let exited = wait_until(Duration::from_secs(15), Duration::from_millis(10), || {
        child.try_wait().expect("try_wait").is_some()
    });
    let _ = child.kill();
    assert!(
        exited.is_some(),
        "the guard did not exit after stdin closed"
    );
    eprintln!("exit after stdin close: {:?}", t.elapsed());
}

/// Where stdout cannot be made non-blocking (a regular file here; a terminal
/// likewise), a writer thread owns the blocking write; stdin from a file is
/// read by tokio's stdin. The session is the same.
#[test]
fn g1_stdout_and_stdin_as_files_use_the_fallbacks() {
    let input = tmp("fallback-in.jsonl");
    let output = tmp("fallback-out.jsonl");
    let mut lines = String::new();
    lines.push_str(
        &json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})
        .to_string(),
    );
    lines.push('\n');
    lines.push_str(&call(1, "big", json!({"bytes": 3 * MIB})).to_string());
    lines.push('\n');
    std::fs::write(&input, lines).expect("write input");
    let t = Instant::now();
    let status = Command::new(env!("CARGO_BIN_EXE_mcp-stdio"))
        .args(["guard", "--"])
        .arg(fixture_server())
        .stdin(std::fs::File::open(&input).expect("input"))
        .stdout(std::fs::File::create(&output).expect("output"))
        .stderr(Stdio::null())
        .status()
        .expect("run the guard");
    eprintln!(
        "file stdin/stdout session: {status} after {:?}",
        t.elapsed()
    );
    assert_eq!(status.code(), Some(0));
    let text = std::fs::read_to_string(&output).expect("output");
    let ids: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("JSON")["id"].clone())
        .collect();
    assert_eq!(ids, [json!(0), json!(1)], "{} bytes", text.len());
    assert!(text.len() > 3 * MIB);
}

/// A guard whose stdin and stdout are one Unix socket (one file
/// description), as Node-based hosts and `socat EXEC:` give them: the
/// handshake done, then a 1 MiB result and `notify_bytes` of notifications
/// asked for. Returns the host's end, the guard and its collected stderr.
fn socket_guard_flooding(
    notify_bytes: u64,
) -> (
    std::os::unix::net::UnixStream,
    Child,
    thread::JoinHandle<String>,
) {
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    let (mut ours, theirs) = UnixStream::pair().expect("socketpair");
    let theirs_out = theirs.try_clone().expect("clone");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-stdio"))
        .args(["guard", "--max-buffered", "4000000", "--"])
        .arg(fixture_server())
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::from(OwnedFd::from(theirs_out)))
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the guard");
    let mut err = child.stderr.take().expect("piped");
    let stderr = thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    writeln!(
        ours,
        "{}",
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})
    )
    .expect("write");
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while b[0] != b'\n' {
        assert_eq!(ours.read(&mut b).expect("read"), 1);
        line.push(b[0]);
    }
    let v: Value = serde_json::from_slice(&line).expect("JSON");
    assert_eq!(v["id"], 0);
    writeln!(
        ours,
        "{}",
        call(
            1,
            "result_then_flood",
            json!({"bytes": MIB, "notify_bytes": notify_bytes, "each": 1000, "delay_ms": 300})
        )
    )
    .expect("write");
    (ours, child, stderr)
}

/// Waits (at most 30 s) for the guard to exit; returns its status and
/// stderr after checking that its server's group is gone.
fn guard_exit_leaving_no_server(
    what: &str,
    mut child: Child,
    stderr: thread::JoinHandle<String>,
) -> (std::process::ExitStatus, String) {
    let t = Instant::now();
    let exited = wait_until(Duration::from_secs(30), Duration::from_millis(10), || {
        child.try_wait().expect("try_wait").is_some()
    });
    let took = t.elapsed();
    let _ = child.kill();
    let status = child.wait().expect("wait");
    let text = stderr.join().expect("stderr");
    eprintln!("{what}: guard exited {status} after {took:?}");
    assert!(exited.is_some(), "the guard did not exit; {}", tail(&text));
    let pid: u32 = text
        .split("fixture: started pid ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .expect("server pid");
    assert_group_gone(pid);
    (status, text)
}

/// Node-based hosts give their children Unix socket pairs, not pipes: the
/// guard writes those with readiness too, and the reproduction holds.
#[test]
fn g1_guard_exits_75_when_host_stops_reading_a_socket() {
    let (_ours, child, stderr) = socket_guard_flooding(20_000_000);
    // From here on nothing is read from the socket.
    let (status, text) = guard_exit_leaving_no_server("socket host stopped reading", child, stderr);
    assert_eq!(status.code(), Some(75), "{}", tail(&text));
}

/// One socket as both stdin and stdout, and the host half-closes it and
/// stops reading. Closing the guard's input must not turn its output back
/// to blocking (the flags are the description's), or the loop would sit in
/// a write forever; it exits within its bounds and leaves no server.
#[test]
fn g1_one_socket_for_stdin_and_stdout_host_half_closes_and_stops_reading() {
    let (ours, child, stderr) = socket_guard_flooding(20_000_000);
    // The host's input ends; from here on nothing is read from the socket.
    ours.shutdown(std::net::Shutdown::Write)
        .expect("half-close");
    guard_exit_leaving_no_server("one-socket host half-closed", child, stderr);
}

/// The guard makes its stdout non-blocking while it runs; the file
/// description may be shared, so it is blocking again once the guard exits.
#[test]
fn g1_stdout_is_blocking_again_after_exit() {
    use rustix::fs::{fcntl_getfl, OFlags};
    let (_read, write) = rustix::pipe::pipe().expect("pipe");
    let ours = write.try_clone().expect("dup");
    let status = Command::new(env!("CARGO_BIN_EXE_mcp-stdio"))
        .args(["guard", "--"])
        .arg(fixture_server())
        .stdin(Stdio::null())
        .stdout(Stdio::from(write))
        .stderr(Stdio::null())
        .status()
        .expect("run the guard");
    assert_eq!(status.code(), Some(0));
    let flags = fcntl_getfl(&ours).expect("F_GETFL");
    assert!(!flags.contains(OFlags::NONBLOCK), "{flags:?}");
}

/// The audit log is written by a thread so the loop never waits on the disk;
/// a request still reaches the server only after its `dispatched` record is
/// on disk (G12).
#[test]
fn g12_audit_record_is_on_disk_before_the_server_sees_the_request() {
    let log = tmp("ordered-audit.jsonl");
    let mut host = Host::start(&["--audit", log.to_str().expect("utf-8")], &[]);
    host.initialize();
    for i in 1..=20 {
        host.send(&call(i, "echo", json!({"text": "x"})));
        let seen = host.wait_stderr(&format!("request {i} received"), Duration::from_secs(10));
        assert!(seen.is_some(), "{}", tail(&host.stderr()));
        let text = std::fs::read_to_string(&log).expect("audit log");
        let call_id = format!("{}/{i}", i + 1);
        let on_disk = text.lines().any(|l| {
            let v: Value = serde_json::from_str(l).expect("JSON line");
            v["record"]["call_id"] == call_id.as_str() && v["record"]["state"] == "dispatched"
        });
        assert!(
            on_disk,
            "request {i} reached the server before its record: {text}"
        );
        let r = host.read_line();
        assert_eq!(r["id"], i, "{r}");
    }
    host.stdin = None;
    let (code, _) = host.wait_exit(Duration::from_secs(10));
    assert_eq!(code, Some(0));
    let text = std::fs::read_to_string(&log).expect("audit log");
    // session_start, initialize + 20 echo calls (dispatched and completed
    // each), the seal at the host's EOF, session_end, then the last seal.
    assert_eq!(text.lines().count(), 1 + 2 * 21 + 3);
}

/// A host that keeps stdin open and idle does not hold the guard: when the
/// server exits by itself, the guard exits promptly with its status (no
/// thread sits in a blocking read of stdin).
#[test]
fn g1_guard_exits_promptly_while_the_host_keeps_stdin_open() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-stdio"))
        .args(["guard", "--", "sh", "-c", "sleep 0.2; exit 3"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the guard");
    let _stdin = child.stdin.take(); // open and idle for the whole test
    let t = Instant::now();
    let exited = wait_until(Duration::from_secs(10), Duration::from_millis(10), || {
        child.try_wait().expect("try_wait").is_some()
    });
    let took = t.elapsed();
    let _ = child.kill();
    let status = child.wait().expect("wait");
    eprintln!("server exited by itself, host stdin open: guard exited {status} after {took:?}");
    assert!(exited.is_some(), "the guard did not exit");
    assert_eq!(status.code(), Some(3));
}
