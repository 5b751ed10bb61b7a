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

// ---- MCP 2026-07-28 beside 2025-11-25 ----

/// Every note of a record, joined.
fn notes(r: &CallRecord) -> String {
    r.events()
        .filter_map(|e| e.detail.clone())
        .collect::<Vec<_>>()
        .join(" | ")
}

const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

#[test]
fn no_progress_for_a_cancelled_request_reaches_the_host() {
    let mut p = Proxy::new(&GuardConfig::default());
    let call = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"slow","_meta":{"progressToken":"t3"}}}
"#;
    p.handle_host(at(), call.as_bytes());
    let progress = |n: u32| {
        format!("{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{{\"progressToken\":\"t3\",\"progress\":{n}}}}}\n")
    };
    // Before the cancel: forwarded.
    p.handle_server(at(), progress(1).as_bytes());
    assert_eq!(drain_host(&mut p), [progress(1)]);
    // Queued when the cancel arrives: withdrawn with the request.
    p.handle_server(at(), progress(2).as_bytes());
    // A progress of another token is not touched.
    let other = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":9,\"progress\":1}}\n";
    p.handle_server(at(), other.as_bytes());
    p.handle_host(
        at(),
        b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":3}}\n",
    );
    // After it: dropped, and so is the late response.
    p.handle_server(at(), progress(3).as_bytes());
    p.handle_server(at(), b"{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}\n");
    assert_eq!(drain_host(&mut p), [other]);
    let m = p.metrics();
    assert_eq!(m.progress_dropped_after_cancel, 1, "{m:?}");
    assert_eq!(
        m.dropped_after_cancel, 3,
        "withdrawn, late progress, late response: {m:?}"
    );
    // A new request may reuse the token: its progress flows again.
    p.handle_host(at(), call.replace("\"id\":3", "\"id\":4").as_bytes());
    p.handle_server(at(), progress(1).as_bytes());
    assert_eq!(drain_host(&mut p), [progress(1)]);
}

#[test]
fn the_handshake_is_never_cancelled() {
    for method in ["initialize", "server/discover"] {
        let mut p = Proxy::new(&GuardConfig::default());
        p.handle_host(
            at(),
            format!("{{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"{method}\",\"params\":{{}}}}\n")
                .as_bytes(),
        );
        p.handle_host(
            at(),
            b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":0}}\n",
        );
        let to_server = drain_server(&mut p);
        assert_eq!(
            to_server.len(),
            1,
            "{method}: the cancel is not forwarded: {to_server:?}"
        );
        p.handle_server(at(), b"{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{}}\n");
        assert_eq!(
            drain_host(&mut p).len(),
            1,
            "{method}: the answer reaches the host"
        );
        assert_eq!(p.metrics().handshake_cancels_ignored, 1);
        assert_eq!(p.metrics().dropped_after_cancel, 0);
        let r = records(&mut p);
        assert_eq!(r.last().unwrap().outcome(), Some(CallOutcome::Succeeded));
        assert_eq!(r[0].operation(), method);
    }
}

#[test]
fn handshakes_are_recorded_with_their_versions() {
    let mut p = Proxy::new(&GuardConfig::default());
    p.handle_host(
        at(),
        format!("{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{{{META}}}}}\n").as_bytes(),
    );
    p.handle_server(
        at(),
        br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","supportedVersions":["2026-07-28","2025-11-25"],"capabilities":{},"ttlMs":0,"cacheScope":"private"}}
"#,
    );
    let r = records(&mut p);
    assert!(
        notes(&r[1]).contains("offers protocol 2026-07-28, 2025-11-25"),
        "{}",
        notes(&r[1])
    );
    assert_eq!(p.metrics().discovers, 1);
    assert_eq!(
        p.protocol_version(),
        Some("2026-07-28"),
        "from the request's _meta"
    );

    let mut p = Proxy::new(&GuardConfig::default());
    p.handle_host(
        at(),
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\"}}\n",
    );
    p.handle_server(
        at(),
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{}}}\n",
    );
    let r = records(&mut p);
    assert!(
        notes(&r[1]).contains("protocol 2025-06-18"),
        "{}",
        notes(&r[1])
    );
    assert_eq!(p.protocol_version(), Some("2025-06-18"));
    // A server request to a 2025 host is fine; to a 2026 host it is counted.
    let ask = b"{\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"method\":\"roots/list\"}\n";
    p.handle_server(at(), ask);
    assert_eq!(p.metrics().server_requests_to_modern_host, 0);
    p.handle_host(
        at(),
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\",\"params\":{{{META}}}}}\n"
        )
        .as_bytes(),
    );
    p.handle_server(at(), ask);
    assert_eq!(p.metrics().server_requests_to_modern_host, 1);
    assert_eq!(drain_host(&mut p).len(), 3, "forwarded: the host answers");
}

#[test]
fn multi_round_trips_are_linked_calls_and_task_cancels_name_their_call() {
    let mut p = Proxy::new(&GuardConfig::default());
    p.handle_host(
        at(),
        format!("{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{{\"name\":\"book\",{META}}}}}\n").as_bytes(),
    );
    p.handle_server(
        at(),
        br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{"a":{}},"requestState":"opaque-1"}}
"#,
    );
    p.handle_host(
        at(),
        format!("{{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{{\"name\":\"book\",\"inputResponses\":{{}},\"requestState\":\"opaque-1\",{META}}}}}\n").as_bytes(),
    );
    p.handle_server(
        at(),
        br#"{"jsonrpc":"2.0","id":2,"result":{"resultType":"task","taskId":"task-9","status":"working"}}
"#,
    );
    p.handle_host(
        at(),
        format!("{{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tasks/cancel\",\"params\":{{\"taskId\":\"task-9\",{META}}}}}\n").as_bytes(),
    );
    let r = records(&mut p);
    let first = notes(&r[1]);
    let link = first
        .split("requestState #")
        .nth(1)
        .map(|s| &s[..16])
        .unwrap_or_else(|| panic!("no link in {first}"));
    let retry = notes(&r[3]);
    assert!(
        retry.contains(&format!("continues requestState #{link}")),
        "{retry}"
    );
    assert!(retry.contains("task task-9 created"), "{retry}");
    let cancel = notes(&r[4]);
    assert!(
        cancel.contains("cancels task task-9 created by call 2/2"),
        "{cancel}"
    );
    let m = p.metrics();
    assert_eq!(
        (m.input_required_results, m.tasks_created, m.task_cancels),
        (1, 1, 1)
    );
    // An ordinary result costs one substring search and says nothing more.
    assert_eq!(
        special_result_type(r#"{"resultType":"complete","content":[]}"#),
        None
    );
    assert_eq!(special_result_type(r#"{"content":[]}"#), None);
    assert_eq!(
        special_result_type(r#"{"resultType" : "task"}"#).as_deref(),
        Some("task")
    );
}
