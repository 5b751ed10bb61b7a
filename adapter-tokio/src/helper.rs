//! `run_helper`: run a command-line helper from inside a tool.

use std::future::Future;

use mcp_stdio_core::helper::{HelperAction, HelperOptions, HelperOutcome, RecordTap};
use mcp_stdio_core::CommandSpec;
use tokio::io::AsyncReadExt;
use tokio::process::{ChildStderr, ChildStdout};
use tokio::sync::{mpsc, oneshot};

use crate::leader::Leader;
use crate::os;
use crate::serve::CancelToken;
use crate::stdio::sleep_until_opt;

/// Bytes read per read call, for each stream.
const READ_CHUNK: usize = 16 * 1024;

pub(crate) use mcp_stdio_sys::stamp;

pub use mcp_stdio_core::helper::ApprovalRequest;

/// Decides approval requests: `true` approves, `false` denies. The deadline
/// is enforced by [`run_helper_with_approval`], not by the approver.
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
/// The run has an owner of its own, a task that holds the process, both
/// readers and the cancel, and outlives this future: if the future is
/// dropped before it completes (a handler `serve` aborted on a cancel), the
/// owner cancels the run and follows the supervisor path — `SIGTERM`, grace,
/// `SIGKILL`, then the readers drained with a deadline — and hands the final
/// record to `options.records` ([`RecordSink`](mcp_stdio_core::helper::RecordSink)).
/// Must be called within a tokio runtime.
pub async fn run_helper(
    command: &CommandSpec,
    options: &HelperOptions,
    cancel: &CancelToken,
) -> HelperOutcome {
    run_helper_with_approval(command, options, cancel, &NoApprover).await
}

/// An approval the owner asks the caller for.
struct Ask {
    request: ApprovalRequest,
    answer: oneshot::Sender<bool>,
}

/// [`run_helper`] with an approval step when `options.get_config()` has an
/// approval deadline: the request is raised before the spawn, without
/// waiting for any output, and its deadline runs on the clock alone. The
/// approver runs in this future (it may borrow); the run itself in its
/// owner, so dropping this future while the approval is up cancels the run
/// (no helper is spawned) and the final record still reaches the sink.
pub async fn run_helper_with_approval<A: Approver>(
    command: &CommandSpec,
    options: &HelperOptions,
    cancel: &CancelToken,
    approver: &A,
) -> HelperOutcome {
    let (ask_tx, mut asks) = mpsc::channel::<Ask>(1);
    let caller_gone = CancelToken::new();
    let mut owner = tokio::spawn(own_run(
        command.clone(),
        options.clone(),
        cancel.clone(),
        caller_gone.clone(),
        ask_tx,
    ));
    // Dropped unfinished: the owner cancels the run and finishes it.
    let _gone = CancelOnDrop(caller_gone);
    let mut asking = true;
    loop {
        tokio::select! {
            done = &mut owner => return finished(done),
            ask = asks.recv(), if asking => match ask {
                Some(Ask { request, answer }) => tokio::select! {
                    approved = approver.approve(request) => {
                        let _ = answer.send(approved);
                    }
                    done = &mut owner => return finished(done),
                },
                None => asking = false,
            },
        }
    }
}

/// The owner's result: a panic in it is the caller's panic.
fn finished(done: Result<HelperOutcome, tokio::task::JoinError>) -> HelperOutcome {
    match done {
        Ok(outcome) => outcome,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Only a runtime shutting down cancels the owner, and that drops
        // this future first.
        Err(e) => panic!("the helper's owner task ended without an outcome: {e}"),
    }
}

/// Fires the owner's "caller gone" cancel when the caller's future is
/// dropped; after a normal end it fires too, harmlessly (the run is over).
struct CancelOnDrop(CancelToken);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// The owner: the state machine, the process, both readers and the cancels,
/// in a task that outlives the caller.
async fn own_run(
    command: CommandSpec,
    options: HelperOptions,
    cancel: CancelToken,
    caller_gone: CancelToken,
    asks: mpsc::Sender<Ask>,
) -> HelperOutcome {
    // Counted while alive, so that `serve` waits for this run at its end.
    let _ticket = mcp_stdio_sys::helper_owners::OwnerTicket::new();
    let mut run = options.start(stamp());
    let mut tap = RecordTap::default();
    let sink = options.get_records();
    // Kills the group if the run is dropped unfinished; reaped at `Finished`.
    let mut leader: Option<Leader> = None;
    let mut stdout: Option<ChildStdout> = None;
    let mut stderr: Option<ChildStderr> = None;
    let mut exited = false;
    let mut cancel_seen = false;
    let mut approval: Option<oneshot::Receiver<bool>> = None;
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
                    let (answer, answered) = oneshot::channel();
                    let request = run.approval_request(deadline);
                    // Capacity 1, one approval per run: `Full` cannot happen;
                    // `Closed` means the caller is gone, which cancels below.
                    let _ = asks.try_send(Ask { request, answer });
                    approval = Some(answered);
                }
                HelperAction::Spawn => {
                    approval = None;
                    match spawn(&command) {
                        Ok((l, out, err)) => {
                            stdout = out;
                            stderr = err;
                            leader = Some(l);
                            run.handle_spawned(stamp());
                        }
                        Err(e) => run.handle_spawn_failed(stamp(), &e.to_string()),
                    }
                }
                HelperAction::SignalGroup(sig) => {
                    if let Some(l) = leader.as_ref() {
                        let _ = l.signal(sig);
                    }
                }
                HelperAction::AbandonReaders => {
                    stdout = None;
                    stderr = None;
                }
                HelperAction::Finished(outcome) => {
                    // Supervision over: reaped, and never signalled again.
                    if let Some(l) = leader.as_mut() {
                        l.reap();
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
        let deadline = run.poll_timeout().map(tokio::time::Instant::from_std);
        tokio::select! {
            r = read_opt(&mut stdout, &mut out_buf) => match r {
                Ok(n) if n > 0 => run.handle_stdout(stamp(), &out_buf[..n]),
                _ => {
                    stdout = None;
                    run.handle_stdout_eof(stamp());
                }
            },
            r = read_opt(&mut stderr, &mut err_buf) => match r {
                Ok(n) if n > 0 => run.handle_stderr(stamp(), &err_buf[..n]),
                _ => {
                    stderr = None;
                    run.handle_stderr_eof(stamp());
                }
            },
            // Seen without reaping: the zombie keeps the group id ours until `Finished`.
            status = exited_opt(&mut leader), if !exited => {
                exited = true;
                match status {
                    Ok(s) => run.handle_exited(stamp(), s),
                    Err(e) => tracing::warn!(error = %e, "waiting for the helper failed"),
                }
            }
            answer = answer_opt(&mut approval) => {
                approval = None;
                let at = stamp();
                // No answer: the caller went away while the card was up.
                let r = match answer {
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
            () = cancel.cancelled(), if !cancel_seen => {
                cancel_seen = true;
                run.cancel(stamp());
            }
            () = caller_gone.cancelled(), if !cancel_seen => {
                cancel_seen = true;
                run.cancel(stamp());
            }
            () = sleep_until_opt(deadline) => run.handle_timeout(stamp()),
        }
    }
}

/// The helper as its group's [`Leader`], and its two output pipes.
fn spawn(
    command: &CommandSpec,
) -> std::io::Result<(Leader, Option<ChildStdout>, Option<ChildStderr>)> {
    let mut cmd = os::command(command);
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn()?;
    let (out, err) = (child.stdout.take(), child.stderr.take());
    Ok((Leader::new(child)?, out, err))
}

async fn read_opt<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut Option<R>,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    match reader {
        Some(r) => r.read(buf).await,
        None => std::future::pending().await,
    }
}

async fn exited_opt(leader: &mut Option<Leader>) -> std::io::Result<mcp_stdio_core::ExitStatus> {
    match leader {
        Some(l) => l.exited().await,
        None => std::future::pending().await,
    }
}

/// The approver's answer, `None` if the caller went away without one.
async fn answer_opt(answered: &mut Option<oneshot::Receiver<bool>>) -> Option<bool> {
    match answered {
        Some(rx) => rx.await.ok(),
        None => std::future::pending().await,
    }
}
