//! G5: server→client notifications and requests, and the bounded inbox's
//! overload policy (the reader never waits for the application).

use std::time::{Duration, Instant};

use mcp_stdio_core::to_raw;
use serde_json::{json, Value};

use super::{
    first_text, metrics, options, ping_within, shutdown_within, start, tool, wait_within,
    LeakCheck, LONG, PROMPT,
};
use crate::adapter::{Adapter, SuiteClient, SuiteIncoming};

/// G5: `notify_then_result {count: 5}` delivers the five notifications, in
/// order, through `next_incoming`, and then the result.
pub fn g5_server_notifications_arrive_in_order_before_the_result<A: Adapter>() {
    let count = 5;
    let mut leaks = LeakCheck::new::<A>("g5_notifications");
    let client = start::<A>(&mut leaks, &[], options(4 << 20));
    let t = Instant::now();
    let pending = client
        .start(
            "tools/call",
            tool("notify_then_result", json!({ "count": count })),
            Some(LONG),
        )
        .expect("sent");
    for i in 0..count {
        match client.next_incoming(PROMPT) {
            Some(SuiteIncoming::Notification(n)) => {
                assert_eq!(n.method, "notifications/message");
                let params: Value =
                    serde_json::from_str(n.params.as_ref().expect("notification params").get())
                        .expect("params are JSON");
                assert_eq!(params["data"], format!("fixture notification {i}"));
            }
            other => panic!("expected notification {i}, got {other:?}"),
        }
    }
    let (r, _) = wait_within(pending, PROMPT);
    assert_eq!(
        first_text(&r.expect("result")),
        format!("sent {count} notifications")
    );
    let m = metrics(&*client);
    assert_eq!(m.server_notifications, count);
    assert_eq!(m.overload_drops, 0);
    eprintln!(
        "{}: {count} notifications and the result in {:?}; inbox wait max {} us",
        A::NAME,
        t.elapsed(),
        m.inbox_wait_max_us
    );
    shutdown_within::<A>(client, LONG);
    leaks.assert_none_left();
}

/// G5: a server→client request (`ping` from the fixture) comes out of
/// `next_incoming`; answering it through the responder lets the tool call
/// that issued it complete.
pub fn g5_server_request_is_answered_through_the_responder<A: Adapter>() {
    let mut leaks = LeakCheck::new::<A>("g5_server_request");
    let client = start::<A>(&mut leaks, &[], options(4 << 20));
    let t = Instant::now();
    let pending = client
        .start("tools/call", tool("server_request", json!({})), Some(LONG))
        .expect("sent");
    match client.next_incoming(PROMPT) {
        Some(SuiteIncoming::Request(req, respond)) => {
            assert_eq!(req.method, "ping");
            assert_eq!(req.id.to_string(), "\"fixture-srv-1\"");
            respond(Ok(to_raw(&json!({})).expect("JSON serializes")));
        }
        other => panic!("expected the server's ping request, got {other:?}"),
    }
    let (r, _) = wait_within(pending, PROMPT);
    let text = first_text(&r.expect("result after the answer"));
    assert!(text.starts_with("client answered:"), "{text}");
    assert!(text.contains("fixture-srv-1"), "{text}");
    let m = metrics(&*client);
    assert_eq!(m.server_requests, 1);
    assert_eq!(m.overload_rejects, 0);
    eprintln!(
        "{}: server request answered, tool result in {:?}",
        A::NAME,
        t.elapsed()
    );
    shutdown_within::<A>(client, LONG);
    leaks.assert_none_left();
}

/// G5: with an inbox of 2 and nobody reading it, 500 notifications do not
/// stall the reader: most are dropped and counted, the request completes,
/// and every notification is accounted for (delivered or dropped).
pub fn g5_full_inbox_drops_notifications_and_the_request_still_completes<A: Adapter>() {
    let count = 500_u64;
    let mut leaks = LeakCheck::new::<A>("g5_overload");
    let mut opts = options(4 << 20);
    opts.session_mut().inbox_capacity(2);
    let client = start::<A>(&mut leaks, &[], opts);
    let t = Instant::now();
    let r = client
        .request(
            "tools/call",
            tool("notify_then_result", json!({ "count": count })),
            Some(LONG),
        )
        .expect("the request completes although the inbox is full");
    let took = t.elapsed();
    assert_eq!(first_text(&r), format!("sent {count} notifications"));
    let ping = ping_within(&*client, PROMPT);
    let m = metrics(&*client);
    assert!(m.overload_drops > 0, "nothing dropped: {m:?}");
    assert_eq!(m.server_notifications, count);
    // Drain what was kept: kept + dropped = sent.
    let mut kept = 0;
    while let Some(msg) = client.next_incoming(Duration::from_millis(200)) {
        assert!(
            matches!(msg, SuiteIncoming::Notification(_)),
            "unexpected {msg:?}"
        );
        kept += 1;
    }
    assert_eq!(kept + m.overload_drops, count, "kept {kept}");
    eprintln!(
        "{}: {count} notifications into an inbox of 2: {} dropped, {kept} kept; request {took:?}, \
         ping {ping:?}",
        A::NAME,
        m.overload_drops
    );
    shutdown_within::<A>(client, LONG);
    leaks.assert_none_left();
}
