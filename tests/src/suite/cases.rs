//! The suite's test cases, each generic over the adapter.

use std::time::{Duration, Instant};

use mcp_stdio_core::client::RequestFailure;
use mcp_stdio_core::host::RequestError;
use mcp_stdio_core::process::EndedBy;
use mcp_stdio_core::ExitStatus;
use serde_json::json;

use super::{assert_too_large, first_text, options, ping_within, start, tool};
use crate::adapter::{Adapter, SuiteClient};

/// G1: the basic session works end to end and the record holds observed facts.
pub fn g1_handshake_ping_echo_and_shutdown_record<A: Adapter>() {
    let client = start::<A>(&[], options(4 << 20));
    let took = ping_within(&*client, Duration::from_secs(5));
    let r = client
        .request(
            "tools/call",
            tool("echo", json!({"text": "héllo \"wörld\"\n"})),
            None,
        )
        .expect("echo");
    assert_eq!(first_text(&r), "héllo \"wörld\"\n");
    let record = client.shutdown();
    eprintln!("{}: ping {took:?}; record {:?}", A::NAME, record.process);
    assert_eq!(record.exit_status(), Some(ExitStatus::Code(0)));
    assert_eq!(record.process.ended_by, EndedBy::ExitedAfterStdinClose);
}

/// G1: an 8 MiB response arrives while the application thread is busy
/// elsewhere (it does not poll the client at all for a while).
pub fn g1_8_mib_response_completes_while_the_application_is_busy<A: Adapter>() {
    let client = start::<A>(&[], options(16 << 20));
    let t = Instant::now();
    let pending = client
        .start(
            "tools/call",
            tool("big", json!({"bytes": 8 << 20})),
            Some(Duration::from_secs(30)),
        )
        .expect("sent");
    // The application "thinks" for a second without touching the client.
    std::thread::sleep(Duration::from_secs(1));
    let r = pending.wait().expect("8 MiB result");
    assert_eq!(first_text(&r).len(), 8 << 20);
    eprintln!("{}: 8 MiB response in {:?}", A::NAME, t.elapsed());
    let m = client.metrics().expect("live session");
    assert!(m.stdout_bytes >= 8 << 20);
    client.shutdown();
}

/// G2/G3: a response exactly at the limit passes; one byte over fails at once
/// (id recovered), and a ping then succeeds.
pub fn g2_g3_response_just_under_the_limit_passes_just_over_fails_at_once<A: Adapter>() {
    let limit = 256 * 1024;
    let client = start::<A>(&[], options(limit));
    let r = client.request(
        "tools/call",
        tool("big_exact", json!({"line_bytes": limit})),
        None,
    );
    assert!(r.is_ok(), "exactly at the limit must pass");
    let t = Instant::now();
    let r = client.request(
        "tools/call",
        tool("big_exact", json!({"line_bytes": limit + 1})),
        None,
    );
    assert_too_large(&r, limit);
    let failed_in = t.elapsed();
    let r = client.request(
        "tools/call",
        tool("big_exact", json!({"line_bytes": 64 << 20})),
        Some(Duration::from_secs(60)),
    );
    assert_too_large(&r, limit);
    let big_failed_in = t.elapsed() - failed_in;
    let took = ping_within(&*client, Duration::from_secs(5));
    let m = client.metrics().expect("live");
    assert_eq!(m.oversized_frames, 2);
    eprintln!(
        "{}: over-limit failed in {failed_in:?}, 64 MiB failed in {big_failed_in:?}, ping {took:?}",
        A::NAME
    );
    client.shutdown();
}

/// G6/G8: cancel during slow work; the server stops, and a second request
/// completes promptly.
pub fn g8_cancel_during_slow_work_then_ping_completes_promptly<A: Adapter>() {
    let client = start::<A>(&[], options(4 << 20));
    let pending = client
        .start(
            "tools/call",
            tool(
                "slow",
                json!({"chunks": 100, "delay_ms": 50, "honour_cancel": true}),
            ),
            Some(Duration::from_secs(30)),
        )
        .expect("sent");
    std::thread::sleep(Duration::from_millis(200));
    pending.cancel("user pressed stop");
    let r = pending.wait();
    assert!(
        matches!(
            r,
            Err(RequestError::Failed(RequestFailure::Cancelled {
                cancel_sent: true
            }))
        ),
        "{r:?}"
    );
    let took = ping_within(&*client, Duration::from_secs(5));
    eprintln!("{}: ping after cancel {took:?}", A::NAME);
    let record = client.shutdown();
    assert!(
        record.stderr_tail.contains("cancelled after"),
        "{}",
        record.stderr_tail
    );
    assert_eq!(record.metrics.cancels_sent, 1);
}
