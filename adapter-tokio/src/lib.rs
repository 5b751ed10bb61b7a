//! # mcp-stdio-tokio
//!
//! The tokio adapter of mcp-stdio: every decision comes from the sans-IO core
//! ([`mcp_stdio_core`]); this crate only does the pipe I/O, the timers and
//! the process management, on tokio.
//!
//! - [`Client`] spawns an MCP server (never through a shell, in its own
//!   process group) and runs the session: stdout and stderr are read for the
//!   whole life of the process whatever the application does (G1), requests
//!   have deadlines and real cancels (G6), stderr is budgeted (G10), and the
//!   shutdown sequence ends with a record of what was observed (G11, G12).
//! - [`serve`] runs an MCP server on this process's stdin and stdout, with a
//!   task and a cancellation token per request (G7), bounded concurrency and
//!   the outgoing wire limit (G9).
//! - [`run_helper`] runs a command-line helper from inside a tool with both
//!   streams captured under budgets and a cancel that reaches the process
//!   group.
//!
//! The same API, with the same names and types, exists in
//! `mcp-stdio-async-std` and `mcp-stdio-blocking`.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod helper;
pub mod runtime;

/// A spawned child that leads its process group, on tokio (see
/// [`mcp_stdio_async::leader`]): its exit observed without reaping, its group
/// signalled only while the id is still ours.
pub mod leader {
    pub use mcp_stdio_async::leader::{LeaderState, ProcessGroup, Signalled, EXIT_POLL_TICK};

    /// The one owner of a spawned child and its group, on tokio.
    pub type Leader = mcp_stdio_async::leader::Leader<crate::runtime::Tokio>;
}
mod serve;

pub use mcp_stdio_async::{CancelHandle, IncomingMessage, PendingRequest, Responder};

/// A spawned MCP server and its session, driven by a task on the tokio
/// runtime it was spawned in (see [`mcp_stdio_async::Client`]).
/// [`Client::spawn`] must be called inside a tokio runtime.
pub type Client = mcp_stdio_async::Client<runtime::Tokio>;
pub use helper::{run_helper, run_helper_with_approval, ApprovalRequest, Approver};
pub use serve::{
    serve, serve_io, CancelToken, Handler, HandlerResult, RequestContext, ServeEnd, ServeOptions,
    ServeReport,
};

/// The async driver this crate runs on its runtime, documented here in full (as the core).
#[doc(inline)]
pub use mcp_stdio_async as driver;
/// The sans-IO core, documented here in full: the core's docs inlined on this crate's pages
/// link to core items, which then resolve to these pages when this crate is documented alone.
#[doc(inline)]
pub use mcp_stdio_core as core;
pub use mcp_stdio_core::basics::{BasicsError, ServerBasics};
pub use mcp_stdio_core::client::Deadline;
pub use mcp_stdio_core::helper::{HelperConfig, HelperOptions, HelperOutcome};
pub use mcp_stdio_core::host::{
    ClientOptions, HostConfig, InitializeError, RequestError, SessionRecord,
};
pub use mcp_stdio_core::CommandSpec;
