//! The server side of an MCP stdio session.
//!
//! [`ServerSession`] turns the bytes of this process's stdin into requests,
//! notifications and cancels for the application's handlers, and their
//! results into bytes for stdout. It does no I/O and reads no clock.
//!
//! What it guarantees (see the design's G-numbers):
//! - **G2/G3**: framing with a wire limit before any parse; an oversized
//!   request whose id can be recovered gets an error response at once, and
//!   the session keeps going.
//! - **G7**: each in-flight request has a registry entry with its state
//!   (running → responding → done, or cancelled). A cancel while running
//!   gives [`ServerEvent::Cancelled`] so the adapter aborts the handler, and
//!   its response is suppressed. A cancel after the response started is
//!   recorded, not an error. Cancels for unknown or finished ids, and for
//!   `initialize`, are ignored and counted.
//! - **G9**: a result above the wire limit becomes a JSON-RPC error response
//!   ([`wire_limit_error`]: -32000, "result exceeded the wire limit (N
//!   bytes; …); raise ServeOptions::framer_mut().max_frame(bytes)", with
//!   `data {limit, seen}`) for that id;
//!   nothing above the limit is ever written.
//!
//! # Worst-case memory
//!
//! With config `c` and the framer's `f` (the two arguments of
//! [`ServerSession::new`]): `f.max_frame` (framer)
//! `+ c.max_concurrent × f.max_frame` (responses queued, one per request)
//! `+ c.max_outgoing_bytes` (notifications and replies the session writes
//! by itself) `+ c.max_queued_notifications × f.max_frame` (events not yet
//! polled) `+ c.max_finished_remembered × ~64` (ids whose response started).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::outbox::Outbox;
use crate::session::client::{CANCELLED, INITIALIZE};
use crate::session::violation_log::{warn_violation, ViolationLog, SERVER_VIOLATION_TARGET};
use crate::wire::frame::{
    refused_line_id, FrameError, FrameEvent, Framer, FramerConfig, IdRecovery,
};
use crate::wire::idset::RecentIds;
use crate::wire::message::{
    encode_error, encode_notification, encode_result, wire_limit_error, DecodeError, EncodeError,
    ErrorObject, Id, Message, Notification, Oversized, RawValue, Request, INTERNAL_ERROR,
    INVALID_REQUEST, PARSE_ERROR, SERVER_ERROR, SERVE_MAX_FRAME_KNOB,
};

/// Limits of a [`ServerSession`].
///
/// The framing of stdin, the wire limit (`max_frame`) included, is the
/// [`FramerConfig`] given beside it to [`ServerSession::new`] (and
/// [`ServeOptions::framer_mut`] for `serve`).
///
/// [`ServeOptions::framer_mut`]: crate::ServeOptions::framer_mut
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    max_concurrent: usize,
    max_outgoing_bytes: usize,
    max_queued_notifications: usize,
    max_finished_remembered: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_concurrent: 64,
            max_outgoing_bytes: 8 * 1024 * 1024,
            max_queued_notifications: 256,
            max_finished_remembered: 1024,
        }
    }
}

impl ServerConfig {
    /// Requests handled at once (default 64). A request beyond it gets error
    /// -32000 at once. Worst case: one queued response of `max_frame` bytes each.
    pub fn max_concurrent(&mut self, n: usize) -> &mut Self {
        self.max_concurrent = n;
        self
    }

    /// Bytes of notifications and session-written error replies that may wait
    /// for stdout (default 8 MiB). Past it [`ServerSession::notify`] fails with
    /// backpressure and automatic error replies are dropped and counted.
    /// Handler responses are not counted here: they are bounded by
    /// `max_concurrent`. Worst case: this many bytes queued, plus one
    /// message of at most `max_frame` admitted into an empty queue.
    pub fn max_outgoing_bytes(&mut self, bytes: usize) -> &mut Self {
        self.max_outgoing_bytes = bytes;
        self
    }

    /// Incoming notifications that may wait for [`ServerSession::poll_event`]
    /// (default 256; worst case that many × `max_frame`). Past it they are
    /// dropped and counted.
    pub fn max_queued_notifications(&mut self, n: usize) -> &mut Self {
        self.max_queued_notifications = n;
        self
    }

    /// How many ids whose response already started are remembered, so a
    /// late cancel is recorded as such (default 1024, ~64 bytes each).
    pub fn max_finished_remembered(&mut self, n: usize) -> &mut Self {
        self.max_finished_remembered = n;
        self
    }

    /// The concurrency limit.
    pub fn get_max_concurrent(&self) -> usize {
        self.max_concurrent
    }
}

/// Something the application (the adapter's dispatcher) must act on.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServerEvent {
    /// Start a handler for this request; finish it with
    /// [`ServerSession::respond`] (or [`ServerSession::handler_ended`]).
    Request(Request),
    /// A notification other than `notifications/cancelled`.
    Notification(Notification),
    /// Abort the handler of this request (G7): its subprocesses and I/O
    /// included. Its response will be suppressed; report its end with
    /// [`ServerSession::handler_ended`] (or a `respond`, which is dropped).
    Cancelled {
        /// The cancelled request.
        id: Id,
        /// The reason the client gave, if any.
        reason: Option<String>,
    },
    /// Stdin reached end-of-file: no more requests will come. Let in-flight
    /// handlers finish (with a bounded drain), then exit.
    InputClosed,
}

/// Why a response was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RespondError {
    /// No request with this id is in flight.
    #[error("no request with id {0} is in flight")]
    NotInFlight(Id),
    /// A response for this id was already given.
    #[error("request {0} was already answered")]
    AlreadyResponded(Id),
}

/// Why a notification could not be queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotifyError {
    /// The outgoing queue is full: the client is not reading stdout.
    #[error("outgoing queue full ({queued} bytes queued, limit {limit})")]
    Backpressure {
        /// Bytes queued now.
        queued: usize,
        /// The configured limit.
        limit: usize,
    },
    /// The message would pass the wire limit; the text names the knob.
    #[error("{0}; raise {SERVE_MAX_FRAME_KNOB}")]
    Encode(#[from] EncodeError),
    /// The session is over: nothing more is written.
    #[error("the session is closed")]
    Closed,
    /// The request the notification belongs to was cancelled, or was
    /// answered: nothing more is sent for it (G7).
    #[error("its request was cancelled or answered")]
    RequestOver,
}

/// What a message queued for stdout is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Sent {
    /// The response to this request.
    Response(Id),
    /// A notification, tied to its request when it has one.
    Notification(Option<Id>),
    /// An error reply the session wrote by itself.
    Reply,
}

/// What became of a response handed to [`ServerSession::respond`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Responded {
    /// Queued for stdout.
    Queued,
    /// Queued as an error response: the result passed the wire limit (G9).
    ReplacedTooLarge,
    /// Dropped: the request was cancelled (G7).
    Suppressed,
}

/// Where one in-flight request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RequestState {
    /// The handler is running.
    Running,
    /// Cancelled while running: the handler is being aborted.
    Cancelled,
    /// The response is queued but no byte of it has left yet (a cancel now
    /// still suppresses it).
    Queued,
}

/// Counters of one server session.
#[derive(Debug, Clone, Default, Serialize)]
#[non_exhaustive]
pub struct ServerMetrics {
    /// Bytes read from stdin.
    pub stdin_bytes: u64,
    /// Complete frames received.
    pub frames: u64,
    /// Largest complete frame, in bytes.
    pub largest_frame: u64,
    /// Frames over the wire limit.
    pub oversized_frames: u64,
    /// Oversized frames whose id could not be recovered from the whole frame
    /// (absent, ambiguous, not an id, too long or not JSON): nothing could be
    /// failed or answered for them.
    pub oversized_ids_missing: u64,
    /// Frames that failed, by kind.
    pub parse_errors: BTreeMap<&'static str, u64>,
    /// Requests handed to handlers.
    pub requests: u64,
    /// Notifications handed to the application.
    pub notifications: u64,
    /// Notifications dropped because the event queue was full.
    pub notifications_dropped: u64,
    /// Requests refused because `max_concurrent` were in flight.
    pub overload_rejects: u64,
    /// Requests refused because their id was already in flight.
    pub duplicate_ids: u64,
    /// Cancels that aborted a running handler.
    pub cancels_running: u64,
    /// Cancels that removed a queued, unstarted response.
    pub cancels_before_response: u64,
    /// Cancels that came after the response had started (recorded, not an error).
    pub cancels_after_response: u64,
    /// Cancels for `initialize` (ignored, as the spec requires).
    pub cancels_initialize_ignored: u64,
    /// Cancels for unknown ids (ignored).
    pub cancels_unknown: u64,
    /// Malformed cancel notifications (ignored).
    pub cancels_malformed: u64,
    /// Responses dropped because their request was cancelled.
    pub responses_suppressed: u64,
    /// Notifications tied to a request, still queued when the client
    /// cancelled it: withdrawn, never written (G7).
    pub notifications_withdrawn: u64,
    /// Results replaced by an error because they passed the wire limit.
    pub responses_too_large: u64,
    /// Session-written error replies dropped because the queue was full.
    pub replies_dropped: u64,
    /// Responses written (handed out by `poll_transmit`).
    pub responses: u64,
    /// Bytes handed out for stdout.
    pub stdout_bytes: u64,
}

#[derive(Debug)]
struct Entry {
    state: RequestState,
    is_initialize: bool,
}

/// The server side of one MCP stdio session (sans-IO).
///
/// # Methods, by group
///
/// - **Getters**: [`metrics`](Self::metrics), [`in_flight`](Self::in_flight),
///   [`state_of`](Self::state_of), [`config`](Self::config),
///   [`framer_config`](Self::framer_config),
///   [`input_closed`](Self::input_closed).
/// - **Inputs from the system**: [`handle_stdin`](Self::handle_stdin),
///   [`handle_stdin_eof`](Self::handle_stdin_eof).
/// - **Commands from handlers**: [`respond`](Self::respond),
///   [`handler_ended`](Self::handler_ended), [`notify`](Self::notify).
/// - **Outputs**: [`poll_transmit`](Self::poll_transmit) (bytes for stdout),
///   [`poll_event`](Self::poll_event) (requests, notifications, cancels).
///
/// # Polling order
///
/// After any input or command, poll until nothing is left: `poll_event`
/// until `None` (start or abort handlers), then `poll_transmit` until `None`.
/// The server session has no timers.
#[derive(Debug)]
pub struct ServerSession {
    framer: Framer,
    state: ServerState,
}

#[derive(Debug)]
struct ServerState {
    config: ServerConfig,
    /// The framer's settings: the wire limit of everything written to
    /// stdout (G9), and the id scan of the lines it refuses.
    framing: FramerConfig,
    registry: HashMap<Id, Entry>,
    finished: RecentIds,
    events: VecDeque<ServerEvent>,
    queued_notifications: usize,
    /// Messages for stdout, each tagged with what it is (for registry
    /// bookkeeping, and so a cancel withdraws what belongs to its request).
    outgoing: Outbox<Sent>,
    /// Bytes of notifications and session-written replies in `outgoing`.
    control_bytes: usize,
    input_closed: bool,
    metrics: ServerMetrics,
    /// Rate limit of the warnings about the client's protocol violations.
    violations: ViolationLog,
}

impl ServerSession {
    /// A new session with the given limits, and the framing of stdin (whose
    /// `max_frame` also limits every message written to stdout: one wire
    /// limit, both directions).
    pub fn new(config: ServerConfig, framer: FramerConfig) -> Self {
        Self {
            framer: Framer::new(framer.clone()),
            state: ServerState {
                finished: RecentIds::new(config.max_finished_remembered),
                config,
                framing: framer,
                registry: HashMap::new(),
                events: VecDeque::new(),
                queued_notifications: 0,
                outgoing: Outbox::default(),
                control_bytes: 0,
                input_closed: false,
                metrics: ServerMetrics::default(),
                violations: ViolationLog::default(),
            },
        }
    }

    // ---- getters ----

    /// The limits this session runs with.
    pub fn config(&self) -> &ServerConfig {
        &self.state.config
    }

    /// The framing this session runs with (its `max_frame` is the wire
    /// limit in both directions).
    pub fn framer_config(&self) -> &FramerConfig {
        self.framer.config()
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> ServerMetrics {
        let mut m = self.state.metrics.clone();
        let f = self.framer.stats();
        m.stdin_bytes = f.bytes;
        m.frames = f.frames;
        m.largest_frame = f.largest_frame;
        m.oversized_frames = f.oversized;
        m.oversized_ids_missing = f.oversized_ids_missing;
        m
    }

    /// Requests in the registry (running, being cancelled, or with a queued response).
    pub fn in_flight(&self) -> usize {
        self.state.registry.len()
    }

    /// Where request `id` stands, if it is in the registry.
    pub fn state_of(&self, id: &Id) -> Option<RequestState> {
        self.state.registry.get(id).map(|e| e.state)
    }

    /// Bytes queued for stdout, not yet handed out by
    /// [`poll_transmit`](Self::poll_transmit).
    pub fn outgoing_bytes(&self) -> usize {
        self.state.outgoing.queued_bytes()
    }

    /// Whether stdin has reached end-of-file.
    pub fn input_closed(&self) -> bool {
        self.state.input_closed
    }

    // ---- inputs ----

    /// Bytes read from stdin, in any chunking (G4).
    pub fn handle_stdin(&mut self, now: Instant, chunk: &[u8]) {
        if self.state.input_closed || self.framer.is_closed() {
            return;
        }
        let state = &mut self.state;
        self.framer.push(chunk, |ev| state.on_frame_event(now, ev));
        if self.framer.is_closed() {
            self.state.end_input();
        }
    }

    /// Stdin reached end-of-file.
    pub fn handle_stdin_eof(&mut self, now: Instant) {
        let state = &mut self.state;
        self.framer.finish(|ev| state.on_frame_event(now, ev));
        self.state.end_input();
    }

    // ---- commands ----

    /// The handler of `id` finished with `result` (or an error object).
    ///
    /// A result above the wire limit is replaced by error -32603 (G9). A
    /// response for a cancelled request is dropped (G7). Either way the
    /// request leaves the running state.
    pub fn respond(
        &mut self,
        id: &Id,
        result: Result<&RawValue, &ErrorObject>,
    ) -> Result<Responded, RespondError> {
        let s = &mut self.state;
        let Some(entry) = s.registry.get_mut(id) else {
            return Err(RespondError::NotInFlight(id.clone()));
        };
        match entry.state {
            RequestState::Queued => return Err(RespondError::AlreadyResponded(id.clone())),
            RequestState::Cancelled => {
                s.registry.remove(id);
                s.metrics.responses_suppressed += 1;
                return Ok(Responded::Suppressed);
            }
            RequestState::Running => entry.state = RequestState::Queued,
        }
        let max = s.framing.get_max_frame();
        let encoded = match result {
            Ok(v) => encode_result(id, v, max),
            Err(e) => encode_error(Some(id), e, max),
        };
        let (bytes, how) = match encoded {
            Ok(b) => (b, Responded::Queued),
            Err(EncodeError::TooLarge { limit }) => {
                s.metrics.responses_too_large += 1;
                // The encoder stops at the limit: the size is known to pass it.
                let err = wire_limit_error(
                    Oversized::Result,
                    limit,
                    limit as u64 + 1,
                    SERVE_MAX_FRAME_KNOB,
                );
                // A fixed short message always fits any sane limit; if the
                // limit is absurdly small even this cannot be sent.
                match encode_error(Some(id), &err, max) {
                    Ok(b) => (b, Responded::ReplacedTooLarge),
                    Err(_) => {
                        s.registry.remove(id);
                        s.metrics.replies_dropped += 1;
                        return Ok(Responded::ReplacedTooLarge);
                    }
                }
            }
        };
        s.outgoing.push(Sent::Response(id.clone()), bytes);
        Ok(how)
    }

    /// The handler of `id` ended without responding (it was aborted after a
    /// cancel, or it failed). A cancelled request leaves the registry; a
    /// running one is answered with error -32603 so the client is not left
    /// waiting. Unknown ids are ignored.
    pub fn handler_ended(&mut self, id: &Id) {
        match self.state.registry.get(id).map(|e| e.state) {
            Some(RequestState::Cancelled) => {
                self.state.registry.remove(id);
            }
            Some(RequestState::Running) => {
                let err = ErrorObject::new(INTERNAL_ERROR, "handler ended without a response");
                // Cannot fail: the entry is running.
                let _ = self.respond(id, Err(&err));
            }
            Some(RequestState::Queued) | None => {}
        }
    }

    /// Queues a server→client notification not tied to a request (list
    /// changes).
    pub fn notify(&mut self, method: &str, params: Option<&RawValue>) -> Result<(), NotifyError> {
        self.state
            .queue_notification(Sent::Notification(None), method, params)
    }

    /// Queues a notification tied to the in-flight request `id` (progress,
    /// logging). A cancel of `id` withdraws it while it is still queued
    /// (counted in [`ServerMetrics::notifications_withdrawn`]); once `id`
    /// was cancelled or left the registry it is refused with
    /// [`NotifyError::RequestOver`] (G7: nothing for a cancelled request
    /// leaves after the cancel).
    pub fn notify_related(
        &mut self,
        id: &Id,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<(), NotifyError> {
        match self.state.registry.get(id).map(|e| e.state) {
            Some(RequestState::Running) => {}
            _ => return Err(NotifyError::RequestOver),
        }
        let tag = Sent::Notification(Some(id.clone()));
        self.state.queue_notification(tag, method, params)
    }

    // ---- outputs ----

    /// The next message for stdout, whole. Once a response's bytes leave
    /// here its request counts as responding: a later cancel is recorded,
    /// not acted on (G7).
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        let s = &mut self.state;
        let (sent, bytes) = s.outgoing.pop()?;
        s.metrics.stdout_bytes += bytes.len() as u64;
        match sent {
            Sent::Response(id) => {
                s.registry.remove(&id);
                s.metrics.responses += 1;
                s.remember_finished(id);
            }
            Sent::Notification(_) | Sent::Reply => s.control_bytes -= bytes.len(),
        }
        Some(bytes)
    }

    /// The outgoing queue, and the message a loop is writing from it: the
    /// serve lifecycle fills its write slot here with
    /// [`poll_transmit`](Self::poll_transmit).
    pub(crate) fn outbox_mut(&mut self) -> &mut Outbox<Sent> {
        &mut self.state.outgoing
    }

    /// The outgoing queue, read only.
    pub(crate) fn outbox(&self) -> &Outbox<Sent> {
        &self.state.outgoing
    }

    /// The next request, notification, cancel or end of input.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        let ev = self.state.events.pop_front()?;
        if matches!(ev, ServerEvent::Notification(_)) {
            self.state.queued_notifications -= 1;
        }
        Some(ev)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CancelParams {
    request_id: Id,
    #[serde(default)]
    reason: Option<String>,
}

impl ServerState {
    /// Queues a notification, within `max_outgoing_bytes`.
    fn queue_notification(
        &mut self,
        tag: Sent,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<(), NotifyError> {
        let bytes = encode_notification(method, params, self.framing.get_max_frame())?;
        if self.control_bytes > 0
            && self.control_bytes + bytes.len() > self.config.max_outgoing_bytes
        {
            return Err(NotifyError::Backpressure {
                queued: self.control_bytes,
                limit: self.config.max_outgoing_bytes,
            });
        }
        self.control_bytes += bytes.len();
        self.outgoing.push(tag, bytes);
        Ok(())
    }

    fn on_frame_event(&mut self, now: Instant, ev: FrameEvent<'_>) {
        match ev {
            FrameEvent::Frame(text) => self.on_frame(now, &text),
            FrameEvent::Error(FrameError::Oversized { limit, id_hint }) => {
                warn_violation!(
                    SERVER_VIOLATION_TARGET,
                    self.violations,
                    now,
                    limit,
                    ?id_hint,
                    "oversized request on stdin"
                );
                if let Some(id) = id_hint {
                    self.reply_oversized(&id, limit as u64 + 1);
                }
            }
            FrameEvent::Error(FrameError::OversizedEnded {
                discarded,
                recovered: IdRecovery::Found(id),
                hinted: false,
            }) => {
                // The id came after the scanned prefix: answer it now.
                self.reply_oversized(&id, discarded);
            }
            FrameEvent::Error(FrameError::OversizedEnded { .. }) => {}
            FrameEvent::Error(e) => {
                let kind = match e {
                    FrameError::InvalidUtf8 { .. } => "invalid_utf8",
                    FrameError::TruncatedAtEof { .. } => "truncated_at_eof",
                    _ => "framing",
                };
                *self.metrics.parse_errors.entry(kind).or_default() += 1;
                warn_violation!(SERVER_VIOLATION_TARGET, self.violations, now, error = %e, "framing error on stdin");
                if let FrameError::InvalidUtf8 { id, .. } = &e {
                    let err = ErrorObject::new(PARSE_ERROR, "invalid UTF-8");
                    self.reply_error(id.as_ref(), &err);
                }
            }
        }
    }

    /// The request `id` passed the wire limit: it gets an error.
    fn reply_oversized(&mut self, id: &Id, seen: u64) {
        let limit = self.framing.get_max_frame();
        let err = wire_limit_error(Oversized::Request, limit, seen, SERVE_MAX_FRAME_KNOB);
        self.reply_error(Some(id), &err);
    }

    fn on_frame(&mut self, now: Instant, text: &str) {
        let msg = match Message::decode(text) {
            Ok(m) => m,
            Err(e) => {
                *self.metrics.parse_errors.entry(e.kind()).or_default() += 1;
                warn_violation!(SERVER_VIOLATION_TARGET, self.violations, now, error = %e, "undecodable frame on stdin");
                let (code, id) = match e {
                    DecodeError::Json { .. } => (PARSE_ERROR, None),
                    _ => {
                        let scan = self.framing.get_id_scan_limit();
                        (INVALID_REQUEST, refused_line_id(text.as_bytes(), scan))
                    }
                };
                self.reply_error(id.as_ref(), &ErrorObject::new(code, e.to_string()));
                return;
            }
        };
        match msg {
            Message::Request(r) => self.on_request(r),
            Message::Notification(n) if n.method == CANCELLED => self.on_cancel(n),
            Message::Notification(n) => {
                if self.queued_notifications >= self.config.max_queued_notifications {
                    self.metrics.notifications_dropped += 1;
                    return;
                }
                self.metrics.notifications += 1;
                self.queued_notifications += 1;
                self.events.push_back(ServerEvent::Notification(n));
            }
            Message::Response(r) => {
                // This session sends no requests of its own yet.
                tracing::debug!(id = %r.id, "response from client to an unknown request");
                *self
                    .metrics
                    .parse_errors
                    .entry("unexpected_response")
                    .or_default() += 1;
            }
        }
    }

    fn on_request(&mut self, r: Request) {
        if self.registry.contains_key(&r.id) {
            self.metrics.duplicate_ids += 1;
            let err = ErrorObject::new(INVALID_REQUEST, "duplicate request id in flight");
            self.reply_error(Some(&r.id), &err);
            return;
        }
        if self.registry.len() >= self.config.max_concurrent {
            self.metrics.overload_rejects += 1;
            let err = ErrorObject::new(
                SERVER_ERROR,
                format!(
                    "server overloaded: {} requests in flight",
                    self.config.max_concurrent
                ),
            );
            self.reply_error(Some(&r.id), &err);
            return;
        }
        self.metrics.requests += 1;
        self.registry.insert(
            r.id.clone(),
            Entry {
                state: RequestState::Running,
                is_initialize: r.method == INITIALIZE,
            },
        );
        self.events.push_back(ServerEvent::Request(r));
    }

    fn on_cancel(&mut self, n: Notification) {
        let parsed = n
            .params
            .as_deref()
            .and_then(|p| serde_json::from_str::<CancelParams>(p.get()).ok());
        let Some(CancelParams { request_id, reason }) = parsed else {
            self.metrics.cancels_malformed += 1;
            return;
        };
        let Some(entry) = self.registry.get_mut(&request_id) else {
            if self.finished.contains(&request_id) {
                self.metrics.cancels_after_response += 1;
            } else {
                self.metrics.cancels_unknown += 1;
            }
            return;
        };
        if entry.is_initialize {
            self.metrics.cancels_initialize_ignored += 1;
            return;
        }
        match entry.state {
            RequestState::Running => {
                entry.state = RequestState::Cancelled;
                self.metrics.cancels_running += 1;
                // Its notifications still queued must not leave after the cancel (G7).
                let related = Sent::Notification(Some(request_id.clone()));
                let (n, freed) = self.outgoing.retain(|sent| *sent != related);
                self.control_bytes -= freed;
                self.metrics.notifications_withdrawn += n as u64;
                self.events.push_back(ServerEvent::Cancelled {
                    id: request_id,
                    reason,
                });
            }
            RequestState::Queued => {
                // The handler is done but no byte has left: drop the response.
                self.registry.remove(&request_id);
                let response = Sent::Response(request_id.clone());
                self.outgoing.retain(|sent| *sent != response);
                self.metrics.cancels_before_response += 1;
                self.metrics.responses_suppressed += 1;
            }
            RequestState::Cancelled => {}
        }
    }

    /// Queues an error reply written by the session itself (overload, parse
    /// errors), within `max_outgoing_bytes`.
    fn reply_error(&mut self, id: Option<&Id>, err: &ErrorObject) {
        let Ok(bytes) = encode_error(id, err, self.framing.get_max_frame()) else {
            self.metrics.replies_dropped += 1;
            return;
        };
        if self.control_bytes + bytes.len() > self.config.max_outgoing_bytes {
            self.metrics.replies_dropped += 1;
            return;
        }
        self.control_bytes += bytes.len();
        self.outgoing.push(Sent::Reply, bytes);
    }

    fn remember_finished(&mut self, id: Id) {
        self.finished.insert(id);
    }

    fn end_input(&mut self) {
        if !self.input_closed {
            self.input_closed = true;
            self.events.push_back(ServerEvent::InputClosed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::session::violation_log::{
        VIOLATION_WARNINGS_PER_INTERVAL, VIOLATION_WARNING_INTERVAL,
    };

    /// Counts the WARN events of the thread it is the default for, and the
    /// largest `suppressed` among them.
    #[derive(Default)]
    struct WarnCount {
        warns: std::sync::atomic::AtomicU64,
        max_suppressed: std::sync::atomic::AtomicU64,
    }

    struct Suppressed(u64);
    impl tracing::field::Visit for Suppressed {
        fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
            if field.name() == "suppressed" {
                self.0 = value;
            }
        }
        fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
    }

    impl tracing::Subscriber for &'static WarnCount {
        fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
            *m.level() <= tracing::Level::WARN
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, e: &tracing::Event<'_>) {
            use std::sync::atomic::Ordering::Relaxed;
            let mut s = Suppressed(0);
            e.record(&mut s);
            self.warns.fetch_add(1, Relaxed);
            self.max_suppressed.fetch_max(s.0, Relaxed);
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    #[test]
    fn a_server_session_fed_garbage_warns_at_the_limit_then_reports_the_rest() {
        use std::sync::atomic::Ordering::Relaxed;
        let count: &'static WarnCount = Box::leak(Box::default());
        let t0 = Instant::now();
        let mut s = ServerSession::new(ServerConfig::default(), crate::FramerConfig::default());
        tracing::subscriber::with_default(count, || {
            for i in 0..1000u64 {
                s.handle_stdin(t0 + Duration::from_millis(i), b"not json\n");
            }
        });
        assert_eq!(
            count.warns.load(Relaxed),
            u64::from(VIOLATION_WARNINGS_PER_INTERVAL)
        );
        assert_eq!(count.max_suppressed.load(Relaxed), 0);
        let later = t0 + VIOLATION_WARNING_INTERVAL + Duration::from_secs(1);
        tracing::subscriber::with_default(count, || {
            s.handle_stdin(later, b"{\"jsonrpc\":\"2.0\"\n");
        });
        assert_eq!(
            count.warns.load(Relaxed),
            u64::from(VIOLATION_WARNINGS_PER_INTERVAL) + 1
        );
        assert_eq!(
            count.max_suppressed.load(Relaxed),
            1000 - u64::from(VIOLATION_WARNINGS_PER_INTERVAL)
        );
        // Every violation is still counted in the metrics.
        let parse_errors: u64 = s.metrics().parse_errors.values().sum();
        assert_eq!(parse_errors, 1001);
    }
}
