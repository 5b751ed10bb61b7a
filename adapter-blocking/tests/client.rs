//! The blocking `Client` against the real fixture server, through real
//! process spawns. Bounds are generous so a loaded machine never flakes;
//! each test prints what it measured.

mod common;

use std::time::{Duration, Instant};

use common::{
    first_text, fixture, group_members, options, pid_alive, pid_exists, thread_cpu_ticks,
    thread_names, thread_wakeups, tool, wait_until,
};
use mcp_stdio_blocking::core::EndedBy;
use mcp_stdio_blocking::core::ExitStatus;
use mcp_stdio_blocking::core::{RequestFailure, SendError};
use mcp_stdio_blocking::{Client, ClientOptions, IncomingMessage, RequestError};
use serde_json::json;

fn start(flags: &[&str], options: ClientOptions) -> Client {
    let client = Client::spawn(&fixture(flags), options).expect("spawning the fixture server");
    let init = client.initialize().expect("initialize");
    assert_eq!(
        init.server_info.as_ref().expect("serverInfo").name,
        "fixture-server"
    );
    client
}

fn ping(client: &Client) -> Duration {
    let t = Instant::now();
    let r = client.request_with_timeout("ping", None, Some(Duration::from_secs(5)));
    let took = t.elapsed();
    assert!(r.is_ok(), "ping failed after {took:?}: {r:?}");
    took
}

fn assert_too_large(r: &Result<mcp_stdio_blocking::core::RawResult, RequestError>, limit: usize) {
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

#[test]
fn client_and_handles_are_send_and_sync_where_tokio_s_are() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Client>();
    send_sync::<mcp_stdio_blocking::CancelHandle>();
    send::<mcp_stdio_blocking::PendingRequest>();
    send::<IncomingMessage>();
}

#[test]
fn g1_handshake_ping_echo_and_shutdown_record() {
    let t = Instant::now();
    let client = start(&[], options(4 << 20));
    let init_took = t.elapsed();
    let ping_took = ping(&client);
    let r = client
        .request(
            "tools/call",
            tool("echo", json!({"text": "héllo \"wörld\"\n"})),
        )
        .expect("echo");
    assert_eq!(first_text(&r), "héllo \"wörld\"\n");
    let t = Instant::now();
    let record = client.shutdown();
    eprintln!(
        "spawn+initialize {init_took:?}; ping {ping_took:?}; shutdown {:?}; record {:?}",
        t.elapsed(),
        record.process
    );
    assert_eq!(record.exit_status(), Some(ExitStatus::Code(0)));
    assert_eq!(record.process.ended_by, EndedBy::ExitedAfterStdinClose);
    assert!(record.stderr_tail.contains("fixture: started pid"));
    // server/discover (refused: the fixture speaks the handshake), initialize, ping, echo.
    assert_eq!(record.metrics.requests_sent, 4);
}

#[test]
fn g1_8_mib_response_is_read_while_the_application_sleeps() {
    let client = start(&[], options(16 << 20));
    let t = Instant::now();
    let mut pending = client
        .start_request(
            "tools/call",
            tool("big", json!({"bytes": 8 << 20})),
            Some(Duration::from_secs(30)),
        )
        .expect("sent");
    // Wait until the server has begun writing (building 8 MiB of JSON takes
    // a debug build a while), so the sleep below overlaps its writing.
    let before = client.metrics().expect("live").stdout_bytes;
    assert!(
        wait_until(Duration::from_secs(20), || {
            client.metrics().expect("live").stdout_bytes > before
        })
        .is_some(),
        "the server never started writing"
    );
    let began = client.metrics().expect("live").stdout_bytes;
    // The application "thinks" for a second without touching the client.
    std::thread::sleep(Duration::from_secs(1));
    // The I/O thread kept reading meanwhile: far more than the pipe's 64 KiB
    // came in while nobody called the client (a paused reader would leave
    // the server blocked in `write` after one pipeful).
    let read_while_asleep = client.metrics().expect("live").stdout_bytes - began;
    let complete = pending.wait_timeout(Duration::ZERO);
    let complete_after_sleep = complete.is_some();
    let r = complete
        .or_else(|| pending.wait_timeout(Duration::from_secs(30)))
        .expect("within the deadline")
        .expect("8 MiB result");
    assert_eq!(first_text(&r).len(), 8 << 20);
    eprintln!(
        "read {read_while_asleep} bytes while the application slept 1 s \
         (complete then: {complete_after_sleep}); done after {:?}",
        t.elapsed()
    );
    // Either far more than a pipeful came in while the application slept,
    // or all 8 MiB already had (a fast machine reads it before the sleep
    // begins): the driver read it without the application asking.
    assert!(
        read_while_asleep > 1 << 20 || complete_after_sleep,
        "{read_while_asleep}"
    );
    // The same transfer, timed on its own.
    let t = Instant::now();
    let r = client
        .request_with_timeout(
            "tools/call",
            tool("big", json!({"bytes": 8 << 20})),
            Some(Duration::from_secs(30)),
        )
        .expect("8 MiB result");
    assert_eq!(first_text(&r).len(), 8 << 20);
    eprintln!("8 MiB response, application waiting: {:?}", t.elapsed());
    client.shutdown();
}

#[test]
fn g2_g3_over_limit_response_fails_at_once_then_ping_completes() {
    let limit = 256 * 1024;
    let client = start(&[], options(limit));
    let r = client.request(
        "tools/call",
        tool("big_exact", json!({"line_bytes": limit})),
    );
    assert!(r.is_ok(), "exactly at the limit must pass: {r:?}");
    let t = Instant::now();
    let r = client.request(
        "tools/call",
        tool("big_exact", json!({"line_bytes": limit + 1})),
    );
    let over_took = t.elapsed();
    assert_too_large(&r, limit);
    let t = Instant::now();
    let r = client.request_with_timeout(
        "tools/call",
        tool("big_exact", json!({"line_bytes": 64 << 20})),
        Some(Duration::from_secs(60)),
    );
    let big_took = t.elapsed();
    assert_too_large(&r, limit);
    let ping_took = ping(&client);
    let m = client.metrics().expect("live");
    assert_eq!(m.oversized_frames, 2);
    eprintln!("limit+1 failed in {over_took:?}, 64 MiB failed in {big_took:?}, ping {ping_took:?}");
    assert!(over_took < Duration::from_secs(2), "{over_took:?}");
    client.shutdown();
}

#[test]
fn g8_cancel_during_slow_work_then_ping_completes_promptly() {
    let client = start(&[], options(4 << 20));
    let pending = client
        .start_request(
            "tools/call",
            tool(
                "slow",
                json!({"chunks": 100, "delay_ms": 50, "honour_cancel": true}),
            ),
            Some(Duration::from_secs(30)),
        )
        .expect("sent");
    std::thread::sleep(Duration::from_millis(200));
    // Cancel from another thread, as a UI's stop button would.
    let handle = pending.cancel_handle();
    std::thread::spawn(move || handle.cancel("user pressed stop"))
        .join()
        .expect("cancel thread");
    let t = Instant::now();
    let r = pending.wait();
    let cancel_took = t.elapsed();
    assert!(
        matches!(
            r,
            Err(RequestError::Failed(RequestFailure::Cancelled {
                cancel_sent: true
            }))
        ),
        "{r:?}"
    );
    let ping_took = ping(&client);
    eprintln!("cancel completed in {cancel_took:?}; ping after cancel {ping_took:?}");
    let record = client.shutdown();
    assert!(
        record.stderr_tail.contains("cancelled after"),
        "{}",
        record.stderr_tail
    );
    assert_eq!(record.metrics.cancels_sent, 1);
}

#[test]
fn g6_timeout_sends_a_cancel_and_the_session_goes_on() {
    let client = start(&[], options(4 << 20));
    let t = Instant::now();
    let r = client.request_with_timeout(
        "tools/call",
        tool(
            "slow",
            json!({"chunks": 100, "delay_ms": 50, "honour_cancel": true}),
        ),
        Some(Duration::from_millis(300)),
    );
    let took = t.elapsed();
    assert!(r.as_ref().is_err_and(RequestError::is_timeout), "{r:?}");
    assert!(
        matches!(
            r,
            Err(RequestError::Failed(RequestFailure::TimedOut {
                cancel_sent: true,
                ..
            }))
        ),
        "{r:?}"
    );
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "{took:?}"
    );
    let ping_took = ping(&client);
    eprintln!("300 ms timeout fired after {took:?}; ping {ping_took:?}");
    let m = client.metrics().expect("live");
    assert_eq!((m.timeouts, m.cancels_sent), (1, 1));
    client.shutdown();
}

/// `wait_timeout` gives the outcome once; asked again, `SessionClosed`,
/// at once, and the session goes on.
#[test]
fn wait_timeout_gives_the_outcome_once() {
    let client = start(&[], options(4 << 20));
    let mut pending = client.start_request("ping", None, None).expect("sent");
    let first = pending
        .wait_timeout(Duration::from_secs(30))
        .expect("answered within 30 s");
    assert!(first.is_ok(), "{first:?}");
    let t = Instant::now();
    let again = pending.wait_timeout(Duration::from_secs(30));
    assert!(
        matches!(
            again,
            Some(Err(RequestError::Failed(RequestFailure::SessionClosed)))
        ),
        "{again:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    drop(pending);
    ping(&client);
    assert_eq!(
        client.metrics().expect("live").cancels_sent,
        0,
        "nothing to cancel"
    );
    client.shutdown();
}

#[test]
fn g6_dropping_a_pending_request_cancels_it() {
    let client = start(&[], options(4 << 20));
    let mut pending = client
        .start_request(
            "tools/call",
            tool(
                "slow",
                json!({"chunks": 100, "delay_ms": 50, "honour_cancel": true}),
            ),
            None,
        )
        .expect("sent");
    assert!(pending.wait_timeout(Duration::from_millis(100)).is_none());
    drop(pending);
    // Commands are handled in order: the cancel went before this ping.
    ping(&client);
    let m = client.metrics().expect("live");
    assert_eq!(m.cancels_sent, 1);
    let record = client.shutdown();
    assert!(
        record.stderr_tail.contains("cancel received"),
        "{}",
        record.stderr_tail
    );
}

#[test]
fn server_to_client_requests_and_notifications_reach_next_incoming() {
    let client = start(&[], options(4 << 20));
    // Notifications, then the result.
    let r = client
        .request(
            "tools/call",
            tool("notify_then_result", json!({"count": 3})),
        )
        .expect("result");
    assert_eq!(first_text(&r), "sent 3 notifications");
    for i in 0..3 {
        match client.next_incoming(Some(Duration::from_secs(5))) {
            Some(IncomingMessage::Notification(n)) => {
                assert_eq!(n.method, "notifications/message");
                let params = n.params.expect("params");
                assert!(params.get().contains(&format!("fixture notification {i}")));
            }
            other => panic!("expected notification {i}, got {other:?}"),
        }
    }
    assert!(client
        .next_incoming(Some(Duration::from_millis(50)))
        .is_none());
    // A request from the server, answered by this thread.
    let pending = client
        .start_request("tools/call", tool("server_request", json!({})), None)
        .expect("sent");
    match client.next_incoming(Some(Duration::from_secs(5))) {
        Some(IncomingMessage::Request(req, responder)) => {
            assert_eq!(req.method, "ping");
            assert_eq!(responder.id(), &req.id);
            let empty = mcp_stdio_blocking::core::to_raw(&json!({})).expect("json");
            responder.respond(Ok(empty)).expect("answered");
        }
        other => panic!("expected a ping request, got {other:?}"),
    }
    let r = pending.wait().expect("tool result");
    assert!(first_text(&r).starts_with("client answered"), "{}", r.get());
    let m = client.metrics().expect("live");
    assert_eq!(m.inbox_delivered, 4);
    client.shutdown();
}

#[test]
fn g10_stderr_flood_is_drained_and_budgeted() {
    let client = start(&[], options(4 << 20));
    let t = Instant::now();
    let r = client
        .request(
            "tools/call",
            tool("stderr_flood", json!({"bytes": 4 << 20})),
        )
        .expect("result");
    eprintln!("4 MiB of stderr drained in {:?}", t.elapsed());
    assert_eq!(first_text(&r), format!("wrote {} bytes to stderr", 4 << 20));
    let record = client.shutdown();
    assert!(record.stderr.seen >= 4 << 20, "{:?}", record.stderr);
    assert!(record.stderr.truncated);
    assert!(record
        .stderr_tail
        .starts_with("[stderr truncated: kept last"));
}

#[test]
fn g11_kill_escalates_to_sigkill_when_sigterm_is_ignored() {
    let client = start(
        &["--ignore-sigterm", "--ignore-stdin-eof"],
        options(4 << 20),
    );
    let t = Instant::now();
    let record = client.kill();
    let took = t.elapsed();
    eprintln!(
        "kill with SIGTERM ignored took {took:?}: {:?}",
        record.process
    );
    assert_eq!(record.process.ended_by, EndedBy::ExitedAfterKill);
    assert_eq!(record.exit_status(), Some(ExitStatus::Signal(9)));
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

#[test]
fn g11_drop_kills_the_process_group_and_the_io_thread_reaps_and_ends() {
    let client = start(&[], options(4 << 20));
    let pid = client.pid();
    let pending = client
        .start_request(
            "tools/call",
            tool("subprocess", json!({"seconds": 30})),
            None,
        )
        .expect("sent");
    // The server and its helper, in the server's group.
    assert!(
        wait_until(Duration::from_secs(5), || group_members(pid).len() >= 2).is_some(),
        "helper never started: {:?}",
        group_members(pid)
    );
    let members = group_members(pid);
    let io_thread = format!("mcp-io-{pid}");
    assert!(thread_names().contains(&io_thread));
    let t = Instant::now();
    drop(client);
    let drop_took = t.elapsed();
    // The pending request fails: the session is over.
    let r = pending.wait();
    assert!(
        matches!(r, Err(RequestError::Failed(RequestFailure::SessionClosed))),
        "{r:?}"
    );
    let gone = wait_until(Duration::from_secs(5), || {
        members.iter().all(|&p| !pid_alive(p))
    });
    let reaped = wait_until(Duration::from_secs(5), || !pid_exists(pid));
    let ended = wait_until(Duration::from_secs(5), || {
        !thread_names().contains(&io_thread)
    });
    eprintln!(
        "drop took {drop_took:?}; group {members:?} dead after {gone:?}; \
         server reaped after {reaped:?}; I/O thread ended after {ended:?}"
    );
    assert!(drop_took < Duration::from_millis(100), "{drop_took:?}");
    assert!(
        gone.is_some(),
        "group members alive: {:?}",
        group_members(pid)
    );
    assert!(reaped.is_some(), "the server was not reaped");
    assert!(ended.is_some(), "the I/O thread did not end");
}

#[test]
fn exit_is_observed_promptly_and_the_session_reports_closed() {
    let client = start(&[], options(4 << 20));
    let pid = client.pid();
    let t = Instant::now();
    rustix::process::kill_process_group(
        rustix::process::Pid::from_raw(pid as i32).expect("a pid"),
        rustix::process::Signal::KILL,
    )
    .expect("killpg");
    let seen = wait_until(Duration::from_secs(5), || client.is_finished());
    eprintln!("external SIGKILL observed as the end of the session after {seen:?}");
    assert!(seen.is_some_and(|d| d < Duration::from_secs(1)), "{seen:?}");
    assert!(client.metrics().is_none());
    let r = client.request("ping", None);
    assert!(
        matches!(r, Err(RequestError::Send(SendError::Closed))),
        "{r:?}"
    );
    assert!(client.next_incoming(None).is_none());
    let record = client.wait();
    assert_eq!(record.exit_status(), Some(ExitStatus::Signal(9)));
    // A KILL nobody here sent: recorded as a crash with its signal, however
    // stdout's EOF and the exit raced (G12).
    assert_eq!(
        record.process.ended_by,
        EndedBy::Crashed,
        "{:?}",
        record.process
    );
    eprintln!(
        "record after external kill: {:?}, {:?}",
        record.process.ended_by, record.close_reason
    );
    let _ = t;
}

#[test]
fn an_idle_session_does_not_spin() {
    let client = start(&[], options(4 << 20));
    let name = format!("mcp-io-{}", client.pid());
    // Settled: the handshake's replies are out.
    std::thread::sleep(Duration::from_millis(200));
    let before = thread_cpu_ticks(&name).expect("the I/O thread");
    let woken = thread_wakeups(&name).expect("the I/O thread");
    std::thread::sleep(Duration::from_secs(2));
    let after = thread_cpu_ticks(&name).expect("the I/O thread");
    let wakeups = thread_wakeups(&name).expect("the I/O thread") - woken;
    eprintln!(
        "I/O thread over 2 s idle: {} CPU ticks, {wakeups} wake-ups",
        after - before
    );
    // A tick is 10 ms; a busy loop would take ~200. An idle driver sleeps
    // in its poll without a timeout: no wake-up at all.
    assert!(after - before <= 2, "{} ticks", after - before);
    assert_eq!(wakeups, 0, "an idle driver woke up");
    client.shutdown();
}

#[test]
fn g10_the_stderr_grant_goes_back_to_the_pool_on_shutdown_and_on_drop() {
    use mcp_stdio_blocking::core::{PoolConfig, SharedRetentionPool};
    let pool = SharedRetentionPool::new(PoolConfig::default().limit(1 << 20));
    let mut opts = options(4 << 20);
    opts.stderr_pool(Some(pool.clone()));
    let a = start(&[], opts.clone());
    let b = start(&[], opts);
    assert_eq!(pool.stats().outstanding, 2);
    a.shutdown();
    assert_eq!(pool.stats().outstanding, 1);
    drop(b);
    // The I/O thread releases it when it has reaped the killed server.
    let back = wait_until(Duration::from_secs(5), || pool.stats().outstanding == 0);
    assert!(back.is_some(), "{:?}", pool.stats());
    assert_eq!(pool.stats().in_use, 0);
}

/// G6: a cancel issued before the next request reaches the server before it,
/// in every round: the driver takes flagged cancels before the turn's
/// commands. `cat` echoes what it receives, in order.
#[test]
fn g6_cancel_then_request_reach_the_wire_in_that_order() {
    let client = Client::spawn(
        &mcp_stdio_blocking::CommandSpec::new("cat"),
        ClientOptions::default(),
    )
    .expect("spawn cat");
    let mut order = Vec::new();
    // Kept: a dropped request would send a cancel of its own.
    let mut seconds = Vec::new();
    for round in 0..8 {
        let timeout = Some(Duration::from_secs(20));
        let first = client.start_request("first", None, timeout).expect("sent");
        first.cancel("then the next request");
        seconds.push(client.start_request("second", None, timeout).expect("sent"));
        order.clear();
        let end = Instant::now() + Duration::from_secs(10);
        while order.len() < 3 {
            let left = end.saturating_duration_since(Instant::now());
            match client.next_incoming(Some(left)) {
                Some(IncomingMessage::Request(r, _)) => order.push(r.method),
                Some(IncomingMessage::Notification(n)) => order.push(n.method),
                Some(_) => {}
                None => panic!("round {round}: nothing came back, got {order:?}"),
            }
        }
        assert_eq!(
            order,
            ["first", "notifications/cancelled", "second"],
            "round {round}"
        );
    }
    eprintln!("blocking: cancel before the next request in 8 rounds: {order:?}");
    let _ = client.kill();
}

/// No hang at the session's end: a command sent just as the driver finishes
/// gets its answer (`None`, an error) at once. Many short sessions
/// (`sh -c 'exit 0'`), each asked in a tight loop across the exit, hit the
/// race; a watchdog thread fails the test if one call never returns.
#[test]
fn g11_commands_racing_the_end_of_a_session_are_answered() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let done = done.clone();
        std::thread::spawn(move || {
            let t = Instant::now();
            while !done.load(Ordering::Acquire) {
                if t.elapsed() > Duration::from_secs(60) {
                    // A hung call cannot be unwound: end the test binary.
                    eprintln!("a command racing the session's end got no answer within 60 s");
                    std::process::exit(101);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let t = Instant::now();
    for round in 0..40 {
        let spec =
            mcp_stdio_blocking::core::CommandSpec::from_argv(["sh", "-c", "exit 0"]).expect("argv");
        let client = Client::spawn(&spec, ClientOptions::default()).expect("sh");
        loop {
            let metrics = client.metrics();
            let request = client.request_with_deadline(
                "tools/list",
                None,
                mcp_stdio_blocking::core::Deadline::None,
            );
            if metrics.is_none() && request.is_err() {
                break;
            }
        }
        let record = client.wait();
        assert!(record.process.exit_status.is_some(), "round {round}");
    }
    done.store(true, Ordering::Release);
    watchdog.join().expect("the watchdog saw every call return");
    eprintln!(
        "40 sessions ended with commands racing their end: {:?}",
        t.elapsed()
    );
}
