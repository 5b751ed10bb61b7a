//! # mcp-stdio-sys
//!
//! The few system calls every mcp-stdio adapter (and the CLI) makes besides
//! pipe I/O, written once: turning the core's `CommandSpec` into a command in
//! its own process group ([`command`]), signalling that group only while its
//! id is still ours and observing the leader's exit without reaping it
//! ([`ProcessGroup`]), reading an exit status in the core's terms, spawning a
//! server tied to this process's life
//! ([`spawn_tied`]), switching this process's stdin/stdout pipes to
//! non-blocking mode for `serve` ([`NonBlockingStdio`]), writing this
//! process's stderr without ever blocking ([`NonBlockingStderr`]),
//! confining a child in its `mcp_stdio_core::Sandbox`
//! ([`sandbox`], Linux), and keeping the per-user runtime folder and the
//! guard's status sockets in it ([`runtime_dir`], Unix). The core decides
//! when; this crate does it. No async runtime. The `unsafe` blocks are the
//! `pre_exec` hooks (the request to kill the child when we die, and the
//! sandbox's confinement) and the `unshare` inside the latter.
//!
//! ## Example: a server in its own group, in a sandbox
//!
//! ```no_run
//! use mcp_stdio_core::{CommandSpec, Sandbox, Signal};
//!
//! fn main() -> std::io::Result<()> {
//!     let mut spec = CommandSpec::new("/usr/bin/my-server");
//!     let mut sandbox = Sandbox::new();
//!     sandbox.read_exec("/usr").read("/etc").write("/tmp/work");
//!     // What this kernel would enforce, before anything runs.
//!     let plan = mcp_stdio_sys::sandbox::plan(&sandbox);
//!     eprintln!("Landlock ABI {}, gaps {:?}", plan.landlock_abi, plan.gaps);
//!     spec.sandbox(sandbox);
//!     // Piped, in a process group of its own, killed if this process dies (Linux).
//!     let mut child = mcp_stdio_sys::spawn_piped(&spec)?;
//!     let group = mcp_stdio_sys::ProcessGroup::new(child.id());
//!     group.signal(Signal::Term);
//!     let status = child.wait()?;
//!     eprintln!("{:?}", mcp_stdio_sys::exit_status(status));
//!     Ok(())
//! }
//! ```

// `deny`, not `forbid`: the one `pre_exec` in `tied` allows it locally.
#![deny(unsafe_code)]
#![deny(missing_docs)]

mod group;
mod stderr;
mod stdio;
mod tied;

pub use group::{LeaderState, ProcessGroup, Signalled, TryWait, EXIT_POLL_TICK};
pub use stderr::{
    drain_stderr, stderr_dropped_bytes, write_stderr, NonBlockingStderr, STDERR_QUEUE_BYTES,
};
pub use stdio::{stdout_file, NonBlockingStdio, StdioKind};
pub use tied::{spawn_piped, spawn_tied};
pub mod helper_owners;
pub mod log_relay;
#[cfg(unix)]
pub mod pipe_io;
pub mod poll_once;
#[cfg(unix)]
pub mod runtime_dir;
pub mod sandbox;

use mcp_stdio_core::Signal;
use mcp_stdio_core::{CommandSpec, ExitStatus};

/// A `std` command for `spec`: argv, environment and working directory, in a
/// process group of its own (so a group signal reaches its grandchildren),
/// and in `spec`'s sandbox if it has one ([`sandbox::apply`]). No shell is
/// ever involved. tokio and async-process can convert it with `From`,
/// keeping every setting.
///
/// # Errors
/// Only with a sandbox: it is invalid, the kernel cannot enforce it and
/// enforcement is required, or one of its paths cannot be opened.
pub fn command(spec: &CommandSpec) -> std::io::Result<std::process::Command> {
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
    // Safe: std calls `setpgid` in the child (or uses posix_spawn attributes).
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    if let Some(sandbox) = spec.get_sandbox() {
        sandbox::apply(&mut cmd, sandbox)?;
    }
    Ok(cmd)
}

/// Sends `signal` to process group `pgid`: only through [`ProcessGroup`],
/// which knows whether the id is still ours. A group that is already gone
/// (`ESRCH`) is not an error: that is the goal. Our own group is never
/// signalled: a pgid equal to ours means the child was not put in a group of
/// its own, and killing it would kill us.
#[cfg(unix)]
fn kill_group(pgid: u32, signal: Signal) -> Signalled {
    use rustix::process::{kill_process_group, Pid, Signal as Sig};
    let Some(pid) = i32::try_from(pgid).ok().and_then(Pid::from_raw) else {
        return Signalled::Failed;
    };
    if rustix::process::getpgrp() == pid {
        tracing::error!(pgid, "refusing to signal our own process group");
        return Signalled::Failed;
    }
    let sig = match signal {
        Signal::Term => Sig::TERM,
        Signal::Kill => Sig::KILL,
        Signal::Interrupt => Sig::INT,
        Signal::Hangup => Sig::HUP,
    };
    match kill_process_group(pid, sig) {
        Ok(()) => {
            tracing::debug!(pgid, ?signal, "signalled process group");
            Signalled::Sent
        }
        Err(rustix::io::Errno::SRCH) => Signalled::Gone,
        Err(e) => {
            tracing::warn!(pgid, ?signal, error = %e, "signalling process group failed");
            Signalled::Failed
        }
    }
}

/// Without process groups there is nothing to signal here; the adapters kill
/// the child itself.
#[cfg(not(unix))]
fn kill_group(_pgid: u32, _signal: Signal) -> Signalled {
    Signalled::Failed
}

/// Both clocks, with the monotonic one given: `now` and the wall clock
/// read at once, for the core's records (the core reads no clock).
pub fn stamp_at(now: std::time::Instant) -> mcp_stdio_core::Stamp {
    let unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    mcp_stdio_core::Stamp::new(now, unix_ms)
}

/// Both clocks, now.
pub fn stamp() -> mcp_stdio_core::Stamp {
    stamp_at(std::time::Instant::now())
}

/// The observed exit status in the core's terms.
pub fn exit_status(status: std::process::ExitStatus) -> ExitStatus {
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
    // Neither a code nor a signal (not on Unix): report what std could tell.
    ExitStatus::Code(-1)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn g11_spawned_child_leads_its_own_group_and_its_status_is_observed() {
        let mut spec = CommandSpec::new("sh");
        spec.args(["-c", "exit 3"]);
        let mut child = command(&spec)
            .expect("no sandbox")
            .spawn()
            .expect("sh runs");
        let pgid = rustix::process::getpgid(rustix::process::Pid::from_raw(child.id() as i32))
            .map(|p| p.as_raw_nonzero().get() as u32);
        let status = child.wait().expect("waited");
        assert_eq!(exit_status(status), ExitStatus::Code(3));
        // Either we saw the group before the exit, or the child was already gone.
        if let Ok(g) = pgid {
            assert_eq!(g, child.id());
        }
        let mut spec = CommandSpec::new("sleep");
        spec.arg("30");
        let mut child = command(&spec)
            .expect("no sandbox")
            .spawn()
            .expect("sleep runs");
        let group = ProcessGroup::new(child.id());
        assert_eq!(group.signal(Signal::Kill), Signalled::Sent);
        assert_eq!(
            exit_status(child.wait().expect("waited")),
            ExitStatus::Signal(9)
        );
    }
}
