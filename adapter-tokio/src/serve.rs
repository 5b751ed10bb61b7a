//! `serve`: an MCP server on this process's stdin and stdout.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_stdio_core::budget::ResultBudget;
use mcp_stdio_core::message::{ErrorObject, Id, Notification, RawValue, Request, INTERNAL_ERROR};
use mcp_stdio_core::server::{ServerConfig, ServerEvent, ServerMetrics, ServerSession};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Notify};
use tokio::task::AbortHandle;

/// Bytes read from stdin per read call.
const STDIN_READ: usize = 64 * 1024;
/// Notifications from handlers waiting for the writer.
const HANDLER_NOTIFY_QUEUE: usize = 256;

/// What a handler returns: a raw result, or a JSON-RPC error.
pub type HandlerResult = Result<Box<RawValue>, ErrorObject>;

/// A cancellation signal that reaches a handler (G7).
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<(AtomicBool, Notify)>);

impl CancelToken {
    /// A token not yet cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels: every waiter of [`cancelled`](Self::cancelled) wakes.
    pub fn cancel(&self) {
        self.0 .0.store(true, Ordering::Release);
        self.0 .1.notify_waiters();
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.0 .0.load(Ordering::Acquire)
    }

    /// Completes once the token is cancelled.
    pub async fn cancelled(&self) {
        loop {
            let notified = self.0 .1.notified();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}

/// What a handler gets besides its request.
#[derive(Debug, Clone)]
pub struct RequestContext {
    id: Id,
    cancel: CancelToken,
    notify: mpsc::Sender<(String, Option<Box<RawValue>>)>,
    max_frame: usize,
}

impl RequestContext {
    /// The request id.
    pub fn id(&self) -> &Id {
        &self.id
    }

    /// The request's cancellation token; also pass it to
    /// [`run_helper`](crate::run_helper) so a cancel reaches the subprocess.
    /// (The handler's task is aborted on cancel too, so work that does not
    /// watch the token still stops at its next await.)
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
    /// Handles one request. The future is aborted when the client cancels.
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
pub async fn serve<H: Handler>(options: ServeOptions, handler: H) -> std::io::Result<ServeReport> {
    serve_io(tokio::io::stdin(), tokio::io::stdout(), options, handler).await
}

enum Done {
    Finished(Id, HandlerResult),
    Aborted(Id),
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
    let (done_tx, mut done_rx) = mpsc::channel::<Done>(options.config.get_max_concurrent().max(1));
    let (notify_tx, mut notify_rx) = mpsc::channel(HANDLER_NOTIFY_QUEUE);
    let mut tasks: HashMap<Id, (AbortHandle, CancelToken)> = HashMap::new();
    let mut buf = vec![0u8; STDIN_READ];
    let mut write: VecDeque<Vec<u8>> = VecDeque::new();
    let mut write_offset = 0usize;
    let mut input_open = true;
    let mut drain_deadline: Option<tokio::time::Instant> = None;
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
                    let h = handler.clone();
                    let inner = tokio::spawn(async move { h.call(request, ctx).await });
                    let abort = inner.abort_handle();
                    let done = done_tx.clone();
                    let task_id = id.clone();
                    // The outer task reports how the handler ended: with a
                    // result, by panic, or aborted after a cancel.
                    tokio::spawn(async move {
                        let msg = match inner.await {
                            Ok(result) => Done::Finished(task_id, result),
                            Err(e) if e.is_panic() => Done::Finished(
                                task_id,
                                Err(ErrorObject::new(INTERNAL_ERROR, "handler panicked")),
                            ),
                            Err(_) => Done::Aborted(task_id),
                        };
                        let _ = done.send(msg).await;
                    });
                    tasks.insert(id, (abort, cancel));
                }
                ServerEvent::Cancelled { id, reason } => {
                    tracing::debug!(%id, ?reason, "request cancelled by the client");
                    if let Some((abort, cancel)) = tasks.get(&id) {
                        cancel.cancel();
                        abort.abort();
                    }
                }
                ServerEvent::Notification(n) => handler.notification(n),
                ServerEvent::InputClosed => {
                    input_open = false;
                    drain_deadline = Some(tokio::time::Instant::now() + options.drain_timeout);
                }
                _ => {}
            }
        }
        if write.is_empty() {
            if let Some(bytes) = session.poll_transmit() {
                write.push_back(bytes);
                write_offset = 0;
            }
        }
        if !input_open && tasks.is_empty() && write.is_empty() {
            break;
        }
        let draining_done = drain_deadline.is_some_and(|d| d <= tokio::time::Instant::now());
        if draining_done && !tasks.is_empty() {
            for (id, (abort, cancel)) in tasks.drain() {
                cancel.cancel();
                abort.abort();
                session.handler_ended(&id);
                aborted_at_exit += 1;
            }
            continue;
        }
        tokio::select! {
            r = input.read(&mut buf), if input_open => {
                let now = Instant::now();
                match r {
                    Ok(n) if n > 0 => session.handle_stdin(now, &buf[..n]),
                    _ => session.handle_stdin_eof(now),
                }
            }
            done = done_rx.recv() => {
                match done {
                    Some(Done::Finished(id, result)) => {
                        tasks.remove(&id);
                        let _ = session.respond(&id, result.as_deref());
                    }
                    Some(Done::Aborted(id)) => {
                        tasks.remove(&id);
                        session.handler_ended(&id);
                    }
                    None => {}
                }
            }
            Some((method, params)) = notify_rx.recv() => {
                if let Err(e) = session.notify(&method, params.as_deref()) {
                    tracing::debug!(error = %e, "notification from handler dropped");
                }
            }
            r = write_front(&mut output, &write, write_offset), if !write.is_empty() => {
                let n = r?;
                write_offset += n;
                if write.front().is_some_and(|b| write_offset >= b.len()) {
                    write.pop_front();
                    write_offset = 0;
                    if write.is_empty() {
                        output.flush().await?;
                    }
                }
            }
            () = sleep_until_opt(drain_deadline) => {}
        }
    }
    output.flush().await?;
    Ok(ServeReport {
        metrics: session.metrics(),
        aborted_at_exit,
    })
}

async fn write_front<W: AsyncWrite + Unpin>(
    output: &mut W,
    queue: &VecDeque<Vec<u8>>,
    offset: usize,
) -> std::io::Result<usize> {
    match queue.front() {
        Some(bytes) => {
            let n = output.write(&bytes[offset..]).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            Ok(n)
        }
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
