use super::*;
use proptest::prelude::*;
use serde_json::json;

const T0_MS: u64 = 1_700_000_000_000;

/// A virtual clock: a fixed base `Instant` plus offsets.
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

fn new_call() -> CallLifecycle {
    CallLifecycle::new(&CallConfig::default(), identity(), T0_MS)
}

/// Every command, by name, so tests can try each one in each state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmd {
    Validate,
    RequestApproval,
    Authorize,
    Approve,
    Deny,
    Dispatch,
    Complete,
    Cancel,
    Fail,
    ForceKill,
    MarkUnknown,
}

const CMDS: [Cmd; 11] = [
    Cmd::Validate,
    Cmd::RequestApproval,
    Cmd::Authorize,
    Cmd::Approve,
    Cmd::Deny,
    Cmd::Dispatch,
    Cmd::Complete,
    Cmd::Cancel,
    Cmd::Fail,
    Cmd::ForceKill,
    Cmd::MarkUnknown,
];

fn run(c: &mut CallLifecycle, cmd: Cmd, at: Stamp) -> Result<(), CallError> {
    match cmd {
        Cmd::Validate => c.validate(at),
        Cmd::RequestApproval => c.request_approval(at, Duration::from_secs(30)),
        Cmd::Authorize => c.authorize(at),
        Cmd::Approve => c.approve(at),
        Cmd::Deny => c.deny(at),
        Cmd::Dispatch => c.dispatch(at),
        Cmd::Complete => c.complete(at, CallOutcome::Succeeded),
        Cmd::Cancel => c.cancel(at),
        Cmd::Fail => c.fail_before_dispatch(at, "spawn failed"),
        Cmd::ForceKill => c.force_kill(at),
        Cmd::MarkUnknown => c.mark_unknown(at),
    }
}

/// The legal-transition table, written independently of the implementation.
fn expected(from: CallState, cmd: Cmd) -> Option<CallState> {
    use CallState as S;
    match (from, cmd) {
        (S::Received, Cmd::Validate) => Some(S::Validated),
        (S::Validated, Cmd::RequestApproval) => Some(S::AwaitingApproval),
        (S::Validated, Cmd::Authorize) => Some(S::Authorized),
        (S::AwaitingApproval, Cmd::Approve) => Some(S::Authorized),
        (S::Validated | S::AwaitingApproval, Cmd::Deny) => Some(S::Denied),
        (S::Authorized, Cmd::Dispatch) => Some(S::Dispatched),
        (S::Dispatched, Cmd::Complete) => Some(S::Completed),
        (S::Received | S::Validated | S::AwaitingApproval | S::Authorized, Cmd::Cancel) => {
            Some(S::Cancelled)
        }
        (S::Dispatched, Cmd::Cancel) => Some(S::CancelledAfterDispatch),
        (S::Received | S::Validated | S::AwaitingApproval | S::Authorized, Cmd::Fail) => {
            Some(S::FailedBeforeDispatch)
        }
        (S::Dispatched, Cmd::ForceKill) => Some(S::ForceKilled),
        (S::Dispatched, Cmd::MarkUnknown) => Some(S::Unknown),
        _ => None,
    }
}

/// A call driven into `state` along a legal path (step `i` at t = i + 1 ms;
/// an approval is requested at t = 2 ms, so its deadline is t = 30 002 ms).
fn call_in(state: CallState, clock: &Clock) -> CallLifecycle {
    use CallState as S;
    let path: &[Cmd] = match state {
        S::Received => &[],
        S::Validated => &[Cmd::Validate],
        S::AwaitingApproval => &[Cmd::Validate, Cmd::RequestApproval],
        S::Authorized => &[Cmd::Validate, Cmd::Authorize],
        S::Dispatched => &[Cmd::Validate, Cmd::Authorize, Cmd::Dispatch],
        S::Completed => &[Cmd::Validate, Cmd::Authorize, Cmd::Dispatch, Cmd::Complete],
        S::Denied => &[Cmd::Validate, Cmd::Deny],
        S::FailedBeforeDispatch => &[Cmd::Fail],
        S::Cancelled => &[Cmd::Cancel],
        S::CancelledAfterDispatch => &[Cmd::Validate, Cmd::Authorize, Cmd::Dispatch, Cmd::Cancel],
        S::ForceKilled => &[Cmd::Validate, Cmd::Authorize, Cmd::Dispatch, Cmd::ForceKill],
        S::Unknown => &[
            Cmd::Validate,
            Cmd::Authorize,
            Cmd::Dispatch,
            Cmd::MarkUnknown,
        ],
    };
    let mut c = new_call();
    for (i, cmd) in path.iter().enumerate() {
        run(&mut c, *cmd, clock.at(i as u64 + 1)).expect("path is legal");
    }
    assert_eq!(c.state(), state);
    c
}

fn states(c: &CallLifecycle) -> Vec<CallState> {
    c.record()
        .events()
        .filter(|e| e.kind == CallEventKind::Transition)
        .map(|e| e.state)
        .collect()
}

#[test]
fn g12_every_legal_path_reaches_its_terminal_state() {
    use CallState as S;
    let clock = Clock::new();
    let paths: &[(&[Cmd], &[S])] = &[
        (
            &[Cmd::Validate, Cmd::Authorize, Cmd::Dispatch, Cmd::Complete],
            &[
                S::Received,
                S::Validated,
                S::Authorized,
                S::Dispatched,
                S::Completed,
            ],
        ),
        (
            &[
                Cmd::Validate,
                Cmd::RequestApproval,
                Cmd::Approve,
                Cmd::Dispatch,
                Cmd::Complete,
            ],
            &[
                S::Received,
                S::Validated,
                S::AwaitingApproval,
                S::Authorized,
                S::Dispatched,
                S::Completed,
            ],
        ),
        (
            &[Cmd::Validate, Cmd::Deny],
            &[S::Received, S::Validated, S::Denied],
        ),
        (
            &[Cmd::Validate, Cmd::RequestApproval, Cmd::Deny],
            &[S::Received, S::Validated, S::AwaitingApproval, S::Denied],
        ),
        (&[Cmd::Fail], &[S::Received, S::FailedBeforeDispatch]),
        (
            &[Cmd::Validate, Cmd::Fail],
            &[S::Received, S::Validated, S::FailedBeforeDispatch],
        ),
        (
            &[Cmd::Validate, Cmd::RequestApproval, Cmd::Fail],
            &[
                S::Received,
                S::Validated,
                S::AwaitingApproval,
                S::FailedBeforeDispatch,
            ],
        ),
        (
            &[Cmd::Validate, Cmd::Authorize, Cmd::Fail],
            &[
                S::Received,
                S::Validated,
                S::Authorized,
                S::FailedBeforeDispatch,
            ],
        ),
        (&[Cmd::Cancel], &[S::Received, S::Cancelled]),
        (
            &[Cmd::Validate, Cmd::Cancel],
            &[S::Received, S::Validated, S::Cancelled],
        ),
        (
            &[Cmd::Validate, Cmd::RequestApproval, Cmd::Cancel],
            &[S::Received, S::Validated, S::AwaitingApproval, S::Cancelled],
        ),
        (
            &[Cmd::Validate, Cmd::Authorize, Cmd::Cancel],
            &[S::Received, S::Validated, S::Authorized, S::Cancelled],
        ),
        (
            &[Cmd::Validate, Cmd::Authorize, Cmd::Dispatch, Cmd::Cancel],
            &[
                S::Received,
                S::Validated,
                S::Authorized,
                S::Dispatched,
                S::CancelledAfterDispatch,
            ],
        ),
        (
            &[Cmd::Validate, Cmd::Authorize, Cmd::Dispatch, Cmd::ForceKill],
            &[
                S::Received,
                S::Validated,
                S::Authorized,
                S::Dispatched,
                S::ForceKilled,
            ],
        ),
        (
            &[
                Cmd::Validate,
                Cmd::Authorize,
                Cmd::Dispatch,
                Cmd::MarkUnknown,
            ],
            &[
                S::Received,
                S::Validated,
                S::Authorized,
                S::Dispatched,
                S::Unknown,
            ],
        ),
    ];
    for (path, visited) in paths {
        let mut c = new_call();
        for (i, cmd) in path.iter().enumerate() {
            run(&mut c, *cmd, clock.at(i as u64 + 1)).expect("legal");
        }
        assert_eq!(states(&c), *visited, "path {path:?}");
        assert!(c.is_terminal(), "path {path:?}");
        // Event timestamps come from the caller's stamps, in order.
        let ms: Vec<u64> = c.record().events().map(|e| e.unix_ms).collect();
        let want: Vec<u64> = (0..=path.len() as u64).map(|i| T0_MS + i).collect();
        assert_eq!(ms, want);
    }
}

#[test]
fn g12_decision_follows_the_path() {
    let clock = Clock::new();
    let c = call_in(CallState::Authorized, &clock);
    assert_eq!(c.record().decision(), Decision::Allowed);
    assert_eq!(c.record().decision_reason(), Some(DecisionReason::Policy));

    let mut c = call_in(CallState::AwaitingApproval, &clock);
    c.approve(clock.at(5)).expect("legal");
    assert_eq!(c.record().decision(), Decision::Allowed);
    assert_eq!(c.record().decision_reason(), Some(DecisionReason::User));

    let mut c = call_in(CallState::AwaitingApproval, &clock);
    c.deny(clock.at(5)).expect("legal");
    assert_eq!(c.record().decision(), Decision::Denied);
    assert_eq!(c.record().decision_reason(), Some(DecisionReason::User));

    let c = call_in(CallState::Denied, &clock);
    assert_eq!(c.record().decision_reason(), Some(DecisionReason::Policy));

    let c = call_in(CallState::Cancelled, &clock);
    assert_eq!(c.record().decision(), Decision::None);
    assert_eq!(c.record().decision_reason(), None);

    let c = call_in(CallState::Completed, &clock);
    assert_eq!(c.record().outcome(), Some(CallOutcome::Succeeded));
}

#[test]
fn g12_every_illegal_transition_is_a_typed_error_and_changes_nothing() {
    let clock = Clock::new();
    let mut illegal = 0;
    for from in CallState::ALL {
        for cmd in CMDS {
            let mut c = call_in(from, &clock);
            let before = c.record().clone();
            let result = run(&mut c, cmd, clock.at(100));
            match expected(from, cmd) {
                Some(to) => {
                    assert_eq!(result, Ok(()), "{from} {cmd:?}");
                    assert_eq!(c.state(), to, "{from} {cmd:?}");
                }
                None => {
                    illegal += 1;
                    match result {
                        Err(CallError::IllegalTransition { from: f, .. }) => {
                            assert_eq!(f, from, "{cmd:?}");
                        }
                        other => panic!("{from} {cmd:?}: {other:?}"),
                    }
                    assert_eq!(*c.record(), before, "{from} {cmd:?} changed the record");
                }
            }
        }
    }
    // 7 terminal states refuse all 11 commands; the others refuse the rest.
    assert!(illegal > 7 * 11);
}

#[test]
fn g12_terminal_states_accept_no_transition() {
    let clock = Clock::new();
    for state in CallState::ALL.into_iter().filter(|s| s.is_terminal()) {
        for cmd in CMDS {
            let mut c = call_in(state, &clock);
            assert!(run(&mut c, cmd, clock.at(50)).is_err(), "{state} {cmd:?}");
            assert_eq!(c.state(), state);
        }
    }
}

#[test]
fn g12_illegal_error_names_from_and_to() {
    let clock = Clock::new();
    let mut c = call_in(CallState::Completed, &clock);
    let err = c.cancel(clock.at(9)).expect_err("terminal");
    assert_eq!(
        err,
        CallError::IllegalTransition {
            from: CallState::Completed,
            to: CallState::CancelledAfterDispatch
        }
    );
    assert_eq!(
        err.to_string(),
        "illegal call transition from completed to cancelled_after_dispatch"
    );
    let mut c = new_call();
    assert_eq!(
        c.dispatch(clock.at(1)),
        Err(CallError::IllegalTransition {
            from: CallState::Received,
            to: CallState::Dispatched
        })
    );
}

#[test]
fn g12_approval_timeout_denies_with_reason() {
    let clock = Clock::new();
    let mut c = new_call();
    c.validate(clock.at(1)).expect("legal");
    c.request_approval(clock.at(10), Duration::from_secs(30))
        .expect("legal");
    assert_eq!(c.poll_timeout(), Some(clock.at(30_010).instant));
    assert_eq!(c.record().approval_requested_unix_ms(), Some(T0_MS + 10));
    assert_eq!(c.record().approval_deadline_unix_ms(), Some(T0_MS + 30_010));
    // Spurious: one millisecond early.
    c.handle_timeout(clock.at(30_009));
    assert_eq!(c.state(), CallState::AwaitingApproval);
    c.handle_timeout(clock.at(30_010));
    assert_eq!(c.state(), CallState::Denied);
    assert_eq!(c.record().decision(), Decision::Denied);
    assert_eq!(
        c.record().decision_reason(),
        Some(DecisionReason::ApprovalTimeout)
    );
    assert_eq!(c.poll_timeout(), None);
    let last = c.record().events().last().expect("events");
    assert_eq!(last.unix_ms, T0_MS + 30_010);
    // A second timeout is spurious.
    let before = c.record().clone();
    c.handle_timeout(clock.at(90_000));
    assert_eq!(*c.record(), before);
}

#[test]
fn g12_late_approval_finds_the_call_denied() {
    let clock = Clock::new();
    let mut c = call_in(CallState::AwaitingApproval, &clock);
    // Requested at t = 2 ms with 30 s; approve at the deadline, before any
    // handle_timeout: the deadline wins.
    let err = c.approve(clock.at(30_002)).expect_err("expired");
    assert_eq!(
        err,
        CallError::IllegalTransition {
            from: CallState::Denied,
            to: CallState::Authorized
        }
    );
    assert_eq!(
        c.record().decision_reason(),
        Some(DecisionReason::ApprovalTimeout)
    );
    // One millisecond earlier, the approval counts.
    let mut c = call_in(CallState::AwaitingApproval, &clock);
    c.approve(clock.at(30_001)).expect("in time");
    assert_eq!(c.state(), CallState::Authorized);
    assert_eq!(c.poll_timeout(), None);
}

#[test]
fn g12_approval_deadline_not_reset_by_stderr() {
    let clock = Clock::new();
    let mut c = call_in(CallState::AwaitingApproval, &clock);
    let deadline = c.poll_timeout().expect("running");
    // A stderr flood, notes, an exit and stream ends, all during the approval.
    for i in 0..10_000u64 {
        c.observe_stderr(i * 4096, 16_384.min(i * 4096), i > 4);
        if i % 100 == 0 {
            c.note(T0_MS + i, "helper-diagnostic");
            c.handle_timeout(clock.at(1 + i)); // spurious
        }
        assert_eq!(c.poll_timeout(), Some(deadline));
    }
    c.observe_exit(ExitStatus::Code(0));
    c.observe_stream_end(StreamEnd::Eof);
    assert_eq!(c.poll_timeout(), Some(deadline));
    assert_eq!(c.approval_deadline(), Some(deadline));
    assert_eq!(c.state(), CallState::AwaitingApproval);
    c.handle_timeout(Stamp::new(deadline, T0_MS + 30_001));
    assert_eq!(c.state(), CallState::Denied);
    assert_eq!(
        c.record().decision_reason(),
        Some(DecisionReason::ApprovalTimeout)
    );
}

#[test]
fn g12_request_approval_with_unrepresentable_deadline_is_a_typed_error() {
    let clock = Clock::new();
    let mut c = call_in(CallState::Validated, &clock);
    let before = c.record().clone();
    assert_eq!(
        c.request_approval(clock.at(2), Duration::MAX),
        Err(CallError::DeadlineOutOfRange)
    );
    assert_eq!(*c.record(), before);
    assert_eq!(c.poll_timeout(), None);
}

#[test]
fn g12_facts_attach_after_terminal_without_changing_state() {
    let clock = Clock::new();
    let mut c = call_in(CallState::CancelledAfterDispatch, &clock);
    c.note(T0_MS + 20, "sigterm sent");
    c.observe_exit(ExitStatus::Signal(15));
    c.observe_stream_end(StreamEnd::EofAfterCancel);
    c.observe_stream_end(StreamEnd::Eof); // a better end does not hide the worse
    assert_eq!(c.state(), CallState::CancelledAfterDispatch);
    assert_eq!(c.record().exit_status(), Some(ExitStatus::Signal(15)));
    assert_eq!(c.record().stream_end(), Some(StreamEnd::EofAfterCancel));
    c.observe_stream_end(StreamEnd::AbandonedAfterDeadline);
    assert_eq!(
        c.record().stream_end(),
        Some(StreamEnd::AbandonedAfterDeadline)
    );
    let last = c.record().events().last().expect("events");
    assert_eq!(last.kind, CallEventKind::Note);
    assert_eq!(last.state, CallState::CancelledAfterDispatch);
}

#[test]
fn g12_record_json_shape_has_null_exit_status_when_unobserved() {
    let clock = Clock::new();
    let mut c = call_in(CallState::Dispatched, &clock);
    c.observe_stderr(184_320, 16_384, true);
    c.cancel(clock.at(7)).expect("legal");
    c.observe_stream_end(StreamEnd::EofAfterCancel);
    let v = serde_json::to_value(c.record()).expect("serializes");
    let ev = |n: u64, state: &str| json!({"n": n, "unix_ms": T0_MS + n, "kind": "transition", "state": state});
    assert_eq!(
        v,
        json!({
            "call_id": "c_7f2a",
            "session_id": "s_1",
            "operation": "ssh.exec",
            "target": "deploy@example.org",
            "identity_truncated": false,
            "state": "cancelled_after_dispatch",
            "decision": "allowed",
            "decision_reason": "policy",
            "outcome": null,
            "approval_requested_unix_ms": null,
            "approval_deadline_unix_ms": null,
            "events": [
                ev(0, "received"),
                ev(1, "validated"),
                ev(2, "authorized"),
                ev(3, "dispatched"),
                {"n": 4, "unix_ms": T0_MS + 7, "kind": "transition", "state": "cancelled_after_dispatch"},
            ],
            "events_dropped": 0,
            "stderr_bytes_seen": 184_320,
            "stderr_bytes_retained": 16_384,
            "stderr_truncated": true,
            "stderr_retained_part": "all",
            "stderr_head_bytes": 0,
            "stderr_tail_bytes": 0,
            "stderr_redactions": 0,
            "exit_status": null,
            "stream_end": "eof_after_cancel",
            "debug": null,
            "kind": "operation",
            "cancel_reason": null,
        })
    );
    // Once observed, the status appears; a code 0 only when observed.
    c.observe_exit(ExitStatus::Code(0));
    let v = serde_json::to_value(c.record()).expect("serializes");
    assert_eq!(v["exit_status"], json!({"code": 0}));
}

#[test]
fn g12_record_snapshot_before_dispatch_is_serializable() {
    let clock = Clock::new();
    let mut c = call_in(CallState::Authorized, &clock);
    c.dispatch(clock.at(3)).expect("legal");
    // The pre-send snapshot says "dispatched" and has no outcome.
    let snapshot = serde_json::to_value(c.record()).expect("serializes");
    assert_eq!(snapshot["state"], "dispatched");
    assert_eq!(snapshot["outcome"], serde_json::Value::Null);
    c.complete(clock.at(4), CallOutcome::RemoteFailure)
        .expect("legal");
    let done = serde_json::to_value(c.record()).expect("serializes");
    assert_eq!(done["state"], "completed");
    assert_eq!(done["outcome"], "remote_failure");
    assert_eq!(snapshot["state"], "dispatched"); // the snapshot is independent
}

#[test]
fn g12_events_past_limit_keep_first_and_last_and_count_dropped() {
    let mut config = CallConfig::default();
    config.max_events(4);
    let mut c = CallLifecycle::new(&config, identity(), T0_MS);
    for i in 1..=10u64 {
        c.note(T0_MS + i, &format!("note {i}"));
    }
    // 11 events: received + 10 notes; keep 2 first and 2 last.
    let kept: Vec<u64> = c.record().events().map(|e| e.n).collect();
    assert_eq!(kept, vec![0, 1, 9, 10]);
    assert_eq!(c.record().events_dropped(), 7);
    let v = serde_json::to_value(c.record()).expect("serializes");
    assert_eq!(v["events"].as_array().map(Vec::len), Some(4));
    assert_eq!(v["events_dropped"], 7);
    assert_eq!(v["events"][3]["detail"], "note 10");
}

#[test]
fn g12_event_limit_has_a_floor_of_two() {
    let mut config = CallConfig::default();
    config.max_events(0);
    assert_eq!(config.get_max_events(), MIN_MAX_EVENTS);
    let mut c = CallLifecycle::new(&config, identity(), T0_MS);
    c.note(T0_MS + 1, "a");
    c.note(T0_MS + 2, "b");
    let kept: Vec<u64> = c.record().events().map(|e| e.n).collect();
    assert_eq!(kept, vec![0, 2]);
    assert_eq!(c.record().events_dropped(), 1);
}

#[test]
fn g12_long_text_is_cut_at_a_char_boundary_and_marked() {
    let mut config = CallConfig::default();
    config.max_text_bytes(10);
    let long = "ééééééééé"; // 18 bytes
    let c = CallLifecycle::new(
        &config,
        CallIdentity {
            target: long,
            ..identity()
        },
        T0_MS,
    );
    assert_eq!(c.record().target(), "ééééé");
    assert!(c.record().identity_truncated());
    let short = CallIdentity {
        call_id: "c",
        session_id: "s",
        operation: "op",
        target: "t",
    };
    let mut c = CallLifecycle::new(&config, short, T0_MS);
    c.fail_before_dispatch(Stamp::new(Instant::now(), T0_MS), long)
        .expect("legal");
    let detail = c
        .record()
        .events()
        .last()
        .and_then(|e| e.detail.clone())
        .expect("detail");
    assert_eq!(detail, "ééé…");
    assert!(detail.len() <= 10);
    assert!(!c.record().identity_truncated());
}

fn arb_cmd() -> impl Strategy<Value = Cmd> {
    (0..CMDS.len()).prop_map(|i| CMDS[i])
}

#[test]
fn cancel_reason_and_kind_are_recorded_only_when_stated() {
    let clock = Clock::new();
    let mut c = call_in(CallState::Dispatched, &clock);
    assert_eq!(c.record().kind(), CallKind::Operation);
    assert_eq!(c.record().cancel_reason(), None);
    c.mark_kind(CallKind::Discovery);
    c.cancel_because(clock.at(5), CancelReason::MaxDuration)
        .expect("a dispatched call cancels");
    assert_eq!(c.state(), CallState::CancelledAfterDispatch);
    let v = serde_json::to_value(c.record()).expect("serializes");
    assert_eq!(v["kind"], "discovery");
    assert_eq!(v["cancel_reason"], "max_duration");

    // An illegal cancel records no reason.
    let mut done = call_in(CallState::Dispatched, &clock);
    done.complete(clock.at(5), CallOutcome::Succeeded)
        .expect("legal");
    assert!(done
        .cancel_because(clock.at(6), CancelReason::Caller)
        .is_err());
    assert_eq!(done.record().cancel_reason(), None);
    let v = serde_json::to_value(done.record()).expect("serializes");
    assert_eq!(v["kind"], "operation");
    assert_eq!(v["cancel_reason"], serde_json::Value::Null);
}

proptest! {
    /// Random command sequences match the reference table, and an error
    /// never changes the record.
    #[test]
    fn g12_random_commands_follow_the_table(cmds in proptest::collection::vec(arb_cmd(), 0..20)) {
        let clock = Clock::new();
        let mut c = new_call();
        for (i, cmd) in cmds.into_iter().enumerate() {
            let from = c.state();
            let before = c.record().clone();
            // Stamps stay far below the 30 s approval deadline.
            let result = run(&mut c, cmd, clock.at(i as u64 + 1));
            match expected(from, cmd) {
                Some(to) => {
                    prop_assert!(result.is_ok());
                    prop_assert_eq!(c.state(), to);
                }
                None => {
                    prop_assert!(result.is_err());
                    prop_assert_eq!(c.record(), &before);
                }
            }
        }
    }

    /// Whatever facts arrive, and whatever spurious timeouts, the deadline
    /// stays where `request_approval` put it.
    #[test]
    fn g12_approval_deadline_fixed_under_any_facts(
        facts in proptest::collection::vec((0u8..5, any::<u64>(), 0u64..29_000), 0..200)
    ) {
        let clock = Clock::new();
        let mut c = call_in(CallState::AwaitingApproval, &clock);
        let deadline = c.poll_timeout().expect("running");
        for (kind, value, ms) in facts {
            match kind {
                0 => c.observe_stderr(value, value / 2, value % 2 == 0),
                1 => c.note(value, "x"),
                2 => c.observe_exit(ExitStatus::Code(value as i32)),
                3 => c.observe_stream_end(StreamEnd::Eof),
                _ => c.handle_timeout(clock.at(ms)),
            }
            prop_assert_eq!(c.poll_timeout(), Some(deadline));
            prop_assert_eq!(c.state(), CallState::AwaitingApproval);
        }
    }
}
