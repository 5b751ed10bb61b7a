//! This process's stdin and stdout for [`serve`](crate::serve) and loops like it: pipes and
//! sockets non-blocking through tokio's reactor (a write never waits for the
//! client to read, G1); anything else (a terminal, a file) through tokio's
//! blocking `stdin()`/`stdout()`.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use mcp_stdio_sys::NonBlockingStdio;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

/// Stdin, as `serve` reads it.
#[derive(Debug)]
pub struct Input {
    kind: InputKind,
    /// Restores the descriptor's flags on drop, after `kind` is gone.
    _flags: Option<NonBlockingStdio>,
}

#[derive(Debug)]
enum InputKind {
    #[cfg(unix)]
    Pipe(tokio::net::unix::pipe::Receiver),
    #[cfg(unix)]
    Socket(tokio::net::UnixStream),
    Blocking(tokio::io::Stdin),
}

/// Stdout, as `serve` writes it.
#[derive(Debug)]
pub struct Output {
    kind: OutputKind,
    /// Restores the descriptor's flags on drop, after `kind` is gone.
    _flags: Option<NonBlockingStdio>,
}

#[derive(Debug)]
enum OutputKind {
    #[cfg(unix)]
    Pipe(tokio::net::unix::pipe::Sender),
    #[cfg(unix)]
    Socket(tokio::net::UnixStream),
    Blocking(tokio::fs::File),
}

#[cfg(unix)]
fn socket(fd: std::os::fd::OwnedFd) -> io::Result<tokio::net::UnixStream> {
    tokio::net::UnixStream::from_std(std::os::unix::net::UnixStream::from(fd))
}

impl Input {
    /// This process's stdin, non-blocking when it is a pipe or a socket.
    ///
    /// # Errors
    /// Duplicating the descriptor or setting its flags failed.
    pub fn stdin() -> io::Result<Self> {
        #[cfg(unix)]
        if let Some(flags) = NonBlockingStdio::stdin()? {
            use mcp_stdio_sys::StdioKind;
            let fd = flags.try_clone_fd()?;
            let kind = match flags.kind() {
                StdioKind::Socket => InputKind::Socket(socket(fd)?),
                _ => InputKind::Pipe(tokio::net::unix::pipe::Receiver::from_owned_fd_unchecked(
                    fd,
                )?),
            };
            return Ok(Self {
                kind,
                _flags: Some(flags),
            });
        }
        Ok(Self {
            kind: InputKind::Blocking(tokio::io::stdin()),
            _flags: None,
        })
    }
}

impl Output {
    /// This process's stdout, non-blocking when it is a pipe or a socket.
    ///
    /// # Errors
    /// Duplicating the descriptor or setting its flags failed.
    pub fn stdout() -> io::Result<Self> {
        #[cfg(unix)]
        if let Some(flags) = NonBlockingStdio::stdout()? {
            use mcp_stdio_sys::StdioKind;
            let fd = flags.try_clone_fd()?;
            let kind = match flags.kind() {
                StdioKind::Socket => OutputKind::Socket(socket(fd)?),
                _ => OutputKind::Pipe(tokio::net::unix::pipe::Sender::from_owned_fd_unchecked(fd)?),
            };
            return Ok(Self {
                kind,
                _flags: Some(flags),
            });
        }
        Ok(Self {
            // Not `tokio::io::stdout()`: it is std's, which takes EBADF for success.
            kind: OutputKind::Blocking(tokio::fs::File::from_std(mcp_stdio_sys::stdout_file()?)),
            _flags: None,
        })
    }
}

impl AsyncRead for Input {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().kind {
            #[cfg(unix)]
            InputKind::Pipe(p) => Pin::new(p).poll_read(cx, buf),
            #[cfg(unix)]
            InputKind::Socket(s) => Pin::new(s).poll_read(cx, buf),
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
            OutputKind::Pipe(p) => Pin::new(p).poll_write(cx, bytes),
            #[cfg(unix)]
            OutputKind::Socket(s) => Pin::new(s).poll_write(cx, bytes),
            OutputKind::Blocking(s) => Pin::new(s).poll_write(cx, bytes),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().kind {
            #[cfg(unix)]
            OutputKind::Pipe(p) => Pin::new(p).poll_flush(cx),
            #[cfg(unix)]
            OutputKind::Socket(s) => Pin::new(s).poll_flush(cx),
            OutputKind::Blocking(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().kind {
            #[cfg(unix)]
            OutputKind::Pipe(p) => Pin::new(p).poll_shutdown(cx),
            // Shutting down a socket's write half would end the client's input too early.
            #[cfg(unix)]
            OutputKind::Socket(_) => Poll::Ready(Ok(())),
            OutputKind::Blocking(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// What the output side of a loop did: some bytes of the pending message
/// went out, or (nothing pending) the writer was flushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wrote {
    /// This many bytes were written.
    Bytes(usize),
    /// The writer was flushed.
    Flushed,
}

/// Writes some of `pending`, or flushes when nothing is pending: the output
/// branch of a loop that must never wait on a write alone (G1). Cancel-safe:
/// dropped unfinished, it has moved no bytes. `EINTR` is retried; a write
/// of zero bytes is `WriteZero`.
///
/// # Errors
/// The write or the flush failed.
pub async fn write_or_flush<W: AsyncWrite + Unpin>(
    output: &mut W,
    pending: Option<&[u8]>,
) -> io::Result<Wrote> {
    match pending {
        Some(bytes) => loop {
            match output.write(bytes).await {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => return Ok(Wrote::Bytes(n)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        },
        None => output.flush().await.map(|()| Wrote::Flushed),
    }
}

/// Completes at `deadline`, or never without one: the timer branch of a loop
/// that arms one timer for the core's `poll_timeout()`.
pub async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
