//! A `ClientSession` and a `ServerSession` wired together in memory, with a
//! fake clock and random chunk sizes (quinn's pair pattern). Every loop is
//! bounded; no test touches a real pipe or clock beyond one base `Instant`.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use mcp_stdio_core::{to_raw, ErrorObject, Id, RawValue, WIRE_LIMIT_EXCEEDED};
use mcp_stdio_core::{
    ClientConfig, ClientEvent, ClientSession, CloseReason, Incoming, OverloadPolicy,
    RequestFailure, SendError,
};
use mcp_stdio_core::{
    FramerConfig, RequestState, Responded, ServerConfig, ServerEvent, ServerSession,
};

/// A framer with this wire limit.
fn framer(max_frame: usize) -> FramerConfig {
    let mut f = FramerConfig::default();
    f.max_frame(max_frame);
    f
}

fn raw(s: &str) -> Box<RawValue> {
    RawValue::from_string(s.to_owned()).expect("test JSON is valid")
}

/// A tiny deterministic generator so failures replay.
struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

struct Pair {
    client: ClientSession,
    server: ServerSession,
    now: Instant,
    rng: XorShift,
    /// Largest chunk moved in one step (1 = byte by byte).
    max_chunk: usize,
    c2s: VecDeque<u8>,
    s2c: VecDeque<u8>,
    completions: Vec<(Id, Result<String, RequestFailure>)>,
    closed: Option<CloseReason>,
    server_events: VecDeque<ServerEvent>,
}

impl Pair {
    fn new(client: ClientConfig, server: ServerConfig, seed: u64, max_chunk: usize) -> Self {
        Self::framed(
            (client, FramerConfig::default()),
            (server, FramerConfig::default()),
            seed,
            max_chunk,
        )
    }

    fn framed(
        client: (ClientConfig, FramerConfig),
        server: (ServerConfig, FramerConfig),
        seed: u64,
        max_chunk: usize,
    ) -> Self {
        Self {
            client: ClientSession::new(client.0, client.1),
            server: ServerSession::new(server.0, server.1),
            now: Instant::now(),
            rng: XorShift(seed.max(1)),
            max_chunk,
            c2s: VecDeque::new(),
            s2c: VecDeque::new(),
            completions: Vec::new(),
            closed: None,
            server_events: VecDeque::new(),
        }
    }

    fn default_pair(seed: u64) -> Self {
        Self::new(ClientConfig::default(), ServerConfig::default(), seed, 64)
    }

    fn chunk_len(&mut self, available: usize) -> usize {
        1 + self.rng.below(self.max_chunk.min(available))
    }

    /// Moves bytes both ways until nothing moves. Bounded.
    fn pump(&mut self) {
        for _ in 0..1_000_000 {
            let mut moved = false;
            while let Some(b) = self.client.poll_transmit() {
                self.c2s.extend(b);
                moved = true;
            }
            if !self.c2s.is_empty() {
                let n = self.chunk_len(self.c2s.len());
                let chunk: Vec<u8> = self.c2s.drain(..n).collect();
                self.server.handle_stdin(self.now, &chunk);
                moved = true;
            }
            while let Some(ev) = self.server.poll_event() {
                self.server_events.push_back(ev);
            }
            while let Some(b) = self.server.poll_transmit() {
                self.s2c.extend(b);
                moved = true;
            }
            if !self.s2c.is_empty() {
                let n = self.chunk_len(self.s2c.len());
                let chunk: Vec<u8> = self.s2c.drain(..n).collect();
                self.client.handle_stdout(self.now, &chunk);
                moved = true;
            }
            self.collect_client_events();
            if !moved {
                return;
            }
        }
        panic!("pump did not settle");
    }

    fn collect_client_events(&mut self) {
        while let Some(ev) = self.client.poll_event() {
            match ev {
                ClientEvent::Completed { id, outcome } => self
                    .completions
                    .push((id, outcome.map(|v| v.get().to_owned()))),
                ClientEvent::Closed(r) => self.closed = Some(r),
                _ => {}
            }
        }
    }

    /// Answers every pending request event by echoing its params; returns the
    /// number answered. Cancel events are recorded as handler ends.
    fn serve_echo(&mut self) -> usize {
        let mut n = 0;
        while let Some(ev) = self.server_events.pop_front() {
            match ev {
                ServerEvent::Request(r) => {
                    let result = r.params.unwrap_or_else(|| raw("{}"));
                    self.server
                        .respond(&r.id, Ok(&result))
                        .expect("request is in flight");
                    n += 1;
                }
                ServerEvent::Cancelled { id, .. } => self.server.handler_ended(&id),
                _ => {}
            }
        }
        n
    }

    fn take_request(&mut self) -> mcp_stdio_core::Request {
        loop {
            match self.server_events.pop_front() {
                Some(ServerEvent::Request(r)) => return r,
                Some(_) => continue,
                None => panic!("no request reached the server"),
            }
        }
    }

    fn completion(&self, id: &Id) -> &Result<String, RequestFailure> {
        &self
            .completions
            .iter()
            .find(|(i, _)| i == id)
            .unwrap_or_else(|| panic!("request {id} did not complete"))
            .1
    }
}

#[test]
fn request_and_response_round_trip() {
    for seed in 1..20 {
        let mut p = Pair::default_pair(seed);
        let id = p
            .client
            .request(
                p.now,
                "tools/call",
                Some(&raw(r#"{"name":"echo","s":"é\n\"x"}"#)),
                None,
            )
            .unwrap();
        p.pump();
        assert_eq!(p.serve_echo(), 1);
        p.pump();
        assert_eq!(
            p.completion(&id).as_ref().unwrap(),
            r#"{"name":"echo","s":"é\n\"x"}"#
        );
        assert_eq!(p.client.pending_len(), 0);
        assert_eq!(p.server.in_flight(), 0);
    }
}

#[test]
fn g6_g7_cancel_before_response_starts_suppresses_it() {
    let mut p = Pair::default_pair(7);
    let id = p.client.request(p.now, "tools/call", None, None).unwrap();
    p.pump();
    let req = p.take_request();
    p.client.cancel(&id, Some("user pressed stop")).unwrap();
    p.pump();
    // The client completes at once; the server got a Cancelled event.
    assert!(matches!(
        p.completion(&id),
        Err(RequestFailure::Cancelled { cancel_sent: true })
    ));
    match p.server_events.pop_front() {
        Some(ServerEvent::Cancelled { id: cid, reason }) => {
            assert_eq!(cid, req.id);
            assert_eq!(reason.as_deref(), Some("user pressed stop"));
        }
        other => panic!("expected Cancelled, got {other:?}"),
    }
    assert_eq!(p.server.state_of(&req.id), Some(RequestState::Cancelled));
    // The aborted handler's response, if it still comes, is suppressed.
    assert_eq!(
        p.server.respond(&req.id, Ok(&raw("1"))),
        Ok(Responded::Suppressed)
    );
    p.pump();
    assert_eq!(p.server.in_flight(), 0);
    assert_eq!(p.server.metrics().responses_suppressed, 1);
    assert_eq!(p.client.metrics().late_responses, 0);
    assert_eq!(p.completions.len(), 1);
    // G8: a second, independent request completes.
    let id2 = p.client.request(p.now, "ping", None, None).unwrap();
    p.pump();
    p.serve_echo();
    p.pump();
    assert!(p.completion(&id2).is_ok());
}

#[test]
fn g7_cancel_of_a_queued_response_drops_it_before_any_byte_leaves() {
    let mut p = Pair::default_pair(8);
    let id = p.client.request(p.now, "tools/call", None, None).unwrap();
    p.pump();
    let req = p.take_request();
    // The handler finishes, but its response has not been transmitted yet.
    p.server.respond(&req.id, Ok(&raw("\"result\""))).unwrap();
    assert_eq!(p.server.state_of(&req.id), Some(RequestState::Queued));
    // The cancel arrives before the server polls its output.
    p.client.cancel(&id, None).unwrap();
    while let Some(b) = p.client.poll_transmit() {
        p.server.handle_stdin(p.now, &b);
    }
    assert_eq!(
        p.server.poll_transmit(),
        None,
        "the queued response was dropped"
    );
    assert_eq!(p.server.metrics().cancels_before_response, 1);
    p.pump();
    assert_eq!(p.client.metrics().late_responses, 0);
}

#[test]
fn g6_g7_cancel_after_response_started_is_recorded_and_late_response_ignored() {
    let mut p = Pair::default_pair(9);
    let id = p.client.request(p.now, "tools/call", None, None).unwrap();
    p.pump();
    let req = p.take_request();
    p.server.respond(&req.id, Ok(&raw("\"done\""))).unwrap();
    // The response's bytes leave the server, but have not reached the client.
    let in_transit = p.server.poll_transmit().expect("response bytes");
    p.client.cancel(&id, None).unwrap();
    p.pump();
    // The server records the late cancel; it is not an error.
    assert_eq!(p.server.metrics().cancels_after_response, 1);
    assert!(p.server_events.is_empty());
    // The late response is ignored and counted.
    p.client.handle_stdout(p.now, &in_transit);
    p.collect_client_events();
    assert_eq!(p.client.metrics().late_responses, 1);
    assert_eq!(p.client.metrics().unknown_id_responses, 0);
    assert_eq!(p.completions.len(), 1);
    assert!(matches!(
        p.completion(&id),
        Err(RequestFailure::Cancelled { .. })
    ));
}

#[test]
fn g6_timeout_sends_cancel_and_late_response_is_counted() {
    let mut p = Pair::default_pair(10);
    let id = p
        .client
        .request(p.now, "tools/call", None, Some(Duration::from_secs(5)))
        .unwrap();
    p.pump();
    let req = p.take_request();
    let deadline = p.client.poll_timeout().expect("a deadline");
    assert_eq!(deadline, p.now + Duration::from_secs(5));
    // A spurious early timeout does nothing.
    p.client.handle_timeout(p.now + Duration::from_secs(1));
    p.collect_client_events();
    assert!(p.completions.is_empty());
    p.now = deadline;
    p.client.handle_timeout(p.now);
    p.pump();
    assert!(matches!(
        p.completion(&id),
        Err(RequestFailure::TimedOut { after, cancel_sent: true }) if *after == Duration::from_secs(5)
    ));
    assert!(matches!(
        p.server_events.pop_front(),
        Some(ServerEvent::Cancelled { .. })
    ));
    // A handler that ignores the cancel still answers: suppressed at the server.
    assert_eq!(
        p.server.respond(&req.id, Ok(&raw("1"))),
        Ok(Responded::Suppressed)
    );
    let m = p.client.metrics();
    assert_eq!((m.timeouts, m.cancels_sent), (1, 1));
    assert_eq!(p.client.poll_timeout(), None);
}

#[test]
fn g6_initialize_is_never_cancelled_on_the_wire() {
    let mut p = Pair::default_pair(11);
    let id = p
        .client
        .request(
            p.now,
            "initialize",
            Some(&raw("{}")),
            Some(Duration::from_secs(1)),
        )
        .unwrap();
    p.pump();
    let _req = p.take_request();
    p.now += Duration::from_secs(1);
    p.client.handle_timeout(p.now);
    p.pump();
    assert!(matches!(
        p.completion(&id),
        Err(RequestFailure::TimedOut {
            cancel_sent: false,
            ..
        })
    ));
    assert!(p.server_events.is_empty(), "no cancel reached the server");
    assert_eq!(p.client.metrics().cancels_sent, 0);
    // An explicit cancel of initialize is local only, too.
    let id = p.client.request(p.now, "initialize", None, None).unwrap();
    p.client.cancel(&id, None).unwrap();
    p.pump();
    assert!(matches!(
        p.completion(&id),
        Err(RequestFailure::Cancelled { cancel_sent: false })
    ));
    // A client that cancels initialize anyway is ignored by our server.
    let bytes = br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}
"#;
    p.server.handle_stdin(p.now, bytes);
    assert_eq!(p.server.metrics().cancels_initialize_ignored, 1);
}

#[test]
fn g5_inbox_overload_rejects_requests_drops_notifications_and_keeps_reading() {
    let mut cfg = ClientConfig::default();
    cfg.inbox_capacity(3);
    let mut c = ClientSession::new(cfg, FramerConfig::default());
    let now = Instant::now();
    let id = c.request(now, "ping", None, None).unwrap();
    let _ = c.poll_transmit();
    let mut input = String::new();
    for i in 0..5 {
        input += &format!(r#"{{"jsonrpc":"2.0","id":"s{i}","method":"sampling/createMessage"}}"#);
        input += "\n";
        input += r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#;
        input += "\n";
    }
    // Our own response comes after the flood: it must still be admitted.
    input += &format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#);
    input += "\n";
    c.handle_stdout(now, input.as_bytes());
    assert_eq!(c.inbox_len(), 3);
    let m = c.metrics();
    assert_eq!(m.overload_rejects, 3, "{m:?}");
    assert_eq!(m.overload_drops, 4, "{m:?}");
    assert_eq!(m.inbox_peak_depth, 3);
    // Each rejected request got a -32000 reply.
    let mut replies = Vec::new();
    while let Some(b) = c.poll_transmit() {
        replies.push(String::from_utf8(b).unwrap());
    }
    assert_eq!(replies.len(), 3);
    assert!(replies
        .iter()
        .all(|r| r.contains("-32000") && r.contains("\"id\":\"s")));
    let mut completed = false;
    while let Some(ev) = c.poll_event() {
        if let ClientEvent::Completed { id: got, outcome } = ev {
            assert_eq!(got, id);
            assert!(outcome.is_ok());
            completed = true;
        }
    }
    assert!(
        completed,
        "the response was admitted despite the full inbox"
    );
    // The inbox drains in order and records how long messages waited.
    let later = now + Duration::from_millis(250);
    assert!(matches!(c.poll_incoming(later), Some(Incoming::Request(r)) if r.id == Id::from("s0")));
    assert!(matches!(
        c.poll_incoming(later),
        Some(Incoming::Notification(_))
    ));
    assert!(matches!(c.poll_incoming(later), Some(Incoming::Request(r)) if r.id == Id::from("s1")));
    assert!(c.poll_incoming(later).is_none());
    let m = c.metrics();
    assert_eq!(m.inbox_wait_max_us, 250_000);
    assert_eq!(m.inbox_wait_total_us, 750_000);
}

#[test]
fn g5_inbox_overload_close_policy_closes_the_session() {
    let mut cfg = ClientConfig::default();
    cfg.inbox_capacity(1)
        .overload_policy(OverloadPolicy::CloseSession);
    let mut c = ClientSession::new(cfg, FramerConfig::default());
    let now = Instant::now();
    let id = c.request(now, "ping", None, None).unwrap();
    let flood = "{\"jsonrpc\":\"2.0\",\"method\":\"n\"}\n".repeat(3);
    c.handle_stdout(now, flood.as_bytes());
    let mut events = Vec::new();
    while let Some(ev) = c.poll_event() {
        events.push(ev);
    }
    assert!(events.iter().any(|e| matches!(e,
        ClientEvent::Completed { id: got, outcome: Err(RequestFailure::SessionClosed) } if *got == id)));
    assert!(matches!(
        events.last(),
        Some(ClientEvent::Closed(CloseReason::Overloaded))
    ));
    assert_eq!(c.request(now, "ping", None, None), Err(SendError::Closed));
}

#[test]
fn g3_oversized_response_fails_its_request_at_once_then_ping_succeeds() {
    for seed in [1, 2, 3] {
        let mut p = Pair::framed(
            (ClientConfig::default(), framer(64 * 1024)),
            (ServerConfig::default(), framer(16 * 1024 * 1024)),
            seed,
            8 * 1024,
        );
        let big = p.client.request(p.now, "tools/call", None, None).unwrap();
        p.pump();
        let req = p.take_request();
        let payload = to_raw(&"x".repeat(1024 * 1024)).unwrap();
        assert_eq!(
            p.server.respond(&req.id, Ok(&payload)),
            Ok(Responded::Queued)
        );
        // Deliver only the first 100 KiB: the failure must not wait for the rest.
        let bytes = p.server.poll_transmit().unwrap();
        p.client.handle_stdout(p.now, &bytes[..100 * 1024]);
        p.collect_client_events();
        let failure = p.completion(&big);
        assert!(matches!(
            failure,
            Err(RequestFailure::ResponseTooLarge { limit, .. }) if *limit == 64 * 1024
        ));
        // Issue 34: the error names the client's knob as its user writes it.
        let text = failure.as_ref().map_err(ToString::to_string).unwrap_err();
        assert!(
            text.starts_with("response exceeded the wire limit (65536 bytes; ")
                && text.ends_with("; raise ClientOptions::framer_mut().max_frame(bytes)"),
            "{text}"
        );
        p.client.handle_stdout(p.now, &bytes[100 * 1024..]);
        // The session goes on: a small request completes.
        let ping = p.client.request(p.now, "ping", None, None).unwrap();
        p.pump();
        p.serve_echo();
        p.pump();
        assert!(p.completion(&ping).is_ok());
        let m = p.client.metrics();
        assert_eq!(m.oversized_frames, 1);
        assert!(m.oversized_bytes_discarded >= 1024 * 1024);
        assert_eq!(m.unknown_id_responses + m.late_responses, 0);
    }
}

/// Issue 34: a message we would send over our own wire limit is refused
/// with a text that names the knob as its reader writes it.
#[test]
fn g2_a_message_over_our_own_limit_names_the_knob_that_raises_it() {
    let now = Instant::now();
    let mut c = ClientSession::new(ClientConfig::default(), framer(1024));
    let params = raw(&format!("{{\"text\":\"{}\"}}", "x".repeat(2000)));
    let err = c
        .request(now, "tools/call", Some(&params), None)
        .expect_err("over the limit");
    assert!(matches!(err, SendError::Encode(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "message exceeds the wire limit of 1024 bytes; \
         raise ClientOptions::framer_mut().max_frame(bytes)"
    );
    let mut server = ServerSession::new(ServerConfig::default(), framer(1024));
    let err = server
        .notify("notifications/message", Some(&params))
        .expect_err("over the limit");
    assert_eq!(
        err.to_string(),
        "message exceeds the wire limit of 1024 bytes; \
         raise ServeOptions::framer_mut().max_frame(bytes)"
    );
}

#[test]
fn g9_server_replaces_an_oversized_result_with_an_error() {
    let mut p = Pair::framed(
        (ClientConfig::default(), FramerConfig::default()),
        (ServerConfig::default(), framer(1024)),
        5,
        64,
    );
    let id = p.client.request(p.now, "tools/call", None, None).unwrap();
    p.pump();
    let req = p.take_request();
    let payload = to_raw(&"y".repeat(2000)).unwrap();
    assert_eq!(
        p.server.respond(&req.id, Ok(&payload)),
        Ok(Responded::ReplacedTooLarge)
    );
    p.pump();
    match p.completion(&id) {
        Err(RequestFailure::Server(e)) => {
            assert_eq!(e.code, WIRE_LIMIT_EXCEEDED);
            assert_eq!(
                e.message,
                "result exceeded the wire limit (1024 bytes; 1025 bytes seen); \
                 raise ServeOptions::framer_mut().max_frame(bytes)"
            );
            assert_eq!(
                e.data.as_ref().map(|d| d.get()),
                Some(r#"{"limit":1024,"seen":1025}"#)
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn g5_server_rejects_beyond_max_concurrent_and_duplicate_ids() {
    let mut scfg = ServerConfig::default();
    scfg.max_concurrent(2);
    let mut p = Pair::new(ClientConfig::default(), scfg, 6, 64);
    let ids: Vec<Id> = (0..3)
        .map(|_| p.client.request(p.now, "slow", None, None).unwrap())
        .collect();
    p.pump();
    match p.completion(&ids[2]) {
        Err(RequestFailure::Server(e)) => assert_eq!(e.code, -32000),
        other => panic!("{other:?}"),
    }
    assert_eq!(p.server.in_flight(), 2);
    // A duplicate id while in flight gets invalid-request.
    let dup = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"x\"}}\n",
        ids[0]
    );
    p.server.handle_stdin(p.now, dup.as_bytes());
    let reply = String::from_utf8(p.server.poll_transmit().unwrap()).unwrap();
    assert!(reply.contains("-32600"), "{reply}");
    assert_eq!(p.server.metrics().duplicate_ids, 1);
    assert_eq!(p.serve_echo(), 2);
    p.pump();
    assert!(p.completion(&ids[0]).is_ok() && p.completion(&ids[1]).is_ok());
}

#[test]
fn g4_thousands_of_messages_in_one_chunk() {
    let mut p = Pair::new(
        ClientConfig::default(),
        ServerConfig::default(),
        3,
        usize::MAX,
    );
    let mut cfg = ClientConfig::default();
    cfg.max_in_flight(5000);
    p.client = ClientSession::new(cfg, FramerConfig::default());
    let mut scfg = ServerConfig::default();
    scfg.max_concurrent(5000);
    p.server = ServerSession::new(scfg, FramerConfig::default());
    let ids: Vec<Id> = (0..5000)
        .map(|i| {
            p.client
                .request(p.now, "echo", Some(&raw(&format!("[{i}]"))), None)
                .unwrap()
        })
        .collect();
    // All 5000 requests cross in one chunk, all responses in one chunk.
    let mut all = Vec::new();
    while let Some(b) = p.client.poll_transmit() {
        all.extend(b);
    }
    p.server.handle_stdin(p.now, &all);
    while let Some(ev) = p.server.poll_event() {
        p.server_events.push_back(ev);
    }
    assert_eq!(p.serve_echo(), 5000);
    let mut all = Vec::new();
    while let Some(b) = p.server.poll_transmit() {
        all.extend(b);
    }
    p.client.handle_stdout(p.now, &all);
    p.collect_client_events();
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(p.completion(id).as_ref().unwrap(), &format!("[{i}]"));
    }
}

#[test]
fn g4_one_message_in_thousands_of_one_byte_chunks() {
    let mut p = Pair::new(ClientConfig::default(), ServerConfig::default(), 4, 1);
    let text = "ü€😀\"\\n".repeat(500);
    let params = to_raw(&text).unwrap();
    let id = p
        .client
        .request(p.now, "echo", Some(&params), None)
        .unwrap();
    p.pump();
    p.serve_echo();
    p.pump();
    let got: String = serde_json::from_str(p.completion(&id).as_ref().unwrap()).unwrap();
    assert_eq!(got, text);
    assert!(p.client.metrics().stdout_bytes > 4000);
}

#[test]
fn eof_closes_the_session_and_fails_pending_requests() {
    let mut p = Pair::default_pair(12);
    let id = p.client.request(p.now, "slow", None, None).unwrap();
    p.pump();
    p.client
        .handle_stdout(p.now, b"{\"jsonrpc\":\"2.0\",\"id\":99,\"res");
    p.client.handle_stdout_eof(p.now);
    p.collect_client_events();
    assert!(matches!(
        p.completion(&id),
        Err(RequestFailure::SessionClosed)
    ));
    assert_eq!(p.closed, Some(CloseReason::StdoutEof));
    assert_eq!(
        p.client.metrics().parse_errors.get("truncated_at_eof"),
        Some(&1)
    );
}

#[test]
fn malformed_lines_and_unknown_ids_are_counted_and_the_session_goes_on() {
    let mut p = Pair::default_pair(13);
    let id = p.client.request(p.now, "ping", None, None).unwrap();
    p.pump();
    p.client
        .handle_stdout(p.now, b"npm WARN something on stdout\n");
    p.client
        .handle_stdout(p.now, b"{\"jsonrpc\":\"2.0\",\"id\":4242,\"result\":{}}\n");
    p.client.handle_stdout(p.now, b"\n\r\n[1,2]\n\xff\xfe\n");
    p.serve_echo();
    p.pump();
    assert!(p.completion(&id).is_ok());
    let m = p.client.metrics();
    assert_eq!(m.unknown_id_responses, 1);
    // `\xff\xfe` is repaired to two U+FFFD, which is not JSON.
    assert_eq!(m.parse_errors.get("json"), Some(&2));
    assert_eq!(m.parse_errors.get("batch"), Some(&1));
    assert_eq!(m.utf8_repaired, 1);
    assert_eq!(m.empty_lines, 2);
}

#[test]
fn malformed_response_naming_a_pending_id_fails_it_at_once() {
    let mut c = ClientSession::new(ClientConfig::default(), FramerConfig::default());
    let now = Instant::now();
    let id = c.request(now, "ping", None, None).unwrap();
    let line = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":1,\"error\":{{}}}}\n");
    c.handle_stdout(now, line.as_bytes());
    match c.poll_event() {
        Some(ClientEvent::Completed {
            id: got,
            outcome: Err(RequestFailure::MalformedResponse(_)),
        }) => {
            assert_eq!(got, id)
        }
        other => panic!("{other:?}"),
    }
}

/// The line from the field: one invalid sequence inside a string, the id in
/// the first bytes. Hosts that accept it directly must not lose it through us.
fn bad_utf8_response(id: &Id) -> Vec<u8> {
    let mut line = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"bad ").into_bytes();
    line.extend_from_slice(b"\xff\xfe byte\"}]}}\n");
    line
}

#[test]
fn g3_an_invalid_utf8_response_is_repaired_by_default_and_completes() {
    let mut c = ClientSession::new(ClientConfig::default(), FramerConfig::default());
    let now = Instant::now();
    let id = c.request(now, "tools/call", None, None).unwrap();
    c.handle_stdout(now, &bad_utf8_response(&id));
    match c.poll_event() {
        Some(ClientEvent::Completed {
            id: got,
            outcome: Ok(result),
        }) => {
            assert_eq!(got, id);
            assert!(
                result.get().contains("bad \u{fffd}\u{fffd} byte"),
                "{}",
                result.get()
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.metrics().utf8_repaired, 1);
}

#[test]
fn g3_an_invalid_utf8_response_refused_by_policy_fails_its_request_at_once() {
    let mut f = FramerConfig::default();
    f.invalid_utf8(mcp_stdio_core::InvalidUtf8Policy::Refuse);
    let mut c = ClientSession::new(ClientConfig::default(), f);
    let now = Instant::now();
    let id = c.request(now, "tools/call", None, None).unwrap();
    c.handle_stdout(now, &bad_utf8_response(&id));
    match c.poll_event() {
        Some(ClientEvent::Completed {
            id: got,
            outcome: Err(RequestFailure::InvalidUtf8Response { len, .. }),
        }) => assert_eq!((got, len), (id, 84)),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.metrics().refused_frames_failed, 1);
    // The session goes on.
    let next = c.request(now, "ping", None, None).unwrap();
    let line = format!("{{\"jsonrpc\":\"2.0\",\"id\":{next},\"result\":{{}}}}\n");
    c.handle_stdout(now, line.as_bytes());
    assert!(matches!(
        c.poll_event(),
        Some(ClientEvent::Completed { outcome: Ok(_), .. })
    ));
}

#[test]
fn g3_a_non_jsonrpc_line_with_its_id_last_fails_its_request_at_once() {
    let mut c = ClientSession::new(ClientConfig::default(), FramerConfig::default());
    let now = Instant::now();
    let id = c.request(now, "tools/call", None, None).unwrap();
    // Valid JSON, wrong version, the id after 10 KiB: past any prefix scan.
    let line = format!(
        "{{\"jsonrpc\":\"1.0\",\"result\":\"{}\",\"id\":{id}}}\n",
        "x".repeat(10 * 1024)
    );
    c.handle_stdout(now, line.as_bytes());
    match c.poll_event() {
        Some(ClientEvent::Completed {
            id: got,
            outcome: Err(RequestFailure::MalformedResponse(_)),
        }) => assert_eq!(got, id),
        other => panic!("{other:?}"),
    }
}

#[test]
fn limits_refuse_with_typed_errors() {
    let mut cfg = ClientConfig::default();
    cfg.max_in_flight(2).max_outgoing_bytes(100);
    let mut c = ClientSession::new(cfg, framer(200));
    let now = Instant::now();
    c.request(now, "a", None, None).unwrap();
    // The queue now holds one message: the next that would pass 100 bytes is refused.
    let big = to_raw(&"z".repeat(90)).unwrap();
    assert!(matches!(
        c.request(now, "b", Some(&big), None),
        Err(SendError::Backpressure { limit: 100, .. })
    ));
    c.request(now, "b", None, None).unwrap();
    assert_eq!(
        c.request(now, "c", None, None),
        Err(SendError::TooManyInFlight { limit: 2 })
    );
    let huge = to_raw(&"z".repeat(300)).unwrap();
    assert!(matches!(
        c.notify("n", Some(&huge)),
        Err(SendError::Encode(_))
    ));
    assert_eq!(c.pending_len(), 2);
}

#[test]
fn server_answers_parse_errors_with_null_id_and_invalid_requests_with_their_id() {
    let mut s = ServerSession::new(ServerConfig::default(), FramerConfig::default());
    let now = Instant::now();
    s.handle_stdin(
        now,
        b"{not json\n{\"jsonrpc\":\"1.0\",\"id\":5,\"method\":\"x\"}\n",
    );
    let a = String::from_utf8(s.poll_transmit().unwrap()).unwrap();
    let b = String::from_utf8(s.poll_transmit().unwrap()).unwrap();
    assert!(a.contains("\"id\":null") && a.contains("-32700"), "{a}");
    assert!(b.contains("\"id\":5") && b.contains("-32600"), "{b}");
    let e = ErrorObject::new(1, "x");
    assert!(s.respond(&Id::Number(5), Err(&e)).is_err());
}

/// `{result, jsonrpc, id}` (the TypeScript SDK's order) with a result over
/// the limit and an `"id"` nested in the result.
fn id_last_response(id: &Id, payload: usize) -> Vec<u8> {
    let id = serde_json::to_string(id).expect("an id serializes");
    format!(
        r#"{{"result":{{"content":[{{"type":"text","text":"{}"}}],"id":{{"id":0}}}},"jsonrpc":"2.0","id":{id}}}"#,
        "x".repeat(payload)
    )
    .into_bytes()
}

#[test]
fn g3_id_last_oversized_response_fails_its_request_at_the_frame_end() {
    let now = Instant::now();
    for chunk in [1 << 20, 4096, 7] {
        let mut c = ClientSession::new(ClientConfig::default(), framer(64 * 1024));
        let other = c.request(now, "ping", None, None).unwrap();
        let big = c.request(now, "tools/call", None, None).unwrap();
        let bytes = id_last_response(&big, 256 * 1024);
        for piece in bytes.chunks(chunk) {
            c.handle_stdout(now, piece);
        }
        // The id is known only once the frame has ended.
        assert!(c.poll_event().is_none(), "chunk {chunk}");
        c.handle_stdout(now, b"\n");
        match c.poll_event() {
            Some(ClientEvent::Completed {
                id,
                outcome: Err(RequestFailure::ResponseTooLarge { limit, seen }),
            }) => {
                assert_eq!(id, big);
                assert_eq!(limit, 64 * 1024);
                assert_eq!(seen, bytes.len() as u64);
            }
            other => panic!("chunk {chunk}: {other:?}"),
        }
        assert_eq!(c.pending_len(), 1, "only {other} is still pending");
        assert_eq!(c.metrics().oversized_ids_missing, 0);
        // Without a usable id nothing fails, and the miss is counted.
        let mut nameless = id_last_response(&Id::Number(0), 256 * 1024);
        nameless.truncate(nameless.len() - r#","id":0}"#.len());
        nameless.extend_from_slice(b"}\n");
        c.handle_stdout(now, &nameless);
        assert!(c.poll_event().is_none());
        assert_eq!(c.pending_len(), 1);
        assert_eq!(c.metrics().oversized_ids_missing, 1);
    }
}

#[test]
fn g3_server_answers_an_id_last_oversized_request() {
    let now = Instant::now();
    let mut s = ServerSession::new(ServerConfig::default(), framer(64 * 1024));
    let line = format!(
        r#"{{"method":"tools/call","params":{{"id":1,"x":"{}"}},"jsonrpc":"2.0","id":"r\"1"}}"#,
        "y".repeat(128 * 1024)
    );
    for piece in line.as_bytes().chunks(5000) {
        s.handle_stdin(now, piece);
    }
    assert!(s.poll_transmit().is_none());
    s.handle_stdin(now, b"\n");
    let reply = String::from_utf8(s.poll_transmit().unwrap()).unwrap();
    assert!(reply.contains(r#""id":"r\"1""#), "{reply}");
    assert!(
        reply.contains("request exceeded the wire limit (65536 bytes; "),
        "{reply}"
    );
}

/// A large response read into the client's room is handed out as its result
/// without a second copy: the result keeps the frame's own buffer (whatever
/// the member order), and the framer keeps no large buffer of its own.
#[test]
fn large_result_is_the_frame_itself_in_any_member_order() {
    let payload = "x".repeat(1024 * 1024);
    for (i, template) in [
        r#"{"jsonrpc":"2.0","id":ID,"result":{"text":"P"}}"#,
        r#"{"result":{"text":"P"},"jsonrpc":"2.0","id":ID}"#,
        r#"{"id":ID,"result":{"text":"P"} ,"jsonrpc":"2.0"}"#,
    ]
    .into_iter()
    .enumerate()
    {
        let mut c = ClientSession::new(ClientConfig::default(), framer(4 * 1024 * 1024));
        let now = Instant::now();
        let id = c.request(now, "tools/call", None, None).unwrap();
        let Id::Number(n) = id else { panic!() };
        let line = template
            .replace("ID", &n.to_string())
            .replace('P', &payload)
            + "\n";
        // Reads of odd sizes, as a pipe gives them.
        let mut rest = line.as_bytes();
        let mut size = 1000 + i * 777;
        while !rest.is_empty() {
            let room = c.stdout_room().zeroed();
            let k = room.len().min(rest.len()).min(size);
            room[..k].copy_from_slice(&rest[..k]);
            c.handle_stdout_read(now, k);
            rest = &rest[k..];
            size = size * 3 % 70_000 + 1;
        }
        let mut result = None;
        while let Some(ev) = c.poll_event() {
            if let ClientEvent::Completed { outcome, .. } = ev {
                result = Some(outcome.expect("a result"));
            }
        }
        let result = result.expect("completed");
        let v: serde_json::Value = result.parse().unwrap();
        assert_eq!(v["text"].as_str().map(str::len), Some(payload.len()));
        // The result holds the frame (its buffer, at least the payload)…
        assert!(result.retained_bytes() >= line.len() - 1, "{template}");
        // …and the framer no longer holds a large buffer: one copy in all.
        assert!(
            c.stdout_buffer_capacity() <= 64 * 1024,
            "{}",
            c.stdout_buffer_capacity()
        );
    }
}

/// G6: a request's deadline is explicit — the default, none, or after a
/// duration — whatever the session's default timeout.
#[test]
fn g6_deadline_is_default_none_or_after_a_duration() {
    use mcp_stdio_core::Deadline;
    let mut cfg = ClientConfig::default();
    cfg.default_timeout(Some(Duration::from_secs(60)));
    let now = Instant::now();
    let deadline_of = |d: Deadline| {
        let mut c = ClientSession::new(cfg.clone(), FramerConfig::default());
        c.request(now, "tools/call", None, d.as_timeout()).unwrap();
        c.poll_timeout()
    };
    assert_eq!(
        deadline_of(Deadline::Default),
        Some(now + Duration::from_secs(60))
    );
    assert_eq!(deadline_of(Deadline::None), None, "no deadline at all");
    assert_eq!(
        deadline_of(Deadline::After(Duration::from_millis(5))),
        Some(now + Duration::from_millis(5))
    );
    // With no deadline, time passing fails nothing.
    let mut c = ClientSession::new(cfg.clone(), FramerConfig::default());
    let id = c
        .request(now, "tools/call", None, Deadline::None.as_timeout())
        .unwrap();
    c.handle_timeout(now + Duration::from_secs(365 * 24 * 3600));
    assert_eq!(c.pending_len(), 1, "{id} still waits");
}
