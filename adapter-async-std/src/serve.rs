//! `serve` on async-std: the driver's serve loop ([`mcp_stdio_async::serve`])
//! with each request a task on async-std's executor.

use std::io;

use mcp_stdio_async::FuturesIo;
pub use mcp_stdio_async::{
    CancelToken, Handler, HandlerResult, RequestContext, ServeEnd, ServeOptions, ServeReport,
};

use crate::runtime::AsyncStd;

/// Serves MCP on this process's stdin and stdout until stdin closes and
/// in-flight work drains (bounded by `drain_timeout`); each request a task
/// on async-std's executor, with a [`CancelToken`]. Only protocol messages
/// go to stdout (G13); log with `tracing` to stderr. See
/// [`mcp_stdio_async::serve`] for the basics `serve` answers and how stdin
/// and stdout are read and written.
///
/// # Errors
/// Writing stdout failed (the client went away): every handler was aborted.
pub async fn serve<H: Handler>(options: ServeOptions, handler: H) -> io::Result<ServeReport> {
    mcp_stdio_async::serve::<AsyncStd, H>(options, handler).await
}

/// [`serve`] over any `futures-io` reader and writer (which need not be
/// `Send` or `'static`). The loop never waits for a write or a flush alone (G1).
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
    R: futures_lite::AsyncRead + Unpin,
    W: futures_lite::AsyncWrite + Unpin,
    H: Handler,
{
    mcp_stdio_async::serve_io(
        AsyncStd,
        FuturesIo(input),
        FuturesIo(output),
        options,
        handler,
    )
    .await
}
