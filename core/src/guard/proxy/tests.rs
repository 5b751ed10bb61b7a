use super::*;
use crate::records::call::CallState;
use crate::wire::frame::InvalidUtf8Policy;
use crate::wire::message::WIRE_LIMIT_EXCEEDED;
use std::time::Instant;

fn at() -> Stamp {
    Stamp::new(Instant::now(), 1_700_000_000_000)
}

fn drain_host(p: &mut Proxy) -> Vec<String> {
    let mut v = Vec::new();
    while let Some(b) = p.poll_to_host() {
        p.handle_host_written(b.len());
        v.push(String::from_utf8(b).expect("utf-8"));
    }
    v
}

fn drain_server(p: &mut Proxy) -> Vec<String> {
    let mut v = Vec::new();
    while let Some(b) = p.poll_to_server(u64::MAX) {
        p.handle_server_written(b.len());
        v.push(String::from_utf8(b).expect("utf-8"));
    }
    v
}

fn records(p: &mut Proxy) -> Vec<CallRecord> {
    std::iter::from_fn(|| p.poll_record()).collect()
}

fn small_frame(max: usize) -> GuardConfig {
    let mut c = GuardConfig::default();
    c.framer_mut().max_frame(max);
    c
}

#[test]
fn transparent_for_a_well_behaved_session() {
    let mut c = GuardConfig::default();
    c.proxy_mut().session_id("s1").target("server --flag");
    let mut p = Proxy::new(&c);
    let req =
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\"}}\n";
    p.handle_host(at(), req.as_bytes());
    let r = records(&mut p);
    assert_eq!(r.len(), 1, "the record comes with the request");
    assert_eq!(r[0].state(), CallState::Dispatched);
    assert_eq!(
        (
            r[0].call_id(),
            r[0].operation(),
            r[0].target(),
            r[0].session_id()
        ),
        ("1/1", "echo", "server --flag", "s1")
    );
    assert_eq!(drain_server(&mut p), [req]);
    let resp = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[]}}\n";
    p.handle_server(at(), resp.as_bytes());
    assert_eq!(drain_host(&mut p), [resp]);
    let r = records(&mut p);
    assert_eq!(r[0].state(), CallState::Completed);
    assert_eq!(r[0].outcome(), Some(CallOutcome::Succeeded));
    assert!(p.poll_event().is_none());
}

#[test]
fn g6_nothing_for_a_cancelled_id_reaches_the_host() {
    let mut p = Proxy::new(&GuardConfig::default());
    p.handle_host(
        at(),
        b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"slow\"}\n",
    );
    p.handle_host(
        at(),
        b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":7}}\n",
    );
    assert_eq!(drain_server(&mut p).len(), 2);
    let r = records(&mut p);
    assert_eq!(r[1].state(), CallState::CancelledAfterDispatch);
    p.handle_server(at(), b"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n");
    assert!(drain_host(&mut p).is_empty());
    assert_eq!(p.metrics().dropped_after_cancel, 1);
}

#[test]
fn g6_a_cancel_withdraws_a_queued_response_for_its_id() {
    let mut p = Proxy::new(&GuardConfig::default());
    p.handle_host(
        at(),
        b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"slow\"}\n",
    );
    p.handle_host(
        at(),
        b"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"slow\"}\n",
    );
    // Both answers wait for the host; the host then cancels 7.
    p.handle_server(at(), b"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n");
    p.handle_server(at(), b"{\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{}}\n");
    let waiting = p.host_backlog();
    p.handle_host(
        at(),
        b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":7}}\n",
    );
    let host = drain_host(&mut p);
    assert_eq!(host.len(), 1, "{host:?}");
    assert!(host[0].contains("\"id\":8"));
    assert!(p.host_backlog() == 0 && waiting > 0);
    assert_eq!(p.metrics().dropped_after_cancel, 1);
}

#[test]
fn g3_invalid_utf8_response_is_repaired_and_recorded() {
    let mut p = Proxy::new(&GuardConfig::default());
    p.handle_host(
        at(),
        b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\"}\n",
    );
    drain_server(&mut p);
    records(&mut p);
    p.handle_server(
        at(),
        b"{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"bad \xff\xfe byte\"}]}}\n",
    );
    let host = drain_host(&mut p);
    assert_eq!(host.len(), 1, "{host:?}");
    assert!(host[0].contains("bad \u{fffd}\u{fffd} byte"), "{host:?}");
    let r = records(&mut p);
    assert_eq!(r[0].outcome(), Some(CallOutcome::Succeeded));
    let events = serde_json::to_string(&r[0]).expect("record");
    assert!(
        events.contains("invalid UTF-8 repaired: 2 sequence(s)"),
        "{events}"
    );
    assert_eq!(p.metrics().server_utf8_repaired, 1);
}

#[test]
fn g3_refused_lines_fail_their_call_at_once() {
    let mut c = GuardConfig::default();
    c.framer_mut().invalid_utf8(InvalidUtf8Policy::Refuse);
    c.proxy_mut().limit_knob("--max-frame");
    let mut p = Proxy::new(&c);
    for id in [1, 2] {
        let req = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\"}}\n");
        p.handle_host(at(), req.as_bytes());
    }
    drain_server(&mut p);
    records(&mut p);
    // Not UTF-8 (refused by policy), then valid JSON that is no JSON-RPC
    // message, its id last.
    p.handle_server(
        at(),
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"\xff\"}\n",
    );
    p.handle_server(at(), b"{\"jsonrpc\":\"1.0\",\"result\":{},\"id\":2}\n");
    let host = drain_host(&mut p);
    assert_eq!(host.len(), 2, "{host:?}");
    assert!(
        host[0].contains("\"id\":1") && host[0].contains("not valid UTF-8"),
        "{host:?}"
    );
    assert!(
        host[1].contains("\"id\":2") && host[1].contains("malformed response"),
        "{host:?}"
    );
    let r = records(&mut p);
    assert_eq!(r.len(), 2);
    assert!(r
        .iter()
        .all(|r| r.outcome() == Some(CallOutcome::RemoteFailure)));
    assert_eq!(p.metrics().refused_responses_failed, 2);
}

#[test]
fn g3_the_wire_limit_error_names_the_guards_setting() {
    let mut c = small_frame(1024);
    c.proxy_mut().limit_knob("--max-frame");
    let mut p = Proxy::new(&c);
    p.handle_host(at(), b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"big\"}\n");
    let mut big = b"{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":\"".to_vec();
    big.extend(std::iter::repeat_n(b'x', 5000));
    big.extend_from_slice(b"\"}\n");
    p.handle_server(at(), &big);
    let host = drain_host(&mut p);
    let v: serde_json::Value = serde_json::from_str(&host[0]).expect("json");
    assert_eq!(v["error"]["code"], WIRE_LIMIT_EXCEEDED);
    assert_eq!(v["error"]["data"]["limit"], 1024);
    assert_eq!(v["error"]["data"]["seen"], 1025);
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.ends_with("raise --max-frame")),
        "{v}"
    );
}

#[test]
fn g3_oversized_response_becomes_an_error_for_its_id() {
    let mut p = Proxy::new(&small_frame(1024));
    p.handle_host(at(), b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"big\"}\n");
    let mut big = b"{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":\"".to_vec();
    big.extend(std::iter::repeat_n(b'x', 5000));
    big.extend_from_slice(b"\"}\n{\"jsonrpc\":\"2.0\",\"method\":\"after\"}\n");
    p.handle_server(at(), &big);
    let host = drain_host(&mut p);
    assert_eq!(host.len(), 2, "{host:?}");
    assert!(
        host[0].contains("\"id\":3") && host[0].contains("exceeded the wire limit (1024 bytes;")
    );
    assert!(host[1].contains("after"));
    let r = records(&mut p);
    assert_eq!(r[1].outcome(), Some(CallOutcome::LocalFailure));
}

#[test]
fn g3_id_last_oversized_response_becomes_an_error_at_its_end() {
    let mut p = Proxy::new(&small_frame(1024));
    p.handle_host(at(), b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"big\"}\n");
    p.handle_host(
        at(),
        b"{\"jsonrpc\":\"2.0\",\"id\":\"q\",\"method\":\"big\"}\n",
    );
    let _ = drain_server(&mut p);
    let mut big = b"{\"result\":{\"id\":\"q\",\"t\":\"".to_vec();
    big.extend(std::iter::repeat_n(b'x', 5000));
    big.extend_from_slice(b"\"},\"jsonrpc\":\"2.0\",\"id\":3}");
    for piece in big.chunks(333) {
        p.handle_server(at(), piece);
    }
    assert!(drain_host(&mut p).is_empty());
    p.handle_server(at(), b"\n");
    let host = drain_host(&mut p);
    assert_eq!(host.len(), 1, "{host:?}");
    assert!(
        host[0].contains("\"id\":3") && host[0].contains("exceeded the wire limit (1024 bytes;"),
        "{host:?}"
    );
    let r = records(&mut p);
    assert!(r
        .iter()
        .any(|r| r.outcome() == Some(CallOutcome::LocalFailure)));
    // No id anywhere: dropped with a note, counted, nothing answered.
    let mut nameless = b"{\"result\":\"".to_vec();
    nameless.extend(std::iter::repeat_n(b'x', 5000));
    nameless.extend_from_slice(b"\",\"jsonrpc\":\"2.0\"}\n");
    p.handle_server(at(), &nameless);
    assert!(drain_host(&mut p).is_empty());
    assert_eq!(p.metrics().oversized_response_ids_missing, 1);
}

#[test]
fn g2_oversized_request_never_reaches_the_server() {
    let mut p = Proxy::new(&small_frame(100));
    let mut req = b"{\"jsonrpc\":\"2.0\",\"id\":\"r\",\"method\":\"m\",\"params\":\"".to_vec();
    req.extend(std::iter::repeat_n(b'y', 500));
    req.extend_from_slice(b"\"}\n");
    p.handle_host(at(), &req);
    assert!(drain_server(&mut p).is_empty());
    let host = drain_host(&mut p);
    assert!(
        host[0].contains("\"id\":\"r\"") && host[0].contains("request exceeded the wire limit")
    );
}

#[test]
fn g13_non_protocol_stdout_moves_to_notes() {
    let mut p = Proxy::new(&GuardConfig::default());
    p.handle_server(
        at(),
        b"Server listening on stdio\n{\"jsonrpc\":\"2.0\",\"method\":\"n\"}\n",
    );
    assert_eq!(drain_host(&mut p).len(), 1);
    assert_eq!(
        p.poll_note().as_deref(),
        Some("[server stdout, not protocol] Server listening on stdio")
    );
    assert_eq!(p.metrics().non_protocol_lines, 1);
}

#[test]
fn g12_open_requests_end_unknown_with_the_exit_status() {
    let mut p = Proxy::new(&GuardConfig::default());
    p.handle_host(at(), b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\"}\n");
    p.handle_host(at(), b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"m\"}\n");
    let _ = records(&mut p);
    p.finish(at(), Some(crate::process::supervisor::ExitStatus::Code(3)));
    let r = records(&mut p);
    assert_eq!(r.len(), 2);
    assert_eq!((r[0].call_id(), r[1].call_id()), ("1/1", "2/2"));
    assert!(r.iter().all(|r| r.state() == CallState::Unknown
        && r.exit_status() == Some(crate::process::supervisor::ExitStatus::Code(3))));
    assert_eq!(p.tracked(), 0);
}

#[test]
fn g1_host_that_stops_reading_closes_at_the_limit_counting_unwritten_bytes() {
    let mut c = GuardConfig::default();
    c.proxy_mut().max_buffered(1000);
    let mut p = Proxy::new(&c);
    let note = |i: usize| {
        format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"n\",\"params\":\"{}\"}}\n",
            "x".repeat(i)
        )
    };
    // Taken by the adapter but never reported written: still counted.
    p.handle_server(at(), note(400).as_bytes());
    let taken = p.poll_to_host().expect("a message");
    assert_eq!(p.host_backlog(), taken.len());
    p.handle_server(at(), note(400).as_bytes());
    assert!(p.poll_event().is_none(), "{} bytes", p.host_backlog());
    // Progress keeps it open.
    p.handle_host_written(taken.len());
    p.handle_server(at(), note(400).as_bytes());
    assert!(p.poll_event().is_none());
    p.handle_server(at(), note(400).as_bytes());
    match p.poll_event() {
        Some(ProxyEvent::HostStoppedReading { waiting, limit }) => {
            assert!(waiting > 1000 && limit == 1000);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(p.host_closed(), Some(HostClosed::StoppedReading));
    assert!(p.poll_to_host().is_none(), "nothing is handed out any more");
    p.handle_server(at(), note(10).as_bytes());
    assert!(p.poll_to_host().is_none());
    assert!(p.metrics().host_bytes_dropped > 0);
    assert!(p.poll_event().is_none(), "decided once");
}

#[test]
fn g1_server_backlog_pauses_host_reading() {
    let mut c = GuardConfig::default();
    c.proxy_mut().max_buffered(100);
    let mut p = Proxy::new(&c);
    let req =
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\"}}\n";
    p.handle_host(at(), req.as_bytes());
    p.handle_host(at(), req.replace(":1,", ":2,").as_bytes());
    assert!(!p.wants_host_input());
    let a = p.poll_to_server(u64::MAX).expect("queued");
    let b = p.poll_to_server(u64::MAX).expect("queued");
    assert!(!p.wants_host_input(), "taken is not written");
    p.handle_server_written(a.len() + b.len());
    assert!(p.wants_host_input());
}

#[test]
fn a_write_error_closes_the_host_side_once() {
    let mut p = Proxy::new(&GuardConfig::default());
    p.handle_host_write_error();
    p.handle_host_write_error();
    assert_eq!(p.poll_event(), Some(ProxyEvent::HostOutputClosed));
    assert!(p.poll_event().is_none());
    p.handle_server(at(), b"{\"jsonrpc\":\"2.0\",\"method\":\"n\"}\n");
    assert!(p.poll_to_host().is_none());
}

#[cfg(feature = "fuzzing")]
#[test]
fn fuzz_proxy_random_inputs() {
    crate::fuzzing::run_random_inputs(0x2545_F491_4F6C_DD1D, 400, 512, crate::fuzzing::fuzz_proxy);
}

#[test]
fn cancelled_ids_are_bounded() {
    let mut c = GuardConfig::default();
    c.proxy_mut().max_cancelled(2);
    let mut p = Proxy::new(&c);
    for i in 0..5 {
        p.handle_host(
            at(),
            format!("{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{{\"requestId\":{i}}}}}\n").as_bytes(),
        );
    }
    // Id 0 was forgotten: its late response is forwarded; id 4 is not.
    p.handle_server(at(), b"{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{}}\n");
    p.handle_server(at(), b"{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{}}\n");
    assert_eq!(drain_host(&mut p).len(), 1);
}
