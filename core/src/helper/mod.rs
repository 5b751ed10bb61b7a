//! One run of a command-line helper from inside a tool: approval, spawn,
//! budgeted captures of both output streams, cancel, and the observed outcome
//! with its call record (G10, G11, G12).
//!
//! [`HelperRun`] combines a [`CallLifecycle`] (G12), a [`ProcessSupervisor`]
//! (G11) and two budgeted [`OutputCapture`]s (G10), and decides how they affect
//! each other. Every adapter's `run_helper(command, limits, cancel)` is this
//! state machine plus spawning, pipe reading, reaping and signals, so the three
//! adapters behave alike by construction.
//!
//! # The run
//!
//! ```text
//! new ─┬─ approval set ─▶ awaiting approval ─ approve ─▶ spawn queued
//!      │                    ├─ deny, deadline ─▶ finished (denied)
//!      │                    └─ cancel ─────────▶ finished (cancelled)
//!      └─ no approval ──────────────────────────▶ spawn queued
//! spawn queued ─ poll `Spawn` ─▶ spawning ─┬─ handle_spawned ─────▶ running ─▶ … ─▶ finished
//!      └─ cancel ─▶ finished (cancelled)   └─ handle_spawn_failed ─▶ finished (failed_before_dispatch)
//! ```
//!
//! The approval step comes first and at once: [`HelperAction::RequestApproval`]
//! is queued by [`HelperRun::new`], before anything is spawned, so its timing
//! can never depend on helper output (there is none yet). The helper is
//! spawned only after the approval (G12: do not hide the real operation in a
//! "preflight"). Its deadline is fixed when the run is built; nothing but the
//! caller's clock, given with [`HelperInput::Timeout`] or another input,
//! makes it fire, and an expired approval is `denied` with reason
//! `approval_timeout`. Output fed before the spawn cannot be this helper's:
//! it is ignored and counted ([`HelperRun::ignored_inputs`]), never attached
//! to the call, and it moves no deadline.
//!
//! # The final state of the call
//!
//! Decided by the first of these that applies:
//!
//! | how the run ended | `record.state` | `record.outcome` |
//! | --- | --- | --- |
//! | denied (`HelperInput::Approval(false)`) | `denied` (reason `user`) | — |
//! | the approval deadline passed | `denied` (reason `approval_timeout`) | — |
//! | [`HelperInput::Cancel`] before the helper was spawned (while awaiting approval, before `Spawn` was polled, or while spawning when the spawn then failed) | `cancelled` | — |
//! | the spawn failed, or the approval deadline was not representable | `failed_before_dispatch` (with the reason) | — |
//! | [`HelperInput::Cancel`] after the spawn (also while spawning when the spawn then succeeded, and after the exit while a stream is still open) | `cancelled_after_dispatch` (`cancel_reason: "caller"`) | — |
//! | the streams reached [`HelperOptions::max_duration`] (the same cancel path) | `cancelled_after_dispatch` (`cancel_reason: "max_duration"`) | — |
//! | killed because a capture overflowed ([`HelperOptions::kill_on_overflow`]), no cancel before | `force_killed` | — |
//! | supervision gave up without observing an exit | `unknown` | — |
//! | the helper exited by itself with code 0 | `completed` | `succeeded` |
//! | the helper exited by itself with another code, or by a signal nobody here sent | `completed` | `remote_failure` |
//!
//! The transitions for a cancel and an overflow kill happen when they are
//! decided, so a [`HelperRun::record`] snapshot shows them at once; the exit
//! status, the stream ends and the stderr counters are attached as facts
//! whatever the state. `exit_status` is only ever one actually observed: a
//! helper that was never spawned, or whose exit was never seen, has `null`.
//!
//! # Discovery
//!
//! A run built from [`HelperOptions::discovery`] only finds out what the
//! operation will be. It has its own smaller budgets and maximum duration, no
//! approval step, and its records say `kind: "discovery"` with the
//! discovery's own `operation` name; the operation it resolves is a run of
//! its own, approved with the resolved target.
//!
//! # What the adapter does, in order
//!
//! 1. [`HelperOptions::start`], with the process-wide
//!    [`SharedRetentionPool`] in the options: the run takes its two grants
//!    from it when it is authorized, right before the spawn, so a call
//!    waiting for its approval holds none of the pool. ([`HelperRun::new`]
//!    takes grants already drawn.)
//! 2. Write [`HelperRun::record`] to the audit log.
//! 3. After this and after every later input, drain
//!    [`HelperRun::poll_output`] until [`HelperOutput::Timeout`]; arm one
//!    timer for its deadline and feed [`HelperInput::Timeout`] when it is
//!    reached. Every input goes through [`HelperRun::handle_input`].
//! 4. [`HelperAction::RequestApproval`]: show the approval card, with its
//!    deadline; feed the answer as [`HelperInput::Approval`]. Never redraw
//!    the card on helper output.
//! 5. [`HelperAction::Spawn`]: write the record (state `authorized`); spawn
//!    the program without a shell, as leader of its own process group, with
//!    **stdin from `/dev/null`** and stdout and stderr piped. Never let the
//!    helper inherit the server's stdin or stdout: they carry the MCP protocol
//!    (G13). Then feed [`HelperInput::Spawned`] and write the record again
//!    (state `dispatched`), or [`HelperInput::SpawnFailed`] with the error
//!    text.
//! 6. From the spawn until [`HelperAction::CloseReader`] or
//!    [`HelperAction::AbandonReaders`], read both pipes continuously and feed
//!    every read's result as [`HelperInput::Read`]; never pause a reader (G1,
//!    G10). The exit goes in as [`HelperInput::Exited`].
//! 7. [`HelperAction::SignalGroup`]: `killpg` the group recorded at spawn;
//!    `ESRCH` is not an error. [`HelperAction::CloseReader`]: drop that
//!    reader; [`HelperAction::AbandonReaders`]: drop the readers still open.
//! 8. A cancel from the tool's caller (G7) is [`HelperInput::Cancel`].
//! 9. [`HelperAction::Finished`]: write `outcome.record` to the audit log,
//!    give the outcome to the tool, release [`HelperRun::take_grants`] to the
//!    pool, and hand a child whose exit was not observed to a background
//!    reaper.
//!
//! # Memory
//!
//! Nothing is allocated for the captures before the spawn: a denied or
//! cancelled run holds only its record. From the spawn, the captures hold at
//! most `stdout.head + stdout.tail + stderr.head + stderr.tail` bytes (80 KiB
//! with the defaults; less when a pool grant is smaller). At `Finished` the
//! outcome adds the rendered texts (at most about three times the retained
//! bytes each, plus a marker line) and two excerpts of at most
//! `excerpt_bytes` each. The record is bounded by [`CallConfig`](crate::CallConfig) (≈ 39 KiB with
//! the defaults). The action queue holds at most [`ACTION_QUEUE_CAPACITY`]
//! entries.

use std::time::{Duration, Instant};

use serde::Serialize;
use smallvec::SmallVec;

use crate::driver::{exit_before_end, LookForExit};
use crate::io_result::{ChildStream, ReadResult};
use crate::process::capture::{
    CaptureConfig, CaptureSummary, Grant, OutputCapture, SharedRetentionPool,
};
use crate::process::supervisor::{
    ChildPipes, ExitStatus, ProcessAction, ProcessOutcome, ProcessSupervisor, Signal,
};
use crate::records::call::{CallLifecycle, CallOutcome, CallRecord, CallState, CancelReason};
use crate::time::Stamp;

mod options;
pub use options::{HelperOptions, RecordSink, RecordTap};

/// Default stdout capture of a helper: the newest 64 KiB.
pub const DEFAULT_STDOUT_TAIL: usize = 64 * 1024;

/// Default maximum duration of a helper's output streams, from the spawn: 10
/// minutes. Long enough for a slow clone, build or transfer; short enough
/// that a helper stuck writing retries cannot hold its pool grant, its pipes
/// and its readers for the life of the server.
pub const DEFAULT_MAX_DURATION: Duration = Duration::from_secs(10 * 60);

/// Default stdout capture of a discovery run: the newest 16 KiB (a resolved
/// name, an endpoint, a short listing).
pub const DISCOVERY_STDOUT_TAIL: usize = 16 * 1024;

/// Default stderr capture of a discovery run: the newest 4 KiB (enough for
/// the error that explains a failed lookup).
pub const DISCOVERY_STDERR_TAIL: usize = 4 * 1024;

/// Default agent excerpt of a discovery run's streams: 1 KiB each.
pub const DISCOVERY_EXCERPT: usize = 1024;

/// Default maximum duration of a discovery run's streams: 30 seconds. A
/// lookup that takes longer is stuck; the operation waits on it.
pub const DISCOVERY_MAX_DURATION: Duration = Duration::from_secs(30);

/// The most actions a [`HelperRun`] ever holds queued: one each of
/// `RequestApproval`, `Spawn`, `SignalGroup(Term)`, `SignalGroup(Kill)`,
/// `AbandonReaders` and `Finished`, each emitted at most once per run.
pub(crate) const ACTION_QUEUE_CAPACITY: usize = 6;

/// What a helper's child gets as pipes: stdout and stderr, never stdin (the
/// adapter gives it `/dev/null`). A helper that needs input takes it as
/// arguments or files; a stdin pipe would add a write path that can block.
const HELPER_PIPES: ChildPipes = ChildPipes::OUTPUTS;

/// What was kept of one output stream of the helper.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CapturedOutput {
    /// Counts: bytes seen, retained, truncated (all zero when never spawned).
    pub summary: CaptureSummary,
    /// The retained bytes decoded lossily, after a marker line written by us
    /// when bytes were dropped (`[stdout truncated: kept last 65536 of
    /// 10485760 bytes]`).
    pub text: String,
    /// The newest bytes for an agent's context, marker included, at most
    /// [`HelperOptions::excerpt_bytes`].
    pub excerpt: String,
}

impl CapturedOutput {
    fn empty() -> Self {
        Self {
            summary: CaptureSummary::default(),
            text: String::new(),
            excerpt: String::new(),
        }
    }
}

/// Everything observed about one helper run, built once at the end (G12).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct HelperOutcome {
    /// The supervisor's account of the child; `None` when it was never spawned.
    pub process: Option<ProcessOutcome>,
    /// The exit status actually observed; `None` when none was (never an
    /// invented `0`).
    pub exit_status: Option<ExitStatus>,
    /// The helper's stdout, within its budget.
    pub stdout: CapturedOutput,
    /// The helper's stderr, within its budget.
    pub stderr: CapturedOutput,
    /// True if the helper was killed because a capture overflowed.
    pub killed_on_overflow: bool,
    /// The final call record: terminal state, exit status, stream end and
    /// stderr counters.
    pub record: CallRecord,
}

impl HelperOutcome {
    /// True when the helper ran to its end by itself and exited with code 0
    /// (state `completed`, outcome `succeeded`).
    pub fn succeeded(&self) -> bool {
        self.record.state() == CallState::Completed
            && self.record.outcome() == Some(CallOutcome::Succeeded)
            && self.exit_status == Some(ExitStatus::Code(0))
    }
}

/// One thing that happened to a run: the one way into [`HelperRun`]
/// ([`HelperRun::handle_input`]). After each, drain
/// [`HelperRun::poll_output`] until it says [`HelperOutput::Timeout`].
#[non_exhaustive]
pub enum HelperInput<'a> {
    /// The adapter spawned the helper, as [`HelperAction::Spawn`] asked: the
    /// call is `dispatched`, the captures start. A cancel that came while
    /// spawning is applied now (`SIGTERM` at once).
    Spawned,
    /// Spawning failed (program not found, permissions, limits), for this
    /// reason: the call is `failed_before_dispatch` (or `cancelled`, if a
    /// cancel came while spawning). No exit status.
    SpawnFailed(&'a str),
    /// A read of the helper's `stream` into `buf` returned `result` (the
    /// rule: [`ReadResult`]). At the end of a stream, `look` is asked whether
    /// the helper has exited, and an exit it reports is taken first, whatever
    /// order the loop saw them in; then [`HelperAction::CloseReader`] follows.
    Read {
        /// Which stream.
        stream: ChildStream,
        /// What the read system call returned.
        result: std::io::Result<usize>,
        /// The buffer it read into (the first `n` bytes are used).
        buf: &'a [u8],
        /// A non-reaping look at the exit.
        look: LookForExit<'a>,
    },
    /// The wait for the helper's exit returned this. A failed wait means no
    /// status can ever be observed: the supervisor's deadlines end the run.
    Exited(std::io::Result<ExitStatus>),
    /// The user's answer to [`HelperAction::RequestApproval`]: `true`
    /// approves. An answer at or after the deadline finds the call denied;
    /// one with no approval pending is ignored (both logged at debug).
    Approval(bool),
    /// Cancel the run. Before the spawn: `cancelled`, `Finished` without a
    /// spawn; while spawning: applied when the spawn is reported; after it:
    /// `cancelled_after_dispatch` at once, `SIGTERM` to the group, `SIGKILL`
    /// after the grace, the readers drained within their deadline (G11).
    /// Idempotent; after `Finished` it does nothing.
    Cancel,
    /// Time has passed: deadlines that are due act; before them, nothing.
    Timeout,
}

impl std::fmt::Debug for HelperInput<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Spawned => f.write_str("Spawned"),
            Self::SpawnFailed(reason) => f.debug_tuple("SpawnFailed").field(reason).finish(),
            Self::Read { stream, result, .. } => f
                .debug_struct("Read")
                .field("stream", stream)
                .field("result", result)
                .finish_non_exhaustive(),
            Self::Exited(r) => f.debug_tuple("Exited").field(r).finish(),
            Self::Approval(yes) => f.debug_tuple("Approval").field(yes).finish(),
            Self::Cancel => f.write_str("Cancel"),
            Self::Timeout => f.write_str("Timeout"),
        }
    }
}

/// What the run asks of its loop, in the order it must happen, from
/// [`HelperRun::poll_output`]: actions first, then the next deadline, which
/// ends the drain.
#[derive(Debug)]
pub enum HelperOutput {
    /// Do this now.
    Action(HelperAction),
    /// Nothing more until the next input: wait for I/O, the answer, or this
    /// instant, then feed [`HelperInput::Timeout`]. `None`: no deadline.
    Timeout(Option<Instant>),
}

/// What the adapter must do, inside [`HelperOutput::Action`].
#[derive(Debug)]
#[non_exhaustive]
pub enum HelperAction {
    /// Show the approval request; answer with [`HelperInput::Approval`]
    /// before `deadline`. Emitted at most once, first, and
    /// withdrawn if the run moves on (answer, cancel) before it is polled.
    RequestApproval {
        /// When an unanswered approval becomes a denial.
        deadline: Instant,
    },
    /// Spawn the helper now (own process group, stdin `/dev/null`, stdout and
    /// stderr piped), then report [`HelperInput::Spawned`] or
    /// [`HelperInput::SpawnFailed`]. Emitted at most once, and never
    /// after a denial or a cancel before it was polled.
    Spawn,
    /// Send this signal to the helper's process group; `ESRCH` is not an error.
    SignalGroup(Signal),
    /// Stop reading the streams that are still open (drop their read ends).
    AbandonReaders,
    /// This stream is at its end: stop reading it (drop its read end).
    CloseReader(ChildStream),
    /// The run is over. Emitted exactly once, always last. Release the grants
    /// from [`HelperRun::take_grants`].
    Finished(Box<HelperOutcome>),
}

/// Why an [`HelperInput::Approval`] did not take effect (logged at debug).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalError {
    /// No approval is pending: none was configured, it was already settled,
    /// or the run is over.
    #[error("no approval is pending (call is {state})")]
    NotPending {
        /// The call's state when the answer came.
        state: CallState,
    },
    /// The deadline had passed: the call is `denied` with reason
    /// `approval_timeout`, and `Finished` is queued.
    #[error("the approval deadline had passed; the call is denied")]
    Expired,
}

/// Where the run is; the call's own state is in the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// `RequestApproval` queued or shown; no helper exists.
    AwaitingApproval,
    /// Authorized; `Spawn` queued but not polled (it can still be withdrawn).
    SpawnQueued,
    /// `Spawn` polled: the adapter is spawning; waiting for its report.
    Spawning,
    /// Spawned: the supervisor owns the child.
    Running,
    /// `Finished` queued; every input is ignored.
    Finished,
}

/// One output stream's capture over the run.
#[derive(Debug)]
pub(crate) enum Slot {
    /// Not spawned: the grant waits, nothing is allocated.
    Waiting(Option<Grant>),
    /// Spawned: capturing.
    Capturing(OutputCapture),
    /// Finished; the counts stay readable.
    Done(CaptureSummary),
}

#[derive(Debug)]
pub(crate) struct Stream {
    pub(crate) name: StreamName,
    pub(crate) slot: Slot,
}

impl Stream {
    fn new(name: StreamName, grant: Option<Grant>) -> Self {
        Self {
            name,
            slot: Slot::Waiting(grant),
        }
    }

    /// Gives a stream that is not spawned yet its grant.
    fn grant(&mut self, grant: Grant) {
        if let Slot::Waiting(slot) = &mut self.slot {
            *slot = Some(grant);
        }
    }

    /// Allocates the capture (at the spawn), within the grant if there is one.
    fn start(&mut self, config: &CaptureConfig) {
        if let Slot::Waiting(grant) = &mut self.slot {
            let capture = match grant.take() {
                Some(grant) => OutputCapture::with_grant(config, grant),
                None => OutputCapture::new(config),
            };
            self.slot = Slot::Capturing(capture);
        }
    }

    /// Captures a chunk; true if the capture has dropped bytes by now.
    fn push(&mut self, chunk: &[u8]) -> bool {
        match &mut self.slot {
            Slot::Capturing(capture) => {
                capture.push(chunk);
                capture.truncated()
            }
            Slot::Waiting(_) | Slot::Done(_) => false,
        }
    }

    /// (seen, retained, truncated) so far.
    fn counts(&self) -> (u64, u64, bool) {
        match &self.slot {
            Slot::Capturing(c) => (c.seen(), c.retained(), c.truncated()),
            Slot::Done(s) => (s.seen, s.retained, s.truncated),
            Slot::Waiting(_) => (0, 0, false),
        }
    }

    /// Ends the capture: its text for the outcome and the grant to give back.
    fn finish(&mut self, excerpt_bytes: usize) -> (CapturedOutput, Option<Grant>) {
        let slot = std::mem::replace(&mut self.slot, Slot::Done(CaptureSummary::default()));
        match slot {
            Slot::Waiting(grant) => (CapturedOutput::empty(), grant),
            Slot::Capturing(capture) => {
                let captured = capture.finish();
                let output = CapturedOutput {
                    summary: captured.summary(),
                    text: captured.render(self.name.as_str()),
                    excerpt: captured.excerpt(self.name.as_str(), excerpt_bytes),
                };
                self.slot = Slot::Done(output.summary);
                (output, captured.into_grant())
            }
            Slot::Done(summary) => {
                self.slot = Slot::Done(summary);
                (CapturedOutput::empty(), None)
            }
        }
    }
}

/// One run of a command-line helper from inside a tool (sans-IO).
///
/// # Methods, by group
///
/// - **Getters**: [`options`](Self::options), [`record`](Self::record) (a
///   snapshot of the call record at any time, for the audit lines before and
///   after the spawn), [`state`](Self::state),
///   [`approval_deadline`](Self::approval_deadline),
///   [`is_spawned`](Self::is_spawned), [`is_finished`](Self::is_finished),
///   [`stdout_seen`](Self::stdout_seen), [`stderr_seen`](Self::stderr_seen),
///   [`killed_on_overflow`](Self::killed_on_overflow),
///   [`supervisor`](Self::supervisor),
///   [`ignored_inputs`](Self::ignored_inputs).
/// - **The one input**: [`handle_input`](Self::handle_input) with a
///   [`HelperInput`] (the spawn, reads, the exit, the approval, a cancel,
///   the time); [`take_grants`](Self::take_grants) after `Finished`.
/// - **The one output**: [`poll_output`](Self::poll_output), a
///   [`HelperOutput`].
///
/// # Polling order
///
/// After construction and after any input: `poll_output` until
/// `Timeout(next)` (`Finished` ends the run), then arm one timer for `next`
/// and feed `HelperInput::Timeout` when it is reached; a spurious one
/// (before the deadline, or with none pending) does nothing. Keep reading
/// stdout and stderr from the spawn until `CloseReader` or `AbandonReaders`:
/// the run never asks the adapter to pause a reader.
///
/// # Bad input
///
/// Facts that cannot belong to this run are ignored and counted in
/// [`ignored_inputs`](Self::ignored_inputs): output, EOFs or an exit before
/// the spawn (there is no helper yet, so bytes from elsewhere are never
/// attached to this call) or after `Finished`; a spawn report before `Spawn`
/// was polled or twice. The supervisor ignores its own out-of-order facts
/// (see [`ProcessSupervisor`]). Nothing panics on input.
#[derive(Debug)]
pub struct HelperRun {
    pub(crate) options: HelperOptions,
    lifecycle: CallLifecycle,
    supervisor: ProcessSupervisor,
    pub(crate) phase: Phase,
    pub(crate) stdout: Stream,
    pub(crate) stderr: Stream,
    /// A cancel arrived after the spawn (or while spawning), or the streams
    /// reached their maximum duration.
    cancel_requested: bool,
    /// When the streams reach their maximum duration; set at the spawn.
    stream_deadline: Option<Instant>,
    killed_on_overflow: bool,
    /// Bounded by [`ACTION_QUEUE_CAPACITY`]: each kind is queued at most once.
    pub(crate) actions: SmallVec<[HelperAction; ACTION_QUEUE_CAPACITY]>,
    finished_polled: bool,
    grants: (Option<Grant>, Option<Grant>),
    /// Where the streams' grants come from when the run is authorized
    /// ([`HelperOptions::start`]); `None` once taken, or without a pool.
    pool: Option<SharedRetentionPool>,
    ignored_inputs: u64,
    /// Waiting for the exit failed: no status will ever be observed.
    exit_wait_failed: bool,
}

impl HelperRun {
    /// A run of one helper, built from `options` (its limits and its call's
    /// identity) and, if a process-wide retention pool is used, one grant
    /// per stream already drawn from it (the options' own pool is not used;
    /// [`HelperOptions::start`] draws the grants from it only when the run
    /// is authorized).
    ///
    /// Validates the call, then either requests the approval
    /// ([`HelperAction::RequestApproval`], with the deadline fixed now) or
    /// authorizes it by policy ([`HelperAction::Spawn`]). Never fails: an
    /// approval deadline that cannot be represented ends the run at once as
    /// `failed_before_dispatch`.
    pub fn new(
        options: &HelperOptions,
        stdout_grant: Option<Grant>,
        stderr_grant: Option<Grant>,
        at: Stamp,
    ) -> Self {
        Self::build(options, (stdout_grant, stderr_grant), None, at)
    }

    pub(crate) fn build(
        options: &HelperOptions,
        (stdout_grant, stderr_grant): (Option<Grant>, Option<Grant>),
        pool: Option<SharedRetentionPool>,
        at: Stamp,
    ) -> Self {
        let mut lifecycle = CallLifecycle::new(options.get_call(), options.identity(), at.unix_ms);
        if let Some(mark) = options.stderr.get_debug().or(options.stdout.get_debug()) {
            lifecycle.mark_debug(mark);
        }
        lifecycle.mark_kind(options.kind);
        lifecycle
            .validate(at)
            .expect("a new call is `received`, which always validates");
        let mut run = Self {
            supervisor: ProcessSupervisor::new(*options.get_supervisor()),
            lifecycle,
            phase: Phase::AwaitingApproval,
            stdout: Stream::new(StreamName::Stdout, stdout_grant),
            stderr: Stream::new(StreamName::Stderr, stderr_grant),
            cancel_requested: false,
            stream_deadline: None,
            killed_on_overflow: false,
            actions: SmallVec::new(),
            finished_polled: false,
            grants: (None, None),
            pool,
            ignored_inputs: 0,
            exit_wait_failed: false,
            options: options.clone(),
        };
        if run.options.approval_ignored() {
            run.lifecycle
                .note(at.unix_ms, "approval ignored: a discovery run has none");
        }
        match run.options.get_approval() {
            Some(deadline_in) => match run.lifecycle.request_approval(at, deadline_in) {
                Ok(()) => {
                    let deadline = run
                        .lifecycle
                        .approval_deadline()
                        .expect("request_approval succeeded, so the deadline is set");
                    run.actions.push(HelperAction::RequestApproval { deadline });
                }
                Err(_) => {
                    run.lifecycle
                        .fail_before_dispatch(at, "approval deadline out of range")
                        .expect("a `validated` call can always fail before dispatch");
                    run.finish(at, None);
                }
            },
            None => {
                run.lifecycle
                    .authorize(at)
                    .expect("a `validated` call can always be authorized");
                run.queue_spawn();
            }
        }
        run
    }

    // ---- getters ----

    /// The options this run was built from.
    pub fn options(&self) -> &HelperOptions {
        &self.options
    }

    /// The call record as it stands now, in any state. Write it before the
    /// spawn (state `authorized`), after it (`dispatched`), and take the final
    /// one from the outcome.
    pub fn record(&self) -> &CallRecord {
        self.lifecycle.record()
    }

    /// The call's state now.
    pub fn state(&self) -> CallState {
        self.lifecycle.state()
    }

    /// The approval deadline, if an approval was requested (kept after it is
    /// settled, for inspection).
    pub fn approval_deadline(&self) -> Option<Instant> {
        self.lifecycle.approval_deadline()
    }

    /// True once `handle_spawned` was accepted.
    pub fn is_spawned(&self) -> bool {
        self.supervisor.is_spawned()
    }

    /// True once `Finished` has been returned by `poll_action`.
    pub fn is_finished(&self) -> bool {
        self.finished_polled
    }

    /// stdout bytes read from the helper so far, including dropped ones.
    pub fn stdout_seen(&self) -> u64 {
        self.stdout.counts().0
    }

    /// stderr bytes read from the helper so far, including dropped ones.
    pub fn stderr_seen(&self) -> u64 {
        self.stderr.counts().0
    }

    /// True once a capture overflow started the kill.
    pub fn killed_on_overflow(&self) -> bool {
        self.killed_on_overflow
    }

    /// The process supervisor.
    pub fn supervisor(&self) -> &ProcessSupervisor {
        &self.supervisor
    }

    /// Inputs ignored because they could not belong to this run in its
    /// current phase (see the type docs), plus those the supervisor ignored.
    pub fn ignored_inputs(&self) -> u64 {
        self.ignored_inputs
            .saturating_add(self.supervisor.ignored_inputs())
    }

    // ---- the one input and the one output ----

    /// Takes one input (see [`HelperInput`] for what each means). Then drain
    /// [`poll_output`](Self::poll_output).
    pub fn handle_input(&mut self, at: Stamp, input: HelperInput<'_>) {
        match input {
            HelperInput::Spawned => self.handle_spawned(at),
            HelperInput::SpawnFailed(reason) => self.handle_spawn_failed(at, reason),
            HelperInput::Read {
                stream,
                result,
                buf,
                look,
            } => {
                if !self.handle_read_result(at, stream, result, buf, look) {
                    // Before anything the end queued (`Finished` stays last).
                    self.actions.insert(0, HelperAction::CloseReader(stream));
                }
            }
            HelperInput::Exited(r) => self.handle_exit_result(at, r),
            HelperInput::Approval(approved) => {
                let r = if approved {
                    self.approve(at)
                } else {
                    self.deny(at)
                };
                if let Err(e) = r {
                    tracing::debug!(error = %e, "approval answer not applied");
                }
            }
            HelperInput::Cancel => self.cancel(at),
            HelperInput::Timeout => self.handle_timeout(at),
        }
    }

    /// The next thing the loop must do: each queued action in order, then
    /// [`HelperOutput::Timeout`] (the end of this drain; it repeats until
    /// the next input).
    #[must_use]
    pub fn poll_output(&mut self) -> HelperOutput {
        match self.poll_action() {
            Some(action) => HelperOutput::Action(action),
            None => HelperOutput::Timeout(self.poll_timeout()),
        }
    }

    // ---- inputs, one by one (what `handle_input` calls) ----

    /// The adapter spawned the helper (after polling [`HelperAction::Spawn`]):
    /// the call is `dispatched`, the captures start. If a cancel came while
    /// spawning, it is applied now: `SIGTERM` at once.
    pub(crate) fn handle_spawned(&mut self, at: Stamp) {
        if self.phase != Phase::Spawning {
            self.ignore("spawned without a polled Spawn");
            return;
        }
        self.phase = Phase::Running;
        self.lifecycle
            .dispatch(at)
            .expect("spawning happens only in state `authorized`, which dispatches");
        self.supervisor.handle_spawned(at.instant, HELPER_PIPES);
        self.stream_deadline = at.instant.checked_add(self.options.max_duration);
        self.stdout.start(&self.options.stdout);
        self.stderr.start(&self.options.stderr);
        if self.cancel_requested {
            self.lifecycle
                .cancel_because(at, CancelReason::Caller)
                .expect("a `dispatched` call can always be cancelled");
            self.supervisor.cancel(at.instant);
        }
        self.pump(at);
    }

    /// Spawning failed (program not found, permissions, limits): the call is
    /// `failed_before_dispatch` with `reason` (cut to the record's text
    /// limit), or `cancelled` if a cancel came while spawning (the reason is
    /// then a note). No exit status.
    pub(crate) fn handle_spawn_failed(&mut self, at: Stamp, reason: &str) {
        if self.phase != Phase::Spawning {
            self.ignore("spawn failure without a polled Spawn");
            return;
        }
        if self.cancel_requested {
            self.lifecycle
                .cancel_because(at, CancelReason::Caller)
                .expect("spawning happens only in state `authorized`, which cancels");
            self.lifecycle
                .note(at.unix_ms, &format!("spawn failed: {reason}"));
        } else {
            self.lifecycle
                .fail_before_dispatch(at, reason)
                .expect("spawning happens only in state `authorized`, which can fail");
        }
        self.finish(at, None);
    }

    /// Bytes from the helper's stdout: captured within budget, always counted
    /// (G10). The first dropped byte starts the kill when
    /// [`HelperOptions::kill_on_overflow`] is set.
    pub(crate) fn handle_stdout(&mut self, at: Stamp, chunk: &[u8]) {
        if self.phase != Phase::Running {
            self.ignore("stdout outside the helper's life");
            return;
        }
        if self.stdout.push(chunk) {
            self.overflowed(at, StreamName::Stdout);
        }
    }

    /// Bytes from the helper's stderr: captured within budget, always counted
    /// (G10). They never move the approval deadline or decide a transition
    /// (G12), unless [`HelperOptions::kill_on_overflow`] is set.
    pub(crate) fn handle_stderr(&mut self, at: Stamp, chunk: &[u8]) {
        if self.phase != Phase::Running {
            self.ignore("stderr outside the helper's life");
            return;
        }
        let truncated = self.stderr.push(chunk);
        let (seen, retained, truncated_now) = self.stderr.counts();
        self.lifecycle.observe_stderr(seen, retained, truncated_now);
        if truncated {
            self.overflowed(at, StreamName::Stderr);
        }
    }

    /// The helper's stdout reached EOF (a read error ends the reader too).
    pub(crate) fn handle_stdout_eof(&mut self, at: Stamp) {
        if self.phase != Phase::Running {
            self.ignore("stdout EOF outside the helper's life");
            return;
        }
        self.supervisor.handle_stdout_eof(at.instant);
        self.pump(at);
    }

    /// The helper's stderr reached EOF (a read error ends the reader too).
    pub(crate) fn handle_stderr_eof(&mut self, at: Stamp) {
        if self.phase != Phase::Running {
            self.ignore("stderr EOF outside the helper's life");
            return;
        }
        self.supervisor.handle_stderr_eof(at.instant);
        self.pump(at);
    }

    /// Whether the exit was observed (or waiting for it failed for good):
    /// the loop stops waiting for it.
    pub fn exit_seen(&self) -> bool {
        self.exit_wait_failed || self.supervisor.exit_status().is_some()
    }

    /// A read of the helper's `stream` into `buf` returned `r` (the rule:
    /// [`ReadResult`]). At the end of the stream, `look` is asked whether the
    /// helper has exited, and an exit it reports is taken first, whatever
    /// order the loop saw them in. Returns whether the stream is still open.
    pub(crate) fn handle_read_result(
        &mut self,
        at: Stamp,
        stream: ChildStream,
        r: std::io::Result<usize>,
        buf: &[u8],
        look: LookForExit<'_>,
    ) -> bool {
        match (ReadResult::from(r), stream) {
            (ReadResult::Bytes(n), ChildStream::Stdout) => {
                self.handle_stdout(at, &buf[..n.min(buf.len())]);
            }
            (ReadResult::Bytes(n), ChildStream::Stderr) => {
                self.handle_stderr(at, &buf[..n.min(buf.len())]);
            }
            (ReadResult::Again, _) => {}
            (ReadResult::End(_), _) => {
                if let Some(r) = exit_before_end(self.exit_seen(), look) {
                    self.handle_exit_result(at, r);
                }
                match stream {
                    ChildStream::Stdout => self.handle_stdout_eof(at),
                    ChildStream::Stderr => self.handle_stderr_eof(at),
                }
                return false;
            }
        }
        true
    }

    /// The wait for the helper's exit returned `r`. A failed wait means no
    /// status can ever be observed: the supervisor's deadlines end the run.
    pub(crate) fn handle_exit_result(&mut self, at: Stamp, r: std::io::Result<ExitStatus>) {
        match r {
            Ok(status) => self.handle_exited(at, status),
            Err(e) => {
                self.exit_wait_failed = true;
                tracing::warn!(error = %e, "waiting for the helper failed");
            }
        }
    }

    /// The helper's exit was observed (`waitpid`) with this status.
    pub(crate) fn handle_exited(&mut self, at: Stamp, status: ExitStatus) {
        if self.phase != Phase::Running {
            self.ignore("exit outside the helper's life");
            return;
        }
        self.supervisor.handle_exited(at.instant, status);
        self.pump(at);
    }

    /// Time has reached `at`: an expired approval becomes `denied`
    /// (`approval_timeout`) and ends the run unspawned; streams past their
    /// [maximum duration](HelperOptions::max_duration) cancel the run
    /// (`cancel_reason: "max_duration"`); the supervisor's graces and drain
    /// deadlines escalate. Before any deadline it does nothing.
    pub(crate) fn handle_timeout(&mut self, at: Stamp) {
        match self.phase {
            Phase::AwaitingApproval => {
                self.lifecycle.handle_timeout(at);
                if self.lifecycle.state() == CallState::Denied {
                    self.finish(at, None);
                }
            }
            Phase::Running => {
                if self
                    .stream_deadline_running()
                    .is_some_and(|deadline| at.instant >= deadline)
                {
                    self.max_duration_reached(at);
                }
                self.supervisor.handle_timeout(at.instant);
                self.pump(at);
            }
            Phase::SpawnQueued | Phase::Spawning | Phase::Finished => {}
        }
    }

    // ---- commands ----

    /// The user approved: the call is `authorized` and [`HelperAction::Spawn`]
    /// is queued. An approval at or after the deadline finds the call denied
    /// ([`ApprovalError::Expired`], and the run finishes).
    pub(crate) fn approve(&mut self, at: Stamp) -> Result<(), ApprovalError> {
        self.settle_approval(at, true)
    }

    /// The user refused: the call is `denied` (reason `user`) and the run
    /// finishes without a spawn. A denial at or after the deadline is
    /// [`ApprovalError::Expired`] (the call is denied by the deadline).
    pub(crate) fn deny(&mut self, at: Stamp) -> Result<(), ApprovalError> {
        self.settle_approval(at, false)
    }

    /// Cancels the run. Before the spawn (awaiting approval, or `Spawn` not
    /// yet polled): `cancelled`, `Finished` without a spawn. While spawning:
    /// applied when the spawn is reported. After the spawn: the call is
    /// `cancelled_after_dispatch` at once, and the supervisor sends `SIGTERM`
    /// to the group at once, `SIGKILL` after the grace, and drains the
    /// readers to EOF within its deadline (G11). Idempotent; after `Finished`
    /// it does nothing.
    pub(crate) fn cancel(&mut self, at: Stamp) {
        match self.phase {
            Phase::AwaitingApproval | Phase::SpawnQueued => {
                // An expired approval wins: the call is then `denied`.
                let _ = self.lifecycle.cancel_because(at, CancelReason::Caller);
                self.finish(at, None);
            }
            Phase::Spawning => {
                if !self.cancel_requested {
                    self.cancel_requested = true;
                    self.lifecycle
                        .note(at.unix_ms, "cancel requested while spawning");
                }
            }
            Phase::Running => {
                if self.cancel_requested {
                    return;
                }
                self.cancel_requested = true;
                if self.lifecycle.state() == CallState::Dispatched {
                    self.lifecycle
                        .cancel_because(at, CancelReason::Caller)
                        .expect("a `dispatched` call can always be cancelled");
                } else {
                    // Already force-killed on overflow: the kill is under way.
                    self.lifecycle
                        .note(at.unix_ms, "cancel requested after the overflow kill");
                }
                self.supervisor.cancel(at.instant);
                self.pump(at);
            }
            Phase::Finished => {}
        }
    }

    /// After `Finished`: the (stdout, stderr) retention grants to release to
    /// the pool, each once; `(None, None)` before `Finished` or for captures
    /// made without a grant.
    pub fn take_grants(&mut self) -> (Option<Grant>, Option<Grant>) {
        (self.grants.0.take(), self.grants.1.take())
    }

    // ---- outputs ----

    /// The next thing the adapter must do.
    #[must_use]
    pub(crate) fn poll_action(&mut self) -> Option<HelperAction> {
        if self.actions.is_empty() {
            return None;
        }
        let action = self.actions.remove(0);
        match action {
            HelperAction::Spawn => self.phase = Phase::Spawning,
            HelperAction::Finished(_) => self.finished_polled = true,
            _ => {}
        }
        Some(action)
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next be called: the
    /// approval deadline while awaiting approval; while running, the earlier
    /// of the streams' maximum duration (until a cancel or an overflow kill
    /// is under way) and the supervisor's next deadline; `None` otherwise.
    #[must_use]
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        [
            self.lifecycle.poll_timeout(),
            self.supervisor.poll_timeout(),
            self.stream_deadline_running(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    // ---- internals ----

    fn ignore(&mut self, what: &'static str) {
        self.ignored_inputs = self.ignored_inputs.saturating_add(1);
        tracing::debug!(input = what, "helper run ignored an input");
    }

    /// The streams' maximum duration, while it can still fire.
    fn stream_deadline_running(&self) -> Option<Instant> {
        if self.phase != Phase::Running || self.cancel_requested || self.killed_on_overflow {
            return None;
        }
        self.stream_deadline
    }

    /// The streams ran past their maximum duration: cancel through the
    /// supervisor, as a caller's cancel would, and say why.
    fn max_duration_reached(&mut self, at: Stamp) {
        self.cancel_requested = true;
        self.lifecycle
            .cancel_because(at, CancelReason::MaxDuration)
            .expect("the deadline runs only while the call is `dispatched`");
        self.lifecycle.note(
            at.unix_ms,
            &format!(
                "streams reached their maximum duration of {} ms",
                self.options.max_duration.as_millis()
            ),
        );
        self.supervisor.cancel(at.instant);
    }

    fn queue_spawn(&mut self) {
        // Authorized: only now does the run draw on the pool (the spawn is next).
        if let Some(pool) = self.pool.take() {
            self.stdout.grant(pool.grant(self.options.stdout.wanted()));
            self.stderr.grant(pool.grant(self.options.stderr.wanted()));
        }
        self.phase = Phase::SpawnQueued;
        self.actions.push(HelperAction::Spawn);
    }

    fn settle_approval(&mut self, at: Stamp, approve: bool) -> Result<(), ApprovalError> {
        if self.phase != Phase::AwaitingApproval {
            return Err(ApprovalError::NotPending {
                state: self.lifecycle.state(),
            });
        }
        let result = if approve {
            self.lifecycle.approve(at)
        } else {
            self.lifecycle.deny(at)
        };
        // The request is settled either way: a card not yet shown never is.
        self.actions
            .retain(|a| !matches!(a, HelperAction::RequestApproval { .. }));
        match result {
            Ok(()) if approve => {
                self.queue_spawn();
                Ok(())
            }
            Ok(()) => {
                self.finish(at, None);
                Ok(())
            }
            Err(_) => {
                // The only way an answer fails while awaiting approval: the
                // deadline fired first and the call is `denied`.
                self.finish(at, None);
                Err(ApprovalError::Expired)
            }
        }
    }

    /// A capture had to drop bytes: kill once if configured.
    fn overflowed(&mut self, at: Stamp, stream: StreamName) {
        if !self.options.kill_on_overflow
            || self.killed_on_overflow
            || self.cancel_requested
            || self.lifecycle.state() != CallState::Dispatched
        {
            return;
        }
        self.killed_on_overflow = true;
        let budget = match stream {
            StreamName::Stdout => self.options.stdout.wanted(),
            StreamName::Stderr => self.options.stderr.wanted(),
        };
        self.lifecycle
            .force_kill(at)
            .expect("checked above: the call is `dispatched`");
        self.lifecycle.note(
            at.unix_ms,
            &format!(
                "killed on overflow: {} exceeded its {budget}-byte budget",
                stream.as_str()
            ),
        );
        self.supervisor.cancel(at.instant);
        self.pump(at);
    }

    /// Moves the supervisor's actions into the run's queue, noting signals in
    /// the record at the time they were decided.
    fn pump(&mut self, at: Stamp) {
        while let Some(action) = self.supervisor.poll_action() {
            match action {
                // Never emitted: the helper has no stdin pipe.
                ProcessAction::CloseStdin => {}
                ProcessAction::SignalGroup(signal) => {
                    let text = match signal {
                        Signal::Term => "sigterm sent to the group",
                        Signal::Kill => "sigkill sent to the group",
                        // Never asked for: the helper forwards no signal.
                        Signal::Interrupt => "sigint sent to the group",
                        Signal::Hangup => "sighup sent to the group",
                    };
                    self.lifecycle.note(at.unix_ms, text);
                    self.actions.push(HelperAction::SignalGroup(signal));
                }
                ProcessAction::AbandonReaders => {
                    self.lifecycle
                        .note(at.unix_ms, "readers abandoned after the drain deadline");
                    self.actions.push(HelperAction::AbandonReaders);
                }
                ProcessAction::Finished(outcome) => self.finish(at, Some(outcome)),
            }
        }
    }

    /// Builds the outcome and queues `Finished`, once.
    fn finish(&mut self, at: Stamp, process: Option<ProcessOutcome>) {
        if self.phase == Phase::Finished {
            return;
        }
        self.phase = Phase::Finished;
        // Nothing unpolled from before the spawn may follow the end.
        self.actions.retain(|a| {
            !matches!(
                a,
                HelperAction::RequestApproval { .. } | HelperAction::Spawn
            )
        });
        if let Some(process) = &process {
            if self.lifecycle.state() == CallState::Dispatched {
                // Nothing interfered: the helper ended by itself (or was lost).
                let result = match process.exit_status {
                    Some(ExitStatus::Code(0)) => {
                        self.lifecycle.complete(at, CallOutcome::Succeeded)
                    }
                    Some(_) => self.lifecycle.complete(at, CallOutcome::RemoteFailure),
                    None => self.lifecycle.mark_unknown(at),
                };
                result.expect("checked above: the call is `dispatched`");
            }
            if let Some(status) = process.exit_status {
                self.lifecycle.observe_exit(status);
            }
            for end in [process.stdout, process.stderr].into_iter().flatten() {
                self.lifecycle.observe_stream_end(end);
            }
        }
        let (stdout, stdout_grant) = self.stdout.finish(self.options.excerpt_bytes);
        let (stderr, stderr_grant) = self.stderr.finish(self.options.excerpt_bytes);
        self.lifecycle.observe_stderr_capture(&stderr.summary);
        self.grants = (stdout_grant, stderr_grant);
        let outcome = HelperOutcome {
            exit_status: process.as_ref().and_then(|p| p.exit_status),
            process,
            stdout,
            stderr,
            killed_on_overflow: self.killed_on_overflow,
            record: self.lifecycle.record().clone(),
        };
        self.actions.push(HelperAction::Finished(Box::new(outcome)));
    }
}

/// Which output stream of the helper; names the truncation marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamName {
    Stdout,
    Stderr,
}

impl StreamName {
    fn as_str(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
        }
    }
}

/// What a person (or a policy) is asked before a helper may run; every
/// adapter hands it to its `Approver`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ApprovalRequest {
    /// The call as recorded so far (operation, target, state `awaiting_approval`).
    pub record: CallRecord,
    /// When the request expires; after it the call is denied
    /// (`approval_timeout`), whatever the helper or anything else writes.
    pub deadline: Instant,
}

impl HelperRun {
    /// The request to show for [`HelperAction::RequestApproval`].
    pub fn approval_request(&self, deadline: Instant) -> ApprovalRequest {
        ApprovalRequest {
            record: self.record().clone(),
            deadline,
        }
    }
}

#[cfg(test)]
mod tests;
