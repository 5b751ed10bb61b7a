//! async-std as the driver's [`Runtime`]: async-io's reactor and timers (the
//! foundation async-std and smol share), each driver on a thread of its own
//! (`async_io::block_on`, on the process's one reactor), request handlers on
//! async-std's executor.
//!
//! A thread, not a task, for a driver: the executor moved a driver task
//! between its worker threads from one wake-up to the next, about a third of
//! a round trip's latency; on its own thread it stays put, and code that
//! blocks every executor thread cannot pause it.

use std::io;
use std::os::fd::OwnedFd;

use mcp_stdio_async::{AsyncIo, BoxFuture, Runtime};

/// async-std, as the drivers run on it.
#[derive(Debug, Clone, Copy, Default)]
pub struct AsyncStd;

impl Runtime for AsyncStd {
    type Fd = async_io::Async<OwnedFd>;
    type Timer = async_io::Timer;

    fn current() -> io::Result<Self> {
        Ok(Self)
    }

    fn register(&self, fd: OwnedFd) -> io::Result<Self::Fd> {
        AsyncIo.register(fd)
    }

    fn timer(&self) -> Self::Timer {
        AsyncIo.timer()
    }

    fn spawn_driver(&self, name: String, future: BoxFuture) -> io::Result<()> {
        mcp_stdio_async::spawn_thread(name, future)
    }

    fn spawn(&self, future: BoxFuture) {
        drop(async_std::task::spawn(future));
    }
}
