//! `run_helper` on this runtime: the driver's helper run
//! ([`mcp_stdio_async::run_helper`]), its owner a thread of its own: works on any executor.

pub use mcp_stdio_async::{ApprovalRequest, Approver};
use mcp_stdio_core::helper::{HelperOptions, HelperOutcome};
use mcp_stdio_core::CommandSpec;

use crate::runtime::AsyncStd;
use crate::serve::CancelToken;

/// Runs `command` as a helper: its own process group, stdin from
/// `/dev/null`, stdout and stderr each captured within its budget and read
/// to EOF even past it (G10). `cancel` → `SIGTERM` to the group → grace →
/// `SIGKILL` (G7, G11). The outcome holds the exit status actually observed,
/// both captures and the call record (G12). The run's owner outlives this
/// future (see [`mcp_stdio_async::run_helper`]).
pub async fn run_helper(
    command: &CommandSpec,
    options: &HelperOptions,
    cancel: &CancelToken,
) -> HelperOutcome {
    mcp_stdio_async::run_helper::<AsyncStd>(command, options, cancel).await
}

/// [`run_helper`] with an approval step when `options.get_config()` has an
/// approval deadline (see [`mcp_stdio_async::run_helper_with_approval`]).
pub async fn run_helper_with_approval<A: Approver>(
    command: &CommandSpec,
    options: &HelperOptions,
    cancel: &CancelToken,
    approver: &A,
) -> HelperOutcome {
    mcp_stdio_async::run_helper_with_approval::<AsyncStd, A>(command, options, cancel, approver)
        .await
}
