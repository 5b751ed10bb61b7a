//! What the blocking adapter's tests share: the fixture server (built on
//! demand), options with short graces, and `/proc` facts for leak checks.
#![allow(dead_code, unreachable_pub)] // each test file uses a different part

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use mcp_stdio_blocking::core::{to_raw, RawResult, RawValue};
use mcp_stdio_blocking::{ClientOptions, CommandSpec};
use serde_json::Value;

/// The `fixture-server` binary of the tests crate. Looked up in
/// `MCP_STDIO_FIXTURE_SERVER`, then next to this test's target directory;
/// when missing, built once with `cargo build -p mcp-stdio-tests --bins`.
pub fn fixture_server() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(p) = std::env::var_os("MCP_STDIO_FIXTURE_SERVER") {
            return PathBuf::from(p);
        }
        // target/<profile>/deps/<test>-<hash> → target/<profile>/fixture-server
        let exe = std::env::current_exe().expect("current_exe is readable");
        let profile_dir = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("a test runs from target/<profile>/deps")
            .to_owned();
        let path = profile_dir.join("fixture-server");
        if !path.is_file() {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml");
            let mut cmd = Command::new(cargo);
            cmd.args([
                "build",
                "-p",
                "mcp-stdio-tests",
                "--bins",
                "--manifest-path",
            ])
            .arg(manifest);
            if profile_dir.file_name().is_some_and(|n| n == "release") {
                cmd.arg("--release");
            }
            let status = cmd.status().expect("running cargo to build the fixtures");
            assert!(status.success(), "building the fixture server failed");
        }
        assert!(path.is_file(), "no fixture server at {}", path.display());
        path
    })
    .clone()
}

/// The fixture server with these flags.
pub fn fixture(flags: &[&str]) -> CommandSpec {
    let mut spec = CommandSpec::new(fixture_server());
    spec.args(flags);
    spec
}

/// Options with a wire limit and short shutdown graces, so tests are quick.
pub fn options(max_frame: usize) -> ClientOptions {
    let mut options = ClientOptions::default();
    options.framer_mut().max_frame(max_frame);
    options
        .supervisor_mut()
        .stdin_close_grace(Duration::from_millis(500))
        .term_grace(Duration::from_millis(500))
        .reader_drain_deadline(Duration::from_millis(500));
    options
}

/// `tools/call` params for `name` with `arguments`.
pub fn tool(name: &str, arguments: Value) -> Option<Box<RawValue>> {
    Some(to_raw(&serde_json::json!({ "name": name, "arguments": arguments })).expect("JSON"))
}

/// The text of the first content block of a tool result.
pub fn first_text(result: &RawResult) -> String {
    let v: Value = serde_json::from_str(result.get()).expect("a result is JSON");
    v["content"][0]["text"]
        .as_str()
        .expect("a text block")
        .to_owned()
}

/// `/proc/<pid>/stat`: (state, pgrp), `None` when the process is gone.
fn stat(pid: u32) -> Option<(char, u32)> {
    let line = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &line[line.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// True while `pid` exists and is not a zombie.
pub fn pid_alive(pid: u32) -> bool {
    stat(pid).is_some_and(|(s, _)| !matches!(s, 'Z' | 'X'))
}

/// True while `pid` exists at all (a zombie counts: it was not reaped).
pub fn pid_exists(pid: u32) -> bool {
    stat(pid).is_some()
}

/// Live members of process group `pgid`.
pub fn group_members(pgid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| stat(p).is_some_and(|(s, g)| g == pgid && !matches!(s, 'Z' | 'X')))
        .collect()
}

/// Names of this process's threads.
pub fn thread_names() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .map(|s| s.trim().to_owned())
        .collect()
}

/// Polls `cond` every 5 ms until it holds (returns the time it took) or
/// `timeout` passes (`None`).
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if cond() {
            return Some(start.elapsed());
        }
        if start.elapsed() >= timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// CPU time (user + system, in clock ticks) of this process's thread named `name`.
pub fn thread_cpu_ticks(name: &str) -> Option<u64> {
    let dir = std::fs::read_dir("/proc/self/task").ok()?;
    for task in dir.filter_map(Result::ok) {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
        let rest = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
        // After the name: state is field 3 of the line, utime 14, stime 15.
        let utime: u64 = fields.get(11)?.parse().ok()?;
        let stime: u64 = fields.get(12)?.parse().ok()?;
        return Some(utime + stime);
    }
    None
}

/// Times the thread named `name` of this process was woken (its voluntary
/// context switches, `/proc/self/task/*/status`; Linux).
pub fn thread_wakeups(name: &str) -> Option<u64> {
    let dir = std::fs::read_dir("/proc/self/task").ok()?;
    for task in dir.filter_map(Result::ok) {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let status = std::fs::read_to_string(task.path().join("status")).ok()?;
        let line = status
            .lines()
            .find(|l| l.starts_with("voluntary_ctxt_switches:"))?;
        return line.split_whitespace().nth(1)?.parse().ok();
    }
    None
}
