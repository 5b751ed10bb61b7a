//! A non-blocking pipe (or socket) registered with a runtime: reads and
//! writes are one system call each, made when the runtime reports
//! readiness, never a wait for the whole message (G1).

use std::fmt;
use std::io;
use std::os::fd::OwnedFd;
use std::task::{Context, Poll};

use mcp_stdio_sys::pipe_io;

use crate::runtime::{Interest, Readiness, Runtime};

/// One end of a pipe, non-blocking, in the runtime's reactor. Dropping it
/// closes the descriptor (for a child's stdin: the child sees EOF).
pub struct Pipe<R: Runtime> {
    fd: R::Fd,
}

impl<R: Runtime> fmt::Debug for Pipe<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipe").field("fd", &self.fd).finish()
    }
}

impl<R: Runtime> Pipe<R> {
    /// Makes `fd` non-blocking and registers it with `rt`.
    ///
    /// # Errors
    /// `fcntl` failed, or the reactor refused the descriptor.
    pub fn new(rt: &R, fd: impl Into<OwnedFd>) -> io::Result<Self> {
        let fd = fd.into();
        pipe_io::set_nonblocking(std::os::fd::AsFd::as_fd(&fd))?;
        Ok(Self {
            fd: rt.register(fd)?,
        })
    }

    /// One read into `buf`, when bytes (or the end) are there.
    pub fn poll_read(&self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        self.fd
            .poll_io(cx, Interest::Read, &mut |fd| pipe_io::read(fd, buf))
    }

    /// One write of what the pipe takes of `bytes` now.
    pub fn poll_write(&self, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        self.fd
            .poll_io(cx, Interest::Write, &mut |fd| pipe_io::write(fd, bytes))
    }
}

/// A listening Unix socket in the runtime's reactor: each accept is one
/// system call, made when the runtime reports a connection waiting, and
/// gives a non-blocking descriptor (wrap it in a [`Pipe`]).
#[cfg(unix)]
pub struct Listener<R: Runtime> {
    fd: R::Fd,
}

#[cfg(unix)]
impl<R: Runtime> fmt::Debug for Listener<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listener").field("fd", &self.fd).finish()
    }
}

#[cfg(unix)]
impl<R: Runtime> Listener<R> {
    /// Makes `listener` non-blocking and registers it with `rt`.
    ///
    /// # Errors
    /// `fcntl` failed, or the reactor refused the descriptor.
    pub fn new(rt: &R, listener: std::os::unix::net::UnixListener) -> io::Result<Self> {
        listener.set_nonblocking(true)?;
        Ok(Self {
            fd: rt.register(OwnedFd::from(listener))?,
        })
    }

    /// The next waiting connection, when one is there.
    pub fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<OwnedFd>> {
        let mut accepted = None;
        let r = self.fd.poll_io(cx, Interest::Read, &mut |fd| {
            accepted = Some(mcp_stdio_sys::runtime_dir::accept(fd)?);
            Ok(0)
        });
        r.map(|r| {
            r.and_then(|_| {
                accepted
                    .take()
                    .ok_or_else(|| io::ErrorKind::WouldBlock.into())
            })
        })
    }
}
