//! `Client`: spawn an MCP server and drive its session on tokio.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use mcp_stdio_core::client::{ClientEvent, ClientMetrics, Incoming, RequestFailure, SendError};
use mcp_stdio_core::handshake::{check_initialize_result, initialize_params, InitializeResult};
use mcp_stdio_core::host::{
    ClientOptions, HostAction, HostSession, InitializeError, RequestError, SessionRecord,
};
use mcp_stdio_core::message::{ErrorObject, Id, Notification, RawValue, Request};
use mcp_stdio_core::CommandSpec;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::os;

/// Commands queued from the application to the driver task.
const COMMAND_QUEUE: usize = 256;
/// Bytes read from stdout per read call.
const STDOUT_READ: usize = 64 * 1024;
/// Bytes read from stderr per read call.
const STDERR_READ: usize = 16 * 1024;

type Outcome = Result<Box<RawValue>, RequestError>;

enum Command {
    Request {
        method: String,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
        reply: oneshot::Sender<Result<(Id, oneshot::Receiver<Outcome>), RequestError>>,
    },
    Notify {
        method: String,
        params: Option<Box<RawValue>>,
        reply: oneshot::Sender<Result<(), RequestError>>,
    },
    Cancel {
        id: Id,
        reason: String,
    },
    Respond {
        id: Id,
        result: Result<Box<RawValue>, ErrorObject>,
        reply: oneshot::Sender<Result<(), RequestError>>,
    },
    Metrics {
        reply: oneshot::Sender<ClientMetrics>,
    },
    Shutdown,
    Kill,
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
    commands: mpsc::Sender<Command>,
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
        let (reply, rx) = oneshot::channel();
        let cmd = Command::Respond {
            id: self.id,
            result,
            reply,
        };
        if self.commands.send(cmd).await.is_err() {
            return Err(SendError::Closed.into());
        }
        rx.await.unwrap_or(Err(SendError::Closed.into()))
    }
}

/// A request in flight. Await it for the result; [`cancel`](Self::cancel)
/// it, or drop it, to cancel it on the server (G6): a UI timeout that drops
/// the future is a real cancel, not a forgotten request.
#[derive(Debug)]
pub struct PendingRequest {
    id: Id,
    rx: oneshot::Receiver<Outcome>,
    commands: mpsc::Sender<Command>,
    done: bool,
}

impl PendingRequest {
    /// The request's id.
    pub fn id(&self) -> &Id {
        &self.id
    }

    /// A handle that cancels this request from elsewhere.
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
}

impl Future for PendingRequest {
    type Output = Outcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        match Pin::new(&mut self.rx).poll(cx) {
            Poll::Ready(r) => {
                self.done = true;
                Poll::Ready(r.unwrap_or(Err(RequestFailure::SessionClosed.into())))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for PendingRequest {
    fn drop(&mut self) {
        if !self.done {
            // Best effort without blocking: if the command queue is full the
            // request still ends at its deadline, where a cancel is sent.
            let _ = self.commands.try_send(Command::Cancel {
                id: self.id.clone(),
                reason: "request abandoned by the client".to_owned(),
            });
        }
    }
}

/// Cancels one request from any task.
#[derive(Debug, Clone)]
pub struct CancelHandle {
    id: Id,
    commands: mpsc::Sender<Command>,
}

impl CancelHandle {
    /// The request's id.
    pub fn id(&self) -> &Id {
        &self.id
    }

    /// Cancels the request (no-op if it already completed).
    pub fn cancel(&self, reason: &str) {
        let _ = self.commands.try_send(Command::Cancel {
            id: self.id.clone(),
            reason: reason.to_owned(),
        });
    }
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Request { .. } => "Request",
            Self::Notify { .. } => "Notify",
            Self::Cancel { .. } => "Cancel",
            Self::Respond { .. } => "Respond",
            Self::Metrics { .. } => "Metrics",
            Self::Shutdown => "Shutdown",
            Self::Kill => "Kill",
        })
    }
}

/// A spawned MCP server and its session.
///
/// One driver task owns the core [`HostSession`]: it reads the server's
/// stdout and stderr continuously, whatever the application does (G1),
/// writes stdin without ever blocking those reads, applies deadlines and
/// runs the shutdown sequence (G11). The application talks to it through a
/// bounded command queue.
///
/// Dropping a `Client` without [`shutdown`](Self::shutdown) kills the
/// server's process group at once (a `killpg` system call, never a task
/// spawned in `Drop`); the driver then reaps it.
#[derive(Debug)]
pub struct Client {
    commands: mpsc::Sender<Command>,
    incoming: tokio::sync::Mutex<mpsc::Receiver<IncomingMessage>>,
    driver: Option<JoinHandle<SessionRecord>>,
    pid: u32,
    finished: Arc<AtomicBool>,
    client_info: mcp_stdio_core::handshake::Implementation,
    request_timeout: Option<Duration>,
}

impl Client {
    /// Spawns `command` (no shell; its own process group) with stdin, stdout
    /// and stderr piped, and starts the driver task. Must be called inside a
    /// tokio runtime.
    pub fn spawn(command: &CommandSpec, options: ClientOptions) -> std::io::Result<Self> {
        // Tied to this process (G11); forked on the spawner thread, in our runtime.
        let runtime = tokio::runtime::Handle::current();
        let mut child = mcp_stdio_sys::spawn_tied(command, move |cmd| {
            let _entered = runtime.enter();
            tokio::process::Command::from(cmd)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
        })?;
        let pid = child.id().unwrap_or(0);
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let (commands, command_rx) = mpsc::channel(COMMAND_QUEUE);
        // Capacity 1: the core's bounded inbox is the real queue (G5).
        let (incoming_tx, incoming) = mpsc::channel(1);
        let finished = Arc::new(AtomicBool::new(false));
        let mut host = options.new_host_session();
        host.handle_spawned(Instant::now());
        tracing::debug!(pid, command = %command.display(), "spawned MCP server");
        let driver = Driver {
            host,
            options: options.clone(),
            child,
            pid,
            stdin,
            stdout,
            stderr,
            commands: command_rx,
            commands_tx: commands.clone(),
            incoming: incoming_tx,
            waiters: HashMap::new(),
            write: VecDeque::new(),
            write_offset: 0,
            exited: false,
            finished: finished.clone(),
        };
        let request_timeout = options.config.get_session().get_default_timeout();
        Ok(Self {
            commands,
            incoming: tokio::sync::Mutex::new(incoming),
            driver: Some(tokio::spawn(driver.run())),
            pid,
            finished,
            client_info: options.client_info,
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
    pub async fn initialize(&self) -> Result<InitializeResult, InitializeError> {
        let params = initialize_params(&self.client_info, None);
        let result = self
            .request_with_timeout("initialize", Some(params), self.request_timeout)
            .await?;
        let init = check_initialize_result(&result)?;
        self.notify("notifications/initialized", None).await?;
        Ok(init)
    }

    /// Sends a request with the configured default timeout and waits for its result.
    pub async fn request(&self, method: &str, params: Option<Box<RawValue>>) -> Outcome {
        self.start_request(method, params, self.request_timeout)
            .await?
            .await
    }

    /// Sends a request with its own timeout (`None`: no deadline) and waits.
    pub async fn request_with_timeout(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
    ) -> Outcome {
        self.start_request(method, params, timeout).await?.await
    }

    /// Sends a request and returns it in flight, to be awaited or cancelled.
    pub async fn start_request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
    ) -> Result<PendingRequest, RequestError> {
        let (reply, rx) = oneshot::channel();
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
        let (id, done) = rx.await.unwrap_or(Err(SendError::Closed.into()))?;
        Ok(PendingRequest {
            id,
            rx: done,
            commands: self.commands.clone(),
            done: false,
        })
    }

    /// Sends a notification.
    pub async fn notify(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> Result<(), RequestError> {
        let (reply, rx) = oneshot::channel();
        let cmd = Command::Notify {
            method: method.to_owned(),
            params,
            reply,
        };
        self.commands
            .send(cmd)
            .await
            .map_err(|_| RequestError::from(SendError::Closed))?;
        rx.await.unwrap_or(Err(SendError::Closed.into()))
    }

    /// Cancels a request by id (see [`PendingRequest::cancel`]).
    pub fn cancel(&self, id: &Id, reason: &str) {
        let _ = self.commands.try_send(Command::Cancel {
            id: id.clone(),
            reason: reason.to_owned(),
        });
    }

    /// The next server→client request or notification; `None` once the
    /// session is over. Messages wait in the core's bounded inbox meanwhile;
    /// when it is full its overload policy applies and the reader goes on (G5).
    pub async fn next_incoming(&self) -> Option<IncomingMessage> {
        self.incoming.lock().await.recv().await
    }

    /// The session's counters now; `None` once the session is over.
    pub async fn metrics(&self) -> Option<ClientMetrics> {
        let (reply, rx) = oneshot::channel();
        self.commands.send(Command::Metrics { reply }).await.ok()?;
        rx.await.ok()
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
        // The handle stays in `self` while awaiting: if this future is
        // dropped (a timeout around `shutdown`), `Drop` still kills the group.
        let driver = self
            .driver
            .as_mut()
            .expect("the driver is awaited only once");
        let result = driver.await;
        self.driver = None;
        match result {
            Ok(record) => record,
            // The driver never panics on input; a panic is a bug, surfaced as one.
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if self.driver.is_some() && !self.finished.load(Ordering::Acquire) {
            // Synchronous: one syscall. The driver sees the closed command
            // queue, observes the exit and reaps the child.
            os::signal_group(self.pid, mcp_stdio_core::process::Signal::Kill);
        }
    }
}

/// What woke the driver.
enum Wake {
    Stdout(std::io::Result<usize>),
    Stderr(std::io::Result<usize>),
    Exited(std::io::Result<std::process::ExitStatus>),
    Written(std::io::Result<usize>),
    Command(Option<Command>),
    Timer,
    Nothing,
}

struct Driver {
    host: HostSession,
    options: ClientOptions,
    child: Child,
    pid: u32,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
    commands: mpsc::Receiver<Command>,
    commands_tx: mpsc::Sender<Command>,
    incoming: mpsc::Sender<IncomingMessage>,
    waiters: HashMap<Id, oneshot::Sender<Outcome>>,
    /// At most one message taken from the core waits here, so the core's
    /// outgoing limit stays the bound (backpressure reaches `request`).
    write: VecDeque<Vec<u8>>,
    write_offset: usize,
    exited: bool,
    finished: Arc<AtomicBool>,
}

impl Driver {
    async fn run(mut self) -> SessionRecord {
        let mut out_buf = vec![0u8; STDOUT_READ];
        let mut err_buf = vec![0u8; STDERR_READ];
        let mut commands_open = true;
        loop {
            if let Some(record) = self.pump() {
                self.finished.store(true, Ordering::Release);
                self.options.release_grant(&mut self.host);
                return record;
            }
            let deadline = self.host.poll_timeout().map(tokio::time::Instant::from_std);
            let has_incoming = self.host.session().inbox_len() > 0;
            let stdin_ready = self.stdin.is_some() && !self.write.is_empty();
            let wake = tokio::select! {
                // Readers first: nothing the application does pauses them (G1).
                r = read_opt(&mut self.stdout, &mut out_buf) => Wake::Stdout(r),
                r = read_opt(&mut self.stderr, &mut err_buf) => Wake::Stderr(r),
                status = self.child.wait(), if !self.exited => Wake::Exited(status),
                r = write_front(&mut self.stdin, &self.write, self.write_offset), if stdin_ready => Wake::Written(r),
                permit = self.incoming.reserve(), if has_incoming => {
                    if let Ok(permit) = permit {
                        match self.host.poll_incoming(Instant::now()) {
                            Some(Incoming::Request(r)) => {
                                let responder = Responder { id: r.id.clone(), commands: self.commands_tx.clone() };
                                permit.send(IncomingMessage::Request(r, responder));
                            }
                            Some(Incoming::Notification(n)) => permit.send(IncomingMessage::Notification(n)),
                            None => {}
                        }
                    }
                    Wake::Nothing
                }
                cmd = self.commands.recv(), if commands_open => Wake::Command(cmd),
                () = sleep_until_opt(deadline) => Wake::Timer,
            };
            let now = Instant::now();
            match wake {
                Wake::Stdout(Ok(n)) if n > 0 => self.host.handle_stdout(now, &out_buf[..n]),
                Wake::Stdout(_) => {
                    self.stdout = None;
                    self.host.handle_stdout_eof(now);
                }
                Wake::Stderr(Ok(n)) if n > 0 => self.host.handle_stderr(now, &err_buf[..n]),
                Wake::Stderr(_) => {
                    self.stderr = None;
                    self.host.handle_stderr_eof(now);
                }
                Wake::Exited(status) => {
                    self.exited = true;
                    match status {
                        Ok(s) => self.host.handle_exited(now, os::exit_status(s)),
                        // wait() failing means no status can ever be observed:
                        // the supervisor's deadlines end the session.
                        Err(e) => {
                            tracing::warn!(pid = self.pid, error = %e, "waiting for the server failed")
                        }
                    }
                }
                Wake::Written(Ok(n)) => {
                    self.write_offset += n;
                    if self
                        .write
                        .front()
                        .is_some_and(|b| self.write_offset >= b.len())
                    {
                        self.write.pop_front();
                        self.write_offset = 0;
                    }
                }
                Wake::Written(Err(e)) => {
                    // The server closed its stdin or died: stop writing; stdout
                    // EOF and the exit will follow.
                    tracing::debug!(pid = self.pid, error = %e, "writing to server stdin failed");
                    self.stdin = None;
                    self.write.clear();
                }
                Wake::Command(Some(cmd)) => self.command(cmd),
                Wake::Command(None) => {
                    // Every handle is gone: the Client was dropped.
                    commands_open = false;
                    self.host.kill(now);
                }
                Wake::Timer => self.host.handle_timeout(now),
                Wake::Nothing => {}
            }
        }
    }

    fn command(&mut self, cmd: Command) {
        let now = Instant::now();
        match cmd {
            Command::Request {
                method,
                params,
                timeout,
                reply,
            } => {
                let r = self.host.request(now, &method, params.as_deref(), timeout);
                match r {
                    Ok(id) => {
                        let (tx, rx) = oneshot::channel();
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
                }
            }
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

    /// Drains every core output; returns the record once the session is over.
    fn pump(&mut self) -> Option<SessionRecord> {
        if self.write.is_empty() {
            if let Some(bytes) = self.host.poll_transmit() {
                self.write.push_back(bytes);
                self.write_offset = 0;
            }
        }
        while let Some(ev) = self.host.poll_event() {
            if let ClientEvent::Completed { id, outcome } = ev {
                if let Some(w) = self.waiters.remove(&id) {
                    let _ = w.send(outcome.map_err(Into::into));
                }
            }
        }
        while let Some(line) = self.host.poll_stderr_line() {
            tracing::info!(target: "mcp_stdio::server_stderr", pid = self.pid, "{line}");
        }
        let mut record = None;
        while let Some(action) = self.host.poll_action() {
            match action {
                HostAction::CloseStdin => {
                    self.stdin = None;
                    self.write.clear();
                }
                HostAction::SignalGroup(sig) => os::signal_group(self.pid, sig),
                HostAction::AbandonReaders => {
                    tracing::warn!(
                        pid = self.pid,
                        "server pipes still open past the drain deadline; abandoning readers"
                    );
                    self.stdout = None;
                    self.stderr = None;
                }
                HostAction::Finished(r) => record = Some(*r),
                _ => {}
            }
        }
        if record.is_some() {
            // Completions for everything still waiting were emitted by the
            // session's close; anything left gets SessionClosed.
            while let Some(ev) = self.host.poll_event() {
                if let ClientEvent::Completed { id, outcome } = ev {
                    if let Some(w) = self.waiters.remove(&id) {
                        let _ = w.send(outcome.map_err(Into::into));
                    }
                }
            }
            for (_, w) in self.waiters.drain() {
                let _ = w.send(Err(RequestFailure::SessionClosed.into()));
            }
        }
        record
    }
}

async fn read_opt<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut Option<R>,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    match reader {
        Some(r) => r.read(buf).await,
        None => std::future::pending().await,
    }
}

async fn write_front(
    stdin: &mut Option<ChildStdin>,
    queue: &VecDeque<Vec<u8>>,
    offset: usize,
) -> std::io::Result<usize> {
    match (stdin, queue.front()) {
        (Some(w), Some(bytes)) => {
            let n = w.write(&bytes[offset..]).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            Ok(n)
        }
        _ => std::future::pending().await,
    }
}

async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
