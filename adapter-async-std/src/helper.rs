//! `run_helper`: run a command-line helper from inside a tool.
//!
//! # One future, no tasks
//!
//! Unlike [`Client`](crate::Client), a helper run spawns no task: the
//! future returned by [`run_helper`] owns the [`HelperRun`] state machine,
//! the child, both pipes, the timer and the approval, and each time it is
//! polled it races "a stdout chunk, a stderr chunk, the exit, the approver's
//! answer, the cancel, the core's deadline" (`futures_lite::future::race`,
//! which picks at random among ready branches, so a flood on one stream
//! starves neither the other stream nor the cancel and the timer). The tool
//! handler awaits it, so the pipes are read for as long as the run lasts
//! (G1, G10), on whatever executor the handler runs (async-std, smol, or a
//! plain `block_on`).
//!
//! Owning everything in one future is also what makes a dropped run safe:
//! dropping it drops the pipes and the approval, and the spawned helper's guard
//! kills the helper's process group with one `killpg` (no task is spawned in
//! `Drop`); async-process reaps the dropped child in the background.
//!
//! [`HelperRun`]: mcp_stdio_core::helper::HelperRun

use std::future::{pending, Future};
use std::io;
use std::pin::{pin, Pin};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use async_io::Timer;
use async_process::{Child, ChildStderr, ChildStdout};
use futures_lite::future::race;
use futures_lite::AsyncReadExt;
use mcp_stdio_core::call::Stamp;
use mcp_stdio_core::helper::{HelperAction, HelperOptions, HelperOutcome};
use mcp_stdio_core::process::Signal;
use mcp_stdio_core::CommandSpec;

use crate::os;
use crate::serve::CancelToken;

/// Bytes read per read call, for each stream.
const READ_CHUNK: usize = 16 * 1024;

/// Now, on both clocks.
fn stamp() -> Stamp {
    let unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    Stamp::new(Instant::now(), unix_ms)
}

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
/// The run is one future and spawns no task, so it works on any executor.
/// If it is dropped before it completes (a cancelled handler), the helper's
/// process group is killed at once.
pub async fn run_helper(
    command: &CommandSpec,
    options: &HelperOptions,
    cancel: &CancelToken,
) -> HelperOutcome {
    run_helper_with_approval(command, options, cancel, &NoApprover).await
}

/// [`run_helper`] with an approval step when `options.config` has an
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
    let mut run = options.start(stamp());
    let mut helper: Option<Spawned> = None;
    let mut stdout: Option<ChildStdout> = None;
    let mut stderr: Option<ChildStderr> = None;
    let mut approval: Option<Pin<Box<dyn Future<Output = bool> + Send + '_>>> = None;
    // Built once and kept across iterations: one listener for the whole run.
    let mut cancelled = pin!(cancel.cancelled());
    let mut cancel_seen = false;
    // One timer, moved only when the core's deadline changes.
    let mut timer = Timer::never();
    let mut armed: Option<Instant> = None;
    let mut out_buf = vec![0u8; READ_CHUNK];
    let mut err_buf = vec![0u8; READ_CHUNK];
    loop {
        while let Some(action) = run.poll_action() {
            match action {
                HelperAction::RequestApproval { deadline } => {
                    let request = run.approval_request(deadline);
                    approval = Some(Box::pin(approver.approve(request)));
                }
                HelperAction::Spawn => {
                    approval = None;
                    match spawn(command) {
                        Ok(mut child) => {
                            stdout = child.stdout.take();
                            stderr = child.stderr.take();
                            helper = Some(Spawned::new(child));
                            run.handle_spawned(stamp());
                        }
                        Err(e) => run.handle_spawn_failed(stamp(), &e.to_string()),
                    }
                }
                HelperAction::SignalGroup(sig) => {
                    if let Some(h) = &helper {
                        os::signal_group(h.pgid, sig);
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
                        h.disarm();
                    }
                    options.release(&mut run);
                    return *outcome;
                }
                _ => {}
            }
        }

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
                match helper.as_mut().and_then(|h| h.exit.as_mut()) {
                    Some(status) => Wake::Exited(status.await),
                    None => pending().await,
                }
            };
            let answer = async {
                match approval.as_mut() {
                    Some(answer) => Wake::Answered(answer.await),
                    None => pending().await,
                }
            };
            let cancel = async {
                if cancel_seen {
                    pending().await
                } else {
                    cancelled.as_mut().await;
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
                if let Some(h) = &mut helper {
                    h.exit = None;
                }
                match status {
                    Ok(s) => run.handle_exited(stamp(), os::exit_status(s)),
                    // No status can ever be observed: the supervisor's
                    // deadlines end the run (`unknown`).
                    Err(e) => tracing::warn!(error = %e, "waiting for the helper failed"),
                }
            }
            Wake::Answered(approved) => {
                approval = None;
                let at = stamp();
                let r = if approved {
                    run.approve(at)
                } else {
                    run.deny(at)
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
    Exited(io::Result<std::process::ExitStatus>),
    Answered(bool),
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

type ExitFuture = Pin<Box<dyn Future<Output = io::Result<std::process::ExitStatus>> + Send>>;

/// The spawned helper. Dropped before the run finished (the run's future was
/// dropped), it kills the helper's process group: one `killpg`, in `Drop`
/// itself, before the child handle goes to async-process's reaper.
struct Spawned {
    /// The helper's pid, which is its process group id.
    pgid: u32,
    /// Whether dropping this kills the group: until `Finished`.
    armed: bool,
    /// The exit, until observed; built once, so the reaper is not asked again
    /// on every turn of the loop.
    exit: Option<ExitFuture>,
    /// Kept for the `Drop` order: the `killpg` comes first.
    _child: Child,
}

impl Spawned {
    fn new(mut child: Child) -> Self {
        Self {
            pgid: child.id(),
            armed: true,
            exit: Some(Box::pin(child.status())),
            _child: child,
        }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if self.armed {
            os::signal_group(self.pgid, Signal::Kill);
        }
    }
}
