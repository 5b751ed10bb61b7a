//! `serve`: an MCP server on this process's stdin and stdout, with threads.
//!
//! # Threads and queues
//!
//! - **The coordinator** is the thread that called [`serve`]. It owns the
//!   core [`ServerSession`] and never blocks on anything but its one input
//!   queue ([`INPUT_QUEUE`] entries): stdin chunks, handler results, handler
//!   notifications and the writer's acknowledgements all arrive there.
//! - **The reader thread** (`mcp-stdio-stdin`) is the only reader of stdin:
//!   plain blocking reads of up to 64 KiB, each chunk sent to the
//!   coordinator. The coordinator never waits on handlers or on the writer,
//!   so the reader keeps going (G5).
//! - **The writer thread** (`mcp-stdio-stdout`) writes one message at a time,
//!   handed over through a queue of capacity 1 only when it has acknowledged
//!   the previous one; everything else waits, bounded, in the core. A client
//!   that stops reading stdout blocks the writer, never the reader.
//! - **Handler threads** (`mcp-stdio-handler`): a pool that grows on demand
//!   up to `max_concurrent` threads and reuses idle ones. The core admits at
//!   most `max_concurrent` requests at a time (more get the overload error),
//!   so a request never waits for a thread.
//!
//! # Cancellation: how this differs from the async adapters
//!
//! A thread cannot be aborted from outside. On a cancel (G7) the request's
//! [`CancelToken`] is set, and the session suppresses the handler's response
//! whatever it returns; the handler stops when it next looks at the token.
//! Its slot counts against `max_concurrent` until it returns. Long-running
//! handlers should check [`CancelToken::is_cancelled`] between steps, or wait
//! with [`CancelToken::wait_timeout`] instead of sleeping, and pass the token
//! on to whatever they start. The same holds for handlers still running when
//! the drain after stdin EOF times out: their tokens are set and their
//! threads are left to finish on their own (counted in
//! [`ServeReport::aborted_at_exit`]).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use mcp_stdio_core::budget::ResultBudget;
use mcp_stdio_core::message::{ErrorObject, Id, Notification, RawValue, Request, INTERNAL_ERROR};
use mcp_stdio_core::server::{ServerConfig, ServerEvent, ServerMetrics, ServerSession};

/// Bytes read from stdin per read call.
const STDIN_READ: usize = 64 * 1024;
/// Inputs waiting for the coordinator: stdin chunks (up to 64 KiB each),
/// handler results and notifications, writer acknowledgements.
const INPUT_QUEUE: usize = 64;

/// What a handler returns: a raw result, or a JSON-RPC error.
pub type HandlerResult = Result<Box<RawValue>, ErrorObject>;

/// A cancellation flag that reaches a handler (G7).
///
/// Cheap to clone; every clone sees the same flag. Blocking waits
/// ([`cancelled`](Self::cancelled), [`wait_timeout`](Self::wait_timeout))
/// wake as soon as it is set.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<TokenState>);

#[derive(Debug, Default)]
struct TokenState {
    cancelled: AtomicBool,
    lock: Mutex<()>,
    changed: Condvar,
}

impl TokenState {
    fn lock(&self) -> MutexGuard<'_, ()> {
        // The lock guards no data; poisoning carries no meaning here.
        self.lock.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl CancelToken {
    /// A token not yet cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels: every waiter wakes.
    pub fn cancel(&self) {
        self.0.cancelled.store(true, Ordering::Release);
        // Taking the lock orders this wake-up after any waiter's last check.
        let _guard = self.0.lock();
        self.0.changed.notify_all();
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled.load(Ordering::Acquire)
    }

    /// Blocks until the token is cancelled.
    pub fn cancelled(&self) {
        let mut guard = self.0.lock();
        while !self.is_cancelled() {
            guard = self
                .0
                .changed
                .wait(guard)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Blocks until the token is cancelled or `timeout` passes; returns
    /// whether it is cancelled. Use it instead of `thread::sleep` in a
    /// handler, so a cancel ends the wait at once.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let guard = self.0.lock();
        let _ = self
            .0
            .changed
            .wait_timeout_while(guard, timeout, |()| !self.is_cancelled())
            .unwrap_or_else(PoisonError::into_inner);
        self.is_cancelled()
    }
}

/// What a handler gets besides its request.
#[derive(Debug, Clone)]
pub struct RequestContext {
    id: Id,
    cancel: CancelToken,
    inputs: SyncSender<Input>,
    max_frame: usize,
}

impl RequestContext {
    /// The request id.
    pub fn id(&self) -> &Id {
        &self.id
    }

    /// The request's cancellation token. A thread cannot be aborted from
    /// outside: check it between steps (or wait on it), and pass it on to
    /// subprocesses and I/O the handler starts, so a cancel reaches them.
    pub fn cancel_token(&self) -> &CancelToken {
        &self.cancel
    }

    /// Sends a notification to the client (progress, logging), blocking
    /// while the coordinator's input queue is full. Past the session's
    /// outgoing limit the notification is dropped (and logged at debug).
    pub fn notify(&self, method: &str, params: Option<Box<RawValue>>) {
        let _ = self.inputs.send(Input::Notify(method.to_owned(), params));
    }

    /// A content budget for this request's result: its size leaves room for
    /// the JSON-RPC envelope under the wire limit (G9).
    pub fn result_budget(&self) -> Option<ResultBudget> {
        // Room for `{"jsonrpc":"2.0","id":…,"result":…}` and a long string id.
        ResultBudget::new(self.max_frame.saturating_sub(1024)).ok()
    }
}

/// Handles requests and notifications for [`serve`].
pub trait Handler: Send + Sync + 'static {
    /// Handles one request, on a handler thread. On a cancel the context's
    /// token is set and the response is suppressed; return soon after.
    fn call(&self, request: Request, ctx: RequestContext) -> HandlerResult;

    /// Handles one notification (default: ignore). Runs on the coordinator
    /// thread: keep it short, or hand the work to another thread.
    fn notification(&self, _notification: Notification) {}
}

impl<F> Handler for F
where
    F: Fn(Request, RequestContext) -> HandlerResult + Send + Sync + 'static,
{
    fn call(&self, request: Request, ctx: RequestContext) -> HandlerResult {
        self(request, ctx)
    }
}

/// Limits of [`serve`].
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The session's limits (wire limit, concurrency, queues).
    pub config: ServerConfig,
    /// After stdin closes, how long in-flight handlers may run before they
    /// are abandoned with their tokens cancelled (default 5 s).
    pub drain_timeout: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            config: ServerConfig::default(),
            drain_timeout: Duration::from_secs(5),
        }
    }
}

/// What a finished [`serve`] observed.
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct ServeReport {
    /// The session's counters.
    pub metrics: ServerMetrics,
    /// Handlers still running when the drain timeout passed: their tokens
    /// were cancelled, their requests answered with an error, and their
    /// threads left to finish on their own.
    pub aborted_at_exit: u64,
}

/// Serves MCP on this process's stdin and stdout until stdin closes and
/// in-flight work drains (bounded by `drain_timeout`). Only protocol messages
/// go to stdout (G13); log with `tracing` to stderr.
pub fn serve<H: Handler>(options: ServeOptions, handler: H) -> io::Result<ServeReport> {
    serve_io(io::stdin(), io::stdout(), options, handler)
}

/// What the coordinator waits for.
enum Input {
    Stdin(Vec<u8>),
    StdinEnd,
    Done(Id, HandlerResult),
    Notify(String, Option<Box<RawValue>>),
    Written(io::Result<()>),
}

/// [`serve`] over any reader and writer (a pipe, a socket, a test harness).
///
/// The reader is read by its own thread, which is left behind if `serve_io`
/// returns early on a write error (it ends at the reader's EOF), hence
/// `'static`. The writer is written by a scoped thread and is flushed after
/// every message.
pub fn serve_io<R, W, H>(
    input: R,
    output: W,
    options: ServeOptions,
    handler: H,
) -> io::Result<ServeReport>
where
    R: Read + Send + 'static,
    W: Write + Send,
    H: Handler,
{
    let handler = Arc::new(handler);
    let (inputs_tx, inputs) = mpsc::sync_channel::<Input>(INPUT_QUEUE);
    spawn_reader(input, inputs_tx.clone())?;
    std::thread::scope(|scope| {
        // Capacity 1, and a message is handed over only when the writer is idle.
        let (write_tx, write_rx) = mpsc::sync_channel::<Vec<u8>>(1);
        let acks = inputs_tx.clone();
        std::thread::Builder::new()
            .name("mcp-stdio-stdout".to_owned())
            .spawn_scoped(scope, move || write_loop(output, &write_rx, &acks))?;
        let mut coordinator = Coordinator {
            session: ServerSession::new(options.config.clone()),
            pool: Pool::new(
                options.config.get_max_concurrent(),
                handler.clone(),
                inputs_tx.clone(),
            ),
            handler,
            max_frame: options.config.get_max_frame(),
            inputs_tx,
            write_tx,
            writer_busy: false,
            tasks: HashMap::new(),
            aborted_at_exit: 0,
        };
        // Returning drops `write_tx`: the writer ends after its last message
        // and the scope joins it.
        coordinator.run(&inputs, options.drain_timeout)
    })
}

fn spawn_reader<R: Read + Send + 'static>(mut input: R, tx: SyncSender<Input>) -> io::Result<()> {
    std::thread::Builder::new()
        .name("mcp-stdio-stdin".to_owned())
        .spawn(move || {
            let mut buf = vec![0u8; STDIN_READ];
            loop {
                let msg = match input.read(&mut buf) {
                    Ok(0) => Input::StdinEnd,
                    Ok(n) => Input::Stdin(buf[..n].to_vec()),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        tracing::debug!(error = %e, "reading stdin failed; treating it as EOF");
                        Input::StdinEnd
                    }
                };
                let end = matches!(msg, Input::StdinEnd);
                if tx.send(msg).is_err() || end {
                    return;
                }
            }
        })?;
    Ok(())
}

fn write_loop<W: Write>(mut output: W, messages: &Receiver<Vec<u8>>, acks: &SyncSender<Input>) {
    while let Ok(bytes) = messages.recv() {
        let r = output.write_all(&bytes).and_then(|()| output.flush());
        let failed = r.is_err();
        if acks.send(Input::Written(r)).is_err() || failed {
            return;
        }
    }
}

struct Coordinator<H: Handler> {
    session: ServerSession,
    pool: Pool<H>,
    handler: Arc<H>,
    max_frame: usize,
    inputs_tx: SyncSender<Input>,
    write_tx: SyncSender<Vec<u8>>,
    writer_busy: bool,
    /// The cancel token of every request whose handler has not returned.
    tasks: HashMap<Id, CancelToken>,
    aborted_at_exit: u64,
}

impl<H: Handler> Coordinator<H> {
    fn run(
        &mut self,
        inputs: &Receiver<Input>,
        drain_timeout: Duration,
    ) -> io::Result<ServeReport> {
        let mut input_open = true;
        let mut drain_deadline: Option<Instant> = None;
        loop {
            while let Some(ev) = self.session.poll_event() {
                match ev {
                    ServerEvent::Request(request) => self.start(request),
                    ServerEvent::Cancelled { id, reason } => {
                        tracing::debug!(%id, ?reason, "request cancelled by the client");
                        if let Some(cancel) = self.tasks.get(&id) {
                            cancel.cancel();
                        }
                    }
                    ServerEvent::Notification(n) => self.handler.notification(n),
                    ServerEvent::InputClosed => {
                        input_open = false;
                        let now = Instant::now();
                        drain_deadline = Some(now.checked_add(drain_timeout).unwrap_or(now));
                    }
                    _ => {}
                }
            }
            if !self.writer_busy {
                if let Some(bytes) = self.session.poll_transmit() {
                    // Never blocks: capacity 1 and the writer is idle. If the
                    // writer is gone its error is already queued for us.
                    let _ = self.write_tx.send(bytes);
                    self.writer_busy = true;
                }
            }
            if !input_open && self.tasks.is_empty() && !self.writer_busy {
                break;
            }
            let now = Instant::now();
            if drain_deadline.is_some_and(|d| d <= now) && !self.tasks.is_empty() {
                for (id, cancel) in self.tasks.drain() {
                    cancel.cancel();
                    // Answers a running request with an error; the handler's
                    // own result, if it ever comes, is dropped.
                    self.session.handler_ended(&id);
                    self.aborted_at_exit += 1;
                }
                continue;
            }
            let input = match drain_deadline {
                Some(d) => match inputs.recv_timeout(d.saturating_duration_since(now)) {
                    Ok(input) => input,
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => break,
                },
                // Disconnected cannot happen: `self` holds a sender.
                None => match inputs.recv() {
                    Ok(input) => input,
                    Err(_) => break,
                },
            };
            let now = Instant::now();
            match input {
                Input::Stdin(bytes) => self.session.handle_stdin(now, &bytes),
                Input::StdinEnd => self.session.handle_stdin_eof(now),
                Input::Done(id, result) => {
                    self.pool.finished();
                    // Absent when abandoned at exit: its request was answered.
                    if self.tasks.remove(&id).is_some() {
                        // A cancelled request's response is suppressed (G7).
                        let _ = self.session.respond(&id, result.as_deref());
                    }
                }
                Input::Notify(method, params) => {
                    if let Err(e) = self.session.notify(&method, params.as_deref()) {
                        tracing::debug!(error = %e, "notification from handler dropped");
                    }
                }
                Input::Written(Ok(())) => self.writer_busy = false,
                Input::Written(Err(e)) => {
                    for cancel in self.tasks.values() {
                        cancel.cancel();
                    }
                    return Err(e);
                }
            }
        }
        Ok(ServeReport {
            metrics: self.session.metrics(),
            aborted_at_exit: self.aborted_at_exit,
        })
    }

    fn start(&mut self, request: Request) {
        let id = request.id.clone();
        let cancel = CancelToken::new();
        let ctx = RequestContext {
            id: id.clone(),
            cancel: cancel.clone(),
            inputs: self.inputs_tx.clone(),
            max_frame: self.max_frame,
        };
        match self.pool.run(Job { request, ctx }) {
            Ok(()) => {
                self.tasks.insert(id, cancel);
            }
            Err(e) => {
                tracing::error!(%id, error = %e, "no thread for the handler");
                let err = ErrorObject::new(INTERNAL_ERROR, "server could not start a handler");
                let _ = self.session.respond(&id, Err(&err));
            }
        }
    }
}

struct Job {
    request: Request,
    ctx: RequestContext,
}

/// Handler threads: started on demand up to `max`, reused when idle.
struct Pool<H: Handler> {
    handler: Arc<H>,
    jobs_tx: SyncSender<Job>,
    jobs: Arc<Mutex<Receiver<Job>>>,
    done: SyncSender<Input>,
    max: usize,
    workers: usize,
    /// Jobs handed out whose result the coordinator has not received.
    busy: usize,
}

impl<H: Handler> Pool<H> {
    fn new(max: usize, handler: Arc<H>, done: SyncSender<Input>) -> Self {
        let max = max.max(1);
        // Jobs queued never exceed `busy`, which never exceeds `max`: the
        // core admits at most `max_concurrent` requests. So `send` never blocks.
        let (jobs_tx, jobs) = mpsc::sync_channel(max);
        Self {
            handler,
            jobs_tx,
            jobs: Arc::new(Mutex::new(jobs)),
            done,
            max,
            workers: 0,
            busy: 0,
        }
    }

    fn run(&mut self, job: Job) -> io::Result<()> {
        if self.busy >= self.workers && self.workers < self.max {
            let handler = self.handler.clone();
            let jobs = self.jobs.clone();
            let done = self.done.clone();
            let spawned = std::thread::Builder::new()
                .name("mcp-stdio-handler".to_owned())
                .spawn(move || worker(&*handler, &jobs, &done));
            match spawned {
                Ok(_) => self.workers += 1,
                // With a thread already running, the job waits for it.
                Err(e) if self.workers > 0 => {
                    tracing::warn!(error = %e, "handler thread not started; the job waits")
                }
                Err(e) => return Err(e),
            }
        }
        self.jobs_tx
            .send(job)
            .map_err(|_| io::Error::other("handler threads are gone"))?;
        self.busy += 1;
        Ok(())
    }

    fn finished(&mut self) {
        self.busy = self.busy.saturating_sub(1);
    }
}

fn worker<H: Handler>(handler: &H, jobs: &Mutex<Receiver<Job>>, done: &SyncSender<Input>) {
    loop {
        let job = {
            // Only `recv` runs under this lock; it cannot poison it.
            let rx = jobs.lock().unwrap_or_else(PoisonError::into_inner);
            rx.recv()
        };
        // The pool is gone: serve has returned.
        let Ok(Job { request, ctx }) = job else {
            return;
        };
        let id = ctx.id.clone();
        let result = if ctx.cancel.is_cancelled() {
            // Cancelled before work started: the response would be suppressed.
            Err(ErrorObject::new(
                INTERNAL_ERROR,
                "cancelled before it started",
            ))
        } else {
            catch_unwind(AssertUnwindSafe(|| handler.call(request, ctx)))
                .unwrap_or_else(|_| Err(ErrorObject::new(INTERNAL_ERROR, "handler panicked")))
        };
        if done.send(Input::Done(id, result)).is_err() {
            return;
        }
    }
}
