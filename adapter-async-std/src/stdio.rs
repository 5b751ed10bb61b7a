//! This process's stdin and stdout for [`serve`](crate::serve): pipes and
//! sockets non-blocking through async-io's reactor (a write never waits for
//! the client to read, G1); anything else (a terminal, a file) through
//! async-std's `stdin()`/`stdout()`, which make blocking calls on its pool.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::{AsyncRead, AsyncWrite};
use mcp_stdio_sys::NonBlockingStdio;

/// Stdin, as `serve` reads it.
pub(crate) struct Input {
    kind: InputKind,
    /// Restores the descriptor's flags on drop, after `kind` is gone.
    _flags: Option<NonBlockingStdio>,
}

enum InputKind {
    #[cfg(unix)]
    Pollable(async_io::Async<std::fs::File>),
    Blocking(async_std::io::Stdin),
}

/// Stdout, as `serve` writes it.
pub(crate) struct Output {
    kind: OutputKind,
    /// Restores the descriptor's flags on drop, after `kind` is gone.
    _flags: Option<NonBlockingStdio>,
}

enum OutputKind {
    #[cfg(unix)]
    Pollable(async_io::Async<std::fs::File>),
    Blocking(async_std::fs::File),
}

/// A pipe or socket as a `File` on async-io's reactor: `read`/`write` on
/// the descriptor is all `File` does, for a pipe and a socket alike.
#[cfg(unix)]
fn pollable(flags: &NonBlockingStdio) -> io::Result<async_io::Async<std::fs::File>> {
    async_io::Async::new_nonblocking(std::fs::File::from(flags.try_clone_fd()?))
}

impl Input {
    pub(crate) fn stdin() -> io::Result<Self> {
        #[cfg(unix)]
        if let Some(flags) = NonBlockingStdio::stdin()? {
            return Ok(Self {
                kind: InputKind::Pollable(pollable(&flags)?),
                _flags: Some(flags),
            });
        }
        Ok(Self {
            kind: InputKind::Blocking(async_std::io::stdin()),
            _flags: None,
        })
    }
}

impl Output {
    pub(crate) fn stdout() -> io::Result<Self> {
        #[cfg(unix)]
        if let Some(flags) = NonBlockingStdio::stdout()? {
            return Ok(Self {
                kind: OutputKind::Pollable(pollable(&flags)?),
                _flags: Some(flags),
            });
        }
        Ok(Self {
            // Not `async_std::io::stdout()`: it is std's, which takes EBADF for success.
            kind: OutputKind::Blocking(async_std::fs::File::from(mcp_stdio_sys::stdout_file()?)),
            _flags: None,
        })
    }
}

impl AsyncRead for Input {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().kind {
            #[cfg(unix)]
            InputKind::Pollable(p) => Pin::new(p).poll_read(cx, buf),
            InputKind::Blocking(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Output {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().kind {
            #[cfg(unix)]
            OutputKind::Pollable(p) => Pin::new(p).poll_write(cx, bytes),
            OutputKind::Blocking(s) => Pin::new(s).poll_write(cx, bytes),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().kind {
            // A pipe holds nothing back.
            #[cfg(unix)]
            OutputKind::Pollable(_) => Poll::Ready(Ok(())),
            OutputKind::Blocking(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().kind {
            #[cfg(unix)]
            OutputKind::Pollable(_) => Poll::Ready(Ok(())),
            OutputKind::Blocking(s) => Pin::new(s).poll_close(cx),
        }
    }
}
