//! `serve`: an MCP server on this process's stdin and stdout.
//!
//! One loop owns the core's [`ServeLifecycle`] and the reader and writer
//! (which need not be `Send` or `'static`), racing "input, a finished
//! handler, a handler's notification, output progress, the next deadline";
//! each request runs in its own task on async-std's executor, with a
//! [`CancelToken`].

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use async_channel::Sender;
use async_io::Timer;
use event_listener::Event;
use futures_lite::future::{or, race};
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, FutureExt};
use mcp_stdio_core::basics::ClientHello;
use mcp_stdio_core::budget::ResultBudget;
use mcp_stdio_core::message::{ErrorObject, Id, Notification, RawValue, Request, INTERNAL_ERROR};
use mcp_stdio_core::serve::{ServeAction, ServeLifecycle};
use mcp_stdio_sys::log_relay::{self, Level};

use crate::stdio;

/// Bytes read from stdin per read call.
const STDIN_READ: usize = 64 * 1024;
/// Notifications from handlers waiting for the writer.
const HANDLER_NOTIFY_QUEUE: usize = 256;

/// What a handler returns: a raw result, or a JSON-RPC error.
pub type HandlerResult = Result<Box<RawValue>, ErrorObject>;

#[derive(Debug, Default)]
struct TokenState {
    cancelled: AtomicBool,
    event: Event,
}

/// A cancellation signal that reaches a handler (G7).
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<TokenState>);

impl CancelToken {
    /// A token not yet cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels: every waiter of [`cancelled`](Self::cancelled) wakes.
    pub fn cancel(&self) {
        self.0.cancelled.store(true, Ordering::Release);
        self.0.event.notify(usize::MAX);
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled.load(Ordering::Acquire)
    }

    /// Completes once the token is cancelled.
    pub async fn cancelled(&self) {
        loop {
            if self.is_cancelled() {
                return;
            }
            let listener = self.0.event.listen();
            // Checked again after listening, so a cancel in between is seen.
            if self.is_cancelled() {
                return;
            }
            listener.await;
        }
    }
}

/// What a handler gets besides its request.
#[derive(Debug, Clone)]
pub struct RequestContext {
    id: Id,
    cancel: CancelToken,
    notify: Sender<(String, Option<Box<RawValue>>)>,
    max_frame: usize,
    client: Option<Arc<ClientHello>>,
}

impl RequestContext {
    /// The request id.
    pub fn id(&self) -> &Id {
        &self.id
    }

    /// What the client said about itself (`clientInfo`, `capabilities`) in
    /// `initialize`, when `serve` answered it before this request (`None`
    /// with the basics off: the handler saw `initialize` itself).
    pub fn client(&self) -> Option<&ClientHello> {
        self.client.as_deref()
    }

    /// The request's cancellation token; pass it on to subprocesses and I/O
    /// the handler starts, so a cancel reaches them. (The handler's future is
    /// dropped on cancel too, so work that does not watch the token still
    /// stops at its next await.)
    pub fn cancel_token(&self) -> &CancelToken {
        &self.cancel
    }

    /// Sends a notification to the client (progress, logging), waiting while
    /// the handlers' notification queue is full. Past the session's outgoing
    /// limit (the client is not reading stdout) it is refused and counted in
    /// [`ServeReport::notifications_refused`].
    pub async fn notify(&self, method: &str, params: Option<Box<RawValue>>) {
        let _ = self.notify.send((method.to_owned(), params)).await;
    }

    /// A content budget for this request's result: its size leaves room for
    /// the JSON-RPC envelope under the wire limit (G9).
    pub fn result_budget(&self) -> Option<ResultBudget> {
        mcp_stdio_core::serve::result_budget(self.max_frame)
    }
}

/// Handles requests and notifications for [`serve`].
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

pub use mcp_stdio_core::serve::{ServeEnd, ServeOptions, ServeReport};

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
/// When stdin and stdout are pipes or sockets (as under every MCP host) they
/// are read and written non-blocking through async-io's reactor: a client
/// that stops reading stdout never stops this loop from reading stdin,
/// serving cancels, or ending at the drain deadline (G1). Their original
/// flags come back when `serve` returns. A terminal or a file is served
/// through async-std's `stdin()`/`stdout()` (blocking calls on its thread
/// pool) instead.
///
/// # Errors
/// Writing stdout failed (the client went away): every handler was aborted.
pub async fn serve<H: Handler>(options: ServeOptions, handler: H) -> std::io::Result<ServeReport> {
    let input = stdio::Input::stdin()?;
    let output = stdio::Output::stdout()?;
    serve_io(input, output, options, handler).await
}

/// How a handler's task ended.
enum Done {
    Finished(Id, HandlerResult),
    Aborted(Id),
}

/// What the output side did.
enum Wrote {
    Bytes(usize),
    Flushed,
}

/// What woke the serve loop.
enum Wake {
    Read(std::io::Result<usize>),
    Done(Option<Done>),
    Notify(Option<(String, Option<Box<RawValue>>)>),
    Wrote(std::io::Result<Wrote>),
    Timer,
}

/// [`serve`] over any reader and writer (a pipe, a socket, a test harness).
///
/// The loop never waits for a write or a flush alone: while the writer is
/// busy it keeps reading input, serving cancels and handlers, and the drain
/// deadline (G1). Every decision comes from the core's [`ServeLifecycle`].
///
/// # Errors
/// Writing or flushing `output` failed: every handler was aborted.
pub async fn serve_io<R, W, H>(
    mut input: R,
    mut output: W,
    options: ServeOptions,
    handler: H,
) -> std::io::Result<ServeReport>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
    H: Handler,
{
    let handler = Arc::new(handler);
    let mut life = ServeLifecycle::new(&options);
    let max_frame = life.max_frame();
    // At most `max_concurrent` handlers exist (the core refuses more), each
    // sending one `Done`: their sends never wait.
    let (done_tx, done_rx) = async_channel::bounded::<Done>(options.get_max_concurrent().max(1));
    let (notify_tx, notify_rx) = async_channel::bounded(HANDLER_NOTIFY_QUEUE);
    // One token per running handler: at most `max_concurrent`.
    let mut tasks: HashMap<Id, CancelToken> = HashMap::new();
    let mut buf = vec![0u8; STDIN_READ];
    let mut write_error: Option<std::io::Error> = None;

    loop {
        while let Some(action) = life.poll_action() {
            match action {
                ServeAction::Start(request) => {
                    let id = request.id.clone();
                    let cancel = CancelToken::new();
                    let ctx = RequestContext {
                        id: id.clone(),
                        cancel: cancel.clone(),
                        notify: notify_tx.clone(),
                        max_frame,
                        client: life.client().cloned(),
                    };
                    // Detached: the task reports its end over `done`.
                    drop(async_std::task::spawn(run_handler(
                        handler.clone(),
                        request,
                        ctx,
                        done_tx.clone(),
                    )));
                    tasks.insert(id, cancel);
                }
                ServeAction::Cancel { id, reason } => {
                    log_relay::serve_event(
                        Level::Debug,
                        "request cancelled by the client",
                        Some(format!("id {id}, reason {reason:?}")),
                    );
                    if let Some(cancel) = tasks.get(&id) {
                        // The token reaches the handler, and its task drops
                        // the handler's future, then reports `Aborted`.
                        cancel.cancel();
                    }
                }
                ServeAction::Abort(id) => {
                    if let Some(cancel) = tasks.remove(&id) {
                        cancel.cancel();
                    }
                }
                ServeAction::Notification(n) => handler.notification(n),
                _ => {}
            }
        }
        if life.is_finished() {
            break;
        }
        let wants_input = life.wants_input();
        let output_busy = life.pending_write().is_some() || life.flush_due();
        let deadline = life.poll_timeout();

        let read = async {
            if wants_input {
                Wake::Read(input.read(&mut buf).await)
            } else {
                std::future::pending().await
            }
        };
        let done = async { Wake::Done(done_rx.recv().await.ok()) };
        let notified = async { Wake::Notify(notify_rx.recv().await.ok()) };
        let pending = life.pending_write();
        let wrote = async {
            if output_busy {
                Wake::Wrote(write_or_flush(&mut output, pending).await)
            } else {
                std::future::pending().await
            }
        };
        let timer = async {
            match deadline {
                Some(d) => Timer::at(d).await,
                None => Timer::never().await,
            };
            Wake::Timer
        };
        // Every branch is cancel-safe: a read or write dropped unfinished has
        // moved no bytes, a `recv` dropped unfinished has taken no message.
        let wake = race(read, race(done, race(notified, or(wrote, timer)))).await;

        let now = Instant::now();
        match wake {
            Wake::Read(Ok(0)) => life.handle_input_eof(now),
            Wake::Read(Ok(n)) => life.handle_input(now, &buf[..n]),
            Wake::Read(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Wake::Read(Err(e)) => {
                log_relay::serve_event(
                    Level::Debug,
                    "reading stdin failed; treating it as EOF",
                    Some(e.to_string()),
                );
                life.handle_input_eof(now);
            }
            Wake::Done(Some(Done::Finished(id, result))) => {
                tasks.remove(&id);
                life.handler_finished(now, &id, result.as_deref());
            }
            Wake::Done(Some(Done::Aborted(id))) => {
                tasks.remove(&id);
                life.handler_aborted(now, &id);
            }
            Wake::Done(None) | Wake::Notify(None) => {}
            Wake::Notify(Some((method, params))) => {
                if let Err(e) = life.notify(now, &method, params.as_deref()) {
                    log_relay::serve_event(
                        Level::Debug,
                        "notification from handler refused",
                        Some(e.to_string()),
                    );
                }
            }
            Wake::Wrote(Ok(Wrote::Bytes(n))) => life.handle_written(now, n),
            Wake::Wrote(Ok(Wrote::Flushed)) => life.handle_flushed(now),
            Wake::Wrote(Err(e)) => {
                log_relay::serve_event(
                    Level::Debug,
                    "writing stdout failed; aborting every handler",
                    Some(e.to_string()),
                );
                write_error = Some(e);
                life.handle_write_failed(now);
            }
            Wake::Timer => life.handle_timeout(now),
        }
    }
    match write_error {
        Some(e) if life.report().end == ServeEnd::WriteFailed => Err(e),
        _ => {
            let mut report = life.report();
            report.helpers_unfinished_at_exit = wait_for_helpers(options.get_helper_grace()).await;
            Ok(report)
        }
    }
}

/// Writes some of `pending`, or flushes when nothing is pending. Cancel-safe:
/// dropped unfinished, it has moved no bytes.
async fn write_or_flush<W: AsyncWrite + Unpin>(
    output: &mut W,
    pending: Option<&[u8]>,
) -> std::io::Result<Wrote> {
    match pending {
        Some(bytes) => loop {
            match output.write(bytes).await {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => return Ok(Wrote::Bytes(n)),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        },
        None => output.flush().await.map(|()| Wrote::Flushed),
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
async fn wait_for_helpers(grace: std::time::Duration) -> u64 {
    let end = Instant::now() + grace;
    while mcp_stdio_sys::helper_owners::live() > 0 && Instant::now() < end {
        async_io::Timer::after(std::time::Duration::from_millis(10)).await;
    }
    mcp_stdio_sys::helper_owners::live() as u64
}
