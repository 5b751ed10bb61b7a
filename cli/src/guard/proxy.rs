//! The guard's decisions, without I/O: what crosses from the host to the
//! server and back, what goes to stderr, and what is recorded.
//!
//! Both directions are framed with the wire limit before any parse (G2).
//! Frames are forwarded byte for byte as they arrived (plus `\n`), so a
//! well-behaved session is unchanged; the proxy only decodes them to track
//! requests, cancels and outcomes.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Instant;

use mcp_stdio_core::frame::{recover_id, FrameError, FrameEvent, Framer, FramerConfig};
use mcp_stdio_core::message::{encode_error, ErrorObject, Id, Message, PARSE_ERROR, SERVER_ERROR};
use serde::Serialize;

/// Limits of the proxy.
#[derive(Debug, Clone)]
pub(crate) struct ProxyLimits {
    /// Wire limit, both directions.
    pub(crate) max_frame: usize,
    /// Bytes waiting for the host's stdout before the session is closed;
    /// also the bound on bytes waiting for the server's stdin before the
    /// guard stops reading the host.
    pub(crate) max_buffered: usize,
    /// Bytes of non-protocol server stdout moved to stderr (then only counted).
    pub(crate) noise_budget: u64,
    /// Requests tracked at once for cancel enforcement and audit.
    pub(crate) max_tracked: usize,
    /// Cancelled ids remembered so a late response is dropped.
    pub(crate) max_cancelled: usize,
}

impl Default for ProxyLimits {
    fn default() -> Self {
        Self {
            max_frame: mcp_stdio_core::frame::DEFAULT_MAX_FRAME,
            max_buffered: 16 * 1024 * 1024,
            noise_budget: 64 * 1024,
            max_tracked: 4096,
            max_cancelled: 4096,
        }
    }
}

/// How one request ended, as seen by the guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CallOutcome {
    /// The server answered with a result.
    Result,
    /// The server answered with an error.
    Error,
    /// The host cancelled it; nothing more for it reached the host.
    Cancelled,
    /// The response passed the wire limit; the host got an error instead.
    ResponseTooLarge,
    /// The session ended first; the server may or may not have acted.
    Unknown,
}

/// One line of the audit log: a request dispatched, or its completion.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CallRecord {
    /// `dispatched` (written before the request reaches the server) or `completed`.
    pub(crate) phase: &'static str,
    /// Sequence number of the call within the session.
    pub(crate) call: u64,
    /// The JSON-RPC id.
    pub(crate) id: Id,
    /// The method.
    pub(crate) method: String,
    /// The tool name, for `tools/call`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool: Option<String>,
    /// Request size in bytes.
    pub(crate) request_bytes: u64,
    /// Response size in bytes (completed only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) response_bytes: Option<u64>,
    /// Error code, when the outcome is an error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error_code: Option<i64>,
    /// How it ended (completed only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) outcome: Option<CallOutcome>,
    /// Time from dispatch to completion, in milliseconds (completed only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) duration_ms: Option<u64>,
}

/// Counters of a guarded session.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct ProxyMetrics {
    /// Bytes read from the host.
    pub(crate) host_bytes: u64,
    /// Bytes read from the server's stdout.
    pub(crate) server_bytes: u64,
    /// Requests from the host.
    pub(crate) requests: u64,
    /// Requests not tracked because `max_tracked` were in flight.
    pub(crate) untracked_requests: u64,
    /// Responses forwarded to the host.
    pub(crate) responses: u64,
    /// Cancels sent by the host.
    pub(crate) cancels: u64,
    /// Messages for a cancelled id dropped instead of reaching the host.
    pub(crate) dropped_after_cancel: u64,
    /// Host requests over the wire limit (answered by the guard).
    pub(crate) oversized_requests: u64,
    /// Server messages over the wire limit.
    pub(crate) oversized_responses: u64,
    /// Non-protocol lines on the server's stdout (moved to stderr).
    pub(crate) non_protocol_lines: u64,
    /// Bytes of non-protocol stdout not shown (over the noise budget).
    pub(crate) non_protocol_bytes_dropped: u64,
    /// Undecodable frames from the host (forwarded as they were).
    pub(crate) host_parse_errors: u64,
    /// Largest frame from the server.
    pub(crate) largest_server_frame: u64,
    /// Peak bytes waiting for the host's stdout.
    pub(crate) host_queue_peak: u64,
}

#[derive(Debug)]
struct Tracked {
    call: u64,
    method: String,
    tool: Option<String>,
    request_bytes: u64,
    sent: Instant,
}

/// The proxy state machine.
#[derive(Debug)]
pub(crate) struct Proxy {
    limits: ProxyLimits,
    host_framer: Framer,
    server_framer: Framer,
    state: State,
}

#[derive(Debug)]
struct State {
    limits: ProxyLimits,
    to_server: VecDeque<Vec<u8>>,
    to_server_bytes: usize,
    to_host: VecDeque<Vec<u8>>,
    to_host_bytes: usize,
    notes: VecDeque<String>,
    records: VecDeque<CallRecord>,
    tracked: HashMap<Id, Tracked>,
    cancelled: HashSet<Id>,
    cancelled_order: VecDeque<Id>,
    next_call: u64,
    noise_shown: u64,
    metrics: ProxyMetrics,
}

/// Most notes waiting for stderr; past it they are dropped.
const MAX_NOTES: usize = 256;
/// Longest non-protocol line shown on stderr.
const MAX_NOTE_LINE: usize = 512;

impl Proxy {
    pub(crate) fn new(limits: ProxyLimits) -> Self {
        let mut framing = FramerConfig::default();
        framing.max_frame(limits.max_frame);
        Self {
            host_framer: Framer::new(framing.clone()),
            server_framer: Framer::new(framing),
            state: State {
                limits: limits.clone(),
                to_server: VecDeque::new(),
                to_server_bytes: 0,
                to_host: VecDeque::new(),
                to_host_bytes: 0,
                notes: VecDeque::new(),
                records: VecDeque::new(),
                tracked: HashMap::new(),
                cancelled: HashSet::new(),
                cancelled_order: VecDeque::new(),
                next_call: 1,
                noise_shown: 0,
                metrics: ProxyMetrics::default(),
            },
            limits,
        }
    }

    // ---- getters ----

    pub(crate) fn metrics(&self) -> &ProxyMetrics {
        &self.state.metrics
    }

    /// Bytes waiting for the host's stdout.
    pub(crate) fn host_queue_bytes(&self) -> usize {
        self.state.to_host_bytes
    }

    /// The bound on bytes waiting for the host.
    pub(crate) fn max_buffered(&self) -> usize {
        self.limits.max_buffered
    }

    /// Whether the guard should read more from the host (the server is keeping up).
    pub(crate) fn wants_host_input(&self) -> bool {
        self.state.to_server_bytes <= self.limits.max_buffered
    }

    // ---- inputs ----

    pub(crate) fn handle_host(&mut self, now: Instant, chunk: &[u8]) {
        self.state.metrics.host_bytes += chunk.len() as u64;
        let state = &mut self.state;
        self.host_framer
            .push(chunk, |ev| state.on_host_event(now, ev));
    }

    pub(crate) fn handle_host_eof(&mut self, now: Instant) {
        let state = &mut self.state;
        self.host_framer.finish(|ev| state.on_host_event(now, ev));
    }

    pub(crate) fn handle_server(&mut self, now: Instant, chunk: &[u8]) {
        self.state.metrics.server_bytes += chunk.len() as u64;
        let state = &mut self.state;
        self.server_framer
            .push(chunk, |ev| state.on_server_event(now, ev));
    }

    pub(crate) fn handle_server_eof(&mut self, now: Instant) {
        let state = &mut self.state;
        self.server_framer
            .finish(|ev| state.on_server_event(now, ev));
    }

    /// The session is over: every request still open ends as `unknown`.
    pub(crate) fn finish(&mut self, now: Instant) {
        let mut open: Vec<(Id, Tracked)> = self.state.tracked.drain().collect();
        open.sort_by_key(|(_, t)| t.call);
        for (id, t) in open {
            self.state
                .complete(now, id, t, CallOutcome::Unknown, None, None);
        }
    }

    // ---- outputs ----

    pub(crate) fn poll_to_server(&mut self) -> Option<Vec<u8>> {
        let b = self.state.to_server.pop_front()?;
        self.state.to_server_bytes -= b.len();
        Some(b)
    }

    pub(crate) fn poll_to_host(&mut self) -> Option<Vec<u8>> {
        let b = self.state.to_host.pop_front()?;
        self.state.to_host_bytes -= b.len();
        Some(b)
    }

    pub(crate) fn poll_note(&mut self) -> Option<String> {
        self.state.notes.pop_front()
    }

    pub(crate) fn poll_record(&mut self) -> Option<CallRecord> {
        self.state.records.pop_front()
    }
}

fn line(text: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(text.len() + 1);
    v.extend_from_slice(text.as_bytes());
    v.push(b'\n');
    v
}

fn tool_name(params: Option<&mcp_stdio_core::message::RawValue>) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct P {
        name: String,
    }
    serde_json::from_str::<P>(params?.get())
        .ok()
        .map(|p| p.name)
}

fn cancelled_id(params: Option<&mcp_stdio_core::message::RawValue>) -> Option<Id> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct P {
        request_id: Id,
    }
    serde_json::from_str::<P>(params?.get())
        .ok()
        .map(|p| p.request_id)
}

impl State {
    fn note(&mut self, text: String) {
        if self.notes.len() < MAX_NOTES {
            self.notes.push_back(text);
        }
    }

    fn send_host(&mut self, bytes: Vec<u8>) {
        self.to_host_bytes += bytes.len();
        self.to_host.push_back(bytes);
        self.metrics.host_queue_peak = self.metrics.host_queue_peak.max(self.to_host_bytes as u64);
    }

    fn send_server(&mut self, bytes: Vec<u8>) {
        self.to_server_bytes += bytes.len();
        self.to_server.push_back(bytes);
    }

    fn reply_error(&mut self, id: Option<&Id>, code: i64, message: String) {
        let err = ErrorObject::new(code, message);
        // Small by construction (an id from a bounded scan and a short message),
        // so even a tiny wire limit must not silence the reply.
        if let Ok(bytes) = encode_error(id, &err, self.limits.max_frame.max(1024)) {
            self.send_host(bytes);
        }
    }

    fn remember_cancelled(&mut self, id: Id) {
        if self.cancelled.insert(id.clone()) {
            self.cancelled_order.push_back(id);
            while self.cancelled_order.len() > self.limits.max_cancelled {
                if let Some(old) = self.cancelled_order.pop_front() {
                    self.cancelled.remove(&old);
                }
            }
        }
    }

    fn complete(
        &mut self,
        now: Instant,
        id: Id,
        t: Tracked,
        outcome: CallOutcome,
        response_bytes: Option<u64>,
        error_code: Option<i64>,
    ) {
        let ms = now.saturating_duration_since(t.sent).as_millis();
        self.records.push_back(CallRecord {
            phase: "completed",
            call: t.call,
            id,
            method: t.method,
            tool: t.tool,
            request_bytes: t.request_bytes,
            response_bytes,
            error_code,
            outcome: Some(outcome),
            duration_ms: Some(u64::try_from(ms).unwrap_or(u64::MAX)),
        });
    }

    fn on_host_event(&mut self, now: Instant, ev: FrameEvent<'_>) {
        match ev {
            FrameEvent::Frame(text) => self.on_host_frame(now, text),
            FrameEvent::Error(FrameError::Oversized { limit, id_hint }) => {
                // Never forwarded: the framer discards the rest of the line.
                self.metrics.oversized_requests += 1;
                self.note(format!(
                    "mcp-stdio guard: request over the wire limit ({limit} bytes) refused{}",
                    id_hint
                        .as_ref()
                        .map(|i| format!(" (id {i})"))
                        .unwrap_or_default()
                ));
                if let Some(id) = id_hint {
                    self.reply_error(
                        Some(&id),
                        SERVER_ERROR,
                        format!("request exceeded wire limit ({limit} bytes)"),
                    );
                }
            }
            FrameEvent::Error(FrameError::InvalidUtf8 { .. }) => {
                self.metrics.host_parse_errors += 1;
                self.reply_error(None, PARSE_ERROR, "invalid UTF-8".to_owned());
            }
            FrameEvent::Error(_) => {}
        }
    }

    fn on_host_frame(&mut self, now: Instant, text: &str) {
        match Message::decode(text) {
            Ok(Message::Request(r)) => {
                self.metrics.requests += 1;
                if self.tracked.len() >= self.limits.max_tracked || self.tracked.contains_key(&r.id)
                {
                    self.metrics.untracked_requests += 1;
                } else {
                    let call = self.next_call;
                    self.next_call += 1;
                    let tool = (r.method == "tools/call")
                        .then(|| tool_name(r.params.as_deref()))
                        .flatten();
                    // G12: the record is written before the request is dispatched.
                    self.records.push_back(CallRecord {
                        phase: "dispatched",
                        call,
                        id: r.id.clone(),
                        method: r.method.clone(),
                        tool: tool.clone(),
                        request_bytes: text.len() as u64,
                        response_bytes: None,
                        error_code: None,
                        outcome: None,
                        duration_ms: None,
                    });
                    self.cancelled.remove(&r.id);
                    self.tracked.insert(
                        r.id,
                        Tracked {
                            call,
                            method: r.method,
                            tool,
                            request_bytes: text.len() as u64,
                            sent: now,
                        },
                    );
                }
            }
            Ok(Message::Notification(n)) if n.method == "notifications/cancelled" => {
                self.metrics.cancels += 1;
                if let Some(id) = cancelled_id(n.params.as_deref()) {
                    if let Some(t) = self.tracked.remove(&id) {
                        self.complete(now, id.clone(), t, CallOutcome::Cancelled, None, None);
                    }
                    self.remember_cancelled(id);
                }
            }
            Ok(_) => {}
            Err(_) => self.metrics.host_parse_errors += 1,
        }
        self.send_server(line(text));
    }

    fn on_server_event(&mut self, now: Instant, ev: FrameEvent<'_>) {
        match ev {
            FrameEvent::Frame(text) => self.on_server_frame(now, text),
            FrameEvent::Error(FrameError::Oversized { limit, id_hint }) => {
                self.metrics.oversized_responses += 1;
                let tracked = id_hint.as_ref().and_then(|id| self.tracked.remove(id));
                match (id_hint, tracked) {
                    (Some(id), Some(t)) => {
                        self.note(format!(
                            "mcp-stdio guard: response to {id} over the wire limit ({limit} bytes); the host gets an error instead"
                        ));
                        self.reply_error(
                            Some(&id),
                            SERVER_ERROR,
                            format!("response exceeded wire limit ({limit} bytes)"),
                        );
                        self.complete(now, id, t, CallOutcome::ResponseTooLarge, None, Some(SERVER_ERROR));
                    }
                    (Some(id), None) if self.cancelled.contains(&id) => {
                        self.metrics.dropped_after_cancel += 1;
                    }
                    (hint, _) => self.note(format!(
                        "mcp-stdio guard: server message over the wire limit ({limit} bytes) dropped{}",
                        hint.map(|i| format!(" (id {i})")).unwrap_or_default()
                    )),
                }
            }
            FrameEvent::Error(FrameError::InvalidUtf8 { len, .. }) => {
                self.metrics.non_protocol_lines += 1;
                self.note(format!(
                    "mcp-stdio guard: server stdout line of {len} bytes is not UTF-8; dropped"
                ));
            }
            FrameEvent::Error(_) => {}
        }
    }

    fn on_server_frame(&mut self, now: Instant, text: &str) {
        self.metrics.largest_server_frame =
            self.metrics.largest_server_frame.max(text.len() as u64);
        match Message::decode(text) {
            Ok(Message::Response(r)) => {
                if self.cancelled.contains(&r.id) && !self.tracked.contains_key(&r.id) {
                    // The spec forbids it; the guard enforces it.
                    self.metrics.dropped_after_cancel += 1;
                    return;
                }
                self.metrics.responses += 1;
                if let Some(t) = self.tracked.remove(&r.id) {
                    let (outcome, code) = match &r.result {
                        Ok(_) => (CallOutcome::Result, None),
                        Err(e) => (CallOutcome::Error, Some(e.code)),
                    };
                    self.complete(now, r.id, t, outcome, Some(text.len() as u64), code);
                }
                self.send_host(line(text));
            }
            Ok(_) => self.send_host(line(text)),
            Err(_) => {
                // An accidental log line: move it to stderr instead of
                // breaking the host's parser.
                self.metrics.non_protocol_lines += 1;
                if self.noise_shown < self.limits.noise_budget {
                    let cut = text
                        .char_indices()
                        .nth(MAX_NOTE_LINE)
                        .map_or(text, |(i, _)| &text[..i]);
                    self.noise_shown += cut.len() as u64;
                    self.note(format!("[server stdout, not protocol] {cut}"));
                } else {
                    self.metrics.non_protocol_bytes_dropped += text.len() as u64;
                }
                // Keep a near-miss response visible to the host as an error
                // rather than a silent hang.
                let scan = &text.as_bytes()[..text.len().min(256)];
                if let Some(id) = recover_id(scan) {
                    if let Some(t) = self.tracked.remove(&id) {
                        self.reply_error(
                            Some(&id),
                            SERVER_ERROR,
                            "malformed response from server".to_owned(),
                        );
                        self.complete(
                            now,
                            id,
                            t,
                            CallOutcome::Error,
                            Some(text.len() as u64),
                            Some(SERVER_ERROR),
                        );
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain_host(p: &mut Proxy) -> Vec<String> {
        let mut v = Vec::new();
        while let Some(b) = p.poll_to_host() {
            v.push(String::from_utf8(b).unwrap());
        }
        v
    }

    fn drain_server(p: &mut Proxy) -> Vec<String> {
        let mut v = Vec::new();
        while let Some(b) = p.poll_to_server() {
            v.push(String::from_utf8(b).unwrap());
        }
        v
    }

    #[test]
    fn transparent_for_a_well_behaved_session() {
        let t = Instant::now();
        let mut p = Proxy::new(ProxyLimits::default());
        let req = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\"}}\n";
        p.handle_host(t, req.as_bytes());
        assert_eq!(drain_server(&mut p), [req]);
        let resp = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[]}}\n";
        p.handle_server(t, resp.as_bytes());
        assert_eq!(drain_host(&mut p), [resp]);
        let a = p.poll_record().unwrap();
        let b = p.poll_record().unwrap();
        assert_eq!((a.phase, b.phase), ("dispatched", "completed"));
        assert_eq!(b.tool.as_deref(), Some("echo"));
        assert_eq!(b.outcome, Some(CallOutcome::Result));
    }

    #[test]
    fn g6_nothing_for_a_cancelled_id_reaches_the_host() {
        let t = Instant::now();
        let mut p = Proxy::new(ProxyLimits::default());
        p.handle_host(t, b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"slow\"}\n");
        p.handle_host(
            t,
            b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":7}}\n",
        );
        assert_eq!(drain_server(&mut p).len(), 2);
        p.handle_server(t, b"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n");
        assert!(drain_host(&mut p).is_empty());
        assert_eq!(p.metrics().dropped_after_cancel, 1);
    }

    #[test]
    fn g3_oversized_response_becomes_an_error_for_its_id() {
        let t = Instant::now();
        let mut p = Proxy::new(ProxyLimits {
            max_frame: 1024,
            ..ProxyLimits::default()
        });
        p.handle_host(t, b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"big\"}\n");
        let mut big = b"{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":\"".to_vec();
        big.extend(std::iter::repeat_n(b'x', 5000));
        big.extend_from_slice(b"\"}\n{\"jsonrpc\":\"2.0\",\"method\":\"after\"}\n");
        p.handle_server(t, &big);
        let host = drain_host(&mut p);
        assert_eq!(host.len(), 2, "{host:?}");
        assert!(
            host[0].contains("\"id\":3") && host[0].contains("exceeded wire limit (1024 bytes)")
        );
        assert!(host[1].contains("after"));
    }

    #[test]
    fn g2_oversized_request_never_reaches_the_server() {
        let t = Instant::now();
        let mut p = Proxy::new(ProxyLimits {
            max_frame: 100,
            ..ProxyLimits::default()
        });
        let mut req = b"{\"jsonrpc\":\"2.0\",\"id\":\"r\",\"method\":\"m\",\"params\":\"".to_vec();
        req.extend(std::iter::repeat_n(b'y', 500));
        req.extend_from_slice(b"\"}\n");
        p.handle_host(t, &req);
        assert!(drain_server(&mut p).is_empty());
        let host = drain_host(&mut p);
        assert!(
            host[0].contains("\"id\":\"r\"") && host[0].contains("request exceeded wire limit")
        );
    }

    #[test]
    fn g13_non_protocol_stdout_moves_to_stderr() {
        let t = Instant::now();
        let mut p = Proxy::new(ProxyLimits::default());
        p.handle_server(
            t,
            b"Server listening on stdio\n{\"jsonrpc\":\"2.0\",\"method\":\"n\"}\n",
        );
        assert_eq!(drain_host(&mut p).len(), 1);
        assert_eq!(
            p.poll_note().unwrap(),
            "[server stdout, not protocol] Server listening on stdio"
        );
        assert_eq!(p.metrics().non_protocol_lines, 1);
    }

    #[test]
    fn open_requests_end_unknown() {
        let t = Instant::now();
        let mut p = Proxy::new(ProxyLimits::default());
        p.handle_host(t, b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\"}\n");
        p.finish(t);
        let _ = p.poll_record();
        assert_eq!(p.poll_record().unwrap().outcome, Some(CallOutcome::Unknown));
    }
}
