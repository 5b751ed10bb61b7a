//! W3C trace context for the guard's spans (`guard --otel`, issue 36):
//! a host request's `params._meta.traceparent` read and checked, the
//! guard's own trace and span ids made by a seeded generator (the core
//! takes no randomness: the adapter gives the seed), and the `traceparent`
//! the guard puts into the request it forwards, so a server that traces
//! itself joins the trace.
//!
//! <https://www.w3.org/TR/trace-context/#traceparent-header>: `version`
//! `-` `trace-id` (32 lowercase hex, not all zero) `-` `parent-id` (16
//! lowercase hex, not all zero) `-` `trace-flags` (2 hex). Version `ff` is
//! invalid; a later version is read by its first four fields.

/// One span's place in a trace: its trace, its own id, its flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceContext {
    /// The trace's id (never all zero).
    pub trace_id: [u8; 16],
    /// The span's id (never all zero).
    pub span_id: [u8; 8],
    /// The trace flags (`01`: sampled).
    pub flags: u8,
}

impl TraceContext {
    /// A `traceparent` value, or `None` when it is not a valid one.
    pub fn parse(value: &str) -> Option<Self> {
        let v = value.trim_matches(|c| c == ' ' || c == '\t');
        let b = v.as_bytes();
        // version(2) - trace(32) - span(16) - flags(2) = 55 bytes.
        if b.len() < 55 || b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
            return None;
        }
        let version = hex_byte(&b[0..2])?;
        if version == 0xff || (version == 0 && b.len() != 55) {
            return None;
        }
        // A later version may add fields, after a `-`.
        if b.len() > 55 && b[55] != b'-' {
            return None;
        }
        let mut trace_id = [0u8; 16];
        for (i, out) in trace_id.iter_mut().enumerate() {
            *out = hex_byte(&b[3 + 2 * i..5 + 2 * i])?;
        }
        let mut span_id = [0u8; 8];
        for (i, out) in span_id.iter_mut().enumerate() {
            *out = hex_byte(&b[36 + 2 * i..38 + 2 * i])?;
        }
        let flags = hex_byte(&b[53..55])?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(Self {
            trace_id,
            span_id,
            flags,
        })
    }

    /// The `traceparent` value (version `00`).
    pub fn to_traceparent(&self) -> String {
        let mut s = String::with_capacity(55);
        s.push_str("00-");
        push_hex(&mut s, &self.trace_id);
        s.push('-');
        push_hex(&mut s, &self.span_id);
        s.push('-');
        push_hex(&mut s, &[self.flags]);
        s
    }

    /// Whether the trace is sampled (flag `01`).
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }
}

/// The guard's ids: splitmix64 from the adapter's seed. Not a secret and
/// not a security boundary: only unique enough for a trace.
#[derive(Debug, Clone)]
pub(crate) struct IdSource {
    state: u64,
}

impl IdSource {
    pub(crate) fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A span id, never all zero.
    pub(crate) fn span_id(&mut self) -> [u8; 8] {
        loop {
            let id = self.next().to_be_bytes();
            if id != [0; 8] {
                return id;
            }
        }
    }

    /// A trace id, never all zero.
    pub(crate) fn trace_id(&mut self) -> [u8; 16] {
        loop {
            let mut id = [0u8; 16];
            id[..8].copy_from_slice(&self.next().to_be_bytes());
            id[8..].copy_from_slice(&self.next().to_be_bytes());
            if id != [0; 16] {
                return id;
            }
        }
    }

    /// The context of a new span: a child of `parent` (its trace, its
    /// flags), or the root of a new sampled trace.
    pub(crate) fn child_of(&mut self, parent: Option<&TraceContext>) -> TraceContext {
        TraceContext {
            trace_id: parent.map_or_else(|| self.trace_id(), |p| p.trace_id),
            span_id: self.span_id(),
            flags: parent.map_or(1, |p| p.flags),
        }
    }
}

fn hex_byte(two: &[u8]) -> Option<u8> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    Some(digit(two[0])? << 4 | digit(two[1])?)
}

fn push_hex(s: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 15)]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_reads_and_writes_back_the_same() {
        let t = TraceContext::parse(VALID).expect("valid");
        assert_eq!(t.trace_id[0], 0x4b);
        assert_eq!(t.span_id[7], 0xb7);
        assert!(t.sampled());
        assert_eq!(t.to_traceparent(), VALID);
        // A later version with more fields is read by its first four.
        let later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-what-comes";
        let t = TraceContext::parse(later).expect("a later version");
        assert!(!t.sampled());
    }

    #[test]
    fn an_invalid_traceparent_is_none() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn ids_are_never_zero_and_a_child_keeps_its_parents_trace() {
        let mut ids = IdSource::new(0);
        let parent = TraceContext::parse(VALID).expect("valid");
        let child = ids.child_of(Some(&parent));
        assert_eq!(child.trace_id, parent.trace_id);
        assert_ne!(child.span_id, parent.span_id);
        assert_eq!(child.flags, parent.flags);
        let root = ids.child_of(None);
        assert_ne!(root.trace_id, [0; 16]);
        assert!(root.sampled());
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1000 {
            assert!(seen.insert(ids.span_id()), "a span id twice");
        }
        assert_eq!(
            TraceContext::parse(&root.to_traceparent()),
            Some(root),
            "what we write, we read"
        );
    }
}

/// Spans waiting to be given out ([`GuardOutput::Span`](super::GuardOutput));
/// past it the newest are dropped and counted.
pub const MAX_SPANS_WAITING: usize = 1024;

/// `mcp.method.name` of a request refused unread (over the wire limit).
pub const UNREAD_METHOD: &str = "unknown";

/// Calls whose span is open, at most (the proxy's `max_tracked` bounds them
/// first).
const MAX_OPEN_SPANS: usize = 4096;

/// What a span needs from its request, kept until its call's record ends.
#[derive(Debug, Clone)]
pub(crate) struct SpanStart {
    pub(crate) context: TraceContext,
    pub(crate) parent: Option<TraceContext>,
    pub(crate) method: String,
    pub(crate) tool: Option<String>,
    /// `gen_ai.prompt.name` (`prompts/get`) or `mcp.resource.uri`
    /// (`resources/*`): what the request names besides a tool.
    pub(crate) target: Option<SpanTarget>,
    pub(crate) request_id: String,
    pub(crate) protocol_version: Option<String>,
    pub(crate) request_bytes: u64,
}

/// What a request names besides a tool, for the span's attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpanTarget {
    /// `gen_ai.prompt.name`, of `prompts/get` (also in the span's name).
    Prompt(String),
    /// `mcp.resource.uri`, of `resources/read`, `resources/subscribe`,
    /// `resources/unsubscribe`.
    Resource(String),
}

/// A prompt's name or a resource's URI longer than this is cut (on a
/// character boundary) before it becomes an attribute.
pub const MAX_SPAN_TARGET_BYTES: usize = 512;

/// What the answer told, kept with the open span until its record ends.
#[derive(Debug, Clone, Copy, Default)]
struct Answer {
    code: Option<i64>,
    bytes: u64,
    repaired: bool,
    tool_error: bool,
}

/// One request's span, by the MCP semantic conventions (the guard is the
/// server's client): given when its call's record ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallSpan {
    /// `{mcp.method.name} {target}`: `tools/call get_weather`, or the method.
    pub name: String,
    /// The span's own context (its trace: the host's when it sent one).
    pub context: TraceContext,
    /// The host's span, when its request carried a `traceparent`.
    pub parent: Option<TraceContext>,
    /// When the request arrived, ms since the Unix epoch.
    pub start_unix_ms: u64,
    /// When its call ended.
    pub end_unix_ms: u64,
    /// `mcp.method.name`.
    pub method: String,
    /// `gen_ai.tool.name`, for `tools/call`.
    pub tool: Option<String>,
    /// `gen_ai.prompt.name` or `mcp.resource.uri`.
    pub target: Option<SpanTarget>,
    /// `jsonrpc.request.id`, as JSON text (a string id keeps its quotes).
    pub request_id: String,
    /// `mcp.protocol.version`.
    pub protocol_version: Option<String>,
    /// `error.type`, when the call did not succeed: the JSON-RPC error code
    /// as text (`-32602`: the server's error answer, or the guard's when it
    /// answered for the server), `tool_error` (a `tools/call` result with
    /// `isError: true`), `cancelled`, `server_lost` (the server died or the
    /// session ended with the call open), `not_sent`, `wire_limit` (the
    /// request was over the wire limit and never read).
    pub error_type: Option<String>,
    /// `rpc.response.status_code`: the error answer's code, the server's or
    /// the guard's.
    pub status_code: Option<i64>,
    /// The request's bytes (`mcp_stdio.request.bytes`).
    pub request_bytes: u64,
    /// The answer's bytes, when the server answered
    /// (`mcp_stdio.response.bytes`).
    pub response_bytes: u64,
    /// Whether the answer's invalid UTF-8 was repaired
    /// (`mcp_stdio.utf8_repaired`).
    pub utf8_repaired: bool,
}

/// The proxy's spans: ids, open spans by call id, spans to give out.
#[derive(Debug)]
pub(crate) struct Spans {
    pub(crate) ids: IdSource,
    open: std::collections::HashMap<String, (SpanStart, u64, Answer)>,
    ready: std::collections::VecDeque<CallSpan>,
    dropped: u64,
}

impl Spans {
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            ids: IdSource::new(seed),
            open: std::collections::HashMap::new(),
            ready: std::collections::VecDeque::new(),
            dropped: 0,
        }
    }

    /// A call began (its id in the records, its start).
    pub(crate) fn open(&mut self, call_id: &str, start: SpanStart, unix_ms: u64) {
        if self.open.len() < MAX_OPEN_SPANS {
            self.open
                .insert(call_id.to_owned(), (start, unix_ms, Answer::default()));
        } else {
            self.dropped += 1;
        }
    }

    /// The call `call_id` was answered: the error code (the server's, or the
    /// guard's when it answered for it), the answer's size, whether its
    /// UTF-8 was repaired, whether it is a tool result with `isError`.
    pub(crate) fn answered(
        &mut self,
        call_id: &str,
        code: Option<i64>,
        bytes: u64,
        repaired: bool,
        tool_error: bool,
    ) {
        if let Some((_, _, answer)) = self.open.get_mut(call_id) {
            *answer = Answer {
                code,
                bytes,
                repaired,
                tool_error,
            };
        }
    }

    /// Whether the open call `call_id` is a `tools/call` (its result's
    /// `isError` is worth a look).
    pub(crate) fn is_tool_call(&self, call_id: &str) -> bool {
        self.open
            .get(call_id)
            .is_some_and(|(start, _, _)| start.tool.is_some())
    }

    /// A request over the wire limit, never read: the guard answered it
    /// (its id found) with the wire-limit error. Its method is not known.
    pub(crate) fn refused_unread(&mut self, request_id: String, code: i64, unix_ms: u64) {
        let context = self.ids.child_of(None);
        self.push(CallSpan {
            name: UNREAD_METHOD.to_owned(),
            context,
            parent: None,
            start_unix_ms: unix_ms,
            end_unix_ms: unix_ms,
            method: UNREAD_METHOD.to_owned(),
            tool: None,
            target: None,
            request_id,
            protocol_version: None,
            error_type: Some("wire_limit".to_owned()),
            status_code: Some(code),
            request_bytes: 0,
            response_bytes: 0,
            utf8_repaired: false,
        });
    }

    fn push(&mut self, span: CallSpan) {
        if self.ready.len() >= MAX_SPANS_WAITING {
            self.dropped += 1;
        } else {
            self.ready.push_back(span);
        }
    }

    /// A call's record was given: when it ended, its span is ready. The
    /// protocol revision is the request's, else the session's now (the
    /// handshake's own span gets the revision it agreed).
    pub(crate) fn on_record(
        &mut self,
        record: &crate::records::call::CallRecord,
        protocol_version: Option<&str>,
    ) {
        use crate::records::call::{CallOutcome, CallState};
        if !record.state().is_terminal() {
            return;
        }
        let Some((start, start_ms, answer)) = self.open.remove(record.call_id()) else {
            return;
        };
        let end_ms = record.events().last().map_or(start_ms, |e| e.unix_ms);
        // A pin's refusal is answered by the guard with its own code.
        let code = answer.code.or_else(|| {
            (record.state() == CallState::Denied).then_some(crate::guard::pin::TOOL_NOT_ACCEPTED)
        });
        let error_type = match (record.state(), record.outcome()) {
            (CallState::Completed, Some(CallOutcome::Succeeded)) if answer.tool_error => {
                Some("tool_error".to_owned())
            }
            (CallState::Completed, Some(CallOutcome::Succeeded)) => None,
            (CallState::Completed | CallState::Denied, _) => {
                Some(code.map_or_else(|| "refused".to_owned(), |c| c.to_string()))
            }
            (CallState::Cancelled | CallState::CancelledAfterDispatch, _) => {
                Some("cancelled".to_owned())
            }
            (CallState::FailedBeforeDispatch, _) => Some("not_sent".to_owned()),
            _ => Some("server_lost".to_owned()),
        };
        let name = match (&start.tool, &start.target) {
            (Some(tool), _) => format!("{} {tool}", start.method),
            (None, Some(SpanTarget::Prompt(prompt))) => format!("{} {prompt}", start.method),
            _ => start.method.clone(),
        };
        self.push(CallSpan {
            name,
            context: start.context,
            parent: start.parent,
            start_unix_ms: start_ms,
            end_unix_ms: end_ms.max(start_ms),
            method: start.method,
            tool: start.tool,
            target: start.target,
            request_id: start.request_id,
            protocol_version: start
                .protocol_version
                .or_else(|| protocol_version.map(str::to_owned)),
            error_type,
            status_code: code,
            request_bytes: start.request_bytes,
            response_bytes: answer.bytes,
            utf8_repaired: answer.repaired,
        });
    }

    pub(crate) fn poll(&mut self) -> Option<CallSpan> {
        self.ready.pop_front()
    }

    /// Spans dropped: past [`MAX_SPANS_WAITING`], or too many open.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }
}
