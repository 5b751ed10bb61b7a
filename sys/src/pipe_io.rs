//! The system calls on a non-blocking pipe that the async driver makes once
//! its runtime reports readiness: one `read`, one `write`, and switching a
//! descriptor to non-blocking mode. `WouldBlock` comes back as an error of
//! that kind, for the runtime's readiness to clear.

use std::io;
use std::os::fd::BorrowedFd;

/// One `read(2)` into `buf`.
///
/// # Errors
/// What the system call returned (`WouldBlock` when nothing is ready).
pub fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    rustix::io::read(fd, buf).map_err(io::Error::from)
}

/// One `write(2)` of as much of `bytes` as the pipe takes now.
///
/// # Errors
/// What the system call returned (`WouldBlock` when the pipe is full).
pub fn write(fd: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<usize> {
    rustix::io::write(fd, bytes).map_err(io::Error::from)
}

/// Sets `O_NONBLOCK` on the descriptor (for a pipe this process owns alone,
/// such as a child's; this process's own stdio goes through
/// [`NonBlockingStdio`](crate::NonBlockingStdio), which restores the flags).
///
/// # Errors
/// `fcntl` failed.
pub fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
    let flags = fcntl_getfl(fd)?;
    fcntl_setfl(fd, flags | OFlags::NONBLOCK)?;
    Ok(())
}

/// Reaps `child` whenever it dies, on a thread of its own, so a child the
/// supervision gave up on (no exit within the drain deadline after
/// `SIGKILL`: uninterruptible sleep) does not stay a zombie. Call it only
/// after the child's [`ProcessGroup`](crate::ProcessGroup) was reaped (no
/// more signals to its id).
pub fn reap_in_background(mut child: std::process::Child) {
    let pid = child.id();
    let reaper = std::thread::Builder::new()
        .name(format!("mcp-reap-{pid}"))
        .spawn(move || {
            let _ = child.wait();
        });
    if let Err(e) = reaper {
        crate::log_relay::event(
            pid,
            crate::log_relay::Level::Warn,
            "no thread to reap the child; it stays a zombie",
            Some(e.to_string()),
        );
    }
}
