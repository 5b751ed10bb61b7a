//! # mcp-stdio-blocking
//!
//! The blocking adapter of mcp-stdio, for hosts that cannot use an async
//! runtime: plain threads and [`mio`], and no async runtime anywhere in the
//! dependency tree. It is a synchronous facade over the one driver
//! ([`mcp_stdio_async`], inlined here as [`driver`]) run on its mio runtime
//! ([`runtime::Mio`]): the same loops as the tokio and async-std adapters,
//! every decision the sans-IO core's ([`mcp_stdio_core`]).
//!
//! - [`Client`] spawns an MCP server and runs its session on a driver thread
//!   of its own: stdout and stderr read whatever the application does (G1),
//!   deadlines and real cancels (G6), stderr budgeted (G10), a shutdown that
//!   ends with a record of what was observed (G11, G12).
//! - [`serve`] runs an MCP server on stdin and stdout: the loop on the
//!   calling thread, handlers on a pool of threads, each request with a
//!   [`CancelToken`] (G7), bounded concurrency and the wire limit (G9).
//! - [`run_helper`] runs a command-line helper on the calling thread under
//!   budgets (G10), its [`CancelToken`] reaching the helper's group (G7,
//!   G11); [`run_helper_with_approval`] adds an approval step whose deadline
//!   holds whatever the [`Approver`] does.
//!
//! The API is the async adapters', names and types, with the waits made
//! blocking: [`PendingRequest::wait`] (or `wait_timeout`),
//! [`Client::next_incoming`] with a timeout, an [`Approver`] answering a
//! plain `bool` on a thread of its own (hence `Clone + 'static`).
//!
//! ## Example: a host on plain threads
//!
//! Spawn a server, call a tool from two threads through handles, follow a
//! long call's progress (an iterator that ends with the call), and shut down
//! (`examples/threads_host.rs`):
//!
#![doc = concat!("```no_run\n", include_str!("../examples/threads_host.rs"), "```")]
//!
//! A handler thread cannot be aborted: a cancel sets the request's
//! [`CancelToken`] and suppresses its response; the handler looks at the
//! token to stop early, and passes it to [`run_helper`]. Unix-only.
//!
//! [`mio`]: https://docs.rs/mio/1
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(unix)]
mod client;
#[cfg(unix)]
mod helper;
/// The executor every driver of this crate runs on: the driver's mio runtime
/// (a `Client`'s thread, the caller's for `serve` and `run_helper`, a pool for handlers).
#[cfg(unix)]
pub mod runtime {
    pub use mcp_stdio_async::Mio;
}
#[cfg(unix)]
mod serve;

#[cfg(unix)]
pub use client::{
    CancelHandle, Client, ClientHandle, IncomingMessage, PendingRequest, ProgressStream, Responder,
};
#[cfg(unix)]
pub use helper::{run_helper, run_helper_with_approval, ApprovalRequest, Approver};
#[cfg(unix)]
pub use serve::{
    serve, serve_io, CancelToken, Handler, HandlerResult, RequestContext, ServeEnd, ServeOptions,
    ServeReport,
};

/// The async driver this crate's [`Client`], [`serve`] and [`run_helper`]
/// run on its mio executor ([`runtime::Mio`]), documented here in full for
/// the same reason as the core.
#[cfg(unix)]
#[doc(inline)]
pub use mcp_stdio_async as driver;
/// The sans-IO core, documented here in full: the core's docs inlined on this crate's pages
/// link to core items, which then resolve to these pages when this crate is documented alone.
#[doc(inline)]
pub use mcp_stdio_core as core;
pub use mcp_stdio_core::VersionPolicy;
pub use mcp_stdio_core::{BasicsError, ClientOptions, CommandSpec, Deadline, HelperOptions};
pub use mcp_stdio_core::{HelperOutcome, InitializeError, LiveSnapshot, Negotiated, NegotiatedVia};
pub use mcp_stdio_core::{Progress, ProgressPoll, RequestError, ServerBasics, SessionRecord};
/// What [`Client::signal_group`] did.
pub use mcp_stdio_sys::Signalled;
