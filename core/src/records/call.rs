//! The operation lifecycle of one call and its record (G12).
//!
//! A call moves through explicit states; stderr and every other output are
//! *facts attached to* the call and never decide a transition:
//!
//! ```text
//! received ─▶ validated ─┬──────────────────────────▶ authorized ─▶ dispatched ─▶ completed
//!                        └─▶ awaiting_approval ─┬───▶ ▲                        ├─▶ cancelled_after_dispatch
//!                                               │                              ├─▶ force_killed
//!                                               └─▶ denied (user or            └─▶ unknown
//!                                                   approval_timeout)
//! validated ─▶ denied (policy)
//! received | validated | awaiting_approval | authorized ─▶ cancelled | failed_before_dispatch
//! ```
//!
//! The terminal states are `completed`, `denied`, `failed_before_dispatch`,
//! `cancelled`, `cancelled_after_dispatch`, `force_killed` and `unknown`. The
//! last four after `dispatched` exist because the remote side may have acted:
//! a cancel after dispatch is never reported as a plain failure.
//!
//! ## Approval timing
//!
//! [`CallLifecycle::request_approval`] fixes the deadline (`now + deadline_in`)
//! once. No other input moves it: the fact inputs ([`CallLifecycle::note`],
//! [`CallLifecycle::observe_stderr`], [`CallLifecycle::observe_exit`],
//! [`CallLifecycle::observe_stream_end`]) do not even read it. Only the
//! caller's clock, passed to [`CallLifecycle::handle_timeout`] (or to any
//! transition command, which applies an expired deadline first), makes it
//! fire. ("Wall clock" in G12 means real elapsed time as opposed to activity;
//! the deadline is a monotonic `Instant`, and the record also states it in
//! Unix milliseconds.) An expired approval becomes **`denied`** with
//! `decision_reason: "approval_timeout"` (not a separate state: the operation
//! was refused, and the reason says why).
//!
//! ## When to write the record
//!
//! Write [`CallLifecycle::record`] (for example to the hash-chained log of
//! the crate `mcp-stdio-audit`) right after [`CallLifecycle::dispatch`] and
//! *before* sending anything to the remote side, and again once the call is
//! terminal and the process diagnostics (exit status, stream ends, stderr
//! counters) are in. A record left at `dispatched` therefore means "the remote
//! side may have acted and we never learned the outcome".
//!
//! ## Limits
//!
//! Caller-provided strings are cut to [`CallConfig::max_text_bytes`] and the
//! event list to [`CallConfig::max_events`] (first and last events kept, the
//! number dropped counted). With the defaults a record holds at most about
//! 4 × 512 B of identity text plus 64 × (≈ 64 B + 512 B) of events: ≈ 39 KiB.

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

use serde::ser::{SerializeSeq, Serializer};
use serde::Serialize;

use crate::process::capture::{CaptureSummary, DebugMark, RetainedPart};
use crate::process::supervisor::{ExitStatus, StreamEnd};
use crate::time::Stamp;

/// Default limit on events kept per call record: 64.
pub const DEFAULT_MAX_EVENTS: usize = 64;
/// Smallest accepted event limit: the first and the last event are always kept.
pub const MIN_MAX_EVENTS: usize = 2;
/// Default limit on the bytes of each caller-provided string: 512.
pub const DEFAULT_MAX_TEXT_BYTES: usize = 512;
/// Smallest accepted text limit (room for the `…` marker plus one character).
pub const MIN_MAX_TEXT_BYTES: usize = 8;

/// Limits of one call record.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallConfig {
    max_events: usize,
    max_text_bytes: usize,
}

impl Default for CallConfig {
    fn default() -> Self {
        Self {
            max_events: DEFAULT_MAX_EVENTS,
            max_text_bytes: DEFAULT_MAX_TEXT_BYTES,
        }
    }
}

impl CallConfig {
    /// Sets the number of events kept per record (default
    /// [`DEFAULT_MAX_EVENTS`] = 64; values below [`MIN_MAX_EVENTS`] are raised
    /// to it).
    ///
    /// Past the limit the first `max / 2` events and the last `max - max / 2`
    /// are kept; the ones between are dropped and counted in
    /// `events_dropped`. Each event keeps its position `n` in the full
    /// sequence, so the gap is visible. Worst-case memory: `max` × (≈ 64 B +
    /// [`Self::max_text_bytes`]).
    pub fn max_events(&mut self, max: usize) -> &mut Self {
        self.max_events = max.max(MIN_MAX_EVENTS);
        self
    }

    /// Sets the byte limit of each caller-provided string: the identity
    /// fields (`call_id`, `session_id`, `operation`, `target`) and each event
    /// `detail` (default [`DEFAULT_MAX_TEXT_BYTES`] = 512; values below
    /// [`MIN_MAX_TEXT_BYTES`] are raised to it).
    ///
    /// Identity fields longer than this are cut at a character boundary and
    /// the record says `identity_truncated: true`; a cut detail ends in `…`.
    pub fn max_text_bytes(&mut self, max: usize) -> &mut Self {
        self.max_text_bytes = max.max(MIN_MAX_TEXT_BYTES);
        self
    }

    /// The event limit.
    pub fn get_max_events(&self) -> usize {
        self.max_events
    }

    /// The text limit.
    pub fn get_max_text_bytes(&self) -> usize {
        self.max_text_bytes
    }
}

/// A state of the operation lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CallState {
    /// The request arrived; nothing is checked yet.
    Received,
    /// Target and arguments were checked.
    Validated,
    /// An approval was requested; its deadline is running.
    AwaitingApproval,
    /// Allowed (by policy or by approval); not yet sent.
    Authorized,
    /// Sent to the remote side: from here on it may have acted.
    Dispatched,
    /// The outcome was observed (terminal).
    Completed,
    /// Refused by policy, by the user or by the approval deadline (terminal).
    Denied,
    /// Failed before anything was sent (terminal).
    FailedBeforeDispatch,
    /// Cancelled before anything was sent (terminal).
    Cancelled,
    /// Cancelled after dispatch: the remote side may have acted (terminal).
    CancelledAfterDispatch,
    /// The process was killed after dispatch (terminal).
    ForceKilled,
    /// The process boundary was lost after dispatch; outcome unknown (terminal).
    Unknown,
}

impl CallState {
    /// Every state, in lifecycle order.
    pub const ALL: [Self; 12] = [
        Self::Received,
        Self::Validated,
        Self::AwaitingApproval,
        Self::Authorized,
        Self::Dispatched,
        Self::Completed,
        Self::Denied,
        Self::FailedBeforeDispatch,
        Self::Cancelled,
        Self::CancelledAfterDispatch,
        Self::ForceKilled,
        Self::Unknown,
    ];

    /// True for states that accept no further transition.
    pub fn is_terminal(self) -> bool {
        !matches!(
            self,
            Self::Received
                | Self::Validated
                | Self::AwaitingApproval
                | Self::Authorized
                | Self::Dispatched
        )
    }

    /// True once the call was dispatched: the remote side may have acted.
    pub fn was_dispatched(self) -> bool {
        matches!(
            self,
            Self::Dispatched
                | Self::Completed
                | Self::CancelledAfterDispatch
                | Self::ForceKilled
                | Self::Unknown
        )
    }

    /// The snake_case name used in the record.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Received => "received",
            Self::Validated => "validated",
            Self::AwaitingApproval => "awaiting_approval",
            Self::Authorized => "authorized",
            Self::Dispatched => "dispatched",
            Self::Completed => "completed",
            Self::Denied => "denied",
            Self::FailedBeforeDispatch => "failed_before_dispatch",
            Self::Cancelled => "cancelled",
            Self::CancelledAfterDispatch => "cancelled_after_dispatch",
            Self::ForceKilled => "force_killed",
            Self::Unknown => "unknown",
        }
    }
}

impl fmt::Display for CallState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The authorization decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Decision {
    /// Not decided (yet, or never: validation failed or the call was cancelled first).
    None,
    /// Allowed.
    Allowed,
    /// Denied.
    Denied,
}

/// Who or what made the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DecisionReason {
    /// Policy, without an approval step.
    Policy,
    /// The user answered the approval request.
    User,
    /// The approval deadline passed without an answer (the call is `denied`).
    ApprovalTimeout,
}

/// The observed result of a completed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CallOutcome {
    /// The remote side reported success.
    Succeeded,
    /// The remote side reported a failure.
    RemoteFailure,
    /// The call failed locally after dispatch, with the outcome still known
    /// (for example an error response that could not be delivered).
    LocalFailure,
}

/// What kind of flow a call is: the operation itself, or a discovery run
/// that only resolves what the operation will be.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CallKind {
    /// The operation a person approves (or a policy authorizes).
    #[default]
    Operation,
    /// A non-operation flow run to find out what the operation will be (for
    /// example resolving a configured name to an endpoint); never the
    /// operation it helps to resolve.
    Discovery,
}

/// Why a call was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CancelReason {
    /// The caller cancelled it (`notifications/cancelled`, the client gone, a
    /// tool's own cancel).
    Caller,
    /// Its output streams reached their maximum duration.
    MaxDuration,
}

/// What an event records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CallEventKind {
    /// The call entered `state`.
    Transition,
    /// A fact from the caller (cancel sent, SIGTERM sent, …); `state` unchanged.
    Note,
}

/// One timestamped event of a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CallEvent {
    /// Position of the event among all events of the call, from 0. A jump
    /// between neighbours shows where events were dropped.
    pub n: u64,
    /// Wall-clock time of the event (caller's clock), ms since the Unix epoch.
    pub unix_ms: u64,
    /// Transition or note.
    pub kind: CallEventKind,
    /// The state after the event.
    pub state: CallState,
    /// Reason of a failure, or the text of a note; at most
    /// [`CallConfig::max_text_bytes`] bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Bounded event list: the first `head_cap` events and the last `tail_cap`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct EventLog {
    head: Vec<CallEvent>,
    tail: VecDeque<CallEvent>,
    head_cap: usize,
    tail_cap: usize,
    total: u64,
}

impl EventLog {
    fn new(max_events: usize) -> Self {
        let max_events = max_events.max(MIN_MAX_EVENTS);
        let head_cap = max_events / 2;
        Self {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_cap,
            tail_cap: max_events - head_cap,
            total: 0,
        }
    }

    /// Adds an event; returns true if an older event was dropped to make room.
    fn push(&mut self, event: CallEvent) -> bool {
        self.total = self.total.saturating_add(1);
        if self.head.len() < self.head_cap {
            self.head.push(event);
            return false;
        }
        self.tail.push_back(event);
        if self.tail.len() > self.tail_cap {
            self.tail.pop_front();
            return true;
        }
        false
    }

    fn iter(&self) -> impl Iterator<Item = &CallEvent> + '_ {
        self.head.iter().chain(self.tail.iter())
    }

    fn len(&self) -> usize {
        self.head.len() + self.tail.len()
    }
}

impl Serialize for EventLog {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.len()))?;
        for event in self.iter() {
            seq.serialize_element(event)?;
        }
        seq.end()
    }
}

/// The record of one call: lifecycle facts first, diagnostics after.
///
/// Serializes (snake_case) as one JSON object with, in this order:
/// `call_id`, `session_id`, `operation`, `target`, `identity_truncated`,
/// `state`, `decision`, `decision_reason`, `outcome`,
/// `approval_requested_unix_ms`, `approval_deadline_unix_ms`, `events`,
/// `events_dropped`, `stderr_bytes_seen`, `stderr_bytes_retained`,
/// `stderr_truncated`, `stderr_retained_part`, `stderr_head_bytes`,
/// `stderr_tail_bytes`, `stderr_redactions`, `exit_status`, `stream_end`,
/// `debug`, `kind`, `cancel_reason`. Fields that are not known are `null`, never an invented value: in
/// particular `exit_status` is `null` until an exit was actually observed.
///
/// `stderr_retained_part` says which part of stderr was kept (`all`, `head`,
/// `tail`, `head_and_tail`, `nothing`) and `stderr_head_bytes` /
/// `stderr_tail_bytes` how many stream bytes each part holds;
/// `stderr_redactions` counts the secrets the fallback redactor replaced in
/// them; `debug` is the [`DebugMark`] of the debug window the call ran in
/// (higher capture budgets), `null` outside any window.
///
/// `kind` is [`CallKind`]: `operation`, or `discovery` for a run that only
/// resolves what the operation will be (its `operation` is then the
/// discovery's own name). `cancel_reason` is [`CancelReason`] for a
/// `cancelled` or `cancelled_after_dispatch` call whose canceller said why
/// (`caller`, `max_duration`), `null` otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallRecord {
    call_id: String,
    session_id: String,
    operation: String,
    target: String,
    identity_truncated: bool,
    state: CallState,
    decision: Decision,
    decision_reason: Option<DecisionReason>,
    outcome: Option<CallOutcome>,
    approval_requested_unix_ms: Option<u64>,
    approval_deadline_unix_ms: Option<u64>,
    events: EventLog,
    events_dropped: u64,
    stderr_bytes_seen: u64,
    stderr_bytes_retained: u64,
    stderr_truncated: bool,
    stderr_retained_part: RetainedPart,
    stderr_head_bytes: u64,
    stderr_tail_bytes: u64,
    stderr_redactions: u64,
    exit_status: Option<ExitStatus>,
    stream_end: Option<StreamEnd>,
    debug: Option<DebugMark>,
    kind: CallKind,
    cancel_reason: Option<CancelReason>,
}

impl CallRecord {
    /// Stable id of the call.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }
    /// Id of the session the call belongs to.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }
    /// The requested operation (for example the tool name).
    pub fn operation(&self) -> &str {
        &self.operation
    }
    /// The target as shown to the user.
    pub fn target(&self) -> &str {
        &self.target
    }
    /// True if an identity field was cut to the text limit.
    pub fn identity_truncated(&self) -> bool {
        self.identity_truncated
    }
    /// Current state.
    pub fn state(&self) -> CallState {
        self.state
    }
    /// The authorization decision.
    pub fn decision(&self) -> Decision {
        self.decision
    }
    /// Who or what made the decision, once made.
    pub fn decision_reason(&self) -> Option<DecisionReason> {
        self.decision_reason
    }
    /// The observed result, once `completed`.
    pub fn outcome(&self) -> Option<CallOutcome> {
        self.outcome
    }
    /// Wall-clock time the approval was requested, if it was.
    pub fn approval_requested_unix_ms(&self) -> Option<u64> {
        self.approval_requested_unix_ms
    }
    /// Wall-clock approval deadline, if an approval was requested.
    pub fn approval_deadline_unix_ms(&self) -> Option<u64> {
        self.approval_deadline_unix_ms
    }
    /// Kept events, oldest first (the first and last ones if some were dropped).
    pub fn events(&self) -> impl Iterator<Item = &CallEvent> + '_ {
        self.events.iter()
    }
    /// Number of events dropped between the kept first and last ones.
    pub fn events_dropped(&self) -> u64 {
        self.events_dropped
    }
    /// Total stderr bytes read from the process.
    pub fn stderr_bytes_seen(&self) -> u64 {
        self.stderr_bytes_seen
    }
    /// Stderr bytes kept by the capture.
    pub fn stderr_bytes_retained(&self) -> u64 {
        self.stderr_bytes_retained
    }
    /// True if the capture dropped stderr bytes.
    pub fn stderr_truncated(&self) -> bool {
        self.stderr_truncated
    }
    /// Which part of stderr was kept (known once the capture finished).
    pub fn stderr_retained_part(&self) -> RetainedPart {
        self.stderr_retained_part
    }
    /// Stream bytes of stderr kept from its start.
    pub fn stderr_head_bytes(&self) -> u64 {
        self.stderr_head_bytes
    }
    /// Stream bytes of stderr kept from its end.
    pub fn stderr_tail_bytes(&self) -> u64 {
        self.stderr_tail_bytes
    }
    /// Secrets the redactor replaced in the kept stderr.
    pub fn stderr_redactions(&self) -> u64 {
        self.stderr_redactions
    }
    /// The debug window the call ran in, if any.
    pub fn debug(&self) -> Option<DebugMark> {
        self.debug
    }
    /// The exit status actually observed, if any.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.exit_status
    }
    /// How the output streams ended (the worst of those reported), if known.
    pub fn stream_end(&self) -> Option<StreamEnd> {
        self.stream_end
    }
    /// Operation or discovery.
    pub fn kind(&self) -> CallKind {
        self.kind
    }
    /// Why the call was cancelled, when it was and the canceller said why.
    pub fn cancel_reason(&self) -> Option<CancelReason> {
        self.cancel_reason
    }
}

/// The caller-provided identity of a call. Each field is cut to
/// [`CallConfig::max_text_bytes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallIdentity<'a> {
    /// Stable id of the call.
    pub call_id: &'a str,
    /// Id of the session.
    pub session_id: &'a str,
    /// The requested operation (for example the tool name).
    pub operation: &'a str,
    /// The target as shown to the user (host, path, endpoint, …).
    pub target: &'a str,
}

/// Errors of the lifecycle commands. A failed command changes nothing (an
/// approval deadline that had already expired still fires first; see
/// [`CallLifecycle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The command is not allowed in the current state.
    #[error("illegal call transition from {from} to {to}")]
    IllegalTransition {
        /// The state the call is in (and stays in).
        from: CallState,
        /// The state the command would have entered.
        to: CallState,
    },
    /// `now + deadline_in` is not representable as an `Instant`.
    #[error("approval deadline is out of range")]
    DeadlineOutOfRange,
}

/// The lifecycle of one call: a pure state machine plus its [`CallRecord`].
///
/// Methods, by group:
///
/// - **Getters:** [`state`](Self::state), [`record`](Self::record) (a
///   snapshot of the record in any state; clone or serialize it),
///   [`is_terminal`](Self::is_terminal),
///   [`approval_deadline`](Self::approval_deadline).
/// - **Transitions** (each takes a [`Stamp`]; an illegal one returns
///   [`CallError::IllegalTransition`] and changes nothing):
///   [`validate`](Self::validate),
///   [`request_approval`](Self::request_approval),
///   [`authorize`](Self::authorize) (no approval step),
///   [`approve`](Self::approve), [`deny`](Self::deny),
///   [`dispatch`](Self::dispatch), [`complete`](Self::complete),
///   [`cancel`](Self::cancel),
///   [`fail_before_dispatch`](Self::fail_before_dispatch),
///   [`force_kill`](Self::force_kill), [`mark_unknown`](Self::mark_unknown).
///   Before checking legality, every transition applies an approval deadline
///   that `stamp.instant` has reached, exactly as `handle_timeout` would: an
///   `approve` that arrives after the deadline finds the call `denied`.
/// - **Facts** (any state, terminal included, since a process is observed to
///   end after a cancel; they never change the state or the deadline):
///   [`note`](Self::note), [`observe_stderr`](Self::observe_stderr),
///   [`observe_exit`](Self::observe_exit),
///   [`observe_stream_end`](Self::observe_stream_end).
/// - **Time:** [`poll_timeout`](Self::poll_timeout) gives the approval
///   deadline while one is running; call
///   [`handle_timeout`](Self::handle_timeout) when it is reached. A spurious
///   call does nothing.
#[derive(Debug, Clone)]
pub struct CallLifecycle {
    max_text_bytes: usize,
    record: CallRecord,
    approval_deadline: Option<Instant>,
}

const PRE_DISPATCH: [CallState; 4] = [
    CallState::Received,
    CallState::Validated,
    CallState::AwaitingApproval,
    CallState::Authorized,
];

impl CallLifecycle {
    /// A new call in state `received`, with its first event at `unix_ms`.
    pub fn new(config: &CallConfig, identity: CallIdentity<'_>, unix_ms: u64) -> Self {
        let max = config.max_text_bytes;
        let (call_id, t1) = cut_identity(identity.call_id, max);
        let (session_id, t2) = cut_identity(identity.session_id, max);
        let (operation, t3) = cut_identity(identity.operation, max);
        let (target, t4) = cut_identity(identity.target, max);
        let mut lifecycle = Self {
            max_text_bytes: max,
            record: CallRecord {
                call_id,
                session_id,
                operation,
                target,
                identity_truncated: t1 || t2 || t3 || t4,
                state: CallState::Received,
                decision: Decision::None,
                decision_reason: None,
                outcome: None,
                approval_requested_unix_ms: None,
                approval_deadline_unix_ms: None,
                events: EventLog::new(config.max_events),
                events_dropped: 0,
                stderr_bytes_seen: 0,
                stderr_bytes_retained: 0,
                stderr_truncated: false,
                stderr_retained_part: RetainedPart::All,
                stderr_head_bytes: 0,
                stderr_tail_bytes: 0,
                stderr_redactions: 0,
                exit_status: None,
                stream_end: None,
                debug: None,
                kind: CallKind::Operation,
                cancel_reason: None,
            },
            approval_deadline: None,
        };
        lifecycle.push_event(unix_ms, CallEventKind::Transition, None);
        lifecycle
    }

    // ---- getters ----

    /// Current state.
    pub fn state(&self) -> CallState {
        self.record.state
    }

    /// The record as it stands now (in any state).
    pub fn record(&self) -> &CallRecord {
        &self.record
    }

    /// True once the call accepts no further transition.
    pub fn is_terminal(&self) -> bool {
        self.record.state.is_terminal()
    }

    /// The approval deadline fixed by `request_approval`, if one was requested
    /// (kept after the approval is answered, for inspection).
    pub fn approval_deadline(&self) -> Option<Instant> {
        self.approval_deadline
    }

    // ---- transitions ----

    /// `received → validated`.
    pub fn validate(&mut self, at: Stamp) -> Result<(), CallError> {
        self.transition(at, CallState::Validated, &[CallState::Received], None)
    }

    /// `validated → awaiting_approval`; fixes the deadline at
    /// `at.instant + deadline_in`. Nothing but the caller's clock moves it.
    pub fn request_approval(&mut self, at: Stamp, deadline_in: Duration) -> Result<(), CallError> {
        self.apply_timeout(at);
        self.check(CallState::AwaitingApproval, &[CallState::Validated])?;
        let deadline = at
            .instant
            .checked_add(deadline_in)
            .ok_or(CallError::DeadlineOutOfRange)?;
        let ms = u64::try_from(deadline_in.as_millis()).unwrap_or(u64::MAX);
        self.approval_deadline = Some(deadline);
        self.record.approval_requested_unix_ms = Some(at.unix_ms);
        self.record.approval_deadline_unix_ms = Some(at.unix_ms.saturating_add(ms));
        self.enter(at.unix_ms, CallState::AwaitingApproval, None);
        Ok(())
    }

    /// `validated → authorized` without an approval step (decision `allowed`,
    /// reason `policy`).
    pub fn authorize(&mut self, at: Stamp) -> Result<(), CallError> {
        self.transition(at, CallState::Authorized, &[CallState::Validated], None)?;
        self.decide(Decision::Allowed, DecisionReason::Policy);
        Ok(())
    }

    /// `awaiting_approval → authorized`: the user approved before the
    /// deadline (decision `allowed`, reason `user`).
    pub fn approve(&mut self, at: Stamp) -> Result<(), CallError> {
        self.transition(
            at,
            CallState::Authorized,
            &[CallState::AwaitingApproval],
            None,
        )?;
        self.decide(Decision::Allowed, DecisionReason::User);
        Ok(())
    }

    /// `validated → denied` (reason `policy`) or `awaiting_approval → denied`
    /// (reason `user`).
    pub fn deny(&mut self, at: Stamp) -> Result<(), CallError> {
        let from = self.apply_timeout(at);
        let reason = match from {
            CallState::Validated => DecisionReason::Policy,
            _ => DecisionReason::User,
        };
        self.transition(
            at,
            CallState::Denied,
            &[CallState::Validated, CallState::AwaitingApproval],
            None,
        )?;
        self.decide(Decision::Denied, reason);
        Ok(())
    }

    /// `authorized → dispatched`: the point of no return. Write the record
    /// after this and before sending anything.
    pub fn dispatch(&mut self, at: Stamp) -> Result<(), CallError> {
        self.transition(at, CallState::Dispatched, &[CallState::Authorized], None)
    }

    /// `dispatched → completed` with the observed outcome.
    pub fn complete(&mut self, at: Stamp, outcome: CallOutcome) -> Result<(), CallError> {
        self.transition(at, CallState::Completed, &[CallState::Dispatched], None)?;
        self.record.outcome = Some(outcome);
        Ok(())
    }

    /// Before dispatch (`received`, `validated`, `awaiting_approval`,
    /// `authorized`) → `cancelled`; `dispatched → cancelled_after_dispatch`.
    pub fn cancel(&mut self, at: Stamp) -> Result<(), CallError> {
        let from = self.apply_timeout(at);
        let to = if from.was_dispatched() {
            CallState::CancelledAfterDispatch
        } else {
            CallState::Cancelled
        };
        let allowed: &[CallState] = if from == CallState::Dispatched {
            &[CallState::Dispatched]
        } else {
            &PRE_DISPATCH
        };
        self.transition(at, to, allowed, None)
    }

    /// [`cancel`](Self::cancel), recording why (`cancel_reason`).
    pub fn cancel_because(&mut self, at: Stamp, reason: CancelReason) -> Result<(), CallError> {
        self.cancel(at)?;
        self.record.cancel_reason = Some(reason);
        Ok(())
    }

    /// Before dispatch (`received`, `validated`, `awaiting_approval`,
    /// `authorized`) → `failed_before_dispatch`, with a reason (cut to the
    /// text limit).
    pub fn fail_before_dispatch(&mut self, at: Stamp, reason: &str) -> Result<(), CallError> {
        self.transition(
            at,
            CallState::FailedBeforeDispatch,
            &PRE_DISPATCH,
            Some(reason),
        )
    }

    /// `dispatched → force_killed`: the host killed the process without a
    /// prior cancel of this call (a cancel that escalates to SIGKILL stays
    /// `cancelled_after_dispatch`; the kill shows in `exit_status` and notes).
    pub fn force_kill(&mut self, at: Stamp) -> Result<(), CallError> {
        self.transition(at, CallState::ForceKilled, &[CallState::Dispatched], None)
    }

    /// `dispatched → unknown`: the process boundary was lost (the peer
    /// vanished, the host restarted) and the outcome cannot be observed.
    pub fn mark_unknown(&mut self, at: Stamp) -> Result<(), CallError> {
        self.transition(at, CallState::Unknown, &[CallState::Dispatched], None)
    }

    // ---- facts ----

    /// Adds a note event (cancel sent, SIGTERM sent, …) in any state. The
    /// text is cut to the text limit. Does not change the state or deadline.
    pub fn note(&mut self, unix_ms: u64, detail: &str) {
        self.push_event(unix_ms, CallEventKind::Note, Some(detail));
    }

    /// Sets the stderr counters (absolute values from the capture). Never
    /// changes the state or the approval deadline.
    pub fn observe_stderr(&mut self, seen: u64, retained: u64, truncated: bool) {
        self.record.stderr_bytes_seen = seen;
        self.record.stderr_bytes_retained = retained;
        self.record.stderr_truncated = truncated;
    }

    /// Sets every stderr field from a finished capture's summary: the
    /// counters, which part was kept with the bytes of each, the redactions,
    /// and the capture's debug mark (if it has one). Never changes the state
    /// or the approval deadline.
    pub fn observe_stderr_capture(&mut self, summary: &CaptureSummary) {
        self.observe_stderr(summary.seen, summary.retained, summary.truncated);
        self.record.stderr_retained_part = summary.retained_part;
        self.record.stderr_head_bytes = summary.head_bytes;
        self.record.stderr_tail_bytes = summary.tail_bytes;
        self.record.stderr_redactions = summary.redactions;
        if let Some(mark) = summary.debug {
            self.mark_debug(mark);
        }
    }

    /// Notes that the call runs in a debug window (higher capture budgets):
    /// every record of the call from now on carries the mark. Set it when
    /// the call starts, in the window it started in.
    pub fn mark_debug(&mut self, mark: DebugMark) {
        self.record.debug = Some(mark);
    }

    /// Marks the call as an operation or a discovery flow (default
    /// operation). Set it when the call starts.
    pub fn mark_kind(&mut self, kind: CallKind) {
        self.record.kind = kind;
    }

    /// Records the exit status actually observed (the last call wins).
    pub fn observe_exit(&mut self, status: ExitStatus) {
        self.record.exit_status = Some(status);
    }

    /// Records how one output stream ended. Call it once per stream; the
    /// record keeps the worst (`abandoned_after_deadline` over
    /// `eof_after_cancel` over `eof_after_shutdown` over `eof`).
    pub fn observe_stream_end(&mut self, end: StreamEnd) {
        let rank = |e: StreamEnd| match e {
            StreamEnd::Eof => 0,
            StreamEnd::EofAfterShutdown => 1,
            StreamEnd::EofAfterCancel => 2,
            StreamEnd::AbandonedAfterDeadline => 3,
        };
        match self.record.stream_end {
            Some(old) if rank(old) >= rank(end) => {}
            _ => self.record.stream_end = Some(end),
        }
    }

    // ---- time ----

    /// The approval deadline while `awaiting_approval`; `None` otherwise.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.record.state {
            CallState::AwaitingApproval => self.approval_deadline,
            _ => None,
        }
    }

    /// If `awaiting_approval` and `at.instant` has reached the deadline, the
    /// call becomes `denied` (decision `denied`, reason `approval_timeout`).
    /// Otherwise does nothing.
    pub fn handle_timeout(&mut self, at: Stamp) {
        self.apply_timeout(at);
    }

    // ---- internals ----

    /// Fires an expired approval deadline; returns the state afterwards.
    fn apply_timeout(&mut self, at: Stamp) -> CallState {
        if let Some(deadline) = self.poll_timeout() {
            if at.instant >= deadline {
                self.enter(at.unix_ms, CallState::Denied, None);
                self.decide(Decision::Denied, DecisionReason::ApprovalTimeout);
            }
        }
        self.record.state
    }

    fn check(&self, to: CallState, allowed: &[CallState]) -> Result<(), CallError> {
        let from = self.record.state;
        if allowed.contains(&from) {
            Ok(())
        } else {
            Err(CallError::IllegalTransition { from, to })
        }
    }

    fn transition(
        &mut self,
        at: Stamp,
        to: CallState,
        allowed: &[CallState],
        detail: Option<&str>,
    ) -> Result<(), CallError> {
        self.apply_timeout(at);
        self.check(to, allowed)?;
        self.enter(at.unix_ms, to, detail);
        Ok(())
    }

    fn decide(&mut self, decision: Decision, reason: DecisionReason) {
        self.record.decision = decision;
        self.record.decision_reason = Some(reason);
    }

    fn enter(&mut self, unix_ms: u64, to: CallState, detail: Option<&str>) {
        self.record.state = to;
        self.push_event(unix_ms, CallEventKind::Transition, detail);
    }

    fn push_event(&mut self, unix_ms: u64, kind: CallEventKind, detail: Option<&str>) {
        let event = CallEvent {
            n: self.record.events.total,
            unix_ms,
            kind,
            state: self.record.state,
            detail: detail.map(|d| cut_detail(d, self.max_text_bytes)),
        };
        if self.record.events.push(event) {
            self.record.events_dropped = self.record.events_dropped.saturating_add(1);
        }
    }
}

impl CallRecord {
    /// Rewrites each text of the record with `f` (the identity, then each
    /// event's detail), telling it whether the text may have been cut at its
    /// end (an identity cut to its limit; a detail ending in `…`): for
    /// masking secrets.
    pub(crate) fn rewrite_texts(&mut self, mut f: impl FnMut(&mut String, bool)) {
        let cut = self.identity_truncated;
        for text in [
            &mut self.call_id,
            &mut self.session_id,
            &mut self.operation,
            &mut self.target,
        ] {
            f(text, cut);
        }
        let events = self.events.head.iter_mut().chain(&mut self.events.tail);
        for detail in events.filter_map(|e| e.detail.as_mut()) {
            let cut = detail.ends_with('…');
            f(detail, cut);
        }
    }
}

/// The longest prefix of `s` of at most `max` bytes ending on a char boundary.
fn prefix_at_boundary(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1; // terminates: 0 is always a boundary
    }
    &s[..end]
}

fn cut_identity(s: &str, max: usize) -> (String, bool) {
    let kept = prefix_at_boundary(s, max);
    (kept.to_owned(), kept.len() < s.len())
}

/// Cuts a detail to `max` bytes, ending it in `…` (3 bytes) when cut.
fn cut_detail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut out = prefix_at_boundary(s, max.saturating_sub('…'.len_utf8())).to_owned();
    out.push('…');
    out
}

#[cfg(test)]
mod tests;
