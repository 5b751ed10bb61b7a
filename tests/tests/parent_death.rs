//! G11, "a host crash leaves nothing behind", for every adapter's `Client`:
//! a host process (`client-host`) is SIGKILLed and its server, one that
//! ignores stdin EOF, must be gone; and a `Client` spawned from a thread that
//! then exits keeps its server while the process lives (the kernel ties the
//! parent-death signal to the forking *thread*). Linux only: elsewhere there
//! is no parent-death signal (see the README).
#![cfg(target_os = "linux")]

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use mcp_stdio_tests::{pid_alive, signal_pid, wait_until, Signal};

const HOST: &str = env!("CARGO_BIN_EXE_client-host");

/// Generous: the kernel delivers the signal at once; CI machines are slow.
const GONE_WITHIN: Duration = Duration::from_secs(5);

/// A running `client-host`; killed (and its server, if known) on drop.
struct Host {
    child: Child,
    lines: BufReader<ChildStdout>,
    server: Option<u32>,
}

impl Host {
    fn start(adapter: &str, from_exiting_thread: bool) -> Self {
        let mut cmd = Command::new(HOST);
        cmd.arg(adapter);
        if from_exiting_thread {
            cmd.arg("--from-exiting-thread");
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("client-host starts");
        let lines = BufReader::new(child.stdout.take().expect("piped"));
        Self {
            child,
            lines,
            server: None,
        }
    }

    /// The next stdout line; panics at EOF (the host failed: see its stderr).
    fn line(&mut self) -> String {
        let mut line = String::new();
        let n = self.lines.read_line(&mut line).expect("read client-host");
        assert!(n > 0, "client-host ended early (its stderr says why)");
        line.trim_end().to_owned()
    }

    fn expect_line(&mut self, want: &str) {
        assert_eq!(self.line(), want);
    }

    fn server_pid(&mut self) -> u32 {
        let line = self.line();
        let pid = line
            .strip_prefix("server pid ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("expected `server pid N`, got {line:?}"));
        self.server = Some(pid);
        pid
    }

    /// SIGKILLs the host and reaps it.
    fn crash(&mut self) {
        signal_pid(self.child.id(), Signal::SIGKILL).expect("kill client-host");
        let _ = self.child.wait();
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(pid) = self.server {
            let _ = signal_pid(pid, Signal::SIGKILL);
        }
    }
}

fn assert_gone_after_crash(host: &mut Host, server: u32) {
    assert!(
        pid_alive(server),
        "the server {server} is running before the crash"
    );
    let crashed = Instant::now();
    host.crash();
    let gone = wait_until(GONE_WITHIN, Duration::from_millis(10), || {
        !pid_alive(server)
    });
    eprintln!("server {server} gone {gone:?} after its host was SIGKILLed");
    assert!(
        gone.is_some(),
        "server {server} still alive {:?} after its host was SIGKILLed",
        crashed.elapsed()
    );
}

fn sigkilled_host_leaves_no_server(adapter: &str) {
    let mut host = Host::start(adapter, false);
    let server = host.server_pid();
    assert_gone_after_crash(&mut host, server);
}

fn client_from_an_exiting_thread_keeps_its_server(adapter: &str) {
    let mut host = Host::start(adapter, true);
    host.expect_line("spawning thread exited");
    let server = host.server_pid();
    host.expect_line("ping answered after the spawning thread exited");
    assert!(
        pid_alive(server),
        "server {server} died with the thread that spawned it"
    );
    // Still tied to the process itself.
    assert_gone_after_crash(&mut host, server);
}

#[test]
fn g11_sigkilled_tokio_host_leaves_no_server() {
    sigkilled_host_leaves_no_server("tokio");
}

#[test]
fn g11_sigkilled_async_std_host_leaves_no_server() {
    sigkilled_host_leaves_no_server("async-std");
}

#[test]
fn g11_sigkilled_blocking_host_leaves_no_server() {
    sigkilled_host_leaves_no_server("blocking");
}

#[test]
fn g11_tokio_client_from_an_exiting_thread_keeps_its_server() {
    client_from_an_exiting_thread_keeps_its_server("tokio");
}

#[test]
fn g11_async_std_client_from_an_exiting_thread_keeps_its_server() {
    client_from_an_exiting_thread_keeps_its_server("async-std");
}

#[test]
fn g11_blocking_client_from_an_exiting_thread_keeps_its_server() {
    client_from_an_exiting_thread_keeps_its_server("blocking");
}

#[test]
fn g11_host_that_ends_its_stdin_kills_its_server_on_the_way_out() {
    // The orderly path, for contrast: the host's own `Client::kill` ends the
    // server before the host exits (no parent-death signal involved).
    let mut host = Host::start("blocking", false);
    let server = host.server_pid();
    drop(host.child.stdin.take());
    let status = host.child.wait().expect("client-host exits");
    assert!(status.success(), "client-host: {status}");
    assert!(
        wait_until(GONE_WITHIN, Duration::from_millis(10), || !pid_alive(
            server
        ))
        .is_some(),
        "server {server} outlived an orderly host exit"
    );
}
