//! The fuzz harness of `process/supervisor`.

use std::time::{Duration, Instant};
/// Fuzz entry point: drives a supervisor with an arbitrary sequence of inputs
/// (any order, repeated, spurious timeouts, time only moving forward) and
/// checks its invariants. Panics on a violated invariant.
pub fn fuzz_supervisor(data: &[u8]) {
    run(data);
}

use crate::process::supervisor::*;
use arbitrary::{Result, Unstructured};

/// What the harness has fed in, to check the supervisor's outputs against.
struct Harness {
    sup: ProcessSupervisor,
    now: Instant,
    pipes: Option<ChildPipes>,
    /// First exit accepted (after spawn, before finish).
    exit: Option<ExitStatus>,
    /// EOF accepted on stdout / stderr.
    eof: [bool; 2],
    /// That EOF came after a shutdown or cancel request.
    eof_after_request: [bool; 2],
    eof_after_cancel: [bool; 2],
    requested: bool,
    cancel_requested: bool,
    closed_stdin: bool,
    term: bool,
    kill: bool,
    /// The first signal passed on (`forward`) was `SIGINT` or `SIGHUP`, and sent.
    forwarded: bool,
    abandoned: bool,
    finished: Option<ProcessOutcome>,
}

pub(super) fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let config = *SupervisorConfig::default()
        .stdin_close_grace(ms(&mut u))
        .term_grace(ms(&mut u))
        .reader_drain_deadline(ms(&mut u));
    let mut h = Harness {
        sup: ProcessSupervisor::new(config),
        // The harness's one base instant; the supervisor never reads the clock.
        now: Instant::now(),
        pipes: None,
        exit: None,
        eof: [false; 2],
        eof_after_request: [false; 2],
        eof_after_cancel: [false; 2],
        requested: false,
        cancel_requested: false,
        closed_stdin: false,
        term: false,
        kill: false,
        forwarded: false,
        abandoned: false,
        finished: None,
    };
    for _ in 0..64 {
        if h.step(&mut u).is_err() {
            break;
        }
    }
    h.end(u.arbitrary().unwrap_or(false));
}

fn ms(u: &mut Unstructured<'_>) -> Duration {
    Duration::from_millis(u.int_in_range(0..=3_000u64).unwrap_or(1_000))
}

impl Harness {
    fn live(&self) -> bool {
        self.pipes.is_some() && self.finished.is_none()
    }

    fn step(&mut self, u: &mut Unstructured<'_>) -> Result<()> {
        match u.int_in_range(0..=11u8)? {
            0 => {
                let pipes = ChildPipes {
                    stdin: u.arbitrary()?,
                    stdout: u.arbitrary()?,
                    stderr: u.arbitrary()?,
                };
                if self.pipes.is_none() {
                    self.pipes = Some(pipes);
                }
                self.sup.handle_spawned(self.now, pipes);
            }
            1 => self.eof(0),
            2 => self.eof(1),
            3 => {
                let status = if u.arbitrary()? {
                    ExitStatus::Code(u.arbitrary()?)
                } else {
                    ExitStatus::Signal(u.int_in_range(1..=64)?)
                };
                if self.live() && self.exit.is_none() {
                    self.exit = Some(status);
                }
                self.sup.handle_exited(self.now, status);
            }
            4 => {
                self.requested |= self.live();
                self.sup.shutdown(self.now);
            }
            5 => {
                self.requested |= self.live();
                self.cancel_requested |= self.live();
                self.sup.cancel(self.now);
            }
            // A signal the application got, passed on.
            11 => {
                self.requested |= self.live();
                let signal = *u.choose(&[
                    Signal::Interrupt,
                    Signal::Hangup,
                    Signal::Term,
                    Signal::Kill,
                ])?;
                self.sup.forward(self.now, signal);
            }
            // A spurious or due timeout at the current time.
            6 => return self.timeout_at(self.now),
            // Jump to the next deadline.
            7 => {
                if let Some(at) = self.sup.poll_timeout() {
                    self.now = self.now.max(at);
                }
                return self.timeout_at(self.now);
            }
            // Just before the next deadline: must do nothing.
            8 => {
                if let Some(at) = self.sup.poll_timeout() {
                    if let Some(before) = at.checked_sub(Duration::from_millis(1)) {
                        if before >= self.now {
                            self.now = before;
                            let queued = self.sup.actions.len();
                            self.sup.handle_timeout(self.now);
                            assert_eq!(self.sup.actions.len(), queued, "early timeout acted");
                            assert_eq!(self.sup.poll_timeout(), Some(at));
                        }
                    }
                }
            }
            _ => self.now += ms(u),
        }
        self.drain();
        Ok(())
    }

    fn timeout_at(&mut self, now: Instant) -> Result<()> {
        self.sup.handle_timeout(now);
        self.drain();
        if let Some(at) = self.sup.poll_timeout() {
            assert!(at > now, "deadline left expired after handle_timeout");
        }
        Ok(())
    }

    fn eof(&mut self, index: usize) {
        if self.live() && !self.eof[index] {
            self.eof[index] = true;
            self.eof_after_request[index] = self.requested;
            self.eof_after_cancel[index] = self.cancel_requested;
        }
        if index == 0 {
            self.sup.handle_stdout_eof(self.now);
        } else {
            self.sup.handle_stderr_eof(self.now);
        }
    }

    fn watched(&self) -> [bool; 2] {
        self.pipes.map_or([false; 2], |p| [p.stdout, p.stderr])
    }

    fn any_open(&self) -> bool {
        let watched = self.watched();
        (watched[0] && !self.eof[0]) || (watched[1] && !self.eof[1])
    }

    fn drain(&mut self) {
        while let Some(action) = self.sup.poll_action() {
            assert!(self.finished.is_none(), "action after Finished: {action:?}");
            let pipes = self.pipes.expect("no action before spawn");
            match action {
                ProcessAction::CloseStdin => {
                    assert!(pipes.stdin && !self.closed_stdin && self.requested);
                    self.closed_stdin = true;
                }
                ProcessAction::SignalGroup(Signal::Interrupt | Signal::Hangup) => {
                    assert!(!self.forwarded && self.requested, "a second pass-on");
                    assert!(!self.term && !self.kill, "a pass-on after the ladder began");
                    assert!(self.exit.is_none(), "a pass-on after the exit");
                    self.forwarded = true;
                }
                ProcessAction::SignalGroup(Signal::Term) => {
                    assert!(!self.term && !self.kill && self.requested);
                    assert!(self.exit.is_none(), "TERM after the exit");
                    self.term = true;
                }
                ProcessAction::SignalGroup(Signal::Kill) => {
                    assert!(!self.kill);
                    if self.exit.is_some() {
                        assert!(self.any_open(), "group KILL after exit with pipes closed");
                    } else {
                        assert!(self.term, "KILL without TERM before the exit");
                    }
                    self.kill = true;
                }
                ProcessAction::AbandonReaders => {
                    assert!(!self.abandoned && self.any_open());
                    self.abandoned = true;
                }
                ProcessAction::Finished(outcome) => {
                    self.check_outcome(&outcome);
                    self.finished = Some(outcome);
                }
            }
        }
        assert_eq!(self.abandoned, self.abandoned && self.finished.is_some());
        assert_eq!(self.sup.is_finished(), self.finished.is_some());
        if self.finished.is_some() {
            assert_eq!(self.sup.poll_timeout(), None, "deadline after Finished");
        }
        if self.pipes.is_some() && self.exit.is_some() && !self.any_open() {
            assert!(
                self.finished.is_some(),
                "exited and drained but not finished"
            );
        }
    }

    fn check_outcome(&self, o: &ProcessOutcome) {
        assert_eq!(o.exit_status, self.exit, "exit status not the observed one");
        assert_eq!(
            o.exit_status.is_none(),
            o.ended_by == EndedBy::ExitNotObserved
        );
        if o.exit_status.is_none() {
            assert!(self.kill, "gave up on the exit without KILL");
        }
        let ends = [o.stdout, o.stderr];
        for (i, watched) in self.watched().into_iter().enumerate() {
            match (watched, self.eof[i], ends[i]) {
                (false, _, None) => {}
                (true, true, Some(StreamEnd::Eof)) => assert!(!self.eof_after_request[i]),
                (true, true, Some(StreamEnd::EofAfterCancel)) => {
                    assert!(self.eof_after_cancel[i]);
                }
                (true, true, Some(StreamEnd::EofAfterShutdown)) => {
                    assert!(self.eof_after_request[i] && !self.eof_after_cancel[i]);
                }
                (true, false, Some(StreamEnd::AbandonedAfterDeadline)) => {
                    assert!(self.abandoned);
                    // A pipe is given up on only after the group was killed.
                    assert!(self.kill, "abandoned without a group KILL");
                }
                other => panic!("stream {i} end inconsistent: {other:?}"),
            }
        }
        assert_eq!(o.term_sent_at.is_some(), self.term);
        if self.forwarded {
            assert!(o.forwarded_at.is_some());
            assert!(matches!(
                o.forwarded_signal,
                Some(Signal::Interrupt | Signal::Hangup)
            ));
        }
        assert_eq!(o.kill_sent_at.is_some(), self.kill);
    }

    /// Drives to the end: either the child exits and its pipes close, or a
    /// cancel and the deadlines alone must finish it.
    fn end(&mut self, natural: bool) {
        if self.pipes.is_none() {
            self.pipes = Some(ChildPipes::ALL);
            self.sup.handle_spawned(self.now, ChildPipes::ALL);
        }
        if natural {
            if self.live() && self.exit.is_none() {
                self.exit = Some(ExitStatus::Code(0));
            }
            self.sup.handle_exited(self.now, ExitStatus::Code(0));
            self.drain();
            self.eof(0);
            self.drain();
            self.eof(1);
            self.drain();
        } else {
            self.requested |= self.live();
            self.cancel_requested |= self.live();
            self.sup.cancel(self.now);
            self.drain();
            for _ in 0..8 {
                let Some(at) = self.sup.poll_timeout() else {
                    break;
                };
                self.now = self.now.max(at);
                let _ = self.timeout_at(self.now);
            }
        }
        assert!(self.finished.is_some(), "never finished");
        // Nothing more comes out, whatever arrives late.
        self.sup.handle_exited(self.now, ExitStatus::Signal(9));
        self.eof(0);
        self.eof(1);
        self.sup.cancel(self.now);
        self.sup.shutdown(self.now);
        self.sup
            .handle_timeout(self.now + Duration::from_secs(3600));
        assert_eq!(self.sup.poll_action(), None);
    }
}
