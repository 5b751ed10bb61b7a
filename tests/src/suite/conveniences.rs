//! Issue 25: the conveniences users of the TypeScript and Python SDKs look
//! for, on every adapter — tools listed and called without method names, a
//! request's progress as a stream of its own, the live stderr tail and
//! counters of a running session, and a handle cloned into other threads.

use std::time::{Duration, Instant};

use mcp_stdio_core::{RequestError, RequestFailure, SendError};
use serde_json::{json, Value};

use super::{first_text, options, shutdown_within, start, LeakCheck, LONG, PROMPT};
use crate::adapter::{Adapter, SuiteClient};

fn parse(r: &mcp_stdio_core::RawResult) -> Value {
    serde_json::from_str(r.get()).expect("a JSON result")
}

/// `list_tools` and `call_tool` give the raw results; arguments that are not
/// an object are refused before anything is sent.
pub fn conveniences_tools_are_listed_and_called_without_method_names<A: Adapter>() {
    let mut leaks = LeakCheck::new::<A>("conveniences_tools");
    let client = start::<A>(&mut leaks, &[], options(4 << 20));
    let listed = parse(&client.list_tools(None).expect("tools/list"));
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"echo"), "{names:?}");
    let r = client
        .call_tool("echo", &json!({"text": "hé \"x\""}))
        .expect("echo");
    assert_eq!(first_text(&r), "hé \"x\"");
    let sent_before = client.metrics().expect("running").requests_sent;
    let err = client
        .call_tool("echo", &json!(["not", "an object"]))
        .expect_err("refused");
    assert!(
        matches!(err, RequestError::Send(SendError::ParamsNotAnObject)),
        "{err:?}"
    );
    assert_eq!(
        client.metrics().expect("running").requests_sent,
        sent_before
    );
    eprintln!("{}: {} tools listed; echo called", A::NAME, names.len());
    let (record, _) = shutdown_within::<A>(client, LONG);
    assert_eq!(
        record.exit_status(),
        Some(mcp_stdio_core::ExitStatus::Code(0))
    );
    leaks.assert_none_left();
}

/// A call's progress reaches its own stream, in order, and the stream ends
/// when the call does; none of it goes to the incoming messages.
pub fn conveniences_a_calls_progress_arrives_in_order_on_its_own_stream<A: Adapter>() {
    let mut leaks = LeakCheck::new::<A>("conveniences_progress");
    let client = start::<A>(&mut leaks, &[], options(4 << 20));
    let t = Instant::now();
    let (updates, outcome) = client
        .call_tool_collecting_progress("progress", &json!({"chunks": 5, "delay_ms": 20}))
        .expect("sent");
    let took = t.elapsed();
    let r = outcome.expect("the call completes");
    assert_eq!(first_text(&r), "progress done after 5 chunks");
    let seen: Vec<f64> = updates.iter().map(|u| u.progress).collect();
    eprintln!("{}: progress {seen:?} in {took:?}", A::NAME);
    assert_eq!(seen, [0.0, 1.0, 2.0, 3.0, 4.0]);
    assert!(updates.iter().all(|u| u.total == Some(5.0)));
    let m = client.metrics().expect("running");
    assert_eq!(m.progress_routed, 5);
    assert!(
        client.next_incoming(Duration::from_millis(100)).is_none(),
        "progress went to the inbox too"
    );
    let (_, _) = shutdown_within::<A>(client, LONG);
    leaks.assert_none_left();
}

/// While the server runs, the client sees its counters and the newest bytes
/// of its stderr (within the session's tail), not only at the end.
pub fn conveniences_the_live_stderr_tail_and_counters_of_a_running_session<A: Adapter>() {
    let mut leaks = LeakCheck::new::<A>("conveniences_snapshot");
    let client = start::<A>(&mut leaks, &[], options(4 << 20));
    client
        .call_tool("stderr_flood", &json!({"bytes": 100_000}))
        .expect("flood");
    // The stderr pipe is read on its own: wait until all of it was seen.
    let t = Instant::now();
    let snap = loop {
        let snap = client.snapshot(256).expect("running");
        if snap.stderr_seen >= 100_000 || t.elapsed() > PROMPT {
            break snap;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    eprintln!(
        "{}: live: {} stderr bytes seen, tail {:?}, {} requests sent",
        A::NAME,
        snap.stderr_seen,
        &snap.stderr_tail[snap.stderr_tail.len().saturating_sub(40)..],
        snap.metrics.requests_sent
    );
    assert!(snap.stderr_seen >= 100_000, "{}", snap.stderr_seen);
    assert!(!snap.stderr_tail.is_empty() && snap.stderr_tail.len() <= 256);
    assert!(snap.metrics.requests_sent >= 2);
    let (record, _) = shutdown_within::<A>(client, LONG);
    assert!(record.stderr.seen >= 100_000);
    leaks.assert_none_left();
}

/// Handles cloned into threads call tools at once on one session; once the
/// client has shut the session down, a handle's call fails at once.
pub fn conveniences_handles_cloned_into_threads_share_one_session<A: Adapter>() {
    const THREADS: usize = 4;
    const CALLS: usize = 5;
    let mut leaks = LeakCheck::new::<A>("conveniences_handles");
    let client = start::<A>(&mut leaks, &[], options(4 << 20));
    let handle = client.handle();
    let t = Instant::now();
    let threads: Vec<_> = (0..THREADS)
        .map(|i| {
            let h = handle.clone_handle();
            std::thread::spawn(move || {
                (0..CALLS)
                    .map(|n| {
                        let text = format!("thread {i} call {n}");
                        let r = h.call_tool("echo", &json!({ "text": text })).expect("echo");
                        assert_eq!(first_text(&r), text);
                    })
                    .count()
            })
        })
        .collect();
    let done: usize = threads.into_iter().map(|t| t.join().expect("thread")).sum();
    eprintln!(
        "{}: {done} calls from {THREADS} threads in {:?}",
        A::NAME,
        t.elapsed()
    );
    assert_eq!(done, THREADS * CALLS);
    let (_, _) = shutdown_within::<A>(client, LONG);
    let t = Instant::now();
    let after = handle.call_tool("echo", &json!({"text": "late"}));
    assert!(
        matches!(
            after,
            Err(RequestError::Send(SendError::Closed)
                | RequestError::Failed(RequestFailure::SessionClosed))
        ),
        "{after:?}"
    );
    assert!(
        t.elapsed() < PROMPT,
        "a call after the end waited {:?}",
        t.elapsed()
    );
    leaks.assert_none_left();
}
