//! The `run_helper` part of the adapter facade, and the helper gates of the
//! conformance suite (G7, G10, G11, G12), generic over the adapter.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcp_stdio_core::{CallRecord, CallState, DecisionReason};
use mcp_stdio_core::{CommandSpec, ExitStatus};
use mcp_stdio_core::{EndedBy, StreamEnd};
use mcp_stdio_core::{HelperOptions, HelperOutcome, RecordSink};
use mcp_stdio_core::{PoolConfig, RetainedPart, SharedRetentionPool};

use crate::{
    fixture_helper_path, group_leading_children, group_members, pid_alive, signal_pid, wait_until,
    LeaderWatch, Signal,
};

/// What the suite's approver decides, and when.
#[derive(Debug, Clone, Copy)]
pub struct ApprovalScript {
    /// The answer.
    pub approve: bool,
    /// How long the "person" takes to answer.
    pub after: Duration,
}

/// What a helper run observed besides its outcome.
#[derive(Debug)]
pub struct HelperRunReport {
    /// The outcome.
    pub outcome: HelperOutcome,
    /// From the call to the approval request, if one was raised.
    pub approval_requested_after: Option<Duration>,
    /// The deadline shown with the (first) approval request, from the moment
    /// it was shown.
    pub approval_deadline_in: Option<Duration>,
    /// How many times the approver was asked (the card was drawn).
    pub approval_requests: u32,
    /// From the call to the cancel, if the job cancelled.
    pub cancelled_after: Option<Duration>,
    /// From the call to its outcome.
    pub took: Duration,
}

impl HelperRunReport {
    /// The report of a run that started at `start` and ended at `end`.
    pub fn new(outcome: HelperOutcome, start: Instant, end: Instant, clock: &RunClock) -> Self {
        let m = clock.moments();
        Self {
            outcome,
            approval_requested_after: m.approval_requested.map(|t| t.duration_since(start)),
            approval_deadline_in: m
                .approval_requested
                .zip(m.approval_deadline)
                .map(|(shown, deadline)| deadline.saturating_duration_since(shown)),
            approval_requests: m.approval_requests,
            cancelled_after: m.cancelled.map(|t| t.duration_since(start)),
            took: end.duration_since(start),
        }
    }

    /// From the cancel to the outcome (the process exited and both readers
    /// finished), if the job cancelled.
    pub fn cancel_to_end(&self) -> Option<Duration> {
        self.cancelled_after.map(|c| self.took.saturating_sub(c))
    }
}

/// An adapter's `run_helper`, behind a synchronous interface.
pub trait HelperAdapter: 'static {
    /// Its name, for messages.
    const NAME: &'static str;

    /// Runs helpers concurrently; each may be cancelled after a delay and may
    /// go through an approval step answered by `approval`.
    fn run_helpers(runs: Vec<HelperJob>) -> Vec<HelperRunReport>;

    /// Runs one helper.
    fn run_helper(job: HelperJob) -> HelperRunReport {
        Self::run_helpers(vec![job])
            .pop()
            .expect("one job gives one report")
    }
}

/// One helper run for [`HelperAdapter::run_helpers`].
#[derive(Debug, Clone)]
pub struct HelperJob {
    /// The helper's command.
    pub command: CommandSpec,
    /// Limits, pool, identity.
    pub options: HelperOptions,
    /// Cancel after this long, if set.
    pub cancel_after: Option<Duration>,
    /// The approver's behaviour (used when `options.get_approval()` gives an approval deadline).
    pub approval: Option<ApprovalScript>,
    /// Start the run this long after the others (its clock starts then).
    pub start_after: Duration,
}

/// A fixture-helper command.
pub fn helper_command(args: &[&str]) -> CommandSpec {
    let mut spec = CommandSpec::new(fixture_helper_path());
    spec.args(args);
    spec
}

/// Helper options with a small stderr budget and short graces.
pub fn helper_options(stderr_tail: usize) -> HelperOptions {
    let mut o = HelperOptions::default();
    o.operation("fixture-helper")
        .target("test")
        .call_id("call-1")
        .session_id("suite")
        // Budgets of its own: the gates run side by side in one process,
        // and the process-wide pool (the default) would make each run's
        // grant depend on the others. The pool has its own gate.
        .pool(None);
    o.stderr_mut().tail(stderr_tail);
    o.supervisor_mut()
        .term_grace(Duration::from_millis(500))
        .reader_drain_deadline(Duration::from_millis(500));
    o
}

fn job(command: CommandSpec, options: HelperOptions) -> HelperJob {
    HelperJob {
        command,
        options,
        cancel_after: None,
        approval: None,
        start_after: Duration::ZERO,
    }
}

fn assert_marker(text: &str, stream: &str, kept: u64, seen: u64) {
    let marker = format!("[{stream} truncated: kept last {kept} of {seen} bytes]");
    assert!(
        text.starts_with(&marker),
        "expected {marker:?} at the start of {:?}",
        &text[..text.len().min(120)]
    );
}

/// G10/G11/G12: a helper flooding stderr for 3 s under a 1.5 s cancel
/// deadline: retained ≤ budget, exact marker, child terminated, both
/// streams drained to EOF, final record written.
pub fn g10_helper_stderr_flood_under_a_deadline<A: HelperAdapter>() {
    let mut j = job(
        helper_command(&["flood-stderr", "3"]),
        helper_options(16 * 1024),
    );
    j.cancel_after = Some(Duration::from_millis(1500));
    let t = Instant::now();
    let r = A::run_helper(j);
    let o = &r.outcome;
    let took = t.elapsed();
    let s = o.stderr.summary;
    eprintln!(
        "{}: flood seen {} retained {} in {took:?}; ended {:?} exit {:?}",
        A::NAME,
        s.seen,
        s.retained,
        o.process.as_ref().map(|p| p.ended_by),
        o.exit_status
    );
    assert!(s.seen > 1 << 20, "the flood was drained ({} bytes)", s.seen);
    assert!(s.retained <= 16 * 1024 && s.truncated);
    assert_marker(&o.stderr.text, "stderr", s.retained, s.seen);
    assert_eq!(o.exit_status, Some(ExitStatus::Signal(15)));
    let p = o.process.as_ref().expect("spawned");
    assert_eq!(p.stdout, Some(StreamEnd::EofAfterCancel));
    assert_eq!(p.stderr, Some(StreamEnd::EofAfterCancel));
    assert_eq!(o.record.state(), CallState::CancelledAfterDispatch);
    assert_eq!(o.record.stderr_bytes_seen(), s.seen);
    assert!(took < Duration::from_secs(10), "no hang: {took:?}");
}

/// G10: the helper's exit code, invalid UTF-8 and an over-long line are
/// captured honestly; stdout and stderr are separate.
pub fn g10_helper_exit_codes_invalid_utf8_and_long_lines<A: HelperAdapter>() {
    let r = A::run_helper(job(helper_command(&["exit", "3"]), helper_options(1024)));
    assert_eq!(r.outcome.exit_status, Some(ExitStatus::Code(3)));
    assert_eq!(r.outcome.stdout.text, "helper stdout line\n");
    assert_eq!(r.outcome.stderr.text, "helper stderr line\n");
    assert!(!r.outcome.succeeded());
    let r = A::run_helper(job(helper_command(&["invalid-utf8"]), helper_options(1024)));
    assert_eq!(r.outcome.exit_status, Some(ExitStatus::Code(0)));
    assert!(r.outcome.stderr.text.contains('\u{FFFD}'));
    assert!(r.outcome.succeeded());
    let r = A::run_helper(job(
        helper_command(&["long-line", "100000"]),
        helper_options(4096),
    ));
    let s = r.outcome.stderr.summary;
    assert_eq!((s.seen, s.retained), (100_001, 4096));
    assert_marker(&r.outcome.stderr.text, "stderr", 4096, 100_001);
}

/// G11: cancel while the helper ignores SIGTERM: KILL after the grace.
pub fn g11_helper_cancel_ignoring_term_is_killed<A: HelperAdapter>() {
    let mut j = job(helper_command(&["ignore-term", "30"]), helper_options(4096));
    j.cancel_after = Some(Duration::from_millis(300));
    let t = Instant::now();
    let r = A::run_helper(j);
    eprintln!("{}: ignore-term helper ended in {:?}", A::NAME, t.elapsed());
    assert_eq!(r.outcome.exit_status, Some(ExitStatus::Signal(9)));
    let p = r.outcome.process.as_ref().expect("spawned");
    assert_eq!(p.ended_by, EndedBy::ExitedAfterKill);
    assert!(r
        .outcome
        .stderr
        .text
        .contains("SIGTERM received and ignored"));
    assert!(t.elapsed() < Duration::from_secs(10));
}

fn grandchild_pid(stdout: &str) -> u32 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("grandchild "))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no grandchild pid in {stdout:?}"))
}

/// G11, article scenario "a wrapper exits while a descendant holds
/// stderr": the group kill ends the grandchild and the run finishes, with
/// its final record.
pub fn g11_helper_wrapper_exits_grandchild_killed_with_the_group<A: HelperAdapter>() {
    let t = Instant::now();
    let (o, log) = logged(helper_options(4096), "call-wrapper");
    let r = A::run_helper(job(helper_command(&["wrapper-grandchild", "30"]), o));
    let has_final = print_facts::<A>("wrapper-exits-grandchild-in-group", &r, &log);
    let pid = grandchild_pid(&r.outcome.stdout.text);
    let gone = wait_until(Duration::from_secs(5), Duration::from_millis(20), || {
        !pid_alive(pid)
    });
    if gone.is_none() {
        let _ = signal_pid(pid, Signal::SIGKILL);
    }
    let p = r.outcome.process.as_ref().expect("spawned");
    eprintln!(
        "{}: wrapper run {:?}; grandchild gone after {gone:?}; {p:?}",
        A::NAME,
        t.elapsed()
    );
    assert!(gone.is_some(), "the grandchild outlived the run");
    assert_eq!(r.outcome.exit_status, Some(ExitStatus::Code(0)));
    assert!(
        p.group_killed_after_exit(),
        "the group was killed after the leader exited"
    );
    assert!(r.outcome.stderr.text.contains("helper-grandchild: alive"));
    assert!(r.took < Duration::from_secs(10), "no hang: {:?}", r.took);
    assert!(has_final, "the final record reached the sink");
}

/// G11: a grandchild that escaped with `setsid` holds stderr: the reader
/// deadline ends the run with `abandoned_after_deadline`, no hang.
pub fn g11_helper_escaped_grandchild_reader_abandoned<A: HelperAdapter>() {
    let t = Instant::now();
    let (o, log) = logged(helper_options(4096), "call-escaped");
    let r = A::run_helper(job(helper_command(&["escaped-grandchild", "30"]), o));
    let has_final = print_facts::<A>("wrapper-exits-escaped-grandchild", &r, &log);
    let took = t.elapsed();
    let pid = grandchild_pid(&r.outcome.stdout.text);
    let _ = signal_pid(pid, Signal::SIGKILL);
    let p = r.outcome.process.as_ref().expect("spawned");
    eprintln!(
        "{}: escaped grandchild run ended in {took:?}: {p:?}",
        A::NAME
    );
    assert_eq!(p.stderr, Some(StreamEnd::AbandonedAfterDeadline));
    assert_eq!(r.outcome.exit_status, Some(ExitStatus::Code(0)));
    assert_eq!(
        r.outcome.record.stream_end(),
        Some(StreamEnd::AbandonedAfterDeadline)
    );
    assert!(took < Duration::from_secs(10), "no hang: {took:?}");
    assert!(has_final, "the final record reached the sink");
}

/// G11: a helper whose leader exits while its group is emptied (the grandchild escaped with
/// `setsid` and holds stderr) stays an unreaped zombie while the supervisor may still signal
/// its group (the group `SIGKILL` after the exit), and is reaped when the run ends: a
/// recycled group id is never signalled
/// ([`assert_zombie_until_the_end`](crate::suite::assert_zombie_until_the_end)).
pub fn g11_helper_leader_stays_a_zombie_while_its_group_may_be_signalled<A: HelperAdapter>() {
    let me = std::process::id();
    // Our child leading its own group, named like the fixture (a zombie's name stays readable).
    let watch = LeaderWatch::start(move || {
        group_leading_children(me).into_iter().find(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/comm"))
                .is_ok_and(|c| c.trim_end() == "fixture-helper")
        })
    });
    let options = helper_options(4096);
    let drain = options.get_supervisor().get_reader_drain_deadline();
    let start = Instant::now();
    let r = A::run_helper(job(helper_command(&["escaped-grandchild", "30"]), options));
    let ended = Instant::now();
    let life = watch.finish();
    let _ = signal_pid(grandchild_pid(&r.outcome.stdout.text), Signal::SIGKILL);
    let p = r.outcome.process.as_ref().expect("spawned");
    assert_eq!(r.outcome.exit_status, Some(ExitStatus::Code(0)), "{p:?}");
    assert!(p.group_killed_after_exit(), "{p:?}");
    // The run's clock starts a moment after `start`: about when the SIGKILL went out.
    let kill_sent = p.kill_sent_at.map(|d| start + d);
    crate::suite::assert_zombie_until_the_end(A::NAME, &life, drain, kill_sent, ended);
    eprintln!(
        "{}: helper leader: run ended in {:?} (exit {:?}, KILL {:?})",
        A::NAME,
        r.took,
        p.exited_at,
        p.kill_sent_at
    );
}

/// G12: the approval request is raised at once, without waiting for any
/// output, and its timing does not depend on how much stderr other helpers
/// are writing.
pub fn g12_approval_timing_independent_of_stderr_volume<A: HelperAdapter>() {
    let approval_job = || {
        let mut o = helper_options(4096);
        o.approval(Some(Duration::from_secs(5)));
        HelperJob {
            command: helper_command(&["exit", "0"]),
            options: o,
            cancel_after: None,
            approval: Some(ApprovalScript {
                approve: true,
                after: Duration::from_millis(10),
            }),
            start_after: Duration::ZERO,
        }
    };
    let quiet = A::run_helpers((0..5).map(|_| approval_job()).collect());
    let mut jobs: Vec<HelperJob> = (0..5)
        .map(|_| {
            let mut j = job(
                helper_command(&["flood-stderr", "1.5"]),
                helper_options(4096),
            );
            j.cancel_after = Some(Duration::from_secs(3));
            j
        })
        .collect();
    // The approval runs start while the floods are going.
    jobs.extend((0..5).map(|_| approval_job()));
    let noisy = A::run_helpers(jobs);
    let latency = |reports: &[HelperRunReport]| -> Duration {
        reports
            .iter()
            .filter_map(|r| r.approval_requested_after)
            .max()
            .expect("approval requested")
    };
    let (q, n) = (latency(&quiet), latency(&noisy));
    eprintln!(
        "{}: approval request latency quiet {q:?}, under floods {n:?}",
        A::NAME
    );
    // Generous: the request is raised before any spawn, so floods can only
    // delay it through CPU contention.
    assert!(
        n < q + Duration::from_millis(250),
        "quiet {q:?} vs noisy {n:?}"
    );
    for r in quiet.iter().chain(
        noisy
            .iter()
            .filter(|r| r.approval_requested_after.is_some()),
    ) {
        assert_eq!(r.outcome.record.state(), CallState::Completed);
        assert!(r.outcome.succeeded());
    }
}

/// G12: approval denied and approval timeout never spawn; each has a record.
pub fn g12_approval_denied_or_expired_never_spawns<A: HelperAdapter>() {
    let mut o = helper_options(4096);
    o.approval(Some(Duration::from_millis(300)));
    let deny = HelperJob {
        command: helper_command(&["exit", "0"]),
        options: o.clone(),
        cancel_after: None,
        approval: Some(ApprovalScript {
            approve: false,
            after: Duration::from_millis(10),
        }),
        start_after: Duration::ZERO,
    };
    let slow = HelperJob {
        approval: Some(ApprovalScript {
            approve: true,
            after: Duration::from_secs(2),
        }),
        ..deny.clone()
    };
    let reports = A::run_helpers(vec![deny, slow]);
    for r in &reports {
        assert_eq!(r.outcome.record.state(), CallState::Denied);
        assert!(r.outcome.process.is_none(), "never spawned");
        assert_eq!(r.outcome.exit_status, None);
    }
    let json = serde_json::to_value(&reports[1].outcome).expect("serializes");
    assert_eq!(json["record"]["decision_reason"], "approval_timeout");
    assert!(json["exit_status"].is_null());
}

/// G12, article scenario "a flood after the external operation succeeded,
/// with a cancel during cleanup": the helper reports success on stdout, then
/// floods stderr; the cancel arrives while it does. TERM ends it, both
/// streams are drained to EOF, and the final state says the remote side may
/// have acted (`cancelled_after_dispatch`, never `failed`).
pub fn g12_helper_cancel_after_dispatch_is_recorded<A: HelperAdapter>() {
    let (o, log) = logged(helper_options(4096), "call-flood-after-success");
    let mut j = job(helper_command(&["succeed-then-flood", "5"]), o);
    j.cancel_after = Some(Duration::from_millis(300));
    let r = A::run_helper(j);
    let has_final = print_facts::<A>("flood-after-success-cancel-in-cleanup", &r, &log);
    let o = &r.outcome;
    assert_eq!(o.stdout.text, "helper: operation succeeded\n");
    assert_eq!(o.record.state(), CallState::CancelledAfterDispatch);
    let s = o.stderr.summary;
    assert!(s.seen > 4096 && s.truncated, "the flood ran: {s:?}");
    assert!(s.retained <= 4096);
    assert_marker(&o.stderr.text, "stderr", s.retained, s.seen);
    assert_eq!(o.record.stderr_bytes_seen(), s.seen);
    assert_eq!(o.record.exit_status(), Some(ExitStatus::Signal(15)));
    let p = o.process.as_ref().expect("spawned");
    assert_eq!(p.ended_by, EndedBy::ExitedAfterTerm);
    assert_eq!(p.stdout, Some(StreamEnd::EofAfterCancel));
    assert_eq!(p.stderr, Some(StreamEnd::EofAfterCancel));
    let exit = p.cancel_to_exit.expect("exit observed after the cancel");
    assert!(exit < Duration::from_secs(2), "cancel -> exit {exit:?}");
    let to_end = r.cancel_to_end().expect("the job cancelled");
    assert!(
        to_end < Duration::from_secs(5),
        "cancel -> outcome {to_end:?}"
    );
    assert!(has_final, "the final record reached the sink");
}

/// G10: 50 concurrent helpers flooding stderr share one process-wide pool:
/// retained bytes never exceed its limit; every helper has a final record.
pub fn g10_fifty_concurrent_helpers_stay_within_the_pool<A: HelperAdapter>() {
    let mut pool_config = PoolConfig::default();
    pool_config.limit(256 * 1024);
    let pool = SharedRetentionPool::new(&pool_config);
    let jobs: Vec<HelperJob> = (0..50)
        .map(|i| {
            let mut o = helper_options(16 * 1024);
            o.pool(Some(pool.clone()));
            o.call_id(&format!("call-{i}"));
            let mut j = job(helper_command(&["flood-stderr", "1"]), o);
            j.cancel_after = Some(Duration::from_secs(10));
            j
        })
        .collect();
    let t = Instant::now();
    let reports = A::run_helpers(jobs);
    let stats = pool.stats();
    let retained: u64 = reports
        .iter()
        .map(|r| r.outcome.stderr.summary.retained)
        .sum();
    let seen: u64 = reports.iter().map(|r| r.outcome.stderr.summary.seen).sum();
    eprintln!(
        "{}: 50 helpers in {:?}: seen {seen} B, retained {retained} B, pool peak {} of {}",
        A::NAME,
        t.elapsed(),
        stats.peak,
        stats.limit
    );
    assert_eq!(reports.len(), 50);
    assert!(stats.peak <= 256 * 1024, "pool peak {}", stats.peak);
    assert!(retained <= 256 * 1024);
    assert_eq!(stats.in_use, 0, "every grant came back");
    for r in &reports {
        assert!(r.outcome.record.state().is_terminal());
        assert!(r.outcome.exit_status.is_some());
        assert!(r.outcome.stderr.summary.seen > 0);
    }
}

/// The records a run's [`RecordSink`] received, in order.
#[derive(Debug, Clone, Default)]
pub struct RecordLog(Arc<Mutex<Vec<CallRecord>>>);

impl RecordLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<CallRecord>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
    /// A sink appending to this log (a handful of records per run: one per
    /// state change, then the final one).
    pub fn sink(&self) -> RecordSink {
        let log = self.clone();
        RecordSink::new(move |r| log.lock().push(r.clone()))
    }
    /// The records so far.
    pub fn records(&self) -> Vec<CallRecord> {
        self.lock().clone()
    }
    /// True when the sink's last record is terminal and is the outcome's
    /// final record.
    pub fn has_final(&self, outcome: &HelperOutcome) -> bool {
        self.lock()
            .last()
            .is_some_and(|last| last.state().is_terminal() && *last == outcome.record)
    }
}

/// Options with a record log attached.
fn logged(mut options: HelperOptions, call_id: &str) -> (HelperOptions, RecordLog) {
    let log = RecordLog::default();
    options.records(Some(log.sink()));
    options.call_id(call_id);
    (options, log)
}

/// The article's facts for one scenario run, printed on one line; returns
/// whether the expected final record reached the sink.
fn print_facts<A: HelperAdapter>(scenario: &str, r: &HelperRunReport, log: &RecordLog) -> bool {
    let o = &r.outcome;
    let peak = log
        .records()
        .iter()
        .map(CallRecord::stderr_bytes_retained)
        .chain([o.stderr.summary.retained])
        .max()
        .unwrap_or(0);
    let has_final = log.has_final(o);
    eprintln!(
        "FACTS {} {scenario}: peak retained stderr {peak} B (+ stdout {} B), \
         approval latency {:?} (deadline {:?}, card drawn {}x), cancel->exit {:?} \
         (cancel->outcome {:?}), run {:?}, final state {}, expected record {}",
        A::NAME,
        o.stdout.summary.retained,
        r.approval_requested_after,
        r.approval_deadline_in,
        r.approval_requests,
        o.process.as_ref().and_then(|p| p.cancel_to_exit),
        r.cancel_to_end(),
        r.took,
        o.record.state().as_str(),
        if has_final { "present" } else { "MISSING" },
    );
    has_final
}

/// Checks the records the sink got before the spawn: none carries stderr
/// (output from elsewhere is never attached to a call that has no process).
fn assert_nothing_attached_before_dispatch(log: &RecordLog) {
    let records = log.records();
    let awaiting: Vec<_> = records
        .iter()
        .filter(|r| r.state() == CallState::AwaitingApproval)
        .collect();
    assert!(!awaiting.is_empty(), "no awaiting_approval record");
    for r in awaiting {
        assert_eq!(r.stderr_bytes_seen(), 0, "stderr attached before the spawn");
    }
}

/// The card's deadline as the records state it, in ms after the request;
/// the same in every record that carries it (never reset).
fn record_deadline_ms(log: &RecordLog) -> u64 {
    let spans: Vec<u64> = log
        .records()
        .iter()
        .filter_map(|r| {
            let asked = r.approval_requested_unix_ms()?;
            Some(r.approval_deadline_unix_ms()? - asked)
        })
        .collect();
    assert!(!spans.is_empty(), "no record carries the approval deadline");
    assert!(
        spans.windows(2).all(|w| w[0] == w[1]),
        "the deadline moved between records: {spans:?}"
    );
    spans[0]
}

fn approval_job(
    args: &[&str],
    deadline: Duration,
    answer: ApprovalScript,
    id: &str,
) -> (HelperJob, RecordLog) {
    let mut o = helper_options(4096);
    o.approval(Some(deadline));
    let (o, log) = logged(o, id);
    let mut j = job(helper_command(args), o);
    j.approval = Some(answer);
    (j, log)
}

fn flood_job(secs: &str, id: &str) -> HelperJob {
    let mut o = helper_options(4096);
    o.call_id(id);
    let mut j = job(helper_command(&["flood-stderr", secs]), o);
    j.cancel_after = Some(Duration::from_secs(6));
    j
}

/// Article scenario "stderr before approval". No helper process exists before
/// its approval, so the stderr before the card comes from elsewhere: another
/// helper flooding for 300 ms before the call arrives. The card is shown at
/// once with its full deadline, nothing of that stderr is attached to the
/// call, and the approved helper's record holds its own stderr only.
pub fn g12_scenario_stderr_before_approval<A: HelperAdapter>() {
    let deadline = Duration::from_secs(5);
    let (mut call, log) = approval_job(
        &["exit", "0"],
        deadline,
        ApprovalScript {
            approve: true,
            after: Duration::from_millis(200),
        },
        "call-before",
    );
    call.start_after = Duration::from_millis(300);
    let reports = A::run_helpers(vec![flood_job("1.5", "flood-before"), call]);
    let (flood, r) = (&reports[0], &reports[1]);
    let has_final = print_facts::<A>("stderr-before-approval", r, &log);
    let latency = r.approval_requested_after.expect("the card was shown");
    assert!(flood.outcome.stderr.summary.seen > 0, "the flood ran");
    assert!(
        latency < Duration::from_millis(500),
        "card after {latency:?}"
    );
    assert_eq!(r.approval_requests, 1, "the card is drawn once");
    let shown = r.approval_deadline_in.expect("a deadline");
    assert!(
        shown <= deadline && shown + Duration::from_millis(250) > deadline,
        "the card's deadline {shown:?} is not the configured {deadline:?}"
    );
    assert_eq!(record_deadline_ms(&log), 5000);
    assert_nothing_attached_before_dispatch(&log);
    assert!(r.outcome.succeeded(), "{:?}", r.outcome.record);
    assert_eq!(r.outcome.stderr.text, "helper stderr line\n");
    assert_eq!(r.outcome.record.stderr_bytes_seen(), 19);
    assert!(has_final, "the final record reached the sink");
}

/// Article scenario "stderr during approval, exit right after approval":
/// other helpers flood while the card is up; once approved, the helper
/// writes 100 000 bytes of stderr and exits at once. Every byte is drained
/// after the exit, the tail is kept with its marker, the call completes.
pub fn g12_scenario_stderr_during_approval_exit_right_after<A: HelperAdapter>() {
    let (call, log) = approval_job(
        &["stderr-then-exit", "100000", "0"],
        Duration::from_secs(5),
        ApprovalScript {
            approve: true,
            after: Duration::from_millis(500),
        },
        "call-during",
    );
    let mut jobs = vec![call];
    jobs.extend((0..3).map(|i| flood_job("1.5", &format!("flood-during-{i}"))));
    let reports = A::run_helpers(jobs);
    let r = &reports[0];
    let has_final = print_facts::<A>("stderr-during-approval-exit-after", r, &log);
    let latency = r.approval_requested_after.expect("the card was shown");
    assert!(
        latency < Duration::from_millis(500),
        "card after {latency:?}"
    );
    assert_eq!(r.approval_requests, 1);
    assert_eq!(record_deadline_ms(&log), 5000);
    assert_nothing_attached_before_dispatch(&log);
    let s = r.outcome.stderr.summary;
    assert_eq!(
        (s.seen, s.retained),
        (100_000, 4096),
        "drained after the exit"
    );
    assert_marker(&r.outcome.stderr.text, "stderr", 4096, 100_000);
    assert!(r.outcome.succeeded(), "{:?}", r.outcome.record);
    let p = r.outcome.process.as_ref().expect("spawned");
    assert_eq!(p.stderr, Some(StreamEnd::Eof));
    assert_eq!(r.outcome.record.stderr_bytes_seen(), 100_000);
    assert!(r.outcome.record.stderr_truncated());
    assert!(r.took < Duration::from_secs(10), "no hang: {:?}", r.took);
    assert!(has_final, "the final record reached the sink");
}

/// Article scenario "invalid bytes plus one line longer than the retention
/// limit", in one helper: counted exactly, the tail kept with its marker,
/// invalid bytes replaced, the record says a tail was kept.
pub fn g10_scenario_invalid_bytes_and_a_line_longer_than_the_limit<A: HelperAdapter>() {
    let (o, log) = logged(helper_options(4096), "call-invalid-long");
    let r = A::run_helper(job(
        helper_command(&["invalid-utf8-long-line", "100000"]),
        o,
    ));
    let has_final = print_facts::<A>("invalid-bytes-and-long-line", &r, &log);
    let invalid_line = 35_u64;
    let s = r.outcome.stderr.summary;
    assert_eq!(s.seen, 2 * invalid_line + 100_001);
    assert_eq!(s.retained, 4096);
    assert_marker(&r.outcome.stderr.text, "stderr", 4096, s.seen);
    let text = &r.outcome.stderr.text;
    assert!(text.contains('\u{FFFD}'), "invalid bytes replaced");
    assert!(text.ends_with(" end\n"), "the last line is whole");
    assert!(text.contains("LLLL\n"), "the long line's end is kept");
    let rec = &r.outcome.record;
    assert!(rec.stderr_truncated());
    assert_eq!(rec.stderr_retained_part(), RetainedPart::Tail);
    assert_eq!(rec.stderr_tail_bytes(), 4096);
    assert!(r.outcome.succeeded());
    assert!(has_final, "the final record reached the sink");
}

/// Article scenario "the slow reader": the bridge drains floods while the
/// card is up. An answer within the deadline is still accepted (the card
/// stays available); an answer after it is a timeout at the deadline fixed
/// when the card was shown (stderr arriving never resets it).
pub fn g12_scenario_slow_reader_card_stays_available_deadline_not_reset<A: HelperAdapter>() {
    let deadline = Duration::from_secs(2);
    let (mut in_time, log_in) = approval_job(
        &["exit", "0"],
        deadline,
        ApprovalScript {
            approve: true,
            after: Duration::from_millis(1000),
        },
        "call-in-time",
    );
    let (mut late, log_late) = approval_job(
        &["exit", "0"],
        deadline,
        ApprovalScript {
            approve: true,
            after: Duration::from_millis(3500),
        },
        "call-late",
    );
    in_time.start_after = Duration::from_millis(200);
    late.start_after = Duration::from_millis(200);
    let mut jobs = vec![in_time, late];
    jobs.extend((0..4).map(|i| flood_job("3.5", &format!("flood-slow-{i}"))));
    let reports = A::run_helpers(jobs);
    let drained: u64 = reports[2..]
        .iter()
        .map(|r| r.outcome.stderr.summary.seen)
        .sum();
    eprintln!(
        "{}: slow reader: {drained} B drained while the cards were up",
        A::NAME
    );
    let (a, b) = (&reports[0], &reports[1]);
    let a_final = print_facts::<A>("slow-reader-answer-in-time", a, &log_in);
    let b_final = print_facts::<A>("slow-reader-answer-late", b, &log_late);
    assert!(drained > 1 << 20, "the floods were drained ({drained} B)");
    for (r, log) in [(a, &log_in), (b, &log_late)] {
        assert_eq!(r.approval_requests, 1, "the card is drawn once");
        let shown = r.approval_deadline_in.expect("a deadline");
        assert!(
            shown <= deadline && shown + Duration::from_millis(250) > deadline,
            "card deadline {shown:?}"
        );
        assert_eq!(record_deadline_ms(log), 2000);
        assert_nothing_attached_before_dispatch(log);
    }
    assert!(a.outcome.succeeded(), "in time: {:?}", a.outcome.record);
    assert_eq!(b.outcome.record.state(), CallState::Denied);
    assert_eq!(
        b.outcome.record.decision_reason(),
        Some(DecisionReason::ApprovalTimeout)
    );
    assert!(b.outcome.process.is_none(), "never spawned");
    // The deadline is fixed when the call starts, just before the card is
    // shown: the run ends at it, neither before nor (much) after.
    let asked = b.approval_requested_after.expect("shown");
    assert!(
        b.took >= deadline && b.took < asked + deadline + Duration::from_millis(1500),
        "the late card's run took {:?} (shown after {asked:?}, deadline {deadline:?})",
        b.took
    );
    assert!(a_final && b_final, "the final records reached the sink");
}

/// Article scenario "cancel while the card is shown": the run ends at once,
/// `cancelled`, no helper process exists (it was never started, and none
/// with its arguments runs), and the final lifecycle record is written.
pub fn g7_scenario_cancel_while_the_card_is_shown<A: HelperAdapter>() {
    let token = format!(
        "30.{}{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    );
    let (mut call, log) = approval_job(
        &["sleep", &token],
        Duration::from_secs(30),
        ApprovalScript {
            approve: true,
            after: Duration::from_secs(20),
        },
        "call-cancel-card",
    );
    call.cancel_after = Some(Duration::from_millis(300));
    let r = A::run_helper(call);
    let has_final = print_facts::<A>("cancel-while-card-shown", &r, &log);
    let alive = wait_until(Duration::from_secs(2), Duration::from_millis(50), || {
        processes_with_arg(&token).is_empty()
    });
    assert!(
        alive.is_some(),
        "a helper runs: {:?}",
        processes_with_arg(&token)
    );
    assert_eq!(r.approval_requests, 1);
    assert_eq!(r.outcome.record.state(), CallState::Cancelled);
    assert!(r.outcome.process.is_none(), "never spawned");
    assert_eq!(r.outcome.exit_status, None);
    let to_end = r.cancel_to_end().expect("the job cancelled");
    assert!(to_end < Duration::from_secs(2), "cancel took {to_end:?}");
    assert!(
        !log.records().iter().any(|rec| rec.state().was_dispatched()),
        "a record claims a dispatch"
    );
    assert!(has_final, "the final record reached the sink");
}

/// Article: "run the same fixtures with concurrent calls". The scenario
/// helpers run side by side with four floods, all drawing on one 64 KiB
/// pool of their own at 16 KiB per call: the pool's peak stays within its
/// limit, every grant comes back, and every call ends in its expected state
/// with its final record in the sink.
pub fn g10_scenarios_side_by_side_stay_within_one_pool<A: HelperAdapter>() {
    const LIMIT: usize = 64 * 1024;
    let mut pool_config = PoolConfig::default();
    pool_config.limit(LIMIT);
    let pool = SharedRetentionPool::new(&pool_config);
    let mut logs = Vec::new();
    let mut add =
        |args: &[&str], id: &str, approval: Option<ApprovalScript>, cancel: Option<u64>| {
            let mut o = helper_options(16 * 1024);
            o.pool(Some(pool.clone()));
            // A small stdout budget, so the stderr captures share the pool.
            o.stdout_mut().tail(1024);
            if approval.is_some() {
                o.approval(Some(Duration::from_secs(5)));
            }
            let (o, log) = logged(o, id);
            let mut j = job(helper_command(args), o);
            j.approval = approval;
            j.cancel_after = cancel.map(Duration::from_millis);
            logs.push((id.to_string(), log));
            j
        };
    let approve = Some(ApprovalScript {
        approve: true,
        after: Duration::from_millis(300),
    });
    let never = Some(ApprovalScript {
        approve: true,
        after: Duration::from_secs(20),
    });
    let mut jobs = vec![
        add(
            &["succeed-then-flood", "3"],
            "flood-after-success",
            None,
            Some(400),
        ),
        add(
            &["stderr-then-exit", "100000", "0"],
            "exit-after-approval",
            approve,
            None,
        ),
        add(
            &["invalid-utf8-long-line", "100000"],
            "invalid-long",
            None,
            None,
        ),
        add(&["wrapper-grandchild", "30"], "wrapper", None, None),
        add(&["sleep", "30"], "cancel-card", never, Some(300)),
    ];
    for i in 0..4 {
        jobs.push(add(
            &["flood-stderr", "1"],
            &format!("flood-{i}"),
            None,
            Some(6000),
        ));
    }
    let t = Instant::now();
    let reports = A::run_helpers(jobs);
    if let Some(pid) = reports[3]
        .outcome
        .stdout
        .text
        .lines()
        .find_map(|l| l.strip_prefix("grandchild "))
        .and_then(|p| p.trim().parse().ok())
    {
        let gone = wait_until(Duration::from_secs(5), Duration::from_millis(20), || {
            !pid_alive(pid)
        });
        if gone.is_none() {
            let _ = signal_pid(pid, Signal::SIGKILL);
        }
        assert!(gone.is_some(), "the wrapper's grandchild outlived the run");
    }
    let stats = pool.stats();
    eprintln!(
        "{}: {} scenario runs side by side in {:?}: pool peak {} of {} B, {} grants ({} short)",
        A::NAME,
        reports.len(),
        t.elapsed(),
        stats.peak,
        stats.limit,
        stats.grants,
        stats.short_grants
    );
    let expected = [
        CallState::CancelledAfterDispatch,
        CallState::Completed,
        CallState::Completed,
        CallState::Completed,
        CallState::Cancelled,
    ];
    for (i, (r, (id, log))) in reports.iter().zip(&logs).enumerate() {
        let has_final = print_facts::<A>(&format!("side-by-side {id}"), r, log);
        assert!(has_final, "{id}: the final record reached the sink");
        let want = expected.get(i).copied().unwrap_or(CallState::Completed);
        assert_eq!(r.outcome.record.state(), want, "{id}");
        assert!(r.outcome.stderr.summary.retained <= 16 * 1024, "{id}");
    }
    assert!(stats.peak <= LIMIT as u64, "pool peak {}", stats.peak);
    // Two grants per run that reached its spawn; the run cancelled while its
    // card was shown was never authorized and drew none.
    let spawned = reports
        .iter()
        .filter(|r| r.outcome.process.is_some())
        .count() as u64;
    assert_eq!(
        spawned, 8,
        "every run but the one cancelled at its card spawned"
    );
    assert_eq!(
        stats.grants,
        2 * spawned,
        "every capture of a spawned run drew on the pool"
    );
    assert!(stats.short_grants > 0, "the pool bounded the grants");
    assert_eq!(
        (stats.in_use, stats.outstanding),
        (0, 0),
        "every grant came back"
    );
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "no hang: {:?}",
        t.elapsed()
    );
}

/// Pids of processes whose command line has the argument `arg`.
fn processes_with_arg(arg: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        cmdline
            .split(|b| *b == 0)
            .any(|a| a == arg.as_bytes())
            .then_some(pid)
    })
    .collect()
}

/// Shared scaffolding: when the approval was requested (and with which
/// deadline, how often) and when the job cancelled.
#[derive(Debug, Clone, Default)]
pub struct RunClock(Arc<Mutex<RunMoments>>);

/// What a [`RunClock`] saw.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunMoments {
    /// The first approval request.
    pub approval_requested: Option<Instant>,
    /// The deadline of the first approval request.
    pub approval_deadline: Option<Instant>,
    /// Approval requests seen.
    pub approval_requests: u32,
    /// The cancel.
    pub cancelled: Option<Instant>,
}

impl RunClock {
    fn lock(&self) -> std::sync::MutexGuard<'_, RunMoments> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
    /// The approver was asked, with this deadline.
    pub fn approval_requested(&self, deadline: Instant) {
        let mut g = self.lock();
        g.approval_requests += 1;
        if g.approval_requested.is_none() {
            g.approval_requested = Some(Instant::now());
            g.approval_deadline = Some(deadline);
        }
    }
    /// The job cancels now.
    pub fn cancelled(&self) {
        self.lock().cancelled.get_or_insert_with(Instant::now);
    }
    /// What was seen so far.
    pub fn moments(&self) -> RunMoments {
        *self.lock()
    }
}

/// Asserts no process of the group `pgid` is left.
pub fn assert_group_gone(pgid: u32) {
    let gone = wait_until(Duration::from_secs(5), Duration::from_millis(20), || {
        group_members(pgid).is_empty()
    });
    assert!(
        gone.is_some(),
        "group {pgid} still has {:?}",
        group_members(pgid)
    );
}

/// Instantiates every helper gate for one adapter.
#[macro_export]
macro_rules! helper_suite {
    ($adapter:ty) => {
        $crate::helper_suite!(@each $adapter;
            g10_helper_stderr_flood_under_a_deadline,
            g10_helper_exit_codes_invalid_utf8_and_long_lines,
            g11_helper_cancel_ignoring_term_is_killed,
            g11_helper_wrapper_exits_grandchild_killed_with_the_group,
            g11_helper_escaped_grandchild_reader_abandoned,
            g11_helper_leader_stays_a_zombie_while_its_group_may_be_signalled,
            g12_approval_timing_independent_of_stderr_volume,
            g12_approval_denied_or_expired_never_spawns,
            g12_helper_cancel_after_dispatch_is_recorded,
            g10_fifty_concurrent_helpers_stay_within_the_pool,
            g11_helper_max_duration_cancels_through_the_supervisor,
            g12_discovery_has_its_own_budget_and_no_approval,
            g12_scenario_stderr_before_approval,
            g12_scenario_stderr_during_approval_exit_right_after,
            g10_scenario_invalid_bytes_and_a_line_longer_than_the_limit,
            g12_scenario_slow_reader_card_stays_available_deadline_not_reset,
            g7_scenario_cancel_while_the_card_is_shown,
            g10_scenarios_side_by_side_stay_within_one_pool,
            sandbox_a_helper_writes_only_in_its_folder,
        );
    };
    (@each $adapter:ty; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                // One case at a time, each failing if it leaves a descriptor open.
                $crate::descriptors::run_checked(
                    concat!(stringify!($name), " (", stringify!($adapter), ")"),
                    $crate::helper_adapter::g10_helper_exit_codes_invalid_utf8_and_long_lines::<$adapter>,
                    $crate::helper_adapter::$name::<$adapter>,
                );
            }
        )*
    };
}

/// A helper run in a sandbox that lets it write one folder writes there
/// and is refused beside it (the shell says so on stderr); the caller is
/// never confined.
pub fn sandbox_a_helper_writes_only_in_its_folder<A: HelperAdapter>() {
    if !crate::suite::landlock_at_least("sandbox_a_helper", 1) {
        return;
    }
    let crate::suite::TwoFolders {
        tmp: _tmp,
        allowed,
        outside,
    } = crate::suite::TwoFolders::new();
    let mut spec = CommandSpec::new("/bin/sh");
    spec.args([
        "-c",
        &format!(
            "echo in > {0}/f && echo wrote; echo out > {1}/f || echo refused",
            allowed.display(),
            outside.display()
        ),
    ]);
    let mut sb = crate::suite::system_sandbox();
    sb.write(&allowed).read(&outside);
    spec.sandbox(sb);
    let r = A::run_helper(job(spec, helper_options(4096)));
    let o = &r.outcome;
    eprintln!(
        "{}: sandboxed helper: stdout {:?}, stderr {:?}, exit {:?}",
        A::NAME,
        o.stdout.text,
        o.stderr.text,
        o.exit_status
    );
    assert!(o.stdout.text.contains("wrote"), "{:?}", o.stdout.text);
    assert!(o.stdout.text.contains("refused"), "{:?}", o.stdout.text);
    assert!(
        o.stderr.text.contains("Permission denied"),
        "{:?}",
        o.stderr.text
    );
    assert!(allowed.join("f").exists());
    assert!(!outside.join("f").exists());
    assert!(o.succeeded(), "{:?}", o.exit_status);
    std::fs::write(outside.join("g"), "the caller is free").expect("the caller writes");
}

/// G11/G12: a helper whose streams outlive their maximum duration is
/// cancelled through the supervisor (TERM, grace, KILL, drain), and the
/// record says why (`cancel_reason: "max_duration"`).
pub fn g11_helper_max_duration_cancels_through_the_supervisor<A: HelperAdapter>() {
    use mcp_stdio_core::CancelReason;
    const MAX: Duration = Duration::from_millis(500);
    const GRACE: Duration = Duration::from_millis(500);
    let limited = |args: &[&str]| {
        let mut o = helper_options(4096);
        o.max_duration(MAX);
        job(helper_command(args), o)
    };
    let t = Instant::now();
    let reports = A::run_helpers(vec![
        limited(&["sleep", "30"]),
        limited(&["ignore-term", "30"]),
    ]);
    let took = t.elapsed();
    let wants = [
        (ExitStatus::Signal(15), EndedBy::ExitedAfterTerm),
        (ExitStatus::Signal(9), EndedBy::ExitedAfterKill),
    ];
    for (r, (status, ended_by)) in reports.iter().zip(wants) {
        let o = &r.outcome;
        let p = o.process.as_ref().expect("spawned");
        let json = serde_json::to_value(&o.record).expect("serializes");
        eprintln!(
            "{}: max duration {MAX:?}: ended {:?}, exit {:?}, cancel -> exit {:?}, \
             state {}, cancel_reason {}, final record exists: {}; all done in {took:?}",
            A::NAME,
            p.ended_by,
            o.exit_status,
            p.cancel_to_exit,
            o.record.state(),
            json["cancel_reason"],
            o.record.state().is_terminal()
        );
        assert_eq!(o.record.state(), CallState::CancelledAfterDispatch);
        assert_eq!(o.record.cancel_reason(), Some(CancelReason::MaxDuration));
        assert_eq!(json["cancel_reason"], "max_duration");
        assert!(o.record.events().any(|e| e
            .detail
            .as_deref()
            .is_some_and(|d| d.contains("maximum duration of 500 ms"))));
        assert_eq!(o.exit_status, Some(status));
        assert_eq!(o.record.exit_status(), Some(status));
        assert_eq!(p.ended_by, ended_by);
        let cancel_to_exit = p.cancel_to_exit.expect("cancelled");
        assert!(
            cancel_to_exit < GRACE + Duration::from_secs(3),
            "cancel -> exit {cancel_to_exit:?}"
        );
    }
    let killed = &reports[1].outcome;
    assert!(killed.stderr.text.contains("SIGTERM received and ignored"));
    assert!(
        killed.process.as_ref().and_then(|p| p.cancel_to_exit) >= Some(GRACE),
        "KILL only after the grace"
    );
    // Max duration + grace + drain, plus generous slack; the helpers would sleep 30 s.
    assert!(
        took < MAX + GRACE + Duration::from_millis(500) + Duration::from_secs(4),
        "no hang: {took:?}"
    );
}

/// G12: a discovery run has its own (smaller) output budget, no approval
/// step even with a deadline configured, and is recorded as discovery under
/// its own name; the operation beside it still goes through its approval.
pub fn g12_discovery_has_its_own_budget_and_no_approval<A: HelperAdapter>() {
    use mcp_stdio_core::CallKind;
    use mcp_stdio_core::{DISCOVERY_STDERR_TAIL, DISCOVERY_STDOUT_TAIL};
    let mut pool_config = PoolConfig::default();
    pool_config.limit(256 * 1024);
    let pool = SharedRetentionPool::new(&pool_config);
    let deny = Some(ApprovalScript {
        approve: false,
        after: Duration::from_millis(10),
    });
    // The discovery preset whole (its budgets and graces), with the
    // suite's identity.
    let mut d = HelperOptions::discovery();
    d.target("test").session_id("suite");
    d.approval(Some(Duration::from_secs(5)));
    d.pool(Some(pool.clone()));
    d.operation("resolve-target");
    d.call_id("call-1.discovery");
    let discovery = HelperJob {
        command: helper_command(&["flood-both", "0.3"]),
        options: d,
        cancel_after: None,
        approval: deny,
        start_after: Duration::ZERO,
    };
    let mut o = helper_options(4096);
    o.approval(Some(Duration::from_secs(5)));
    let operation = HelperJob {
        command: helper_command(&["exit", "0"]),
        options: o,
        cancel_after: None,
        approval: deny,
        start_after: Duration::ZERO,
    };
    let t = Instant::now();
    let reports = A::run_helpers(vec![discovery, operation]);
    let (d, op) = (&reports[0], &reports[1]);
    let stats = pool.stats();
    let o = &d.outcome;
    let json = serde_json::to_value(&o.record).expect("serializes");
    eprintln!(
        "{}: discovery in {:?}: kind {}, operation {}, state {}, approval requested {:?}, \
         stdout {}/{} B, stderr {}/{} B retained/seen, pool peak {}; operation beside it {}",
        A::NAME,
        t.elapsed(),
        json["kind"],
        json["operation"],
        o.record.state(),
        d.approval_requested_after,
        o.stdout.summary.retained,
        o.stdout.summary.seen,
        o.stderr.summary.retained,
        o.stderr.summary.seen,
        stats.peak,
        op.outcome.record.state()
    );
    assert_eq!(d.approval_requested_after, None, "no approval step");
    assert!(o.succeeded(), "ran to its end: {:?}", o.record.state());
    assert_eq!(o.record.kind(), CallKind::Discovery);
    assert_eq!(json["kind"], "discovery");
    assert_eq!(json["operation"], "resolve-target");
    assert!(json["approval_deadline_unix_ms"].is_null());
    assert!(o.stdout.summary.seen > DISCOVERY_STDOUT_TAIL as u64);
    assert!(o.stderr.summary.seen > DISCOVERY_STDERR_TAIL as u64);
    assert_eq!(o.stdout.summary.retained, DISCOVERY_STDOUT_TAIL as u64);
    assert_eq!(o.stderr.summary.retained, DISCOVERY_STDERR_TAIL as u64);
    assert_marker(
        &o.stderr.text,
        "stderr",
        DISCOVERY_STDERR_TAIL as u64,
        o.stderr.summary.seen,
    );
    assert_eq!(
        stats.peak,
        (DISCOVERY_STDOUT_TAIL + DISCOVERY_STDERR_TAIL) as u64,
        "discovery's grants are its own budget"
    );
    assert_eq!(stats.in_use, 0, "every grant came back");
    // The operation beside it asked, and the denial held.
    assert!(op.approval_requested_after.is_some());
    assert_eq!(op.outcome.record.state(), CallState::Denied);
    assert_eq!(op.outcome.record.kind(), CallKind::Operation);
    assert_eq!(op.outcome.record.operation(), "fixture-helper");
}
