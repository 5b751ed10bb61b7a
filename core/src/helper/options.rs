//! What an application sets for its helper runs: [`HelperOptions`] (the
//! run's limits, the retention pool, the record sink) and where records go
//! ([`RecordSink`], [`RecordTap`]).

use crate::helper::{HelperConfig, HelperRun};
use crate::process::capture::SharedRetentionPool;
use crate::records::call::{CallIdentity, CallRecord, CallState};
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
/// cancel signal: limits, the shared retention pool and the call's identity.
///
/// ```
/// use std::time::Duration;
/// use mcp_stdio_core::HelperOptions;
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
    /// [`SharedRetentionPool::process`](crate::process::capture::SharedRetentionPool::process)
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
