//! The guard session's unit tests.

use super::*;
use crate::process::supervisor::EndedBy;
use crate::records::call::CallState;
use crate::{CallSpan, ProcessStats, SpanTarget, StatusIdentity, StatusPortCounters, TraceContext};

struct Clock {
    base: Instant,
}

impl Clock {
    fn at(&self, ms: u64) -> Stamp {
        Stamp::new(
            self.base + Duration::from_millis(ms),
            1_700_000_000_000 + ms,
        )
    }
}

fn session(max_buffered: usize) -> (GuardSession, Clock) {
    let mut config = GuardConfig::default();
    config.proxy_mut().max_buffered(max_buffered);
    config
        .supervisor_mut()
        .stdin_close_grace(Duration::from_secs(1))
        .term_grace(Duration::from_secs(1));
    config.stderr_forward(10);
    let clock = Clock {
        base: Instant::now(),
    };
    let mut s = GuardSession::new(config);
    s.handle_spawned(clock.at(0));
    (s, clock)
}

/// G10: the stderr capture keeps at most what the process's pool
/// grants, even when the per-call budget is larger.
#[test]
fn g10_stderr_capture_is_bounded_by_the_pool() {
    let mut pool = crate::process::capture::PoolConfig::default();
    pool.limit(4096).reserve(0);
    let pool = SharedRetentionPool::new(&pool);
    let mut config = GuardConfig::default();
    config.stderr_capture_mut().tail(16 * 1024);
    config.stderr_pool(Some(pool.clone()));
    let clock = Clock {
        base: Instant::now(),
    };
    let mut s = GuardSession::new(config);
    s.handle_spawned(clock.at(0));
    assert_eq!(pool.stats().in_use, 4096);
    for i in 0..64 {
        s.handle_server_stderr(clock.at(i), &[b'e'; 1024]);
    }
    let report = s.report(256);
    assert_eq!(report.stderr.retained, 4096, "{:?}", report.stderr);
    assert_eq!(report.stderr.seen, 64 * 1024);
}

fn actions(s: &mut GuardSession) -> Vec<GuardAction> {
    std::iter::from_fn(|| s.poll_action()).collect()
}

/// The session's one output stream gives the host one message at a
/// time (the next once the last was taken, so a cancel can still
/// withdraw a response not yet started), records before the bytes for
/// the server, and closes a server reader at its end.
#[test]
fn the_output_stream_orders_records_and_gives_the_host_one_message_at_a_time() {
    let (mut s, clock) = session(1 << 20);
    let request =
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"t\"}}\n";
    let read = GuardInput::HostRead {
        result: Ok(request.len()),
        buf: request,
    };
    s.handle_input(clock.at(1), read);
    assert!(matches!(s.poll_output(), GuardOutput::Record(_)));
    let GuardOutput::ToServer(out) = s.poll_output() else {
        panic!("the request is offered after its record");
    };
    let n = out.bytes().len();
    s.handle_input(clock.at(1), GuardInput::ServerWritten(Ok(n)));
    let two = b"{\"jsonrpc\":\"2.0\",\"method\":\"a\"}\n{\"jsonrpc\":\"2.0\",\"method\":\"b\"}\n";
    s.handle_server_stdout(clock.at(2), two);
    let first = loop {
        match s.poll_output() {
            GuardOutput::ToHost(b) => break b.bytes().to_vec(),
            GuardOutput::Timeout(_) => panic!("the first message is offered"),
            _ => {}
        }
    };
    assert!(first.ends_with(b"\"a\"}\n"), "{first:?}");
    // The host's writer takes nothing now: nothing is offered until it can.
    s.handle_input(
        clock.at(3),
        GuardInput::HostWrote(Err(std::io::ErrorKind::WouldBlock.into())),
    );
    assert!(
        !std::iter::from_fn(|| match s.poll_output() {
            GuardOutput::Timeout(_) => None,
            other => Some(matches!(other, GuardOutput::ToHost(_))),
        })
        .any(|to_host| to_host),
        "nothing for a full host"
    );
    s.handle_input(clock.at(3), GuardInput::HostWritable);
    // Part of it taken: the rest is offered, not the second message.
    s.handle_input(clock.at(3), GuardInput::HostWrote(Ok(3)));
    let GuardOutput::ToHost(rest) = s.poll_output() else {
        panic!("the rest of the first message");
    };
    assert_eq!(rest.bytes(), &first[3..]);
    s.handle_input(clock.at(3), GuardInput::HostWrote(Ok(first.len() - 3)));
    let GuardOutput::ToHost(second) = s.poll_output() else {
        panic!("the second message once the first is taken");
    };
    assert!(second.bytes().ends_with(b"\"b\"}\n"));
    let look = &mut || Ok(None);
    let end = GuardInput::ServerRead {
        stream: ChildStream::Stderr,
        result: Ok(0),
        buf: &[],
        look,
    };
    s.handle_input(clock.at(4), end);
    assert!(matches!(
        s.poll_output(),
        GuardOutput::Action(GuardAction::CloseServerReader(ChildStream::Stderr))
    ));
}

/// G12: with the audit gate on, a request reaches the server only after
/// the loop reports its `dispatched` record durable, and the host is not
/// read while too many records wait for the disk.
#[test]
fn g12_the_audit_gate_holds_a_request_until_its_record_is_durable() {
    let mut config = GuardConfig::default();
    config.audit_gate(Some(2));
    let clock = Clock {
        base: Instant::now(),
    };
    let mut s = GuardSession::new(config);
    s.handle_spawned(clock.at(0));
    let request = |id: u32| {
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"t\"}}}}\n"
        )
    };
    let one = request(1);
    let read = GuardInput::HostRead {
        result: Ok(one.len()),
        buf: one.as_bytes(),
    };
    s.handle_input(clock.at(1), read);
    assert!(matches!(s.poll_output(), GuardOutput::Record(_)));
    assert!(
        matches!(s.poll_output(), GuardOutput::Timeout(_)),
        "the request waits for its record"
    );
    assert!(s.wants_host_input(), "one record waits, the bound is two");
    let two = request(2);
    let read = GuardInput::HostRead {
        result: Ok(two.len()),
        buf: two.as_bytes(),
    };
    s.handle_input(clock.at(2), read);
    assert!(matches!(s.poll_output(), GuardOutput::Record(_)));
    assert!(matches!(s.poll_output(), GuardOutput::Timeout(_)));
    assert!(!s.wants_host_input(), "two records wait for the disk");
    // The first record is on disk: the first request goes, not the second.
    s.handle_input(clock.at(3), GuardInput::RecordsDurable(1));
    assert!(s.wants_host_input());
    let GuardOutput::ToServer(out) = s.poll_output() else {
        panic!("the first request, its record durable");
    };
    assert!(out.bytes().starts_with(b"{\"jsonrpc\":\"2.0\",\"id\":1"));
    let n = out.bytes().len();
    s.handle_input(clock.at(3), GuardInput::ServerWritten(Ok(n)));
    assert!(matches!(s.poll_output(), GuardOutput::Timeout(_)));
    // A count past what was given is taken as all that was given.
    s.handle_input(clock.at(4), GuardInput::RecordsDurable(99));
    let GuardOutput::ToServer(out) = s.poll_output() else {
        panic!("the second request");
    };
    assert!(out.bytes().starts_with(b"{\"jsonrpc\":\"2.0\",\"id\":2"));
    // A full pipe parks it until writable.
    s.handle_input(
        clock.at(4),
        GuardInput::ServerWritten(Err(std::io::ErrorKind::WouldBlock.into())),
    );
    assert!(matches!(s.poll_output(), GuardOutput::Timeout(_)));
    s.handle_input(clock.at(5), GuardInput::ServerWritable);
    assert!(matches!(s.poll_output(), GuardOutput::ToServer(_)));
}

#[test]
fn g1_host_stops_reading_closes_host_then_shuts_the_server_down_exit_75() {
    let (mut s, clock) = session(100);
    let note = format!(
        "{{\"jsonrpc\":\"2.0\",\"method\":\"n\",\"params\":\"{}\"}}\n",
        "x".repeat(200)
    );
    s.handle_server_stdout(clock.at(1), note.as_bytes());
    assert_eq!(
        actions(&mut s),
        [GuardAction::CloseHostOutput, GuardAction::CloseServerStdin]
    );
    assert!(s.poll_to_host().is_none());
    assert_eq!(s.closed_by_guard(), Some("host_stopped_reading"));
    // The server ignores stdin EOF: TERM after the grace, then it exits.
    assert_eq!(s.poll_timeout(), Some(clock.at(1001).instant));
    s.handle_timeout(clock.at(1001));
    assert_eq!(
        actions(&mut s),
        [GuardAction::SignalServerGroup(Signal::Term)]
    );
    s.handle_exited(clock.at(1002), ExitStatus::Signal(15));
    s.handle_server_stdout_eof(clock.at(1002));
    s.handle_server_stderr_eof(clock.at(1002));
    match actions(&mut s).as_slice() {
        [GuardAction::Finished { exit_code, .. }] => assert_eq!(*exit_code, 75),
        other => panic!("{other:?}"),
    }
    let report = s.report(100);
    assert_eq!(report.guard_closed_session, Some("host_stopped_reading"));
}

/// A session whose framers close on an oversized line, at 128 bytes.
fn closing_session() -> (GuardSession, Clock) {
    let mut config = GuardConfig::default();
    config
        .framer_mut()
        .max_frame(128)
        .oversized_policy(crate::OversizedPolicy::Close);
    config
        .supervisor_mut()
        .stdin_close_grace(Duration::from_secs(1))
        .term_grace(Duration::from_secs(1));
    let clock = Clock {
        base: Instant::now(),
    };
    let mut s = GuardSession::new(config);
    s.handle_spawned(clock.at(0));
    (s, clock)
}

fn host_messages(s: &mut GuardSession) -> Vec<String> {
    std::iter::from_fn(|| s.poll_to_host())
        .map(|b| String::from_utf8(b).expect("UTF-8"))
        .collect()
}

fn stderr_text(s: &mut GuardSession) -> String {
    std::iter::from_fn(|| s.poll_stderr())
        .map(|b| String::from_utf8(b).expect("UTF-8"))
        .collect()
}

/// Oversized policy `close`, server side: the call gets the wire-limit
/// error, the server is shut down while its stdout is still drained
/// (and dropped), and the guard exits 75 saying why.
#[test]
fn g3_close_policy_a_server_line_past_the_limit_closes_the_session_exit_75() {
    let (mut s, clock) = closing_session();
    s.handle_host(
        clock.at(1),
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\"}\n",
    );
    let _ = s.poll_record();
    let b = s.poll_to_server(u64::MAX).expect("the request");
    s.handle_server_written(b.len());
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"{}\"}}\n",
        "x".repeat(500)
    );
    s.handle_server_stdout(clock.at(2), big.as_bytes());
    assert_eq!(actions(&mut s), [GuardAction::CloseServerStdin]);
    let host = host_messages(&mut s);
    assert_eq!(host.len(), 1, "{host:?}");
    assert!(
        host[0].contains("\"id\":1") && host[0].contains("exceeded the wire limit"),
        "{host:?}"
    );
    assert!(stderr_text(&mut s).contains("the oversized policy is `close`: closing the session"));
    assert_eq!(s.closed_by_guard(), Some("oversized_response"));
    // Whatever the server writes now is drained and dropped.
    s.handle_server_stdout(
        clock.at(3),
        b"{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}\n",
    );
    assert!(host_messages(&mut s).is_empty());
    s.handle_exited(clock.at(4), ExitStatus::Code(0));
    s.handle_server_stdout_eof(clock.at(4));
    s.handle_server_stderr_eof(clock.at(4));
    match actions(&mut s).as_slice() {
        [GuardAction::Finished { exit_code, .. }] => assert_eq!(*exit_code, EXIT_GUARD_CLOSED),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        s.report(100).guard_closed_session,
        Some("oversized_response")
    );
}

/// Oversized policy `close`, host side: the request gets the wire-limit
/// error and never reaches the server, the host's input is no longer
/// read, what it sent before still reaches the server, then the
/// shutdown; the guard exits 75.
#[test]
fn g2_close_policy_a_host_request_past_the_limit_closes_the_session_exit_75() {
    let (mut s, clock) = closing_session();
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"method\":\"n\"}}\n{{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"{}\"}}\n",
        "m".repeat(500)
    );
    s.handle_host(clock.at(1), big.as_bytes());
    assert_eq!(actions(&mut s), [GuardAction::CloseHostInput]);
    let host = host_messages(&mut s);
    assert!(
        host.len() == 1
            && host[0].contains("\"id\":7")
            && host[0].contains("request exceeded the wire limit"),
        "{host:?}"
    );
    assert_eq!(s.closed_by_guard(), Some("oversized_request"));
    // The notification before it goes out, then the server's stdin closes.
    let b = s.poll_to_server(u64::MAX).expect("the notification");
    assert!(
        s.poll_to_server(u64::MAX).is_none(),
        "the oversized request never does"
    );
    s.handle_server_written(b.len());
    assert_eq!(actions(&mut s), [GuardAction::CloseServerStdin]);
    s.handle_exited(clock.at(2), ExitStatus::Code(0));
    s.handle_server_stdout_eof(clock.at(2));
    s.handle_server_stderr_eof(clock.at(2));
    match actions(&mut s).as_slice() {
        [GuardAction::Finished { exit_code, .. }] => assert_eq!(*exit_code, EXIT_GUARD_CLOSED),
        other => panic!("{other:?}"),
    }
}

#[test]
fn g11_host_eof_runs_the_shutdown_and_exits_with_the_servers_status() {
    let (mut s, clock) = session(1 << 20);
    s.handle_host(
        clock.at(1),
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"t\"}}\n",
    );
    assert_eq!(
        s.poll_record().map(|r| r.state()),
        Some(CallState::Dispatched)
    );
    let b = s.poll_to_server(u64::MAX).expect("the request");
    s.handle_server_written(b.len());
    s.handle_host_eof(clock.at(2));
    assert_eq!(actions(&mut s), [GuardAction::CloseServerStdin]);
    assert!(s.poll_to_server(u64::MAX).is_none(), "stdin is closed");
    s.handle_exited(clock.at(3), ExitStatus::Code(3));
    s.handle_server_stdout_eof(clock.at(3));
    s.handle_server_stderr_eof(clock.at(3));
    match actions(&mut s).as_slice() {
        [GuardAction::Finished {
            exit_code, outcome, ..
        }] => {
            assert_eq!(*exit_code, 3);
            assert_eq!(outcome.exit_status, Some(ExitStatus::Code(3)));
        }
        other => panic!("{other:?}"),
    }
    let r = s.poll_record().expect("the open call ends");
    assert_eq!(r.state(), CallState::Unknown);
    assert_eq!(r.exit_status(), Some(ExitStatus::Code(3)));
}

#[test]
fn g11_host_eof_closes_server_stdin_only_after_the_last_request_went_out() {
    let (mut s, clock) = session(1 << 20);
    s.handle_host(
        clock.at(1),
        b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n",
    );
    s.handle_host_eof(clock.at(1));
    assert!(
        actions(&mut s).is_empty(),
        "stdin stays open while a message waits"
    );
    let b = s.poll_to_server(u64::MAX).expect("the last message");
    assert!(actions(&mut s).is_empty(), "taken is not written");
    s.handle_server_written(b.len());
    assert_eq!(actions(&mut s), [GuardAction::CloseServerStdin]);
}

#[test]
fn g11_host_eof_with_a_server_that_never_reads_closes_after_the_grace() {
    let (mut s, clock) = session(1 << 20);
    s.handle_host(clock.at(1), b"{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n");
    s.handle_host_eof(clock.at(1));
    let _ = s.poll_to_server(u64::MAX);
    assert!(actions(&mut s).is_empty());
    assert_eq!(s.poll_timeout(), Some(clock.at(1001).instant));
    s.handle_timeout(clock.at(1001));
    assert_eq!(actions(&mut s), [GuardAction::CloseServerStdin]);
}

/// F1: the host's first signal goes to the server's group at once, as it
/// came (the server would have got it directly); each further one climbs a
/// rung at once (SIGTERM, then SIGKILL): the host sets the pace.
#[test]
fn f1_a_host_signal_is_passed_on_at_once_and_the_next_climbs() {
    let (mut s, clock) = session(1 << 20);
    s.handle_input(clock.at(5), GuardInput::Signal(Signal::Interrupt));
    assert_eq!(
        actions(&mut s),
        [
            GuardAction::SignalServerGroup(Signal::Interrupt),
            GuardAction::CloseServerStdin
        ]
    );
    assert_eq!(s.exit_code(), EXIT_UNKNOWN, "no exit observed yet");
    // Claude Code's sequence: SIGTERM 100 ms later.
    s.handle_input(clock.at(105), GuardInput::Signal(Signal::Term));
    assert_eq!(
        actions(&mut s),
        [GuardAction::SignalServerGroup(Signal::Term)]
    );
    s.handle_input(clock.at(110), GuardInput::Signal(Signal::Hangup));
    assert_eq!(
        actions(&mut s),
        [GuardAction::SignalServerGroup(Signal::Kill)]
    );
    // The server dies of the SIGINT it was passed: the status a direct
    // server would have had (128 + 2), and no restart.
    s.handle_exited(clock.at(120), ExitStatus::Signal(2));
    s.handle_server_stdout_eof(clock.at(120));
    s.handle_server_stderr_eof(clock.at(120));
    let end = actions(&mut s);
    let [GuardAction::Finished {
        outcome, exit_code, ..
    }] = end.as_slice()
    else {
        panic!("the session ends: {end:?}");
    };
    assert_eq!(*exit_code, 130);
    assert_eq!(outcome.ended_by, EndedBy::ExitedAfterForwardedSignal);
    assert_eq!(outcome.forwarded_signal, Some(Signal::Interrupt));
}

/// F1: SIGTERM first (the TypeScript SDK's reaping, Gemini CLI's stop) is
/// passed on as SIGTERM; the next signal is SIGKILL.
#[test]
fn f1_sigterm_first_is_passed_on_and_the_next_is_sigkill() {
    let (mut s, clock) = session(1 << 20);
    s.handle_input(clock.at(5), GuardInput::Signal(Signal::Term));
    assert_eq!(
        actions(&mut s),
        [
            GuardAction::SignalServerGroup(Signal::Term),
            GuardAction::CloseServerStdin
        ]
    );
    // Without another signal, SIGKILL follows the term grace (1 s here).
    assert_eq!(s.poll_timeout(), Some(clock.at(1005).instant));
    s.handle_input(clock.at(6), GuardInput::Signal(Signal::Term));
    assert_eq!(
        actions(&mut s),
        [GuardAction::SignalServerGroup(Signal::Kill)]
    );
}

/// F1: a signal after the host's EOF is passed on at once; the EOF's wait
/// for the server to take what the host sent ends there.
#[test]
fn f1_a_signal_after_the_hosts_eof_is_passed_on_at_once() {
    let (mut s, clock) = session(1 << 20);
    s.handle_host(clock.at(1), b"{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n");
    s.handle_host_eof(clock.at(1));
    assert!(
        actions(&mut s).is_empty(),
        "waiting for the server to take it"
    );
    s.handle_input(clock.at(50), GuardInput::Signal(Signal::Interrupt));
    assert_eq!(
        actions(&mut s),
        [
            GuardAction::SignalServerGroup(Signal::Interrupt),
            GuardAction::CloseServerStdin
        ]
    );
    // SIGTERM by itself one stdin grace (1 s) after the signal.
    assert_eq!(s.poll_timeout(), Some(clock.at(1050).instant));
}

/// What `poll_output` gives until its `Timeout`, in order, as names.
fn outputs(s: &mut GuardSession, at: Stamp) -> Vec<&'static str> {
    let mut out = Vec::new();
    loop {
        let name = match s.poll_output() {
            GuardOutput::Action(_) => "action",
            GuardOutput::Record(_) => "record",
            GuardOutput::Phase(GuardPhase::HostSignal { .. }) => "host_signal",
            GuardOutput::Phase(_) => "phase",
            GuardOutput::Seal => "seal",
            GuardOutput::Pins(_) => "pins",
            GuardOutput::ToServer(b) => {
                let n = b.take().len();
                s.handle_input(at, GuardInput::ServerWritten(Ok(n)));
                "to_server"
            }
            GuardOutput::ToHost(b) => {
                let n = b.take().len();
                s.handle_input(at, GuardInput::HostWrote(Ok(n)));
                "to_host"
            }
            GuardOutput::Stderr(_) => "stderr",
            GuardOutput::Log(_) => "log",
            GuardOutput::Span(_) => "span",
            GuardOutput::Timeout(_) => return out,
        };
        out.push(name);
    }
}

/// F1, G12: once the session is ending the log is sealed at once, after
/// the signal's record, and again after each turn that adds records; a
/// turn with nothing new asks for no seal.
#[test]
fn f1_the_log_is_sealed_when_the_session_starts_ending_and_after_each_later_record() {
    let (mut s, clock) = session(1 << 20);
    let request =
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"t\"}}\n";
    s.handle_host(clock.at(1), request);
    assert_eq!(outputs(&mut s, clock.at(1)), ["record", "to_server"]);
    s.handle_input(clock.at(2), GuardInput::Signal(Signal::Interrupt));
    assert_eq!(
        outputs(&mut s, clock.at(2)),
        ["action", "action", "host_signal", "seal"]
    );
    assert_eq!(outputs(&mut s, clock.at(2)), Vec::<&str>::new());
    // The server answers before it goes: the call's end, then a seal.
    s.handle_server_stdout(
        clock.at(3),
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n",
    );
    assert_eq!(outputs(&mut s, clock.at(3)), ["record", "seal", "to_host"]);
}

/// G12: the host's EOF starts the end too: the log is sealed at once.
#[test]
fn g12_the_hosts_eof_seals_the_log_at_once() {
    let (mut s, clock) = session(1 << 20);
    assert_eq!(outputs(&mut s, clock.at(1)), Vec::<&str>::new());
    s.handle_host_eof(clock.at(1));
    assert_eq!(outputs(&mut s, clock.at(1)), ["action", "seal"]);
}

#[test]
fn g10_server_stderr_is_forwarded_within_budget_then_one_marker() {
    let (mut s, clock) = session(1 << 20);
    s.handle_server_stderr(clock.at(1), b"0123456");
    s.handle_server_stderr(clock.at(2), b"789abcdef");
    s.handle_server_stderr(clock.at(3), b"more");
    let out: Vec<Vec<u8>> = std::iter::from_fn(|| s.poll_stderr()).collect();
    assert_eq!(out[0], b"0123456");
    assert_eq!(out[1], b"789");
    assert!(String::from_utf8_lossy(&out[2]).contains("passed its budget of 10 bytes"));
    assert_eq!(out.len(), 3);
    let report = s.report(100);
    assert_eq!(report.stderr_forwarded_bytes, 10);
    assert_eq!(report.stderr.seen, 20);
}

#[cfg(feature = "fuzzing")]
#[test]
fn fuzz_guard_session_random_inputs() {
    crate::fuzzing::run_random_inputs(
        0x9E37_79B9_7F4A_7C15,
        400,
        512,
        crate::fuzzing::fuzz_guard_session,
    );
}

#[test]
fn a_host_write_error_shuts_the_server_down_without_exit_75() {
    let (mut s, clock) = session(1 << 20);
    s.handle_host_write_error(clock.at(1));
    assert_eq!(
        actions(&mut s),
        [GuardAction::CloseHostOutput, GuardAction::CloseServerStdin]
    );
    assert_eq!(s.closed_by_guard(), None);
}

/// A host write's result is the session's to judge (the rule of
/// `WriteResult`): `EINTR` offers the message again, `WouldBlock` parks it
/// until the host is writable, a 0-byte write closes the host side.
#[test]
fn a_host_write_result_is_judged_by_the_session() {
    let (mut s, clock) = session(1 << 20);
    s.handle_server_stdout(clock.at(1), b"{\"jsonrpc\":\"2.0\",\"method\":\"n\"}\n");
    let interrupted = || std::io::Error::from(std::io::ErrorKind::Interrupted);
    let would_block = || std::io::Error::from(std::io::ErrorKind::WouldBlock);
    let offered = |s: &mut GuardSession| loop {
        match s.poll_output() {
            GuardOutput::ToHost(out) => break Some(out.bytes().len()),
            GuardOutput::Timeout(_) => break None,
            _ => {}
        }
    };
    let len = offered(&mut s).expect("the message is offered");
    s.handle_input(clock.at(2), GuardInput::HostWrote(Err(interrupted())));
    assert_eq!(offered(&mut s), Some(len), "EINTR: offered again");
    s.handle_input(clock.at(3), GuardInput::HostWrote(Err(would_block())));
    assert_eq!(offered(&mut s), None, "parked until writable");
    s.handle_input(clock.at(4), GuardInput::HostWritable);
    assert_eq!(offered(&mut s), Some(len));
    s.handle_input(clock.at(5), GuardInput::HostWrote(Ok(0)));
    assert_eq!(
        actions(&mut s),
        [GuardAction::CloseHostOutput, GuardAction::CloseServerStdin]
    );
}

/// Drains every output, taking what is offered to either side whole.
fn drain_all(s: &mut GuardSession) {
    loop {
        match s.poll_output() {
            GuardOutput::ToServer(out) => {
                let n = out.bytes().len();
                s.handle_input_written_to_server(n);
            }
            GuardOutput::ToHost(out) => {
                let n = out.bytes().len();
                s.handle_input(clock_free(), GuardInput::HostWrote(Ok(n)));
            }
            GuardOutput::Timeout(_) => break,
            _ => {}
        }
    }
}

fn clock_free() -> Stamp {
    Stamp::new(Instant::now(), 1_700_000_000_000)
}

impl GuardSession {
    fn handle_input_written_to_server(&mut self, n: usize) {
        self.handle_input(clock_free(), GuardInput::ServerWritten(Ok(n)));
    }
}

/// F3: the status counts the calls by how they ended, keeps each
/// operation's latency, names the server, and masks nothing it need not.
#[test]
fn f3_the_status_counts_calls_and_names_the_server() {
    let (mut s, clock) = session(1 << 20);
    let init = b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"h\",\"version\":\"1\"}}}\n";
    s.handle_host(clock.at(1), init);
    drain_all(&mut s);
    let identity = StatusIdentity {
        name: "weather".into(),
        guard_pid: 7,
        command: vec!["srv".into(), "--flag".into()],
        ..StatusIdentity::default()
    };
    let st = s.status(
        &identity,
        ProcessStats::default(),
        StatusPortCounters::default(),
    );
    assert_eq!(st.state, "starting");
    assert_eq!(st.requests.in_flight, 1);
    s.handle_server_stdout(
        clock.at(3),
        b"{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"serverInfo\":{\"name\":\"weather-srv\",\"version\":\"2.1\"}}}\n",
    );
    drain_all(&mut s);
    for (i, (method, at, answer)) in [
        ("ping", 10, "\"result\":{}"),
        ("ping", 20, "\"result\":{}"),
        (
            "tools/list",
            40,
            "\"error\":{\"code\":-32601,\"message\":\"no\"}",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let id = i + 1;
        let req = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"{method}\"}}\n");
        s.handle_host(clock.at(at), req.as_bytes());
        drain_all(&mut s);
        let resp = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},{answer}}}\n");
        s.handle_server_stdout(clock.at(at + 3), resp.as_bytes());
        drain_all(&mut s);
    }
    let st = s.status(
        &identity,
        ProcessStats::default(),
        StatusPortCounters::default(),
    );
    assert_eq!(st.state, "running");
    assert_eq!(st.protocol_version.as_deref(), Some("2025-06-18"));
    let server = st.server.as_ref().expect("serverInfo");
    assert_eq!(
        (server.name.as_str(), server.version.as_str()),
        ("weather-srv", "2.1")
    );
    let r = st.requests;
    assert_eq!((r.total, r.in_flight, r.ok, r.error), (4, 0, 3, 1), "{r:?}");
    let ping = st
        .latency
        .iter()
        .find(|l| l.operation == "ping")
        .expect("ping");
    assert_eq!((ping.calls, ping.errors, ping.p50_ms), (2, 0, Some(5)));
    let list = st
        .latency
        .iter()
        .find(|l| l.operation == "tools/list")
        .expect("list");
    assert_eq!((list.calls, list.errors), (1, 1));
    assert_eq!(st.command, ["srv", "--flag"]);
    assert_eq!(st.schema, crate::STATUS_SCHEMA);
    let json = serde_json::to_value(&st).expect("json");
    assert_eq!(json["name"], "weather");
    assert!(json["stream"]["largest_frame"].as_u64() > Some(0));
}

/// The log copy: the server's whole stderr (past the forwarding budget too)
/// and the guard's notes, timestamped, in the session's order.
#[test]
fn the_log_copy_has_all_of_stderr_and_the_notes() {
    let mut config = GuardConfig::default();
    config.stderr_forward(10).log_copy(true);
    let clock = Clock {
        base: Instant::now(),
    };
    let mut s = GuardSession::new(config);
    s.handle_spawned(clock.at(0));
    s.handle_server_stderr(clock.at(1), b"starting up\nlistening on");
    s.handle_server_stderr(clock.at(2), b" stdio\n");
    s.handle_server_stdout(clock.at(3), b"not json\n");
    let mut log = String::new();
    let mut forwarded = String::new();
    loop {
        match s.poll_output() {
            GuardOutput::Log(b) => log.push_str(&String::from_utf8_lossy(&b)),
            GuardOutput::Stderr(b) => forwarded.push_str(&String::from_utf8_lossy(&b)),
            GuardOutput::Timeout(_) => break,
            _ => {}
        }
    }
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 3, "{log}");
    assert!(lines[0].ends_with("Z stderr starting up"), "{log}");
    assert!(lines[1].ends_with("Z stderr listening on stdio"), "{log}");
    assert!(lines[2].contains(" guard "), "{log}");
    assert!(lines[0].starts_with("2023-11-14T22:13:20.001Z"), "{log}");
    assert!(
        forwarded.len() < log.len(),
        "the budget limits only the forwarding"
    );
    assert_eq!(s.report(0).log_lines_dropped, 0);
}

/// `guard --otel`: a request goes to the server with its span's
/// `traceparent` (a child of the host's), its span is given when its call
/// ends, named and attributed by the MCP conventions; without spans on,
/// the request goes byte for byte as it came.
#[test]
fn f3_spans_carry_the_trace_into_the_server_and_out_to_the_exporter() {
    let host_parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let request = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{{\"name\":\"echo\",\"_meta\":{{\"traceparent\":\"{host_parent}\",\"progressToken\":3}}}}}}\n"
    );
    let run = |trace: Option<u64>| {
        let mut config = GuardConfig::default();
        config.trace(trace);
        let clock = Clock {
            base: Instant::now(),
        };
        let mut s = GuardSession::new(config);
        s.handle_spawned(clock.at(0));
        s.handle_host(clock.at(1), request.as_bytes());
        let mut to_server = Vec::new();
        let mut spans = Vec::new();
        let drain = |s: &mut GuardSession, to_server: &mut Vec<u8>, spans: &mut Vec<CallSpan>| loop {
            match s.poll_output() {
                GuardOutput::ToServer(out) => {
                    let b = out.bytes().to_vec();
                    s.handle_input(clock.at(2), GuardInput::ServerWritten(Ok(b.len())));
                    to_server.extend_from_slice(&b);
                }
                GuardOutput::ToHost(out) => {
                    let n = out.bytes().len();
                    s.handle_input(clock.at(2), GuardInput::HostWrote(Ok(n)));
                }
                GuardOutput::Span(span) => spans.push(span),
                GuardOutput::Timeout(_) => break,
                _ => {}
            }
        };
        drain(&mut s, &mut to_server, &mut spans);
        s.handle_server_stdout(
            clock.at(40),
            b"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n",
        );
        s.handle_host(
            clock.at(50),
            b"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"ping\"}\n",
        );
        drain(&mut s, &mut to_server, &mut spans);
        s.handle_server_stdout(
            clock.at(60),
            b"{\"jsonrpc\":\"2.0\",\"id\":8,\"error\":{\"code\":-32601,\"message\":\"no\"}}\n",
        );
        drain(&mut s, &mut to_server, &mut spans);
        (String::from_utf8(to_server).expect("utf-8"), spans)
    };

    let (plain, spans) = run(None);
    assert!(spans.is_empty());
    assert!(
        plain.starts_with(&request),
        "byte for byte without spans: {plain}"
    );

    let (traced, spans) = run(Some(42));
    let first: serde_json::Value =
        serde_json::from_str(traced.lines().next().expect("a line")).expect("JSON");
    let sent = first["params"]["_meta"]["traceparent"]
        .as_str()
        .expect("a traceparent");
    let sent = TraceContext::parse(sent).expect("valid");
    let parent = TraceContext::parse(host_parent).expect("valid");
    assert_eq!(sent.trace_id, parent.trace_id, "the host's trace");
    assert_ne!(sent.span_id, parent.span_id, "the guard's own span");
    assert_eq!(
        first["params"]["_meta"]["progressToken"], 3,
        "the rest of _meta kept"
    );
    assert_eq!(first["params"]["name"], "echo");
    assert_eq!(spans.len(), 2, "{spans:?}");
    let call = &spans[0];
    assert_eq!(call.name, "tools/call echo");
    assert_eq!(call.context, sent);
    assert_eq!(call.parent, Some(parent));
    assert_eq!(call.tool.as_deref(), Some("echo"));
    assert_eq!(call.request_id, "7");
    assert_eq!(
        (call.start_unix_ms, call.end_unix_ms),
        (1_700_000_000_001, 1_700_000_000_040)
    );
    assert_eq!(call.error_type, None);
    assert_eq!(call.status_code, None);
    assert_eq!(call.request_bytes, request.len() as u64 - 1);
    assert_eq!(call.response_bytes, 36);
    let ping = &spans[1];
    assert_eq!(ping.name, "ping");
    assert_eq!(ping.parent, None, "a root span");
    assert_ne!(ping.context.trace_id, parent.trace_id);
    assert_eq!(ping.error_type.as_deref(), Some("-32601"));
    assert_eq!(ping.status_code, Some(-32601));
}

/// A session with spans on (seed 7), `setup` applied to its config, spawned.
fn traced(setup: impl FnOnce(&mut GuardConfig)) -> (GuardSession, Clock) {
    let clock = Clock {
        base: Instant::now(),
    };
    let mut config = GuardConfig::default();
    config.trace(Some(7));
    setup(&mut config);
    let mut s = GuardSession::new(config);
    s.handle_spawned(clock.at(0));
    (s, clock)
}

/// Runs `s` until it waits, every write done at once, the spans into
/// `spans`; the bytes given to the server.
fn drain_spans(s: &mut GuardSession, clock: &Clock, spans: &mut Vec<CallSpan>) -> usize {
    let mut to_server = 0;
    loop {
        match s.poll_output() {
            GuardOutput::ToServer(out) => {
                let n = out.bytes().len();
                to_server += n;
                s.handle_input(clock.at(2), GuardInput::ServerWritten(Ok(n)));
            }
            GuardOutput::ToHost(out) => {
                let n = out.bytes().len();
                s.handle_input(clock.at(2), GuardInput::HostWrote(Ok(n)));
            }
            GuardOutput::Span(span) => spans.push(span),
            GuardOutput::Timeout(_) => return to_server,
            _ => {}
        }
    }
}

/// `guard --otel`: a prompt's span is named by it, a resource's carries its
/// URI, a tool result with `isError` is a `tool_error`, a request over the
/// wire limit still gets a span (`wire_limit`, the guard's code), and a
/// crash gives `server_lost` with the code the host got.
#[test]
fn f3_spans_say_what_each_call_named_and_how_it_ended() {
    let (mut s, clock) = traced(|config| {
        config.framer_mut().max_frame(4096);
    });
    let mut spans = Vec::new();
    let drain = |s: &mut GuardSession, spans: &mut Vec<CallSpan>| {
        drain_spans(s, &clock, spans);
    };
    s.handle_host(
        clock.at(1),
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"prompts/get\",\"params\":{\"name\":\"greet\"}}\n",
    );
    s.handle_host(
        clock.at(1),
        b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"resources/read\",\"params\":{\"uri\":\"file:///a\"}}\n",
    );
    s.handle_host(
        clock.at(1),
        b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"t\"}}\n",
    );
    s.handle_host(
        clock.at(1),
        b"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}\n",
    );
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{{\"x\":\"{}\"}}}}\n",
        "a".repeat(8192)
    );
    s.handle_host(clock.at(1), big.as_bytes());
    drain(&mut s, &mut spans);
    s.handle_server_stdout(
        clock.at(5),
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"messages\":[]}}\n\
          {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"contents\":[]}}\n\
          {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"content\":[],\"isError\":true}}\n",
    );
    drain(&mut s, &mut spans);
    s.handle_exited(clock.at(9), ExitStatus::Code(1));
    s.handle_server_stdout_eof(clock.at(9));
    s.handle_server_stderr_eof(clock.at(9));
    drain(&mut s, &mut spans);
    let by_id = |id: &str| {
        spans
            .iter()
            .find(|s| s.request_id == id)
            .unwrap_or_else(|| panic!("a span for {id}: {spans:?}"))
    };
    let prompt = by_id("1");
    assert_eq!(prompt.name, "prompts/get greet");
    assert_eq!(prompt.target, Some(SpanTarget::Prompt("greet".into())));
    assert_eq!(prompt.error_type, None);
    let resource = by_id("2");
    assert_eq!(resource.name, "resources/read");
    assert_eq!(
        resource.target,
        Some(SpanTarget::Resource("file:///a".into()))
    );
    let tool = by_id("3");
    assert_eq!(tool.error_type.as_deref(), Some("tool_error"));
    assert_eq!(tool.status_code, None);
    let refused = by_id("5");
    assert_eq!(refused.method, crate::UNREAD_METHOD);
    assert_eq!(refused.error_type.as_deref(), Some("wire_limit"));
    assert_eq!(
        refused.status_code,
        Some(crate::wire::message::WIRE_LIMIT_EXCEEDED)
    );
    let lost = by_id("4");
    assert_eq!(lost.name, "tools/call slow");
    assert_eq!(lost.error_type.as_deref(), Some("server_lost"));
}

/// `guard --otel` with a tool policy: a refused call, which never reaches
/// the server, is a span too, a child of the host's trace, its error the
/// policy's code.
#[test]
fn f3_f4_a_call_a_policy_refuses_is_a_span_with_the_policys_code() {
    let (mut s, clock) = traced(|config| {
        config
            .proxy_mut()
            .tool_policy(Some(crate::guard::policy::ToolPolicy::new(
                crate::guard::policy::ToolFilter::new(None, &["rm".to_owned()]).expect("filter"),
                crate::guard::policy::RateLimiter::default(),
                None,
            )));
    });
    s.handle_host(
        clock.at(1),
        b"{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{\"name\":\"rm\",\
          \"_meta\":{\"traceparent\":\"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}}}\n",
    );
    let mut spans = Vec::new();
    let to_server = drain_spans(&mut s, &clock, &mut spans);
    assert_eq!(to_server, 0, "a refused call never reaches the server");
    assert_eq!(spans.len(), 1, "{spans:?}");
    let span = &spans[0];
    assert_eq!(span.name, "tools/call rm");
    assert_eq!(span.status_code, Some(crate::guard::policy::POLICY_REFUSED));
    assert_eq!(span.error_type.as_deref(), Some("-32031"));
    assert_eq!(
        span.parent.map(|p| p.trace_id),
        Some(span.context.trace_id),
        "a child of the host's trace"
    );
}
