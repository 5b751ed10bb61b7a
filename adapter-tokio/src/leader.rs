//! A spawned child that leads its process group, on tokio: its exit observed
//! without reaping, its group signalled only while the id is still ours, and
//! the reap once the supervision is over (see [`ProcessGroup`] for the rule).
//!
//! The exit wakes the loop at once on Linux (the leader's pidfd registered
//! with tokio's reactor as an `AsyncFd`); elsewhere, or without a pidfd,
//! [`Leader::exited`] looks every [`EXIT_POLL_TICK`] (50 ms). tokio's own
//! `tokio::process::Child` never reaps behind our back while we hold it unpolled: it waits
//! only when its `wait`/`try_wait` is called or when it is dropped (then
//! `try_wait` once, and its orphan queue for a child still running). So this
//! type never polls `Child::wait`, and reaps with `Child::try_wait` (at once
//! on a zombie) inside [`ProcessGroup::reap`], keeping tokio's bookkeeping
//! right.

use std::io;

use mcp_stdio_core::process::Signal;
use mcp_stdio_core::ExitStatus;
pub use mcp_stdio_sys::{LeaderState, ProcessGroup, Signalled, EXIT_POLL_TICK};
use tokio::process::Child;

#[cfg(target_os = "linux")]
type ExitFd = tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>;
#[cfg(not(target_os = "linux"))]
type ExitFd = std::convert::Infallible;

/// The one owner of a spawned child and its group. Dropped before
/// [`reap`](Self::reap), it sends `SIGKILL` to the group first (a run or a
/// session dropped unfinished must not leave its processes behind).
#[derive(Debug)]
pub struct Leader {
    child: Child,
    group: ProcessGroup,
    /// Readable at the exit (Linux); dropped once the exit is seen.
    exit_fd: Option<ExitFd>,
}

impl Leader {
    /// Takes ownership of `child`, spawned with
    /// `mcp_stdio_sys::command` (its own group) and not yet waited for.
    /// Take its pipes first (`child.stdin.take()` …).
    ///
    /// # Errors
    /// The child was already reaped (tokio knows no pid for it).
    pub fn new(child: Child) -> io::Result<Self> {
        let pid = child
            .id()
            .ok_or_else(|| io::Error::other("the child was already reaped"))?;
        let group = ProcessGroup::new(pid);
        let exit_fd = exit_fd(&group);
        Ok(Self {
            child,
            group,
            exit_fd,
        })
    }

    /// The leader's pid, which is the group id.
    pub fn pid(&self) -> u32 {
        self.group.pgid()
    }

    /// The shared handle, for paths that signal from elsewhere (`Drop` of a
    /// client on the application's side).
    pub fn group(&self) -> &ProcessGroup {
        &self.group
    }

    /// Signals the group, unless the leader was reaped.
    pub fn signal(&self, signal: Signal) -> Signalled {
        self.group.signal(signal)
    }

    /// The exit status, if the leader has exited, without reaping it.
    ///
    /// # Errors
    /// The wait failed: no status can ever be observed.
    pub fn try_exited(&mut self) -> io::Result<Option<ExitStatus>> {
        let child = &mut self.child;
        let r = self.group.observe_exit(|| child.try_wait());
        if !matches!(r, Ok(None)) {
            // Seen (or never to be seen): the pidfd has done its work.
            self.exit_fd = None;
        }
        r
    }

    /// Waits for the leader's exit without reaping it. Cancel-safe (a branch
    /// of a `select!`); returns at once once the exit was seen.
    ///
    /// # Errors
    /// The wait failed: no status can ever be observed.
    pub async fn exited(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.try_exited()? {
                return Ok(status);
            }
            self.exit_ready().await;
        }
    }

    /// Until the exit may have happened: the pidfd's readiness, or one tick.
    async fn exit_ready(&mut self) {
        #[cfg(target_os = "linux")]
        if let Some(fd) = self.exit_fd.as_ref() {
            let failed = match fd.readable().await {
                Ok(mut guard) => {
                    // Kept ready once the exit is there (the next look sees it);
                    // a readiness without one (never expected of a pidfd) is
                    // cleared, or the next wait would return at once forever.
                    let child = &mut self.child;
                    if matches!(self.group.observe_exit(|| child.try_wait()), Ok(None)) {
                        guard.clear_ready();
                    }
                    None
                }
                Err(e) => Some(e),
            };
            if let Some(e) = failed {
                tracing::debug!(pid = self.pid(), error = %e, "pidfd readiness failed; polling the exit on a tick");
                self.exit_fd = None;
            }
            return;
        }
        tokio::time::sleep(EXIT_POLL_TICK).await;
    }

    /// The supervision is over: reaps the leader (at once on a zombie) and
    /// ends every signalling of its group. A leader still running (the
    /// supervisor gave up on it) is left to tokio's orphan reaper when this is
    /// dropped. Idempotent.
    pub fn reap(&mut self) {
        self.exit_fd = None;
        let child = &mut self.child;
        if let Err(e) = self.group.reap(|| child.try_wait()) {
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
    // Deprecated since tokio 1.54 for types that may swap or close their fd
    // (the safe `register` is newer than our minimum tokio); an `OwnedFd`
    // owned by the `AsyncFd` does neither.
    #[allow(deprecated)]
    let registered = tokio::io::unix::AsyncFd::with_interest(fd, tokio::io::Interest::READABLE);
    match registered {
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
