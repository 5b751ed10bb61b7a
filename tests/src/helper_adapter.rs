//! The `run_helper` part of the adapter facade, and the helper gates of the
//! conformance suite (G7, G10, G11, G12), generic over the adapter.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcp_stdio_core::call::CallState;
use mcp_stdio_core::capture::{CaptureConfig, PoolConfig, SharedRetentionPool};
use mcp_stdio_core::helper::{HelperOptions, HelperOutcome};
use mcp_stdio_core::process::{EndedBy, StreamEnd};
use mcp_stdio_core::{CommandSpec, ExitStatus};

use crate::{fixture_helper_path, group_members, pid_alive, signal_pid, wait_until, Signal};

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
    /// The approver's behaviour (used when `options.config` has an approval deadline).
    pub approval: Option<ApprovalScript>,
}

/// A fixture-helper command.
pub fn helper_command(args: &[&str]) -> CommandSpec {
    let mut spec = CommandSpec::new(fixture_helper_path());
    spec.args(args);
    spec
}

/// Helper options with a small stderr budget and short graces.
pub fn helper_options(stderr_tail: usize) -> HelperOptions {
    let mut o = HelperOptions {
        operation: "fixture-helper".into(),
        target: "test".into(),
        call_id: "call-1".into(),
        session_id: "suite".into(),
        // Budgets of its own: the gates run side by side in one process,
        // and the process-wide pool (the default) would make each run's
        // grant depend on the others. The pool has its own gate.
        pool: None,
        ..HelperOptions::default()
    };
    let mut stderr = CaptureConfig::default();
    stderr.tail(stderr_tail);
    o.config.stderr(stderr);
    o.config
        .supervisor_mut()
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

/// G11: a wrapper exits while its grandchild keeps writing stderr: the
/// group kill ends the grandchild and the run finishes.
pub fn g11_helper_wrapper_exits_grandchild_killed_with_the_group<A: HelperAdapter>() {
    let t = Instant::now();
    let r = A::run_helper(job(
        helper_command(&["wrapper-grandchild", "30"]),
        helper_options(4096),
    ));
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
}

/// G11: a grandchild that escaped with `setsid` holds stderr: the reader
/// deadline ends the run with `abandoned_after_deadline`, no hang.
pub fn g11_helper_escaped_grandchild_reader_abandoned<A: HelperAdapter>() {
    let t = Instant::now();
    let r = A::run_helper(job(
        helper_command(&["escaped-grandchild", "30"]),
        helper_options(4096),
    ));
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
    assert!(took < Duration::from_secs(10), "no hang: {took:?}");
}

/// G12: the approval request is raised at once, without waiting for any
/// output, and its timing does not depend on how much stderr other helpers
/// are writing.
pub fn g12_approval_timing_independent_of_stderr_volume<A: HelperAdapter>() {
    let approval_job = || {
        let mut o = helper_options(4096);
        o.config.approval(Some(Duration::from_secs(5)));
        HelperJob {
            command: helper_command(&["exit", "0"]),
            options: o,
            cancel_after: None,
            approval: Some(ApprovalScript {
                approve: true,
                after: Duration::from_millis(10),
            }),
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
    o.config.approval(Some(Duration::from_millis(300)));
    let deny = HelperJob {
        command: helper_command(&["exit", "0"]),
        options: o.clone(),
        cancel_after: None,
        approval: Some(ApprovalScript {
            approve: false,
            after: Duration::from_millis(10),
        }),
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

/// G12: stderr after success, then a cancel while the process is still
/// draining: the final state says the remote side may have acted.
pub fn g12_helper_cancel_after_dispatch_is_recorded<A: HelperAdapter>() {
    let mut j = job(helper_command(&["flood-stderr", "5"]), helper_options(4096));
    j.cancel_after = Some(Duration::from_millis(200));
    let r = A::run_helper(j);
    assert_eq!(r.outcome.record.state(), CallState::CancelledAfterDispatch);
    assert!(r.outcome.record.stderr_bytes_seen() > 0);
    assert_eq!(r.outcome.record.exit_status(), Some(ExitStatus::Signal(15)));
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
            o.pool = Some(pool.clone());
            o.call_id = format!("call-{i}");
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

/// Shared scaffolding: the approval latency clock.
#[derive(Debug, Clone, Default)]
pub struct ApprovalClock(Arc<Mutex<Option<Instant>>>);

impl ApprovalClock {
    /// Records the first call.
    pub fn mark(&self) {
        let mut g = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        g.get_or_insert_with(Instant::now);
    }
    /// When it was first called.
    pub fn get(&self) -> Option<Instant> {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
            g12_approval_timing_independent_of_stderr_volume,
            g12_approval_denied_or_expired_never_spawns,
            g12_helper_cancel_after_dispatch_is_recorded,
            g10_fifty_concurrent_helpers_stay_within_the_pool,
            g11_helper_max_duration_cancels_through_the_supervisor,
            g12_discovery_has_its_own_budget_and_no_approval,
        );
    };
    (@each $adapter:ty; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                $crate::helper_adapter::$name::<$adapter>();
            }
        )*
    };
}

/// G11/G12: a helper whose streams outlive their maximum duration is
/// cancelled through the supervisor (TERM, grace, KILL, drain), and the
/// record says why (`cancel_reason: "max_duration"`).
pub fn g11_helper_max_duration_cancels_through_the_supervisor<A: HelperAdapter>() {
    use mcp_stdio_core::call::CancelReason;
    const MAX: Duration = Duration::from_millis(500);
    const GRACE: Duration = Duration::from_millis(500);
    let limited = |args: &[&str]| {
        let mut o = helper_options(4096);
        o.config.max_duration(MAX);
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
    use mcp_stdio_core::call::CallKind;
    use mcp_stdio_core::helper::{HelperConfig, DISCOVERY_STDERR_TAIL, DISCOVERY_STDOUT_TAIL};
    let mut pool_config = PoolConfig::default();
    pool_config.limit(256 * 1024);
    let pool = SharedRetentionPool::new(&pool_config);
    let deny = Some(ApprovalScript {
        approve: false,
        after: Duration::from_millis(10),
    });
    let mut d = helper_options(4096);
    d.config = HelperConfig::discovery();
    d.config.approval(Some(Duration::from_secs(5)));
    d.pool = Some(pool.clone());
    d.operation = "resolve-target".into();
    d.call_id = "call-1.discovery".into();
    let discovery = HelperJob {
        command: helper_command(&["flood-both", "0.3"]),
        options: d,
        cancel_after: None,
        approval: deny,
    };
    let mut o = helper_options(4096);
    o.config.approval(Some(Duration::from_secs(5)));
    let operation = HelperJob {
        command: helper_command(&["exit", "0"]),
        options: o,
        cancel_after: None,
        approval: deny,
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
