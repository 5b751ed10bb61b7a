//! `Client`: spawn an MCP server and drive its session, for threads without
//! an async runtime. The session is the async driver's
//! ([`mcp_stdio_async::Client`]) on this crate's mio executor
//! ([`Mio`]): one driver thread per server (`mcp-io-<pid>`) owns
//! the core's `ClientDriver`, the three pipes and the leader, reads stdout
//! and stderr whatever the application threads do (G1), writes stdin only as
//! the pipe accepts bytes, and sleeps in the poll when nothing is ready.
//! Every method here blocks the calling thread until the driver answered;
//! none blocks the driver. Cancels never wait (a flag and a wake).

use std::io;
use std::sync::Mutex;
use std::time::Duration;

pub use mcp_stdio_core::CancelHandle;
use mcp_stdio_core::CommandSpec;
use mcp_stdio_core::Signal;
use mcp_stdio_core::{ClientMetrics, Deadline, LiveSnapshot, Progress, ProgressPoll};
use mcp_stdio_core::{ClientOptions, InitializeError, RequestError, SessionRecord};
use mcp_stdio_core::{ErrorObject, Id, Negotiated, RawResult, RawValue};
use mcp_stdio_sys::Signalled;

use crate::runtime::Mio;
use crate::wait::{wait, wait_timeout};

type Outcome = Result<RawResult, RequestError>;

/// A server→client message: a request with its [`Responder`], or a
/// notification.
pub type IncomingMessage = mcp_stdio_async::IncomingMessage<Responder>;

/// Answers one server→client request.
#[derive(Debug)]
pub struct Responder(mcp_stdio_async::Responder);

impl Responder {
    /// The id of the request this answers.
    pub fn id(&self) -> &Id {
        self.0.id()
    }

    /// Sends the answer: a raw result or an error object. Blocks until the
    /// driver has queued it (or refused it: session closed, backpressure).
    pub fn respond(self, result: Result<Box<RawValue>, ErrorObject>) -> Result<(), RequestError> {
        wait(self.0.respond(result))
    }
}

/// A request in flight. [`wait`](Self::wait) for its result;
/// [`cancel`](Self::cancel) it, or drop it, to cancel it on the server (G6):
/// a UI timeout that drops the handle is a real cancel, not a forgotten
/// request.
#[derive(Debug)]
pub struct PendingRequest {
    inner: mcp_stdio_async::PendingRequest,
    /// The outcome was given out ([`wait_timeout`](Self::wait_timeout)).
    given: bool,
}

impl PendingRequest {
    /// The request's id.
    pub fn id(&self) -> &Id {
        self.inner.id()
    }

    /// A handle that cancels this request from another thread.
    pub fn cancel_handle(&self) -> CancelHandle {
        self.inner.cancel_handle()
    }

    /// Cancels the request: it completes with `Cancelled` and the server is
    /// sent `notifications/cancelled`.
    pub fn cancel(&self, reason: &str) {
        self.inner.cancel(reason);
    }

    /// Blocks until the request completes (result, error, timeout, cancel or
    /// the end of the session).
    pub fn wait(self) -> Outcome {
        if self.given {
            return Err(mcp_stdio_core::RequestFailure::SessionClosed.into());
        }
        wait(self.inner)
    }

    /// Blocks at most `timeout` for the outcome; `None` if the request is
    /// still in flight (it stays in flight: wait again, or cancel it). Returns
    /// `Some` once; asked again after that, it reports `SessionClosed`.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<Outcome> {
        if self.given {
            return Some(Err(mcp_stdio_core::RequestFailure::SessionClosed.into()));
        }
        let outcome = wait_timeout(&mut self.inner, Some(timeout))?;
        self.given = true;
        Some(outcome)
    }
}

/// A spawned MCP server and its session, for threads without an async runtime.
///
/// The session is the async driver's, on a thread of its own with a mio
/// reactor ([`Mio`]): it reads the server's stdout and stderr continuously,
/// whatever the application threads do (G1), writes stdin without ever
/// blocking those reads, applies deadlines and runs the shutdown sequence
/// (G11). Application threads talk to it through a bounded command queue
/// (cancels bypass it and are never lost); every method may be called from
/// any thread (`Client` is `Send + Sync`). The decisions are the core's
/// `ClientDriver`.
///
/// Dropping a `Client` without [`shutdown`](Self::shutdown) kills the
/// server's process group at once (one `killpg` system call); the driver
/// then observes the exit, reaps the child and ends by itself. `Drop` never
/// waits for it, and never signals a group whose leader the driver already
/// reaped (its id could have been reused).
#[derive(Debug)]
pub struct Client {
    /// Requests, notifications, cancels and counters; `Deref` gives its
    /// methods to the `Client`.
    handle: ClientHandle,
    inner: mcp_stdio_async::Client<Mio>,
}

/// A handle on a running session that can be cloned into other threads:
/// requests, notifications, cancels, progress, counters and the live stderr
/// tail — everything but ending the session, which stays the [`Client`]'s
/// ([`shutdown`](Client::shutdown), [`kill`](Client::kill), dropping it).
/// A handle does not keep the session alive: once the `Client` ended it,
/// the handle's requests fail with `SessionClosed`. Every method is also
/// the `Client`'s (it dereferences to its handle).
#[derive(Debug, Clone)]
pub struct ClientHandle(mcp_stdio_async::ClientHandle<Mio>);

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
pub struct ProgressStream(Mutex<mcp_stdio_async::ProgressStream>);

impl ProgressStream {
    fn new(inner: mcp_stdio_async::ProgressStream) -> Self {
        Self(Mutex::new(inner))
    }

    fn with<T>(&self, f: impl FnOnce(&mut mcp_stdio_async::ProgressStream) -> T) -> T {
        f(&mut self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// The next update, waiting at most `timeout`: an update, `Empty` when
    /// none came in time, `Ended` once the request completed and every
    /// update was taken.
    pub fn next_timeout(&self, timeout: Duration) -> ProgressPoll {
        match self.with(|p| wait_timeout(p.next(), Some(timeout))) {
            Some(Some(update)) => ProgressPoll::Update(update),
            Some(None) => ProgressPoll::Ended,
            None => ProgressPoll::Empty,
        }
    }

    /// Updates dropped because this stream fell behind.
    pub fn dropped(&self) -> u64 {
        self.with(|p| p.dropped())
    }
}

impl Iterator for ProgressStream {
    type Item = Progress;

    /// Blocks until the next update; `None` once the request completed.
    fn next(&mut self) -> Option<Progress> {
        self.with(|p| wait(p.next()))
    }
}

impl Client {
    /// Spawns `command` (no shell; its own process group) with stdin, stdout
    /// and stderr piped, and starts its driver thread.
    ///
    /// On Linux the server is tied to this process: if this process dies
    /// without shutting it down (even by `SIGKILL`), the kernel kills the
    /// server (`PR_SET_PDEATHSIG`, set from one long-lived spawner thread so
    /// the thread that called `spawn` may exit). Elsewhere the server sees
    /// its stdin close.
    ///
    /// # Errors
    /// The spawn failed, or no reactor or thread for the driver (the server
    /// is killed then).
    pub fn spawn(command: &CommandSpec, options: ClientOptions) -> io::Result<Self> {
        let inner = mcp_stdio_async::Client::<Mio>::spawn(command, options)?;
        Ok(Self {
            handle: ClientHandle(inner.handle()),
            inner,
        })
    }

    /// Sends `signal` to the server's process group, as a host's own
    /// `SIGTERM` would, while that group id is still the server's: after the
    /// session reaped the server nothing is sent ([`Signalled::Refused`]).
    pub fn signal_group(&self, signal: Signal) -> Signalled {
        self.inner.signal_group(signal)
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
    /// `notifications/initialized`); see
    /// [`Negotiation`](mcp_stdio_core::Negotiation). Once a modern version
    /// is agreed, every request this client sends carries it and the
    /// client's context in `_meta`, and requests from the server are
    /// refused. Neither handshake request is ever cancelled. Notifications
    /// the server sends meanwhile are kept for
    /// [`next_incoming`](Self::next_incoming).
    pub fn initialize(&self) -> Result<Negotiated, InitializeError> {
        wait(self.inner.initialize())
    }

    /// What [`initialize`](Self::initialize) agreed (its first success), if
    /// it has run.
    pub fn negotiated(&self) -> Option<&Negotiated> {
        self.inner.negotiated()
    }

    /// The next server→client request or notification, waiting at most
    /// `timeout` (`None`: as long as it takes); `None` on timeout or once the
    /// session is over. Messages wait in the core's bounded inbox meanwhile;
    /// when it is full its overload policy applies and the reader goes on (G5).
    pub fn next_incoming(&self, timeout: Option<Duration>) -> Option<IncomingMessage> {
        use mcp_stdio_async::IncomingMessage as Async;
        let deadline = timeout.and_then(|t| std::time::Instant::now().checked_add(t));
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
            return match wait_timeout(self.inner.next_incoming(), left)?? {
                Async::Request(request, responder) => {
                    Some(Async::Request(request, Responder(responder)))
                }
                Async::Notification(n) => Some(Async::Notification(n)),
                // A kind this adapter does not know yet: not the application's.
                _ => continue,
            };
        }
    }

    /// Graceful shutdown (G11): pending requests fail, stdin is closed, then
    /// `SIGTERM` and `SIGKILL` to the group after their graces, the readers
    /// drain with a deadline, and the record of what was observed is returned.
    /// Blocks until the driver has ended.
    pub fn shutdown(self) -> SessionRecord {
        wait(self.inner.shutdown())
    }

    /// Like [`shutdown`](Self::shutdown) but starts with `SIGTERM` at once.
    pub fn kill(self) -> SessionRecord {
        wait(self.inner.kill())
    }

    /// Blocks until the server ends by itself (or the session closes) and
    /// returns the record, without asking it to stop.
    pub fn wait(self) -> SessionRecord {
        wait(self.inner.wait())
    }
}

impl ClientHandle {
    /// The server's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.0.pid()
    }

    /// Sends a request with the configured default timeout and blocks until
    /// its result.
    pub fn request(&self, method: &str, params: Option<Box<RawValue>>) -> Outcome {
        wait(self.0.request(method, params))
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
        wait(self.0.request_with_deadline(method, params, deadline))
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
        wait(self.0.request_with_timeout(method, params, timeout))
    }

    /// Sends a request and returns it in flight, to be waited for or
    /// cancelled. Blocks only until the driver has queued it.
    pub fn start_request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
    ) -> Result<PendingRequest, RequestError> {
        let inner = wait(self.0.start_request(method, params, timeout))?;
        Ok(PendingRequest {
            inner,
            given: false,
        })
    }

    /// Sends a notification. Blocks only until the driver has queued it.
    pub fn notify(&self, method: &str, params: Option<Box<RawValue>>) -> Result<(), RequestError> {
        wait(self.0.notify(method, params))
    }

    /// Cancels a request by id (see [`PendingRequest::cancel`]); a no-op for
    /// an id not in flight. Never blocks and is never lost.
    pub fn cancel(&self, id: &Id, reason: &str) {
        self.0.cancel(id, reason);
    }

    /// The session's counters now; `None` once the session is over.
    pub fn metrics(&self) -> Option<ClientMetrics> {
        wait(self.0.metrics())
    }

    /// Whether the session is over (the server's process was seen to end).
    pub fn is_finished(&self) -> bool {
        self.0.is_finished()
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
        let (inner, progress) = wait(self.0.start_request_with_progress(method, params, timeout))?;
        Ok((
            PendingRequest {
                inner,
                given: false,
            },
            ProgressStream::new(progress),
        ))
    }

    /// One page of the server's tools (`tools/list` from `cursor`), raw: the
    /// result's `tools` and `nextCursor` as the server sent them.
    pub fn list_tools(&self, cursor: Option<&str>) -> Outcome {
        wait(self.0.list_tools(cursor))
    }

    /// Calls the tool `name` with `arguments` (an object, or `null`), with
    /// the session's default timeout; the result raw (`content`,
    /// `structuredContent`, `isError`).
    pub fn call_tool(&self, name: &str, arguments: &serde_json::Value) -> Outcome {
        wait(self.0.call_tool(name, arguments))
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
        let (inner, progress) = wait(self.0.call_tool_with_progress(name, arguments))?;
        Ok((
            PendingRequest {
                inner,
                given: false,
            },
            ProgressStream::new(progress),
        ))
    }

    /// The session's counters and the newest `stderr_bytes` bytes the server
    /// wrote to stderr (of the tail the session keeps), while it runs;
    /// `None` once the session is over (the record has them then).
    pub fn snapshot(&self, stderr_bytes: usize) -> Option<LiveSnapshot> {
        wait(self.0.snapshot(stderr_bytes))
    }
}
