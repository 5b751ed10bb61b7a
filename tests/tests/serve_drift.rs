//! `serve` where each adapter's own loop could decide differently, through
//! each adapter's serve binary as a real process: requests that arrive in
//! the same read as the stdin EOF, a stdin that is a file or cannot be read
//! (a read error ends the input like EOF), and a stdout that fails (a write
//! error ends serve with that error, at once, aborting running handlers).
//! The decisions live once, in the core: the three must end alike.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Generous bound for an exit that should take milliseconds.
const PROMPT: Duration = Duration::from_secs(10);
/// Rounds of the EOF race per binary.
const ROUNDS: usize = 20;

const SERVERS: [(&str, &str); 3] = [
    ("serve-tokio", env!("CARGO_BIN_EXE_serve-tokio")),
    ("serve-async-std", env!("CARGO_BIN_EXE_serve-async-std")),
    ("serve-blocking", env!("CARGO_BIN_EXE_serve-blocking")),
];

/// Kills and reaps the child if a test fails before it exited.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Reaped {
    /// Waits for the exit, failing the test after `within`.
    fn exit_within(&mut self, name: &str, within: Duration) -> (ExitStatus, Duration) {
        let t = Instant::now();
        loop {
            if let Some(s) = self.0.try_wait().expect("try_wait") {
                return (s, t.elapsed());
            }
            assert!(
                t.elapsed() < within,
                "{name}: still running after {within:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Newline-delimited requests: initialize, `echoes` echo calls, one short
/// `slow` call, and a ping; ids 1..=echoes + 3.
fn requests(echoes: usize) -> (Vec<u8>, usize) {
    let mut msgs = vec![
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},
        "clientInfo":{"name":"serve-drift-test","version":"0"}}}),
    ];
    for i in 0..echoes {
        msgs.push(json!({"jsonrpc":"2.0","id":i + 2,"method":"tools/call",
            "params":{"name":"echo","arguments":{"text":format!("echo {i}")}}}));
    }
    msgs.push(
        json!({"jsonrpc":"2.0","id":echoes + 2,"method":"tools/call",
        "params":{"name":"slow","arguments":{"seconds":0.2}}}),
    );
    msgs.push(json!({"jsonrpc":"2.0","id":echoes + 3,"method":"ping"}));
    let mut bytes = Vec::new();
    for m in &msgs {
        bytes.extend_from_slice(&serde_json::to_vec(m).expect("json"));
        bytes.push(b'\n');
    }
    (bytes, msgs.len())
}

/// The ids of the answers on `stdout` (read to EOF), each checked to carry a
/// result.
fn answered_ids(name: &str, stdout: impl Read) -> Vec<u64> {
    let mut ids: Vec<u64> = BufReader::new(stdout)
        .lines()
        .map(|l| {
            let l = l.expect("stdout is UTF-8");
            let v: Value = serde_json::from_str(&l).unwrap_or_else(|e| panic!("{name}: {e}: {l}"));
            assert!(v.get("result").is_some(), "{name}: not a result: {v}");
            v["id"].as_u64().unwrap_or_else(|| panic!("{name}: {v}"))
        })
        .collect();
    ids.sort_unstable();
    ids
}

/// The serve binary's last stderr line (its end: a report or the error).
fn end_line(name: &str, stderr: impl Read) -> String {
    let mut text = String::new();
    BufReader::new(stderr)
        .read_to_string(&mut text)
        .expect("stderr is UTF-8");
    text.lines()
        .rfind(|l| l.contains("; report ") || l.contains(" serve failed after "))
        .unwrap_or_else(|| panic!("{name}: no end line on stderr:\n{text}"))
        .to_owned()
}

/// The `end` of the report in a `stdin closed; …; report {json}` line.
fn report_end(name: &str, line: &str) -> String {
    let (_, report) = line
        .split_once("; report ")
        .unwrap_or_else(|| panic!("{name}: not a report: {line}"));
    let v: Value = serde_json::from_str(report).unwrap_or_else(|e| panic!("{name}: {e}: {line}"));
    v["end"].as_str().unwrap_or_default().to_owned()
}

/// G1: requests that arrive in the same write as the stdin EOF (the client
/// writes them all and closes at once, 20 rounds per binary): every one is
/// answered — the slow one too, within the drain — and serve exits 0 with
/// the input closed, on every adapter.
#[test]
fn g1_serve_answers_every_request_that_arrives_with_its_stdin_eof() {
    let (bytes, count) = requests(5);
    let want: Vec<u64> = (1..=count as u64).collect();
    for (name, path) in SERVERS {
        let mut slowest = Duration::ZERO;
        for round in 0..ROUNDS {
            let mut child = Reaped(
                Command::new(path)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap_or_else(|e| panic!("{name}: spawn: {e}")),
            );
            let t = Instant::now();
            let mut stdin = child.0.stdin.take().expect("piped");
            stdin.write_all(&bytes).expect("write the requests");
            drop(stdin);
            let stdout = child.0.stdout.take().expect("piped");
            let stderr = child.0.stderr.take().expect("piped");
            let errs = std::thread::spawn(move || end_line(name, stderr));
            let ids = answered_ids(name, stdout);
            let (status, _) = child.exit_within(name, PROMPT);
            let took = t.elapsed();
            slowest = slowest.max(took);
            assert_eq!(ids, want, "{name}: round {round}");
            assert!(status.success(), "{name}: round {round}: {status}");
            let end = errs.join().expect("stderr reader");
            assert_eq!(report_end(name, &end), "input_closed", "{name}: {end}");
        }
        eprintln!(
            "{name}: {ROUNDS} rounds of {count} requests written with the EOF: all answered, exit \
             0, the slowest round {slowest:?}"
        );
    }
}

/// Runs `name` with `stdin` and a piped stdout and stderr; its answers,
/// exit status and end line.
fn run_with_stdin(
    name: &str,
    path: &str,
    stdin: Stdio,
) -> (Vec<u64>, ExitStatus, String, Duration) {
    let t = Instant::now();
    let mut child = Reaped(
        Command::new(path)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: spawn: {e}")),
    );
    let stdout = child.0.stdout.take().expect("piped");
    let stderr = child.0.stderr.take().expect("piped");
    let errs = std::thread::spawn({
        let name = name.to_owned();
        move || end_line(&name, stderr)
    });
    let ids = answered_ids(name, stdout);
    let (status, _) = child.exit_within(name, PROMPT);
    let end = errs.join().expect("stderr reader");
    (ids, status, end, t.elapsed())
}

/// G1: a stdin that cannot be polled (a regular file) is read to its end
/// and every request in it answered; a stdin that cannot be read at all (a
/// directory: `read` fails with `EISDIR`) ends the input like EOF; an empty
/// one (`/dev/null`) too. Exit 0 and `input_closed` each time, on every
/// adapter.
#[test]
fn g1_serve_reads_a_file_stdin_to_its_end_and_takes_a_read_error_for_the_end() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let file = dir.path().join("requests.jsonl");
    let (bytes, count) = requests(3);
    std::fs::write(&file, &bytes).expect("write the requests");
    let want: Vec<u64> = (1..=count as u64).collect();
    for (name, path) in SERVERS {
        let cases: [(&str, Stdio, &[u64]); 3] = [
            (
                "a file",
                File::open(&file).expect("open the requests").into(),
                &want,
            ),
            (
                "a directory",
                File::open(dir.path()).expect("open the folder").into(),
                &[],
            ),
            ("/dev/null", Stdio::null(), &[]),
        ];
        for (what, stdin, expected) in cases {
            let (ids, status, end, took) = run_with_stdin(name, path, stdin);
            eprintln!("{name}: stdin {what}: answered {ids:?}, {status} in {took:?}");
            assert_eq!(ids, expected, "{name}: stdin {what}");
            assert!(status.success(), "{name}: stdin {what}: {status}: {end}");
            assert_eq!(report_end(name, &end), "input_closed", "{name}: {end}");
        }
    }
}

/// G1: a stdout that fails — `/dev/full` (`ENOSPC`) from the first answer,
/// or a pipe whose reader went away (`EPIPE`) while a 30 s handler runs —
/// ends serve with that error (exit 1, `serve failed … <error>`) at once,
/// not after the handler: every adapter stops alike.
#[test]
fn g1_serve_ends_with_the_write_error_when_its_stdout_fails() {
    for (name, path) in SERVERS {
        // ENOSPC: the file's requests are answered into /dev/full.
        let dir = tempfile::tempdir().expect("a temporary folder");
        let file = dir.path().join("requests.jsonl");
        std::fs::write(&file, requests(1).0).expect("write the requests");
        let mut child = Reaped(
            Command::new(path)
                .stdin(File::open(&file).expect("open"))
                .stdout(
                    std::fs::OpenOptions::new()
                        .write(true)
                        .open("/dev/full")
                        .expect("/dev/full"),
                )
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("{name}: spawn: {e}")),
        );
        let stderr = child.0.stderr.take().expect("piped");
        let (status, full_took) = child.exit_within(name, PROMPT);
        let end = end_line(name, stderr);
        assert_eq!(status.code(), Some(1), "{name}: /dev/full: {status}: {end}");
        assert!(
            end.contains("serve failed") && end.contains("No space left on device"),
            "{name}: {end}"
        );

        // EPIPE: the reader of stdout closes while a slow handler runs.
        let mut child = Reaped(
            Command::new(path)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("{name}: spawn: {e}")),
        );
        let mut stdin = child.0.stdin.take().expect("piped");
        let mut stdout = BufReader::new(child.0.stdout.take().expect("piped"));
        let stderr = child.0.stderr.take().expect("piped");
        let mut send = |v: Value| {
            let mut line = serde_json::to_vec(&v).expect("json");
            line.push(b'\n');
            stdin.write_all(&line).expect("write a request");
        };
        send(json!({"jsonrpc":"2.0","id":1,"method":"ping"}));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("the ping's answer");
        assert!(line.contains("\"id\":1"), "{name}: {line}");
        send(json!({"jsonrpc":"2.0","id":2,"method":"tools/call",
            "params":{"name":"slow","arguments":{"seconds":30}}}));
        drop(stdout);
        let t = Instant::now();
        // The next answer meets the closed pipe.
        send(json!({"jsonrpc":"2.0","id":3,"method":"ping"}));
        let (status, _) = child.exit_within(name, PROMPT);
        let pipe_took = t.elapsed();
        let end = end_line(name, stderr);
        assert_eq!(status.code(), Some(1), "{name}: EPIPE: {status}: {end}");
        assert!(
            end.contains("serve failed") && end.contains("Broken pipe"),
            "{name}: {end}"
        );
        eprintln!(
            "{name}: stdout /dev/full: exit 1 in {full_took:?}; stdout reader gone with a 30 s \
             handler running: exit 1 {pipe_took:?} after the next answer ({end})"
        );
    }
}

/// G12: a stdout that cannot be written (opened read-only: every write is
/// `EBADF`) ends serve with an error (exit 1, `serve failed …`) on every
/// adapter, never a run that reports its answers written while every write
/// failed (std's own stdout takes `EBADF` for success). A *closed* stdout is
/// no such case: Rust's runtime reopens a closed fd 0–2 on `/dev/null` before
/// `main`, so the answers are written, to `/dev/null`.
#[test]
fn g12_serve_fails_on_a_stdout_it_cannot_write() {
    for (name, path) in SERVERS {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let file = dir.path().join("requests.jsonl");
        std::fs::write(&file, requests(2).0).expect("write the requests");
        let (how, redirect) = ("read-only", "1</dev/null");
        let t = Instant::now();
        let mut child = Reaped(
            Command::new("sh")
                .arg("-c")
                .arg(format!("exec \"$0\" {redirect}"))
                .arg(path)
                .stdin(File::open(&file).expect("open"))
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("{name}: spawn: {e}")),
        );
        let stderr = child.0.stderr.take().expect("piped");
        let (status, _) = child.exit_within(name, PROMPT);
        let end = end_line(name, stderr);
        assert_eq!(
            status.code(),
            Some(1),
            "{name}: stdout {how}: {status}: {end}"
        );
        assert!(end.contains("serve failed"), "{name}: stdout {how}: {end}");
        eprintln!("{name}: stdout {how}: exit 1 in {:?} ({end})", t.elapsed());
    }
}
