//! A spawned child's process group, signalled only while its id cannot have
//! been reused.
//!
//! # The rule
//!
//! Every child we spawn leads its own process group (pgid = its pid, see
//! [`command`](crate::command)). A pid number stays reserved while any task
//! uses it as pid, pgid or session id, and a leader that has exited but is not
//! yet reaped (a zombie) still uses it. So from the spawn until we reap the
//! leader, the group id names our group and nothing else; after the reap the
//! group may be empty (its last member escaped with `setsid`, or died) and the
//! number free for an unrelated program that makes itself a group leader.
//! Signalling it then kills that program.
//!
//! [`ProcessGroup`] keeps that rule in one place:
//!
//! - the exit is observed **without** reaping
//!   ([`observe_exit`](ProcessGroup::observe_exit):
//!   `waitid(P_PID, pid, WEXITED | WNOHANG | WNOWAIT)`), so the leader stays a
//!   zombie while the supervisor may still signal its group (the group
//!   `SIGKILL` after the leader's exit, drop guards);
//! - the owner reaps only when the supervision is over
//!   ([`reap`](ProcessGroup::reap), through the runtime's own child handle so
//!   the runtime's bookkeeping stays right), under the same lock as every
//!   signal, so no signal can slip in between the reap and the state change;
//! - after the reap, [`signal`](ProcessGroup::signal) refuses, whoever asks
//!   (clones of the handle live in `Drop` paths on other threads).
//!
//! On Linux (5.3 or later) [`exit_fd`](ProcessGroup::exit_fd) gives a pidfd
//! that becomes readable at the exit, for a poller or a runtime's readiness;
//! elsewhere callers look again every [`EXIT_POLL_TICK`].
//!
//! What it cannot cover: something else in the process reaping our children
//! behind our back (`SIGCHLD` set to `SIG_IGN`, which makes the kernel reap at
//! once, or a `waitpid(-1, …)` in other code). Where `waitid` with `WNOWAIT` is
//! not available (OpenBSD, NetBSD, Windows) the observation reaps; the handle
//! then moves straight to [`LeaderState::Reaped`] and refuses every later
//! signal (safe, at the cost of the group `SIGKILL` after the leader's exit).

use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use mcp_stdio_core::ExitStatus;
use mcp_stdio_core::Signal;

/// Where no pidfd exists (not Linux, a kernel older than 5.3, a seccomp
/// filter), how often a loop looks for its child's exit: the added latency of
/// noticing an exit there, at 20 cheap `waitid` calls a second per child.
pub const EXIT_POLL_TICK: Duration = Duration::from_millis(50);

/// What a runtime's child handle answers to `try_wait` (std, tokio) or
/// `try_status` (async-process).
pub type TryWait = io::Result<Option<std::process::ExitStatus>>;

/// How far the group's leader has come, as far as this process knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaderState {
    /// Not seen to exit: alive, or a zombie nobody looked at yet. The id is ours.
    Running,
    /// Exited with this status and not reaped: a zombie that keeps the id ours.
    Exited(ExitStatus),
    /// Reaped (or handed to a reaper): the id may be anybody's; never signalled again.
    Reaped,
}

/// What `ProcessGroup::signal` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Signalled {
    /// The kernel accepted the signal for the group.
    Sent,
    /// No process is left in the group (`ESRCH`): nothing to do, not an error.
    Gone,
    /// The leader was reaped: the id may have been reused, so nothing was sent.
    Refused,
    /// Nothing was sent: our own group, an impossible id, or the kernel refused.
    Failed,
}

/// The process group of a child we spawned and have not reaped, shared by
/// everything that may signal it (a driver, its `Drop` guards, other threads).
/// Cloning shares the state.
#[derive(Debug, Clone)]
pub struct ProcessGroup(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    pgid: u32,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    leader: LeaderState,
    /// The status observed, kept after the reap.
    status: Option<ExitStatus>,
    /// Signals the kernel accepted, and signals refused after the reap.
    sent: u32,
    refused: u32,
}

impl ProcessGroup {
    /// The group led by `leader_pid`: a child this process spawned with
    /// `mcp_stdio_sys::command` (so it leads its own group) and has not
    /// reaped. Nothing else may reap it: reaping goes through
    /// [`reap`](Self::reap).
    pub fn new(leader_pid: u32) -> Self {
        Self(Arc::new(Inner {
            pgid: leader_pid,
            state: Mutex::new(State {
                leader: LeaderState::Running,
                status: None,
                sent: 0,
                refused: 0,
            }),
        }))
    }

    /// The group id (the leader's pid).
    pub fn pgid(&self) -> u32 {
        self.0.pgid
    }

    /// Where the leader is now.
    pub fn state(&self) -> LeaderState {
        self.lock().leader
    }

    /// The exit status observed, if any (also after the reap).
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.lock().status
    }

    /// Signals the kernel accepted for this group so far.
    pub fn signals_sent(&self) -> u32 {
        self.lock().sent
    }

    /// Signals refused because the leader was already reaped.
    pub fn signals_refused(&self) -> u32 {
        self.lock().refused
    }

    /// Sends `signal` to the group, unless the leader was reaped: then the id
    /// may be someone else's and nothing is sent ([`Signalled::Refused`]).
    /// One `killpg` under the handle's lock, never blocking otherwise.
    pub fn signal(&self, signal: Signal) -> Signalled {
        let mut state = self.lock();
        if state.leader == LeaderState::Reaped {
            state.refused = state.refused.saturating_add(1);
            tracing::debug!(
                pgid = self.0.pgid,
                ?signal,
                "leader reaped; not signalling its old group id"
            );
            return Signalled::Refused;
        }
        let r = crate::kill_group(self.0.pgid, signal);
        if r == Signalled::Sent {
            state.sent = state.sent.saturating_add(1);
        }
        r
    }

    /// Whether the leader has exited, without reaping it: its status once it
    /// has (and every time after, also after the reap). `try_wait` is the
    /// runtime's own non-blocking wait; it is called only where the system
    /// has no `waitid` with `WNOWAIT` (it reaps there, and the handle moves to
    /// [`LeaderState::Reaped`]).
    ///
    /// # Errors
    /// The wait failed (the child is not ours to wait for, e.g. reaped by
    /// someone else): no status can ever be observed.
    pub fn observe_exit<F>(&self, try_wait: F) -> io::Result<Option<ExitStatus>>
    where
        F: FnOnce() -> TryWait,
    {
        let mut state = self.lock();
        if state.leader != LeaderState::Running {
            return Ok(state.status);
        }
        if let Some(status) = peek::exited(self.0.pgid, try_wait)? {
            state.status = Some(status.status);
            state.leader = if status.reaped {
                LeaderState::Reaped
            } else {
                LeaderState::Exited(status.status)
            };
            return Ok(Some(status.status));
        }
        Ok(None)
    }

    /// Ends the handle's hold on the id: reaps the leader with `try_wait`
    /// (the runtime's own non-blocking wait, which returns at once on a
    /// zombie) and, whatever it answers, refuses every later signal. Call it
    /// once the supervision is over (the supervisor's `Finished`), or before
    /// a still-running child is handed to a background reaper or dropped.
    /// Returns what `try_wait` said: `Ok(None)` means the child still runs.
    /// A second call does nothing and returns the status observed.
    pub fn reap<F>(&self, try_wait: F) -> TryWait
    where
        F: FnOnce() -> TryWait,
    {
        let mut state = self.lock();
        if state.leader == LeaderState::Reaped {
            return Ok(None);
        }
        // Under the lock: no signal can pass between the reap and the state change.
        let r = try_wait();
        if let Ok(Some(s)) = &r {
            state.status.get_or_insert(crate::exit_status(*s));
        }
        state.leader = LeaderState::Reaped;
        r
    }

    /// A pidfd for the leader that becomes readable when it exits (Linux 5.3
    /// or later), for a poller or a runtime's readiness; `None` elsewhere, on
    /// an older kernel, or after the reap. Reading readiness never reaps.
    #[cfg(target_os = "linux")]
    pub fn exit_fd(&self) -> Option<std::os::fd::OwnedFd> {
        use rustix::process::{pidfd_open, Pid, PidfdFlags};
        let state = self.lock();
        // Only while the id is ours: a pidfd opened after the reap could name a stranger.
        if state.leader == LeaderState::Reaped {
            return None;
        }
        let pid = i32::try_from(self.0.pgid).ok().and_then(Pid::from_raw)?;
        match pidfd_open(pid, PidfdFlags::empty()) {
            Ok(fd) => Some(fd),
            Err(e) => {
                tracing::debug!(pid = self.0.pgid, error = %e, "no pidfd; polling the exit on a tick");
                None
            }
        }
    }

    /// No pidfd outside Linux: callers poll [`observe_exit`](Self::observe_exit)
    /// every [`EXIT_POLL_TICK`].
    #[cfg(all(unix, not(target_os = "linux")))]
    pub fn exit_fd(&self) -> Option<std::os::fd::OwnedFd> {
        None
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing in the critical sections panics; a poisoned lock holds a valid state.
        self.0.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The non-reaping look at a child's exit.
mod peek {
    use super::TryWait;
    use mcp_stdio_core::ExitStatus;
    use std::io;

    pub(super) struct Seen {
        pub(super) status: ExitStatus,
        /// The look reaped the child (no `WNOWAIT` on this system).
        pub(super) reaped: bool,
    }

    /// `waitid(P_PID, pid, WEXITED | WNOHANG | WNOWAIT)`: the status if the
    /// child has exited, leaving it a zombie.
    #[cfg(any(
        target_os = "linux",
        target_os = "android",
        target_vendor = "apple",
        target_os = "freebsd"
    ))]
    pub(super) fn exited<F: FnOnce() -> TryWait>(
        pid: u32,
        _try_wait: F,
    ) -> io::Result<Option<Seen>> {
        use rustix::process::{waitid, Pid, WaitId, WaitIdOptions};
        let pid = i32::try_from(pid)
            .ok()
            .and_then(Pid::from_raw)
            .ok_or_else(|| io::Error::other("child pid out of range"))?;
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
        loop {
            return match waitid(WaitId::Pid(pid), options) {
                Ok(None) => Ok(None),
                Ok(Some(status)) => {
                    let status = match (status.exit_status(), status.terminating_signal()) {
                        (Some(code), _) => ExitStatus::Code(code),
                        (None, Some(signal)) => ExitStatus::Signal(signal),
                        // Only exits are asked for; report what could be told, as a code.
                        (None, None) => ExitStatus::Code(-1),
                    };
                    Ok(Some(Seen {
                        status,
                        reaped: false,
                    }))
                }
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => Err(e.into()),
            };
        }
    }

    /// No `waitid` with `WNOWAIT` here: the runtime's `try_wait`, which reaps.
    #[cfg(not(any(
        target_os = "linux",
        target_os = "android",
        target_vendor = "apple",
        target_os = "freebsd"
    )))]
    pub(super) fn exited<F: FnOnce() -> TryWait>(
        _pid: u32,
        try_wait: F,
    ) -> io::Result<Option<Seen>> {
        Ok(try_wait()?.map(|s| Seen {
            status: crate::exit_status(s),
            reaped: true,
        }))
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use mcp_stdio_core::CommandSpec;
    use std::time::Instant;

    /// The state letter of `/proc/<pid>/stat`; `None` once the pid is free.
    fn proc_state(pid: u32) -> Option<char> {
        let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        s.get(s.rfind(')')? + 2..)?.chars().next()
    }

    fn wait_exit(group: &ProcessGroup, child: &mut std::process::Child) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(s) = group.observe_exit(|| child.try_wait()).expect("waitid") {
                return s;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "no exit in 10 s");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn g11_the_exit_is_observed_without_reaping_and_signals_stop_at_the_reap() {
        let mut spec = CommandSpec::new("sh");
        spec.args(["-c", "exit 7"]);
        let mut child = crate::command(&spec)
            .expect("no sandbox")
            .spawn()
            .expect("sh runs");
        let pid = child.id();
        let group = ProcessGroup::new(pid);
        assert_eq!(group.state(), LeaderState::Running);
        let status = wait_exit(&group, &mut child);
        assert_eq!(status, ExitStatus::Code(7));
        // Observed, not reaped: the leader is a zombie and keeps its id.
        assert_eq!(group.state(), LeaderState::Exited(ExitStatus::Code(7)));
        assert_eq!(proc_state(pid), Some('Z'));
        // Looking again changes nothing and answers the same.
        assert_eq!(
            group.observe_exit(|| child.try_wait()).expect("again"),
            Some(status)
        );
        assert_eq!(proc_state(pid), Some('Z'));
        // While the zombie holds the id the group can still be signalled.
        assert!(matches!(
            group.signal(Signal::Kill),
            Signalled::Sent | Signalled::Gone
        ));
        let reaped = group.reap(|| child.try_wait()).expect("reaped");
        assert_eq!(reaped.map(crate::exit_status), Some(ExitStatus::Code(7)));
        assert_eq!(group.state(), LeaderState::Reaped);
        assert_eq!(proc_state(pid), None, "the zombie is gone after the reap");
        // Never again: every clone refuses, nothing reaches the kernel.
        let other = group.clone();
        let sent = group.signals_sent();
        assert_eq!(other.signal(Signal::Term), Signalled::Refused);
        assert_eq!(group.signal(Signal::Kill), Signalled::Refused);
        assert_eq!(group.signals_sent(), sent);
        assert_eq!(group.signals_refused(), 2);
        assert_eq!(group.exit_status(), Some(ExitStatus::Code(7)));
        assert!(
            group.exit_fd().is_none(),
            "no pidfd for an id that may be a stranger's"
        );
        // A second reap is a no-op.
        assert!(matches!(group.reap(|| child.try_wait()), Ok(None)));
    }

    #[test]
    fn g11_a_running_child_is_signalled_and_its_pidfd_wakes_at_the_exit() {
        let mut spec = CommandSpec::new("sleep");
        spec.arg("30");
        let mut child = crate::command(&spec)
            .expect("no sandbox")
            .spawn()
            .expect("sleep runs");
        let group = ProcessGroup::new(child.id());
        let fd = group.exit_fd().expect("Linux 5.3+ has pidfds");
        assert_eq!(
            group.observe_exit(|| child.try_wait()).expect("waitid"),
            None
        );
        assert_eq!(group.signal(Signal::Kill), Signalled::Sent);
        let start = Instant::now();
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        let timeout = rustix::event::Timespec {
            tv_sec: 10,
            tv_nsec: 0,
        };
        let n = rustix::event::poll(&mut fds, Some(&timeout)).expect("poll");
        eprintln!("pidfd readable {:?} after SIGKILL", start.elapsed());
        assert_eq!(n, 1, "the pidfd became readable");
        assert_eq!(
            group.observe_exit(|| child.try_wait()).expect("waitid"),
            Some(ExitStatus::Signal(9))
        );
        // Readable again and again while the zombie stays: reading readiness never reaps.
        assert_eq!(
            rustix::event::poll(&mut fds, Some(&timeout)).expect("poll"),
            1
        );
        assert_eq!(proc_state(child.id()), Some('Z'));
        group.reap(|| child.try_wait()).expect("reaped");
        assert_eq!(group.signal(Signal::Kill), Signalled::Refused);
    }

    #[test]
    fn g11_handing_a_running_child_to_a_reaper_ends_the_signalling_too() {
        let mut spec = CommandSpec::new("sleep");
        spec.arg("30");
        let mut child = crate::command(&spec)
            .expect("no sandbox")
            .spawn()
            .expect("sleep runs");
        let group = ProcessGroup::new(child.id());
        assert!(
            matches!(group.reap(|| child.try_wait()), Ok(None)),
            "still running"
        );
        assert_eq!(group.state(), LeaderState::Reaped);
        assert_eq!(group.signal(Signal::Kill), Signalled::Refused);
        // Clean up by the child's pid, as a reaper thread would after its own kill.
        child.kill().expect("kill");
        child.wait().expect("wait");
    }
}
