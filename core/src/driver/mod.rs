//! The client driver: everything an adapter's `Client` decides, written once.
//!
//! A [`ClientDriver`] wraps a [`SpawnedServer`] with what sits between it and
//! the application: the commands the application sends ([`Command`]), the
//! waiters of requests in flight and their completion, the one message taken
//! from the core for the server's stdin ([`DriverOutput::Write`]), the
//! lossless cancels ([`CancelRegistry`]) and the final `SessionClosed` for
//! whatever still waits when the session ends. It does no I/O and reads no
//! clock: the adapter reads the clock once per wake and passes `now` in.
//!
//! The adapters keep only waiting and system calls. Their loop is:
//!
//! 1. wait for the next input (a pipe's bytes or end, room to write, the
//!    child's exit, a command, a cancel wake, room for an incoming message,
//!    or the deadline of the last [`DriverOutput::Timeout`]);
//! 2. read the clock once and feed it: [`ClientDriver::handle_input`]`(now, …)`
//!    with a [`DriverInput`] (after a cancel wake: [`DriverInput::Cancels`],
//!    one atomic swap when there is nothing to do);
//! 3. drain [`ClientDriver::poll_output`] until [`DriverOutput::Timeout`]:
//!    act on each [`DriverAction`], write each [`DriverOutput::Write`] as far
//!    as the pipe takes it now; hand [`ClientDriver::poll_incoming`] on when
//!    the application has room.
//!
//! # The rule
//!
//! A loop built this way never waits for a write while it could read: the
//! driver holds at most one outgoing message, the adapter writes it only as
//! the pipe accepts it (readiness), and every other input is served
//! meanwhile. Every reply to the application goes through a
//! [`ReplyChannel`] whose `send` never blocks.
//!
//! # Limits
//!
//! - **Outgoing bytes**: the core's queue (`max(max_outgoing_bytes,
//!   max_frame)` plus `control_reserve_bytes` for cancels and overload
//!   replies, see [`ClientConfig`](crate::session::client::ClientConfig)) plus the one
//!   message held here (at most `max_frame` bytes). Past the queue's limit
//!   `request`, `notify` and `respond` fail with [`SendError::Backpressure`]
//!   while reads, timers and cancels go on.
//! - **Cancels**: at most one per request in flight, so at most
//!   `max_in_flight` (default 128) at once, each a flag and its reason
//!   (under 100 bytes plus the reason). They never pass through the
//!   adapter's bounded command queue, so a full queue cannot lose one.
//! - **Waiters**: one per request in flight, at most `max_in_flight`.
//!
//! [`SendError::Backpressure`]: crate::session::client::SendError::Backpressure

pub(crate) mod spawned;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::driver::spawned::{
    ClientOptions, LiveSnapshot, SessionRecord, SpawnedAction, SpawnedServer,
};
use crate::io_result::{ChildStream, Note, NoteLevel, ReadResult, WriteResult};
use crate::outbox::Outgoing;
use crate::process::supervisor::{ExitStatus, Signal};
use crate::session::client::{ClientEvent, ClientMetrics, Incoming, RequestError, RequestFailure};
use crate::session::negotiate::Negotiated;
use crate::session::progress::ProgressQueue;
use crate::wire::frame::ReadRoom;
use crate::wire::message::{ErrorObject, Id, RawResult, RawValue};

/// A request's outcome as the application sees it.
pub type Outcome = Result<RawResult, RequestError>;

/// The one-shot reply channels of an adapter (tokio's `oneshot`, a
/// capacity-1 `async_channel`, a capacity-1 `sync_channel`).
pub trait ReplyChannel: 'static {
    /// The driver's end.
    type Sender<T: Send + 'static>: Send;
    /// The application's end.
    type Receiver<T: Send + 'static>: Send;
    /// A new channel for one value.
    fn channel<T: Send + 'static>() -> (Self::Sender<T>, Self::Receiver<T>);
    /// Sends the one value without ever blocking; `false` if the receiver is gone.
    fn send<T: Send + 'static>(tx: Self::Sender<T>, value: T) -> bool;
}

/// What a `Request` command is answered with.
pub struct Started<C: ReplyChannel> {
    /// The request's id.
    pub id: Id,
    /// Receives the outcome once.
    pub outcome: C::Receiver<Outcome>,
    /// Cancels the request without the command queue.
    pub cancel: CancelHandle,
}

impl<C: ReplyChannel> fmt::Debug for Started<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Started").field("id", &self.id).finish()
    }
}

/// The answer to a `Request` command.
pub type StartReply<C> = Result<Started<C>, RequestError>;

/// A command from the application to the driver. Cancels are not commands:
/// they go through the [`CancelRegistry`], so they cannot be lost to a full
/// queue.
#[non_exhaustive]
pub enum Command<C: ReplyChannel> {
    /// Send a request; answered with its id, its outcome's receiver and its cancel.
    Request {
        /// The method.
        method: String,
        /// The raw params.
        params: Option<Box<RawValue>>,
        /// The deadline from now (`None`: none).
        timeout: Option<Duration>,
        /// Where the request's progress goes, if it asks for it (see
        /// [`ClientSession::request_with_progress`](crate::ClientSession::request_with_progress)).
        progress: Option<Arc<ProgressQueue>>,
        /// Where the answer goes.
        reply: C::Sender<StartReply<C>>,
    },
    /// Send a request and answer only its outcome: the caller awaits the
    /// result at once and needs no id first, so the driver sends nothing
    /// back when the request goes out (one wake-up of the caller per
    /// request instead of two).
    Call {
        /// The method.
        method: String,
        /// The raw params.
        params: Option<Box<RawValue>>,
        /// The deadline from now (`None`: none).
        timeout: Option<Duration>,
        /// Receives the outcome once, or the error that kept the request
        /// from being sent.
        outcome: C::Sender<Outcome>,
        /// Cancels the request, even before the driver has taken the command.
        cancel: CallCancel,
        /// Where the request's progress goes, if it asks for it.
        progress: Option<Arc<ProgressQueue>>,
    },
    /// Send a notification.
    Notify {
        /// The method.
        method: String,
        /// The raw params.
        params: Option<Box<RawValue>>,
        /// Where the answer goes.
        reply: C::Sender<Result<(), RequestError>>,
    },
    /// Answer a server→client request.
    Respond {
        /// The request's id.
        id: Id,
        /// A raw result or an error object.
        result: Result<Box<RawValue>, ErrorObject>,
        /// Where the answer goes.
        reply: C::Sender<Result<(), RequestError>>,
    },
    /// What `initialize` negotiated: from now on a modern session stamps
    /// every request with its `_meta` and refuses the server's requests
    /// (see [`ClientSession::stamp_requests`](crate::ClientSession::stamp_requests)).
    /// Not answered: the queue's order puts it before any later command.
    Negotiated(Box<Negotiated>),
    /// The session's counters.
    Metrics {
        /// Where they go.
        reply: C::Sender<ClientMetrics>,
    },
    /// The session's counters and the newest bytes of the server's stderr,
    /// while it runs.
    Snapshot {
        /// At most this many bytes of the stderr tail.
        stderr_bytes: usize,
        /// Where it goes.
        reply: C::Sender<LiveSnapshot>,
    },
    /// Graceful shutdown (G11).
    Shutdown,
    /// `SIGTERM` at once, then the rest of the shutdown sequence.
    Kill,
}

impl<C: ReplyChannel> fmt::Debug for Command<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Request { .. } => "Request",
            Self::Call { .. } => "Call",
            Self::Notify { .. } => "Notify",
            Self::Respond { .. } => "Respond",
            Self::Negotiated(_) => "Negotiated",
            Self::Metrics { .. } => "Metrics",
            Self::Snapshot { .. } => "Snapshot",
            Self::Shutdown => "Shutdown",
            Self::Kill => "Kill",
        })
    }
}

/// The reason sent with the cancel of a request whose handle was dropped.
pub const ABANDONED: &str = "request abandoned by the client";

const LIVE: u8 = 0;
const REQUESTED: u8 = 1;
const DONE: u8 = 2;

/// One request's cancel: a state and the reason, set once.
#[derive(Debug)]
struct CancelSlot {
    state: AtomicU8,
    reason: OnceLock<String>,
}

/// The cancels of one session, shared by the driver and every handle.
///
/// Lossless: a cancel sets its request's flag (first reason wins), sets the
/// registry's "something to do" flag and wakes the driver, which cancels
/// every flagged request on its next turn. Nothing is queued, so nothing can
/// overflow; a cancel of a finished or unknown request is a no-op.
///
/// The id → slot map (for cancels by id) is behind a `std` mutex held only
/// for one hash-map insert, remove or lookup (O(1), never across a wait);
/// cancels through a [`CancelHandle`] take no lock at all.
pub struct CancelRegistry {
    by_id: Mutex<HashMap<Id, Arc<CancelSlot>>>,
    requested: AtomicBool,
    closed: AtomicBool,
    wake: Box<dyn Fn() + Send + Sync>,
}

impl fmt::Debug for CancelRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelRegistry")
            .field("requested", &self.requested)
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl CancelRegistry {
    /// A registry whose cancels call `wake` to wake the driver. `wake` must
    /// not block and must not be lost if the driver is busy (a stored permit:
    /// tokio's `Notify::notify_one`, a capacity-1 channel's `try_send`, a
    /// `mio::Waker`).
    pub fn new(wake: impl Fn() + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Self {
            by_id: Mutex::new(HashMap::new()),
            requested: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            wake: Box::new(wake),
        })
    }

    /// Cancels the request `id` if it is in flight; a no-op otherwise.
    pub fn cancel(&self, id: &Id, reason: &str) {
        let slot = self.map().get(id).cloned();
        if let Some(slot) = slot {
            self.request(&slot, reason);
        }
    }

    /// Requests in flight with a cancel slot.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// Whether no request is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn request(&self, slot: &CancelSlot, reason: &str) {
        if slot.state.load(Ordering::Acquire) != LIVE || self.closed.load(Ordering::Acquire) {
            return;
        }
        let _ = slot.reason.set(reason.to_owned());
        if slot
            .state
            .compare_exchange(LIVE, REQUESTED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.requested.store(true, Ordering::Release);
            (self.wake)();
        }
    }

    fn map(&self) -> MutexGuard<'_, HashMap<Id, Arc<CancelSlot>>> {
        // O(1) work under the lock and nothing there panics; a poisoned map is still consistent.
        self.by_id.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Cancels one request from any thread or task: it never blocks and never
/// goes through the command queue, so it is never lost. Cheap to clone.
/// Every adapter's `CancelHandle` is this type.
#[derive(Debug, Clone)]
pub struct CancelHandle {
    id: Id,
    slot: Arc<CancelSlot>,
    registry: Arc<CancelRegistry>,
}

impl CancelHandle {
    /// The request's id.
    pub fn id(&self) -> &Id {
        &self.id
    }

    /// Cancels the request: it completes with `Cancelled` and the server is
    /// sent `notifications/cancelled`. A no-op once it has completed; only
    /// the first reason is kept.
    pub fn cancel(&self, reason: &str) {
        self.registry.request(&self.slot, reason);
    }

    /// Whether the request completed or was cancelled already.
    pub fn is_done(&self) -> bool {
        self.slot.state.load(Ordering::Acquire) != LIVE
    }
}

/// Cancels the request of a [`Command::Call`]: made by the caller before the
/// request has an id, so a cancel (a dropped call) issued before the driver
/// takes the command is not lost; the driver acts on it once the request is
/// sent. Lossless and non-blocking like [`CancelHandle`].
#[derive(Debug, Clone)]
pub struct CallCancel {
    slot: Arc<CancelSlot>,
    registry: Arc<CancelRegistry>,
}

impl CallCancel {
    /// A cancel for a call not yet sent, in the session of `registry`.
    pub fn new(registry: &Arc<CancelRegistry>) -> Self {
        Self {
            slot: Arc::new(CancelSlot {
                state: AtomicU8::new(LIVE),
                reason: OnceLock::new(),
            }),
            registry: registry.clone(),
        }
    }

    /// Cancels the call: it completes with `Cancelled` and, once sent, the
    /// server is sent `notifications/cancelled`. A no-op once it has
    /// completed; only the first reason is kept.
    pub fn cancel(&self, reason: &str) {
        self.registry.request(&self.slot, reason);
    }

    /// Whether the call completed or was cancelled already.
    pub fn is_done(&self) -> bool {
        self.slot.state.load(Ordering::Acquire) != LIVE
    }
}

struct Waiter<C: ReplyChannel> {
    outcome: C::Sender<Outcome>,
    cancel: Arc<CancelSlot>,
}

/// One thing that happened to a client session: the one way into
/// [`ClientDriver`] ([`ClientDriver::handle_input`]). After each, drain
/// [`ClientDriver::poll_output`] until it says [`DriverOutput::Timeout`].
#[non_exhaustive]
pub enum DriverInput<'a, C: ReplyChannel> {
    /// A read of the server's stdout into [`ClientDriver::stdout_room`]
    /// returned `result` (the rule: [`ReadResult`]). At its end, `look` is
    /// asked whether the server has exited, and an exit it reports is taken
    /// first: "exited by itself" does not depend on which of the two the
    /// loop saw first. A [`DriverAction::CloseReader`] follows the end.
    Stdout {
        /// What the read system call returned.
        result: std::io::Result<usize>,
        /// A non-reaping look at the exit.
        look: LookForExit<'a>,
    },
    /// A read of the server's stderr into `buf` returned `result`; as `Stdout`.
    Stderr {
        /// What the read system call returned.
        result: std::io::Result<usize>,
        /// The buffer it read into.
        buf: &'a [u8],
        /// A non-reaping look at the exit.
        look: LookForExit<'a>,
    },
    /// A write of [`DriverOutput::Write`] returned this (the rule:
    /// [`WriteResult`]: `WouldBlock` parks stdin until
    /// [`Writable`](Self::Writable); a failure closes it, with a
    /// [`DriverAction::CloseStdin`]; stdout's end and the exit follow).
    Written(std::io::Result<usize>),
    /// The server's stdin may take bytes again (after a `WouldBlock`).
    Writable,
    /// The wait for the server's exit returned this. A failed wait means no
    /// status can ever be observed: the supervisor's deadlines end the session.
    Exited(std::io::Result<ExitStatus>),
    /// A command from the application (every reply is a non-blocking send).
    /// Cancels flagged before it are taken first: a `cancel` then a
    /// `request` reach the wire in that order (G6).
    Command(Command<C>),
    /// The cancel registry woke the loop: cancel every request flagged since
    /// (one atomic swap when none was). Harmless when spurious.
    Cancels,
    /// Every application handle is gone (the `Client` was dropped, which
    /// killed the group): fail what waits and run the kill path, once.
    ClientGone,
    /// Time passed: request deadlines and shutdown graces. Early, nothing.
    Timeout,
}

impl<C: ReplyChannel> fmt::Debug for DriverInput<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stdout { result, .. } => f
                .debug_struct("Stdout")
                .field("result", result)
                .finish_non_exhaustive(),
            Self::Stderr { result, .. } => f
                .debug_struct("Stderr")
                .field("result", result)
                .finish_non_exhaustive(),
            Self::Written(r) => f.debug_tuple("Written").field(r).finish(),
            Self::Writable => f.write_str("Writable"),
            Self::Exited(r) => f.debug_tuple("Exited").field(r).finish(),
            Self::Command(_) => f.write_str("Command"),
            Self::Cancels => f.write_str("Cancels"),
            Self::ClientGone => f.write_str("ClientGone"),
            Self::Timeout => f.write_str("Timeout"),
        }
    }
}

/// What the driver asks of its loop, in the order it must happen, from
/// [`ClientDriver::poll_output`]. Messages for the application are not in
/// it: the loop pulls them with [`ClientDriver::poll_incoming`] when the
/// application has room (G5: the core's inbox is the queue).
#[derive(Debug)]
pub enum DriverOutput<'a> {
    /// Do this now.
    Action(DriverAction),
    /// Write what the server's stdin takes of these bytes now (or take them
    /// whole for a writer task) and report [`DriverInput::Written`]; never
    /// wait for it.
    Write(Outgoing<'a>),
    /// Nothing more until the next input: wait for I/O, a command, a cancel
    /// wake, or this instant, then feed [`DriverInput::Timeout`]. `None`: no
    /// deadline.
    Timeout(Option<Instant>),
}

/// What the adapter must do, inside [`DriverOutput::Action`].
#[derive(Debug)]
#[non_exhaustive]
pub enum DriverAction {
    /// A line of the server's stderr, within the forwarding budget, for the
    /// logs. Hand it to something that cannot block the loop (the adapters
    /// use a relay thread): a `tracing` subscriber may block.
    LogStderrLine(String),
    /// Close (drop) the server's stdin; the driver has dropped what it held.
    CloseStdin,
    /// This stream of the server is at its end: stop reading it (drop it).
    CloseReader(ChildStream),
    /// Send this signal to the server's process group; `ESRCH` is not an error.
    SignalGroup(Signal),
    /// Stop reading the streams still open (they passed the drain deadline:
    /// worth a warning in the logs).
    AbandonReaders,
    /// Log this (through something that cannot block the loop).
    Note(Note),
    /// The session is over: every waiter has its outcome, the stderr grant
    /// is back in its pool. Nothing more is polled.
    Finished(Box<SessionRecord>),
}

/// A non-reaping look at whether the server has exited, for the
/// `handle_*_result` methods: the exit is taken before an end of stream that
/// it caused, whatever order the loop saw them in. `Ok(None)`: still running.
pub type LookForExit<'a> = &'a mut dyn FnMut() -> std::io::Result<Option<ExitStatus>>;

/// At the end of a child's stream: what `look` found for the machine to take
/// first (its `handle_exit_result`), unless the exit was seen already. `None`:
/// seen already, or the child still runs.
pub(crate) fn exit_before_end(
    exit_seen: bool,
    look: LookForExit<'_>,
) -> Option<std::io::Result<ExitStatus>> {
    if exit_seen {
        return None;
    }
    look().transpose()
}

/// The client driver of one spawned server (sans-IO). See the module docs
/// for the loop every adapter runs around it.
///
/// # Methods, by group
///
/// - **Getters**: `host`, [`cancels`](Self::cancels),
///   [`waiters`](Self::waiters), [`has_incoming`](Self::has_incoming),
///   [`exit_seen`](Self::exit_seen), [`is_finished`](Self::is_finished).
/// - **The one input**: [`handle_input`](Self::handle_input) with a
///   [`DriverInput`]; stdout is read into [`stdout_room`](Self::stdout_room).
/// - **The one output**: [`poll_output`](Self::poll_output), a
///   [`DriverOutput`]; messages for the application are pulled with
///   [`poll_incoming`](Self::poll_incoming) when it has room.
pub struct ClientDriver<C: ReplyChannel> {
    server: SpawnedServer,
    options: ClientOptions,
    pid: u32,
    waiters: HashMap<Id, Waiter<C>>,
    cancels: Arc<CancelRegistry>,
    stdin_open: bool,
    /// Stdin said `WouldBlock`: nothing is offered until it is writable.
    parked: bool,
    client_gone: bool,
    finished: bool,
    /// The exit was fed (or can never be observed).
    exit_seen: bool,
    /// Actions the I/O results led to, given before the session's own:
    /// notes to log and pipes to close (at most one note and one close per
    /// stream end, write failure and exit: seven).
    early: Vec<DriverAction>,
}

impl<C: ReplyChannel> fmt::Debug for ClientDriver<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientDriver")
            .field("pid", &self.pid)
            .field("waiters", &self.waiters.len())
            .field("write", self.server.outbox().cursor())
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl<C: ReplyChannel> ClientDriver<C> {
    /// The driver of the server `pid`, spawned at `now` with its three pipes;
    /// `cancels` wakes the adapter's loop (see [`CancelRegistry::new`]).
    pub fn new(
        options: ClientOptions,
        pid: u32,
        now: Instant,
        cancels: Arc<CancelRegistry>,
    ) -> Self {
        let mut server = options.new_spawned_server();
        server.handle_spawned(now);
        Self {
            server,
            options,
            pid,
            waiters: HashMap::new(),
            cancels,
            stdin_open: true,
            parked: false,
            client_gone: false,
            finished: false,
            exit_seen: false,
            early: Vec::new(),
        }
    }

    // ---- getters ----

    #[cfg(test)]
    /// The session underneath.
    pub(crate) fn server(&self) -> &SpawnedServer {
        &self.server
    }

    /// The cancel registry the handles share.
    pub fn cancels(&self) -> &Arc<CancelRegistry> {
        &self.cancels
    }

    /// Requests waiting for their outcome.
    pub fn waiters(&self) -> usize {
        self.waiters.len()
    }

    /// Whether a server→client message waits in the core's inbox.
    pub fn has_incoming(&self) -> bool {
        self.server.session().inbox_len() > 0
    }

    /// Whether `Finished` was returned.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    // ---- the one input and the one output ----

    /// Takes one input (see [`DriverInput`] for what each means). Then drain
    /// [`poll_output`](Self::poll_output).
    pub fn handle_input(&mut self, now: Instant, input: DriverInput<'_, C>) {
        match input {
            DriverInput::Stdout { result, look } => {
                if !self.handle_stdout_result(now, result, look) {
                    self.early
                        .push(DriverAction::CloseReader(ChildStream::Stdout));
                }
            }
            DriverInput::Stderr { result, buf, look } => {
                if !self.handle_stderr_result(now, result, buf, look) {
                    self.early
                        .push(DriverAction::CloseReader(ChildStream::Stderr));
                }
            }
            DriverInput::Written(r) => self.handle_write_result(r),
            DriverInput::Writable => self.parked = false,
            DriverInput::Exited(r) => self.handle_exit_result(now, r),
            DriverInput::Command(cmd) => {
                // A cancel flagged before this command was queued goes out first (G6).
                self.handle_cancels(now);
                self.handle_command(now, cmd);
            }
            DriverInput::Cancels => self.handle_cancels(now),
            DriverInput::ClientGone => self.handle_client_gone(now),
            DriverInput::Timeout => self.handle_timeout(now),
        }
    }

    /// The next thing the loop must do: the actions (notes and pipes to
    /// close first, then stderr lines, signals, the end), then the bytes to
    /// write, and last the next deadline (the end of this drain; it repeats
    /// until the next input). Completes waiters on the way.
    #[must_use]
    pub fn poll_output(&mut self) -> DriverOutput<'_> {
        if let Some(action) = self.poll_action() {
            return DriverOutput::Action(action);
        }
        if self.finished {
            return DriverOutput::Timeout(None);
        }
        if !self.parked {
            self.refill();
            if self.server.outbox_mut().writing_is_held() {
                return DriverOutput::Write(self.server.outbox_mut().lend());
            }
        }
        DriverOutput::Timeout(self.poll_timeout())
    }

    // ---- inputs, one by one (what `handle_input` calls) ----

    /// Room to read the server's stdout into: the framer's own buffer, so
    /// the pipe's bytes are copied once, by the read (see [`ReadRoom`]);
    /// then [`DriverInput::Stdout`] with what the read returned.
    pub fn stdout_room(&mut self) -> ReadRoom<'_> {
        self.server.stdout_room()
    }

    /// The server's process exited.
    pub(crate) fn handle_exited(&mut self, now: Instant, status: ExitStatus) {
        self.exit_seen = true;
        self.server.handle_exited(now, status);
    }

    /// Whether the exit was fed (or looking for it failed for good).
    pub fn exit_seen(&self) -> bool {
        self.exit_seen
    }

    /// A read of stdout into [`stdout_room`](Self::stdout_room) returned `r`
    /// (the rule: [`ReadResult`]). At the end of the stream, `look` is asked
    /// whether the server has exited, and an exit it reports is taken first:
    /// "exited by itself" does not depend on which of the two the loop saw
    /// first. Returns whether the stream is still open (drop it when not).
    pub(crate) fn handle_stdout_result(
        &mut self,
        now: Instant,
        r: std::io::Result<usize>,
        look: LookForExit<'_>,
    ) -> bool {
        match ReadResult::from(r) {
            ReadResult::Bytes(n) => self.server.handle_stdout_read(now, n),
            ReadResult::Again => {}
            ReadResult::End(error) => {
                self.stream_ended(now, ChildStream::Stdout, error, look);
                return false;
            }
        }
        true
    }

    /// A read of stderr into `buf` returned `r`; as
    /// [`handle_stdout_result`](Self::handle_stdout_result).
    pub(crate) fn handle_stderr_result(
        &mut self,
        now: Instant,
        r: std::io::Result<usize>,
        buf: &[u8],
        look: LookForExit<'_>,
    ) -> bool {
        match ReadResult::from(r) {
            ReadResult::Bytes(n) => self.server.handle_stderr(now, &buf[..n.min(buf.len())]),
            ReadResult::Again => {}
            ReadResult::End(error) => {
                self.stream_ended(now, ChildStream::Stderr, error, look);
                return false;
            }
        }
        true
    }

    /// A write of [`DriverOutput::Write`]'s bytes returned `r` (the rule:
    /// [`WriteResult`]). After a failure nothing more is written and the loop
    /// is told to close stdin; stdout's end and the exit follow.
    fn handle_write_result(&mut self, r: std::io::Result<usize>) {
        match WriteResult::from(r) {
            WriteResult::Bytes(n) => self.handle_written(n),
            WriteResult::Again => {}
            WriteResult::Full => self.parked = true,
            WriteResult::Failed(e) => {
                self.early.push(DriverAction::Note(Note::new(
                    NoteLevel::Debug,
                    "writing to server stdin failed",
                    Some(e.to_string()),
                )));
                self.handle_write_failed();
                self.early.push(DriverAction::CloseStdin);
            }
        }
    }

    /// The wait for the server's exit returned `r`. A failed wait means no
    /// status can ever be observed: the supervisor's deadlines end the session.
    pub(crate) fn handle_exit_result(&mut self, now: Instant, r: std::io::Result<ExitStatus>) {
        match r {
            Ok(status) => self.handle_exited(now, status),
            Err(e) => {
                self.exit_seen = true;
                self.early.push(DriverAction::Note(Note::new(
                    NoteLevel::Warn,
                    "waiting for the server failed",
                    Some(e.to_string()),
                )));
            }
        }
    }

    /// The end of `stream`: the exit first if `look` sees it, then the end.
    fn stream_ended(
        &mut self,
        now: Instant,
        stream: ChildStream,
        error: Option<std::io::Error>,
        look: LookForExit<'_>,
    ) {
        if let Some(e) = error {
            let message = match stream {
                ChildStream::Stdout => "reading the server's stdout failed; taken as its end",
                ChildStream::Stderr => "reading the server's stderr failed; taken as its end",
            };
            self.early.push(DriverAction::Note(Note::new(
                NoteLevel::Debug,
                message,
                Some(e.to_string()),
            )));
        }
        if let Some(r) = exit_before_end(self.exit_seen, look) {
            self.handle_exit_result(now, r);
        }
        match stream {
            ChildStream::Stdout => self.server.handle_stdout_eof(now),
            ChildStream::Stderr => self.server.handle_stderr_eof(now),
        }
    }

    /// `n` more bytes of the held (or lent) message reached the pipe.
    pub(crate) fn handle_written(&mut self, n: usize) {
        self.server.outbox_mut().advance(n);
    }

    /// Writing to the server's stdin failed (it closed its end or died):
    /// nothing more is written; stdout's end and the exit follow.
    pub(crate) fn handle_write_failed(&mut self) {
        self.stdin_open = false;
        self.server.outbox_mut().clear_writing();
    }

    /// Time passed: request deadlines and shutdown graces. Early calls do nothing.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        self.server.handle_timeout(now);
    }

    /// Cancels every request flagged since the last call (one atomic swap
    /// when none was). Call it on every wake.
    pub(crate) fn handle_cancels(&mut self, _now: Instant) {
        if !self.cancels.requested.swap(false, Ordering::AcqRel) {
            return;
        }
        let flagged: Vec<Id> = self
            .waiters
            .iter()
            .filter(|(_, w)| w.cancel.state.load(Ordering::Acquire) == REQUESTED)
            .map(|(id, _)| id.clone())
            .collect();
        for id in flagged {
            if let Some(w) = self.waiters.get(&id) {
                let reason = w.cancel.reason.get().map_or(ABANDONED, String::as_str);
                // `NotPending`: it completed meanwhile; its completion is queued.
                let _ = self.server.cancel(&id, Some(reason));
            }
        }
    }

    /// Every application handle is gone (the `Client` was dropped, which
    /// killed the group): fail what waits and run the kill path, once.
    pub(crate) fn handle_client_gone(&mut self, now: Instant) {
        if !self.client_gone {
            self.client_gone = true;
            self.server.kill(now);
        }
    }

    // ---- commands ----

    /// A command from the application. Every reply is a non-blocking send.
    pub(crate) fn handle_command(&mut self, now: Instant, cmd: Command<C>) {
        match cmd {
            Command::Request {
                method,
                params,
                timeout,
                progress,
                reply,
            } => match self
                .server
                .request(now, &method, params.as_deref(), timeout, progress)
            {
                Ok(id) => {
                    let (tx, rx) = C::channel();
                    let slot = Arc::new(CancelSlot {
                        state: AtomicU8::new(LIVE),
                        reason: OnceLock::new(),
                    });
                    self.cancels.map().insert(id.clone(), slot.clone());
                    self.waiters.insert(
                        id.clone(),
                        Waiter {
                            outcome: tx,
                            cancel: slot.clone(),
                        },
                    );
                    let started = Started {
                        id: id.clone(),
                        outcome: rx,
                        cancel: CancelHandle {
                            id: id.clone(),
                            slot,
                            registry: self.cancels.clone(),
                        },
                    };
                    if !C::send(reply, Ok(started)) {
                        // The caller gave up before learning the id: cancel.
                        self.forget(&id);
                        let _ = self.server.cancel(&id, Some(ABANDONED));
                    }
                }
                Err(e) => {
                    let _ = C::send(reply, Err(e.into()));
                }
            },
            Command::Call {
                method,
                params,
                timeout,
                outcome,
                cancel,
                progress,
            } => match self
                .server
                .request(now, &method, params.as_deref(), timeout, progress)
            {
                Ok(id) => {
                    let slot = cancel.slot;
                    self.cancels.map().insert(id.clone(), slot.clone());
                    let flagged = slot.state.load(Ordering::Acquire) == REQUESTED;
                    self.waiters.insert(
                        id,
                        Waiter {
                            outcome,
                            cancel: slot,
                        },
                    );
                    if flagged {
                        // Cancelled before it had an id: the registry's flag
                        // may already have been consumed by an earlier turn.
                        self.cancels.requested.store(true, Ordering::Release);
                    }
                }
                Err(e) => {
                    cancel.slot.state.store(DONE, Ordering::Release);
                    let _ = C::send(outcome, Err(e.into()));
                }
            },
            Command::Notify {
                method,
                params,
                reply,
            } => {
                let r = self.server.notify(&method, params.as_deref());
                let _ = C::send(reply, r.map_err(Into::into));
            }
            Command::Respond { id, result, reply } => {
                let r = self.server.respond(&id, result.as_deref());
                let _ = C::send(reply, r.map_err(Into::into));
            }
            Command::Negotiated(n) => self.server.set_negotiated(&n, &self.options),
            Command::Metrics { reply } => {
                let _ = C::send(reply, self.server.metrics());
            }
            Command::Snapshot {
                stderr_bytes,
                reply,
            } => {
                let _ = C::send(reply, self.server.snapshot(stderr_bytes));
            }
            Command::Shutdown => self.server.shutdown(now),
            Command::Kill => self.server.kill(now),
        }
    }

    // ---- outputs ----

    /// The next action; completes waiters on the way.
    pub(crate) fn poll_action(&mut self) -> Option<DriverAction> {
        if self.finished {
            return None;
        }
        self.complete_waiters();
        if !self.early.is_empty() {
            return Some(self.early.remove(0));
        }
        if !self.stdin_open {
            // Nobody will write these bytes: drop them rather than hold them.
            while self.server.poll_transmit().is_some() {}
        }
        if let Some(line) = self.server.poll_stderr_line() {
            return Some(DriverAction::LogStderrLine(line));
        }
        let action = self.server.poll_action()?;
        Some(match action {
            SpawnedAction::CloseStdin => {
                self.stdin_open = false;
                self.server.outbox_mut().clear_writing();
                DriverAction::CloseStdin
            }
            SpawnedAction::SignalGroup(sig) => DriverAction::SignalGroup(sig),
            SpawnedAction::AbandonReaders => DriverAction::AbandonReaders,
            SpawnedAction::Finished(record) => {
                self.finish();
                DriverAction::Finished(record)
            }
        })
    }

    /// Whether bytes wait to be written (held or lent).
    pub fn is_writing(&self) -> bool {
        !self.server.outbox().writing_is_empty()
    }

    /// The next server→client message from the core's bounded inbox (G5);
    /// take it only when the application has room for it.
    #[must_use]
    pub fn poll_incoming(&mut self, now: Instant) -> Option<Incoming> {
        self.server.poll_incoming(now)
    }

    /// When [`handle_timeout`](Self::handle_timeout) is due next.
    #[must_use]
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.server.poll_timeout()
    }

    fn refill(&mut self) {
        if !self.stdin_open {
            // Nobody will write these bytes: drop them rather than hold them.
            while self.server.poll_transmit().is_some() {}
            return;
        }
        if self.server.outbox_mut().writing_is_empty() {
            if let Some(bytes) = self.server.poll_transmit() {
                self.server.outbox_mut().hold(bytes);
            }
        }
    }

    fn complete_waiters(&mut self) {
        while let Some(ev) = self.server.poll_event() {
            if let ClientEvent::Completed { id, outcome } = ev {
                if let Some(w) = self.forget(&id) {
                    // The receiver may be gone (a dropped request): fine.
                    let _ = C::send(w.outcome, outcome.map_err(Into::into));
                }
            }
        }
    }

    fn forget(&mut self, id: &Id) -> Option<Waiter<C>> {
        let w = self.waiters.remove(id)?;
        w.cancel.state.store(DONE, Ordering::Release);
        self.cancels.map().remove(id);
        Some(w)
    }

    fn finish(&mut self) {
        self.finished = true;
        self.stdin_open = false;
        self.server.outbox_mut().clear_writing();
        // Completions for everything pending were emitted by the session's
        // close; anything left gets SessionClosed.
        self.complete_waiters();
        self.cancels.closed.store(true, Ordering::Release);
        for (_, w) in self.waiters.drain() {
            w.cancel.state.store(DONE, Ordering::Release);
            let _ = C::send(w.outcome, Err(RequestFailure::SessionClosed.into()));
        }
        self.cancels.map().clear();
        self.options.release_grant(&mut self.server);
    }
}

#[cfg(test)]
mod tests {
    use crate::outbox::WriteCursor;

    impl<C: ReplyChannel> ClientDriver<C> {
        /// The held message's rest, as `poll_output` would offer it.
        fn poll_write(&mut self) -> Option<&[u8]> {
            self.refill();
            match self.server.outbox().cursor() {
                WriteCursor::Held { bytes, offset } if !self.parked => Some(&bytes[*offset..]),
                _ => None,
            }
        }

        /// The held message, taken whole as a writer task would.
        fn poll_write_owned(&mut self) -> Option<Vec<u8>> {
            self.refill();
            self.server
                .outbox()
                .cursor()
                .is_held()
                .then(|| self.server.outbox_mut().lend().take())
        }
    }

    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};

    use super::*;
    use crate::process::supervisor::EndedBy;
    use crate::session::client::SendError;
    use crate::session::server::{ServerConfig, ServerEvent, ServerSession};
    use crate::wire::frame::FramerConfig;

    /// `sync_channel(1)`, the blocking adapter's reply channel.
    struct Std;

    impl ReplyChannel for Std {
        type Sender<T: Send + 'static> = SyncSender<T>;
        type Receiver<T: Send + 'static> = Receiver<T>;
        fn channel<T: Send + 'static>() -> (SyncSender<T>, Receiver<T>) {
            sync_channel(1)
        }
        fn send<T: Send + 'static>(tx: SyncSender<T>, value: T) -> bool {
            tx.try_send(value).is_ok()
        }
    }

    struct Rig {
        driver: ClientDriver<Std>,
        wakes: Arc<AtomicUsize>,
        t0: Instant,
    }

    fn rig(configure: impl FnOnce(&mut ClientOptions)) -> Rig {
        let mut options = ClientOptions::default();
        configure(&mut options);
        let wakes = Arc::new(AtomicUsize::new(0));
        let counter = wakes.clone();
        let cancels = CancelRegistry::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        let t0 = Instant::now();
        Rig {
            driver: ClientDriver::new(options, 4242, t0, cancels),
            wakes,
            t0,
        }
    }

    impl Rig {
        fn request(&mut self, method: &str, timeout: Option<Duration>) -> StartReply<Std> {
            let (reply, rx) = Std::channel();
            let cmd = Command::Request {
                method: method.to_owned(),
                params: None,
                timeout,
                progress: None,
                reply,
            };
            self.driver.handle_command(self.t0, cmd);
            rx.try_recv().expect("answered at once, without blocking")
        }

        /// Writes everything held, the way a pipe that takes `chunk` bytes at a time would.
        fn write_all(&mut self, chunk: usize) -> Vec<u8> {
            let mut wire = Vec::new();
            while let Some(bytes) = self.driver.poll_write() {
                let n = bytes.len().min(chunk);
                wire.extend_from_slice(&bytes[..n]);
                self.driver.handle_written(n);
            }
            wire
        }

        fn actions(&mut self) -> Vec<DriverAction> {
            std::iter::from_fn(|| self.driver.poll_action()).collect()
        }
    }

    fn lines(wire: &[u8]) -> Vec<serde_json::Value> {
        wire.split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).expect("JSON"))
            .collect()
    }

    fn cancelled_ids(wire: &[u8]) -> Vec<serde_json::Value> {
        lines(wire)
            .into_iter()
            .filter(|m| m["method"] == "notifications/cancelled")
            .map(|m| m["params"]["requestId"].clone())
            .collect()
    }

    /// G1: a full stdin (`WouldBlock`) parks the write: the output stream
    /// offers no bytes, only its deadline, until the loop says stdin is
    /// writable; then the same bytes, from where the pipe stopped.
    #[test]
    fn g1_a_full_stdin_parks_the_write_until_it_is_writable() {
        let mut r = rig(|_| {});
        let _a = r.request("a", None).expect("sent");
        let DriverOutput::Write(out) = r.driver.poll_output() else {
            panic!("the request is offered to write");
        };
        let first = out.bytes().to_vec();
        r.driver.handle_input(r.t0, DriverInput::Written(Ok(5)));
        let full = Err(std::io::ErrorKind::WouldBlock.into());
        r.driver.handle_input(r.t0, DriverInput::Written(full));
        assert!(matches!(r.driver.poll_output(), DriverOutput::Timeout(_)));
        assert!(matches!(r.driver.poll_output(), DriverOutput::Timeout(_)));
        r.driver.handle_input(r.t0, DriverInput::Writable);
        let DriverOutput::Write(out) = r.driver.poll_output() else {
            panic!("offered again once writable");
        };
        assert_eq!(out.bytes(), &first[5..]);
    }

    /// The I/O-result rule, decided by the driver: an end of stdout asks
    /// the loop to close that reader; a 0-byte write closes stdin.
    #[test]
    fn an_end_closes_its_reader_and_a_zero_byte_write_closes_stdin() {
        let mut r = rig(|_| {});
        let _a = r.request("a", None).expect("sent");
        r.driver.handle_input(r.t0, DriverInput::Written(Ok(0)));
        let look = &mut || Ok(None);
        let end = DriverInput::Stdout {
            result: Ok(0),
            look,
        };
        r.driver.handle_input(r.t0, end);
        let mut actions = Vec::new();
        while let DriverOutput::Action(a) = r.driver.poll_output() {
            actions.push(a);
        }
        assert!(
            actions
                .iter()
                .any(|a| matches!(a, DriverAction::CloseStdin)),
            "{actions:?}"
        );
        assert!(
            actions
                .iter()
                .any(|a| matches!(a, DriverAction::CloseReader(ChildStream::Stdout))),
            "{actions:?}"
        );
        assert!(!matches!(r.driver.poll_output(), DriverOutput::Write(_)));
    }

    /// G1/G9: one message at a time leaves the core, and only once the
    /// previous one is fully written; the rest waits in the core's bounded
    /// queue, where backpressure reaches `request`.
    #[test]
    fn g9_one_message_held_and_backpressure_reaches_request() {
        let mut r = rig(|o| {
            o.framer_mut().max_frame(4096);
            o.session_mut().max_outgoing_bytes(200);
        });
        let a = r.request("a", None).expect("sent");
        let first = r.driver.poll_write().expect("held").to_vec();
        r.driver.handle_written(3);
        assert_eq!(r.driver.poll_write().expect("the rest"), &first[3..]);
        // Nothing written any more: the queue fills to its limit.
        let mut sent = 1;
        let err = loop {
            match r.request("b", None) {
                Ok(_) => sent += 1,
                Err(e) => break e,
            }
            assert!(sent < 100, "the outgoing limit never applied");
        };
        assert!(matches!(
            err,
            RequestError::Send(SendError::Backpressure { limit: 200, .. })
        ));
        assert!(r.driver.server().session().outgoing_bytes() <= 200);
        // A cancel still goes out, within the control reserve.
        a.cancel.cancel("stop");
        r.driver.handle_cancels(r.t0);
        assert!(r.actions().is_empty());
        assert!(matches!(
            a.outcome.try_recv().expect("completed"),
            Err(RequestError::Failed(RequestFailure::Cancelled {
                cancel_sent: true
            }))
        ));
        let mut wire = first[..3].to_vec();
        wire.extend(r.write_all(1));
        let Id::Number(n) = a.id else {
            panic!("numeric ids")
        };
        assert_eq!(cancelled_ids(&wire), vec![serde_json::json!(n)]);
    }

    /// G6: cancels need no queue: as many as requests in flight, issued
    /// before the driver runs, each wakes it once and each reaches the wire
    /// once; a second cancel, a cancel by an unknown id and a cancel after
    /// completion are no-ops that do not even wake the driver.
    #[test]
    fn g6_every_cancel_reaches_the_wire_once_without_a_queue() {
        let max = 128;
        let mut r = rig(|o| {
            o.session_mut().max_in_flight(max);
        });
        let started: Vec<_> = (0..max)
            .map(|_| r.request("slow", None).expect("sent"))
            .collect();
        let _ = r.write_all(usize::MAX);
        assert_eq!(r.driver.cancels().len(), max);
        // Half through their handles, half by id (`Client::cancel`).
        for (i, s) in started.iter().enumerate() {
            if i % 2 == 0 {
                s.cancel.cancel("first");
            } else {
                r.driver.cancels().cancel(&s.id, "first");
            }
            s.cancel.cancel("second");
        }
        r.driver
            .cancels()
            .cancel(&Id::String("never-sent".into()), "x");
        assert_eq!(r.wakes.load(Ordering::SeqCst), max);
        r.driver.handle_cancels(r.t0);
        assert!(r.actions().is_empty());
        let wire = r.write_all(7);
        assert_eq!(cancelled_ids(&wire).len(), max);
        assert!(lines(&wire)
            .iter()
            .all(|m| m["params"]["reason"] == "first"));
        for s in &started {
            assert!(s.cancel.is_done());
            assert!(matches!(
                s.outcome.try_recv(),
                Ok(Err(RequestError::Failed(RequestFailure::Cancelled { .. })))
            ));
        }
        assert_eq!((r.driver.waiters(), r.driver.cancels().len()), (0, 0));
        // After completion: no wake, nothing sent.
        started[0].cancel.cancel("late");
        r.driver.cancels().cancel(&started[1].id, "late");
        assert_eq!(r.wakes.load(Ordering::SeqCst), max);
        r.driver.handle_cancels(r.t0);
        assert!(r.driver.poll_write().is_none());
    }

    /// G6: a caller that gave up before learning its request's id (the
    /// reply's receiver is gone) still gets the request cancelled.
    #[test]
    fn g6_request_abandoned_before_its_id_is_cancelled() {
        let mut r = rig(|_| {});
        let (reply, rx) = Std::channel();
        drop(rx);
        r.driver.handle_command(
            r.t0,
            Command::Request {
                method: "slow".into(),
                params: None,
                timeout: None,
                progress: None,
                reply,
            },
        );
        assert_eq!(r.driver.waiters(), 0);
        let wire = r.write_all(usize::MAX);
        let msgs = lines(&wire);
        assert_eq!(msgs.len(), 2, "{msgs:?}");
        assert_eq!(msgs[1]["params"]["reason"], ABANDONED);
    }

    /// G6: a call cancelled before the driver took its command (the flag's
    /// wake consumed by a turn that found nothing) still reaches the server
    /// once sent, and completes with `Cancelled`; an uncancelled call's
    /// outcome needs no id round trip.
    #[test]
    fn g6_call_cancelled_before_it_is_sent_reaches_the_server() {
        let mut r = rig(|_| {});
        let call = |r: &mut Rig, cancel: &CallCancel| {
            let (outcome, rx) = Std::channel();
            let cmd = Command::Call {
                method: "slow".into(),
                params: None,
                timeout: None,
                outcome,
                cancel: cancel.clone(),
                progress: None,
            };
            r.driver.handle_command(r.t0, cmd);
            rx
        };
        let early = CallCancel::new(r.driver.cancels());
        early.cancel("before sending");
        assert_eq!(r.wakes.load(Ordering::SeqCst), 1);
        // The wake's turn runs before the command arrives: nothing to cancel yet.
        r.driver.handle_cancels(r.t0);
        let rx = call(&mut r, &early);
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));
        r.driver.handle_cancels(r.t0);
        let _ = r.actions();
        let wire = r.write_all(usize::MAX);
        let msgs = lines(&wire);
        assert_eq!(msgs.len(), 2, "{msgs:?}");
        assert_eq!(cancelled_ids(&wire), vec![msgs[0]["id"].clone()]);
        assert_eq!(msgs[1]["params"]["reason"], "before sending");
        assert!(matches!(
            rx.try_recv(),
            Ok(Err(RequestError::Failed(RequestFailure::Cancelled { .. })))
        ));
        assert!(early.is_done());
        assert_eq!(r.driver.waiters(), 0);

        let plain = CallCancel::new(r.driver.cancels());
        let rx = call(&mut r, &plain);
        assert_eq!(r.driver.waiters(), 1);
        assert!(!plain.is_done());
        let wire = r.write_all(usize::MAX);
        assert_eq!(lines(&wire).len(), 1);
        drop(rx);
    }

    /// G6/G8 as a pair: the driver against the core's server session, bytes
    /// moved in odd chunks, a virtual clock. A timeout and a cancel both
    /// reach the server; an answered request completes its waiter.
    #[test]
    fn g6_pair_timeout_and_cancel_reach_the_server_and_answers_complete() {
        let mut r = rig(|_| {});
        let mut server = ServerSession::new(ServerConfig::default(), FramerConfig::default());
        let answered = r.request("tools/call", None).expect("sent");
        let cancelled = r.request("tools/call", None).expect("sent");
        let timed = r
            .request("tools/call", Some(Duration::from_millis(100)))
            .expect("sent");
        cancelled.cancel.cancel("user");
        r.driver.handle_cancels(r.t0);
        let later = r.t0 + Duration::from_millis(100);
        assert_eq!(r.driver.poll_timeout(), Some(later));
        r.driver.handle_timeout(later);
        assert!(r.actions().is_empty());
        for chunk in r.write_all(5).chunks(13) {
            server.handle_stdin(later, chunk);
        }
        let mut seen_cancels = Vec::new();
        let mut requests = Vec::new();
        while let Some(ev) = server.poll_event() {
            match ev {
                ServerEvent::Request(req) => requests.push(req.id),
                ServerEvent::Cancelled { id, .. } => seen_cancels.push(id),
                _ => {}
            }
        }
        assert_eq!(requests.len(), 3);
        seen_cancels.sort();
        let mut want = vec![cancelled.id.clone(), timed.id.clone()];
        want.sort();
        assert_eq!(seen_cancels, want);
        let result = RawValue::from_string("{\"ok\":1}".into()).expect("JSON");
        server
            .respond(&answered.id, Ok(&result))
            .expect("in flight");
        while let Some(bytes) = server.poll_transmit() {
            for chunk in bytes.chunks(3) {
                r.driver.server.handle_stdout(later, chunk);
            }
        }
        assert!(r.actions().is_empty());
        assert_eq!(
            answered
                .outcome
                .try_recv()
                .expect("completed")
                .expect("ok")
                .get(),
            "{\"ok\":1}"
        );
        assert!(timed
            .outcome
            .try_recv()
            .expect("completed")
            .unwrap_err()
            .is_timeout());
    }

    /// G11: at the end every waiter has an outcome, the registry is empty and
    /// later cancels are no-ops; the driver then polls nothing more.
    #[test]
    fn g11_finish_completes_every_waiter_and_closes_the_registry() {
        let mut r = rig(|o| {
            o.supervisor_mut()
                .stdin_close_grace(Duration::from_millis(10))
                .term_grace(Duration::from_millis(10));
        });
        let a = r.request("slow", None).expect("sent");
        let _ = r.write_all(usize::MAX);
        r.driver.handle_command(r.t0, Command::Shutdown);
        let mut actions = r.actions();
        assert!(
            matches!(actions.as_slice(), [DriverAction::CloseStdin]),
            "{actions:?}"
        );
        assert!(r.driver.poll_write().is_none());
        r.driver.handle_exited(r.t0, ExitStatus::Code(0));
        r.driver.server.handle_stdout_eof(r.t0);
        r.driver.server.handle_stderr_eof(r.t0);
        actions = r.actions();
        let Some(DriverAction::Finished(record)) = actions.pop() else {
            panic!("finished: {actions:?}");
        };
        assert_eq!(record.process.ended_by, EndedBy::ExitedAfterStdinClose);
        assert!(r.driver.is_finished());
        assert!(matches!(
            a.outcome.try_recv(),
            Ok(Err(RequestError::Failed(RequestFailure::SessionClosed)))
        ));
        assert!(r.driver.cancels().is_empty());
        a.cancel.cancel("too late");
        assert_eq!(r.wakes.load(Ordering::SeqCst), 0);
        assert!(r.driver.poll_action().is_none());
        assert!(matches!(
            a.outcome.try_recv(),
            Err(TryRecvError::Disconnected | TryRecvError::Empty)
        ));
    }

    /// A writer task that takes whole messages gets the next one only after
    /// acknowledging the previous one's length.
    #[test]
    fn g9_lent_message_is_acknowledged_before_the_next() {
        let mut r = rig(|_| {});
        let _a = r.request("a", None).expect("sent");
        let _b = r.request("b", None).expect("sent");
        let first = r.driver.poll_write_owned().expect("lent");
        assert!(r.driver.poll_write_owned().is_none());
        assert!(r.driver.is_writing());
        r.driver.handle_written(first.len());
        let second = r.driver.poll_write_owned().expect("the next");
        assert_ne!(first, second);
    }
}
