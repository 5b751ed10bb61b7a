//! `run_helper`: run a command-line helper from inside a tool.
//!
//! # An owner that outlives the handler
//!
//! A helper run has an owner of its own: a thread that drives it on
//! `async_io::block_on` and holds the [`HelperRun`] state machine, the
//! child, both pipes, the timer and the cancels. Each turn it races "a
//! stdout chunk, a stderr chunk, the exit, the approver's answer, the
//! cancels, the core's deadline" (`futures_lite::future::race`, which picks
//! at random among ready branches, so a flood on one stream starves neither
//! the other stream nor the cancel and the timer), so the pipes are read for
//! as long as the run lasts (G1, G10), whatever executor the handler runs on.
//!
//! The future [`run_helper`] returns only relays: it runs the approver (which
//! may borrow) when the owner asks, and waits for the outcome. Dropping it (a
//! handler `serve` aborted on a cancel) cancels the run, and the owner
//! follows the supervisor path — `SIGTERM`, grace, `SIGKILL`, then the
//! readers drained with a deadline — and hands the final record to
//! `options.records`. Only if the owner itself is torn down unfinished does
//! the spawned helper's [`Leader`] kill its process group at once.
//!
//! The exit is observed without reaping (the helper stays a zombie, so its
//! group id stays ours while the supervisor may signal it) and the helper is
//! reaped at `Finished`; its group is never signalled after that.
//!
//! [`HelperRun`]: mcp_stdio_core::helper::HelperRun

use std::future::{pending, Future};
use std::io;
use std::pin::pin;
use std::time::Instant;

use async_io::Timer;
use async_process::{Child, ChildStderr, ChildStdout};
use futures_lite::future::race;
use futures_lite::AsyncReadExt;
use mcp_stdio_core::helper::{HelperAction, HelperOptions, HelperOutcome, RecordTap};
use mcp_stdio_core::CommandSpec;

use crate::leader::Leader;
use crate::os;
use crate::serve::CancelToken;

/// Bytes read per read call, for each stream.
const READ_CHUNK: usize = 16 * 1024;

use mcp_stdio_sys::stamp;

pub use mcp_stdio_core::helper::ApprovalRequest;

/// Decides approval requests: `true` approves, `false` denies. The deadline
/// is enforced by [`run_helper_with_approval`], not by the approver: an
/// approver that never answers is dropped at the deadline.
pub trait Approver: Send + Sync {
    /// Asks for a decision.
    fn approve(&self, request: ApprovalRequest) -> impl Future<Output = bool> + Send;
}

impl<F, Fut> Approver for F
where
    F: Fn(ApprovalRequest) -> Fut + Send + Sync,
    Fut: Future<Output = bool> + Send,
{
    fn approve(&self, request: ApprovalRequest) -> impl Future<Output = bool> + Send {
        self(request)
    }
}

/// An approver that is never consulted (no approval step configured).
#[derive(Debug, Clone, Copy)]
struct NoApprover;

impl Approver for NoApprover {
    #[allow(clippy::manual_async_fn)] // The trait fixes the signature.
    fn approve(&self, _request: ApprovalRequest) -> impl Future<Output = bool> + Send {
        async { false }
    }
}

/// Runs `command` as a helper: its own process group, stdin from
/// `/dev/null`, stdout and stderr each captured within its budget and read
/// to EOF even past it (G10). `cancel` → `SIGTERM` to the group → grace →
/// `SIGKILL` (G7, G11). The outcome holds the exit status actually observed,
/// both captures and the call record (G12).
///
/// The run has an owner of its own (a thread; see the module docs) that
/// outlives this future: if the future is dropped before it completes (a
/// cancelled handler), the owner cancels the run, follows the supervisor path
/// (`SIGTERM`, grace, `SIGKILL`, drain) and hands the final record to
/// `options.records`. Works on any executor.
pub async fn run_helper(
    command: &CommandSpec,
    options: &HelperOptions,
    cancel: &CancelToken,
) -> HelperOutcome {
    run_helper_with_approval(command, options, cancel, &NoApprover).await
}

/// [`run_helper`] with an approval step when `options.get_config()` has an
/// approval deadline: the request is raised before the spawn, without
/// waiting for any output, and its deadline runs on the clock alone. The
/// approver's future is raced against that deadline and `cancel`, so one
/// that never answers cannot hold the run past it.
pub async fn run_helper_with_approval<A: Approver>(
    command: &CommandSpec,
    options: &HelperOptions,
    cancel: &CancelToken,
    approver: &A,
) -> HelperOutcome {
    let (ask_tx, asks) = async_channel::bounded::<Ask>(1);
    let (done_tx, done) = async_channel::bounded::<Outcome>(1);
    let caller_gone = CancelToken::new();
    let owner = {
        let (command, options, cancel) = (command.clone(), options.clone(), cancel.clone());
        let caller_gone = caller_gone.clone();
        std::thread::Builder::new()
            .name("mcp-stdio-helper".into())
            .spawn(move || {
                let run = std::panic::AssertUnwindSafe(|| {
                    async_io::block_on(own_run(command, options, cancel, caller_gone, ask_tx))
                });
                let _ = done_tx.try_send(std::panic::catch_unwind(run).map(Box::new));
            })
    };
    if let Err(e) = owner {
        // No thread for the owner: the run ends before anything is spawned,
        // and says why.
        tracing::warn!(error = %e, "no thread for a helper run's owner");
        let mut run = options.start(stamp());
        let mut tap = RecordTap::default();
        run.cancel(stamp());
        loop {
            match run.poll_action() {
                Some(HelperAction::Finished(outcome)) => {
                    options.release(&mut run);
                    tap.finish(&outcome.record, options.get_records());
                    return *outcome;
                }
                Some(_) => {}
                None => run.handle_timeout(stamp()),
            }
        }
    }
    // Dropped unfinished: the owner cancels the run and finishes it.
    let _gone = CancelOnDrop(caller_gone);
    loop {
        let next = race(async { Relay::Done(done.recv().await) }, async {
            asks.recv()
                .await
                .map_or(Relay::Idle, |ask| Relay::Ask(Box::new(ask)))
        })
        .await;
        match next {
            Relay::Done(r) => return finish(r),
            Relay::Ask(ask) => {
                let Ask { request, answer } = *ask;
                // The owner may end the run while the card is up (deadline,
                // cancel): then its outcome wins.
                let decided = race(
                    async { Relay::Approved(approver.approve(request).await) },
                    async { Relay::Done(done.recv().await) },
                )
                .await;
                match decided {
                    Relay::Approved(approved) => {
                        let _ = answer.try_send(approved);
                    }
                    Relay::Done(r) => return finish(r),
                    _ => {}
                }
            }
            Relay::Idle => return finish(done.recv().await),
            Relay::Approved(_) => {}
        }
    }
}

/// The owner's outcome; a panic in it is the caller's panic.
fn finish(r: Result<Outcome, async_channel::RecvError>) -> HelperOutcome {
    match r {
        Ok(Ok(outcome)) => *outcome,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        // The owner always sends before its thread ends.
        Err(_) => panic!("the helper's owner ended without an outcome"),
    }
}

/// What the relaying future does next.
/// The owner's outcome, or its panic.
type Outcome = std::thread::Result<Box<HelperOutcome>>;

enum Relay {
    Done(Result<Outcome, async_channel::RecvError>),
    Ask(Box<Ask>),
    Approved(bool),
    Idle,
}

/// An approval the owner asks the caller for.
struct Ask {
    request: ApprovalRequest,
    answer: async_channel::Sender<bool>,
}

/// Fires the owner's "caller gone" cancel when the caller's future is
/// dropped; after a normal end it fires too, harmlessly.
struct CancelOnDrop(CancelToken);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// The owner: the state machine, the process, both readers and the cancels.
async fn own_run(
    command: CommandSpec,
    options: HelperOptions,
    cancel: CancelToken,
    caller_gone: CancelToken,
    asks: async_channel::Sender<Ask>,
) -> HelperOutcome {
    // Counted while alive, so that `serve` waits for this run at its end.
    let _ticket = mcp_stdio_sys::helper_owners::OwnerTicket::new();
    let command = &command;
    let cancel = &cancel;
    let mut run = options.start(stamp());
    let mut tap = RecordTap::default();
    let sink = options.get_records();
    // Kills the group if the run is torn down unfinished; reaped at `Finished`.
    let mut helper: Option<Leader> = None;
    let mut exited = false;
    let mut stdout: Option<ChildStdout> = None;
    let mut stderr: Option<ChildStderr> = None;
    let mut approval: Option<async_channel::Receiver<bool>> = None;
    // Built once and kept across iterations: one listener for the whole run.
    let mut cancelled = pin!(cancel.cancelled());
    let mut gone = pin!(caller_gone.cancelled());
    let mut cancel_seen = false;
    // One timer, moved only when the core's deadline changes.
    let mut timer = Timer::never();
    let mut armed: Option<Instant> = None;
    let mut out_buf = vec![0u8; READ_CHUNK];
    let mut err_buf = vec![0u8; READ_CHUNK];
    if cancel.is_cancelled() {
        // Cancelled before the run began: it ends without a spawn (G7).
        cancel_seen = true;
        run.cancel(stamp());
    }
    loop {
        while let Some(action) = run.poll_action() {
            // The record of each new state goes out before the action it
            // leads to: `authorized` before the spawn (G12).
            tap.observe(&run, sink);
            match action {
                HelperAction::RequestApproval { deadline } => {
                    let (answer, answered) = async_channel::bounded(1);
                    let request = run.approval_request(deadline);
                    // Capacity 1, one approval per run: `Full` cannot happen;
                    // `Closed` means the caller is gone, which cancels below.
                    let _ = asks.try_send(Ask { request, answer });
                    approval = Some(answered);
                }
                HelperAction::Spawn => {
                    approval = None;
                    match spawn(command) {
                        Ok(mut child) => {
                            stdout = child.stdout.take();
                            stderr = child.stderr.take();
                            helper = Some(Leader::new(child));
                            run.handle_spawned(stamp());
                        }
                        Err(e) => run.handle_spawn_failed(stamp(), &e.to_string()),
                    }
                }
                HelperAction::SignalGroup(sig) => {
                    if let Some(h) = &helper {
                        let _ = h.signal(sig);
                    }
                }
                HelperAction::AbandonReaders => {
                    // Dropping a read end is the whole of it; a grandchild
                    // still writing gets EPIPE.
                    stdout = None;
                    stderr = None;
                }
                HelperAction::Finished(outcome) => {
                    if let Some(h) = &mut helper {
                        h.reap();
                    }
                    options.release(&mut run);
                    tap.finish(&outcome.record, sink);
                    return *outcome;
                }
                _ => {}
            }
            tap.observe(&run, sink);
        }
        tap.observe(&run, sink);

        let deadline = run.poll_timeout();
        if deadline != armed {
            match deadline {
                Some(d) => timer.set_at(d),
                None => timer = Timer::never(),
            }
            armed = deadline;
        }

        let wake = {
            let out = async {
                match stdout.as_mut() {
                    Some(pipe) => Wake::Stdout(pipe.read(&mut out_buf).await),
                    None => pending().await,
                }
            };
            let err = async {
                match stderr.as_mut() {
                    Some(pipe) => Wake::Stderr(pipe.read(&mut err_buf).await),
                    None => pending().await,
                }
            };
            let exit = async {
                match helper.as_mut().filter(|_| !exited) {
                    Some(h) => Wake::Exited(h.exited().await),
                    None => pending().await,
                }
            };
            let answer = async {
                match approval.as_mut() {
                    Some(answer) => Wake::Answered(answer.recv().await.ok()),
                    None => pending().await,
                }
            };
            let cancel = async {
                if cancel_seen {
                    pending().await
                } else {
                    race(cancelled.as_mut(), gone.as_mut()).await;
                    Wake::Cancelled
                }
            };
            let timeout = async {
                (&mut timer).await;
                Wake::Timeout
            };
            // A balanced tree: each ready branch wins with probability ≥ 1/4.
            race(
                race(out, err),
                race(race(exit, answer), race(cancel, timeout)),
            )
            .await
        };

        match wake {
            Wake::Stdout(Ok(n)) if n > 0 => run.handle_stdout(stamp(), &out_buf[..n]),
            Wake::Stderr(Ok(n)) if n > 0 => run.handle_stderr(stamp(), &err_buf[..n]),
            Wake::Stdout(Err(e)) | Wake::Stderr(Err(e))
                if e.kind() == io::ErrorKind::Interrupted => {}
            Wake::Stdout(r) => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "reading the helper's stdout failed");
                }
                stdout = None;
                run.handle_stdout_eof(stamp());
            }
            Wake::Stderr(r) => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "reading the helper's stderr failed");
                }
                stderr = None;
                run.handle_stderr_eof(stamp());
            }
            Wake::Exited(status) => {
                // Never polled again: the exit is reported once.
                exited = true;
                match status {
                    Ok(s) => run.handle_exited(stamp(), s),
                    // No status can ever be observed: the supervisor's
                    // deadlines end the run (`unknown`).
                    Err(e) => tracing::warn!(error = %e, "waiting for the helper failed"),
                }
            }
            Wake::Answered(approved) => {
                approval = None;
                let at = stamp();
                // No answer: the caller went away while the card was up.
                let r = match approved {
                    Some(true) => run.approve(at),
                    Some(false) => run.deny(at),
                    None => {
                        cancel_seen = true;
                        run.cancel(at);
                        Ok(())
                    }
                };
                if let Err(e) = r {
                    tracing::debug!(error = %e, "approval answer not applied");
                }
            }
            Wake::Cancelled => {
                cancel_seen = true;
                run.cancel(stamp());
            }
            Wake::Timeout => {
                // A fired timer never fires again: re-arm on the next turn.
                armed = None;
                run.handle_timeout(stamp());
            }
        }
    }
}

/// What woke the run.
enum Wake {
    Stdout(io::Result<usize>),
    Stderr(io::Result<usize>),
    Exited(io::Result<mcp_stdio_core::ExitStatus>),
    Answered(Option<bool>),
    Cancelled,
    Timeout,
}

fn spawn(command: &CommandSpec) -> io::Result<Child> {
    let mut cmd = os::command(command);
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    cmd.spawn()
}
