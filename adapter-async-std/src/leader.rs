//! A spawned child that leads its process group, on async-io: its exit
//! observed without reaping, its group signalled only while the id is still
//! ours, and the reap once the supervision is over (see
//! [`ProcessGroup`] for the rule).
//!
//! The exit wakes the waiter at once on Linux (the leader's pidfd as an
//! [`async_io::Async`] source); elsewhere, or without a pidfd,
//! [`Leader::exited`] looks every [`EXIT_POLL_TICK`] (50 ms). async-process
//! never reaps a [`Child`] behind our back while we hold it: its reaper
//! (SIGCHLD- or pidfd-driven) waits only for children that were dropped, and
//! a held one is waited for only through `status`/`try_status`. So this type
//! never calls `status`, and reaps with `try_status` (at once on a zombie)
//! inside [`ProcessGroup::reap`].

use std::io;

use async_process::Child;
use mcp_stdio_core::process::Signal;
use mcp_stdio_core::ExitStatus;
use mcp_stdio_sys::{LeaderState, ProcessGroup, Signalled, EXIT_POLL_TICK};

#[cfg(target_os = "linux")]
type ExitFd = async_io::Async<std::os::fd::OwnedFd>;
#[cfg(not(target_os = "linux"))]
type ExitFd = std::convert::Infallible;

/// The one owner of a spawned child and its group. Dropped before
/// [`reap`](Self::reap), it sends `SIGKILL` to the group first.
#[derive(Debug)]
pub(crate) struct Leader {
    child: Child,
    group: ProcessGroup,
    /// Readable at the exit (Linux); dropped once the exit is seen.
    exit_fd: Option<ExitFd>,
}

impl Leader {
    /// Takes ownership of `child` (spawned with `mcp_stdio_sys::command`, not
    /// yet waited for); take its pipes first.
    pub(crate) fn new(child: Child) -> Self {
        let group = ProcessGroup::new(child.id());
        let exit_fd = exit_fd(&group);
        Self {
            child,
            group,
            exit_fd,
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.group.pgid()
    }

    /// The shared handle, for `Drop` paths on the application's side.
    pub(crate) fn group(&self) -> &ProcessGroup {
        &self.group
    }

    /// Signals the group, unless the leader was reaped.
    pub(crate) fn signal(&self, signal: Signal) -> Signalled {
        self.group.signal(signal)
    }

    /// The exit status, if the leader has exited, without reaping it.
    pub(crate) fn try_exited(&mut self) -> io::Result<Option<ExitStatus>> {
        let child = &mut self.child;
        let r = self.group.observe_exit(|| child.try_status());
        if !matches!(r, Ok(None)) {
            self.exit_fd = None;
        }
        r
    }

    /// Waits for the leader's exit without reaping it. Cancel-safe (one
    /// branch of a `race`); returns at once once the exit was seen.
    pub(crate) async fn exited(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.try_exited()? {
                return Ok(status);
            }
            self.exit_ready().await;
        }
    }

    /// Until the exit may have happened: the pidfd's readiness (async-io
    /// re-arms its one-shot interest on every call, so a readiness is never
    /// lost nor stuck), or one tick.
    async fn exit_ready(&mut self) {
        #[cfg(target_os = "linux")]
        if let Some(fd) = self.exit_fd.as_ref() {
            if let Err(e) = fd.readable().await {
                tracing::debug!(pid = self.pid(), error = %e, "pidfd readiness failed; polling the exit on a tick");
                self.exit_fd = None;
            }
            return;
        }
        async_io::Timer::after(EXIT_POLL_TICK).await;
    }

    /// The supervision is over: reaps the leader (at once on a zombie) and
    /// ends every signalling of its group. A leader still running is left to
    /// async-process's reaper when this is dropped. Idempotent.
    pub(crate) fn reap(&mut self) {
        self.exit_fd = None;
        let child = &mut self.child;
        if let Err(e) = self.group.reap(|| child.try_status()) {
            tracing::debug!(pid = self.pid(), error = %e, "reaping the child failed");
        }
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        if self.group.state() != LeaderState::Reaped {
            // Unfinished: one `killpg` while the id is still ours, then the reap.
            let _ = self.group.signal(Signal::Kill);
            self.reap();
        }
    }
}

#[cfg(target_os = "linux")]
fn exit_fd(group: &ProcessGroup) -> Option<ExitFd> {
    let fd = group.exit_fd()?;
    match async_io::Async::new(fd) {
        Ok(fd) => Some(fd),
        Err(e) => {
            tracing::debug!(pid = group.pgid(), error = %e, "pidfd not pollable; polling the exit on a tick");
            None
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn exit_fd(_group: &ProcessGroup) -> Option<ExitFd> {
    None
}
