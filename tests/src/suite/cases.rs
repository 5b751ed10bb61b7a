//! G1 and the first gates: the basic session, an 8 MiB response while the
//! application is busy (and the baseline that proves that test can fail),
//! the wire limit, a cancel during slow work.

use std::time::{Duration, Instant};

use mcp_stdio_core::EndedBy;
use mcp_stdio_core::ExitStatus;
use serde_json::json;

use super::{
    assert_cancelled_and_sent, assert_streams_ended, assert_too_large, first_text, metrics,
    options, options_keeping_the_log, ping_within, shutdown_within, start, tool, wait_within,
    LeakCheck, UnreadStdoutHost, LONG, PROMPT,
};
use crate::adapter::{Adapter, SuiteClient};

/// How long the application "thinks" without touching the client.
const BUSY: Duration = Duration::from_secs(2);
const EIGHT_MIB: usize = 8 << 20;

/// G1 baseline (proves the G1 test can fail): a host that spawns the server
/// with plain `std::process::Command` and does not read its stdout leaves
/// the server stuck in `write()` of an 8 MiB response.
pub fn g1_baseline_a_host_that_does_not_read_stdout_leaves_the_server_stuck_in_write<A: Adapter>() {
    let mut leaks = LeakCheck::new::<A>("g1_baseline");
    let mut host = UnreadStdoutHost::spawn(&mut leaks);
    // The initialize response is small: it fits the pipe even unread.
    host.send(
        &json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},
        "clientInfo":{"name":"g1-baseline","version":"0"}}}),
    );
    host.wait_stderr("response 1 written", PROMPT);
    host.send(&json!({"jsonrpc":"2.0","id":2,"method":"tools/call",
        "params":{"name":"big","arguments":{"bytes":EIGHT_MIB}}}));
    host.wait_stderr("response 2 writing", PROMPT);
    // The absence of a log line over time is the observation, so this sleep
    // is the measurement, not a synchronisation.
    std::thread::sleep(BUSY);
    assert!(host.is_running(), "the server is alive");
    assert!(
        !host.stderr_has("response 2 written"),
        "an 8 MiB response cannot fit an unread pipe: the server must still be in write()"
    );
    let wchans = host.thread_wchans();
    // Where the kernel shows wait channels ("0" where it hides them), the
    // writing thread sits in the pipe write.
    if wchans.iter().any(|w| w.trim() != "0") {
        assert!(
            wchans.iter().any(|w| w.contains("pipe_write")),
            "no thread blocked in a pipe write: {wchans:?}"
        );
    }
    eprintln!(
        "{}: baseline: after {BUSY:?} unread, response 2 still not written; thread wchans \
         {wchans:?}",
        A::NAME
    );
    drop(host);
    leaks.assert_none_left();
}

/// G1: the basic session works end to end and the record holds observed facts.
pub fn g1_handshake_ping_echo_and_shutdown_record<A: Adapter>() {
    let mut leaks = LeakCheck::new::<A>("g1_handshake");
    let client = start::<A>(&mut leaks, &[], options(4 << 20));
    let took = ping_within(&*client, PROMPT);
    let r = client
        .request(
            "tools/call",
            tool("echo", json!({"text": "héllo \"wörld\"\n"})),
            None,
        )
        .expect("echo");
    assert_eq!(first_text(&r), "héllo \"wörld\"\n");
    let (record, shutdown) = shutdown_within::<A>(client, LONG);
    eprintln!(
        "{}: ping {took:?}; shutdown {shutdown:?}; record {:?}",
        A::NAME,
        record.process
    );
    assert_eq!(record.exit_status(), Some(ExitStatus::Code(0)));
    assert_eq!(record.process.ended_by, EndedBy::ExitedAfterStdinClose);
    assert_streams_ended(&record);
    leaks.assert_none_left();
}

/// G1: an 8 MiB response arrives while the application thread is busy
/// elsewhere (it does not touch the client at all for 2 s): the client reads
/// it meanwhile, where the baseline host leaves the server stuck.
pub fn g1_8_mib_response_completes_while_the_application_is_busy<A: Adapter>() {
    let mut leaks = LeakCheck::new::<A>("g1_8_mib");
    let client = start::<A>(&mut leaks, &[], options(16 << 20));
    let t = Instant::now();
    let pending = client
        .start(
            "tools/call",
            tool("big", json!({"bytes": EIGHT_MIB})),
            Some(LONG),
        )
        .expect("sent");
    // The application "thinks" without touching the client.
    std::thread::sleep(BUSY);
    let read_while_busy = metrics(&*client).stdout_bytes;
    // An unread pipe holds 64 KiB; 1 MiB read proves the reader ran meanwhile.
    assert!(
        read_while_busy >= 1 << 20,
        "only {read_while_busy} bytes read while the application was busy"
    );
    let (r, waited) = wait_within(pending, LONG);
    let r = r.expect("8 MiB result");
    assert_eq!(first_text(&r).len(), EIGHT_MIB);
    eprintln!(
        "{}: 8 MiB response: {read_while_busy} bytes read during the {BUSY:?} busy period, \
         then complete {waited:?} later ({:?} in all)",
        A::NAME,
        t.elapsed()
    );
    let m = metrics(&*client);
    assert!(m.stdout_bytes >= EIGHT_MIB as u64);
    shutdown_within::<A>(client, LONG);
    leaks.assert_none_left();
}

/// G1/G3: the same 8 MiB response under a 1 MiB wire limit fails with
/// `ResponseTooLarge` — never hangs — while the application is busy, and the
/// client keeps draining the rest of the line so the session goes on.
pub fn g1_g3_8_mib_response_over_a_1_mib_limit_fails_while_the_application_is_busy<A: Adapter>() {
    let limit = 1 << 20;
    let mut leaks = LeakCheck::new::<A>("g1_g3_1_mib");
    let client = start::<A>(&mut leaks, &[], options(limit));
    let pending = client
        .start(
            "tools/call",
            tool("big", json!({"bytes": EIGHT_MIB})),
            Some(LONG),
        )
        .expect("sent");
    std::thread::sleep(BUSY);
    let read_while_busy = metrics(&*client).stdout_bytes;
    assert!(
        read_while_busy >= 1 << 20,
        "only {read_while_busy} bytes read while the application was busy"
    );
    let (r, waited) = wait_within(pending, LONG);
    assert_too_large(&r, limit);
    // The whole line was read and thrown away (the server is not stuck).
    let drained = crate::wait_until(LONG, super::POLL, || {
        metrics(&*client).oversized_bytes_discarded + limit as u64 >= EIGHT_MIB as u64
    });
    assert!(drained.is_some(), "the oversized line was not drained");
    let took = ping_within(&*client, PROMPT);
    let m = metrics(&*client);
    assert_eq!(m.oversized_frames, 1);
    eprintln!(
        "{}: 8 MiB over a 1 MiB limit: {read_while_busy} bytes read while busy, failure seen \
         {waited:?} after the busy period, {} bytes discarded, ping {took:?}",
        A::NAME,
        m.oversized_bytes_discarded
    );
    shutdown_within::<A>(client, LONG);
    leaks.assert_none_left();
}

/// G3: an oversized response whose `"id"` comes last (`{result, jsonrpc, id}`,
/// the TypeScript SDK's order) fails with `ResponseTooLarge` as soon as its
/// line ends, not at the request's 60 s timeout; the session goes on.
pub fn g3_id_last_oversized_response_fails_at_its_end_not_at_the_timeout<A: Adapter>() {
    let limit = 1 << 20;
    let timeout = Duration::from_secs(60);
    let mut leaks = LeakCheck::new::<A>("g3_id_last");
    let client = start::<A>(&mut leaks, &[], options(limit));
    for _ in 0..2 {
        let t = Instant::now();
        let r = client.request(
            "tools/call",
            tool("big_id_last", json!({"bytes": 4 << 20})),
            Some(timeout),
        );
        let failed_in = t.elapsed();
        assert_too_large(&r, limit);
        assert!(
            failed_in < Duration::from_secs(10),
            "took {failed_in:?} (the timeout is {timeout:?})"
        );
        eprintln!(
            "{}: 4 MiB response with its id last over a 1 MiB limit failed in {failed_in:?} \
             (request timeout {timeout:?})",
            A::NAME
        );
    }
    let took = ping_within(&*client, PROMPT);
    let m = metrics(&*client);
    assert_eq!(m.oversized_frames, 2);
    assert_eq!(m.oversized_ids_missing, 0);
    eprintln!("{}: then ping {took:?}", A::NAME);
    shutdown_within::<A>(client, LONG);
    leaks.assert_none_left();
}

/// G2/G3: a response exactly at the limit passes; one byte over fails at once
/// (id recovered), and a ping then succeeds.
pub fn g2_g3_response_just_under_the_limit_passes_just_over_fails_at_once<A: Adapter>() {
    let limit = 256 * 1024;
    let mut leaks = LeakCheck::new::<A>("g2_g3_limit");
    let client = start::<A>(&mut leaks, &[], options(limit));
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
    let took = ping_within(&*client, PROMPT);
    let m = metrics(&*client);
    assert_eq!(m.oversized_frames, 2);
    eprintln!(
        "{}: over-limit failed in {failed_in:?}, 64 MiB failed in {big_failed_in:?}, ping {took:?}",
        A::NAME
    );
    shutdown_within::<A>(client, LONG);
    leaks.assert_none_left();
}

/// G6/G8: cancel during slow work; the server stops, and a second request
/// completes promptly.
pub fn g8_cancel_during_slow_work_then_ping_completes_promptly<A: Adapter>() {
    let mut leaks = LeakCheck::new::<A>("g8_slow");
    let client = start::<A>(&mut leaks, &[], options_keeping_the_log(4 << 20));
    let pending = client
        .start(
            "tools/call",
            tool(
                "slow",
                json!({"chunks": 100, "delay_ms": 50, "honour_cancel": true}),
            ),
            Some(LONG),
        )
        .expect("sent");
    std::thread::sleep(Duration::from_millis(200));
    pending.cancel("user pressed stop");
    let (r, _) = wait_within(pending, PROMPT);
    assert_cancelled_and_sent(&r);
    let took = ping_within(&*client, PROMPT);
    eprintln!("{}: ping after cancel {took:?}", A::NAME);
    let (record, _) = shutdown_within::<A>(client, LONG);
    assert!(
        record.stderr_tail.contains("cancelled after"),
        "{}",
        record.stderr_tail
    );
    assert_eq!(record.metrics.cancels_sent, 1);
    leaks.assert_none_left();
}
