//! `Client`: the driver's ([`mcp_stdio_async::Client`]) on a [`Mio`]
//! thread of its own (`mcp-io-<pid>`), each method blocking the calling
//! thread until the driver answered; none blocks the driver (G1).

use std::io;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

pub use mcp_stdio_core::CancelHandle;
use mcp_stdio_core::{ClientMetrics, CommandSpec, Deadline, LiveSnapshot, Progress, ProgressPoll};
use mcp_stdio_core::{ClientOptions, InitializeError, RequestError, SessionRecord, Signal};
use mcp_stdio_core::{ErrorObject, Id, Negotiated, RawResult, RawValue};
use mcp_stdio_sys::Signalled;

use crate::runtime::Mio;
use mcp_stdio_async::wait::{wait, wait_timeout};

type Outcome = Result<RawResult, RequestError>;
type Tracked = (
    mcp_stdio_async::PendingRequest,
    mcp_stdio_async::ProgressStream,
);

/// Methods that only forward to the driver's method of the same name on
/// `self.$on` (its docs say the rest).
macro_rules! forwarding {
    ($on:tt; $($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?;)*) => {$(
        $(#[$doc])*
        pub fn $name(&self, $($arg: $ty),*) $(-> $ret)? {
            self.$on.$name($($arg),*)
        }
    )*};
}

/// A server→client message: a request with its [`Responder`], or a
/// notification.
pub type IncomingMessage = mcp_stdio_async::IncomingMessage<Responder>;

/// Answers one server→client request (the driver's [`Responder`](mcp_stdio_async::Responder)).
#[derive(Debug)]
pub struct Responder(mcp_stdio_async::Responder);

impl Responder {
    forwarding! { 0;
        /// The id of the request this answers.
        fn id() -> &Id;
    }

    /// Sends the answer, blocking until the driver queued (or refused) it.
    pub fn respond(self, result: Result<Box<RawValue>, ErrorObject>) -> Result<(), RequestError> {
        wait(self.0.respond(result))
    }
}

/// A request in flight: [`wait`](Self::wait) for its result, or
/// [`cancel`](Self::cancel) or drop it to cancel it on the server (G6).
#[derive(Debug)]
pub struct PendingRequest(mcp_stdio_async::PendingRequest);

impl PendingRequest {
    forwarding! { 0;
        /// The request's id.
        fn id() -> &Id;
        /// A handle that cancels this request from another thread.
        fn cancel_handle() -> CancelHandle;
        /// Cancels it: it completes with `Cancelled`; the server gets `notifications/cancelled`.
        fn cancel(reason: &str);
    }

    /// Blocks until the request completes (result, error, timeout, cancel, session end).
    pub fn wait(self) -> Outcome {
        wait(self.0)
    }

    /// Blocks at most `timeout`; `None` while still in flight. `Some` once,
    /// then `SessionClosed`.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<Outcome> {
        wait_timeout(&mut self.0, Some(timeout))
    }
}

/// A spawned MCP server and its session: the driver's [`Client`](mcp_stdio_async::Client)
/// on a thread of its own, each method blocking the calling thread. Dropping
/// it without [`shutdown`](Self::shutdown) kills the server's group at once.
#[derive(Debug)]
pub struct Client {
    /// Requests, notifications, cancels, counters: the `Client`'s by `Deref`.
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
    fn lock(&self) -> MutexGuard<'_, mcp_stdio_async::ProgressStream> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next update, waiting at most `timeout`: an update, `Empty` when
    /// none came in time, `Ended` once the request completed and every
    /// update was taken.
    pub fn next_timeout(&self, timeout: Duration) -> ProgressPoll {
        match wait_timeout(self.lock().next(), Some(timeout)) {
            Some(Some(update)) => ProgressPoll::Update(update),
            Some(None) => ProgressPoll::Ended,
            None => ProgressPoll::Empty,
        }
    }

    /// Updates dropped because this stream fell behind.
    pub fn dropped(&self) -> u64 {
        self.lock().dropped()
    }
}

impl Iterator for ProgressStream {
    type Item = Progress;

    /// Blocks until the next update; `None` once the request completed.
    fn next(&mut self) -> Option<Progress> {
        wait(self.lock().next())
    }
}

/// Methods that wait on the calling thread for the driver's method of the
/// same name on `self.$on` (its docs say the rest), the answer mapped to
/// this crate's types where a `=> map` says so; `self` methods end the
/// session.
macro_rules! waiting {
    ($on:tt; $($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty $(=> $map:expr)?;)*) => {$(
        $(#[$doc])*
        pub fn $name(&self, $($arg: $ty),*) -> $ret {
            let answer = wait(self.$on.$name($($arg),*));
            $(let answer = answer.map($map);)?
            answer
        }
    )*};
    ($on:tt; $($(#[$doc:meta])* fn $name:ident(self) -> $ret:ty;)*) => {$(
        $(#[$doc])*
        pub fn $name(self) -> $ret {
            wait(self.$on.$name())
        }
    )*};
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

    forwarding! { inner;
        /// Sends `signal` to the server's group while its id is still the server's ([`Signalled`]).
        fn signal_group(signal: Signal) -> Signalled;
        /// What [`initialize`](Self::initialize) agreed, if it has run.
        fn negotiated() -> Option<&Negotiated>;
    }

    /// A handle on this session to clone into other threads.
    pub fn handle(&self) -> ClientHandle {
        self.handle.clone()
    }

    waiting! { inner;
        /// Agrees on a protocol revision (see the driver's [`Client::initialize`](mcp_stdio_async::Client::initialize)).
        fn initialize() -> Result<Negotiated, InitializeError>;
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

    waiting! { inner;
        /// Graceful shutdown (G11): stdin closed, `SIGTERM`, `SIGKILL`; the record of what was observed.
        fn shutdown(self) -> SessionRecord;
        /// Like [`shutdown`](Self::shutdown), starting with `SIGTERM`.
        fn kill(self) -> SessionRecord;
        /// Blocks until the server ends by itself (or the session closes) and
        /// returns the record, without asking it to stop.
        fn wait(self) -> SessionRecord;
    }
}

impl ClientHandle {
    waiting! { 0;
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
        /// Sends a request and returns it in flight.
        fn start_request(method: &str, params: Option<Box<RawValue>>, timeout: Option<Duration>) -> Result<PendingRequest, RequestError> => PendingRequest;
        /// Sends a request whose progress goes to the returned stream.
        ///
        /// # Errors
        /// As [`start_request`](Self::start_request); params that are not an object.
        fn start_request_with_progress(method: &str, params: Option<Box<RawValue>>, timeout: Option<Duration>) -> Result<(PendingRequest, ProgressStream), RequestError> => with_progress;
        /// [`call_tool`](Self::call_tool) with its progress.
        ///
        /// # Errors
        /// `arguments` is not an object, or the request could not be sent.
        fn call_tool_with_progress(name: &str, arguments: &serde_json::Value) -> Result<(PendingRequest, ProgressStream), RequestError> => with_progress;
    }

    forwarding! { 0;
        /// The server's process id (also its group id).
        fn pid() -> u32;
        /// Cancels a request by id; never blocks, never lost.
        fn cancel(id: &Id, reason: &str);
        /// Whether the session is over.
        fn is_finished() -> bool;
    }
}

/// A call in flight and its progress, as this crate waits on them.
fn with_progress((call, progress): Tracked) -> (PendingRequest, ProgressStream) {
    (PendingRequest(call), ProgressStream(Mutex::new(progress)))
}
