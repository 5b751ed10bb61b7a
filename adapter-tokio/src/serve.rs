//! `serve`: an MCP server on this process's stdin and stdout.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use mcp_stdio_core::basics::ClientHello;
use mcp_stdio_core::budget::ResultBudget;
use mcp_stdio_core::message::{ErrorObject, Id, Notification, RawValue, Request, INTERNAL_ERROR};
use mcp_stdio_core::serve::{ServeAction, ServeLifecycle};
use mcp_stdio_sys::log_relay::{self, Level};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

use crate::stdio::{self, sleep_until_opt, write_or_flush, Wrote};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

/// Bytes read from stdin per read call.
const STDIN_READ: usize = 64 * 1024;
/// Notifications from handlers waiting for the writer.
const HANDLER_NOTIFY_QUEUE: usize = 256;

/// What a handler returns: a raw result, or a JSON-RPC error.
pub type HandlerResult = Result<Box<RawValue>, ErrorObject>;

/// A cancellation signal that reaches a handler (G7): tokio-util's
/// [`CancellationToken`] itself, so a
/// token a tokio application already holds (or a child of it) is what
/// [`RequestContext::cancel_token`] gives and [`run_helper`](crate::run_helper)
/// takes. The alias keeps the name the other adapters use.
///
/// [`CancellationToken`]: https://docs.rs/tokio-util/0.7/tokio_util/sync/struct.CancellationToken.html
pub type CancelToken = tokio_util::sync::CancellationToken;

/// What a handler gets besides its request.
#[derive(Debug, Clone)]
pub struct RequestContext {
    id: Id,
    cancel: CancelToken,
    notify: mpsc::Sender<(String, Option<Box<RawValue>>)>,
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

    /// The request's cancellation token; also pass it to
    /// [`run_helper`](crate::run_helper) so a cancel reaches the subprocess.
    /// (The handler's task is aborted on cancel too, so work that does not
    /// watch the token still stops at its next await.)
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
/// are read and written non-blocking, through tokio's reactor: a client that
/// stops reading stdout never stops this loop from reading stdin, serving
/// cancels, or ending at the drain deadline (G1). Their original flags come
/// back when `serve` returns. A terminal or a file is served through tokio's
/// blocking `stdin()`/`stdout()` instead.
///
/// # Errors
/// Writing stdout failed (the client went away): every handler was aborted.
pub async fn serve<H: Handler>(options: ServeOptions, handler: H) -> std::io::Result<ServeReport> {
    let input = stdio::Input::stdin()?;
    let output = stdio::Output::stdout()?;
    serve_io(input, output, options, handler).await
}

enum Done {
    Finished(Id, HandlerResult),
    Aborted(Id),
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
    let (done_tx, mut done_rx) = mpsc::channel::<Done>(options.get_max_concurrent().max(1));
    let (notify_tx, mut notify_rx) = mpsc::channel(HANDLER_NOTIFY_QUEUE);
    // One entry per running handler: at most `max_concurrent`.
    let mut tasks: HashMap<Id, (AbortHandle, CancelToken)> = HashMap::new();
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
                ServeAction::Cancel { id, reason } => {
                    log_relay::serve_event(
                        Level::Debug,
                        "request cancelled by the client",
                        Some(format!("id {id}, reason {reason:?}")),
                    );
                    if let Some((abort, cancel)) = tasks.get(&id) {
                        cancel.cancel();
                        abort.abort();
                    }
                }
                ServeAction::Abort(id) => {
                    if let Some((abort, cancel)) = tasks.remove(&id) {
                        cancel.cancel();
                        abort.abort();
                    }
                }
                ServeAction::Notification(n) => handler.notification(n),
                _ => {}
            }
        }
        if life.is_finished() {
            break;
        }
        let output_busy = life.pending_write().is_some() || life.flush_due();
        let deadline = life.poll_timeout().map(tokio::time::Instant::from_std);
        tokio::select! {
            r = input.read(&mut buf), if life.wants_input() => {
                let now = Instant::now();
                match r {
                    Ok(0) => life.handle_input_eof(now),
                    Ok(n) => life.handle_input(now, &buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        log_relay::serve_event(Level::Debug, "reading stdin failed; treating it as EOF", Some(e.to_string()));
                        life.handle_input_eof(now);
                    }
                }
            }
            Some(done) = done_rx.recv() => {
                let now = Instant::now();
                match done {
                    Done::Finished(id, result) => {
                        tasks.remove(&id);
                        life.handler_finished(now, &id, result.as_deref());
                    }
                    Done::Aborted(id) => {
                        tasks.remove(&id);
                        life.handler_aborted(now, &id);
                    }
                }
            }
            Some((method, params)) = notify_rx.recv() => {
                if let Err(e) = life.notify(Instant::now(), &method, params.as_deref()) {
                    log_relay::serve_event(Level::Debug, "notification from handler refused", Some(e.to_string()));
                }
            }
            r = write_or_flush(&mut output, life.pending_write()), if output_busy => {
                let now = Instant::now();
                match r {
                    Ok(Wrote::Bytes(n)) => life.handle_written(now, n),
                    Ok(Wrote::Flushed) => life.handle_flushed(now),
                    Err(e) => {
                        log_relay::serve_event(Level::Debug, "writing stdout failed; aborting every handler", Some(e.to_string()));
                        write_error = Some(e);
                        life.handle_write_failed(now);
                    }
                }
            }
            () = sleep_until_opt(deadline) => life.handle_timeout(Instant::now()),
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

/// Waits, at most `grace`, for the helper runs the handlers started to
/// finish their own shutdown (`SIGTERM`, grace, `SIGKILL`, drain) and write
/// their final records; returns how many are still going.
async fn wait_for_helpers(grace: std::time::Duration) -> u64 {
    let end = tokio::time::Instant::now() + grace;
    while mcp_stdio_sys::helper_owners::live() > 0 && tokio::time::Instant::now() < end {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    mcp_stdio_sys::helper_owners::live() as u64
}
