//! Restart on crash, in the session (no processes: the inputs a loop would
//! feed). The same with real processes: `cli/tests/guard_restart.rs`.

use std::time::{Duration, Instant};

use crate::guard::restart::{GuardPhase, RestartPolicy, SERVER_CRASHED};
use crate::guard::{GuardAction, GuardConfig, GuardOutput, GuardSession};
use crate::process::supervisor::ExitStatus;
use crate::time::Stamp;

struct Clock(Instant);

impl Clock {
    fn at(&self, ms: u64) -> Stamp {
        Stamp::new(self.0 + Duration::from_millis(ms), 1_700_000_000_000 + ms)
    }
}

fn session(max_restarts: u32) -> (GuardSession, Clock) {
    let mut config = GuardConfig::default();
    config
        .restart_mut()
        .policy(RestartPolicy::OnFailure)
        .max_restarts(max_restarts)
        .backoff(Duration::from_millis(100));
    config.proxy_mut().session_id("s");
    let clock = Clock(Instant::now());
    let mut s = GuardSession::new(config);
    s.handle_spawned(clock.at(0));
    (s, clock)
}

/// Everything the session gives until its next deadline: actions, phases
/// and the messages for each side (taken whole), stderr as text.
#[derive(Debug, Default)]
struct Drained {
    actions: Vec<GuardAction>,
    phases: Vec<GuardPhase>,
    to_server: Vec<String>,
    to_host: Vec<String>,
    stderr: String,
}

fn drain(s: &mut GuardSession, at: Stamp) -> Drained {
    let mut d = Drained::default();
    loop {
        match s.poll_output() {
            GuardOutput::Action(a) => d.actions.push(a),
            GuardOutput::Record(_) | GuardOutput::Pins(_) | GuardOutput::Seal => {}
            GuardOutput::Phase(p) => d.phases.push(p),
            GuardOutput::ToServer(out) => {
                let b = out.take();
                d.to_server
                    .push(String::from_utf8(b.clone()).expect("UTF-8"));
                s.handle_input(at, crate::GuardInput::ServerWritten(Ok(b.len())));
            }
            GuardOutput::ToHost(out) => {
                let b = out.take();
                d.to_host.push(String::from_utf8(b.clone()).expect("UTF-8"));
                s.handle_input(at, crate::GuardInput::HostWrote(Ok(b.len())));
                s.handle_input(at, crate::GuardInput::HostWritten(b.len()));
            }
            GuardOutput::Stderr(b) => d.stderr.push_str(&String::from_utf8_lossy(&b)),
            GuardOutput::Log(_) | GuardOutput::Span(_) => {}
            GuardOutput::Timeout(_) => return d,
        }
    }
}

/// The exit status of the session's end, the one action it took.
fn finished(d: &Drained) -> u8 {
    match d.actions.as_slice() {
        [GuardAction::Finished { exit_code, .. }] => *exit_code,
        other => panic!("not the session's end: {other:?}; {d:?}"),
    }
}

fn crash(s: &mut GuardSession, at: Stamp, status: ExitStatus) -> Drained {
    s.handle_exited(at, status);
    s.handle_server_stdout_eof(at);
    s.handle_server_stderr_eof(at);
    let mut d = drain(s, at);
    // The end of stdout closes the server's stdin first (the supervisor's
    // shutdown); that is not what these tests look at.
    d.actions.retain(|a| *a != GuardAction::CloseServerStdin);
    d
}

/// The server crashes at `at`; the next is started once the backoff
/// passed, at `then` (and given the replayed handshake, if any).
fn crash_and_restart(s: &mut GuardSession, clock: &Clock, at: u64, then: u64) -> Drained {
    crash(s, clock.at(at), ExitStatus::Code(1));
    s.handle_timeout(clock.at(then));
    assert_eq!(
        drain(s, clock.at(then)).actions,
        [GuardAction::RespawnServer]
    );
    s.handle_spawned(clock.at(then));
    drain(s, clock.at(then))
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"h","version":"1"}}}"#;
const INIT_ANSWER: &str = r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"s","version":"1"}}}"#;

fn line(s: &str) -> Vec<u8> {
    format!("{s}\n").into_bytes()
}

/// Host handshake done, one call in flight.
fn handshaken(s: &mut GuardSession, clock: &Clock) {
    s.handle_host(clock.at(1), &line(INIT));
    drain(s, clock.at(1));
    s.handle_server_stdout(clock.at(2), &line(INIT_ANSWER));
    let d = drain(s, clock.at(2));
    assert_eq!(d.to_host.len(), 1, "{d:?}");
    s.handle_host(
        clock.at(3),
        &line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
    );
    s.handle_host(
        clock.at(3),
        &line(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}"#),
    );
    let d = drain(s, clock.at(3));
    assert_eq!(d.to_server.len(), 2, "{d:?}");
}

#[test]
fn a_crash_fails_the_open_call_at_once_and_the_next_server_gets_the_handshake_first() {
    let (mut s, clock) = session(3);
    handshaken(&mut s, &clock);
    s.handle_server_stderr(clock.at(4), b"starting\nError: boom\n");
    let d = crash(&mut s, clock.at(5), ExitStatus::Code(1));
    assert_eq!(d.actions, [GuardAction::ReapServer]);
    assert_eq!(d.to_host.len(), 1, "{d:?}");
    let err: serde_json::Value = serde_json::from_str(&d.to_host[0]).unwrap();
    assert_eq!(err["id"], 1);
    assert_eq!(err["error"]["code"], SERVER_CRASHED);
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("exit code 1") && message.contains("Error: boom"),
        "{message}"
    );
    assert_eq!(err["error"]["data"]["restartInMs"], 100);
    assert!(err["error"]["data"]["stderrTail"]
        .as_str()
        .unwrap()
        .contains("boom"));
    assert!(matches!(
        d.phases.as_slice(),
        [GuardPhase::ServerCrashed {
            server: 1,
            requests_failed: 1,
            restart_in_ms: Some(100),
            ..
        }]
    ));
    assert!(d.stderr.contains("restarting it in 100 ms"), "{}", d.stderr);

    // The host goes on meanwhile: its request waits for the new server.
    s.handle_host(
        clock.at(50),
        &line(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"t"}}"#),
    );
    let d = drain(&mut s, clock.at(50));
    assert!(d.to_server.is_empty() && d.actions.is_empty(), "{d:?}");
    s.handle_timeout(clock.at(105));
    let d = drain(&mut s, clock.at(105));
    assert_eq!(d.actions, [GuardAction::RespawnServer]);
    s.handle_spawned(clock.at(106));
    let d = drain(&mut s, clock.at(106));
    assert_eq!(d.to_server.len(), 1, "only the handshake: {d:?}");
    let replay: serde_json::Value = serde_json::from_str(&d.to_server[0]).unwrap();
    assert_eq!(replay["method"], "initialize");
    assert_eq!(replay["id"], "mcp-stdio-guard/replay/1");
    assert_eq!(replay["params"]["clientInfo"]["name"], "h");

    // A compatible answer: the guard takes it; then `initialized` and the
    // waiting request go out.
    s.handle_server_stdout(
        clock.at(107),
        &line(&INIT_ANSWER.replace(r#""id":0"#, r#""id":"mcp-stdio-guard/replay/1""#)),
    );
    let d = drain(&mut s, clock.at(107));
    assert!(d.to_host.is_empty(), "the host never sees it: {d:?}");
    assert_eq!(d.to_server.len(), 2, "{d:?}");
    assert!(d.to_server[0].contains("notifications/initialized"));
    assert!(d.to_server[1].contains(r#""id":2"#));
    assert!(matches!(
        d.phases.as_slice(),
        [GuardPhase::ServerRestarted { server: 2, .. }]
    ));
    s.handle_server_stdout(
        clock.at(108),
        &line(r#"{"jsonrpc":"2.0","id":2,"result":{}}"#),
    );
    let d = drain(&mut s, clock.at(108));
    assert_eq!(d.to_host.len(), 1);
    let report = s.report(100);
    assert_eq!(report.restarts, 1);
    assert_eq!(report.proxy.requests_failed_by_crash, 1);
}

#[test]
fn a_narrower_answer_refuses_the_restart_and_the_guard_closes_the_session() {
    let (mut s, clock) = session(3);
    handshaken(&mut s, &clock);
    crash(&mut s, clock.at(5), ExitStatus::Signal(9));
    s.handle_host(
        clock.at(50),
        &line(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#),
    );
    s.handle_timeout(clock.at(105));
    drain(&mut s, clock.at(105));
    s.handle_spawned(clock.at(106));
    drain(&mut s, clock.at(106));
    s.handle_server_stdout(
        clock.at(107),
        &line(r#"{"jsonrpc":"2.0","id":"mcp-stdio-guard/replay/1","result":{"protocolVersion":"2025-11-25","capabilities":{}}}"#),
    );
    let d = drain(&mut s, clock.at(107));
    assert_eq!(d.to_host.len(), 1, "{d:?}");
    assert!(d.to_host[0].contains(r#""id":2"#) && d.to_host[0].contains("capabilities.tools"));
    assert!(d.to_server.is_empty(), "{d:?}");
    assert_eq!(d.actions, [GuardAction::CloseServerStdin]);
    assert!(matches!(
        d.phases.as_slice(),
        [GuardPhase::RestartRefused { .. }]
    ));
    assert_eq!(s.closed_by_guard(), Some("restart_refused"));
    let d = crash(&mut s, clock.at(108), ExitStatus::Code(0));
    assert_eq!(finished(&d), 75);
}

#[test]
fn a_server_that_crashes_again_before_the_replayed_handshake_stops_the_restarts() {
    let (mut s, clock) = session(5);
    handshaken(&mut s, &clock);
    crash_and_restart(&mut s, &clock, 5, 106);
    let d = crash(&mut s, clock.at(110), ExitStatus::Code(3));
    assert_eq!(finished(&d), 3);
    assert!(
        d.stderr.contains("before answering the replayed handshake"),
        "{}",
        d.stderr
    );
    let report = s.report(100);
    assert_eq!(report.restarts, 1);
    assert!(report.restarts_stopped.is_some());
}

#[test]
fn a_server_that_crashes_at_start_is_restarted_at_most_max_times_with_a_growing_backoff() {
    let (mut s, clock) = session(2);
    let mut t = 0;
    let mut waits = Vec::new();
    for _ in 0..2 {
        let d = crash(&mut s, clock.at(t + 1), ExitStatus::Code(127));
        assert_eq!(d.actions, [GuardAction::ReapServer], "{d:?}");
        let due = s.poll_timeout().expect("a restart is due");
        let wait = due.duration_since(clock.at(t + 1).instant);
        waits.push(wait.as_millis());
        t += 1 + u64::try_from(wait.as_millis()).unwrap();
        s.handle_timeout(clock.at(t));
        assert_eq!(
            drain(&mut s, clock.at(t)).actions,
            [GuardAction::RespawnServer]
        );
        s.handle_spawned(clock.at(t));
    }
    assert_eq!(waits, [100, 200]);
    let d = crash(&mut s, clock.at(t + 1), ExitStatus::Code(127));
    assert_eq!(finished(&d), 127);
    assert!(d.stderr.contains("3 times in a row"), "{}", d.stderr);
}

#[test]
fn a_clean_exit_under_on_failure_or_a_host_that_left_ends_the_session() {
    let (mut s, clock) = session(3);
    let d = crash(&mut s, clock.at(1), ExitStatus::Code(0));
    finished(&d);

    let (mut s, clock) = session(3);
    s.handle_host_eof(clock.at(1));
    drain(&mut s, clock.at(1));
    let d = crash(&mut s, clock.at(2), ExitStatus::Code(1));
    finished(&d);

    // The host leaves while no server is up: the session ends at once.
    let (mut s, clock) = session(3);
    assert_eq!(
        crash(&mut s, clock.at(1), ExitStatus::Code(1)).actions,
        [GuardAction::ReapServer]
    );
    s.handle_host_eof(clock.at(20));
    let d = drain(&mut s, clock.at(20));
    assert_eq!(finished(&d), 1);
}

#[test]
fn a_failed_respawn_fails_what_waits_and_ends_the_session() {
    let (mut s, clock) = session(3);
    handshaken(&mut s, &clock);
    crash(&mut s, clock.at(5), ExitStatus::Code(1));
    s.handle_host(
        clock.at(50),
        &line(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#),
    );
    s.handle_timeout(clock.at(105));
    drain(&mut s, clock.at(105));
    s.handle_spawn_failed(clock.at(106), &std::io::Error::other("gone"));
    let d = drain(&mut s, clock.at(106));
    assert!(
        d.to_host
            .iter()
            .any(|m| m.contains(r#""id":2"#) && m.contains("gone")),
        "{d:?}"
    );
    assert_eq!(finished(&d), 1);
}

#[test]
fn subscriptions_and_the_log_level_are_sent_again_and_their_answers_are_the_guards() {
    let (mut s, clock) = session(3);
    handshaken(&mut s, &clock);
    s.handle_server_stdout(
        clock.at(4),
        &line(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
    );
    for (id, method, params) in [
        (5, "resources/subscribe", r#"{"uri":"file:///a"}"#),
        (6, "resources/subscribe", r#"{"uri":"file:///b"}"#),
        (7, "resources/unsubscribe", r#"{"uri":"file:///b"}"#),
        (8, "logging/setLevel", r#"{"level":"debug"}"#),
    ] {
        s.handle_host(
            clock.at(5),
            &line(&format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#
            )),
        );
        s.handle_server_stdout(
            clock.at(5),
            &line(&format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#)),
        );
    }
    drain(&mut s, clock.at(5));
    crash_and_restart(&mut s, &clock, 6, 200);
    s.handle_server_stdout(
        clock.at(201),
        &line(&INIT_ANSWER.replace(r#""id":0"#, r#""id":"mcp-stdio-guard/replay/1""#)),
    );
    let d = drain(&mut s, clock.at(201));
    let sent: Vec<serde_json::Value> = d
        .to_server
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let methods: Vec<&str> = sent.iter().map(|m| m["method"].as_str().unwrap()).collect();
    assert_eq!(
        methods,
        [
            "notifications/initialized",
            "logging/setLevel",
            "resources/subscribe"
        ],
        "{sent:?}"
    );
    assert_eq!(sent[2]["params"]["uri"], "file:///a");
    assert!(matches!(
        d.phases.as_slice(),
        [GuardPhase::ServerRestarted {
            resubscribed: 1,
            ..
        }]
    ));
    // Their answers are the guard's; a refused subscription is told.
    s.handle_server_stdout(
        clock.at(202),
        &line(r#"{"jsonrpc":"2.0","id":"mcp-stdio-guard/replay/2","result":{}}"#),
    );
    s.handle_server_stdout(
        clock.at(202),
        &line(r#"{"jsonrpc":"2.0","id":"mcp-stdio-guard/replay/3","error":{"code":-32602,"message":"no such resource"}}"#),
    );
    let d = drain(&mut s, clock.at(202));
    assert!(d.to_host.is_empty(), "{d:?}");
    assert!(
        d.stderr.contains("file:///a") && d.stderr.contains("no such resource"),
        "{}",
        d.stderr
    );
    let report = s.report(100);
    assert_eq!(
        (report.proxy.resubscribed, report.proxy.resubscribe_failed),
        (1, 1)
    );
}

#[test]
fn a_2026_session_replays_its_discover_and_checks_the_version_it_uses() {
    let (mut s, clock) = session(3);
    s.handle_host(
        clock.at(1),
        &line(r#"{"jsonrpc":"2.0","id":"d","method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#),
    );
    s.handle_server_stdout(
        clock.at(2),
        &line(r#"{"jsonrpc":"2.0","id":"d","result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}}}}"#),
    );
    drain(&mut s, clock.at(2));
    let d = crash_and_restart(&mut s, &clock, 3, 200);
    let replay: serde_json::Value = serde_json::from_str(&d.to_server[0]).unwrap();
    assert_eq!(replay["method"], "server/discover");
    assert_eq!(
        replay["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
        "2026-07-28"
    );
    s.handle_server_stdout(
        clock.at(201),
        &line(r#"{"jsonrpc":"2.0","id":"mcp-stdio-guard/replay/1","result":{"supportedVersions":["2026-07-28","2025-11-25"],"capabilities":{"tools":{},"prompts":{}}}}"#),
    );
    let d = drain(&mut s, clock.at(201));
    assert!(d.to_host.is_empty(), "{d:?}");
    assert!(
        matches!(
            d.phases.as_slice(),
            [GuardPhase::ServerRestarted { handshake, protocol_version: Some(v), .. }]
                if handshake == "server/discover" && v == "2026-07-28"
        ),
        "{d:?}"
    );
}

#[test]
fn a_restarted_server_that_never_answers_the_replayed_handshake_is_given_up_on() {
    let (mut s, clock) = session(3);
    handshaken(&mut s, &clock);
    crash_and_restart(&mut s, &clock, 5, 200);
    let due = s.poll_timeout().expect("the replay's deadline");
    let wait = due.duration_since(clock.at(200).instant);
    assert_eq!(wait, crate::guard::restart::REPLAY_TIMEOUT);
    let late = 200 + u64::try_from(wait.as_millis()).unwrap();
    s.handle_timeout(clock.at(late));
    let d = drain(&mut s, clock.at(late));
    assert!(
        d.stderr.contains("did not answer the replayed handshake"),
        "{}",
        d.stderr
    );
    assert_eq!(d.actions, [GuardAction::CloseServerStdin], "{d:?}");
    assert_eq!(s.closed_by_guard(), Some("restart_refused"));
}

/// `--idle-stop`: a session with its handshake done and `idle` ms of it.
fn sleepy(idle: u64) -> (GuardSession, Clock) {
    let mut config = GuardConfig::default();
    config.idle_stop(Some(Duration::from_millis(idle)));
    config.proxy_mut().session_id("s");
    let clock = Clock(Instant::now());
    let mut s = GuardSession::new(config);
    s.handle_spawned(clock.at(0));
    s.handle_host(clock.at(1), &line(INIT));
    drain(&mut s, clock.at(1));
    s.handle_server_stdout(clock.at(2), &line(INIT_ANSWER));
    drain(&mut s, clock.at(2));
    s.handle_host(
        clock.at(3),
        &line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
    );
    drain(&mut s, clock.at(3));
    (s, clock)
}

/// F2, servers that sleep when idle: never while a call is in flight
/// (however long it runs), stopped `--idle-stop` after the last byte once
/// nothing is open, audited and shown as `sleeping`; the host's next
/// message starts a new server, its handshake replayed before the
/// message, the host none the wiser.
#[test]
fn f2_idle_stop_never_during_a_call_then_sleeps_and_the_next_message_wakes_it() {
    let (mut s, clock) = sleepy(1000);
    s.handle_host(
        clock.at(10),
        &line(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow"}}"#),
    );
    drain(&mut s, clock.at(10));
    // A call 30 s long: the idle clock does not run.
    assert_eq!(s.idle_deadline(), None);
    s.handle_timeout(clock.at(30_000));
    let d = drain(&mut s, clock.at(30_000));
    assert!(d.actions.is_empty() && d.phases.is_empty(), "{d:?}");
    s.handle_server_stdout(
        clock.at(30_010),
        &line(r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#),
    );
    drain(&mut s, clock.at(30_010));
    assert_eq!(
        s.idle_deadline(),
        Some(clock.at(31_010).instant),
        "idle from the answer's arrival"
    );
    s.handle_timeout(clock.at(31_010));
    let d = drain(&mut s, clock.at(31_010));
    assert_eq!(d.actions, [GuardAction::CloseServerStdin], "{d:?}");
    assert!(
        matches!(
            d.phases.as_slice(),
            [GuardPhase::ServerIdleStopped {
                server: 1,
                idle_ms: 1000,
                ..
            }]
        ),
        "{d:?}"
    );
    assert!(d.stderr.contains("idle for 1.0 s"), "{}", d.stderr);
    let d = crash(&mut s, clock.at(31_020), ExitStatus::Code(0));
    assert_eq!(
        d.actions,
        [GuardAction::ReapServer],
        "a sleep, not the end: {d:?}"
    );
    assert!(d.to_host.is_empty(), "{d:?}");
    assert_eq!(s.lives.restarts(), 0, "not a restart");
    assert!(s.lives.is_asleep());
    assert_eq!(s.poll_timeout(), None, "asleep until the host speaks");

    // The host's next message wakes it: the handshake goes first.
    s.handle_host(
        clock.at(60_000),
        &line(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#),
    );
    let d = drain(&mut s, clock.at(60_000));
    assert_eq!(d.actions, [GuardAction::RespawnServer], "{d:?}");
    s.handle_spawned(clock.at(60_100));
    let d = drain(&mut s, clock.at(60_100));
    assert_eq!(d.to_server.len(), 1, "the handshake only: {d:?}");
    assert!(d.to_server[0].contains("\"initialize\""), "{d:?}");
    let replay_id: serde_json::Value = serde_json::from_str(&d.to_server[0]).unwrap();
    let answer = INIT_ANSWER.replace("\"id\":0", &format!("\"id\":{}", replay_id["id"]));
    s.handle_server_stdout(clock.at(60_200), &line(&answer));
    let d = drain(&mut s, clock.at(60_200));
    assert!(
        d.to_server.iter().any(|m| m.contains("\"ping\"")),
        "the host's message after the handshake: {d:?}"
    );
    assert!(
        matches!(
            d.phases.as_slice(),
            [GuardPhase::ServerResumed { server: 2, .. }]
        ),
        "{d:?}"
    );
    assert!(
        d.to_host.is_empty(),
        "the replay's answer is the guard's: {d:?}"
    );
    s.handle_server_stdout(
        clock.at(60_210),
        &line(r#"{"jsonrpc":"2.0","id":2,"result":{}}"#),
    );
    let d = drain(&mut s, clock.at(60_210));
    assert_eq!(d.to_host.len(), 1, "{d:?}");
    let report = s.report(0);
    assert_eq!(
        (report.idle_stops, report.resumes, report.restarts),
        (1, 1, 0)
    );
}

/// F2: a subscription holds the server awake; the host leaving a sleeping
/// session ends it with exit 0 (the guard stopped the server).
#[test]
fn f2_a_subscription_holds_the_server_and_a_host_leaving_a_sleeping_session_exits_0() {
    let (mut s, clock) = sleepy(1000);
    s.handle_host(
        clock.at(10),
        &line(r#"{"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"file:///a"}}"#),
    );
    drain(&mut s, clock.at(10));
    s.handle_server_stdout(
        clock.at(11),
        &line(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
    );
    drain(&mut s, clock.at(11));
    assert_eq!(s.idle_deadline(), None, "subscribed");
    s.handle_host(
        clock.at(20),
        &line(r#"{"jsonrpc":"2.0","id":2,"method":"resources/unsubscribe","params":{"uri":"file:///a"}}"#),
    );
    drain(&mut s, clock.at(20));
    s.handle_server_stdout(
        clock.at(21),
        &line(r#"{"jsonrpc":"2.0","id":2,"result":{}}"#),
    );
    drain(&mut s, clock.at(21));
    assert_eq!(s.idle_deadline(), Some(clock.at(1021).instant));
    s.handle_timeout(clock.at(1021));
    drain(&mut s, clock.at(1021));
    crash(&mut s, clock.at(1030), ExitStatus::Signal(15));
    s.handle_host_eof(clock.at(2000));
    let d = drain(&mut s, clock.at(2000));
    assert_eq!(finished(&d), 0, "{d:?}");
}

/// F1 with F2: a host's signal while the server sleeps ends the session
/// with the status the server would have died with.
#[test]
fn f2_a_host_signal_while_the_server_sleeps_exits_as_the_server_would_have() {
    let (mut s, clock) = sleepy(1000);
    s.handle_timeout(clock.at(1003));
    drain(&mut s, clock.at(1003));
    crash(&mut s, clock.at(1010), ExitStatus::Code(0));
    s.handle_signal(clock.at(2000), crate::Signal::Term);
    let d = drain(&mut s, clock.at(2000));
    assert_eq!(finished(&d), 143, "{d:?}");
}
