//! A spawned child that leads its process group, on any [`Runtime`]: its
//! exit observed without reaping, its group signalled only while the id is
//! still ours, and the reap once the supervision is over (see
//! [`ProcessGroup`] for the rule).
//!
//! The exit wakes the driver at once on Linux (the leader's pidfd in the
//! runtime's reactor); elsewhere, or without a pidfd, [`Leader::poll_exited`]
//! looks every [`EXIT_POLL_TICK`] (50 ms). The child is a
//! `std::process::Child`: no runtime reaps it behind our back; a leader
//! still running when the supervision gave up on it is reaped by a thread
//! of its own (`mcp_stdio_sys::pipe_io::reap_in_background`).

use std::io;
use std::task::{Context, Poll};
use std::time::Instant;

use mcp_stdio_core::ExitStatus;
use mcp_stdio_core::Signal;
pub use mcp_stdio_sys::{LeaderState, ProcessGroup, Signalled, EXIT_POLL_TICK};

use crate::runtime::{Interest, Readiness, Runtime, Timer};

/// How the exit is waited for.
#[derive(Debug)]
enum ExitWait<R: Runtime> {
    /// The pidfd's readiness (Linux).
    Fd(R::Fd),
    /// A look every [`EXIT_POLL_TICK`].
    Tick(R::Timer),
}

/// The one owner of a spawned child and its group. Dropped before
/// [`reap`](Self::reap), it sends `SIGKILL` to the group first (a run or a
/// session dropped unfinished must not leave its processes behind).
#[derive(Debug)]
pub struct Leader<R: Runtime> {
    /// `None` once reaped (or handed to a background reaper).
    child: Option<std::process::Child>,
    group: ProcessGroup,
    /// `None` once the exit was seen.
    wait: Option<ExitWait<R>>,
    /// The first [`poll_exited`](Leader::poll_exited) looked once, whatever
    /// the readiness said; later ones look only when woken.
    looked: bool,
}

impl<R: Runtime> Leader<R> {
    /// Takes ownership of `child`, spawned with `mcp_stdio_sys::command`
    /// (its own group) and not yet waited for. Take its pipes first.
    pub fn new(rt: &R, child: std::process::Child) -> Self {
        let group = ProcessGroup::new(child.id());
        let wait = match group.exit_fd().map(|fd| rt.register(fd)) {
            Some(Ok(fd)) => ExitWait::Fd(fd),
            other => {
                if let Some(Err(e)) = other {
                    tracing::debug!(pid = group.pgid(), error = %e, "pidfd not pollable; polling the exit on a tick");
                }
                let mut tick = rt.timer();
                tick.set(Instant::now() + EXIT_POLL_TICK);
                ExitWait::Tick(tick)
            }
        };
        Self {
            child: Some(child),
            group,
            wait: Some(wait),
            looked: false,
        }
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
        let r = match self.child.as_mut() {
            Some(child) => self.group.observe_exit(|| child.try_wait()),
            None => Ok(self.group.exit_status()),
        };
        if !matches!(r, Ok(None)) {
            // Seen (or never to be seen): the pidfd or the tick has done its work.
            self.wait = None;
        }
        r
    }

    /// The exit, once it happened, without reaping: `Ready` at once once it
    /// was seen; `Pending` with the waker registered (the pidfd's
    /// readiness, or the next tick) before.
    pub fn poll_exited(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<ExitStatus>> {
        // One look at once (an exit before the pidfd was registered), and
        // whenever the exit was seen already; otherwise a `waitid` only on a
        // readiness or a tick, not on every turn of the loop that polls this.
        if !self.looked || self.wait.is_none() {
            self.looked = true;
            if let Some(status) = self.try_exited()? {
                return Poll::Ready(Ok(status));
            }
        }
        loop {
            match self.wait.as_mut() {
                Some(ExitWait::Fd(fd)) => {
                    let Self { child, group, .. } = self;
                    let mut seen = None;
                    let ready = fd.poll_io(cx, Interest::Read, &mut |_| {
                        let child = child.as_mut().ok_or(io::ErrorKind::NotFound)?;
                        match group.observe_exit(|| child.try_wait())? {
                            Some(status) => {
                                seen = Some(status);
                                Ok(1)
                            }
                            // A readiness without an exit (never expected of a pidfd).
                            None => Err(io::ErrorKind::WouldBlock.into()),
                        }
                    });
                    match ready {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Ok(_)) => {}
                        Poll::Ready(Err(e)) => {
                            tracing::debug!(pid = self.pid(), error = %e, "pidfd readiness failed; polling the exit on a tick");
                            self.wait = None;
                            return Poll::Ready(Err(e));
                        }
                    }
                    if let Some(status) = seen {
                        self.wait = None;
                        return Poll::Ready(Ok(status));
                    }
                }
                Some(ExitWait::Tick(tick)) => {
                    std::task::ready!(tick.poll_fired(cx));
                    tick.set(Instant::now() + EXIT_POLL_TICK);
                    if let Some(status) = self.try_exited()? {
                        return Poll::Ready(Ok(status));
                    }
                }
                // The wait failed for good: no status will come.
                None => return Poll::Pending,
            }
        }
    }

    /// Waits for the exit without reaping (as [`poll_exited`](Self::poll_exited)).
    /// Cancel-safe: a branch of a `select!` dropped unfinished has observed nothing.
    ///
    /// # Errors
    /// The wait failed: no status can ever be observed.
    pub async fn exited(&mut self) -> io::Result<ExitStatus> {
        futures_lite::future::poll_fn(|cx| self.poll_exited(cx)).await
    }

    /// The supervision is over: reaps the leader (at once on a zombie) and
    /// ends every signalling of its group. A leader still running (the
    /// supervisor gave up on it) is reaped by a thread of its own whenever
    /// it dies. Idempotent.
    pub fn reap(&mut self) {
        self.wait = None;
        let Some(mut child) = self.child.take() else {
            return;
        };
        if self.group.state() == LeaderState::Reaped {
            // The look at the exit reaped it (a system without `WNOWAIT`).
            return;
        }
        match self.group.reap(|| child.try_wait()) {
            Ok(Some(_)) => {}
            Ok(None) => mcp_stdio_sys::pipe_io::reap_in_background(child),
            Err(e) => tracing::debug!(pid = self.pid(), error = %e, "reaping the child failed"),
        }
    }
}

impl<R: Runtime> Drop for Leader<R> {
    fn drop(&mut self) {
        if self.group.state() != LeaderState::Reaped {
            // Unfinished: one `killpg` while the id is still ours, then the reap.
            let _ = self.group.signal(Signal::Kill);
            self.reap();
        }
    }
}
