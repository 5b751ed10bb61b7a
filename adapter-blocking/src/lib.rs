//! # mcp-stdio-blocking
//!
//! The blocking adapter of mcp-stdio, for hosts that cannot use an async
//! runtime: plain threads and [`mio`], and no async runtime anywhere in the
//! dependency tree. It is a synchronous facade over the one driver
//! ([`mcp_stdio_async`], inlined here as [`driver`]) run on an executor of
//! its own ([`runtime::Mio`]: a mio reactor, one timer, a single-future
//! `block_on`): the same loops as the tokio and async-std adapters, so a
//! behaviour lives in one place. Every decision comes from the sans-IO core
//! ([`mcp_stdio_core`]).
//!
//! - [`Client`] spawns an MCP server (never through a shell, in its own
//!   process group) and runs the session on one driver thread per server: stdout
//!   and stderr are read for the whole life of the process whatever the
//!   application threads do (G1), requests have deadlines and real cancels
//!   (G6), stderr is budgeted (G10), and the shutdown sequence ends with a
//!   record of what was observed (G11, G12). Its methods block the calling
//!   thread, never the driver thread.
//! - [`serve`] runs an MCP server on this process's stdin and stdout, the
//!   loop on the calling thread and the handlers on a pool of threads, each
//!   request with a [`CancelToken`] (G7), bounded concurrency and the
//!   outgoing wire limit (G9).
//! - [`run_helper`] runs a command-line helper from inside a tool on the
//!   calling thread: both streams captured under budgets and drained to EOF
//!   (G10), a [`CancelToken`] whose cancel reaches the helper's process
//!   group (`SIGTERM`, grace, `SIGKILL`; G7, G11), and an outcome with the
//!   exit status actually observed and the call record (G12).
//!   [`run_helper_with_approval`] adds an approval step before the spawn,
//!   whose deadline the run enforces whatever the [`Approver`] does.
//!
//! The same API, with the same names and types, exists in
//! `mcp-stdio-tokio` and `mcp-stdio-async-std`: switching adapters is a
//! change of import. Where those return futures, this crate blocks:
//! `async fn`s are plain functions, a [`PendingRequest`] is waited for with
//! [`PendingRequest::wait`] (or [`PendingRequest::wait_timeout`]), and
//! [`Client::next_incoming`] takes a timeout. An [`Approver`] answers with a
//! plain `bool` on a thread of its own, which the run may leave behind at the
//! deadline, so [`run_helper_with_approval`] takes an approver that is
//! `Clone + 'static`.
//!
//! ## Example: a host on plain threads
//!
//! Spawn a server, call a tool from two threads through handles, follow a
//! long call's progress (an iterator that ends with the call), and shut down.
//!
//! ```no_run
//! use mcp_stdio_blocking::{Client, ClientOptions, CommandSpec};
//! use serde_json::json;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let server = CommandSpec::from_argv(["npx", "-y", "@modelcontextprotocol/server-everything"])
//!         .ok_or("no command")?;
//!     let client = Client::spawn(&server, ClientOptions::default())?;
//!     client.initialize()?;
//!     let workers: Vec<_> = (0..2)
//!         .map(|i| {
//!             let handle = client.handle();
//!             std::thread::spawn(move || handle.call_tool("echo", &json!({"message": format!("from {i}")})))
//!         })
//!         .collect();
//!     for w in workers {
//!         eprintln!("{}", w.join().expect("thread")?.get());
//!     }
//!     let (call, progress) = client
//!         .call_tool_with_progress("trigger-long-running-operation", &json!({"duration": 2, "steps": 4}))?;
//!     for p in progress {
//!         eprintln!("progress {} of {:?}", p.progress, p.total);
//!     }
//!     eprintln!("result: {}", call.wait()?.get());
//!     let record = client.shutdown();
//!     eprintln!("exit {:?}", record.exit_status());
//!     Ok(())
//! }
//! ```
//!
//! One difference is in the nature of threads: a handler thread cannot be
//! aborted. A cancel sets the request's [`CancelToken`] and suppresses its
//! response; the handler must look at the token to stop early (see
//! [`RequestContext::cancel_token`]). Pass that token to [`run_helper`]: a
//! cancel wakes the run at once and reaches the helper's process group.
//!
//! The crate is Unix-only (process groups, non-blocking pipes, mio's
//! reactor).
//!
//! [`mio`]: https://docs.rs/mio/1
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(unix)]
mod client;
#[cfg(unix)]
mod helper;
/// The executor every driver of this crate runs on: the driver's mio
/// runtime (a reactor per driver, a thread of its own per `Client`, the
/// calling thread for `serve` and `run_helper`, a pool of threads for
/// handlers).
#[cfg(unix)]
pub mod runtime {
    pub use mcp_stdio_async::Mio;
}
#[cfg(unix)]
mod serve;
#[cfg(unix)]
mod wait;

#[cfg(unix)]
pub use client::{
    CancelHandle, Client, ClientHandle, IncomingMessage, PendingRequest, ProgressStream, Responder,
};
#[cfg(unix)]
pub use helper::{run_helper, run_helper_with_approval, ApprovalRequest, Approver};
pub use mcp_stdio_core::{LiveSnapshot, Progress, ProgressPoll};
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
pub use mcp_stdio_core::CommandSpec;
pub use mcp_stdio_core::Deadline;
pub use mcp_stdio_core::{BasicsError, ServerBasics};
pub use mcp_stdio_core::{ClientOptions, InitializeError, RequestError, SessionRecord};
pub use mcp_stdio_core::{HelperOptions, HelperOutcome};
pub use mcp_stdio_core::{Negotiated, NegotiatedVia, VersionPolicy};
/// What [`Client::signal_group`] did.
pub use mcp_stdio_sys::Signalled;
