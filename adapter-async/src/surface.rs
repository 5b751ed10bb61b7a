//! The API the async adapters share, for a glob re-export
//! (`pub use mcp_stdio_async::surface::*`) and [`runtime_api!`](crate::runtime_api):
//! the same names and types in `mcp-stdio-tokio` and `mcp-stdio-async-std`
//! (and, by name, in `mcp-stdio-blocking`), so switching adapters is a change
//! of import.

pub use crate::client::{CancelHandle, IncomingMessage, PendingRequest, ProgressStream, Responder};
pub use crate::helper::{ApprovalRequest, Approver};
pub use crate::serve::{
    CancelToken, Handler, HandlerResult, RequestContext, ServeEnd, ServeOptions, ServeReport,
};
pub use mcp_stdio_core::CommandSpec;
pub use mcp_stdio_core::Deadline;
pub use mcp_stdio_core::{BasicsError, ServerBasics};
pub use mcp_stdio_core::{ClientOptions, InitializeError, RequestError, SessionRecord};
pub use mcp_stdio_core::{HelperOptions, HelperOutcome};
pub use mcp_stdio_core::{LiveSnapshot, Progress};
pub use mcp_stdio_core::{Negotiated, NegotiatedVia, VersionPolicy};
/// What `Client::signal_group` did.
pub use mcp_stdio_sys::Signalled;

/// The functions of an adapter crate on its runtime: `Client` (a type
/// alias), `serve`, `run_helper` and `run_helper_with_approval`, each the
/// driver's, with the runtime filled in; and `serve_io` over the runtime's
/// own reader and writer traits (`$read`, `$write`), wrapped as the loop's
/// `Source` and `Sink` by `$io`. `$where` says, for the docs, where the
/// drivers and the helper's owner run.
#[macro_export]
macro_rules! runtime_api {
    ($rt:ty, $where:literal, io: $io:path, $read:path, $write:path) => {
        /// A spawned MCP server and its session (see
        /// [`mcp_stdio_async::Client`]).
        #[doc = $where]
        pub type Client = $crate::Client<$rt>;

        /// A cloneable handle on a [`Client`]'s session (see
        /// [`mcp_stdio_async::ClientHandle`]).
        pub type ClientHandle = $crate::ClientHandle<$rt>;

        /// Serves MCP on this process's stdin and stdout until stdin closes
        /// and in-flight work drains (bounded by `drain_timeout`), a task and
        /// a [`CancelToken`] per request. Only protocol messages go to stdout
        /// (G13); log with `tracing` to stderr. See
        /// [`mcp_stdio_async::serve`] for the basics it answers and how stdin
        /// and stdout are read and written.
        ///
        /// # Errors
        /// Writing stdout failed (the client went away): every handler was
        /// aborted; or there is no runtime to serve on.
        pub async fn serve<H: $crate::Handler>(
            options: $crate::ServeOptions,
            handler: H,
        ) -> ::std::io::Result<$crate::ServeReport> {
            $crate::serve::<$rt, H>(options, handler).await
        }

        /// [`serve`] over any reader and writer of the runtime (a pipe, a
        /// socket, a test harness). The loop never waits for a write or a
        /// flush alone (G1).
        ///
        /// # Errors
        /// Writing or flushing `output` failed: every handler was aborted;
        /// or there is no runtime to serve on.
        pub async fn serve_io<R: $read + Unpin, W: $write + Unpin, H: $crate::Handler>(
            input: R,
            output: W,
            options: $crate::ServeOptions,
            handler: H,
        ) -> ::std::io::Result<$crate::ServeReport> {
            let rt = <$rt as $crate::Runtime>::current()?;
            $crate::serve_io(rt, $io(input), $io(output), options, handler).await
        }

        /// Runs `command` as a helper: its own process group, stdin from
        /// `/dev/null`, stdout and stderr each captured within its budget and
        /// read to EOF even past it (G10). `cancel` → `SIGTERM` to the group →
        /// grace → `SIGKILL` (G7, G11). The outcome holds the exit status
        /// actually observed, both captures and the call record (G12). The
        /// run's owner outlives this future (see
        /// [`mcp_stdio_async::run_helper`]).
        #[doc = $where]
        pub async fn run_helper(
            command: &$crate::surface::CommandSpec,
            options: &$crate::surface::HelperOptions,
            cancel: &impl $crate::CancelSignal,
        ) -> $crate::surface::HelperOutcome {
            $crate::run_helper::<$rt>(command, options, cancel).await
        }

        /// [`run_helper`] with an approval step when `options.get_approval()`
        /// is set (see
        /// [`mcp_stdio_async::run_helper_with_approval`]).
        pub async fn run_helper_with_approval<A: $crate::Approver>(
            command: &$crate::surface::CommandSpec,
            options: &$crate::surface::HelperOptions,
            cancel: &impl $crate::CancelSignal,
            approver: &A,
        ) -> $crate::surface::HelperOutcome {
            $crate::run_helper_with_approval::<$rt, A>(command, options, cancel, approver).await
        }
    };
}
