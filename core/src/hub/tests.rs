//! The hub's machine (F2: sessions never see each other), input by input.
//! With real processes and real clients: the hub's own tests in `cli/`.

use serde_json::{json, Value};

use super::*;

fn line(v: &Value) -> String {
    v.to_string()
}

fn to_server(h: &mut Hub) -> Vec<Value> {
    std::iter::from_fn(|| h.poll_to_server())
        .map(|b| serde_json::from_slice(&b).expect("JSON to the server"))
        .collect()
}

fn to_session(h: &mut Hub, s: SessionId) -> Vec<Value> {
    std::iter::from_fn(|| h.poll_to_session(s))
        .map(|b| serde_json::from_slice(&b).expect("JSON to a session"))
        .collect()
}

fn events(h: &mut Hub) -> Vec<HubEvent> {
    std::iter::from_fn(|| h.poll_event()).collect()
}

fn initialize(id: i64, capabilities: Value) -> String {
    line(
        &json!({"jsonrpc":"2.0","id":id,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":capabilities,
        "clientInfo":{"name":"host","version":"1"}}}),
    )
}

const RESULT: &str = r#"{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true},"resources":{"subscribe":true},"logging":{}},"serverInfo":{"name":"srv","version":"1"}}"#;

/// Two sessions handshaken: `s1` first (its initialize at the server),
/// `s2` answered by the hub.
fn two() -> (Hub, SessionId, SessionId) {
    two_with(|_| {})
}

/// [`two`], the hub set up by `setup` before the sessions attach.
fn two_with(setup: impl FnOnce(&mut Hub)) -> (Hub, SessionId, SessionId) {
    let mut h = Hub::new(1 << 20);
    setup(&mut h);
    let s1 = h.open_session().expect("s1");
    let s2 = h.open_session().expect("s2");
    h.handle_session_line(s1, &initialize(0, json!({"sampling":{}})));
    let init = to_server(&mut h);
    assert_eq!(init.len(), 1);
    assert_eq!(init[0]["method"], "initialize");
    let hub_id = init[0]["id"].clone();
    assert!(hub_id
        .as_str()
        .is_some_and(|i| i.starts_with(HUB_ID_PREFIX)));
    // The second asks while the first waits: it waits too.
    h.handle_session_line(s2, &initialize(0, json!({"sampling":{},"roots":{}})));
    assert!(
        to_server(&mut h).is_empty(),
        "one initialize reaches the server"
    );
    h.handle_server_line(&format!(
        r#"{{"jsonrpc":"2.0","id":{hub_id},"result":{RESULT}}}"#
    ));
    for s in [s1, s2] {
        let got = to_session(&mut h, s);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0]["id"], 0);
        assert_eq!(got[0]["result"]["serverInfo"]["name"], "srv");
    }
    let initialized = line(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    h.handle_session_line(s1, &initialized);
    h.handle_session_line(s2, &initialized);
    let sent = to_server(&mut h);
    assert_eq!(sent.len(), 1, "initialized once: {sent:?}");
    assert_eq!(h.metrics().handshakes_shared, 1);
    (h, s1, s2)
}

fn call(id: i64, tool: &str) -> String {
    line(&json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool}}))
}

#[test]
fn f2_colliding_ids_go_to_the_server_as_the_hubs_and_come_back_as_each_sessions() {
    let (mut h, s1, s2) = two();
    h.handle_session_line(s1, &call(1, "a"));
    h.handle_session_line(s2, &call(1, "b"));
    let sent = to_server(&mut h);
    assert_eq!(sent.len(), 2);
    assert_ne!(sent[0]["id"], sent[1]["id"], "hub-unique ids");
    // Answered in the other order.
    for m in sent.iter().rev() {
        let tool = m["params"]["name"].as_str().unwrap();
        h.handle_server_line(&line(
            &json!({"jsonrpc":"2.0","id":m["id"],"result":{"content":[{"type":"text","text":tool}]}}),
        ));
    }
    let a = to_session(&mut h, s1);
    let b = to_session(&mut h, s2);
    assert_eq!(
        a,
        [json!({"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"a"}]}})]
    );
    assert_eq!(
        b,
        [json!({"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"b"}]}})]
    );
    assert_eq!(h.in_flight(), 0);
}

#[test]
fn f2_a_session_that_cannot_be_served_as_the_first_gets_a_private_server() {
    let (mut h, _, _) = two();
    let s3 = h.open_session().expect("s3");
    let without_sampling = initialize(7, json!({"roots":{}}));
    h.handle_session_line(s3, &without_sampling);
    match events(&mut h).as_slice() {
        [HubEvent::Note(_), HubEvent::PrivateServer {
            session,
            initialize,
            reason,
        }] => {
            assert_eq!(*session, s3);
            assert_eq!(*initialize, without_sampling);
            assert!(reason.contains("sampling"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(to_server(&mut h).is_empty());
    assert_eq!(h.sessions(), 2, "gone from the hub");
    let s4 = h.open_session().expect("s4");
    h.handle_session_line(
        s4,
        &line(
            &json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
            "protocolVersion":"2025-06-18","capabilities":{"sampling":{}}}}),
        ),
    );
    assert!(matches!(
        events(&mut h).as_slice(),
        [HubEvent::Note(_), HubEvent::PrivateServer { reason, .. }] if reason.contains("2025-06-18")
    ));
    assert_eq!(h.metrics().private_servers, 2);
}

#[test]
fn g6_a_cancel_reaches_only_its_sessions_request_and_its_late_answer_is_dropped() {
    let (mut h, s1, s2) = two();
    h.handle_session_line(s1, &call(1, "slow"));
    h.handle_session_line(s2, &call(1, "slow"));
    let sent = to_server(&mut h);
    h.handle_session_line(
        s1,
        &line(&json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"user"}})),
    );
    let cancel = to_server(&mut h);
    assert_eq!(cancel.len(), 1);
    assert_eq!(
        cancel[0]["params"]["requestId"], sent[0]["id"],
        "s1's request only"
    );
    assert_eq!(cancel[0]["params"]["reason"], "user");
    // Both answer late; only s2 gets its answer.
    for m in &sent {
        h.handle_server_line(&line(&json!({"jsonrpc":"2.0","id":m["id"],"result":{}})));
    }
    assert!(to_session(&mut h, s1).is_empty(), "after a cancel, nothing");
    assert_eq!(to_session(&mut h, s2).len(), 1);
    assert_eq!(h.metrics().dropped_answers, 1);
    assert_eq!(h.metrics().cancels, 1);
}

#[test]
fn f2_progress_goes_to_the_session_whose_token_it_is_under_its_own_token() {
    let (mut h, s1, s2) = two();
    for s in [s1, s2] {
        h.handle_session_line(
            s,
            &line(&json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"p","_meta":{"progressToken":5}}})),
        );
    }
    let sent = to_server(&mut h);
    let t1 = sent[0]["params"]["_meta"]["progressToken"].clone();
    let t2 = sent[1]["params"]["_meta"]["progressToken"].clone();
    assert_ne!(t1, t2);
    assert_eq!(sent[0]["params"]["name"], "p", "the rest kept");
    h.handle_server_line(&line(
        &json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":t2,"progress":1}}),
    ));
    assert!(to_session(&mut h, s1).is_empty());
    let got = to_session(&mut h, s2);
    assert_eq!(got[0]["params"], json!({"progressToken":5,"progress":1}));
}

#[test]
fn f2_the_server_sees_a_subscription_once_and_updates_reach_its_holders() {
    let (mut h, s1, s2) = two();
    let s3 = h.open_session().expect("s3");
    h.handle_session_line(s3, &initialize(0, json!({"sampling":{}})));
    to_session(&mut h, s3);
    let sub = |id: i64, m: &str| {
        line(&json!({"jsonrpc":"2.0","id":id,"method":m,"params":{"uri":"file:///a"}}))
    };
    h.handle_session_line(s1, &sub(1, "resources/subscribe"));
    let sent = to_server(&mut h);
    assert_eq!(sent.len(), 1);
    h.handle_server_line(&line(
        &json!({"jsonrpc":"2.0","id":sent[0]["id"],"result":{}}),
    ));
    h.handle_session_line(s2, &sub(1, "resources/subscribe"));
    assert!(to_server(&mut h).is_empty(), "held already");
    assert_eq!(to_session(&mut h, s1).len(), 1);
    assert_eq!(to_session(&mut h, s2)[0]["result"], json!({}));
    h.handle_server_line(&line(
        &json!({"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///a"}}),
    ));
    assert_eq!(to_session(&mut h, s1).len(), 1);
    assert_eq!(to_session(&mut h, s2).len(), 1);
    assert!(to_session(&mut h, s3).is_empty(), "not subscribed");
    h.handle_session_line(s1, &sub(2, "resources/unsubscribe"));
    assert!(to_server(&mut h).is_empty(), "s2 still holds it");
    assert_eq!(to_session(&mut h, s1)[0]["result"], json!({}));
    h.handle_session_line(s2, &sub(2, "resources/unsubscribe"));
    let sent = to_server(&mut h);
    assert_eq!(
        sent[0]["method"], "resources/unsubscribe",
        "the last one goes"
    );
    assert_eq!(h.subscriptions(), 0);
}

#[test]
fn f2_each_session_gets_log_messages_at_its_own_level_and_the_server_the_most_verbose() {
    let (mut h, s1, s2) = two();
    let level = |id: i64, l: &str| {
        line(&json!({"jsonrpc":"2.0","id":id,"method":"logging/setLevel","params":{"level":l}}))
    };
    h.handle_session_line(s1, &level(4, "error"));
    h.handle_session_line(s2, &level(4, "debug"));
    let sent = to_server(&mut h);
    assert_eq!(sent[0]["params"]["level"], "error");
    assert_eq!(
        sent[1]["params"]["level"], "debug",
        "the most verbose asked"
    );
    for m in &sent {
        h.handle_server_line(&line(&json!({"jsonrpc":"2.0","id":m["id"],"result":{}})));
    }
    to_session(&mut h, s1);
    to_session(&mut h, s2);
    let message = |l: &str| {
        line(
            &json!({"jsonrpc":"2.0","method":"notifications/message","params":{"level":l,"data":"x"}}),
        )
    };
    h.handle_server_line(&message("info"));
    assert!(to_session(&mut h, s1).is_empty(), "below s1's level");
    assert_eq!(to_session(&mut h, s2).len(), 1);
    h.handle_server_line(&message("error"));
    assert_eq!(to_session(&mut h, s1).len(), 1);
    assert_eq!(to_session(&mut h, s2).len(), 1);
}

#[test]
fn f2_a_server_request_goes_to_the_one_busy_session_else_the_server_hears_why() {
    let (mut h, s1, s2) = two();
    h.handle_session_line(s1, &call(1, "asks"));
    let sent = to_server(&mut h);
    let sampling =
        line(&json!({"jsonrpc":"2.0","id":"srv-1","method":"sampling/createMessage","params":{}}));
    h.handle_server_line(&sampling);
    let asked = to_session(&mut h, s1);
    assert_eq!(asked[0]["method"], "sampling/createMessage");
    assert!(to_session(&mut h, s2).is_empty());
    h.handle_session_line(
        s1,
        &line(&json!({"jsonrpc":"2.0","id":"srv-1","result":{"role":"assistant"}})),
    );
    let back = to_server(&mut h);
    assert_eq!(back[0]["id"], "srv-1");
    assert_eq!(back[0]["result"]["role"], "assistant");
    // A ping is the hub's to answer.
    h.handle_server_line(&line(
        &json!({"jsonrpc":"2.0","id":"srv-2","method":"ping"}),
    ));
    assert_eq!(to_server(&mut h)[0]["result"], json!({}));
    // Two busy sessions: nobody to ask.
    h.handle_session_line(s2, &call(2, "asks"));
    to_server(&mut h);
    h.handle_server_line(&line(
        &json!({"jsonrpc":"2.0","id":"srv-3","method":"roots/list"}),
    ));
    let refused = to_server(&mut h);
    assert_eq!(refused[0]["id"], "srv-3");
    assert!(refused[0]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("2 host sessions"));
    assert_eq!(h.metrics().server_requests_refused, 1);
    let _ = sent;
}

#[test]
fn f2_a_session_that_leaves_ends_only_itself() {
    let (mut h, s1, s2) = two();
    h.handle_session_line(s1, &call(1, "slow"));
    h.handle_session_line(s2, &call(1, "slow"));
    h.handle_session_line(
        s1,
        &line(&json!({"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"u"}})),
    );
    let sent = to_server(&mut h);
    h.handle_server_line(&line(
        &json!({"jsonrpc":"2.0","id":sent[2]["id"],"result":{}}),
    ));
    h.close_session(s1);
    let after = to_server(&mut h);
    assert_eq!(after[0]["method"], "notifications/cancelled");
    assert_eq!(after[0]["params"]["requestId"], sent[0]["id"]);
    assert_eq!(after[1]["method"], "resources/unsubscribe");
    // The unsubscribe's answer is the hub's; s2's call goes on.
    h.handle_server_line(&line(
        &json!({"jsonrpc":"2.0","id":after[1]["id"],"result":{}}),
    ));
    h.handle_server_line(&line(
        &json!({"jsonrpc":"2.0","id":sent[0]["id"],"result":{}}),
    ));
    h.handle_server_line(&line(
        &json!({"jsonrpc":"2.0","id":sent[1]["id"],"result":{}}),
    ));
    assert_eq!(to_session(&mut h, s2).len(), 1);
    assert_eq!(h.sessions(), 1);
    assert_eq!(h.in_flight(), 0);
}

#[test]
fn g1_a_session_whose_host_stopped_reading_is_closed_and_the_others_go_on() {
    let (mut h, s1, s2) = two();
    let big = "x".repeat(1 << 19);
    for _ in 0..(MAX_SESSION_QUEUE / (1 << 19) + 2) {
        h.handle_server_line(&line(
            &json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"pad":big}}),
        ));
        // s2 reads; s1 does not.
        to_session(&mut h, s2);
    }
    assert!(events(&mut h)
        .iter()
        .any(|e| matches!(e, HubEvent::Close { session, .. } if *session == s1)));
    assert_eq!(h.sessions(), 1);
    assert!(h.session_backlog(s1) == 0);
    h.handle_session_line(s2, &call(9, "t"));
    assert_eq!(to_server(&mut h).len(), 1, "s2 goes on");
}

#[test]
fn f2_the_server_gone_fails_every_waiting_request_and_closes_every_session() {
    let (mut h, s1, s2) = two();
    h.handle_session_line(s1, &call(1, "slow"));
    to_server(&mut h);
    h.handle_server_gone(&ErrorObject::new(-32001, "the MCP server crashed"));
    let got = to_session(&mut h, s1);
    assert_eq!(got[0]["error"]["code"], -32001);
    let closes = events(&mut h)
        .into_iter()
        .filter(|e| matches!(e, HubEvent::Close { .. }))
        .count();
    assert_eq!(closes, 2);
    assert!(to_session(&mut h, s2).is_empty());
    assert_eq!(h.open_session(), Err(HubRefusal::ServerGone));
}

#[test]
fn f2_list_changed_reaches_every_handshaken_session() {
    let (mut h, s1, s2) = two();
    let s3 = h.open_session().expect("s3");
    h.handle_server_line(&line(
        &json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"}),
    ));
    assert_eq!(to_session(&mut h, s1).len(), 1);
    assert_eq!(to_session(&mut h, s2).len(), 1);
    assert!(to_session(&mut h, s3).is_empty(), "not handshaken yet");
}

/// `--idle-stop` with `--share`: never while a call is in flight; after
/// the set time with nothing open, the server is to be stopped and the
/// sessions stay; the next call asks for a new server and reaches it after
/// the first session's handshake (and the log level), whose answers are the
/// hub's own; the call's answer reaches its session.
#[test]
fn f2_idle_stop_sleeps_only_when_nothing_is_open_and_the_next_call_replays_the_handshake() {
    let (mut h, s1, s2) = two();
    let after = std::time::Duration::from_secs(5);
    h.idle_stop(Some(after));
    let t0 = Instant::now();
    h.busy(Stamp::new(t0, 0));
    h.handle_session_line(
        s2,
        &line(
            &json!({"jsonrpc":"2.0","id":3,"method":"logging/setLevel","params":{"level":"info"}}),
        ),
    );
    let sent = to_server(&mut h);
    h.handle_server_line(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#,
        sent[0]["id"]
    ));
    assert_eq!(to_session(&mut h, s2)[0]["id"], 3);
    // A call in flight: no sleep, however long it takes.
    h.handle_session_line(s1, &call(7, "slow"));
    let slow = to_server(&mut h);
    assert_eq!(h.idle_deadline(), None);
    h.handle_time(t0 + after * 10);
    assert!(events(&mut h).is_empty());
    let t1 = t0 + after * 10;
    h.busy(Stamp::new(t1, 0));
    h.handle_server_line(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#,
        slow[0]["id"]
    ));
    assert_eq!(to_session(&mut h, s1)[0]["id"], 7);
    assert_eq!(h.idle_deadline(), Some(t1 + after));
    h.handle_time(t1 + after / 2);
    assert!(events(&mut h).is_empty(), "not yet");
    h.handle_time(t1 + after);
    let ev = events(&mut h);
    assert!(ev.contains(&HubEvent::StopServer), "{ev:?}");
    assert!(h.is_stopping());
    h.handle_server_slept();
    assert!(h.is_asleep());
    assert_eq!(h.sessions(), 2, "the sessions stay");
    assert_eq!(h.metrics().idle_stops, 1);
    // The next call wakes it: the handshake first, then the call.
    h.handle_session_line(s2, &call(8, "echo"));
    let ev = events(&mut h);
    assert!(ev.contains(&HubEvent::StartServer), "{ev:?}");
    let sent = to_server(&mut h);
    let methods: Vec<&str> = sent.iter().filter_map(|m| m["method"].as_str()).collect();
    assert_eq!(
        methods,
        [
            "initialize",
            "notifications/initialized",
            "logging/setLevel",
            "tools/call"
        ],
        "{sent:?}"
    );
    assert_eq!(
        sent[0]["params"]["capabilities"],
        json!({"sampling":{}}),
        "the first session's"
    );
    assert_eq!(sent[2]["params"]["level"], "info");
    for m in &sent[..3] {
        if m.get("id").is_some() {
            h.handle_server_line(&format!(
                r#"{{"jsonrpc":"2.0","id":{},"result":{RESULT}}}"#,
                m["id"]
            ));
        }
    }
    assert!(
        to_session(&mut h, s1).is_empty(),
        "the replay's answers are the hub's"
    );
    assert!(
        to_session(&mut h, s2).is_empty(),
        "the replay's answers are the hub's"
    );
    h.handle_server_line(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"ok":1}}}}"#,
        sent[3]["id"]
    ));
    let got = to_session(&mut h, s2);
    assert_eq!(got[0]["id"], 8);
    assert_eq!(got[0]["result"]["ok"], 1);
    assert_eq!(h.metrics().resumes, 1);
}

/// A call that comes while the server is being stopped waits and wakes
/// it as soon as it has ended; a subscription keeps it awake.
#[test]
fn f2_a_call_during_the_stop_wakes_the_server_once_it_has_ended() {
    let (mut h, s1, _s2) = two();
    let after = std::time::Duration::from_secs(1);
    h.idle_stop(Some(after));
    let t0 = Instant::now();
    h.busy(Stamp::new(t0, 0));
    h.handle_time(t0 + after);
    assert!(events(&mut h).contains(&HubEvent::StopServer));
    h.handle_session_line(s1, &call(9, "echo"));
    assert!(
        !events(&mut h).contains(&HubEvent::StartServer),
        "not while it ends"
    );
    h.handle_server_slept();
    assert!(events(&mut h).contains(&HubEvent::StartServer));
    let sent = to_server(&mut h);
    assert_eq!(sent[0]["method"], "initialize");
    assert_eq!(sent.last().expect("the call")["method"], "tools/call");
    // A subscription: no sleep.
    let mut h = two().0;
    h.idle_stop(Some(after));
    let s = SessionId(1);
    h.handle_session_line(
        s,
        &line(&json!({"jsonrpc":"2.0","id":4,"method":"resources/subscribe","params":{"uri":"file:///a"}})),
    );
    let sent = to_server(&mut h);
    h.handle_server_line(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#,
        sent[0]["id"]
    ));
    h.busy(Stamp::new(t0, 0));
    h.handle_time(t0 + after * 100);
    assert!(!events(&mut h).contains(&HubEvent::StopServer));
}

/// `--audit` with `--share`: a record for every request the server was
/// given, naming its host session; ended as the call ended (an answer, a
/// cancel, the server gone).
#[test]
fn f2_every_call_at_the_server_gets_a_record_naming_its_host_session() {
    let (mut h, s1, s2) = two();
    h.record_calls("hub-test", "fixture");
    h.busy(Stamp::new(Instant::now(), 1_000));
    h.handle_session_line(s1, &call(5, "echo"));
    h.handle_session_line(s2, &call(5, "slow"));
    h.handle_session_line(
        s2,
        &line(&json!({"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"last"}})),
    );
    let sent = to_server(&mut h);
    assert_eq!(sent.len(), 3);
    h.handle_server_line(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#,
        sent[0]["id"]
    ));
    h.handle_session_line(
        s2,
        &line(
            &json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}),
        ),
    );
    h.handle_server_gone(&ErrorObject::new(-32001, "gone"));
    let records: Vec<CallRecord> = std::iter::from_fn(|| h.poll_record()).collect();
    let seen: Vec<(String, String, String)> = records
        .iter()
        .map(|r| {
            (
                r.session_id().to_owned(),
                r.operation().to_owned(),
                r.state().to_string(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                "hub-test/1".to_owned(),
                "echo".to_owned(),
                "completed".to_owned()
            ),
            (
                "hub-test/2".to_owned(),
                "slow".to_owned(),
                "cancelled_after_dispatch".to_owned()
            ),
            (
                "hub-test/2".to_owned(),
                "last".to_owned(),
                "unknown".to_owned()
            ),
        ],
        "{records:?}"
    );
    assert_eq!(records[0].target(), "fixture");
}

/// The tool policies with `--share`: each session has its own copy. A
/// denied tool is refused to either session without reaching the server,
/// and recorded as denied; the loop brake counts each session's calls
/// alone; a `tools/list` answer loses the hidden tools for the session it
/// goes to; a long tool result is cut for its session; the hub's metrics
/// add the sessions' counts, those of a session gone included.
#[test]
fn f4_each_shared_session_has_its_own_copy_of_the_tool_policies() {
    use crate::guard::policy::{ContentLimit, Keep, RateLimiter, RepeatBrake, ToolFilter};
    let (mut h, s1, s2) = two_with(|h| {
        let policy = crate::guard::policy::ToolPolicy::new(
            ToolFilter::new(None, &["secret*".to_owned()]).expect("filter"),
            RateLimiter::default(),
            RepeatBrake::new(1).ok(),
        )
        .content_limit(ContentLimit::new(100, Keep::Head).ok());
        h.tool_policy(Some(policy))
            .record_calls("hub-test", "fixture")
            .trace_calls(3);
    });
    h.busy(Stamp::new(Instant::now(), 1_000));
    // Denied, to either session; never at the server.
    h.handle_session_line(s1, &call(1, "secret_keys"));
    assert!(to_server(&mut h).is_empty());
    let got = to_session(&mut h, s1);
    assert_eq!(
        got[0]["error"]["code"],
        crate::guard::policy::POLICY_REFUSED
    );
    assert_eq!(got[0]["error"]["data"]["policy"], "tools");
    // The loop brake: s1's second identical call is refused, s2's first is not.
    h.handle_session_line(s1, &call(2, "echo"));
    h.handle_session_line(s1, &call(3, "echo"));
    h.handle_session_line(s2, &call(2, "echo"));
    let sent = to_server(&mut h);
    assert_eq!(sent.len(), 2, "{sent:?}");
    let got = to_session(&mut h, s1);
    assert_eq!(got[0]["id"], 3);
    assert_eq!(got[0]["error"]["data"]["policy"], "repeat-limit");
    // s1's echo answered with a long text: cut for it.
    let long = "z".repeat(5000);
    h.handle_server_line(&line(&json!({"jsonrpc":"2.0","id":sent[0]["id"],
        "result":{"content":[{"type":"text","text":long}]}})));
    let got = to_session(&mut h, s1);
    let text = got[0]["result"]["content"][0]["text"]
        .as_str()
        .expect("text");
    assert!(text.len() <= 100 && text.contains("[mcp-stdio: "), "{text}");
    assert_eq!(
        got[0]["result"]["_meta"][crate::guard::policy::TRUNCATED_META_KEY]["totalBytes"],
        5000
    );
    // s2's list loses the hidden tools.
    h.handle_session_line(
        s2,
        &line(&json!({"jsonrpc":"2.0","id":4,"method":"tools/list"})),
    );
    let list = to_server(&mut h);
    h.handle_server_line(&line(&json!({"jsonrpc":"2.0","id":list[0]["id"],
        "result":{"tools":[{"name":"echo"},{"name":"secret_keys"}]}})));
    let got = to_session(&mut h, s2);
    assert_eq!(got[0]["result"]["tools"], json!([{"name":"echo"}]));
    h.close_session(s1);
    let m = h.metrics().policy.clone().expect("policy metrics");
    assert_eq!(m.refused_by.get("tools"), Some(&1));
    assert_eq!(m.refused_by.get("repeat-limit"), Some(&1));
    assert_eq!((m.results_cut, m.tools_hidden), (1, 1));
    let records: Vec<CallRecord> = std::iter::from_fn(|| h.poll_record()).collect();
    let denied: Vec<&str> = records
        .iter()
        .filter(|r| r.state().to_string() == "denied")
        .map(CallRecord::operation)
        .collect();
    assert_eq!(denied, ["secret_keys", "echo"], "{records:?}");
    let cut = records
        .iter()
        .find(|r| r.state().to_string() == "completed" && r.operation() == "echo")
        .expect("the cut call's record");
    assert!(
        cut.events().any(|e| e
            .detail
            .as_deref()
            .is_some_and(|d| d.contains("1 text block(s) cut"))),
        "{cut:?}"
    );
    // A refused call is a span too, with the policy's code.
    let spans: Vec<_> = std::iter::from_fn(|| h.poll_span()).collect();
    let refused = spans
        .iter()
        .find(|s| s.name == "tools/call secret_keys")
        .unwrap_or_else(|| panic!("{spans:?}"));
    assert_eq!(
        refused.status_code,
        Some(crate::guard::policy::POLICY_REFUSED)
    );
}

/// `--otel` with `--share`: a span per call at the server, a child of its
/// session's `traceparent`; the server gets the span's own `traceparent`
/// (same trace, another span); an error answer gives the span its code.
#[test]
fn f2_every_call_at_the_server_gets_a_span_child_of_its_sessions_trace() {
    let (mut h, s1, s2) = two();
    h.trace_calls(7);
    h.busy(Stamp::new(Instant::now(), 1_000));
    let host = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    h.handle_session_line(
        s1,
        &line(
            &json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{
            "name":"echo","_meta":{"traceparent":host}}}),
        ),
    );
    h.handle_session_line(s2, &call(5, "fails"));
    let sent = to_server(&mut h);
    let theirs = sent[0]["params"]["_meta"]["traceparent"]
        .as_str()
        .expect("a traceparent");
    assert!(
        theirs.starts_with("00-0af7651916cd43dd8448eb211c80319c-"),
        "{theirs}"
    );
    assert_ne!(theirs, host);
    assert!(sent[1]["params"]["_meta"]["traceparent"].is_string());
    h.handle_server_line(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"content":[]}}}}"#,
        sent[0]["id"]
    ));
    h.handle_server_line(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":-32602,"message":"no"}}}}"#,
        sent[1]["id"]
    ));
    let spans: Vec<_> = std::iter::from_fn(|| h.poll_span()).collect();
    assert_eq!(spans.len(), 2, "{spans:?}");
    assert_eq!(spans[0].name, "tools/call echo");
    assert_eq!(
        spans[0].parent.map(|p| p.to_traceparent()).as_deref(),
        Some(host)
    );
    assert_eq!(spans[0].context.to_traceparent(), theirs);
    assert_eq!(spans[0].error_type, None);
    assert_eq!(spans[1].name, "tools/call fails");
    assert_eq!(spans[1].status_code, Some(-32602));
    assert_eq!(spans[1].error_type.as_deref(), Some("-32602"));
    assert!(h.poll_record().is_none(), "records only with record_calls");
}

#[test]
fn bad_input_is_dropped_and_the_hub_goes_on() {
    let (mut h, s1, _) = two();
    h.handle_session_line(s1, "not json");
    h.handle_session_line(s1, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
    h.handle_server_line("{{{");
    h.handle_server_line(r#"{"jsonrpc":"2.0","id":"nobody","result":{}}"#);
    h.handle_server_line(
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"x"}}"#,
    );
    h.handle_session_line(s1, &call(1, "t"));
    assert_eq!(to_server(&mut h).len(), 1);
}

#[test]
fn fuzz_hub_random_inputs() {
    crate::fuzzing::run_random_inputs(0x4855_4253, 1500, 2048, crate::fuzzing::fuzz_hub);
}
