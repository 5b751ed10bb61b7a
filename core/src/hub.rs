//! One server, many host sessions: the hub's machine (`guard --share`, the
//! design's F2: sessions never see each other). Sans-IO: it takes each
//! session's lines, the server's lines and their ends, and gives bytes for
//! the server, bytes for each session and events for the adapter.
//!
//! - **Ids.** Every request of a session goes to the server under a
//!   hub-unique id ([`HUB_ID_PREFIX`]) and its answer comes back under the
//!   session's own; a progress token likewise ([`HUB_TOKEN_PREFIX`]). A
//!   session's cancel reaches only its own request; an answer after a
//!   cancel is dropped (G6).
//! - **The handshake.** The first `initialize` goes to the server; a later
//!   session is answered from the hub when the server can serve it as it
//!   serves the first: the same protocol revision asked, and client
//!   capabilities at least those the server was initialized with (a session
//!   without `sampling` must not meet a server that believes its client
//!   samples). One that cannot gets [`HubEvent::PrivateServer`]: its guard
//!   serves it with a server of its own. Later `notifications/initialized`
//!   are the hub's.
//! - **Server notifications.** `list_changed` to every session;
//!   `resources/updated` to the sessions subscribed to its URI (the server
//!   sees `subscribe` once and `unsubscribe` when the last goes); log
//!   messages to each session at its own level (the server gets the most
//!   verbose asked); progress to the session whose token it is.
//! - **Server requests.** `ping` is answered by the hub. Another (at
//!   2025-11-25: `sampling/createMessage`, `elicitation/create`,
//!   `roots/list`) goes to the one session with a request in flight; when
//!   that is not exactly one, the server gets an error that says why
//!   (counted, noted). At 2026-07-28 they ride inside results and route by
//!   the request.
//! - **A session that leaves** ends only itself: its requests are
//!   cancelled on the server, its subscriptions released.
//! - **Sleep** ([`Hub::idle_stop`], `--idle-stop` with `--share`): after
//!   the set time with no request in flight, no subscription, no server
//!   request open and nothing for the server, the hub asks for the server
//!   to be stopped ([`HubEvent::StopServer`]); the sessions stay. The next
//!   bytes for it ask for a new one ([`HubEvent::StartServer`]), and the
//!   first session's handshake (its `initialize`, `notifications/initialized`
//!   and the log level) is replayed to it before them, the answers the
//!   hub's own.
//!
//! Every table is bounded ([`MAX_HUB_SESSIONS`], [`MAX_HUB_IN_FLIGHT`],
//! [`MAX_HUB_SUBSCRIPTIONS`]); a session whose bytes wait past
//! [`MAX_SESSION_QUEUE`] (its host stopped reading) is closed, the others go
//! on (G1 per session).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;

use crate::records::call::{CallConfig, CallIdentity, CallLifecycle, CallOutcome, CallRecord};
use crate::time::Stamp;
use crate::wire::message::{
    encode_error, encode_notification, encode_request, encode_result, Decoded, ErrorObject, Id,
    Message, INTERNAL_ERROR,
};

/// The prefix of the ids the hub gives the server.
pub const HUB_ID_PREFIX: &str = "mcp-stdio-hub/";
/// The prefix of the progress tokens the hub gives the server.
pub const HUB_TOKEN_PREFIX: &str = "mcp-stdio-hub/progress/";
/// Host sessions one hub serves at once; past it a session is refused.
pub const MAX_HUB_SESSIONS: usize = 64;
/// Requests of all sessions waiting for the server; past it a request is
/// answered with an error at once.
pub const MAX_HUB_IN_FLIGHT: usize = 4096;
/// Resources subscribed to (each counted once however many sessions hold
/// it); past it a subscribe is answered with an error.
pub const MAX_HUB_SUBSCRIPTIONS: usize = 1024;
/// Bytes waiting for one session; past it the session is closed (its host
/// stopped reading), the others go on. One message always fits an empty
/// queue, so the worst case is this plus one message (the wire limit).
pub const MAX_SESSION_QUEUE: usize = 8 * 1024 * 1024;
/// Call records waiting for the adapter ([`Hub::poll_record`]); past it
/// they are dropped and counted (`records_dropped`).
pub const MAX_HUB_RECORDS: usize = 1024;
/// Answers dropped after a cancel remembered, at most.
const MAX_CANCELLED: usize = 4096;
/// The params of a cancel or a log level the hub rewrites, at most.
const MAX_SMALL_PARAMS: usize = 4096;

/// One host session of the hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(pub u32);

/// What the adapter must do besides moving bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HubEvent {
    /// The server cannot serve this session as it serves the first (its
    /// `initialize` line is given back): its guard serves it with a private
    /// server. The session is gone from the hub.
    PrivateServer {
        /// The session.
        session: SessionId,
        /// Its `initialize` line, for its private server.
        initialize: String,
        /// Why the shared server cannot serve it.
        reason: String,
    },
    /// Close this session (after the bytes already given for it): its host
    /// stopped reading, or the server is gone.
    Close {
        /// The session.
        session: SessionId,
        /// Why.
        reason: String,
    },
    /// One line for the hub's log.
    Note(String),
    /// Stop the server (it sat idle for the set time): close its stdin,
    /// then the shutdown ladder; its end is a sleep
    /// ([`Hub::handle_server_slept`]), the sessions stay.
    StopServer,
    /// Start the server again: bytes wait for it, the replayed handshake
    /// first.
    StartServer,
}

/// Why a session was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HubRefusal {
    /// [`MAX_HUB_SESSIONS`] are attached.
    #[error("the hub serves {MAX_HUB_SESSIONS} sessions at most")]
    Full,
    /// The server ended; the hub takes no one now.
    #[error("the hub's server is gone")]
    ServerGone,
}

/// The hub's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct HubMetrics {
    /// Sessions attached so far.
    pub sessions_opened: u64,
    /// Sessions gone so far.
    pub sessions_closed: u64,
    /// Requests the sessions sent.
    pub requests: u64,
    /// `initialize` answered by the hub (the server's first answer).
    pub handshakes_shared: u64,
    /// Sessions sent to a private server.
    pub private_servers: u64,
    /// Cancels the sessions sent for their requests.
    pub cancels: u64,
    /// Answers dropped: their request was cancelled or its session gone.
    pub dropped_answers: u64,
    /// Server requests answered with an error: no single session to ask.
    pub server_requests_refused: u64,
    /// Requests answered with an error at once: [`MAX_HUB_IN_FLIGHT`].
    pub requests_refused: u64,
    /// Sessions closed because their bytes waited past [`MAX_SESSION_QUEUE`].
    pub sessions_overrun: u64,
    /// Times the server was stopped for idleness.
    pub idle_stops: u64,
    /// Times a sleeping server was started again.
    pub resumes: u64,
    /// Call records dropped: [`MAX_HUB_RECORDS`] waited.
    pub records_dropped: u64,
    /// What the tool policies did, the sessions together, when some are
    /// set ([`Hub::tool_policy`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<crate::guard::policy::PolicyMetrics>,
}

/// A request of a session, at the server under a hub id.
#[derive(Debug)]
struct Pending {
    session: SessionId,
    id: Id,
    method: String,
    /// The session's progress token and the hub's (for the server).
    token: Option<(Id, Id)>,
    /// The URI of a `resources/subscribe` (counted now, uncounted on error).
    subscribe: Option<String>,
    /// Its record, when the hub keeps them ([`Hub::record_calls`]).
    call: Option<CallLifecycle>,
}

#[derive(Debug, Default)]
struct Session {
    queue: VecDeque<Vec<u8>>,
    queued: usize,
    /// Its `initialize` was answered (or it never needs one: 2026-07-28).
    ready: bool,
    /// Its own requests at the server: its id → the hub's.
    requests: HashMap<Id, Id>,
    subscriptions: BTreeSet<String>,
    /// Its `logging/setLevel`, as a rank ([`level_rank`]).
    level: Option<u8>,
    /// Server requests given to it (the server's ids).
    asked: BTreeSet<Id>,
    /// Its own copy of the tool policies ([`Hub::tool_policy`]): each
    /// session is limited as if it had the server alone.
    policy: Option<crate::guard::policy::ToolPolicy>,
}

/// The server's answer to the first `initialize`.
#[derive(Debug)]
struct Handshake {
    /// The revision the first session asked for.
    asked: String,
    /// The first session's client capabilities (their names).
    capabilities: BTreeSet<String>,
    result: Box<RawValue>,
    /// The first session's `initialize` params, replayed to a server
    /// started again after a sleep.
    params: Option<Box<RawValue>>,
}

/// The first `initialize`, at the server; later ones wait for its answer.
#[derive(Debug)]
struct HandshakeWaiting {
    hub_id: Id,
    asked: String,
    capabilities: BTreeSet<String>,
    params: Option<Box<RawValue>>,
    /// Later sessions' `initialize` lines, waiting.
    waiting: Vec<(SessionId, String)>,
}

/// The hub: one server, many host sessions.
#[derive(Debug)]
pub struct Hub {
    max_frame: usize,
    sessions: BTreeMap<SessionId, Session>,
    next_session: u32,
    pending: HashMap<Id, Pending>,
    /// Hub ids of the hub's own requests (their answers are the hub's).
    own: BTreeSet<Id>,
    tokens: HashMap<Id, (SessionId, Id)>,
    /// Hub ids cancelled or orphaned: their answers are dropped.
    cancelled: VecDeque<Id>,
    next_id: u64,
    /// Sessions per subscribed URI.
    subscribed: BTreeMap<String, u32>,
    /// The level the server was last given.
    server_level: Option<u8>,
    handshake: Option<Handshake>,
    handshake_waiting: Option<HandshakeWaiting>,
    /// The session whose `initialize` the server answered.
    initialized_by: Option<SessionId>,
    /// The server got `notifications/initialized`.
    initialized_sent: bool,
    /// A server request given to a session: the server's id → the session.
    asked: HashMap<Id, SessionId>,
    to_server: VecDeque<Vec<u8>>,
    server_queued: usize,
    events: VecDeque<HubEvent>,
    server_gone: bool,
    /// How long the server may sit idle (`None`: never stopped).
    idle_after: Option<Duration>,
    /// The last time a byte moved either way.
    busy_at: Option<Instant>,
    /// Where the server is in its sleep.
    sleep: Sleep,
    /// The time of the last input ([`Hub::busy`]), for the records.
    now: Option<Stamp>,
    /// Calls are followed: the prefix of their session ids, the target.
    recording: Option<(String, String)>,
    /// Their records are given out ([`Hub::record_calls`]).
    keep_records: bool,
    /// A span per call ([`Hub::trace_calls`]).
    spans: Option<crate::guard::trace::Spans>,
    call_config: CallConfig,
    calls: u64,
    records: VecDeque<CallRecord>,
    metrics: HubMetrics,
    /// The tool policies each new session gets a copy of.
    policy: Option<crate::guard::policy::ToolPolicy>,
    /// What the policies of the sessions gone did.
    policy_gone: crate::guard::policy::PolicyMetrics,
}

/// The server's sleep ([`Hub::idle_stop`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sleep {
    Awake,
    /// Asked to stop for idleness; not yet ended.
    Stopping,
    /// Stopped; the next bytes for it wake it.
    Asleep,
}

/// The MCP log levels, least to most severe.
const LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

fn level_rank(level: &str) -> Option<u8> {
    LEVELS
        .iter()
        .position(|l| *l == level)
        .and_then(|i| u8::try_from(i).ok())
}

/// The `initialize` params the hub compares: the revision asked and the
/// names of the client's capabilities.
fn initialize_params(params: Option<&RawValue>) -> (String, BTreeSet<String>) {
    #[derive(serde::Deserialize)]
    struct P {
        #[serde(rename = "protocolVersion", default)]
        protocol_version: String,
        #[serde(default)]
        capabilities: BTreeMap<String, serde::de::IgnoredAny>,
    }
    params
        .and_then(|p| serde_json::from_str::<P>(p.get()).ok())
        .map(|p| {
            (
                p.protocol_version,
                p.capabilities.into_keys().collect::<BTreeSet<_>>(),
            )
        })
        .unwrap_or_default()
}

/// One string field of small params (`uri`, `level`).
fn field(params: Option<&RawValue>, key: &str) -> Option<String> {
    let text = params?.get();
    let v = crate::wire::object::member(text, key)?;
    serde_json::from_str::<String>(v.get()).ok()
}

/// `_meta.progressToken`, when there is one.
fn progress_token(params: Option<&RawValue>) -> Option<Id> {
    let text = params?.get();
    // A substring test first: most requests have no token.
    memchr::memmem::find(text.as_bytes(), b"\"progressToken\"")?;
    let meta = crate::wire::object::member(text, "_meta")?;
    let token = crate::wire::object::member(meta.get(), "progressToken")?;
    serde_json::from_str::<Id>(token.get()).ok()
}

/// Small params with `key` set to `value` (a JSON text).
fn with_field(
    params: Option<&RawValue>,
    key: &str,
    value: serde_json::Value,
) -> Option<Box<RawValue>> {
    let text = params.map_or("{}", RawValue::get);
    if text.len() > MAX_SMALL_PARAMS {
        return None;
    }
    let mut v: serde_json::Map<String, serde_json::Value> = serde_json::from_str(text).ok()?;
    v.insert(key.to_owned(), value);
    serde_json::value::to_raw_value(&v).ok()
}

fn id_value(id: &Id) -> serde_json::Value {
    match id {
        Id::Number(n) => serde_json::Value::from(*n),
        Id::String(s) => serde_json::Value::from(s.as_str()),
    }
}

fn is_list_changed(method: &str) -> bool {
    method.starts_with("notifications/") && method.ends_with("/list_changed")
}

impl Hub {
    /// A hub whose lines are at most `max_frame` bytes.
    pub fn new(max_frame: usize) -> Self {
        Self {
            max_frame: max_frame.max(1024),
            sessions: BTreeMap::new(),
            next_session: 0,
            pending: HashMap::new(),
            own: BTreeSet::new(),
            tokens: HashMap::new(),
            cancelled: VecDeque::new(),
            next_id: 0,
            subscribed: BTreeMap::new(),
            server_level: None,
            handshake: None,
            handshake_waiting: None,
            initialized_by: None,
            initialized_sent: false,
            asked: HashMap::new(),
            to_server: VecDeque::new(),
            server_queued: 0,
            events: VecDeque::new(),
            server_gone: false,
            idle_after: None,
            busy_at: None,
            sleep: Sleep::Awake,
            now: None,
            recording: None,
            keep_records: false,
            spans: None,
            call_config: CallConfig::default(),
            calls: 0,
            records: VecDeque::new(),
            metrics: HubMetrics::default(),
            policy: None,
            policy_gone: crate::guard::policy::PolicyMetrics::default(),
        }
    }

    /// Keeps a call record of every request the server is given (the
    /// audit log of `--audit` with `--share`): each names its host session
    /// as `{prefix}/{session}` and `target` as its target. Taken with
    /// [`poll_record`](Self::poll_record) once the call has ended.
    pub fn record_calls(&mut self, prefix: &str, target: &str) -> &mut Self {
        self.recording = Some((prefix.to_owned(), target.to_owned()));
        self.keep_records = true;
        self
    }

    /// Makes a span per request the server is given (`--otel` with
    /// `--share`), by the MCP conventions as a guard's: a child of the
    /// session's `traceparent`, whose own `traceparent` the request carries
    /// to the server. Taken with [`poll_span`](Self::poll_span) once the
    /// call has ended. `seed` seeds the span ids.
    pub fn trace_calls(&mut self, seed: u64) -> &mut Self {
        self.spans = Some(crate::guard::trace::Spans::new(seed));
        if self.recording.is_none() {
            self.recording = Some(("hub".to_owned(), "server".to_owned()));
        }
        self
    }

    /// The next span of an ended call.
    pub fn poll_span(&mut self) -> Option<crate::guard::trace::CallSpan> {
        self.spans.as_mut()?.poll()
    }

    /// Spans dropped (too many open or waiting).
    pub fn spans_dropped(&self) -> u64 {
        self.spans
            .as_ref()
            .map_or(0, crate::guard::trace::Spans::dropped)
    }

    /// The next call record.
    pub fn poll_record(&mut self) -> Option<CallRecord> {
        self.records.pop_front()
    }

    /// A new call's record, dispatched, when records are kept.
    fn open_call(
        &mut self,
        session: SessionId,
        r: &crate::wire::message::Request,
    ) -> Option<CallLifecycle> {
        let (mut call, at) = self.new_call(session, r)?;
        // The hub has no approval step: each step is legal from the one before.
        let _ = call.authorize(at);
        let _ = call.dispatch(at);
        call.note(
            at.unix_ms,
            &format!("{} request of host session {}", r.method, session.0),
        );
        Some(call)
    }

    /// A new call's record, validated, and the time, when records are kept.
    fn new_call(
        &mut self,
        session: SessionId,
        r: &crate::wire::message::Request,
    ) -> Option<(CallLifecycle, Stamp)> {
        let (prefix, target) = self.recording.as_ref()?;
        let at = self.now?;
        self.calls += 1;
        let operation = (r.method == "tools/call")
            .then(|| field(r.params.as_deref(), "name"))
            .flatten()
            .unwrap_or_else(|| r.method.clone());
        let id = serde_json::to_string(&r.id).unwrap_or_default();
        let call_id = format!("{}/{}/{id}", self.calls, session.0);
        let session_id = format!("{prefix}/{}", session.0);
        let mut call = CallLifecycle::new(
            &self.call_config,
            CallIdentity {
                call_id: &call_id,
                session_id: &session_id,
                operation: &operation,
                target,
            },
            at.unix_ms,
        );
        let _ = call.validate(at);
        Some((call, at))
    }

    /// The span of a call about to go to the server: a child of the
    /// session's `traceparent`; its own context goes with the request.
    fn open_span(
        &mut self,
        call: &CallLifecycle,
        r: &crate::wire::message::Request,
    ) -> Option<crate::guard::trace::TraceContext> {
        let spans = self.spans.as_mut()?;
        let at = self.now?;
        let params = r.params.as_deref().map(RawValue::get);
        let parent = params
            .and_then(|p| crate::wire::object::member(p, "_meta"))
            .and_then(|m| crate::wire::object::member(m.get(), "traceparent"))
            .and_then(|t| serde_json::from_str::<String>(t.get()).ok())
            .and_then(|t| crate::guard::trace::TraceContext::parse(&t));
        let context = spans.ids.child_of(parent.as_ref());
        let tool = (r.method == "tools/call")
            .then(|| field(r.params.as_deref(), "name"))
            .flatten();
        let target = match r.method.as_str() {
            "prompts/get" => {
                field(r.params.as_deref(), "name").map(crate::guard::trace::SpanTarget::Prompt)
            }
            m if m.starts_with("resources/") => {
                field(r.params.as_deref(), "uri").map(crate::guard::trace::SpanTarget::Resource)
            }
            _ => None,
        };
        let start = crate::guard::trace::SpanStart {
            context,
            parent,
            method: r.method.clone(),
            tool,
            target,
            request_id: serde_json::to_string(&r.id).unwrap_or_default(),
            protocol_version: self.handshake.as_ref().map(|h| h.asked.clone()),
            request_bytes: params.map_or(0, |p| p.len() as u64),
        };
        spans.open(call.record().call_id(), start, at.unix_ms);
        Some(context)
    }

    /// A call ended: its record waits for the adapter.
    fn close_call(
        &mut self,
        call: Option<CallLifecycle>,
        end: impl FnOnce(&mut CallLifecycle, Stamp),
    ) {
        let (Some(mut call), Some(at)) = (call, self.now) else {
            return;
        };
        end(&mut call, at);
        if let Some(spans) = self.spans.as_mut() {
            let revision = self.handshake.as_ref().map(|h| h.asked.as_str());
            spans.on_record(call.record(), revision);
        }
        if !self.keep_records {
            return;
        }
        if self.records.len() >= MAX_HUB_RECORDS {
            self.metrics.records_dropped += 1;
            return;
        }
        self.records.push_back(call.record().clone());
    }

    /// Stops the server after `after` with nothing open (`None`: never).
    pub fn idle_stop(&mut self, after: Option<Duration>) -> &mut Self {
        self.idle_after = after;
        self
    }

    /// Bytes moved either way at `at`: the idle clock starts again, and
    /// the records take their time from it.
    pub fn busy(&mut self, at: Stamp) {
        self.busy_at = Some(at.instant);
        self.now = Some(at);
    }

    /// Whether nothing is open: the server initialized and awake, no
    /// request of a session or of the hub's at it, no subscription, no
    /// server request waiting for a session, nothing for the server.
    fn is_idle(&self) -> bool {
        self.sleep == Sleep::Awake
            && !self.server_gone
            && self.handshake.is_some()
            && self.handshake_waiting.is_none()
            && self.pending.is_empty()
            && self.own.is_empty()
            && self.subscribed.is_empty()
            && self.asked.is_empty()
            && self.to_server.is_empty()
    }

    /// When the server is due to be stopped for idleness, if it is idle.
    pub fn idle_deadline(&self) -> Option<Instant> {
        let after = self.idle_after?;
        if !self.is_idle() {
            return None;
        }
        self.busy_at?.checked_add(after)
    }

    /// Time passed: a server idle for the set time is to be stopped
    /// ([`HubEvent::StopServer`]).
    pub fn handle_time(&mut self, now: Instant) {
        if self.idle_deadline().is_some_and(|due| now >= due) {
            self.sleep = Sleep::Stopping;
            self.metrics.idle_stops += 1;
            self.note(format!(
                "the server sat idle for {:.1} s: stopped until the next message (--idle-stop)",
                self.idle_after.unwrap_or_default().as_secs_f64()
            ));
            self.events.push_back(HubEvent::StopServer);
        }
    }

    /// Whether the server's end now is the sleep asked for (then give it
    /// [`handle_server_slept`](Self::handle_server_slept), not
    /// [`handle_server_gone`](Self::handle_server_gone)).
    pub fn is_stopping(&self) -> bool {
        self.sleep == Sleep::Stopping
    }

    /// Whether the server sleeps (stopped for idleness, not started again).
    pub fn is_asleep(&self) -> bool {
        self.sleep == Sleep::Asleep
    }

    /// The server stopped for idleness has ended. Bytes that came for it
    /// meanwhile wake it at once.
    pub fn handle_server_slept(&mut self) {
        self.sleep = Sleep::Asleep;
        // It starts with no level of its own.
        self.server_level = None;
        if !self.to_server.is_empty() {
            self.wake();
        }
    }

    /// The server is started again: the first session's handshake goes
    /// before whatever waits for it, under the hub's own ids.
    fn wake(&mut self) {
        self.sleep = Sleep::Awake;
        self.metrics.resumes += 1;
        let mut replay = Vec::new();
        let params = self.handshake.as_ref().and_then(|h| h.params.clone());
        let id = self.next_hub_id();
        if let Ok(b) = encode_request(&id, "initialize", params.as_deref(), self.max_frame) {
            self.own.insert(id);
            replay.push(b);
        }
        if self.initialized_sent {
            if let Ok(b) = encode_notification("notifications/initialized", None, self.max_frame) {
                replay.push(b);
            }
        }
        let most = self.sessions.values().filter_map(|s| s.level).min();
        if let Some(most) = most {
            let id = self.next_hub_id();
            let level = serde_json::json!({ "level": LEVELS[usize::from(most)] });
            let params = RawValue::from_string(level.to_string()).ok();
            if let Ok(b) =
                encode_request(&id, "logging/setLevel", params.as_deref(), self.max_frame)
            {
                self.own.insert(id);
                replay.push(b);
            }
            self.server_level = Some(most);
        }
        for b in replay.into_iter().rev() {
            self.server_queued += b.len();
            self.to_server.push_front(b);
        }
        self.note(
            "a message for the sleeping server: started again, the handshake replayed".to_owned(),
        );
        self.events.push_back(HubEvent::StartServer);
    }

    /// A host session attaches.
    ///
    /// # Errors
    /// The hub is full ([`MAX_HUB_SESSIONS`]) or its server is gone.
    pub fn open_session(&mut self) -> Result<SessionId, HubRefusal> {
        if self.server_gone {
            return Err(HubRefusal::ServerGone);
        }
        if self.sessions.len() >= MAX_HUB_SESSIONS {
            return Err(HubRefusal::Full);
        }
        self.next_session += 1;
        let id = SessionId(self.next_session);
        self.sessions.insert(
            id,
            Session {
                policy: self.policy.clone(),
                ..Session::default()
            },
        );
        self.metrics.sessions_opened += 1;
        Ok(id)
    }

    /// Sessions attached now.
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Requests of all sessions at the server now.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Resources subscribed to now.
    pub fn subscriptions(&self) -> usize {
        self.subscribed.len()
    }

    /// The hub's counters.
    pub fn metrics(&self) -> &HubMetrics {
        &self.metrics
    }

    /// Bytes waiting for the server.
    pub fn server_backlog(&self) -> usize {
        self.server_queued
    }

    /// Bytes waiting for `session`.
    pub fn session_backlog(&self, session: SessionId) -> usize {
        self.sessions.get(&session).map_or(0, |s| s.queued)
    }

    /// The next bytes for the server.
    pub fn poll_to_server(&mut self) -> Option<Vec<u8>> {
        let b = self.to_server.pop_front()?;
        self.server_queued -= b.len();
        Some(b)
    }

    /// The next bytes for `session`.
    pub fn poll_to_session(&mut self, session: SessionId) -> Option<Vec<u8>> {
        let s = self.sessions.get_mut(&session)?;
        let b = s.queue.pop_front()?;
        s.queued -= b.len();
        Some(b)
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<HubEvent> {
        self.events.pop_front()
    }

    fn next_hub_id(&mut self) -> Id {
        self.next_id += 1;
        Id::String(format!("{HUB_ID_PREFIX}{}", self.next_id))
    }

    fn send_server(&mut self, bytes: Vec<u8>) {
        self.server_queued += bytes.len();
        self.to_server.push_back(bytes);
        if self.sleep == Sleep::Asleep {
            self.wake();
        }
    }

    fn send_session(&mut self, session: SessionId, bytes: Vec<u8>) {
        let Some(s) = self.sessions.get_mut(&session) else {
            return;
        };
        // One message always fits an empty queue (a result up to the wire
        // limit): the worst case is `MAX_SESSION_QUEUE` plus one message.
        if s.queued > 0 && s.queued + bytes.len() > MAX_SESSION_QUEUE {
            self.metrics.sessions_overrun += 1;
            self.events.push_back(HubEvent::Close {
                session,
                reason: format!(
                    "its host stopped reading: more than {MAX_SESSION_QUEUE} bytes waited for it"
                ),
            });
            self.close_session(session);
            return;
        }
        s.queued += bytes.len();
        s.queue.push_back(bytes);
    }

    fn answer(&mut self, session: SessionId, id: &Id, result: &str) {
        if let Ok(raw) = RawValue::from_string(result.to_owned()) {
            if let Ok(b) = encode_result(id, &raw, self.max_frame) {
                self.send_session(session, b);
            }
        }
    }

    fn answer_error(&mut self, session: SessionId, id: &Id, code: i64, message: String) {
        if let Ok(b) = encode_error(Some(id), &ErrorObject::new(code, message), self.max_frame) {
            self.send_session(session, b);
        }
    }

    fn note(&mut self, text: String) {
        self.events.push_back(HubEvent::Note(text));
    }

    fn remember_cancelled(&mut self, id: Id) {
        if self.cancelled.len() >= MAX_CANCELLED {
            self.cancelled.pop_front();
        }
        self.cancelled.push_back(id);
    }

    /// One line from `session`'s host (framed and within the wire limit by
    /// its guard). A line that is not JSON-RPC is dropped.
    pub fn handle_session_line(&mut self, session: SessionId, line: &str) {
        if !self.sessions.contains_key(&session) {
            return;
        }
        let Ok(message) = Message::decode(line) else {
            self.note(format!(
                "session {}: a line that is not JSON-RPC ({} bytes) dropped",
                session.0,
                line.len()
            ));
            return;
        };
        match message {
            Message::Request(r) => self.session_request(session, line, r),
            Message::Notification(n) => self.session_notification(session, &n),
            Message::Response(r) => {
                // An answer to a server request given to this session.
                let asked = self
                    .sessions
                    .get_mut(&session)
                    .is_some_and(|s| s.asked.remove(&r.id));
                if asked {
                    self.asked.remove(&r.id);
                    self.send_server(format!("{}\n", line.trim_end()).into_bytes());
                } else {
                    self.metrics.dropped_answers += 1;
                }
            }
        }
    }

    fn session_request(
        &mut self,
        session: SessionId,
        line: &str,
        r: crate::wire::message::Request,
    ) {
        self.metrics.requests += 1;
        if r.method == "initialize" {
            self.session_initialize(session, line, &r);
            return;
        }
        // A session at 2026-07-28 has no `initialize`: its first request
        // makes it one the server's notifications reach.
        if let Some(s) = self.sessions.get_mut(&session) {
            s.ready = true;
        }
        if self.policy_refuses(session, &r) {
            return;
        }
        if self.pending.len() >= MAX_HUB_IN_FLIGHT {
            self.metrics.requests_refused += 1;
            self.answer_error(
                session,
                &r.id,
                INTERNAL_ERROR,
                format!("mcp-stdio hub: {MAX_HUB_IN_FLIGHT} requests wait for the shared server; try again"),
            );
            return;
        }
        let params = r.params.as_deref();
        let mut params_out: Option<Box<RawValue>> = None;
        let mut subscribe = None;
        match r.method.as_str() {
            "resources/subscribe" => {
                let Some(uri) = field(params, "uri") else {
                    return self.forward(session, r, None, None);
                };
                let held = self
                    .sessions
                    .get(&session)
                    .is_some_and(|s| s.subscriptions.contains(&uri));
                if held || self.subscribed.get(&uri).is_some_and(|n| *n > 0) {
                    // The server holds it already: the session joins.
                    if !held {
                        *self.subscribed.entry(uri.clone()).or_default() += 1;
                        if let Some(s) = self.sessions.get_mut(&session) {
                            s.subscriptions.insert(uri);
                        }
                    }
                    self.answer(session, &r.id, "{}");
                    return;
                }
                if self.subscribed.len() >= MAX_HUB_SUBSCRIPTIONS {
                    self.answer_error(
                        session,
                        &r.id,
                        INTERNAL_ERROR,
                        format!(
                            "mcp-stdio hub: {MAX_HUB_SUBSCRIPTIONS} resources subscribed at most"
                        ),
                    );
                    return;
                }
                self.subscribed.insert(uri.clone(), 1);
                if let Some(s) = self.sessions.get_mut(&session) {
                    s.subscriptions.insert(uri.clone());
                }
                subscribe = Some(uri);
            }
            "resources/unsubscribe" => {
                if let Some(uri) = field(params, "uri") {
                    let held = self
                        .sessions
                        .get_mut(&session)
                        .is_some_and(|s| s.subscriptions.remove(&uri));
                    if held {
                        let left = self.release(&uri);
                        if left > 0 {
                            // Others still hold it: the server keeps it.
                            self.answer(session, &r.id, "{}");
                            return;
                        }
                    }
                }
            }
            "logging/setLevel" => {
                if let Some(rank) = field(params, "level").as_deref().and_then(level_rank) {
                    if let Some(s) = self.sessions.get_mut(&session) {
                        s.level = Some(rank);
                    }
                    // The server gets the most verbose level any session asked.
                    let most = self
                        .sessions
                        .values()
                        .filter_map(|s| s.level)
                        .min()
                        .unwrap_or(rank);
                    self.server_level = Some(most);
                    let level = LEVELS[usize::from(most)];
                    params_out = with_field(params, "level", serde_json::Value::from(level));
                }
            }
            _ => {}
        }
        if let Some(p) = params_out {
            let r = crate::wire::message::Request {
                params: Some(p),
                ..r
            };
            return self.forward(session, r, None, subscribe);
        }
        let token = progress_token(params);
        self.forward(session, r, token, subscribe)
    }

    /// One session fewer holds `uri`; returns how many still do (at 0 the
    /// count is gone).
    fn release(&mut self, uri: &str) -> u32 {
        let Some(n) = self.subscribed.get_mut(uri) else {
            return 0;
        };
        *n = n.saturating_sub(1);
        let left = *n;
        if left == 0 {
            self.subscribed.remove(uri);
        }
        left
    }

    /// A request of `session` to the server under a hub id (its progress
    /// token under the hub's).
    fn forward(
        &mut self,
        session: SessionId,
        r: crate::wire::message::Request,
        token: Option<Id>,
        subscribe: Option<String>,
    ) {
        let hub_id = self.next_hub_id();
        let call = self.open_call(session, &r);
        let context = call.as_ref().and_then(|c| self.open_span(c, &r));
        let mut params = r.params;
        if let Some(context) = context {
            let value = format!("\"{}\"", context.to_traceparent());
            let merged = crate::wire::object::merge_meta(
                params.as_deref().map(RawValue::get),
                &[("traceparent", &value)],
            );
            if let Some(p) = merged.and_then(|m| RawValue::from_string(m).ok()) {
                params = Some(p);
            }
        }
        let token = token.and_then(|t| {
            let hub_token = Id::String(format!("{HUB_TOKEN_PREFIX}{}", self.next_id));
            let value = serde_json::to_string(&hub_token).ok()?;
            let merged = crate::wire::object::merge_meta(
                params.as_deref().map(RawValue::get),
                &[("progressToken", &value)],
            )?;
            params = Some(RawValue::from_string(merged).ok()?);
            Some((t, hub_token))
        });
        let Ok(bytes) = encode_request(&hub_id, &r.method, params.as_deref(), self.max_frame)
        else {
            self.answer_error(
                session,
                &r.id,
                INTERNAL_ERROR,
                "mcp-stdio hub: the request does not fit the wire limit once its id is the hub's"
                    .to_owned(),
            );
            return;
        };
        if let Some((t, hub_token)) = &token {
            self.tokens.insert(hub_token.clone(), (session, t.clone()));
        }
        if let Some(s) = self.sessions.get_mut(&session) {
            s.requests.insert(r.id.clone(), hub_id.clone());
        }
        self.pending.insert(
            hub_id,
            Pending {
                session,
                id: r.id,
                method: r.method,
                token,
                subscribe,
                call,
            },
        );
        self.send_server(bytes);
    }

    fn session_initialize(
        &mut self,
        session: SessionId,
        line: &str,
        r: &crate::wire::message::Request,
    ) {
        let (asked, capabilities) = initialize_params(r.params.as_deref());
        if let Some(h) = &self.handshake {
            let served = if h.asked != asked {
                Err(format!(
                    "it asks for protocol {asked:?}, the shared server was initialized at {:?}",
                    h.asked
                ))
            } else if let Some(missing) = h.capabilities.difference(&capabilities).next() {
                Err(format!(
                    "it lacks the client capability `{missing}` the shared server was initialized with"
                ))
            } else {
                Ok(h.result.get().to_owned())
            };
            match served {
                Ok(result) => {
                    self.metrics.handshakes_shared += 1;
                    if let Some(s) = self.sessions.get_mut(&session) {
                        s.ready = true;
                    }
                    self.answer(session, &r.id, &result);
                }
                Err(reason) => self.private(session, line, reason),
            }
            return;
        }
        if let Some(w) = self.handshake_waiting.as_mut() {
            w.waiting.push((session, line.to_owned()));
            return;
        }
        let hub_id = self.next_hub_id();
        let Ok(bytes) = encode_request(&hub_id, "initialize", r.params.as_deref(), self.max_frame)
        else {
            return;
        };
        if let Some(s) = self.sessions.get_mut(&session) {
            s.requests.insert(r.id.clone(), hub_id.clone());
        }
        let call = self.open_call(session, r);
        self.pending.insert(
            hub_id.clone(),
            Pending {
                session,
                id: r.id.clone(),
                method: "initialize".to_owned(),
                token: None,
                subscribe: None,
                call,
            },
        );
        self.handshake_waiting = Some(HandshakeWaiting {
            hub_id,
            asked,
            capabilities,
            params: r.params.clone(),
            waiting: Vec::new(),
        });
        self.send_server(bytes);
    }

    fn private(&mut self, session: SessionId, line: &str, reason: String) {
        self.metrics.private_servers += 1;
        self.note(format!("session {}: a private server: {reason}", session.0));
        self.events.push_back(HubEvent::PrivateServer {
            session,
            initialize: line.to_owned(),
            reason,
        });
        self.close_session(session);
    }

    fn session_notification(&mut self, session: SessionId, n: &crate::wire::message::Notification) {
        match n.method.as_str() {
            "notifications/initialized" => {
                // Only the session whose `initialize` the server answered
                // tells it, once; the others' are the hub's.
                if self.initialized_by == Some(session) && !self.initialized_sent {
                    self.initialized_sent = true;
                    if let Ok(b) =
                        encode_notification(&n.method, n.params.as_deref(), self.max_frame)
                    {
                        self.send_server(b);
                    }
                }
            }
            "notifications/cancelled" => {
                let Some(request) = n
                    .params
                    .as_deref()
                    .and_then(|p| crate::wire::object::member(p.get(), "requestId"))
                    .and_then(|v| serde_json::from_str::<Id>(v.get()).ok())
                else {
                    return;
                };
                let Some(hub_id) = self
                    .sessions
                    .get_mut(&session)
                    .and_then(|s| s.requests.remove(&request))
                else {
                    return;
                };
                self.metrics.cancels += 1;
                self.cancel_pending(&hub_id, n.params.as_deref());
            }
            _ => {
                if let Ok(b) = encode_notification(&n.method, n.params.as_deref(), self.max_frame) {
                    self.send_server(b);
                }
            }
        }
    }

    /// The request `hub_id` is cancelled: the server is told, its late
    /// answer dropped, its subscription count undone.
    fn cancel_pending(&mut self, hub_id: &Id, params: Option<&RawValue>) {
        let Some(mut p) = self.pending.remove(hub_id) else {
            return;
        };
        self.close_call(p.call.take(), |c, at| {
            let _ = c.cancel(at);
        });
        if let Some((_, hub_token)) = &p.token {
            self.tokens.remove(hub_token);
        }
        if let Some(uri) = &p.subscribe {
            self.release(uri);
            if let Some(s) = self.sessions.get_mut(&p.session) {
                s.subscriptions.remove(uri);
            }
        }
        let params = with_field(params, "requestId", id_value(hub_id))
            .or_else(|| with_field(None, "requestId", id_value(hub_id)));
        if let Ok(b) =
            encode_notification("notifications/cancelled", params.as_deref(), self.max_frame)
        {
            self.send_server(b);
        }
        self.remember_cancelled(hub_id.clone());
    }

    /// `session`'s host left (EOF, crash, its guard gone): its requests are
    /// cancelled on the server, its subscriptions released, the server's
    /// requests to it answered with an error.
    pub fn close_session(&mut self, session: SessionId) {
        let Some(s) = self.sessions.remove(&session) else {
            return;
        };
        self.metrics.sessions_closed += 1;
        if let Some(p) = &s.policy {
            self.policy_gone.add(p.metrics());
        }
        let reason = serde_json::json!({"reason": "the host session ended"});
        let raw = serde_json::value::to_raw_value(&reason).ok();
        for hub_id in s.requests.values() {
            self.cancel_pending(hub_id, raw.as_deref());
        }
        for uri in &s.subscriptions {
            if self.release(uri) == 0 {
                let id = self.next_hub_id();
                let params = with_field(None, "uri", serde_json::Value::from(uri.as_str()));
                if let Ok(b) = encode_request(
                    &id,
                    "resources/unsubscribe",
                    params.as_deref(),
                    self.max_frame,
                ) {
                    self.own.insert(id);
                    self.send_server(b);
                }
            }
        }
        for id in &s.asked {
            self.asked.remove(id);
            let err = ErrorObject::new(
                INTERNAL_ERROR,
                "mcp-stdio hub: the host session this request went to ended",
            );
            if let Ok(b) = encode_error(Some(id), &err, self.max_frame) {
                self.send_server(b);
            }
        }
        if let Some(w) = self.handshake_waiting.as_mut() {
            w.waiting.retain(|(t, _)| *t != session);
        }
    }

    /// One line from the server.
    pub fn handle_server_line(&mut self, line: &str) {
        let decoded = match Message::decode_in(line) {
            Ok(d) => d,
            Err(_) => {
                self.note(format!(
                    "the server wrote a line that is not JSON-RPC ({} bytes); dropped",
                    line.len()
                ));
                return;
            }
        };
        match decoded {
            Decoded::Result { id, result } => self.server_answer(&id, Ok(result), line),
            Decoded::Message(Message::Response(r)) => match r.result {
                Ok(result) => {
                    let raw = result.into_raw_value();
                    self.server_answer(&r.id, Ok(&raw), line);
                }
                Err(e) => self.server_answer(&r.id, Err(e), line),
            },
            Decoded::Message(Message::Notification(n)) => self.server_notification(&n, line),
            Decoded::Message(Message::Request(r)) => self.server_request(r, line),
        }
    }

    fn server_answer(&mut self, id: &Id, answer: Result<&RawValue, ErrorObject>, _line: &str) {
        if self.own.remove(id) {
            return;
        }
        let Some(mut p) = self.pending.remove(id) else {
            if self.cancelled.contains(id) {
                self.metrics.dropped_answers += 1;
            }
            return;
        };
        let outcome = if answer.is_ok() {
            CallOutcome::Succeeded
        } else {
            CallOutcome::RemoteFailure
        };
        // The session's policies edit a list or a tool result first.
        let (edited, what) = match &answer {
            Ok(result) => self.policy_edits(&p, result),
            Err(_) => (None, None),
        };
        if let (Some(spans), Some(call)) = (self.spans.as_mut(), p.call.as_ref()) {
            let (code, bytes, tool_error) = match &answer {
                Ok(result) => (
                    None,
                    result.get().len() as u64,
                    crate::wire::object::member(result.get(), "isError")
                        .is_some_and(|v| v.get() == "true"),
                ),
                Err(e) => (Some(e.code), 0, false),
            };
            spans.answered(call.record().call_id(), code, bytes, false, tool_error);
        }
        self.close_call(p.call.take(), |c, at| {
            if let Some(what) = &what {
                c.note(at.unix_ms, what);
            }
            let _ = c.complete(at, outcome);
        });
        if let Some((_, hub_token)) = &p.token {
            self.tokens.remove(hub_token);
        }
        if let Some(s) = self.sessions.get_mut(&p.session) {
            s.requests.remove(&p.id);
        }
        let waiting = self
            .handshake_waiting
            .as_ref()
            .is_some_and(|w| w.hub_id == *id);
        if p.method == "initialize" && waiting {
            let w = self.handshake_waiting.take();
            match (&answer, w) {
                (Ok(result), Some(w)) => {
                    self.handshake = Some(Handshake {
                        asked: w.asked,
                        capabilities: w.capabilities,
                        result: (*result).to_owned(),
                        params: w.params,
                    });
                    self.initialized_by = Some(p.session);
                    if let Some(s) = self.sessions.get_mut(&p.session) {
                        s.ready = true;
                    }
                    let bytes = encode_result(&p.id, result, self.max_frame);
                    if let Ok(b) = bytes {
                        self.send_session(p.session, b);
                    }
                    for (t, line) in w.waiting {
                        if let Ok(Message::Request(r)) = Message::decode(&line) {
                            self.session_initialize(t, &line, &r);
                        }
                    }
                    return;
                }
                (Err(_), Some(w)) => {
                    // The next waiting `initialize` goes to the server.
                    for (t, line) in w.waiting {
                        if let Ok(Message::Request(r)) = Message::decode(&line) {
                            self.session_initialize(t, &line, &r);
                        }
                    }
                }
                _ => {}
            }
        }
        match answer {
            Ok(result) => {
                let result = edited.as_deref().unwrap_or(result);
                if let Ok(b) = encode_result(&p.id, result, self.max_frame) {
                    self.send_session(p.session, b);
                }
            }
            Err(e) => {
                if let Some(uri) = &p.subscribe {
                    // The server refused it: nobody holds it.
                    self.release(uri);
                    if let Some(s) = self.sessions.get_mut(&p.session) {
                        s.subscriptions.remove(uri);
                    }
                }
                if let Ok(b) = encode_error(Some(&p.id), &e, self.max_frame) {
                    self.send_session(p.session, b);
                }
            }
        }
    }

    fn ready_sessions(&self) -> Vec<SessionId> {
        self.sessions
            .iter()
            .filter(|(_, s)| s.ready)
            .map(|(id, _)| *id)
            .collect()
    }

    fn server_notification(&mut self, n: &crate::wire::message::Notification, line: &str) {
        let bytes = || format!("{}\n", line.trim_end()).into_bytes();
        match n.method.as_str() {
            "notifications/progress" => {
                let token = n
                    .params
                    .as_deref()
                    .and_then(|p| crate::wire::object::member(p.get(), "progressToken"))
                    .and_then(|v| serde_json::from_str::<Id>(v.get()).ok());
                let Some((session, original)) = token.and_then(|t| self.tokens.get(&t).cloned())
                else {
                    self.metrics.dropped_answers += 1;
                    return;
                };
                let params = with_field(n.params.as_deref(), "progressToken", id_value(&original));
                if let Ok(b) = encode_notification(&n.method, params.as_deref(), self.max_frame) {
                    self.send_session(session, b);
                }
            }
            "notifications/resources/updated" => {
                let Some(uri) = field(n.params.as_deref(), "uri") else {
                    return;
                };
                let to: Vec<SessionId> = self
                    .sessions
                    .iter()
                    .filter(|(_, s)| s.subscriptions.contains(&uri))
                    .map(|(id, _)| *id)
                    .collect();
                for s in to {
                    self.send_session(s, bytes());
                }
            }
            "notifications/message" => {
                let rank = field(n.params.as_deref(), "level")
                    .as_deref()
                    .and_then(level_rank)
                    .unwrap_or(u8::MAX);
                let to: Vec<SessionId> = self
                    .sessions
                    .iter()
                    .filter(|(_, s)| s.ready && s.level.is_none_or(|l| rank >= l))
                    .map(|(id, _)| *id)
                    .collect();
                for s in to {
                    self.send_session(s, bytes());
                }
            }
            "notifications/cancelled" => {
                // The server withdraws a request it gave a session.
                let request = n
                    .params
                    .as_deref()
                    .and_then(|p| crate::wire::object::member(p.get(), "requestId"))
                    .and_then(|v| serde_json::from_str::<Id>(v.get()).ok());
                if let Some(session) = request.and_then(|r| self.asked.remove(&r).map(|s| (s, r))) {
                    if let Some(s) = self.sessions.get_mut(&session.0) {
                        s.asked.remove(&session.1);
                    }
                    self.send_session(session.0, bytes());
                }
            }
            m if is_list_changed(m) => {
                for s in self.ready_sessions() {
                    self.send_session(s, bytes());
                }
            }
            _ => {
                for s in self.ready_sessions() {
                    self.send_session(s, bytes());
                }
            }
        }
    }

    fn server_request(&mut self, r: crate::wire::message::Request, line: &str) {
        if r.method == "ping" {
            let empty = RawValue::from_string("{}".to_owned()).ok();
            if let Some(Ok(b)) = empty.map(|e| encode_result(&r.id, &e, self.max_frame)) {
                self.send_server(b);
            }
            return;
        }
        // The sessions with a request at the server.
        let mut busy: BTreeSet<SessionId> = self.pending.values().map(|p| p.session).collect();
        busy.retain(|s| self.sessions.contains_key(s));
        if busy.len() == 1 && !self.asked.contains_key(&r.id) {
            let session = *busy.iter().next().unwrap_or(&SessionId(0));
            self.asked.insert(r.id.clone(), session);
            if let Some(s) = self.sessions.get_mut(&session) {
                s.asked.insert(r.id.clone());
            }
            self.send_session(session, format!("{}\n", line.trim_end()).into_bytes());
            return;
        }
        self.metrics.server_requests_refused += 1;
        let why = format!(
            "mcp-stdio hub: {} host sessions have a request in flight; the shared server's {} cannot be routed to one of them",
            busy.len(),
            r.method
        );
        self.note(why.clone());
        if let Ok(b) = encode_error(
            Some(&r.id),
            &ErrorObject::new(INTERNAL_ERROR, why),
            self.max_frame,
        ) {
            self.send_server(b);
        }
    }

    /// The server is gone: every request waiting gets `error` (the crash
    /// error of the guard), and every session is closed.
    pub fn handle_server_gone(&mut self, error: &ErrorObject) {
        self.server_gone = true;
        let pending: Vec<(Id, Pending)> = self.pending.drain().collect();
        for (_, mut p) in pending {
            // The server is gone: what the call came to cannot be known.
            self.close_call(p.call.take(), |c, at| {
                let _ = c.mark_unknown(at);
            });
            if let Ok(b) = encode_error(Some(&p.id), error, self.max_frame) {
                self.send_session(p.session, b);
            }
        }
        let ids: Vec<SessionId> = self.sessions.keys().copied().collect();
        for session in ids {
            self.events.push_back(HubEvent::Close {
                session,
                reason: "the shared server is gone".to_owned(),
            });
        }
        self.handshake = None;
        self.handshake_waiting = None;
    }
}

mod policy;
#[cfg(test)]
mod tests;
