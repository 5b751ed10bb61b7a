//! The system calls the adapter makes besides pipe I/O come from
//! `mcp-stdio-sys`: the command in its own group, the exit status, and
//! [`ProcessGroup`](mcp_stdio_sys::ProcessGroup) for the group's signals, the
//! non-reaping exit observation and the pidfd (Linux) that makes the exit a
//! readiness event.

pub(crate) use mcp_stdio_sys::command;

use std::os::fd::{AsRawFd, OwnedFd};

use mio::unix::SourceFd;

/// Takes `source` out of the poll and drops it (closing the pipe); nothing
/// is ready on it any more.
pub(crate) fn close<S: mio::event::Source>(
    poll: &mio::Poll,
    source: &mut Option<S>,
    ready: &mut bool,
) {
    if let Some(mut s) = source.take() {
        let _ = poll.registry().deregister(&mut s);
    }
    *ready = false;
}

/// Takes the exit's pidfd out of the poll and closes it.
pub(crate) fn close_fd(poll: &mio::Poll, fd: &mut Option<OwnedFd>) {
    if let Some(fd) = fd.take() {
        let _ = poll.registry().deregister(&mut SourceFd(&fd.as_raw_fd()));
    }
}

/// One read of a ready pipe: `None` when there is nothing to read now (no
/// pipe, not ready, or `WouldBlock`, which clears `ready`); else what the
/// read returned, for the machine's `handle_*_result` (the core's rule).
pub(crate) fn read_ready(
    pipe: &mut Option<mio::unix::pipe::Receiver>,
    ready: &mut bool,
    buf: &mut [u8],
) -> Option<std::io::Result<usize>> {
    let r = pipe.as_mut().filter(|_| *ready)?;
    match std::io::Read::read(r, buf) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            *ready = false;
            None
        }
        other => Some(other),
    }
}

/// The leader's pidfd (Linux), registered readable under `token`: the exit
/// becomes a readiness event; `None` where there is none or it cannot be
/// polled (the loop then looks for the exit on a tick).
pub(crate) fn register_exit_fd(
    registry: &mio::Registry,
    fd: Option<OwnedFd>,
    token: mio::Token,
    pid: u32,
) -> Option<OwnedFd> {
    let fd = fd?;
    match registry.register(
        &mut SourceFd(&fd.as_raw_fd()),
        token,
        mio::Interest::READABLE,
    ) {
        Ok(()) => Some(fd),
        Err(e) => {
            tracing::debug!(pid, error = %e, "pidfd not pollable; polling the exit on a tick");
            None
        }
    }
}
