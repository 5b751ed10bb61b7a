//! The guard's audit log through real processes: every session the guard
//! closes is sealed, a cut or unsealed log is reported as such (not OK, not
//! tampered), and `verify --expect` compares a real session with its
//! expected lifecycle.
//!
//! The fixture server is built by the tests crate: run
//! `cargo build -p mcp-stdio-tests --bins` first (`cargo test --workspace`
//! does).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use mcp_stdio_audit::{verify, AuditChain, AuditKey};
use serde_json::{json, Value};

#[path = "support/guarded.rs"]
mod guarded;
use guarded::{call, fixture_server, guard_bin as bin, guard_command, tmp, Guarded};

/// A guard writing an audit log in front of the fixture server; its stderr
/// goes nowhere.
fn start(guard_args: &[&str], server_args: &[&str]) -> Guarded {
    let mut cmd = guard_command(guard_args, &[&fixture_server()], &[]);
    cmd.args(server_args);
    Guarded::spawn_discarding_stderr(cmd)
}

/// `mcp-stdio verify LOG ARGS…`: (exit code, stdout).
fn verify_cli(log: &Path, args: &[&str]) -> (Option<i32>, String) {
    let Output { status, stdout, .. } = Command::new(bin())
        .arg("verify")
        .args(args)
        .arg(log)
        .output()
        .expect("run verify");
    (status.code(), String::from_utf8_lossy(&stdout).into_owned())
}

/// Whole lines in the log so far.
fn records_on_disk(log: &Path) -> usize {
    std::fs::read(log).map_or(0, |b| b.iter().filter(|&&c| c == b'\n').count())
}

fn lines(bytes: &[u8]) -> Vec<&[u8]> {
    bytes.split_inclusive(|&b| b == b'\n').collect()
}

fn records(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .expect("the log")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line")["record"].clone())
        .collect()
}

/// A guard session of three calls, ended by closing stdin.
fn three_call_session(log: &Path, extra: &[&str]) {
    let mut args = vec!["--audit", log.to_str().expect("utf-8 path")];
    args.extend_from_slice(extra);
    let mut g = start(&args, &[]);
    g.initialize();
    g.send(&call(1, "echo", json!({"text": "a"})));
    g.reply(json!(1));
    g.send(&json!({"jsonrpc":"2.0","id":2,"method":"ping"}));
    g.reply(json!(2));
    assert_eq!(g.close().0, Some(0));
}

#[test]
fn g12_sealed_guard_log_verifies_and_a_cut_tail_is_unsealed_not_ok() {
    let log = tmp("sealed.jsonl");
    let key_file = tmp("sealed.key");
    std::fs::write(&key_file, "secret key\n").expect("key");
    let key_arg = key_file.to_str().expect("utf-8 path");
    three_call_session(&log, &["--audit-key-file", key_arg]);
    let kf = ["--key-file", key_arg];

    let (code, out) = verify_cli(&log, &kf);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.starts_with("OK: 10 entries, sealed (2 seals)"), "{out}");
    let recs = records(&log);
    assert_eq!(recs[0]["phase"], "session_start");
    // The host's EOF starts the end: what was written is sealed at once
    // (F1: a host may kill the guard in the middle of its shutdown).
    assert_eq!(recs[7]["phase"], "seal");
    assert_eq!(recs[7]["entries"], 7);
    assert_eq!(recs[7]["kinds"]["call.dispatched"], 3);
    assert_eq!(recs[7]["kinds"]["call.completed"], 3);
    assert_eq!(recs[8]["phase"], "session_end");
    assert_eq!(recs[9]["phase"], "seal");
    assert_eq!(recs[9]["entries"], 1);

    let bytes = std::fs::read(&log).expect("log");
    let ls = lines(&bytes);
    // Every whole-entry cut from the end, the seal alone first: unsealed
    // (exit 3), and a failure (exit 1) under --require-seal; but for the
    // cut that ends at the seal written when the session began to end: that
    // is the log a guard killed there leaves, sealed by design.
    for k in 1..ls.len() {
        if k == 2 {
            let cut = tmp("cut.jsonl");
            std::fs::write(&cut, ls[..ls.len() - k].concat()).expect("write");
            let (code, out) = verify_cli(&cut, &kf);
            assert_eq!(code, Some(0), "cut at the first seal: {out}");
            assert!(out.starts_with("OK: 8 entries, sealed (1 seal)"), "{out}");
            continue;
        }
        let cut = tmp("cut.jsonl");
        std::fs::write(&cut, ls[..ls.len() - k].concat()).expect("write");
        let (code, out) = verify_cli(&cut, &kf);
        let what = if k == 1 {
            "the seal removed".to_owned()
        } else {
            format!("the last {k} entries removed")
        };
        eprintln!("{what}: exit {code:?}: {}", out.trim());
        assert_eq!(code, Some(3), "{what}: {out}");
        assert!(out.starts_with("UNSEALED: "), "{what}: {out}");
        assert!(out.contains("the log was cut"), "{what}: {out}");
        let (code, out) = verify_cli(&cut, &["--key-file", key_arg, "--require-seal"]);
        assert_eq!(code, Some(1), "{what}, --require-seal: {out}");
        assert!(out.starts_with("FAIL: unsealed: "), "{what}: {out}");
    }
    // The entry before the seal removed, the seal kept: tampering.
    let mut holed: Vec<&[u8]> = ls.clone();
    holed.remove(ls.len() - 2);
    let cut = tmp("holed.jsonl");
    std::fs::write(&cut, holed.concat()).expect("write");
    let (code, out) = verify_cli(&cut, &kf);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.starts_with("FAIL: line 9: sequence gap"), "{out}");
    // The seal's write cut short.
    std::fs::write(&cut, &bytes[..bytes.len() - 30]).expect("write");
    let (code, out) = verify_cli(&cut, &kf);
    assert_eq!(code, Some(3), "{out}");
    assert!(
        out.contains("a partial line follows the last entry"),
        "{out}"
    );
    let (code, out) = verify_cli(&cut, &["--key-file", key_arg, "--json"]);
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        (code, &v["status"], &v["sealed"]),
        (Some(3), &json!("unsealed"), &json!(false))
    );

    // Every single-byte flip of the real log is still caught as tampering:
    // in process for every byte, through the command for one byte per line.
    let key = AuditKey::new(b"secret key").expect("key");
    let t = Instant::now();
    let mut copy = bytes.clone();
    for pos in 0..bytes.len() {
        copy[pos] ^= 0x01;
        if let Ok(s) = verify(&copy, Some(&key)) {
            panic!("flip at byte {pos} of {} not caught: {s:?}", bytes.len());
        }
        copy[pos] ^= 0x01;
    }
    eprintln!(
        "{} single-byte flips of a {}-entry guard log caught in {:?}",
        bytes.len(),
        ls.len(),
        t.elapsed()
    );
    let mut start = 0;
    for (i, l) in ls.iter().enumerate() {
        let mut flipped = bytes.clone();
        flipped[start + l.len() / 2] ^= 0x01;
        start += l.len();
        std::fs::write(&cut, &flipped).expect("write");
        let (code, out) = verify_cli(&cut, &kf);
        assert_eq!(code, Some(1), "flip in line {}: {out}", i + 1);
        assert!(out.starts_with(&format!("FAIL: line {}:", i + 1)), "{out}");
    }
}

#[cfg(unix)]
#[test]
fn g12_guard_seals_its_log_on_sigterm() {
    let log = tmp("sigterm.jsonl");
    let mut g = start(&["--audit", log.to_str().expect("utf-8")], &[]);
    g.initialize();
    g.send(&call(
        1,
        "slow",
        json!({"chunks": 50, "delay_ms": 100, "honour_cancel": true}),
    ));
    thread::sleep(Duration::from_millis(200));
    let pid = g.child.id().to_string();
    let t = Instant::now();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let (code, _) = g.exits_by_itself(Duration::from_secs(10));
    eprintln!("SIGTERM → guard exit {code:?} in {:?}", t.elapsed());
    let (code, out) = verify_cli(&log, &["--require-seal"]);
    assert_eq!(code, Some(0), "{out}");
    // Sealed when the signal came, and at the end.
    assert!(out.contains("sealed (2 seals)"), "{out}");
    let recs = records(&log);
    let signal: Vec<&Value> = recs
        .iter()
        .filter(|r| r["phase"] == "host_signal")
        .collect();
    assert_eq!(signal.len(), 1, "{recs:?}");
    assert_eq!(signal[0]["signal"], "SIGTERM");
    assert_eq!(signal[0]["nth"], 1);
    let slow: Vec<&Value> = recs.iter().filter(|r| r["operation"] == "slow").collect();
    assert_eq!(
        slow.first().map(|r| &r["state"]),
        Some(&json!("dispatched"))
    );
    assert_eq!(
        slow.len(),
        2,
        "the open call ends with the session: {recs:?}"
    );
    assert_eq!(recs[recs.len() - 1]["phase"], "seal");
}

#[test]
fn g12_guard_seals_its_log_when_the_host_stops_reading() {
    let log = tmp("stalled.jsonl");
    let mut child = Command::new(bin())
        .args([
            "guard",
            "--max-buffered",
            "1000000",
            "--max-frame",
            "16000000",
        ])
        .arg("--audit")
        .arg(&log)
        .arg("--")
        .arg(fixture_server())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("piped");
    let _stdout = child.stdout.take().expect("piped"); // never read
    for i in 0..3 {
        writeln!(stdin, "{}", call(i, "big", json!({"bytes": 8_000_000}))).expect("write");
    }
    stdin.flush().expect("flush");
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the guard never closed the session"
        );
        thread::sleep(Duration::from_millis(20));
    };
    eprintln!(
        "host not reading → guard exit {status} after {:?}",
        t.elapsed()
    );
    assert_eq!(status.code(), Some(75));
    let (code, out) = verify_cli(&log, &["--require-seal"]);
    assert_eq!(code, Some(0), "{out}");
    // Sealed once the session began to end, after each batch since, and last.
    assert!(out.contains(" seals)"), "{out}");
}

#[test]
fn g12_a_killed_guard_leaves_an_unsealed_log_and_the_next_run_says_so() {
    let log = tmp("killed.jsonl");
    let path = log.to_str().expect("utf-8");
    let mut g = start(&["--audit", path], &[]);
    g.initialize();
    g.send(&call(1, "echo", json!({"text": "a"})));
    g.reply(json!(1));
    // Killed while idle, once both calls' records are on disk (a kill in the
    // middle of a write leaves a partial line, which the guard does not continue).
    let t = Instant::now();
    while records_on_disk(&log) < 5 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "records never reached the disk"
        );
        thread::sleep(Duration::from_millis(10));
    }
    g.child.kill().expect("SIGKILL");
    let _ = g.child.wait();
    let (code, out) = verify_cli(&log, &[]);
    eprintln!("after SIGKILL: exit {code:?}: {}", out.trim());
    assert_eq!(code, Some(3), "{out}");
    assert!(out.starts_with("UNSEALED: "), "{out}");
    let first_run = records(&log).len();

    // The next run continues the log and seals its own session; the one
    // before stays visible as a session that ended without a seal.
    three_call_session(&log, &[]);
    let (code, out) = verify_cli(&log, &[]);
    assert_eq!(code, Some(3), "{out}");
    assert!(
        out.contains(&format!(
            "1 session ended without a seal (the first: entries 1–{first_run})"
        )),
        "{out}"
    );
    let (code, out) = verify_cli(&log, &["--require-seal"]);
    assert_eq!(code, Some(1), "{out}");
}

/// A real session, written down by hand in the expectation format.
const EXPECTED: &str = "\
# A guard session: each call has an entry when it is dispatched (before the
# request reaches the server) and one when it ends.
session
call 1/0 initialize: received validated authorized [dispatched] [completed]
call 2/1 echo:       received validated authorized [dispatched] [completed]
call 3/5 slow:       received validated authorized [dispatched] [cancelled_after_dispatch]
phase session_end
";

/// The log's records, chained again (a bridge that wrote these records).
fn rechain(records: &[Value]) -> Vec<u8> {
    let mut chain = AuditChain::new();
    let mut log = Vec::new();
    for r in records.iter().filter(|r| r["phase"] != "seal") {
        log.extend(chain.append(r).expect("append"));
    }
    log.extend(chain.seal().expect("seal"));
    log
}

#[test]
fn g12_expect_matches_a_guard_session_and_names_a_missing_dispatched() {
    let log = tmp("expect.jsonl");
    let mut g = start(&["--audit", log.to_str().expect("utf-8")], &[]);
    g.initialize();
    g.send(&call(1, "echo", json!({"text": "a"})));
    g.reply(json!(1));
    g.send(&call(
        5,
        "slow",
        json!({"chunks": 20, "delay_ms": 50, "honour_cancel": true}),
    ));
    thread::sleep(Duration::from_millis(100));
    g.send(&json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5,"reason":"stop"}}));
    g.send(&json!({"jsonrpc":"2.0","id":6,"method":"ping"}));
    g.reply(json!(6));
    assert_eq!(g.close().0, Some(0));
    let expect = tmp("expect.txt");
    // The ping is the fourth call.
    std::fs::write(
        &expect,
        EXPECTED.replace(
            "phase session_end",
            "call 4/6 ping: received validated authorized [dispatched] [completed]\nphase session_end",
        ),
    )
    .expect("write");
    let e = ["--expect", expect.to_str().expect("utf-8")];

    let (code, out) = verify_cli(&log, &e);
    eprintln!("{}", out.trim());
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("EXPECT: as expected (4 calls in 1 session)"),
        "{out}"
    );

    // A bridge that did not write the entry before dispatch: the chain and
    // the seal are intact (verification passes), the comparison names it.
    let recs = records(&log);
    let without: Vec<Value> = recs
        .iter()
        .filter(|r| !(r["call_id"] == "2/1" && r["state"] == "dispatched"))
        .cloned()
        .collect();
    assert_eq!(without.len(), recs.len() - 1);
    let bad = tmp("expect-bad.jsonl");
    std::fs::write(&bad, rechain(&without)).expect("write");
    let (code, out) = verify_cli(&bad, &[]);
    assert_eq!(code, Some(0), "intact and sealed: {out}");
    let (code, out) = verify_cli(&bad, &e);
    eprintln!("{}", out.trim());
    assert_eq!(code, Some(4), "{out}");
    assert!(
        out.contains("MISMATCH: session 1, call 2/1: missing entry in state dispatched"),
        "{out}"
    );
    assert!(out.contains("EXPECT: 2 mismatch(es)"), "{out}");

    // …and one whose records never show the call dispatched at all.
    let no_transition: Vec<Value> = without
        .into_iter()
        .map(|mut r| {
            if r["call_id"] == "2/1" {
                let events = r["events"].as_array_mut().expect("events");
                events.retain(|ev| ev["state"] != "dispatched" || ev["kind"] != "transition");
            }
            r
        })
        .collect();
    std::fs::write(&bad, rechain(&no_transition)).expect("write");
    let (code, out) = verify_cli(&bad, &e);
    eprintln!("{}", out.trim());
    assert_eq!(code, Some(4), "{out}");
    assert!(
        out.contains("MISMATCH: session 1, call 2/1: missing state dispatched"),
        "{out}"
    );
    let (code, out) = verify_cli(&bad, &[&e[..], &["--json"]].concat());
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!((code, &v["status"]), (Some(4), &json!("mismatch")));

    // A tampered log is reported as such before any comparison.
    let mut flipped = std::fs::read(&log).expect("log");
    flipped[100] ^= 0x01;
    std::fs::write(&bad, flipped).expect("write");
    let (code, out) = verify_cli(&bad, &e);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.starts_with("FAIL: line 1:") && !out.contains("EXPECT"),
        "{out}"
    );
}

#[test]
fn g12_guard_seals_its_log_when_the_server_exits_or_cannot_start() {
    // The server exits by itself while the host keeps stdin open.
    let log = tmp("server-exit.jsonl");
    let mut child = Command::new(bin())
        .arg("guard")
        .arg("--audit")
        .arg(&log)
        .args(["--", "sh", "-c", "sleep 0.2; exit 3"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the guard");
    let _stdin = child.stdin.take(); // open and idle
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(3));
    let (code, out) = verify_cli(&log, &["--require-seal"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.starts_with("OK: 3 entries, sealed"), "{out}");

    // The server cannot be started: the session is still recorded and sealed.
    let log = tmp("spawn-failed.jsonl");
    let status = Command::new(bin())
        .arg("guard")
        .arg("--audit")
        .arg(&log)
        .args(["--", "/nonexistent/mcp-server"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run the guard");
    assert_eq!(status.code(), Some(127));
    let (code, out) = verify_cli(&log, &["--require-seal"]);
    assert_eq!(code, Some(0), "{out}");
    let recs = records(&log);
    assert_eq!(recs.len(), 3, "{recs:?}");
    assert_eq!(recs[1]["phase"], "session_end");
    assert!(recs[1]["spawn_failed"].is_string(), "{recs:?}");
}
