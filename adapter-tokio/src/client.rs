//! `Client`: spawn an MCP server and drive its session on tokio.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use mcp_stdio_core::client::{ClientMetrics, Deadline, Incoming, RequestFailure, SendError};
pub use mcp_stdio_core::driver::CancelHandle;
use mcp_stdio_core::driver::{CancelRegistry, ClientDriver, DriverAction, ReplyChannel, ABANDONED};
use mcp_stdio_core::frame::ReadRoom;
use mcp_stdio_core::handshake::{check_initialize_result, initialize_params, InitializeResult};
use mcp_stdio_core::host::{ClientOptions, InitializeError, RequestError, SessionRecord};
use mcp_stdio_core::message::{ErrorObject, Id, Notification, RawResult, RawValue, Request};
use mcp_stdio_core::process::Signal;
use mcp_stdio_core::{CommandSpec, ExitStatus};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::task::JoinHandle;

use mcp_stdio_sys::log_relay::{self, forward_server_stderr, Level};

use crate::leader::{Leader, ProcessGroup, Signalled};
use crate::stdio::sleep_until_opt;

/// Commands queued from the application to the driver task. Cancels never
/// pass through it (see [`CancelRegistry`]), so a full queue loses none.
const COMMAND_QUEUE: usize = 256;
/// Reads of stdout per wake of the driver, when bytes keep coming: a 4 MiB
/// burst, then the other branches get their turn.
const STDOUT_READS_PER_WAKE: usize = 64;
/// Bytes read from stderr per read call.
const STDERR_READ: usize = 16 * 1024;

type Outcome = Result<RawResult, RequestError>;

/// tokio's one-shot channels carry the driver's replies.
#[derive(Debug)]
struct OneShot;

impl ReplyChannel for OneShot {
    type Sender<T: Send + 'static> = oneshot::Sender<T>;
    type Receiver<T: Send + 'static> = oneshot::Receiver<T>;

    fn channel<T: Send + 'static>() -> (Self::Sender<T>, Self::Receiver<T>) {
        oneshot::channel()
    }

    fn send<T: Send + 'static>(tx: Self::Sender<T>, value: T) -> bool {
        tx.send(value).is_ok()
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
            // Lossless and non-blocking: a flag and a wake, no queue.
            self.cancel.cancel(ABANDONED);
        }
    }
}

/// A spawned MCP server and its session.
///
/// One driver task owns the core's [`ClientDriver`]: it reads the server's
/// stdout and stderr continuously, whatever the application does (G1),
/// writes stdin without ever blocking those reads, applies deadlines and
/// runs the shutdown sequence (G11). The application talks to it through a
/// bounded command queue; cancels bypass it and are never lost. The
/// decisions are the core's [`ClientDriver`].
///
/// Dropping a `Client` without [`shutdown`](Self::shutdown) kills the
/// server's process group at once (a `killpg` system call, never a task
/// spawned in `Drop`); the driver then reaps it. The group is never
/// signalled after the driver reaped the server: its id could have been
/// reused (see [`mcp_stdio_sys::ProcessGroup`]).
#[derive(Debug)]
pub struct Client {
    commands: mpsc::Sender<Command>,
    cancels: Arc<CancelRegistry>,
    incoming: tokio::sync::Mutex<mpsc::Receiver<IncomingMessage>>,
    driver: Option<JoinHandle<SessionRecord>>,
    pid: u32,
    group: ProcessGroup,
    finished: Arc<AtomicBool>,
    client_info: mcp_stdio_core::handshake::Implementation,
    client_capabilities: Option<Box<RawValue>>,
    request_timeout: Option<Duration>,
}

impl Client {
    /// Spawns `command` (no shell; its own process group) with stdin, stdout
    /// and stderr piped, and starts the driver task. Must be called inside a
    /// tokio runtime.
    ///
    /// On Linux the server is tied to this process: if this process dies
    /// without shutting it down (even by `SIGKILL`), the kernel kills the
    /// server (`PR_SET_PDEATHSIG`, set from one long-lived spawner thread so
    /// the thread that called `spawn` may exit). Elsewhere the server sees
    /// its stdin close.
    pub fn spawn(command: &CommandSpec, options: ClientOptions) -> std::io::Result<Self> {
        let (mut child, pid) = spawn_server(command)?;
        let pipes = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let leader = Leader::new(child)?;
        let group = leader.group().clone();
        let (commands, command_rx) = mpsc::channel(COMMAND_QUEUE);
        // Capacity 1: the core's bounded inbox is the real queue (G5).
        let (incoming_tx, incoming) = mpsc::channel(1);
        let finished = Arc::new(AtomicBool::new(false));
        let wake = Arc::new(Notify::new());
        let cancels = CancelRegistry::new({
            let wake = wake.clone();
            // `notify_one` stores a permit: a wake while the driver is busy is not lost.
            move || wake.notify_one()
        });
        let request_timeout = options.get_default_timeout();
        let client_info = options.get_client_info().clone();
        let client_capabilities = options.get_client_capabilities().map(ToOwned::to_owned);
        let driver = Driver::new(
            ClientDriver::new(options, pid, Instant::now(), cancels.clone()),
            (leader, pipes),
            command_rx,
            commands.clone(),
            incoming_tx,
            wake,
            finished.clone(),
        );
        Ok(Self {
            commands,
            cancels,
            incoming: tokio::sync::Mutex::new(incoming),
            driver: Some(tokio::spawn(driver.run())),
            pid,
            group,
            finished,
            client_info,
            client_capabilities,
            request_timeout,
        })
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
        self.start_request(method, params, self.request_timeout)
            .await?
            .await
    }

    /// Sends a request with an explicit deadline — the session's default,
    /// none at all, or after a duration ([`Deadline`]) — and waits.
    pub async fn request_with_deadline(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        deadline: Deadline,
    ) -> Outcome {
        self.start_request(method, params, deadline.as_timeout())
            .await?
            .await
    }

    /// Sends a request with its own timeout and waits. `None` takes the
    /// session's default timeout; for no deadline at all use
    /// [`request_with_deadline`](Self::request_with_deadline) with
    /// [`Deadline::None`].
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
        let started = rx.await.unwrap_or(Err(SendError::Closed.into()))?;
        Ok(PendingRequest {
            id: started.id,
            rx: started.outcome,
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

    /// Cancels a request by id (see [`PendingRequest::cancel`]); a no-op for
    /// an id not in flight. Never blocks and is never lost.
    pub fn cancel(&self, id: &Id, reason: &str) {
        self.cancels.cancel(id, reason);
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
            // Synchronous: one syscall, refused if the driver reaped the
            // server meanwhile. The driver sees the closed command queue,
            // observes the exit and reaps the child.
            let _ = self.group.signal(Signal::Kill);
        }
    }
}

/// Spawns the server with its three pipes, in its own process group.
fn spawn_server(command: &CommandSpec) -> std::io::Result<(Child, u32)> {
    // Tied to this process (G11); forked on the spawner thread, in our runtime.
    let runtime = tokio::runtime::Handle::current();
    let child = mcp_stdio_sys::spawn_tied(command, move |cmd| {
        let _entered = runtime.enter();
        tokio::process::Command::from(cmd)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
    })?;
    let pid = child.id().unwrap_or(0);
    tracing::debug!(pid, command = %command.display(), "spawned MCP server");
    Ok((child, pid))
}

/// The server's three pipes, taken from its child before the [`Leader`] owns it.
type Pipes = (Option<ChildStdin>, Option<ChildStdout>, Option<ChildStderr>);

/// What woke the driver.
enum Wake<'a> {
    Stdout(std::io::Result<usize>),
    Stderr(std::io::Result<usize>),
    Exited(std::io::Result<ExitStatus>),
    Written(std::io::Result<usize>),
    Command(Option<Command>),
    IncomingRoom(Result<mpsc::Permit<'a, IncomingMessage>, mpsc::error::SendError<()>>),
    /// A cancel was flagged, or nothing in particular: every wake handles cancels.
    Cancel,
    Timer,
}

/// The driver task: the core's [`ClientDriver`] and the system calls.
struct Driver {
    core: ClientDriver<OneShot>,
    /// The server: reaped only after the core's `Finished`.
    leader: Leader,
    pid: u32,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
    commands: mpsc::Receiver<Command>,
    commands_tx: mpsc::Sender<Command>,
    commands_open: bool,
    incoming: mpsc::Sender<IncomingMessage>,
    /// False once the application's receiver is gone: the inbox is discarded.
    incoming_open: bool,
    wake: Arc<Notify>,
    exited: bool,
    finished: Arc<AtomicBool>,
}

impl Driver {
    fn new(
        core: ClientDriver<OneShot>,
        (leader, (stdin, stdout, stderr)): (Leader, Pipes),
        commands: mpsc::Receiver<Command>,
        commands_tx: mpsc::Sender<Command>,
        incoming: mpsc::Sender<IncomingMessage>,
        wake: Arc<Notify>,
        finished: Arc<AtomicBool>,
    ) -> Self {
        Self {
            core,
            pid: leader.pid(),
            stdin,
            stdout,
            stderr,
            leader,
            commands,
            commands_tx,
            commands_open: true,
            incoming,
            incoming_open: true,
            wake,
            exited: false,
            finished,
        }
    }

    async fn run(mut self) -> SessionRecord {
        let mut err_buf = vec![0u8; STDERR_READ];
        loop {
            while let Some(action) = self.core.poll_action() {
                match action {
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
                        // Supervision over: the group is never signalled again.
                        self.leader.reap();
                        self.finished.store(true, Ordering::Release);
                        return *record;
                    }
                    _ => {}
                }
            }
            let deadline = self.core.poll_timeout().map(tokio::time::Instant::from_std);
            // A closed channel's `reserve` is ready at once: without the flag
            // the loop would spin on it and never reap the server.
            let has_incoming = self.incoming_open && self.core.has_incoming();
            // The held message's rest, written only as the pipe accepts it
            // (tokio's pipes are readiness-based), never awaited whole; and
            // stdout read straight into the framer's buffer.
            let (pending_write, room) = self.core.poll_io();
            let pending_write = pending_write.filter(|_| self.stdin.is_some());
            let wake = tokio::select! {
                // Readers first: nothing the application does pauses them (G1).
                r = read_room(&mut self.stdout, room) => Wake::Stdout(r),
                r = read_opt(&mut self.stderr, &mut err_buf) => Wake::Stderr(r),
                // Seen without reaping: the zombie keeps the group id ours
                // until `Finished`.
                status = self.leader.exited(), if !self.exited => Wake::Exited(status),
                r = write_some(&mut self.stdin, pending_write), if pending_write.is_some() => Wake::Written(r),
                permit = self.incoming.reserve(), if has_incoming => Wake::IncomingRoom(permit),
                cmd = self.commands.recv(), if self.commands_open => Wake::Command(cmd),
                () = self.wake.notified() => Wake::Cancel,
                () = sleep_until_opt(deadline) => Wake::Timer,
            };
            // The one clock read of this turn.
            let now = Instant::now();
            // Cancels flagged before this turn go out before what the turn
            // brings: a `cancel` then a `request` reach the wire in that
            // order (G6).
            self.core.handle_cancels(now);
            match wake {
                Wake::Stdout(Ok(n)) if n > 0 => {
                    self.core.handle_stdout_read(now, n);
                    drain_stdout(&mut self.stdout, &mut self.core, now);
                }
                Wake::Stdout(_) => {
                    self.stdout = None;
                    self.core.handle_stdout_eof(now);
                }
                Wake::Stderr(Ok(n)) if n > 0 => self.core.handle_stderr(now, &err_buf[..n]),
                Wake::Stderr(_) => {
                    self.stderr = None;
                    self.core.handle_stderr_eof(now);
                }
                Wake::Exited(status) => {
                    self.exited = true;
                    match status {
                        Ok(s) => self.core.handle_exited(now, s),
                        // waitid() failing means no status can ever be observed:
                        // the supervisor's deadlines end the session.
                        Err(e) => log_relay::event(
                            self.pid,
                            Level::Warn,
                            "waiting for the server failed",
                            Some(e.to_string()),
                        ),
                    }
                }
                Wake::Written(Ok(n)) => self.core.handle_written(n),
                Wake::Written(Err(e)) => {
                    // The server closed its stdin or died: stop writing; stdout
                    // EOF and the exit will follow.
                    log_relay::event(
                        self.pid,
                        Level::Debug,
                        "writing to server stdin failed",
                        Some(e.to_string()),
                    );
                    self.stdin = None;
                    self.core.handle_write_failed();
                }
                Wake::IncomingRoom(Ok(permit)) => match self.core.poll_incoming(now) {
                    Some(Incoming::Request(r)) => {
                        let responder = Responder {
                            id: r.id.clone(),
                            commands: self.commands_tx.clone(),
                        };
                        permit.send(IncomingMessage::Request(r, responder));
                    }
                    Some(Incoming::Notification(n)) => {
                        permit.send(IncomingMessage::Notification(n));
                    }
                    None => {}
                },
                // The application dropped its receiver with the Client.
                Wake::IncomingRoom(Err(_)) => self.incoming_open = false,
                Wake::Command(Some(cmd)) => self.core.handle_command(now, cmd),
                Wake::Command(None) => {
                    // Every handle is gone: the Client was dropped.
                    self.commands_open = false;
                    self.core.handle_client_gone(now);
                }
                Wake::Cancel => {}
                Wake::Timer => self.core.handle_timeout(now),
            }
            if !self.incoming_open {
                // Nobody will read them: the inbox must not hold the session's memory.
                while self.core.poll_incoming(now).is_some() {}
            }
            self.core.handle_cancels(now);
        }
    }
}

/// Reads on while stdout has bytes ready, at most [`STDOUT_READS_PER_WAKE`]
/// times, without a turn through the `select` (a large response is many
/// reads; each turn re-polls every branch).
fn drain_stdout(stdout: &mut Option<ChildStdout>, core: &mut ClientDriver<OneShot>, now: Instant) {
    let waker = mcp_stdio_sys::poll_once::noop_waker();
    let mut cx = Context::from_waker(&waker);
    for _ in 1..STDOUT_READS_PER_WAKE {
        let Some(r) = stdout.as_mut() else {
            return;
        };
        let polled = {
            let room = core.stdout_room();
            let mut limited = r.take(room.len() as u64);
            let read = limited.read_buf(room.vec());
            std::pin::pin!(read).poll(&mut cx)
        };
        match polled {
            Poll::Ready(Ok(n)) if n > 0 => core.handle_stdout_read(now, n),
            Poll::Ready(_) => {
                *stdout = None;
                core.handle_stdout_eof(now);
                return;
            }
            // Not ready: the next `select` waits for it with the task's own
            // waker.
            Poll::Pending => return,
        }
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

/// One read of stdout into the framer's room, appended in place (tokio's
/// `read_buf` fills spare capacity: nothing is zeroed or copied again).
async fn read_room(reader: &mut Option<ChildStdout>, room: ReadRoom<'_>) -> std::io::Result<usize> {
    match reader {
        Some(r) => {
            let limit = room.len() as u64;
            r.take(limit).read_buf(room.vec()).await
        }
        None => std::future::pending().await,
    }
}

/// One `write` of what the pipe accepts now (readiness, never the whole message).
async fn write_some(
    stdin: &mut Option<ChildStdin>,
    bytes: Option<&[u8]>,
) -> std::io::Result<usize> {
    match (stdin, bytes) {
        (Some(w), Some(bytes)) => {
            let n = w.write(bytes).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            Ok(n)
        }
        _ => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_stdio_core::handshake::Implementation;

    /// The client declares its capabilities and info in `initialize`. `cat`
    /// echoes the request back, so the test reads what the server got.
    #[test]
    fn initialize_declares_the_client_capabilities_and_info() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        rt.block_on(async {
            let mut options = ClientOptions::default();
            options
                .client_info(Implementation::new("my-host", "1.0.0"))
                .client_capabilities(Some(
                    RawValue::from_string(r#"{"roots":{"listChanged":true},"sampling":{}}"#.into())
                        .expect("JSON"),
                ));
            let client = Client::spawn(&CommandSpec::new("cat"), options).expect("cat");
            let seen = async {
                loop {
                    if let Some(IncomingMessage::Request(r, _)) = client.next_incoming().await {
                        if r.method == "initialize" {
                            return r.params.expect("params");
                        }
                    }
                }
            };
            let params = tokio::select! {
                p = seen => p,
                r = client.initialize() => panic!("cat cannot answer initialize: {r:?}"),
            };
            let v: serde_json::Value = serde_json::from_str(params.get()).expect("JSON");
            assert_eq!(v["capabilities"]["roots"]["listChanged"], true, "{v}");
            assert!(v["capabilities"]["sampling"].is_object(), "{v}");
            assert_eq!(v["clientInfo"]["name"], "my-host", "{v}");
            let _ = client.kill().await;
        });
    }

    /// G6: an explicit deadline. `cat` never answers (it echoes the request
    /// back as a server→client request): `After` times out at its duration,
    /// `None` outlives a short session default, `Default` takes it.
    #[test]
    fn g6_request_deadline_after_none_and_default() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        rt.block_on(async {
            let mut options = ClientOptions::default();
            options.default_timeout(Some(Duration::from_millis(200)));
            let client = Client::spawn(&CommandSpec::new("cat"), options).expect("cat");
            let t = Instant::now();
            let r = client
                .request_with_deadline("slow", None, Deadline::After(Duration::from_millis(50)))
                .await;
            let took = t.elapsed();
            assert!(
                matches!(
                    r,
                    Err(RequestError::Failed(RequestFailure::TimedOut { .. }))
                ),
                "{r:?}"
            );
            assert!(
                took >= Duration::from_millis(50) && took < Duration::from_secs(5),
                "{took:?}"
            );
            let t = Instant::now();
            let r = client
                .request_with_deadline("slow", None, Deadline::Default)
                .await;
            assert!(
                matches!(
                    r,
                    Err(RequestError::Failed(RequestFailure::TimedOut { .. }))
                ),
                "{r:?}"
            );
            assert!(
                t.elapsed() >= Duration::from_millis(200),
                "{:?}",
                t.elapsed()
            );
            let none = client.request_with_deadline("slow", None, Deadline::None);
            let waited = tokio::time::timeout(Duration::from_millis(600), none).await;
            assert!(
                waited.is_err(),
                "no deadline: still waiting after 3× the default"
            );
            eprintln!("tokio: After(50 ms) timed out after {took:?}; None still waiting at 600 ms");
            let _ = client.kill().await;
        });
    }

    /// G6: a cancel issued before the next request reaches the server before
    /// it, in every round. On a current-thread runtime the driver sees both
    /// in one turn. `cat` echoes what it receives, in order.
    #[test]
    fn g6_cancel_then_request_reach_the_wire_in_that_order() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        rt.block_on(async {
            let client =
                Client::spawn(&CommandSpec::new("cat"), ClientOptions::default()).expect("cat");
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
                let seen = tokio::time::timeout(Duration::from_secs(10), async {
                    let mut seen = Vec::new();
                    while seen.len() < 3 {
                        match client.next_incoming().await {
                            Some(IncomingMessage::Request(r, _)) => seen.push(r.method),
                            Some(IncomingMessage::Notification(n)) => seen.push(n.method),
                            None => panic!("the session ended in round {round}"),
                        }
                    }
                    seen
                })
                .await;
                order = seen.unwrap_or_else(|_| panic!("round {round}: nothing came back"));
                assert_eq!(
                    order,
                    ["first", "notifications/cancelled", "second"],
                    "round {round}"
                );
            }
            eprintln!("tokio: cancel before the next request in 8 rounds: {order:?}");
            let _ = client.kill().await;
        });
    }

    /// G6: a cancel issued while the command queue is full still reaches the
    /// server. `cat` is the server: whatever reaches its stdin comes back as a
    /// server→client message. On a current-thread runtime the driver task
    /// cannot run while this task fills the queue without awaiting.
    #[test]
    fn g6_cancel_while_the_command_queue_is_full_reaches_the_server() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        rt.block_on(async {
            let client =
                Client::spawn(&CommandSpec::new("cat"), ClientOptions::default()).expect("cat");
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
                .try_send(Command::Metrics {
                    reply: oneshot::channel().0,
                })
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
            let needle = format!("\"requestId\":{id}");
            let echoed = tokio::time::timeout(Duration::from_secs(10), async {
                loop {
                    if let Some(IncomingMessage::Notification(n)) = client.next_incoming().await {
                        if n.method == "notifications/cancelled"
                            && n.params.as_ref().is_some_and(|p| p.get().contains(&needle))
                        {
                            return;
                        }
                    }
                }
            })
            .await;
            assert!(echoed.is_ok(), "the cancel never reached the server");
            eprintln!(
                "tokio: cancel with {filled} commands queued reached the server in {:?}",
                t.elapsed()
            );
            let record = client.kill().await;
            assert!(record.metrics.cancels_sent >= 1);
        });
    }
}
