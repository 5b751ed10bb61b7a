//! G10: stderr is budgeted, untrusted input — read continuously, counted,
//! kept only up to its tail budget, truncation made visible.

use std::time::{Duration, Instant};

use mcp_stdio_core::EndedBy;
use mcp_stdio_core::ExitStatus;
use serde_json::json;

use super::{
    assert_streams_ended, first_text, options, ping_within, shutdown_within, start, tool,
    LeakCheck, LONG, PROMPT,
};
use crate::adapter::{Adapter, SuiteClient};

/// G10: a server floods stderr at a nominal 20 MB/s for 2.5 s while requests
/// keep completing promptly (the fixture logs each request under the same
/// stderr lock as the flood, so an undrained stderr would stall them). With
/// a 16 KiB tail budget the record keeps at most 16 KiB, says so with the
/// exact marker, and the server still exits in order with both streams read
/// to EOF.
pub fn g10_stderr_flood_is_budgeted_while_requests_keep_completing<A: Adapter>() {
    let tail = 16_384_usize;
    let flood_for = Duration::from_millis(2500);
    let one_call_flood = 4_000_000_u64;
    let mut leaks = LeakCheck::new::<A>("g10_flood");
    let mut opts = options(4 << 20);
    opts.stderr_mut().tail(tail);
    // Room for an orderly exit even if the machine is slow: the assertion
    // below is that the flood does not prevent it.
    opts.supervisor_mut()
        .stdin_close_grace(Duration::from_secs(5));
    let client = start::<A>(&mut leaks, &["--noisy-stderr", "20000000"], opts);
    let t = Instant::now();
    let (mut requests, mut slowest, mut total) = (0_u32, Duration::ZERO, Duration::ZERO);
    while t.elapsed() < flood_for {
        let took = if requests % 2 == 0 {
            ping_within(&*client, PROMPT)
        } else {
            let s = Instant::now();
            let r = client
                .request(
                    "tools/call",
                    tool("echo", json!({"text": "through the flood"})),
                    Some(PROMPT),
                )
                .expect("echo during the flood");
            assert_eq!(first_text(&r), "through the flood");
            s.elapsed()
        };
        requests += 1;
        slowest = slowest.max(took);
        total += took;
        // Pacing, not synchronisation: leave CPU to the flood and other tests.
        std::thread::sleep(Duration::from_millis(20));
    }
    // And one tool call that itself writes 4 MB of stderr before answering.
    let s = Instant::now();
    let r = client
        .request(
            "tools/call",
            tool("stderr_flood", json!({ "bytes": one_call_flood })),
            Some(LONG),
        )
        .expect("stderr_flood result");
    assert_eq!(
        first_text(&r),
        format!("wrote {one_call_flood} bytes to stderr")
    );
    let flood_call = s.elapsed();
    let flooded = t.elapsed();
    let (record, shutdown) = shutdown_within::<A>(client, LONG);
    let seen = record.stderr.seen;
    eprintln!(
        "{}: stderr flood: {requests} requests in {flooded:?} (slowest {slowest:?}, mean {:?}), \
         4 MB stderr_flood call {flood_call:?}; seen {seen} bytes ({:.1} MB/s), retained {}, \
         forwarded lines {} dropped {}; shutdown {shutdown:?}",
        A::NAME,
        total / requests.max(1),
        seen as f64 / flooded.as_secs_f64() / 1e6,
        record.stderr.retained,
        record.stderr_lines_forwarded,
        record.stderr_lines_dropped,
    );
    // At least the tool's 4 MB and the noise's first 2 MB burst.
    assert!(seen >= one_call_flood + 2_000_000, "seen {seen}");
    assert!(record.stderr.retained <= tail as u64);
    assert!(record.stderr.truncated);
    let marker = format!("[stderr truncated: kept last {tail} of {seen} bytes]\n");
    assert!(
        record.stderr_tail.starts_with(&marker),
        "expected {marker:?} at the start of {:?}",
        &record.stderr_tail[..record.stderr_tail.len().min(120)]
    );
    assert!(record.stderr_tail.len() <= marker.len() + 3 * tail);
    assert_eq!(record.exit_status(), Some(ExitStatus::Code(0)));
    assert_eq!(record.process.ended_by, EndedBy::ExitedAfterStdinClose);
    assert_streams_ended(&record);
    leaks.assert_none_left();
}
