//! F3, `guard --log-file`: the server's whole stderr and the guard's notes,
//! timestamped, in a file of the server's, size-rotated, and a disk that
//! is full or stops taking bytes never delays the session (G1): lines are
//! dropped, counted and marked instead.
#![cfg(target_os = "linux")]

#[path = "support/guarded.rs"]
mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{fixture_server, guard_command, ping, tmp, Guarded};

fn guard(args: &[&str]) -> Guarded {
    let mut cmd = guard_command(args, &[&fixture_server()], &[]);
    cmd.arg("--stderr-at-start").arg("0");
    Guarded::spawn(cmd)
}

fn read(path: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
}

/// The whole stderr, past the forwarding budget, timestamped, with the
/// guard's notes; the file is the user's alone (0600).
#[test]
fn f3_the_log_file_has_the_whole_stderr_and_the_notes() {
    let dir = tmp("logs");
    let path = dir.path().join("srv.log");
    let p = path.to_str().unwrap();
    let mut g = guard(&["--log-file", p, "--stderr-budget", "100"]);
    g.initialize();
    let r = g.call_tool(1, "stderr_flood", json!({"bytes": 200_000}));
    assert!(r.get("result").is_some(), "{r}");
    g.call_tool(2, "print_env", json!({"name": "HOME", "stream": "stdout"}));
    g.close();
    let log = read(&path);
    let flood = log
        .lines()
        .filter(|l| l.contains(" stderr fixture: flood"))
        .count();
    assert!(
        flood >= 3000,
        "{flood} flood lines of 64 bytes: {}",
        &log[..200.min(log.len())]
    );
    assert!(
        log.lines().any(|l| l.contains(" guard ")),
        "a note: {log:.300}"
    );
    let first = log.lines().next().unwrap();
    assert_eq!(&first[4..5], "-", "{first}");
    assert!(first[..24].ends_with('Z'), "{first}");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

/// Rotation: files stay under `--log-file-max`, `--log-file-count` are kept.
#[test]
fn f3_the_log_file_rotates_by_size() {
    let dir = tmp("rotate");
    let path = dir.path().join("srv.log");
    let p = path.to_str().unwrap();
    let mut g = guard(&[
        "--log-file",
        p,
        "--log-file-max",
        "65536",
        "--log-file-count",
        "3",
    ]);
    g.initialize();
    let r = g.call_tool(1, "stderr_flood", json!({"bytes": 400_000}));
    assert!(r.get("result").is_some(), "{r}");
    g.close();
    let numbered = |n: u32| dir.path().join(format!("srv.log.{n}"));
    for f in [path.clone(), numbered(1), numbered(2)] {
        let len = std::fs::metadata(&f).map(|m| m.len()).unwrap_or(0);
        assert!(len > 0 && len <= 65536, "{}: {len} bytes", f.display());
    }
    assert!(!numbered(3).exists(), "only 3 files are kept");
}

/// G1: a full disk (`/dev/full`) and a log that stops taking bytes (a FIFO
/// nobody reads) never slow the host's pings; the loss is counted in
/// `--metrics` and said once on stderr.
#[test]
fn g1_a_full_or_stalled_log_never_delays_the_session() {
    let dir = tmp("stalled-log");
    let fifo = dir.path().join("stalled.log");
    std::fs::create_dir_all(dir.path()).unwrap();
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
    // A reader that never reads, so the guard's open does not wait.
    let _reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags_nonblock()
        .open(&fifo)
        .expect("fifo reader");
    for (label, target) in [
        ("/dev/full", Path::new("/dev/full")),
        ("a stalled FIFO", &fifo),
    ] {
        let metrics = dir.path().join("metrics.json");
        let mut g = guard(&[
            "--log-file",
            target.to_str().unwrap(),
            "--metrics",
            metrics.to_str().unwrap(),
        ]);
        g.initialize();
        let t = Instant::now();
        let r = g.call_tool(1, "stderr_flood", json!({"bytes": 8 << 20}));
        assert!(r.get("result").is_some(), "{r}");
        let flood = t.elapsed();
        let mut worst = Duration::ZERO;
        for id in 2..12 {
            worst = worst.max(ping(&mut g, id));
        }
        let t = Instant::now();
        let (_, err) = g.close();
        let exit = t.elapsed();
        let m: Value = serde_json::from_str(&read(&metrics)).expect("metrics");
        let dropped = m["log_file_dropped_bytes"].as_u64().unwrap_or(0);
        eprintln!(
            "{label}: 8 MiB of stderr in {:.0} ms, pings worst {:.1} ms, exit {:.0} ms, {dropped} log bytes dropped",
            flood.as_secs_f64() * 1e3,
            worst.as_secs_f64() * 1e3,
            exit.as_secs_f64() * 1e3
        );
        assert!(worst < Duration::from_secs(1), "{label}: {worst:?}");
        assert!(exit < Duration::from_secs(5), "{label}: exit took {exit:?}");
        assert!(dropped > 0, "{label}: {m}");
        if label == "/dev/full" {
            assert!(err.contains("--log-file"), "said once: {err}");
        }
    }
}

trait NonBlock {
    fn custom_flags_nonblock(&mut self) -> &mut Self;
}

impl NonBlock for std::fs::OpenOptions {
    fn custom_flags_nonblock(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
    }
}
