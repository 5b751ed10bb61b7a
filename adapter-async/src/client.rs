//! `Client`: spawn an MCP server and drive its session, on any [`Runtime`].
//!
//! One driver future owns the core's [`ClientDriver`], which makes every
//! decision, and the server's three pipes and its [`Leader`]. It is one
//! `poll` (no `select!`): each turn drains the core's outputs, then polls
//! every input in a fixed order — cancels, the exit, stdout, stderr, room in
//! stdin for the one message held, commands, room for an incoming message,
//! the timer — and sleeps only when none of them is ready, with every one
//! of them registered for a wake. The write is one of those inputs: it moves
//! only what the pipe accepts while the reads go on, so a server that stops
//! reading never stops the client from reading (G1). The driver never
//! awaits the application: replies are `try_send`s on capacity-1 channels,
//! and a server→client message goes out only when its capacity-1 channel
//! has room.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_channel::{Receiver, Sender, WeakSender};
use event_listener::{Event, EventListener};
use futures_lite::Stream;
pub use mcp_stdio_core::CancelHandle;
use mcp_stdio_core::CommandSpec;
use mcp_stdio_core::Signal;
use mcp_stdio_core::{
    tools_call_params, tools_list_params, LiveSnapshot, Progress, ProgressPoll, ProgressQueue,
    TOOLS_CALL, TOOLS_LIST,
};
use mcp_stdio_core::{
    CallCancel, CancelRegistry, ClientDriver, DriverAction, DriverInput, DriverOutput,
    ReplyChannel, ABANDONED,
};
use mcp_stdio_core::{ChildStream, Note, NoteLevel};
use mcp_stdio_core::{ClientMetrics, Deadline, Incoming, RequestFailure, SendError};
use mcp_stdio_core::{ClientOptions, InitializeError, RequestError, SessionRecord};
use mcp_stdio_core::{ErrorObject, Id, Notification, RawResult, RawValue, Request};
use mcp_stdio_core::{Negotiated, Negotiation, NegotiationStep};
use mcp_stdio_sys::log_relay::{self, forward_server_stderr, Level};
use mcp_stdio_sys::{ProcessGroup, Signalled};

use crate::leader::Leader;
use crate::pipe::Pipe;
use crate::runtime::{DeadlineTimer, Runtime};

/// Commands queued from the application to the driver. Cancels never pass
/// through it (see [`CancelRegistry`]), so a full queue loses none.
pub(crate) const COMMAND_QUEUE: usize = 256;
/// Reads of stdout per turn, when bytes keep coming: a 4 MiB burst, then
/// the other inputs get their turn.
const STDOUT_READS_PER_TURN: usize = 64;
/// Reads of stderr per turn (16 KiB each).
const STDERR_READS_PER_TURN: usize = 16;
/// Commands taken per turn.
const COMMANDS_PER_TURN: usize = 64;
/// Turns in one `poll` before the driver yields to its executor (and is
/// woken again at once): a session that never idles still lets the
/// executor's other tasks run.
const TURNS_PER_POLL: usize = 32;
/// Bytes read from stderr per read call (one buffer, reused).
const STDERR_READ: usize = 16 * 1024;

type Outcome = Result<RawResult, RequestError>;

/// A one-shot reply: a capacity-1 channel used for a single `try_send`.
fn oneshot<T>() -> (Sender<T>, Receiver<T>) {
    async_channel::bounded(1)
}

/// Capacity-1 channels carry the driver's replies.
#[derive(Debug)]
struct OneShot;

impl ReplyChannel for OneShot {
    type Sender<T: Send + 'static> = Sender<T>;
    type Receiver<T: Send + 'static> = Receiver<T>;

    fn channel<T: Send + 'static>() -> (Self::Sender<T>, Self::Receiver<T>) {
        oneshot()
    }

    fn send<T: Send + 'static>(tx: Self::Sender<T>, value: T) -> bool {
        tx.try_send(value).is_ok()
    }
}

type Command = mcp_stdio_core::Command<OneShot>;

/// A server→client message. `Answer` is what answers a request: this
/// crate's [`Responder`], or a blocking adapter's over it.
#[derive(Debug)]
#[non_exhaustive]
pub enum IncomingMessage<Answer = Responder> {
    /// A request; answer it with [`Responder::respond`].
    Request(Request, Answer),
    /// A notification.
    Notification(Notification),
}

/// Answers one server→client request.
#[derive(Debug)]
pub struct Responder {
    id: Id,
    commands: Sender<Command>,
}

impl Responder {
    /// The id of the request this answers.
    pub fn id(&self) -> &Id {
        &self.id
    }

    /// Sends the answer: a raw result or an error object.
    pub async fn respond(
        self,
        result: Result<Box<RawValue>, ErrorObject>,
    ) -> Result<(), RequestError> {
        let (reply, rx) = oneshot();
        let cmd = Command::Respond {
            id: self.id,
            result,
            reply,
        };
        if self.commands.send(cmd).await.is_err() {
            return Err(SendError::Closed.into());
        }
        rx.recv().await.unwrap_or(Err(SendError::Closed.into()))
    }
}

/// A request in flight. Await it for the result; [`cancel`](Self::cancel)
/// it, or drop it, to cancel it on the server (G6): a UI timeout that drops
/// the future is a real cancel, not a forgotten request.
#[derive(Debug)]
pub struct PendingRequest {
    id: Id,
    /// Pinned: a receiver polled as a stream is `!Unpin`.
    rx: Pin<Box<Receiver<Outcome>>>,
    cancel: CancelHandle,
    done: bool,
}

impl PendingRequest {
    /// The request's id.
    pub fn id(&self) -> &Id {
        &self.id
    }

    /// A handle that cancels this request from elsewhere.
    pub fn cancel_handle(&self) -> CancelHandle {
        self.cancel.clone()
    }

    /// Cancels the request: it completes with `Cancelled` and the server is
    /// sent `notifications/cancelled`.
    pub fn cancel(&self, reason: &str) {
        self.cancel_handle().cancel(reason);
    }
}

impl Future for PendingRequest {
    type Output = Outcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        match self.rx.as_mut().poll_next(cx) {
            Poll::Ready(r) => {
                self.done = true;
                // `None`: the driver ended without an answer for this id.
                Poll::Ready(r.unwrap_or(Err(RequestFailure::SessionClosed.into())))
            }
            Poll::Pending => Poll::Pending,
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

/// Cancels a [`Client::request`] whose future is dropped before its outcome
/// (a no-op once it completed).
struct AbandonOnDrop(CallCancel);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.cancel(ABANDONED);
    }
}

/// A spawned MCP server and its session, driven on the runtime `R`.
///
/// One driver owns the core's [`ClientDriver`] and the server's pipes: it
/// reads stdout and stderr continuously, whatever the application does
/// (G1), and writes stdin only as the pipe accepts bytes, never blocking
/// those reads; it applies deadlines and runs the shutdown sequence (G11).
/// The application talks to the driver through a bounded command queue;
/// cancels bypass it and are never lost. The decisions are the core's
/// [`ClientDriver`]; where the driver runs is the runtime's
/// ([`Runtime::spawn_driver`]).
///
/// Dropping a `Client` without [`shutdown`](Self::shutdown) kills the
/// server's process group at once (a `killpg` system call, never a task
/// spawned in `Drop`); the driver then observes the exit and ends. The group
/// is never signalled after the driver reaped the server: its id could have
/// been reused (see [`ProcessGroup`]).
#[derive(Debug)]
pub struct Client<R: Runtime> {
    /// Requests, notifications, cancels and counters; `Deref` gives its
    /// methods to the `Client`.
    handle: ClientHandle<R>,
    incoming: Receiver<IncomingMessage>,
    /// Notified each time the application takes an incoming message, so the
    /// driver can move the next one out of the core's inbox.
    incoming_taken: Arc<Event>,
    /// The driver's record, sent once as it ends.
    driver: Option<Receiver<SessionRecord>>,
    group: ProcessGroup,
    /// A fresh negotiation under the options' policy, for `initialize`.
    negotiation: Negotiation,
    negotiated: OnceLock<Negotiated>,
}

/// A handle on a running session that can be cloned into other tasks:
/// requests, notifications, cancels, progress, counters and the live stderr
/// tail — everything but ending the session, which stays the [`Client`]'s
/// ([`shutdown`](Client::shutdown), [`kill`](Client::kill), dropping it).
/// A handle does not keep the session alive: once the `Client` ended it,
/// the handle's requests fail with `SessionClosed`. Every method is also
/// the `Client`'s (it dereferences to its handle).
#[derive(Debug)]
pub struct ClientHandle<R: Runtime> {
    commands: Sender<Command>,
    cancels: Arc<CancelRegistry>,
    pid: u32,
    finished: Arc<AtomicBool>,
    runtime: PhantomData<fn() -> R>,
}

impl<R: Runtime> Clone for ClientHandle<R> {
    fn clone(&self) -> Self {
        Self {
            commands: self.commands.clone(),
            cancels: self.cancels.clone(),
            pid: self.pid,
            finished: self.finished.clone(),
            runtime: PhantomData,
        }
    }
}

impl<R: Runtime> std::ops::Deref for Client<R> {
    type Target = ClientHandle<R>;

    fn deref(&self) -> &ClientHandle<R> {
        &self.handle
    }
}

/// The progress of one request (`notifications/progress`), as they come:
/// [`next`](Self::next) gives each update, then `None` once the request
/// completed and every update was taken. At most
/// [`MAX_PROGRESS_QUEUED`](mcp_stdio_core::MAX_PROGRESS_QUEUED) wait; past
/// it the oldest is dropped ([`dropped`](Self::dropped)).
#[derive(Debug)]
pub struct ProgressStream {
    queue: Arc<ProgressQueue>,
    changed: Arc<Event>,
}

impl ProgressStream {
    fn new() -> Self {
        let changed = Arc::new(Event::new());
        let wake = changed.clone();
        Self {
            queue: ProgressQueue::new(move || {
                wake.notify(usize::MAX);
            }),
            changed,
        }
    }

    /// The next update; `None` once the request completed and every update
    /// was taken.
    pub async fn next(&mut self) -> Option<Progress> {
        loop {
            match self.queue.try_next() {
                ProgressPoll::Update(u) => return Some(u),
                ProgressPoll::Ended => return None,
                ProgressPoll::Empty => {}
            }
            let listener = self.changed.listen();
            // Looked at again after listening: a push in between is not lost.
            match self.queue.try_next() {
                ProgressPoll::Update(u) => return Some(u),
                ProgressPoll::Ended => return None,
                ProgressPoll::Empty => listener.await,
            }
        }
    }

    /// Updates dropped because this stream fell behind.
    pub fn dropped(&self) -> u64 {
        self.queue.dropped()
    }
}

impl<R: Runtime> Client<R> {
    /// Spawns `command` (no shell; its own process group) with stdin, stdout
    /// and stderr piped, and starts the driver on the runtime the caller
    /// runs in ([`Runtime::current`]; tokio: inside a runtime).
    ///
    /// On Linux the server is tied to this process: if this process dies
    /// without shutting it down (even by `SIGKILL`), the kernel kills the
    /// server (`PR_SET_PDEATHSIG`, set from one long-lived spawner thread so
    /// the thread that called `spawn` may exit). Elsewhere the server sees
    /// its stdin close.
    ///
    /// # Errors
    /// No runtime, the spawn failed, or the driver could not be started (the
    /// server is killed then).
    pub fn spawn(command: &CommandSpec, options: ClientOptions) -> std::io::Result<Self> {
        let rt = R::current()?;
        let (mut client, driver) = Self::start(&rt, command, options)?;
        let (record_tx, record) = async_channel::bounded(1);
        // Short enough for the kernel's 15-byte thread names (`ps -L`,
        // `/proc/<pid>/task/*/comm`), where a runtime gives it a thread.
        let name = format!("mcp-io-{}", client.handle.pid);
        // No driver, no session: dropped with the future, the driver's
        // `Leader` kills the group and reaps it.
        rt.spawn_driver(
            name,
            Box::pin(async move {
                let _ = record_tx.try_send(driver.run().await);
            }),
        )?;
        client.driver = Some(record);
        Ok(client)
    }

    /// Spawns the server; the driver is returned, not yet running.
    fn start(
        rt: &R,
        command: &CommandSpec,
        options: ClientOptions,
    ) -> std::io::Result<(Self, Driver<R>)> {
        let mut child = mcp_stdio_sys::spawn_piped(command)?;
        let pid = child.id();
        tracing::debug!(pid, command = %command.display(), "spawned MCP server");
        let (stdin, stdout, stderr) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take());
        // Owns the child from here: an error below kills and reaps it.
        let leader = Leader::new(rt, child);
        let stdin = stdin.map(|p| Pipe::new(rt, p)).transpose()?;
        let stdout = stdout.map(|p| Pipe::new(rt, p)).transpose()?;
        let stderr = stderr.map(|p| Pipe::new(rt, p)).transpose()?;
        let group = leader.group().clone();
        // Capacity 1 and `try_send`: a stored wake, never a wait, never lost.
        let (wake_tx, wake) = async_channel::bounded::<()>(1);
        let cancels = CancelRegistry::new(move || {
            let _ = wake_tx.try_send(());
        });

        let negotiation = options.negotiation();
        let now = Instant::now();
        let mut core = ClientDriver::new(options, pid, now, cancels.clone());
        // A pipe that could not be set up is at its end from the start.
        if stdout.is_none() {
            let look = &mut || Ok(None);
            core.handle_input(
                now,
                DriverInput::Stdout {
                    result: Ok(0),
                    look,
                },
            );
        }
        if stderr.is_none() {
            let look = &mut || Ok(None);
            let ended = DriverInput::Stderr {
                result: Ok(0),
                buf: &[],
                look,
            };
            core.handle_input(now, ended);
        }

        let (commands, command_rx) = async_channel::bounded(COMMAND_QUEUE);
        // Capacity 1: the core's bounded inbox is the real queue (G5).
        let (incoming_tx, incoming) = async_channel::bounded(1);
        let incoming_taken = Arc::new(Event::new());
        let finished = Arc::new(AtomicBool::new(false));
        let driver = Driver {
            core,
            pid,
            stdout,
            stderr,
            stderr_buf: vec![0; STDERR_READ],
            stdin,
            leader,
            commands: Box::pin(command_rx),
            commands_tx: commands.downgrade(),
            commands_open: true,
            wake: Box::pin(wake),
            incoming: incoming_tx,
            incoming_taken: incoming_taken.clone(),
            taken: None,
            finished: finished.clone(),
            timer: DeadlineTimer::new(rt),
            deadline: None,
            stdin_parked: false,
            record: None,
        };
        let client = Self {
            handle: ClientHandle {
                commands,
                cancels,
                pid,
                finished,
                runtime: PhantomData,
            },
            incoming,
            incoming_taken,
            driver: None,
            group,
            negotiation,
            negotiated: OnceLock::new(),
        };
        Ok((client, driver))
    }

    /// Sends `signal` to the server's process group, as a host's own
    /// `SIGTERM` would, while that group id is still the server's: after the
    /// session reaped the server nothing is sent ([`Signalled::Refused`]).
    pub fn signal_group(&self, signal: Signal) -> Signalled {
        self.group.signal(signal)
    }

    /// A handle on this session to clone into other tasks (see
    /// [`ClientHandle`]).
    pub fn handle(&self) -> ClientHandle<R> {
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
    pub async fn initialize(&self) -> Result<Negotiated, InitializeError> {
        let mut negotiation = self.negotiation.clone();
        let mut step = negotiation.start();
        let result = loop {
            step = match step {
                NegotiationStep::Request {
                    method,
                    params,
                    timeout,
                } => {
                    // `None`: the session's default, the core's to apply.
                    let outcome = self
                        .request_with_timeout(method, Some(params), timeout)
                        .await;
                    negotiation.handle_response(outcome)
                }
                NegotiationStep::Notify { method } => {
                    negotiation.handle_notified(self.notify(method, None).await)
                }
                NegotiationStep::Done(result) => break result?,
            };
        };
        self.commands
            .send(Command::Negotiated(Box::new(result.clone())))
            .await
            .map_err(|_| RequestError::from(SendError::Closed))?;
        let _ = self.negotiated.set(result.clone());
        Ok(result)
    }

    /// What [`initialize`](Self::initialize) agreed (its first success), if
    /// it has run.
    pub fn negotiated(&self) -> Option<&Negotiated> {
        self.negotiated.get()
    }

    /// The next server→client request or notification; `None` once the
    /// session is over. Messages wait in the core's bounded inbox meanwhile;
    /// when it is full its overload policy applies and the reader goes on (G5).
    pub async fn next_incoming(&self) -> Option<IncomingMessage> {
        let msg = self.incoming.recv().await.ok();
        // The capacity-1 channel has room again: the driver may move the
        // next message out of the core's inbox.
        self.incoming_taken.notify(1);
        msg
    }

    /// Graceful shutdown (G11): pending requests fail, stdin is closed, then
    /// `SIGTERM` and `SIGKILL` to the group after their graces, the readers
    /// drain with a deadline, and the record of what was observed is returned.
    pub async fn shutdown(mut self) -> SessionRecord {
        let _ = self.commands.send(Command::Shutdown).await;
        self.wait_record().await
    }

    /// Like [`shutdown`](Self::shutdown) but starts with `SIGTERM` at once.
    pub async fn kill(mut self) -> SessionRecord {
        let _ = self.commands.send(Command::Kill).await;
        self.wait_record().await
    }

    /// Waits until the server ends by itself (or the session closes) and
    /// returns the record, without asking it to stop.
    pub async fn wait(mut self) -> SessionRecord {
        self.wait_record().await
    }

    async fn wait_record(&mut self) -> SessionRecord {
        let driver = self
            .driver
            .as_mut()
            .expect("present until a consuming method (this one) has awaited it");
        // The driver never panics on input; if it did (a bug), its task
        // or thread ends without a record and this panics too. The receiver stays in
        // `self` while awaited: if this future is dropped unfinished, `Drop`
        // still kills the group.
        let record = driver
            .recv()
            .await
            .expect("the driver ended without its record: it panicked");
        self.driver = None;
        record
    }
}

impl<R: Runtime> ClientHandle<R> {
    /// The server's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends a request with the configured default timeout and waits for its result.
    pub async fn request(&self, method: &str, params: Option<Box<RawValue>>) -> Outcome {
        // `None` is the session's default: the core applies it.
        self.request_with_timeout(method, params, None).await
    }

    /// Sends a request with an explicit deadline — the session's default,
    /// none at all, or after a duration ([`Deadline`]) — and waits.
    /// Dropping the future before it completes cancels the request (G6).
    pub async fn request_with_deadline(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        deadline: Deadline,
    ) -> Outcome {
        self.request_with_timeout(method, params, deadline.as_timeout())
            .await
    }

    /// Sends a request with its own timeout and waits. `None` takes the
    /// session's default timeout; for no deadline at all use
    /// [`request_with_deadline`](Self::request_with_deadline) with
    /// [`Deadline::None`].
    ///
    /// Dropping the future before it completes cancels the request (G6).
    /// The driver answers only with the outcome (no id first, unlike
    /// [`start_request`](Self::start_request)): one wake-up of this task per
    /// request.
    pub async fn request_with_timeout(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
    ) -> Outcome {
        let (outcome, rx) = oneshot();
        let cancel = CallCancel::new(&self.cancels);
        // Cancels on drop unless the outcome arrived.
        let _abandon = AbandonOnDrop(cancel.clone());
        let cmd = Command::Call {
            method: method.to_owned(),
            params,
            timeout,
            outcome,
            cancel,
            progress: None,
        };
        self.commands
            .send(cmd)
            .await
            .map_err(|_| RequestError::from(SendError::Closed))?;
        // `Err`: the driver ended without an answer for this call.
        rx.recv()
            .await
            .unwrap_or(Err(RequestFailure::SessionClosed.into()))
    }

    /// Sends a request and returns it in flight, to be awaited or cancelled.
    pub async fn start_request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
    ) -> Result<PendingRequest, RequestError> {
        self.start(method, params, timeout, None).await
    }

    async fn start(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
        progress: Option<Arc<ProgressQueue>>,
    ) -> Result<PendingRequest, RequestError> {
        let (reply, rx) = oneshot();
        let cmd = Command::Request {
            method: method.to_owned(),
            params,
            timeout,
            progress,
            reply,
        };
        self.commands
            .send(cmd)
            .await
            .map_err(|_| RequestError::from(SendError::Closed))?;
        let started = rx.recv().await.unwrap_or(Err(SendError::Closed.into()))?;
        Ok(PendingRequest {
            id: started.id,
            rx: Box::pin(started.outcome),
            cancel: started.cancel,
            done: false,
        })
    }

    /// Sends a notification.
    pub async fn notify(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> Result<(), RequestError> {
        let (reply, rx) = oneshot();
        let cmd = Command::Notify {
            method: method.to_owned(),
            params,
            reply,
        };
        self.commands
            .send(cmd)
            .await
            .map_err(|_| RequestError::from(SendError::Closed))?;
        rx.recv().await.unwrap_or(Err(SendError::Closed.into()))
    }

    /// Cancels a request by id (see [`PendingRequest::cancel`]); a no-op for
    /// an id not in flight. Never blocks and is never lost.
    pub fn cancel(&self, id: &Id, reason: &str) {
        self.cancels.cancel(id, reason);
    }

    /// The session's counters now; `None` once the session is over.
    pub async fn metrics(&self) -> Option<ClientMetrics> {
        let (reply, rx) = oneshot();
        self.commands.send(Command::Metrics { reply }).await.ok()?;
        rx.recv().await.ok()
    }

    /// Whether the session is over (the server's process was seen to end).
    pub fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
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
    pub async fn start_request_with_progress(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
    ) -> Result<(PendingRequest, ProgressStream), RequestError> {
        let progress = ProgressStream::new();
        let pending = self
            .start(method, params, timeout, Some(progress.queue.clone()))
            .await?;
        Ok((pending, progress))
    }

    /// One page of the server's tools (`tools/list` from `cursor`), raw: the
    /// result's `tools` and `nextCursor` as the server sent them.
    pub async fn list_tools(&self, cursor: Option<&str>) -> Outcome {
        self.request(TOOLS_LIST, tools_list_params(cursor)).await
    }

    /// Calls the tool `name` with `arguments` (an object, or `null`), with
    /// the session's default timeout; the result raw (`content`,
    /// `structuredContent`, `isError`).
    pub async fn call_tool(&self, name: &str, arguments: &serde_json::Value) -> Outcome {
        let params = tools_call_params(name, arguments).map_err(RequestError::from)?;
        self.request(TOOLS_CALL, Some(params)).await
    }

    /// [`call_tool`](Self::call_tool) with its progress: the call in flight,
    /// to await or cancel, and the stream of its progress updates (see
    /// [`start_request_with_progress`](Self::start_request_with_progress)).
    ///
    /// # Errors
    /// `arguments` is not an object, or the request could not be sent.
    pub async fn call_tool_with_progress(
        &self,
        name: &str,
        arguments: &serde_json::Value,
    ) -> Result<(PendingRequest, ProgressStream), RequestError> {
        let params = tools_call_params(name, arguments).map_err(RequestError::from)?;
        self.start_request_with_progress(TOOLS_CALL, Some(params), None)
            .await
    }

    /// The session's counters and the newest `stderr_bytes` bytes the server
    /// wrote to stderr (of the tail the session keeps), while it runs;
    /// `None` once the session is over (the record has them then).
    pub async fn snapshot(&self, stderr_bytes: usize) -> Option<LiveSnapshot> {
        let (reply, rx) = oneshot();
        let cmd = Command::Snapshot {
            stderr_bytes,
            reply,
        };
        self.commands.send(cmd).await.ok()?;
        rx.recv().await.ok()
    }
}

impl<R: Runtime> Drop for Client<R> {
    fn drop(&mut self) {
        if self.driver.is_some() && !self.finished.load(Ordering::Acquire) {
            // Synchronous: one syscall, refused if the driver reaped the
            // server meanwhile. The driver observes the exit, the readers
            // see EOF, and the driver ends the session.
            let _ = self.group.signal(Signal::Kill);
        }
    }
}

/// The driver: the core's [`ClientDriver`], the three pipes and the leader.
struct Driver<R: Runtime> {
    core: ClientDriver<OneShot>,
    pid: u32,
    /// `None` once it ended, failed, or was abandoned.
    stdout: Option<Pipe<R>>,
    /// `None` once it ended, failed, or was abandoned.
    stderr: Option<Pipe<R>>,
    /// Reused for every stderr read: [`STDERR_READ`] bytes.
    stderr_buf: Vec<u8>,
    /// `None` once stdin is closed or broken (dropping it closes the pipe,
    /// even in the middle of a message to a server that stopped reading).
    stdin: Option<Pipe<R>>,
    /// The server: reaped only after the core's `Finished`.
    leader: Leader<R>,
    /// Pinned: a receiver polled as a stream is `!Unpin`.
    commands: Pin<Box<Receiver<Command>>>,
    /// For the `Responder`s of server→client requests. Weak, so the queue
    /// closes once the application dropped every handle.
    commands_tx: WeakSender<Command>,
    commands_open: bool,
    /// Woken by cancels (see [`CancelRegistry`]).
    wake: Pin<Box<Receiver<()>>>,
    incoming: Sender<IncomingMessage>,
    incoming_taken: Arc<Event>,
    /// Listening for the application to take a message (the channel is full).
    taken: Option<EventListener>,
    finished: Arc<AtomicBool>,
    /// One timer for the whole session.
    timer: DeadlineTimer<R>,
    /// The core's next deadline, from its last drained output.
    deadline: Option<Instant>,
    /// The last write was pending: tell the core at the next turn that
    /// stdin may take bytes again.
    stdin_parked: bool,
    /// The record, once `Finished` was drained.
    record: Option<SessionRecord>,
}

impl<R: Runtime> Driver<R> {
    async fn run(mut self) -> SessionRecord {
        let record = futures_lite::future::poll_fn(|cx| self.poll_run(cx)).await;
        // Commands queued as the session ended would keep their reply
        // senders alive (an async-channel keeps its buffer until the last
        // sender is gone, and the `Client` holds one): the application would
        // wait for a reply forever. Close the queue and drop what is in it,
        // so every waiter sees the session's end at once.
        self.commands.close();
        while let Ok(cmd) = self.commands.try_recv() {
            tracing::debug!(command = ?cmd, "command after the session ended: dropped");
        }
        record
    }

    /// Turns until nothing is ready (every input registered for a wake) or
    /// the session is over.
    fn poll_run(&mut self, cx: &mut Context<'_>) -> Poll<SessionRecord> {
        for _ in 0..TURNS_PER_POLL {
            // The one clock read of this turn.
            let now = Instant::now();
            if std::mem::take(&mut self.stdin_parked) {
                self.core.handle_input(now, DriverInput::Writable);
            }
            // Cancels flagged before this turn go out before what the turn
            // brings: a `cancel` then a `request` reach the wire in that order (G6).
            while let Poll::Ready(Some(())) = self.wake.as_mut().poll_next(cx) {}
            self.core.handle_input(now, DriverInput::Cancels);
            // The inputs in a fixed order, the exit before the pipes (so an
            // exit and an end of stream seen in one turn are taken in that
            // order); after each, the outputs it led to.
            let mut busy = self.pump(cx, now);
            for step in [
                Self::poll_exit,
                Self::poll_stdout,
                Self::poll_stderr,
                Self::poll_commands,
                Self::poll_incoming,
                Self::poll_timer,
            ] {
                busy |= step(self, cx, now);
                busy |= self.pump(cx, now);
                if let Some(record) = self.record.take() {
                    self.finished.store(true, Ordering::Release);
                    return Poll::Ready(record);
                }
            }
            if !busy {
                return Poll::Pending;
            }
        }
        // Busy for a whole poll: let the executor run others, and come back.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    fn poll_exit(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        if self.core.exit_seen() {
            return false;
        }
        match self.leader.poll_exited(cx) {
            // Seen without reaping: the zombie keeps the group id ours until `Finished`.
            Poll::Ready(r) => {
                self.core.handle_input(now, DriverInput::Exited(r));
                true
            }
            Poll::Pending => false,
        }
    }

    /// Reads stdout straight into the framer's buffer while bytes are ready.
    fn poll_stdout(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        let mut busy = false;
        for _ in 0..STDOUT_READS_PER_TURN {
            let Some(pipe) = self.stdout.as_ref() else {
                break;
            };
            let Poll::Ready(result) = pipe.poll_read(cx, self.core.stdout_room().zeroed()) else {
                break;
            };
            busy = true;
            let leader = &mut self.leader;
            let look = &mut || leader.try_exited();
            self.core
                .handle_input(now, DriverInput::Stdout { result, look });
            // A `CloseReader` at the end drops the pipe.
            self.pump(cx, now);
        }
        busy
    }

    fn poll_stderr(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        let mut busy = false;
        for _ in 0..STDERR_READS_PER_TURN {
            let Some(pipe) = self.stderr.as_ref() else {
                break;
            };
            let Poll::Ready(result) = pipe.poll_read(cx, &mut self.stderr_buf) else {
                break;
            };
            busy = true;
            let leader = &mut self.leader;
            let look = &mut || leader.try_exited();
            let buf = &self.stderr_buf;
            self.core
                .handle_input(now, DriverInput::Stderr { result, buf, look });
            self.pump(cx, now);
        }
        busy
    }

    fn poll_commands(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        let mut busy = false;
        for _ in 0..COMMANDS_PER_TURN {
            if !self.commands_open {
                break;
            }
            let Poll::Ready(cmd) = self.commands.as_mut().poll_next(cx) else {
                break;
            };
            busy = true;
            match cmd {
                Some(cmd) => self.core.handle_input(now, DriverInput::Command(cmd)),
                None => {
                    // Every handle is gone: the Client was dropped (and its
                    // `Drop` already sent SIGKILL); run the kill path so the
                    // record says so.
                    self.commands_open = false;
                    self.core.handle_input(now, DriverInput::ClientGone);
                }
            }
        }
        busy
    }

    /// Moves messages from the core's inbox to the capacity-1 channel while
    /// it has room (G5: the inbox is the queue; the channel only hands over).
    fn poll_incoming(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        let mut busy = false;
        loop {
            if !self.core.has_incoming() {
                self.taken = None;
                return busy;
            }
            if self.incoming.is_closed() {
                // Nobody will read them: the inbox must not hold the session's memory.
                while self.core.poll_incoming(now).is_some() {}
                return true;
            }
            if self.incoming.is_full() {
                let listener = self
                    .taken
                    .get_or_insert_with(|| self.incoming_taken.listen());
                // Re-checked after listening: a take in between is not missed.
                if self.incoming.is_full() {
                    match Pin::new(listener).poll(cx) {
                        Poll::Ready(()) => self.taken = None,
                        Poll::Pending => return busy,
                    }
                    continue;
                }
                self.taken = None;
            }
            let msg = match self.core.poll_incoming(now) {
                Some(Incoming::Request(r)) => {
                    // No sender left: the application is gone and nobody could answer.
                    let Some(commands) = self.commands_tx.upgrade() else {
                        continue;
                    };
                    let responder = Responder {
                        id: r.id.clone(),
                        commands,
                    };
                    IncomingMessage::Request(r, responder)
                }
                Some(Incoming::Notification(n)) => IncomingMessage::Notification(n),
                None => continue,
            };
            // Only the driver sends and it checked for room: never `Full`.
            let _ = self.incoming.try_send(msg);
            busy = true;
        }
    }

    fn poll_timer(&mut self, cx: &mut Context<'_>, _now: Instant) -> bool {
        match self.timer.poll(cx, self.deadline) {
            Poll::Ready(now) => {
                self.core.handle_input(now, DriverInput::Timeout);
                true
            }
            Poll::Pending => false,
        }
    }

    /// Drains the core's outputs in its order: the held message is written
    /// as far as stdin takes it now, never waited for (G1). Keeps the record
    /// once the session is over; `true` if a write made progress.
    fn pump(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        let mut busy = false;
        while self.record.is_none() {
            let action = match self.core.poll_output() {
                DriverOutput::Action(action) => action,
                DriverOutput::Write(out) => {
                    let r = match self.stdin.as_ref() {
                        Some(pipe) => match pipe.poll_write(cx, out.bytes()) {
                            Poll::Ready(r) => r,
                            Poll::Pending => Err(std::io::ErrorKind::WouldBlock.into()),
                        },
                        // Closed by us: the core hears it as a failed write.
                        None => Err(std::io::ErrorKind::BrokenPipe.into()),
                    };
                    let parked = r
                        .as_ref()
                        .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock);
                    self.stdin_parked |= parked;
                    busy |= !parked;
                    self.core.handle_input(now, DriverInput::Written(r));
                    continue;
                }
                DriverOutput::Timeout(deadline) => {
                    self.deadline = deadline;
                    break;
                }
            };
            match action {
                // Dropping stdin closes the pipe, mid-message if need be:
                // the server sees EOF.
                DriverAction::CloseStdin => self.stdin = None,
                DriverAction::CloseReader(ChildStream::Stdout) => self.stdout = None,
                DriverAction::CloseReader(ChildStream::Stderr) => self.stderr = None,
                DriverAction::LogStderrLine(line) => forward_server_stderr(self.pid, line),
                DriverAction::Note(note) => log_note(self.pid, note),
                DriverAction::SignalGroup(sig) => {
                    let _ = self.leader.signal(sig);
                }
                DriverAction::AbandonReaders => {
                    log_relay::event(
                        self.pid,
                        Level::Warn,
                        "server pipes still open past the drain deadline; abandoning readers",
                        None,
                    );
                    self.stdout = None;
                    self.stderr = None;
                }
                DriverAction::Finished(record) => {
                    // The record is built: nothing more is read or written,
                    // and the group is never signalled again.
                    self.stdout = None;
                    self.stderr = None;
                    self.stdin = None;
                    self.leader.reap();
                    self.record = Some(*record);
                }
                _ => {}
            }
        }
        busy
    }
}

/// A machine's note, to the log relay (which never blocks the loop).
pub(crate) fn log_note(pid: u32, note: Note) {
    let level = match note.level {
        NoteLevel::Warn => Level::Warn,
        _ => Level::Debug,
    };
    log_relay::event(pid, level, note.message, note.detail);
}

#[cfg(all(test, feature = "async-io"))]
mod tests {
    use super::*;
    use crate::AsyncIo;
    use async_io::Timer;
    use futures_lite::future::or;

    /// G6: a `request` future dropped before the driver even took its
    /// command (it never ran: the driver runs on this thread) is a real
    /// cancel: once the driver sends the request, `notifications/cancelled`
    /// for its id follows. `cat` echoes both back as server→client messages.
    #[test]
    fn g6_request_dropped_before_the_driver_took_it_is_cancelled_on_the_server() {
        let (client, driver) =
            Client::<AsyncIo>::start(&AsyncIo, &CommandSpec::new("cat"), ClientOptions::default())
                .expect("spawn cat");
        let script = async {
            {
                let request =
                    client.request_with_timeout("slow", None, Some(Duration::from_secs(20)));
                let mut request = std::pin::pin!(request);
                // Queues the command; the driver cannot run before the drop.
                assert!(futures_lite::future::poll_once(request.as_mut())
                    .await
                    .is_none());
            }
            let t = Instant::now();
            let echoed = async {
                let mut sent = None;
                loop {
                    match client.next_incoming().await {
                        Some(IncomingMessage::Request(r, _)) if r.method == "slow" => {
                            sent = Some(r.id.to_string());
                        }
                        Some(IncomingMessage::Notification(n))
                            if n.method == "notifications/cancelled" =>
                        {
                            let params = n.params.as_ref().map(|p| p.get().to_owned());
                            let id = sent.as_ref().expect("the request came first");
                            assert!(
                                params
                                    .as_ref()
                                    .is_some_and(|p| p.contains(&format!("\"requestId\":{id}"))
                                        && p.contains(ABANDONED)),
                                "{params:?}"
                            );
                            return;
                        }
                        Some(_) => {}
                        None => panic!("the session ended before the cancel was echoed"),
                    }
                }
            };
            let timed_out = async {
                Timer::after(Duration::from_secs(10)).await;
                panic!("the cancel of the dropped request never reached the server");
            };
            or(echoed, timed_out).await;
            eprintln!(
                "async: cancel of a request dropped before it was sent echoed in {:?}",
                t.elapsed()
            );
            let _ = client.commands.send(Command::Kill).await;
            std::future::pending::<SessionRecord>().await
        };
        let record = async_io::block_on(or(driver.run(), script));
        assert_eq!(record.metrics.cancels_sent, 1);
    }

    /// G6: a cancel issued before the next request reaches the server
    /// before it, in every round (the driver, on this thread, sees both in
    /// one turn). `cat` echoes what it receives, in order.
    #[test]
    fn g6_cancel_then_request_reach_the_wire_in_that_order() {
        let (client, driver) =
            Client::<AsyncIo>::start(&AsyncIo, &CommandSpec::new("cat"), ClientOptions::default())
                .expect("spawn cat");
        let script = async {
            let mut order = Vec::new();
            // Kept: a dropped request would send a cancel of its own.
            let mut seconds = Vec::new();
            for round in 0..8 {
                let timeout = Some(Duration::from_secs(20));
                let first = client
                    .start_request("first", None, timeout)
                    .await
                    .expect("sent");
                first.cancel("then the next request");
                seconds.push(
                    client
                        .start_request("second", None, timeout)
                        .await
                        .expect("sent"),
                );
                let seen = async {
                    let mut seen = Vec::new();
                    while seen.len() < 3 {
                        match client.next_incoming().await {
                            Some(IncomingMessage::Request(r, _)) => seen.push(r.method),
                            Some(IncomingMessage::Notification(n)) => seen.push(n.method),
                            None => panic!("the session ended in round {round}"),
                        }
                    }
                    seen
                };
                let timed_out = async {
                    Timer::after(Duration::from_secs(10)).await;
                    panic!("round {round}: the messages never came back");
                };
                order = or(seen, timed_out).await;
                assert_eq!(
                    order,
                    ["first", "notifications/cancelled", "second"],
                    "round {round}"
                );
            }
            eprintln!("async: cancel before the next request in 8 rounds: {order:?}");
            let _ = client.commands.send(Command::Kill).await;
            std::future::pending::<SessionRecord>().await
        };
        async_io::block_on(or(driver.run(), script));
    }

    /// G6: a cancel issued while the command queue is full still reaches the
    /// server. `cat` is the server: whatever reaches its stdin comes back as a
    /// server→client message. The driver runs on this thread, so while this
    /// code fills the queue it cannot drain it.
    #[test]
    fn g6_cancel_while_the_command_queue_is_full_reaches_the_server() {
        let (client, driver) =
            Client::<AsyncIo>::start(&AsyncIo, &CommandSpec::new("cat"), ClientOptions::default())
                .expect("spawn cat");
        let script = async {
            let pending = client
                // A deadline, so a lost cancel fails the test instead of hanging it.
                .start_request("slow", None, Some(Duration::from_secs(20)))
                .await
                .expect("sent");
            let id = pending.id().clone();
            // No await from here to the cancel: the driver cannot run.
            let mut filled = 0;
            while client
                .commands
                .try_send(Command::Metrics { reply: oneshot().0 })
                .is_ok()
            {
                filled += 1;
            }
            assert_eq!(filled, COMMAND_QUEUE);
            let t = Instant::now();
            pending.cancel("queue full");
            let outcome = pending.await;
            assert!(
                matches!(
                    outcome,
                    Err(RequestError::Failed(RequestFailure::Cancelled {
                        cancel_sent: true
                    }))
                ),
                "{outcome:?}"
            );
            let echoed = async {
                loop {
                    if let Some(IncomingMessage::Notification(n)) = client.next_incoming().await {
                        let params = n.params.as_ref().map(|p| p.get().to_owned());
                        if n.method == "notifications/cancelled"
                            && params.is_some_and(|p| p.contains(&format!("\"requestId\":{id}")))
                        {
                            return;
                        }
                    }
                }
            };
            let timed_out = async {
                Timer::after(Duration::from_secs(10)).await;
                panic!("the cancel never reached the server");
            };
            or(echoed, timed_out).await;
            eprintln!(
                "async: cancel with {filled} commands queued reached the server in {:?}",
                t.elapsed()
            );
            let _ = client.commands.send(Command::Kill).await;
            std::future::pending::<SessionRecord>().await
        };
        let record = async_io::block_on(or(driver.run(), script));
        assert!(record.metrics.cancels_sent >= 1);
    }
}
