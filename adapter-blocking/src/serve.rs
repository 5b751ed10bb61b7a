//! `serve`: the driver's serve loop ([`mcp_stdio_async::serve_io`]) on the
//! calling thread in a [`Mio`] reactor, handlers plain functions on the
//! runtime's pool of threads (`mcp-stdio-handler`). A handler thread cannot
//! be aborted: a cancel (G7) sets its [`CancelToken`] and suppresses its
//! response; its slot counts against `max_concurrent` until it returns.

use std::future::Future;
use std::io::{self, Read, Write};

use mcp_stdio_async::serve_io as serve_loop;
use mcp_stdio_async::stdio::{Stdin, Stdout, ThreadReader, ThreadWriter};
use mcp_stdio_async::{Sink, Source};
use mcp_stdio_core::{ErrorObject, Notification, RawValue, Request};

use crate::runtime::Mio;
use mcp_stdio_async::wait::wait;

/// What a handler returns: a raw result, or a JSON-RPC error.
pub type HandlerResult = Result<Box<RawValue>, ErrorObject>;

pub use mcp_stdio_core::{ServeEnd, ServeOptions, ServeReport};

type Served = io::Result<ServeReport>;

/// A cancellation flag that reaches a handler (G7): the driver's token
/// ([`mcp_stdio_async::CancelToken`]: `cancel`, `is_cancelled`, a blocking
/// `wait_timeout`, `child_token`) with a blocking [`cancelled`](Self::cancelled).
/// Every clone sees the same flag; waits wake as soon as it is set.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(mcp_stdio_async::CancelToken);

impl CancelToken {
    /// A token not yet cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Blocks until the token is cancelled.
    pub fn cancelled(&self) {
        self.0.wait();
    }
}

impl std::ops::Deref for CancelToken {
    type Target = mcp_stdio_async::CancelToken;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

/// What a handler gets besides its request: the driver's context
/// ([`mcp_stdio_async::RequestContext`]: `id`, `protocol_version`, `client`,
/// `result_budget`) with a blocking token and blocking notifications.
#[derive(Debug, Clone)]
pub struct RequestContext {
    inner: mcp_stdio_async::RequestContext,
    cancel: CancelToken,
}

impl std::ops::Deref for RequestContext {
    type Target = mcp_stdio_async::RequestContext;

    fn deref(&self) -> &Self::Target {
        &self.inner
    }
}

impl RequestContext {
    /// The request's cancellation token. A thread cannot be aborted from
    /// outside: check it between steps (or wait on it), and pass it on to
    /// subprocesses and I/O the handler starts, so a cancel reaches them.
    pub fn cancel_token(&self) -> &CancelToken {
        &self.cancel
    }

    /// Sends a notification about this request to the client, blocking
    /// while the handlers' notification queue is full; nothing about a
    /// cancelled request leaves `serve` after the cancel arrived (G7).
    pub fn notify(&self, method: &str, params: Option<Box<RawValue>>) {
        wait(self.inner.notify(method, params));
    }

    /// A notification not about this request (a list change), never dropped
    /// for this request's cancel or end.
    pub fn notify_server_wide(&self, method: &str, params: Option<Box<RawValue>>) {
        wait(self.inner.notify_server_wide(method, params));
    }
}

/// Handles requests and notifications for [`serve`].
pub trait Handler: Send + Sync + 'static {
    /// Handles one request, on a handler thread. On a cancel the context's
    /// token is set and the response is suppressed; return soon after.
    fn call(&self, request: Request, ctx: RequestContext) -> HandlerResult;

    /// Handles one notification (default: ignore). Runs on the loop's
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

/// A plain handler as the loop's: it runs on the pool thread of its task.
struct OnThreads<H>(H);

impl<H: Handler> mcp_stdio_async::Handler for OnThreads<H> {
    fn call(
        &self,
        request: Request,
        ctx: mcp_stdio_async::RequestContext,
    ) -> impl Future<Output = HandlerResult> + Send {
        let cancel = CancelToken(ctx.cancel_token().clone());
        let ctx = RequestContext { inner: ctx, cancel };
        std::future::ready(self.0.call(request, ctx))
    }

    fn notification(&self, notification: Notification) {
        self.0.notification(notification);
    }
}

/// Serves MCP on this process's stdin and stdout until stdin closes and
/// in-flight work drains (the driver's [`serve`](mcp_stdio_async::serve)
/// says the rest). Only protocol messages go to stdout (G13).
///
/// # Errors
/// Writing stdout failed (the client went away): every token was cancelled.
pub fn serve<H: Handler>(options: ServeOptions, handler: H) -> io::Result<ServeReport> {
    let rt = Mio::new()?;
    let (input, output) = (Stdin::new(&rt)?, Stdout::new(&rt)?);
    run(rt, (input, output), options, handler)
}

/// [`serve`] over any reader and writer, each on a thread of its own that
/// may outlive the call, blocked in a call only the peer can end: `'static`.
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
    let input = ThreadReader::new(input, "mcp-stdio-stdin")?;
    let output = ThreadWriter::new(output, "mcp-stdio-stdout")?;
    run(Mio::new()?, (input, output), options, handler)
}

/// The driver's serve loop on the calling thread.
fn run<H: Handler>(rt: Mio, io: (impl Source, impl Sink), options: ServeOptions, h: H) -> Served {
    rt.block_on(serve_loop(rt.clone(), io.0, io.1, options, OnThreads(h)))
}
