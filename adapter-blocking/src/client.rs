//! `Client`: spawn an MCP server and drive its session from one I/O thread.
//!
//! # Threads and queues
//!
//! - **The I/O thread** (one per session, named `mcp-io-<pid>`) owns
//!   the core [`HostSession`], the [`Child`], the three pipes (non-blocking)
//!   and a [`mio::Poll`]. It reads stdout and stderr whenever they are
//!   readable, whatever the application threads do (G1), writes stdin only
//!   when it is writable, so a server that does not read never stalls the
//!   reads, and runs the core's timers as the poll timeout.
//! - **Application threads** talk to it through a bounded command queue
//!   ([`COMMAND_QUEUE`] commands) and wake it with a [`mio::Waker`]. Each
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
//! the poll); elsewhere `try_wait` runs after every wake-up and on a
//! [`EXIT_POLL_TICK`] while the process is alive.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mcp_stdio_core::client::{ClientEvent, ClientMetrics, Incoming, RequestFailure, SendError};
use mcp_stdio_core::handshake::{check_initialize_result, initialize_params, InitializeResult};
use mcp_stdio_core::host::{
    ClientOptions, HostAction, HostSession, InitializeError, RequestError, SessionRecord,
};
use mcp_stdio_core::message::{ErrorObject, Id, Notification, RawValue, Request};
use mcp_stdio_core::process::Signal;
use mcp_stdio_core::CommandSpec;
use mio::unix::pipe;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};

use crate::os;

/// Commands queued from application threads to the I/O thread.
const COMMAND_QUEUE: usize = 256;
/// Commands the I/O thread takes per turn before it reads and writes again.
const COMMANDS_PER_TURN: usize = 64;
/// Bytes read from stdout per read call.
const STDOUT_READ: usize = 64 * 1024;
/// Bytes read from stderr per read call.
const STDERR_READ: usize = 16 * 1024;
/// Reads of one stream per turn (at most 1 MiB of stdout) before the other
/// sources get their turn; the stream stays marked readable, so the next
/// turn does not wait for a new event.
const READS_PER_TURN: usize = 16;
/// Where no pidfd exists, how often the child's exit is checked while it lives.
const EXIT_POLL_TICK: Duration = Duration::from_millis(50);

const STDIN: Token = Token(0);
const STDOUT: Token = Token(1);
const STDERR: Token = Token(2);
const CHILD_EXIT: Token = Token(3);
const WAKER: Token = Token(4);

type Outcome = Result<Box<RawValue>, RequestError>;

enum Command {
    Request {
        method: String,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
        reply: SyncSender<Result<(Id, Receiver<Outcome>), RequestError>>,
    },
    Notify {
        method: String,
        params: Option<Box<RawValue>>,
        reply: SyncSender<Result<(), RequestError>>,
    },
    Cancel {
        id: Id,
        reason: String,
    },
    Respond {
        id: Id,
        result: Result<Box<RawValue>, ErrorObject>,
        reply: SyncSender<Result<(), RequestError>>,
    },
    Metrics {
        reply: SyncSender<ClientMetrics>,
    },
    Shutdown,
    Kill,
}

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

    /// Queues `cmd` if there is room, without waiting.
    fn try_send(&self, cmd: Command) {
        if self.tx.try_send(cmd).is_ok() {
            self.wake();
        }
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
    commands: Commands,
    done: bool,
}

impl PendingRequest {
    /// The request's id.
    pub fn id(&self) -> &Id {
        &self.id
    }

    /// A handle that cancels this request from another thread.
    pub fn cancel_handle(&self) -> CancelHandle {
        CancelHandle {
            id: self.id.clone(),
            commands: self.commands.clone(),
        }
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
            // Best effort without blocking: if the command queue is full the
            // request still ends at its deadline, where a cancel is sent.
            self.commands.try_send(Command::Cancel {
                id: self.id.clone(),
                reason: "request abandoned by the client".to_owned(),
            });
        }
    }
}

/// Cancels one request from any thread.
#[derive(Debug, Clone)]
pub struct CancelHandle {
    id: Id,
    commands: Commands,
}

impl CancelHandle {
    /// The request's id.
    pub fn id(&self) -> &Id {
        &self.id
    }

    /// Cancels the request (no-op if it already completed). Never blocks: if
    /// the command queue is full the request still ends at its deadline.
    pub fn cancel(&self, reason: &str) {
        self.commands.try_send(Command::Cancel {
            id: self.id.clone(),
            reason: reason.to_owned(),
        });
    }
}

/// A spawned MCP server and its session, for threads without an async runtime.
///
/// One I/O thread owns the core [`HostSession`]: it reads the server's
/// stdout and stderr continuously, whatever the application threads do
/// (G1), writes stdin without ever blocking those reads, applies deadlines
/// and runs the shutdown sequence (G11). Application threads talk to it
/// through a bounded command queue; every method may be called from any
/// thread (`Client` is `Send + Sync`).
///
/// Dropping a `Client` without [`shutdown`](Self::shutdown) kills the
/// server's process group at once (one `killpg` system call); the I/O thread
/// then observes the exit, reaps the child and ends by itself. `Drop` never
/// waits for it.
#[derive(Debug)]
pub struct Client {
    commands: Commands,
    shared: Arc<Shared>,
    io_thread: Option<JoinHandle<Option<SessionRecord>>>,
    pid: u32,
    client_info: mcp_stdio_core::handshake::Implementation,
    request_timeout: Option<Duration>,
}

impl Client {
    /// Spawns `command` (no shell; its own process group) with stdin, stdout
    /// and stderr piped, and starts its I/O thread.
    pub fn spawn(command: &CommandSpec, options: ClientOptions) -> io::Result<Self> {
        let client_info = options.client_info.clone();
        let request_timeout = options.config.get_session().get_default_timeout();
        let (driver, commands, shared) = Driver::spawn(command, options)?;
        let pid = driver.pid;
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
            commands,
            shared,
            io_thread: Some(io_thread),
            pid,
            client_info,
            request_timeout,
        })
    }

    /// The server's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The MCP handshake: `initialize` with the latest protocol version, the
    /// server's answer checked (version negotiation), then
    /// `notifications/initialized`. Notifications the server sends before its
    /// answer are kept for [`next_incoming`](Self::next_incoming).
    pub fn initialize(&self) -> Result<InitializeResult, InitializeError> {
        let params = initialize_params(&self.client_info, None);
        let result = self.request_with_timeout("initialize", Some(params), self.request_timeout)?;
        let init = check_initialize_result(&result)?;
        self.notify("notifications/initialized", None)?;
        Ok(init)
    }

    /// Sends a request with the configured default timeout and blocks until
    /// its result.
    pub fn request(&self, method: &str, params: Option<Box<RawValue>>) -> Outcome {
        self.start_request(method, params, self.request_timeout)?
            .wait()
    }

    /// Sends a request with its own timeout (`None`: no deadline) and blocks
    /// until its result.
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
        let (reply, rx) = reply_channel();
        self.commands.send(Command::Request {
            method: method.to_owned(),
            params,
            timeout,
            reply,
        })?;
        let (id, done) = rx.recv().unwrap_or(Err(SendError::Closed.into()))?;
        Ok(PendingRequest {
            id,
            rx: done,
            commands: self.commands.clone(),
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

    /// Cancels a request by id (see [`PendingRequest::cancel`]). Never blocks.
    pub fn cancel(&self, id: &Id, reason: &str) {
        self.commands.try_send(Command::Cancel {
            id: id.clone(),
            reason: reason.to_owned(),
        });
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

impl Drop for Client {
    fn drop(&mut self) {
        if self.io_thread.is_some() && !self.shared.finished.load(Ordering::Acquire) {
            // Synchronous: one syscall. The I/O thread sees the flag, observes
            // the exit, reaps the child and ends; nobody joins it.
            os::signal_group(self.pid, Signal::Kill);
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
    fn new(child: &mut Child, pid: u32) -> io::Result<Self> {
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
        let exit_fd = exit_fd(pid).and_then(|fd| {
            match registry.register(&mut SourceFd(&fd.as_raw_fd()), CHILD_EXIT, Interest::READABLE)
            {
                Ok(()) => Some(fd),
                Err(e) => {
                    tracing::debug!(pid, error = %e, "pidfd not pollable; polling the exit on a tick");
                    None
                }
            }
        });
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
        if let Some(mut s) = self.stdin.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        self.stdin_ready = false;
    }

    fn close_stdout(&mut self) {
        if let Some(mut r) = self.stdout.take() {
            let _ = self.poll.registry().deregister(&mut r);
        }
        self.stdout_ready = false;
    }

    fn close_stderr(&mut self) {
        if let Some(mut r) = self.stderr.take() {
            let _ = self.poll.registry().deregister(&mut r);
        }
        self.stderr_ready = false;
    }

    fn close_exit_fd(&mut self) {
        if let Some(fd) = self.exit_fd.take() {
            let _ = self
                .poll
                .registry()
                .deregister(&mut SourceFd(&fd.as_raw_fd()));
        }
    }
}

/// The pidfd for the child's exit, unless a test asked for the fallback.
fn exit_fd(pid: u32) -> Option<OwnedFd> {
    #[cfg(test)]
    if tests::NO_PIDFD.with(std::cell::Cell::get) {
        return None;
    }
    os::exit_fd(pid)
}

/// What one read of an output pipe gave.
enum Read1 {
    Data(usize),
    /// End-of-file or a read error: the stream is over.
    End,
    /// Nothing now (`WouldBlock`, a spurious event, or no pipe).
    Idle,
}

fn read_once(pipe: &mut Option<pipe::Receiver>, ready: &mut bool, buf: &mut [u8]) -> Read1 {
    let Some(r) = pipe.as_mut() else {
        *ready = false;
        return Read1::Idle;
    };
    loop {
        return match r.read(buf) {
            Ok(0) => Read1::End,
            Ok(n) => Read1::Data(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                *ready = false;
                Read1::Idle
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::debug!(error = %e, "reading a server pipe failed; treating it as EOF");
                Read1::End
            }
        };
    }
}

/// The I/O thread's state: it owns the session, the child and the pipes.
struct Driver {
    host: HostSession,
    options: ClientOptions,
    child: Child,
    pid: u32,
    io: Io,
    commands: Receiver<Command>,
    /// The last turn stopped at `COMMANDS_PER_TURN` with commands left.
    commands_more: bool,
    commands_tx: Commands,
    shared: Arc<Shared>,
    waiters: HashMap<Id, SyncSender<Outcome>>,
    /// At most one message taken from the core waits here, so the core's
    /// outgoing limit stays the bound (backpressure reaches `request`).
    write: Option<Vec<u8>>,
    write_offset: usize,
    exited: bool,
    kill_requested: bool,
    out_buf: Vec<u8>,
    err_buf: Vec<u8>,
}

impl Driver {
    /// Spawns the child and sets up everything the I/O thread will own.
    fn spawn(
        command: &CommandSpec,
        options: ClientOptions,
    ) -> io::Result<(Self, Commands, Arc<Shared>)> {
        // Tied to this process (G11): forked on the process-wide spawner thread.
        let mut child = mcp_stdio_sys::spawn_tied(command, |mut cmd| {
            cmd.stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
        })?;
        let pid = child.id();
        tracing::debug!(pid, command = %command.display(), "spawned MCP server");
        let io = match Io::new(&mut child, pid) {
            Ok(io) => io,
            Err(e) => {
                // No session yet (and no stderr grant taken): just end the child.
                os::signal_group(pid, Signal::Kill);
                // SIGKILL was sent, so this returns promptly.
                let _ = child.wait();
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
        let mut host = options.new_host_session();
        host.handle_spawned(Instant::now());
        let driver = Self {
            host,
            options,
            child,
            pid,
            io,
            commands: commands_rx,
            commands_more: false,
            commands_tx: commands.clone(),
            shared: shared.clone(),
            waiters: HashMap::new(),
            write: None,
            write_offset: 0,
            exited: false,
            kill_requested: false,
            out_buf: vec![0; STDOUT_READ],
            err_buf: vec![0; STDERR_READ],
        };
        Ok((driver, commands, shared))
    }

    fn run(mut self) -> SessionRecord {
        let mut events = Events::with_capacity(16);
        loop {
            // Inputs: commands, the exit, stdout, stderr, the clock.
            self.take_commands();
            if !self.kill_requested && self.shared.dropped.load(Ordering::Acquire) {
                // The Client was dropped and its group killed: fail what waits.
                self.kill_requested = true;
                self.host.kill(Instant::now());
            }
            // The exit first: when it and stdout's EOF arrive together, the
            // record then says the server exited by itself, which it did.
            self.observe_exit();
            self.read_stdout();
            self.read_stderr();
            let now = Instant::now();
            if self.host.poll_timeout().is_some_and(|d| d <= now) {
                self.host.handle_timeout(now);
            }
            // Outputs, in the core's order.
            if let Some(record) = self.pump() {
                return self.finish(record);
            }
            self.deliver_incoming();
            // Wait for readiness, a command, the exit or a deadline.
            let timeout = self.poll_timeout();
            if let Err(e) = self.io.poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!(pid = self.pid, error = %e, "polling the server's pipes failed");
                    // Do not spin on a persistent error; deadlines still run.
                    std::thread::sleep(EXIT_POLL_TICK);
                }
                continue;
            }
            for event in events.iter() {
                // Spurious events are harmless: the next read or write says
                // `WouldBlock` and the flag drops again.
                match event.token() {
                    STDIN => self.io.stdin_ready = true,
                    STDOUT => self.io.stdout_ready = true,
                    STDERR => self.io.stderr_ready = true,
                    // The exit and commands are checked every turn.
                    _ => {}
                }
            }
        }
    }

    fn take_commands(&mut self) {
        self.commands_more = false;
        for _ in 0..COMMANDS_PER_TURN {
            match self.commands.try_recv() {
                Ok(cmd) => self.command(cmd),
                // Disconnected cannot happen: this thread holds a sender.
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return,
            }
        }
        self.commands_more = true;
    }

    fn command(&mut self, cmd: Command) {
        let now = Instant::now();
        match cmd {
            Command::Request {
                method,
                params,
                timeout,
                reply,
            } => match self.host.request(now, &method, params.as_deref(), timeout) {
                Ok(id) => {
                    let (tx, rx) = reply_channel();
                    self.waiters.insert(id.clone(), tx);
                    if reply.send(Ok((id.clone(), rx))).is_err() {
                        // The caller gave up before learning the id: cancel.
                        self.waiters.remove(&id);
                        let _ = self
                            .host
                            .cancel(&id, Some("request abandoned by the client"));
                    }
                }
                Err(e) => {
                    let _ = reply.send(Err(e.into()));
                }
            },
            Command::Notify {
                method,
                params,
                reply,
            } => {
                let r = self.host.notify(&method, params.as_deref());
                let _ = reply.send(r.map_err(Into::into));
            }
            Command::Cancel { id, reason } => {
                let _ = self.host.cancel(&id, Some(&reason));
            }
            Command::Respond { id, result, reply } => {
                let r = self.host.respond(&id, result.as_deref());
                let _ = reply.send(r.map_err(Into::into));
            }
            Command::Metrics { reply } => {
                let _ = reply.send(self.host.metrics());
            }
            Command::Shutdown => self.host.shutdown(now),
            Command::Kill => self.host.kill(now),
        }
    }

    fn read_stdout(&mut self) {
        for _ in 0..READS_PER_TURN {
            if !self.io.stdout_ready {
                return;
            }
            match read_once(
                &mut self.io.stdout,
                &mut self.io.stdout_ready,
                &mut self.out_buf,
            ) {
                Read1::Data(n) => self.host.handle_stdout(Instant::now(), &self.out_buf[..n]),
                Read1::End => {
                    self.io.close_stdout();
                    self.host.handle_stdout_eof(Instant::now());
                }
                Read1::Idle => return,
            }
        }
    }

    fn read_stderr(&mut self) {
        for _ in 0..READS_PER_TURN {
            if !self.io.stderr_ready {
                return;
            }
            match read_once(
                &mut self.io.stderr,
                &mut self.io.stderr_ready,
                &mut self.err_buf,
            ) {
                Read1::Data(n) => self.host.handle_stderr(Instant::now(), &self.err_buf[..n]),
                Read1::End => {
                    self.io.close_stderr();
                    self.host.handle_stderr_eof(Instant::now());
                }
                Read1::Idle => return,
            }
        }
    }

    /// `try_wait` after every wake-up: one `waitpid(WNOHANG)`.
    fn observe_exit(&mut self) {
        if self.exited {
            return;
        }
        match self.child.try_wait() {
            Ok(Some(status)) => {
                self.exited = true;
                self.io.close_exit_fd();
                self.host
                    .handle_exited(Instant::now(), os::exit_status(status));
            }
            Ok(None) => {}
            Err(e) => {
                // No status can ever be observed: the supervisor's deadlines
                // end the session.
                self.exited = true;
                self.io.close_exit_fd();
                tracing::warn!(pid = self.pid, error = %e, "waiting for the server failed");
            }
        }
    }

    /// Writes the waiting message until `WouldBlock`, taking the next one from
    /// the core only when it is fully written.
    fn write_stdin(&mut self) {
        loop {
            if self.write.is_none() {
                match self.host.poll_transmit() {
                    Some(bytes) => {
                        self.write = Some(bytes);
                        self.write_offset = 0;
                    }
                    None => return,
                }
            }
            let (Some(stdin), Some(bytes)) = (self.io.stdin.as_mut(), self.write.as_ref()) else {
                // The pipe is gone (the server closed its stdin): nobody will
                // write these bytes; stdout EOF and the exit will follow.
                self.write = None;
                continue;
            };
            if !self.io.stdin_ready {
                return;
            }
            match stdin.write(&bytes[self.write_offset..]) {
                Ok(n) if n > 0 => {
                    self.write_offset += n;
                    if self.write_offset >= bytes.len() {
                        self.write = None;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.io.stdin_ready = false;
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => {
                    let error = r.err().unwrap_or_else(|| io::ErrorKind::WriteZero.into());
                    tracing::debug!(pid = self.pid, %error, "writing to server stdin failed");
                    self.io.close_stdin();
                    self.write = None;
                }
            }
        }
    }

    /// Drains every core output; returns the record once the session is over.
    fn pump(&mut self) -> Option<SessionRecord> {
        self.write_stdin();
        self.complete_waiters();
        while let Some(line) = self.host.poll_stderr_line() {
            tracing::info!(target: "mcp_stdio::server_stderr", pid = self.pid, "{line}");
        }
        let mut record = None;
        while let Some(action) = self.host.poll_action() {
            match action {
                HostAction::CloseStdin => {
                    self.io.close_stdin();
                    self.write = None;
                }
                HostAction::SignalGroup(sig) => os::signal_group(self.pid, sig),
                HostAction::AbandonReaders => {
                    tracing::warn!(
                        pid = self.pid,
                        "server pipes still open past the drain deadline; abandoning readers"
                    );
                    self.io.close_stdout();
                    self.io.close_stderr();
                }
                HostAction::Finished(r) => record = Some(*r),
                _ => {}
            }
        }
        if record.is_some() {
            // Completions for everything still waiting were emitted by the
            // session's close; anything left gets SessionClosed.
            self.complete_waiters();
            for (_, w) in self.waiters.drain() {
                let _ = w.send(Err(RequestFailure::SessionClosed.into()));
            }
        }
        record
    }

    fn complete_waiters(&mut self) {
        while let Some(ev) = self.host.poll_event() {
            if let ClientEvent::Completed { id, outcome } = ev {
                if let Some(w) = self.waiters.remove(&id) {
                    // Capacity 1, one message: never blocks.
                    let _ = w.send(outcome.map_err(Into::into));
                }
            }
        }
    }

    /// Moves one message from the core's inbox to the slot, if the slot is free.
    fn deliver_incoming(&mut self) {
        if self.host.session().inbox_len() == 0 {
            return;
        }
        let mut slot = self.shared.slot();
        if slot.message.is_some() {
            return;
        }
        slot.message = match self.host.poll_incoming(Instant::now()) {
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
    fn poll_timeout(&self) -> Option<Duration> {
        let busy = self.commands_more
            || self.io.stdout_ready
            || self.io.stderr_ready
            || (self.io.stdin_ready && self.write.is_some());
        if busy {
            return Some(Duration::ZERO);
        }
        let now = Instant::now();
        let mut timeout = self
            .host
            .poll_timeout()
            .map(|d| d.saturating_duration_since(now));
        if !self.exited && self.io.exit_fd.is_none() {
            timeout = Some(timeout.map_or(EXIT_POLL_TICK, |t| t.min(EXIT_POLL_TICK)));
        }
        timeout
    }

    /// The session cannot start (no I/O thread): kill and reap the child,
    /// and end the session so the stderr grant goes back to its pool.
    fn abandon(mut self) {
        let now = Instant::now();
        self.host.kill(now);
        os::signal_group(self.pid, Signal::Kill);
        // SIGKILL was sent, so this returns promptly.
        if let Ok(status) = self.child.wait() {
            self.host.handle_exited(now, os::exit_status(status));
        }
        self.host.handle_stdout_eof(now);
        self.host.handle_stderr_eof(now);
        while let Some(action) = self.host.poll_action() {
            if matches!(action, HostAction::Finished(_)) {
                self.options.release_grant(&mut self.host);
            }
        }
    }

    fn finish(mut self, record: SessionRecord) -> SessionRecord {
        self.options.release_grant(&mut self.host);
        // Supervision gave up without an exit (no exit within the drain
        // deadline after SIGKILL: uninterruptible sleep). Reap it whenever it
        // dies, so it does not stay a zombie.
        if !self.exited && !matches!(self.child.try_wait(), Ok(Some(_))) {
            let pid = self.pid;
            let mut child = self.child;
            let reaper = std::thread::Builder::new()
                .name(format!("mcp-reap-{pid}"))
                .spawn(move || {
                    let _ = child.wait();
                });
            if let Err(e) = reaper {
                tracing::warn!(pid, error = %e, "no thread to reap the server; it stays a zombie");
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

    /// A session that cannot start gives its stderr grant back.
    #[test]
    fn abandoning_a_session_that_cannot_start_releases_its_grant() {
        use mcp_stdio_core::capture::{PoolConfig, SharedRetentionPool};
        let pool = SharedRetentionPool::new(PoolConfig::default().limit(1 << 20));
        let options = ClientOptions {
            stderr_pool: Some(pool.clone()),
            ..ClientOptions::default()
        };
        let (driver, _commands, _shared) =
            Driver::spawn(&CommandSpec::new("cat"), options).expect("spawn cat");
        let pid = driver.pid;
        assert_eq!(pool.stats().outstanding, 1);
        driver.abandon();
        assert_eq!((pool.stats().outstanding, pool.stats().in_use), (0, 0));
        // Reaped: no zombie left behind.
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    /// `cat` echoes every message back: our request comes back as a request
    /// from the "server", our answer to it comes back as the response.
    #[test]
    fn loopback_through_cat_and_exit_seen_without_a_pidfd() {
        NO_PIDFD.with(|f| f.set(true));
        let mut options = ClientOptions::default();
        options
            .config
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
            mcp_stdio_core::process::EndedBy::ExitedAfterStdinClose
        );
        assert!(took < Duration::from_secs(1), "{took:?}");
    }
}
