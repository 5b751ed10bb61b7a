//! What an application sets for its helper runs: [`HelperOptions`] (the
//! run's limits, the retention pool, the call's identity, the record sink)
//! and where records go ([`RecordSink`], [`RecordTap`]).

use std::time::Duration;

use crate::helper::{
    HelperRun, DEFAULT_MAX_DURATION, DEFAULT_STDOUT_TAIL, DISCOVERY_EXCERPT,
    DISCOVERY_MAX_DURATION, DISCOVERY_STDERR_TAIL, DISCOVERY_STDOUT_TAIL,
};
use crate::process::capture::{CaptureConfig, DebugMark, SharedRetentionPool, DEFAULT_EXCERPT};
use crate::process::supervisor::SupervisorConfig;
use crate::records::call::{CallConfig, CallIdentity, CallKind, CallRecord, CallState};
use crate::time::Stamp;

/// Where a helper run's records go as they are made: a callback the
/// application supplies (to an audit chain, a channel, a log). The crate
/// `mcp-stdio-audit` makes one that appends each record to its hash-chained
/// log (`mcp_stdio_audit::record_sink`).
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
/// cancel signal, and everything a [`HelperRun`] is built from: the run's
/// limits and policies, the shared retention pool, the call's identity and
/// where its records go.
///
/// It holds the knobs of the run itself and one config per part, each
/// edited in place with `name_mut()` and read with `get_name()`: the cancel
/// graces ([`supervisor_mut`](Self::supervisor_mut)), the two captures
/// ([`stdout_mut`](Self::stdout_mut), [`stderr_mut`](Self::stderr_mut)) and
/// the call record ([`call_mut`](Self::call_mut)). Each knob has one setter,
/// on the config that holds it; none holds a config of its own.
///
/// ```
/// use std::time::Duration;
/// use mcp_stdio_core::HelperOptions;
///
/// let mut options = HelperOptions::default();
/// options
///     .call_id("c_1")
///     .operation("git.log")
///     .target("/srv/repo")
///     .max_duration(Duration::from_secs(30));
/// options.stdout_mut().tail(16 * 1024);
/// assert_eq!(options.get_operation(), "git.log");
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HelperOptions {
    supervisor: SupervisorConfig,
    pub(crate) stdout: CaptureConfig,
    pub(crate) stderr: CaptureConfig,
    pub(crate) excerpt_bytes: usize,
    pub(crate) kill_on_overflow: bool,
    approval: Option<Duration>,
    pub(crate) max_duration: Duration,
    pub(crate) kind: CallKind,
    call: CallConfig,
    pool: Option<SharedRetentionPool>,
    call_id: String,
    session_id: String,
    operation: String,
    target: String,
    records: Option<RecordSink>,
}

impl Default for HelperOptions {
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
    /// The options of a discovery run: a helper run only to find out
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
    /// Everything else is the default (the process pool, no identity, no
    /// record sink), and every setter still applies, so each of these can be
    /// changed.
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
    /// [`DEFAULT_TAIL`](crate::DEFAULT_TAIL) = 16 KiB, no head).
    /// Allocated in full at the spawn, or as much as the stderr grant allows:
    /// worst case `head + tail` bytes.
    pub fn stderr_mut(&mut self) -> &mut CaptureConfig {
        &mut self.stderr
    }

    /// Edits the call record's limits in place (see [`CallConfig`]: 64
    /// events of at most 512 bytes of text each).
    pub fn call_mut(&mut self) -> &mut CallConfig {
        &mut self.call
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
    /// [`DebugMode::active`](crate::DebugMode::active) when the
    /// call starts. Sets [`CaptureConfig::debug`] of both
    /// [`stdout_mut`](Self::stdout_mut) and [`stderr_mut`](Self::stderr_mut)
    /// at once (the one setter of two knobs: a run has one debug window).
    pub fn debug(&mut self, mark: Option<DebugMark>) -> &mut Self {
        self.stdout.debug(mark);
        self.stderr.debug(mark);
        self
    }

    /// Sets the process-wide budget shared by every capture. Default:
    /// [`SharedRetentionPool::process`](crate::SharedRetentionPool::process)
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

    /// The call record's limits.
    pub fn get_call(&self) -> &CallConfig {
        &self.call
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

    /// Whether an approval was set on a discovery run (which ignores it).
    pub(crate) fn approval_ignored(&self) -> bool {
        self.kind == CallKind::Discovery && self.approval.is_some()
    }

    /// The call's identity, as the record names it.
    pub(crate) fn identity(&self) -> CallIdentity<'_> {
        CallIdentity {
            call_id: &self.call_id,
            session_id: &self.session_id,
            operation: &self.operation,
            target: &self.target,
        }
    }

    /// Starts the state machine and validates the call; poll its actions
    /// next. The two grants are taken from the pool (if any) when the call
    /// is authorized — by policy, or when the approval arrives — right
    /// before [`HelperAction::Spawn`](crate::HelperAction::Spawn), not
    /// before: a call waiting for approval, denied, expired or cancelled
    /// before its spawn holds none of the pool, so open approval cards never
    /// starve running helpers. Release them after `Finished`
    /// ([`release`](Self::release)). ([`HelperRun::new`] takes grants
    /// already drawn.)
    pub fn start(&self, at: Stamp) -> HelperRun {
        HelperRun::build(self, (None, None), self.pool.clone(), at)
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
