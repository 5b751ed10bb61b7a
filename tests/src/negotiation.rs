//! Protocol negotiation through each adapter's `Client`, against real
//! processes, instantiated per adapter with
//! [`negotiation_suite!`](crate::negotiation_suite)
//! (`tests/tests/negotiation_<adapter>.rs`):
//!
//! - the rmcp example server of `mcp-stdio-rmcp` (`rmcp_server`, a 2026-07-28
//!   server; `--modern-only` offers that revision alone and refuses requests
//!   without the `_meta` it requires, -32602): found next to this test's
//!   binary in `target/<profile>/examples` (`cargo test --workspace` builds
//!   it; else `cargo build -p mcp-stdio-rmcp --examples`), or at
//!   `$MCP_STDIO_RMCP_SERVER`. Absent, it fails the test, or skips it like
//!   an interop peer with `MCP_STDIO_SKIP_INTEROP=1` ([`crate::interop::require`]);
//! - server-everything (2025-11-25 only: -32601 to `server/discover`), an
//!   interop peer ([`crate::interop`]);
//! - the fixture server, with `--modern` (2026-07-28 only, `_meta` required
//!   on every request) and without.
//!
//! Bounds are generous (seconds); each test prints what it measured.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use mcp_stdio_core::{
    ClientOptions, CommandSpec, FallbackReason, InitializeError, Negotiated, NegotiatedVia,
    RequestError, RequestFailure, SessionRecord, VersionPolicy, METHOD_NOT_FOUND,
    UNSUPPORTED_PROTOCOL_VERSION,
};
use serde_json::{json, Value};

use crate::adapter::{Adapter, SuiteClient, SuiteIncoming};
use crate::interop::{peer_options, require, server_everything};
use crate::suite::{first_text, fixture_server, metrics, options, spawn, tool, LeakCheck};

const MODERN: &str = "2026-07-28";
/// Generous: these are milliseconds when things go well.
const PROMPT: Duration = Duration::from_secs(10);

/// The rmcp example server: `$MCP_STDIO_RMCP_SERVER`, else
/// `target/<profile>/examples/rmcp_server` beside this test's binary.
///
/// # Errors
/// Why it is not there, and what builds it.
pub fn rmcp_example_server() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("MCP_STDIO_RMCP_SERVER") {
        return Ok(PathBuf::from(p));
    }
    // Test binaries live in `target/<profile>/deps`; examples in `target/<profile>/examples`.
    let exe = std::env::current_exe().map_err(|e| format!("the test's own path: {e}"))?;
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .ok_or("no target/<profile> above the test binary")?
        .join("examples/rmcp_server");
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "the rmcp example server is not at {} (build it with `cargo build -p mcp-stdio-rmcp --examples`)",
            path.display()
        ))
    }
}

/// The rmcp example server with `args`, or `None` when skipped.
fn rmcp_server(test: &str, args: &[&str]) -> Option<CommandSpec> {
    let path = require(test, rmcp_example_server())?;
    let mut spec = CommandSpec::new(path);
    spec.args(args);
    Some(spec)
}

fn pinned(version: &str) -> ClientOptions {
    let mut o = peer_options(1 << 20);
    o.version_policy(VersionPolicy::Pin(version.to_owned()));
    o
}

fn spawn_peer<A: Adapter>(test: &str, command: &CommandSpec, options: ClientOptions) -> A::Client {
    A::spawn(command, options)
        .unwrap_or_else(|e| panic!("{test} [{}]: spawning {}: {e}", A::NAME, command.display()))
}

fn negotiate<A: Adapter>(test: &str, client: &A::Client) -> (Negotiated, Duration) {
    let t = Instant::now();
    let n = client
        .initialize()
        .unwrap_or_else(|e| panic!("{test} [{}]: initialize: {e}", A::NAME));
    (n, t.elapsed())
}

fn parse(r: &mcp_stdio_core::RawResult) -> Value {
    serde_json::from_str(r.get()).expect("a result is JSON")
}

/// `tools/list` (has `echo`), then `echo` of a text with quotes and
/// non-ASCII through both request paths (`request` and `start`); `arg` is
/// the echo tool's argument name; the result's text ends with the text.
fn list_and_echo<C: SuiteClient + ?Sized>(test: &str, client: &C, arg: &str) {
    let list = client
        .request("tools/list", None, Some(PROMPT))
        .unwrap_or_else(|e| panic!("{test}: tools/list: {e}"));
    let list = parse(&list);
    let names: Vec<&str> = list["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{test}: no tools array in {list:.300}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"echo"), "{test}: tools {names:?}");
    let text = "héllo \"wörld\"";
    let r = client
        .request(
            "tools/call",
            tool("echo", json!({ arg: text })),
            Some(PROMPT),
        )
        .unwrap_or_else(|e| panic!("{test}: echo: {e}"));
    assert!(first_text(&r).ends_with(text), "{test}: {}", r.get());
    let pending = client
        .start(
            "tools/call",
            tool("echo", json!({ arg: "again" })),
            Some(PROMPT),
        )
        .unwrap_or_else(|e| panic!("{test}: echo started: {e}"));
    let r = pending
        .wait()
        .unwrap_or_else(|e| panic!("{test}: echo awaited: {e}"));
    assert!(first_text(&r).ends_with("again"), "{test}: {}", r.get());
}

/// Graceful shutdown: an exit observed, no `SIGKILL` needed.
fn close<C: SuiteClient + ?Sized>(test: &str, client: Box<C>) -> SessionRecord {
    let record = client.shutdown();
    let p = &record.process;
    assert!(p.exit_status.is_some(), "{test}: no exit observed: {p:?}");
    assert!(
        p.kill_sent_at.is_none(),
        "{test}: SIGKILL was needed: {p:?}"
    );
    record
}

fn server_error_code(e: &InitializeError) -> Option<i64> {
    match e {
        InitializeError::Request(r) => r.server_error().map(|e| e.code),
        _ => None,
    }
}

/// A 2026-07-28 server (rmcp, `--modern-only`): `server/discover` settles
/// 2026-07-28 without a handshake, and every request after it carries the
/// `_meta` the server requires (it refuses a request without it, -32602: the
/// one sent before `initialize` shows the server checks).
pub fn modern_rmcp_server_session_on_2026_07_28<A: Adapter>() {
    const TEST: &str = "modern_rmcp_server_session_on_2026_07_28";
    let Some(cmd) = rmcp_server(TEST, &["--modern-only"]) else {
        return;
    };
    let client = spawn_peer::<A>(TEST, &cmd, peer_options(1 << 20));
    let unstamped = client.request("tools/list", None, Some(PROMPT));
    assert_eq!(
        unstamped
            .as_ref()
            .err()
            .and_then(RequestError::server_error)
            .map(|e| e.code),
        Some(-32602),
        "{TEST}: a request without _meta before negotiation: {unstamped:?}"
    );
    let (n, took) = negotiate::<A>(TEST, &client);
    assert_eq!(n.protocol_version, MODERN, "{n:?}");
    assert_eq!(n.via, NegotiatedVia::Discover);
    assert_eq!(n.fallback, None);
    assert_eq!(n.supported_versions, Some(vec![MODERN.to_owned()]));
    let info = n.server_info.as_ref().expect("the example names itself");
    assert_eq!(info.name, "mcp-stdio-rmcp-example");
    list_and_echo(TEST, &client, "text");
    let m = metrics(&client);
    assert_eq!(m.server_requests_refused, 0);
    let record = close(TEST, Box::new(client));
    eprintln!(
        "{TEST} [{}]: negotiated {} via {:?} in {took:?}; {} requests, {} responses",
        A::NAME,
        n.protocol_version,
        n.via,
        record.metrics.requests_sent,
        record.metrics.responses
    );
}

/// A server offering both revisions (rmcp without flags): the automatic
/// policy takes the newest, 2026-07-28.
pub fn auto_takes_2026_07_28_from_a_server_offering_both<A: Adapter>() {
    const TEST: &str = "auto_takes_2026_07_28_from_a_server_offering_both";
    let Some(cmd) = rmcp_server(TEST, &[]) else {
        return;
    };
    let client = spawn_peer::<A>(TEST, &cmd, peer_options(1 << 20));
    let (n, _) = negotiate::<A>(TEST, &client);
    assert_eq!(
        (n.protocol_version.as_str(), n.via),
        (MODERN, NegotiatedVia::Discover)
    );
    let offered = n.supported_versions.clone().unwrap_or_default();
    assert!(offered.iter().any(|v| v == "2025-11-25"), "{offered:?}");
    list_and_echo(TEST, &client, "text");
    close(TEST, Box::new(client));
}

/// A 2025-11-25 server (server-everything, TypeScript SDK): the probe is
/// refused -32601 and the client falls back to `initialize`.
pub fn legacy_everything_negotiates_2025_11_25_by_fallback<A: Adapter>() {
    const TEST: &str = "legacy_everything_negotiates_2025_11_25_by_fallback";
    let Some(cmd) = server_everything(TEST) else {
        return;
    };
    let client = spawn_peer::<A>(TEST, &cmd, peer_options(1 << 20));
    let (n, took) = negotiate::<A>(TEST, &client);
    assert_eq!(n.protocol_version, "2025-11-25", "{n:?}");
    assert_eq!(n.via, NegotiatedVia::Initialize);
    assert!(
        matches!(&n.fallback, Some(FallbackReason::ProbeRejected(e)) if e.code == METHOD_NOT_FOUND),
        "{:?}",
        n.fallback
    );
    assert!(n.server_info.is_some());
    list_and_echo(TEST, &client, "message");
    let record = close(TEST, Box::new(client));
    eprintln!(
        "{TEST} [{}]: negotiated {} via {:?} in {took:?} after {:?}; {} requests",
        A::NAME,
        n.protocol_version,
        n.via,
        n.fallback,
        record.metrics.requests_sent
    );
}

/// A client pinned to 2026-07-28 sends `server/discover` only: it connects
/// to the 2026-07-28 server and fails against the 2025-11-25 one (-32601,
/// no fallback).
pub fn pinned_modern_client_against_each_server<A: Adapter>() {
    const TEST: &str = "pinned_modern_client_against_each_server";
    let (Some(modern), Some(legacy)) = (
        rmcp_server(TEST, &["--modern-only"]),
        server_everything(TEST),
    ) else {
        return;
    };
    let client = spawn_peer::<A>(TEST, &modern, pinned(MODERN));
    let (n, _) = negotiate::<A>(TEST, &client);
    assert_eq!(
        (n.protocol_version.as_str(), n.via),
        (MODERN, NegotiatedVia::Discover)
    );
    assert_eq!(n.fallback, None);
    list_and_echo(TEST, &client, "text");
    close(TEST, Box::new(client));

    let client = spawn_peer::<A>(TEST, &legacy, pinned(MODERN));
    let e = client.initialize().expect_err("a 2025-11-25 server");
    assert_eq!(server_error_code(&e), Some(METHOD_NOT_FOUND), "{e:?}");
    let m = metrics(&client);
    assert_eq!(m.requests_sent, 1, "the pin sent server/discover alone");
    close(TEST, Box::new(client));
}

/// A client pinned to 2025-11-25 sends `initialize` only: it connects to
/// server-everything without a probe and is refused by the 2026-07-28-only
/// server (-32022).
pub fn pinned_handshake_client_against_each_server<A: Adapter>() {
    const TEST: &str = "pinned_handshake_client_against_each_server";
    let (Some(modern), Some(legacy)) = (
        rmcp_server(TEST, &["--modern-only"]),
        server_everything(TEST),
    ) else {
        return;
    };
    let client = spawn_peer::<A>(TEST, &legacy, pinned("2025-11-25"));
    let (n, _) = negotiate::<A>(TEST, &client);
    assert_eq!(
        (n.protocol_version.as_str(), n.via),
        ("2025-11-25", NegotiatedVia::Initialize)
    );
    assert_eq!(n.fallback, None, "no probe was sent");
    list_and_echo(TEST, &client, "message");
    close(TEST, Box::new(client));

    let client = spawn_peer::<A>(TEST, &modern, pinned("2025-11-25"));
    let e = client.initialize().expect_err("a 2026-07-28-only server");
    assert_eq!(
        server_error_code(&e),
        Some(UNSUPPORTED_PROTOCOL_VERSION),
        "{e:?}"
    );
    // The example exits once it refused: its record has the counters.
    let record = close(TEST, Box::new(client));
    assert_eq!(record.metrics.requests_sent, 1, "initialize alone");
}

/// Our fixture with `--modern`: both request paths are stamped (the fixture
/// refuses a request without `_meta`), the caller's own `_meta`
/// (`progressToken`) survives the stamp, and a request from the server is
/// refused -32601 and counted, never delivered to the application.
pub fn modern_session_stamps_requests_and_refuses_server_requests<A: Adapter>() {
    let mut leaks = LeakCheck::new::<A>("modern_stamps");
    let client = spawn::<A>(&mut leaks, fixture_server(&["--modern"]), options(1 << 20));
    let n = client
        .initialize()
        .unwrap_or_else(|e| panic!("{}: initialize: {e}", A::NAME));
    assert_eq!(
        (n.protocol_version.as_str(), n.via),
        (MODERN, NegotiatedVia::Discover)
    );
    list_and_echo("modern_stamps", &*client, "text");
    // The caller's `_meta` kept beside the stamp: the fixture sends progress for its token.
    let params = json!({"name": "progress", "arguments": {"chunks": 3, "delay_ms": 1},
        "_meta": {"progressToken": "mine"}});
    let params = mcp_stdio_core::to_raw(&params).expect("JSON");
    client
        .request("tools/call", Some(params), Some(PROMPT))
        .unwrap_or_else(|e| panic!("{}: progress: {e}", A::NAME));
    // The server asks the client something: refused at once by the session.
    let r = client
        .request(
            "tools/call",
            tool("server_request", json!({})),
            Some(PROMPT),
        )
        .unwrap_or_else(|e| panic!("{}: server_request: {e}", A::NAME));
    let answer = first_text(&r);
    assert!(answer.contains("-32601"), "the server got {answer}");
    let mut progress = 0;
    while let Some(m) = client.next_incoming(Duration::from_millis(200)) {
        match m {
            SuiteIncoming::Request(r, _) => panic!("{}: delivered {r:?}", A::NAME),
            SuiteIncoming::Notification(n) => {
                let p = n
                    .params
                    .as_ref()
                    .map(|p| p.get().to_owned())
                    .unwrap_or_default();
                progress +=
                    usize::from(n.method == "notifications/progress" && p.contains("\"mine\""));
            }
        }
    }
    assert_eq!(progress, 3, "progress notifications for the caller's token");
    let m = metrics(&*client);
    assert_eq!((m.server_requests, m.server_requests_refused), (1, 1));
    let (record, _) = crate::suite::shutdown_within::<A>(client, crate::suite::LONG);
    let missing = record.stderr_tail.matches("missing _meta").count();
    assert_eq!(
        missing, 0,
        "a request went out unstamped:\n{}",
        record.stderr_tail
    );
    leaks.assert_none_left();
}

/// A server that never answers unknown methods still connects: the probe
/// times out (bounded by `discover_timeout`), is not cancelled (the spec
/// forbids cancelling the handshake), and `initialize` follows.
pub fn probe_timeout_falls_back_to_initialize_without_a_cancel<A: Adapter>() {
    let mut leaks = LeakCheck::new::<A>("probe_timeout");
    let mut o = options(1 << 20);
    let probe = Duration::from_secs(1);
    o.discover_timeout(probe);
    let client = spawn::<A>(&mut leaks, fixture_server(&["--ignore-unknown"]), o);
    let t = Instant::now();
    let n = client
        .initialize()
        .unwrap_or_else(|e| panic!("{}: initialize: {e}", A::NAME));
    let took = t.elapsed();
    assert_eq!(n.via, NegotiatedVia::Initialize, "{n:?}");
    assert_eq!(n.fallback, Some(FallbackReason::ProbeTimedOut(probe)));
    assert!(took >= probe && took < Duration::from_secs(6), "{took:?}");
    crate::suite::ping_within(&*client, PROMPT);
    let m = metrics(&*client);
    assert_eq!(
        (m.timeouts, m.cancels_sent),
        (1, 0),
        "server/discover was cancelled"
    );
    let (record, _) = crate::suite::shutdown_within::<A>(client, crate::suite::LONG);
    assert!(
        !record.stderr_tail.contains("cancel"),
        "{}",
        record.stderr_tail
    );
    eprintln!(
        "{}: connected after a {probe:?} probe timeout in {took:?}",
        A::NAME
    );
    leaks.assert_none_left();
}

/// A request's timeout is a hard maximum: progress notifications for it
/// (every 50 ms) do not extend it. The request times out at its deadline,
/// and the notifications did arrive meanwhile.
pub fn timeout_is_a_hard_maximum_while_progress_arrives<A: Adapter>() {
    let mut leaks = LeakCheck::new::<A>("timeout_progress");
    let client = spawn::<A>(&mut leaks, fixture_server(&[]), options(1 << 20));
    client
        .initialize()
        .unwrap_or_else(|e| panic!("{}: initialize: {e}", A::NAME));
    let params = json!({"name": "progress", "arguments": {"chunks": 400, "delay_ms": 50},
        "_meta": {"progressToken": "p"}});
    let params = mcp_stdio_core::to_raw(&params).expect("JSON");
    let timeout = Duration::from_secs(1);
    let t = Instant::now();
    let r = client.request("tools/call", Some(params), Some(timeout));
    let took = t.elapsed();
    assert!(
        matches!(
            r,
            Err(RequestError::Failed(RequestFailure::TimedOut { .. }))
        ),
        "{r:?}"
    );
    // At its deadline, not later: the tool would run 20 s.
    assert!(took >= timeout && took < Duration::from_secs(5), "{took:?}");
    let mut progress = 0;
    while let Some(m) = client.next_incoming(Duration::from_millis(100)) {
        if let SuiteIncoming::Notification(n) = m {
            progress += usize::from(n.method == "notifications/progress");
        }
    }
    assert!(
        progress >= 5,
        "only {progress} progress notifications arrived"
    );
    eprintln!(
        "{}: timed out after {took:?} (timeout {timeout:?}) with {progress} progress notifications",
        A::NAME
    );
    let (record, _) = crate::suite::shutdown_within::<A>(client, crate::suite::LONG);
    assert!(
        record.metrics.cancels_sent >= 1,
        "the timeout sent a cancel"
    );
    leaks.assert_none_left();
}

/// Instantiates every negotiation test for one adapter type.
#[macro_export]
macro_rules! negotiation_suite {
    ($adapter:ty) => {
        $crate::negotiation_suite!(@each $adapter;
            modern_rmcp_server_session_on_2026_07_28,
            auto_takes_2026_07_28_from_a_server_offering_both,
            legacy_everything_negotiates_2025_11_25_by_fallback,
            pinned_modern_client_against_each_server,
            pinned_handshake_client_against_each_server,
            modern_session_stamps_requests_and_refuses_server_requests,
            timeout_is_a_hard_maximum_while_progress_arrives,
            probe_timeout_falls_back_to_initialize_without_a_cancel,
        );
    };
    (@each $adapter:ty; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                $crate::negotiation::$name::<$adapter>();
            }
        )*
    };
}
