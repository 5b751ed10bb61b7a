//! `run_helper`: the driver's helper owner ([`run_helper_here`]) on the calling
//! thread, an approver on a thread of its own, never waited for past the deadline.

use std::future::Future;

use mcp_stdio_core::{CommandSpec, HelperOptions, HelperOutcome};

use crate::runtime::Mio;
use crate::serve::CancelToken;
use mcp_stdio_async::wait::wait;
use mcp_stdio_async::{run_helper_here, run_helper_with_approval as unowned};

pub use mcp_stdio_core::ApprovalRequest;

/// Decides approval requests: `true` approves, `false` denies. It may block
/// (a dialog, a policy service) on its thread of its own: the deadline is
/// [`run_helper_with_approval`]'s, and an answer after it is ignored.
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

/// Runs `command` as a helper, blocking the calling thread until it is
/// over (see the driver's [`run_helper`](mcp_stdio_async::run_helper): its
/// group, budgets, cancel path and outcome). A panic kills its group.
pub fn run_helper(
    command: &CommandSpec,
    options: &HelperOptions,
    cancel: &CancelToken,
) -> HelperOutcome {
    run_helper_with_approval(command, options, cancel, &|_| false)
}

/// [`run_helper`] with an approval step (see the driver's
/// [`run_helper_with_approval`](mcp_stdio_async::run_helper_with_approval)).
/// The approver runs on a thread that may outlive this call (the run returns
/// at the deadline or a cancel): hence `Clone + 'static`.
pub fn run_helper_with_approval<A: Approver + Clone + 'static>(
    command: &CommandSpec,
    options: &HelperOptions,
    cancel: &CancelToken,
    approver: &A,
) -> HelperOutcome {
    let (approver, cancel) = (OnThread(approver.clone()), &**cancel);
    match Mio::new() {
        Ok(rt) => rt.block_on(run_helper_here(&rt, command, options, cancel, &approver)),
        // No reactor: the driver's own way says why the run did not start.
        Err(_) => wait(unowned::<Mio, _>(command, options, cancel, &approver)),
    }
}
