//! `serve`: an MCP server on this process's stdin and stdout.
//!
//! One loop owns the [`ServerSession`] and the reader and writer (which need
//! not be `Send` or `'static`), racing "input, a finished handler, a
//! handler's notification, output progress, the drain deadline"; each request
//! runs in its own task on async-std's executor, with a [`CancelToken`].

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_channel::Sender;
use async_io::Timer;
use event_listener::Event;
use futures_lite::future::{or, race};
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, FutureExt};
use mcp_stdio_core::budget::ResultBudget;
use mcp_stdio_core::message::{ErrorObject, Id, Notification, RawValue, Request, INTERNAL_ERROR};
use mcp_stdio_core::server::{ServerConfig, ServerEvent, ServerMetrics, ServerSession};

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
}

impl RequestContext {
    /// The request id.
    pub fn id(&self) -> &Id {
        &self.id
    }

    /// The request's cancellation token; pass it on to subprocesses and I/O
    /// the handler starts, so a cancel reaches them. (The handler's future is
    /// dropped on cancel too, so work that does not watch the token still
    /// stops at its next await.)
    pub fn cancel_token(&self) -> &CancelToken {
        &self.cancel
    }

    /// Sends a notification to the client (progress, logging), waiting while
    /// the outgoing queue is full.
    pub async fn notify(&self, method: &str, params: Option<Box<RawValue>>) {
        let _ = self.notify.send((method.to_owned(), params)).await;
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

/// Limits of [`serve`].
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The session's limits (wire limit, concurrency, queues).
    pub config: ServerConfig,
    /// After stdin closes, how long in-flight handlers may run before they
    /// are aborted (default 5 s).
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
    /// Handlers aborted because the drain timeout passed.
    pub aborted_at_exit: u64,
}

/// Serves MCP on this process's stdin and stdout until stdin closes and
/// in-flight work drains (bounded by `drain_timeout`). Only protocol messages
/// go to stdout (G13); log with `tracing` to stderr.
///
/// Uses async-std's `stdin()` and `stdout()`, which do the blocking reads and
/// writes on async-std's blocking thread pool: stdin may be a file or a
/// terminal, which cannot always be polled for readiness.
pub async fn serve<H: Handler>(options: ServeOptions, handler: H) -> std::io::Result<ServeReport> {
    serve_io(
        async_std::io::stdin(),
        async_std::io::stdout(),
        options,
        handler,
    )
    .await
}

/// How a handler's task ended.
enum Done {
    Finished(Id, HandlerResult),
    Aborted(Id),
}

/// What woke the serve loop.
enum Wake {
    Read(std::io::Result<usize>),
    Done(Option<Done>),
    Notify(Option<(String, Option<Box<RawValue>>)>),
    Wrote(std::io::Result<usize>),
    Timer,
}

/// [`serve`] over any reader and writer (a pipe, a socket, a test harness).
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
    let max_frame = options.config.get_max_frame();
    let mut session = ServerSession::new(options.config.clone());
    // At most `max_concurrent` handlers exist (the core refuses more), each
    // sending one `Done`: their sends never wait.
    let (done_tx, done_rx) =
        async_channel::bounded::<Done>(options.config.get_max_concurrent().max(1));
    let (notify_tx, notify_rx) = async_channel::bounded(HANDLER_NOTIFY_QUEUE);
    let mut tasks: HashMap<Id, CancelToken> = HashMap::new();
    let mut buf = vec![0u8; STDIN_READ];
    // At most one message taken from the core waits here, so the core's
    // outgoing limit stays the bound.
    let mut write: Option<Vec<u8>> = None;
    let mut write_offset = 0usize;
    let mut input_open = true;
    let mut drain_deadline: Option<Instant> = None;
    let mut aborted_at_exit = 0u64;

    loop {
        while let Some(ev) = session.poll_event() {
            match ev {
                ServerEvent::Request(request) => {
                    let id = request.id.clone();
                    let cancel = CancelToken::new();
                    let ctx = RequestContext {
                        id: id.clone(),
                        cancel: cancel.clone(),
                        notify: notify_tx.clone(),
                        max_frame,
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
                ServerEvent::Cancelled { id, reason } => {
                    tracing::debug!(%id, ?reason, "request cancelled by the client");
                    if let Some(cancel) = tasks.get(&id) {
                        // The token reaches the handler, and its task drops
                        // the handler's future, then reports `Aborted`.
                        cancel.cancel();
                    }
                }
                ServerEvent::Notification(n) => handler.notification(n),
                ServerEvent::InputClosed => {
                    input_open = false;
                    drain_deadline = Some(Instant::now() + options.drain_timeout);
                }
                _ => {}
            }
        }
        if write.is_none() {
            write = session.poll_transmit();
            write_offset = 0;
        }
        if !input_open && tasks.is_empty() && write.is_none() {
            break;
        }
        let draining_done = drain_deadline.is_some_and(|d| d <= Instant::now());
        if draining_done && !tasks.is_empty() {
            for (id, cancel) in tasks.drain() {
                cancel.cancel();
                session.handler_ended(&id);
                aborted_at_exit += 1;
            }
            continue;
        }

        let read = async {
            if input_open {
                Wake::Read(input.read(&mut buf).await)
            } else {
                std::future::pending().await
            }
        };
        let done = async { Wake::Done(done_rx.recv().await.ok()) };
        let notified = async { Wake::Notify(notify_rx.recv().await.ok()) };
        let wrote = async {
            match &write {
                Some(bytes) => Wake::Wrote(write_some(&mut output, &bytes[write_offset..]).await),
                None => std::future::pending().await,
            }
        };
        let timer = async {
            match drain_deadline {
                Some(d) => Timer::at(d).await,
                None => Timer::never().await,
            };
            Wake::Timer
        };
        // Every branch is cancel-safe: a read or write dropped unfinished has
        // moved no bytes, a `recv` dropped unfinished has taken no message.
        let wake = race(read, race(done, race(notified, or(wrote, timer)))).await;

        match wake {
            Wake::Read(r) => {
                let now = Instant::now();
                match r {
                    Ok(n) if n > 0 => session.handle_stdin(now, &buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    _ => session.handle_stdin_eof(now),
                }
            }
            Wake::Done(Some(Done::Finished(id, result))) => {
                tasks.remove(&id);
                let _ = session.respond(&id, result.as_deref());
            }
            Wake::Done(Some(Done::Aborted(id))) => {
                tasks.remove(&id);
                session.handler_ended(&id);
            }
            Wake::Done(None) => {}
            Wake::Notify(Some((method, params))) => {
                if let Err(e) = session.notify(&method, params.as_deref()) {
                    tracing::debug!(error = %e, "notification from handler dropped");
                }
            }
            Wake::Notify(None) => {}
            Wake::Wrote(r) => {
                write_offset += r?;
                if write.as_ref().is_some_and(|b| write_offset >= b.len()) {
                    // One whole message written: flush it, so a buffered
                    // writer never holds a response back.
                    write = None;
                    output.flush().await?;
                }
            }
            Wake::Timer => {}
        }
    }
    output.flush().await?;
    Ok(ServeReport {
        metrics: session.metrics(),
        aborted_at_exit,
    })
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

async fn write_some<W: AsyncWrite + Unpin>(output: &mut W, bytes: &[u8]) -> std::io::Result<usize> {
    loop {
        match output.write(bytes).await {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}
