//! `run_helper` against the real `fixture-helper` of the tests crate, spawned
//! as a process: the adapter's own checks of G7, G10, G11 and G12 for helper
//! runs.
//!
//! The fixture binary must be built first (`cargo test --workspace` does it;
//! alone: `cargo build -p mcp-stdio-tests --bins`), or named by
//! `MCP_STDIO_FIXTURE_HELPER`. Linux only where a test reads `/proc`.

use std::future::{pending, Future};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_io::Timer;
use async_std::task::block_on;
use futures_lite::future::{or, zip};
use mcp_stdio_async_std::core::ExitStatus;
use mcp_stdio_async_std::core::{CallOutcome, CallState, DecisionReason};
use mcp_stdio_async_std::core::{EndedBy, StreamEnd};
use mcp_stdio_async_std::{
    run_helper, run_helper_with_approval, ApprovalRequest, Approver, CancelToken, CommandSpec,
    HelperOptions, HelperOutcome,
};

fn fixture_helper() -> PathBuf {
    if let Some(p) = std::env::var_os("MCP_STDIO_FIXTURE_HELPER") {
        return PathBuf::from(p);
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/debug/fixture-helper");
    assert!(
        path.is_file(),
        "{} not found: run `cargo build -p mcp-stdio-tests --bins` first",
        path.display()
    );
    path
}

fn helper(args: &[&str]) -> CommandSpec {
    let mut spec = CommandSpec::new(fixture_helper());
    spec.args(args);
    spec
}

/// A stderr budget of `stderr_tail` bytes and short graces, so tests are quick.
fn options(stderr_tail: usize) -> HelperOptions {
    let mut o = HelperOptions::default();
    o.operation("fixture-helper")
        .target("test")
        .call_id("call-1")
        .session_id("async-std");
    o.stderr_mut().tail(stderr_tail);
    o.supervisor_mut()
        .term_grace(Duration::from_millis(500))
        .reader_drain_deadline(Duration::from_millis(500));
    o
}

fn with_approval(deadline: Duration) -> HelperOptions {
    let mut o = options(4096);
    o.approval(Some(deadline));
    o
}

/// Runs `command`, cancelling after `after`; returns the outcome and how long the run took.
async fn run_cancelled_after(
    command: &CommandSpec,
    options: &HelperOptions,
    after: Duration,
) -> (HelperOutcome, Duration) {
    let cancel = CancelToken::new();
    let t = Instant::now();
    let canceller = async {
        Timer::after(after).await;
        cancel.cancel();
    };
    let run = async {
        let o = run_helper(command, options, &cancel).await;
        (o, t.elapsed())
    };
    zip(run, canceller).await.0
}

/// `[stderr truncated: kept last N of M bytes]`, exactly, at the start.
fn assert_marker(text: &str, stream: &str, kept: u64, seen: u64) {
    let marker = format!("[{stream} truncated: kept last {kept} of {seen} bytes]");
    assert!(
        text.starts_with(&marker),
        "expected {marker:?} at the start of {:?}",
        &text[..text.len().min(120)]
    );
}

/// The `/proc/PID/stat` fields after the command name: state, ppid, pgrp.
fn proc_stat(pid: u32) -> Option<(String, u32, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.to_owned();
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, ppid, pgrp))
}

/// Running (not a zombie, not gone).
fn pid_alive(pid: u32) -> bool {
    proc_stat(pid).is_some_and(|(state, _, _)| !matches!(state.as_str(), "Z" | "X"))
}

fn all_pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .collect()
}

/// Live (non-zombie) members of process group `pgid`.
fn group_members(pgid: u32) -> Vec<u32> {
    all_pids()
        .into_iter()
        .filter(|&pid| {
            proc_stat(pid).is_some_and(|(state, _, pgrp)| {
                pgrp == pgid && !matches!(state.as_str(), "Z" | "X")
            })
        })
        .collect()
}

/// A process whose arguments after `argv[0]` are exactly `args` (the
/// fixture re-executes itself by its canonical path, so `argv[0]` varies).
fn process_with_args(args: &[&str]) -> Option<u32> {
    let want: Vec<u8> = args
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    all_pids().into_iter().find(|&pid| {
        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
            c.iter()
                .position(|&b| b == 0)
                .is_some_and(|argv0| c[argv0 + 1..] == want[..])
        })
    })
}

/// A number of seconds no other test uses, to find a helper in `/proc`;
/// ends in a non-zero digit so it prints back the same after a float parse.
fn unique_secs() -> String {
    format!("30.{}1", std::process::id())
}

/// Polls `done` every 10 ms for up to `limit`; how long it took, if it did.
fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> Option<Duration> {
    let t = Instant::now();
    loop {
        if done() {
            return Some(t.elapsed());
        }
        if t.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn kill_pid(pid: u32) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

/// The run future is `Send`, so a handler can run it in a spawned task.
#[test]
fn run_helper_future_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    let (spec, o, cancel) = (helper(&["exit", "0"]), options(1024), CancelToken::new());
    let never = |_r: ApprovalRequest| pending::<bool>();
    assert_send(&run_helper(&spec, &o, &cancel));
    assert_send(&run_helper_with_approval(&spec, &o, &cancel, &never));
}

/// G10/G12: the exit code actually observed, both streams captured
/// separately, the record completed as a remote failure.
#[test]
fn g10_helper_exit_code_and_both_captures() {
    let t = Instant::now();
    let o = block_on(run_helper(
        &helper(&["exit", "3"]),
        &options(1024),
        &CancelToken::new(),
    ));
    eprintln!("async-std: exit 3 run took {:?}", t.elapsed());
    assert_eq!(o.exit_status, Some(ExitStatus::Code(3)));
    assert_eq!(o.stdout.text, "helper stdout line\n");
    assert_eq!(o.stderr.text, "helper stderr line\n");
    assert_eq!(o.record.state(), CallState::Completed);
    assert_eq!(o.record.outcome(), Some(CallOutcome::RemoteFailure));
    assert_eq!(o.record.exit_status(), Some(ExitStatus::Code(3)));
    assert!(!o.succeeded());
    let p = o.process.as_ref().expect("spawned");
    assert_eq!(p.ended_by, EndedBy::ExitedByItself);
    assert_eq!(p.stdout, Some(StreamEnd::Eof));
    assert_eq!(p.stderr, Some(StreamEnd::Eof));
}

/// G12: a program that cannot be spawned fails before dispatch, with no
/// invented exit status.
#[test]
fn g12_spawn_failure_is_failed_before_dispatch() {
    let spec = CommandSpec::new("/nonexistent/mcp-stdio-helper");
    let o = block_on(run_helper(&spec, &options(1024), &CancelToken::new()));
    assert_eq!(o.record.state(), CallState::FailedBeforeDispatch);
    assert!(o.process.is_none());
    assert_eq!(o.exit_status, None);
}

/// G10/G11: stderr flooded for 3 s, cancelled after 1 s: SIGTERM ends it,
/// retained ≤ budget with the exact marker, both streams read to EOF.
#[test]
fn g10_helper_stderr_flood_cancelled_is_bounded_and_drained() {
    let budget = 16 * 1024;
    let (o, took) = block_on(run_cancelled_after(
        &helper(&["flood-stderr", "3"]),
        &options(budget),
        Duration::from_secs(1),
    ));
    let s = o.stderr.summary;
    let p = o.process.as_ref().expect("spawned");
    eprintln!(
        "async-std: flood seen {} retained {} in {took:?}; ended {:?} exit {:?}",
        s.seen, s.retained, p.ended_by, o.exit_status
    );
    assert!(s.seen > 1 << 20, "the flood was drained ({} bytes)", s.seen);
    assert!(s.retained <= budget as u64 && s.truncated);
    assert_marker(&o.stderr.text, "stderr", s.retained, s.seen);
    assert_eq!(o.exit_status, Some(ExitStatus::Signal(15)));
    assert_eq!(p.stdout, Some(StreamEnd::EofAfterCancel));
    assert_eq!(p.stderr, Some(StreamEnd::EofAfterCancel));
    assert_eq!(o.record.state(), CallState::CancelledAfterDispatch);
    assert_eq!(o.record.stderr_bytes_seen(), s.seen);
    assert!(took < Duration::from_secs(10), "no hang: {took:?}");
}

/// G11: a helper that ignores SIGTERM is killed after the grace.
#[test]
fn g11_helper_ignoring_term_is_killed() {
    let (o, took) = block_on(run_cancelled_after(
        &helper(&["ignore-term", "30"]),
        &options(4096),
        Duration::from_millis(500),
    ));
    let p = o.process.as_ref().expect("spawned");
    eprintln!("async-std: ignore-term helper ended in {took:?}: {p:?}");
    assert_eq!(o.exit_status, Some(ExitStatus::Signal(9)));
    assert_eq!(p.ended_by, EndedBy::ExitedAfterKill);
    assert!(o.stderr.text.contains("SIGTERM received and ignored"));
    assert_eq!(o.record.state(), CallState::CancelledAfterDispatch);
    assert!(took < Duration::from_secs(10), "no hang: {took:?}");
}

/// Records when the approver was asked, and answers `answer` after `after`
/// (never, if `after` is `None`).
struct ScriptedApprover {
    answer: bool,
    after: Option<Duration>,
    asked: Mutex<Option<(Instant, ApprovalRequest)>>,
}

impl ScriptedApprover {
    fn new(answer: bool, after: Option<Duration>) -> Self {
        Self {
            answer,
            after,
            asked: Mutex::new(None),
        }
    }
}

impl Approver for ScriptedApprover {
    fn approve(&self, request: ApprovalRequest) -> impl Future<Output = bool> + Send {
        *self.asked.lock().expect("not poisoned") = Some((Instant::now(), request));
        let (answer, after) = (self.answer, self.after);
        async move {
            match after {
                Some(d) => {
                    Timer::after(d).await;
                    answer
                }
                None => pending().await,
            }
        }
    }
}

/// Runs with an approval step; returns the outcome, the run's duration and
/// when the approver was asked (from the start).
fn run_with(
    command: &CommandSpec,
    options: &HelperOptions,
    approver: &ScriptedApprover,
) -> (HelperOutcome, Duration, Option<Duration>) {
    let t = Instant::now();
    let o = block_on(run_helper_with_approval(
        command,
        options,
        &CancelToken::new(),
        approver,
    ));
    let took = t.elapsed();
    let asked = approver
        .asked
        .lock()
        .expect("not poisoned")
        .as_ref()
        .map(|(at, _)| at.duration_since(t));
    (o, took, asked)
}

/// G12: an approved helper is asked for at once (before any spawn), then
/// spawned and completed.
#[test]
fn g12_approval_approved_spawns_the_helper() {
    let approver = ScriptedApprover::new(true, Some(Duration::from_millis(100)));
    let (o, took, asked) = run_with(
        &helper(&["exit", "0"]),
        &with_approval(Duration::from_secs(5)),
        &approver,
    );
    eprintln!("async-std: approval asked after {asked:?}; approved run took {took:?}");
    let asked = asked.expect("the approver was asked");
    assert!(asked < Duration::from_secs(1), "asked late: {asked:?}");
    let guard = approver.asked.lock().expect("not poisoned");
    let (_, request) = guard.as_ref().expect("asked");
    assert_eq!(request.record.state(), CallState::AwaitingApproval);
    assert_eq!(request.record.operation(), "fixture-helper");
    assert!(o.succeeded(), "{:?}", o.record);
    assert_eq!(o.record.decision_reason(), Some(DecisionReason::User));
    assert_eq!(o.stdout.text, "helper stdout line\n");
}

/// G12: a denied helper is never spawned; the record says who denied it.
#[test]
fn g12_approval_denied_never_spawns() {
    let approver = ScriptedApprover::new(false, Some(Duration::from_millis(50)));
    let (o, took, _) = run_with(
        &helper(&["exit", "0"]),
        &with_approval(Duration::from_secs(5)),
        &approver,
    );
    eprintln!("async-std: denied run took {took:?}");
    assert_eq!(o.record.state(), CallState::Denied);
    assert_eq!(o.record.decision_reason(), Some(DecisionReason::User));
    assert!(o.process.is_none(), "never spawned");
    assert_eq!(o.exit_status, None);
    assert!(took < Duration::from_secs(5));
}

/// G12: an answer after the deadline comes too late: denied with reason
/// `approval_timeout`, never spawned, ended at the deadline.
#[test]
fn g12_approval_timeout_denies_without_spawning() {
    let deadline = Duration::from_millis(300);
    let approver = ScriptedApprover::new(true, Some(Duration::from_secs(2)));
    let (o, took, _) = run_with(&helper(&["exit", "0"]), &with_approval(deadline), &approver);
    eprintln!("async-std: approval timed out after {took:?} (deadline {deadline:?})");
    assert_eq!(o.record.state(), CallState::Denied);
    assert_eq!(
        o.record.decision_reason(),
        Some(DecisionReason::ApprovalTimeout)
    );
    let json = serde_json::to_value(&o).expect("serializes");
    assert_eq!(json["record"]["decision_reason"], "approval_timeout");
    assert!(json["exit_status"].is_null());
    assert!(o.process.is_none(), "never spawned");
    assert!(took >= deadline, "ended before the deadline: {took:?}");
    assert!(
        took < Duration::from_millis(1500),
        "held past the deadline: {took:?}"
    );
}

/// G12: an approver that never answers cannot hold the run past its deadline.
#[test]
fn g12_silent_approver_does_not_block_past_the_deadline() {
    let deadline = Duration::from_millis(300);
    let approver = ScriptedApprover::new(true, None);
    let (o, took, _) = run_with(&helper(&["exit", "0"]), &with_approval(deadline), &approver);
    eprintln!("async-std: silent approver: run ended after {took:?} (deadline {deadline:?})");
    assert_eq!(o.record.state(), CallState::Denied);
    assert_eq!(
        o.record.decision_reason(),
        Some(DecisionReason::ApprovalTimeout)
    );
    assert!(o.process.is_none());
    assert!(took >= deadline && took < Duration::from_millis(1500));
    // A closure approver that never answers behaves the same.
    let t = Instant::now();
    let never = |_r: ApprovalRequest| pending::<bool>();
    let o = block_on(run_helper_with_approval(
        &helper(&["exit", "0"]),
        &with_approval(deadline),
        &CancelToken::new(),
        &never,
    ));
    eprintln!("async-std: closure that never answers: {:?}", t.elapsed());
    assert_eq!(o.record.state(), CallState::Denied);
    assert!(t.elapsed() < Duration::from_millis(1500));
}

/// G7: a cancel while the approval is pending ends the run at once,
/// unspawned, `cancelled`.
#[test]
fn g7_cancel_during_approval_never_spawns() {
    let approver = ScriptedApprover::new(true, None);
    let cancel = CancelToken::new();
    let t = Instant::now();
    let (o, ()) = block_on(zip(
        run_helper_with_approval(
            &helper(&["exit", "0"]),
            &with_approval(Duration::from_secs(30)),
            &cancel,
            &approver,
        ),
        async {
            Timer::after(Duration::from_millis(200)).await;
            cancel.cancel();
        },
    ));
    eprintln!(
        "async-std: cancelled during approval after {:?}",
        t.elapsed()
    );
    assert_eq!(o.record.state(), CallState::Cancelled);
    assert!(o.process.is_none());
    assert!(t.elapsed() < Duration::from_secs(5));
}

/// G7/G11: dropping the run's future mid-run (a cancelled handler) kills the
/// helper's process group at once.
#[test]
fn g11_dropping_the_run_kills_the_process_group() {
    let secs = unique_secs();
    let args = ["sleep", secs.as_str()];
    let spec = helper(&args);
    let o = options(4096);
    let cancel = CancelToken::new();
    let pgid = block_on(or(
        async {
            let outcome = run_helper(&spec, &o, &cancel).await;
            panic!("a 30 s helper ended early: {:?}", outcome.record);
        },
        async {
            Timer::after(Duration::from_millis(300)).await;
            let pid = process_with_args(&args).expect("the helper is running");
            let (_, ppid, _) = proc_stat(pid).expect("the helper is running");
            assert_eq!(ppid, std::process::id(), "our child");
            assert_eq!(group_members(pid), vec![pid], "its own process group");
            pid
        },
    ));
    // `or` returned: the run's future is dropped.
    let gone = wait_until(Duration::from_secs(5), || group_members(pgid).is_empty());
    eprintln!("async-std: group {pgid} gone {gone:?} after the run was dropped");
    if gone.is_none() {
        kill_pid(pgid);
    }
    assert!(gone.is_some(), "group {pgid} outlived the dropped run");
}

/// G11: dropped after the leader exited (and was reaped) while a grandchild
/// in its group still writes stderr, the run still kills the group: the
/// `killpg` reaches members other than the leader.
#[test]
fn g11_dropping_the_run_after_the_leader_exited_kills_its_grandchild() {
    let secs = unique_secs();
    let spec = helper(&["wrapper-grandchild", &secs]);
    let mut o = options(4096);
    // Long enough that the core's own kill after the leader's exit does not
    // come first: only the dropped run's guard can end the grandchild.
    o.supervisor_mut()
        .reader_drain_deadline(Duration::from_secs(20));
    let cancel = CancelToken::new();
    let (grandchild, pgid) = block_on(or(
        async {
            let outcome = run_helper(&spec, &o, &cancel).await;
            panic!(
                "the run ended while its grandchild held stderr: {:?}",
                outcome.process
            );
        },
        async {
            Timer::after(Duration::from_millis(500)).await;
            let pid = process_with_args(&["grandchild-stderr", &secs])
                .expect("the grandchild is running");
            let (_, _, pgid) = proc_stat(pid).expect("the grandchild is running");
            assert_ne!(pid, pgid, "the grandchild is in the wrapper's group");
            assert!(!pid_alive(pgid), "the wrapper (group leader) has exited");
            (pid, pgid)
        },
    ));
    let gone = wait_until(Duration::from_secs(5), || group_members(pgid).is_empty());
    eprintln!(
        "async-std: group {pgid} (grandchild {grandchild}) gone {gone:?} after the run was dropped"
    );
    if gone.is_none() {
        kill_pid(grandchild);
    }
    assert!(
        gone.is_some(),
        "grandchild {grandchild} outlived the dropped run"
    );
}

/// smol users are served: runs, cancels and timers under `smol::block_on`.
#[test]
fn smol_block_on_runs_helpers() {
    let (o, (c, took)) = smol::block_on(async {
        let o = run_helper(&helper(&["exit", "3"]), &options(1024), &CancelToken::new()).await;
        let c = run_cancelled_after(
            &helper(&["sleep", "30"]),
            &options(1024),
            Duration::from_millis(300),
        )
        .await;
        (o, c)
    });
    eprintln!("smol: cancelled sleep ended in {took:?}");
    assert_eq!(o.exit_status, Some(ExitStatus::Code(3)));
    assert_eq!(o.stdout.text, "helper stdout line\n");
    assert_eq!(o.stderr.text, "helper stderr line\n");
    assert_eq!(c.exit_status, Some(ExitStatus::Signal(15)));
    assert_eq!(c.record.state(), CallState::CancelledAfterDispatch);
    assert!(took < Duration::from_secs(5), "no hang: {took:?}");
}

/// G7: a token cancelled before the run begins ends it without a spawn.
#[test]
fn g7_helper_cancelled_before_it_starts_never_spawns() {
    let cancel = CancelToken::new();
    cancel.cancel();
    let t = Instant::now();
    let o = block_on(run_helper(
        &helper(&["sleep", "30"]),
        &options(1024),
        &cancel,
    ));
    eprintln!("async-std: pre-cancelled run ended in {:?}", t.elapsed());
    assert!(o.process.is_none(), "spawned despite the cancel");
    assert_eq!(o.record.state(), CallState::Cancelled);
}
