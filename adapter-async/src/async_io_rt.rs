//! The async-io runtime: async-io's reactor for the descriptors, its timers,
//! and a thread of its own (`async_io::block_on`) for each driver. The
//! descriptor and timer types are shared with `mcp-stdio-async-std`, whose
//! runtime differs only in where request handlers run.

use std::future::Future;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use crate::runtime::{BoxFuture, Interest, IoOp, IoPoll, Readiness, Runtime, Timer};

/// async-io as a [`Runtime`]: every driver on a thread of its own, on the
/// process's one async-io reactor; [`Runtime::spawn`] also runs each task on
/// a thread of its own (an executor-agnostic fallback; `mcp-stdio-async-std`
/// spawns on async-std's executor instead).
#[derive(Debug, Clone, Copy, Default)]
pub struct AsyncIo;

impl Runtime for AsyncIo {
    type Fd = async_io::Async<OwnedFd>;
    type Timer = async_io::Timer;

    fn current() -> io::Result<Self> {
        Ok(Self)
    }

    fn register(&self, fd: OwnedFd) -> io::Result<Self::Fd> {
        async_io::Async::new(fd)
    }

    fn timer(&self) -> Self::Timer {
        async_io::Timer::never()
    }

    fn spawn_driver(&self, name: String, future: BoxFuture) -> io::Result<()> {
        spawn_thread(name, future)
    }

    fn spawn(&self, future: BoxFuture) {
        if let Err(e) = spawn_thread("mcp-stdio-task".into(), future) {
            tracing::warn!(error = %e, "no thread for a task; it does not run");
        }
    }
}

/// Runs `future` on a thread of its own with `async_io::block_on`.
///
/// # Errors
/// The thread could not be started (the future is dropped).
pub fn spawn_thread(name: String, future: BoxFuture) -> io::Result<()> {
    std::thread::Builder::new()
        .name(name)
        .spawn(move || async_io::block_on(future))
        .map(drop)
}

impl Readiness for async_io::Async<OwnedFd> {
    fn poll_io(&self, cx: &mut Context<'_>, interest: Interest, op: IoOp<'_>) -> IoPoll {
        loop {
            match op(self.get_ref().as_fd()) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => return Poll::Ready(r),
            }
            // Ready once an event arrived since this task last saw `Pending`:
            // a stale readiness costs one more `WouldBlock`, never a lost wake.
            match interest {
                Interest::Read => std::task::ready!(self.poll_readable(cx))?,
                Interest::Write => std::task::ready!(self.poll_writable(cx))?,
            }
        }
    }
}

impl Timer for async_io::Timer {
    fn set(&mut self, at: Instant) {
        self.set_at(at);
    }

    fn poll_fired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(self).poll(cx).map(drop)
    }
}
