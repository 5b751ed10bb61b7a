//! The blocking `run_helper` against the real `fixture-helper`, through real
//! process spawns. Bounds are generous so a loaded machine never flakes;
//! each test prints what it measured.

mod common;

use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{group_members, pid_alive, wait_until};
use mcp_stdio_blocking::core::ExitStatus;
use mcp_stdio_blocking::core::{CallOutcome, CallState, DecisionReason};
use mcp_stdio_blocking::core::{EndedBy, StreamEnd};
use mcp_stdio_blocking::{
    run_helper, run_helper_with_approval, ApprovalRequest, CancelToken, CommandSpec, HelperOptions,
    HelperOutcome,
};

/// The `fixture-helper` binary of the tests crate: `MCP_STDIO_FIXTURE_HELPER`,
/// else next to `fixture-server` (the same `cargo build --bins` makes both).
fn fixture_helper() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(p) = std::env::var_os("MCP_STDIO_FIXTURE_HELPER") {
            return PathBuf::from(p);
        }
        let path = common::fixture_server().with_file_name("fixture-helper");
        assert!(path.is_file(), "no fixture helper at {}", path.display());
        path
    })
    .clone()
}

fn helper(args: &[&str]) -> CommandSpec {
    let mut spec = CommandSpec::new(fixture_helper());
    spec.args(args);
    spec
}

/// Options with a stderr budget of `stderr_tail` bytes and short graces.
fn options(stderr_tail: usize) -> HelperOptions {
    let mut o = HelperOptions::default();
    o.operation("fixture-helper")
        .target("test")
        .call_id("call-1")
        .session_id("blocking");
    o.stderr_mut().tail(stderr_tail);
    o.supervisor_mut()
        .term_grace(Duration::from_millis(500))
        .reader_drain_deadline(Duration::from_millis(500));
    o
}

/// Cancels `token` from another thread after `after`; the thread returns
/// the instant of the cancel.
fn cancel_after(token: &CancelToken, after: Duration) -> JoinHandle<Instant> {
    let token = token.clone();
    std::thread::spawn(move || {
        std::thread::sleep(after);
        token.cancel();
        Instant::now()
    })
}

fn grandchild_pid(stdout: &str) -> u32 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("grandchild "))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no grandchild pid in {stdout:?}"))
}

fn kill_pid(pid: u32) {
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).expect("a pid")).expect("a pid");
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
}

fn assert_never_spawned(o: &HelperOutcome) {
    assert!(o.process.is_none(), "never spawned: {:?}", o.process);
    assert_eq!(o.exit_status, None);
    assert_eq!(o.record.exit_status(), None);
    assert_eq!((o.stdout.summary.seen, o.stderr.summary.seen), (0, 0));
}

/// An approver that records when it was asked, then answers `approve`
/// after `after` (or never, for `None`: it blocks until `release` is
/// dropped, so the test can end it).
#[derive(Clone)]
struct ScriptedApprover {
    asked: Arc<Mutex<Option<Instant>>>,
    answer: Option<(bool, Duration)>,
    release: Arc<Mutex<mpsc::Receiver<()>>>,
    answered: Arc<Mutex<Option<Instant>>>,
}

impl ScriptedApprover {
    fn new(answer: Option<(bool, Duration)>) -> (Self, mpsc::Sender<()>) {
        let (tx, rx) = mpsc::channel();
        let a = Self {
            asked: Arc::default(),
            answer,
            release: Arc::new(Mutex::new(rx)),
            answered: Arc::default(),
        };
        (a, tx)
    }

    fn call(&self, request: &ApprovalRequest) -> bool {
        *self.asked.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        assert_eq!(request.record.state(), CallState::AwaitingApproval);
        let approved = match self.answer {
            Some((approve, after)) => {
                std::thread::sleep(after);
                approve
            }
            None => {
                // Blocks until the test drops the sender.
                let _ = self
                    .release
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .recv();
                true
            }
        };
        *self.answered.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        approved
    }

    fn closure(&self) -> impl Fn(ApprovalRequest) -> bool + Clone + Send + Sync + 'static {
        let me = self.clone();
        move |request: ApprovalRequest| me.call(&request)
    }

    fn asked(&self) -> Option<Instant> {
        *self.asked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn answered(&self) -> Option<Instant> {
        *self.answered.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[test]
fn g10_exit_code_is_observed_with_both_captures() {
    let t = Instant::now();
    let o = run_helper(&helper(&["exit", "3"]), &options(1024), &CancelToken::new());
    eprintln!("exit 3: {:?}", t.elapsed());
    assert_eq!(o.exit_status, Some(ExitStatus::Code(3)));
    assert_eq!(o.stdout.text, "helper stdout line\n");
    assert_eq!(o.stderr.text, "helper stderr line\n");
    let p = o.process.as_ref().expect("spawned");
    assert_eq!(p.ended_by, EndedBy::ExitedByItself);
    assert_eq!(
        (p.stdout, p.stderr),
        (Some(StreamEnd::Eof), Some(StreamEnd::Eof))
    );
    assert_eq!(o.record.state(), CallState::Completed);
    assert_eq!(o.record.outcome(), Some(CallOutcome::RemoteFailure));
    assert_eq!(o.record.exit_status(), Some(ExitStatus::Code(3)));
    assert!(!o.succeeded());
    assert!(t.elapsed() < Duration::from_secs(5));

    let o = run_helper(&helper(&["exit", "0"]), &options(1024), &CancelToken::new());
    assert!(o.succeeded(), "{:?}", o.record);
}

#[test]
fn g10_g11_stderr_flood_cancelled_after_one_second() {
    let cancel = CancelToken::new();
    let canceller = cancel_after(&cancel, Duration::from_secs(1));
    let t = Instant::now();
    let o = run_helper(
        &helper(&["flood-stderr", "3"]),
        &options(16 * 1024),
        &cancel,
    );
    let took = t.elapsed();
    let cancelled_at = canceller.join().expect("canceller");
    let after_cancel = cancelled_at.elapsed();
    let s = o.stderr.summary;
    let p = o.process.as_ref().expect("spawned");
    eprintln!(
        "flood: seen {} retained {} in {took:?}, returned {after_cancel:?} after the cancel; \
         cancel to exit {:?}; {:?}",
        s.seen, s.retained, p.cancel_to_exit, p.ended_by
    );
    assert!(s.seen > 1 << 20, "the flood was drained ({} bytes)", s.seen);
    assert!(s.truncated && s.retained <= 16 * 1024);
    let marker = format!(
        "[stderr truncated: kept last {} of {} bytes]",
        s.retained, s.seen
    );
    assert!(
        o.stderr.text.starts_with(&marker),
        "expected {marker:?} at the start of {:?}",
        &o.stderr.text[..o.stderr.text.len().min(120)]
    );
    assert_eq!(o.exit_status, Some(ExitStatus::Signal(15)));
    assert_eq!(p.ended_by, EndedBy::ExitedAfterTerm);
    assert_eq!(p.stdout, Some(StreamEnd::EofAfterCancel));
    assert_eq!(p.stderr, Some(StreamEnd::EofAfterCancel));
    assert_eq!(o.record.state(), CallState::CancelledAfterDispatch);
    assert_eq!(o.record.stderr_bytes_seen(), s.seen);
    assert!(took >= Duration::from_millis(950), "ran until the cancel");
    // The 10 ms cancel tick plus the helper's death; generous for a loaded box.
    assert!(
        after_cancel < Duration::from_secs(2),
        "cancel to return: {after_cancel:?}"
    );
}

#[test]
fn g7_cancel_reaches_the_group_within_the_tick() {
    // A quiet helper: only the cancel tick can wake the run.
    let cancel = CancelToken::new();
    let canceller = cancel_after(&cancel, Duration::from_millis(300));
    let o = run_helper(&helper(&["sleep", "30"]), &options(1024), &cancel);
    let cancelled_at = canceller.join().expect("canceller");
    let after_cancel = cancelled_at.elapsed();
    let p = o.process.as_ref().expect("spawned");
    eprintln!(
        "sleep cancelled: returned {after_cancel:?} after the cancel; cancel to exit {:?}",
        p.cancel_to_exit
    );
    assert_eq!(o.exit_status, Some(ExitStatus::Signal(15)));
    assert_eq!(o.record.state(), CallState::CancelledAfterDispatch);
    assert!(
        after_cancel < Duration::from_millis(500),
        "cancel to return: {after_cancel:?}"
    );
}

#[test]
fn g11_cancel_of_a_helper_ignoring_term_ends_with_kill() {
    let cancel = CancelToken::new();
    let canceller = cancel_after(&cancel, Duration::from_millis(300));
    let t = Instant::now();
    let o = run_helper(&helper(&["ignore-term", "30"]), &options(4096), &cancel);
    let took = t.elapsed();
    canceller.join().expect("canceller");
    let p = o.process.as_ref().expect("spawned");
    eprintln!("ignore-term: ended in {took:?} ({:?})", p.cancel_to_exit);
    assert_eq!(o.exit_status, Some(ExitStatus::Signal(9)));
    assert_eq!(p.ended_by, EndedBy::ExitedAfterKill);
    assert_eq!(o.record.state(), CallState::CancelledAfterDispatch);
    assert!(o.stderr.text.contains("SIGTERM received and ignored"));
    // 300 ms to the cancel, 500 ms TERM grace.
    assert!(took >= Duration::from_millis(750), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn g11_wrapper_exits_and_its_grandchild_dies_with_the_group() {
    let t = Instant::now();
    let o = run_helper(
        &helper(&["wrapper-grandchild", "30"]),
        &options(4096),
        &CancelToken::new(),
    );
    let took = t.elapsed();
    let pid = grandchild_pid(&o.stdout.text);
    let gone = wait_until(Duration::from_secs(5), || !pid_alive(pid));
    if gone.is_none() {
        kill_pid(pid);
    }
    let p = o.process.as_ref().expect("spawned");
    eprintln!("wrapper: run {took:?}; grandchild {pid} gone after {gone:?}; {p:?}");
    assert!(gone.is_some(), "the grandchild outlived the run");
    assert_eq!(o.exit_status, Some(ExitStatus::Code(0)));
    assert!(
        p.group_killed_after_exit(),
        "the group was killed after the leader exited"
    );
    assert!(o.stderr.text.contains("helper-grandchild: alive"));
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn g11_escaped_grandchild_reader_is_abandoned_without_a_hang() {
    let t = Instant::now();
    let o = run_helper(
        &helper(&["escaped-grandchild", "30"]),
        &options(4096),
        &CancelToken::new(),
    );
    let took = t.elapsed();
    let pid = grandchild_pid(&o.stdout.text);
    let was_alive = pid_alive(pid);
    kill_pid(pid);
    let p = o.process.as_ref().expect("spawned");
    eprintln!("escaped grandchild {pid} (alive at the end: {was_alive}): run {took:?}; {p:?}");
    assert!(was_alive, "the grandchild escaped the group kill");
    assert_eq!(p.stdout, Some(StreamEnd::Eof));
    assert_eq!(p.stderr, Some(StreamEnd::AbandonedAfterDeadline));
    assert_eq!(o.exit_status, Some(ExitStatus::Code(0)));
    // Two reader drain deadlines of 500 ms.
    assert!(took < Duration::from_secs(5), "no hang: {took:?}");
    assert!(wait_until(Duration::from_secs(5), || !pid_alive(pid)).is_some());
}

#[test]
fn g12_approved_helper_runs_after_the_answer() {
    let mut o = options(4096);
    o.approval(Some(Duration::from_secs(5)));
    let (approver, _release) = ScriptedApprover::new(Some((true, Duration::from_millis(50))));
    let t = Instant::now();
    let out = run_helper_with_approval(
        &helper(&["exit", "0"]),
        &o,
        &CancelToken::new(),
        &approver.closure(),
    );
    let took = t.elapsed();
    let asked = approver.asked().expect("asked").duration_since(t);
    eprintln!("approved: asked after {asked:?}, run {took:?}");
    assert!(asked < Duration::from_millis(500), "{asked:?}");
    assert!(out.succeeded(), "{:?}", out.record);
    assert_eq!(out.record.decision_reason(), Some(DecisionReason::User));
    assert!(took >= Duration::from_millis(50));
}

#[test]
fn g12_denied_helper_is_never_spawned() {
    let mut o = options(4096);
    o.approval(Some(Duration::from_secs(5)));
    let (approver, _release) = ScriptedApprover::new(Some((false, Duration::from_millis(20))));
    let t = Instant::now();
    let out = run_helper_with_approval(
        &helper(&["exit", "0"]),
        &o,
        &CancelToken::new(),
        &approver.closure(),
    );
    eprintln!("denied: run {:?}", t.elapsed());
    assert_eq!(out.record.state(), CallState::Denied);
    assert_eq!(out.record.decision_reason(), Some(DecisionReason::User));
    assert_never_spawned(&out);
}

#[test]
fn g12_late_approval_is_a_timeout_and_the_run_does_not_wait_for_it() {
    let mut o = options(4096);
    o.approval(Some(Duration::from_millis(300)));
    let (approver, _release) = ScriptedApprover::new(Some((true, Duration::from_secs(2))));
    let t = Instant::now();
    let out = run_helper_with_approval(
        &helper(&["exit", "0"]),
        &o,
        &CancelToken::new(),
        &approver.closure(),
    );
    let took = t.elapsed();
    eprintln!("late approval: run {took:?}");
    assert_eq!(out.record.state(), CallState::Denied);
    assert_eq!(
        out.record.decision_reason(),
        Some(DecisionReason::ApprovalTimeout)
    );
    let json = serde_json::to_value(&out).expect("serializes");
    assert_eq!(json["record"]["state"], "denied");
    assert_eq!(json["record"]["decision_reason"], "approval_timeout");
    assert!(json["exit_status"].is_null());
    assert_never_spawned(&out);
    assert!(took >= Duration::from_millis(290), "{took:?}");
    assert!(
        took < Duration::from_millis(1500),
        "waited for the approver: {took:?}"
    );
    assert!(approver.answered().is_none(), "returned before the answer");
}

#[test]
fn g12_approver_that_never_answers_does_not_block_past_the_deadline() {
    let mut o = options(4096);
    o.approval(Some(Duration::from_millis(300)));
    let (approver, release) = ScriptedApprover::new(None);
    let t = Instant::now();
    let out = run_helper_with_approval(
        &helper(&["exit", "0"]),
        &o,
        &CancelToken::new(),
        &approver.closure(),
    );
    let took = t.elapsed();
    eprintln!("silent approver: run {took:?} (deadline 300 ms)");
    assert_eq!(
        out.record.decision_reason(),
        Some(DecisionReason::ApprovalTimeout)
    );
    assert_never_spawned(&out);
    assert!(took < Duration::from_millis(1500), "{took:?}");
    // The approver answers "yes" now, to nobody: nothing is spawned.
    drop(release);
    assert!(wait_until(Duration::from_secs(5), || approver.answered().is_some()).is_some());
}

#[test]
fn g7_cancel_while_awaiting_approval_ends_the_run_unspawned() {
    let mut o = options(4096);
    o.approval(Some(Duration::from_secs(30)));
    let (approver, _release) = ScriptedApprover::new(None);
    let cancel = CancelToken::new();
    let canceller = cancel_after(&cancel, Duration::from_millis(200));
    let out = run_helper_with_approval(&helper(&["exit", "0"]), &o, &cancel, &approver.closure());
    let after_cancel = canceller.join().expect("canceller").elapsed();
    eprintln!("cancel during approval: returned {after_cancel:?} after the cancel");
    assert_eq!(out.record.state(), CallState::Cancelled);
    assert_never_spawned(&out);
    assert!(
        after_cancel < Duration::from_millis(500),
        "{after_cancel:?}"
    );
}

#[test]
fn g12_a_panicking_approver_is_a_denial() {
    let mut o = options(4096);
    o.approval(Some(Duration::from_secs(30)));
    let approver = |_r: ApprovalRequest| -> bool { panic!("approver bug (expected in this test)") };
    let t = Instant::now();
    let out = run_helper_with_approval(&helper(&["exit", "0"]), &o, &CancelToken::new(), &approver);
    eprintln!("panicking approver: run {:?}", t.elapsed());
    assert_eq!(out.record.state(), CallState::Denied);
    assert_never_spawned(&out);
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn g12_run_helper_without_an_approver_denies_a_configured_approval() {
    let mut o = options(4096);
    o.approval(Some(Duration::from_secs(30)));
    let out = run_helper(&helper(&["exit", "0"]), &o, &CancelToken::new());
    assert_eq!(out.record.state(), CallState::Denied);
    assert_never_spawned(&out);
}

#[test]
fn g12_a_token_cancelled_before_the_call_never_spawns() {
    let cancel = CancelToken::new();
    cancel.cancel();
    let out = run_helper(&helper(&["exit", "0"]), &options(4096), &cancel);
    assert_eq!(out.record.state(), CallState::Cancelled);
    assert_never_spawned(&out);
}

#[test]
fn g12_spawn_failure_is_failed_before_dispatch() {
    let spec = CommandSpec::new("/nonexistent/mcp-stdio-no-such-helper");
    let out = run_helper(&spec, &options(4096), &CancelToken::new());
    assert_eq!(out.record.state(), CallState::FailedBeforeDispatch);
    assert_never_spawned(&out);
}

#[test]
fn g10_stdout_flood_is_drained_and_the_group_is_gone_afterwards() {
    // Both streams flood for 1 s; the run drains them to EOF on one thread.
    let mut o = options(4096);
    o.stdout_mut().tail(8192);
    let t = Instant::now();
    let out = run_helper(&helper(&["flood-both", "1"]), &o, &CancelToken::new());
    let took = t.elapsed();
    let (so, se) = (out.stdout.summary, out.stderr.summary);
    eprintln!(
        "flood-both 1 s: stdout seen {} retained {}, stderr seen {} retained {}, run {took:?}",
        so.seen, so.retained, se.seen, se.retained
    );
    assert!(out.succeeded(), "{:?}", out.record);
    assert!(so.seen > 1 << 20 && se.seen > 1 << 20);
    assert!(so.retained <= 8192 && se.retained <= 4096);
    assert!(out.stdout.text.starts_with(&format!(
        "[stdout truncated: kept last {} of {} bytes]",
        so.retained, so.seen
    )));
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn g11_the_leader_is_reaped_and_its_group_empty_when_run_helper_returns() {
    // `exec` keeps the shell's pid, so `$$` is the leader's pid and group id.
    let mut spec = CommandSpec::new("/bin/sh");
    spec.args([
        "-c",
        r#"echo "leader $$"; exec "$0" wrapper-grandchild 30"#,
        fixture_helper().to_str().expect("a UTF-8 path"),
    ]);
    let out = run_helper(&spec, &options(4096), &CancelToken::new());
    let leader: u32 = out
        .stdout
        .text
        .lines()
        .find_map(|l| l.strip_prefix("leader "))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no leader pid in {:?}", out.stdout.text));
    let grandchild = grandchild_pid(&out.stdout.text);
    // The leader is checked at once: the run reaps it before it returns.
    let leader_exists = common::pid_exists(leader);
    // The grandchild's pipe closes a moment before it is seen dead (the
    // kernel closes files before the exit state is set): allow that moment.
    let emptied = wait_until(Duration::from_secs(1), || group_members(leader).is_empty());
    let members = group_members(leader);
    kill_pid(grandchild);
    eprintln!(
        "leader {leader} exists after the run: {leader_exists}; group emptied after {emptied:?}"
    );
    assert_eq!(out.exit_status, Some(ExitStatus::Code(0)));
    assert!(!leader_exists, "the leader {leader} was not reaped");
    assert!(members.is_empty(), "group {leader} still has {members:?}");
}

/// G7: a token cancelled before the run begins ends it without a spawn.
#[test]
fn g7_helper_cancelled_before_it_starts_never_spawns() {
    let cancel = CancelToken::new();
    cancel.cancel();
    let t = Instant::now();
    let o = run_helper(&helper(&["sleep", "30"]), &options(1024), &cancel);
    eprintln!("blocking: pre-cancelled run ended in {:?}", t.elapsed());
    assert_never_spawned(&o);
    assert_eq!(o.record.state(), CallState::Cancelled);
}
