//! G6/G8: a cancel in every state of the work (racing the send, before the
//! first chunk, during blocking I/O, during a subprocess, after the response
//! began), a timeout that is a real cancel, and a late response that is
//! ignored and counted. Each ends with a second request that completes.

use std::time::{Duration, Instant};

use mcp_stdio_core::RequestError;
use mcp_stdio_core::RequestFailure;
use serde_json::json;

use super::{
    assert_cancelled_and_sent, first_text, log_lines_for, metrics, number_after,
    options_keeping_the_log, parse_errors, ping_within, shutdown_within, start, tool, wait_within,
    LeakCheck, LONG, POLL, PROMPT,
};
use crate::adapter::{Adapter, SuiteClient};
use crate::{group_members, pid_alive, wait_until};

/// Whether process `pid` has a socket open. The fixture server opens one (a
/// socketpair) only while a `slow_io` request blocks in `read()`.
fn has_socket(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|d| {
        d.filter_map(Result::ok).any(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"))
        })
    })
}

/// G6/G8: a cancel sent right after the request, racing the server's answer
/// to a fast `echo`, 20 times. Each ends either with the result (the answer
/// won) or `Cancelled { cancel_sent: true }`; for every cancelled request the
/// server saw the cancel, and it is exactly accounted for on the wire
/// (suppressed by the server or counted as a late response); a ping
/// completes promptly.
pub fn g8_cancel_racing_the_send_then_ping_completes_promptly<A: Adapter>() {
    let rounds = 20;
    let mut leaks = LeakCheck::new::<A>("g8_race");
    let client = start::<A>(&mut leaks, &[], options_keeping_the_log(4 << 20));
    let (mut cancelled, mut answered) = (Vec::new(), 0_u64);
    for i in 0..rounds {
        let text = format!("race {i}");
        let pending = client
            .start(
                "tools/call",
                tool("echo", json!({ "text": text })),
                Some(LONG),
            )
            .expect("sent");
        let id = pending.id();
        pending.cancel("racing the answer");
        match wait_within(pending, PROMPT).0 {
            Ok(r) => {
                assert_eq!(first_text(&r), text);
                answered += 1;
            }
            r => {
                assert_cancelled_and_sent(&r);
                cancelled.push(id);
            }
        }
    }
    let took = ping_within(&*client, PROMPT);
    assert_eq!(metrics(&*client).cancels_sent, cancelled.len() as u64);
    let (record, _) = shutdown_within::<A>(client, LONG);
    // Whoever won the race, the cancel reached the server.
    for id in &cancelled {
        let seen = log_lines_for(&record, id)
            .iter()
            .any(|l| l.contains("cancel"))
            || record
                .stderr_tail
                .contains(&format!("fixture: cancel for unknown request {id} ignored"));
        assert!(seen, "the server never saw the cancel of request {id}");
    }
    let suppressed = record
        .stderr_tail
        .matches("response suppressed (cancelled)")
        .count() as u64;
    assert_eq!(
        record.metrics.late_responses + suppressed,
        cancelled.len() as u64,
        "each cancelled request is either suppressed by the server or a late response"
    );
    assert_eq!(record.metrics.unknown_id_responses, 0);
    eprintln!(
        "{}: {rounds} races: {} cancelled ({suppressed} suppressed by the server, {} late \
         responses), {answered} answered first; ping {took:?}",
        A::NAME,
        cancelled.len(),
        record.metrics.late_responses
    );
    leaks.assert_none_left();
}

/// G6/G8: a cancel sent right after the request — before the work's first
/// chunk is done (a chunk is 500 ms), often before it starts — stops `slow`
/// at its first check: after 0 chunks when the cancel beat the worker's
/// first check, else after 1 (the order of two lines on the server's side
/// cannot be forced from here). A ping completes promptly.
pub fn g8_cancel_sent_at_once_stops_the_work_within_its_first_chunk_then_ping_completes<
    A: Adapter,
>() {
    let mut leaks = LeakCheck::new::<A>("g8_before_work");
    let client = start::<A>(&mut leaks, &[], options_keeping_the_log(4 << 20));
    let pending = client
        .start(
            "tools/call",
            tool(
                "slow",
                json!({"chunks": 20, "delay_ms": 500, "honour_cancel": true}),
            ),
            Some(LONG),
        )
        .expect("sent");
    let id = pending.id();
    let t = Instant::now();
    pending.cancel("changed my mind");
    let (r, _) = wait_within(pending, PROMPT);
    let cancel_took = t.elapsed();
    assert_cancelled_and_sent(&r);
    let took = ping_within(&*client, PROMPT);
    let (record, _) = shutdown_within::<A>(client, LONG);
    assert_eq!(record.metrics.cancels_sent, 1);
    let lines = log_lines_for(&record, &id).join("\n");
    assert!(lines.contains("cancel received"), "{lines}");
    let chunks = number_after(&lines, "cancelled after ")
        .unwrap_or_else(|| panic!("no 'cancelled after' line:\n{lines}"));
    assert!(chunks <= 1, "work went on for {chunks} chunks:\n{lines}");
    eprintln!(
        "{}: cancel before work: local outcome in {cancel_took:?}, server stopped after {chunks} \
         chunks, ping {took:?}",
        A::NAME
    );
    leaks.assert_none_left();
}

/// G6/G7/G8: a cancel while the work blocks in `read()` wakes it at once; a
/// ping completes promptly.
pub fn g8_cancel_during_slow_io_then_ping_completes_promptly<A: Adapter>() {
    let mut leaks = LeakCheck::new::<A>("g8_slow_io");
    let client = start::<A>(&mut leaks, &[], options_keeping_the_log(4 << 20));
    let pid = client.pid();
    let pending = client
        .start(
            "tools/call",
            tool("slow_io", json!({"ms": 30_000})),
            Some(LONG),
        )
        .expect("sent");
    let id = pending.id();
    wait_until(PROMPT, POLL, || has_socket(pid)).expect("slow_io began its blocking read");
    pending.cancel("stop waiting");
    let (r, _) = wait_within(pending, PROMPT);
    assert_cancelled_and_sent(&r);
    let took = ping_within(&*client, PROMPT);
    let (record, _) = shutdown_within::<A>(client, LONG);
    assert_eq!(record.metrics.cancels_sent, 1);
    let lines = log_lines_for(&record, &id).join("\n");
    let ms = number_after(&lines, "slow_io cancelled after ")
        .unwrap_or_else(|| panic!("no 'slow_io cancelled' line:\n{lines}"));
    assert!(
        ms < 10_000,
        "the read was not woken by the cancel:\n{lines}"
    );
    eprintln!(
        "{}: cancel during slow I/O: read woken after {ms} ms of 30000, ping {took:?}",
        A::NAME
    );
    leaks.assert_none_left();
}

/// G6/G7/G8: a cancel while the work waits for a subprocess kills the
/// subprocess; a ping completes promptly.
pub fn g8_cancel_during_a_subprocess_kills_it_then_ping_completes_promptly<A: Adapter>() {
    let mut leaks = LeakCheck::new::<A>("g8_subprocess");
    let client = start::<A>(&mut leaks, &[], options_keeping_the_log(4 << 20));
    let pid = client.pid();
    let pending = client
        .start(
            "tools/call",
            tool("subprocess", json!({"seconds": 30})),
            Some(LONG),
        )
        .expect("sent");
    let id = pending.id();
    let mut sub = 0;
    wait_until(PROMPT, POLL, || {
        sub = group_members(pid)
            .into_iter()
            .find(|&p| p != pid)
            .unwrap_or(0);
        sub != 0
    })
    .expect("the subprocess started in the server's group");
    let t = Instant::now();
    pending.cancel("stop the subprocess");
    let (r, _) = wait_within(pending, PROMPT);
    assert_cancelled_and_sent(&r);
    let gone = wait_until(PROMPT, POLL, || !pid_alive(sub))
        .unwrap_or_else(|| panic!("subprocess {sub} still alive after the cancel"));
    let took = ping_within(&*client, PROMPT);
    let killed_in = t.elapsed();
    let (record, _) = shutdown_within::<A>(client, LONG);
    assert_eq!(record.metrics.cancels_sent, 1);
    let lines = log_lines_for(&record, &id).join("\n");
    assert!(
        lines.contains(&format!("subprocess {sub} started")),
        "the subprocess seen in the group is the request's:\n{lines}"
    );
    assert!(
        record
            .stderr_tail
            .contains(&format!("subprocess {sub} killed on cancel")),
        "{}",
        record.stderr_tail
    );
    eprintln!(
        "{}: cancel during a subprocess: subprocess {sub} gone {gone:?} after the cancel \
         ({killed_in:?} incl. ping), ping {took:?}",
        A::NAME
    );
    leaks.assert_none_left();
}

/// G6/G8: a cancel after the response began to arrive completes locally at
/// once; the rest of the line is read, counted as a late response and
/// ignored; a ping completes as soon as the server's writer is free.
pub fn g8_cancel_after_the_response_began_then_ping_completes<A: Adapter>() {
    let (bytes, chunk) = (2 << 20, 32 << 10);
    let mut leaks = LeakCheck::new::<A>("g8_after_response_began");
    let client = start::<A>(&mut leaks, &[], options_keeping_the_log(8 << 20));
    let base = metrics(&*client).stdout_bytes;
    // 64 chunks × 50 ms: the line takes ~3 s to write.
    let pending = client
        .start(
            "tools/call",
            tool(
                "stream_then_result",
                json!({"bytes": bytes, "chunk": chunk, "delay_ms": 50}),
            ),
            Some(LONG),
        )
        .expect("sent");
    let id = pending.id();
    wait_until(PROMPT, POLL, || {
        metrics(&*client).stdout_bytes >= base + 2 * chunk as u64
    })
    .expect("the response began to arrive");
    let t = Instant::now();
    pending.cancel("enough");
    let (r, _) = wait_within(pending, PROMPT);
    let local = t.elapsed();
    let at_cancel = metrics(&*client).stdout_bytes - base;
    assert_cancelled_and_sent(&r);
    assert!(
        at_cancel < bytes as u64,
        "the whole response had arrived before the cancel completed ({at_cancel} bytes)"
    );
    assert!(
        local < Duration::from_secs(1),
        "the cancel waited for the response: {local:?}"
    );
    // The server's writer lock is held until the line is complete.
    let took = ping_within(&*client, Duration::from_secs(20));
    let m = metrics(&*client);
    assert_eq!(m.late_responses, 1, "the finished line is a late response");
    assert_eq!(m.cancels_sent, 1);
    let (record, _) = shutdown_within::<A>(client, LONG);
    let lines = log_lines_for(&record, &id).join("\n");
    assert!(lines.contains("cancel after response began"), "{lines}");
    eprintln!(
        "{}: cancel after {at_cancel} of {bytes} response bytes: local outcome in {local:?}, \
         ping {took:?} (waits for the line to finish), late responses {}",
        A::NAME,
        m.late_responses
    );
    leaks.assert_none_left();
}

/// G6/G8: a request timeout is a real cancel: `TimedOut { cancel_sent: true }`,
/// the server's work sees the cancel and stops, a ping completes.
pub fn g6_g8_timeout_sends_a_cancel_that_reaches_the_work<A: Adapter>() {
    let timeout = Duration::from_millis(300);
    let mut leaks = LeakCheck::new::<A>("g6_timeout");
    let client = start::<A>(&mut leaks, &[], options_keeping_the_log(4 << 20));
    let t = Instant::now();
    let pending = client
        .start(
            "tools/call",
            tool(
                "slow",
                json!({"chunks": 200, "delay_ms": 50, "honour_cancel": true}),
            ),
            Some(timeout),
        )
        .expect("sent");
    let id = pending.id();
    let (r, _) = wait_within(pending, PROMPT);
    let timed_out_in = t.elapsed();
    match &r {
        Err(RequestError::Failed(RequestFailure::TimedOut {
            after,
            cancel_sent: true,
        })) => assert_eq!(*after, timeout),
        other => panic!("expected TimedOut {{ cancel_sent: true }}, got {other:?}"),
    }
    assert!(timed_out_in >= timeout, "{timed_out_in:?}");
    let took = ping_within(&*client, PROMPT);
    let (record, _) = shutdown_within::<A>(client, LONG);
    assert_eq!(record.metrics.timeouts, 1);
    assert_eq!(record.metrics.cancels_sent, 1);
    let lines = log_lines_for(&record, &id).join("\n");
    assert!(lines.contains("cancel received"), "{lines}");
    let chunks = number_after(&lines, "cancelled after ")
        .unwrap_or_else(|| panic!("the cancel did not stop the work:\n{lines}"));
    assert!(chunks < 200, "{lines}");
    eprintln!(
        "{}: timeout {timeout:?} observed after {timed_out_in:?}; server stopped after {chunks} \
         chunks; ping {took:?}",
        A::NAME
    );
    leaks.assert_none_left();
}

/// G6: a server that ignores cancels and answers anyway: the answer is
/// ignored and counted (`late_responses == 1`), never an error or an
/// incoming message, and the session goes on.
pub fn g6_late_response_after_cancel_is_ignored_and_counted<A: Adapter>() {
    let mut leaks = LeakCheck::new::<A>("g6_late");
    let client = start::<A>(
        &mut leaks,
        &["--late-response-after-cancel"],
        options_keeping_the_log(4 << 20),
    );
    let pending = client
        .start(
            "tools/call",
            tool(
                "slow",
                json!({"chunks": 4, "delay_ms": 50, "honour_cancel": true}),
            ),
            Some(LONG),
        )
        .expect("sent");
    let id = pending.id();
    pending.cancel("too slow");
    let (r, _) = wait_within(pending, PROMPT);
    assert_cancelled_and_sent(&r);
    let late_after = wait_until(PROMPT, POLL, || metrics(&*client).late_responses == 1)
        .expect("the late response arrives and is counted");
    let took = ping_within(&*client, PROMPT);
    let m = metrics(&*client);
    assert_eq!(m.late_responses, 1);
    assert_eq!(m.unknown_id_responses, 0);
    assert_eq!(parse_errors(&m), 0);
    assert!(
        client.next_incoming(Duration::from_millis(100)).is_none(),
        "a late response must not surface as an incoming message"
    );
    let (record, _) = shutdown_within::<A>(client, LONG);
    let lines = log_lines_for(&record, &id).join("\n");
    assert!(lines.contains("cancel ignored"), "{lines}");
    eprintln!(
        "{}: late response counted {late_after:?} after the cancel; ping {took:?}",
        A::NAME
    );
    leaks.assert_none_left();
}

/// G6: a request's deadline is explicit — the session's default (`None`
/// here), none at all (`Duration::MAX`, what `Deadline::None` gives), or
/// after a duration — and each behaves as it says: the explicit one fires at
/// its time, the default one at the session's, the one without a deadline
/// not at all (it is still running after both, and ends by its cancel).
pub fn g6_request_deadline_is_the_default_none_or_after_a_duration<A: Adapter>() {
    let (after, default) = (Duration::from_millis(150), Duration::from_millis(400));
    let mut leaks = LeakCheck::new::<A>("g6_deadline");
    let mut options = options_keeping_the_log(4 << 20);
    options.session_mut().default_timeout(Some(default));
    let client = start::<A>(&mut leaks, &[], options);
    let slow = || {
        tool(
            "slow",
            json!({"chunks": 400, "delay_ms": 50, "honour_cancel": true}),
        )
    };
    let t = Instant::now();
    let explicit = client
        .start("tools/call", slow(), Some(after))
        .expect("sent");
    let by_default = client.start("tools/call", slow(), None).expect("sent");
    let unbounded = client
        .start("tools/call", slow(), Some(Duration::MAX))
        .expect("sent");
    let timed_out = |r: &Result<_, RequestError>| match r {
        Err(RequestError::Failed(RequestFailure::TimedOut { after, .. })) => *after,
        other => panic!("expected a timeout, got {other:?}"),
    };
    let (r, _) = wait_within(explicit, PROMPT);
    assert_eq!(timed_out(&r), after);
    let explicit_at = t.elapsed();
    let (r, _) = wait_within(by_default, PROMPT);
    assert_eq!(timed_out(&r), default);
    let default_at = t.elapsed();
    // Twice the default later, the request without a deadline still runs.
    std::thread::sleep(default * 2);
    let still_running_at = t.elapsed();
    unbounded.cancel("the test is done with it");
    let (r, _) = wait_within(unbounded, PROMPT);
    assert!(
        matches!(
            r,
            Err(RequestError::Failed(RequestFailure::Cancelled { .. }))
        ),
        "expected the cancel to end it, got {r:?}"
    );
    let m = metrics(&*client);
    assert_eq!(m.timeouts, 2, "{m:?}");
    let (_, _) = shutdown_within::<A>(client, LONG);
    eprintln!(
        "{}: explicit {after:?} fired at {explicit_at:?}; default {default:?} at {default_at:?}; \
         no deadline still running at {still_running_at:?}, ended by its cancel",
        A::NAME
    );
    assert!(explicit_at >= after && default_at >= default);
    leaks.assert_none_left();
}
