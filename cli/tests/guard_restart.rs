//! `mcp-stdio guard --restart`: a server that crashes comes back, and the
//! host's session goes on (issue 23, restart on crash; G11 for the end of
//! each server, G12 for the audit entries). Real processes: the guard, the
//! fixture server, `sh`.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[path = "support/guarded.rs"]
mod guarded;
use guarded::{call, fixture_server, guard_bin, tmp, Guarded};

/// The audit log's entries, as JSON.
fn audit_entries(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("audit log")
        .lines()
        .map(|l| serde_json::from_str(l).expect("an audit line is JSON"))
        .collect()
}

fn phases(entries: &[Value]) -> Vec<String> {
    entries
        .iter()
        .filter_map(|e| e.get("record").and_then(|r| r.get("phase")))
        .filter_map(|p| p.as_str().map(str::to_owned))
        .collect()
}

/// The first "done when": a server that crashes on a tool call;
/// the host gets an error for that call within a second, its next call
/// succeeds on the restarted server (which got the host's handshake again),
/// and the audit log verifies with the crash and the restart in it.
#[test]
fn a_server_that_crashes_on_a_call_is_restarted_and_the_next_call_succeeds() {
    let dir = tmp("restart");
    let audit = dir.join("audit.jsonl");
    let metrics = dir.join("metrics.json");
    let mut g = Guarded::start(
        &[
            "--restart",
            "on-failure",
            "--audit",
            audit.to_str().unwrap(),
            "--metrics",
            metrics.to_str().unwrap(),
        ],
        &[],
    );
    g.initialize();
    g.send(&call(1, "echo", json!({"text": "before"})));
    let (r, _) = g.response(json!(1), Duration::from_secs(10));
    assert_eq!(r["result"]["content"][0]["text"], "before");

    let t = Instant::now();
    g.send(&call(2, "exit", json!({"code": 3})));
    let (r, _) = g.response(json!(2), Duration::from_secs(10));
    let took = t.elapsed();
    eprintln!("the crashed call's error came after {took:?}");
    assert_eq!(r["error"]["code"], -32001, "{r}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("exit code 3") && message.contains("restarts it"),
        "{message}"
    );
    assert_eq!(r["error"]["data"]["exitStatus"], json!({"code": 3}));
    assert!(
        took < Duration::from_secs(1),
        "the error must come within a second of the crash: {took:?}"
    );

    // The next call goes to the new server (it waits for the replayed handshake).
    let t = Instant::now();
    g.send(&call(3, "echo", json!({"text": "after"})));
    let (r, before) = g.response(json!(3), Duration::from_secs(10));
    eprintln!("the next call was answered after {:?}", t.elapsed());
    assert_eq!(r["result"]["content"][0]["text"], "after", "{r}");
    assert!(
        before.iter().all(|m| m.get("id").is_none()),
        "the host sees no answer to the guard's own requests: {before:?}"
    );
    let (code, stderr, _) = g.finish(Duration::from_secs(10));
    assert_eq!(
        code,
        Some(0),
        "the second server's status; stderr: {stderr}"
    );
    assert_eq!(
        stderr.matches("fixture: started pid").count(),
        2,
        "two servers: {stderr}"
    );
    assert!(
        stderr.contains("request \"mcp-stdio-guard/replay/1\" received initialize")
            || stderr.contains("request mcp-stdio-guard/replay/1 received initialize"),
        "the new server got the host's initialize again: {stderr}"
    );
    assert!(stderr.contains("restarting it in"), "{stderr}");
    assert!(stderr.contains("took over the host's session"), "{stderr}");

    let entries = audit_entries(&audit);
    let p = phases(&entries);
    assert!(
        p.iter().any(|p| p == "server_crashed") && p.iter().any(|p| p == "server_restarted"),
        "{p:?}"
    );
    let out = Command::new(guard_bin())
        .args(["verify", audit.to_str().unwrap()])
        .output()
        .expect("run verify");
    assert!(
        out.status.success(),
        "the audit log verifies: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let m: Value = serde_json::from_slice(&std::fs::read(&metrics).unwrap()).unwrap();
    assert_eq!(m["restarts"], 1, "{m}");
    assert_eq!(m["proxy"]["requests_failed_by_crash"], 1, "{m}");
}

/// The second "done when": a server that crashes at start is
/// restarted at most `--restart-max` times in a row, then the guard gives
/// up with a clear message and the server's status.
#[test]
fn a_server_that_crashes_at_start_stops_after_the_maximum_with_a_clear_message() {
    let mut cmd = Command::new(guard_bin());
    cmd.args([
        "guard",
        "--restart",
        "on-failure",
        "--restart-max",
        "2",
        "--restart-backoff",
        "0.05",
        "--",
        "sh",
        "-c",
        "echo 'cannot open database' >&2; exit 4",
    ]);
    let g = Guarded::spawn(cmd);
    let t = Instant::now();
    let (code, stderr) = g.exits_by_itself(Duration::from_secs(20));
    eprintln!("gave up after {:?}", t.elapsed());
    assert_eq!(code, Some(4), "{stderr}");
    assert_eq!(
        stderr.matches("restarting it in").count(),
        2,
        "three starts, two restarts: {stderr}"
    );
    assert!(
        stderr.matches("cannot open database").count() >= 3,
        "{stderr}"
    );
    assert!(
        stderr.contains("restarts stopped: it crashed 3 times in a row (at most 2 restarts)"),
        "{stderr}"
    );
}

/// A restarted server that crashes before answering the replayed handshake
/// would only crash again: restarts stop at once, what waited gets an
/// error, and the guard exits with that server's status.
#[test]
fn a_restarted_server_that_crashes_during_the_replayed_handshake_stops_the_restarts() {
    let dir = tmp("replay-crash");
    std::fs::create_dir_all(&dir).unwrap();
    let mark = dir.join("started-once");
    // The first server is the fixture; the next reads one line (the
    // replayed initialize) and exits 5.
    let script = format!(
        "if [ -e '{m}' ]; then read line; echo \"second server got: $line\" >&2; exit 5; else touch '{m}'; exec '{f}'; fi",
        m = mark.display(),
        f = fixture_server().display()
    );
    let mut cmd = Command::new(guard_bin());
    cmd.args([
        "guard",
        "--restart",
        "always",
        "--restart-backoff",
        "0.05",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let mut g = Guarded::spawn(cmd);
    g.initialize();
    g.send(&call(1, "exit", json!({"code": 1})));
    let (r, _) = g.response(json!(1), Duration::from_secs(10));
    assert_eq!(r["error"]["code"], -32001, "{r}");
    g.send(&call(2, "echo", json!({"text": "x"})));
    let (r, _) = g.response(json!(2), Duration::from_secs(10));
    assert_eq!(r["error"]["code"], -32001, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("stopped restarting it"),
        "{r}"
    );
    let (code, stderr) = g.exits_by_itself(Duration::from_secs(10));
    assert_eq!(code, Some(5), "{stderr}");
    assert!(
        stderr.contains("second server got: {") && stderr.contains("\"method\":\"initialize\""),
        "{stderr}"
    );
    assert!(
        stderr.contains("crashed again before answering the replayed handshake"),
        "{stderr}"
    );
}

/// Without `--restart` a crash still ends the session (the default is
/// unchanged): the call in flight gets no crash error, the guard exits with
/// the server's status.
#[test]
fn without_restart_a_crash_ends_the_session_as_before() {
    let mut g = Guarded::start(&[], &[]);
    g.initialize();
    g.send(&call(1, "exit", json!({"code": 6})));
    let (code, stderr) = g.exits_by_itself(Duration::from_secs(10));
    assert_eq!(code, Some(6), "{stderr}");
    assert_eq!(stderr.matches("fixture: started pid").count(), 1);
    assert!(!stderr.contains("restarting"), "{stderr}");
}

/// A restarted server gets the same command and environment as the first
/// (`--env-clear`, `--env`, `--env-file`): the crash does not lose them.
#[test]
fn a_restarted_server_gets_the_same_environment() {
    let dir = tmp("restart-env");
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("token");
    std::fs::write(&secret, "tok-restart-1234\n").unwrap();
    let env_file = format!("TOKEN={}", secret.display());
    let mut g = Guarded::start(
        &[
            "--restart",
            "on-failure",
            "--env-clear",
            "--env",
            "MODE=restarted",
            "--env-file",
            &env_file,
        ],
        &[],
    );
    g.initialize();
    let ask = |id: i64| call(id, "env", json!({"names": ["MODE", "TOKEN", "HOME"]}));
    g.send(&ask(1));
    let (first, _) = g.response(json!(1), Duration::from_secs(10));
    g.send(&call(2, "exit", json!({"code": 2})));
    let (r, _) = g.response(json!(2), Duration::from_secs(10));
    assert_eq!(r["error"]["code"], -32001, "{r}");
    g.send(&ask(3));
    let (second, _) = g.response(json!(3), Duration::from_secs(10));
    let text = |v: &Value| -> Value {
        serde_json::from_str(v["result"]["content"][0]["text"].as_str().expect("text"))
            .expect("the env tool answers JSON")
    };
    let (a, b) = (text(&first), text(&second));
    assert_eq!(a, b, "the same environment before and after the restart");
    assert_eq!(b["values"]["MODE"], "restarted", "{b}");
    assert_eq!(b["values"]["TOKEN"], "tok-restart-1234", "{b}");
    assert_eq!(b["values"]["HOME"], Value::Null, "{b}");
    let (_, stderr, _) = g.finish(Duration::from_secs(10));
    assert_eq!(
        stderr.matches("fixture: started pid").count(),
        2,
        "{stderr}"
    );
}
