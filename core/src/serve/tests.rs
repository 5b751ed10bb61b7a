use super::*;
use crate::wire::message::to_raw;

fn req(id: u64, method: &str) -> Vec<u8> {
    format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"{method}\"}}\n").into_bytes()
}

fn cancel(id: u64) -> Vec<u8> {
    format!("{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{{\"requestId\":{id}}}}}\n").into_bytes()
}

/// The lifecycle tests below are about handlers: every request starts one.
fn handler_sees_all() -> ServeOptions {
    let mut o = ServeOptions::default();
    o.basics_mut().answer_basics(false);
    o
}

use crate::outbox::WriteCursor;

impl ServeLifecycle {
    /// The rest of the held message, as `poll_output` would offer it.
    fn pending_write(&mut self) -> Option<&[u8]> {
        match self.session.outbox().cursor() {
            WriteCursor::Held { bytes, offset } if self.pending_len() > 0 => {
                Some(&bytes[*offset..])
            }
            _ => None,
        }
    }

    /// The held message, taken whole as a writer thread would.
    fn take_write(&mut self) -> Option<Vec<u8>> {
        (self.pending_len() > 0).then(|| self.session.outbox_mut().lend().take())
    }
}

fn actions(s: &mut ServeLifecycle) -> Vec<ServeAction> {
    std::iter::from_fn(|| s.poll_action()).collect()
}

/// Writes everything pending, as a client that reads would.
fn drain_output(s: &mut ServeLifecycle, now: Instant) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        if let Some(b) = s.pending_write() {
            let n = b.len();
            out.push(String::from_utf8(b.to_vec()).unwrap());
            s.handle_written(now, n);
        } else if s.flush_due() {
            s.handle_flushed(now);
        } else {
            return out;
        }
    }
}

#[test]
fn g7_request_cancel_and_suppressed_response() {
    let t = Instant::now();
    let mut s = ServeLifecycle::new(&handler_sees_all());
    s.handle_stdin(t, &req(1, "slow"));
    let a = actions(&mut s);
    assert!(matches!(&a[..], [ServeAction::Start(r)] if r.id == Id::Number(1)));
    s.handle_stdin(t, &cancel(1));
    let a = actions(&mut s);
    assert!(matches!(&a[..], [ServeAction::Cancel { id, .. }] if *id == Id::Number(1)));
    s.handler_aborted(t, &Id::Number(1));
    assert!(drain_output(&mut s, t).is_empty());
    assert_eq!(s.running(), 0);
}

#[test]
fn g1_input_keeps_flowing_while_a_write_is_stuck() {
    let t = Instant::now();
    let mut s = ServeLifecycle::new(&handler_sees_all());
    s.handle_stdin(t, &req(1, "a"));
    let _ = actions(&mut s);
    let big = to_raw(&"x".repeat(100_000)).unwrap();
    s.handler_finished(t, &Id::Number(1), Ok(&big));
    // The client reads nothing: the write stays pending, part written.
    s.handle_written(t, 10);
    assert!(s.pending_write().is_some());
    assert!(s.wants_input());
    s.handle_stdin(t, &req(2, "slow"));
    s.handle_stdin(t, &cancel(2));
    let a = actions(&mut s);
    assert!(matches!(
        &a[..],
        [ServeAction::Start(_), ServeAction::Cancel { .. }]
    ));
}

#[test]
fn g1_drain_deadline_aborts_handlers_then_gives_up_unread_output() {
    let t = Instant::now();
    let opts = ServeOptions {
        drain_timeout: Duration::from_millis(100),
        ..handler_sees_all()
    };
    let mut s = ServeLifecycle::new(&opts);
    s.handle_stdin(t, &req(1, "a"));
    s.handle_stdin(t, &req(2, "b"));
    s.handle_input_eof(t);
    assert_eq!(actions(&mut s).len(), 2);
    assert!(!s.wants_input());
    let d = s.poll_timeout().expect("drain deadline");
    assert_eq!(d, t + Duration::from_millis(100));
    s.handle_timeout(t + Duration::from_millis(50));
    assert!(actions(&mut s).is_empty(), "spurious timeout does nothing");
    s.handle_timeout(d);
    let a = actions(&mut s);
    assert!(a.iter().all(|a| matches!(a, ServeAction::Abort(_))) && a.len() == 2);
    // Both answered with an error, but the client reads nothing.
    assert!(s.pending_write().is_some());
    assert!(!s.is_finished());
    let e = s.poll_timeout().expect("exit deadline");
    assert_eq!(e, d + EXIT_WRITE_GRACE);
    s.handle_timeout(e);
    assert!(s.is_finished());
    let r = s.report();
    assert_eq!(r.aborted_at_exit, 2);
    assert_eq!(r.end, ServeEnd::InputClosed);
    assert!(r.unwritten_at_exit > 0);
    // A late end from an abandoned handler is ignored.
    s.handler_finished(e, &Id::Number(1), Ok(&to_raw(&1).unwrap()));
    assert!(s.is_finished());
}

#[test]
fn eof_with_nothing_running_finishes_after_output_drains() {
    let t = Instant::now();
    let mut s = ServeLifecycle::new(&handler_sees_all());
    s.handle_stdin(t, &req(1, "a"));
    let _ = actions(&mut s);
    s.handle_input_eof(t);
    assert!(!s.is_finished());
    s.handler_finished(t, &Id::Number(1), Ok(&to_raw(&"ok").unwrap()));
    let out = drain_output(&mut s, t);
    assert_eq!(out.len(), 1);
    assert!(s.is_finished());
    assert_eq!(s.report().end, ServeEnd::InputClosed);
    assert_eq!(s.report().unwritten_at_exit, 0);
}

#[test]
fn write_failure_aborts_every_handler_and_ends() {
    let t = Instant::now();
    let mut s = ServeLifecycle::new(&handler_sees_all());
    s.handle_stdin(t, &req(1, "a"));
    s.handle_stdin(t, &req(2, "b"));
    let _ = actions(&mut s);
    s.handle_write_failed(t);
    let a = actions(&mut s);
    assert_eq!(a.len(), 2);
    assert!(a.iter().all(|a| matches!(a, ServeAction::Abort(_))));
    assert!(s.is_finished());
    assert!(!s.wants_input());
    assert_eq!(s.report().end, ServeEnd::WriteFailed);
    assert!(s.notify(t, "n", None).is_err());
}

#[test]
fn a_message_handed_out_whole_stays_counted_until_written() {
    let t = Instant::now();
    let mut s = ServeLifecycle::new(&handler_sees_all());
    s.handle_stdin(t, &req(1, "ping"));
    let _ = actions(&mut s);
    s.handler_finished(t, &Id::Number(1), Ok(&to_raw(&"pong").unwrap()));
    let bytes = s.take_write().expect("a message");
    assert!(s.pending_write().is_none() && s.take_write().is_none());
    assert_eq!(s.outgoing_bytes(), bytes.len());
    s.handle_written(t, bytes.len());
    assert_eq!(s.outgoing_bytes(), 0);
    assert!(s.flush_due());
    s.handle_flushed(t);
    s.handle_input_eof(t);
    assert!(s.is_finished());
}

#[test]
fn huge_drain_timeout_does_not_overflow() {
    let t = Instant::now();
    let opts = ServeOptions {
        drain_timeout: Duration::MAX,
        ..handler_sees_all()
    };
    let mut s = ServeLifecycle::new(&opts);
    s.handle_stdin(t, &req(1, "a"));
    s.handle_input_eof(t);
    let _ = actions(&mut s);
    assert_eq!(s.poll_timeout(), None);
    s.handler_finished(t, &Id::Number(1), Ok(&to_raw(&1).unwrap()));
    drain_output(&mut s, t);
    assert!(s.is_finished());
}

#[test]
fn g1_refused_notifications_are_counted_when_the_client_stops_reading() {
    let t = Instant::now();
    let mut opts = handler_sees_all();
    opts.session.max_outgoing_bytes(1000);
    let mut s = ServeLifecycle::new(&opts);
    let params = to_raw(&"y".repeat(200)).unwrap();
    let mut refused = 0;
    for _ in 0..20 {
        if s.notify(t, "notifications/message", Some(&params)).is_err() {
            refused += 1;
        }
    }
    assert!(refused > 0);
    assert_eq!(s.report().notifications_refused, refused);
    assert!(s.outgoing_bytes() < 1000 + 300, "{}", s.outgoing_bytes());
}

fn one_tool_options() -> ServeOptions {
    let mut basics = ServerBasics::default();
    basics
        .server_info("one-tool", "0.1.0")
        .and_then(|b| b.tool(&serde_json::json!({"name": "echo", "inputSchema": {}})))
        .unwrap();
    let mut o = ServeOptions::default();
    *o.basics_mut() = basics;
    o
}

fn line(id: u64, method: &str, params: &str) -> Vec<u8> {
    format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"{method}\",\"params\":{params}}}\n")
        .into_bytes()
}

/// G1: a full stdout parks the write (and the flush) until the loop says
/// it is writable; then the rest of the same message, then the flush.
#[test]
fn g1_a_full_stdout_parks_the_write_until_it_is_writable() {
    let t = Instant::now();
    let mut s = ServeLifecycle::new(&one_tool_options());
    let ping = line(1, "ping", "{}");
    let read = ServeInput::Read {
        result: Ok(ping.len()),
        buf: &ping,
    };
    s.handle_input(t, read);
    let ServeOutput::Write(out) = s.poll_output() else {
        panic!("the answer is offered to write");
    };
    let answer = out.bytes().to_vec();
    s.handle_input(t, ServeInput::Written(Ok(3)));
    let full = Err(std::io::ErrorKind::WouldBlock.into());
    s.handle_input(t, ServeInput::Written(full));
    assert!(matches!(s.poll_output(), ServeOutput::Timeout(_)));
    s.handle_input(t, ServeInput::Writable);
    let ServeOutput::Write(out) = s.poll_output() else {
        panic!("offered again once writable");
    };
    assert_eq!(out.bytes(), &answer[3..]);
    let rest = answer.len() - 3;
    s.handle_input(t, ServeInput::Written(Ok(rest)));
    assert!(matches!(s.poll_output(), ServeOutput::Flush));
    s.handle_input(t, ServeInput::Flushed(Ok(())));
    assert!(matches!(s.poll_output(), ServeOutput::Timeout(_)));
    // The end of stdin: the loop is told to stop reading, once, and the
    // loop ends with nothing left to write.
    s.handle_input(
        t,
        ServeInput::Read {
            result: Ok(0),
            buf: &[],
        },
    );
    assert!(matches!(s.poll_output(), ServeOutput::CloseInput));
    assert!(matches!(s.poll_output(), ServeOutput::Finished));
}

#[test]
fn the_basics_are_answered_in_order_without_starting_a_handler() {
    let t = Instant::now();
    let mut s = ServeLifecycle::new(&one_tool_options());
    s.handle_stdin(
        t,
        &line(1, "initialize", r#"{"protocolVersion":"2025-03-26"}"#),
    );
    s.handle_stdin(t, &line(2, "ping", "{}"));
    s.handle_stdin(t, &line(3, "tools/list", "{}"));
    s.handle_stdin(t, &line(4, "resources/list", "{}"));
    s.handle_stdin(t, &line(5, "tools/call", r#"{"name":"nope"}"#));
    s.handle_stdin(t, &line(6, "tools/call", r#"{"name":"echo"}"#));
    let a = actions(&mut s);
    assert!(
        matches!(&a[..], [ServeAction::Start(r)] if r.id == Id::Number(6)),
        "{a:?}"
    );
    let out: Vec<serde_json::Value> = drain_output(&mut s, t)
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<i64> = out.iter().map(|v| v["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, [1, 2, 3, 4, 5]);
    assert_eq!(out[0]["result"]["protocolVersion"], "2025-03-26");
    assert_eq!(out[0]["result"]["serverInfo"]["name"], "one-tool");
    assert_eq!(out[1]["result"], serde_json::json!({}));
    assert_eq!(out[2]["result"]["tools"][0]["name"], "echo");
    assert_eq!(
        out[3]["error"]["code"],
        crate::wire::message::METHOD_NOT_FOUND
    );
    assert_eq!(
        out[4]["error"]["code"],
        crate::wire::message::INVALID_PARAMS
    );
    s.handler_finished(t, &Id::Number(6), Ok(&to_raw(&"echoed").unwrap()));
    assert_eq!(drain_output(&mut s, t).len(), 1);
    s.handle_input_eof(t);
    assert!(s.is_finished());
    let r = s.report();
    assert_eq!(r.protocol_version, Some("2025-03-26"));
    assert_eq!(s.protocol_version(), Some("2025-03-26"));
    assert_eq!(
        r.client_info, None,
        "the test's initialize gave no clientInfo"
    );
    assert_eq!(r.basics.answered, 5);
    assert_eq!(r.basics.method_not_found, 1);
    assert_eq!(r.basics.unknown_tools, 1);
    assert_eq!(r.metrics.requests, 6);
    assert_eq!(r.metrics.responses, 6);
}

#[test]
fn g1_unread_basic_answers_stay_within_max_concurrent() {
    // A client that sends pings and never reads: answers wait one per
    // request in flight, then the session's overload reply takes over.
    let t = Instant::now();
    let mut o = one_tool_options();
    o.session.max_concurrent(4).max_outgoing_bytes(4096);
    let mut s = ServeLifecycle::new(&o);
    for id in 0..10_000 {
        s.handle_stdin(t, &line(id, "ping", "{}"));
    }
    assert!(actions(&mut s).is_empty());
    assert!(
        s.outgoing_bytes() < 4 * 100 + 4096 + 200,
        "{}",
        s.outgoing_bytes()
    );
    let r = s.report();
    // One answer being written (it left the registry) plus four queued.
    assert_eq!(r.basics.answered, 5);
    assert_eq!(r.metrics.overload_rejects, 9_995);
}

#[test]
fn the_way_out_starts_a_handler_for_initialize_and_ping() {
    let t = Instant::now();
    let mut s = ServeLifecycle::new(&handler_sees_all());
    s.handle_stdin(
        t,
        &line(1, "initialize", r#"{"protocolVersion":"2025-03-26"}"#),
    );
    s.handle_stdin(t, &line(2, "ping", "{}"));
    let a = actions(&mut s);
    assert_eq!(a.len(), 2);
    assert!(a.iter().all(|a| matches!(a, ServeAction::Start(_))));
    assert!(drain_output(&mut s, t).is_empty());
    assert_eq!(s.report().protocol_version, None);
}
// ---- the 2026-07-28 revision, and nothing after a cancel ----

const META26: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"m","version":"1"}}"#;

fn outputs(s: &mut ServeLifecycle, t: Instant) -> Vec<serde_json::Value> {
    drain_output(s, t)
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn modern_results_take_the_2026_shape_and_legacy_ones_stay_as_they_are() {
    let t = Instant::now();
    let mut s = ServeLifecycle::new(&one_tool_options());
    s.handle_stdin(t, &line(1, "server/discover", &format!("{{{META26}}}")));
    s.handle_stdin(t, &line(2, "tools/list", &format!("{{{META26}}}")));
    let call = format!(r#"{{"name":"echo",{META26}}}"#);
    s.handle_stdin(t, &line(3, "tools/call", &call));
    s.handle_stdin(t, &line(4, "tools/call", r#"{"name":"echo"}"#));
    let a = actions(&mut s);
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(
        s.request_protocol_version(&Id::Number(3)),
        Some("2026-07-28")
    );
    let hello = s
        .request_client(&Id::Number(3))
        .expect("the request's context");
    assert_eq!(hello.client_info, Some(Implementation::new("m", "1")));
    let result = to_raw(&serde_json::json!({"content": []})).unwrap();
    s.handler_finished(t, &Id::Number(3), Ok(&result));
    let out = outputs(&mut s, t);
    assert_eq!(out[0]["result"]["resultType"], "complete");
    assert_eq!(out[0]["result"]["supportedVersions"][0], "2026-07-28");
    assert_eq!(out[1]["result"]["resultType"], "complete");
    assert_eq!(out[1]["result"]["ttlMs"], 0);
    assert_eq!(out[1]["result"]["cacheScope"], "private");
    // Request 4 has no `_meta`, in a session that began modern: refused at once.
    assert_eq!(out[2]["id"], 4);
    assert_eq!(
        out[2]["error"]["code"],
        crate::wire::message::INVALID_PARAMS
    );
    assert_eq!(
        out[3]["result"],
        serde_json::json!({"resultType": "complete", "content": []})
    );
    let r = s.report();
    assert!(r.began_modern);
    assert_eq!(r.client_info, Some(Implementation::new("m", "1")));
    assert_eq!(r.basics.modern_requests, 3);
    assert_eq!(r.basics.missing_meta_refused, 1);

    // A legacy session: the handler's result goes out byte for byte.
    let mut s = ServeLifecycle::new(&one_tool_options());
    s.handle_stdin(
        t,
        &line(1, "initialize", r#"{"protocolVersion":"2025-11-25"}"#),
    );
    s.handle_stdin(t, &line(2, "tools/call", r#"{"name":"echo"}"#));
    let _ = actions(&mut s);
    assert_eq!(
        s.request_protocol_version(&Id::Number(2)),
        Some("2025-11-25")
    );
    s.handler_finished(t, &Id::Number(2), Ok(&result));
    let out = drain_output(&mut s, t);
    assert_eq!(
        out[1],
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"content\":[]}}\n"
    );
    assert!(!s.report().began_modern);
}

/// G9: the fields a modern result gains count against the wire limit.
#[test]
fn g9_a_modern_result_pushed_past_the_limit_by_its_new_fields_becomes_an_error() {
    let t = Instant::now();
    let mut o = one_tool_options();
    o.framer_mut().max_frame(4096);
    let call = format!(r#"{{"name":"echo",{META26}}}"#);
    for (modern, text_len) in [(false, 0), (true, 0)] {
        let mut s = ServeLifecycle::new(&o);
        let params = if modern {
            call.clone()
        } else {
            r#"{"name":"echo"}"#.to_owned()
        };
        s.handle_stdin(t, &line(1, "tools/call", &params));
        let _ = actions(&mut s);
        // A result that fits exactly as given: envelope `{"jsonrpc":"2.0","id":1,"result":}` + `\n`.
        let envelope = r#"{"jsonrpc":"2.0","id":1,"result":}"#.len() + 1;
        let fill = 4096 - envelope - r#"{"text":""}"#.len() - text_len;
        let result = format!(r#"{{"text":"{}"}}"#, "x".repeat(fill));
        let result = RawValue::from_string(result).unwrap();
        s.handler_finished(t, &Id::Number(1), Ok(&result));
        let out = outputs(&mut s, t);
        if modern {
            assert_eq!(
                out[0]["error"]["code"],
                crate::wire::message::SERVER_ERROR,
                "{}",
                out[0]
            );
            assert_eq!(s.report().metrics.responses_too_large, 1);
        } else {
            assert_eq!(out[0]["result"]["text"].as_str().unwrap().len(), fill);
        }
    }
}

/// G7: after the cancel arrived, nothing more for that request leaves:
/// not its response, not its notifications (queued ones are withdrawn),
/// while a server-wide notification still goes out.
#[test]
fn g7_no_notification_or_response_for_a_cancelled_request_leaves() {
    let t = Instant::now();
    for modern in [false, true] {
        let mut s = ServeLifecycle::new(&handler_sees_all());
        let params = if modern {
            format!("{{{META26}}}")
        } else {
            "{}".to_owned()
        };
        s.handle_stdin(t, &line(1, "slow", &params));
        s.handle_stdin(t, &line(2, "other", &params));
        let _ = actions(&mut s);
        let progress = to_raw(&serde_json::json!({"progressToken": 1, "progress": 1})).unwrap();
        // Three queued (the first one is taken for writing at once).
        for _ in 0..3 {
            s.notify_related(t, &Id::Number(1), "notifications/progress", Some(&progress))
                .unwrap();
        }
        s.handle_stdin(t, &cancel(1));
        let _ = actions(&mut s);
        assert_eq!(s.session().metrics().notifications_withdrawn, 2);
        assert_eq!(
            s.notify_related(t, &Id::Number(1), "notifications/progress", Some(&progress)),
            Err(NotifyError::RequestOver)
        );
        s.handle_input(
            t,
            ServeInput::NotifyRelated {
                id: &Id::Number(1),
                method: "notifications/progress",
                params: Some(&progress),
            },
        );
        // Its late result is suppressed.
        s.handler_finished(t, &Id::Number(1), Ok(&to_raw(&"late").unwrap()));
        // Request 2 still notifies; a server-wide notification still goes out.
        s.notify_related(t, &Id::Number(2), "notifications/message", None)
            .unwrap();
        s.notify(t, "notifications/tools/list_changed", None)
            .unwrap();
        s.handler_finished(
            t,
            &Id::Number(2),
            Ok(&to_raw(&serde_json::json!({})).unwrap()),
        );
        // After its answer, request 2 gets nothing more out either.
        assert_eq!(
            s.notify_related(t, &Id::Number(2), "notifications/message", None),
            Err(NotifyError::RequestOver)
        );
        let out = outputs(&mut s, t);
        let kinds: Vec<String> = out
            .iter()
            .map(|v| {
                v["method"]
                    .as_str()
                    .map_or_else(|| format!("response {}", v["id"]), str::to_owned)
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "notifications/progress",
                "notifications/message",
                "notifications/tools/list_changed",
                "response 2",
            ],
            "modern {modern}"
        );
        let r = s.report();
        assert_eq!(r.notifications_after_cancel_dropped, 2, "modern {modern}");
        assert_eq!(r.notifications_after_response_dropped, 1, "modern {modern}");
        assert_eq!(r.metrics.responses_suppressed, 1);
        assert_eq!(r.notifications_refused, 0);
    }
}
