//! `run_helper`: run a command-line helper from inside a tool, blocking the
//! calling thread.
//!
//! The run is the async driver's owner ([`mcp_stdio_async::run_helper_here`])
//! on the calling thread, in a [`Mio`] reactor of its own: the two output
//! pipes non-blocking and, on Linux, a pidfd that makes the exit a readiness
//! event; every decision is the core's `HelperRun`. A cancel of the
//! [`CancelToken`] from another thread wakes the run at once (G7). An
//! approval step asks the [`Approver`] on a thread of its own
//! (`mcp-approval`): the run waits for its answer, the deadline or a cancel,
//! whichever comes first, and never for the thread; an approver that answers
//! late, or never, is left behind and its answer is dropped.

use std::future::Future;

use mcp_stdio_core::CommandSpec;
use mcp_stdio_core::{HelperOptions, HelperOutcome};

use crate::runtime::Mio;
use crate::serve::CancelToken;
use crate::wait::wait;

pub use mcp_stdio_core::ApprovalRequest;

/// Decides approval requests: `true` approves, `false` denies.
///
/// [`approve`](Self::approve) blocks for as long as it takes (a dialog, a
/// policy service). It runs on a thread of its own; the deadline is enforced
/// by [`run_helper_with_approval`], not by the approver, and an answer that
/// comes after it is ignored.
pub trait Approver: Send + Sync {
    /// Asks for a decision.
    fn approve(&self, request: ApprovalRequest) -> bool;
}

impl<F> Approver for F
where
    F: Fn(ApprovalRequest) -> bool + Send + Sync,
{
    fn approve(&self, request: ApprovalRequest) -> bool {
        self(request)
    }
}

/// A plain approver as the driver's: asked on a thread of its own.
struct OnThread<A>(A);

impl<A: Approver + Clone + 'static> mcp_stdio_async::Approver for OnThread<A> {
    fn approve(&self, request: ApprovalRequest) -> impl Future<Output = bool> + Send {
        let (tx, rx) = async_channel::bounded(1);
        let approver = self.0.clone();
        let asked = std::thread::Builder::new()
            .name("mcp-approval".into())
            .spawn(move || {
                let _ = tx.try_send(approver.approve(request));
            });
        async move {
            if let Err(e) = asked {
                tracing::warn!(error = %e, "no thread for the approver; denying");
                return false;
            }
            rx.recv().await.unwrap_or_else(|_| {
                tracing::warn!("the approver ended without an answer (it panicked); denying");
                false
            })
        }
    }
}

/// Runs `command` as a helper, blocking the calling thread until it is over:
/// its own process group, stdin from `/dev/null`, stdout and stderr each
/// captured within its budget and read to EOF even past it (G10). A cancel
/// of `cancel` from another thread → `SIGTERM` to the group → grace →
/// `SIGKILL` (G7, G11). The outcome holds the exit status actually observed,
/// both captures and the call record (G12).
///
/// If the run unwinds (a panic), the helper's process group is killed.
pub fn run_helper(
    command: &CommandSpec,
    options: &HelperOptions,
    cancel: &CancelToken,
) -> HelperOutcome {
    run_helper_with_approval(command, options, cancel, &|_| false)
}

/// [`run_helper`] with an approval step when `options.get_approval()` gives an
/// approval deadline: the request is raised before the spawn, without
/// waiting for any output, and its deadline runs on the clock alone.
///
/// The approver runs on its own thread and the run returns at the deadline
/// (denied, `approval_timeout`) or at a cancel (`cancelled`) without waiting
/// for it. That thread may outlive this call, so the approver is cloned into
/// it: hence `Clone + 'static`, which the tokio adapter (whose approval
/// future is simply dropped) does not need. A closure that captures
/// `Arc`s or owned `Clone` values qualifies.
pub fn run_helper_with_approval<A: Approver + Clone + 'static>(
    command: &CommandSpec,
    options: &HelperOptions,
    cancel: &CancelToken,
    approver: &A,
) -> HelperOutcome {
    let approver = OnThread(approver.clone());
    match Mio::new() {
        Ok(rt) => rt.block_on(mcp_stdio_async::run_helper_here(
            &rt, command, options, cancel, &approver,
        )),
        // No reactor here: the driver's own way says why the run did not start.
        Err(e) => {
            tracing::warn!(error = %e, "no reactor for a helper run");
            wait(mcp_stdio_async::run_helper_with_approval::<Mio, _>(
                command, options, cancel, &approver,
            ))
        }
    }
}
