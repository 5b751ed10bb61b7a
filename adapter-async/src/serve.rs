//! `serve`: an MCP server on this process's stdin and stdout, on any
//! [`Runtime`].
//!
//! One loop owns the core's [`ServeLifecycle`] and the reader and writer
//! (which need not be `Send` or `'static`): one `poll` that drains the
//! lifecycle's actions, then polls input, finished handlers, handlers'
//! notifications, output progress and the deadline in that order, and
//! sleeps only when none is ready. Each request runs in its own task on the
//! runtime's executor, with a [`CancelToken`].

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_channel::{Receiver, Sender};
use futures_lite::future::or;
use futures_lite::{FutureExt, Stream};
use mcp_stdio_core::ClientHello;
use mcp_stdio_core::ResultBudget;
pub use mcp_stdio_core::ServeLifecycle;
use mcp_stdio_core::{ErrorObject, Id, Notification, RawValue, Request, INTERNAL_ERROR};
use mcp_stdio_core::{ServeAction, ServeInput, ServeOutput};
pub use mcp_stdio_core::{ServeEnd, ServeOptions, ServeReport};
use mcp_stdio_sys::log_relay::{self, Level};

use crate::io::{Sink, Source};
use crate::runtime::{DeadlineTimer, Runtime, Timer};
use crate::stdio::{Stdin, Stdout};

/// Bytes read from stdin per read call.
const STDIN_READ: usize = 64 * 1024;
/// Notifications from handlers waiting for the writer.
const HANDLER_NOTIFY_QUEUE: usize = 256;
/// Turns in one `poll` before the loop yields to its executor.
const TURNS_PER_POLL: usize = 32;
/// How often the end of `serve` looks whether the helper runs finished.
const HELPER_LOOK: Duration = Duration::from_millis(10);

/// What a handler returns: a raw result, or a JSON-RPC error.
pub type HandlerResult = Result<Box<RawValue>, ErrorObject>;

pub use crate::cancel::CancelToken;

/// What a handler gets besides its request.
#[derive(Debug, Clone)]
pub struct RequestContext {
    id: Id,
    cancel: CancelToken,
    notify: Sender<HandlerNote>,
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

    /// The request's cancellation token; also pass it to `run_helper` so a
    /// cancel reaches the subprocess. (The handler's future is dropped on
    /// cancel too, so work that does not watch the token still stops at its
    /// next await.)
    pub fn cancel_token(&self) -> &CancelToken {
        &self.cancel
    }

    /// Sends a notification about this request to the client (progress,
    /// logging), waiting while the handlers' notification queue is full.
    /// Past the session's outgoing limit (the client is not reading stdout)
    /// it is refused and counted in [`ServeReport::notifications_refused`].
    /// Once the client cancelled the request (or it was answered) it is
    /// dropped and counted
    /// ([`ServeReport::notifications_after_cancel_dropped`]): nothing about
    /// a cancelled request leaves `serve` after the cancel arrived (G7).
    pub async fn notify(&self, method: &str, params: Option<Box<RawValue>>) {
        let note = (Some(self.id.clone()), method.to_owned(), params);
        let _ = self.notify.send(note).await;
    }

    /// Sends a notification not about this request (a list change), as
    /// [`notify`](Self::notify) but never dropped for this request's
    /// cancel or end.
    pub async fn notify_server_wide(&self, method: &str, params: Option<Box<RawValue>>) {
        let _ = self.notify.send((None, method.to_owned(), params)).await;
    }

    /// A content budget for this request's result: its size leaves room for
    /// the JSON-RPC envelope under the wire limit (G9).
    pub fn result_budget(&self) -> Option<ResultBudget> {
        mcp_stdio_core::result_budget(self.max_frame)
    }
}

/// Handles requests and notifications for `serve`.
pub trait Handler: Send + Sync + 'static {
    /// Handles one request. The future is dropped when the client cancels.
    fn call(
        &self,
        request: Request,
        ctx: RequestContext,
    ) -> impl Future<Output = HandlerResult> + Send;

    /// Handles one notification (default: ignore).
    fn notification(&self, _notification: Notification) {}
}

impl<F, Fut> Handler for F
where
    F: Fn(Request, RequestContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    fn call(
        &self,
        request: Request,
        ctx: RequestContext,
    ) -> impl Future<Output = HandlerResult> + Send {
        self(request, ctx)
    }
}

/// Serves MCP on this process's stdin and stdout until stdin closes and
/// in-flight work drains (bounded by `drain_timeout`). Only protocol messages
/// go to stdout (G13); log with `tracing` to stderr.
///
/// `initialize` (with version negotiation), `ping`, unknown methods and,
/// with tools given, `tools/list` are answered by `serve` itself from
/// [`ServeOptions::basics`] (see
/// [`ServerBasics`](mcp_stdio_core::ServerBasics)); the handler sees
/// the rest.
///
/// When stdin and stdout are pipes or sockets (as under every MCP host) they
/// are read and written non-blocking, in the runtime's reactor: a client
/// that stops reading stdout never stops this loop from reading stdin,
/// serving cancels, or ending at the drain deadline (G1). Their original
/// flags come back when `serve` returns. A terminal or a file is served
/// through a thread that owns the blocking call instead.
///
/// # Errors
/// Writing stdout failed (the client went away): every handler was aborted.
pub async fn serve<R: Runtime, H: Handler>(
    options: ServeOptions,
    handler: H,
) -> std::io::Result<ServeReport> {
    let rt = R::current()?;
    let input = Stdin::new(&rt)?;
    let output = Stdout::new(&rt)?;
    serve_io(rt, input, output, options, handler).await
}

/// A handler's notification: the request it is about (if any), its method
/// and params.
type HandlerNote = (Option<Id>, String, Option<Box<RawValue>>);

/// How a handler's task ended.
enum Done {
    Finished(Id, HandlerResult),
    Aborted(Id),
}

/// [`serve`] over any [`Source`] and [`Sink`] (a pipe, a socket, a test
/// harness), with handlers on `rt`.
///
/// The loop never waits for a write or a flush alone: while the writer is
/// busy it keeps reading input, serving cancels and handlers, and the drain
/// deadline (G1). Every decision comes from the core's [`ServeLifecycle`].
///
/// # Errors
/// Writing or flushing `output` failed: every handler was aborted.
pub async fn serve_io<R, I, O, H>(
    rt: R,
    input: I,
    output: O,
    options: ServeOptions,
    handler: H,
) -> std::io::Result<ServeReport>
where
    R: Runtime,
    I: Source,
    O: Sink,
    H: Handler,
{
    // At most `max_concurrent` handlers exist (the core refuses more), each
    // sending one `Done`: their sends never wait.
    let (done_tx, done_rx) =
        async_channel::bounded::<Done>(options.get_session().get_max_concurrent().max(1));
    let (notify_tx, notify_rx) = async_channel::bounded(HANDLER_NOTIFY_QUEUE);
    let handlers = Handlers {
        rt: rt.clone(),
        handler: Arc::new(handler),
        tasks: HashMap::new(),
        done_tx,
        done_rx: Box::pin(done_rx),
        notify_tx,
        notify_rx: Box::pin(notify_rx),
    };
    let (mut life, _) =
        serve_dispatch(&rt, input, output, ServeLifecycle::new(&options), handlers).await;
    match life.take_write_error() {
        Some(e) if life.report().end == ServeEnd::WriteFailed => Err(e),
        _ => {
            let mut report = life.report();
            report.helpers_unfinished_at_exit =
                wait_for_helpers(&rt, options.get_helper_grace()).await;
            Ok(report)
        }
    }
}

/// Where the serve loop's requests go and where their answers come from:
/// the application's [`Handler`] in a task per request (`serve`), or
/// another server's own service loop (rmcp's, in `mcp-stdio-rmcp`). The loop
/// calls the first four for the lifecycle's actions, and
/// [`poll_answers`](Self::poll_answers) on every turn.
pub trait Dispatch {
    /// Runs `request` (`ServeAction::Start`); its end is reported to `life`
    /// (`ServeInput::HandlerFinished`, `ServeInput::HandlerAborted`), now or
    /// from `poll_answers`.
    fn start(&mut self, life: &mut ServeLifecycle, request: Request);

    /// The client cancelled `id` (G7): stop its work; its response is suppressed.
    fn cancel(&mut self, life: &mut ServeLifecycle, id: Id, reason: Option<String>);

    /// The loop ends without `id`, already answered with an error: stop its work.
    fn abort(&mut self, id: Id);

    /// A client notification for the application.
    fn notification(&mut self, notification: Notification);

    /// Feeds `life` what came back since the last call (ends of requests,
    /// notifications for the client); `true` if anything did. Registers
    /// `cx` for what has not come yet.
    fn poll_answers(
        &mut self,
        cx: &mut Context<'_>,
        life: &mut ServeLifecycle,
        now: Instant,
    ) -> bool;

    /// No more requests will come (stdin ended, or the loop stopped reading).
    fn input_ended(&mut self) {}
}

/// The serve loop over `input` and `output`, its requests to `dispatch`,
/// until `life` is finished: one `poll` that takes input, the dispatch's
/// answers and the deadline in that order, drains the lifecycle's outputs
/// (actions, writes, flushes) after each, and sleeps only when none is ready. Returns the
/// lifecycle (for its report) and the dispatch.
pub async fn serve_dispatch<R, I, O, D>(
    rt: &R,
    input: I,
    output: O,
    life: ServeLifecycle,
    dispatch: D,
) -> (ServeLifecycle, D)
where
    R: Runtime,
    I: Source,
    O: Sink,
    D: Dispatch,
{
    let mut serve = Serve {
        timer: DeadlineTimer::new(rt),
        life,
        input,
        output,
        dispatch,
        buf: vec![0u8; STDIN_READ],
        input_open: true,
        output_parked: false,
        finished: false,
        deadline: None,
    };
    futures_lite::future::poll_fn(|cx| serve.poll_run(cx)).await;
    (serve.life, serve.dispatch)
}

/// The serve loop's state: the lifecycle, the streams and the dispatch.
struct Serve<R: Runtime, I, O, D> {
    life: ServeLifecycle,
    input: I,
    output: O,
    dispatch: D,
    buf: Vec<u8>,
    input_open: bool,
    /// The last write or flush was pending: tell the lifecycle at the next
    /// turn that the output may take bytes again.
    output_parked: bool,
    /// The lifecycle said `Finished`.
    finished: bool,
    /// The lifecycle's next deadline, from its last drained output.
    deadline: Option<Instant>,
    timer: DeadlineTimer<R>,
}

impl<R: Runtime, I: Source, O: Sink, D: Dispatch> Serve<R, I, O, D> {
    fn poll_run(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        for _ in 0..TURNS_PER_POLL {
            let now = Instant::now();
            if std::mem::take(&mut self.output_parked) {
                self.life.handle_input(now, ServeInput::Writable);
            }
            // The inputs in a fixed order; after each, the outputs it led to.
            let mut busy = self.pump(cx, now);
            busy |= self.poll_input(cx, now);
            busy |= self.pump(cx, now);
            busy |= self.dispatch.poll_answers(cx, &mut self.life, now);
            busy |= self.pump(cx, now);
            busy |= self.poll_timer(cx);
            busy |= self.pump(cx, now);
            if self.finished {
                return Poll::Ready(());
            }
            if !busy {
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    fn poll_input(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        if !self.input_open || self.finished {
            return false;
        }
        match self.input.poll_read(cx, &mut self.buf) {
            Poll::Ready(result) => {
                let buf = &self.buf;
                self.life
                    .handle_input(now, ServeInput::Read { result, buf });
                true
            }
            Poll::Pending => false,
        }
    }

    fn poll_timer(&mut self, cx: &mut Context<'_>) -> bool {
        match self.timer.poll(cx, self.deadline) {
            Poll::Ready(now) => {
                self.life.handle_input(now, ServeInput::Timeout);
                true
            }
            Poll::Pending => false,
        }
    }

    /// Drains the lifecycle's outputs in its order: actions go to the
    /// dispatch; bytes are written as far as the output takes them now,
    /// never waited for (G1). `true` if a write or flush made progress.
    fn pump(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        let mut busy = false;
        loop {
            let written = match self.life.poll_output() {
                ServeOutput::Action(action) => {
                    self.act(action);
                    continue;
                }
                ServeOutput::CloseInput => {
                    // Everything read so far went out: the dispatch sees the end.
                    self.input_open = false;
                    self.dispatch.input_ended();
                    continue;
                }
                ServeOutput::Write(out) => match self.output.poll_write(cx, out.bytes()) {
                    Poll::Ready(r) => ServeInput::Written(r),
                    Poll::Pending => ServeInput::Written(Err(io::ErrorKind::WouldBlock.into())),
                },
                ServeOutput::Flush => match self.output.poll_flush(cx) {
                    Poll::Ready(r) => ServeInput::Flushed(r),
                    Poll::Pending => ServeInput::Flushed(Err(io::ErrorKind::WouldBlock.into())),
                },
                ServeOutput::Finished => {
                    self.finished = true;
                    return busy;
                }
                ServeOutput::Timeout(deadline) => {
                    self.deadline = deadline;
                    return busy;
                }
            };
            let parked = matches!(
                &written,
                ServeInput::Written(Err(e)) | ServeInput::Flushed(Err(e))
                    if e.kind() == io::ErrorKind::WouldBlock
            );
            self.output_parked |= parked;
            busy |= !parked;
            self.life.handle_input(now, written);
        }
    }

    fn act(&mut self, action: ServeAction) {
        match action {
            ServeAction::Start(request) => self.dispatch.start(&mut self.life, request),
            ServeAction::Cancel { id, reason } => {
                log_relay::serve_event(
                    Level::Debug,
                    "request cancelled by the client",
                    Some(format!("id {id}, reason {reason:?}")),
                );
                self.dispatch.cancel(&mut self.life, id, reason);
            }
            ServeAction::Abort(id) => self.dispatch.abort(id),
            ServeAction::Notification(n) => self.dispatch.notification(n),
            ServeAction::Note(note) => {
                let level = match note.level {
                    mcp_stdio_core::NoteLevel::Warn => Level::Warn,
                    _ => Level::Debug,
                };
                log_relay::serve_event(level, note.message, note.detail);
            }
            _ => {}
        }
    }
}

/// `serve`'s dispatch: the application's handler in a task per request.
struct Handlers<R: Runtime, H> {
    rt: R,
    handler: Arc<H>,
    /// One token per running handler: at most `max_concurrent`.
    tasks: HashMap<Id, CancelToken>,
    done_tx: Sender<Done>,
    done_rx: Pin<Box<Receiver<Done>>>,
    notify_tx: Sender<HandlerNote>,
    notify_rx: Pin<Box<Receiver<HandlerNote>>>,
}

impl<R: Runtime, H: Handler> Dispatch for Handlers<R, H> {
    fn start(&mut self, life: &mut ServeLifecycle, request: Request) {
        let id = request.id.clone();
        let cancel = CancelToken::new();
        let ctx = RequestContext {
            id: id.clone(),
            cancel: cancel.clone(),
            notify: self.notify_tx.clone(),
            max_frame: life.max_frame(),
            protocol_version: life.request_protocol_version(&id),
            client: life.request_client(&id).cloned(),
        };
        let handler = self.handler.clone();
        let done = self.done_tx.clone();
        self.rt
            .spawn(Box::pin(run_handler(handler, request, ctx, done)));
        self.tasks.insert(id, cancel);
    }

    fn cancel(&mut self, _life: &mut ServeLifecycle, id: Id, _reason: Option<String>) {
        if let Some(cancel) = self.tasks.get(&id) {
            // The token reaches the handler, and its task drops the
            // handler's future, then reports `Aborted`.
            cancel.cancel();
        }
    }

    fn abort(&mut self, id: Id) {
        if let Some(cancel) = self.tasks.remove(&id) {
            cancel.cancel();
        }
    }

    fn notification(&mut self, notification: Notification) {
        self.handler.notification(notification);
    }

    fn poll_answers(
        &mut self,
        cx: &mut Context<'_>,
        life: &mut ServeLifecycle,
        now: Instant,
    ) -> bool {
        let mut busy = self.poll_notes(cx, life, now);
        // The loop holds a sender: the channel never closes while it runs.
        while let Poll::Ready(Some(done)) = self.done_rx.as_mut().poll_next(cx) {
            busy = true;
            // What a handler notified before it ended goes first: it was
            // queued before its end (G7 then drops only what came late).
            self.poll_notes(cx, life, now);
            match done {
                Done::Finished(id, result) => {
                    self.tasks.remove(&id);
                    let result = result.as_deref();
                    life.handle_input(now, ServeInput::HandlerFinished { id: &id, result });
                }
                Done::Aborted(id) => {
                    self.tasks.remove(&id);
                    life.handle_input(now, ServeInput::HandlerAborted(&id));
                }
            }
        }
        busy | self.poll_notes(cx, life, now)
    }
}

impl<R: Runtime, H: Handler> Handlers<R, H> {
    /// Feeds `life` the handlers' notifications queued now.
    fn poll_notes(
        &mut self,
        cx: &mut Context<'_>,
        life: &mut ServeLifecycle,
        now: Instant,
    ) -> bool {
        let mut busy = false;
        while let Poll::Ready(Some((id, method, params))) = self.notify_rx.as_mut().poll_next(cx) {
            busy = true;
            // Refused past the wire limit or the outgoing limit: counted and
            // noted (G9, G1); about a cancelled or answered request: dropped (G7).
            let params = params.as_deref();
            let input = match &id {
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
            life.handle_input(now, input);
        }
        busy
    }
}

/// Runs one handler in its own task and reports how it ended: with a result,
/// by panic, or dropped after a cancel.
async fn run_handler<H: Handler>(
    handler: Arc<H>,
    request: Request,
    ctx: RequestContext,
    done: Sender<Done>,
) {
    let id = request.id.clone();
    let cancel = ctx.cancel.clone();
    let work = AssertUnwindSafe(async move { handler.call(request, ctx).await }).catch_unwind();
    let cancelled = async {
        cancel.cancelled().await;
        None
    };
    // The cancel is polled first: once the token fires, the handler's future
    // is dropped — with everything it owns — at its next await, even if it
    // never looks at the token (G7).
    let msg = match or(cancelled, async { Some(work.await) }).await {
        None => Done::Aborted(id),
        Some(Ok(result)) => Done::Finished(id, result),
        Some(Err(_panic)) => Done::Finished(
            id,
            Err(ErrorObject::new(INTERNAL_ERROR, "handler panicked")),
        ),
    };
    let _ = done.send(msg).await;
}

/// Waits, at most `grace`, for the helper runs the handlers started to
/// finish their own shutdown (`SIGTERM`, grace, `SIGKILL`, drain) and write
/// their final records; returns how many are still going.
async fn wait_for_helpers<R: Runtime>(rt: &R, grace: Duration) -> u64 {
    let end = Instant::now() + grace;
    let mut timer = rt.timer();
    while mcp_stdio_sys::helper_owners::live() > 0 && Instant::now() < end {
        timer.set(Instant::now() + HELPER_LOOK);
        futures_lite::future::poll_fn(|cx| timer.poll_fired(cx)).await;
    }
    mcp_stdio_sys::helper_owners::live() as u64
}
