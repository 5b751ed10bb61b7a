//! The few system calls the adapter makes besides pipe I/O: process groups,
//! signals, the exit status, and (on Linux) a pidfd that makes a child's exit
//! a readiness event.

use mcp_stdio_core::process::Signal;
use mcp_stdio_core::ExitStatus;

/// Sends `signal` to process group `pgid`. A group that is already gone
/// (`ESRCH`) is not an error: that is the goal.
pub(crate) fn signal_group(pgid: u32, signal: Signal) {
    use rustix::process::{kill_process_group, Pid, Signal as Sig};
    let Some(pid) = i32::try_from(pgid).ok().and_then(Pid::from_raw) else {
        return;
    };
    // Never signal our own group: a pgid equal to ours means the child was not
    // put in its own group, and killing it would kill us.
    if rustix::process::getpgrp() == pid {
        tracing::error!(pgid, "refusing to signal our own process group");
        return;
    }
    let sig = match signal {
        Signal::Term => Sig::TERM,
        Signal::Kill => Sig::KILL,
    };
    match kill_process_group(pid, sig) {
        Ok(()) => tracing::debug!(pgid, ?signal, "signalled process group"),
        Err(rustix::io::Errno::SRCH) => {}
        Err(e) => tracing::warn!(pgid, ?signal, error = %e, "signalling process group failed"),
    }
}

/// The observed exit status in the core's terms.
pub(crate) fn exit_status(status: std::process::ExitStatus) -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return ExitStatus::Code(code);
    }
    if let Some(sig) = status.signal() {
        return ExitStatus::Signal(sig);
    }
    // Neither a code nor a signal: report what std could tell, as a code.
    ExitStatus::Code(-1)
}

/// Applies a command spec to a std command: argv, env, cwd, own process
/// group. No shell is ever involved.
pub(crate) fn command(spec: &mcp_stdio_core::CommandSpec) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(spec.get_program());
    cmd.args(spec.get_args());
    if spec.get_env_clear() {
        cmd.env_clear();
    }
    for (k, v) in spec.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    if let Some(dir) = spec.get_current_dir() {
        cmd.current_dir(dir);
    }
    cmd.process_group(0);
    cmd
}

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
