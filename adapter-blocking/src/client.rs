//! `Client`: spawn an MCP server and drive its session from one I/O thread.
//!
//! # Threads and queues
//!
//! - **The I/O thread** (one per session, named `mcp-io-<pid>`) owns
//!   the core's [`ClientDriver`], the [`Child`], the three pipes (non-blocking)
//!   and a [`mio::Poll`]. It reads stdout and stderr whenever they are
//!   readable, whatever the application threads do (G1), writes stdin only
//!   when it is writable, so a server that does not read never stalls the
//!   reads, and runs the core's timers as the poll timeout.
//! - **Application threads** talk to it through a bounded command queue
//!   ([`COMMAND_QUEUE`] commands) and wake it with a [`mio::Waker`]. Cancels
//!   bypass the queue: a flag per request in the core's [`CancelRegistry`]
//!   and the same waker, so a full queue never loses one. Each
//!   answer travels back over its own channel of capacity 1, so the I/O
//!   thread never blocks on an application thread.
//! - **Incoming messages** (server→client) cross over a slot of capacity 1,
//!   refilled from the core's bounded inbox only when it is empty: the core's
//!   inbox stays the real queue, with its overload policy (G5).
//! - **One outgoing message** at most waits in the I/O thread (taken from
//!   `poll_transmit` only when the previous one is fully written), so the
//!   core's outgoing limit stays the bound and backpressure reaches
//!   [`Client::request`].
//!
//! The child's exit is a readiness event on Linux (a pidfd registered with
//! the poll); elsewhere the exit is looked for after every wake-up and every
//! [`EXIT_POLL_TICK`] while the process is alive. Either way it is observed
//! without reaping (`waitid` with `WNOWAIT`, through
//! [`ProcessGroup`](mcp_stdio_sys::ProcessGroup)): the server stays a zombie,
//! so its group id stays ours while the core may still signal it, and is
//! reaped only after the core's `Finished`; its group is never signalled
//! after that.

use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use mcp_stdio_core::CancelHandle;
use mcp_stdio_core::ChildStream;
use mcp_stdio_core::CommandSpec;
use mcp_stdio_core::Signal;
use mcp_stdio_core::{
    tools_call_params, tools_list_params, LiveSnapshot, Progress, ProgressPoll, ProgressQueue,
    TOOLS_CALL, TOOLS_LIST,
};
use mcp_stdio_core::{
    CancelRegistry, ClientDriver, DriverAction, DriverInput, DriverOutput, ReplyChannel, ABANDONED,
};
use mcp_stdio_core::{ClientMetrics, Deadline, Incoming, RequestFailure, SendError};
use mcp_stdio_core::{ClientOptions, InitializeError, RequestError, SessionRecord};
use mcp_stdio_core::{ErrorObject, Id, Notification, RawResult, RawValue, Request};
use mcp_stdio_core::{Negotiated, Negotiation, NegotiationStep};
use mio::unix::pipe;
use mio::{Events, Interest, Poll, Token, Waker};

use mcp_stdio_sys::log_relay::{self, forward_server_stderr, Level};

use crate::os;

/// Commands queued from application threads to the I/O thread. Cancels never
/// pass through it (see [`CancelRegistry`]), so a full queue loses none.
const COMMAND_QUEUE: usize = 256;
/// Commands the I/O thread takes per turn before it reads and writes again.
const COMMANDS_PER_TURN: usize = 64;
/// Bytes read from stderr per read call.
const STDERR_READ: usize = 16 * 1024;
/// Reads of one stream per turn (at most 1 MiB of stdout) before the other
/// sources get their turn; the stream stays marked readable, so the next
/// turn does not wait for a new event.
const READS_PER_TURN: usize = 16;
use mcp_stdio_sys::{ProcessGroup, Signalled, EXIT_POLL_TICK};

const STDIN: Token = Token(0);
const STDOUT: Token = Token(1);
const STDERR: Token = Token(2);
const CHILD_EXIT: Token = Token(3);
const WAKER: Token = Token(4);

type Outcome = Result<RawResult, RequestError>;

/// Capacity-1 `sync_channel`s carry the I/O thread's replies.
#[derive(Debug)]
struct OneShot;

impl ReplyChannel for OneShot {
    type Sender<T: Send + 'static> = SyncSender<T>;
    type Receiver<T: Send + 'static> = Receiver<T>;

    fn channel<T: Send + 'static>() -> (Self::Sender<T>, Self::Receiver<T>) {
        reply_channel()
    }

    fn send<T: Send + 'static>(tx: Self::Sender<T>, value: T) -> bool {
        // Capacity 1, one message: `try_send` only fails if the receiver is gone.
        tx.try_send(value).is_ok()
    }
}

type Command = mcp_stdio_core::Command<OneShot>;

/// The application's end of the command queue: every send wakes the I/O thread.
#[derive(Debug, Clone)]
struct Commands {
    tx: SyncSender<Command>,
    waker: Arc<Waker>,
}

impl Commands {
    /// Queues `cmd`, waiting while the queue is full (the I/O thread empties
    /// it every turn). Fails once the session is over.
    fn send(&self, cmd: Command) -> Result<(), RequestError> {
        self.tx
            .send(cmd)
            .map_err(|_| RequestError::from(SendError::Closed))?;
        self.wake();
        Ok(())
    }

    fn wake(&self) {
        if let Err(e) = self.waker.wake() {
            tracing::debug!(error = %e, "waking the I/O thread failed");
        }
    }
}

/// A reply channel: capacity 1 and one message, so sending never blocks.
fn reply_channel<T>() -> (SyncSender<T>, Receiver<T>) {
    mpsc::sync_channel(1)
}

/// State shared by the application threads and the I/O thread.
#[derive(Debug)]
struct Shared {
    /// The incoming slot: capacity 1 (G5: the core's inbox is the queue).
    incoming: Mutex<Slot>,
    incoming_ready: Condvar,
    /// The session is over (set by the I/O thread, after the child was reaped).
    finished: AtomicBool,
    /// The `Client` was dropped without `shutdown`: its group was killed.
    dropped: AtomicBool,
}

#[derive(Debug, Default)]
struct Slot {
    message: Option<IncomingMessage>,
    closed: bool,
}

impl Shared {
    fn slot(&self) -> MutexGuard<'_, Slot> {
        // Nothing panics while holding this lock; a poisoned slot is still consistent.
        self.incoming.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A server→client message.
#[derive(Debug)]
#[non_exhaustive]
pub enum IncomingMessage {
    /// A request; answer it with [`Responder::respond`].
    Request(Request, Responder),
    /// A notification.
    Notification(Notification),
}

/// Answers one server→client request.
#[derive(Debug)]
pub struct Responder {
    id: Id,
    commands: Commands,
}

impl Responder {
    /// The id of the request this answers.
    pub fn id(&self) -> &Id {
        &self.id
    }

    /// Sends the answer: a raw result or an error object. Blocks until the
    /// I/O thread has queued it (or refused it: session closed, backpressure).
    pub fn respond(self, result: Result<Box<RawValue>, ErrorObject>) -> Result<(), RequestError> {
        let (reply, rx) = reply_channel();
        self.commands.send(Command::Respond {
            id: self.id,
            result,
            reply,
        })?;
        rx.recv().unwrap_or(Err(SendError::Closed.into()))
    }
}

/// A request in flight. [`wait`](Self::wait) for its result;
/// [`cancel`](Self::cancel) it, or drop it, to cancel it on the server (G6):
/// a UI timeout that drops the handle is a real cancel, not a forgotten
/// request.
#[derive(Debug)]
pub struct PendingRequest {
    id: Id,
    rx: Receiver<Outcome>,
    cancel: CancelHandle,
    done: bool,
}

impl PendingRequest {
    /// The request's id.
    pub fn id(&self) -> &Id {
        &self.id
    }

    /// A handle that cancels this request from another thread.
    pub fn cancel_handle(&self) -> CancelHandle {
        self.cancel.clone()
    }

    /// Cancels the request: it completes with `Cancelled` and the server is
    /// sent `notifications/cancelled`.
    pub fn cancel(&self, reason: &str) {
        self.cancel_handle().cancel(reason);
    }

    /// Blocks until the request completes (result, error, timeout, cancel or
    /// the end of the session).
    pub fn wait(mut self) -> Outcome {
        let r = self.rx.recv();
        self.done = true;
        r.unwrap_or(Err(RequestFailure::SessionClosed.into()))
    }

    /// Blocks at most `timeout` for the outcome; `None` if the request is
    /// still in flight (it stays in flight: wait again, or cancel it). Returns
    /// `Some` once; asked again after that, it reports `SessionClosed`.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<Outcome> {
        match self.rx.recv_timeout(timeout) {
            Ok(r) => {
                self.done = true;
                Some(r)
            }
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                self.done = true;
                Some(Err(RequestFailure::SessionClosed.into()))
            }
        }
    }
}

impl Drop for PendingRequest {
    fn drop(&mut self) {
        if !self.done {
            // Lossless and non-blocking: a flag and a wake, no queue.
            self.cancel.cancel(ABANDONED);
        }
    }
}

/// A spawned MCP server and its session, for threads without an async runtime.
///
/// One I/O thread owns the core's [`ClientDriver`]: it reads the server's
/// stdout and stderr continuously, whatever the application threads do
/// (G1), writes stdin without ever blocking those reads, applies deadlines
/// and runs the shutdown sequence (G11). Application threads talk to it
/// through a bounded command queue (cancels bypass it and are never lost);
/// every method may be called from any thread (`Client` is `Send + Sync`).
/// The decisions are the core's [`ClientDriver`].
///
/// Dropping a `Client` without [`shutdown`](Self::shutdown) kills the
/// server's process group at once (one `killpg` system call); the I/O thread
/// then observes the exit, reaps the child and ends by itself. `Drop` never
/// waits for it, and never signals a group whose leader the I/O thread
/// already reaped (its id could have been reused).
#[derive(Debug)]
pub struct Client {
    /// Requests, notifications, cancels and counters; `Deref` gives its
    /// methods to the `Client`.
    handle: ClientHandle,
    io_thread: Option<JoinHandle<Option<SessionRecord>>>,
    group: ProcessGroup,
    /// A fresh negotiation under the options' policy, for `initialize`.
    negotiation: Negotiation,
    negotiated: OnceLock<Negotiated>,
}

/// A handle on a running session that can be cloned into other threads:
/// requests, notifications, cancels, progress, counters and the live stderr
/// tail — everything but ending the session, which stays the [`Client`]'s
/// ([`shutdown`](Client::shutdown), [`kill`](Client::kill), dropping it).
/// A handle does not keep the session alive: once the `Client` ended it,
/// the handle's requests fail with `SessionClosed`. Every method is also
/// the `Client`'s (it dereferences to its handle).
#[derive(Debug, Clone)]
pub struct ClientHandle {
    commands: Commands,
    cancels: Arc<CancelRegistry>,
    shared: Arc<Shared>,
    pid: u32,
    request_timeout: Option<Duration>,
}

impl std::ops::Deref for Client {
    type Target = ClientHandle;

    fn deref(&self) -> &ClientHandle {
        &self.handle
    }
}

/// The progress of one request (`notifications/progress`), as they come: an
/// iterator whose `next` blocks until the next update, and ends once the
/// request completed and every update was taken. At most
/// [`MAX_PROGRESS_QUEUED`](mcp_stdio_core::MAX_PROGRESS_QUEUED) wait; past
/// it the oldest is dropped ([`dropped`](Self::dropped)).
#[derive(Debug)]
pub struct ProgressStream {
    queue: Arc<ProgressQueue>,
    changed: Arc<Changes>,
}

/// How a blocking reader waits for its progress queue: the core's queue
/// never waits (it is pushed by the I/O thread and polled), so its wake
/// counts a change here and wakes the reader's condition variable.
#[derive(Debug, Default)]
struct Changes {
    count: Mutex<u64>,
    changed: Condvar,
}

impl Changes {
    fn lock(&self) -> MutexGuard<'_, u64> {
        // Nothing panics under the lock; a poisoned count is still a count.
        self.count.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A push or the close happened: wakes the waiting reader.
    fn notify(&self) {
        *self.lock() += 1;
        self.changed.notify_all();
    }

    /// Changes so far; read before looking at the queue, so a push after
    /// the look is seen by [`wait_past`](Self::wait_past).
    fn seen(&self) -> u64 {
        *self.lock()
    }

    /// Waits until a change after `seen`, or the `deadline` (`None`:
    /// forever); whether there was one.
    fn wait_past(&self, seen: u64, deadline: Option<Instant>) -> bool {
        let mut count = self.lock();
        while *count == seen {
            count = match deadline {
                None => self
                    .changed
                    .wait(count)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return false;
                    }
                    self.changed
                        .wait_timeout(count, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
        true
    }
}

impl ProgressStream {
    fn new() -> Self {
        let changed = Arc::new(Changes::default());
        let wake = changed.clone();
        Self {
            queue: ProgressQueue::new(move || wake.notify()),
            changed,
        }
    }

    /// The next update, or why there is none, waiting until `deadline`
    /// (`None`: as long as it takes).
    fn wait(&self, deadline: Option<Instant>) -> ProgressPoll {
        loop {
            let seen = self.changed.seen();
            match self.queue.try_next() {
                ProgressPoll::Empty => {}
                found => return found,
            }
            if !self.changed.wait_past(seen, deadline) {
                // No push or close since `seen`: the queue is still empty.
                return ProgressPoll::Empty;
            }
        }
    }

    /// The next update, waiting at most `timeout`: an update, `Empty` when
    /// none came in time, `Ended` once the request completed and every
    /// update was taken.
    pub fn next_timeout(&self, timeout: Duration) -> ProgressPoll {
        self.wait(Instant::now().checked_add(timeout))
    }

    /// Updates dropped because this stream fell behind.
    pub fn dropped(&self) -> u64 {
        self.queue.dropped()
    }
}

impl Iterator for ProgressStream {
    type Item = Progress;

    /// Blocks until the next update; `None` once the request completed.
    fn next(&mut self) -> Option<Progress> {
        match self.wait(None) {
            ProgressPoll::Update(u) => Some(u),
            _ => None,
        }
    }
}

impl Client {
    /// Spawns `command` (no shell; its own process group) with stdin, stdout
    /// and stderr piped, and starts its I/O thread.
    ///
    /// On Linux the server is tied to this process: if this process dies
    /// without shutting it down (even by `SIGKILL`), the kernel kills the
    /// server (`PR_SET_PDEATHSIG`, set from one long-lived spawner thread so
    /// the thread that called `spawn` may exit). Elsewhere the server sees
    /// its stdin close.
    pub fn spawn(command: &CommandSpec, options: ClientOptions) -> io::Result<Self> {
        let negotiation = options.negotiation();
        let request_timeout = options.get_session().get_default_timeout();
        let (driver, commands, shared) = Driver::spawn(command, options)?;
        let pid = driver.pid;
        let group = driver.group.clone();
        let cancels = driver.core.cancels().clone();
        // The driver is handed over after the thread exists, so a failed
        // thread spawn leaves the child with us to kill and reap.
        let (handoff, handed) = mpsc::sync_channel::<Driver>(1);
        let spawned = std::thread::Builder::new()
            .name(format!("mcp-io-{pid}"))
            .spawn(move || handed.recv().ok().map(Driver::run));
        let io_thread = match spawned {
            Ok(t) => t,
            Err(e) => {
                driver.abandon();
                return Err(e);
            }
        };
        if let Err(mpsc::SendError(driver)) = handoff.send(driver) {
            // The thread is gone before taking it: cannot happen short of a
            // panic in `recv`; clean up all the same.
            driver.abandon();
            return Err(io::Error::other("the I/O thread ended before it started"));
        }
        Ok(Self {
            handle: ClientHandle {
                commands,
                cancels,
                shared,
                pid,
                request_timeout,
            },
            io_thread: Some(io_thread),
            group,
            negotiation,
            negotiated: OnceLock::new(),
        })
    }

    /// Sends `signal` to the server's process group, as a host's own
    /// `SIGTERM` would, while that group id is still the server's: after the
    /// session reaped the server nothing is sent ([`Signalled::Refused`]).
    pub fn signal_group(&self, signal: Signal) -> Signalled {
        self.group.signal(signal)
    }

    /// A handle on this session to clone into other threads (see
    /// [`ClientHandle`]).
    pub fn handle(&self) -> ClientHandle {
        self.handle.clone()
    }

    /// Agrees on a protocol revision with the server, under the options'
    /// [`VersionPolicy`](mcp_stdio_core::VersionPolicy): by default a
    /// `server/discover` probe (2026-07-28) and, when it does not settle a
    /// modern version, the `initialize` handshake (then
    /// `notifications/initialized`); see [`Negotiation`]. Once a modern
    /// version is agreed, every request this client sends carries it and the
    /// client's context in `_meta`, and requests from the server are
    /// refused. Neither handshake request is ever cancelled. Notifications
    /// the server sends meanwhile are kept for
    /// [`next_incoming`](Self::next_incoming).
    pub fn initialize(&self) -> Result<Negotiated, InitializeError> {
        let mut negotiation = self.negotiation.clone();
        let mut step = negotiation.start();
        let result = loop {
            step = match step {
                NegotiationStep::Request {
                    method,
                    params,
                    timeout,
                } => {
                    let timeout = timeout.or(self.request_timeout);
                    let outcome = self.request_with_timeout(method, Some(params), timeout);
                    negotiation.handle_response(outcome)
                }
                NegotiationStep::Notify { method } => {
                    negotiation.handle_notified(self.notify(method, None))
                }
                NegotiationStep::Done(result) => break result?,
            };
        };
        self.commands
            .send(Command::Negotiated(Box::new(result.clone())))?;
        let _ = self.negotiated.set(result.clone());
        Ok(result)
    }

    /// What [`initialize`](Self::initialize) agreed (its first success), if
    /// it has run.
    pub fn negotiated(&self) -> Option<&Negotiated> {
        self.negotiated.get()
    }

    /// The next server→client request or notification, waiting at most
    /// `timeout` (`None`: as long as it takes); `None` on timeout or once the
    /// session is over. Messages wait in the core's bounded inbox meanwhile;
    /// when it is full its overload policy applies and the reader goes on (G5).
    pub fn next_incoming(&self, timeout: Option<Duration>) -> Option<IncomingMessage> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut slot = self.shared.slot();
        loop {
            if let Some(message) = slot.message.take() {
                drop(slot);
                // The slot is free: the I/O thread refills it from the inbox.
                self.commands.wake();
                return Some(message);
            }
            if slot.closed {
                return None;
            }
            slot = match (timeout, deadline) {
                (Some(_), Some(d)) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    self.shared
                        .incoming_ready
                        .wait_timeout(slot, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                // No timeout, or one too large to represent: wait as long as it takes.
                _ => self
                    .shared
                    .incoming_ready
                    .wait(slot)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
    }

    /// Graceful shutdown (G11): pending requests fail, stdin is closed, then
    /// `SIGTERM` and `SIGKILL` to the group after their graces, the readers
    /// drain with a deadline, and the record of what was observed is returned.
    /// Blocks until the I/O thread has ended.
    pub fn shutdown(mut self) -> SessionRecord {
        let _ = self.commands.send(Command::Shutdown);
        self.wait_record()
    }

    /// Like [`shutdown`](Self::shutdown) but starts with `SIGTERM` at once.
    pub fn kill(mut self) -> SessionRecord {
        let _ = self.commands.send(Command::Kill);
        self.wait_record()
    }

    /// Blocks until the server ends by itself (or the session closes) and
    /// returns the record, without asking it to stop.
    pub fn wait(mut self) -> SessionRecord {
        self.wait_record()
    }

    fn wait_record(&mut self) -> SessionRecord {
        let thread = self
            .io_thread
            .take()
            .expect("the I/O thread is joined only once, here");
        match thread.join() {
            Ok(Some(record)) => record,
            Ok(None) => unreachable!("the driver is handed over before `spawn` returns"),
            // The driver never panics on input; a panic is a bug, surfaced as one.
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

impl ClientHandle {
    /// The server's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends a request with the configured default timeout and blocks until
    /// its result.
    pub fn request(&self, method: &str, params: Option<Box<RawValue>>) -> Outcome {
        self.start_request(method, params, self.request_timeout)?
            .wait()
    }

    /// Sends a request with an explicit deadline — the session's default,
    /// none at all, or after a duration ([`Deadline`]) — and blocks until its
    /// result.
    pub fn request_with_deadline(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        deadline: Deadline,
    ) -> Outcome {
        self.start_request(method, params, deadline.as_timeout())?
            .wait()
    }

    /// Sends a request with its own timeout and blocks until its result.
    /// `None` takes the session's default timeout; for no deadline at all use
    /// [`request_with_deadline`](Self::request_with_deadline) with
    /// [`Deadline::None`].
    pub fn request_with_timeout(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
    ) -> Outcome {
        self.start_request(method, params, timeout)?.wait()
    }

    /// Sends a request and returns it in flight, to be waited for or
    /// cancelled. Blocks only until the I/O thread has queued it.
    pub fn start_request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
    ) -> Result<PendingRequest, RequestError> {
        self.start(method, params, timeout, None)
    }

    fn start(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
        progress: Option<Arc<ProgressQueue>>,
    ) -> Result<PendingRequest, RequestError> {
        let (reply, rx) = reply_channel();
        self.commands.send(Command::Request {
            method: method.to_owned(),
            params,
            timeout,
            progress,
            reply,
        })?;
        let started = rx.recv().unwrap_or(Err(SendError::Closed.into()))?;
        Ok(PendingRequest {
            id: started.id,
            rx: started.outcome,
            cancel: started.cancel,
            done: false,
        })
    }

    /// Sends a notification. Blocks only until the I/O thread has queued it.
    pub fn notify(&self, method: &str, params: Option<Box<RawValue>>) -> Result<(), RequestError> {
        let (reply, rx) = reply_channel();
        self.commands.send(Command::Notify {
            method: method.to_owned(),
            params,
            reply,
        })?;
        rx.recv().unwrap_or(Err(SendError::Closed.into()))
    }

    /// Cancels a request by id (see [`PendingRequest::cancel`]); a no-op for
    /// an id not in flight. Never blocks and is never lost.
    pub fn cancel(&self, id: &Id, reason: &str) {
        self.cancels.cancel(id, reason);
    }

    /// The session's counters now; `None` once the session is over.
    pub fn metrics(&self) -> Option<ClientMetrics> {
        let (reply, rx) = reply_channel();
        self.commands.send(Command::Metrics { reply }).ok()?;
        rx.recv().ok()
    }

    /// Whether the session is over (the server's process was seen to end).
    pub fn is_finished(&self) -> bool {
        self.shared.finished.load(Ordering::Acquire)
    }

    /// Starts a request whose progress the server may report: its params
    /// get `_meta.progressToken` (the request's own id), and each
    /// `notifications/progress` for it goes to the returned stream instead
    /// of [`next_incoming`](Client::next_incoming). The stream ends when the
    /// request completes. `timeout` as in [`start_request`](Self::start_request).
    ///
    /// # Errors
    /// As [`start_request`](Self::start_request); params that are not an
    /// object cannot carry the token.
    pub fn start_request_with_progress(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
    ) -> Result<(PendingRequest, ProgressStream), RequestError> {
        let progress = ProgressStream::new();
        let pending = self.start(method, params, timeout, Some(progress.queue.clone()))?;
        Ok((pending, progress))
    }

    /// One page of the server's tools (`tools/list` from `cursor`), raw: the
    /// result's `tools` and `nextCursor` as the server sent them.
    pub fn list_tools(&self, cursor: Option<&str>) -> Outcome {
        self.request(TOOLS_LIST, tools_list_params(cursor))
    }

    /// Calls the tool `name` with `arguments` (an object, or `null`), with
    /// the session's default timeout; the result raw (`content`,
    /// `structuredContent`, `isError`).
    pub fn call_tool(&self, name: &str, arguments: &serde_json::Value) -> Outcome {
        let params = tools_call_params(name, arguments).map_err(RequestError::from)?;
        self.request(TOOLS_CALL, Some(params))
    }

    /// [`call_tool`](Self::call_tool) with its progress: the call in flight,
    /// to wait for or cancel, and the stream of its progress updates (see
    /// [`start_request_with_progress`](Self::start_request_with_progress)).
    ///
    /// # Errors
    /// `arguments` is not an object, or the request could not be sent.
    pub fn call_tool_with_progress(
        &self,
        name: &str,
        arguments: &serde_json::Value,
    ) -> Result<(PendingRequest, ProgressStream), RequestError> {
        let params = tools_call_params(name, arguments).map_err(RequestError::from)?;
        self.start_request_with_progress(TOOLS_CALL, Some(params), None)
    }

    /// The session's counters and the newest `stderr_bytes` bytes the server
    /// wrote to stderr (of the tail the session keeps), while it runs;
    /// `None` once the session is over (the record has them then).
    pub fn snapshot(&self, stderr_bytes: usize) -> Option<LiveSnapshot> {
        let (reply, rx) = reply_channel();
        self.commands
            .send(Command::Snapshot {
                stderr_bytes,
                reply,
            })
            .ok()?;
        rx.recv().ok()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if self.io_thread.is_some() && !self.shared.finished.load(Ordering::Acquire) {
            // Synchronous: one syscall, refused if the I/O thread reaped the
            // server meanwhile. The I/O thread sees the flag, observes the
            // exit, reaps the child and ends; nobody joins it.
            let _ = self.group.signal(Signal::Kill);
            self.shared.dropped.store(true, Ordering::Release);
            self.commands.wake();
        }
    }
}

/// The poller and the child's pipes, non-blocking and registered.
#[derive(Debug)]
struct Io {
    poll: Poll,
    waker: Arc<Waker>,
    stdin: Option<pipe::Sender>,
    stdout: Option<pipe::Receiver>,
    stderr: Option<pipe::Receiver>,
    /// A pidfd: readable once the child exits (Linux).
    exit_fd: Option<OwnedFd>,
    /// Readiness seen and not yet used up (until `WouldBlock`). They start
    /// true: a first attempt costs one syscall and misses nothing.
    stdin_ready: bool,
    stdout_ready: bool,
    stderr_ready: bool,
}

impl Io {
    fn new(child: &mut Child, group: &ProcessGroup) -> io::Result<Self> {
        let pid = group.pgid();
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let mut stdin = pipe::Sender::from(child.stdin.take().expect("stdin is piped"));
        let mut stdout = pipe::Receiver::from(child.stdout.take().expect("stdout is piped"));
        let mut stderr = pipe::Receiver::from(child.stderr.take().expect("stderr is piped"));
        // Pipes from `Child` are blocking; the poller needs them non-blocking.
        stdin.set_nonblocking(true)?;
        stdout.set_nonblocking(true)?;
        stderr.set_nonblocking(true)?;
        let registry = poll.registry();
        registry.register(&mut stdin, STDIN, Interest::WRITABLE)?;
        registry.register(&mut stdout, STDOUT, Interest::READABLE)?;
        registry.register(&mut stderr, STDERR, Interest::READABLE)?;
        let exit_fd = os::register_exit_fd(registry, exit_fd(group), CHILD_EXIT, pid);
        Ok(Self {
            poll,
            waker,
            stdin: Some(stdin),
            stdout: Some(stdout),
            stderr: Some(stderr),
            exit_fd,
            stdin_ready: true,
            stdout_ready: true,
            stderr_ready: true,
        })
    }

    fn close_stdin(&mut self) {
        crate::os::close(&self.poll, &mut self.stdin, &mut self.stdin_ready);
    }

    fn close_stdout(&mut self) {
        crate::os::close(&self.poll, &mut self.stdout, &mut self.stdout_ready);
    }

    fn close_stderr(&mut self) {
        crate::os::close(&self.poll, &mut self.stderr, &mut self.stderr_ready);
    }

    fn close_exit_fd(&mut self) {
        crate::os::close_fd(&self.poll, &mut self.exit_fd);
    }
}

/// The pidfd for the child's exit, unless a test asked for the fallback.
fn exit_fd(group: &ProcessGroup) -> Option<OwnedFd> {
    #[cfg(test)]
    if tests::NO_PIDFD.with(std::cell::Cell::get) {
        return None;
    }
    group.exit_fd()
}

/// The I/O thread's state: the core's [`ClientDriver`], the child and the pipes.
struct Driver {
    core: ClientDriver<OneShot>,
    /// The server: reaped only after the core's `Finished` (through `group`).
    child: Child,
    group: ProcessGroup,
    pid: u32,
    io: Io,
    commands: Receiver<Command>,
    /// The last turn stopped at `COMMANDS_PER_TURN` with commands left.
    commands_more: bool,
    commands_tx: Commands,
    shared: Arc<Shared>,
    kill_requested: bool,
    /// The core's next deadline, from its last drained output.
    deadline: Option<Instant>,
    err_buf: Vec<u8>,
}

/// Spawns the server with its three pipes, in its own process group.
fn spawn_server(command: &CommandSpec) -> io::Result<Child> {
    // Tied to this process (G11): forked on the process-wide spawner thread.
    let child = mcp_stdio_sys::spawn_tied(command, |mut cmd| {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
    })?;
    tracing::debug!(pid = child.id(), command = %command.display(), "spawned MCP server");
    Ok(child)
}

impl Driver {
    /// Spawns the child and sets up everything the I/O thread will own.
    fn spawn(
        command: &CommandSpec,
        options: ClientOptions,
    ) -> io::Result<(Self, Commands, Arc<Shared>)> {
        let mut child = spawn_server(command)?;
        let pid = child.id();
        let group = ProcessGroup::new(pid);
        let io = match Io::new(&mut child, &group) {
            Ok(io) => io,
            Err(e) => {
                // No session yet (and no stderr grant taken): just end the child.
                let _ = group.signal(Signal::Kill);
                // SIGKILL was sent, so this returns promptly.
                let _ = group.reap(|| child.wait().map(Some));
                return Err(e);
            }
        };
        let (commands_tx, commands_rx) = mpsc::sync_channel(COMMAND_QUEUE);
        let commands = Commands {
            tx: commands_tx,
            waker: io.waker.clone(),
        };
        let shared = Arc::new(Shared {
            incoming: Mutex::new(Slot::default()),
            incoming_ready: Condvar::new(),
            finished: AtomicBool::new(false),
            dropped: AtomicBool::new(false),
        });
        let cancels = CancelRegistry::new({
            let commands = commands.clone();
            // An eventfd write: stored until the next poll, never lost, never blocks.
            move || commands.wake()
        });
        let core = ClientDriver::new(options, pid, Instant::now(), cancels);
        let driver = Self {
            core,
            child,
            group,
            pid,
            io,
            commands: commands_rx,
            commands_more: false,
            commands_tx: commands.clone(),
            shared: shared.clone(),
            kill_requested: false,
            deadline: None,
            err_buf: vec![0; STDERR_READ],
        };
        Ok((driver, commands, shared))
    }

    fn run(mut self) -> SessionRecord {
        let mut events = Events::with_capacity(16);
        loop {
            // The one clock read of this turn.
            let now = Instant::now();
            // Inputs: commands (each after the cancels flagged before it, so a
            // `cancel` then a `request` reach the wire in that order, G6),
            // cancels, the exit, stdout, stderr, the clock.
            self.take_commands(now);
            if !self.kill_requested && self.shared.dropped.load(Ordering::Acquire) {
                // The Client was dropped and its group killed: fail what waits.
                self.kill_requested = true;
                self.core.handle_input(now, DriverInput::ClientGone);
            }
            self.core.handle_input(now, DriverInput::Cancels);
            // The exit first: when it and stdout's EOF arrive together, the
            // record then says the server exited by itself, which it did.
            self.observe_exit(now);
            self.read_stdout(now);
            self.read_stderr(now);
            if self.deadline.is_some_and(|d| d <= now) {
                self.core.handle_input(now, DriverInput::Timeout);
            }
            // Outputs, in the core's order.
            if let Some(record) = self.pump(now) {
                return self.finish(record);
            }
            self.deliver_incoming(now);
            // Wait for readiness, a command, a cancel, the exit or a deadline.
            let timeout = self.poll_timeout(now);
            if let Err(e) = self.io.poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    log_relay::event(
                        self.pid,
                        Level::Error,
                        "polling the server's pipes failed",
                        Some(e.to_string()),
                    );
                    // Do not spin on a persistent error; deadlines still run.
                    std::thread::sleep(EXIT_POLL_TICK);
                }
                continue;
            }
            for event in events.iter() {
                // Spurious events are harmless: the next read or write says
                // `WouldBlock` and the flag drops again.
                match event.token() {
                    STDIN => {
                        self.io.stdin_ready = true;
                        self.core
                            .handle_input(Instant::now(), DriverInput::Writable);
                    }
                    STDOUT => self.io.stdout_ready = true,
                    STDERR => self.io.stderr_ready = true,
                    // The exit, commands and cancels are checked every turn.
                    _ => {}
                }
            }
        }
    }

    fn take_commands(&mut self, now: Instant) {
        self.commands_more = false;
        for _ in 0..COMMANDS_PER_TURN {
            match self.commands.try_recv() {
                // A cancel flagged before this command was sent goes out
                // before it (G6): the core takes the cancels first.
                Ok(cmd) => self.core.handle_input(now, DriverInput::Command(cmd)),
                // Disconnected cannot happen: this thread holds a sender.
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return,
            }
        }
        self.commands_more = true;
    }

    fn read_stdout(&mut self, now: Instant) {
        for _ in 0..READS_PER_TURN {
            let room = self.core.stdout_room().zeroed();
            let Some(r) = os::read_ready(&mut self.io.stdout, &mut self.io.stdout_ready, room)
            else {
                return;
            };
            // Only bytes keep this turn reading: what else a read came to
            // is the core's to decide (a `CloseReader` at the end).
            let more = matches!(r, Ok(n) if n > 0);
            let (child, group) = (&mut self.child, &self.group);
            let look = &mut || group.observe_exit(|| child.try_wait());
            self.core
                .handle_input(now, DriverInput::Stdout { result: r, look });
            if !more {
                return;
            }
        }
    }

    fn read_stderr(&mut self, now: Instant) {
        for _ in 0..READS_PER_TURN {
            let buf = &mut self.err_buf;
            let Some(r) = os::read_ready(&mut self.io.stderr, &mut self.io.stderr_ready, buf)
            else {
                return;
            };
            let more = matches!(r, Ok(n) if n > 0);
            let (child, group) = (&mut self.child, &self.group);
            let look = &mut || group.observe_exit(|| child.try_wait());
            let input = DriverInput::Stderr {
                result: r,
                buf,
                look,
            };
            self.core.handle_input(now, input);
            if !more {
                return;
            }
        }
    }

    /// After every wake-up: one `waitid(WNOHANG | WNOWAIT)`, which leaves
    /// the server a zombie (its group id stays ours until the reap).
    fn observe_exit(&mut self, now: Instant) {
        if !self.core.exit_seen() {
            let child = &mut self.child;
            // An error: no status can ever be observed; the supervisor's
            // deadlines end the session.
            if let Some(r) = self.group.observe_exit(|| child.try_wait()).transpose() {
                self.core.handle_input(now, DriverInput::Exited(r));
            }
        }
        if self.core.exit_seen() {
            self.io.close_exit_fd();
        }
    }

    /// Drains every core output in its order, writing the held message
    /// until `WouldBlock`; returns the record once the session is over.
    fn pump(&mut self, now: Instant) -> Option<SessionRecord> {
        loop {
            let action = match self.core.poll_output() {
                DriverOutput::Action(action) => action,
                DriverOutput::Write(out) => {
                    let r = match self.io.stdin.as_mut() {
                        Some(stdin) => stdin.write(out.bytes()),
                        None => Err(io::ErrorKind::BrokenPipe.into()),
                    };
                    if r.as_ref()
                        .is_err_and(|e| e.kind() == io::ErrorKind::WouldBlock)
                    {
                        self.io.stdin_ready = false;
                    }
                    // The core's rule: `WouldBlock` parks stdin until the
                    // next writable event; a failed or 0-byte write ends the
                    // writing (a `CloseStdin` follows).
                    self.core.handle_input(now, DriverInput::Written(r));
                    continue;
                }
                DriverOutput::Timeout(deadline) => {
                    self.deadline = deadline;
                    return None;
                }
            };
            match action {
                DriverAction::CloseStdin => self.io.close_stdin(),
                DriverAction::CloseReader(ChildStream::Stdout) => self.io.close_stdout(),
                DriverAction::CloseReader(ChildStream::Stderr) => self.io.close_stderr(),
                DriverAction::LogStderrLine(line) => forward_server_stderr(self.pid, line),
                DriverAction::Note(note) => os::log_note(self.pid, note),
                DriverAction::SignalGroup(sig) => {
                    let _ = self.group.signal(sig);
                }
                DriverAction::AbandonReaders => {
                    log_relay::event(
                        self.pid,
                        Level::Warn,
                        "server pipes still open past the drain deadline; abandoning readers",
                        None,
                    );
                    self.io.close_stdout();
                    self.io.close_stderr();
                }
                DriverAction::Finished(record) => return Some(*record),
                _ => {}
            }
        }
    }

    /// Moves one message from the core's inbox to the slot, if the slot is free.
    fn deliver_incoming(&mut self, now: Instant) {
        if !self.core.has_incoming() {
            return;
        }
        let mut slot = self.shared.slot();
        if slot.message.is_some() {
            return;
        }
        slot.message = match self.core.poll_incoming(now) {
            Some(Incoming::Request(r)) => {
                let responder = Responder {
                    id: r.id.clone(),
                    commands: self.commands_tx.clone(),
                };
                Some(IncomingMessage::Request(r, responder))
            }
            Some(Incoming::Notification(n)) => Some(IncomingMessage::Notification(n)),
            None => None,
        };
        drop(slot);
        self.shared.incoming_ready.notify_all();
    }

    /// How long the next `Poll::poll` may sleep.
    fn poll_timeout(&self, now: Instant) -> Option<Duration> {
        let busy = self.commands_more || self.io.stdout_ready || self.io.stderr_ready;
        if busy {
            return Some(Duration::ZERO);
        }
        let mut timeout = self.deadline.map(|d| d.saturating_duration_since(now));
        if !self.core.exit_seen() && self.io.exit_fd.is_none() {
            timeout = Some(timeout.map_or(EXIT_POLL_TICK, |t| t.min(EXIT_POLL_TICK)));
        }
        timeout
    }

    /// The session cannot start (no I/O thread): kill and reap the child,
    /// and end the session so the stderr grant goes back to its pool.
    fn abandon(mut self) {
        let now = Instant::now();
        self.core.handle_input(now, DriverInput::ClientGone);
        let _ = self.group.signal(Signal::Kill);
        // SIGKILL was sent, so this returns promptly.
        let child = &mut self.child;
        if let Ok(Some(status)) = self.group.reap(|| child.wait().map(Some)) {
            let exited = DriverInput::Exited(Ok(os::exit_status(status)));
            self.core.handle_input(now, exited);
        }
        let look = &mut || Ok(None);
        self.core.handle_input(
            now,
            DriverInput::Stdout {
                result: Ok(0),
                look,
            },
        );
        let look = &mut || Ok(None);
        let input = DriverInput::Stderr {
            result: Ok(0),
            buf: &[],
            look,
        };
        self.core.handle_input(now, input);
        // `Finished` gives the grant back; the signals asked for are moot.
        loop {
            match self.core.poll_output() {
                DriverOutput::Action(DriverAction::Finished(_)) | DriverOutput::Timeout(_) => break,
                DriverOutput::Action(_) => {}
                DriverOutput::Write(_) => {
                    let failed = Err(io::ErrorKind::BrokenPipe.into());
                    self.core.handle_input(now, DriverInput::Written(failed));
                }
            }
        }
    }

    fn finish(self, record: SessionRecord) -> SessionRecord {
        // The supervision is over: reap the zombie now (its group is never
        // signalled again). If it gave up without an exit (no exit within
        // the drain deadline after SIGKILL: uninterruptible sleep), reap it
        // whenever it dies, so it does not stay a zombie.
        let mut child = self.child;
        if !matches!(self.group.reap(|| child.try_wait()), Ok(Some(_))) {
            let pid = self.pid;
            let reaper = std::thread::Builder::new()
                .name(format!("mcp-reap-{pid}"))
                .spawn(move || {
                    let _ = child.wait();
                });
            if let Err(e) = reaper {
                log_relay::event(
                    pid,
                    Level::Warn,
                    "no thread to reap the server; it stays a zombie",
                    Some(e.to_string()),
                );
            }
        }
        let mut slot = self.shared.slot();
        slot.closed = true;
        drop(slot);
        self.shared.finished.store(true, Ordering::Release);
        self.shared.incoming_ready.notify_all();
        record
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Spawns from this thread use the `try_wait` tick, not a pidfd.
        pub(super) static NO_PIDFD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// A progress stream waits for the next update or its timeout, woken
    /// by the core's queue (which never waits itself), then ends with the
    /// request. A core session in memory pushes the updates: no process.
    #[test]
    fn a_progress_stream_waits_for_the_next_update_or_its_timeout_then_ends() {
        use mcp_stdio_core::{ClientConfig, ClientSession, FramerConfig};
        let t0 = Instant::now();
        let mut session = ClientSession::new(ClientConfig::default(), FramerConfig::default());
        let mut stream = ProgressStream::new();
        let id = session
            .request_with_progress(t0, "slow", None, None, stream.queue.clone())
            .expect("sent");
        let waited = Instant::now();
        assert_eq!(
            stream.next_timeout(Duration::from_millis(20)),
            ProgressPoll::Empty
        );
        assert!(waited.elapsed() >= Duration::from_millis(20));
        let progress = format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\
             \"params\":{{\"progressToken\":{id},\"progress\":7}}}}\n"
        );
        let answer = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{}}}}\n");
        let reader = std::thread::spawn(move || {
            let first = stream.next_timeout(Duration::from_secs(10));
            let rest: Vec<Progress> = stream.by_ref().collect();
            (first, rest, stream.next_timeout(Duration::from_secs(10)))
        });
        std::thread::sleep(Duration::from_millis(20));
        session.handle_stdout(t0, progress.as_bytes());
        std::thread::sleep(Duration::from_millis(20));
        session.handle_stdout(t0, progress.as_bytes());
        session.handle_stdout(t0, answer.as_bytes());
        // The queue closes once the completion is polled.
        while session.poll_event().is_some() {}
        let (first, rest, after) = reader.join().expect("the reader returns");
        assert!(
            matches!(&first, ProgressPoll::Update(u) if u.progress == 7.0),
            "{first:?}"
        );
        assert_eq!(rest.len(), 1, "{rest:?}");
        assert_eq!(after, ProgressPoll::Ended);
    }

    /// A session that cannot start gives its stderr grant back.
    #[test]
    fn abandoning_a_session_that_cannot_start_releases_its_grant() {
        use mcp_stdio_core::{PoolConfig, SharedRetentionPool};
        let pool = SharedRetentionPool::new(PoolConfig::default().limit(1 << 20));
        let mut options = ClientOptions::default();
        options.stderr_pool(Some(pool.clone()));
        let (driver, _commands, _shared) =
            Driver::spawn(&CommandSpec::new("cat"), options).expect("spawn cat");
        let pid = driver.pid;
        assert_eq!(pool.stats().outstanding, 1);
        driver.abandon();
        assert_eq!((pool.stats().outstanding, pool.stats().in_use), (0, 0));
        // Reaped: no zombie left behind.
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    /// G6: a cancel issued while the command queue is full still reaches the
    /// server. `cat` is the server: whatever reaches its stdin comes back.
    /// Holding the incoming slot's lock while a message waits in the inbox
    /// stops the I/O thread, so the queue fills and stays full.
    #[test]
    fn g6_cancel_while_the_command_queue_is_full_reaches_the_server() {
        let client =
            Client::spawn(&CommandSpec::new("cat"), ClientOptions::default()).expect("cat");
        let pending = client
            // A deadline, so a lost cancel fails the test instead of hanging it.
            .start_request("slow", None, Some(Duration::from_secs(20)))
            .expect("sent");
        let id = pending.id().clone();
        let guard = client.shared.slot();
        // Not `notify`, which waits for the I/O thread: that thread may already
        // be held by the lock above (the echo of `slow` came first), and the
        // wait would never end.
        let queued = client.commands.tx.try_send(Command::Notify {
            method: "notifications/held".to_owned(),
            params: None,
            reply: reply_channel().0,
        });
        assert!(queued.is_ok(), "the queue is empty");
        // The echo arrives and the I/O thread waits for the slot's lock.
        std::thread::sleep(Duration::from_millis(300));
        let mut filled = 0;
        while filled <= COMMAND_QUEUE
            && client
                .commands
                .tx
                .try_send(Command::Metrics {
                    reply: reply_channel().0,
                })
                .is_ok()
        {
            filled += 1;
        }
        // Full (the notification may still sit in it when the echo of `slow`
        // held the I/O thread first).
        assert!(
            (COMMAND_QUEUE - 1..=COMMAND_QUEUE).contains(&filled),
            "the I/O thread was not held: {filled} queued"
        );
        let t = Instant::now();
        pending.cancel("queue full");
        drop(guard);
        let outcome = pending.wait();
        assert!(
            matches!(
                outcome,
                Err(RequestError::Failed(RequestFailure::Cancelled {
                    cancel_sent: true
                }))
            ),
            "{outcome:?}"
        );
        let needle = format!("\"requestId\":{id}");
        let deadline = Instant::now() + Duration::from_secs(10);
        let seen = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match client.next_incoming(Some(left)) {
                Some(IncomingMessage::Notification(n))
                    if n.method == "notifications/cancelled"
                        && n.params.as_ref().is_some_and(|p| p.get().contains(&needle)) =>
                {
                    break true;
                }
                Some(_) => {}
                None => break false,
            }
        };
        assert!(seen, "the cancel never reached the server");
        eprintln!(
            "blocking: cancel with {filled} commands queued reached the server in {:?}",
            t.elapsed()
        );
        let record = client.kill();
        assert!(record.metrics.cancels_sent >= 1);
    }

    /// `cat` echoes every message back: our request comes back as a request
    /// from the "server", our answer to it comes back as the response.
    #[test]
    fn loopback_through_cat_and_exit_seen_without_a_pidfd() {
        NO_PIDFD.with(|f| f.set(true));
        let mut options = ClientOptions::default();
        options
            .supervisor_mut()
            .stdin_close_grace(Duration::from_secs(5));
        let client = Client::spawn(&CommandSpec::new("cat"), options).expect("spawn cat");
        NO_PIDFD.with(|f| f.set(false));
        let pending = client.start_request("ping", None, None).expect("sent");
        let Some(IncomingMessage::Request(req, responder)) =
            client.next_incoming(Some(Duration::from_secs(5)))
        else {
            panic!("the echoed request");
        };
        assert_eq!((req.method.as_str(), &req.id), ("ping", pending.id()));
        let result = RawValue::from_string("{\"pong\":true}".to_owned()).expect("json");
        responder.respond(Ok(result)).expect("answered");
        let r = pending.wait().expect("our own answer, echoed");
        assert_eq!(r.get(), "{\"pong\":true}");
        client.notify("notifications/hello", None).expect("sent");
        let Some(IncomingMessage::Notification(n)) =
            client.next_incoming(Some(Duration::from_secs(5)))
        else {
            panic!("the echoed notification");
        };
        assert_eq!(n.method, "notifications/hello");
        // cat exits at stdin EOF; only the tick can see it here.
        let t = Instant::now();
        let record = client.shutdown();
        let took = t.elapsed();
        assert_eq!(
            record.exit_status(),
            Some(mcp_stdio_core::ExitStatus::Code(0))
        );
        assert_eq!(
            record.process.ended_by,
            mcp_stdio_core::EndedBy::ExitedAfterStdinClose
        );
        assert!(took < Duration::from_secs(1), "{took:?}");
    }
}
