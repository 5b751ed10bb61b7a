//! G1/G6/G9/G11 with a stalled peer: the server stops reading its stdin (our
//! writes) while it keeps writing stdout and stderr. Once after a message
//! smaller than the pipe buffer (it fits, nothing is left half-written) and
//! once after one larger than it (it stays half-written in the driver).
//!
//! Whatever the state of our writes: we keep reading both streams, a
//! request's timeout and a cancel are handled within their bounds, the
//! outgoing queue stays within its limit and at the limit `request` fails
//! with `SendError::Backpressure`, and `shutdown()` ends within its graces.

use std::time::{Duration, Instant};

use mcp_stdio_core::RequestError;
use mcp_stdio_core::{RequestFailure, SendError};
use serde_json::json;

use super::{metrics, options, shutdown_within, start, tool, wait_within, LeakCheck, LONG, PROMPT};
use crate::adapter::{Adapter, SuiteClient, SuitePending};

/// The outgoing queue's limit in these cases (`max_outgoing_bytes`).
const OUTGOING_LIMIT: usize = 256 * 1024;
/// The default room for cancels and overload replies past the limit.
const CONTROL_RESERVE: usize = 64 * 1024;
/// The wire limit in these cases.
const MAX_FRAME: usize = 4 << 20;
/// Larger than a Linux pipe buffer (64 KiB): a write of it cannot complete.
const LARGE: usize = 1 << 20;
/// The timeout of the first request sent after the stall.
const FIRST_TIMEOUT: Duration = Duration::from_millis(1500);

/// G1/G6/G9/G11: the server stops reading after a message smaller than the
/// pipe buffer.
pub fn g1_client_keeps_reading_when_the_server_stops_reading_after_a_small_message<A: Adapter>() {
    stalled_peer::<A>("small", 100);
}

/// G1/G6/G9/G11: the server stops reading after a message larger than the
/// pipe buffer (it stays half-written).
pub fn g1_client_keeps_reading_when_the_server_stops_reading_after_a_large_message<A: Adapter>() {
    stalled_peer::<A>("large", LARGE);
}

fn echo(text_bytes: usize) -> Option<Box<mcp_stdio_core::RawValue>> {
    tool("echo", json!({ "text": "s".repeat(text_bytes) }))
}

fn stalled_peer<A: Adapter>(case: &str, first_bytes: usize) {
    let mut leaks = LeakCheck::new::<A>(&format!("g1_stalled_{case}"));
    let mut opts = options(MAX_FRAME);
    opts.session_mut().max_outgoing_bytes(OUTGOING_LIMIT);
    let client = start::<A>(&mut leaks, &[], opts);
    client
        .request(
            "tools/call",
            tool("stop_reading", json!({"ms": 60_000, "every_ms": 20})),
            Some(PROMPT),
        )
        .unwrap_or_else(|e| panic!("{}: stop_reading: {e}", A::NAME));

    // The first message after the stall: it fits in the pipe, or it does not.
    let t_first = Instant::now();
    let first = client
        .start("tools/call", echo(first_bytes), Some(FIRST_TIMEOUT))
        .expect("the first message is always admitted");

    // Fill until the documented outcome: backpressure at the limit.
    let mut kept: Vec<Box<dyn SuitePending>> = Vec::new();
    let t_fill = Instant::now();
    // A large first message may still stand alone in the core's queue until
    // the driver takes it into its write slot: until then even a small one is
    // refused, so the first admission gets a bounded number of tries.
    let mut tries = 0;
    let err = loop {
        match client.start("tools/call", echo(16 * 1024), Some(LONG)) {
            Ok(p) => kept.push(p),
            Err(RequestError::Send(SendError::Backpressure { .. }))
                if kept.is_empty() && tries < 100 =>
            {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => break e,
        }
        assert!(
            kept.len() < 100,
            "{}: no backpressure after {} requests",
            A::NAME,
            kept.len()
        );
    };
    let fill_took = t_fill.elapsed();
    let admitted = kept.len();
    match &err {
        RequestError::Send(SendError::Backpressure { queued, limit }) => {
            assert_eq!(*limit, OUTGOING_LIMIT);
            // The documented bound: a message is always admitted into an empty
            // queue, so a large first message not yet taken by the driver's
            // write slot may stand alone in it.
            assert!(
                *queued <= OUTGOING_LIMIT.max(first_bytes + 1024),
                "{queued} bytes queued"
            );
        }
        other => panic!("{}: expected backpressure, got {other:?}", A::NAME),
    }

    // Reads go on: stdout notifications keep arriving while nothing is written.
    let before = metrics(&*client);
    std::thread::sleep(Duration::from_millis(600));
    let after = metrics(&*client);
    let notes = after.server_notifications - before.server_notifications;
    assert!(
        notes >= 5,
        "{}: only {notes} notifications read in 600 ms while our writes were stuck",
        A::NAME
    );

    // A cancel completes at once; its notification waits in the control reserve.
    let victim = kept.pop().expect("at least one request was admitted");
    let t_cancel = Instant::now();
    victim.cancel("the server is stalled");
    let (r, _) = wait_within(victim, PROMPT);
    let cancel_took = t_cancel.elapsed();
    assert!(
        matches!(
            r,
            Err(RequestError::Failed(RequestFailure::Cancelled {
                cancel_sent: true
            }))
        ),
        "{}: {r:?}",
        A::NAME
    );

    // The first request times out at its deadline, written or not.
    let (r, _) = wait_within(first, LONG);
    let timeout_took = t_first.elapsed();
    assert!(
        r.as_ref().is_err_and(RequestError::is_timeout),
        "{}: {r:?}",
        A::NAME
    );
    assert!(
        timeout_took >= FIRST_TIMEOUT && timeout_took < FIRST_TIMEOUT + PROMPT,
        "{}: the timeout fired after {timeout_took:?}",
        A::NAME
    );

    // The queue never passed its documented bound.
    let peak = metrics(&*client).outgoing_peak_bytes;
    let bound = if first_bytes > OUTGOING_LIMIT {
        // A single message is always admitted into an empty queue.
        MAX_FRAME.max(OUTGOING_LIMIT) + CONTROL_RESERVE
    } else {
        OUTGOING_LIMIT + CONTROL_RESERVE
    };
    assert!(peak as usize <= bound, "{}: peak {peak} > {bound}", A::NAME);

    // Shutdown: stdin close is unseen (nobody reads), SIGTERM ends it.
    let (record, shutdown_took) = shutdown_within::<A>(client, LONG);
    assert!(
        shutdown_took < PROMPT,
        "{}: shutdown took {shutdown_took:?}",
        A::NAME
    );
    // stderr was read all along: the last chatter line is recent.
    let chatter = record
        .stderr_tail
        .lines()
        .filter_map(|l| l.strip_prefix("fixture: chatter ")?.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    assert!(
        chatter >= 30,
        "{}: stderr read only up to chatter {chatter}",
        A::NAME
    );
    drop(kept);
    eprintln!(
        "{}: stalled after a {case} message: {} requests admitted then backpressure in \
         {fill_took:?}; {notes} notifications read in 600 ms; cancel {cancel_took:?}; timeout \
         after {timeout_took:?}; outgoing peak {peak} (bound {bound}); stderr up to chatter \
         {chatter}; shutdown {shutdown_took:?} ({:?})",
        A::NAME,
        admitted,
        record.process.ended_by,
    );
    leaks.assert_none_left();
}
