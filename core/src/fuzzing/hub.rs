//! The fuzz harness of the hub (`guard --share`, F2): arbitrary sessions
//! opening, sending requests, cancels, answers and junk, leaving, not
//! reading; a server answering, notifying, asking, writing junk, going
//! away; in any order. Invariants: nothing panics; every table stays
//! within its bound; a session is given an answer only under an id it
//! used for a request (sessions never see each other's), and nothing for
//! a session after it is gone; a session's queue never passes
//! [`MAX_SESSION_QUEUE`]; with an idle stop, a server stopped gets nothing
//! until it is started again, and then the replayed `initialize` first.

use std::collections::{BTreeMap, BTreeSet};

use arbitrary::{Arbitrary, Unstructured};
use serde_json::{json, Value};

use crate::hub::{
    Hub, HubEvent, SessionId, MAX_HUB_IN_FLIGHT, MAX_HUB_SESSIONS, MAX_HUB_SUBSCRIPTIONS,
    MAX_SESSION_QUEUE,
};
use crate::wire::message::ErrorObject;

/// Fuzz entry point; panics on a violated invariant.
pub fn fuzz_hub(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let mut h = Hub::new(1 << 16);
    h.idle_stop(Some(std::time::Duration::from_secs(5)));
    h.record_calls("fuzz", "server");
    h.trace_calls(1);
    // Every session's own copy of the tool policies: a denied tool, the
    // loop brake, a denied resource (u1), a content limit under most answers.
    let policy = crate::guard::policy::ToolPolicy::new(
        crate::guard::policy::ToolFilter::new(None, &["x*".to_owned()]).unwrap_or_default(),
        crate::guard::policy::RateLimiter::default(),
        crate::guard::policy::RepeatBrake::new(2).ok(),
    )
    .listed_filters(
        crate::guard::policy::ToolFilter::default(),
        crate::guard::policy::ToolFilter::new(None, &["u1".to_owned()]).unwrap_or_default(),
    )
    .content_limit(
        crate::guard::policy::ContentLimit::new(64, crate::guard::policy::Keep::HeadAndTail).ok(),
    );
    h.tool_policy(Some(policy));
    let mut model = Model {
        t0: Some(std::time::Instant::now()),
        ..Model::default()
    };
    for _ in 0..256 {
        let Ok(op) = Op::arbitrary(&mut u) else { break };
        step(&mut h, &mut model, op);
        check(&mut h, &mut model);
    }
}

#[derive(Arbitrary, Debug)]
enum Op {
    Open,
    Initialize {
        s: u8,
        sampling: bool,
        old: bool,
    },
    Request {
        s: u8,
        id: u8,
        method: u8,
        token: bool,
        uri: u8,
    },
    Cancel {
        s: u8,
        id: u8,
    },
    Answer {
        s: u8,
        id: u8,
    },
    Junk {
        s: u8,
        bytes: Vec<u8>,
    },
    Leave {
        s: u8,
    },
    Read {
        s: u8,
    },
    ServerAnswer {
        which: u8,
        error: bool,
        pad: u16,
    },
    ServerNotify {
        kind: u8,
        which: u8,
        pad: u16,
    },
    ServerAsk {
        id: u8,
        ping: bool,
    },
    ServerJunk {
        bytes: Vec<u8>,
    },
    ServerGone,
    /// Time passes (seconds since the start), moving bytes or not.
    Time {
        secs: u8,
        busy: bool,
    },
    /// The server stopped for idleness has ended.
    ServerSlept,
}

#[derive(Default)]
struct Model {
    open: Vec<SessionId>,
    gone: BTreeSet<SessionId>,
    /// Ids each session used for requests.
    used: BTreeMap<SessionId, BTreeSet<String>>,
    /// What the server was sent: ids of requests, tokens.
    server_ids: Vec<Value>,
    tokens: Vec<Value>,
    server_asked: Vec<Value>,
    t0: Option<std::time::Instant>,
    /// A new server was asked for: the next bytes for it start with its
    /// replayed `initialize`.
    woke: bool,
}

fn pick(v: &[SessionId], i: u8) -> Option<SessionId> {
    (!v.is_empty()).then(|| v[usize::from(i) % v.len()])
}

const METHODS: [&str; 6] = [
    "tools/call",
    "resources/subscribe",
    "resources/unsubscribe",
    "logging/setLevel",
    "ping",
    "tools/list",
];

fn step(h: &mut Hub, m: &mut Model, op: Op) {
    match op {
        Op::Open => {
            if let Ok(s) = h.open_session() {
                m.open.push(s);
            }
        }
        Op::Initialize { s, sampling, old } => {
            let Some(s) = pick(&m.open, s) else { return };
            let caps = if sampling {
                json!({"sampling":{}})
            } else {
                json!({})
            };
            let v = if old { "2025-06-18" } else { "2025-11-25" };
            m.used.entry(s).or_default().insert("0".into());
            h.handle_session_line(
                s,
                &json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":v,"capabilities":caps}}).to_string(),
            );
        }
        Op::Request {
            s,
            id,
            method,
            token,
            uri,
        } => {
            let Some(s) = pick(&m.open, s) else { return };
            let method = METHODS[usize::from(method) % METHODS.len()];
            let level = ["debug", "error", "info"][usize::from(uri % 3)];
            let name = if uri % 5 == 4 { "x1" } else { "t" };
            let mut params = json!({"name":name,"uri":format!("u{}", uri % 4),"level":level});
            if token {
                params["_meta"] = json!({"progressToken": id});
            }
            m.used.entry(s).or_default().insert(id.to_string());
            h.handle_session_line(
                s,
                &json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string(),
            );
        }
        Op::Cancel { s, id } => {
            let Some(s) = pick(&m.open, s) else { return };
            h.handle_session_line(
                s,
                &json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":id}}).to_string(),
            );
        }
        Op::Answer { s, id } => {
            let Some(s) = pick(&m.open, s) else { return };
            let id = m
                .server_asked
                .get(usize::from(id))
                .cloned()
                .unwrap_or(json!(id));
            h.handle_session_line(s, &json!({"jsonrpc":"2.0","id":id,"result":{}}).to_string());
        }
        Op::Junk { s, bytes } => {
            let Some(s) = pick(&m.open, s) else { return };
            h.handle_session_line(s, &String::from_utf8_lossy(&bytes));
        }
        Op::Leave { s } => {
            let Some(s) = pick(&m.open, s) else { return };
            h.close_session(s);
            m.open.retain(|x| *x != s);
            m.gone.insert(s);
        }
        Op::Read { s } => {
            let Some(s) = pick(&m.open, s) else { return };
            while let Some(b) = h.poll_to_session(s) {
                let v: Value = serde_json::from_slice(&b).expect("a session gets JSON");
                if v.get("method").is_none() {
                    // An answer: only under an id this session used.
                    let id = v["id"].to_string();
                    assert!(
                        m.used.get(&s).is_some_and(|u| u.contains(&id)),
                        "session {s:?} got an answer under an id it never used: {v}"
                    );
                }
            }
        }
        Op::ServerAnswer { which, error, pad } => {
            let Some(id) = m
                .server_ids
                .get(usize::from(which) % m.server_ids.len().max(1))
                .cloned()
            else {
                return;
            };
            let msg = if error {
                json!({"jsonrpc":"2.0","id":id,"error":{"code":-1,"message":"x"}})
            } else {
                let p = "p".repeat(usize::from(pad % 2048));
                json!({"jsonrpc":"2.0","id":id,"result":{"protocolVersion":"2025-11-25","capabilities":{},
                    "tools":[{"name":"t"},{"name":"x1"}],"content":[{"type":"text","text":p}]}})
            };
            h.handle_server_line(&msg.to_string());
        }
        Op::ServerNotify { kind, which, pad } => {
            let token = m
                .tokens
                .get(usize::from(which) % m.tokens.len().max(1))
                .cloned()
                .unwrap_or(json!(1));
            let p = "p".repeat(usize::from(pad));
            let msg = match kind % 5 {
                0 => {
                    json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":token,"progress":1}})
                }
                1 => {
                    json!({"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":format!("u{}", which % 4)}})
                }
                2 => {
                    json!({"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":p}})
                }
                3 => {
                    json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"pad":p}})
                }
                _ => {
                    json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":format!("a{which}")}})
                }
            };
            h.handle_server_line(&msg.to_string());
        }
        Op::ServerAsk { id, ping } => {
            let method = if ping {
                "ping"
            } else {
                "sampling/createMessage"
            };
            let id = json!(format!("a{id}"));
            m.server_asked.push(id.clone());
            h.handle_server_line(&json!({"jsonrpc":"2.0","id":id,"method":method}).to_string());
        }
        Op::ServerJunk { bytes } => h.handle_server_line(&String::from_utf8_lossy(&bytes)),
        Op::ServerGone => h.handle_server_gone(&ErrorObject::new(-32001, "gone")),
        Op::Time { secs, busy } => {
            let now = m.t0.unwrap_or_else(std::time::Instant::now)
                + std::time::Duration::from_secs(u64::from(secs));
            if busy {
                h.busy(crate::time::Stamp::new(now, u64::from(secs) * 1000));
            }
            h.handle_time(now);
        }
        Op::ServerSlept => {
            if h.is_stopping() {
                h.handle_server_slept();
            }
        }
    }
}

fn check(h: &mut Hub, m: &mut Model) {
    assert!(h.sessions() <= MAX_HUB_SESSIONS);
    assert!(h.in_flight() <= MAX_HUB_IN_FLIGHT);
    assert!(h.subscriptions() <= MAX_HUB_SUBSCRIPTIONS);
    while let Some(e) = h.poll_event() {
        match e {
            HubEvent::Close { session, .. } => {
                // Its last bytes may be read, then it is gone.
                while h.poll_to_session(session).is_some() {}
                h.close_session(session);
                m.open.retain(|x| *x != session);
                m.gone.insert(session);
            }
            HubEvent::PrivateServer { session, .. } => {
                assert_eq!(h.session_backlog(session), 0);
                m.open.retain(|x| *x != session);
                m.gone.insert(session);
            }
            HubEvent::StopServer => assert!(h.is_stopping()),
            HubEvent::StartServer => m.woke = true,
            HubEvent::Note(_) => {}
        }
    }
    // A server stopped or asleep is given nothing (its writer is gone).
    while !(h.is_stopping() || h.is_asleep()) {
        let Some(b) = h.poll_to_server() else { break };
        let v: Value = serde_json::from_slice(&b).expect("the server gets JSON");
        if std::mem::take(&mut m.woke) {
            assert_eq!(
                v["method"], "initialize",
                "a woken server hears the handshake first"
            );
        }
        if v.get("method").is_some() {
            if let Some(id) = v.get("id") {
                m.server_ids.push(id.clone());
            }
            if let Some(t) = v.pointer("/params/_meta/progressToken") {
                m.tokens.push(t.clone());
            }
        }
    }
    if m.server_ids.len() > 512 {
        m.server_ids.drain(..256);
    }
    let mut records = 0;
    while let Some(r) = h.poll_record() {
        records += 1;
        assert!(
            r.state().is_terminal(),
            "a record is given once its call ended"
        );
        assert!(r.session_id().starts_with("fuzz/"));
    }
    assert!(records <= crate::hub::MAX_HUB_RECORDS);
    while let Some(span) = h.poll_span() {
        assert!(span.end_unix_ms >= span.start_unix_ms);
    }
    for s in &m.gone {
        assert_eq!(h.session_backlog(*s), 0, "bytes for a gone session");
        assert!(h.poll_to_session(*s).is_none());
    }
    for s in &m.open {
        assert!(h.session_backlog(*s) <= MAX_SESSION_QUEUE + (1 << 16) + 64);
    }
}
