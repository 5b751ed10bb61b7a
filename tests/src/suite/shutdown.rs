//! G11: one owner per child. Every shutdown path ends with the exit status
//! actually observed and no process left: a server that exits on stdin
//! close, one that needs SIGTERM, one that needs SIGKILL, a grandchild in the
//! group, an escaped grandchild holding stderr, a client dropped mid-request,
//! and 20 clients at once.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use mcp_stdio_core::ExitStatus;
use mcp_stdio_core::RequestFailure;
use mcp_stdio_core::{ClientOptions, RequestError, SessionRecord};
use mcp_stdio_core::{EndedBy, StreamEnd};
use serde_json::json;

use super::{
    assert_streams_ended, fixture_helper, options, parse_errors, ping_within, shutdown_within,
    spawn, start, tool, wait_within, LeakCheck, LONG, POLL, PROMPT,
};
use crate::adapter::{Adapter, SuiteClient, SuitePending};
use crate::{
    group_members, pid_alive, proc_stat, signal_pid, wait_until, LeaderLife, LeaderWatch, Signal,
};

/// The graces of [`options`]: stdin close, SIGTERM, reader drain.
fn graces(options: &ClientOptions) -> (Duration, Duration, Duration) {
    let s = options.get_supervisor();
    (
        s.get_stdin_close_grace(),
        s.get_term_grace(),
        s.get_reader_drain_deadline(),
    )
}

/// Starts the fixture with `flags`, pings, shuts down; checks the record's
/// exit status, path and streams, and that nothing is left.
fn shutdown_path<A: Adapter>(
    case: &str,
    flags: &[&str],
    status: ExitStatus,
    ended_by: EndedBy,
) -> (SessionRecord, Duration) {
    let mut leaks = LeakCheck::new::<A>(case);
    let opts = options(4 << 20);
    let (stdin_grace, term_grace, drain) = graces(&opts);
    let client = start::<A>(&mut leaks, flags, opts);
    let pid = client.pid();
    ping_within(&*client, PROMPT);
    let (record, took) = shutdown_within::<A>(client, LONG);
    let p = &record.process;
    assert_eq!(record.exit_status(), Some(status), "{p:?}");
    assert_eq!(p.ended_by, ended_by, "{p:?}");
    assert_streams_ended(&record);
    assert!(
        took < stdin_grace + term_grace + 2 * drain + Duration::from_secs(3),
        "shutdown took {took:?}"
    );
    let left = leaks.assert_none_left();
    assert!(group_members(pid).is_empty());
    eprintln!(
        "{}: {case}: {:?} via {:?} in {took:?} (stdin closed {:?}, TERM {:?}, KILL {:?}, exit {:?}); \
         group empty {left:?} later",
        A::NAME,
        p.exit_status,
        p.ended_by,
        p.stdin_closed_at,
        p.term_sent_at,
        p.kill_sent_at,
        p.exited_at
    );
    (record, took)
}

/// G11: a server that exits when its stdin closes is never signalled, and
/// its exit code 0 is the one observed.
pub fn g11_server_that_exits_on_stdin_close_is_not_signalled<A: Adapter>() {
    let (record, took) = shutdown_path::<A>(
        "g11_stdin_close",
        &[],
        ExitStatus::Code(0),
        EndedBy::ExitedAfterStdinClose,
    );
    assert_eq!(record.process.term_sent_at, None);
    assert_eq!(record.process.kill_sent_at, None);
    assert!(took < Duration::from_secs(5), "{took:?}");
}

/// G11: a server that ignores stdin EOF gets SIGTERM after the stdin grace
/// and dies of it (`Signal(15)`), without SIGKILL.
pub fn g11_server_ignoring_stdin_eof_is_ended_by_sigterm<A: Adapter>() {
    let (record, took) = shutdown_path::<A>(
        "g11_term",
        &["--ignore-stdin-eof"],
        ExitStatus::Signal(15),
        EndedBy::ExitedAfterTerm,
    );
    let p = &record.process;
    let (closed, term) = (
        p.stdin_closed_at.expect("stdin closed"),
        p.term_sent_at.expect("TERM sent"),
    );
    assert!(term - closed >= Duration::from_millis(500), "{p:?}");
    assert_eq!(p.kill_sent_at, None);
    assert!(took >= Duration::from_millis(500), "{took:?}");
}

/// G11: a server that ignores stdin EOF and SIGTERM gets SIGKILL after the
/// TERM grace (`Signal(9)`); its log shows it did receive the TERM.
pub fn g11_server_ignoring_sigterm_is_ended_by_sigkill<A: Adapter>() {
    let (record, took) = shutdown_path::<A>(
        "g11_kill",
        &["--ignore-stdin-eof", "--ignore-sigterm"],
        ExitStatus::Signal(9),
        EndedBy::ExitedAfterKill,
    );
    let p = &record.process;
    let (term, kill) = (
        p.term_sent_at.expect("TERM sent"),
        p.kill_sent_at.expect("KILL sent"),
    );
    assert!(kill - term >= Duration::from_millis(500), "{p:?}");
    assert!(took >= Duration::from_secs(1), "{took:?}");
    assert!(
        record.stderr_tail.contains("SIGTERM received and ignored"),
        "{}",
        record.stderr_tail
    );
}

/// G11/G12: the exit code in the record is the observed one, not an
/// invented 0.
pub fn g11_exit_code_is_the_observed_one<A: Adapter>() {
    shutdown_path::<A>(
        "g11_exit_code",
        &["--exit-code", "3"],
        ExitStatus::Code(3),
        EndedBy::ExitedAfterStdinClose,
    );
}

/// G11: a wrapper that exits at once but leaves a grandchild in its process
/// group holding stderr. The session ends (stdout EOF), the group kill after
/// the leader's exit ends the grandchild, stderr reaches EOF, the record is
/// written, nothing hangs.
pub fn g11_grandchild_in_the_group_dies_with_the_group_kill<A: Adapter>() {
    let mut leaks = LeakCheck::new::<A>("g11_grandchild");
    let mut opts = options(4 << 20);
    // A wide window to find the grandchild before the group kill.
    opts.supervisor_mut()
        .reader_drain_deadline(Duration::from_secs(2));
    let (stdin_grace, term_grace, drain) = graces(&opts);
    // Not an MCP server: its `grandchild <pid>` stdout line is a parse error.
    let client = spawn::<A>(
        &mut leaks,
        fixture_helper(&["wrapper-grandchild", "30"]),
        opts,
    );
    let pid = client.pid();
    // The wrapper prints its line once the grandchild runs. Wait until the
    // client has counted it: bytes that arrive after a local close are
    // drained but no longer parsed or counted, so shutting down earlier would
    // race the line.
    wait_until(PROMPT, POLL, || {
        client.metrics().is_some_and(|m| parse_errors(&m) == 1)
    })
    .expect("the wrapper's `grandchild <pid>` line was read");
    let mut gc = 0;
    wait_until(PROMPT, POLL, || {
        gc = group_members(pid)
            .into_iter()
            .find(|&p| p != pid && super::cmdline(p).contains("grandchild-stderr"))
            .unwrap_or(0);
        gc != 0
    })
    .expect("the grandchild runs in the wrapper's group");
    let (record, took) = shutdown_within::<A>(client, LONG);
    let gone = wait_until(PROMPT, POLL, || !pid_alive(gc))
        .unwrap_or_else(|| panic!("grandchild {gc} survived the shutdown"));
    let p = &record.process;
    assert_eq!(record.exit_status(), Some(ExitStatus::Code(0)), "{p:?}");
    assert!(
        p.group_killed_after_exit(),
        "the group was killed after the leader's exit: {p:?}"
    );
    assert_eq!(
        p.stderr,
        Some(StreamEnd::EofAfterShutdown),
        "stderr ended when the grandchild died: {p:?}"
    );
    assert!(matches!(
        p.stdout,
        Some(StreamEnd::Eof | StreamEnd::EofAfterShutdown)
    ));
    assert_eq!(p.cancel_to_exit, None, "a shutdown is no cancel: {p:?}");
    assert_eq!(parse_errors(&record.metrics), 1, "{:?}", record.metrics);
    assert!(took < stdin_grace + term_grace + 2 * drain + Duration::from_secs(3));
    let left = leaks.assert_none_left();
    eprintln!(
        "{}: grandchild {gc} in the group: shutdown {took:?} (exit {:?}, KILL {:?}), grandchild \
         gone {gone:?} after it, nothing left {left:?} later",
        A::NAME,
        p.exited_at,
        p.kill_sent_at
    );
}

/// G11: a grandchild that left the group (`setsid`) and holds stderr cannot
/// be killed by the group kill; shutdown still finishes within
/// stdin grace + TERM grace + 2 × drain deadline (plus slack), abandoning
/// the stderr reader (`AbandonedAfterDeadline`). The test then kills the
/// escaped grandchild itself (its `LeakCheck` does so even on failure).
pub fn g11_escaped_grandchild_holding_stderr_is_abandoned_after_the_deadline<A: Adapter>() {
    let mut leaks = LeakCheck::new::<A>("g11_escaped");
    let opts = options(4 << 20);
    let (stdin_grace, term_grace, drain) = graces(&opts);
    let t = Instant::now();
    let client = spawn::<A>(
        &mut leaks,
        fixture_helper(&["escaped-grandchild", "30"]),
        opts,
    );
    let pid = client.pid();
    // Found by its environment tag: it left the group, so a group scan misses it.
    let mut gc = 0;
    wait_until(PROMPT, POLL, || {
        gc = leaks
            .tagged_running("escaped-grandchild-stderr")
            .into_iter()
            .find(|&p| proc_stat(p).is_some_and(|s| s.pgrp != pid))
            .unwrap_or(0);
        gc != 0
    })
    .expect("the escaped grandchild runs in its own group");
    let (record, took) = shutdown_within::<A>(client, LONG);
    let bound = stdin_grace + term_grace + 2 * drain + Duration::from_secs(3);
    assert!(took < bound, "shutdown took {took:?}, bound {bound:?}");
    let p = &record.process;
    assert_eq!(
        p.stderr,
        Some(StreamEnd::AbandonedAfterDeadline),
        "the escaped grandchild holds stderr: {p:?}"
    );
    assert_eq!(record.exit_status(), Some(ExitStatus::Code(0)), "{p:?}");
    assert!(
        pid_alive(gc),
        "the grandchild escaped the group kill (else this test proves nothing)"
    );
    assert!(group_members(pid).is_empty());
    signal_pid(gc, Signal::SIGKILL).expect("kill the escaped grandchild by pid");
    let left = leaks.assert_none_left();
    eprintln!(
        "{}: escaped grandchild {gc}: shutdown {took:?} (bound {bound:?}, {:?} since spawn), \
         stderr {:?}; killed by pid, gone {left:?} later",
        A::NAME,
        t.elapsed(),
        p.stderr
    );
}

/// The recycled-group-id rule (G11), checked from `/proc` for an owner whose leader exits while
/// its group is emptied (the only other member escaped with `setsid`, holding a pipe): the
/// leader must stay an unreaped zombie — which keeps its pid, and so its group id, from being
/// given to another program — at least until the group `SIGKILL` the supervisor sends
/// `drain` after the exit, and must be reaped (its pid free) once the owner is done.
/// `kill_sent` is when that `SIGKILL` went out, where the owner's record says so.
/// An owner that reaps at the exit (and then signals a free, reusable id) fails here: its
/// leader is never seen a zombie for more than an instant.
pub fn assert_zombie_until_the_end(
    who: &str,
    life: &LeaderLife,
    drain: Duration,
    kill_sent: Option<Instant>,
    ended: Instant,
) {
    let zombie = life.zombie_for();
    eprintln!(
        "{who}: leader {:?} a zombie for {zombie:?} (drain deadline {drain:?}), last seen so \
         {:?} before its owner ended",
        life.pid,
        life.last_zombie.map(|z| ended.saturating_duration_since(z))
    );
    assert!(
        zombie >= drain,
        "{who}: the leader was reaped while its group could still be signalled (a zombie for \
         {zombie:?}, drain deadline {drain:?}): {life:?}"
    );
    if let (Some(kill), Some(last)) = (kill_sent, life.last_zombie) {
        assert!(
            last >= kill,
            "{who}: the group SIGKILL went out {:?} after the leader was last seen unreaped",
            kill.duration_since(last)
        );
    }
    let pid = life.pid.expect("the leader was found");
    assert!(
        proc_stat(pid).is_none_or(|s| s.state != 'Z' || s.pgrp != pid),
        "{who}: the leader {pid} is still an unreaped zombie after its owner ended"
    );
}

/// G11: a server whose leader exits while its group is emptied (an escaped grandchild holds
/// stderr) stays a zombie while the supervisor may still signal its group — through the group
/// `SIGKILL` after the exit — and is reaped when the session ends, so a recycled group id is
/// never signalled (see [`assert_zombie_until_the_end`]).
pub fn g11_leader_stays_a_zombie_while_its_group_may_be_signalled<A: Adapter>() {
    let mut leaks = LeakCheck::new::<A>("g11_zombie_leader");
    let mut opts = options(4 << 20);
    let drain = Duration::from_millis(500);
    opts.supervisor_mut().reader_drain_deadline(drain);
    let client = spawn::<A>(
        &mut leaks,
        fixture_helper(&["escaped-grandchild", "30"]),
        opts,
    );
    // The core stamps the record from its own clock read inside `spawn`: no later than this.
    let spawned = Instant::now();
    let pid = client.pid();
    let watch = LeaderWatch::pid(pid);
    let mut gc = 0;
    wait_until(PROMPT, POLL, || {
        gc = leaks
            .tagged_running("escaped-grandchild-stderr")
            .into_iter()
            .find(|&p| proc_stat(p).is_some_and(|s| s.pgrp != pid))
            .unwrap_or(0);
        gc != 0
    })
    .expect("the escaped grandchild runs in its own group");
    // No shutdown: the session ends by itself (exit, drain, group SIGKILL, drain, abandon).
    let (record, took) = super::bounded(LONG, &format!("{}: wait", A::NAME), move || client.wait());
    let ended = Instant::now();
    let life = watch.finish();
    let _ = signal_pid(gc, Signal::SIGKILL);
    let p = &record.process;
    assert_eq!(record.exit_status(), Some(ExitStatus::Code(0)), "{p:?}");
    assert!(
        p.group_killed_after_exit(),
        "the supervisor signalled the group after the leader's exit: {p:?}"
    );
    let kill_sent = p.kill_sent_at.map(|d| spawned + d);
    assert_zombie_until_the_end(A::NAME, &life, drain, kill_sent, ended);
    let left = leaks.assert_none_left();
    eprintln!(
        "{}: zombie leader: session ended by itself in {took:?} (exit {:?}, KILL {:?}), nothing \
         left {left:?} later",
        A::NAME,
        p.exited_at,
        p.kill_sent_at
    );
}

/// Waits until group `pid` is empty and a subprocess joined it.
fn wait_for_subprocess(pid: u32) -> u32 {
    let mut sub = 0;
    wait_until(PROMPT, POLL, || {
        sub = group_members(pid)
            .into_iter()
            .find(|&p| p != pid)
            .unwrap_or(0);
        sub != 0
    })
    .unwrap_or_else(|| panic!("no subprocess in group {pid}"));
    sub
}

/// G11: dropping the client in the middle of a request (whose work runs a
/// subprocess in the server's group) kills the whole group; the request
/// then ends with `SessionClosed` instead of hanging.
pub fn g11_dropping_the_client_mid_request_kills_the_process_group<A: Adapter>() {
    let mut leaks = LeakCheck::new::<A>("g11_drop");
    let client = start::<A>(&mut leaks, &[], options(4 << 20));
    let pid = client.pid();
    let pending = client
        .start(
            "tools/call",
            tool("subprocess", json!({"seconds": 30})),
            Some(LONG),
        )
        .expect("sent");
    let sub = wait_for_subprocess(pid);
    let t = Instant::now();
    drop(client);
    let gone = wait_until(PROMPT, POLL, || {
        group_members(pid).is_empty() && !pid_alive(pid) && !pid_alive(sub)
    })
    .unwrap_or_else(|| {
        panic!(
            "group {pid} still has {:?} after the client was dropped",
            group_members(pid)
        )
    });
    let (r, _) = wait_within(pending, PROMPT);
    assert!(
        matches!(r, Err(RequestError::Failed(RequestFailure::SessionClosed))),
        "{r:?}"
    );
    let left = leaks.assert_none_left();
    eprintln!(
        "{}: client dropped mid-request: server {pid} and subprocess {sub} gone {gone:?} after \
         the drop ({:?} incl. the request's end), nothing left {left:?} later",
        A::NAME,
        t.elapsed()
    );
}

/// G11: 20 clients at once, each with a request running a subprocess; half
/// shut down (concurrently), half dropped — some of those with their request
/// handle still held, some after dropping it. Afterwards all 20 process
/// groups are empty and no tagged process is left.
pub fn g11_twenty_clients_shut_down_or_dropped_leave_no_process<A: Adapter>() {
    let n = 20;
    let mut leaks = LeakCheck::new::<A>("g11_twenty");
    let t = Instant::now();
    let mut clients = Vec::new();
    let mut pendings: Vec<Option<Box<dyn SuitePending>>> = Vec::new();
    for _ in 0..n {
        let client = start::<A>(&mut leaks, &[], options(1 << 20));
        pendings.push(Some(
            client
                .start(
                    "tools/call",
                    tool("subprocess", json!({"seconds": 30})),
                    Some(LONG),
                )
                .expect("sent"),
        ));
        clients.push(client);
    }
    let pids: Vec<u32> = clients.iter().map(|c| c.pid()).collect();
    for &pid in &pids {
        wait_for_subprocess(pid);
    }
    let started = t.elapsed();
    let (tx, rx) = mpsc::channel();
    let mut dropped = 0;
    for (i, client) in clients.into_iter().enumerate() {
        if i % 2 == 0 {
            let tx = tx.clone();
            thread::spawn(move || {
                let _ = tx.send(client.shutdown());
            });
        } else {
            if i % 4 == 3 {
                // Nothing of the session is held any more once the client goes.
                drop(pendings[i].take());
            }
            drop(client);
            dropped += 1;
        }
    }
    drop(tx);
    let deadline = Instant::now() + LONG;
    let mut records = Vec::new();
    while records.len() < n - dropped {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(r) => records.push(r),
            Err(e) => panic!(
                "{} of {} shutdowns returned within {LONG:?} ({e})",
                records.len(),
                n - dropped
            ),
        }
    }
    for r in &records {
        assert!(r.exit_status().is_some(), "{:?}", r.process);
        assert_streams_ended(r);
    }
    let all_gone = wait_until(LONG, POLL, || {
        pids.iter().all(|&p| group_members(p).is_empty())
    })
    .unwrap_or_else(|| {
        let left: Vec<_> = pids
            .iter()
            .map(|&p| (p, group_members(p)))
            .filter(|(_, m)| !m.is_empty())
            .collect();
        panic!("groups not empty: {left:?}")
    });
    for pending in pendings.into_iter().flatten() {
        let (r, _) = wait_within(pending, PROMPT);
        assert!(r.is_err(), "a request outlived its session: {r:?}");
    }
    let left = leaks.assert_none_left();
    eprintln!(
        "{}: {n} clients started with a subprocess each in {started:?}; {} shut down, {dropped} \
         dropped; all {n} groups empty {all_gone:?} later; ended by {:?}; nothing left {left:?} \
         after that",
        A::NAME,
        records.len(),
        records
            .iter()
            .map(|r| r.process.ended_by)
            .collect::<Vec<_>>()
    );
}
