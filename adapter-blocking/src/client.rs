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
use mcp_stdio_async::wait::{wait, wait_timeout};

type Outcome = Result<RawResult, RequestError>;

/// A server→client message: a request with its [`Responder`], or a
/// notification.
pub type IncomingMessage = mcp_stdio_async::IncomingMessage<Responder>;

/// Answers one server→client request (the driver's [`Responder`](mcp_stdio_async::Responder)).
#[derive(Debug)]
pub struct Responder(mcp_stdio_async::Responder);

impl Responder {
    /// The id of the request this answers.
    pub fn id(&self) -> &Id {
        self.0.id()
    }

    /// Sends the answer, blocking until the driver queued (or refused) it.
    pub fn respond(self, result: Result<Box<RawValue>, ErrorObject>) -> Result<(), RequestError> {
        wait(self.0.respond(result))
    }
}

/// A request in flight: [`wait`](Self::wait) for its result, or
/// [`cancel`](Self::cancel) or drop it to cancel it on the server (G6).
#[derive(Debug)]
pub struct PendingRequest {
    inner: mcp_stdio_async::PendingRequest,
    /// The outcome was given out ([`wait_timeout`](Self::wait_timeout)).
    given: bool,
}

impl PendingRequest {
    fn new(inner: mcp_stdio_async::PendingRequest) -> Self {
        Self {
            inner,
            given: false,
        }
    }

    /// The request's id.
    pub fn id(&self) -> &Id {
        self.inner.id()
    }

    /// A handle that cancels this request from another thread.
    pub fn cancel_handle(&self) -> CancelHandle {
        self.inner.cancel_handle()
    }

    /// Cancels it: it completes with `Cancelled`; the server gets `notifications/cancelled`.
    pub fn cancel(&self, reason: &str) {
        self.inner.cancel(reason);
    }

    /// Blocks until the request completes (result, error, timeout, cancel, session end).
    pub fn wait(self) -> Outcome {
        if self.given {
            return Err(mcp_stdio_core::RequestFailure::SessionClosed.into());
        }
        wait(self.inner)
    }

    /// Blocks at most `timeout`; `None` while still in flight. `Some` once,
    /// then `SessionClosed`.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<Outcome> {
        if self.given {
            return Some(Err(mcp_stdio_core::RequestFailure::SessionClosed.into()));
        }
        let outcome = wait_timeout(&mut self.inner, Some(timeout))?;
        self.given = true;
        Some(outcome)
    }
}

/// A spawned MCP server and its session, for threads without an async
/// runtime: the driver's [`Client`](mcp_stdio_async::Client) on a thread of
/// its own (see the module docs), each method blocking the calling thread.
/// `Send + Sync`; dropping it without [`shutdown`](Self::shutdown) kills the
/// server's process group at once.
#[derive(Debug)]
pub struct Client {
    /// Requests, notifications, cancels and counters; `Deref` gives its
    /// methods to the `Client`.
    handle: ClientHandle,
    inner: mcp_stdio_async::Client<Mio>,
}

/// A cloneable handle on a running session for other threads: everything
/// but ending it (see the driver's [`ClientHandle`](mcp_stdio_async::ClientHandle)).
/// The [`Client`] dereferences to it.
#[derive(Debug, Clone)]
pub struct ClientHandle(mcp_stdio_async::ClientHandle<Mio>);

impl std::ops::Deref for Client {
    type Target = ClientHandle;

    fn deref(&self) -> &ClientHandle {
        &self.handle
    }
}

/// The progress of one request, as an iterator whose `next` blocks until
/// the next update and ends with the request (see the driver's
/// [`ProgressStream`](mcp_stdio_async::ProgressStream)).
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
    /// Spawns `command` (no shell; its own process group, tied to this process on Linux) and starts its driver thread.
    ///
    /// # Errors
    /// The spawn failed, or no reactor or thread for the driver.
    pub fn spawn(command: &CommandSpec, options: ClientOptions) -> io::Result<Self> {
        let inner = mcp_stdio_async::Client::<Mio>::spawn(command, options)?;
        Ok(Self {
            handle: ClientHandle(inner.handle()),
            inner,
        })
    }

    /// Sends `signal` to the server's group while its id is still the server's ([`Signalled`]).
    pub fn signal_group(&self, signal: Signal) -> Signalled {
        self.inner.signal_group(signal)
    }

    /// A handle on this session to clone into other threads.
    pub fn handle(&self) -> ClientHandle {
        self.handle.clone()
    }

    /// Agrees on a protocol revision (see the driver's [`Client::initialize`](mcp_stdio_async::Client::initialize)).
    pub fn initialize(&self) -> Result<Negotiated, InitializeError> {
        wait(self.inner.initialize())
    }

    /// What [`initialize`](Self::initialize) agreed, if it has run.
    pub fn negotiated(&self) -> Option<&Negotiated> {
        self.inner.negotiated()
    }

    /// The next server→client message, waiting at most `timeout` (`None`: as long as it takes); `None` on timeout or at the session's end.
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

    /// Graceful shutdown (G11): stdin closed, `SIGTERM`, `SIGKILL`; the record of what was observed.
    pub fn shutdown(self) -> SessionRecord {
        wait(self.inner.shutdown())
    }

    /// Like [`shutdown`](Self::shutdown), starting with `SIGTERM`.
    pub fn kill(self) -> SessionRecord {
        wait(self.inner.kill())
    }

    /// Blocks until the server ends by itself (or the session closes) and
    /// returns the record, without asking it to stop.
    pub fn wait(self) -> SessionRecord {
        wait(self.inner.wait())
    }
}

/// Methods that wait on the calling thread for the driver's method of the
/// same name (its docs say the rest).
macro_rules! waiting {
    ($($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {$(
        $(#[$doc])*
        pub fn $name(&self, $($arg: $ty),*) -> $ret {
            wait(self.0.$name($($arg),*))
        }
    )*};
}

impl ClientHandle {
    waiting! {
        /// Sends a request with the session's default timeout; its result.
        fn request(method: &str, params: Option<Box<RawValue>>) -> Outcome;
        /// Sends a request with an explicit [`Deadline`]; its result.
        fn request_with_deadline(method: &str, params: Option<Box<RawValue>>, deadline: Deadline) -> Outcome;
        /// Sends a request with its own timeout (`None`: the session's default); its result.
        fn request_with_timeout(method: &str, params: Option<Box<RawValue>>, timeout: Option<Duration>) -> Outcome;
        /// Sends a notification.
        fn notify(method: &str, params: Option<Box<RawValue>>) -> Result<(), RequestError>;
        /// The session's counters; `None` once it is over.
        fn metrics() -> Option<ClientMetrics>;
        /// One page of the server's tools, raw.
        fn list_tools(cursor: Option<&str>) -> Outcome;
        /// Calls the tool `name` with `arguments`; the result raw.
        fn call_tool(name: &str, arguments: &serde_json::Value) -> Outcome;
        /// The session's counters and the newest `stderr_bytes` of its stderr tail; `None` once it is over.
        fn snapshot(stderr_bytes: usize) -> Option<LiveSnapshot>;
    }

    /// The server's process id (also its group id).
    pub fn pid(&self) -> u32 {
        self.0.pid()
    }

    /// Cancels a request by id; never blocks, never lost.
    pub fn cancel(&self, id: &Id, reason: &str) {
        self.0.cancel(id, reason);
    }

    /// Whether the session is over.
    pub fn is_finished(&self) -> bool {
        self.0.is_finished()
    }

    /// Sends a request and returns it in flight.
    pub fn start_request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
    ) -> Result<PendingRequest, RequestError> {
        wait(self.0.start_request(method, params, timeout)).map(PendingRequest::new)
    }

    /// Sends a request whose progress goes to the returned stream.
    ///
    /// # Errors
    /// As [`start_request`](Self::start_request); params that are not an object.
    pub fn start_request_with_progress(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
    ) -> Result<(PendingRequest, ProgressStream), RequestError> {
        let started = self.0.start_request_with_progress(method, params, timeout);
        wait(started).map(with_progress)
    }

    /// [`call_tool`](Self::call_tool) with its progress.
    ///
    /// # Errors
    /// `arguments` is not an object, or the request could not be sent.
    pub fn call_tool_with_progress(
        &self,
        name: &str,
        arguments: &serde_json::Value,
    ) -> Result<(PendingRequest, ProgressStream), RequestError> {
        wait(self.0.call_tool_with_progress(name, arguments)).map(with_progress)
    }
}

/// A call in flight and its progress, as this crate waits on them.
fn with_progress(
    (inner, progress): (
        mcp_stdio_async::PendingRequest,
        mcp_stdio_async::ProgressStream,
    ),
) -> (PendingRequest, ProgressStream) {
    (PendingRequest::new(inner), ProgressStream::new(progress))
}
