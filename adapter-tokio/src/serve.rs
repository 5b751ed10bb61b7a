//! `serve` on tokio: the driver's serve loop ([`mcp_stdio_async::serve`])
//! with handlers as tokio tasks.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

pub use mcp_stdio_async::{
    CancelToken, Handler, HandlerResult, RequestContext, ServeEnd, ServeOptions, ServeReport,
};
use mcp_stdio_async::{Runtime, Sink, Source};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::runtime::Tokio;

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
    mcp_stdio_async::serve_io(rt, Io(input), Io(output), options, handler).await
}

/// A tokio reader or writer as the loop's [`Source`] or [`Sink`].
struct Io<T>(T);

impl<T: AsyncRead + Unpin> Source for Io<T> {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let mut buf = ReadBuf::new(buf);
        Pin::new(&mut self.0)
            .poll_read(cx, &mut buf)
            .map_ok(|()| buf.filled().len())
    }
}

impl<T: AsyncWrite + Unpin> Sink for Io<T> {
    fn poll_write(&mut self, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, bytes)
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
}
