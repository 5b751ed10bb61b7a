//! `serve` on tokio: the driver's serve loop ([`mcp_stdio_async::serve`])
//! with handlers as tokio tasks.

use std::io;

use mcp_stdio_async::Runtime;
pub use mcp_stdio_async::{
    CancelToken, Handler, HandlerResult, RequestContext, ServeEnd, ServeOptions, ServeReport,
};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::runtime::{Tokio, TokioIo};

/// Serves MCP on this process's stdin and stdout until stdin closes and
/// in-flight work drains (bounded by `drain_timeout`); each request in a
/// tokio task with a [`CancelToken`]. Only protocol messages go to stdout
/// (G13); log with `tracing` to stderr. See [`mcp_stdio_async::serve`] for
/// the basics `serve` answers and how stdin and stdout are read and written.
///
/// # Errors
/// Writing stdout failed (the client went away): every handler was aborted;
/// or this is not called inside a tokio runtime.
pub async fn serve<H: Handler>(options: ServeOptions, handler: H) -> io::Result<ServeReport> {
    mcp_stdio_async::serve::<Tokio, H>(options, handler).await
}

/// [`serve`] over any tokio reader and writer (a pipe, a socket, a test
/// harness). The loop never waits for a write or a flush alone (G1).
///
/// # Errors
/// Writing or flushing `output` failed: every handler was aborted.
pub async fn serve_io<R, W, H>(
    input: R,
    output: W,
    options: ServeOptions,
    handler: H,
) -> io::Result<ServeReport>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
    H: Handler,
{
    let rt = Tokio::current()?;
    mcp_stdio_async::serve_io(rt, TokioIo(input), TokioIo(output), options, handler).await
}
