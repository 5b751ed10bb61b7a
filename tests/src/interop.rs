//! Interop tests: our adapters against real MCP peers that this project did
//! not write, generic over the adapter ([`crate::adapter::Adapter`]) and
//! instantiated per adapter with [`interop_suite!`](crate::interop_suite)
//! (`tests/tests/interop_<adapter>.rs`).
//!
//! The peers, pinned and installed by `tests/interop/setup.sh`:
//!
//! - the official npm package `@modelcontextprotocol/server-everything`, run as
//!   `node <pkg>/dist/index.js stdio` (TypeScript SDK server);
//! - a server written with the Python `mcp` package (`tests/interop/py_server.py`);
//! - the Python `mcp` package's stdio *client* (`tests/interop/py_client.py`),
//!   driving our own `serve` (a per-adapter binary such as `serve-tokio`).
//!
//! Where the peers are, in lookup order (see [`server_everything_entry`],
//! [`node`], [`python`]): `MCP_STDIO_SERVER_EVERYTHING` (the `dist/index.js`
//! path), `MCP_STDIO_NODE` (default `node` on `PATH`), `MCP_STDIO_PYTHON` (a
//! python with `mcp` installed); otherwise the cache folder
//! `$MCP_STDIO_INTEROP_DIR` (default `<workspace>/target/interop`) that the
//! setup script fills. A peer that is absent makes its test FAIL, saying
//! what to run to install it ([`SETUP_COMMAND`]); with [`SKIP_ENV`]
//! (`MCP_STDIO_SKIP_INTEROP=1`) set it prints [`SKIP_PREFIX`]`<test>: why`
//! on stderr instead (outside the test harness's capture, so it shows in the
//! run's output and `grep -c` counts it) and returns. `.ci/run` installs the
//! peers and unsets the variable: CI runs every interop test.
//!
//! Bounds are generous (seconds); each test prints what it measured.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mcp_stdio_core::EndedBy;
use mcp_stdio_core::RequestFailure;
use mcp_stdio_core::{to_raw, RawResult, RawValue};
use mcp_stdio_core::{ClientOptions, RequestError, SessionRecord};
use mcp_stdio_core::{CommandSpec, ExitStatus};
use serde_json::{json, Value};

use crate::adapter::{Adapter, SuiteClient, SuiteIncoming};
use crate::{group_members, huge_field_text, pid_alive, wait_until, ProcessGroupGuard};

/// The workspace root (the parent of this package's folder).
#[must_use]
pub fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests package lies inside the workspace")
        .to_path_buf()
}

/// The peers' cache folder: `$MCP_STDIO_INTEROP_DIR`, else `<workspace>/target/interop`.
#[must_use]
pub fn interop_dir() -> PathBuf {
    std::env::var_os("MCP_STDIO_INTEROP_DIR")
        .map_or_else(|| workspace_dir().join("target/interop"), PathBuf::from)
}

/// The folder of the Python scripts and the setup script: `<workspace>/tests/interop`.
#[must_use]
pub fn scripts_dir() -> PathBuf {
    workspace_dir().join("tests/interop")
}

/// What installs the peers, from the workspace root; an absent peer's failure names it.
pub const SETUP_COMMAND: &str = "bash tests/interop/setup.sh";

/// The opt-out: with this variable set (and not empty, `0` or `false`) an
/// interop test whose peer is absent is skipped with a [`SKIP_PREFIX`] line
/// instead of failing.
pub const SKIP_ENV: &str = "MCP_STDIO_SKIP_INTEROP";

/// The start of the line a skipped interop test prints on stderr; a run's
/// skips are counted with `grep -c 'SKIPPED (interop peer missing): '`.
pub const SKIP_PREFIX: &str = "SKIPPED (interop peer missing): ";

/// Whether [`SKIP_ENV`] asks to skip the interop tests whose peer is absent.
#[must_use]
pub fn skip_allowed() -> bool {
    std::env::var(SKIP_ENV).is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"))
}

/// The server-everything entry script: `$MCP_STDIO_SERVER_EVERYTHING`, else
/// `<interop dir>/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js`.
///
/// # Errors
/// Why it is not there.
pub fn server_everything_entry() -> Result<PathBuf, String> {
    let (path, from) = match std::env::var_os("MCP_STDIO_SERVER_EVERYTHING") {
        Some(p) => (PathBuf::from(p), "MCP_STDIO_SERVER_EVERYTHING"),
        None => (
            interop_dir()
                .join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
            "the cache folder, $MCP_STDIO_INTEROP_DIR or <workspace>/target/interop",
        ),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "server-everything not found at {} (from {from})",
            path.display()
        ))
    }
}

/// The server-filesystem entry script:
/// `<interop dir>/npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js`.
///
/// # Errors
/// Why it is not there.
pub fn server_filesystem_entry() -> Result<PathBuf, String> {
    let path = interop_dir()
        .join("npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "server-filesystem not found at {} (the cache folder, $MCP_STDIO_INTEROP_DIR or \
             <workspace>/target/interop)",
            path.display()
        ))
    }
}

/// Node.js: `$MCP_STDIO_NODE`, else `node` on `PATH`; with its `--version`.
///
/// # Errors
/// Why it cannot run.
pub fn node() -> Result<(PathBuf, String), String> {
    let node =
        std::env::var_os("MCP_STDIO_NODE").map_or_else(|| PathBuf::from("node"), PathBuf::from);
    let version = probe(&node, &["--version"])?;
    Ok((node, version))
}

/// A python with the `mcp` package: `$MCP_STDIO_PYTHON`, else
/// `<interop dir>/venv/bin/python`; with the installed `mcp` version.
///
/// # Errors
/// Why it cannot run or lacks `mcp`.
pub fn python() -> Result<(PathBuf, String), String> {
    let python = std::env::var_os("MCP_STDIO_PYTHON")
        .map_or_else(|| interop_dir().join("venv/bin/python"), PathBuf::from);
    let version = probe(
        &python,
        &[
            "-c",
            "import importlib.metadata as m; print(m.version('mcp'))",
        ],
    )?;
    Ok((python, version))
}

/// Runs `program args` and returns its trimmed stdout, or why it failed.
fn probe(program: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} {args:?} failed ({}): {}",
            program.display(),
            out.status,
            // The last line says what went wrong (a traceback ends with it).
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or_default()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Unwraps a peer lookup; when the peer is absent, panics with the command
/// that installs it, or, with [`SKIP_ENV`] set, prints a [`SKIP_PREFIX`] line
/// on stderr and returns `None` (the test then returns without running).
///
/// # Panics
/// When the peer is absent and [`SKIP_ENV`] is not set.
pub fn require<T>(test: &str, found: Result<T, String>) -> Option<T> {
    let why = match found {
        Ok(t) => return Some(t),
        Err(why) => why,
    };
    assert!(
        skip_allowed(),
        "{test}: interop peer missing: {why}. Install the peers with `{SETUP_COMMAND}` \
         (from the workspace root; about 20 s), or set {SKIP_ENV}=1 to skip the interop tests"
    );
    // Straight to the stderr handle, not `eprintln!`: the test harness captures the
    // latter for passing tests, and a skip must show in the run's output to be counted.
    let line = format!("{SKIP_PREFIX}{test}: {why}; install with `{SETUP_COMMAND}`\n");
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    None
}

/// The server-everything command (`node <entry> stdio`), or `None` when skipped.
pub(crate) fn server_everything(test: &str) -> Option<CommandSpec> {
    let (node, node_version) = require(test, node())?;
    let entry = require(test, server_everything_entry())?;
    eprintln!("{test}: node {node_version}, {}", entry.display());
    let mut spec = CommandSpec::new(node);
    spec.arg(entry).arg("stdio");
    Some(spec)
}

/// The Python `mcp` server command (`python py_server.py`), or `None` when skipped.
fn python_server(test: &str) -> Option<CommandSpec> {
    let (python, mcp_version) = require(test, python())?;
    eprintln!("{test}: {} with mcp {mcp_version}", python.display());
    let mut spec = CommandSpec::new(python);
    spec.arg(scripts_dir().join("py_server.py"));
    Some(spec)
}

/// Client options: the given wire limit, graces of 2 s (a peer that ignores
/// stdin EOF is terminated quickly).
#[must_use]
pub fn peer_options(max_frame: usize) -> ClientOptions {
    let mut options = ClientOptions::default();
    options.framer_mut().max_frame(max_frame);
    options
        .supervisor_mut()
        .stdin_close_grace(Duration::from_secs(2))
        .term_grace(Duration::from_secs(2))
        .reader_drain_deadline(Duration::from_secs(2));
    options
}

fn raw(v: &Value) -> Option<Box<RawValue>> {
    Some(to_raw(v).expect("a serde_json::Value always serializes"))
}

fn parse(r: &RawResult) -> Value {
    serde_json::from_str(r.get()).expect("a result is JSON")
}

/// The text of the first content block of a `tools/call` result.
fn first_text(result: &RawResult) -> String {
    let v = parse(result);
    assert_ne!(
        v["isError"],
        json!(true),
        "tool error: {:.300}",
        result.get()
    );
    v["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content in {:.300}", result.get()))
        .to_owned()
}

/// A started session with a peer and what it told us.
struct PeerSession<C: SuiteClient + ?Sized> {
    client: Box<C>,
    pid: u32,
    /// `tools/list`: name → tool object.
    tools: BTreeMap<String, Value>,
    /// The echo tool's argument name and the prefix it puts before the text.
    echo_arg: String,
    echo_prefix: String,
    /// Server→client messages seen so far, by method.
    incoming: BTreeMap<String, u64>,
}

/// Spawns `command` with adapter `A`, runs the handshake and `tools/list`,
/// and learns how `echo` answers from a short call.
fn start_peer<A: Adapter>(
    test: &str,
    command: &CommandSpec,
    options: ClientOptions,
) -> PeerSession<A::Client> {
    let t = Instant::now();
    let client = A::spawn(command, options)
        .unwrap_or_else(|e| panic!("{test} [{}]: spawning {}: {e}", A::NAME, command.display()));
    let pid = client.pid();
    let init = client
        .initialize()
        .unwrap_or_else(|e| panic!("{test} [{}]: initialize: {e}", A::NAME));
    let init_took = t.elapsed();
    let list = client
        .request("tools/list", None, Some(Duration::from_secs(10)))
        .unwrap_or_else(|e| panic!("{test} [{}]: tools/list: {e}", A::NAME));
    let list = parse(&list);
    let tools: BTreeMap<String, Value> = list["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("tools/list result has no tools array: {list:.300}"))
        .iter()
        .map(|t| (t["name"].as_str().unwrap_or_default().to_owned(), t.clone()))
        .collect();
    let echo = tools
        .get("echo")
        .unwrap_or_else(|| panic!("{test}: no echo tool in {:?}", tools.keys()));
    // The echo tool's one required string argument (`message` in
    // server-everything, `text` in ours).
    let echo_arg = echo["inputSchema"]["required"][0]
        .as_str()
        .unwrap_or_else(|| panic!("echo has no required argument: {echo}"))
        .to_owned();
    let probe = "héllo \"wörld\"\n";
    let r = client
        .request(
            "tools/call",
            raw(&json!({"name": "echo", "arguments": {&echo_arg: probe}})),
            Some(Duration::from_secs(10)),
        )
        .unwrap_or_else(|e| panic!("{test} [{}]: short echo: {e}", A::NAME));
    let text = first_text(&r);
    let echo_prefix = text
        .strip_suffix(probe)
        .unwrap_or_else(|| panic!("echo of {probe:?} answered {text:?}"))
        .to_owned();
    eprintln!(
        "{test} [{}]: {} {} (protocol {}) pid {pid}: initialize in {init_took:?}, {} tools, echo({echo_arg}) prefix {echo_prefix:?}",
        A::NAME,
        init.server_info.as_ref().map_or("?", |i| i.name.as_str()),
        init.server_info.as_ref().map_or("?", |i| i.version.as_str()),
        init.protocol_version,
        tools.len()
    );
    let mut session = PeerSession {
        client: Box::new(client),
        pid,
        tools,
        echo_arg,
        echo_prefix,
        incoming: BTreeMap::new(),
    };
    session.drain_incoming();
    session
}

impl<C: SuiteClient + ?Sized> PeerSession<C> {
    /// Takes every server→client message waiting now; answers requests with
    /// "method not found" (we declare no client capabilities).
    fn drain_incoming(&mut self) {
        while let Some(m) = self.client.next_incoming(Duration::from_millis(10)) {
            let method = match m {
                SuiteIncoming::Notification(n) => n.method,
                SuiteIncoming::Request(r, respond) => {
                    respond(Err(mcp_stdio_core::ErrorObject::new(
                        mcp_stdio_core::METHOD_NOT_FOUND,
                        "not supported by this client",
                    )));
                    format!("request {}", r.method)
                }
            };
            *self.incoming.entry(method).or_default() += 1;
        }
    }

    /// `echo` of `text`; asserts it comes back exactly; returns the latency.
    fn echo(&self, text: &str, within: Duration) -> Duration {
        let t = Instant::now();
        let r = self
            .client
            .request(
                "tools/call",
                raw(&json!({"name": "echo", "arguments": {&self.echo_arg: text}})),
                Some(within),
            )
            .unwrap_or_else(|e| {
                panic!(
                    "echo of {} bytes failed after {:?}: {e}",
                    text.len(),
                    t.elapsed()
                )
            });
        let took = t.elapsed();
        let got = first_text(&r);
        let want_len = self.echo_prefix.len() + text.len();
        assert!(
            got.len() == want_len && got.starts_with(&self.echo_prefix) && got.ends_with(text),
            "echo of {} bytes came back different ({} bytes)",
            text.len(),
            got.len()
        );
        assert!(took < within, "echo took {took:?}");
        took
    }
}

/// Shuts the session down and checks the record is consistent (G11, G12):
/// an exit status was observed, the shutdown path agrees with the signals
/// sent, and no process of the server's group is left. A peer may exit on
/// stdin EOF or need `SIGTERM`; both are accepted, `SIGKILL` is not.
fn shutdown_checked<A: Adapter>(test: &str, session: PeerSession<A::Client>) -> SessionRecord {
    let PeerSession {
        client,
        pid,
        incoming,
        ..
    } = session;
    let t = Instant::now();
    let record = client.shutdown();
    let took = t.elapsed();
    let p = &record.process;
    eprintln!(
        "{test} [{}]: shutdown in {took:?}: ended_by {:?}, exit {:?}, stdin closed at {:?}, TERM at {:?}, exited at {:?}; incoming {incoming:?}; stdout {} bytes in {} frames",
        A::NAME,
        p.ended_by,
        p.exit_status,
        p.stdin_closed_at,
        p.term_sent_at,
        p.exited_at,
        record.metrics.stdout_bytes,
        record.metrics.frames,
    );
    let status = p
        .exit_status
        .unwrap_or_else(|| panic!("{test}: no exit status observed: {p:?}"));
    let exited = p.exited_at.expect("an observed exit has a time");
    let stdin_closed = p.stdin_closed_at.expect("shutdown closes stdin first");
    assert!(stdin_closed <= exited, "{p:?}");
    assert!(p.kill_sent_at.is_none(), "SIGKILL was needed: {p:?}");
    match p.ended_by {
        EndedBy::ExitedAfterStdinClose => {
            assert!(p.term_sent_at.is_none(), "{p:?}");
            assert_eq!(status, ExitStatus::Code(0), "{p:?}");
        }
        EndedBy::ExitedAfterTerm => {
            let term = p.term_sent_at.expect("TERM path has a TERM time");
            assert!(stdin_closed <= term && term <= exited, "{p:?}");
            assert!(
                matches!(status, ExitStatus::Signal(15) | ExitStatus::Code(_)),
                "{p:?}"
            );
        }
        other => panic!("{test}: unexpected shutdown path {other:?}: {p:?}"),
    }
    assert!(!pid_alive(pid), "server pid {pid} still alive");
    let left = wait_until(Duration::from_secs(2), Duration::from_millis(20), || {
        group_members(pid).is_empty()
    });
    assert!(
        left.is_some(),
        "processes of group {pid} left: {:?}",
        group_members(pid)
    );
    record
}

/// Starts a tool call, waits `after`, cancels it, and asserts the call ended
/// `Cancelled` with `notifications/cancelled` sent; returns the cancel→end latency.
fn start_and_cancel<C: SuiteClient + ?Sized>(
    client: &C,
    params: Value,
    after: Duration,
) -> Duration {
    let pending = client
        .start("tools/call", raw(&params), Some(Duration::from_secs(60)))
        .expect("sent");
    std::thread::sleep(after);
    let t = Instant::now();
    pending.cancel("interop test: user pressed stop");
    let r = pending.wait();
    let took = t.elapsed();
    assert!(
        matches!(
            r,
            Err(RequestError::Failed(RequestFailure::Cancelled {
                cancel_sent: true
            }))
        ),
        "expected Cancelled with a cancel sent, got {r:?}"
    );
    took
}

// ---------------------------------------------------------------------------
// Our Client against @modelcontextprotocol/server-everything
// ---------------------------------------------------------------------------

/// Interop with server-everything: handshake (notifications it sends before
/// its initialize answer are accepted), `tools/list`, a 1 MiB `echo` that
/// round-trips byte for byte, a clean shutdown record.
pub fn interop_everything_handshake_tools_list_and_1_mib_echo<A: Adapter>() {
    const TEST: &str = "interop_everything_handshake_tools_list_and_1_mib_echo";
    let Some(cmd) = server_everything(TEST) else {
        return;
    };
    let mut s = start_peer::<A>(TEST, &cmd, peer_options(4 << 20));
    let text = huge_field_text(1 << 20);
    let took = s.echo(&text, Duration::from_secs(30));
    s.drain_incoming();
    eprintln!("{TEST} [{}]: 1 MiB echo round trip {took:?}", A::NAME);
    let record = shutdown_checked::<A>(TEST, s);
    assert!(record.metrics.largest_frame >= 1 << 20);
}

/// G8 with server-everything: its long-running operation, cancelled after
/// about a second, ends `Cancelled` at once; an `echo` then completes promptly.
pub fn g8_everything_cancel_long_running_then_echo_promptly<A: Adapter>() {
    const TEST: &str = "g8_everything_cancel_long_running_then_echo_promptly";
    let Some(cmd) = server_everything(TEST) else {
        return;
    };
    let mut s = start_peer::<A>(TEST, &cmd, peer_options(4 << 20));
    // `trigger-long-running-operation` in recent versions, `longRunningOperation` before.
    let long = ["trigger-long-running-operation", "longRunningOperation"]
        .into_iter()
        .find(|n| s.tools.contains_key(*n))
        .unwrap_or_else(|| panic!("no long-running tool in {:?}", s.tools.keys()));
    let cancel_took = start_and_cancel(
        &*s.client,
        json!({
            "name": long,
            "arguments": {"duration": 10, "steps": 10},
            "_meta": {"progressToken": "interop-long"},
        }),
        Duration::from_millis(1200),
    );
    let echo_took = s.echo("after cancel", Duration::from_secs(5));
    s.drain_incoming();
    eprintln!(
        "{TEST} [{}]: {long} cancelled in {cancel_took:?}; echo after cancel {echo_took:?}",
        A::NAME
    );
    let record = shutdown_checked::<A>(TEST, s);
    assert_eq!(record.metrics.cancels_sent, 1);
}

// ---------------------------------------------------------------------------
// Our Client against a server made with the Python `mcp` package
// ---------------------------------------------------------------------------

/// Interop with a Python `mcp` server: handshake, `tools/list`, a 1 MiB
/// `echo` round-trips exactly, a clean shutdown record.
pub fn interop_python_server_handshake_tools_list_and_1_mib_echo<A: Adapter>() {
    const TEST: &str = "interop_python_server_handshake_tools_list_and_1_mib_echo";
    let Some(cmd) = python_server(TEST) else {
        return;
    };
    let mut s = start_peer::<A>(TEST, &cmd, peer_options(4 << 20));
    for tool in ["echo", "slow", "big"] {
        assert!(
            s.tools.contains_key(tool),
            "{tool} missing: {:?}",
            s.tools.keys()
        );
    }
    let text = huge_field_text(1 << 20);
    let took = s.echo(&text, Duration::from_secs(30));
    s.drain_incoming();
    eprintln!("{TEST} [{}]: 1 MiB echo round trip {took:?}", A::NAME);
    let record = shutdown_checked::<A>(TEST, s);
    assert!(record.metrics.largest_frame >= 1 << 20);
}

/// G7/G8 with a Python `mcp` server: `slow` cancelled after about a second
/// ends `Cancelled` at once, the server's handler sees the cancel (it logs
/// `slow cancelled` to stderr), and an `echo` then completes promptly.
pub fn g8_python_server_cancel_slow_then_echo_promptly<A: Adapter>() {
    const TEST: &str = "g8_python_server_cancel_slow_then_echo_promptly";
    let Some(cmd) = python_server(TEST) else {
        return;
    };
    let s = start_peer::<A>(TEST, &cmd, peer_options(4 << 20));
    let cancel_took = start_and_cancel(
        &*s.client,
        json!({"name": "slow", "arguments": {"seconds": 30}}),
        Duration::from_secs(1),
    );
    let echo_took = s.echo("after cancel", Duration::from_secs(5));
    eprintln!(
        "{TEST} [{}]: slow cancelled in {cancel_took:?}; echo after cancel {echo_took:?}",
        A::NAME
    );
    let record = shutdown_checked::<A>(TEST, s);
    assert_eq!(record.metrics.cancels_sent, 1);
    assert!(
        record.stderr_tail.contains("slow cancelled after"),
        "the Python server did not see the cancel; its stderr:\n{}",
        record.stderr_tail
    );
}

/// G1/G2/G3 with a Python `mcp` server and a 256 KiB wire limit: a 200 KiB
/// result passes; a 1 MiB one fails at once with `ResponseTooLarge` (its id
/// is recovered from the prefix of the peer's own serialization, so it does
/// not wait for the timeout); an `echo` then completes.
pub fn g3_python_server_oversized_response_fails_at_once_then_echo<A: Adapter>() {
    const TEST: &str = "g3_python_server_oversized_response_fails_at_once_then_echo";
    let limit = 256 * 1024;
    let Some(cmd) = python_server(TEST) else {
        return;
    };
    let s = start_peer::<A>(TEST, &cmd, peer_options(limit));
    let big = |bytes: usize| {
        s.client.request(
            "tools/call",
            raw(&json!({"name": "big", "arguments": {"bytes": bytes}})),
            Some(Duration::from_secs(30)),
        )
    };
    let r = big(200 * 1024).expect("200 KiB under a 256 KiB limit");
    assert_eq!(first_text(&r).len(), 200 * 1024);
    let t = Instant::now();
    let r = big(1 << 20);
    let failed_in = t.elapsed();
    match r {
        Err(RequestError::Failed(RequestFailure::ResponseTooLarge { limit: l, .. })) => {
            assert_eq!(l, limit);
        }
        other => panic!(
            "expected ResponseTooLarge, got {:?}",
            other.map(|v| v.get().len())
        ),
    }
    assert!(failed_in < Duration::from_secs(10), "took {failed_in:?}");
    let echo_took = s.echo("after oversized", Duration::from_secs(5));
    let m = s.client.metrics().expect("live session");
    assert_eq!(m.oversized_frames, 1);
    eprintln!(
        "{TEST} [{}]: 1 MiB over a 256 KiB limit failed in {failed_in:?} ({} bytes discarded); echo after {echo_took:?}",
        A::NAME,
        m.oversized_bytes_discarded
    );
    shutdown_checked::<A>(TEST, s);
}

// ---------------------------------------------------------------------------
// Our serve driven by the Python `mcp` package's stdio client
// ---------------------------------------------------------------------------

/// What a finished script run gave.
struct ScriptRun {
    status: std::process::ExitStatus,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// Runs `program args` in its own process group with a deadline; the group is
/// SIGKILLed if it overruns (or the test panics).
fn run_with_deadline(program: &Path, args: &[&std::ffi::OsStr], deadline: Duration) -> ScriptRun {
    let t = Instant::now();
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {}: {e}", program.display()));
    let mut guard = ProcessGroupGuard::new(child);
    let read_all = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = read_all(Box::new(guard.child().stdout.take().expect("piped")));
    let err = read_all(Box::new(guard.child().stderr.take().expect("piped")));
    let mut status = None;
    wait_until(deadline, Duration::from_millis(20), || {
        status = guard.child().try_wait().expect("try_wait");
        status.is_some()
    });
    let Some(status) = status else {
        guard.kill_all();
        let stderr = err.join().unwrap_or_default();
        panic!(
            "{} did not finish within {deadline:?}; stderr:\n{stderr}",
            program.display()
        );
    };
    ScriptRun {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
        took: t.elapsed(),
    }
}

/// G7/G8/G11/G13 with the Python `mcp` package's stdio client driving our
/// `serve` (`serve_bin`, one binary per adapter): initialize (the protocol
/// version is negotiated), tools/list, echo (short and 1 MiB), `slow`
/// cancelled by cancelling its anyio scope (the SDK sends
/// `notifications/cancelled`) — our handler's cancel token fires (the server
/// logs `cancelled ID` for the very id that started `slow`) — then echo
/// completes promptly; on stdin EOF our server exits by itself, leaving no
/// process, and the SDK never saw a non-protocol stdout line.
///
/// The serve binary of every adapter must behave like `serve-tokio`
/// (`tests/src/bin/serve-tokio.rs`): the same tools, a `serverInfo.name`
/// starting with `mcp-stdio-serve`, and the same stderr lines (`pid N serving`,
/// `slow ID started`, `cancelled ID after …`, `stdin closed; exiting`).
pub fn g7_python_sdk_client_cancel_reaches_our_serve_handler<A: Adapter>(serve_bin: &Path) {
    const TEST: &str = "g7_python_sdk_client_cancel_reaches_our_serve_handler";
    let Some((python, mcp_version)) = require(TEST, python()) else {
        return;
    };
    assert!(
        serve_bin.is_file(),
        "serve binary {} missing",
        serve_bin.display()
    );
    let stderr_file = crate::TempPath::new(&format!("interop-{}-serve.stderr", A::NAME));
    let script = scripts_dir().join("py_client.py");
    let run = run_with_deadline(
        &python,
        &[
            script.as_os_str(),
            "--server-stderr".as_ref(),
            stderr_file.as_os_str(),
            "--cancel-after".as_ref(),
            "1.0".as_ref(),
            "--".as_ref(),
            serve_bin.as_os_str(),
        ],
        Duration::from_secs(90),
    );
    let server_stderr = std::fs::read_to_string(&stderr_file).unwrap_or_default();
    let context = format!(
        "python client exit {:?} after {:?}\n--- client stderr:\n{}\n--- server stderr:\n{server_stderr}",
        run.status, run.took, run.stderr
    );
    let summary_line = run
        .stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON summary on stdout ({:?})\n{context}", run.stdout));
    let summary: Value = serde_json::from_str(summary_line)
        .unwrap_or_else(|e| panic!("bad summary {summary_line:?}: {e}\n{context}"));
    eprintln!(
        "{TEST} [{}]: mcp {mcp_version}, client took {:?}; summary {summary}",
        A::NAME,
        run.took
    );
    assert!(
        run.status.success() && summary["ok"] == json!(true),
        "{summary}\n{context}"
    );
    assert!(
        summary["server_name"]
            .as_str()
            .is_some_and(|n| n.starts_with("mcp-stdio-serve")),
        "{summary}"
    );
    // `serve` answered initialize itself: the SDK's version when we speak it,
    // else our latest, and the instructions of the binary's options.
    let requested = summary["requested_version"].as_str().unwrap_or_default();
    assert_eq!(
        summary["protocol_version"],
        json!(mcp_stdio_core::negotiate_version(requested)),
        "{summary}"
    );
    assert_eq!(
        summary["instructions"],
        json!(crate::serve_tools::INSTRUCTIONS),
        "{summary}"
    );
    assert_eq!(summary["slow_outcome"], json!("cancelled"), "{summary}");
    let echo_ms = summary["echo_after_cancel_ms"].as_f64().expect("timed");
    assert!(echo_ms < 5000.0, "echo after cancel took {echo_ms} ms");

    // Our handler's token fired for the id that started `slow`.
    let field = |prefix: &str| -> Option<String> {
        server_stderr.lines().find_map(|l| {
            let rest = l.split_once(prefix)?.1;
            Some(rest.split_whitespace().next()?.to_owned())
        })
    };
    let slow_id = field(" slow ").unwrap_or_else(|| panic!("no `slow ID started` line\n{context}"));
    let cancelled_id =
        field(" cancelled ").unwrap_or_else(|| panic!("no `cancelled ID` line\n{context}"));
    assert_eq!(slow_id, cancelled_id, "{context}");
    // Our server exited on stdin EOF by itself (the SDK would SIGTERM it after 2 s).
    assert!(
        server_stderr.contains("stdin closed; exiting"),
        "our serve did not exit on stdin EOF\n{context}"
    );
    // G13: the SDK would log a parse failure for any non-protocol stdout line.
    assert!(!run.stderr.contains("Failed to parse JSONRPC"), "{context}");
    let pid: u32 = field(" pid ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no `pid N` line\n{context}"));
    let gone = wait_until(Duration::from_secs(5), Duration::from_millis(20), || {
        !pid_alive(pid) && group_members(pid).is_empty()
    });
    assert!(gone.is_some(), "serve pid {pid} or its group still alive");
    eprintln!(
        "{TEST} [{}]: server cancelled id {cancelled_id}; echo after cancel {echo_ms} ms; session close {} ms",
        A::NAME,
        summary["session_close_ms"]
    );
}

/// Instantiates every interop test for one adapter type; `$serve_bin` names
/// that adapter's `serve` binary in this package (`"serve-tokio"`), found
/// through Cargo's `CARGO_BIN_EXE_<name>`.
#[macro_export]
macro_rules! interop_suite {
    ($adapter:ty, $serve_bin:literal) => {
        $crate::interop_suite!(@each $adapter;
            interop_everything_handshake_tools_list_and_1_mib_echo,
            g8_everything_cancel_long_running_then_echo_promptly,
            interop_python_server_handshake_tools_list_and_1_mib_echo,
            g8_python_server_cancel_slow_then_echo_promptly,
            g3_python_server_oversized_response_fails_at_once_then_echo,
        );

        #[test]
        fn g7_python_sdk_client_cancel_reaches_our_serve_handler() {
            $crate::interop::g7_python_sdk_client_cancel_reaches_our_serve_handler::<$adapter>(
                ::std::path::Path::new(env!(concat!("CARGO_BIN_EXE_", $serve_bin))),
            );
        }
    };
    (@each $adapter:ty; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                $crate::interop::$name::<$adapter>();
            }
        )*
    };
}
