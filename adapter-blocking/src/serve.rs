//! `serve`: an MCP server on this process's stdin and stdout, with threads:
//! the driver's serve loop ([`mcp_stdio_async::serve_io`]) on the calling
//! thread in a [`Mio`] reactor (stdin and stdout non-blocking when they are
//! pipes or sockets, G1), handlers plain functions on a pool of threads
//! (`mcp-stdio-handler`, reused while idle; the core admits at most
//! `max_concurrent` requests, so a request never waits for one).
//!
//! A thread cannot be aborted from outside: on a cancel (G7) the request's
//! [`CancelToken`] is set and the session suppresses the handler's response
//! whatever it returns; its slot counts against `max_concurrent` until it
//! returns. Long handlers should check [`CancelToken::is_cancelled`] between
//! steps, or wait with [`CancelToken::wait_timeout`] instead of sleeping,
//! and pass the token on. Handlers still running when the drain after stdin
//! EOF times out get their tokens set and are left to finish
//! ([`ServeReport::aborted_at_exit`]).

use std::future::Future;
use std::io::{self, Read, Write};

use mcp_stdio_async::stdio::{Stdin, Stdout, ThreadReader, ThreadWriter};
use mcp_stdio_async::{Sink, Source};
use mcp_stdio_core::{ErrorObject, Notification, RawValue, Request};

use crate::runtime::Mio;
use mcp_stdio_async::wait::wait;

/// What a handler returns: a raw result, or a JSON-RPC error.
pub type HandlerResult = Result<Box<RawValue>, ErrorObject>;

pub use mcp_stdio_core::{ServeEnd, ServeOptions, ServeReport};

/// A cancellation flag that reaches a handler (G7): the async adapters'
/// token ([`mcp_stdio_async::CancelToken`], whose methods it has: `cancel`,
/// `is_cancelled`, `wait_timeout`, `child_token`) with a blocking
/// [`cancelled`](Self::cancelled).
///
/// Cheap to clone; every clone sees the same flag. Blocking waits
/// ([`cancelled`](Self::cancelled), `wait_timeout`) wake as soon as it is
/// set.
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

impl mcp_stdio_async::CancelSignal for CancelToken {
    fn is_cancelled(&self) -> bool {
        self.0.is_cancelled()
    }

    fn cancelled_owned(&self) -> mcp_stdio_async::Cancelled {
        mcp_stdio_async::CancelSignal::cancelled_owned(&self.0)
    }
}

/// What a handler gets besides its request: the driver's context
/// ([`mcp_stdio_async::RequestContext`], whose `id`, `protocol_version`,
/// `client` and `result_budget` it has), with a blocking token and blocking
/// notifications.
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
/// in-flight work drains (see the driver's [`serve`](mcp_stdio_async::serve):
/// what it answers itself, how it reads and writes). Only protocol messages
/// go to stdout (G13).
///
/// # Errors
/// Writing stdout failed (the client went away): every handler's token was
/// cancelled.
pub fn serve<H: Handler>(options: ServeOptions, handler: H) -> io::Result<ServeReport> {
    let rt = Mio::new()?;
    let input = Stdin::new(&rt)?;
    let output = Stdout::new(&rt)?;
    run(&rt, input, output, options, handler)
}

/// The driver's serve loop on `rt`, on the calling thread.
fn run<I: Source, O: Sink, H: Handler>(
    rt: &Mio,
    input: I,
    output: O,
    options: ServeOptions,
    handler: H,
) -> io::Result<ServeReport> {
    let serving = mcp_stdio_async::serve_io(rt.clone(), input, output, options, OnThreads(handler));
    rt.block_on(serving)
}

/// [`serve`] over any reader and writer (a pipe, a socket, a test
/// harness), each on a thread of its own that outlives the call while
/// blocked in a call only the client can end — hence `'static`.
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
    run(&Mio::new()?, input, output, options, handler)
}
