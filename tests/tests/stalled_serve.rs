//! The "stalled peer" family for `serve`, against each adapter's serve
//! binary (`serve-tokio`, `serve-async-std`, `serve-blocking`) as a real
//! process: the client stops reading the server's stdout — after a response
//! smaller than the pipe buffer, and after one larger than it — while it
//! keeps writing requests and cancels. G1: the serve loop keeps reading
//! stdin, a cancel still reaches its handler promptly, and stdin EOF still
//! ends the process within the drain deadline plus the exit write grace,
//! with the unwritten bytes counted in the report. (`run_helper` has no
//! stdin pipe, so it has no write that a peer could stall.)

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Generous bound for "promptly" on a shared 2-core machine.
const PROMPT: Duration = Duration::from_secs(5);
/// The default drain timeout (5 s) plus the exit write grace (1 s), plus room.
const EXIT_BOUND: Duration = Duration::from_secs(15);

struct Server {
    child: Child,
    /// Held open and never read, in the stalled-stderr cases.
    _unread_stderr: Option<std::process::ChildStderr>,
    stdin: Option<ChildStdin>,
    stdout: Option<BufReader<ChildStdout>>,
    log: Receiver<(Instant, String)>,
    name: &'static str,
}

impl Server {
    fn start(name: &'static str, path: &str) -> Self {
        Self::spawn(name, path, None)
    }

    /// With `unread_stderr_log` (a `MCP_STDIO_TEST_LOG` value) stderr is
    /// never read and the server logs at that level.
    fn spawn(name: &'static str, path: &str, unread_stderr_log: Option<&str>) -> Self {
        let read_stderr = unread_stderr_log.is_none();
        let mut cmd = Command::new(path);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(log) = unread_stderr_log {
            // The library's own diagnostics too, through the same stderr.
            cmd.env("MCP_STDIO_TEST_LOG", log);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: spawn {path}: {e}"));
        let stderr = child.stderr.take().expect("piped");
        let (tx, log) = mpsc::channel();
        let mut unread = None;
        if read_stderr {
            // Stderr is read for the whole run: only stdout is stalled.
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { return };
                    if tx.send((Instant::now(), line)).is_err() {
                        return;
                    }
                }
            });
        } else {
            unread = Some(stderr);
        }
        Self {
            _unread_stderr: unread,
            stdin: child.stdin.take(),
            stdout: Some(BufReader::new(child.stdout.take().expect("piped"))),
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

    fn recv(&mut self) -> Value {
        let mut line = String::new();
        self.stdout
            .as_mut()
            .expect("stdout")
            .read_line(&mut line)
            .expect("a line");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }

    /// Waits for a stderr line containing `needle`; returns when it came.
    fn wait_log(&self, needle: &str, within: Duration) -> Instant {
        let end = Instant::now() + within;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.log.recv_timeout(left) {
                Ok((at, line)) if line.contains(needle) => return at,
                Ok(_) => {}
                Err(_) => panic!(
                    "{}: no stderr line with {needle:?} within {within:?}",
                    self.name
                ),
            }
        }
    }

    fn handshake(&mut self) {
        self.send(
            &json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":"2025-06-18","capabilities":{},
            "clientInfo":{"name":"stalled-client","version":"0"}}}),
        );
        let init = self.recv();
        assert_eq!(init["id"], 0, "{init}");
        self.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    }

    fn echo(&mut self, id: u64, bytes: usize) {
        self.send(&json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
            "params":{"name":"echo","arguments":{"text":"e".repeat(bytes)}}}));
    }

    fn wait_exit(&mut self, within: Duration) -> Option<Duration> {
        let start = Instant::now();
        while start.elapsed() < within {
            if self.child.try_wait().expect("try_wait").is_some() {
                return Some(start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the stalled-peer sequence against one serve binary.
fn stalled_client(name: &'static str, path: &str, response_bytes: usize) {
    let mut s = Server::start(name, path);
    s.wait_log("serving on stdio", PROMPT);
    s.handshake();
    // From here on the client reads nothing from stdout.
    s.echo(1, response_bytes);
    // More answers pile up behind it, bounded by the core.
    for id in 2..40u64 {
        s.send(&json!({"jsonrpc":"2.0","id":id,"method":"ping"}));
    }
    s.send(&json!({"jsonrpc":"2.0","id":100,"method":"tools/call",
        "params":{"name":"slow","arguments":{"seconds":60}}}));
    s.wait_log("slow 100 started", PROMPT);
    let sent = Instant::now();
    s.send(&json!({"jsonrpc":"2.0","method":"notifications/cancelled",
        "params":{"requestId":100,"reason":"stalled-client test"}}));
    let reached = s.wait_log("cancelled 100 after", PROMPT);
    let cancel_ms = reached.saturating_duration_since(sent).as_secs_f64() * 1e3;
    // Stdin EOF, stdout still unread: the process must still end.
    s.stdin = None;
    let exit = s.wait_exit(EXIT_BOUND);
    eprintln!(
        "{name}: response {response_bytes} B unread; cancel reached the handler in \
         {cancel_ms:.2} ms; exited {exit:?} after stdin EOF"
    );
    let exit = exit.unwrap_or_else(|| {
        panic!("{name}: still running {EXIT_BOUND:?} after stdin EOF with stdout unread")
    });
    assert!(exit < EXIT_BOUND);
    let report_line = std::iter::from_fn(|| s.log.recv_timeout(PROMPT).ok())
        .map(|(_, l)| l)
        .find(|l| l.contains("report "))
        .unwrap_or_else(|| panic!("{name}: no report line"));
    let report: Value =
        serde_json::from_str(report_line.split("report ").nth(1).expect("json")).expect("report");
    eprintln!("{name}: report {report}");
    if response_bytes > 1024 * 1024 / 2 {
        // The pipe holds far less than the response: the rest was given up.
        assert!(
            report["unwritten_at_exit"].as_u64().unwrap_or(0) > 0,
            "{name}: {report}"
        );
    } else {
        // Small enough for the pipe: the client can still read everything.
        let mut rest = String::new();
        s.stdout
            .take()
            .expect("stdout")
            .read_to_string(&mut rest)
            .expect("read");
        let answered = rest
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v.get("id").is_some())
            .count();
        assert_eq!(
            answered, 39,
            "{name}: echo + 38 pings answered, nothing for 100"
        );
        assert_eq!(report["unwritten_at_exit"], 0, "{name}: {report}");
    }
}

#[test]
fn g1_serve_tokio_serves_cancels_and_exits_while_a_small_response_is_unread() {
    stalled_client("serve-tokio", env!("CARGO_BIN_EXE_serve-tokio"), 8 * 1024);
}

#[test]
fn g1_serve_tokio_serves_cancels_and_exits_while_a_large_response_is_stuck() {
    stalled_client(
        "serve-tokio",
        env!("CARGO_BIN_EXE_serve-tokio"),
        1024 * 1024,
    );
}

#[test]
fn g1_serve_async_std_serves_cancels_and_exits_while_a_small_response_is_unread() {
    stalled_client(
        "serve-async-std",
        env!("CARGO_BIN_EXE_serve-async-std"),
        8 * 1024,
    );
}

#[test]
fn g1_serve_async_std_serves_cancels_and_exits_while_a_large_response_is_stuck() {
    stalled_client(
        "serve-async-std",
        env!("CARGO_BIN_EXE_serve-async-std"),
        1024 * 1024,
    );
}

#[test]
fn g1_serve_blocking_serves_cancels_and_exits_while_a_small_response_is_unread() {
    stalled_client(
        "serve-blocking",
        env!("CARGO_BIN_EXE_serve-blocking"),
        8 * 1024,
    );
}

#[test]
fn g1_serve_blocking_serves_cancels_and_exits_while_a_large_response_is_stuck() {
    stalled_client(
        "serve-blocking",
        env!("CARGO_BIN_EXE_serve-blocking"),
        1024 * 1024,
    );
}

/// One socket as both stdin and stdout (one file description, as `socat
/// EXEC:` gives its child): a response far larger than the socket holds,
/// then the client half-closes and reads nothing. Closing the server's input
/// must not turn its output back to blocking (the flags belong to the
/// description), or the loop would sit in a write past its drain deadline
/// once the client has read a little.
fn one_socket_client(name: &'static str, path: &str) {
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    let (ours, theirs) = UnixStream::pair().expect("socketpair");
    let theirs_out = theirs.try_clone().expect("clone");
    let mut child = Command::new(path)
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::from(OwnedFd::from(theirs_out)))
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{name}: spawn {path}: {e}"));
    let mut reader = BufReader::new(ours.try_clone().expect("clone"));
    let mut writer = ours;
    let mut send = |v: Value| {
        let mut line = serde_json::to_vec(&v).expect("json");
        line.push(b'\n');
        writer.write_all(&line).expect("write");
    };
    send(
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},
        "clientInfo":{"name":"one-socket-client","version":"0"}}}),
    );
    let mut line = String::new();
    reader.read_line(&mut line).expect("a line");
    let init: Value = serde_json::from_str(&line).expect("json");
    assert_eq!(init["id"], 0, "{name}: {init}");
    send(json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    send(json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
        "params":{"name":"echo","arguments":{"text":"e".repeat(4 * 1024 * 1024)}}}));
    // The input ends; the client reads a little (so the socket becomes
    // writable again, and a blocking write would take the loop), then nothing.
    writer
        .shutdown(std::net::Shutdown::Write)
        .expect("half-close");
    let start = Instant::now();
    std::thread::sleep(Duration::from_millis(300));
    let mut some = vec![0u8; 512 * 1024];
    reader.read_exact(&mut some).expect("the response begins");
    let mut exited = None;
    while start.elapsed() < EXIT_BOUND {
        if child.try_wait().expect("try_wait").is_some() {
            exited = Some(start.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    eprintln!("{name}: one socket, input closed, output unread: exited {exited:?} after EOF");
    assert!(
        exited.is_some(),
        "{name}: still running {EXIT_BOUND:?} after EOF on a shared socket"
    );
}

#[test]
fn g1_serve_tokio_exits_when_one_socket_is_its_stdin_and_its_unread_stdout() {
    one_socket_client("serve-tokio", env!("CARGO_BIN_EXE_serve-tokio"));
}

#[test]
fn g1_serve_async_std_exits_when_one_socket_is_its_stdin_and_its_unread_stdout() {
    one_socket_client("serve-async-std", env!("CARGO_BIN_EXE_serve-async-std"));
}

#[test]
fn g1_serve_blocking_exits_when_one_socket_is_its_stdin_and_its_unread_stdout() {
    one_socket_client("serve-blocking", env!("CARGO_BIN_EXE_serve-blocking"));
}

/// "Stalled stderr": nobody reads the server's stderr while it logs far more
/// than the pipe holds — its own lines and the library's `tracing` events at
/// debug level, all through the non-blocking stderr writer. The serve loop
/// still answers promptly and still exits on stdin EOF (G1).
fn stalled_stderr(name: &'static str, path: &str, log: &str) {
    let mut s = Server::spawn(name, path, Some(log));
    // A stuck serve loop stops reading stdin and our writes block: past the
    // bound the server is killed, so the case fails instead of hanging.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog = {
        let (done, pid) = (done.clone(), s.child.id());
        std::thread::spawn(move || {
            let start = Instant::now();
            while start.elapsed() < 3 * EXIT_BOUND {
                if done.load(std::sync::atomic::Ordering::Acquire) {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = mcp_stdio_tests::signal_pid(pid, mcp_stdio_tests::Signal::SIGKILL);
            true
        })
    };
    s.handshake();
    let noisy = format!("notifications/{}", "n".repeat(1000));
    for round in 0..3u64 {
        for _ in 0..1000 {
            s.send(&json!({"jsonrpc":"2.0","method":noisy}));
        }
        for id in 0..20u64 {
            let id = 1000 * (round + 1) + id;
            s.send(&json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
                "params":{"name":"slow","arguments":{"seconds":60}}}));
            s.send(&json!({"jsonrpc":"2.0","method":"notifications/cancelled",
                "params":{"requestId":id}}));
        }
    }
    // Stdout is read on a thread of its own, so a stuck server fails the
    // case at its bound instead of hanging it.
    let (tx, lines) = mpsc::channel();
    let stdout = s.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in stdout.lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let sent = Instant::now();
    s.send(&json!({"jsonrpc":"2.0","id":"after-the-noise","method":"ping"}));
    let answer = loop {
        let left = PROMPT.saturating_sub(sent.elapsed());
        let line = lines
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("{name} ({log}): no ping answer within {PROMPT:?}"));
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        if v["id"] == "after-the-noise" {
            break v;
        }
    };
    let ping = sent.elapsed();
    assert!(answer.get("result").is_some(), "{answer}");
    s.stdin = None;
    let exit = s.wait_exit(EXIT_BOUND);
    eprintln!(
        "{name} ({log}): ~3 MB of stderr nobody read; ping answered in {:.2} ms; exited {exit:?} after stdin EOF",
        ping.as_secs_f64() * 1e3
    );
    done.store(true, std::sync::atomic::Ordering::Release);
    assert!(!watchdog.join().expect("watchdog"), "{name} ({log}): stuck");
    assert!(ping < PROMPT);
    assert!(exit.is_some(), "{name}: still running after stdin EOF");
}

#[test]
fn g1_serve_tokio_keeps_serving_while_nobody_reads_its_stderr() {
    stalled_stderr("serve-tokio", env!("CARGO_BIN_EXE_serve-tokio"), "debug");
}

/// The same with a `tracing` subscriber that writes plain, blocking stderr:
/// the serve loop's own events go through the log relay, never inline.
#[test]
fn g1_serve_tokio_keeps_serving_with_a_blocking_subscriber_on_an_unread_stderr() {
    stalled_stderr(
        "serve-tokio",
        env!("CARGO_BIN_EXE_serve-tokio"),
        "blocking-debug",
    );
}

#[test]
fn g1_serve_async_std_keeps_serving_while_nobody_reads_its_stderr() {
    stalled_stderr(
        "serve-async-std",
        env!("CARGO_BIN_EXE_serve-async-std"),
        "debug",
    );
}

/// The same with a `tracing` subscriber that writes plain, blocking stderr:
/// the serve loop's own events go through the log relay, never inline.
#[test]
fn g1_serve_async_std_keeps_serving_with_a_blocking_subscriber_on_an_unread_stderr() {
    stalled_stderr(
        "serve-async-std",
        env!("CARGO_BIN_EXE_serve-async-std"),
        "blocking-debug",
    );
}

#[test]
fn g1_serve_blocking_keeps_serving_while_nobody_reads_its_stderr() {
    stalled_stderr(
        "serve-blocking",
        env!("CARGO_BIN_EXE_serve-blocking"),
        "debug",
    );
}

/// The same with a `tracing` subscriber that writes plain, blocking stderr:
/// the serve loop's own events go through the log relay, never inline.
#[test]
fn g1_serve_blocking_keeps_serving_with_a_blocking_subscriber_on_an_unread_stderr() {
    stalled_stderr(
        "serve-blocking",
        env!("CARGO_BIN_EXE_serve-blocking"),
        "blocking-debug",
    );
}
