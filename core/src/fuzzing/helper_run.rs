//! The fuzz harness of `helper`.

use crate::process::capture::SharedRetentionPool;
use crate::process::supervisor::{ExitStatus, Signal};
use crate::records::call::CallState;
use crate::time::Stamp;
use std::time::{Duration, Instant};
/// Fuzz entry point: drives a helper run with an arbitrary sequence of
/// approvals, denials, cancels, spawn reports, output, EOFs, exits and clock
/// moves (actions polled or left queued), then drives it to its end. Panics
/// on a violated invariant: `Finished` more than once or not last, `Spawn`
/// more than once or after a denial, a cancel before the spawn or an approval
/// timeout, retained bytes above the budgets, an invented exit status, or a
/// run that never finishes.
pub fn fuzz_helper_run(data: &[u8]) {
    run(data);
}

use crate::helper::*;
use crate::process::capture::{PoolConfig, RetentionPool};
use crate::process::supervisor::EndedBy;
use arbitrary::{Result, Unstructured};

const T0_MS: u64 = 1_700_000_000_000;

struct Harness {
    run: HelperRun,
    base: Instant,
    now_ms: u64,
    approval: bool,
    saw_request: bool,
    saw_spawn: bool,
    /// The run was authorized: by policy (no approval step) or by an
    /// approval it took.
    authorized: bool,
    /// A denial, a cancel before `Spawn` was polled, or an approval timeout happened.
    spawn_forbidden: bool,
    spawn_reported: bool,
    /// First exit fed while the helper was running.
    exit: Option<ExitStatus>,
    signals: Vec<Signal>,
    fed: [u64; 2],
    finished: Option<HelperOutcome>,
}

pub(super) fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let mut config = HelperOptions::default();
    config
        .stdout_mut()
        .head(small(&mut u, 16))
        .tail(small(&mut u, 64));
    config
        .stderr_mut()
        .head(small(&mut u, 16))
        .tail(small(&mut u, 64));
    let approval = match u.int_in_range(0..=15u8).unwrap_or(1) {
        0 => Some(Duration::MAX),
        1..=7 => None,
        _ => Some(ms(&mut u)),
    };
    // Mostly poll after every step, as adapters do; sometimes let actions pile up.
    let auto_drain = u.int_in_range(0..=3u8).unwrap_or(0) != 0;
    config
        .excerpt_bytes(small(&mut u, 128))
        .kill_on_overflow(u.arbitrary().unwrap_or(false))
        .approval(approval)
        .max_duration(ms(&mut u));
    config
        .supervisor_mut()
        .term_grace(ms(&mut u))
        .reader_drain_deadline(ms(&mut u));
    let limit = small(&mut u, 128);
    let mut pool = RetentionPool::new(PoolConfig::default().limit(limit));
    // 0: no pool; 1: grants drawn before the run (`new`); 2: drawn by the
    // run at its authorization (`start`).
    let pooling = u.int_in_range(0..=2u8).unwrap_or(0);
    let shared = SharedRetentionPool::new(PoolConfig::default().limit(limit));
    let (g1, g2) = if pooling == 1 {
        (
            Some(pool.grant(config.get_stdout().wanted())),
            Some(pool.grant(config.get_stderr().wanted())),
        )
    } else {
        (None, None)
    };
    // The harness's one base instant; the run never reads the clock.
    let base = Instant::now();
    config
        .call_id("c_fuzz")
        .session_id("s_fuzz")
        .operation("helper")
        .target("fuzz");
    let at = Stamp::new(base, T0_MS);
    let run = if pooling == 2 {
        config.pool(Some(shared.clone())).start(at)
    } else {
        HelperRun::new(&config, g1, g2, at)
    };
    let mut h = Harness {
        approval: approval.is_some(),
        run,
        base,
        now_ms: 0,
        saw_request: false,
        saw_spawn: false,
        authorized: approval.is_none(),
        spawn_forbidden: false,
        spawn_reported: false,
        exit: None,
        signals: Vec::new(),
        fed: [0; 2],
        finished: None,
    };
    h.check_queue();
    for _ in 0..64 {
        if h.step(&mut u).is_err() {
            break;
        }
        h.check_queue();
        if auto_drain {
            h.drain();
        }
    }
    h.end();
    let (g1, g2) = h.run.take_grants();
    for grant in [g1, g2].into_iter().flatten() {
        if pooling == 2 {
            shared
                .release(grant)
                .expect("grant came from the shared pool");
        } else {
            pool.release(grant).expect("grant came from this pool");
        }
    }
    assert_eq!(pool.in_use(), 0, "every grant came back");
    assert_eq!(
        shared.stats().outstanding,
        0,
        "every shared grant came back"
    );
    if pooling == 2 {
        // Drawn at the authorization, and only then: two grants or none.
        let want = if h.authorized { 2 } else { 0 };
        assert_eq!(shared.stats().grants, want, "grants against authorization");
    }
    assert!(matches!(h.run.take_grants(), (None, None)), "grants twice");
}

fn small(u: &mut Unstructured<'_>, max: usize) -> usize {
    u.int_in_range(0..=max).unwrap_or(max / 2)
}

fn ms(u: &mut Unstructured<'_>) -> Duration {
    Duration::from_millis(u.int_in_range(0..=3_000u64).unwrap_or(1_000))
}

impl Harness {
    fn at(&self) -> Stamp {
        Stamp::new(
            self.base + Duration::from_millis(self.now_ms),
            T0_MS + self.now_ms,
        )
    }

    fn running(&self) -> bool {
        self.run.phase == Phase::Running
    }

    fn step(&mut self, u: &mut Unstructured<'_>) -> Result<()> {
        let at = self.at();
        match u.int_in_range(0..=19u8)? {
            0 => {
                let pending = self.run.phase == Phase::AwaitingApproval;
                let result = self.run.approve(at);
                assert_eq!(
                    pending,
                    !matches!(result, Err(ApprovalError::NotPending { .. }))
                );
                if result.is_err() && pending {
                    self.spawn_forbidden = true;
                }
                self.authorized |= result.is_ok();
            }
            1 => {
                let pending = self.run.phase == Phase::AwaitingApproval;
                let result = self.run.deny(at);
                assert_eq!(
                    pending,
                    !matches!(result, Err(ApprovalError::NotPending { .. }))
                );
                if pending {
                    self.spawn_forbidden = true;
                }
            }
            2 => {
                if matches!(self.run.phase, Phase::AwaitingApproval | Phase::SpawnQueued) {
                    self.spawn_forbidden = true;
                }
                self.run.cancel(at);
            }
            3..=5 => {
                self.spawn_reported |= self.run.phase == Phase::Spawning;
                self.run.handle_spawned(at);
            }
            6 => self.run.handle_spawn_failed(at, "fuzz: no such file"),
            7..=10 => {
                let index = usize::from(u.arbitrary::<bool>()?);
                let len = u.int_in_range(0..=200usize)?;
                let chunk = u.bytes(len)?;
                if self.running() {
                    self.fed[index] += chunk.len() as u64;
                }
                if index == 0 {
                    self.run.handle_stdout(at, chunk);
                } else {
                    self.run.handle_stderr(at, chunk);
                }
            }
            11 => self.run.handle_stdout_eof(at),
            12 => self.run.handle_stderr_eof(at),
            13 => {
                let status = if u.arbitrary()? {
                    ExitStatus::Code(u.int_in_range(0..=3)?)
                } else {
                    ExitStatus::Signal(u.int_in_range(1..=15)?)
                };
                if self.running() && self.exit.is_none() {
                    self.exit = Some(status);
                }
                self.run.handle_exited(at, status);
            }
            14 => self.timeout(),
            15 => {
                if let Some(due) = self.run.poll_timeout() {
                    let due_ms = u64::try_from(due.duration_since(self.base).as_millis())
                        .expect("deadlines here are a few seconds from the base");
                    self.now_ms = self.now_ms.max(due_ms);
                }
                self.timeout();
            }
            16 => self.now_ms += u.int_in_range(0..=2_000u64)?,
            17 => self.drain(),
            18 => {
                if let Some(action) = self.run.poll_action() {
                    self.check(action);
                }
            }
            _ => {
                // Just before the deadline: must do nothing.
                if let Some(due) = self.run.poll_timeout() {
                    let due_ms = u64::try_from(due.duration_since(self.base).as_millis())
                        .expect("deadlines here are a few seconds from the base");
                    if due_ms > self.now_ms {
                        self.now_ms = due_ms - 1;
                        let queued = self.run.actions.len();
                        let state = self.run.state();
                        self.run.handle_timeout(self.at());
                        assert_eq!(self.run.actions.len(), queued, "early timeout acted");
                        assert_eq!(self.run.state(), state, "early timeout moved the call");
                        assert_eq!(self.run.poll_timeout(), Some(due));
                    }
                }
            }
        }
        if matches!(
            self.run.state(),
            CallState::Denied | CallState::FailedBeforeDispatch
        ) || (self.run.state() == CallState::Cancelled && !self.spawn_reported)
        {
            self.spawn_forbidden |= !self.saw_spawn;
        }
        Ok(())
    }

    fn timeout(&mut self) {
        let at = self.at();
        self.run.handle_timeout(at);
        if let Some(due) = self.run.poll_timeout() {
            assert!(
                due > at.instant,
                "deadline left expired after handle_timeout"
            );
        }
    }

    fn check_queue(&self) {
        assert!(self.run.actions.len() <= ACTION_QUEUE_CAPACITY);
        for stream in [&self.run.stdout, &self.run.stderr] {
            if let Slot::Capturing(c) = &stream.slot {
                let limit = if stream.name == StreamName::Stdout {
                    self.run.options.stdout.wanted()
                } else {
                    self.run.options.stderr.wanted()
                };
                assert!(c.retained() <= limit as u64, "retained above the budget");
            }
        }
    }

    fn drain(&mut self) {
        while let Some(action) = self.run.poll_action() {
            self.check(action);
        }
    }

    fn check(&mut self, action: HelperAction) {
        assert!(self.finished.is_none(), "action after Finished: {action:?}");
        match action {
            HelperAction::RequestApproval { deadline } => {
                assert!(self.approval && !self.saw_request && !self.saw_spawn);
                assert_eq!(Some(deadline), self.run.approval_deadline());
                self.saw_request = true;
            }
            HelperAction::Spawn => {
                assert!(!self.saw_spawn, "Spawn twice");
                assert!(!self.spawn_forbidden, "Spawn after deny/cancel/timeout");
                assert_eq!(self.run.state(), CallState::Authorized);
                self.saw_spawn = true;
            }
            HelperAction::SignalGroup(signal) => {
                assert!(self.spawn_reported, "signal to a helper never spawned");
                assert!(!self.signals.contains(&signal), "{signal:?} twice");
                self.signals.push(signal);
            }
            HelperAction::AbandonReaders | HelperAction::CloseReader(_) => {
                assert!(self.spawn_reported);
            }
            HelperAction::Finished(outcome) => {
                self.check_outcome(&outcome);
                self.finished = Some(*outcome);
            }
        }
    }

    fn check_outcome(&self, o: &HelperOutcome) {
        assert!(self.run.actions.is_empty(), "Finished not last");
        assert_eq!(o.process.is_some(), self.spawn_reported);
        assert_eq!(
            o.exit_status,
            o.process.as_ref().and_then(|p| p.exit_status)
        );
        assert_eq!(o.record.exit_status(), o.exit_status, "record exit status");
        if self.spawn_reported {
            assert_eq!(o.exit_status, self.exit, "exit status not the observed one");
        } else {
            assert_eq!(o.exit_status, None, "invented exit status");
        }
        assert!(o.record.state().is_terminal());
        assert_eq!(o.record.state(), self.run.state());
        if o.succeeded() {
            assert_eq!(o.exit_status, Some(ExitStatus::Code(0)));
        }
        if o.killed_on_overflow {
            assert!(self.run.options.kill_on_overflow);
            assert_eq!(o.record.state(), CallState::ForceKilled);
        }
        if o.record.state() == CallState::Unknown {
            let process = o.process.as_ref().expect("unknown only after a spawn");
            assert_eq!(process.ended_by, EndedBy::ExitNotObserved);
        }
        let limits = [
            self.run.options.stdout.wanted(),
            self.run.options.stderr.wanted(),
        ];
        for (i, stream) in [&o.stdout, &o.stderr].into_iter().enumerate() {
            assert_eq!(stream.summary.seen, self.fed[i], "seen counts every byte");
            assert!(stream.summary.retained <= limits[i] as u64);
            assert!(stream.excerpt.len() <= self.run.options.excerpt_bytes);
        }
        assert_eq!(o.record.stderr_bytes_seen(), self.fed[1]);
        assert_eq!(self.run.poll_timeout(), None, "deadline after Finished");
    }

    /// Drives the run to `Finished` within a bounded number of steps.
    fn end(&mut self) {
        for _ in 0..8 {
            self.drain();
            if self.finished.is_some() {
                break;
            }
            let at = self.at();
            if self.run.phase == Phase::Spawning {
                self.spawn_reported = true;
                self.run.handle_spawned(at);
            } else {
                if self.run.phase != Phase::Running {
                    self.spawn_forbidden |= !self.saw_spawn;
                }
                self.run.cancel(at);
            }
            self.drain();
            if let Some(due) = self.run.poll_timeout() {
                let due_ms = u64::try_from(due.duration_since(self.base).as_millis())
                    .expect("deadlines here are a few seconds from the base");
                self.now_ms = self.now_ms.max(due_ms);
                self.timeout();
            }
        }
        assert!(self.finished.is_some(), "the run never finished");
        assert!(self.run.is_finished());
        // Everything after the end is ignored.
        let at = self.at();
        self.run.cancel(at);
        self.run.handle_stderr(at, b"late");
        self.run.handle_timeout(at);
        assert!(self.run.poll_action().is_none());
    }
}
