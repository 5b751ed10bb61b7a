//! The system calls the adapter makes besides pipe I/O: process groups,
//! signals and the exit status come from `mcp-stdio-sys`; here is only the
//! pidfd (Linux) that makes a child's exit a readiness event.

pub(crate) use mcp_stdio_sys::{command, exit_status, signal_group};

/// A file descriptor that becomes readable when process `pid` exits, so the
/// exit wakes the poller. `None` where there is none (not Linux, a kernel
/// older than 5.3, a seccomp filter): the caller then polls `try_wait` on a
/// short tick.
#[cfg(target_os = "linux")]
pub(crate) fn exit_fd(pid: u32) -> Option<std::os::fd::OwnedFd> {
    use rustix::process::{pidfd_open, Pid, PidfdFlags};
    let pid = i32::try_from(pid).ok().and_then(Pid::from_raw)?;
    match pidfd_open(pid, PidfdFlags::empty()) {
        Ok(fd) => Some(fd),
        Err(e) => {
            tracing::debug!(%pid, error = %e, "no pidfd; polling the child's exit on a tick");
            None
        }
    }
}

/// No pidfd outside Linux: the caller polls `try_wait` on a short tick.
#[cfg(not(target_os = "linux"))]
pub(crate) fn exit_fd(_pid: u32) -> Option<std::os::fd::OwnedFd> {
    None
}
