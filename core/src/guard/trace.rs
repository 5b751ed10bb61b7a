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
    pub(crate) request_id: String,
    pub(crate) protocol_version: Option<String>,
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
    /// `jsonrpc.request.id`, as JSON text.
    pub request_id: String,
    /// `mcp.protocol.version`.
    pub protocol_version: Option<String>,
    /// `error.type`, when the call did not succeed: `jsonrpc_error` (the
    /// server's error answer), `refused` (the guard answered for it: the
    /// wire limit, a pin), `cancelled`, `server_lost` (the server died or
    /// the session ended with it open), `not_sent`.
    pub error_type: Option<&'static str>,
}

/// The proxy's spans: ids, open spans by call id, spans to give out.
#[derive(Debug)]
pub(crate) struct Spans {
    pub(crate) ids: IdSource,
    open: std::collections::HashMap<String, (SpanStart, u64)>,
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
            self.open.insert(call_id.to_owned(), (start, unix_ms));
        } else {
            self.dropped += 1;
        }
    }

    /// A call's record was given: when it ended, its span is ready.
    pub(crate) fn on_record(&mut self, record: &crate::records::call::CallRecord) {
        use crate::records::call::{CallOutcome, CallState};
        if !record.state().is_terminal() {
            return;
        }
        let Some((start, start_ms)) = self.open.remove(record.call_id()) else {
            return;
        };
        let end_ms = record.events().last().map_or(start_ms, |e| e.unix_ms);
        let error_type = match (record.state(), record.outcome()) {
            (CallState::Completed, Some(CallOutcome::Succeeded)) => None,
            (CallState::Completed, Some(CallOutcome::RemoteFailure)) => Some("jsonrpc_error"),
            (CallState::Completed, _) | (CallState::Denied, _) => Some("refused"),
            (CallState::Cancelled | CallState::CancelledAfterDispatch, _) => Some("cancelled"),
            (CallState::FailedBeforeDispatch, _) => Some("not_sent"),
            _ => Some("server_lost"),
        };
        let name = match &start.tool {
            Some(tool) => format!("{} {tool}", start.method),
            None => start.method.clone(),
        };
        if self.ready.len() >= MAX_SPANS_WAITING {
            self.dropped += 1;
            return;
        }
        self.ready.push_back(CallSpan {
            name,
            context: start.context,
            parent: start.parent,
            start_unix_ms: start_ms,
            end_unix_ms: end_ms.max(start_ms),
            method: start.method,
            tool: start.tool,
            request_id: start.request_id,
            protocol_version: start.protocol_version,
            error_type,
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
