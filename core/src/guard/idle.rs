//! Servers that sleep when idle (`guard --idle-stop DURATION`): the server
//! is stopped after `DURATION` with no request in flight, no subscription
//! and no task open, and started again by the host's next bytes, its
//! handshake replayed before anything of the host's reaches it (the replay
//! of restart on crash, `crate::guard::restart`), so the host notices only
//! the start-up time.
//!
//! Never while a call is in flight: the idle clock runs only while nothing
//! is open, and any byte either way restarts it. A session whose server
//! created a task (the tasks extension) is never stopped: the guard does not
//! follow a task to its end.

use std::time::{Duration, Instant};

use super::GuardSession;
use crate::guard::restart::GuardPhase;
use crate::time::Stamp;

/// The idle clock and what it did.
#[derive(Debug, Default)]
pub(super) struct Idle {
    /// `--idle-stop`: how long the server may sit idle (`None`: never stopped).
    pub(super) after: Option<Duration>,
    /// The last time a byte moved either way.
    pub(super) busy_at: Option<Instant>,
    /// The server is being stopped for idleness (its end is a sleep, not a
    /// crash).
    pub(super) stopping: bool,
    /// Times the server was stopped for idleness.
    pub(super) stops: u64,
    /// Times a sleeping server was started again.
    pub(super) resumes: u64,
    /// The session ended while the server slept.
    pub(super) ended_asleep: bool,
    /// The host's first signal (the exit status of a session that ends
    /// asleep by it).
    pub(super) first_signal: Option<crate::Signal>,
}

impl Idle {
    /// A byte moved: the clock starts again.
    pub(super) fn busy(&mut self, at: Instant) {
        self.busy_at = Some(at);
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl GuardSession {
    /// Whether nothing is open: no request in flight or waiting, no
    /// handshake being replayed, no subscription, no task, nothing for the
    /// server, and the session not ending.
    fn is_idle(&self) -> bool {
        self.lives.is_up()
            && !self.idle.stopping
            && !self.ending
            && self.finished.is_none()
            && self.closed_by_guard().is_none()
            && self.proxy.tracked() == 0
            && self.proxy.server_backlog() == 0
            && !self.proxy.replay_in_flight()
            && self.proxy.nothing_open()
    }

    /// When the server is due to be stopped for idleness, if it is idle.
    pub(super) fn idle_deadline(&self) -> Option<Instant> {
        let after = self.idle.after?;
        if !self.is_idle() {
            return None;
        }
        self.idle.busy_at?.checked_add(after)
    }

    /// Time passed: a server idle for `--idle-stop` is stopped (its stdin
    /// closed, then the signals of the shutdown ladder); its end will be a
    /// sleep.
    pub(super) fn check_idle(&mut self, at: Stamp) {
        let Some(due) = self.idle_deadline() else {
            return;
        };
        if at.instant < due {
            return;
        }
        let idle = self
            .idle
            .busy_at
            .map_or(Duration::ZERO, |b| at.instant.saturating_duration_since(b));
        self.idle.stopping = true;
        self.idle.stops += 1;
        self.proxy.push_phase(GuardPhase::ServerIdleStopped {
            session_id: self.config.get_proxy().get_session_id().to_owned(),
            server: self.lives.server(),
            at_unix_ms: at.unix_ms,
            idle_ms: millis(idle),
        });
        self.stderr_out.push_back(
            format!(
                "mcp-stdio guard: the server was idle for {:.1} s; stopping it (the host's next message starts it again)\n",
                idle.as_secs_f64()
            )
            .into_bytes(),
        );
        self.supervisor.shutdown(at.instant);
    }

    /// Whether the session ended while its server slept (its exit is 0).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn ended_asleep(&self) -> bool {
        self.idle.ended_asleep
    }

    /// The host sent bytes while the server sleeps: it is started again
    /// (the handshake replayed first; what the host sent waits for it).
    pub(super) fn wake(&mut self, at: Stamp) {
        if self.lives.wake(at.instant) {
            self.idle.resumes += 1;
            self.proxy.resuming();
        }
    }
}
