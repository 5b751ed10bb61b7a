//! `Client`: spawn an MCP server and drive its session with async-io.
//!
//! # Threads and tasks
//!
//! async-std has no `select!`; the driver instead races one future per
//! thing it waits on (futures-lite's `race`):
//!
//! - the **driver**, on a thread of its own, owns the core's [`ClientDriver`], which makes every
//!   decision, and the server's three pipes; it waits for "a pipe's bytes or
//!   end, room in stdin for the one message held, the exit, the next
//!   command, a cancel, room for an incoming message, or the core's
//!   deadline" and never for anything else. The write is one branch of that
//!   wait: it moves only what the pipe accepts while the reads go on, so a
//!   server that stops reading never stops the client from reading (G1).
//!   It also owns the `Child`, as a [`Leader`]: the exit is one branch of
//!   the same wait (the pidfd's readiness on Linux, a 50 ms look elsewhere),
//!   observed without reaping, and the server is reaped only after the
//!   core's `Finished`, so its group id cannot be reused while the core may
//!   still signal it.
//!
//! Reading and writing in the driver itself, rather than in reader and
//! writer tasks joined to it by channels, saves a task hop and a cross-thread
//! wake-up per pipe event: a round trip wakes the driver once for the command,
//! once for stdout. The driver never awaits the application (replies are
//! `try_send`s on capacity-1 channels, server→client messages go out only when
//! their capacity-1 channel has room), so the pipes are never starved,
//! whatever the application does (G1).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_channel::{Receiver, Sender, WeakSender};
use async_io::Timer;
use async_process::{Child, ChildStderr, ChildStdin, ChildStdout};
use event_listener::{Event, EventListener};
use futures_lite::future::{or, race};
use futures_lite::{AsyncReadExt, AsyncWriteExt, Stream};
use mcp_stdio_core::client::{ClientMetrics, Deadline, Incoming, RequestFailure, SendError};
pub use mcp_stdio_core::driver::CancelHandle;
use mcp_stdio_core::driver::{
    CallCancel, CancelRegistry, ClientDriver, DriverAction, ReplyChannel, ABANDONED,
};
use mcp_stdio_core::handshake::{check_initialize_result, initialize_params, InitializeResult};
use mcp_stdio_core::host::{ClientOptions, InitializeError, RequestError, SessionRecord};
use mcp_stdio_core::message::{ErrorObject, Id, Notification, RawResult, RawValue, Request};
use mcp_stdio_core::process::Signal;
use mcp_stdio_core::{CommandSpec, ExitStatus};
use mcp_stdio_sys::{ProcessGroup, Signalled};

use mcp_stdio_sys::log_relay::{self, forward_server_stderr, Level};

use crate::leader::Leader;

/// Commands queued from the application to the driver task. Cancels never
/// pass through it (see [`CancelRegistry`]), so a full queue loses none.
const COMMAND_QUEUE: usize = 256;
/// Reads of stdout per wake of the driver, when bytes keep coming: a 4 MiB
/// burst, then the other branches get their turn.
const STDOUT_READS_PER_WAKE: usize = 64;
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

type Command = mcp_stdio_core::driver::Command<OneShot>;

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

/// A spawned MCP server and its session.
///
/// One driver task owns the core's [`ClientDriver`] and the server's pipes:
/// it reads stdout and stderr continuously, whatever the application does
/// (G1), and writes stdin only as the pipe accepts bytes, never blocking
/// those reads; it applies deadlines and runs the shutdown sequence (G11). The
/// application talks to the driver through a bounded command queue; cancels
/// bypass it and are never lost. The decisions are the core's [`ClientDriver`].
///
/// Dropping a `Client` without [`shutdown`](Self::shutdown) kills the
/// server's process group at once (a `killpg` system call, never a task
/// spawned in `Drop`); the driver then observes the exit and ends. The group
/// is never signalled after the driver reaped the server: its id could have
/// been reused (see `mcp_stdio_sys::ProcessGroup`).
#[derive(Debug)]
pub struct Client {
    commands: Sender<Command>,
    cancels: Arc<CancelRegistry>,
    incoming: Receiver<IncomingMessage>,
    /// Notified each time the application takes an incoming message, so the
    /// driver can move the next one out of the core's inbox.
    incoming_taken: Arc<Event>,
    /// The driver thread's record, sent once as it ends.
    driver: Option<Receiver<SessionRecord>>,
    pid: u32,
    group: ProcessGroup,
    finished: Arc<AtomicBool>,
    client_info: mcp_stdio_core::handshake::Implementation,
    client_capabilities: Option<Box<RawValue>>,
    request_timeout: Option<Duration>,
}

impl Client {
    /// Spawns `command` (no shell; its own process group) with stdin, stdout
    /// and stderr piped, and starts the driver on a thread of its own. Works from any thread, inside or
    /// outside an executor (async-std, smol or none).
    ///
    /// The driver has a thread, not an executor task: a task was moved
    /// between the executor's worker threads from one wake-up to the next,
    /// which cost a round trip about a third of its latency; on its own
    /// thread (async-io's `block_on`, sharing the process's one reactor) it
    /// stays put, and code that blocks every executor thread cannot pause it.
    ///
    /// On Linux the server is tied to this process: if this process dies
    /// without shutting it down (even by `SIGKILL`), the kernel kills the
    /// server (`PR_SET_PDEATHSIG`, set from one long-lived spawner thread so
    /// the thread that called `spawn` may exit). Elsewhere the server sees
    /// its stdin close.
    pub fn spawn(command: &CommandSpec, options: ClientOptions) -> std::io::Result<Self> {
        let (mut client, driver) = Self::start(command, options)?;
        let (record_tx, record) = async_channel::bounded(1);
        let pid = client.pid;
        let thread = std::thread::Builder::new()
            .name(format!("mcp-stdio-driver-{pid}"))
            .spawn(move || {
                let _ = record_tx.try_send(async_io::block_on(driver.run()));
            });
        // No thread, no session: the server must not outlive it. The closure
        // is dropped with the driver's `Leader`, which kills the group and
        // reaps it.
        thread?;
        client.driver = Some(record);
        Ok(client)
    }

    /// Spawns the server; the driver is returned, not yet running.
    fn start(command: &CommandSpec, options: ClientOptions) -> std::io::Result<(Self, Driver)> {
        let (mut child, pid) = spawn_server(command)?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let leader = Leader::new(child);
        let group = leader.group().clone();
        // Capacity 1 and `try_send`: a stored wake, never a wait, never lost.
        let (wake_tx, wake) = async_channel::bounded::<()>(1);
        let cancels = CancelRegistry::new(move || {
            let _ = wake_tx.try_send(());
        });

        let request_timeout = options.get_default_timeout();
        let client_info = options.get_client_info().clone();
        let client_capabilities = options.get_client_capabilities().map(ToOwned::to_owned);
        let now = Instant::now();
        let mut core = ClientDriver::new(options, pid, now, cancels.clone());
        if stdout.is_none() {
            core.handle_stdout_eof(now);
        }
        if stderr.is_none() {
            core.handle_stderr_eof(now);
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
            exited: false,
            commands: command_rx,
            commands_tx: commands.downgrade(),
            commands_open: true,
            wake,
            incoming: incoming_tx,
            incoming_taken: incoming_taken.clone(),
            finished: finished.clone(),
            timer: Timer::never(),
            armed: None,
        };
        let client = Self {
            commands,
            cancels,
            incoming,
            incoming_taken,
            driver: None,
            pid,
            group,
            finished,
            client_info,
            client_capabilities,
            request_timeout,
        };
        Ok((client, driver))
    }

    /// The server's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends `signal` to the server's process group, as a host's own
    /// `SIGTERM` would, while that group id is still the server's: after the
    /// session reaped the server nothing is sent ([`Signalled::Refused`]).
    pub fn signal_group(&self, signal: Signal) -> Signalled {
        self.group.signal(signal)
    }

    /// The MCP handshake: `initialize` with the latest protocol version, the
    /// server's answer checked (version negotiation), then
    /// `notifications/initialized`. Notifications the server sends before its
    /// answer are kept for [`next_incoming`](Self::next_incoming).
    pub async fn initialize(&self) -> Result<InitializeResult, InitializeError> {
        let params = initialize_params(&self.client_info, self.client_capabilities.as_deref());
        let result = self
            .request_with_timeout("initialize", Some(params), self.request_timeout)
            .await?;
        let init = check_initialize_result(result.get())?;
        self.notify("notifications/initialized", None).await?;
        Ok(init)
    }

    /// Sends a request with the configured default timeout and waits for its result.
    pub async fn request(&self, method: &str, params: Option<Box<RawValue>>) -> Outcome {
        self.request_with_timeout(method, params, self.request_timeout)
            .await
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
        let (reply, rx) = oneshot();
        let cmd = Command::Request {
            method: method.to_owned(),
            params,
            timeout,
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
        // The driver never panics on input; if it did (a bug), its thread
        // ends without a record and this panics too. The receiver stays in
        // `self` while awaited: if this future is dropped unfinished, `Drop`
        // still kills the group.
        let record = driver
            .recv()
            .await
            .expect("the driver thread ended without its record: it panicked");
        self.driver = None;
        record
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if self.driver.is_some() && !self.finished.load(Ordering::Acquire) {
            // Synchronous: one syscall, refused if the driver reaped the
            // server meanwhile. The driver observes the exit, the readers
            // see EOF, and the driver ends the session.
            let _ = self.group.signal(Signal::Kill);
        }
    }
}

/// Spawns the server with its three pipes, in its own process group.
fn spawn_server(command: &CommandSpec) -> std::io::Result<(Child, u32)> {
    // Tied to this process (G11): forked on the process-wide spawner thread.
    let child = mcp_stdio_sys::spawn_tied(command, |cmd| {
        async_process::Command::from(cmd)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
    })?;
    let pid = child.id();
    tracing::debug!(pid, command = %command.display(), "spawned MCP server");
    Ok((child, pid))
}

/// What [`Driver::deliver_incoming`] did.
enum Delivery {
    /// Nothing waits in the core's inbox.
    Idle,
    /// A message moved (or room appeared): pump and deliver again.
    Again,
    /// Messages wait and the channel is full: wake when the application takes one.
    WaitForRoom(EventListener),
}

/// What woke the driver.
enum Wake {
    /// A read of stdout returned (bytes in the driver's stdout buffer, 0: EOF).
    Stdout(std::io::Result<usize>),
    /// A read of stderr returned (bytes in the driver's stderr buffer, 0: EOF).
    Stderr(std::io::Result<usize>),
    /// A write to stdin took this many bytes of the held message.
    Written(std::io::Result<usize>),
    /// The server's exit was seen (not reaped), or looking for it failed.
    Exited(std::io::Result<ExitStatus>),
    Command(Option<Command>),
    IncomingTaken,
    /// A cancel was flagged: every wake handles cancels.
    Cancel,
    Timer,
}

/// The driver task: the core's [`ClientDriver`] and the three pipes.
///
/// The pipes are read and written here, in the same wait as commands,
/// cancels and the deadline, not in tasks of their own: a round trip then
/// wakes this task once per pipe event instead of hopping through a reader
/// or writer task and a channel. The write is one branch of that wait, so it
/// progresses only as the pipe accepts bytes while every read goes on (G1).
struct Driver {
    core: ClientDriver<OneShot>,
    pid: u32,
    /// `None` once it ended, failed, or was abandoned.
    stdout: Option<ChildStdout>,
    /// `None` once it ended, failed, or was abandoned.
    stderr: Option<ChildStderr>,
    /// Reused for every stderr read: [`STDERR_READ`] bytes.
    stderr_buf: Vec<u8>,
    /// `None` once stdin is closed or broken (dropping it closes the pipe,
    /// even in the middle of a message to a server that stopped reading).
    stdin: Option<ChildStdin>,
    /// The server: reaped only after the core's `Finished`.
    leader: Leader,
    /// Its exit was seen (or can never be).
    exited: bool,
    commands: Receiver<Command>,
    /// For the `Responder`s of server→client requests. Weak, so the queue
    /// closes once the application dropped every handle.
    commands_tx: WeakSender<Command>,
    commands_open: bool,
    /// Woken by cancels (see [`CancelRegistry`]).
    wake: Receiver<()>,
    incoming: Sender<IncomingMessage>,
    incoming_taken: Arc<Event>,
    finished: Arc<AtomicBool>,
    /// One timer for the whole session, moved only to an earlier deadline.
    timer: Timer,
    /// When `timer` fires (`None`: it is not armed).
    armed: Option<Instant>,
}

impl Driver {
    async fn run(mut self) -> SessionRecord {
        // The clock read of the turn that produced the outputs below.
        let mut now = Instant::now();
        loop {
            if let Some(record) = self.pump() {
                self.finished.store(true, Ordering::Release);
                return record;
            }
            let taken = match self.deliver_incoming(now) {
                Delivery::Idle => None,
                // Pump again: the next message may go out, or wait for room.
                Delivery::Again => continue,
                Delivery::WaitForRoom(listener) => Some(listener),
            };
            let wake = self.next_wake(taken).await;
            // The one clock read of this turn.
            now = Instant::now();
            // Cancels flagged before this turn go out before what the turn
            // brings: a `cancel` then a `request` reach the wire in that order.
            self.core.handle_cancels(now);
            match wake {
                Wake::Stdout(read) => self.stdout_read(now, read),
                Wake::Stderr(read) => self.stderr_read(now, read),
                Wake::Written(written) => self.written(written),
                Wake::Exited(Ok(status)) => {
                    self.exited = true;
                    self.core.handle_exited(now, status);
                }
                Wake::Exited(Err(e)) => {
                    // waitid() failing means no status can ever be observed:
                    // the supervisor's deadlines end the session.
                    self.exited = true;
                    log_relay::event(
                        self.pid,
                        Level::Warn,
                        "waiting for the server failed",
                        Some(e.to_string()),
                    );
                }
                Wake::Command(Some(cmd)) => self.core.handle_command(now, cmd),
                Wake::Command(None) => {
                    // Every handle is gone: the Client was dropped (and its
                    // `Drop` already sent SIGKILL); run the kill path so the
                    // record says so.
                    self.commands_open = false;
                    self.core.handle_client_gone(now);
                }
                Wake::IncomingTaken | Wake::Cancel => {}
                Wake::Timer => {
                    self.armed = None;
                    // Possibly early (the deadline moved later): does nothing then.
                    self.core.handle_timeout(now);
                }
            }
            self.core.handle_cancels(now);
        }
    }

    /// Moves one message from the core's inbox to the capacity-1 channel if it
    /// has room (G5: the inbox is the queue; the channel only hands over).
    fn deliver_incoming(&mut self, now: Instant) -> Delivery {
        if !self.core.has_incoming() {
            return Delivery::Idle;
        }
        if self.incoming.is_full() {
            let listener = self.incoming_taken.listen();
            // Re-check after listening: a take in between must not be missed.
            return if self.incoming.is_full() {
                Delivery::WaitForRoom(listener)
            } else {
                Delivery::Again
            };
        }
        let msg = match self.core.poll_incoming(now) {
            Some(Incoming::Request(r)) => {
                // No sender left: the application is gone and nobody could answer.
                let Some(commands) = self.commands_tx.upgrade() else {
                    return Delivery::Again;
                };
                let responder = Responder {
                    id: r.id.clone(),
                    commands,
                };
                IncomingMessage::Request(r, responder)
            }
            Some(Incoming::Notification(n)) => IncomingMessage::Notification(n),
            None => return Delivery::Idle,
        };
        // Only the driver sends and it checked for room, so this cannot be
        // `Full`; `Closed` means the Client is gone (its group was killed in
        // Drop) and nobody will read the message: the session is ending.
        let _ = self.incoming.try_send(msg);
        Delivery::Again
    }

    /// Waits for the next thing the driver must act on: a pipe's bytes or
    /// end, room in stdin for the held message, the exit, a command, a
    /// cancel, room for an incoming message, or the core's deadline.
    ///
    /// Every branch is cancel-safe: an `Async` pipe's read or write that
    /// returned `Pending` has moved no bytes, and a channel `recv` that did
    /// not complete has taken nothing.
    async fn next_wake(&mut self, taken: Option<EventListener>) -> Wake {
        // Re-armed only for an earlier deadline: arming registers with
        // async-io's reactor and wakes its thread, which per request (each
        // has its own deadline) would cost a context switch per round trip.
        // A later or vanished deadline leaves it armed: it fires early once
        // and `handle_timeout` ignores the early call.
        if let Some(deadline) = self.core.poll_timeout() {
            let earlier = match self.armed {
                Some(armed) => deadline < armed,
                None => true,
            };
            if earlier {
                self.timer.set_at(deadline);
                self.armed = Some(deadline);
            }
        }
        let Self {
            core,
            stdout,
            stderr,
            stderr_buf,
            stdin,
            leader,
            exited,
            commands,
            commands_open,
            wake,
            timer,
            ..
        } = self;
        // The rest of the one held message (taken from the core's queue when
        // none is held); written only as far as the pipe takes it.
        // And stdout is read straight into the framer's buffer.
        let (held, room) = core.poll_io();
        let held = held.filter(|_| stdin.is_some());
        let stdout = async {
            match stdout.as_mut() {
                Some(pipe) => Wake::Stdout(pipe.read(room.zeroed()).await),
                None => std::future::pending().await,
            }
        };
        let stderr = async {
            match stderr.as_mut() {
                Some(pipe) => Wake::Stderr(pipe.read(stderr_buf).await),
                None => std::future::pending().await,
            }
        };
        let write = async {
            match (stdin.as_mut(), held) {
                (Some(pipe), Some(bytes)) => Wake::Written(pipe.write(bytes).await),
                _ => std::future::pending().await,
            }
        };
        let exited = async {
            if *exited {
                std::future::pending().await
            } else {
                // Seen without reaping: the zombie keeps the group id ours.
                Wake::Exited(leader.exited().await)
            }
        };
        let commands = async {
            if *commands_open {
                Wake::Command(commands.recv().await.ok())
            } else {
                std::future::pending().await
            }
        };
        let cancels = async {
            // The registry holds a sender for the whole session.
            match wake.recv().await {
                Ok(()) => Wake::Cancel,
                Err(_) => std::future::pending().await,
            }
        };
        let taken = async {
            match taken {
                Some(listener) => {
                    listener.await;
                    Wake::IncomingTaken
                }
                None => std::future::pending().await,
            }
        };
        let timer = async {
            timer.await;
            Wake::Timer
        };
        // `race` picks at random among ready branches, so a flood of stdout
        // cannot starve the application's commands, nor the reverse.
        let pipes = race(stdout, race(stderr, race(write, exited)));
        let control = race(commands, race(cancels, or(timer, taken)));
        race(pipes, control).await
    }

    fn stdout_read(&mut self, now: Instant, read: std::io::Result<usize>) {
        match read {
            Ok(n) if n > 0 => {
                self.core.handle_stdout_read(now, n);
                self.drain_stdout(now);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // End of file, or a read error: either way nothing more comes.
            _ => {
                self.stdout = None;
                self.core.handle_stdout_eof(now);
            }
        }
    }

    /// Reads on while stdout has bytes ready, at most
    /// [`STDOUT_READS_PER_WAKE`] times, each read polled once: a large
    /// response is many reads, and each turn through the wait re-polls every
    /// branch.
    fn drain_stdout(&mut self, now: Instant) {
        let waker = mcp_stdio_sys::poll_once::noop_waker();
        let mut cx = Context::from_waker(&waker);
        for _ in 1..STDOUT_READS_PER_WAKE {
            let Some(pipe) = self.stdout.as_mut() else {
                return;
            };
            let polled = {
                let read = pipe.read(self.core.stdout_room().zeroed());
                std::pin::pin!(read).poll(&mut cx)
            };
            match polled {
                Poll::Ready(Ok(n)) if n > 0 => self.core.handle_stdout_read(now, n),
                Poll::Ready(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Poll::Ready(_) => {
                    self.stdout = None;
                    self.core.handle_stdout_eof(now);
                    return;
                }
                // The next wait polls it again with the driver's own waker.
                Poll::Pending => return,
            }
        }
    }

    fn stderr_read(&mut self, now: Instant, read: std::io::Result<usize>) {
        match read {
            Ok(n) if n > 0 => self.core.handle_stderr(now, &self.stderr_buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            _ => {
                self.stderr = None;
                self.core.handle_stderr_eof(now);
            }
        }
    }

    fn written(&mut self, written: std::io::Result<usize>) {
        let failure = match written {
            Ok(n) if n > 0 => {
                self.core.handle_written(n);
                return;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return,
            Ok(_) => std::io::Error::from(std::io::ErrorKind::WriteZero),
            Err(e) => e,
        };
        // The server closed its stdin or died: stop writing; stdout's end
        // and the exit will follow.
        log_relay::event(
            self.pid,
            Level::Debug,
            "writing to server stdin failed",
            Some(failure.to_string()),
        );
        self.core.handle_write_failed();
        self.stdin = None;
    }

    /// Drains every core output; returns the record once the session is over.
    fn pump(&mut self) -> Option<SessionRecord> {
        while let Some(action) = self.core.poll_action() {
            match action {
                // Dropping stdin closes the pipe, mid-message if need be:
                // the server sees EOF.
                DriverAction::CloseStdin => self.stdin = None,
                DriverAction::LogStderrLine(line) => forward_server_stderr(self.pid, line),
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
                    return Some(*record);
                }
                _ => {}
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// G6: a `request` future dropped before the driver even took its
    /// command (it never ran: the driver runs on this thread) is a real
    /// cancel: once the driver sends the request, `notifications/cancelled`
    /// for its id follows. `cat` echoes both back as server→client messages.
    #[test]
    fn g6_request_dropped_before_the_driver_took_it_is_cancelled_on_the_server() {
        let (client, driver) =
            Client::start(&CommandSpec::new("cat"), ClientOptions::default()).expect("spawn cat");
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
                "async-std: cancel of a request dropped before it was sent echoed in {:?}",
                t.elapsed()
            );
            let _ = client.commands.send(Command::Kill).await;
            std::future::pending::<SessionRecord>().await
        };
        let record = async_std::task::block_on(or(driver.run(), script));
        assert_eq!(record.metrics.cancels_sent, 1);
    }

    /// G6: a cancel issued before the next request reaches the server
    /// before it, in every round (the driver, on this thread, sees both in
    /// one turn). `cat` echoes what it receives, in order.
    #[test]
    fn g6_cancel_then_request_reach_the_wire_in_that_order() {
        let (client, driver) =
            Client::start(&CommandSpec::new("cat"), ClientOptions::default()).expect("spawn cat");
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
            eprintln!("async-std: cancel before the next request in 8 rounds: {order:?}");
            let _ = client.commands.send(Command::Kill).await;
            std::future::pending::<SessionRecord>().await
        };
        async_std::task::block_on(or(driver.run(), script));
    }

    /// G6: a cancel issued while the command queue is full still reaches the
    /// server. `cat` is the server: whatever reaches its stdin comes back as a
    /// server→client message. The driver runs on this thread, so while this
    /// code fills the queue it cannot drain it.
    #[test]
    fn g6_cancel_while_the_command_queue_is_full_reaches_the_server() {
        let (client, driver) =
            Client::start(&CommandSpec::new("cat"), ClientOptions::default()).expect("spawn cat");
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
                "async-std: cancel with {filled} commands queued reached the server in {:?}",
                t.elapsed()
            );
            let _ = client.commands.send(Command::Kill).await;
            std::future::pending::<SessionRecord>().await
        };
        let record = async_std::task::block_on(or(driver.run(), script));
        assert!(record.metrics.cancels_sent >= 1);
    }
}
