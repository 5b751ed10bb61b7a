//! Self-tests of the fixture processes, spawned with plain `std::process::Command` (no adapter):
//! before the conformance suite trusts a fixture to misbehave, the fixture is shown to
//! misbehave exactly as documented.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use mcp_stdio_tests::{
    descendants, group_members, huge_field_text, pid_alive, signal_pid, wait_until,
    ProcessGroupGuard, Signal,
};
use serde_json::{json, Value};

const SERVER: &str = env!("CARGO_BIN_EXE_fixture-server");
const HELPER: &str = env!("CARGO_BIN_EXE_fixture-helper");
const POLL: Duration = Duration::from_millis(5);
const LONG: Duration = Duration::from_secs(10);

/// A spawned fixture with its pipes; the guard kills its process group on drop.
struct Peer {
    guard: ProcessGroupGuard,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    lines: Option<Receiver<Vec<u8>>>,
    stderr: Arc<Mutex<Stderr>>,
    stderr_eof: Arc<Mutex<bool>>,
}

/// Stderr as read so far: the first `STDERR_KEEP` bytes and the total count.
#[derive(Default)]
struct Stderr {
    kept: Vec<u8>,
    total: usize,
}

/// How much stderr a test keeps (floods are counted, not stored).
const STDERR_KEEP: usize = 16 * 1024 * 1024;

impl Peer {
    /// Spawns `program args` in its own process group, all three streams piped, stderr read
    /// continuously; stdout read continuously too unless `read_stdout` is false.
    fn spawn(program: &str, args: &[&str], read_stdout: bool) -> Self {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("spawn fixture");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let mut stderr_pipe = child.stderr.take().expect("piped stderr");
        let stderr = Arc::new(Mutex::new(Stderr::default()));
        let stderr_eof = Arc::new(Mutex::new(false));
        {
            let (stderr, eof) = (Arc::clone(&stderr), Arc::clone(&stderr_eof));
            thread::spawn(move || {
                let mut buf = vec![0_u8; 64 * 1024];
                loop {
                    match stderr_pipe.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            let mut e = stderr.lock().expect("stderr lock");
                            e.total += n;
                            let room = STDERR_KEEP.saturating_sub(e.kept.len()).min(n);
                            e.kept.extend_from_slice(&buf[..room]);
                        }
                    }
                }
                *eof.lock().expect("eof lock") = true;
            });
        }
        let mut peer = Self {
            guard: ProcessGroupGuard::new(child),
            stdin,
            stdout,
            lines: None,
            stderr,
            stderr_eof,
        };
        if read_stdout {
            peer.start_reading_stdout();
        }
        peer
    }

    fn server(args: &[&str]) -> Self {
        Self::spawn(SERVER, args, true)
    }

    fn pid(&self) -> u32 {
        self.guard.pgid()
    }

    fn start_reading_stdout(&mut self) {
        let stdout = self.stdout.take().expect("stdout reader started twice");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            loop {
                let mut line = Vec::new();
                match r.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        self.lines = Some(rx);
    }

    fn send(&mut self, msg: &Value) {
        let mut line = serde_json::to_vec(msg).expect("serialize");
        line.push(b'\n');
        self.send_raw(&line);
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).expect("write to fixture stdin");
        stdin.flush().expect("flush fixture stdin");
    }

    fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The next stdout line including its `\n`; `None` on timeout; panics on EOF.
    fn next_line(&self, timeout: Duration) -> Option<Vec<u8>> {
        match self
            .lines
            .as_ref()
            .expect("stdout is read")
            .recv_timeout(timeout)
        {
            Ok(line) => Some(line),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => panic!("fixture stdout closed"),
        }
    }

    /// Every remaining stdout line until EOF (bounded by `timeout`).
    fn lines_until_eof(&self, timeout: Duration) -> Vec<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        let rx = self.lines.as_ref().expect("stdout is read");
        let mut all = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => all.push(line),
                Err(RecvTimeoutError::Disconnected) => return all,
                Err(RecvTimeoutError::Timeout) => panic!("no stdout EOF within {timeout:?}"),
            }
        }
    }

    /// Waits for the JSON message with this `id`, returning it and the lines skipped on the way.
    fn response(&self, id: &Value, timeout: Duration) -> (Value, Vec<Vec<u8>>) {
        let deadline = Instant::now() + timeout;
        let mut skipped = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .next_line(left)
                .unwrap_or_else(|| panic!("no response for id {id} within {timeout:?}"));
            match serde_json::from_slice::<Value>(&line) {
                Ok(v) if v.get("id") == Some(id) && v.get("method").is_none() => {
                    return (v, skipped)
                }
                _ => skipped.push(line),
            }
        }
    }

    fn request(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send(&json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}));
        self.response(&id, LONG).0
    }

    fn call(&mut self, id: Value, tool: &str, arguments: Value) -> Value {
        self.request(id, "tools/call", json!({"name":tool,"arguments":arguments}))
    }

    fn send_call(&mut self, id: Value, tool: &str, arguments: Value) {
        self.send(&json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
            "params":{"name":tool,"arguments":arguments}}));
    }

    fn cancel(&mut self, id: Value) {
        self.send(&json!({"jsonrpc":"2.0","method":"notifications/cancelled",
            "params":{"requestId":id,"reason":"test"}}));
    }

    fn initialize(&mut self) -> Value {
        let r = self.request(
            json!(0),
            "initialize",
            json!({"protocolVersion":"2025-06-18","capabilities":{},
                "clientInfo":{"name":"fixture-tests","version":"0"}}),
        );
        self.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
        r
    }

    fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().expect("stderr lock").kept).into_owned()
    }

    fn stderr_len(&self) -> usize {
        self.stderr.lock().expect("stderr lock").total
    }

    fn stderr_has(&self, needle: &str) -> bool {
        self.stderr_text().contains(needle)
    }

    /// Waits until stderr contains `needle`; panics with the stderr text on timeout.
    fn wait_stderr(&self, needle: &str, timeout: Duration) -> Duration {
        wait_until(timeout, POLL, || self.stderr_has(needle)).unwrap_or_else(|| {
            panic!(
                "stderr lacks {needle:?} after {timeout:?}:\n{}",
                self.stderr_text()
            )
        })
    }

    fn stderr_at_eof(&self) -> bool {
        *self.stderr_eof.lock().expect("eof lock")
    }

    fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let child = self.guard.child();
        let mut status = None;
        wait_until(timeout, POLL, || {
            status = child.try_wait().expect("try_wait");
            status.is_some()
        });
        status.unwrap_or_else(|| panic!("fixture still running after {timeout:?}"))
    }
}

fn text_of(response: &Value) -> &str {
    response
        .pointer("/result/content/0/text")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no text content in {response}"))
}

/// The number after `prefix` in the first stderr line containing it.
fn number_after(text: &str, prefix: &str) -> u64 {
    let rest = &text[text
        .find(prefix)
        .unwrap_or_else(|| panic!("{prefix:?} not in:\n{text}"))
        + prefix.len()..];
    rest.split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {prefix:?}"))
}

fn assert_no_response_for(lines: &[Vec<u8>], id: &Value) {
    for line in lines {
        if let Ok(v) = serde_json::from_slice::<Value>(line) {
            assert!(
                v.get("id") != Some(id) || v.get("method").is_some(),
                "unexpected response for cancelled id {id}: {v}"
            );
        }
    }
}

#[test]
fn server_initialize_ping_echo_round_trip() {
    let mut s = Peer::server(&[]);
    let t = Instant::now();
    let init = s.initialize();
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(init["result"]["capabilities"], json!({"tools":{}}));
    assert_eq!(init["result"]["serverInfo"]["name"], "fixture-server");
    let ping = s.request(json!(1), "ping", json!({}));
    assert_eq!(ping, json!({"jsonrpc":"2.0","id":1,"result":{}}));
    let echo = s.call(json!("e"), "echo", json!({"text":"héllo \"wörld\"\n"}));
    assert_eq!(text_of(&echo), "héllo \"wörld\"\n");
    let tools = s.request(json!(2), "tools/list", json!({}));
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .expect("tools array")
        .iter()
        .map(|t| t["name"].as_str().expect("tool name"))
        .collect();
    for expected in [
        "echo",
        "big",
        "big_exact",
        "huge_field",
        "many_blocks",
        "slow",
        "slow_io",
        "subprocess",
        "stream_then_result",
        "stderr_flood",
        "notify_then_result",
        "server_request",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    let unknown = s.request(json!(3), "no/such/method", json!({}));
    assert_eq!(unknown["error"]["code"], -32601);
    let bad_tool = s.call(json!(4), "no_such_tool", json!({}));
    assert_eq!(bad_tool["error"]["code"], -32602);
    println!(
        "initialize + ping + echo + tools/list round trip: {:?}",
        t.elapsed()
    );
    s.close_stdin();
    assert_eq!(s.wait_exit(LONG).code(), Some(0));
}

#[test]
fn server_big_exact_line_is_exactly_n_bytes() {
    let mut s = Peer::server(&[]);
    s.initialize();
    for (i, n) in [200_usize, 4096, 65_536, 65_537, 1 << 20]
        .into_iter()
        .enumerate()
    {
        let id = json!(100 + i);
        s.send_call(id.clone(), "big_exact", json!({"line_bytes":n}));
        let line = s.next_line(LONG).expect("big_exact line");
        assert_eq!(line.last(), Some(&b'\n'));
        assert_eq!(line.len() - 1, n, "line_bytes {n}");
        let v: Value = serde_json::from_slice(&line).expect("valid JSON");
        assert_eq!(v["id"], id);
    }
    let too_small = s.call(json!(7), "big_exact", json!({"line_bytes":10}));
    assert_eq!(too_small["error"]["code"], -32602);
    let big = s.call(json!(8), "big", json!({"bytes":100_000}));
    assert_eq!(text_of(&big).len(), 100_000);
}

#[test]
fn server_payload_tools_produce_documented_shapes() {
    let mut s = Peer::server(&[]);
    s.initialize();
    let huge = s.call(json!(1), "huge_field", json!({"bytes":1_000_003}));
    assert_eq!(text_of(&huge), huge_field_text(1_000_003));
    let blocks = s.call(json!(2), "many_blocks", json!({"count":1000,"size":7}));
    let content = blocks["result"]["content"].as_array().expect("content");
    assert_eq!(content.len(), 1000);
    assert!(content.iter().all(|b| b["text"] == "bbbbbbb"));
    let before = s.stderr_len();
    let flood = s.call(json!(3), "stderr_flood", json!({"bytes":300_000}));
    assert_eq!(text_of(&flood), "wrote 300000 bytes to stderr");
    s.wait_stderr("response 3 written", LONG);
    assert!(s.stderr_len() - before >= 300_000);

    s.send_call(json!(4), "notify_then_result", json!({"count":3}));
    let (result, skipped) = s.response(&json!(4), LONG);
    assert_eq!(text_of(&result), "sent 3 notifications");
    let notes: Vec<Value> = skipped
        .iter()
        .map(|l| serde_json::from_slice(l).expect("JSON"))
        .collect();
    assert_eq!(notes.len(), 3);
    assert!(notes.iter().all(|n| n["method"] == "notifications/message"));

    s.send_call(json!(5), "server_request", json!({}));
    let req: Value =
        serde_json::from_slice(&s.next_line(LONG).expect("server request")).expect("JSON");
    assert_eq!(req["method"], "ping");
    assert_eq!(req["id"], "fixture-srv-1");
    s.send(&json!({"jsonrpc":"2.0","id":req["id"],"result":{}}));
    let (done, _) = s.response(&json!(5), LONG);
    assert!(text_of(&done).starts_with("client answered"), "{done}");
}

#[test]
fn server_slow_honours_cancel_and_stays_responsive() {
    let mut s = Peer::server(&[]);
    s.initialize();
    let id = json!(5);
    s.send_call(
        id.clone(),
        "slow",
        json!({"chunks":20,"delay_ms":50,"honour_cancel":true}),
    );
    s.wait_stderr("request 5 received tools/call tool slow", LONG);
    thread::sleep(Duration::from_millis(120));
    let cancel_at = Instant::now();
    s.cancel(id.clone());
    let seen = s.wait_stderr("request 5 cancelled after", LONG);
    let chunks = number_after(&s.stderr_text(), "request 5 cancelled after ");
    assert!(chunks < 20, "stopped after {chunks} of 20 chunks");
    let ping_at = Instant::now();
    let ping = s.request(json!(6), "ping", json!({}));
    assert_eq!(ping["result"], json!({}));
    println!(
        "slow cancelled after {chunks} chunks, cancel seen in stderr {seen:?} after sending \
         ({:?} since cancel); ping after cancel answered in {:?}",
        cancel_at.elapsed(),
        ping_at.elapsed()
    );
    // EOF drains in-flight work, so the complete stdout proves no response for id 5 exists.
    s.close_stdin();
    let rest = s.lines_until_eof(LONG);
    assert_no_response_for(&rest, &id);
    assert!(s.stderr_has("request 5 response suppressed (cancelled)"));
    assert_eq!(s.wait_exit(LONG).code(), Some(0));
}

#[test]
fn server_slow_io_cancel_is_observed_at_once() {
    let mut s = Peer::server(&[]);
    s.initialize();
    s.send_call(json!(1), "slow_io", json!({"ms":5000}));
    s.wait_stderr("request 1 received", LONG);
    thread::sleep(Duration::from_millis(100));
    s.cancel(json!(1));
    s.wait_stderr("request 1 slow_io cancelled after", LONG);
    let us = number_after(&s.stderr_text(), "request 1 cancel observed ");
    println!("slow_io: cancel observed {us} us after the notification arrived");
    assert!(us < 200_000, "slow_io cancel took {us} us");
    assert_eq!(s.request(json!(2), "ping", json!({}))["result"], json!({}));
    s.close_stdin();
    assert_no_response_for(&s.lines_until_eof(LONG), &json!(1));
}

#[test]
fn server_subprocess_cancel_kills_and_reaps_the_child() {
    let mut s = Peer::server(&[]);
    s.initialize();
    s.send_call(json!(1), "subprocess", json!({"seconds":30}));
    s.wait_stderr("request 1 subprocess ", LONG);
    let child = u32::try_from(number_after(&s.stderr_text(), "request 1 subprocess "))
        .expect("pid fits u32");
    assert!(pid_alive(child));
    assert!(
        descendants(s.pid()).contains(&child),
        "child is a descendant"
    );
    assert!(
        group_members(s.pid()).contains(&child),
        "child shares the group"
    );
    let t = Instant::now();
    s.cancel(json!(1));
    s.wait_stderr(&format!("subprocess {child} killed on cancel"), LONG);
    let gone = wait_until(LONG, POLL, || !pid_alive(child)).expect("child gone");
    println!(
        "subprocess {child} killed and reaped {:?} after cancel (gone check {gone:?})",
        t.elapsed()
    );
    assert!(descendants(s.pid()).is_empty());
    assert_eq!(s.request(json!(2), "ping", json!({}))["result"], json!({}));
    s.close_stdin();
    assert_no_response_for(&s.lines_until_eof(LONG), &json!(1));
}

#[test]
fn server_stream_then_result_cancel_after_response_began_is_recorded() {
    let mut s = Peer::server(&[]);
    s.initialize();
    let bytes = 200_000;
    s.send_call(
        json!(1),
        "stream_then_result",
        json!({"bytes":bytes,"chunk":10_000,"delay_ms":20}),
    );
    s.wait_stderr("response 1 writing", LONG);
    thread::sleep(Duration::from_millis(50));
    s.cancel(json!(1));
    s.wait_stderr("request 1 cancel after response began", LONG);
    let t = Instant::now();
    let line = s.next_line(LONG).expect("streamed line");
    assert_eq!(line.len() - 1, bytes);
    let v: Value = serde_json::from_slice(&line).expect("streamed line is one valid message");
    assert_eq!(v["id"], 1);
    let ping = s.request(json!(2), "ping", json!({}));
    assert_eq!(ping["result"], json!({}));
    println!(
        "stream_then_result: rest of the line + ping after the cancel took {:?}",
        t.elapsed()
    );
}

#[test]
fn server_stdout_log_before_comes_first() {
    let mut s = Peer::server(&["--stdout-log-before"]);
    let first = s.next_line(LONG).expect("log line");
    assert!(serde_json::from_slice::<Value>(&first).is_err());
    assert!(String::from_utf8_lossy(&first).contains("not JSON"));
    s.initialize();
}

#[test]
fn server_misbehaviour_flags_do_what_they_say() {
    // --malformed-after-init + --oversized-on-init + --respond-unknown-id + --stdout-log-between
    let mut s = Peer::server(&[
        "--malformed-after-init",
        "--oversized-on-init",
        "300000",
        "--respond-unknown-id",
        "--stdout-log-between",
    ]);
    s.initialize();
    let mut after_init = Vec::new();
    while after_init.len() < 4 {
        after_init.push(s.next_line(LONG).expect("line after init"));
    }
    assert!(after_init[0].starts_with(b"fixture stdout log:"));
    assert!(
        serde_json::from_slice::<Value>(&after_init[1]).is_err(),
        "malformed"
    );
    assert!(after_init[2].starts_with(b"fixture stdout log:"));
    assert_eq!(after_init[3].len() - 1, 300_000, "oversized line");
    let (_, skipped) = {
        s.send(&json!({"jsonrpc":"2.0","id":1,"method":"ping"}));
        s.response(&json!(1), LONG)
    };
    assert!(skipped
        .iter()
        .all(|l| l.starts_with(b"fixture stdout log:")));
    let stray = s.next_line(LONG).expect("log line");
    assert!(stray.starts_with(b"fixture stdout log:"));
    let stray: Value =
        serde_json::from_slice(&s.next_line(LONG).expect("unknown id")).expect("JSON");
    assert_eq!(stray["id"], 987_654_321);

    // --late-response-after-cancel + --exit-code + --stderr-at-start
    let mut s = Peer::server(&[
        "--late-response-after-cancel",
        "--exit-code",
        "7",
        "--stderr-at-start",
        "100000",
    ]);
    s.initialize();
    // The stderr reader is a thread of its own: give it time on a loaded machine.
    let waited = Instant::now();
    while s.stderr_len() < 100_000 && waited.elapsed() < LONG {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        s.stderr_len() >= 100_000,
        "{} bytes of stderr",
        s.stderr_len()
    );
    s.send_call(
        json!(1),
        "slow",
        json!({"chunks":5,"delay_ms":40,"honour_cancel":true}),
    );
    s.wait_stderr("request 1 received", LONG);
    s.cancel(json!(1));
    s.wait_stderr("request 1 cancel ignored", LONG);
    let (late, _) = s.response(&json!(1), LONG);
    assert_eq!(text_of(&late), "slow done after 5 chunks");
    s.close_stdin();
    assert_eq!(s.wait_exit(LONG).code(), Some(7));

    // --noisy-stderr
    let s = Peer::server(&["--noisy-stderr", "100000"]);
    thread::sleep(Duration::from_millis(500));
    let noise = s.stderr_len();
    println!("--noisy-stderr 100000: {noise} bytes in 0.5 s");
    assert!(noise > 20_000, "{noise}");
}

#[test]
fn server_stdin_eof_and_sigterm_flags() {
    let mut s = Peer::server(&["--ignore-stdin-eof", "--ignore-sigterm"]);
    s.initialize();
    s.wait_stderr("ignoring SIGTERM", LONG);
    s.close_stdin();
    s.wait_stderr("stdin EOF, ignored", LONG);
    signal_pid(s.pid(), Signal::SIGTERM).expect("send SIGTERM");
    s.wait_stderr("SIGTERM received and ignored", LONG);
    thread::sleep(Duration::from_millis(200));
    assert!(
        s.guard.child().try_wait().expect("try_wait").is_none(),
        "survived TERM"
    );
    signal_pid(s.pid(), Signal::SIGKILL).expect("send SIGKILL");
    assert_eq!(s.wait_exit(LONG).signal(), Some(9));

    // Default: SIGTERM ends it; stdin EOF ends it with 0.
    let s = Peer::server(&[]);
    s.wait_stderr("started pid", LONG);
    signal_pid(s.pid(), Signal::SIGTERM).expect("send SIGTERM");
    let mut s = s;
    assert_eq!(s.wait_exit(LONG).signal(), Some(15));
}

/// G1, the failure made visible: a parent that does not read stdout leaves the server stuck
/// in `write()` — and every later message (here a ping) stuck behind it.
#[test]
fn g1_unread_stdout_blocks_the_server_in_write() {
    let mut s = Peer::spawn(SERVER, &[], false);
    // Initialize without a stdout reader: its small response fits in the pipe buffer.
    s.send(&json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"g1","version":"0"}}}));
    s.wait_stderr("response 1 written", LONG);
    let bytes = 8 * 1024 * 1024;
    s.send_call(json!(2), "big", json!({"bytes":bytes}));
    s.wait_stderr("response 2 writing", LONG);
    s.send(&json!({"jsonrpc":"2.0","id":3,"method":"ping"}));
    s.wait_stderr("request 3 received ping", LONG);
    thread::sleep(Duration::from_secs(2));
    assert!(
        s.guard.child().try_wait().expect("try_wait").is_none(),
        "server alive"
    );
    assert!(
        !s.stderr_has("response 2 written"),
        "8 MiB cannot fit an unread pipe"
    );
    assert!(
        !s.stderr_has("response 3 written"),
        "the ping waits behind it"
    );
    // Informational only (wchan may read "0" where the kernel hides it): the worker thread
    // writing response 2 should sit in pipe_write.
    let wchans: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", s.pid()))
        .map(|d| {
            d.filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("wchan")).ok())
                .collect()
        })
        .unwrap_or_default();
    println!("after 2 s unread: response 2 not written; thread wchans {wchans:?}");

    let t = Instant::now();
    s.start_reading_stdout();
    let (big, _) = s.response(&json!(2), LONG);
    let drained = t.elapsed();
    assert_eq!(text_of(&big).len(), bytes);
    s.wait_stderr("response 2 written", LONG);
    let (ping, _) = s.response(&json!(3), LONG);
    assert_eq!(ping["result"], json!({}));
    println!(
        "after reading starts: 8 MiB response in {drained:?}, queued ping in {:?}",
        t.elapsed()
    );
}

fn helper(args: &[&str]) -> Peer {
    Peer::spawn(HELPER, args, true)
}

/// Reads `grandchild <pid>` from the wrapper's stdout.
fn grandchild_pid(p: &Peer) -> u32 {
    let line = p.next_line(LONG).expect("grandchild line");
    let text = String::from_utf8(line).expect("utf-8");
    text.trim()
        .strip_prefix("grandchild ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected wrapper output {text:?}"))
}

#[test]
fn helper_wrapper_grandchild_dies_with_the_group() {
    let mut p = helper(&["wrapper-grandchild", "30"]);
    let gc = grandchild_pid(&p);
    p.guard.also_kill(gc);
    assert_eq!(p.wait_exit(LONG).code(), Some(0), "wrapper exits at once");
    assert!(pid_alive(gc), "grandchild alive after the wrapper exited");
    assert!(
        group_members(p.pid()).contains(&gc),
        "grandchild still in the group"
    );
    p.wait_stderr("helper-grandchild: alive", LONG);
    assert!(!p.stderr_at_eof(), "grandchild holds stderr");
    let t = Instant::now();
    mcp_stdio_tests::signal_group(p.pid(), Signal::SIGKILL).expect("kill group");
    let gone = wait_until(LONG, POLL, || !pid_alive(gc)).expect("grandchild dies with the group");
    wait_until(LONG, POLL, || p.stderr_at_eof()).expect("stderr EOF once the grandchild died");
    println!(
        "group kill: grandchild {gc} gone after {gone:?}, stderr EOF after {:?}",
        t.elapsed()
    );
}

#[test]
fn helper_escaped_grandchild_survives_the_group_kill() {
    let mut p = helper(&["escaped-grandchild", "30"]);
    let gc = grandchild_pid(&p);
    p.guard.also_kill(gc);
    assert_eq!(p.wait_exit(LONG).code(), Some(0));
    assert!(
        !group_members(p.pid()).contains(&gc),
        "grandchild left the group"
    );
    let _ = mcp_stdio_tests::signal_group(p.pid(), Signal::SIGKILL);
    thread::sleep(Duration::from_millis(300));
    assert!(pid_alive(gc), "escaped grandchild survives the group kill");
    assert!(!p.stderr_at_eof(), "and still holds stderr open");
    let t = Instant::now();
    signal_pid(gc, Signal::SIGKILL).expect("kill grandchild by pid");
    wait_until(LONG, POLL, || !pid_alive(gc)).expect("grandchild dies when killed by pid");
    wait_until(LONG, POLL, || p.stderr_at_eof()).expect("stderr EOF");
    println!(
        "escaped grandchild {gc}: killed by pid, stderr EOF after {:?}",
        t.elapsed()
    );
}

#[test]
fn helper_escaped_grandchild_exits_by_itself() {
    let mut p = helper(&["escaped-grandchild", "0.3"]);
    let gc = grandchild_pid(&p);
    p.guard.also_kill(gc);
    let gone = wait_until(LONG, POLL, || !pid_alive(gc)).expect("exits after SECONDS");
    println!("escaped grandchild with SECONDS=0.3 gone after {gone:?}");
}

#[test]
fn helper_simple_modes() {
    let mut p = helper(&["exit", "3"]);
    assert_eq!(
        p.next_line(LONG).expect("stdout line"),
        b"helper stdout line\n"
    );
    assert_eq!(p.wait_exit(LONG).code(), Some(3));
    wait_until(LONG, POLL, || p.stderr_at_eof()).expect("stderr EOF");
    assert_eq!(p.stderr_text(), "helper stderr line\n");

    let mut p = helper(&["invalid-utf8"]);
    let line = p.next_line(LONG).expect("stdout line");
    assert!(std::str::from_utf8(&line).is_err());
    assert_eq!(p.wait_exit(LONG).code(), Some(0));
    wait_until(LONG, POLL, || p.stderr_at_eof()).expect("stderr EOF");
    assert_eq!(p.stderr.lock().expect("lock").kept, line);

    let mut p = helper(&["long-line", "3000000"]);
    assert_eq!(p.wait_exit(LONG).code(), Some(0));
    wait_until(LONG, POLL, || p.stderr_at_eof()).expect("stderr EOF");
    assert_eq!(p.stderr_len(), 3_000_001);

    let mut p = helper(&["stderr-then-exit", "100000", "4"]);
    assert_eq!(p.wait_exit(LONG).code(), Some(4));
    wait_until(LONG, POLL, || p.stderr_at_eof()).expect("stderr EOF");
    assert_eq!(p.stderr_len(), 100_000);

    let t = Instant::now();
    let mut p = helper(&["sleep", "0.2"]);
    assert_eq!(p.wait_exit(LONG).code(), Some(0));
    assert!(t.elapsed() >= Duration::from_millis(200));

    let mut p = helper(&["bogus-mode"]);
    assert_eq!(p.wait_exit(LONG).code(), Some(2));
}

#[test]
fn helper_floods_for_the_given_time() {
    let t = Instant::now();
    let mut p = helper(&["flood-both", "0.5"]);
    let out = p.lines_until_eof(LONG);
    assert_eq!(p.wait_exit(LONG).code(), Some(0));
    wait_until(LONG, POLL, || p.stderr_at_eof()).expect("stderr EOF");
    println!(
        "flood-both 0.5 s: {} stdout lines, {} stderr bytes, {:?}",
        out.len(),
        p.stderr_len(),
        t.elapsed()
    );
    assert!(out.len() > 1000 && out.iter().all(|l| l == b"helper-diagnostic\n"));
    assert!(p.stderr_len() > 18_000);
    assert!(p.stderr_text().starts_with("helper-diagnostic\n"));
}

#[test]
fn helper_ignore_term_needs_kill() {
    let mut p = helper(&["ignore-term", "30"]);
    p.wait_stderr("helper: ignoring SIGTERM", LONG);
    signal_pid(p.pid(), Signal::SIGTERM).expect("TERM");
    p.wait_stderr("SIGTERM received and ignored", LONG);
    thread::sleep(Duration::from_millis(200));
    assert!(p.guard.child().try_wait().expect("try_wait").is_none());
    mcp_stdio_tests::signal_group(p.pid(), Signal::SIGKILL).expect("KILL group");
    assert_eq!(p.wait_exit(LONG).signal(), Some(9));
}

#[test]
fn library_finds_the_fixture_binaries() {
    // From target/<profile>/deps/fixtures-<hash>, the lookup must land on Cargo's own paths.
    let same = |a: &Path, b: &str| {
        a.canonicalize().expect("canonical") == Path::new(b).canonicalize().expect("canonical")
    };
    assert!(same(&mcp_stdio_tests::fixture_server_path(), SERVER));
    assert!(same(&mcp_stdio_tests::fixture_helper_path(), HELPER));
}
