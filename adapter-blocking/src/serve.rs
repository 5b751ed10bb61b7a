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
//! - **The writer thread** (`mcp-stdio-stdout`) owns the blocking write: one
//!   message at a time, handed over through a queue of capacity 1 only when
//!   it has acknowledged the previous one; everything else waits, bounded
//!   and counted, in the core's [`ServeLifecycle`]. A client that stops
//!   reading stdout blocks the writer, never the reader, the cancels or the
//!   drain deadline (G1); at exit such a writer is left behind, blocked,
//!   instead of holding `serve` back.
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

use mcp_stdio_core::ClientHello;
use mcp_stdio_core::ResultBudget;
use mcp_stdio_core::{ErrorObject, Id, Notification, RawValue, Request, INTERNAL_ERROR};
use mcp_stdio_core::{NoteLevel, ReadResult};
use mcp_stdio_core::{ServeAction, ServeInput, ServeLifecycle, ServeOutput};
use mcp_stdio_sys::log_relay::{self, Level};

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
    protocol_version: Option<&'static str>,
    client: Option<Arc<ClientHello>>,
}

impl RequestContext {
    /// The request id.
    pub fn id(&self) -> &Id {
        &self.id
    }

    /// The protocol revision this request is handled under: the version
    /// its `params._meta` named (2026-07-28: the result then gets the
    /// fields that revision requires, e.g. `resultType`, added by `serve`
    /// when the handler leaves them out), else the one `initialize`
    /// negotiated; `None` before `initialize` (or, with the basics off,
    /// for a request that names none).
    pub fn protocol_version(&self) -> Option<&'static str> {
        self.protocol_version
    }

    /// What the client said about itself (`clientInfo`, `capabilities`)
    /// for this request: in its `_meta` for a 2026-07-28 request, else in
    /// `initialize` when `serve` answered it before this request (`None`
    /// with the basics off and no version in `_meta`: the handler saw
    /// `initialize` itself).
    pub fn client(&self) -> Option<&ClientHello> {
        self.client.as_deref()
    }

    /// The request's cancellation token. A thread cannot be aborted from
    /// outside: check it between steps (or wait on it), and pass it on to
    /// subprocesses and I/O the handler starts, so a cancel reaches them.
    pub fn cancel_token(&self) -> &CancelToken {
        &self.cancel
    }

    /// Sends a notification about this request to the client (progress,
    /// logging), blocking while the coordinator's input queue is full. Past
    /// the session's outgoing limit (the client is not reading stdout) it
    /// is refused and counted in [`ServeReport::notifications_refused`].
    /// Once the client cancelled the request (or it was answered) it is
    /// dropped and counted
    /// ([`ServeReport::notifications_after_cancel_dropped`]): nothing about
    /// a cancelled request leaves `serve` after the cancel arrived (G7),
    /// even from a handler thread that has not yet looked at its token.
    pub fn notify(&self, method: &str, params: Option<Box<RawValue>>) {
        let note = Input::Notify(Some(self.id.clone()), method.to_owned(), params);
        let _ = self.inputs.send(note);
    }

    /// Sends a notification not about this request (a list change), as
    /// [`notify`](Self::notify) but never dropped for this request's
    /// cancel or end.
    pub fn notify_server_wide(&self, method: &str, params: Option<Box<RawValue>>) {
        let _ = self
            .inputs
            .send(Input::Notify(None, method.to_owned(), params));
    }

    /// A content budget for this request's result: its size leaves room for
    /// the JSON-RPC envelope under the wire limit (G9).
    pub fn result_budget(&self) -> Option<ResultBudget> {
        mcp_stdio_core::result_budget(self.max_frame)
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

pub use mcp_stdio_core::{ServeEnd, ServeOptions, ServeReport};

/// Serves MCP on this process's stdin and stdout until stdin closes and
/// in-flight work drains (bounded by `drain_timeout`). Only protocol messages
/// go to stdout (G13); log with `tracing` to stderr.
///
/// `initialize` (with version negotiation), `ping`, unknown methods and,
/// with tools given, `tools/list` are answered by `serve` itself from
/// [`ServeOptions::basics`] (see [`ServerBasics`](crate::ServerBasics)); the
/// handler sees the rest. [`ServerBasics::passthrough`](crate::ServerBasics::passthrough)
/// hands it every request.
///
/// # Errors
/// Writing stdout failed (the client went away): every handler's token was
/// cancelled.
pub fn serve<H: Handler>(options: ServeOptions, handler: H) -> io::Result<ServeReport> {
    // Not `io::stdout()`: std takes EBADF on stdout for success.
    serve_io(io::stdin(), mcp_stdio_sys::stdout_file()?, options, handler)
}

/// What the coordinator waits for.
enum Input {
    /// A read of stdin returned this, into these bytes.
    Read(io::Result<usize>, Vec<u8>),
    Done(Id, HandlerResult),
    /// A handler's notification: the request it is about (if any), its
    /// method and params.
    Notify(Option<Id>, String, Option<Box<RawValue>>),
    /// The writer wrote and flushed this many bytes, or failed.
    Written(io::Result<usize>),
}

/// [`serve`] over any reader and writer (a pipe, a socket, a test harness).
///
/// The reader and the writer each get a thread of their own, which outlive
/// `serve_io` when they are blocked in a call that only the client can end:
/// the reader until its EOF, the writer until the client reads or goes away
/// (a client that stops reading stdout for good holds it at most until the
/// process exits) — hence `'static`. The writer flushes after every message.
///
/// # Errors
/// Writing `output` failed: every handler's token was cancelled.
pub fn serve_io<R, W, H>(
    input: R,
    output: W,
    options: ServeOptions,
    handler: H,
) -> io::Result<ServeReport>
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
    H: Handler,
{
    let handler = Arc::new(handler);
    let (inputs_tx, inputs) = mpsc::sync_channel::<Input>(INPUT_QUEUE);
    spawn_reader(input, inputs_tx.clone())?;
    // Capacity 1, and a message is handed over only when the writer is idle.
    let (write_tx, write_rx) = mpsc::sync_channel::<Vec<u8>>(1);
    let acks = inputs_tx.clone();
    std::thread::Builder::new()
        .name("mcp-stdio-stdout".to_owned())
        .spawn(move || write_loop(output, &write_rx, &acks))?;
    let life = ServeLifecycle::new(&options);
    let mut coordinator = Coordinator {
        pool: Pool::new(
            options.get_session().get_max_concurrent(),
            handler.clone(),
            inputs_tx.clone(),
        ),
        handler,
        max_frame: life.max_frame(),
        life,
        inputs_tx,
        write_tx,
        tasks: HashMap::new(),
    };
    // Returning drops `write_tx`: the writer ends after its last message.
    let mut report = coordinator.run(&inputs)?;
    report.helpers_unfinished_at_exit = wait_for_helpers(options.get_helper_grace());
    Ok(report)
}

/// Waits, at most `grace`, for the helper runs the handlers started to
/// finish their own shutdown (`SIGTERM`, grace, `SIGKILL`, drain) and write
/// their final records; returns how many are still going.
fn wait_for_helpers(grace: std::time::Duration) -> u64 {
    let end = Instant::now() + grace;
    while mcp_stdio_sys::helper_owners::live() > 0 && Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    mcp_stdio_sys::helper_owners::live() as u64
}

fn spawn_reader<R: Read + Send + 'static>(mut input: R, tx: SyncSender<Input>) -> io::Result<()> {
    std::thread::Builder::new()
        .name("mcp-stdio-stdin".to_owned())
        .spawn(move || loop {
            let mut buf = vec![0u8; STDIN_READ];
            let r = input.read(&mut buf);
            // The core decides what the read came to; the thread only
            // stops at what ends the stream.
            let end = ReadResult::ends_stream(&r);
            buf.truncate(*r.as_ref().unwrap_or(&0));
            if tx.send(Input::Read(r, buf)).is_err() || end {
                return;
            }
        })?;
    Ok(())
}

fn write_loop<W: Write>(mut output: W, messages: &Receiver<Vec<u8>>, acks: &SyncSender<Input>) {
    while let Ok(bytes) = messages.recv() {
        let r = output
            .write_all(&bytes)
            .and_then(|()| output.flush())
            .map(|()| bytes.len());
        let failed = r.is_err();
        if acks.send(Input::Written(r)).is_err() || failed {
            return;
        }
    }
}

struct Coordinator<H: Handler> {
    life: ServeLifecycle,
    pool: Pool<H>,
    handler: Arc<H>,
    max_frame: usize,
    inputs_tx: SyncSender<Input>,
    write_tx: SyncSender<Vec<u8>>,
    /// The cancel token of every running handler: at most `max_concurrent`.
    tasks: HashMap<Id, CancelToken>,
}

impl<H: Handler> Coordinator<H> {
    fn run(&mut self, inputs: &Receiver<Input>) -> io::Result<ServeReport> {
        loop {
            let deadline;
            // The outputs of the last input, in the lifecycle's order.
            loop {
                match self.life.poll_output() {
                    ServeOutput::Action(action) => self.act(action),
                    ServeOutput::CloseInput => {}
                    ServeOutput::Write(out) => {
                        // Taken whole: nothing more is offered until the writer
                        // acknowledges it, so this never blocks (capacity 1).
                        // If the writer is gone its error is already queued.
                        let _ = self.write_tx.send(out.take());
                    }
                    ServeOutput::Flush => {
                        // The writer flushes after every message.
                        self.life
                            .handle_input(Instant::now(), ServeInput::Flushed(Ok(())));
                    }
                    ServeOutput::Finished => {
                        return match self.life.take_write_error() {
                            Some(e) if self.life.report().end == ServeEnd::WriteFailed => Err(e),
                            _ => Ok(self.life.report()),
                        };
                    }
                    ServeOutput::Timeout(next) => {
                        deadline = next;
                        break;
                    }
                }
            }
            let input = match deadline {
                Some(d) => match inputs.recv_timeout(d.saturating_duration_since(Instant::now())) {
                    Ok(input) => input,
                    Err(RecvTimeoutError::Timeout) => {
                        self.life.handle_input(Instant::now(), ServeInput::Timeout);
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => return Ok(self.life.report()),
                },
                // Disconnected cannot happen: `self` holds a sender.
                None => match inputs.recv() {
                    Ok(input) => input,
                    Err(_) => return Ok(self.life.report()),
                },
            };
            let now = Instant::now();
            match input {
                Input::Read(result, buf) => {
                    self.life
                        .handle_input(now, ServeInput::Read { result, buf: &buf });
                }
                Input::Done(id, result) => {
                    self.pool.finished();
                    self.tasks.remove(&id);
                    // Ignored when abandoned at exit: its request was answered.
                    let result = result.as_deref();
                    self.life
                        .handle_input(now, ServeInput::HandlerFinished { id: &id, result });
                }
                Input::Notify(id, method, params) => {
                    // Refused past the wire limit or the outgoing limit: counted and
                    // noted; about a cancelled or answered request: dropped (G7).
                    let params = params.as_deref();
                    let notify = match &id {
                        Some(id) => ServeInput::NotifyRelated {
                            id,
                            method: &method,
                            params,
                        },
                        None => ServeInput::Notify {
                            method: &method,
                            params,
                        },
                    };
                    self.life.handle_input(now, notify);
                }
                Input::Written(r) => {
                    self.life.handle_input(now, ServeInput::Written(r));
                }
            }
        }
    }

    fn act(&mut self, action: ServeAction) {
        match action {
            ServeAction::Start(request) => self.start(request),
            ServeAction::Cancel { id, reason } => {
                log_relay::serve_event(
                    Level::Debug,
                    "request cancelled by the client",
                    Some(format!("id {id}, reason {reason:?}")),
                );
                if let Some(cancel) = self.tasks.get(&id) {
                    cancel.cancel();
                }
            }
            ServeAction::Abort(id) => {
                // The thread finishes on its own; its result is ignored.
                if let Some(cancel) = self.tasks.remove(&id) {
                    cancel.cancel();
                }
            }
            ServeAction::Notification(n) => self.handler.notification(n),
            ServeAction::Note(note) => {
                let level = match note.level {
                    NoteLevel::Warn => Level::Warn,
                    _ => Level::Debug,
                };
                log_relay::serve_event(level, note.message, note.detail);
            }
            _ => {}
        }
    }

    fn start(&mut self, request: Request) {
        let id = request.id.clone();
        let cancel = CancelToken::new();
        let ctx = RequestContext {
            id: id.clone(),
            cancel: cancel.clone(),
            inputs: self.inputs_tx.clone(),
            max_frame: self.max_frame,
            protocol_version: self.life.request_protocol_version(&id),
            client: self.life.request_client(&id).cloned(),
        };
        match self.pool.run(Job { request, ctx }) {
            Ok(()) => {
                self.tasks.insert(id, cancel);
            }
            Err(e) => {
                log_relay::serve_event(
                    Level::Error,
                    "no thread for the handler",
                    Some(format!("id {id}: {e}")),
                );
                let err = ErrorObject::new(INTERNAL_ERROR, "server could not start a handler");
                let done = ServeInput::HandlerFinished {
                    id: &id,
                    result: Err(&err),
                };
                self.life.handle_input(Instant::now(), done);
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
                Err(e) if self.workers > 0 => log_relay::serve_event(
                    Level::Warn,
                    "handler thread not started; the job waits",
                    Some(e.to_string()),
                ),
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
