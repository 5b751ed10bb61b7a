//! `mcp-stdio guard --idle-stop`: a server that sleeps when idle (F2).
//! Real processes: the guard and the fixture server. Never while a call is
//! in flight (a 30 s call under a 1 s idle stop), stopped after it, gone
//! from the process table while it sleeps, `sleeping` in `ps`, and the
//! host's next call answered by a new server that got the host's
//! handshake first; audited (`server_idle_stopped`, `server_resumed`).
#![cfg(target_os = "linux")]

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[path = "support/guarded.rs"]
mod guarded;
use guarded::{call, fixture_server, guard_bin, guard_command, tmp, Guarded};

/// The pids whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // The parent's pid follows the command's closing parenthesis and the state.
        let rest = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
        if rest.split(' ').nth(1).and_then(|p| p.parse::<u32>().ok()) == Some(pid) {
            out.push(child);
        }
    }
    out
}

fn phases(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .expect("audit log")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("JSON"))
        .filter_map(|e| e["record"]["phase"].as_str().map(str::to_owned))
        .collect()
}

/// `ps --json`'s entry for the guard, in the runtime base `xdg`.
fn state(xdg: &std::path::Path) -> String {
    let out = Command::new(guard_bin())
        .args(["ps", "--json"])
        .env("XDG_RUNTIME_DIR", xdg)
        .output()
        .expect("ps");
    let ps: Value = serde_json::from_slice(&out.stdout).expect("ps --json");
    ps[0]["state"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn f2_idle_stop_never_fires_during_a_30_s_call_then_sleeps_and_the_next_call_works() {
    let dir = tmp("idle");
    std::fs::create_dir_all(dir.path()).expect("dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("0700");
    let audit = dir.join("audit.jsonl");
    let metrics = dir.join("metrics.json");
    let xdg = dir.path().to_str().expect("utf-8").to_owned();
    let cmd = guard_command(
        &[
            "--idle-stop",
            "1s",
            "--audit",
            audit.to_str().expect("utf-8"),
            "--metrics",
            metrics.to_str().expect("utf-8"),
        ],
        &[&fixture_server()],
        &[("XDG_RUNTIME_DIR", &xdg)],
    );
    let mut g = Guarded::spawn(cmd).bounded(Duration::from_secs(60));
    let guard = g.child.id();
    g.initialize();
    let first = children(guard);
    assert_eq!(first.len(), 1, "one server: {first:?}");

    // A 30 s call under a 1 s idle stop: the server stays.
    let t = Instant::now();
    g.send(&call(1, "slow", json!({"chunks": 30, "delay_ms": 1000})));
    let r = g.reply(1);
    let call_took = t.elapsed();
    assert!(r.get("result").is_some(), "{r}");
    assert_eq!(children(guard), first, "the same server after the call");
    assert!(
        !phases(&audit).contains(&"server_idle_stopped".to_owned()),
        "no stop during the call"
    );

    // Then, idle: stopped within about a second, gone, `sleeping`.
    let t = Instant::now();
    while !children(guard).is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the idle server was not stopped"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let stopped_after = t.elapsed();
    assert_eq!(state(dir.path()), "sleeping");

    // The next call wakes a new server; the host sees only the start-up.
    let t = Instant::now();
    g.send(&call(2, "echo", json!({"text": "awake"})));
    let r = g.reply(2);
    let woke_in = t.elapsed();
    assert_eq!(r["result"]["content"][0]["text"], "awake", "{r}");
    let second = children(guard);
    assert_eq!(second.len(), 1, "{second:?}");
    assert_ne!(second, first, "a new server");
    assert_eq!(state(dir.path()), "running");
    eprintln!(
        "call {call_took:?} with no stop; stopped {stopped_after:?} after it; woke and answered in {woke_in:?}"
    );

    let (code, stderr) = g.close();
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stderr.matches("idle for").count(), 1, "{stderr}");
    let p = phases(&audit);
    let idle = p.iter().position(|x| x == "server_idle_stopped");
    let resumed = p.iter().position(|x| x == "server_resumed");
    assert!(
        matches!((idle, resumed), (Some(i), Some(r)) if i < r),
        "{p:?}"
    );
    assert!(!p.contains(&"server_crashed".to_owned()), "{p:?}");
    let out = Command::new(guard_bin())
        .args(["verify", audit.to_str().expect("utf-8")])
        .output()
        .expect("verify");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m: Value =
        serde_json::from_slice(&std::fs::read(&metrics).expect("metrics")).expect("JSON");
    assert_eq!(
        (m["idle_stops"].as_u64(), m["resumes"].as_u64()),
        (Some(1), Some(1)),
        "{m}"
    );
    assert_eq!(m["restarts"], 0);
}

/// A duration that does not parse is a usage error (exit 2) with the forms
/// accepted.
#[test]
fn f2_an_idle_stop_that_does_not_parse_is_a_usage_error() {
    for bad in ["0", "-5", "5x", "soon", ""] {
        let out = Command::new(guard_bin())
            .args(["guard", &format!("--idle-stop={bad}"), "--"])
            .arg(fixture_server())
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("5m"), "{bad:?}: {err}");
    }
}
