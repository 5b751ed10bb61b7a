//! `Client` against the real fixture server of the tests crate, spawned as a
//! process: the adapter's own checks of G1, G3, G5, G8 and G11. (The full
//! conformance suite runs against this adapter from `tests/` too.)
//!
//! The fixture binary must be built first (`cargo test --workspace` does it;
//! alone: `cargo build -p mcp-stdio-tests --bins`), or named by
//! `MCP_STDIO_FIXTURE_SERVER`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use async_std::task::block_on;
use mcp_stdio_async_std::core::client::RequestFailure;
use mcp_stdio_async_std::core::message::{to_raw, RawResult, RawValue};
use mcp_stdio_async_std::core::process::EndedBy;
use mcp_stdio_async_std::core::ExitStatus;
use mcp_stdio_async_std::{
    Client, ClientOptions, CommandSpec, IncomingMessage, RequestError, SessionRecord,
};
use serde_json::{json, Value};

fn fixture_server() -> PathBuf {
    if let Some(p) = std::env::var_os("MCP_STDIO_FIXTURE_SERVER") {
        return PathBuf::from(p);
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/debug/fixture-server");
    assert!(
        path.is_file(),
        "{} not found: run `cargo build -p mcp-stdio-tests --bins` first",
        path.display()
    );
    path
}

fn spec(flags: &[&str]) -> CommandSpec {
    let mut spec = CommandSpec::new(fixture_server());
    spec.args(flags);
    spec
}

/// A wire limit and short shutdown graces, so tests are quick.
fn options(max_frame: usize) -> ClientOptions {
    let mut options = ClientOptions::default();
    options
        .max_frame(max_frame)
        .config_mut()
        .supervisor_mut()
        .stdin_close_grace(Duration::from_millis(500))
        .term_grace(Duration::from_millis(500))
        .reader_drain_deadline(Duration::from_millis(500));
    options
}

async fn start(flags: &[&str], options: ClientOptions) -> Client {
    let client = Client::spawn(&spec(flags), options).expect("spawn the fixture server");
    let init = client.initialize().await.expect("initialize");
    assert_eq!(init.server_info.name, "fixture-server");
    client
}

fn tool(name: &str, arguments: Value) -> Option<Box<RawValue>> {
    Some(to_raw(&json!({ "name": name, "arguments": arguments })).expect("JSON serializes"))
}

fn first_text(result: &RawResult) -> String {
    let v: Value = serde_json::from_str(result.get()).expect("a result is JSON");
    v["content"][0]["text"]
        .as_str()
        .expect("a text block")
        .to_owned()
}

fn assert_too_large(r: &Result<RawResult, RequestError>, limit: usize) {
    match r {
        Err(RequestError::Failed(RequestFailure::ResponseTooLarge { limit: l, .. })) => {
            assert_eq!(*l, limit);
        }
        other => panic!(
            "expected ResponseTooLarge, got {:?}",
            other.as_ref().map(|v| v.get().len())
        ),
    }
}

async fn ping_within(client: &Client, within: Duration) -> Duration {
    let t = Instant::now();
    let r = client
        .request_with_timeout("ping", None, Some(within))
        .await;
    let took = t.elapsed();
    assert!(r.is_ok(), "ping failed after {took:?}: {r:?}");
    took
}

/// Live (non-zombie) members of process group `pgid`, from `/proc`.
fn group_members(pgid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                return false;
            };
            let mut fields = rest.split_ascii_whitespace();
            let state = fields.next().unwrap_or("X");
            let pgrp = fields.nth(1).and_then(|f| f.parse::<u32>().ok());
            pgrp == Some(pgid) && !matches!(state, "Z" | "X")
        })
        .collect()
}

async fn handshake_ping_echo_and_shutdown() -> (Duration, SessionRecord) {
    let client = start(&[], options(4 << 20)).await;
    let took = ping_within(&client, Duration::from_secs(5)).await;
    let r = client
        .request(
            "tools/call",
            tool("echo", json!({"text": "héllo \"wörld\"\n"})),
        )
        .await
        .expect("echo");
    assert_eq!(first_text(&r), "héllo \"wörld\"\n");
    (took, client.shutdown().await)
}

#[test]
fn g1_handshake_ping_echo_and_shutdown_record() {
    let (took, record) = block_on(handshake_ping_echo_and_shutdown());
    eprintln!("async-std: ping {took:?}; record {:?}", record.process);
    assert_eq!(record.exit_status(), Some(ExitStatus::Code(0)));
    assert_eq!(record.process.ended_by, EndedBy::ExitedAfterStdinClose);
    assert!(record.stderr_tail.contains("fixture: started pid"));
    assert!(record.metrics.requests_sent >= 3);
}

/// smol users are served: the same session driven from smol's executor.
#[test]
fn smol_block_on_runs_the_same_session() {
    let (took, record) = smol::block_on(handshake_ping_echo_and_shutdown());
    eprintln!("smol: ping {took:?}; record {:?}", record.process);
    assert_eq!(record.exit_status(), Some(ExitStatus::Code(0)));
    assert_eq!(record.process.ended_by, EndedBy::ExitedAfterStdinClose);
}

/// G1: an 8 MiB response arrives while the application thread sleeps and
/// polls nothing: the driver, on its own thread, runs without it.
#[test]
fn g1_8_mib_response_completes_while_the_application_sleeps() {
    let client = block_on(start(&[], options(16 << 20)));
    let t = Instant::now();
    let pending = block_on(client.start_request(
        "tools/call",
        tool("big", json!({"bytes": 8 << 20})),
        Some(Duration::from_secs(30)),
    ))
    .expect("sent");
    std::thread::sleep(Duration::from_secs(1));
    // Everything was read while the application slept.
    let m = block_on(client.metrics()).expect("live session");
    let read_while_asleep = m.stdout_bytes;
    let t_wait = Instant::now();
    let r = block_on(pending).expect("8 MiB result");
    let waited = t_wait.elapsed();
    assert_eq!(first_text(&r).len(), 8 << 20);
    eprintln!(
        "async-std: 8 MiB response; {read_while_asleep} stdout bytes read during the 1 s sleep; \
         await after waking took {waited:?}; total {:?}",
        t.elapsed()
    );
    assert!(
        read_while_asleep >= 8 << 20,
        "only {read_while_asleep} bytes read while the application slept"
    );
    block_on(client.shutdown());
}

/// G2/G3: at the limit passes; one byte over fails at once (id recovered),
/// 64 MiB over fails without buffering, and a ping then succeeds.
#[test]
fn g3_over_limit_response_fails_at_once_then_ping() {
    block_on(async {
        let limit = 256 * 1024;
        let client = start(&[], options(limit)).await;
        let r = client
            .request(
                "tools/call",
                tool("big_exact", json!({"line_bytes": limit})),
            )
            .await;
        assert!(r.is_ok(), "exactly at the limit must pass");
        let t = Instant::now();
        let r = client
            .request(
                "tools/call",
                tool("big_exact", json!({"line_bytes": limit + 1})),
            )
            .await;
        assert_too_large(&r, limit);
        let failed_in = t.elapsed();
        let t = Instant::now();
        let r = client
            .request_with_timeout(
                "tools/call",
                tool("big_exact", json!({"line_bytes": 64 << 20})),
                Some(Duration::from_secs(60)),
            )
            .await;
        assert_too_large(&r, limit);
        let big_failed_in = t.elapsed();
        let took = ping_within(&client, Duration::from_secs(5)).await;
        let m = client.metrics().await.expect("live");
        assert_eq!(m.oversized_frames, 2);
        eprintln!(
            "async-std: over-limit failed in {failed_in:?}, 64 MiB failed in {big_failed_in:?}, \
             ping {took:?}"
        );
        assert!(failed_in < Duration::from_secs(5), "{failed_in:?}");
        client.shutdown().await;
    });
}

/// G6/G8: a cancel during slow work reaches the server, which stops; a
/// second request completes promptly.
#[test]
fn g8_cancel_of_slow_work_then_ping_completes_promptly() {
    block_on(async {
        let client = start(&[], options(4 << 20)).await;
        let pending = client
            .start_request(
                "tools/call",
                tool(
                    "slow",
                    json!({"chunks": 100, "delay_ms": 50, "honour_cancel": true}),
                ),
                Some(Duration::from_secs(30)),
            )
            .await
            .expect("sent");
        async_std::task::sleep(Duration::from_millis(200)).await;
        let t = Instant::now();
        pending.cancel("user pressed stop");
        let r = pending.await;
        let cancelled_in = t.elapsed();
        assert!(
            matches!(
                r,
                Err(RequestError::Failed(RequestFailure::Cancelled {
                    cancel_sent: true
                }))
            ),
            "{r:?}"
        );
        let took = ping_within(&client, Duration::from_secs(5)).await;
        eprintln!("async-std: cancel completed in {cancelled_in:?}, ping after cancel {took:?}");
        let record = client.shutdown().await;
        assert!(
            record.stderr_tail.contains("cancelled after"),
            "{}",
            record.stderr_tail
        );
        assert_eq!(record.metrics.cancels_sent, 1);
    });
}

/// G6: dropping an unfinished `PendingRequest` is a cancel, not a leak.
#[test]
fn g6_dropping_a_pending_request_cancels_it() {
    block_on(async {
        let client = start(&[], options(4 << 20)).await;
        let pending = client
            .start_request(
                "tools/call",
                tool(
                    "slow",
                    json!({"chunks": 100, "delay_ms": 50, "honour_cancel": true}),
                ),
                Some(Duration::from_secs(30)),
            )
            .await
            .expect("sent");
        async_std::task::sleep(Duration::from_millis(100)).await;
        drop(pending);
        ping_within(&client, Duration::from_secs(5)).await;
        let m = client.metrics().await.expect("live");
        assert_eq!(m.cancels_sent, 1);
        let record = client.shutdown().await;
        assert!(record.stderr_tail.contains("cancel received"));
    });
}

/// G11: dropping the client without shutdown kills the server's process
/// group at once, from `Drop`, with no executor involved.
#[test]
fn g11_drop_kills_the_process_group() {
    let client = block_on(start(&[], options(4 << 20)));
    let pgid = client.pid();
    assert_eq!(group_members(pgid), vec![pgid]);
    let t = Instant::now();
    drop(client);
    while !group_members(pgid).is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "group {pgid} still alive: {:?}",
            group_members(pgid)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    eprintln!("async-std: group gone {:?} after drop", t.elapsed());
}

/// G5: server→client requests and notifications go through the core's
/// bounded inbox; the client answers a server request with its `Responder`.
#[test]
fn g5_server_requests_and_notifications_reach_next_incoming() {
    block_on(async {
        let client = start(&[], options(4 << 20)).await;
        // 20 notifications and then the result: the result arrives although
        // nobody reads the notifications yet.
        let r = client
            .request(
                "tools/call",
                tool("notify_then_result", json!({"count": 20})),
            )
            .await
            .expect("result");
        drop(r);
        let mut notifications = 0;
        while notifications < 20 {
            match async_std::future::timeout(Duration::from_secs(5), client.next_incoming()).await {
                Ok(Some(IncomingMessage::Notification(_))) => notifications += 1,
                other => panic!("expected a notification, got {other:?}"),
            }
        }
        // A server request, answered while the tool call waits for it.
        let pending = client
            .start_request("tools/call", tool("server_request", json!({})), None)
            .await
            .expect("sent");
        let msg = async_std::future::timeout(Duration::from_secs(5), client.next_incoming())
            .await
            .expect("a server request in time");
        let Some(IncomingMessage::Request(req, responder)) = msg else {
            panic!("expected a request, got {msg:?}");
        };
        assert_eq!(req.method, "ping");
        responder
            .respond(Ok(to_raw(&json!({})).expect("JSON")))
            .await
            .expect("answer sent");
        let r = pending.await.expect("tool result");
        assert!(first_text(&r).starts_with("client answered"), "{}", r.get());
        let m = client.metrics().await.expect("live");
        assert_eq!(m.server_notifications, 20);
        assert_eq!(m.server_requests, 1);
        client.shutdown().await;
    });
}

/// G11: a server that ignores stdin EOF and SIGTERM is killed by the
/// shutdown sequence, and the record says so.
#[test]
fn g11_shutdown_escalates_to_sigkill() {
    block_on(async {
        let client = start(
            &["--ignore-stdin-eof", "--ignore-sigterm"],
            options(4 << 20),
        )
        .await;
        let t = Instant::now();
        let record = client.shutdown().await;
        eprintln!(
            "async-std: escalated shutdown took {:?}: {:?}",
            t.elapsed(),
            record.process
        );
        assert_eq!(record.process.ended_by, EndedBy::ExitedAfterKill);
        assert_eq!(record.exit_status(), Some(ExitStatus::Signal(9)));
    });
}

/// G11: a `wait()` abandoned by a timeout still leaves no server behind:
/// the future owned the `Client`, whose `Drop` kills the group.
#[test]
fn g11_abandoned_wait_still_kills_the_process_group() {
    let pgid = block_on(async {
        let client = start(&[], options(4 << 20)).await;
        let pgid = client.pid();
        let r = async_std::future::timeout(Duration::from_millis(50), client.wait()).await;
        assert!(r.is_err(), "the server does not end by itself");
        pgid
    });
    let t = Instant::now();
    while !group_members(pgid).is_empty() {
        assert!(t.elapsed() < Duration::from_secs(5), "group {pgid} alive");
        std::thread::sleep(Duration::from_millis(5));
    }
}
