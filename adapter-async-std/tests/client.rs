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
use mcp_stdio_async_std::core::EndedBy;
use mcp_stdio_async_std::core::ExitStatus;
use mcp_stdio_async_std::core::{to_raw, RawResult, RawValue};
use mcp_stdio_async_std::{Client, ClientOptions, CommandSpec, SessionRecord};
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
    options.framer_mut().max_frame(max_frame);
    options
        .supervisor_mut()
        .stdin_close_grace(Duration::from_millis(500))
        .term_grace(Duration::from_millis(500))
        .reader_drain_deadline(Duration::from_millis(500));
    options
}

async fn start(flags: &[&str], options: ClientOptions) -> Client {
    let client = Client::spawn(&spec(flags), options).expect("spawn the fixture server");
    let init = client.initialize().await.expect("initialize");
    assert_eq!(
        init.server_info.as_ref().expect("serverInfo").name,
        "fixture-server"
    );
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

/// smol users are served: the same session driven from smol's executor.
#[test]
fn smol_block_on_runs_the_same_session() {
    let (took, record) = smol::block_on(handshake_ping_echo_and_shutdown());
    eprintln!("smol: ping {took:?}; record {:?}", record.process);
    assert_eq!(record.exit_status(), Some(ExitStatus::Code(0)));
    assert_eq!(record.process.ended_by, EndedBy::ExitedAfterStdinClose);
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
