use super::*;
use crate::process::capture::DEFAULT_EXCERPT;
use crate::process::capture::{PoolConfig, RetentionPool};
use crate::process::supervisor::{EndedBy, StreamEnd};
use crate::records::call::{CallEventKind, CallKind, Decision, DecisionReason};
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

/// The default options with this test's call identity and no pool.
fn options() -> HelperOptions {
    let mut options = HelperOptions::default();
    options
        .call_id("c_7f2a")
        .session_id("s_1")
        .operation("ssh.exec")
        .target("deploy@example.org")
        .pool(None);
    options
}

fn new_run(config: HelperOptions, clock: &Clock) -> HelperRun {
    HelperRun::new(&config, None, None, clock.at(0))
}

fn with_approval(secs: u64) -> HelperOptions {
    let mut config = options();
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
    use crate::process::capture::PoolConfig;
    let clock = Clock::new();
    let pool = SharedRetentionPool::new(PoolConfig::default().limit(64 * 1024));
    let outstanding = || pool.stats().outstanding;

    // Denied: never granted.
    let mut run = with_approval(30)
        .pool(Some(pool.clone()))
        .start(clock.at(0));
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
    let mut run = with_approval(30)
        .pool(Some(pool.clone()))
        .start(clock.at(0));
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
    let mut run = new_run(options(), &clock);
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
        let mut run = new_run(options(), &clock);
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
    let mut run = new_run(options(), &clock);
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
    let mut run = new_run(options(), &clock);
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
    let mut run = new_run(options(), &clock);
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
    let mut run = new_run(options(), &clock);
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
    let mut run = new_run(options(), &clock);
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
    let mut run = new_run(options(), &clock);
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
    let mut config = options();
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
    assert!(o
        .record
        .events()
        .any(|e| e.detail.as_deref()
            == Some("killed on overflow: stderr exceeded its 64-byte budget")));
    let json = serde_json::to_value(&o).expect("serializes");
    assert_eq!(json["killed_on_overflow"], true);
    assert_eq!(json["record"]["state"], "force_killed");
}

#[test]
fn g10_overflow_after_a_cancel_does_not_count_as_an_overflow_kill() {
    let clock = Clock::new();
    let mut config = options();
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
    let mut run = new_run(options(), &clock);
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
    let mut run = new_run(options(), &clock);
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
    let mut run = new_run(options(), &clock);
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
    let config = options();
    // The pool has less than stdout's 64 KiB: the capture keeps what it got.
    let g1 = pool.grant(config.get_stdout().wanted());
    let g2 = pool.grant(config.get_stderr().wanted());
    assert_eq!(pool.free(), 0);
    let mut run = HelperRun::new(&config, Some(g1), Some(g2), clock.at(0));
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
    let mut run = HelperRun::new(&with_approval(30), Some(g), None, clock.at(0));
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
    let mut run = new_run(options(), &clock);
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
    let mut config = options();
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
    let mut run = new_run(options(), &clock);
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
    crate::fuzzing::fuzz_helper_run(&[]);
    for _ in 0..500 {
        let len = (next() % 512) as usize;
        let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        crate::fuzzing::fuzz_helper_run(&data);
    }
}

#[test]
fn max_duration_cancels_through_the_supervisor_and_says_why() {
    let clock = Clock::new();
    let mut config = options();
    config.max_duration(Duration::from_secs(5));
    assert_eq!(
        HelperOptions::default().get_max_duration(),
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
    let mut config = options();
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
    let mut config = options();
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
    let mut config = HelperOptions::discovery();
    config
        .approval(Some(Duration::from_secs(30)))
        .call_id("c_7f2a.d1")
        .session_id("s_1")
        .operation("resolve-host")
        .target("prod");
    assert_eq!(config.get_kind(), CallKind::Discovery);
    assert_eq!(config.get_approval(), None, "no approval step");
    assert_eq!(config.get_stdout().wanted(), DISCOVERY_STDOUT_TAIL);
    assert_eq!(config.get_stderr().wanted(), DISCOVERY_STDERR_TAIL);
    assert!(config.get_stdout().wanted() < HelperOptions::default().get_stdout().wanted());
    assert!(config.get_stderr().wanted() < HelperOptions::default().get_stderr().wanted());
    assert_eq!(config.get_excerpt_bytes(), DISCOVERY_EXCERPT);
    assert_eq!(config.get_max_duration(), DISCOVERY_MAX_DURATION);

    let mut run = HelperRun::new(&config, None, None, clock.at(0));
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
    let mut config = HelperOptions::discovery();
    config.call_id("c_7f2a");
    let g1 = pool.grant(config.get_stdout().wanted());
    let g2 = pool.grant(config.get_stderr().wanted());
    assert_eq!(pool.in_use(), DISCOVERY_STDOUT_TAIL + DISCOVERY_STDERR_TAIL);
    let mut run = HelperRun::new(&config, Some(g1), Some(g2), clock.at(0));
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
