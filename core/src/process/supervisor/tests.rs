use super::*;

const S: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

fn drain(sup: &mut ProcessSupervisor) -> Vec<ProcessAction> {
    // Bounded: the queue never holds more than ACTION_QUEUE_CAPACITY.
    let mut out = Vec::new();
    for _ in 0..=ACTION_QUEUE_CAPACITY {
        match sup.poll_action() {
            Some(action) => out.push(action),
            None => return out,
        }
    }
    panic!("more actions than the queue capacity: {out:?}");
}

fn spawned(t0: Instant, pipes: ChildPipes) -> ProcessSupervisor {
    let mut sup = ProcessSupervisor::new(SupervisorConfig::default());
    sup.handle_spawned(t0, pipes);
    assert_eq!(drain(&mut sup), []);
    assert_eq!(sup.poll_timeout(), None);
    sup
}

fn finished(actions: &[ProcessAction]) -> ProcessOutcome {
    match actions.last() {
        Some(ProcessAction::Finished(outcome)) => outcome.clone(),
        other => panic!("expected Finished last, got {other:?}"),
    }
}

const TERM: ProcessAction = ProcessAction::SignalGroup(Signal::Term);
const KILL: ProcessAction = ProcessAction::SignalGroup(Signal::Kill);

#[test]
fn g11_config_defaults() {
    let c = SupervisorConfig::default();
    assert_eq!(c.get_stdin_close_grace(), 2 * S);
    assert_eq!(c.get_term_grace(), 2 * S);
    assert_eq!(c.get_reader_drain_deadline(), S);
    let c = *SupervisorConfig::default()
        .stdin_close_grace(3 * S)
        .term_grace(4 * S)
        .reader_drain_deadline(5 * S);
    assert_eq!(
        (
            c.get_stdin_close_grace(),
            c.get_term_grace(),
            c.get_reader_drain_deadline()
        ),
        (3 * S, 4 * S, 5 * S)
    );
}

#[test]
fn g11_exits_on_stdin_close() {
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.shutdown(t0 + S);
    assert_eq!(drain(&mut sup), [ProcessAction::CloseStdin]);
    assert_eq!(sup.poll_timeout(), Some(t0 + 3 * S));
    sup.handle_stdout_eof(t0 + S + 400 * MS);
    sup.handle_exited(t0 + S + 500 * MS, ExitStatus::Code(0));
    assert_eq!(drain(&mut sup), [], "stderr still open: not finished");
    sup.handle_stderr_eof(t0 + S + 600 * MS);
    let o = finished(&drain(&mut sup));
    assert_eq!(o.exit_status, Some(ExitStatus::Code(0)));
    assert_eq!(o.ended_by, EndedBy::ExitedAfterStdinClose);
    assert_eq!(o.stdout, Some(StreamEnd::EofAfterShutdown));
    assert_eq!(o.stderr, Some(StreamEnd::EofAfterShutdown));
    // G12: no cancel was sent, so no cancel fact is recorded.
    assert_eq!(o.cancel_to_exit, None);
    assert_eq!(o.shutdown_to_exit, Some(500 * MS));
    assert_eq!(o.shutdown_requested_at, Some(S));
    assert_eq!(o.stdin_closed_at, Some(S));
    assert_eq!((o.term_sent_at, o.kill_sent_at), (None, None));
    assert_eq!(o.exited_at, Some(S + 500 * MS));
    assert_eq!(o.finished_at, S + 600 * MS);
    assert_eq!(sup.poll_timeout(), None);
    assert!(sup.is_finished());
    assert_eq!(sup.outcome(), Some(&o));
}

#[test]
fn g11_term_after_stdin_close_ignored() {
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.shutdown(t0);
    assert_eq!(drain(&mut sup), [ProcessAction::CloseStdin]);
    sup.handle_timeout(t0 + 2 * S);
    assert_eq!(drain(&mut sup), [TERM]);
    assert_eq!(sup.poll_timeout(), Some(t0 + 4 * S));
    sup.handle_exited(t0 + 2 * S + 100 * MS, ExitStatus::Signal(15));
    sup.handle_stdout_eof(t0 + 2 * S + 110 * MS);
    sup.handle_stderr_eof(t0 + 2 * S + 120 * MS);
    let o = finished(&drain(&mut sup));
    assert_eq!(o.ended_by, EndedBy::ExitedAfterTerm);
    assert_eq!(o.exit_status, Some(ExitStatus::Signal(15)));
    assert_eq!(o.term_sent_at, Some(2 * S));
    assert_eq!(o.kill_sent_at, None);
    assert_eq!(o.cancel_to_exit, None);
    assert_eq!(o.shutdown_to_exit, Some(2 * S + 100 * MS));
}

#[test]
fn g11_kill_after_term_ignored() {
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.shutdown(t0);
    assert_eq!(drain(&mut sup), [ProcessAction::CloseStdin]);
    sup.handle_timeout(t0 + 2 * S);
    assert_eq!(drain(&mut sup), [TERM]);
    sup.handle_timeout(t0 + 4 * S);
    assert_eq!(drain(&mut sup), [KILL]);
    assert_eq!(
        sup.poll_timeout(),
        Some(t0 + 5 * S),
        "drain deadline after KILL"
    );
    sup.handle_stderr_eof(t0 + 4 * S + 5 * MS);
    sup.handle_stdout_eof(t0 + 4 * S + 6 * MS);
    assert_eq!(drain(&mut sup), [], "exit not observed yet");
    sup.handle_exited(t0 + 4 * S + 10 * MS, ExitStatus::Signal(9));
    let o = finished(&drain(&mut sup));
    assert_eq!(o.ended_by, EndedBy::ExitedAfterKill);
    assert_eq!(o.exit_status, Some(ExitStatus::Signal(9)));
    assert_eq!(o.term_sent_at, Some(2 * S));
    assert_eq!(o.kill_sent_at, Some(4 * S));
    assert!(!o.group_killed_after_exit());
    assert_eq!(o.cancel_to_exit, None);
    assert_eq!(o.shutdown_to_exit, Some(4 * S + 10 * MS));
}

#[test]
fn g11_exit_by_itself_without_shutdown() {
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.handle_stdout_eof(t0 + S);
    sup.handle_exited(t0 + S, ExitStatus::Code(3));
    assert_eq!(
        sup.poll_timeout(),
        Some(t0 + 2 * S),
        "stderr gets the drain deadline"
    );
    sup.handle_stderr_eof(t0 + S + MS);
    let actions = drain(&mut sup);
    assert_eq!(actions.len(), 1, "no signal, no stdin close: {actions:?}");
    let o = finished(&actions);
    assert_eq!(o.ended_by, EndedBy::ExitedByItself);
    assert_eq!(o.exit_status, Some(ExitStatus::Code(3)));
    assert_eq!(
        (o.stdout, o.stderr),
        (Some(StreamEnd::Eof), Some(StreamEnd::Eof))
    );
    assert_eq!(o.cancel_to_exit, None);
    assert_eq!(
        (o.stdin_closed_at, o.term_sent_at, o.kill_sent_at),
        (None, None, None)
    );
    assert_eq!(sup.poll_timeout(), None);
}

#[test]
fn g11_eofs_before_exit_finish_on_exit() {
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.handle_stderr_eof(t0 + S);
    sup.handle_stdout_eof(t0 + S);
    assert_eq!(drain(&mut sup), []);
    assert_eq!(sup.poll_timeout(), None, "a running child has no deadline");
    sup.handle_exited(t0 + 2 * S, ExitStatus::Code(1));
    let o = finished(&drain(&mut sup));
    assert_eq!(o.exit_status, Some(ExitStatus::Code(1)));
    assert_eq!(o.finished_at, 2 * S);
}

#[test]
fn g11_wrapper_exits_grandchild_holds_stderr_group_killed() {
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.shutdown(t0);
    assert_eq!(drain(&mut sup), [ProcessAction::CloseStdin]);
    // The wrapper exits; its grandchild keeps writing stderr.
    sup.handle_stdout_eof(t0 + 500 * MS);
    sup.handle_exited(t0 + 500 * MS, ExitStatus::Code(0));
    assert_eq!(drain(&mut sup), [], "no signal to a leader that exited");
    assert_eq!(
        sup.poll_timeout(),
        Some(t0 + 1500 * MS),
        "drain deadline, not TERM"
    );
    sup.handle_timeout(t0 + 1500 * MS);
    assert_eq!(
        drain(&mut sup),
        [KILL],
        "the group kill ends the grandchild"
    );
    assert_eq!(sup.poll_timeout(), Some(t0 + 2500 * MS));
    sup.handle_stderr_eof(t0 + 1510 * MS);
    let o = finished(&drain(&mut sup));
    assert_eq!(o.exit_status, Some(ExitStatus::Code(0)));
    assert_eq!(o.ended_by, EndedBy::ExitedAfterStdinClose);
    assert_eq!(o.stderr, Some(StreamEnd::EofAfterShutdown));
    assert_eq!(o.term_sent_at, None);
    assert_eq!(o.kill_sent_at, Some(1500 * MS));
    assert!(o.group_killed_after_exit());
}

#[test]
fn g11_escaped_grandchild_abandoned_after_deadline() {
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.shutdown(t0);
    let _ = drain(&mut sup);
    sup.handle_stdout_eof(t0 + 500 * MS);
    sup.handle_exited(t0 + 500 * MS, ExitStatus::Code(0));
    sup.handle_timeout(t0 + 1500 * MS);
    assert_eq!(drain(&mut sup), [KILL]);
    // The grandchild escaped with setsid: the KILL does not reach it.
    sup.handle_timeout(t0 + 2499 * MS);
    assert_eq!(drain(&mut sup), []);
    sup.handle_timeout(t0 + 2500 * MS);
    let actions = drain(&mut sup);
    assert_eq!(actions[0], ProcessAction::AbandonReaders);
    let o = finished(&actions);
    assert_eq!(actions.len(), 2);
    assert_eq!(o.exit_status, Some(ExitStatus::Code(0)));
    assert_eq!(o.stdout, Some(StreamEnd::EofAfterShutdown));
    assert_eq!(o.stderr, Some(StreamEnd::AbandonedAfterDeadline));
    assert_eq!(o.finished_at, 2500 * MS);
    assert_eq!(sup.poll_timeout(), None, "no hang");
    // The late EOF is ignored.
    sup.handle_stderr_eof(t0 + 3 * S);
    assert_eq!(drain(&mut sup), []);
    assert_eq!(sup.ignored_inputs(), 1);
}

#[test]
fn g11_exit_by_itself_grandchild_holds_pipe_group_killed() {
    // Without any request: the group is still killed once the drain deadline passes.
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::OUTPUTS);
    sup.handle_stderr_eof(t0 + S);
    sup.handle_exited(t0 + S, ExitStatus::Code(0));
    sup.handle_timeout(t0 + 2 * S);
    assert_eq!(drain(&mut sup), [KILL]);
    sup.handle_stdout_eof(t0 + 2 * S + MS);
    let o = finished(&drain(&mut sup));
    assert_eq!(o.ended_by, EndedBy::ExitedByItself);
    assert_eq!(o.stdout, Some(StreamEnd::Eof), "no cancel was requested");
    assert!(o.group_killed_after_exit());
    assert_eq!(o.stdin_closed_at, None);
}

#[test]
fn g11_worst_case_finish_bound_after_shutdown() {
    // The leader exits just before KILL is due and a setsid grandchild
    // holds stderr: the longest path, stdin grace + TERM grace + 2 drains.
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.shutdown(t0);
    sup.handle_timeout(t0 + 2 * S);
    assert_eq!(drain(&mut sup), [ProcessAction::CloseStdin, TERM]);
    sup.handle_stdout_eof(t0 + 4 * S - MS);
    sup.handle_exited(t0 + 4 * S - MS, ExitStatus::Signal(15));
    sup.handle_timeout(t0 + 4 * S);
    assert_eq!(drain(&mut sup), [], "no KILL for an exited leader");
    sup.handle_timeout(t0 + 5 * S - MS);
    assert_eq!(drain(&mut sup), [KILL], "the group kill");
    sup.handle_timeout(t0 + 6 * S - MS);
    let o = finished(&drain(&mut sup));
    assert_eq!(o.ended_by, EndedBy::ExitedAfterTerm);
    assert_eq!(o.stderr, Some(StreamEnd::AbandonedAfterDeadline));
    assert!(o.finished_at <= 2 * S + 2 * S + 2 * S);
}

#[test]
fn g11_cancel_while_child_ignores_term_kills() {
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.cancel(t0 + S);
    assert_eq!(
        drain(&mut sup),
        [ProcessAction::CloseStdin, TERM],
        "no stdin grace"
    );
    assert_eq!(sup.poll_timeout(), Some(t0 + 3 * S));
    sup.handle_timeout(t0 + 3 * S);
    assert_eq!(drain(&mut sup), [KILL]);
    sup.handle_exited(t0 + 3 * S + MS, ExitStatus::Signal(9));
    sup.handle_stdout_eof(t0 + 3 * S + MS);
    sup.handle_stderr_eof(t0 + 3 * S + MS);
    let o = finished(&drain(&mut sup));
    assert_eq!(o.ended_by, EndedBy::ExitedAfterKill);
    assert_eq!(o.exit_status, Some(ExitStatus::Signal(9)));
    assert_eq!(o.cancel_requested_at, Some(S));
    assert_eq!(o.shutdown_requested_at, None);
    assert_eq!(o.cancel_to_exit, Some(2 * S + MS));
    assert_eq!(o.stdout, Some(StreamEnd::EofAfterCancel));
}

#[test]
fn g11_cancel_during_stdin_grace_terms_at_once() {
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.shutdown(t0);
    assert_eq!(drain(&mut sup), [ProcessAction::CloseStdin]);
    sup.cancel(t0 + 500 * MS);
    assert_eq!(drain(&mut sup), [TERM], "stdin already closed: not again");
    assert_eq!(sup.poll_timeout(), Some(t0 + 2500 * MS));
    sup.shutdown(t0 + 600 * MS);
    sup.cancel(t0 + 700 * MS);
    assert_eq!(drain(&mut sup), [], "repeated commands are idempotent");
    assert_eq!(sup.ignored_inputs(), 0, "and not counted");
    sup.handle_exited(t0 + S, ExitStatus::Code(0));
    sup.handle_stdout_eof(t0 + S);
    sup.handle_stderr_eof(t0 + S);
    let o = finished(&drain(&mut sup));
    assert_eq!(o.ended_by, EndedBy::ExitedAfterTerm);
    assert_eq!(o.cancel_to_exit, Some(500 * MS), "from the cancel");
    assert_eq!(o.shutdown_to_exit, Some(S), "from the shutdown");
    assert_eq!(o.cancel_requested_at, Some(500 * MS));
}

#[test]
fn g11_no_stdin_pipe_shutdown_terms_at_once() {
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::OUTPUTS);
    sup.shutdown(t0);
    assert_eq!(drain(&mut sup), [TERM]);
    assert_eq!(sup.poll_timeout(), Some(t0 + 2 * S));
}

#[test]
fn g11_cancel_after_exit_with_open_stream_kills_group() {
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.handle_stdout_eof(t0);
    sup.handle_exited(t0 + S, ExitStatus::Code(0));
    sup.cancel(t0 + S + 100 * MS);
    assert_eq!(
        drain(&mut sup),
        [ProcessAction::CloseStdin, KILL],
        "never TERM after exit"
    );
    assert_eq!(sup.poll_timeout(), Some(t0 + 2 * S + 100 * MS));
    sup.handle_timeout(t0 + 2 * S + 100 * MS);
    let actions = drain(&mut sup);
    assert_eq!(actions[0], ProcessAction::AbandonReaders);
    let o = finished(&actions);
    assert_eq!(o.cancel_to_exit, None, "the exit came before the cancel");
    assert_eq!(o.ended_by, EndedBy::ExitedByItself);
}

#[test]
fn g11_no_signal_after_exit_when_pipes_closed() {
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.shutdown(t0);
    let _ = drain(&mut sup);
    sup.handle_stdout_eof(t0 + MS);
    sup.handle_stderr_eof(t0 + MS);
    sup.handle_exited(t0 + 2 * MS, ExitStatus::Code(0));
    let actions = drain(&mut sup);
    assert_eq!(actions.len(), 1);
    assert_eq!(sup.poll_timeout(), None);
    for secs in 1..10 {
        sup.handle_timeout(t0 + secs * S);
    }
    assert_eq!(drain(&mut sup), []);
}

#[test]
fn g11_exit_after_kill_observed_as_signal_9() {
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::NONE);
    sup.cancel(t0);
    assert_eq!(drain(&mut sup), [TERM], "no stdin pipe to close");
    sup.handle_timeout(t0 + 2 * S);
    assert_eq!(drain(&mut sup), [KILL]);
    sup.handle_exited(t0 + 2 * S + MS, ExitStatus::Signal(9));
    let o = finished(&drain(&mut sup));
    assert_eq!(o.exit_status, Some(ExitStatus::Signal(9)));
    assert_eq!(o.ended_by, EndedBy::ExitedAfterKill);
    assert_eq!((o.stdout, o.stderr), (None, None), "unwatched streams");
}

#[test]
fn g11_never_exits_after_kill_finishes_without_status() {
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.cancel(t0);
    let _ = drain(&mut sup);
    sup.handle_timeout(t0 + 2 * S);
    assert_eq!(drain(&mut sup), [KILL]);
    sup.handle_timeout(t0 + 3 * S);
    let actions = drain(&mut sup);
    assert_eq!(actions[0], ProcessAction::AbandonReaders);
    let o = finished(&actions);
    assert_eq!(o.exit_status, None, "never an invented status");
    assert_eq!(o.ended_by, EndedBy::ExitNotObserved);
    assert_eq!(o.stdout, Some(StreamEnd::AbandonedAfterDeadline));
    assert_eq!(o.stderr, Some(StreamEnd::AbandonedAfterDeadline));
    assert_eq!(o.cancel_to_exit, None);
    assert_eq!(o.finished_at, 3 * S);
    assert_eq!(sup.poll_timeout(), None);
    // A late exit does not change the recorded outcome.
    sup.handle_exited(t0 + 4 * S, ExitStatus::Signal(9));
    assert_eq!(drain(&mut sup), []);
    assert_eq!(sup.outcome(), Some(&o));
    let json = serde_json::to_value(&o).expect("outcome serializes");
    assert_eq!(json["exit_status"], serde_json::Value::Null);
    assert_eq!(json["ended_by"], "exit_not_observed");
}

#[test]
fn g11_never_exits_after_kill_pipes_closed_no_abandon() {
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.handle_stdout_eof(t0);
    sup.handle_stderr_eof(t0);
    sup.cancel(t0);
    let _ = drain(&mut sup);
    sup.handle_timeout(t0 + 2 * S);
    assert_eq!(drain(&mut sup), [KILL]);
    sup.handle_timeout(t0 + 3 * S);
    let actions = drain(&mut sup);
    assert_eq!(actions.len(), 1, "nothing to abandon: {actions:?}");
    let o = finished(&actions);
    assert_eq!(o.ended_by, EndedBy::ExitNotObserved);
    assert_eq!(o.stdout, Some(StreamEnd::Eof), "EOF came before the cancel");
}

#[test]
fn g11_spurious_timeouts_do_nothing() {
    let t0 = Instant::now();
    let mut sup = ProcessSupervisor::new(SupervisorConfig::default());
    sup.handle_timeout(t0);
    sup.handle_spawned(t0, ChildPipes::ALL);
    sup.handle_timeout(t0 + 100 * S);
    assert_eq!(drain(&mut sup), [], "no deadline while running");
    sup.shutdown(t0 + 100 * S);
    assert_eq!(drain(&mut sup), [ProcessAction::CloseStdin]);
    let due = t0 + 102 * S;
    for early in [100 * S, 101 * S, 102 * S - MS] {
        sup.handle_timeout(t0 + early);
        assert_eq!(drain(&mut sup), []);
        assert_eq!(sup.poll_timeout(), Some(due));
    }
    sup.handle_timeout(due);
    assert_eq!(drain(&mut sup), [TERM]);
    sup.handle_timeout(due);
    assert_eq!(drain(&mut sup), [], "the same instant twice");
    assert_eq!(sup.ignored_inputs(), 0, "timeouts are never bad input");
}

#[test]
fn g11_duplicate_and_out_of_order_inputs_ignored() {
    let t0 = Instant::now();
    let mut sup = ProcessSupervisor::new(SupervisorConfig::default());
    sup.handle_stdout_eof(t0);
    sup.handle_stderr_eof(t0);
    sup.handle_exited(t0, ExitStatus::Code(0));
    sup.shutdown(t0);
    sup.cancel(t0);
    assert_eq!(drain(&mut sup), []);
    assert_eq!(sup.ignored_inputs(), 5);
    assert!(!sup.is_spawned());

    sup.handle_spawned(
        t0,
        ChildPipes {
            stdin: true,
            stdout: true,
            stderr: false,
        },
    );
    sup.handle_spawned(t0 + S, ChildPipes::NONE);
    sup.handle_stderr_eof(t0 + S); // not a pipe
    sup.handle_stdout_eof(t0 + S);
    sup.handle_stdout_eof(t0 + S); // twice
    assert_eq!(sup.ignored_inputs(), 8);
    sup.handle_exited(t0 + 2 * S, ExitStatus::Code(7));
    let o = finished(&drain(&mut sup));
    assert_eq!(o.exit_status, Some(ExitStatus::Code(7)));
    assert_eq!((o.stdout, o.stderr), (Some(StreamEnd::Eof), None));
    sup.handle_exited(t0 + 3 * S, ExitStatus::Code(0));
    sup.handle_stdout_eof(t0 + 3 * S);
    sup.handle_spawned(t0 + 3 * S, ChildPipes::ALL);
    sup.shutdown(t0 + 3 * S);
    sup.cancel(t0 + 3 * S);
    sup.handle_timeout(t0 + 99 * S);
    assert_eq!(drain(&mut sup), [], "nothing after Finished");
    assert_eq!(sup.ignored_inputs(), 11);
    assert_eq!(
        sup.exit_status(),
        Some(ExitStatus::Code(7)),
        "first status kept"
    );
}

#[test]
fn g11_exit_twice_keeps_first_status() {
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.handle_exited(t0 + S, ExitStatus::Code(2));
    sup.handle_exited(t0 + S, ExitStatus::Code(0));
    assert_eq!(sup.ignored_inputs(), 1);
    assert_eq!(sup.exit_status(), Some(ExitStatus::Code(2)));
    assert_eq!(
        sup.poll_timeout(),
        Some(t0 + 2 * S),
        "the second exit moved nothing"
    );
}

#[test]
fn g11_time_going_backwards_is_clamped() {
    let t0 = Instant::now();
    let t1 = t0 + 10 * S;
    let mut sup = spawned(t1, ChildPipes::NONE);
    sup.shutdown(t0);
    assert_eq!(drain(&mut sup), [TERM]);
    assert_eq!(
        sup.poll_timeout(),
        Some(t1 + 2 * S),
        "measured from the latest time"
    );
    sup.handle_exited(t0, ExitStatus::Code(0));
    let o = finished(&drain(&mut sup));
    assert_eq!(o.exited_at, Some(Duration::ZERO));
    assert_eq!(o.shutdown_to_exit, Some(Duration::ZERO));
}

#[test]
fn g11_zero_graces_escalate_in_one_timeout() {
    let t0 = Instant::now();
    let config = *SupervisorConfig::default()
        .stdin_close_grace(Duration::ZERO)
        .term_grace(Duration::ZERO)
        .reader_drain_deadline(Duration::ZERO);
    let mut sup = ProcessSupervisor::new(config);
    sup.handle_spawned(t0, ChildPipes::ALL);
    sup.shutdown(t0);
    assert_eq!(drain(&mut sup), [ProcessAction::CloseStdin]);
    assert_eq!(sup.poll_timeout(), Some(t0));
    sup.handle_timeout(t0);
    let actions = drain(&mut sup);
    assert_eq!(actions[..3], [TERM, KILL, ProcessAction::AbandonReaders]);
    assert_eq!(finished(&actions).ended_by, EndedBy::ExitNotObserved);
    assert_eq!(sup.poll_timeout(), None);
}

#[test]
fn g11_overflowing_grace_means_never() {
    let t0 = Instant::now();
    let config = *SupervisorConfig::default().stdin_close_grace(Duration::MAX);
    let mut sup = ProcessSupervisor::new(config);
    sup.handle_spawned(t0, ChildPipes::ALL);
    sup.shutdown(t0);
    assert_eq!(drain(&mut sup), [ProcessAction::CloseStdin]);
    assert_eq!(sup.poll_timeout(), None);
    sup.cancel(t0 + S);
    assert_eq!(drain(&mut sup), [TERM], "a cancel still escalates");
}

#[test]
fn g11_actions_wait_in_the_queue_unpolled() {
    // An adapter that never polls loses nothing and the queue stays within its capacity.
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.forward(t0, Signal::Interrupt);
    sup.handle_timeout(t0 + 2 * S);
    sup.handle_timeout(t0 + 4 * S);
    sup.handle_timeout(t0 + 5 * S);
    let actions = drain(&mut sup);
    assert_eq!(
        actions[..5],
        [
            INT,
            ProcessAction::CloseStdin,
            TERM,
            KILL,
            ProcessAction::AbandonReaders
        ]
    );
    assert_eq!(actions.len(), ACTION_QUEUE_CAPACITY);
}

#[test]
fn g11_outcome_serializes_with_stable_names() {
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::OUTPUTS);
    sup.handle_exited(t0 + S, ExitStatus::Signal(9));
    sup.handle_stdout_eof(t0 + S);
    sup.handle_stderr_eof(t0 + S);
    let o = finished(&drain(&mut sup));
    let json = serde_json::to_value(&o).expect("outcome serializes");
    assert_eq!(json["exit_status"], serde_json::json!({"signal": 9}));
    // A KILL nobody here sent: a crash (or a kill from elsewhere).
    assert_eq!(json["ended_by"], "crashed");
    assert_eq!(json["stdout"], "eof");
    let back: ProcessOutcome = serde_json::from_value(json).expect("round trip");
    assert_eq!(back, o);
}

#[test]
fn g12_a_crash_is_recorded_as_a_crash_with_its_signal() {
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.shutdown(t0 + S);
    drain(&mut sup);
    // SIGABRT during the stdin grace: not ours, whatever step was taken.
    sup.handle_exited(t0 + S + 5 * MS, ExitStatus::Signal(6));
    sup.handle_stdout_eof(t0 + S + 5 * MS);
    sup.handle_stderr_eof(t0 + S + 5 * MS);
    let o = finished(&drain(&mut sup));
    assert_eq!(o.ended_by, EndedBy::Crashed);
    assert_eq!(o.exit_status, Some(ExitStatus::Signal(6)));
    assert_eq!((o.cancel_to_exit, o.cancel_requested_at), (None, None));
}

#[test]
fn g12_stdout_closed_before_our_first_step_is_an_exit_of_its_own() {
    // The host's shutdown follows the server's stdout EOF at once (the
    // same instant): the exit observed after it is still the server's own.
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.handle_stdout_eof(t0 + S);
    sup.shutdown(t0 + S);
    drain(&mut sup);
    sup.handle_exited(t0 + S + MS, ExitStatus::Code(1));
    sup.handle_stderr_eof(t0 + S + MS);
    let o = finished(&drain(&mut sup));
    assert_eq!(o.ended_by, EndedBy::ExitedByItself);
    assert_eq!(o.exit_status, Some(ExitStatus::Code(1)));
    assert_eq!(o.stdout, Some(StreamEnd::Eof));
    assert_eq!(o.stderr, Some(StreamEnd::EofAfterShutdown));
    assert_eq!(o.cancel_to_exit, None, "no cancel was sent");
    // Stdout still open at the close: the exit answered it.
    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.shutdown(t0 + S);
    drain(&mut sup);
    sup.handle_stdout_eof(t0 + S + MS);
    sup.handle_exited(t0 + S + MS, ExitStatus::Code(0));
    sup.handle_stderr_eof(t0 + S + MS);
    let o = finished(&drain(&mut sup));
    assert_eq!(o.ended_by, EndedBy::ExitedAfterStdinClose);
}

#[cfg(feature = "fuzzing")]
#[test]
fn g11_fuzz_supervisor_random_inputs() {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        // xorshift64
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    crate::fuzzing::fuzz_supervisor(&[]);
    for _ in 0..400 {
        let len = (next() % 256) as usize;
        let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        crate::fuzzing::fuzz_supervisor(&data);
    }
}

#[test]
fn g12_process_outcome_times_are_milliseconds_and_read_back() {
    let outcome = ProcessOutcome {
        exit_status: Some(ExitStatus::Code(0)),
        ended_by: EndedBy::ExitedAfterTerm,
        stdout: Some(StreamEnd::Eof),
        stderr: None,
        cancel_to_exit: Some(Duration::new(2, 6_401_839)),
        shutdown_to_exit: None,
        shutdown_requested_at: None,
        cancel_requested_at: Some(Duration::from_millis(10)),
        stdin_closed_at: None,
        forwarded_signal: None,
        forwarded_at: None,
        term_sent_at: Some(Duration::from_millis(10)),
        kill_sent_at: None,
        exited_at: Some(Duration::from_micros(2_016_401)),
        finished_at: Duration::from_micros(2_016_500),
    };
    let json = serde_json::to_value(&outcome).expect("serializable");
    assert_eq!(json["cancel_to_exit_ms"], 2006.401);
    assert_eq!(json["term_sent_at_ms"], 10.0);
    assert_eq!(json["finished_at_ms"], 2016.5);
    assert_eq!(json["kill_sent_at_ms"], serde_json::Value::Null);
    assert!(
        !json.to_string().contains("secs") && !json.to_string().contains("nanos"),
        "{json}"
    );
    let back: ProcessOutcome = serde_json::from_value(json).expect("readable");
    assert_eq!(back.cancel_to_exit, Some(Duration::from_micros(2_006_401)));
    assert_eq!(back.finished_at, outcome.finished_at);
    assert_eq!(back.exited_at, outcome.exited_at);
}

const INT: ProcessAction = ProcessAction::SignalGroup(Signal::Interrupt);

/// F1: a signal the application got is passed on at once, before the
/// stdin close (the server meets the signal first, as it would directly); without another, the ladder goes on by the deadlines.
#[test]
fn f1_a_forwarded_signal_goes_at_once_then_the_ladder_by_deadlines() {
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.forward(t0 + S, Signal::Interrupt);
    assert_eq!(drain(&mut sup), [INT, ProcessAction::CloseStdin]);
    assert_eq!(
        sup.poll_timeout(),
        Some(t0 + 3 * S),
        "SIGTERM after the stdin grace"
    );
    sup.handle_timeout(t0 + 3 * S);
    assert_eq!(drain(&mut sup), [TERM]);
    sup.handle_timeout(t0 + 5 * S);
    assert_eq!(drain(&mut sup), [KILL]);
    sup.handle_exited(t0 + 5 * S + MS, ExitStatus::Signal(9));
    sup.handle_stdout_eof(t0 + 5 * S + MS);
    sup.handle_stderr_eof(t0 + 5 * S + MS);
    let outcome = finished(&drain(&mut sup));
    assert_eq!(outcome.ended_by, EndedBy::ExitedAfterKill);
    assert_eq!(outcome.forwarded_signal, Some(Signal::Interrupt));
    assert_eq!(outcome.forwarded_at, Some(S));
}

/// F1: each further signal climbs a rung at once; nothing is sent twice.
#[test]
fn f1_each_further_signal_climbs_at_once() {
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.forward(t0, Signal::Hangup);
    assert_eq!(
        drain(&mut sup),
        [
            ProcessAction::SignalGroup(Signal::Hangup),
            ProcessAction::CloseStdin
        ]
    );
    sup.forward(t0 + 100 * MS, Signal::Interrupt);
    assert_eq!(drain(&mut sup), [TERM]);
    sup.forward(t0 + 200 * MS, Signal::Interrupt);
    assert_eq!(drain(&mut sup), [KILL]);
    sup.forward(t0 + 300 * MS, Signal::Term);
    assert_eq!(drain(&mut sup), []);
}

/// F1: SIGTERM first is the ladder's own first rung.
#[test]
fn f1_a_forwarded_sigterm_is_sigterm_then_sigkill() {
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.forward(t0, Signal::Term);
    assert_eq!(drain(&mut sup), [TERM, ProcessAction::CloseStdin]);
    assert_eq!(sup.poll_timeout(), Some(t0 + 2 * S));
    sup.handle_exited(t0 + 10 * MS, ExitStatus::Signal(15));
    sup.handle_stdout_eof(t0 + 10 * MS);
    sup.handle_stderr_eof(t0 + 10 * MS);
    let outcome = finished(&drain(&mut sup));
    assert_eq!(outcome.ended_by, EndedBy::ExitedAfterTerm);
    assert_eq!(outcome.forwarded_signal, Some(Signal::Term));
}

/// F1: a child that dies of the signal passed on, or exits on its own
/// after it, ended after that signal, not in a crash.
#[test]
fn f1_an_exit_after_a_forwarded_signal_is_no_crash() {
    for status in [
        ExitStatus::Signal(2),
        ExitStatus::Code(0),
        ExitStatus::Code(130),
    ] {
        let t0 = Instant::now();
        let mut sup = spawned(t0, ChildPipes::ALL);
        sup.forward(t0, Signal::Interrupt);
        let _ = drain(&mut sup);
        sup.handle_exited(t0 + 8 * MS, status);
        sup.handle_stdout_eof(t0 + 8 * MS);
        sup.handle_stderr_eof(t0 + 8 * MS);
        let outcome = finished(&drain(&mut sup));
        assert_eq!(
            outcome.ended_by,
            EndedBy::ExitedAfterForwardedSignal,
            "{status:?}"
        );
    }
}

/// F1: a signal during a shutdown (stdin already closed) is passed on at
/// once and keeps the shutdown's SIGTERM time; after the exit, a signal
/// is sent to no one, and the next one kills a group still holding a pipe.
#[test]
fn f1_a_signal_during_a_shutdown_and_after_the_exit() {
    let t0 = Instant::now();
    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.shutdown(t0);
    assert_eq!(drain(&mut sup), [ProcessAction::CloseStdin]);
    sup.forward(t0 + S, Signal::Interrupt);
    assert_eq!(drain(&mut sup), [INT]);
    assert_eq!(
        sup.poll_timeout(),
        Some(t0 + 2 * S),
        "the shutdown's SIGTERM time"
    );

    let mut sup = spawned(t0, ChildPipes::ALL);
    sup.handle_exited(t0, ExitStatus::Code(0));
    sup.handle_stdout_eof(t0);
    sup.forward(t0 + MS, Signal::Interrupt);
    assert_eq!(drain(&mut sup), [ProcessAction::CloseStdin]);
    sup.forward(t0 + 2 * MS, Signal::Interrupt);
    assert_eq!(drain(&mut sup), [KILL], "stderr is still held");
}
