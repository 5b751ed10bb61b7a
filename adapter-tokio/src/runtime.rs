//! tokio as the driver's [`Runtime`]: tokio's reactor (`AsyncFd`) for the
//! descriptors, its timers, and a task for each driver.

use std::future::Future;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use mcp_stdio_async::{BoxFuture, Interest, IoOp, IoPoll, Readiness, Runtime, Sink, Source, Timer};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The tokio runtime the caller runs in (a handle to it).
#[derive(Debug, Clone)]
pub struct Tokio(tokio::runtime::Handle);

impl Runtime for Tokio {
    type Fd = Fd;
    type Timer = Sleep;

    fn current() -> io::Result<Self> {
        tokio::runtime::Handle::try_current()
            .map(Self)
            .map_err(io::Error::other)
    }

    fn register(&self, fd: OwnedFd) -> io::Result<Fd> {
        let _entered = self.0.enter();
        // Deprecated since tokio 1.54 for types that may swap or close their fd
        // (the safe replacement is `unsafe`); an `OwnedFd` owned by the
        // `AsyncFd` does neither.
        #[allow(deprecated)]
        AsyncFd::new(fd).map(Fd)
    }

    fn timer(&self) -> Sleep {
        let _entered = self.0.enter();
        // Not armed: the far future (`set` moves it).
        let never = tokio::time::Instant::now() + Duration::from_secs(60 * 60 * 24 * 365);
        Sleep(Box::pin(tokio::time::sleep_until(never)))
    }

    fn spawn_driver(&self, _name: String, future: BoxFuture) -> io::Result<()> {
        self.0.spawn(future);
        Ok(())
    }

    fn spawn(&self, future: BoxFuture) {
        self.0.spawn(future);
    }
}

/// A descriptor in tokio's reactor.
#[derive(Debug)]
pub struct Fd(AsyncFd<OwnedFd>);

impl Readiness for Fd {
    fn poll_io(&self, cx: &mut Context<'_>, interest: Interest, op: IoOp<'_>) -> IoPoll {
        loop {
            let mut guard = match interest {
                Interest::Read => std::task::ready!(self.0.poll_read_ready(cx))?,
                Interest::Write => std::task::ready!(self.0.poll_write_ready(cx))?,
            };
            // `WouldBlock` clears the readiness and waits again.
            if let Ok(r) = guard.try_io(|fd| op(fd.get_ref().as_fd())) {
                return Poll::Ready(r);
            }
        }
    }
}

/// A tokio timer.
#[derive(Debug)]
pub struct Sleep(Pin<Box<tokio::time::Sleep>>);

impl Timer for Sleep {
    fn set(&mut self, at: Instant) {
        self.0.as_mut().reset(tokio::time::Instant::from_std(at));
    }

    fn poll_fired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

/// A tokio reader or writer as a serve loop's [`Source`] or [`Sink`].
#[derive(Debug)]
pub struct TokioIo<T>(pub T);

impl<T: AsyncRead + Unpin> Source for TokioIo<T> {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let mut buf = ReadBuf::new(buf);
        Pin::new(&mut self.0)
            .poll_read(cx, &mut buf)
            .map_ok(|()| buf.filled().len())
    }
}

impl<T: AsyncWrite + Unpin> Sink for TokioIo<T> {
    fn poll_write(&mut self, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, bytes)
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
}
