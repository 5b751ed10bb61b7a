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
//! | the streams reached [`HelperConfig::max_duration`] (the same cancel path) | `cancelled_after_dispatch` (`cancel_reason: "max_duration"`) | — |
//! | killed because a capture overflowed ([`HelperConfig::kill_on_overflow`]), no cancel before | `force_killed` | — |
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
//! A run built from [`HelperConfig::discovery`] only finds out what the
//! operation will be. It has its own smaller budgets and maximum duration, no
//! approval step, and its records say `kind: "discovery"` with the
//! discovery's own `operation` name; the operation it resolves is a run of
//! its own, approved with the resolved target.
//!
//! # What the adapter does, in order
//!
//! 1. [`HelperRun::with_pool`] (or [`HelperOptions::start`]) with the
//!    process-wide [`SharedRetentionPool`]: the run takes its two grants from
//!    it when it is authorized, right before the spawn, so a call waiting for
//!    its approval holds none of the pool. ([`HelperRun::new`] takes grants
//!    already drawn.)
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
//! `excerpt_bytes` each. The record is bounded by [`CallConfig`] (≈ 39 KiB with
//! the defaults). The action queue holds at most [`ACTION_QUEUE_CAPACITY`]
//! entries.

use std::time::{Duration, Instant};

use serde::Serialize;
use smallvec::SmallVec;

use crate::call::{
    CallConfig, CallIdentity, CallKind, CallLifecycle, CallOutcome, CallRecord, CallState,
    CancelReason, Stamp,
};
use crate::capture::{
    CaptureConfig, CaptureSummary, DebugMark, Grant, OutputCapture, SharedRetentionPool,
    DEFAULT_EXCERPT,
};
use crate::driver::{exit_before_end, LookForExit};
use crate::io_result::{ChildStream, ReadResult};
use crate::process::{
    ChildPipes, ExitStatus, ProcessAction, ProcessOutcome, ProcessSupervisor, Signal,
    SupervisorConfig,
};

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
pub const ACTION_QUEUE_CAPACITY: usize = 6;

/// What a helper's child gets as pipes: stdout and stderr, never stdin (the
/// adapter gives it `/dev/null`). A helper that needs input takes it as
/// arguments or files; a stdin pipe would add a write path that can block.
const HELPER_PIPES: ChildPipes = ChildPipes::OUTPUTS;

/// Limits and policies of one [`HelperRun`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HelperConfig {
    supervisor: SupervisorConfig,
    stdout: CaptureConfig,
    stderr: CaptureConfig,
    excerpt_bytes: usize,
    kill_on_overflow: bool,
    approval: Option<Duration>,
    max_duration: Duration,
    kind: CallKind,
    call: CallConfig,
}

impl Default for HelperConfig {
    fn default() -> Self {
        let mut stdout = CaptureConfig::default();
        stdout.head(0).tail(DEFAULT_STDOUT_TAIL);
        Self {
            supervisor: SupervisorConfig::default(),
            stdout,
            stderr: CaptureConfig::default(),
            excerpt_bytes: DEFAULT_EXCERPT,
            kill_on_overflow: false,
            approval: None,
            max_duration: DEFAULT_MAX_DURATION,
            kind: CallKind::Operation,
            call: CallConfig::default(),
        }
    }
}

impl HelperConfig {
    /// The configuration of a discovery run: a helper run only to find out
    /// what the operation will be (resolve a configured name to an endpoint,
    /// list what exists), a flow of its own that is not the operation.
    ///
    /// - Its own, smaller output budget: stdout the newest
    ///   [`DISCOVERY_STDOUT_TAIL`] (16 KiB), stderr the newest
    ///   [`DISCOVERY_STDERR_TAIL`] (4 KiB), excerpts of [`DISCOVERY_EXCERPT`]
    ///   (1 KiB); 20 KiB retained at most. It is a separate configuration, so
    ///   it never draws from the operation's per-call budget; its grants come
    ///   from the process-wide pool like every capture's, because the pool
    ///   bounds the process's memory, which discovery output occupies too.
    /// - Its streams' maximum duration is [`DISCOVERY_MAX_DURATION`] (30 s).
    /// - No approval step: [`approval`](Self::approval) is ignored (and a
    ///   note in the record says so). The operation it resolves is approved
    ///   on its own, with the resolved target on the card.
    /// - Its records say `kind: "discovery"`. Give the run an `operation`
    ///   naming the discovery itself (e.g. `resolve-host`), never the
    ///   operation it helps to resolve.
    ///
    /// Every setter still applies, so each of these can be changed.
    pub fn discovery() -> Self {
        let mut stdout = CaptureConfig::default();
        stdout.head(0).tail(DISCOVERY_STDOUT_TAIL);
        let mut stderr = CaptureConfig::default();
        stderr.head(0).tail(DISCOVERY_STDERR_TAIL);
        Self {
            stdout,
            stderr,
            excerpt_bytes: DISCOVERY_EXCERPT,
            max_duration: DISCOVERY_MAX_DURATION,
            kind: CallKind::Discovery,
            ..Self::default()
        }
    }

    /// Edits the cancel graces in place (see [`SupervisorConfig`]; default
    /// 2 s `SIGTERM` grace, 1 s reader drain deadline). The stdin grace is
    /// unused: a helper has no stdin pipe, so a cancel sends `SIGTERM` at once.
    pub fn supervisor_mut(&mut self) -> &mut SupervisorConfig {
        &mut self.supervisor
    }

    /// Edits the per-call stdout budget in place (default: last
    /// [`DEFAULT_STDOUT_TAIL`] = 64 KiB, no head). Allocated in full at the
    /// spawn, or as much as the stdout grant allows: worst case `head + tail`
    /// bytes. Past it the stream is still drained and counted. Set a head
    /// for helpers whose first lines matter.
    pub fn stdout_mut(&mut self) -> &mut CaptureConfig {
        &mut self.stdout
    }

    /// Edits the per-call stderr budget in place (default: last
    /// [`DEFAULT_TAIL`](crate::capture::DEFAULT_TAIL) = 16 KiB, no head).
    /// Allocated in full at the spawn, or as much as the stderr grant allows:
    /// worst case `head + tail` bytes.
    pub fn stderr_mut(&mut self) -> &mut CaptureConfig {
        &mut self.stderr
    }

    /// Bytes of each stream's agent excerpt, marker included (default
    /// [`DEFAULT_EXCERPT`] = 4 KiB). Memory: one string of at most this size
    /// per stream, built at `Finished`.
    pub fn excerpt_bytes(&mut self, bytes: usize) -> &mut Self {
        self.excerpt_bytes = bytes;
        self
    }

    /// Whether the helper's group is killed on the first byte either capture
    /// has to drop (default `false`: keep draining and keep the real exit
    /// status, which is what diagnostics need). For tools whose output is
    /// itself hostile. The kill is the cancel path (`SIGTERM` at once,
    /// `SIGKILL` after the grace), taken once; the call ends `force_killed`
    /// (unless it was cancelled before) and the outcome says
    /// `killed_on_overflow: true`.
    pub fn kill_on_overflow(&mut self, kill: bool) -> &mut Self {
        self.kill_on_overflow = kill;
        self
    }

    /// An approval step before the spawn, with this deadline from the moment
    /// the run is built (default `None`: authorized by policy, spawned at
    /// once). A deadline too large to represent as an `Instant` ends the run
    /// `failed_before_dispatch`; `Duration::ZERO` denies at the first
    /// `handle_timeout` or answer. Ignored by a
    /// [`discovery`](Self::discovery) run, which has no approval step.
    pub fn approval(&mut self, deadline_in: Option<Duration>) -> &mut Self {
        self.approval = deadline_in;
        self
    }

    /// The maximum duration of the helper's output streams, counted from the
    /// spawn (default [`DEFAULT_MAX_DURATION`] = 10 minutes;
    /// [`DISCOVERY_MAX_DURATION`] = 30 s for a discovery run). When it is
    /// reached and the run is still going (the helper alive, or a descendant
    /// still holding a stream), the run is cancelled through the supervisor
    /// exactly like a caller's cancel — `SIGTERM` to the group, `SIGKILL`
    /// after the grace, the readers drained within their deadline — and the
    /// call ends `cancelled_after_dispatch` with `cancel_reason:
    /// "max_duration"`. A duration too large to add to the spawn instant
    /// never fires. Memory: none (one deadline).
    pub fn max_duration(&mut self, duration: Duration) -> &mut Self {
        self.max_duration = duration;
        self
    }

    /// Runs the helper in a debug window (default `None`): both capture
    /// budgets are multiplied by the mark's multiplier and every record of
    /// the call carries the mark (`debug`). Take the mark from
    /// [`DebugMode::active`](crate::capture::DebugMode::active) when the
    /// call starts. The same knob as [`CaptureConfig::debug`] of both
    /// [`stdout_mut`](Self::stdout_mut) and [`stderr_mut`](Self::stderr_mut).
    pub fn debug(&mut self, mark: Option<DebugMark>) -> &mut Self {
        self.stdout.debug(mark);
        self.stderr.debug(mark);
        self
    }

    /// Edits the call record's limits in place (see [`CallConfig`]: 64
    /// events of at most 512 bytes of text each).
    pub fn call_mut(&mut self) -> &mut CallConfig {
        &mut self.call
    }

    /// The cancel graces.
    pub fn get_supervisor(&self) -> &SupervisorConfig {
        &self.supervisor
    }

    /// The stdout budget.
    pub fn get_stdout(&self) -> &CaptureConfig {
        &self.stdout
    }

    /// The stderr budget.
    pub fn get_stderr(&self) -> &CaptureConfig {
        &self.stderr
    }

    /// The excerpt size.
    pub fn get_excerpt_bytes(&self) -> usize {
        self.excerpt_bytes
    }

    /// Whether an overflow kills the helper.
    pub fn get_kill_on_overflow(&self) -> bool {
        self.kill_on_overflow
    }

    /// The approval deadline, if an approval step is configured; always
    /// `None` for a discovery run (it has no approval step).
    pub fn get_approval(&self) -> Option<Duration> {
        match self.kind {
            CallKind::Discovery => None,
            _ => self.approval,
        }
    }

    /// The maximum duration of the output streams.
    pub fn get_max_duration(&self) -> Duration {
        self.max_duration
    }

    /// Operation or discovery (see [`discovery`](Self::discovery)).
    pub fn get_kind(&self) -> CallKind {
        self.kind
    }

    /// The call record's limits.
    pub fn get_call(&self) -> &CallConfig {
        &self.call
    }
}

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
    /// [`HelperConfig::excerpt_bytes`].
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
enum Phase {
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
enum Slot {
    /// Not spawned: the grant waits, nothing is allocated.
    Waiting(Option<Grant>),
    /// Spawned: capturing.
    Capturing(OutputCapture),
    /// Finished; the counts stay readable.
    Done(CaptureSummary),
}

#[derive(Debug)]
struct Stream {
    name: StreamName,
    slot: Slot,
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
/// - **Getters**: [`config`](Self::config), [`record`](Self::record) (a
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
    config: HelperConfig,
    lifecycle: CallLifecycle,
    supervisor: ProcessSupervisor,
    phase: Phase,
    stdout: Stream,
    stderr: Stream,
    /// A cancel arrived after the spawn (or while spawning), or the streams
    /// reached their maximum duration.
    cancel_requested: bool,
    /// When the streams reach their maximum duration; set at the spawn.
    stream_deadline: Option<Instant>,
    killed_on_overflow: bool,
    /// Bounded by [`ACTION_QUEUE_CAPACITY`]: each kind is queued at most once.
    actions: SmallVec<[HelperAction; ACTION_QUEUE_CAPACITY]>,
    finished_polled: bool,
    grants: (Option<Grant>, Option<Grant>),
    /// Where the streams' grants come from when the run is authorized
    /// ([`HelperRun::with_pool`]); `None` once taken, or without a pool.
    pool: Option<SharedRetentionPool>,
    ignored_inputs: u64,
    /// Waiting for the exit failed: no status will ever be observed.
    exit_wait_failed: bool,
}

impl HelperRun {
    /// A run of one helper, with its call `identity` and, if a process-wide
    /// retention pool is used, one grant per stream.
    ///
    /// Validates the call, then either requests the approval
    /// ([`HelperAction::RequestApproval`], with the deadline fixed now) or
    /// authorizes it by policy ([`HelperAction::Spawn`]). Never fails: an
    /// approval deadline that cannot be represented ends the run at once as
    /// `failed_before_dispatch`.
    pub fn new(
        config: HelperConfig,
        identity: CallIdentity<'_>,
        stdout_grant: Option<Grant>,
        stderr_grant: Option<Grant>,
        at: Stamp,
    ) -> Self {
        Self::build(config, identity, (stdout_grant, stderr_grant), None, at)
    }

    /// A run whose two grants are taken from `pool` when the run is
    /// authorized — by policy, or when the approval arrives — right before
    /// [`HelperAction::Spawn`]: a call waiting for approval, denied, expired
    /// or cancelled before its spawn holds none of the pool, so open approval
    /// cards never starve running helpers. Release them after `Finished`
    /// ([`take_grants`](Self::take_grants)).
    pub fn with_pool(
        config: HelperConfig,
        identity: CallIdentity<'_>,
        pool: Option<SharedRetentionPool>,
        at: Stamp,
    ) -> Self {
        Self::build(config, identity, (None, None), pool, at)
    }

    fn build(
        config: HelperConfig,
        identity: CallIdentity<'_>,
        (stdout_grant, stderr_grant): (Option<Grant>, Option<Grant>),
        pool: Option<SharedRetentionPool>,
        at: Stamp,
    ) -> Self {
        let mut lifecycle = CallLifecycle::new(&config.call, identity, at.unix_ms);
        if let Some(mark) = config.stderr.get_debug().or(config.stdout.get_debug()) {
            lifecycle.mark_debug(mark);
        }
        lifecycle.mark_kind(config.kind);
        lifecycle
            .validate(at)
            .expect("a new call is `received`, which always validates");
        let mut run = Self {
            supervisor: ProcessSupervisor::new(config.supervisor),
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
            config,
        };
        if run.config.kind == CallKind::Discovery && run.config.approval.is_some() {
            run.lifecycle
                .note(at.unix_ms, "approval ignored: a discovery run has none");
        }
        match run.config.get_approval() {
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

    /// The configuration.
    pub fn config(&self) -> &HelperConfig {
        &self.config
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
        self.stream_deadline = at.instant.checked_add(self.config.max_duration);
        self.stdout.start(&self.config.stdout);
        self.stderr.start(&self.config.stderr);
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
    /// [`HelperConfig::kill_on_overflow`] is set.
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
    /// (G12), unless [`HelperConfig::kill_on_overflow`] is set.
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
    /// [maximum duration](HelperConfig::max_duration) cancel the run
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
                self.config.max_duration.as_millis()
            ),
        );
        self.supervisor.cancel(at.instant);
    }

    fn queue_spawn(&mut self) {
        // Authorized: only now does the run draw on the pool (the spawn is next).
        if let Some(pool) = self.pool.take() {
            self.stdout.grant(pool.grant(self.config.stdout.wanted()));
            self.stderr.grant(pool.grant(self.config.stderr.wanted()));
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
        if !self.config.kill_on_overflow
            || self.killed_on_overflow
            || self.cancel_requested
            || self.lifecycle.state() != CallState::Dispatched
        {
            return;
        }
        self.killed_on_overflow = true;
        let budget = match stream {
            StreamName::Stdout => self.config.stdout.wanted(),
            StreamName::Stderr => self.config.stderr.wanted(),
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
        let (stdout, stdout_grant) = self.stdout.finish(self.config.excerpt_bytes);
        let (stderr, stderr_grant) = self.stderr.finish(self.config.excerpt_bytes);
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
enum StreamName {
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

/// Fuzz entry point: drives a helper run with an arbitrary sequence of
/// approvals, denials, cancels, spawn reports, output, EOFs, exits and clock
/// moves (actions polled or left queued), then drives it to its end. Panics
/// on a violated invariant: `Finished` more than once or not last, `Spawn`
/// more than once or after a denial, a cancel before the spawn or an approval
/// timeout, retained bytes above the budgets, an invented exit status, or a
/// run that never finishes.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub fn fuzz_helper_run(data: &[u8]) {
    fuzzing::run(data);
}

#[cfg(feature = "fuzzing")]
mod fuzzing {
    use super::*;
    use crate::capture::{PoolConfig, RetentionPool};
    use crate::process::EndedBy;
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
        let mut config = HelperConfig::default();
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
        // run at its authorization (`with_pool`).
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
        let identity = CallIdentity {
            call_id: "c_fuzz",
            session_id: "s_fuzz",
            operation: "helper",
            target: "fuzz",
        };
        let at = Stamp::new(base, T0_MS);
        let run = if pooling == 2 {
            HelperRun::with_pool(config, identity, Some(shared.clone()), at)
        } else {
            HelperRun::new(config, identity, g1, g2, at)
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
                        self.run.config.stdout.wanted()
                    } else {
                        self.run.config.stderr.wanted()
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
                assert!(self.run.config.kill_on_overflow);
                assert_eq!(o.record.state(), CallState::ForceKilled);
            }
            if o.record.state() == CallState::Unknown {
                let process = o.process.as_ref().expect("unknown only after a spawn");
                assert_eq!(process.ended_by, EndedBy::ExitNotObserved);
            }
            let limits = [
                self.run.config.stdout.wanted(),
                self.run.config.stderr.wanted(),
            ];
            for (i, stream) in [&o.stdout, &o.stderr].into_iter().enumerate() {
                assert_eq!(stream.summary.seen, self.fed[i], "seen counts every byte");
                assert!(stream.summary.retained <= limits[i] as u64);
                assert!(stream.excerpt.len() <= self.run.config.excerpt_bytes);
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

/// Where a helper run's records go as they are made: a callback the
/// application supplies (to an audit chain, a channel, a log).
///
/// It is called on the thread or task that owns the run, with the record of
/// each new state — `validated`, `awaiting_approval`, `authorized`,
/// `dispatched`, … — and finally with the final record, exactly once, even
/// when the tool's handler was dropped. Each record holds the whole history
/// of events so far, so a state passed between two calls (`received` before
/// `validated`) is still in it. Keep it quick: it runs inside the run's loop.
#[derive(Clone)]
pub struct RecordSink(std::sync::Arc<dyn Fn(&CallRecord) + Send + Sync>);

impl RecordSink {
    /// A sink calling `f` with each record.
    pub fn new(f: impl Fn(&CallRecord) + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(f))
    }

    /// Hands `record` to the sink.
    pub fn emit(&self, record: &CallRecord) {
        (self.0)(record);
    }

    /// A sink that appends every record to `chain` (G12: the audit chain of
    /// [`crate::audit`]) and hands each resulting line — the record with its
    /// sequence number and hash, plus `\n` — to `write_line`, which puts it
    /// on disk (the core does no I/O). An append that fails (the chain was
    /// refused a line before) is logged and the record dropped from the chain.
    pub fn to_audit(
        chain: std::sync::Arc<std::sync::Mutex<crate::audit::AuditChain>>,
        write_line: impl Fn(Vec<u8>) + Send + Sync + 'static,
    ) -> Self {
        Self::new(move |record| {
            let line = chain
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .append(record);
            match line {
                Ok(line) => write_line(line),
                Err(e) => {
                    tracing::warn!(error = %e, "helper record not appended to the audit chain")
                }
            }
        })
    }
}

impl std::fmt::Debug for RecordSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordSink(..)")
    }
}

/// Follows a run for its owner and hands the run's record to the
/// [`RecordSink`] each time the call's state changes, then the final record
/// once. The adapters call [`RecordTap::observe`] after every turn of their
/// loop and [`RecordTap::finish`] with the outcome, so the three emit the same
/// records at the same points.
#[derive(Debug, Default)]
pub struct RecordTap {
    last: Option<CallState>,
    finished: bool,
}

impl RecordTap {
    /// Emits the run's record if its state changed since the last call.
    pub fn observe(&mut self, run: &HelperRun, sink: Option<&RecordSink>) {
        let state = run.state();
        if self.finished || self.last == Some(state) {
            return;
        }
        self.last = Some(state);
        if let Some(sink) = sink {
            sink.emit(run.record());
        }
    }

    /// Emits the final record (once).
    pub fn finish(&mut self, record: &CallRecord, sink: Option<&RecordSink>) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        self.last = Some(record.state());
        if let Some(sink) = sink {
            sink.emit(record);
        }
    }
}

/// Everything an adapter's `run_helper` takes besides the command and the
/// cancel signal: limits, the shared retention pool and the call's identity.
///
/// ```
/// use std::time::Duration;
/// use mcp_stdio_core::helper::HelperOptions;
///
/// let mut options = HelperOptions::default();
/// options.call_id("c_1").operation("git.log").target("/srv/repo");
/// options.config_mut().max_duration(Duration::from_secs(30));
/// assert_eq!(options.get_operation(), "git.log");
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HelperOptions {
    config: HelperConfig,
    pool: Option<SharedRetentionPool>,
    call_id: String,
    session_id: String,
    operation: String,
    target: String,
    records: Option<RecordSink>,
}

impl Default for HelperOptions {
    fn default() -> Self {
        Self {
            config: HelperConfig::default(),
            pool: Some(SharedRetentionPool::process()),
            call_id: String::new(),
            session_id: String::new(),
            operation: String::new(),
            target: String::new(),
            records: None,
        }
    }
}

impl HelperOptions {
    /// Edits the budgets, graces, overflow policy and approval deadline in
    /// place (see [`HelperConfig`]: 64 KiB stdout and 16 KiB stderr kept,
    /// 10 minutes at most).
    pub fn config_mut(&mut self) -> &mut HelperConfig {
        &mut self.config
    }

    /// Sets the process-wide budget shared by every capture. Default:
    /// [`SharedRetentionPool::process`](crate::capture::SharedRetentionPool::process)
    /// (256 KiB for the whole process, `Client` stderr included); `None`:
    /// this run's captures are bounded by the config alone.
    pub fn pool(&mut self, pool: Option<SharedRetentionPool>) -> &mut Self {
        self.pool = pool;
        self
    }

    /// Sets the stable id of the call, for the record and the audit log
    /// (default empty; cut to the call record's text limit, 512 bytes).
    pub fn call_id(&mut self, id: &str) -> &mut Self {
        id.clone_into(&mut self.call_id);
        self
    }

    /// Sets the id of the session the call belongs to (default empty; cut
    /// like the call id).
    pub fn session_id(&mut self, id: &str) -> &mut Self {
        id.clone_into(&mut self.session_id);
        self
    }

    /// Sets the operation, e.g. the tool name (default empty; cut like the
    /// call id).
    pub fn operation(&mut self, operation: &str) -> &mut Self {
        operation.clone_into(&mut self.operation);
        self
    }

    /// Sets the target as shown to a person approving it: a path, a host, …
    /// (default empty; cut like the call id).
    pub fn target(&mut self, target: &str) -> &mut Self {
        target.clone_into(&mut self.target);
        self
    }

    /// Sets where the run's records go as they are made, the final one
    /// included (see [`RecordSink`]); default `None`: only the outcome
    /// carries the record.
    pub fn records(&mut self, sink: Option<RecordSink>) -> &mut Self {
        self.records = sink;
        self
    }

    /// The budgets, graces and policies.
    pub fn get_config(&self) -> &HelperConfig {
        &self.config
    }

    /// The retention pool, if any.
    pub fn get_pool(&self) -> Option<&SharedRetentionPool> {
        self.pool.as_ref()
    }

    /// The call id.
    pub fn get_call_id(&self) -> &str {
        &self.call_id
    }

    /// The session id.
    pub fn get_session_id(&self) -> &str {
        &self.session_id
    }

    /// The operation.
    pub fn get_operation(&self) -> &str {
        &self.operation
    }

    /// The target.
    pub fn get_target(&self) -> &str {
        &self.target
    }

    /// Where the records go, if anywhere.
    pub fn get_records(&self) -> Option<&RecordSink> {
        self.records.as_ref()
    }

    /// Starts the state machine and validates the call; poll its actions
    /// next. The grants come from the pool (if any) when the call is
    /// authorized, not before ([`HelperRun::with_pool`]).
    pub fn start(&self, at: Stamp) -> HelperRun {
        HelperRun::with_pool(
            self.config.clone(),
            CallIdentity {
                call_id: &self.call_id,
                session_id: &self.session_id,
                operation: &self.operation,
                target: &self.target,
            },
            self.pool.clone(),
            at,
        )
    }

    /// Gives a finished run's grants back to the pool.
    pub fn release(&self, run: &mut HelperRun) {
        let (a, b) = run.take_grants();
        if let Some(pool) = &self.pool {
            for g in [a, b].into_iter().flatten() {
                if let Err(e) = pool.release(g) {
                    tracing::warn!(error = %e, "helper grant not returned to its pool");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{CallEventKind, Decision, DecisionReason};
    use crate::capture::{PoolConfig, RetentionPool};
    use crate::process::{EndedBy, StreamEnd};
    use serde_json::json;

    const T0_MS: u64 = 1_700_000_000_000;
    const S: u64 = 1_000;

    /// A virtual clock: one base `Instant` plus offsets in milliseconds.
    struct Clock {
        base: Instant,
    }

    impl Clock {
        fn new() -> Self {
            Self {
                base: Instant::now(),
            }
        }
        fn at(&self, ms: u64) -> Stamp {
            Stamp::new(self.base + Duration::from_millis(ms), T0_MS + ms)
        }
    }

    fn identity() -> CallIdentity<'static> {
        CallIdentity {
            call_id: "c_7f2a",
            session_id: "s_1",
            operation: "ssh.exec",
            target: "deploy@example.org",
        }
    }

    fn new_run(config: HelperConfig, clock: &Clock) -> HelperRun {
        HelperRun::new(config, identity(), None, None, clock.at(0))
    }

    fn with_approval(secs: u64) -> HelperConfig {
        let mut config = HelperConfig::default();
        config.approval(Some(Duration::from_secs(secs)));
        config
    }

    fn drain(run: &mut HelperRun) -> Vec<HelperAction> {
        let mut actions = Vec::new();
        while let Some(action) = run.poll_action() {
            actions.push(action);
        }
        actions
    }

    fn finished(actions: Vec<HelperAction>) -> HelperOutcome {
        match actions.into_iter().last() {
            Some(HelperAction::Finished(outcome)) => *outcome,
            other => panic!("expected Finished last, got {other:?}"),
        }
    }

    /// G10: a call draws on the retention pool only once it is authorized —
    /// while its approval card is up, and when it is denied, it holds none
    /// of the pool; after the run its grants go back.
    #[test]
    fn g10_a_call_awaiting_approval_holds_no_pool_grant() {
        use crate::capture::PoolConfig;
        let clock = Clock::new();
        let pool = SharedRetentionPool::new(PoolConfig::default().limit(64 * 1024));
        let outstanding = || pool.stats().outstanding;

        // Denied: never granted.
        let mut run = HelperRun::with_pool(
            with_approval(30),
            identity(),
            Some(pool.clone()),
            clock.at(0),
        );
        let _ = drain(&mut run);
        assert_eq!(outstanding(), 0, "no grant while the card is up");
        run.deny(clock.at(5)).expect("in time");
        let _ = drain(&mut run);
        assert!(matches!(run.take_grants(), (None, None)));
        assert_eq!(
            pool.stats().grants,
            0,
            "a denied call never drew on the pool"
        );

        // Approved: granted at the authorization, released at the end.
        let mut run = HelperRun::with_pool(
            with_approval(30),
            identity(),
            Some(pool.clone()),
            clock.at(0),
        );
        let _ = drain(&mut run);
        assert_eq!(outstanding(), 0);
        run.approve(clock.at(5)).expect("in time");
        assert_eq!(
            outstanding(),
            2,
            "one grant per stream, taken at the authorization"
        );
        spawn(&mut run, &clock, 6);
        run.handle_stdout_eof(clock.at(7));
        run.handle_stderr_eof(clock.at(7));
        run.handle_exited(clock.at(8), ExitStatus::Code(0));
        let _ = finished(drain(&mut run));
        let (a, b) = run.take_grants();
        for grant in [a, b].into_iter().flatten() {
            pool.release(grant).expect("grant of this pool");
        }
        assert_eq!(outstanding(), 0);
        assert_eq!(pool.stats().in_use, 0);
    }

    /// Polls the `Spawn` action and reports the spawn at `ms`.
    fn spawn(run: &mut HelperRun, clock: &Clock, ms: u64) {
        let actions = drain(run);
        assert!(
            matches!(actions.as_slice(), [HelperAction::Spawn]),
            "{actions:?}"
        );
        run.handle_spawned(clock.at(ms));
    }

    fn transitions(record: &CallRecord) -> Vec<CallState> {
        record
            .events()
            .filter(|e| e.kind == CallEventKind::Transition)
            .map(|e| e.state)
            .collect()
    }

    #[test]
    fn g12_happy_path_spawns_captures_exactly_and_completes() {
        let clock = Clock::new();
        let mut run = new_run(HelperConfig::default(), &clock);
        assert_eq!(run.state(), CallState::Authorized);
        assert_eq!(run.poll_timeout(), None);
        spawn(&mut run, &clock, 1);
        assert_eq!(run.state(), CallState::Dispatched);
        run.handle_stdout(clock.at(2), b"{\"ok\":");
        run.handle_stderr(clock.at(2), b"connecting\n");
        run.handle_stdout(clock.at(3), b"true}\n");
        run.handle_stdout_eof(clock.at(4));
        run.handle_stderr_eof(clock.at(4));
        assert!(drain(&mut run).is_empty());
        run.handle_exited(clock.at(5), ExitStatus::Code(0));
        let o = finished(drain(&mut run));
        assert!(o.succeeded());
        assert_eq!(o.exit_status, Some(ExitStatus::Code(0)));
        assert_eq!(o.stdout.text, "{\"ok\":true}\n");
        assert_eq!(o.stdout.excerpt, "{\"ok\":true}\n");
        assert_eq!(o.stdout.summary.seen, 12);
        assert!(!o.stdout.summary.truncated);
        assert_eq!(o.stderr.text, "connecting\n");
        assert!(!o.killed_on_overflow);
        let p = o.process.as_ref().expect("spawned");
        assert_eq!(p.ended_by, EndedBy::ExitedByItself);
        assert_eq!(
            (p.stdout, p.stderr),
            (Some(StreamEnd::Eof), Some(StreamEnd::Eof))
        );
        let r = &o.record;
        assert_eq!(
            transitions(r),
            [
                CallState::Received,
                CallState::Validated,
                CallState::Authorized,
                CallState::Dispatched,
                CallState::Completed
            ]
        );
        assert_eq!(r.decision_reason(), Some(DecisionReason::Policy));
        assert_eq!(r.outcome(), Some(CallOutcome::Succeeded));
        assert_eq!(r.exit_status(), Some(ExitStatus::Code(0)));
        assert_eq!(r.stream_end(), Some(StreamEnd::Eof));
        assert_eq!((r.stderr_bytes_seen(), r.stderr_bytes_retained()), (11, 11));
        assert_eq!(r.events().last().map(|e| e.unix_ms), Some(T0_MS + 5));
        assert!(run.is_finished());
        assert_eq!(run.record(), r);
        assert_eq!(run.poll_timeout(), None);
    }

    #[test]
    fn g12_nonzero_exit_or_foreign_signal_completes_as_remote_failure() {
        for status in [ExitStatus::Code(3), ExitStatus::Signal(11)] {
            let clock = Clock::new();
            let mut run = new_run(HelperConfig::default(), &clock);
            spawn(&mut run, &clock, 1);
            run.handle_stdout_eof(clock.at(2));
            run.handle_stderr_eof(clock.at(2));
            run.handle_exited(clock.at(3), status);
            let o = finished(drain(&mut run));
            assert!(!o.succeeded());
            assert_eq!(o.record.state(), CallState::Completed);
            assert_eq!(o.record.outcome(), Some(CallOutcome::RemoteFailure));
            assert_eq!(o.exit_status, Some(status));
        }
    }

    #[test]
    fn g12_approval_requested_at_once_and_granted() {
        let clock = Clock::new();
        let mut run = new_run(with_approval(30), &clock);
        let deadline = clock.at(30 * S).instant;
        let actions = drain(&mut run);
        assert!(
            matches!(actions.as_slice(), [HelperAction::RequestApproval { deadline: d }] if *d == deadline),
            "{actions:?}"
        );
        assert_eq!(run.state(), CallState::AwaitingApproval);
        assert_eq!(run.poll_timeout(), Some(deadline));
        assert_eq!(
            run.record().approval_deadline_unix_ms(),
            Some(T0_MS + 30 * S)
        );
        run.handle_timeout(clock.at(29_999)); // spurious
        assert!(drain(&mut run).is_empty());
        run.approve(clock.at(10 * S)).expect("in time");
        assert_eq!(run.state(), CallState::Authorized);
        assert_eq!(run.poll_timeout(), None);
        assert_eq!(
            run.approve(clock.at(10 * S)),
            Err(ApprovalError::NotPending {
                state: CallState::Authorized
            })
        );
        spawn(&mut run, &clock, 10 * S + 1);
        run.handle_exited(clock.at(11 * S), ExitStatus::Code(0));
        run.handle_stdout_eof(clock.at(11 * S));
        run.handle_stderr_eof(clock.at(11 * S));
        let o = finished(drain(&mut run));
        assert!(o.succeeded());
        assert_eq!(o.record.decision_reason(), Some(DecisionReason::User));
        assert_eq!(
            transitions(&o.record)[..4],
            [
                CallState::Received,
                CallState::Validated,
                CallState::AwaitingApproval,
                CallState::Authorized
            ]
        );
    }

    #[test]
    fn g12_approval_denied_never_spawns() {
        let clock = Clock::new();
        let mut run = new_run(with_approval(30), &clock);
        let _ = drain(&mut run);
        run.deny(clock.at(5 * S)).expect("pending");
        let actions = drain(&mut run);
        assert_eq!(actions.len(), 1, "only Finished: {actions:?}");
        let o = finished(actions);
        assert_eq!(o.record.state(), CallState::Denied);
        assert_eq!(o.record.decision(), Decision::Denied);
        assert_eq!(o.record.decision_reason(), Some(DecisionReason::User));
        assert!(o.process.is_none() && o.exit_status.is_none());
        assert!(!run.is_spawned());
        run.cancel(clock.at(6 * S));
        run.handle_timeout(clock.at(60 * S));
        assert!(drain(&mut run).is_empty(), "nothing after Finished");
    }

    #[test]
    fn g12_approval_timeout_denies_and_never_spawns() {
        let clock = Clock::new();
        let mut run = new_run(with_approval(30), &clock);
        let _ = drain(&mut run);
        run.handle_timeout(clock.at(30 * S - 1));
        assert!(drain(&mut run).is_empty(), "one millisecond early");
        run.handle_timeout(clock.at(30 * S));
        let o = finished(drain(&mut run));
        assert_eq!(o.record.state(), CallState::Denied);
        assert_eq!(
            o.record.decision_reason(),
            Some(DecisionReason::ApprovalTimeout)
        );
        assert_eq!(
            o.record.events().last().map(|e| e.unix_ms),
            Some(T0_MS + 30 * S)
        );
        assert_eq!(
            run.approve(clock.at(31 * S)),
            Err(ApprovalError::NotPending {
                state: CallState::Denied
            })
        );
        assert!(drain(&mut run).is_empty(), "no Spawn, ever");

        // An approval that arrives at the deadline, before any handle_timeout,
        // finds the call denied.
        let mut run = new_run(with_approval(30), &clock);
        let _ = drain(&mut run);
        assert_eq!(run.approve(clock.at(30 * S)), Err(ApprovalError::Expired));
        let actions = drain(&mut run);
        assert_eq!(actions.len(), 1, "Finished only, no Spawn: {actions:?}");
        assert_eq!(
            finished(actions).record.decision_reason(),
            Some(DecisionReason::ApprovalTimeout)
        );
    }

    #[test]
    fn g12_approval_deadline_not_moved_by_stderr_before_or_after_approval() {
        let clock = Clock::new();
        let mut run = new_run(with_approval(30), &clock);
        let deadline = run.poll_timeout().expect("approval running");
        assert!(matches!(
            drain(&mut run).as_slice(),
            [HelperAction::RequestApproval { .. }]
        ));
        // No helper exists during the approval: stderr from anywhere else is
        // ignored, counted as bad input, and never attached to this call.
        for i in 0..10_000u64 {
            run.handle_stderr(clock.at(1 + i), b"helper-diagnostic retry\n");
            if i % 1_000 == 0 {
                run.handle_timeout(clock.at(1 + i)); // spurious
            }
        }
        assert_eq!(run.poll_timeout(), Some(deadline));
        assert_eq!(run.approval_deadline(), Some(deadline));
        assert_eq!(run.state(), CallState::AwaitingApproval);
        assert_eq!(run.ignored_inputs(), 10_000);
        assert_eq!(run.record().stderr_bytes_seen(), 0);
        assert_eq!(
            run.record().approval_deadline_unix_ms(),
            Some(T0_MS + 30 * S)
        );
        assert!(drain(&mut run).is_empty());

        run.approve(clock.at(20 * S)).expect("in time");
        spawn(&mut run, &clock, 20 * S);
        for i in 0..10_000u64 {
            run.handle_stderr(clock.at(20 * S + i), b"helper-diagnostic retry\n");
        }
        assert_eq!(
            run.approval_deadline(),
            Some(deadline),
            "fixed for the record"
        );
        assert_eq!(
            run.record().approval_deadline_unix_ms(),
            Some(T0_MS + 30 * S)
        );
        assert_eq!(run.record().stderr_bytes_seen(), 240_000);
        assert_eq!(
            run.poll_timeout(),
            Some(clock.at(20 * S).instant + DEFAULT_MAX_DURATION),
            "no deadline but the streams' maximum duration while the helper runs"
        );
        assert_eq!(run.state(), CallState::Dispatched);
    }

    #[test]
    fn g12_stderr_during_approval_then_exit_right_after_approval() {
        let clock = Clock::new();
        let mut run = new_run(with_approval(30), &clock);
        let _ = drain(&mut run);
        run.handle_stderr(clock.at(1), b"not from this helper\n");
        run.handle_stdout_eof(clock.at(1));
        run.handle_exited(clock.at(1), ExitStatus::Code(0));
        assert_eq!(run.ignored_inputs(), 3);
        run.approve(clock.at(2 * S)).expect("in time");
        spawn(&mut run, &clock, 2 * S);
        run.handle_stderr(clock.at(2 * S + 1), b"warning: retrying\n");
        run.handle_exited(clock.at(2 * S + 2), ExitStatus::Code(0));
        run.handle_stdout_eof(clock.at(2 * S + 2));
        run.handle_stderr_eof(clock.at(2 * S + 3));
        let o = finished(drain(&mut run));
        assert!(o.succeeded());
        assert_eq!(o.stderr.text, "warning: retrying\n");
        assert_eq!(o.record.stderr_bytes_seen(), 18);
        assert_eq!(o.record.decision_reason(), Some(DecisionReason::User));
    }

    #[test]
    fn g12_stderr_flood_after_success_then_cancel_is_cancelled_after_dispatch() {
        let clock = Clock::new();
        let mut run = new_run(HelperConfig::default(), &clock);
        spawn(&mut run, &clock, 0);
        run.handle_stdout(clock.at(10), b"{\"changed\":[\"a.txt\"]}\n");
        run.handle_stdout_eof(clock.at(11));
        for i in 0..100u64 {
            run.handle_stderr(clock.at(20 + i), &[b'x'; 4096]);
        }
        run.cancel(clock.at(200));
        assert!(matches!(
            drain(&mut run).as_slice(),
            [HelperAction::SignalGroup(Signal::Term)]
        ));
        assert_eq!(run.state(), CallState::CancelledAfterDispatch, "at once");
        run.handle_stderr(clock.at(210), b"cleanup\n");
        run.handle_exited(clock.at(300), ExitStatus::Signal(15));
        run.handle_stderr_eof(clock.at(300));
        let o = finished(drain(&mut run));
        assert!(!o.succeeded());
        assert_eq!(o.exit_status, Some(ExitStatus::Signal(15)));
        assert_eq!(
            o.stdout.text, "{\"changed\":[\"a.txt\"]}\n",
            "the result is kept"
        );
        let r = &o.record;
        assert_eq!(r.state(), CallState::CancelledAfterDispatch);
        assert_eq!(r.outcome(), None);
        assert_eq!(r.stderr_bytes_seen(), 409_608);
        assert_eq!(r.stderr_bytes_retained(), 16_384);
        assert!(r.stderr_truncated());
        assert_eq!(r.stream_end(), Some(StreamEnd::EofAfterCancel));
        assert_eq!(
            o.process.as_ref().map(|p| p.ended_by),
            Some(EndedBy::ExitedAfterTerm)
        );
        assert!(r
            .events()
            .any(|e| e.detail.as_deref() == Some("sigterm sent to the group")));
    }

    #[test]
    fn g11_cancel_before_spawn_never_spawns() {
        let clock = Clock::new();
        // Authorized by policy, Spawn queued but not polled: withdrawn.
        let mut run = new_run(HelperConfig::default(), &clock);
        run.cancel(clock.at(1));
        let actions = drain(&mut run);
        assert_eq!(actions.len(), 1, "only Finished: {actions:?}");
        let o = finished(actions);
        assert_eq!(o.record.state(), CallState::Cancelled);
        assert!(o.process.is_none());
        run.handle_spawned(clock.at(2));
        assert!(!run.is_spawned(), "a late spawn report is ignored");

        // Awaiting approval, request not even polled yet: withdrawn too.
        let mut run = new_run(with_approval(30), &clock);
        run.cancel(clock.at(1));
        let actions = drain(&mut run);
        assert_eq!(actions.len(), 1, "only Finished: {actions:?}");
        assert_eq!(finished(actions).record.state(), CallState::Cancelled);

        // Approved but Spawn not polled: withdrawn.
        let mut run = new_run(with_approval(30), &clock);
        let _ = drain(&mut run);
        run.approve(clock.at(1)).expect("in time");
        run.cancel(clock.at(2));
        let actions = drain(&mut run);
        assert_eq!(actions.len(), 1, "only Finished: {actions:?}");
        assert_eq!(finished(actions).record.state(), CallState::Cancelled);
    }

    #[test]
    fn g11_cancel_while_spawning_is_applied_at_the_spawn_report() {
        let clock = Clock::new();
        let mut run = new_run(HelperConfig::default(), &clock);
        assert!(matches!(drain(&mut run).as_slice(), [HelperAction::Spawn]));
        run.cancel(clock.at(1));
        assert!(drain(&mut run).is_empty(), "nothing to signal yet");
        assert_eq!(run.state(), CallState::Authorized);
        run.handle_spawned(clock.at(2));
        assert!(matches!(
            drain(&mut run).as_slice(),
            [HelperAction::SignalGroup(Signal::Term)]
        ));
        assert_eq!(run.state(), CallState::CancelledAfterDispatch);

        // The same race, but the spawn fails: nothing ran.
        let mut run = new_run(HelperConfig::default(), &clock);
        let _ = drain(&mut run);
        run.cancel(clock.at(1));
        run.handle_spawn_failed(clock.at(2), "ENOENT");
        let o = finished(drain(&mut run));
        assert_eq!(o.record.state(), CallState::Cancelled);
        assert!(o
            .record
            .events()
            .any(|e| e.detail.as_deref() == Some("spawn failed: ENOENT")));
    }

    #[test]
    fn g11_cancel_while_running_helper_ignores_term_is_killed() {
        let clock = Clock::new();
        let mut run = new_run(HelperConfig::default(), &clock);
        spawn(&mut run, &clock, 0);
        run.cancel(clock.at(S));
        assert!(matches!(
            drain(&mut run).as_slice(),
            [HelperAction::SignalGroup(Signal::Term)]
        ));
        run.cancel(clock.at(S + 10));
        assert!(drain(&mut run).is_empty(), "idempotent");
        assert_eq!(run.poll_timeout(), Some(clock.at(3 * S).instant));
        run.handle_timeout(clock.at(3 * S - 1));
        assert!(drain(&mut run).is_empty(), "spurious");
        run.handle_timeout(clock.at(3 * S));
        assert!(matches!(
            drain(&mut run).as_slice(),
            [HelperAction::SignalGroup(Signal::Kill)]
        ));
        run.handle_exited(clock.at(3 * S + 1), ExitStatus::Signal(9));
        run.handle_stdout_eof(clock.at(3 * S + 1));
        run.handle_stderr_eof(clock.at(3 * S + 2));
        let o = finished(drain(&mut run));
        assert_eq!(o.record.state(), CallState::CancelledAfterDispatch);
        assert_eq!(o.exit_status, Some(ExitStatus::Signal(9)));
        assert_eq!(o.record.exit_status(), Some(ExitStatus::Signal(9)));
        let p = o.process.as_ref().expect("spawned");
        assert_eq!(p.ended_by, EndedBy::ExitedAfterKill);
        assert_eq!(p.cancel_to_exit, Some(Duration::from_millis(2 * S + 1)));
        let notes: Vec<_> = o.record.events().filter_map(|e| e.detail.clone()).collect();
        assert_eq!(
            notes,
            ["sigterm sent to the group", "sigkill sent to the group"]
        );
    }

    #[test]
    fn g10_flood_10_mib_stderr_keeps_the_16_kib_tail() {
        const TOTAL: u64 = 10 * 1024 * 1024;
        let clock = Clock::new();
        let mut run = new_run(HelperConfig::default(), &clock);
        spawn(&mut run, &clock, 0);
        let chunk_of = |i: u64| [b'a' + (i % 26) as u8; 4096];
        let chunks = TOTAL / 4096;
        for i in 0..chunks {
            run.handle_stderr(clock.at(1), &chunk_of(i));
            run.handle_stdout(clock.at(1), &chunk_of(i));
        }
        assert!(drain(&mut run).is_empty(), "no kill by default");
        assert_eq!(run.stderr_seen(), TOTAL);
        run.handle_stdout_eof(clock.at(2));
        run.handle_stderr_eof(clock.at(2));
        run.handle_exited(clock.at(3), ExitStatus::Code(1));
        let o = finished(drain(&mut run));
        let s = &o.stderr.summary;
        assert_eq!((s.seen, s.retained, s.truncated), (TOTAL, 16_384, true));
        let marker = "[stderr truncated: kept last 16384 of 10485760 bytes]\n";
        let mut want = marker.to_owned();
        for i in chunks - 4..chunks {
            want.push_str(std::str::from_utf8(&chunk_of(i)).expect("ascii"));
        }
        assert_eq!(o.stderr.text, want);
        assert!(o.stderr.excerpt.len() <= DEFAULT_EXCERPT);
        assert!(o
            .stderr
            .excerpt
            .starts_with("[stderr truncated: kept last "));
        let stdout_marker = "[stdout truncated: kept last 65536 of 10485760 bytes]\n";
        assert!(o.stdout.text.starts_with(stdout_marker));
        assert_eq!(o.stdout.text.len(), stdout_marker.len() + 65_536);
        let r = &o.record;
        assert_eq!(
            (
                r.stderr_bytes_seen(),
                r.stderr_bytes_retained(),
                r.stderr_truncated()
            ),
            (TOTAL, 16_384, true)
        );
        assert_eq!(r.state(), CallState::Completed);
        assert_eq!(r.outcome(), Some(CallOutcome::RemoteFailure));
        assert!(!o.killed_on_overflow);
    }

    #[test]
    fn g10_kill_on_overflow_signals_the_group_once() {
        let clock = Clock::new();
        let mut config = HelperConfig::default();
        config.stderr_mut().tail(64);
        config.kill_on_overflow(true);
        let mut run = new_run(config, &clock);
        spawn(&mut run, &clock, 0);
        run.handle_stderr(clock.at(1), &[b'e'; 64]);
        assert!(drain(&mut run).is_empty(), "the budget itself is fine");
        run.handle_stderr(clock.at(2), b"!");
        assert!(matches!(
            drain(&mut run).as_slice(),
            [HelperAction::SignalGroup(Signal::Term)]
        ));
        assert!(run.killed_on_overflow());
        assert_eq!(run.state(), CallState::ForceKilled, "at once");
        for i in 0..1_000 {
            run.handle_stderr(clock.at(3 + i), &[b'e'; 512]);
        }
        run.cancel(clock.at(1_500));
        assert!(
            drain(&mut run).is_empty(),
            "one kill sequence, not one per chunk"
        );
        run.handle_exited(clock.at(1_600), ExitStatus::Signal(15));
        run.handle_stdout_eof(clock.at(1_600));
        run.handle_stderr_eof(clock.at(1_600));
        let o = finished(drain(&mut run));
        assert!(o.killed_on_overflow);
        assert_eq!(o.record.state(), CallState::ForceKilled);
        assert_eq!(o.exit_status, Some(ExitStatus::Signal(15)));
        assert_eq!(o.stderr.summary.seen, 64 + 1 + 512_000);
        assert_eq!(o.stderr.summary.retained, 64);
        assert!(o.record.events().any(|e| e.detail.as_deref()
            == Some("killed on overflow: stderr exceeded its 64-byte budget")));
        let json = serde_json::to_value(&o).expect("serializes");
        assert_eq!(json["killed_on_overflow"], true);
        assert_eq!(json["record"]["state"], "force_killed");
    }

    #[test]
    fn g10_overflow_after_a_cancel_does_not_count_as_an_overflow_kill() {
        let clock = Clock::new();
        let mut config = HelperConfig::default();
        config.stdout_mut().tail(8);
        config.kill_on_overflow(true);
        let mut run = new_run(config, &clock);
        spawn(&mut run, &clock, 0);
        run.cancel(clock.at(1));
        let _ = drain(&mut run);
        run.handle_stdout(clock.at(2), b"0123456789");
        assert!(drain(&mut run).is_empty());
        assert!(!run.killed_on_overflow());
        assert_eq!(run.state(), CallState::CancelledAfterDispatch);
    }

    #[test]
    fn g12_spawn_failure_fails_before_dispatch_with_null_exit_status() {
        let clock = Clock::new();
        let mut run = new_run(HelperConfig::default(), &clock);
        let before = run.record().clone();
        assert_eq!(
            before.state(),
            CallState::Authorized,
            "the pre-spawn audit line"
        );
        assert!(matches!(drain(&mut run).as_slice(), [HelperAction::Spawn]));
        run.handle_spawn_failed(clock.at(1), "No such file or directory (os error 2)");
        let o = finished(drain(&mut run));
        assert_eq!(o.record.state(), CallState::FailedBeforeDispatch);
        assert_eq!(
            o.record
                .events()
                .last()
                .and_then(|e| e.detail.clone())
                .as_deref(),
            Some("No such file or directory (os error 2)")
        );
        let json = serde_json::to_value(&o).expect("serializes");
        assert_eq!(json["exit_status"], serde_json::Value::Null);
        assert_eq!(json["process"], serde_json::Value::Null);
        assert_eq!(json["record"]["exit_status"], serde_json::Value::Null);
        assert_eq!(json["record"]["state"], "failed_before_dispatch");
        // Output after a failed spawn cannot be the helper's.
        run.handle_stderr(clock.at(2), b"x");
        run.handle_spawned(clock.at(2));
        assert_eq!(run.ignored_inputs(), 2);
    }

    #[test]
    fn g11_grandchild_holding_stderr_is_abandoned_after_the_deadline() {
        let clock = Clock::new();
        let mut run = new_run(HelperConfig::default(), &clock);
        spawn(&mut run, &clock, 0);
        run.handle_stdout(clock.at(10), b"done\n");
        run.handle_stdout_eof(clock.at(20));
        run.handle_exited(clock.at(20), ExitStatus::Code(0));
        assert!(drain(&mut run).is_empty(), "no signal for a plain exit");
        assert_eq!(run.poll_timeout(), Some(clock.at(S + 20).instant));
        run.handle_stderr(clock.at(500), b"grandchild still talking\n");
        run.handle_timeout(clock.at(S + 20));
        assert!(matches!(
            drain(&mut run).as_slice(),
            [HelperAction::SignalGroup(Signal::Kill)]
        ));
        run.handle_timeout(clock.at(2 * S + 20));
        let actions = drain(&mut run);
        assert!(
            matches!(actions[0], HelperAction::AbandonReaders),
            "{actions:?}"
        );
        let o = finished(actions);
        let r = &o.record;
        assert_eq!(r.stream_end(), Some(StreamEnd::AbandonedAfterDeadline));
        assert_eq!(
            r.state(),
            CallState::Completed,
            "the helper itself exited 0"
        );
        assert_eq!(r.exit_status(), Some(ExitStatus::Code(0)));
        assert_eq!(o.stderr.text, "grandchild still talking\n");
        assert!(o
            .process
            .as_ref()
            .expect("spawned")
            .group_killed_after_exit());
        assert!(r
            .events()
            .any(|e| e.detail.as_deref() == Some("readers abandoned after the drain deadline")));
    }

    #[test]
    fn g12_outcome_json_shape() {
        let clock = Clock::new();
        let mut run = new_run(with_approval(30), &clock);
        run.deny(clock.at(7)).expect("pending");
        let o = finished(drain(&mut run));
        let json = serde_json::to_value(&o).expect("serializes");
        let empty = json!({
            "summary": {
                "seen": 0, "retained": 0, "truncated": false, "retained_part": "all",
                "head_bytes": 0, "tail_bytes": 0, "pool_limited": false,
                "redaction": false, "redactions": 0, "debug": null
            },
            "text": "",
            "excerpt": "",
        });
        assert_eq!(json["process"], serde_json::Value::Null);
        assert_eq!(json["exit_status"], serde_json::Value::Null);
        assert_eq!(json["stdout"], empty);
        assert_eq!(json["stderr"], empty);
        assert_eq!(json["killed_on_overflow"], false);
        assert_eq!(json["record"]["state"], "denied");
        assert_eq!(json["record"]["decision_reason"], "user");
        assert_eq!(json["record"]["exit_status"], serde_json::Value::Null);
        let keys: Vec<&str> = json
            .as_object()
            .expect("an object")
            .keys()
            .map(String::as_str)
            .collect();
        let mut want = [
            "process",
            "exit_status",
            "stdout",
            "stderr",
            "killed_on_overflow",
            "record",
        ];
        want.sort_unstable();
        let mut keys = keys;
        keys.sort_unstable();
        assert_eq!(keys, want);

        // Spawned and exited: the observed status, with serde's stable names.
        let mut run = new_run(HelperConfig::default(), &clock);
        spawn(&mut run, &clock, 0);
        run.handle_stdout(clock.at(1), b"ok\n");
        run.handle_exited(clock.at(2), ExitStatus::Code(0));
        run.handle_stdout_eof(clock.at(2));
        run.handle_stderr_eof(clock.at(2));
        let json = serde_json::to_value(finished(drain(&mut run))).expect("serializes");
        assert_eq!(json["exit_status"], json!({"code": 0}));
        assert_eq!(json["process"]["ended_by"], "exited_by_itself");
        assert_eq!(json["stdout"]["text"], "ok\n");
        assert_eq!(json["stdout"]["summary"]["seen"], 3);
        assert_eq!(json["record"]["state"], "completed");
        assert_eq!(json["record"]["outcome"], "succeeded");
        assert_eq!(json["record"]["stream_end"], "eof");
    }

    #[test]
    fn g10_grants_come_back_after_finished() {
        let clock = Clock::new();
        let mut pool = RetentionPool::new(PoolConfig::default().limit(40_000).reserve(0));
        let config = HelperConfig::default();
        // The pool has less than stdout's 64 KiB: the capture keeps what it got.
        let g1 = pool.grant(config.get_stdout().wanted());
        let g2 = pool.grant(config.get_stderr().wanted());
        assert_eq!(pool.free(), 0);
        let mut run = HelperRun::new(config, identity(), Some(g1), Some(g2), clock.at(0));
        spawn(&mut run, &clock, 0);
        assert!(
            matches!(run.take_grants(), (None, None)),
            "in use until Finished"
        );
        run.handle_stdout(clock.at(1), &vec![b'o'; 50_000]);
        run.handle_stdout_eof(clock.at(2));
        run.handle_stderr_eof(clock.at(2));
        run.handle_exited(clock.at(2), ExitStatus::Code(0));
        let o = finished(drain(&mut run));
        assert_eq!(o.stdout.summary.retained, 40_000);
        assert!(o.stdout.summary.pool_limited);
        assert!(o.stderr.summary.pool_limited, "nothing was left for stderr");
        let (g1, g2) = run.take_grants();
        for grant in [g1, g2].into_iter().flatten() {
            pool.release(grant).expect("from this pool");
        }
        assert_eq!(pool.in_use(), 0);
        assert!(
            matches!(run.take_grants(), (None, None)),
            "handed back once"
        );

        // A run that never spawned gives its untouched grants back too.
        let g = pool.grant(1_000);
        let mut run = HelperRun::new(with_approval(30), identity(), Some(g), None, clock.at(0));
        run.deny(clock.at(1)).expect("pending");
        let _ = drain(&mut run);
        let (g1, g2) = run.take_grants();
        assert!(g2.is_none());
        pool.release(g1.expect("the stdout grant"))
            .expect("from this pool");
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn g12_record_snapshots_before_and_after_the_spawn() {
        let clock = Clock::new();
        let mut run = new_run(HelperConfig::default(), &clock);
        let actions = drain(&mut run);
        assert!(matches!(actions.as_slice(), [HelperAction::Spawn]));
        let before = serde_json::to_value(run.record()).expect("serializes");
        run.handle_spawned(clock.at(1));
        let dispatched = serde_json::to_value(run.record()).expect("serializes");
        run.handle_exited(clock.at(2), ExitStatus::Code(4));
        run.handle_stdout_eof(clock.at(2));
        run.handle_stderr_eof(clock.at(2));
        let o = finished(drain(&mut run));
        assert_eq!(before["state"], "authorized");
        assert_eq!(dispatched["state"], "dispatched");
        assert_eq!(dispatched["exit_status"], serde_json::Value::Null);
        assert_eq!(o.record.state(), CallState::Completed);
        assert_eq!(o.record.outcome(), Some(CallOutcome::RemoteFailure));
    }

    #[test]
    fn g12_unrepresentable_approval_deadline_fails_before_dispatch() {
        let clock = Clock::new();
        let mut config = HelperConfig::default();
        config.approval(Some(Duration::MAX));
        let mut run = new_run(config, &clock);
        let actions = drain(&mut run);
        assert_eq!(actions.len(), 1, "only Finished: {actions:?}");
        let o = finished(actions);
        assert_eq!(o.record.state(), CallState::FailedBeforeDispatch);
        assert_eq!(run.poll_timeout(), None);
    }

    #[test]
    fn g12_answer_before_the_request_is_polled_withdraws_the_request() {
        let clock = Clock::new();
        let mut run = new_run(with_approval(30), &clock);
        run.approve(clock.at(1)).expect("in time");
        let actions = drain(&mut run);
        assert!(
            matches!(actions.as_slice(), [HelperAction::Spawn]),
            "{actions:?}"
        );
    }

    #[test]
    fn g11_inputs_outside_the_helpers_life_are_ignored_and_counted() {
        let clock = Clock::new();
        let mut run = new_run(HelperConfig::default(), &clock);
        // Spawn queued but not polled: the adapter cannot have spawned.
        run.handle_spawned(clock.at(1));
        run.handle_spawn_failed(clock.at(1), "x");
        run.handle_stdout(clock.at(1), b"x");
        run.handle_stdout_eof(clock.at(1));
        run.handle_stderr_eof(clock.at(1));
        run.handle_exited(clock.at(1), ExitStatus::Code(0));
        run.handle_timeout(clock.at(99 * S));
        assert_eq!(run.ignored_inputs(), 6);
        assert_eq!(run.state(), CallState::Authorized);
        spawn(&mut run, &clock, 2);
        run.handle_spawned(clock.at(3));
        assert_eq!(run.ignored_inputs(), 7, "spawned twice");
        run.handle_timeout(clock.at(99 * S));
        assert!(drain(&mut run).is_empty(), "no deadline while running");
        assert_eq!(run.state(), CallState::Dispatched);
    }

    #[cfg(feature = "fuzzing")]
    #[test]
    fn g10_g11_g12_fuzz_helper_run_random_inputs() {
        let mut state: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = move || {
            // xorshift64
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        fuzz_helper_run(&[]);
        for _ in 0..500 {
            let len = (next() % 512) as usize;
            let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            fuzz_helper_run(&data);
        }
    }

    #[test]
    fn max_duration_cancels_through_the_supervisor_and_says_why() {
        let clock = Clock::new();
        let mut config = HelperConfig::default();
        config.max_duration(Duration::from_secs(5));
        assert_eq!(
            HelperConfig::default().get_max_duration(),
            DEFAULT_MAX_DURATION
        );
        let mut run = new_run(config, &clock);
        spawn(&mut run, &clock, S);
        assert_eq!(run.poll_timeout(), Some(clock.at(6 * S).instant));
        // Output, however much, never moves the deadline.
        for i in 0..1_000 {
            run.handle_stderr(clock.at(S + i), b"retrying\n");
        }
        assert_eq!(run.poll_timeout(), Some(clock.at(6 * S).instant));
        run.handle_timeout(clock.at(6 * S - 1));
        assert!(drain(&mut run).is_empty(), "spurious");
        assert_eq!(run.state(), CallState::Dispatched);

        run.handle_timeout(clock.at(6 * S));
        assert!(matches!(
            drain(&mut run).as_slice(),
            [HelperAction::SignalGroup(Signal::Term)]
        ));
        assert_eq!(run.state(), CallState::CancelledAfterDispatch);
        assert_eq!(
            run.record().cancel_reason(),
            Some(CancelReason::MaxDuration)
        );
        // Now only the supervisor's grace is pending; a caller's cancel adds nothing.
        assert_eq!(run.poll_timeout(), Some(clock.at(8 * S).instant));
        run.cancel(clock.at(6 * S + 1));
        assert!(drain(&mut run).is_empty());
        run.handle_timeout(clock.at(8 * S));
        assert!(matches!(
            drain(&mut run).as_slice(),
            [HelperAction::SignalGroup(Signal::Kill)]
        ));
        run.handle_exited(clock.at(8 * S + 1), ExitStatus::Signal(9));
        run.handle_stdout_eof(clock.at(8 * S + 1));
        run.handle_stderr_eof(clock.at(8 * S + 1));
        let o = finished(drain(&mut run));
        assert_eq!(o.record.state(), CallState::CancelledAfterDispatch);
        assert_eq!(o.record.cancel_reason(), Some(CancelReason::MaxDuration));
        assert_eq!(o.exit_status, Some(ExitStatus::Signal(9)));
        let p = o.process.as_ref().expect("spawned");
        assert_eq!(p.ended_by, EndedBy::ExitedAfterKill);
        let notes: Vec<_> = o.record.events().filter_map(|e| e.detail.clone()).collect();
        assert_eq!(
            notes,
            [
                "streams reached their maximum duration of 5000 ms",
                "sigterm sent to the group",
                "sigkill sent to the group"
            ]
        );
        let v = serde_json::to_value(&o.record).expect("serializes");
        assert_eq!(v["cancel_reason"], "max_duration");
        assert_eq!(v["kind"], "operation");
        assert_eq!(run.poll_timeout(), None);
    }

    #[test]
    fn max_duration_fires_while_a_descendant_holds_a_stream_after_the_exit() {
        let clock = Clock::new();
        let mut config = HelperConfig::default();
        config.max_duration(Duration::from_secs(5));
        let mut run = new_run(config, &clock);
        spawn(&mut run, &clock, 0);
        // The exit comes just before the limit, so it fires before the
        // supervisor's drain deadline after the exit.
        run.handle_exited(clock.at(4_500), ExitStatus::Code(0));
        run.handle_stdout_eof(clock.at(4_500));
        assert!(drain(&mut run).is_empty(), "stderr still open");
        assert_eq!(run.poll_timeout(), Some(clock.at(5 * S).instant));
        run.handle_timeout(clock.at(5 * S));
        // The supervisor's rule after the exit: the descendants get SIGKILL.
        assert!(matches!(
            drain(&mut run).as_slice(),
            [HelperAction::SignalGroup(Signal::Kill)]
        ));
        run.handle_stderr_eof(clock.at(5 * S + 10));
        let o = finished(drain(&mut run));
        assert_eq!(o.record.state(), CallState::CancelledAfterDispatch);
        assert_eq!(o.record.cancel_reason(), Some(CancelReason::MaxDuration));
        assert_eq!(
            o.exit_status,
            Some(ExitStatus::Code(0)),
            "the observed exit"
        );
    }

    #[test]
    fn max_duration_is_not_armed_after_a_cancel_or_before_the_spawn_and_never_overflows() {
        let clock = Clock::new();
        let mut config = with_approval(30);
        config.max_duration(Duration::from_secs(1));
        let mut run = new_run(config, &clock);
        assert_eq!(run.poll_timeout(), Some(clock.at(30 * S).instant));
        run.approve(clock.at(10 * S)).expect("in time");
        assert_eq!(run.poll_timeout(), None, "not before the spawn");
        spawn(&mut run, &clock, 10 * S);
        assert_eq!(run.poll_timeout(), Some(clock.at(11 * S).instant));
        run.cancel(clock.at(10 * S + 1));
        let _ = drain(&mut run);
        assert_eq!(run.record().cancel_reason(), Some(CancelReason::Caller));
        // Only the supervisor's TERM grace, not the stream deadline, is pending.
        assert_eq!(run.poll_timeout(), Some(clock.at(12 * S + 1).instant));
        run.handle_timeout(clock.at(11 * S));
        assert!(drain(&mut run).is_empty());
        assert_eq!(run.record().cancel_reason(), Some(CancelReason::Caller));

        // A duration past what an Instant can hold never fires.
        let mut config = HelperConfig::default();
        config.max_duration(Duration::MAX);
        let mut run = new_run(config, &clock);
        spawn(&mut run, &clock, 0);
        assert_eq!(run.poll_timeout(), None);
        run.handle_timeout(clock.at(3_600 * S));
        assert!(drain(&mut run).is_empty());
        assert_eq!(run.state(), CallState::Dispatched);
    }

    #[test]
    fn discovery_has_its_own_budget_no_approval_and_is_recorded_as_discovery() {
        let clock = Clock::new();
        let mut config = HelperConfig::discovery();
        config.approval(Some(Duration::from_secs(30)));
        assert_eq!(config.get_kind(), CallKind::Discovery);
        assert_eq!(config.get_approval(), None, "no approval step");
        assert_eq!(config.get_stdout().wanted(), DISCOVERY_STDOUT_TAIL);
        assert_eq!(config.get_stderr().wanted(), DISCOVERY_STDERR_TAIL);
        assert!(config.get_stdout().wanted() < HelperConfig::default().get_stdout().wanted());
        assert!(config.get_stderr().wanted() < HelperConfig::default().get_stderr().wanted());
        assert_eq!(config.get_excerpt_bytes(), DISCOVERY_EXCERPT);
        assert_eq!(config.get_max_duration(), DISCOVERY_MAX_DURATION);

        let discovery = CallIdentity {
            call_id: "c_7f2a.d1",
            session_id: "s_1",
            operation: "resolve-host",
            target: "prod",
        };
        let mut run = HelperRun::new(config, discovery, None, None, clock.at(0));
        assert_eq!(run.state(), CallState::Authorized, "authorized by policy");
        assert_eq!(run.approval_deadline(), None);
        assert_eq!(run.record().decision_reason(), Some(DecisionReason::Policy));
        spawn(&mut run, &clock, 1);
        assert_eq!(
            run.poll_timeout(),
            Some(clock.at(1).instant + DISCOVERY_MAX_DURATION)
        );
        run.handle_stdout(clock.at(2), &[b'h'; 20_000]);
        run.handle_stderr(clock.at(2), &[b'w'; 10_000]);
        run.handle_stdout_eof(clock.at(3));
        run.handle_stderr_eof(clock.at(3));
        run.handle_exited(clock.at(3), ExitStatus::Code(0));
        let o = finished(drain(&mut run));
        assert!(o.succeeded());
        assert_eq!(o.stdout.summary.retained, DISCOVERY_STDOUT_TAIL as u64);
        assert_eq!(o.stderr.summary.retained, DISCOVERY_STDERR_TAIL as u64);
        assert!(o.stdout.excerpt.len() <= DISCOVERY_EXCERPT);
        let r = &o.record;
        assert_eq!(r.kind(), CallKind::Discovery);
        assert_eq!(r.operation(), "resolve-host");
        assert!(!transitions(r).contains(&CallState::AwaitingApproval));
        assert!(r
            .events()
            .any(|e| e.detail.as_deref() == Some("approval ignored: a discovery run has none")));
        let v = serde_json::to_value(r).expect("serializes");
        assert_eq!(v["kind"], "discovery");
        assert_eq!(v["operation"], "resolve-host");
        assert_eq!(v["approval_deadline_unix_ms"], serde_json::Value::Null);
        assert_eq!(v["cancel_reason"], serde_json::Value::Null);

        // The operation it resolved is a run of its own, recorded as the operation.
        let mut op = new_run(with_approval(30), &clock);
        assert_eq!(op.record().kind(), CallKind::Operation);
        assert_eq!(op.record().operation(), "ssh.exec");
        assert!(matches!(
            drain(&mut op).as_slice(),
            [HelperAction::RequestApproval { .. }]
        ));
    }

    #[test]
    fn discovery_grants_come_from_the_pool_at_the_discovery_budget() {
        let clock = Clock::new();
        let mut pool = RetentionPool::new(PoolConfig::default().limit(256 * 1024));
        let config = HelperConfig::discovery();
        let g1 = pool.grant(config.get_stdout().wanted());
        let g2 = pool.grant(config.get_stderr().wanted());
        assert_eq!(pool.in_use(), DISCOVERY_STDOUT_TAIL + DISCOVERY_STDERR_TAIL);
        let mut run = HelperRun::new(config, identity(), Some(g1), Some(g2), clock.at(0));
        run.cancel(clock.at(1));
        let _ = finished(drain(&mut run));
        assert_eq!(run.record().cancel_reason(), Some(CancelReason::Caller));
        assert_eq!(run.record().state(), CallState::Cancelled);
        let (g1, g2) = run.take_grants();
        for grant in [g1, g2].into_iter().flatten() {
            pool.release(grant).expect("from this pool");
        }
        assert_eq!(pool.in_use(), 0);
    }
}
