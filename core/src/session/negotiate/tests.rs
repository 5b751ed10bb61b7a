use std::time::Instant;

use serde_json::{json, Value};

use super::*;
use crate::session::client::{ClientConfig, ClientEvent, ClientSession, SendError};
use crate::session::handshake::{
    RequestStamp, META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION,
};
use crate::wire::frame::FramerConfig;
use crate::wire::message::METHOD_NOT_FOUND;

const PROBE: Duration = Duration::from_secs(3);

/// A scripted answer to one request of the negotiation.
enum Answer {
    Result(Value),
    Error(i64, Option<Value>),
    TimedOut,
    Closed,
}

fn raw(v: &Value) -> Box<RawValue> {
    RawValue::from_string(v.to_string()).expect("JSON")
}

fn discover_result(versions: &[&str]) -> Answer {
    Answer::Result(json!({
        "resultType": "complete",
        "supportedVersions": versions,
        "capabilities": {"tools": {"listChanged": true}},
        "instructions": "be brief",
        "ttlMs": 60000,
        "cacheScope": "public",
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "modern", "version": "9"}}
    }))
}

fn init_result(version: &str) -> Answer {
    Answer::Result(json!({
        "protocolVersion": version,
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "legacy", "version": "1"}
    }))
}

fn unsupported(supported: &[&str]) -> Answer {
    Answer::Error(
        UNSUPPORTED_PROTOCOL_VERSION,
        Some(json!({"requested": "2026-07-28", "supported": supported})),
    )
}

/// One request the negotiation asked for: method, the version it names
/// (`_meta` for discover, `protocolVersion` for initialize), its timeout.
#[derive(Debug, PartialEq)]
struct Sent(&'static str, String, Option<Duration>);

/// Drives a negotiation through `answers`, in a bounded loop; returns what
/// it sent, whether it sent `notifications/initialized`, and the result.
fn run(
    policy: VersionPolicy,
    answers: Vec<Answer>,
) -> (Vec<Sent>, bool, Result<Negotiated, InitializeError>) {
    let mut n = Negotiation::new(policy, Implementation::new("t", "1"), None, PROBE);
    let mut answers = answers.into_iter();
    let mut sent = Vec::new();
    let mut notified = false;
    let mut step = n.start();
    for _ in 0..16 {
        step = match step {
            NegotiationStep::Request {
                method,
                params,
                timeout,
            } => {
                let p: Value = serde_json::from_str(params.get()).expect("JSON params");
                let version = if method == DISCOVER {
                    assert_eq!(p["_meta"][META_CLIENT_INFO]["name"], "t", "{p}");
                    assert!(p["_meta"][META_CLIENT_CAPABILITIES].is_object(), "{p}");
                    p["_meta"][META_PROTOCOL_VERSION].clone()
                } else {
                    p["protocolVersion"].clone()
                };
                sent.push(Sent(
                    method,
                    version.as_str().expect("a version").to_owned(),
                    timeout,
                ));
                let outcome = match answers.next().expect("an answer scripted for each request") {
                    Answer::Result(v) => Ok(RawResult::new(raw(&v))),
                    Answer::Error(code, data) => {
                        let mut e = ErrorObject::new(code, "no");
                        e.data = data.as_ref().map(raw);
                        Err(RequestError::Failed(RequestFailure::Server(e)))
                    }
                    Answer::TimedOut => Err(RequestError::Failed(RequestFailure::TimedOut {
                        after: PROBE,
                        cancel_sent: false,
                    })),
                    Answer::Closed => Err(RequestError::Failed(RequestFailure::SessionClosed)),
                };
                n.handle_response(outcome)
            }
            NegotiationStep::Notify { method } => {
                assert_eq!(method, INITIALIZED);
                notified = true;
                n.handle_notified(Ok(()))
            }
            NegotiationStep::Done(r) => {
                assert!(answers.next().is_none(), "answers left over");
                // After the end, the machine repeats its result.
                assert!(matches!(n.start(), NegotiationStep::Done(_)));
                return (sent, notified, r);
            }
        };
    }
    panic!("the negotiation did not end within 16 steps");
}

fn discover(version: &str, timeout: Option<Duration>) -> Sent {
    Sent(DISCOVER, version.to_owned(), timeout)
}

fn initialize(version: &str) -> Sent {
    Sent(INITIALIZE, version.to_owned(), None)
}

const MODERN: &str = "2026-07-28";

#[test]
fn modern_server_is_settled_by_discover_without_a_handshake() {
    let (sent, notified, r) = run(
        VersionPolicy::Auto,
        vec![discover_result(&[MODERN, "2025-11-25"])],
    );
    assert_eq!(sent, [discover(MODERN, Some(PROBE))]);
    assert!(
        !notified,
        "no notifications/initialized in a modern session"
    );
    let n = r.expect("negotiated");
    assert_eq!(n.protocol_version, MODERN);
    assert_eq!(n.via, NegotiatedVia::Discover);
    assert!(n.is_modern());
    assert_eq!(n.server_info, Some(Implementation::new("modern", "9")));
    assert_eq!(n.instructions.as_deref(), Some("be brief"));
    assert_eq!(n.capabilities.get(), r#"{"tools":{"listChanged":true}}"#);
    assert_eq!(
        n.supported_versions.as_deref(),
        Some(&[MODERN.to_owned(), "2025-11-25".to_owned()][..])
    );
    assert_eq!(n.fallback, None);
}

#[test]
fn discover_result_without_server_info_still_negotiates() {
    let (_, _, r) = run(
        VersionPolicy::Auto,
        vec![Answer::Result(
            json!({"supportedVersions": [MODERN], "capabilities": {}}),
        )],
    );
    let n = r.expect("negotiated");
    assert_eq!((n.via, n.server_info), (NegotiatedVia::Discover, None));
}

#[test]
fn any_probe_error_falls_back_to_initialize() {
    // -32601 (server-everything), and codes no one would key a fallback to.
    for code in [METHOD_NOT_FOUND, -32600, -32603, -32000, 42] {
        let (sent, notified, r) = run(
            VersionPolicy::Auto,
            vec![Answer::Error(code, None), init_result("2025-11-25")],
        );
        assert_eq!(
            sent,
            [
                discover(MODERN, Some(PROBE)),
                initialize(LATEST_HANDSHAKE_VERSION)
            ],
            "code {code}"
        );
        assert!(notified, "code {code}");
        let n = r.expect("negotiated");
        assert_eq!(n.via, NegotiatedVia::Initialize);
        assert_eq!(n.protocol_version, "2025-11-25");
        assert_eq!(n.server_info, Some(Implementation::new("legacy", "1")));
        assert!(
            matches!(&n.fallback, Some(FallbackReason::ProbeRejected(e)) if e.code == code),
            "{:?}",
            n.fallback
        );
    }
}

#[test]
fn probe_timeout_falls_back_and_an_older_handshake_answer_is_taken() {
    let (sent, notified, r) = run(
        VersionPolicy::Auto,
        vec![Answer::TimedOut, init_result("2025-03-26")],
    );
    assert_eq!(
        sent,
        [
            discover(MODERN, Some(PROBE)),
            initialize(LATEST_HANDSHAKE_VERSION)
        ]
    );
    assert!(notified);
    let n = r.expect("negotiated");
    assert_eq!(n.protocol_version, "2025-03-26");
    assert_eq!(n.fallback, Some(FallbackReason::ProbeTimedOut(PROBE)));
}

#[test]
fn unsupported_version_with_a_mutual_version_retries_once() {
    let (sent, notified, r) = run(
        VersionPolicy::Auto,
        vec![
            unsupported(&["2027-01-01", MODERN]),
            discover_result(&[MODERN]),
        ],
    );
    assert_eq!(
        sent,
        [discover(MODERN, Some(PROBE)), discover(MODERN, Some(PROBE))]
    );
    assert!(!notified);
    assert_eq!(r.expect("negotiated").via, NegotiatedVia::Discover);

    // Refused again at the mutual version: one retry only, then the list decides.
    let (sent, _, r) = run(
        VersionPolicy::Auto,
        vec![unsupported(&[MODERN]), unsupported(&[MODERN])],
    );
    assert_eq!(sent.len(), 2);
    assert_eq!(
        r.unwrap_err(),
        InitializeError::NoMutualVersion {
            offered: vec![MODERN.to_owned()]
        }
    );
}

#[test]
fn unsupported_version_with_no_mutual_version() {
    // Only versions we do not speak: an incompatibility, no handshake tried.
    let (sent, _, r) = run(VersionPolicy::Auto, vec![unsupported(&["2027-01-01"])]);
    assert_eq!(sent, [discover(MODERN, Some(PROBE))]);
    assert_eq!(
        r.unwrap_err(),
        InitializeError::NoMutualVersion {
            offered: vec!["2027-01-01".to_owned()]
        }
    );
    // A handshake version among them: the handshake, and the list is kept.
    let (sent, _, r) = run(
        VersionPolicy::Auto,
        vec![
            unsupported(&["2027-01-01", "2025-06-18"]),
            init_result("2025-06-18"),
        ],
    );
    assert_eq!(
        sent,
        [
            discover(MODERN, Some(PROBE)),
            initialize(LATEST_HANDSHAKE_VERSION)
        ]
    );
    let n = r.expect("negotiated");
    assert_eq!(n.protocol_version, "2025-06-18");
    assert_eq!(
        n.supported_versions,
        Some(vec!["2027-01-01".to_owned(), "2025-06-18".to_owned()])
    );
    // No usable list at all: not evidence of anything, fall back.
    let (sent, _, r) = run(
        VersionPolicy::Auto,
        vec![
            Answer::Error(UNSUPPORTED_PROTOCOL_VERSION, Some(json!("garbage"))),
            init_result("2025-11-25"),
        ],
    );
    assert_eq!(sent.len(), 2);
    assert_eq!(r.expect("negotiated").via, NegotiatedVia::Initialize);
}

#[test]
fn discover_listing_only_handshake_versions_falls_back() {
    let (sent, notified, r) = run(
        VersionPolicy::Auto,
        vec![
            discover_result(&["2025-11-25", "2025-06-18"]),
            init_result("2025-11-25"),
        ],
    );
    assert_eq!(
        sent,
        [
            discover(MODERN, Some(PROBE)),
            initialize(LATEST_HANDSHAKE_VERSION)
        ]
    );
    assert!(notified);
    let n = r.expect("negotiated");
    assert_eq!(
        n.fallback,
        Some(FallbackReason::NoModernVersion(vec![
            "2025-11-25".to_owned(),
            "2025-06-18".to_owned()
        ]))
    );
    assert_eq!(n.supported_versions.as_ref().map(Vec::len), Some(2));
}

#[test]
fn unusable_discover_result_falls_back() {
    let (sent, _, r) = run(
        VersionPolicy::Auto,
        vec![
            Answer::Result(json!({"hello": 1})),
            init_result("2025-11-25"),
        ],
    );
    assert_eq!(sent.len(), 2);
    assert!(matches!(
        r.expect("negotiated").fallback,
        Some(FallbackReason::InvalidDiscoverResult(_))
    ));
}

#[test]
fn a_closed_session_during_the_probe_is_the_result() {
    let (sent, _, r) = run(VersionPolicy::Auto, vec![Answer::Closed]);
    assert_eq!(sent.len(), 1);
    assert_eq!(
        r.unwrap_err(),
        InitializeError::Request(RequestError::Failed(RequestFailure::SessionClosed))
    );
}

#[test]
fn initialize_refused_with_a_modern_version_reprobes_once() {
    // The probe timed out here but reached a slow server, which settled modern.
    let (sent, notified, r) = run(
        VersionPolicy::Auto,
        vec![
            Answer::TimedOut,
            unsupported(&[MODERN]),
            discover_result(&[MODERN]),
        ],
    );
    assert_eq!(
        sent,
        [
            discover(MODERN, Some(PROBE)),
            initialize(LATEST_HANDSHAKE_VERSION),
            discover(MODERN, Some(PROBE))
        ]
    );
    assert!(!notified);
    assert_eq!(r.expect("negotiated").via, NegotiatedVia::Discover);
    // No second re-probe: a retry was used already.
    let (sent, _, r) = run(
        VersionPolicy::Auto,
        vec![
            unsupported(&[MODERN, "2025-11-25"]),
            unsupported(&[MODERN, "2025-11-25"]),
            unsupported(&[MODERN]),
        ],
    );
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert!(matches!(r, Err(InitializeError::Request(_))), "{r:?}");
}

#[test]
fn a_modern_version_answered_to_initialize_is_refused() {
    let (_, notified, r) = run(
        VersionPolicy::Auto,
        vec![Answer::Error(METHOD_NOT_FOUND, None), init_result(MODERN)],
    );
    assert!(!notified);
    assert_eq!(
        r.unwrap_err(),
        InitializeError::Handshake(HandshakeError::UnsupportedVersion(MODERN.to_owned()))
    );
}

#[test]
fn modern_pin_sends_discover_alone_and_never_falls_back() {
    let pin = || VersionPolicy::Pin(MODERN.to_owned());
    let (sent, _, r) = run(pin(), vec![discover_result(&[MODERN])]);
    // No probe bound: the session's default timeout.
    assert_eq!(sent, [discover(MODERN, None)]);
    assert_eq!(r.expect("negotiated").protocol_version, MODERN);

    let (sent, _, r) = run(pin(), vec![Answer::Error(METHOD_NOT_FOUND, None)]);
    assert_eq!(sent.len(), 1);
    assert!(
        matches!(&r, Err(InitializeError::Request(e)) if e.server_error().is_some_and(|e| e.code == METHOD_NOT_FOUND)),
        "{r:?}"
    );
    let (sent, _, r) = run(pin(), vec![Answer::TimedOut]);
    assert_eq!(sent.len(), 1);
    assert!(matches!(&r, Err(InitializeError::Request(e)) if e.is_timeout()));
    let (sent, _, r) = run(pin(), vec![unsupported(&["2025-11-25"])]);
    assert_eq!(sent.len(), 1);
    assert!(matches!(r, Err(InitializeError::NoMutualVersion { .. })));
    let (_, _, r) = run(pin(), vec![discover_result(&["2025-11-25"])]);
    assert!(matches!(r, Err(InitializeError::NoMutualVersion { .. })));
    let (_, _, r) = run(pin(), vec![Answer::Result(json!([]))]);
    assert!(matches!(
        r,
        Err(InitializeError::Handshake(
            HandshakeError::InvalidDiscoverResult(_)
        ))
    ));
}

#[test]
fn handshake_pin_sends_initialize_alone_and_requires_its_version() {
    let pin = || VersionPolicy::Pin("2025-06-18".to_owned());
    let (sent, notified, r) = run(pin(), vec![init_result("2025-06-18")]);
    assert_eq!(sent, [initialize("2025-06-18")]);
    assert!(notified);
    let n = r.expect("negotiated");
    assert_eq!((n.via, n.fallback), (NegotiatedVia::Initialize, None));

    let (_, notified, r) = run(pin(), vec![init_result("2025-11-25")]);
    assert!(!notified);
    assert_eq!(
        r.unwrap_err(),
        InitializeError::NoMutualVersion {
            offered: vec!["2025-11-25".to_owned()]
        }
    );
    // Refused -32022 even with a modern version offered: a pin never re-probes.
    let (sent, _, r) = run(pin(), vec![unsupported(&[MODERN])]);
    assert_eq!(sent.len(), 1);
    assert!(matches!(r, Err(InitializeError::Request(_))));
}

#[test]
fn a_pin_this_crate_does_not_speak_fails_before_sending() {
    let (sent, _, r) = run(VersionPolicy::Pin("1999-01-01".to_owned()), vec![]);
    assert!(sent.is_empty());
    assert_eq!(
        r.unwrap_err(),
        InitializeError::Handshake(HandshakeError::UnsupportedVersion("1999-01-01".to_owned()))
    );
}

#[test]
fn offered_versions_are_kept_up_to_the_limit() {
    let many: Vec<String> = (0..100).map(|i| format!("2020-01-{i:02}")).collect();
    let mut with_ours = many.clone();
    with_ours.push(MODERN.to_owned());
    let refs: Vec<&str> = with_ours.iter().map(String::as_str).collect();
    let (_, _, r) = run(
        VersionPolicy::Auto,
        vec![discover_result(&refs), init_result("2025-11-25")],
    );
    // Ours was past the limit: not seen, so the handshake; the list is cut.
    let n = r.expect("negotiated");
    assert_eq!(
        n.supported_versions.map(|v| v.len()),
        Some(MAX_OFFERED_VERSIONS)
    );
}

#[test]
fn stamp_merges_with_the_callers_meta_and_refuses_non_objects() {
    let stamp = RequestStamp::new(
        MODERN,
        &Implementation::new("t", "1"),
        Some(&raw(&json!({"roots": {}}))),
    );
    let p = stamp
        .apply(Some(r#"{"name":"echo","_meta":{"progressToken":7}}"#))
        .expect("an object");
    let v: Value = serde_json::from_str(p.get()).expect("JSON");
    assert_eq!(v["name"], "echo");
    assert_eq!(v["_meta"]["progressToken"], 7);
    assert_eq!(v["_meta"][META_PROTOCOL_VERSION], MODERN);
    assert_eq!(v["_meta"][META_CLIENT_CAPABILITIES], json!({"roots": {}}));
    assert_eq!(v["_meta"][META_CLIENT_INFO]["version"], "1");
    assert!(stamp.apply(Some("[1,2]")).is_none());
    assert!(stamp.apply(None).is_some());
}

// ---- the session's side: stamping, refusing, never cancelling discover ----

fn session() -> (ClientSession, Instant) {
    (
        ClientSession::new(ClientConfig::default(), FramerConfig::default()),
        Instant::now(),
    )
}

fn sent_lines(s: &mut ClientSession) -> Vec<Value> {
    std::iter::from_fn(|| s.poll_transmit())
        .map(|b| serde_json::from_slice(&b).expect("JSON line"))
        .collect()
}

fn modern_stamp() -> RequestStamp {
    RequestStamp::new(MODERN, &Implementation::new("t", "1"), None)
}

#[test]
fn modern_session_stamps_every_request_and_keeps_the_callers_meta() {
    let (mut s, t0) = session();
    s.request(t0, "tools/list", None, None).expect("sent");
    assert!(
        sent_lines(&mut s)[0].get("params").is_none(),
        "unstamped before negotiation"
    );
    s.stamp_requests(Some(modern_stamp()));
    assert!(s.is_stamped());
    let params =
        raw(&json!({"name": "echo", "arguments": {"text": "x"}, "_meta": {"progressToken": "p1"}}));
    s.request(t0, "tools/call", Some(&params), None)
        .expect("sent");
    s.request(t0, "tools/list", None, None).expect("sent");
    let lines = sent_lines(&mut s);
    assert_eq!(lines[0]["params"]["_meta"]["progressToken"], "p1");
    assert_eq!(lines[0]["params"]["arguments"]["text"], "x");
    for l in &lines {
        assert_eq!(l["params"]["_meta"][META_PROTOCOL_VERSION], MODERN, "{l}");
        assert!(
            l["params"]["_meta"][META_CLIENT_CAPABILITIES].is_object(),
            "{l}"
        );
        assert_eq!(l["params"]["_meta"][META_CLIENT_INFO]["name"], "t", "{l}");
    }
    // Notifications are not requests: not stamped.
    s.notify("notifications/roots/list_changed", None)
        .expect("sent");
    assert!(sent_lines(&mut s)[0].get("params").is_none());
    // Params that cannot carry `_meta`: refused, typed.
    assert_eq!(
        s.request(t0, "x", Some(&raw(&json!([1]))), None),
        Err(SendError::ParamsNotAnObject)
    );
}

#[test]
fn modern_session_refuses_server_requests_and_counts_them() {
    let (mut s, t0) = session();
    s.stamp_requests(Some(modern_stamp()));
    s.handle_stdout(t0, b"{\"jsonrpc\":\"2.0\",\"id\":\"srv-1\",\"method\":\"sampling/createMessage\",\"params\":{}}\n");
    s.handle_stdout(
        t0,
        b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n",
    );
    let lines = sent_lines(&mut s);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["id"], "srv-1");
    assert_eq!(lines[0]["error"]["code"], METHOD_NOT_FOUND);
    let m = s.metrics();
    assert_eq!((m.server_requests, m.server_requests_refused), (1, 1));
    // The notification is delivered; the request never is.
    assert!(matches!(
        s.poll_incoming(t0),
        Some(crate::Incoming::Notification(_))
    ));
    assert!(s.poll_incoming(t0).is_none());

    // A handshake-era session delivers it, as before.
    let (mut s, t0) = session();
    s.handle_stdout(t0, b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n");
    assert!(sent_lines(&mut s).is_empty());
    assert!(matches!(
        s.poll_incoming(t0),
        Some(crate::Incoming::Request(_))
    ));
    assert_eq!(s.metrics().server_requests_refused, 0);
}

/// G6: `server/discover` is never cancelled, on timeout or by the
/// application; a late answer to it is counted as late.
#[test]
fn g6_discover_is_never_cancelled_and_its_late_answer_is_recognised() {
    let (mut s, t0) = session();
    let params = discover_params(MODERN, &Implementation::default(), None);
    let timed = s
        .request(
            t0,
            DISCOVER,
            Some(&params),
            Some(Duration::from_millis(100)),
        )
        .expect("sent");
    let dropped = s.request(t0, DISCOVER, Some(&params), None).expect("sent");
    let _ = sent_lines(&mut s);
    s.cancel(&dropped, Some("gone")).expect("pending");
    s.handle_timeout(t0 + Duration::from_millis(100));
    assert!(
        sent_lines(&mut s).is_empty(),
        "a cancel of server/discover was sent"
    );
    let mut outcomes = Vec::new();
    while let Some(ev) = s.poll_event() {
        if let ClientEvent::Completed { id, outcome } = ev {
            outcomes.push((id, outcome));
        }
    }
    assert!(outcomes.iter().any(|(id, o)| *id == timed
        && matches!(
            o,
            Err(RequestFailure::TimedOut {
                cancel_sent: false,
                ..
            })
        )));
    assert!(outcomes.iter().any(|(id, o)| *id == dropped
        && matches!(o, Err(RequestFailure::Cancelled { cancel_sent: false }))));
    let late = format!("{{\"jsonrpc\":\"2.0\",\"id\":{timed},\"result\":{{}}}}\n");
    s.handle_stdout(t0, late.as_bytes());
    let m = s.metrics();
    assert_eq!(
        (m.late_responses, m.unknown_id_responses, m.cancels_sent),
        (1, 0, 0)
    );
}

/// A deadline is a hard maximum: progress notifications for the request do
/// not move it.
#[test]
fn progress_notifications_do_not_extend_a_deadline() {
    let (mut s, t0) = session();
    s.stamp_requests(Some(modern_stamp()));
    let params = raw(&json!({"name": "slow", "_meta": {"progressToken": "tok"}}));
    let id = s
        .request(
            t0,
            "tools/call",
            Some(&params),
            Some(Duration::from_secs(1)),
        )
        .expect("sent");
    let deadline = t0 + Duration::from_secs(1);
    for ms in (100..1000).step_by(100) {
        let now = t0 + Duration::from_millis(ms);
        let n = format!("{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{{\"progressToken\":\"tok\",\"progress\":{ms}}}}}\n");
        s.handle_stdout(now, n.as_bytes());
        s.handle_timeout(now);
        assert_eq!(s.poll_timeout(), Some(deadline));
    }
    s.handle_timeout(deadline);
    let ended = std::iter::from_fn(|| s.poll_event()).any(|ev| {
        matches!(ev, ClientEvent::Completed { id: got, outcome: Err(RequestFailure::TimedOut { .. }) } if got == id)
    });
    assert!(ended, "the request outlived its deadline");
}
