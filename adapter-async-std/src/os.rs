//! The few system calls the adapter makes outside async-std and
//! async-process: process groups and signals. Unix only; elsewhere signalling
//! a group degrades to nothing and the child is left to its own exit (see the
//! README).

use mcp_stdio_core::process::Signal;
use mcp_stdio_core::ExitStatus;

/// Sends `signal` to process group `pgid`. A group that is already gone
/// (`ESRCH`) is not an error: that is the goal.
#[cfg(unix)]
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

#[cfg(not(unix))]
pub(crate) fn signal_group(_pgid: u32, _signal: Signal) {}

/// The observed exit status in the core's terms.
pub(crate) fn exit_status(status: std::process::ExitStatus) -> ExitStatus {
    if let Some(code) = status.code() {
        return ExitStatus::Code(code);
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return ExitStatus::Signal(sig);
        }
    }
    // Neither a code nor a signal: report what std could tell, as a code.
    ExitStatus::Code(-1)
}

/// Applies a command spec to an async-process command: argv, env, cwd, own
/// process group.
///
/// `async_process::unix::CommandExt` has no `process_group`, so the command
/// is built as a `std::process::Command` (whose `process_group(0)` is safe:
/// std calls `setpgid` in the child, or uses `posix_spawn` attributes) and
/// converted; async-process keeps every setting of the std command.
pub(crate) fn command(spec: &mcp_stdio_core::CommandSpec) -> async_process::Command {
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
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    async_process::Command::from(cmd)
}
