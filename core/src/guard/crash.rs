//! The session's side of restart on crash (the rules:
//! `crate::guard::restart`): what a server's end means — the session's end,
//! or a crash the host's session outlives — and the servers of a session,
//! one after the other.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{GuardAction, GuardSession};
use crate::guard::proxy::Failure;
use crate::guard::restart::{GuardPhase, CRASH_TAIL_BYTES, REPLAY_TIMEOUT, RESTART_RESET_AFTER};
use crate::process::supervisor::{ExitStatus, ProcessOutcome};
use crate::time::Stamp;

/// The servers of one session: which is up, how many crashed in a row.
#[derive(Debug, Default)]
pub(super) struct Lives {
    /// Which server is (or was last) up, from 1; 0 before the first.
    server: u32,
    /// When the server that is up started.
    started: Option<Instant>,
    /// Crashes in a row (a server that ran [`RESTART_RESET_AFTER`] starts
    /// the count again).
    in_row: u32,
    /// Restarts so far.
    restarts: u32,
    /// No server: the last one's end, and when the next starts (`None`
    /// once [`GuardAction::RespawnServer`] was given).
    down: Option<Down>,
    /// The newest bytes of the current server's stderr (at most
    /// [`CRASH_TAIL_BYTES`]), for the crash error.
    tail: VecDeque<u8>,
    /// Why restarts stopped.
    stopped: Option<String>,
    /// When the replayed handshake must have been answered.
    replay_deadline: Option<Instant>,
    /// A restarted server could not take over the session: the guard
    /// closed it.
    pub(super) refused: bool,
}

#[derive(Debug)]
struct Down {
    outcome: ProcessOutcome,
    restart_at: Option<Instant>,
    /// Stopped for idleness (`--idle-stop`): started again by the host's
    /// next bytes, not by a backoff.
    asleep: bool,
}

impl Lives {
    /// Whether a server is up (not between a crash and its restart).
    pub(super) fn is_up(&self) -> bool {
        self.down.is_none()
    }

    /// Whether a [`GuardAction::RespawnServer`] was given and its spawn is
    /// being reported.
    pub(super) fn respawning(&self) -> bool {
        self.down
            .as_ref()
            .is_some_and(|d| d.restart_at.is_none() && !d.asleep)
    }

    /// Whether the server sleeps (stopped for idleness, not started again yet).
    pub(super) fn is_asleep(&self) -> bool {
        self.down.as_ref().is_some_and(|d| d.asleep)
    }

    /// The server was stopped for idleness and is gone.
    pub(super) fn sleep(&mut self, outcome: ProcessOutcome) {
        self.down = Some(Down {
            outcome,
            restart_at: None,
            asleep: true,
        });
    }

    /// A sleeping server is due at once; `false` if none sleeps.
    pub(super) fn wake(&mut self, at: Instant) -> bool {
        match self.down.as_mut() {
            Some(d) if d.asleep => {
                d.asleep = false;
                d.restart_at = Some(at);
                true
            }
            _ => false,
        }
    }

    /// Which server is (or was last) up, from 1.
    pub(super) fn server(&self) -> u32 {
        self.server
    }

    /// A server started at `at`; returns its number.
    pub(super) fn up(&mut self, at: Instant) -> u32 {
        self.down = None;
        self.replay_deadline = (self.server > 0)
            .then(|| at.checked_add(REPLAY_TIMEOUT))
            .flatten();
        self.server += 1;
        self.started = Some(at);
        self.tail.clear();
        self.server
    }

    /// When the next server is due, or the replayed handshake's answer.
    pub(super) fn restart_at(&self) -> Option<Instant> {
        self.down
            .as_ref()
            .and_then(|d| d.restart_at)
            .or(self.replay_deadline)
    }

    /// Bytes of the current server's stderr.
    pub(super) fn stderr(&mut self, chunk: &[u8]) {
        let keep = &chunk[chunk.len().saturating_sub(CRASH_TAIL_BYTES)..];
        let over = (self.tail.len() + keep.len()).saturating_sub(CRASH_TAIL_BYTES);
        self.tail.drain(..over);
        self.tail.extend(keep);
    }

    /// Restarts so far.
    pub(super) fn restarts(&self) -> u32 {
        self.restarts
    }

    /// Why restarts stopped.
    pub(super) fn stopped(&self) -> Option<&str> {
        self.stopped.as_deref()
    }

    /// The stderr tail as text, redacted.
    fn tail_text(&self) -> String {
        let mut bytes: Vec<u8> = self.tail.iter().copied().collect();
        let (len, _) = crate::process::redact::redact_in_place(&mut bytes);
        bytes.truncate(len);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// How a server ended, in words.
fn describe(status: Option<ExitStatus>) -> String {
    match status {
        Some(ExitStatus::Code(c)) => format!("exit code {c}"),
        Some(ExitStatus::Signal(s)) => format!("killed by signal {s}"),
        None => "no exit status observed".to_owned(),
    }
}

/// The last non-empty line of `text`, at most 200 characters.
fn last_line(text: &str) -> Option<String> {
    let line = text.lines().rev().map(str::trim).find(|l| !l.is_empty())?;
    Some(line.chars().take(200).collect())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl GuardSession {
    /// The server's supervision is over: the session ends, or (restart on
    /// crash) the requests it cost get their error and the next server is
    /// due after the backoff.
    pub(super) fn on_server_finished(&mut self, outcome: ProcessOutcome) -> GuardAction {
        // Finished follows a spawn, which carried a time.
        let Some(at) = self.latest else {
            return self.finish_with(outcome);
        };
        if std::mem::take(&mut self.idle.stopping)
            && !self.ending
            && self.closed_by_guard().is_none()
        {
            // Stopped for idleness: not a crash. What the host sends from
            // now on waits for the next server (nothing was open).
            self.proxy.server_down(
                at,
                &Failure {
                    message: "the MCP server was stopped for idleness",
                    data: serde_json::json!({"reason": "server_idle_stopped"}),
                    exit: outcome.exit_status,
                },
            );
            self.lives.sleep(outcome);
            return GuardAction::ReapServer;
        }
        let restart = &self.config.restart;
        if self.ending
            || self.closed_by_guard().is_some()
            || !restart.restarts_after(outcome.exit_status)
        {
            return self.finish_with(outcome);
        }
        // A server that ran long enough after its handshake starts the count again.
        let uptime = self
            .lives
            .started
            .map_or(Duration::ZERO, |s| at.instant.saturating_duration_since(s));
        let replaying = self.proxy.replay_in_flight();
        if uptime >= RESTART_RESET_AFTER && !replaying {
            self.lives.in_row = 0;
        }
        let max = restart.get_max_restarts();
        let stop = if replaying {
            Some("it crashed again before answering the replayed handshake".to_owned())
        } else if let Some(why) = self.proxy.unreplayable() {
            Some(format!("the host's session cannot be replayed: {why}"))
        } else if self.lives.in_row >= max {
            Some(format!(
                "it crashed {} times in a row (at most {max} restarts)",
                self.lives.in_row + 1
            ))
        } else {
            None
        };
        let delay = stop
            .is_none()
            .then(|| restart.backoff_for(self.lives.in_row + 1));
        let status = describe(outcome.exit_status);
        let tail = self.lives.tail_text();
        let said = last_line(&tail)
            .map(|l| format!("; its last stderr line: {l}"))
            .unwrap_or_default();
        let message = match (&stop, delay) {
            (None, Some(d)) => format!(
                "the MCP server crashed ({status}) before answering; mcp-stdio guard restarts it in {} ms{said}",
                millis(d)
            ),
            _ => format!(
                "the MCP server crashed ({status}) before answering and mcp-stdio guard stopped restarting it: {}{said}",
                stop.as_deref().unwrap_or_default()
            ),
        };
        let data = serde_json::json!({
            "reason": "server_crashed",
            "server": self.lives.server,
            "exitStatus": outcome.exit_status,
            "stderrTail": tail,
            "restartInMs": delay.map(millis),
            "restartsStopped": stop,
        });
        let failed = self.proxy.server_down(
            at,
            &Failure {
                message: &message,
                data,
                exit: outcome.exit_status,
            },
        );
        self.proxy.push_phase(GuardPhase::ServerCrashed {
            session_id: self.config.get_proxy().get_session_id().to_owned(),
            server: self.lives.server,
            at_unix_ms: at.unix_ms,
            exit_status: outcome.exit_status,
            uptime_ms: millis(uptime),
            requests_failed: failed,
            stderr_tail: tail,
            restart_in_ms: delay.map(millis),
            restarts_stopped: stop.clone(),
        });
        let uptime_text = format!("{:.1} s", uptime.as_secs_f64());
        match (stop, delay) {
            (None, Some(delay)) => {
                self.lives.in_row += 1;
                self.lives.restarts += 1;
                self.stderr_out.push_back(
                    format!(
                        "mcp-stdio guard: the server crashed ({status}) after {uptime_text}; {failed} request(s) got an error; restarting it in {} ms (restart {} of at most {max} in a row)\n",
                        millis(delay),
                        self.lives.in_row,
                    )
                    .into_bytes(),
                );
                self.lives.down = Some(Down {
                    outcome,
                    restart_at: at.instant.checked_add(delay),
                    asleep: false,
                });
                GuardAction::ReapServer
            }
            (stop, _) => {
                let why = stop.unwrap_or_default();
                self.stderr_out.push_back(
                    format!(
                        "mcp-stdio guard: the server crashed ({status}) after {uptime_text}; restarts stopped: {why}\n"
                    )
                    .into_bytes(),
                );
                self.lives.stopped = Some(why);
                self.finish_with(outcome)
            }
        }
    }

    /// The session is over: what is still open ends `unknown`, and the
    /// loop gets `Finished`.
    fn finish_with(&mut self, outcome: ProcessOutcome) -> GuardAction {
        if let Some(at) = self.latest {
            if self.lives.is_up() {
                self.proxy.handle_server_eof(at);
            }
            self.proxy.finish(at, outcome.exit_status);
        }
        // A sleeping server was stopped by the guard: the host's leaving
        // then is a clean end.
        self.idle.ended_asleep |= self.lives.is_asleep();
        self.lives.down = None;
        self.finished = Some(outcome.clone());
        GuardAction::Finished {
            outcome,
            exit_code: self.exit_code(),
            flush_for: self.config.final_flush,
        }
    }

    /// Between a crash and the next server: the restart when it is due, or
    /// the session's end when the host left meanwhile.
    pub(super) fn poll_restart(&mut self) -> Option<GuardAction> {
        let down = self.lives.down.as_mut()?;
        if self.ending {
            self.idle.ended_asleep = self.lives.is_asleep();
            let down = self.lives.down.take()?;
            return Some(self.finish_with(down.outcome));
        }
        let due = down.restart_at?;
        if self.latest.is_some_and(|at| at.instant >= due) {
            down.restart_at = None;
            return Some(GuardAction::RespawnServer);
        }
        None
    }

    /// Time passed: a restarted server that has not answered the replayed
    /// handshake by its deadline cannot take over the session.
    pub(super) fn check_replay_deadline(&mut self, at: Stamp) {
        let Some(due) = self.lives.replay_deadline else {
            return;
        };
        if !self.proxy.replay_in_flight() {
            self.lives.replay_deadline = None;
        } else if at.instant >= due {
            self.lives.replay_deadline = None;
            self.proxy.replay_timed_out(at, REPLAY_TIMEOUT);
        }
    }

    /// Starting the server again failed: what waits gets an error and the
    /// session ends.
    pub(super) fn handle_spawn_failed(&mut self, at: Stamp, e: &std::io::Error) {
        self.see(at);
        if self.lives.down.is_none() {
            return;
        }
        let why = format!("it could not be started again: {e}");
        self.stop_restarts(at, why);
    }

    /// A restarted server cannot take over the host's session: what waits
    /// gets an error, the server is shut down, the guard closes the session.
    pub(super) fn restart_refused(&mut self, at: Stamp, reason: &str) {
        self.lives.refused = true;
        self.stop_restarts(at, reason.to_owned());
        self.supervisor.shutdown(at.instant);
    }

    fn stop_restarts(&mut self, at: Stamp, why: String) {
        let message =
            format!("the MCP server crashed and mcp-stdio guard could not restart it: {why}");
        let data = serde_json::json!({"reason": "restart_stopped", "restartsStopped": why});
        self.proxy.fail_open(
            at,
            &Failure {
                message: &message,
                data,
                exit: None,
            },
        );
        if !self.lives.refused {
            self.proxy.push_phase(GuardPhase::RestartRefused {
                session_id: self.config.get_proxy().get_session_id().to_owned(),
                server: self.lives.server + 1,
                at_unix_ms: at.unix_ms,
                reason: why.clone(),
            });
            self.stderr_out
                .push_back(format!("mcp-stdio guard: restarts stopped: {why}\n").into_bytes());
        }
        self.lives.stopped = Some(why);
        self.ending = true;
    }
}

#[cfg(test)]
mod tests;
