//! G11, "a host crash leaves nothing behind", for `mcp-stdio guard`: the
//! guard is SIGKILLed and its server, which ignores both stdin EOF and
//! SIGTERM, must be gone. Linux only: elsewhere there is no parent-death
//! signal (see the README).
//!
//! The fixture server is built by the tests crate: run
//! `cargo build -p mcp-stdio-tests --bins` first (`cargo test --workspace`
//! does).
#![cfg(target_os = "linux")]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mcp_stdio_tests::{
    descendants, fixture_server_path, pid_alive, signal_pid, wait_until, Signal,
};

/// Generous: the kernel delivers the signal at once; CI machines are slow.
const GONE_WITHIN: Duration = Duration::from_secs(5);

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim_end()
        .to_owned()
}

#[test]
fn g11_sigkilled_guard_leaves_no_server() {
    let mut guard = Command::new(env!("CARGO_BIN_EXE_mcp-stdio"))
        .arg("guard")
        .arg("--")
        .arg(fixture_server_path())
        .args(["--ignore-stdin-eof", "--ignore-sigterm"])
        // Kept open and unused: the guard must not see EOF before its death.
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the guard starts");
    let guard_pid = guard.id();
    // The server, once it has exec'd (before that the child still runs as the guard).
    let mut server = None;
    let found = wait_until(GONE_WITHIN, Duration::from_millis(10), || {
        server = descendants(guard_pid)
            .into_iter()
            .find(|&pid| comm(pid) == "fixture-server");
        server.is_some()
    });
    let Some(server) = server.filter(|_| found.is_some()) else {
        let _ = guard.kill();
        let _ = guard.wait();
        panic!("no fixture-server under the guard within {GONE_WITHIN:?}");
    };
    signal_pid(guard_pid, Signal::SIGKILL).expect("kill the guard");
    let killed = Instant::now();
    let _ = guard.wait();
    let gone = wait_until(GONE_WITHIN, Duration::from_millis(10), || {
        !pid_alive(server)
    });
    eprintln!("server {server} gone {gone:?} after the guard was SIGKILLed");
    if gone.is_none() {
        let _ = signal_pid(server, Signal::SIGKILL);
        panic!(
            "server {server} still alive {:?} after the guard was SIGKILLed",
            killed.elapsed()
        );
    }
}
