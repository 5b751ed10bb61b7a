//! The lifecycle of `serve`: a [`ServerSession`] plus every decision the
//! three adapters' serve loops used to make on their own.
//!
//! [`ServeLifecycle`] decides when a handler starts, is cancelled or is
//! abandoned; which message is being written and how far it got; what a
//! write error means; how long in-flight work may drain after stdin closes;
//! and when the loop is over. The adapters only wait — for input, for a
//! handler's end, for the pipe to accept bytes, for the next deadline — and
//! make the system calls. So all three behave the same on a write error, at
//! the drain deadline and with a client that stops reading (G1).
//!
//! # The loop every adapter runs
//!
//! 1. Feed one input: [`handle_input`] with a [`ServeInput`] (a read of
//!    stdin, a write or flush result, stdout writable again, a handler's
//!    end or notification, the time).
//! 2. Drain [`poll_output`] until it says [`ServeOutput::Timeout`] (or
//!    [`ServeOutput::Finished`]): actions for the handlers, the end of the
//!    input, the bytes to write, the flush, in the order the lifecycle gives.
//! 3. Wait for whichever comes first — never for the write alone: a client
//!    that stops reading stdout must not stop us reading stdin (G1).
//!
//! [`handle_input`]: ServeLifecycle::handle_input
//! [`poll_output`]: ServeLifecycle::poll_output
//!
//! # The protocol basics
//!
//! By default the lifecycle answers `initialize` (with version
//! negotiation), `ping` and methods the server does not serve by itself,
//! from the [`ServerBasics`] in the options, and with tools given also
//! `tools/list` and calls of unknown tools (see [`crate::session::basics`]). Those
//! requests never become a [`ServeAction::Start`]; their answers are queued
//! like a handler's response. [`ServerBasics::passthrough`] is the way out:
//! every request starts a handler.
//!
//! # Worst-case memory
//!
//! That of the [`ServerSession`] (see [`crate::session::server`]) and of the
//! [`ServerBasics`] (see [`crate::session::basics`]; about 1.3 MiB at most), plus one message
//! being written (at most `max_frame` bytes; it was taken from the session's
//! queue, so it is not counted twice), plus one id per running handler (at
//! most `max_concurrent`).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::io_result::{Note, NoteLevel, ReadResult, WriteResult};
use crate::outbox::Outgoing;
use crate::session::basics::{
    modern_result, BasicsMetrics, BasicsRouter, ClientHello, Revision, Route, ServerBasics,
    CACHEABLE_METHODS,
};
use crate::session::budget::ResultBudget;
use crate::session::handshake::Implementation;
use crate::session::server::{
    NotifyError, RequestState, ServerConfig, ServerEvent, ServerMetrics, ServerSession,
};
use crate::wire::frame::FramerConfig;
use crate::wire::message::{ErrorObject, Id, Notification, RawValue, Request};

/// How long in-flight handlers may run after stdin closes (default of
/// [`ServeOptions::drain_timeout`]).
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// After the drain deadline, how long output still queued (the answers of
/// the handlers just abandoned among it) may wait for a client that does not
/// read before it is given up and counted in
/// [`ServeReport::unwritten_at_exit`].
pub const EXIT_WRITE_GRACE: Duration = Duration::from_secs(1);

/// Room left under the wire limit for the JSON-RPC envelope of a result
/// (`{"jsonrpc":"2.0","id":…,"result":…}`, a long string id included): a
/// handler's [`ResultBudget`] is `max_frame` minus this.
pub const RESULT_ENVELOPE_HEADROOM: usize = 1024;

/// Limits of `serve`, the same for every adapter.
///
/// It holds the knobs of the loop itself (the drain deadline, the wait for
/// helpers) and one config per part, each edited in place with `name_mut()`
/// and read with `get_name()`: the protocol session
/// ([`session_mut`](Self::session_mut)), the framing of stdin and the wire
/// limit ([`framer_mut`](Self::framer_mut)) and what `serve` answers by
/// itself ([`basics_mut`](Self::basics_mut)). Each knob has one setter, on
/// the config that holds it; none holds a config of its own.
///
/// ```
/// use std::time::Duration;
/// use mcp_stdio_core::ServeOptions;
///
/// let mut options = ServeOptions::default();
/// options.drain_timeout(Duration::from_secs(2));
/// options.framer_mut().max_frame(1 << 20);
/// options
///     .session_mut()
///     .max_concurrent(16)
///     .max_queued_notifications(64);
/// assert_eq!(options.get_framer().get_max_frame(), 1 << 20);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServeOptions {
    session: ServerConfig,
    framer: FramerConfig,
    drain_timeout: Duration,
    helper_grace: Duration,
    basics: ServerBasics,
}

/// Default [`ServeOptions::helper_grace`]: 10 s, more than a helper's default
/// TERM grace, KILL grace and drain deadline together.
pub const DEFAULT_HELPER_GRACE: Duration = Duration::from_secs(10);

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            session: ServerConfig::default(),
            framer: FramerConfig::default(),
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            helper_grace: DEFAULT_HELPER_GRACE,
            basics: ServerBasics::default(),
        }
    }
}

impl ServeOptions {
    /// Edits the session's limits in place (see [`ServerConfig`]: 64
    /// requests at once, 8 MiB of notifications and replies queued, 256
    /// notifications waiting).
    pub fn session_mut(&mut self) -> &mut ServerConfig {
        &mut self.session
    }

    /// Edits the framing of stdin in place (see [`FramerConfig`]): the wire
    /// limit `max_frame` (default 16 MiB,
    /// [`DEFAULT_MAX_FRAME`](crate::DEFAULT_MAX_FRAME)), which also limits
    /// every message written to stdout (G9) and sizes each handler's
    /// [`ResultBudget`], the id scan of an oversized line (256 B), the
    /// oversized policy (discard) and the invalid UTF-8 policy (repair).
    /// Worst case: one incoming frame of `max_frame` buffered, and one
    /// response of this size per request in flight.
    pub fn framer_mut(&mut self) -> &mut FramerConfig {
        &mut self.framer
    }

    /// Sets how long in-flight handlers may run after stdin closes before
    /// they are aborted (default [`DEFAULT_DRAIN_TIMEOUT`], 5 s). Output
    /// still queued then gets [`EXIT_WRITE_GRACE`] more. Memory: none.
    pub fn drain_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.drain_timeout = timeout;
        self
    }

    /// Sets how long `serve`, once its loop is over, still waits for helper
    /// runs its handlers started (`run_helper`) to finish their own shutdown
    /// — `SIGTERM`, grace, `SIGKILL`, drain — and write their final records,
    /// before it returns (default [`DEFAULT_HELPER_GRACE`], 10 s). Runs
    /// still going then are counted in
    /// [`ServeReport::helpers_unfinished_at_exit`]. Memory: none.
    pub fn helper_grace(&mut self, grace: Duration) -> &mut Self {
        self.helper_grace = grace;
        self
    }

    /// The session's limits.
    pub fn get_session(&self) -> &ServerConfig {
        &self.session
    }

    /// The framing of stdin, and the wire limit.
    pub fn get_framer(&self) -> &FramerConfig {
        &self.framer
    }

    /// The drain deadline after stdin closes.
    pub fn get_drain_timeout(&self) -> Duration {
        self.drain_timeout
    }

    /// The wait for helper runs at the end.
    pub fn get_helper_grace(&self) -> Duration {
        self.helper_grace
    }

    /// Edits what the server says about itself, and whether `serve` answers
    /// `initialize`, `ping`, unknown methods and (with tools given)
    /// `tools/list` from it by itself (default [`ServerBasics::default`]:
    /// on, server info `mcp-stdio`, capabilities `{}`, so only `initialize`
    /// and `ping` are served until you declare more). The way out, where the
    /// handler sees every request: `answer_basics(false)`, or
    /// `*options.basics_mut() = ServerBasics::passthrough()`. Bounded as
    /// `crate::session::basics` says (about 1.3 MiB at most).
    pub fn basics_mut(&mut self) -> &mut ServerBasics {
        &mut self.basics
    }

    /// What `serve` answers by itself.
    pub fn get_basics(&self) -> &ServerBasics {
        &self.basics
    }
}

/// How a `serve` loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ServeEnd {
    /// Not over yet.
    Running,
    /// Stdin closed and everything drained (or was abandoned at the deadline).
    InputClosed,
    /// Writing stdout failed (the client went away): every handler was
    /// aborted at once and stdin is no longer read. The adapter returns the
    /// write error.
    WriteFailed,
}

/// What a finished `serve` observed.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ServeReport {
    /// The session's counters.
    pub metrics: ServerMetrics,
    /// How the loop ended.
    pub end: ServeEnd,
    /// Handlers still running when the drain deadline passed (or when a
    /// write failed): their cancel tokens were fired and they were aborted
    /// (a thread that cannot be aborted is left to finish on its own).
    pub aborted_at_exit: u64,
    /// Notifications from handlers refused because the outgoing queue was
    /// full (the client was not reading stdout) or they passed the wire limit.
    pub notifications_refused: u64,
    /// Bytes of output given up at exit: the client did not read them within
    /// the drain deadline plus [`EXIT_WRITE_GRACE`], or the write failed.
    pub unwritten_at_exit: u64,
    /// Peak bytes waiting for stdout: the message being written plus the
    /// session's queue.
    pub outgoing_peak: u64,
    /// Helper runs (`run_helper`) still alive in the process when `serve`
    /// returned, after waiting [`ServeOptions::helper_grace`] for them (set
    /// by the adapter; 0 from the core).
    pub helpers_unfinished_at_exit: u64,
    /// Handlers' notifications tied to a request the client had cancelled
    /// (G7): dropped, so nothing for that request leaves `serve` after the
    /// cancel arrived. Notifications of it still queued when the cancel
    /// came are withdrawn too (counted in the session's
    /// [`ServerMetrics::notifications_withdrawn`]).
    pub notifications_after_cancel_dropped: u64,
    /// Handlers' notifications tied to a request already answered (or
    /// abandoned, or unknown): dropped.
    pub notifications_after_response_dropped: u64,
    /// The protocol version `initialize` was answered with by `serve`
    /// (`None` before, or with the basics off).
    pub protocol_version: Option<&'static str>,
    /// Whether the session began the 2026-07-28 way (`server/discover` or a
    /// modern request before any `initialize`).
    pub began_modern: bool,
    /// Who the client said it was in that `initialize`, else in the
    /// `_meta` of the last modern request.
    pub client_info: Option<Implementation>,
    /// What `serve` answered by itself (all 0 with the basics off).
    pub basics: BasicsMetrics,
}

/// What the adapter must do for the application's handlers.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServeAction {
    /// Start a handler for this request, with a fresh cancel token. Report
    /// its end with [`ServeInput::HandlerFinished`] or
    /// [`ServeInput::HandlerAborted`].
    Start(Request),
    /// The client cancelled this request (G7): fire its token and abort the
    /// handler with everything it owns. Still report its end; the response
    /// is suppressed.
    Cancel {
        /// The request.
        id: Id,
        /// The reason the client gave, if any.
        reason: Option<String>,
    },
    /// The loop is ending without this handler (drain deadline passed, or
    /// stdout failed): fire its token and abort it. Its request was answered
    /// with an error; an end reported later is ignored.
    Abort(Id),
    /// A notification for the application's notification handler.
    Notification(Notification),
    /// Log this (through something that cannot block the loop).
    Note(Note),
}

/// One thing that happened to the serve loop: the one way into
/// [`ServeLifecycle`] ([`ServeLifecycle::handle_input`]). After each, drain
/// [`ServeLifecycle::poll_output`] until it says [`ServeOutput::Timeout`]
/// or [`ServeOutput::Finished`].
#[non_exhaustive]
pub enum ServeInput<'a> {
    /// A read of stdin into `buf` returned `result` (the rule:
    /// [`ReadResult`]): bytes are taken; an end or an error ends the input
    /// ([`ServeOutput::CloseInput`] follows).
    Read {
        /// What the read system call returned.
        result: std::io::Result<usize>,
        /// The buffer it read into.
        buf: &'a [u8],
    },
    /// A write of [`ServeOutput::Write`] returned this (the rule:
    /// [`WriteResult`]; `WouldBlock` parks the output until
    /// [`Writable`](Self::Writable)). A failure ends the loop
    /// ([`ServeEnd::WriteFailed`]); its error is kept for
    /// [`ServeLifecycle::take_write_error`].
    Written(std::io::Result<usize>),
    /// A flush of [`ServeOutput::Flush`] returned this; as `Written`.
    Flushed(std::io::Result<()>),
    /// Stdout may take bytes again (after a `WouldBlock`).
    Writable,
    /// The handler of `id` returned `result`. A cancelled request's
    /// response is suppressed (G7); a result above the wire limit becomes
    /// an error (G9); an end for a handler already abandoned is ignored.
    HandlerFinished {
        /// The request.
        id: &'a Id,
        /// Its result or error.
        result: Result<&'a RawValue, &'a ErrorObject>,
    },
    /// The handler of `id` ended without a result (aborted after a cancel,
    /// panicked, or could not start): a running request is answered with an
    /// error so the client is not left waiting.
    HandlerAborted(&'a Id),
    /// A handler's notification for the client not tied to a request (a
    /// list change). Refused and counted (with a [`ServeAction::Note`]) when
    /// the outgoing queue is full — the client is not reading stdout — or
    /// when it would pass the wire limit; [`ServeLifecycle::notify`] says
    /// which to a caller that wants to know.
    Notify {
        /// The method.
        method: &'a str,
        /// Its params.
        params: Option<&'a RawValue>,
    },
    /// A handler's notification tied to its request `id` (progress,
    /// logging): as [`Notify`](Self::Notify), and dropped (counted in
    /// [`ServeReport::notifications_after_cancel_dropped`] or
    /// [`ServeReport::notifications_after_response_dropped`]) once that
    /// request was cancelled or answered ([`ServeLifecycle::notify_related`]).
    NotifyRelated {
        /// The request it belongs to.
        id: &'a Id,
        /// The method.
        method: &'a str,
        /// Its params.
        params: Option<&'a RawValue>,
    },
    /// No more requests are taken (the service behind the loop closed): as
    /// an end of stdin, without a read.
    StopReading,
    /// Time passed: at the drain deadline running handlers are aborted; at
    /// the exit deadline unwritten output is given up. Early, it does nothing.
    Timeout,
}

impl std::fmt::Debug for ServeInput<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Read { result, .. } => f.debug_struct("Read").field("result", result).finish(),
            Self::Written(r) => f.debug_tuple("Written").field(r).finish(),
            Self::Flushed(r) => f.debug_tuple("Flushed").field(r).finish(),
            Self::Writable => f.write_str("Writable"),
            Self::HandlerFinished { id, .. } => f
                .debug_struct("HandlerFinished")
                .field("id", id)
                .finish_non_exhaustive(),
            Self::HandlerAborted(id) => f.debug_tuple("HandlerAborted").field(id).finish(),
            Self::Notify { method, .. } => f
                .debug_struct("Notify")
                .field("method", method)
                .finish_non_exhaustive(),
            Self::NotifyRelated { id, method, .. } => f
                .debug_struct("NotifyRelated")
                .field("id", id)
                .field("method", method)
                .finish_non_exhaustive(),
            Self::StopReading => f.write_str("StopReading"),
            Self::Timeout => f.write_str("Timeout"),
        }
    }
}

/// What the serve loop asks of its adapter, in the order it must happen,
/// from [`ServeLifecycle::poll_output`].
#[derive(Debug)]
pub enum ServeOutput<'a> {
    /// Do this for the handlers.
    Action(ServeAction),
    /// Stdin is at its end (or no longer read): stop reading it. Once.
    CloseInput,
    /// Write what stdout takes of these bytes (or take them whole for a
    /// writer thread) and report [`ServeInput::Written`]; never wait for it.
    Write(Outgoing<'a>),
    /// A whole message went out: flush a buffering writer and report
    /// [`ServeInput::Flushed`] (a pipe reports `Ok` at once).
    Flush,
    /// The loop is over: return [`ServeLifecycle::report`] (or the write
    /// error, after [`ServeEnd::WriteFailed`]). It repeats.
    Finished,
    /// Nothing more until the next input: wait for I/O, a handler, or this
    /// instant, then feed [`ServeInput::Timeout`]. `None`: no deadline.
    Timeout(Option<Instant>),
}

/// A handler running: the revision its request is handled under.
#[derive(Debug)]
struct Running {
    revision: Revision,
    /// Its method is one of [`CACHEABLE_METHODS`].
    cacheable: bool,
}

/// The serve loop's decisions, without I/O (see the module docs).
#[derive(Debug)]
pub struct ServeLifecycle {
    session: ServerSession,
    /// Answers the protocol basics before a handler is started.
    router: BasicsRouter,
    drain_timeout: Duration,
    /// Handlers started whose end was not reported and that were not
    /// abandoned, with the revision each request is handled under. At most
    /// `max_concurrent`: the session admits no more.
    running: HashMap<Id, Running>,
    actions: VecDeque<ServeAction>,
    /// The message being written.
    /// Stdout said `WouldBlock`; nothing is offered until it is writable.
    parked: bool,
    /// `CloseInput` was given.
    input_closed: bool,
    flush_due: bool,
    input_open: bool,
    drain_deadline: Option<Instant>,
    exit_deadline: Option<Instant>,
    end: ServeEnd,
    aborted_at_exit: u64,
    notifications_refused: u64,
    notifications_after_cancel_dropped: u64,
    notifications_after_response_dropped: u64,
    unwritten_at_exit: u64,
    outgoing_peak: u64,
    /// What failed the write, for the loop to return.
    write_error: Option<std::io::Error>,
}

impl ServeLifecycle {
    /// A new serve loop with `options`.
    pub fn new(options: &ServeOptions) -> Self {
        let largest = options.basics.largest_answer();
        let budget = options
            .framer
            .get_max_frame()
            .saturating_sub(RESULT_ENVELOPE_HEADROOM);
        if options.basics.get_answer_basics() && largest > budget {
            tracing::warn!(
                largest,
                budget,
                "the server info, instructions or tool list can pass the wire limit; such an answer becomes error -32603"
            );
        }
        Self {
            session: ServerSession::new(options.session.clone(), options.framer.clone()),
            router: BasicsRouter::new(options.basics.clone()),
            drain_timeout: options.drain_timeout,
            running: HashMap::new(),
            actions: VecDeque::new(),
            parked: false,
            input_closed: false,
            flush_due: false,
            input_open: true,
            drain_deadline: None,
            exit_deadline: None,
            end: ServeEnd::Running,
            aborted_at_exit: 0,
            notifications_refused: 0,
            notifications_after_cancel_dropped: 0,
            notifications_after_response_dropped: 0,
            unwritten_at_exit: 0,
            outgoing_peak: 0,
            write_error: None,
        }
    }

    // ---- getters ----

    /// The session inside (its registry and counters).
    pub fn session(&self) -> &ServerSession {
        &self.session
    }

    /// The protocol version `initialize` was answered with, once the
    /// lifecycle answered it (never with the basics off).
    pub fn protocol_version(&self) -> Option<&'static str> {
        self.router.protocol_version()
    }

    /// What the client said about itself (info, capabilities) in the
    /// `initialize` the lifecycle answered.
    pub fn client(&self) -> Option<&Arc<ClientHello>> {
        self.router.client()
    }

    /// The protocol version the running request `id` is handled under:
    /// the one its `_meta` named, else the one `initialize` negotiated;
    /// `None` before `initialize` (or for an id not running). Adapters hand
    /// it to the handler they start for `id`.
    pub fn request_protocol_version(&self, id: &Id) -> Option<&'static str> {
        self.running.get(id).and_then(|r| r.revision.version)
    }

    /// What the client said about itself for the running request `id`: in
    /// its `_meta` (a modern request), else in `initialize`. Adapters hand
    /// it to the handler they start for `id`.
    pub fn request_client(&self, id: &Id) -> Option<&Arc<ClientHello>> {
        self.running
            .get(id)
            .and_then(|r| r.revision.client.as_ref())
    }

    /// The wire limit, both directions.
    pub fn max_frame(&self) -> usize {
        self.session.framer_config().get_max_frame()
    }

    /// The content budget for one handler's result: the wire limit less
    /// [`RESULT_ENVELOPE_HEADROOM`] (G9); `None` when the limit leaves no room.
    pub fn result_budget(&self) -> Option<ResultBudget> {
        result_budget(self.max_frame())
    }

    /// Whether the adapter should read stdin now.
    pub fn wants_input(&self) -> bool {
        self.input_open && self.end == ServeEnd::Running
    }

    /// The length of the held message's unwritten rest, as offered to write.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn pending_len(&self) -> usize {
        if self.end == ServeEnd::Running && self.session.outbox().writing_is_held() {
            self.session.outbox().writing()
        } else {
            0
        }
    }

    /// Whether a whole message went out and the writer should be flushed.
    pub(crate) fn flush_due(&self) -> bool {
        self.flush_due && self.session.outbox().writing_is_empty() && self.end == ServeEnd::Running
    }

    /// Handlers running now.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Bytes waiting for stdout: the rest of the message being written plus
    /// the session's queue.
    pub fn outgoing_bytes(&self) -> usize {
        self.session.outbox().writing() + self.session.outgoing_bytes()
    }

    /// Whether the loop is over: return [`report`](Self::report) (or the
    /// write error, after [`ServeEnd::WriteFailed`]).
    pub fn is_finished(&self) -> bool {
        self.actions.is_empty() && self.end != ServeEnd::Running
    }

    /// What the loop observed so far.
    pub fn report(&self) -> ServeReport {
        ServeReport {
            metrics: self.session.metrics(),
            end: self.end,
            aborted_at_exit: self.aborted_at_exit,
            notifications_refused: self.notifications_refused,
            notifications_after_cancel_dropped: self.notifications_after_cancel_dropped,
            notifications_after_response_dropped: self.notifications_after_response_dropped,
            unwritten_at_exit: self.unwritten_at_exit,
            outgoing_peak: self.outgoing_peak,
            helpers_unfinished_at_exit: 0,
            protocol_version: self.router.protocol_version(),
            began_modern: self.router.began_modern(),
            client_info: self
                .router
                .client()
                .or(self.router.last_modern_client())
                .and_then(|c| c.client_info.clone()),
            basics: self.router.metrics().clone(),
        }
    }

    // ---- the one input and the one output ----

    /// Takes one input (see [`ServeInput`] for what each means). Then drain
    /// [`poll_output`](Self::poll_output).
    pub fn handle_input(&mut self, now: Instant, input: ServeInput<'_>) {
        match input {
            ServeInput::Read { result, buf } => self.handle_read_result(now, result, buf),
            ServeInput::Written(r) => self.handle_write_result(now, r),
            ServeInput::Flushed(r) => self.handle_flush_result(now, r),
            ServeInput::Writable => {
                self.parked = false;
                self.advance(now);
            }
            ServeInput::HandlerFinished { id, result } => self.handler_finished(now, id, result),
            ServeInput::HandlerAborted(id) => self.handler_aborted(now, id),
            ServeInput::Notify { method, params } => {
                if let Err(e) = self.notify(now, method, params) {
                    self.note_refused(method, &e);
                }
            }
            ServeInput::NotifyRelated { id, method, params } => {
                match self.notify_related(now, id, method, params) {
                    // Dropped by design (G7), counted: not worth a note each.
                    Ok(()) | Err(NotifyError::RequestOver) => {}
                    Err(e) => self.note_refused(method, &e),
                }
            }
            ServeInput::StopReading => self.handle_input_eof(now),
            ServeInput::Timeout => self.advance(now),
        }
    }

    /// The next thing the loop must do: actions for the handlers first (in
    /// the order they arose), then the end of the input, the end of the
    /// loop, the bytes to write, the flush, and last the next deadline (the
    /// end of this drain; it repeats until the next input).
    #[must_use]
    pub fn poll_output(&mut self) -> ServeOutput<'_> {
        if let Some(action) = self.actions.pop_front() {
            return ServeOutput::Action(action);
        }
        if !self.input_closed && !self.wants_input() {
            self.input_closed = true;
            return ServeOutput::CloseInput;
        }
        if self.end != ServeEnd::Running {
            return ServeOutput::Finished;
        }
        if !self.parked {
            if self.flush_due() {
                return ServeOutput::Flush;
            }
            if self.session.outbox().writing_is_held() {
                return ServeOutput::Write(self.session.outbox_mut().lend());
            }
        }
        ServeOutput::Timeout(self.poll_timeout())
    }

    // ---- inputs, one by one (what `handle_input` calls) ----

    /// Bytes read from stdin.
    pub(crate) fn handle_stdin(&mut self, now: Instant, chunk: &[u8]) {
        if !self.wants_input() {
            return;
        }
        self.session.handle_stdin(now, chunk);
        self.advance(now);
    }

    /// Stdin reached end-of-file, or reading it failed with anything but
    /// `Interrupted` (which the adapter retries): no more requests come.
    pub(crate) fn handle_input_eof(&mut self, now: Instant) {
        if self.input_open {
            self.session.handle_stdin_eof(now);
        }
        self.advance(now);
    }

    /// A read of stdin into `buf` returned `r` (the rule:
    /// [`ReadResult`]): bytes are taken, an end or an error ends the input.
    /// Returns whether the input is still open.
    fn handle_read_result(&mut self, now: Instant, r: std::io::Result<usize>, buf: &[u8]) {
        match ReadResult::from(r) {
            ReadResult::Bytes(n) => self.handle_stdin(now, &buf[..n.min(buf.len())]),
            ReadResult::Again => {}
            ReadResult::End(error) => {
                if let Some(e) = error {
                    self.actions.push_back(ServeAction::Note(Note::new(
                        NoteLevel::Debug,
                        "reading stdin failed; treating it as EOF",
                        Some(e.to_string()),
                    )));
                }
                self.handle_input_eof(now);
            }
        }
    }

    /// A write of [`pending_write`](Self::pending_write) returned `r` (the
    /// rule: [`WriteResult`]); a failure ends the loop
    /// ([`handle_write_failed`](Self::handle_write_failed)) and is kept for
    /// [`take_write_error`](Self::take_write_error).
    fn handle_write_result(&mut self, now: Instant, r: std::io::Result<usize>) {
        match WriteResult::from(r) {
            WriteResult::Bytes(n) => self.handle_written(now, n),
            WriteResult::Again => {}
            WriteResult::Full => self.parked = true,
            WriteResult::Failed(e) => self.write_failed(now, e),
        }
    }

    /// A flush returned `r`; as [`handle_write_result`](Self::handle_write_result).
    fn handle_flush_result(&mut self, now: Instant, r: std::io::Result<()>) {
        match r {
            Ok(()) => self.handle_flushed(now),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => self.parked = true,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => self.write_failed(now, e),
        }
    }

    /// The error that failed the write, once the loop ended with
    /// [`ServeEnd::WriteFailed`] (taken once).
    pub fn take_write_error(&mut self) -> Option<std::io::Error> {
        self.write_error.take()
    }

    fn write_failed(&mut self, now: Instant, e: std::io::Error) {
        self.actions.push_back(ServeAction::Note(Note::new(
            NoteLevel::Debug,
            "writing stdout failed; aborting every handler",
            Some(e.to_string()),
        )));
        if self.end == ServeEnd::Running {
            self.write_error = Some(e);
        }
        self.handle_write_failed(now);
    }

    /// `n` bytes of [`pending_write`](Self::pending_write) reached the pipe.
    pub(crate) fn handle_written(&mut self, now: Instant, n: usize) {
        if self.session.outbox_mut().advance(n) {
            self.flush_due = true;
        }
        self.advance(now);
    }

    /// The writer was flushed.
    pub(crate) fn handle_flushed(&mut self, now: Instant) {
        self.flush_due = false;
        self.advance(now);
    }

    /// Writing or flushing stdout failed: the client is gone. Every running
    /// handler is aborted at once, stdin is no longer read, and the loop
    /// ends ([`ServeEnd::WriteFailed`]); the adapter returns its error.
    pub(crate) fn handle_write_failed(&mut self, now: Instant) {
        if self.end != ServeEnd::Running {
            return;
        }
        self.abandon_all();
        self.give_up_output();
        self.end = ServeEnd::WriteFailed;
        self.advance(now);
    }

    /// Time passed: at the drain deadline running handlers are aborted; at
    /// the exit deadline unwritten output is given up. A spurious call does
    /// nothing.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        self.advance(now);
    }

    // ---- commands from handlers ----

    /// The handler of `id` returned `result`. A cancelled request's response
    /// is suppressed (G7); a result above the wire limit becomes an error
    /// (G9); an end for a handler already abandoned is ignored.
    ///
    /// A modern request's result gets the fields 2026-07-28 requires when
    /// it lacks them (`resultType`, and `ttlMs`/`cacheScope` for the
    /// cacheable methods): about 60 bytes, well inside
    /// [`RESULT_ENVELOPE_HEADROOM`]; a result that still passes the wire
    /// limit with them becomes the wire-limit error like any other (G9).
    pub(crate) fn handler_finished(
        &mut self,
        now: Instant,
        id: &Id,
        result: Result<&RawValue, &ErrorObject>,
    ) {
        if let Some(run) = self.running.remove(id) {
            let shaped = match result {
                Ok(v) if run.revision.is_modern() => modern_result(v, run.cacheable),
                _ => None,
            };
            let result = match &shaped {
                Some(v) => Ok(&**v),
                None => result,
            };
            // Cannot fail for a running id: the session registered it.
            let _ = self.session.respond(id, result);
        }
        self.advance(now);
    }

    /// The handler of `id` ended without a result (aborted after a cancel,
    /// panicked, or could not start): a running request is answered with an
    /// error so the client is not left waiting.
    pub(crate) fn handler_aborted(&mut self, now: Instant, id: &Id) {
        if self.running.remove(id).is_some() {
            self.session.handler_ended(id);
        }
        self.advance(now);
    }

    /// A handler's notification for the client (progress, logging). Refused
    /// (and counted) when the outgoing queue is full — the client is not
    /// reading stdout — or when it would pass the wire limit.
    pub fn notify(
        &mut self,
        now: Instant,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<(), NotifyError> {
        if self.end != ServeEnd::Running {
            self.notifications_refused += 1;
            return Err(NotifyError::Closed);
        }
        let r = self.session.notify(method, params);
        if r.is_err() {
            self.notifications_refused += 1;
        }
        self.advance(now);
        r
    }

    /// A handler's notification tied to its request `id` (progress,
    /// logging): as [`notify`](Self::notify) while the request runs; once
    /// the client cancelled it, or it was answered (or abandoned), dropped
    /// with [`NotifyError::RequestOver`] and counted — nothing for a
    /// request leaves `serve` after its cancel arrived (G7) or after its
    /// response.
    pub fn notify_related(
        &mut self,
        now: Instant,
        id: &Id,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<(), NotifyError> {
        if self.end == ServeEnd::Running && !self.running.contains_key(id) {
            self.notifications_after_response_dropped += 1;
            return Err(NotifyError::RequestOver);
        }
        if self.session.state_of(id) == Some(RequestState::Cancelled) {
            self.notifications_after_cancel_dropped += 1;
            return Err(NotifyError::RequestOver);
        }
        if self.end != ServeEnd::Running {
            self.notifications_refused += 1;
            return Err(NotifyError::Closed);
        }
        let r = self.session.notify_related(id, method, params);
        if r.is_err() {
            self.notifications_refused += 1;
        }
        self.advance(now);
        r
    }

    fn note_refused(&mut self, method: &str, e: &NotifyError) {
        self.actions.push_back(ServeAction::Note(Note::new(
            NoteLevel::Debug,
            "notification from a handler refused",
            Some(format!("{method}: {e}")),
        )));
    }

    // ---- outputs ----

    /// The next thing to do for the handlers.
    #[must_use]
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn poll_action(&mut self) -> Option<ServeAction> {
        self.actions.pop_front()
    }

    /// When [`ServeInput::Timeout`] is due next.
    #[must_use]
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        if self.end != ServeEnd::Running {
            return None;
        }
        match (self.drain_deadline, self.exit_deadline) {
            (Some(d), _) if !self.running.is_empty() => Some(d),
            (_, Some(e)) if self.output_pending() => Some(e),
            _ => None,
        }
    }

    // ---- internals ----

    fn output_pending(&self) -> bool {
        !self.session.outbox().writing_is_empty()
            || self.flush_due
            || self.session.outgoing_bytes() > 0
    }

    /// Moves every session output on and applies the deadlines.
    fn advance(&mut self, now: Instant) {
        while let Some(ev) = self.session.poll_event() {
            match ev {
                ServerEvent::Request(r) => {
                    if self.end == ServeEnd::Running {
                        let (route, revision) = self.router.route(&r);
                        let cacheable = CACHEABLE_METHODS.contains(&r.method.as_str());
                        match route {
                            Route::Handler => {
                                let run = Running {
                                    revision,
                                    cacheable,
                                };
                                self.running.insert(r.id.clone(), run);
                                self.actions.push_back(ServeAction::Start(r));
                            }
                            Route::Answer(answer) => {
                                let shaped = match &answer {
                                    Ok(v) if revision.is_modern() => modern_result(v, cacheable),
                                    _ => None,
                                };
                                let answer = match &shaped {
                                    Some(v) => Ok(&**v),
                                    None => answer.as_ref().map(|v| &**v),
                                };
                                // Cannot fail: the session registered this id just now.
                                let _ = self.session.respond(&r.id, answer);
                            }
                        }
                    } else {
                        self.session.handler_ended(&r.id);
                    }
                }
                ServerEvent::Cancelled { id, reason } => {
                    if self.running.contains_key(&id) {
                        self.actions.push_back(ServeAction::Cancel { id, reason });
                    }
                }
                ServerEvent::Notification(n) => {
                    self.actions.push_back(ServeAction::Notification(n));
                }
                ServerEvent::InputClosed => {
                    self.input_open = false;
                    // Checked: a huge drain timeout means "no deadline", never a panic.
                    self.drain_deadline = now.checked_add(self.drain_timeout);
                    self.exit_deadline = self
                        .drain_deadline
                        .and_then(|d| d.checked_add(EXIT_WRITE_GRACE));
                }
            }
        }
        if self.end == ServeEnd::Running {
            if self.drain_deadline.is_some_and(|d| d <= now) && !self.running.is_empty() {
                tracing::debug!(
                    handlers = self.running.len(),
                    "drain deadline passed; aborting the handlers still running"
                );
                self.abandon_all();
            }
            if self.session.outbox().writing_is_empty() && !self.flush_due {
                if let Some(bytes) = self.session.poll_transmit() {
                    self.session.outbox_mut().hold(bytes);
                }
            }
            let queued = self.outgoing_bytes() as u64;
            self.outgoing_peak = self.outgoing_peak.max(queued);
            if !self.input_open && self.running.is_empty() {
                if !self.output_pending() {
                    self.end = ServeEnd::InputClosed;
                } else if self.exit_deadline.is_some_and(|d| d <= now) {
                    tracing::debug!(
                        bytes = queued,
                        "stdout not read within the drain deadline; giving up the rest"
                    );
                    self.give_up_output();
                    self.end = ServeEnd::InputClosed;
                }
            }
        }
    }

    /// Aborts every running handler; their requests get an error answer.
    fn abandon_all(&mut self) {
        let mut ids: Vec<Id> = self.running.drain().map(|(id, _)| id).collect();
        ids.sort_by_key(ToString::to_string);
        for id in ids {
            self.session.handler_ended(&id);
            self.aborted_at_exit += 1;
            self.actions.push_back(ServeAction::Abort(id));
        }
    }

    fn give_up_output(&mut self) {
        let mut lost = self.session.outbox_mut().clear_writing();
        while let Some(b) = self.session.poll_transmit() {
            lost += b.len();
        }
        self.flush_due = false;
        self.unwritten_at_exit += lost as u64;
    }
}

/// The content budget for a result under wire limit `max_frame`: the limit
/// less [`RESULT_ENVELOPE_HEADROOM`] (G9).
pub fn result_budget(max_frame: usize) -> Option<ResultBudget> {
    ResultBudget::new(max_frame.saturating_sub(RESULT_ENVELOPE_HEADROOM)).ok()
}

#[cfg(test)]
mod tests;
