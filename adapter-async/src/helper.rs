//! `run_helper`: run a command-line helper from inside a tool, on any
//! [`Runtime`].
//!
//! # An owner that outlives the handler
//!
//! A helper run has an owner of its own, run where the runtime runs drivers
//! ([`Runtime::spawn_driver`]: a tokio task, or a thread of its own on
//! async-std). It holds the core's [`HelperRun`], the child, both pipes, the
//! timer and the cancels, and is one `poll` like every driver here: each
//! turn drains the run's actions, then polls the cancels, the exit, stdout,
//! stderr, the approver's answer and the timer in that order, so the pipes
//! are read for as long as the run lasts (G1, G10), whatever the handler does.
//!
//! The future [`run_helper`] returns only relays: it runs the approver (which
//! may borrow) when the owner asks, and waits for the outcome. Dropping it (a
//! handler `serve` aborted on a cancel) cancels the run, and the owner
//! follows the supervisor path — `SIGTERM`, grace, `SIGKILL`, then the
//! readers drained with a deadline — and hands the final record to
//! `options.records`. Only if the owner itself is torn down unfinished does
//! the helper's [`Leader`] kill its process group at once.
//!
//! The exit is observed without reaping (the helper stays a zombie, so its
//! group id stays ours while the supervisor may signal it) and the helper is
//! reaped at `Finished`; its group is never signalled after that.
//!
//! [`HelperRun`]: mcp_stdio_core::HelperRun

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use async_channel::{Receiver, Sender};
use futures_lite::future::race;
use futures_lite::{FutureExt, Stream};
pub use mcp_stdio_core::ApprovalRequest;
use mcp_stdio_core::ChildStream;
use mcp_stdio_core::CommandSpec;
use mcp_stdio_core::{
    HelperAction, HelperInput, HelperOptions, HelperOutcome, HelperOutput, HelperRun, RecordTap,
};
use mcp_stdio_sys::stamp;

use crate::cancel::{CancelSignal, CancelToken, Cancelled};
use crate::leader::Leader;
use crate::pipe::Pipe;
use crate::runtime::{DeadlineTimer, Runtime};

/// Bytes read per read call, for each stream (one buffer each, reused).
const READ_CHUNK: usize = 16 * 1024;
/// Reads of each stream per turn.
const READS_PER_TURN: usize = 16;
/// Turns in one `poll` before the owner yields to its executor.
const TURNS_PER_POLL: usize = 32;

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
/// The run has an owner of its own (see the module docs) that outlives this
/// future: if the future is dropped before it completes (a cancelled
/// handler), the owner cancels the run, follows the supervisor path
/// (`SIGTERM`, grace, `SIGKILL`, drain) and hands the final record to
/// `options.records`
/// ([`RecordSink`](mcp_stdio_core::RecordSink)).
pub async fn run_helper<R: Runtime>(
    command: &CommandSpec,
    options: &HelperOptions,
    cancel: &impl CancelSignal,
) -> HelperOutcome {
    run_helper_with_approval::<R, _>(command, options, cancel, &NoApprover).await
}

/// The owner's outcome, or its panic.
type Outcome = Result<Box<HelperOutcome>, Box<dyn Any + Send>>;

/// An approval the owner asks the caller for.
struct Ask {
    request: ApprovalRequest,
    answer: Sender<bool>,
}

/// What the relaying future does next.
enum Relay {
    Done(Result<Outcome, async_channel::RecvError>),
    Ask(Box<Ask>),
    Approved(bool),
    Idle,
}

/// [`run_helper`] with an approval step when `options.get_approval()` gives an
/// approval deadline: the request is raised before the spawn, without
/// waiting for any output, and its deadline runs on the clock alone. The
/// approver runs in this future (it may borrow), raced against the owner's
/// end, so one that never answers cannot hold the run past its deadline;
/// dropping this future while the approval is up cancels the run (no helper
/// is spawned) and the final record still reaches the sink.
pub async fn run_helper_with_approval<R: Runtime, A: Approver>(
    command: &CommandSpec,
    options: &HelperOptions,
    cancel: &impl CancelSignal,
    approver: &A,
) -> HelperOutcome {
    let started = R::current().and_then(|rt| {
        let (owner, relay) = start(&rt, command, options, cancel);
        rt.spawn_driver("mcp-stdio-helper".into(), owner)?;
        Ok(relay)
    });
    match started {
        Ok(relay) => relay.run(approver).await,
        Err(e) => {
            // No owner: the run ends before anything is spawned, and says why.
            tracing::warn!(error = %e, "no task or thread for a helper run's owner");
            unstarted(options)
        }
    }
}

/// [`run_helper_with_approval`] with the run's owner inside this future
/// instead of a task or a thread of its own, its pipes in `rt`'s reactor:
/// for a caller that drives this future to its end on `rt` (the blocking
/// adapter's `block_on`), so the run needs no thread besides the caller's.
/// Dropped unfinished, it drops the owner too, whose leader kills the
/// helper's group: use [`run_helper_with_approval`] where a caller's future
/// may be dropped (a cancelled handler) and the run must still finish.
pub async fn run_helper_here<R: Runtime, A: Approver>(
    rt: &R,
    command: &CommandSpec,
    options: &HelperOptions,
    cancel: &impl CancelSignal,
    approver: &A,
) -> HelperOutcome {
    let (owner, relay) = start(rt, command, options, cancel);
    futures_lite::future::or(relay.run(approver), async move {
        owner.await;
        // The relay ends with the outcome the owner just sent.
        std::future::pending().await
    })
    .await
}

/// The run's owner (a future that ends once it sent the outcome) and the
/// caller's side of it.
fn start<R: Runtime>(
    rt: &R,
    command: &CommandSpec,
    options: &HelperOptions,
    cancel: &impl CancelSignal,
) -> (crate::BoxFuture, Relayed) {
    let (ask_tx, asks) = async_channel::bounded::<Ask>(1);
    let (done_tx, done) = async_channel::bounded::<Outcome>(1);
    let caller_gone = CancelToken::new();
    let mut owner = Owner::new(
        rt.clone(),
        command.clone(),
        options.clone(),
        (cancel.is_cancelled(), cancel.cancelled_owned()),
        caller_gone.clone(),
        ask_tx,
    );
    let owner = Box::pin(async move {
        let run = futures_lite::future::poll_fn(move |cx| owner.poll_run(cx));
        let r = AssertUnwindSafe(run).catch_unwind().await;
        let _ = done_tx.try_send(r.map(Box::new));
    });
    let relay = Relayed {
        asks,
        done,
        gone: CancelOnDrop(caller_gone),
    };
    (owner, relay)
}

/// The caller's side of a run: the approvals it asks for, and its outcome.
struct Relayed {
    asks: Receiver<Ask>,
    done: Receiver<Outcome>,
    /// Dropped unfinished: the owner cancels the run and finishes it.
    gone: CancelOnDrop,
}

impl Relayed {
    async fn run<A: Approver>(self, approver: &A) -> HelperOutcome {
        let Self { asks, done, gone } = self;
        let _gone = gone;
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
}

/// The run of a helper whose owner could not start: cancelled before its spawn.
fn unstarted(options: &HelperOptions) -> HelperOutcome {
    let mut run = options.start(stamp());
    let mut tap = RecordTap::default();
    run.handle_input(stamp(), HelperInput::Cancel);
    loop {
        match run.poll_output() {
            HelperOutput::Action(HelperAction::Finished(outcome)) => {
                options.release(&mut run);
                tap.finish(&outcome.record, options.get_records());
                return *outcome;
            }
            HelperOutput::Action(_) => {}
            HelperOutput::Timeout(_) => run.handle_input(stamp(), HelperInput::Timeout),
        }
    }
}

/// The owner's outcome; a panic in it is the caller's panic.
fn finish(r: Result<Outcome, async_channel::RecvError>) -> HelperOutcome {
    match r {
        Ok(Ok(outcome)) => *outcome,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        // The owner always sends before it ends; a runtime shutting down
        // drops this future first.
        Err(_) => panic!("the helper's owner ended without an outcome"),
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

/// The owner: the state machine, the process, both readers and the cancels.
struct Owner<R: Runtime> {
    rt: R,
    command: CommandSpec,
    options: HelperOptions,
    run: HelperRun,
    tap: RecordTap,
    /// Kills the group if the run is torn down unfinished; reaped at `Finished`.
    helper: Option<Leader<R>>,
    stdout: Option<Pipe<R>>,
    stderr: Option<Pipe<R>>,
    out_buf: Vec<u8>,
    err_buf: Vec<u8>,
    asks: Sender<Ask>,
    approval: Option<Pin<Box<Receiver<bool>>>>,
    cancelled: Cancelled,
    gone: Cancelled,
    cancel_seen: bool,
    timer: DeadlineTimer<R>,
    /// The run's next deadline, from its last drained output.
    deadline: Option<Instant>,
    /// The outcome, once `Finished` was drained.
    outcome: Option<HelperOutcome>,
    /// Counted while alive, so that `serve` waits for this run at its end.
    _ticket: mcp_stdio_sys::helper_owners::OwnerTicket,
}

impl<R: Runtime> Owner<R> {
    fn new(
        rt: R,
        command: CommandSpec,
        options: HelperOptions,
        (cancel_seen, cancelled): (bool, Cancelled),
        caller_gone: CancelToken,
        asks: Sender<Ask>,
    ) -> Self {
        let _ticket = mcp_stdio_sys::helper_owners::OwnerTicket::new();
        let mut run = options.start(stamp());
        if cancel_seen {
            // Cancelled before the run began: it ends without a spawn (G7).
            run.handle_input(stamp(), HelperInput::Cancel);
        }
        Self {
            timer: DeadlineTimer::new(&rt),
            rt,
            command,
            options,
            run,
            tap: RecordTap::default(),
            helper: None,
            stdout: None,
            stderr: None,
            out_buf: vec![0; READ_CHUNK],
            err_buf: vec![0; READ_CHUNK],
            asks,
            approval: None,
            cancelled,
            gone: Box::pin(caller_gone.cancelled_owned()),
            cancel_seen,
            deadline: None,
            outcome: None,
            _ticket,
        }
    }

    fn poll_run(&mut self, cx: &mut Context<'_>) -> Poll<HelperOutcome> {
        for _ in 0..TURNS_PER_POLL {
            self.pump();
            if let Some(outcome) = self.outcome.take() {
                return Poll::Ready(outcome);
            }
            // The inputs in a fixed order, the exit before the pipes; each
            // input's outputs are drained before the next input.
            let mut busy = false;
            for step in [
                Self::poll_cancel,
                Self::poll_exit,
                Self::poll_stdout,
                Self::poll_stderr,
                Self::poll_answer,
                Self::poll_timer,
            ] {
                busy |= step(self, cx);
                self.pump();
                if self.outcome.is_some() {
                    break;
                }
            }
            if !busy {
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    fn poll_cancel(&mut self, cx: &mut Context<'_>) -> bool {
        if self.cancel_seen {
            return false;
        }
        let fired =
            self.cancelled.as_mut().poll(cx).is_ready() || self.gone.as_mut().poll(cx).is_ready();
        if fired {
            self.cancel_seen = true;
            self.run.handle_input(stamp(), HelperInput::Cancel);
        }
        fired
    }

    fn poll_exit(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(helper) = self.helper.as_mut().filter(|_| !self.run.exit_seen()) else {
            return false;
        };
        match helper.poll_exited(cx) {
            // Seen without reaping: the zombie keeps the group id ours.
            Poll::Ready(r) => {
                self.run.handle_input(stamp(), HelperInput::Exited(r));
                true
            }
            Poll::Pending => false,
        }
    }

    fn poll_stdout(&mut self, cx: &mut Context<'_>) -> bool {
        self.poll_stream(cx, ChildStream::Stdout)
    }

    fn poll_stderr(&mut self, cx: &mut Context<'_>) -> bool {
        self.poll_stream(cx, ChildStream::Stderr)
    }

    /// Reads `stream` while it has bytes (or its end) ready.
    fn poll_stream(&mut self, cx: &mut Context<'_>, stream: ChildStream) -> bool {
        let mut busy = false;
        for _ in 0..READS_PER_TURN {
            let (pipe, buf) = match stream {
                ChildStream::Stdout => (&mut self.stdout, &mut self.out_buf),
                ChildStream::Stderr => (&mut self.stderr, &mut self.err_buf),
            };
            let Some(p) = pipe.as_ref() else {
                break;
            };
            let Poll::Ready(r) = p.poll_read(cx, buf) else {
                break;
            };
            busy = true;
            let helper = &mut self.helper;
            let mut look = || helper.as_mut().map_or(Ok(None), Leader::try_exited);
            let read = HelperInput::Read {
                stream,
                result: r,
                buf,
                look: &mut look,
            };
            self.run.handle_input(stamp(), read);
            // After every input, its outputs: a `CloseReader` drops the pipe.
            self.pump();
        }
        busy
    }

    fn poll_answer(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(answer) = self.approval.as_mut() else {
            return false;
        };
        let Poll::Ready(approved) = answer.as_mut().poll_next(cx) else {
            return false;
        };
        self.approval = None;
        // No answer: the caller went away while the card was up.
        let input = match approved {
            Some(approved) => HelperInput::Approval(approved),
            None => {
                self.cancel_seen = true;
                HelperInput::Cancel
            }
        };
        self.run.handle_input(stamp(), input);
        true
    }

    fn poll_timer(&mut self, cx: &mut Context<'_>) -> bool {
        match self.timer.poll(cx, self.deadline) {
            Poll::Ready(now) => {
                let at = mcp_stdio_sys::stamp_at(now);
                self.run.handle_input(at, HelperInput::Timeout);
                true
            }
            Poll::Pending => false,
        }
    }

    /// Drains the run's outputs after an input, in its order; keeps the
    /// outcome once it is over, and the next deadline.
    fn pump(&mut self) {
        let sink = self.options.get_records();
        while self.outcome.is_none() {
            // The record of each new state goes out before the action it
            // leads to: `authorized` before the spawn (G12).
            self.tap.observe(&self.run, sink);
            let action = match self.run.poll_output() {
                HelperOutput::Action(action) => action,
                HelperOutput::Timeout(deadline) => {
                    self.deadline = deadline;
                    break;
                }
            };
            match action {
                HelperAction::RequestApproval { deadline } => {
                    let (answer, answered) = async_channel::bounded(1);
                    let request = self.run.approval_request(deadline);
                    // Capacity 1, one approval per run: `Full` cannot happen;
                    // `Closed` means the caller is gone, which cancels.
                    let _ = self.asks.try_send(Ask { request, answer });
                    self.approval = Some(Box::pin(answered));
                }
                HelperAction::Spawn => {
                    self.approval = None;
                    match spawn(&self.rt, &self.command) {
                        Ok((helper, stdout, stderr)) => {
                            (self.helper, self.stdout, self.stderr) =
                                (Some(helper), stdout, stderr);
                            self.run.handle_input(stamp(), HelperInput::Spawned);
                        }
                        Err(e) => {
                            let reason = e.to_string();
                            let input = HelperInput::SpawnFailed(&reason);
                            self.run.handle_input(stamp(), input);
                        }
                    }
                }
                HelperAction::SignalGroup(sig) => {
                    if let Some(h) = &self.helper {
                        let _ = h.signal(sig);
                    }
                }
                HelperAction::CloseReader(ChildStream::Stdout) => self.stdout = None,
                HelperAction::CloseReader(ChildStream::Stderr) => self.stderr = None,
                HelperAction::AbandonReaders => {
                    // Dropping a read end is the whole of it; a grandchild
                    // still writing gets EPIPE.
                    self.stdout = None;
                    self.stderr = None;
                }
                HelperAction::Finished(outcome) => {
                    if let Some(h) = &mut self.helper {
                        h.reap();
                    }
                    self.options.release(&mut self.run);
                    self.tap.finish(&outcome.record, sink);
                    self.outcome = Some(*outcome);
                    return;
                }
                _ => {}
            }
        }
        self.tap.observe(&self.run, sink);
    }
}

/// The helper and its two output pipes: its own group, stdin `/dev/null`,
/// both outputs piped.
type Spawned<R> = (Leader<R>, Option<Pipe<R>>, Option<Pipe<R>>);

/// Spawns the helper; on an error after the spawn, the leader (dropped)
/// kills and reaps it.
fn spawn<R: Runtime>(rt: &R, command: &CommandSpec) -> std::io::Result<Spawned<R>> {
    let mut cmd = mcp_stdio_sys::command(command)?;
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn()?;
    let (out, err) = (child.stdout.take(), child.stderr.take());
    let helper = Leader::new(rt, child);
    let stdout = out.map(|p| Pipe::new(rt, p)).transpose()?;
    let stderr = err.map(|p| Pipe::new(rt, p)).transpose()?;
    Ok((helper, stdout, stderr))
}
