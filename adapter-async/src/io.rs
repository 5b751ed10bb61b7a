//! What `serve` reads and writes: poll-style, one system call (or one hand
//! over) per poll, so the loop that drives them never waits on one while it
//! could serve the other (G1).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::pipe::Pipe;
use crate::runtime::Runtime;

/// A byte stream `serve` reads (stdin, a socket, a test harness).
pub trait Source {
    /// One read into `buf`; `Ok(0)` is the end.
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>>;
}

/// A byte stream `serve` writes (stdout, a socket, a test harness).
pub trait Sink {
    /// One write of what the stream takes of `bytes` now.
    fn poll_write(&mut self, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>>;

    /// Pushes out what the writer holds back (a pipe holds nothing).
    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

impl<R: Runtime> Source for Pipe<R> {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        Self::poll_read(self, cx, buf)
    }
}

impl<R: Runtime> Sink for Pipe<R> {
    fn poll_write(&mut self, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        Self::poll_write(self, cx, bytes)
    }

    fn poll_flush(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A `futures-io` reader or writer (async-std's, smol's, futures') as a
/// [`Source`] or [`Sink`].
#[derive(Debug)]
pub struct FuturesIo<T>(pub T);

impl<T: futures_lite::AsyncRead + Unpin> Source for FuturesIo<T> {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<T: futures_lite::AsyncWrite + Unpin> Sink for FuturesIo<T> {
    fn poll_write(&mut self, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, bytes)
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
}
