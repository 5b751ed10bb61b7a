//! G6/G11/G12 where each adapter's own wait loop could decide differently:
//! which of two events ready in the same turn is handled first (the last
//! stdout bytes or EOF, and the child's exit), and how the one timer of a
//! session follows a deadline that moves later or goes away. The core makes
//! every decision; these cases pin that the loops feeding it do not change
//! the outcome, on every adapter, many sessions over so that a random order
//! shows.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mcp_stdio_core::EndedBy;
use mcp_stdio_core::ExitStatus;
use mcp_stdio_core::RequestFailure;
use mcp_stdio_core::{ClientOptions, RequestError, SessionRecord};
use serde_json::json;

use super::{
    assert_cancelled_and_sent, assert_streams_ended, bounded, first_text, metrics, options,
    ping_within, shutdown_within, start, tool, wait_within, LeakCheck, LONG, PROMPT,
};
use crate::adapter::{Adapter, SuiteClient, SuitePending};

/// Sessions per exit case: a coin-flip order between exit and EOF fails one
/// of 20 with probability 1 - 2^-20.
const SESSIONS: usize = 20;
/// Notifications written just before the exit: a few pipe-fulls, so the
/// client is in the middle of reading when the server exits.
const BURST: usize = 256 << 10;
/// How late a deadline may fire on a loaded 2-core machine.
const LATE: Duration = Duration::from_secs(3);

/// The exit code of session `i`: 0 and a non-zero one, alternating.
fn code_of(i: usize) -> u64 {
    if i.is_multiple_of(2) {
        0
    } else {
        3
    }
}

/// Waits for a session that ends by itself.
fn wait_for_end<A: Adapter>(client: Box<A::Client>) -> (SessionRecord, Duration) {
    bounded(LONG, &format!("{}: wait", A::NAME), move || client.wait())
}

/// Each record's `ended_by`, and the facts the order of one turn may move
/// (how each stream ended, whether the exit came after the stdin close the
/// EOF started), counted — printed before any assertion, so a failure shows
/// the whole spread, not only the first bad session.
fn tally(records: &[(u64, SessionRecord)]) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for (_, r) in records {
        let p = &r.process;
        let key = format!(
            "{:?} (stdout {:?}, stderr {:?}, exit {} the stdin close)",
            p.ended_by,
            p.stdout,
            p.stderr,
            if p.shutdown_to_exit.is_some() {
                "after"
            } else {
                "before"
            }
        );
        *seen.entry(key).or_default() += 1;
    }
    seen
}

/// The record of a server that exited by itself with `code`: that exit
/// status, `ExitedByItself`, no cancel, no signal sent, both streams at EOF.
fn assert_exited_by_itself<A: Adapter>(i: usize, code: u64, record: &SessionRecord) {
    let p = &record.process;
    let code = i32::try_from(code).expect("small");
    assert_eq!(
        record.exit_status(),
        Some(ExitStatus::Code(code)),
        "{}: session {i}: {p:?}",
        A::NAME
    );
    assert_eq!(
        p.ended_by,
        EndedBy::ExitedByItself,
        "{}: session {i}: the server exited by itself: {p:?}",
        A::NAME
    );
    assert_eq!(p.cancel_to_exit, None, "{}: session {i}: {p:?}", A::NAME);
    assert_eq!(p.term_sent_at, None, "{}: session {i}: {p:?}", A::NAME);
    assert_eq!(p.kill_sent_at, None, "{}: session {i}: {p:?}", A::NAME);
    assert_streams_ended(record);
}

/// G11/G12: a server that answers, then writes a burst of notifications and
/// exits at once (code 0 and code 3 alternating, 20 sessions, nothing
/// pending when it exits) is recorded `ExitedByItself` with its own exit
/// code every time — whatever order the loop handles the exit and the
/// stdout EOF in (both are ready in one turn). The stdin close the EOF
/// starts is a consequence, not the cause.
pub fn g12_a_server_exiting_by_itself_after_a_burst_is_recorded_exited_by_itself<A: Adapter>() {
    let mut leaks = LeakCheck::new::<A>("g12_exit_burst");
    let t = Instant::now();
    let mut records = Vec::new();
    let mut ends = Vec::new();
    for i in 0..SESSIONS {
        let code = code_of(i);
        let client = start::<A>(&mut leaks, &[], options(4 << 20));
        let r = client.request(
            "tools/call",
            tool(
                "respond_then_exit",
                json!({"code": code, "bytes": 64, "notify_bytes": BURST}),
            ),
            Some(PROMPT),
        );
        let r = r.unwrap_or_else(|e| panic!("{}: session {i}: the answer: {e}", A::NAME));
        assert_eq!(first_text(&r).len(), 64);
        let (record, took) = wait_for_end::<A>(client);
        ends.push(took);
        records.push((code, record));
    }
    let seen = tally(&records);
    eprintln!(
        "{}: {SESSIONS} servers exiting after a {BURST}-byte burst (codes 0/3): ended by {seen:?}; \
         the end {:?} at most after the answer; {:?} in all",
        A::NAME,
        ends.iter().max(),
        t.elapsed()
    );
    for (i, (code, record)) in records.iter().enumerate() {
        assert_exited_by_itself::<A>(i, *code, record);
    }
    leaks.assert_none_left();
}

/// G11/G12: a server that writes a burst and exits (code 0 and 3
/// alternating, 20 sessions) while two requests wait — a slow one and the
/// call that exits — fails both with `SessionClosed` promptly (not at their
/// 30 s deadlines) and is recorded `ExitedByItself` with its own code every
/// time.
pub fn g12_a_server_exiting_by_itself_with_requests_pending_fails_them_with_session_closed<
    A: Adapter,
>() {
    let mut leaks = LeakCheck::new::<A>("g12_exit_pending");
    let mut records = Vec::new();
    let mut slowest = Duration::ZERO;
    for i in 0..SESSIONS {
        let code = code_of(i);
        let client = start::<A>(&mut leaks, &[], options(4 << 20));
        let slow = client
            .start(
                "tools/call",
                tool("slow", json!({"chunks": 600, "delay_ms": 50})),
                Some(LONG),
            )
            .expect("sent");
        let t = Instant::now();
        let exiting = client
            .start(
                "tools/call",
                tool("exit", json!({"code": code, "notify_bytes": BURST})),
                Some(LONG),
            )
            .expect("sent");
        for (what, pending) in [("the exit call", exiting), ("the slow call", slow)] {
            let (r, _) = wait_within(pending, PROMPT);
            assert!(
                matches!(r, Err(RequestError::Failed(RequestFailure::SessionClosed))),
                "{}: session {i}: {what}: {r:?}",
                A::NAME
            );
        }
        let failed_after = t.elapsed();
        slowest = slowest.max(failed_after);
        assert!(
            failed_after < PROMPT,
            "{}: session {i}: {failed_after:?}",
            A::NAME
        );
        let (record, _) = wait_for_end::<A>(client);
        records.push((code, record));
    }
    let seen = tally(&records);
    eprintln!(
        "{}: {SESSIONS} servers exiting with 2 requests pending: both failed SessionClosed within \
         {slowest:?} of the exit call at most; ended by {seen:?}",
        A::NAME
    );
    for (i, (code, record)) in records.iter().enumerate() {
        assert_exited_by_itself::<A>(i, *code, record);
    }
    leaks.assert_none_left();
}

/// G1/G12: the last response and the exit in one turn. The server writes
/// its answer and exits at once (20 sessions; answers of 100 B and 200 KB,
/// codes 0 and 3 alternating): the answer is delivered whole every time —
/// never lost to the exit or the EOF — and the record says `ExitedByItself`
/// with the server's code.
pub fn g12_a_last_response_written_just_before_the_exit_is_delivered<A: Adapter>() {
    let mut leaks = LeakCheck::new::<A>("g12_respond_exit");
    let mut records = Vec::new();
    let mut slowest = Duration::ZERO;
    for i in 0..SESSIONS {
        let code = code_of(i);
        let bytes = if i % 4 < 2 { 100 } else { 200_000 };
        let client = start::<A>(&mut leaks, &[], options(4 << 20));
        let t = Instant::now();
        let r = client.request(
            "tools/call",
            tool("respond_then_exit", json!({"code": code, "bytes": bytes})),
            Some(PROMPT),
        );
        let took = t.elapsed();
        slowest = slowest.max(took);
        let r = r.unwrap_or_else(|e| {
            panic!(
                "{}: session {i}: the last answer ({bytes} B, exit {code}) was lost: {e}",
                A::NAME
            )
        });
        let text = first_text(&r);
        assert!(
            text.len() == bytes && text.bytes().all(|b| b == b'x'),
            "{}: session {i}: {} bytes of answer, {bytes} expected",
            A::NAME,
            text.len()
        );
        let (record, _) = wait_for_end::<A>(client);
        records.push((code, record));
    }
    let seen = tally(&records);
    eprintln!(
        "{}: {SESSIONS} answers written just before the exit: all delivered, the slowest in \
         {slowest:?}; ended by {seen:?}",
        A::NAME
    );
    for (i, (code, record)) in records.iter().enumerate() {
        assert_exited_by_itself::<A>(i, *code, record);
    }
    leaks.assert_none_left();
}

/// A `slow` call of `chunks` × 50 ms that stops at its cancel.
fn slow_call(chunks: u64) -> Option<Box<mcp_stdio_core::RawValue>> {
    tool(
        "slow",
        json!({"chunks": chunks, "delay_ms": 50, "honour_cancel": true}),
    )
}

/// The `after` of a `TimedOut`, or a panic naming what came instead.
fn timed_out_after(who: &str, r: &Result<impl std::fmt::Debug, RequestError>) -> Duration {
    match r {
        Err(RequestError::Failed(RequestFailure::TimedOut { after, .. })) => *after,
        other => panic!("{who}: expected a timeout, got {other:?}"),
    }
}

/// Waits for `pending` (sent at `sent`) to time out after `after`; asserts
/// it did, not before `after` and not later than [`LATE`] past it. Returns
/// when it fired, measured from `sent`.
fn assert_fires_at(
    who: &str,
    pending: Box<dyn SuitePending>,
    sent: Instant,
    after: Duration,
) -> Duration {
    let (r, _) = wait_within(pending, after + LATE + PROMPT);
    let at = sent.elapsed();
    assert_eq!(timed_out_after(who, &r), after, "{who}");
    assert!(at >= after, "{who}: a {after:?} deadline fired at {at:?}");
    assert!(
        at < after + LATE,
        "{who}: a {after:?} deadline fired late, at {at:?}"
    );
    at
}

/// G6: a deadline that moves later. A request with a 300 ms deadline is
/// cancelled at once, and pings with 200 ms deadlines are answered long
/// before theirs, while a request with a 1.5 s deadline waits: each time the
/// earliest deadline goes away and the next one is later. The 1.5 s request
/// times out at its own deadline — not at a stale earlier one, not late —
/// and it is the only timeout.
pub fn g6_a_deadline_that_moves_later_fires_at_its_own_time<A: Adapter>() {
    let (short, long) = (Duration::from_millis(300), Duration::from_millis(1500));
    let mut leaks = LeakCheck::new::<A>("g6_moves_later");
    let client = start::<A>(&mut leaks, &[], options(4 << 20));
    let sent = Instant::now();
    let waiting = client
        .start("tools/call", slow_call(600), Some(long))
        .expect("sent");
    let cancelled = client
        .start("tools/call", slow_call(600), Some(short))
        .expect("sent");
    cancelled.cancel("the deadline goes away");
    let (r, _) = wait_within(cancelled, PROMPT);
    assert_cancelled_and_sent(&r);
    // Until past the cancelled deadline: a short deadline each time, gone at the answer.
    let mut pings = 0;
    while sent.elapsed() < short + Duration::from_millis(200) {
        ping_within(&*client, Duration::from_millis(200));
        pings += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    let fired = assert_fires_at(A::NAME, waiting, sent, long);
    let m = metrics(&*client);
    assert_eq!(m.timeouts, 1, "{}: {m:?}", A::NAME);
    ping_within(&*client, PROMPT);
    let (_, _) = shutdown_within::<A>(client, LONG);
    eprintln!(
        "{}: a {long:?} deadline after a cancelled {short:?} one and {pings} answered pings \
         (200 ms deadlines): fired at {fired:?}, the only timeout",
        A::NAME
    );
    leaks.assert_none_left();
}

/// G6: a deadline that goes away with none after it. A request with a
/// 300 ms deadline is cancelled at once while one without a deadline (a 1.5 s
/// piece of work) runs: no timer left over from the cancelled deadline fails
/// it; it completes with its result at about 1.5 s, and there is no timeout.
/// A second round after that (another cancelled 300 ms deadline, another
/// request without one) does the same on the same session.
pub fn g6_a_removed_deadline_leaves_no_timer_to_fail_a_request_without_one<A: Adapter>() {
    let short = Duration::from_millis(300);
    let mut leaks = LeakCheck::new::<A>("g6_removed");
    let client = start::<A>(&mut leaks, &[], options(4 << 20));
    let mut took = Vec::new();
    for round in 0..2 {
        let t = Instant::now();
        let unbounded = client
            .start("tools/call", slow_call(30), Some(Duration::MAX))
            .expect("sent");
        let cancelled = client
            .start("tools/call", slow_call(600), Some(short))
            .expect("sent");
        cancelled.cancel("the deadline goes away");
        let (r, _) = wait_within(cancelled, PROMPT);
        assert_cancelled_and_sent(&r);
        let (r, _) = wait_within(unbounded, LONG);
        let at = t.elapsed();
        let r = r.unwrap_or_else(|e| {
            panic!(
                "{}: round {round}: a request without a deadline failed at {at:?}: {e}",
                A::NAME
            )
        });
        assert_eq!(first_text(&r), "slow done after 30 chunks");
        assert!(at >= Duration::from_millis(1500), "{at:?}");
        took.push(at);
    }
    let m = metrics(&*client);
    assert_eq!(m.timeouts, 0, "{}: {m:?}", A::NAME);
    let (_, _) = shutdown_within::<A>(client, LONG);
    eprintln!(
        "{}: requests without a deadline after a cancelled {short:?} one completed at {took:?}, \
         no timeout",
        A::NAME
    );
    leaks.assert_none_left();
}

/// G6: the session's default deadline (400 ms) and an explicit later one
/// (1.2 s), both pending at once: the request without its own deadline
/// times out at the default, the other is not taken along — it times out
/// at its own 1.2 s, not at the default and not late.
pub fn g6_an_explicit_deadline_later_than_the_default_is_kept<A: Adapter>() {
    let (default, later) = (Duration::from_millis(400), Duration::from_millis(1200));
    let mut leaks = LeakCheck::new::<A>("g6_default_later");
    let mut opts: ClientOptions = options(4 << 20);
    opts.session_mut().default_timeout(Some(default));
    let client = start::<A>(&mut leaks, &[], opts);
    let sent = Instant::now();
    let explicit = client
        .start("tools/call", slow_call(600), Some(later))
        .expect("sent");
    let by_default = client
        .start("tools/call", slow_call(600), None)
        .expect("sent");
    let default_at = assert_fires_at(A::NAME, by_default, sent, default);
    let later_at = assert_fires_at(A::NAME, explicit, sent, later);
    let m = metrics(&*client);
    assert_eq!(m.timeouts, 2, "{}: {m:?}", A::NAME);
    let (_, _) = shutdown_within::<A>(client, LONG);
    eprintln!(
        "{}: the default {default:?} fired at {default_at:?}, the explicit {later:?} at \
         {later_at:?}",
        A::NAME
    );
    leaks.assert_none_left();
}
