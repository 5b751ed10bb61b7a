//! The host side of an MCP stdio session.
//!
//! [`ClientSession`] turns the server's stdout bytes into completed requests
//! and incoming messages, and the application's commands into bytes for the
//! server's stdin. It does no I/O and reads no clock.
//!
//! What it guarantees (see the design's G-numbers):
//! - **G2/G3**: framing with a wire limit before any parse; an oversized
//!   response fails its request with [`RequestFailure::ResponseTooLarge`]
//!   and the session keeps going: at once when its id is in the frame's first
//!   `id_scan_limit` bytes, else as soon as the frame's newline arrives (the
//!   framer scans the whole discarded frame for its top-level id). A frame
//!   with no usable id fails nothing; its request runs to its deadline.
//! - **G5**: server→client requests and notifications go to a bounded inbox,
//!   separate from the reader. When it is full the [`OverloadPolicy`] applies;
//!   responses to our own requests are always admitted (they are bounded by
//!   `max_in_flight`).
//! - **G6**: a cancel and a timeout both send `notifications/cancelled`
//!   (never for `initialize` or `server/discover`), and a late response to a
//!   cancelled or timed-out id is ignored and counted.
//! - **Modern sessions** (2026-07-28, once
//!   [`stamp_requests`](ClientSession::stamp_requests) is set): every
//!   request carries the protocol version and the client's context in
//!   `params._meta`, merged with the caller's own `_meta`; a request from the
//!   server is a protocol violation, answered -32601 and counted
//!   ([`ClientMetrics::server_requests_refused`]), never delivered.
//!
//! # Worst-case memory
//!
//! With config `c` and the framer's `f` (the two arguments of
//! [`ClientSession::new`]), a session holds at most about:
//! `f.max_frame` (framer buffer)
//! `+ c.inbox_capacity × f.max_frame` (inbox)
//! `+ c.max_outgoing_bytes + c.control_reserve_bytes + f.max_frame` (outgoing queue)
//! `+ c.max_in_flight × (f.max_frame + 100)` (completed responses not yet polled)
//! `+ c.max_cancelled_remembered × ~64` (recently cancelled ids).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::outbox::Outbox;
use crate::session::handshake::RequestStamp;
use crate::session::handshake::DISCOVER;
use crate::session::progress::{self, ProgressQueue, PROGRESS_METHOD};
use crate::session::violation_log::{warn_violation, ViolationLog, CLIENT_VIOLATION_TARGET};
use crate::wire::frame::{
    refused_line_id, FrameError, FrameEvent, FrameText, Framer, FramerConfig, IdRecovery,
    OversizedPolicy, ReadRoom,
};
use crate::wire::idset::RecentIds;
use crate::wire::message::{
    encode_error, encode_notification, encode_request, encode_result, wire_limit_error,
    wire_limit_message, DecodeError, EncodeError, ErrorObject, Id, Message, Notification,
    Oversized, RawResult, RawValue, Request, CLIENT_MAX_FRAME_KNOB, INTERNAL_ERROR,
    METHOD_NOT_FOUND, SERVER_ERROR,
};
use crate::wire::object::merge_meta;
use std::sync::Arc;

/// The method name of the MCP handshake request (up to 2025-11-25), which
/// must never be cancelled.
pub const INITIALIZE: &str = "initialize";

/// Whether `method` opens a session (`initialize`, `server/discover`): such
/// a request is never cancelled, on timeout or otherwise (G6).
fn is_handshake(method: &str) -> bool {
    method == INITIALIZE || method == DISCOVER
}
/// The method name of the MCP cancel notification.
pub const CANCELLED: &str = "notifications/cancelled";

/// What the client does when its inbox is full (G5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OverloadPolicy {
    /// Reply to incoming requests with JSON-RPC error -32000; drop and count
    /// incoming notifications. The reader keeps reading. (Default.)
    #[default]
    RejectRequests,
    /// Close the session.
    CloseSession,
}

/// Limits and policies of a [`ClientSession`].
///
/// Every limit bounds memory; the module doc gives the worst-case formula.
/// The framing of the server's stdout, the wire limit (`max_frame`)
/// included, is the [`FramerConfig`] given beside it to
/// [`ClientSession::new`] (and [`ClientOptions::framer_mut`] for a `Client`).
///
/// [`ClientOptions::framer_mut`]: crate::ClientOptions::framer_mut
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientConfig {
    max_in_flight: usize,
    inbox_capacity: usize,
    overload_policy: OverloadPolicy,
    max_outgoing_bytes: usize,
    control_reserve_bytes: usize,
    max_cancelled_remembered: usize,
    default_timeout: Option<Duration>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            max_in_flight: 128,
            inbox_capacity: 256,
            overload_policy: OverloadPolicy::RejectRequests,
            max_outgoing_bytes: 8 * 1024 * 1024,
            control_reserve_bytes: 64 * 1024,
            max_cancelled_remembered: 1024,
            default_timeout: Some(Duration::from_secs(60)),
        }
    }
}

impl ClientConfig {
    /// Maximum requests awaiting a response (default 128). Each pending entry
    /// is under 100 bytes; each completed response waits in the event queue
    /// until polled, at most `max_frame` bytes each.
    pub fn max_in_flight(&mut self, n: usize) -> &mut Self {
        self.max_in_flight = n;
        self
    }

    /// Capacity of the inbox for server→client requests and notifications
    /// (default 256 messages; worst case `inbox_capacity × max_frame` bytes).
    pub fn inbox_capacity(&mut self, n: usize) -> &mut Self {
        self.inbox_capacity = n;
        self
    }

    /// What to do when the inbox is full (default [`OverloadPolicy::RejectRequests`]).
    pub fn overload_policy(&mut self, policy: OverloadPolicy) -> &mut Self {
        self.overload_policy = policy;
        self
    }

    /// Bytes queued for the server's stdin beyond which `request`, `notify`
    /// and `respond` fail with [`SendError::Backpressure`] (default 8 MiB).
    /// A single message is always admitted into an empty queue, so the
    /// queue may hold up to `max(max_outgoing_bytes, max_frame)`.
    pub fn max_outgoing_bytes(&mut self, bytes: usize) -> &mut Self {
        self.max_outgoing_bytes = bytes;
        self
    }

    /// Extra room in the outgoing queue for messages the session writes by
    /// itself (cancels and overload rejections), default 64 KiB. When even
    /// this is used up such a message is dropped and counted. Worst case: the
    /// queue holds `max_outgoing_bytes` plus this many bytes.
    pub fn control_reserve_bytes(&mut self, bytes: usize) -> &mut Self {
        self.control_reserve_bytes = bytes;
        self
    }

    /// How many cancelled or timed-out ids are remembered so that a late
    /// response is recognised (default 1024, about 64 bytes each). A late
    /// response to an id forgotten since counts as an unknown-id response.
    pub fn max_cancelled_remembered(&mut self, n: usize) -> &mut Self {
        self.max_cancelled_remembered = n;
        self
    }

    /// Sets the timeout applied by [`ClientSession::request`] when the caller
    /// gives none (default 60 s; `None` means no deadline). Memory: none.
    pub fn default_timeout(&mut self, timeout: Option<Duration>) -> &mut Self {
        self.default_timeout = timeout;
        self
    }

    /// The default request timeout.
    pub fn get_default_timeout(&self) -> Option<Duration> {
        self.default_timeout
    }
}

/// Why a request did not produce a result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestFailure {
    /// The server answered with a JSON-RPC error.
    #[error("server error {}: {}", .0.code, .0.message)]
    Server(ErrorObject),
    /// The deadline passed; a cancel was sent unless the request was `initialize`.
    #[error("request timed out after {after:?}")]
    TimedOut {
        /// Time from sending to the deadline.
        after: Duration,
        /// Whether `notifications/cancelled` was queued for the server.
        cancel_sent: bool,
    },
    /// The application cancelled the request.
    #[error("request cancelled")]
    Cancelled {
        /// Whether `notifications/cancelled` was queued for the server.
        cancel_sent: bool,
    },
    /// The response passed the wire limit and was discarded unparsed (G3).
    /// Its text is [`wire_limit_message`]; [`RequestFailure::to_error_object`]
    /// gives the JSON-RPC error every other component sends for it.
    #[error("{}", wire_limit_message(Oversized::Response, *limit, *seen, CLIENT_MAX_FRAME_KNOB))]
    ResponseTooLarge {
        /// The wire limit in bytes.
        limit: usize,
        /// Bytes of the response seen when it was refused: a lower bound of its
        /// size, or its whole size when the id was found at the frame's end.
        seen: u64,
    },
    /// A frame carrying this request's id was not a valid response.
    #[error("malformed response: {0}")]
    MalformedResponse(DecodeError),
    /// A frame carrying this request's id was not valid UTF-8 and was
    /// refused ([`InvalidUtf8Policy::Refuse`], or a repair past the wire
    /// limit).
    ///
    /// [`InvalidUtf8Policy::Refuse`]: crate::wire::frame::InvalidUtf8Policy::Refuse
    #[error(
        "response of {len} bytes is not valid UTF-8 (valid up to byte {valid_up_to}); refused"
    )]
    InvalidUtf8Response {
        /// The frame's length in bytes.
        len: usize,
        /// Its valid prefix.
        valid_up_to: usize,
    },
    /// The session closed before a response arrived.
    #[error("session closed before a response arrived")]
    SessionClosed,
}

impl RequestFailure {
    /// The JSON-RPC error that stands for this failure where one must be
    /// handed on (the rmcp transport hands it to rmcp): the server's own
    /// error as it came; [`wire_limit_error`] for a response over the wire
    /// limit; -32603 with this failure's text otherwise.
    pub fn to_error_object(&self) -> ErrorObject {
        match self {
            Self::Server(e) => e.clone(),
            Self::ResponseTooLarge { limit, seen } => {
                wire_limit_error(Oversized::Response, *limit, *seen, CLIENT_MAX_FRAME_KNOB)
            }
            other => ErrorObject::new(INTERNAL_ERROR, other.to_string()),
        }
    }
}

/// Why a command could not queue a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// `max_in_flight` requests are already pending.
    #[error("{limit} requests are already in flight")]
    TooManyInFlight {
        /// The configured limit.
        limit: usize,
    },
    /// The outgoing queue is full: the server is not reading its stdin.
    #[error("outgoing queue full ({queued} bytes queued, limit {limit})")]
    Backpressure {
        /// Bytes queued now.
        queued: usize,
        /// The configured limit.
        limit: usize,
    },
    /// The message would pass the wire limit (the framer's `max_frame`
    /// bounds what the session sends too); the text names the knob.
    #[error("{0}; raise {CLIENT_MAX_FRAME_KNOB}")]
    Encode(#[from] EncodeError),
    /// In a modern session a request's params must be a JSON object, to
    /// carry its `_meta`; these were not.
    #[error("params must be a JSON object to carry the session's _meta")]
    ParamsNotAnObject,
    /// The session is closed.
    #[error("session closed")]
    Closed,
}

/// Why a cancel was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CancelError {
    /// No pending request has this id (it completed, timed out or never existed).
    #[error("no pending request with id {0}")]
    NotPending(Id),
}

/// Why the session closed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CloseReason {
    /// The server's stdout reached end-of-file.
    StdoutEof,
    /// The inbox was full under [`OverloadPolicy::CloseSession`].
    Overloaded,
    /// A frame passed the wire limit under [`OversizedPolicy::Close`].
    OversizedFrame,
    /// The application called [`ClientSession::close`].
    Local,
}

/// A message from the server that the application must handle.
#[derive(Debug, Clone)]
pub enum Incoming {
    /// A server→client request; answer it with [`ClientSession::respond`].
    Request(Request),
    /// A server→client notification.
    Notification(Notification),
}

/// When a request stops waiting for its response, said explicitly.
///
/// ```
/// use std::time::Duration;
/// use mcp_stdio_core::Deadline;
///
/// assert_eq!(Deadline::Default.as_timeout(), None);
/// assert_eq!(Deadline::None.as_timeout(), Some(Duration::MAX));
/// assert_eq!(Deadline::After(Duration::from_secs(5)).as_timeout(), Some(Duration::from_secs(5)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Deadline {
    /// The session's default ([`ClientConfig::default_timeout`], 60 s unless
    /// configured otherwise).
    #[default]
    Default,
    /// No deadline: the request waits for its response, a cancel, or the end
    /// of the session.
    None,
    /// This long after the request is sent; then it fails as timed out and is
    /// cancelled on the server (G6).
    After(Duration),
}

impl Deadline {
    /// The `timeout` argument of [`ClientSession::request`] meaning the same:
    /// `None` for the default, `Some(Duration::MAX)` for no deadline.
    pub fn as_timeout(self) -> Option<Duration> {
        match self {
            Self::Default => None,
            Self::None => Some(Duration::MAX),
            Self::After(d) => Some(d),
        }
    }
}

impl From<Duration> for Deadline {
    fn from(d: Duration) -> Self {
        Self::After(d)
    }
}

/// Something the application must see.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientEvent {
    /// A request finished, with its result or why it failed.
    Completed {
        /// The request id.
        id: Id,
        /// The raw result, or the failure.
        outcome: Result<RawResult, RequestFailure>,
    },
    /// At least one message waits in the inbox; take it with
    /// [`ClientSession::poll_incoming`]. Emitted once per empty→non-empty change.
    IncomingReady,
    /// The session closed. Every pending request has completed before this.
    Closed(CloseReason),
}

/// Counters of one session (serializable for records and `--metrics`).
#[derive(Debug, Clone, Default, Serialize)]
#[non_exhaustive]
pub struct ClientMetrics {
    /// Bytes read from the server's stdout.
    pub stdout_bytes: u64,
    /// Complete frames received.
    pub frames: u64,
    /// Size of the largest complete frame, in bytes.
    pub largest_frame: u64,
    /// Frames that passed the wire limit.
    pub oversized_frames: u64,
    /// Oversized frames whose id could not be recovered from the whole frame
    /// (absent, ambiguous, not an id, too long or not JSON): nothing could be
    /// failed or answered for them.
    pub oversized_ids_missing: u64,
    /// Bytes discarded with oversized frames.
    pub oversized_bytes_discarded: u64,
    /// Frames that failed, by kind (`invalid_utf8`, `json`, `shape`, …).
    pub parse_errors: BTreeMap<&'static str, u64>,
    /// Frames that were not valid UTF-8 and were repaired (U+FFFD) and used
    /// ([`InvalidUtf8Policy::Repair`], the default).
    ///
    /// [`InvalidUtf8Policy::Repair`]: crate::wire::frame::InvalidUtf8Policy::Repair
    pub utf8_repaired: u64,
    /// Refused frames (not UTF-8, not JSON, not a JSON-RPC message) whose
    /// top-level id named a pending request, which failed at once.
    pub refused_frames_failed: u64,
    /// Empty lines ignored.
    pub empty_lines: u64,
    /// Deepest the inbox has been.
    pub inbox_peak_depth: u64,
    /// Messages taken from the inbox.
    pub inbox_delivered: u64,
    /// Longest time a message waited in the inbox, in microseconds
    /// (serialized as `inbox_wait_max_ms`, milliseconds to the microsecond).
    #[serde(
        rename = "inbox_wait_max_ms",
        serialize_with = "crate::time::duration_ms::serialize_micros"
    )]
    pub inbox_wait_max_us: u64,
    /// Total time messages waited in the inbox, in microseconds (serialized
    /// as `inbox_wait_total_ms`, milliseconds to the microsecond).
    #[serde(
        rename = "inbox_wait_total_ms",
        serialize_with = "crate::time::duration_ms::serialize_micros"
    )]
    pub inbox_wait_total_us: u64,
    /// Server requests answered with an overload error.
    pub overload_rejects: u64,
    /// Server notifications dropped because the inbox was full.
    pub overload_drops: u64,
    /// Requests sent.
    pub requests_sent: u64,
    /// Notifications sent by the application.
    pub notifications_sent: u64,
    /// `notifications/cancelled` queued (cancels and timeouts).
    pub cancels_sent: u64,
    /// Cancels or overload replies dropped because the control reserve was full.
    pub control_dropped: u64,
    /// Requests that hit their deadline.
    pub timeouts: u64,
    /// Responses that completed a request.
    pub responses: u64,
    /// Responses to cancelled or timed-out ids (ignored).
    pub late_responses: u64,
    /// Responses to ids never sent or long forgotten (a protocol violation; ignored).
    pub unknown_id_responses: u64,
    /// Server→client requests received.
    pub server_requests: u64,
    /// Server→client requests refused with -32601 because the session is
    /// modern (2026-07-28: a server sends no requests; each is a protocol
    /// violation), never delivered.
    pub server_requests_refused: u64,
    /// Server→client notifications received.
    pub server_notifications: u64,
    /// `notifications/progress` routed to the progress queue of the request
    /// that asked for it (not counted in the inbox).
    pub progress_routed: u64,
    /// Bytes handed to the adapter for the server's stdin.
    pub stdin_bytes: u64,
    /// Largest outgoing queue, in bytes.
    pub outgoing_peak_bytes: u64,
}

#[derive(Debug)]
struct Pending {
    /// `initialize` or `server/discover`: never cancelled (G6).
    is_handshake: bool,
    sent_at: Instant,
    deadline: Option<Instant>,
}

/// The host side of one MCP stdio session (sans-IO).
///
/// # Methods, by group
///
/// - **Getters**: [`metrics`](Self::metrics), [`pending_len`](Self::pending_len),
///   [`inbox_len`](Self::inbox_len), [`outgoing_bytes`](Self::outgoing_bytes),
///   [`is_closed`](Self::is_closed), [`config`](Self::config),
///   [`framer_config`](Self::framer_config).
/// - **Inputs from the system**: [`handle_stdout`](Self::handle_stdout),
///   [`handle_stdout_eof`](Self::handle_stdout_eof),
///   [`handle_timeout`](Self::handle_timeout).
/// - **Commands from the application**: [`request`](Self::request),
///   [`notify`](Self::notify), [`cancel`](Self::cancel),
///   [`respond`](Self::respond), [`close`](Self::close).
/// - **Outputs**: [`poll_transmit`](Self::poll_transmit) (bytes for the
///   server's stdin), [`poll_event`](Self::poll_event) (completions and
///   state changes), [`poll_incoming`](Self::poll_incoming) (server→client
///   messages, from the bounded inbox), [`poll_timeout`](Self::poll_timeout).
///
/// # Polling order
///
/// After any input or command, poll until nothing is left: `poll_transmit`
/// until `None`, `poll_event` until `None`, then `poll_timeout` to arm the
/// timer. The inbox ([`poll_incoming`](Self::poll_incoming)) is the one
/// output the application may drain at its own pace: it is bounded, and the
/// reader never waits for it (G5).
#[derive(Debug)]
pub struct ClientSession {
    config: ClientConfig,
    framer: Framer,
    state: SessionState,
}

/// Everything but the framer, so the framer's callback can borrow it.
#[derive(Debug)]
struct SessionState {
    config: ClientConfig,
    /// The framer's settings: the wire limit of what this session sends,
    /// and the id scan of the lines it refuses.
    framing: FramerConfig,
    next_id: i64,
    pending: HashMap<Id, Pending>,
    cancelled: RecentIds,
    inbox: VecDeque<(Instant, Incoming)>,
    events: VecDeque<ClientEvent>,
    outgoing: Outbox<()>,
    closed: Option<CloseReason>,
    metrics: ClientMetrics,
    /// Bytes of the frame in progress at the moment a limit was crossed.
    oversized_seen: u64,
    /// Rate limit of the warnings about the server's protocol violations.
    violations: ViolationLog,
    /// A modern session's `_meta` for every request (`None`: a handshake
    /// session, or not negotiated yet).
    stamp: Option<RequestStamp>,
    /// The progress queues of requests in flight that asked for them, by
    /// request id (= their progress token); at most `max_in_flight`.
    progress: HashMap<Id, Arc<ProgressQueue>>,
}

impl ClientSession {
    /// A new session with the given limits, and the framing of the
    /// server's stdout (whose `max_frame` also limits what this session
    /// sends: one wire limit, both directions).
    pub fn new(config: ClientConfig, framer: FramerConfig) -> Self {
        Self {
            framer: Framer::new(framer.clone()),
            state: SessionState {
                config: config.clone(),
                framing: framer,
                next_id: 1,
                pending: HashMap::new(),
                cancelled: RecentIds::new(config.max_cancelled_remembered),
                inbox: VecDeque::new(),
                events: VecDeque::new(),
                outgoing: Outbox::default(),
                closed: None,
                metrics: ClientMetrics::default(),
                oversized_seen: 0,
                violations: ViolationLog::default(),
                stamp: None,
                progress: HashMap::new(),
            },
            config,
        }
    }

    // ---- getters ----

    /// The limits this session runs with.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The framing this session runs with (its `max_frame` is the wire
    /// limit in both directions).
    pub fn framer_config(&self) -> &FramerConfig {
        self.framer.config()
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> ClientMetrics {
        let mut m = self.state.metrics.clone();
        let f = self.framer.stats();
        m.stdout_bytes = f.bytes;
        m.frames = f.frames;
        m.largest_frame = f.largest_frame;
        m.oversized_frames = f.oversized;
        m.oversized_ids_missing = f.oversized_ids_missing;
        m.empty_lines = f.empty_lines;
        m
    }

    /// Requests awaiting a response.
    pub fn pending_len(&self) -> usize {
        self.state.pending.len()
    }

    /// Messages waiting in the inbox.
    pub fn inbox_len(&self) -> usize {
        self.state.inbox.len()
    }

    /// Capacity of the stdout framer's buffer, in bytes (at most
    /// `max_frame + 1`; back to small once a large response is taken as its
    /// result).
    pub fn stdout_buffer_capacity(&self) -> usize {
        self.framer.buffer_capacity()
    }

    /// Bytes queued for the server's stdin.
    pub fn outgoing_bytes(&self) -> usize {
        self.state.outgoing.queued_bytes()
    }

    /// Why the session closed, once it has.
    pub fn is_closed(&self) -> Option<&CloseReason> {
        self.state.closed.as_ref()
    }

    // ---- inputs ----

    /// Bytes read from the server's stdout, in any chunking (G4).
    pub fn handle_stdout(&mut self, now: Instant, chunk: &[u8]) {
        // After a close the frames are still counted (the record stays
        // honest about what the server wrote) but no longer acted on.
        let state = &mut self.state;
        self.framer.push(chunk, |ev| state.on_frame_event(now, ev));
        if self.framer.is_closed() && self.state.closed.is_none() {
            self.state.close(CloseReason::OversizedFrame);
        }
    }

    /// Room to read the server's stdout into, straight into the framer's
    /// buffer (no read buffer of the adapter's own, and a large response is
    /// gathered where it lands); then [`handle_stdout_read`](Self::handle_stdout_read).
    /// See [`ReadRoom`].
    pub fn stdout_room(&mut self) -> ReadRoom<'_> {
        self.framer.read_room()
    }

    /// `n` bytes were read into the room from
    /// [`stdout_room`](Self::stdout_room): as
    /// [`handle_stdout`](Self::handle_stdout) with those bytes (G4). A large
    /// response's frame is taken whole and becomes its result
    /// ([`RawResult`]): the only copy of it.
    pub fn handle_stdout_read(&mut self, now: Instant, n: usize) {
        let state = &mut self.state;
        self.framer.filled(n, |ev| state.on_frame_event(now, ev));
        if self.framer.is_closed() && self.state.closed.is_none() {
            self.state.close(CloseReason::OversizedFrame);
        }
    }

    /// The server's stdout reached end-of-file: the session closes and every
    /// pending request completes with [`RequestFailure::SessionClosed`].
    pub fn handle_stdout_eof(&mut self, now: Instant) {
        let state = &mut self.state;
        self.framer.finish(|ev| state.on_frame_event(now, ev));
        self.state.close(CloseReason::StdoutEof);
    }

    /// Time passed: requests whose deadline is at or before `now` time out
    /// (and are cancelled on the server, except `initialize`). Calling it
    /// early does nothing.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<Id> = self
            .state
            .pending
            .iter()
            .filter(|(_, p)| p.deadline.is_some_and(|d| d <= now))
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            let Some(p) = self.state.pending.remove(&id) else {
                continue;
            };
            self.state.metrics.timeouts += 1;
            let cancel_sent = if p.is_handshake {
                // Not cancelled, but a late answer is still recognised.
                self.state.remember_cancelled(id.clone());
                false
            } else {
                self.state.queue_cancel(&id, "timeout")
            };
            let after = p
                .deadline
                .unwrap_or(now)
                .saturating_duration_since(p.sent_at);
            self.state.events.push_back(ClientEvent::Completed {
                id,
                outcome: Err(RequestFailure::TimedOut { after, cancel_sent }),
            });
        }
    }

    // ---- commands ----

    /// Sends a request. `timeout` overrides the configured default; the
    /// deadline runs from `now`. Returns the id the completion will carry.
    ///
    /// `timeout`: `None` takes the configured default
    /// ([`ClientConfig::default_timeout`]); `Some(d)` waits `d`;
    /// `Some(Duration::MAX)` waits with no deadline at all (what
    /// [`Deadline::None`] gives, see [`Deadline::as_timeout`]).
    pub fn request(
        &mut self,
        now: Instant,
        method: &str,
        params: Option<&RawValue>,
        timeout: Option<Duration>,
    ) -> Result<Id, SendError> {
        self.send_request(now, method, params, timeout, None)
    }

    /// [`request`](Self::request), with the request's progress going to
    /// `progress`: its params get `_meta.progressToken` set to the request's
    /// id (params that hold a `progressToken` of their own keep it, and its
    /// updates go to the inbox), and each `notifications/progress` with that
    /// token is pushed to the queue instead of the inbox; the queue is
    /// closed when the request's completion is polled
    /// ([`poll_event`](Self::poll_event)). See [`ProgressQueue`].
    ///
    /// # Errors
    /// As [`request`](Self::request); params that are not an object:
    /// [`SendError::ParamsNotAnObject`].
    pub fn request_with_progress(
        &mut self,
        now: Instant,
        method: &str,
        params: Option<&RawValue>,
        timeout: Option<Duration>,
        progress: Arc<ProgressQueue>,
    ) -> Result<Id, SendError> {
        self.send_request(now, method, params, timeout, Some(progress))
    }

    fn send_request(
        &mut self,
        now: Instant,
        method: &str,
        params: Option<&RawValue>,
        timeout: Option<Duration>,
        progress: Option<Arc<ProgressQueue>>,
    ) -> Result<Id, SendError> {
        let s = &mut self.state;
        if s.closed.is_some() {
            return Err(SendError::Closed);
        }
        if s.pending.len() >= s.config.max_in_flight {
            return Err(SendError::TooManyInFlight {
                limit: s.config.max_in_flight,
            });
        }
        let id = Id::Number(s.next_id);
        let tokened = match &progress {
            Some(_) => Some(
                merge_meta(
                    params.map(RawValue::get),
                    &[("progressToken", &s.next_id.to_string())],
                )
                .and_then(|text| RawValue::from_string(text).ok())
                .ok_or(SendError::ParamsNotAnObject)?,
            ),
            None => None,
        };
        let params = tokened.as_deref().or(params);
        let stamped = match &s.stamp {
            Some(stamp) => Some(
                stamp
                    .apply(params.map(RawValue::get))
                    .ok_or(SendError::ParamsNotAnObject)?,
            ),
            None => None,
        };
        let params = stamped.as_deref().or(params);
        let bytes = encode_request(&id, method, params, s.framing.get_max_frame())?;
        s.check_room(bytes.len())?;
        s.next_id += 1;
        s.push_outgoing(bytes);
        s.metrics.requests_sent += 1;
        if let Some(queue) = progress {
            s.progress.insert(id.clone(), queue);
        }
        let timeout = timeout.or(s.config.default_timeout);
        s.pending.insert(
            id.clone(),
            Pending {
                is_handshake: is_handshake(method),
                sent_at: now,
                deadline: timeout
                    .filter(|t| *t != Duration::MAX)
                    .and_then(|t| now.checked_add(t)),
            },
        );
        Ok(id)
    }

    /// Stamps every request sent from now on with `stamp`'s `_meta` keys (a
    /// modern session: 2026-07-28), merged into the caller's params (their
    /// own `_meta` keys, such as a `progressToken`, kept), and refuses
    /// requests from the server (-32601, counted). `None`: neither (a
    /// handshake session, the default).
    pub fn stamp_requests(&mut self, stamp: Option<RequestStamp>) {
        self.state.stamp = stamp;
    }

    /// Whether requests are stamped (a modern session).
    pub fn is_stamped(&self) -> bool {
        self.state.stamp.is_some()
    }

    /// Sends a notification.
    pub fn notify(&mut self, method: &str, params: Option<&RawValue>) -> Result<(), SendError> {
        let s = &mut self.state;
        if s.closed.is_some() {
            return Err(SendError::Closed);
        }
        let bytes = encode_notification(method, params, s.framing.get_max_frame())?;
        s.check_room(bytes.len())?;
        s.push_outgoing(bytes);
        s.metrics.notifications_sent += 1;
        Ok(())
    }

    /// Cancels a pending request: it completes at once with
    /// [`RequestFailure::Cancelled`], `notifications/cancelled` is queued for
    /// the server (never for `initialize` or `server/discover`, which the
    /// spec forbids cancelling),
    /// and a response arriving later is ignored and counted (G6).
    pub fn cancel(&mut self, id: &Id, reason: Option<&str>) -> Result<(), CancelError> {
        let Some(p) = self.state.pending.remove(id) else {
            return Err(CancelError::NotPending(id.clone()));
        };
        let cancel_sent = !p.is_handshake
            && self.state.closed.is_none()
            && self
                .state
                .queue_cancel(id, reason.unwrap_or("cancelled by client"));
        self.state.events.push_back(ClientEvent::Completed {
            id: id.clone(),
            outcome: Err(RequestFailure::Cancelled { cancel_sent }),
        });
        Ok(())
    }

    /// Answers a server→client request taken from the inbox.
    pub fn respond(
        &mut self,
        id: &Id,
        result: Result<&RawValue, &ErrorObject>,
    ) -> Result<(), SendError> {
        let s = &mut self.state;
        if s.closed.is_some() {
            return Err(SendError::Closed);
        }
        let max = s.framing.get_max_frame();
        let bytes = match result {
            Ok(v) => encode_result(id, v, max)?,
            Err(e) => encode_error(Some(id), e, max)?,
        };
        s.check_room(bytes.len())?;
        s.push_outgoing(bytes);
        Ok(())
    }

    /// Closes the session locally: pending requests complete with
    /// [`RequestFailure::SessionClosed`]; queued bytes stay available to
    /// `poll_transmit`.
    pub fn close(&mut self) {
        self.state.close(CloseReason::Local);
    }

    // ---- outputs ----

    /// The next message to write to the server's stdin, whole.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        let ((), bytes) = self.state.outgoing.pop()?;
        self.state.metrics.stdin_bytes += bytes.len() as u64;
        Some(bytes)
    }

    /// The outgoing queue, and the message a loop is writing from it: the
    /// client driver fills its write slot here with
    /// [`poll_transmit`](Self::poll_transmit).
    pub(crate) fn outbox_mut(&mut self) -> &mut Outbox<()> {
        &mut self.state.outgoing
    }

    /// The outgoing queue, read only.
    pub(crate) fn outbox(&self) -> &Outbox<()> {
        &self.state.outgoing
    }

    /// The next completion or state change.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        let event = self.state.events.pop_front()?;
        if let ClientEvent::Completed { id, .. } = &event {
            if let Some(queue) = self.state.progress.remove(id) {
                queue.close();
            }
        }
        Some(event)
    }

    /// The next server→client message from the inbox; `now` measures how long
    /// it waited.
    #[must_use]
    pub fn poll_incoming(&mut self, now: Instant) -> Option<Incoming> {
        let (queued_at, msg) = self.state.inbox.pop_front()?;
        let waited = now.saturating_duration_since(queued_at).as_micros();
        let waited = u64::try_from(waited).unwrap_or(u64::MAX);
        let m = &mut self.state.metrics;
        m.inbox_delivered += 1;
        m.inbox_wait_total_us = m.inbox_wait_total_us.saturating_add(waited);
        m.inbox_wait_max_us = m.inbox_wait_max_us.max(waited);
        Some(msg)
    }

    /// The earliest request deadline, if any request has one.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.state.pending.values().filter_map(|p| p.deadline).min()
    }
}

impl SessionState {
    fn on_frame_event(&mut self, now: Instant, ev: FrameEvent<'_>) {
        match ev {
            FrameEvent::Frame(text) => self.on_frame(now, text),
            FrameEvent::Error(FrameError::Oversized { limit, id_hint }) => {
                self.oversized_seen = limit as u64 + 1;
                warn_violation!(
                    CLIENT_VIOLATION_TARGET,
                    self.violations,
                    now,
                    limit,
                    ?id_hint,
                    "oversized frame from server"
                );
                if let Some(id) = id_hint {
                    self.fail_oversized(id, limit);
                }
                if self.framing.get_oversized_policy() == OversizedPolicy::Close {
                    self.close(CloseReason::OversizedFrame);
                }
            }
            FrameEvent::Error(FrameError::OversizedEnded {
                discarded,
                recovered,
                hinted,
            }) => {
                self.metrics.oversized_bytes_discarded += discarded;
                self.oversized_seen = discarded;
                // The id came after the scanned prefix (e.g. `{result, jsonrpc,
                // id}`): fail its request now rather than at its deadline.
                if let (IdRecovery::Found(id), false) = (recovered, hinted) {
                    self.fail_oversized(id, self.framing.get_max_frame());
                }
            }
            FrameEvent::Error(e) => {
                let kind = match e {
                    FrameError::InvalidUtf8 { .. } => "invalid_utf8",
                    FrameError::TruncatedAtEof { .. } => "truncated_at_eof",
                    _ => "framing",
                };
                warn_violation!(CLIENT_VIOLATION_TARGET, self.violations, now, error = %e, "framing error on server stdout");
                *self.metrics.parse_errors.entry(kind).or_default() += 1;
                // G3: a refused line that names a pending request ends it now.
                if let FrameError::InvalidUtf8 {
                    len,
                    valid_up_to,
                    id: Some(id),
                } = e
                {
                    self.fail_refused(id, RequestFailure::InvalidUtf8Response { len, valid_up_to });
                }
            }
        }
    }

    /// A refused frame named `id`: its request fails now rather than at its
    /// deadline (G3).
    fn fail_refused(&mut self, id: Id, failure: RequestFailure) {
        if self.pending.remove(&id).is_some() {
            self.metrics.refused_frames_failed += 1;
            self.events.push_back(ClientEvent::Completed {
                id,
                outcome: Err(failure),
            });
        } else if self.cancelled.contains(&id) {
            self.metrics.late_responses += 1;
        }
    }

    /// The response to `id` passed the wire limit: its request fails.
    fn fail_oversized(&mut self, id: Id, limit: usize) {
        if self.pending.remove(&id).is_some() {
            self.events.push_back(ClientEvent::Completed {
                id,
                outcome: Err(RequestFailure::ResponseTooLarge {
                    limit,
                    seen: self.oversized_seen,
                }),
            });
        } else if self.cancelled.contains(&id) {
            self.metrics.late_responses += 1;
        }
    }

    fn on_frame(&mut self, now: Instant, frame: FrameText<'_>) {
        if self.closed.is_some() {
            return;
        }
        if let Some(repair) = frame.repair() {
            self.metrics.utf8_repaired += 1;
            warn_violation!(
                CLIENT_VIOLATION_TARGET,
                self.violations,
                now,
                len = repair.original_len,
                replaced = repair.replaced,
                "server stdout line was not valid UTF-8; repaired with U+FFFD"
            );
        }
        // A lent (large) frame is taken whole: a result is then the frame
        // itself, the only copy of it in the process.
        let decoded = if frame.is_lent() {
            Message::decode_owned(frame.into_string()).map_err(|(e, text)| (e, Cow::Owned(text)))
        } else {
            Message::decode(&frame).map_err(|e| (e, Cow::Borrowed(&*frame)))
        };
        let msg = match decoded {
            Ok(m) => m,
            Err((e, text)) => {
                *self.metrics.parse_errors.entry(e.kind()).or_default() += 1;
                warn_violation!(CLIENT_VIOLATION_TARGET, self.violations, now, error = %e, "undecodable frame from server");
                // A broken response still names its request: fail it now
                // rather than at its deadline (G3).
                if let Some(id) = refused_line_id(text.as_bytes(), self.framing.get_id_scan_limit())
                {
                    self.fail_refused(id, RequestFailure::MalformedResponse(e));
                }
                return;
            }
        };
        match msg {
            Message::Response(r) => {
                if self.pending.remove(&r.id).is_some() {
                    self.metrics.responses += 1;
                    self.events.push_back(ClientEvent::Completed {
                        id: r.id,
                        outcome: r.result.map_err(RequestFailure::Server),
                    });
                } else if self.cancelled.contains(&r.id) {
                    self.metrics.late_responses += 1;
                } else {
                    self.metrics.unknown_id_responses += 1;
                    tracing::debug!(id = %r.id, "response to an unknown id");
                }
            }
            Message::Request(r) => {
                self.metrics.server_requests += 1;
                if self.stamp.is_some() {
                    self.refuse_server_request(now, &r);
                } else if self.inbox.len() < self.config.inbox_capacity {
                    self.admit(now, Incoming::Request(r));
                } else {
                    match self.config.overload_policy {
                        OverloadPolicy::RejectRequests => {
                            self.metrics.overload_rejects += 1;
                            let err = ErrorObject::new(
                                SERVER_ERROR,
                                format!(
                                    "client overloaded: inbox full ({} messages)",
                                    self.config.inbox_capacity
                                ),
                            );
                            if let Ok(bytes) =
                                encode_error(Some(&r.id), &err, self.framing.get_max_frame())
                            {
                                self.push_control(bytes);
                            }
                        }
                        OverloadPolicy::CloseSession => self.close(CloseReason::Overloaded),
                    }
                }
            }
            Message::Notification(n) => {
                self.metrics.server_notifications += 1;
                if !self.progress.is_empty() && n.method == PROGRESS_METHOD {
                    if let Some((token, update)) = progress::parse(n.params.as_deref()) {
                        if let Some(queue) = self.progress.get(&token) {
                            queue.push(update);
                            self.metrics.progress_routed += 1;
                            return;
                        }
                    }
                }
                if self.inbox.len() < self.config.inbox_capacity {
                    self.admit(now, Incoming::Notification(n));
                } else {
                    match self.config.overload_policy {
                        OverloadPolicy::RejectRequests => self.metrics.overload_drops += 1,
                        OverloadPolicy::CloseSession => self.close(CloseReason::Overloaded),
                    }
                }
            }
        }
    }

    /// A modern server sends no requests: answer -32601 so it does not
    /// wait, count it, never deliver it.
    fn refuse_server_request(&mut self, now: Instant, r: &Request) {
        self.metrics.server_requests_refused += 1;
        warn_violation!(
            CLIENT_VIOLATION_TARGET,
            self.violations,
            now,
            method = %r.method,
            "request from a server in a modern session (2026-07-28 servers send none); refused"
        );
        let err = ErrorObject::new(
            METHOD_NOT_FOUND,
            format!(
                "method not found: {} (a client of protocol 2026-07-28 answers no server requests)",
                r.method
            ),
        );
        if let Ok(bytes) = encode_error(Some(&r.id), &err, self.framing.get_max_frame()) {
            self.push_control(bytes);
        }
    }

    fn admit(&mut self, now: Instant, msg: Incoming) {
        if self.inbox.is_empty() {
            self.events.push_back(ClientEvent::IncomingReady);
        }
        self.inbox.push_back((now, msg));
        self.metrics.inbox_peak_depth = self.metrics.inbox_peak_depth.max(self.inbox.len() as u64);
    }

    /// Queues `notifications/cancelled` for `id`; remembers the id so a late
    /// response is recognised. Returns whether the notification was queued.
    fn queue_cancel(&mut self, id: &Id, reason: &str) -> bool {
        self.remember_cancelled(id.clone());
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct CancelParams<'a> {
            request_id: &'a Id,
            // An empty reason is no reason: the member is left out.
            #[serde(skip_serializing_if = "str::is_empty")]
            reason: &'a str,
        }
        let params = serde_json::value::to_raw_value(&CancelParams {
            request_id: id,
            reason,
        });
        let Ok(params) = params else {
            return false;
        };
        let Ok(bytes) = encode_notification(CANCELLED, Some(&params), self.framing.get_max_frame())
        else {
            return false;
        };
        let queued = self.push_control(bytes);
        if queued {
            self.metrics.cancels_sent += 1;
        }
        queued
    }

    fn remember_cancelled(&mut self, id: Id) {
        self.cancelled.insert(id);
    }

    fn check_room(&self, len: usize) -> Result<(), SendError> {
        let queued = self.outgoing.queued_bytes();
        if self.outgoing.is_empty() || queued + len <= self.config.max_outgoing_bytes {
            Ok(())
        } else {
            Err(SendError::Backpressure {
                queued,
                limit: self.config.max_outgoing_bytes,
            })
        }
    }

    fn push_outgoing(&mut self, bytes: Vec<u8>) {
        self.outgoing.push((), bytes);
        self.metrics.outgoing_peak_bytes = self.outgoing.peak_bytes() as u64;
    }

    /// Queues a message the session writes by itself, within the control reserve.
    fn push_control(&mut self, bytes: Vec<u8>) -> bool {
        let room = self.config.max_outgoing_bytes + self.config.control_reserve_bytes;
        if self.outgoing.queued_bytes() + bytes.len() > room {
            self.metrics.control_dropped += 1;
            return false;
        }
        self.push_outgoing(bytes);
        true
    }

    fn close(&mut self, reason: CloseReason) {
        if self.closed.is_some() {
            return;
        }
        let mut ids: Vec<Id> = self.pending.drain().map(|(id, _)| id).collect();
        ids.sort();
        for id in ids {
            self.events.push_back(ClientEvent::Completed {
                id,
                outcome: Err(RequestFailure::SessionClosed),
            });
        }
        self.events.push_back(ClientEvent::Closed(reason.clone()));
        self.closed = Some(reason);
    }
}

/// Why a command failed: everything a request can end with, in one type.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The request was sent but did not produce a result.
    #[error(transparent)]
    Failed(#[from] RequestFailure),
    /// The request could not be sent.
    #[error(transparent)]
    Send(#[from] SendError),
}

impl RequestError {
    /// True for a timeout (a cancel was sent, except for `initialize`).
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Failed(RequestFailure::TimedOut { .. }))
    }

    /// The server's error object, if the server answered with one.
    pub fn server_error(&self) -> Option<&ErrorObject> {
        match self {
            Self::Failed(RequestFailure::Server(e)) => Some(e),
            _ => None,
        }
    }
}
